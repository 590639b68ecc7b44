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
    let mut builder = ConfigBuilder::default();
    for (index, raw_line) in config_lines(text).enumerate() {
        builder.add_line(index + 1, raw_line)?;
    }
    builder.finish()
}

/// The lines of a configuration file as the parser numbers them (line `n` is item `n - 1`):
/// after a leading byte-order mark, split at each newline.
pub fn config_lines(text: &str) -> std::str::SplitTerminator<'_, char> {
    text.strip_prefix('\u{feff}')
        .unwrap_or(text)
        .split_terminator('\n')
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
mod tests;
