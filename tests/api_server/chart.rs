//! The Helm chart `deploy/chart/haptor`, through the real `helm` (`TEST_ASSET_HELM`, which
//! `./scripts/test-peers helm` builds from `tools/helm`) and the kit's real kube-apiserver:
//! it lints; its default rendering is `deploy/manifests/haptor.yaml` byte for byte; its CRDs
//! and its default config are those of `deploy/crds/` and the Ingress library; the API server
//! accepts every object it renders (defaults, every optional feature on, a namespaced
//! install) in a server-side dry run; its NetworkPolicies and Services select the pods they
//! are meant for; its pods are hardened; its webhook configuration is what the controller
//! serves. With `gateway.enabled` (the Gateway API CRDs of `scripts/test-peers
//! gateway-api-crds` installed in the kit), its config holds the Gateway API library alone or
//! beside the Ingress library, and its RBAC lets the controller's ServiceAccount watch the
//! Gateway API kinds and write their status.

use crate::dataplane_peer;
use crate::helm;
use crate::kube_kit;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use haptor::pure::config::{
    DataplaneSettings, HAProxyTemplateConfig, parse_duration, validate_spec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

use helm::{CHART, documents, run_helm, run_helm_failing, template};
use kube_kit::Kit;

/// The environment variable naming the helm binary.
const MANIFEST: &str = "deploy/manifests/haptor.yaml";
const ALL_OPTIONS: &str = "deploy/chart/haptor/ci/all-options-values.yaml";
const NAMESPACED: &str = "deploy/chart/haptor/ci/namespaced-values.yaml";
/// The command that writes `deploy/manifests/haptor.yaml`.
const REGENERATE: &str = "export $(./scripts/test-peers helm) && \"$TEST_ASSET_HELM\" template haptor deploy/chart/haptor --namespace haptor > deploy/manifests/haptor.yaml";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn kind_of(document: &Value) -> &str {
    document["kind"].as_str().unwrap_or_default()
}

fn name_of(document: &Value) -> &str {
    document["metadata"]["name"].as_str().unwrap_or_default()
}

/// The one document of `kind` named `name`.
fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = documents
        .iter()
        .filter(|d| kind_of(d) == kind && name_of(d) == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name} in the rendering");
    found[0]
}

/// Every document of `kind`.
fn all<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| kind_of(d) == kind).collect()
}

/// The default rendering, as the manifest is made.
fn default_documents() -> Vec<Value> {
    documents(&template("haptor", "haptor", &[]))
}

#[test]
fn the_chart_lints_with_the_default_the_all_options_and_the_namespaced_values() {
    for values in [None, Some(ALL_OPTIONS), Some(NAMESPACED)] {
        let mut args = vec!["lint", CHART, "--strict", "--namespace", "haptor"];
        if let Some(values) = values {
            args.extend(["--values", values]);
        }
        let out = run_helm(&args);
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm {}:\n{out}",
            args.join(" ")
        );
    }
}

#[test]
fn the_default_rendering_is_deploy_manifests_haptor_yaml_byte_for_byte() {
    let rendered = template("haptor", "haptor", &[]);
    let committed = read(MANIFEST);
    if rendered != committed {
        let line = rendered
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || {
                    format!(
                        "one is a prefix of the other ({} vs {} lines)",
                        rendered.lines().count(),
                        committed.lines().count()
                    )
                },
                |i| {
                    format!(
                        "first difference at line {}:\n  chart:    {}\n  manifest: {}",
                        i + 1,
                        rendered.lines().nth(i).unwrap_or_default(),
                        committed.lines().nth(i).unwrap_or_default()
                    )
                },
            );
        panic!(
            "{MANIFEST} is not the chart rendered with its default values; {line}\nregenerate it with:\n  {REGENERATE}"
        );
    }
}

/// `document` without the annotation `key`, whose value must be `value`.
fn without_annotation(mut document: Value, key: &str, value: &str) -> Value {
    let name = name_of(&document).to_string();
    let annotations = document["metadata"]["annotations"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("{name} has no annotations"));
    assert_eq!(
        annotations.remove(key),
        Some(json!(value)),
        "annotation {key}"
    );
    if annotations.is_empty() {
        document["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("annotations");
    }
    document
}

#[test]
fn the_charts_crds_are_deploy_crds_both_in_crds_and_in_the_template_behind_crds_install() {
    let generated = read("deploy/crds/haptor.dev_crds.yaml");
    assert!(
        read("deploy/chart/haptor/crds/haptor.dev_crds.yaml") == generated,
        "deploy/chart/haptor/crds/haptor.dev_crds.yaml is not deploy/crds/haptor.dev_crds.yaml; copy it: cp deploy/crds/haptor.dev_crds.yaml deploy/chart/haptor/crds/"
    );
    let expected = documents(&generated);
    assert_eq!(expected.len(), 2, "two CRDs");

    assert!(
        all(&default_documents(), "CustomResourceDefinition").is_empty(),
        "by default the CRDs come from crds/ only"
    );
    let rendered: Vec<Value> = all(
        &documents(&template(
            "haptor",
            "haptor",
            &["--set", "crds.install=true"],
        )),
        "CustomResourceDefinition",
    )
    .into_iter()
    .map(|crd| without_annotation(crd.clone(), "helm.sh/resource-policy", "keep"))
    .collect();
    assert_eq!(
        rendered, expected,
        "templates/crds.yaml renders crds/ (annotated helm.sh/resource-policy: keep)"
    );
}

/// The HAProxy pods' and the controller pods' template labels, containers, and the
/// rendering's Deployment of each.
struct Pods<'a> {
    controller: &'a Value,
    haproxy: &'a Value,
}

impl<'a> Pods<'a> {
    fn of(documents: &'a [Value]) -> Pods<'a> {
        Pods {
            controller: find(documents, "Deployment", "haptor"),
            haproxy: find(documents, "Deployment", "haptor-haproxy"),
        }
    }
}

fn pod_labels(deployment: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(deployment["spec"]["template"]["metadata"]["labels"].clone())
        .expect("pod template labels")
}

/// The containers (init containers too) of a Deployment's pod template.
fn containers(deployment: &Value) -> Vec<&Value> {
    let spec = &deployment["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .flat_map(|key| spec[key].as_array().into_iter().flatten())
        .collect()
}

/// The container port named `name` of a Deployment's pod template.
fn container_port(deployment: &Value, name: &str) -> Option<u64> {
    containers(deployment)
        .into_iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
}

/// Whether a Kubernetes LabelSelector (matchLabels, matchExpressions) selects `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().expect("a key");
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let value = labels.get(key).map(String::as_str);
            match e["operator"].as_str().expect("an operator") {
                "In" => value.is_some_and(|v| values.contains(&v)),
                "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => panic!("operator {other}"),
            }
        });
    assert!(
        selector.is_object(),
        "a selector is an object (an empty one selects everything): {selector}"
    );
    match_labels && expressions
}

/// A Service's `spec.selector` (a plain map) as a LabelSelector.
fn service_selector(service: &Value) -> Value {
    json!({ "matchLabels": service["spec"]["selector"] })
}

/// Checks that the NetworkPolicies and Services of `documents` select exactly the pods they
/// are meant for, with `api_server_cidrs` the webhook port's sources (empty: any).
fn check_selectors(documents: &[Value], api_server_cidrs: &[&str]) {
    let pods = Pods::of(documents);
    let controller = pod_labels(pods.controller);
    let haproxy = pod_labels(pods.haproxy);
    // Only the pods meant, never the other component's.
    let only = |what: &str, selector: &Value, meant: &BTreeMap<String, String>| {
        let other = if meant == &controller {
            &haproxy
        } else {
            &controller
        };
        assert!(selects(selector, meant), "{what} selects its pods");
        assert!(
            !selects(selector, other),
            "{what} does not select the other pods"
        );
    };

    // Services and disruption budgets.
    only(
        "the webhook Service",
        &service_selector(find(documents, "Service", "haptor-webhook")),
        &controller,
    );
    only(
        "the metrics Service",
        &service_selector(find(documents, "Service", "haptor-metrics")),
        &controller,
    );
    only(
        "the HAProxy Service",
        &service_selector(find(documents, "Service", "haptor-haproxy")),
        &haproxy,
    );
    only(
        "the controller PodDisruptionBudget",
        &find(documents, "PodDisruptionBudget", "haptor")["spec"]["selector"],
        &controller,
    );
    only(
        "the HAProxy PodDisruptionBudget",
        &find(documents, "PodDisruptionBudget", "haptor-haproxy")["spec"]["selector"],
        &haproxy,
    );
    for (deployment, labels) in [(pods.controller, &controller), (pods.haproxy, &haproxy)] {
        only(
            &format!("Deployment {}'s selector", name_of(deployment)),
            &deployment["spec"]["selector"],
            labels,
        );
    }
    // The config's podSelector is the HAProxy pods.
    let config = find(documents, "HAProxyTemplateConfig", "haptor-config");
    only(
        "the config's podSelector",
        &config["spec"]["podSelector"],
        &haproxy,
    );
    // The Gateway listeners' ports (gateway.enabled), named gw-PORT.
    let gateway_ports: Vec<String> = find(documents, "Service", "haptor-haproxy")["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .filter(|name| name.starts_with("gw-"))
        .map(str::to_string)
        .collect();
    let mut service_ports = vec![
        ("haptor-webhook", "webhook", pods.controller),
        ("haptor-metrics", "metrics", pods.controller),
        ("haptor-haproxy", "http", pods.haproxy),
        ("haptor-haproxy", "https", pods.haproxy),
    ];
    service_ports.extend(
        gateway_ports
            .iter()
            .map(|port| ("haptor-haproxy", port.as_str(), pods.haproxy)),
    );
    for (service, port, deployment) in service_ports {
        let ports = &find(documents, "Service", service)["spec"]["ports"];
        let target = ports
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == port)
            .unwrap_or_else(|| panic!("Service {service} has port {port}"));
        let target = target["targetPort"].as_str().expect("a named targetPort");
        assert!(
            container_port(deployment, target).is_some(),
            "Service {service}'s targetPort {target} is a port of {}",
            name_of(deployment)
        );
    }

    // The controller's policy: its pods; the webhook port from the API server's CIDRs (any
    // source when none are given), health and metrics from anywhere.
    let policy = find(documents, "NetworkPolicy", "haptor");
    only(
        "the controller NetworkPolicy",
        &policy["spec"]["podSelector"],
        &controller,
    );
    let rules = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let ports_of = |rule: &Value| -> Vec<String> {
        rule["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["port"].as_str().expect("a named port").to_string())
            .collect()
    };
    let webhook_rules: Vec<&Value> = rules
        .iter()
        .filter(|r| ports_of(r).contains(&"webhook".to_string()))
        .collect();
    assert_eq!(webhook_rules.len(), 1, "one rule admits the webhook port");
    let webhook_rule = webhook_rules[0];
    assert_eq!(
        ports_of(webhook_rule),
        ["webhook"],
        "the webhook rule admits that port only"
    );
    if api_server_cidrs.is_empty() {
        assert!(
            webhook_rule.get("from").is_none(),
            "without apiServerCIDRs the webhook port is open to any source: {webhook_rule}"
        );
    } else {
        let sources: Vec<Value> = api_server_cidrs
            .iter()
            .map(|cidr| json!({ "ipBlock": { "cidr": cidr } }))
            .collect();
        assert_eq!(
            webhook_rule["from"],
            json!(sources),
            "the webhook port admits the API server's CIDRs only"
        );
    }
    for rule in rules {
        for port in ports_of(rule) {
            assert!(
                container_port(pods.controller, &port).is_some(),
                "the controller NetworkPolicy's port {port} is a port of the controller"
            );
        }
    }

    // The HAProxy pods' policy: traffic and status from anywhere, the Data Plane API port
    // only from the controller pods (a podSelector without namespaceSelector: this
    // namespace).
    let policy = find(documents, "NetworkPolicy", "haptor-haproxy");
    only(
        "the HAProxy NetworkPolicy",
        &policy["spec"]["podSelector"],
        &haproxy,
    );
    let rules = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let dataplane_rules: Vec<&Value> = rules
        .iter()
        .filter(|r| ports_of(r).contains(&"dataplane".to_string()))
        .collect();
    assert_eq!(
        dataplane_rules.len(),
        1,
        "one rule admits the Data Plane API port"
    );
    let dataplane_rule = dataplane_rules[0];
    assert_eq!(ports_of(dataplane_rule), ["dataplane"]);
    let from = dataplane_rule["from"]
        .as_array()
        .expect("the Data Plane API port has sources");
    assert_eq!(from.len(), 1, "{dataplane_rule}");
    assert!(
        from[0].get("namespaceSelector").is_none() && from[0].get("ipBlock").is_none(),
        "{dataplane_rule}"
    );
    only(
        "the Data Plane API port's source",
        &from[0]["podSelector"],
        &controller,
    );
    let open: Vec<String> = rules
        .iter()
        .filter(|r| r.get("from").is_none())
        .flat_map(ports_of)
        .collect();
    let mut traffic = vec![
        "http".to_string(),
        "https".to_string(),
        "status".to_string(),
    ];
    traffic.extend(gateway_ports.iter().cloned());
    assert_eq!(
        open, traffic,
        "traffic (the Gateway listeners' too) and status are open"
    );
    for port in ["http", "https", "status", "dataplane"]
        .into_iter()
        .chain(gateway_ports.iter().map(String::as_str))
    {
        assert!(
            container_port(pods.haproxy, port).is_some(),
            "the HAProxy NetworkPolicy's port {port} is a port of the HAProxy pods"
        );
    }
    let dataplane_port = container_port(pods.haproxy, "dataplane");
    assert_eq!(
        dataplane_port,
        config["spec"]["dataplane"]["port"].as_u64(),
        "the Data Plane API listens where the config's dataplane.port says"
    );
}

#[test]
fn the_network_policies_and_services_select_exactly_the_pods_they_are_meant_for() {
    check_selectors(&default_documents(), &[]);
    check_selectors(
        &documents(&template("haptor", "haptor", &["--values", ALL_OPTIONS])),
        &["10.0.0.1/32", "192.0.2.0/24"],
    );
}

#[test]
fn the_deployments_are_hardened_and_the_controller_outlasts_the_deployment_timeout() {
    for documents in [
        default_documents(),
        documents(&template("haptor", "haptor", &["--values", ALL_OPTIONS])),
    ] {
        let pods = Pods::of(&documents);
        for deployment in [pods.controller, pods.haproxy] {
            let name = name_of(deployment);
            let pod = &deployment["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"], true,
                "{name}: pod runAsNonRoot"
            );
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{name}: pod seccomp"
            );
            for container in containers(deployment) {
                let what = format!("{name}/{}", container["name"]);
                let sc = &container["securityContext"];
                assert_eq!(sc["runAsNonRoot"], true, "{what}: runAsNonRoot");
                assert!(
                    sc["runAsUser"].as_u64().is_some_and(|uid| uid > 0),
                    "{what}: a non-root runAsUser"
                );
                assert_eq!(
                    sc["readOnlyRootFilesystem"], true,
                    "{what}: readOnlyRootFilesystem"
                );
                assert_eq!(
                    sc["allowPrivilegeEscalation"], false,
                    "{what}: allowPrivilegeEscalation"
                );
                assert_eq!(
                    sc["capabilities"]["drop"],
                    json!(["ALL"]),
                    "{what}: drop ALL"
                );
                assert!(
                    sc["capabilities"].get("add").is_none(),
                    "{what}: adds no capability"
                );
                assert_eq!(
                    sc["seccompProfile"]["type"], "RuntimeDefault",
                    "{what}: seccomp"
                );
                assert!(
                    sc.get("privileged").is_none_or(|p| p == false),
                    "{what}: not privileged"
                );
            }
        }
        // The controller: /tmp writable for `haproxy -c`, the probes on the health port.
        let controller = &containers(pods.controller)[0];
        assert!(
            controller["volumeMounts"]
                .as_array()
                .expect("mounts")
                .iter()
                .any(|m| m["mountPath"] == "/tmp"),
            "the controller has a writable /tmp"
        );
        assert_eq!(controller["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(controller["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container_port(pods.controller, "health"), Some(8081));
        assert_eq!(container_port(pods.controller, "metrics"), Some(9090));

        let config = find(&documents, "HAProxyTemplateConfig", "haptor-config");
        let timeout = config["spec"]["dataplane"]["deploymentTimeout"]
            .as_str()
            .map_or_else(
                || DataplaneSettings::default().deployment_timeout,
                str::to_string,
            );
        let timeout = parse_duration(&timeout).expect("a deploymentTimeout");
        let grace = pods.controller["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds");
        assert!(
            Duration::from_secs(grace) > timeout,
            "terminationGracePeriodSeconds {grace} exceeds the config's deploymentTimeout {timeout:?}"
        );
        // HAProxy: readiness on the library's monitor-uri at the status port; a draining
        // preStop within the grace period.
        let haproxy = containers(pods.haproxy)
            .into_iter()
            .find(|c| c["name"] == "haproxy")
            .expect("the haproxy container");
        assert_eq!(haproxy["readinessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(haproxy["readinessProbe"]["httpGet"]["port"], "status");
        assert!(haproxy["lifecycle"]["preStop"]["exec"]["command"].is_array());
    }
}

#[test]
fn the_default_config_is_the_ingress_library_but_for_what_the_chart_sets() {
    let library = read("deploy/library/ingress.yaml");
    assert!(
        read("deploy/chart/haptor/files/ingress-library.yaml") == library,
        "deploy/chart/haptor/files/ingress-library.yaml is not deploy/library/ingress.yaml; copy it: cp deploy/library/ingress.yaml deploy/chart/haptor/files/ingress-library.yaml"
    );
    let documents = default_documents();
    let rendered = find(&documents, "HAProxyTemplateConfig", "haptor-config").clone();
    let pods = Pods::of(&documents);

    // What the chart sets.
    assert_eq!(rendered["metadata"]["namespace"], "haptor");
    let spec = &rendered["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        json!(
            pod_labels(pods.haproxy)
                .into_iter()
                .filter(|(k, _)| [
                    "app.kubernetes.io/name",
                    "app.kubernetes.io/instance",
                    "app.kubernetes.io/component"
                ]
                .contains(&k.as_str()))
                .collect::<BTreeMap<_, _>>()
        )
    );
    let secret = spec["credentialsSecretRef"]["name"]
        .as_str()
        .expect("credentialsSecretRef");
    // No password is given: the chart renders no credentials (so none is public), the
    // controller creates that Secret, and its RBAC lets it create Secrets.
    assert!(
        all(&documents, "Secret").is_empty(),
        "the default rendering holds no Secret"
    );
    let args = controller_args(&[]);
    let create = args
        .iter()
        .position(|a| a == "--create-credentials-secret")
        .and_then(|i| args.get(i + 1));
    assert_eq!(create.map(String::as_str), Some(secret), "{args:?}");
    assert!(
        find(&documents, "Role", "haptor")["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["resources"] == json!(["secrets"])
                && r["verbs"] == json!(["create"])
                && r.get("resourceNames").is_none()),
        "the Role lets the controller create the credentials Secret"
    );
    // A password given: the chart's Secret holds it, and the controller creates none.
    let given = helm::documents(&template(
        "haptor",
        "haptor",
        &["--set", "haproxy.credentials.password=s3cret"],
    ));
    let credentials = find(&given, "Secret", secret);
    for key in ["dataplane_username", "dataplane_password"] {
        assert!(credentials["stringData"][key].is_string(), "Secret {key}");
    }
    assert_eq!(credentials["stringData"]["dataplane_password"], "s3cret");
    assert!(
        !controller_args(&["--set", "haproxy.credentials.password=s3cret"])
            .contains(&"--create-credentials-secret".to_string())
    );
    let context = &spec["extraContext"];
    for (key, port) in [
        ("http_bind", "http"),
        ("https_bind", "https"),
        ("status_bind", "status"),
    ] {
        let port = container_port(pods.haproxy, port).expect("a port");
        assert_eq!(
            context[key],
            format!("\"${{POD_IP}}:{port}\""),
            "extraContext.{key}"
        );
    }
    assert_eq!(context["runtime_socket"], "/etc/haproxy/runtime.sock");
    assert_eq!(context["access_log"], true, "access logs are on by default");
    let quiet = helm::documents(&template("haptor", "haptor", &["--set", "accessLog=false"]));
    assert_eq!(
        find(&quiet, "HAProxyTemplateConfig", "haptor-config")["spec"]["extraContext"]["access_log"],
        false,
        "accessLog=false turns the access logs off"
    );
    assert!(
        context["default_certificate"]
            .as_str()
            .is_some_and(|c| c.ends_with("/haptor-default-tls")),
        "extraContext.default_certificate names the Secret the controller creates: {}",
        context["default_certificate"]
    );
    assert_eq!(
        context["ingress_class"],
        name_of(all(&documents, "IngressClass")[0])
    );
    assert_eq!(
        all(&documents, "IngressClass")[0]["spec"]["controller"],
        "haptor.dev/ingress-controller",
        "the controller name the library matches"
    );

    // Everything else is the library's.
    let mut expected: Value = serde_yaml_ng::from_str(&library).expect("the library is YAML");
    let mut actual = rendered.clone();
    for object in [&mut expected, &mut actual] {
        object
            .as_object_mut()
            .expect("an object")
            .remove("metadata");
        let spec = object["spec"].as_object_mut().expect("a spec");
        for key in ["podSelector", "credentialsSecretRef", "dataplane"] {
            spec.remove(key);
        }
        let context = spec["extraContext"].as_object_mut().expect("extraContext");
        for key in [
            "http_bind",
            "https_bind",
            "status_bind",
            "runtime_socket",
            "ingress_class",
            "default_certificate",
            "ssl_passthrough",
        ] {
            context.remove(key);
        }
    }
    assert!(
        actual == expected,
        "the chart's config differs from deploy/library/ingress.yaml beyond what templates/config.yaml sets"
    );
    assert_eq!(
        rendered["spec"]["dataplane"],
        json!({ "port": DataplaneSettings::default().port }),
        "the chart sets dataplane.port only (the CRD's defaults otherwise)"
    );

    let config: HAProxyTemplateConfig =
        serde_json::from_value(rendered).expect("an HAProxyTemplateConfig");
    let problems = validate_spec(&config.spec);
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn the_controller_serves_the_webhook_the_webhook_configuration_calls() {
    for (values, url) in [
        (None, None),
        (
            Some(ALL_OPTIONS),
            Some("https://haptor-webhook.example:9443"),
        ),
    ] {
        let extra: Vec<&str> = values.map_or_else(Vec::new, |v| vec!["--values", v]);
        let documents = documents(&template("haptor", "haptor", &extra));
        let pods = Pods::of(&documents);
        let args: Vec<&str> = containers(pods.controller)[0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let flag = |name: &str| {
            args.iter()
                .position(|a| *a == name)
                .and_then(|i| args.get(i + 1))
                .copied()
                .unwrap_or_else(|| panic!("the controller has {name}: {args:?}"))
        };
        assert_eq!(args[0], "run");
        assert_eq!(flag("--config-name"), "haptor-config");
        assert_eq!(flag("--webhook-addr"), "0.0.0.0:9443");
        // By default the controller issues its certificate for the webhook Service and
        // patches the configuration; with cert-manager it reads the mounted Secret.
        let self_issued = url.is_none();
        if self_issued {
            assert_eq!(
                flag("--webhook-self-issued-secret"),
                "haptor-webhook-certificate"
            );
            assert_eq!(flag("--webhook-service"), "haptor-webhook");
            assert_eq!(
                flag("--webhook-configuration"),
                name_of(all(&documents, "ValidatingWebhookConfiguration")[0])
            );
            assert!(!args.contains(&"--webhook-cert-file"));
        } else {
            assert_eq!(flag("--webhook-cert-file"), "/etc/haptor/webhook/tls.crt");
            assert_eq!(flag("--webhook-key-file"), "/etc/haptor/webhook/tls.key");
            assert!(!args.contains(&"--webhook-self-issued-secret"));
        }
        assert_eq!(flag("--publish-service"), "haptor/haptor-haproxy");
        assert_eq!(container_port(pods.controller, "webhook"), Some(9443));

        let config = all(&documents, "ValidatingWebhookConfiguration");
        assert_eq!(config.len(), 1);
        let hooks = config[0]["webhooks"].as_array().expect("webhooks");
        let names: Vec<&str> = hooks.iter().filter_map(|h| h["name"].as_str()).collect();
        assert_eq!(
            names,
            ["haproxytemplateconfigs.haptor.dev", "resources.haptor.dev"]
        );
        for hook in hooks {
            let timeout = hook["timeoutSeconds"].as_u64().expect("timeoutSeconds");
            assert_eq!(
                flag("--webhook-timeout"),
                format!("{}s", timeout - 2),
                "the controller answers 2 s before the API server gives up"
            );
            // The self-issued configuration starts with Ignore and no caBundle (nothing is
            // refused before the controller answers); the controller then sets its
            // --webhook-failure-policy. Otherwise the two are the same from the start.
            let starting = hook["failurePolicy"].as_str().expect("failurePolicy");
            if self_issued {
                assert_eq!(starting, "Ignore");
                assert_eq!(flag("--webhook-failure-policy"), "Fail");
                assert!(hook["clientConfig"].get("caBundle").is_none());
            } else {
                assert_eq!(flag("--webhook-failure-policy"), starting);
            }
            assert_eq!(hook["sideEffects"], "None");
            assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
            let path = if hook["name"] == "resources.haptor.dev" {
                "/validate/resources"
            } else {
                "/validate/haproxytemplateconfigs"
            };
            match url {
                None => {
                    assert_eq!(
                        hook["clientConfig"]["service"],
                        json!({ "name": "haptor-webhook", "namespace": "haptor", "path": path, "port": 443 })
                    );
                    assert!(hook["clientConfig"].get("url").is_none());
                }
                Some(url) => {
                    assert_eq!(hook["clientConfig"]["url"], format!("{url}{path}"));
                    assert!(hook["clientConfig"].get("service").is_none());
                }
            }
        }
        // The config webhook sees haptor's own namespace (its config is there); the
        // resources webhook leaves it out.
        assert!(hooks[0].get("namespaceSelector").is_none());
        let own = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            "haptor".to_string(),
        )]);
        let other = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            "apps".to_string(),
        )]);
        let selector = &hooks[1]["namespaceSelector"];
        assert!(!selects(selector, &own) && selects(selector, &other));
        assert_eq!(
            hooks[0]["rules"],
            json!([{ "apiGroups": ["haptor.dev"], "apiVersions": ["v1alpha1"],
                     "resources": ["haproxytemplateconfigs"], "operations": ["CREATE", "UPDATE"],
                     "scope": "Namespaced" }])
        );
        assert_eq!(
            hooks[1]["rules"][0],
            json!({ "apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"],
                    "resources": ["ingresses"], "operations": ["CREATE", "UPDATE", "DELETE"] })
        );

        // The certificate Secret the controller mounts: cert-manager's, or the user's; none
        // when it issues its own, which it may get and update by name only, as it may get
        // and patch its webhook configuration.
        let volumes = &pods.controller["spec"]["template"]["spec"]["volumes"];
        let mounted = volumes
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "webhook-cert");
        let certificates = all(&documents, "Certificate");
        if self_issued {
            assert!(mounted.is_none(), "{volumes}");
            assert!(certificates.is_empty());
            let role = find(&documents, "Role", "haptor")["rules"].clone();
            assert!(
                role.as_array().expect("rules").contains(&json!({
                    "apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["haptor-webhook-certificate"], "verbs": ["get", "update"]
                })),
                "{role}"
            );
            let cluster_role = find(&documents, "ClusterRole", "haptor")["rules"].clone();
            assert!(
                cluster_role.as_array().expect("rules").contains(&json!({
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": ["validatingwebhookconfigurations"],
                    "resourceNames": [name_of(config[0])], "verbs": ["get", "patch"]
                })),
                "{cluster_role}"
            );
            continue;
        }
        let secret = mounted.expect("the webhook-cert volume")["secret"]["secretName"].clone();
        assert_eq!(secret, "haptor-webhook-tls");
        if url.is_some() {
            assert_eq!(certificates.len(), 1);
            assert_eq!(certificates[0]["spec"]["secretName"], secret);
            assert_eq!(
                config[0]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                format!("haptor/{}", name_of(certificates[0]))
            );
            let issuer = &certificates[0]["spec"]["issuerRef"];
            assert_eq!(
                name_of(find(
                    &documents,
                    "Issuer",
                    issuer["name"].as_str().expect("an issuer")
                )),
                issuer["name"]
            );
            assert!(
                certificates[0]["spec"]["dnsNames"]
                    .as_array()
                    .expect("dnsNames")
                    .contains(&json!("haptor-webhook.haptor.svc"))
            );
        } else {
            assert!(certificates.is_empty());
        }
    }
}

/// The controller container's arguments in a rendering with `extra` helm arguments.
fn controller_args(extra: &[&str]) -> Vec<String> {
    let documents = documents(&template("haptor", "haptor", extra));
    containers(Pods::of(&documents).controller)[0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

/// The versions `haptor run` reads from `args`, through its own command-line parser.
fn run_versions(args: &[String]) -> haptor::cli::VersionArgs {
    use clap::Parser;
    let cli = haptor::cli::Cli::try_parse_from(
        std::iter::once("haptor").chain(args.iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("haptor does not accept the controller's arguments {args:?}: {e}"));
    match cli.command {
        haptor::cli::Command::Run(run) => run.versions,
        other => panic!("the controller runs {other:?}, not `haptor run`"),
    }
}

#[test]
fn a_haproxy_version_reaches_the_controller_with_its_checker_and_one_it_cannot_check_is_refused() {
    use haptor::pure::haproxy::versions::HaproxyVersion;
    let v = |text: &str| text.parse::<HaproxyVersion>().expect("a version");

    // The default: HAProxy 3.2 pods, checked by the controller image's own haproxy 3.2.
    let default = run_versions(&controller_args(&[]));
    assert_eq!(default.haproxy_version, Some(v("3.2")));
    assert!(default.haproxy_checkers.is_empty());

    // 2.6 by values: a controller image built for 2.6 checks 2.6 pods with its own haproxy.
    let on_2_6 = run_versions(&controller_args(&[
        "--set-string",
        "image.haproxyVersion=2.6",
        "--set-string",
        "haproxy.version=2.6",
    ]));
    assert_eq!(on_2_6.haproxy_version, Some(v("2.6")));
    assert!(on_2_6.haproxy_checkers.is_empty());

    let args = controller_args(&[
        "--set-string",
        "haproxy.version=3.0",
        "--set-string",
        r"controller.haproxyCheckers.3\.0=/usr/local/bin/haproxy-3.0",
        "--set-string",
        r"controller.haproxyCheckers.2\.6=/usr/sbin/haproxy",
    ]);
    let versions = run_versions(&args);
    assert_eq!(versions.haproxy_version, Some(v("3.0")));
    assert_eq!(
        versions.haproxy_checkers,
        [
            (v("2.6"), PathBuf::from("/usr/sbin/haproxy")),
            (v("3.0"), PathBuf::from("/usr/local/bin/haproxy-3.0")),
        ]
    );

    for (set, expected) in [
        (
            vec!["--set-string", "haproxy.version=3.0"],
            r#"haproxy.version 3.0: the controller image's haproxy checks 3.2 configurations only (image.haproxyVersion)"#,
        ),
        (
            vec!["--set-string", "image.haproxyVersion=2.6"],
            r#"haproxy.version 3.2: the controller image's haproxy checks 2.6 configurations only (image.haproxyVersion)"#,
        ),
        (
            vec!["--set", "image.haproxyVersion=3"],
            r#"image.haproxyVersion must be a quoted X.Y such as "3.2", not 3"#,
        ),
        (
            vec![
                "--set-string",
                "haproxy.version=3.0",
                "--set-string",
                r"controller.haproxyCheckers.2\.6=/usr/sbin/haproxy",
            ],
            r#"controller.haproxyCheckers has no checker for 3.0, the HAProxy version (haproxy.version): add "3.0": PATH"#,
        ),
        (
            vec!["--set", "haproxy.version=3"],
            "haproxy.version must be a quoted X.Y such as \"3.0\", not the number 3",
        ),
        (
            vec!["--set-string", "haproxy.version=3.0.1"],
            r#"haproxy.version must be X.Y such as "3.0", not "3.0.1""#,
        ),
        (
            vec![
                "--set-string",
                "controller.haproxyCheckers.latest=/usr/sbin/haproxy",
            ],
            r#"controller.haproxyCheckers: "latest" is not a version X.Y"#,
        ),
    ] {
        let mut args = vec!["template", "haptor", CHART, "--namespace", "haptor"];
        args.extend(set.iter().copied());
        let failure = run_helm_failing(&args);
        assert!(
            failure.contains(expected),
            "helm {}: expected the error {expected:?}, got:\n{failure}",
            args.join(" ")
        );
    }
}

#[test]
fn two_renderings_of_the_same_values_are_identical() {
    // No randomness (genCA), no lookup, no hooks: GitOps tools render what helm installs.
    for extra in [vec![], vec!["--values", ALL_OPTIONS]] {
        let first = template("haptor", "haptor", &extra);
        assert_eq!(first, template("haptor", "haptor", &extra));
        for forbidden in ["helm.sh/hook", "BEGIN RSA PRIVATE KEY", "BEGIN PRIVATE KEY"] {
            assert!(
                !first.contains(forbidden),
                "the rendering holds {forbidden}"
            );
        }
    }
    let templates = std::fs::read_dir(repo("deploy/chart/haptor/templates")).expect("templates");
    for entry in templates {
        let path = entry.expect("an entry").path();
        let text = std::fs::read_to_string(&path).expect("a template");
        for forbidden in [
            "lookup ",
            "genCA",
            "genSelfSignedCert",
            "randAlphaNum",
            "uuidv4",
        ] {
            assert!(
                !text.contains(forbidden),
                "{} uses {forbidden}",
                path.display()
            );
        }
    }
}

/// Minimal CRDs (any fields) of the optional objects' kinds: the Prometheus Operator's
/// ServiceMonitor and PrometheusRule, cert-manager's Certificate and Issuer.
fn foreign_crds() -> Vec<CustomResourceDefinition> {
    [
        ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
        ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
        ("cert-manager.io", "Certificate", "certificates"),
        ("cert-manager.io", "Issuer", "issuers"),
    ]
    .into_iter()
    .map(|(group, kind, plural)| {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{plural}.{group}") },
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                           "listKind": format!("{kind}List") },
                "versions": [{ "name": "v1", "served": true, "storage": true,
                    "schema": { "openAPIV3Schema": { "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true } } }],
            },
        }))
        .expect("a CRD")
    })
    .collect()
}

/// Creates the CRDs unless they exist (the kit is shared) and waits until they are served.
async fn install_foreign_crds(client: &kube::Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in foreign_crds() {
        let name = crd.metadata.name.clone().expect("a name");
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => panic!("creating CRD {name}: {e}"),
        }
        let group = crd.spec.group.clone();
        let kind = crd.spec.names.kind.clone();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let gvk = GroupVersionKind::gvk(&group, "v1", &kind);
            if pinned_kind(client, &gvk).await.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "CRD {name} is not served");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Server-side dry-run applies every document of `rendering` (namespaced ones already in
/// their namespace); the refusals, by object.
async fn dry_run(client: &kube::Client, rendering: &[Value]) -> Vec<String> {
    server_side_apply(client, rendering, true).await
}

/// Server-side applies every document of `rendering` (namespaced ones already in their
/// namespace), for real or as a dry run; the refusals, by object.
async fn server_side_apply(
    client: &kube::Client,
    rendering: &[Value],
    dry_run: bool,
) -> Vec<String> {
    let mut refused = Vec::new();
    for document in rendering {
        let api_version = document["apiVersion"].as_str().expect("an apiVersion");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind_of(document));
        let what = format!("{api_version} {} {}", kind_of(document), name_of(document));
        let (resource, capabilities) = match pinned_kind(client, &gvk).await {
            Ok(found) => found,
            Err(e) => {
                refused.push(format!("{what}: not served: {e}"));
                continue;
            }
        };
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let ns = document["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what} names no namespace"));
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            Scope::Cluster => {
                assert!(
                    document["metadata"].get("namespace").is_none(),
                    "{what}: a cluster-scoped object names a namespace"
                );
                Api::all_with(client.clone(), &resource)
            }
        };
        let mut params = PatchParams::apply("haptor-chart-test").force();
        params.dry_run = dry_run;
        if let Err(e) = api
            .patch(name_of(document), &params, &Patch::Apply(document))
            .await
        {
            refused.push(format!("{what}: {e}"));
        }
    }
    refused
}

#[tokio::test]
async fn the_api_server_accepts_every_object_the_chart_renders_in_a_server_side_dry_run() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    install_foreign_crds(&client).await;
    // The all-options values run the Gateway API library: its GatewayClass needs the CRDs.
    kit.install_gateway_api_crds().await;
    for (prefix, values) in [
        ("chart-defaults", None),
        ("chart-all", Some(ALL_OPTIONS)),
        ("chart-namespaced", Some(NAMESPACED)),
    ] {
        let ns = kit.temp_ns(prefix).await;
        let watched = kit.temp_ns(&format!("{prefix}-apps")).await;
        // Cluster-scoped objects get names of this namespace (the API server is shared);
        // the watched namespace exists.
        let watch = format!("watchNamespace={watched}");
        let class = format!("ingressClass.name={ns}");
        let gateway_class = format!("gateway.className={ns}");
        let mut extra = vec!["--set", &class, "--set", &gateway_class];
        if let Some(values) = values {
            extra.extend(["--values", values]);
        }
        if values == Some(NAMESPACED) {
            extra.extend(["--set", &watch]);
        }
        let rendering = documents(&template(&format!("haptor-{ns}"), &ns, &extra));
        assert!(
            rendering.len() > 15,
            "{prefix}: {} objects",
            rendering.len()
        );
        let kinds: Vec<&str> = rendering.iter().map(kind_of).collect();
        for kind in [
            "Deployment",
            "HAProxyTemplateConfig",
            "ValidatingWebhookConfiguration",
        ] {
            assert!(kinds.contains(&kind), "{prefix} renders a {kind}");
        }
        if values == Some(ALL_OPTIONS) {
            for kind in [
                "CustomResourceDefinition",
                "ServiceMonitor",
                "PrometheusRule",
                "Certificate",
                "Issuer",
                "ConfigMap",
                "GatewayClass",
            ] {
                assert!(kinds.contains(&kind), "{prefix} renders a {kind}");
            }
        }
        let refused = dry_run(&client, &rendering).await;
        assert!(
            refused.is_empty(),
            "{prefix}: the API server refused:\n{}",
            refused.join("\n")
        );
    }
}

/// The dotted paths of `value`'s leaves, stopping at any path `documented` accepts.
fn undocumented(value: &Value, path: &str, documented: &dyn Fn(&str) -> bool) -> Vec<String> {
    if !path.is_empty() && documented(path) {
        return Vec::new();
    }
    match value.as_object() {
        Some(map) if !map.is_empty() => map
            .iter()
            .flat_map(|(key, value)| {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                undocumented(value, &path, documented)
            })
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// The dotted path of every key line of a YAML text of nested maps (by indentation), with
/// the line before it.
fn key_lines(text: &str) -> BTreeMap<String, String> {
    let key = regex::Regex::new(r"^( *)([A-Za-z_][A-Za-z0-9_]*):").expect("a regex");
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut previous = "";
    let mut keys = BTreeMap::new();
    for line in text.lines() {
        if let Some(captures) = key.captures(line) {
            let indent = captures[1].len();
            while stack.last().is_some_and(|(i, _)| *i >= indent) {
                stack.pop();
            }
            stack.push((indent, captures[2].to_string()));
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            keys.entry(path.join("."))
                .or_insert_with(|| previous.to_string());
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    keys
}

#[test]
fn every_value_is_commented_and_documented_in_the_chart_readme() {
    let text = read("deploy/chart/haptor/values.yaml");
    let values: Value = serde_yaml_ng::from_str(&text).expect("values.yaml is YAML");
    let readme = read("deploy/chart/haptor/README.md");
    let row = |path: &str| readme.contains(&format!("| `{path}` |"));
    let missing = undocumented(&values, "", &row);
    assert!(
        missing.is_empty(),
        "values without a row in deploy/chart/haptor/README.md's table: {missing:?}"
    );
    // Every value with a row has a comment right above it in values.yaml.
    let keys = key_lines(&text);
    let uncommented: Vec<&String> = keys
        .iter()
        .filter(|(path, before)| row(path) && !before.trim_start().starts_with('#'))
        .map(|(path, _)| path)
        .collect();
    assert!(
        uncommented.is_empty(),
        "values.yaml has no comment above {uncommented:?}"
    );
    assert!(keys.keys().filter(|p| row(p)).count() > 60, "{keys:?}");
}

#[test]
fn the_haproxy_pods_configmap_carries_the_chart_files_the_tests_pods_run_unchanged() {
    let documents = default_documents();
    let data = find(&documents, "ConfigMap", "haptor-haproxy")["data"]
        .as_object()
        .expect("the ConfigMap's data");
    // Every file of files/ but the libraries (the config's), byte for byte.
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(repo(dataplane_peer::CHART_FILES)).expect("files/") {
        let name = entry
            .expect("a file")
            .file_name()
            .into_string()
            .expect("a UTF-8 name");
        if !["ingress-library.yaml", "gateway-library.yaml"].contains(&name.as_str()) {
            let text = dataplane_peer::chart_file(&name);
            files.insert(name, text);
        }
    }
    for name in [
        "reload.sh",
        "start-haproxy.sh",
        "dataplaneapi.yaml",
        "init.sh",
    ] {
        assert!(
            files.contains_key(name),
            "{}/{name} is gone",
            dataplane_peer::CHART_FILES
        );
    }
    for (name, text) in &files {
        assert!(
            data.get(name).and_then(Value::as_str) == Some(text.as_str()),
            "the HAProxy pods' ConfigMap does not carry {}/{name} unchanged:\n{:?}",
            dataplane_peer::CHART_FILES,
            data.get(name)
        );
    }
    // Beside them, only what the template writes itself.
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = files.keys().map(String::as_str).collect();
    expected.extend(["haproxy.cfg", "prestop.sh"]);
    expected.sort_unstable();
    assert_eq!(keys, expected);

    // The pods run them with what the init container's environment fills in.
    let pods = Pods::of(&documents);
    let spec = &pods.haproxy["spec"]["template"]["spec"];
    let init = &spec["initContainers"][0];
    assert_eq!(
        init["command"],
        json!(["sh", "/etc/haptor-haproxy/init.sh"])
    );
    let env: BTreeMap<String, String> = init["env"]
        .as_array()
        .expect("the init container's env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect();
    let port = env.get("DATAPLANE_PORT").expect("DATAPLANE_PORT");
    let haproxy_bin = env.get("HAPROXY_BIN").expect("HAPROXY_BIN");
    assert_eq!(
        Some(port.parse::<u64>().expect("a port")),
        container_port(pods.haproxy, "dataplane")
    );
    let haproxy = containers(pods.haproxy)
        .into_iter()
        .find(|c| c["name"] == "haproxy")
        .expect("the haproxy container");
    assert_eq!(
        haproxy["command"],
        json!(["sh", "/etc/haptor-haproxy/start-haproxy.sh", haproxy_bin])
    );

    // init.sh, run with its two directories moved under a temporary one, makes the files
    // the tests' pods are given (`write_api_files`, `api_config`).
    let tmp = tempfile::tempdir().expect("a temp dir");
    let (startup, etc, tests) = (
        tmp.path().join("startup"),
        tmp.path().join("etc"),
        tmp.path().join("tests"),
    );
    for dir in [&startup, &etc, &tests] {
        std::fs::create_dir_all(dir).expect("a dir");
    }
    for (name, text) in data {
        std::fs::write(startup.join(name), text.as_str().expect("text")).expect("a file");
    }
    let script = data["init.sh"]
        .as_str()
        .expect("init.sh")
        .replace("/etc/haptor-haproxy", &startup.display().to_string())
        .replace("/etc/haproxy", &etc.display().to_string());
    let pod = "haptor-haproxy-5d8f7c9b4-x2x7q";
    let output = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("POD_NAME", pod)
        .env("DATAPLANE_PORT", port)
        .env("HAPROXY_BIN", haproxy_bin)
        .env("DATAPLANE_USERNAME", "admin")
        .env("DATAPLANE_PASSWORD", "pw")
        .output()
        .expect("sh runs init.sh");
    assert!(
        output.status.success(),
        "init.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listener = dataplane_peer::ApiListener {
        name: pod.to_string(),
        host: "0.0.0.0".to_string(),
        port: port.parse().expect("a port"),
    };
    dataplane_peer::write_api_files(
        &tests,
        "/etc/haproxy",
        &listener,
        "pw",
        dataplane_peer::MapsDir::Relative,
    );
    let read_in = |dir: &Path, name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{}/{name}: {e}", dir.display()))
    };
    assert_eq!(
        read_in(&etc, "dataplaneapi.yaml"),
        dataplane_peer::api_config(
            "/etc/haproxy",
            &listener,
            haproxy_bin,
            dataplane_peer::MapsDir::Relative
        )
    );
    for name in ["reload.sh", "userlist.cfg"] {
        assert_eq!(read_in(&etc, name), read_in(&tests, name), "{name}");
    }
    let dirs = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("a dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(dirs(&etc), dirs(&tests), "the storage directories");
}

/// The config the chart creates passes the validationTests it carries, with the default
/// values and with other ports: the webhook judges the config by them when `helm upgrade`
/// patches it (at install the webhook is not registered yet), so a test that held only for
/// the library's own extraContext refused every upgrade (`tests/node/upgrade.rs` met it).
#[test]
fn the_config_the_chart_creates_passes_its_own_validation_tests_whatever_the_ports() {
    for extra in [
        &[][..],
        &[
            "--set",
            "haproxy.ports.http=9080",
            "--set",
            "haproxy.ports.https=9443",
            "--set",
            "haproxy.ports.status=9404",
            "--set",
            "ingressClass.name=edge",
        ][..],
    ] {
        let documents = documents(&template("haptor", "haptor", extra));
        let config = find(&documents, "HAProxyTemplateConfig", "haptor-config");
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, serde_yaml_ng::to_string(config).expect("YAML")).expect("written");
        let output = crate::support::haptor(&["validate", "-f", &path.to_string_lossy()]);
        assert!(
            output.status.success(),
            "the chart's config (values {extra:?}) fails its validation tests:\n{}",
            crate::support::text(&output)
        );
    }
}

/// The Gateway API library, of which the chart carries a copy.
const GATEWAY_LIBRARY: &str = "deploy/library/gateway.yaml";
/// The chart's copy of it.
const CHART_GATEWAY_LIBRARY: &str = "deploy/chart/haptor/files/gateway-library.yaml";
/// Values that run both libraries (the Gateway listeners on ports apart from the Ingress
/// library's 80 and 443 on the HAProxy Service).
const BOTH_LIBRARIES: [&str; 4] = [
    "--set",
    "gateway.enabled=true",
    "--set",
    "gateway.ports={8080,8443}",
];

#[test]
fn the_charts_gateway_library_is_deploy_library_gateway_yaml() {
    let library = std::fs::read_to_string(repo(GATEWAY_LIBRARY)).unwrap_or_else(|e| {
        panic!("{GATEWAY_LIBRARY}: {e} (the Gateway API library {CHART_GATEWAY_LIBRARY} copies)")
    });
    assert!(
        read(CHART_GATEWAY_LIBRARY) == library,
        "{CHART_GATEWAY_LIBRARY} is not {GATEWAY_LIBRARY}; copy it: cp {GATEWAY_LIBRARY} {CHART_GATEWAY_LIBRARY}"
    );
}

/// The spec of a library file (its HAProxyTemplateConfig).
fn library_spec(path: &str) -> Value {
    let library: Value =
        serde_yaml_ng::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    library["spec"].clone()
}

/// The names of a map of the spec (watchedResources, templateSnippets, ...).
fn names(spec: &Value, key: &str) -> Vec<String> {
    spec[key]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, _)| name.clone())
        .collect()
}

/// The HAProxy Service's port named `name` and the HAProxy container port it targets.
fn service_and_container_port(documents: &[Value], name: &str) -> (u64, u64) {
    let service = find(documents, "Service", "haptor-haproxy")["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("the HAProxy Service has no port {name}"))
        .clone();
    let target = service["targetPort"].as_str().expect("a named targetPort");
    let pods = Pods::of(documents);
    let container = container_port(pods.haproxy, target)
        .unwrap_or_else(|| panic!("the HAProxy pods have no port {target}"));
    (service["port"].as_u64().expect("a port"), container)
}

#[test]
fn the_config_holds_the_ingress_library_the_gateway_api_library_or_both_as_ingress_and_gateway_enabled_say()
 {
    let ingress = library_spec("deploy/chart/haptor/files/ingress-library.yaml");
    let gateway = library_spec(CHART_GATEWAY_LIBRARY);
    let config_of = |documents: &[Value]| -> Value {
        find(documents, "HAProxyTemplateConfig", "haptor-config")["spec"].clone()
    };

    // The Gateway API library alone.
    let alone = documents(&template(
        "haptor",
        "haptor",
        &[
            "--set",
            "gateway.enabled=true",
            "--set",
            "ingress.enabled=false",
        ],
    ));
    let spec = config_of(&alone);
    assert_eq!(spec["haproxyConfig"], gateway["haproxyConfig"]);
    assert_eq!(spec["watchedResources"], gateway["watchedResources"]);
    assert_eq!(spec["templateSnippets"], gateway["templateSnippets"]);
    let context = &spec["extraContext"];
    assert_eq!(context["gateway_bind_address"], "\"${POD_IP}\"");
    assert_eq!(context["gateway_port_offset"], 10000);
    assert_eq!(
        context["gateway_controller_name"],
        "haptor.dev/gateway-controller"
    );
    assert_eq!(context["runtime_socket"], "/etc/haproxy/runtime.sock");
    for key in ["http_bind", "https_bind", "ingress_class"] {
        assert!(
            context.get(key).is_none(),
            "no Ingress library, no extraContext.{key}: {context}"
        );
    }
    assert!(all(&alone, "IngressClass").is_empty(), "no IngressClass");
    let class = find(&alone, "GatewayClass", "haptor");
    assert_eq!(
        class["spec"]["controllerName"], context["gateway_controller_name"],
        "the GatewayClass is the library's"
    );
    for port in [80, 443] {
        assert_eq!(
            service_and_container_port(&alone, &format!("gw-{port}")),
            (port, port + 10000),
            "a listener on port {port}"
        );
    }
    let service_ports = &find(&alone, "Service", "haptor-haproxy")["spec"]["ports"];
    assert_eq!(
        service_ports.as_array().map(Vec::len),
        Some(2),
        "the Gateway listeners' ports only: {service_ports}"
    );
    // Other values reach the config and the pods; no GatewayClass without createClass.
    let other = documents(&template(
        "haptor",
        "haptor",
        &[
            "--set",
            "gateway.enabled=true",
            "--set",
            "ingress.enabled=false",
            "--set",
            "gateway.portOffset=20000",
            "--set",
            "gateway.ports={8000}",
            "--set",
            "gateway.controllerName=example.com/edge",
            "--set",
            "gateway.createClass=false",
        ],
    ));
    let context = config_of(&other)["extraContext"].clone();
    assert_eq!(context["gateway_port_offset"], 20000);
    assert_eq!(context["gateway_controller_name"], "example.com/edge");
    assert_eq!(service_and_container_port(&other, "gw-8000"), (8000, 28000));
    assert!(all(&other, "GatewayClass").is_empty(), "createClass=false");

    // Both: the Ingress library's config with the Gateway API library's added.
    let both = documents(&template("haptor", "haptor", &BOTH_LIBRARIES));
    let spec = config_of(&both);
    assert_eq!(spec["haproxyConfig"], ingress["haproxyConfig"]);
    assert_eq!(spec["validationTests"], ingress["validationTests"]);
    for key in [
        "watchedResources",
        "templateSnippets",
        "maps",
        "files",
        "extraContext",
    ] {
        for library in [&ingress, &gateway] {
            for name in names(library, key) {
                assert!(
                    spec[key].get(&name).is_some(),
                    "spec.{key}.{name} is in the config of both libraries"
                );
                if key != "extraContext" {
                    assert_eq!(spec[key][&name], library[key][&name], "spec.{key}.{name}");
                }
            }
        }
    }
    let context = &spec["extraContext"];
    assert_eq!(context["gateway_bind_address"], "\"${POD_IP}\"");
    assert!(
        context["http_bind"]
            .as_str()
            .is_some_and(|b| b.starts_with("\"${POD_IP}:")),
        "{context}"
    );
    assert_eq!(all(&both, "IngressClass").len(), 1);
    assert_eq!(all(&both, "GatewayClass").len(), 1);
    // The merged config and the Gateway library alone pass their validation tests (what the
    // admission webhook runs on a config change): the Gateway part renders nothing where no
    // Gateway of its controller exists.
    for (what, documents) in [("both libraries", &both), ("the Gateway library", &alone)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.yaml");
        let config = find(documents, "HAProxyTemplateConfig", "haptor-config");
        std::fs::write(&file, serde_json::to_string(&config).expect("JSON")).expect("write");
        let output = crate::support::haptor(&["validate", "-f", file.to_str().expect("utf-8")]);
        assert!(
            output.status.success(),
            "{what}: {}",
            crate::support::text(&output)
        );
    }
    assert_eq!(service_and_container_port(&both, "http").0, 80);
    assert_eq!(service_and_container_port(&both, "gw-8080"), (8080, 18080));
    // The Ingress library's Service ports are not the listeners' to take.
    let refused = run_helm_failing(&[
        "template",
        "haptor",
        CHART,
        "--namespace",
        "haptor",
        "--set",
        "gateway.enabled=true",
    ]);
    assert!(
        refused.contains("gateway.ports 80 is a port of the Ingress library"),
        "{refused}"
    );

    // Neither: no config.
    let neither = documents(&template(
        "haptor",
        "haptor",
        &["--set", "ingress.enabled=false"],
    ));
    assert!(all(&neither, "HAProxyTemplateConfig").is_empty());
    assert!(all(&neither, "GatewayClass").is_empty());
    // The default installs nothing of the Gateway API (a cluster without its CRDs).
    assert!(
        !read(MANIFEST).contains("gateway.networking.k8s.io"),
        "the default rendering holds nothing of gateway.networking.k8s.io"
    );
}

/// Whether `user` (a ServiceAccount: its groups too) may `verb` the `resource` (and
/// `subresource`) of `group` in `namespace` (empty: cluster-wide), by a SubjectAccessReview.
async fn may(
    admin: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let ns = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split(':').next())
        .expect("a ServiceAccount");
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"),
                       "system:authenticated"],
            "resourceAttributes": {
                "verb": verb, "group": group, "resource": resource,
                "subresource": subresource, "namespace": namespace,
            },
        }
    }))
    .expect("a SubjectAccessReview");
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn with_the_gateway_api_enabled_the_controllers_service_account_may_watch_its_kinds_and_write_their_status()
 {
    let kit = Kit::shared();
    // The chart's GatewayClass is applied for real: the Gateway API CRDs first.
    kit.install_gateway_api_crds().await;
    let admin = kit.admin().await;
    let ns = kit.temp_ns("chart-gateway").await;
    let elsewhere = kit.temp_ns("chart-gateway-apps").await;
    let release = format!("haptor-{ns}");
    let (class, gateway_class) = (
        format!("ingressClass.name={ns}"),
        format!("gateway.className={ns}"),
    );
    let mut extra = vec!["--set", &class, "--set", &gateway_class];
    extra.extend(BOTH_LIBRARIES);
    let rendering = documents(&template(&release, &ns, &extra));
    let applied: Vec<Value> = rendering
        .iter()
        .filter(|d| {
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "GatewayClass",
            ]
            .contains(&kind_of(d))
        })
        .cloned()
        .collect();
    let refused = server_side_apply(&admin, &applied, false).await;
    assert!(
        refused.is_empty(),
        "the API server refused:\n{}",
        refused.join("\n")
    );
    let classes = Api::<DynamicObject>::all_with(
        admin.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "GatewayClass"),
            "gatewayclasses",
        ),
    );
    let stored = classes.get(&ns).await.expect("the chart's GatewayClass");
    assert_eq!(
        stored.data["spec"]["controllerName"],
        "haptor.dev/gateway-controller"
    );

    let user = format!("system:serviceaccount:{ns}:{release}");
    const GROUP: &str = "gateway.networking.k8s.io";
    let mut wanted: Vec<(&str, &str, &str, &str)> = Vec::new(); // verb, group, resource, ns
    for resource in [
        "gateways",
        "httproutes",
        "grpcroutes",
        "tlsroutes",
        "tcproutes",
        "referencegrants",
    ] {
        for verb in ["get", "list", "watch"] {
            wanted.push((verb, GROUP, resource, elsewhere.as_str()));
        }
        // Watched cluster-wide (no watchNamespace).
        for verb in ["list", "watch"] {
            wanted.push((verb, GROUP, resource, ""));
        }
    }
    for resource in [
        "gateways/status",
        "httproutes/status",
        "grpcroutes/status",
        "tlsroutes/status",
        "tcproutes/status",
    ] {
        for verb in ["get", "patch", "update"] {
            wanted.push((verb, GROUP, resource, elsewhere.as_str()));
        }
    }
    for verb in ["get", "list", "watch"] {
        wanted.push((verb, GROUP, "gatewayclasses", ""));
    }
    for verb in ["get", "patch", "update"] {
        wanted.push((verb, GROUP, "gatewayclasses/status", ""));
    }
    for verb in ["list", "watch"] {
        wanted.push((verb, "", "namespaces", ""));
    }
    // Every watched resource of the config (both libraries'), cluster-wide.
    let config = find(&rendering, "HAProxyTemplateConfig", "haptor-config");
    let watched = config["spec"]["watchedResources"]
        .as_object()
        .expect("watchedResources");
    for library in [
        library_spec("deploy/chart/haptor/files/ingress-library.yaml"),
        library_spec(CHART_GATEWAY_LIBRARY),
    ] {
        for name in names(&library, "watchedResources") {
            assert!(watched.contains_key(&name), "the config watches {name}");
        }
    }
    let watched: Vec<(String, String)> = watched
        .values()
        .map(|w| {
            let api_version = w["apiVersion"].as_str().expect("an apiVersion");
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let resource = w["resources"].as_str().expect("resources");
            (group.to_string(), resource.to_string())
        })
        .collect();
    for (group, resource) in &watched {
        for verb in ["list", "watch"] {
            wanted.push((verb, group, resource, ""));
        }
    }

    // RBAC reaches the authorizer through its informers: the first answer may lag.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (verb, group, resource, namespace) in &wanted {
        while !may(&admin, &user, verb, group, resource, namespace).await {
            assert!(
                Instant::now() < deadline,
                "the chart's ServiceAccount may not {verb} {group}/{resource} (namespace \
                 {namespace:?}) with gateway.enabled"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Nothing more than that of the Gateway API: no writes of the objects themselves.
    for (verb, resource) in [
        ("delete", "gateways"),
        ("create", "httproutes"),
        ("update", "httproutes"),
        ("patch", "gatewayclasses"),
        ("create", "referencegrants"),
        ("list", "udproutes"),
    ] {
        assert!(
            !may(&admin, &user, verb, GROUP, resource, &elsewhere).await,
            "the chart's ServiceAccount may {verb} {resource}"
        );
    }

    // Without gateway.enabled a release's ServiceAccount may do none of it.
    let plain_ns = kit.temp_ns("chart-no-gateway").await;
    let plain_release = format!("haptor-{plain_ns}");
    let plain_class = format!("ingressClass.name={plain_ns}");
    let plain: Vec<Value> = documents(&template(
        &plain_release,
        &plain_ns,
        &["--set", &plain_class],
    ))
    .into_iter()
    .filter(|d| {
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
        .contains(&kind_of(d))
    })
    .collect();
    let refused = server_side_apply(&admin, &plain, false).await;
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    let plain_user = format!("system:serviceaccount:{plain_ns}:{plain_release}");
    // Its Ingress rules are in force (the same informer lag), its Gateway API ones absent.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !may(
        &admin,
        &plain_user,
        "list",
        "networking.k8s.io",
        "ingresses",
        "",
    )
    .await
    {
        assert!(
            Instant::now() < deadline,
            "the default RBAC is not in force"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for resource in [
        "gateways",
        "httproutes",
        "gatewayclasses",
        "httproutes/status",
    ] {
        assert!(
            !may(&admin, &plain_user, "list", GROUP, resource, "").await,
            "without gateway.enabled the ServiceAccount may list {resource}"
        );
    }
}
