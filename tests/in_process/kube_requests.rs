//! The exact requests haptor sends to the Kubernetes API, checked against the verifier mock
//! tier (`tests/support/verifier.rs`): a `kube::Client` whose requests a scenario asserts —
//! method, path and query, body — and answers, failing on a missing or extra one. First the
//! publication of a rendered config by the HAProxyCfg writer (`KubePublishSink`): a
//! server-side apply of the spec (with its owner reference and size), then of the status
//! through `/status` (with the `ContentPublished` condition), both as field manager
//! `haptor`, forced; a new status for the same spec applies only the status; a refused
//! apply is retried with the latest value. Then that the verifier itself fails when the
//! code under test sends less, more or something else than the scenario says. Last the
//! leader Lease (coordination.k8s.io/v1) as the future elector is to take and renew it: a
//! GET finding none, a create with no transition counted, a renewal by replace at the stored
//! resourceVersion, and the scenario failing when the create counts a transition.

use crate::verifier;

use std::time::Duration;

use haptor::drivers::kube::publish::KubePublishSink;
use haptor::pure::config::{
    AuxiliaryFileEntry, AuxiliaryFileSummary, HAProxyCfg, HAProxyCfgSpec, HAProxyCfgStatus,
    InstanceStatus,
};
use haptor::seams::PublishSink;
use http::StatusCode;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus::{Registry, TextEncoder};
use serde_json::{Value, json};
use verifier::{Expect, mock_client};

const NS: &str = "haptor";
const NAME: &str = "haptor-config";
const PATH: &str = "/apis/haptor.dev/v1alpha1/namespaces/haptor/haproxycfgs/haptor-config";
const APPLY: &str = "application/apply-patch+yaml";
const JSON: &str = "application/json";
/// The wall clock of the sinks under test: the `ContentPublished` condition's time.
const NOW: &str = "2026-12-01T10:00:00Z";
/// How long a test waits for the sink's task to have written something.
const WRITE_WAIT: Duration = Duration::from_secs(30);

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
        ..HAProxyCfgSpec::default()
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
        ..HAProxyCfgStatus::default()
    }
}

/// [`status`] after one more instance reported.
fn second_status() -> HAProxyCfgStatus {
    let mut status = status();
    status.instances.push(InstanceStatus {
        name: "haproxy-1".into(),
        deployed_at: Some("2026-12-01T10:00:01Z".into()),
        checksum: Some("sha256:0123".into()),
        ..InstanceStatus::default()
    });
    status
}

/// The HAProxyTemplateConfig owning the HAProxyCfg.
fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "haptor.dev/v1alpha1".into(),
        kind: "HAProxyTemplateConfig".into(),
        name: NAME.into(),
        uid: "3f9a6c1e-2b4d-4c8a-9e7f-1a2b3c4d5e6f".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn clock() -> Timestamp {
    NOW.parse().expect("an RFC 3339 time")
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

/// The spec apply of [`spec`]: its owner in the metadata, its size beside the content
/// (16 bytes: stored as text, no `contentEncoding`).
fn spec_apply() -> Value {
    json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HAProxyCfg",
        "metadata": {
            "name": NAME,
            "ownerReferences": [{
                "apiVersion": "haptor.dev/v1alpha1",
                "kind": "HAProxyTemplateConfig",
                "name": NAME,
                "uid": "3f9a6c1e-2b4d-4c8a-9e7f-1a2b3c4d5e6f",
                "controller": true,
            }],
        },
        "spec": {
            "path": "/etc/haproxy/haproxy.cfg",
            "content": "global\n  daemon\n",
            "size": 16,
            "checksum": "sha256:0123",
            "auxiliaryFiles": {
                "maps": [{
                    "name": "routes.map",
                    "path": "/etc/haproxy/maps/routes.map",
                    "checksum": "sha256:4567",
                    "size": 42,
                }],
            },
        },
    })
}

/// `status` as the sink writes it: with the `ContentPublished` condition of a 16-byte text.
fn written_status(status: &HAProxyCfgStatus) -> Value {
    let mut value = json!(status);
    value["conditions"] = json!([{
        "type": "ContentPublished",
        "status": "True",
        "reason": "Published",
        "message": "the configuration (16 bytes) is stored as text",
        "lastTransitionTime": NOW,
    }]);
    value
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
        object["status"] = written_status(status);
    }
    object
}

/// The spec apply [`spec_apply`], answered `reply`.
fn expect_spec_apply() -> Expect {
    Expect::patch(&format!("{PATH}?&force=true&fieldManager=haptor"))
        .content_type(APPLY)
        .body(spec_apply())
}

/// The status apply of `status` (as [`written_status`]), answered with the stored object.
fn expect_status_apply(status: &HAProxyCfgStatus) -> Expect {
    Expect::patch(&format!("{PATH}/status?&force=true&fieldManager=haptor"))
        .content_type(APPLY)
        .body(apply_body("status", written_status(status)))
        .reply(StatusCode::OK, stored(&spec(), Some(status)))
}

/// The two requests of a first publication of [`spec`] and [`status`].
fn publication() -> Vec<Expect> {
    vec![
        expect_spec_apply().reply(StatusCode::OK, stored(&spec(), None)),
        expect_status_apply(&status()),
    ]
}

/// A [`KubePublishSink`] on a mock client, owned by [`owner`], its clock at [`NOW`], its
/// write counters in a registry of its own.
struct Publishing {
    sink: KubePublishSink,
    task: tokio::task::JoinHandle<()>,
    registry: Registry,
}

impl Publishing {
    fn start(client: Client) -> Publishing {
        let (sink, task) = KubePublishSink::start_with_clock(client, NS.into(), NAME.into(), clock);
        sink.set_owner(owner());
        let registry = Registry::new();
        sink.register_metrics(&registry)
            .expect("the write counters register");
        Publishing {
            sink,
            task,
            registry,
        }
    }

    /// `haptor_kube_writes_total{object="haproxycfg",part,result}`.
    fn writes(&self, part: &str, result: &str) -> u64 {
        let text = TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .expect("the metrics encode");
        let series = format!(
            r#"haptor_kube_writes_total{{object="haproxycfg",part="{part}",result="{result}"}} "#
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    /// Waits (bounded by [`WRITE_WAIT`]) until `n` writes of `part` ended with `result`.
    async fn wait_for_writes(&self, part: &str, result: &str, n: u64) {
        let deadline = tokio::time::Instant::now() + WRITE_WAIT;
        while self.writes(part, result) < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} {part} write(s) with result {result} within {WRITE_WAIT:?}; saw {}",
                self.writes(part, result)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Drops the sink and waits until its task, and with it its client, is gone.
    async fn stop(self) {
        drop(self.sink);
        tokio::time::timeout(WRITE_WAIT, self.task)
            .await
            .expect("the task ends once the sink is dropped")
            .expect("the task did not panic");
    }
}

#[tokio::test]
async fn publishing_a_config_applies_its_spec_with_its_owner_then_its_status_as_field_manager_haptor()
 {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(publication());
    let publishing = Publishing::start(client);
    publishing.sink.publish(&spec(), &status());
    publishing.wait_for_writes("status", "success", 1).await;
    assert_eq!(publishing.writes("spec", "success"), 1);
    assert_eq!(publishing.writes("spec", "failure"), 0);
    publishing.stop().await;
    scenario.finished().await;
    // The body is haptor's wire format: camelCase, empty lists left out.
    let body = json!(status());
    assert_eq!(body["instances"][0]["deployedAt"], "2026-12-01T10:00:00Z");
    assert_eq!(body["instances"][0]["consecutiveErrors"], 0);
    assert!(body.get("conditions").is_none() && body["instances"][0].get("lastError").is_none());
}

#[tokio::test]
async fn publishing_the_same_spec_again_with_a_new_status_applies_only_the_status() {
    let (client, verifier) = mock_client();
    let mut expected = publication();
    expected.push(expect_status_apply(&second_status()));
    let scenario = verifier.run(expected);
    let publishing = Publishing::start(client);
    publishing.sink.publish(&spec(), &status());
    publishing.wait_for_writes("status", "success", 1).await;
    publishing.sink.publish(&spec(), &second_status());
    publishing.wait_for_writes("status", "success", 2).await;
    // The same spec and status once more: nothing to write.
    publishing.sink.publish(&spec(), &second_status());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(publishing.writes("spec", "success"), 1);
    assert_eq!(publishing.writes("status", "success"), 2);
    publishing.stop().await;
    scenario.finished().await;
}

#[tokio::test]
async fn an_apply_the_apiserver_refuses_is_counted_and_retried_after_a_backoff_with_the_latest_status()
 {
    let (client, verifier) = mock_client();
    let refused = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
        "reason": "Conflict", "message": "Apply failed with 1 conflict"
    });
    let scenario = verifier.run(vec![
        expect_spec_apply().reply(StatusCode::CONFLICT, refused),
        // The retry, a second later, writes what was published meanwhile.
        expect_spec_apply().reply(StatusCode::OK, stored(&spec(), None)),
        expect_status_apply(&second_status()),
    ]);
    let publishing = Publishing::start(client);
    publishing.sink.publish(&spec(), &status());
    publishing.wait_for_writes("spec", "failure", 1).await;
    let refused_at = tokio::time::Instant::now();
    assert_eq!(publishing.writes("status", "success"), 0);
    publishing.sink.publish(&spec(), &second_status());
    publishing.wait_for_writes("status", "success", 1).await;
    // `refused_at` is when this test noticed the refusal, which a loaded machine can delay
    // well past the refusal itself; an immediate retry would take milliseconds, not half the
    // one-second backoff.
    assert!(refused_at.elapsed() >= Duration::from_millis(500));
    assert_eq!(publishing.writes("spec", "success"), 1);
    assert_eq!(publishing.writes("status", "failure"), 0);
    publishing.stop().await;
    scenario.finished().await;
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
        &Patch::Apply(spec_apply()),
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
    let publishing = Publishing::start(client.clone());
    publishing.sink.publish(&spec(), &status());
    publishing.wait_for_writes("status", "success", 1).await;
    publishing.stop().await;
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
    let publishing = Publishing::start(client);
    publishing.sink.publish(&spec(), &other);
    // The scenario fails at the status apply; the sink's retry has no apiserver left.
    scenario.finished().await;
}

// The leader Lease. haptor has no leader election yet: `acquire_lease` and `renew_lease`
// stand in for the future elector, and the scenarios below pin the requests it must make.

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/haptor/leases";
const LEASE: &str = "haptor-leader";
const HOLDER: &str = "haptor-6d5f8-x2k9q";
const LEASE_SECONDS: i32 = 15;
const ACQUIRED: &str = "2026-12-01T10:00:00.000000Z";
const RENEWED: &str = "2026-12-01T10:00:05.000000Z";

fn micro_time(at: &str) -> MicroTime {
    MicroTime(at.parse::<Timestamp>().expect("an RFC 3339 time"))
}

/// The Lease a candidate creates when there is none: held by `holder` for
/// [`LEASE_SECONDS`], acquired and renewed `now`, with `transitions` holder changes.
fn new_lease(holder: &str, now: &MicroTime, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            acquire_time: Some(now.clone()),
            renew_time: Some(now.clone()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// Takes the leader Lease when it does not exist yet, the simplest way `kube::Api<Lease>`
/// allows: a GET (404: there is none), then a create as field manager `haptor` holding it
/// from `now`, with no transition counted (nobody held it before). A Lease that exists is
/// returned as it is: taking it over once it expires is not pinned yet.
async fn acquire_lease(client: Client, holder: &str, now: &MicroTime) -> kube::Result<Lease> {
    let api = Api::<Lease>::namespaced(client, NS);
    match api.get_opt(LEASE).await? {
        Some(existing) => Ok(existing),
        None => {
            api.create(&lease_params(), &new_lease(holder, now, 0))
                .await
        }
    }
}

/// Renews a held Lease: the object as last stored, its renewTime moved to `now`, written
/// back whole by a replace (PUT) carrying its resourceVersion, so that a write by anyone
/// else meanwhile makes the renewal fail with 409 instead of being overwritten.
async fn renew_lease(client: Client, mut lease: Lease, now: &MicroTime) -> kube::Result<Lease> {
    if let Some(spec) = lease.spec.as_mut() {
        spec.renew_time = Some(now.clone());
    }
    Api::<Lease>::namespaced(client, NS)
        .replace(LEASE, &lease_params(), &lease)
        .await
}

fn lease_params() -> PostParams {
    PostParams {
        field_manager: Some("haptor".into()),
        ..PostParams::default()
    }
}

/// The Lease as the apiserver stores it, at `resource_version`, renewed at `renewed`.
fn stored_lease(resource_version: &str, renewed: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": LEASE,
            "namespace": NS,
            "uid": "0b6f3c2e-5a4d-4e8f-9c1b-2d3e4f5a6b7c",
            "resourceVersion": resource_version,
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {
            "holderIdentity": HOLDER,
            "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": ACQUIRED,
            "renewTime": renewed,
            "leaseTransitions": 0,
        },
    })
}

/// The three requests of acquiring the absent Lease and renewing it once.
fn lease_acquisition_and_renewal() -> Vec<Expect> {
    let not_found = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("leases.coordination.k8s.io \"{LEASE}\" not found"),
        "reason": "NotFound",
        "details": { "name": LEASE, "group": "coordination.k8s.io", "kind": "leases" },
        "code": 404
    });
    vec![
        Expect::get(&format!("{LEASES}/{LEASE}")).reply(StatusCode::NOT_FOUND, not_found),
        Expect::post(&format!("{LEASES}?&fieldManager=haptor"))
            .content_type(JSON)
            .body(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": { "name": LEASE },
                "spec": {
                    "holderIdentity": HOLDER,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "acquireTime": ACQUIRED,
                    "renewTime": ACQUIRED,
                    "leaseTransitions": 0,
                },
            }))
            .reply(StatusCode::CREATED, stored_lease("101", ACQUIRED)),
        Expect::put(&format!("{LEASES}/{LEASE}?&fieldManager=haptor"))
            .content_type(JSON)
            // The stored object sent back whole, resourceVersion included.
            .body(stored_lease("101", RENEWED))
            .reply(StatusCode::OK, stored_lease("102", RENEWED)),
    ]
}

/// Pins the requests the future leader elector must make (it does not exist yet; the code
/// under test is `acquire_lease` and `renew_lease` above): a GET that finds no Lease, a
/// create holding it with `leaseTransitions` 0, then a renewal that replaces the stored
/// object at its resourceVersion with only renewTime moved.
#[tokio::test]
async fn acquiring_an_absent_lease_creates_it_and_renewing_replaces_it_at_its_resource_version() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(lease_acquisition_and_renewal());
    let acquired = acquire_lease(client.clone(), HOLDER, &micro_time(ACQUIRED))
        .await
        .expect("the create is answered 201");
    assert_eq!(acquired.metadata.resource_version.as_deref(), Some("101"));
    let renewed = renew_lease(client, acquired, &micro_time(RENEWED))
        .await
        .expect("the replace is answered 200");
    scenario.finished().await;
    assert_eq!(renewed.metadata.resource_version.as_deref(), Some("102"));
    let spec = renewed.spec.expect("a spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(HOLDER));
    assert_eq!(spec.renew_time, Some(micro_time(RENEWED)));
    assert_eq!(spec.acquire_time, Some(micro_time(ACQUIRED)));
}

/// An elector that counted its first acquisition as a holder change sends
/// `leaseTransitions: 1`: the scenario fails at that request.
#[tokio::test]
#[should_panic(
    expected = "request 2 of 3, POST /apis/coordination.k8s.io/v1/namespaces/haptor/leases?&fieldManager=haptor: body differs"
)]
async fn a_lease_scenario_fails_when_the_create_counts_a_transition() {
    let (client, verifier) = mock_client();
    let scenario = verifier.run(lease_acquisition_and_renewal());
    let api = Api::<Lease>::namespaced(client, NS);
    let absent = api.get_opt(LEASE).await.expect("the GET is answered 404");
    assert!(absent.is_none());
    let _ = api
        .create(
            &lease_params(),
            &new_lease(HOLDER, &micro_time(ACQUIRED), 1),
        )
        .await;
    drop(api);
    scenario.finished().await;
}
