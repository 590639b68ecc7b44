//! The Gateway API library (`deploy/library/gateway.yaml`) as `haptor local` runs it, with
//! real connections through a real HAProxy: TLS passthrough by SNI to backends that end TLS
//! themselves, a TCPRoute's weights over many connections, and an HTTPRoute served and
//! reported in `/debug/vars/status`. The HTTPRoute conformance cases are in
//! `gateway_conformance.rs`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::local::{Local, eventually, repo};
use super::support::free_port;

/// The library with its status frontend on a free port.
fn library() -> String {
    std::fs::read_to_string(repo("deploy/library/gateway.yaml"))
        .expect("the Gateway library")
        .replace("127.0.0.1:18405", &format!("127.0.0.1:{}", free_port()))
}

/// A Service `name` in `default` with one TCP port 9000 and its EndpointSlice pointing at
/// `port` on loopback.
fn service(name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  ports: [{{name: main, port: 9000, targetPort: 9000}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: main, port: {port}}}]
endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]
"
    )
}

const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: haptor}
spec: {controllerName: haptor.dev/gateway-controller}
";

/// Starts `haptor local` on a folder holding the library and `manifests`.
fn start(manifests: &str) -> Local {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cluster");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("config.yaml"), library()).expect("the library");
    std::fs::write(dir.join("objects.yaml"), manifests).expect("the manifests");
    let local = Local::start_in(tmp, dir);
    local.wait_ready(Duration::from_secs(30));
    local
}

/// A TLS server for `host` (self-signed) answering every request with `name`.
fn tls_backend(host: &str, name: &'static str) -> u16 {
    let key = rcgen::KeyPair::generate().expect("a key");
    let certificate = rcgen::CertificateParams::new(vec![host.to_string()])
        .expect("certificate parameters")
        .self_signed(&key)
        .expect("a certificate");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![certificate.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("a usable certificate");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(connection) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let body = format!("served by {name}\n");
                let _ = write!(
                    tls,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    port
}

/// A TCP server that writes `name` and closes each connection.
fn tcp_backend(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(name.as_bytes());
        }
    });
    port
}

/// GET / over TLS to 127.0.0.1:`port` with SNI `host`, not checking the certificate (the
/// backends' are self-signed): the body, or None.
fn https_get(port: u16, host: &str) -> Option<String> {
    let output = std::process::Command::new("curl")
        .args(["-sk", "--max-time", "5", "--resolve"])
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg(format!("https://{host}:{port}/"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// What one TCP connection to 127.0.0.1:`port` reads before the server closes it.
fn tcp_read(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    (!text.is_empty()).then_some(text)
}

/// The status `/debug/vars/status` gives the object of `kind` named `name`.
fn status_of(local: &Local, kind: &str, name: &str) -> Option<Value> {
    let (code, statuses) = local.debug_json("/debug/vars/status")?;
    (code == 200).then_some(())?;
    statuses
        .as_array()?
        .iter()
        .find(|s| s["kind"] == kind && s["name"] == name)
        .map(|s| s["status"].clone())
}

#[test]
fn tls_passthrough_sends_two_sni_names_on_one_port_to_the_backends_that_end_tls_themselves() {
    let (alpha, beta) = (
        tls_backend("alpha.example", "alpha"),
        tls_backend("beta.example", "beta"),
    );
    let port = free_port();
    let manifests = format!(
        "{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: tls, port: {port}, protocol: TLS, tls: {{mode: Passthrough}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: alpha, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [alpha.example]
  rules: [{{backendRefs: [{{name: alpha, port: 9000}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: beta, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [beta.example]
  rules: [{{backendRefs: [{{name: beta, port: 9000}}]}}]
---
{}---
{}",
        service("alpha", alpha),
        service("beta", beta)
    );
    let local = start(&manifests);
    let answer = |host: &str, wanted: &str| {
        eventually(
            &format!("{host} on port {port} to reach {wanted}"),
            Duration::from_secs(20),
            || https_get(port, host).filter(|body| body.contains(wanted)),
        )
    };
    assert_eq!(answer("alpha.example", "alpha"), "served by alpha\n");
    assert_eq!(answer("beta.example", "beta"), "served by beta\n");
    // An SNI no route names is refused, not sent anywhere.
    assert_eq!(https_get(port, "gamma.example"), None);
    let status = status_of(&local, "Gateway", "edge").expect("the Gateway's status");
    assert_eq!(status["listeners"][0]["attachedRoutes"], 2, "{status}");
    assert_eq!(
        status["listeners"][0]["supportedKinds"][0]["kind"], "TLSRoute",
        "{status}"
    );
    let route = status_of(&local, "TLSRoute", "alpha").expect("the route's status");
    assert_eq!(
        route["parents"][0]["conditions"][0]["reason"], "Accepted",
        "{route}"
    );
}

#[test]
fn a_tcp_route_splits_two_hundred_connections_seventy_to_thirty() {
    let (heavy, light) = (tcp_backend("heavy"), tcp_backend("light"));
    let port = free_port();
    let manifests = format!(
        "{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: tcp, port: {port}, protocol: TCP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {{name: split, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  rules: [{{backendRefs: [{{name: heavy, port: 9000, weight: 70}}, {{name: light, port: 9000, weight: 30}}]}}]
---
{}---
{}",
        service("heavy", heavy),
        service("light", light)
    );
    let _local = start(&manifests);
    eventually(
        "the TCP listener to answer",
        Duration::from_secs(20),
        || tcp_read(port),
    );
    let mut heavy_count = 0;
    let mut light_count = 0;
    for _ in 0..200 {
        match tcp_read(port).as_deref() {
            Some("heavy") => heavy_count += 1,
            Some("light") => light_count += 1,
            other => panic!("a connection read {other:?}"),
        }
    }
    // 70 % of 200 is 140; the issue allows ±8 % of the connections (16).
    assert!(
        (124..=156).contains(&heavy_count),
        "heavy {heavy_count}, light {light_count}"
    );
    assert_eq!(heavy_count + light_count, 200);
}

#[test]
fn an_http_route_is_served_and_its_status_shows_in_debug_vars() {
    let backend = super::local::backend("web");
    let port = free_port();
    let manifests = format!(
        "{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default, generation: 3}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default, generation: 2}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [web.example]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /app}}}}]
    backendRefs: [{{name: web, port: 9000}}]
---
{}",
        service("web", backend.port)
    );
    let local = start(&manifests);
    let (code, body) = eventually("the route to serve", Duration::from_secs(20), || {
        super::local::get(port, "web.example", "/app/page").filter(|(code, _)| *code == 200)
    });
    assert_eq!((code, body.as_str()), (200, "hello from web\n"));
    assert_eq!(
        super::local::get(port, "web.example", "/other").map(|(code, _)| code),
        Some(404)
    );
    assert_eq!(
        super::local::get(port, "other.example", "/app").map(|(code, _)| code),
        Some(404)
    );
    let route = status_of(&local, "HTTPRoute", "web").expect("the route's status");
    let parent = &route["parents"][0];
    assert_eq!(parent["controllerName"], "haptor.dev/gateway-controller");
    assert_eq!(parent["parentRef"]["name"], "edge");
    let accepted = &parent["conditions"][0];
    assert_eq!(
        (
            &accepted["type"],
            &accepted["status"],
            &accepted["observedGeneration"]
        ),
        (
            &Value::from("Accepted"),
            &Value::from("True"),
            &Value::from(2)
        )
    );
    let gateway = status_of(&local, "Gateway", "edge").expect("the Gateway's status");
    assert_eq!(gateway["conditions"][1]["type"], "Programmed");
    assert_eq!(gateway["conditions"][1]["observedGeneration"], 3);
    assert_eq!(gateway["listeners"][0]["attachedRoutes"], 1);
}

/// An HTTPRoute for `host` with one PathPrefix rule to Service `service`.
fn simple_route(name: &str, host: &str, service: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [{host}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}]
    backendRefs: [{{name: {service}, port: 9000}}]
"
    )
}

#[test]
fn adding_a_path_only_http_route_is_a_map_entry_without_a_reload_and_haptor_plan_says_so() {
    let (one, two) = (super::local::backend("one"), super::local::backend("two"));
    let port = free_port();
    let base = format!(
        "{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
{}---
{}---
{}",
        service("one", one.port),
        service("two", two.port),
        simple_route("first", "one.example", "one")
    );
    let local = start(&base);
    eventually("the first route to serve", Duration::from_secs(20), || {
        super::local::get(port, "one.example", "/").filter(|(code, _)| *code == 200)
    });
    let before = super::local::worker_and_reloads(&local.work());
    local.write("added.yaml", &simple_route("second", "two.example", "two"));
    let (_, body) = eventually("the added route to serve", Duration::from_secs(20), || {
        super::local::get(port, "two.example", "/x").filter(|(code, _)| *code == 200)
    });
    assert_eq!(body, "hello from two\n");
    assert_eq!(
        super::local::worker_and_reloads(&local.work()),
        before,
        "the same worker and reload count: the route went in through the runtime API"
    );
    // `haptor plan` on the two renders says the same: a map change, no reload.
    let rendered = tempfile::tempdir().expect("tempdir");
    let config = rendered.path().join("gateway.yaml");
    std::fs::write(&config, library()).expect("the library");
    let render = |fixtures: &std::path::Path, out: &std::path::Path| {
        let output = super::support::haptor(&[
            "render",
            "-f",
            config.to_str().expect("utf-8"),
            "--fixtures",
            fixtures.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ]);
        assert!(output.status.success(), "{}", super::support::text(&output));
    };
    let (without, with) = (rendered.path().join("a"), rendered.path().join("b"));
    let fixtures = rendered.path().join("fixtures");
    std::fs::create_dir(&fixtures).expect("mkdir");
    std::fs::write(fixtures.join("objects.yaml"), &base).expect("fixtures");
    render(&fixtures, &without);
    std::fs::write(
        fixtures.join("added.yaml"),
        simple_route("second", "two.example", "two"),
    )
    .expect("fixtures");
    render(&fixtures, &with);
    let plan = super::support::haptor(&[
        "plan",
        without.to_str().expect("utf-8"),
        with.to_str().expect("utf-8"),
    ]);
    let text = super::support::text(&plan);
    assert!(text.contains("runtime: replace map maps/gw_any_"), "{text}");
    assert!(text.contains("reload: no"), "{text}");
}

/// An HTTP/2-only cleartext server (a second HAProxy with `proto h2` on its bind: it
/// refuses HTTP/1) answering every request with `name` and the path it got.
struct H2cBackend {
    port: u16,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl H2cBackend {
    fn start(name: &str) -> H2cBackend {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = format!(
            "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 10s\n  timeout server 10s\nfrontend h2c\n  bind 127.0.0.1:{port} proto h2\n  http-request return status 200 content-type text/plain lf-string \"served by {name} %[path] over HTTP/%[req.ver]\\n\"\n"
        );
        let file = dir.path().join("h2c.cfg");
        std::fs::write(&file, config).expect("the h2c backend's config");
        let child = std::process::Command::new(super::support::haproxy_binary())
            .args(["-db", "-f"])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haproxy starts");
        H2cBackend {
            port,
            child,
            _dir: dir,
        }
    }
}

impl Drop for H2cBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gRPC-shaped call (HTTP/2 with prior knowledge, POST, content-type application/grpc) to
/// 127.0.0.1:`port` for `host` and `path`: (status, body).
fn grpc_call(port: u16, host: &str, path: &str, headers: &[&str]) -> Option<(u16, String)> {
    let mut command = std::process::Command::new("curl");
    command
        .args([
            "-s",
            "--max-time",
            "5",
            "--http2-prior-knowledge",
            "-X",
            "POST",
        ])
        .args(["-H", "content-type: application/grpc", "-H"])
        .arg(format!("host: {host}"))
        .args(["-o", "-", "-w", "\n%{http_code}"]);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

#[test]
fn a_grpc_route_routes_by_service_method_and_header_to_backends_over_h2c() {
    let (cart, beta) = (H2cBackend::start("cart"), H2cBackend::start("beta"));
    let port = free_port();
    let manifests = format!(
        "{CLASS}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: shop, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [grpc.example]
  rules:
  - matches: [{{method: {{service: shop.Cart, method: Add}}, headers: [{{name: x-track, value: beta}}]}}]
    backendRefs: [{{name: beta, port: 9000}}]
  - matches: [{{method: {{service: shop.Cart}}}}]
    backendRefs: [{{name: cart, port: 9000}}]
---
{}---
{}",
        service("cart", cart.port),
        service("beta", beta.port)
    );
    let _local = start(&manifests);
    let (code, body) = eventually("the GRPCRoute to answer", Duration::from_secs(20), || {
        grpc_call(port, "grpc.example", "/shop.Cart/Add", &[]).filter(|(code, _)| *code == 200)
    });
    assert_eq!(
        (code, body.as_str()),
        (200, "served by cart /shop.Cart/Add over HTTP/2.0\n")
    );
    assert_eq!(
        grpc_call(port, "grpc.example", "/shop.Cart/Add", &["x-track: beta"]),
        Some((
            200,
            "served by beta /shop.Cart/Add over HTTP/2.0\n".to_string()
        ))
    );
    assert_eq!(
        grpc_call(
            port,
            "grpc.example",
            "/shop.Cart/Remove",
            &["x-track: beta"]
        ),
        Some((
            200,
            "served by cart /shop.Cart/Remove over HTTP/2.0\n".to_string()
        ))
    );
    assert_eq!(
        grpc_call(port, "grpc.example", "/shop.Orders/List", &[]).map(|(code, _)| code),
        Some(404)
    );
}

#[test]
fn a_tls_listener_in_terminate_mode_ends_tls_and_forwards_the_bytes_by_sni() {
    let (plain, other) = (tcp_backend("plain"), tcp_backend("other"));
    let key = rcgen::KeyPair::generate().expect("a key");
    let certificate = rcgen::CertificateParams::new(vec!["term.example".to_string()])
        .expect("certificate parameters")
        .self_signed(&key)
        .expect("a certificate");
    let b64 = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    let port = free_port();
    let manifests = format!(
        "{CLASS}---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {{name: term-tls, namespace: default}}
data: {{tls.crt: {}, tls.key: {}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: default}}
spec:
  gatewayClassName: haptor
  listeners: [{{name: tls, port: {port}, protocol: TLS, tls: {{mode: Terminate, certificateRefs: [{{name: term-tls}}]}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: term, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [term.example]
  rules: [{{backendRefs: [{{name: plain, port: 9000}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: elsewhere, namespace: default}}
spec:
  parentRefs: [{{name: edge}}]
  hostnames: [elsewhere.example]
  rules: [{{backendRefs: [{{name: other, port: 9000}}]}}]
---
{}---
{}",
        b64(&certificate.pem()),
        b64(&key.serialize_pem()),
        service("plain", plain),
        service("other", other)
    );
    let _local = start(&manifests);
    // What a TLS client with SNI `name` reads: HAProxy ends TLS and the backend's bytes come
    // back inside it.
    let read = |name: &str| {
        let output = std::process::Command::new("openssl")
            .args(["s_client", "-quiet", "-connect"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-servername", name])
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        (!text.is_empty()).then_some(text)
    };
    let text = eventually(
        "the TLS listener to answer",
        Duration::from_secs(20),
        || read("term.example"),
    );
    assert_eq!(text, "plain");
    assert_eq!(read("elsewhere.example").as_deref(), Some("other"));
}
