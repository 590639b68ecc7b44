//! Deployment pacing (`dataplane.minDeploymentInterval`) as a pure state machine.
//!
//! Only deployments that reload HAProxy are paced, and each instance is paced on its own: a
//! reload costs a new worker (and, with long-lived connections, an old one draining), so two
//! reloads of one instance must lie at least the interval apart, while a change HAProxy
//! applies live through its runtime API goes at once, whenever the last reload was. The
//! DeployScheduler asks [`Pacer::wait`] before sending a reloading render to an instance,
//! tells [`Pacer::reloaded`] when it sends one (and when an instance reports a reload it did),
//! and keeps the one latest render for every instance that has to wait.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// When each instance last reloaded, and the interval between reloads.
#[derive(Debug, Clone, Default)]
pub struct Pacer {
    min_interval: Duration,
    last_reload: BTreeMap<String, Instant>,
}

impl Pacer {
    pub fn new(min_interval: Duration) -> Pacer {
        Pacer {
            min_interval,
            last_reload: BTreeMap::new(),
        }
    }

    /// Applies a changed `minDeploymentInterval` at once (to waits computed from now on).
    pub fn set_min_interval(&mut self, min_interval: Duration) {
        self.min_interval = min_interval;
    }

    pub fn min_interval(&self) -> Duration {
        self.min_interval
    }

    /// How long a reloading deployment to `instance` must wait at `now` (zero: go now).
    pub fn wait(&self, instance: &str, now: Instant) -> Duration {
        self.last_reload
            .get(instance)
            .map_or(Duration::ZERO, |last| {
                self.min_interval
                    .saturating_sub(now.saturating_duration_since(*last))
            })
    }

    /// `instance` reloaded (or was sent a reloading deployment) at `at`. An earlier time
    /// than the one known never moves the last reload back.
    pub fn reloaded(&mut self, instance: &str, at: Instant) {
        let last = self.last_reload.entry(instance.to_string()).or_insert(at);
        if at > *last {
            *last = at;
        }
    }

    /// Forgets an instance that went away.
    pub fn forget(&mut self, instance: &str) {
        self.last_reload.remove(instance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_instance_that_never_reloaded_need_not_wait() {
        let pacer = Pacer::new(2 * SECOND);
        assert_eq!(pacer.wait("pod-a", Instant::now()), Duration::ZERO);
    }

    #[test]
    fn a_reload_makes_that_instance_wait_out_the_rest_of_the_interval() {
        let mut pacer = Pacer::new(2 * SECOND);
        let start = Instant::now();
        pacer.reloaded("pod-a", start);
        assert_eq!(pacer.wait("pod-a", start + SECOND / 2), SECOND * 3 / 2);
        assert_eq!(pacer.wait("pod-a", start + 2 * SECOND), Duration::ZERO);
    }

    #[test]
    fn instances_are_paced_each_on_its_own() {
        let mut pacer = Pacer::new(2 * SECOND);
        let start = Instant::now();
        pacer.reloaded("pod-a", start);
        assert_eq!(pacer.wait("pod-b", start), Duration::ZERO);
        pacer.forget("pod-a");
        assert_eq!(pacer.wait("pod-a", start), Duration::ZERO);
    }

    #[test]
    fn a_changed_interval_applies_to_the_next_wait() {
        let mut pacer = Pacer::new(10 * SECOND);
        let start = Instant::now();
        pacer.reloaded("pod-a", start);
        pacer.set_min_interval(SECOND);
        assert_eq!(pacer.wait("pod-a", start + SECOND / 2), SECOND / 2);
    }

    #[test]
    fn a_late_report_of_an_earlier_reload_does_not_shorten_the_wait() {
        let mut pacer = Pacer::new(2 * SECOND);
        let start = Instant::now();
        pacer.reloaded("pod-a", start + SECOND);
        pacer.reloaded("pod-a", start);
        assert_eq!(pacer.wait("pod-a", start + SECOND), 2 * SECOND);
    }
}
