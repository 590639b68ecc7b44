//! Epoch fencing and generation ordering: the one rule by which every deploy target (the
//! local target, the Data Plane API target, the recording target of the tests) decides
//! whether it takes a request. Leader election alone does not stop a deposed leader's late
//! write; this does. A target keeps the highest epoch it accepted and the generation it last
//! deployed in that epoch, and refuses:
//! - a request from a lower epoch ([`DeployError::Fenced`]): a leader that lost its term;
//! - a request of the accepted epoch with an older generation ([`DeployError::Stale`]): an
//!   older render that arrives after a newer one.
//!
//! A higher epoch is always taken (a new leader numbers its renders from 1 again). Targets
//! that keep the epoch on the instance too (a file in the work directory, general storage
//! on the pod) [`Fence::learn`] what they read there, so a restarted or deposed controller
//! in another process is refused as well.

use super::{DeployError, DeployRequest};

/// What a target accepted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fence {
    accepted_epoch: u64,
    /// The generation of the newest request accepted in `accepted_epoch`.
    deployed_generation: u64,
}

impl Fence {
    /// A fence that has accepted `epoch` (read back from the instance) and no generation.
    pub fn with_epoch(epoch: u64) -> Fence {
        Fence {
            accepted_epoch: epoch,
            deployed_generation: 0,
        }
    }

    /// The highest epoch accepted or learnt.
    pub fn accepted_epoch(&self) -> u64 {
        self.accepted_epoch
    }

    /// Whether `request` may be deployed; nothing is recorded.
    pub fn admit(&self, request: &DeployRequest) -> Result<(), DeployError> {
        if request.epoch < self.accepted_epoch {
            return Err(DeployError::Fenced {
                offered: request.epoch,
                accepted: self.accepted_epoch,
            });
        }
        if request.epoch == self.accepted_epoch && request.generation < self.deployed_generation {
            return Err(DeployError::Stale {
                offered: request.generation,
                deployed: self.deployed_generation,
            });
        }
        Ok(())
    }

    /// Whether `request` brings an epoch above the accepted one (which a target keeping the
    /// epoch on the instance then writes there).
    pub fn raises_epoch(&self, request: &DeployRequest) -> bool {
        request.epoch > self.accepted_epoch
    }

    /// Records `request` as taken: its epoch and its generation.
    pub fn accept(&mut self, request: &DeployRequest) {
        self.accepted_epoch = request.epoch;
        self.deployed_generation = request.generation;
    }

    /// Learns an epoch accepted elsewhere (kept on the instance): the accepted epoch rises
    /// to it, never falls.
    pub fn learn(&mut self, epoch: u64) {
        if epoch > self.accepted_epoch {
            self.accepted_epoch = epoch;
            self.deployed_generation = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT;
    use crate::pure::rendered::RenderedConfig;

    fn request(epoch: u64, generation: u64) -> DeployRequest {
        DeployRequest {
            rendered: Arc::new(RenderedConfig::default()),
            checksum: RenderedConfig::default().checksum(),
            epoch,
            generation,
            timeout: DEFAULT_DEPLOYMENT_TIMEOUT,
        }
    }

    #[test]
    fn a_lower_epoch_is_fenced_and_an_older_generation_of_the_same_epoch_is_stale() {
        let mut fence = Fence::default();
        fence.accept(&request(3, 5));
        assert_eq!(
            fence.admit(&request(2, 9)),
            Err(DeployError::Fenced {
                offered: 2,
                accepted: 3
            })
        );
        assert_eq!(
            fence.admit(&request(3, 4)),
            Err(DeployError::Stale {
                offered: 4,
                deployed: 5
            })
        );
        assert_eq!(fence.admit(&request(3, 5)), Ok(()), "the same render again");
        assert_eq!(fence.admit(&request(4, 1)), Ok(()), "a new leader from 1");
        assert!(fence.raises_epoch(&request(4, 1)) && !fence.raises_epoch(&request(3, 6)));
    }

    #[test]
    fn an_epoch_learnt_from_the_instance_only_ever_raises_the_fence() {
        let mut fence = Fence::with_epoch(2);
        fence.accept(&request(2, 7));
        fence.learn(1);
        assert_eq!(fence.accepted_epoch(), 2);
        assert!(matches!(
            fence.admit(&request(2, 6)),
            Err(DeployError::Stale { .. })
        ));
        fence.learn(5);
        assert_eq!(fence.accepted_epoch(), 5);
        assert!(matches!(
            fence.admit(&request(4, 99)),
            Err(DeployError::Fenced { .. })
        ));
        assert_eq!(fence.admit(&request(5, 1)), Ok(()));
    }
}
