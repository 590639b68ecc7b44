//! The recent-events log: a bounded ring buffer of observability events ([`EventLog`]),
//! shared by the Commentator, which appends every event it comments on, and `/debug/events`,
//! which reads it directly (so the log survives the Commentator's restarts and stays readable
//! while it is busy). When full, the oldest event makes room for the newest.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::messages::events::ObservedEvent;

/// How many events the Commentator keeps unless told otherwise.
pub const DEFAULT_EVENT_LOG_CAPACITY: usize = 500;

/// A bounded, shared ring buffer of recent events (cheap to clone; clones share the buffer).
/// When full, the oldest event makes room for the newest.
#[derive(Debug, Clone)]
pub struct EventLog {
    events: Arc<Mutex<VecDeque<ObservedEvent>>>,
    capacity: usize,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::new(DEFAULT_EVENT_LOG_CAPACITY)
    }
}

impl EventLog {
    /// An empty log holding at most `capacity` events (at least one).
    pub fn new(capacity: usize) -> EventLog {
        let capacity = capacity.max(1);
        EventLog {
            events: Arc::new(Mutex::new(VecDeque::with_capacity(capacity))),
            capacity,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<ObservedEvent>> {
        // A poisoned lock means a holder panicked between two plain VecDeque operations; the
        // buffer is still a valid list of events, so keep using it.
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Appends an event, evicting the oldest when the log is full.
    pub fn push(&self, event: ObservedEvent) {
        push_bounded(&mut self.lock(), event, self.capacity);
    }

    /// Runs `f` over the history (oldest first) and then appends `event`, under one lock, so
    /// the history `f` sees is exactly what preceded the event.
    pub fn relate_and_push<T>(
        &self,
        event: ObservedEvent,
        f: impl FnOnce(&VecDeque<ObservedEvent>, &ObservedEvent) -> T,
    ) -> T {
        let mut events = self.lock();
        let result = f(&events, &event);
        push_bounded(&mut events, event, self.capacity);
        result
    }

    /// A copy of the log, oldest first.
    pub fn snapshot(&self) -> Vec<ObservedEvent> {
        self.lock().iter().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

fn push_bounded(events: &mut VecDeque<ObservedEvent>, event: ObservedEvent, capacity: usize) {
    while events.len() >= capacity {
        events.pop_front();
    }
    events.push_back(event);
}

#[cfg(test)]
mod tests {
    use crate::messages::events::test_events::{at, changed, deployed};

    use super::*;
    use crate::messages::events::EventKind;

    #[test]
    fn the_event_log_keeps_only_the_newest_events_up_to_its_capacity() {
        let log = EventLog::new(3);
        for i in 0..5u64 {
            log.push(at(Some(i), i, EventKind::AllIndexesSynced));
        }
        let kept: Vec<_> = log.snapshot().iter().map(|e| e.correlation).collect();
        assert_eq!(kept, vec![Some(2), Some(3), Some(4)]);
    }

    #[test]
    fn relating_sees_the_history_before_the_event_and_then_records_it() {
        let log = EventLog::new(10);
        log.push(changed(1, 0, "Service", "default/web"));
        let seen = log.relate_and_push(deployed(1, 50, "haproxy-0"), |history, _| history.len());
        assert_eq!(seen, 1);
        assert_eq!(log.len(), 2);
    }
}
