//! The literal lines of a template source: lines that no `{{ }}` expression touches, whose
//! text the template therefore writes exactly as its author typed it. The code-running guard
//! trusts these lines ([`TrustedLines`](crate::pure::haproxy::TrustedLines)): a watched
//! object's values reach the output only through an expression, so they can never be part
//! of such a line.
//!
//! A line is literal when it contains no `{{` and lies outside every mustache that spans
//! lines (a multi-line `{{!-- comment --}}` or helper call): a commented-out
//! `lua-load /etc/haproxy/debug.lua` is not trusted. Mustaches are found without a full
//! handlebars parse: each runs from `{{` to the first `}}` (from `{{!--` to the first
//! `--}}`); a `}}` inside a string literal ends it early. Any such inexactness can only add
//! lines the author wrote to the set, never text from elsewhere.

/// The lines of `source` that no mustache touches, as they stand (not trimmed).
pub fn literal_lines(source: &str) -> impl Iterator<Item = &str> {
    let mustaches = mustache_spans(source);
    let mut next_mustache = 0;
    let mut start = 0;
    source.split('\n').filter(move |line| {
        let end = start + line.len();
        let line_start = start;
        start = end + 1;
        // Spans are sorted and disjoint: skip those that end before this line.
        while mustaches
            .get(next_mustache)
            .is_some_and(|&(_, span_end)| span_end <= line_start)
        {
            next_mustache += 1;
        }
        mustaches
            .get(next_mustache)
            .is_none_or(|&(span_start, _)| span_start >= end.max(line_start + 1))
            && !line.contains("{{")
    })
}

/// The byte ranges of the mustaches of `source`, in order, delimiters included; an
/// unterminated one runs to the end.
fn mustache_spans(source: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(found) = source[at..].find("{{") {
        let start = at + found;
        let (close, body) = if source[start..].starts_with("{{!--") {
            ("--}}", start + 5)
        } else {
            ("}}", start + 2)
        };
        let end = source[body..]
            .find(close)
            .map_or(source.len(), |i| body + i + close.len());
        spans.push((start, end));
        at = end;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literal(source: &str) -> Vec<&str> {
        literal_lines(source).collect()
    }

    #[test]
    fn lines_without_expressions_are_literal() {
        assert_eq!(
            literal("global\n  lua-load /etc/haproxy/x.lua\n  maxconn {{n}}\n"),
            ["global", "  lua-load /etc/haproxy/x.lua", ""]
        );
    }

    #[test]
    fn block_tags_make_their_own_line_not_literal_but_leave_the_lines_between() {
        assert_eq!(literal("{{#if a}}\nsetenv A b\n{{/if}}"), ["setenv A b"]);
    }

    #[test]
    fn lines_inside_a_multi_line_comment_or_expression_are_not_literal() {
        assert_eq!(
            literal("{{!--\n  lua-load /etc/haproxy/debug.lua\n--}}\nglobal"),
            ["global"]
        );
        assert_eq!(
            literal("{{concat \"a\"\n  \"lua-load /x.lua\"\n}}\nglobal"),
            ["global"]
        );
        assert_eq!(literal("a\n{{! unterminated\nlua-load /x.lua"), ["a"]);
    }

    #[test]
    fn a_line_that_merely_mentions_braces_is_not_literal() {
        assert_eq!(literal("lua-load \\{{x}}\nb }}\n"), ["b }}", ""]);
    }
}
