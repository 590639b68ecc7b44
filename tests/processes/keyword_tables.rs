//! haptor's keyword tables against HAProxy's own word, for the haproxy these tests run (the
//! suite runs once per HAProxy line it has: 2.6, 3.0, 3.2). Two judges:
//! - the line's manual (`configuration.txt`: the global keyword list of section 3, the proxy
//!   keyword matrix of 4.1, the bind and server options of 5.1 and 5.2): every keyword it
//!   lists, the tables of that line accept, and every keyword the tables accept, it lists,
//!   except the named few each way (what Debian's build leaves out; what the checker takes
//!   without the manual listing it);
//! - the line's real `haproxy -c`: every keyword the tables accept, in every proxy section
//!   kind they accept it in, the checker knows there (no "unknown keyword", "not allowed",
//!   "ignored because"); and every keyword the manual lists that the tables refuse, it
//!   refuses too.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use haptor::pure::haproxy::keywords::KeywordTables;
use haptor::pure::haproxy::{HaproxyVersion, SectionKind};

/// The four proxy section kinds, in the manual's column order.
const PROXY_KINDS: [SectionKind; 4] = [
    SectionKind::Defaults,
    SectionKind::Frontend,
    SectionKind::Listen,
    SectionKind::Backend,
];

/// What one manual lists.
#[derive(Debug, Default)]
struct Manual {
    global: BTreeSet<String>,
    /// Proxy directives (first word), with the section kinds whose column has an X.
    proxy: BTreeMap<String, Vec<SectionKind>>,
    options: BTreeMap<String, Vec<SectionKind>>,
    bind: BTreeSet<String>,
    server: BTreeSet<String>,
}

/// One part of the tables: its name in messages and what the manual and the tables hold.
struct Part {
    name: &'static str,
    manual: BTreeSet<String>,
    tables: BTreeSet<String>,
}

/// Keywords a manual lists that Debian's build of the line leaves out (its checker calls
/// them unknown), and `crt` in proxies, which 3.2's matrix lists and its parser does not
/// know. Per line and part.
fn left_out(line: HaproxyVersion, part: &str) -> Vec<&'static str> {
    let modules_2_6 = [
        "51degrees-cache-size",
        "51degrees-data-file",
        "51degrees-property-name-list",
        "51degrees-property-separator",
        "deviceatlas-json-file",
        "deviceatlas-log-level",
        "deviceatlas-properties-cookie",
        "deviceatlas-separator",
        "ssl-engine",
        "tune.zlib.memlevel",
        "tune.zlib.windowsize",
        "wurfl-cache-size",
        "wurfl-data-file",
        "wurfl-information-list",
        "wurfl-information-list-separator",
    ];
    let later_modules = [
        "51degrees-allow-unmatched",
        "51degrees-difference",
        "51degrees-drift",
        "51degrees-use-performance-graph",
        "51degrees-use-predictive-graph",
        "profiling.memory",
    ];
    let quic_2_6 = [
        "tune.quic.frontend.conn-tx-buffers.limit",
        "tune.quic.frontend.max-idle-timeout",
        "tune.quic.frontend.max-streams-bidi",
        "tune.quic.retry-threshold",
    ];
    let v = |major, minor| HaproxyVersion::new(major, minor);
    match (line, part) {
        (l, "global") if l == v(2, 6) => modules_2_6.into_iter().chain(quic_2_6).collect(),
        (l, "global") if l == v(3, 0) => modules_2_6.into_iter().chain(later_modules).collect(),
        (l, "global") if l == v(3, 2) => modules_2_6
            .into_iter()
            .chain(later_modules)
            .chain(["debug.counters"])
            .collect(),
        (l, "bind") if l == v(2, 6) => vec!["quic-cc-algo", "quic-force-retry"],
        (l, "proxy") if l == v(3, 2) => vec!["crt"],
        (_, "server") => vec!["no-verifyhost"],
        _ => Vec::new(),
    }
}

/// Keywords a line's checker accepts that its manual does not list (older spellings kept
/// working, keywords documented only in another chapter).
fn undocumented(line: HaproxyVersion, part: &str) -> Vec<&'static str> {
    let global = [
        "close-spread-time",
        "master-worker",
        "set-var-fmt",
        "ssl-load-extra-del-ext",
        "ssl-load-extra-files",
        "thread-group",
        "thread-groups",
        "tune.listener.multi-queue",
        "tune.vars.check-max-size",
    ];
    let v = |major, minor| HaproxyVersion::new(major, minor);
    match (line, part) {
        (l, "global") if l == v(2, 6) => global
            .into_iter()
            .chain(["tune.h2.max-frame-size"])
            .collect(),
        // Documented in paragraphs of their own, not in the list.
        (_, "global") => global
            .into_iter()
            .chain(["http-err-codes", "http-fail-codes"])
            .collect(),
        (l, "proxy") if l == v(2, 6) => vec!["dynamic-cookie-key", "hash-balance-factor", "option"],
        (_, "proxy") => vec!["dynamic-cookie-key", "option"],
        // 3.2's matrix keeps the old names; 4.2 documents the new ones.
        (l, "option") if l == v(3, 2) => vec![
            "accept-invalid-http-request",
            "accept-invalid-http-response",
            "accept-unsafe-violations-in-http-request",
            "accept-unsafe-violations-in-http-response",
        ],
        (_, "bind") => vec!["expose-fd"],
        (_, "server") => vec!["no-check-send-proxy", "resolve-opts", "usesrc"],
        _ => Vec::new(),
    }
}

/// The haproxy under test, its line, and its manual's text; `None` (with the reason
/// printed) for a line whose manual the tables were not compared with.
fn subject() -> Option<(PathBuf, HaproxyVersion, String)> {
    let binary = support::haproxy_binary();
    let output = Command::new(&binary)
        .arg("-v")
        .output()
        .unwrap_or_else(|error| panic!("{} -v: {error}", binary.display()));
    let version = HaproxyVersion::from_haproxy_v(&String::from_utf8_lossy(&output.stdout))
        .unwrap_or_else(|| panic!("{} -v prints no version", binary.display()));
    if ![
        HaproxyVersion::V2_6,
        HaproxyVersion::V3_0,
        HaproxyVersion::V3_2,
    ]
    .contains(&version)
    {
        eprintln!(
            "{} is HAProxy {version}, a line the keyword tables were not compared with; nothing to check",
            binary.display()
        );
        return None;
    }
    let manual = manual_path(&binary);
    let mut text = String::new();
    let file = std::fs::File::open(&manual).unwrap_or_else(|error| {
        panic!(
            "HAProxy {version}'s manual {} cannot be read ({error}): Debian's haproxy package installs it, and scripts/test-haproxy keeps each line's beside its binary",
            manual.display()
        )
    });
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap_or_else(|error| panic!("{}: {error}", manual.display()));
    Some((binary, version, text))
}

/// The manual beside a binary made by scripts/test-haproxy, else the Debian package's, else
/// the copy scripts/test-haproxy takes from the package where documentation is left out.
fn manual_path(binary: &Path) -> PathBuf {
    let beside = binary.with_file_name("configuration.txt.gz");
    let installed = PathBuf::from("/usr/share/doc/haproxy/configuration.txt.gz");
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_default()
        .join("haptor/haproxy/host/configuration.txt.gz");
    [beside, installed.clone(), cache]
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or(installed)
}

/// The lines of `text` from the chapter heading matching `start` to the next heading
/// matching `end`.
fn chapter<'a>(lines: &[&'a str], start: &str, end: &str) -> Vec<&'a str> {
    let start = regex::Regex::new(start).expect("start pattern");
    let end = regex::Regex::new(end).expect("end pattern");
    let from = lines
        .iter()
        .position(|line| start.is_match(line))
        .unwrap_or_else(|| panic!("the manual has no heading matching {start}"));
    let to = lines[from + 1..]
        .iter()
        .position(|line| end.is_match(line))
        .map_or(lines.len(), |offset| from + 1 + offset);
    lines[from..to].to_vec()
}

fn parse_manual(text: &str) -> Manual {
    let lines: Vec<&str> = text.lines().collect();
    let mut manual = Manual::default();
    let item = regex::Regex::new(r"^\s+- (\S+)").expect("item pattern");
    for line in chapter(&lines, r"^3\. Global (section|parameters)$", r"^3\.1\. ") {
        if let Some(captures) = item.captures(line) {
            manual.global.insert(captures[1].to_owned());
        }
    }
    let row = regex::Regex::new(
        r"^([a-z][^\s]*(?: [a-z-][^\s]*)*)\s{2,}([X-])\s+([X-])\s+([X-])\s+([X-])",
    )
    .expect("row pattern");
    let mut in_matrix = false;
    for line in chapter(&lines, r"^4\.1\. Proxy keywords matrix", r"^4\.2\. ") {
        if line.starts_with("----") {
            in_matrix = true;
            continue;
        }
        let cleaned = line
            .replace("(*)", "   ")
            .replace("(!)", "   ")
            .replace("(deprecated)", "            ");
        let Some(captures) = row.captures(&cleaned).filter(|_| in_matrix) else {
            continue;
        };
        let words: Vec<&str> = captures[1].split_whitespace().collect();
        let kinds: Vec<SectionKind> = PROXY_KINDS
            .iter()
            .enumerate()
            .filter(|(index, _)| &captures[index + 2] == "X")
            .map(|(_, kind)| *kind)
            .collect();
        let (table, name) = match words.as_slice() {
            ["option", name, ..] | ["no", "option", name, ..] => (&mut manual.options, *name),
            [name, ..] => (&mut manual.proxy, *name),
            [] => continue,
        };
        let listed = table.entry(name.to_owned()).or_default();
        for kind in kinds {
            if !listed.contains(&kind) {
                listed.push(kind);
            }
        }
    }
    // A parameter's heading may carry an argument in parentheses: `set-proxy-v2-tlv-fmt(<id>)`.
    let heading = regex::Regex::new(r"^([a-z][a-z0-9_.-]*)(?:\(<[^)]*>\))?(?: [<\[{].*)?$")
        .expect("heading pattern");
    let headings = |chapter_lines: Vec<&str>| -> BTreeSet<String> {
        chapter_lines
            .iter()
            .skip(2)
            .filter(|line| line.len() < 80 && !line.ends_with('.'))
            .filter_map(|line| heading.captures(line).map(|c| c[1].to_owned()))
            .collect()
    };
    manual.bind = headings(chapter(&lines, r"^5\.1\. Bind options", r"^5\.2\. "));
    manual.server = headings(chapter(
        &lines,
        r"^5\.2\. Server and default-server options",
        r"^5\.3\. ",
    ));
    manual
}

fn strings(words: Vec<&'static str>) -> BTreeSet<String> {
    words.into_iter().map(str::to_owned).collect()
}

fn parts(manual: &Manual, tables: KeywordTables) -> Vec<Part> {
    let proxy_tables: BTreeSet<String> = PROXY_KINDS
        .iter()
        .flat_map(|kind| tables.section_keywords(*kind))
        .map(str::to_owned)
        .collect();
    let option_tables: BTreeSet<String> = PROXY_KINDS
        .iter()
        .flat_map(|kind| tables.proxy_options(*kind))
        .map(str::to_owned)
        .collect();
    vec![
        Part {
            name: "global",
            manual: manual.global.clone(),
            tables: strings(tables.section_keywords(SectionKind::Global)),
        },
        Part {
            name: "proxy",
            manual: manual.proxy.keys().cloned().collect(),
            tables: proxy_tables,
        },
        Part {
            name: "option",
            manual: manual.options.keys().cloned().collect(),
            tables: option_tables,
        },
        Part {
            name: "bind",
            manual: manual.bind.clone(),
            tables: strings(tables.bind_params()),
        },
        Part {
            name: "server",
            manual: manual.server.clone(),
            tables: strings(tables.server_params()),
        },
    ]
}

#[test]
fn the_keyword_tables_of_the_haproxy_line_under_test_hold_what_its_manual_lists_and_no_more() {
    let Some((_, line, text)) = subject() else {
        return;
    };
    let manual = parse_manual(&text);
    assert!(
        manual.global.len() > 100 && manual.proxy.len() > 50 && manual.options.len() > 40,
        "the manual of {line} reads as too small (the chapters moved?): {} global, {} proxy, {} option keywords",
        manual.global.len(),
        manual.proxy.len(),
        manual.options.len()
    );
    let tables = KeywordTables::new(line);
    let mut differences = Vec::new();
    for part in parts(&manual, tables) {
        let left_out = strings(left_out(line, part.name));
        let undocumented = strings(undocumented(line, part.name));
        let missing: Vec<&String> = part
            .manual
            .difference(&part.tables)
            .filter(|k| !left_out.contains(*k))
            .collect();
        let extra: Vec<&String> = part
            .tables
            .difference(&part.manual)
            .filter(|k| !undocumented.contains(*k))
            .collect();
        let stale_left_out: Vec<&String> = left_out
            .iter()
            .filter(|k| !part.manual.contains(*k) || part.tables.contains(*k))
            .collect();
        let stale_undocumented: Vec<&String> = undocumented
            .iter()
            .filter(|k| part.manual.contains(*k) || !part.tables.contains(*k))
            .collect();
        for (what, words) in [
            ("listed by the manual, refused by the tables", missing),
            ("accepted by the tables, not in the manual", extra),
            (
                "named as left out of Debian's build, but the manual does not list it or the tables accept it",
                stale_left_out,
            ),
            (
                "named as undocumented, but the manual lists it or the tables refuse it",
                stale_undocumented,
            ),
        ] {
            if !words.is_empty() {
                differences.push(format!("{} keywords {what}: {words:?}", part.name));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "HAProxy {line}'s keyword tables differ from its manual:\n  {}",
        differences.join("\n  ")
    );
}

/// One line of a probe configuration: the section it goes in and the directive.
struct Probe {
    keyword: String,
    section: String,
    directive: String,
}

/// The sentinel closing every probe: the checker must reach it and call it unknown, or it
/// stopped early (a keyword without its argument may end the parse).
const SENTINEL: &str = "zz-probe-sentinel";

/// Runs the checker over `probes`, one directive per line, and returns what it says about
/// each probe's line (alerts and warnings, joined). Where the parse stops early, the probes
/// after the last line it spoke of run again.
fn checker_says(binary: &Path, dir: &Path, probes: &[Probe]) -> BTreeMap<String, String> {
    let mut said: BTreeMap<String, String> = BTreeMap::new();
    let mut rest: &[Probe] = probes;
    let location = regex::Regex::new(r"\[probe\.cfg:(\d+)\]").expect("location pattern");
    while !rest.is_empty() {
        let mut config = String::new();
        let mut line_of_probe = BTreeMap::new();
        let mut line = 0usize;
        for (index, probe) in rest.iter().enumerate() {
            config.push_str(&format!("{}\n    {}\n", probe.section, probe.directive));
            line += 2;
            line_of_probe.insert(line, index);
        }
        config.push_str(&format!("global\n    {SENTINEL}\n"));
        let sentinel_line = line + 2;
        std::fs::write(dir.join("probe.cfg"), config).expect("write the probe");
        let output = Command::new(binary)
            .args(["-c", "-f", "probe.cfg"])
            .current_dir(dir)
            .output()
            .expect("run haproxy -c");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let mut last_spoken = None;
        let mut reached_end = false;
        for message in text.lines() {
            let Some(number) = location
                .captures(message)
                .and_then(|c| c[1].parse::<usize>().ok())
            else {
                continue;
            };
            if number == sentinel_line {
                reached_end = true;
                continue;
            }
            if let Some(index) = line_of_probe.get(&number) {
                last_spoken = Some(*index);
                let entry = said
                    .entry(rest[*index].keyword.clone() + " in " + &rest[*index].section)
                    .or_default();
                entry.push_str(message);
                entry.push('\n');
            }
        }
        if reached_end {
            break;
        }
        let Some(stopped_at) = last_spoken else {
            panic!(
                "haproxy -c stopped before saying anything about the probe of '{}' ({}):\n{text}",
                rest[0].directive, rest[0].section
            );
        };
        rest = &rest[stopped_at + 1..];
    }
    said
}

/// Whether the checker's words about a line say it does not know the keyword there.
fn refuses(message: &str) -> bool {
    [
        "unknown keyword",
        "unknown option",
        "not supported anymore",
        "not allowed",
        "ignored because",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

fn section_header(kind: SectionKind, index: usize) -> String {
    format!("{} p{index}", kind.keyword())
}

#[test]
fn every_keyword_the_tables_accept_for_the_line_under_test_its_haproxy_knows_and_what_they_leave_out_it_refuses()
 {
    let Some((binary, line, text)) = subject() else {
        return;
    };
    let manual = parse_manual(&text);
    let tables = KeywordTables::new(line);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut accepted = Vec::new();
    let mut left = Vec::new();
    let mut index = 0usize;
    let mut next = || {
        index += 1;
        index
    };
    // `quiet` silences the checker's own messages; it is judged by the tables test alone.
    for keyword in tables.section_keywords(SectionKind::Global) {
        if keyword != "quiet" {
            accepted.push(Probe {
                keyword: keyword.to_owned(),
                section: "global".to_owned(),
                directive: keyword.to_owned(),
            });
        }
    }
    for kind in PROXY_KINDS {
        for keyword in tables.section_keywords(kind) {
            accepted.push(Probe {
                keyword: keyword.to_owned(),
                section: section_header(kind, next()),
                directive: keyword.to_owned(),
            });
        }
        for option in tables.proxy_options(kind) {
            accepted.push(Probe {
                keyword: format!("option {option}"),
                section: section_header(kind, next()),
                directive: format!("option {option}"),
            });
        }
    }
    for param in tables.bind_params() {
        let port = 20000 + next();
        accepted.push(Probe {
            keyword: format!("bind {param}"),
            section: section_header(SectionKind::Frontend, next()),
            directive: format!("bind 127.0.0.1:{port} {param}"),
        });
    }
    for param in tables.server_params() {
        // A parameter whose name carries an argument is written with one.
        let written = if param == "set-proxy-v2-tlv-fmt" {
            "set-proxy-v2-tlv-fmt(0x20)"
        } else {
            param
        };
        accepted.push(Probe {
            keyword: format!("server {param}"),
            section: section_header(SectionKind::Backend, next()),
            directive: format!("server s 127.0.0.1:80 {written}"),
        });
    }
    for keyword in left_out(line, "global") {
        left.push(Probe {
            keyword: keyword.to_owned(),
            section: "global".to_owned(),
            directive: keyword.to_owned(),
        });
    }
    for keyword in left_out(line, "proxy") {
        for kind in manual.proxy.get(keyword).into_iter().flatten() {
            left.push(Probe {
                keyword: keyword.to_owned(),
                section: section_header(*kind, next()),
                directive: keyword.to_owned(),
            });
        }
    }
    for param in left_out(line, "bind") {
        let port = 20000 + next();
        left.push(Probe {
            keyword: format!("bind {param}"),
            section: section_header(SectionKind::Frontend, next()),
            directive: format!("bind 127.0.0.1:{port} {param}"),
        });
    }
    for param in left_out(line, "server") {
        left.push(Probe {
            keyword: format!("server {param}"),
            section: section_header(SectionKind::Backend, next()),
            directive: format!("server s 127.0.0.1:80 {param}"),
        });
    }

    let said = checker_says(&binary, dir.path(), &accepted);
    let wrongly_accepted: Vec<String> = said
        .iter()
        .filter(|(_, message)| refuses(message))
        .map(|(probe, message)| format!("{probe}: {}", message.trim()))
        .collect();
    let said_of_left = checker_says(&binary, dir.path(), &left);
    let wrongly_left_out: Vec<String> = left
        .iter()
        .map(|probe| format!("{} in {}", probe.keyword, probe.section))
        .filter(|probe| {
            !said_of_left
                .get(probe)
                .is_some_and(|message| refuses(message))
        })
        .collect();
    eprintln!(
        "HAProxy {line} ({}): {} probes of keywords the tables accept, {} of documented keywords they refuse",
        binary.display(),
        accepted.len(),
        left.len()
    );
    assert!(
        wrongly_accepted.is_empty(),
        "the tables accept what HAProxy {line}'s checker does not know there:\n  {}",
        wrongly_accepted.join("\n  ")
    );
    assert!(
        wrongly_left_out.is_empty(),
        "the tables refuse documented keywords that HAProxy {line}'s checker knows: {wrongly_left_out:?}"
    );
}

/// The arguments of one fetch or converter in a `-dKsmp`/`-dKcnv` dump line
/// (`name(string[,integer]): ...`): the number before the first `[` is mandatory.
fn dumped_signature(arguments: Option<&str>) -> (usize, Vec<String>) {
    let Some(arguments) = arguments else {
        return (0, Vec::new());
    };
    let mandatory = arguments
        .split('[')
        .next()
        .unwrap_or_default()
        .split(',')
        .filter(|a| !a.trim().is_empty())
        .count();
    let types = arguments
        .replace(['[', ']'], ",")
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    (mandatory, types)
}

/// One of the line under test's keyword dumps (`haproxy -dK<kind> -q -c -f /dev/null`).
fn keyword_dump(binary: &Path, kind: &str) -> String {
    let output = Command::new(binary)
        .args([&format!("-dK{kind}"), "-q", "-c", "-f", "/dev/null"])
        .output()
        .unwrap_or_else(|error| panic!("{} -dK{kind}: {error}", binary.display()));
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The sample tables hold, for the line under test, exactly the fetches, converters and ACL
/// keywords its haproxy registers (its `-dKsmp`, `-dKcnv` and `-dKacl` dumps), each with
/// the argument types HAProxy lists and the same number of them mandatory.
#[test]
fn the_sample_tables_of_the_line_under_test_are_the_ones_its_haproxy_registers() {
    use haptor::pure::haproxy::keywords::samples::{
        Known, acl_keywords, known_converter, known_fetch, table_names,
    };
    let Some((binary, line, _)) = subject() else {
        return;
    };
    let fetch_line = regex::Regex::new(r"^\[[^\]]*\] ([^\s(:]+)(?:\((.*)\))?: ").expect("regex");
    let converter_line = regex::Regex::new(r"^([^\s(:#]+)(?:\((.*)\))?: ").expect("regex");
    let mut differences: Vec<String> = Vec::new();
    let (fetch_names, converter_names) = table_names();
    for (kind, pattern, names, known) in [
        (
            "smp",
            &fetch_line,
            fetch_names,
            known_fetch as fn(&str, HaproxyVersion) -> Option<Known>,
        ),
        ("cnv", &converter_line, converter_names, known_converter),
    ] {
        let dump = keyword_dump(&binary, kind);
        let registered: BTreeMap<String, (usize, Vec<String>)> = dump
            .lines()
            .filter_map(|l| pattern.captures(l))
            .map(|c| {
                let arguments = c.get(2).map(|m| m.as_str());
                (c[1].to_string(), dumped_signature(arguments))
            })
            .collect();
        assert!(
            registered.len() > 100,
            "{} -dK{kind} lists {} names:\n{dump}",
            binary.display(),
            registered.len()
        );
        for (name, (mandatory, types)) in &registered {
            match known(name, line) {
                Some(Known::Signature(signature)) => {
                    let ours: Vec<&str> =
                        signature.types.iter().map(|t| t.haproxy_name()).collect();
                    if signature.mandatory != *mandatory || ours != *types {
                        differences.push(format!(
                            "{kind} {name}: HAProxy {line} takes {types:?} ({mandatory} mandatory), the tables {ours:?} ({} mandatory)",
                            signature.mandatory
                        ));
                    }
                }
                Some(Known::Unchecked) => {}
                None => differences.push(format!(
                    "{kind} {name}: HAProxy {line} registers it, the tables do not know it"
                )),
            }
        }
        for name in names {
            if known(name, line).is_some() && !registered.contains_key(name) {
                differences.push(format!(
                    "{kind} {name}: the tables accept it for {line}, HAProxy {line} does not register it"
                ));
            }
        }
    }
    let dump = keyword_dump(&binary, "acl");
    let registered: BTreeMap<&str, &str> = dump
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(" = ")?;
            Some((name, rest.split_whitespace().next()?))
        })
        .collect();
    let ours: BTreeMap<&str, &str> = acl_keywords().iter().copied().collect();
    if registered != ours {
        differences.push(format!(
            "acl keywords differ: HAProxy {line} {registered:?}, the tables {ours:?}"
        ));
    }
    assert!(
        differences.is_empty(),
        "the sample tables differ from what {} registers:\n  {}",
        binary.display(),
        differences.join("\n  ")
    );
}
