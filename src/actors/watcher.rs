//! One ResourceWatcher per watched resource, and the IndexTracker that knows when all of them
//! have synchronised.
//!
//! A watcher reads its source (any stream of [`ResourceEvent`]s) through a small task that
//! forwards events into its mailbox, keeps its store up to date, and — only after the
//! initial list — tells the Reconciler about changes once its debounce has passed (at once
//! for a zero debounce, the EndpointSlice default). The initial list is applied as one
//! replacement and reported to the IndexTracker, which starts reconciliation when every
//! watcher has synced (staged start-up).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::messages::events::new_correlation_id;
use crate::messages::{
    CorrelationId, EventKind, IndexTrackerMsg, ReconcilerMsg, ResourceEvent, WatcherMsg,
};
use crate::pure::config::WatchedResource;
use crate::pure::store::{CompactObject, ObjectRef, ResourceStore};

/// Watches one resource.
#[derive(Clone)]
pub struct ResourceWatcher {
    pub resource: String,
    pub watched: WatchedResource,
    pub iteration: Arc<Iteration>,
}

pub struct WatcherState {
    store: Arc<ResourceStore>,
    initial: Option<Vec<CompactObject>>,
    synced: bool,
    /// The changes seen since the Reconciler was last told: how many, the correlation id
    /// they (and the reconciliation they cause) carry, and when the first was seen.
    pending: Option<PendingChanges>,
    flush_armed: bool,
    debounce: Duration,
    source_task: tokio::task::JoinHandle<()>,
}

struct PendingChanges {
    changes: usize,
    correlation: CorrelationId,
    first_seen: Instant,
}

impl ResourceWatcher {
    /// Counts one change, opening a batch (with a new correlation id) if none is open, and
    /// returns the batch's correlation id.
    fn note_change(state: &mut WatcherState) -> CorrelationId {
        let pending = state.pending.get_or_insert_with(|| PendingChanges {
            changes: 0,
            correlation: new_correlation_id(),
            first_seen: Instant::now(),
        });
        pending.changes += 1;
        pending.correlation
    }

    fn publish_change(&self, state: &mut WatcherState, identity: Option<ObjectRef>, deleted: bool) {
        let correlation = Self::note_change(state);
        let name = identity.map_or_else(
            || "(relist)".to_string(),
            |r| format!("{}/{}", r.namespace, r.name),
        );
        self.iteration.services.fanout.publish(
            Some(correlation),
            EventKind::ResourceChanged {
                resource: self.resource.clone(),
                object: name,
                deleted,
                objects: state.store.len(),
            },
        );
    }

    fn notify_reconciler(&self, state: &mut WatcherState) {
        let Some(pending) = state.pending.take() else {
            return;
        };
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::ResourcesChanged {
                resource: self.resource.clone(),
                changes: pending.changes,
                correlation: pending.correlation,
                first_seen: pending.first_seen,
            });
        }
    }
}

impl Actor for ResourceWatcher {
    type Msg = WatcherMsg;
    type State = WatcherState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let store = self
            .iteration
            .with_latest(|l| l.stores.get(&self.resource).cloned())
            .ok_or_else(|| format!("no store for watched resource {}", self.resource))?;
        let mut stream = self
            .iteration
            .services
            .sources
            .resources
            .open(&self.resource, &self.watched);
        let target = myself.clone();
        let source_task = tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if target.cast(WatcherMsg::Event(event)).is_err() {
                    return;
                }
            }
            let _ = target.cast(WatcherMsg::SourceEnded);
        });
        // A restarted watcher finds its store listed already: its relist is then a change
        // like any other, not the initial sync.
        let synced = store.has_listed();
        Ok(WatcherState {
            store,
            initial: None,
            synced,
            pending: None,
            flush_armed: false,
            debounce: self.watched.debounce_duration(),
            source_task,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let services = &self.iteration.services;
        let _busy = services
            .introspection
            .busy(&format!("watcher-{}", self.resource));
        let compiled = self.iteration.with_latest(|l| Arc::clone(&l.compiled));
        match msg {
            WatcherMsg::Event(ResourceEvent::InitStart) => state.initial = Some(Vec::new()),
            WatcherMsg::Event(ResourceEvent::InitApply(object)) => {
                // Only a field or label selector needs the object's fields here; the store parses
                // every object once anyway.
                if !compiled.has_object_selector(&self.resource)
                    || compiled.selects(&self.resource, &object.to_value())
                {
                    state.initial.get_or_insert_with(Vec::new).push(object);
                }
            }
            WatcherMsg::Event(ResourceEvent::InitDone) => {
                let objects = state.initial.take().unwrap_or_default();
                let relist = state.store.relist(objects);
                for error in &relist.rejected {
                    tracing::warn!(resource = %self.resource, %error, "object not stored");
                }
                services
                    .introspection
                    .set_resource_count(&self.resource, state.store.len());
                if !state.synced {
                    state.synced = true;
                    if let Some(tracker) = current(&self.iteration.wiring.index_tracker) {
                        let _ = tracker.cast(IndexTrackerMsg::Synced {
                            resource: self.resource.clone(),
                            objects: state.store.len(),
                        });
                    }
                } else if relist.changed {
                    // A relist (after a watch broke, or by a restarted watcher) that differs
                    // from the store carries changes made meanwhile: one change.
                    tracing::info!(resource = %self.resource, objects = state.store.len(), "relist differs from the store; reconciling");
                    self.publish_change(state, None, false);
                }
            }
            WatcherMsg::Event(ResourceEvent::Apply(object)) => {
                let value = object.to_value();
                let identity = ObjectRef::of(&value);
                let changed = if compiled.selects(&self.resource, &value) {
                    match state.store.apply_parsed(object, Some(value)) {
                        Ok(_) => true,
                        Err(error) => {
                            tracing::warn!(resource = %self.resource, %error, "object not stored");
                            false
                        }
                    }
                } else {
                    // An object that stopped matching the field or label selector leaves the store.
                    state.store.delete(&value)
                };
                if changed {
                    self.publish_change(state, identity, false);
                }
            }
            WatcherMsg::Event(ResourceEvent::Delete(object)) => {
                let identity = ObjectRef::of(&object.to_value());
                if let Some(identity) = identity
                    && state.store.delete_ref(&identity)
                {
                    self.publish_change(state, Some(identity), true);
                }
            }
            WatcherMsg::Flush => {
                state.flush_armed = false;
                self.notify_reconciler(state);
                return Ok(());
            }
            WatcherMsg::SourceEnded => {
                return Err(format!("the source of {} ended", self.resource).into());
            }
        }
        services
            .introspection
            .set_resource_count(&self.resource, state.store.len());
        if !state.synced || state.pending.is_none() {
            return Ok(());
        }
        if state.debounce.is_zero() {
            self.notify_reconciler(state);
        } else if !state.flush_armed {
            state.flush_armed = true;
            let target = myself.clone();
            let debounce = state.debounce;
            tokio::spawn(async move {
                tokio::time::sleep(debounce).await;
                let _ = target.cast(WatcherMsg::Flush);
            });
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.source_task.abort();
        Ok(())
    }
}

/// Tracks which watchers have finished their initial list.
#[derive(Clone)]
pub struct IndexTracker {
    pub iteration: Arc<Iteration>,
}

pub struct IndexTrackerState {
    expected: BTreeSet<String>,
    synced: BTreeSet<String>,
}

impl Actor for IndexTracker {
    type Msg = IndexTrackerMsg;
    type State = IndexTrackerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.index_tracker, Some(myself));
        let expected = self.iteration.with_latest(|l| {
            l.compiled
                .spec
                .watched_resources
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
        });
        if expected.is_empty() {
            self.all_synced();
        }
        Ok(IndexTrackerState {
            expected,
            synced: BTreeSet::new(),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("index-tracker");
        match msg {
            IndexTrackerMsg::Synced { resource, objects } => {
                self.iteration
                    .services
                    .readiness
                    .update(|r| r.resource_synced(&resource));
                self.iteration.services.fanout.publish(
                    None,
                    EventKind::IndexSynced {
                        resource: resource.clone(),
                        objects,
                    },
                );
                let newly_complete =
                    state.synced.insert(resource) && state.synced.is_superset(&state.expected);
                if newly_complete {
                    self.all_synced();
                }
            }
            IndexTrackerMsg::IsSynced(reply) => {
                let _ = reply.send(state.synced.is_superset(&state.expected));
            }
        }
        Ok(())
    }
}

impl IndexTracker {
    fn all_synced(&self) {
        self.iteration.with_latest(|l| l.all_synced = true);
        self.iteration
            .services
            .introspection
            .update_state(|s| s.all_indexes_synced = true);
        self.iteration
            .services
            .fanout
            .publish(None, EventKind::AllIndexesSynced);
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::AllSynced);
        }
    }
}
