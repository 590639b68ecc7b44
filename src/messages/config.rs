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

/// What a move from one leadership to the next means for what runs only while leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipChange {
    Gained,
    Lost,
    /// A new term without a gap (a fenced always-leader moving above the targets' epoch):
    /// what leads restarts, so nothing keeps the old epoch.
    NewTerm,
    Unchanged,
}

impl Leadership {
    /// What moving from `self` to `next` means (one rule for every leader-only subtree).
    pub fn change_to(self, next: Leadership) -> LeadershipChange {
        match (self.is_leader, next.is_leader) {
            (false, true) => LeadershipChange::Gained,
            (true, false) => LeadershipChange::Lost,
            (true, true) if self.epoch != next.epoch => LeadershipChange::NewTerm,
            _ => LeadershipChange::Unchanged,
        }
    }
}

/// Messages of the LeaderElector.
pub enum LeaderElectorMsg {
    /// The leadership source reported a change (sent by the elector's own source task).
    Changed(Leadership),
    /// The current leadership.
    Current(RpcReplyPort<Leadership>),
}

#[cfg(test)]
mod leadership_tests {
    use super::*;

    fn at(is_leader: bool, epoch: u64) -> Leadership {
        Leadership { is_leader, epoch }
    }

    #[test]
    fn a_move_between_leaderships_is_a_gain_a_loss_a_new_term_or_nothing() {
        assert_eq!(
            at(false, 0).change_to(at(true, 1)),
            LeadershipChange::Gained
        );
        assert_eq!(at(true, 1).change_to(at(false, 1)), LeadershipChange::Lost);
        assert_eq!(
            at(true, 1).change_to(at(true, 2)),
            LeadershipChange::NewTerm
        );
        assert_eq!(
            at(true, 2).change_to(at(true, 2)),
            LeadershipChange::Unchanged
        );
        assert_eq!(
            at(false, 1).change_to(at(false, 2)),
            LeadershipChange::Unchanged
        );
    }
}
