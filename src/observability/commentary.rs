//! Commentary: what a person reads in the logs about each observability event. The pure
//! function [`comment_on`] turns one event, with the events before it, into a [`Comment`] (a
//! level and a sentence), relating it to the earlier events of the same reconciliation by its
//! correlation id ("deployment to haproxy-0 finished 234 ms after the EndpointSlice change
//! default/web that triggered it"). The same history and event always give the same comment;
//! the Commentator actor (`crate::actors::commentator`) feeds it from the
//! [`EventLog`](super::event_log::EventLog) and logs the verdict through `tracing`.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use crate::messages::events::{EventKind, HttpFetchResult, ObservedEvent};

/// How loudly a comment is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentLevel {
    Debug,
    Info,
    Warn,
}

/// What the Commentator says about one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub level: CommentLevel,
    pub text: String,
}

impl Comment {
    fn new(level: CommentLevel, text: String) -> Comment {
        Comment { level, text }
    }
}

/// Formats a duration for a log line: milliseconds below ten seconds, else seconds.
pub fn human_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 10_000 {
        format!("{millis} ms")
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

fn elapsed_between(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// The event that started the reconciliation `event` belongs to: the earliest
/// `ResourceChanged` with the same correlation id, else the earliest
/// `ReconciliationTriggered`. `None` for uncorrelated events or when the trigger has already
/// left the ring buffer.
pub fn find_trigger<'a>(
    history: &'a VecDeque<ObservedEvent>,
    event: &ObservedEvent,
) -> Option<&'a ObservedEvent> {
    let correlation = event.correlation?;
    let same_reconciliation = || {
        history
            .iter()
            .filter(move |e| e.correlation == Some(correlation))
    };
    same_reconciliation()
        .find(|e| matches!(e.kind, EventKind::ResourceChanged { .. }))
        .or_else(|| {
            same_reconciliation()
                .find(|e| matches!(e.kind, EventKind::ReconciliationTriggered { .. }))
        })
}

/// Describes a triggering event as the object of a sentence ("the EndpointSlice change
/// default/web").
fn describe_trigger(trigger: &ObservedEvent) -> String {
    match &trigger.kind {
        EventKind::ResourceChanged {
            resource,
            object,
            deleted: false,
            ..
        } => format!("the {resource} change {object}"),
        EventKind::ResourceChanged {
            resource,
            object,
            deleted: true,
            ..
        } => format!("the {resource} deletion {object}"),
        EventKind::ReconciliationTriggered { reason } => {
            format!("the reconciliation triggered by {reason}")
        }
        other => format!("the {} event", other.name()),
    }
}

/// " N ms after the <trigger> that triggered it", or "" when the trigger is unknown.
fn since_trigger(history: &VecDeque<ObservedEvent>, event: &ObservedEvent) -> String {
    match find_trigger(history, event) {
        Some(trigger) => format!(
            " {} after {} that triggered it",
            human_duration(elapsed_between(trigger.at, event.at)),
            describe_trigger(trigger)
        ),
        None => String::new(),
    }
}

/// " (for the <trigger>)", or "" when the trigger is unknown.
fn for_trigger(history: &VecDeque<ObservedEvent>, event: &ObservedEvent) -> String {
    match find_trigger(history, event) {
        Some(trigger) => format!(" (for {})", describe_trigger(trigger)),
        None => String::new(),
    }
}

/// The most recent earlier event matching `pred`.
fn last_matching(
    history: &VecDeque<ObservedEvent>,
    pred: impl Fn(&EventKind) -> bool,
) -> Option<&ObservedEvent> {
    history.iter().rev().find(|e| pred(&e.kind))
}

/// What to log about `event`, given the events before it (oldest first). Pure: the same
/// history and event always give the same comment.
pub fn comment_on(history: &VecDeque<ObservedEvent>, event: &ObservedEvent) -> Comment {
    use CommentLevel::{Debug, Info, Warn};
    match &event.kind {
        EventKind::ConfigAccepted { generation } => {
            let generation = generation
                .map(|g| format!(" (generation {g})"))
                .unwrap_or_default();
            let verdict = last_matching(history, |k| {
                matches!(
                    k,
                    EventKind::ConfigAccepted { .. } | EventKind::ConfigRejected { .. }
                )
            });
            let after_rejection = if verdict
                .is_some_and(|e| matches!(e.kind, EventKind::ConfigRejected { .. }))
            {
                " after a rejection: it is in use, and the rejected config's errors are marked resolved in /debug/vars/errors"
            } else {
                ""
            };
            Comment::new(
                Info,
                format!("configuration accepted{generation}{after_rejection}"),
            )
        }
        EventKind::ConfigRejected { errors } => Comment::new(
            Warn,
            format!(
                "configuration rejected, the previous one keeps running: {}",
                errors.join("; ")
            ),
        ),
        EventKind::IterationStarted { resources } => Comment::new(
            Info,
            format!(
                "config iteration started, watching {}",
                if resources.is_empty() {
                    "nothing".to_string()
                } else {
                    resources.join(", ")
                }
            ),
        ),
        EventKind::ResourceChanged {
            resource,
            object,
            deleted,
            ..
        } => {
            let what = if *deleted { "deleted" } else { "changed" };
            Comment::new(Debug, format!("{resource} {object} {what}"))
        }
        EventKind::IndexSynced { resource, objects } => Comment::new(
            Info,
            format!("{resource} index synced with {objects} objects"),
        ),
        EventKind::AllIndexesSynced => {
            let first = history
                .iter()
                .find(|e| matches!(e.kind, EventKind::IndexSynced { .. }));
            let took = first.map(|f| {
                format!(
                    " ({} after the first index synced)",
                    human_duration(elapsed_between(f.at, event.at))
                )
            });
            Comment::new(
                Info,
                format!(
                    "all indexes synced; reconciliation can start{}",
                    took.unwrap_or_default()
                ),
            )
        }
        EventKind::ReconciliationTriggered { reason } => Comment::new(
            Debug,
            format!(
                "reconciliation triggered by {reason}{}",
                for_trigger(history, event)
            ),
        ),
        EventKind::RenderSucceeded { duration, checksum } => Comment::new(
            Debug,
            format!(
                "rendered in {} (checksum {:.12}){}",
                human_duration(*duration),
                checksum,
                for_trigger(history, event)
            ),
        ),
        EventKind::RenderFailed { error } => Comment::new(
            Warn,
            format!(
                "render failed{}; the last good config keeps serving: {error}",
                for_trigger(history, event)
            ),
        ),
        EventKind::ValidationSucceeded {
            duration,
            cache_hit,
            semantic_skipped,
        } => {
            let how = if *cache_hit {
                "from the validation cache"
            } else if *semantic_skipped {
                "without haproxy -c (only values the runtime API changes differ)"
            } else {
                "by haproxy -c"
            };
            Comment::new(
                Debug,
                format!(
                    "validated {how} in {}{}",
                    human_duration(*duration),
                    for_trigger(history, event)
                ),
            )
        }
        EventKind::CheckerUnavailable { error } => Comment::new(
            Warn,
            format!(
                "haproxy -c could not run, so the render was neither accepted nor refused{}; the last good config keeps serving: {error}",
                for_trigger(history, event)
            ),
        ),
        EventKind::ValidationFailed { phase, error } => Comment::new(
            Warn,
            format!(
                "validation failed in the {phase} phase{}; the last good config keeps serving: {error}",
                for_trigger(history, event)
            ),
        ),
        EventKind::DeploymentSucceeded {
            instance,
            duration,
            reloaded,
            reload_reason,
            ..
        } => {
            let how = match (reloaded, reload_reason) {
                (true, Some(reason)) => format!("with a reload: {}", reason.describe()),
                (true, None) => "with a reload".to_string(),
                (false, _) => "through the runtime API".to_string(),
            };
            let after = since_trigger(history, event);
            let after = if after.is_empty() {
                format!(" in {}", human_duration(*duration))
            } else {
                after
            };
            Comment::new(
                Info,
                format!(
                    "deployment to {instance} finished{after} ({how}, took {})",
                    human_duration(*duration)
                ),
            )
        }
        EventKind::DeploymentFailed { instance, error } => Comment::new(
            Warn,
            format!(
                "deployment to {instance} failed{}: {error}",
                for_trigger(history, event)
            ),
        ),
        EventKind::DeploymentFenced { instance, epoch } => Comment::new(
            Warn,
            format!(
                "deployment to {instance} refused: a newer leader (epoch {epoch}) has taken over"
            ),
        ),
        EventKind::InstancesDiscovered { instances } => {
            let previous = last_matching(history, |k| {
                matches!(k, EventKind::InstancesDiscovered { .. })
            });
            let change = match previous.map(|p| &p.kind) {
                Some(EventKind::InstancesDiscovered { instances: before }) => {
                    let added: Vec<&str> = instances
                        .iter()
                        .filter(|i| !before.contains(i))
                        .map(String::as_str)
                        .collect();
                    let removed: Vec<&str> = before
                        .iter()
                        .filter(|i| !instances.contains(i))
                        .map(String::as_str)
                        .collect();
                    let mut parts = Vec::new();
                    if !added.is_empty() {
                        parts.push(format!("added {}", added.join(", ")));
                    }
                    if !removed.is_empty() {
                        parts.push(format!("removed {}", removed.join(", ")));
                    }
                    if parts.is_empty() {
                        " (unchanged)".to_string()
                    } else {
                        format!(" ({})", parts.join("; "))
                    }
                }
                _ => String::new(),
            };
            Comment::new(
                Info,
                format!(
                    "{} HAProxy instances discovered: {}{change}",
                    instances.len(),
                    instances.join(", ")
                ),
            )
        }
        EventKind::LeadershipGained { epoch } => {
            Comment::new(Info, format!("became the leader (epoch {epoch})"))
        }
        EventKind::LeadershipLost => {
            let gained =
                last_matching(history, |k| matches!(k, EventKind::LeadershipGained { .. }));
            let held = match gained {
                Some(
                    g @ ObservedEvent {
                        kind: EventKind::LeadershipGained { epoch },
                        ..
                    },
                ) => {
                    format!(
                        " after leading epoch {epoch} for {}",
                        human_duration(elapsed_between(g.at, event.at))
                    )
                }
                _ => String::new(),
            };
            Comment::new(
                Info,
                format!("lost leadership{held}; leader-only actors stop"),
            )
        }
        EventKind::ActorRestarted { actor, restarts } => Comment::new(
            Warn,
            format!("actor {actor} restarted (restart {restarts})"),
        ),
        EventKind::HttpResourceFetched {
            resource,
            url,
            result,
            in_use_bytes,
            error,
        } => {
            let error = error.as_deref().unwrap_or("unknown");
            match result {
                HttpFetchResult::Changed => Comment::new(
                    Info,
                    format!(
                        "HTTP resource {resource} ({url}): new content in use ({} bytes)",
                        in_use_bytes.unwrap_or_default()
                    ),
                ),
                HttpFetchResult::Unchanged | HttpFetchResult::NotModified => Comment::new(
                    Debug,
                    format!("HTTP resource {resource} ({url}): content unchanged"),
                ),
                HttpFetchResult::Error => Comment::new(
                    Warn,
                    format!(
                        "HTTP resource {resource} ({url}): fetch failed, the content in use keeps serving: {error}"
                    ),
                ),
                HttpFetchResult::Rejected => Comment::new(
                    Warn,
                    format!(
                        "HTTP resource {resource} ({url}): new content rejected, the last good content keeps serving: {error}"
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::events::test_events::{at, changed, deployed};

    #[test]
    fn a_deployment_is_related_to_the_resource_change_of_its_correlation() {
        let history: VecDeque<_> = [
            changed(7, 1_000, "EndpointSlice", "default/other"),
            changed(9, 1_100, "EndpointSlice", "default/web"),
            at(
                Some(9),
                1_120,
                EventKind::ReconciliationTriggered {
                    reason: "resources changed".into(),
                },
            ),
        ]
        .into();
        let comment = comment_on(&history, &deployed(9, 1_334, "haproxy-0"));
        assert_eq!(comment.level, CommentLevel::Info);
        assert!(
            comment.text.starts_with("deployment to haproxy-0 finished 234 ms after the EndpointSlice change default/web that triggered it"),
            "{}",
            comment.text
        );
    }

    #[test]
    fn a_config_accepted_after_a_rejection_says_so_and_a_plain_acceptance_does_not() {
        let accepted = at(None, 900, EventKind::ConfigAccepted { generation: None });
        let rejected = at(
            None,
            500,
            EventKind::ConfigRejected {
                errors: vec!["template 'haproxy.cfg' line 2: unknown helper".into()],
            },
        );
        let after: VecDeque<_> = [rejected.clone()].into();
        let comment = comment_on(&after, &accepted);
        assert_eq!(comment.level, CommentLevel::Info);
        assert!(
            comment
                .text
                .starts_with("configuration accepted after a rejection"),
            "{}",
            comment.text
        );
        let plain: VecDeque<_> = [rejected, accepted.clone()].into();
        assert_eq!(comment_on(&plain, &accepted).text, "configuration accepted");
    }

    #[test]
    fn without_a_resource_change_the_reconciliation_trigger_is_named() {
        let history: VecDeque<_> = [at(
            Some(3),
            500,
            EventKind::ReconciliationTriggered {
                reason: "drift".into(),
            },
        )]
        .into();
        let comment = comment_on(&history, &deployed(3, 600, "haproxy-1"));
        assert!(
            comment
                .text
                .contains("100 ms after the reconciliation triggered by drift"),
            "{}",
            comment.text
        );
    }

    #[test]
    fn a_deployment_whose_trigger_left_the_buffer_reports_only_its_own_duration() {
        let history: VecDeque<_> = [changed(1, 0, "Service", "default/web")].into();
        let comment = comment_on(&history, &deployed(2, 900, "haproxy-0"));
        assert!(!comment.text.contains("triggered it"), "{}", comment.text);
        assert!(
            comment.text.contains("finished in 40 ms"),
            "{}",
            comment.text
        );
    }

    #[test]
    fn a_validation_that_skipped_haproxy_c_does_not_say_haproxy_c_ran() {
        let skipped = comment_on(
            &VecDeque::new(),
            &at(
                Some(1),
                0,
                EventKind::ValidationSucceeded {
                    duration: Duration::from_millis(1),
                    cache_hit: false,
                    semantic_skipped: true,
                },
            ),
        );
        assert!(!skipped.text.contains("by haproxy -c"), "{}", skipped.text);
        assert!(
            skipped.text.contains("without haproxy -c"),
            "{}",
            skipped.text
        );
    }

    #[test]
    fn render_failures_are_warnings_carrying_the_error() {
        let history: VecDeque<_> = [changed(4, 0, "Ingress", "shop/front")].into();
        let event = at(
            Some(4),
            10,
            EventKind::RenderFailed {
                error: "haproxy.cfg line 12: unknown helper".into(),
            },
        );
        let comment = comment_on(&history, &event);
        assert_eq!(comment.level, CommentLevel::Warn);
        assert!(
            comment.text.contains("haproxy.cfg line 12: unknown helper"),
            "{}",
            comment.text
        );
        assert!(
            comment.text.contains("the Ingress change shop/front"),
            "{}",
            comment.text
        );
    }

    #[test]
    fn losing_leadership_is_logged_at_info_with_how_long_it_was_held() {
        let history: VecDeque<_> =
            [at(None, 1_000, EventKind::LeadershipGained { epoch: 5 })].into();
        let comment = comment_on(&history, &at(None, 4_000, EventKind::LeadershipLost));
        assert_eq!(comment.level, CommentLevel::Info);
        assert!(
            comment.text.contains("epoch 5 for 3000 ms"),
            "{}",
            comment.text
        );
        let gained = comment_on(
            &VecDeque::new(),
            &at(None, 0, EventKind::LeadershipGained { epoch: 6 }),
        );
        assert_eq!(gained.level, CommentLevel::Info);
        assert!(gained.text.contains("epoch 6"), "{}", gained.text);
    }

    #[test]
    fn instance_discovery_names_the_instances_that_came_and_went() {
        let history: VecDeque<_> = [at(
            None,
            0,
            EventKind::InstancesDiscovered {
                instances: vec!["a".into(), "b".into()],
            },
        )]
        .into();
        let event = at(
            None,
            1,
            EventKind::InstancesDiscovered {
                instances: vec!["b".into(), "c".into()],
            },
        );
        let comment = comment_on(&history, &event);
        assert!(comment.text.contains("added c"), "{}", comment.text);
        assert!(comment.text.contains("removed a"), "{}", comment.text);
    }
}
