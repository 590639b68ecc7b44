//! The leader-only deployment actors: the DeployScheduler (paces deployments, one
//! latest-wins pending slot, starts and stops one Deployer per instance), the Deployers
//! (strictly ordered per instance, epoch-fenced, backing off on failure without delaying
//! other instances), the DriftMonitor (periodic comparison with the desired checksum) and
//! the ConfigPublisher (publishes what was rendered and where it runs).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::actors::introspection::ErrorRecord;
use crate::messages::{
    ConfigPublisherMsg, DeploySchedulerMsg, DeployerMsg, DriftMonitorMsg, EventKind, Instance,
    ValidatedRender,
};
use crate::pure::config::{
    AuxiliaryFileSummary, HAProxyCfgSpec, HAProxyCfgStatus, InstanceStatus, parse_duration,
};
use crate::pure::deploy::pacing::Pacer;
use crate::pure::deploy::plan::plan;
use crate::pure::deploy::{DeployError, DeployRequest, DeployTarget};
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
    /// Re-offers the latest render when the config changes in place (a new
    /// `minDeploymentInterval` applies to instances already waiting).
    config_updates: tokio::task::JoinHandle<()>,
}

fn deployer_child_name(instance: &str) -> String {
    format!("deployer-{instance}")
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

/// `dataplane.deploymentTimeout` of the running config.
fn deployment_timeout(iteration: &Iteration) -> Duration {
    iteration.with_latest(|l| {
        parse_duration(&l.compiled.spec.dataplane.deployment_timeout)
            .unwrap_or(crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT)
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
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            state.deployers.remove(&name);
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
                state.deployers.insert(name, deployer);
            }
        }
        let names: Vec<String> = state.deployers.keys().cloned().collect();
        self.iteration
            .services
            .introspection
            .update_state(|s| s.instances = names);
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
                    self.iteration
                        .services
                        .introspection
                        .update_state(|s| s.last_deployed_checksum = Some(checksum.clone()));
                }
                tracing::debug!(%instance, %checksum, ok = result.is_ok(), "deployment reported");
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

/// Deploys to one instance, one deployment at a time, in the order received.
#[derive(Clone)]
pub struct Deployer {
    pub iteration: Arc<Iteration>,
    pub instance: String,
    pub target: Arc<dyn DeployTarget>,
}

pub struct DeployerState {
    /// The render this deployer should bring its instance to.
    wanted: Option<(ValidatedRender, u64)>,
    deployed_checksum: Option<String>,
    failures: u32,
    retry_armed: bool,
    /// Set when the instance reported a newer leader's epoch: this replica must stop writing.
    fenced: bool,
}

impl Deployer {
    fn backoff(&self, failures: u32) -> Duration {
        let settings = self.iteration.services.settings;
        settings
            .deploy_backoff_base
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
            .min(settings.deploy_backoff_max)
    }

    async fn attempt(
        &self,
        myself: &ActorRef<DeployerMsg>,
        state: &mut DeployerState,
        force: bool,
    ) {
        if state.fenced {
            return;
        }
        let Some((render, epoch)) = state.wanted.clone() else {
            return;
        };
        if !force && state.deployed_checksum.as_deref() == Some(render.checksum.as_str()) {
            return;
        }
        let services = &self.iteration.services;
        let timeout = deployment_timeout(&self.iteration);
        let request = DeployRequest {
            rendered: Arc::clone(&render.rendered),
            checksum: render.checksum.clone(),
            epoch,
            generation: render.generation,
            timeout,
        };
        let started = Instant::now();
        let result = match tokio::time::timeout(timeout, self.target.deploy(&request)).await {
            Ok(result) => result,
            Err(_) => Err(DeployError::TimedOut(timeout)),
        };
        let correlation = Some(render.correlation);
        let report: Result<_, String> = match &result {
            Ok(outcome) => {
                state.failures = 0;
                state.deployed_checksum = Some(render.checksum.clone());
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentSucceeded {
                        instance: self.instance.clone(),
                        duration: started.elapsed(),
                        reloaded: outcome.reloaded,
                        since_change: render.changed_at.map(|at| at.elapsed()),
                    },
                );
                services
                    .readiness
                    .update(|r| r.instance_deployed(&self.instance));
                tracing::info!(instance = %self.instance, checksum = %render.checksum, reloaded = outcome.reloaded, took_ms = started.elapsed().as_millis() as u64, "deployed");
                Ok(outcome.clone())
            }
            Err(DeployError::Fenced { accepted, .. }) => {
                state.fenced = true;
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentFenced {
                        instance: self.instance.clone(),
                        epoch: *accepted,
                    },
                );
                tracing::error!(instance = %self.instance, accepted_epoch = accepted, our_epoch = epoch, "a newer leader has written to this instance; this deployer stops deploying");
                services.introspection.record_error(ErrorRecord::new(
                    format!("deploy:{}", self.instance),
                    result_text(&result),
                ));
                Err(result_text(&result))
            }
            Err(error) => {
                state.failures += 1;
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentFailed {
                        instance: self.instance.clone(),
                        error: error.to_string(),
                    },
                );
                services.introspection.record_error(ErrorRecord::new(
                    format!("deploy:{}", self.instance),
                    error.to_string(),
                ));
                if error.is_retryable() && !state.retry_armed {
                    state.retry_armed = true;
                    let delay = self.backoff(state.failures);
                    tracing::warn!(instance = %self.instance, %error, retry_in_ms = delay.as_millis() as u64, "deployment failed; backing off");
                    let target = myself.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = target.cast(DeployerMsg::Retry);
                    });
                }
                Err(error.to_string())
            }
        };
        if let Some(scheduler) = current(&self.iteration.wiring.scheduler) {
            let _ = scheduler.cast(DeploySchedulerMsg::Deployed {
                instance: self.instance.clone(),
                checksum: render.checksum.clone(),
                result: report.clone(),
            });
        }
        if let Some(publisher) = current(&self.iteration.wiring.publisher) {
            let _ = publisher.cast(ConfigPublisherMsg::InstanceResult {
                instance: self.instance.clone(),
                checksum: render.checksum,
                result: report,
            });
        }
    }
}

fn result_text<T>(result: &Result<T, DeployError>) -> String {
    match result {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

impl Actor for Deployer {
    type Msg = DeployerMsg;
    type State = DeployerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(DeployerState {
            wanted: None,
            deployed_checksum: None,
            failures: 0,
            retry_armed: false,
            fenced: false,
        })
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
            .busy(&deployer_child_name(&self.instance));
        match msg {
            DeployerMsg::Deploy { render, epoch } => {
                // Never go back to an older render than the one wanted already.
                if state
                    .wanted
                    .as_ref()
                    .is_some_and(|(w, _)| w.generation > render.generation)
                {
                    return Ok(());
                }
                state.wanted = Some((render, epoch));
                self.attempt(&myself, state, false).await;
            }
            DeployerMsg::Retry => {
                state.retry_armed = false;
                self.attempt(&myself, state, true).await;
            }
            DeployerMsg::CheckDrift { desired, epoch } => {
                if state
                    .wanted
                    .as_ref()
                    .is_none_or(|(w, _)| w.generation <= desired.generation)
                {
                    state.wanted = Some((desired, epoch));
                }
                let Some((wanted, _)) = &state.wanted else {
                    return Ok(());
                };
                match self.target.deployed_checksum().await {
                    Ok(actual) if actual.as_deref() == Some(wanted.checksum.as_str()) => {}
                    Ok(actual) => {
                        tracing::warn!(instance = %self.instance, expected = %wanted.checksum, actual = ?actual, "drift detected; redeploying");
                        self.attempt(&myself, state, true).await;
                    }
                    Err(e) => {
                        tracing::warn!(instance = %self.instance, error = %e, "drift check failed")
                    }
                }
            }
        }
        Ok(())
    }
}

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
                let interval = iteration
                    .with_latest(|l| {
                        parse_duration(&l.compiled.spec.dataplane.drift_prevention_interval)
                            .unwrap_or(Duration::from_secs(60))
                    })
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

/// Where the ConfigPublisher writes `HAProxyCfg`: the Kubernetes API in-cluster, memory
/// elsewhere.
pub trait PublishSink: Send + Sync {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus);
}

/// Keeps the last published resource in memory (local mode, tests).
#[derive(Debug, Default)]
pub struct InMemorySink {
    pub last: Mutex<Option<(HAProxyCfgSpec, HAProxyCfgStatus)>>,
}

impl PublishSink for InMemorySink {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((spec.clone(), status.clone()));
    }
}

/// Publishes the rendered configuration and each instance's state.
#[derive(Clone)]
pub struct ConfigPublisher {
    pub iteration: Arc<Iteration>,
    pub sink: Arc<dyn PublishSink>,
}

pub struct PublisherState {
    spec: Option<HAProxyCfgSpec>,
    status: HAProxyCfgStatus,
}

impl Actor for ConfigPublisher {
    type Msg = ConfigPublisherMsg;
    type State = PublisherState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.publisher, Some(myself));
        Ok(PublisherState {
            spec: None,
            status: HAProxyCfgStatus::default(),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self
            .iteration
            .services
            .introspection
            .busy("config-publisher");
        match msg {
            ConfigPublisherMsg::Publish(render) => {
                let (path, base_dir) = self.iteration.with_latest(|l| {
                    let dataplane = &l.compiled.spec.dataplane;
                    (
                        dataplane.config_file.clone(),
                        dataplane.path_resolver().base_dir,
                    )
                });
                state.spec = Some(HAProxyCfgSpec {
                    path,
                    content: render.rendered.haproxy_cfg.clone(),
                    checksum: format!("sha256:{}", render.checksum),
                    auxiliary_files: AuxiliaryFileSummary::of(&render.rendered, &base_dir),
                });
            }
            ConfigPublisherMsg::InstanceResult {
                instance,
                checksum,
                result,
            } => {
                let now = now_rfc3339();
                let entry = match state
                    .status
                    .instances
                    .iter_mut()
                    .find(|i| i.name == instance)
                {
                    Some(entry) => entry,
                    None => {
                        state.status.instances.push(InstanceStatus {
                            name: instance.clone(),
                            ..Default::default()
                        });
                        state.status.instances.sort_by(|a, b| a.name.cmp(&b.name));
                        match state
                            .status
                            .instances
                            .iter_mut()
                            .find(|i| i.name == instance)
                        {
                            Some(entry) => entry,
                            None => return Ok(()),
                        }
                    }
                };
                match result {
                    Ok(outcome) => {
                        entry.deployed_at = Some(now.clone());
                        entry.checksum = Some(format!("sha256:{checksum}"));
                        if outcome.reloaded {
                            entry.last_reload_at = Some(now);
                        }
                        entry.last_error = None;
                        entry.consecutive_errors = 0;
                    }
                    Err(error) => {
                        entry.last_error = Some(error);
                        entry.consecutive_errors += 1;
                    }
                }
            }
        }
        if let Some(spec) = &state.spec {
            self.sink.publish(spec, &state.status);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if current(&self.iteration.wiring.publisher).is_some_and(|p| p.get_id() == myself.get_id())
        {
            set(&self.iteration.wiring.publisher, None);
        }
        Ok(())
    }
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
