//! Directives that run code when HAProxy reads a configuration, through the real binaries:
//! the shipped Ingress library rendered by `haptor render --validate` with Ingresses that
//! try to smuggle `lua-load` and `setenv` into `haproxy.cfg`, and the Validator with the real
//! `haproxy -c` (`HaproxyChecker`) on a template that writes `lua-load` itself. Each smuggled
//! `lua-load` names a Lua file that creates a marker file when HAProxy loads it: the marker
//! shows whether anything ran.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use haptor::pure::config::{HAProxyTemplateConfigSpec, HaproxyConfigTemplate};
use haptor::pure::pipeline::{CompiledConfig, PipelineError};
use haptor::pure::validate::ValidationPhase;

use support::{haproxy_binary, haptor, text};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Writes `dir/evil.lua`, which creates `dir/marker` when HAProxy loads it, and returns
/// (the Lua file, the marker).
fn lua_that_leaves_a_marker(dir: &Path) -> (PathBuf, PathBuf) {
    let lua = dir.join("evil.lua");
    let marker = dir.join("marker");
    std::fs::write(
        &lua,
        format!(
            "local f = io.open(\"{}\", \"w\")\nf:write(\"HAProxy ran this\")\nf:close()\n",
            marker.display()
        ),
    )
    .expect("write the Lua file");
    (lua, marker)
}

/// A fixtures folder for the Ingress library: the IngressClass, a Service `web` with one
/// endpoint, and `ingress` (YAML of one Ingress of class haptor routing to it).
fn fixtures(dir: &Path, ingress: &str) -> PathBuf {
    let fixtures = dir.join("fixtures");
    std::fs::create_dir_all(&fixtures).expect("create the fixtures folder");
    std::fs::write(
        fixtures.join("app.yaml"),
        format!(
            r#"apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: haptor}}
spec: {{controller: haptor.dev/ingress-controller}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: 8080}}]
endpoints: [{{addresses: ["127.0.0.1"], conditions: {{ready: true}}}}]
---
{ingress}"#
        ),
    )
    .expect("write the fixtures");
    fixtures
}

/// `haptor render` of the shipped library with these fixtures, writing the files to
/// `dir/out` and validating them (syntax, schema, `haproxy -c`).
fn render_library(dir: &Path, fixtures: &Path) -> (std::process::Output, PathBuf) {
    let out = dir.join("out");
    let output = haptor(&[
        "render",
        "-f",
        repo("deploy/library/ingress.yaml").to_str().expect("utf-8"),
        "--fixtures",
        fixtures.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        "--validate",
    ]);
    (output, out.join("haproxy.cfg"))
}

/// The 1-based lines of `cfg` whose first word is `keyword`.
fn lines_starting_with(cfg: &str, keyword: &str) -> Vec<usize> {
    cfg.lines()
        .enumerate()
        .filter(|(_, line)| line.split_whitespace().next() == Some(keyword))
        .map(|(index, _)| index + 1)
        .collect()
}

#[test]
fn annotations_carrying_a_newline_and_lua_load_or_setenv_are_left_out_by_the_library_and_nothing_runs()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lua, marker) = lua_that_leaves_a_marker(dir.path());
    let ingress = format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: default
  annotations:
    haproxy.org/load-balance: "roundrobin\nglobal\n  lua-load {lua}"
    haproxy.org/timeout-server: "30s\nglobal\n  setenv LD_PRELOAD /tmp/x.so"
    haproxy.org/timeout-connect: "5s lua-load {lua}"
spec:
  ingressClassName: haptor
  rules:
    - host: a.example
      http:
        paths:
          - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
"#,
        lua = lua.display()
    );
    let fixtures = fixtures(dir.path(), &ingress);
    let (output, cfg_path) = render_library(dir.path(), &fixtures);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    assert!(
        out.contains("valid: syntax, schema and haproxy -c passed"),
        "haproxy -c ran on the render: {out}"
    );
    let cfg = std::fs::read_to_string(&cfg_path).expect("haproxy.cfg was written");
    // The library checks each value against what the annotation may hold and leaves the
    // rest out, saying so: none of the smuggled text reaches the configuration.
    for annotation in ["load-balance", "timeout-server", "timeout-connect"] {
        assert!(
            out.contains(&format!(
                "left out of Ingress default/web: annotation haproxy.org/{annotation}: "
            )),
            "{out}"
        );
    }
    let routes = std::fs::read_to_string(cfg_path.with_file_name("maps").join("routes.map"))
        .expect("routes.map was written");
    assert!(
        routes.contains("a.example/ default/web/http"),
        "still served: {routes}"
    );
    for word in ["lua-load", "setenv", "evil.lua", "LD_PRELOAD"] {
        assert!(
            !cfg.contains(word),
            "{word} reached the configuration:\n{cfg}"
        );
    }
    assert!(
        !marker.exists(),
        "the smuggled Lua ran: {}",
        marker.display()
    );
}

#[test]
fn an_ingress_name_that_would_smuggle_a_global_lua_load_is_refused_where_it_is_read_and_nothing_runs()
 {
    // An API server refuses this name, and so does the manifest loader of a folder
    // (`haptor local`, `render --fixtures`): no template ever sees it.
    let dir = tempfile::tempdir().expect("tempdir");
    let (lua, marker) = lua_that_leaves_a_marker(dir.path());
    let ingress = format!(
        r#"apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: "web\nglobal\n  lua-load {lua}\nbackend smuggled"
  namespace: default
spec:
  ingressClassName: haptor
  rules:
    - host: a.example
      http:
        paths:
          - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
"#,
        lua = lua.display()
    );
    let fixtures = fixtures(dir.path(), &ingress);
    let (output, cfg_path) = render_library(dir.path(), &fixtures);
    let out = text(&output);
    assert!(
        // The document starts at line 22; its `name:` is line 25.
        out.contains("app.yaml:25: metadata.name")
            && out.contains("is not a name Kubernetes accepts for kind Ingress"),
        "the fixture is refused at its file and line: {out}"
    );
    let cfg = std::fs::read_to_string(&cfg_path).unwrap_or_default();
    assert!(lines_starting_with(&cfg, "lua-load").is_empty(), "{cfg}");
    assert!(
        !marker.exists(),
        "the smuggled Lua ran: {}",
        marker.display()
    );
}

/// A config whose template writes a watched object's annotation into a comment as it is:
/// a newline in the value starts a line of its own.
fn config_writing_an_annotation_raw(dir: &Path) -> PathBuf {
    let config = dir.join("raw.yaml");
    std::fs::write(
        &config,
        r#"apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: raw, namespace: default}
spec:
  watchedResources:
    ingresses:
      apiVersion: networking.k8s.io/v1
      resources: ingresses
      indexBy: ["metadata.namespace", "metadata.name"]
  haproxyConfig:
    template: |
      global
        maxconn 100
      defaults
        mode http
        timeout connect 1s
        timeout client 1s
        timeout server 1s
      frontend fe
        bind 127.0.0.1:0
      {{#resources "ingresses" as |ing|}}
        # note: {{ing.metadata.annotations.note}}
      {{/resources}}
"#,
    )
    .expect("write the config");
    config
}

#[test]
fn a_value_whose_newline_injects_a_lua_load_is_refused_at_its_line_while_plain_haproxy_c_would_run_it()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lua, marker) = lua_that_leaves_a_marker(dir.path());
    let fixtures = dir.path().join("fixtures");
    std::fs::create_dir_all(&fixtures).expect("fixtures");
    std::fs::write(
        fixtures.join("ing.yaml"),
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n  namespace: default\n  annotations: {{note: \"x\\nglobal\\n  lua-load {}\"}}\nspec: {{}}\n",
            lua.display()
        ),
    )
    .expect("write the Ingress");
    let config = config_writing_an_annotation_raw(dir.path());
    let out_dir = dir.path().join("out");
    let output = haptor(&[
        "render",
        "-f",
        config.to_str().expect("utf-8"),
        "--fixtures",
        fixtures.to_str().expect("utf-8"),
        "--out",
        out_dir.to_str().expect("utf-8"),
        "--validate",
    ]);
    let out = text(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    let cfg =
        std::fs::read_to_string(out_dir.join("haproxy.cfg")).expect("haproxy.cfg was written");
    let smuggled = lines_starting_with(&cfg, "lua-load");
    assert_eq!(
        smuggled.len(),
        1,
        "the value made a line of its own:\n{cfg}"
    );
    let line = smuggled[0];
    assert!(
        out.contains(&format!(
            "haproxy.cfg:{line}: lua-load runs code when HAProxy loads the configuration; haptor accepts it only on a line the HAProxyTemplateConfig's templates write literally (not from a watched object's values) (schema check)"
        )),
        "the schema error names line {line}: {out}"
    );
    assert!(!out.contains("(semantic check)"), "{out}");
    assert!(
        !marker.exists(),
        "haproxy -c ran the smuggled Lua: {}",
        marker.display()
    );
    // The refusal is what stood between the render and the Lua: HAProxy itself runs the
    // file as soon as it reads the line.
    let check = Command::new(haproxy_binary())
        .args(["-c", "-f"])
        .arg(out_dir.join("haproxy.cfg"))
        .output()
        .expect("haproxy runs");
    assert!(
        marker.exists(),
        "haproxy -c on the unguarded render runs the Lua: {}",
        text(&check)
    );
}

fn spec(template: String) -> HAProxyTemplateConfigSpec {
    HAProxyTemplateConfigSpec {
        haproxy_config: HaproxyConfigTemplate {
            template,
            post_processing: vec![],
        },
        extra_context: Some(serde_json::json!({"lua_file": "/nonexistent/evil.lua"})),
        ..Default::default()
    }
}

const AFTER_GLOBAL: &str = "\
defaults
  mode http
  timeout connect 5s
  timeout client 5s
  timeout server 5s
frontend fe
  bind 127.0.0.1:18999
  default_backend be
backend be
  server s 127.0.0.1:8080
";

#[test]
fn a_lua_load_line_the_template_writes_literally_passes_the_schema_phase_and_haproxy_c_loads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lua, marker) = lua_that_leaves_a_marker(dir.path());
    let config = CompiledConfig::compile(spec(format!(
        "global\n  default-path origin {{{{paths.base_dir}}}}\n  lua-load {}\n{AFTER_GLOBAL}",
        lua.display()
    )))
    .expect("compiles");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            haptor::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let validator = haptor::drivers::haproxy_check::validator(haproxy_binary(), 4);
    let validated = validator
        .validate(rendered)
        .unwrap_or_else(|e| panic!("the literal lua-load passes every phase: {e}"));
    assert!(!validated.from_cache);
    assert!(
        marker.exists(),
        "haproxy -c loaded the template's Lua file (the check runs Lua, hence the guard)"
    );
}

#[test]
fn a_lua_load_line_an_expression_writes_is_refused_before_haproxy_c_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (lua, marker) = lua_that_leaves_a_marker(dir.path());
    let mut spec = spec(format!(
        "global\n  lua-load {{{{lua_file}}}}\n{AFTER_GLOBAL}"
    ));
    spec.extra_context = Some(serde_json::json!({"lua_file": lua.display().to_string()}));
    let config = CompiledConfig::compile(spec).expect("compiles");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            haptor::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let validator = haptor::drivers::haproxy_check::validator(haproxy_binary(), 4);
    let Err(PipelineError::Invalid(err)) = validator.validate(rendered) else {
        panic!("the lua-load line an expression wrote is refused");
    };
    assert_eq!(err.phase, ValidationPhase::Schema, "{err}");
    assert_eq!(err.problems[0].line, Some(2), "{err}");
    assert!(!marker.exists(), "haproxy -c never ran the Lua file");
}
