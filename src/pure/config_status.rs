//! What `haptor run` writes into an `HAProxyTemplateConfig`'s status: the verdict of
//! compiling its spec (structure, templates, index keys, selectors, post-processors — the
//! same checks the ConfigLoader's validators run), every problem located by template, line
//! and column where the error knows them, and a `Valid` condition. [`needs_write`] says
//! whether a new status differs from the one last written in anything but its timestamps,
//! so an unchanged verdict is never written twice.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::pure::config::{
    HAProxyTemplateConfig, HAProxyTemplateConfigStatus, TemplateProblem, ValidationStatus,
};
use crate::pure::pipeline::{CompiledConfig, ConfigError};

/// The condition type that says whether the config passed validation.
pub const VALID_CONDITION: &str = "Valid";

/// The problems of a config that does not compile, each as one status entry.
pub fn problems_of(error: &ConfigError) -> Vec<TemplateProblem> {
    match error {
        ConfigError::Structure(problems) => problems
            .iter()
            .map(|p| TemplateProblem {
                template: p.path.clone(),
                line: None,
                column: None,
                message: p.message.clone(),
            })
            .collect(),
        ConfigError::Template(e) => vec![TemplateProblem {
            template: e.template().unwrap_or("spec").to_string(),
            line: e.line().and_then(|l| u32::try_from(l).ok()),
            column: e.column().and_then(|c| u32::try_from(c).ok()),
            message: e.message(),
        }],
        other => vec![TemplateProblem {
            template: "spec".into(),
            line: None,
            column: None,
            message: other.to_string(),
        }],
    }
}

/// The status a config gets: `Valid` when its spec compiles, `Invalid` with every problem
/// otherwise. `previous` keeps the condition's transition time while its status stays.
pub fn config_status(
    config: &HAProxyTemplateConfig,
    previous: Option<&HAProxyTemplateConfigStatus>,
    now: Timestamp,
) -> HAProxyTemplateConfigStatus {
    let generation = config.metadata.generation;
    let (validation_status, validation_message, validation_errors) =
        match CompiledConfig::compile(config.spec.clone()) {
            Ok(_) => (
                ValidationStatus::Valid,
                Some("its structure, templates, index keys and selectors are valid".into()),
                Vec::new(),
            ),
            Err(e) => {
                let problems = problems_of(&e);
                (
                    ValidationStatus::Invalid,
                    Some(invalid_message(&problems)),
                    problems,
                )
            }
        };
    let valid = validation_status == ValidationStatus::Valid;
    let condition_status = if valid { "True" } else { "False" };
    let transition = previous
        .and_then(|p| p.conditions.iter().find(|c| c.type_ == VALID_CONDITION))
        .filter(|c| c.status == condition_status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let condition = Condition {
        type_: VALID_CONDITION.into(),
        status: condition_status.into(),
        reason: if valid { "Compiled" } else { "Invalid" }.into(),
        message: validation_message.clone().unwrap_or_default(),
        observed_generation: generation,
        last_transition_time: transition,
    };
    HAProxyTemplateConfigStatus {
        observed_generation: generation,
        validation_status,
        validation_message,
        validation_errors,
        last_validated: Some(
            Timestamp::from_second(now.as_second())
                .unwrap_or(now)
                .to_string(),
        ),
        conditions: vec![condition],
    }
}

/// The status message of an invalid config.
fn invalid_message(problems: &[TemplateProblem]) -> String {
    format!(
        "{} problem(s); the last valid config keeps serving: {}",
        problems.len(),
        problems.iter().map(describe).collect::<Vec<_>>().join("; ")
    )
}

/// Marks `status` invalid with `problems` found beyond compiling the spec (e.g. a watched
/// resource the API server does not serve); the condition's transition time becomes `now`
/// when it was not already false.
pub fn with_problems(
    mut status: HAProxyTemplateConfigStatus,
    problems: Vec<TemplateProblem>,
    now: Timestamp,
) -> HAProxyTemplateConfigStatus {
    if problems.is_empty() {
        return status;
    }
    let message = invalid_message(&problems);
    status.validation_status = ValidationStatus::Invalid;
    status.validation_message = Some(message.clone());
    status.validation_errors = problems;
    for condition in &mut status.conditions {
        if condition.status != "False" {
            condition.last_transition_time = Time(now);
        }
        condition.status = "False".into();
        condition.reason = "Invalid".into();
        condition.message = message.clone();
    }
    status
}

/// One problem as a sentence: `template line L, column C: message`.
pub fn describe(problem: &TemplateProblem) -> String {
    let mut out = problem.template.clone();
    if let Some(line) = problem.line {
        out.push_str(&format!(" line {line}"));
        if let Some(column) = problem.column {
            out.push_str(&format!(", column {column}"));
        }
    }
    out.push_str(": ");
    out.push_str(&problem.message);
    out
}

/// Whether `next` says anything `written` did not (timestamps aside).
pub fn needs_write(
    written: Option<&HAProxyTemplateConfigStatus>,
    next: &HAProxyTemplateConfigStatus,
) -> bool {
    let Some(written) = written else {
        return true;
    };
    let strip = |s: &HAProxyTemplateConfigStatus| {
        let mut s = s.clone();
        s.last_validated = None;
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(written) != strip(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::config::config_from_yaml;

    fn config(template: &str) -> HAProxyTemplateConfig {
        let indented: String = template.lines().map(|l| format!("      {l}\n")).collect();
        let yaml = format!(
            "apiVersion: haptor.dev/v1alpha1\nkind: HAProxyTemplateConfig\nmetadata: {{name: c, namespace: n, generation: 3}}\nspec:\n  haproxyConfig:\n    template: |\n{indented}"
        );
        config_from_yaml("c.yaml", &yaml).expect("a config")
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("a time")
    }

    #[test]
    fn a_config_that_compiles_is_valid_at_its_generation() {
        let status = config_status(&config("global\n  daemon"), None, now());
        assert_eq!(status.validation_status, ValidationStatus::Valid);
        assert_eq!(status.observed_generation, Some(3));
        assert!(status.validation_errors.is_empty());
        assert_eq!(status.conditions[0].status, "True");
        assert_eq!(status.conditions[0].observed_generation, Some(3));
    }

    #[test]
    fn a_template_that_does_not_compile_is_invalid_naming_the_template_and_line() {
        let status = config_status(&config("global\n  daemon\n  {{#if x}\n"), None, now());
        assert_eq!(status.validation_status, ValidationStatus::Invalid);
        let problem = &status.validation_errors[0];
        assert_eq!(problem.template, "haproxy.cfg");
        assert_eq!(problem.line, Some(3), "{problem:?}");
        assert_eq!(status.conditions[0].status, "False");
        assert!(
            status
                .validation_message
                .as_deref()
                .is_some_and(|m| m.contains("haproxy.cfg line 3")),
            "{status:?}"
        );
    }

    #[test]
    fn problems_found_beyond_compiling_make_a_valid_status_invalid_from_now() {
        let valid = config_status(&config("global"), None, now());
        let later = Timestamp::from_second(1_800_000_600).expect("a time");
        let problem = TemplateProblem {
            template: "spec.watchedResources.widgets".into(),
            line: None,
            column: None,
            message: "does not exist".into(),
        };
        let status = with_problems(valid.clone(), vec![problem.clone()], later);
        assert_eq!(status.validation_status, ValidationStatus::Invalid);
        assert_eq!(status.validation_errors, [problem]);
        assert_eq!(status.conditions[0].status, "False");
        assert_eq!(status.conditions[0].last_transition_time, Time(later));
        assert_eq!(with_problems(valid.clone(), Vec::new(), later), valid);
    }

    #[test]
    fn the_same_verdict_later_needs_no_write_and_keeps_its_transition_time() {
        let first = config_status(&config("global"), None, now());
        let later = Timestamp::from_second(1_800_000_600).expect("a time");
        let second = config_status(&config("global"), Some(&first), later);
        assert!(!needs_write(Some(&first), &second));
        assert_eq!(
            first.conditions[0].last_transition_time,
            second.conditions[0].last_transition_time
        );
        let broken = config_status(&config("global {{#if x}}"), Some(&second), later);
        assert!(needs_write(Some(&second), &broken));
        assert_eq!(broken.conditions[0].last_transition_time, Time(later));
    }
}
