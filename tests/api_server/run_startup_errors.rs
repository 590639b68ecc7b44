//! `haptor run` started where it cannot work yet, through the real binary, as a new user
//! meets it: each start-up must name the real cause in the log and in `/readyz`, with the
//! advice that fits that cause and no other.
//!
//! - An API server that is not there (a kubeconfig pointing at a closed port): the log names
//!   the server's URL and "connection refused", with no RBAC hint; `/readyz` answers 503
//!   naming the API server and its URL.
//! - A real kube-apiserver without haptor's CustomResourceDefinitions: the log and `/readyz`
//!   name the CRD `haproxytemplateconfigs.haptor.dev` and the file that installs it; once
//!   the CRDs are applied, the watch resumes and `/readyz` moves on to the config itself.
//! - An identity without RBAC on the config (the kit's restricted user): the 403 is told as
//!   one error, carrying the RBAC hint that names the verbs and the resource, and only once
//!   the refusal has lasted over two seconds (a restarted API server refuses for a moment:
//!   that must not read as missing permissions).

use crate::haptor_run;
use crate::kube_kit;
use crate::support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use haptor_run::{Replica, repo, wait_for};
use kube_kit::{Kit, KitOptions};

/// The file that installs haptor's CRDs, which the missing-CRD message names.
const CRD_FILE: &str = "deploy/crds/haptor.dev_crds.yaml";

/// The first line of `log` that contains every one of `parts`.
fn line_with<'a>(log: &'a str, parts: &[&str]) -> Option<&'a str> {
    log.lines().find(|l| parts.iter().all(|p| l.contains(p)))
}

/// `/readyz` once it answers 503 with a body containing `part`.
async fn readyz_naming(replica: &Replica, part: &str) -> String {
    wait_for(&format!("/readyz to name {part:?}"), &[replica], || async {
        let (status, body) = replica.readyz().await?;
        (status == 503 && body.contains(part)).then_some(body)
    })
    .await
}

/// A log line once it contains every one of `parts`.
async fn logged(replica: &Replica, parts: &[&str]) -> String {
    wait_for(
        &format!("a log line with {parts:?}"),
        &[replica],
        || async { line_with(&replica.log_text(), parts).map(str::to_string) },
    )
    .await
}

/// The time a log line starts with (the text format's RFC 3339 timestamp).
fn logged_at(line: &str) -> jiff::Timestamp {
    line.split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a log line that starts with its time: {line}"))
}

/// A kubeconfig for `url`, trusting any certificate (nothing answers there anyway).
fn kubeconfig_for(dir: &Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("unreachable.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: nowhere\n  cluster:\n    server: {url}\n    insecure-skip-tls-verify: true\n\
             users:\n- name: someone\n  user:\n    token: not-checked\n\
             contexts:\n- name: nowhere\n  context:\n    cluster: nowhere\n    user: someone\n    namespace: default\n\
             current-context: nowhere\n"
        ),
    )
    .expect("a kubeconfig");
    path
}

#[tokio::test]
async fn an_unreachable_api_server_is_named_by_its_url_as_refusing_connections_and_readyz_waits_for_it()
 {
    let dir = tempfile::tempdir().expect("a temp dir");
    // A port nothing listens on.
    let url = format!("https://127.0.0.1:{}", support::free_port());
    let kubeconfig = kubeconfig_for(dir.path(), &url);
    let replica = Replica::start(&kubeconfig, "haptor", "startup-unreachable");

    let line = logged(&replica, &["connection refused", &url]).await;
    eprintln!("the log says: {line}");
    assert!(line.contains(" WARN "), "a warning: {line}");
    assert!(
        line.contains(&format!("cannot reach the API server at {url}")),
        "{line}"
    );
    let body = readyz_naming(
        &replica,
        &format!("the API server at {url} (not reachable: connection refused"),
    )
    .await;
    eprintln!("/readyz answers 503: {body}");
    // A while later: still one warning, and nothing says to grant anything.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = replica.log_text();
    let warnings = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("connection refused"))
        .count();
    assert_eq!(warnings, 1, "one warning while it repeats:\n{log}");
    for misleading in ["grant", "RBAC", "forbidden", "client error (Connect)"] {
        assert!(
            !log.contains(misleading),
            "no {misleading:?} for a refused connection:\n{log}"
        );
    }
}

/// Creates haptor's CRDs from [`CRD_FILE`] (the kit without CRDs, once the test has seen
/// haptor say they are missing).
async fn install_crds(client: &kube::Client) {
    let text = std::fs::read_to_string(repo(CRD_FILE)).expect("the CRD file");
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value =
            serde::Deserialize::deserialize(document).expect("a YAML document");
        if value.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_json::from_value(value).expect("a CRD");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("the CRD is created");
    }
}

#[tokio::test]
async fn a_missing_crd_is_named_with_the_file_that_installs_it_in_the_log_and_in_readyz() {
    let kit = Kit::start_with(KitOptions {
        crds: None,
        ..KitOptions::default()
    });
    let ns = kit.temp_ns("startup-no-crd").await;
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "startup-no-crd");

    let line = logged(
        &replica,
        &[
            "the CustomResourceDefinition haproxytemplateconfigs.haptor.dev is not installed",
            &kit.url,
            CRD_FILE,
        ],
    )
    .await;
    eprintln!("the log says: {line}");
    assert!(line.contains(" ERROR "), "an error: {line}");
    assert!(!line.contains("grant"), "no RBAC hint for a 404: {line}");
    let body = readyz_naming(
        &replica,
        "the CustomResourceDefinition haproxytemplateconfigs.haptor.dev (not installed",
    )
    .await;
    eprintln!("/readyz answers 503: {body}");

    // Once the CRDs are applied, the watch resumes and readiness waits for the config.
    install_crds(&kit.admin().await).await;
    let body = readyz_naming(
        &replica,
        &format!("a valid HAProxyTemplateConfig {ns}/haptor-config (not found"),
    )
    .await;
    eprintln!("after the CRDs are applied, /readyz answers 503: {body}");
    let resumed = logged(&replica, &["the watch of the config resumed after"]).await;
    eprintln!("the log says: {resumed}");
}

#[tokio::test]
async fn a_lasting_403_on_the_config_is_one_error_with_the_rbac_hint_naming_verbs_and_resource() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("startup-forbidden").await;
    let replica = Replica::start(kit.restricted_kubeconfig(), &ns, "startup-forbidden");

    let hint = format!(
        "grant haptor's service account the verbs list and watch on resource \
         haproxytemplateconfigs in API group 'haptor.dev' in namespace {ns}"
    );
    let line = logged(
        &replica,
        &[
            &format!(
                "forbidden to list and watch haproxytemplateconfigs.haptor.dev in namespace {ns}"
            ),
            &kit.url,
            &hint,
        ],
    )
    .await;
    eprintln!("the log says: {line}");
    assert!(line.contains(" ERROR "), "an error: {line}");
    let body = readyz_naming(
        &replica,
        &format!(
            "permission to list and watch haproxytemplateconfigs.haptor.dev in namespace {ns}"
        ),
    )
    .await;
    eprintln!("/readyz answers 503: {body}");

    // Told only once the refusal lasted: over two seconds after haptor started watching.
    let log = replica.log_text();
    let started = line_with(&log, &["haptor run: started"])
        .map(logged_at)
        .unwrap_or_else(|| panic!("haptor says it started:\n{log}"));
    let waited = logged_at(&line).duration_since(started);
    eprintln!(
        "the hint came {:.1} s after the start",
        waited.as_secs_f64()
    );
    assert!(
        waited >= jiff::SignedDuration::from_secs(2),
        "a refusal is told only once it lasts: {waited:?}\n{log}"
    );
    // Nothing before it said "forbidden" loudly (kube-rs's own watcher warnings included),
    // and while it repeats it is not told again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = replica.log_text();
    let loud: Vec<&str> = log
        .lines()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains("403"))
        .collect();
    assert_eq!(loud.len(), 1, "one error while the refusal lasts:\n{log}");
}
