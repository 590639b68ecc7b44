//! The leader-only DriftMonitor: every `driftPreventionInterval` (read from the compiled
//! config's timings at each wait, so an in-place change applies at once) it asks each
//! Deployer to compare its instance with the desired render and to redeploy on a difference.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current};
use crate::actors::deployer::deployer_child_name;
use crate::messages::{DeploySchedulerMsg, DeployerMsg, DriftMonitorMsg};
use crate::supervision::SupervisorMsg;

/// Compares every instance with the desired configuration every `driftPreventionInterval`.
#[derive(Clone)]
pub struct DriftMonitor {
    pub iteration: Arc<Iteration>,
}

pub struct DriftMonitorState {
    ticker: tokio::task::JoinHandle<()>,
}

impl Actor for DriftMonitor {
    type Msg = DriftMonitorMsg;
    type State = DriftMonitorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let iteration = Arc::clone(&self.iteration);
        let mut updates = iteration.config_updates.subscribe();
        let ticker = tokio::spawn(async move {
            loop {
                // Read at every wait, so an in-place change of the interval applies at once.
                // At least 10 ms: a `0` interval must not spin.
                let interval = iteration
                    .with_latest(|l| l.compiled.timings.drift_prevention_interval)
                    .max(Duration::from_millis(10));
                tokio::select! {
                    () = tokio::time::sleep(interval) => {
                        if myself.cast(DriftMonitorMsg::Tick).is_err() {
                            return;
                        }
                    }
                    changed = updates.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(DriftMonitorState { ticker })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let DriftMonitorMsg::Tick = msg;
        let _busy = self.iteration.services.introspection.busy("drift-monitor");
        let Some(scheduler) = current(&self.iteration.wiring.scheduler) else {
            return Ok(());
        };
        let Ok(Some(desired)) = ractor::call!(scheduler, DeploySchedulerMsg::Desired) else {
            return Ok(());
        };
        let epoch = self.iteration.with_latest(|l| l.leadership.epoch);
        let Some(supervisor) = myself
            .try_get_supervisor()
            .map(ActorRef::<SupervisorMsg>::from)
        else {
            return Ok(());
        };
        let Ok(instances) = ractor::call!(scheduler, DeploySchedulerMsg::Instances) else {
            return Ok(());
        };
        for instance in instances {
            if let Ok(Some(cell)) = ractor::call!(
                supervisor,
                SupervisorMsg::ChildCell,
                deployer_child_name(&instance)
            ) {
                let _ = ActorRef::<DeployerMsg>::from(cell).cast(DeployerMsg::CheckDrift {
                    desired: desired.clone(),
                    epoch,
                });
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.ticker.abort();
        Ok(())
    }
}
