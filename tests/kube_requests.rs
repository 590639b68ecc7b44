//! The exact requests haptor sends to the Kubernetes API, checked against the verifier mock
//! tier (`tests/support/verifier.rs`): a `kube::Client` whose requests a scenario asserts —
//! method, path and query, body — and answers, failing on a missing or extra one. First the
//! publication of a rendered config as the HAProxyCfg writer will do it (server-side apply
//! of the spec, then of the status through `/status`, both as field manager `haptor`,
//! forced, with haptor's own types as the bodies); then that the verifier itself fails when
//! the code under test sends less, more or something else than the scenario says.

#[path = "support/verifier.rs"]
mod verifier;

use haptor::pure::config::{
    AuxiliaryFileEntry, AuxiliaryFileSummary, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus,
    InstanceStatus,
};
use http::StatusCode;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use verifier::{Expect, mock_client};

const NS: &str = "haptor";
const NAME: &str = "haptor-config";
const PATH: &str = "/apis/haptor.dev/v1alpha1/namespaces/haptor/haproxycfgs/haptor-config";
const APPLY: &str = "application/apply-patch+yaml";

fn spec() -> HAProxyCfgSpec {
    HAProxyCfgSpec {
        path: "/etc/haproxy/haproxy.cfg".into(),
        content: "global\n  daemon\n".into(),
        checksum: "sha256:0123".into(),
        auxiliary_files: AuxiliaryFileSummary {
            maps: vec![AuxiliaryFileEntry {
                name: "routes.map".into(),
                path: "/etc/haproxy/maps/routes.map".into(),
                checksum: "sha256:4567".into(),
                size: 42,
            }],
            ..AuxiliaryFileSummary::default()
        },
    }
}

fn status() -> HAProxyCfgStatus {
    HAProxyCfgStatus {
        instances: vec![InstanceStatus {
            name: "haproxy-0".into(),
            deployed_at: Some("2026-12-01T10:00:00Z".into()),
            checksum: Some("sha256:0123".into()),
            consecutive_errors: 0,
            ..InstanceStatus::default()
        }],
        conditions: Vec::new(),
    }
}

/// An apply patch of one part (`spec` or `status`) of the HAProxyCfg.
fn apply_body(part: &str, value: Value) -> Value {
    json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HAProxyCfg",
        "metadata": { "name": NAME },
        part: value,
    })
}

/// What the apiserver answers an apply with: the object as it now stands.
fn stored(spec: &HAProxyCfgSpec, status: Option<&HAProxyCfgStatus>) -> Value {
    let mut object = json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HAProxyCfg",
        "metadata": { "name": NAME, "namespace": NS, "resourceVersion": "7", "generation": 1 },
        "spec": spec,
    });
    if let Some(status) = status {
        object["status"] = json!(status);
    }
    object
}

/// Publishes a rendered config the way the HAProxyCfg writer is to: the spec by
/// server-side apply, then the per-instance status through the status subresource, both as
/// field manager `haptor` and forced (the leader owns these fields, whoever wrote them
/// last).
async fn publish(
    client: Client,
    spec: &HAProxyCfgSpec,
    status: &HAProxyCfgStatus,
) -> kube::Result<HAProxyCfg> {
    let api = Api::<HAProxyCfg>::namespaced(client, NS);
    let params = PatchParams::apply("haptor").force();
    api.patch(
        NAME,
        &params,
        &Patch::Apply(apply_body("spec", json!(spec))),
    )
    .await?;
    api.patch_status(
        NAME,
        &params,
        &Patch::Apply(apply_body("status", json!(status))),
    )
    .await
}

/// The two requests [`publish`] must send.
fn publication() -> Vec<Expect> {
    let (spec, status) = (spec(), status());
    vec![
        Expect::patch(&format!("{PATH}?&force=true&fieldManager=haptor"))
            .content_type(APPLY)
            .body(apply_body("spec", json!(spec)))
            .reply(StatusCode::OK, stored(&spec, None)),
        Expect::patch(&format!("{PATH}/status?&force=true&fieldManager=haptor"))
            .content_type(APPLY)
            .body(apply_body("status", json!(status)))
            .reply(StatusCode::OK, stored(&spec, Some(&status))),
    ]
}

#[tokio::test]
async fn publishing_a_config_applies_its_spec_then_its_status_as_field_manager_haptor() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(publication());
    let published = publish(client, &spec(), &status())
        .await
        .expect("both applies answered 200");
    scenario.finished().await;
    assert_eq!(published.spec, spec());
    assert_eq!(published.status, Some(status()));
    // The body is haptor's wire format: camelCase, empty lists left out.
    let body = json!(status());
    assert_eq!(body["instances"][0]["deployedAt"], "2026-12-01T10:00:00Z");
    assert_eq!(body["instances"][0]["consecutiveErrors"], 0);
    assert!(body.get("conditions").is_none() && body["instances"][0].get("lastError").is_none());
}

#[tokio::test]
async fn an_apply_the_apiserver_refuses_fails_the_publication() {
    let (client, verifier) = mock_client();
    let mut scenario = publication();
    scenario.truncate(1);
    let refused = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
        "reason": "Conflict", "message": "Apply failed with 1 conflict"
    });
    let scenario = verifier.run(
        scenario
            .into_iter()
            .map(|e| e.reply(StatusCode::CONFLICT, refused.clone()))
            .collect(),
    );
    let error = publish(client, &spec(), &status())
        .await
        .expect_err("a 409 stops the publication before the status is written");
    scenario.finished().await;
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 409),
        "{error}"
    );
}

#[tokio::test]
#[should_panic(expected = "never sent (the client was dropped first)")]
async fn a_scenario_fails_when_an_expected_request_is_never_sent() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(publication());
    // Only the spec is applied: the status request the scenario expects never comes.
    let api = Api::<HAProxyCfg>::namespaced(client, NS);
    api.patch(
        NAME,
        &PatchParams::apply("haptor").force(),
        &Patch::Apply(apply_body("spec", json!(spec()))),
    )
    .await
    .expect("the spec apply is answered");
    drop(api);
    scenario.finished().await;
}

#[tokio::test]
#[should_panic(expected = "an extra request after the 2 expected ones: GET")]
async fn a_scenario_fails_on_a_request_after_the_last_expected_one() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(publication());
    publish(client.clone(), &spec(), &status())
        .await
        .expect("both applies answered 200");
    // Reading the object back is one request more than the scenario allows; its answer
    // never comes, so it runs beside the scenario.
    let reader = tokio::spawn(async move {
        let _ = Api::<HAProxyCfg>::namespaced(client, NS).get(NAME).await;
    });
    scenario.finished().await;
    reader.abort();
}

#[tokio::test]
#[should_panic(expected = "request 2 of 2, PATCH")]
async fn a_scenario_fails_when_a_body_differs() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(publication());
    let mut other = status();
    other.instances[0].consecutive_errors = 1;
    let _ = publish(client, &spec(), &other).await;
    scenario.finished().await;
}
