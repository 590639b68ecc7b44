//! Unit tests of `parser`.

use super::*;
use crate::pure::haproxy::ast::DirectiveKind;
use crate::pure::haproxy::words::{quote_word, write_word};

fn words_of(line: &str) -> Vec<String> {
    let config = parse_config(&format!("global\n{line}\n")).expect("line parses");
    config.sections[0].directives[0].words.clone()
}

fn error_of(text: &str) -> ParseError {
    parse_config(text).expect_err("text is rejected")
}

#[test]
fn words_are_separated_by_spaces_and_tabs() {
    assert_eq!(words_of("  maxconn \t 100  "), ["maxconn", "100"]);
}

#[test]
fn a_quoted_word_keeps_its_spaces() {
    assert_eq!(
        words_of(r#"description "a b"  'c  d'"#),
        ["description", "a b", "c  d"]
    );
}

#[test]
fn quotes_inside_a_word_join_its_parts() {
    assert_eq!(words_of(r#"x abc"def"ghi"#), ["x", "abcdefghi"]);
}

#[test]
fn a_hash_starts_a_comment_even_inside_a_word() {
    let config = parse_config("global\n  x a#b c\n").unwrap();
    let directive = &config.sections[0].directives[0];
    assert_eq!(directive.words, ["x", "a"]);
    assert_eq!(directive.comment.as_deref(), Some("#b c"));
}

#[test]
fn a_hash_inside_quotes_is_text() {
    assert_eq!(
        words_of(r#"x "a#b" 'c#d' e\#f"#),
        ["x", "a#b", "c#d", "e#f"]
    );
}

#[test]
fn backslash_escapes_decode_like_haproxy() {
    assert_eq!(
        words_of(r#"x a\ b "q\x41" "t\tn" \"x\" \'y\' "a\\b" "a\$b""#),
        ["x", "a b", "qA", "t\tn", "\"x\"", "'y'", "a\\b", "a$b"]
    );
}

#[test]
fn unknown_escapes_keep_their_backslash() {
    assert_eq!(words_of(r"x \1 \d a\ "), ["x", "\\1", "\\d", "a "]);
    assert_eq!(words_of(r"x a\"), ["x", "a\\"]);
}

#[test]
fn a_dollar_escape_only_works_inside_double_quotes() {
    assert_eq!(words_of(r"x \$c"), ["x", "\\$c"]);
}

#[test]
fn single_quotes_keep_backslashes_and_dollars() {
    assert_eq!(
        words_of(r"x 'a\x41' '${HOME}' '\\'"),
        ["x", "a\\x41", "${HOME}", "\\\\"]
    );
    let config = parse_config("global\n x '${HOME}'\n").unwrap();
    assert!(config.sections[0].directives[0].spans.is_empty());
}

#[test]
fn env_references_outside_double_quotes_are_plain_text() {
    let config = parse_config("global\n x ${HOME}\n").unwrap();
    let directive = &config.sections[0].directives[0];
    assert_eq!(directive.words[1], "${HOME}");
    assert!(!directive.has_env_refs());
}

#[test]
fn env_references_in_double_quotes_stay_unexpanded_and_marked() {
    let config =
        parse_config("global\n x \"fd@${fe}\" \"${T-5s}\" \"$HOME.x\" \"${L[*]}\"\n").unwrap();
    let directive = &config.sections[0].directives[0];
    assert_eq!(
        directive.args(),
        ["fd@${fe}", "${T-5s}", "$HOME.x", "${L[*]}"]
    );
    let kinds: Vec<&SpanKind> = directive.spans.iter().map(|span| &span.kind).collect();
    assert_eq!(
        kinds,
        [
            &SpanKind::EnvRef {
                name: "fe".into(),
                default: None,
                split_words: false
            },
            &SpanKind::EnvRef {
                name: "T".into(),
                default: Some("5s".into()),
                split_words: false
            },
            &SpanKind::EnvRef {
                name: "HOME".into(),
                default: None,
                split_words: false
            },
            &SpanKind::EnvRef {
                name: "L".into(),
                default: None,
                split_words: true
            },
        ]
    );
    let first = &directive.spans[0];
    assert_eq!(
        &directive.words[first.word][first.start..first.end],
        "${fe}"
    );
}

#[test]
fn expand_env_uses_values_then_defaults_and_splits_star_references() {
    let config =
        parse_config("global\n x \"fd@${fe}\" \"${T-5s}\" \"${L[*]}\" \"${NONE}\" y \"${NONE}\"\n")
            .unwrap();
    let directive = &config.sections[0].directives[0];
    let expanded = directive.expand_env(|name| match name {
        "fe" => Some("3".to_owned()),
        "L" => Some("a  b".to_owned()),
        _ => None,
    });
    assert_eq!(expanded, ["x", "fd@3", "5s", "a", "b", "", "y"]);
}

#[test]
fn a_default_value_may_hold_spaces_and_quotes() {
    assert_eq!(words_of(r#"x "${N-a b"c}""#), ["x", "${N-a b\"c}"]);
}

#[test]
fn bad_env_references_are_errors_with_the_line() {
    for bad in [
        r#""$""#,
        r#""$1""#,
        r#""${X""#,
        r#""${X[}""#,
        r#""${X-abc""#,
    ] {
        let error = error_of(&format!("global\n\n  x {bad}\n"));
        assert_eq!(error.line, 3, "{bad}: {error}");
        assert!(
            error.message.contains("environment reference"),
            "{bad}: {error}"
        );
    }
}

#[test]
fn an_unterminated_quote_is_an_error_with_its_line_and_column() {
    let error = error_of("global\n  maxconn 1\n  description \"abc\n");
    assert_eq!(error.line, 3);
    assert!(
        error.message.contains("unterminated double quote"),
        "{error}"
    );
    assert!(error.message.contains("column 15"), "{error}");
    assert_eq!(error_of("global\n x 'abc\n").line, 2);
}

#[test]
fn a_truncated_hex_escape_is_an_error() {
    let error = error_of("global\n x \"\\x4\"\n");
    assert_eq!(error.line, 2);
    assert!(error.message.contains("hexadecimal"), "{error}");
}

#[test]
fn a_hex_escape_that_is_not_utf8_is_kept_as_a_marked_raw_byte() {
    let config = parse_config("global\n x \"str(\\xE0),${N}\"\n").unwrap();
    let directive = &config.sections[0].directives[0];
    assert_eq!(directive.words[1], "str(\\xE0),${N}");
    assert_eq!(directive.word_bytes(1), b"str(\xE0),${N}".to_vec());
    let env = directive
        .spans
        .iter()
        .find(|span| matches!(span.kind, SpanKind::EnvRef { .. }))
        .unwrap();
    assert_eq!(&directive.words[1][env.start..env.end], "${N}");
}

#[test]
fn an_empty_quoted_word_counts_unless_it_ends_the_line() {
    assert_eq!(words_of(r#"x "" y"#), ["x", "", "y"]);
    assert_eq!(words_of(r#"x "" "#), ["x", ""]);
    assert_eq!(words_of(r#"x """#), ["x"]);
}

#[test]
fn a_carriage_return_ends_the_line() {
    assert_eq!(words_of("maxconn 10\r junk"), ["maxconn", "10"]);
}

#[test]
fn more_than_64_words_is_an_error() {
    let many: Vec<String> = (0..64).map(|n| n.to_string()).collect();
    assert_eq!(words_of(&format!("x {}", many[..63].join(" "))).len(), 64);
    let error = error_of(&format!("global\n x {}\n", many.join(" ")));
    assert_eq!(error.line, 2);
    assert!(error.message.contains("too many words"), "{error}");
}

#[test]
fn sections_come_from_the_fixed_keyword_list() {
    let config = parse_config(
        "global\ndefaults web from base\nfrontend fe\nfoo bar\nbackend be\nhttp-errors errs\n",
    )
    .unwrap();
    let kinds: Vec<SectionKind> = config.sections.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [
            SectionKind::Global,
            SectionKind::Defaults,
            SectionKind::Frontend,
            SectionKind::Backend,
            SectionKind::HttpErrors
        ]
    );
    assert_eq!(config.sections[1].name.as_deref(), Some("web"));
    assert_eq!(config.sections[1].from_defaults(), Some("base"));
    assert_eq!(config.sections[2].directives[0].words, ["foo", "bar"]);
}

#[test]
fn line_numbers_are_one_based_and_kept_everywhere() {
    let config =
        parse_config("# top\n\nglobal\n  maxconn 1\n# mid\nbackend be\n  server s 1.2.3.4:80\n")
            .unwrap();
    assert_eq!(config.preamble_layout[0].line, 1);
    assert_eq!(config.preamble_layout[1].line, 2);
    assert_eq!(config.sections[0].line, 3);
    assert_eq!(config.sections[0].directives[0].line, 4);
    assert_eq!(config.sections[0].layout[0].line, 5);
    assert_eq!(config.sections[1].line, 6);
    assert_eq!(config.sections[1].directives[0].line, 7);
}

#[test]
fn a_directive_before_any_section_is_an_error() {
    let error = error_of("# c\nmaxconn 10\nglobal\n");
    assert_eq!(error.line, 2);
    assert!(error.message.contains("out of section"), "{error}");
}

#[test]
fn conditional_blocks_are_kept_as_ordered_lines() {
    let text = ".if feature(THREAD)\n.notice \"threads\"\n.endif\nglobal\n.if 1\n  nbthread 2\n.elif 0\n.else\n.endif\n";
    let config = parse_config(text).unwrap();
    let preamble: Vec<&str> = config.preamble.iter().map(Directive::keyword).collect();
    assert_eq!(preamble, [".if", ".notice", ".endif"]);
    let global: Vec<&str> = config.sections[0]
        .directives
        .iter()
        .map(Directive::keyword)
        .collect();
    assert_eq!(global, [".if", "nbthread", ".elif", ".else", ".endif"]);
    assert_eq!(
        config.sections[0].directives[0].kind(),
        DirectiveKind::Conditional
    );
    assert_eq!(config.preamble[1].kind(), DirectiveKind::Message);
}

#[test]
fn a_conditional_block_may_span_sections() {
    let config = parse_config(".if feature(QUIC)\nfrontend fe\n  bind :443\n.endif\n").unwrap();
    assert_eq!(config.sections[0].directives[1].keyword(), ".endif");
}

#[test]
fn a_directive_inside_a_conditional_block_before_any_section_is_allowed() {
    let config = parse_config(".if 0\nfoo x\n.endif\nglobal\n").unwrap();
    assert_eq!(config.preamble[1].words, ["foo", "x"]);
}

#[test]
fn conditional_nesting_errors_name_the_line() {
    let cases = [
        ("global\n.endif\n", 2, "without a matching '.if'"),
        ("global\n.else\n", 2, "without a matching '.if'"),
        ("global\n.elif 1\n", 2, "without a matching '.if'"),
        ("global\n.if 1\n.else\n.else\n.endif\n", 4, "after '.else'"),
        (
            "global\n.if 1\n.else\n.elif 1\n.endif\n",
            4,
            "after '.else'",
        ),
        (
            "global\n.if 1\n.else 2\n.endif\n",
            3,
            "unexpected argument '2'",
        ),
        ("global\n.if 1\n.endif x\n", 3, "unexpected argument 'x'"),
        ("global\n\n.if 1\n.if 0\n.endif\n", 3, "never closed"),
        ("global\n.notice a b\n", 2, "unexpected argument 'b'"),
        ("global\n.foo x\n", 2, "unknown directive '.foo'"),
    ];
    for (text, line, message) in cases {
        let error = error_of(text);
        assert_eq!(error.line, line, "{text:?}: {error}");
        assert!(error.message.contains(message), "{text:?}: {error}");
    }
}

#[test]
fn unknown_dot_directives_inside_a_block_are_left_to_haproxy() {
    assert!(parse_config("global\n.if 0\n.foo\n.endif\n").is_ok());
}

#[test]
fn scope_lines_are_recognised_and_checked() {
    let config = parse_config("global\n  [my.scope] # c\n").unwrap();
    let directive = &config.sections[0].directives[0];
    assert_eq!(directive.kind(), DirectiveKind::Scope);
    assert_eq!(directive.keyword(), "[my.scope]");
    assert_eq!(error_of("global\n[a b]\n").line, 2);
    assert_eq!(error_of("global\n[]\n").line, 2);
    assert_eq!(error_of("global\n[ab] x\n").line, 2);
    assert_eq!(error_of("global\n \"[ab]\" x\n").line, 2);
}

#[test]
fn comments_and_blank_lines_are_kept_in_the_layout() {
    let config = parse_config("global\n  # one\n\n  maxconn 1 # two\n").unwrap();
    let section = &config.sections[0];
    assert_eq!(section.layout[0].comment.as_deref(), Some("# one"));
    assert_eq!(section.layout[1].comment, None);
    assert_eq!(section.layout[1].before, 0);
    assert_eq!(section.directives[0].comment.as_deref(), Some("# two"));
}

#[test]
fn a_line_with_an_empty_first_word_is_kept_but_not_a_section() {
    let config = parse_config("\"\" maxconn\nglobal\n").unwrap();
    assert_eq!(config.preamble[0].words, ["", "maxconn"]);
}

#[test]
fn write_word_picks_the_lightest_quoting_that_reads_back() {
    let cases = [
        ("plain", "plain"),
        ("", "''"),
        ("a b", "'a b'"),
        ("a#b", "'a#b'"),
        ("it's", "\"it's\""),
        ("a\\b", "'a\\b'"),
        ("$x", "$x"),
        ("a'\n", "\"a'\\n\""),
    ];
    for (word, written) in cases {
        let mut out = String::new();
        write_word(&mut out, word, &[], false).unwrap();
        assert_eq!(out, written);
        assert_eq!(words_of(&format!("x {out} y")), ["x", word, "y"]);
    }
}

/// Words that need each of HAProxy's quoting rules, and mixes of them.
const AWKWARD_WORDS: &[&str] = &[
    "two words",
    "tab\there",
    "it's",
    "say \"hi\"",
    "both ' and \"",
    "back\\slash",
    "trailing\\",
    "\\x41 stays literal",
    "a#b",
    "#start",
    "$HOME",
    "${HOME}",
    "cost $5 each",
    "it's ${HOME} and $HOME",
    "\"$x\" 'y' \\ #z",
    "line\nbreak",
    "carriage\rreturn",
    "bell\u{7}",
    "",
    "'",
    "\"",
    "[not-a-scope]",
    "é and ü",
];

#[test]
fn every_word_written_by_quote_word_reads_back_unchanged_and_unexpanded() {
    for word in AWKWARD_WORDS {
        let written = quote_word(word);
        let config = parse_config(&format!("global\n  x {written} y\n"))
            .unwrap_or_else(|error| panic!("{word:?} written as {written}: {error}"));
        let directive = &config.sections[0].directives[0];
        assert_eq!(directive.words, ["x", word, "y"], "written as {written}");
        assert!(
            directive.spans.is_empty(),
            "{word:?} written as {written} reads as an environment reference"
        );
    }
}

#[test]
fn a_dollar_is_escaped_only_inside_double_quotes() {
    // Outside double quotes HAProxy keeps `$` as it is; inside them `\$` is a dollar.
    assert_eq!(quote_word("$HOME"), "$HOME");
    assert_eq!(quote_word("a $HOME"), "'a $HOME'");
    assert_eq!(quote_word("it's $HOME"), "\"it's \\$HOME\"");
    assert_eq!(words_of(r#"x "it's \$HOME""#), ["x", "it's $HOME"]);
}

#[test]
fn written_lines_read_back_with_their_environment_references_and_raw_bytes() {
    let text = "global\n  x \"fd@${fe}\" \"it's $HOME\" \"str(\\xE0)\" 'a b' \"q\\\"\" # c\n";
    let config = parse_config(text).expect("line parses");
    let directive = &config.sections[0].directives[0];
    let line = directive.to_line();
    let reparsed = parse_config(&format!("global\n  {line}\n")).expect("written line parses");
    assert_eq!(
        &reparsed.sections[0].directives[0].words, &directive.words,
        "{line}"
    );
    assert_eq!(
        &reparsed.sections[0].directives[0].spans, &directive.spans,
        "{line}"
    );
    assert_eq!(directive.spans.len(), 3, "{line}");
}

#[test]
fn an_unbraced_reference_followed_by_name_characters_keeps_its_name_when_written() {
    // `"$TLSV"pn`: the closing quote ends the name, so `pn` is text after the reference.
    // Found by the haproxy_parse_roundtrip fuzz target: the line was written back as
    // `"streq($TLSVpn"`, which reads as a reference to `TLSVpn`.
    for text in [
        "global\n  x \"streq($TLSV\"pn\n",
        "global\n  x \"$A\"_1\"$B\"\n",
    ] {
        let config = parse_config(text).expect("line parses");
        let written = config.to_config_string();
        let reparsed = parse_config(&written).expect("written config parses");
        assert_eq!(config, reparsed, "{text:?} was written as {written:?}");
    }
}

/// A small deterministic generator, so the noise test needs no extra crate.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn random_input_never_panics_and_what_parses_round_trips() {
    const ALPHABET: &[u8] = b" \t\r\n#\"'\\${}[]-*.x0aA:fgbe.ifdn";
    let keywords = [
        "global\n",
        "frontend f\n",
        ".if 1\n",
        ".endif\n",
        "\\x",
        "\\xZ",
        "${",
        "é",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut parsed = 0;
    for _ in 0..4000 {
        let length = (next_random(&mut state) % 80) as usize;
        let mut text = String::new();
        for _ in 0..length {
            let pick = next_random(&mut state);
            if pick.is_multiple_of(7) {
                text.push_str(keywords[(pick / 7) as usize % keywords.len()]);
            } else {
                text.push(ALPHABET[(pick / 7) as usize % ALPHABET.len()] as char);
            }
        }
        let bytes: Vec<u8> = (0..length).map(|_| next_random(&mut state) as u8).collect();
        let lossy = String::from_utf8_lossy(&bytes).into_owned();
        for input in [text, lossy] {
            if let Ok(config) = parse_config(&input) {
                parsed += 1;
                let written = config.to_config_string();
                let reparsed = parse_config(&written)
                    .unwrap_or_else(|error| panic!("{input:?} -> {written:?}: {error}"));
                assert_eq!(config, reparsed, "{input:?} -> {written:?}");
            }
        }
    }
    assert!(parsed > 100, "only {parsed} random inputs parsed");
}
