//! Kubernetes Events about the `HAProxyTemplateConfig`: one task reads haptor's observability
//! events from its queue of the fan-out (`messages::events::EventFanout`), keeps the few an
//! operator acts on ([`kube_event_of`]; what each says is `pure::kube_events`) and publishes
//! them as events.k8s.io/v1 Events with kube-rs's `Recorder` about the object the `regarding`
//! watch channel names at that moment — none while it names nothing. The `Recorder` turns a
//! repeat of an Event into a series on the same object (a count and a last-seen time) instead
//! of a new object; as it keeps the first note of a series, an Event whose note differs from
//! the one last published under the same type, reason and object starts a new Event instead,
//! so `kubectl describe` never shows a stale error.
//!
//! The task is the consumer of a lossy queue, so it can never slow the controller down: while
//! it waits for the API server its queue fills and the fan-out drops (and counts) what does
//! not fit. Each publication is bounded by [`PUBLISH_TIMEOUT`]; a failure drops that one
//! Event and is logged as a warning once per distinct error (the names of single Events left
//! out, so a missing RBAC rule is logged once, not at every Event), saying what to check —
//! first that haptor's service account may create and patch events.k8s.io events in the
//! config's namespace. After a success every error may be logged again. The task ends when
//! every sender of the queue is gone; nothing in it panics.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::drivers::kube::KubeApi;
use crate::messages::events::{EventKind, HttpFetchResult, ObservedEvent};
use crate::pure::api_failure::{ApiFailure, ApiServer, Request};
use crate::pure::kube_events::{
    KubeEventNote, REPORTING_INSTANCE_LIMIT, config_accepted, config_rejected, deployment_failed,
    deployment_fenced, http_resource_refused, leadership_gained, leadership_lost, truncate_to,
};

/// How long one Event may take to publish before it is dropped.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How many (type, reason, object) notes are remembered before the `Recorder` starts afresh.
const REMEMBERED_NOTES: usize = 256;
/// How many distinct errors are remembered as logged before they may be logged again.
const REMEMBERED_ERRORS: usize = 64;

/// The Kubernetes Event an observability event becomes, if any: a config accepted or
/// rejected, a deployment failed or fenced, leadership gained or lost. Every other kind
/// stays in logs and metrics.
pub fn kube_event_of(kind: &EventKind) -> Option<KubeEventNote> {
    // No wildcard arm: a new kind of event has to be decided on here.
    match kind {
        EventKind::ConfigAccepted { generation } => Some(config_accepted(*generation)),
        EventKind::ConfigRejected { errors } => Some(config_rejected(errors)),
        EventKind::DeploymentFailed { instance, error } => Some(deployment_failed(instance, error)),
        EventKind::DeploymentFenced { instance, epoch } => {
            Some(deployment_fenced(instance, *epoch))
        }
        EventKind::LeadershipGained { epoch } => Some(leadership_gained(*epoch)),
        EventKind::LeadershipLost => Some(leadership_lost()),
        EventKind::HttpResourceFetched {
            resource,
            url,
            result: result @ (HttpFetchResult::Error | HttpFetchResult::Rejected),
            error,
            ..
        } => Some(http_resource_refused(
            resource,
            url,
            *result == HttpFetchResult::Rejected,
            error.as_deref().unwrap_or("unknown"),
        )),
        EventKind::HttpResourceFetched { .. } => None,
        EventKind::IterationStarted { .. }
        | EventKind::ResourceChanged { .. }
        | EventKind::IndexSynced { .. }
        | EventKind::AllIndexesSynced
        | EventKind::ReconciliationTriggered { .. }
        | EventKind::RenderSucceeded { .. }
        | EventKind::RenderFailed { .. }
        | EventKind::ValidationSucceeded { .. }
        | EventKind::ValidationFailed { .. }
        | EventKind::CheckerUnavailable { .. }
        | EventKind::DeploymentSucceeded { .. }
        | EventKind::InstancesDiscovered { .. }
        | EventKind::ActorRestarted { .. } => None,
    }
}

/// Starts the task that publishes `events` as Kubernetes Events about the object `regarding`
/// names (the `HAProxyTemplateConfig`), as controller `reporter` (`reportingController`, a
/// qualified name such as `haptor`) and instance `instance` (`reportingInstance`, the pod
/// name; cut to the 128 bytes the API server accepts, the controller's name when empty). It
/// runs until every sender of `events` is dropped.
pub fn spawn(
    client: impl Into<KubeApi>,
    reporter: String,
    instance: String,
    regarding: watch::Receiver<Option<ObjectReference>>,
    events: mpsc::Receiver<ObservedEvent>,
) -> JoinHandle<()> {
    let KubeApi { client, server } = client.into();
    let instance = truncate_to(&instance, REPORTING_INSTANCE_LIMIT).to_string();
    let reporter = Reporter {
        controller: reporter,
        instance: (!instance.is_empty()).then_some(instance),
    };
    let publisher = Publisher {
        recorder: Recorder::new(client.clone(), reporter.clone()),
        client,
        server,
        reporter,
        notes: HashMap::new(),
        logged: HashSet::new(),
    };
    tokio::spawn(publisher.run(regarding, events))
}

/// What identifies a series of Events for the `Recorder` (besides the reporter, which is
/// fixed): type, reason, action and the object's API version, kind, namespace, name, uid.
type SeriesKey = (bool, &'static str, &'static str, [Option<String>; 5]);

struct Publisher {
    client: Client,
    /// The API server, as failures name it.
    server: ApiServer,
    reporter: Reporter,
    recorder: Recorder,
    /// The note last published in each series of the current `recorder`.
    notes: HashMap<SeriesKey, String>,
    /// The fingerprints of the errors logged since the last success.
    logged: HashSet<String>,
}

impl Publisher {
    async fn run(
        mut self,
        regarding: watch::Receiver<Option<ObjectReference>>,
        mut events: mpsc::Receiver<ObservedEvent>,
    ) {
        while let Some(event) = events.recv().await {
            let Some(note) = kube_event_of(&event.kind) else {
                continue;
            };
            let object = regarding.borrow().clone();
            match object {
                Some(object) => self.publish(note, &object, event.correlation).await,
                None => tracing::debug!(
                    reason = note.reason,
                    "no HAProxyTemplateConfig to publish a Kubernetes Event about yet; skipped"
                ),
            }
        }
        tracing::debug!("the event queue closed; Kubernetes Events are no longer published");
    }

    async fn publish(
        &mut self,
        note: KubeEventNote,
        object: &ObjectReference,
        correlation: Option<u64>,
    ) {
        let key: SeriesKey = (
            note.warning,
            note.reason,
            note.action,
            [
                object.api_version.clone(),
                object.kind.clone(),
                object.namespace.clone(),
                object.name.clone(),
                object.uid.clone(),
            ],
        );
        let changed = self.notes.get(&key).is_some_and(|last| *last != note.note);
        if changed || self.notes.len() >= REMEMBERED_NOTES {
            // The Recorder would add this to the series of the last one and keep that one's
            // note; a Recorder of its own starts every series afresh.
            self.recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            self.notes.clear();
        }
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.to_string(),
            note: Some(note.note.clone()),
            action: note.action.to_string(),
            secondary: None,
        };
        let subject = Subject::of(object, note.reason);
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.recorder.publish(&event, object)).await {
            Ok(Ok(())) => {
                tracing::debug!(reason = note.reason, correlation, object = %subject.name, "Kubernetes Event published");
                self.notes.insert(key, note.note);
                if !self.logged.is_empty() {
                    tracing::info!(namespace = %subject.namespace, "Kubernetes Events are published again");
                    self.logged.clear();
                }
            }
            Ok(Err(source)) => {
                let error = PublishError::from_kube(subject, source, &self.server);
                self.failed(error)
            }
            Err(_) => self.failed(PublishError::TimedOut { subject }),
        }
    }

    fn failed(&mut self, error: PublishError) {
        if self.logged.len() >= REMEMBERED_ERRORS {
            self.logged.clear();
        }
        if self.logged.insert(error.fingerprint()) {
            tracing::warn!(%error, "publishing a Kubernetes Event failed; it is dropped");
        } else {
            tracing::debug!(%error, "publishing a Kubernetes Event failed again; it is dropped");
        }
    }
}

/// The Event a failure is about, for its message.
#[derive(Debug)]
struct Subject {
    reason: &'static str,
    kind: String,
    namespace: String,
    name: String,
}

impl Subject {
    fn of(object: &ObjectReference, reason: &'static str) -> Subject {
        Subject {
            reason,
            kind: object.kind.clone().unwrap_or_else(|| "object".into()),
            // Where the Recorder writes the Event of an object without a namespace.
            namespace: object.namespace.clone().unwrap_or_else(|| "default".into()),
            name: object.name.clone().unwrap_or_default(),
        }
    }
}

/// Why an Event was not published.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error(
        "the API server refused the {} Event about {} {}/{}: {message}; grant create and patch \
         on events.k8s.io events in namespace {} to haptor's service account (a Role and a \
         RoleBinding)",
        subject.reason, subject.kind, subject.namespace, subject.name, subject.namespace
    )]
    Forbidden { subject: Subject, message: String },
    #[error(
        "could not publish the {} Event about {} {}/{}: {failure}",
        subject.reason, subject.kind, subject.namespace, subject.name
    )]
    Api {
        subject: Subject,
        failure: Box<ApiFailure>,
    },
    #[error(
        "publishing the {} Event about {} {}/{} did not finish within {:?}; check that the API \
         server is reachable",
        subject.reason, subject.kind, subject.namespace, subject.name, PUBLISH_TIMEOUT
    )]
    TimedOut { subject: Subject },
}

impl PublishError {
    fn from_kube(subject: Subject, source: kube::Error, server: &ApiServer) -> PublishError {
        match source {
            kube::Error::Api(status) if status.code == 403 => PublishError::Forbidden {
                subject,
                message: status.message,
            },
            source => {
                let request = Request::new(
                    "create and patch",
                    "events",
                    "events.k8s.io",
                    Some(&subject.namespace),
                );
                PublishError::Api {
                    failure: Box::new(ApiFailure::of(server, &request, &source)),
                    subject,
                }
            }
        }
    }

    /// What makes two failures the same for the log: the kind of failure and the namespace,
    /// not the Event's name (which the API server's messages quote and which is new at every
    /// Event).
    fn fingerprint(&self) -> String {
        match self {
            PublishError::Forbidden { subject, .. } => {
                format!("forbidden in {}", subject.namespace)
            }
            PublishError::Api { subject, failure } => match failure.cause.code() {
                Some(code) => format!("{code} in {} ({})", subject.namespace, subject.reason),
                None => format!("{} in {}", failure.cause, subject.namespace),
            },
            PublishError::TimedOut { subject } => format!("timeout in {}", subject.namespace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::deploy::DeployError;

    #[test]
    fn the_events_an_operator_acts_on_become_kubernetes_events() {
        let cases = [
            (
                EventKind::ConfigAccepted {
                    generation: Some(2),
                },
                false,
                "ConfigAccepted",
            ),
            (
                EventKind::ConfigRejected {
                    errors: vec!["bad".into()],
                },
                true,
                "ConfigInvalid",
            ),
            (
                EventKind::DeploymentFailed {
                    instance: "haproxy-0".into(),
                    error: DeployError::Rejected("reload failed".into()),
                },
                true,
                "DeploymentFailed",
            ),
            (
                EventKind::DeploymentFenced {
                    instance: "haproxy-0".into(),
                    epoch: 3,
                },
                true,
                "DeploymentFenced",
            ),
            (
                EventKind::LeadershipGained { epoch: 3 },
                false,
                "LeadershipGained",
            ),
            (EventKind::LeadershipLost, false, "LeadershipLost"),
        ];
        for (kind, warning, reason) in cases {
            let note = kube_event_of(&kind).unwrap_or_else(|| panic!("{kind:?} has an Event"));
            assert_eq!((note.warning, note.reason), (warning, reason), "{kind:?}");
        }
    }

    #[test]
    fn per_object_and_per_render_events_stay_in_logs_and_metrics() {
        let quiet = [
            EventKind::AllIndexesSynced,
            EventKind::ResourceChanged {
                resource: "services".into(),
                object: "default/web".into(),
                deleted: false,
                objects: 1,
            },
            EventKind::RenderFailed { error: "x".into() },
            EventKind::DeploymentSucceeded {
                instance: "haproxy-0".into(),
                duration: Duration::ZERO,
                reloaded: true,
                reload_reason: Some(crate::pure::deploy::ReloadReason::Structural),
                since_change: None,
            },
            EventKind::ActorRestarted {
                actor: "renderer".into(),
                restarts: 1,
            },
        ];
        for kind in quiet {
            assert_eq!(kube_event_of(&kind), None, "{kind:?}");
        }
    }

    #[test]
    fn a_missing_rbac_rule_is_one_error_whatever_the_event_is_named() {
        let subject = |reason| Subject {
            reason,
            kind: "HAProxyTemplateConfig".into(),
            namespace: "ingress".into(),
            name: "haptor".into(),
        };
        let forbidden = |reason, message: &str| {
            PublishError::from_kube(
                subject(reason),
                kube::Error::Api(Box::new(
                    kube::core::Status::failure(message, "Forbidden").with_code(403),
                )),
                &ApiServer::new("https://10.0.0.1:6443"),
            )
        };
        let first = forbidden("ConfigInvalid", "events \"haptor.17a\" is forbidden");
        let second = forbidden("LeadershipGained", "events \"haptor.17b\" is forbidden");
        assert_eq!(first.fingerprint(), second.fingerprint());
        let message = first.to_string();
        assert!(
            message.contains("grant create and patch on events.k8s.io events in namespace ingress"),
            "{message}"
        );
    }
}
