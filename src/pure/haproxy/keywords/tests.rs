//! Unit tests of `keywords`.

use super::*;

/// The tables of HAProxy 2.6, which most of these tests describe.
const TABLES_2_6: KeywordTables = KeywordTables::new(HaproxyVersion::V2_6);

/// The HAProxy configuration corpus shared by haptor's helpers.
const CORPUS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/haproxy/");

/// `.if` conditions found in the corpus that hold for Debian's 2.6.12 build (threads,
/// OpenSSL 3.0). Lines under any other condition are skipped: they may use newer keywords.
const CONDITIONS_TRUE_ON_DEBIAN_2_6: &[&str] = &[
    "feature(THREAD)",
    "!ssllib_name_startswith(AWS-LC)",
    "openssl_version_atleast(1.1.1)",
    "openssl_version_atleast(3.0.0)",
];

fn assert_sorted_and_unique(name: &str, keys: &[&str]) {
    for pair in keys.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{name}: {:?} must sort before {:?}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn every_table_is_sorted_without_duplicates_so_binary_search_finds_every_entry() {
    let plain: &[(&str, &[&str])] = &[
        ("GLOBAL_KEYWORDS", GLOBAL_KEYWORDS),
        ("USERLIST_KEYWORDS", USERLIST_KEYWORDS),
        ("PEERS_KEYWORDS", PEERS_KEYWORDS),
        ("MAILERS_KEYWORDS", MAILERS_KEYWORDS),
        ("PROGRAM_KEYWORDS", PROGRAM_KEYWORDS),
        ("HTTP_ERRORS_KEYWORDS", HTTP_ERRORS_KEYWORDS),
        ("RING_KEYWORDS", RING_KEYWORDS),
        ("LOG_FORWARD_KEYWORDS", LOG_FORWARD_KEYWORDS),
        ("RESOLVERS_KEYWORDS", RESOLVERS_KEYWORDS),
        ("CACHE_KEYWORDS", CACHE_KEYWORDS),
        ("FCGI_APP_KEYWORDS", FCGI_APP_KEYWORDS),
        ("NAMESPACE_LIST_KEYWORDS", NAMESPACE_LIST_KEYWORDS),
        ("TIMEOUT_NAMES", TIMEOUT_NAMES),
    ];
    for (name, keys) in plain {
        assert_sorted_and_unique(name, keys);
    }
    let keys = |table: &[(&'static str, u8)]| table.iter().map(|(k, _)| *k).collect::<Vec<_>>();
    assert_sorted_and_unique("PROXY_KEYWORDS", &keys(PROXY_KEYWORDS));
    assert_sorted_and_unique("PROXY_OPTIONS", &keys(PROXY_OPTIONS));
    let keys =
        |table: &[(&'static str, ParamArity)]| table.iter().map(|(k, _)| *k).collect::<Vec<_>>();
    assert_sorted_and_unique("BIND_PARAMS", &keys(BIND_PARAMS));
    assert_sorted_and_unique("SERVER_PARAMS", &keys(SERVER_PARAMS));
}

#[test]
fn every_section_kind_of_haproxy_2_6_has_a_keyword_table() {
    let without_table: Vec<SectionKind> = SectionKind::ALL
        .iter()
        .copied()
        .filter(|kind| kind.in_haproxy_2_6() && SectionTable::of(*kind).is_none())
        .collect();
    assert!(without_table.is_empty(), "no table for {without_table:?}");
    let later_with_table: Vec<SectionKind> = SectionKind::ALL
        .iter()
        .copied()
        .filter(|kind| !kind.in_haproxy_2_6() && SectionTable::of(*kind).is_some())
        .collect();
    assert!(
        later_with_table.is_empty(),
        "2.6 has no {later_with_table:?} section"
    );
}

#[test]
fn every_proxy_keyword_and_option_belongs_to_at_least_one_section() {
    for (keyword, columns) in PROXY_KEYWORDS.iter().chain(PROXY_OPTIONS) {
        assert!(columns & ALL != 0, "{keyword} is allowed nowhere");
    }
}

#[test]
fn bind_is_allowed_in_a_frontend_but_not_in_a_backend_or_defaults() {
    assert_eq!(
        TABLES_2_6.section_keyword("frontend", "bind"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("listen", "bind"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("backend", "bind"),
        KeywordStatus::NotInSection
    );
    assert_eq!(
        TABLES_2_6.section_keyword("defaults", "bind"),
        KeywordStatus::NotInSection
    );
}

#[test]
fn server_lines_belong_to_backends_listens_peers_and_rings_only() {
    for section in ["backend", "listen", "peers", "ring"] {
        assert_eq!(
            TABLES_2_6.section_keyword(section, "server"),
            KeywordStatus::Allowed,
            "{section}"
        );
    }
    for section in ["frontend", "defaults", "global", "resolvers"] {
        assert_eq!(
            TABLES_2_6.section_keyword(section, "server"),
            KeywordStatus::NotInSection,
            "{section}"
        );
    }
}

#[test]
fn a_global_keyword_written_in_a_frontend_is_not_in_section() {
    assert_eq!(
        TABLES_2_6.section_keyword("global", "nbthread"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("frontend", "nbthread"),
        KeywordStatus::NotInSection
    );
}

#[test]
fn an_invented_keyword_is_unknown_everywhere() {
    for section in [
        "global", "defaults", "frontend", "backend", "listen", "peers", "cache",
    ] {
        assert_eq!(
            TABLES_2_6.section_keyword(section, "frobnicate"),
            KeywordStatus::Unknown
        );
    }
}

#[test]
fn directives_that_2_6_only_recognises_to_reject_are_unknown() {
    for keyword in [
        "reqadd",
        "rspdel",
        "block",
        "clitimeout",
        "monitor-net",
        "redispatch",
    ] {
        assert_eq!(
            TABLES_2_6.section_keyword("listen", keyword),
            KeywordStatus::Unknown,
            "{keyword}"
        );
    }
    assert_eq!(
        TABLES_2_6.section_keyword("global", "nbproc"),
        KeywordStatus::Unknown
    );
}

#[test]
fn modules_missing_from_the_debian_build_have_unknown_keywords() {
    for keyword in [
        "51degrees-data-file",
        "wurfl-data-file",
        "tune.quic.retry-threshold",
        "tune.zlib.memlevel",
    ] {
        assert_eq!(
            TABLES_2_6.section_keyword("global", keyword),
            KeywordStatus::Unknown,
            "{keyword}"
        );
    }
    assert_eq!(
        TABLES_2_6.section_keyword("global", "lua-load"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("global", "lua-prepend-path"),
        KeywordStatus::Allowed
    );
}

#[test]
fn deprecated_but_accepted_keywords_stay_allowed() {
    assert_eq!(
        TABLES_2_6.section_keyword("frontend", "bind-process"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("backend", "transparent"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("global", "tune.ssl.capture-cipherlist-size"),
        KeywordStatus::Allowed
    );
}

#[test]
fn sections_without_a_table_allow_every_keyword() {
    assert_eq!(
        TABLES_2_6.section_keyword("spoe-agent", "frobnicate"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("", "frobnicate"),
        KeywordStatus::Allowed
    );
}

#[test]
fn conditional_block_directives_are_allowed_in_every_section() {
    for section in ["global", "frontend", "userlist", "cache"] {
        for directive in [".if", ".elif", ".else", ".endif", ".notice"] {
            assert_eq!(
                TABLES_2_6.section_keyword(section, directive),
                KeywordStatus::Allowed
            );
        }
    }
    assert_eq!(
        TABLES_2_6.section_keyword("frontend", ".iff"),
        KeywordStatus::Unknown
    );
}

#[test]
fn the_no_and_default_prefixes_are_allowed_only_where_haproxy_takes_them() {
    assert_eq!(
        TABLES_2_6.section_keyword("frontend", "no"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("defaults", "default"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("global", "no"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.section_keyword("program", "no"),
        KeywordStatus::Allowed
    );
    assert_ne!(
        TABLES_2_6.section_keyword("userlist", "no"),
        KeywordStatus::Allowed
    );
    assert_ne!(
        TABLES_2_6.section_keyword("global", "default"),
        KeywordStatus::Allowed
    );
}

#[test]
fn options_follow_the_keyword_matrix_columns() {
    assert_eq!(
        TABLES_2_6.proxy_option("frontend", "httplog"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.proxy_option("backend", "httplog"),
        KeywordStatus::NotInSection
    );
    assert_eq!(
        TABLES_2_6.proxy_option("backend", "httpchk"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        TABLES_2_6.proxy_option("frontend", "httpchk"),
        KeywordStatus::NotInSection
    );
    assert_eq!(
        TABLES_2_6.proxy_option("listen", "http-tunnel"),
        KeywordStatus::Unknown
    );
    assert_eq!(
        TABLES_2_6.proxy_option("fcgi-app", "keep-conn"),
        KeywordStatus::Allowed
    );
}

#[test]
fn a_misspelt_keyword_gets_the_nearest_keyword_of_its_section() {
    assert_eq!(TABLES_2_6.suggest("global", "maxconnn"), Some("maxconn"));
    assert_eq!(
        TABLES_2_6.suggest("frontend", "use-backend"),
        Some("use_backend")
    );
    assert_eq!(TABLES_2_6.suggest("backend", "timout"), Some("timeout"));
    assert_eq!(TABLES_2_6.suggest("backend", "Balance"), Some("balance"));
    assert_eq!(
        TABLES_2_6.suggest("resolvers", "nameservers"),
        Some("nameserver")
    );
}

#[test]
fn no_suggestion_is_made_for_allowed_or_unrelated_words() {
    assert_eq!(TABLES_2_6.suggest("global", "maxconn"), None);
    assert_eq!(TABLES_2_6.suggest("frontend", "zzzzzzzz"), None);
    assert_eq!(TABLES_2_6.suggest("frontend", ""), None);
    assert_eq!(TABLES_2_6.suggest("spoe-agent", "timout"), None);
}

#[test]
fn a_suggestion_only_names_keywords_allowed_in_that_section() {
    // `fullconn` is one edit away but belongs to backends, not frontends.
    let suggestion = TABLES_2_6.suggest("frontend", "fullcon");
    assert_ne!(suggestion, Some("fullconn"));
    if let Some(keyword) = suggestion {
        assert_eq!(
            TABLES_2_6.section_keyword("frontend", keyword),
            KeywordStatus::Allowed
        );
    }
}

#[test]
fn server_parameters_report_whether_they_take_a_value() {
    assert_eq!(TABLES_2_6.server_param("check"), Some(ParamArity::Flag));
    assert_eq!(TABLES_2_6.server_param("inter"), Some(ParamArity::Value));
    assert_eq!(TABLES_2_6.server_param("weight"), Some(ParamArity::Value));
    assert_eq!(TABLES_2_6.server_param("ssl"), Some(ParamArity::Flag));
    assert_eq!(TABLES_2_6.server_param("frobnicate"), None);
    // Documented for 2.6 but unknown to the 2.6.12 binary.
    assert_eq!(TABLES_2_6.server_param("no-verifyhost"), None);
}

#[test]
fn bind_parameters_report_whether_they_take_a_value() {
    assert_eq!(TABLES_2_6.bind_param("ssl"), Some(ParamArity::Flag));
    assert_eq!(TABLES_2_6.bind_param("crt"), Some(ParamArity::Value));
    assert_eq!(
        TABLES_2_6.bind_param("accept-proxy"),
        Some(ParamArity::Flag)
    );
    assert_eq!(TABLES_2_6.bind_param("quic-cc-algo"), None);
    assert_eq!(TABLES_2_6.bind_param("check"), None);
}

#[test]
fn balance_algorithms_include_the_parenthesised_forms() {
    for word in [
        "roundrobin",
        "static-rr",
        "leastconn",
        "first",
        "source",
        "uri",
        "url_param",
        "hdr(host)",
        "random",
        "random(2)",
        "random()",
        "rdp-cookie",
        "rdp-cookie(mstshash)",
        "hash",
    ] {
        assert!(is_balance_algorithm(word), "{word}");
    }
    for word in [
        "hdr",
        "hdr()",
        "hdr(host",
        "random(x)",
        "rdp-cookie()",
        "sticky",
        "",
        "uri()",
    ] {
        assert!(!is_balance_algorithm(word), "{word}");
    }
}

#[test]
fn time_values_default_to_milliseconds_and_honour_units() {
    assert_eq!(parse_time_ms("100"), Some(100));
    assert_eq!(parse_time_ms("250ms"), Some(250));
    assert_eq!(parse_time_ms("5s"), Some(5000));
    assert_eq!(parse_time_ms("1m"), Some(60_000));
    assert_eq!(parse_time_ms("2h"), Some(7_200_000));
    assert_eq!(parse_time_ms("1d"), Some(86_400_000));
    assert_eq!(parse_time_ms("0"), Some(0));
}

#[test]
fn microseconds_round_up_to_the_next_millisecond() {
    assert_eq!(parse_time_ms("500us"), Some(1));
    assert_eq!(parse_time_ms("2000us"), Some(2));
    assert_eq!(parse_time_ms("0us"), Some(0));
}

#[test]
fn malformed_or_overflowing_time_values_are_rejected() {
    for text in [
        "",
        "5x",
        "s",
        "1.5s",
        "-1s",
        " 5s",
        "5 s",
        "10sec",
        "1M",
        "25d",
        "99999999999999999999",
    ] {
        assert_eq!(parse_time_ms(text), None, "{text:?}");
    }
    assert_eq!(parse_time_ms("24d"), Some(24 * 86_400_000));
}

#[test]
fn sizes_take_binary_suffixes_in_either_case() {
    assert_eq!(parse_size_bytes("16k"), Some(16_384));
    assert_eq!(parse_size_bytes("16K"), Some(16_384));
    assert_eq!(parse_size_bytes("1m"), Some(1_048_576));
    assert_eq!(parse_size_bytes("3G"), Some(3 * 1_073_741_824));
    assert_eq!(parse_size_bytes("512"), Some(512));
}

#[test]
fn malformed_or_oversized_sizes_are_rejected() {
    for text in [
        "",
        "k",
        "16kb",
        "1t",
        "0x10",
        "-1",
        "4g",
        "99999999999999999999k",
    ] {
        assert_eq!(parse_size_bytes(text), None, "{text:?}");
    }
}

#[test]
fn the_timeout_names_cover_every_proxy_timeout_event() {
    for name in [
        "client",
        "server",
        "connect",
        "queue",
        "http-request",
        "http-keep-alive",
        "tunnel",
        "client-fin",
        "server-fin",
        "tarpit",
        "check",
    ] {
        assert!(TIMEOUT_NAMES.contains(&name), "{name}");
    }
}

/// Splits a configuration line into words: `#` outside quotes starts a comment, quotes
/// group words, a backslash escapes the next character. Good enough for the corpus.
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                word.extend(chars.next());
                in_word = true;
            }
            (Some(open), c) if c == open => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#') => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A parameter table lookup of 2.6: `bind` or `server` parameters.
type ParamLookup = fn(&str) -> Option<ParamArity>;

fn bind_param_2_6(word: &str) -> Option<ParamArity> {
    TABLES_2_6.bind_param(word)
}

fn server_param_2_6(word: &str) -> Option<ParamArity> {
    TABLES_2_6.server_param(word)
}

/// Where the parameters start on a line that takes `bind` or `server` parameters, and
/// which lookup judges them.
fn parameter_layout(keyword: &str) -> Option<(usize, ParamLookup)> {
    match keyword {
        "server" | "peer" => Some((2, server_param_2_6)),
        "default-server" => Some((0, server_param_2_6)),
        "server-template" => Some((3, server_param_2_6)),
        "bind" | "dgram-bind" => Some((1, bind_param_2_6)),
        "default-bind" => Some((0, bind_param_2_6)),
        _ => None,
    }
}

/// Every problem the tables report for one directive line of a config 2.6 accepts.
fn misses_on_line(section: &str, words: &[String]) -> Vec<String> {
    let mut misses = Vec::new();
    let prefixed = matches!(words[0].as_str(), "no" | "default") && words.len() > 1;
    let (keyword, arguments) = if prefixed {
        (&words[1], &words[2..])
    } else {
        (&words[0], &words[1..])
    };
    let status = TABLES_2_6.section_keyword(section, keyword);
    if status != KeywordStatus::Allowed {
        misses.push(format!("[{section}] {keyword}: {status:?}"));
    }
    if keyword == "option"
        && let Some(option) = arguments.first()
    {
        let status = TABLES_2_6.proxy_option(section, option);
        if status != KeywordStatus::Allowed {
            misses.push(format!("[{section}] option {option}: {status:?}"));
        }
    }
    if let Some((start, lookup)) = parameter_layout(keyword) {
        let mut index = start;
        while let Some(word) = arguments.get(index) {
            // An environment variable expands to parameters only when HAProxy starts.
            if word.contains("${") {
                index += 1;
                continue;
            }
            match lookup(word) {
                Some(ParamArity::Flag) => index += 1,
                Some(ParamArity::Value) => index += 2,
                Some(ParamArity::Values(count)) => index += 1 + usize::from(count),
                None => {
                    misses.push(format!("[{section}] {keyword} parameter {word}: unknown"));
                    break;
                }
            }
        }
    }
    misses
}

#[test]
fn every_directive_and_parameter_of_corpus_configs_that_2_6_accepts_is_allowed() {
    let manifest = std::fs::read_to_string(format!("{CORPUS_DIR}MANIFEST.tsv"))
        .expect("the HAProxy corpus manifest should be readable");
    let accepted: Vec<&str> = manifest
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            matches!(fields.get(3), Some(&"0") | Some(&"2")).then(|| fields[0])
        })
        .collect();
    assert!(
        accepted.len() > 200,
        "only {} accepted configs listed",
        accepted.len()
    );

    let mut misses = Vec::new();
    let mut directives = 0;
    for file in &accepted {
        let text = std::fs::read_to_string(format!("{CORPUS_DIR}{file}"))
            .expect("every config listed in the manifest should be readable");
        let mut section = String::new();
        let mut conditions: Vec<bool> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let words = split_words(line);
            let Some(first) = words.first() else { continue };
            match first.as_str() {
                ".if" => conditions
                    .push(CONDITIONS_TRUE_ON_DEBIAN_2_6.contains(&words[1..].join(" ").as_str())),
                ".elif" | ".else" => {
                    if let Some(last) = conditions.last_mut() {
                        *last = false;
                    }
                }
                ".endif" => {
                    conditions.pop();
                }
                _ if !conditions.iter().all(|holds| *holds) => {}
                _ if first.starts_with('.') => {}
                _ if SectionKind::from_keyword(first).is_some_and(SectionKind::in_haproxy_2_6) => {
                    section.clone_from(first)
                }
                _ => {
                    directives += 1;
                    for miss in misses_on_line(&section, &words) {
                        misses.push(format!("{file}:{}: {miss}", number + 1));
                    }
                }
            }
        }
    }
    assert!(directives > 1000, "only {directives} directives checked");
    assert!(
        misses.is_empty(),
        "{} misses:\n{}",
        misses.len(),
        misses.join("\n")
    );
}

#[test]
fn a_keyword_a_later_line_added_is_known_from_that_line_and_a_removed_one_until_it() {
    let v2_6 = KeywordTables::new(HaproxyVersion::V2_6);
    let v2_8 = KeywordTables::new(HaproxyVersion::new(2, 8));
    let v3_0 = KeywordTables::new(HaproxyVersion::V3_0);
    let v3_2 = KeywordTables::new(HaproxyVersion::V3_2);

    // `guid` in proxies: 3.0's manual lists it, 2.6's does not; 2.8 is not judged.
    assert_eq!(
        v2_6.section_keyword("frontend", "guid"),
        KeywordStatus::Unknown
    );
    assert_eq!(
        v2_8.section_keyword("frontend", "guid"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        v3_0.section_keyword("frontend", "guid"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        v3_0.section_keyword("defaults", "guid"),
        KeywordStatus::NotInSection
    );
    // A 3.2 addition is certainly missing from 3.0, not from 3.1.
    assert_eq!(
        v3_0.section_keyword("global", "cpu-policy"),
        KeywordStatus::Unknown
    );
    assert_eq!(
        KeywordTables::new(HaproxyVersion::V3_1).section_keyword("global", "cpu-policy"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        v3_2.section_keyword("global", "cpu-policy"),
        KeywordStatus::Allowed
    );

    // Removed: `bind-process` and the bind parameter `process` from 3.0, a QUIC tunable
    // that 3.0 added and 3.2 dropped.
    assert_eq!(
        v2_6.section_keyword("backend", "bind-process"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        v3_0.section_keyword("backend", "bind-process"),
        KeywordStatus::Unknown
    );
    assert_eq!(v2_6.bind_param("process"), Some(ParamArity::Value));
    assert_eq!(v3_0.bind_param("process"), None);
    let quic = "tune.quic.frontend.conn-tx-buffers.limit";
    assert_eq!(v2_6.section_keyword("global", quic), KeywordStatus::Unknown);
    assert_eq!(v3_0.section_keyword("global", quic), KeywordStatus::Allowed);
    assert_eq!(v3_2.section_keyword("global", quic), KeywordStatus::Unknown);

    // Parameters and options with their arity and sections.
    assert_eq!(v2_6.server_param("init-state"), None);
    assert_eq!(v3_2.server_param("init-state"), Some(ParamArity::Value));
    assert_eq!(v3_2.bind_param("no-strict-sni"), Some(ParamArity::Flag));
    assert_eq!(
        v2_6.proxy_option("backend", "forwarded"),
        KeywordStatus::Unknown
    );
    assert_eq!(
        v3_0.proxy_option("backend", "forwarded"),
        KeywordStatus::Allowed
    );
    assert_eq!(
        v3_0.proxy_option("frontend", "forwarded"),
        KeywordStatus::NotInSection
    );

    // The hint draws on the target's keywords only.
    assert_eq!(v3_2.suggest("global", "cpu-polcy"), Some("cpu-policy"));
    assert_ne!(v2_6.suggest("global", "cpu-polcy"), Some("cpu-policy"));
}

#[test]
fn the_2_6_server_table_has_no_interface_parameter_which_debian_s_2_6_refuses() {
    assert_eq!(TABLES_2_6.server_param("interface"), None);
    assert_eq!(TABLES_2_6.bind_param("interface"), Some(ParamArity::Value));
}
