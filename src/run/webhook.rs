//! The admission webhook of `haptor run`: the HTTP edge of [`crate::pure::admission`]. The
//! API server posts an `AdmissionReview` to
//!
//! - `/validate/haproxytemplateconfigs`: a new or changed `HAProxyTemplateConfig`
//!   ([`admit_config`]);
//! - `/validate/resources`: an object of a kind the running config watches
//!   ([`admit_change`]; kinds without `enableValidationWebhook` are allowed untouched).
//!
//! Every replica keeps the running config's stores, so any replica answers. A decision runs
//! on the blocking pool behind a small semaphore, with `haproxy -c` limited to a deadline
//! below the webhook's own timeout, in a scratch directory that holds only the rendered
//! files and with none of the controller's environment. A request not decided within
//! `--webhook-timeout` (or that cannot be decided: the stores are still listing, `haproxy
//! -c` cannot run) is answered as `--webhook-failure-policy` says. Verdicts are remembered
//! by the digest of their inputs (the running config and stores, every store's generation,
//! the request), so a repeated admission skips the render and the checks. Each request is
//! counted in `haptor_webhook_requests_total{resource,result}` and timed in
//! `haptor_webhook_duration_seconds{resource}`.
//!
//! The server is the root's `webhook-server` actor (HTTPS only, `actors::http`); its
//! certificate is `drivers::webhook_certificate::ReloadingCertificate`.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::actors::context::Services;
use crate::drivers::haproxy_check::{CheckerSettings, VersionedChecker};
use crate::observability::metrics::Metrics;
use crate::pure::admission::{
    AdmissionCache, FailurePolicy, Operation, ProposedChange, RunningState, Undecided, Verdict,
    admission_key, admit_change_validated, admit_config, change_key_parts, undecided_verdict,
};
use crate::pure::config::HAProxyTemplateConfig;
use crate::pure::haproxy::HaproxyVersion;
use crate::pure::pipeline::{CompiledConfig, Validator};
use crate::pure::rendered::RenderedConfig;
use crate::pure::store::Stores;

/// The path of config admissions.
pub const CONFIG_PATH: &str = "/validate/haproxytemplateconfigs";
/// The path of watched-resource admissions.
pub const RESOURCES_PATH: &str = "/validate/resources";
/// The largest AdmissionReview read (an object and its old version, each up to the API
/// server's 3 MiB request limit, with room for the review around them).
const BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Decisions that may run at once (each renders and may run `haproxy -c`).
const CONCURRENT_DECISIONS: usize = 2;
/// Verdicts remembered.
const CACHE_ENTRIES: usize = 512;

/// How the webhook decides.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// A request not decided within this is answered by `failure_policy`.
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
    pub haproxy_bin: String,
    /// The HAProxy pods' version and the checkers per version (as `haptor run`'s own
    /// validator has them).
    pub haproxy_version: HaproxyVersion,
    pub haproxy_checkers: Vec<(HaproxyVersion, std::path::PathBuf)>,
}

impl WebhookSettings {
    /// How long one `haproxy -c` of the webhook may run: three quarters of the webhook's
    /// timeout, so its verdict arrives in time.
    pub fn check_deadline(&self) -> Duration {
        self.timeout.mul_f64(0.75).max(Duration::from_millis(100))
    }
}

/// The webhook's metric families.
#[derive(Debug, Clone)]
pub struct WebhookMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
    cache_hits: IntCounter,
    /// Certificate loads (`result`: success, failure), counted by the certificate watch.
    pub certificate_reloads: IntCounterVec,
}

impl WebhookMetrics {
    pub fn new() -> Result<WebhookMetrics, prometheus::Error> {
        Ok(WebhookMetrics {
            requests: IntCounterVec::new(
                Opts::new(
                    "haptor_webhook_requests_total",
                    "Admission requests by webhook (resource: haproxytemplateconfigs, resources) and result (allowed, denied, error: could not be decided, timeout: not decided in time)",
                ),
                &["resource", "result"],
            )?,
            duration: HistogramVec::new(
                HistogramOpts::new(
                    "haptor_webhook_duration_seconds",
                    "Time to answer one admission request",
                )
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
                &["resource"],
            )?,
            cache_hits: IntCounter::new(
                "haptor_webhook_cache_hits_total",
                "Admission requests answered from the admission cache",
            )?,
            certificate_reloads: IntCounterVec::new(
                Opts::new(
                    "haptor_webhook_certificate_reloads_total",
                    "Loads of the webhook's serving certificate by result (success, failure)",
                ),
                &["result"],
            )?,
        })
    }

    /// Registers every family on `metrics`.
    pub fn register(&self, metrics: &Metrics) -> Result<(), prometheus::Error> {
        metrics.register(Box::new(self.requests.clone()))?;
        metrics.register(Box::new(self.duration.clone()))?;
        metrics.register(Box::new(self.cache_hits.clone()))?;
        metrics.register(Box::new(self.certificate_reloads.clone()))?;
        // Every series alerts read exists from the start (a rate over a missing series is
        // no alert at all).
        for resource in ["haproxytemplateconfigs", "resources"] {
            for result in ["allowed", "denied", "error", "timeout"] {
                self.requests.with_label_values(&[resource, result]);
            }
        }
        for result in ["success", "failure"] {
            self.certificate_reloads.with_label_values(&[result]);
        }
        Ok(())
    }
}

/// Which webhook a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Config,
    Resources,
}

impl Webhook {
    fn label(self) -> &'static str {
        match self {
            Webhook::Config => "haproxytemplateconfigs",
            Webhook::Resources => "resources",
        }
    }
}

/// The admission service: what the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

struct Inner {
    services: Services,
    validator: Validator,
    cache: AdmissionCache,
    settings: WebhookSettings,
    metrics: WebhookMetrics,
    permits: Arc<Semaphore>,
    /// The last render this webhook allowed (see [`decide_request`]).
    baseline: Mutex<Option<Arc<RenderedConfig>>>,
    states: Mutex<StateIds>,
}

/// Numbers each distinct (running config, stores) pair, for the cache key.
#[derive(Default)]
struct StateIds {
    last: Option<(Weak<CompiledConfig>, Weak<Stores>, u64)>,
    next: u64,
}

impl StateIds {
    fn id(&mut self, compiled: &Arc<CompiledConfig>, stores: &Arc<Stores>) -> u64 {
        if let Some((c, s, id)) = &self.last
            && std::ptr::eq(c.as_ptr(), Arc::as_ptr(compiled))
            && std::ptr::eq(s.as_ptr(), Arc::as_ptr(stores))
        {
            return *id;
        }
        self.next += 1;
        self.last = Some((Arc::downgrade(compiled), Arc::downgrade(stores), self.next));
        self.next
    }
}

impl Admission {
    /// The service over a controller's services.
    pub fn new(services: &Services, settings: WebhookSettings, metrics: WebhookMetrics) -> Self {
        let checker = VersionedChecker::new(
            settings.haproxy_version,
            &settings.haproxy_checkers,
            std::path::Path::new(&settings.haproxy_bin),
            CheckerSettings {
                max_concurrent: CONCURRENT_DECISIONS,
                timeout: settings.check_deadline(),
                clean_env: true,
                ..CheckerSettings::default()
            },
        );
        Admission {
            inner: Arc::new(Inner {
                services: services.clone(),
                validator: Validator::new(Arc::new(checker), 64),
                cache: AdmissionCache::new(CACHE_ENTRIES),
                settings,
                metrics,
                permits: Arc::new(Semaphore::new(CONCURRENT_DECISIONS)),
                baseline: Mutex::default(),
                states: Mutex::default(),
            }),
        }
    }

    /// The webhook's routes.
    pub fn router(self) -> Router {
        Router::new()
            .route(CONFIG_PATH, post(review_config))
            .route(RESOURCES_PATH, post(review_resources))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(self)
    }

    /// Decides one request, on the blocking pool, within the webhook's timeout.
    pub async fn decide(
        &self,
        webhook: Webhook,
        request: AdmissionRequest<DynamicObject>,
    ) -> (Verdict, &'static str) {
        let inner = &self.inner;
        let policy = inner.settings.failure_policy;
        let timeout = inner.settings.timeout;
        let work = async {
            // The permit goes with the blocking work: a decision that outlives its timeout
            // still holds its slot, so an overloaded webhook never runs more than
            // CONCURRENT_DECISIONS renders at once.
            let permit = Arc::clone(&inner.permits)
                .acquire_owned()
                .await
                .map_err(|e| Undecided(e.to_string()))?;
            let admission = self.clone();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                admission.decide_blocking(webhook, &request)
            })
            .await
            .map_err(|e| Undecided(format!("the decision failed: {e}")))?
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok((verdict, _))) => {
                let result = if verdict.allowed { "allowed" } else { "denied" };
                (verdict, result)
            }
            Ok(Err(undecided)) => (undecided_verdict(policy, &undecided), "error"),
            Err(_) => (
                undecided_verdict(
                    policy,
                    &Undecided(format!("no decision within {}", humanize(timeout))),
                ),
                "timeout",
            ),
        }
    }

    fn decide_blocking(
        &self,
        webhook: Webhook,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(Verdict, bool), Undecided> {
        let inner = &self.inner;
        let iteration = inner.services.iteration();
        let running = iteration.as_ref().map(|iteration| {
            iteration.with_latest(|l| {
                (
                    Arc::clone(&l.compiled),
                    Arc::clone(&l.stores),
                    l.all_synced,
                    l.last_render.as_ref().map(|r| Arc::clone(&r.rendered)),
                )
            })
        });
        let state_id = running.as_ref().map_or(0, |(compiled, stores, _, _)| {
            inner
                .states
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .id(compiled, stores)
        });
        let running_state = running
            .as_ref()
            .map(|(compiled, stores, synced, baseline)| RunningState {
                compiled,
                stores,
                synced: *synced,
                baseline: baseline.as_deref(),
            });
        let decided = decide_request(
            webhook,
            request,
            running_state.map(|r| (state_id, r)),
            &inner.validator,
            &inner.cache,
            &inner.baseline,
        )?;
        if decided.1 {
            inner.metrics.cache_hits.inc();
        }
        Ok(decided)
    }

    /// Answers one posted review.
    async fn review(&self, webhook: Webhook, body: Bytes) -> Response {
        let started = Instant::now();
        let request = match parse_review(&body) {
            Ok(request) => request,
            Err(problem) => return (StatusCode::BAD_REQUEST, problem).into_response(),
        };
        let (verdict, result) = self.decide(webhook, request.clone()).await;
        let metrics = &self.inner.metrics;
        metrics
            .requests
            .with_label_values(&[webhook.label(), result])
            .inc();
        metrics
            .duration
            .with_label_values(&[webhook.label()])
            .observe(started.elapsed().as_secs_f64());
        let object = format!(
            "{} {}{}",
            request.kind.kind,
            request
                .namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default(),
            request.name
        );
        if verdict.allowed {
            tracing::debug!(object = %object, operation = ?request.operation, result, elapsed_ms = started.elapsed().as_millis() as u64, "admission allowed");
        } else {
            tracing::info!(object = %object, operation = ?request.operation, result, reason = verdict.reason.as_deref().unwrap_or_default(), "admission denied");
        }
        axum::Json(review_response(&request, verdict)).into_response()
    }
}

/// The request of a posted `AdmissionReview`, or why it is not one.
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, String> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| format!("not an AdmissionReview: {e}"))?;
    review
        .try_into()
        .map_err(|e| format!("not an AdmissionReview request: {e}"))
}

/// The `AdmissionReview` that answers `request` with `verdict`.
pub fn review_response(
    request: &AdmissionRequest<DynamicObject>,
    verdict: Verdict,
) -> AdmissionReview<DynamicObject> {
    let mut response = AdmissionResponse::from(request);
    if !verdict.allowed {
        response = response.deny(verdict.reason.unwrap_or_default());
    }
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    response.into_review()
}

/// Decides one request against the running state (`(state id, state)`: the id names this
/// running config and set of stores for the cache key; none before the first valid
/// config), answering from `cache` when it can. The verdict, and whether it came from the
/// cache. Synchronous: renders and may run `haproxy -c`.
pub fn decide_request(
    webhook: Webhook,
    request: &AdmissionRequest<DynamicObject>,
    running: Option<(u64, RunningState<'_>)>,
    validator: &Validator,
    cache: &AdmissionCache,
    baseline: &Mutex<Option<Arc<RenderedConfig>>>,
) -> Result<(Verdict, bool), Undecided> {
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let object = request
        .object
        .as_ref()
        .map(|o| to_value(o, namespace))
        .transpose()?;
    let old_object = request
        .old_object
        .as_ref()
        .map(|o| to_value(o, namespace))
        .transpose()?;
    let state_id = running.map_or(0, |(id, _)| id);
    let running = running.map(|(_, state)| state);
    let empty = Stores::new();
    match webhook {
        Webhook::Config => {
            if request.operation == kube::core::admission::Operation::Delete {
                return Ok((Verdict::allow(), false));
            }
            let Some(object) = object.as_ref() else {
                return Ok((Verdict::deny("the request carries no object"), false));
            };
            let key = admission_key(
                state_id,
                running.map_or(&empty, |r| r.stores),
                &[("config", object.get("spec"))],
            );
            if let Some(verdict) = cache.get(&key) {
                return Ok((verdict, true));
            }
            let config: HAProxyTemplateConfig = match serde_json::from_value(object.clone()) {
                Ok(config) => config,
                Err(e) => {
                    return Ok((
                        Verdict::deny(format!("not an HAProxyTemplateConfig haptor can read: {e}")),
                        false,
                    ));
                }
            };
            let verdict = admit_config(&config, running, validator)?;
            cache.insert(key, verdict.clone());
            Ok((verdict, false))
        }
        Webhook::Resources => {
            let Some(running) = running else {
                return Err(Undecided("haptor has no valid config yet".into()));
            };
            let api_version = if request.kind.group.is_empty() {
                request.kind.version.clone()
            } else {
                format!("{}/{}", request.kind.group, request.kind.version)
            };
            let change = ProposedChange {
                operation: operation(&request.operation),
                api_version: &api_version,
                kind: &request.kind.kind,
                namespace,
                name: &request.name,
                object: object.as_ref(),
                old_object: old_object.as_ref(),
            };
            let key = admission_key(state_id, running.stores, &change_key_parts(&change));
            if let Some(verdict) = cache.get(&key) {
                return Ok((verdict, true));
            }
            // Without the leader's last render (a follower), the webhook's own last allowed
            // render is the baseline: one differing from it only in runtime-changeable values
            // needs no haproxy -c.
            let own = baseline.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let running = RunningState {
                baseline: running.baseline.or(own.as_deref()),
                ..running
            };
            let (verdict, allowed) = admit_change_validated(running, &change, validator)?;
            if let Some(rendered) = allowed {
                *baseline.lock().unwrap_or_else(|p| p.into_inner()) = Some(rendered);
            }
            cache.insert(key, verdict.clone());
            Ok((verdict, false))
        }
    }
}

async fn review_config(State(admission): State<Admission>, body: Bytes) -> Response {
    admission.review(Webhook::Config, body).await
}

async fn review_resources(State(admission): State<Admission>, body: Bytes) -> Response {
    admission.review(Webhook::Resources, body).await
}

/// The object as JSON, in the request's namespace when it names none (the stores index
/// objects by their namespace).
fn to_value(object: &DynamicObject, namespace: &str) -> Result<Value, Undecided> {
    let mut value = serde_json::to_value(object)
        .map_err(|e| Undecided(format!("the object does not serialise: {e}")))?;
    if !namespace.is_empty()
        && let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut)
        && metadata
            .get("namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        metadata.insert("namespace".into(), Value::String(namespace.into()));
    }
    Ok(value)
}

fn operation(operation: &kube::core::admission::Operation) -> Operation {
    use kube::core::admission::Operation as Kube;
    match operation {
        Kube::Create => Operation::Create,
        Kube::Update => Operation::Update,
        Kube::Delete => Operation::Delete,
        Kube::Connect => Operation::Connect,
    }
}

/// `8s`, `1.5s`.
fn humanize(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}
