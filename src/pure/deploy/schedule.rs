//! The deploy scheduler's decisions as a pure state machine: which instance gets the latest
//! render now, which waits for its pacing interval, and which Deployers to start and stop.
//! The DeployScheduler actor feeds [`Schedule`] what happens (a new render, the pacing timer,
//! an in-place config change, the instances Discovery reports, a Deployer started, a
//! deployment's result) and carries out what it returns: renders to send to Deployers, a
//! timer to arm, Deployers to start and stop.
//!
//! The rules:
//! - **one latest-wins slot**: the scheduler holds the one render every instance should run;
//!   a newer render replaces it, also for instances still waiting;
//! - **pacing**: only a render that needs a reload relative to the one last sent to an
//!   instance is paced ([`Pacer`], `dataplane.minDeploymentInterval`, per instance); a
//!   runtime-only change, and an instance's first render, go at once. Instances that must
//!   wait are named ([`Schedule::waiting`]) and one timer, for the shortest wait, is armed
//!   at a time; the interval in force is the one passed with each event, so a shorter
//!   `minDeploymentInterval` releases a waiting instance at the next event;
//! - **membership**: an instance that appears gets a Deployer and, once it runs, the latest
//!   render at once; one that goes, or comes back with another target (new credentials, a
//!   new address), loses its Deployer and its pacing (and gets a new Deployer).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pacing::Pacer;
use super::plan::plan_between;
use super::{DeployError, DeployOutcome, DeployTarget, DeployableRender};
use crate::pure::rendered::Checksum;

/// A render to send to an instance's Deployer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch<R> {
    pub instance: String,
    pub render: R,
}

/// What an offer of the latest render decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered<R> {
    /// Renders to send now.
    pub dispatch: Vec<Dispatch<R>>,
    /// Arm the pacing timer for this long (none is armed yet and an instance waits).
    pub timer: Option<Duration>,
}

impl<R> Default for Offered<R> {
    fn default() -> Self {
        Offered {
            dispatch: Vec::new(),
            timer: None,
        }
    }
}

/// The Deployers to stop and start for a new set of instances.
#[derive(Debug, Clone, Default)]
pub struct Membership {
    /// Instances whose Deployer stops (gone, or with another target).
    pub stop: Vec<String>,
    /// Instances that need a Deployer, with the target it deploys to.
    pub start: Vec<(String, Arc<dyn DeployTarget>)>,
}

/// The scheduler's state.
#[derive(Debug)]
pub struct Schedule<R> {
    /// The latest render: what every instance should run.
    desired: Option<R>,
    /// Per instance, the render last sent to its Deployer (pacing applies only to renders
    /// that need a reload relative to it).
    dispatched: BTreeMap<String, R>,
    /// Instances that wait for their pacing interval before they get `desired`.
    waiting: BTreeSet<String>,
    timer_armed: bool,
    pacer: Pacer,
    /// The instances with a running Deployer, and the target it was started with.
    targets: BTreeMap<String, Arc<dyn DeployTarget>>,
}

impl<R: DeployableRender> Schedule<R> {
    pub fn new(min_interval: Duration) -> Schedule<R> {
        Schedule {
            desired: None,
            dispatched: BTreeMap::new(),
            waiting: BTreeSet::new(),
            timer_armed: false,
            pacer: Pacer::new(min_interval),
            targets: BTreeMap::new(),
        }
    }

    /// A new latest render: offered to every instance at `now`, paced by `min_interval`.
    pub fn render(&mut self, render: R, now: Instant, min_interval: Duration) -> Offered<R> {
        self.desired = Some(render);
        self.offer(now, min_interval)
    }

    /// The pacing timer fired, or the config changed in place (its `minDeploymentInterval`
    /// may be shorter now): the instances that waited get the latest render if they may.
    pub fn pacing_elapsed(&mut self, now: Instant, min_interval: Duration) -> Offered<R> {
        self.timer_armed = false;
        if self.waiting.is_empty() {
            return Offered::default();
        }
        self.offer(now, min_interval)
    }

    /// The instances Discovery reports now: which Deployers to stop and start. Instances that
    /// go are forgotten at once (their pacing too); those to start count once
    /// [`Self::started`] says their Deployer runs.
    pub fn instances(
        &mut self,
        instances: impl IntoIterator<Item = (String, Arc<dyn DeployTarget>)>,
    ) -> Membership {
        let wanted: BTreeMap<String, Arc<dyn DeployTarget>> = instances.into_iter().collect();
        let stop: Vec<String> = self
            .targets
            .iter()
            .filter(|(name, target)| {
                wanted
                    .get(*name)
                    .is_none_or(|wanted| !Arc::ptr_eq(target, wanted))
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &stop {
            self.targets.remove(name);
            self.dispatched.remove(name);
            self.waiting.remove(name);
            self.pacer.forget(name);
        }
        let start = wanted
            .into_iter()
            .filter(|(name, _)| !self.targets.contains_key(name))
            .collect();
        Membership { stop, start }
    }

    /// `instance`'s Deployer runs, deploying to `target`: the latest render to send it at
    /// once (a new instance is not paced).
    pub fn started(
        &mut self,
        instance: &str,
        target: Arc<dyn DeployTarget>,
    ) -> Option<Dispatch<R>> {
        self.targets.insert(instance.to_string(), target);
        let render = self.desired.clone()?;
        self.dispatched.insert(instance.to_string(), render.clone());
        Some(Dispatch {
            instance: instance.to_string(),
            render,
        })
    }

    /// `instance` reported a deployment's result at `now`: a reload it did counts for its
    /// pacing.
    pub fn deployed(
        &mut self,
        instance: &str,
        result: &Result<DeployOutcome, DeployError>,
        now: Instant,
    ) {
        if result.as_ref().is_ok_and(|outcome| outcome.reloaded) {
            self.pacer.reloaded(instance, now);
        }
    }

    /// The latest render.
    pub fn desired(&self) -> Option<&R> {
        self.desired.as_ref()
    }

    /// The instances whose next (reloading) deployment waits for its pacing interval.
    pub fn waiting(&self) -> Vec<String> {
        self.waiting.iter().cloned().collect()
    }

    /// The instances with a running Deployer.
    pub fn deployers(&self) -> Vec<String> {
        self.targets.keys().cloned().collect()
    }

    /// Sends the latest render to every instance that may take it now; the ones whose
    /// reload would come too soon after their last wait (and one timer is armed).
    fn offer(&mut self, now: Instant, min_interval: Duration) -> Offered<R> {
        let Some(render) = self.desired.clone() else {
            return Offered::default();
        };
        self.pacer.set_min_interval(min_interval);
        // Instances usually hold the same previous render: plan once per checksum.
        let mut reload_from: BTreeMap<Checksum, bool> = BTreeMap::new();
        let mut shortest_wait: Option<Duration> = None;
        let mut dispatch = Vec::new();
        for instance in self.targets.keys() {
            let needs_reload = match self.dispatched.get(instance) {
                Some(previous) if previous.checksum() == render.checksum() => {
                    self.waiting.remove(instance);
                    continue;
                }
                Some(previous) => *reload_from.entry(previous.checksum()).or_insert_with(|| {
                    plan_between(
                        Some((previous.rendered(), previous.checksum())),
                        (render.rendered(), render.checksum()),
                    )
                    .map_or(true, |p| p.reload)
                }),
                // Nothing sent yet: a first deployment goes at once, its outcome says
                // whether it reloaded.
                None => false,
            };
            if needs_reload {
                let wait = self.pacer.wait(instance, now);
                if !wait.is_zero() {
                    self.waiting.insert(instance.clone());
                    shortest_wait = Some(shortest_wait.map_or(wait, |w| w.min(wait)));
                    continue;
                }
                self.pacer.reloaded(instance, now);
            }
            self.waiting.remove(instance);
            dispatch.push(Dispatch {
                instance: instance.clone(),
                render: render.clone(),
            });
        }
        for sent in &dispatch {
            self.dispatched
                .insert(sent.instance.clone(), sent.render.clone());
        }
        let timer = shortest_wait.filter(|_| !self.timer_armed);
        if timer.is_some() {
            self.timer_armed = true;
        }
        Offered { dispatch, timer }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::deploy::RecordingTarget;
    use crate::pure::deploy::tests::TestRender;

    const SECOND: Duration = Duration::from_secs(1);

    /// A config whose one server's address is `address` (a runtime change from another
    /// address) and whose backend is named `backend` (a reload from another name).
    fn render(generation: u64, backend: &str, address: &str) -> TestRender {
        TestRender::new(
            generation,
            &format!(
                "global\n    daemon\n\ndefaults\n    mode http\n    timeout connect 5s\n    \
                 timeout client 5s\n    timeout server 5s\n\nbackend {backend}\n    \
                 server web {address}:80\n"
            ),
        )
    }

    fn reloaded() -> DeployOutcome {
        DeployOutcome {
            reloaded: true,
            ..DeployOutcome::default()
        }
    }

    fn target(name: &str) -> Arc<dyn DeployTarget> {
        Arc::new(RecordingTarget::new(name))
    }

    /// A schedule with these instances' Deployers running.
    fn running(instances: &[&str]) -> Schedule<TestRender> {
        let mut schedule = Schedule::new(2 * SECOND);
        let membership = schedule.instances(instances.iter().map(|n| (n.to_string(), target(n))));
        for (name, target) in membership.start {
            assert_eq!(schedule.started(&name, target), None, "no render yet");
        }
        schedule
    }

    fn sent_to(offered: &Offered<TestRender>) -> Vec<&str> {
        offered
            .dispatch
            .iter()
            .map(|d| d.instance.as_str())
            .collect()
    }

    #[test]
    fn a_first_render_goes_to_every_instance_at_once() {
        let mut schedule = running(&["pod-a", "pod-b"]);
        let offered = schedule.render(render(1, "web", "10.0.0.1"), Instant::now(), 2 * SECOND);
        assert_eq!(sent_to(&offered), ["pod-a", "pod-b"]);
        assert_eq!(offered.timer, None);
        assert!(schedule.waiting().is_empty());
    }

    #[test]
    fn a_reload_too_soon_after_the_last_waits_and_arms_one_timer_while_a_runtime_change_goes_at_once()
     {
        let mut schedule = running(&["pod-a"]);
        let start = Instant::now();
        schedule.render(render(1, "web", "10.0.0.1"), start, 2 * SECOND);
        schedule.deployed("pod-a", &Ok(reloaded()), start);
        let runtime = schedule.render(render(2, "web", "10.0.0.2"), start, 2 * SECOND);
        assert_eq!(
            sent_to(&runtime),
            ["pod-a"],
            "a runtime change is not paced"
        );
        let reload = schedule.render(render(3, "api", "10.0.0.2"), start + SECOND / 2, 2 * SECOND);
        assert!(reload.dispatch.is_empty());
        assert_eq!(reload.timer, Some(SECOND * 3 / 2));
        assert_eq!(schedule.waiting(), ["pod-a"]);
        let newer = schedule.render(render(4, "app", "10.0.0.2"), start + SECOND, 2 * SECOND);
        assert_eq!(
            (newer.dispatch.len(), newer.timer),
            (0, None),
            "one timer at a time"
        );
        let released = schedule.pacing_elapsed(start + 2 * SECOND, 2 * SECOND);
        assert_eq!(
            released.dispatch,
            [Dispatch {
                instance: "pod-a".into(),
                render: render(4, "app", "10.0.0.2")
            }],
            "the latest render wins"
        );
        assert!(schedule.waiting().is_empty());
    }

    #[test]
    fn a_shorter_interval_releases_a_waiting_instance_at_the_next_event() {
        let mut schedule = running(&["pod-a"]);
        let start = Instant::now();
        schedule.render(render(1, "web", "10.0.0.1"), start, 10 * SECOND);
        schedule.deployed("pod-a", &Ok(reloaded()), start);
        schedule.render(render(2, "api", "10.0.0.1"), start, 10 * SECOND);
        assert_eq!(schedule.waiting(), ["pod-a"]);
        let released = schedule.pacing_elapsed(start + SECOND, SECOND / 2);
        assert_eq!(sent_to(&released), ["pod-a"]);
    }

    #[test]
    fn instances_are_paced_each_on_its_own_and_one_already_holding_the_render_gets_nothing() {
        let mut schedule = running(&["pod-a", "pod-b"]);
        let start = Instant::now();
        schedule.render(render(1, "web", "10.0.0.1"), start, 2 * SECOND);
        schedule.deployed("pod-b", &Ok(reloaded()), start);
        let paced = schedule.render(render(2, "api", "10.0.0.1"), start, 2 * SECOND);
        assert_eq!(sent_to(&paced), ["pod-a"]);
        assert_eq!(schedule.waiting(), ["pod-b"]);
        // pod-b goes, pod-a gets a new target and pod-c comes: both take the latest render
        // at once.
        let membership = schedule.instances([
            ("pod-a".to_string(), target("pod-a")),
            ("pod-c".to_string(), target("pod-c")),
        ]);
        let Membership { stop, start: new } = membership;
        assert_eq!(
            stop,
            ["pod-a", "pod-b"],
            "a new target for pod-a replaces its deployer"
        );
        let names: Vec<&str> = new.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["pod-a", "pod-c"]);
        assert!(schedule.waiting().is_empty(), "forgotten with its deployer");
        for (name, target) in new {
            let sent = schedule.started(&name, target).expect("the latest render");
            assert_eq!(sent.render, render(2, "api", "10.0.0.1"));
        }
        let again = schedule.render(render(2, "api", "10.0.0.1"), start, 2 * SECOND);
        assert_eq!(again, Offered::default(), "each holds it already");
        assert_eq!(schedule.deployers(), ["pod-a", "pod-c"]);
    }

    #[test]
    fn the_same_instances_with_the_same_targets_change_nothing() {
        let shared = target("pod-a");
        let mut schedule: Schedule<TestRender> = Schedule::new(SECOND);
        let first = schedule.instances([("pod-a".to_string(), Arc::clone(&shared))]);
        for (name, target) in first.start {
            schedule.started(&name, target);
        }
        let again = schedule.instances([("pod-a".to_string(), shared)]);
        assert!(again.stop.is_empty() && again.start.is_empty());
    }
}
