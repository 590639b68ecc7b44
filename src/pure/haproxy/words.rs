//! Words of an HAProxy configuration line as haptor stores and writes them: the markers on
//! decoded words ([`WordSpan`], [`SpanKind`]) and the one quoting rule, [`write_word`]
//! ([`quote_word`] for a lone word), for every piece of haptor that writes a word into a
//! configuration: the serializer, the deploy plan, the `haproxy -c` preparation and the
//! local target's own lines.
//!
//! The rule mirrors the parser's tokenizer, which follows HAProxy 2.6's `parse_line`: a word
//! is written bare when it is not empty and holds no space, tab, `#`, quote, backslash or
//! control character (and, as a line's first word, does not start with `[`); else in single
//! quotes, where everything is literal (a `$` is never expanded, a backslash stays a
//! backslash); else, when it holds a single quote or a control character other than tab, in
//! double quotes with `\\`, `\"`, `\$`, `\t`, `\n`, `\r` and `\xHH` escapes, so that no `$`
//! starts an environment reference. Outside double quotes a `$` is an ordinary character, so
//! a bare `$x` stays `$x`. A word with markers is always double-quoted, its environment
//! references written as they are.
//!
//! This module sits below both the syntax tree and the parser, which import it; it imports
//! nothing of haptor.

use std::fmt;

use serde::Serialize;

/// A part of a decoded word that is not plain text. Offsets are byte offsets in the word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WordSpan {
    /// Index of the word in its line.
    pub word: usize,
    pub start: usize,
    pub end: usize,
    #[serde(flatten)]
    pub kind: SpanKind,
}

/// What a [`WordSpan`] marks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum SpanKind {
    /// An environment reference inside double quotes (`$NAME`, `${NAME}`, `${NAME-default}`,
    /// `${NAME[*]}`), left unexpanded; the span covers its text as written.
    EnvRef {
        name: String,
        default: Option<String>,
        /// `[*]`: the value is split into several words on spaces.
        split_words: bool,
    },
    /// A byte from a `\xHH` escape that is not valid UTF-8 on its own; the span covers the
    /// four characters `\xHH` standing in for it.
    RawByte { byte: u8 },
}

/// The bytes that separate words outside quotes (C `isspace` without the line ends).
pub(super) fn is_separator(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | 0x0b | 0x0c)
}

/// A word written so that HAProxy (and haptor's parser) reads it back unchanged: bare,
/// single-quoted or double-quoted with escapes, by the rule of [`write_word`]. For a word
/// that is not the first of its line.
pub fn quote_word(word: &str) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    // Writing into a String cannot fail.
    let _ = write_word(&mut out, word, &[], false);
    out
}

/// How a word without markers can be written.
enum Quoting {
    Bare,
    Single,
    Double,
}

fn quoting_for(word: &str, is_keyword: bool) -> Quoting {
    let needs_quotes = word.is_empty()
        || (is_keyword && word.starts_with('['))
        || word.bytes().any(|b| {
            is_separator(b) || matches!(b, b'#' | b'"' | b'\'' | b'\\') || b.is_ascii_control()
        });
    if !needs_quotes {
        Quoting::Bare
    } else if !word
        .bytes()
        .any(|b| b == b'\'' || (b.is_ascii_control() && b != b'\t'))
    {
        Quoting::Single
    } else {
        Quoting::Double
    }
}

/// Writes one decoded word so that the tokenizer reads it back identically: bare when it can,
/// else in single quotes, else in double quotes with escapes. A word with markers is always
/// double-quoted, its environment references written as they are. `is_keyword` is set for
/// a line's first word, which must not look like a scope line.
pub fn write_word<W: fmt::Write + ?Sized>(
    out: &mut W,
    word: &str,
    spans: &[&WordSpan],
    is_keyword: bool,
) -> fmt::Result {
    if spans.is_empty() {
        match quoting_for(word, is_keyword) {
            Quoting::Bare => return out.write_str(word),
            Quoting::Single => {
                out.write_char('\'')?;
                out.write_str(word)?;
                return out.write_char('\'');
            }
            Quoting::Double => {}
        }
    }
    out.write_char('"')?;
    let mut at = 0;
    for span in spans {
        let (Some(before), Some(marked)) =
            (word.get(at..span.start), word.get(span.start..span.end))
        else {
            // A marker that does not fit the word (built in code): ignore it.
            continue;
        };
        write_double_quoted_text(out, before)?;
        match span.kind {
            SpanKind::EnvRef { .. } => {
                out.write_str(marked)?;
                // An unbraced `$NAME` ends where its name ends; a letter, digit or `_` after it
                // would be read as part of the name, so the quotes are closed and reopened
                // (`"$A""b"`), which HAProxy reads as one word.
                let extends_name = word
                    .as_bytes()
                    .get(span.end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
                if !marked.starts_with("${") && extends_name {
                    out.write_str("\"\"")?;
                }
            }
            SpanKind::RawByte { byte } => write!(out, "\\x{byte:02X}")?,
        }
        at = span.end;
    }
    write_double_quoted_text(out, word.get(at..).unwrap_or(""))?;
    out.write_char('"')
}

fn write_double_quoted_text<W: fmt::Write + ?Sized>(out: &mut W, text: &str) -> fmt::Result {
    for c in text.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '"' => out.write_str("\\\"")?,
            '$' => out.write_str("\\$")?,
            '\t' => out.write_str("\\t")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            c if c.is_ascii_control() => write!(out, "\\x{:02X}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Writes `words` with their markers, then the comment, as one line without the newline.
/// `first_word_is_keyword` is set for directive lines, whose first word must not look like a
/// scope line.
pub(crate) fn write_line<W: fmt::Write + ?Sized>(
    out: &mut W,
    words: &[String],
    spans: &[WordSpan],
    comment: Option<&str>,
    first_word_is_keyword: bool,
) -> fmt::Result {
    for (index, word) in words.iter().enumerate() {
        if index > 0 {
            out.write_char(' ')?;
        }
        let word_spans: Vec<&WordSpan> = spans.iter().filter(|span| span.word == index).collect();
        write_word(out, word, &word_spans, index == 0 && first_word_is_keyword)?;
    }
    // An empty last word only counts when whitespace follows it.
    if words.last().is_some_and(String::is_empty) {
        out.write_char(' ')?;
    }
    if let Some(comment) = comment {
        if !words.is_empty() {
            out.write_char(' ')?;
        }
        write_comment(out, comment)?;
    }
    Ok(())
}

/// Writes a comment, making sure it starts with `#` and holds no line break.
pub(crate) fn write_comment<W: fmt::Write + ?Sized>(out: &mut W, comment: &str) -> fmt::Result {
    if !comment.starts_with('#') {
        out.write_str("# ")?;
    }
    out.write_str(comment.split(['\n', '\r']).next().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_word_writes_plain_words_bare() {
        for word in [
            "plain",
            "10.0.0.1:80",
            "/etc/haproxy/maps/hosts.map",
            "$x",
            "é",
        ] {
            assert_eq!(quote_word(word), word);
        }
    }

    #[test]
    fn quote_word_uses_single_quotes_for_spaces_hashes_backslashes_and_double_quotes() {
        let cases = [
            ("", "''"),
            ("a b", "'a b'"),
            ("tab\there", "'tab\there'"),
            ("a#b", "'a#b'"),
            ("a\\b", "'a\\b'"),
            ("say \"hi\"", "'say \"hi\"'"),
            ("a $HOME", "'a $HOME'"),
        ];
        for (word, written) in cases {
            assert_eq!(quote_word(word), written, "{word:?}");
        }
    }

    #[test]
    fn quote_word_uses_double_quotes_with_escapes_for_single_quotes_and_control_characters() {
        let cases = [
            ("it's", "\"it's\""),
            ("it's \"$x\" \\", "\"it's \\\"\\$x\\\" \\\\\""),
            ("a'\n", "\"a'\\n\""),
            ("cr\r", "\"cr\\r\""),
            ("bell\u{7}", "\"bell\\x07\""),
        ];
        for (word, written) in cases {
            assert_eq!(quote_word(word), written, "{word:?}");
        }
    }

    #[test]
    fn a_first_word_that_looks_like_a_scope_line_is_quoted() {
        let mut first = String::new();
        write_word(&mut first, "[x]", &[], true).expect("writing to a String");
        assert_eq!(first, "'[x]'");
        assert_eq!(quote_word("[x]"), "[x]");
    }

    #[test]
    fn a_word_with_markers_is_double_quoted_with_its_references_as_written() {
        let span = WordSpan {
            word: 1,
            start: 3,
            end: 8,
            kind: SpanKind::EnvRef {
                name: "fe".into(),
                default: None,
                split_words: false,
            },
        };
        let mut out = String::new();
        write_word(&mut out, "fd@${fe}$", &[&span], false).expect("writing to a String");
        assert_eq!(out, "\"fd@${fe}\\$\"");
    }
}
