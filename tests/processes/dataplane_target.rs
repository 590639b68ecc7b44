//! The Data Plane API v3 deploy target against an in-process axum stub of the API that
//! answers as the contract documents: Basic auth on every path (401 without), `?version=N`
//! on configuration pushes (409 `version in configuration file is X, given version is Y`),
//! 202 + `Reload-ID` for a queued reload whose status goes `in_progress` → `succeeded` (or
//! `failed` for a configuration holding `# fail-reload`, which also restores the previous
//! configuration), multipart `file_upload` storage creation, storage replace with
//! `skip_reload`, a delete refused while the configuration still names the file, and
//! `Configuration-Version` on every answer. Like the real API (v3.4.0 measured in
//! `dataplane_api.rs`) it prints the configuration it stores again — two-space indents, a
//! name for an anonymous `defaults`, a `# _md5hash=` line above the version — with that
//! checksum in `Configuration-Checksum`, so a target comparing texts sees a change that is
//! not there; and it lists the loaded maps (`include_unmanaged=true` to see maps outside
//! its maps directory) with the `storage_name` the runtime entry endpoints address them by.
//! The stub records every request.

use crate::dataplane_stub;

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};

use haptor::drivers::dataplane::{
    DEPLOYED_CONFIG_FILE, DEPLOYED_FILE, DataplaneTarget, EPOCH_FILE,
};
use haptor::pure::deploy::plan::plan;
use haptor::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget, ReloadReason};
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};

use dataplane_stub::*;

// ---------------------------------------------------------------------------------------
// Renders and requests.

fn config(servers: &str, extra: &str) -> String {
    format!(
        "global\n    default-path origin /etc/haproxy\n    maxconn 100\n{extra}\nfrontend fe\n    bind :8080\n    http-request set-var(txn.backend) req.hdr(host),lower,map(maps/hosts.map,be)\n    default_backend be\n\nbackend be\n{servers}"
    )
}

fn aux(kind: AuxKind, path: &str, content: &str) -> (String, AuxFile) {
    (
        path.to_string(),
        AuxFile {
            kind,
            name: path.rsplit('/').next().unwrap_or(path).to_string(),
            path: path.to_string(),
            content: content.to_string(),
        },
    )
}

fn render(haproxy_cfg: String, files: Vec<(String, AuxFile)>) -> RenderedConfig {
    RenderedConfig {
        haproxy_cfg,
        aux_files: files.into_iter().collect(),
        ..Default::default()
    }
}

fn hosts_map(content: &str) -> (String, AuxFile) {
    aux(AuxKind::Map, "maps/hosts.map", content)
}

fn request(rendered: &RenderedConfig, epoch: u64, generation: u64) -> DeployRequest {
    DeployRequest {
        rendered: Arc::new(rendered.clone()),
        checksum: rendered.checksum(),
        epoch,
        generation,
        timeout: haptor::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT,
    }
}

fn position(requests: &[Recorded], found: impl Fn(&Recorded) -> bool) -> Option<usize> {
    requests.iter().position(found)
}

fn is_push(r: &Recorded) -> bool {
    r.is(Method::POST, &format!("{API}/configuration/raw"))
}

fn is_reload_poll(r: &Recorded) -> bool {
    r.method == Method::GET && r.path.starts_with(&format!("{API}/reloads/"))
}

fn is_aux_storage_write(r: &Recorded) -> bool {
    r.is_write()
        && r.path.starts_with(&format!("{API}/storage/"))
        && [EPOCH_FILE, DEPLOYED_FILE, DEPLOYED_CONFIG_FILE]
            .iter()
            .all(|own| !r.path.ends_with(own) && !r.body.contains(&format!("filename=\"{own}\"")))
}

fn is_worker_read(r: &Recorded) -> bool {
    r.is(Method::GET, &format!("{API}/runtime/info"))
}

/// A certificate file the stub's check accepts (a certificate block and a key block).
const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

// ---------------------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn a_first_deployment_uploads_files_then_pushes_haproxy_cfg_then_waits_for_the_reload() {
    let stub = Stub::start("v3.2.3 4a1b2c3").await;
    let target = stub.target();
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![
            hosts_map("a.example be\n"),
            aux(
                AuxKind::File,
                "general/page.http",
                "HTTP/1.0 503\r\n\r\nbusy\n",
            ),
            aux(
                AuxKind::Cert,
                "ssl/site.pem",
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n",
            ),
        ],
    );

    let outcome = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed");

    assert!(outcome.reloaded && !outcome.unchanged, "{outcome:?}");
    assert_eq!(
        outcome.reload_reason,
        Some(ReloadReason::StateUnknown),
        "a first deployment knows nothing the pod runs"
    );
    let requests = stub.requests();
    let push = position(&requests, is_push).expect("a configuration push");
    assert_eq!(requests.iter().filter(|r| is_push(r)).count(), 1);
    assert!(!requests[push].query.contains_key("skip_reload"));
    let uploads: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| is_aux_storage_write(r))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(uploads.len(), rendered.aux_files.len(), "{requests:#?}");
    assert!(uploads.iter().all(|&i| i < push), "files go first");
    let polls: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| is_reload_poll(r))
        .map(|(i, _)| i)
        .collect();
    assert!(polls.len() >= 2, "polled until the reload left in_progress");
    assert!(polls.iter().all(|&i| i > push));

    let state = stub.state();
    assert_eq!(state.config, rendered.haproxy_cfg);
    assert_eq!(
        state.unexpected_reloads, 0,
        "every storage write skipped its reload"
    );
    for file in rendered.aux_files.values() {
        let kind = match file.kind {
            AuxKind::Map => "maps",
            AuxKind::Cert => "ssl_certificates",
            AuxKind::File | AuxKind::CrtList => "general",
        };
        assert_eq!(
            state.storage.get(&(kind.to_string(), file.name.clone())),
            Some(&file.content),
            "{}",
            file.path
        );
    }
    assert_eq!(
        state
            .storage
            .get(&("general".to_string(), EPOCH_FILE.to_string()))
            .map(|e| e.trim().to_string()),
        Some("1".to_string())
    );
}

#[tokio::test]
async fn an_endpoint_only_change_goes_through_the_runtime_api_without_a_reload() {
    let stub = Stub::start("v3.3.1 9f8e7d6").await;
    let target = stub.target();
    let before = render(
        config(
            "    server s1 10.0.0.1:80 weight 10\n    server s2 127.0.0.1:1 disabled\n",
            "",
        ),
        vec![hosts_map("a.example be\nold.example be\n")],
    );
    let after = render(
        config(
            "    server s1 10.0.0.2:8080 weight 20\n    server s2 10.0.0.9:80\n",
            "",
        ),
        vec![hosts_map("a.example be\nb.example be\n")],
    );
    target
        .deploy(&request(&before, 1, 1))
        .await
        .expect("first deployment");
    stub.clear_requests();

    let outcome = target
        .deploy(&request(&after, 1, 2))
        .await
        .expect("second deployment");

    let expected_plan = plan(Some(&before), &after).expect("plans");
    assert!(
        !expected_plan.reload,
        "the test needs a runtime-only change"
    );
    let runtime_ops = expected_plan
        .operations
        .iter()
        .filter(|op| op.is_runtime())
        .count();
    assert!(!outcome.reloaded);
    assert_eq!(outcome.runtime_changes, runtime_ops);
    let requests = stub.requests();
    assert!(
        !requests.iter().any(is_reload_poll),
        "no reload to wait for"
    );
    let pushes: Vec<&Recorded> = requests.iter().filter(|r| is_push(r)).collect();
    assert!(
        pushes.iter().all(|p| p.query_is("skip_reload", "true")),
        "haproxy.cfg is only persisted, never reloaded: {pushes:#?}"
    );
    let server = |name: &str| -> Value {
        let path = format!("{API}/runtime/backends/be/servers/{name}");
        let call = requests
            .iter()
            .find(|r| r.is(Method::PUT, &path))
            .unwrap_or_else(|| panic!("no runtime call for {name}: {requests:#?}"));
        serde_json::from_str(&call.body).expect("JSON body")
    };
    assert_eq!(
        server("s1"),
        json!({ "address": "10.0.0.2", "port": 8080, "weight": 20 })
    );
    assert_eq!(
        server("s2"),
        json!({ "address": "10.0.0.9", "port": 80, "admin_state": "ready" })
    );
    let added = requests
        .iter()
        .find(|r| r.is(Method::POST, &format!("{API}/runtime/maps/hosts/entries")))
        .expect("map entry added");
    assert_eq!(
        serde_json::from_str::<Value>(&added.body).expect("JSON"),
        json!({ "key": "b.example", "value": "be" })
    );
    assert!(requests.iter().any(|r| r.is(
        Method::DELETE,
        &format!("{API}/runtime/maps/hosts/entries/old.example")
    )));
    let map_file = requests
        .iter()
        .find(|r| r.is(Method::PUT, &format!("{API}/storage/maps/hosts.map")))
        .expect("map file rewritten");
    assert!(map_file.query_is("skip_reload", "true"));

    let state = stub.state();
    assert_eq!(state.config, after.haproxy_cfg, "the file keeps the change");
    assert_eq!(state.unexpected_reloads, 0);
    assert_eq!(
        state.runtime_maps.get("hosts"),
        Some(&vec![
            ("a.example".to_string(), "be".to_string()),
            ("b.example".to_string(), "be".to_string())
        ])
    );
}

#[tokio::test]
async fn an_api_before_3_3_1_gets_address_and_weight_changes_as_runtime_actions() {
    let stub = Stub::start("v3.2.15 1234567").await;
    let target = stub.target();
    let before = render(config("    server s1 10.0.0.1:80 weight 10\n", ""), vec![]);
    let after = render(
        config("    server s1 10.0.0.2:8080 weight 30\n", ""),
        vec![],
    );
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(!outcome.reloaded);
    let requests = stub.requests();
    let push = requests
        .iter()
        .find(|r| is_push(r))
        .expect("persisting push");
    assert!(push.query_is("skip_reload", "true"));
    assert_eq!(
        push.runtime_actions.as_deref(),
        Some("SetServerAddr be s1 10.0.0.2 8080;SetServerWeight be s1 30")
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.path.contains("/runtime/backends/")),
        "the runtime server endpoint cannot set these fields before v3.3.1"
    );
}

#[tokio::test]
async fn a_version_conflict_rereads_the_version_and_the_push_succeeds() {
    let stub = Stub::start("v3.2.0").await;
    stub.state().conflicts_to_inject = 1;
    let target = stub.target();
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let outcome = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed after one retry");

    assert!(outcome.reloaded);
    let requests = stub.requests();
    let pushes: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| is_push(r))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(pushes.len(), 2, "one conflict, one retry");
    let version_of = |i: usize| -> u64 {
        requests[i].query["version"]
            .parse()
            .expect("numeric version")
    };
    assert_eq!(
        version_of(pushes[1]),
        version_of(pushes[0]) + 1,
        "the retry carries the version the other writer left"
    );
    assert!(
        requests[pushes[0]..pushes[1]]
            .iter()
            .any(|r| r.is(Method::GET, &format!("{API}/configuration/version"))),
        "the version is re-read between the attempts"
    );
    assert_eq!(stub.state().config, rendered.haproxy_cfg);
}

#[tokio::test]
async fn an_outdated_answer_starts_the_push_over_from_a_fresh_version() {
    let stub = Stub::start("v3.2.0").await;
    stub.state().outdated_to_inject = 1;
    let target = stub.target();
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let outcome = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed after starting over");

    assert!(outcome.reloaded);
    let requests = stub.requests();
    let pushes: Vec<&Recorded> = requests.iter().filter(|r| is_push(r)).collect();
    assert_eq!(pushes.len(), 2);
    assert_ne!(pushes[0].query["version"], pushes[1].query["version"]);
    assert_eq!(stub.state().config, rendered.haproxy_cfg);
}

#[tokio::test]
async fn conflicts_beyond_the_retry_budget_are_rejected_with_the_apis_message() {
    let stub = Stub::start("v3.2.0").await;
    stub.state().conflicts_to_inject = 100;
    let target = stub.target();
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("never settles");

    let DeployError::Rejected(message) = &error else {
        panic!("expected Rejected, got {error:?}");
    };
    assert!(
        message.contains("version in configuration file is"),
        "{message}"
    );
    // settings() allows 2 retries after the first attempt.
    assert_eq!(stub.requests().iter().filter(|r| is_push(r)).count(), 3);
}

#[tokio::test]
async fn a_failed_reload_is_rejected_with_the_apis_message_and_the_next_deployment_reloads() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    let good = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    target
        .deploy(&request(&good, 1, 1))
        .await
        .expect("good one");
    let bad = render(
        config(
            "    server s1 10.0.0.1:80\n",
            &format!("    {FAIL_RELOAD_MARKER}\n    maxconn 200\n"),
        ),
        vec![],
    );

    let error = target
        .deploy(&request(&bad, 1, 2))
        .await
        .expect_err("reload fails");

    let DeployError::Rejected(message) = &error else {
        panic!("expected Rejected, got {error:?}");
    };
    assert!(message.contains(RELOAD_FAILURE_LOG), "{message}");
    assert_eq!(
        stub.state().config,
        good.haproxy_cfg,
        "the API restored the last good configuration"
    );

    // Only a server moves relative to what the pod runs again, which alone would be a
    // runtime change; after a failed deployment the target reloads to be sure.
    let fixed = render(config("    server s1 10.0.0.5:80\n", ""), vec![]);
    assert!(!plan(Some(&good), &fixed).expect("plans").reload);
    stub.clear_requests();
    let outcome = target
        .deploy(&request(&fixed, 1, 3))
        .await
        .expect("fixed one");
    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(stub.state().config, fixed.haproxy_cfg);
}

#[tokio::test]
async fn a_validation_error_is_rejected_with_the_apis_message() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    let rendered = render(
        config(
            "    server s1 10.0.0.1:80\n",
            &format!("    {INVALID_MARKER}\n"),
        ),
        vec![],
    );

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("invalid");

    let DeployError::Rejected(message) = &error else {
        panic!("expected Rejected, got {error:?}");
    };
    assert!(message.contains("unknown keyword 'bogus'"), "{message}");
    assert!(message.contains("HTTP 400"), "{message}");
}

#[tokio::test]
async fn a_lower_epoch_or_an_older_generation_is_refused_before_any_request_is_sent() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    target
        .deploy(&request(&rendered, 5, 10))
        .await
        .expect("accepted");
    stub.clear_requests();

    let fenced = target.deploy(&request(&rendered, 4, 99)).await;
    let stale = target.deploy(&request(&rendered, 5, 9)).await;

    assert_eq!(
        fenced,
        Err(DeployError::Fenced {
            offered: 4,
            accepted: 5
        })
    );
    assert_eq!(
        stale,
        Err(DeployError::Stale {
            offered: 9,
            deployed: 10
        })
    );
    assert!(stub.requests().is_empty(), "{:#?}", stub.requests());
}

#[tokio::test]
async fn the_epoch_kept_on_the_pod_fences_a_restarted_or_deposed_controller() {
    let stub = Stub::start("v3.2.0").await;
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    let first_leader = stub.target();
    first_leader
        .deploy(&request(&rendered, 7, 1))
        .await
        .expect("accepted");

    // A controller that restarted with an older epoch in hand knows nothing in memory.
    let restarted = stub.target();
    stub.clear_requests();
    let refused = restarted.deploy(&request(&rendered, 6, 1)).await;
    assert_eq!(
        refused,
        Err(DeployError::Fenced {
            offered: 6,
            accepted: 7
        })
    );
    assert!(!stub.requests().iter().any(is_push));

    // A newer leader raises the pod's epoch, and the old one is refused by the pod.
    let newer = render(
        config("    server s1 10.0.0.1:80\n    server s2 10.0.0.2:80\n", ""),
        vec![],
    );
    restarted
        .deploy(&request(&newer, 8, 1))
        .await
        .expect("newer leader");
    let epoch_file = stub
        .state()
        .storage
        .get(&("general".to_string(), EPOCH_FILE.to_string()))
        .cloned();
    assert_eq!(epoch_file.as_deref().map(str::trim), Some("8"));
    stub.clear_requests();
    let late_write = first_leader.deploy(&request(&rendered, 7, 2)).await;
    assert_eq!(
        late_write,
        Err(DeployError::Fenced {
            offered: 7,
            accepted: 8
        })
    );
    assert!(!stub.requests().iter().any(is_push));
    assert_eq!(stub.state().config, newer.haproxy_cfg);
}

#[tokio::test]
async fn wrong_credentials_give_an_error_naming_the_user_and_the_credentials() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target_with("not-the-password");
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("refused");

    let DeployError::Unreachable(message) = &error else {
        panic!("expected Unreachable, got {error:?}");
    };
    assert!(message.contains("HTTP 401"), "{message}");
    assert!(message.contains(&format!("'{USER}'")), "{message}");
    assert!(message.contains("username and password"), "{message}");
    assert!(!message.contains("not-the-password"));
}

#[tokio::test]
async fn an_unreachable_port_gives_unreachable() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    let target = DataplaneTarget::new("haproxy-0", settings(&format!("http://{addr}"), PASSWORD))
        .expect("target");
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("nobody listens");

    assert!(
        matches!(&error, DeployError::Unreachable(m) if m.contains(&addr.to_string())),
        "{error:?}"
    );
    assert!(matches!(
        target.deployed_checksum().await,
        Err(DeployError::Unreachable(_))
    ));
}

#[tokio::test]
async fn an_api_older_than_v3_2_is_refused_naming_the_version_it_needs_before_anything_is_written()
{
    for (reported, read) in [("v2.9.6 0a1b2c3", "v2.9.6"), ("v3.1.14 a1b2c3d", "v3.1.14")] {
        let stub = Stub::start(reported).await;
        let target = stub.target();
        let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

        let error = target
            .deploy(&request(&rendered, 1, 1))
            .await
            .expect_err("too old");

        let DeployError::Rejected(message) = &error else {
            panic!("expected Rejected, got {error:?}");
        };
        assert!(
            message.contains(read) && message.contains("v3.2.0 or later"),
            "{message}"
        );
        assert!(!stub.requests().iter().any(Recorded::is_write));
    }
}

#[tokio::test]
async fn a_dropped_file_is_deleted_only_after_the_new_configuration_is_live() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    let page = aux(
        AuxKind::File,
        "general/old-page.http",
        "HTTP/1.0 503\r\n\r\nold\n",
    );
    let before = render(
        config(
            "    errorfile 503 general/old-page.http\n    server s1 10.0.0.1:80\n",
            "",
        ),
        vec![hosts_map("a.example be\n"), page],
    );
    let after = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![hosts_map("a.example be\n")],
    );
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(outcome.reloaded);
    let requests = stub.requests();
    let delete = position(&requests, |r| {
        r.is(
            Method::DELETE,
            &format!("{API}/storage/general/old-page.http"),
        )
    })
    .expect("orphan deleted");
    let push = position(&requests, is_push).expect("pushed");
    let last_poll = requests
        .iter()
        .rposition(is_reload_poll)
        .expect("reload polled");
    assert!(delete > push && delete > last_poll, "{requests:#?}");
    let state = stub.state();
    assert!(
        !state
            .storage
            .contains_key(&("general".to_string(), "old-page.http".to_string()))
    );
    assert!(
        state
            .storage
            .contains_key(&("maps".to_string(), "hosts.map".to_string())),
        "files the render still has stay"
    );
}

#[tokio::test]
async fn the_deployed_checksum_is_the_renders_until_the_pod_changes() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    assert_eq!(
        target.deployed_checksum().await,
        Ok(None),
        "an empty pod runs nothing haptor deployed"
    );
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![hosts_map("a.example be\n")],
    );
    target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed");

    assert_eq!(
        target.deployed_checksum().await,
        Ok(Some(rendered.checksum()))
    );

    stub.state().config.push_str("    # edited by hand\n");
    let drifted = target.deployed_checksum().await.expect("reachable");
    assert!(drifted.is_some());
    assert_ne!(drifted, Some(rendered.checksum()));
}

#[tokio::test]
async fn an_unchanged_render_writes_nothing() {
    let stub = Stub::start("v3.2.0").await;
    let target = stub.target();
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![hosts_map("a.example be\n")],
    );
    target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("first");
    stub.clear_requests();

    let outcome = target
        .deploy(&request(&rendered, 1, 2))
        .await
        .expect("second");

    assert!(outcome.unchanged && !outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    assert!(!requests.iter().any(Recorded::is_write), "{requests:#?}");
}

#[tokio::test]
async fn a_restarted_controller_plans_from_the_running_configuration() {
    let stub = Stub::start("v3.3.1").await;
    let before = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    stub.target()
        .deploy(&request(&before, 1, 1))
        .await
        .expect("before the restart");
    let restarted = stub.target();
    stub.clear_requests();
    let after = render(config("    server s1 10.0.0.7:80\n", ""), vec![]);

    let outcome = restarted
        .deploy(&request(&after, 1, 2))
        .await
        .expect("after the restart");

    let requests = stub.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.is(Method::GET, &format!("{API}/configuration/raw"))),
        "the running configuration was read"
    );
    assert!(
        !outcome.reloaded,
        "a server move needs no reload: {outcome:?}"
    );
    assert_eq!(outcome.runtime_changes, 1);
    assert_eq!(stub.state().config, after.haproxy_cfg);
}

#[tokio::test]
async fn a_runtime_change_the_api_refuses_becomes_a_reload() {
    let stub = Stub::start("v3.3.1").await;
    let target = stub.target();
    let before = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    let after = render(config("    server s1 10.0.0.2:80\n", ""), vec![]);
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.state().refuse_runtime_servers = true;
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    let refused = position(&requests, |r| {
        r.path.contains("/runtime/backends/be/servers/s1")
    })
    .expect("runtime attempted");
    let reload_push = position(&requests, |r| {
        is_push(r) && !r.query.contains_key("skip_reload")
    })
    .expect("reloading push");
    assert!(reload_push > refused);
    assert_eq!(stub.state().config, after.haproxy_cfg);
}

#[tokio::test]
async fn map_entries_are_changed_by_the_storage_name_the_api_lists_for_the_loaded_map() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let before = render(config("", ""), vec![hosts_map("a.example be\n")]);
    let after = render(config("", ""), vec![hosts_map("b.example be\n")]);
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(!outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    let listed = position(&requests, |r| {
        r.is(Method::GET, &format!("{API}/runtime/maps")) && r.query_is("include_unmanaged", "true")
    })
    .expect("the loaded maps listed, unmanaged ones included");
    let added = position(&requests, |r| {
        r.is(Method::POST, &format!("{API}/runtime/maps/hosts/entries"))
    })
    .expect("the entry added by storage name");
    assert!(listed < added);
}

#[tokio::test]
async fn a_map_the_configuration_names_outside_the_apis_maps_directory_is_changed_with_a_reload() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let before = render(config("", ""), vec![hosts_map("a.example be\n")]);
    let after = render(config("", ""), vec![hosts_map("b.example be\n")]);
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.state().unmanaged_maps = true;
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.path.contains("/runtime/maps/hosts")),
        "no entry call the API would refuse: {requests:#?}"
    );
    assert_eq!(
        stub.state().runtime_maps.get("hosts"),
        Some(&vec![("b.example".to_string(), "be".to_string())]),
        "the reload loaded the new map"
    );
}

#[tokio::test]
async fn a_pod_running_another_haproxy_version_than_renders_are_validated_for_is_not_deployed_to() {
    use haptor::pure::haproxy::HaproxyVersion;
    let stub = Stub::start("v3.2.3 4a1b2c3").await;
    stub.state().haproxy_version = "3.0.5-1".to_string();
    let mut for_2_6 = settings(&stub.url(), PASSWORD);
    for_2_6.haproxy_version = Some(HaproxyVersion::V2_6);
    let target = DataplaneTarget::new("haproxy-0", for_2_6.clone()).expect("target");
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("a 3.0 pod is refused a render validated for 2.6");
    let DeployError::Rejected(message) = &error else {
        panic!("rejected, not {error:?}");
    };
    assert!(
        message.contains("the pod runs HAProxy 3.0, but haptor validates renders for HAProxy 2.6"),
        "{message}"
    );
    let requests = stub.requests();
    assert!(
        requests.iter().all(|r| !r.is_write()),
        "nothing was written: {requests:#?}"
    );
    assert!(stub.state().config.is_empty());

    // A pod of the validated version is deployed to, its version read once.
    stub.state().haproxy_version = "2.6.12-1+deb12u1".to_string();
    let target = DataplaneTarget::new("haproxy-1", for_2_6).expect("target");
    target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed");
    stub.clear_requests();
    target
        .deploy(&request(&rendered, 1, 2))
        .await
        .expect("deployed again");
    assert_eq!(stub.state().config, rendered.haproxy_cfg);
    // The runtime info also names the serving worker around a reload; an unchanged
    // deployment does not reload, so any read would be the version's.
    let asked = stub.requests().iter().filter(|r| is_worker_read(r)).count();
    assert_eq!(asked, 0, "the version is read once for each target");
}

#[tokio::test]
async fn a_certificate_named_after_a_dotted_secret_is_stored_under_the_name_the_configuration_names()
 {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    // The path a template gets for the Secret `www.example.com-tls` of `default`.
    let path = haptor::pure::rendered::PathResolver::default()
        .path(AuxKind::Cert, "default_www.example.com-tls.pem");
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", "")
            .replace("bind :8080", &format!("bind :8443 ssl crt {path}")),
        vec![aux(AuxKind::Cert, &path, PEM)],
    );

    target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed");

    let stored = path.rsplit('/').next().expect("a file name").to_string();
    assert_eq!(stored, "default_www_example_com-tls.pem");
    let state = stub.state();
    assert_eq!(
        state
            .storage
            .get(&("ssl_certificates".to_string(), stored.clone())),
        Some(&PEM.to_string()),
        "the API stores the certificate under the name haproxy.cfg names: {:?}",
        state.storage.keys().collect::<Vec<_>>()
    );
    assert!(state.config.contains(&format!("crt ssl/{stored}")));
}

#[tokio::test]
async fn a_file_the_api_would_store_under_another_name_is_refused_before_anything_is_written() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![aux(AuxKind::Cert, "ssl/www.example.com-tls.pem", PEM)],
    );

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("the name would change");

    let DeployError::Rejected(message) = &error else {
        panic!("expected Rejected, got {error:?}");
    };
    assert!(
        message.contains("ssl/www.example.com-tls.pem")
            && message.contains("'www_example_com-tls.pem'"),
        "{message}"
    );
    assert!(
        !stub.requests().iter().any(is_aux_storage_write),
        "nothing uploaded"
    );
}

#[tokio::test]
async fn a_reload_the_api_reports_before_the_new_worker_serves_returns_only_once_it_serves() {
    let stub = Stub::start("v3.4.0").await;
    stub.state().reload_command = ReloadCommand::SignalOnly {
        worker_after_reads: 3,
    };
    let target = stub.target();
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    let old_worker = stub.state().worker_pid;

    let outcome = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("deployed");

    assert!(outcome.reloaded, "{outcome:?}");
    assert_ne!(stub.state().worker_pid, old_worker, "a new worker serves");
    let requests = stub.requests();
    let last_poll = requests
        .iter()
        .rposition(is_reload_poll)
        .expect("the reload was polled");
    let reads_after = requests[last_poll..]
        .iter()
        .filter(|r| is_worker_read(r))
        .count();
    assert!(
        reads_after >= 4,
        "the worker was read until the new one answered, {reads_after} reads: {requests:#?}"
    );
}

#[tokio::test]
async fn a_reload_that_fails_behind_a_reported_success_is_rejected_and_the_next_deployment_reloads()
{
    let stub = Stub::start("v3.4.0").await;
    stub.state().reload_command = ReloadCommand::SignalOnly {
        worker_after_reads: 0,
    };
    let mut settings = settings(&stub.url(), PASSWORD);
    settings.reload_timeout = std::time::Duration::from_millis(500);
    let target = DataplaneTarget::new("haproxy-0", settings).expect("target");
    let good = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);
    target
        .deploy(&request(&good, 1, 1))
        .await
        .expect("good one");
    let serving = stub.state().worker_pid;
    let bad = render(
        config(
            "    server s1 10.0.0.1:80\n",
            &format!("    {FAIL_RELOAD_MARKER}\n    maxconn 200\n"),
        ),
        vec![],
    );

    let error = target
        .deploy(&request(&bad, 1, 2))
        .await
        .expect_err("the reload did not take");

    let DeployError::Rejected(message) = &error else {
        panic!("expected Rejected, got {error:?}");
    };
    assert!(
        message.contains("reported succeeded") && message.contains(&serving.to_string()),
        "{message}"
    );
    assert_eq!(stub.state().worker_pid, serving, "the old worker serves on");

    let fixed = render(config("    server s1 10.0.0.5:80\n", ""), vec![]);
    let outcome = target
        .deploy(&request(&fixed, 1, 3))
        .await
        .expect("fixed one");
    assert!(
        outcome.reloaded,
        "after a failed reload the next one reloads: {outcome:?}"
    );
    assert_eq!(outcome.reload_reason, Some(ReloadReason::StateUnknown));
}

/// Deploys a server weight 10, then 20, to an API of `version` whose HAProxy refuses the
/// change at runtime (a `balance source` backend): the second outcome, and the requests it
/// made.
async fn weight_change_haproxy_refuses(version: &str) -> (DeployOutcome, Vec<Recorded>) {
    let stub = Stub::start(version).await;
    stub.state().static_backends = vec!["be".to_string()];
    let target = stub.target();
    let before = render(config("    server s1 10.0.0.1:80 weight 10\n", ""), vec![]);
    let after = render(config("    server s1 10.0.0.1:80 weight 20\n", ""), vec![]);
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target
        .deploy(&request(&after, 1, 2))
        .await
        .expect("a refusal is no outage");

    assert_eq!(stub.state().config, after.haproxy_cfg);
    (outcome, stub.requests())
}

fn is_reloading_push(r: &Recorded) -> bool {
    is_push(r) && !r.query.contains_key("skip_reload")
}

#[tokio::test]
async fn a_weight_change_haproxy_refuses_at_runtime_is_applied_by_one_reload_at_once() {
    let (outcome, requests) = weight_change_haproxy_refuses("v3.4.0").await;

    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(outcome.reload_reason, Some(ReloadReason::RuntimeRefused));
    let refused = position(&requests, |r| {
        r.path.ends_with("/runtime/backends/be/servers/s1")
    })
    .expect("the runtime change was tried");
    let reloading: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| is_reloading_push(r))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(reloading, vec![reloading[0]], "one reload: {requests:#?}");
    assert!(reloading[0] > refused);
}

#[tokio::test]
async fn a_runtime_action_haproxy_refuses_after_the_push_is_applied_by_one_reload_at_once() {
    // Before v3.3.1 weights go as X-Runtime-Actions on the push, which the API runs after
    // storing the configuration.
    let (outcome, requests) = weight_change_haproxy_refuses("v3.2.15").await;

    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(outcome.reload_reason, Some(ReloadReason::RuntimeRefused));
    let with_actions = position(&requests, |r| is_push(r) && r.runtime_actions.is_some())
        .expect("the actions were sent");
    let reloading = position(&requests, is_reloading_push).expect("then a reloading push");
    assert!(reloading > with_actions);
    assert_eq!(requests.iter().filter(|r| is_reloading_push(r)).count(), 1);
}

#[tokio::test]
async fn a_certificate_the_api_cannot_use_is_rejected_naming_the_file_and_the_apis_message() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![aux(
            AuxKind::Cert,
            "ssl/default_site.pem",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )],
    );

    let error = target
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("no key");

    let DeployError::Rejected(message) = &error else {
        panic!("a refusal is no outage: expected Rejected, got {error:?}");
    };
    assert!(
        message.contains("ssl/default_site.pem")
            && message.contains("file should contain both certificate and private key"),
        "{message}"
    );
    assert!(!stub.requests().iter().any(is_push), "nothing pushed");
}

#[tokio::test]
async fn a_restarted_controller_finds_the_pod_already_running_its_render_and_reloads_nothing() {
    let stub = Stub::start("v3.4.0").await;
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![
            hosts_map("a.example be\n"),
            aux(AuxKind::Cert, "ssl/default_site.pem", PEM),
        ],
    );
    stub.target()
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("before the restart");
    let reloads_before = stub.state().reload_counter;

    // A new process: the text on the pod is the API's reprint, never the render's.
    let restarted = stub.target();
    stub.clear_requests();
    assert_eq!(
        restarted.deployed_checksum().await.expect("read"),
        Some(rendered.checksum()),
        "the drift check knows the pod runs the render"
    );
    let outcome = restarted
        .deploy(&request(&rendered, 2, 1))
        .await
        .expect("after the restart");

    assert!(outcome.unchanged && !outcome.reloaded, "{outcome:?}");
    assert_eq!(stub.state().reload_counter, reloads_before, "no reload");
    let requests = stub.requests();
    assert!(
        !requests
            .iter()
            .any(|r| is_push(r) || is_aux_storage_write(r)),
        "{requests:#?}"
    );

    // And the next change is planned from the render it recognised: a server move is live.
    let moved = render(
        config("    server s1 10.0.0.9:80\n", ""),
        rendered.aux_files.clone().into_iter().collect(),
    );
    let outcome = restarted
        .deploy(&request(&moved, 2, 2))
        .await
        .expect("a change");
    assert!(
        !outcome.reloaded && outcome.runtime_changes == 1,
        "{outcome:?}"
    );
}

/// An earlier haptor recorded the render's checksum as one SHA-256 over all its files; the
/// record still names what the pod runs after an upgrade to the checksum of per-file
/// digests, so the upgraded controller neither reloads nor rewrites anything but the record.
#[tokio::test]
async fn a_record_written_before_the_checksum_changed_definition_still_names_the_running_render() {
    let stub = Stub::start("v3.4.0").await;
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![
            hosts_map("a.example be\n"),
            aux(AuxKind::Cert, "ssl/default_site.pem", PEM),
        ],
    );
    stub.target()
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("before the upgrade");
    let reloads_before = stub.state().reload_counter;
    let legacy = haptor::pure::checksum::legacy_checksum(&rendered);
    assert_ne!(legacy, rendered.checksum());
    {
        let mut state = stub.state();
        let record = state
            .storage
            .values_mut()
            .find(|text| text.starts_with("render "))
            .expect("the deployed-render record");
        *record = record.replace(&rendered.checksum().to_string(), &legacy.to_string());
    }

    let upgraded = stub.target();
    stub.clear_requests();
    let outcome = upgraded
        .deploy(&request(&rendered, 2, 1))
        .await
        .expect("after the upgrade");
    assert!(outcome.unchanged && !outcome.reloaded, "{outcome:?}");
    assert_eq!(stub.state().reload_counter, reloads_before, "no reload");
    assert!(
        !stub
            .requests()
            .iter()
            .any(|r| is_push(r) || is_aux_storage_write(r)),
        "{:#?}",
        stub.requests()
    );
    assert_eq!(
        upgraded.deployed_checksum().await.expect("read"),
        Some(rendered.checksum()),
        "the record names the render by its checksum now"
    );
}

/// A new leader's first render often differs from the one the pod runs (the endpoints of a
/// rolling update moved meanwhile). The record lists the render's files, so the new process
/// knows the pod's map and certificate without their contents on the pod and changes it live
/// (`tests/node/traffic.rs` saw every controller rollout reload every HAProxy pod before).
#[tokio::test]
async fn a_restarted_controller_whose_render_moved_a_server_changes_the_pod_live() {
    let stub = Stub::start("v3.4.0").await;
    let files = vec![
        hosts_map("a.example be\n"),
        aux(AuxKind::Cert, "ssl/default_site.pem", PEM),
    ];
    let deployed = render(config("    server s1 10.0.0.1:80\n", ""), files.clone());
    stub.target()
        .deploy(&request(&deployed, 1, 1))
        .await
        .expect("before the restart");
    let reloads_before = stub.state().reload_counter;

    let restarted = stub.target();
    let moved = render(config("    server s1 10.0.0.9:80\n", ""), files);
    let outcome = restarted
        .deploy(&request(&moved, 2, 1))
        .await
        .expect("after the restart");
    assert!(
        !outcome.reloaded && outcome.runtime_changes == 1,
        "a server move after a restart is live: {outcome:?}"
    );
    assert_eq!(stub.state().reload_counter, reloads_before, "no reload");
    assert_eq!(stub.state().config, moved.haproxy_cfg);

    // A map that changed meanwhile is read back from the pod's storage: still live.
    let restarted = stub.target();
    let mapped = render(
        config("    server s1 10.0.0.9:80\n", ""),
        vec![
            hosts_map("b.example be\n"),
            aux(AuxKind::Cert, "ssl/default_site.pem", PEM),
        ],
    );
    let outcome = restarted
        .deploy(&request(&mapped, 3, 1))
        .await
        .expect("a map change after a restart");
    assert!(!outcome.reloaded, "{outcome:?}");
    assert_eq!(stub.state().reload_counter, reloads_before, "no reload");
}

#[tokio::test]
async fn a_pod_whose_configuration_changed_since_the_record_is_reloaded_after_a_restart() {
    let stub = Stub::start("v3.4.0").await;
    let rendered = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![hosts_map("a.example be\n")],
    );
    stub.target()
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("before the restart");
    // Someone edits haproxy.cfg on the pod behind haptor's back.
    {
        let mut state = stub.state();
        state.config.push_str("# edited by hand\n");
        state.config_version += 1;
    }
    let restarted = stub.target();
    assert_ne!(
        restarted.deployed_checksum().await.expect("read"),
        Some(rendered.checksum()),
        "drift"
    );

    let outcome = restarted
        .deploy(&request(&rendered, 2, 1))
        .await
        .expect("after the restart");

    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(stub.state().config, rendered.haproxy_cfg);
}

#[tokio::test]
async fn a_development_build_of_the_api_is_deployed_to() {
    let stub = Stub::start(" dev.dirty").await;
    let rendered = render(config("    server s1 10.0.0.1:80\n", ""), vec![]);

    let outcome = stub
        .target()
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect("a build without version flags is no reason to refuse a pod");

    assert!(outcome.reloaded, "{outcome:?}");
}

#[tokio::test]
async fn a_map_emptied_by_the_render_replaces_the_stored_one_although_the_api_refuses_empty_bodies()
{
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let before = render(config("", ""), vec![hosts_map("a.example be\n")]);
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    // The last Ingress goes: the host map has no entry left.
    let emptied = render(config("", ""), vec![hosts_map("")]);

    let outcome = target
        .deploy(&request(&emptied, 1, 2))
        .await
        .expect("an empty map is a map");

    assert!(!outcome.reloaded, "{outcome:?}");
    let stored = stub
        .state()
        .storage
        .get(&("maps".to_string(), "hosts.map".to_string()))
        .cloned();
    assert_eq!(stored.as_deref().map(str::trim), Some(""));
    assert!(stub.state().runtime_maps["hosts"].is_empty());
}

#[tokio::test]
async fn servers_that_come_and_go_are_added_and_deleted_through_the_runtime_api() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let before = render(
        config(
            "    default-server maxconn 50\n    server SRV_1 10.0.0.1:80\n    server SRV_2 10.0.0.2:80\n",
            "",
        ),
        vec![],
    );
    let after = render(
        config(
            "    default-server maxconn 50\n    server SRV_2 10.0.0.2:80\n    server SRV_3 10.0.0.3:8080 inter 2s\n",
            "",
        ),
        vec![],
    );
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(!outcome.reloaded, "{outcome:?}");
    assert_eq!(outcome.runtime_changes, 2);
    let requests = stub.requests();
    let servers = format!("{API}/runtime/backends/be/servers");
    let deleted = position(&requests, |r| {
        r.is(Method::DELETE, &format!("{servers}/SRV_1"))
    })
    .expect("SRV_1 deleted");
    let added = position(&requests, |r| r.is(Method::POST, &servers)).expect("SRV_3 added");
    let ready = position(&requests, |r| {
        r.is(Method::PUT, &format!("{servers}/SRV_3"))
    })
    .expect("SRV_3 taken out of maintenance");
    assert!(deleted < added && added < ready, "{requests:#?}");
    assert_eq!(
        serde_json::from_str::<Value>(&requests[added].body).expect("JSON"),
        json!({ "name": "SRV_3", "address": "10.0.0.3", "port": 8080, "maxconn": 50, "inter": 2000 }),
        "the default-server settings travel with the added server"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&requests[ready].body).expect("JSON"),
        json!({ "admin_state": "ready" })
    );
    let state = stub.state();
    assert!(state.runtime_server_exists("be", "SRV_3"));
    assert!(!state.runtime_server_exists("be", "SRV_1"));
    assert_eq!(
        state.config, after.haproxy_cfg,
        "the file has the servers too"
    );
    assert_eq!(state.unexpected_reloads, 0);
}

#[tokio::test]
async fn a_server_the_api_cannot_add_with_its_checks_on_is_deployed_by_one_reload() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let before = render(config("    server SRV_1 10.0.0.1:80 check\n", ""), vec![]);
    let after = render(
        config(
            "    server SRV_1 10.0.0.1:80 check\n    server SRV_2 10.0.0.2:80 check\n",
            "",
        ),
        vec![],
    );
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    assert!(outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.method == Method::POST && r.path.contains("/runtime/backends/")),
        "no server is added without its checks: {requests:#?}"
    );
}

#[tokio::test]
async fn a_rotated_certificate_is_replaced_at_runtime_and_a_new_one_is_loaded_by_a_reload() {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let tls = "frontend tls\n    bind :8443 ssl crt-list general/hosts.crtlist\n";
    let with = |a: &str, extra: &[(&str, &str)]| {
        let mut files = vec![aux(AuxKind::Cert, "ssl/a.pem", &PEM.replace("MIIB", a))];
        let mut lines = "ssl/a.pem a.example\n".to_string();
        for (path, content) in extra {
            files.push(aux(AuxKind::Cert, path, &PEM.replace("MIIB", content)));
            lines.push_str(&format!("{path} b.example\n"));
        }
        files.push(aux(AuxKind::CrtList, "general/hosts.crtlist", &lines));
        render(config("    server s1 10.0.0.1:80\n", tls), files)
    };
    target
        .deploy(&request(&with("A1", &[]), 1, 1))
        .await
        .expect("first");
    stub.clear_requests();

    let outcome = target
        .deploy(&request(&with("A2", &[]), 1, 2))
        .await
        .expect("rotation");
    assert!(!outcome.reloaded, "{outcome:?}");
    let requests = stub.requests();
    let replaced = requests
        .iter()
        .find(|r| r.is(Method::PUT, &format!("{API}/runtime/ssl_certs/ssl%2Fa.pem")))
        .unwrap_or_else(|| panic!("the certificate replaced at runtime: {requests:#?}"));
    assert!(replaced.body.contains("A2"));

    stub.clear_requests();
    let outcome = target
        .deploy(&request(&with("A2", &[("ssl/b.pem", "B")]), 1, 3))
        .await
        .expect("a new host");
    assert!(
        outcome.reloaded,
        "a new certificate is loaded by a reload: {outcome:?}"
    );
}

#[tokio::test]
async fn a_removed_backend_is_pushed_without_a_reload_and_its_servers_deleted_once_the_map_no_longer_routes_to_it()
 {
    let stub = Stub::start("v3.4.0").await;
    let target = stub.target();
    let api_backend = "\nbackend api\n    server a1 10.0.1.1:80\n    server a2 10.0.1.2:80\n";
    let before = render(
        config("    server s1 10.0.0.1:80\n", "") + api_backend,
        vec![hosts_map("a.example be\napi.example api\n")],
    );
    let after = render(
        config("    server s1 10.0.0.1:80\n", ""),
        vec![hosts_map("a.example be\n")],
    );
    target.deploy(&request(&before, 1, 1)).await.expect("first");
    stub.clear_requests();

    let outcome = target.deploy(&request(&after, 1, 2)).await.expect("second");

    let planned = plan(Some(&before), &after).expect("plans");
    assert!(!planned.reload, "{:?}", planned.reload_reasons);
    assert!(!outcome.reloaded, "{outcome:?}");
    assert_eq!(
        outcome.runtime_changes,
        planned
            .operations
            .iter()
            .filter(|op| op.is_runtime())
            .count()
    );
    let requests = stub.requests();
    assert!(!requests.iter().any(is_reload_poll), "{requests:#?}");
    let push = position(&requests, is_push).expect("haproxy.cfg pushed");
    assert!(requests[push].query_is("skip_reload", "true"));
    let unmapped = position(&requests, |r| {
        r.is(
            Method::DELETE,
            &format!("{API}/runtime/maps/hosts/entries/api.example"),
        )
    })
    .expect("the map entry deleted at runtime");
    for server in ["a1", "a2"] {
        let deleted = position(&requests, |r| {
            r.is(
                Method::DELETE,
                &format!("{API}/runtime/backends/api/servers/{server}"),
            )
        })
        .unwrap_or_else(|| panic!("api/{server} deleted at runtime: {requests:#?}"));
        assert!(
            push < unmapped && unmapped < deleted,
            "the new haproxy.cfg, then the map entry, then the server: {requests:#?}"
        );
    }
    let state = stub.state();
    assert_eq!(
        state.config, after.haproxy_cfg,
        "the pod's haproxy.cfg no longer has the backend"
    );
    assert_eq!(state.unexpected_reloads, 0);
    assert!(!state.runtime_server_exists("api", "a1") && !state.runtime_server_exists("api", "a2"));
    assert!(state.runtime_server_exists("be", "s1"));
}
