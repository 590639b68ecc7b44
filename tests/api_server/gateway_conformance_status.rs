//! The status checks of the Gateway API conformance corpus (`../shared/corpus/kubernetes/
//! gateway-conformance`, `status_checks` of each `<name>.expect.yaml`) against what `haptor
//! run` writes to a real kube-apiserver, where `processes/gateway_conformance.rs` reads them
//! from `haptor local`'s `/debug/vars/status`. One kit of its own with the Gateway API's
//! CRDs (GatewayClasses are cluster-wide and haptor watches every namespace), the Gateway
//! library (`deploy/library/gateway.yaml`, read at run time) as the config, `--publish-address`
//! and a GatewayClass `haptor`. The base manifests are applied once, of them only the kinds
//! the library reads (Namespaces, Services, Gateways; no Deployments: nothing runs them
//! here), with the TLS Secret the upstream suite makes at run time and an EndpointSlice per
//! Service with a selector (ports named as the Service's, at a private-range address: the
//! API server refuses loopback ones, and no request is sent). Every Gateway asks for a
//! loopback address of its own in `spec.addresses`, as in the local runner, so that the
//! Gateways' listeners on one port do not conflict. Then case by case, in the local runner's
//! order, a case needing a feature the library lacks skipped: its manifests are applied, its
//! checks (`tests/support/gateway_checks.rs`, a Gateway's status address required as
//! upstream) are evaluated against the statuses read back from the API server, each retried
//! until it holds or [`STATUS_PATIENCE`] has passed, a `mutate_route` applies the patched
//! Route; then the case's objects are deleted and the writer is given time to settle before
//! the next case. `HAPTOR_CONFORMANCE_CASES=a,b` (file stems or test names) runs only
//! those cases.

use std::time::{Duration, Instant};

use haptor::pure::config::HAProxyTemplateConfig;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::gateway_checks::{
    CONTROLLER_NAME, Case, CheckContext, GATEWAY_CLASS, Outcome, endpoint_slice, gateway_ip,
    load_cases, mutate, nn, read_manifests, selected_cases, status_check, status_of, str_of,
    strings, tls_secret, truncate,
};
use crate::haptor_run::{Replica, no_election, repo, wait_for};
use crate::kube_kit::{Kit, KitOptions};

const PUBLISHED: &str = "192.0.2.10";
const BASE: &str = "base-manifests.yaml";
/// How long a status check may take to hold.
const STATUS_PATIENCE: Duration = Duration::from_secs(15);
/// How long the statuses may take to show a case's objects gone.
const SETTLE_PATIENCE: Duration = Duration::from_secs(15);
/// The field manager the runner applies the manifests as.
const FIELD_MANAGER: &str = "conformance-runner";
/// The kinds applied: what the Gateway library reads.
const APPLIED_KINDS: &[&str] = &[
    "Namespace",
    "Secret",
    "Service",
    "EndpointSlice",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TLSRoute",
    "ReferenceGrant",
];
/// Where the runner's EndpointSlices point (written to the API only).
const ENDPOINT_ADDRESS: &str = "10.244.0.5";
const ENDPOINT_PORT: u16 = 3000;
/// What haptor logs when a Gateway API status write fails.
const WRITE_FAILED: &str = "a Gateway API status write failed";

/// The Gateway library as the HAProxyTemplateConfig `haptor-config` of `ns`.
fn gateway_config(ns: &str) -> HAProxyTemplateConfig {
    let text = std::fs::read_to_string(repo("deploy/library/gateway.yaml")).expect("the library");
    let mut value: Value = serde_yaml_ng::from_str(&text).expect("the library is YAML");
    value["metadata"] = json!({ "name": "haptor-config", "namespace": ns });
    value["spec"]["leaderElection"] = no_election();
    serde_json::from_value(value).expect("the library is an HAProxyTemplateConfig")
}

/// The resource name of `kind` (`gatewayclasses`, `httproutes`).
fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The API of `kind` at `api_version` (`group/version`, or `version` of the core group) in
/// `namespace` (None: every namespace, or a cluster-wide kind).
fn api(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        &plural(kind),
    );
    match namespace {
        Some(ns) if !matches!(kind, "Namespace" | "GatewayClass") => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// The API of `object`'s kind, in its namespace.
fn api_of(client: &Client, object: &Value) -> Api<DynamicObject> {
    api(
        client,
        str_of(object, "apiVersion").unwrap_or("v1"),
        str_of(object, "kind").unwrap_or_default(),
        Some(str_of(&object["metadata"], "namespace").unwrap_or("default")),
    )
}

/// `kind namespace/name` of a manifest.
fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        str_of(object, "kind").unwrap_or_default(),
        str_of(&object["metadata"], "namespace").unwrap_or("-"),
        str_of(&object["metadata"], "name").unwrap_or_default()
    )
}

/// Creates or updates `object` (server-side apply, as `kubectl apply --server-side`).
async fn apply(client: &Client, object: &Value) -> Result<(), String> {
    let name = str_of(&object["metadata"], "name").unwrap_or_default();
    api_of(client, object)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map(drop)
        .map_err(|e| format!("applying {}: {e}", describe(object)))
}

/// Deletes `object`; one already gone is fine.
async fn delete(client: &Client, object: &Value) -> Result<(), String> {
    let name = str_of(&object["metadata"], "name").unwrap_or_default();
    match api_of(client, object)
        .delete(name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(format!("deleting {}: {e}", describe(object))),
    }
}

/// The objects of corpus file `file` this runner applies, each Service with a selector
/// followed by its EndpointSlice.
fn objects_of(file: &str) -> Result<Vec<Value>, String> {
    let mut objects = Vec::new();
    for object in read_manifests(file)? {
        if !APPLIED_KINDS.contains(&str_of(&object, "kind").unwrap_or_default()) {
            continue;
        }
        let slice = (object["kind"] == "Service" && !object["spec"]["selector"].is_null())
            .then(|| endpoint_slice(&object, ENDPOINT_ADDRESS, ENDPOINT_PORT));
        objects.push(object);
        objects.extend(slice);
    }
    // Namespaces first, as `kubectl apply` would need them.
    objects.sort_by_key(|o| o["kind"] != "Namespace");
    Ok(objects)
}

/// Every GatewayClass, Gateway and HTTPRoute as `/debug/vars/status` lists them
/// (`{apiVersion, kind, namespace, name, status}`), each with its `generation`.
async fn statuses(client: &Client) -> Result<Vec<Value>, String> {
    let mut list = Vec::new();
    for kind in ["GatewayClass", "Gateway", "HTTPRoute"] {
        let api_version = "gateway.networking.k8s.io/v1";
        let objects = api(client, api_version, kind, None)
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing {kind}s: {e}"))?;
        for object in objects.items {
            list.push(json!({
                "apiVersion": api_version,
                "kind": kind,
                "namespace": object.metadata.namespace.clone().unwrap_or_default(),
                "name": object.metadata.name.clone().unwrap_or_default(),
                "generation": object.metadata.generation,
                "status": object.data.get("status").cloned().unwrap_or(Value::Null),
            }));
        }
    }
    Ok(list)
}

/// Retries `check` against fresh statuses until it holds or [`STATUS_PATIENCE`] passes.
async fn hold(client: &Client, check: &Value, context: &CheckContext) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let result = statuses(client)
            .await
            .and_then(|list| status_check(check, &list, context));
        match result {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() > STATUS_PATIENCE => {
                return Err(format!(
                    "status check {} (did not hold within {STATUS_PATIENCE:?}): {e}\n  the check: {}",
                    str_of(check, "check").unwrap_or_default(),
                    serde_json::to_string(check).unwrap_or_default()
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Runs one case's status checks on its applied `objects` (a `mutate_route` applies the
/// patched Route).
async fn run_checks(client: &Client, case: &Case, objects: &mut [Value]) -> Result<(), String> {
    let mut context = CheckContext {
        require_address: true,
        ..CheckContext::default()
    };
    for check in case.status_checks() {
        if check["check"] != "mutate_route" {
            hold(client, &check, &context).await?;
            continue;
        }
        let route = str_of(&check, "route").unwrap_or_default();
        let (ns, name) = nn(route);
        let object = objects
            .iter_mut()
            .find(|o| {
                o["kind"] == "HTTPRoute"
                    && o["metadata"]["name"] == name.as_str()
                    && str_of(&o["metadata"], "namespace").unwrap_or("default") == ns
            })
            .ok_or(format!(
                "mutate_route: no HTTPRoute {route} in the manifests"
            ))?;
        let current = api_of(client, object)
            .get(&name)
            .await
            .map_err(|e| format!("mutate_route: reading HTTPRoute {route}: {e}"))?;
        context
            .original_generations
            .insert(route.to_string(), current.metadata.generation.unwrap_or(1));
        mutate(object, &check)?;
        apply(client, object).await?;
    }
    Ok(())
}

/// Deletes a case's objects and waits until the statuses show them gone: no HTTPRoute
/// left and no listener counting one (or [`SETTLE_PATIENCE`] passed: the next case's
/// checks retry anyway), then a second more for the writer's last pass.
async fn clean_up(client: &Client, objects: &[Value]) -> Result<(), String> {
    for object in objects.iter().rev() {
        if object["kind"] != "Namespace" {
            delete(client, object).await?;
        }
    }
    let started = Instant::now();
    while started.elapsed() < SETTLE_PATIENCE {
        let settled = statuses(client).await.is_ok_and(|list| {
            list.iter().all(|entry| {
                entry["kind"] != "HTTPRoute"
                    && entry["status"]["listeners"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|l| l["attachedRoutes"].as_i64().unwrap_or(0) == 0)
            })
        });
        if settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(())
}

/// Applies a case's manifests, runs its status checks and deletes its objects again.
async fn run_case(client: &Client, case: &Case) -> Outcome {
    let missing = case.missing_features();
    if !missing.is_empty() {
        return Outcome::Skip(format!("unsupported features: {}", missing.join(", ")));
    }
    let mut objects = Vec::new();
    for file in strings(&case.expect["apply"]) {
        if file == BASE {
            continue;
        }
        match objects_of(&file) {
            Ok(list) => objects.extend(list),
            Err(e) => return Outcome::Fail(format!("setup: {e}")),
        }
    }
    let mut result = Ok(());
    for object in &objects {
        result = apply(client, object).await;
        if result.is_err() {
            break;
        }
    }
    if result.is_ok() {
        result = run_checks(client, case, &mut objects).await;
    }
    if let Err(e) = clean_up(client, &objects).await {
        result = result.and(Err(format!("clean-up: {e}")));
    }
    match result {
        Ok(()) => Outcome::Pass,
        Err(e) => Outcome::Fail(e),
    }
}

#[tokio::test]
async fn the_corpus_status_checks_hold_in_the_api_server_as_haptor_run_writes_them() {
    let only = selected_cases();
    let cases: Vec<Case> = load_cases()
        .into_iter()
        .filter(|c| {
            only.as_ref()
                .is_none_or(|only| only.iter().any(|o| *o == c.stem || *o == c.test))
        })
        .collect();
    assert!(!cases.is_empty(), "no conformance case selected");
    let kit = Kit::start_with(KitOptions {
        gateway_api: true,
        ..KitOptions::default()
    });
    let client = kit.admin().await;
    let ns = kit.temp_ns("gateway-conformance").await;

    apply(
        &client,
        &json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": { "name": GATEWAY_CLASS },
            "spec": { "controllerName": CONTROLLER_NAME },
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let base = objects_of(BASE).unwrap_or_else(|e| panic!("{e}"));
    let (namespaces, rest): (Vec<&Value>, Vec<&Value>) =
        base.iter().partition(|o| o["kind"] == "Namespace");
    let secret = tls_secret();
    for object in namespaces.into_iter().chain([&secret]).chain(rest) {
        apply(&client, object)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &gateway_config(&ns))
        .await
        .expect("the config is created");
    let replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "solo",
        &["--publish-address", PUBLISHED],
    );

    // The base Gateways programmed, each at the address its spec asks for: haptor is up
    // and writing.
    let gateways: Vec<(String, String)> = base
        .iter()
        .filter(|o| o["kind"] == "Gateway")
        .map(|o| {
            (
                str_of(&o["metadata"], "namespace")
                    .unwrap_or("default")
                    .to_string(),
                str_of(&o["metadata"], "name")
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let context = CheckContext {
        require_address: true,
        ..CheckContext::default()
    };
    wait_for("the base Gateways' status", &[&replica], || async {
        let list = statuses(&client).await.ok()?;
        gateways
            .iter()
            .all(|(ns, name)| {
                let check = json!({"check": "gateway_programmed_and_routes_accepted",
                    "gateway": format!("{ns}/{name}")});
                status_check(&check, &list, &context).is_ok()
                    && status_of(&list, "Gateway", ns, name).is_some_and(|s| {
                        s["addresses"]
                            == json!([{"type": "IPAddress", "value": gateway_ip(ns, name)}])
                    })
            })
            .then_some(())
    })
    .await;

    let mut results = Vec::new();
    for case in &cases {
        let outcome = run_case(&client, case).await;
        eprintln!(
            "gateway conformance status: {:<55} {}",
            case.test,
            outcome.word()
        );
        if let Outcome::Fail(reason) = &outcome {
            eprintln!("  {}: {reason}\n", case.stem);
        }
        results.push(outcome);
    }

    eprintln!("\n{:<58} {:<6} reason", "test", "result");
    for (case, outcome) in cases.iter().zip(&results) {
        let reason = match outcome {
            Outcome::Pass => "",
            Outcome::Skip(reason) | Outcome::Fail(reason) => reason,
        };
        eprintln!(
            "{:<58} {:<6} {}",
            case.test,
            outcome.word(),
            truncate(reason.lines().next().unwrap_or_default(), 200)
        );
    }
    let count = |w: &str| results.iter().filter(|o| o.word() == w).count();
    eprintln!(
        "\n{} passed, {} skipped, {} failed",
        count("pass"),
        count("skip"),
        count("fail")
    );
    let log = replica.log_text();
    let write_failures = log.lines().filter(|l| l.contains(WRITE_FAILED)).count();
    if write_failures > 0 {
        eprintln!("haptor logged {write_failures} failed status writes");
    }
    let failed: Vec<&str> = cases
        .iter()
        .zip(&results)
        .filter(|(_, o)| matches!(o, Outcome::Fail(_)))
        .map(|(c, _)| c.test.as_str())
        .collect();
    assert!(
        failed.is_empty(),
        "the status checks of these cases do not hold in the API server: {failed:?}"
    );
}
