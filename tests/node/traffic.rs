//! Requests through the chart's HAProxy pods on a real node (only with a Data Plane API in the
//! HAProxy image: feature `real-dataplaneapi`, `TEST_ASSET_DATAPLANEAPI`): HTTP and HTTPS to
//! the HAProxy Service's ClusterIP (kube-proxy picks a pod), routed by an Ingress to backend
//! pods; an endpoint change served with no reload; a rolling update of the controllers with no
//! reload and no failed request. A reload is seen in haproxy itself: each HAProxy pod's
//! worker process (`show info`'s Pid, asked on its runtime socket from the host) is the same
//! before and after.

use crate::node_kit::{Node, pod_name, pod_processes};
use crate::release::Release;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Backend pods: haproxy answering `served-by <pod name>` on 8080.
const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: docker.io/library/haptor-haproxy:dev
          imagePullPolicy: Never
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          command:
            - sh
            - -c
            - |
              cat >/tmp/web.cfg <<'EOF'
              defaults
                mode http
                timeout connect 2s
                timeout client 5s
                timeout server 5s
              frontend web
                bind :8080
                http-request return status 200 content-type text/plain lf-string "served-by %[env(POD_NAME)]"
              EOF
              exec haproxy -f /tmp/web.cfg
          ports:
            - containerPort: 8080
          readinessProbe:
            tcpSocket: {port: 8080}
            periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
    - port: 80
      targetPort: 8080
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  annotations:
    haproxy.org/ssl-redirect: "false"
spec:
  ingressClassName: haptor
  tls:
    - hosts: ["HOST"]
      secretName: web-tls
  rules:
    - host: HOST
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: web
                port:
                  number: 80
"#;

/// A release serving its host over HTTP and HTTPS from the backend pods. Each site has a host
/// of its own (`<namespace>.example`): an earlier test's namespace is still being deleted, and
/// its Ingress for the same host, the older one, would win the host until it is gone.
struct Site<'a> {
    release: Release<'a>,
    /// The HAProxy Service's ClusterIP.
    address: String,
    /// The host the Ingress routes, `<namespace>.example`.
    host: String,
    /// The certificate the host is served with (`ca.crt`).
    certificate: tempfile::TempDir,
}

impl Site<'_> {
    fn start(node: &'static Node, prefix: &str) -> Site<'static> {
        let release = Release::install_wait(node, prefix, &[]);
        let host = format!("{}.example", release.ns);
        let certificate = tempfile::tempdir().expect("a temp dir");
        let openssl = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-keyout",
                "tls.key",
                "-out",
                "ca.crt",
                "-subj",
                &format!("/CN={host}"),
            ])
            .args(["-addext", &format!("subjectAltName=DNS:{host}")])
            .current_dir(certificate.path())
            .output()
            .expect("openssl runs");
        assert!(openssl.status.success(), "{openssl:?}");
        let dir = certificate.path().to_string_lossy().into_owned();
        node.kubectl(&[
            "-n",
            &release.ns,
            "create",
            "secret",
            "tls",
            "web-tls",
            &format!("--cert={dir}/ca.crt"),
            &format!("--key={dir}/tls.key"),
        ]);
        let applied = node.apply(&release.ns, &WEB.replace("HOST", &host));
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
        let address = node
            .kubectl(&[
                "-n",
                &release.ns,
                "get",
                "service",
                "haptor-haproxy",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ])
            .trim()
            .to_string();
        let site = Site {
            release,
            host,
            address,
            certificate,
        };
        // Served once every HAProxy pod serves it (a request through the Service may reach
        // any of them): each pod asked on its own IP and container ports.
        let started = Instant::now();
        let mut first_served = None;
        for pod in site.release.haproxy_pods() {
            let ip = pod["status"]["podIP"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let (http, https) = (container_port(&pod, "http"), container_port(&pod, "https"));
            node.wait_for(&format!("{} serving {}", pod_name(&pod), site.host), || {
                (site.http_via(&ip, http)?.starts_with("served-by web-")
                    && site
                        .https_via(&ip, https)
                        .ok()?
                        .starts_with("served-by web-"))
                .then_some(())
            });
            first_served.get_or_insert(started.elapsed());
        }
        let every_pod = started.elapsed();
        assert!(
            site.get_http()
                .is_some_and(|b| b.starts_with("served-by web-")),
            "served through the Service once every pod serves it"
        );
        eprintln!(
            "traffic: {} served by the first HAProxy pod {:.1} s and by every pod {:.1} s after the Ingress was applied",
            site.host,
            first_served.unwrap_or_default().as_secs_f32(),
            every_pod.as_secs_f32()
        );
        site
    }

    fn get_http(&self) -> Option<String> {
        self.http_via(&self.address, 80)
    }

    fn http_via(&self, address: &str, port: u16) -> Option<String> {
        curl(&[
            "-H",
            &format!("Host: {}", self.host),
            &format!("http://{address}:{port}/"),
        ])
    }

    fn get_https(&self) -> Option<String> {
        self.https_answer().ok()
    }

    fn https_answer(&self) -> Result<String, String> {
        self.https_via(&self.address, 443)
    }

    fn https_via(&self, address: &str, port: u16) -> Result<String, String> {
        let ca = self.certificate.path().join("ca.crt");
        curl_answer(&[
            "--resolve",
            &format!("{}:{port}:{address}", self.host),
            "--cacert",
            &ca.to_string_lossy(),
            &format!("https://{}:{port}/", self.host),
        ])
    }

    /// Each HAProxy pod's worker pid, asked of haproxy on its runtime socket.
    fn workers(&self) -> Vec<(String, String)> {
        self.release
            .haproxy_pods()
            .iter()
            .map(|pod| {
                let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
                let worker = pod_processes(uid)
                    .into_iter()
                    .filter(|(_, cmdline)| cmdline.starts_with("/usr/local/sbin/haproxy"))
                    .find_map(|(pid, _)| show_info_pid(pid))
                    .unwrap_or_else(|| panic!("{}: no haproxy answers show info", pod_name(pod)));
                (pod_name(pod), worker)
            })
            .collect()
    }
}

/// `show info`'s Pid on the runtime socket of the haproxy whose host pid is `pid` (the socket
/// is in the pod's /etc/haproxy, reached through /proc/PID/root).
fn show_info_pid(pid: u32) -> Option<String> {
    let mut socket =
        UnixStream::connect(format!("/proc/{pid}/root/etc/haproxy/runtime.sock")).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    socket.write_all(b"show info\n").ok()?;
    let mut answer = String::new();
    socket.read_to_string(&mut answer).ok()?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Pid: "))
        .map(str::to_string)
}

/// curl's body of a 200 answer, or None.
/// The port of the pod's container port named `name` (the chart names HAProxy's `http` and
/// `https`).
fn container_port(pod: &serde_json::Value, name: &str) -> u16 {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|container| container["ports"].as_array().cloned().unwrap_or_default())
        .find(|port| port["name"] == name)
        .and_then(|port| port["containerPort"].as_u64())
        .and_then(|port| u16::try_from(port).ok())
        .unwrap_or_else(|| panic!("{} has a container port named {name}", pod_name(pod)))
}

fn curl(args: &[&str]) -> Option<String> {
    curl_answer(args).ok()
}

/// curl's body of a 200 answer, or what went wrong (curl's error and the HTTP status).
fn curl_answer(args: &[&str]) -> Result<String, String> {
    let output = Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
        ])
        .args(args)
        .output()
        .map_err(|e| format!("curl: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let (body, status) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    if output.status.success() && status == "200" {
        Ok(body.to_string())
    } else {
        Err(format!(
            "{} (HTTP {status}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            body.chars().take(200).collect::<String>()
        ))
    }
}

#[test]
fn http_and_https_reach_the_backend_pods_through_the_haproxy_service() {
    let (node, _turn) = Node::take();
    let site = Site::start(node, "traffic");
    let (mut http, mut https) = (0, 0);
    for _ in 0..50 {
        http += usize::from(
            site.get_http()
                .is_some_and(|b| b.starts_with("served-by web-")),
        );
        https += usize::from(
            site.get_https()
                .is_some_and(|b| b.starts_with("served-by web-")),
        );
    }
    eprintln!("traffic: {http}/50 HTTP and {https}/50 HTTPS requests served by the backend");
    assert_eq!((http, https), (50, 50));
}

#[test]
fn an_endpoint_change_reaches_haproxy_with_no_reload() {
    let (node, _turn) = Node::take();
    let site = Site::start(node, "endpoints");
    let before = site.workers();
    assert_eq!(before.len(), 2, "{before:?}");

    let started = Instant::now();
    node.kubectl(&[
        "-n",
        &site.release.ns,
        "scale",
        "deployment/web",
        "--replicas=2",
    ]);
    let backends = node.wait_for("both backend pods served", || {
        let served: BTreeSet<String> = (0..10).filter_map(|_| site.get_http()).collect();
        (served.len() == 2).then_some(served)
    });
    eprintln!(
        "traffic: the second backend pod served {:.1} s after the scale-up: {backends:?}",
        started.elapsed().as_secs_f32()
    );
    assert_eq!(
        site.workers(),
        before,
        "the same haproxy workers serve: the endpoint change needed no reload"
    );
}

#[test]
fn a_controller_rolling_update_reloads_no_haproxy_and_fails_no_request() {
    let (node, _turn) = Node::take();
    let site = Site::start(node, "roll");
    let before = site.workers();
    let old = site.release.ready_controllers();

    let stop = Arc::new(AtomicBool::new(false));
    let site = Arc::new(site);
    let requests = {
        let (stop, site) = (Arc::clone(&stop), Arc::clone(&site));
        std::thread::spawn(move || {
            let started = Instant::now();
            let (mut served, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match site.https_answer() {
                    Ok(body) if body.starts_with("served-by web-") => served += 1,
                    answer => failed.push(format!(
                        "at {:.1} s: {answer:?}",
                        started.elapsed().as_secs_f32()
                    )),
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (served, failed)
        })
    };
    site.release.roll_controllers();
    node.wait_for("a new controller pod leading", || {
        let holder = site.release.lease_holder()?;
        (!old.contains(&holder) && site.release.ready_controllers().contains(&holder)).then_some(())
    });
    // The new leader deploys what it renders: a few seconds for it to do so.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let (served, failed) = requests.join().expect("the requests thread ends");
    let after = site.workers();
    eprintln!(
        "traffic: {served} HTTPS requests served and {} failed through the controllers' rolling update; haproxy workers before {before:?}, after {after:?}",
        failed.len()
    );
    assert!(served > 0);
    assert_eq!(
        after, before,
        "the same haproxy workers serve: the new leader's deployment needed no reload"
    );
    assert!(
        failed.is_empty(),
        "no request fails while the controllers roll: {failed:#?}"
    );
}
