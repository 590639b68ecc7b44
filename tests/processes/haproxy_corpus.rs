//! Runs haptor's HAProxy configuration parser, serializer and schema check over the shared
//! corpus of real HAProxy configurations (`../shared/corpus/haproxy`, see its README): every
//! configuration HAProxy 2.6 accepts must parse, round-trip through the serializer, and pass
//! the schema check; rejected ones must not break the parser, and where HAProxy names an
//! unknown keyword the check must name the same line.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use crate::support;

use haptor::pure::haproxy::{
    Config, HaproxyVersion, check_schema, check_schema_for, parse_config, view,
};

/// One row of `MANIFEST.tsv`.
struct CorpusEntry {
    file: String,
    exit_code: i32,
    first_alert: String,
    text: String,
}

impl CorpusEntry {
    /// HAProxy 2.6 accepted it: exit code 0 (valid) or 2 (valid, no listener).
    fn accepted(&self) -> bool {
        self.exit_code == 0 || self.exit_code == 2
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/haproxy")
}

static CORPUS: LazyLock<Vec<CorpusEntry>> = LazyLock::new(load_corpus);

fn load_corpus() -> Vec<CorpusEntry> {
    let dir = corpus_dir();
    let manifest_path = dir.join("MANIFEST.tsv");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_else(|error| {
        panic!(
            "the HAProxy corpus manifest {} cannot be read ({error}); the corpus must be checked \
             out at ../shared/corpus/haproxy next to the repository",
            manifest_path.display()
        )
    });
    let mut entries = Vec::new();
    for (index, row) in manifest.lines().enumerate().skip(1) {
        let columns: Vec<&str> = row.split('\t').collect();
        assert!(
            columns.len() >= 4,
            "MANIFEST.tsv line {} has {} columns, expected at least 4",
            index + 1,
            columns.len()
        );
        let exit_code = columns[3].parse().unwrap_or_else(|_| {
            panic!(
                "MANIFEST.tsv line {}: bad exit code {:?}",
                index + 1,
                columns[3]
            )
        });
        let path = dir.join(columns[0]);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        entries.push(CorpusEntry {
            file: columns[0].to_owned(),
            exit_code,
            first_alert: columns.get(4).copied().unwrap_or("").to_owned(),
            text: String::from_utf8(bytes)
                .unwrap_or_else(|_| panic!("{} is not UTF-8", path.display())),
        });
    }
    assert!(
        entries.len() > 300,
        "MANIFEST.tsv lists only {} configurations",
        entries.len()
    );
    entries
}

/// Serializes and re-parses `config`; describes the first difference, if any.
fn round_trip_failure(config: &Config) -> Option<String> {
    let written = config.to_string();
    match parse_config(&written) {
        Err(error) => Some(format!("the serialized text does not parse: {error}")),
        Ok(reparsed) if reparsed != *config => {
            let original_lines = config.to_string();
            let difference = original_lines
                .lines()
                .zip(reparsed.to_string().lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .map(|(line, (a, b))| {
                    format!("first difference at line {}: {a:?} vs {b:?}", line + 1)
                })
                .unwrap_or_else(|| "the trees differ".to_owned());
            Some(format!(
                "re-parsing the serialized text gives another tree; {difference}"
            ))
        }
        Ok(_) => None,
    }
}

#[test]
fn every_config_haproxy_2_6_accepts_parses_round_trips_and_passes_the_schema_check() {
    let mut failures = Vec::new();
    let mut accepted = 0;
    for entry in CORPUS.iter().filter(|entry| entry.accepted()) {
        accepted += 1;
        let config = match parse_config(&entry.text) {
            Ok(config) => config,
            Err(error) => {
                failures.push(format!("{}: does not parse: {error}", entry.file));
                continue;
            }
        };
        if let Some(failure) = round_trip_failure(&config) {
            failures.push(format!("{}: {failure}", entry.file));
        }
        for problem in check_schema(&config) {
            failures.push(format!("{}: schema false positive: {problem}", entry.file));
        }
        // The view must not choke on real configurations either.
        let _ = view(&config);
    }
    assert!(
        accepted > 200,
        "only {accepted} accepted configurations in the manifest"
    );
    assert!(
        failures.is_empty(),
        "{} problem(s) in {accepted} accepted configurations:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_config_haproxy_rejects_either_fails_to_parse_or_round_trips() {
    let mut failures = Vec::new();
    for entry in CORPUS.iter().filter(|entry| !entry.accepted()) {
        if let Ok(config) = parse_config(&entry.text)
            && let Some(failure) = round_trip_failure(&config)
        {
            failures.push(format!("{}: {failure}", entry.file));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The line number and keyword of HAProxy 2.6 alerts about a keyword it does not know:
/// `parsing [file:LINE] : unknown keyword 'X' in 'S' section`, `unknown option 'X'`, and
/// `'server be/s' : unknown keyword 'X'` or `'bind …' in section 'S': unknown keyword 'X'`.
fn unknown_keyword_alert(alert: &str) -> Option<(usize, String)> {
    let pattern = regex::Regex::new(
        r"\[[^\]:]+:(\d+)\]\s*:.*?unknown (?:keyword|option) '([^']+)'(?: in '[a-z-]+' section| on |\.|;|$)",
    )
    .ok()?;
    let captures = pattern.captures(alert)?;
    Some((captures[1].parse().ok()?, captures[2].to_owned()))
}

#[test]
fn the_schema_check_reports_the_unknown_keywords_haproxy_2_6_rejects_at_the_same_line() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in CORPUS.iter().filter(|entry| !entry.accepted()) {
        let Some((line, keyword)) = unknown_keyword_alert(&entry.first_alert) else {
            continue;
        };
        // Global ssl-default-*-options values are not judged by the schema check.
        if entry.first_alert.contains("global statement") {
            continue;
        }
        let config = match parse_config(&entry.text) {
            Ok(config) => config,
            Err(error) => {
                failures.push(format!("{}: does not parse: {error}", entry.file));
                continue;
            }
        };
        checked += 1;
        let problems = check_schema(&config);
        if !problems
            .iter()
            .any(|problem| problem.line == line && problem.message.contains(&keyword))
        {
            failures.push(format!(
                "{}: HAProxy says {:?}; the schema check found {problems:?}",
                entry.file, entry.first_alert
            ));
        }
    }
    assert!(
        checked > 20,
        "only {checked} unknown-keyword alerts were found in the manifest"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} missed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_bad_corpus_config_with_a_broken_quote_reports_the_right_line() {
    let entry = CORPUS
        .iter()
        .find(|entry| entry.file.ends_with("-bad.cfg"))
        .expect("the corpus has -bad configs");
    let lines: Vec<&str> = entry.text.lines().collect();
    // Break one line in the middle of a real bad config with an unterminated quote.
    let broken_line = lines.len() / 2 + 1;
    let mut broken: Vec<String> = lines.iter().map(|line| (*line).to_owned()).collect();
    broken[broken_line - 1].push_str(" \"unterminated");
    let error = parse_config(&broken.join("\n")).expect_err("an unterminated quote is rejected");
    assert_eq!(error.line, broken_line, "{}: {error}", entry.file);
    assert!(error.message.contains("unterminated"), "{error}");
}

#[test]
fn hand_made_broken_inputs_report_the_right_line() {
    let cases = [
        ("global\n    maxconn 10\n.endif\n", 3),
        ("global\n.if defined(X)\n    maxconn 10\n", 2),
        ("# header\n\nmaxconn 10\nglobal\n", 3),
        ("global\n    description \"a\\x4\"\n", 2),
        ("frontend fe\n    bind \"${PORT\"\n", 2),
    ];
    for (text, line) in cases {
        let error = parse_config(text).expect_err("broken input is rejected");
        assert_eq!(error.line, line, "{text:?}: {error}");
    }
}

/// Its parsing time is measured by the `parse_1000_backends` bench (benches/pipeline.rs).
#[test]
fn a_thousand_backend_config_parses_into_every_backend_server_and_rule() {
    let text = haptor::pure::fixtures::haproxy_config_with_backends(1000, 27);
    assert!(text.lines().count() > 30_000);
    let config = parse_config(&text).expect("generated config parses");
    assert_eq!(config.sections.len(), 1003);
    assert!(
        check_schema(&config).is_empty(),
        "{:?}",
        check_schema(&config)
    );

    let structure = view(&config);
    let [frontend] = structure.frontends.as_slice() else {
        panic!("one frontend: {:?}", structure.frontends.len());
    };
    let routed: Vec<&str> = frontend
        .backend_rules
        .iter()
        .map(|rule| rule.backend.as_str())
        .collect();
    let expected: Vec<String> = (0..1000).map(|b| format!("be{b}")).collect();
    assert_eq!(routed, expected, "every use_backend rule, in order");
    assert_eq!(
        frontend.backend_rules[999].line, 1007,
        "the last rule on its line"
    );
    let last_condition = frontend.backend_rules[999]
        .condition
        .as_ref()
        .expect("a condition");
    assert!(
        last_condition.words.iter().any(|w| w == "host-999.example"),
        "{last_condition:?}"
    );

    let names: Vec<&str> = structure.backends.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, expected, "every backend, in order");
    for (b, backend) in structure.backends.iter().enumerate() {
        assert_eq!(
            backend
                .balance
                .as_ref()
                .map(|balance| balance.algorithm.as_str()),
            Some("roundrobin"),
            "be{b}"
        );
        let servers: Vec<(String, String, Option<u16>)> = backend
            .servers
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.endpoint.host.clone(),
                    s.endpoint.port_number(),
                )
            })
            .collect();
        let expected: Vec<(String, String, Option<u16>)> = (0..27)
            .map(|s| {
                let host = format!("127.{}.{}.{}", 1 + (b / 250) % 250, b % 250, s + 1);
                (format!("s{s}"), host, Some(8080))
            })
            .collect();
        assert_eq!(servers, expected, "the servers of be{b}");
        for server in &backend.servers {
            assert!(server.has_flag("check"), "be{b}/{}", server.name);
            assert_eq!(
                server.param("weight").and_then(|p| p.value()),
                Some("10"),
                "be{b}/{}",
                server.name
            );
        }
    }
    // The quoted environment default stays one word on the very last line.
    let last = config.sections[1002]
        .directives
        .last()
        .expect("the last server line");
    assert_eq!(last.line, text.lines().count());
    assert!(last.has_env_refs(), "{last:?}");
    assert_eq!(last.words.len(), 7, "{:?}", last.words);

    // And the whole of it survives the serializer.
    let again = parse_config(&config.to_config_string()).expect("the serialized config parses");
    assert!(again.eq_ignoring_layout(&config));
}

/// Rejections caused by this machine's environment, not by the configuration: the file,
/// resolver or build feature HAProxy needed, as a substring of its alert and the reason.
/// Such configs are left out of the lint's fraction.
const ENVIRONMENTAL: &[(&str, &str)] = &[
    (
        "unable to stat",
        "a certificate file that is not in the corpus",
    ),
    (
        "No such file or directory",
        "a file that is not in the corpus",
    ),
    (
        "Couldn't open",
        "a CA or CRL file that is not in the corpus",
    ),
    ("cannot open", "a file that is not in the corpus"),
    (
        "failed to open",
        "a map or pattern file that is not in the corpus",
    ),
    (
        "'crt-list' : parsing [files/",
        "a crt-list whose certificates are not in the corpus",
    ),
    (
        "missing config file",
        "a SPOE configuration file that is not in the corpus",
    ),
    (
        "unsupported stream protocol for datagram",
        "QUIC, not built into Debian's 2.6",
    ),
    ("unable to load", "a file HAProxy could not load here"),
    (
        "could not resolve",
        "a host name this machine cannot resolve",
    ),
];

/// The line HAProxy's alert names (`parsing [file:LINE]` or `[file:LINE] :`).
fn alert_line(alert: &str) -> Option<usize> {
    let pattern = regex::Regex::new(r"\[[^\]:]+:(\d+)\]").ok()?;
    pattern.captures(alert)?[1].parse().ok()
}

/// Measured when the lint last learned more: 70 of 116 (60.3 %) with the keyword tables of
/// issue 15; 116 of 116 once it checked sample fetches and converters, defaults inheritance,
/// action words and common values (issue 16). The fraction may only rise: raise the floor
/// when the lint learns more.
const FLAGGED_AT_HAPROXYS_LINE_FLOOR: f64 = 0.99;

#[test]
fn the_lint_flags_a_rising_share_of_the_configs_haproxy_rejects_at_the_line_haproxy_names() {
    let mut considered = 0usize;
    let mut flagged = 0usize;
    let mut excluded: Vec<String> = Vec::new();
    let mut missed: Vec<String> = Vec::new();
    for entry in CORPUS.iter().filter(|entry| !entry.accepted()) {
        if let Some((_, reason)) = ENVIRONMENTAL
            .iter()
            .find(|(needle, _)| entry.first_alert.contains(needle))
        {
            excluded.push(format!("{}: {reason}", entry.file));
            continue;
        }
        considered += 1;
        let line = alert_line(&entry.first_alert);
        let lines: Vec<usize> = match parse_config(&entry.text) {
            Err(error) => vec![error.line],
            Ok(config) => check_schema(&config).iter().map(|p| p.line).collect(),
        };
        // Where HAProxy names no line, any problem counts.
        let hit = match line {
            Some(line) => lines.contains(&line),
            None => !lines.is_empty(),
        };
        if hit {
            flagged += 1;
        } else {
            missed.push(format!(
                "{} (HAProxy: {}; haptor lint: lines {lines:?})",
                entry.file, entry.first_alert
            ));
        }
    }
    let fraction = flagged as f64 / considered.max(1) as f64;
    eprintln!(
        "haptor lint flags {flagged} of the {considered} corpus configs HAProxy 2.6 rejects for a reason in the config ({:.1} %) at the line HAProxy names; {} rejections are environmental and left out:\n  {}\nnot flagged yet:\n  {}",
        fraction * 100.0,
        excluded.len(),
        excluded.join("\n  "),
        missed.join("\n  ")
    );
    assert!(
        considered > 60,
        "only {considered} rejected configs were considered"
    );
    assert!(
        fraction >= FLAGGED_AT_HAPROXYS_LINE_FLOOR,
        "the lint flags {:.1} % of the rejected configs at HAProxy's line, below the floor of {:.1} %",
        fraction * 100.0,
        FLAGGED_AT_HAPROXYS_LINE_FLOOR * 100.0
    );
}

/// The share of the corpus configs the line under test's haproxy rejects (for a reason in
/// the config) that the lint for that line flags at HAProxy's line, as measured when the
/// sample tables of each line were made: 2.6 116 of 116; 3.0 80 of 88 (90.9 %) and 3.2 56
/// of 72 (77.8 %), where sample expressions had not been judged for those lines before (62
/// of 88, 70.5 %, and 45 of 72, 62.5 %); then 83 of 88 (94.3 %) and 62 of 72 (86.1 %)
/// once `bytes` and `param` arguments and QUIC server addresses on 3.2 were judged. It may
/// only rise: raise a floor when the lint learns more.
const FLAGGED_ON_THE_LINE_UNDER_TEST_FLOOR: &[(HaproxyVersion, f64)] = &[
    (HaproxyVersion::V2_6, 0.99),
    (HaproxyVersion::V3_0, 0.94),
    (HaproxyVersion::V3_2, 0.86),
];

/// Every corpus config checked by the line under test's own haproxy, the way the corpus's
/// `check.py` runs HAProxy's reg-test configs: the lint for that line must stay quiet on
/// every config that haproxy accepts, and flag a share at least the floor of the ones it
/// rejects at the line it names.
#[test]
fn on_the_line_under_test_the_lint_accepts_what_its_haproxy_accepts_and_flags_what_it_rejects() {
    let binary = support::haproxy_binary();
    let target = support::haproxy_line();
    let Some((_, floor)) = FLAGGED_ON_THE_LINE_UNDER_TEST_FLOOR
        .iter()
        .find(|(line, _)| *line == target)
    else {
        eprintln!(
            "HAProxy {target} has no sample and keyword tables of its own; nothing to measure"
        );
        return;
    };
    let dir = corpus_dir();
    let files: Vec<String> = CORPUS.iter().map(|entry| entry.file.clone()).collect();
    let output = std::process::Command::new("python3")
        .arg(dir.join("check.py"))
        .args(&files)
        .current_dir(&dir)
        .env("HAPROXY_PROGRAM", &binary)
        .output()
        .expect("python3 runs the corpus's check.py");
    assert!(
        output.status.success(),
        "check.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let verdicts: std::collections::HashMap<String, (i32, String)> =
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|row| {
                let mut columns = row.splitn(3, '\t');
                let file = columns.next()?.to_string();
                let code = columns.next()?.parse().ok()?;
                Some((file, (code, columns.next().unwrap_or_default().to_string())))
            })
            .collect();
    let (mut considered, mut flagged, mut accepted) = (0usize, 0usize, 0usize);
    let (mut false_alarms, mut missed) = (Vec::new(), Vec::new());
    for entry in CORPUS.iter() {
        let (code, alert) = verdicts
            .get(&entry.file)
            .unwrap_or_else(|| panic!("check.py printed no verdict for {}", entry.file));
        let problems: Vec<(usize, String)> = match parse_config(&entry.text) {
            Err(error) => vec![(error.line, error.to_string())],
            Ok(config) => check_schema_for(&config, target)
                .into_iter()
                .map(|p| (p.line, p.message))
                .collect(),
        };
        if *code == 0 || *code == 2 {
            accepted += 1;
            if !problems.is_empty() {
                false_alarms.push(format!("{}: {problems:?}", entry.file));
            }
            continue;
        }
        if ENVIRONMENTAL
            .iter()
            .any(|(needle, _)| alert.contains(needle))
        {
            continue;
        }
        considered += 1;
        let hit = match alert_line(alert) {
            Some(line) => problems.iter().any(|(at, _)| *at == line),
            None => !problems.is_empty(),
        };
        if hit {
            flagged += 1;
        } else {
            missed.push(format!(
                "{} (HAProxy {target}: {alert}; lint: {problems:?})",
                entry.file
            ));
        }
    }
    let share = flagged as f64 / considered.max(1) as f64;
    eprintln!(
        "HAProxy {target}: {accepted} corpus configs accepted, {} of them flagged by the lint; {considered} rejected for a reason in the config, {flagged} ({:.1} %) flagged at HAProxy's line; not flagged:\n  {}",
        false_alarms.len(),
        share * 100.0,
        missed.join("\n  ")
    );
    assert!(
        false_alarms.is_empty(),
        "the lint for {target} flags configs HAProxy {target} accepts:\n  {}",
        false_alarms.join("\n  ")
    );
    assert!(
        considered > 50,
        "only {considered} rejected configs were considered"
    );
    assert!(
        share >= *floor,
        "the lint for {target} flags {:.1} % of the configs HAProxy {target} rejects at its line, below the floor of {:.1} %",
        share * 100.0,
        floor * 100.0
    );
}
