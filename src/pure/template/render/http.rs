//! `http_resource "name"`: the body of one of the config's HTTP resources
//! (`spec.httpResources`), as text, `as="lines"` (non-empty lines, comments dropped) or
//! `as="json"`; `http_resource_on "name"`: whether it has a URL (an empty one turns it off). It reads the resource's store like any store, so a template that reads it
//! renders again when, and only when, the content in use changes. A resource with no
//! content yet reads as empty; in a validation test, a URL no fixture gives is an error
//! naming it. What it returns reaches `haproxy.cfg` only through expressions, so the
//! code-running guard judges it like any object value.

use handlebars::{
    Context, Handlebars, Helper, HelperDef, RenderContext as HbRenderContext, RenderError,
    ScopedJson,
};
use serde_json::Value;

use super::RenderState;
use crate::pure::http_resources::{BodyForm, store_name};
use crate::pure::template::helpers::{Args, misuse};

/// The `http_resource` helper.
pub(super) struct HttpResourceHelper<'s> {
    pub(super) state: &'s RenderState<'s>,
}

impl HelperDef for HttpResourceHelper<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "http_resource",
            helper,
        };
        let name = args.text(0)?;
        let form = match helper.hash_get("as").map(|v| v.value()) {
            None => BodyForm::Text,
            Some(Value::String(text)) => BodyForm::parse(text).ok_or_else(|| {
                misuse(format!(
                    "http_resource: as=\"{text}\" is not text, lines or json"
                ))
            })?,
            Some(other) => {
                return Err(misuse(format!(
                    "http_resource: as={other} is not text, lines or json"
                ))
                .into());
            }
        };
        let Some(object) = declared(self.state, "http_resource", &name)? else {
            return Ok(ScopedJson::Derived(form.empty()));
        };
        let url = object
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if object.get("unmocked").and_then(Value::as_bool) == Some(true) {
            return Err(misuse(format!(
                "http_resource '{name}': {url} has no fixture in this test's httpResources"
            ))
            .into());
        }
        let Some(body) = object.get("body").and_then(Value::as_str) else {
            return Ok(ScopedJson::Derived(form.empty()));
        };
        let value = form
            .read(body)
            .map_err(|e| misuse(format!("http_resource '{name}' ({url}): {e}")))?;
        Ok(ScopedJson::Derived(value))
    }
}

/// The `http_resource_on` helper.
pub(super) struct HttpResourceOn<'s> {
    pub(super) state: &'s RenderState<'s>,
}

impl HelperDef for HttpResourceOn<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let args = Args {
            name: "http_resource_on",
            helper,
        };
        let name = args.text(0)?;
        let on = declared(self.state, "http_resource_on", &name)?.is_some_and(|object| {
            object
                .get("url")
                .and_then(Value::as_str)
                .is_some_and(|url| !url.is_empty())
        });
        Ok(ScopedJson::Derived(Value::Bool(on)))
    }
}

/// The object of HTTP resource `name`'s store (read, for the memos), or an error when the
/// config declares no such resource.
fn declared(
    state: &RenderState<'_>,
    helper: &str,
    name: &str,
) -> Result<Option<Value>, RenderError> {
    if state.stores().get(&store_name(name)).is_none() {
        return Err(misuse(format!(
            "{helper}: the config declares no HTTP resource named '{name}' (spec.httpResources)"
        ))
        .into());
    }
    let snapshot = state.read_store(&store_name(name))?;
    Ok(snapshot.entries().first().map(|entry| entry.value()))
}
