//! The Gateway API's CRDs in the test kit: `scripts/test-peers gateway-api-crds` copies them
//! out of `sigs.k8s.io/gateway-api` at the version `tools/gateway-api` pins
//! (`TEST_ASSET_GATEWAY_API_CRDS`, the experimental channel), and a kit started with
//! `KitOptions { gateway_api: true, .. }` installs them. What is proven: the real
//! kube-apiserver then serves every kind the Gateway API library and its status writer use,
//! at the versions they are written for; a GatewayClass, a Gateway and an HTTPRoute pass its
//! validation and read back as written; and the routes' and the Gateway's status is a
//! subresource that takes a status such as a controller writes, while a write of the object
//! itself leaves that status alone.

use crate::kube_kit;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::pinned_kind;
use serde_json::{Value, json};

use kube_kit::{Kit, KitOptions};

const GROUP: &str = "gateway.networking.k8s.io";
/// The controller name the status below is written as (the chart's default).
const CONTROLLER: &str = "haptor.dev/gateway-controller";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), plural)
}

/// Creates `object` through `api` and returns it as the server stored it.
async fn create(api: &Api<DynamicObject>, object: Value) -> DynamicObject {
    let what = format!("{} {}", object["kind"], object["metadata"]["name"]);
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("the API server refused {what}: {e}"))
}

/// A metav1.Condition as a controller writes it.
fn condition(type_: &str, reason: &str, generation: i64) -> Value {
    json!({
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": format!("{type_} by haptor"),
        "observedGeneration": generation,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    })
}

#[tokio::test]
async fn the_test_kit_installs_the_gateway_api_crds_and_the_api_server_serves_their_kinds() {
    let kit = Kit::start_with(KitOptions {
        gateway_api: true,
        ..KitOptions::default()
    });
    let client = kit.admin().await;

    // Every kind, at the versions the API server serves it (experimental channel: the route
    // kinds' older versions are served next to v1).
    for (kind, versions) in [
        ("GatewayClass", &["v1", "v1beta1"][..]),
        ("Gateway", &["v1", "v1beta1"]),
        ("HTTPRoute", &["v1", "v1beta1"]),
        ("GRPCRoute", &["v1"]),
        ("ReferenceGrant", &["v1", "v1beta1"]),
        ("TLSRoute", &["v1", "v1alpha2", "v1alpha3"]),
        ("TCPRoute", &["v1", "v1alpha2"]),
        ("UDPRoute", &["v1", "v1alpha2"]),
    ] {
        for version in versions {
            let gvk = GroupVersionKind::gvk(GROUP, version, kind);
            pinned_kind(&client, &gvk)
                .await
                .unwrap_or_else(|e| panic!("{GROUP}/{version} {kind} is not served: {e}"));
        }
    }

    let ns = kit.temp_ns("gateway-api").await;
    let class_name = format!("haptor-{ns}");
    let classes =
        Api::<DynamicObject>::all_with(client.clone(), &resource("GatewayClass", "gatewayclasses"));
    let gateways = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &resource("Gateway", "gateways"),
    );
    let routes = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &resource("HTTPRoute", "httproutes"),
    );

    create(
        &classes,
        json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "GatewayClass",
            "metadata": { "name": class_name },
            "spec": { "controllerName": CONTROLLER },
        }),
    )
    .await;
    create(
        &gateways,
        json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "Gateway",
            "metadata": { "name": "edge" },
            "spec": {
                "gatewayClassName": class_name,
                "listeners": [
                    { "name": "http", "port": 80, "protocol": "HTTP",
                      "allowedRoutes": { "namespaces": { "from": "Same" } } },
                ],
            },
        }),
    )
    .await;
    create(
        &routes,
        json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "HTTPRoute",
            "metadata": { "name": "app" },
            "spec": {
                "parentRefs": [{ "name": "edge", "sectionName": "http" }],
                "hostnames": ["app.example.com"],
                "rules": [{
                    "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                    "backendRefs": [{ "name": "app", "port": 8080 }],
                }],
            },
        }),
    )
    .await;

    // Read back as written (the server's defaults added, nothing of ours changed).
    let class = classes.get(&class_name).await.expect("the GatewayClass");
    assert_eq!(class.data["spec"]["controllerName"], CONTROLLER);
    let gateway = gateways.get("edge").await.expect("the Gateway");
    assert_eq!(
        gateway.data["spec"]["gatewayClassName"],
        class_name.as_str()
    );
    assert_eq!(gateway.data["spec"]["listeners"][0]["port"], 80);
    let route = routes.get("app").await.expect("the HTTPRoute");
    let spec = &route.data["spec"];
    assert_eq!(spec["hostnames"], json!(["app.example.com"]));
    assert_eq!(spec["parentRefs"][0]["name"], "edge");
    assert_eq!(
        spec["rules"][0]["matches"][0]["path"],
        json!({ "type": "PathPrefix", "value": "/api" })
    );
    assert_eq!(spec["rules"][0]["backendRefs"][0]["name"], "app");
    let generation = route.metadata.generation.expect("a generation");

    // The route's status through its status subresource, as a controller writes it.
    let params = PatchParams::default();
    let status = json!({
        "status": {
            "parents": [{
                "parentRef": { "group": GROUP, "kind": "Gateway", "name": "edge",
                               "sectionName": "http" },
                "controllerName": CONTROLLER,
                "conditions": [
                    condition("Accepted", "Accepted", generation),
                    condition("ResolvedRefs", "ResolvedRefs", generation),
                ],
            }],
        }
    });
    let patched = routes
        .patch_status("app", &params, &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("the HTTPRoute's status subresource refused a status: {e}"));
    let parent = &patched.data["status"]["parents"][0];
    assert_eq!(parent["controllerName"], CONTROLLER);
    assert_eq!(parent["conditions"][0]["type"], "Accepted");
    assert_eq!(
        patched.metadata.generation,
        Some(generation),
        "a status write does not move the generation"
    );
    // A status that breaks the schema (no controllerName) is refused there.
    let invalid = json!({ "status": { "parents": [{ "parentRef": { "name": "edge" },
        "conditions": [] }] } });
    let refused = routes
        .patch_status("app", &params, &Patch::Merge(&invalid))
        .await
        .expect_err("a parent status without controllerName is refused");
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 422),
        "{refused}"
    );
    // A write of the object leaves the status alone: it is a subresource.
    let relabel = json!({ "metadata": { "labels": { "haptor.dev/test": "relabel" } },
        "status": { "parents": [] } });
    let relabelled = routes
        .patch("app", &params, &Patch::Merge(&relabel))
        .await
        .expect("a label patch");
    assert_eq!(
        relabelled.data["status"]["parents"][0]["controllerName"],
        CONTROLLER
    );

    // The Gateway's status subresource too (the status writer's other object).
    let gateway_status = json!({
        "status": {
            "conditions": [
                condition("Accepted", "Accepted", 1),
                condition("Programmed", "Programmed", 1),
            ],
            "listeners": [{
                "name": "http",
                "supportedKinds": [{ "group": GROUP, "kind": "HTTPRoute" }],
                "attachedRoutes": 1,
                "conditions": [
                    condition("Accepted", "Accepted", 1),
                    condition("Programmed", "Programmed", 1),
                    condition("ResolvedRefs", "ResolvedRefs", 1),
                ],
            }],
        }
    });
    let gateway = gateways
        .patch_status("edge", &params, &Patch::Merge(&gateway_status))
        .await
        .unwrap_or_else(|e| panic!("the Gateway's status subresource refused a status: {e}"));
    assert_eq!(gateway.data["status"]["listeners"][0]["attachedRoutes"], 1);
}
