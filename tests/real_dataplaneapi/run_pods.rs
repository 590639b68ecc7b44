//! `haptor run` deploying to HAProxy pods: the real binary, the real kube-apiserver, and
//! real haproxy + Data Plane API "pods" in network namespaces (`support/haproxy_pod.rs`)
//! whose Pod objects the test writes Ready with their addresses. Real HTTP traffic crosses
//! the pod network to backends in a pod of their own. Needs `TEST_ASSET_DATAPLANEAPI`
//! (feature `real-dataplaneapi`, as `dataplane_api.rs`): no Go module provides it here.

use crate::dataplane_peer;
use crate::haproxy_pod;
use crate::haptor_run;
use crate::kube_kit;
use crate::pod_network;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use haptor::pure::config::HAProxyCfg;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use haproxy_pod::HaproxyPod;
use haptor_run::{Replica, fast_election, library_config, no_election, wait_for, wait_for_event};
use kube_kit::Kit;
use pod_network::PodNetwork;

const PASSWORD: &str = "pods-shared-password";
const SELECTOR: (&str, &str) = ("app.kubernetes.io/name", "haproxy");

/// Status and body of `GET http://ip:8080path` with `Host: host` (None: no answer).
async fn get(ip: Ipv4Addr, host: &str, path: &str) -> Option<(u16, String)> {
    let response = reqwest::Client::new()
        .get(format!("http://{ip}:8080{path}"))
        .header("host", host)
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// The library for pods: binds on the pod's address, the runtime socket the pods' Data
/// Plane API uses, the credentials Secret and the pod selector.
async fn create_pod_config(client: &Client, ns: &str) {
    create_pod_config_with(client, ns, no_election()).await;
}

async fn create_pod_config_with(client: &Client, ns: &str, election: serde_json::Value) {
    let mut config = library_config(ns, election);
    let extra = config.spec.extra_context.get_or_insert_with(|| json!({}));
    extra["http_bind"] = json!("\"${POD_IP}:8080\"");
    extra["https_bind"] = json!("\"${POD_IP}:8443\"");
    extra["status_bind"] = json!("\"${POD_IP}:8404\"");
    extra["runtime_socket"] = json!("/etc/haproxy/runtime.sock");
    config.spec.credentials_secret_ref = Some(haptor::pure::config::SecretReference {
        name: "haproxy-credentials".into(),
        namespace: None,
    });
    config.spec.pod_selector = Some(haptor::pure::config::PodSelector {
        match_labels: [(SELECTOR.0.to_string(), SELECTOR.1.to_string())].into(),
    });
    // Endpoint changes go at once; only reloads are paced.
    config.spec.dataplane.min_deployment_interval = "500ms".into();
    Api::<haptor::pure::config::HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
}

async fn credentials(client: &Client, ns: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "haproxy-credentials" },
        "stringData": { "dataplane_username": "admin", "dataplane_password": PASSWORD },
    }))
    .expect("a Secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the credentials Secret is created");
}

/// Service `name` (one unnamed port 80) and Ingress `name` routing `host` + `path` to it.
async fn app(
    kit: &Kit,
    client: &Client,
    ns: &str,
    name: &str,
    host: &str,
    path: &str,
    backend: (Ipv4Addr, u16),
) {
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "ports": [{ "port": 80, "targetPort": backend.1 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
    kit.endpoint_slice(ns, name, &[&backend.0.to_string()], i32::from(backend.1))
        .await
        .expect("the EndpointSlice is created");
    let ingress: Ingress = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "ingressClassName": "haptor",
            "rules": [{ "host": host, "http": { "paths": [{
                "path": path, "pathType": "Prefix",
                "backend": { "service": { "name": name, "port": { "number": 80 } } },
            }]}}],
        },
    }))
    .expect("an Ingress");
    Api::<Ingress>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &ingress)
        .await
        .expect("the Ingress is created");
}

async fn serves(ip: Ipv4Addr, host: &str, path: &str, body: &str) -> bool {
    get(ip, host, path).await == Some((200, body.to_string()))
}

/// The published HAProxyCfg once `count` instances report its checksum.
async fn at_published_checksum(client: &Client, ns: &str, count: usize) -> Option<HAProxyCfg> {
    let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), ns)
        .get_opt("haptor-config")
        .await
        .ok()??;
    let status = cfg.status.as_ref()?;
    let at_checksum = status
        .instances
        .iter()
        .filter(|i| i.checksum.as_deref() == Some(cfg.spec.checksum.as_str()))
        .count();
    (at_checksum == count).then_some(cfg)
}

/// A test's own world: a kit of its own (the controllers watch every namespace, and other
/// tests' Ingresses would reload these pods), a namespace with the credentials Secret,
/// `pods` HAProxy pods named `<name>-haproxy-<i>` Ready in it, and Service + Ingress `web`
/// routing `host` to a backend answering `backend-a` in a pod of its own.
struct Scene {
    // Dropped in this order: the processes, then the kit.
    pods: Vec<HaproxyPod>,
    _backend: pod_network::PodProcess,
    backends: pod_network::NetPod,
    client: Client,
    ns: String,
    kit: Kit,
}

impl Scene {
    async fn start(name: &str, pods: usize, host: &str) -> Scene {
        let network = PodNetwork::shared();
        let kit = Kit::start();
        let client = kit.admin().await;
        let ns = kit.temp_ns(&format!("run-{name}")).await;
        let backends = network.pod(&format!("{name}-backends"));
        let backend = backends.http_backend(8081, "backend-a");
        let pods: Vec<HaproxyPod> = (0..pods)
            .map(|i| {
                HaproxyPod::start_with_password(network, &format!("{name}-haproxy-{i}"), PASSWORD)
            })
            .collect();
        for pod in &pods {
            kit.ready_pod(&ns, pod.name(), &[SELECTOR], &pod.ip().to_string())
                .await;
        }
        credentials(&client, &ns).await;
        app(&kit, &client, &ns, "web", host, "/", (backends.ip(), 8081)).await;
        Scene {
            pods,
            _backend: backend,
            backends,
            client,
            ns,
            kit,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn haptor_run_routes_through_every_ready_haproxy_pod_and_moves_endpoints_without_a_reload() {
    let network = PodNetwork::shared();
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-pods").await;
    let backends = network.pod("backends");
    let _a = backends.http_backend(8081, "backend-a");
    let _b = backends.http_backend(8082, "backend-b");
    let _api = backends.http_backend(8083, "api-v1");
    let mut pods = vec![
        HaproxyPod::start_with_password(network, "run-haproxy-0", PASSWORD),
        HaproxyPod::start_with_password(network, "run-haproxy-1", PASSWORD),
    ];
    for pod in &pods {
        kit.ready_pod(&ns, pod.name(), &[SELECTOR], &pod.ip().to_string())
            .await;
    }
    credentials(&client, &ns).await;
    app(
        kit,
        &client,
        &ns,
        "web",
        "web.example",
        "/",
        (backends.ip(), 8081),
    )
    .await;
    app(
        kit,
        &client,
        &ns,
        "api",
        "web.example",
        "/v1",
        (backends.ip(), 8083),
    )
    .await;
    create_pod_config(&client, &ns).await;
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");

    for pod in &pods {
        let ip = pod.ip();
        wait_for("a pod to route by host", &[&replica], || async {
            serves(ip, "web.example", "/", "backend-a")
                .await
                .then_some(())
        })
        .await;
        assert!(
            serves(ip, "web.example", "/v1/users", "api-v1").await,
            "path routing"
        );
        assert_eq!(get(ip, "nobody.example", "/").await.map(|r| r.0), Some(404));
    }
    let cfg = wait_for("both pods at the published checksum", &[&replica], || {
        at_published_checksum(&client, &ns, 2)
    })
    .await;
    assert_eq!(cfg.status.as_ref().map(|s| s.instances.len()), Some(2));

    // Twenty EndpointSlice changes, alternating the web backend's port: each reaches both
    // pods without a reload.
    let reloads: Vec<Option<u64>> = pods.iter().map(HaproxyPod::reloads).collect();
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), &ns);
    let mut times = Vec::new();
    for change in 0..20 {
        let (port, body) = if change % 2 == 0 {
            (8082, "backend-b")
        } else {
            (8081, "backend-a")
        };
        let patch = json!({ "ports": [{ "port": port, "protocol": "TCP" }] });
        let written = Instant::now();
        slices
            .patch("web-kit", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("the EndpointSlice is changed");
        for pod in &pods {
            let ip = pod.ip();
            wait_for("the new endpoint to serve", &[&replica], || async {
                serves(ip, "web.example", "/", body).await.then_some(())
            })
            .await;
        }
        times.push(written.elapsed());
    }
    assert_eq!(
        pods.iter().map(HaproxyPod::reloads).collect::<Vec<_>>(),
        reloads,
        "an endpoint change reloads no pod"
    );
    times.sort();
    eprintln!(
        "figures: EndpointSlice write to traffic on both pods over 20 changes: median {:?}, min {:?}, max {:?}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );

    // A third pod turning Ready gets the current config with no resource change.
    let third = HaproxyPod::start_with_password(network, "run-haproxy-2", PASSWORD);
    kit.ready_pod(&ns, third.name(), &[SELECTOR], &third.ip().to_string())
        .await;
    let ip = third.ip();
    let joined = Instant::now();
    wait_for("the third pod to serve", &[&replica], || async {
        serves(ip, "web.example", "/v1", "api-v1")
            .await
            .then_some(())
    })
    .await;
    eprintln!(
        "figures: a new Ready pod served the current config {:?} after its Pod turned Ready",
        joined.elapsed()
    );
    pods.push(third);

    // A pod whose Data Plane API is down backs off; the others still follow a change.
    pods[0].stop_dataplaneapi();
    // After the twenty changes the web backend is on 8081 again.
    let patch = json!({ "ports": [{ "port": 8082, "protocol": "TCP" }] });
    slices
        .patch("web-kit", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the EndpointSlice is changed");
    for pod in &pods[1..] {
        let ip = pod.ip();
        wait_for(
            "the healthy pods to follow while one is down",
            &[&replica],
            || async {
                serves(ip, "web.example", "/", "backend-b")
                    .await
                    .then_some(())
            },
        )
        .await;
    }
    let down = pods[0].name().to_string();
    let (code, body) = wait_for(
        "the leader's /readyz to name the pod behind",
        &[&replica],
        || async {
            replica
                .readyz()
                .await
                .filter(|(_, body)| body.contains(&format!("\"{down}\"")))
        },
    )
    .await;
    assert_eq!(
        code, 200,
        "a pod behind does not make the controller unready: {body}"
    );
    // What the pods-on-an-old-checksum alert reads.
    wait_for("haptor_instances_behind 1", &[&replica], || async {
        replica
            .metric("haptor_instances_behind")
            .await
            .filter(|v| *v == 1.0)
    })
    .await;
    wait_for(
        "the down pod's error in HAProxyCfg status",
        &[&replica],
        || async {
            let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), &ns)
                .get_opt("haptor-config")
                .await
                .ok()??;
            cfg.status?
                .instances
                .into_iter()
                .find(|i| i.name == down && i.consecutive_errors > 0 && i.last_error.is_some())
        },
    )
    .await;
}

/// The leadership a replica's `/debug/vars/state` reports: (is_leader, epoch).
async fn leadership(replica: &Replica) -> Option<(bool, u64)> {
    let (_, state) = replica.get(replica.debug, "/debug/vars/state").await?;
    let state: serde_json::Value = serde_json::from_str(&state).ok()?;
    Some((state["is_leader"].as_bool()?, state["epoch"].as_u64()?))
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_takeover_the_new_leader_deploys_and_a_write_with_the_old_leaders_epoch_is_refused()
{
    use haptor::drivers::dataplane::{DataplaneSettings, DataplaneTarget};
    use haptor::pure::deploy::{DeployError, DeployRequest, DeployTarget};

    let scene = Scene::start("fence", 1, "fence.example").await;
    let (kit, client, ns, pod) = (&scene.kit, &scene.client, &scene.ns, &scene.pods[0]);
    let backends = &scene.backends;
    create_pod_config_with(client, ns, fast_election()).await;
    let mut a = Replica::start(kit.admin_kubeconfig(), ns, "fence-a");
    let mut b = Replica::start(kit.admin_kubeconfig(), ns, "fence-b");
    let ip = pod.ip();
    wait_for("the pod to serve", &[&a, &b], || async {
        serves(ip, "fence.example", "/", "backend-a")
            .await
            .then_some(())
    })
    .await;
    let (old_leader, old_epoch) = wait_for("a leader", &[&a, &b], || async {
        for replica in [&a, &b] {
            if let Some((true, epoch)) = leadership(replica).await {
                return Some((replica.identity.clone(), epoch));
            }
        }
        None
    })
    .await;
    let (leader, follower) = if old_leader == "fence-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert_eq!(leader.stop_with("KILL"), None);
    // A change made while nobody leads is deployed by the successor.
    app(
        kit,
        client,
        ns,
        "late",
        "late.example",
        "/",
        (backends.ip(), 8081),
    )
    .await;
    wait_for(
        "the successor to deploy the change",
        &[follower],
        || async {
            serves(ip, "late.example", "/", "backend-a")
                .await
                .then_some(())
        },
    )
    .await;
    let (_, new_epoch) = leadership(follower).await.expect("the successor's state");
    assert!(new_epoch > old_epoch, "{new_epoch} > {old_epoch}");

    // The deposed leader's late write, replayed at its epoch, is refused by the pod.
    let mut settings = DataplaneSettings::new(pod.dataplane_url(), "admin", PASSWORD);
    settings.reload_poll_interval = Duration::from_millis(100);
    let target = DataplaneTarget::new(pod.name(), settings).expect("a target");
    let stale = haptor::pure::rendered::RenderedConfig {
        haproxy_cfg: haproxy_pod::initial_config(),
        aux_files: Default::default(),
        ..Default::default()
    };
    let refused = target
        .deploy(&DeployRequest {
            checksum: stale.checksum(),
            rendered: std::sync::Arc::new(stale),
            epoch: old_epoch,
            generation: u64::MAX,
            timeout: Duration::from_secs(30),
        })
        .await;
    assert!(
        matches!(refused, Err(DeployError::Fenced { offered, accepted }) if offered == old_epoch && accepted >= new_epoch),
        "{refused:?}"
    );
    assert!(
        serves(ip, "late.example", "/", "backend-a").await,
        "the pod kept the new leader's config"
    );
}

/// A self-signed certificate and its key for `host`, PEM.
fn self_signed(host: &str) -> (String, String) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let output = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", &format!("/CN={host}")])
        .args(["-addext", &format!("subjectAltName=DNS:{host}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs (./scripts/test installs it)");
    assert!(
        output.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read = |path: &std::path::Path| std::fs::read_to_string(path).expect("a PEM file");
    (read(&cert), read(&key))
}

/// The subject of the certificate `ip:8443` presents for `host`, and the body of `GET /`
/// over that TLS connection (curl, certificate not verified: it is self-signed).
fn https_get(ip: Ipv4Addr, host: &str) -> Option<(String, String)> {
    let output = std::process::Command::new("curl")
        .args(["-sk", "-v", "--max-time", "3"])
        .args(["--resolve", &format!("{host}:8443:{ip}")])
        .arg(format!("https://{host}:8443/"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("curl runs (./scripts/test installs it)");
    if !output.status.success() {
        return None;
    }
    let verbose = String::from_utf8_lossy(&output.stderr);
    let subject = verbose
        .lines()
        .find_map(|l| l.trim().strip_prefix("*  subject: "))?
        .to_string();
    Some((
        subject,
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_secret_with_dots_in_its_name_is_served_over_https_and_a_restarted_controller_reloads_no_pod()
 {
    let scene = Scene::start("tls", 2, "www.example.com").await;
    let (kit, client, ns, pods) = (&scene.kit, &scene.client, &scene.ns, &scene.pods);
    // The most common Secret name there is: the API stores www.example.com-tls's file as
    // default_www_example_com-tls.pem, and haproxy.cfg must name that file.
    let (cert, key) = self_signed("www.example.com");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "www.example.com-tls" },
        "type": "kubernetes.io/tls",
        "stringData": { "tls.crt": cert, "tls.key": key },
    }))
    .expect("a TLS Secret");
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the TLS Secret is created");
    let tls = json!({ "spec": { "tls": [{ "hosts": ["www.example.com"], "secretName": "www.example.com-tls" }] } });
    Api::<Ingress>::namespaced(client.clone(), ns)
        .patch("web", &PatchParams::default(), &Patch::Merge(&tls))
        .await
        .expect("the Ingress gets its TLS entry");
    create_pod_config(client, ns).await;
    let mut first = Replica::start(kit.admin_kubeconfig(), ns, "tls-first");

    for pod in pods {
        let ip = pod.ip();
        let (subject, _) =
            wait_for(
                "HTTPS with the Secret's certificate",
                &[&first],
                || async move {
                    https_get(ip, "www.example.com").filter(|(_, body)| body == "backend-a")
                },
            )
            .await;
        assert!(
            subject.contains("CN=www.example.com") || subject.contains("CN = www.example.com"),
            "{subject}"
        );
        let stored = pod
            .etc_haproxy()
            .join("ssl")
            .join(format!("{ns}_www_example_com-tls.pem"));
        assert!(
            stored.is_file(),
            "{} is where the API stored it",
            stored.display()
        );
    }
    let published = wait_for("both pods at the published checksum", &[&first], || {
        at_published_checksum(client, ns, 2)
    })
    .await
    .spec
    .checksum;
    let reloads: Vec<Option<u64>> = pods.iter().map(HaproxyPod::reloads).collect();
    assert!(reloads.iter().all(Option::is_some), "{reloads:?}");

    // A rolling update of haptor: the old process goes, a new one starts and finds both pods
    // already running the render.
    first.stop_with("TERM");
    let second = Replica::start(kit.admin_kubeconfig(), ns, "tls-second");
    for pod in pods {
        let series = format!("haptor_deployments_total{{instance=\"{}\"}}", pod.name());
        wait_for(
            "the new controller to deploy to the pod",
            &[&second],
            || async { second.metric(&series).await.filter(|n| *n >= 1.0) },
        )
        .await;
        let errors = format!(
            "haptor_deployment_errors_total{{instance=\"{}\"",
            pod.name()
        );
        let (_, metrics) = second
            .get(second.metrics, "/metrics")
            .await
            .expect("metrics");
        assert!(!metrics.contains(&errors), "{metrics}");
    }
    assert_eq!(
        pods.iter().map(HaproxyPod::reloads).collect::<Vec<_>>(),
        reloads,
        "a restarted controller reloads no pod that runs its render"
    );
    let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), ns)
        .get("haptor-config")
        .await
        .expect("the HAProxyCfg");
    assert_eq!(cfg.spec.checksum, published, "the same render");
    for pod in pods {
        let ip = pod.ip();
        assert_eq!(
            https_get(ip, "www.example.com").map(|(_, body)| body),
            Some("backend-a".to_string())
        );
    }
    eprintln!(
        "figures: reloads per pod after a controller restart with nothing changed: {:?} before, {:?} after",
        reloads,
        pods.iter().map(HaproxyPod::reloads).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_haproxy_refuses_is_an_error_in_haproxycfg_and_an_event_while_the_old_worker_serves()
 {
    use haptor::pure::config::HAProxyTemplateConfig;

    let scene = Scene::start("bind", 1, "bind.example").await;
    let (kit, client, ns, pod) = (&scene.kit, &scene.client, &scene.ns, &scene.pods[0]);
    create_pod_config(client, ns).await;
    let replica = Replica::start(kit.admin_kubeconfig(), ns, "bind-solo");
    let ip = pod.ip();
    wait_for("the pod to serve", &[&replica], || async {
        serves(ip, "bind.example", "/", "backend-a")
            .await
            .then_some(())
    })
    .await;
    let worker = || {
        let proc = dataplane_peer::cli(&pod.etc_haproxy().join("master.sock"), "show proc")
            .unwrap_or_default();
        let failed = proc
            .split_once("[failed:")
            .and_then(|(_, rest)| rest.split(']').next())
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or(0);
        (pod.reloads(), failed)
    };
    let before = worker();

    // A listener on an address the pod does not have: `haproxy -c` (haptor's and the API's)
    // accepts it, HAProxy's reload cannot bind it.
    let configs = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns);
    let unbindable = json!({ "spec": { "extraContext": { "http_bind": "\"203.0.113.7:8080\"" } } });
    configs
        .patch(
            "haptor-config",
            &PatchParams::default(),
            &Patch::Merge(&unbindable),
        )
        .await
        .expect("the config is changed");

    let instance = wait_for("the pod's error in HAProxyCfg", &[&replica], || async {
        let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), ns)
            .get_opt("haptor-config")
            .await
            .ok()??;
        cfg.status?
            .instances
            .into_iter()
            .find(|i| i.name == pod.name() && i.consecutive_errors > 0)
    })
    .await;
    let error = instance.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("cannot bind socket") && error.contains("203.0.113.7:8080"),
        "HAProxy's own message: {instance:?}"
    );
    let event = wait_for_event(client, ns, "DeploymentFailed", &[&replica]).await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .is_some_and(|n| n.contains(pod.name())),
        "{event:?}"
    );
    let after = worker();
    assert!(
        after.1 > before.1,
        "HAProxy counts the failed reload: {before:?} {after:?}"
    );
    assert!(
        serves(ip, "bind.example", "/", "backend-a").await,
        "the old worker keeps serving"
    );
    eprintln!("figures: the failed reload as HAProxyCfg reports it: {error}");

    // Put right, the next attempt (after the backoff) deploys.
    let bindable = json!({ "spec": { "extraContext": { "http_bind": "\"${POD_IP}:8080\"" } } });
    configs
        .patch(
            "haptor-config",
            &PatchParams::default(),
            &Patch::Merge(&bindable),
        )
        .await
        .expect("the config is put right");
    wait_for(
        "the pod back at the published checksum",
        &[&replica],
        || async {
            let cfg = Api::<HAProxyCfg>::namespaced(client.clone(), ns)
                .get_opt("haptor-config")
                .await
                .ok()??;
            let status = cfg.status.as_ref()?;
            status
                .instances
                .iter()
                .any(|i| {
                    i.consecutive_errors == 0
                        && i.checksum.as_deref() == Some(cfg.spec.checksum.as_str())
                })
                .then_some(())
        },
    )
    .await;
    assert!(serves(ip, "bind.example", "/", "backend-a").await);
}
