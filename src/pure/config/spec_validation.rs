//! Structural validation of a `HAProxyTemplateConfig` spec: everything that can be checked
//! without compiling templates or JSONPaths. It reports every problem with the field path
//! that holds it, so a user fixes a config in one round.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use super::{AssertionKind, ConfigTimings, HAProxyTemplateConfigSpec};
use crate::pure::selector::LabelSelector;
use crate::pure::selector::namespaces::is_namespace;

/// One structural problem: the field path (`spec.watchedResources.ingresses.apiVersion`) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecProblem {
    pub path: String,
    pub message: String,
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

const LOG_LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

/// The fixture list that may hold Namespace objects (for namespace selectors) even when no
/// watched resource has this name.
pub const NAMESPACE_FIXTURES: &str = "namespaces";

/// Checks a spec's structure and returns every problem found (empty when valid).
pub fn validate_spec(spec: &HAProxyTemplateConfigSpec) -> Vec<SpecProblem> {
    validated_timings(spec).err().unwrap_or_default()
}

/// Checks a spec's structure like [`validate_spec`] and, when it has no problem, gives its
/// durations as the typed settings they were parsed into on the way.
pub fn validated_timings(
    spec: &HAProxyTemplateConfigSpec,
) -> Result<ConfigTimings, Vec<SpecProblem>> {
    let mut problems = Problems::default();

    if let Some(secret) = &spec.credentials_secret_ref {
        problems.require_name("spec.credentialsSecretRef.name", &secret.name);
    }
    if let Some(selector) = &spec.pod_selector
        && selector.match_labels.is_empty()
    {
        problems.push(
            "spec.podSelector.matchLabels",
            "needs at least one label, or every pod would be an HAProxy instance",
        );
    }

    let dp = &spec.dataplane;
    if dp.port == 0 {
        problems.push("spec.dataplane.port", "must be between 1 and 65535");
    }
    for (field, dir) in [
        ("mapsDir", &dp.maps_dir),
        ("sslCertsDir", &dp.ssl_certs_dir),
        ("generalStorageDir", &dp.general_storage_dir),
        ("configFile", &dp.config_file),
    ] {
        if !dir.starts_with('/') {
            problems.push(
                &format!("spec.dataplane.{field}"),
                &format!("must be an absolute path, got '{dir}'"),
            );
        }
    }
    // Every duration (dataplane, leader election, rendering, debounces), parsed once here.
    let timings = ConfigTimings::from_spec(spec)
        .map_err(|found| problems.0.extend(found))
        .ok();

    if let Err(found) = crate::pure::http_resources::HttpResource::from_spec(spec) {
        problems.0.extend(found);
    }

    problems.require_name(
        "spec.leaderElection.leaseName",
        &spec.leader_election.lease_name,
    );

    let rendering = &spec.rendering;
    if rendering.max_output_bytes == 0 {
        problems.push("spec.rendering.maxOutputBytes", "must be at least 1");
    }

    if let Some(level) = &spec.logging.level
        && !level.is_empty()
        && !LOG_LEVELS.contains(&level.to_ascii_uppercase().as_str())
    {
        problems.push(
            "spec.logging.level",
            &format!("'{level}' is not one of {}", LOG_LEVELS.join(", ")),
        );
    }

    for (name, watched) in &spec.watched_resources {
        let base = format!("spec.watchedResources.{name}");
        if !is_template_identifier(name) {
            problems.push(
                &base,
                "the name must be letters, digits, '_' or '-' (templates refer to it)",
            );
        }
        if watched.api_version.trim().is_empty() {
            problems.push(
                &format!("{base}.apiVersion"),
                "is required (e.g. networking.k8s.io/v1, or v1 for core resources)",
            );
        } else if watched.api_version.split('/').count() > 2 || watched.api_version.ends_with('/') {
            problems.push(
                &format!("{base}.apiVersion"),
                &format!("'{}' is not group/version or version", watched.api_version),
            );
        }
        if watched.resources.trim().is_empty() {
            problems.push(
                &format!("{base}.resources"),
                "is required: the plural resource name, e.g. ingresses",
            );
        } else if watched
            .resources
            .chars()
            .any(|c| c.is_ascii_uppercase() || c.is_whitespace())
        {
            problems.push(
                &format!("{base}.resources"),
                &format!("'{}' must be the lower-case plural resource name (e.g. ingresses), not the kind", watched.resources),
            );
        }
        if watched.index_by.is_empty() {
            problems.push(
                &format!("{base}.indexBy"),
                "needs at least one JSONPath, e.g. metadata.namespace",
            );
        }
        for (i, path) in watched.index_by.iter().enumerate() {
            if path.trim().is_empty() {
                problems.push(&format!("{base}.indexBy[{i}]"), "is empty");
            }
        }
        if let Some(selector) = &watched.field_selector
            && !selector.contains('=')
        {
            problems.push(
                &format!("{base}.fieldSelector"),
                &format!("'{selector}' must have the form path=value"),
            );
        }
        for (field, text) in [
            ("labelSelector", &watched.label_selector),
            ("namespaceSelector", &watched.namespace_selector),
        ] {
            if let Some(text) = text
                && let Err(e) = LabelSelector::parse(text)
            {
                problems.push(
                    &format!("{base}.{field}"),
                    &format!("'{text}' is not a valid label selector: {e}"),
                );
            }
        }
    }

    for (i, path) in spec.watched_resources_ignore_fields.iter().enumerate() {
        if path.trim().is_empty() {
            problems.push(
                &format!("spec.watchedResourcesIgnoreFields[{i}]"),
                "is empty",
            );
        }
    }

    for (name, snippet) in &spec.template_snippets {
        if snippet.template.trim().is_empty() {
            problems.push(
                &format!("spec.templateSnippets.{name}.template"),
                "is empty",
            );
        }
    }
    if let Err(found) = crate::pure::annotations::AnnotationTable::new(&spec.annotations) {
        for problem in found {
            problems.push(&problem.field, &problem.message);
        }
    }
    if spec.haproxy_config.template.trim().is_empty() {
        problems.push(
            "spec.haproxyConfig.template",
            "is empty: it renders haproxy.cfg",
        );
    }
    for (field, files) in [
        ("maps", &spec.maps),
        ("files", &spec.files),
        ("sslCertificates", &spec.ssl_certificates),
    ] {
        for (name, file) in files {
            let base = format!("spec.{field}.{name}");
            if name.contains('/') || name == "." || name == ".." {
                problems.push(&base, "the file name must not contain '/'");
            }
            if file.template.trim().is_empty() {
                problems.push(&format!("{base}.template"), "is empty");
            }
            for (i, post) in file.post_processing.iter().enumerate() {
                problems.post_processor(&format!("{base}.postProcessing[{i}]"), post);
            }
        }
    }
    for (i, post) in spec.haproxy_config.post_processing.iter().enumerate() {
        problems.post_processor(&format!("spec.haproxyConfig.postProcessing[{i}]"), post);
    }

    let watched: BTreeSet<&str> = spec.watched_resources.keys().map(String::as_str).collect();
    for (test_name, test) in &spec.validation_tests {
        let base = format!("spec.validationTests.{test_name}");
        for (resource, objects) in &test.fixtures {
            if watched.contains(resource.as_str()) {
                continue;
            }
            if resource == NAMESPACE_FIXTURES {
                // Namespace objects for namespace selectors, even when none are watched.
                for (i, object) in objects.iter().enumerate() {
                    if !is_namespace(object) {
                        problems.push(
                            &format!("{base}.fixtures.{resource}[{i}]"),
                            "is not a Namespace (apiVersion v1, kind Namespace): no watched resource is named namespaces, so this list may hold only Namespaces, whose labels namespace selectors match",
                        );
                    }
                }
                continue;
            }
            problems.push(
                &format!("{base}.fixtures.{resource}"),
                &format!(
                    "names no watched resource (known: {})",
                    join_or_none(&watched)
                ),
            );
        }
        if test.assertions.is_empty() && test_name != "_global" {
            problems.push(
                &format!("{base}.assertions"),
                "a test needs at least one assertion",
            );
        }
        for (i, assertion) in test.assertions.iter().enumerate() {
            let path = format!("{base}.assertions[{i}]");
            problems.assertion_target(&path, &assertion.target);
            match assertion.kind {
                AssertionKind::Contains | AssertionKind::NotContains => {
                    problems.regex(&format!("{path}.pattern"), assertion.pattern.as_deref())
                }
                AssertionKind::MatchCount => {
                    problems.regex(&format!("{path}.pattern"), assertion.pattern.as_deref());
                    match assertion.expected.as_deref().map(str::parse::<usize>) {
                        Some(Ok(_)) => {}
                        _ => problems.push(
                            &format!("{path}.expected"),
                            "match_count needs the expected count as a whole number",
                        ),
                    }
                }
                AssertionKind::MatchOrder => {
                    if assertion.patterns.len() < 2 {
                        problems.push(
                            &format!("{path}.patterns"),
                            "match_order needs at least two patterns",
                        );
                    }
                    for (j, pattern) in assertion.patterns.iter().enumerate() {
                        problems.regex(&format!("{path}.patterns[{j}]"), Some(pattern));
                    }
                }
                AssertionKind::Equals => {
                    if assertion.expected.is_none() {
                        problems.push(
                            &format!("{path}.expected"),
                            "equals needs the expected text",
                        );
                    }
                }
                AssertionKind::Jsonpath => {
                    if assertion
                        .jsonpath
                        .as_deref()
                        .is_none_or(|p| p.trim().is_empty())
                    {
                        problems.push(
                            &format!("{path}.jsonpath"),
                            "jsonpath needs a JSONPath to evaluate",
                        );
                    }
                    if assertion.expected.is_none() {
                        problems.push(
                            &format!("{path}.expected"),
                            "jsonpath needs the expected value",
                        );
                    }
                }
                AssertionKind::HaproxyValid | AssertionKind::Deterministic => {}
            }
        }
    }

    match timings {
        Some(timings) if problems.0.is_empty() => Ok(timings),
        _ => Err(problems.0),
    }
}

fn join_or_none(names: &BTreeSet<&str>) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.iter().copied().collect::<Vec<_>>().join(", ")
    }
}

fn is_template_identifier(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[derive(Default)]
struct Problems(Vec<SpecProblem>);

impl Problems {
    fn push(&mut self, path: &str, message: &str) {
        self.0.push(SpecProblem {
            path: path.to_string(),
            message: message.to_string(),
        });
    }

    fn require_name(&mut self, path: &str, value: &str) {
        if value.trim().is_empty() {
            self.push(path, "is required");
        }
    }

    fn regex(&mut self, path: &str, pattern: Option<&str>) {
        match pattern {
            None => self.push(path, "is required for this assertion type"),
            Some(p) => {
                if let Err(e) = regex::Regex::new(p) {
                    self.push(path, &format!("is not a valid regular expression: {e}"));
                }
            }
        }
    }

    fn post_processor(&mut self, path: &str, post: &super::PostProcessor) {
        let super::PostProcessor::RegexReplace { pattern, .. } = post;
        self.regex(&format!("{path}.pattern"), Some(pattern));
    }

    fn assertion_target(&mut self, path: &str, target: &str) {
        if target == "haproxy.cfg"
            || target == crate::pure::assertions::OUTCOMES_TARGET
            || target == crate::pure::assertions::STATUS_TARGET
        {
            return;
        }
        let known = match target.split_once(':') {
            // Templates register files of every kind during a render (`register_file`), so a
            // name need not match a template; the assertion reports a file the render lacks.
            Some(("map" | "file" | "cert" | "crt-list", name)) => !name.is_empty(),
            _ => {
                self.push(&format!("{path}.target"), &format!("'{target}' is not haproxy.cfg, map:NAME, file:NAME, cert:NAME, crt-list:NAME, outcomes or status"));
                return;
            }
        };
        if !known {
            self.push(
                &format!("{path}.target"),
                &format!("'{target}' has an empty file name"),
            );
        }
    }
}
