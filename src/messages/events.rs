//! Observability events: what happened in the controller, stamped with the correlation id of
//! the reconciliation it belongs to. Actors publish them through an [`EventFanout`]; the
//! Commentator and the Metrics actor consume them. Delivery is lossy by design — a slow
//! consumer must never slow a reconciliation — and every drop is counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::pure::deploy::{DeployError, ReloadReason};
use crate::pure::rendered::Checksum;
use crate::pure::validate::ValidationPhase;

/// Ties together the events of one reconciliation (trigger → render → validate → deploy).
pub type CorrelationId = u64;

static NEXT_CORRELATION: AtomicU64 = AtomicU64::new(1);

/// A new, process-unique correlation id.
pub fn new_correlation_id() -> CorrelationId {
    NEXT_CORRELATION.fetch_add(1, Ordering::Relaxed)
}

/// One thing that happened.
#[derive(Debug, Clone, Serialize)]
pub struct ObservedEvent {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation: Option<CorrelationId>,
    #[serde(serialize_with = "serialize_time")]
    pub at: SystemTime,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl ObservedEvent {
    pub fn new(correlation: Option<CorrelationId>, kind: EventKind) -> ObservedEvent {
        ObservedEvent {
            correlation,
            at: SystemTime::now(),
            kind,
        }
    }
}

fn serialize_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let millis = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    s.serialize_u128(millis)
}

fn serialize_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// An error as its message, so `/debug/events` shows what logs show.
fn serialize_display<T: std::fmt::Display, S: serde::Serializer>(
    value: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

fn serialize_optional_duration_ms<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => serialize_duration_ms(d, s),
        None => s.serialize_none(),
    }
}

/// The kinds of event, with what a log line or a metric needs.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// A config was read and passed every validator.
    ConfigAccepted {
        generation: Option<i64>,
    },
    /// A config was refused; the previous one keeps running.
    ConfigRejected {
        errors: Vec<String>,
    },
    /// A config iteration started watching these resources (the first config, or a change
    /// of what is watched); whatever was known of other resources is gone.
    IterationStarted {
        resources: Vec<String>,
    },
    /// A watched object was added, changed or removed; `objects` is the store's size after.
    ResourceChanged {
        resource: String,
        object: String,
        deleted: bool,
        objects: usize,
    },
    /// A watcher's initial list is complete.
    IndexSynced {
        resource: String,
        objects: usize,
    },
    /// Every watcher has synchronised; reconciliation may start.
    AllIndexesSynced,
    /// A reconciliation was requested (`reason` names the trigger).
    ReconciliationTriggered {
        reason: String,
    },
    RenderSucceeded {
        #[serde(serialize_with = "serialize_duration_ms")]
        duration: Duration,
        checksum: Checksum,
    },
    RenderFailed {
        error: String,
    },
    ValidationSucceeded {
        #[serde(serialize_with = "serialize_duration_ms")]
        duration: Duration,
        cache_hit: bool,
        /// `haproxy -c` did not run: the render differs from the last accepted one only in
        /// values the runtime API changes.
        semantic_skipped: bool,
    },
    /// A validation phase refused the render.
    ValidationFailed {
        phase: ValidationPhase,
        error: String,
    },
    /// `haproxy -c` could not run (missing binary, timeout, I/O): the render was neither
    /// accepted nor refused, and says nothing about the configuration.
    CheckerUnavailable {
        error: String,
    },
    DeploymentSucceeded {
        instance: String,
        /// How long the deployment itself took (the target's work).
        #[serde(serialize_with = "serialize_duration_ms")]
        duration: Duration,
        reloaded: bool,
        /// Why it reloaded, when it did.
        #[serde(skip_serializing_if = "Option::is_none")]
        reload_reason: Option<ReloadReason>,
        /// From the moment the change was first seen (see `ValidatedRender::changed_at`) to
        /// this acknowledgement; `None` for deployments no change asked for.
        #[serde(
            serialize_with = "serialize_optional_duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        since_change: Option<Duration>,
    },
    DeploymentFailed {
        instance: String,
        /// Serialized as its message; metrics label it with [`DeployError::metric_label`].
        #[serde(serialize_with = "serialize_display")]
        error: DeployError,
    },
    /// A deployment was refused because a newer leader's epoch was seen.
    DeploymentFenced {
        instance: String,
        epoch: u64,
    },
    InstancesDiscovered {
        instances: Vec<String>,
    },
    LeadershipGained {
        epoch: u64,
    },
    LeadershipLost,
    /// An HTTP resource was fetched (or its fetch failed, or its new content was refused
    /// by the trial render); `in_use_bytes` is the size of the content in use when this
    /// fetch confirmed or replaced it.
    HttpResourceFetched {
        resource: String,
        url: String,
        result: HttpFetchResult,
        #[serde(skip_serializing_if = "Option::is_none")]
        in_use_bytes: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    ActorRestarted {
        actor: String,
        restarts: u32,
    },
}

/// What one fetch of an HTTP resource came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpFetchResult {
    /// New content, in use now.
    Changed,
    /// The same content as the one in use (a 200 with an equal body).
    Unchanged,
    /// 304: the content in use is current.
    NotModified,
    /// The fetch failed; the content in use (if any) keeps serving.
    Error,
    /// New content failed its trial render; the content in use keeps serving.
    Rejected,
}

impl HttpFetchResult {
    /// The `result` label of `haptor_http_resource_fetches_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            HttpFetchResult::Changed => "changed",
            HttpFetchResult::Unchanged => "unchanged",
            HttpFetchResult::NotModified => "not_modified",
            HttpFetchResult::Error => "error",
            HttpFetchResult::Rejected => "rejected",
        }
    }
}

impl EventKind {
    /// The snake_case name of the kind (for logs and metric labels).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::ConfigAccepted { .. } => "config_accepted",
            EventKind::ConfigRejected { .. } => "config_rejected",
            EventKind::IterationStarted { .. } => "iteration_started",
            EventKind::ResourceChanged { .. } => "resource_changed",
            EventKind::IndexSynced { .. } => "index_synced",
            EventKind::AllIndexesSynced => "all_indexes_synced",
            EventKind::ReconciliationTriggered { .. } => "reconciliation_triggered",
            EventKind::RenderSucceeded { .. } => "render_succeeded",
            EventKind::RenderFailed { .. } => "render_failed",
            EventKind::ValidationSucceeded { .. } => "validation_succeeded",
            EventKind::ValidationFailed { .. } => "validation_failed",
            EventKind::CheckerUnavailable { .. } => "checker_unavailable",
            EventKind::DeploymentSucceeded { .. } => "deployment_succeeded",
            EventKind::DeploymentFailed { .. } => "deployment_failed",
            EventKind::DeploymentFenced { .. } => "deployment_fenced",
            EventKind::InstancesDiscovered { .. } => "instances_discovered",
            EventKind::LeadershipGained { .. } => "leadership_gained",
            EventKind::LeadershipLost => "leadership_lost",
            EventKind::ActorRestarted { .. } => "actor_restarted",
            EventKind::HttpResourceFetched { .. } => "http_resource_fetched",
        }
    }
}

/// A lossy fan-out of events to a fixed set of subscribers, each behind a bounded queue.
/// Publishing never waits: a full queue drops the event for that subscriber and counts it.
#[derive(Debug, Clone, Default)]
pub struct EventFanout {
    subscribers: Arc<Vec<Subscriber>>,
    dropped: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Subscriber {
    name: &'static str,
    queue: mpsc::Sender<ObservedEvent>,
    dropped: AtomicU64,
}

impl EventFanout {
    /// A fan-out with one bounded queue (of `capacity` events) per named subscriber. Returns
    /// the receivers in the same order as the names.
    pub fn new(
        names: &[&'static str],
        capacity: usize,
    ) -> (EventFanout, Vec<mpsc::Receiver<ObservedEvent>>) {
        let mut subscribers = Vec::new();
        let mut receivers = Vec::new();
        for name in names {
            let (tx, rx) = mpsc::channel(capacity.max(1));
            subscribers.push(Subscriber {
                name,
                queue: tx,
                dropped: AtomicU64::new(0),
            });
            receivers.push(rx);
        }
        (
            EventFanout {
                subscribers: Arc::new(subscribers),
                dropped: Arc::new(AtomicU64::new(0)),
            },
            receivers,
        )
    }

    /// A fan-out with no subscribers: events go nowhere (tests, offline commands).
    pub fn disconnected() -> EventFanout {
        EventFanout::default()
    }

    /// Publishes an event to every subscriber that has room.
    pub fn publish(&self, correlation: Option<CorrelationId>, kind: EventKind) {
        let event = ObservedEvent::new(correlation, kind);
        for subscriber in self.subscribers.iter() {
            if subscriber.queue.try_send(event.clone()).is_err() {
                subscriber.dropped.fetch_add(1, Ordering::Relaxed);
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Events dropped so far, over all subscribers.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events dropped so far, per subscriber name.
    pub fn dropped_by_subscriber(&self) -> Vec<(&'static str, u64)> {
        self.subscribers
            .iter()
            .map(|s| (s.name, s.dropped.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Events at fixed instants, for the tests of everything that reads events.
#[cfg(test)]
pub(crate) mod test_events {
    use std::time::{Duration, SystemTime};

    use super::{EventKind, ObservedEvent};

    /// An event `millis` after the Unix epoch.
    pub(crate) fn at(correlation: Option<u64>, millis: u64, kind: EventKind) -> ObservedEvent {
        ObservedEvent {
            correlation,
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(millis),
            kind,
        }
    }

    /// A change of one object of `resource`.
    pub(crate) fn changed(
        correlation: u64,
        millis: u64,
        resource: &str,
        object: &str,
    ) -> ObservedEvent {
        at(
            Some(correlation),
            millis,
            EventKind::ResourceChanged {
                resource: resource.into(),
                object: object.into(),
                deleted: false,
                objects: 1,
            },
        )
    }

    /// A runtime-API deployment to `instance` that took 40 ms.
    pub(crate) fn deployed(correlation: u64, millis: u64, instance: &str) -> ObservedEvent {
        at(
            Some(correlation),
            millis,
            EventKind::DeploymentSucceeded {
                instance: instance.into(),
                duration: Duration::from_millis(40),
                reloaded: false,
                reload_reason: None,
                since_change: None,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_subscriber_queue_drops_events_and_counts_them_without_blocking() {
        let (fanout, mut receivers) = EventFanout::new(&["slow", "fast"], 2);
        for _ in 0..5 {
            fanout.publish(None, EventKind::AllIndexesSynced);
        }
        // Both queues hold 2; 3 dropped for each.
        assert_eq!(fanout.dropped_total(), 6);
        assert_eq!(
            fanout.dropped_by_subscriber(),
            vec![("slow", 3), ("fast", 3)]
        );
        let fast = &mut receivers[1];
        assert!(fast.recv().await.is_some());
        fanout.publish(Some(7), EventKind::LeadershipLost);
        assert_eq!(
            fanout.dropped_by_subscriber(),
            vec![("slow", 4), ("fast", 3)]
        );
    }

    #[test]
    fn typed_errors_serialize_as_the_text_logs_and_debug_events_show() {
        let validation = ObservedEvent::new(
            Some(3),
            EventKind::ValidationFailed {
                phase: ValidationPhase::Semantic,
                error: "haproxy.cfg:4: unknown keyword".into(),
            },
        );
        let json = serde_json::to_value(&validation).expect("serializes");
        assert_eq!(json["event"], "validation_failed");
        assert_eq!(json["phase"], "semantic");
        let deployment = ObservedEvent::new(
            Some(3),
            EventKind::DeploymentFailed {
                instance: "pod-a".into(),
                error: DeployError::Unreachable("pod-a is down".into()),
            },
        );
        let json = serde_json::to_value(&deployment).expect("serializes");
        assert_eq!(json["instance"], "pod-a");
        assert_eq!(json["error"], "instance unreachable: pod-a is down");
    }

    #[test]
    fn correlation_ids_are_unique() {
        assert_ne!(new_correlation_id(), new_correlation_id());
    }
}
