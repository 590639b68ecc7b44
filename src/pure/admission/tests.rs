use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::*;
use crate::pure::config::{HAProxyTemplateConfigSpec, HaproxyConfigTemplate, WatchedResource};
// The pipeline's stand-in for `haproxy -c`: rejects a server whose host is in `.invalid`,
// on its line, and counts its runs.
use crate::pure::pipeline::tests::SimulatedHaproxy;

/// Every Service is a backend; the one labelled `default: "true"` names the default backend
/// from its `backend` annotation (so an object can name a backend that does not exist).
const TEMPLATE: &str = "global\n  maxconn 100\n\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 5s\n  timeout server 5s\n\nfrontend fe\n  bind 127.0.0.1:18999\n{{#each (resources \"services\")}}{{#if metadata.labels.default}}  default_backend {{metadata.annotations.backend}}\n{{/if}}{{/each}}\n{{#each (resources \"services\")}}backend {{metadata.name}}\n  server s1 {{#if metadata.annotations.address}}{{metadata.annotations.address}}{{else}}127.0.0.1{{/if}}:80\n{{/each}}";

fn spec(webhook: bool) -> HAProxyTemplateConfigSpec {
    let mut spec = HAProxyTemplateConfigSpec {
        haproxy_config: HaproxyConfigTemplate {
            template: TEMPLATE.into(),
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
            enable_validation_webhook: webhook,
            ..Default::default()
        },
    );
    spec
}

fn service(name: &str, default_backend: Option<&str>) -> Value {
    let mut service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}});
    if let Some(backend) = default_backend {
        service["metadata"]["labels"] = json!({"default": "true"});
        service["metadata"]["annotations"] = json!({"backend": backend});
    }
    service
}

struct Fixture {
    compiled: CompiledConfig,
    stores: Stores,
    checker: Arc<SimulatedHaproxy>,
    validator: Validator,
}

impl Fixture {
    fn new(webhook: bool) -> Fixture {
        let compiled = CompiledConfig::compile(spec(webhook)).expect("compiles");
        let stores = compiled.new_stores().expect("stores");
        let services = stores.get("services").expect("store");
        services.apply(service("web", None)).expect("applies");
        services
            .apply(service("front", Some("web")))
            .expect("applies");
        let checker = Arc::new(SimulatedHaproxy::default());
        let validator = Validator::new(checker.clone(), 8);
        Fixture {
            compiled,
            stores,
            checker,
            validator,
        }
    }

    fn running(&self) -> RunningState<'_> {
        RunningState {
            compiled: &self.compiled,
            stores: &self.stores,
            synced: true,
            baseline: None,
        }
    }

    fn admit(&self, operation: Operation, object: Option<&Value>, old: Option<&Value>) -> Verdict {
        let name = object
            .or(old)
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or_default()
            .to_string();
        let change = ProposedChange {
            operation,
            api_version: "v1",
            kind: "Service",
            namespace: "default",
            name: &name,
            object,
            old_object: old,
        };
        admit_change(self.running(), &change, &self.validator).expect("decided")
    }
}

#[test]
fn an_object_that_renders_a_valid_configuration_is_allowed() {
    let fixture = Fixture::new(true);
    let verdict = fixture.admit(Operation::Create, Some(&service("api", None)), None);
    assert_eq!(verdict, Verdict::allow());
    assert_eq!(fixture.checker.runs.load(Ordering::SeqCst), 1);
}

#[test]
fn an_object_whose_render_fails_haproxy_c_is_denied_naming_the_phase_and_the_line() {
    let fixture = Fixture::new(true);
    let mut proposed = service("front", Some("web"));
    proposed["metadata"]["annotations"]["address"] = json!("missing.invalid");
    let verdict = fixture.admit(
        Operation::Update,
        Some(&proposed),
        Some(&service("front", Some("web"))),
    );
    assert!(!verdict.allowed);
    let reason = verdict.reason.expect("a reason");
    assert!(
        reason.starts_with("Service default/front is refused by haptor"),
        "{reason}"
    );
    assert!(reason.contains("semantic phase"), "{reason}");
    assert!(
        reason.contains("haproxy.cfg:15") || reason.contains("line 15"),
        "{reason}"
    );
    assert!(reason.contains("'missing.invalid'"), "{reason}");
}

#[test]
fn a_deletion_is_judged_on_the_stores_without_the_object() {
    let fixture = Fixture::new(true);
    // Deleting the backend the default_backend names breaks the configuration.
    let verdict = fixture.admit(Operation::Delete, None, Some(&service("web", None)));
    assert!(!verdict.allowed, "{verdict:?}");
    assert!(verdict.reason.unwrap_or_default().contains("without it"));
    // Deleting one nobody names does not.
    let fixture = Fixture::new(true);
    fixture
        .stores
        .get("services")
        .expect("store")
        .apply(service("spare", None))
        .expect("applies");
    let verdict = fixture.admit(Operation::Delete, None, Some(&service("spare", None)));
    assert!(verdict.allowed, "{verdict:?}");
}

#[test]
fn a_proposed_object_never_enters_the_live_store() {
    let fixture = Fixture::new(true);
    let before = fixture.stores.get("services").expect("store").snapshot();
    fixture.admit(Operation::Create, Some(&service("api", None)), None);
    let after = fixture.stores.get("services").expect("store").snapshot();
    assert_eq!(after.len(), 2);
    assert_eq!(after.generation(), before.generation());
}

#[test]
fn a_kind_watched_without_enable_validation_webhook_is_allowed_without_a_render() {
    let fixture = Fixture::new(false);
    let verdict = fixture.admit(
        Operation::Create,
        Some(&service("front", Some("missing"))),
        None,
    );
    assert_eq!(verdict, Verdict::allow());
    assert_eq!(fixture.checker.runs.load(Ordering::SeqCst), 0);
}

#[test]
fn before_the_stores_have_listed_a_change_is_undecided_and_the_failure_policy_answers() {
    let fixture = Fixture::new(true);
    let running = RunningState {
        synced: false,
        ..fixture.running()
    };
    let object = service("api", None);
    let change = ProposedChange {
        operation: Operation::Create,
        api_version: "v1",
        kind: "Service",
        namespace: "default",
        name: "api",
        object: Some(&object),
        old_object: None,
    };
    let undecided = admit_change(running, &change, &fixture.validator).expect_err("undecided");
    let failed = undecided_verdict(FailurePolicy::Fail, &undecided);
    assert!(!failed.allowed);
    assert!(
        failed
            .reason
            .unwrap_or_default()
            .contains("failure policy is Fail")
    );
    let ignored = undecided_verdict(FailurePolicy::Ignore, &undecided);
    assert!(ignored.allowed);
    assert!(ignored.warnings[0].contains("failure policy is Ignore"));
}

#[test]
fn the_admission_key_is_the_same_for_a_repeat_and_changes_with_any_store() {
    let fixture = Fixture::new(true);
    let mut object = service("api", None);
    let change = |object: &Value| -> String {
        let change = ProposedChange {
            operation: Operation::Create,
            api_version: "v1",
            kind: "Service",
            namespace: "default",
            name: "api",
            object: Some(object),
            old_object: None,
        };
        admission_key(1, &fixture.stores, &change_key_parts(&change))
    };
    let first = change(&object);
    // Server-side bookkeeping does not change the key...
    object["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
    assert_eq!(change(&object), first);
    // ...the object does...
    object["metadata"]["labels"] = json!({"a": "b"});
    let labelled = change(&object);
    assert_ne!(labelled, first);
    // ...and so does any change to the stores it is laid over.
    fixture
        .stores
        .get("services")
        .expect("store")
        .apply(service("other", None))
        .expect("applies");
    assert_ne!(change(&object), labelled);
}

#[test]
fn the_admission_cache_forgets_the_oldest_verdict_first() {
    let cache = AdmissionCache::new(2);
    cache.insert("a".into(), Verdict::allow());
    cache.insert("b".into(), Verdict::deny("no"));
    cache.insert("c".into(), Verdict::allow());
    assert_eq!(cache.len(), 2);
    assert!(cache.get("a").is_none());
    assert_eq!(cache.get("b"), Some(Verdict::deny("no")));
    assert_eq!((cache.hits(), cache.misses()), (1, 1));
}

fn config(spec: HAProxyTemplateConfigSpec) -> HAProxyTemplateConfig {
    let mut config = HAProxyTemplateConfig::new("haptor-config", spec);
    config.metadata.namespace = Some("haptor".into());
    config
}

#[test]
fn a_config_whose_template_does_not_compile_is_denied_with_the_template_and_line() {
    let fixture = Fixture::new(true);
    let mut broken = spec(true);
    broken.haproxy_config.template =
        "global\n  maxconn 10\n{{#each (resources \"services\")}}\n".into();
    let verdict = admit_config(&config(broken), Some(fixture.running()), &fixture.validator)
        .expect("decided");
    assert!(!verdict.allowed);
    let reason = verdict.reason.expect("a reason");
    assert!(
        reason.starts_with("HAProxyTemplateConfig haptor/haptor-config is invalid"),
        "{reason}"
    );
    assert!(
        reason.contains("haproxy.cfg") && reason.contains("line"),
        "{reason}"
    );
}

#[test]
fn a_config_is_rendered_against_the_objects_the_running_stores_hold() {
    let fixture = Fixture::new(true);
    // The same config renders against "web" and "front" and passes.
    let verdict = admit_config(
        &config(spec(true)),
        Some(fixture.running()),
        &fixture.validator,
    )
    .expect("decided");
    assert!(verdict.allowed, "{verdict:?}");
    // A config whose backends are named differently breaks the default_backend "web" that
    // the running stores' "front" names (the schema phase names the line).
    let mut renamed = spec(true);
    renamed.haproxy_config.template =
        TEMPLATE.replace("backend {{metadata.name}}", "backend be_{{metadata.name}}");
    let verdict = admit_config(
        &config(renamed),
        Some(fixture.running()),
        &fixture.validator,
    )
    .expect("decided");
    assert!(!verdict.allowed);
    let reason = verdict.reason.unwrap_or_default();
    assert!(
        reason.contains("schema phase") && reason.contains("'web'"),
        "{reason}"
    );
}

#[test]
fn a_config_whose_validation_tests_fail_is_denied_naming_the_test() {
    let fixture = Fixture::new(true);
    let mut tested = spec(true);
    tested.validation_tests = serde_json::from_value(json!({
        "has-web": {
            "fixtures": {"services": [service("web", None)]},
            "assertions": [{"type": "contains", "target": "haproxy.cfg", "pattern": "backend nowhere"}]
        }
    }))
    .expect("validation tests");
    let verdict = admit_config(&config(tested), Some(fixture.running()), &fixture.validator)
        .expect("decided");
    assert!(!verdict.allowed);
    let reason = verdict.reason.expect("a reason");
    assert!(
        reason.contains("validation test 'has-web' fails"),
        "{reason}"
    );
}

#[test]
fn a_config_whose_validation_test_reads_an_unmocked_http_resource_is_denied_naming_the_url() {
    let fixture = Fixture::new(true);
    let mut tested = spec(true);
    tested.http_resources = serde_json::from_value(json!({
        "hosts": {"url": "http://lists.example/hosts.txt"}
    }))
    .expect("HTTP resources");
    tested.haproxy_config.template =
        TEMPLATE.replace("global\n", "global\n  # {{http_resource \"hosts\"}}\n");
    assert_ne!(
        tested.haproxy_config.template, TEMPLATE,
        "the template reads it"
    );
    tested.validation_tests = serde_json::from_value(json!({
        "reads-hosts": {
            "assertions": [{"type": "contains", "target": "haproxy.cfg", "pattern": "global"}]
        }
    }))
    .expect("validation tests");
    let verdict = admit_config(
        &config(tested.clone()),
        Some(fixture.running()),
        &fixture.validator,
    )
    .expect("decided");
    assert!(!verdict.allowed);
    let reason = verdict.reason.expect("a reason");
    assert!(
        reason.contains("http://lists.example/hosts.txt has no fixture"),
        "{reason}"
    );
    // Mocked, the same test passes.
    tested.validation_tests = serde_json::from_value(json!({
        "reads-hosts": {
            "httpResources": {"http://lists.example/hosts.txt": "a.example"},
            "assertions": [{"type": "contains", "target": "haproxy.cfg", "pattern": "# a.example"}]
        }
    }))
    .expect("validation tests");
    let verdict = admit_config(&config(tested), Some(fixture.running()), &fixture.validator)
        .expect("decided");
    assert!(verdict.allowed, "{verdict:?}");
}

#[test]
fn a_resource_with_a_namespace_selector_is_not_judged_by_the_webhook() {
    let mut selected = spec(true);
    if let Some(services) = selected.watched_resources.get_mut("services") {
        services.namespace_selector = Some("team=web".into());
    }
    let compiled = CompiledConfig::compile(selected).expect("compiles");
    let stores = compiled.new_stores().expect("stores");
    let checker = Arc::new(SimulatedHaproxy::default());
    let validator = Validator::new(checker.clone(), 8);
    let object = service("front", Some("missing"));
    let change = ProposedChange {
        operation: Operation::Create,
        api_version: "v1",
        kind: "Service",
        namespace: "default",
        name: "front",
        object: Some(&object),
        old_object: None,
    };
    let running = RunningState {
        compiled: &compiled,
        stores: &stores,
        synced: true,
        baseline: None,
    };
    // Its namespace's labels are not in the stores: no render, allowed.
    assert_eq!(
        admit_change(running, &change, &validator).expect("decided"),
        Verdict::allow()
    );
    assert_eq!(checker.runs.load(Ordering::SeqCst), 0);
}
