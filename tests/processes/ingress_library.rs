//! The Ingress library shipped in `deploy/library/ingress.yaml`, tested as users meet it:
//! its own validation tests through `haptor validate`, every Ingress example of the
//! Kubernetes documentation corpus through `haptor render --validate`, and real requests
//! through a real HAProxy running the rendered configuration on loopback, with small echo
//! servers standing in for the endpoints. Everything uses the built `haptor` binary and the
//! installed `haproxy`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::{free_port, haproxy_binary, haptor, text};

const LIBRARY: &str = "deploy/library/ingress.yaml";
const CORPUS: &str = "../shared/corpus/kubernetes/ingress";
/// The library's own default bind addresses, replaced in copies that run HAProxy.
const DEFAULT_BINDS: [&str; 3] = ["127.0.0.1:18080", "127.0.0.1:18443", "127.0.0.1:18404"];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// The test certificate of `deploy/library/testdata/tls-secret.yaml`, as a Secret named
/// `name` in `namespace`.
fn tls_secret(namespace: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(repo("deploy/library/testdata/tls-secret.yaml"))
        .expect("the test TLS Secret exists");
    let mut secret: Value = serde_yaml_ng::from_str(&text).expect("the test Secret is YAML");
    secret["metadata"] = json!({"name": name, "namespace": namespace});
    secret
}

fn write_fixtures(dir: &Path, objects: &[Value]) {
    let documents: Vec<String> = objects.iter().map(Value::to_string).collect();
    std::fs::write(dir.join("objects.yaml"), documents.join("\n---\n")).expect("write fixtures");
}

#[test]
fn the_library_passes_its_own_validation_tests() {
    let output = haptor(&["validate", "-f", path_text(&repo(LIBRARY)), "-o", "json"]);
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {}", text(&output)));
    let failed: Vec<String> = report["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["passed"] != json!(true))
        .map(|t| t.to_string())
        .collect();
    assert!(failed.is_empty(), "failing tests: {failed:#?}");
    assert!(output.status.success(), "{}", text(&output));
    let count = report["tests"].as_array().map_or(0, Vec::len);
    assert!(count >= 20, "only {count} validation tests");
    let haproxy_checked = report["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["assertions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["kind"] == "haproxy_valid"))
        })
        .count();
    assert!(
        haproxy_checked >= 5,
        "only {haproxy_checked} tests run haproxy -c"
    );
}

/// Every `kind: Ingress` document of the corpus, with the file it came from.
fn corpus_ingresses() -> Vec<(String, Value)> {
    let dir = repo(CORPUS);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable corpus file");
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let Ok(value) = <Value as serde::Deserialize>::deserialize(document) else {
                continue;
            };
            if value["kind"] == "Ingress" {
                let name = file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                found.push((name, value));
            }
        }
    }
    found
}

/// How a backend names its Service port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PortRef {
    Number(u64),
    Name(String),
}

/// The `service` backends an Ingress references: `(service, port)`.
fn service_backends(ingress: &Value) -> BTreeSet<(String, PortRef)> {
    let mut backends = Vec::new();
    backends.push(&ingress["spec"]["defaultBackend"]);
    for rule in ingress["spec"]["rules"].as_array().into_iter().flatten() {
        for path in rule["http"]["paths"].as_array().into_iter().flatten() {
            backends.push(&path["backend"]);
        }
    }
    backends
        .into_iter()
        .filter_map(|b| {
            let service = &b["service"];
            let name = service["name"].as_str()?;
            let port = match service["port"]["number"].as_u64() {
                Some(number) => PortRef::Number(number),
                None => PortRef::Name(service["port"]["name"].as_str()?.to_string()),
            };
            Some((name.to_string(), port))
        })
        .collect()
}

/// Services (one port per referenced number or name), EndpointSlices and TLS Secrets for
/// everything `ingress` (in namespace `default`) references.
fn supporting_objects(ingress: &Value) -> Vec<Value> {
    let mut ports: BTreeMap<String, Vec<PortRef>> = BTreeMap::new();
    for (service, port) in service_backends(ingress) {
        ports.entry(service).or_default().push(port);
    }
    let mut objects = Vec::new();
    for (n, (service, refs)) in ports.iter().enumerate() {
        let mut service_ports = Vec::new();
        let mut slice_ports = Vec::new();
        for (i, port) in refs.iter().enumerate() {
            let (name, number) = match port {
                PortRef::Number(number) => (format!("port-{number}"), *number),
                PortRef::Name(name) => (name.clone(), 9000 + i as u64),
            };
            service_ports.push(json!({"name": name, "port": number, "targetPort": 8080 + i}));
            slice_ports.push(json!({"name": name, "port": 8080 + i}));
        }
        objects.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service, "namespace": "default"},
            "spec": {"ports": service_ports}
        }));
        objects.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{service}-1"), "namespace": "default",
                         "labels": {"kubernetes.io/service-name": service}},
            "ports": slice_ports,
            "endpoints": [{"addresses": [format!("10.1.{n}.1")]}, {"addresses": [format!("10.1.{n}.2")]}]
        }));
    }
    for tls in ingress["spec"]["tls"].as_array().into_iter().flatten() {
        if let Some(secret) = tls["secretName"].as_str() {
            objects.push(tls_secret("default", secret));
        }
    }
    objects
}

/// The routes.map line the Ingress specification implies for every path with a Service
/// backend: host + path + "/?" for Exact, host + path without trailing slashes + "/" for
/// Prefix and ImplementationSpecific, leading to `<namespace>/<service>/<port>`.
fn expected_route_lines(ingress: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for rule in ingress["spec"]["rules"].as_array().into_iter().flatten() {
        let host = rule["host"].as_str().unwrap_or_default().to_lowercase();
        for path in rule["http"]["paths"].as_array().into_iter().flatten() {
            let service = &path["backend"]["service"];
            let Some(name) = service["name"].as_str() else {
                continue;
            };
            let port = match service["port"]["number"].as_u64() {
                Some(number) => number.to_string(),
                None => service["port"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            };
            let text = path["path"].as_str().unwrap_or("/");
            let key = if path["pathType"] == "Exact" {
                format!("{host}{text}/?")
            } else {
                format!("{host}{}/", text.trim_end_matches('/'))
            };
            lines.push(format!("{key} default/{name}/{port}"));
        }
    }
    lines
}

#[test]
fn every_kubernetes_documentation_ingress_example_renders_into_a_valid_config() {
    let examples = corpus_ingresses();
    assert!(
        examples.len() >= 10,
        "the corpus holds {} Ingress documents",
        examples.len()
    );
    let mut failures = Vec::new();
    for (file, original) in &examples {
        let mut ingress = original.clone();
        // Served only when it names the library's class; the examples name nginx or none.
        ingress["spec"]["ingressClassName"] = json!("haptor");
        // The supporting objects live in `default`, where most examples are anyway.
        ingress["metadata"]["namespace"] = json!("default");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut objects = vec![ingress.clone()];
        objects.extend(supporting_objects(&ingress));
        write_fixtures(dir.path(), &objects);
        let output = haptor(&[
            "render",
            "-f",
            path_text(&repo(LIBRARY)),
            "--fixtures",
            path_text(dir.path()),
            "--validate",
        ]);
        let out = text(&output);
        if !output.status.success() {
            failures.push(format!("{file}: haptor render failed:\n{out}"));
            continue;
        }
        for (service, _) in service_backends(&ingress) {
            if !out.contains(&format!("backend svc_default_{service}_")) {
                failures.push(format!("{file}: no backend for Service {service}:\n{out}"));
            }
        }
        for line in expected_route_lines(&ingress) {
            if !out.lines().any(|l| l == line) {
                failures.push(format!("{file}: no route '{line}' in routes.map:\n{out}"));
            }
        }
        let has_tls = ingress["spec"]["tls"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["secretName"].is_string()));
        if has_tls && !out.contains(" crt-list ") {
            failures.push(format!(
                "{file}: TLS configured but no crt-list bound:\n{out}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples failed:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

/// An HTTP server on loopback answering every request with `<name> <path>`.
fn echo_server(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an echo server");
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&request);
                let path = head.split_whitespace().nth(1).unwrap_or("?").to_string();
                let body = format!("{name} {path}");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// HAProxy running a rendered configuration; stopped when dropped.
struct RunningHaproxy {
    child: Child,
    http: u16,
    https: u16,
    /// The status frontend (`status_bind`), where `monitor-uri /healthz` answers.
    status: u16,
}

impl Drop for RunningHaproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one HTTP/1.1 request and returns the status code, the `location` header and the
/// body.
fn get(port: u16, host: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to haproxy");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    exchange(&mut stream, host, path, headers)
}

/// As [`get`], over TLS with SNI `host`, trusting only the library's test certificate.
fn get_tls(port: u16, host: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    let secret = tls_secret("default", "unused");
    let pem = base64_decode(secret["data"]["tls.crt"].as_str().expect("tls.crt"));
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&pem).expect("the test certificate is PEM"))
        .expect("a usable root");
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).expect("a DNS name");
    let connection =
        rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("TLS client");
    let socket = TcpStream::connect(("127.0.0.1", port)).expect("connect to haproxy");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut stream = rustls::StreamOwned::new(connection, socket);
    exchange(&mut stream, host, path, headers)
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("valid base64")
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Writes one request with `connection: close` and reads the response to its end.
fn exchange(
    stream: &mut impl ReadWrite,
    host: &str,
    path: &str,
    headers: &[&str],
) -> (u16, String, String) {
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("send request");
    let mut bytes = Vec::new();
    // A TLS peer may close without close_notify; what arrived before still counts.
    let _ = stream.read_to_end(&mut bytes);
    let response = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let location = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("location")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    (status, location, body.trim().to_string())
}

fn service_with_endpoint(name: &str, port: u16) -> [Value; 2] {
    [
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("{name}-1"), "namespace": "default",
                            "labels": {"kubernetes.io/service-name": name}},
               "ports": [{"name": "http", "port": port}],
               "endpoints": [{"addresses": ["127.0.0.1"]}]}),
    ]
}

fn backend(service: &str, port: Value) -> Value {
    if port.is_number() {
        json!({"service": {"name": service, "port": {"number": port}}})
    } else {
        json!({"service": {"name": service, "port": {"name": port}}})
    }
}

fn route(path: &str, path_type: &str, service: &str) -> Value {
    json!({"path": path, "pathType": path_type, "backend": backend(service, json!(80))})
}

fn ingress(name: &str, annotations: Value, spec: Value) -> Value {
    let mut spec = spec;
    spec["ingressClassName"] = json!("haptor");
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "namespace": "default", "annotations": annotations},
           "spec": spec})
}

/// Renders the library against `objects` and starts HAProxy on it, on free loopback ports.
fn start_haproxy(dir: &Path, objects: &[Value]) -> RunningHaproxy {
    let ports = [free_port(), free_port(), free_port()];
    let mut library = std::fs::read_to_string(repo(LIBRARY)).expect("the library exists");
    for (default, port) in DEFAULT_BINDS.iter().zip(ports) {
        library = library.replace(default, &format!("127.0.0.1:{port}"));
    }
    let config = dir.join("library.yaml");
    std::fs::write(&config, library).expect("write the library copy");
    let fixtures = dir.join("fixtures");
    std::fs::create_dir_all(&fixtures).expect("fixtures dir");
    write_fixtures(&fixtures, objects);
    let out = dir.join("out");
    let output = haptor(&[
        "render",
        "-f",
        path_text(&config),
        "--fixtures",
        path_text(&fixtures),
        "--out",
        path_text(&out),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let cfg_path = out.join("haproxy.cfg");
    let cfg = std::fs::read_to_string(&cfg_path).expect("rendered haproxy.cfg");
    let cfg = cfg.replace(
        "default-path origin /etc/haproxy",
        &format!("default-path origin {}", path_text(&out)),
    );
    std::fs::write(&cfg_path, &cfg).expect("rewrite haproxy.cfg");
    let child = Command::new(haproxy_binary())
        .args(["-db", "-f", path_text(&cfg_path)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy starts");
    let running = RunningHaproxy {
        child,
        http: ports[0],
        https: ports[1],
        status: ports[2],
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", running.http)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not listen:\n{cfg}");
        std::thread::sleep(Duration::from_millis(50));
    }
    running
}

#[test]
fn real_requests_are_routed_like_the_ingress_specification_says() {
    let names = [
        "web",
        "foo",
        "bar",
        "exact",
        "wild",
        "awild",
        "anyhost",
        "fallback",
        "private",
        "internal",
        "open",
        "redirected",
        "secure",
        "unlabelled",
    ];
    let mut objects: Vec<Value> = Vec::new();
    for name in names {
        objects.extend(service_with_endpoint(name, echo_server(name)));
    }
    let auth_secret: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("deploy/library/testdata/auth-secret.yaml"))
            .expect("the test auth Secret exists"),
    )
    .expect("the auth Secret is YAML");
    assert_eq!(
        auth_secret["metadata"]["labels"]["haptor.dev/basic-auth"], "true",
        "the library watches only auth Secrets with this label"
    );
    // The same users in a Secret without the label: not watched, so nobody gets in.
    let mut unlabelled_secret = auth_secret.clone();
    unlabelled_secret["metadata"] = json!({"name": "unlabelled-users", "namespace": "default"});
    objects.push(auth_secret);
    objects.push(unlabelled_secret);
    // A valid certificate in an Opaque Secret: not watched, so no TLS from it.
    let mut opaque_tls = tls_secret("default", "opaque-tls");
    opaque_tls["type"] = json!("Opaque");
    objects.push(opaque_tls);
    objects.push(ingress(
        "main",
        json!({}),
        json!({
            "defaultBackend": backend("fallback", json!("http")),
            "rules": [
                {"host": "a.example", "http": {"paths": [
                    route("/", "Prefix", "web"),
                    route("/foo/", "Prefix", "foo"),
                    route("/foo", "Exact", "exact"),
                    route("/bar", "Prefix", "bar"),
                    route("/gone", "Prefix", "no-such-service")]}},
                {"host": "*.wild.example", "http": {"paths": [route("/", "Prefix", "wild")]}},
                {"host": "a.wild.example", "http": {"paths": [route("/", "ImplementationSpecific", "awild")]}},
                {"http": {"paths": [route("/any", "Prefix", "anyhost")]}}
            ]
        }),
    ));
    let annotated = [
        (
            "private",
            json!({"haproxy.org/auth-type": "basic-auth", "haproxy.org/auth-secret": "web-users"}),
        ),
        (
            "internal",
            json!({"haproxy.org/allow-list": "10.0.0.0/8, 192.168.0.0/16"}),
        ),
        (
            "open",
            json!({"haproxy.org/allow-list": "10.0.0.0/8,127.0.0.1"}),
        ),
        ("redirected", json!({"haproxy.org/ssl-redirect": "true"})),
        (
            "unlabelled",
            json!({"haproxy.org/auth-type": "basic-auth", "haproxy.org/auth-secret": "unlabelled-users"}),
        ),
    ];
    for (name, annotations) in annotated {
        objects.push(ingress(
            name,
            annotations,
            json!({"rules": [{"host": format!("{name}.example"),
                              "http": {"paths": [route("/", "Prefix", name)]}}]}),
        ));
    }
    objects.push(tls_secret("default", "secure-tls"));
    objects.push(ingress(
        "secure",
        json!({"haproxy.org/ssl-redirect": "true", "haproxy.org/auth-type": "basic-auth",
               "haproxy.org/auth-secret": "web-users"}),
        json!({"tls": [{"hosts": ["secure.example"], "secretName": "secure-tls"},
                       {"hosts": ["opaque.example"], "secretName": "opaque-tls"}],
               "rules": [{"host": "secure.example",
                          "http": {"paths": [route("/", "Prefix", "secure")]}}]}),
    ));
    let dir = tempfile::tempdir().expect("tempdir");
    let haproxy = start_haproxy(dir.path(), &objects);
    let port = haproxy.http;

    let cases: &[(&str, &str, u16, &str)] = &[
        ("a.example", "/", 200, "web /"),
        ("A.Example:8080", "/x", 200, "web /x"),
        ("a.example", "/foo", 200, "exact /foo"),
        ("a.example", "/foo/", 200, "foo /foo/"),
        ("a.example", "/foo/bar", 200, "foo /foo/bar"),
        ("a.example", "/foobar", 200, "web /foobar"),
        ("a.example", "/bar", 200, "bar /bar"),
        ("a.example", "/barn", 200, "web /barn"),
        ("a.example", "/gone/x", 503, ""),
        ("x.wild.example", "/", 200, "wild /"),
        ("y.x.wild.example", "/", 200, "fallback /"),
        ("wild.example", "/", 200, "fallback /"),
        ("a.wild.example", "/p", 200, "awild /p"),
        ("other.example", "/any", 200, "anyhost /any"),
        ("other.example", "/any/more", 200, "anyhost /any/more"),
        ("other.example", "/anything", 200, "fallback /anything"),
        ("a.example", "/any", 200, "web /any"),
        ("private.example", "/", 401, ""),
        ("internal.example", "/", 403, ""),
        ("open.example", "/", 200, "open /"),
        ("redirected.example", "/here", 302, ""),
    ];
    let mut wrong = Vec::new();
    for (host, path, status, body) in cases {
        let (got_status, _, got_body) = get(port, host, path, &[]);
        if got_status != *status || (!body.is_empty() && got_body != *body) {
            wrong.push(format!(
                "{host}{path}: expected {status} '{body}', got {got_status} '{got_body}'"
            ));
        }
    }
    // alice:s3cret and bob:hunter2, the credentials of testdata/auth-secret.yaml.
    let (status, _, body) = get(
        port,
        "private.example",
        "/",
        &["authorization: Basic YWxpY2U6czNjcmV0"],
    );
    if status != 200 || body != "private /" {
        wrong.push(format!("alice's credentials: got {status} '{body}'"));
    }
    let (status, _, _) = get(
        port,
        "private.example",
        "/",
        &["authorization: Basic Ym9iOndyb25n"],
    );
    if status != 401 {
        wrong.push(format!("a wrong password: got {status}"));
    }
    let (status, _, _) = get(
        port,
        "unlabelled.example",
        "/",
        &["authorization: Basic YWxpY2U6czNjcmV0"],
    );
    if status != 401 {
        wrong.push(format!(
            "alice's credentials in an unlabelled auth Secret: got {status}"
        ));
    }
    let (_, location, _) = get(port, "redirected.example", "/here", &[]);
    if location != "https://redirected.example/here" {
        wrong.push(format!("redirect location: '{location}'"));
    }
    let (status, location, _) = get(port, "secure.example", "/s", &[]);
    if status != 302 || location != "https://secure.example/s" {
        wrong.push(format!(
            "plain HTTP to secure.example: got {status} '{location}'"
        ));
    }
    let (status, _, _) = get_tls(haproxy.https, "secure.example", "/s", &[]);
    if status != 401 {
        wrong.push(format!("HTTPS without credentials: got {status}"));
    }
    let (status, _, body) = get_tls(
        haproxy.https,
        "secure.example",
        "/s",
        &["authorization: Basic Ym9iOmh1bnRlcjI="],
    );
    if status != 200 || body != "secure /s" {
        wrong.push(format!(
            "HTTPS with bob's credentials: got {status} '{body}'"
        ));
    }
    // The readiness probe's path, answered by monitor-uri; nothing else on the status port.
    let (status, _, _) = get(haproxy.status, "status", "/healthz", &[]);
    if status != 200 {
        wrong.push(format!("GET /healthz on the status port: got {status}"));
    }
    let (status, _, _) = get(haproxy.status, "status", "/", &[]);
    if status != 404 {
        wrong.push(format!("GET / on the status port: got {status}"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let cfg = std::fs::read_to_string(dir.path().join("out/haproxy.cfg")).expect("rendered cfg");
    let crt_list = std::fs::read_to_string(dir.path().join("out/general/ingresses.crtlist"))
        .expect("the crt-list");
    assert!(
        cfg.contains("crt-list general/ingresses.crtlist")
            && crt_list.lines().filter(|l| !l.trim().is_empty()).count() == 1
            && crt_list.starts_with("ssl/default_secure-tls.pem "),
        "the kubernetes.io/tls Secret gives a crt-list line, the Opaque one none:\n{crt_list}\n{cfg}"
    );
}

#[test]
fn the_example_manifests_in_testdata_render_into_a_valid_config() {
    let output = haptor(&[
        "render",
        "-f",
        path_text(&repo(LIBRARY)),
        "--fixtures",
        path_text(&repo("deploy/library/testdata")),
        "--validate",
    ]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    for expected in [
        "secure.example/ ing_default_secure_web_80",
        "a.example/ default/web/http",
        "a.example/ping/? default/web/80",
        "crt-list general/ingresses.crtlist",
        "user alice password $6$",
        "valid: syntax, schema and haproxy -c passed",
    ] {
        assert!(out.contains(expected), "no '{expected}' in:\n{out}");
    }
}

/// An Ingress of `class` (none when empty) with the given rules, for the outcome test.
fn classed_ingress(name: &str, class: &str, rules: Value) -> Value {
    let mut spec = json!({ "rules": rules });
    if !class.is_empty() {
        spec["ingressClassName"] = json!(class);
    }
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn rule(host: &str, paths: &[&str]) -> Value {
    let paths: Vec<Value> = paths.iter().map(|p| route(p, "Prefix", "web")).collect();
    json!({"host": host, "http": {"paths": paths}})
}

#[test]
fn the_library_records_served_and_ignored_ingresses_with_their_reasons_and_nothing_of_another_controllers()
 {
    use haptor::pure::rendered::{ObjectKey, Outcome};

    let text = std::fs::read_to_string(repo(LIBRARY)).expect("the library");
    let config = haptor::pure::config::config_from_yaml(LIBRARY, &text).expect("the library");
    let compiled =
        haptor::pure::pipeline::CompiledConfig::compile(config.spec).expect("it compiles");
    let stores = compiled.new_stores().expect("its stores");
    let ingresses = [
        classed_ingress("served", "haptor", json!([rule("a.example", &["/"])])),
        classed_ingress("other", "nginx", json!([rule("b.example", &["/"])])),
        classed_ingress("classless", "", json!([rule("c.example", &["/"])])),
        classed_ingress("bad-host", "haptor", json!([rule("a b", &["/"])])),
        classed_ingress(
            "bad-path",
            "haptor",
            json!([rule("d.example", &["/with space"])]),
        ),
        // One rule skipped, another served: served wins, and the skipped rule's reason is kept.
        classed_ingress(
            "partly",
            "haptor",
            json!([rule("a b", &["/"]), rule("e.example", &["/"])]),
        ),
        {
            let mut only_default = classed_ingress("default-only", "haptor", json!([]));
            only_default["spec"]["defaultBackend"] = backend("web", json!(80));
            only_default
        },
    ];
    let store = stores.get("ingresses").expect("an ingresses store");
    for ingress in ingresses {
        store.apply(ingress).expect("the Ingress is stored");
    }
    let rendered = compiled
        .render(
            stores.snapshot(),
            None,
            haptor::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("it renders");
    let key = |name: &str| ObjectKey {
        api_version: "networking.k8s.io/v1".into(),
        kind: "Ingress".into(),
        namespace: "default".into(),
        name: name.into(),
    };
    let ignored = Outcome::ignored;
    let expected = BTreeMap::from([
        (key("served"), Outcome::Served),
        // Another controller's Ingresses ("other" of class nginx, "classless" while no
        // IngressClass of haptor's is the default) are not haptor's to judge: no outcome.
        (
            key("bad-host"),
            ignored("host 'a b' is not a valid DNS name"),
        ),
        (
            key("bad-path"),
            ignored("path '/with space' is not an absolute path without spaces, '#' or '?'"),
        ),
        (
            key("partly"),
            Outcome::PartlyServed(vec!["host 'a b' is not a valid DNS name".into()]),
        ),
        (key("default-only"), Outcome::Served),
    ]);
    assert_eq!(*rendered.outcomes, expected);
    let checksum = rendered.checksum();
    let mut without = rendered.clone();
    without.outcomes = Default::default();
    assert_eq!(
        without.checksum(),
        checksum,
        "outcomes are not deployed bytes"
    );
}

/// The library renders for the target's HAProxy line: HTTP/2 glitch protection
/// (`tune.h2.fe.glitches-threshold`, added in 3.0) only for 3.0 and later, never for 2.6,
/// whose haproxy refuses the keyword; the line under test's own haproxy -c accepts what is
/// rendered for it; and `h2_glitches_threshold: 0` leaves it out everywhere.
#[test]
fn the_library_protects_http2_from_glitching_clients_only_on_haproxy_lines_that_can() {
    const SETTING: &str = "  tune.h2.fe.glitches-threshold 1000\n";
    let library = path_text(&repo(LIBRARY)).to_string();
    let render_for = |config: &str, version: &str| {
        let output = haptor(&["render", "-f", config, "--haproxy-version", version]);
        assert!(
            output.status.success(),
            "render for {version}: {}",
            text(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    assert!(!render_for(&library, "2.6").contains("glitches"));
    for version in ["3.0", "3.2"] {
        assert!(
            render_for(&library, version).contains(SETTING),
            "the render for {version} has no {SETTING:?}"
        );
    }

    let line = support::haproxy_line();
    let validated = haptor(&["render", "-f", &library, "--validate"]);
    let out = text(&validated);
    assert!(validated.status.success(), "{out}");
    assert!(
        out.contains("valid: syntax, schema and haproxy -c passed"),
        "{out}"
    );
    assert_eq!(
        out.contains(SETTING),
        line >= haptor::pure::haproxy::HaproxyVersion::V3_0,
        "the render for the line under test ({line}):\n{out}"
    );

    let dir = tempfile::tempdir().expect("a temp dir");
    let off = dir.path().join("config.yaml");
    let text_of_library = std::fs::read_to_string(repo(LIBRARY)).expect("the library reads");
    let switched_off =
        text_of_library.replacen("h2_glitches_threshold: 1000", "h2_glitches_threshold: 0", 1);
    assert_ne!(
        switched_off, text_of_library,
        "the library sets h2_glitches_threshold"
    );
    std::fs::write(&off, switched_off).expect("write the copy");
    assert!(!render_for(path_text(&off), "3.2").contains("glitches"));
}
