//! Gateway API status in `haptor run`, end to end: the real binary against the real
//! kube-apiserver of a kit of its own with the Gateway API's CRDs (GatewayClasses are
//! cluster-wide and haptor watches every namespace, so no other test's objects may be in
//! sight), with the Gateway library (`deploy/library/gateway.yaml`, read at run time) as its
//! config and `--publish-address`. What is proven: the leader writes the status the
//! templates record to the GatewayClass (Accepted, SupportedVersion), the Gateway (Accepted,
//! Programmed, the publish address, each listener's conditions, kinds and attached routes,
//! a listener whose certificate is missing refused alone) and each HTTPRoute (attached, or
//! why not; a backend in another namespace refused until a ReferenceGrant allows it, and
//! again once the grant is gone), every condition stamped with the object's generation and a
//! transition time; a status is written only when it differs (a render that changes other
//! objects leaves a Route's resourceVersion alone), another controller's Route parents are
//! kept; and a restarted haptor, a new leadership term, writes again a status someone
//! cleared. One replica at a time, one test: two would write the same objects.

use crate::haptor_run;
use crate::kube_kit;

use haptor::pure::config::published::decode_content;
use haptor::pure::config::{HAProxyCfg, HAProxyTemplateConfig};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use haptor_run::{Replica, no_election, repo, wait_for};
use kube_kit::{Kit, KitOptions};

const GROUP: &str = "gateway.networking.k8s.io";
const CONTROLLER: &str = "haptor.dev/gateway-controller";
const OTHER_CONTROLLER: &str = "other.example/x";
const PUBLISHED: &str = "192.0.2.10";
/// What haptor logs when a Gateway API status write fails.
const WRITE_FAILED: &str = "a Gateway API status write failed";

/// The Gateway API kind `kind` (plural `plural`) at `version`, in `ns` (None: cluster-wide).
fn gateway_api(
    client: &Client,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Creates `object` through `api`.
async fn create(api: &Api<DynamicObject>, object: Value) {
    let what = format!("{} {}", object["kind"], object["metadata"]["name"]);
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("the API server refused {what}: {e}"));
}

/// The object `name` as JSON, once it exists.
async fn read(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    let object = api.get_opt(name).await.ok()??;
    serde_json::to_value(object).ok()
}

/// The Gateway library as the HAProxyTemplateConfig `haptor-config` of `ns`.
fn gateway_config(ns: &str) -> HAProxyTemplateConfig {
    let text = std::fs::read_to_string(repo("deploy/library/gateway.yaml")).expect("the library");
    let mut value: Value = serde_yaml_ng::from_str(&text).expect("the library is YAML");
    value["metadata"] = json!({ "name": "haptor-config", "namespace": ns });
    value["spec"]["leaderElection"] = no_election();
    serde_json::from_value(value).expect("the library is an HAProxyTemplateConfig")
}

/// The condition of type `type_` in the list `conditions`.
fn condition<'a>(conditions: &'a Value, type_: &str) -> Option<&'a Value> {
    conditions
        .as_array()?
        .iter()
        .find(|c| c["type"] == json!(type_))
}

/// True when `conditions` has `type_` with `status` and `reason`.
fn has(conditions: &Value, type_: &str, status: &str, reason: &str) -> bool {
    condition(conditions, type_)
        .is_some_and(|c| c["status"] == json!(status) && c["reason"] == json!(reason))
}

/// Asserts that every condition of `conditions` has a transition time and the object's
/// generation `generation` as its observedGeneration.
fn assert_stamped(conditions: &Value, generation: &Value, what: &str) {
    let list = conditions.as_array().expect("a list of conditions");
    assert!(!list.is_empty(), "{what} has conditions");
    for c in list {
        assert!(
            c["lastTransitionTime"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{what}: every condition has a lastTransitionTime: {c}"
        );
        assert_eq!(
            &c["observedGeneration"], generation,
            "{what}: every condition observed the object's generation: {c}"
        );
    }
}

/// The listener `name` of a Gateway's status.
fn listener<'a>(gateway: &'a Value, name: &str) -> Option<&'a Value> {
    gateway["status"]["listeners"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == json!(name))
}

/// The Route's parent entries of `controller`.
fn parents_of<'a>(route: &'a Value, controller: &str) -> Vec<&'a Value> {
    route["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == json!(controller))
        .collect()
}

/// The conditions of the Route's only parent entry of haptor.
fn haptor_conditions(route: &Value) -> Option<&Value> {
    match parents_of(route, CONTROLLER)[..] {
        [parent] => Some(&parent["conditions"]),
        _ => None,
    }
}

/// `route` once its parent entry of haptor has Accepted=True and ResolvedRefs with `status`
/// and `reason`.
fn resolved(route: Option<Value>, status: &str, reason: &str) -> Option<Value> {
    route.filter(|r| {
        haptor_conditions(r).is_some_and(|c| {
            has(c, "Accepted", "True", "Accepted") && has(c, "ResolvedRefs", status, reason)
        })
    })
}

fn resource_version(object: &Value) -> Value {
    object["metadata"]["resourceVersion"].clone()
}

async fn service(client: &Client, ns: &str, name: &str, port: i32) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "ports": [{ "name": "http", "port": port, "targetPort": port }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
}

/// The test Secret of the libraries (a self-signed certificate and its key) as the
/// kubernetes.io/tls Secret `name` of `ns`.
async fn tls_secret(client: &Client, ns: &str, name: &str) {
    let text = std::fs::read_to_string(repo("deploy/library/testdata/tls-secret.yaml"))
        .expect("the test Secret");
    let document = text
        .split("\n---")
        .find(|d| d.contains("kind: Secret"))
        .expect("a Secret document");
    let mut secret: Secret = serde_yaml_ng::from_str(document).expect("a Secret");
    secret.metadata.namespace = None;
    secret.metadata.name = Some(name.to_string());
    secret.type_ = Some("kubernetes.io/tls".into());
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret is created");
}

#[tokio::test]
async fn the_leader_writes_gateway_api_status_only_when_it_differs_keeps_other_controllers_and_reasserts_it_in_a_new_term()
 {
    let kit = Kit::start_with(KitOptions {
        gateway_api: true,
        ..KitOptions::default()
    });
    let client = kit.admin().await;
    let ns = kit.temp_ns("gateway-status").await;
    for name in ["infra", "apps"] {
        let namespace: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": name } })).expect("a Namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("the namespace is created");
    }
    tls_secret(&client, "infra", "site-tls").await;
    service(&client, "infra", "web", 8080).await;

    let classes = gateway_api(&client, "v1", "GatewayClass", "gatewayclasses", None);
    let gateways = gateway_api(&client, "v1", "Gateway", "gateways", Some("infra"));
    let routes = gateway_api(&client, "v1", "HTTPRoute", "httproutes", Some("apps"));
    let grants = gateway_api(
        &client,
        "v1beta1",
        "ReferenceGrant",
        "referencegrants",
        Some("infra"),
    );
    create(
        &classes,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": { "name": "haptor" },
            "spec": { "controllerName": CONTROLLER },
        }),
    )
    .await;
    // Created with one listener, then given all three: generation 2, so observedGeneration
    // is seen to follow the object rather than be 1 by chance.
    create(
        &gateways,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": "gw", "namespace": "infra" },
            "spec": {
                "gatewayClassName": "haptor",
                "listeners": [{ "name": "http", "port": 80, "protocol": "HTTP",
                    "allowedRoutes": { "namespaces": { "from": "All" } } }],
            },
        }),
    )
    .await;
    gateways
        .patch(
            "gw",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "listeners": [
                { "name": "http", "port": 80, "protocol": "HTTP",
                  "allowedRoutes": { "namespaces": { "from": "All" } } },
                { "name": "https", "port": 443, "protocol": "HTTPS",
                  "tls": { "certificateRefs": [{ "name": "site-tls" }] } },
                { "name": "broken", "port": 443, "protocol": "HTTPS", "hostname": "other.example.com",
                  "tls": { "certificateRefs": [{ "name": "no-such-secret" }] } },
            ]}})),
        )
        .await
        .expect("the Gateway gets its listeners");
    // A Route of `apps` whose backend is a Service of `infra` (no grant yet), and one whose
    // parentRef names a listener the Gateway does not have.
    create(
        &routes,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": {
                "parentRefs": [{ "name": "gw", "namespace": "infra" }],
                "rules": [{ "backendRefs": [{ "name": "web", "namespace": "infra", "port": 8080 }] }],
            },
        }),
    )
    .await;
    create(
        &routes,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": "lost", "namespace": "apps" },
            "spec": {
                "parentRefs": [{ "name": "gw", "namespace": "infra", "sectionName": "nope" }],
                "rules": [{ "backendRefs": [{ "name": "web", "namespace": "infra", "port": 8080 }] }],
            },
        }),
    )
    .await;
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

    // The GatewayClass of haptor's controller is Accepted and SupportedVersion.
    let class = wait_for("the GatewayClass's status", &[&replica], || async {
        read(&classes, "haptor")
            .await
            .filter(|c| has(&c["status"]["conditions"], "Accepted", "True", "Accepted"))
    })
    .await;
    let conditions = &class["status"]["conditions"];
    assert!(
        has(conditions, "SupportedVersion", "True", "SupportedVersion"),
        "the GatewayClass is SupportedVersion: {conditions}"
    );
    assert_stamped(
        conditions,
        &class["metadata"]["generation"],
        "the GatewayClass",
    );

    // The Gateway is Accepted and Programmed at the publish address; its listener `http`
    // serves, takes HTTPRoutes and GRPCRoutes and counts the one Route attached; `broken`
    // has a certificate reference that does not resolve, and the others serve regardless.
    let gateway = wait_for("the Gateway's status", &[&replica], || async {
        read(&gateways, "gw").await.filter(|g| {
            has(
                &g["status"]["conditions"],
                "Programmed",
                "True",
                "Programmed",
            ) && listener(g, "http").is_some_and(|l| l["attachedRoutes"] == json!(1))
        })
    })
    .await;
    let generation = &gateway["metadata"]["generation"];
    assert_eq!(generation, &json!(2), "the Gateway's spec changed once");
    let status = &gateway["status"];
    assert!(
        has(&status["conditions"], "Accepted", "True", "Accepted"),
        "the Gateway is Accepted: {status}"
    );
    assert_stamped(&status["conditions"], generation, "the Gateway");
    assert_eq!(
        status["addresses"],
        json!([{ "type": "IPAddress", "value": PUBLISHED }]),
        "the Gateway's address is the publish address"
    );
    let http = listener(&gateway, "http").expect("listener http");
    for type_ in ["Accepted", "Programmed", "ResolvedRefs"] {
        assert!(
            has(&http["conditions"], type_, "True", type_),
            "listener http is {type_}: {http}"
        );
    }
    assert_eq!(
        http["supportedKinds"],
        json!([{ "group": GROUP, "kind": "HTTPRoute" }, { "group": GROUP, "kind": "GRPCRoute" }]),
        "listener http takes HTTPRoutes and GRPCRoutes"
    );
    let https = listener(&gateway, "https").expect("listener https");
    assert!(
        has(&https["conditions"], "Programmed", "True", "Programmed")
            && has(&https["conditions"], "ResolvedRefs", "True", "ResolvedRefs"),
        "listener https serves with its certificate: {https}"
    );
    assert_eq!(
        https["attachedRoutes"],
        json!(0),
        "https admits Routes of its own namespace only"
    );
    let broken = listener(&gateway, "broken").expect("listener broken");
    assert!(
        has(
            &broken["conditions"],
            "ResolvedRefs",
            "False",
            "InvalidCertificateRef"
        ),
        "listener broken's certificate does not resolve: {broken}"
    );
    assert!(
        condition(&broken["conditions"], "Programmed").is_some_and(|c| c["status"] == "False"),
        "listener broken is not programmed: {broken}"
    );
    for name in ["http", "https", "broken"] {
        let conditions = &listener(&gateway, name).expect("the listener")["conditions"];
        assert_stamped(conditions, generation, &format!("listener {name}"));
    }

    // The Route attaches; its backend in another namespace is refused without a grant.
    let route = wait_for("the Route's RefNotPermitted", &[&replica], || async {
        resolved(read(&routes, "web").await, "False", "RefNotPermitted")
    })
    .await;
    let ours = parents_of(&route, CONTROLLER)[0];
    assert_eq!(
        ours["parentRef"],
        json!({ "group": GROUP, "kind": "Gateway", "namespace": "infra", "name": "gw" }),
        "the parent entry names the parentRef"
    );
    assert_stamped(
        &ours["conditions"],
        &route["metadata"]["generation"],
        "the Route",
    );
    assert!(
        route["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["manager"] == "haptor"
                && f["operation"] == "Apply"
                && f["subresource"] == "status"),
        "the status is applied by field manager haptor: {}",
        route["metadata"]["managedFields"]
    );
    // A parentRef naming no listener of the Gateway.
    let lost = wait_for("the lost Route's NoMatchingParent", &[&replica], || async {
        read(&routes, "lost").await.filter(|r| {
            haptor_conditions(r).is_some_and(|c| has(c, "Accepted", "False", "NoMatchingParent"))
        })
    })
    .await;
    assert_stamped(
        haptor_conditions(&lost).expect("haptor's parent"),
        &lost["metadata"]["generation"],
        "the lost Route",
    );

    // A render caused by an unrelated change (a new Service `apps/web`, which gets a backend
    // because a Route names `web`: the library makes backends for the Services Routes name)
    // does not write
    // the unchanged statuses again; nor does one that changes other objects' status: a
    // second Route attached to `http` (its one match, `/`, is `web`'s, and the older Route
    // keeps it: haproxy.cfg may stay the same bytes while the status changes). The writer goes
    // through the objects in key order (the Gateway, then HTTPRoutes by namespace and
    // name), so once `zz-second` has its status, the pass that wrote it has been past `lost`
    // and `web`.
    let (web_version, lost_version) = (resource_version(&route), resource_version(&lost));
    service(&client, "apps", "web", 80).await;
    wait_for("the render with the new Service", &[&replica], || async {
        Api::<HAProxyCfg>::namespaced(client.clone(), &ns)
            .get_opt("haptor-config")
            .await
            .ok()
            .flatten()
            .and_then(|c| decode_content(&c.spec).ok())
            .filter(|content| content.contains("backend gw_apps_web_80"))
    })
    .await;
    create(
        &routes,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": { "name": "zz-second", "namespace": "apps" },
            "spec": {
                "parentRefs": [{ "name": "gw", "namespace": "infra", "sectionName": "http" }],
                "rules": [{ "backendRefs": [{ "name": "web", "port": 80 }] }],
            },
        }),
    )
    .await;
    wait_for("the second Route's status", &[&replica], || async {
        resolved(read(&routes, "zz-second").await, "True", "ResolvedRefs")
    })
    .await;
    let gateway = read(&gateways, "gw").await.expect("the Gateway");
    assert_eq!(
        listener(&gateway, "http").expect("listener http")["attachedRoutes"],
        json!(2),
        "listener http counts both attached Routes"
    );
    let route = read(&routes, "web").await.expect("the Route");
    let lost = read(&routes, "lost").await.expect("the Route");
    assert_eq!(
        (resource_version(&route), resource_version(&lost)),
        (web_version, lost_version),
        "the unchanged Routes' status is not written again"
    );

    // Another controller's parent entry, written by the test, stays when haptor writes.
    let accepted_at = condition(
        haptor_conditions(&route).expect("haptor's parent"),
        "Accepted",
    )
    .expect("Accepted")["lastTransitionTime"]
        .clone();
    let mut parents = route["status"]["parents"].clone();
    let theirs = json!({
        "controllerName": OTHER_CONTROLLER,
        "parentRef": { "group": GROUP, "kind": "Gateway", "namespace": "infra", "name": "theirs" },
        "conditions": [{
            "type": "Accepted", "status": "True", "reason": "Accepted",
            "message": "attached by another controller", "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
    });
    parents
        .as_array_mut()
        .expect("parents")
        .push(theirs.clone());
    routes
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "resourceVersion": resource_version(&route) },
                "status": { "parents": parents },
            })),
        )
        .await
        .expect("the other controller's parent is added");

    // A ReferenceGrant lets HTTPRoutes of `apps` refer to Services of `infra`.
    create(
        &grants,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": { "name": "apps-to-services", "namespace": "infra" },
            "spec": {
                "from": [{ "group": GROUP, "kind": "HTTPRoute", "namespace": "apps" }],
                "to": [{ "group": "", "kind": "Service" }],
            },
        }),
    )
    .await;
    let route = wait_for("the Route's ResolvedRefs", &[&replica], || async {
        resolved(read(&routes, "web").await, "True", "ResolvedRefs")
    })
    .await;
    assert_eq!(
        parents_of(&route, OTHER_CONTROLLER),
        [&theirs],
        "the other controller's parent is kept as it was"
    );
    let conditions = haptor_conditions(&route).expect("haptor's parent");
    assert_stamped(conditions, &route["metadata"]["generation"], "the Route");
    assert_eq!(
        condition(conditions, "Accepted").expect("Accepted")["lastTransitionTime"],
        accepted_at,
        "a condition that did not change keeps its transition time"
    );

    // The grant is gone: refused again, the other controller's parent still kept.
    grants
        .delete("apps-to-services", &DeleteParams::default())
        .await
        .expect("the grant is deleted");
    let route = wait_for("the Route's RefNotPermitted again", &[&replica], || async {
        resolved(read(&routes, "web").await, "False", "RefNotPermitted")
    })
    .await;
    assert_eq!(
        parents_of(&route, OTHER_CONTROLLER),
        [&theirs],
        "the other controller's parent is still kept"
    );
    let log = replica.log_text();
    assert!(!log.contains(WRITE_FAILED), "no write failed: {log}");
    drop(replica);

    // Someone clears the Route's status; a new haptor (a new leadership term) writes it
    // again.
    let cleared = routes
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "parents": [] } })),
        )
        .await
        .expect("the Route's status is cleared");
    let cleared = serde_json::to_value(cleared).expect("JSON");
    assert_eq!(
        cleared["status"]["parents"],
        json!([]),
        "the status is cleared"
    );
    let replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "solo-2",
        &["--publish-address", PUBLISHED],
    );
    let route = wait_for("the Route's status written again", &[&replica], || async {
        resolved(read(&routes, "web").await, "False", "RefNotPermitted")
    })
    .await;
    assert_stamped(
        haptor_conditions(&route).expect("haptor's parent"),
        &route["metadata"]["generation"],
        "the Route",
    );
    assert!(
        parents_of(&route, OTHER_CONTROLLER).is_empty(),
        "nothing of the cleared status comes back but haptor's own"
    );
    let log = replica.log_text();
    assert!(!log.contains(WRITE_FAILED), "no write failed: {log}");
}
