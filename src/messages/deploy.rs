//! Messages of the leader-only subtree: the Coordinator (render + validate), the
//! DeployScheduler, one Deployer per instance, the DriftMonitor, the ConfigPublisher, and
//! Discovery which reports instances.

use std::sync::Arc;
use std::time::Instant;

use ractor::RpcReplyPort;

use super::events::CorrelationId;
use crate::pure::deploy::{DeployError, DeployOutcome, DeployTarget, DeployableRender};
use crate::pure::rendered::{Checksum, RenderedConfig};
use crate::pure::validate::ValidationPhase;

/// A render that passed validation, ready to deploy.
#[derive(Debug, Clone)]
pub struct ValidatedRender {
    pub rendered: Arc<RenderedConfig>,
    /// The render's checksum, as the pipeline computed it when it validated the render.
    pub checksum: Checksum,
    /// Grows with every render this controller process hands on, across config iterations
    /// and leadership terms (one counter in `Services`), so a target that took a render of
    /// an earlier iteration takes the next iteration's renders too. A restarted process
    /// numbers from 1 again; its higher epoch makes targets accept that.
    pub generation: u64,
    pub correlation: CorrelationId,
    /// When a watcher first saw the change (before its debounce) that led to this render,
    /// or when the config changed; `None` for renders no change asked for (the initial
    /// sync, a new leader's replay).
    pub changed_at: Option<Instant>,
}

impl DeployableRender for ValidatedRender {
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

/// An HAProxy instance to deploy to.
#[derive(Debug, Clone)]
pub struct Instance {
    pub name: String,
    pub target: Arc<dyn DeployTarget>,
}

/// The result of one render+validate step, sent back to the Coordinator by the task that ran it.
#[derive(Debug)]
pub struct RenderOutcome {
    pub correlation: CorrelationId,
    pub changed_at: Option<Instant>,
    pub result: Result<RenderedAndValidated, RenderFailure>,
}

/// A render that passed validation, before the Coordinator numbers it.
#[derive(Debug)]
pub struct RenderedAndValidated {
    pub rendered: Arc<RenderedConfig>,
    pub checksum: Checksum,
    pub render_time: std::time::Duration,
    pub validate_time: std::time::Duration,
    pub cache_hit: bool,
    /// `haproxy -c` was skipped (a runtime-only change from the last accepted render).
    pub semantic_skipped: bool,
}

/// Why a render+validate step failed, located where possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderFailure {
    pub stage: FailureStage,
    pub message: String,
    pub template: Option<String>,
    pub line: Option<usize>,
}

impl RenderFailure {
    /// A template that did not render, located at its template and line.
    pub fn of_render(error: &crate::pure::template::TemplateError) -> RenderFailure {
        RenderFailure {
            stage: FailureStage::Render,
            message: error.to_string(),
            template: error.template().map(String::from),
            line: error.line(),
        }
    }
}

/// The step of a render+validate run that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureStage {
    /// The templates did not render.
    Render,
    /// A validation phase refused the rendered configuration.
    Validation(ValidationPhase),
    /// `haproxy -c` could not run (missing binary, timeout, I/O); this says nothing about
    /// the configuration.
    CheckUnavailable,
}

impl FailureStage {
    /// The stage as a metric label value and in logs and `/debug/vars/errors`: `render`, the
    /// validation phase (`syntax`, `schema`, `semantic`) or `check_unavailable`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            FailureStage::Render => "render",
            FailureStage::Validation(phase) => phase.metric_label(),
            FailureStage::CheckUnavailable => "check_unavailable",
        }
    }
}

impl std::fmt::Display for FailureStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.metric_label())
    }
}

/// Messages of the Coordinator.
pub enum CoordinatorMsg {
    /// Render and validate now (or once the running render finishes; triggers that arrive
    /// meanwhile coalesce into one, the latest correlation winning).
    Trigger {
        reason: String,
        correlation: CorrelationId,
        /// When the change behind the trigger was first seen (see
        /// [`ValidatedRender::changed_at`]).
        changed_at: Option<Instant>,
    },
    /// Internal: the render started by the coordinator finished.
    RenderFinished(Box<RenderOutcome>),
    /// How many renders ran so far.
    RenderCount(RpcReplyPort<u64>),
}

/// Messages of the DeployScheduler.
pub enum DeploySchedulerMsg {
    /// A new validated render to deploy to every instance.
    Deploy(ValidatedRender),
    /// The set of instances changed.
    InstancesChanged(Vec<Instance>),
    /// Internal: a pacing interval has passed (or the config changed in place); deploy the
    /// latest render to the instances that may take it now.
    PacingElapsed,
    /// A Deployer finished a deployment.
    Deployed {
        instance: String,
        checksum: Checksum,
        result: Result<DeployOutcome, DeployError>,
    },
    /// The desired render, for drift repair.
    Desired(RpcReplyPort<Option<ValidatedRender>>),
    /// Names of the instances that have a Deployer.
    Instances(RpcReplyPort<Vec<String>>),
    /// Names of the instances whose next (reloading) deployment waits for its pacing
    /// interval.
    Waiting(RpcReplyPort<Vec<String>>),
}

/// Messages of a Deployer (one per instance).
pub enum DeployerMsg {
    /// Deploy this render with this epoch.
    Deploy { render: ValidatedRender, epoch: u64 },
    /// Internal: retry the last failed deployment after backoff.
    Retry,
    /// Compare the instance with the desired checksum and redeploy on drift.
    CheckDrift {
        desired: ValidatedRender,
        epoch: u64,
    },
}

/// Messages of the DriftMonitor.
pub enum DriftMonitorMsg {
    /// Internal timer: compare every instance with the desired configuration.
    Tick,
}

/// Messages of the ConfigPublisher.
pub enum ConfigPublisherMsg {
    /// Publish a validated render (the HAProxyCfg resource).
    Publish(ValidatedRender),
    /// Record an HTTP resource's state in the published status.
    HttpResource(crate::pure::config::HttpResourceStatus),
    /// Record an instance's deployment result in the published status.
    InstanceResult {
        instance: String,
        checksum: Checksum,
        result: Result<DeployOutcome, DeployError>,
    },
}

/// Messages of Discovery.
pub enum DiscoveryMsg {
    /// The instance source reported a new set (sent by Discovery's own source task).
    Changed(Vec<Instance>),
    /// The instances known now.
    Current(RpcReplyPort<Vec<String>>),
}
