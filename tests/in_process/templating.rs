//! Renders a small but realistic HAProxy configuration from Ingress, Service and
//! EndpointSlice objects held in resource stores: a host/path map, one backend per Ingress
//! path whose servers come from the ready endpoints of the Service's EndpointSlices.
//! Assertions are properties computed from the fixtures, not copies of the template output.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use haptor::pure::rendered::{AuxKind, PathResolver, RenderedConfig};
use haptor::pure::store::{ResourceStore, Stores};
use haptor::pure::template::{RenderContext, TemplateSet, TemplateSetInput};
use serde_json::{Value, json};

const HAPROXY_CFG: &str = r#"global
  default-path origin {{paths.base_dir}}
  maxconn {{dataplane.maxconn}}

defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s

frontend http
  bind :80
  http-request set-var(txn.backend) base,map_beg({{path_for "host-paths.map" "map"}})
  use_backend %[var(txn.backend)] if { var(txn.backend) -m found }
  default_backend default_404

{{render_glob "backends-*"}}
backend default_404
  http-request return status 404
"#;

const HOST_PATHS_MAP: &str = r#"{{#resources "ingresses" as |ing|}}
{{#each ing.spec.rules as |rule|}}
{{#each rule.http.paths as |p|}}
{{rule.host}}{{p.path}} {{> backend-name}}
{{/each}}
{{/each}}
{{/resources}}
"#;

const BACKEND_NAME: &str = r#"{{sanitize (concat "ing_" ing.metadata.namespace "_" ing.metadata.name "_" p.backend.service.name "_" p.backend.service.port.number)}}"#;

/// One backend per Ingress path. The Ingress names a Service port by number; the Service
/// maps it to a port name; EndpointSlice ports carry that name with the target port.
const BACKENDS: &str = r#"{{#resources "ingresses" as |ing|}}
{{#each ing.spec.rules as |rule|}}
{{#each rule.http.paths as |p|}}
backend {{> backend-name}}
  balance roundrobin
{{#with (get_single "services" ing.metadata.namespace p.backend.service.name) as |svc|}}
{{#each svc.spec.ports as |sp|}}
{{#if (eq sp.port p.backend.service.port.number)}}
{{#fetch "endpointslices" ing.metadata.namespace svc.metadata.name as |slice|}}
{{#each slice.ports as |ep|}}
{{#if (eq (default ep.name "") (default sp.name ""))}}
{{#each slice.endpoints as |e|}}
{{#unless (eq (dig e "conditions" "ready") false)}}
  server {{sanitize (concat slice.metadata.name "-" @index)}} {{first e.addresses}}:{{ep.port}} check
{{/unless}}
{{/each}}
{{/if}}
{{/each}}
{{/fetch}}
{{/if}}
{{/each}}
{{else}}
  http-request return status 503
{{/with}}
{{/each}}
{{/each}}
{{/resources}}
"#;

fn ingress(namespace: &str, name: &str, host: &str, path: &str, service: &str, port: u16) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "ingressClassName": "haproxy",
            "rules": [{
                "host": host,
                "http": {"paths": [{
                    "path": path,
                    "pathType": "Prefix",
                    "backend": {"service": {"name": service, "port": {"number": port}}}
                }]}
            }]
        }
    })
}

fn service(namespace: &str, name: &str, port: u16, port_name: &str, target: u16) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"ports": [{"name": port_name, "port": port, "targetPort": target, "protocol": "TCP"}]}
    })
}

/// `endpoints` are `(address, ready)`; ports come as floats, as a YAML decoder might hand
/// them over.
fn slice(
    namespace: &str,
    name: &str,
    service: &str,
    port_name: &str,
    port: f64,
    endpoints: &[(&str, bool)],
) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
        "endpoints": endpoints
            .iter()
            .map(|(address, ready)| json!({"addresses": [address], "conditions": {"ready": ready}}))
            .collect::<Vec<_>>(),
    })
}

fn fixtures() -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let ingresses = vec![
        ingress("shop", "storefront", "example.com", "/", "web", 80),
        ingress("shop", "api", "api.example.com", "/v1", "api", 8080),
        ingress("blog", "blog", "blog.example.org", "/", "ghost", 80),
    ];
    let services = vec![
        service("shop", "web", 80, "http", 8000),
        service("shop", "api", 8080, "grpc-web", 9000),
        service("blog", "ghost", 80, "http", 2368),
        // A Service in another namespace with the same name must not leak endpoints.
        service("other", "web", 80, "http", 8000),
    ];
    let slices = vec![
        slice(
            "shop",
            "web-a1b2c",
            "web",
            "http",
            8000.0,
            &[("10.0.1.1", true), ("10.0.1.2", false)],
        ),
        slice(
            "shop",
            "web-d3e4f",
            "web",
            "http",
            8000.0,
            &[("10.0.1.3", true)],
        ),
        slice(
            "shop",
            "api-x9y8z",
            "api",
            "grpc-web",
            9000.0,
            &[("10.0.2.1", true)],
        ),
        slice(
            "other",
            "web-zzzzz",
            "web",
            "http",
            8000.0,
            &[("10.9.9.9", true)],
        ),
    ];
    (ingresses, services, slices)
}

fn stores() -> Stores {
    let mut stores = Stores::new();
    let namespaced = || {
        vec![
            "metadata.namespace".to_string(),
            "metadata.name".to_string(),
        ]
    };
    let ignore = vec!["metadata.managedFields".to_string()];
    stores.insert(
        ResourceStore::new("ingresses", namespaced(), ignore.clone()).expect("ingress store"),
    );
    stores.insert(
        ResourceStore::new("services", namespaced(), ignore.clone()).expect("service store"),
    );
    stores.insert(
        ResourceStore::new(
            "endpointslices",
            vec![
                "metadata.namespace".to_string(),
                r"metadata.labels.kubernetes\.io/service-name".to_string(),
            ],
            ignore,
        )
        .expect("endpointslice store"),
    );
    stores
}

fn load(stores: &Stores, reverse: bool) {
    let (ingresses, services, slices) = fixtures();
    for (name, mut objects) in [
        ("ingresses", ingresses),
        ("services", services),
        ("endpointslices", slices),
    ] {
        if reverse {
            objects.reverse();
        }
        let store = stores.get(name).expect("every fixture kind has a store");
        for object in objects {
            store.apply(object).expect("fixture objects apply");
        }
    }
}

fn template_set() -> TemplateSet {
    let mut input = TemplateSetInput {
        haproxy_config: HAPROXY_CFG.to_string(),
        ..Default::default()
    };
    input
        .maps
        .insert("host-paths.map".into(), HOST_PATHS_MAP.into());
    input
        .snippets
        .insert("backend-name".into(), BACKEND_NAME.into());
    input
        .snippets
        .insert("backends-100-ingress".into(), BACKENDS.into());
    TemplateSet::compile(input).unwrap_or_else(|err| panic!("{err}"))
}

fn render(stores: &Stores) -> RenderedConfig {
    let context = RenderContext::new(stores.snapshot(), PathResolver::default())
        .with_value("dataplane", json!({"maxconn": 2000}));
    template_set()
        .render(&context)
        .unwrap_or_else(|err| panic!("{err}"))
}

/// `backend name` → its lines, from the rendered text.
fn backends(cfg: &str) -> BTreeMap<String, Vec<String>> {
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in cfg.lines() {
        if !line.starts_with(' ') && !line.trim().is_empty() {
            current = line
                .strip_prefix("backend ")
                .map(|name| name.trim().to_string());
            if let Some(name) = &current {
                assert!(
                    sections.insert(name.clone(), Vec::new()).is_none(),
                    "backend {name} appears twice"
                );
            }
        } else if let Some(lines) = current.as_ref().and_then(|name| sections.get_mut(name))
            && !line.trim().is_empty()
        {
            lines.push(line.trim().to_string());
        }
    }
    sections
}

fn map_entries(rendered: &RenderedConfig) -> BTreeMap<String, String> {
    let map = rendered
        .aux(AuxKind::Map, "host-paths.map")
        .expect("the map is rendered");
    map.content
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            let key = words.next().unwrap_or_default().to_string();
            let value = words.next().unwrap_or_default().to_string();
            assert!(words.next().is_none(), "map line with extra words: {l:?}");
            (key, value)
        })
        .collect()
}

/// The `address:port` of every ready endpoint of `service`, from the fixtures.
fn ready_endpoints(namespace: &str, service: &str) -> BTreeSet<String> {
    let (_, _, slices) = fixtures();
    slices
        .iter()
        .filter(|s| {
            s["metadata"]["namespace"] == namespace
                && s["metadata"]["labels"]["kubernetes.io/service-name"] == service
        })
        .flat_map(|s| {
            let port = s["ports"][0]["port"]
                .as_f64()
                .expect("a fixture slice has a port") as u64;
            s["endpoints"]
                .as_array()
                .expect("a fixture slice has endpoints")
                .iter()
                .filter(|e| e["conditions"]["ready"] != false)
                .map(move |e| {
                    let address = e["addresses"][0]
                        .as_str()
                        .expect("an endpoint has an address");
                    format!("{address}:{port}")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn servers(lines: &[String]) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("server "))
        .map(|l| l.split_whitespace().nth(1).unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_map_sends_each_ingress_host_to_a_backend_named_after_the_ingress() {
    let stores = stores();
    load(&stores, false);
    let rendered = render(&stores);
    let entries = map_entries(&rendered);
    let sections = backends(&rendered.haproxy_cfg);

    let (ingresses, _, _) = fixtures();
    assert_eq!(
        entries.len(),
        ingresses.len(),
        "one map entry per ingress path: {entries:?}"
    );
    for ing in &ingresses {
        let rule = &ing["spec"]["rules"][0];
        let key = format!(
            "{}{}",
            rule["host"].as_str().unwrap(),
            rule["http"]["paths"][0]["path"].as_str().unwrap()
        );
        let backend = entries
            .get(&key)
            .unwrap_or_else(|| panic!("no map entry for {key}: {entries:?}"));
        assert!(
            sections.contains_key(backend),
            "map points at missing backend {backend}"
        );
        for part in [&ing["metadata"]["namespace"], &ing["metadata"]["name"]] {
            assert!(
                backend.contains(part.as_str().unwrap()),
                "{backend} does not name {part}"
            );
        }
    }
    assert!(entries.keys().any(|k| k.starts_with("example.com")));
}

#[test]
fn backends_list_the_ready_endpoints_at_the_services_target_port() {
    let stores = stores();
    load(&stores, false);
    let rendered = render(&stores);
    let entries = map_entries(&rendered);
    let sections = backends(&rendered.haproxy_cfg);

    for (key, namespace, service) in [
        ("example.com/", "shop", "web"),
        ("api.example.com/v1", "shop", "api"),
        ("blog.example.org/", "blog", "ghost"),
    ] {
        let lines = &sections[&entries[key]];
        assert_eq!(
            servers(lines),
            ready_endpoints(namespace, service),
            "backend for {key}: {lines:?}"
        );
    }
    let web = &sections[&entries["example.com/"]];
    assert!(
        !web.iter().any(|l| l.contains("10.0.1.2")),
        "a not-ready endpoint was rendered"
    );
    assert!(
        !web.iter().any(|l| l.contains("10.9.9.9")),
        "another namespace's endpoints leaked in"
    );
    let names: Vec<&str> = web
        .iter()
        .filter_map(|l| l.strip_prefix("server ")?.split_whitespace().next())
        .collect();
    assert_eq!(
        names.len(),
        names.iter().collect::<BTreeSet<_>>().len(),
        "server names repeat: {names:?}"
    );
}

#[test]
fn a_service_without_endpoints_gets_a_backend_without_servers() {
    let stores = stores();
    load(&stores, false);
    stores
        .get("endpointslices")
        .unwrap()
        .replace_all(Vec::<serde_json::Value>::new());
    let rendered = render(&stores);
    let sections = backends(&rendered.haproxy_cfg);
    let entries = map_entries(&rendered);
    assert!(servers(&sections[&entries["example.com/"]]).is_empty());
    assert!(sections.contains_key("default_404"));
}

#[test]
fn the_config_points_haproxy_at_the_base_directory_and_the_map_path() {
    let stores = stores();
    load(&stores, false);
    let rendered = render(&stores);
    let resolver = PathResolver::default();
    let map = rendered.aux(AuxKind::Map, "host-paths.map").unwrap();
    assert_eq!(map.path, resolver.path(AuxKind::Map, "host-paths.map"));
    assert!(
        rendered
            .haproxy_cfg
            .contains(&format!("default-path origin {}", resolver.base_dir))
    );
    assert!(
        rendered
            .haproxy_cfg
            .contains(&format!("map_beg({})", map.path))
    );
    assert!(rendered.haproxy_cfg.contains("maxconn 2000"));
}

#[test]
fn the_output_does_not_depend_on_event_order() {
    let forward = stores();
    load(&forward, false);
    let backward = stores();
    load(&backward, true);
    assert_eq!(render(&forward).checksum(), render(&backward).checksum());
}

#[test]
fn a_new_endpoint_appears_in_the_next_render_but_not_in_an_older_snapshot() {
    let stores = stores();
    load(&stores, false);
    let before = stores.snapshot();
    stores
        .get("endpointslices")
        .unwrap()
        .apply(slice(
            "shop",
            "web-new",
            "web",
            "http",
            8000.0,
            &[("10.0.1.9", true)],
        ))
        .unwrap();
    let set = template_set();
    let context = |snapshot| {
        RenderContext::new(snapshot, PathResolver::default())
            .with_value("dataplane", json!({"maxconn": 1}))
    };
    let old = set.render(&context(before)).unwrap();
    let new = set.render(&context(stores.snapshot())).unwrap();
    assert!(!old.haproxy_cfg.contains("10.0.1.9"));
    assert!(new.haproxy_cfg.contains("10.0.1.9:8000"));
}

#[test]
fn many_ingresses_render_one_backend_each() {
    let stores = stores();
    let count = 300;
    let ingresses = stores.get("ingresses").unwrap();
    let services = stores.get("services").unwrap();
    let slices = stores.get("endpointslices").unwrap();
    for i in 0..count {
        let ns = format!("ns{}", i % 7);
        let svc = format!("svc{i}");
        ingresses
            .apply(ingress(
                &ns,
                &format!("ing{i}"),
                &format!("h{i}.example.com"),
                "/",
                &svc,
                80,
            ))
            .unwrap();
        services
            .apply(service(&ns, &svc, 80, "http", 8080))
            .unwrap();
        slices
            .apply(slice(
                &ns,
                &format!("{svc}-abc"),
                &svc,
                "http",
                8080.0,
                &[("10.1.0.1", true), ("10.1.0.2", true)],
            ))
            .unwrap();
    }
    let rendered = render(&stores);
    let sections = backends(&rendered.haproxy_cfg);
    assert_eq!(
        sections.len(),
        count + 1,
        "one backend per ingress plus default_404"
    );
    assert_eq!(
        sections
            .values()
            .filter(|lines| servers(lines).len() == 2)
            .count(),
        count
    );
    let shared = Arc::new(template_set());
    assert_eq!(shared.snippet_names().len(), 2);
}
