//! Reading Kubernetes manifests from files: multi-document YAML (or JSON) turned into JSON
//! objects, each remembering the file and line it came from. `haptor render --fixtures` and
//! `haptor local` read folders of manifests through here; a malformed document is reported
//! with its file and line and never stops the other documents from loading.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::pure::yaml_lines::YamlLines;

/// One Kubernetes object read from a manifest file.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub object: serde_json::Value,
    pub file: PathBuf,
    /// 1-based line where the document starts.
    pub line: usize,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.object
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }

    /// `namespace/name` (namespace `default` when unset), for messages.
    pub fn display_name(&self) -> String {
        let meta = self.object.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(|v| v.as_str())
            .unwrap_or("<unnamed>");
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        format!("{} {namespace}/{name}", self.kind())
    }
}

/// A document or file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file.display(), line, self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

/// Everything read from a set of files: the objects, and a problem for each document that
/// could not be used.
#[derive(Debug, Default)]
pub struct ManifestSet {
    pub manifests: Vec<Manifest>,
    pub problems: Vec<ManifestError>,
}

/// Parses the documents of one file's text. Empty documents are skipped; a document that is
/// not a mapping with `apiVersion`, `kind` and `metadata.name` is a problem.
pub fn parse_manifests(file: &Path, text: &str) -> ManifestSet {
    let mut manifests = Vec::new();
    let problems = visit_manifests(file, text, &mut |manifest| manifests.push(manifest));
    ManifestSet {
        manifests,
        problems,
    }
}

/// As [`parse_manifests`], handing each object to `on_manifest` as soon as it is read, so a
/// caller that keeps objects in another form never holds a whole large file as trees.
/// Returns the problems.
pub fn visit_manifests(
    file: &Path,
    text: &str,
    on_manifest: &mut dyn FnMut(Manifest),
) -> Vec<ManifestError> {
    let mut problems = Vec::new();
    for (start_line, doc_text) in split_documents(text) {
        if doc_text.lines().all(|l| {
            let t = l.trim();
            t.is_empty() || t.starts_with('#')
        }) {
            continue;
        }
        let problem = |line: Option<usize>, message: String| ManifestError {
            file: file.to_path_buf(),
            line,
            message,
        };
        let value = match serde_yaml_ng::Deserializer::from_str(doc_text)
            .next()
            .map(serde_json::Value::deserialize)
        {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                let line = e
                    .location()
                    .map(|location| start_line + newlines_before(doc_text, location.index()))
                    .unwrap_or(start_line);
                let message = file_lines_in(&e.to_string(), start_line, line);
                problems.push(problem(Some(line), format!("malformed YAML: {message}")));
                continue;
            }
            None => continue,
        };
        if value.is_null() {
            continue;
        }
        let Some(object) = value.as_object() else {
            problems.push(problem(
                Some(start_line),
                "a manifest must be a mapping with apiVersion, kind and metadata".into(),
            ));
            continue;
        };
        if object.get("kind").and_then(|k| k.as_str()) == Some("List") {
            for item in object
                .get("items")
                .and_then(|i| i.as_array())
                .into_iter()
                .flatten()
            {
                push_object(
                    on_manifest,
                    &mut problems,
                    file,
                    (start_line, None),
                    item.clone(),
                );
            }
            continue;
        }
        push_object(
            on_manifest,
            &mut problems,
            file,
            (start_line, Some(doc_text)),
            value,
        );
    }
    problems
}

/// Kinds that live outside namespaces; every other kind read without `metadata.namespace`
/// lands in `default`, as `kubectl apply` would put it.
const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "GatewayClass",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
];

fn default_namespace(object: &mut serde_json::Value) {
    let kind = object
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    if CLUSTER_SCOPED_KINDS.contains(&kind) {
        return;
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        let missing = metadata
            .get("namespace")
            .and_then(|n| n.as_str())
            .is_none_or(str::is_empty);
        if missing {
            metadata.insert(
                "namespace".into(),
                serde_json::Value::String("default".into()),
            );
        }
    }
}

/// Hands on `object`, read from the document at `line` (with its text, unless it is an
/// item of a `List`), or records why it cannot be used.
fn push_object(
    on_manifest: &mut dyn FnMut(Manifest),
    problems: &mut Vec<ManifestError>,
    file: &Path,
    (line, document): (usize, Option<&str>),
    mut object: serde_json::Value,
) {
    default_namespace(&mut object);
    let missing: Vec<&str> = [
        (
            "apiVersion",
            object.get("apiVersion").and_then(|v| v.as_str()).is_some(),
        ),
        (
            "kind",
            object.get("kind").and_then(|v| v.as_str()).is_some(),
        ),
        (
            "metadata.name",
            object
                .pointer("/metadata/name")
                .and_then(|v| v.as_str())
                .is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, present)| !present)
    .map(|(field, _)| field)
    .collect();
    if !missing.is_empty() {
        problems.push(ManifestError {
            file: file.to_path_buf(),
            line: Some(line),
            message: format!("the document has no {}", missing.join(", ")),
        });
    } else if let Some((field, problem)) = invalid_name(&object) {
        // At the field's own line when the document's text shows it.
        let field_line = document.and_then(|text| {
            YamlLines::scan(file.display().to_string(), text, line).nearest(&["metadata", field])
        });
        problems.push(ManifestError {
            file: file.to_path_buf(),
            line: Some(field_line.unwrap_or(line)),
            message: problem,
        });
    } else {
        on_manifest(Manifest {
            object,
            file: file.to_path_buf(),
            line,
        });
    }
}

/// Kinds whose names Kubernetes checks only as path segments (no `/` or `%`, not `.` or
/// `..`) rather than as DNS subdomains.
const PATH_SEGMENT_NAMED_KINDS: &[&str] =
    &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

/// What the API server would refuse in the object's `metadata.name` and
/// `metadata.namespace`: a folder holds objects as a cluster would, so a template never
/// sees a name a cluster could not hold (a newline, a space, a quote, `#`). Returns the
/// field (`name` or `namespace`) and the problem.
fn invalid_name(object: &serde_json::Value) -> Option<(&'static str, String)> {
    let kind = object
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    let name = object.pointer("/metadata/name").and_then(|v| v.as_str())?;
    let name_ok = if PATH_SEGMENT_NAMED_KINDS.contains(&kind) {
        !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%'])
    } else {
        is_dns_subdomain(name)
    };
    if !name_ok {
        return Some((
            "name",
            format!(
                "metadata.name {name:?} is not a name Kubernetes accepts for kind {kind} (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
            ),
        ));
    }
    match object
        .pointer("/metadata/namespace")
        .and_then(|v| v.as_str())
    {
        Some(namespace) if !is_dns_label(namespace) => Some((
            "namespace",
            format!(
                "metadata.namespace {namespace:?} is not a namespace name Kubernetes accepts (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
            ),
        )),
        _ => None,
    }
}

/// An RFC 1123 label as Kubernetes checks it (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63
/// characters).
fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && is_label_shaped(text)
}

/// An RFC 1123 subdomain as Kubernetes checks it: label-shaped parts joined by `.`, at most
/// 253 characters in all.
fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_label_shaped)
}

fn is_label_shaped(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

/// Whether a path names a manifest file by its extension.
pub fn is_manifest_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// The number of line feeds in `text` before byte `index`. The YAML parser counts a lone
/// carriage return as a line break too, so its line numbers can run past the file's; its
/// byte offset, counted in line feeds as editors and `str::lines` do, names the right line.
fn newlines_before(text: &str, index: usize) -> usize {
    let end = index.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// Splits YAML text at `---` document markers, returning each document with the 1-based
/// line it starts on.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start_byte = 0;
    let mut start_line = 1;
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") || trimmed.starts_with("---\t") {
            docs.push((start_line, &text[start_byte..offset]));
            start_byte = offset + line.len();
            start_line = index + 2;
        }
        offset += line.len();
    }
    docs.push((start_line, &text[start_byte..]));
    docs
}

/// A YAML parser message about a document starting at file line `start_line`, with every
/// `at line N` it holds (the problem's, and the construct's it was reading, as in "did not
/// find expected key at line 14 column 1, while parsing a block mapping at line 2 column 1")
/// counted in the file's lines: the first, the problem's, is `problem_line`, counted in
/// line feeds as the caller counted it.
fn file_lines_in(message: &str, start_line: usize, problem_line: usize) -> String {
    const AT_LINE: &str = " at line ";
    let mut out = String::with_capacity(message.len() + 8);
    let mut rest = message;
    let mut first = true;
    while let Some(at) = rest.find(AT_LINE) {
        let after = &rest[at + AT_LINE.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        out.push_str(&rest[..at + AT_LINE.len()]);
        match after[..digits].parse::<usize>() {
            Ok(_) if first => out.push_str(&problem_line.to_string()),
            Ok(line) => out.push_str(&(start_line + line.saturating_sub(1)).to_string()),
            Err(_) => {}
        }
        first = false;
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_named_as_no_cluster_would_accept_is_a_problem_at_its_line_and_the_rest_load() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: \"bad\\nglobal\"}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: fine, namespace: \"has space\"}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: \"system:haptor\"}\n";
        let set = parse_manifests(Path::new("m.yaml"), text);
        let names: Vec<String> = set.manifests.iter().map(Manifest::display_name).collect();
        assert_eq!(
            names,
            ["Service default/ok", "ClusterRole default/system:haptor"]
        );
        let problems: Vec<String> = set.problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("m.yaml:7: metadata.name \"bad\\nglobal\" is not a name"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("m.yaml:11: metadata.namespace \"has space\""),
            "{problems:?}"
        );
    }

    #[test]
    fn a_bad_name_or_namespace_is_reported_at_the_line_of_its_own_field() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: ok}\n---\n# a Service\napiVersion: v1\nkind: Service\nmetadata:\n  labels:\n    app: x\n  name: Bad_Name\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: fine\n  namespace: Not-Ok\n";
        let set = parse_manifests(Path::new("m.yaml"), text);
        let problems: Vec<String> = set.problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("m.yaml:11: metadata.name \"Bad_Name\""),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("m.yaml:17: metadata.namespace \"Not-Ok\""),
            "{problems:?}"
        );
    }

    #[test]
    fn a_yaml_error_keeps_both_locations_the_parser_gives_counted_in_the_files_lines() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: b\n  labels:\n    a: \"x\n";
        let set = parse_manifests(Path::new("m.yaml"), text);
        assert_eq!(set.problems.len(), 1, "{:?}", set.problems);
        assert_eq!(
            set.problems[0].to_string(),
            "m.yaml:11: malformed YAML: found unexpected end of stream at line 11 column 1, while scanning a quoted scalar at line 10 column 8"
        );
    }

    #[test]
    fn kubernetes_names_are_lower_case_labels_joined_by_dots() {
        assert!(is_dns_subdomain("app-a.v2"));
        assert!(is_dns_subdomain(&"a".repeat(100)));
        for bad in ["", "App", "a_b", "-a", "a-", "a..b", "a b", "a#b", "a\"b"] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(is_dns_label("default"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(!is_dns_label("a.b"));
    }

    #[test]
    fn every_document_of_a_multi_document_file_is_read_with_its_start_line() {
        let text = "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n---\n# comment only\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n";
        let set = parse_manifests(Path::new("m.yaml"), text);
        assert!(set.problems.is_empty(), "{:?}", set.problems);
        let found: Vec<(String, usize)> = set
            .manifests
            .iter()
            .map(|m| (m.display_name(), m.line))
            .collect();
        assert_eq!(
            found,
            vec![
                ("Service default/a".to_string(), 1),
                ("Secret default/b".to_string(), 8)
            ]
        );
    }

    #[test]
    fn a_malformed_document_is_reported_with_file_and_line_and_the_others_still_load() {
        let text = "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: [unclosed\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: c}\n";
        let set = parse_manifests(Path::new("dir/m.yaml"), text);
        assert_eq!(set.manifests.len(), 2);
        assert_eq!(set.problems.len(), 1);
        let problem = set.problems[0].to_string();
        assert!(problem.starts_with("dir/m.yaml:"), "{problem}");
        let line: usize = problem
            .split(':')
            .nth(1)
            .and_then(|l| l.parse().ok())
            .expect("a line number");
        assert!(
            (9..=10).contains(&line),
            "line {line} should point into the second document: {problem}"
        );
    }

    #[test]
    fn a_malformed_document_after_lone_carriage_returns_is_reported_at_the_files_own_line() {
        // YAML counts each lone `\r` as a line break; editors and the line numbers haptor
        // prints count line feeds. Found by the manifests fuzz target: the problem named line
        // 117 of a 43-line file.
        let carriage_returns = "\r".repeat(50);
        let text = format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: a{carriage_returns}b\n  namespace: [unclosed\n"
        );
        let set = parse_manifests(Path::new("m.yaml"), &text);
        assert_eq!(set.problems.len(), 1, "{:?}", set.problems);
        let line = set.problems[0].line.expect("a line");
        assert!(
            (4..=6).contains(&line),
            "line {line} should be at the end of the file's 5 lines: {}",
            set.problems[0]
        );
    }

    #[test]
    fn a_document_without_kind_or_name_is_a_problem() {
        let set = parse_manifests(Path::new("m.yaml"), "apiVersion: v1\nmetadata: {}\n");
        assert!(set.manifests.is_empty());
        assert_eq!(
            set.problems[0].to_string(),
            "m.yaml:1: the document has no kind, metadata.name"
        );
    }

    #[test]
    fn a_namespaced_object_without_a_namespace_lands_in_default_and_a_cluster_scoped_one_in_none() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: c}\n";
        let set = parse_manifests(Path::new("m.yaml"), text);
        assert_eq!(
            set.manifests[0].object.pointer("/metadata/namespace"),
            Some(&serde_json::json!("default"))
        );
        assert_eq!(set.manifests[1].object.pointer("/metadata/namespace"), None);
    }

    #[test]
    fn a_list_document_yields_its_items() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: x}}\n- {apiVersion: v1, kind: Service, metadata: {name: y}}\n";
        assert_eq!(
            parse_manifests(Path::new("l.yaml"), text).manifests.len(),
            2
        );
    }
}
