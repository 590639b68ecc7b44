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

/// A copy of the quickstart's manifests in `dir`, with `extra` files added.
fn quickstart_fixtures(dir: &Path, extra: &[(&str, &str)]) {
    for file in ["apps.yaml", "ingresses.yaml", "tls.yaml"] {
        std::fs::copy(repo("examples/quickstart").join(file), dir.join(file)).expect("copy");
    }
    for (file, text) in extra {
        std::fs::write(dir.join(file), text).expect("write");
    }
}

fn render_library(fixtures: &Path, more: &[&str]) -> std::process::Output {
    let library = repo("deploy/library/ingress.yaml");
    let mut args = vec![
        "render",
        "-f",
        library.to_str().expect("utf-8"),
        "--fixtures",
        fixtures.to_str().expect("utf-8"),
    ];
    args.extend(more);
    haptor(&args)
}

#[test]
fn render_warns_of_an_object_of_a_kind_nothing_watches_naming_the_closest_watched_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    quickstart_fixtures(
        dir.path(),
        &[(
            "typo.yaml",
            "apiVersion: v1\nkind: Servce\nmetadata: {name: app-c, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n",
        )],
    );
    let output = render_library(dir.path(), &[]);
    let out = text(&output);
    assert!(output.status.success(), "a warning, not a failure: {out}");
    let warning = format!(
        "{}:1: warning: Servce default/app-c is not read by the config: no watched resource has apiVersion v1 and kind Servce; did you mean kind Service?",
        dir.path().join("typo.yaml").display()
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&warning),
        "{out}"
    );
    assert!(
        !out.contains("warning: Service") && !out.contains("warning: Ingress"),
        "watched objects are not warned of: {out}"
    );
}

#[test]
fn render_refuses_an_endpoint_slice_whose_port_is_a_string_naming_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    quickstart_fixtures(dir.path(), &[]);
    let apps = dir.path().join("apps.yaml");
    let original = std::fs::read_to_string(&apps).expect("apps.yaml");
    let broken = original.replacen(
        "ports: [{name: http, port: 19001}]",
        "ports: [{name: http, port: \"19001\"}]",
        1,
    );
    assert_ne!(
        broken, original,
        "the quickstart's app-a slice is on port 19001"
    );
    std::fs::write(&apps, broken).expect("write");
    let output = render_library(dir.path(), &[]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    let problem = format!(
        "{}:9: EndpointSlice default/app-a-1: ports[0].port: expected an integer, got the string \"19001\" (write 19001 without quotes); the object is left out",
        apps.display()
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains(&problem),
        "{out}"
    );
    assert!(
        out.contains("server SRV_1 127.0.0.1:19002"),
        "the rest still renders: {out}"
    );
}

#[test]
fn lint_with_haproxy_checks_a_folder_render_out_wrote_with_its_paths_resolved_in_that_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixtures = dir.path().join("fixtures");
    std::fs::create_dir(&fixtures).expect("mkdir");
    quickstart_fixtures(&fixtures, &[]);
    let out_dir = dir.path().join("rendered");
    let output = render_library(&fixtures, &["--out", out_dir.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", text(&output));
    let cfg = out_dir.join("haproxy.cfg");
    assert!(
        std::fs::read_to_string(&cfg)
            .expect("haproxy.cfg written")
            .contains("default-path origin /etc/haproxy"),
        "the render is for the pods' /etc/haproxy"
    );
    for target in [&cfg, &out_dir] {
        let output = haptor(&["lint", "--haproxy", target.to_str().expect("utf-8")]);
        let out = text(&output);
        assert!(output.status.success(), "{}: {out}", target.display());
        assert!(out.contains("1 file(s) checked, no problems"), "{out}");
        assert!(
            out.contains("not the 'origin /etc/haproxy' of its default-path"),
            "says where paths resolve: {out}"
        );
    }
    // A map missing from the folder is still found, at its line of haproxy.cfg.
    std::fs::remove_file(out_dir.join("maps/routes.map")).expect("remove a map");
    let output = haptor(&["lint", "--haproxy", cfg.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    let line = std::fs::read_to_string(&cfg)
        .expect("haproxy.cfg")
        .lines()
        .position(|l| l.contains("map_beg(maps/routes.map)"))
        .expect("routes.map is used")
        + 1;
    assert!(
        out.contains(&format!("{}:{line}: ", cfg.display())) && out.contains("maps/routes.map"),
        "{out}"
    );
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

/// Writes the Ingress library with `anchor` replaced by `replacement` (once) as
/// `library.yaml` in `dir`, and returns its path and text.
fn library_copy(dir: &tempfile::TempDir, anchor: &str, replacement: &str) -> (PathBuf, String) {
    let library =
        std::fs::read_to_string(repo("deploy/library/ingress.yaml")).expect("the library");
    assert!(library.contains(anchor), "the library holds {anchor:?}");
    let text = library.replacen(anchor, replacement, 1);
    let path = dir.path().join("library.yaml");
    std::fs::write(&path, &text).expect("write the copy");
    (path, text)
}

/// The 1-based line of the first line of `text` that holds `needle`.
fn line_holding(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|line| line.contains(needle))
        .map(|index| index + 1)
        .expect("the text holds the needle")
}

/// The library's `{{#if runtime_socket}}` line: line 9 of its `haproxy.cfg` template.
const RUNTIME_SOCKET_LINE: &str = "      {{#if runtime_socket}}\n";

#[test]
fn an_unclosed_block_is_reported_at_its_config_file_line_with_where_it_opened_and_its_closing_tag()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, copy) = library_copy(
        &dir,
        RUNTIME_SOCKET_LINE,
        &format!("      {{{{#if nope}}}}\n{RUNTIME_SOCKET_LINE}"),
    );
    let line = line_holding(&copy, "{{#if nope}}");
    let expected = format!(
        "library.yaml:{line}: template 'haproxy.cfg' line 9, column 1: `{{{{#if nope}}}}` opened at line 9, column 1 is never closed: add `{{{{/if}}}}` where its block ends"
    );
    for command in ["validate", "render"] {
        let output = haptor(&[command, "-f", path.to_str().expect("utf-8")]);
        let out = text(&output);
        assert_eq!(output.status.code(), Some(1), "{command}: {out}");
        assert!(out.contains(&expected), "{command}: {out}");
        assert!(!out.contains("expected escape"), "{command}: {out}");
    }
}

#[test]
fn a_close_of_the_wrong_block_names_the_open_block_and_where_it_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, copy) = library_copy(
        &dir,
        RUNTIME_SOCKET_LINE,
        &format!("      {{{{#if nope}}}}{{{{/each}}}}\n{RUNTIME_SOCKET_LINE}"),
    );
    let line = line_holding(&copy, "{{#if nope}}{{/each}}");
    let output = haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "library.yaml:{line}: template 'haproxy.cfg' line 9, column 13: `{{{{/each}}}}` at line 9, column 13 does not close `{{{{#if nope}}}}` opened at line 9, column 1: close that block with `{{{{/if}}}}` instead"
        )),
        "{out}"
    );
}

#[test]
fn a_template_error_in_a_snippet_names_the_config_file_line_of_the_snippets_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, copy) = library_copy(
        &dir,
        "    ingress-routes:\n      template: |\n",
        "    ingress-routes:\n      template: |\n        {{nosuchhelper 1}}\n",
    );
    let line = line_holding(&copy, "{{nosuchhelper 1}}");
    let output = haptor(&["render", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "library.yaml:{line}: template 'ingress-routes' line 1, column 1: unknown helper 'nosuchhelper'"
        )),
        "{out}"
    );
}

#[test]
fn a_template_line_failing_at_render_time_is_reported_at_its_config_file_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Line 9 of haproxy.cfg, rendered by `haptor render` and by every validation test.
    let (path, copy) = library_copy(
        &dir,
        RUNTIME_SOCKET_LINE,
        &format!("      {{{{fail \"the operator said no\"}}}}\n{RUNTIME_SOCKET_LINE}"),
    );
    let line = line_holding(&copy, "the operator said no");
    let expected = format!(
        "library.yaml:{line}: template 'haproxy.cfg' line 9, column 1: the operator said no"
    );
    for command in ["render", "validate"] {
        let output = haptor(&[command, "-f", path.to_str().expect("utf-8")]);
        let out = text(&output);
        assert_eq!(output.status.code(), Some(1), "{command}: {out}");
        assert!(out.contains(&expected), "{command}: {out}");
    }

    // In a map, whose template comes after hundreds of lines of others.
    let (path, copy) = library_copy(
        &dir,
        "    routes.map:\n      template: |\n",
        "    routes.map:\n      template: |\n        {{add \"x\" 1}}\n",
    );
    let line = line_holding(&copy, "{{add \"x\" 1}}");
    let output = haptor(&["render", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "library.yaml:{line}: template 'maps/routes.map' line 1, column 1: argument 1 of add is not a number"
        )),
        "{out}"
    );
}

#[test]
fn a_yaml_syntax_error_in_a_config_keeps_both_locations_the_parser_gives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = library_copy(&dir, "metadata:\n", "metadata:\n  labels:\n    a: \"x\n");
    let output = haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    let at_lines = out.matches(" at line ").count();
    assert!(
        at_lines >= 2,
        "the problem's line and the line of what the parser was reading: {out}"
    );
}

/// A config whose `haproxy.cfg` includes a snippet once per Service, and a folder with two
/// Services, for `render --trace/--profile` and `bench`.
fn traced_config(dir: &Path) -> (PathBuf, PathBuf) {
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        r#"apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: traced}
spec:
  watchedResources:
    services:
      apiVersion: v1
      resources: services
      indexBy: ["metadata.namespace", "metadata.name"]
  templateSnippets:
    backend-servers:
      template: |
        backend {{svc.metadata.name}}
          mode http
          server s1 127.0.0.1:{{svc.spec.ports.0.port}}
  haproxyConfig:
    template: |
      global
        maxconn 100
      defaults
        mode http
        timeout connect 1s
        timeout client 1s
        timeout server 1s
      {{#resources "services" as |svc|}}
      {{> backend-servers}}
      {{/resources}}
"#,
    )
    .expect("write the config");
    let fixtures = dir.join("fixtures");
    std::fs::create_dir(&fixtures).expect("fixtures folder");
    std::fs::write(
        fixtures.join("services.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: shop}\nspec:\n  ports: [{port: 8081}]\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec:\n  ports: [{port: 8080}]\n",
    )
    .expect("write the fixtures");
    (config, fixtures)
}

fn render_args<'a>(config: &'a Path, fixtures: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "render",
        "-f",
        config.to_str().expect("utf-8"),
        "--fixtures",
        fixtures.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn render_trace_names_the_template_snippet_and_line_that_wrote_each_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fixtures) = traced_config(dir.path());
    let output = haptor(&render_args(&config, &fixtures, &["--trace"]));
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    // Lines 8-10 are the first Service's backend, written by lines 1-3 of the snippet
    // (lines 13-15 of the file) that line 9 of haproxy.cfg (line 26) included.
    assert!(out.contains("==> haproxy.cfg (13 lines)"), "{out}");
    assert!(
        out.contains(
            "haproxy.cfg:8-10  ← haproxy.cfg line 9 (config.yaml:26) ← snippet backend-servers \
             lines 1-3 (config.yaml:13-15)\n  | backend api\n  |   mode http\n  |   server s1 \
             127.0.0.1:8081\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("haproxy.cfg:1-7  ← haproxy.cfg lines 1-7 (config.yaml:18-24)\n  | global\n"),
        "{out}"
    );
    assert!(
        !out.contains("# ---- haproxy.cfg"),
        "the trace replaces the files: {out}"
    );
}

#[test]
fn render_trace_in_json_gives_each_line_its_template_line_and_includes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fixtures) = traced_config(dir.path());
    let output = haptor(&render_args(&config, &fixtures, &["--trace", "-o", "json"]));
    assert!(output.status.success(), "{}", text(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert!(
        json["haproxy.cfg"]
            .as_str()
            .is_some_and(|cfg| cfg.contains("backend web")),
        "{json}"
    );
    let file = &json["trace"]["files"][0];
    assert_eq!(file["path"], "haproxy.cfg");
    let line = file["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|line| line["text"] == "  server s1 127.0.0.1:8080")
        .expect("the web server line");
    assert_eq!(line["template"], "backend-servers");
    assert_eq!(line["template_line"], 3);
    assert_eq!(line["config_line"], 15);
    assert_eq!(
        line["included_from"],
        serde_json::json!([{"template": "haproxy.cfg", "line": 9, "config_line": 26}])
    );
    assert_eq!(json["trace"]["config_file"], config.display().to_string());
    assert!(json.get("profile").is_none(), "only what was asked for");
}

#[test]
fn render_profile_lists_templates_and_snippets_with_their_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fixtures) = traced_config(dir.path());
    let output = haptor(&render_args(&config, &fixtures, &["--profile"]));
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    let row = |name: &str| {
        out.lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("backend-servers")[1..3], ["snippet", "2"], "{out}");
    assert_eq!(row("haproxy.cfg")[1..3], ["template", "1"], "{out}");
    assert!(out.contains("self ms"), "{out}");

    let output = haptor(&render_args(
        &config,
        &fixtures,
        &["--profile", "-o", "json"],
    ));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let rows = json["profile"]["rows"].as_array().expect("rows");
    let snippet = rows
        .iter()
        .find(|row| row["template"] == "backend-servers")
        .expect("the snippet's row");
    assert_eq!(snippet["calls"], 2);
    assert!(snippet["total_ms"].as_f64().is_some(), "{snippet}");
    assert!(json.get("trace").is_none(), "only what was asked for");
}

#[test]
fn render_in_json_without_a_trace_prints_the_files() {
    let output = haptor(&[
        "render",
        "-f",
        repo("examples/ingress/config.yaml")
            .to_str()
            .expect("utf-8"),
        "--fixtures",
        repo("examples/ingress/fixtures").to_str().expect("utf-8"),
        "-o",
        "json",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert!(
        json["files"]["maps/routes.map"]
            .as_str()
            .is_some_and(|map| map.contains("web.example/ svc_default_web_80")),
        "{json}"
    );
}

#[test]
fn bench_prints_the_mean_and_percentiles_of_the_timed_renders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, fixtures) = traced_config(dir.path());
    let args = |extra: &[&'static str]| {
        let mut args = vec![
            "bench".to_string(),
            "-f".into(),
            config.display().to_string(),
            "--fixtures".into(),
            fixtures.display().to_string(),
            "-n".into(),
            "5".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    let run = |extra: &[&'static str]| {
        let args = args(extra);
        haptor(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let output = run(&[]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(out.contains("5 plain renders after 2 not timed"), "{out}");
    assert!(out.contains("haproxy.cfg of 13 lines"), "{out}");
    for figure in ["mean", "p50", "p90", "p99", "max"] {
        assert!(
            out.lines()
                .any(|line| line.trim_start().starts_with(figure)
                    && line.trim_end().ends_with(" ms")),
            "{figure}: {out}"
        );
    }

    let output = run(&["--trace", "-o", "json"]);
    assert!(output.status.success(), "{}", text(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(json["iterations"], 5);
    assert_eq!(json["trace"], true);
    assert_eq!(json["samples_ms"].as_array().map(Vec::len), Some(5));
    let (p50, max) = (
        json["p50_ms"].as_f64().expect("p50"),
        json["max_ms"].as_f64().expect("max"),
    );
    assert!(0.0 < p50 && p50 <= max, "{json}");
}
