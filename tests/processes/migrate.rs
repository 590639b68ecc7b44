//! `haptor migrate` and `haptor annotations` as a user runs them: on the ingress-nginx and
//! Kubernetes examples of the shared corpus, on Ingresses carrying ingress-nginx annotations
//! (from a file and from standard input, as `kubectl get ingress -A -o yaml` prints them),
//! and the annotation reference the repository keeps in `docs/annotations.md`.

use crate::support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use support::{haptor, text};

const CORPUS: &str = "../shared/corpus/kubernetes/ingress";

fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn the_annotation_reference_in_docs_is_what_haptor_annotations_writes() {
    let output = haptor(&["annotations"]);
    assert!(output.status.success(), "{}", text(&output));
    let generated = String::from_utf8_lossy(&output.stdout).into_owned();
    let checked_in =
        std::fs::read_to_string(repo("docs/annotations.md")).expect("docs/annotations.md exists");
    assert!(
        generated == checked_in,
        "docs/annotations.md is stale: regenerate it with `cargo run -- annotations > docs/annotations.md`"
    );
    for linked_from in ["README.md", "deploy/chart/haptor/README.md"] {
        let text = std::fs::read_to_string(repo(linked_from)).expect("a README");
        assert!(
            text.contains("docs/annotations.md"),
            "{linked_from} links the reference"
        );
    }
    // Every annotation the library defines has a section, whether supported or refused.
    for name in [
        "haproxy.org/timeout-server",
        "haproxy.org/cors-enable",
        "nginx.ingress.kubernetes.io/rewrite-target",
        "nginx.ingress.kubernetes.io/configuration-snippet",
    ] {
        assert!(
            generated.contains(&format!("\n### {name}\n")),
            "{name} has a section"
        );
    }
}

#[test]
fn migrate_reports_the_corpus_examples_each_as_served_and_exits_zero_only_when_all_are_as_they_are()
{
    let output = haptor(&["migrate", CORPUS, "-o", "json"]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let summary = &report["summary"];
    let total = summary["total"].as_u64().expect("a total");
    assert!(total >= 10, "the corpus holds Ingresses: {report}");
    assert_eq!(summary["not_served"], 0, "{report}");
    // The corpus's TLS examples name Secrets the corpus does not hold.
    assert!(
        summary["with_parts_left_out"].as_u64() > Some(0),
        "{report}"
    );
    assert_eq!(output.status.code(), Some(1), "not every one is as it is");
    let nginx = report["ingresses"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|i| i["name"] == "ingress-nginx")
        .expect("the ingress-nginx tls-termination example");
    assert_eq!(nginx["verdict"], "with-parts");
    assert!(
        nginx["left_out"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no TLS Secret 'tls-secret'")),
        "{nginx}"
    );
}

fn nginx_ingress(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
        "spec": {"ingressClassName": "nginx",
                 "rules": [{"host": format!("{name}.example"), "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
}

#[test]
fn migrate_names_each_annotation_left_out_with_why_and_counts_them_across_the_input() {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        nginx_ingress("plain", json!({})),
        nginx_ingress("supported", json!({
            "nginx.ingress.kubernetes.io/ssl-redirect": "true",
            "nginx.ingress.kubernetes.io/proxy-body-size": "8m",
            "nginx.ingress.kubernetes.io/enable-cors": "true"})),
        nginx_ingress("snippets", json!({
            "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X: y\";",
            "nginx.ingress.kubernetes.io/ssl-redirect": "true"})),
        nginx_ingress("typo", json!({"nginx.ingress.kubernetes.io/proxy-read-timeout": "30s",
                                     "nginx.ingress.kubernetes.io/no-such-thing": "1"})),
    ]});
    let yaml = serde_yaml_ng::to_string(&list).expect("YAML");
    // As `kubectl get ingress -A -o yaml | haptor migrate -` gives it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(["migrate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("haptor runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write the list");
    let output = child.wait_with_output().expect("haptor ends");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(1), "{report}");
    for expected in [
        "shop/plain: served as it is",
        "shop/supported: served as it is",
        "shop/snippets: served with parts left out\n  - annotation nginx.ingress.kubernetes.io/configuration-snippet is not supported: nginx syntax cannot be translated to HAProxy; use haproxy.org/request-set-header",
        "shop/typo: served with parts left out",
        "annotation nginx.ingress.kubernetes.io/proxy-read-timeout: \"30s\" is not a whole number of seconds; it is left out",
        "annotation nginx.ingress.kubernetes.io/no-such-thing is not one haptor knows",
        "4 Ingress(es): 2 served as they are, 2 with parts left out, 0 not served",
    ] {
        assert!(
            report.contains(expected),
            "missing '{expected}' in:\n{report}"
        );
    }
    let counts = report
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("nginx.ingress.kubernetes.io/ssl-redirect ")
        })
        .expect("a count line for ssl-redirect");
    assert!(counts.ends_with("2 / 0"), "{counts}");

    // Everything served as it is: exit 0.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ingresses.yaml");
    std::fs::write(
        &file,
        serde_yaml_ng::to_string(&nginx_ingress("plain", json!({}))).expect("YAML"),
    )
    .expect("write");
    let output = haptor(&["migrate", file.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", text(&output));
}
