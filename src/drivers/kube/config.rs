//! The ConfigLoader edge of `haptor run`: one watch on the `HAProxyTemplateConfig` named by
//! `--config-name` in haptor's namespace (a `metadata.name` field selector, so nothing else
//! is listed), feeding the actor tree's config channel.
//!
//! Every new spec is judged before the tree sees it: `pure::config_status` compiles it (the
//! checks of the ConfigLoader's validators) and every watched resource is resolved against
//! the API server's discovery, so a kind that does not exist makes the config invalid,
//! naming it. A valid spec goes to the tree; an invalid one is logged, recorded in
//! `/debug/vars/errors`, published as `ConfigRejected` (the Kubernetes Event "ConfigInvalid")
//! and never reaches the tree, so the last valid config keeps serving. A deleted or missing
//! config changes nothing either; it is logged.
//!
//! Each object read and the verdict on its spec go out on [`ConfigChannels::verdicts`]; the
//! status writer ([`spawn_status_writer`], which `haptor run` runs on the leader only) writes
//! the verdict into the object's status (server-side apply of the status subresource, field
//! manager `haptor`, bounded by [`STATUS_WRITE_TIMEOUT`], retried every [`STATUS_RETRY`]
//! after a failure) when it differs from the status the object holds in anything but
//! timestamps; a new leader's writer does so at the start of its term if needed.
//!
//! What the watch sees before a config is loaded goes to readiness through the
//! introspection record ([`ConfigSource`]): no answer yet from the API server, the API server
//! unreachable or refusing, the CRD not installed, the config not found, invalid or valid;
//! `/readyz` names it. A failing watch is told as `pure::api_failure` says (the API server's
//! URL and the real cause; the RBAC hint only for a 403 that lasts).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use prometheus::IntCounterVec;
use serde_json::json;
use tokio::sync::watch;

use crate::drivers::kube::resources::{KubeResources, SourceError};
use crate::drivers::kube::{KubeApi, tell_watch_failure, tell_watch_resumed};
use crate::messages::{EventFanout, EventKind};
use crate::observability::introspection::{ErrorRecord, Introspection};
use crate::pure::api_failure::{ApiFailure, ApiServer, Cause, FailureLog, HAPTOR_GROUP, Request};
use crate::pure::config::{
    HAProxyTemplateConfig, HAProxyTemplateConfigSpec, HAProxyTemplateConfigStatus, TemplateProblem,
    ValidationStatus,
};
use crate::pure::config_status::{config_status, describe, needs_write, with_problems};
use crate::pure::readiness::ConfigSource;

/// How long one status write may take.
pub const STATUS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after a failed status write it is tried again.
pub const STATUS_RETRY: Duration = Duration::from_secs(5);

/// Where the config driver reports to.
#[derive(Clone)]
pub struct ConfigReporting {
    pub fanout: EventFanout,
    pub introspection: Introspection,
    /// `haptor_config_status_writes_total{result}`.
    pub status_writes: IntCounterVec,
    /// `haptor_config_invalid`: 1 while the newest config read is rejected.
    pub invalid: prometheus::IntGauge,
}

/// The counter of status writes, to register with the controller's registry.
pub fn status_writes_counter() -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(
        prometheus::Opts::new(
            "haptor_config_status_writes_total",
            "HAProxyTemplateConfig status writes by result (success, failure)",
        ),
        &["result"],
    )
}

/// What the driver publishes.
pub struct ConfigChannels {
    /// Every spec judged valid, for the actor tree (`Sources.config`).
    pub configs: watch::Sender<Option<Arc<HAProxyTemplateConfig>>>,
    /// Every version of the config as it was read, valid or not (before its verdict is
    /// reported): what Events are about, and the leader election settings when the first
    /// config is invalid (someone must lead to write its status).
    pub seen: watch::Sender<Option<Arc<HAProxyTemplateConfig>>>,
    /// The latest object read and the status its spec was judged to have: what the status
    /// writer writes.
    pub verdicts: watch::Sender<Option<Arc<Verdict>>>,
}

/// The config as last read, and the status the verdict on its spec gives it.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub object: HAProxyTemplateConfig,
    pub status: HAProxyTemplateConfigStatus,
}

/// Runs the config watch until the task is aborted.
pub fn spawn(
    client: impl Into<KubeApi>,
    namespace: String,
    name: String,
    resources: KubeResources,
    out: ConfigChannels,
    reporting: ConfigReporting,
) -> tokio::task::JoinHandle<()> {
    let KubeApi { client, server } = client.into();
    tokio::spawn(async move {
        let api: Api<HAProxyTemplateConfig> = Api::namespaced(client, &namespace);
        let selector = format!("metadata.name={name}");
        let mut events = super::retried(watcher(
            api.clone(),
            watcher::Config::default().fields(&selector),
        ));
        let object_name = format!("HAProxyTemplateConfig {namespace}/{name}");
        let config = format!("{namespace}/{name}");
        let request = Request::watch("haproxytemplateconfigs", HAPTOR_GROUP, Some(&namespace));
        let mut failures = FailureLog::new();
        reporting
            .introspection
            .set_config_source(ConfigSource::NoAnswerYet {
                server: server.clone(),
                config: config.clone(),
            });
        // The latest object and the verdict on its spec.
        let mut latest: Option<HAProxyTemplateConfig> = None;
        let mut judged: Option<(
            HAProxyTemplateConfigSpec,
            Option<i64>,
            HAProxyTemplateConfigStatus,
        )> = None;
        let mut listing_found = false;
        loop {
            {
                let event = events.next().await;
                {
                    let Some(event) = event else { return };
                    // `Init` opens a list before any request is made: not an answer yet.
                    if matches!(&event, Ok(e) if !matches!(e, watcher::Event::Init)) {
                        tell_watch_resumed(&mut failures, "the config");
                    }
                    match event {
                        Ok(watcher::Event::Init) => listing_found = false,
                        Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object)) => {
                            listing_found = true;
                            latest = Some(object);
                        }
                        Ok(watcher::Event::InitDone) => {
                            if !listing_found {
                                reporting
                                    .introspection
                                    .set_config_source(ConfigSource::NotFound {
                                        config: config.clone(),
                                    });
                                tracing::warn!(object = %object_name, "config not found; create it (haptor waits, and /readyz says it waits for it)");
                            }
                            continue;
                        }
                        Ok(watcher::Event::Delete(_)) => {
                            reporting
                                .introspection
                                .set_config_source(ConfigSource::NotFound {
                                    config: config.clone(),
                                });
                            tracing::warn!(object = %object_name, "config deleted; the last valid config keeps serving until it is created again");
                            latest = None;
                            continue;
                        }
                        Err(e) => {
                            let failure = ApiFailure::of_watch(&server, &request, &e);
                            if !matches!(failure.cause, Cause::Gone { .. }) {
                                reporting
                                    .introspection
                                    .set_config_source(ConfigSource::Failing(failure.clone()));
                            }
                            tell_watch_failure(&mut failures, &failure, "the config");
                            continue;
                        }
                    }
                }
            }
            let Some(object) = latest.as_ref() else {
                continue;
            };
            // Judge a spec once per (spec, generation).
            let fresh = !matches!(&judged, Some((spec, generation, _)) if *spec == object.spec && *generation == object.metadata.generation);
            if fresh {
                let now = jiff::Timestamp::now();
                let mut status = config_status(object, object.status.as_ref(), now);
                if status.validation_status == ValidationStatus::Valid {
                    let unresolved = unresolved_resources(&resources, &object.spec).await;
                    status = with_problems(status, unresolved, now);
                }
                // The verdict first: whoever reacts to the read (a replica that starts leading
                // on it) finds the verdict already there.
                publish_verdict(&out.verdicts, object, &status);
                let _ = out.seen.send_replace(Some(Arc::new(object.clone())));
                report_verdict(&object_name, object, &status, &out, &reporting);
                let config = config.clone();
                reporting.introspection.set_config_source(
                    if status.validation_status == ValidationStatus::Valid {
                        ConfigSource::Valid { config }
                    } else {
                        ConfigSource::Invalid { config }
                    },
                );
                judged = Some((object.spec.clone(), object.metadata.generation, status));
            }
            if let Some((_, _, status)) = &judged {
                publish_verdict(&out.verdicts, object, status);
            }
        }
    })
}

/// Publishes `object` with its verdict, unless the same object (resourceVersion) with the
/// same verdict is there already.
fn publish_verdict(
    verdicts: &watch::Sender<Option<Arc<Verdict>>>,
    object: &HAProxyTemplateConfig,
    status: &HAProxyTemplateConfigStatus,
) {
    verdicts.send_if_modified(|latest| {
        if latest.as_deref().is_some_and(|l| {
            l.object.metadata.resource_version == object.metadata.resource_version
                && &l.status == status
        }) {
            return false;
        }
        *latest = Some(Arc::new(Verdict {
            object: object.clone(),
            status: status.clone(),
        }));
        true
    });
}

/// Writes each verdict of the config watch into the config's status when the object does
/// not hold it already (`pure::config_status::needs_write`); a failed write is tried again
/// after [`STATUS_RETRY`], with the latest verdict. Runs until aborted (`haptor run` runs it
/// while leading: a new term's writer looks at the latest verdict first).
pub fn spawn_status_writer(
    client: impl Into<KubeApi>,
    namespace: String,
    mut verdicts: watch::Receiver<Option<Arc<Verdict>>>,
    status_writes: IntCounterVec,
) -> tokio::task::JoinHandle<()> {
    let KubeApi { client, server } = client.into();
    verdicts.mark_changed();
    tokio::spawn(async move {
        let api: Api<HAProxyTemplateConfig> = Api::namespaced(client, &namespace);
        let mut retry = false;
        loop {
            tokio::select! {
                changed = verdicts.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(STATUS_RETRY), if retry => {}
            }
            let Some(verdict) = verdicts.borrow_and_update().clone() else {
                continue;
            };
            retry = false;
            if !needs_write(verdict.object.status.as_ref(), &verdict.status) {
                continue;
            }
            let name = verdict.object.name_any();
            let request = Request::new(
                "patch",
                "haproxytemplateconfigs/status",
                HAPTOR_GROUP,
                Some(&namespace),
            )
            .named(&name);
            match write_status(&api, &name, &verdict.status, &server, &request).await {
                Ok(()) => status_writes.with_label_values(&["success"]).inc(),
                Err(message) => {
                    status_writes.with_label_values(&["failure"]).inc();
                    tracing::warn!(object = %format!("HAProxyTemplateConfig {namespace}/{name}"), error = %message, "writing the config's status failed: {message}; retrying in {}s", STATUS_RETRY.as_secs());
                    retry = true;
                }
            }
        }
    })
}

/// Logs and reports a verdict; a valid spec goes to the actor tree.
fn report_verdict(
    object_name: &str,
    object: &HAProxyTemplateConfig,
    status: &HAProxyTemplateConfigStatus,
    out: &ConfigChannels,
    reporting: &ConfigReporting,
) {
    let valid = status.validation_status == ValidationStatus::Valid;
    reporting.invalid.set(i64::from(!valid));
    if valid {
        tracing::info!(object = %object_name, generation = ?object.metadata.generation, "config valid");
        reporting
            .introspection
            .resolve_errors_of("config", "a later version of the config is valid");
        let config = Arc::new(object.clone());
        out.configs.send_if_modified(|current| {
            if current.as_ref().is_some_and(|c| c.spec == config.spec) {
                return false;
            }
            *current = Some(config);
            true
        });
        return;
    }
    let errors = rejection_errors(object_name, status);
    for error in &errors {
        tracing::warn!(%error, "config invalid; the last valid config keeps serving");
        reporting
            .introspection
            .record_error(ErrorRecord::new("config", error.clone()));
    }
    reporting
        .fanout
        .publish(None, EventKind::ConfigRejected { errors });
}

/// The errors an invalid status reports, each naming the config object: what
/// `ConfigRejected` carries.
fn rejection_errors(object_name: &str, status: &HAProxyTemplateConfigStatus) -> Vec<String> {
    status
        .validation_errors
        .iter()
        .map(|p| format!("{object_name}: {}", describe(p)))
        .collect()
}

impl Verdict {
    /// The `ConfigRejected` event this verdict amounts to, if the config is invalid: what a
    /// new leader's Events recorder reports first (the state replay), since the event of the
    /// read itself may have been published before this replica led.
    pub fn rejection(&self) -> Option<EventKind> {
        if self.status.validation_status == ValidationStatus::Valid {
            return None;
        }
        let object_name = format!(
            "HAProxyTemplateConfig {}/{}",
            self.object
                .metadata
                .namespace
                .as_deref()
                .unwrap_or_default(),
            self.object.name_any()
        );
        Some(EventKind::ConfigRejected {
            errors: rejection_errors(&object_name, &self.status),
        })
    }
}

/// The watched resources the API server does not serve (a transient discovery failure is not
/// a problem of the config: the watch retries it).
async fn unresolved_resources(
    resources: &KubeResources,
    spec: &HAProxyTemplateConfigSpec,
) -> Vec<TemplateProblem> {
    let mut problems = Vec::new();
    for (name, watched) in &spec.watched_resources {
        match resources.resolve(watched).await {
            Ok(_) => {}
            Err(e @ SourceError::Discovery { .. }) => {
                tracing::warn!(resource = %name, error = %e, "could not check the watched resource against the API server; its watch retries");
            }
            Err(e) => problems.push(TemplateProblem {
                template: format!("spec.watchedResources.{name}"),
                line: None,
                column: None,
                message: e.to_string(),
            }),
        }
    }
    problems
}

/// Writes the status; a failure is told as `pure::api_failure` says (URL, cause, advice).
async fn write_status(
    api: &Api<HAProxyTemplateConfig>,
    name: &str,
    status: &HAProxyTemplateConfigStatus,
    server: &ApiServer,
    request: &Request,
) -> Result<(), String> {
    let patch = json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HAProxyTemplateConfig",
        "metadata": { "name": name },
        "status": status,
    });
    let params = PatchParams::apply("haptor").force();
    match tokio::time::timeout(
        STATUS_WRITE_TIMEOUT,
        api.patch_status(name, &params, &Patch::Apply(patch)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ApiFailure::of(server, request, &e).to_string()),
        Err(_) => Err(ApiFailure::new(
            server.clone(),
            request.clone(),
            Cause::TimedOut {
                after: STATUS_WRITE_TIMEOUT,
            },
        )
        .to_string()),
    }
}
