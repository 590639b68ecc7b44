//! The chart's monitoring assets against the metrics haptor exports: every expression of
//! the Grafana dashboard (`deploy/chart/haptor/dashboards/haptor.json`: panel targets, also
//! in collapsed rows, annotations, template variables) and of the PrometheusRule
//! (`templates/prometheusrule.yaml`) names only metric families that `haptor run` registers
//! ([`haptor::run::metric_families`], the registration code production runs), every alert
//! says what it means and what to do, and the dashboard uses enough families that an empty
//! one fails.
//!
//! The alert rules are read straight from the template, whose `spec` is plain rule YAML
//! (its only Helm syntax is {{`...`}}, which prints the Prometheus template inside as it
//! stands); with helm (`TEST_ASSET_HELM`, else what `scripts/test-peers helm` builds) the
//! chart is rendered too: the rendered rules are the ones read, nothing monitoring renders
//! unless enabled, the ServiceMonitor selects the chart's metrics Service by its labels and
//! port name, and the dashboard ConfigMap carries the JSON file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

/// The fewest distinct families the dashboard must chart.
const DASHBOARD_MIN_FAMILIES: usize = 12;
/// The families some alert must watch: no leader, failing deployments, an invalid config,
/// instances on an old checksum.
const ALERTED_FAMILIES: [&str; 4] = [
    "haptor_leader_is_leader",
    "haptor_deployment_errors_total",
    "haptor_config_invalid",
    "haptor_instances_behind",
];
/// The series a histogram family exposes.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];
/// The severities an alert may carry.
const SEVERITIES: [&str; 3] = ["critical", "warning", "info"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

const CHART: &str = "deploy/chart/haptor";
const DASHBOARD: &str = "deploy/chart/haptor/dashboards/haptor.json";
const RULES: &str = "deploy/chart/haptor/templates/prometheusrule.yaml";

/// The metric families `haptor run` registers, histograms by their base name.
fn exported() -> &'static BTreeSet<String> {
    static EXPORTED: OnceLock<BTreeSet<String>> = OnceLock::new();
    EXPORTED.get_or_init(|| {
        haptor::run::metric_families()
            .unwrap_or_else(|e| panic!("haptor run's metric families do not register: {e}"))
            .into_iter()
            .collect()
    })
}

/// Whether an exported family is a histogram: haptor names every histogram, and nothing
/// else, in seconds (`the_histogram_naming_rule_holds_for_the_families_the_registry_shows`
/// checks the rule on the registry).
fn is_histogram(family: &str) -> bool {
    family.ends_with("_seconds")
}

/// PromQL without its string literals, so label values are not read as metric names.
fn without_strings(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q != '`' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(c);
                }
            }
            None => {
                if matches!(c, '"' | '\'' | '`') {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// The `haptor_*` identifiers of an expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let code = without_strings(expr);
    let mut names = BTreeSet::new();
    let bytes = code.as_bytes();
    let identifier = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while let Some(found) = code[i..].find("haptor_") {
        let start = i + found;
        let mut end = start;
        while end < bytes.len() && identifier(bytes[end]) {
            end += 1;
        }
        if start == 0 || !identifier(bytes[start - 1]) {
            names.insert(code[start..end].to_string());
        }
        i = end;
    }
    names
}

/// The family a series name belongs to: the name itself, or for `X_bucket`, `X_sum` and
/// `X_count` the histogram `X`. A histogram's bare name has no series of its own.
fn family_of(name: &str, exported: &BTreeSet<String>) -> Result<String, String> {
    if exported.contains(name) {
        if is_histogram(name) {
            return Err(format!(
                "{name} is a histogram, which has no series of that name: use {name}_bucket, \
                 {name}_sum or {name}_count"
            ));
        }
        return Ok(name.to_string());
    }
    for suffix in HISTOGRAM_SUFFIXES {
        if let Some(base) = name.strip_suffix(suffix)
            && exported.contains(base)
            && is_histogram(base)
        {
            return Ok(base.to_string());
        }
    }
    Err(format!("haptor exports no metric family {name}"))
}

/// The families of every expression, by where the expression is; every problem (no haptor
/// metric at all, an unknown name) with its place and expression.
fn families_of(
    exprs: &[(String, String)],
    exported: &BTreeSet<String>,
) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let mut used = BTreeMap::new();
    let mut problems = Vec::new();
    for (place, expr) in exprs {
        let names = metric_names(expr);
        if names.is_empty() {
            problems.push(format!("{place}: names no haptor metric: {expr}"));
        }
        let mut families = BTreeSet::new();
        for name in names {
            match family_of(&name, exported) {
                Ok(family) => {
                    families.insert(family);
                }
                Err(problem) => problems.push(format!("{place}: {problem}: {expr}")),
            }
        }
        used.insert(place.clone(), families);
    }
    (used, problems)
}

fn union(used: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    used.values().flatten().cloned().collect()
}

// The dashboard.

fn dashboard() -> Json {
    let text = std::fs::read_to_string(repo(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} cannot be read: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

/// Every panel, rows' nested panels included (a collapsed row holds its panels).
fn panels(dashboard: &Json) -> Vec<&Json> {
    fn walk<'a>(panels: &'a Json, out: &mut Vec<&'a Json>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            if let Some(nested) = panel.get("panels") {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

fn title(panel: &Json) -> String {
    let title = panel["title"].as_str().unwrap_or("(untitled)");
    match panel["id"].as_i64() {
        Some(id) => format!("panel {id} {title:?}"),
        None => format!("panel {title:?}"),
    }
}

/// Every PromQL expression of the dashboard: panel targets, annotation queries and the
/// queries of template variables, each with where it is.
fn dashboard_exprs(dashboard: &Json) -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    for panel in panels(dashboard) {
        for (n, target) in panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let expr = target["expr"].as_str().unwrap_or_default();
            exprs.push((format!("{} target {n}", title(panel)), expr.to_string()));
        }
    }
    for annotation in dashboard["annotations"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(expr) = annotation["expr"].as_str() {
            exprs.push((
                format!("annotation {:?}", annotation["name"].as_str().unwrap_or("")),
                expr.to_string(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = match &variable["query"] {
            Json::String(query) => query.clone(),
            query => query["query"].as_str().unwrap_or_default().to_string(),
        };
        exprs.push((
            format!("variable {:?}", variable["name"].as_str().unwrap_or("")),
            query,
        ));
    }
    exprs
}

// The alert rules.

/// The PrometheusRule's `spec` as the template holds it: the lines under `spec:` up to the
/// wrapper's closing Helm action, with {{`...`}} printed as Helm prints it.
fn rules_spec_from_template() -> Yaml {
    let text = std::fs::read_to_string(repo(RULES))
        .unwrap_or_else(|e| panic!("{RULES} cannot be read: {e}"));
    let mut lines = text.lines().skip_while(|l| *l != "spec:");
    assert!(
        lines.next().is_some(),
        "{RULES} has no `spec:` line at the start of a line"
    );
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("{{")).collect();
    let body = body.join("\n");
    let body = unescape_helm_raw_strings(&body);
    assert!(
        !body.contains("{{`") && !body.contains(".Values") && !body.contains(".Release"),
        "{RULES}: the rules under spec: hold Helm templating beyond {{{{`...`}}}}"
    );
    serde_yaml_ng::from_str(&body)
        .unwrap_or_else(|e| panic!("{RULES}: the rules under spec: are not YAML: {e}"))
}

/// `{{`text`}}` → `text`, what Helm prints for a raw string action.
fn unescape_helm_raw_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{`") {
        out.push_str(&rest[..start]);
        let inner = &rest[start + 3..];
        let end = inner
            .find("`}}")
            .unwrap_or_else(|| panic!("{RULES}: a {{{{` without its `}}}}"));
        out.push_str(&inner[..end]);
        rest = &inner[end + 3..];
    }
    out.push_str(rest);
    out
}

/// Every alerting rule of a PrometheusRule spec.
fn alerts(spec: &Yaml) -> Vec<&Yaml> {
    spec["groups"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_sequence().into_iter().flatten())
        .filter(|rule| rule.get("alert").is_some())
        .collect()
}

fn alert_name(alert: &Yaml) -> String {
    alert["alert"].as_str().unwrap_or("(unnamed)").to_string()
}

fn alert_exprs(spec: &Yaml) -> Vec<(String, String)> {
    alerts(spec)
        .into_iter()
        .map(|alert| {
            (
                format!("alert {}", alert_name(alert)),
                alert["expr"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Whether a text is a Prometheus duration (`30s`, `1m`, `1h30m`, `0s`).
fn is_prometheus_duration(text: &str) -> bool {
    let mut rest = text;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
        parts += 1;
    }
    parts > 0
}

// helm.

/// The helm binary: `TEST_ASSET_HELM`, else what `scripts/test-peers helm` prints (it builds
/// helm first if needed). A helm that cannot be found fails the test naming it.
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let (path, from) = match std::env::var_os("TEST_ASSET_HELM").filter(|v| !v.is_empty()) {
            Some(path) => (PathBuf::from(path), "$TEST_ASSET_HELM".to_string()),
            None => {
                let script = repo("scripts/test-peers");
                let output = Command::new(&script)
                    .arg("helm")
                    .stdin(Stdio::null())
                    .output()
                    .unwrap_or_else(|e| {
                        panic!("missing peer helm: {} could not run: {e}", script.display())
                    });
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success(),
                    "missing peer helm: scripts/test-peers helm failed ({}):\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
                let path = stdout
                    .lines()
                    .find_map(|l| l.strip_prefix("TEST_ASSET_HELM="))
                    .unwrap_or_else(|| {
                        panic!("scripts/test-peers helm printed no TEST_ASSET_HELM= line:\n{stdout}")
                    });
                (PathBuf::from(path), "scripts/test-peers".to_string())
            }
        };
        assert!(
            path.is_file(),
            "missing peer helm: {} (from {from}) is not a file; ./scripts/test-peers helm builds it",
            path.display()
        );
        path
    })
}

/// The documents `helm template` renders of the chart with `sets`.
fn render(args: &[&str]) -> Vec<Yaml> {
    let output = Command::new(helm())
        .args(["template", "haptor", CHART, "--namespace", "ingress"])
        .args(args)
        .current_dir(repo("."))
        .stdin(Stdio::null())
        .output()
        .expect("helm runs");
    assert!(
        output.status.success(),
        "helm template {CHART} {args:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("helm prints UTF-8");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| {
            serde::Deserialize::deserialize(document).unwrap_or_else(|e| {
                panic!("helm template printed a document that is not YAML: {e}")
            })
        })
        .filter(|document: &Yaml| !document.is_null())
        .collect()
}

fn of_kind<'a>(documents: &'a [Yaml], kind: &str) -> Vec<&'a Yaml> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

const ALL_MONITORING: [&str; 6] = [
    "--set",
    "monitoring.serviceMonitor.enabled=true",
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.grafanaDashboard.enabled=true",
];

// The tests.

#[test]
fn metric_names_skip_label_values_and_histogram_series_resolve_to_their_family() {
    let expr = r#"histogram_quantile(0.99, sum by (le) (rate(haptor_x_seconds_bucket{job="haptor_fake_total", a='haptor_b'}[5m]))) / haptor_y_total + myhaptor_z"#;
    assert_eq!(
        metric_names(expr),
        BTreeSet::from(["haptor_x_seconds_bucket".into(), "haptor_y_total".into()])
    );
    let exported: BTreeSet<String> = ["haptor_x_seconds", "haptor_y_total"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(
        family_of("haptor_x_seconds_bucket", &exported).as_deref(),
        Ok("haptor_x_seconds")
    );
    assert_eq!(
        family_of("haptor_x_seconds_count", &exported).as_deref(),
        Ok("haptor_x_seconds")
    );
    assert_eq!(
        family_of("haptor_y_total", &exported).as_deref(),
        Ok("haptor_y_total")
    );
    // A counter has no _count series, a histogram no bare one, an unknown name no family.
    assert!(family_of("haptor_y_total_count", &exported).is_err());
    assert!(family_of("haptor_x_seconds", &exported).is_err());
    assert!(family_of("haptor_nope_total", &exported).is_err());
    assert!(is_prometheus_duration("1h30m") && is_prometheus_duration("30s"));
    assert!(
        !is_prometheus_duration("") && !is_prometheus_duration("5") && !is_prometheus_duration("m")
    );
}

#[test]
fn the_histogram_naming_rule_holds_for_the_families_the_registry_shows() {
    // The families without labels show in a fresh registry with their type; each is a
    // histogram exactly when its name is in seconds (what `is_histogram` relies on).
    let metrics = haptor::observability::metrics::Metrics::new().expect("the registry builds");
    let families = metrics.registry().gather();
    assert!(!families.is_empty());
    for family in &families {
        let histogram = family.get_field_type() == prometheus::proto::MetricType::HISTOGRAM;
        assert_eq!(
            histogram,
            is_histogram(family.name()),
            "{} is {:?}: haptor names histograms, and only them, in _seconds",
            family.name(),
            family.get_field_type()
        );
        assert!(
            exported().contains(family.name()),
            "{} is registered but not in haptor::run::metric_families()",
            family.name()
        );
    }
}

#[test]
fn every_dashboard_expression_names_only_metric_families_haptor_run_exports() {
    let exprs = dashboard_exprs(&dashboard());
    assert!(!exprs.is_empty(), "{DASHBOARD} has no expression");
    let (_, problems) = families_of(&exprs, exported());
    assert!(
        problems.is_empty(),
        "{DASHBOARD}: expressions naming metrics haptor does not export (exported: {:?}):\n{}",
        exported(),
        problems.join("\n")
    );
}

#[test]
fn the_dashboard_charts_at_least_twelve_distinct_families() {
    let (used, _) = families_of(&dashboard_exprs(&dashboard()), exported());
    let families = union(&used);
    assert!(
        families.len() >= DASHBOARD_MIN_FAMILIES,
        "{DASHBOARD} charts {} families, fewer than {DASHBOARD_MIN_FAMILIES}: {families:?}",
        families.len()
    );
}

#[test]
fn every_dashboard_panel_queries_the_datasource_variable_and_has_a_unique_id_and_place() {
    let dashboard = dashboard();
    let schema = dashboard["schemaVersion"].as_i64().unwrap_or_default();
    assert!(
        schema >= 36,
        "schemaVersion {schema}: the dashboard is for Grafana 9 or newer"
    );
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no `datasource` template variable of type prometheus"
    );
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let place = title(panel);
        let id = panel["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("{place} has no id"));
        assert!(ids.insert(id), "{place}: the id {id} is used twice");
        for key in ["h", "w", "x", "y"] {
            assert!(
                panel["gridPos"][key].is_u64(),
                "{place} has no gridPos.{key}"
            );
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{place} does not query the datasource variable"
        );
        let targets = panel["targets"].as_array().map_or(&[][..], Vec::as_slice);
        assert!(!targets.is_empty(), "{place} has no target");
        for target in targets {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "a target of {place} does not query the datasource variable"
            );
            assert!(
                target["expr"]
                    .as_str()
                    .is_some_and(|e| !e.trim().is_empty()),
                "a target of {place} has no expr"
            );
        }
    }
}

#[test]
fn every_alert_expression_names_only_metric_families_haptor_run_exports() {
    let spec = rules_spec_from_template();
    let exprs = alert_exprs(&spec);
    assert!(!exprs.is_empty(), "{RULES} has no alert");
    let (used, problems) = families_of(&exprs, exported());
    assert!(
        problems.is_empty(),
        "{RULES}: expressions naming metrics haptor does not export (exported: {:?}):\n{}",
        exported(),
        problems.join("\n")
    );
    let alerted = union(&used);
    let missing: Vec<&str> = ALERTED_FAMILIES
        .into_iter()
        .filter(|f| !alerted.contains(*f))
        .collect();
    assert!(missing.is_empty(), "no alert watches {missing:?}");
}

#[test]
fn every_alert_has_a_for_duration_a_severity_a_summary_a_description_and_a_runbook() {
    let spec = rules_spec_from_template();
    let alerts = alerts(&spec);
    assert!(!alerts.is_empty(), "{RULES} has no alert");
    let mut names = BTreeSet::new();
    for alert in alerts {
        let name = alert_name(alert);
        assert!(names.insert(name.clone()), "{name} is defined twice");
        let wait = alert["for"].as_str().unwrap_or_default();
        assert!(
            is_prometheus_duration(wait),
            "{name}: `for: {wait}` is not a duration (every alert says how long it must hold)"
        );
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            SEVERITIES.contains(&severity),
            "{name}: severity {severity:?} is none of {SEVERITIES:?}"
        );
        for annotation in ["summary", "description", "runbook"] {
            let text = alert["annotations"][annotation]
                .as_str()
                .unwrap_or_default();
            assert!(
                text.trim().len() > 10,
                "{name} has no {annotation} annotation worth the name: {text:?}"
            );
        }
    }
}

#[test]
fn the_rendered_prometheus_rule_holds_the_rules_of_the_template() {
    let documents = render(&[
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.prometheusRule.labels.release=monitoring",
        "--show-only",
        "templates/prometheusrule.yaml",
    ]);
    let rules = of_kind(&documents, "PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule: {documents:?}");
    let rule = rules[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "ingress");
    assert_eq!(rule["metadata"]["labels"]["release"], "monitoring");
    assert_eq!(
        rule["spec"],
        rules_spec_from_template(),
        "helm renders other rules than the template's spec reads as"
    );
}

#[test]
fn no_monitoring_object_is_rendered_unless_enabled() {
    let documents = render(&[]);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(
            of_kind(&documents, kind).is_empty(),
            "a {kind} renders by default: the chart would need the Prometheus Operator's CRDs"
        );
    }
    assert!(
        of_kind(&documents, "ConfigMap")
            .iter()
            .all(|c| c["data"].get("haptor.json").is_none()),
        "the dashboard ConfigMap renders by default"
    );
}

#[test]
fn the_service_monitor_scrapes_the_metrics_port_of_the_charts_controller_service() {
    let documents = render(&[
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.labels.release=monitoring",
    ]);
    let monitors = of_kind(&documents, "ServiceMonitor");
    assert_eq!(monitors.len(), 1, "one ServiceMonitor");
    let monitor = monitors[0];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["labels"]["release"], "monitoring");
    let endpoints = monitor["spec"]["endpoints"]
        .as_sequence()
        .expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], "metrics");
    assert_eq!(endpoints[0]["interval"], "30s");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_yaml_ng::from_str::<Yaml>("[ingress]").expect("YAML")
    );
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("the ServiceMonitor selects by matchLabels");
    assert!(!wanted.is_empty());
    let selected: Vec<&Yaml> = of_kind(&documents, "Service")
        .into_iter()
        .filter(|service| {
            wanted
                .iter()
                .all(|(k, v)| service["metadata"]["labels"].get(k) == Some(v))
        })
        .collect();
    assert_eq!(
        selected.len(),
        1,
        "the ServiceMonitor's matchLabels {wanted:?} select {} of the chart's Services",
        selected.len()
    );
    let ports = selected[0]["spec"]["ports"].as_sequence().expect("ports");
    assert!(
        ports.iter().any(|p| p["name"] == "metrics"),
        "the selected Service {:?} has no port named metrics: {ports:?}",
        selected[0]["metadata"]["name"]
    );

    let interval = render(&[
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.interval=15s",
        "--show-only",
        "templates/servicemonitor.yaml",
    ]);
    assert_eq!(interval[0]["spec"]["endpoints"][0]["interval"], "15s");
}

#[test]
fn the_dashboard_config_map_carries_the_dashboard_json_with_the_grafana_sidecar_label() {
    let documents = render(&ALL_MONITORING);
    let maps: Vec<&Yaml> = of_kind(&documents, "ConfigMap")
        .into_iter()
        .filter(|c| c["data"].get("haptor.json").is_some())
        .collect();
    assert_eq!(maps.len(), 1, "one ConfigMap holds haptor.json");
    assert_eq!(maps[0]["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(maps[0]["metadata"]["namespace"], "ingress");
    let shipped: Json =
        serde_json::from_str(maps[0]["data"]["haptor.json"].as_str().expect("text"))
            .expect("the ConfigMap's haptor.json is JSON");
    assert_eq!(
        shipped,
        dashboard(),
        "the ConfigMap's dashboard is not {DASHBOARD}"
    );

    let relabelled = render(&[
        "--set",
        "monitoring.grafanaDashboard.enabled=true",
        "--set",
        "monitoring.grafanaDashboard.labels.dashboards=haptor",
        "--show-only",
        "templates/grafana-dashboard.yaml",
    ]);
    let labels = &relabelled[0]["metadata"]["labels"];
    assert_eq!(labels["dashboards"], "haptor");
}
