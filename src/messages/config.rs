//! Messages about the `HAProxyTemplateConfig` and leadership: loading and validating a config
//! (scatter-gather over the validators), rebuilding the config iteration, and leadership
//! changes.

use std::sync::Arc;

use ractor::RpcReplyPort;

use crate::pure::config::{HAProxyTemplateConfig, HAProxyTemplateConfigSpec};
use crate::pure::pipeline::CompiledConfig;

/// A validator's answer: the problems it found (empty: valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorVerdict {
    pub validator: &'static str,
    pub problems: Vec<String>,
}

/// Messages of the Basic, Template and JsonPath validators.
pub enum ValidatorMsg {
    /// Check a spec and answer with a verdict.
    Validate(
        Arc<HAProxyTemplateConfigSpec>,
        RpcReplyPort<ValidatorVerdict>,
    ),
}

/// Messages of the ConfigLoader.
pub enum ConfigLoaderMsg {
    /// The config source has a new version (sent by the loader's own source task).
    ConfigChanged(Box<HAProxyTemplateConfig>),
}

/// Messages of the IterationManager, which owns the config-iteration subtree.
pub enum IterationManagerMsg {
    /// A validated config that needs a new iteration (different watched resources, or the
    /// first config). The manager stops the running iteration, waits for it, and starts one.
    Rebuild(Arc<CompiledConfig>),
}

/// Whether this replica leads, and the epoch of its leadership (grows with every change of
/// leader; deployments carry it for fencing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leadership {
    pub is_leader: bool,
    pub epoch: u64,
}

/// Messages of the LeaderElector.
pub enum LeaderElectorMsg {
    /// The leadership source reported a change (sent by the elector's own source task).
    Changed(Leadership),
    /// The current leadership.
    Current(RpcReplyPort<Leadership>),
}
