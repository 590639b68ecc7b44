//! The `haptor` binary as a user runs it: subcommands, exit codes and the checked-in CRDs.

use crate::support;

use std::process::{Command, Output};

use support::haptor;

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn help_lists_every_subcommand() {
    let output = haptor(&["--help"]);
    assert!(output.status.success());
    let text = stdout(&output);
    for command in [
        "run", "local", "validate", "render", "lint", "crd", "version",
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "--help does not list '{command}':\n{text}"
        );
    }
}

#[test]
fn crd_prints_yaml_holding_both_custom_resources() {
    let output = haptor(&["crd"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let kinds: Vec<String> = text
        .split("---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| {
            let value: serde_json::Value =
                serde_yaml_ng::from_str(doc).expect("each document is YAML");
            assert_eq!(value["kind"], "CustomResourceDefinition");
            value["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, vec!["HAProxyTemplateConfig", "HAProxyCfg"]);
}

#[test]
fn the_checked_in_crds_match_the_generated_ones() {
    let generated = stdout(&haptor(&["crd"]));
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/crds/haptor.dev_crds.yaml"
    );
    let checked_in =
        std::fs::read_to_string(path).expect("deploy/crds/haptor.dev_crds.yaml exists");
    assert!(
        generated == checked_in,
        "deploy/crds/haptor.dev_crds.yaml is stale: regenerate it with `cargo run -- crd > deploy/crds/haptor.dev_crds.yaml`"
    );
}

#[test]
fn run_with_an_unreadable_kubeconfig_fails_naming_the_file() {
    let output = haptor(&["run", "--kubeconfig", "/nonexistent/haptor-kubeconfig"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "haptor run: cannot reach the Kubernetes API: /nonexistent/haptor-kubeconfig"
        ),
        "{stderr}"
    );
}

#[test]
fn version_prints_the_package_version_the_commit_the_target_and_the_haproxy_checker() {
    let output = haptor(&["version"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("haptor {}", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git runs in the checkout");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert_eq!(lines[1], format!("commit: {head}"), "{text}");
    assert!(
        lines[2].starts_with("built for: ") && lines[2].contains("linux"),
        "{text}"
    );
    // `haptor` runs the tests' haproxy (HAPROXY_BIN): the line names that one.
    let checker = Command::new(support::haproxy_binary())
        .arg("-v")
        .output()
        .expect("haproxy runs (./scripts/test installs it)");
    let reported = String::from_utf8_lossy(&checker.stdout)
        .split_whitespace()
        .nth(2)
        .expect("haproxy -v names its version")
        .to_string();
    assert!(
        lines[3].starts_with("haproxy -c checker: ")
            && lines[3].ends_with(&format!("(HAProxy {reported})")),
        "{text}"
    );

    let without = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .arg("version")
        .env("HAPROXY_BIN", "/nonexistent/haproxy")
        .output()
        .expect("haptor runs");
    let text = stdout(&without);
    assert!(
        text.contains("haproxy -c checker: none: haproxy binary '/nonexistent/haproxy' not found"),
        "{text}"
    );
}

#[test]
fn a_reader_that_stops_early_does_not_make_haptor_panic() {
    use std::io::Read;
    // Far more output than a pipe buffers: the structured view of every corpus config.
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/haproxy/configs"
    );
    let mut files: Vec<String> = std::fs::read_dir(corpus)
        .expect("the HAProxy corpus")
        .flatten()
        .map(|e| e.path().display().to_string())
        .collect();
    files.sort();
    let mut child = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(["lint", "--dump", "json"])
        .args(&files[..100])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut first = [0u8; 3];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("reads the start");
    // The pipe is closed here, while haptor still has most of its output to write.
    let output = child.wait_with_output().expect("exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        output.status.code().is_some(),
        "ended by a signal: {:?}",
        output.status
    );
}

#[test]
fn without_haproxy_on_path_the_debian_package_binary_is_run() {
    // As a normal user's shell has it: no /usr/sbin on PATH, no HAPROXY_BIN.
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("haproxy.cfg");
    std::fs::write(
        &config,
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\nfrontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n",
    )
    .expect("a config");
    let output = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(["lint", "--haproxy"])
        .arg(&config)
        .env_remove("HAPROXY_BIN")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("haptor runs");
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
}
