//! The leader-only Deployers, one per HAProxy instance: each deploys the render it is given
//! to its [`DeployTarget`], one deployment at a time and in order, never going back to an
//! older render. Every decision — which render to attempt, backoff and retry, what a fenced
//! instance means, drift repair — is the pure [`Attempts`] state machine's; this actor feeds
//! it its messages and carries out what it returns: the deployment itself (with the leader's
//! epoch, bounded by `dataplane.deploymentTimeout` from the compiled config's timings), the
//! retry timer, the drift question to the instance, and the reports that follow a result
//! (events, readiness, `/debug/vars/errors`, the scheduler and the publisher).

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current};
use crate::messages::{
    ConfigPublisherMsg, DeploySchedulerMsg, DeployerMsg, EventKind, ValidatedRender,
};
use crate::observability::introspection::ErrorRecord;
use crate::pure::deploy::attempts::{Attempt, AttemptEnd, Attempts, Backoff};
use crate::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget, ReloadReason};

pub(crate) fn deployer_child_name(instance: &str) -> String {
    format!("deployer-{instance}")
}

/// Deploys to one instance, one deployment at a time, in the order received.
#[derive(Clone)]
pub struct Deployer {
    pub iteration: Arc<Iteration>,
    pub instance: String,
    pub target: Arc<dyn DeployTarget>,
}

pub struct DeployerState {
    attempts: Attempts<ValidatedRender>,
}

impl Deployer {
    /// Makes `attempt` (when the state machine asked for one) and feeds its result back.
    async fn carry_out(
        &self,
        myself: &ActorRef<DeployerMsg>,
        state: &mut DeployerState,
        attempt: Option<Attempt<ValidatedRender>>,
    ) {
        let Some(attempt) = attempt else {
            return;
        };
        let timeout = self
            .iteration
            .with_latest(|l| l.compiled.timings.deployment_timeout);
        let render = &attempt.render;
        let request = DeployRequest {
            rendered: Arc::clone(&render.rendered),
            checksum: render.checksum,
            epoch: attempt.epoch,
            generation: render.generation,
            timeout,
        };
        let started = Instant::now();
        let result = match tokio::time::timeout(timeout, self.target.deploy(&request)).await {
            Ok(result) => result,
            Err(_) => Err(DeployError::TimedOut(timeout)),
        };
        let end = state.attempts.finished(&attempt, &result);
        self.report(&attempt, &result, end, started);
        if let AttemptEnd::Failed {
            retry_in: Some(delay),
            ..
        } = end
        {
            let target = myself.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = target.cast(DeployerMsg::Retry);
            });
        }
        if let Some(scheduler) = current(&self.iteration.wiring.scheduler) {
            let _ = scheduler.cast(DeploySchedulerMsg::Deployed {
                instance: self.instance.clone(),
                checksum: render.checksum,
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

    /// Tells what an attempt came to: an event, the log, readiness and `/debug/vars/errors`.
    fn report(
        &self,
        attempt: &Attempt<ValidatedRender>,
        result: &Result<DeployOutcome, DeployError>,
        end: AttemptEnd,
        started: Instant,
    ) {
        let services = &self.iteration.services;
        let render = &attempt.render;
        let correlation = Some(render.correlation);
        let record_error = |message: String| {
            services.introspection.record_error(ErrorRecord::new(
                format!("deploy:{}", self.instance),
                message,
            ));
        };
        match (result, end) {
            (Ok(outcome), _) => {
                services.introspection.resolve_errors_of(
                    &format!("deploy:{}", self.instance),
                    "a later deployment succeeded",
                );
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
                tracing::info!(instance = %self.instance, checksum = %render.checksum, reloaded = outcome.reloaded, reload_reason = outcome.reload_reason.map(ReloadReason::metric_label), took_ms = started.elapsed().as_millis() as u64, "deployed");
                if let Some(degraded) = &outcome.degraded {
                    tracing::warn!(instance = %self.instance, problem = %degraded, "deployed, around a problem");
                    record_error(degraded.clone());
                }
            }
            (Err(error), AttemptEnd::Fenced { accepted }) => {
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentFenced {
                        instance: self.instance.clone(),
                        epoch: accepted,
                    },
                );
                tracing::error!(instance = %self.instance, accepted_epoch = accepted, our_epoch = attempt.epoch, "a newer leader has written to this instance; this deployer stops deploying");
                record_error(error.to_string());
            }
            (Err(error), end) => {
                services.fanout.publish(
                    correlation,
                    EventKind::DeploymentFailed {
                        instance: self.instance.clone(),
                        error: error.clone(),
                    },
                );
                record_error(error.to_string());
                if let AttemptEnd::Failed {
                    retry_in: Some(delay),
                    ..
                } = end
                {
                    tracing::warn!(instance = %self.instance, %error, retry_in_ms = delay.as_millis() as u64, "deployment failed; backing off");
                }
            }
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
        let settings = self.iteration.services.settings;
        Ok(DeployerState {
            attempts: Attempts::new(Backoff {
                base: settings.deploy_backoff_base,
                max: settings.deploy_backoff_max,
            }),
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
                let attempt = state.attempts.offer(render, epoch);
                self.carry_out(&myself, state, attempt).await;
            }
            DeployerMsg::Retry => {
                let attempt = state.attempts.retry_due();
                self.carry_out(&myself, state, attempt).await;
            }
            DeployerMsg::CheckDrift { desired, epoch } => {
                let Some(expected) = state.attempts.drift_check(desired, epoch) else {
                    return Ok(());
                };
                match self.target.deployed_checksum().await {
                    Ok(actual) => {
                        let attempt = state.attempts.drift_observed(actual);
                        if attempt.is_some() {
                            tracing::warn!(instance = %self.instance, %expected, actual = ?actual.map(|c| c.to_string()), "drift detected; redeploying");
                        }
                        self.carry_out(&myself, state, attempt).await;
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
