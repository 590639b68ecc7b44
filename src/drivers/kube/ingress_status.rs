//! Ingress status and the `IngressIgnored` / `IngressPartlyServed` Events in `haptor run`,
//! from the outcomes the templates record (`served`, `ignored`): the ConfigPublisher hands each published
//! render's outcomes to [`IngressStatus::outcomes`] (through [`WithIngressStatus`], the
//! publish sink wrapper), and one task acts on the latest of them while this replica leads.
//! What it writes is decided by `pure::ingress_status::IngressStatusBook`:
//!
//! - every served Ingress gets `status.loadBalancer.ingress` = the publish address, with a
//!   merge patch of `networking.k8s.io/v1` `ingresses/status` as field manager `haptor`,
//!   only when the Ingress does not carry it already (read once per leadership term, then
//!   known from what was written), so a render that changes nothing about an Ingress
//!   writes nothing to it;
//! - an Ingress served before and no longer served has that status cleared while it still
//!   carries what haptor wrote (the patch is conditional on the resourceVersion read);
//! - every Ingress with something newly left out (per outcome and reasons) gets a Warning
//!   Event with the templates' reasons, published with kube-rs's `Recorder`:
//!   `IngressIgnored` when it is not served at all, `IngressPartlyServed` when it is served
//!   with a host, a path, a TLS entry or an annotation left out; so does every Service
//!   whose backends are served without some of its annotations (`ServicePartlyServed`).
//!
//! The publish address is `--publish-address` (fixed) or the `--publish-service` Service's
//! load balancer addresses, else its cluster IP (watched); with neither, no status is
//! written, but Events still are. Each request is bounded by [`REQUEST_TIMEOUT`]; a failed
//! status write is retried after [`RETRY_AFTER`] (a 403 names the RBAC rule to add). Each
//! new leadership term reads every served Ingress again and re-asserts its status.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::drivers::AbortOnDrop;
use crate::drivers::kube::gateway_status::{GatewayStatusFailure, GatewayStatusWriter};
use crate::drivers::kube::{KubeApi, tell_watch_failure, tell_watch_resumed};
use crate::messages::Leadership;
use crate::pure::api_failure::{ApiFailure, ApiServer, Cause, FailureLog, Request};
use crate::pure::config::{HAProxyCfgSpec, HAProxyCfgStatus};
use crate::pure::gateway_status::{ObjectStatus, StatusRecord};
use crate::pure::ingress_status::{
    Addresses, IngressRef, IngressStatusBook, LEFT_OUT_ACTION, LeftOutReport, ReportedKind,
    ReportedObject, StatusWrite, service_addresses,
};
use crate::pure::rendered::{ObjectKey, Outcomes};
use crate::seams::PublishSink;

/// How long one request (a read, a status patch, an Event) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The wait before status writes that failed are tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// The field manager of the status writes.
pub const FIELD_MANAGER: &str = "haptor";

/// Where the address Ingresses are given comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PublishAddress {
    /// No `--publish-address` or `--publish-service`: no status is written.
    Nothing,
    /// `--publish-address`.
    Fixed(Addresses),
    /// `--publish-service NAMESPACE/NAME`.
    Service { namespace: String, name: String },
}

/// The handle the publish sink forwards outcomes to.
#[derive(Clone)]
pub struct IngressStatus {
    outcomes: Arc<watch::Sender<Option<Arc<Outcomes>>>>,
    /// The Gateway API status of the latest published render.
    gateway: Arc<watch::Sender<Option<Arc<Vec<ObjectStatus>>>>>,
}

impl IngressStatus {
    /// The outcomes of the latest published render; unchanged ones wake nothing.
    pub fn outcomes(&self, outcomes: &Outcomes) {
        self.outcomes.send_if_modified(|latest| {
            if latest.as_deref() == Some(outcomes) {
                return false;
            }
            *latest = Some(Arc::new(outcomes.clone()));
            true
        });
    }

    /// The Gateway API status records of the latest published render; an unchanged status
    /// wakes nothing.
    pub fn gateway_statuses(&self, records: &[StatusRecord]) {
        let statuses = crate::pure::gateway_status::statuses(records);
        self.gateway.send_if_modified(|latest| {
            if latest.as_deref() == Some(&statuses) {
                return false;
            }
            *latest = Some(Arc::new(statuses));
            true
        });
    }
}

/// A publish sink that also hands each render's outcomes to an [`IngressStatus`].
pub struct WithIngressStatus<S> {
    pub inner: Arc<S>,
    pub status: IngressStatus,
}

impl<S: PublishSink> PublishSink for WithIngressStatus<S> {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus) {
        self.inner.publish(spec, status);
    }

    fn outcomes(&self, outcomes: &Outcomes) {
        self.inner.outcomes(outcomes);
        self.status.outcomes(outcomes);
    }

    fn gateway_statuses(&self, records: &[StatusRecord]) {
        self.inner.gateway_statuses(records);
        self.status.gateway_statuses(records);
    }
}

impl IngressStatus {
    /// A handle with no writer yet: the latest outcomes are kept until a writer
    /// ([`IngressStatus::start_writer`]) acts on them.
    pub fn new() -> IngressStatus {
        IngressStatus {
            outcomes: Arc::new(watch::channel(None).0),
            gateway: Arc::new(watch::channel(None).0),
        }
    }

    /// Starts a writer: it acts on the latest outcomes at once (a restarted writer starts a
    /// new term: it reads every served Ingress again), then on each new one, while
    /// `leadership` says this replica leads. It ends when every handle is dropped; a second
    /// writer must not run beside it (`haptor run` supervises one, in the leader-only
    /// subtree).
    pub fn start_writer(
        &self,
        client: impl Into<KubeApi>,
        reporter: Reporter,
        publish: PublishAddress,
        leadership: watch::Receiver<Leadership>,
    ) -> JoinHandle<()> {
        let KubeApi { client, server } = client.into();
        let outcomes_rx = self.outcomes.subscribe();
        let gateway_rx = self.gateway.subscribe();
        let (addresses_tx, addresses_rx) = watch::channel(None);
        let service_task = match publish {
            PublishAddress::Nothing => None,
            PublishAddress::Fixed(addresses) => {
                let _ = addresses_tx.send_replace(Some(addresses));
                None
            }
            PublishAddress::Service { namespace, name } => Some(tokio::spawn(watch_service(
                KubeApi::new(client.clone(), server.clone()),
                namespace,
                name,
                addresses_tx.clone(),
            ))),
        };
        let driver = Driver {
            gateway: GatewayStatusWriter::new(client.clone(), server.clone()),
            client,
            server,
            reporter,
            book: IngressStatusBook::default(),
            logged: HashSet::new(),
        };
        tokio::spawn(async move {
            // Held so a fixed (or absent) address never reads as a closed channel.
            let _addresses = addresses_tx;
            // The Service watch ends with this task, however it ends.
            let _service = service_task.map(|t| AbortOnDrop(t.abort_handle()));
            driver
                .run(outcomes_rx, gateway_rx, leadership, addresses_rx)
                .await;
        })
    }
}

impl Default for IngressStatus {
    fn default() -> Self {
        IngressStatus::new()
    }
}

struct Driver {
    /// The Gateway API status writes, in the same term and with the same address.
    gateway: GatewayStatusWriter,
    client: Client,
    server: ApiServer,
    reporter: Reporter,
    book: IngressStatusBook,
    /// Failures logged as warnings since the last success (logged once each).
    logged: HashSet<String>,
}

impl Driver {
    async fn run(
        mut self,
        mut outcomes: watch::Receiver<Option<Arc<Outcomes>>>,
        mut gateway: watch::Receiver<Option<Arc<Vec<ObjectStatus>>>>,
        mut leadership: watch::Receiver<Leadership>,
        mut addresses: watch::Receiver<Option<Addresses>>,
    ) {
        let mut term: Option<u64> = None;
        let mut applied: Option<Arc<Outcomes>> = None;
        let mut retry;
        loop {
            let now = *leadership.borrow_and_update();
            let latest = outcomes.borrow_and_update().clone();
            let address = addresses.borrow_and_update().clone();
            let statuses = gateway.borrow_and_update().clone();
            if now.is_leader {
                if term != Some(now.epoch) {
                    term = Some(now.epoch);
                    self.book.new_term();
                    self.gateway.new_term();
                }
                if let Some(latest) = latest
                    && !applied.as_ref().is_some_and(|a| Arc::ptr_eq(a, &latest))
                {
                    let newly = self.book.apply_outcomes(&latest);
                    applied = Some(latest);
                    for report in newly {
                        if !leadership.borrow().is_leader {
                            break;
                        }
                        self.report_left_out(&report).await;
                    }
                }
                retry = match address.clone().filter(|a| !a.is_empty()) {
                    Some(address) => !self.write_statuses(&address, &leadership).await,
                    None => false,
                };
                if let Some(statuses) = statuses {
                    let publish = address.filter(|a| !a.is_empty());
                    let failures = self.gateway.write(&statuses, publish.as_ref()).await;
                    retry |= !failures.is_empty();
                    if failures.is_empty() {
                        self.succeeded();
                    }
                    for (object, failure) in failures {
                        self.warn_gateway_once(&object, failure);
                    }
                }
            } else {
                term = None;
                retry = false;
            }
            tokio::select! {
                changed = outcomes.changed() => if changed.is_err() { break },
                changed = gateway.changed() => if changed.is_err() { break },
                changed = leadership.changed() => if changed.is_err() { break },
                changed = addresses.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(RETRY_AFTER), if retry => {}
            }
        }
        tracing::debug!("the Ingress status task ends");
    }

    fn api(&self, namespace: &str) -> Api<Ingress> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Does every status write due; false when one failed (to be retried).
    async fn write_statuses(
        &mut self,
        address: &Addresses,
        leadership: &watch::Receiver<Leadership>,
    ) -> bool {
        let mut all_done = true;
        for write in self.book.writes(address) {
            if !leadership.borrow().is_leader {
                return true;
            }
            match self.write_status(&write, address).await {
                Ok(()) => {}
                Err(problem) => {
                    all_done = false;
                    self.warn_once(&write.ingress, problem);
                }
            }
        }
        all_done
    }

    async fn write_status(
        &mut self,
        write: &StatusWrite,
        current: &Addresses,
    ) -> Result<(), Failure> {
        let ingress = &write.ingress;
        let known = if write.clear {
            None
        } else {
            write.known.clone()
        };
        let (carried, resource_version) = match known {
            Some(carried) => (carried, None),
            None => match self.read(ingress).await? {
                Some((carried, version, _)) => (carried, version),
                None => {
                    self.book.gone(ingress);
                    return Ok(());
                }
            },
        };
        if write.clear {
            if !self.book.may_clear(ingress, &carried, current) {
                if carried.is_empty() {
                    self.book.read(ingress, carried);
                } else {
                    tracing::debug!(ingress = %ingress, "an Ingress haptor no longer serves carries another address; left alone");
                    self.book.leave(ingress);
                }
                return Ok(());
            }
        } else if carried == write.wanted {
            self.book.read(ingress, carried);
            return Ok(());
        }
        let mut patch = json!({ "status": { "loadBalancer": { "ingress": write.wanted } } });
        if write.clear {
            patch["status"]["loadBalancer"]["ingress"] = serde_json::Value::Null;
            patch["metadata"] = json!({ "resourceVersion": resource_version });
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let api = self.api(&ingress.namespace);
        let written = tokio::time::timeout(
            REQUEST_TIMEOUT,
            api.patch_status(&ingress.name, &params, &Patch::Merge(&patch)),
        )
        .await
        .map_err(|_| Failure::TimedOut("writing its status"))?;
        match written {
            Ok(updated) => {
                let now = carried_by(&updated);
                if write.clear {
                    tracing::info!(ingress = %ingress, "Ingress status cleared (haptor no longer serves it)");
                } else {
                    tracing::info!(ingress = %ingress, "Ingress status written");
                }
                self.book.wrote(ingress, now);
                self.succeeded();
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.book.gone(ingress);
                Ok(())
            }
            Err(e) => Err(Failure::Kube {
                what: "writing its status",
                failure: Box::new(ApiFailure::of(
                    &self.server,
                    &Request::new(
                        "patch",
                        "ingresses/status",
                        "networking.k8s.io",
                        Some(&ingress.namespace),
                    )
                    .named(&ingress.name),
                    &e,
                )),
            }),
        }
    }

    /// `call`, a read described by `request`, bounded by [`REQUEST_TIMEOUT`].
    async fn reading<T>(
        &self,
        request: Request,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Failure> {
        tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .map_err(|_| Failure::TimedOut("reading it"))?
            .map_err(|e| Failure::Kube {
                what: "reading it",
                failure: Box::new(ApiFailure::of(&self.server, &request, &e)),
            })
    }

    /// What the Ingress carries now, its resourceVersion and uid; `None` when it is gone.
    async fn read(&self, ingress: &IngressRef) -> Result<Option<Read>, Failure> {
        let api = self.api(&ingress.namespace);
        let request = Request::new(
            "get",
            "ingresses",
            "networking.k8s.io",
            Some(&ingress.namespace),
        )
        .named(&ingress.name);
        let read = self.reading(request, api.get_opt(&ingress.name)).await?;
        Ok(read.map(|object| {
            let meta = object.meta();
            (
                carried_by(&object),
                meta.resource_version.clone(),
                meta.uid.clone(),
            )
        }))
    }

    /// The uid of the Service `object` (for the Event's reference, which `kubectl describe`
    /// matches on), read with a list narrowed to its name (haptor lists and watches
    /// Services; it has no get on them); `None` when it is gone.
    async fn service_uid(
        &self,
        object: &ReportedObject,
    ) -> Result<Option<Option<String>>, Failure> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &object.namespace);
        let params = ListParams::default().fields(&format!("metadata.name={}", object.name));
        let request =
            Request::new("list", "services", "", Some(&object.namespace)).named(&object.name);
        let list = self.reading(request, api.list_metadata(&params)).await?;
        Ok(list
            .items
            .into_iter()
            .find(|service| service.metadata.name.as_deref() == Some(object.name.as_str()))
            .map(|service| service.metadata.uid))
    }

    async fn report_left_out(&mut self, report: &LeftOutReport) {
        let object = &report.object;
        let event_reason = report.event_reason();
        let read = match object.kind {
            ReportedKind::Ingress => self
                .read(&IngressRef {
                    namespace: object.namespace.clone(),
                    name: object.name.clone(),
                })
                .await
                .map(|read| read.map(|(_, _, uid)| uid)),
            ReportedKind::Service => self.service_uid(object).await,
        };
        let uid = match read {
            Ok(Some(uid)) => uid,
            Ok(None) => return,
            Err(failure) => {
                self.warn_once(object, failure);
                return;
            }
        };
        let reference = ObjectReference {
            api_version: Some(object.kind.api_version().into()),
            kind: Some(object.kind.kind().into()),
            namespace: Some(object.namespace.clone()),
            name: Some(object.name.clone()),
            uid,
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: event_reason.into(),
            note: Some(report.note()),
            action: LEFT_OUT_ACTION.into(),
            secondary: None,
        };
        // A Recorder of its own per Event: one reports each (object, reasons) once, and a
        // shared Recorder would add new reasons to the series of the old ones, keeping the
        // old note.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        match tokio::time::timeout(REQUEST_TIMEOUT, recorder.publish(&event, &reference)).await {
            Ok(Ok(())) => {
                tracing::debug!(
                    object = %object,
                    reason = %report.reason,
                    "{event_reason} Event published"
                );
                self.book.reported(report);
                self.succeeded();
            }
            Ok(Err(e)) => {
                let failure = ApiFailure::of(
                    &self.server,
                    &Request::new("create", "events", "events.k8s.io", Some(&object.namespace)),
                    &e,
                );
                self.warn_once(
                    object,
                    Failure::Kube {
                        what: "publishing an Event about it",
                        failure: Box::new(failure),
                    },
                )
            }
            Err(_) => self.warn_once(object, Failure::TimedOut("publishing an Event about it")),
        }
    }

    fn succeeded(&mut self) {
        if !self.logged.is_empty() {
            tracing::info!("Ingress status writes and Events succeed again");
            self.logged.clear();
        }
    }

    /// Logs a Gateway API status write failure once per kind (403, timeout, ...), later
    /// repeats at debug level.
    fn warn_gateway_once(&mut self, object: &ObjectKey, failure: GatewayStatusFailure) {
        let fingerprint = match &failure {
            GatewayStatusFailure::TimedOut(what) => format!("gateway timeout {what}"),
            GatewayStatusFailure::Kube(failure) => format!("gateway {}", failure.cause),
        };
        if self.logged.len() >= 64 {
            self.logged.clear();
        }
        if self.logged.insert(fingerprint) {
            tracing::warn!(object = %object, error = %failure, "a Gateway API status write failed; it is retried (haptor's service account needs get on the kind and patch on its status)");
        } else {
            tracing::debug!(object = %object, error = %failure, "a Gateway API status write failed again");
        }
    }

    /// Logs a failure as a warning once per kind of failure (not per Ingress: a missing RBAC
    /// rule is one warning), later repeats at debug level.
    /// `object`: the Ingress or Service the write or Event is about.
    fn warn_once(&mut self, object: &dyn std::fmt::Display, failure: Failure) {
        let fingerprint = failure.fingerprint();
        if self.logged.len() >= 64 {
            self.logged.clear();
        }
        if self.logged.insert(fingerprint) {
            tracing::warn!(object = %object, error = %failure, "an Ingress status write or Event failed; it is retried");
        } else {
            tracing::debug!(object = %object, error = %failure, "an Ingress status write or Event failed again");
        }
    }
}

/// What a read of an Ingress gives: its addresses, resourceVersion and uid.
type Read = (Addresses, Option<String>, Option<String>);

/// What `status.loadBalancer.ingress` of `ingress` holds.
fn carried_by(ingress: &Ingress) -> Addresses {
    ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0} took longer than {REQUEST_TIMEOUT:?}")]
    TimedOut(&'static str),
    #[error("{what}: {}", describe(.failure))]
    Kube {
        what: &'static str,
        failure: Box<ApiFailure>,
    },
}

impl Failure {
    fn fingerprint(&self) -> String {
        match self {
            Failure::TimedOut(what) => format!("timeout {what}"),
            Failure::Kube { what, failure } => match failure.cause.code() {
                Some(code) => format!("{what} {code}"),
                None => format!("{what} {}", failure.cause),
            },
        }
    }
}

/// The failure as the warning says it: the one RBAC rule set for a 403 (status writes,
/// reads and Events together), a conflict as the retry it causes, anything else as
/// `pure::api_failure` tells it (the API server's URL and the cause).
fn describe(failure: &ApiFailure) -> String {
    match &failure.cause {
        Cause::Forbidden { message } => format!(
            "forbidden ({message}); haptor's service account needs patch on networking.k8s.io ingresses/status, get on ingresses, list on services and create/patch on events.k8s.io events",
        ),
        Cause::Status { code: 409, .. } => {
            "the Ingress changed meanwhile (conflict); read again at the retry".to_string()
        }
        _ => failure.to_string(),
    }
}

/// Watches the `--publish-service` Service and sends its addresses (empty while it does
/// not exist or has none).
async fn watch_service(
    client: KubeApi,
    namespace: String,
    name: String,
    out: watch::Sender<Option<Addresses>>,
) {
    let api: Api<Service> = Api::namespaced(client.client, &namespace);
    let request = Request::watch("services", "", Some(&namespace)).named(&name);
    let selector = format!("metadata.name={name}");
    let mut events = super::retried(watcher(api, watcher::Config::default().fields(&selector)));
    let object = format!("Service {namespace}/{name}");
    let send = |addresses: Addresses| {
        let changed = out.send_if_modified(|current| {
            if current.as_ref() == Some(&addresses) {
                return false;
            }
            *current = Some(addresses.clone());
            true
        });
        if changed {
            if addresses.is_empty() {
                tracing::warn!(service = %object, "the --publish-service Service has no address (no load balancer ingress, no cluster IP); Ingress statuses are not written until it has one");
            } else {
                tracing::info!(service = %object, "the --publish-service address changed; served Ingresses get it");
            }
        }
    };
    let what = format!("the --publish-service {object}");
    let mut found = false;
    let mut failures = FailureLog::new();
    while let Some(event) = events.next().await {
        if matches!(&event, Ok(e) if !matches!(e, watcher::Event::Init)) {
            tell_watch_resumed(&mut failures, &what);
        }
        match event {
            Ok(watcher::Event::Init) => found = false,
            Ok(watcher::Event::InitApply(service) | watcher::Event::Apply(service)) => {
                found = true;
                send(service_addresses(&service));
            }
            Ok(watcher::Event::InitDone) => {
                if !found {
                    send(Addresses::new());
                }
            }
            Ok(watcher::Event::Delete(_)) => send(Addresses::new()),
            Err(e) => {
                let failure = ApiFailure::of_watch(&client.server, &request, &e);
                tell_watch_failure(&mut failures, &failure, &what);
            }
        }
    }
}
