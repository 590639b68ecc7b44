//! Watch framing: what one watched resource's stream of [`ResourceEvent`]s does to its
//! [`ResourceStore`], and when the Reconciler is to hear of it. [`WatchState::on_event`]
//! takes one event and answers with a [`WatchOutcome`]; the ResourceWatcher actor only
//! forwards events, publishes what changed and sends what the outcome says.
//!
//! - An initial list (`InitStart`, `InitApply`…, `InitDone`) replaces the store's content
//!   as one; objects the field or label selector does not select are left out of it. The
//!   first completed list syncs the watch ([`WatchOutcome::synced`]); before that nobody is
//!   notified.
//! - A later list (a relist after a watch broke, or by a restarted watcher, whose store has
//!   listed before) that differs from the store is one change; an identical one is none.
//! - `Apply` stores a selected object; an object that stopped matching the selector leaves
//!   the store. `Delete` removes the object.
//! - Changes are batched: the first change of a batch opens it with a new correlation id and
//!   the instant it was seen; every change until the batch is handed on carries that id. With
//!   a zero debounce the batch is handed on at once ([`Notify::Now`]); otherwise the first
//!   change asks for one flush after the debounce ([`Notify::FlushAfter`]), and
//!   [`WatchState::on_flush`] hands the batch on.
//!
//! Time and correlation ids come from the caller, so tests drive every step synchronously.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{CompactObject, ObjectRef, ResourceStore, StoreError};

/// One event of a resource source (a Kubernetes watch, a manifest folder, a test).
/// Mirrors kube's watcher events: an initial list framed by `InitStart`/`InitDone`, then
/// changes.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceEvent {
    /// A (re)list begins: objects until `InitDone` replace the store's content.
    InitStart,
    InitApply(CompactObject),
    /// The list is complete; objects not listed are gone.
    InitDone,
    Apply(CompactObject),
    Delete(CompactObject),
}

/// Which objects of the watched resource its store keeps: the resource's field and label
/// selectors (the compiled config's, in the controller).
pub trait ObjectSelection {
    /// Whether a field or label selector applies at all; without one every object is kept
    /// and listed objects need not be parsed to decide.
    fn filters_objects(&self) -> bool;
    /// Whether the selectors select this object.
    fn selects(&self, object: &Value) -> bool;
}

/// Changes the Reconciler has not been told about yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeBatch {
    /// How many changes the batch holds.
    pub changes: usize,
    /// The id the batch's changes, and the reconciliation they cause, carry.
    pub correlation: u64,
    /// When the first change of the batch was seen.
    pub first_seen: Instant,
}

/// What changed in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// One object was stored or left the store. `deleted` is true for a `Delete` event; an
    /// object that stopped matching the selector leaves the store with `deleted: false`.
    Object { object: ObjectRef, deleted: bool },
    /// A relist replaced the content with a different one.
    Relist,
}

/// One change the event made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreChanged {
    pub change: Change,
    /// The correlation id of the batch the change belongs to.
    pub correlation: u64,
    /// How many objects the store holds after the change.
    pub objects: usize,
}

/// Whether to tell the Reconciler now, later or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Nothing to tell yet (no change, not synced, or a flush is already due).
    Nothing,
    /// Tell the Reconciler about this batch now (zero debounce).
    Now(ChangeBatch),
    /// Call [`WatchState::on_flush`] after this long (the debounce), then tell.
    FlushAfter(Duration),
}

/// What one event did.
#[derive(Debug)]
pub struct WatchOutcome {
    /// The change to publish, if the store changed.
    pub changed: Option<StoreChanged>,
    /// The initial list completed with this event, leaving this many objects: the watch is
    /// synced now.
    pub synced: Option<usize>,
    /// Objects that could not be stored.
    pub rejected: Vec<StoreError>,
    pub notify: Notify,
}

/// The framing and batching state of one watched resource (see the module documentation).
pub struct WatchState {
    store: Arc<ResourceStore>,
    /// The list being received, between `InitStart` and `InitDone`.
    listing: Option<Vec<CompactObject>>,
    synced: bool,
    pending: Option<ChangeBatch>,
    flush_due: bool,
    debounce: Duration,
    next_correlation: Box<dyn FnMut() -> u64 + Send>,
}

impl std::fmt::Debug for WatchState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchState")
            .field("store", &self.store)
            .field("synced", &self.synced)
            .field("pending", &self.pending)
            .field("flush_due", &self.flush_due)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

impl WatchState {
    /// Watches into `store`, handing batches on after `debounce`, numbering batches with
    /// `next_correlation`. A store that has listed before (a restarted watcher's) is synced
    /// already: its next list is a relist, a change like any other.
    pub fn new(
        store: Arc<ResourceStore>,
        debounce: Duration,
        next_correlation: Box<dyn FnMut() -> u64 + Send>,
    ) -> WatchState {
        let synced = store.has_listed();
        WatchState {
            store,
            listing: None,
            synced,
            pending: None,
            flush_due: false,
            debounce,
            next_correlation,
        }
    }

    pub fn store(&self) -> &Arc<ResourceStore> {
        &self.store
    }

    /// Whether an initial list has completed.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Applies one event seen at `now`.
    pub fn on_event(
        &mut self,
        event: ResourceEvent,
        selection: &dyn ObjectSelection,
        now: Instant,
    ) -> WatchOutcome {
        let mut outcome = WatchOutcome {
            changed: None,
            synced: None,
            rejected: Vec::new(),
            notify: Notify::Nothing,
        };
        let change = match event {
            ResourceEvent::InitStart => {
                self.listing = Some(Vec::new());
                None
            }
            ResourceEvent::InitApply(object) => {
                // Only a field or label selector needs the object's fields here; the store
                // parses every object once anyway.
                if !selection.filters_objects() || selection.selects(&object.to_value()) {
                    self.listing.get_or_insert_with(Vec::new).push(object);
                }
                None
            }
            ResourceEvent::InitDone => {
                let objects = self.listing.take().unwrap_or_default();
                let relist = self.store.relist(objects);
                outcome.rejected = relist.rejected;
                if !self.synced {
                    self.synced = true;
                    outcome.synced = Some(self.store.len());
                    None
                } else if relist.changed {
                    // A relist that differs from the store carries changes made meanwhile.
                    Some(Change::Relist)
                } else {
                    None
                }
            }
            ResourceEvent::Apply(object) => {
                let value = object.to_value();
                let identity = ObjectRef::of(&value);
                let changed = if selection.selects(&value) {
                    match self.store.apply_parsed(object, Some(value)) {
                        Ok(_) => true,
                        Err(error) => {
                            outcome.rejected.push(error);
                            false
                        }
                    }
                } else {
                    // An object that stopped matching the selector leaves the store.
                    self.store.delete(&value)
                };
                // A stored object has a name (the store refuses one without).
                identity.filter(|_| changed).map(|object| Change::Object {
                    object,
                    deleted: false,
                })
            }
            ResourceEvent::Delete(object) => ObjectRef::of(&object.to_value())
                .filter(|identity| self.store.delete_ref(identity))
                .map(|object| Change::Object {
                    object,
                    deleted: true,
                }),
        };
        if let Some(change) = change {
            let correlation = self.note_change(now);
            outcome.changed = Some(StoreChanged {
                change,
                correlation,
                objects: self.store.len(),
            });
        }
        outcome.notify = self.notify();
        outcome
    }

    /// The debounce asked for by [`Notify::FlushAfter`] has passed: the batch to hand on,
    /// if any.
    pub fn on_flush(&mut self) -> Option<ChangeBatch> {
        self.flush_due = false;
        self.pending.take()
    }

    /// Counts one change, opening a batch (with a new correlation id) if none is open, and
    /// returns the batch's correlation id.
    fn note_change(&mut self, now: Instant) -> u64 {
        let next_correlation = &mut self.next_correlation;
        let pending = self.pending.get_or_insert_with(|| ChangeBatch {
            changes: 0,
            correlation: next_correlation(),
            first_seen: now,
        });
        pending.changes += 1;
        pending.correlation
    }

    fn notify(&mut self) -> Notify {
        if !self.synced || self.pending.is_none() {
            return Notify::Nothing;
        }
        if self.debounce.is_zero() {
            return self.pending.take().map_or(Notify::Nothing, Notify::Now);
        }
        if self.flush_due {
            return Notify::Nothing;
        }
        self.flush_due = true;
        Notify::FlushAfter(self.debounce)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Selects objects labelled `app=web` (a label selector).
    struct WebOnly;

    impl ObjectSelection for WebOnly {
        fn filters_objects(&self) -> bool {
            true
        }
        fn selects(&self, object: &Value) -> bool {
            object
                .pointer("/metadata/labels/app")
                .and_then(Value::as_str)
                == Some("web")
        }
    }

    /// No selector: every object is kept.
    struct Everything;

    impl ObjectSelection for Everything {
        fn filters_objects(&self) -> bool {
            false
        }
        fn selects(&self, _: &Value) -> bool {
            true
        }
    }

    fn object(name: &str, app: &str, port: u16) -> CompactObject {
        CompactObject::from_value(&serde_json::json!({
            "metadata": {"namespace": "default", "name": name, "labels": {"app": app}},
            "spec": {"port": port},
        }))
    }

    fn watch(debounce: Duration) -> WatchState {
        let store = ResourceStore::new("services", Vec::new(), Vec::new()).expect("store");
        let mut next = 0;
        WatchState::new(
            Arc::new(store),
            debounce,
            Box::new(move || {
                next += 1;
                next
            }),
        )
    }

    fn names(state: &WatchState) -> Vec<String> {
        state
            .store()
            .list()
            .iter()
            .filter_map(|o| ObjectRef::of(&o.to_value()).map(|r| r.name))
            .collect()
    }

    /// Sends a whole list: `InitStart`, one `InitApply` per object, `InitDone`; the outcome
    /// of `InitDone`.
    fn list(
        state: &mut WatchState,
        objects: Vec<CompactObject>,
        selection: &dyn ObjectSelection,
        now: Instant,
    ) -> WatchOutcome {
        state.on_event(ResourceEvent::InitStart, selection, now);
        for object in objects {
            let outcome = state.on_event(ResourceEvent::InitApply(object), selection, now);
            assert!(
                outcome.changed.is_none(),
                "a listed object alone is no change"
            );
        }
        state.on_event(ResourceEvent::InitDone, selection, now)
    }

    #[test]
    fn the_initial_list_replaces_the_store_syncs_the_watch_and_is_no_change() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        state
            .store()
            .apply(object("stale", "web", 1))
            .expect("stored");
        assert!(!state.is_synced());
        let done = list(
            &mut state,
            vec![object("a", "web", 80), object("b", "web", 81)],
            &Everything,
            now,
        );
        assert_eq!(done.synced, Some(2));
        assert!(done.changed.is_none());
        assert_eq!(done.notify, Notify::Nothing);
        assert!(state.is_synced());
        assert_eq!(names(&state), vec!["a", "b"]);
    }

    #[test]
    fn changes_before_the_initial_list_completes_are_told_once_it_has() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        let early = state.on_event(
            ResourceEvent::Apply(object("a", "web", 80)),
            &Everything,
            now,
        );
        assert!(early.changed.is_some());
        assert_eq!(early.notify, Notify::Nothing, "not synced: nobody is told");
        let done = list(&mut state, vec![object("a", "web", 80)], &Everything, now);
        assert_eq!(done.synced, Some(1));
        assert!(matches!(done.notify, Notify::Now(batch) if batch.changes == 1));
    }

    #[test]
    fn a_relist_that_differs_from_the_store_counts_as_one_change() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut state, vec![object("a", "web", 80)], &Everything, now);
        let relist = list(
            &mut state,
            vec![object("a", "web", 8080), object("b", "web", 81)],
            &Everything,
            now,
        );
        assert_eq!(relist.synced, None, "only the first list syncs");
        let changed = relist.changed.expect("a differing relist is a change");
        assert_eq!(changed.change, Change::Relist);
        assert_eq!(changed.objects, 2);
        assert_eq!(
            relist.notify,
            Notify::Now(ChangeBatch {
                changes: 1,
                correlation: changed.correlation,
                first_seen: now,
            })
        );
    }

    #[test]
    fn an_identical_relist_is_no_change() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut state, vec![object("a", "web", 80)], &Everything, now);
        let relist = list(&mut state, vec![object("a", "web", 80)], &Everything, now);
        assert!(relist.changed.is_none());
        assert_eq!(relist.notify, Notify::Nothing);
    }

    #[test]
    fn a_restarted_watchers_first_list_over_a_listed_store_is_a_relist() {
        let mut first = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut first, vec![object("a", "web", 80)], &Everything, now);
        let mut restarted =
            WatchState::new(Arc::clone(first.store()), Duration::ZERO, Box::new(|| 7));
        assert!(restarted.is_synced());
        let relist = list(
            &mut restarted,
            vec![object("b", "web", 81)],
            &Everything,
            now,
        );
        assert_eq!(relist.synced, None);
        assert_eq!(relist.changed.map(|c| c.change), Some(Change::Relist));
    }

    #[test]
    fn listed_objects_the_selector_does_not_select_are_left_out() {
        let mut state = watch(Duration::ZERO);
        let done = list(
            &mut state,
            vec![object("a", "web", 80), object("b", "db", 5432)],
            &WebOnly,
            Instant::now(),
        );
        assert_eq!(done.synced, Some(1));
        assert_eq!(names(&state), vec!["a"]);
    }

    #[test]
    fn an_object_that_stops_matching_the_selector_leaves_the_store() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut state, vec![object("a", "web", 80)], &WebOnly, now);
        let relabelled = state.on_event(ResourceEvent::Apply(object("a", "db", 80)), &WebOnly, now);
        let changed = relabelled.changed.expect("leaving the store is a change");
        assert_eq!(
            changed.change,
            Change::Object {
                object: ObjectRef::new("default", "a"),
                deleted: false,
            }
        );
        assert_eq!(changed.objects, 0);
        assert!(names(&state).is_empty());
        let unselected = state.on_event(ResourceEvent::Apply(object("b", "db", 1)), &WebOnly, now);
        assert!(unselected.changed.is_none(), "never held, nothing leaves");
    }

    #[test]
    fn deleting_an_object_the_store_does_not_hold_is_no_change() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut state, vec![object("a", "web", 80)], &Everything, now);
        let absent = state.on_event(
            ResourceEvent::Delete(object("z", "web", 1)),
            &Everything,
            now,
        );
        assert!(absent.changed.is_none());
        let held = state.on_event(
            ResourceEvent::Delete(object("a", "web", 80)),
            &Everything,
            now,
        );
        assert_eq!(
            held.changed.map(|c| c.change),
            Some(Change::Object {
                object: ObjectRef::new("default", "a"),
                deleted: true,
            })
        );
    }

    #[test]
    fn a_batch_keeps_its_first_seen_instant_and_one_correlation_id_until_it_is_flushed() {
        let debounce = Duration::from_millis(100);
        let mut state = watch(debounce);
        let t0 = Instant::now();
        list(&mut state, Vec::new(), &Everything, t0);
        let first = state.on_event(
            ResourceEvent::Apply(object("a", "web", 80)),
            &Everything,
            t0,
        );
        assert_eq!(first.notify, Notify::FlushAfter(debounce));
        let later = t0 + Duration::from_millis(40);
        let second = state.on_event(
            ResourceEvent::Apply(object("b", "web", 81)),
            &Everything,
            later,
        );
        assert_eq!(second.notify, Notify::Nothing, "one flush is due already");
        let correlation = first.changed.expect("a change").correlation;
        assert_eq!(second.changed.expect("a change").correlation, correlation);
        assert_eq!(
            state.on_flush(),
            Some(ChangeBatch {
                changes: 2,
                correlation,
                first_seen: t0,
            })
        );
        assert_eq!(state.on_flush(), None, "the batch was handed on");

        let next = state.on_event(
            ResourceEvent::Apply(object("c", "web", 82)),
            &Everything,
            later,
        );
        assert_eq!(next.notify, Notify::FlushAfter(debounce));
        assert_ne!(next.changed.expect("a change").correlation, correlation);
    }

    #[test]
    fn with_a_zero_debounce_every_change_is_its_own_batch_told_at_once() {
        let mut state = watch(Duration::ZERO);
        let now = Instant::now();
        list(&mut state, Vec::new(), &Everything, now);
        let first = state.on_event(
            ResourceEvent::Apply(object("a", "web", 80)),
            &Everything,
            now,
        );
        let second = state.on_event(
            ResourceEvent::Apply(object("b", "web", 81)),
            &Everything,
            now,
        );
        let (Notify::Now(a), Notify::Now(b)) = (first.notify, second.notify) else {
            panic!("zero debounce tells at once: {first:?} {second:?}");
        };
        assert_eq!((a.changes, b.changes), (1, 1));
        assert_ne!(a.correlation, b.correlation);
    }
}
