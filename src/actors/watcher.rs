//! One ResourceWatcher per watched resource, and the IndexTracker that knows when all of them
//! have synchronised.
//!
//! A watcher reads its source (any stream of
//! [`ResourceEvent`](crate::pure::store::ResourceEvent)s) through a small task that forwards
//! events into its mailbox and hands each to its [`WatchState`] (`crate::pure::store`), which
//! applies it to the store — list framing, selector filtering, relist detection, batching —
//! and says what happened. The watcher publishes each change,
//! reports the initial sync to the IndexTracker (which starts reconciliation when every
//! watcher has synced: staged start-up) and tells the Reconciler about a batch when the
//! state says so: at once for a zero debounce (the EndpointSlice default), else after one
//! debounce timer.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;

use crate::actors::context::{Iteration, current, set};
use crate::messages::events::new_correlation_id;
use crate::messages::{EventKind, IndexTrackerMsg, ReconcilerMsg, WatcherMsg};
use crate::observability::introspection::ErrorRecord;
use crate::pure::config::WatchedResource;
use crate::pure::pipeline::CompiledConfig;
use crate::pure::store::{
    Change, ChangeBatch, Notify, ObjectSelection, StoreChanged, WatchOutcome, WatchState,
};

/// Watches one resource.
#[derive(Clone)]
pub struct ResourceWatcher {
    pub resource: String,
    pub watched: WatchedResource,
    pub iteration: Arc<Iteration>,
}

pub struct WatcherState {
    watch: WatchState,
    source_task: tokio::task::JoinHandle<()>,
}

/// The running config's field and label selectors of one watched resource.
struct Selectors<'a> {
    compiled: &'a CompiledConfig,
    resource: &'a str,
}

impl ObjectSelection for Selectors<'_> {
    fn filters_objects(&self) -> bool {
        self.compiled.has_object_selector(self.resource)
    }

    fn selects(&self, object: &Value) -> bool {
        self.compiled.selects(self.resource, object)
    }
}

impl ResourceWatcher {
    /// Publishes, reports and sends what one event did.
    fn act_on(&self, myself: &ActorRef<WatcherMsg>, outcome: WatchOutcome) {
        for error in &outcome.rejected {
            tracing::warn!(resource = %self.resource, %error, "object not stored");
            self.iteration
                .services
                .introspection
                .record_error(ErrorRecord::new(
                    format!("watch:{}", self.resource),
                    error.to_string(),
                ));
        }
        if let Some(objects) = outcome.synced
            && let Some(tracker) = current(&self.iteration.wiring.index_tracker)
        {
            let _ = tracker.cast(IndexTrackerMsg::Synced {
                resource: self.resource.clone(),
                objects,
            });
        }
        if let Some(changed) = outcome.changed {
            self.publish_change(changed);
        }
        match outcome.notify {
            Notify::Nothing => {}
            Notify::Now(batch) => self.notify_reconciler(batch),
            Notify::FlushAfter(debounce) => {
                let target = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(debounce).await;
                    let _ = target.cast(WatcherMsg::Flush);
                });
            }
        }
    }

    fn publish_change(&self, changed: StoreChanged) {
        let (object, deleted) = match changed.change {
            Change::Object { object, deleted } => {
                (format!("{}/{}", object.namespace, object.name), deleted)
            }
            Change::Relist => {
                tracing::info!(resource = %self.resource, objects = changed.objects, "relist differs from the store; reconciling");
                ("(relist)".to_string(), false)
            }
        };
        self.iteration.services.fanout.publish(
            Some(changed.correlation),
            EventKind::ResourceChanged {
                resource: self.resource.clone(),
                object,
                deleted,
                objects: changed.objects,
            },
        );
    }

    fn notify_reconciler(&self, batch: ChangeBatch) {
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::ResourcesChanged {
                resource: self.resource.clone(),
                changes: batch.changes,
                correlation: batch.correlation,
                first_seen: batch.first_seen,
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
        let (store, debounce) = self.iteration.with_latest(|l| {
            (
                l.stores.get(&self.resource).cloned(),
                l.compiled.timings.debounce(&self.resource),
            )
        });
        let store =
            store.ok_or_else(|| format!("no store for watched resource {}", self.resource))?;
        let debounce = debounce
            .ok_or_else(|| format!("no debounce for watched resource {}", self.resource))?;
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
            watch: WatchState::new(store, debounce, Box::new(new_correlation_id)),
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
        match msg {
            WatcherMsg::Event(event) => {
                let compiled = self.iteration.with_latest(|l| Arc::clone(&l.compiled));
                let selectors = Selectors {
                    compiled: &compiled,
                    resource: &self.resource,
                };
                let outcome = state.watch.on_event(event, &selectors, Instant::now());
                services
                    .introspection
                    .set_resource_count(&self.resource, state.watch.store().len());
                self.act_on(&myself, outcome);
            }
            WatcherMsg::Flush => {
                if let Some(batch) = state.watch.on_flush() {
                    self.notify_reconciler(batch);
                }
            }
            WatcherMsg::SourceEnded => {
                return Err(format!("the source of {} ended", self.resource).into());
            }
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
        // Every watched resource's initial list, and each critical HTTP resource's first
        // content (`actors::http_resources`).
        let expected = self.iteration.with_latest(|l| {
            l.compiled
                .spec
                .watched_resources
                .keys()
                .cloned()
                .chain(l.compiled.critical_http_stores())
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
