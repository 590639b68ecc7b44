//! The runner of a config's embedded `validationTests`: for each test, load the fixtures
//! (the `_global` test's first, then the test's own) into fresh stores, render, and evaluate
//! every assertion. `haptor validate` prints its report; the admission webhook will run it
//! against proposed objects.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::pure::assertions::{self, AssertionEnvironment, AssertionOutcome};
use crate::pure::config::{NAMESPACE_FIXTURES, ValidationTest};
use crate::pure::http_resources::{fixture_object, store_name};
use crate::pure::pipeline::{CompiledConfig, PipelineError, Validator, check_offline_for};
use crate::pure::rendered::RenderedConfig;
use crate::pure::selector::NamespaceLabels;
use crate::pure::store::Stores;

/// The name of the test whose fixtures every test shares.
pub const GLOBAL_TEST: &str = "_global";

/// The outcome of one validation test.
#[derive(Debug, Clone, Serialize)]
pub struct TestReport {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub passed: bool,
    /// Set when the test could not reach its assertions (bad fixture, failed render).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub assertions: Vec<AssertionOutcome>,
    #[serde(serialize_with = "serialize_millis")]
    pub duration: Duration,
    #[serde(skip)]
    pub rendered: Option<RenderedConfig>,
}

/// The outcome of a whole suite.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteReport {
    pub passed: usize,
    pub failed: usize,
    pub tests: Vec<TestReport>,
}

impl SuiteReport {
    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }
}

fn serialize_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Runs the tests of a compiled config. `only` limits the run to the named tests (empty: all,
/// except `_global`). Tests are independent (each renders its own fixtures and runs its own
/// `haproxy -c`), so they run on as many threads as the machine has cores; the report lists
/// them in name order. The Ingress library's 50-odd tests decide a config admission, within
/// the webhook's timeout: on 2 cores they take half as long as one after another.
pub fn run_suite(config: &CompiledConfig, validator: &Validator, only: &[String]) -> SuiteReport {
    let tests = &config.spec.validation_tests;
    let global = tests.get(GLOBAL_TEST);
    let selected: Vec<(&String, &ValidationTest)> = tests
        .iter()
        .filter(|(name, _)| !(*name == GLOBAL_TEST && only.is_empty()))
        .filter(|(name, _)| only.is_empty() || only.iter().any(|o| o == *name))
        .collect();
    let mut reports = run_in_parallel(&selected, |(name, test)| {
        run_test(config, validator, name, test, global)
    });
    for missing in only.iter().filter(|o| !tests.contains_key(o.as_str())) {
        reports.push(TestReport {
            name: missing.clone(),
            description: None,
            passed: false,
            error: Some(format!(
                "no validation test named '{missing}' in this config"
            )),
            assertions: vec![],
            duration: Duration::ZERO,
            rendered: None,
        });
    }
    let passed = reports.iter().filter(|r| r.passed).count();
    SuiteReport {
        passed,
        failed: reports.len() - passed,
        tests: reports,
    }
}

/// `run` over every item on up to one thread per core, the results in the items' order. A
/// panic in `run` is resumed on the calling thread, as if the items had run there.
fn run_in_parallel<T: Sync, R: Send>(items: &[T], run: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(items.len());
    if workers <= 1 {
        return items.iter().map(&run).collect();
    }
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, run(item)));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, result)| result).collect()
}

/// Loads fixtures into fresh stores: the shared ones first, then the test's own (an object
/// with the same namespace/name replaces the shared one). Objects the watched resource's
/// selectors exclude are left out; namespace selectors match the labels of the Namespace
/// fixtures (the test's own win over shared ones), and every namespace has its
/// `kubernetes.io/metadata.name` label.
pub fn fixture_stores(
    config: &CompiledConfig,
    global: Option<&ValidationTest>,
    test: &ValidationTest,
) -> Result<Stores, String> {
    let stores = config.new_stores().map_err(|e| e.to_string())?;
    let sources: Vec<&ValidationTest> = global.into_iter().chain(std::iter::once(test)).collect();
    let namespaces = NamespaceLabels::from_objects(
        sources
            .iter()
            .flat_map(|source| source.fixtures.values().flatten()),
    );
    for source in sources {
        for (resource, objects) in &source.fixtures {
            let Some(store) = stores.get(resource) else {
                if resource == NAMESPACE_FIXTURES {
                    // Namespaces that only lend their labels to namespace selectors.
                    continue;
                }
                return Err(format!(
                    "fixtures name '{resource}', which is not a watched resource"
                ));
            };
            for (i, object) in objects.iter().enumerate() {
                if !config.admits(resource, object, &namespaces) {
                    continue;
                }
                store
                    .apply(object.clone())
                    .map_err(|e| format!("fixture {resource}[{i}]: {e}"))?;
            }
        }
    }
    // Each HTTP resource answers what the fixtures say of its URL (the test's own over the
    // shared ones); one they do not mock fails the test when a template reads it.
    let mut answers = global.map(|g| g.http_resources.clone()).unwrap_or_default();
    answers.extend(test.http_resources.clone());
    for resource in &config.http_resources {
        if let (Some(store), Some(object)) = (
            stores.get(&store_name(&resource.name)),
            fixture_object(resource, &answers),
        ) {
            store
                .apply(object)
                .map_err(|e| format!("httpResources fixture {}: {e}", resource.url))?;
        }
    }
    Ok(stores)
}

fn run_test(
    config: &CompiledConfig,
    validator: &Validator,
    name: &str,
    test: &ValidationTest,
    global: Option<&ValidationTest>,
) -> TestReport {
    let started = Instant::now();
    let mut report = TestReport {
        name: name.to_string(),
        description: test.description.clone(),
        passed: false,
        error: None,
        assertions: vec![],
        duration: Duration::ZERO,
        rendered: None,
    };
    let global = global.filter(|_| name != GLOBAL_TEST);
    let stores = match fixture_stores(config, global, test) {
        Ok(stores) => stores,
        Err(e) => {
            report.error = Some(e);
            report.duration = started.elapsed();
            return report;
        }
    };
    let snapshot = stores.snapshot();
    // The context the tests are written for: the test's own, else the `_global` test's, so a
    // config whose own extraContext differs (the chart binds the pod IP, names another
    // IngressClass) still passes the tests its library carries.
    let extra = test
        .extra_context
        .as_ref()
        .or(global.and_then(|g| g.extra_context.as_ref()));
    let rendered = match config.render(snapshot.clone(), extra, validator.haproxy_version()) {
        Ok(r) => r,
        Err(e) => {
            report.error = Some(format!("render failed: {e}"));
            report.duration = started.elapsed();
            return report;
        }
    };
    let mut env = RunnerEnvironment {
        config,
        validator,
        stores: &stores,
        extra,
    };
    report.assertions = test
        .assertions
        .iter()
        .map(|a| assertions::evaluate(a, &rendered, &mut env))
        .collect();
    report.passed = report.assertions.iter().all(|a| a.passed);
    report.rendered = Some(rendered);
    report.duration = started.elapsed();
    report
}

struct RunnerEnvironment<'a> {
    config: &'a CompiledConfig,
    validator: &'a Validator,
    stores: &'a Stores,
    extra: Option<&'a Value>,
}

impl AssertionEnvironment for RunnerEnvironment<'_> {
    fn haproxy_valid(&mut self, rendered: &RenderedConfig) -> Result<(), String> {
        match self.validator.validate(rendered.clone()) {
            Ok(_) => Ok(()),
            Err(PipelineError::Invalid(e)) => Err(e.to_string()),
            Err(other) => Err(other.to_string()),
        }
    }

    fn render_again(&mut self) -> Result<RenderedConfig, String> {
        self.config
            .render(
                self.stores.snapshot(),
                self.extra,
                self.validator.haproxy_version(),
            )
            .map_err(|e| e.to_string())
    }

    fn structured_view(&mut self, haproxy_cfg: &str) -> Result<Value, String> {
        let rendered = RenderedConfig {
            haproxy_cfg: haproxy_cfg.to_string(),
            aux_files: BTreeMap::new(),
            trusted_lines: self.config.trusted_lines().clone(),
            ..Default::default()
        };
        let parsed = check_offline_for(&rendered, self.validator.haproxy_version())
            .map_err(|e| e.to_string())?;
        serde_json::to_value(crate::pure::haproxy::view(&parsed)).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pure::config::config_from_yaml;

    #[test]
    fn work_run_in_parallel_comes_back_in_the_order_of_its_items() {
        let items: Vec<u64> = (0..40).collect();
        let squares = run_in_parallel(&items, |n| {
            // Uneven work, so that the threads finish out of order.
            std::thread::sleep(std::time::Duration::from_millis(n % 3));
            n * n
        });
        assert_eq!(squares, items.iter().map(|n| n * n).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "item 7")]
    fn a_panic_in_work_run_in_parallel_reaches_the_caller() {
        let items: Vec<u32> = (0..10).collect();
        run_in_parallel(&items, |n| assert_ne!(*n, 7, "item 7"));
    }

    const CONFIG: &str = r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: c}
spec:
  watchedResources:
    ingresses:
      apiVersion: networking.k8s.io/v1
      resources: ingresses
      indexBy: ["metadata.namespace", "metadata.name"]
      labelSelector: "app!=legacy"
      namespaceSelector: "team=web"
  haproxyConfig:
    template: "global\n"
"#;

    fn compiled() -> CompiledConfig {
        let config = config_from_yaml("c.yaml", CONFIG).expect("parses");
        CompiledConfig::compile(config.spec).expect("compiles")
    }

    fn ingress(namespace: &str, name: &str, app: &str) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}}})
    }

    fn namespace(name: &str, team: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}})
    }

    fn stored_names(stores: &Stores) -> Vec<String> {
        let mut names: Vec<String> = stores
            .get("ingresses")
            .expect("store")
            .snapshot()
            .objects()
            .filter_map(|o| {
                o.to_value()
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn fixtures_the_selectors_exclude_are_left_out_of_the_stores() {
        let config = compiled();
        let test = ValidationTest {
            fixtures: BTreeMap::from([
                (
                    "ingresses".to_string(),
                    vec![
                        ingress("shop", "kept", "web"),
                        ingress("shop", "legacy", "legacy"),
                        ingress("blog", "other-team", "web"),
                        ingress("bare", "no-namespace-object", "web"),
                    ],
                ),
                (
                    "namespaces".to_string(),
                    vec![namespace("shop", "web"), namespace("blog", "docs")],
                ),
            ]),
            ..Default::default()
        };
        let stores = fixture_stores(&config, None, &test).expect("loads");
        assert_eq!(stored_names(&stores), vec!["kept"]);
    }

    #[test]
    fn a_tests_own_namespace_fixture_overrides_the_shared_one() {
        let config = compiled();
        let global = ValidationTest {
            fixtures: BTreeMap::from([
                ("namespaces".to_string(), vec![namespace("shop", "docs")]),
                ("ingresses".to_string(), vec![ingress("shop", "a", "web")]),
            ]),
            ..Default::default()
        };
        let own = ValidationTest {
            fixtures: BTreeMap::from([("namespaces".to_string(), vec![namespace("shop", "web")])]),
            ..Default::default()
        };
        let stores = fixture_stores(&config, Some(&global), &own).expect("loads");
        assert_eq!(stored_names(&stores), vec!["a"]);
        let stores = fixture_stores(&config, None, &global).expect("loads");
        assert!(stored_names(&stores).is_empty());
    }
}
