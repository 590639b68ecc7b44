//! The schema check's rules for sample expressions and rule arguments: the fetches and
//! converters of `acl` lines, of anonymous ACLs in conditions (`if { req.hdr(x) -m found }`),
//! of actions that take an expression (`set-var`, `track-sc0`, `capture`, `stick on`, ...)
//! and of `%[...]` in log-format arguments, judged against the target line's tables in
//! [`samples`](super::super::keywords::samples); the characters and matching methods of
//! ACLs; and the words that may follow the arguments of common actions (only a condition).
//!
//! The action word counts are 2.6's (later lines gave some actions optional words), so
//! that rule judges a 2.6 target only.

use super::super::ast::{Directive, Section};
use super::super::keywords::samples::{
    ExpressionPlace, SampleArgType, SampleExpression, parse_log_format_expressions,
    parse_sample_expression, variable_name_problem,
};
use super::super::sections::SectionKind;
use super::super::versions::HaproxyVersion;
use super::{Checker, invalid_name_character};

/// Directives holding rules, whose lines may end in a condition and whose arguments may be
/// log-format strings.
const RULE_DIRECTIVES: &[&str] = &[
    "http-request",
    "http-response",
    "http-after-response",
    "tcp-request",
    "tcp-response",
];

/// Other directives whose arguments may be log-format strings.
const FORMAT_DIRECTIVES: &[&str] = &[
    "error-log-format",
    "http-check",
    "log-format",
    "log-format-sd",
    "redirect",
    "tcp-check",
    "unique-id-format",
    "use-server",
    "use_backend",
];

/// Other directives that may end in a condition (`if` or `unless` and ACLs).
const CONDITION_DIRECTIVES: &[&str] = &[
    "force-persist",
    "ignore-persist",
    "monitor",
    "redirect",
    "stick",
    "use-server",
    "use_backend",
];

/// Words after which an argument is literal text, not a log-format string (`string <text>`
/// of `return`, `http-check expect` and `tcp-check expect`).
const LITERAL_ARGUMENT_KEYWORDS: &[&str] = &["binary", "rbinary", "rstring", "string"];

/// Actions whose next word is a sample expression.
const EXPRESSION_ACTIONS: &[&str] = &[
    "capture",
    "set-dst",
    "set-dst-port",
    "set-priority-class",
    "set-priority-offset",
    "set-src",
    "set-src-port",
    "track-sc0",
    "track-sc1",
    "track-sc2",
];

/// The matching methods of `-m` in an ACL (manual 7.1.3).
const ACL_MATCH_METHODS: &[&str] = &[
    "beg", "bin", "bool", "dir", "dom", "end", "found", "int", "ip", "len", "reg", "str", "sub",
];

/// Actions of `http-request`, `http-response` and `http-after-response` that take a fixed
/// number of words (manual 4.3 to 4.5), after which HAProxy 2.6 accepts only a condition.
/// Actions with optional words (`deny`, `return`, `redirect`, `del-header ... -m`, ...) are
/// left out.
const HTTP_ACTION_WORDS: &[(&str, usize)] = &[
    ("add-header", 2),
    ("allow", 0),
    ("cache-store", 1),
    ("cache-use", 1),
    ("disable-l7-retry", 0),
    ("early-hint", 2),
    ("replace-header", 3),
    ("replace-path", 2),
    ("replace-pathq", 2),
    ("replace-uri", 2),
    ("replace-value", 3),
    ("set-header", 2),
    ("set-log-level", 1),
    ("set-method", 1),
    ("set-nice", 1),
    ("set-path", 1),
    ("set-pathq", 1),
    ("set-query", 1),
    ("set-uri", 1),
    ("strict-mode", 1),
    ("wait-for-handshake", 0),
];

/// Actions of `tcp-request` and `tcp-response` rule sets without words of their own.
const TCP_ACTIONS_WITHOUT_WORDS: &[&str] = &["accept", "close", "reject"];

impl Checker {
    /// Whether the action word counts judge the target: they are 2.6's.
    fn judges_action_words(&self) -> bool {
        self.target <= HaproxyVersion::V2_6
    }

    /// Checks the sample expressions, log-format strings, conditions and action words of a
    /// directive (without `no`/`default` prefix; `offset` is the index of `words[0]` in the
    /// directive).
    pub(super) fn check_expressions(
        &mut self,
        section: &Section,
        directive: &Directive,
        offset: usize,
        words: &[String],
    ) {
        let keyword = words[0].as_str();
        let literal = |index: usize| -> Option<&str> {
            let word = words.get(index)?;
            (!directive.word_has_env_ref(offset + index)).then_some(word.as_str())
        };
        let line = directive.line;
        if section.kind == SectionKind::Global {
            if matches!(keyword, "set-var" | "set-var-fmt")
                && let Some(name) = literal(1)
                && let Some(problem) = variable_name_problem(name)
            {
                self.report(line, format!("'{keyword}': {problem}"));
            }
            return;
        }
        if keyword == "acl" {
            if let Some(name) = literal(1) {
                self.check_acl_name(line, name);
                if let Some(expression) = literal(2) {
                    let context = format!("ACL '{name}'");
                    self.check_expression(
                        section,
                        line,
                        &context,
                        expression,
                        ExpressionPlace::Acl,
                    );
                    self.check_acl_flags(line, &context, words, 3);
                }
            }
            return;
        }
        let is_rule = RULE_DIRECTIVES.contains(&keyword);
        let condition_at = (is_rule || CONDITION_DIRECTIVES.contains(&keyword))
            .then(|| {
                words
                    .iter()
                    .enumerate()
                    .skip(2)
                    .find(|(_, word)| *word == "if" || *word == "unless")
                    .map(|(index, _)| index)
            })
            .flatten();
        let arguments_end = condition_at.unwrap_or(words.len());
        let action_at = match keyword {
            "tcp-request" | "tcp-response" => 2,
            _ => 1,
        };
        let action = words.get(action_at).map_or("", String::as_str);
        let rule = format!("'{}'", words[..=action_at.min(words.len() - 1)].join(" "));
        let expression_at = (is_rule
            && (action.starts_with("set-var(")
                || action.starts_with("do-resolve(")
                || EXPRESSION_ACTIONS.contains(&action)))
        .then_some(action_at + 1);
        if is_rule
            && let Some(inner) = ["set-var(", "set-var-fmt(", "unset-var("]
                .iter()
                .find_map(|prefix| action.strip_prefix(prefix))
            && !directive.word_has_env_ref(offset + action_at)
        {
            let name = inner.split([',', ')']).next().unwrap_or(inner);
            if let Some(problem) = variable_name_problem(name) {
                self.report(line, format!("{rule} rule: {problem}"));
            }
        }
        // Only rules have an expression argument.
        if let Some(at) = expression_at
            && at < arguments_end
            && let Some(expression) = literal(at)
        {
            let context = format!("{rule} rule");
            self.check_expression(section, line, &context, expression, ExpressionPlace::Word);
        }
        if keyword == "stick"
            && matches!(
                literal(1),
                Some("on" | "match" | "store-request" | "store-response")
            )
            && 2 < arguments_end
            && let Some(expression) = literal(2)
        {
            let context = format!("'stick {}'", words[1]);
            self.check_expression(section, line, &context, expression, ExpressionPlace::Word);
        }
        if is_rule || FORMAT_DIRECTIVES.contains(&keyword) {
            // The expression argument of an action is not a log-format string.
            for index in (1..arguments_end).filter(|index| Some(*index) != expression_at) {
                let after_literal_keyword = words
                    .get(index - 1)
                    .is_some_and(|previous| LITERAL_ARGUMENT_KEYWORDS.contains(&previous.as_str()));
                let Some(text) = literal(index).filter(|text| text.contains("%[")) else {
                    continue;
                };
                if after_literal_keyword {
                    continue;
                }
                let context = format!("{rule} (log-format string '{text}')");
                match parse_log_format_expressions(text, self.target) {
                    Err(message) => {
                        self.report(line, format!("{context}: {message}"));
                        break;
                    }
                    Ok(expressions) => {
                        for expression in &expressions {
                            self.check_resolved(section, line, &context, text, expression);
                        }
                    }
                }
            }
        }
        if let Some(at) = condition_at {
            for (index, word) in words.iter().enumerate().skip(at + 1) {
                if word == "{"
                    && let Some(expression) = literal(index + 1)
                {
                    let context = format!("the condition of {rule}");
                    self.check_expression(
                        section,
                        line,
                        &context,
                        expression,
                        ExpressionPlace::Acl,
                    );
                }
            }
        }
        if is_rule && !directive.has_env_refs() && self.judges_action_words() {
            self.check_action_words(line, keyword, action, action_at, words, arguments_end);
        }
    }

    /// After the words an action takes, only `if` or `unless` may follow.
    fn check_action_words(
        &mut self,
        line: usize,
        keyword: &str,
        action: &str,
        action_at: usize,
        words: &[String],
        arguments_end: usize,
    ) {
        let taken = match keyword {
            "tcp-request" | "tcp-response" => {
                if TCP_ACTIONS_WITHOUT_WORDS.contains(&action) {
                    0
                } else {
                    return;
                }
            }
            _ => {
                let fixed = HTTP_ACTION_WORDS
                    .binary_search_by(|(name, _)| (*name).cmp(action))
                    .ok()
                    .and_then(|index| HTTP_ACTION_WORDS.get(index))
                    .map(|(_, count)| *count);
                match fixed {
                    Some(count) => count,
                    None if action.starts_with("set-var(") => 1,
                    None if action.starts_with("unset-var(") => 0,
                    None if action.starts_with("track-sc") => {
                        // track-scN <key> [table <table>]
                        if words.get(action_at + 2).is_some_and(|word| word == "table") {
                            3
                        } else {
                            1
                        }
                    }
                    None => return,
                }
            }
        };
        let first_extra = action_at + 1 + taken;
        if first_extra < arguments_end
            && let Some(extra) = words.get(first_extra)
        {
            self.report(
                line,
                format!(
                    "'{keyword} {action}' takes {taken} argument word(s); after them HAProxy expects either 'if' or 'unless' followed by a condition but found '{extra}'"
                ),
            );
        }
    }

    /// Parses one expression and reports what the target's HAProxy would refuse in it.
    fn check_expression(
        &mut self,
        section: &Section,
        line: usize,
        context: &str,
        expression: &str,
        place: ExpressionPlace,
    ) {
        match parse_sample_expression(expression, place, self.target) {
            Err(message) => self.report(
                line,
                format!("{context}: {message} in sample expression '{expression}'"),
            ),
            Ok(parsed) => self.check_resolved(section, line, context, expression, &parsed),
        }
    }

    /// Server arguments need a name, and in a defaults section their backend too.
    fn check_resolved(
        &mut self,
        section: &Section,
        line: usize,
        context: &str,
        text: &str,
        parsed: &SampleExpression,
    ) {
        for argument in &parsed.resolved {
            if argument.arg_type != SampleArgType::Server {
                continue;
            }
            if argument.value.is_empty() {
                self.report(
                    line,
                    format!(
                        "{context}: '{}' needs a server name ([<backend>/]<server>) in '{text}'",
                        argument.keyword
                    ),
                );
            } else if section.kind == SectionKind::Defaults && !argument.value.contains('/') {
                self.report(
                    line,
                    format!(
                        "{context}: in a 'defaults' section the server argument of '{}' must name its backend too (<backend>/<server>), not just '{}'",
                        argument.keyword, argument.value
                    ),
                );
            }
        }
    }

    /// ACL names take the characters of proxy names.
    fn check_acl_name(&mut self, line: usize, name: &str) {
        if let Some(bad) = invalid_name_character(name) {
            self.report(
                line,
                format!(
                    "character '{bad}' is not permitted in acl name '{name}' (HAProxy allows letters, digits, '-', '_', '.' and ':')"
                ),
            );
        }
    }

    /// The flags between an ACL's expression and its patterns: `-m` needs a known method.
    fn check_acl_flags(&mut self, line: usize, context: &str, words: &[String], start: usize) {
        let mut index = start;
        while let Some(flag) = words.get(index) {
            match flag.as_str() {
                "-m" => {
                    let method = words.get(index + 1).map_or("", String::as_str);
                    if !ACL_MATCH_METHODS.contains(&method) {
                        self.report(
                            line,
                            format!(
                                "{context}: unknown matching method '{method}' after '-m' (HAProxy knows {})",
                                ACL_MATCH_METHODS.join(", ")
                            ),
                        );
                        return;
                    }
                    index += 2;
                }
                "-f" | "-u" => index += 2,
                "-i" | "-n" | "-M" => index += 1,
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::{assert_one_problem, problems};

    #[test]
    fn the_action_tables_are_sorted_so_binary_search_finds_every_entry() {
        for pair in HTTP_ACTION_WORDS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{pair:?}");
        }
    }

    #[test]
    fn unknown_fetches_and_converters_are_reported_wherever_expressions_appear() {
        assert_one_problem(
            "frontend fe\n    acl a req.ssl_sigalgs,be2hex(:,2),lower -m found\n",
            2,
            "ACL 'a': unknown fetch method 'req.ssl_sigalgs'",
        );
        assert_one_problem(
            "frontend fe\n    http-request set-var(txn.x) var(txn.y),aes_cbc_enc(128,a,b)\n",
            2,
            "unknown converter 'aes_cbc_enc'",
        );
        assert_one_problem(
            "frontend fe\n    http-request deny if { (arg) }\n",
            2,
            "the condition of 'http-request deny': missing fetch method",
        );
        assert_one_problem(
            "frontend fe\n    http-response set-header x \"%[var(txn.in),has_ctl]\"\n",
            2,
            "unknown converter 'has_ctl'",
        );
        assert_one_problem(
            "frontend fe\n    http-request add-header name %[hdr(arg))]\n",
            2,
            "expected ']' after 'hdr(arg)', but found ')'",
        );
        assert_one_problem(
            "frontend fe\n    tcp-request content track-sc0 fc_pp_tlv(0xEA)\n",
            2,
            "unknown fetch method 'fc_pp_tlv'",
        );
        assert_one_problem(
            "backend be\n    stick on req.cook_names\n",
            2,
            "unknown fetch method 'req.cook_names'",
        );
    }

    #[test]
    fn valid_expressions_literal_strings_and_escaped_percents_are_accepted() {
        let valid = "frontend fe\n    acl host hdr_beg(host),lower -i -m beg www.\n    acl local src 127.0.0.1\n    http-request set-var(txn.h) req.hdr(host),lower,\n    http-request set-header X %[src]:%{+Q}[dst_port]\n    http-request return status 200 string \"100%[ok\" if { path /x } local\n    log-format \"%%[literal] %ci %[capture.req.hdr(0)]\"\n    use_backend %[req.hdr(host),lower,map(hosts.map,be)]\n    http-request track-sc0 src table be\n    http-request cache-use c if host\nbackend be\n    stick-table type ip size 1k\ncache c\n    total-max-size 4\n";
        assert_eq!(problems(valid), []);
    }

    #[test]
    fn argument_counts_and_types_of_fetches_and_converters_are_checked() {
        assert_one_problem(
            "frontend fe\n    http-request set-header sl2 \"param=<%[url_param(QS_arg,,i)]>\"\n",
            2,
            "fetch method 'url_param' : expected ')' before ',i)]>'",
        );
        assert_one_problem(
            "frontend fe\n    http-response set-header b \"%[var(txn.input),bytes(txn.var_start)]\"\n",
            2,
            "failed to parse 'txn.var_start' as type 'integer' at position 1",
        );
    }

    #[test]
    fn acl_names_and_matching_methods_are_those_haproxy_allows() {
        assert_one_problem(
            "frontend fe\n    acl a/b src 10.0.0.1\n",
            2,
            "character '/' is not permitted in acl name 'a/b'",
        );
        assert_one_problem(
            "frontend fe\n    acl a src -m foo 10.0.0.1\n",
            2,
            "unknown matching method 'foo'",
        );
        assert!(problems("frontend fe\n    acl a:b src -n -m ip 10.0.0.1\n").is_empty());
    }

    #[test]
    fn a_server_argument_in_a_defaults_section_must_name_its_backend() {
        assert_one_problem(
            "defaults web\n    mode http\n    http-request set-header x \"%[srv_conn(www)]\"\n",
            3,
            "must name its backend too",
        );
        assert!(
            problems("defaults web\n    http-request set-header x \"%[srv_conn(be/www)]\"\n")
                .is_empty()
        );
        assert!(
            problems("backend be\n    http-request set-header x %[srv_conn(www)]\n").is_empty()
        );
    }

    #[test]
    fn variables_set_by_rules_and_globally_are_named_with_their_scope() {
        assert_one_problem(
            "frontend fe\n    http-request set-var(foo) str(1)\n",
            2,
            "'http-request set-var(foo)' rule: invalid variable name 'foo'",
        );
        assert_one_problem(
            "frontend fe\n    tcp-request content unset-var(x)\n",
            2,
            "invalid variable name 'x'",
        );
        assert_one_problem(
            "global\n    set-var proc.a-b int(1)\n",
            2,
            "invalid syntax at char '-b'",
        );
        assert!(
            problems("global\n    set-var proc.a int(1)\nfrontend fe\n    http-request set-var-fmt(txn.f) %[src]\n    http-response unset-var(res.x)\n")
                .is_empty()
        );
    }

    #[test]
    fn only_a_condition_may_follow_the_words_of_an_action() {
        assert_one_problem(
            "frontend fe\n    http-request cache-use my_cache no-early-hints if { req.hdr(x) -m str 1 }\ncache my_cache\n    total-max-size 4\n",
            2,
            "expects either 'if' or 'unless' followed by a condition but found 'no-early-hints'",
        );
        assert_one_problem(
            "frontend fe\n    tcp-request content accept now\n",
            2,
            "found 'now'",
        );
        assert!(
            problems("frontend fe\n    http-request set-header a b if TRUE\n    http-request track-sc1 src table t if TRUE\n    tcp-request content reject\nbackend t\n    stick-table type ip size 1k\n")
                .is_empty()
        );
    }
}
