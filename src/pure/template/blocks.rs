//! What a template author needs when the blocks of a template do not pair up. Handlebars
//! reports a block left open at the template's end, with its grammar's list of what it
//! expected there ("expected escape, expression, html_expression, …"), and a mismatched
//! close without saying where the open block started. [`explain`] scans the template's tags
//! once (helper blocks `{{#if}}`, `{{#each}}`, …, partial blocks `{{#> p}}`, decorator
//! blocks `{{#*inline}}`, raw blocks `{{{{raw}}}}`, comments and escapes) and names the tag
//! that opened the block, where, and the tag that closes it.

/// A block-opening or block-closing tag, as written and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tag {
    /// The tag's text, shortened past 60 characters.
    text: String,
    /// The block's name: `if`, `each`, a partial's or a raw helper's.
    name: String,
    kind: Kind,
    line: usize,
    column: usize,
}

/// What a block-opening tag opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `{{#name …}}`: a helper block (`if`, `each`, `with`, `unless`, `resources`, …).
    Helper,
    /// `{{#> partial}}` or `{{#*decorator}}`: also closed by `{{/}}`.
    PartialOrDecorator,
    /// `{{{{name}}}}`: a raw block, closed by `{{{{/name}}}}`.
    Raw,
}

impl Tag {
    /// The tag that closes this opening tag's block.
    fn closer(&self) -> String {
        if self.kind == Kind::Raw {
            format!("{{{{{{{{/{}}}}}}}}}", self.name)
        } else {
            format!("{{{{/{}}}}}", self.name)
        }
    }

    fn at(&self) -> String {
        format!("line {}, column {}", self.line, self.column)
    }
}

/// Why the blocks of a template do not pair up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockProblem {
    /// A block still open at the end of the template (the innermost one).
    Unclosed {
        open: Tag,
        /// Where the last complete tag of the template ends.
        last_tag_end: (usize, usize),
    },
    /// A closing tag whose name is not the innermost open block's.
    Mismatched {
        open: Tag,
        close: Tag,
        /// Whether the close names a block open further out (the inner one lacks its
        /// close) rather than none.
        closes_outer: bool,
    },
    /// A closing tag with no block open.
    Stray { close: Tag },
    /// `{{else}}` or `{{^}}` outside any block.
    StrayElse { tag: Tag },
    /// `{{`, `{{!--` or `{{!` without its end.
    Unterminated {
        opener: &'static str,
        closer: &'static str,
        line: usize,
        column: usize,
    },
}

impl BlockProblem {
    /// Where the error points: the opening tag of a block left open, the offending tag
    /// otherwise.
    pub(crate) fn position(&self) -> (usize, usize) {
        match self {
            BlockProblem::Unclosed { open: tag, .. }
            | BlockProblem::Mismatched { close: tag, .. }
            | BlockProblem::Stray { close: tag }
            | BlockProblem::StrayElse { tag } => (tag.line, tag.column),
            BlockProblem::Unterminated { line, column, .. } => (*line, *column),
        }
    }

    /// From where on the template stops parsing because of this problem: handlebars'
    /// syntax error at or past it is this problem, one before it is another.
    fn breaks_from(&self) -> (usize, usize) {
        match self {
            BlockProblem::Unclosed { last_tag_end, .. } => *last_tag_end,
            _ => self.position(),
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            BlockProblem::Unclosed { open, .. } => format!(
                "`{}` opened at {} is never closed: add `{}` where its block ends",
                open.text,
                open.at(),
                open.closer()
            ),
            BlockProblem::Mismatched {
                open,
                close,
                closes_outer: true,
            } => format!(
                "`{}` at {} closes an outer block while `{}` opened at {} is still open: add `{}` before it",
                close.text,
                close.at(),
                open.text,
                open.at(),
                open.closer()
            ),
            BlockProblem::Mismatched {
                open,
                close,
                closes_outer: false,
            } => format!(
                "`{}` at {} does not close `{}` opened at {}: close that block with `{}` instead",
                close.text,
                close.at(),
                open.text,
                open.at(),
                open.closer()
            ),
            BlockProblem::Stray { close } => format!(
                "`{}` at {} closes no open block: remove it, or open its block before it",
                close.text,
                close.at()
            ),
            BlockProblem::StrayElse { tag } => format!(
                "`{}` at {} is outside any block: it belongs between a block's `{{{{#…}}}}` and `{{{{/…}}}}`",
                tag.text,
                tag.at()
            ),
            BlockProblem::Unterminated {
                opener,
                closer,
                line,
                column,
            } => format!(
                "`{opener}` at line {line}, column {column} is never closed: add `{closer}`"
            ),
        }
    }
}

/// The block problem behind a handlebars parse error at `failed_at` (its line and column),
/// if the template has one that explains it: a mismatched or stray close, an unclosed tag,
/// or a block left open when the error is past the template's last tag.
pub(crate) fn explain(source: &str, failed_at: Option<(usize, usize)>) -> Option<BlockProblem> {
    let problem = scan(source)?;
    match failed_at {
        Some(at) if at < problem.breaks_from() => None,
        _ => Some(problem),
    }
}

/// The first block problem of `source`, in reading order.
pub(crate) fn scan(source: &str) -> Option<BlockProblem> {
    let mut scanner = Scanner {
        source,
        at: 0,
        line: 1,
        line_start: 0,
    };
    let mut open: Vec<Tag> = Vec::new();
    let mut last_tag_end = (1, 1);
    while let Some(found) = source[scanner.at..].find(['{', '\\']) {
        scanner.advance_to(scanner.at + found);
        let rest = &source[scanner.at..];
        if rest.starts_with('\\') {
            let slashes = rest.len() - rest.trim_start_matches('\\').len();
            let after = &rest[slashes..];
            let skip = if slashes == 1 && after.starts_with("{{") {
                // `\{{` (or `\{{{{`) is text.
                if after.starts_with("{{{{") { 5 } else { 3 }
            } else {
                slashes
            };
            scanner.advance_to(scanner.at + skip);
            continue;
        }
        if !rest.starts_with("{{") {
            scanner.advance_to(scanner.at + 1);
            continue;
        }
        let (line, column) = scanner.position();
        let unterminated = |opener, closer| BlockProblem::Unterminated {
            opener,
            closer,
            line,
            column,
        };
        if rest.starts_with("{{!--") {
            let end = rest.find("--}}").map(|e| e + 4);
            let end = end.ok_or_else(|| unterminated("{{!--", "--}}"));
            match end {
                Ok(end) => scanner.advance_to(scanner.at + end),
                Err(problem) => return Some(problem),
            }
            last_tag_end = scanner.position();
            continue;
        }
        if rest.starts_with("{{!") {
            match rest.find("}}") {
                Some(end) => scanner.advance_to(scanner.at + end + 2),
                None => return Some(unterminated("{{!", "}}")),
            }
            last_tag_end = scanner.position();
            continue;
        }
        if rest.starts_with("{{{{") {
            let Some(end) = tag_end(rest, 4, "}}}}") else {
                return Some(unterminated("{{{{", "}}}}"));
            };
            let body = rest[4..end - 4].trim_start_matches('~').trim();
            let tag = Tag {
                text: shortened(&rest[..end]),
                name: first_word(body.trim_start_matches('/')),
                kind: Kind::Raw,
                line,
                column,
            };
            scanner.advance_to(scanner.at + end);
            last_tag_end = scanner.position();
            if body.starts_with('/') {
                // A raw block's end outside one.
                return Some(BlockProblem::Stray { close: tag });
            }
            // The block's text runs to the next `{{{{`, which must be its end.
            let Some(text_end) = source[scanner.at..].find("{{{{") else {
                return Some(BlockProblem::Unclosed {
                    open: tag,
                    last_tag_end,
                });
            };
            scanner.advance_to(scanner.at + text_end);
            let (line, column) = scanner.position();
            let rest = &source[scanner.at..];
            let Some(end) = tag_end(rest, 4, "}}}}") else {
                return Some(BlockProblem::Unterminated {
                    opener: "{{{{",
                    closer: "}}}}",
                    line,
                    column,
                });
            };
            let body = rest[4..end - 4].trim_start_matches('~').trim();
            let close = Tag {
                text: shortened(&rest[..end]),
                name: first_word(body.trim_start_matches('/')),
                kind: Kind::Raw,
                line,
                column,
            };
            scanner.advance_to(scanner.at + end);
            last_tag_end = scanner.position();
            if !body.starts_with('/') || close.name != tag.name {
                let closes_outer = open.iter().any(|outer| outer.name == close.name);
                return Some(BlockProblem::Mismatched {
                    open: tag,
                    close,
                    closes_outer,
                });
            }
            continue;
        }
        let Some(end) = tag_end(rest, 2, "}}") else {
            return Some(unterminated("{{", "}}"));
        };
        let body = rest[2..end - 2].trim_start_matches('~').trim_start();
        let body = body.strip_suffix('~').unwrap_or(body).trim_end();
        let tag = |name: &str, kind| Tag {
            text: shortened(&rest[..end]),
            name: name.to_string(),
            kind,
            line,
            column,
        };
        scanner.advance_to(scanner.at + end);
        last_tag_end = scanner.position();
        if let Some(opened) = body.strip_prefix('#') {
            let opened = opened.trim_start();
            let (name, kind) = match opened.strip_prefix(['>', '*']) {
                Some(name) => (name.trim_start(), Kind::PartialOrDecorator),
                None => (opened, Kind::Helper),
            };
            open.push(tag(&first_word(name), kind));
        } else if let Some(closed) = body.strip_prefix('/') {
            let close = tag(&first_word(closed.trim_start()), Kind::Helper);
            let Some(innermost) = open.pop() else {
                return Some(BlockProblem::Stray { close });
            };
            // An empty name closes a partial or decorator block.
            let matches = innermost.name == close.name
                || (close.name.is_empty() && innermost.kind == Kind::PartialOrDecorator);
            if !matches {
                let closes_outer = open.iter().any(|outer| outer.name == close.name);
                return Some(BlockProblem::Mismatched {
                    open: innermost,
                    close,
                    closes_outer,
                });
            }
        } else if open.is_empty() && is_else(body) {
            return Some(BlockProblem::StrayElse {
                tag: tag("else", Kind::Helper),
            });
        }
    }
    open.pop()
        .map(|open| BlockProblem::Unclosed { open, last_tag_end })
}

/// Walks `source` by byte, keeping the 1-based line and the byte where it starts.
struct Scanner<'a> {
    source: &'a str,
    at: usize,
    line: usize,
    line_start: usize,
}

impl Scanner<'_> {
    fn advance_to(&mut self, to: usize) {
        let to = to.min(self.source.len());
        for (offset, byte) in self.source.as_bytes()[self.at..to].iter().enumerate() {
            if *byte == b'\n' {
                self.line += 1;
                self.line_start = self.at + offset + 1;
            }
        }
        self.at = to;
    }

    /// The 1-based line and column (in characters, as handlebars counts them) of `at`.
    fn position(&self) -> (usize, usize) {
        let column = self
            .source
            .get(self.line_start..self.at)
            .map_or(0, |text| text.chars().count());
        (self.line, column + 1)
    }
}

/// The byte index just past the `closer` that ends the tag starting `rest` (its text starts
/// at `open`), quoted strings skipped.
fn tag_end(rest: &str, open: usize, closer: &str) -> Option<usize> {
    let bytes = rest.as_bytes();
    let mut at = open;
    while at < bytes.len() {
        match bytes[at] {
            quote @ (b'"' | b'\'') => {
                at += 1;
                while at < bytes.len() && bytes[at] != quote {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            _ if bytes[at..].starts_with(closer.as_bytes()) => return Some(at + closer.len()),
            _ => at += 1,
        }
    }
    None
}

/// The first word of a tag's body: a block's name.
fn first_word(body: &str) -> String {
    body.split(|c: char| c.is_whitespace() || c == '~' || c == '}')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `{{else}}`, `{{else if …}}`, `{{^}}` or `{{^name}}`.
fn is_else(body: &str) -> bool {
    body.starts_with('^')
        || body
            .strip_prefix("else")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// A tag as a message shows it: whole up to 60 characters, else its start and `…}}`.
fn shortened(tag: &str) -> String {
    if tag.chars().count() <= 60 {
        return tag.to_string();
    }
    let start: String = tag.chars().take(56).collect();
    format!("{start}…}}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(source: &str) -> Option<(usize, usize, String)> {
        scan(source).map(|p| {
            let (line, column) = p.position();
            (line, column, p.message())
        })
    }

    #[test]
    fn a_block_left_open_is_named_with_where_it_opened_and_what_closes_it() {
        let source = "global\n  {{#if a}}\n  {{#each b as |x|}}\n  x\n  {{/each}}\n";
        assert_eq!(
            message(source),
            Some((
                2,
                3,
                "`{{#if a}}` opened at line 2, column 3 is never closed: add `{{/if}}` where its block ends".into()
            ))
        );
    }

    /// Found by the `template_compile` fuzz target: a multi-byte character inside a tag
    /// made the scan slice a string inside that character and panic.
    #[test]
    fn a_tag_holding_a_multi_byte_character_is_scanned_without_a_panic() {
        let source = "{{#with \u{61d}nnotation \"x\" as |y|}}é{{y}}{{else}}{{/with}}{{#if ü}}";
        let (line, column, text) = message(source).expect("a problem");
        assert_eq!((line, column), (1, 55));
        assert!(text.contains("`{{#if ü}}`"), "{text}");
    }

    #[test]
    fn the_innermost_open_block_is_the_one_named() {
        let source = "{{#each a}}\n{{#with b}}\n{{/each}}";
        let (line, _, text) = message(source).expect("a problem");
        assert_eq!(line, 3);
        assert_eq!(
            text,
            "`{{/each}}` at line 3, column 1 closes an outer block while `{{#with b}}` opened at line 2, column 1 is still open: add `{{/with}}` before it"
        );
    }

    #[test]
    fn a_close_naming_no_open_block_says_which_block_is_open() {
        assert_eq!(
            message("{{#if nope}}{{/each}}").map(|m| m.2),
            Some(
                "`{{/each}}` at line 1, column 13 does not close `{{#if nope}}` opened at line 1, column 1: close that block with `{{/if}}` instead"
                    .into()
            )
        );
    }

    #[test]
    fn partial_decorator_raw_and_custom_blocks_pair_up_too() {
        assert_eq!(
            scan("{{#> layout}}x{{/layout}}{{#*inline \"a\"}}{{/inline}}{{#> p}}{{/}}"),
            None
        );
        assert_eq!(
            scan("{{#resources \"ingresses\" as |ing|}}{{ing.a}}{{/resources}}"),
            None
        );
        assert_eq!(scan("{{{{raw}}}} {{#if}} {{{{/raw}}}}"), None);
        let (_, _, text) = message("{{#with_rendered \"x\" as |t|}}\n{{t}}\n").expect("open");
        assert!(
            text.ends_with("add `{{/with_rendered}}` where its block ends"),
            "{text}"
        );
        let (_, _, text) = message("{{{{raw}}}} {{#if}}").expect("open");
        assert!(text.contains("add `{{{{/raw}}}}`"), "{text}");
    }

    #[test]
    fn comments_escapes_strings_and_whitespace_control_hide_no_tag_and_add_none() {
        let source =
            "{{!-- {{#if a}} --}}{{! {{#each}} }}\\{{#if x}}{{~#if (eq a \"}}\") ~}}y{{~/if~}}";
        assert_eq!(scan(source), None);
        let (line, column, _) = message("\\\\{{#unless a}}").expect("a real tag after `\\\\`");
        assert_eq!((line, column), (1, 3));
    }

    #[test]
    fn a_stray_close_an_else_outside_a_block_and_an_unclosed_tag_are_named() {
        assert_eq!(
            message("a\n{{/if}}").map(|m| m.2),
            Some("`{{/if}}` at line 2, column 1 closes no open block: remove it, or open its block before it".into())
        );
        assert!(
            message("{{else}}").is_some_and(|m| m.2.contains("is outside any block")),
            "else"
        );
        assert_eq!(
            message("x\n  {{name").map(|m| m.2),
            Some("`{{` at line 2, column 3 is never closed: add `}}`".into())
        );
        assert_eq!(
            message("{{!-- x").map(|m| m.2),
            Some("`{{!--` at line 1, column 1 is never closed: add `--}}`".into())
        );
    }

    #[test]
    fn a_long_opening_tag_is_shortened() {
        let tag = format!("{{{{#if {}}}}}", "a".repeat(80));
        let (_, _, text) = message(&tag).expect("open");
        assert!(text.starts_with("`{{#if aaaa"), "{text}");
        assert!(text.contains("…}}` opened at"), "{text}");
    }

    #[test]
    fn a_syntax_error_before_the_block_problem_is_not_explained_by_it() {
        let source = "{{#if a}}\n{{foo bar=}}\nx\n";
        assert_eq!(explain(source, Some((2, 11))), None);
        assert!(explain(source, Some((4, 1))).is_some());
        assert!(explain(source, None).is_some());
    }

    #[test]
    fn columns_count_characters_as_handlebars_does() {
        let (_, column, _) = message("é {{#if a}}").expect("open");
        assert_eq!(column, 3);
    }
}
