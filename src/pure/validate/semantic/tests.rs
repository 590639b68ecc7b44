//! Unit tests of the semantic phase's pure parts: output parsing, verdicts, preparation.

use std::time::Duration;

use super::output::*;
use super::prepare::*;
use super::*;

/// Captured from HAProxy 2.6.12 (`haproxy -c -dr -f /tmp/hcap/t6.cfg`) with two broken
/// frontend lines.
const TWO_PARSE_ERRORS: &str = "\
[NOTICE]   (8698) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8698) : path to executable is /usr/sbin/haproxy
[ALERT]    (8698) : config : parsing [/tmp/hcap/t6.cfg:10] : error detected while parsing switching rule : missing closing '}' in condition.
[ALERT]    (8698) : config : parsing [/tmp/hcap/t6.cfg:11] : error detected in frontend 'fe' while parsing 'http-request set-header' rule : failed to parse sample expression <unknownfetch]> : unknown fetch method 'unknownfetch'.
[ALERT]    (8698) : config : Error(s) found in configuration file : /tmp/hcap/t6.cfg
";

/// Captured from HAProxy 2.6.12: a bad regex in a map, plus multi-line warnings.
const CAPITAL_PARSING_AND_CONTINUATIONS: &str = "\
[NOTICE]   (8659) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8659) : path to executable is /usr/sbin/haproxy
[ALERT]    (8659) : config : Parsing [/tmp/hcap/t3.cfg:7]: failed to parse use_backend rule '%[req.hdr(host),lower,map_reg(maps/bad.map,be1)]' : failed to parse sample expression <req.hdr(host),lower,map_reg(maps/bad.map,be1)]> : invalid args in converter 'map_reg' : regex 'foo(' is invalid (error=missing closing parenthesis, erroffset=4) at line 1 of file 'maps/bad.map'.
[WARNING]  (8659) : config : missing timeouts for frontend 'fe'.
   | While not properly invalid, you will certainly encounter various problems
   | with such a configuration. To fix this, please ensure that all following
   | timeouts are set to a non-zero value: 'client', 'connect', 'server'.
[WARNING]  (8659) : config : log format ignored for frontend 'fe' since it has no log address.
[ALERT]    (8659) : config : Fatal errors found in configuration.
";

/// Captured from HAProxy 2.6.12: a backends-only file with an unresolvable server (-dr).
const LOCATED_WARNING: &str = "\
[NOTICE]   (8537) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8537) : path to executable is /usr/sbin/haproxy
[WARNING]  (8537) : config : [beonly.cfg:10] : 'server be1/s2' : could not resolve address 'nonexistent.invalid', disabling server.
";

/// Captured from HAProxy 2.6.12: a post-parse error without a location.
const UNLOCATED_ALERT: &str = "\
[NOTICE]   (8695) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (8695) : path to executable is /usr/sbin/haproxy
[ALERT]    (8695) : config : Proxy 'fe': unable to find required default_backend: 'nope'.
[ALERT]    (8695) : config : Fatal errors found in configuration.
";

fn alerts(output: &str) -> Vec<HaproxyMessage> {
    parse_haproxy_output(output)
        .into_iter()
        .filter(|m| m.severity == Severity::Alert)
        .collect()
}

fn interpret(
    stderr: &str,
    code: i32,
    scratch: &str,
    prepared: &PreparedConfig,
) -> Result<CheckReport, SemanticCheckError> {
    let mut scrubber = Scrubber::default();
    scrubber.add(scratch);
    let context = Interpretation {
        prepared,
        scrubber: &scrubber,
        aux_paths: vec!["maps/bad.map"],
        hint_working_dir: false,
    };
    context.verdict(&RunOutput {
        exit_code: Some(code),
        status: format!("exit status: {code}"),
        stdout: String::new(),
        stderr: stderr.to_string(),
        elapsed: Duration::ZERO,
    })
}

fn unchanged() -> PreparedConfig {
    PreparedConfig {
        text: String::new(),
        inserted_after: usize::MAX / 2,
        inserted: 0,
    }
}

#[test]
fn a_parsing_alert_yields_its_file_line_and_message() {
    let found = alerts(TWO_PARSE_ERRORS);
    assert_eq!(
        found[0].location,
        Some(("/tmp/hcap/t6.cfg".to_string(), 10))
    );
    assert_eq!(
        found[0].text,
        "error detected while parsing switching rule : missing closing '}' in condition."
    );
    assert_eq!(
        found[1].location,
        Some(("/tmp/hcap/t6.cfg".to_string(), 11))
    );
    assert!(found[1].text.starts_with("error detected in frontend 'fe'"));
}

#[test]
fn notices_are_recognized_but_are_not_alerts() {
    let all = parse_haproxy_output(TWO_PARSE_ERRORS);
    assert_eq!(
        all.iter()
            .filter(|m| m.severity == Severity::Notice)
            .count(),
        2
    );
    assert_eq!(alerts(TWO_PARSE_ERRORS).len(), 3);
}

#[test]
fn the_capitalized_parsing_form_without_a_space_is_located() {
    let found = alerts(CAPITAL_PARSING_AND_CONTINUATIONS);
    assert_eq!(found[0].location, Some(("/tmp/hcap/t3.cfg".to_string(), 7)));
    assert!(
        found[0]
            .text
            .starts_with("failed to parse use_backend rule")
    );
}

#[test]
fn continuation_lines_join_the_warning_they_follow() {
    let warnings: Vec<_> = parse_haproxy_output(CAPITAL_PARSING_AND_CONTINUATIONS)
        .into_iter()
        .filter(|m| m.severity == Severity::Warning)
        .collect();
    assert_eq!(warnings.len(), 2);
    assert!(
        warnings[0]
            .text
            .starts_with("missing timeouts for frontend 'fe'. While not properly invalid")
    );
    assert!(warnings[0].text.ends_with("'client', 'connect', 'server'."));
    assert!(!warnings[0].text.contains('|'));
    assert_eq!(
        warnings[1].text,
        "log format ignored for frontend 'fe' since it has no log address."
    );
}

/// `haproxy -c` 3.0 on a `crt-list` whose certificate is broken: the errors go on indented
/// lines under the `bind` alert, without the `|` of older continuations.
const INDENTED_CONTINUATIONS: &str = "[ALERT]    (27072) : config : parsing [/tmp/haptor-check-uzJDSo/haproxy.cfg:23] : 'bind 127.0.0.1:23032' in section 'frontend' : \n  'crt-list' : error processing line 1 in file 'general/default_secure_0.crtlist' : unable to load certificate from file 'ssl/default_secure-tls.pem': too long.\n  unable to load SSL private key into SSL Context 'ssl/default_secure-tls.pem': passed a null parameter.\n[ALERT]    (27072) : config : Error(s) found in configuration file : /tmp/haptor-check-uzJDSo/haproxy.cfg\n[WARNING]  (24806) : A worker process unexpectedly died and this can only be explained by a bug in haproxy or its dependencies.\nPlease check that you are running an up to date and maintained version of haproxy and open a bug report.\n";

#[test]
fn indented_lines_under_an_alert_are_part_of_its_message() {
    let messages = parse_haproxy_output(INDENTED_CONTINUATIONS);
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(
        messages[0].text,
        "'bind 127.0.0.1:23032' in section 'frontend' : 'crt-list' : error processing line 1 in file 'general/default_secure_0.crtlist' : unable to load certificate from file 'ssl/default_secure-tls.pem': too long. unable to load SSL private key into SSL Context 'ssl/default_secure-tls.pem': passed a null parameter."
    );
    assert_eq!(
        messages[2].text,
        "A worker process unexpectedly died and this can only be explained by a bug in haproxy or its dependencies.",
        "a line in the first column continues nothing"
    );
}

#[test]
fn a_notice_on_a_config_line_is_reported_as_a_warning_and_other_notices_are_not() {
    // `haproxy -c -dr` 3.0 on a server whose name does not resolve: a notice, where 2.6
    // printed a warning.
    let output = "[NOTICE]   (2435) : haproxy version is 3.0.11-1+deb13u4\n[NOTICE]   (2435) : config : [haproxy.cfg:10] : 'server b/s1' : could not resolve address 'no-such-host.invalid', disabling server.\n";
    let report = interpret(output, 0, "/tmp/scratch", &unchanged()).expect("valid");
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert_eq!(report.warnings[0].line, Some(10));
    assert!(
        report.warnings[0]
            .message
            .contains("could not resolve address")
    );
}

#[test]
fn a_warning_with_a_bare_bracket_location_is_located() {
    let all = parse_haproxy_output(LOCATED_WARNING);
    let warning = all
        .iter()
        .find(|m| m.severity == Severity::Warning)
        .expect("one warning");
    assert_eq!(warning.location, Some(("beonly.cfg".to_string(), 10)));
    assert!(
        warning
            .text
            .starts_with("'server be1/s2' : could not resolve")
    );
}

#[test]
fn the_older_header_with_a_date_is_understood() {
    let found = parse_haproxy_output(
        "[ALERT] 123/456789 (42) : parsing [/x/haproxy.cfg:3] : unknown keyword 'x'.",
    );
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].location, Some(("/x/haproxy.cfg".to_string(), 3)));
}

#[test]
fn summary_alerts_are_dropped_when_a_specific_alert_exists() {
    let prepared = unchanged();
    let scratch = "/tmp/hcap";
    let error = interpret(
        &TWO_PARSE_ERRORS.replace("t6.cfg", CONFIG_FILE_NAME),
        1,
        scratch,
        &prepared,
    )
    .expect_err("exit 1 fails");
    let SemanticCheckError::Rejected(rejected) = error else {
        panic!("a rejection")
    };
    assert_eq!(rejected.problems.len(), 2);
    assert!(rejected.problems.iter().all(|p| !is_summary(&p.message)));
    assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
    assert_eq!(rejected.problems[0].line, Some(10));
}

#[test]
fn an_unlocated_alert_is_kept_on_the_main_file_without_a_line() {
    let error = interpret(UNLOCATED_ALERT, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
    let SemanticCheckError::Rejected(rejected) = error else {
        panic!("a rejection")
    };
    assert_eq!(rejected.problems.len(), 1);
    assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
    assert_eq!(rejected.problems[0].line, None);
    assert!(rejected.problems[0].message.contains("default_backend"));
}

#[test]
fn a_lone_summary_alert_is_kept() {
    let output = "[ALERT]    (1) : config : Fatal errors found in configuration.\n";
    let error = interpret(output, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
    let SemanticCheckError::Rejected(rejected) = error else {
        panic!("a rejection")
    };
    assert_eq!(rejected.problems.len(), 1);
    assert!(is_summary(&rejected.problems[0].message));
}

#[test]
fn the_scratch_directory_is_scrubbed_from_files_and_messages() {
    let output = "[ALERT]    (8662) : config : parsing [/tmp/hcap/haproxy.cfg:8] : error detected while parsing ACL 'a' : failed to open pattern file </tmp/hcap/maps/nothere.lst>.\n\
[ALERT]    (8662) : config : Error(s) found in configuration file : /tmp/hcap/haproxy.cfg\n";
    let error = interpret(output, 1, "/tmp/hcap", &unchanged()).expect_err("exit 1 fails");
    let SemanticCheckError::Rejected(rejected) = error else {
        panic!("a rejection")
    };
    assert_eq!(rejected.problems.len(), 1);
    assert_eq!(rejected.problems[0].file, CONFIG_FILE_NAME);
    assert!(rejected.problems[0].message.contains("<maps/nothere.lst>"));
    assert!(!rejected.problems[0].message.contains("/tmp/hcap"));
}

#[test]
fn warnings_of_a_passing_run_come_back_in_the_report() {
    let report = interpret(
        &LOCATED_WARNING.replace("beonly.cfg", "/s/haproxy.cfg"),
        2,
        "/s",
        &unchanged(),
    )
    .expect("exit 2 passes");
    assert!(report.no_listener);
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].line, Some(10));
    assert_eq!(report.warnings[0].file, CONFIG_FILE_NAME);
}

#[test]
fn a_failure_without_alerts_falls_back_to_the_last_stderr_lines() {
    let error = interpret(
        "[NOTICE] (1) : hello\nsomething odd happened\n",
        3,
        "/s",
        &unchanged(),
    )
    .expect_err("fails");
    let SemanticCheckError::Rejected(rejected) = error else {
        panic!("a rejection")
    };
    assert!(
        rejected.problems[0]
            .message
            .contains("something odd happened")
    );
    assert!(rejected.problems[0].message.contains("status 3"));
    assert!(!rejected.problems[0].message.contains("hello"));
}

#[test]
fn an_existing_default_path_is_rewritten_in_place() {
    let rendered = "global\n    maxconn 10\n    default-path origin /etc/haproxy\ndefaults\n";
    let prepared = PreparedConfig::new(rendered, "/scratch");
    assert_eq!(
        prepared.text,
        "global\n    maxconn 10\n    default-path origin /scratch\ndefaults\n"
    );
    assert_eq!(prepared.original_line(4), Some(4));
}

#[test]
fn a_default_path_outside_global_is_left_alone() {
    let rendered = "global\n    maxconn 10\nfrontend f\n    default-path origin /etc/haproxy\n";
    let prepared = PreparedConfig::new(rendered, "/scratch");
    assert!(
        prepared
            .text
            .contains("frontend f\n    default-path origin /etc/haproxy\n")
    );
    assert!(
        prepared
            .text
            .starts_with("global\n    default-path origin /scratch\n")
    );
}

#[test]
fn an_inserted_default_path_does_not_shift_reported_lines() {
    let rendered = "# header\nglobal\n    maxconn 10\ndefaults\n    mode http";
    let prepared = PreparedConfig::new(rendered, "/scratch");
    let lines: Vec<&str> = prepared.text.lines().collect();
    assert_eq!(lines[2], "    default-path origin /scratch");
    let original: Vec<&str> = rendered.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let reported = index + 1;
        match prepared.original_line(reported) {
            Some(back) if *line != "    default-path origin /scratch" => {
                assert_eq!(original[back - 1], *line)
            }
            Some(back) => assert_eq!(original[back - 1], "global"),
            None => panic!("line {reported} maps back"),
        }
    }
}

#[test]
fn a_global_on_the_last_line_gets_its_directive_on_a_new_line() {
    let prepared = PreparedConfig::new("global", "/s");
    assert_eq!(prepared.text, "global\n    default-path origin /s\n");
}

#[test]
fn a_config_without_global_gets_one_and_lines_still_map_back() {
    let rendered = "defaults\n    mode http\n";
    let prepared = PreparedConfig::new(rendered, "/s");
    assert!(
        prepared
            .text
            .starts_with("global\n    default-path origin /s\ndefaults\n")
    );
    assert_eq!(prepared.original_line(1), None);
    assert_eq!(prepared.original_line(2), None);
    assert_eq!(prepared.original_line(4), Some(2));
}

#[test]
fn crlf_line_endings_survive_the_rewrite() {
    let prepared = PreparedConfig::new("global\r\n  default-path config\r\n", "/s");
    assert_eq!(prepared.text, "global\r\n  default-path origin /s\r\n");
}

#[test]
fn words_with_spaces_or_quotes_are_quoted_for_haproxy() {
    assert_eq!(
        quote_config_word("/tmp/haptor-check-Ab1"),
        "/tmp/haptor-check-Ab1"
    );
    assert_eq!(quote_config_word("/tmp/with space"), "'/tmp/with space'");
    assert_eq!(
        quote_config_word("/tmp/it's \"$x\""),
        "\"/tmp/it's \\\"\\$x\\\"\""
    );
}

#[test]
fn the_version_is_the_word_after_version() {
    let first =
        "HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nStatus: long-term";
    assert_eq!(parse_version(first).as_deref(), Some("2.6.12-1+deb12u4"));
    assert_eq!(
        parse_version("HA-Proxy version 1.8.19 2019/02/11").as_deref(),
        Some("1.8.19")
    );
    assert_eq!(parse_version("no such thing"), None);
}

#[test]
fn aux_paths_are_normalized_and_escapes_refused() {
    assert_eq!(
        normalize_aux_path("maps/./hosts.map").as_deref(),
        Ok("maps/hosts.map")
    );
    assert!(
        normalize_aux_path("../x")
            .expect_err("refused")
            .contains("..")
    );
    assert!(
        normalize_aux_path("maps/../../x")
            .expect_err("refused")
            .contains("..")
    );
    assert!(
        normalize_aux_path("/etc/passwd")
            .expect_err("refused")
            .contains("absolute")
    );
    assert!(normalize_aux_path("maps/").is_err());
    assert!(normalize_aux_path("").is_err());
    assert!(normalize_aux_path(".").is_err());
}

#[test]
fn a_timeout_message_names_the_duration() {
    let whole = SemanticCheckError::TimedOut {
        timeout: Duration::from_secs(30),
    };
    assert_eq!(whole.to_string(), "haproxy -c timed out after 30s");
    let part = SemanticCheckError::TimedOut {
        timeout: Duration::from_millis(250),
    };
    assert_eq!(part.to_string(), "haproxy -c timed out after 250ms");
}

#[test]
fn a_run_failure_folds_into_one_semantic_problem() {
    let folded: ValidationError = SemanticCheckError::BinaryNotFound {
        binary: "hx".into(),
    }
    .into();
    assert_eq!(folded.phase, ValidationPhase::Semantic);
    assert_eq!(folded.problems.len(), 1);
    assert!(folded.problems[0].message.contains("'hx' not found"));
}
