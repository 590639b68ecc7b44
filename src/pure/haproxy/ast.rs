//! The syntax tree of an HAProxy configuration file, as produced by
//! [`parse_config`](super::parse_config), and its serializer back to HAProxy syntax.
//!
//! A file is a preamble (lines before the first section header: conditional blocks, messages,
//! comments) followed by sections. A section owns every line up to the next section header,
//! including conditional-block lines (`.if` … `.endif`), which HAProxy handles line by line and
//! which may therefore open in one section and close in another. Words are stored decoded
//! (quotes and backslash escapes removed); environment references such as `${NAME}` are kept
//! unexpanded and marked with a [`WordSpan`].
//!
//! Equality: the derived `PartialEq` compares everything, including line numbers, comments and
//! blank lines. Serializing a parsed config keeps one output line per input line, so a parsed
//! config and the re-parse of its serialization are equal in this strict sense. Quoting style,
//! indentation, spacing and text after a carriage return inside a line are not kept.
//! [`Config::eq_ignoring_layout`] compares only what HAProxy acts on: sections and directives
//! with their decoded words and markers, ignoring line numbers, comments and blank lines.

use std::fmt;

use serde::Serialize;

use super::sections::SectionKind;
use super::words::{SpanKind, WordSpan, write_comment, write_line};

/// A parsed HAProxy configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Config {
    /// Lines before the first section header: conditional-block lines and messages, plus any
    /// directive that sits inside a conditional block there (HAProxy accepts those when the
    /// block is false).
    pub preamble: Vec<Directive>,
    /// Comments and blank lines of the preamble.
    pub preamble_layout: Vec<LayoutLine>,
    /// Sections in file order.
    pub sections: Vec<Section>,
}

/// One section: its header line and the lines it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Section {
    pub kind: SectionKind,
    /// The first word after the keyword (`defaults` may have none).
    pub name: Option<String>,
    /// The words after the name, e.g. `["from", "base"]` for `defaults tcp from base`.
    pub args: Vec<String>,
    /// 1-based line of the header.
    pub line: usize,
    /// Markers on the header words; word index 0 is the keyword, 1 the name.
    pub header_spans: Vec<WordSpan>,
    /// The comment after the header (from `#` to the end of the line), if any.
    pub comment: Option<String>,
    /// Every line with words up to the next section header, in order, including conditional
    /// block lines, messages and scope lines.
    pub directives: Vec<Directive>,
    /// Comments and blank lines of the section.
    pub layout: Vec<LayoutLine>,
}

impl Section {
    /// A section with no lines yet, for building configurations in code.
    pub fn new(kind: SectionKind, name: Option<&str>) -> Section {
        Section {
            kind,
            name: name.map(str::to_owned),
            args: Vec::new(),
            line: 0,
            header_spans: Vec::new(),
            comment: None,
            directives: Vec::new(),
            layout: Vec::new(),
        }
    }

    /// The header keyword, e.g. `"frontend"`.
    pub fn keyword(&self) -> &'static str {
        self.kind.keyword()
    }

    /// The name of the defaults section this one takes its settings from (`from NAME`).
    pub fn from_defaults(&self) -> Option<&str> {
        match self.args.as_slice() {
            [from, name, ..] if from == "from" => Some(name),
            _ => None,
        }
    }

    /// The directives whose first word is `keyword`, in order.
    pub fn directives_named<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a Directive> {
        self.directives
            .iter()
            .filter(move |directive| directive.keyword() == keyword)
    }
}

/// One line with words (a statement, a conditional-block line, a message or a scope line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Directive {
    /// 1-based line number (0 for directives built in code).
    pub line: usize,
    /// The decoded words: quotes and escapes removed, environment references kept as written
    /// (e.g. `${HAPROXY_TEST_TIMEOUT-5s}`) and marked in `spans`. A scope line `[name]` has
    /// the single word `[name]`.
    pub words: Vec<String>,
    /// Markers on parts of words that are not plain text, sorted by word then offset.
    pub spans: Vec<WordSpan>,
    /// The comment after the words (from `#` to the end of the line), if any.
    pub comment: Option<String>,
}

/// The kinds of line a [`Directive`] can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectiveKind {
    /// An ordinary keyword line.
    Statement,
    /// `.if`, `.elif`, `.else` or `.endif`.
    Conditional,
    /// `.diag`, `.notice`, `.warning` or `.alert`.
    Message,
    /// A scope line `[name]`.
    Scope,
}

/// A comment or blank line, kept so the serializer can reproduce the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayoutLine {
    pub line: usize,
    /// Index of the directive this line precedes in its container (the preamble or a
    /// section); equal to the number of directives when it comes after all of them.
    pub before: usize,
    /// The comment from `#` on, or `None` for a blank line.
    pub comment: Option<String>,
}

impl Directive {
    /// A directive from plain words (no environment references), for building configs in code.
    pub fn new<I, S>(words: I) -> Directive
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Directive {
            line: 0,
            words: words.into_iter().map(Into::into).collect(),
            spans: Vec::new(),
            comment: None,
        }
    }

    /// The first word, or `""` for a directive without words.
    pub fn keyword(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }

    /// The words after the first.
    pub fn args(&self) -> &[String] {
        self.words.get(1..).unwrap_or(&[])
    }

    /// What kind of line this is.
    pub fn kind(&self) -> DirectiveKind {
        match self.keyword() {
            ".if" | ".elif" | ".else" | ".endif" => DirectiveKind::Conditional,
            ".diag" | ".notice" | ".warning" | ".alert" => DirectiveKind::Message,
            keyword if keyword.starts_with('[') => DirectiveKind::Scope,
            _ => DirectiveKind::Statement,
        }
    }

    /// The `no` or `default` modifier in front of the keyword (as in `no option httplog`),
    /// and the words after it. Without a modifier, all words.
    pub fn unprefixed(&self) -> (Option<&str>, &[String]) {
        match self.words.as_slice() {
            [first, rest @ ..] if !rest.is_empty() && (first == "no" || first == "default") => {
                (Some(first.as_str()), rest)
            }
            words => (None, words),
        }
    }

    /// The markers on word `word`.
    pub fn spans_of(&self, word: usize) -> impl Iterator<Item = &WordSpan> {
        self.spans.iter().filter(move |span| span.word == word)
    }

    /// Whether any word holds an environment reference.
    pub fn has_env_refs(&self) -> bool {
        self.spans
            .iter()
            .any(|span| matches!(span.kind, SpanKind::EnvRef { .. }))
    }

    /// Whether word `word` holds an environment reference (its value is only known at run time).
    pub fn word_has_env_ref(&self, word: usize) -> bool {
        self.spans_of(word)
            .any(|span| matches!(span.kind, SpanKind::EnvRef { .. }))
    }

    /// The exact bytes HAProxy would see for word `word` (raw-byte markers turned back into
    /// their bytes; environment references left as written).
    pub fn word_bytes(&self, word: usize) -> Vec<u8> {
        let Some(text) = self.words.get(word) else {
            return Vec::new();
        };
        let mut bytes = Vec::with_capacity(text.len());
        let mut at = 0;
        for span in self.spans_of(word) {
            if let SpanKind::RawByte { byte } = span.kind {
                bytes.extend_from_slice(text.get(at..span.start).unwrap_or("").as_bytes());
                bytes.push(byte);
                at = span.end;
            }
        }
        bytes.extend_from_slice(text.get(at..).unwrap_or("").as_bytes());
        bytes
    }

    /// The directive as one line of HAProxy syntax, with its comment (no indentation, no
    /// newline).
    pub fn to_line(&self) -> String {
        let mut line = String::new();
        // Writing into a String cannot fail.
        let _ = self.write_line(&mut line);
        line
    }

    fn write_line<W: fmt::Write + ?Sized>(&self, out: &mut W) -> fmt::Result {
        if self.kind() == DirectiveKind::Scope {
            // Scope lines are recognised on the raw line, so they are written as they are.
            out.write_str(self.keyword())?;
            if let Some(comment) = &self.comment {
                out.write_str(" ")?;
                write_comment(out, comment)?;
            }
            return Ok(());
        }
        write_line(out, &self.words, &self.spans, self.comment.as_deref(), true)
    }

    /// The words with environment references replaced the way HAProxy does it: the value from
    /// `lookup`, else the default, else nothing; a `[*]` reference splits its value into
    /// several words at each run of spaces; an empty last word is dropped. Raw-byte markers
    /// stay written as `\xHH`.
    pub fn expand_env(&self, lookup: impl Fn(&str) -> Option<String>) -> Vec<String> {
        let mut expanded = Vec::with_capacity(self.words.len());
        for (index, text) in self.words.iter().enumerate() {
            let mut current = String::with_capacity(text.len());
            let mut at = 0;
            for span in self.spans_of(index) {
                let SpanKind::EnvRef {
                    name,
                    default,
                    split_words,
                } = &span.kind
                else {
                    continue;
                };
                current.push_str(text.get(at..span.start).unwrap_or(""));
                at = span.end;
                let value = lookup(name).or_else(|| default.clone()).unwrap_or_default();
                if *split_words {
                    // As HAProxy does: each run of spaces ends the current word.
                    let mut chars = value.chars().peekable();
                    while let Some(c) = chars.next() {
                        if c.is_ascii_whitespace() {
                            while chars.next_if(char::is_ascii_whitespace).is_some() {}
                            expanded.push(std::mem::take(&mut current));
                        } else {
                            current.push(c);
                        }
                    }
                } else {
                    current.push_str(&value);
                }
            }
            current.push_str(text.get(at..).unwrap_or(""));
            expanded.push(current);
        }
        // HAProxy drops an empty last word, also when a reference expanded to nothing.
        if expanded.last().is_some_and(String::is_empty) {
            expanded.pop();
        }
        expanded
    }
}

impl Config {
    /// All sections of one kind, in order.
    pub fn sections_of(&self, kind: SectionKind) -> impl Iterator<Item = &Section> {
        self.sections
            .iter()
            .filter(move |section| section.kind == kind)
    }

    /// The first section of `kind` named `name`.
    pub fn section(&self, kind: SectionKind, name: &str) -> Option<&Section> {
        self.sections_of(kind)
            .find(|section| section.name.as_deref() == Some(name))
    }

    /// Equality of what HAProxy acts on: section headers and directives (words and markers),
    /// ignoring line numbers, comments and blank lines.
    pub fn eq_ignoring_layout(&self, other: &Config) -> bool {
        fn directives_eq(left: &[Directive], right: &[Directive]) -> bool {
            left.len() == right.len()
                && left
                    .iter()
                    .zip(right)
                    .all(|(a, b)| a.words == b.words && a.spans == b.spans)
        }
        directives_eq(&self.preamble, &other.preamble)
            && self.sections.len() == other.sections.len()
            && self.sections.iter().zip(&other.sections).all(|(a, b)| {
                a.kind == b.kind
                    && a.name == b.name
                    && a.args == b.args
                    && a.header_spans == b.header_spans
                    && directives_eq(&a.directives, &b.directives)
            })
    }

    /// The configuration in HAProxy syntax (same as `to_string()`).
    pub fn to_config_string(&self) -> String {
        self.to_string()
    }
}

/// Writes one container (the preamble or a section body): layout lines interleaved with
/// directives, each line indented by `indent`.
fn write_container(
    out: &mut fmt::Formatter<'_>,
    directives: &[Directive],
    layout: &[LayoutLine],
    indent: &str,
) -> fmt::Result {
    let mut layout_lines = layout.iter().peekable();
    for (index, directive) in directives.iter().enumerate() {
        while let Some(layout_line) =
            layout_lines.next_if(|layout_line| layout_line.before <= index)
        {
            write_layout_line(out, layout_line, indent)?;
        }
        out.write_str(indent)?;
        directive.write_line(out)?;
        out.write_str("\n")?;
    }
    for layout_line in layout_lines {
        write_layout_line(out, layout_line, indent)?;
    }
    Ok(())
}

fn write_layout_line(
    out: &mut fmt::Formatter<'_>,
    layout_line: &LayoutLine,
    indent: &str,
) -> fmt::Result {
    if let Some(comment) = &layout_line.comment {
        out.write_str(indent)?;
        write_comment(out, comment)?;
    }
    out.write_str("\n")
}

/// Serializes to HAProxy syntax: one line per directive, comment and blank line, section
/// bodies indented by four spaces, words quoted where they need it.
impl fmt::Display for Config {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_container(out, &self.preamble, &self.preamble_layout, "")?;
        for section in &self.sections {
            let mut header = Vec::with_capacity(2 + section.args.len());
            header.push(section.keyword().to_owned());
            header.extend(section.name.iter().cloned());
            header.extend(section.args.iter().cloned());
            write_line(
                out,
                &header,
                &section.header_spans,
                section.comment.as_deref(),
                false,
            )?;
            out.write_str("\n")?;
            write_container(out, &section.directives, &section.layout, "    ")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::haproxy::parse_config;

    const SAMPLE: &str = r#"# managed by haptor
.if feature(THREAD)
.notice "threads"
.endif

global
    log "${LOG_HOST-127.0.0.1}:514" local0   # where logs go
    description 'a "quoted" #text'
    [scope.one]
defaults named from base
    timeout connect 5s
frontend fe
    bind "fd@${fe_1}" ssl crt /etc/a\ b.pem
    http-request set-header X "str(\xE0)"
    http-request set-header Y "tab\there" if { hdr(x) -m str "" }
    http-request set-var(txn.v) str('it''s')
backend be
    server s1 10.0.0.1:80 check
"#;

    #[test]
    fn serializing_and_reparsing_gives_an_equal_config() {
        let config = parse_config(SAMPLE).expect("sample parses");
        let written = config.to_string();
        let reparsed = parse_config(&written).expect("serialized sample parses");
        assert_eq!(config, reparsed, "serialized as:\n{written}");
        assert_eq!(written.lines().count(), SAMPLE.lines().count());
    }

    #[test]
    fn the_serializer_quotes_only_words_that_need_it() {
        let config = parse_config(SAMPLE).expect("sample parses");
        let written = config.to_string();
        assert!(
            written.contains("\n    server s1 10.0.0.1:80 check\n"),
            "{written}"
        );
        assert!(
            written.contains("bind \"fd@${fe_1}\" ssl crt '/etc/a b.pem'"),
            "{written}"
        );
        assert!(written.contains("\"str(\\xE0)\""), "{written}");
    }

    #[test]
    fn layout_equality_ignores_comments_blank_lines_and_line_numbers() {
        let compact =
            parse_config("global\n maxconn 1\nbackend be\n server s 1.2.3.4:80\n").unwrap();
        let spaced = parse_config(
            "# c\n\nglobal # g\n\n  maxconn 1 # m\nbackend be\n\n  server s 1.2.3.4:80\n",
        )
        .unwrap();
        assert!(compact.eq_ignoring_layout(&spaced));
        assert_ne!(compact, spaced);
        let other = parse_config("global\n maxconn 2\nbackend be\n server s 1.2.3.4:80\n").unwrap();
        assert!(!compact.eq_ignoring_layout(&other));
    }

    #[test]
    fn a_config_built_in_code_serializes_to_valid_syntax() {
        let mut backend = Section::new(SectionKind::Backend, Some("web"));
        backend.directives.push(Directive::new([
            "server",
            "s1",
            "10.0.0.1:80",
            "weight",
            "10",
        ]));
        backend.directives.push(Directive::new([
            "http-request",
            "set-header",
            "X-Note",
            "two words",
        ]));
        let config = Config {
            sections: vec![backend],
            ..Config::default()
        };
        let written = config.to_config_string();
        assert_eq!(
            written,
            "backend web\n    server s1 10.0.0.1:80 weight 10\n    http-request set-header X-Note 'two words'\n"
        );
        let reparsed = parse_config(&written).expect("written config parses");
        assert!(reparsed.eq_ignoring_layout(&config));
    }

    #[test]
    fn unprefixed_strips_no_and_default() {
        let directive = Directive::new(["no", "option", "httplog"]);
        assert_eq!(directive.unprefixed(), (Some("no"), &directive.words[1..]));
        let plain = Directive::new(["option", "httplog"]);
        assert_eq!(plain.unprefixed(), (None, &plain.words[..]));
    }

    #[test]
    fn to_line_writes_one_directive_with_its_comment() {
        let config = parse_config("global\n  log \"${H}:514\" local0 # logs\n").unwrap();
        assert_eq!(
            config.sections[0].directives[0].to_line(),
            "log \"${H}:514\" local0 # logs"
        );
    }

    #[test]
    fn the_tree_serializes_to_json() {
        let config = parse_config(SAMPLE).expect("sample parses");
        let json = serde_json::to_value(&config).expect("config serializes to JSON");
        assert_eq!(json["sections"][2]["kind"], "frontend");
        let spans = &json["sections"][2]["directives"][1]["spans"];
        assert_eq!(spans[0]["type"], "raw_byte");
        assert_eq!(spans[0]["byte"], 0xE0);
        assert_eq!(
            json["sections"][2]["directives"][0]["spans"][0]["type"],
            "env_ref"
        );
    }
}
