//! The real `helm` for the tests (`TEST_ASSET_HELM`, built by `scripts/test-peers helm`):
//! `helm template` of the chart and its documents. Included with
//! `#[path = "support/helm.rs"] mod helm;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const HELM_VAR: &str = "TEST_ASSET_HELM";
/// The chart, relative to the repository.
pub const CHART: &str = "deploy/chart/haptor";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The helm binary: `TEST_ASSET_HELM`. Never skipped: without it the test fails, naming the
/// command that builds it.
pub fn helm() -> PathBuf {
    let path = std::env::var_os(HELM_VAR).unwrap_or_else(|| {
        panic!(
            "{HELM_VAR} is not set: these tests need the real helm; run `export $(./scripts/test-peers helm)` (./scripts/test does)"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{HELM_VAR}={} names no file: run `export $(./scripts/test-peers helm)`",
        path.display()
    );
    path
}

/// Runs helm with `args` in the repository; its standard output, or a panic with its
/// standard error.
pub fn run_helm(args: &[&str]) -> String {
    let output = helm_output(args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "helm {} failed ({}):\n{stdout}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs helm with `args` in the repository, expecting it to fail; its standard error, or a
/// panic with what it rendered.
pub fn run_helm_failing(args: &[&str]) -> String {
    let output = helm_output(args);
    assert!(
        !output.status.success(),
        "helm {} succeeded, printing:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn helm_output(args: &[&str]) -> std::process::Output {
    Command::new(helm())
        .args(args)
        .current_dir(repo(""))
        // No user configuration, no repositories, no plugins: the chart only.
        .env("HELM_CONFIG_HOME", repo("target/chart-test-helm/config"))
        .env("HELM_CACHE_HOME", repo("target/chart-test-helm/cache"))
        .env("HELM_DATA_HOME", repo("target/chart-test-helm/data"))
        .output()
        .expect("helm runs")
}

/// `helm template RELEASE deploy/chart/haptor --namespace NS` with `extra` arguments.
pub fn template(release: &str, ns: &str, extra: &[&str]) -> String {
    let mut args = vec!["template", release, CHART, "--namespace", ns];
    args.extend_from_slice(extra);
    run_helm(&args)
}

/// The documents of a multi-document YAML text (empty ones left out).
pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|document| {
            serde::Deserialize::deserialize(document).unwrap_or_else(|e| panic!("YAML: {e}"))
        })
        .filter(|value: &Value| !value.is_null())
        .collect()
}
