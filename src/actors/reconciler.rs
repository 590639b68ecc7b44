//! The Reconciler: turns "resources changed" into "render now" for the leader-only
//! Coordinator. It has no debounce of its own (the watchers debounce) and ignores every
//! change until all indexes have synced; then it triggers once for the initial sync and at
//! once for every later change. When a Coordinator registers (this replica became leader)
//! after the sync, it triggers a replay render so the new leader deploys without waiting
//! for a resource event.

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, set};
use crate::messages::events::new_correlation_id;
use crate::messages::{CoordinatorMsg, EventKind, ReconcilerMsg};

#[derive(Clone)]
pub struct Reconciler {
    pub iteration: Arc<Iteration>,
}

pub struct ReconcilerState {
    synced: bool,
    coordinator: Option<ActorRef<CoordinatorMsg>>,
}

impl Reconciler {
    fn trigger(
        &self,
        state: &ReconcilerState,
        reason: String,
        correlation: u64,
        changed_at: Option<Instant>,
    ) {
        let Some(coordinator) = &state.coordinator else {
            return;
        };
        if !state.synced {
            return;
        }
        self.iteration.services.fanout.publish(
            Some(correlation),
            EventKind::ReconciliationTriggered {
                reason: reason.clone(),
            },
        );
        let _ = coordinator.cast(CoordinatorMsg::Trigger {
            reason,
            correlation,
            changed_at,
        });
    }
}

impl Actor for Reconciler {
    type Msg = ReconcilerMsg;
    type State = ReconcilerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.reconciler, Some(myself));
        // After a restart, pick up what the iteration already knows.
        let synced = self.iteration.with_latest(|l| l.all_synced);
        let coordinator = crate::actors::context::current(&self.iteration.wiring.coordinator);
        Ok(ReconcilerState {
            synced,
            coordinator,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("reconciler");
        match msg {
            ReconcilerMsg::AllSynced => {
                if !state.synced {
                    state.synced = true;
                    self.trigger(
                        state,
                        "initial sync complete".into(),
                        new_correlation_id(),
                        None,
                    );
                }
            }
            ReconcilerMsg::ResourcesChanged {
                resource,
                changes,
                correlation,
                first_seen,
            } => {
                self.trigger(
                    state,
                    format!("{changes} change(s) to {resource}"),
                    correlation,
                    Some(first_seen),
                );
            }
            ReconcilerMsg::SetCoordinator(coordinator) => {
                let became_available = coordinator.is_some();
                state.coordinator = coordinator;
                if became_available {
                    self.trigger(
                        state,
                        "leadership gained: replaying the latest state".into(),
                        new_correlation_id(),
                        None,
                    );
                }
            }
            ReconcilerMsg::Trigger { reason } => {
                self.trigger(state, reason, new_correlation_id(), Some(Instant::now()))
            }
        }
        Ok(())
    }
}
