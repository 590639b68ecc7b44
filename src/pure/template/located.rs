//! Where a template's lines are in the config file it was read from. A template is a YAML
//! string inside the HAProxyTemplateConfig (`spec.haproxyConfig.template`,
//! `spec.templateSnippets.<name>.template`, `spec.maps.<name>.template`, …, and the
//! `template`/`whenInvalid` lines of `spec.annotations.definitions.<name>`, which the
//! generated `annotations/…` snippets wrap); [`Origins`] turns "template 'haproxy.cfg'
//! line 9" into the file's line, so that every compile and render error names
//! `config.yaml:1786` as well (see [`TemplateError::InConfig`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{CERT_PREFIX, FILE_PREFIX, HAPROXY_CFG, MAP_PREFIX, TemplateError, TemplateSetInput};
use crate::pure::annotations;
use crate::pure::config::AnnotationDefinition;
use crate::pure::yaml_lines::YamlLines;

/// The file lines of one set's templates, when its config was read from a file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    lines: Option<Arc<YamlLines>>,
    /// The config's own snippet names.
    snippets: BTreeSet<String>,
    /// Generated annotation snippets by registry name: the annotation and its definition.
    annotation_snippets: BTreeMap<String, (String, AnnotationDefinition)>,
    /// Every defined annotation's name.
    annotation_names: BTreeSet<String>,
}

impl Origins {
    pub(crate) fn of(input: &TemplateSetInput) -> Origins {
        let Some(lines) = &input.source else {
            return Origins::default();
        };
        let annotation_snippets = input
            .annotations
            .definitions
            .iter()
            .filter(|(_, definition)| definition.template.is_some())
            .filter_map(|(name, definition)| {
                let section = definition.section.as_deref()?;
                Some((
                    annotations::snippet_name(section, definition.order, name),
                    (name.clone(), definition.clone()),
                ))
            })
            .collect();
        Origins {
            lines: Some(Arc::clone(lines)),
            snippets: input.snippets.keys().cloned().collect(),
            annotation_snippets,
            annotation_names: input.annotations.definitions.keys().cloned().collect(),
        }
    }

    /// The file line of line `line` of `template` (a registry name, or a `spec.` field a
    /// compile error names): the key's line when `line` is unknown or the template's lines
    /// do not map one to one.
    pub(crate) fn file_line(&self, template: &str, line: Option<usize>) -> Option<usize> {
        let lines = self.lines.as_deref()?;
        let field = |path: &[&str], line| lines.line_of(path, line).or_else(|| lines.nearest(path));
        if template == HAPROXY_CFG {
            return field(&["spec", "haproxyConfig", "template"], line);
        }
        for (prefix, key) in [
            (MAP_PREFIX, "maps"),
            (FILE_PREFIX, "files"),
            (CERT_PREFIX, "sslCertificates"),
        ] {
            if let Some(name) = template.strip_prefix(prefix) {
                return field(&["spec", key, name, "template"], line);
            }
        }
        if let Some((name, definition)) = self.annotation_snippets.get(template) {
            let (key, line) = line
                .and_then(|line| annotations::generated_line_origin(definition, line))
                .unwrap_or(("template", None));
            return field(&["spec", "annotations", "definitions", name, key], line);
        }
        if self.snippets.contains(template) {
            return field(&["spec", "templateSnippets", template, "template"], line);
        }
        self.spec_field_line(template)
    }

    /// The line of a `spec.` field path as errors write it (`spec.annotations.definitions.
    /// <name>.aliases`, `spec.annotations.prefixes[0]`), or of its closest located ancestor.
    fn spec_field_line(&self, field: &str) -> Option<usize> {
        let lines = self.lines.as_deref()?;
        let rest = field.strip_prefix("spec.")?;
        if let Some(rest) = rest.strip_prefix("annotations.definitions.") {
            // Annotation names hold dots: match the defined names rather than split.
            let name = self
                .annotation_names
                .iter()
                .filter(|name| {
                    rest.strip_prefix(name.as_str())
                        .is_some_and(|after| after.is_empty() || after.starts_with('.'))
                })
                .max_by_key(|name| name.len())?;
            let key = rest[name.len()..].trim_start_matches('.');
            let key = key.split(['.', '[']).next().unwrap_or_default();
            let mut path = vec!["spec", "annotations", "definitions", name.as_str()];
            path.extend((!key.is_empty()).then_some(key));
            return lines.nearest(&path);
        }
        let mut path = vec!["spec"];
        path.extend(
            rest.split('.')
                .map(|key| key.split('[').next().unwrap_or(key)),
        );
        lines.nearest(&path)
    }

    /// `error`, naming the config file and line its template line is at when both are known.
    pub(crate) fn locate(&self, error: TemplateError) -> TemplateError {
        let Some(lines) = self.lines.as_deref() else {
            return error;
        };
        if matches!(error, TemplateError::InConfig { .. }) {
            return error;
        }
        let Some(line) = error
            .template()
            .and_then(|template| self.file_line(template, error.line()))
        else {
            return error;
        };
        TemplateError::InConfig {
            file: lines.file().to_string(),
            line,
            error: Box::new(error),
        }
    }
}
