//! One instance's deployment attempts as a pure state machine: the decisions of a Deployer
//! actor, which feeds in what happens (a render offered, an attempt's result, the backoff
//! timer, a drift check's answer) and carries out what [`Attempts`] returns (deploy this
//! render with this epoch, arm a retry timer, ask the instance what it runs).
//!
//! The rules:
//! - **latest wins**: the wanted render only moves forward; an offer of an older generation
//!   than the one wanted is ignored, and an attempt always carries the wanted render;
//! - **nothing twice**: a render the instance is known to run is not deployed again; after a
//!   failed attempt what the instance runs is unknown, so the next offer or retry deploys;
//! - **backoff**: a retryable failure ([`DeployError::is_retryable`]) arms one retry after
//!   [`Backoff::after`] the consecutive failures (doubling from `base`, capped at `max`);
//!   failures that come while a retry is armed do not arm another; a success resets them;
//! - **fencing**: an instance that answers [`DeployError::Fenced`] has taken a newer leader's
//!   write: this replica stops deploying to it for good (the fence itself is
//!   [`super::fence::Fence`], applied by the target);
//! - **drift**: the drift monitor's desired render becomes the wanted one unless a newer one
//!   is wanted already; when the instance answers that it runs something else, it is deployed
//!   again.

use std::time::Duration;

use super::{DeployError, DeployOutcome, DeployableRender};
use crate::pure::rendered::Checksum;

/// Exponential backoff between the attempts of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failure.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Backoff {
    /// The wait after `failures` consecutive failures: `base`, doubled per further failure,
    /// at most `max`.
    pub fn after(&self, failures: u32) -> Duration {
        self.base
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
            .min(self.max)
    }
}

/// A deployment to carry out: this render, with this leader epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt<R> {
    pub render: R,
    pub epoch: u64,
}

/// How an attempt ended, and what follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The instance runs the render.
    Deployed,
    /// A newer leader (epoch `accepted`) wrote to the instance: no more attempts.
    Fenced { accepted: u64 },
    /// The attempt failed (`failures` in a row); `retry_in` is set when a retry timer is to
    /// be armed now (a retryable error, and none armed yet).
    Failed {
        failures: u32,
        retry_in: Option<Duration>,
    },
}

/// The attempt state of one instance.
#[derive(Debug, Clone)]
pub struct Attempts<R> {
    backoff: Backoff,
    /// The render the instance should run, and the epoch to deploy it with.
    wanted: Option<Attempt<R>>,
    /// The checksum the instance is known to run (`None`: nothing known).
    running: Option<Checksum>,
    failures: u32,
    retry_armed: bool,
    fenced: bool,
}

impl<R: DeployableRender> Attempts<R> {
    pub fn new(backoff: Backoff) -> Attempts<R> {
        Attempts {
            backoff,
            wanted: None,
            running: None,
            failures: 0,
            retry_armed: false,
            fenced: false,
        }
    }

    /// A render to bring the instance to (from the scheduler): the attempt to make now, if
    /// any.
    pub fn offer(&mut self, render: R, epoch: u64) -> Option<Attempt<R>> {
        if self.is_newer_wanted_than(&render) {
            return None;
        }
        self.wanted = Some(Attempt { render, epoch });
        self.next()
    }

    /// The retry timer fired: the attempt to make now, if the instance does not run the
    /// wanted render yet.
    pub fn retry_due(&mut self) -> Option<Attempt<R>> {
        self.retry_armed = false;
        self.next()
    }

    /// The drift monitor's turn: `desired` becomes the wanted render unless a newer one is
    /// wanted. Returns the checksum to compare with what the instance runs (`None`: nothing
    /// to check, the deployer is fenced or wants nothing).
    pub fn drift_check(&mut self, desired: R, epoch: u64) -> Option<Checksum> {
        if self.fenced {
            return None;
        }
        if !self.is_newer_wanted_than(&desired) {
            self.wanted = Some(Attempt {
                render: desired,
                epoch,
            });
        }
        self.wanted.as_ref().map(|w| w.render.checksum())
    }

    /// What the instance answered it runs: when that is not the wanted render, the attempt
    /// that deploys it again.
    pub fn drift_observed(&mut self, actual: Option<Checksum>) -> Option<Attempt<R>> {
        let wanted = self.wanted.as_ref()?.render.checksum();
        if actual == Some(wanted) {
            self.running = actual;
            return None;
        }
        self.running = actual;
        self.next()
    }

    /// The attempt ended with `result`.
    pub fn finished(
        &mut self,
        attempt: &Attempt<R>,
        result: &Result<DeployOutcome, DeployError>,
    ) -> AttemptEnd {
        match result {
            Ok(_) => {
                self.failures = 0;
                self.running = Some(attempt.render.checksum());
                AttemptEnd::Deployed
            }
            Err(DeployError::Fenced { accepted, .. }) => {
                self.fenced = true;
                AttemptEnd::Fenced {
                    accepted: *accepted,
                }
            }
            Err(error) => {
                self.failures = self.failures.saturating_add(1);
                self.running = None;
                let retry_in = (error.is_retryable() && !self.retry_armed).then(|| {
                    self.retry_armed = true;
                    self.backoff.after(self.failures)
                });
                AttemptEnd::Failed {
                    failures: self.failures,
                    retry_in,
                }
            }
        }
    }

    /// A newer leader wrote to the instance: nothing more is deployed.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The wanted render, if any.
    pub fn wanted(&self) -> Option<&R> {
        self.wanted.as_ref().map(|w| &w.render)
    }

    fn is_newer_wanted_than(&self, render: &R) -> bool {
        self.wanted
            .as_ref()
            .is_some_and(|w| w.render.generation() > render.generation())
    }

    /// The attempt the state calls for: the wanted render, unless fenced or already running.
    fn next(&self) -> Option<Attempt<R>> {
        if self.fenced {
            return None;
        }
        let wanted = self.wanted.as_ref()?;
        (self.running != Some(wanted.render.checksum())).then(|| wanted.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::deploy::tests::TestRender;

    const BACKOFF: Backoff = Backoff {
        base: Duration::from_millis(50),
        max: Duration::from_millis(200),
    };

    fn attempts() -> Attempts<TestRender> {
        Attempts::new(BACKOFF)
    }

    fn unreachable() -> Result<DeployOutcome, DeployError> {
        Err(DeployError::Unreachable("down".into()))
    }

    #[test]
    fn an_offered_render_is_attempted_once_and_not_again_once_it_runs() {
        let mut a = attempts();
        let attempt = a.offer(TestRender::new(1, "a"), 5).expect("an attempt");
        assert_eq!(attempt.epoch, 5);
        assert_eq!(
            a.finished(&attempt, &Ok(DeployOutcome::default())),
            AttemptEnd::Deployed
        );
        assert_eq!(a.offer(TestRender::new(1, "a"), 5), None);
        assert_eq!(a.retry_due(), None, "nothing to retry");
    }

    #[test]
    fn an_older_render_offered_after_a_newer_one_is_ignored() {
        let mut a = attempts();
        let newer = a.offer(TestRender::new(7, "new"), 1).expect("attempt");
        assert_eq!(a.offer(TestRender::new(6, "old"), 1), None);
        assert_eq!(a.wanted(), Some(&TestRender::new(7, "new")));
        a.finished(&newer, &unreachable());
        assert_eq!(
            a.retry_due().map(|attempt| attempt.render),
            Some(TestRender::new(7, "new")),
            "the retry carries the newest render"
        );
    }

    #[test]
    fn failures_back_off_doubling_up_to_the_cap_with_one_retry_armed_at_a_time() {
        let mut a = attempts();
        let first = a.offer(TestRender::new(1, "a"), 1).expect("attempt");
        let ends: Vec<AttemptEnd> = (0..4)
            .map(|_| {
                let end = a.finished(&first, &unreachable());
                a.retry_due();
                end
            })
            .collect();
        let waits: Vec<Option<Duration>> = ends
            .iter()
            .map(|end| match end {
                AttemptEnd::Failed { retry_in, .. } => *retry_in,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            waits,
            [50, 100, 200, 200].map(|ms| Some(Duration::from_millis(ms)))
        );
        // A fifth failure arms a retry; a newer render that fails meanwhile arms none.
        assert_eq!(
            a.finished(&first, &unreachable()),
            AttemptEnd::Failed {
                failures: 5,
                retry_in: Some(BACKOFF.max)
            }
        );
        let second = a.offer(TestRender::new(2, "b"), 1).expect("attempt");
        assert_eq!(
            a.finished(&second, &unreachable()),
            AttemptEnd::Failed {
                failures: 6,
                retry_in: None
            }
        );
        assert_eq!(
            a.finished(&second, &Ok(DeployOutcome::default())),
            AttemptEnd::Deployed
        );
        assert_eq!(a.retry_due(), None, "the retry finds the render running");
        let third = a.offer(TestRender::new(3, "c"), 1).expect("attempt");
        assert_eq!(
            a.finished(&third, &unreachable()),
            AttemptEnd::Failed {
                failures: 1,
                retry_in: Some(BACKOFF.base)
            },
            "a success resets the backoff"
        );
    }

    #[test]
    fn an_error_that_retrying_cannot_mend_arms_no_retry() {
        let mut a = attempts();
        let attempt = a.offer(TestRender::new(1, "a"), 1).expect("attempt");
        let stale = Err(DeployError::Stale {
            offered: 1,
            deployed: 2,
        });
        assert_eq!(
            a.finished(&attempt, &stale),
            AttemptEnd::Failed {
                failures: 1,
                retry_in: None
            }
        );
    }

    #[test]
    fn a_fenced_instance_gets_no_further_attempt_of_any_kind() {
        let mut a = attempts();
        let attempt = a.offer(TestRender::new(1, "a"), 5).expect("attempt");
        let fenced = Err(DeployError::Fenced {
            offered: 5,
            accepted: 9,
        });
        assert_eq!(
            a.finished(&attempt, &fenced),
            AttemptEnd::Fenced { accepted: 9 }
        );
        assert!(a.is_fenced());
        assert_eq!(a.offer(TestRender::new(2, "b"), 5), None);
        assert_eq!(a.retry_due(), None);
        assert_eq!(a.drift_check(TestRender::new(3, "c"), 5), None);
        assert_eq!(a.drift_observed(None), None);
    }

    #[test]
    fn drift_redeploys_the_wanted_render_when_the_instance_runs_something_else() {
        let mut a = attempts();
        let attempt = a.offer(TestRender::new(4, "a"), 2).expect("attempt");
        a.finished(&attempt, &Ok(DeployOutcome::default()));
        // The monitor's desired render is older than the wanted one: the wanted one stays.
        assert_eq!(
            a.drift_check(TestRender::new(3, "old"), 2),
            Some(TestRender::new(4, "a").checksum())
        );
        assert_eq!(
            a.drift_observed(Some(TestRender::new(4, "a").checksum())),
            None
        );
        let again = a
            .drift_observed(Some(Checksum::of(b"edited by hand")))
            .expect("a redeployment");
        assert_eq!(again.render, TestRender::new(4, "a"));
        a.finished(&again, &Ok(DeployOutcome::default()));
        assert_eq!(
            a.drift_observed(None).map(|r| r.epoch),
            Some(2),
            "nothing runs"
        );
    }

    #[test]
    fn a_drift_check_makes_the_monitors_newer_render_the_wanted_one() {
        let mut a = attempts();
        assert_eq!(
            a.drift_check(TestRender::new(1, "a"), 3),
            Some(TestRender::new(1, "a").checksum())
        );
        let attempt = a.drift_observed(None).expect("deploys what nothing ran");
        assert_eq!(
            (attempt.render, attempt.epoch),
            (TestRender::new(1, "a"), 3)
        );
    }
}
