//! The schema check's rules for proxies inheriting from `defaults` sections (manual 4,
//! "defaults [<name>] [ from <defaults_name> ]"): `from` must name a defaults section
//! defined earlier, and a defaults section that holds TCP/HTTP rules may only be inherited
//! by frontends or by backends (not both, never by a `listen` or another defaults section),
//! not by backends if it holds `tcp-request connection` or `tcp-request session` rules, and
//! not by frontends if it holds `tcp-response content` rules.
//!
//! A proxy without `from` inherits from the last defaults section before it; a defaults
//! section without `from` inherits from none. Rules inside `.if` blocks are not counted, so
//! the check never reports rules that a false condition removed.

use super::super::ast::{DirectiveKind, Section};
use super::super::sections::SectionKind;
use super::Checker;

/// What a defaults section defines that decides who may inherit from it.
#[derive(Debug, Clone)]
struct DefaultsRules {
    name: Option<String>,
    line: usize,
    /// Any `http-request`, `http-response`, `http-after-response`, `tcp-request
    /// connection|session|content` or `tcp-response content` rule.
    any_rules: bool,
    /// `tcp-request connection` or `tcp-request session` rules.
    connection_rules: bool,
    /// `tcp-response content` rules.
    response_content_rules: bool,
    /// The kind of the first frontend or backend that inherited it.
    used_by: Option<SectionKind>,
    /// False for a section inside a conditional block, which may not exist, or whose name
    /// comes from the environment.
    judged: bool,
    /// The line and words of the first `track-sc<n>` rule without `table <name>`: HAProxy
    /// looks for the table in the defaults section itself, which cannot have one, as soon as
    /// a proxy inherits the rule. Reported once.
    untabled_track: Option<(usize, String)>,
}

impl DefaultsRules {
    fn of(section: &Section, judged: bool) -> DefaultsRules {
        let mut rules = DefaultsRules {
            name: own_name(section),
            line: section.line,
            any_rules: false,
            connection_rules: false,
            response_content_rules: false,
            used_by: None,
            judged: judged && !section.header_spans.iter().any(|span| span.word == 1),
            untabled_track: None,
        };
        if !rules.judged {
            return rules;
        }
        let mut depth = 0usize;
        for directive in &section.directives {
            match directive.keyword() {
                ".if" => depth += 1,
                ".endif" => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > 0 || directive.kind() != DirectiveKind::Statement {
                continue;
            }
            let words = &directive.words;
            let ruleset = words.get(1).map_or("", String::as_str);
            let action_at = if directive.keyword().starts_with("tcp-") {
                2
            } else {
                1
            };
            if rules.untabled_track.is_none()
                && words
                    .get(action_at)
                    .is_some_and(|action| action.starts_with("track-sc"))
                && !words
                    .iter()
                    .skip(action_at)
                    .take_while(|word| *word != "if" && *word != "unless")
                    .any(|word| word == "table")
            {
                rules.untabled_track = Some((directive.line, words[..=action_at].join(" ")));
            }
            match directive.keyword() {
                "http-request" | "http-response" | "http-after-response" => {
                    rules.any_rules = true;
                }
                "tcp-request" if matches!(ruleset, "connection" | "session") => {
                    rules.any_rules = true;
                    rules.connection_rules = true;
                }
                "tcp-request" if ruleset == "content" => rules.any_rules = true,
                "tcp-response" if ruleset == "content" => {
                    rules.any_rules = true;
                    rules.response_content_rules = true;
                }
                _ => {}
            }
        }
        rules
    }
}

/// The defaults sections seen so far, in file order.
#[derive(Debug, Default)]
pub(super) struct Inheritance {
    defaults: Vec<DefaultsRules>,
    /// Index in `defaults` of the last one, which a proxy without `from` inherits from;
    /// `None` before the first.
    last: Option<usize>,
}

/// The name after `from` in the header, also for `defaults from NAME` (a defaults section
/// without a name of its own, which the parser reads as named "from").
fn inherited_name(section: &Section) -> Option<&str> {
    match (
        section.kind,
        section.name.as_deref(),
        section.args.as_slice(),
    ) {
        (SectionKind::Defaults, Some("from"), [name, ..]) => Some(name),
        _ => section.from_defaults(),
    }
}

/// The section's own name, `None` for `defaults from NAME`.
fn own_name(section: &Section) -> Option<String> {
    match (
        section.kind,
        section.name.as_deref(),
        section.args.as_slice(),
    ) {
        (SectionKind::Defaults, Some("from"), [_, ..]) => None,
        _ => section.name.clone(),
    }
}

impl Checker {
    /// Checks what the proxy section `section` inherits, then records it if it is a defaults
    /// section. `judged` is false for a header inside a conditional block.
    pub(super) fn check_inheritance(
        &mut self,
        inheritance: &mut Inheritance,
        section: &Section,
        judged: bool,
    ) {
        if !section.kind.is_proxy() {
            return;
        }
        let from_unknown = section.header_spans.iter().any(|span| span.word >= 2);
        let parent = if !judged || from_unknown {
            None
        } else if let Some(from) = inherited_name(section) {
            let found = inheritance
                .defaults
                .iter()
                .rposition(|defaults| defaults.name.as_deref() == Some(from));
            if found.is_none() && !inheritance.defaults.iter().any(|defaults| !defaults.judged) {
                self.report(
                    section.line,
                    format!(
                        "defaults section '{from}' not found for {} (a 'from' must name a defaults section defined above)",
                        own_name(section).map_or_else(
                            || section.keyword().to_owned(),
                            |name| format!("{} '{name}'", section.keyword())
                        )
                    ),
                );
            }
            found
        } else if section.kind == SectionKind::Defaults {
            None
        } else {
            inheritance.last
        };
        if let Some(index) = parent {
            self.check_inherited_rules(&mut inheritance.defaults[index], section);
        }
        if section.kind == SectionKind::Defaults {
            inheritance
                .defaults
                .push(DefaultsRules::of(section, judged));
            inheritance.last = Some(inheritance.defaults.len() - 1);
        }
    }

    fn check_inherited_rules(&mut self, defaults: &mut DefaultsRules, section: &Section) {
        if !defaults.any_rules {
            return;
        }
        if let Some((track_line, rule)) = defaults.untabled_track.take() {
            self.report(
                track_line,
                format!(
                    "'{rule}' in defaults section {} names no 'table <name>': HAProxy then looks for a stick-table in the defaults section itself, which cannot have one, and refuses the rule once a proxy inherits it (the {} at line {})",
                    defaults
                        .name
                        .as_deref()
                        .map_or_else(|| "(unnamed)".to_owned(), |name| format!("'{name}'")),
                    section.keyword(),
                    section.line
                ),
            );
        }
        let at = format!("defaults section at line {}", defaults.line);
        let line = section.line;
        match section.kind {
            SectionKind::Defaults => self.report(
                line,
                format!("a defaults section cannot inherit from a defaults section defining TCP/HTTP rules ({at})"),
            ),
            SectionKind::Listen => self.report(
                line,
                format!("a listen section cannot inherit from a defaults section defining TCP/HTTP rules ({at}); use it from frontends or from backends only"),
            ),
            kind @ (SectionKind::Frontend | SectionKind::Backend) => {
                match defaults.used_by {
                    None => defaults.used_by = Some(kind),
                    Some(first) if first != kind => self.report(
                        line,
                        format!("frontends and backends cannot inherit from the same defaults section if it defines TCP/HTTP rules ({at}, already inherited by a {})", first.keyword()),
                    ),
                    Some(_) => {}
                }
                if kind == SectionKind::Backend && defaults.connection_rules {
                    self.report(
                        line,
                        format!("a backend section cannot inherit from a defaults section defining 'tcp-request connection' or 'tcp-request session' rules ({at})"),
                    );
                }
                if kind == SectionKind::Frontend && defaults.response_content_rules {
                    self.report(
                        line,
                        format!("a frontend section cannot inherit from a defaults section defining 'tcp-response content' rules ({at})"),
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SchemaProblem, check_schema};
    use crate::pure::haproxy::parse_config;

    fn problems(text: &str) -> Vec<SchemaProblem> {
        check_schema(&parse_config(text).expect("test config parses"))
    }

    fn lines(text: &str) -> Vec<usize> {
        problems(text).iter().map(|problem| problem.line).collect()
    }

    #[test]
    fn a_defaults_section_with_rules_is_inherited_by_frontends_or_backends_only() {
        let rules =
            "defaults invalid\n    tcp-request inspect-delay 5s\n    tcp-request content accept\n";
        assert_eq!(lines(&format!("{rules}defaults from invalid\n")), [4]);
        assert_eq!(lines(&format!("{rules}listen li from invalid\n")), [4]);
        assert_eq!(
            lines(&format!(
                "{rules}frontend fe from invalid\n    bind :80\nbackend be from invalid\n"
            )),
            [6]
        );
        assert_eq!(
            lines(&format!(
                "{rules}frontend a\n    bind :80\nfrontend b\n    bind :81\n"
            )),
            [] as [usize; 0],
            "proxies without 'from' inherit from the last defaults section"
        );
        assert_eq!(
            lines(&format!("{rules}listen li\n    bind :80\n")),
            [4],
            "a listen without 'from' inherits too"
        );
        assert_eq!(
            lines(&format!(
                "{rules}defaults\n    mode tcp\nlisten li\n    bind :80\n"
            )),
            [] as [usize; 0],
            "a defaults section without 'from' inherits nothing"
        );
    }

    #[test]
    fn connection_rules_are_not_inherited_by_backends_nor_response_rules_by_frontends() {
        let found = problems(
            "defaults invalid\n    tcp-request connection accept\nbackend be from invalid\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .contains("'tcp-request connection' or 'tcp-request session'")
        );
        let found = problems(
            "defaults invalid\n    tcp-response content accept\nfrontend fe from invalid\n    bind :80\n",
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 3);
        assert!(found[0].message.contains("'tcp-response content'"));
    }

    #[test]
    fn a_tracking_rule_without_table_in_a_defaults_section_is_refused_once_inherited() {
        let defaults = "defaults invalid\n    mode http\n    http-request track-sc0 src\n";
        assert_eq!(lines(defaults), [] as [usize; 0], "not inherited yet");
        let found = problems(&format!(
            "{defaults}backend be\n    stick-table type ip size 1k\n"
        ));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 3);
        assert!(
            found[0].message.contains("names no 'table <name>'"),
            "{found:?}"
        );
        assert_eq!(
            lines(
                "defaults web\n    tcp-request content track-sc1 src table t if TRUE\nbackend t\n    stick-table type ip size 1k\n"
            ),
            [] as [usize; 0]
        );
    }

    #[test]
    fn from_names_a_defaults_section_defined_above() {
        let found = problems("frontend fe from nope\n    bind :80\ndefaults nope\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .contains("defaults section 'nope' not found")
        );
        assert_eq!(
            lines("defaults web\nfrontend fe from web\n    bind :80\n"),
            [] as [usize; 0]
        );
        assert_eq!(
            lines(".if defined(WEB)\ndefaults web\n.endif\nfrontend fe from web\n    bind :80\n"),
            [] as [usize; 0],
            "a defaults section in a conditional block may exist"
        );
    }
}
