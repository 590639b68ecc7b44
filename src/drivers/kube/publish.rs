//! The `HAProxyCfg` writer of `haptor run`: [`KubePublishSink`] is the ConfigPublisher's
//! [`PublishSink`] in-cluster. [`PublishSink::publish`] never waits on the API server: it
//! puts the latest (spec, status) into a `tokio::sync::watch` channel, and one background
//! task ([`KubePublishSink::start`]) writes whatever is latest when it gets to it, so a
//! burst of publications while a write is under way (or backing off) costs one write.
//!
//! A write stores the content as `pure::config::published` says (text, gzip+base64, or
//! omitted with a `ContentPublished=False` condition), then server-side applies, as field
//! manager `haptor` and forced (the leader owns these fields, whoever wrote them last):
//!
//! - the spec — `{apiVersion, kind, metadata: {name, ownerReferences}, spec}` — only when it
//!   differs from the last one written successfully (a new owner counts as a difference);
//! - then the status, through the status subresource, only when it differs from the last
//!   one written (an unchanged `ContentPublished` condition keeps its transition time).
//!
//! Each request is bounded by [`REQUEST_TIMEOUT`]. A failure is logged naming the object,
//! the API server's URL, the cause and what to check (RBAC for a 403, the CRD for a 404),
//! as `pure::api_failure::FailureLog` decides: a warning the first time, quiet while it
//! repeats, a refusal only once it lasts (a restarted API server refuses for a moment);
//! it is counted and retried with a backoff doubling from [`FIRST_BACKOFF`] to
//! [`MAX_BACKOFF`]; the retry writes the latest value, not the one that failed. Writes are
//! counted in `haptor_kube_writes_total{object="haproxycfg", part, result}`. The task ends
//! when the sink is dropped, once the write or the backoff under way is over.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use prometheus::{IntCounterVec, Opts, Registry};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::drivers::kube::KubeApi;
use crate::pure::api_failure::{ApiFailure, ApiServer, Cause, FailureLog, HAPTOR_GROUP, Request};
use crate::pure::config::published::{
    EncodedSpec, TEXT_LIMIT, encode_spec, with_content_condition,
};
use crate::pure::config::{HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus};
use crate::seams::PublishSink;

/// The field manager of every `HAProxyCfg` write.
pub const FIELD_MANAGER: &str = "haptor";
/// How long one request may take before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait after a first failure; it doubles with each further one.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The counter family of the writes.
pub const WRITES_METRIC: &str = "haptor_kube_writes_total";

/// Where the sink's task reads the wall clock (the conditions' transition times).
pub type Clock = fn() -> Timestamp;

/// What the task is to write: the latest publication and the owner.
#[derive(Debug, Clone, Default)]
struct Desired {
    published: Option<Arc<(HAProxyCfgSpec, HAProxyCfgStatus)>>,
    owner: Option<OwnerReference>,
}

/// The ConfigPublisher's sink in-cluster: the latest publication, written to one
/// `HAProxyCfg` by a background task (see the module documentation).
pub struct KubePublishSink {
    desired: watch::Sender<Desired>,
    writes: IntCounterVec,
    client: Client,
    server: ApiServer,
    namespace: String,
    name: String,
    clock: Clock,
}

impl KubePublishSink {
    /// Starts the task that writes `HAProxyCfg` `namespace/name` through `client`; it ends
    /// when the returned sink is dropped. Must be called inside a tokio runtime.
    pub fn start(
        client: impl Into<KubeApi>,
        namespace: String,
        name: String,
    ) -> (KubePublishSink, tokio::task::JoinHandle<()>) {
        KubePublishSink::start_with_clock(client, namespace, name, Timestamp::now)
    }

    /// [`KubePublishSink::start`] with the transition times of conditions read from
    /// `clock` (tests that pin the exact requests).
    pub fn start_with_clock(
        client: impl Into<KubeApi>,
        namespace: String,
        name: String,
        clock: Clock,
    ) -> (KubePublishSink, tokio::task::JoinHandle<()>) {
        let sink = KubePublishSink::new(client, namespace, name, clock);
        let task = sink.start_writer();
        (sink, task)
    }

    /// A sink with no writer yet: publications are kept (the latest) until a writer
    /// ([`KubePublishSink::start_writer`]) writes them.
    pub fn new(
        client: impl Into<KubeApi>,
        namespace: String,
        name: String,
        clock: Clock,
    ) -> KubePublishSink {
        let KubeApi { client, server } = client.into();
        KubePublishSink {
            desired: watch::channel(Desired::default()).0,
            writes: write_counters(),
            client,
            server,
            namespace,
            name,
            clock,
        }
    }

    /// Starts a writer: it writes the latest publication at once (a restarted writer
    /// catches up), then each new one. It ends when the sink is dropped; a second writer
    /// must not run beside it (`haptor run` supervises one, in the leader-only subtree).
    pub fn start_writer(&self) -> tokio::task::JoinHandle<()> {
        let mut updates = self.desired.subscribe();
        updates.mark_changed();
        let writer = Writer {
            api: Api::namespaced(self.client.clone(), &self.namespace),
            server: self.server.clone(),
            failures: FailureLog::new(),
            object: format!("{}/{}", self.namespace, self.name),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            writes: self.writes.clone(),
            clock: self.clock,
            encoded: None,
            spec_written: None,
            status_written: None,
        };
        tokio::spawn(writer.run(updates))
    }

    /// Sets the owner of the `HAProxyCfg` (the `HAProxyTemplateConfig` it is rendered from):
    /// the spec apply carries it in `metadata.ownerReferences`, and a different owner makes
    /// the spec be applied again.
    pub fn set_owner(&self, owner: OwnerReference) {
        self.desired.send_if_modified(|d| {
            if d.owner.as_ref() == Some(&owner) {
                return false;
            }
            d.owner = Some(owner);
            true
        });
    }

    /// Registers the write counters (`haptor_kube_writes_total`) in `registry`; they count
    /// from [`KubePublishSink::start`] on.
    pub fn register_metrics(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.writes.clone()))
    }

    /// The write counters (`haptor_kube_writes_total`), to register elsewhere.
    pub fn write_counter(&self) -> IntCounterVec {
        self.writes.clone()
    }
}

impl PublishSink for KubePublishSink {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus) {
        let published = Arc::new((spec.clone(), status.clone()));
        self.desired.send_modify(|d| d.published = Some(published));
    }
}

/// A fresh `haptor_kube_writes_total` family.
pub fn write_counters() -> IntCounterVec {
    // The name and the labels are valid constants (the unit test below creates them), so
    // creating the family cannot fail.
    let writes = IntCounterVec::new(
        Opts::new(
            WRITES_METRIC,
            "Writes haptor made to Kubernetes objects, by object, part (spec or status) and result",
        ),
        &["object", "part", "result"],
    )
    .expect("a valid metric name and labels");
    for part in [Part::Spec, Part::Status] {
        for result in ["success", "failure"] {
            writes.with_label_values(&["haproxycfg", part.label(), result]);
        }
    }
    writes
}

/// The part of the object one apply writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Spec,
    Status,
}

impl Part {
    fn label(self) -> &'static str {
        match self {
            Part::Spec => "spec",
            Part::Status => "status",
        }
    }
}

/// Why an apply did not succeed.
#[derive(Debug)]
enum Failure {
    Api(kube::Error),
    TimedOut,
}

impl Failure {
    fn code(&self) -> Option<u16> {
        match self {
            Failure::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Api(e) => write!(f, "{e}"),
            Failure::TimedOut => write!(f, "no answer within {REQUEST_TIMEOUT:?}"),
        }
    }
}

/// The background task's state: what it last wrote.
struct Writer {
    api: Api<HAProxyCfg>,
    server: ApiServer,
    /// How failures are told (`pure::api_failure::FailureLog`).
    failures: FailureLog,
    namespace: String,
    name: String,
    object: String,
    writes: IntCounterVec,
    clock: Clock,
    /// The last spec encoded, and its encoding (a status-only change reuses it).
    encoded: Option<(HAProxyCfgSpec, EncodedSpec)>,
    /// The body of the last spec apply that succeeded.
    spec_written: Option<Value>,
    /// The last status written successfully.
    status_written: Option<HAProxyCfgStatus>,
}

impl Writer {
    async fn run(mut self, mut updates: watch::Receiver<Desired>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if updates.changed().await.is_err() {
                return;
            }
            loop {
                let desired = updates.borrow_and_update().clone();
                let Err((part, failure)) = self.write(&desired).await else {
                    if let Some(resumed) = self.failures.succeeded(std::time::Instant::now()) {
                        log_at!(
                            resumed.level,
                            object = %self.object,
                            "writing HAProxyCfg {} works again after {} failed tries over {:.1} s",
                            self.object,
                            resumed.failures,
                            resumed.over.as_secs_f64()
                        );
                    }
                    backoff = FIRST_BACKOFF;
                    break;
                };
                let told = self.tell(part, &failure);
                let telling = self.failures.failed(&told.cause, std::time::Instant::now());
                let text = if telling.advice {
                    match told.cause.code() {
                        Some(401 | 403 | 404 | 422) => {
                            format!("{}; {}", told.brief(), self.advice(part, &failure))
                        }
                        _ => told.to_string(),
                    }
                } else {
                    told.brief()
                };
                log_at!(
                    telling.level,
                    object = %self.object,
                    part = part.label(),
                    cause = told.metric_label(),
                    retry_in = ?backoff,
                    "writing the {} of HAProxyCfg {} failed: {text}; retrying in {backoff:?}",
                    part.label(),
                    self.object,
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                if updates.has_changed().is_err() {
                    return;
                }
            }
        }
    }

    /// Writes what `desired` holds that was not written yet: the spec, then the status.
    async fn write(&mut self, desired: &Desired) -> Result<(), (Part, Failure)> {
        let Some(published) = &desired.published else {
            return Ok(());
        };
        let (spec, status) = &**published;
        let encoded = self.encode(spec).await;
        let spec_body = self.body(Part::Spec, json!(encoded.spec), desired.owner.as_ref());
        if self.spec_written.as_ref() != Some(&spec_body) {
            let stored = self
                .apply(Part::Spec, spec_body.clone())
                .await
                .map_err(|f| (Part::Spec, f))?;
            self.spec_written = Some(spec_body);
            if stored.status.is_none() {
                // The object was created anew (or its status cleared): write the status
                // even if it is the one written before.
                self.status_written = None;
            }
        }
        let status = with_content_condition(
            status,
            &encoded.storage,
            self.status_written.as_ref(),
            (self.clock)(),
        );
        if self.status_written.as_ref() != Some(&status) {
            let body = self.body(Part::Status, json!(status), None);
            match self.apply(Part::Status, body).await {
                Ok(_) => self.status_written = Some(status),
                Err(failure) => {
                    if failure.code() == Some(404) {
                        // The object is gone: the next attempt creates it again.
                        self.spec_written = None;
                        self.status_written = None;
                    }
                    return Err((Part::Status, failure));
                }
            }
        }
        Ok(())
    }

    /// `spec` as stored, from the last encoding when the spec is the same; a large one is
    /// compressed off the runtime's threads.
    async fn encode(&mut self, spec: &HAProxyCfgSpec) -> EncodedSpec {
        if let Some((source, encoded)) = &self.encoded
            && source == spec
        {
            return encoded.clone();
        }
        let encoded = if spec.content.len() > TEXT_LIMIT {
            let source = spec.clone();
            match tokio::task::spawn_blocking(move || encode_spec(&source)).await {
                Ok(encoded) => encoded,
                Err(_) => encode_spec(spec),
            }
        } else {
            encode_spec(spec)
        };
        self.encoded = Some((spec.clone(), encoded.clone()));
        encoded
    }

    /// The apply patch of one part: `{apiVersion, kind, metadata, <part>}`.
    fn body(&self, part: Part, value: Value, owner: Option<&OwnerReference>) -> Value {
        let mut metadata = json!({ "name": self.name });
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        json!({
            "apiVersion": HAProxyCfg::api_version(&()),
            "kind": HAProxyCfg::kind(&()),
            "metadata": metadata,
            part.label(): value,
        })
    }

    /// One server-side apply, bounded by [`REQUEST_TIMEOUT`] and counted.
    async fn apply(&self, part: Part, body: Value) -> Result<HAProxyCfg, Failure> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(body);
        let request = async {
            match part {
                Part::Spec => self.api.patch(&self.name, &params, &patch).await,
                Part::Status => self.api.patch_status(&self.name, &params, &patch).await,
            }
        };
        let result = match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
            Ok(Ok(stored)) => Ok(stored),
            Ok(Err(e)) => Err(Failure::Api(e)),
            Err(_) => Err(Failure::TimedOut),
        };
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.writes
            .with_label_values(&["haproxycfg", part.label(), outcome])
            .inc();
        result
    }

    /// The failure as `pure::api_failure` tells it: the API server's URL, the request, the
    /// cause.
    fn tell(&self, part: Part, failure: &Failure) -> ApiFailure {
        let resource = match part {
            Part::Spec => "haproxycfgs",
            Part::Status => "haproxycfgs/status",
        };
        let request =
            Request::new("patch", resource, HAPTOR_GROUP, Some(&self.namespace)).named(&self.name);
        match failure {
            Failure::Api(e) => ApiFailure::of(&self.server, &request, e),
            Failure::TimedOut => ApiFailure::new(
                self.server.clone(),
                request,
                Cause::TimedOut {
                    after: REQUEST_TIMEOUT,
                },
            ),
        }
    }

    /// What to check after `failure`, as a clause of the warning.
    fn advice(&self, part: Part, failure: &Failure) -> String {
        let ns = &self.namespace;
        let resource = match part {
            Part::Spec => "haproxycfgs.haptor.dev",
            Part::Status => "haproxycfgs.haptor.dev/status",
        };
        match (failure, failure.code()) {
            (_, Some(401)) => "check haptor's credentials (its service account token)".to_string(),
            (_, Some(403)) => format!(
                "check RBAC: haptor's service account needs create and patch on \
                 haproxycfgs.haptor.dev and patch on haproxycfgs.haptor.dev/status in \
                 namespace {ns} (a Role and a RoleBinding); it was refused {resource}"
            ),
            (_, Some(404)) => match part {
                Part::Spec => format!(
                    "check that the HAProxyCfg CRD (haproxycfgs.haptor.dev, deploy/crds/) is \
                     installed and that namespace {ns} exists"
                ),
                Part::Status => "the object was deleted meanwhile or its CRD has no status \
                                 subresource (check the CRD installed is deploy/crds/'s); the \
                                 object is created again"
                    .to_string(),
            },
            (_, Some(422)) => "the API server found the object invalid: check that the \
                               HAProxyCfg CRD installed is the one of this haptor \
                               (deploy/crds/)"
                .to_string(),
            (Failure::TimedOut, _) => {
                "check that the API server is reachable and not overloaded".to_string()
            }
            _ => {
                "check that the API server is reachable and serves haptor.dev/v1alpha1".to_string()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_counters_start_at_zero_for_every_part_and_result() {
        let registry = Registry::new();
        let writes = write_counters();
        registry
            .register(Box::new(writes.clone()))
            .expect("registers");
        let families = registry.gather();
        let family = families
            .iter()
            .find(|f| f.name() == WRITES_METRIC)
            .expect("the family");
        assert_eq!(family.get_metric().len(), 4);
        assert!(
            family
                .get_metric()
                .iter()
                .all(|m| m.get_counter().get_value() == 0.0)
        );
    }
}
