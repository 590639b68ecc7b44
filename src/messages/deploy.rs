//! Messages of the leader-only subtree: the Coordinator (render + validate), the
//! DeployScheduler, one Deployer per instance, the DriftMonitor, the ConfigPublisher, and
//! Discovery which reports instances.

use std::sync::Arc;
use std::time::Instant;

use ractor::RpcReplyPort;

use super::events::CorrelationId;
use crate::pure::deploy::{DeployOutcome, DeployTarget};
use crate::pure::rendered::RenderedConfig;

/// A render that passed validation, ready to deploy.
#[derive(Debug, Clone)]
pub struct ValidatedRender {
    pub rendered: Arc<RenderedConfig>,
    pub checksum: String,
    /// Grows with every successful render of this controller process.
    pub generation: u64,
    pub correlation: CorrelationId,
    /// When the change that led to this render was first seen.
    pub triggered_at: Instant,
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
    pub triggered_at: Instant,
    pub result: Result<RenderedAndValidated, RenderFailure>,
}

/// A render that passed validation, before the Coordinator numbers it.
#[derive(Debug)]
pub struct RenderedAndValidated {
    pub rendered: Arc<RenderedConfig>,
    pub checksum: String,
    pub render_time: std::time::Duration,
    pub validate_time: std::time::Duration,
    pub cache_hit: bool,
}

/// Why a render+validate step failed, located where possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderFailure {
    /// `render` or the validation phase (`syntax`, `schema`, `semantic`), or `check` when
    /// `haproxy -c` could not run.
    pub stage: String,
    pub message: String,
    pub template: Option<String>,
    pub line: Option<usize>,
}

/// Messages of the Coordinator.
pub enum CoordinatorMsg {
    /// Render and validate now (or once the running render finishes; triggers that arrive
    /// meanwhile coalesce into one, the latest correlation winning).
    Trigger {
        reason: String,
        correlation: CorrelationId,
        at: Instant,
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
    /// Internal: the pacing interval has passed; deploy the pending render.
    PacingElapsed,
    /// A Deployer finished a deployment.
    Deployed {
        instance: String,
        checksum: String,
        result: Result<DeployOutcome, String>,
    },
    /// The desired render, for drift repair.
    Desired(RpcReplyPort<Option<ValidatedRender>>),
    /// Names of the instances that have a Deployer.
    Instances(RpcReplyPort<Vec<String>>),
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
    /// Record an instance's deployment result in the published status.
    InstanceResult {
        instance: String,
        checksum: String,
        result: Result<DeployOutcome, String>,
    },
}

/// Messages of Discovery.
pub enum DiscoveryMsg {
    /// The instance source reported a new set (sent by Discovery's own source task).
    Changed(Vec<Instance>),
    /// The instances known now.
    Current(RpcReplyPort<Vec<String>>),
}
