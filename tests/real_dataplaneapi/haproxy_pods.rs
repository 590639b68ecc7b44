//! HAProxy pods of the test kit: a real haproxy and a real Data Plane API in each network
//! namespace, their Pod objects in the real API server, and one rendered configuration
//! deployed to every pod through `DataplaneTarget` at `podIP:5555`, as the in-cluster
//! controller's Deployers will do. Binds take the pod's address from `"${POD_IP}"`; a
//! backend lives in a pod of its own, so the traffic crosses the pod network. Needs
//! `TEST_ASSET_DATAPLANEAPI` (feature `real-dataplaneapi`, see `dataplane_api.rs`).

use crate::dataplane_peer;
use crate::haproxy_pod;
use crate::kube_kit;
use crate::pod_network;

use std::sync::Arc;
use std::time::Duration;

use haptor::drivers::dataplane::{DataplaneSettings, DataplaneTarget};
use haptor::pure::deploy::{DeployRequest, DeployTarget};
use haptor::pure::rendered::{AuxFile, AuxKind, RenderedConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use haproxy_pod::HaproxyPod;
use kube_kit::Kit;
use pod_network::PodNetwork;

fn render(servers: &str, hosts: &str) -> RenderedConfig {
    let haproxy_cfg = format!(
        "global\n    default-path origin /etc/haproxy\n    stats socket /etc/haproxy/runtime.sock level admin\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend fe\n    bind \"${{POD_IP}}:8080\"\n    http-request set-var(txn.backend) req.hdr(host),lower,map(maps/hosts.map,be)\n    use_backend %[var(txn.backend)]\n    http-response set-header x-pod \"${{POD_IP}}\"\n\nbackend be\n    balance roundrobin\n{servers}\nbackend other\n    http-request return status 200 content-type text/plain string other-backend\n"
    );
    let map = AuxFile {
        kind: AuxKind::Map,
        name: "hosts.map".into(),
        path: "maps/hosts.map".into(),
        content: hosts.to_string(),
    };
    RenderedConfig {
        haproxy_cfg,
        aux_files: [("maps/hosts.map".to_string(), map)].into_iter().collect(),
        ..Default::default()
    }
}

fn request(rendered: &RenderedConfig, generation: u64) -> DeployRequest {
    DeployRequest {
        rendered: Arc::new(rendered.clone()),
        checksum: rendered.checksum(),
        epoch: 1,
        generation,
        timeout: Duration::from_secs(60),
    }
}

fn target(pod: &HaproxyPod) -> DataplaneTarget {
    let mut settings = DataplaneSettings::new(pod.dataplane_url(), &pod.user, &pod.password);
    settings.reload_poll_interval = Duration::from_millis(100);
    DataplaneTarget::new(pod.name(), settings).expect("target")
}

/// Status, body and the `x-pod` header of a request to `ip:8080`.
async fn get(ip: std::net::Ipv4Addr, host: &str) -> (u16, String, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .get(format!("http://{ip}:8080/"))
        .header("host", host)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{ip}:8080 answers: {e}"));
    let pod = response
        .headers()
        .get("x-pod")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
        pod,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn one_render_serves_every_haproxy_pod_on_its_own_address_and_endpoint_changes_reload_none() {
    let network = PodNetwork::shared();
    let kit = Kit::shared();
    let ns = kit.temp_ns("pods").await;
    let backends = network.pod("backends");
    let _a = backends.http_backend(8081, "backend-a");
    let _b = backends.http_backend(8082, "backend-b");
    let pods = [
        HaproxyPod::start(network, "haproxy-0"),
        HaproxyPod::start(network, "haproxy-1"),
    ];
    for pod in &pods {
        kit.ready_pod(
            &ns,
            pod.name(),
            &[("app", "haproxy")],
            &pod.ip().to_string(),
        )
        .await;
    }
    let listed = Api::<Pod>::namespaced(kit.admin().await, &ns)
        .list(&ListParams::default().labels("app=haproxy"))
        .await
        .expect("pods listed");
    let ips: Vec<String> = listed
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    assert_eq!(
        ips,
        pods.iter().map(|p| p.ip().to_string()).collect::<Vec<_>>()
    );

    let before = render(
        &format!("    server s1 {}\n", backends.addr(8081)),
        "other.example other\n",
    );
    let after = render(
        &format!("    server s1 {}\n", backends.addr(8082)),
        "other.example other\nmore.example other\n",
    );
    let targets: Vec<DataplaneTarget> = pods.iter().map(target).collect();
    for (pod, target) in pods.iter().zip(&targets) {
        let outcome = target
            .deploy(&request(&before, 1))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", pod.name(), pod.logs()));
        assert!(outcome.reloaded);
    }
    for pod in &pods {
        assert_eq!(
            get(pod.ip(), "a.example").await,
            (200, "backend-a".to_string(), pod.ip().to_string()),
            "{}",
            pod.logs()
        );
        assert_eq!(get(pod.ip(), "other.example").await.1, "other-backend");
    }
    let reloads: Vec<Option<u64>> = pods.iter().map(HaproxyPod::reloads).collect();

    for (pod, target) in pods.iter().zip(&targets) {
        let outcome = target
            .deploy(&request(&after, 2))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", pod.name(), pod.logs()));
        assert!(
            !outcome.reloaded && outcome.runtime_changes > 0,
            "{outcome:?}"
        );
    }

    for pod in &pods {
        assert_eq!(get(pod.ip(), "a.example").await.1, "backend-b");
        assert_eq!(get(pod.ip(), "more.example").await.1, "other-backend");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        pods.iter().map(HaproxyPod::reloads).collect::<Vec<_>>(),
        reloads,
        "no pod reloaded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weight_change_on_a_balance_source_backend_is_applied_by_one_reload_without_a_failed_attempt()
 {
    let network = PodNetwork::shared();
    let backends = network.pod("weight-backends");
    let _a = backends.http_backend(8081, "backend-a");
    let pod = HaproxyPod::start(network, "weight-haproxy-0");
    let with_weight = |weight: u32| {
        let mut rendered = render(
            &format!("    server s1 {}:8081 weight {weight}\n", backends.ip()),
            "a.example be\n",
        );
        // A static algorithm: HAProxy refuses other weights than 0% and 100% at runtime.
        rendered.haproxy_cfg = rendered
            .haproxy_cfg
            .replace("balance roundrobin", "balance source");
        rendered
    };
    let target = target(&pod);
    let before = with_weight(10);
    let first = target
        .deploy(&request(&before, 1))
        .await
        .expect("the first deployment");
    assert!(first.reloaded, "{first:?}");
    let reloads = pod.reloads().expect("show proc");

    // One attempt, no error: the runtime API's refusal (HTTP 500 "static LB algorithm") is
    // HAProxy saying no, not an outage, and the target reloads at once.
    let outcome = target
        .deploy(&request(&with_weight(20), 2))
        .await
        .expect("a refused runtime change is no failed deployment");

    assert!(outcome.reloaded, "{outcome:?}");
    assert_eq!(pod.reloads(), Some(reloads + 1), "exactly one reload");
    let weight = dataplane_peer::cli(&pod.etc_haproxy().join("runtime.sock"), "get weight be/s1")
        .expect("the runtime API answers");
    assert!(weight.starts_with("20 "), "{weight}");
    assert_eq!(get(pod.ip(), "a.example").await.1, "backend-a");
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_that_come_and_go_are_added_and_deleted_at_runtime_by_the_real_api_without_a_reload()
 {
    let network = PodNetwork::shared();
    let backends = network.pod("dynamic-backends");
    let _a = backends.http_backend(8181, "backend-a");
    let _b = backends.http_backend(8182, "backend-b");
    let pod = HaproxyPod::start(network, "haproxy-dynamic");
    let target = target(&pod);
    let servers = |lines: &[String]| format!("    default-server maxconn 50\n{}", lines.concat());
    let first = render(
        &servers(&[format!(
            "    server SRV_1 {} weight 2\n",
            backends.addr(8181)
        )]),
        "",
    );
    let both = render(
        &servers(&[
            format!("    server SRV_1 {} weight 2\n", backends.addr(8181)),
            format!("    server SRV_2 {} weight 2\n", backends.addr(8182)),
        ]),
        "",
    );
    let second_only = render(
        &servers(&[format!(
            "    server SRV_2 {} weight 2\n",
            backends.addr(8182)
        )]),
        "",
    );
    let outcome = target
        .deploy(&request(&first, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(outcome.reloaded);
    assert_eq!(get(pod.ip(), "a.example").await.1, "backend-a");
    let reloads = pod.reloads();

    let outcome = target
        .deploy(&request(&both, 2))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(!outcome.reloaded, "{outcome:?}\n{}", pod.logs());
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..8 {
        answered.insert(get(pod.ip(), "a.example").await.1);
    }
    assert_eq!(
        answered.into_iter().collect::<Vec<_>>(),
        ["backend-a", "backend-b"],
        "the added server takes its share"
    );

    let outcome = target
        .deploy(&request(&second_only, 3))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(!outcome.reloaded, "{outcome:?}\n{}", pod.logs());
    for _ in 0..6 {
        assert_eq!(get(pod.ip(), "a.example").await.1, "backend-b");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pod.reloads(), reloads, "the pod never reloaded");
}

/// A backend the render no longer has, whose host left the map: the real API takes the
/// config without the backend and the map change without a reload, then deletes the
/// backend's servers at runtime; the host it served goes to the map's default backend.
#[tokio::test]
async fn a_removed_backend_leaves_without_a_reload_through_the_real_api() {
    let network = PodNetwork::shared();
    let backends = network.pod("removed-backends");
    let _a = backends.http_backend(8183, "backend-a");
    let _b = backends.http_backend(8184, "backend-b");
    let pod = HaproxyPod::start(network, "haproxy-removed");
    let target = target(&pod);
    let config = |gone: bool| {
        let mut rendered = render(
            &format!("    server SRV_1 {}\n", backends.addr(8183)),
            if gone {
                "a.example be\n"
            } else {
                "a.example be\nb.example gone\n"
            },
        );
        if !gone {
            rendered.haproxy_cfg.push_str(&format!(
                "\nbackend gone\n    balance roundrobin\n    server SRV_1 {}\n",
                backends.addr(8184)
            ));
        }
        rendered
    };
    let (with, without) = (config(false), config(true));
    let outcome = target
        .deploy(&request(&with, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(outcome.reloaded);
    assert_eq!(get(pod.ip(), "b.example").await.1, "backend-b");
    let reloads = pod.reloads();

    let outcome = target
        .deploy(&request(&without, 2))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(!outcome.reloaded, "{outcome:?}\n{}", pod.logs());
    for _ in 0..4 {
        assert_eq!(get(pod.ip(), "a.example").await.1, "backend-a");
        // The map's default (`be`) answers a host the map no longer has.
        assert_eq!(
            get(pod.ip(), "b.example").await.1,
            "backend-a",
            "the removed backend still serves"
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pod.reloads(), reloads, "the pod never reloaded");
}

/// A self-signed certificate and key for `host` (PEM, one text).
fn certificate_pem(host: &str) -> String {
    let (cert, key) = crate::support::self_signed_pem(host);
    cert + &key
}

/// The serial of the certificate `ip:8443` presents for `host`.
fn served_serial(ip: std::net::Ipv4Addr, host: &str) -> String {
    crate::support::served_serial(&format!("{ip}:8443"), host).unwrap_or_default()
}

fn serial_of(pem: &str) -> String {
    crate::support::serial_of_pem(pem)
}

/// A TLS frontend on `${POD_IP}:8443` with a default certificate and one crt-list, and the
/// certificates `certificates` (`(file name, PEM)`, each a line for its host).
fn render_tls(default: &str, certificates: &[(&str, &str, &str)]) -> RenderedConfig {
    let haproxy_cfg = "global\n    default-path origin /etc/haproxy\n    stats socket /etc/haproxy/runtime.sock level admin\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 5s\n    timeout server 5s\n\nfrontend tls\n    bind \"${POD_IP}:8443\" ssl crt ssl/default.pem crt-list general/hosts.crtlist\n    http-request return status 200 content-type text/plain string tls\n".to_string();
    let file = |kind: AuxKind, path: &str, content: String| {
        (
            path.to_string(),
            AuxFile {
                kind,
                name: path.rsplit('/').next().unwrap_or(path).to_string(),
                path: path.to_string(),
                content,
            },
        )
    };
    let mut aux_files: std::collections::BTreeMap<String, AuxFile> =
        [file(AuxKind::Cert, "ssl/default.pem", default.to_string())].into();
    let mut lines = String::new();
    for (name, host, pem) in certificates {
        let path = format!("ssl/{name}");
        lines.push_str(&format!("{path} {host}\n"));
        aux_files.extend([file(AuxKind::Cert, &path, pem.to_string())]);
    }
    aux_files.extend([file(AuxKind::CrtList, "general/hosts.crtlist", lines)]);
    RenderedConfig {
        haproxy_cfg,
        aux_files,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_certificate_and_a_tls_host_that_leaves_change_at_runtime_through_the_real_api() {
    let network = PodNetwork::shared();
    let pod = HaproxyPod::start(network, "haproxy-tls");
    let target = target(&pod);
    let default = certificate_pem("default.example");
    let (a1, a2, b) = (
        certificate_pem("a.example"),
        certificate_pem("a.example"),
        certificate_pem("b.example"),
    );
    let first = render_tls(
        &default,
        &[("a.pem", "a.example", &a1), ("b.pem", "b.example", &b)],
    );
    let outcome = target
        .deploy(&request(&first, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(outcome.reloaded);
    assert_eq!(served_serial(pod.ip(), "a.example"), serial_of(&a1));
    assert_eq!(served_serial(pod.ip(), "b.example"), serial_of(&b));
    let reloads = pod.reloads();

    let rotated = render_tls(
        &default,
        &[("a.pem", "a.example", &a2), ("b.pem", "b.example", &b)],
    );
    let outcome = target
        .deploy(&request(&rotated, 2))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(!outcome.reloaded, "{outcome:?}\n{}", pod.logs());
    assert_eq!(
        served_serial(pod.ip(), "a.example"),
        serial_of(&a2),
        "the rotated certificate serves new handshakes"
    );

    let without_b = render_tls(&default, &[("a.pem", "a.example", &a2)]);
    let outcome = target
        .deploy(&request(&without_b, 3))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pod.logs()));
    assert!(!outcome.reloaded, "{outcome:?}\n{}", pod.logs());
    assert_eq!(
        served_serial(pod.ip(), "b.example"),
        serial_of(&default),
        "b.example's line is gone: the default certificate answers"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pod.reloads(), reloads, "the pod never reloaded");
}
