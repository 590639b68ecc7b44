//! `haptor run` under exactly the RBAC of the Helm chart: the ServiceAccount, ClusterRole,
//! ClusterRoleBinding, Role and RoleBinding of `deploy/manifests/haptor.yaml` (the chart
//! rendered with its defaults, which `tests/api_server/chart.rs` keeps in step with
//! `deploy/chart/haptor`) are applied to the kit's API server (their namespace `haptor`
//! replaced by the test's, the cluster-wide objects renamed per test), a token of the
//! ServiceAccount is requested through the TokenRequest API, and the real `haptor` binary
//! runs with a kubeconfig holding only that token. The first test drives every request the controller makes on the Ingress library —
//! the watches (a namespaceSelector included, so Namespaces are watched too), the
//! credentials Secret, the pods, the Lease (taken, renewed, released on SIGTERM), the
//! HAProxyCfg and its status, the config's status, Events created and patched into a series —
//! and shows that the API server refused none: no 401/403/"forbidden" in haptor's log and no
//! failed write in its metrics. The others each remove one rule — the Role's Lease rule, the
//! ClusterRole's `ingresses/status` patch, the ClusterRole's `events` create/patch — and show
//! that the same checks then catch the refusal, and that haptor's log says what to grant.
//! The last renders the chart for a namespaced install (`watchNamespace`, by the real `helm`):
//! its ClusterRole keeps only cluster-scoped kinds, and `haptor run --watch-namespace` under
//! those Roles renders the watched namespace's Ingress, not another's, with nothing refused.

use crate::haptor_run;
use crate::helm;
use crate::kube_kit;

use std::path::{Path, PathBuf};

use haptor::pure::config::{HAProxyCfg, HAProxyTemplateConfig, ValidationStatus};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use haptor_run::{Replica, fast_election, library_config, repo, wait_for};
use kube_kit::Kit;

/// The rendered chart, whose RBAC documents the tests apply.
const MANIFEST: &str = "deploy/manifests/haptor.yaml";
/// The kinds of the RBAC documents of the manifest (everything else in it is left out).
const RBAC_KINDS: [&str; 5] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ServiceAccount",
];

/// The namespace of the manifest, replaced by the test's.
const MANIFEST_NAMESPACE: &str = "haptor";
/// The label value of `Kit::temp_ns` (`haptor.dev/test=PREFIX`) the first test's config
/// selects Ingress namespaces by.
const SELECTED_PREFIX: &str = "run-rbac";

/// A rule a test leaves out of the manifest.
#[derive(Debug, Clone, Copy)]
enum Without {
    /// Every rule of the Role of API group `.0`.
    RoleGroup(&'static str),
    /// Resource `resource` of API group `group` from the ClusterRole's rules (a rule left
    /// with no resource is dropped).
    ClusterRoleRule {
        group: &'static str,
        resource: &'static str,
    },
}

/// Leaves `resource` of `group` out of `rules`; how many rules lost it.
fn remove_resource(rules: &mut Vec<Value>, group: &str, resource: &str) -> usize {
    let mut removed = 0;
    for rule in rules.iter_mut() {
        let in_group = rule["apiGroups"]
            .as_array()
            .is_some_and(|groups| groups.iter().any(|g| g == group));
        if let (true, Some(resources)) = (in_group, rule["resources"].as_array_mut()) {
            let before = resources.len();
            resources.retain(|r| r != resource);
            removed += before - resources.len();
        }
    }
    rules.retain(|rule| rule["resources"].as_array().is_none_or(|r| !r.is_empty()));
    removed
}

/// The RBAC documents of `deploy/manifests/haptor.yaml`, made the test's: every namespace
/// `haptor` (of an object or a binding's subject) becomes `ns`, the ClusterRole and
/// ClusterRoleBinding are named `haptor-<ns>` (the kit is shared: they must not clash), and
/// the rule of `without` is left out.
fn manifest(ns: &str, without: Option<Without>) -> Vec<Value> {
    let path = repo(MANIFEST);
    let text = std::fs::read_to_string(&path).expect(MANIFEST);
    let documents: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| {
            serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|value: &Value| {
            value["kind"]
                .as_str()
                .is_some_and(|kind| RBAC_KINDS.contains(&kind))
        })
        .collect();
    let cluster_name = format!("haptor-{ns}");
    let mut removed = 0;
    let documents: Vec<Value> = documents
        .into_iter()
        .map(|mut document| {
            let kind = document["kind"].as_str().unwrap_or_default().to_string();
            if document["metadata"]["namespace"] == MANIFEST_NAMESPACE {
                document["metadata"]["namespace"] = json!(ns);
            }
            if let Some(subjects) = document["subjects"].as_array_mut() {
                for subject in subjects {
                    if subject["namespace"] == MANIFEST_NAMESPACE {
                        subject["namespace"] = json!(ns);
                    }
                }
            }
            match kind.as_str() {
                "ClusterRole" => {
                    document["metadata"]["name"] = json!(cluster_name);
                    if let (Some(Without::ClusterRoleRule { group, resource }), Some(rules)) =
                        (without, document["rules"].as_array_mut())
                    {
                        removed += remove_resource(rules, group, resource);
                    }
                }
                "ClusterRoleBinding" => {
                    document["metadata"]["name"] = json!(cluster_name);
                    document["roleRef"]["name"] = json!(cluster_name);
                }
                "Role" => {
                    if let (Some(Without::RoleGroup(group)), Some(rules)) =
                        (without, document["rules"].as_array_mut())
                    {
                        let before = rules.len();
                        rules.retain(|rule| {
                            !rule["apiGroups"]
                                .as_array()
                                .is_some_and(|groups| groups.iter().any(|g| g == group))
                        });
                        removed += before - rules.len();
                    }
                }
                _ => {}
            }
            document
        })
        .collect();
    if let Some(without) = without {
        assert!(
            removed > 0,
            "{MANIFEST} has no rule {without:?} to leave out"
        );
    }
    documents
}

/// Creates the manifest's objects as the admin (their namespace is already `ns`).
async fn apply(admin: &Client, documents: Vec<Value>) {
    let mut kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds, RBAC_KINDS,
        "{MANIFEST} holds one object of each RBAC kind (the chart's default, cluster-wide install)"
    );
    apply_where_they_belong(admin, &documents).await;
}

/// A kubeconfig at `path` for ServiceAccount `haptor` of `ns`: the kit's server and CA (from
/// the admin kubeconfig) and a token from the TokenRequest API, nothing else.
async fn service_account_kubeconfig(kit: &Kit, admin: &Client, ns: &str, path: &Path) {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request("haptor", &PostParams::default(), &request)
        .await
        .expect("a token for ServiceAccount haptor")
        .status
        .expect("the TokenRequest's status")
        .token;
    let admin_config: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(kit.admin_kubeconfig()).expect("the admin kubeconfig"),
    )
    .expect("the admin kubeconfig is YAML");
    let cluster = &admin_config["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().expect("a server");
    let ca = cluster["certificate-authority-data"]
        .as_str()
        .expect("a CA");
    let user = format!("system:serviceaccount:{ns}:haptor");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "kit", "cluster": { "server": server, "certificate-authority-data": ca } }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": "haptor", "context": { "cluster": "kit", "user": user, "namespace": ns } }],
        "current-context": "haptor",
    });
    std::fs::write(path, serde_yaml_ng::to_string(&config).expect("YAML")).expect("a kubeconfig");
}

/// The RBAC of the manifest (less the rule of `without`) in a fresh namespace, and a
/// kubeconfig of its ServiceAccount. The kubeconfig lives in the returned directory.
async fn namespace_under_rbac(
    kit: &Kit,
    admin: &Client,
    prefix: &str,
    without: Option<Without>,
) -> (String, tempfile::TempDir, PathBuf) {
    let ns = kit.temp_ns(prefix).await;
    apply(admin, manifest(&ns, without)).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let kubeconfig = dir.path().join("haptor.kubeconfig");
    service_account_kubeconfig(kit, admin, &ns, &kubeconfig).await;
    (ns, dir, kubeconfig)
}

/// The Ingress library with short Lease timings, its Ingresses watched in the namespaces
/// labelled `haptor.dev/test=run-rbac` only (so Namespaces are watched too) and a
/// credentials Secret (so that Secret is watched too).
fn config(ns: &str) -> HAProxyTemplateConfig {
    config_selecting(ns, SELECTED_PREFIX)
}

/// [`config`] with its Ingresses watched in the namespaces of `Kit::temp_ns(prefix)`.
fn config_selecting(ns: &str, prefix: &str) -> HAProxyTemplateConfig {
    let mut value = serde_json::to_value(library_config(ns, fast_election())).expect("JSON");
    value["spec"]["watchedResources"]["ingresses"]["namespaceSelector"] =
        json!(format!("haptor.dev/test={prefix}"));
    value["spec"]["credentialsSecretRef"] = json!({ "name": "haptor-dataplane" });
    serde_json::from_value(value).expect("an HAProxyTemplateConfig")
}

/// A Service `web` with an EndpointSlice, a TLS Secret and an Ingress `web` of class haptor
/// for `secure.example` with TLS; the Data Plane API credentials Secret.
async fn objects(admin: &Client, ns: &str) -> String {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "web-1", "labels": { "kubernetes.io/service-name": "web" } },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": ["10.244.0.5"], "conditions": { "ready": true } }],
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
    }))
    .expect("an EndpointSlice");
    Api::<EndpointSlice>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .expect("the EndpointSlice is created");

    let text = std::fs::read_to_string(repo("deploy/library/testdata/tls-secret.yaml"))
        .expect("the test Secret");
    let document = text
        .split("\n---")
        .find(|d| d.contains("kind: Secret"))
        .expect("a Secret document");
    let mut tls: Secret = serde_yaml_ng::from_str(document).expect("a Secret");
    tls.metadata.namespace = None;
    tls.type_ = Some("kubernetes.io/tls".into());
    let tls_name = tls.metadata.name.clone().expect("a name");
    let secrets = Api::<Secret>::namespaced(admin.clone(), ns);
    secrets
        .create(&PostParams::default(), &tls)
        .await
        .expect("the TLS Secret is created");
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": { "name": "haptor-dataplane" },
        "stringData": { "dataplane_username": "admin", "dataplane_password": "rbac-test" },
    }))
    .expect("a Secret");
    secrets
        .create(&PostParams::default(), &credentials)
        .await
        .expect("the credentials Secret is created");

    let ingress: Ingress = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "ingressClassName": "haptor",
            "tls": [{ "hosts": ["secure.example"], "secretName": tls_name }],
            "rules": [{ "host": "secure.example", "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    }))
    .expect("an Ingress");
    Api::<Ingress>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &ingress)
        .await
        .expect("the Ingress is created");
    tls_name
}

async fn lease_holder(client: &Client, ns: &str) -> Option<Option<String>> {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("haptor-leader")
        .await
        .ok()??;
    Some(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()),
    )
}

async fn config_object(client: &Client, ns: &str) -> HAProxyTemplateConfig {
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .get("haptor-config")
        .await
        .expect("the config")
}

async fn event(client: &Client, ns: &str, reason: &str, count: i32) -> Option<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some(reason) && e.series.as_ref().map_or(1, |s| s.count) >= count
        })
}

/// The lines of `log` that say the API server refused a request (401, 403, "forbidden",
/// "unauthorized").
fn refusals(log: &str) -> Vec<&str> {
    let refused = regex::Regex::new(r"(?i)\b(forbidden|unauthorized|403|401)\b").expect("a regex");
    log.lines().filter(|line| refused.is_match(line)).collect()
}

/// The samples of `metric` in a Prometheus text exposition, as (labels, value).
fn samples<'a>(metrics: &'a str, metric: &str) -> Vec<(&'a str, f64)> {
    metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once('}')?;
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn haptor_run_under_the_shipped_rbac_makes_no_request_the_api_server_refuses() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let (ns, _dir, kubeconfig) = namespace_under_rbac(kit, &admin, SELECTED_PREFIX, None).await;
    let tls_name = objects(&admin, &ns).await;
    let created = Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &config(&ns))
        .await
        .expect("the config is created");
    let mut replica = Replica::start_with_args(
        &kubeconfig,
        &ns,
        "rbac-replica",
        &["--publish-address", "192.0.2.10"],
    );
    // An Ingress of haptor's whose only path the library cannot use: ignored, with an
    // IngressIgnored Event (another controller's Ingresses get none).
    let other: Ingress = serde_json::from_value(json!({
        "metadata": { "name": "other" },
        "spec": {
            "ingressClassName": "haptor",
            "rules": [{ "host": "other.example", "http": { "paths": [{
                "path": "/with space", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    }))
    .expect("an Ingress");
    let ingresses = Api::<Ingress>::namespaced(admin.clone(), &ns);
    ingresses
        .create(&PostParams::default(), &other)
        .await
        .expect("the other Ingress is created");

    // Leases: get, create, update (renewals).
    wait_for("the Lease held by the replica", &[&replica], || async {
        lease_holder(&admin, &ns)
            .await
            .flatten()
            .filter(|h| h == "rbac-replica")
    })
    .await;
    // haproxycfgs and haproxycfgs/status: server-side apply. The backend comes from the
    // Ingress (watched with a namespaceSelector: Namespaces too), the Service and its
    // EndpointSlice; the certificate from the TLS Secret.
    let backend = format!("svc_{ns}_web_80");
    let cert_file = format!("{ns}_{tls_name}.pem");
    let published = wait_for(
        "the HAProxyCfg with the Ingress's backend and certificate",
        &[&replica],
        || async {
            Api::<HAProxyCfg>::namespaced(admin.clone(), &ns)
                .get_opt("haptor-config")
                .await
                .ok()
                .flatten()
                .filter(|c| {
                    c.spec.content.contains(&backend)
                        && c.spec
                            .auxiliary_files
                            .ssl_certificates
                            .iter()
                            .any(|f| f.name.contains(&cert_file))
                        && c.status.is_some()
                })
        },
    )
    .await;
    assert!(published.spec.content.contains("10.244.0.5:8080"));
    // haproxytemplateconfigs/status: server-side apply.
    wait_for("the config's status Valid", &[&replica], || async {
        config_object(&admin, &ns).await.status.filter(|s| {
            s.validation_status == ValidationStatus::Valid
                && s.observed_generation == created.metadata.generation
        })
    })
    .await;
    // events: create.
    let gained = wait_for("a LeadershipGained Event", &[&replica], || async {
        event(&admin, &ns, "LeadershipGained", 1).await
    })
    .await;
    assert_eq!(
        gained.reporting_instance.as_deref(),
        Some("rbac-replica"),
        "{gained:?}"
    );
    // ingresses/status: patch (the served Ingress gets the publish address).
    wait_for(
        "the served Ingress's status address",
        &[&replica],
        || async {
            let ingress = ingresses.get("web").await.ok()?;
            let address = ingress
                .status?
                .load_balancer?
                .ingress?
                .first()?
                .ip
                .clone()?;
            (address == "192.0.2.10").then_some(())
        },
    )
    .await;
    // events in the Ingress's namespace: create.
    wait_for("an IngressIgnored Event", &[&replica], || async {
        event(&admin, &ns, "IngressIgnored", 1).await
    })
    .await;
    // Every watch listed (ready means every watched resource synced).
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(code, _)| *code == 200)
    })
    .await;

    // events: patch. Two changes of the config with the same error make one ConfigInvalid
    // Event with a series of two, which the Recorder writes with a merge patch.
    let configs = Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns);
    let broken = json!({ "spec": { "haproxyConfig": { "template": "global\n  {{#if x}}\n" } } });
    configs
        .patch(
            "haptor-config",
            &PatchParams::default(),
            &Patch::Merge(&broken),
        )
        .await
        .expect("the broken config is stored");
    wait_for("a ConfigInvalid Event", &[&replica], || async {
        event(&admin, &ns, "ConfigInvalid", 1).await
    })
    .await;
    let again = json!({ "spec": { "extraContext": { "rbac_probe": "again" } } });
    let changed = configs
        .patch(
            "haptor-config",
            &PatchParams::default(),
            &Patch::Merge(&again),
        )
        .await
        .expect("the second broken config is stored");
    wait_for("the config's status Invalid", &[&replica], || async {
        config_object(&admin, &ns).await.status.filter(|s| {
            s.validation_status == ValidationStatus::Invalid
                && s.observed_generation == changed.metadata.generation
        })
    })
    .await;
    wait_for(
        "the ConfigInvalid Event's series of two",
        &[&replica],
        || async { event(&admin, &ns, "ConfigInvalid", 2).await },
    )
    .await;

    // No write failed.
    let (code, metrics) = replica
        .get(replica.metrics, "/metrics")
        .await
        .expect("the metrics port answers");
    assert_eq!(code, 200, "{metrics}");
    for metric in [
        "haptor_kube_writes_total",
        "haptor_config_status_writes_total",
    ] {
        let samples = samples(&metrics, metric);
        let failed: Vec<_> = samples
            .iter()
            .filter(|(labels, value)| labels.contains(r#"result="failure""#) && *value > 0.0)
            .collect();
        assert!(failed.is_empty(), "{metric} counts failures: {failed:?}");
        assert!(
            samples
                .iter()
                .any(|(labels, value)| labels.contains(r#"result="success""#) && *value > 0.0),
            "{metric} counts no success: {samples:?}"
        );
    }

    assert_no_refusal(&replica);

    // leases: get and update on release.
    assert_eq!(
        replica.stop_with("TERM"),
        Some(0),
        "haptor exits 0 on SIGTERM"
    );
    assert_eq!(
        lease_holder(&admin, &ns).await,
        Some(None),
        "the Lease is released on SIGTERM"
    );
    assert_no_refusal(&replica);
}

fn assert_no_refusal(replica: &Replica) {
    let log = replica.log_text();
    let refused = refusals(&log);
    assert!(
        refused.is_empty(),
        "the API server refused requests of haptor under the RBAC of {MANIFEST}:\n{}",
        refused.join("\n")
    );
}

#[tokio::test]
async fn without_the_lease_rule_haptor_is_refused_and_says_which_rbac_rule_to_grant() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let (ns, _dir, kubeconfig) = namespace_under_rbac(
        kit,
        &admin,
        "run-rbac-nolease",
        Some(Without::RoleGroup("coordination.k8s.io")),
    )
    .await;
    objects(&admin, &ns).await;
    Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &config(&ns))
        .await
        .expect("the config is created");
    let replica = Replica::start(&kubeconfig, &ns, "rbac-replica");

    let line = wait_for("haptor to log the refused Lease", &[&replica], || async {
        replica
            .log_text()
            .lines()
            .find(|l| l.contains("refused to get Lease"))
            .map(str::to_string)
    })
    .await;
    for what in [
        &format!("{ns}/haptor-leader"),
        "grant get/create/update on leases.coordination.k8s.io",
        &format!("in namespace {ns}"),
        "service account",
        "Role and a RoleBinding",
    ] {
        assert!(line.contains(what), "the message names {what:?}: {line}");
    }
    let log = replica.log_text();
    assert!(
        !refusals(&log).is_empty(),
        "the first test's check catches the refusal:\n{log}"
    );
    assert_eq!(
        lease_holder(&admin, &ns).await,
        None,
        "without the rule there is no Lease"
    );
}

#[tokio::test]
async fn without_the_cluster_role_ingress_status_rule_haptor_is_refused_and_says_which_rule_to_grant()
 {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let (ns, _dir, kubeconfig) = namespace_under_rbac(
        kit,
        &admin,
        "run-rbac-nostatus",
        Some(Without::ClusterRoleRule {
            group: "networking.k8s.io",
            resource: "ingresses/status",
        }),
    )
    .await;
    objects(&admin, &ns).await;
    Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &config_selecting(&ns, "run-rbac-nostatus"),
        )
        .await
        .expect("the config is created");
    let replica = Replica::start_with_args(
        &kubeconfig,
        &ns,
        "rbac-replica",
        &["--publish-address", "192.0.2.10"],
    );

    let line = wait_for(
        "haptor to log the refused Ingress status write",
        &[&replica],
        || async {
            replica
                .log_text()
                .lines()
                .find(|l| l.contains("an Ingress status write or Event failed"))
                .map(str::to_string)
        },
    )
    .await;
    for what in [
        "forbidden",
        &format!("{ns}/web"),
        "needs patch on networking.k8s.io ingresses/status",
    ] {
        assert!(line.contains(what), "the message names {what:?}: {line}");
    }
    let log = replica.log_text();
    assert!(
        !refusals(&log).is_empty(),
        "the first test's check catches the refusal:\n{log}"
    );
    let status = Api::<Ingress>::namespaced(admin.clone(), &ns)
        .get("web")
        .await
        .expect("the Ingress")
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    assert!(
        status.is_empty(),
        "without the rule the Ingress gets no address: {status:?}"
    );
}

#[tokio::test]
async fn without_the_cluster_role_events_rule_haptor_is_refused_and_says_which_rule_to_grant() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let (ns, _dir, kubeconfig) = namespace_under_rbac(
        kit,
        &admin,
        "run-rbac-noevents",
        Some(Without::ClusterRoleRule {
            group: "events.k8s.io",
            resource: "events",
        }),
    )
    .await;
    objects(&admin, &ns).await;
    Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &config_selecting(&ns, "run-rbac-noevents"),
        )
        .await
        .expect("the config is created");
    let replica = Replica::start(&kubeconfig, &ns, "rbac-replica");

    let line = wait_for(
        "haptor to log a refused Event about the config",
        &[&replica],
        || async {
            replica
                .log_text()
                .lines()
                .find(|l| {
                    l.contains("the API server refused the ")
                        && l.contains(&format!(
                            "Event about HAProxyTemplateConfig {ns}/haptor-config"
                        ))
                })
                .map(str::to_string)
        },
    )
    .await;
    for what in [
        "forbidden",
        &format!("grant create and patch on events.k8s.io events in namespace {ns}"),
        "service account",
    ] {
        assert!(line.contains(what), "the message names {what:?}: {line}");
    }
    let log = replica.log_text();
    assert!(
        !refusals(&log).is_empty(),
        "the first test's check catches the refusal:\n{log}"
    );
    assert!(
        event(&admin, &ns, "LeadershipGained", 1).await.is_none(),
        "without the rule there is no LeadershipGained Event"
    );
}

/// The chart's RBAC for a namespaced install, rendered by the real `helm` with
/// `watchNamespace=apps` and release namespace `ns`; its cluster-scoped objects named for the
/// test (the kit is shared).
fn namespaced_manifest(ns: &str, apps: &str) -> Vec<Value> {
    let watch = format!("watchNamespace={apps}");
    helm::documents(&helm::template("haptor", ns, &["--set", &watch]))
        .into_iter()
        .filter(|value: &Value| {
            value["kind"]
                .as_str()
                .is_some_and(|kind| RBAC_KINDS.contains(&kind))
        })
        .map(|mut document: Value| {
            match document["kind"].as_str() {
                Some("ClusterRole") => {
                    let name = document["metadata"]["name"].as_str().unwrap_or_default();
                    document["metadata"]["name"] = json!(format!("{name}-{ns}"));
                }
                Some("ClusterRoleBinding") => {
                    let name = document["metadata"]["name"].as_str().unwrap_or_default();
                    document["metadata"]["name"] = json!(format!("{name}-{ns}"));
                    let role = document["roleRef"]["name"].as_str().unwrap_or_default();
                    document["roleRef"]["name"] = json!(format!("{role}-{ns}"));
                }
                _ => {}
            }
            document
        })
        .collect()
}

/// Creates each document in its own namespace (cluster-scoped ones cluster-wide).
async fn apply_where_they_belong(admin: &Client, documents: &[Value]) {
    fn typed<T: serde::de::DeserializeOwned>(document: &Value) -> T {
        serde_json::from_value(document.clone()).unwrap_or_else(|e| panic!("{document}: {e}"))
    }
    let params = PostParams::default();
    for document in documents {
        let ns = document["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = document["metadata"]["name"].to_string();
        let kind = document["kind"].as_str().unwrap_or_default();
        let result = match kind {
            "ServiceAccount" => Api::<ServiceAccount>::namespaced(admin.clone(), ns)
                .create(&params, &typed(document))
                .await
                .map(drop),
            "Role" => Api::<Role>::namespaced(admin.clone(), ns)
                .create(&params, &typed(document))
                .await
                .map(drop),
            "RoleBinding" => Api::<RoleBinding>::namespaced(admin.clone(), ns)
                .create(&params, &typed(document))
                .await
                .map(drop),
            "ClusterRole" => Api::<ClusterRole>::all(admin.clone())
                .create(&params, &typed(document))
                .await
                .map(drop),
            "ClusterRoleBinding" => Api::<ClusterRoleBinding>::all(admin.clone())
                .create(&params, &typed(document))
                .await
                .map(drop),
            other => panic!("the test does not apply a {other}"),
        };
        result.unwrap_or_else(|e| panic!("creating {kind} {name} in {ns:?}: {e}"));
    }
}

#[tokio::test]
async fn a_namespaced_install_watches_only_its_namespace_and_roles_are_enough() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("run-rbac-namespaced").await;
    let apps = kit.temp_ns("run-rbac-apps").await;
    let outside = kit.temp_ns("run-rbac-outside").await;
    let documents = namespaced_manifest(&ns, &apps);
    // RBAC shrank to Roles: what stays cluster-wide is only what is cluster-scoped (and
    // the webhook configuration haptor patches, by its name only).
    for role in documents.iter().filter(|d| d["kind"] == "ClusterRole") {
        for rule in role["rules"].as_array().into_iter().flatten() {
            for resource in rule["resources"].as_array().into_iter().flatten() {
                assert!(
                    resource == "ingressclasses"
                        || resource == "namespaces"
                        || (resource == "validatingwebhookconfigurations"
                            && rule["resourceNames"]
                                .as_array()
                                .is_some_and(|n| n.len() == 1)),
                    "a namespaced install grants {resource} cluster-wide: {role}"
                );
            }
        }
    }
    apply_where_they_belong(&admin, &documents).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let kubeconfig = dir.path().join("haptor.kubeconfig");
    service_account_kubeconfig(kit, &admin, &ns, &kubeconfig).await;
    objects(&admin, &apps).await;
    let elsewhere: Ingress = serde_json::from_value(json!({
        "metadata": { "name": "elsewhere" },
        "spec": {
            "ingressClassName": "haptor",
            "rules": [{ "host": "outside.example", "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    }))
    .expect("an Ingress");
    Api::<Ingress>::namespaced(admin.clone(), &outside)
        .create(&PostParams::default(), &elsewhere)
        .await
        .expect("the Ingress outside is created");
    let mut value = serde_json::to_value(library_config(&ns, fast_election())).expect("JSON");
    value["spec"]["credentialsSecretRef"] =
        json!({ "name": "haptor-dataplane", "namespace": apps });
    let config: HAProxyTemplateConfig = serde_json::from_value(value).expect("a config");
    Api::<HAProxyTemplateConfig>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
    let replica = Replica::start_with_args(
        &kubeconfig,
        &ns,
        "namespaced",
        &["--watch-namespace", &apps],
    );
    let files = wait_for(
        "a render with the Ingress of the watched namespace",
        &[&replica],
        || async {
            let (status, body) = replica.get(replica.debug, "/debug/vars/rendered").await?;
            (status == 200 && body.contains("secure.example")).then_some(body)
        },
    )
    .await;
    assert!(
        !files.contains("outside.example"),
        "an Ingress outside the watched namespace is not rendered"
    );
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(status, _)| *status == 200)
    })
    .await;
    assert_no_refusal(&replica);
}
