//! The schema check's rules for the shape of a directive's arguments: how many a directive
//! takes (one whole number for `maxconn` and its kind, a header name and a value for
//! `set-header`, a `type` for a stick table, ...), the values an enumerated argument may
//! take (`mode`, `hash-type`, `http-reuse`, `cookie` options, compression algorithms, log
//! levels, `verify`), ranges (ports, IPv4 prefix lengths, status codes), the action names of
//! each rule family, and conditions: the word that opens one, balanced braces, and named
//! ACLs that an `acl` line above (or a predefined ACL) defines.

use super::super::ast::{Directive, Section};
use super::super::sections::SectionKind;
use super::super::versions::{HaproxyVersion, certainly_before};
use super::Checker;

/// Global directives that take exactly one whole number.
const GLOBAL_NUMBERS: &[&str] = &[
    "maxcompcpuusage",
    "maxcomprate",
    "maxconn",
    "maxconnrate",
    "maxpipes",
    "maxsessrate",
    "maxsslconn",
    "maxsslrate",
    "nbthread",
    "spread-checks",
    "tune.http.maxhdr",
    "tune.maxaccept",
    "tune.maxpollevents",
    "ulimit-n",
];

/// Proxy directives that take exactly one whole number.
const PROXY_NUMBERS: &[&str] = &[
    "backlog",
    "fullconn",
    "hash-balance-factor",
    "max-keep-alive-queue",
    "maxconn",
    "retries",
];

/// The proxy modes, with the line that brought each.
const PROXY_MODES: &[(&str, HaproxyVersion)] = &[
    ("http", HaproxyVersion::V2_6),
    ("tcp", HaproxyVersion::V2_6),
    ("log", HaproxyVersion::V2_9),
    ("spop", HaproxyVersion::V3_1),
];

/// `hash-type` methods.
const HASH_METHODS: &[&str] = &["consistent", "map-based"];

/// `http-reuse` strategies.
const HTTP_REUSE: &[&str] = &["aggressive", "always", "never", "safe"];

/// `cookie` options after the name; those in [`COOKIE_VALUE_OPTIONS`] take a value.
const COOKIE_OPTIONS: &[&str] = &[
    "dynamic", "httponly", "indirect", "insert", "nocache", "postonly", "prefix", "preserve",
    "rewrite", "secure",
];

/// `cookie` options that take a value.
const COOKIE_VALUE_OPTIONS: &[&str] = &["attr", "domain", "maxidle", "maxlife"];

/// Compression algorithms (`compression algo ...`).
const COMPRESSION_ALGORITHMS: &[&str] = &["deflate", "gzip", "identity", "raw-deflate"];

/// Syslog levels (a `log` line's level and minimum level).
const LOG_LEVELS: &[&str] = &[
    "alert", "crit", "debug", "emerg", "err", "info", "notice", "warning",
];

/// The status codes HAProxy makes its own error pages for (`errorfile`, `deny_status`),
/// with the line that brought each.
const ERROR_STATUSES: &[(u16, HaproxyVersion)] = &[
    (200, HaproxyVersion::V2_6),
    (400, HaproxyVersion::V2_6),
    (401, HaproxyVersion::V2_6),
    (403, HaproxyVersion::V2_6),
    (404, HaproxyVersion::V2_6),
    (405, HaproxyVersion::V2_6),
    (407, HaproxyVersion::V2_6),
    (408, HaproxyVersion::V2_6),
    (410, HaproxyVersion::V2_6),
    (413, HaproxyVersion::V2_6),
    (414, HaproxyVersion::V3_2),
    (421, HaproxyVersion::V2_6),
    (422, HaproxyVersion::V2_6),
    (425, HaproxyVersion::V2_6),
    (429, HaproxyVersion::V2_6),
    (500, HaproxyVersion::V2_6),
    (501, HaproxyVersion::V2_6),
    (502, HaproxyVersion::V2_6),
    (503, HaproxyVersion::V2_6),
    (504, HaproxyVersion::V2_6),
];

/// The ACLs HAProxy predefines (manual 7.4).
const PREDEFINED_ACLS: &[&str] = &[
    "FALSE",
    "HTTP",
    "HTTP_1.0",
    "HTTP_1.1",
    "HTTP_2.0",
    "HTTP_3.0",
    "HTTP_CONTENT",
    "HTTP_URL_ABS",
    "HTTP_URL_SLASH",
    "HTTP_URL_STAR",
    "LOCALHOST",
    "METH_CONNECT",
    "METH_DELETE",
    "METH_GET",
    "METH_HEAD",
    "METH_OPTIONS",
    "METH_POST",
    "METH_PUT",
    "METH_TRACE",
    "RDP_COOKIE",
    "REQ_CONTENT",
    "TRUE",
    "WAIT_END",
];

/// Actions of `http-request` rules on any documented line (2.6's keyword list, the action
/// matrices of 3.0 and 3.2).
const HTTP_REQUEST_ACTIONS: &[&str] = &[
    "add-acl",
    "add-header",
    "allow",
    "auth",
    "cache-use",
    "capture",
    "del-acl",
    "del-header",
    "del-map",
    "deny",
    "disable-l7-retry",
    "do-log",
    "do-resolve",
    "early-hint",
    "normalize-uri",
    "pause",
    "redirect",
    "reject",
    "replace-header",
    "replace-path",
    "replace-pathq",
    "replace-uri",
    "replace-value",
    "return",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "send-spoe-group",
    "set-bandwidth-limit",
    "set-bc-mark",
    "set-bc-tos",
    "set-dst",
    "set-dst-port",
    "set-fc-mark",
    "set-fc-tos",
    "set-header",
    "set-log-level",
    "set-map",
    "set-mark",
    "set-method",
    "set-nice",
    "set-path",
    "set-pathq",
    "set-priority-class",
    "set-priority-offset",
    "set-query",
    "set-retries",
    "set-src",
    "set-src-port",
    "set-timeout",
    "set-tos",
    "set-uri",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "strict-mode",
    "tarpit",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "unset-var",
    "use-service",
    "wait-for-body",
    "wait-for-handshake",
];

/// Actions of `http-response` rules on any documented line.
const HTTP_RESPONSE_ACTIONS: &[&str] = &[
    "add-acl",
    "add-header",
    "allow",
    "cache-store",
    "capture",
    "del-acl",
    "del-header",
    "del-map",
    "deny",
    "do-log",
    "pause",
    "redirect",
    "replace-header",
    "replace-value",
    "return",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "send-spoe-group",
    "set-bandwidth-limit",
    "set-fc-mark",
    "set-fc-tos",
    "set-header",
    "set-log-level",
    "set-map",
    "set-mark",
    "set-nice",
    "set-status",
    "set-timeout",
    "set-tos",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "strict-mode",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "unset-var",
    "wait-for-body",
];

/// Actions of `http-after-response` rules on any documented line.
const HTTP_AFTER_RESPONSE_ACTIONS: &[&str] = &[
    "add-header",
    "allow",
    "capture",
    "del-header",
    "del-map",
    "do-log",
    "replace-header",
    "replace-value",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "set-header",
    "set-log-level",
    "set-map",
    "set-status",
    "set-var",
    "set-var-fmt",
    "strict-mode",
    "unset-var",
];

/// Actions of `tcp-request connection` rules on any documented line.
const TCP_CONNECTION_ACTIONS: &[&str] = &[
    "accept",
    "do-log",
    "expect-netscaler-cip",
    "expect-proxy",
    "reject",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "set-dst",
    "set-dst-port",
    "set-fc-mark",
    "set-fc-tos",
    "set-mark",
    "set-src",
    "set-src-port",
    "set-tos",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "unset-var",
];

/// Actions of `tcp-request session` rules on any documented line.
const TCP_SESSION_ACTIONS: &[&str] = &[
    "accept",
    "attach-srv",
    "do-log",
    "reject",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "set-dst",
    "set-dst-port",
    "set-fc-mark",
    "set-fc-tos",
    "set-mark",
    "set-src",
    "set-src-port",
    "set-tos",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "unset-var",
];

/// Actions of `tcp-request content` rules on any documented line.
const TCP_CONTENT_ACTIONS: &[&str] = &[
    "accept",
    "capture",
    "do-log",
    "do-resolve",
    "reject",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "send-spoe-group",
    "set-bandwidth-limit",
    "set-bc-mark",
    "set-bc-tos",
    "set-dst",
    "set-dst-port",
    "set-fc-mark",
    "set-fc-tos",
    "set-log-level",
    "set-mark",
    "set-nice",
    "set-priority-class",
    "set-priority-offset",
    "set-retries",
    "set-src",
    "set-src-port",
    "set-tos",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "switch-mode",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "unset-var",
    "use-service",
];

/// Actions of `tcp-response content` rules on any documented line.
const TCP_RESPONSE_ACTIONS: &[&str] = &[
    "accept",
    "close",
    "do-log",
    "reject",
    "sc-add-gpc",
    "sc-inc-gpc",
    "sc-inc-gpc0",
    "sc-inc-gpc1",
    "sc-set-gpt",
    "sc-set-gpt0",
    "send-spoe-group",
    "set-bandwidth-limit",
    "set-fc-mark",
    "set-fc-tos",
    "set-log-level",
    "set-mark",
    "set-nice",
    "set-tos",
    "set-var",
    "set-var-fmt",
    "silent-drop",
    "unset-var",
];

/// HTTP rule actions with how many words they need after their name (before a condition).
const HTTP_ACTION_ARGUMENTS: &[(&str, usize)] = &[
    ("add-header", 2),
    ("del-header", 1),
    ("replace-header", 3),
    ("replace-path", 2),
    ("replace-pathq", 2),
    ("replace-uri", 2),
    ("replace-value", 3),
    ("set-header", 2),
    ("set-method", 1),
    ("set-path", 1),
    ("set-pathq", 1),
    ("set-query", 1),
    ("set-status", 1),
    ("set-uri", 1),
];

/// The words an HTTP `deny`, `tarpit` or `return` takes to shape its response, with the
/// number of values each takes (`return` has no `deny_status`); the same on 2.6, 3.0 and 3.2.
const RESPONSE_ACTION_WORDS: &[(&str, usize)] = &[
    ("content-type", 1),
    ("default-errorfiles", 0),
    ("deny_status", 1),
    ("errorfile", 1),
    ("errorfiles", 1),
    ("file", 1),
    ("hdr", 2),
    ("lf-file", 1),
    ("lf-string", 1),
    ("status", 1),
    ("string", 1),
];

/// Whether `word` is a whole number.
fn is_number(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|byte| byte.is_ascii_digit())
}

/// The rule family a directive's words open, and where its action is.
fn rule_family(words: &[String]) -> Option<(&'static str, &'static [&'static str], usize)> {
    match (words.first()?.as_str(), words.get(1).map(String::as_str)) {
        ("http-request", _) => Some(("http-request", HTTP_REQUEST_ACTIONS, 1)),
        ("http-response", _) => Some(("http-response", HTTP_RESPONSE_ACTIONS, 1)),
        ("http-after-response", _) => Some(("http-after-response", HTTP_AFTER_RESPONSE_ACTIONS, 1)),
        ("tcp-request", Some("connection")) => {
            Some(("tcp-request connection", TCP_CONNECTION_ACTIONS, 2))
        }
        ("tcp-request", Some("session")) => Some(("tcp-request session", TCP_SESSION_ACTIONS, 2)),
        ("tcp-request", Some("content")) => Some(("tcp-request content", TCP_CONTENT_ACTIONS, 2)),
        ("tcp-response", Some("content")) => {
            Some(("tcp-response content", TCP_RESPONSE_ACTIONS, 2))
        }
        _ => None,
    }
}

/// The largest port number.
const MAX_PORT: u32 = 65_535;

/// The port of an `address:port` (or `:port`, or a `port-port` range's ends) that exceeds
/// 65535, if any.
fn port_out_of_range(address: &str) -> Option<&str> {
    if address.contains('@') && !address.starts_with("ipv4@") && !address.starts_with("ipv6@") {
        return None;
    }
    let (_, ports) = address.rsplit_once(':')?;
    ports
        .split('-')
        .find(|port| is_number(port) && port.parse::<u32>().map_or(true, |p| p > MAX_PORT))
}

/// What is wrong with an IPv4 address with a prefix length (`10.0.0.0/33`), if anything.
fn bad_ipv4_network(pattern: &str) -> Option<String> {
    let (address, prefix) = pattern.split_once('/')?;
    let octets: Vec<&str> = address.split('.').collect();
    if octets.len() != 4 || !octets.iter().all(|octet| is_number(octet)) {
        return None;
    }
    if octets
        .iter()
        .any(|octet| octet.parse::<u16>().map_or(true, |value| value > 255))
    {
        return Some(format!(
            "'{pattern}' is not an IPv4 address (an octet above 255)"
        ));
    }
    if is_number(prefix) && prefix.parse::<u16>().map_or(true, |length| length > 32) {
        return Some(format!(
            "'{pattern}' has a prefix length above 32, the most an IPv4 network has"
        ));
    }
    None
}

/// Where a condition starts in a rule's words: the index of `if` or `unless`.
fn condition_start(words: &[String]) -> Option<usize> {
    words
        .iter()
        .position(|word| word == "if" || word == "unless")
}

impl Checker {
    /// Checks the shape of a directive's arguments (without `no`/`default` prefix;
    /// `offset` is the index of `words[0]` in the directive).
    pub(super) fn check_arguments(
        &mut self,
        section: &Section,
        directive: &Directive,
        offset: usize,
        words: &[String],
    ) {
        if self.acl_section_line != section.line {
            self.acl_section_line = section.line;
            self.section_acls.clear();
        }
        if (0..words.len()).any(|index| directive.word_has_env_ref(offset + index)) {
            return;
        }
        let line = directive.line;
        let keyword = words[0].as_str();
        let global = section.kind == SectionKind::Global;
        let proxy = section.kind.is_proxy();
        if (global && GLOBAL_NUMBERS.contains(&keyword))
            || (proxy && PROXY_NUMBERS.contains(&keyword))
        {
            self.check_one_number(line, keyword, words);
        }
        if proxy {
            self.check_proxy_arguments(section, line, words);
        }
        if proxy && matches!(keyword, "tcp-request" | "tcp-response") {
            let rule_sets: &[&str] = if keyword == "tcp-request" {
                &["connection", "content", "inspect-delay", "session"]
            } else {
                &["content", "inspect-delay"]
            };
            let named = words.get(1).map_or("", String::as_str);
            if !rule_sets.contains(&named) {
                self.report(
                    line,
                    format!(
                        "'{keyword}' expects one of {} but got '{named}'",
                        rule_sets
                            .iter()
                            .map(|set| format!("'{set}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        match keyword {
            "log" => self.check_log_levels(line, words),
            "bind" | "server" => {
                let address = if keyword == "bind" { 1 } else { 2 };
                if let Some(port) = words.get(address).and_then(|a| port_out_of_range(a)) {
                    self.report(
                        line,
                        format!("'{keyword}' port {port} is out of range (1 to 65535)"),
                    );
                }
                self.check_verify(line, keyword, words);
            }
            "default-server" => self.check_verify(line, keyword, words),
            _ => {}
        }
    }

    fn check_one_number(&mut self, line: usize, keyword: &str, words: &[String]) {
        match words.get(1) {
            None => self.report(line, format!("'{keyword}' needs a whole number")),
            Some(value) if !is_number(value) => self.report(
                line,
                format!("'{keyword}' needs a whole number, got '{value}'"),
            ),
            Some(_) => {
                if let Some(extra) = words.get(2) {
                    self.report(
                        line,
                        format!(
                            "'{keyword}' takes one whole number; '{extra}' is one word too many"
                        ),
                    );
                }
            }
        }
    }

    fn check_proxy_arguments(&mut self, section: &Section, line: usize, words: &[String]) {
        let keyword = words[0].as_str();
        let word = |index: usize| words.get(index).map(String::as_str);
        match keyword {
            "acl" => {
                if let Some(name) = word(1) {
                    self.section_acls.push(name.to_owned());
                    if section.kind == SectionKind::Defaults {
                        self.defaults_acls.push(name.to_owned());
                    }
                }
                for pattern in words.iter().skip(3) {
                    if let Some(problem) = bad_ipv4_network(pattern) {
                        self.report(line, format!("acl '{}': {problem}", word(1).unwrap_or("")));
                    }
                }
            }
            "mode" => match word(1) {
                None => self.report(line, "'mode' needs 'http' or 'tcp'".to_owned()),
                Some(mode) => match PROXY_MODES.iter().find(|(name, _)| *name == mode) {
                    None => self.report(
                        line,
                        format!("unknown proxy mode '{mode}' (HAProxy knows 'http' and 'tcp')"),
                    ),
                    Some((_, since)) if certainly_before(self.target, *since) => self.report(
                        line,
                        format!(
                            "proxy mode '{mode}' needs HAProxy {since} or later; the target runs {}",
                            self.target
                        ),
                    ),
                    Some(_) => {}
                },
            },
            "hash-type" => match word(1) {
                Some(method) if !HASH_METHODS.contains(&method) => self.report(
                    line,
                    format!("'hash-type' takes 'consistent' or 'map-based', not '{method}'"),
                ),
                None => self.report(
                    line,
                    "'hash-type' needs 'consistent' or 'map-based'".to_owned(),
                ),
                _ => {}
            },
            "http-reuse" => {
                if let Some(strategy) = word(1).filter(|s| !HTTP_REUSE.contains(s)) {
                    self.report(
                        line,
                        format!(
                            "'http-reuse' takes {}, not '{strategy}'",
                            HTTP_REUSE.join(", ")
                        ),
                    );
                }
            }
            "cookie" => self.check_cookie(line, words),
            "compression" => {
                if matches!(word(1), Some("algo" | "algo-req" | "algo-res")) {
                    for algorithm in words.iter().skip(2) {
                        if !COMPRESSION_ALGORITHMS.contains(&algorithm.as_str()) {
                            self.report(
                                line,
                                format!(
                                    "'{algorithm}' is not a compression algorithm (HAProxy knows {})",
                                    COMPRESSION_ALGORITHMS.join(", ")
                                ),
                            );
                        }
                    }
                }
            }
            "balance" if matches!(word(1), Some("url_param" | "hash")) && word(2).is_none() => {
                let what = if word(1) == Some("hash") {
                    "an expression"
                } else {
                    "a URL parameter name"
                };
                self.report(
                    line,
                    format!("'balance {}' needs {what}", word(1).unwrap_or("")),
                );
            }
            "stick-table" if !words.iter().any(|w| w == "type") => {
                self.report(
                    line,
                    "'stick-table' needs a 'type' (ip, ipv6, integer, string or binary)".to_owned(),
                );
            }
            "default_backend" => {
                if let Some(extra) = word(2) {
                    self.report(
                        line,
                        format!("'default_backend' takes one backend name; '{extra}' is one word too many (a condition needs 'use_backend')"),
                    );
                }
            }
            "use_backend" | "use-server" => {
                if let Some(next) = word(2).filter(|w| *w != "if" && *w != "unless") {
                    self.report(
                        line,
                        format!("'{keyword}' expects 'if' or 'unless' after the name, not '{next}'"),
                    );
                }
            }
            "errorfile" | "errorloc" | "errorloc302" | "errorloc303" => {
                if let Some(code) = word(1) {
                    self.check_error_status(line, keyword, code);
                }
            }
            "redirect" => self.check_redirect(line, keyword, &words[1..]),
            "timeout" => {
                if let Some(extra) = word(3) {
                    self.report(
                        line,
                        format!(
                            "'timeout {}' takes one time; '{extra}' is one word too many (write 5s, not 5 s)",
                            word(1).unwrap_or("")
                        ),
                    );
                }
            }
            _ => {}
        }
        if let Some((family, actions, at)) = rule_family(words) {
            self.check_rule_action(line, family, actions, &words[at..]);
        }
        let rule = rule_family(words).is_some()
            || matches!(
                keyword,
                "use_backend"
                    | "use-server"
                    | "redirect"
                    | "force-persist"
                    | "ignore-persist"
                    | "stick"
                    | "monitor"
                    | "block"
            );
        if rule && let Some(start) = condition_start(words) {
            self.check_condition(section, line, &words[start..]);
        }
    }

    fn check_cookie(&mut self, line: usize, words: &[String]) {
        let mut index = 2;
        while let Some(option) = words.get(index) {
            if COOKIE_VALUE_OPTIONS.contains(&option.as_str()) {
                index += 2;
                continue;
            }
            if !COOKIE_OPTIONS.contains(&option.as_str()) {
                self.report(
                    line,
                    format!(
                        "'cookie' has no option '{option}' (HAProxy knows {}, {})",
                        COOKIE_OPTIONS.join(", "),
                        COOKIE_VALUE_OPTIONS.join(", ")
                    ),
                );
                return;
            }
            index += 1;
        }
    }

    fn check_error_status(&mut self, line: usize, keyword: &str, code: &str) {
        let known = code.parse::<u16>().ok().and_then(|number| {
            ERROR_STATUSES
                .iter()
                .find(|(status, _)| *status == number)
                .map(|(_, since)| *since)
        });
        match known {
            Some(since) if !certainly_before(self.target, since) => {}
            Some(since) => self.report(
                line,
                format!(
                    "'{keyword}' status {code} needs HAProxy {since} or later; the target runs {}",
                    self.target
                ),
            ),
            None => self.report(
                line,
                format!(
                    "'{keyword}': HAProxy has no error page for status '{code}' (it handles {})",
                    ERROR_STATUSES
                        .iter()
                        .filter(|(_, since)| !certainly_before(self.target, *since))
                        .map(|(status, _)| status.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
    }

    /// `redirect` (directive or action): `location`, `prefix` or `scheme` with its value,
    /// among its other options (`code`, `drop-query`, ...), before any condition.
    fn check_redirect(&mut self, line: usize, context: &str, words: &[String]) {
        let options: Vec<&String> = words
            .iter()
            .take_while(|w| *w != "if" && *w != "unless")
            .collect();
        match options
            .iter()
            .position(|w| matches!(w.as_str(), "location" | "prefix" | "scheme"))
        {
            Some(index) if index + 1 < options.len() => {}
            Some(index) => {
                self.report(
                    line,
                    format!("'{context} {}' needs a value", options[index]),
                );
            }
            None => self.report(
                line,
                format!("'{context}' needs 'location', 'prefix' or 'scheme' and a value"),
            ),
        }
    }

    /// A rule's action (`words[0]`) must be one its family has; a few need a set number of
    /// words after them.
    fn check_rule_action(&mut self, line: usize, family: &str, actions: &[&str], words: &[String]) {
        let Some(action) = words.first() else {
            self.report(line, format!("'{family}' needs an action"));
            return;
        };
        if action.starts_with("lua.") || action == "if" || action == "unless" {
            return;
        }
        let name = action.split('(').next().unwrap_or(action);
        if !actions.contains(&name) {
            let elsewhere = [
                ("http-request", HTTP_REQUEST_ACTIONS),
                ("http-response", HTTP_RESPONSE_ACTIONS),
                ("tcp-request content", TCP_CONTENT_ACTIONS),
            ]
            .iter()
            .find(|(other, list)| *other != family && list.contains(&name))
            .map(|(other, _)| format!(" ('{name}' is a '{other}' action)"))
            .unwrap_or_default();
            self.report(
                line,
                format!("'{family}' has no action '{action}'{elsewhere}"),
            );
            return;
        }
        let arguments: Vec<&String> = words[1..]
            .iter()
            .take_while(|w| *w != "if" && *w != "unless")
            .collect();
        if let Some((_, needed)) = HTTP_ACTION_ARGUMENTS.iter().find(|(n, _)| *n == name)
            && family.starts_with("http-")
            && arguments.len() < *needed
        {
            self.report(
                line,
                format!(
                    "'{family} {name}' needs {needed} argument(s), got {}",
                    arguments.len()
                ),
            );
        }
        if family.starts_with("http-") && name == "redirect" {
            let rest: Vec<String> = words[1..].to_vec();
            self.check_redirect(line, &format!("{family} redirect"), &rest);
        }
        if family.starts_with("http-") && matches!(name, "deny" | "tarpit" | "return") {
            self.check_response_words(line, family, name, &arguments);
        }
        if matches!(name, "deny" | "tarpit")
            && let Some(index) = words.iter().position(|w| w == "deny_status")
        {
            match words.get(index + 1) {
                Some(code) => self.check_error_status(line, "deny_status", code),
                None => self.report(line, "'deny_status' needs a status code".to_owned()),
            }
        }
    }

    /// The words of an HTTP `deny`, `tarpit` or `return` before its condition: keywords of
    /// the response it sends, each with its values (`status 403`, `hdr X-A v`); anything
    /// else is where HAProxy expects `if` or `unless` (`deny unles { ... }`).
    fn check_response_words(&mut self, line: usize, family: &str, action: &str, words: &[&String]) {
        let mut index = 0;
        while let Some(word) = words.get(index) {
            let values = RESPONSE_ACTION_WORDS
                .iter()
                .find(|(keyword, _)| *keyword == word.as_str())
                .filter(|(keyword, _)| action != "return" || *keyword != "deny_status")
                .map(|(_, values)| *values);
            let Some(values) = values else {
                self.report(
                    line,
                    format!(
                        "'{family} {action}' expects either 'if' or 'unless' followed by a condition but found '{word}'"
                    ),
                );
                return;
            };
            index += 1 + values;
        }
    }

    /// `if`/`unless` and what follows: something, braces that close, and named ACLs an
    /// `acl` line of this section (above) or HAProxy defines.
    fn check_condition(&mut self, section: &Section, line: usize, words: &[String]) {
        let mut depth = 0usize;
        for word in &words[1..] {
            match word.trim_start_matches('!') {
                "{" => depth += 1,
                "}" => {
                    if depth == 0 {
                        self.report(line, "a '}' closes no '{' in the condition".to_owned());
                        return;
                    }
                    depth -= 1;
                }
                "||" | "or" | "" => {}
                _ if depth > 0 => {
                    if let Some(problem) = bad_ipv4_network(word) {
                        self.report(line, problem);
                    }
                }
                name => {
                    if !PREDEFINED_ACLS.contains(&name)
                        && !self.section_acls.iter().any(|acl| acl == name)
                        && !self.defaults_acls.iter().any(|acl| acl == name)
                        && section.kind != SectionKind::Defaults
                    {
                        self.report(
                            line,
                            format!(
                                "the condition names ACL '{name}', which no 'acl' line above it in this section defines"
                            ),
                        );
                        return;
                    }
                }
            }
        }
        if depth > 0 {
            self.report(line, "a '{' in the condition is never closed".to_owned());
        }
    }

    /// A `log` line's level and minimum level after its facility.
    fn check_log_levels(&mut self, line: usize, words: &[String]) {
        let Some(facility) = words
            .iter()
            .position(|w| super::LOG_FACILITIES.contains(&w.as_str()))
            .filter(|index| *index >= 2)
        else {
            return;
        };
        for level in words.iter().skip(facility + 1).take(2) {
            if !LOG_LEVELS.contains(&level.as_str()) {
                self.report(
                    line,
                    format!(
                        "unknown log level '{level}' (HAProxy knows {})",
                        LOG_LEVELS.join(", ")
                    ),
                );
                return;
            }
        }
    }

    /// `verify` on `bind` (none, optional, required) and server lines (none, required).
    fn check_verify(&mut self, line: usize, keyword: &str, words: &[String]) {
        let allowed: &[&str] = if keyword == "bind" {
            &["none", "optional", "required"]
        } else {
            &["none", "required"]
        };
        if let Some(index) = words.iter().position(|w| w == "verify")
            && let Some(value) = words.get(index + 1)
            && !allowed.contains(&value.as_str())
        {
            self.report(
                line,
                format!(
                    "'verify' on a '{keyword}' line takes {}, not '{value}'",
                    allowed.join(" or ")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_one_problem, problems};

    const PROXY: &str = "defaults\n    mode http\nfrontend fe\n    bind 127.0.0.1:8080\n    acl api path_beg /api\n";

    fn with(line: &str) -> String {
        format!("{PROXY}    {line}\nbackend be\n    server s1 127.0.0.1:8081\n")
    }

    #[test]
    fn directives_taking_one_whole_number_refuse_none_a_word_or_two() {
        assert_one_problem("global\n    maxconn\n", 2, "'maxconn' needs a whole number");
        assert_one_problem("global\n    nbthread four\n", 2, "got 'four'");
        assert_one_problem(&with("maxconn 10 20"), 6, "'20' is one word too many");
        assert!(problems("global\n    maxconn 1000\n    nbthread 2\n").is_empty());
    }

    #[test]
    fn enumerated_values_are_those_haproxy_knows() {
        assert_one_problem("defaults\n    mode htpp\n", 2, "unknown proxy mode 'htpp'");
        assert_one_problem("backend be\n    hash-type consistant\n", 2, "'hash-type'");
        assert_one_problem("backend be\n    http-reuse sometimes\n", 2, "'http-reuse'");
        assert_one_problem(
            "backend be\n    cookie SRV insert-only\n",
            2,
            "no option 'insert-only'",
        );
        assert_one_problem("backend be\n    compression algo gzipp\n", 2, "'gzipp'");
        assert_one_problem(
            "global\n    log 127.0.0.1 local0 warnning\n",
            2,
            "log level 'warnning'",
        );
        assert_one_problem(
            "backend be\n    server s 127.0.0.1:80 ssl verify sometimes\n",
            2,
            "'verify'",
        );
        assert!(
            problems("backend be\n    hash-type consistent sdbm avalanche\n    http-reuse safe\n    cookie SRV insert indirect nocache domain .example.com maxidle 30m\n    compression algo gzip deflate\n    server s 127.0.0.1:80 ssl verify none\n")
                .is_empty()
        );
    }

    #[test]
    fn ports_prefix_lengths_and_status_codes_are_in_range() {
        assert_one_problem(
            "frontend fe\n    bind :70000\n",
            2,
            "port 70000 is out of range",
        );
        assert_one_problem(
            "backend be\n    server s 127.0.0.1:80810\n",
            2,
            "port 80810",
        );
        assert_one_problem(
            &with("acl lan src 10.0.0.0/33"),
            6,
            "prefix length above 32",
        );
        assert_one_problem(
            &with("http-request deny deny_status 999"),
            6,
            "status '999'",
        );
        assert_one_problem(
            "defaults\n    errorfile 302 /e/302.http\n",
            2,
            "status '302'",
        );
        assert!(problems(&with("http-request deny deny_status 429 if api")).is_empty());
    }

    #[test]
    fn rule_actions_belong_to_their_rule_family_and_take_their_arguments() {
        assert_one_problem(&with("http-request denyy"), 6, "no action 'denyy'");
        assert_one_problem(
            &with("tcp-request content set-header X y"),
            6,
            "'set-header' is a 'http-request' action",
        );
        assert_one_problem(
            &with("http-request set-header X-Foo"),
            6,
            "needs 2 argument(s)",
        );
        assert_one_problem(&with("http-request redirect"), 6, "needs 'location'");
        assert!(
            problems(&with(
                "http-request redirect code 301 location https://x/ if api"
            ))
            .is_empty()
        );
        assert!(problems(&with("http-request lua.hello")).is_empty());
    }

    #[test]
    fn conditions_open_with_if_or_unless_close_their_braces_and_name_defined_acls() {
        assert_one_problem(&with("use_backend be iff api"), 6, "not 'iff'");
        assert_one_problem(&with("use_backend be if apii"), 6, "ACL 'apii'");
        assert_one_problem(&with("http-request deny if { path /x"), 6, "never closed");
        assert!(
            problems(&with(
                "use_backend be if api || !METH_GET { src 10.0.0.0/8 }"
            ))
            .is_empty()
        );
    }
}
