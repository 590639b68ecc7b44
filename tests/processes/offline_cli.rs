//! The offline commands as a template author uses them: `validate`, `render` and `lint`
//! against the example config, broken copies of it, and the HAProxy corpus. They run the real
//! `haproxy` binary for `haproxy -c`.

use crate::support;

use std::path::{Path, PathBuf};

use support::{haptor, text};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn example_config() -> String {
    std::fs::read_to_string(repo("examples/ingress/config.yaml")).expect("example config exists")
}

/// Writes a changed copy of the example config and returns its path.
fn broken_copy(dir: &tempfile::TempDir, from: &str, to: &str) -> PathBuf {
    let original = example_config();
    assert!(
        original.contains(from),
        "the example no longer contains {from:?}"
    );
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, original.replacen(from, to, 1)).expect("write copy");
    path
}

#[test]
fn the_example_configs_validation_tests_pass() {
    let output = haptor(&[
        "validate",
        "-f",
        repo("examples/ingress/config.yaml")
            .to_str()
            .expect("utf-8"),
    ]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    let passed: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("validation tests: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a summary line");
    assert!(passed >= 5, "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn a_broken_assertion_fails_validate_and_names_the_test() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = broken_copy(
        &dir,
        r"pattern: '^a\.example/ svc_default_web_80$'",
        r"pattern: '^a\.example/ svc_default_nope_80$'",
    );
    let output = haptor(&["validate", "-f", config.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL hosts-route-to-their-service"), "{out}");
    assert!(out.contains("svc_default_nope_80"), "{out}");
    assert!(out.contains("5 passed, 1 failed"), "{out}");
}

#[test]
fn validate_in_json_with_dump_rendered_includes_the_files_a_failing_test_rendered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = broken_copy(
        &dir,
        r"pattern: '^a\.example/ svc_default_web_80$'",
        r"pattern: '^a\.example/ svc_default_nope_80$'",
    );
    let output = haptor(&[
        "validate",
        "-f",
        config.to_str().expect("utf-8"),
        "-o",
        "json",
        "--dump-rendered",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let tests = report["tests"].as_array().expect("tests");
    let failing = tests
        .iter()
        .find(|t| t["name"] == "hosts-route-to-their-service")
        .expect("the failing test");
    assert!(
        failing["rendered"]["haproxy.cfg"]
            .as_str()
            .is_some_and(|cfg| cfg.contains("frontend")),
        "{failing}"
    );
    let files = failing["rendered"]["files"].as_object().expect("files");
    assert!(
        files.values().any(|content| content
            .as_str()
            .is_some_and(|c| c.contains("svc_default_web_80"))),
        "{files:?}"
    );
    assert!(
        tests
            .iter()
            .filter(|t| t["passed"] == true)
            .all(|t| t.get("rendered").is_none()),
        "only failing tests carry their files"
    );
}

#[test]
fn validate_speaks_json_for_machines() {
    let output = haptor(&[
        "validate",
        "-f",
        repo("examples/ingress/config.yaml")
            .to_str()
            .expect("utf-8"),
        "-o",
        "json",
    ]);
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(report["failed"], 0);
    assert!(report["tests"].as_array().is_some_and(|t| t.len() >= 5));
}

#[test]
fn a_template_syntax_error_is_reported_with_template_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = broken_copy(
        &dir,
        "{{#resources \"services\" as |service|}}",
        "{{#resources \"services\" as |service|",
    );
    let output = haptor(&["validate", "-f", config.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(out.contains("template 'haproxy.cfg' line"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

#[test]
fn render_prints_the_config_and_its_map_and_validates_them() {
    let output = haptor(&[
        "render",
        "-f",
        repo("examples/ingress/config.yaml")
            .to_str()
            .expect("utf-8"),
        "--fixtures",
        repo("examples/ingress/fixtures").to_str().expect("utf-8"),
        "--validate",
    ]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("# ---- maps/routes.map"), "{out}");
    assert!(out.contains("web.example/ svc_default_web_80"), "{out}");
    assert!(out.contains("backend svc_default_api_8081"), "{out}");
    assert!(
        out.contains("valid: syntax, schema and haproxy -c passed"),
        "{out}"
    );
}

#[test]
fn render_reports_a_malformed_fixture_with_file_and_line_and_still_renders_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(repo("examples/ingress/fixtures")).expect("fixtures") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
    std::fs::write(
        dir.path().join("zz-broken.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: [oops\n",
    )
    .expect("write");
    let output = haptor(&[
        "render",
        "-f",
        repo("examples/ingress/config.yaml")
            .to_str()
            .expect("utf-8"),
        "--fixtures",
        dir.path().to_str().expect("utf-8"),
    ]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    let reported = out
        .lines()
        .find(|l| l.contains("zz-broken.yaml:"))
        .unwrap_or_else(|| panic!("no error names the file: {out}"));
    let line: usize = reported
        .split("zz-broken.yaml:")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .expect("a line number");
    assert!(
        (4..=5).contains(&line),
        "the error points at the broken line or the end of the document: {reported}"
    );
    assert!(reported.contains("malformed YAML"), "{reported}");
    assert!(out.contains("backend svc_default_web_80"), "{out}");
}

#[test]
fn lint_reports_an_unknown_directive_as_file_line_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.cfg");
    std::fs::write(&file, "global\n  maxconn 10\n\nfrontend fe\n  bnd :80\n").expect("write");
    let output = haptor(&["lint", file.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(out.contains(&format!("{}:5: ", file.display())), "{out}");
    assert!(out.contains("bnd"), "{out}");
}

#[test]
fn lint_with_haproxy_reports_what_only_haproxy_sees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("missing-error-page.cfg");
    std::fs::write(
        &file,
        "defaults\n  mode http\n  errorfile 503 /nowhere/503.http\n\nfrontend fe\n  bind 127.0.0.1:18998\n",
    )
    .expect("write");
    assert!(
        haptor(&["lint", file.to_str().expect("utf-8")])
            .status
            .success(),
        "parser and schema accept it"
    );
    let output = haptor(&["lint", "--haproxy", file.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(out.contains("nowhere"), "{out}");
}

#[test]
fn lint_dumps_the_structured_view_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ok.cfg");
    std::fs::write(&file, "frontend fe\n  bind :80\n  default_backend be\n\nbackend be\n  server s1 10.0.0.1:8080 weight 10\n").expect("write");
    let output = haptor(&["lint", "--dump", "json", file.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", text(&output));
    let dump: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let servers = dump["view"]["backends"][0]["servers"]
        .as_array()
        .expect("servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["name"], "s1");
}

/// Every configuration of the corpus that HAProxy 2.6 accepts.
fn accepted_corpus_configs() -> Vec<PathBuf> {
    let corpus = repo("../shared/corpus/haproxy");
    let manifest = std::fs::read_to_string(corpus.join("MANIFEST.tsv"))
        .unwrap_or_else(|e| panic!("the HAProxy corpus must be at {}: {e}", corpus.display()));
    manifest
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            matches!(fields.get(3), Some(&"0") | Some(&"2")).then(|| corpus.join(fields[0]))
        })
        .collect()
}

#[test]
fn lint_accepts_every_corpus_config_haproxy_accepts() {
    let files = accepted_corpus_configs();
    assert!(
        files.len() > 200,
        "expected the 256 accepted configs, found {}",
        files.len()
    );
    // These are the configs HAProxy 2.6 accepts (the corpus's manifest), so they are linted
    // for 2.6 whatever haproxy the tests run; what each later line accepts is judged by
    // haproxy_corpus::on_the_line_under_test_the_lint_accepts_what_its_haproxy_accepts_and_flags_what_it_rejects.
    let mut args = vec![
        "lint".to_string(),
        "--haproxy-version".to_string(),
        "2.6".to_string(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = haptor(&arg_refs);
    assert!(output.status.success(), "{}", text(&output));
}

#[test]
fn plan_prints_runtime_operations_and_no_reload_for_an_endpoint_move() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = "frontend fe\n  bind :8080\n  default_backend be\n\nbackend be\n";
    let from = dir.path().join("from.cfg");
    let to = dir.path().join("to.cfg");
    std::fs::write(
        &from,
        format!("{base}  server SRV_1 10.0.0.1:80\n  server SRV_2 127.0.0.1:1 disabled\n"),
    )
    .expect("write");
    std::fs::write(
        &to,
        format!("{base}  server SRV_1 10.0.0.1:80\n  server SRV_2 10.0.0.2:80\n"),
    )
    .expect("write");
    let output = haptor(&[
        "plan",
        from.to_str().expect("utf-8"),
        to.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "runtime: set server be/SRV_2 addr 10.0.0.2 port 80\nruntime: set server be/SRV_2 state ready\nfile: write haproxy.cfg\nreload: no\n"
    );
}

#[test]
fn plan_says_reload_yes_with_the_reason_when_a_backend_is_added() {
    let dir = tempfile::tempdir().expect("tempdir");
    let from = dir.path().join("from.cfg");
    let to = dir.path().join("to.cfg");
    std::fs::write(&from, "backend be\n  server s1 10.0.0.1:80\n").expect("write");
    std::fs::write(
        &to,
        "backend be\n  server s1 10.0.0.1:80\n\nbackend api\n  server a1 10.0.0.9:80\n",
    )
    .expect("write");
    let output = haptor(&[
        "plan",
        "-o",
        "json",
        from.to_str().expect("utf-8"),
        to.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(plan["reload"], true);
    assert_eq!(plan["reload_reasons"][0], "section 'backend api' was added");
}

/// A config, its extraContext naming `marker`, whose tests expect `written-for` unless a test
/// names its own.
fn context_config(global_context: bool) -> String {
    let global = if global_context {
        "    _global:\n      extraContext: {marker: written-for}\n"
    } else {
        ""
    };
    format!(
        r#"apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {{name: c}}
spec:
  extraContext: {{marker: deployed}}
  haproxyConfig:
    template: |
      global
        # {{{{marker}}}}
      defaults
        mode http
        timeout connect 1s
        timeout client 1s
        timeout server 1s
  validationTests:
{global}    uses-the-context-the-tests-are-written-for:
      assertions:
        - {{type: contains, pattern: '# written-for'}}
    names-its-own-context:
      extraContext: {{marker: its-own}}
      assertions:
        - {{type: contains, pattern: '# its-own'}}
"#
    )
}

#[test]
fn the_global_tests_extra_context_is_every_tests_context_unless_a_test_names_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, context_config(true)).expect("write");
    let output = haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("2 passed, 0 failed"), "{out}");

    // Without it, the tests see the config's own extraContext.
    std::fs::write(&path, context_config(false)).expect("write");
    let output = haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAIL uses-the-context-the-tests-are-written-for"),
        "{out}"
    );
    assert!(out.contains("1 passed, 1 failed"), "{out}");
}
