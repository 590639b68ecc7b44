//! The leader-only DeployScheduler: keeps the one latest render every instance should run,
//! starts and stops one Deployer per instance as Discovery reports them, and paces
//! reloading deployments per instance (the pure [`Pacer`]); runtime-only changes and an
//! instance's first deployment go at once. An in-place config change re-offers the latest
//! render, so a shorter `minDeploymentInterval` releases a waiting instance at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::actors::deployer::{Deployer, deployer_child_name};
use crate::messages::{DeploySchedulerMsg, DeployerMsg, Instance, ValidatedRender};
use crate::pure::config::parse_duration;
use crate::pure::deploy::pacing::Pacer;
use crate::pure::deploy::plan::plan;
use crate::supervision::{ActorRole, ChildSpec, SupervisorMsg};

/// Paces deployments and owns the Deployers.
#[derive(Clone)]
pub struct DeployScheduler {
    pub iteration: Arc<Iteration>,
}

pub struct SchedulerState {
    /// The latest render: what every instance should run (the one latest-wins slot).
    desired: Option<ValidatedRender>,
    /// Per instance, the render last sent to its Deployer: pacing applies only to renders
    /// that need a reload relative to it.
    dispatched: BTreeMap<String, ValidatedRender>,
    /// Instances that wait for their pacing interval before they get `desired`.
    waiting: BTreeSet<String>,
    timer_armed: bool,
    pacer: Pacer,
    deployers: BTreeMap<String, ActorRef<DeployerMsg>>,
    /// The target each Deployer was started with: an instance that keeps its name but
    /// comes with another target (new credentials, a new address) gets a new Deployer.
    targets: BTreeMap<String, Arc<dyn crate::pure::deploy::DeployTarget>>,
    /// Re-offers the latest render when the config changes in place (a new
    /// `minDeploymentInterval` applies to instances already waiting).
    config_updates: tokio::task::JoinHandle<()>,
}

/// "Now" for pacing, from tokio's clock (so a paused test clock paces too).
fn pacing_now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// `dataplane.minDeploymentInterval` of the running config (validated, so the fallback
/// only covers a config that skipped validation).
fn min_deployment_interval(iteration: &Iteration) -> Duration {
    iteration.with_latest(|l| {
        parse_duration(&l.compiled.spec.dataplane.min_deployment_interval)
            .unwrap_or(Duration::from_secs(2))
    })
}

impl DeployScheduler {
    fn epoch(&self) -> u64 {
        self.iteration.with_latest(|l| l.leadership.epoch)
    }

    /// Sends the desired render to every instance that may take it now; instances whose
    /// reload would come too soon after their last one wait (and a timer is armed).
    fn offer_desired(&self, myself: &ActorRef<DeploySchedulerMsg>, state: &mut SchedulerState) {
        let Some(render) = state.desired.clone() else {
            return;
        };
        state
            .pacer
            .set_min_interval(min_deployment_interval(&self.iteration));
        let epoch = self.epoch();
        let now = pacing_now();
        // Instances usually hold the same previous render: plan once per checksum.
        let mut reload_from: BTreeMap<String, bool> = BTreeMap::new();
        let mut shortest_wait: Option<Duration> = None;
        for (instance, deployer) in &state.deployers {
            let needs_reload = match state.dispatched.get(instance) {
                Some(previous) if previous.checksum == render.checksum => {
                    state.waiting.remove(instance);
                    continue;
                }
                Some(previous) => {
                    *reload_from
                        .entry(previous.checksum.clone())
                        .or_insert_with(|| {
                            plan(Some(&previous.rendered), &render.rendered)
                                .map_or(true, |p| p.reload)
                        })
                }
                // Nothing sent yet: a first deployment goes at once, its outcome says
                // whether it reloaded.
                None => false,
            };
            if needs_reload {
                let wait = state.pacer.wait(instance, now);
                if !wait.is_zero() {
                    state.waiting.insert(instance.clone());
                    shortest_wait = Some(shortest_wait.map_or(wait, |w| w.min(wait)));
                    continue;
                }
                state.pacer.reloaded(instance, now);
            }
            state.waiting.remove(instance);
            state.dispatched.insert(instance.clone(), render.clone());
            let _ = deployer.cast(DeployerMsg::Deploy {
                render: render.clone(),
                epoch,
            });
        }
        self.show_paced(state);
        if let Some(wait) = shortest_wait
            && !state.timer_armed
        {
            state.timer_armed = true;
            let target = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = target.cast(DeploySchedulerMsg::PacingElapsed);
            });
        }
    }

    /// `/debug/vars/state` names the instances that wait for their pacing interval.
    fn show_paced(&self, state: &SchedulerState) {
        let paced: Vec<String> = state.waiting.iter().cloned().collect();
        self.iteration
            .services
            .introspection
            .update_state(|s| s.paced = paced);
    }

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
        let wanted: BTreeMap<String, Instance> =
            instances.into_iter().map(|i| (i.name.clone(), i)).collect();
        let gone: Vec<String> = state
            .deployers
            .keys()
            .filter(|n| {
                wanted.get(*n).is_none_or(|instance| {
                    state
                        .targets
                        .get(*n)
                        .is_none_or(|target| !Arc::ptr_eq(target, &instance.target))
                })
            })
            .cloned()
            .collect();
        for name in gone {
            state.deployers.remove(&name);
            state.targets.remove(&name);
            state.dispatched.remove(&name);
            state.waiting.remove(&name);
            state.pacer.forget(&name);
            let _ = ractor::call!(
                supervisor,
                SupervisorMsg::StopChild,
                deployer_child_name(&name)
            );
        }
        let epoch = self.epoch();
        for (name, instance) in wanted {
            if state.deployers.contains_key(&name) {
                continue;
            }
            let deployer = Deployer {
                iteration: Arc::clone(&self.iteration),
                instance: name.clone(),
                target: Arc::clone(&instance.target),
            };
            let spec = ChildSpec::new(
                deployer_child_name(&name),
                ActorRole::LeaderOnly,
                deployer,
                (),
            );
            match ractor::call!(supervisor, SupervisorMsg::StartChild, spec) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(instance = %name, error = %e, "could not start a deployer");
                    continue;
                }
                Err(e) => {
                    tracing::error!(instance = %name, error = %e, "the leader-only supervisor did not answer");
                    continue;
                }
            }
            let cell = ractor::call!(
                supervisor,
                SupervisorMsg::ChildCell,
                deployer_child_name(&name)
            )
            .ok()
            .flatten();
            if let Some(cell) = cell {
                let deployer = ActorRef::<DeployerMsg>::from(cell);
                // A new instance gets the desired configuration at once, unpaced.
                if let Some(render) = &state.desired {
                    state.dispatched.insert(name.clone(), render.clone());
                    let _ = deployer.cast(DeployerMsg::Deploy {
                        render: render.clone(),
                        epoch,
                    });
                }
                state
                    .targets
                    .insert(name.clone(), Arc::clone(&instance.target));
                state.deployers.insert(name, deployer);
            }
        }
        let names: Vec<String> = state.deployers.keys().cloned().collect();
        self.iteration.services.introspection.update_state(|s| {
            s.deployed.retain(|name, _| names.contains(name));
            s.instances = names;
        });
        self.show_paced(state);
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
            desired: None,
            dispatched: BTreeMap::new(),
            waiting: BTreeSet::new(),
            timer_armed: false,
            pacer: Pacer::new(min_deployment_interval(&self.iteration)),
            deployers: BTreeMap::new(),
            targets: BTreeMap::new(),
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
                state.desired = Some(render);
                self.offer_desired(&myself, state);
            }
            DeploySchedulerMsg::PacingElapsed => {
                state.timer_armed = false;
                if !state.waiting.is_empty() {
                    self.offer_desired(&myself, state);
                }
            }
            DeploySchedulerMsg::Waiting(reply) => {
                let _ = reply.send(state.waiting.iter().cloned().collect());
            }
            DeploySchedulerMsg::InstancesChanged(instances) => {
                self.sync_deployers(&myself, state, instances).await
            }
            DeploySchedulerMsg::Deployed {
                instance,
                checksum,
                result,
            } => {
                if let Ok(outcome) = &result {
                    if outcome.reloaded {
                        state.pacer.reloaded(&instance, pacing_now());
                    }
                    self.iteration.services.introspection.update_state(|s| {
                        s.last_deployed_checksum = Some(checksum.clone());
                        s.deployed.insert(instance.clone(), checksum.clone());
                    });
                }
                tracing::debug!(%instance, %checksum, error = result.as_ref().err().map(|e| e.metric_label()), "deployment reported");
            }
            DeploySchedulerMsg::Desired(reply) => {
                let _ = reply.send(state.desired.clone());
            }
            DeploySchedulerMsg::Instances(reply) => {
                let _ = reply.send(state.deployers.keys().cloned().collect());
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
