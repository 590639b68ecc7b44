//! Field paths as users write them in `indexBy` and `watchedResourcesIgnoreFields`, turned
//! into compiled RFC 9535 JSONPaths once, when a store is built.
//!
//! Users write kubectl-style paths: `metadata.name`, `{.metadata.name}`, `$.metadata.name`,
//! `.spec.ports[0].port`, and keys holding dots with the dot escaped:
//! `metadata.labels.kubernetes\.io/service-name`. Each dotted segment becomes a quoted
//! name selector (`['kubernetes.io/service-name']`), so any key is safe; bracket segments
//! (`[0]`, `[*]`, `['a.b']`) are passed through to the RFC 9535 parser unchanged.

use serde_json::Value;
use serde_json_path::JsonPath;
use serde_json_path::PathElement;

use super::StoreError;

/// One compiled field path together with the text the user wrote.
#[derive(Debug, Clone)]
pub struct FieldPath {
    source: String,
    compiled: JsonPath,
}

impl FieldPath {
    /// Compiles a kubectl-style path. The error names the path and says what is wrong.
    pub fn parse(source: &str) -> Result<FieldPath, StoreError> {
        let rfc = to_rfc9535(source).map_err(|reason| StoreError::InvalidPath {
            path: source.to_string(),
            reason,
        })?;
        let compiled = JsonPath::parse(&rfc).map_err(|err| StoreError::InvalidPath {
            path: source.to_string(),
            reason: format!("as the JSONPath `{rfc}`: {err}"),
        })?;
        Ok(FieldPath {
            source: source.to_string(),
            compiled,
        })
    }

    /// The path as the user wrote it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The first value the path selects in `object`, if any.
    pub fn first<'v>(&self, object: &'v Value) -> Option<&'v Value> {
        self.compiled.query(object).first()
    }

    /// The value the path selects, rendered as an index key: strings as they are, numbers
    /// and booleans in their JSON form, a missing value or `null` as the empty string.
    /// Objects and arrays are indexed by their compact JSON text.
    pub fn index_value(&self, object: &Value) -> String {
        match self.first(object) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        }
    }

    /// Removes every value the path selects from `object`. Array elements are removed from
    /// the highest index down so that earlier removals do not shift later ones.
    pub fn remove_from(&self, object: &mut Value) {
        let mut targets: Vec<(String, Step)> = self
            .compiled
            .query_located(object)
            .locations()
            .filter_map(|location| {
                let last = match location.last()? {
                    PathElement::Name(name) => Step::Key((*name).to_string()),
                    PathElement::Index(index) => Step::Index(*index),
                };
                let parent: String = location
                    .iter()
                    .take(location.len() - 1)
                    .map(|element| match element {
                        PathElement::Name(name) => format!("/{}", escape_pointer(name)),
                        PathElement::Index(index) => format!("/{index}"),
                    })
                    .collect();
                Some((parent, last))
            })
            .collect();
        // Deeper and later locations first: a removal never invalidates a pending one.
        targets.sort_by(|a, b| b.cmp(a));
        for (parent, step) in targets {
            match (object.pointer_mut(&parent), step) {
                (Some(Value::Object(map)), Step::Key(key)) => {
                    map.remove(&key);
                }
                (Some(Value::Array(items)), Step::Index(index)) if index < items.len() => {
                    items.remove(index);
                }
                _ => {}
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Key(String),
    Index(usize),
}

fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Converts a kubectl-style path into RFC 9535 text, or says why it cannot.
pub(crate) fn to_rfc9535(source: &str) -> Result<String, String> {
    let mut text = source.trim();
    if let Some(inner) = text.strip_prefix('{') {
        text = inner
            .strip_suffix('}')
            .ok_or_else(|| "an opening `{` has no closing `}`".to_string())?
            .trim();
    }
    if text.contains("{range") || text.contains("{end}") {
        return Err("range blocks are not supported in field paths".to_string());
    }
    let text = text.strip_prefix('$').unwrap_or(text);
    let text = text.strip_prefix('.').unwrap_or(text);
    if text.is_empty() {
        return Err("the path is empty".to_string());
    }

    let mut out = String::from("$");
    let mut name = String::new();
    // Whether the character before a `.` ended a segment (a name or a bracket).
    let mut segment_open = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => {
                    name.push(escaped);
                    segment_open = true;
                }
                None => return Err("the path ends with a lone `\\`".to_string()),
            },
            '.' => {
                if !segment_open {
                    return Err(if chars.peek() == Some(&'.') || name.is_empty() {
                        "empty segment (`..` recursive descent is not supported)".to_string()
                    } else {
                        "empty segment".to_string()
                    });
                }
                push_name(&mut out, &mut name);
                segment_open = false;
                if chars.peek().is_none() {
                    return Err("the path ends with `.`".to_string());
                }
            }
            '[' => {
                push_name(&mut out, &mut name);
                out.push('[');
                let mut quote: Option<char> = None;
                let mut closed = false;
                while let Some(inner) = chars.next() {
                    out.push(inner);
                    match (quote, inner) {
                        (Some(_), '\\') => {
                            if let Some(next) = chars.next() {
                                out.push(next);
                            }
                        }
                        (Some(q), c) if c == q => quote = None,
                        (None, '\'' | '"') => quote = Some(inner),
                        (None, ']') => {
                            closed = true;
                            break;
                        }
                        _ => {}
                    }
                }
                if !closed {
                    return Err("a `[` has no closing `]`".to_string());
                }
                segment_open = true;
            }
            other => {
                name.push(other);
                segment_open = true;
            }
        }
    }
    push_name(&mut out, &mut name);
    Ok(out)
}

fn push_name(out: &mut String, name: &mut String) {
    if name.is_empty() {
        return;
    }
    out.push_str("['");
    for c in name.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            other => out.push(other),
        }
    }
    out.push_str("']");
    name.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_accepted_spelling_selects_the_same_field() {
        let object = json!({"metadata": {"name": "web"}});
        for spelling in [
            "metadata.name",
            "{.metadata.name}",
            "$.metadata.name",
            ".metadata.name",
        ] {
            let path = FieldPath::parse(spelling).unwrap();
            assert_eq!(path.index_value(&object), "web", "spelling {spelling}");
        }
    }

    #[test]
    fn an_escaped_dot_stays_inside_the_key() {
        let object = json!({"metadata": {"labels": {"kubernetes.io/service-name": "echo"}}});
        let path = FieldPath::parse(r"metadata.labels.kubernetes\.io/service-name").unwrap();
        assert_eq!(path.index_value(&object), "echo");
        assert_eq!(
            to_rfc9535(r"metadata.labels.kubernetes\.io/service-name").unwrap(),
            "$['metadata']['labels']['kubernetes.io/service-name']"
        );
    }

    #[test]
    fn brackets_pass_through_to_the_jsonpath_parser() {
        let object = json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}});
        let path = FieldPath::parse("spec.ports[1].port").unwrap();
        assert_eq!(path.index_value(&object), "443");
    }

    #[test]
    fn a_missing_value_indexes_as_the_empty_string() {
        let path = FieldPath::parse("metadata.namespace").unwrap();
        assert_eq!(path.index_value(&json!({"metadata": {"name": "x"}})), "");
    }

    #[test]
    fn a_bad_path_is_rejected_with_its_text_and_a_reason() {
        for bad in [
            "metadata..name",
            "",
            "{.metadata.name",
            "spec.ports[0",
            "a.",
            r"a\",
        ] {
            let err = FieldPath::parse(bad).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("'{bad}'")), "{text}");
        }
        let err = FieldPath::parse("spec.ports[x]").unwrap_err();
        assert!(err.to_string().contains("JSONPath"), "{err}");
    }

    #[test]
    fn removal_strips_keys_and_array_elements() {
        let mut object = json!({
            "metadata": {"name": "a", "managedFields": [{"x": 1}]},
            "items": [{"keep": 1, "drop": 2}, {"keep": 3, "drop": 4}]
        });
        FieldPath::parse("metadata.managedFields")
            .unwrap()
            .remove_from(&mut object);
        FieldPath::parse("items[*].drop")
            .unwrap()
            .remove_from(&mut object);
        assert_eq!(
            object,
            json!({"metadata": {"name": "a"}, "items": [{"keep": 1}, {"keep": 3}]})
        );

        let mut list = json!({"items": [1, 2, 3]});
        FieldPath::parse("items[*]").unwrap().remove_from(&mut list);
        assert_eq!(list, json!({"items": []}));
    }

    #[test]
    fn a_key_with_a_quote_or_slash_is_escaped_safely() {
        let object = json!({"a'b": {"c/d": "ok"}});
        let path = FieldPath::parse(r"a'b.c/d").unwrap();
        assert_eq!(path.index_value(&object), "ok");
        let mut copy = object.clone();
        FieldPath::parse(r"a'b.c/d").unwrap().remove_from(&mut copy);
        assert_eq!(copy, json!({"a'b": {}}));
    }
}
