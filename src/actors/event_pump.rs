//! The event pump: the task that forwards observability events from one fan-out subscriber
//! queue into an actor's mailbox (the Commentator's, the Metrics actor's). When the actor
//! falls behind it is the bounded queue that drops (and counts) events, never the actor's
//! unbounded mailbox. The queue's receiving end is shared ([`SharedEventReceiver`]), so a
//! restarted actor starts a new pump in `pre_start` and takes the queue over where its
//! predecessor left it.

use std::sync::Arc;

use ractor::{ActorRef, Message};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::messages::events::ObservedEvent;

/// The receiving end of one fan-out subscriber queue, shareable so that each incarnation of
/// an actor (across supervisor restarts) can take it over in turn.
#[derive(Debug, Clone)]
pub struct SharedEventReceiver(Arc<tokio::sync::Mutex<mpsc::Receiver<ObservedEvent>>>);

impl SharedEventReceiver {
    pub fn new(receiver: mpsc::Receiver<ObservedEvent>) -> SharedEventReceiver {
        SharedEventReceiver(Arc::new(tokio::sync::Mutex::new(receiver)))
    }
}

/// A running pump; dropping it stops the pump (and releases the receiver for the next one).
#[derive(Debug)]
pub struct EventPump(JoinHandle<()>);

impl EventPump {
    /// Whether the pump has stopped (its queue closed or its target stopped).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for EventPump {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Forwards every event from `receiver` to `target`, wrapped by `wrap`, until the queue
/// closes or the target stops. Waits for any earlier pump on the same receiver to stop
/// first. The bounded queue behind `receiver` is what absorbs (and, when full, drops) a
/// burst; the target's mailbox only ever holds what the pump has taken.
pub fn spawn_event_pump<M: Message>(
    receiver: SharedEventReceiver,
    target: ActorRef<M>,
    wrap: fn(ObservedEvent) -> M,
) -> EventPump {
    EventPump(tokio::spawn(async move {
        let mut receiver = receiver.0.lock_owned().await;
        while let Some(event) = receiver.recv().await {
            if target.cast(wrap(event)).is_err() {
                break;
            }
        }
    }))
}
