//! Where things are in the text of a YAML document: the line of every mapping key, by its
//! key path, and for a literal block scalar (`|`, `|-`, `|+`, `|2`) the file line of each of
//! its lines. serde_yaml_ng hands out values without positions, so an error about a value
//! (a template's line N, an object's `metadata.name`) is located through here: a template
//! error then names `config.yaml:352` rather than only the line inside the template.
//!
//! The scan reads block-style YAML line by line, as manifests and configs are written:
//! block mappings (keys plain or quoted), block sequences (`- key: value` entries count as
//! indented past their dash), block scalars, and flow collections or quoted scalars that run
//! over several lines, which are skipped whole. Sequence entries are not told apart (their
//! keys share one path). What it cannot place it leaves out: [`YamlLines::nearest`] then
//! names the closest located ancestor.

use std::collections::BTreeMap;

/// How the value of a key lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Nothing after the key on its line: a nested mapping or sequence follows (or null).
    Nested,
    /// A literal block scalar: line n of the string is line `first_line + n - 1` of the file,
    /// up to `last_line`, its last line that is not blank.
    Literal { first_line: usize, last_line: usize },
    /// Anything else (a scalar on the key's line, a folded block scalar, a flow collection, a
    /// quoted or plain scalar over several lines): its lines do not map one to one onto the
    /// file's, so every line of it is placed at the key's line.
    Other,
}

/// One located key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// The 1-based file line of the key.
    pub line: usize,
    pub shape: Shape,
}

/// The located keys of one YAML document, and the file it was read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct YamlLines {
    file: String,
    nodes: BTreeMap<Vec<String>, Node>,
}

impl YamlLines {
    /// Scans `document`, the text of one YAML document whose first line is line `first_line`
    /// of `file`. A `---` or `...` marker after the first key ends the document; one before
    /// it is skipped.
    pub fn scan(file: impl Into<String>, document: &str, first_line: usize) -> YamlLines {
        let lines: Vec<&str> = document
            .split('\n')
            .map(|line| line.strip_suffix('\r').unwrap_or(line))
            .collect();
        let mut nodes = BTreeMap::new();
        let mut stack: Vec<(usize, String)> = Vec::new();
        let mut seen_content = false;
        let mut index = 0;
        while index < lines.len() {
            let line = lines[index];
            let number = first_line + index;
            index += 1;
            let trimmed = line.trim_start_matches(' ');
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            if is_document_marker(line) {
                if seen_content {
                    break;
                }
                continue;
            }
            seen_content = true;
            let line_indent = line.len() - trimmed.len();
            let (indent, rest) = past_dashes(line_indent, trimmed);
            let (key, value) = match split_key(rest) {
                Some((key, value)) => (Some(key), value),
                None => (None, rest),
            };
            let value = past_properties(value);
            // The indentation block scalar content must exceed: the key's, or for a scalar
            // entry of a sequence, its dash's.
            let parent_indent = if key.is_some() { indent } else { line_indent };
            let (shape, skip_to) = value_shape(&lines, index, value, parent_indent, first_line);
            index = skip_to;
            let Some(key) = key else {
                continue;
            };
            while stack.last().is_some_and(|(i, _)| *i >= indent) {
                stack.pop();
            }
            let mut path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
            path.push(key.clone());
            nodes.entry(path).or_insert(Node {
                line: number,
                shape,
            });
            if shape == Shape::Nested {
                stack.push((indent, key));
            }
        }
        YamlLines {
            file: file.into(),
            nodes,
        }
    }

    /// Scans the document of `text`, a whole file, that starts at line `line`.
    pub fn of_document(file: impl Into<String>, text: &str, line: usize) -> YamlLines {
        let start = text
            .match_indices('\n')
            .nth(line.saturating_sub(2))
            .filter(|_| line > 1)
            .map_or(0, |(at, _)| at + 1);
        YamlLines::scan(file, &text[start..], line)
    }

    /// The file the document was read from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The key at `path` (e.g. `["spec", "haproxyConfig", "template"]`), if located.
    pub fn node(&self, path: &[&str]) -> Option<Node> {
        let path: Vec<String> = path.iter().map(|key| (*key).to_string()).collect();
        self.nodes.get(&path).copied()
    }

    /// The file line of line `line` (1-based) of the string at `path`: exact in a literal
    /// block scalar (past its end: its last line), the key's line for any other value or
    /// when `line` is `None`. `None` when the key is not located.
    pub fn line_of(&self, path: &[&str], line: Option<usize>) -> Option<usize> {
        let node = self.node(path)?;
        Some(match (node.shape, line) {
            (
                Shape::Literal {
                    first_line,
                    last_line,
                },
                Some(line),
            ) => (first_line + line.max(1) - 1).min(last_line.max(first_line)),
            _ => node.line,
        })
    }

    /// The line of the key at `path` or, when it is not located, of its closest located
    /// ancestor.
    pub fn nearest(&self, path: &[&str]) -> Option<usize> {
        (1..=path.len())
            .rev()
            .find_map(|len| self.node(&path[..len]))
            .map(|node| node.line)
    }
}

/// `---` or `...` (alone or followed by a space) at the start of a line.
fn is_document_marker(line: &str) -> bool {
    ["---", "..."].iter().any(|marker| {
        line.strip_prefix(marker)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    })
}

/// Steps past the `- ` of block sequence entries: their content counts as indented to where
/// it starts.
fn past_dashes(mut indent: usize, mut rest: &str) -> (usize, &str) {
    while let Some(after) = rest
        .strip_prefix('-')
        .filter(|after| after.is_empty() || after.starts_with(' '))
    {
        let content = after.trim_start_matches(' ');
        indent += 1 + after.len() - content.len();
        rest = content;
    }
    (indent, rest)
}

/// Splits `key: value` (plain, single- or double-quoted key), or `None` when the line holds
/// no key.
fn split_key(rest: &str) -> Option<(String, &str)> {
    let (key, after) = match rest.chars().next()? {
        quote @ ('"' | '\'') => {
            let end = quoted_end(rest, quote)?;
            (unquote(&rest[1..end - 1], quote), &rest[end..])
        }
        '{' | '[' | '#' | '?' | '|' | '>' | '&' | '*' | '!' | '%' | '@' | '`' => return None,
        _ => {
            let colon = rest
                .match_indices(':')
                .map(|(at, _)| at)
                .find(|&at| rest[at + 1..].is_empty() || rest[at + 1..].starts_with([' ', '\t']))?;
            let key = rest[..colon].trim_end();
            if key.contains(" #") {
                return None;
            }
            return Some((key.to_string(), rest[colon + 1..].trim_start()));
        }
    };
    let after = after.trim_start_matches([' ', '\t']);
    let value = after.strip_prefix(':')?;
    (value.is_empty() || value.starts_with([' ', '\t'])).then(|| (key, value.trim_start()))
}

/// The byte index just past the closing quote of the quoted scalar `text` starts with, if it
/// closes on this line.
fn quoted_end(text: &str, quote: char) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' if quote == '"' => at += 2,
            b'\'' if quote == '\'' && bytes.get(at + 1) == Some(&b'\'') => at += 2,
            byte if byte == quote as u8 => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

/// A quoted key's text (the common escapes only: keys rarely need more).
fn unquote(inner: &str, quote: char) -> String {
    if quote == '\'' {
        inner.replace("''", "'")
    } else {
        inner.replace("\\\"", "\"").replace("\\\\", "\\")
    }
}

/// `value` past an anchor (`&name`) and a tag (`!tag`).
fn past_properties(mut value: &str) -> &str {
    while value.starts_with(['&', '!']) {
        let end = value.find([' ', '\t']).unwrap_or(value.len());
        value = value[end..].trim_start();
    }
    value
}

/// The shape of a value that starts on the line before `next` (an index into `lines`), and
/// the index of the first line after it.
fn value_shape(
    lines: &[&str],
    next: usize,
    value: &str,
    parent_indent: usize,
    first_line: usize,
) -> (Shape, usize) {
    match value.chars().next() {
        None | Some('#') => (Shape::Nested, next),
        Some(style @ ('|' | '>')) => {
            let explicit = value[1..]
                .chars()
                .take(2)
                .find_map(|c| c.to_digit(10))
                .map(|digits| parent_indent + digits as usize);
            let (end, last) = block_scalar_end(lines, next, explicit, parent_indent);
            let shape = if style == '|' {
                Shape::Literal {
                    first_line: first_line + next,
                    last_line: last.map_or(first_line + next, |last| first_line + last),
                }
            } else {
                Shape::Other
            };
            (shape, end)
        }
        Some(quote @ ('"' | '\'')) => {
            if quoted_end(value, quote).is_some() {
                return (Shape::Other, next);
            }
            // Runs on: to the line holding the closing quote.
            let mut index = next;
            while index < lines.len() {
                let line = lines[index];
                index += 1;
                if closes_quote(line, quote) {
                    break;
                }
            }
            (Shape::Other, index)
        }
        Some('{' | '[') => {
            let mut depth = flow_depth(value, 0);
            let mut index = next;
            while depth > 0 && index < lines.len() {
                depth = flow_depth(lines[index], depth);
                index += 1;
            }
            (Shape::Other, index)
        }
        Some(_) => (Shape::Other, next),
    }
}

/// Whether `line`, inside a quoted scalar, holds its closing quote.
fn closes_quote(line: &str, quote: char) -> bool {
    let bytes = line.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' if quote == '"' => at += 2,
            b'\'' if quote == '\'' && bytes.get(at + 1) == Some(&b'\'') => at += 2,
            byte if byte == quote as u8 => return true,
            _ => at += 1,
        }
    }
    false
}

/// The nesting depth of flow brackets after `line`, starting at `depth` (quoted text and
/// comments aside).
fn flow_depth(line: &str, mut depth: usize) -> usize {
    let mut chars = line.chars().peekable();
    let mut previous = ' ';
    while let Some(c) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            '#' if previous == ' ' => break,
            '"' | '\'' => {
                while let Some(inner) = chars.next() {
                    if inner == '\\' && c == '"' {
                        chars.next();
                    } else if inner == c {
                        if c == '\'' && chars.peek() == Some(&'\'') {
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            _ => {}
        }
        previous = c;
    }
    depth
}

/// The index of the first line after a block scalar whose content starts at `next`, and
/// the index of its last line that is not blank. Content is indented by `explicit` columns,
/// or by as much as its first line that is not blank, which must be past `parent_indent`.
fn block_scalar_end(
    lines: &[&str],
    next: usize,
    explicit: Option<usize>,
    parent_indent: usize,
) -> (usize, Option<usize>) {
    let indent_of = |line: &str| line.len() - line.trim_start_matches(' ').len();
    let content_indent = explicit.or_else(|| {
        lines[next.min(lines.len())..]
            .iter()
            .find(|line| !line.trim().is_empty())
            .map(|line| indent_of(line))
    });
    let Some(content_indent) = content_indent.filter(|indent| *indent > parent_indent) else {
        return (next, None);
    };
    let mut last = None;
    let mut index = next;
    while index < lines.len() {
        let line = lines[index];
        if !line.trim().is_empty() {
            if indent_of(line) < content_indent {
                break;
            }
            last = Some(index);
        }
        index += 1;
    }
    (index, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "\
# a comment
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata:
  name: haptor
spec:
  watchedResources:
    ingresses:
      indexBy: [\"metadata.namespace\",
        \"metadata.name\"]
      fieldSelector: \"a: b\"
  templateSnippets:
    \"quoted.name\":
      template: |-
        first
          second

        fourth
    one-liner:
      template: \"{{a}}\\n{{b}}\"
    folded:
      template: >
        a
        b
  validationTests:
    t:
      fixtures:
        secrets:
          - apiVersion: v1
            data:
              tls.crt: |
                template: |
                  not a key
            kind: Secret
  haproxyConfig:
    template: |2
        global
      daemon
  maps:
    hosts.map:
      template: |  # a comment
        {{#each x}}
        {{/each}}
";

    fn lines() -> YamlLines {
        YamlLines::scan("c.yaml", CONFIG, 1)
    }

    #[test]
    fn a_literal_block_scalars_lines_are_the_lines_after_its_key() {
        let lines = lines();
        let path = ["spec", "templateSnippets", "quoted.name", "template"];
        assert_eq!(lines.node(&path).map(|n| n.line), Some(14));
        assert_eq!(lines.line_of(&path, Some(1)), Some(15));
        assert_eq!(lines.line_of(&path, Some(3)), Some(17));
        assert_eq!(lines.line_of(&path, Some(4)), Some(18));
        assert_eq!(
            lines.line_of(&path, Some(9)),
            Some(18),
            "past the end: its last line"
        );
        assert_eq!(lines.line_of(&path, None), Some(14));
        let maps = ["spec", "maps", "hosts.map", "template"];
        assert_eq!(lines.line_of(&maps, Some(2)), Some(43));
    }

    #[test]
    fn an_explicit_indentation_indicator_keeps_more_indented_first_lines_in_the_block() {
        let path = ["spec", "haproxyConfig", "template"];
        assert_eq!(lines().line_of(&path, Some(2)), Some(38));
        assert_eq!(
            lines().node(&["spec", "maps"]).map(|n| n.line),
            Some(39),
            "the block ended where the indentation fell below its own"
        );
    }

    #[test]
    fn values_whose_lines_do_not_map_onto_the_files_are_placed_at_their_key() {
        let lines = lines();
        let one_liner = ["spec", "templateSnippets", "one-liner", "template"];
        assert_eq!(lines.line_of(&one_liner, Some(2)), Some(20));
        let folded = ["spec", "templateSnippets", "folded", "template"];
        assert_eq!(lines.line_of(&folded, Some(2)), Some(22));
    }

    #[test]
    fn keys_inside_block_scalars_and_multi_line_flow_values_are_not_keys() {
        let lines = lines();
        assert_eq!(
            lines
                .node(&["spec", "watchedResources", "ingresses", "fieldSelector"])
                .map(|n| n.line),
            Some(11)
        );
        let fixture = [
            "spec",
            "validationTests",
            "t",
            "fixtures",
            "secrets",
            "data",
            "tls.crt",
        ];
        assert_eq!(lines.node(&fixture).map(|n| n.line), Some(31));
        assert_eq!(
            lines
                .node(&[
                    "spec",
                    "validationTests",
                    "t",
                    "fixtures",
                    "secrets",
                    "kind"
                ])
                .map(|n| n.line),
            Some(34),
            "a sequence entry's keys count as indented past its dash"
        );
        let inside = [&fixture[..], &["template"]].concat();
        assert_eq!(lines.node(&inside), None);
    }

    #[test]
    fn an_unlocated_key_falls_back_on_its_closest_located_ancestor() {
        let lines = YamlLines::scan(
            "m.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: \"bad name\"}\n",
            7,
        );
        assert_eq!(lines.node(&["metadata", "name"]), None);
        assert_eq!(lines.nearest(&["metadata", "name"]), Some(9));
        assert_eq!(lines.file(), "m.yaml");
    }

    #[test]
    fn a_document_ends_at_the_next_marker_and_a_leading_marker_is_skipped() {
        let text =
            "# head\n---\nkind: A\nmetadata:\n  name: a\n---\nkind: B\nmetadata:\n  name: b\n";
        let lines = YamlLines::scan("m.yaml", text, 1);
        assert_eq!(lines.node(&["metadata", "name"]).map(|n| n.line), Some(5));
        assert_eq!(lines.node(&["kind"]).map(|n| n.line), Some(3));
    }

    #[test]
    fn the_document_at_a_line_of_a_multi_document_file_is_scanned_alone() {
        let text = "kind: A\nmetadata:\n  name: a\n---\nkind: B\nmetadata:\n  name: b\n";
        let second = YamlLines::of_document("m.yaml", text, 5);
        assert_eq!(second.node(&["metadata", "name"]).map(|n| n.line), Some(7));
        let first = YamlLines::of_document("m.yaml", text, 1);
        assert_eq!(first.node(&["metadata", "name"]).map(|n| n.line), Some(3));
    }

    #[test]
    fn carriage_returns_before_line_feeds_do_not_change_the_lines() {
        let text = "metadata:\r\n  name: a\r\nspec:\r\n  template: |\r\n    x\r\n    y\r\n";
        let lines = YamlLines::scan("m.yaml", text, 1);
        assert_eq!(lines.line_of(&["spec", "template"], Some(2)), Some(6));
    }
}
