//! The types of the fields templates read, checked before an object is stored: an API
//! server refuses `port: "19001"` in an EndpointSlice, but a hand-written manifest in
//! `haptor local`'s folder or `haptor render --fixtures` reaches haptor without one, and a
//! template reading the string where it expects a number leaves the Service without servers
//! and says nothing. So every object of a kind known here has its commonly read fields
//! checked ([`check`]): a field of the wrong type is a [`SchemaError`] naming the object, the
//! field and what was found, and the object is not used (the folder keeps its last good
//! version). Objects from an API server always pass; the check is cheap, and the store runs
//! it for every source alike.
//!
//! Known kinds: Service, EndpointSlice, Secret, Namespace (core and discovery), Ingress and
//! IngressClass (networking.k8s.io/v1), and the Gateway API kinds haptor's libraries read.
//! Every object's `metadata.labels` and `metadata.annotations` must map strings to strings.
//! A field that is absent or `null` is not checked: only the type of what is there is.

use serde_json::Value;

/// What a field must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    String,
    Integer,
    Boolean,
    /// An integer or a string (`targetPort`).
    IntegerOrString,
    /// A mapping from strings to strings (labels, annotations, selectors, Secret data).
    StringMap,
}

impl FieldType {
    fn expected(self) -> &'static str {
        match self {
            FieldType::String => "a string",
            FieldType::Integer => "an integer",
            FieldType::Boolean => "a boolean",
            FieldType::IntegerOrString => "an integer or a string",
            FieldType::StringMap => "a mapping of strings to strings",
        }
    }
}

/// One field of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Where, as `ports[0].port` or `metadata.annotations["haproxy.org/ssl-redirect"]`.
    pub field: String,
    pub expected: &'static str,
    /// What is there, as `the string "19001"`.
    pub found: String,
    /// How to write it instead, when that is plain (`write 19001 without quotes`).
    pub hint: Option<String>,
}

impl std::fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.field, self.expected, self.found
        )?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// How many field problems one error lists; the rest are counted.
const LISTED_PROBLEMS: usize = 3;

/// An object whose fields do not have the types its kind requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    /// `EndpointSlice default/app-a-1` (`Kind name` when cluster-scoped).
    pub object: String,
    pub problems: Vec<FieldProblem>,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.object)?;
        for (i, problem) in self.problems.iter().take(LISTED_PROBLEMS).enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        if self.problems.len() > LISTED_PROBLEMS {
            write!(f, " (and {} more)", self.problems.len() - LISTED_PROBLEMS)?;
        }
        Ok(())
    }
}

use FieldType::{Boolean, Integer, IntegerOrString, StringMap};
const STR: FieldType = FieldType::String;

/// Fields every object has.
const METADATA: &[(&str, FieldType)] = &[
    ("metadata.labels", StringMap),
    ("metadata.annotations", StringMap),
];

const SERVICE: &[(&str, FieldType)] = &[
    ("spec.type", STR),
    ("spec.clusterIP", STR),
    ("spec.clusterIPs[]", STR),
    ("spec.externalName", STR),
    ("spec.externalIPs[]", STR),
    ("spec.selector", StringMap),
    ("spec.ports[].name", STR),
    ("spec.ports[].port", Integer),
    ("spec.ports[].targetPort", IntegerOrString),
    ("spec.ports[].nodePort", Integer),
    ("spec.ports[].protocol", STR),
    ("spec.ports[].appProtocol", STR),
];

const ENDPOINT_SLICE: &[(&str, FieldType)] = &[
    ("addressType", STR),
    ("ports[].name", STR),
    ("ports[].port", Integer),
    ("ports[].protocol", STR),
    ("ports[].appProtocol", STR),
    ("endpoints[].addresses[]", STR),
    ("endpoints[].conditions.ready", Boolean),
    ("endpoints[].conditions.serving", Boolean),
    ("endpoints[].conditions.terminating", Boolean),
    ("endpoints[].hostname", STR),
    ("endpoints[].nodeName", STR),
    ("endpoints[].zone", STR),
    ("endpoints[].targetRef.kind", STR),
    ("endpoints[].targetRef.namespace", STR),
    ("endpoints[].targetRef.name", STR),
];

const SECRET: &[(&str, FieldType)] = &[
    ("type", STR),
    ("data", StringMap),
    ("stringData", StringMap),
    ("immutable", Boolean),
];

const INGRESS: &[(&str, FieldType)] = &[
    ("spec.ingressClassName", STR),
    ("spec.defaultBackend.service.name", STR),
    ("spec.defaultBackend.service.port.number", Integer),
    ("spec.defaultBackend.service.port.name", STR),
    ("spec.defaultBackend.resource.apiGroup", STR),
    ("spec.defaultBackend.resource.kind", STR),
    ("spec.defaultBackend.resource.name", STR),
    ("spec.tls[].hosts[]", STR),
    ("spec.tls[].secretName", STR),
    ("spec.rules[].host", STR),
    ("spec.rules[].http.paths[].path", STR),
    ("spec.rules[].http.paths[].pathType", STR),
    ("spec.rules[].http.paths[].backend.service.name", STR),
    (
        "spec.rules[].http.paths[].backend.service.port.number",
        Integer,
    ),
    ("spec.rules[].http.paths[].backend.service.port.name", STR),
    ("spec.rules[].http.paths[].backend.resource.apiGroup", STR),
    ("spec.rules[].http.paths[].backend.resource.kind", STR),
    ("spec.rules[].http.paths[].backend.resource.name", STR),
];

const INGRESS_CLASS: &[(&str, FieldType)] = &[
    ("spec.controller", STR),
    ("spec.parameters.apiGroup", STR),
    ("spec.parameters.kind", STR),
    ("spec.parameters.name", STR),
    ("spec.parameters.namespace", STR),
    ("spec.parameters.scope", STR),
];

const GATEWAY_CLASS: &[(&str, FieldType)] = &[("spec.controllerName", STR)];

const GATEWAY: &[(&str, FieldType)] = &[
    ("spec.gatewayClassName", STR),
    ("spec.addresses[].type", STR),
    ("spec.addresses[].value", STR),
    ("spec.listeners[].name", STR),
    ("spec.listeners[].hostname", STR),
    ("spec.listeners[].port", Integer),
    ("spec.listeners[].protocol", STR),
    ("spec.listeners[].tls.mode", STR),
    ("spec.listeners[].tls.certificateRefs[].group", STR),
    ("spec.listeners[].tls.certificateRefs[].kind", STR),
    ("spec.listeners[].tls.certificateRefs[].name", STR),
    ("spec.listeners[].tls.certificateRefs[].namespace", STR),
    ("spec.listeners[].allowedRoutes.namespaces.from", STR),
    ("spec.listeners[].allowedRoutes.kinds[].group", STR),
    ("spec.listeners[].allowedRoutes.kinds[].kind", STR),
];

/// Every Route kind (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute): parents, host names and
/// backends.
const ROUTE: &[(&str, FieldType)] = &[
    ("spec.parentRefs[].group", STR),
    ("spec.parentRefs[].kind", STR),
    ("spec.parentRefs[].namespace", STR),
    ("spec.parentRefs[].name", STR),
    ("spec.parentRefs[].sectionName", STR),
    ("spec.parentRefs[].port", Integer),
    ("spec.hostnames[]", STR),
    ("spec.rules[].name", STR),
    ("spec.rules[].filters[].type", STR),
    ("spec.rules[].backendRefs[].group", STR),
    ("spec.rules[].backendRefs[].kind", STR),
    ("spec.rules[].backendRefs[].namespace", STR),
    ("spec.rules[].backendRefs[].name", STR),
    ("spec.rules[].backendRefs[].port", Integer),
    ("spec.rules[].backendRefs[].weight", Integer),
];

/// An HTTPRoute's matches and timeouts.
const HTTP_ROUTE: &[(&str, FieldType)] = &[
    ("spec.rules[].matches[].path.type", STR),
    ("spec.rules[].matches[].path.value", STR),
    ("spec.rules[].matches[].method", STR),
    ("spec.rules[].matches[].headers[].type", STR),
    ("spec.rules[].matches[].headers[].name", STR),
    ("spec.rules[].matches[].headers[].value", STR),
    ("spec.rules[].matches[].queryParams[].type", STR),
    ("spec.rules[].matches[].queryParams[].name", STR),
    ("spec.rules[].matches[].queryParams[].value", STR),
    ("spec.rules[].timeouts.request", STR),
    ("spec.rules[].timeouts.backendRequest", STR),
];

/// A GRPCRoute's matches (its `method` is a mapping of service and method).
const GRPC_ROUTE: &[(&str, FieldType)] = &[
    ("spec.rules[].matches[].method.type", STR),
    ("spec.rules[].matches[].method.service", STR),
    ("spec.rules[].matches[].method.method", STR),
    ("spec.rules[].matches[].headers[].type", STR),
    ("spec.rules[].matches[].headers[].name", STR),
    ("spec.rules[].matches[].headers[].value", STR),
];

const REFERENCE_GRANT: &[(&str, FieldType)] = &[
    ("spec.from[].group", STR),
    ("spec.from[].kind", STR),
    ("spec.from[].namespace", STR),
    ("spec.to[].group", STR),
    ("spec.to[].kind", STR),
    ("spec.to[].name", STR),
];

const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The fields checked for objects of `api_version` and `kind`, beyond [`METADATA`].
fn fields_of(api_version: &str, kind: &str) -> &'static [&'static [(&'static str, FieldType)]] {
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    match (api_version, group, kind) {
        ("v1", _, "Service") => &[SERVICE],
        ("v1", _, "Secret") => &[SECRET],
        ("discovery.k8s.io/v1", _, "EndpointSlice") => &[ENDPOINT_SLICE],
        ("networking.k8s.io/v1", _, "Ingress") => &[INGRESS],
        ("networking.k8s.io/v1", _, "IngressClass") => &[INGRESS_CLASS],
        (_, GATEWAY_GROUP, "GatewayClass") => &[GATEWAY_CLASS],
        (_, GATEWAY_GROUP, "Gateway") => &[GATEWAY],
        (_, GATEWAY_GROUP, "HTTPRoute") => &[ROUTE, HTTP_ROUTE],
        (_, GATEWAY_GROUP, "GRPCRoute") => &[ROUTE, GRPC_ROUTE],
        (_, GATEWAY_GROUP, "TLSRoute" | "TCPRoute") => &[ROUTE],
        (_, GATEWAY_GROUP, "ReferenceGrant") => &[REFERENCE_GRANT],
        _ => &[],
    }
}

/// `Kind namespace/name`, or `Kind name` without a namespace.
fn object_name(object: &Value) -> String {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let kind = text("/kind").unwrap_or("object");
    let name = text("/metadata/name").unwrap_or("<unnamed>");
    match text("/metadata/namespace").filter(|n| !n.is_empty()) {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Checks the types of the fields `object`'s kind is known to have read (by its own
/// `apiVersion` and `kind`); every problem found, or none.
pub fn check(object: &Value) -> Result<(), SchemaError> {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let fields = fields_of(text("apiVersion"), text("kind"));
    let mut problems = Vec::new();
    for (path, field_type) in METADATA.iter().chain(fields.iter().copied().flatten()) {
        let segments: Vec<&str> = path.split('.').collect();
        walk(
            object,
            &segments,
            &mut FieldPath::default(),
            *field_type,
            &mut problems,
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SchemaError {
            object: object_name(object),
            problems,
        })
    }
}

/// Where [`walk`] is: the names and list positions followed so far, written out as
/// `spec.ports[0].port` only for a problem (most objects have none, and a path per field
/// and element was most of the check's cost at 10 000 objects).
#[derive(Default)]
struct FieldPath<'a>(Vec<PathStep<'a>>);

enum PathStep<'a> {
    Name(&'a str),
    Index(usize),
}

impl FieldPath<'_> {
    fn written(&self) -> String {
        let mut out = String::new();
        for step in &self.0 {
            match step {
                PathStep::Name(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                PathStep::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

/// Follows `segments` (`name` or `name[]` for each element of a list) from `value`, whose
/// path so far is `at`, and checks what is at the end.
fn walk<'a>(
    value: &Value,
    segments: &[&'a str],
    at: &mut FieldPath<'a>,
    field_type: FieldType,
    problems: &mut Vec<FieldProblem>,
) {
    let Some((segment, rest)) = segments.split_first() else {
        check_leaf(value, at, field_type, problems);
        return;
    };
    let Value::Object(fields) = value else {
        // The container itself is of the wrong type: told once, by the first rule under it.
        if !value.is_null() {
            push_once(problems, wrong(at.written(), "a mapping", value));
        }
        return;
    };
    let (name, each) = match segment.strip_suffix("[]") {
        Some(name) => (name, true),
        None => (*segment, false),
    };
    let Some(child) = fields.get(name).filter(|child| !child.is_null()) else {
        return;
    };
    at.0.push(PathStep::Name(name));
    if !each {
        walk(child, rest, at, field_type, problems);
    } else if let Value::Array(items) = child {
        for (i, item) in items.iter().enumerate() {
            at.0.push(PathStep::Index(i));
            walk(item, rest, at, field_type, problems);
            at.0.pop();
        }
    } else {
        push_once(problems, wrong(at.written(), "a list", child));
    }
    at.0.pop();
}

fn check_leaf(
    value: &Value,
    at: &FieldPath<'_>,
    field_type: FieldType,
    problems: &mut Vec<FieldProblem>,
) {
    if value.is_null() {
        return;
    }
    let fits = match field_type {
        FieldType::String => value.is_string(),
        FieldType::Integer => is_integer(value),
        FieldType::Boolean => value.is_boolean(),
        FieldType::IntegerOrString => value.is_string() || is_integer(value),
        FieldType::StringMap => {
            let Value::Object(entries) = value else {
                push_once(problems, wrong(at.written(), field_type.expected(), value));
                return;
            };
            for (key, entry) in entries {
                if !entry.is_string() && !entry.is_null() {
                    let field = format!("{}[{}]", at.written(), quoted(key));
                    let mut problem = wrong(field, FieldType::String.expected(), entry);
                    problem.hint = hint(FieldType::String, entry);
                    push_once(problems, problem);
                }
            }
            return;
        }
    };
    if !fits {
        let mut problem = wrong(at.written(), field_type.expected(), value);
        problem.hint = hint(field_type, value);
        push_once(problems, problem);
    }
}

/// A whole number; `80.0` counts (stores keep numbers as whole numbers).
fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn push_once(problems: &mut Vec<FieldProblem>, problem: FieldProblem) {
    if !problems.iter().any(|p| p.field == problem.field) {
        problems.push(problem);
    }
}

/// `"text"`, JSON-quoted, cut short past 40 characters.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 40;
    if text.chars().count() > SHOWN {
        let head: String = text.chars().take(SHOWN).collect();
        format!("{}…", serde_json::Value::String(head))
    } else {
        serde_json::Value::String(text.to_string()).to_string()
    }
}

/// A problem at `field`: `expected` is what belongs there, `found` what is there.
fn wrong(field: String, expected: &'static str, found: &Value) -> FieldProblem {
    let described = match found {
        Value::String(s) => format!("the string {}", quoted(s)),
        Value::Number(n) => format!("the number {n}"),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a mapping".to_string(),
        Value::Null => "null".to_string(),
    };
    FieldProblem {
        field,
        expected,
        found: described,
        hint: None,
    }
}

/// How to write `found` as a `field_type`, when that is plain: the same value, with or
/// without quotes.
fn hint(field_type: FieldType, found: &Value) -> Option<String> {
    match (field_type, found) {
        (FieldType::Integer, Value::String(s)) if s.trim().parse::<i64>().is_ok() => {
            Some(format!("write {} without quotes", s.trim()))
        }
        (FieldType::Boolean, Value::String(s)) if matches!(s.as_str(), "true" | "false") => {
            Some(format!("write {s} without quotes"))
        }
        (FieldType::String, Value::Number(_) | Value::Bool(_)) => {
            Some(format!("quote it: \"{found}\""))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn slice(ports: Value) -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "app-a-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "app-a"}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
        })
    }

    #[test]
    fn a_string_port_in_an_endpoint_slice_names_the_object_the_field_and_how_to_write_it() {
        let error = check(&slice(json!([{"name": "http", "port": "19001"}]))).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "EndpointSlice default/app-a-1: ports[0].port: expected an integer, got the string \"19001\" (write 19001 without quotes)"
        );
    }

    #[test]
    fn well_typed_objects_of_every_known_kind_pass() {
        check(&slice(json!([{"name": "http", "port": 19001}]))).expect("an integer port");
        check(&slice(json!([{"name": "http", "port": 19001.0}]))).expect("a whole float");
        check(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"a": "1"}},
            "spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}],
                     "selector": {"app": "web"}},
        }))
        .expect("a Service");
        check(&json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"rules": [{"host": "a.example", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
        }))
        .expect("an Ingress");
    }

    #[test]
    fn fields_absent_or_null_are_not_checked_and_unknown_kinds_only_have_their_metadata_checked() {
        check(&slice(json!(null))).expect("no ports");
        check(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                      "data": {"port": 1}}),
        )
        .expect("a ConfigMap's data is not read");
        let error = check(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c", "labels": {"on": true}}}))
        .expect_err("a label must be a string");
        assert_eq!(
            error.to_string(),
            "ConfigMap c: metadata.labels[\"on\"]: expected a string, got the boolean true (quote it: \"true\")"
        );
    }

    #[test]
    fn a_container_of_the_wrong_type_is_told_once() {
        let error = check(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"ports": {"port": 80}},
        }))
        .expect_err("ports must be a list");
        assert_eq!(
            error.to_string(),
            "Service default/web: spec.ports: expected a list, got a mapping"
        );
    }

    #[test]
    fn many_problems_are_listed_three_at_a_time_and_the_rest_counted() {
        let ports: Vec<Value> = (0..5).map(|i| json!({"port": format!("{i}")})).collect();
        let error = check(&slice(Value::Array(ports))).expect_err("refused");
        assert_eq!(error.problems.len(), 5);
        assert!(error.to_string().ends_with("(and 2 more)"), "{error}");
    }

    #[test]
    fn a_grpc_routes_method_match_is_a_mapping_of_service_and_method() {
        let route = |method: Value| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
                "metadata": {"name": "shop", "namespace": "default"},
                "spec": {"rules": [{"matches": [{"method": method}]}]},
            })
        };
        check(&route(json!({"service": "shop.Cart", "method": "Add"}))).expect("a mapping");
        let error =
            check(&route(json!({"service": "shop.Cart", "method": 7}))).expect_err("a number");
        assert!(
            error.to_string().contains(
                "spec.rules[0].matches[0].method.method: expected a string, got the number 7"
            ),
            "{error}"
        );
    }

    #[test]
    fn gateway_api_kinds_are_checked_in_every_version() {
        for version in ["v1", "v1beta1"] {
            let error = check(&json!({
                "apiVersion": format!("gateway.networking.k8s.io/{version}"), "kind": "HTTPRoute",
                "metadata": {"name": "r", "namespace": "default"},
                "spec": {"rules": [{"backendRefs": [{"name": "web", "port": "80"}]}]},
            }))
            .expect_err("a string port");
            assert!(
                error
                    .to_string()
                    .contains("spec.rules[0].backendRefs[0].port: expected an integer"),
                "{error}"
            );
        }
    }
}
