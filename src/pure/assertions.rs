//! The assertions of a config's `validationTests`, evaluated against one rendered output.
//! Each assertion yields a pass or a failure message a template author can act on (which
//! pattern, which target, what was found instead). Assertions that need more than the text —
//! `haproxy -c`, a second render, the parsed structure — ask an [`AssertionEnvironment`], so
//! this module stays pure and its callers decide how those are done.

use std::borrow::Cow;

use serde::Serialize;

use crate::pure::config::{Assertion, AssertionKind};
use crate::pure::rendered::{AuxKind, RenderedConfig};

/// What assertions may ask of the test runner.
pub trait AssertionEnvironment {
    /// Runs `haproxy -c` on the rendered output; `Err` carries HAProxy's complaint.
    fn haproxy_valid(&mut self, rendered: &RenderedConfig) -> Result<(), String>;
    /// Renders the same inputs again (for `deterministic`).
    fn render_again(&mut self) -> Result<RenderedConfig, String>;
    /// The structured view of a parsed haproxy.cfg as JSON (for `jsonpath`).
    fn structured_view(&mut self, haproxy_cfg: &str) -> Result<serde_json::Value, String>;
}

/// The result of one assertion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssertionOutcome {
    pub kind: AssertionKind,
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub passed: bool,
    /// Why it failed; empty on success.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Evaluates one assertion against a rendered output.
pub fn evaluate(
    assertion: &Assertion,
    rendered: &RenderedConfig,
    env: &mut dyn AssertionEnvironment,
) -> AssertionOutcome {
    let result = evaluate_inner(assertion, rendered, env);
    AssertionOutcome {
        kind: assertion.kind,
        target: assertion.target.clone(),
        description: assertion.description.clone(),
        passed: result.is_ok(),
        message: result.err().unwrap_or_default(),
    }
}

fn evaluate_inner(
    assertion: &Assertion,
    rendered: &RenderedConfig,
    env: &mut dyn AssertionEnvironment,
) -> Result<(), String> {
    match assertion.kind {
        AssertionKind::HaproxyValid => env.haproxy_valid(rendered),
        AssertionKind::Deterministic => {
            let again = env.render_again()?;
            if again == *rendered {
                Ok(())
            } else {
                Err(first_difference(rendered, &again))
            }
        }
        AssertionKind::Contains | AssertionKind::NotContains => {
            let text = &*target_text(rendered, &assertion.target)?;
            let regex = compile(assertion.pattern.as_deref())?;
            let found = regex.find(text);
            match (assertion.kind, found) {
                (AssertionKind::Contains, Some(_)) | (AssertionKind::NotContains, None) => Ok(()),
                (AssertionKind::Contains, None) => Err(format!(
                    "{} does not match /{}/",
                    assertion.target,
                    regex.as_str()
                )),
                (_, None) => Ok(()),
                (_, Some(m)) => Err(format!(
                    "{} matches /{}/ at line {}: '{}'",
                    assertion.target,
                    regex.as_str(),
                    line_of(text, m.start()),
                    line_text(text, m.start())
                )),
            }
        }
        AssertionKind::Equals => {
            let text = &*target_text(rendered, &assertion.target)?;
            let expected = assertion.expected.as_deref().unwrap_or_default();
            if text == expected {
                Ok(())
            } else {
                Err(format!(
                    "{} differs from the expected text: {}",
                    assertion.target,
                    describe_text_difference(expected, text)
                ))
            }
        }
        AssertionKind::MatchCount => {
            let text = &*target_text(rendered, &assertion.target)?;
            let regex = compile(assertion.pattern.as_deref())?;
            let expected: usize = assertion
                .expected
                .as_deref()
                .and_then(|e| e.trim().parse().ok())
                .ok_or_else(|| "match_count needs `expected` as a whole number".to_string())?;
            let found = regex.find_iter(text).count();
            if found == expected {
                Ok(())
            } else {
                Err(format!(
                    "/{}/ matches {found} times in {}, expected {expected}",
                    regex.as_str(),
                    assertion.target
                ))
            }
        }
        AssertionKind::MatchOrder => {
            let text = &*target_text(rendered, &assertion.target)?;
            let mut from = 0;
            for pattern in &assertion.patterns {
                let regex = compile(Some(pattern))?;
                match regex.find_at(text, from) {
                    Some(m) => from = m.end(),
                    None => {
                        return Err(match regex.find(text) {
                            Some(m) => format!(
                                "/{pattern}/ matches only before the previous pattern (line {}) in {}",
                                line_of(text, m.start()),
                                assertion.target
                            ),
                            None => format!("/{pattern}/ does not match {}", assertion.target),
                        });
                    }
                }
            }
            Ok(())
        }
        AssertionKind::Jsonpath => {
            if assertion.target != "haproxy.cfg" {
                return Err(format!(
                    "jsonpath assertions query the structured view of haproxy.cfg; target '{}' is not supported",
                    assertion.target
                ));
            }
            let path_text = assertion.jsonpath.as_deref().unwrap_or_default();
            let path = serde_json_path::JsonPath::parse(path_text)
                .map_err(|e| format!("invalid JSONPath '{path_text}': {e}"))?;
            let view = env.structured_view(&rendered.haproxy_cfg)?;
            let nodes = path.query(&view).all();
            let actual = match nodes.as_slice() {
                [single] => scalar_text(single),
                many => serde_json::Value::Array(many.iter().map(|v| (*v).clone()).collect())
                    .to_string(),
            };
            let expected = assertion.expected.as_deref().unwrap_or_default();
            if actual == expected {
                Ok(())
            } else {
                Err(format!("{path_text} yields {actual}, expected {expected}"))
            }
        }
    }
}

/// The text an assertion target names: `haproxy.cfg`, `map:NAME`, `file:NAME`, `cert:NAME`
/// or `crt-list:NAME`.
pub fn target_text<'r>(rendered: &'r RenderedConfig, target: &str) -> Result<Cow<'r, str>, String> {
    if target == "haproxy.cfg" {
        return Ok(Cow::Borrowed(&rendered.haproxy_cfg));
    }
    if target == OUTCOMES_TARGET {
        return Ok(Cow::Owned(outcomes_text(rendered)));
    }
    if target == STATUS_TARGET {
        let statuses = crate::pure::gateway_status::statuses(&rendered.status_records);
        return serde_yaml_ng::to_string(&statuses)
            .map(Cow::Owned)
            .map_err(|e| format!("the status does not print: {e}"));
    }
    let (kind, name) = target
        .split_once(':')
        .and_then(|(k, n)| AuxKind::parse(k).map(|kind| (kind, n)))
        .ok_or_else(|| format!("unknown target '{target}' (use haproxy.cfg, map:NAME, file:NAME, cert:NAME, crt-list:NAME, outcomes or status)"))?;
    rendered
        .aux(kind, name)
        .map(|f| Cow::Borrowed(f.content.as_str()))
        .ok_or_else(|| {
            let known: Vec<String> = rendered
                .aux_files
                .values()
                .filter(|f| f.kind == kind)
                .map(|f| f.name.clone())
                .collect();
            format!(
                "the render produced no {kind} named '{name}' (it produced: {})",
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            )
        })
}

/// The target whose text is the Gateway API status the render decided, as YAML (the
/// `status` section of `haptor render`).
pub const STATUS_TARGET: &str = "status";

/// The target whose text is what the render recorded about objects (`served`, `ignored`
/// and the annotation helpers).
pub const OUTCOMES_TARGET: &str = "outcomes";

/// One line per object and outcome: `<Kind> <namespace>/<name>: served`, and one
/// `<Kind> <namespace>/<name>: left out: <reason>` line per reason.
fn outcomes_text(rendered: &RenderedConfig) -> String {
    let mut text = String::new();
    for (key, outcome) in rendered.outcomes.iter() {
        if outcome.is_served() {
            text.push_str(&format!("{key}: served\n"));
        }
        for reason in outcome.reasons() {
            text.push_str(&format!("{key}: left out: {reason}\n"));
        }
    }
    text
}

fn compile(pattern: Option<&str>) -> Result<regex::Regex, String> {
    let pattern = pattern.ok_or_else(|| "this assertion needs a `pattern`".to_string())?;
    regex::RegexBuilder::new(pattern)
        .multi_line(true)
        .build()
        .map_err(|e| format!("invalid pattern /{pattern}/: {e}"))
}

fn scalar_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte].matches('\n').count() + 1
}

fn line_text(text: &str, byte: usize) -> &str {
    let start = text[..byte].rfind('\n').map_or(0, |i| i + 1);
    let end = text[byte..].find('\n').map_or(text.len(), |i| byte + i);
    text[start..end].trim()
}

fn describe_text_difference(expected: &str, actual: &str) -> String {
    for (index, (e, a)) in expected.lines().zip(actual.lines()).enumerate() {
        if e != a {
            return format!("line {} is '{a}', expected '{e}'", index + 1);
        }
    }
    format!(
        "it has {} lines, expected {}",
        actual.lines().count(),
        expected.lines().count()
    )
}

fn first_difference(first: &RenderedConfig, second: &RenderedConfig) -> String {
    if first.haproxy_cfg != second.haproxy_cfg {
        return format!(
            "two renders of haproxy.cfg differ: {}",
            describe_text_difference(&first.haproxy_cfg, &second.haproxy_cfg)
        );
    }
    for (path, file) in &first.aux_files {
        match second.aux_files.get(path) {
            Some(other) if other.content == file.content => {}
            Some(other) => {
                return format!(
                    "two renders of {path} differ: {}",
                    describe_text_difference(&file.content, &other.content)
                );
            }
            None => return format!("{path} is missing from the second render"),
        }
    }
    if first.aux_files.len() != second.aux_files.len() {
        return "the second render produced extra files".to_string();
    }
    "two renders recorded different served/ignored outcomes".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::rendered::AuxFile;

    struct FakeEnvironment {
        again: RenderedConfig,
    }

    impl AssertionEnvironment for FakeEnvironment {
        fn haproxy_valid(&mut self, rendered: &RenderedConfig) -> Result<(), String> {
            if rendered.haproxy_cfg.contains("bogus") {
                Err("unknown keyword 'bogus'".into())
            } else {
                Ok(())
            }
        }
        fn render_again(&mut self) -> Result<RenderedConfig, String> {
            Ok(self.again.clone())
        }
        fn structured_view(&mut self, haproxy_cfg: &str) -> Result<serde_json::Value, String> {
            Ok(
                serde_json::json!({ "backends": haproxy_cfg.lines().filter_map(|l| l.strip_prefix("backend ")).map(|n| serde_json::json!({"name": n})).collect::<Vec<_>>() }),
            )
        }
    }

    fn rendered() -> RenderedConfig {
        let mut r = RenderedConfig {
            haproxy_cfg: "global\n  daemon\nbackend web\n  server s1 10.0.0.1:80\nbackend api\n"
                .into(),
            ..Default::default()
        };
        r.aux_files.insert(
            "maps/hosts.map".into(),
            AuxFile {
                kind: AuxKind::Map,
                name: "hosts.map".into(),
                path: "maps/hosts.map".into(),
                content: "a.example web\n".into(),
            },
        );
        r
    }

    fn assertion(kind: AssertionKind) -> Assertion {
        Assertion {
            kind,
            target: "haproxy.cfg".into(),
            description: None,
            pattern: None,
            patterns: vec![],
            expected: None,
            jsonpath: None,
        }
    }

    fn run(a: &Assertion) -> AssertionOutcome {
        let mut env = FakeEnvironment { again: rendered() };
        evaluate(a, &rendered(), &mut env)
    }

    #[test]
    fn contains_passes_on_a_match_and_names_the_pattern_when_missing() {
        let mut a = assertion(AssertionKind::Contains);
        a.pattern = Some(r"server s1 10\.0\.0\.1:80".into());
        assert!(run(&a).passed);
        a.pattern = Some("server s2".into());
        let outcome = run(&a);
        assert!(!outcome.passed);
        assert_eq!(outcome.message, "haproxy.cfg does not match /server s2/");
    }

    #[test]
    fn not_contains_reports_the_offending_line() {
        let mut a = assertion(AssertionKind::NotContains);
        a.pattern = Some("^backend api$".into());
        let outcome = run(&a);
        assert!(!outcome.passed);
        assert!(outcome.message.contains("line 5"), "{}", outcome.message);
    }

    #[test]
    fn match_count_compares_the_number_of_matches() {
        let mut a = assertion(AssertionKind::MatchCount);
        a.pattern = Some("^backend ".into());
        a.expected = Some("2".into());
        assert!(run(&a).passed);
        a.expected = Some("3".into());
        assert_eq!(
            run(&a).message,
            "/^backend / matches 2 times in haproxy.cfg, expected 3"
        );
    }

    #[test]
    fn match_order_fails_when_patterns_appear_in_another_order() {
        let mut a = assertion(AssertionKind::MatchOrder);
        a.patterns = vec!["backend web".into(), "backend api".into()];
        assert!(run(&a).passed);
        a.patterns.reverse();
        let outcome = run(&a);
        assert!(!outcome.passed);
        assert!(
            outcome.message.contains("only before the previous pattern"),
            "{}",
            outcome.message
        );
    }

    #[test]
    fn the_outcomes_target_lists_each_object_served_and_each_reason_left_out() {
        use crate::pure::rendered::{ObjectKey, Outcome};
        let mut rendered = RenderedConfig::default();
        std::sync::Arc::make_mut(&mut rendered.outcomes).insert(
            ObjectKey {
                api_version: "networking.k8s.io/v1".into(),
                kind: "Ingress".into(),
                namespace: "web".into(),
                name: "shop".into(),
            },
            Outcome::PartlyServed(vec!["annotation a/b: bad".into()]),
        );
        assert_eq!(
            target_text(&rendered, OUTCOMES_TARGET).expect("a target"),
            "Ingress web/shop: served\nIngress web/shop: left out: annotation a/b: bad\n"
        );
    }

    #[test]
    fn map_targets_read_the_named_map_and_unknown_ones_list_what_exists() {
        let mut a = assertion(AssertionKind::Contains);
        a.target = "map:hosts.map".into();
        a.pattern = Some("a.example web".into());
        assert!(run(&a).passed);
        a.target = "map:other.map".into();
        assert_eq!(
            run(&a).message,
            "the render produced no map named 'other.map' (it produced: hosts.map)"
        );
    }

    #[test]
    fn equals_points_at_the_first_differing_line() {
        let mut a = assertion(AssertionKind::Equals);
        a.target = "map:hosts.map".into();
        a.expected = Some("a.example api\n".into());
        assert_eq!(
            run(&a).message,
            "map:hosts.map differs from the expected text: line 1 is 'a.example web', expected 'a.example api'"
        );
    }

    #[test]
    fn jsonpath_compares_the_queried_value_with_expected() {
        let mut a = assertion(AssertionKind::Jsonpath);
        a.jsonpath = Some("$.backends[1].name".into());
        a.expected = Some("api".into());
        assert!(run(&a).passed);
        a.expected = Some("web".into());
        assert_eq!(
            run(&a).message,
            "$.backends[1].name yields api, expected web"
        );
    }

    #[test]
    fn deterministic_fails_when_a_second_render_differs() {
        let a = assertion(AssertionKind::Deterministic);
        let mut env = FakeEnvironment { again: rendered() };
        assert!(evaluate(&a, &rendered(), &mut env).passed);
        env.again.haproxy_cfg.push_str("backend extra\n");
        assert!(!evaluate(&a, &rendered(), &mut env).passed);
    }

    #[test]
    fn haproxy_valid_passes_on_the_environments_verdict() {
        let a = assertion(AssertionKind::HaproxyValid);
        let mut env = FakeEnvironment { again: rendered() };
        let mut bad = rendered();
        bad.haproxy_cfg.push_str("bogus\n");
        assert!(evaluate(&a, &rendered(), &mut env).passed);
        assert_eq!(
            evaluate(&a, &bad, &mut env).message,
            "unknown keyword 'bogus'"
        );
    }
}
