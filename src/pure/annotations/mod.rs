//! Annotations a config declares (`spec.annotations`): what each one accepts, how a value
//! is judged, and the reference a user reads about them.
//!
//! A config names the annotation prefixes it owns (`haproxy.org/`,
//! `nginx.ingress.kubernetes.io/`) and defines each annotation under them once: the kind of
//! value it accepts ([`ValueKind`]), its default, what HAProxy does with it, its ingress-nginx
//! counterpart and, for the ones that act, the template lines it adds. Templates read a
//! value only through the `annotation` helper, which hands out the value in a checked form
//! (quoted and escaped where it reaches a quoted HAProxy argument) or nothing; every value
//! that fails its check, every annotation under an owned prefix the config does not define
//! and every one it refuses is recorded as left out of the object with its reason, which
//! `haptor run` turns into an `IngressPartlyServed` Event and `haptor migrate` into its
//! report. So no annotation value reaches `haproxy.cfg` unchecked, and a bad value never
//! stops the rest of the object from being served.

mod kinds;
mod reference;

use std::collections::BTreeMap;

use serde_json::Value;

pub use kinds::{KindError, ValueKind};
pub use reference::reference_markdown;

use crate::pure::config::{AnnotationDefinition, AnnotationScope, AnnotationSettings};

/// The prefix of the snippets generated from annotation templates:
/// `annotations/<section>/<order>/<annotation name>`.
pub const SNIPPET_PREFIX: &str = "annotations/";

/// The checked annotation table of one config.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnnotationTable {
    prefixes: Vec<String>,
    /// Definitions by annotation name.
    definitions: BTreeMap<String, Definition>,
    /// Alias → the annotation it stands for.
    aliases: BTreeMap<String, String>,
}

/// One annotation as the table judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub name: String,
    pub kind: ValueKind,
    pub section: Option<String>,
    pub aliases: Vec<String>,
    /// Why the annotation is known but never honoured, and what to use instead.
    pub refused: Option<String>,
    /// Whether a present but invalid value renders lines of its own (`whenInvalid`): then it
    /// counts for its section as a valid one does.
    pub fails_closed: bool,
    /// What a present but invalid value makes the template do, in the reason's words
    /// ("left out" unless the definition says otherwise, e.g. "every request is denied").
    pub invalid_effect: String,
    /// Whether a Service's value applies to the backends serving it (above the Ingress's).
    pub on_services: bool,
    /// Whether the config's extraContext `annotation_defaults` may give it a default.
    pub has_defaults: bool,
}

/// The annotations a backend applies: an Ingress's (or none, for a Service's shared
/// backends) with its Service's and the config's defaults merged in, and what the
/// Service carries that does not apply, with the reasons.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendAnnotations {
    /// The merged `metadata.annotations`.
    pub annotations: serde_json::Map<String, Value>,
    /// Why annotations of the Service under an owned prefix are left out.
    pub service_left_out: Vec<String>,
}

/// What an object's annotation value comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    /// The object does not carry the annotation (nor an alias of it).
    Absent,
    /// A valid value, in the form templates get.
    Valid(Value),
    /// A value the definition refuses; the reason names the annotation and the value.
    Invalid(String),
}

/// A definition problem, with the field path under `spec.annotations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProblem {
    pub field: String,
    pub message: String,
}

impl AnnotationTable {
    /// The table of `settings`, or every problem its definitions have.
    pub fn new(settings: &AnnotationSettings) -> Result<AnnotationTable, Vec<TableProblem>> {
        let mut problems = Vec::new();
        let mut table = AnnotationTable {
            prefixes: settings.prefixes.clone(),
            ..AnnotationTable::default()
        };
        for (i, prefix) in settings.prefixes.iter().enumerate() {
            if !prefix.ends_with('/') || prefix.len() < 2 {
                problems.push(TableProblem {
                    field: format!("spec.annotations.prefixes[{i}]"),
                    message: format!("'{prefix}' is not an annotation prefix ending in '/'"),
                });
            }
        }
        for (name, definition) in &settings.definitions {
            let field = format!("spec.annotations.definitions.{name}");
            match Definition::new(name, definition) {
                Ok(checked) => {
                    for alias in &checked.aliases {
                        if let Some(other) = table.aliases.insert(alias.clone(), name.clone()) {
                            problems.push(TableProblem {
                                field: format!("{field}.aliases"),
                                message: format!("'{alias}' is also an alias of {other}"),
                            });
                        }
                    }
                    table.definitions.insert(name.clone(), checked);
                }
                Err(message) => problems.push(TableProblem { field, message }),
            }
        }
        for (alias, name) in &table.aliases {
            if table.definitions.contains_key(alias) {
                problems.push(TableProblem {
                    field: format!("spec.annotations.definitions.{name}.aliases"),
                    message: format!("'{alias}' is defined as an annotation of its own"),
                });
            }
        }
        if problems.is_empty() {
            Ok(table)
        } else {
            Err(problems)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.definitions.is_empty() && self.prefixes.is_empty()
    }

    pub fn definition(&self, name: &str) -> Option<&Definition> {
        self.definitions.get(name)
    }

    /// The annotation of `name` on `annotations` (an object's `metadata.annotations`), its
    /// aliases included: the first of them present decides.
    pub fn judge(&self, definition: &Definition, annotations: &Value) -> Judged {
        let Some((written, raw)) = annotations
            .as_object()
            .and_then(|object| present(object, definition))
        else {
            return Judged::Absent;
        };
        if let Some(refused) = &definition.refused {
            return Judged::Invalid(format!("annotation {written} is not supported: {refused}"));
        }
        let Some(raw) = raw.as_str() else {
            return Judged::Invalid(format!(
                "annotation {written}: its value is not text; {}",
                definition.invalid_effect
            ));
        };
        match definition.kind.check(raw) {
            Ok(value) => Judged::Valid(value),
            Err(err) => Judged::Invalid(format!(
                "annotation {written}: {} is {}; {}",
                shown(raw),
                err.0,
                definition.invalid_effect
            )),
        }
    }

    /// The definition `name` stands for: its own or the one it is an alias of.
    fn defined(&self, name: &str) -> Option<&Definition> {
        self.definitions
            .get(name)
            .or_else(|| self.aliases.get(name).and_then(|n| self.definitions.get(n)))
    }

    fn owned(&self, name: &str) -> bool {
        self.prefixes.iter().any(|p| name.starts_with(p.as_str()))
    }

    /// The annotations a backend of `ingress` (`metadata.annotations`, `Null` for a
    /// Service's shared backends) to `service` applies: for a `Service`-scope annotation the
    /// Service's valid value wins over the Ingress's; for a `Defaults`-scope one
    /// `defaults` (the config's extraContext `annotation_defaults`, by name) gives the value
    /// when neither carries a valid one. What the Service carries under an owned prefix and does not
    /// apply (unknown, refused, Ingress-only or invalid) is returned with the reasons. A
    /// default that is not a valid value of a `Defaults`-scope annotation is the config's
    /// error, returned naming it.
    pub fn backend_annotations(
        &self,
        ingress: &Value,
        service: &Value,
        defaults: &Value,
    ) -> Result<BackendAnnotations, String> {
        let mut merged = ingress.as_object().cloned().unwrap_or_default();
        let mut service_left_out = Vec::new();
        match defaults {
            Value::Null => {}
            Value::Object(defaults) => {
                for (name, raw) in defaults {
                    let definition = self.defaults_definition(name, raw)?;
                    // An invalid value of the Ingress is left out (and reported where the
                    // Ingress is judged), so the default stands in for it.
                    if !matches!(self.judge(definition, ingress), Judged::Valid(_)) {
                        for written in definition.names() {
                            merged.remove(written);
                        }
                        merged.insert(name.clone(), raw.clone());
                    }
                }
            }
            _ => {
                return Err(
                    "extraContext annotation_defaults is not a map of annotation names to values"
                        .to_string(),
                );
            }
        }
        let Some(on_service) = service.as_object() else {
            return Ok(BackendAnnotations {
                annotations: merged,
                service_left_out,
            });
        };
        let mut applied: Vec<&Definition> = Vec::new();
        for name in on_service.keys().filter(|n| self.owned(n)) {
            let reason = match self.defined(name) {
                None => format!(
                    "annotation {name} is not one haptor knows (see docs/annotations.md); it has \
                     no effect"
                ),
                Some(definition) if definition.refused.is_some() => {
                    match self.judge(definition, service) {
                        Judged::Invalid(reason) => reason,
                        _ => continue,
                    }
                }
                Some(definition) if !definition.on_services => format!(
                    "annotation {name} is read on Ingresses only; on a Service it has no effect"
                ),
                Some(definition) => {
                    if !applied.iter().any(|d| d.name == definition.name) {
                        applied.push(definition);
                    }
                    continue;
                }
            };
            service_left_out.push(reason);
        }
        for definition in applied {
            match self.judge(definition, service) {
                Judged::Valid(_) => {
                    if let Some((written, raw)) = present(on_service, definition) {
                        for name in definition.names() {
                            merged.remove(name);
                        }
                        merged.insert(written.to_string(), raw.clone());
                    }
                }
                Judged::Invalid(reason) => service_left_out.push(reason),
                Judged::Absent => {}
            }
        }
        Ok(BackendAnnotations {
            annotations: merged,
            service_left_out,
        })
    }

    /// The definition of a default `name: raw`, when it is a valid one.
    fn defaults_definition(&self, name: &str, raw: &Value) -> Result<&Definition, String> {
        let definition = self.defined(name).ok_or_else(|| {
            format!(
                "extraContext annotation_defaults: {name} is not an annotation this config \
                 defines"
            )
        })?;
        if definition.refused.is_some() || !definition.has_defaults {
            return Err(format!(
                "extraContext annotation_defaults: {name} takes no default (its scopes in \
                 spec.annotations.definitions do not include Defaults)"
            ));
        }
        let single = Value::Object(std::iter::once((name.to_string(), raw.clone())).collect());
        match self.judge(definition, &single) {
            Judged::Invalid(reason) => {
                // What an invalid value does on an Ingress is not what it does here.
                let effect = format!("; {}", definition.invalid_effect);
                let reason = reason.strip_suffix(&effect).unwrap_or(&reason);
                Err(format!(
                    "extraContext annotation_defaults: {reason}; the render fails until it is fixed (the last good configuration keeps serving)"
                ))
            }
            _ => Ok(definition),
        }
    }

    /// Every reason something of `annotations` is left out: invalid values, refused
    /// annotations and names under an owned prefix that are defined nowhere. Sorted by
    /// annotation name.
    pub fn left_out(&self, annotations: &Value) -> Vec<String> {
        let Some(object) = annotations.as_object() else {
            return Vec::new();
        };
        let mut reasons = Vec::new();
        for name in object.keys() {
            if !self.owned(name) {
                continue;
            }
            match self.defined(name) {
                None => reasons.push(format!(
                    "annotation {name} is not one haptor knows (see docs/annotations.md); it has no effect"
                )),
                Some(definition) => {
                    if let Judged::Invalid(reason) = self.judge(definition, annotations) {
                        reasons.push(reason);
                    }
                }
            }
        }
        reasons
    }

    /// Whether `annotations` carry a value for a definition of `section` that renders: a
    /// valid one, or an invalid one of a definition that fails closed.
    pub fn any_in_section(&self, section: &str, annotations: &Value) -> bool {
        let Some(object) = annotations.as_object() else {
            return false;
        };
        object.keys().any(|name| {
            self.defined(name).is_some_and(|d| {
                d.section.as_deref() == Some(section)
                    && match self.judge(d, annotations) {
                        Judged::Valid(_) => true,
                        Judged::Invalid(_) => d.fails_closed,
                        Judged::Absent => false,
                    }
            })
        })
    }
}

/// The first of `definition`'s names `annotations` carry, with its value.
fn present<'a>(
    annotations: &'a serde_json::Map<String, Value>,
    definition: &'a Definition,
) -> Option<(&'a str, &'a Value)> {
    definition
        .names()
        .find_map(|name| annotations.get(name).map(|value| (name, value)))
}

impl Definition {
    /// Its name, then its aliases.
    fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.name.as_str()).chain(self.aliases.iter().map(String::as_str))
    }

    fn new(name: &str, definition: &AnnotationDefinition) -> Result<Definition, String> {
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("'{name}' is not an annotation name"));
        }
        let kind =
            ValueKind::parse(&definition.accepts).map_err(|err| format!("accepts: {}", err.0))?;
        if definition.template.is_some() && definition.section.is_none() {
            return Err("a template needs a section: the snippets it joins".to_string());
        }
        if definition.refused.is_some()
            && (definition.template.is_some() || definition.when_invalid.is_some())
        {
            return Err("a refused annotation has no template".to_string());
        }
        if let Some(section) = &definition.section
            && !section
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "section '{section}' is not a word (letters, digits, '-', '_')"
            ));
        }
        if !definition.scopes.is_empty() && !definition.scopes.contains(&AnnotationScope::Ingress) {
            return Err("scopes: every annotation is read on Ingresses; add Ingress".to_string());
        }
        let beyond_ingress = definition
            .scopes
            .iter()
            .any(|s| *s != AnnotationScope::Ingress);
        if beyond_ingress && definition.refused.is_some() {
            return Err("a refused annotation is read nowhere: its scopes are [Ingress]".into());
        }
        Ok(Definition {
            on_services: definition.scopes.contains(&AnnotationScope::Service),
            has_defaults: definition.scopes.contains(&AnnotationScope::Defaults),
            name: name.to_string(),
            kind,
            section: definition.section.clone(),
            aliases: definition.aliases.clone(),
            refused: definition.refused.clone(),
            fails_closed: definition.when_invalid.is_some(),
            invalid_effect: definition
                .invalid_effect
                .clone()
                .unwrap_or_else(|| "it is left out".to_string()),
        })
    }
}

/// A value as a reason shows it: quoted, control characters escaped, at most 80 characters.
fn shown(raw: &str) -> String {
    let mut text: String = raw.chars().take(80).flat_map(char::escape_debug).collect();
    if raw.chars().count() > 80 {
        text.push('…');
    }
    format!("\"{text}\"")
}

/// The snippets a config's annotation templates become, by snippet name: each
/// definition's template, every line indented by two spaces as a section's body is, inside
/// a block that gives it `value` (the checked value) for the object `ing`, and its
/// `whenInvalid` lines when the object carries an invalid one.
pub fn generated_snippets(settings: &AnnotationSettings) -> BTreeMap<String, String> {
    let mut snippets = BTreeMap::new();
    for (name, definition) in &settings.definitions {
        let (Some(section), Some(template)) = (&definition.section, &definition.template) else {
            continue;
        };
        let mut text =
            format!("{{{{#each (annotation ing \"{name}\" as_list=true) as |value|}}}}\n");
        text.push_str(&indented(template));
        text.push_str("{{/each}}\n");
        if let Some(when_invalid) = &definition.when_invalid {
            text.push_str(&format!(
                "{{{{#if (annotation ing \"{name}\" invalid=true)}}}}\n"
            ));
            text.push_str(&indented(when_invalid));
            text.push_str("{{/if}}\n");
        }
        snippets.insert(snippet_name(section, definition.order, name), text);
    }
    snippets
}

/// Where line `line` of the snippet [`generated_snippets`] makes of `definition` comes
/// from: the definition's field (`template` or `whenInvalid`) and the line in it, `None` for
/// a line the snippet adds around that field's lines (its block's open or close). `None`
/// past the snippet's end.
pub fn generated_line_origin(
    definition: &AnnotationDefinition,
    line: usize,
) -> Option<(&'static str, Option<usize>)> {
    let template = definition.template.as_deref()?.lines().count();
    // `{{#each …}}`, the template's lines, `{{/each}}`.
    match line {
        0 => return None,
        1 => return Some(("template", None)),
        l if l <= template + 1 => return Some(("template", Some(l - 1))),
        l if l == template + 2 => return Some(("template", None)),
        _ => {}
    }
    // `{{#if …}}`, the whenInvalid lines, `{{/if}}`.
    let when_invalid = definition.when_invalid.as_deref()?.lines().count();
    let line = line - (template + 2);
    match line {
        1 => Some(("whenInvalid", None)),
        l if l <= when_invalid + 1 => Some(("whenInvalid", Some(l - 1))),
        l if l == when_invalid + 2 => Some(("whenInvalid", None)),
        _ => None,
    }
}

/// Every line of `template` indented by two spaces (blank lines stay blank), ending in a
/// line break.
fn indented(template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    for line in template.lines() {
        if !line.trim().is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `annotations/<section>/<order, four digits>/<name>`.
pub fn snippet_name(section: &str, order: u16, name: &str) -> String {
    format!("{SNIPPET_PREFIX}{section}/{order:04}/{name}")
}

#[cfg(test)]
mod tests;
