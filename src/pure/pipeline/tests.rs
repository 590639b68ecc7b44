use serde_json::json;

use super::*;
use crate::pure::config::{GeneratedFile, HaproxyConfigTemplate, TemplateSnippet, WatchedResource};

const VALID_CFG: &str = "global\n  maxconn 100\n\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 5s\n  timeout server 5s\n\nfrontend fe\n  bind 127.0.0.1:18999\n  default_backend be\n\nbackend be\n{{#each (resources \"services\")}}  server {{metadata.name}} 127.0.0.1:{{spec.port}}\n{{/each}}";

fn spec_with(template: &str) -> HAProxyTemplateConfigSpec {
    let mut spec = HAProxyTemplateConfigSpec {
        haproxy_config: HaproxyConfigTemplate {
            template: template.into(),
            post_processing: vec![],
        },
        ..Default::default()
    };
    spec.watched_resources.insert(
        "services".into(),
        WatchedResource {
            api_version: "v1".into(),
            resources: "services".into(),
            index_by: vec!["metadata.namespace".into(), "metadata.name".into()],
            ..Default::default()
        },
    );
    spec
}

fn compiled(template: &str) -> CompiledConfig {
    match CompiledConfig::compile(spec_with(template)) {
        Ok(c) => c,
        Err(e) => panic!("compiles: {e}"),
    }
}

fn with_service(config: &CompiledConfig, name: &str, port: u16) -> Stores {
    let stores = config.new_stores().expect("stores");
    stores
        .get("services")
        .expect("store")
        .apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": {"port": port}}))
        .expect("applies");
    stores
}

/// A stand-in for `haproxy -c` (the real runner has its own tests in
/// `tests/processes/semantic_check.rs`): it rejects a server whose host is in the reserved
/// `.invalid` domain (which no resolver answers) and a `default_backend` that names no backend
/// of the file, on their line, as HAProxy does, and counts its runs. The schema phase sees
/// the second before it; only the first reaches this check.
#[derive(Debug, Default)]
pub(crate) struct SimulatedHaproxy {
    pub(crate) runs: std::sync::atomic::AtomicUsize,
}

impl crate::pure::validate::semantic::SemanticCheck for SimulatedHaproxy {
    fn identity(&self) -> Result<String, crate::pure::validate::semantic::SemanticCheckError> {
        Ok("simulated 2.6".into())
    }

    fn check_blocking(
        &self,
        rendered: &RenderedConfig,
    ) -> Result<
        crate::pure::validate::semantic::CheckReport,
        crate::pure::validate::semantic::SemanticCheckError,
    > {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let lines: Vec<&str> = rendered.haproxy_cfg.lines().collect();
        let backends: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.trim().strip_prefix("backend "))
            .map(str::trim)
            .collect();
        for (number, line) in lines.iter().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["server", _, address, ..] = words.as_slice()
                && let Some((host, _)) = address.rsplit_once(':')
                && host.ends_with(".invalid")
            {
                return Err(ValidationError::single(
                    ValidationPhase::Semantic,
                    "haproxy.cfg",
                    Some(number + 1),
                    format!("could not resolve address '{host}'"),
                )
                .into());
            }
            if let Some(name) = line.trim().strip_prefix("default_backend ")
                && !backends.contains(&name.trim())
            {
                return Err(ValidationError::single(
                    ValidationPhase::Semantic,
                    "haproxy.cfg",
                    Some(number + 1),
                    format!("unable to find required default_backend: '{}'", name.trim()),
                )
                .into());
            }
        }
        Ok(Default::default())
    }
}

fn validator() -> Validator {
    Validator::new(Arc::new(SimulatedHaproxy::default()), 8)
}

#[test]
fn a_valid_render_passes_all_three_phases() {
    let config = compiled(VALID_CFG);
    let rendered = config
        .render(
            with_service(&config, "web", 8080).snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert!(rendered.haproxy_cfg.contains("server web 127.0.0.1:8080"));
    let validated = validator().validate(rendered).expect("valid");
    assert!(!validated.from_cache);
    assert_eq!(validated.checksum, validated.rendered.checksum());
}

#[test]
fn an_identical_render_is_served_from_the_cache_without_any_phase() {
    let config = compiled(VALID_CFG);
    let validator = validator();
    let stores = with_service(&config, "web", 8080);
    let first = validator
        .validate(
            config
                .render(
                    stores.snapshot(),
                    None,
                    crate::pure::haproxy::HaproxyVersion::DEFAULT,
                )
                .expect("renders"),
        )
        .expect("valid");
    let second = validator
        .validate(
            config
                .render(
                    stores.snapshot(),
                    None,
                    crate::pure::haproxy::HaproxyVersion::DEFAULT,
                )
                .expect("renders"),
        )
        .expect("valid");
    assert!(!first.from_cache);
    assert!(second.from_cache);
    assert_eq!(validator.cache().hits(), 1);
    // A different render misses.
    let other = config
        .render(
            with_service(&config, "api", 9090).snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert!(!validator.validate(other).expect("valid").from_cache);
}

#[test]
fn a_template_syntax_error_names_the_template_and_line() {
    let err = CompiledConfig::compile(spec_with("global\n  maxconn 1\n{{#each x}}\n"))
        .expect_err("does not compile");
    let text = err.to_string();
    assert!(text.contains("haproxy.cfg"), "{text}");
    assert!(text.contains("line"), "{text}");
}

#[test]
fn a_fail_call_aborts_the_render_with_its_message_and_line() {
    let config =
        compiled("global\n{{#if true}}\n{{fail \"no default certificate configured\"}}\n{{/if}}\n");
    let err = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect_err("fails");
    let text = err.to_string();
    assert!(text.contains("no default certificate configured"), "{text}");
    assert!(text.contains("line 3"), "{text}");
}

#[test]
fn reading_a_store_that_does_not_exist_names_it() {
    let config = compiled("global\n{{#each (resources \"gateways\")}}x{{/each}}\n");
    let err = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect_err("fails");
    let text = err.to_string();
    assert!(text.contains("gateways"), "{text}");
    assert!(text.contains("haproxy.cfg"), "{text}");
}

#[test]
fn an_unknown_directive_is_a_schema_error_on_its_line() {
    let config = compiled("global\n  maxconn 10\n\nfrontend fe\n  bnd 127.0.0.1:18999\n");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let err = validator().validate(rendered).expect_err("invalid");
    let PipelineError::Invalid(invalid) = err else {
        panic!("expected a validation error, got {err}")
    };
    assert_eq!(invalid.phase, ValidationPhase::Schema);
    assert_eq!(invalid.problems[0].line, Some(5));
    assert!(
        invalid.problems[0].message.contains("bnd"),
        "{}",
        invalid.problems[0].message
    );
}

#[test]
fn a_config_haproxy_rejects_is_a_semantic_error_with_its_line() {
    // Parses and passes the schema, but the server's address does not resolve.
    let config = compiled(
        "global\n  maxconn 10\n\ndefaults\n  mode http\n\nfrontend fe\n  bind 127.0.0.1:18999\n  default_backend be\n\nbackend be\n  server s1 missing.invalid:80\n",
    );
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let err = validator().validate(rendered).expect_err("invalid");
    let PipelineError::Invalid(invalid) = err else {
        panic!("expected a validation error, got {err}")
    };
    assert_eq!(invalid.phase, ValidationPhase::Semantic);
    assert!(invalid.to_string().contains("missing"), "{invalid}");
}

#[test]
fn failures_are_not_cached() {
    let config = compiled(
        "global\n  maxconn 10\n\nfrontend fe\n  bind 127.0.0.1:18999\n  default_backend missing\n",
    );
    let validator = validator();
    for _ in 0..2 {
        let rendered = config
            .render(
                config.new_stores().expect("stores").snapshot(),
                None,
                crate::pure::haproxy::HaproxyVersion::DEFAULT,
            )
            .expect("renders");
        assert!(validator.validate(rendered).is_err());
    }
    assert_eq!(validator.cache().hits(), 0);
}

#[test]
fn a_structurally_broken_config_lists_every_problem() {
    let mut spec = spec_with(VALID_CFG);
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .api_version
        .clear();
    spec.template_snippets.insert(
        "empty".into(),
        TemplateSnippet {
            template: String::new(),
        },
    );
    let Err(ConfigError::Structure(problems)) = CompiledConfig::compile(spec) else {
        panic!("expected structural problems")
    };
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn a_compiled_config_carries_its_durations_parsed_once_and_a_bad_one_is_refused_naming_its_field() {
    let mut spec = spec_with(VALID_CFG);
    spec.dataplane.deployment_timeout = "7s".into();
    spec.dataplane.min_deployment_interval = "1m".into();
    spec.dataplane.drift_prevention_interval = "90s".into();
    spec.rendering.timeout = "3s".into();
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .debounce = Some("20ms".into());
    let config = CompiledConfig::compile(spec.clone()).expect("compiles");
    let timings = &config.timings;
    assert_eq!(
        (
            timings.deployment_timeout,
            timings.min_deployment_interval,
            timings.drift_prevention_interval,
            timings.rendering_timeout,
            timings.debounce("services"),
        ),
        (
            Duration::from_secs(7),
            Duration::from_secs(60),
            Duration::from_secs(90),
            Duration::from_secs(3),
            Some(Duration::from_millis(20)),
        )
    );
    assert_eq!(
        config.templates.limits().max_render_time,
        Duration::from_secs(3),
        "the render guard takes the parsed timeout"
    );

    spec.dataplane.deployment_timeout = "thirty seconds".into();
    let Err(ConfigError::Structure(problems)) = CompiledConfig::compile(spec) else {
        panic!("a bad duration is refused")
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "spec.dataplane.deploymentTimeout");
    assert!(
        problems[0]
            .message
            .starts_with("'thirty seconds' is not a duration"),
        "{problems:?}"
    );
}

#[test]
fn a_field_selector_keeps_only_matching_objects() {
    let mut spec = spec_with(VALID_CFG);
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .field_selector = Some("spec.type=ClusterIP".into());
    let config = CompiledConfig::compile(spec).expect("compiles");
    assert!(config.selects("services", &json!({"spec": {"type": "ClusterIP"}})));
    assert!(!config.selects("services", &json!({"spec": {"type": "NodePort"}})));
    assert!(
        config.selects("other", &json!({})),
        "resources without a selector take everything"
    );
}

#[test]
fn post_processors_rewrite_the_rendered_text() {
    let mut spec = spec_with("global\n  maxconn 100\n");
    spec.haproxy_config.post_processing = vec![PostProcessor::RegexReplace {
        pattern: r"maxconn (\d+)".into(),
        replace: "maxconn ${1}0".into(),
    }];
    spec.maps.insert(
        "a.map".into(),
        GeneratedFile {
            template: "KEY value\n".into(),
            post_processing: vec![PostProcessor::RegexReplace {
                pattern: "KEY".into(),
                replace: "key".into(),
            }],
        },
    );
    let config = CompiledConfig::compile(spec).expect("compiles");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert_eq!(rendered.haproxy_cfg, "global\n  maxconn 1000\n");
    assert_eq!(
        rendered
            .aux(crate::pure::rendered::AuxKind::Map, "a.map")
            .map(|f| f.content.as_str()),
        Some("key value\n")
    );
}

#[test]
fn a_manifest_maps_to_the_watched_resources_of_its_kind() {
    let config = compiled(VALID_CFG);
    assert_eq!(
        config
            .watched_resources_for("v1", "Service")
            .collect::<Vec<_>>(),
        vec!["services"]
    );
    assert_eq!(config.watched_resources_for("v1", "Secret").count(), 0);
}

#[test]
fn an_endpoint_only_change_after_a_validated_render_skips_haproxy_c_and_a_structural_one_does_not()
{
    let config = compiled(VALID_CFG);
    let validator = validator();
    let baseline = validator
        .validate(
            config
                .render(
                    with_service(&config, "web", 8080).snapshot(),
                    None,
                    crate::pure::haproxy::HaproxyVersion::DEFAULT,
                )
                .expect("renders"),
        )
        .expect("valid");
    // Only the server's port changes: runtime-only, `haproxy -c` skipped.
    let moved = config
        .render(
            with_service(&config, "web", 9090).snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let fast = validator
        .validate_after(Some(&baseline.rendered), moved)
        .expect("valid");
    assert!(fast.semantic_skipped);
    // A new server line is structural: the full check runs (and here rejects an address that
    // does not resolve).
    let structural = compiled(
        "global\n  maxconn 10\n\nfrontend fe\n  bind 127.0.0.1:18999\n  default_backend be\n\nbackend be\n  server s1 nowhere.invalid:80\n",
    );
    let rendered = structural
        .render(
            structural.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let err = validator
        .validate_after(Some(&baseline.rendered), rendered)
        .expect_err("haproxy -c ran and rejected it");
    assert!(
        matches!(err, PipelineError::Invalid(ref e) if e.phase == ValidationPhase::Semantic),
        "{err}"
    );
}

#[test]
fn a_label_selector_keeps_only_objects_whose_labels_match() {
    let mut spec = spec_with(VALID_CFG);
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .label_selector = Some("app=web,tier!=cache".into());
    let config = CompiledConfig::compile(spec).expect("compiles");
    assert!(config.has_object_selector("services"));
    assert!(!config.has_field_selector("services"));
    let labelled = |labels: Value| json!({"metadata": {"name": "s", "labels": labels}});
    assert!(config.selects("services", &labelled(json!({"app": "web"}))));
    assert!(!config.selects(
        "services",
        &labelled(json!({"app": "web", "tier": "cache"}))
    ));
    assert!(!config.selects("services", &json!({"metadata": {"name": "s"}})));
}

#[test]
fn field_and_label_selectors_must_both_hold() {
    let mut spec = spec_with(VALID_CFG);
    let services = spec.watched_resources.get_mut("services").expect("present");
    services.field_selector = Some("spec.type=ClusterIP".into());
    services.label_selector = Some("app".into());
    let config = CompiledConfig::compile(spec).expect("compiles");
    let object =
        |kind: &str, labels: Value| json!({"metadata": {"labels": labels}, "spec": {"type": kind}});
    assert!(config.selects("services", &object("ClusterIP", json!({"app": "x"}))));
    assert!(!config.selects("services", &object("NodePort", json!({"app": "x"}))));
    assert!(!config.selects("services", &object("ClusterIP", json!({}))));
}

#[test]
fn a_namespace_selector_admits_objects_of_matching_namespaces_and_cluster_scoped_ones() {
    let mut spec = spec_with(VALID_CFG);
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .namespace_selector = Some("team=web".into());
    let config = CompiledConfig::compile(spec).expect("compiles");
    assert!(
        !config.has_object_selector("services"),
        "the namespace selector does not read the object's own fields"
    );
    let namespaces = NamespaceLabels::from_objects([
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "web"}}}),
    ]);
    let in_namespace = |ns: &str| json!({"metadata": {"name": "s", "namespace": ns}});
    assert!(config.admits("services", &in_namespace("shop"), &namespaces));
    assert!(!config.admits("services", &in_namespace("blog"), &namespaces));
    assert!(config.admits("services", &json!({"metadata": {"name": "s"}}), &namespaces));
    assert!(
        config.selects("services", &in_namespace("blog")),
        "selects alone does not judge namespaces"
    );
}

#[test]
fn an_invalid_label_selector_is_a_structural_problem_of_its_field() {
    let mut spec = spec_with(VALID_CFG);
    spec.watched_resources
        .get_mut("services")
        .expect("present")
        .namespace_selector = Some("team in web".into());
    let Err(ConfigError::Structure(problems)) = CompiledConfig::compile(spec) else {
        panic!("expected a structural problem")
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        problems[0].path,
        "spec.watchedResources.services.namespaceSelector"
    );
    assert!(
        problems[0].message.contains("at character 9"),
        "{problems:?}"
    );
}

/// The rest of a valid configuration after a `global` section: defaults, a frontend and the
/// backend `be` whose lines the caller writes.
const AFTER_GLOBAL: &str = "defaults\n  mode http\n  timeout connect 5s\n  timeout client 5s\n  timeout server 5s\n\nfrontend fe\n  bind 127.0.0.1:18999\n  default_backend be\n\nbackend be\n";

fn with_extra(template: &str, extra: Value) -> CompiledConfig {
    let mut spec = spec_with(template);
    spec.extra_context = Some(extra);
    CompiledConfig::compile(spec).expect("compiles")
}

/// The one simulated `haproxy -c` a validator runs, so a test can count its runs.
fn counted_validator() -> (Validator, Arc<SimulatedHaproxy>) {
    let checker = Arc::new(SimulatedHaproxy::default());
    (Validator::new(checker.clone(), 8), checker)
}

fn semantic_runs(checker: &SimulatedHaproxy) -> usize {
    checker.runs.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn a_lua_load_line_the_templates_write_literally_passes_every_phase() {
    let mut spec = spec_with(&format!(
        "global\n  lua-load /etc/haproxy/x.lua\n{{{{> lua}}}}\n{AFTER_GLOBAL}"
    ));
    spec.template_snippets.insert(
        "lua".into(),
        TemplateSnippet {
            template: "  lua-load-per-thread /etc/haproxy/y.lua\n".into(),
        },
    );
    let config = CompiledConfig::compile(spec).expect("compiles");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert!(
        rendered
            .haproxy_cfg
            .contains("lua-load-per-thread /etc/haproxy/y.lua"),
        "{}",
        rendered.haproxy_cfg
    );
    assert_eq!(rendered.trusted_lines, *config.trusted_lines());
    check_offline(&rendered).expect("the schema phase accepts literal lines");
    let (validator, checker) = counted_validator();
    validator.validate(rendered).expect("valid");
    assert_eq!(semantic_runs(&checker), 1);
}

#[test]
fn a_lua_load_line_built_by_an_expression_is_refused_in_the_schema_phase_and_never_checked_by_haproxy()
 {
    // The map template writes the same line literally: maps are not haproxy.cfg, so that
    // does not make it trusted.
    let mut spec = spec_with(&format!("global\n  lua-load {{{{lua}}}}\n{AFTER_GLOBAL}"));
    spec.extra_context = Some(json!({"lua": "/etc/haproxy/x.lua"}));
    spec.maps.insert(
        "m".into(),
        GeneratedFile {
            template: "lua-load /etc/haproxy/x.lua\n".into(),
            post_processing: vec![],
        },
    );
    let config = CompiledConfig::compile(spec).expect("compiles");
    let rendered = config
        .render(
            config.new_stores().expect("stores").snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert!(
        rendered
            .haproxy_cfg
            .contains("  lua-load /etc/haproxy/x.lua\n")
    );
    let (validator, checker) = counted_validator();
    let Err(PipelineError::Invalid(err)) = validator.validate(rendered) else {
        panic!("refused");
    };
    assert_eq!(err.phase, ValidationPhase::Schema);
    assert_eq!(err.problems.len(), 1, "{err}");
    assert_eq!(err.problems[0].line, Some(2));
    assert_eq!(
        err.problems[0].to_string(),
        "haproxy.cfg:2: lua-load runs code when HAProxy loads the configuration; haptor accepts it only on a line the HAProxyTemplateConfig's templates write literally (not from a watched object's values) (schema check)"
    );
    assert_eq!(semantic_runs(&checker), 0, "haproxy -c never ran");
}

#[test]
fn an_object_value_holding_a_newline_cannot_inject_a_code_running_line() {
    // The template writes a lua-load line literally, and the object's value copies the
    // directive with another file: only the literal one is trusted.
    let template = format!(
        "global\n  lua-load /etc/haproxy/x.lua\n{AFTER_GLOBAL}{{{{#each (resources \"services\")}}}}    balance {{{{spec.lb}}}}\n{{{{/each}}}}"
    );
    let config = compiled(&template);
    let stores = config.new_stores().expect("stores");
    stores
        .get("services")
        .expect("store")
        .apply(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"lb": "roundrobin\n  lua-load /tmp/x.lua\n  setenv LD_PRELOAD /tmp/x.so"}
        }))
        .expect("applies");
    let rendered = config
        .render(
            stores.snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let injected = rendered
        .haproxy_cfg
        .lines()
        .position(|line| line == "  lua-load /tmp/x.lua")
        .expect("the value's newline made a line of its own")
        + 1;
    let (validator, checker) = counted_validator();
    let Err(PipelineError::Invalid(err)) = validator.validate(rendered) else {
        panic!("refused");
    };
    assert_eq!(err.phase, ValidationPhase::Schema);
    // (The keyword tables also say neither belongs in a backend.)
    let refused: Vec<&ConfigProblem> = err
        .problems
        .iter()
        .filter(|p| p.message.contains("haptor accepts it only on a line"))
        .collect();
    let lines: Vec<Option<usize>> = refused.iter().map(|p| p.line).collect();
    assert_eq!(lines, [Some(injected), Some(injected + 1)], "{err}");
    assert!(
        refused[0].message.starts_with("lua-load runs code"),
        "{err}"
    );
    assert!(
        refused[1]
            .message
            .starts_with("setenv changes the environment"),
        "{err}"
    );
    assert_eq!(semantic_runs(&checker), 0, "haproxy -c never ran");
}

#[test]
fn a_success_cached_under_a_trusting_config_does_not_vouch_for_the_same_bytes_under_another() {
    let trusting = compiled(&format!(
        "global\n  lua-load /etc/haproxy/x.lua\n{AFTER_GLOBAL}"
    ));
    let from_a_value = with_extra(
        &format!("global\n  lua-load {{{{lua}}}}\n{AFTER_GLOBAL}"),
        json!({"lua": "/etc/haproxy/x.lua"}),
    );
    let render = |config: &CompiledConfig| {
        config
            .render(
                config.new_stores().expect("stores").snapshot(),
                None,
                crate::pure::haproxy::HaproxyVersion::DEFAULT,
            )
            .expect("renders")
    };
    let trusted = render(&trusting);
    let untrusted = render(&from_a_value);
    assert_eq!(trusted.checksum(), untrusted.checksum(), "the same bytes");
    let (validator, checker) = counted_validator();
    let accepted = validator.validate(trusted).expect("valid");
    assert!(!accepted.from_cache);
    let err = validator
        .validate(untrusted.clone())
        .expect_err("the cached success does not vouch for it");
    assert!(matches!(&err, PipelineError::Invalid(e) if e.phase == ValidationPhase::Schema));
    // Nor does a baseline validated under the trusting config (identical bytes need no
    // reload, which would otherwise skip every phase).
    let err = validator
        .validate_after(Some(&accepted.rendered), untrusted)
        .expect_err("the baseline does not vouch for it");
    assert!(matches!(&err, PipelineError::Invalid(e) if e.phase == ValidationPhase::Schema));
    assert_eq!(semantic_runs(&checker), 1);
    assert_eq!(validator.cache().hits(), 0);
}

/// A checker that judges for a given HAProxy version (as `VersionedChecker` does).
#[derive(Debug)]
struct CheckerFor(crate::pure::haproxy::HaproxyVersion, SimulatedHaproxy);

impl crate::pure::validate::semantic::SemanticCheck for CheckerFor {
    fn identity(&self) -> Result<String, crate::pure::validate::semantic::SemanticCheckError> {
        Ok(format!("simulated {}", self.0))
    }

    fn haproxy_version(&self) -> Option<crate::pure::haproxy::HaproxyVersion> {
        Some(self.0)
    }

    fn check_blocking(
        &self,
        rendered: &RenderedConfig,
    ) -> Result<
        crate::pure::validate::semantic::CheckReport,
        crate::pure::validate::semantic::SemanticCheckError,
    > {
        self.1.check_blocking(rendered)
    }
}

#[test]
fn the_schema_phase_judges_for_the_checkers_haproxy_version() {
    use crate::pure::haproxy::HaproxyVersion;
    let template = format!("crt-store web\n  load crt site.pem\n{VALID_CFG}");
    let config = compiled(&template);
    let rendered = config
        .render(
            with_service(&config, "web", 8080).snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    // A checker that names no version judges for 2.6, which has no crt-store section.
    match validator().validate(rendered.clone()) {
        Err(PipelineError::Invalid(invalid)) => {
            assert_eq!(invalid.phase, ValidationPhase::Schema);
            assert_eq!(invalid.problems[0].line, Some(1));
            assert!(
                invalid.problems[0]
                    .message
                    .contains("needs HAProxy 3.0 or later; the target runs 2.6"),
                "{invalid:?}"
            );
        }
        other => panic!("a crt-store section is refused for 2.6: {other:?}"),
    }
    let for_3_0 = Validator::new(
        Arc::new(CheckerFor(
            HaproxyVersion::V3_0,
            SimulatedHaproxy::default(),
        )),
        8,
    );
    assert_eq!(for_3_0.haproxy_version(), HaproxyVersion::V3_0);
    for_3_0
        .validate(rendered)
        .expect("a crt-store section is accepted for 3.0");
}

#[test]
fn an_endpoint_change_under_the_ingress_library_replaces_server_lines_instead_of_rendering() {
    use crate::pure::fixtures;
    let library = crate::pure::config::config_from_yaml(
        "deploy/library/ingress.yaml",
        include_str!("../../../deploy/library/ingress.yaml"),
    )
    .expect("the library parses");
    let spliced = CompiledConfig::compile(library.spec.clone()).expect("compiles");
    let fresh = || CompiledConfig::compile(library.spec.clone()).expect("compiles");
    let stores = spliced.new_stores().expect("stores");
    fixtures::load_apps(&stores, 20, "haptor", 2).expect("applies");
    let render = |config: &CompiledConfig| {
        config
            .render(stores.snapshot(), None, HaproxyVersion::DEFAULT)
            .expect("renders")
    };
    render(&spliced);
    for (n, endpoints) in [(3, 3), (7, 1), (3, 0), (12, 4)] {
        stores
            .get("endpointslices")
            .expect("store")
            .apply(fixtures::endpoint_slice(n, endpoints))
            .expect("applies");
        let after = render(&spliced);
        assert_eq!(
            spliced.templates.spliced_in_last_render(),
            [crate::pure::template::HAPROXY_CFG],
            "only EndpointSlices changed: haproxy.cfg's server lines are replaced"
        );
        // The assignment of a fresh set may differ from the remembered one only where
        // endpoints left; compare with a set that saw the same history instead.
        let full = fresh();
        let _ = full.render(stores.snapshot(), None, HaproxyVersion::DEFAULT);
        assert_eq!(
            after.haproxy_cfg.lines().count(),
            render(&full).haproxy_cfg.lines().count()
        );
        assert!(
            after.haproxy_cfg.contains(&format!(
                "backend svc_ns-{}_app-{n}_80\n  option forwardfor\n{}",
                n % 10,
                if endpoints == 0 {
                    "backend"
                } else {
                    "  server SRV_1 "
                }
            )),
            "{}",
            after.haproxy_cfg
        );
    }
}

#[test]
fn renders_that_reuse_fragments_equal_full_renders_of_the_ingress_library_through_a_sequence_of_changes()
 {
    use crate::pure::fixtures;
    use crate::pure::template::{TemplateSet, TemplateSetInput};
    let library = crate::pure::config::config_from_yaml(
        "deploy/library/ingress.yaml",
        include_str!("../../../deploy/library/ingress.yaml"),
    )
    .expect("the library parses");
    let memoised = CompiledConfig::compile(library.spec.clone()).expect("compiles");
    let mut full = CompiledConfig::compile(library.spec.clone()).expect("compiles");
    let empty = TemplateSet::compile(TemplateSetInput::default()).expect("compiles");
    full.templates = std::mem::replace(&mut full.templates, empty).without_memos();
    let stores = memoised.new_stores().expect("stores");
    fixtures::load_apps(&stores, 30, "haptor", 2).expect("applies");
    let apply = |store: &str, object: serde_json::Value| {
        stores
            .get(store)
            .expect("store")
            .apply(object)
            .expect("applies");
    };
    let render_both = |step: &str| {
        let a = memoised
            .render(stores.snapshot(), None, HaproxyVersion::DEFAULT)
            .expect("renders");
        let b = full
            .render(stores.snapshot(), None, HaproxyVersion::DEFAULT)
            .expect("renders");
        assert_eq!(a.haproxy_cfg, b.haproxy_cfg, "{step}: haproxy.cfg");
        assert_eq!(a.aux_files, b.aux_files, "{step}: maps and files");
        assert_eq!(a.outcomes, b.outcomes, "{step}: outcomes");
        assert_eq!(a.status_records, b.status_records, "{step}: status");
        memoised.templates.fragments_reused_in_last_render()
    };
    assert_eq!(render_both("first render"), 0, "nothing to reuse yet");

    let mut timed = fixtures::ingress(4, "haptor");
    timed["metadata"]["annotations"] = json!({"haproxy.org/timeout-server": "42s"});
    apply("ingresses", timed);
    // Four loops over the 30 Ingresses (one of them in the crt-list snippet, rendered into a
    // capture) and one over the Services keep fragments: all but the changed Ingress's are
    // reused, and every Service's.
    assert_eq!(
        render_both("an Ingress with a backend of its own"),
        4 * 29 + 30,
        "every other iteration is written from its fragment"
    );

    let mut moved = fixtures::ingress(9, "haptor");
    moved["spec"]["rules"][0]["host"] = json!("moved.example");
    moved["spec"]["tls"] = json!([{"hosts": ["moved.example"], "secretName": "missing"}]);
    apply("ingresses", moved);
    render_both("an Ingress moved to another host, with TLS");

    // A new Service (a pool member at runtime), its endpoints and its Ingress.
    for (store, object) in [
        ("services", fixtures::service(30)),
        ("endpointslices", fixtures::endpoint_slice(30, 3)),
        ("ingresses", fixtures::ingress(30, "haptor")),
    ] {
        apply(store, object);
    }
    render_both("a new app");
    apply("endpointslices", fixtures::endpoint_slice(7, 5));
    render_both("an endpoint change");
    assert_eq!(
        memoised.templates.spliced_in_last_render(),
        [crate::pure::template::HAPROXY_CFG],
        "the server lines written from fragments are where the memo says"
    );
    let mut other_class = fixtures::ingress(11, "other");
    other_class["metadata"]["annotations"] = json!({"haproxy.org/request-capture": "hdr(x-id)"});
    apply("ingresses", other_class);
    render_both("an Ingress handed to another class");
    apply("endpointslices", fixtures::endpoint_slice(12, 0));
    let mut canary = fixtures::ingress(13, "haptor");
    canary["metadata"]["annotations"] = json!({"haproxy.org/load-balance": "source"});
    apply("ingresses", canary);
    render_both("endpoints gone and a static algorithm at once");
    let mut service = fixtures::service(14);
    service["metadata"]["annotations"] = json!({"haproxy.org/timeout-server": "7s"});
    apply("services", service);
    render_both("a Service with backend annotations");
    stores
        .get("ingresses")
        .expect("store")
        .delete_ref(&crate::pure::store::ObjectRef::new("ns-5", "app-5"));
    render_both("an Ingress deleted");

    // The webhook's what-if render reuses the live render's fragments and equals a full one.
    let mut proposed = fixtures::ingress(20, "haptor");
    proposed["metadata"]["annotations"] = json!({"haproxy.org/timeout-server": "9s"});
    let mut snapshot = stores.snapshot();
    snapshot.insert(
        stores
            .get("ingresses")
            .expect("store")
            .snapshot_with_applied(proposed)
            .expect("applies"),
    );
    let trial = memoised
        .render_trial(snapshot.clone(), None, HaproxyVersion::DEFAULT)
        .expect("renders");
    let reference = full
        .render_trial(snapshot, None, HaproxyVersion::DEFAULT)
        .expect("renders");
    assert_eq!(trial.haproxy_cfg, reference.haproxy_cfg);
    assert_eq!(trial.aux_files, reference.aux_files);
    assert_eq!(trial.outcomes, reference.outcomes);
}

#[test]
fn an_http_resource_body_reaches_haproxy_cfg_only_through_the_code_running_guard() {
    // The body of a fetched document is as untrusted as an object's value: a code-running
    // line it brings is refused in the schema phase, before haproxy -c.
    let mut spec = spec_with(&format!(
        "global\n{{{{{{http_resource \"extra\"}}}}}}\n{AFTER_GLOBAL}"
    ));
    spec.http_resources.insert(
        "extra".into(),
        crate::pure::config::HttpResourceSettings {
            url: "http://lists.example/extra.txt".into(),
            ..Default::default()
        },
    );
    let config = CompiledConfig::compile(spec).expect("compiles");
    let stores = config.new_stores().expect("stores");
    stores
        .get(&crate::pure::http_resources::store_name("extra"))
        .expect("the resource's store")
        .apply(crate::pure::http_resources::content_object(
            "extra",
            "http://lists.example/extra.txt",
            "  lua-load /etc/haproxy/x.lua",
        ))
        .expect("stored");
    let rendered = config
        .render(
            stores.snapshot(),
            None,
            crate::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    assert!(
        rendered
            .haproxy_cfg
            .contains("  lua-load /etc/haproxy/x.lua\n")
    );
    let (validator, checker) = counted_validator();
    let Err(PipelineError::Invalid(err)) = validator.validate(rendered) else {
        panic!("refused");
    };
    assert_eq!(err.phase, ValidationPhase::Schema);
    assert!(err.to_string().contains("lua-load runs code"), "{err}");
    assert_eq!(semantic_runs(&checker), 0, "haproxy -c never ran");
}
