//! Deploy targets: where a validated configuration goes. One trait, [`DeployTarget`], is all a
//! Deployer actor knows about an HAProxy instance; the local target (files + master CLI +
//! runtime API) and the Data Plane API target implement it, and [`RecordingTarget`] records
//! what it was asked to do (tests, dry runs).
//!
//! Every request carries the leader's epoch. A target remembers the highest epoch it accepted
//! and refuses lower ones ([`DeployError::Fenced`]): leader election alone does not stop a
//! deposed leader's late write, fencing does. [`fence::Fence`] is that rule, the one every
//! target (the recording one included) applies.

pub mod attempts;
pub mod dataplane;
pub mod fence;
pub mod pacing;
pub mod plan;
pub mod schedule;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;

use crate::pure::rendered::{Checksum, RenderedConfig};

/// One deployment: the desired configuration, its checksum, the leader's epoch, a
/// generation that grows with every render, so a target can refuse an older render, and how
/// long the deployment may take.
#[derive(Debug, Clone)]
pub struct DeployRequest {
    pub rendered: Arc<RenderedConfig>,
    /// `rendered`'s checksum, as validation computed it.
    pub checksum: Checksum,
    pub epoch: u64,
    pub generation: u64,
    /// `dataplane.deploymentTimeout`: the Deployer gives up on an attempt after this long
    /// (a failed, retryable attempt); targets derive their own waits (a reload's
    /// confirmation) from it so that they fail first, with their own reason.
    pub timeout: Duration,
}

/// What the deploy state machines ([`attempts::Attempts`], [`schedule::Schedule`]) read of
/// the renders they hold; the actors' `ValidatedRender` is one.
pub trait DeployableRender: Clone {
    /// The render's checksum, as validation computed it.
    fn checksum(&self) -> Checksum;
    /// The render's number: a greater one is newer.
    fn generation(&self) -> u64;
    /// What is deployed.
    fn rendered(&self) -> &RenderedConfig;
}

/// The default of `dataplane.deploymentTimeout`.
pub const DEFAULT_DEPLOYMENT_TIMEOUT: Duration = Duration::from_secs(30);

impl DeployRequest {
    /// How long a target may wait for a reload to be confirmed: most of the deployment's
    /// time, leaving a tenth (at most a second) for what comes before and after.
    pub fn reload_wait(&self) -> Duration {
        self.timeout
            .saturating_sub((self.timeout / 10).min(Duration::from_secs(1)))
    }
}

/// Why a deployment reloaded HAProxy: the `reason` of `haptor_reloads_total`, in the
/// deployment's log line and event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadReason {
    /// The change needs one: the plan's reasons (a new backend, a listener, a certificate,
    /// a server a runtime slot cannot take, ...).
    Structural,
    /// The plan's changes were runtime ones, but the runtime API refused one or could not
    /// express it (HAProxy's refusal, a host name for an address, a changed file).
    RuntimeRefused,
    /// The plan's changes were runtime ones, but the runtime API could not be reached.
    RuntimeUnreachable,
    /// What the instance ran was not known (a first deployment from this controller with
    /// no record of what it runs, or after a deployment that stopped half way): the reload
    /// makes it known.
    StateUnknown,
}

impl ReloadReason {
    pub fn metric_label(self) -> &'static str {
        match self {
            ReloadReason::Structural => "structural",
            ReloadReason::RuntimeRefused => "runtime_refused",
            ReloadReason::RuntimeUnreachable => "runtime_unreachable",
            ReloadReason::StateUnknown => "state_unknown",
        }
    }

    /// What the reason means, in a sentence's words.
    pub fn describe(self) -> &'static str {
        match self {
            ReloadReason::Structural => "a change the runtime API cannot make",
            ReloadReason::RuntimeRefused => "the runtime API refused a change",
            ReloadReason::RuntimeUnreachable => "the runtime API could not be reached",
            ReloadReason::StateUnknown => "what the instance ran was not known",
        }
    }
}

impl fmt::Display for ReloadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.metric_label())
    }
}

/// What a deployment did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeployOutcome {
    /// HAProxy was reloaded (a new worker took over).
    pub reloaded: bool,
    /// Why, when it was.
    pub reload_reason: Option<ReloadReason>,
    /// Changes applied live through the runtime API.
    pub runtime_changes: usize,
    /// Nothing had to change (the instance already ran this configuration).
    pub unchanged: bool,
    /// What went wrong on the way that the target got around (the runtime API could not be
    /// reached, so it reloaded): the deployment succeeded, and the user is told.
    pub degraded: Option<String>,
}

/// Why a deployment did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployError {
    /// A request from an epoch lower than one already accepted: a deposed leader's write.
    #[error(
        "refused: epoch {offered} is older than epoch {accepted} already accepted by this instance"
    )]
    Fenced { offered: u64, accepted: u64 },
    /// The instance could not be reached; worth retrying with backoff.
    #[error("instance unreachable: {0}")]
    Unreachable(String),
    /// The instance refused the configuration (e.g. the reload failed); the old one still runs.
    #[error("instance rejected the configuration: {0}")]
    Rejected(String),
    /// The deployment did not finish within `dataplane.deploymentTimeout`; it counts as a
    /// failed attempt and is retried after the backoff.
    #[error(
        "the deployment did not finish within {0:?} (dataplane.deploymentTimeout); it is retried"
    )]
    TimedOut(Duration),
    /// An older render than one already deployed.
    #[error(
        "refused: render generation {offered} is older than generation {deployed} already deployed"
    )]
    Stale { offered: u64, deployed: u64 },
}

impl DeployError {
    /// Whether retrying later can help.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            DeployError::Unreachable(_) | DeployError::Rejected(_) | DeployError::TimedOut(_)
        )
    }
}

impl DeployError {
    /// The cause as a metric label value (`haptor_deployment_errors_total{error}`): the
    /// variant's snake_case name.
    pub fn metric_label(&self) -> &'static str {
        match self {
            DeployError::Fenced { .. } => "fenced",
            DeployError::Unreachable(_) => "unreachable",
            DeployError::Rejected(_) => "rejected",
            DeployError::TimedOut(_) => "timed_out",
            DeployError::Stale { .. } => "stale",
        }
    }
}

/// An HAProxy instance haptor can deploy to.
pub trait DeployTarget: Send + Sync + fmt::Debug {
    /// The instance's name (pod name, or `local`).
    fn name(&self) -> &str;
    /// Brings the instance to the requested configuration.
    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>>;
    /// The checksum of what the instance runs now, as far as the target can tell (drift
    /// detection); `None` when it runs nothing haptor deployed.
    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>>;
}

/// One deployment a [`RecordingTarget`] was asked for, accepted or refused.
#[derive(Debug, Clone)]
pub struct DeployAttempt {
    /// When it was asked, on tokio's clock (virtual time under a paused test clock).
    pub at: tokio::time::Instant,
    pub request: DeployRequest,
    /// What the target answered.
    pub result: Result<DeployOutcome, DeployError>,
}

/// A target that records what it was asked to deploy and enforces epoch fencing and
/// generation ordering like a real one. Its instance is a memory cell.
#[derive(Debug, Default)]
pub struct RecordingTarget {
    name: String,
    state: Mutex<RecordingState>,
}

#[derive(Debug, Default)]
struct RecordingState {
    fence: fence::Fence,
    deployed: Vec<DeployRequest>,
    attempts: Vec<DeployAttempt>,
    current_checksum: Option<Checksum>,
    unreachable: bool,
}

impl RecordingState {
    /// What the instance `name` answers to `request`, applying it when accepted.
    fn answer(
        &mut self,
        name: &str,
        request: &DeployRequest,
    ) -> Result<DeployOutcome, DeployError> {
        if self.unreachable {
            return Err(DeployError::Unreachable(format!("{name} is down")));
        }
        self.fence.admit(request)?;
        self.fence.accept(request);
        let unchanged = self.current_checksum == Some(request.checksum);
        self.current_checksum = Some(request.checksum);
        self.deployed.push(request.clone());
        Ok(DeployOutcome {
            reloaded: !unchanged,
            reload_reason: (!unchanged).then_some(ReloadReason::Structural),
            runtime_changes: 0,
            unchanged,
            degraded: None,
        })
    }
}

impl RecordingTarget {
    pub fn new(name: impl Into<String>) -> RecordingTarget {
        RecordingTarget {
            name: name.into(),
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecordingState> {
        // The state is plain data; a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every accepted request, in order.
    pub fn deployed(&self) -> Vec<DeployRequest> {
        self.lock().deployed.clone()
    }

    /// Every request, accepted or refused, in order, with when it came and the answer.
    pub fn attempts(&self) -> Vec<DeployAttempt> {
        self.lock().attempts.clone()
    }

    /// Makes the instance unreachable (or reachable again).
    pub fn set_unreachable(&self, unreachable: bool) {
        self.lock().unreachable = unreachable;
    }

    /// Changes what the instance runs behind haptor's back (drift).
    pub fn tamper(&self, checksum: &Checksum) {
        self.lock().current_checksum = Some(*checksum);
    }
}

impl DeployTarget for RecordingTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        Box::pin(async move {
            let at = tokio::time::Instant::now();
            let mut state = self.lock();
            let result = state.answer(&self.name, request);
            state.attempts.push(DeployAttempt {
                at,
                request: request.clone(),
                result: result.clone(),
            });
            result
        })
    }

    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        Box::pin(async move {
            let state = self.lock();
            if state.unreachable {
                return Err(DeployError::Unreachable(format!("{} is down", self.name)));
            }
            Ok(state.current_checksum)
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A render for the state machines' tests: a generation and a `haproxy.cfg`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct TestRender {
        generation: u64,
        rendered: Arc<RenderedConfig>,
        checksum: Checksum,
    }

    impl TestRender {
        pub(crate) fn new(generation: u64, haproxy_cfg: &str) -> TestRender {
            let rendered = RenderedConfig {
                haproxy_cfg: haproxy_cfg.into(),
                ..RenderedConfig::default()
            };
            TestRender {
                generation,
                checksum: rendered.checksum(),
                rendered: Arc::new(rendered),
            }
        }
    }

    impl DeployableRender for TestRender {
        fn checksum(&self) -> Checksum {
            self.checksum
        }
        fn generation(&self) -> u64 {
            self.generation
        }
        fn rendered(&self) -> &RenderedConfig {
            &self.rendered
        }
    }

    fn request(epoch: u64, generation: u64, checksum: &str) -> DeployRequest {
        DeployRequest {
            rendered: Arc::new(RenderedConfig::default()),
            checksum: Checksum::of(checksum.as_bytes()),
            epoch,
            generation,
            timeout: DEFAULT_DEPLOYMENT_TIMEOUT,
        }
    }

    #[tokio::test]
    async fn a_write_from_an_older_epoch_is_refused_and_changes_nothing() {
        let target = RecordingTarget::new("pod-a");
        target
            .deploy(&request(3, 1, "aaa"))
            .await
            .expect("accepted");
        let err = target
            .deploy(&request(2, 9, "bbb"))
            .await
            .expect_err("fenced");
        assert_eq!(
            err,
            DeployError::Fenced {
                offered: 2,
                accepted: 3
            }
        );
        assert_eq!(
            target.deployed_checksum().await.expect("reachable"),
            Some(Checksum::of(b"aaa"))
        );
        assert_eq!(target.deployed().len(), 1);
    }

    #[tokio::test]
    async fn every_attempt_is_recorded_with_its_answer_refused_ones_included() {
        let target = RecordingTarget::new("pod-a");
        target.set_unreachable(true);
        let _ = target.deploy(&request(3, 1, "down")).await;
        target.set_unreachable(false);
        let _ = target.deploy(&request(3, 2, "up")).await;
        let _ = target.deploy(&request(2, 3, "fenced")).await;
        let attempts = target.attempts();
        let answers: Vec<_> = attempts
            .iter()
            .map(|a| (a.request.checksum, a.result.clone()))
            .collect();
        assert_eq!(
            answers,
            vec![
                (
                    Checksum::of(b"down"),
                    Err(DeployError::Unreachable("pod-a is down".into()))
                ),
                (
                    Checksum::of(b"up"),
                    Ok(DeployOutcome {
                        reloaded: true,
                        reload_reason: Some(ReloadReason::Structural),
                        runtime_changes: 0,
                        unchanged: false,
                        degraded: None
                    })
                ),
                (
                    Checksum::of(b"fenced"),
                    Err(DeployError::Fenced {
                        offered: 2,
                        accepted: 3
                    })
                ),
            ]
        );
        assert!(attempts.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(
            target.deployed().len(),
            1,
            "only the accepted one is deployed"
        );
    }

    #[tokio::test]
    async fn an_older_render_never_lands_after_a_newer_one() {
        let target = RecordingTarget::new("pod-a");
        target
            .deploy(&request(1, 5, "new"))
            .await
            .expect("accepted");
        assert!(matches!(
            target.deploy(&request(1, 4, "old")).await,
            Err(DeployError::Stale { .. })
        ));
        assert_eq!(
            target.deployed_checksum().await.expect("reachable"),
            Some(Checksum::of(b"new"))
        );
    }
}
