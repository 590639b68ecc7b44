//! When a controller is ready for traffic (`/readyz`), as a pure state machine.
//!
//! A replica is ready once every watched resource of the running config iteration has
//! finished its initial list and, where the controller owns its HAProxy (`haptor local`),
//! once every known instance has taken a configuration: a proxy that takes traffic before it
//! holds the full config answers users with 404s. Readiness is latched: once reached, a
//! config-iteration rebuild (new watchers listing again) does not drop it, because the last
//! good configuration keeps serving meanwhile; the verdict still says what the rebuild waits
//! for. Nothing here does I/O; the actors report what they see through the small methods
//! below and the HTTP handler asks for a [`ReadinessVerdict`].
//!
//! Until a config is loaded, `haptor run`'s config watch says why not ([`ConfigSource`]: no
//! answer yet from the API server, the API server unreachable or refusing, the
//! CustomResourceDefinition not installed, the config not found or invalid), and the verdict
//! names that instead of "a valid HAProxyTemplateConfig" ([`ReadinessState::verdict_given`]).

use crate::pure::http_resources::resource_of_store;
use std::collections::BTreeSet;

use serde::Serialize;

use crate::pure::api_failure::{ApiFailure, ApiServer};

/// Where the config comes from, as far as it is known before a config is loaded: what the
/// config watch of `haptor run` last saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The API server has not answered the config watch yet.
    NoAnswerYet {
        server: ApiServer,
        /// `namespace/name` of the config.
        config: String,
    },
    /// The config watch fails: the API server unreachable, refusing, the CRD missing.
    Failing(ApiFailure),
    /// The API server answered: there is no such config.
    NotFound { config: String },
    /// The config read is invalid (its problems are in `/debug/vars/errors`).
    Invalid { config: String },
    /// The config read is valid: it is being loaded.
    Valid { config: String },
}

impl ConfigSource {
    /// What readiness waits for while the config source is in this state.
    pub fn awaited(&self) -> String {
        match self {
            ConfigSource::NoAnswerYet { server, config } => format!(
                "{server} (no answer yet), then a valid HAProxyTemplateConfig {config} (not \
                 read yet)"
            ),
            ConfigSource::Failing(failure) => failure.awaited(),
            ConfigSource::NotFound { config } => {
                format!("a valid HAProxyTemplateConfig {config} (not found: create it)")
            }
            ConfigSource::Invalid { config } => format!(
                "a valid HAProxyTemplateConfig {config} (the one read is invalid: see \
                 /debug/vars/errors or its status)"
            ),
            ConfigSource::Valid { config } => {
                format!("a valid HAProxyTemplateConfig {config} (read and valid: being loaded)")
            }
        }
    }
}

/// What readiness waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadinessState {
    /// Whether a first configuration has been accepted (an iteration runs).
    config_loaded: bool,
    /// Watched resources of the running iteration that have not finished their initial list.
    unsynced: BTreeSet<String>,
    /// Whether readiness also waits for every instance to take a configuration.
    requires_deployment: bool,
    /// Instances known now.
    instances: BTreeSet<String>,
    /// Instances that have taken a configuration since this process started.
    deployed: BTreeSet<String>,
    /// `Some(false)` while the admission webhook is served without a certificate loaded
    /// yet (its TLS handshakes fail); `None` when no webhook is served.
    webhook_certificate: Option<bool>,
    /// Set the first time every condition held; cleared only by [`Self::shutting_down`].
    reached: bool,
    /// Set on SIGTERM: not ready from then on, whatever else holds.
    shutting_down: bool,
}

/// The answer to "ready?", with what is still awaited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadinessVerdict {
    pub ready: bool,
    /// One sentence per thing awaited (empty when nothing is).
    pub waiting_for: Vec<String>,
}

impl ReadinessState {
    /// A state that waits for indexes only (a controller that deploys to pods it does not
    /// own), or also for deployments (`requires_deployment`, `haptor local`).
    pub fn new(requires_deployment: bool) -> ReadinessState {
        ReadinessState {
            requires_deployment,
            ..ReadinessState::default()
        }
    }

    /// A config iteration starts: these resources must list before it is synced.
    pub fn iteration_started(&mut self, resources: impl IntoIterator<Item = String>) {
        self.config_loaded = true;
        self.unsynced = resources.into_iter().collect();
        self.update();
    }

    /// A watcher finished its initial list.
    pub fn resource_synced(&mut self, resource: &str) {
        self.unsynced.remove(resource);
        self.update();
    }

    /// The set of instances changed.
    pub fn instances_known(&mut self, instances: impl IntoIterator<Item = String>) {
        self.instances = instances.into_iter().collect();
        self.update();
    }

    /// The admission webhook is served: readiness also waits for its certificate.
    pub fn webhook_certificate_awaited(&mut self) {
        if self.webhook_certificate.is_none() {
            self.webhook_certificate = Some(false);
        }
        self.update();
    }

    /// The webhook's certificate loaded.
    pub fn webhook_certificate_loaded(&mut self) {
        self.webhook_certificate = Some(true);
        self.update();
    }

    /// An instance took a configuration.
    pub fn instance_deployed(&mut self, instance: &str) {
        self.deployed.insert(instance.to_string());
        self.update();
    }

    /// The process is stopping (SIGTERM): not ready from now on, so the Services stop
    /// sending here while it still serves.
    pub fn shutting_down(&mut self) {
        self.shutting_down = true;
    }

    fn awaited(&self, source: Option<&ConfigSource>) -> Vec<String> {
        let mut waiting = Vec::new();
        if self.shutting_down {
            waiting.push(
                "nothing: haptor is shutting down (SIGTERM) and serves on only until its endpoint leaves the Services"
                    .to_string(),
            );
        }
        if !self.config_loaded {
            waiting.push(match source {
                Some(source) => source.awaited(),
                None => "a valid HAProxyTemplateConfig".to_string(),
            });
        }
        let (http, watched): (Vec<&str>, Vec<&str>) = self
            .unsynced
            .iter()
            .map(String::as_str)
            .partition(|name| resource_of_store(name).is_some());
        if !watched.is_empty() {
            waiting.push(format!(
                "the initial sync of watched resources: {}",
                watched.join(", ")
            ));
        }
        if !http.is_empty() {
            let names: Vec<&str> = http.iter().filter_map(|s| resource_of_store(s)).collect();
            waiting.push(format!(
                "the first fetch of critical HTTP resources (spec.httpResources): {}",
                names.join(", ")
            ));
        }
        if self.webhook_certificate == Some(false) {
            waiting.push(
                "the admission webhook's certificate (its TLS handshakes fail until it loads)"
                    .to_string(),
            );
        }
        if self.requires_deployment {
            if self.instances.is_empty() {
                waiting.push("an HAProxy instance to deploy to".to_string());
            }
            let pending: Vec<&str> = self
                .instances
                .difference(&self.deployed)
                .map(String::as_str)
                .collect();
            if !pending.is_empty() {
                waiting.push(format!(
                    "the first deployment to instances: {}",
                    pending.join(", ")
                ));
            }
        }
        waiting
    }

    fn update(&mut self) {
        if !self.reached && !self.shutting_down && self.awaited(None).is_empty() {
            self.reached = true;
        }
    }

    /// Ready, and what is awaited: before readiness is reached, why not; after, what a
    /// rebuild still waits for while the last good configuration serves.
    pub fn verdict(&self) -> ReadinessVerdict {
        self.verdict_given(None)
    }

    /// The verdict, naming what the config source waits for (`source`, when one reports)
    /// while no config is loaded. The source changes the words, never whether it is ready.
    pub fn verdict_given(&self, source: Option<&ConfigSource>) -> ReadinessVerdict {
        ReadinessVerdict {
            ready: self.reached && !self.shutting_down,
            waiting_for: self.awaited(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_served_webhook_keeps_readiness_until_its_certificate_loads() {
        let mut state = ReadinessState::new(false);
        state.webhook_certificate_awaited();
        state.iteration_started(names(&["ingresses"]));
        state.resource_synced("ingresses");
        let verdict = state.verdict();
        assert!(!verdict.ready);
        assert_eq!(
            verdict.waiting_for,
            names(&[
                "the admission webhook's certificate (its TLS handshakes fail until it loads)"
            ])
        );
        state.webhook_certificate_loaded();
        assert!(state.verdict().ready);
        // A certificate that loaded before the webhook was counted is not awaited again.
        state.webhook_certificate_awaited();
        assert!(state.verdict().waiting_for.is_empty());
    }

    #[test]
    fn a_ready_controller_that_is_shutting_down_is_not_ready_and_says_why() {
        let mut state = ReadinessState::new(false);
        state.iteration_started(names(&["ingresses"]));
        state.resource_synced("ingresses");
        assert!(state.verdict().ready);
        state.shutting_down();
        let verdict = state.verdict();
        assert!(!verdict.ready);
        assert_eq!(verdict.waiting_for.len(), 1);
        assert!(
            verdict.waiting_for[0].contains("shutting down"),
            "{verdict:?}"
        );
        // Nothing makes it ready again.
        state.resource_synced("ingresses");
        assert!(!state.verdict().ready);
    }

    #[test]
    fn nothing_is_ready_before_a_config_is_loaded() {
        let state = ReadinessState::new(false);
        let verdict = state.verdict();
        assert!(!verdict.ready);
        assert_eq!(
            verdict.waiting_for,
            names(&["a valid HAProxyTemplateConfig"])
        );
    }

    #[test]
    fn readiness_waits_for_every_watched_resource_and_names_the_unsynced_ones() {
        let mut state = ReadinessState::new(false);
        state.iteration_started(names(&["ingresses", "services"]));
        state.resource_synced("ingresses");
        let verdict = state.verdict();
        assert!(!verdict.ready);
        assert_eq!(
            verdict.waiting_for,
            names(&["the initial sync of watched resources: services"])
        );
        state.resource_synced("services");
        assert!(state.verdict().ready);
    }

    #[test]
    fn an_owned_proxy_is_ready_only_once_every_instance_took_a_configuration() {
        let mut state = ReadinessState::new(true);
        state.iteration_started(names(&["services"]));
        state.resource_synced("services");
        assert_eq!(
            state.verdict().waiting_for,
            names(&["an HAProxy instance to deploy to"])
        );
        state.instances_known(names(&["local"]));
        let verdict = state.verdict();
        assert!(!verdict.ready);
        assert_eq!(
            verdict.waiting_for,
            names(&["the first deployment to instances: local"])
        );
        state.instance_deployed("local");
        assert!(state.verdict().ready);
    }

    #[test]
    fn a_rebuild_after_readiness_keeps_it_and_says_what_the_new_iteration_waits_for() {
        let mut state = ReadinessState::new(true);
        state.iteration_started(names(&["services"]));
        state.resource_synced("services");
        state.instances_known(names(&["local"]));
        state.instance_deployed("local");
        state.iteration_started(names(&["services", "secrets"]));
        let verdict = state.verdict();
        assert!(verdict.ready, "the last good config keeps serving");
        assert_eq!(
            verdict.waiting_for,
            names(&["the initial sync of watched resources: secrets, services"])
        );
    }

    #[test]
    fn before_a_config_is_loaded_the_verdict_names_what_the_config_source_waits_for() {
        use crate::pure::api_failure::{ApiFailure, Cause, Request};
        let mut state = ReadinessState::new(false);
        let server = ApiServer::new("https://127.0.0.1:6443");
        let config = "haptor/haptor-config".to_string();
        let no_answer = ConfigSource::NoAnswerYet {
            server: server.clone(),
            config: config.clone(),
        };
        assert_eq!(
            state.verdict_given(Some(&no_answer)).waiting_for,
            names(&[
                "the API server at https://127.0.0.1:6443 (no answer yet), then a valid \
                 HAProxyTemplateConfig haptor/haptor-config (not read yet)"
            ])
        );
        let missing_crd = ConfigSource::Failing(ApiFailure::new(
            server,
            Request::watch("haproxytemplateconfigs", "haptor.dev", Some("haptor")),
            Cause::NotFound {
                message: "not found".into(),
            },
        ));
        let waiting = state.verdict_given(Some(&missing_crd)).waiting_for;
        assert!(
            waiting[0].starts_with(
                "the CustomResourceDefinition haproxytemplateconfigs.haptor.dev (not installed"
            ),
            "{waiting:?}"
        );
        let not_found = ConfigSource::NotFound { config };
        assert_eq!(
            state.verdict_given(Some(&not_found)).waiting_for,
            names(&["a valid HAProxyTemplateConfig haptor/haptor-config (not found: create it)"])
        );
        state.iteration_started(Vec::new());
        let verdict = state.verdict_given(Some(&not_found));
        assert!(
            verdict.ready,
            "a loaded config serves whatever the source says"
        );
        assert!(verdict.waiting_for.is_empty());
    }

    #[test]
    fn a_config_with_no_watched_resources_is_synced_at_once() {
        let mut state = ReadinessState::new(false);
        state.iteration_started(Vec::new());
        assert!(state.verdict().ready);
    }
}
