//! The tokenizer and parser for HAProxy configuration files, following HAProxy's own line
//! rules (those of HAProxy 2.6's `parse_line` and `readcfgfile`):
//!
//! - words are separated by spaces and tabs; `#` outside quotes starts a comment, even in the
//!   middle of a word; a carriage return ends the line;
//! - double quotes group words and allow `$NAME`, `${NAME}`, `${NAME-default}` and
//!   `${NAME[*]}` environment references, which stay unexpanded here (see
//!   [`Directive::expand_env`](super::ast::Directive::expand_env)); outside double quotes a
//!   `$` is an ordinary character, as in HAProxy;
//! - single quotes keep everything literally;
//! - outside single quotes a backslash escapes a space, `#`, `\`, `'`, `"` and, inside double
//!   quotes, `$`; `\t`, `\n`, `\r` and `\xHH` give those bytes; before any other character it
//!   stays a backslash;
//! - a line that starts with `[` is a scope line `[name]`;
//! - `.if`/`.elif`/`.else`/`.endif` and `.diag`/`.notice`/`.warning`/`.alert` are kept as
//!   ordinary lines, and their nesting is checked; conditions are not evaluated.
//!
//! The serializer's word quoting mirrors these rules one module down, in
//! [`words`](super::words) (which the syntax tree uses too); the tests here pin that every
//! word it writes reads back unchanged.

use super::ast::{Config, Directive, LayoutLine, Section};
use super::sections::SectionKind;
use super::words::{SpanKind, WordSpan, is_separator};

/// HAProxy stops reading a line after this many words (`MAX_LINE_ARGS`).
const MAX_WORDS_PER_LINE: usize = 64;

/// A configuration HAProxy would refuse to read, with the 1-based line where it happens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl ParseError {
    fn new(line: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            line,
            message: message.into(),
        }
    }
}

/// Parses the text of an HAProxy configuration file.
///
/// Environment references are not expanded. Errors are the ones HAProxy reports while reading
/// lines: unterminated quotes, bad escapes and environment references, conditional blocks
/// that do not nest, and directives before the first section.
pub fn parse_config(text: &str) -> Result<Config, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut builder = ConfigBuilder::default();
    for (index, raw_line) in text.split_terminator('\n').enumerate() {
        builder.add_line(index + 1, raw_line)?;
    }
    builder.finish()
}

/// The words of one line.
#[derive(Debug, Default)]
struct Tokens {
    words: Vec<String>,
    spans: Vec<WordSpan>,
    comment: Option<String>,
}

/// One `.if` block that is still open.
#[derive(Debug)]
struct OpenBlock {
    line: usize,
    seen_else: bool,
}

#[derive(Debug, Default)]
struct ConfigBuilder {
    config: Config,
    current: Option<Section>,
    open_blocks: Vec<OpenBlock>,
    /// The tokenizer's buffers, kept across lines to save allocations.
    scratch: Scratch,
}

/// The tokenizer's working buffers: the words of the current line and the word being built.
#[derive(Debug, Default)]
struct Scratch {
    tokens: Tokens,
    word: WordBuffer,
}

impl ConfigBuilder {
    fn add_line(&mut self, line: usize, raw_line: &str) -> Result<(), ParseError> {
        if raw_line.contains('\0') {
            return Err(ParseError::new(line, "the line contains a NUL character"));
        }
        let content = raw_line.trim_start_matches(is_leading_space);
        let column_offset = raw_line.len() - content.len();
        if content.starts_with('[') {
            let directive = parse_scope_line(line, content)?;
            self.push_directive(directive);
            return Ok(());
        }
        tokenize(content, line, column_offset, &mut self.scratch)?;
        let comment = self.scratch.tokens.comment.take();
        if self.scratch.tokens.words.is_empty() {
            self.push_layout(line, comment);
            return Ok(());
        }
        // Exact-size vectors: the scratch ones keep their capacity for the next line.
        let directive = Directive {
            line,
            words: self.scratch.tokens.words.drain(..).collect(),
            spans: self.scratch.tokens.spans.drain(..).collect(),
            comment,
        };
        let keyword = directive.keyword();
        if keyword.starts_with('[') {
            return Err(ParseError::new(
                line,
                format!(
                    "'{keyword}' cannot be a keyword: only a scope line '[name]' may start with '['"
                ),
            ));
        }
        if keyword.starts_with('.') {
            self.check_dot_directive(&directive)?;
            self.push_directive(directive);
            return Ok(());
        }
        if let Some(kind) = SectionKind::from_keyword(keyword) {
            self.start_section(kind, directive);
            return Ok(());
        }
        if self.current.is_none() && self.open_blocks.is_empty() && !keyword.is_empty() {
            return Err(ParseError::new(
                line,
                format!(
                    "unknown keyword '{keyword}' out of section: directives must follow a section header such as 'global' or 'frontend NAME'"
                ),
            ));
        }
        self.push_directive(directive);
        Ok(())
    }

    /// Checks the nesting of conditional blocks and the arguments of the dot directives.
    fn check_dot_directive(&mut self, directive: &Directive) -> Result<(), ParseError> {
        let line = directive.line;
        let keyword = directive.keyword();
        let no_arguments = |what: &str| match directive.args().first() {
            Some(extra) => Err(ParseError::new(
                line,
                format!("unexpected argument '{extra}' for '{what}'"),
            )),
            None => Ok(()),
        };
        match keyword {
            ".if" => self.open_blocks.push(OpenBlock {
                line,
                seen_else: false,
            }),
            ".elif" | ".else" => {
                let Some(block) = self.open_blocks.last_mut() else {
                    return Err(ParseError::new(
                        line,
                        format!("'{keyword}' without a matching '.if'"),
                    ));
                };
                if block.seen_else {
                    return Err(ParseError::new(
                        line,
                        format!("'{keyword}' after '.else' is not permitted"),
                    ));
                }
                if keyword == ".else" {
                    block.seen_else = true;
                    no_arguments(".else")?;
                }
            }
            ".endif" => {
                if self.open_blocks.pop().is_none() {
                    return Err(ParseError::new(line, "'.endif' without a matching '.if'"));
                }
                no_arguments(".endif")?;
            }
            // HAProxy skips the lines below inside a false block; conditions are not
            // evaluated here, so they are only checked outside conditional blocks.
            _ if !self.open_blocks.is_empty() => {}
            ".diag" | ".notice" | ".warning" | ".alert" => {
                if let Some(extra) = directive.args().get(1) {
                    return Err(ParseError::new(
                        line,
                        format!(
                            "unexpected argument '{extra}' for '{keyword}'; put the message in quotes if it contains spaces"
                        ),
                    ));
                }
            }
            _ => {
                return Err(ParseError::new(
                    line,
                    format!(
                        "unknown directive '{keyword}': lines starting with '.' must be .if, .elif, .else, .endif, .diag, .notice, .warning or .alert"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn start_section(&mut self, kind: SectionKind, header: Directive) {
        if let Some(previous) = self.current.take() {
            self.config.sections.push(previous);
        }
        let mut words = header.words.into_iter().skip(1);
        let name = words.next();
        self.current = Some(Section {
            kind,
            name,
            args: words.collect(),
            line: header.line,
            header_spans: header.spans,
            comment: header.comment,
            directives: Vec::new(),
            layout: Vec::new(),
        });
    }

    fn push_directive(&mut self, directive: Directive) {
        match &mut self.current {
            Some(section) => section.directives.push(directive),
            None => self.config.preamble.push(directive),
        }
    }

    fn push_layout(&mut self, line: usize, comment: Option<String>) {
        let (directives, layout) = match &mut self.current {
            Some(section) => (&section.directives, &mut section.layout),
            None => (&self.config.preamble, &mut self.config.preamble_layout),
        };
        layout.push(LayoutLine {
            line,
            before: directives.len(),
            comment,
        });
    }

    fn finish(mut self) -> Result<Config, ParseError> {
        if let Some(block) = self.open_blocks.first() {
            return Err(ParseError::new(
                block.line,
                "'.if' block is never closed: add '.endif'",
            ));
        }
        if let Some(section) = self.current.take() {
            self.config.sections.push(section);
        }
        Ok(self.config)
    }
}

/// The characters HAProxy skips before a line's first word (C `isspace`).
fn is_leading_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\x0b' | '\x0c')
}

/// Bytes the tokenizer must look at one by one; runs of other bytes are copied as they are.
fn is_special(byte: u8) -> bool {
    matches!(
        byte,
        b'\r' | b'#' | b'"' | b'\'' | b'\\' | b'$' | b' ' | b'\t' | 0x0b | 0x0c
    )
}

/// Parses a scope line `[name]` (optionally followed by a comment).
fn parse_scope_line(line: usize, content: &str) -> Result<Directive, ParseError> {
    let inner = &content[1..];
    let name = match inner.find(']') {
        Some(end) if end > 0 => &inner[..end],
        _ => return Err(ParseError::new(line, "empty scope name: write '[name]'")),
    };
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
    {
        return Err(ParseError::new(
            line,
            format!("character '{bad}' is not permitted in scope name '{name}'"),
        ));
    }
    let rest = inner[name.len() + 1..].trim_start_matches(is_leading_space);
    let rest = rest.split('\r').next().unwrap_or("");
    let comment = if rest.starts_with('#') {
        Some(rest.trim_end().to_owned())
    } else if let Some(bad) = rest.chars().next() {
        return Err(ParseError::new(
            line,
            format!("character '{bad}' is not permitted after scope declaration '[{name}]'"),
        ));
    } else {
        None
    };
    Ok(Directive {
        line,
        words: vec![format!("[{name}]")],
        spans: Vec::new(),
        comment,
    })
}

/// The word being built: its bytes and the markers found so far (offsets into `bytes`).
#[derive(Debug, Default)]
struct WordBuffer {
    bytes: Vec<u8>,
    env_spans: Vec<(usize, usize, SpanKind)>,
}

impl WordBuffer {
    /// Appends the word to `tokens` and empties the buffer for the next word (keeping its
    /// allocation). Bytes that are not UTF-8 (only `\xHH` escapes can produce them) are
    /// written as `\xHH` and marked.
    fn finish(&mut self, word_index: usize, tokens: &mut Tokens) {
        let raw_bytes = match std::str::from_utf8(&self.bytes) {
            Ok(text) => {
                tokens.words.push(text.to_owned());
                Vec::new()
            }
            Err(_) => {
                let (text, raw_bytes) = decode_with_raw_bytes(&self.bytes);
                tokens.words.push(text);
                raw_bytes
            }
        };
        self.bytes.clear();
        if self.env_spans.is_empty() && raw_bytes.is_empty() {
            return;
        }
        // Raw bytes grow from one byte to four characters: shift the spans behind them.
        let shifted = |offset: usize| {
            offset
                + 3 * raw_bytes
                    .iter()
                    .filter(|(original, _)| *original < offset)
                    .count()
        };
        let first_new = tokens.spans.len();
        tokens
            .spans
            .extend(self.env_spans.drain(..).map(|(start, end, kind)| WordSpan {
                word: word_index,
                start: shifted(start),
                end: shifted(end),
                kind,
            }));
        tokens
            .spans
            .extend(raw_bytes.iter().map(|&(original, byte)| {
                let start = shifted(original);
                WordSpan {
                    word: word_index,
                    start,
                    end: start + 4,
                    kind: SpanKind::RawByte { byte },
                }
            }));
        tokens.spans[first_new..].sort_by_key(|span| span.start);
    }
}

/// Decodes bytes that are not all UTF-8: invalid bytes become `\xHH`. Returns the text and
/// the original offset and value of each invalid byte.
fn decode_with_raw_bytes(bytes: &[u8]) -> (String, Vec<(usize, u8)>) {
    let mut text = String::with_capacity(bytes.len() + 8);
    let mut raw_bytes = Vec::new();
    let mut offset = 0;
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        offset += chunk.valid().len();
        for &byte in chunk.invalid() {
            raw_bytes.push((offset, byte));
            text.push_str(&format!("\\x{byte:02X}"));
            offset += 1;
        }
    }
    (text, raw_bytes)
}

/// Splits one line (leading spaces already removed) into decoded words, left in
/// `scratch.tokens`. `column_offset` is the number of characters removed, for error columns.
fn tokenize(
    content: &str,
    line: usize,
    column_offset: usize,
    scratch: &mut Scratch,
) -> Result<(), ParseError> {
    let bytes = content.as_bytes();
    let column = |at: usize| column_offset + content[..at].chars().count() + 1;
    let Scratch { tokens, word } = scratch;
    tokens.words.clear();
    tokens.spans.clear();
    tokens.comment = None;
    word.bytes.clear();
    word.env_spans.clear();
    let mut in_double = false;
    let mut in_single = false;
    let mut quote_at = 0;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match byte {
            b'\r' => break,
            b'#' if !in_single && !in_double => {
                let comment = content[at..].split('\r').next().unwrap_or("");
                tokens.comment = Some(comment.trim_end().to_owned());
                break;
            }
            b'"' if !in_single => {
                in_double = !in_double;
                quote_at = at;
                at += 1;
            }
            b'\'' if !in_double => {
                in_single = !in_single;
                quote_at = at;
                at += 1;
            }
            b'\\' if !in_single => {
                at = decode_escape(content, at, in_double, &mut word.bytes).map_err(|message| {
                    ParseError::new(line, format!("{message} at column {}", column(at)))
                })?;
            }
            _ if is_separator(byte) && !in_single && !in_double => {
                while at < bytes.len() && is_separator(bytes[at]) {
                    at += 1;
                }
                let index = tokens.words.len();
                word.finish(index, tokens);
            }
            b'$' if in_double => {
                let (end, kind) = parse_env_ref(content, at).map_err(|message| {
                    ParseError::new(line, format!("{message} at column {}", column(at)))
                })?;
                let start = word.bytes.len();
                word.bytes.extend_from_slice(&bytes[at..end]);
                word.env_spans.push((start, word.bytes.len(), kind));
                at = end;
            }
            _ => {
                let start = at;
                at += 1;
                while at < bytes.len() && !is_special(bytes[at]) {
                    at += 1;
                }
                word.bytes.extend_from_slice(&bytes[start..at]);
            }
        }
        if tokens.words.len() >= MAX_WORDS_PER_LINE
            && at < bytes.len()
            && !is_comment_or_end(&bytes[at..])
        {
            return Err(ParseError::new(
                line,
                format!("too many words: HAProxy reads at most {MAX_WORDS_PER_LINE} on one line"),
            ));
        }
    }
    if in_double || in_single {
        let kind = if in_double { "double" } else { "single" };
        return Err(ParseError::new(
            line,
            format!(
                "unterminated {kind} quote opened at column {}",
                column(quote_at)
            ),
        ));
    }
    // As in HAProxy, an empty last word (after trailing spaces, or a final `""`) is dropped.
    if !word.bytes.is_empty() {
        let index = tokens.words.len();
        word.finish(index, tokens);
    }
    Ok(())
}

/// Whether only a comment or the end of the line follows.
fn is_comment_or_end(rest: &[u8]) -> bool {
    matches!(rest.first(), None | Some(b'#') | Some(b'\r'))
}

/// Decodes the backslash sequence at `at` into `out`, returning the offset after it.
fn decode_escape(
    content: &str,
    at: usize,
    in_double: bool,
    out: &mut Vec<u8>,
) -> Result<usize, String> {
    let bytes = content.as_bytes();
    let decoded = match bytes.get(at + 1) {
        Some(&next @ (b' ' | b'\\' | b'#' | b'\'' | b'"')) => next,
        Some(b'$') if in_double => b'$',
        Some(b't') => b'\t',
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b'x') => {
            let digits = bytes.get(at + 2..at + 4);
            let value = digits
                .and_then(|digits| std::str::from_utf8(digits).ok())
                .filter(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|digits| u8::from_str_radix(digits, 16).ok());
            let Some(value) = value else {
                return Err("invalid escape: '\\x' needs two hexadecimal digits".to_owned());
            };
            out.push(value);
            return Ok(at + 4);
        }
        // Not an escape sequence: the backslash stays, the next character is read normally.
        _ => {
            out.push(b'\\');
            return Ok(at + 1);
        }
    };
    out.push(decoded);
    Ok(at + 2)
}

/// Parses the environment reference starting with the `$` at `at` (inside double quotes).
/// Returns the offset after it and its marker.
fn parse_env_ref(content: &str, at: usize) -> Result<(usize, SpanKind), String> {
    let bytes = content.as_bytes();
    let mut cursor = at + 1;
    let braced = bytes.get(cursor) == Some(&b'{');
    if braced {
        cursor += 1;
    }
    let name_start = cursor;
    match bytes.get(cursor) {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => {}
        Some(b'.') => cursor += 1,
        _ => {
            return Err(
                "invalid environment reference: '$' must be followed by a name \
                        (a letter or '_'); write '\\$' for a literal dollar sign"
                    .to_owned(),
            );
        }
    }
    while bytes
        .get(cursor)
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    {
        cursor += 1;
    }
    let name = content[name_start..cursor].to_owned();
    let mut split_words = false;
    let mut default = None;
    if braced {
        if bytes.get(cursor) == Some(&b'[') {
            if bytes.get(cursor + 1..cursor + 3) != Some(b"*]".as_slice()) {
                return Err(format!(
                    "invalid environment reference '${{{name}[': only '[*]' may follow the name"
                ));
            }
            split_words = true;
            cursor += 3;
        }
        match bytes.get(cursor) {
            Some(b'-') => {
                let Some(length) = content[cursor + 1..].find('}') else {
                    return Err(format!(
                        "unterminated environment reference '${{{name}-': missing '}}'"
                    ));
                };
                default = Some(content[cursor + 1..cursor + 1 + length].to_owned());
                cursor += length + 2;
            }
            Some(b'}') => cursor += 1,
            _ => {
                return Err(format!(
                    "unterminated environment reference '${{{name}': missing '}}'"
                ));
            }
        }
    }
    Ok((
        cursor,
        SpanKind::EnvRef {
            name,
            default,
            split_words,
        },
    ))
}

#[cfg(test)]
mod tests {
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
        let config = parse_config(
            "global\n x \"fd@${fe}\" \"${T-5s}\" \"${L[*]}\" \"${NONE}\" y \"${NONE}\"\n",
        )
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
        let config = parse_config(
            "# top\n\nglobal\n  maxconn 1\n# mid\nbackend be\n  server s 1.2.3.4:80\n",
        )
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
}
