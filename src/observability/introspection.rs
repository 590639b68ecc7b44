//! What the debug and health endpoints show: a shared record that actors update as they
//! work (the current config, the last render, resource counts, leadership, recent errors,
//! and in `haptor run` what the config watch waits for, which `/readyz` names until a config
//! is loaded) and a stall detector. Actors mark themselves busy while they handle a message
//! ([`Introspection::busy`]); an actor busy for longer than the stall threshold has stopped
//! processing its mailbox, and `/healthz` reports it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime};

use dashmap::DashMap;
use ractor::ActorCell;
use serde::Serialize;

use crate::pure::readiness::ConfigSource;
use crate::pure::rendered::{Checksum, RenderedConfig};

/// How many recent errors `/debug/vars/errors` keeps.
pub const RECENT_ERRORS: usize = 50;

/// One error a user should see: where it came from and, for template and config errors,
/// which template and line. Once what caused it is gone (a later config accepted, a later
/// render passed, the manifest file read again without problems), it stays in the list
/// marked `resolved`, with when and by what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorRecord {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u128,
    /// The component that hit the error (`render`, `validation`, `config`, `deploy:<instance>`, ...).
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
    /// What the error is about, so a later success can mark it resolved (a manifest file's
    /// path, an object); not shown.
    #[serde(skip)]
    pub subject: Option<String>,
    /// Whether what caused the error is gone.
    pub resolved: bool,
    /// When it was marked resolved, in milliseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at_ms: Option<u128>,
    /// What resolved it (`a later configuration was accepted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

impl ErrorRecord {
    pub fn new(source: impl Into<String>, message: impl Into<String>) -> ErrorRecord {
        ErrorRecord {
            at_ms: now_ms(),
            source: source.into(),
            template: None,
            line: None,
            message: message.into(),
            subject: None,
            resolved: false,
            resolved_at_ms: None,
            resolution: None,
        }
    }

    /// What the error is about, for [`Introspection::resolve_errors_about`].
    pub fn about(mut self, subject: impl Into<String>) -> ErrorRecord {
        self.subject = Some(subject.into());
        self
    }

    pub fn at(mut self, template: Option<String>, line: Option<usize>) -> ErrorRecord {
        self.template = template;
        self.line = line;
        self
    }
}

/// The controller's state as `/debug/vars/state` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ControllerState {
    pub is_leader: bool,
    pub epoch: u64,
    pub all_indexes_synced: bool,
    pub instances: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rendered_checksum: Option<Checksum>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_deployed_checksum: Option<Checksum>,
    pub reconciliations: u64,
    /// Instances whose next (reloading) deployment waits for `minDeploymentInterval`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paced: Vec<String>,
    /// Per instance, the checksum it last acknowledged (this leader's deployments).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub deployed: BTreeMap<String, Checksum>,
}

impl ControllerState {
    /// The instances that do not run the latest render (while leading; a follower deploys
    /// nothing and knows of no instance's state).
    pub fn instances_behind(&self) -> Vec<String> {
        if !self.is_leader {
            return Vec::new();
        }
        self.instances
            .iter()
            .filter(|i| self.deployed.get(*i) != self.last_rendered_checksum.as_ref())
            .cloned()
            .collect()
    }
}

#[derive(Debug, Default)]
struct Record {
    config: Option<serde_json::Value>,
    rendered: Option<Arc<RenderedConfig>>,
    resources: BTreeMap<String, usize>,
    state: ControllerState,
    errors: VecDeque<ErrorRecord>,
    config_source: Option<ConfigSource>,
}

/// The shared introspection record (cheap to clone; clones share the record).
#[derive(Debug, Clone, Default)]
pub struct Introspection {
    record: Arc<RwLock<Record>>,
    /// Work in progress: a token per busy guard, with the actor's name and when it began.
    /// Tokens, not names, key it: one actor may be busy twice at once (the coordinator
    /// handling a message while its render runs on the render thread).
    busy_since: Arc<DashMap<u64, (String, Instant)>>,
    next_busy: Arc<std::sync::atomic::AtomicU64>,
    root: Arc<OnceLock<ActorCell>>,
}

impl Introspection {
    pub fn new() -> Introspection {
        Introspection::default()
    }

    fn write(&self, f: impl FnOnce(&mut Record)) {
        // A poisoned lock means a writer panicked mid-update; the record is still usable for
        // debugging, so take it anyway.
        let mut guard = self.record.write().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    fn read<T>(&self, f: impl FnOnce(&Record) -> T) -> T {
        let guard = self.record.read().unwrap_or_else(|p| p.into_inner());
        f(&guard)
    }

    /// The root of the actor tree, for `/debug/actors`. Set once at start-up.
    pub fn set_root(&self, root: ActorCell) {
        let _ = self.root.set(root);
    }

    pub fn root(&self) -> Option<&ActorCell> {
        self.root.get()
    }

    pub fn set_config(&self, config: serde_json::Value) {
        self.write(|r| r.config = Some(config));
    }

    /// Records the latest render and its checksum (computed once, by the pipeline).
    pub fn set_rendered(&self, rendered: Arc<RenderedConfig>, checksum: Checksum) {
        self.write(|r| {
            r.rendered = Some(rendered);
            r.state.last_rendered_checksum = Some(checksum);
        });
    }

    /// A new config iteration starts: the resource counts and the per-iteration state
    /// (sync, instances, checksums, reconciliations) start over; leadership, the current
    /// config, the last render and the recent errors stay.
    pub fn iteration_started(&self, resources: impl IntoIterator<Item = String>) {
        self.write(|r| {
            r.resources = resources.into_iter().map(|name| (name, 0)).collect();
            r.state = ControllerState {
                is_leader: r.state.is_leader,
                epoch: r.state.epoch,
                ..ControllerState::default()
            };
        });
    }

    pub fn set_resource_count(&self, resource: &str, count: usize) {
        self.write(|r| {
            r.resources.insert(resource.to_string(), count);
        });
    }

    pub fn update_state(&self, f: impl FnOnce(&mut ControllerState)) {
        self.write(|r| f(&mut r.state));
    }

    pub fn record_error(&self, error: ErrorRecord) {
        self.write(|r| {
            if r.errors.len() >= RECENT_ERRORS {
                r.errors.pop_front();
            }
            r.errors.push_back(error);
        });
    }

    /// Marks every unresolved error that `matches` as resolved now, by `resolution`; returns
    /// how many it marked.
    pub fn resolve_errors(
        &self,
        matches: impl Fn(&ErrorRecord) -> bool,
        resolution: &str,
    ) -> usize {
        let mut marked = 0;
        self.write(|r| {
            let at = now_ms();
            for error in r.errors.iter_mut().filter(|e| !e.resolved && matches(e)) {
                error.resolved = true;
                error.resolved_at_ms = Some(at);
                error.resolution = Some(resolution.to_string());
                marked += 1;
            }
        });
        if marked > 0 {
            tracing::debug!(marked, resolution, "errors marked resolved");
        }
        marked
    }

    /// Marks the unresolved errors of `source` resolved (see [`Self::resolve_errors`]).
    pub fn resolve_errors_of(&self, source: &str, resolution: &str) -> usize {
        self.resolve_errors(|e| e.source == source, resolution)
    }

    /// Marks the unresolved errors about `subject` resolved (see [`Self::resolve_errors`]).
    pub fn resolve_errors_about(&self, subject: &str, resolution: &str) -> usize {
        self.resolve_errors(|e| e.subject.as_deref() == Some(subject), resolution)
    }

    /// What the config watch sees now (`haptor run`'s config driver reports it; `/readyz`
    /// names it while no config is loaded).
    pub fn set_config_source(&self, source: ConfigSource) {
        self.write(|r| r.config_source = Some(source));
    }

    pub fn config_source(&self) -> Option<ConfigSource> {
        self.read(|r| r.config_source.clone())
    }

    pub fn config(&self) -> Option<serde_json::Value> {
        self.read(|r| r.config.clone())
    }

    pub fn rendered(&self) -> Option<Arc<RenderedConfig>> {
        self.read(|r| r.rendered.clone())
    }

    pub fn resources(&self) -> BTreeMap<String, usize> {
        self.read(|r| r.resources.clone())
    }

    pub fn state(&self) -> ControllerState {
        self.read(|r| r.state.clone())
    }

    /// Recent errors, oldest first.
    pub fn errors(&self) -> Vec<ErrorRecord> {
        self.read(|r| r.errors.iter().cloned().collect())
    }

    /// Marks `actor` busy until the returned guard is dropped.
    pub fn busy(&self, actor: &str) -> BusyGuard {
        let token = self
            .next_busy
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.busy_since
            .insert(token, (actor.to_string(), Instant::now()));
        BusyGuard {
            map: Arc::clone(&self.busy_since),
            token,
        }
    }

    /// Actors that have been handling one message for longer than `threshold`, with how
    /// long.
    pub fn stalled(&self, threshold: Duration) -> Vec<(String, Duration)> {
        let now = Instant::now();
        let mut longest: BTreeMap<String, Duration> = BTreeMap::new();
        for entry in self.busy_since.iter() {
            let (actor, since) = entry.value();
            let busy = now.duration_since(*since);
            if busy > threshold {
                let known = longest.entry(actor.clone()).or_default();
                *known = (*known).max(busy);
            }
        }
        longest.into_iter().collect()
    }
}

/// Clears an actor's busy mark when dropped.
#[derive(Debug)]
pub struct BusyGuard {
    map: Arc<DashMap<u64, (String, Instant)>>,
    token: u64,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.map.remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_busy_past_the_threshold_is_reported_stalled_until_it_finishes() {
        let introspection = Introspection::new();
        let guard = introspection.busy("coordinator");
        std::thread::sleep(Duration::from_millis(20));
        let stalled = introspection.stalled(Duration::from_millis(10));
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].0, "coordinator");
        drop(guard);
        assert!(introspection.stalled(Duration::from_millis(10)).is_empty());
    }

    #[test]
    fn only_the_most_recent_errors_are_kept() {
        let introspection = Introspection::new();
        for i in 0..(RECENT_ERRORS + 5) {
            introspection.record_error(ErrorRecord::new("render", format!("error {i}")));
        }
        let errors = introspection.errors();
        assert_eq!(errors.len(), RECENT_ERRORS);
        assert_eq!(errors[0].message, "error 5");
    }

    #[test]
    fn a_resolved_error_stays_listed_marked_resolved_with_when_and_by_what() {
        let introspection = Introspection::new();
        introspection.record_error(ErrorRecord::new("config", "template 'haproxy.cfg' line 2"));
        introspection.record_error(ErrorRecord::new("manifest", "a.yaml:3: bad").about("a.yaml"));
        introspection.record_error(ErrorRecord::new("manifest", "b.yaml:1: bad").about("b.yaml"));
        assert_eq!(
            introspection.resolve_errors_of("config", "a later configuration was accepted"),
            1
        );
        assert_eq!(
            introspection.resolve_errors_about("a.yaml", "read again without problems"),
            1
        );
        let errors = introspection.errors();
        assert!(errors[0].resolved && errors[1].resolved && !errors[2].resolved);
        assert_eq!(
            errors[0].resolution.as_deref(),
            Some("a later configuration was accepted")
        );
        let json = serde_json::to_value(&errors).expect("serialises");
        assert_eq!(json[0]["resolved"], true);
        assert!(json[0]["resolved_at_ms"].as_u64().is_some(), "{json}");
        assert_eq!(json[2]["resolved"], false);
        assert!(json[2].get("resolved_at_ms").is_none(), "{json}");
        assert!(json[1].get("subject").is_none(), "not shown: {json}");
        assert_eq!(
            introspection.resolve_errors_of("config", "again"),
            0,
            "an error is resolved once"
        );
    }

    #[test]
    fn a_leader_names_the_instances_that_do_not_run_the_latest_render_and_a_follower_none() {
        let mut state = ControllerState {
            is_leader: true,
            instances: vec!["pod-a".into(), "pod-b".into(), "pod-c".into()],
            last_rendered_checksum: Some(Checksum::of(b"new")),
            ..ControllerState::default()
        };
        state.deployed.insert("pod-a".into(), Checksum::of(b"new"));
        state.deployed.insert("pod-b".into(), Checksum::of(b"old"));
        assert_eq!(state.instances_behind(), ["pod-b", "pod-c"]);
        state.is_leader = false;
        assert!(state.instances_behind().is_empty());
    }
}
