//! haptor against a real Kubernetes API server: the etcd + kube-apiserver pair of
//! `tests/support/kube.rs`, one shared by the tests of this binary (each in a namespace of
//! its own) and private ones where a test needs a server to itself. What is proven: the
//! CRDs `haptor crd` generates are accepted (structural schemas, printer columns, status
//! subresource) and haptor's shipped configs pass the server's validation, while a wrong
//! field type is refused with a 422 naming the field; the kit's stand-ins for the missing
//! kubelet and EndpointSlice controller work (a pod it makes Ready is listed Running and
//! Ready with its podIP, a slice it makes is found by its service-name label) and the server
//! refuses a loopback address in a slice; the restricted identity is refused
//! until a ClusterRole is bound to it; a `kube::runtime::watcher` on a `DynamicObject` sees
//! create, update and delete, and when its watch breaks and etcd is compacted meanwhile it
//! gets 410 Gone, relists and converges; and the kit leaves no server behind, even when its
//! test process is killed.

use crate::kube_kit;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use haptor::pure::config::{
    HAProxyCfg, HAProxyTemplateConfig, HAProxyTemplateConfigStatus, ValidationStatus,
    config_from_value,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use kube_kit::{CuttableProxy, Kit, KitOptions, RESTRICTED_USER, process_stat};
use serde_json::{Value, json};

/// How long a test waits for something the server or a watcher is expected to do.
const WAIT: Duration = Duration::from_secs(60);

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn configmaps() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": { "value": value },
    }))
    .expect("a ConfigMap")
}

/// Every `HAProxyTemplateConfig` document under `examples/`, and the Ingress library.
fn shipped_configs() -> Vec<(String, Value)> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read a folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo("examples"), &mut files);
    files.push(repo("deploy/library/ingress.yaml"));
    files.sort();
    let mut configs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a manifest");
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).expect("YAML");
            if value["kind"] == "HAProxyTemplateConfig" {
                let name = file.strip_prefix(repo("")).unwrap_or(&file);
                configs.push((name.display().to_string(), value));
            }
        }
    }
    configs
}

/// The Ingress library's config.
fn library_config() -> Value {
    shipped_configs()
        .into_iter()
        .find(|(file, _)| file == "deploy/library/ingress.yaml")
        .map(|(_, value)| value)
        .expect("the library's HAProxyTemplateConfig")
}

/// Sends `body` to `path` as a create with `fieldValidation=Strict`: a field the schema
/// does not know is an error instead of being dropped.
async fn create_strict(client: &Client, path: &str, body: &Value) -> kube::Result<Value> {
    let request = http::Request::post(format!("{path}?fieldValidation=Strict"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(body).expect("JSON"))
        .expect("a request");
    client.request::<Value>(request).await
}

/// The table the server prints for `kubectl get` of `path` (printer columns applied):
/// column names and the rows' cells.
async fn table(client: &Client, path: &str) -> (Vec<String>, Vec<Vec<Value>>) {
    let request = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(Vec::new())
        .expect("a request");
    let table: Value = client.request(request).await.expect("a Table");
    let columns = table["columnDefinitions"]
        .as_array()
        .expect("columnDefinitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect();
    let rows = table["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cells"].as_array().cloned().unwrap_or_default())
        .collect();
    (columns, rows)
}

#[tokio::test]
async fn haptors_crds_are_established_with_structural_schemas_and_a_status_subresource() {
    let kit = Kit::shared();
    let crds = Api::<CustomResourceDefinition>::all(kit.admin().await);
    for (name, kind, columns) in [
        (
            "haproxytemplateconfigs.haptor.dev",
            "HAProxyTemplateConfig",
            ["Validation", "Age"],
        ),
        ("haproxycfgs.haptor.dev", "HAProxyCfg", ["Checksum", "Age"]),
    ] {
        let crd = crds.get(name).await.expect("the CRD is installed");
        let status = crd.status.clone().expect("the CRD has a status");
        let condition = |type_: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == type_)
                .map(|c| c.status.clone())
        };
        assert_eq!(condition("Established").as_deref(), Some("True"), "{name}");
        assert_eq!(
            condition("NamesAccepted").as_deref(),
            Some("True"),
            "{name}"
        );
        // The apiserver adds this condition (True) to a CRD whose schema is not structural.
        assert_eq!(condition("NonStructuralSchema"), None, "{name}");
        assert_eq!(status.accepted_names.map(|n| n.kind).as_deref(), Some(kind));
        let versions = &crd.spec.versions;
        assert_eq!(versions.len(), 1, "{name}");
        let version = &versions[0];
        assert!(version.served && version.storage, "{name}");
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some()),
            "{name} has a status subresource"
        );
        let served_columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(served_columns, columns, "{name}");
    }
}

#[tokio::test]
async fn a_configs_status_is_written_only_through_the_status_subresource() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("status").await;
    let api = Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns);
    let mut config = config_from_value("library", library_config()).expect("the library parses");
    config.metadata.namespace = Some(ns.clone());
    let name = config.name_any();
    let written = HAProxyTemplateConfigStatus {
        observed_generation: Some(1),
        validation_status: ValidationStatus::Valid,
        validation_message: Some("all validation tests passed".into()),
        ..HAProxyTemplateConfigStatus::default()
    };
    config.status = Some(written.clone());

    // A create keeps the spec and drops the status.
    let created = api
        .create(&PostParams::default(), &config)
        .await
        .expect("created");
    assert_eq!(created.spec, config.spec);
    assert_eq!(created.status, None);
    assert_eq!(created.metadata.generation, Some(1));

    // Through /status (server-side apply, field manager haptor) it is written, without a
    // new generation.
    let applied = api
        .patch_status(
            &name,
            &PatchParams::apply("haptor").force(),
            &Patch::Apply(json!({
                "apiVersion": "haptor.dev/v1alpha1",
                "kind": "HAProxyTemplateConfig",
                "metadata": { "name": name },
                "status": written,
            })),
        )
        .await
        .expect("status applied");
    assert_eq!(applied.status, Some(written.clone()));
    assert_eq!(applied.metadata.generation, Some(1));
    let status_manager = applied
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.subresource.as_deref() == Some("status"))
        .and_then(|m| m.manager.clone());
    assert_eq!(status_manager.as_deref(), Some("haptor"));

    // The main resource ignores a status change, and a spec change is a new generation.
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": { "dataplane": { "port": 5556 } },
                "status": { "validationStatus": "Invalid" },
            })),
        )
        .await
        .expect("merge patch");
    assert_eq!(patched.status, Some(written));
    assert_eq!(patched.spec.dataplane.port, 5556);
    assert_eq!(patched.metadata.generation, Some(2));

    // The printer columns as `kubectl get` shows them.
    let (columns, rows) = table(&admin, &format!("{}/{name}", api.resource_url())).await;
    assert_eq!(columns, ["Name", "Validation", "Age"]);
    assert_eq!(rows[0][0], name.as_str());
    assert_eq!(rows[0][1], "Valid");
}

#[tokio::test]
async fn a_published_config_is_applied_by_field_manager_haptor_spec_then_status() {
    // The requests tests/in_process/kube_requests.rs pins, against the real server.
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("publish").await;
    let api = Api::<HAProxyCfg>::namespaced(admin.clone(), &ns);
    let params = PatchParams::apply("haptor").force();
    let body = |part: &str, value: Value| {
        json!({
            "apiVersion": "haptor.dev/v1alpha1",
            "kind": "HAProxyCfg",
            "metadata": { "name": "haptor-config" },
            part: value,
        })
    };
    let spec = json!({
        "path": "/etc/haproxy/haproxy.cfg",
        "content": "global\n  daemon\n",
        "checksum": "sha256:0123",
        "auxiliaryFiles": { "maps": [{
            "name": "routes.map", "path": "/etc/haproxy/maps/routes.map",
            "checksum": "sha256:4567", "size": 42,
        }] },
    });
    let status = json!({ "instances": [{
        "name": "haproxy-0", "deployedAt": "2026-12-01T10:00:00Z",
        "checksum": "sha256:0123", "consecutiveErrors": 0,
    }] });
    let created = api
        .patch(
            "haptor-config",
            &params,
            &Patch::Apply(body("spec", spec.clone())),
        )
        .await
        .expect("the spec apply creates the object");
    assert_eq!(json!(created.spec), spec);
    let published = api
        .patch_status(
            "haptor-config",
            &params,
            &Patch::Apply(body("status", status.clone())),
        )
        .await
        .expect("the status apply");
    assert_eq!(json!(published.status), status);
    assert_eq!(json!(published.spec), spec);
    let managers: BTreeSet<(String, Option<String>)> = published
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone()))
        .collect();
    assert_eq!(
        managers,
        BTreeSet::from([
            ("haptor".to_string(), None),
            ("haptor".to_string(), Some("status".to_string())),
        ])
    );
    let (columns, rows) = table(&admin, api.resource_url()).await;
    assert_eq!(columns, ["Name", "Checksum", "Age"]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1], "sha256:0123");
}

#[tokio::test]
async fn the_example_and_library_configs_pass_the_apiservers_schema_validation() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("shipped").await;
    let configs = shipped_configs();
    let names: Vec<&str> = configs.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        names.contains(&"examples/ingress/config.yaml")
            && names.contains(&"deploy/library/ingress.yaml"),
        "{names:?}"
    );
    let api = Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns);
    let path = api.resource_url();
    for (file, mut value) in configs {
        // The library names namespace haptor; every config goes to this test's namespace.
        value["metadata"]["namespace"] = json!(ns);
        let stored = create_strict(&admin, path, &value)
            .await
            .unwrap_or_else(|e| panic!("{file}: the apiserver refused it: {e}"));
        // Nothing pruned, nothing changed: and what the server added (its schema's
        // defaults) is what haptor assumes when the field is left out.
        let stored = config_from_value(&file, stored).expect("the stored object parses");
        let local = config_from_value(&file, value).expect("the file parses");
        assert_eq!(stored.spec, local.spec, "{file}");
    }
}

#[tokio::test]
async fn a_config_with_a_wrong_field_type_is_rejected_with_422_naming_the_field() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("invalid").await;
    let mut value = library_config();
    value["metadata"]["namespace"] = json!(ns);
    value["spec"]["dataplane"]["port"] = json!("not-a-number");
    let api = Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns);
    let path = api.resource_url();
    let error = create_strict(&admin, path, &value)
        .await
        .expect_err("a string port is refused");
    let kube::Error::Api(status) = &error else {
        panic!("not an API error: {error}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");
    assert!(status.message.contains("spec.dataplane.port"), "{status:?}");
    let fields: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(fields, ["spec.dataplane.port"], "{status:?}");
}

#[tokio::test]
async fn a_pod_made_ready_by_the_kit_is_listed_running_and_ready_with_its_pod_ip() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("pods").await;
    let made = kit
        .ready_pod(&ns, "haproxy-0", &[("app", "haproxy")], "10.244.0.5")
        .await;
    assert_eq!(
        made.status.and_then(|s| s.pod_ip).as_deref(),
        Some("10.244.0.5")
    );
    // A pod of another label is not selected.
    kit.ready_pod(&ns, "backend-0", &[("app", "backend")], "10.244.0.6")
        .await;

    let pods = Api::<Pod>::namespaced(kit.admin().await, &ns)
        .list(&ListParams::default().labels("app=haproxy"))
        .await
        .expect("list the pods");
    let listed: Vec<Value> = pods
        .items
        .iter()
        .map(|pod| {
            let status = pod.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let ips: Vec<String> = status
                .pod_ips
                .unwrap_or_default()
                .into_iter()
                .map(|ip| ip.ip)
                .collect();
            json!({
                "name": pod.name_any(),
                "phase": status.phase,
                "podIP": status.pod_ip,
                "podIPs": ips,
                "ready": ready,
            })
        })
        .collect();
    assert_eq!(
        listed,
        [json!({
            "name": "haproxy-0",
            "phase": "Running",
            "podIP": "10.244.0.5",
            "podIPs": ["10.244.0.5"],
            "ready": true,
        })]
    );
}

#[tokio::test]
async fn an_endpoint_slice_made_by_the_kit_is_found_by_its_service_name_label() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("slices").await;
    kit.endpoint_slice(&ns, "web", &["10.244.0.5", "10.244.0.7"], 8080)
        .await
        .expect("the server accepts the slice");
    kit.endpoint_slice(&ns, "other", &["10.244.0.9"], 80)
        .await
        .expect("the server accepts the slice");

    let slices = Api::<EndpointSlice>::namespaced(kit.admin().await, &ns)
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .expect("list the slices");
    assert_eq!(slices.items.len(), 1, "{:?}", slices.items);
    let slice = &slices.items[0];
    assert_eq!(slice.address_type, "IPv4");
    let endpoints: Vec<(Vec<String>, Option<bool>)> = slice
        .endpoints
        .iter()
        .map(|e| {
            (
                e.addresses.clone(),
                e.conditions.as_ref().and_then(|c| c.ready),
            )
        })
        .collect();
    assert_eq!(
        endpoints,
        [
            (vec!["10.244.0.5".to_string()], Some(true)),
            (vec!["10.244.0.7".to_string()], Some(true)),
        ]
    );
    let ports: Vec<(Option<i32>, Option<String>)> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| (p.port, p.protocol.clone()))
        .collect();
    assert_eq!(ports, [(Some(8080), Some("TCP".to_string()))]);
}

#[tokio::test]
async fn an_endpoint_slice_with_a_loopback_address_is_refused_by_the_server_with_422() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("loopback").await;
    let error = kit
        .endpoint_slice(&ns, "web", &["127.0.0.1"], 8080)
        .await
        .expect_err("a loopback endpoint is refused");
    let kube::Error::Api(status) = &error else {
        panic!("not an API error: {error}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid", "{status:?}");
    assert!(
        status.message.contains("may not be in the loopback range"),
        "{status:?}"
    );
    let fields: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(fields, ["endpoints[0].addresses[0]"], "{status:?}");
}

#[tokio::test]
async fn the_restricted_identity_is_forbidden_until_a_cluster_role_is_bound_to_it() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("rbac").await;
    let other = kit.temp_ns("rbac-other").await;
    let restricted = kit.restricted().await;
    let configs = Api::<HAProxyTemplateConfig>::namespaced(restricted.clone(), &ns);
    let forbidden =
        |result: kube::Result<_>| matches!(result, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(forbidden(
        configs.list(&ListParams::default()).await.map(|_| ())
    ));

    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": format!("haptor-config-reader-{ns}") },
        "rules": [{
            "apiGroups": ["haptor.dev"],
            "resources": ["haproxytemplateconfigs"],
            "verbs": ["get", "list", "watch"],
        }],
    }))
    .expect("a ClusterRole");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("ClusterRole created");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "haptor-config-reader", "namespace": ns },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role.name_any(),
        },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RESTRICTED_USER }],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding created");

    // The authorizer learns of the binding through its own watch: soon, not at once.
    let deadline = Instant::now() + WAIT;
    loop {
        match configs.list(&ListParams::default()).await {
            Ok(list) => {
                assert!(list.items.is_empty());
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 403 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("still refused {WAIT:?} after the binding: {e}"),
        }
    }
    // Exactly what was bound: reading in this namespace, nothing else.
    let elsewhere = Api::<HAProxyTemplateConfig>::namespaced(restricted.clone(), &other);
    assert!(forbidden(
        elsewhere.list(&ListParams::default()).await.map(|_| ())
    ));
    let mut value = library_config();
    value["metadata"]["namespace"] = json!(ns);
    let config = config_from_value("library", value).expect("the library parses");
    assert!(forbidden(
        configs
            .create(&PostParams::default(), &config)
            .await
            .map(|_| ())
    ));
}

#[tokio::test]
async fn clients_trust_the_apiservers_own_certificate_and_not_the_system_roots() {
    let kit = Kit::shared();
    let readyz = || {
        http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a request")
    };
    let trusted = kit.admin().await.request_text(readyz()).await;
    assert_eq!(trusted.expect("the kit's client is trusted").trim(), "ok");

    let file = kube::config::Kubeconfig::read_from(kit.admin_kubeconfig()).expect("kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
    assert!(config.root_cert.is_some() && !config.accept_invalid_certs);
    config.root_cert = None;
    let untrusting = Client::try_from(config).expect("a client");
    let refused = untrusting.request_text(readyz()).await;
    assert!(
        refused.is_err(),
        "a self-signed server certificate is not among the system roots"
    );
}

/// A watcher's events, with the errors it yields between them.
struct Events {
    stream: BoxStream<'static, watcher::Result<Event<DynamicObject>>>,
    errors: Vec<watcher::Error>,
}

impl Events {
    /// The next event; `keep_errors` lets errors pass (recorded), otherwise one fails.
    async fn next(&mut self, keep_errors: bool) -> Event<DynamicObject> {
        loop {
            let item = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("no watch event within {WAIT:?} (errors: {:?})", self.errors)
                })
                .expect("the watcher does not end");
            match item {
                Ok(event) => return event,
                Err(e) if keep_errors => self.errors.push(e),
                Err(e) => panic!("the watcher failed: {e}"),
            }
        }
    }
}

fn describe(event: &Event<DynamicObject>) -> String {
    let object = |o: &DynamicObject| format!("{} {}", o.name_any(), value_of(o));
    match event {
        Event::Init => "Init".into(),
        Event::InitApply(o) => format!("InitApply({})", object(o)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(o) => format!("Apply({})", object(o)),
        Event::Delete(o) => format!("Delete({})", object(o)),
    }
}

fn value_of(object: &DynamicObject) -> String {
    object.data["data"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Reads one complete list: `Init`, its `InitApply`s, `InitDone`; returns the names listed.
async fn initial_list(events: &mut Events, keep_errors: bool) -> BTreeSet<String> {
    let first = events.next(keep_errors).await;
    assert!(matches!(first, Event::Init), "{}", describe(&first));
    let mut names = BTreeSet::new();
    loop {
        match events.next(keep_errors).await {
            Event::InitApply(o) => {
                names.insert(o.name_any());
            }
            Event::InitDone => return names,
            other => panic!("during the list: {}", describe(&other)),
        }
    }
}

#[tokio::test]
async fn a_dynamic_watcher_sees_create_update_and_delete() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("watch").await;
    let api = Api::<DynamicObject>::namespaced_with(admin.clone(), &ns, &configmaps());
    let mut events = Events {
        stream: watcher::watcher(api, watcher::Config::default()).boxed(),
        errors: Vec::new(),
    };
    assert_eq!(initial_list(&mut events, false).await, BTreeSet::new());

    let cms = Api::<ConfigMap>::namespaced(admin, &ns);
    cms.create(&PostParams::default(), &configmap("web", "1"))
        .await
        .expect("created");
    let seen = describe(&events.next(false).await);
    assert_eq!(seen, "Apply(web 1)");
    cms.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "value": "2" } })),
    )
    .await
    .expect("updated");
    assert_eq!(describe(&events.next(false).await), "Apply(web 2)");
    cms.delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    assert_eq!(describe(&events.next(false).await), "Delete(web 2)");
}

#[tokio::test]
async fn after_etcd_compaction_a_broken_watch_gets_410_and_the_watcher_relists_and_converges() {
    // A server of its own: compaction is global, and without the watch cache every watch
    // reaches etcd (the cache would serve the old resourceVersion from memory, compaction
    // or not).
    let kit = Kit::start_with(KitOptions {
        watch_cache: false,
        crds: None,
        gateway_api: false,
    });
    let admin = kit.admin().await;
    let ns = kit.temp_ns("compaction").await;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    for name in ["kept", "changed", "deleted"] {
        cms.create(&PostParams::default(), &configmap(name, "1"))
            .await
            .expect("created");
    }

    let proxy = CuttableProxy::start(kit.port).await;
    let resource = configmaps();
    let writer = Writer::<DynamicObject>::new(resource.clone());
    let store = writer.as_reader();
    let api =
        Api::<DynamicObject>::namespaced_with(kit.admin_via(&proxy.url).await, &ns, &resource);
    let mut events = Events {
        stream: reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
            .boxed(),
        errors: Vec::new(),
    };
    let listed = initial_list(&mut events, false).await;
    assert_eq!(
        listed,
        BTreeSet::from(["changed", "deleted", "kept"].map(String::from))
    );
    // Watching: a change arrives as an event, and its resourceVersion is where the watch
    // will resume from.
    cms.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "value": "2" } })),
    )
    .await
    .expect("updated");
    let Event::Apply(kept) = events.next(false).await else {
        panic!("the update did not arrive as an Apply");
    };
    let resumed_from = kept.resource_version().expect("a resourceVersion");

    // The watch breaks; meanwhile objects change, and etcd is compacted past them all.
    proxy.cut().await;
    cms.patch(
        "changed",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "value": "2" } })),
    )
    .await
    .expect("updated");
    cms.delete("deleted", &DeleteParams::default())
        .await
        .expect("deleted");
    cms.create(&PostParams::default(), &configmap("added", "1"))
        .await
        .expect("created");
    let compacted = kit.compact_etcd().await;
    assert!(compacted > resumed_from.parse::<i64>().expect("a number"));

    // A watch from the old resourceVersion is now refused as expired.
    let mut direct = cms
        .watch(&WatchParams::default(), &resumed_from)
        .await
        .expect("the watch request is answered")
        .boxed();
    match direct.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (410, "Expired"),
                "{status:?}"
            )
        }
        other => panic!("a watch from {resumed_from} after compaction at {compacted}: {other:?}"),
    }
    drop(direct);

    // The watcher resumes from there, gets 410 and relists: the missed changes arrive in
    // the new list, not as events.
    proxy.restore();
    loop {
        match tokio::time::timeout(WAIT, events.stream.next())
            .await
            .expect("the watcher resumes")
            .expect("the watcher does not end")
        {
            Err(watcher::Error::WatchError(status)) if status.code == 410 => break,
            Err(e) => events.errors.push(e),
            Ok(event) => panic!(
                "the watcher yielded {} before a 410 (errors: {:?})",
                describe(&event),
                events.errors
            ),
        }
    }
    let relisted = initial_list(&mut events, true).await;
    assert_eq!(
        relisted,
        BTreeSet::from(["added", "changed", "kept"].map(String::from))
    );

    // The store the watcher feeds equals the server's state.
    let state = |objects: Vec<(String, String, String)>| -> BTreeMap<String, (String, String)> {
        objects
            .into_iter()
            .map(|(name, rv, value)| (name, (rv, value)))
            .collect()
    };
    let local = state(
        store
            .state()
            .iter()
            .map(|o| {
                (
                    o.name_any(),
                    o.resource_version().unwrap_or_default(),
                    value_of(o),
                )
            })
            .collect(),
    );
    let server = state(
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .map(|c| {
                let value = c.data.as_ref().and_then(|d| d.get("value")).cloned();
                (
                    c.name_any(),
                    c.resource_version().unwrap_or_default(),
                    value.unwrap_or_default(),
                )
            })
            .collect(),
    );
    assert_eq!(local, server);
    assert_eq!(local["changed"].1, "2");
}

/// Set in the child that [`killing_the_test_process_leaves_no_server_behind`] starts: the
/// file the child writes its kit's pids and directory to before it waits to be killed.
const HOLD_ENV: &str = "HAPTOR_KIT_HOLD_PIDS_AT";

#[test]
fn a_private_kit_stops_its_servers_when_dropped() {
    let kit = Kit::start_with(KitOptions {
        crds: None,
        ..KitOptions::default()
    });
    let pids = kit.pids();
    for (name, pid) in pids.all() {
        assert!(kube_kit::process_alive(pid), "{name} runs");
    }
    if let Some(path) = std::env::var_os(HOLD_ENV) {
        let text = format!(
            "{} {} {} {}\n",
            pids.launcher,
            pids.etcd,
            pids.kube_apiserver,
            kit.dir().display()
        );
        let tmp = PathBuf::from(&path).with_extension("new");
        std::fs::write(&tmp, text).expect("write the pids");
        std::fs::rename(&tmp, &path).expect("move the pids in place");
        loop {
            std::thread::park();
        }
    }
    let dir = kit.dir().to_path_buf();
    drop(kit);
    // The drop waited for the launcher, which reaped the servers and removed the dir.
    for (name, pid) in pids.all() {
        assert!(!kube_kit::process_alive(pid), "{name} (pid {pid}) is gone");
    }
    assert!(!dir.exists(), "{} is removed", dir.display());
}

#[test]
fn killing_the_test_process_leaves_no_server_behind() {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let pids_file = scratch.path().join("pids");
    let output = std::fs::File::create(scratch.path().join("child.log")).expect("child.log");
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "kube_apiserver::a_private_kit_stops_its_servers_when_dropped",
            "--exact",
            "--nocapture",
        ])
        .env(HOLD_ENV, &pids_file)
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("child.log"))
        .stderr(output)
        .spawn()
        .expect("the child test process starts");
    let child_log =
        || std::fs::read_to_string(scratch.path().join("child.log")).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(240);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&pids_file) {
            break text;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!(
                "the child test exited ({status}) before its kit was up:\n{}",
                child_log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the child's kit never came up:\n{}",
            child_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut fields = text.split_whitespace();
    let mut pid = || -> u32 { fields.next().and_then(|p| p.parse().ok()).expect("a pid") };
    let servers = [
        ("launcher", pid()),
        ("etcd", pid()),
        ("kube-apiserver", pid()),
    ];
    let dir = PathBuf::from(fields.next().expect("the kit's dir"));
    let started: Vec<(&str, u32, u64)> = servers
        .iter()
        .map(|&(name, pid)| {
            let (state, start) = process_stat(pid).unwrap_or_else(|| panic!("{name} runs"));
            assert!(!matches!(state, 'Z' | 'X'), "{name} runs");
            (name, pid, start)
        })
        .collect();

    child.kill().expect("SIGKILL the child test process");
    child.wait().expect("reap the child");

    // The same process (same pid and start time) still running counts as left behind.
    let left = || -> Vec<String> {
        started
            .iter()
            .filter(|&&(_, pid, start)| {
                process_stat(pid)
                    .is_some_and(|(state, s)| s == start && !matches!(state, 'Z' | 'X'))
            })
            .map(|(name, pid, _)| format!("{name} (pid {pid})"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !left().is_empty() || dir.exists() {
        assert!(
            Instant::now() < deadline,
            "after the test process was killed: still running {:?}, kit dir there: {}",
            left(),
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
