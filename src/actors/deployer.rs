//! The leader-only Deployers, one per HAProxy instance: each deploys the render it is given
//! to its [`DeployTarget`], one deployment at a time and in order, never going back to an
//! older render. Every attempt carries the leader's epoch (a target that saw a newer one
//! refuses it: the deployer stops) and is bounded by `dataplane.deploymentTimeout`; a failed
//! or timed-out attempt is retried with exponential backoff without delaying other
//! instances. Results go to the scheduler, the publisher and readiness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current};
use crate::messages::{
    ConfigPublisherMsg, DeploySchedulerMsg, DeployerMsg, EventKind, ValidatedRender,
};
use crate::observability::introspection::ErrorRecord;
use crate::pure::config::parse_duration;
use crate::pure::deploy::{DeployError, DeployRequest, DeployTarget};

pub(crate) fn deployer_child_name(instance: &str) -> String {
    format!("deployer-{instance}")
}

/// `dataplane.deploymentTimeout` of the running config.
pub(crate) fn deployment_timeout(iteration: &Iteration) -> Duration {
    iteration.with_latest(|l| {
        parse_duration(&l.compiled.spec.dataplane.deployment_timeout)
            .unwrap_or(crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT)
    })
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
        match &result {
            Ok(outcome) => {
                state.failures = 0;
                state.deployed_checksum = Some(render.checksum.clone());
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentSucceeded {
                        instance: self.instance.clone(),
                        duration: started.elapsed(),
                        reloaded: outcome.reloaded,
                        reload_reason: outcome.reload_reason,
                        since_change: render.changed_at.map(|at| at.elapsed()),
                    },
                );
                services
                    .readiness
                    .update(|r| r.instance_deployed(&self.instance));
                tracing::info!(instance = %self.instance, checksum = %render.checksum, reloaded = outcome.reloaded, reload_reason = ?outcome.reload_reason, took_ms = started.elapsed().as_millis() as u64, "deployed");
                if let Some(degraded) = &outcome.degraded {
                    tracing::warn!(instance = %self.instance, problem = %degraded, "deployed, around a problem");
                    services.introspection.record_error(ErrorRecord::new(
                        format!("deploy:{}", self.instance),
                        degraded.clone(),
                    ));
                }
            }
            Err(error @ DeployError::Fenced { accepted, .. }) => {
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
                    error.to_string(),
                ));
            }
            Err(error) => {
                state.failures += 1;
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentFailed {
                        instance: self.instance.clone(),
                        error: error.clone(),
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
            }
        }
        if let Some(scheduler) = current(&self.iteration.wiring.scheduler) {
            let _ = scheduler.cast(DeploySchedulerMsg::Deployed {
                instance: self.instance.clone(),
                checksum: render.checksum.clone(),
                result: result.clone(),
            });
        }
        if let Some(publisher) = current(&self.iteration.wiring.publisher) {
            let _ = publisher.cast(ConfigPublisherMsg::InstanceResult {
                instance: self.instance.clone(),
                checksum: render.checksum,
                result,
            });
        }
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
