//! The admission webhook of `haptor run`, end to end: the real binary serving HTTPS with a
//! certificate made by `openssl`, the Ingress library as its config (Ingresses watched with
//! `enableValidationWebhook`), and
//!
//! - the kit's real kube-apiserver configured with the chart's ValidatingWebhookConfiguration
//!   (rendered by `helm template` with `webhook.url` pointing at the running replica, since
//!   the kit has no Service network, and `webhook.caBundle` the test's CA): it denies an
//!   Ingress whose configuration fails `haproxy -c` with the reason in the error, allows a
//!   good one, denies a broken HAProxyTemplateConfig update with its template and line, and
//!   an Ingress that tries to smuggle a directive through an annotation or a path is denied
//!   or rendered inert, with nothing executed;
//! - AdmissionReviews posted directly: a request not decided within `--webhook-timeout` is
//!   answered by `--webhook-failure-policy` and counted; a repeated admission is answered from
//!   the admission cache; a rotated certificate serves without a restart, and a broken one
//!   does not replace the one that serves; of two replicas sharing a Lease, the follower
//!   answers as the leader does (every replica keeps the stores).
//!
//! One replica registers a webhook with the API server (in the first test); the others are
//! only posted to, so the tests of this binary do not judge each other's objects.

use crate::haptor_run;
use crate::helm;
use crate::kube_kit;
use crate::pod_network;
use crate::support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use haptor::pure::config::HAProxyTemplateConfig;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use haptor_run::{Replica, lease_holder, library_config, no_election, wait_for};
use kube_kit::Kit;
use support::free_port;

/// A CA and a server certificate for 127.0.0.1 signed by it, made with `openssl`.
struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    fn new() -> Certificates {
        let dir = tempfile::tempdir().expect("a temp dir");
        let certificates = Certificates { dir };
        certificates.issue("ca", "server");
        certificates
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl runs");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A new CA `ca` (ca.crt, ca.key) and a server pair signed by it, written as
    /// `server.crt`/`server.key`.
    fn issue(&self, ca: &str, server: &str) {
        let (ca_key, ca_crt) = (format!("{ca}.key"), format!("{ca}.crt"));
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca_crt,
            "-days",
            "1",
            "-subj",
            &format!("/CN=haptor test {ca}"),
        ]);
        std::fs::write(self.path("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
        let (key, csr, crt) = (
            format!("{server}.key.new"),
            format!("{server}.csr"),
            format!("{server}.crt.new"),
        );
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=127.0.0.1",
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ]);
        // Into place by rename, as the kubelet swaps a Secret volume's files.
        std::fs::rename(self.path(&key), self.path(&format!("{server}.key"))).expect("key");
        std::fs::rename(self.path(&crt), self.path(&format!("{server}.crt"))).expect("crt");
    }

    fn ca_pem(&self, ca: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{ca}.crt"))).expect("the CA")
    }

    fn args(&self, addr: &str) -> Vec<String> {
        vec![
            "--webhook-addr".into(),
            addr.into(),
            "--webhook-cert-file".into(),
            self.path("server.crt").display().to_string(),
            "--webhook-key-file".into(),
            self.path("server.key").display().to_string(),
        ]
    }
}

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The chart's documents, rendered by the real `helm` with `values` (`--set` pairs).
fn helm_template(ns: &str, values: &[String]) -> Vec<Value> {
    let mut extra = Vec::new();
    for value in values {
        extra.extend(["--set", value.as_str()]);
    }
    helm::documents(&helm::template("haptor", ns, &extra))
}

/// The chart's ValidatingWebhookConfiguration, pointed at `url` and trusting `ca`.
fn webhook_configuration(ns: &str, url: &str, ca: &str) -> ValidatingWebhookConfiguration {
    let documents = helm_template(
        ns,
        &[
            format!("webhook.url={url}"),
            format!("webhook.caBundle={}", base64(ca)),
        ],
    );
    let document = documents
        .into_iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("the chart renders a ValidatingWebhookConfiguration");
    serde_json::from_value(document).expect("a ValidatingWebhookConfiguration")
}

async fn create_service(client: &Client, ns: &str) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
}

fn ingress(name: &str, host: &str, tls_secret: Option<&str>, annotations: Value) -> Ingress {
    let mut value = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "ingressClassName": "haptor",
            "rules": [{ "host": host, "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    });
    if let Some(secret) = tls_secret {
        value["spec"]["tls"] = json!([{ "hosts": [host], "secretName": secret }]);
    }
    serde_json::from_value(value).expect("an Ingress")
}

/// A kubernetes.io/tls Secret whose key is not the certificate's: only `haproxy -c` (which
/// loads the pair) finds that out.
async fn mismatched_tls_secret(client: &Client, ns: &str, certificates: &Certificates) {
    certificates.issue("other-ca", "other");
    let cert = std::fs::read_to_string(certificates.path("server.crt")).expect("crt");
    let key = std::fs::read_to_string(certificates.path("other.key")).expect("key");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "mismatched" },
        "type": "kubernetes.io/tls",
        "stringData": { "tls.crt": cert, "tls.key": key },
    }))
    .expect("a Secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret is created");
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// `/debug/vars/rendered`: haproxy.cfg and every auxiliary file, each as (path, text).
async fn rendered_files(replica: &Replica) -> Option<Vec<(String, String)>> {
    let (status, body) = replica.get(replica.debug, "/debug/vars/rendered").await?;
    if status != 200 {
        return None;
    }
    let value: Value = serde_json::from_str(&body).ok()?;
    let mut files = vec![(
        "haproxy.cfg".to_string(),
        value["haproxy.cfg"].as_str()?.to_string(),
    )];
    for (path, text) in value["files"].as_object()? {
        files.push((path.clone(), text.as_str().unwrap_or_default().to_string()));
    }
    Some(files)
}

#[tokio::test]
async fn the_api_server_denies_what_breaks_the_configuration_and_allows_the_rest() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("webhook").await;
    let apps = kit.temp_ns("webhook-apps").await;
    let certificates = Certificates::new();
    create_service(&client, &apps).await;
    mismatched_tls_secret(&client, &apps, &certificates).await;
    let configs = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns);
    configs
        .create(&PostParams::default(), &library_config(&ns, no_election()))
        .await
        .expect("the config is created");
    let port = free_port();
    let args = certificates.args(&format!("127.0.0.1:{port}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = Replica::start_with_args(kit.admin_kubeconfig(), &ns, "solo", &args);
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(status, _)| *status == 200)
    })
    .await;
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let mut configuration = webhook_configuration(
        &ns,
        &format!("https://127.0.0.1:{port}"),
        &certificates.ca_pem("ca"),
    );
    configuration.metadata.name = Some(format!("haptor-{ns}"));
    // The kit is shared by this binary's tests: both webhooks are narrowed to this test's
    // namespaces (the chart's resources webhook excludes only haptor's own), so no other
    // test's objects wait for this replica. Rules, client config, CA, failure policy and
    // timeout stay the chart's.
    for webhook in configuration.webhooks.iter_mut().flatten() {
        let mut selector = webhook.namespace_selector.clone().unwrap_or_default();
        let mut expressions = selector.match_expressions.unwrap_or_default();
        expressions.push(LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![ns.clone(), apps.clone()]),
        });
        selector.match_expressions = Some(expressions);
        webhook.namespace_selector = Some(selector);
    }
    webhooks
        .create(&PostParams::default(), &configuration)
        .await
        .expect("the API server takes the chart's ValidatingWebhookConfiguration");

    let ingresses = Api::<Ingress>::namespaced(client.clone(), &apps);
    let broken = ingress(
        "broken-tls",
        "broken.example",
        Some("mismatched"),
        json!({}),
    );
    // The API server starts calling a new webhook within moments: until the dry run is
    // refused, it is not called yet.
    let refusal = wait_for(
        "the API server to call the webhook",
        &[&replica],
        || async {
            match ingresses.create(&dry_run(), &broken).await {
                Err(kube::Error::Api(status)) => Some(status.message.clone()),
                _ => None,
            }
        },
    )
    .await;
    assert!(refusal.contains("denied the request"), "{refusal}");
    assert!(
        refusal.contains("Ingress")
            && refusal.contains("broken-tls")
            && refusal.contains("semantic phase"),
        "the reason names the object and the phase: {refusal}"
    );
    let error = ingresses
        .create(&PostParams::default(), &broken)
        .await
        .expect_err("the Ingress whose configuration fails haproxy -c is denied");
    let kube::Error::Api(status) = error else {
        panic!("an API error, not {error}");
    };
    assert!(
        status.message.contains("semantic phase"),
        "{}",
        status.message
    );
    assert!(
        ingresses
            .get_opt("broken-tls")
            .await
            .expect("get")
            .is_none(),
        "a denied Ingress is not stored"
    );

    // A good Ingress is allowed.
    ingresses
        .create(
            &PostParams::default(),
            &ingress("good", "good.example", None, json!({})),
        )
        .await
        .expect("a good Ingress is allowed");

    // A broken config update is denied with its template and line.
    let mut broken_config = library_config(&ns, no_election());
    broken_config.spec.haproxy_config.template = format!(
        "{}\n{{{{#each (resources \"ingresses\")}}\n",
        broken_config.spec.haproxy_config.template
    );
    let patch = json!({ "spec": { "haproxyConfig": { "template": broken_config.spec.haproxy_config.template } } });
    let error = configs
        .patch(
            "haptor-config",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect_err("a config whose template does not compile is denied");
    let kube::Error::Api(status) = error else {
        panic!("an API error, not {error}");
    };
    assert!(
        status.message.contains("haproxy.cfg") && status.message.contains("line"),
        "the denial names the template and the line: {}",
        status.message
    );

    // Smuggling: a directive that would run code, through an annotation value and a path.
    let marker = tempfile::tempdir().expect("a temp dir");
    let lua = marker.path().join("smuggled.lua");
    let ran = marker.path().join("ran");
    std::fs::write(&lua, format!("io.open('{}', 'w'):close()\n", ran.display())).expect("lua");
    let smuggled = format!("roundrobin\n  lua-load {}", lua.display());
    let mut sneaky = ingress(
        "sneaky",
        "sneaky.example",
        None,
        json!({
            "haproxy.org/load-balance": smuggled,
            "haproxy.org/timeout-server": format!("5s\n  lua-load {}", lua.display()),
            "haproxy.org/auth-realm": format!("x\"\n  lua-load {}", lua.display()),
            // A valid one: the Ingress still gets its own backend, which the render shows.
            "haproxy.org/timeout-connect": "5s",
        }),
    );
    if let Some(spec) = sneaky.spec.as_mut()
        && let Some(rules) = spec.rules.as_mut()
        && let Some(http) = rules[0].http.as_mut()
    {
        http.paths[0].path = Some(format!("/a\n  lua-load {}", lua.display()));
        http.paths[0].path_type = "ImplementationSpecific".into();
    }
    match ingresses.create(&PostParams::default(), &sneaky).await {
        Err(kube::Error::Api(status)) => {
            // Denied: by the API server's own validation or by haptor's schema phase.
            eprintln!("the smuggling Ingress was denied: {}", status.message);
            assert!(!status.message.is_empty());
        }
        Err(other) => panic!("{other}"),
        Ok(_) => {
            // Allowed: then it renders inert — the render that holds the Ingress has no
            // line in any file that starts with the directive.
            let files = wait_for(
                "the render with the sneaky Ingress",
                &[&replica],
                || async {
                    rendered_files(&replica)
                        .await
                        .filter(|files| files.iter().any(|(_, text)| text.contains("_sneaky_")))
                },
            )
            .await;
            for (path, text) in &files {
                let injected: Vec<&str> = text
                    .lines()
                    .filter(|l| l.trim_start().starts_with("lua-load"))
                    .collect();
                assert!(injected.is_empty(), "{path} holds {injected:?}:\n{text}");
            }
            let config = &files[0].1;
            assert!(
                config.contains("_sneaky_web_80\n  option forwardfor\n  timeout connect 5s\n")
                    && !config.contains("smuggled.lua"),
                "the valid annotation applies and the smuggling ones are left out:\n{config}"
            );
            eprintln!("the smuggling Ingress was allowed and renders inert");
        }
    }
    assert!(!ran.exists(), "the smuggled Lua never ran");
    let log = replica.log_text();
    assert!(!log.contains("panicked"), "{log}");
    webhooks
        .delete(&format!("haptor-{ns}"), &Default::default())
        .await
        .expect("the webhook configuration is removed");
}

/// An HTTPS client that trusts only `ca`.
fn client_trusting(ca: &str) -> reqwest::Client {
    kube_kit::install_crypto();
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).expect("a PEM CA")])
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client")
}

fn review(uid: &str, ns: &str, object: &Ingress) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": { "group": "networking.k8s.io", "version": "v1", "kind": "Ingress" },
            "resource": { "group": "networking.k8s.io", "version": "v1", "resource": "ingresses" },
            "name": object.metadata.name,
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": { "username": "test" },
            "object": object,
            "dryRun": false,
        }
    })
}

async fn post_review(client: &reqwest::Client, port: u16, review: &Value) -> Value {
    let response = client
        .post(format!("https://127.0.0.1:{port}/validate/resources"))
        .json(review)
        .send()
        .await
        .expect("the webhook answers");
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("JSON");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    answer["response"].clone()
}

/// A replica of the library config in a namespace of its own, serving the webhook with
/// `extra` flags; returns it with its webhook port once ready.
async fn webhook_replica(
    kit: &Kit,
    prefix: &str,
    certificates: &Certificates,
    extra: &[&str],
) -> (Replica, u16, String) {
    let client = kit.admin().await;
    let ns = kit.temp_ns(prefix).await;
    Api::<HAProxyTemplateConfig>::namespaced(client, &ns)
        .create(&PostParams::default(), &library_config(&ns, no_election()))
        .await
        .expect("the config is created");
    let port = free_port();
    let mut args = certificates.args(&format!("127.0.0.1:{port}"));
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = Replica::start_with_args(kit.admin_kubeconfig(), &ns, prefix, &args);
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(status, _)| *status == 200)
    })
    .await;
    (replica, port, ns)
}

#[tokio::test]
async fn a_request_not_decided_within_the_timeout_is_answered_by_the_failure_policy_and_counted() {
    let kit = Kit::shared();
    let certificates = Certificates::new();
    let client = client_trusting(&certificates.ca_pem("ca"));
    for (policy, allowed) in [("Fail", false), ("Ignore", true)] {
        let (replica, port, ns) = webhook_replica(
            kit,
            &format!("webhook-{}", policy.to_lowercase()),
            &certificates,
            &[
                "--webhook-timeout",
                "1ms",
                "--webhook-failure-policy",
                policy,
            ],
        )
        .await;
        // A backend of its own: a structural change, which `haproxy -c` must check, so no
        // decision fits in 1 ms (a host alone is a map entry, decided in less since renders
        // reuse their fragments).
        let object = ingress(
            "slow",
            "slow.example",
            None,
            json!({"haproxy.org/timeout-server": "42s"}),
        );
        let response = post_review(&client, port, &review("u-1", &ns, &object)).await;
        assert_eq!(response["allowed"], allowed, "{response}");
        let said = if allowed {
            response["warnings"][0]
                .as_str()
                .unwrap_or_default()
                .to_string()
        } else {
            response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            said.contains("no decision within")
                && said.contains(&format!("failure policy is {policy}")),
            "{response}"
        );
        let timeouts = replica
            .metric("haptor_webhook_requests_total{resource=\"resources\",result=\"timeout\"}")
            .await;
        assert_eq!(timeouts, Some(1.0));
    }
}

#[tokio::test]
async fn a_repeated_admission_is_answered_from_the_admission_cache() {
    let kit = Kit::shared();
    let certificates = Certificates::new();
    let client = client_trusting(&certificates.ca_pem("ca"));
    let (replica, port, ns) = webhook_replica(kit, "webhook-cache", &certificates, &[]).await;
    let object = ingress("cached", "cached.example", None, json!({}));
    let started = Instant::now();
    let first = post_review(&client, port, &review("u-1", &ns, &object)).await;
    let first_took = started.elapsed();
    assert_eq!(first["allowed"], true, "{first}");
    let started = Instant::now();
    let second = post_review(&client, port, &review("u-2", &ns, &object)).await;
    let second_took = started.elapsed();
    assert_eq!(second["allowed"], true, "{second}");
    assert_eq!(
        replica.metric("haptor_webhook_cache_hits_total").await,
        Some(1.0),
        "the repeat is a cache hit (first {first_took:?}, repeat {second_took:?})"
    );
    // A denial is remembered too, and answered the same.
    let broken = ingress(
        "broken",
        "broken.example",
        None,
        json!({ "haproxy.org/timeout-server": "999999999d" }),
    );
    let denied = post_review(&client, port, &review("u-3", &ns, &broken)).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    let again = post_review(&client, port, &review("u-4", &ns, &broken)).await;
    assert_eq!(again["status"]["message"], denied["status"]["message"]);
    assert_eq!(
        replica.metric("haptor_webhook_cache_hits_total").await,
        Some(2.0)
    );
}

#[tokio::test]
async fn a_rotated_certificate_serves_without_a_restart_and_a_broken_one_is_not_taken() {
    let kit = Kit::shared();
    let certificates = Certificates::new();
    let (replica, port, ns) = webhook_replica(kit, "webhook-rotate", &certificates, &[]).await;
    let object = ingress("any", "any.example", None, json!({}));
    let old_client = client_trusting(&certificates.ca_pem("ca"));
    post_review(&old_client, port, &review("u-1", &ns, &object)).await;

    // Rotation: a new CA and a new pair, renamed into place.
    certificates.issue("ca2", "server");
    let new_client = client_trusting(&certificates.ca_pem("ca2"));
    wait_for("the rotated certificate to serve", &[&replica], || async {
        // A new client each time: a pooled connection keeps the certificate it shook hands with.
        client_trusting(&certificates.ca_pem("ca2"))
            .post(format!("https://127.0.0.1:{port}/validate/resources"))
            .json(&review("u-2", &ns, &object))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == 200)
    })
    .await;
    assert!(
        client_trusting(&certificates.ca_pem("ca"))
            .post(format!("https://127.0.0.1:{port}/validate/resources"))
            .json(&review("u-3", &ns, &object))
            .send()
            .await
            .is_err(),
        "the old certificate no longer serves"
    );

    // A key that does not match: logged and counted, the serving pair stays.
    std::fs::copy(certificates.path("ca.key"), certificates.path("server.key")).expect("copy");
    wait_for("the broken pair to be refused", &[&replica], || async {
        replica
            .metric("haptor_webhook_certificate_reloads_total{result=\"failure\"}")
            .await
            .filter(|n| *n >= 1.0)
    })
    .await;
    post_review(&new_client, port, &review("u-4", &ns, &object)).await;
    // The failure is counted before it is logged: wait for the line.
    wait_for("the broken pair logged", &[&replica], || async {
        replica.log_text().contains("does not match").then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_follower_answers_admissions_as_the_leader_does() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("webhook-replicas").await;
    let certificates = Certificates::new();
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &library_config(&ns, haptor_run::fast_election()),
        )
        .await
        .expect("the config is created");
    let ports = [free_port(), free_port()];
    let replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .zip(ports)
        .map(|(identity, port)| {
            let args = certificates.args(&format!("127.0.0.1:{port}"));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Replica::start_with_args(kit.admin_kubeconfig(), &ns, identity, &args)
        })
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let leader = wait_for("a Lease holder", &all, || lease_holder(&client, &ns)).await;
    for replica in &replicas {
        wait_for("/readyz 200", &all, || async {
            replica.readyz().await.filter(|(status, _)| *status == 200)
        })
        .await;
    }
    let https = client_trusting(&certificates.ca_pem("ca"));
    let good = ingress("good", "good.example", None, json!({}));
    let broken = ingress(
        "broken",
        "broken.example",
        None,
        json!({ "haproxy.org/timeout-server": "999999999d" }),
    );
    for (replica, port) in replicas.iter().zip(ports) {
        let role = if replica.identity == leader {
            "leader"
        } else {
            "follower"
        };
        let allowed = post_review(&https, port, &review("u-good", &ns, &good)).await;
        assert_eq!(allowed["allowed"], true, "{role}: {allowed}");
        let denied = post_review(&https, port, &review("u-broken", &ns, &broken)).await;
        assert_eq!(denied["allowed"], false, "{role}: {denied}");
        assert!(
            denied["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("schema phase") && m.contains("timeout server")),
            "{role}: {denied}"
        );
    }
}

#[tokio::test]
async fn a_config_change_is_admitted_once_it_renders_and_its_validation_tests_pass() {
    let kit = Kit::shared();
    let certificates = Certificates::new();
    let client = client_trusting(&certificates.ca_pem("ca"));
    let (replica, port, ns) = webhook_replica(kit, "webhook-config", &certificates, &[]).await;
    let post = |config: HAProxyTemplateConfig, uid: &'static str| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let review = json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": uid,
                    "kind": { "group": "haptor.dev", "version": "v1alpha1", "kind": "HAProxyTemplateConfig" },
                    "resource": { "group": "haptor.dev", "version": "v1alpha1", "resource": "haproxytemplateconfigs" },
                    "name": "haptor-config",
                    "namespace": ns,
                    "operation": "UPDATE",
                    "userInfo": { "username": "test" },
                    "object": config,
                }
            });
            let started = Instant::now();
            let answer: Value = client
                .post(format!(
                    "https://127.0.0.1:{port}/validate/haproxytemplateconfigs"
                ))
                .json(&review)
                .send()
                .await
                .expect("the webhook answers")
                .json()
                .await
                .expect("JSON");
            (answer["response"].clone(), started.elapsed())
        }
    };
    // The library as it is: compiles, renders against the current objects, its 40-odd
    // validationTests pass.
    let (allowed, took) = post(library_config(&ns, no_election()), "c-1").await;
    assert_eq!(allowed["allowed"], true, "{allowed}");
    eprintln!("the Ingress library's config admission took {took:?}");
    // A validation test that no longer holds denies the change, naming the test.
    let mut failing = library_config(&ns, no_election());
    let template = failing
        .spec
        .haproxy_config
        .template
        .replace("monitor-uri /healthz", "monitor-uri /health");
    failing.spec.haproxy_config.template = template;
    let (denied, _) = post(failing, "c-2").await;
    assert_eq!(denied["allowed"], false, "{denied}");
    let message = denied["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("validation test '"), "{message}");
    assert!(!replica.log_text().contains("panicked"));
}

#[tokio::test]
async fn a_webhook_started_before_its_certificate_exists_is_not_ready_and_serves_once_the_files_appear()
 {
    let kit = Kit::shared();
    let certificates = Certificates::new();
    let client = kit.admin().await;
    let ns = kit.temp_ns("webhook-late").await;
    Api::<HAProxyTemplateConfig>::namespaced(client, &ns)
        .create(&PostParams::default(), &library_config(&ns, no_election()))
        .await
        .expect("the config is created");
    let port = free_port();
    let (cert, key) = (certificates.path("late.crt"), certificates.path("late.key"));
    let args = [
        "--webhook-addr".to_string(),
        format!("127.0.0.1:{port}"),
        "--webhook-cert-file".into(),
        cert.display().to_string(),
        "--webhook-key-file".into(),
        key.display().to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = Replica::start_with_args(kit.admin_kubeconfig(), &ns, "late", &args);
    // The controller runs without the certificate (the chart's Secret volume is optional),
    // but is not ready: a Service would send it admissions it cannot answer.
    wait_for(
        "/readyz 503 waiting for the certificate only",
        &[&replica],
        || async {
            replica.readyz().await.filter(|(status, body)| {
                *status == 503
                    && body.contains("webhook's certificate")
                    && !body.contains("HAProxyTemplateConfig")
                    && !body.contains("initial sync")
            })
        },
    )
    .await;
    let https = client_trusting(&certificates.ca_pem("ca"));
    let object = ingress("any", "any.example", None, json!({}));
    assert!(
        https
            .post(format!("https://127.0.0.1:{port}/validate/resources"))
            .json(&review("u-1", &ns, &object))
            .send()
            .await
            .is_err(),
        "no certificate, no TLS"
    );
    assert!(
        replica
            .log_text()
            .contains("the webhook certificate does not load yet"),
        "{}",
        replica.log_text()
    );
    std::fs::copy(certificates.path("server.key"), &key).expect("key");
    std::fs::copy(certificates.path("server.crt"), &cert).expect("cert");
    wait_for("the webhook to serve", &[&replica], || async {
        client_trusting(&certificates.ca_pem("ca"))
            .post(format!("https://127.0.0.1:{port}/validate/resources"))
            .json(&review("u-2", &ns, &object))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == 200)
    })
    .await;
    wait_for(
        "/readyz 200 once the certificate loaded",
        &[&replica],
        || async { replica.readyz().await.filter(|(status, _)| *status == 200) },
    )
    .await;
}

/// The flag values of a Deployment's container `args` after `flag`.
fn flag_value<'a>(args: &'a [String], flag: &str) -> &'a str {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .unwrap_or_else(|| panic!("the Deployment passes {flag}: {args:?}"))
}

/// Creates `document` as it is (`kubectl apply` of a new object), whatever its kind.
async fn create_document(client: &Client, document: &Value) {
    let object: kube::api::DynamicObject =
        serde_json::from_value(document.clone()).expect("an object");
    let types = object.types.clone().expect("apiVersion and kind");
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("the API server serves {}: {e}", types.kind));
    let api: Api<kube::api::DynamicObject> = match (capabilities.scope, &object.metadata.namespace)
    {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {} {:?}: {e}", types.kind, object.metadata.name));
}

/// A kubeconfig for ServiceAccount `name` of `ns`: the kit's server and CA and a token of
/// the TokenRequest API, nothing else.
async fn service_account_kubeconfig(
    kit: &Kit,
    admin: &Client,
    ns: &str,
    name: &str,
    path: &std::path::Path,
) {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .expect("the TokenRequest's status")
        .token;
    let admin_config: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(kit.admin_kubeconfig()).expect("the admin kubeconfig"),
    )
    .expect("the admin kubeconfig is YAML");
    let cluster = &admin_config["clusters"][0]["cluster"];
    let user = format!("system:serviceaccount:{ns}:{name}");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "kit", "cluster": {
            "server": cluster["server"], "certificate-authority-data": cluster["certificate-authority-data"] } }],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": "sa", "context": { "cluster": "kit", "user": user, "namespace": ns } }],
        "current-context": "sa",
    });
    std::fs::write(path, serde_yaml_ng::to_string(&config).expect("YAML")).expect("a kubeconfig");
}

/// The failure policy and decoded caBundle of each webhook of the configuration `name`.
async fn webhook_state(client: &Client, name: &str) -> Vec<(String, Option<String>)> {
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .expect("the webhook configuration");
    configuration
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| {
            (
                w.failure_policy.unwrap_or_default(),
                w.client_config
                    .ca_bundle
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned()),
            )
        })
        .collect()
}

/// `kubectl create namespace haptor && kubectl apply -f deploy/manifests/haptor.yaml`, as the
/// README gives it, on a kube-apiserver of its own (which reaches a webhook Service at an
/// address of its EndpointSlices, `--enable-aggregator-routing`, as the kit has no Service
/// network). No controller-manager or kubelet runs: the controller is the `haptor` binary
/// with the arguments and environment of the manifest's Deployment and a token of its
/// ServiceAccount, serving the webhook on a non-loopback address of the host (a pod
/// network's gateway: the API server refuses loopback endpoints), and the test writes the
/// EndpointSlice the endpoints controller would write for the controller pod. Nothing else
/// is done by hand: the Secret, the certificate, the `caBundle` and the failure policy are
/// haptor's.
#[tokio::test(flavor = "multi_thread")]
async fn the_manifest_applied_as_the_readme_gives_it_issues_its_webhook_certificate_and_refuses_only_what_breaks_the_config()
 {
    let kit = Kit::start_with_apiserver_args(
        kube_kit::KitOptions::default(),
        &["--enable-aggregator-routing=true"],
    );
    let admin = kit.admin().await;
    let network = pod_network::PodNetwork::new();
    let manifest = std::fs::read_to_string(haptor_run::repo("deploy/manifests/haptor.yaml"))
        .expect("the manifest");
    let documents = helm::documents(&manifest);

    // kubectl create namespace haptor && kubectl apply -f deploy/manifests/haptor.yaml
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "haptor" } })).expect("a Namespace");
    Api::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace haptor");
    for document in &documents {
        create_document(&admin, document).await;
    }
    let configuration = documents
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("the manifest registers the webhook")["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    // As applied, before any controller runs: no caBundle, failurePolicy Ignore, so the API
    // server admits an Ingress as it would without the webhook.
    for (policy, bundle) in webhook_state(&admin, &configuration).await {
        assert_eq!((policy.as_str(), bundle), ("Ignore", None));
    }
    let apps = kit.temp_ns("apps").await;
    create_service(&admin, &apps).await;
    let ingresses = Api::<Ingress>::namespaced(admin.clone(), &apps);
    ingresses
        .create(
            &PostParams::default(),
            &ingress("before-haptor", "before.example", None, json!({})),
        )
        .await
        .expect("before haptor runs, an Ingress is admitted as without a webhook");

    // The controller pod, as its Deployment says.
    let deployment = documents
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "haptor")
        .expect("the controller Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let port = free_port();
    let webhook_addr = format!("{}:{port}", network.gateway());
    let at = args
        .iter()
        .position(|a| a == "--webhook-addr")
        .expect("--webhook-addr");
    args[at + 1] = webhook_addr.clone();
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .chain([("POD_NAMESPACE".to_string(), "haptor".to_string())])
        // The image's own checker (its ENV HAPROXY_BIN) is a haproxy of the line the manifest
        // deploys (--haproxy-version): this machine's one of that line stands for it.
        .chain([(
            "HAPROXY_BIN".to_string(),
            support::haproxy_of_line(
                flag_value(&args, "--haproxy-version")
                    .parse::<haptor::pure::haproxy::HaproxyVersion>()
                    .expect("X.Y"),
            )
            .display()
            .to_string(),
        )])
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let dir = tempfile::tempdir().expect("a temp dir");
    let kubeconfig = dir.path().join("haptor.kubeconfig");
    let account = pod["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount");
    service_account_kubeconfig(&kit, &admin, "haptor", account, &kubeconfig).await;
    // The controller pod's endpoint, as the endpoints controller writes it: the webhook
    // Service's port `webhook` at the pod's address, not ready until the pod's
    // readinessProbe (`/readyz` on the health port) answers 200.
    let service = "haptor-webhook";
    assert_eq!(flag_value(&args, "--webhook-service"), service);
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"], "/readyz",
        "the pod is Ready once /readyz answers 200"
    );
    let slice = |ready: bool| -> k8s_openapi::api::discovery::v1::EndpointSlice {
        serde_json::from_value(json!({
            "metadata": { "name": format!("{service}-pod"), "namespace": "haptor",
                          "labels": { "kubernetes.io/service-name": service } },
            "addressType": "IPv4",
            "endpoints": [{ "addresses": [network.gateway().to_string()],
                            "conditions": { "ready": ready } }],
            "ports": [{ "name": "webhook", "port": port, "protocol": "TCP" }],
        }))
        .expect("an EndpointSlice")
    };
    let slices =
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(admin.clone(), "haptor");
    slices
        .create(&PostParams::default(), &slice(false))
        .await
        .expect("the EndpointSlice");
    let replica = Replica::start_as(&kubeconfig, "haptor-0", &args, &env);
    let started = Instant::now();

    // haptor creates the Secret with a CA and a certificate for the Service's names...
    let secret_name = flag_value(&args, "--webhook-self-issued-secret").to_string();
    let secrets = Api::<Secret>::namespaced(admin.clone(), "haptor");
    let secret = wait_for(
        "haptor to create the webhook certificate Secret",
        &[&replica],
        || async { secrets.get_opt(&secret_name).await.ok().flatten() },
    )
    .await;
    let secret_in = started.elapsed();
    let data = secret.data.clone().expect("data");
    let ca = String::from_utf8(data["ca.crt"].0.clone()).expect("ca.crt");
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(!data[key].0.is_empty(), "{key}");
    }
    // ... and puts its CA into the webhook configuration's caBundle.
    wait_for("haptor to patch the caBundle", &[&replica], || async {
        let state = webhook_state(&admin, &configuration).await;
        state
            .iter()
            .all(|(_, bundle)| bundle.as_deref() == Some(ca.as_str()))
            .then_some(())
    })
    .await;
    let bundle_in = started.elapsed();

    // While no controller pod is Ready the API server cannot call the webhook, and the
    // failure policy is still Ignore: what breaks the configuration is admitted, as it
    // would be without a webhook (the controller's own checks keep it out of HAProxy).
    let certificates = Certificates::new();
    mismatched_tls_secret(&admin, &apps, &certificates).await;
    let broken = ingress(
        "broken-tls",
        "broken.example",
        Some("mismatched"),
        json!({}),
    );
    ingresses
        .create(&dry_run(), &broken)
        .await
        .expect("with no Ready controller pod, the Ingress is admitted (failurePolicy Ignore)");

    // The pod turns Ready: the API server calls the webhook through the Service with
    // haptor's certificate; the Ingress that breaks the configuration is refused, a good
    // one admitted.
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(status, _)| *status == 200)
    })
    .await;
    let ready_in = started.elapsed();
    let mut ready = slices
        .get(&format!("{service}-pod"))
        .await
        .expect("the EndpointSlice");
    ready.endpoints = slice(true).endpoints;
    slices
        .replace(&format!("{service}-pod"), &PostParams::default(), &ready)
        .await
        .expect("the endpoint turns ready");
    let refusal = wait_for(
        "the API server to refuse through the webhook",
        &[&replica],
        || async {
            match ingresses.create(&dry_run(), &broken).await {
                Err(kube::Error::Api(status)) => Some(status.message.clone()),
                _ => None,
            }
        },
    )
    .await;
    let refused_in = started.elapsed();
    assert!(
        refusal.contains("denied the request") && refusal.contains("semantic phase"),
        "{refusal}"
    );
    let error = ingresses
        .create(&PostParams::default(), &broken)
        .await
        .expect_err("the Ingress that breaks the configuration is refused");
    assert!(error.to_string().contains("broken-tls"), "{error}");
    ingresses
        .create(
            &PostParams::default(),
            &ingress("good", "good.example", None, json!({})),
        )
        .await
        .expect("a good Ingress is admitted");

    // Once ready, haptor sets the configuration's failure policy to its own (Fail).
    let wanted = flag_value(&args, "--webhook-failure-policy").to_string();
    wait_for("haptor to set the failure policy", &[&replica], || async {
        let state = webhook_state(&admin, &configuration).await;
        state
            .iter()
            .all(|(policy, _)| *policy == wanted)
            .then_some(())
    })
    .await;
    eprintln!(
        "from haptor's start: Secret created {secret_in:?}, caBundle patched {bundle_in:?}, \
         /readyz 200 {ready_in:?}, first refusal through the webhook {refused_in:?}, \
         failurePolicy {wanted} {:?}",
        started.elapsed()
    );
    let log = replica.log_text();
    assert!(
        log.contains("issued a CA and a serving certificate for the webhook"),
        "{log}"
    );
    // The chart's RBAC grants every request (a refusal is logged with its "forbidden").
    assert!(!log.to_lowercase().contains("forbidden"), "{log}");
    // The Data Plane API credentials the HAProxy pods wait for exist, with no public
    // password: haptor created them.
    let credentials = flag_value(&args, "--create-credentials-secret").to_string();
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), "haptor")
        .get(&credentials)
        .await
        .expect("haptor created the credentials Secret");
    let password = secret
        .data
        .as_ref()
        .and_then(|d| d.get("dataplane_password"))
        .map(|p| p.0.len())
        .unwrap_or_default();
    assert!(password >= 16, "a random password: {secret:?}");
    // The default TLS certificate the config presents to unknown SNI: created, self-signed.
    let name = flag_value(&args, "--default-certificate-secret").to_string();
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), "haptor")
        .get(&name)
        .await
        .expect("haptor created the default certificate's Secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let certificate = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|c| String::from_utf8_lossy(&c.0).into_owned())
        .unwrap_or_default();
    assert!(
        certificate.starts_with("-----BEGIN CERTIFICATE-----"),
        "{secret:?}"
    );
}

/// `--default-certificate-secret` (the chart's default): the TLS Secret is created once, and
/// one that exists (a certificate of the user's) is left as it is.
#[tokio::test]
async fn the_default_certificate_secret_is_created_once_and_then_left_alone() {
    use haptor::drivers::kube::default_certificate::create_once;
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("default-certificate").await;
    assert!(
        create_once(client.clone(), &ns, "haptor-default-tls")
            .await
            .expect("created")
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let first = secrets.get("haptor-default-tls").await.expect("the Secret");
    assert_eq!(first.type_.as_deref(), Some("kubernetes.io/tls"));
    assert!(
        !create_once(client.clone(), &ns, "haptor-default-tls")
            .await
            .expect("answered")
    );
    let again = secrets.get("haptor-default-tls").await.expect("the Secret");
    assert_eq!(again.data, first.data, "never changed");
}

/// `--create-credentials-secret` (the chart's default, without a password): the Secret is
/// created once with user admin and a random password, and one that exists is left as it
/// is.
#[tokio::test]
async fn the_data_plane_credentials_secret_is_created_once_with_a_random_password() {
    use haptor::drivers::kube::dataplane_secret::{Created, CredentialsSecret, create_once};
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("credentials").await;
    let secret = CredentialsSecret {
        namespace: ns.clone(),
        name: "haptor-dataplane".into(),
    };
    assert_eq!(
        create_once(client.clone(), &secret).await.expect("created"),
        Created::Created
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let read = |s: Secret| {
        let data = s.data.expect("data");
        (
            String::from_utf8(data["dataplane_username"].0.clone()).expect("text"),
            String::from_utf8(data["dataplane_password"].0.clone()).expect("text"),
        )
    };
    let (user, password) = read(secrets.get("haptor-dataplane").await.expect("the Secret"));
    assert_eq!(user, "admin");
    assert_eq!(password.len(), 32);
    assert_eq!(
        create_once(client.clone(), &secret)
            .await
            .expect("answered"),
        Created::Existed
    );
    let again = read(secrets.get("haptor-dataplane").await.expect("the Secret"));
    assert_eq!(again, ("admin".to_string(), password), "never changed");
    // Another namespace gets another password.
    let other = kit.temp_ns("credentials").await;
    create_once(
        client.clone(),
        &CredentialsSecret {
            namespace: other.clone(),
            name: "haptor-dataplane".into(),
        },
    )
    .await
    .expect("created");
    let theirs = read(
        Api::<Secret>::namespaced(client, &other)
            .get("haptor-dataplane")
            .await
            .expect("the Secret"),
    );
    assert_ne!(theirs.1, again.1);
}
