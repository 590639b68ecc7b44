use super::*;

const SAMPLE: &str = r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata:
  name: haptor-config
  namespace: haptor
spec:
  credentialsSecretRef:
    name: haproxy-credentials
  podSelector:
    matchLabels:
      app: haproxy
  dataplane:
    minDeploymentInterval: 5s
  watchedResources:
    ingresses:
      apiVersion: networking.k8s.io/v1
      resources: ingresses
      indexBy: ["metadata.namespace", "metadata.name"]
    endpoints:
      apiVersion: discovery.k8s.io/v1
      resources: endpointslices
      indexBy: ['metadata.labels.kubernetes\.io/service-name']
  watchedResourcesIgnoreFields: ["metadata.managedFields"]
  templateSnippets:
    backends-010-default:
      template: "backend default\n"
  maps:
    hosts.map:
      template: "{{#each (resources \"ingresses\")}}x{{/each}}"
  haproxyConfig:
    template: "global\n  daemon\n"
  extraContext:
    debug: true
    nested: { a: [1, 2] }
  validationTests:
    basic:
      fixtures:
        ingresses:
          - apiVersion: networking.k8s.io/v1
            kind: Ingress
            metadata: { name: a, namespace: default }
      assertions:
        - type: contains
          pattern: "daemon"
        - type: match_count
          target: map:hosts.map
          pattern: "x"
          expected: "1"
"#;

fn sample() -> HAProxyTemplateConfig {
    match config_from_yaml("sample.yaml", SAMPLE) {
        Ok(config) => config,
        Err(e) => panic!("sample does not parse: {e}"),
    }
}

#[test]
fn a_config_survives_a_yaml_round_trip_unchanged() {
    let config = sample();
    let yaml = serde_yaml_ng::to_string(&config).expect("serialises");
    let again = config_from_yaml("again.yaml", &yaml).expect("re-reads");
    // What the two say, not where each was read from.
    let said = |spec: &HAProxyTemplateConfigSpec| HAProxyTemplateConfigSpec {
        source: None,
        ..spec.clone()
    };
    assert_eq!(said(&config.spec), said(&again.spec));
    assert_eq!(config.metadata.name, again.metadata.name);
    // Arbitrary JSON is kept as written.
    assert_eq!(
        again
            .spec
            .extra_context
            .as_ref()
            .and_then(|c| c.pointer("/nested/a/1")),
        Some(&serde_json::json!(2))
    );
}

#[test]
fn omitted_settings_take_haptic_defaults() {
    let config = sample();
    assert_eq!(config.spec.dataplane.min_deployment_interval, "5s");
    assert_eq!(config.spec.dataplane.drift_prevention_interval, "60s");
    assert_eq!(config.spec.dataplane.port, 5555);
    assert!(config.spec.leader_election.enabled);
    assert_eq!(
        config.spec.validation_tests["basic"].assertions[0].target,
        "haproxy.cfg"
    );
}

#[test]
fn a_valid_sample_has_no_structural_problems() {
    assert_eq!(validate_spec(&sample().spec), Vec::<SpecProblem>::new());
}

#[test]
fn structural_validation_reports_every_problem_with_its_path() {
    let mut spec = sample().spec;
    spec.watched_resources
        .get_mut("ingresses")
        .expect("present")
        .api_version
        .clear();
    spec.template_snippets
        .get_mut("backends-010-default")
        .expect("present")
        .template = "  ".into();
    spec.dataplane.deployment_timeout = "soon".into();
    let problems = validate_spec(&spec);
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.dataplane.deploymentTimeout",
            "spec.watchedResources.ingresses.apiVersion",
            "spec.templateSnippets.backends-010-default.template",
        ],
        "{problems:#?}"
    );
    assert!(problems[0].message.contains("'soon' is not a duration"));
}

#[test]
fn assertions_missing_their_fields_are_reported() {
    let mut spec = sample().spec;
    let test = spec.validation_tests.get_mut("basic").expect("present");
    test.assertions[1].expected = Some("many".into());
    test.assertions[0].pattern = Some("(unclosed".into());
    test.fixtures.insert("gateways".into(), vec![]);
    let problems = validate_spec(&spec);
    let rendered: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 3, "{rendered:#?}");
    assert!(rendered.iter().any(|p| {
        p.starts_with("spec.validationTests.basic.fixtures.gateways: names no watched resource")
    }));
    assert!(rendered.iter().any(|p| p.starts_with(
        "spec.validationTests.basic.assertions[0].pattern: is not a valid regular expression"
    )));
    assert!(
        rendered
            .iter()
            .any(|p| p.starts_with("spec.validationTests.basic.assertions[1].expected"))
    );
}

#[test]
fn an_assertion_target_needs_a_known_kind_and_a_name_but_not_a_template() {
    let mut spec = sample().spec;
    let set_target = |spec: &mut HAProxyTemplateConfigSpec, target: &str| {
        spec.validation_tests
            .get_mut("basic")
            .expect("present")
            .assertions[1]
            .target = target.into();
    };
    // Files registered during a render have no template of their own.
    set_target(&mut spec, "cert:registered.pem");
    assert!(validate_spec(&spec).is_empty());
    for bad in ["map:", "registered:x.pem"] {
        set_target(&mut spec, bad);
        let problems = validate_spec(&spec);
        assert_eq!(problems.len(), 1, "{bad}");
        assert_eq!(
            problems[0].path,
            "spec.validationTests.basic.assertions[1].target"
        );
    }
}

#[test]
fn leader_election_timings_must_nest() {
    let mut spec = sample().spec;
    spec.leader_election.renew_deadline = "20s".into();
    let problems = validate_spec(&spec);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].path, "spec.leaderElection");
}

#[test]
fn a_document_of_another_kind_is_refused_with_the_kind_named() {
    let err = config_from_yaml(
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n",
    )
    .expect_err("wrong kind");
    assert!(err.to_string().contains("found kind 'Service'"), "{err}");
}

#[test]
fn malformed_yaml_names_the_file_and_line() {
    let err = config_from_yaml("bad.yaml", "kind: HAProxyTemplateConfig\nspec: [\n")
        .expect_err("malformed");
    let text = err.to_string();
    assert!(text.starts_with("bad.yaml:"), "{text}");
    assert!(text.contains("line"), "{text}");
}

#[test]
fn the_crds_hold_both_kinds_and_keep_arbitrary_json() {
    let yaml = crds_yaml().expect("renders");
    assert!(yaml.contains("kind: HAProxyTemplateConfig"));
    assert!(yaml.contains("kind: HAProxyCfg"));
    assert!(yaml.contains("- htc") && yaml.contains("- hpcfg"), "{yaml}");
    assert!(yaml.contains("x-kubernetes-preserve-unknown-fields: true"));
}

#[test]
fn the_kind_of_a_watched_resource_is_derived_from_its_plural() {
    let watched = |resources: &str| WatchedResource {
        resources: resources.into(),
        ..Default::default()
    };
    assert_eq!(watched("ingresses").kind_name(), "Ingress");
    assert_eq!(watched("endpointslices").kind_name(), "EndpointSlice");
    assert_eq!(watched("widgets").kind_name(), "Widget");
}

#[test]
fn invalid_label_and_namespace_selectors_are_reported_with_their_field_path_and_position() {
    let mut spec = sample().spec;
    let ingresses = spec
        .watched_resources
        .get_mut("ingresses")
        .expect("present");
    ingresses.label_selector = Some("app in (web".into());
    ingresses.namespace_selector = Some("team=web,=x".into());
    let problems = validate_spec(&spec);
    let rendered: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        rendered,
        vec![
            "spec.watchedResources.ingresses.labelSelector: 'app in (web' is not a valid label selector: at character 12: expected ',' or ')' in the value list, found the end of the selector",
            "spec.watchedResources.ingresses.namespaceSelector: 'team=web,=x' is not a valid label selector: at character 10: expected a label key, found '='",
        ]
    );
}

#[test]
fn valid_and_empty_selectors_are_no_problem() {
    let mut spec = sample().spec;
    let ingresses = spec
        .watched_resources
        .get_mut("ingresses")
        .expect("present");
    ingresses.label_selector = Some("app.kubernetes.io/name=web,tier notin (cache),!legacy".into());
    ingresses.namespace_selector = Some(String::new());
    assert_eq!(validate_spec(&spec), Vec::<SpecProblem>::new());
}

#[test]
fn a_namespaces_fixture_list_may_hold_only_namespaces_when_namespaces_are_not_watched() {
    let mut spec = sample().spec;
    let test = spec.validation_tests.get_mut("basic").expect("present");
    test.fixtures.insert(
        "namespaces".into(),
        vec![
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}),
        ],
    );
    let problems = validate_spec(&spec);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(
        problems[0].path,
        "spec.validationTests.basic.fixtures.namespaces[1]"
    );
    assert!(
        problems[0].message.contains("is not a Namespace"),
        "{problems:#?}"
    );
}
