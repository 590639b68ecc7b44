//! The leader-only DeployScheduler: keeps the one latest render every instance should run,
//! starts and stops one Deployer per instance as Discovery reports them, and paces
//! reloading deployments per instance; runtime-only changes and an instance's first
//! deployment go at once. Every decision is the pure [`Schedule`] state machine's; this
//! actor feeds it its messages (with "now" and the compiled config's
//! `minDeploymentInterval`) and carries out what it returns: renders cast to Deployers, the
//! pacing timer, Deployers started and stopped under the leader-only supervisor. An
//! in-place config change re-offers the latest render, so a shorter `minDeploymentInterval`
//! releases a waiting instance at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::actors::deployer::{Deployer, deployer_child_name};
use crate::messages::{DeploySchedulerMsg, DeployerMsg, Instance, ValidatedRender};
use crate::pure::deploy::DeployTarget;
use crate::pure::deploy::schedule::{Offered, Schedule};
use crate::supervision::{ActorRole, ChildSpec, SupervisorMsg};

/// Paces deployments and owns the Deployers.
#[derive(Clone)]
pub struct DeployScheduler {
    pub iteration: Arc<Iteration>,
}

pub struct SchedulerState {
    schedule: Schedule<ValidatedRender>,
    /// The running Deployers, by instance (the ones [`Schedule::deployers`] names).
    deployers: BTreeMap<String, ActorRef<DeployerMsg>>,
    /// Re-offers the latest render when the config changes in place (a new
    /// `minDeploymentInterval` applies to instances already waiting).
    config_updates: tokio::task::JoinHandle<()>,
}

/// "Now" for pacing, from tokio's clock (so a paused test clock paces too).
fn pacing_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl DeployScheduler {
    fn epoch(&self) -> u64 {
        self.iteration.with_latest(|l| l.leadership.epoch)
    }

    /// `dataplane.minDeploymentInterval` of the running config.
    fn min_interval(&self) -> Duration {
        self.iteration
            .with_latest(|l| l.compiled.timings.min_deployment_interval)
    }

    /// Sends what an offer dispatched and arms the timer it asked for.
    fn carry_out(
        &self,
        myself: &ActorRef<DeploySchedulerMsg>,
        state: &SchedulerState,
        offered: Offered<ValidatedRender>,
    ) {
        let epoch = self.epoch();
        for sent in offered.dispatch {
            if let Some(deployer) = state.deployers.get(&sent.instance) {
                let _ = deployer.cast(DeployerMsg::Deploy {
                    render: sent.render,
                    epoch,
                });
            }
        }
        self.show_paced(state);
        if let Some(wait) = offered.timer {
            let target = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = target.cast(DeploySchedulerMsg::PacingElapsed);
            });
        }
    }

    /// `/debug/vars/state` names the instances that wait for their pacing interval.
    fn show_paced(&self, state: &SchedulerState) {
        let paced = state.schedule.waiting();
        self.iteration
            .services
            .introspection
            .update_state(|s| s.paced = paced);
    }

    /// Stops and starts Deployers as the schedule decides for `instances`.
    async fn sync_deployers(
        &self,
        myself: &ActorRef<DeploySchedulerMsg>,
        state: &mut SchedulerState,
        instances: Vec<Instance>,
    ) {
        let Some(supervisor) = myself
            .try_get_supervisor()
            .map(ActorRef::<SupervisorMsg>::from)
        else {
            return;
        };
        let membership = state
            .schedule
            .instances(instances.into_iter().map(|i| (i.name, i.target)));
        for name in membership.stop {
            state.deployers.remove(&name);
            let _ = ractor::call!(
                supervisor,
                SupervisorMsg::StopChild,
                deployer_child_name(&name)
            );
        }
        let epoch = self.epoch();
        for (name, target) in membership.start {
            let Some(deployer) = self
                .start_deployer(&supervisor, &name, Arc::clone(&target))
                .await
            else {
                continue;
            };
            // A new instance gets the desired configuration at once, unpaced.
            if let Some(sent) = state.schedule.started(&name, target) {
                let _ = deployer.cast(DeployerMsg::Deploy {
                    render: sent.render,
                    epoch,
                });
            }
            state.deployers.insert(name, deployer);
        }
        let names = state.schedule.deployers();
        self.iteration.services.introspection.update_state(|s| {
            s.deployed.retain(|name, _| names.contains(name));
            s.instances = names;
        });
        self.show_paced(state);
    }

    /// Starts `instance`'s Deployer under the leader-only supervisor.
    async fn start_deployer(
        &self,
        supervisor: &ActorRef<SupervisorMsg>,
        instance: &str,
        target: Arc<dyn DeployTarget>,
    ) -> Option<ActorRef<DeployerMsg>> {
        let deployer = Deployer {
            iteration: Arc::clone(&self.iteration),
            instance: instance.to_string(),
            target,
        };
        let spec = ChildSpec::new(
            deployer_child_name(instance),
            ActorRole::LeaderOnly,
            deployer,
            (),
        );
        match ractor::call!(supervisor, SupervisorMsg::StartChild, spec) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(%instance, error = %e, "could not start a deployer");
                return None;
            }
            Err(e) => {
                tracing::error!(%instance, error = %e, "the leader-only supervisor did not answer");
                return None;
            }
        }
        ractor::call!(
            supervisor,
            SupervisorMsg::ChildCell,
            deployer_child_name(instance)
        )
        .ok()
        .flatten()
        .map(ActorRef::<DeployerMsg>::from)
    }
}

impl Actor for DeployScheduler {
    type Msg = DeploySchedulerMsg;
    type State = SchedulerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.scheduler, Some(myself.clone()));
        let mut updates = self.iteration.config_updates.subscribe();
        let target = myself.clone();
        let config_updates = tokio::spawn(async move {
            while updates.changed().await.is_ok() {
                if target.cast(DeploySchedulerMsg::PacingElapsed).is_err() {
                    return;
                }
            }
        });
        Ok(SchedulerState {
            schedule: Schedule::new(self.min_interval()),
            deployers: BTreeMap::new(),
            config_updates,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Replay the instances Discovery already knows.
        let instances = self.iteration.with_latest(|l| l.instances.clone());
        let _ = myself.cast(DeploySchedulerMsg::InstancesChanged(instances));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self
            .iteration
            .services
            .introspection
            .busy("deploy-scheduler");
        match msg {
            DeploySchedulerMsg::Deploy(render) => {
                let offered = state
                    .schedule
                    .render(render, pacing_now(), self.min_interval());
                self.carry_out(&myself, state, offered);
            }
            DeploySchedulerMsg::PacingElapsed => {
                let offered = state
                    .schedule
                    .pacing_elapsed(pacing_now(), self.min_interval());
                self.carry_out(&myself, state, offered);
            }
            DeploySchedulerMsg::Waiting(reply) => {
                let _ = reply.send(state.schedule.waiting());
            }
            DeploySchedulerMsg::InstancesChanged(instances) => {
                self.sync_deployers(&myself, state, instances).await
            }
            DeploySchedulerMsg::Deployed {
                instance,
                checksum,
                result,
            } => {
                state.schedule.deployed(&instance, &result, pacing_now());
                if result.is_ok() {
                    self.iteration.services.introspection.update_state(|s| {
                        s.last_deployed_checksum = Some(checksum);
                        s.deployed.insert(instance.clone(), checksum);
                    });
                }
                tracing::debug!(%instance, %checksum, error = result.as_ref().err().map(|e| e.metric_label()), "deployment reported");
            }
            DeploySchedulerMsg::Desired(reply) => {
                let _ = reply.send(state.schedule.desired().cloned());
            }
            DeploySchedulerMsg::Instances(reply) => {
                let _ = reply.send(state.schedule.deployers());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.config_updates.abort();
        if current(&self.iteration.wiring.scheduler).is_some_and(|s| s.get_id() == myself.get_id())
        {
            set(&self.iteration.wiring.scheduler, None);
        }
        Ok(())
    }
}
