//! Unit tests of `metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;
use crate::pure::deploy::DeployError;
use crate::pure::validate::ValidationPhase;

fn event(kind: EventKind) -> ObservedEvent {
    ObservedEvent::new(Some(1), kind)
}

/// The value of the sample line that starts with `series` (name plus labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

fn one_of_each() -> Vec<EventKind> {
    vec![
        EventKind::RenderSucceeded {
            duration: Duration::from_millis(30),
            checksum: crate::pure::rendered::Checksum::of(b"abc"),
        },
        EventKind::RenderFailed {
            error: "boom".into(),
        },
        EventKind::ValidationSucceeded {
            duration: Duration::from_millis(80),
            cache_hit: false,
            semantic_skipped: false,
        },
        EventKind::ValidationFailed {
            phase: ValidationPhase::Semantic,
            error: "bad".into(),
        },
        EventKind::DeploymentSucceeded {
            instance: "haproxy-0".into(),
            duration: Duration::from_millis(12),
            reloaded: true,
            reload_reason: Some(crate::pure::deploy::ReloadReason::Structural),
            since_change: Some(Duration::from_millis(150)),
        },
        EventKind::DeploymentFailed {
            instance: "haproxy-1".into(),
            error: DeployError::Rejected("refused".into()),
        },
        EventKind::IndexSynced {
            resource: "services".into(),
            objects: 7,
        },
        EventKind::LeadershipGained { epoch: 2 },
        EventKind::ActorRestarted {
            actor: "deployer".into(),
            restarts: 1,
        },
    ]
}

#[test]
fn every_family_appears_in_the_text_output_once_events_touched_it() {
    let metrics = Metrics::new().expect("metrics build");
    for kind in one_of_each() {
        metrics.observe(&event(kind));
    }
    let text = metrics.encode_text().expect("metrics encode");
    for family in [
        "haptor_reconciliations_total",
        "haptor_reconciliation_errors_total",
        "haptor_reconciliation_duration_seconds",
        "haptor_validations_total",
        "haptor_validation_errors_total",
        "haptor_validation_duration_seconds",
        "haptor_deployments_total",
        "haptor_deployment_errors_total",
        "haptor_deployment_duration_seconds",
        "haptor_change_to_deploy_seconds",
        "haptor_validations_skipped_total",
        "haptor_resources",
        "haptor_leader_is_leader",
        "haptor_leader_transitions_total",
        "haptor_actor_restarts_total",
        "haptor_observability_events_dropped_total",
        "haptor_validation_cache_hits_total",
        "haptor_validation_cache_misses_total",
        "haptor_build_info",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family} missing from:\n{text}"
        );
    }
}

#[test]
fn events_update_the_counters_they_concern() {
    let metrics = Metrics::new().expect("metrics build");
    for kind in one_of_each() {
        metrics.observe(&event(kind));
    }
    metrics.observe(&event(EventKind::DeploymentSucceeded {
        instance: "haproxy-0".into(),
        duration: Duration::from_millis(5),
        reloaded: false,
        reload_reason: None,
        since_change: None,
    }));
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(
            &text,
            "haptor_reloads_total{instance=\"haproxy-0\",reason=\"structural\"}"
        ),
        Some(1.0),
        "the reload counted by its reason, the runtime deployment not at all"
    );
    assert_eq!(sample(&text, "haptor_reconciliations_total"), Some(2.0));
    assert_eq!(
        sample(&text, "haptor_reconciliation_errors_total"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "haptor_reconciliation_duration_seconds_count"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "haptor_validations_total"), Some(2.0));
    assert_eq!(
        sample(&text, "haptor_validation_errors_total{phase=\"semantic\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "haptor_deployments_total{instance=\"haproxy-0\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "haptor_deployment_errors_total{error=\"rejected\",instance=\"haproxy-1\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "haptor_deployment_duration_seconds_count"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "haptor_resources{resource=\"services\"}"),
        Some(7.0)
    );
    assert_eq!(sample(&text, "haptor_leader_is_leader"), Some(1.0));
    assert_eq!(
        sample(&text, "haptor_actor_restarts_total{actor=\"deployer\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "haptor_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        Some(1.0)
    );

    metrics.observe(&event(EventKind::LeadershipLost));
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(sample(&text, "haptor_leader_is_leader"), Some(0.0));
    assert_eq!(sample(&text, "haptor_leader_transitions_total"), Some(2.0));
}

#[test]
fn resource_counts_follow_changes_and_unwatched_resources_lose_their_series() {
    let metrics = Metrics::new().expect("metrics build");
    metrics.observe(&event(EventKind::IndexSynced {
        resource: "services".into(),
        objects: 2,
    }));
    metrics.observe(&event(EventKind::IndexSynced {
        resource: "secrets".into(),
        objects: 1,
    }));
    metrics.observe(&event(EventKind::ResourceChanged {
        resource: "services".into(),
        object: "default/web".into(),
        deleted: true,
        objects: 1,
    }));
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_resources{resource=\"services\"}"),
        Some(1.0)
    );
    metrics.observe(&event(EventKind::IterationStarted {
        resources: vec!["services".into()],
    }));
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_resources{resource=\"secrets\"}"),
        None,
        "{text}"
    );
    assert_eq!(
        sample(&text, "haptor_resources{resource=\"services\"}"),
        Some(1.0)
    );
}

#[test]
fn a_validation_that_skipped_haproxy_c_is_counted_apart() {
    let metrics = Metrics::new().expect("metrics build");
    metrics.observe(&event(EventKind::ValidationSucceeded {
        duration: Duration::from_millis(1),
        cache_hit: false,
        semantic_skipped: true,
    }));
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(sample(&text, "haptor_validations_total"), Some(0.0));
    assert_eq!(
        sample(&text, "haptor_validation_duration_seconds_count"),
        Some(0.0)
    );
    assert_eq!(sample(&text, "haptor_validations_skipped_total"), Some(1.0));
}

#[test]
fn scraped_counters_read_their_sources_at_each_scrape() {
    let metrics = Metrics::new().expect("metrics build");
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_validation_cache_hits_total"),
        Some(0.0)
    );

    let (fanout, _receivers) = EventFanout::new(&["full"], 1);
    metrics.watch_event_fanout(&fanout);
    let hits = Arc::new(AtomicU64::new(3));
    let read_hits = Arc::clone(&hits);
    metrics.set_validation_cache_source(Arc::new(move || (read_hits.load(Ordering::Relaxed), 4)));
    for _ in 0..3 {
        fanout.publish(None, EventKind::AllIndexesSynced);
    }
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_observability_events_dropped_total"),
        Some(fanout.dropped_total() as f64)
    );
    assert_eq!(
        sample(&text, "haptor_validation_cache_hits_total"),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, "haptor_validation_cache_misses_total"),
        Some(4.0)
    );

    hits.store(9, Ordering::Relaxed);
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_validation_cache_hits_total"),
        Some(9.0)
    );
}

#[test]
fn two_metrics_instances_do_not_share_a_registry() {
    let first = Metrics::new().expect("first metrics build");
    let second = Metrics::new().expect("second metrics build");
    first.observe(&event(EventKind::RenderFailed { error: "x".into() }));
    let text = second.encode_text().expect("metrics encode");
    assert_eq!(sample(&text, "haptor_reconciliations_total"), Some(0.0));
}

#[test]
fn a_failed_deployment_is_counted_under_its_instance_and_the_cause_of_the_failure() {
    let metrics = Metrics::new().expect("metrics build");
    metrics.observe(&event(EventKind::DeploymentFailed {
        instance: "pod-a".into(),
        error: DeployError::TimedOut(Duration::from_secs(30)),
    }));
    metrics.observe(&event(EventKind::DeploymentFailed {
        instance: "pod-a".into(),
        error: DeployError::Unreachable("connection refused".into()),
    }));
    metrics.observe(&event(EventKind::DeploymentFailed {
        instance: "pod-b".into(),
        error: DeployError::TimedOut(Duration::from_secs(30)),
    }));
    let text = metrics.encode_text().expect("metrics encode");
    for (series, count) in [
        (
            "haptor_deployment_errors_total{error=\"timed_out\",instance=\"pod-a\"}",
            1.0,
        ),
        (
            "haptor_deployment_errors_total{error=\"unreachable\",instance=\"pod-a\"}",
            1.0,
        ),
        (
            "haptor_deployment_errors_total{error=\"timed_out\",instance=\"pod-b\"}",
            1.0,
        ),
        ("haptor_deployments_total{instance=\"pod-a\"}", 2.0),
    ] {
        assert_eq!(sample(&text, series), Some(count), "{series} in:\n{text}");
    }
}

#[test]
fn a_refused_validation_is_counted_under_the_phase_that_refused_it() {
    let metrics = Metrics::new().expect("metrics build");
    for phase in [
        ValidationPhase::Syntax,
        ValidationPhase::Semantic,
        ValidationPhase::Semantic,
    ] {
        metrics.observe(&event(EventKind::ValidationFailed {
            phase,
            error: "refused".into(),
        }));
    }
    let text = metrics.encode_text().expect("metrics encode");
    assert_eq!(
        sample(&text, "haptor_validation_errors_total{phase=\"syntax\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "haptor_validation_errors_total{phase=\"semantic\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "haptor_validation_errors_total{phase=\"schema\"}"),
        None
    );
    assert_eq!(sample(&text, "haptor_validations_total"), Some(3.0));
}
