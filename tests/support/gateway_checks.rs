//! The Gateway API conformance corpus (`../shared/corpus/kubernetes/gateway-conformance`)
//! as the runners read it, and its status checks as pure functions: shared by
//! `processes/gateway_conformance.rs` (statuses from `haptor local`'s
//! `/debug/vars/status`) and `api_server/gateway_conformance_status.rs` (statuses `haptor
//! run` wrote to the API server). A check reads a list of statuses shaped as
//! `/debug/vars/status` is, `[{apiVersion, kind, namespace, name, status}]`, each entry
//! also carrying the object's `metadata.generation` as `generation` (the observedGeneration
//! checks compare with it). What the corpus README ("Expectation files") defines is checked;
//! a Gateway's status address only when [`CheckContext::require_address`] says so
//! (`haptor local` writes none). Also here: the cases ([`load_cases`]), the features the
//! Gateway library supports ([`SUPPORTED_FEATURES`]), the manifests with every Gateway
//! given a loopback address of its own ([`read_manifests`]), the TLS Secret the upstream
//! suite makes at run time ([`tls_secret`]) and an EndpointSlice for a Service
//! ([`endpoint_slice`]). Included with `#[path = "../support/gateway_checks.rs"] mod
//! gateway_checks;`.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The features the Gateway library supports (upstream feature names). A case needing any
/// other is skipped, naming the missing ones.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "Gateway",
    "HTTPRoute",
    "ReferenceGrant",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteMethodMatching",
    "HTTPRouteResponseHeaderModification",
    "HTTPRoutePortRedirect",
    "HTTPRouteSchemeRedirect",
    "HTTPRoutePathRedirect",
    "HTTPRouteHostRewrite",
    "HTTPRoutePathRewrite",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteRequestTimeout",
    "HTTPRouteBackendTimeout",
    "HTTPRouteParentRefPort",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteNamedRouteRule",
    "GatewayPort8080",
    "HTTPRouteBackendRequestHeaderModification",
    "TLSRoute",
    "HTTPRouteBackendURLRewrite",
    "HTTPRouteBackendRequestRedirect",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "HTTPRouteCORS",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
];

/// The GatewayClass the manifests' `{GATEWAY_CLASS_NAME}` becomes.
pub const GATEWAY_CLASS: &str = "haptor";
/// The controller of the Gateway library's GatewayClass.
pub const CONTROLLER_NAME: &str = "haptor.dev/gateway-controller";

pub fn corpus() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/kubernetes/gateway-conformance"
    ))
    .to_path_buf()
}

/// One `<name>.expect.yaml`.
pub struct Case {
    pub stem: String,
    pub test: String,
    pub features: Vec<String>,
    pub provisional: bool,
    pub expect: Value,
}

impl Case {
    /// The features the case needs that [`SUPPORTED_FEATURES`] lacks.
    pub fn missing_features(&self) -> Vec<&str> {
        self.features
            .iter()
            .map(String::as_str)
            .filter(|f| !SUPPORTED_FEATURES.contains(f))
            .collect()
    }

    /// The case's `status_checks`, in order.
    pub fn status_checks(&self) -> Vec<Value> {
        self.expect["status_checks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Every case of the corpus, in file name order.
pub fn load_cases() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus())
        .expect("the Gateway API conformance corpus (../shared/corpus/kubernetes)")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".expect.yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read an expectation file");
            let expect: Value = serde_yaml_ng::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let stem = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".expect.yaml"))
                .expect("a name")
                .to_string();
            Case {
                test: str_of(&expect, "test").unwrap_or(&stem).to_string(),
                features: strings(&expect["features"]),
                provisional: expect["provisional"].as_bool().unwrap_or(false),
                stem,
                expect,
            }
        })
        .collect()
}

/// The cases `HAPTOR_CONFORMANCE_CASES=a,b` (file stems or test names) selects, when set.
pub fn selected_cases() -> Option<Vec<String>> {
    std::env::var("HAPTOR_CONFORMANCE_CASES")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|s| s.trim().to_string()).collect())
}

pub fn str_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A value as text (numbers and booleans too, as YAML leaves `'True'` a string but `8080` a
/// number).
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `namespace/name` split.
pub fn nn(reference: &str) -> (String, String) {
    let (ns, name) = reference.split_once('/').unwrap_or(("default", reference));
    (ns.to_string(), name.to_string())
}

// ---------------------------------------------------------------------------------------
// The manifests
// ---------------------------------------------------------------------------------------

/// The objects of corpus file `file`, the class placeholder filled in.
pub fn read_manifests(file: &str) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(corpus().join(file)).map_err(|e| format!("{file}: {e}"))?;
    let text = text.replace("{GATEWAY_CLASS_NAME}", GATEWAY_CLASS);
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut value: Value =
            serde::Deserialize::deserialize(doc).map_err(|e| format!("{file}: {e}"))?;
        if value.is_object() {
            // Upstream, every Gateway gets an address of its own; here it asks for one on
            // loopback (spec.addresses), which the library binds its listeners to.
            if value["kind"] == "Gateway" && value["spec"]["addresses"].is_null() {
                let namespace = str_of(&value["metadata"], "namespace").unwrap_or("default");
                let name = str_of(&value["metadata"], "name").unwrap_or_default();
                value["spec"]["addresses"] =
                    json!([{"type": "IPAddress", "value": gateway_ip(namespace, name)}]);
            }
            docs.push(value);
        }
    }
    Ok(docs)
}

/// The loopback address the runners give Gateway `namespace/name` (127.X.Y.1, from a
/// stable hash of the name, so the status checks and the requests agree without asking).
pub fn gateway_ip(namespace: &str, name: &str) -> String {
    let hash = format!("{namespace}/{name}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("127.{}.{}.1", 1 + hash % 250, 1 + (hash / 250) % 250)
}

/// The self-signed certificate the upstream suite creates at run time, as its Secret.
pub fn tls_secret() -> Value {
    use base64::Engine;
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params =
        rcgen::CertificateParams::new(vec!["*".into(), "*.org".into(), "*.wildcard.org".into()])
            .expect("certificate params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "*");
    let cert = params.self_signed(&key).expect("a self-signed certificate");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "tls-validity-checks-certificate", "namespace": "gateway-conformance-infra"},
        "data": {"tls.crt": b64(&cert.pem()), "tls.key": b64(&key.serialize_pem())},
    })
}

/// An EndpointSlice `SERVICE-echo` for a Service with a selector: one ready endpoint at
/// `address` whose ports (named as the Service's) are all `port`.
pub fn endpoint_slice(service: &Value, address: &str, port: u16) -> Value {
    let name = str_of(&service["metadata"], "name").unwrap_or_default();
    let namespace = str_of(&service["metadata"], "namespace").unwrap_or("default");
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let mut entry = json!({
                        "name": str_of(p, "name").unwrap_or(""),
                        "port": port,
                        "protocol": str_of(p, "protocol").unwrap_or("TCP"),
                    });
                    if let Some(app) = str_of(p, "appProtocol") {
                        entry["appProtocol"] = json!(app);
                    }
                    entry
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-echo"), "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address],
                       "conditions": {"ready": true, "serving": true, "terminating": false}}],
        "ports": ports,
    })
}

// ---------------------------------------------------------------------------------------
// Status checks
// ---------------------------------------------------------------------------------------

/// What a run of one case's status checks carries from check to check, and how strict the
/// checks are.
#[derive(Debug, Default, Clone)]
pub struct CheckContext {
    /// `gateway_programmed_and_routes_accepted` also wants a status address (as upstream);
    /// `haptor local` writes none.
    pub require_address: bool,
    /// The generation of each Route (`namespace/name`) before its `mutate_route`.
    pub original_generations: HashMap<String, i64>,
}

/// The entry of `kind` `namespace/name` of a status list (GatewayClasses have no
/// namespace).
pub fn entry_of<'a>(
    list: &'a [Value],
    kind: &str,
    namespace: &str,
    name: &str,
) -> Option<&'a Value> {
    list.iter().find(|o| {
        o["kind"] == kind
            && o["name"] == name
            && (kind == "GatewayClass" || o["namespace"].as_str().unwrap_or("") == namespace)
    })
}

/// The status of `kind` `namespace/name` in a status list.
pub fn status_of<'a>(
    list: &'a [Value],
    kind: &str,
    namespace: &str,
    name: &str,
) -> Option<&'a Value> {
    entry_of(list, kind, namespace, name).map(|o| &o["status"])
}

pub fn condition<'a>(conditions: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == kind)
}

/// Whether `conditions` has `kind` at `status` (and `reason`, when given).
pub fn has_condition(conditions: &Value, kind: &str, status: &str, reason: Option<&str>) -> bool {
    condition(conditions, kind)
        .is_some_and(|c| c["status"] == status && reason.is_none_or(|r| c["reason"] == r))
}

/// The route's parent statuses for Gateway `gateway` (`namespace/name`).
pub fn parents_for<'a>(route_status: &'a Value, route_ns: &str, gateway: &str) -> Vec<&'a Value> {
    let (ns, name) = nn(gateway);
    route_status["parents"]
        .as_array()
        .map(|parents| {
            parents
                .iter()
                .filter(|p| {
                    let r = &p["parentRef"];
                    r["name"] == name.as_str()
                        && r["namespace"].as_str().unwrap_or(route_ns) == ns
                        && r["kind"].as_str().unwrap_or("Gateway") == "Gateway"
                        && r["group"].as_str().unwrap_or("gateway.networking.k8s.io")
                            == "gateway.networking.k8s.io"
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The status of HTTPRoute `route` (`namespace/name`) and its namespace.
fn route_status<'a>(list: &'a [Value], route: &str) -> Result<(&'a Value, String), String> {
    let (ns, name) = nn(route);
    status_of(list, "HTTPRoute", &ns, &name)
        .map(|s| (s, ns))
        .ok_or(format!("no status for HTTPRoute {route}"))
}

fn gateway_status<'a>(list: &'a [Value], gateway: &str) -> Result<&'a Value, String> {
    let (ns, name) = nn(gateway);
    status_of(list, "Gateway", &ns, &name).ok_or(format!("no status for Gateway {gateway}"))
}

/// One status check (any but `mutate_route`, which changes the object: see [`mutate`])
/// against one read of the statuses; Err says what differs.
pub fn status_check(check: &Value, list: &[Value], context: &CheckContext) -> Result<(), String> {
    match str_of(check, "check").unwrap_or_default() {
        "gateway_programmed_and_routes_accepted" => {
            gateway_programmed_and_routes_accepted(check, list, context.require_address)
        }
        "route_condition" => route_condition(check, list),
        "route_parents" => route_parents(check, list),
        "route_has_no_accepted_parents" => route_has_no_accepted_parents(check, list),
        "gateway_has_zero_attached_routes" => gateway_has_zero_attached_routes(check, list),
        "gateway_listener_status" => gateway_listener_status(check, list),
        "route_conditions_at_latest_generation" => route_conditions_at_generation(check, list),
        "route_generation_changed" => {
            let route = str_of(check, "route").unwrap_or_default();
            let (ns, name) = nn(route);
            let generation = generation_of(list, "HTTPRoute", &ns, &name)?;
            let before = context
                .original_generations
                .get(route)
                .copied()
                .ok_or(format!("HTTPRoute {route} was not mutated before"))?;
            if before == generation {
                return Err(format!("HTTPRoute {route} generation did not change"));
            }
            route_conditions_at_generation(check, list)
        }
        "mutate_route" => Err("mutate_route changes the Route: the runner does it".into()),
        other => Err(format!("unknown status check {other}")),
    }
}

/// The `generation` of the entry `kind` `namespace/name`.
pub fn generation_of(
    list: &[Value],
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<i64, String> {
    entry_of(list, kind, namespace, name)
        .ok_or(format!("no status for {kind} {namespace}/{name}"))?["generation"]
        .as_i64()
        .ok_or(format!("no generation known for {kind} {namespace}/{name}"))
}

fn gateway_programmed_and_routes_accepted(
    check: &Value,
    list: &[Value],
    require_address: bool,
) -> Result<(), String> {
    let gateway = str_of(check, "gateway").unwrap_or_default();
    let status = gateway_status(list, gateway)?;
    if require_address
        && !status["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["value"].as_str().is_some_and(|v| !v.is_empty()))
    {
        return Err(format!("Gateway {gateway} has no status address: {status}"));
    }
    for wanted in ["Accepted", "Programmed"] {
        if !has_condition(&status["conditions"], wanted, "True", None) {
            return Err(format!("Gateway {gateway} is not {wanted}=True: {status}"));
        }
    }
    let listeners = strings(&check["listeners"]);
    let all: Vec<&Value> = status["listeners"]
        .as_array()
        .map(|l| l.iter().collect())
        .unwrap_or_default();
    let chosen: Vec<&Value> = if listeners.is_empty() {
        all.clone()
    } else {
        all.iter()
            .copied()
            .filter(|l| listeners.iter().any(|n| l["name"] == n.as_str()))
            .collect()
    };
    if chosen.len() < listeners.len().max(1) {
        return Err(format!(
            "Gateway {gateway} has no status for listener(s) {listeners:?}: {status}"
        ));
    }
    for listener in chosen {
        for wanted in ["Accepted", "ResolvedRefs", "Programmed"] {
            if !has_condition(&listener["conditions"], wanted, "True", None) {
                return Err(format!(
                    "Gateway {gateway} listener {} is not {wanted}=True: {listener}",
                    listener["name"]
                ));
            }
        }
    }
    for route in strings(&check["routes"]) {
        let (status, route_ns) = route_status(list, &route)?;
        let parents = parents_for(status, &route_ns, gateway);
        let accepted = |p: &&Value| {
            has_condition(&p["conditions"], "Accepted", "True", Some("Accepted"))
                && p["controllerName"] == CONTROLLER_NAME
        };
        if listeners.is_empty() {
            if !parents.iter().any(accepted) {
                return Err(format!(
                    "HTTPRoute {route} has no parent {gateway} Accepted=True (reason Accepted, controller {CONTROLLER_NAME}): {status}"
                ));
            }
        } else {
            // A parentRef naming no section (or attaching by port) may stand for each
            // listener.
            for listener in &listeners {
                if !parents
                    .iter()
                    .filter(|p| {
                        let section = &p["parentRef"]["sectionName"];
                        section.is_null() || *section == listener.as_str()
                    })
                    .any(accepted)
                {
                    return Err(format!(
                        "HTTPRoute {route} has no parent {gateway} section {listener} Accepted=True: {status}"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn route_condition(check: &Value, list: &[Value]) -> Result<(), String> {
    let route = str_of(check, "route").unwrap_or_default();
    let parent = str_of(check, "parent").unwrap_or_default();
    let (wanted, want_status) = (
        str_of(check, "type").unwrap_or_default(),
        text(&check["status"]).unwrap_or_default(),
    );
    let reason = str_of(check, "reason");
    let (status, route_ns) = route_status(list, route)?;
    let parents = parents_for(status, &route_ns, parent);
    if parents
        .iter()
        .any(|p| has_condition(&p["conditions"], wanted, &want_status, reason))
    {
        Ok(())
    } else {
        Err(format!(
            "HTTPRoute {route} parent {parent}: wanted {wanted}={want_status}{}; status is {status}",
            reason.map(|r| format!(" reason {r}")).unwrap_or_default()
        ))
    }
}

fn route_parents(check: &Value, list: &[Value]) -> Result<(), String> {
    let route = str_of(check, "route").unwrap_or_default();
    let (status, route_ns) = route_status(list, route)?;
    let wanted = check["parents"].as_array().cloned().unwrap_or_default();
    let actual = status["parents"].as_array().map(Vec::len).unwrap_or(0);
    if actual != wanted.len() {
        return Err(format!(
            "HTTPRoute {route} has {actual} parents, wanted {}: {status}",
            wanted.len()
        ));
    }
    for parent in &wanted {
        let gateway = str_of(parent, "parent").unwrap_or_default();
        let found = parents_for(status, &route_ns, gateway);
        let ok = found.iter().any(|p| {
            parent["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|c| {
                    has_condition(
                        &p["conditions"],
                        str_of(c, "type").unwrap_or_default(),
                        &text(&c["status"]).unwrap_or_default(),
                        str_of(c, "reason"),
                    )
                })
                && p["controllerName"] == CONTROLLER_NAME
        });
        if !ok {
            return Err(format!(
                "HTTPRoute {route} parent {gateway}: wanted {} ; status is {status}",
                parent["conditions"]
            ));
        }
    }
    Ok(())
}

fn route_has_no_accepted_parents(check: &Value, list: &[Value]) -> Result<(), String> {
    let route = str_of(check, "route").unwrap_or_default();
    let (ns, name) = nn(route);
    let Some(status) = status_of(list, "HTTPRoute", &ns, &name) else {
        return Ok(());
    };
    let parents = status["parents"].as_array().cloned().unwrap_or_default();
    match parents.as_slice() {
        [] => Ok(()),
        [one] if !has_condition(&one["conditions"], "Accepted", "True", None) => Ok(()),
        _ => Err(format!(
            "HTTPRoute {route} should have no parent or one not Accepted: {status}"
        )),
    }
}

fn gateway_has_zero_attached_routes(check: &Value, list: &[Value]) -> Result<(), String> {
    let gateway = str_of(check, "gateway").unwrap_or_default();
    let status = gateway_status(list, gateway)?;
    let listeners = status["listeners"].as_array().cloned().unwrap_or_default();
    if listeners.iter().all(|l| l["attachedRoutes"] == 0) {
        Ok(())
    } else {
        Err(format!(
            "Gateway {gateway} should have no attached routes: {status}"
        ))
    }
}

fn gateway_listener_status(check: &Value, list: &[Value]) -> Result<(), String> {
    let gateway = str_of(check, "gateway").unwrap_or_default();
    let status = gateway_status(list, gateway)?;
    for wanted in check["listeners"].as_array().into_iter().flatten() {
        let name = str_of(wanted, "name").unwrap_or_default();
        let actual = status["listeners"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == name))
            .ok_or(format!(
                "Gateway {gateway} has no listener {name}: {status}"
            ))?;
        let mut kinds: BTreeSet<String> = actual["supportedKinds"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                format!(
                    "{}/{}",
                    k["group"].as_str().unwrap_or("gateway.networking.k8s.io"),
                    k["kind"].as_str().unwrap_or_default()
                )
            })
            .collect();
        let wanted_kinds: BTreeSet<String> =
            strings(&wanted["supported_kinds"]).into_iter().collect();
        // As upstream's listener comparison: an HTTP listener of an implementation that
        // serves GRPCRoute lists it too.
        if !wanted_kinds.contains("gateway.networking.k8s.io/GRPCRoute") {
            kinds.remove("gateway.networking.k8s.io/GRPCRoute");
        }
        if kinds != wanted_kinds {
            return Err(format!(
                "Gateway {gateway} listener {name}: supportedKinds {kinds:?}, wanted {wanted_kinds:?}"
            ));
        }
        for c in wanted["conditions"].as_array().into_iter().flatten() {
            let (t, s) = (
                str_of(c, "type").unwrap_or_default(),
                text(&c["status"]).unwrap_or_default(),
            );
            if !has_condition(&actual["conditions"], t, &s, str_of(c, "reason")) {
                return Err(format!(
                    "Gateway {gateway} listener {name}: wanted {t}={s}: {actual}"
                ));
            }
        }
        if let Some(n) = wanted["attached_routes"].as_i64()
            && actual["attachedRoutes"].as_i64() != Some(n)
        {
            return Err(format!(
                "Gateway {gateway} listener {name}: attachedRoutes {}, wanted {n}",
                actual["attachedRoutes"]
            ));
        }
    }
    Ok(())
}

/// Every condition of every parent of the route observed the route's generation.
fn route_conditions_at_generation(check: &Value, list: &[Value]) -> Result<(), String> {
    let route = str_of(check, "route").unwrap_or_default();
    let (ns, name) = nn(route);
    let generation = generation_of(list, "HTTPRoute", &ns, &name)?;
    let (status, _) = route_status(list, route)?;
    let parents = status["parents"].as_array().cloned().unwrap_or_default();
    if parents.is_empty() {
        return Err(format!("HTTPRoute {route} has no parents: {status}"));
    }
    for parent in &parents {
        for c in parent["conditions"].as_array().into_iter().flatten() {
            if c["observedGeneration"].as_i64() != Some(generation) {
                return Err(format!(
                    "HTTPRoute {route}: condition {} has observedGeneration {}, the route is at generation {generation}",
                    c["type"], c["observedGeneration"]
                ));
            }
        }
    }
    Ok(())
}

/// What a `mutate_route` check does to the Route's manifest: its `patch`
/// (`path.to[0].field = value`).
pub fn mutate(object: &mut Value, check: &Value) -> Result<(), String> {
    patch(object, str_of(check, "patch").unwrap_or_default())
}

/// Applies `path.to[0].field = value` to `object`.
pub fn patch(object: &mut Value, expression: &str) -> Result<(), String> {
    let (path, value) = expression
        .split_once('=')
        .ok_or(format!("a patch without `=`: {expression}"))?;
    let mut at = object;
    for segment in path.trim().split('.') {
        let (key, indexes) = match segment.find('[') {
            Some(i) => (&segment[..i], &segment[i..]),
            None => (segment, ""),
        };
        at = at.get_mut(key).ok_or(format!("{expression}: no {key}"))?;
        for index in indexes.split(['[', ']']).filter(|s| !s.is_empty()) {
            let index: usize = index.parse().map_err(|_| format!("{expression}: index"))?;
            at = at
                .get_mut(index)
                .ok_or(format!("{expression}: no [{index}]"))?;
        }
    }
    *at = Value::String(value.trim().to_string());
    Ok(())
}

/// A one-line summary of `text`, cut at `max` bytes.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// How one corpus case ended, in either runner.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

impl Outcome {
    /// The word the report and the table print.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Skip(_) => "skip",
            Outcome::Fail(_) => "fail",
        }
    }

    /// Why the case was skipped or failed; empty for a pass.
    pub fn reason(&self) -> &str {
        match self {
            Outcome::Pass => "",
            Outcome::Skip(reason) | Outcome::Fail(reason) => reason,
        }
    }
}
