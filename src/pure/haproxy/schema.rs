//! The schema check: compares a parsed configuration with the keyword tables of the
//! target's HAProxy line (in [`keywords`](super::keywords)) and reports what HAProxy would
//! reject or silently misread: unknown or misplaced directives and options, unknown
//! `bind`/`server` parameters, unknown `balance` algorithms, malformed times and sizes,
//! sections without a name. Submodules add rule families: `expressions` (sample fetches and
//! converters wherever an expression appears, ACL names and matching methods, variable
//! names, the words allowed after an action's arguments; 2.6 targets only, as the sample
//! tables are 2.6's), `inheritance` (what may inherit from a defaults section holding rules,
//! and `from` naming one defined above), `values` (log target ports, `proto`, ignored
//! certificate errors, global SSL default options, the words after a frontend's name),
//! `arguments` (argument counts, enumerated values, ranges, rule actions per family,
//! conditions and the ACLs they name) and `references` (unique proxy and server names,
//! names that must refer to a section or server the configuration defines).
//!
//! The check is strict only where it is certain. Lines inside `.if` blocks are not checked
//! (conditions are not evaluated, and such blocks often hold keywords of other versions),
//! nor are words holding environment references, whose values are only known at run time.
//!
//! [`check_schema_for`] judges for a target's HAProxy version: a section, address family,
//! action or argument that came after 2.6 ([`versions`](super::versions)) is a problem for
//! an older target ("needs HAProxy 3.0 or later; the target runs 2.6") and accepted for one
//! that has it. [`check_schema`] judges for 2.6.

use serde::Serialize;

use super::ast::{Config, Directive, DirectiveKind, Section};
use super::keywords::{
    KeywordStatus, KeywordTables, ParamArity, TIMEOUT_NAMES, is_balance_algorithm,
    parse_size_bytes, parse_time_ms,
};
use super::sections::SectionKind;
use super::versions::{
    BACKEND_QUIC_REFUSED, DOCUMENTED_LINES, HaproxyVersion, LATER_LOG_ARGUMENTS,
    LATER_TCP_SESSION_ACTIONS, certainly_before, later_address_prefix, needs, section_since, since,
};

mod arguments;
mod expressions;
mod inheritance;
mod references;
mod values;

/// One thing HAProxy 2.6 would not accept (or would ignore), with the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaProblem {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Checks `config` against HAProxy 2.6's keywords; an empty list means nothing was found.
pub fn check_schema(config: &Config) -> Vec<SchemaProblem> {
    check_schema_for(config, HaproxyVersion::DEFAULT)
}

/// Checks `config` for a target running HAProxy `target`: HAProxy 2.6's keywords, and what
/// later versions added accepted from the version that added it.
pub fn check_schema_for(config: &Config, target: HaproxyVersion) -> Vec<SchemaProblem> {
    let mut checker = Checker {
        target,
        ..Checker::default()
    };
    for directive in &config.preamble {
        checker.track_block(directive);
    }
    let mut inheritance = inheritance::Inheritance::default();
    for section in &config.sections {
        checker.check_inheritance(&mut inheritance, section, checker.depth == 0);
        if checker.depth == 0 {
            checker.check_header(section);
        }
        for directive in &section.directives {
            checker.track_block(directive);
            if checker.depth == 0 && directive.kind() == DirectiveKind::Statement {
                checker.check_directive(section, directive);
            }
        }
    }
    checker.check_references(config);
    checker.problems
}

/// What `compression` sets, with the line whose manual first lists it.
const COMPRESSION_SETTINGS: &[(&str, HaproxyVersion)] = &[
    ("algo", HaproxyVersion::V2_6),
    ("offload", HaproxyVersion::V2_6),
    ("type", HaproxyVersion::V2_6),
    ("algo-req", HaproxyVersion::V3_0),
    ("algo-res", HaproxyVersion::V3_0),
    ("direction", HaproxyVersion::V3_0),
    ("type-req", HaproxyVersion::V3_0),
    ("type-res", HaproxyVersion::V3_0),
    ("minsize-req", HaproxyVersion::V3_2),
    ("minsize-res", HaproxyVersion::V3_2),
];

/// Server parameters whose value is a time.
const SERVER_TIME_PARAMS: &[&str] = &[
    "agent-inter",
    "downinter",
    "fastinter",
    "inter",
    "slowstart",
];

/// Server parameters whose value is a count that must be at least 1.
const SERVER_POSITIVE_PARAMS: &[&str] = &["fall", "rise"];

/// The syslog facilities a `log` line may name.
pub(super) const LOG_FACILITIES: &[&str] = &[
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "auth2",
    "ftp", "ntp", "audit", "alert", "cron2", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// The rule keywords HAProxy 2.6 refuses in an anonymous `defaults` section.
const RULE_KEYWORDS: &[&str] = &[
    "http-request",
    "http-response",
    "http-after-response",
    "tcp-request",
    "tcp-response",
];

/// `global` directives whose value is a size.
const GLOBAL_SIZE_KEYWORDS: &[&str] = &["tune.bufsize", "tune.maxrewrite"];

/// The first character of `name` that HAProxy 2.6 does not allow in the name of a proxy,
/// userlist, peers section, server or ACL: it allows letters, digits, '-', '_', '.' and ':'.
fn invalid_name_character(name: &str) -> Option<char> {
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
}

#[derive(Default)]
struct Checker {
    problems: Vec<SchemaProblem>,
    /// How many `.if` blocks are open at the current line.
    depth: usize,
    /// The HAProxy version of the target.
    target: HaproxyVersion,
    /// The header line of the section whose `acl` lines `section_acls` holds.
    acl_section_line: usize,
    /// The ACL names the current section has defined so far.
    section_acls: Vec<String>,
    /// The ACL names `defaults` sections define (their rules use them).
    defaults_acls: Vec<String>,
}

impl Checker {
    /// The keyword tables of the target's HAProxy line.
    fn tables(&self) -> KeywordTables {
        KeywordTables::new(self.target)
    }

    fn report(&mut self, line: usize, message: String) {
        self.problems.push(SchemaProblem { line, message });
    }

    fn track_block(&mut self, directive: &Directive) {
        match directive.keyword() {
            ".if" => self.depth += 1,
            ".endif" => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    fn check_header(&mut self, section: &Section) {
        let keyword = section.keyword();
        let introduced = section_since(section.kind);
        if introduced > self.target {
            self.report(
                section.line,
                format!(
                    "unknown keyword '{keyword}': the '{keyword}' section {}",
                    needs(introduced, self.target)
                ),
            );
            return;
        }
        if matches!(
            section.kind,
            SectionKind::Frontend
                | SectionKind::Backend
                | SectionKind::Listen
                | SectionKind::Defaults
                | SectionKind::Userlist
                | SectionKind::Peers
        ) && let Some(name) = section
            .name
            .as_deref()
            .filter(|n| *n != "from" && !n.contains('$'))
            && let Some(bad) = invalid_name_character(name)
        {
            self.report(
                section.line,
                format!(
                    "character '{bad}' is not permitted in '{keyword}' name '{name}' (HAProxy allows letters, digits, '-', '_', '.' and ':')"
                ),
            );
        }
        if section.kind.needs_name() && section.name.is_none() {
            self.report(
                section.line,
                format!("'{}' section needs a name", section.keyword()),
            );
        }
        self.check_header_words(section);
    }

    fn check_directive(&mut self, section: &Section, directive: &Directive) {
        let (modifier, words) = directive.unprefixed();
        let offset = directive.words.len() - words.len();
        let keyword = words.first().map_or("", String::as_str);
        if keyword.is_empty() || directive.word_has_env_ref(offset) {
            return;
        }
        let section_keyword = section.keyword();
        if let Some(modifier) = modifier
            && self.tables().section_keyword(section_keyword, modifier) != KeywordStatus::Allowed
        {
            self.report(
                directive.line,
                format!("'{modifier}' cannot prefix a directive in a '{section_keyword}' section"),
            );
            return;
        }
        if section.kind == SectionKind::Defaults
            && RULE_KEYWORDS.contains(&keyword)
            && section.name.as_deref().is_none_or(|name| name == "from")
        {
            // HAProxy 2.6 refuses rules in an anonymous defaults section: every proxy after
            // it would inherit them, and a rule set shared that way cannot be told apart.
            self.report(
                directive.line,
                format!(
                    "'{keyword}' rules are not allowed in an anonymous 'defaults' section; name the section (defaults NAME) and have the proxies that need them use it with 'from NAME'"
                ),
            );
            return;
        }
        match self.tables().section_keyword(section_keyword, keyword) {
            KeywordStatus::Allowed => {}
            KeywordStatus::Unknown => {
                if let Some(line) = DOCUMENTED_LINES.iter().find(|line| {
                    **line > self.target
                        && KeywordTables::new(**line).section_keyword(section_keyword, keyword)
                            == KeywordStatus::Allowed
                }) {
                    self.report(
                        directive.line,
                        format!(
                            "unknown keyword '{keyword}' in '{section_keyword}' section: it {}",
                            needs(*line, self.target)
                        ),
                    );
                    return;
                }
                if let Some(line) = DOCUMENTED_LINES.iter().rev().find(|line| {
                    **line < self.target
                        && KeywordTables::new(**line).section_keyword(section_keyword, keyword)
                            == KeywordStatus::Allowed
                }) {
                    self.report(
                        directive.line,
                        format!(
                            "'{keyword}' is no longer supported in a '{section_keyword}' section: HAProxy {line} had it, the target runs {}",
                            self.target
                        ),
                    );
                    return;
                }
                let hint = self
                    .tables()
                    .suggest(section_keyword, keyword)
                    .map(|suggestion| format!("; did you mean '{suggestion}'?"))
                    .unwrap_or_default();
                self.report(
                    directive.line,
                    format!("unknown keyword '{keyword}' in '{section_keyword}' section{hint}"),
                );
                return;
            }
            KeywordStatus::NotInSection => {
                self.report(
                    directive.line,
                    format!(
                        "'{keyword}' is not allowed in a '{section_keyword}' section (HAProxy rejects or ignores it there)"
                    ),
                );
                return;
            }
        }
        let value = |index: usize| -> Option<&str> {
            let word = words.get(index)?;
            (!directive.word_has_env_ref(offset + index)).then_some(word.as_str())
        };
        if modifier.is_none() {
            self.check_expressions(section, directive, offset, words);
            self.check_values(section, directive, offset, words);
            self.check_arguments(section, directive, offset, words);
        }
        let is_proxy = section.kind.is_proxy();
        match keyword {
            "option" if is_proxy => {
                if let Some(option) = value(1) {
                    self.check_option(directive.line, section_keyword, option);
                    // option httpchk [<method>] [<uri>] [<version>]
                    // (3.2 takes a host after them.)
                    if option == "httpchk"
                        && modifier.is_none()
                        && let Some(extra) = words.get(5)
                        && certainly_before(self.target, HaproxyVersion::V3_2)
                    {
                        self.report(
                            directive.line,
                            format!(
                                "'option httpchk' takes at most a method, a URI and an HTTP version in HAProxy {}, not '{extra}' (send a Host header with 'http-check send hdr Host ...')",
                                self.target
                            ),
                        );
                    }
                }
            }
            "compression" if is_proxy => {
                if let Some(what) = value(1)
                    && !COMPRESSION_SETTINGS.iter().any(|(setting, since)| {
                        *setting == what && !certainly_before(self.target, *since)
                    })
                {
                    self.report(
                        directive.line,
                        format!(
                            "'compression' expects {} in HAProxy {}, not '{what}'",
                            COMPRESSION_SETTINGS
                                .iter()
                                .filter(|(_, since)| !certainly_before(self.target, *since))
                                .map(|(setting, _)| format!("'{setting}'"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            self.target
                        ),
                    );
                }
            }
            "tcp-request" if is_proxy && value(1) == Some("session") => {
                if let Some(action) = value(2)
                    && let Some(introduced) = since(LATER_TCP_SESSION_ACTIONS, action)
                    && introduced > self.target
                {
                    self.report(
                        directive.line,
                        format!(
                            "'tcp-request session {action}' {}",
                            needs(introduced, self.target)
                        ),
                    );
                }
            }
            "log" if modifier.is_none() => self.check_log(directive.line, words, &value),
            "timeout" => self.check_timeout(directive.line, is_proxy, words, value(1), value(2)),
            "balance" if is_proxy => {
                // `log-hash` and `sticky` balance `mode log` backends (2.9, documented
                // from 3.0).
                if let Some(algorithm) = value(1)
                    && !is_balance_algorithm(algorithm)
                    && (!matches!(algorithm, "log-hash" | "sticky")
                        || certainly_before(self.target, HaproxyVersion::V3_0))
                {
                    self.report(
                        directive.line,
                        format!("'balance' does not allow algorithm '{algorithm}'"),
                    );
                }
            }
            "server" | "default-server" | "server-template" => {
                self.check_server_line(section.kind, directive, offset, words);
            }
            "bind" if matches!(section.kind, SectionKind::Frontend | SectionKind::Listen) => {
                if let Some(address) = value(1) {
                    self.check_address_family(directive.line, "bind", address);
                }
                self.check_bind_line(directive, offset, words);
            }
            size_keyword
                if section.kind == SectionKind::Global
                    && GLOBAL_SIZE_KEYWORDS.contains(&size_keyword) =>
            {
                if let Some(size) = value(1)
                    && parse_size_bytes(size).is_none()
                {
                    self.report(
                        directive.line,
                        format!("'{size_keyword}' needs a size such as 16384 or 16k, got '{size}'"),
                    );
                }
            }
            _ => {}
        }
    }

    /// `log <target> [len <n>] [format <f>] [sample <r>:<s>] <facility> [<level> [<min>]]`:
    /// the facility must be one HAProxy knows (`log global` has none).
    fn check_log<'w>(
        &mut self,
        line: usize,
        words: &'w [String],
        value: &dyn Fn(usize) -> Option<&'w str>,
    ) {
        if words.get(1).is_none_or(|target| target == "global") {
            return;
        }
        if let Some(target) = value(1) {
            self.check_address_family(line, "log", target);
        }
        let mut index = 2;
        while let Some(word) = words.get(index)
            && (matches!(word.as_str(), "len" | "format" | "sample")
                || since(LATER_LOG_ARGUMENTS, word).is_some_and(|from| from <= self.target))
        {
            index += 2;
        }
        if let Some(facility) = value(index)
            && !LOG_FACILITIES.contains(&facility)
        {
            self.report(
                line,
                format!(
                    "unknown log facility '{facility}' (HAProxy 2.6 knows {})",
                    LOG_FACILITIES.join(", ")
                ),
            );
        }
    }

    /// An address (each of a comma-separated list) whose family prefix came in an HAProxy
    /// version later than the target's.
    fn check_address_family(&mut self, line: usize, keyword: &str, addresses: &str) {
        for address in addresses.split(',') {
            if let Some((prefix, introduced)) = later_address_prefix(address)
                && introduced > self.target
            {
                self.report(
                    line,
                    format!(
                        "'{keyword}' address '{address}': the '{prefix}' address family {}",
                        needs(introduced, self.target)
                    ),
                );
                return;
            }
        }
    }

    fn check_option(&mut self, line: usize, section_keyword: &str, option: &str) {
        match self.tables().proxy_option(section_keyword, option) {
            KeywordStatus::Allowed => {}
            KeywordStatus::Unknown => {
                self.report(
                    line,
                    format!("unknown option '{option}' in '{section_keyword}' section"),
                );
            }
            KeywordStatus::NotInSection => self.report(
                line,
                format!(
                    "'option {option}' is not allowed in a '{section_keyword}' section (HAProxy rejects or ignores it there)"
                ),
            ),
        }
    }

    fn check_timeout(
        &mut self,
        line: usize,
        is_proxy: bool,
        words: &[String],
        name: Option<&str>,
        time: Option<&str>,
    ) {
        let Some(name) = name else {
            return;
        };
        if is_proxy && !TIMEOUT_NAMES.contains(&name) {
            self.report(
                line,
                format!(
                    "unknown timeout '{name}'; known timeouts are {}",
                    TIMEOUT_NAMES.join(", ")
                ),
            );
            return;
        }
        match (words.get(2), time) {
            (None, _) => self.report(line, format!("'timeout {name}' needs a time such as 5s")),
            (Some(_), Some(time)) if parse_time_ms(time).is_none() => self.report(
                line,
                format!("'timeout {name}' needs a time such as 5s, got '{time}'"),
            ),
            _ => {}
        }
    }

    /// Checks `server`, `default-server` and `server-template` lines: the required words and
    /// every parameter.
    fn check_server_line(
        &mut self,
        section: SectionKind,
        directive: &Directive,
        offset: usize,
        words: &[String],
    ) {
        let keyword = words[0].as_str();
        let fixed_words = match keyword {
            "server" => 3,
            "server-template" => 4,
            _ => 1,
        };
        let server = match keyword {
            "default-server" => "default-server".to_owned(),
            _ => format!("server '{}'", words.get(1).map_or("", String::as_str)),
        };
        if words.len() < fixed_words {
            // A peers section names its local peer without an address.
            if !(section == SectionKind::Peers && keyword == "server" && words.len() == 2) {
                let needs = if keyword == "server-template" {
                    "a prefix, a count and an address"
                } else {
                    "a name and an address"
                };
                self.report(directive.line, format!("'{keyword}' needs {needs}"));
            }
            return;
        }
        if keyword != "default-server"
            && section != SectionKind::Peers
            && !directive.word_has_env_ref(offset + fixed_words - 1)
            && let Some(address) = words.get(fixed_words - 1)
            && ["quic4@", "quic6@", "quic+"]
                .iter()
                .any(|prefix| address.starts_with(prefix))
            && (BACKEND_QUIC_REFUSED.0..BACKEND_QUIC_REFUSED.1).contains(&self.target)
        {
            self.report(
                directive.line,
                format!(
                    "{server}: address '{address}': QUIC protocol is unsupported on the backend side on HAProxy {} (servers speak QUIC from {})",
                    self.target, BACKEND_QUIC_REFUSED.1
                ),
            );
        }
        let mut index = fixed_words;
        while let Some(param) = words.get(index) {
            let at = offset + index;
            if directive.word_has_env_ref(at) {
                index += 1;
                continue;
            }
            let count = match self.tables().server_param(param) {
                None => {
                    // HAProxy stops at the first unknown parameter; so does the check, as
                    // the words after it may be its values.
                    self.report(
                        directive.line,
                        format!("unknown server parameter '{param}' on {server}"),
                    );
                    return;
                }
                Some(ParamArity::Flag) => 0,
                Some(ParamArity::Value) => 1,
                Some(ParamArity::Values(count)) => usize::from(count),
            };
            if index + count >= words.len() {
                // `set-proxy-v2-tlv-fmt(<id>)` last on the line sends the TLV empty.
                if param.starts_with("set-proxy-v2-tlv-fmt(") {
                    return;
                }
                self.report(
                    directive.line,
                    format!("server parameter '{param}' on {server} needs a value"),
                );
                return;
            }
            if count == 1 && !directive.word_has_env_ref(at + 1) {
                self.check_server_value(directive.line, &server, param, &words[index + 1]);
            }
            index += 1 + count;
        }
    }

    fn check_server_value(&mut self, line: usize, server: &str, param: &str, value: &str) {
        let problem = if SERVER_TIME_PARAMS.contains(&param) {
            parse_time_ms(value)
                .is_none()
                .then(|| format!("'{param}' on {server} needs a time such as 2s, got '{value}'"))
        } else if SERVER_POSITIVE_PARAMS.contains(&param) {
            (!value.parse::<u32>().is_ok_and(|count| count > 0)).then(|| {
                format!("'{param}' on {server} needs a number of at least 1, got '{value}'")
            })
        } else if param == "weight" {
            (!value.parse::<u32>().is_ok_and(|weight| weight <= 256)).then(|| {
                format!("'weight' on {server} must be a number from 0 to 256, got '{value}'")
            })
        } else if param == "init-addr" {
            // A list of methods tried in turn: last, libc, none, or an IP address.
            value
                .split(',')
                .find(|method| {
                    !matches!(*method, "last" | "libc" | "none")
                        && method.parse::<std::net::IpAddr>().is_err()
                })
                .map(|method| {
                    format!(
                        "'init-addr' on {server}: '{method}' is not a method (last, libc, none or an IP address)"
                    )
                })
        } else {
            None
        };
        if let Some(message) = problem {
            self.report(line, message);
        }
    }

    fn check_bind_line(&mut self, directive: &Directive, offset: usize, words: &[String]) {
        let Some(address) = words.get(1) else {
            self.report(
                directive.line,
                "'bind' needs an address such as :80".to_owned(),
            );
            return;
        };
        let mut index = 2;
        while let Some(param) = words.get(index) {
            if directive.word_has_env_ref(offset + index) {
                index += 1;
                continue;
            }
            let count = match self.tables().bind_param(param) {
                None => {
                    self.report(
                        directive.line,
                        format!("unknown bind parameter '{param}' on 'bind {address}'"),
                    );
                    return;
                }
                Some(ParamArity::Flag) => 0,
                Some(ParamArity::Value) => 1,
                Some(ParamArity::Values(count)) => usize::from(count),
            };
            if index + count >= words.len() {
                self.report(
                    directive.line,
                    format!("bind parameter '{param}' on 'bind {address}' needs a value"),
                );
                return;
            }
            index += 1 + count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::haproxy::parse_config;

    /// The schema problems of `text` (for 2.6); the submodules' tests use it too.
    pub(super) fn problems(text: &str) -> Vec<SchemaProblem> {
        check_schema(&parse_config(text).expect("test config parses"))
    }

    /// `text` has exactly one problem, at `line`, whose message holds `message`.
    pub(super) fn assert_one_problem(text: &str, line: usize, message: &str) {
        let found = problems(text);
        assert_eq!(found.len(), 1, "{text:?}: {found:?}");
        assert_eq!(found[0].line, line, "{found:?}");
        assert!(
            found[0].message.contains(message),
            "{found:?} should contain {message:?}"
        );
    }

    #[test]
    fn rules_in_an_anonymous_defaults_section_are_refused_and_allowed_in_a_named_one() {
        assert_one_problem(
            "defaults\n    mode http\n    http-request deny\n",
            3,
            "not allowed in an anonymous 'defaults' section",
        );
        assert_one_problem(
            "defaults base\ndefaults from base\n    tcp-request inspect-delay 5s\n",
            3,
            "anonymous 'defaults'",
        );
        assert!(problems("defaults web\n    mode http\n    http-request deny\n").is_empty());
    }

    #[test]
    fn proxy_names_allow_only_the_characters_haproxy_allows() {
        assert_one_problem(
            "frontend www.example.net:8002/x\n    mode http\n",
            1,
            "character '/' is not permitted in 'frontend' name",
        );
        assert!(problems("backend be_web-1.example:80\n    mode http\n").is_empty());
    }

    #[test]
    fn arity_and_values_of_log_compression_httpchk_and_tcp_session_rules_are_those_of_2_6() {
        assert_one_problem(
            "global\n    log udp@127.0.0.1:514 format rfc5424 profile p local0\n",
            2,
            "unknown log facility 'profile'",
        );
        assert!(problems("global\n    log 127.0.0.1:514 len 8192 format raw local0 info\n    log stdout local7\n").is_empty());
        assert_one_problem(
            "backend be\n    compression direction both\n",
            2,
            "'compression' expects 'algo', 'offload', 'type' in HAProxy 2.6, not 'direction'",
        );
        assert_one_problem(
            "backend be\n    option httpchk GET /status HTTP/1.1 www.example.org\n",
            2,
            "takes at most a method, a URI and an HTTP version",
        );
        assert!(problems("backend be\n    option httpchk GET /status HTTP/1.1\n").is_empty());
        assert_one_problem(
            "frontend fe\n    bind mptcp@[::]:5000\n",
            2,
            "the 'mptcp@' address family needs HAProxy 3.1 or later; the target runs 2.6",
        );
        assert_one_problem(
            "global\n    log backend@mylog local0\n",
            2,
            "the 'backend@' address family needs HAProxy 2.9 or later; the target runs 2.6",
        );
        assert!(problems("frontend fe\n    bind ipv4@127.0.0.1:80,unix@/run/s.sock\n").is_empty());
        assert_one_problem(
            "frontend fe\n    tcp-request session attach-srv be/s1\n",
            2,
            "'tcp-request session attach-srv' needs HAProxy 2.9 or later; the target runs 2.6",
        );
    }

    const VALID: &str = r#"
global
    maxconn 1000
    tune.bufsize 32k
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server "${SERVER_TIMEOUT-30s}"
    no option httplog
    option forwardfor
frontend fe
    bind :80
    bind :443 ssl crt /etc/site.pem alpn h2,http/1.1
    default_backend be
backend be
    balance roundrobin
    default-server inter 2s fall 3 rise 2
    server web1 10.0.0.1:80 weight 10 check maxconn 100
    server web2 10.0.0.2:80 disabled
    server-template srv 3 app.local:80 check
"#;

    #[test]
    fn a_valid_configuration_has_no_problems() {
        assert_eq!(problems(VALID), []);
    }

    #[test]
    fn a_misspelled_directive_is_reported_with_a_suggestion() {
        assert_one_problem(
            "frontend fe\n    bnd :80\n",
            2,
            "unknown keyword 'bnd' in 'frontend' section; did you mean 'bind'?",
        );
        assert_one_problem(
            "backend be\n    sever web1 1.2.3.4:80\n",
            2,
            "unknown keyword 'sever' in 'backend' section",
        );
    }

    #[test]
    fn a_directive_in_the_wrong_section_is_reported() {
        assert_one_problem(
            "defaults\n    bind :80\n",
            2,
            "'bind' is not allowed in a 'defaults' section",
        );
    }

    #[test]
    fn an_unknown_balance_algorithm_is_reported() {
        assert_one_problem(
            "backend be\n    balance fastest\n",
            2,
            "'balance' does not allow algorithm 'fastest'",
        );
        assert_eq!(problems("backend be\n    balance hdr(host)\n"), []);
    }

    #[test]
    fn timeouts_need_a_known_name_and_a_time() {
        assert_one_problem(
            "defaults\n    timeout connect 5x\n",
            2,
            "'timeout connect' needs a time such as 5s, got '5x'",
        );
        assert_one_problem("defaults\n    timeout connect\n", 2, "needs a time");
        assert_one_problem(
            "defaults\n    timeout connec 5s\n",
            2,
            "unknown timeout 'connec'",
        );
        assert_eq!(problems("resolvers dns\n    timeout resolve 1s\n"), []);
    }

    #[test]
    fn server_parameters_are_checked() {
        assert_one_problem(
            "backend be\n    server web1 1.2.3.4:80 wieght 10\n",
            2,
            "unknown server parameter 'wieght' on server 'web1'",
        );
        assert_one_problem(
            "backend be\n    server web1 1.2.3.4:80 inter 2x\n",
            2,
            "'inter' on server 'web1' needs a time",
        );
        assert_one_problem(
            "backend be\n    server web1 1.2.3.4:80 weight 300\n",
            2,
            "from 0 to 256",
        );
        assert_one_problem(
            "backend be\n    server web1 1.2.3.4:80 rise 0\n",
            2,
            "at least 1",
        );
        assert_one_problem(
            "backend be\n    server web1 1.2.3.4:80 check inter\n",
            2,
            "'inter' on server 'web1' needs a value",
        );
        assert_one_problem(
            "backend be\n    server web1\n",
            2,
            "needs a name and an address",
        );
    }

    #[test]
    fn bind_parameters_are_checked() {
        assert_one_problem(
            "frontend fe\n    bind :80 foo\n",
            2,
            "unknown bind parameter 'foo' on 'bind :80'",
        );
        assert_one_problem(
            "frontend fe\n    bind :443 ssl crt\n",
            2,
            "'crt' on 'bind :443' needs a value",
        );
        assert_one_problem("frontend fe\n    bind\n", 2, "needs an address");
    }

    #[test]
    fn options_are_checked() {
        assert_one_problem(
            "frontend fe\n    option httplogg\n",
            2,
            "unknown option 'httplogg'",
        );
        assert_one_problem(
            "frontend fe\n    no option httplogg\n",
            2,
            "unknown option 'httplogg'",
        );
        assert_one_problem(
            "backend be\n    option httplog\n",
            2,
            "'option httplog' is not allowed in a 'backend' section",
        );
    }

    #[test]
    fn a_no_prefix_is_only_accepted_where_haproxy_takes_it() {
        assert_eq!(problems("global\n    no log\n"), []);
        assert_one_problem(
            "userlist users\n    no user admin\n",
            2,
            "'no' cannot prefix a directive in a 'userlist' section",
        );
    }

    #[test]
    fn global_sizes_are_checked() {
        assert_one_problem(
            "global\n    tune.bufsize 16x\n",
            2,
            "'tune.bufsize' needs a size",
        );
    }

    #[test]
    fn sections_haproxy_2_6_does_not_know_are_reported() {
        assert_one_problem(
            "crt-store web\n    load crt a.pem\n",
            1,
            "unknown keyword 'crt-store': the 'crt-store' section needs HAProxy 3.0 or later; the target runs 2.6",
        );
    }

    fn problems_for(text: &str, target: HaproxyVersion) -> Vec<SchemaProblem> {
        check_schema_for(&parse_config(text).expect("test config parses"), target)
    }

    #[test]
    fn what_3_0_and_3_2_added_to_settings_is_accepted_from_that_line_and_refused_before() {
        let lines = |text: &str, target| -> Vec<usize> {
            problems_for(text, target).iter().map(|p| p.line).collect()
        };
        let from_3_0 = "global\n    http-err-codes 400-499\n    http-fail-codes 500-599\nbackend be\n    compression direction both\n    balance log-hash lower\n    server s 127.0.0.1:80 send-proxy-v2 set-proxy-v2-tlv-fmt(0xE1) %[str(x)] set-proxy-v2-tlv-fmt(0xE2)\nbackend logs\n    mode log\n    balance sticky\n";
        assert_eq!(
            lines(from_3_0, HaproxyVersion::V2_6),
            vec![2, 3, 5, 6, 7, 9, 10]
        );
        assert_eq!(lines(from_3_0, HaproxyVersion::V3_0), Vec::<usize>::new());
        let from_3_2 = "global\n    ssl-default-bind-options strict-sni\ndefaults\n    mode http\n    option httpchk GET /health HTTP/1.1 www.example.org\n    option accept-unsafe-violations-in-http-request\nbackend be\n    compression minsize-req 10\n";
        assert_eq!(lines(from_3_2, HaproxyVersion::V3_0), vec![2, 5, 6, 8]);
        assert_eq!(lines(from_3_2, HaproxyVersion::V3_2), Vec::<usize>::new());
    }

    #[test]
    fn a_later_section_is_an_error_for_an_older_target_and_accepted_for_a_newer_one() {
        let traces = "global\n    maxconn 100\ntraces\n    trace h1 sink stderr level user\n";
        assert_eq!(
            problems_for(traces, HaproxyVersion::V2_6),
            [SchemaProblem {
                line: 3,
                message: "unknown keyword 'traces': the 'traces' section needs HAProxy 3.1 or later; the target runs 2.6".into(),
            }]
        );
        assert_eq!(
            problems_for(traces, HaproxyVersion::V3_0)[0].message,
            "unknown keyword 'traces': the 'traces' section needs HAProxy 3.1 or later; the target runs 3.0"
        );
        assert_eq!(problems_for(traces, HaproxyVersion::V3_1), []);
        assert_eq!(problems_for(traces, HaproxyVersion::new(3, 3)), []);
        let crt_store =
            "crt-store web\n    load crt site.pem key site.key\nfrontend fe\n    bind :80\n";
        assert_eq!(problems_for(crt_store, HaproxyVersion::V2_6).len(), 1);
        assert_eq!(problems_for(crt_store, HaproxyVersion::V3_0), []);
        let acme = "acme le\n    directory https://acme.example/dir\n";
        assert_eq!(problems_for(acme, HaproxyVersion::V3_1)[0].line, 1);
        assert_eq!(problems_for(acme, HaproxyVersion::V3_2), []);
        // The check without a version is the one for 2.6.
        assert_eq!(problems(traces), problems_for(traces, HaproxyVersion::V2_6));
    }

    #[test]
    fn later_actions_address_families_and_log_arguments_follow_the_target_version() {
        let attach = "frontend fe\n    tcp-request session attach-srv be/s1\n";
        let found = problems_for(attach, HaproxyVersion::V2_6);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 2);
        assert!(
            found[0].message.contains(
                "'tcp-request session attach-srv' needs HAProxy 2.9 or later; the target runs 2.6"
            ),
            "{found:?}"
        );
        assert_eq!(problems_for(attach, HaproxyVersion::V3_0), []);
        let mptcp = "frontend fe\n    bind mptcp4@0.0.0.0:443\n";
        assert_eq!(problems_for(mptcp, HaproxyVersion::V3_0).len(), 1);
        assert_eq!(problems_for(mptcp, HaproxyVersion::V3_1), []);
        let profile = "global\n    log 127.0.0.1:514 profile p local0\nlog-profile p\n";
        assert_eq!(problems_for(profile, HaproxyVersion::V3_1), []);
        let old = problems_for(profile, HaproxyVersion::V3_0);
        assert_eq!(
            old.iter().map(|p| p.line).collect::<Vec<_>>(),
            [2, 3],
            "{old:?}"
        );
    }

    #[test]
    fn a_quic_server_address_is_refused_by_haproxy_3_2_and_a_quic_bind_is_not() {
        let quic = "frontend fe\n    bind quic4@:443 ssl crt site.pem alpn h3\n    default_backend be\nbackend be\n    server s1 quic4@10.0.0.1:443 ssl verify none\n    server s2 quickstart.example:80\n";
        let found = problems_for(quic, HaproxyVersion::V3_2);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 5);
        assert!(
            found[0].message.contains(
                "QUIC protocol is unsupported on the backend side on HAProxy 3.2 (servers speak QUIC from 3.3)"
            ),
            "{found:?}"
        );
        // 3.0's check takes it (its corpus verdicts say so), and 3.3 speaks QUIC to servers.
        assert_eq!(problems_for(quic, HaproxyVersion::V3_0), []);
        assert_eq!(problems_for(quic, HaproxyVersion::new(3, 3)), []);
    }

    #[test]
    fn rule_sets_response_words_init_addr_methods_and_template_resolvers_are_judged_on_every_line()
    {
        let config = "resolvers dns\n    nameserver ns 127.0.0.1:53\nfrontend fe\n    bind :80\n    tcp-request contents accept\n    http-request deny unles { src 10.0.0.0/8 }\n    http-request deny deny_status 429 content-type text/plain string busy hdr Retry-After 5 if { src 10.0.0.0/8 }\n    http-request return status 200 default-errorfiles\n    default_backend be\nbackend be\n    server-template s 2 web.example:80 resolvers dns1 init-addr last,libc,10.0.0.1\n    server t web.example:80 resolvers dns init-addr last,nothing\n";
        for target in [
            HaproxyVersion::V2_6,
            HaproxyVersion::V3_0,
            HaproxyVersion::V3_2,
        ] {
            let mut found: Vec<(usize, String)> = problems_for(config, target)
                .into_iter()
                .map(|p| (p.line, p.message))
                .collect();
            found.sort();
            let lines: Vec<usize> = found.iter().map(|(line, _)| *line).collect();
            assert_eq!(lines, [5, 6, 11, 12], "{target}: {found:?}");
            assert!(found[0].1.contains("'tcp-request' expects one of 'connection', 'content', 'inspect-delay', 'session' but got 'contents'"), "{found:?}");
            assert!(
                found[1].1.contains(
                    "expects either 'if' or 'unless' followed by a condition but found 'unles'"
                ),
                "{found:?}"
            );
            assert!(
                found[2]
                    .1
                    .contains("'resolvers dns1' names no resolvers section"),
                "{found:?}"
            );
            assert!(
                found[3].1.contains("'nothing' is not a method"),
                "{found:?}"
            );
        }
    }

    #[test]
    fn sections_that_need_a_name_are_reported() {
        assert_one_problem("frontend\n", 1, "'frontend' section needs a name");
        assert_eq!(problems("defaults\n"), []);
    }

    #[test]
    fn lines_inside_conditional_blocks_and_env_values_are_not_judged() {
        assert_eq!(
            problems("frontend fe\n.if version_atleast(3.0)\n    bnd :80\n.endif\n"),
            []
        );
        assert_eq!(
            problems(".if feature(QUIC)\nfrontend fe\n    bnd :80\n.endif\n"),
            []
        );
        assert_eq!(problems("defaults\n    timeout connect \"${T}\"\n"), []);
        assert_one_problem(
            "frontend fe\n.if 1\n.endif\n    bnd :80\n",
            4,
            "unknown keyword 'bnd'",
        );
    }
}
