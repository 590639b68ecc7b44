//! The Data Plane API v3 deploy target against the real HAProxy Data Plane API driving a
//! real haproxy 2.6 (see `support/dataplaneapi.rs`), with real HTTP traffic through the
//! frontend it deploys: a first deployment, an endpoint and map change applied without a
//! reload, a structural change with exactly one reload, the fencing epoch kept on the
//! instance, and the chart's `reload.sh` (which the peer runs, as the chart's pods do):
//! a reload that cannot bind fails with HAProxy's own message while the old worker serves,
//! and right after a deployment (or the API's answer to a forced reload) every request gets
//! the new configuration. The stub tests in `dataplane_target.rs` pin exact request
//! sequences; these show the same target works against the API itself.
//!
//! The binary comes from `TEST_ASSET_DATAPLANEAPI`. The Go module proxy refuses every
//! version of `github.com/haproxytech/dataplaneapi` and of its `client-native`, so
//! `scripts/test-peers` cannot build it; this crate is built only with the
//! `real-dataplaneapi` feature, which `./scripts/test` turns on when that variable names a
//! binary, and says so when it does not.

use crate::dataplane_peer;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use haptor::drivers::dataplane::{DataplaneSettings, DataplaneTarget, EPOCH_FILE};
use haptor::pure::deploy::{DeployError, DeployRequest, DeployTarget};
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};

use dataplane_peer::{DataplanePeer, MapsDir};
use support::free_port;

/// A backend: a loopback HTTP server that answers every request with its name.
struct Backend {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Backend {
    async fn start(name: &'static str) -> Backend {
        let port = free_port();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("a backend port");
        let app = axum::Router::new().fallback(move || async move { name });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Backend { port, task }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The configuration haproxy starts with, before haptor deploys anything.
fn initial(frontend: u16) -> String {
    format!(
        "global\n    default-path origin ROOT\n    stats socket ROOT/runtime.sock level admin\n    stats timeout 10s\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend fe\n    bind 127.0.0.1:{frontend}\n    http-request return status 503 content-type text/plain string nothing-deployed-yet\n"
    )
}

/// A rendered haproxy.cfg: the frontend routes by the Host header through `maps/hosts.map`
/// to `be` (its servers given) or `other`.
fn config(root: &str, frontend: u16, servers: &str, extra: &str) -> String {
    format!(
        "global\n    default-path origin {root}\n    stats socket {root}/runtime.sock level admin\n    stats timeout 10s\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend fe\n    bind 127.0.0.1:{frontend}\n    http-request set-var(txn.backend) req.hdr(host),lower,map(maps/hosts.map,be)\n    use_backend %[var(txn.backend)]\n    default_backend be\n{extra}\nbackend be\n    balance roundrobin\n{servers}\nbackend other\n    http-request return status 200 content-type text/plain string other-backend\n"
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

fn request(rendered: &RenderedConfig, epoch: u64, generation: u64) -> DeployRequest {
    DeployRequest {
        rendered: Arc::new(rendered.clone()),
        checksum: rendered.checksum(),
        epoch,
        generation,
        timeout: Duration::from_secs(60),
    }
}

fn target(peer: &DataplanePeer) -> DataplaneTarget {
    let mut settings = DataplaneSettings::new(&peer.url, &peer.user, &peer.password);
    settings.reload_poll_interval = Duration::from_millis(100);
    settings.reload_timeout = Duration::from_secs(30);
    DataplaneTarget::new("haproxy-0", settings).expect("target")
}

/// What the frontend answers for a Host.
async fn get(frontend: u16, host: &str) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    match client
        .get(format!("http://127.0.0.1:{frontend}/"))
        .header("host", host)
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(response) => format!(
            "{} {}",
            response.status().as_u16(),
            response.text().await.unwrap_or_default()
        ),
        Err(e) => format!("error: {e}"),
    }
}

async fn wait_for_answer(frontend: u16, host: &str, expected: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = get(frontend, host).await;
        if got == expected || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_deployment_stores_the_files_pushes_the_config_and_serves_after_one_reload() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let rendered = render(
        config(
            &root,
            frontend,
            &format!("    server s1 127.0.0.1:{}\n", a.port),
            "",
        ),
        vec![
            aux(AuxKind::Map, "maps/hosts.map", "other.example other\n"),
            aux(
                AuxKind::File,
                "general/busy.http",
                "HTTP/1.0 503 Service Unavailable\r\n\r\nbusy\n",
            ),
        ],
    );
    assert_eq!(get(frontend, "a.example").await, "503 nothing-deployed-yet");

    let outcome = target(&peer)
        .deploy(&request(&rendered, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("deployed: {e}\n{}", peer.logs()));

    assert!(outcome.reloaded && !outcome.unchanged, "{outcome:?}");
    assert_eq!(peer.wait_reloads(1), 1, "exactly one reload");
    assert_eq!(
        wait_for_answer(frontend, "a.example", "200 backend-a").await,
        "200 backend-a"
    );
    assert_eq!(get(frontend, "other.example").await, "200 other-backend");
    assert_eq!(
        peer.file("maps/hosts.map").as_deref(),
        Some("other.example other\n")
    );
    assert_eq!(
        peer.file("general/busy.http").as_deref(),
        Some("HTTP/1.0 503 Service Unavailable\r\n\r\nbusy\n")
    );
    assert_eq!(
        peer.file(&format!("general/{EPOCH_FILE}"))
            .map(|e| e.trim().to_string())
            .as_deref(),
        Some("1")
    );
    let on_disk = peer.config_on_disk();
    assert!(
        on_disk.contains(&format!("server s1 127.0.0.1:{}", a.port)),
        "{on_disk}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_and_map_change_is_applied_live_without_a_reload() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let (a, b) = (
        Backend::start("backend-a").await,
        Backend::start("backend-b").await,
    );
    let before = render(
        config(
            &root,
            frontend,
            &format!(
                "    server s1 127.0.0.1:{} weight 10\n    server s2 127.0.0.1:1 disabled\n",
                a.port
            ),
            "",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "old.example other\n")],
    );
    let after = render(
        config(
            &root,
            frontend,
            &format!(
                "    server s1 127.0.0.1:{} weight 10 disabled\n    server s2 127.0.0.1:{}\n",
                a.port, b.port
            ),
            "",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "new.example other\n")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&before, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let reloads = peer.wait_reloads(1);
    assert_eq!(
        wait_for_answer(frontend, "a.example", "200 backend-a").await,
        "200 backend-a"
    );
    assert_eq!(get(frontend, "old.example").await, "200 other-backend");

    let outcome = target
        .deploy(&request(&after, 1, 2))
        .await
        .unwrap_or_else(|e| panic!("second deployment: {e}\n{}", peer.logs()));

    assert!(
        !outcome.reloaded && outcome.runtime_changes > 0,
        "{outcome:?}\n{}\nshow map: {:?}",
        peer.logs(),
        peer.runtime("show map")
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(peer.reloads(), Some(reloads), "no reload:\n{}", peer.logs());
    for _ in 0..4 {
        assert_eq!(get(frontend, "a.example").await, "200 backend-b");
    }
    assert_eq!(get(frontend, "new.example").await, "200 other-backend");
    assert_eq!(get(frontend, "old.example").await, "200 backend-b");
    // The file holds the change too: a reload keeps serving it.
    peer.reload();
    peer.wait_reloads(reloads + 1);
    assert_eq!(
        wait_for_answer(frontend, "a.example", "200 backend-b").await,
        "200 backend-b",
        "{}",
        peer.config_on_disk()
    );
    assert_eq!(get(frontend, "new.example").await, "200 other-backend");
    assert_eq!(
        peer.file("maps/hosts.map").as_deref(),
        Some("new.example other\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_structural_change_is_deployed_with_exactly_one_reload() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let before = render(
        config(&root, frontend, &servers, ""),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let after = render(
        config(
            &root,
            frontend,
            &servers,
            "    http-response set-header x-served-by haptor\n",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&before, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let reloads = peer.wait_reloads(1);

    let outcome = target
        .deploy(&request(&after, 1, 2))
        .await
        .unwrap_or_else(|e| panic!("second deployment: {e}\n{}", peer.logs()));

    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(peer.wait_reloads(reloads + 1), reloads + 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(peer.reloads(), Some(reloads + 1), "exactly one reload");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{frontend}/"))
        .header("host", "a.example")
        .send()
        .await
        .expect("an answer");
    assert_eq!(
        response
            .headers()
            .get("x-served-by")
            .and_then(|v| v.to_str().ok()),
        Some("haptor")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_haproxy_rejects_is_refused_and_the_running_one_keeps_serving() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let good = render(
        config(&root, frontend, &servers, ""),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let bad = render(
        config(&root, frontend, &servers, "    bogus-keyword on\n"),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&good, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let reloads = peer.wait_reloads(1);
    let serving = peer.config_on_disk();

    let error = target
        .deploy(&request(&bad, 1, 2))
        .await
        .expect_err("haproxy refuses the keyword");

    let text = error.to_string();
    assert!(
        matches!(error, DeployError::Rejected(_)) && text.contains("bogus-keyword"),
        "{error:?}"
    );
    assert_eq!(peer.reloads(), Some(reloads));
    assert_eq!(peer.config_on_disk(), serving);
    assert_eq!(get(frontend, "a.example").await, "200 backend-a");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_epoch_kept_on_the_instance_fences_a_deposed_controller() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let first = render(
        config(&root, frontend, &servers, ""),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let late = render(
        config(
            &root,
            frontend,
            &servers,
            "    http-response set-header x-late yes\n",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    target(&peer)
        .deploy(&request(&first, 5, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let serving = peer.config_on_disk();

    // A controller that never saw this instance (a deposed leader's fresh target).
    let error = target(&peer)
        .deploy(&request(&late, 4, 9))
        .await
        .expect_err("fenced");

    assert_eq!(
        error,
        DeployError::Fenced {
            offered: 4,
            accepted: 5
        }
    );
    assert_eq!(peer.config_on_disk(), serving);
}

/// Pushes `text` as the pod's configuration through the API itself, at its current version
/// with `query` (`skip_reload=true`, `force_reload=true`), as someone other than haptor
/// would; panics unless the API takes it.
async fn push_raw(peer: &DataplanePeer, query: &str, text: String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let version = client
        .get(format!(
            "{}/services/haproxy/configuration/version",
            peer.url
        ))
        .basic_auth(&peer.user, Some(&peer.password))
        .send()
        .await
        .expect("version")
        .text()
        .await
        .expect("version text");
    let pushed = client
        .post(format!(
            "{}/services/haproxy/configuration/raw?{query}&version={}",
            peer.url,
            version.trim()
        ))
        .basic_auth(&peer.user, Some(&peer.password))
        .header("content-type", "text/plain")
        .body(text)
        .send()
        .await
        .expect("a push");
    assert!(
        pushed.status().is_success(),
        "{:?}\n{}",
        pushed.text().await,
        peer.logs()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_deployed_checksum_is_the_renders_although_the_api_rewrites_the_text() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    // An anonymous defaults section and a rule after default_backend: the API prints both
    // differently from how they were pushed.
    let rendered = render(
        config(
            &root,
            frontend,
            &format!("    server s1 127.0.0.1:{}\n", a.port),
            "    http-response set-header x-after-default yes\n",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&rendered, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("deployed: {e}\n{}", peer.logs()));
    let on_disk = peer.config_on_disk();
    assert!(
        !on_disk.contains(&rendered.haproxy_cfg),
        "the test needs an API that rewrites the text:\n{on_disk}"
    );

    assert_eq!(
        target.deployed_checksum().await.expect("reachable"),
        Some(rendered.checksum()),
        "no drift right after a deployment"
    );

    // Someone edits the pod's configuration behind haptor's back, through the API.
    let edited = on_disk.replace("x-after-default yes", "x-after-default edited");
    push_raw(&peer, "skip_reload=true", edited).await;
    assert_ne!(
        target.deployed_checksum().await.expect("reachable"),
        Some(rendered.checksum()),
        "the edit is drift"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_an_absolute_maps_dir_a_map_change_is_deployed_with_a_reload_instead() {
    let frontend = free_port();
    let peer = DataplanePeer::start_with(&initial(frontend), MapsDir::Absolute);
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let before = render(
        config(&root, frontend, &servers, ""),
        vec![aux(AuxKind::Map, "maps/hosts.map", "old.example other\n")],
    );
    let after = render(
        config(&root, frontend, &servers, ""),
        vec![aux(AuxKind::Map, "maps/hosts.map", "new.example other\n")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&before, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let reloads = peer.wait_reloads(1);

    let outcome = target
        .deploy(&request(&after, 1, 2))
        .await
        .unwrap_or_else(|e| panic!("second deployment: {e}\n{}", peer.logs()));

    assert!(outcome.reloaded, "{outcome:?}");
    peer.wait_reloads(reloads + 1);
    assert_eq!(
        wait_for_answer(frontend, "new.example", "200 other-backend").await,
        "200 other-backend"
    );
    assert_eq!(get(frontend, "old.example").await, "200 backend-a");
}

/// The `x-generation` header the frontend answers with (empty when it sends none, or when
/// the request fails), over a connection of its own.
async fn generation(frontend: u16) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match reqwest::Client::new()
        .get(format!("http://127.0.0.1:{frontend}/"))
        .header("host", "a.example")
        .timeout(Duration::from_secs(5))
        .send()
        .await
    {
        Ok(response) => response
            .headers()
            .get("x-generation")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// The pid of the master's current worker (the first of `show proc`'s workers).
fn current_worker(peer: &DataplanePeer) -> Option<String> {
    let proc = peer.master("show proc")?;
    proc.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("worker"))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_cannot_bind_fails_with_haproxys_message_and_the_old_worker_serves() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let (a, b) = (
        Backend::start("backend-a").await,
        Backend::start("backend-b").await,
    );
    let good = render(
        config(
            &root,
            frontend,
            &format!("    server s1 127.0.0.1:{}\n", a.port),
            "",
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "other.example other\n")],
    );
    // Another socket of this test holds the port the new configuration binds too: `haproxy
    // -c` (which binds nothing) passes it, the reload cannot take it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let taken = held.local_addr().expect("its address").port();
    let bad = render(
        config(
            &root,
            frontend,
            &format!("    server s1 127.0.0.1:{}\n", b.port),
            &format!("    bind 127.0.0.1:{taken}\n"),
        ),
        vec![aux(AuxKind::Map, "maps/hosts.map", "other.example other\n")],
    );
    let target = target(&peer);
    target
        .deploy(&request(&good, 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    peer.wait_reloads(1);
    assert_eq!(
        wait_for_answer(frontend, "a.example", "200 backend-a").await,
        "200 backend-a"
    );
    let worker = current_worker(&peer).expect("a worker");

    let error = target
        .deploy(&request(&bad, 1, 2))
        .await
        .expect_err("the new listener cannot bind");

    let text = error.to_string();
    assert!(
        matches!(error, DeployError::Rejected(_))
            && text.contains("cannot bind socket (Address already in use)")
            && text.contains(&format!("127.0.0.1:{taken}")),
        "{error:?}\n{}",
        peer.logs()
    );
    // The API's own record of the reload: failed, with HAProxy's message.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let reloads: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/services/haproxy/reloads", peer.url))
        .basic_auth(&peer.user, Some(&peer.password))
        .send()
        .await
        .expect("the reloads")
        .json()
        .await
        .expect("the reloads as JSON");
    let failed: Vec<&serde_json::Value> = reloads
        .as_array()
        .expect("a list of reloads")
        .iter()
        .filter(|r| r["status"] == "failed")
        .collect();
    assert!(
        failed.len() == 1
            && failed[0]["response"]
                .as_str()
                .is_some_and(|r| r.contains("Address already in use")),
        "{reloads:#}"
    );
    let proc = peer.master("show proc").unwrap_or_default();
    assert!(proc.contains("[failed: 1]"), "{proc}");
    assert_eq!(current_worker(&peer), Some(worker), "{proc}");
    for _ in 0..5 {
        assert_eq!(get(frontend, "a.example").await, "200 backend-a");
    }
    assert!(
        !peer.config_on_disk().contains(&format!(":{taken}")),
        "the API restored the previous configuration:\n{}",
        peer.config_on_disk()
    );

    // Once the port is free, the same configuration deploys.
    drop(held);
    let outcome = target
        .deploy(&request(&bad, 1, 3))
        .await
        .unwrap_or_else(|e| panic!("third deployment: {e}\n{}", peer.logs()));
    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(get(frontend, "a.example").await, "200 backend-b");
}

#[tokio::test(flavor = "multi_thread")]
async fn right_after_a_deployment_that_reloads_returns_every_request_gets_the_new_configuration() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let at = |n: u64| {
        render(
            config(
                &root,
                frontend,
                &servers,
                &format!("    http-response set-header x-generation gen-{n}\n"),
            ),
            vec![aux(AuxKind::Map, "maps/hosts.map", "")],
        )
    };
    let target = target(&peer);
    target
        .deploy(&request(&at(1), 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    peer.wait_reloads(1);

    let mut stale = Vec::new();
    for n in 2..=4 {
        let outcome = target
            .deploy(&request(&at(n), 1, n))
            .await
            .unwrap_or_else(|e| panic!("deployment {n}: {e}\n{}", peer.logs()));
        assert!(outcome.reloaded, "{outcome:?}");
        // Fresh connections, one after another, from the moment the deployment returned.
        for i in 0..20 {
            let got = generation(frontend).await;
            if got != format!("gen-{n}") {
                stale.push(format!("deployment {n}, request {i}: {got:?}"));
            }
        }
    }

    assert!(
        stale.is_empty(),
        "{} of 60 requests got another configuration than the one just deployed:\n{}",
        stale.len(),
        stale.join("\n")
    );
}

/// A haproxy.cfg whose frontend answers every request with `body`.
fn answering(root: &str, frontend: u16, body: &str) -> String {
    format!(
        "global\n    default-path origin {root}\n    stats socket {root}/runtime.sock level admin\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend fe\n    bind 127.0.0.1:{frontend}\n    http-request return status 200 content-type text/plain string {body}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn once_the_api_answers_a_forced_reload_every_request_gets_the_new_configuration() {
    // The pod's own contract, without haptor's driver (which also checks for a new worker):
    // the API answers a push with `force_reload` when the reload command exits, and the
    // chart's reload.sh exits once the new worker serves.
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let mut stale = Vec::new();
    for n in 1..=3 {
        push_raw(
            &peer,
            "force_reload=true",
            answering(&root, frontend, &format!("gen-{n}")),
        )
        .await;
        for i in 0..20 {
            let got = get(frontend, "a.example").await;
            if got != format!("200 gen-{n}") {
                stale.push(format!("reload {n}, request {i}: {got}"));
            }
        }
    }

    assert!(
        stale.is_empty(),
        "{} of 60 requests got another configuration than the one the API just reloaded:\n{}",
        stale.len(),
        stale.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_map_entry_removed_empties_the_map_live_and_in_its_file() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let a = Backend::start("backend-a").await;
    let servers = format!("    server s1 127.0.0.1:{}\n", a.port);
    let with_map = |content: &str| {
        render(
            config(&root, frontend, &servers, ""),
            vec![aux(AuxKind::Map, "maps/hosts.map", content)],
        )
    };
    let target = target(&peer);
    target
        .deploy(&request(&with_map("old.example other\n"), 1, 1))
        .await
        .unwrap_or_else(|e| panic!("first deployment: {e}\n{}", peer.logs()));
    let reloads = peer.wait_reloads(1);
    assert_eq!(
        wait_for_answer(frontend, "old.example", "200 other-backend").await,
        "200 other-backend"
    );

    // The last Ingress of the host map goes: the API refuses an empty text body.
    let outcome = target
        .deploy(&request(&with_map(""), 1, 2))
        .await
        .unwrap_or_else(|e| panic!("emptying the map: {e}\n{}", peer.logs()));

    assert!(!outcome.reloaded, "{outcome:?}");
    assert_eq!(get(frontend, "old.example").await, "200 backend-a");
    assert_eq!(peer.reloads(), Some(reloads), "no reload");
    assert_eq!(
        peer.file("maps/hosts.map").map(|m| m.trim().to_string()),
        Some(String::new())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_without_its_key_is_rejected_naming_the_file_and_nothing_is_pushed() {
    let frontend = free_port();
    let peer = DataplanePeer::start(&initial(frontend));
    let root = peer.root().display().to_string();
    let dir = tempfile::tempdir().expect("a temp dir");
    let cert = dir.path().join("cert.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=www.example.com", "-keyout"])
        .arg(dir.path().join("key.pem"))
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs (./scripts/test installs it)");
    assert!(made.status.success(), "{made:?}");
    let certificate_only = std::fs::read_to_string(&cert).expect("the certificate");
    let rendered = render(
        config(&root, frontend, "", "").replace(
            &format!("bind 127.0.0.1:{frontend}"),
            &format!("bind 127.0.0.1:{frontend} ssl crt ssl/default_www_example_com-tls.pem"),
        ),
        vec![aux(
            AuxKind::Cert,
            "ssl/default_www_example_com-tls.pem",
            &certificate_only,
        )],
    );
    let version_before = peer.config_on_disk();

    let error = target(&peer)
        .deploy(&request(&rendered, 1, 1))
        .await
        .expect_err("the API refuses a certificate without its key");

    let DeployError::Rejected(message) = &error else {
        panic!("refused content is no outage: expected Rejected, got {error:?}");
    };
    assert!(
        message.contains("ssl/default_www_example_com-tls.pem")
            && message.contains("file should contain both certificate and private key"),
        "{message}"
    );
    assert_eq!(peer.config_on_disk(), version_before, "nothing was pushed");
}
