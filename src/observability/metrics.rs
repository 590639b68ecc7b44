//! The Prometheus registry haptor serves on `/metrics`. [`Metrics`] owns an explicit
//! registry (never the process-global default one, so two trees in one process, e.g. in
//! tests, do not collide) holding every `haptor_*` family; `/metrics` serves
//! [`Metrics::encode_text`]. [`Metrics::observe`] turns one observability event into
//! counter, gauge and histogram updates; it is a plain method, driven directly by tests,
//! and the Metrics actor (`crate::actors::metrics`) only pumps events into it. Failures are
//! labelled by cause: `haptor_deployment_errors_total{error, instance}` with
//! [`DeployError::metric_label`](crate::pure::deploy::DeployError::metric_label), and
//! `haptor_validation_errors_total{phase}` with
//! [`ValidationPhase::metric_label`](crate::pure::validate::ValidationPhase::metric_label);
//! a `haproxy -c` that could not run refused nothing and counts in
//! `haptor_checker_unavailable_total` instead.
//!
//! Two kinds of value are not events but counters kept elsewhere, read at scrape time through
//! sources the owner installs: events the fan-out dropped ([`Metrics::watch_event_fanout`])
//! and validation-cache hits and misses ([`Metrics::set_validation_cache_source`]; the cache
//! is rebuilt with each config, so its source can be replaced at any time).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::messages::events::{EventFanout, EventKind, ObservedEvent};
use crate::pure::deploy::ReloadReason;

/// The content type of the Prometheus text exposition format served by `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Reads a counter kept elsewhere.
pub type CounterSource = Arc<dyn Fn() -> u64 + Send + Sync>;
/// Reads a validation cache's `(hits, misses)`.
pub type CacheStatsSource = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

/// Problems building or encoding the metrics.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot create or register the metric family {family}: {source}")]
    Register {
        family: String,
        #[source]
        source: prometheus::Error,
    },
    #[error("cannot encode the metrics in the Prometheus text format: {0}")]
    Encode(#[source] prometheus::Error),
}

/// Seconds buckets for deployments, which may include a verified HAProxy reload.
const DEPLOYMENT_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

type Slot<T> = Arc<RwLock<Option<T>>>;

fn read_slot<T: Clone>(slot: &Slot<T>) -> Option<T> {
    // A poisoned lock only means a writer panicked while swapping an Arc in; the value is
    // still a valid source.
    slot.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A counter whose value is read from elsewhere each time the registry is gathered.
struct ScrapedCounter {
    desc: Desc,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl ScrapedCounter {
    fn new(
        name: &str,
        help: &str,
        read: Box<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<ScrapedCounter, MetricsError> {
        let desc = Desc::new(
            name.to_string(),
            help.to_string(),
            Vec::new(),
            HashMap::new(),
        )
        .map_err(|source| MetricsError::Register {
            family: name.to_string(),
            source,
        })?;
        Ok(ScrapedCounter { desc, read })
    }
}

impl Collector for ScrapedCounter {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut counter = proto::Counter::default();
        counter.set_value((self.read)() as f64);
        let mut metric = proto::Metric::default();
        metric.set_counter(counter);
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::COUNTER);
        family.set_metric(vec![metric]);
        vec![family]
    }
}

/// A Prometheus registry that also remembers the name of every family registered on it
/// (gathering leaves out a labelled family that has no series yet).
#[derive(Default)]
pub struct NamedRegistry {
    registry: Registry,
    names: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl NamedRegistry {
    /// Registers a collector and remembers its families' names.
    pub fn register(&self, collector: Box<dyn Collector>) -> prometheus::Result<()> {
        let names: Vec<String> = collector.desc().iter().map(|d| d.fq_name.clone()).collect();
        self.registry.register(collector)?;
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(names);
        Ok(())
    }

    /// The name of every family registered, sorted.
    pub fn names(&self) -> Vec<String> {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// Every haptor metric family, in one explicit registry.
pub struct Metrics {
    registry: NamedRegistry,
    reconciliations: IntCounter,
    reconciliation_errors: IntCounter,
    reconciliation_duration: Histogram,
    validations: IntCounter,
    validation_errors: IntCounterVec,
    checker_unavailable: IntCounter,
    validation_duration: Histogram,
    deployments: IntCounterVec,
    reloads: IntCounterVec,
    deployment_errors: IntCounterVec,
    deployment_duration: Histogram,
    change_to_deploy: HistogramVec,
    validations_skipped: IntCounter,
    resources: IntGaugeVec,
    /// The resource labels `haptor_resources` has now, so those no longer watched can be
    /// removed when an iteration starts.
    resource_labels: std::sync::Mutex<std::collections::BTreeSet<String>>,
    leader_is_leader: IntGauge,
    leader_transitions: IntCounter,
    actor_restarts: IntCounterVec,
    events_dropped: Slot<CounterSource>,
    validation_cache: Slot<CacheStatsSource>,
    http_fetches: IntCounterVec,
    http_bytes: IntGaugeVec,
    /// When each HTTP resource's content in use was last confirmed by its server (a 200
    /// or a 304): `haptor_http_resource_content_age_seconds` is read from here at scrape.
    http_confirmed: Arc<RwLock<HashMap<String, std::time::Instant>>>,
}

/// `haptor_http_resource_content_age_seconds`: per HTTP resource, the seconds since its
/// server last confirmed the content in use, computed when scraped.
struct ContentAge {
    desc: Desc,
    confirmed: Arc<RwLock<HashMap<String, std::time::Instant>>>,
}

impl Collector for ContentAge {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let confirmed = self.confirmed.read().unwrap_or_else(|p| p.into_inner());
        let mut sorted: Vec<(&String, &std::time::Instant)> = confirmed.iter().collect();
        sorted.sort();
        let metrics = sorted
            .into_iter()
            .map(|(resource, at)| {
                let mut label = proto::LabelPair::default();
                label.set_name("resource".into());
                label.set_value(resource.clone());
                let mut gauge = proto::Gauge::default();
                gauge.set_value(at.elapsed().as_secs_f64());
                let mut metric = proto::Metric::default();
                metric.set_label(vec![label]);
                metric.set_gauge(gauge);
                metric
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::GAUGE);
        family.set_metric(metrics);
        vec![family]
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn register<C: Collector + Clone + 'static>(
    registry: &NamedRegistry,
    family: &str,
    collector: C,
) -> Result<C, MetricsError> {
    registry
        .register(Box::new(collector.clone()))
        .map_err(|source| MetricsError::Register {
            family: family.to_string(),
            source,
        })?;
    Ok(collector)
}

fn made<T>(family: &str, made: prometheus::Result<T>) -> Result<T, MetricsError> {
    made.map_err(|source| MetricsError::Register {
        family: family.to_string(),
        source,
    })
}

fn counter(registry: &NamedRegistry, name: &str, help: &str) -> Result<IntCounter, MetricsError> {
    register(registry, name, made(name, IntCounter::new(name, help))?)
}

fn counter_vec(
    registry: &NamedRegistry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, MetricsError> {
    register(
        registry,
        name,
        made(name, IntCounterVec::new(Opts::new(name, help), labels))?,
    )
}

fn histogram(
    registry: &NamedRegistry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> Result<Histogram, MetricsError> {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    register(registry, name, made(name, Histogram::with_opts(opts))?)
}

impl Metrics {
    /// A registry with every family registered; the scraped counters read 0 until their
    /// sources are installed.
    pub fn new() -> Result<Metrics, MetricsError> {
        let registry = NamedRegistry::default();
        let r = &registry;
        let defaults = prometheus::DEFAULT_BUCKETS;

        let reconciliations = counter(
            r,
            "haptor_reconciliations_total",
            "Reconciliations that rendered a configuration or failed to",
        )?;
        let reconciliation_errors = counter(
            r,
            "haptor_reconciliation_errors_total",
            "Reconciliations whose render failed",
        )?;
        let reconciliation_duration = histogram(
            r,
            "haptor_reconciliation_duration_seconds",
            "Time to render the configuration of one reconciliation",
            defaults,
        )?;
        let validations = counter(
            r,
            "haptor_validations_total",
            "Validations of a rendered configuration",
        )?;
        let validation_errors = counter_vec(
            r,
            "haptor_validation_errors_total",
            "Validations that refused a rendered configuration, by the phase that refused it",
            &["phase"],
        )?;
        let checker_unavailable = counter(
            r,
            "haptor_checker_unavailable_total",
            "Renders left unvalidated because haproxy -c could not run (missing binary, timeout, \
             I/O); the last good configuration keeps serving",
        )?;
        let validation_duration = histogram(
            r,
            "haptor_validation_duration_seconds",
            "Time to validate one rendered configuration",
            defaults,
        )?;
        let deployments = counter_vec(
            r,
            "haptor_deployments_total",
            "Deployments to an HAProxy instance",
            &["instance"],
        )?;
        let reloads = counter_vec(
            r,
            "haptor_reloads_total",
            "HAProxy reloads by deployments, by instance and reason (structural: a change the \
             runtime API cannot make; runtime_refused, runtime_unreachable: runtime changes the \
             runtime API refused or could not take; state_unknown: what the instance ran was \
             not known); a change applied through the runtime API counts nowhere here",
            &["instance", "reason"],
        )?;
        let deployment_errors = counter_vec(
            r,
            "haptor_deployment_errors_total",
            "Deployments to an HAProxy instance that failed, by cause (unreachable, rejected, \
             timed_out, stale)",
            &["instance", "error"],
        )?;
        let deployment_duration = histogram(
            r,
            "haptor_deployment_duration_seconds",
            "Time one HAProxy instance took to take a configuration (the deployment itself)",
            DEPLOYMENT_BUCKETS,
        )?;
        let change_to_deploy = register(
            r,
            "haptor_change_to_deploy_seconds",
            made(
                "haptor_change_to_deploy_seconds",
                HistogramVec::new(
                    HistogramOpts::new(
                        "haptor_change_to_deploy_seconds",
                        "Time from a watcher first seeing a change (before its debounce) to an \
                         instance acknowledging the configuration that includes it",
                    )
                    .buckets(DEPLOYMENT_BUCKETS.to_vec()),
                    &["instance"],
                ),
            )?,
        )?;
        let validations_skipped = counter(
            r,
            "haptor_validations_skipped_total",
            "Renders accepted without haproxy -c: they differ from the last accepted render \
             only in values the runtime API changes",
        )?;
        let resources = register(
            r,
            "haptor_resources",
            made(
                "haptor_resources",
                IntGaugeVec::new(
                    Opts::new(
                        "haptor_resources",
                        "Objects in each watched resource's index",
                    ),
                    &["resource"],
                ),
            )?,
        )?;
        let leader_is_leader = register(
            r,
            "haptor_leader_is_leader",
            made(
                "haptor_leader_is_leader",
                IntGauge::new(
                    "haptor_leader_is_leader",
                    "1 while this replica is the leader, else 0",
                ),
            )?,
        )?;
        let leader_transitions = counter(
            r,
            "haptor_leader_transitions_total",
            "Times this replica gained or lost leadership",
        )?;
        let actor_restarts = counter_vec(
            r,
            "haptor_actor_restarts_total",
            "Restarts of an actor by its supervisor",
            &["actor"],
        )?;

        let build_info = register(
            r,
            "haptor_build_info",
            made(
                "haptor_build_info",
                IntGaugeVec::new(
                    Opts::new(
                        "haptor_build_info",
                        "Always 1; labelled with the haptor version",
                    ),
                    &["version"],
                ),
            )?,
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);

        let http_fetches = counter_vec(
            r,
            "haptor_http_resource_fetches_total",
            "Fetches of each HTTP resource by result: changed, unchanged, not_modified, error, \
             or rejected (new content that failed its trial render)",
            &["resource", "result"],
        )?;
        let http_bytes = register(
            r,
            "haptor_http_resource_bytes",
            made(
                "haptor_http_resource_bytes",
                IntGaugeVec::new(
                    Opts::new(
                        "haptor_http_resource_bytes",
                        "Size of each HTTP resource's content in use",
                    ),
                    &["resource"],
                ),
            )?,
        )?;
        let http_confirmed: Arc<RwLock<HashMap<String, std::time::Instant>>> = Arc::default();
        let age_name = "haptor_http_resource_content_age_seconds";
        let age = ContentAge {
            desc: Desc::new(
                age_name.to_string(),
                "Seconds since each HTTP resource's server last confirmed the content in use \
                 (a 200 or a 304)"
                    .to_string(),
                vec!["resource".to_string()],
                HashMap::new(),
            )
            .map_err(|source| MetricsError::Register {
                family: age_name.to_string(),
                source,
            })?,
            confirmed: Arc::clone(&http_confirmed),
        };
        registry
            .register(Box::new(age))
            .map_err(|source| MetricsError::Register {
                family: age_name.to_string(),
                source,
            })?;

        let events_dropped: Slot<CounterSource> = Arc::default();
        let validation_cache: Slot<CacheStatsSource> = Arc::default();
        let scraped = [
            (
                "haptor_observability_events_dropped_total",
                "Observability events dropped because a consumer's queue was full",
                Box::new({
                    let slot = Arc::clone(&events_dropped);
                    move || read_slot(&slot).map_or(0, |read| read())
                }) as Box<dyn Fn() -> u64 + Send + Sync>,
            ),
            (
                "haptor_validation_cache_hits_total",
                "Validations answered from the validation cache",
                Box::new({
                    let slot = Arc::clone(&validation_cache);
                    move || read_slot(&slot).map_or(0, |read| read().0)
                }),
            ),
            (
                "haptor_validation_cache_misses_total",
                "Validations the validation cache could not answer",
                Box::new({
                    let slot = Arc::clone(&validation_cache);
                    move || read_slot(&slot).map_or(0, |read| read().1)
                }),
            ),
        ];
        for (name, help, read) in scraped {
            let collector = ScrapedCounter::new(name, help, read)?;
            registry
                .register(Box::new(collector))
                .map_err(|source| MetricsError::Register {
                    family: name.to_string(),
                    source,
                })?;
        }

        Ok(Metrics {
            registry,
            reconciliations,
            reconciliation_errors,
            reconciliation_duration,
            validations,
            validation_errors,
            checker_unavailable,
            validation_duration,
            deployments,
            reloads,
            deployment_errors,
            deployment_duration,
            change_to_deploy,
            validations_skipped,
            resources,
            resource_labels: std::sync::Mutex::default(),
            leader_is_leader,
            leader_transitions,
            actor_restarts,
            events_dropped,
            validation_cache,
            http_fetches,
            http_bytes,
            http_confirmed,
        })
    }

    /// The registry (to gather or encode it; add families with [`Self::register`]).
    pub fn registry(&self) -> &Registry {
        &self.registry.registry
    }

    /// Adds a family that lives elsewhere (a driver's counters).
    pub fn register(&self, collector: Box<dyn Collector>) -> prometheus::Result<()> {
        self.registry.register(collector)
    }

    /// The name of every family this registry serves, sorted (histograms by their base
    /// name), whether or not it has a series yet.
    pub fn family_names(&self) -> Vec<String> {
        self.registry.names()
    }

    /// Reads `haptor_observability_events_dropped_total` from `source` at each scrape.
    pub fn set_events_dropped_source(&self, source: CounterSource) {
        *self
            .events_dropped
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// Reads the dropped-events counter from a fan-out (a clone is kept; clones share the
    /// count).
    pub fn watch_event_fanout(&self, fanout: &EventFanout) {
        let fanout = fanout.clone();
        self.set_events_dropped_source(Arc::new(move || fanout.dropped_total()));
    }

    /// Reads the validation-cache hit and miss counters from `source` at each scrape,
    /// replacing any earlier source.
    pub fn set_validation_cache_source(&self, source: CacheStatsSource) {
        *self
            .validation_cache
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    /// Updates the families one event concerns.
    pub fn observe(&self, event: &ObservedEvent) {
        match &event.kind {
            EventKind::RenderSucceeded { duration, .. } => {
                self.reconciliations.inc();
                self.reconciliation_duration.observe(duration.as_secs_f64());
            }
            EventKind::RenderFailed { .. } => {
                self.reconciliations.inc();
                self.reconciliation_errors.inc();
            }
            EventKind::ValidationSucceeded {
                semantic_skipped: true,
                ..
            } => self.validations_skipped.inc(),
            EventKind::ValidationSucceeded { duration, .. } => {
                self.validations.inc();
                self.validation_duration.observe(duration.as_secs_f64());
            }
            EventKind::ValidationFailed { phase, .. } => {
                self.validations.inc();
                self.validation_errors
                    .with_label_values(&[phase.metric_label()])
                    .inc();
            }
            EventKind::CheckerUnavailable { .. } => self.checker_unavailable.inc(),
            EventKind::DeploymentSucceeded {
                instance,
                duration,
                since_change,
                reloaded,
                reload_reason,
            } => {
                self.deployments
                    .with_label_values(&[instance.as_str()])
                    .inc();
                if *reloaded {
                    let reason = reload_reason.map_or("unknown", ReloadReason::metric_label);
                    self.reloads
                        .with_label_values(&[instance.as_str(), reason])
                        .inc();
                }
                self.deployment_duration.observe(duration.as_secs_f64());
                if let Some(since_change) = since_change {
                    self.change_to_deploy
                        .with_label_values(&[instance.as_str()])
                        .observe(since_change.as_secs_f64());
                }
            }
            EventKind::DeploymentFailed { instance, error } => {
                self.deployments
                    .with_label_values(&[instance.as_str()])
                    .inc();
                self.deployment_errors
                    .with_label_values(&[instance.as_str(), error.metric_label()])
                    .inc();
            }
            EventKind::IndexSynced { resource, objects }
            | EventKind::ResourceChanged {
                resource, objects, ..
            } => self.set_resource_count(resource, *objects),
            EventKind::IterationStarted { resources } => {
                let mut labels = self
                    .resource_labels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                for gone in labels.iter().filter(|l| !resources.contains(l)) {
                    let _ = self.resources.remove_label_values(&[gone.as_str()]);
                }
                labels.retain(|l| resources.contains(l));
                // A new iteration fetches its own HTTP resources again: one the config no
                // longer declares leaves its size and age behind.
                let mut confirmed = self
                    .http_confirmed
                    .write()
                    .unwrap_or_else(|p| p.into_inner());
                for gone in confirmed.keys() {
                    let _ = self.http_bytes.remove_label_values(&[gone.as_str()]);
                }
                confirmed.clear();
            }
            EventKind::LeadershipGained { .. } => {
                self.leader_is_leader.set(1);
                self.leader_transitions.inc();
            }
            EventKind::LeadershipLost => {
                self.leader_is_leader.set(0);
                self.leader_transitions.inc();
            }
            EventKind::ActorRestarted { actor, .. } => {
                self.actor_restarts
                    .with_label_values(&[actor.as_str()])
                    .inc();
            }
            EventKind::HttpResourceFetched {
                resource,
                result,
                in_use_bytes,
                ..
            } => {
                self.http_fetches
                    .with_label_values(&[resource.as_str(), result.metric_label()])
                    .inc();
                if let Some(bytes) = in_use_bytes {
                    self.http_bytes
                        .with_label_values(&[resource.as_str()])
                        .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
                    self.http_confirmed
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(resource.clone(), std::time::Instant::now());
                }
            }
            EventKind::ConfigAccepted { .. }
            | EventKind::ConfigRejected { .. }
            | EventKind::AllIndexesSynced
            | EventKind::ReconciliationTriggered { .. }
            | EventKind::DeploymentFenced { .. }
            | EventKind::InstancesDiscovered { .. } => {}
        }
    }

    fn set_resource_count(&self, resource: &str, objects: usize) {
        let objects = i64::try_from(objects).unwrap_or(i64::MAX);
        self.resources.with_label_values(&[resource]).set(objects);
        self.resource_labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(resource.to_string());
    }

    /// Every family in the Prometheus text exposition format (version 0.0.4). Labelled
    /// families appear once they have a first label value.
    pub fn encode_text(&self) -> Result<String, MetricsError> {
        let mut out = String::new();
        TextEncoder::new()
            .encode_utf8(&self.registry.registry.gather(), &mut out)
            .map_err(MetricsError::Encode)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
