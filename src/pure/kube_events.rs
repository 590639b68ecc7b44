//! What haptor tells `kubectl describe`: the few observability events worth a Kubernetes
//! Event on the `HAProxyTemplateConfig` (events.k8s.io/v1), as a type (Normal or Warning),
//! a reason, an action and a note. Only what an operator acts on gets one — a config
//! accepted or refused, a deployment that failed or was fenced, leadership gained or lost;
//! the per-object and per-render events stay in logs and metrics.
//!
//! `pure` imports nothing above it, so this module cannot name the event enum of
//! `crate::messages`: it builds the note of each kind from that kind's fields, and
//! `drivers::kube::events::kube_event_of` — an exhaustive match over the enum, so a new
//! kind has to be decided on — picks the builder. The messages a note quotes have their
//! secrets redacted (`pure::redact`: PEM private keys, and userlist passwords on a line of
//! their own, as an error may quote a line of `haproxy.cfg`), and every note is cut to
//! [`NOTE_LIMIT`] bytes on a character boundary: the API server refuses longer notes.

use crate::pure::deploy::DeployError;
use crate::pure::redact::redact_secrets;

/// The longest note the API server accepts, in bytes (`NoteLengthLimit`).
pub const NOTE_LIMIT: usize = 1024;
/// The longest `reportingInstance` the API server accepts, in bytes.
pub const REPORTING_INSTANCE_LIMIT: usize = 128;
/// What ends a note that was cut.
const ELLIPSIS: &str = "…";

/// A Kubernetes Event to publish about the config: Warning or Normal, its reason
/// (UpperCamelCase, what happened), its action (what haptor was doing) and its note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeEventNote {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

impl KubeEventNote {
    fn new(warning: bool, reason: &'static str, action: &'static str, note: &str) -> Self {
        KubeEventNote {
            warning,
            reason,
            action,
            note: truncate_note(note),
        }
    }
}

/// The config passed every validator.
pub fn config_accepted(generation: Option<i64>) -> KubeEventNote {
    let note = match generation {
        Some(generation) => format!("generation {generation} passed every validator and is in use"),
        None => "the configuration passed every validator and is in use".to_string(),
    };
    KubeEventNote::new(false, "ConfigAccepted", "Validate", &note)
}

/// The config was refused; the note is its errors, one after the other.
pub fn config_rejected(errors: &[String]) -> KubeEventNote {
    let note = if errors.is_empty() {
        "the configuration was rejected; the previous one keeps running".to_string()
    } else {
        format!(
            "the configuration was rejected (the previous one keeps running): {}",
            errors
                .iter()
                .map(|e| redact_secrets(e))
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    KubeEventNote::new(true, "ConfigInvalid", "Validate", &note)
}

/// An HTTP resource's fetch failed, or its new content failed the trial render
/// (`rejected`); the content in use keeps serving either way.
pub fn http_resource_refused(
    resource: &str,
    url: &str,
    rejected: bool,
    error: &str,
) -> KubeEventNote {
    let error = redact_secrets(error);
    let url = redact_secrets(url);
    if rejected {
        let note = format!(
            "HTTP resource {resource} ({url}): new content rejected, the last good content keeps serving: {error}"
        );
        KubeEventNote::new(true, "HTTPResourceRejected", "Validate", &note)
    } else {
        let note = format!(
            "HTTP resource {resource} ({url}): fetch failed, the content in use keeps serving: {error}"
        );
        KubeEventNote::new(true, "HTTPResourceFetchFailed", "Fetch", &note)
    }
}

/// A deployment to one HAProxy instance failed.
pub fn deployment_failed(instance: &str, error: &DeployError) -> KubeEventNote {
    let error = redact_secrets(&error.to_string());
    let note = format!("deployment to instance {instance} failed: {error}");
    KubeEventNote::new(true, "DeploymentFailed", "Deploy", &note)
}

/// An instance refused a deployment because it saw a newer leader's epoch.
pub fn deployment_fenced(instance: &str, epoch: u64) -> KubeEventNote {
    let note = format!(
        "instance {instance} refused the deployment: it accepted epoch {epoch} from a newer leader"
    );
    KubeEventNote::new(true, "DeploymentFenced", "Deploy", &note)
}

/// This replica became the leader.
pub fn leadership_gained(epoch: u64) -> KubeEventNote {
    let note = format!("this replica leads with epoch {epoch} and deploys the configuration");
    KubeEventNote::new(false, "LeadershipGained", "LeaderElection", &note)
}

/// This replica stopped leading.
pub fn leadership_lost() -> KubeEventNote {
    KubeEventNote::new(
        false,
        "LeadershipLost",
        "LeaderElection",
        "this replica no longer leads and stops deploying",
    )
}

/// `note` itself when it fits in [`NOTE_LIMIT`] bytes; else as much of it as fits, cut on a
/// character boundary, followed by `…`.
pub fn truncate_note(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_string();
    }
    let mut cut = truncate_to(note, NOTE_LIMIT - ELLIPSIS.len()).to_string();
    cut.push_str(ELLIPSIS);
    cut
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
pub fn truncate_to(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_rejected_config_is_a_warning_whose_note_lists_every_error() {
        let event = config_rejected(&["line 3: unknown keyword".into(), "no frontend".into()]);
        assert!(event.warning);
        assert_eq!(event.reason, "ConfigInvalid");
        assert_eq!(event.action, "Validate");
        assert!(
            event.note.ends_with("line 3: unknown keyword; no frontend"),
            "{}",
            event.note
        );
    }

    #[test]
    fn a_rejected_config_without_errors_still_says_it_was_rejected() {
        let event = config_rejected(&[]);
        assert!(event.note.contains("rejected"), "{}", event.note);
    }

    #[test]
    fn an_overlong_note_is_cut_to_the_limit_on_a_character_boundary() {
        // Three-byte characters put no boundary at the limit itself.
        let errors = vec!["é€".repeat(1000)];
        let event = config_rejected(&errors);
        assert!(event.note.len() <= NOTE_LIMIT, "{}", event.note.len());
        assert!(event.note.len() > NOTE_LIMIT - 8, "{}", event.note.len());
        assert!(event.note.ends_with('…'), "{}", event.note);
        assert!(event.note.starts_with("the configuration was rejected"));
    }

    #[test]
    fn a_note_that_fits_is_kept_whole() {
        let exact = "a".repeat(NOTE_LIMIT);
        assert_eq!(truncate_note(&exact), exact);
        assert_eq!(truncate_note(&format!("{exact}b")).len(), NOTE_LIMIT);
    }

    #[test]
    fn truncating_never_splits_a_character() {
        for limit in 0..8 {
            let cut = truncate_to("aé€😀", limit);
            assert!(cut.len() <= limit, "{limit}: {cut}");
            assert!("aé€😀".starts_with(cut));
        }
        assert_eq!(truncate_to("aé€", 2), "a");
        assert_eq!(truncate_to("aé€", 3), "aé");
    }

    #[test]
    fn a_userlist_password_quoted_in_an_error_is_redacted() {
        let event = config_rejected(&["user admin password $5$secrethash\n".into()]);
        assert!(!event.note.contains("$5$secrethash"), "{}", event.note);
        assert!(event.note.contains("<redacted password"), "{}", event.note);
    }

    #[test]
    fn a_failed_deployment_is_a_warning_naming_the_instance_and_the_error() {
        let event = deployment_failed("haproxy-0", &DeployError::TimedOut(Duration::from_secs(30)));
        assert!(event.warning);
        assert_eq!(event.reason, "DeploymentFailed");
        assert_eq!(event.action, "Deploy");
        assert!(event.note.contains("haproxy-0"), "{}", event.note);
        assert!(
            event.note.contains("did not finish within 30s"),
            "{}",
            event.note
        );
    }

    #[test]
    fn a_fenced_deployment_is_a_warning_naming_the_instance_and_the_epoch() {
        let event = deployment_fenced("haproxy-1", 7);
        assert!(event.warning);
        assert_eq!(event.reason, "DeploymentFenced");
        assert!(event.note.contains("haproxy-1"), "{}", event.note);
        assert!(event.note.contains("epoch 7"), "{}", event.note);
    }

    #[test]
    fn leadership_changes_are_normal_events_and_a_new_term_names_its_epoch() {
        let gained = leadership_gained(12);
        assert!(!gained.warning);
        assert_eq!(gained.reason, "LeadershipGained");
        assert!(gained.note.contains("epoch 12"), "{}", gained.note);
        let lost = leadership_lost();
        assert!(!lost.warning);
        assert_eq!(lost.reason, "LeadershipLost");
        assert_eq!(lost.action, gained.action);
    }

    #[test]
    fn an_accepted_config_is_a_normal_event_naming_its_generation_when_known() {
        let event = config_accepted(Some(4));
        assert!(!event.warning);
        assert_eq!(event.reason, "ConfigAccepted");
        assert!(event.note.contains("generation 4"), "{}", event.note);
        assert!(!config_accepted(None).note.contains("generation"));
    }

    #[test]
    fn every_reason_and_action_fits_the_api_limits() {
        let all = [
            config_accepted(None),
            config_rejected(&[]),
            deployment_failed("i", &DeployError::Unreachable("x".into())),
            deployment_fenced("i", 1),
            leadership_gained(1),
            leadership_lost(),
        ];
        for event in all {
            assert!(!event.reason.is_empty() && event.reason.len() <= 128);
            assert!(!event.action.is_empty() && event.action.len() <= 128);
            assert!(event.note.len() <= NOTE_LIMIT);
        }
    }
}
