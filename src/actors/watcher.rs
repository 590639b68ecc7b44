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
use std::time::Duration;

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::messages::events::new_correlation_id;
use crate::messages::{EventKind, IndexTrackerMsg, ReconcilerMsg, ResourceEvent, WatcherMsg};
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
    pending_changes: usize,
    flush_armed: bool,
    debounce: Duration,
    source_task: tokio::task::JoinHandle<()>,
}

impl ResourceWatcher {
    fn publish_change(&self, identity: Option<ObjectRef>, deleted: bool) {
        let name = identity
            .map(|r| format!("{}/{}", r.namespace, r.name))
            .unwrap_or_default();
        self.iteration.services.fanout.publish(
            None,
            EventKind::ResourceChanged {
                resource: self.resource.clone(),
                object: name,
                deleted,
            },
        );
    }

    fn notify_reconciler(&self, state: &mut WatcherState) {
        let changes = std::mem::take(&mut state.pending_changes);
        if changes == 0 {
            return;
        }
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let correlation = new_correlation_id();
            let _ = reconciler.cast(ReconcilerMsg::ResourcesChanged {
                resource: self.resource.clone(),
                changes,
                correlation,
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
        Ok(WatcherState {
            store,
            initial: None,
            synced: false,
            pending_changes: 0,
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
                // Only a field selector needs the object's fields here; the store parses
                // every object once anyway.
                if !compiled.has_field_selector(&self.resource)
                    || compiled.selects(&self.resource, &object.to_value())
                {
                    state.initial.get_or_insert_with(Vec::new).push(object);
                }
            }
            WatcherMsg::Event(ResourceEvent::InitDone) => {
                let objects = state.initial.take().unwrap_or_default();
                for error in state.store.replace_all(objects) {
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
                } else {
                    // A relist after a watch restart counts as one change.
                    state.pending_changes += 1;
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
                    // An object that stopped matching the field selector leaves the store.
                    state.store.delete(&value)
                };
                if changed {
                    self.publish_change(identity, false);
                    state.pending_changes += 1;
                }
            }
            WatcherMsg::Event(ResourceEvent::Delete(object)) => {
                let identity = ObjectRef::of(&object.to_value());
                if let Some(identity) = identity
                    && state.store.delete_ref(&identity)
                {
                    self.publish_change(Some(identity), true);
                    state.pending_changes += 1;
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
        if !state.synced || state.pending_changes == 0 {
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
        match msg {
            IndexTrackerMsg::Synced { resource, objects } => {
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
