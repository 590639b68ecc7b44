//! Checks made once at compile time over the parsed templates, so mistakes fail when the
//! configuration is loaded rather than at the first render: unknown helpers, partials that
//! name no snippet, dynamic partial names, decorators, and snippets that include
//! themselves (directly or through other snippets), which would otherwise recurse until
//! the stack overflows.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use handlebars::template::{HelperTemplate, Parameter, Template, TemplateElement};
use serde_json::Value;

use super::TemplateError;
use super::helpers::glob_match;

/// The partial name handlebars uses for a partial block's content.
pub(super) const PARTIAL_BLOCK: &str = "@partial-block";

pub(crate) struct Checker<'a> {
    pub snippets: &'a BTreeSet<String>,
    pub helpers: &'a HashSet<&'static str>,
}

/// Where in which template a problem is.
struct Spot<'t> {
    template: &'t str,
    line: Option<usize>,
    column: Option<usize>,
}

impl Spot<'_> {
    fn error(&self, message: String) -> TemplateError {
        TemplateError::Compile {
            template: self.template.to_string(),
            line: self.line,
            column: self.column,
            message,
        }
    }
}

impl Checker<'_> {
    /// Checks every template, then looks for include cycles among snippets.
    pub(crate) fn check<'t>(
        &self,
        templates: impl IntoIterator<Item = (&'t str, &'t Template)>,
    ) -> Result<(), TemplateError> {
        let mut includes: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (name, template) in templates {
            let mut edges = BTreeSet::new();
            self.walk(name, template, &mut edges)?;
            includes.insert(name, edges);
        }
        find_cycle(&includes)
    }

    fn walk(
        &self,
        name: &str,
        template: &Template,
        edges: &mut BTreeSet<String>,
    ) -> Result<(), TemplateError> {
        for (index, element) in template.elements.iter().enumerate() {
            let mapping = template.mapping.get(index);
            let spot = Spot {
                template: name,
                line: mapping.map(|m| m.0),
                column: mapping.map(|m| m.1),
            };
            match element {
                TemplateElement::RawString(_) | TemplateElement::Comment(_) => {}
                TemplateElement::Expression(helper) | TemplateElement::HtmlExpression(helper) => {
                    self.helper(name, &spot, helper, false, edges)?;
                }
                TemplateElement::HelperBlock(helper) => {
                    self.helper(name, &spot, helper, true, edges)?
                }
                TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => {
                    return Err(spot.error(
                        "decorators such as {{#*inline}} are not supported; define a template snippet and \
                         include it with {{> name}}"
                            .to_string(),
                    ));
                }
                TemplateElement::PartialExpression(partial)
                | TemplateElement::PartialBlock(partial) => {
                    let target = match &partial.name {
                        Parameter::Name(target) => unquote(target),
                        _ => {
                            return Err(spot.error(
                                "a partial name must be written literally; use {{render name}} to choose a \
                                 snippet at render time"
                                    .to_string(),
                            ));
                        }
                    };
                    if target != PARTIAL_BLOCK {
                        self.require_snippet(&spot, target)?;
                        edges.insert(target.to_string());
                    }
                    for param in partial.params.iter().chain(partial.hash.values()) {
                        self.parameter(name, &spot, param, edges)?;
                    }
                    if let Some(inner) = &partial.template {
                        self.walk(name, inner, edges)?;
                    }
                }
                // Element kinds added by a later handlebars release carry no helper call
                // this check knows how to inspect.
                _ => {}
            }
        }
        Ok(())
    }

    fn helper(
        &self,
        name: &str,
        spot: &Spot<'_>,
        helper: &HelperTemplate,
        must_be_helper: bool,
        edges: &mut BTreeSet<String>,
    ) -> Result<(), TemplateError> {
        let called =
            helper.block || must_be_helper || !helper.params.is_empty() || !helper.hash.is_empty();
        if let (true, Some(helper_name)) = (called, helper.name.as_name()) {
            if !self.helpers.contains(helper_name) {
                return Err(spot.error(format!("unknown helper '{helper_name}'")));
            }
            let literal = match helper.params.first() {
                Some(Parameter::Literal(Value::String(text))) => Some(text.as_str()),
                _ => None,
            };
            match (helper_name, literal) {
                ("render", Some(target)) => {
                    self.require_snippet(spot, target)?;
                    edges.insert(target.to_string());
                }
                ("render_glob", Some(pattern)) => {
                    edges.extend(
                        self.snippets
                            .iter()
                            .filter(|s| glob_match(pattern, s))
                            .cloned(),
                    );
                }
                _ => {}
            }
        }
        for param in helper.params.iter().chain(helper.hash.values()) {
            self.parameter(name, spot, param, edges)?;
        }
        for inner in [&helper.template, &helper.inverse].into_iter().flatten() {
            self.walk(name, inner, edges)?;
        }
        Ok(())
    }

    fn parameter(
        &self,
        name: &str,
        spot: &Spot<'_>,
        param: &Parameter,
        edges: &mut BTreeSet<String>,
    ) -> Result<(), TemplateError> {
        if let Parameter::Subexpression(sub) = param
            && let TemplateElement::Expression(helper) = sub.as_element()
        {
            self.helper(name, spot, helper, true, edges)?;
        }
        Ok(())
    }

    fn require_snippet(&self, spot: &Spot<'_>, target: &str) -> Result<(), TemplateError> {
        if self.snippets.contains(target) {
            return Ok(());
        }
        let known: Vec<&str> = self.snippets.iter().map(String::as_str).collect();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        Err(spot.error(format!(
            "no template snippet named '{target}' (known: {known})"
        )))
    }
}

/// Strips the `[...]` or quotes handlebars allows around partial names.
pub(super) fn unquote(name: &str) -> &str {
    for (open, close) in [('[', ']'), ('\'', '\''), ('"', '"')] {
        if let Some(inner) = name.strip_prefix(open).and_then(|n| n.strip_suffix(close)) {
            return inner;
        }
    }
    name
}

/// Reports the first include cycle, naming every template on it.
fn find_cycle(includes: &BTreeMap<&str, BTreeSet<String>>) -> Result<(), TemplateError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Active,
        Done,
    }
    fn visit<'a>(
        node: &'a str,
        includes: &'a BTreeMap<&str, BTreeSet<String>>,
        marks: &mut BTreeMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
    ) -> Result<(), TemplateError> {
        match marks.get(node) {
            Some(Mark::Done) => return Ok(()),
            Some(Mark::Active) => {
                let start = stack.iter().position(|n| *n == node).unwrap_or(0);
                let mut cycle: Vec<&str> = stack[start..].to_vec();
                cycle.push(node);
                return Err(TemplateError::Compile {
                    template: node.to_string(),
                    line: None,
                    column: None,
                    message: format!(
                        "snippets include each other in a cycle: {}",
                        cycle.join(" → ")
                    ),
                });
            }
            None => {}
        }
        marks.insert(node, Mark::Active);
        stack.push(node);
        if let Some(targets) = includes.get(node) {
            for target in targets {
                visit(target, includes, marks, stack)?;
            }
        }
        stack.pop();
        marks.insert(node, Mark::Done);
        Ok(())
    }
    let mut marks = BTreeMap::new();
    for node in includes.keys() {
        visit(node, includes, &mut marks, &mut Vec::new())?;
    }
    Ok(())
}
