//! `haptor run` end to end: the real `haptor` binary against the real kube-apiserver and
//! etcd of the test kit (`tests/support/kube.rs`), with the real `haproxy -c`. Each test has
//! a namespace of its own, with the Ingress library as its `HAProxyTemplateConfig`; the
//! controllers watch the whole (shared) server, so tests look only at what their own
//! namespace makes. No HAProxy pod runs here (the real Data Plane API is not available to
//! CI): these tests show the config loader, the config's status, Events, the Lease, the
//! published `HAProxyCfg`, readiness and shutdown, and that no private key leaks.

use crate::haptor_run;
use crate::kube_kit;

use std::time::Instant;

use haptor::pure::config::{HAProxyCfg, HAProxyTemplateConfig, ValidationStatus};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use haptor_run::{
    Replica, create_ingress, fast_election, lease_holder, library_config, no_election, repo,
    wait_for, wait_for_event,
};
use kube_kit::{CuttableProxy, Kit, KitOptions};

/// A Service `web` with an EndpointSlice and an Ingress `web` of class haptor for `host`.
async fn web_app(kit: &Kit, client: &Client, ns: &str, host: &str) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
    kit.endpoint_slice(ns, "web", &["10.244.0.5"], 8080)
        .await
        .expect("the EndpointSlice is created");
    create_ingress(client, ns, "web", "haptor", host).await;
}

async fn create_config(client: &Client, ns: &str, leader_election: Value) -> HAProxyTemplateConfig {
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &library_config(ns, leader_election))
        .await
        .expect("the config is created")
}

async fn haproxycfg(client: &Client, ns: &str) -> Option<HAProxyCfg> {
    Api::<HAProxyCfg>::namespaced(client.clone(), ns)
        .get_opt("haptor-config")
        .await
        .ok()
        .flatten()
}

async fn config_object(client: &Client, ns: &str) -> HAProxyTemplateConfig {
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .get("haptor-config")
        .await
        .expect("the config")
}

#[tokio::test]
async fn a_single_replica_publishes_its_render_writes_a_valid_status_and_turns_ready() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-single").await;
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");
    let (status, body) = wait_for("/readyz to answer", &[&replica], || replica.readyz()).await;
    assert_eq!(status, 503, "without a config haptor is not ready: {body}");
    assert!(
        body.contains("a valid HAProxyTemplateConfig"),
        "the body names the missing config: {body}"
    );
    const NO_CREDENTIALS: &str = "the config has no credentialsSecretRef";
    assert!(
        !replica.log_text().contains(NO_CREDENTIALS),
        "nothing is said about a config before one is read:\n{}",
        replica.log_text()
    );

    web_app(kit, &client, &ns, "web.example").await;
    let created = create_config(&client, &ns, no_election()).await;
    let backend = format!("svc_{ns}_web_80");
    let published = wait_for(
        "the HAProxyCfg with the Ingress's backend",
        &[&replica],
        || async {
            haproxycfg(&client, &ns)
                .await
                .filter(|c| c.spec.content.contains(&backend))
        },
    )
    .await;
    assert!(published.spec.checksum.starts_with("sha256:"));
    let owner = &published
        .metadata
        .owner_references
        .as_ref()
        .expect("an owner")[0];
    assert_eq!(owner.kind, "HAProxyTemplateConfig");
    assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref());

    let status = wait_for("the config's status", &[&replica], || async {
        config_object(&client, &ns)
            .await
            .status
            .filter(|s| s.validation_status == ValidationStatus::Valid)
    })
    .await;
    assert_eq!(status.observed_generation, created.metadata.generation);
    assert_eq!(status.conditions[0].type_, "Valid");
    assert_eq!(status.conditions[0].status, "True");

    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(code, _)| *code == 200)
    })
    .await;
    let (code, _) = replica
        .get(replica.health, "/debug/vars/rendered")
        .await
        .expect("the probe port answers");
    assert_eq!(code, 404, "the probe port serves no debug endpoint");
    // The library names no credentials Secret: said once the config is read, and once.
    assert_eq!(
        replica.log_text().matches(NO_CREDENTIALS).count(),
        1,
        "{}",
        replica.log_text()
    );
}

#[tokio::test]
async fn an_invalid_config_change_is_reported_in_status_and_an_event_and_the_last_valid_one_keeps_serving()
 {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-invalid").await;
    web_app(kit, &client, &ns, "invalid.example").await;
    create_config(&client, &ns, no_election()).await;
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");
    let backend = format!("svc_{ns}_web_80");
    let before = wait_for("the first HAProxyCfg", &[&replica], || async {
        haproxycfg(&client, &ns)
            .await
            .filter(|c| c.spec.content.contains(&backend))
    })
    .await;

    // A template that does not compile: an unclosed block on line 2 of haproxy.cfg.
    let api = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns);
    let mut config = config_object(&client, &ns).await;
    config.spec.haproxy_config.template = "global\n  {{#if x}}\n".into();
    let changed = api
        .replace("haptor-config", &PostParams::default(), &config)
        .await
        .expect("the broken config is stored (the webhook is another issue)");
    let status = wait_for("status Invalid", &[&replica], || async {
        config_object(&client, &ns).await.status.filter(|s| {
            s.validation_status == ValidationStatus::Invalid
                && s.observed_generation == changed.metadata.generation
        })
    })
    .await;
    let problem = &status.validation_errors[0];
    assert_eq!(problem.template, "haproxy.cfg", "{status:?}");
    assert!(problem.line.is_some(), "the line is given: {status:?}");
    // What the ConfigInvalid alert reads.
    assert_eq!(replica.metric("haptor_config_invalid").await, Some(1.0));

    let event = wait_for_event(&client, &ns, "ConfigInvalid", &[&replica]).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("haptor-config")
    );
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains("haproxy.cfg")),
        "{event:?}"
    );

    // A resource change meanwhile is still rendered with the last valid templates.
    create_ingress(&client, &ns, "second", "haptor", "second.example").await;
    wait_for(
        "the second Ingress rendered with the last valid config",
        &[&replica],
        || async {
            haproxycfg(&client, &ns).await.filter(|c| {
                c.spec.checksum != before.spec.checksum && c.spec.content.contains(&backend)
            })
        },
    )
    .await;
    assert!(
        replica.log_text().contains("config invalid"),
        "the log says so"
    );

    // Fixed: valid again, and the gauge falls back.
    let mut fixed = config_object(&client, &ns).await;
    fixed.spec = library_config(&ns, no_election()).spec;
    api.replace("haptor-config", &PostParams::default(), &fixed)
        .await
        .expect("the fixed config is stored");
    wait_for("haptor_config_invalid 0", &[&replica], || async {
        replica
            .metric("haptor_config_invalid")
            .await
            .filter(|v| *v == 0.0)
    })
    .await;
}

#[tokio::test]
async fn of_two_replicas_one_leads_and_the_other_takes_over_when_the_leader_is_killed_or_terminated()
 {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-pair").await;
    web_app(kit, &client, &ns, "pair.example").await;
    create_config(&client, &ns, fast_election()).await;
    let mut a = Replica::start(kit.admin_kubeconfig(), &ns, "replica-a");
    let mut b = Replica::start(kit.admin_kubeconfig(), &ns, "replica-b");
    let holder = wait_for("a Lease holder", &[&a, &b], || lease_holder(&client, &ns)).await;
    assert!(holder == "replica-a" || holder == "replica-b", "{holder}");
    // Followers are ready too: they must not block rollouts.
    for replica in [&a, &b] {
        wait_for("/readyz 200 on both", &[&a, &b], || async {
            replica.readyz().await.filter(|(code, _)| *code == 200)
        })
        .await;
    }
    let backend = format!("svc_{ns}_web_80");
    wait_for("the HAProxyCfg", &[&a, &b], || async {
        haproxycfg(&client, &ns)
            .await
            .filter(|c| c.spec.content.contains(&backend))
    })
    .await;

    // SIGKILL the leader: the other takes over once the Lease expires, and publishes a
    // change made meanwhile.
    let (leader, follower) = if holder == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let killed_at = Instant::now();
    assert_eq!(leader.stop_with("KILL"), None);
    create_ingress(&client, &ns, "meanwhile", "haptor", "meanwhile.example").await;
    let follower_name = follower.identity.clone();
    wait_for("the follower to hold the Lease", &[follower], || async {
        lease_holder(&client, &ns)
            .await
            .filter(|h| *h == follower_name)
    })
    .await;
    let takeover_after_kill = killed_at.elapsed();
    wait_for(
        "the new leader to publish the change made meanwhile",
        &[follower],
        || async {
            let cfg = haproxycfg(&client, &ns).await?;
            let rendered = follower
                .get(follower.debug, "/debug/vars/rendered")
                .await?
                .1;
            (rendered.contains("meanwhile.example")).then_some(cfg)
        },
    )
    .await;

    // SIGTERM the new leader with a fresh follower: it exits 0, releases the Lease, and the
    // follower leads at its next retry.
    let mut c = Replica::start(kit.admin_kubeconfig(), &ns, "replica-c");
    wait_for("/readyz 200 on the third", &[&c], || async {
        c.readyz().await.filter(|(code, _)| *code == 200)
    })
    .await;
    let terminated_at = Instant::now();
    assert_eq!(
        follower.stop_with("TERM"),
        Some(0),
        "SIGTERM ends haptor run with 0"
    );
    wait_for("the third replica to hold the Lease", &[&c], || async {
        lease_holder(&client, &ns)
            .await
            .filter(|h| h == "replica-c")
    })
    .await;
    let takeover_after_term = terminated_at.elapsed();
    eprintln!(
        "figures: takeover after SIGKILL {takeover_after_kill:?} (leaseDuration 4s), after SIGTERM {takeover_after_term:?} (retryPeriod 500ms)"
    );
    let _ = c.stop_with("TERM");
}

#[tokio::test]
async fn a_tls_secrets_private_key_never_appears_in_the_haproxycfg_the_debug_vars_or_the_log() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-secret").await;
    let text = std::fs::read_to_string(repo("deploy/library/testdata/tls-secret.yaml"))
        .expect("the test Secret");
    let document = text
        .split("\n---")
        .find(|d| d.contains("kind: Secret"))
        .expect("a Secret document");
    let mut secret: Secret = serde_yaml_ng::from_str(document).expect("a Secret");
    secret.metadata.namespace = None;
    secret.type_ = Some("kubernetes.io/tls".into());
    let key_pem = String::from_utf8(secret.data.as_ref().expect("data")["tls.key"].0.clone())
        .expect("PEM text");
    let key_body: String = key_pem
        .lines()
        .find(|l| !l.starts_with("-----") && l.len() > 20)
        .expect("a base64 line of the key")
        .to_string();
    let secret_name = secret.metadata.name.clone().expect("a name");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret is created");
    web_app(kit, &client, &ns, "secure.example").await;
    let tls =
        json!({ "spec": { "tls": [{ "hosts": ["secure.example"], "secretName": secret_name }] } });
    Api::<Ingress>::namespaced(client.clone(), &ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(&tls))
        .await
        .expect("the Ingress gets TLS");
    create_config(&client, &ns, no_election()).await;
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");
    let cert_file = format!("{ns}_{secret_name}.pem");
    let published = wait_for(
        "the HAProxyCfg with the certificate",
        &[&replica],
        || async {
            haproxycfg(&client, &ns).await.filter(|c| {
                c.spec
                    .auxiliary_files
                    .ssl_certificates
                    .iter()
                    .any(|f| f.name.contains(&cert_file))
            })
        },
    )
    .await;
    let published = serde_json::to_string(&published).expect("JSON");
    assert!(
        !published.contains(&key_body),
        "the key is in the HAProxyCfg"
    );
    for var in haptor::actors::http::DEBUG_VARS {
        let (_, body) = replica
            .get(replica.debug, &format!("/debug/vars/{var}"))
            .await
            .expect("the debug server answers");
        assert!(!body.contains(&key_body), "the key is in /debug/vars/{var}");
    }
    let (_, rendered) = replica
        .get(replica.debug, "/debug/vars/rendered")
        .await
        .expect("rendered");
    assert!(
        rendered.contains("<redacted"),
        "the rendered certificate is shown redacted"
    );
    assert!(
        !replica.log_text().contains(&key_body),
        "the key is in the log"
    );
}

#[tokio::test]
async fn after_a_broken_watch_and_etcd_compaction_the_stores_converge_and_the_next_change_is_published()
 {
    // A server of its own without the watch cache, so a resumed watch reaches etcd and
    // gets 410 once etcd is compacted past it; haptor reaches it through a proxy the test
    // can cut.
    let kit = Kit::start_with(KitOptions {
        watch_cache: false,
        ..KitOptions::default()
    });
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-compaction").await;
    web_app(&kit, &client, &ns, "kept.example").await;
    create_ingress(&client, &ns, "doomed", "haptor", "doomed.example").await;
    create_config(&client, &ns, no_election()).await;
    let proxy = CuttableProxy::start(kit.port).await;
    let kubeconfig = kit.dir().join("via-proxy.kubeconfig");
    let admin = std::fs::read_to_string(kit.admin_kubeconfig()).expect("the admin kubeconfig");
    std::fs::write(
        &kubeconfig,
        admin.replace(&format!("https://127.0.0.1:{}", kit.port), &proxy.url),
    )
    .expect("a kubeconfig through the proxy");
    let replica = Replica::start(&kubeconfig, &ns, "solo");
    let rendered = |replica: &Replica| {
        let port = replica.debug;
        async move {
            reqwest::Client::new()
                .get(format!("http://127.0.0.1:{port}/debug/vars/rendered"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()
        }
    };
    wait_for("both Ingresses rendered", &[&replica], || async {
        rendered(&replica)
            .await
            .filter(|r| r.contains("doomed.example") && r.contains("kept.example"))
    })
    .await;

    // The watches break; meanwhile one Ingress goes, one comes, and etcd is compacted.
    proxy.cut().await;
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    ingresses
        .delete("doomed", &Default::default())
        .await
        .expect("deleted");
    create_ingress(&client, &ns, "arrived", "haptor", "arrived.example").await;
    kit.compact_etcd().await;
    proxy.restore();
    wait_for(
        "the stores to converge on the server's state",
        &[&replica],
        || async {
            rendered(&replica).await.filter(|r| {
                !r.contains("doomed.example")
                    && r.contains("arrived.example")
                    && r.contains("kept.example")
            })
        },
    )
    .await;
    assert!(
        replica
            .log_text()
            .contains("the watch of ingresses expired (410 Gone)"),
        "the watch resumed into etcd's compaction and relisted:\n{}",
        replica.log_text()
    );
    // And the next change after the relist is published too.
    create_ingress(&client, &ns, "later", "haptor", "later.example").await;
    wait_for("the next change", &[&replica], || async {
        rendered(&replica)
            .await
            .filter(|r| r.contains("later.example"))
    })
    .await;
    // The published HAProxyCfg follows the last render (its writes went through the
    // proxy too).
    wait_for("the HAProxyCfg to follow", &[&replica], || async {
        let cfg = haproxycfg(&client, &ns).await?;
        let (_, state) = replica.get(replica.debug, "/debug/vars/state").await?;
        let state: Value = serde_json::from_str(&state).ok()?;
        let last = state["last_rendered_checksum"].as_str()?;
        (cfg.spec.checksum.trim_start_matches("sha256:") == last.trim_start_matches("sha256:"))
            .then_some(())
    })
    .await;
}

/// The leadership a replica's `/debug/vars/state` reports: (is_leader, epoch).
async fn leadership(replica: &Replica) -> Option<(bool, u64)> {
    let (_, state) = replica.get(replica.debug, "/debug/vars/state").await?;
    let state: Value = serde_json::from_str(&state).ok()?;
    Some((state["is_leader"].as_bool()?, state["epoch"].as_u64()?))
}

#[tokio::test]
async fn a_lease_deleted_with_its_leader_gone_starts_a_term_whose_epoch_is_above_every_earlier_one()
{
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-lease-gone").await;
    create_config(&client, &ns, fast_election()).await;
    let mut a = Replica::start(kit.admin_kubeconfig(), &ns, "replica-a");
    let mut b = Replica::start(kit.admin_kubeconfig(), &ns, "replica-b");
    let (leader_name, first) = wait_for("a leader", &[&a, &b], || async {
        for replica in [&a, &b] {
            if let Some((true, epoch)) = leadership(replica).await {
                return Some((replica.identity.clone(), epoch));
            }
        }
        None
    })
    .await;
    let (leader, follower) = if leader_name == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    // The follower has read the leader's Lease (and so its epoch) before the leader goes.
    wait_for(
        "the follower to see the leader's Lease",
        &[follower],
        || async {
            follower
                .log_text()
                .contains("the leader Lease is held by another replica")
                .then_some(())
        },
    )
    .await;
    // The leader dies and its Lease is deleted: the follower creates a new Lease, whose
    // leaseTransitions start at 0 again and which carries no epoch annotation.
    assert_eq!(leader.stop_with("KILL"), None);
    let leases = Api::<Lease>::namespaced(client.clone(), &ns);
    leases
        .delete("haptor-leader", &Default::default())
        .await
        .expect("the Lease is deleted");
    let follower_name = follower.identity.clone();
    let next = wait_for(
        "the follower to lead on a new Lease",
        &[follower],
        || async {
            let lease = leases.get_opt("haptor-leader").await.ok()??;
            (lease.spec?.holder_identity? == follower_name).then_some(())?;
            match leadership(follower).await? {
                (true, epoch) => Some(epoch),
                _ => None,
            }
        },
    )
    .await;
    assert!(next > first, "the epoch went from {first} to {next}");
}

#[tokio::test]
async fn a_config_watching_a_kind_the_api_server_does_not_serve_is_invalid_naming_it() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-no-kind").await;
    let mut config = library_config(&ns, no_election());
    config.spec.watched_resources.insert(
        "widgets".into(),
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1",
            "resources": "widgets",
            "indexBy": ["metadata.namespace", "metadata.name"],
        }))
        .expect("a watched resource"),
    );
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");
    let status = wait_for("status Invalid", &[&replica], || async {
        config_object(&client, &ns)
            .await
            .status
            .filter(|s| s.validation_status == ValidationStatus::Invalid)
    })
    .await;
    let problem = &status.validation_errors[0];
    assert_eq!(
        problem.template, "spec.watchedResources.widgets",
        "{status:?}"
    );
    assert!(problem.message.contains("does not exist"), "{status:?}");
    // An invalid first config is reported as an Event too.
    wait_for_event(&client, &ns, "ConfigInvalid", &[&replica]).await;
    // Nothing was rendered from it.
    assert!(haproxycfg(&client, &ns).await.is_none());
}

/// The restart count `/debug/actors` shows for `actor`, while it runs.
async fn running_restarts(replica: &Replica, actor: &str) -> Option<u32> {
    let (_, body) = replica.get(replica.debug, "/debug/actors").await?;
    let tree: Value = serde_json::from_str(&body).ok()?;
    fn find<'a>(node: &'a Value, name: &str) -> Option<&'a Value> {
        if node["name"] == name {
            return Some(node);
        }
        node["children"]
            .as_array()?
            .iter()
            .find_map(|child| find(child, name))
    }
    let node = find(&tree, actor)?;
    (node["status"] == "running")
        .then(|| node["restarts"].as_u64())?
        .map(|r| r as u32)
}

/// Makes `edge`'s task panic through the debug endpoint and waits until `/debug/actors`
/// shows it running again with one more restart, and `/metrics` counts it.
async fn panic_and_see_restarted(replica: &Replica, edge: &str) {
    let before = wait_for(&format!("{edge} in /debug/actors"), &[replica], || {
        running_restarts(replica, edge)
    })
    .await;
    let response = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/debug/actors/{edge}/panic",
            replica.debug
        ))
        .send()
        .await
        .expect("the debug port answers");
    assert_eq!(
        response.status().as_u16(),
        200,
        "{edge}: {:?}",
        response.text().await
    );
    wait_for(&format!("{edge} restarted"), &[replica], || async {
        running_restarts(replica, edge)
            .await
            .filter(|restarts| *restarts > before)
    })
    .await;
    let series = format!("haptor_actor_restarts_total{{actor=\"{edge}\"}}");
    wait_for(&format!("{series} counted"), &[replica], || async {
        replica.metric(&series).await.filter(|n| *n >= 1.0)
    })
    .await;
}

/// The Lease's renew time, once it has one.
async fn lease_renewed_at(client: &Client, ns: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt("haptor-leader")
        .await
        .ok()??;
    Some(format!("{:?}", lease.spec?.renew_time?))
}

#[tokio::test]
async fn every_kubernetes_edge_that_panics_is_restarted_counted_and_goes_on_with_its_job() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-edges").await;
    let replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "edgy",
        &[
            "--debug-fault-injection",
            "--publish-address",
            "203.0.113.9",
        ],
    );
    web_app(kit, &client, &ns, "web.example").await;
    create_config(&client, &ns, fast_election()).await;
    kit.ready_pod(
        &ns,
        "haproxy-a",
        &[("app.kubernetes.io/name", "haproxy")],
        "127.0.0.1",
    )
    .await;
    wait_for("the Lease held", &[&replica], || async {
        lease_holder(&client, &ns).await.filter(|h| h == "edgy")
    })
    .await;
    let backend = format!("svc_{ns}_web_80");
    wait_for("the HAProxyCfg", &[&replica], || async {
        haproxycfg(&client, &ns)
            .await
            .filter(|c| c.spec.content.contains(&backend))
    })
    .await;

    // The edges under the root and in the leader-only subtree are all in the tree.
    let (_, text) = replica
        .get(replica.debug, "/debug/actors?format=text")
        .await
        .expect("the debug port answers");
    for edge in [
        "kube-config-watch",
        "kube-credentials-watch",
        "kube-lease-election",
        "kube-pod-discovery",
        "leader-only-edges",
        "kube-config-status",
        "kube-events",
        "kube-ingress-status",
        "kube-haproxycfg-writer",
    ] {
        assert!(text.contains(edge), "{edge} is in the tree:\n{text}");
    }

    // The Lease: renewed after its election restarted (a new term of the same holder).
    panic_and_see_restarted(&replica, "kube-lease-election").await;
    let renewed = lease_renewed_at(&client, &ns).await;
    wait_for("the Lease renewed again", &[&replica], || async {
        let now = lease_renewed_at(&client, &ns).await;
        (now != renewed && lease_holder(&client, &ns).await.as_deref() == Some("edgy"))
            .then_some(())
    })
    .await;

    // Pod discovery: a pod created after its restart is an instance.
    panic_and_see_restarted(&replica, "kube-pod-discovery").await;
    kit.ready_pod(
        &ns,
        "haproxy-b",
        &[("app.kubernetes.io/name", "haproxy")],
        "127.0.0.1",
    )
    .await;
    wait_for("haproxy-b discovered", &[&replica], || async {
        let (_, body) = replica.get(replica.debug, "/debug/vars/state").await?;
        body.contains("haproxy-b").then_some(())
    })
    .await;

    // The config watch: a change after its restart is judged and its status written.
    panic_and_see_restarted(&replica, "kube-config-watch").await;
    panic_and_see_restarted(&replica, "kube-credentials-watch").await;
    panic_and_see_restarted(&replica, "kube-config-status").await;
    let mut changed = config_object(&client, &ns).await;
    changed.spec.logging.level = Some("debug".into());
    changed.metadata.managed_fields = None;
    let changed = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .replace("haptor-config", &PostParams::default(), &changed)
        .await
        .expect("the config is changed");
    wait_for("the status of the changed config", &[&replica], || async {
        config_object(&client, &ns).await.status.filter(|s| {
            s.observed_generation == changed.metadata.generation
                && s.validation_status == ValidationStatus::Valid
        })
    })
    .await;

    // The leader-only writers: an Ingress created after their restarts is published in
    // the HAProxyCfg and gets its status.
    for edge in [
        "kube-haproxycfg-writer",
        "kube-ingress-status",
        "kube-events",
    ] {
        panic_and_see_restarted(&replica, edge).await;
    }
    let before = haproxycfg(&client, &ns)
        .await
        .expect("the HAProxyCfg")
        .spec
        .checksum;
    create_ingress(&client, &ns, "late", "haptor", "late.example").await;
    wait_for("the late Ingress's status", &[&replica], || async {
        let ingress = Api::<Ingress>::namespaced(client.clone(), &ns)
            .get("late")
            .await
            .ok()?;
        let address = ingress
            .status?
            .load_balancer?
            .ingress?
            .first()?
            .ip
            .clone()?;
        (address == "203.0.113.9").then_some(())
    })
    .await;
    wait_for(
        "the render with the late Ingress in the HAProxyCfg",
        &[&replica],
        || async {
            haproxycfg(&client, &ns)
                .await
                .filter(|c| c.spec.checksum != before)
        },
    )
    .await;
    // Events: a broken config's after the recorder restarted.
    let mut broken = config_object(&client, &ns).await;
    broken.spec.haproxy_config.template = "{{#if}".into();
    broken.metadata.managed_fields = None;
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .replace("haptor-config", &PostParams::default(), &broken)
        .await
        .expect("the config is broken");
    wait_for_event(&client, &ns, "ConfigInvalid", &[&replica]).await;
}

#[tokio::test]
async fn an_edge_that_keeps_panicking_stops_haptor_with_an_error_so_its_pod_is_restarted() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-storm").await;
    let mut replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "stormy",
        &["--debug-fault-injection"],
    );
    create_config(&client, &ns, no_election()).await;
    // The root allows 5 restarts of one child within a minute; the sixth failure escalates.
    let mut panics = 0;
    let code = loop {
        if let Some(code) = replica.exited() {
            break code;
        }
        assert!(panics <= 10, "haptor still runs after {panics} panics");
        if running_restarts(&replica, "kube-credentials-watch").await == Some(panics) {
            let _ = reqwest::Client::new()
                .post(format!(
                    "http://127.0.0.1:{}/debug/actors/kube-credentials-watch/panic",
                    replica.debug
                ))
                .send()
                .await;
            panics += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(code, Some(2), "{}", replica.log_text());
    assert_eq!(panics, 6, "{}", replica.log_text());
    let log = replica.log_text();
    assert!(
        log.contains("kube-credentials-watch failed more than 5 times"),
        "the log names the storming edge:\n{log}"
    );
    assert!(
        log.contains("a restart storm"),
        "the log says why haptor exits:\n{log}"
    );
}

/// SIGTERM first takes the replica out of the Services (`/readyz` 503, naming why) while it
/// goes on serving and leading for `--shutdown-delay`; then it stops, hands the Lease back
/// and exits 0. Without the delay a rolling update sent admissions to a replica that no
/// longer listened (`tests/node/upgrade.rs` met it: "connection refused").
#[tokio::test]
async fn after_sigterm_readyz_answers_503_while_everything_serves_on_for_the_shutdown_delay() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-drain").await;
    web_app(kit, &client, &ns, "drain.example").await;
    create_config(&client, &ns, fast_election()).await;
    let mut replica = Replica::start_with_args(
        kit.admin_kubeconfig(),
        &ns,
        "draining",
        &["--shutdown-delay", "4s"],
    );
    wait_for("/readyz 200", &[&replica], || async {
        replica.readyz().await.filter(|(code, _)| *code == 200)
    })
    .await;
    wait_for("the Lease held", &[&replica], || async {
        lease_holder(&client, &ns).await.filter(|h| h == "draining")
    })
    .await;

    replica.signal("TERM");
    let (_, body) = wait_for("/readyz 503 after SIGTERM", &[&replica], || async {
        replica.readyz().await.filter(|(code, _)| *code == 503)
    })
    .await;
    assert!(body.contains("shutting down"), "{body}");
    // Still serving and still leading meanwhile.
    assert!(
        replica.metric("haptor_leader_is_leader").await == Some(1.0),
        "the draining replica still leads and serves its metrics"
    );
    assert_eq!(
        lease_holder(&client, &ns).await.as_deref(),
        Some("draining")
    );
    assert_eq!(replica.exited(), None, "it has not stopped yet");

    let started = Instant::now();
    let code = loop {
        if let Some(code) = replica.exited() {
            break code;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "haptor run did not exit after its shutdown delay:\n{}",
            replica.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(code, Some(0), "{}", replica.log_text());
    assert_eq!(
        lease_holder(&client, &ns).await,
        None,
        "the Lease is handed back once it stops"
    );
}
