//! The all-replica actors that follow the outside world: the LeaderElector (starts the
//! leader-only subtree on gaining leadership, with the latest state replayed into it, and
//! stops it — waiting until every leader-only actor has stopped — on losing it) and
//! Discovery (which HAProxy instances exist). Where leadership, instances and their
//! credentials come from is the caller's: `haptor run`'s supervised Kubernetes edges
//! (`crate::run::edges`), or `haptor local`'s fixed sources.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, forward_watch};
use crate::actors::coordinator::Coordinator;
use crate::actors::drift::DriftMonitor;
use crate::actors::publisher::ConfigPublisher;
use crate::actors::scheduler::DeployScheduler;
use crate::messages::{
    DeploySchedulerMsg, DiscoveryMsg, EventKind, Instance, LeaderElectorMsg, Leadership,
    LeadershipChange,
};
use crate::seams::PublishSink;
use crate::supervision::{
    ActorRole, ChildSpec, RestartPolicy, Supervisor, SupervisorArgs, SupervisorMsg,
};

/// The name of the leader-only subtree under the config-iteration supervisor.
pub const LEADER_ONLY: &str = "leader-only";

/// Builds the leader-only subtree: Coordinator, DeployScheduler (which adds one Deployer per
/// instance), DriftMonitor and ConfigPublisher. They read the iteration's latest state as
/// they start, which is the state replay.
pub fn leader_only_spec(iteration: &Arc<Iteration>, sink: Arc<dyn PublishSink>) -> ChildSpec {
    let children = vec![
        ChildSpec::new(
            "config-publisher",
            ActorRole::LeaderOnly,
            ConfigPublisher {
                iteration: Arc::clone(iteration),
                sink,
            },
            (),
        ),
        ChildSpec::new(
            "deploy-scheduler",
            ActorRole::LeaderOnly,
            DeployScheduler {
                iteration: Arc::clone(iteration),
            },
            (),
        ),
        ChildSpec::new(
            "drift-monitor",
            ActorRole::LeaderOnly,
            DriftMonitor {
                iteration: Arc::clone(iteration),
            },
            (),
        ),
        // Last: once it registers, renders start, and their results need the others.
        ChildSpec::new(
            "coordinator",
            ActorRole::LeaderOnly,
            Coordinator {
                iteration: Arc::clone(iteration),
            },
            (),
        ),
    ];
    let args = SupervisorArgs {
        name: LEADER_ONLY.into(),
        policy: RestartPolicy::default(),
        children,
        on_restart: Some(iteration.services.restart_observer()),
    };
    ChildSpec::new(LEADER_ONLY, ActorRole::Supervisor, Supervisor, args)
}

/// Follows the leadership source and starts or stops the leader-only subtree.
#[derive(Clone)]
pub struct LeaderElector {
    pub iteration: Arc<Iteration>,
    pub sink: Arc<dyn PublishSink>,
}

pub struct LeaderElectorState {
    current: Leadership,
    source_task: tokio::task::JoinHandle<()>,
}

impl LeaderElector {
    /// The config-iteration supervisor: the elector's supervisor (all-replica) is its child.
    fn iteration_supervisor(
        myself: &ActorRef<LeaderElectorMsg>,
    ) -> Option<ActorRef<SupervisorMsg>> {
        myself
            .try_get_supervisor()?
            .try_get_supervisor()
            .map(ActorRef::from)
    }

    async fn apply(
        &self,
        myself: &ActorRef<LeaderElectorMsg>,
        state: &mut LeaderElectorState,
        next: Leadership,
    ) -> Result<(), ActorProcessingErr> {
        let previous_epoch = state.current.epoch;
        let change = state.current.change_to(next);
        state.current = next;
        self.iteration.with_latest(|l| l.leadership = next);
        let services = &self.iteration.services;
        services.introspection.update_state(|s| {
            s.is_leader = next.is_leader;
            s.epoch = next.epoch;
        });
        let Some(supervisor) = Self::iteration_supervisor(myself) else {
            return Err("the leader elector has no config-iteration supervisor".into());
        };
        match change {
            LeadershipChange::Gained => {
                services
                    .fanout
                    .publish(None, EventKind::LeadershipGained { epoch: next.epoch });
                tracing::info!(
                    epoch = next.epoch,
                    "leadership gained; starting the leader-only subtree"
                );
                let spec = leader_only_spec(&self.iteration, Arc::clone(&self.sink));
                match ractor::call!(supervisor, SupervisorMsg::StartChild, spec) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Err(format!("could not start the leader-only subtree: {e}").into());
                    }
                    Err(e) => {
                        return Err(
                            format!("the config-iteration supervisor did not answer: {e}").into(),
                        );
                    }
                }
            }
            LeadershipChange::Lost => {
                services.fanout.publish(None, EventKind::LeadershipLost);
                tracing::info!("leadership lost; stopping the leader-only subtree");
                // StopChild returns once the subtree and every actor in it has stopped.
                let _ = ractor::call!(
                    supervisor,
                    SupervisorMsg::StopChild,
                    LEADER_ONLY.to_string()
                );
            }
            LeadershipChange::NewTerm => {
                // The subtree restarts, so no deployer stays fenced and every deployment
                // carries the new epoch.
                tracing::info!(
                    from = previous_epoch,
                    to = next.epoch,
                    "leadership epoch changed; restarting the leader-only subtree"
                );
                let _ = ractor::call!(
                    supervisor,
                    SupervisorMsg::StopChild,
                    LEADER_ONLY.to_string()
                );
                services
                    .fanout
                    .publish(None, EventKind::LeadershipGained { epoch: next.epoch });
                let spec = leader_only_spec(&self.iteration, Arc::clone(&self.sink));
                match ractor::call!(supervisor, SupervisorMsg::StartChild, spec) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Err(
                            format!("could not restart the leader-only subtree: {e}").into()
                        );
                    }
                    Err(e) => {
                        return Err(
                            format!("the config-iteration supervisor did not answer: {e}").into(),
                        );
                    }
                }
            }
            LeadershipChange::Unchanged => {}
        }
        Ok(())
    }
}

impl Actor for LeaderElector {
    type Msg = LeaderElectorMsg;
    type State = LeaderElectorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        // The current value first (a restarted elector must learn where it stands), then changes.
        let source_task = forward_watch(
            self.iteration.services.sources.leadership.clone(),
            myself,
            |leadership| Some(LeaderElectorMsg::Changed(leadership)),
        );
        Ok(LeaderElectorState {
            current: Leadership::default(),
            source_task,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("leader-elector");
        match msg {
            LeaderElectorMsg::Changed(next) => self.apply(&myself, state, next).await?,
            LeaderElectorMsg::Current(reply) => {
                let _ = reply.send(state.current);
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

/// Follows the instance source and tells the DeployScheduler (when leading).
#[derive(Clone)]
pub struct Discovery {
    pub iteration: Arc<Iteration>,
}

pub struct DiscoveryState {
    instances: Vec<Instance>,
    source_task: tokio::task::JoinHandle<()>,
}

impl Actor for Discovery {
    type Msg = DiscoveryMsg;
    type State = DiscoveryState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let source_task = forward_watch(
            self.iteration.services.sources.instances.clone(),
            myself,
            |instances| Some(DiscoveryMsg::Changed(instances)),
        );
        Ok(DiscoveryState {
            instances: vec![],
            source_task,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("discovery");
        match msg {
            DiscoveryMsg::Changed(instances) => {
                let names: Vec<String> = instances.iter().map(|i| i.name.clone()).collect();
                let before: Vec<String> = state.instances.iter().map(|i| i.name.clone()).collect();
                state.instances = instances.clone();
                self.iteration
                    .services
                    .readiness
                    .update(|r| r.instances_known(names.clone()));
                self.iteration
                    .with_latest(|l| l.instances = instances.clone());
                if names != before {
                    self.iteration
                        .services
                        .fanout
                        .publish(None, EventKind::InstancesDiscovered { instances: names });
                }
                if let Some(scheduler) = current(&self.iteration.wiring.scheduler) {
                    let _ = scheduler.cast(DeploySchedulerMsg::InstancesChanged(instances));
                }
            }
            DiscoveryMsg::Current(reply) => {
                let _ = reply.send(state.instances.iter().map(|i| i.name.clone()).collect());
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
