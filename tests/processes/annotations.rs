//! The Ingress library's annotations as users meet them: `haptor local` on a folder of
//! Ingresses carrying them, the real haproxy it starts, and real HTTP (and HTTPS) requests
//! to echo backends that report what they received (request line, headers, a PROXY
//! protocol line). Each test looks at the status, the response headers, the backend reached
//! and what that backend received, for documented values and for invalid ones, which must
//! be left out, named in haptor's log, and never stop the rest from being served.

use crate::local;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use local::{Local, Setup, eventually};

/// What an echo backend does besides echoing.
#[derive(Clone, Default)]
struct EchoOptions {
    /// Serve TLS with this certificate chain and key (PEM).
    tls: Option<(String, String)>,
    /// Answer health checks (`/healthz`) with 503.
    sick: bool,
    /// With `tls`: require a client certificate this CA (PEM) signed.
    client_ca: Option<String>,
}

/// An echo backend: answers every request with 200, an `x-backend: <name>` header and a
/// body of `backend=<name>` followed by the request head exactly as it arrived (a PROXY
/// protocol line included). `/sleep` waits two seconds first; `/status/NNN` answers with
/// status NNN.
struct Echo {
    port: u16,
    /// The request heads it received (health checks aside), in order.
    log: Arc<Mutex<Vec<String>>>,
}

impl Echo {
    /// Whether it has received a request whose request line holds `text`.
    fn received(&self, text: &str) -> bool {
        self.log.lock().expect("the log").iter().any(|head| {
            head.lines()
                .any(|line| line.starts_with("GET ") && line.contains(text))
        })
    }
}

fn echo(name: &'static str, options: EchoOptions) -> Echo {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an echo backend");
    let port = listener.local_addr().expect("its address").port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let tls = options.tls.as_ref().map(|(chain, key)| {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
            .collect::<Result<_, _>>()
            .expect("a PEM chain");
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a PEM key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match &options.client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("a PEM CA"))
                    .expect("a root");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("a client verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(chain, key)
            .expect("a usable certificate");
        Arc::new(config)
    });
    let received = Arc::clone(&log);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (log, tls, sick) = (Arc::clone(&received), tls.clone(), options.sick);
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                match tls {
                    Some(config) => {
                        let Ok(connection) = rustls::ServerConnection::new(config) else {
                            return;
                        };
                        answer(
                            rustls::StreamOwned::new(connection, stream),
                            name,
                            sick,
                            &log,
                        );
                    }
                    None => answer(stream, name, sick, &log),
                }
            });
        }
    });
    Echo { port, log }
}

/// Reads one request head (and its body, by content-length) and answers it.
fn answer(mut stream: impl Read + Write, name: &str, sick: bool, log: &Mutex<Vec<String>>) {
    let mut request = Vec::new();
    let mut buffer = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request).into_owned();
    let head = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_string();
    let request_line = head
        .lines()
        .find(|l| !l.starts_with("PROXY "))
        .unwrap_or_default()
        .to_string();
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    if path == "/healthz" {
        let status = if sick {
            "503 Service Unavailable"
        } else {
            "200 OK"
        };
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        return;
    }
    log.lock().expect("the log").push(head.clone());
    if path.starts_with("/sleep") {
        std::thread::sleep(Duration::from_secs(2));
    }
    let status = path
        .strip_prefix("/status/")
        .and_then(|code| code.parse::<u16>().ok())
        .unwrap_or(200);
    let body = format!("backend={name}\n{head}\n");
    let _ = write!(
        stream,
        "HTTP/1.1 {status} Echo\r\nx-backend: {name}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.flush();
}

/// One response as the client saw it.
#[derive(Debug)]
struct Response {
    status: u16,
    /// Header names lower-cased, in order.
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The backend that answered (its `x-backend` header).
    fn backend(&self) -> &str {
        self.header("x-backend").unwrap_or("none")
    }

    /// Whether the backend received a request header line `name: value` (case-insensitive
    /// name, exact value).
    fn received_header(&self, name: &str, value: &str) -> bool {
        self.body.lines().any(|line| {
            line.split_once(':')
                .is_some_and(|(n, v)| n.trim().eq_ignore_ascii_case(name) && v.trim() == value)
        })
    }

    /// Whether the backend received any header `name`.
    fn received_any(&self, name: &str) -> bool {
        self.body.lines().skip(2).any(|line| {
            line.split_once(':')
                .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        })
    }

    /// The request line the backend received.
    fn received_request_line(&self) -> &str {
        self.body
            .lines()
            .skip(1)
            .find(|l| !l.starts_with("PROXY "))
            .unwrap_or_default()
    }
}

/// A request to send.
struct Request<'a> {
    method: &'a str,
    host: &'a str,
    path: &'a str,
    headers: Vec<(&'a str, String)>,
    body: Option<String>,
}

fn get<'a>(host: &'a str, path: &'a str) -> Request<'a> {
    Request {
        method: "GET",
        host,
        path,
        headers: Vec::new(),
        body: None,
    }
}

impl<'a> Request<'a> {
    fn header(mut self, name: &'a str, value: impl Into<String>) -> Request<'a> {
        self.headers.push((name, value.into()));
        self
    }

    fn method(mut self, method: &'a str) -> Request<'a> {
        self.method = method;
        self
    }

    fn body(mut self, body: String) -> Request<'a> {
        self.body = Some(body);
        self
    }

    /// Sends it over plain HTTP to `port`.
    fn send(&self, port: u16) -> Response {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to haproxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("a timeout");
        self.exchange(&mut stream)
    }

    /// Sends it over TLS (SNI = host) to `port`, trusting the library's test certificate.
    fn send_tls(&self, port: u16) -> Response {
        self.send_tls_trusting(port, &test_certificate().0)
    }

    /// Sends it over TLS (SNI = host) to `port`, trusting only the certificate `pem`.
    fn send_tls_trusting(&self, port: u16, pem: &str) -> Response {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM"))
            .expect("a root");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from(self.host.to_string()).expect("a DNS name");
        let connection = rustls::ClientConnection::new(Arc::new(config), name).expect("a client");
        let socket = TcpStream::connect(("127.0.0.1", port)).expect("connect to haproxy");
        socket
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("a timeout");
        self.exchange(&mut rustls::StreamOwned::new(connection, socket))
    }

    fn exchange(&self, stream: &mut (impl Read + Write)) -> Response {
        let mut text = format!(
            "{} {} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
            self.method, self.path, self.host
        );
        for (name, value) in &self.headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(body) = &self.body {
            text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        } else {
            text.push_str("\r\n");
        }
        stream.write_all(text.as_bytes()).expect("send the request");
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        let response = String::from_utf8_lossy(&bytes).into_owned();
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Response {
            status,
            headers,
            body: body.to_string(),
        }
    }
}

/// The library's test certificate and key (secure.example and *.secure.example), PEM.
fn test_certificate() -> (String, String) {
    let text = std::fs::read_to_string(local::repo("deploy/library/testdata/tls-secret.yaml"))
        .expect("the test TLS Secret exists");
    let secret: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let decode = |key: &str| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(secret["data"][key].as_str().expect("a key"))
                .expect("base64"),
        )
        .expect("PEM text")
    };
    (decode("tls.crt"), decode("tls.key"))
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A Service `name` whose EndpointSlice holds one endpoint per port in `ports`.
fn service(name: &str, ports: &[u16]) -> Vec<Value> {
    let endpoints: Vec<Value> = ports
        .iter()
        .map(
            |port| json!({"addresses": ["127.0.0.1"], "conditions": {"ready": true}, "port": port}),
        )
        .collect();
    // One EndpointSlice per endpoint, as each has its own port.
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 80}]}})];
    for (i, endpoint) in endpoints.iter().enumerate() {
        objects.push(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-{i}"), "namespace": "default",
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": endpoint["port"]}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]}),
        );
    }
    objects
}

/// An Ingress `name` of class haptor routing every path of `host` to `service`.
fn ingress(name: &str, host: &str, service: &str, annotations: Value) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"ingressClassName": "haptor",
                 "tls": [{"hosts": ["*.secure.example"], "secretName": "annotations-tls"}],
                 "rules": [{"host": host, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}]}})
}

/// The library's test TLS Secret and its basic-auth Secret (alice:s3cret, bob:hunter2).
fn secrets() -> Vec<Value> {
    let (cert, key) = test_certificate();
    let auth: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(local::repo("deploy/library/testdata/auth-secret.yaml"))
            .expect("the auth Secret exists"),
    )
    .expect("YAML");
    vec![
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "annotations-tls", "namespace": "default"},
               "data": {"tls.crt": b64(&cert), "tls.key": b64(&key)}}),
        auth,
    ]
}

/// The quickstart folder (its own two Services answered by a quiet echo backend) with
/// `objects` added as `annotations.yaml`.
fn quickstart_with(objects: &[Value]) -> Setup {
    let quiet = echo("quickstart", EchoOptions::default()).port;
    let documents: Vec<String> = objects.iter().map(Value::to_string).collect();
    let mut setup = Setup::quickstart(quiet, quiet);
    setup
        .files
        .push(("annotations.yaml".into(), documents.join("\n---\n")));
    setup
}

/// Starts `haptor local` on the quickstart with `objects` added as `annotations.yaml`, and
/// waits until `host` answers through the backend `backend`.
fn start(objects: &[Value], ready_host: &str) -> Local {
    let local = quickstart_with(objects).start();
    local.wait_ready(Duration::from_secs(60));
    eventually(
        &format!("{ready_host} to be served"),
        Duration::from_secs(60),
        || {
            let response = get(ready_host, "/").send(local.http);
            (response.status != 404 && response.status != 0).then_some(())
        },
    );
    local
}

/// Collects what differs from the expectation, so one run reports every broken annotation.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn check(&mut self, what: &str, ok: bool, response: &Response) {
        if !ok {
            self.0.push(format!(
                "{what}: got {} {:?}\n{}",
                response.status, response.headers, response.body
            ));
        }
    }

    fn assert_none(self, local: &Local) {
        assert!(
            self.0.is_empty(),
            "{}\n--- haptor log ---\n{}",
            self.0.join("\n\n"),
            local.log_text()
        );
    }
}

#[test]
fn access_annotations_admit_deny_and_authenticate_real_clients() {
    let web = echo("web", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    let ingresses = [
        (
            "allow",
            json!({"haproxy.org/allow-list": "10.0.0.0/8, 127.0.0.1"}),
        ),
        (
            "allow-other",
            json!({"haproxy.org/allow-list": "10.0.0.0/8"}),
        ),
        (
            "allow-alias",
            json!({"haproxy.org/whitelist": "192.168.0.0/16"}),
        ),
        (
            "allow-broken",
            json!({"haproxy.org/allow-list": "10.0.0.0/8, 127.0.0.300"}),
        ),
        ("deny", json!({"haproxy.org/deny-list": "127.0.0.0/8"})),
        ("deny-other", json!({"haproxy.org/blacklist": "10.0.0.1"})),
        (
            "nginx-allow",
            json!({"nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8"}),
        ),
        (
            "nginx-deny",
            json!({"nginx.ingress.kubernetes.io/denylist-source-range": "127.0.0.1"}),
        ),
        (
            "auth",
            json!({"haproxy.org/auth-type": "basic-auth", "haproxy.org/auth-secret": "web-users",
                        "haproxy.org/auth-realm": "Staff only"}),
        ),
        (
            "nginx-auth",
            json!({"nginx.ingress.kubernetes.io/auth-type": "basic",
                              "nginx.ingress.kubernetes.io/auth-secret": "web-users"}),
        ),
        (
            "auth-digest",
            json!({"nginx.ingress.kubernetes.io/auth-type": "digest"}),
        ),
        (
            "rate",
            json!({"haproxy.org/rate-limit-requests": "3", "haproxy.org/rate-limit-period": "1m",
                        "haproxy.org/rate-limit-status-code": "429"}),
        ),
        ("rps", json!({"nginx.ingress.kubernetes.io/limit-rps": "1"})),
        ("rpm", json!({"nginx.ingress.kubernetes.io/limit-rpm": "1"})),
        (
            "conns",
            json!({"nginx.ingress.kubernetes.io/limit-connections": "1"}),
        ),
        (
            "body",
            json!({"nginx.ingress.kubernetes.io/proxy-body-size": "1k"}),
        ),
    ];
    for (name, annotations) in &ingresses {
        objects.push(ingress(
            name,
            &format!("{name}.test"),
            "web",
            annotations.clone(),
        ));
    }
    let local = start(&objects, "allow.test");
    let port = local.http;
    let mut findings = Findings::default();

    let r = get("allow.test", "/").send(port);
    findings.check(
        "allow-list naming 127.0.0.1 admits it",
        r.status == 200 && r.backend() == "web",
        &r,
    );
    for host in ["allow-other.test", "allow-alias.test", "nginx-allow.test"] {
        let r = get(host, "/").send(port);
        findings.check(
            &format!("{host}: an allow-list without 127.0.0.1 answers 403"),
            r.status == 403 && web_untouched(&r),
            &r,
        );
    }
    let r = get("allow-broken.test", "/").send(port);
    findings.check(
        "an allow-list that does not parse denies everyone (fail closed)",
        r.status == 403,
        &r,
    );
    for host in ["deny.test", "nginx-deny.test"] {
        let r = get(host, "/").send(port);
        findings.check(
            &format!("{host}: a deny-list naming 127.0.0.1 answers 403"),
            r.status == 403,
            &r,
        );
    }
    let r = get("deny-other.test", "/").send(port);
    findings.check(
        "a deny-list (blacklist alias) without 127.0.0.1 admits it",
        r.status == 200,
        &r,
    );

    // alice:s3cret and bob:hunter2, the credentials of testdata/auth-secret.yaml.
    for host in ["auth.test", "nginx-auth.test"] {
        let r = get(host, "/").send(port);
        findings.check(
            &format!("{host}: no credentials gets 401 with a realm"),
            r.status == 401
                && r.header("www-authenticate")
                    .is_some_and(|h| h.contains("realm=")),
            &r,
        );
        let r = get(host, "/")
            .header("authorization", "Basic YWxpY2U6czNjcmV0")
            .send(port);
        findings.check(
            &format!("{host}: alice's credentials reach the backend"),
            r.status == 200 && r.backend() == "web",
            &r,
        );
        let r = get(host, "/")
            .header("authorization", "Basic Ym9iOndyb25n")
            .send(port);
        findings.check(
            &format!("{host}: a wrong password gets 401"),
            r.status == 401,
            &r,
        );
    }
    let r = get("auth.test", "/").send(port);
    findings.check(
        "auth-realm names the realm",
        r.header("www-authenticate") == Some("Basic realm=\"Staff only\""),
        &r,
    );
    let r = get("auth-digest.test", "/").send(port);
    findings.check(
        "an unsupported auth-type denies everyone (fail closed)",
        r.status == 403,
        &r,
    );

    let statuses: Vec<u16> = (0..5)
        .map(|_| get("rate.test", "/").send(port).status)
        .collect();
    if statuses != [200, 200, 200, 429, 429] {
        findings.0.push(format!(
            "rate-limit-requests 3 per 1m with status 429: got {statuses:?}"
        ));
    }
    // limit-rps 1: a burst of five (1 × ingress-nginx's burst multiplier) within a second.
    let statuses: Vec<u16> = (0..8)
        .map(|_| get("rps.test", "/").send(port).status)
        .collect();
    if !statuses.contains(&503) || statuses[0] != 200 {
        findings.0.push(format!(
            "limit-rps 1 refuses a burst past five with 503: got {statuses:?}"
        ));
    }
    // limit-rpm 1: five requests (the burst) within the minute, then 503.
    let statuses: Vec<u16> = (0..7)
        .map(|_| get("rpm.test", "/").send(port).status)
        .collect();
    if statuses != [200, 200, 200, 200, 200, 503, 503] {
        findings.0.push(format!(
            "limit-rpm 1 allows a burst of five a minute, then 503: got {statuses:?}"
        ));
    }
    // limit-connections 1: a second request while the first (two seconds long) is in
    // progress gets 503; once it has finished, the next gets through.
    let slow = std::thread::spawn(move || get("conns.test", "/sleep").send(port).status);
    eventually(
        "the slow request to reach the backend",
        Duration::from_secs(10),
        || web.received("/sleep").then_some(()),
    );
    let during = get("conns.test", "/").send(port).status;
    let first = slow.join().expect("the slow request");
    // HAProxy counts the first connection until it has seen the client close it, a moment
    // after the client has read the answer: the next request may be refused until then.
    let started = std::time::Instant::now();
    let after = loop {
        let status = get("conns.test", "/").send(port).status;
        if status != 503 || started.elapsed() > Duration::from_secs(2) {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if (first, during, after) != (200, 503, 200) {
        findings.0.push(format!(
            "limit-connections 1: the slow request, one beside it, one after: got {:?}",
            (first, during, after)
        ));
    }

    let r = get("body.test", "/")
        .method("POST")
        .body("x".repeat(2000))
        .send(port);
    findings.check(
        "proxy-body-size 1k refuses a 2000-byte body with 413",
        r.status == 413,
        &r,
    );
    let r = get("body.test", "/")
        .method("POST")
        .body("x".repeat(500))
        .send(port);
    findings.check(
        "proxy-body-size 1k admits a 500-byte body",
        r.status == 200,
        &r,
    );

    let log = local.log_text();
    for reason in [
        "annotation haproxy.org/allow-list: \"10.0.0.0/8, 127.0.0.300\" is not a list of IP addresses or CIDRs ('127.0.0.300'); every request is denied (fail closed)",
        "annotation nginx.ingress.kubernetes.io/auth-type: \"digest\" is not one of basic-auth, basic; every request is denied (fail closed)",
    ] {
        if !log.contains(reason) {
            findings
                .0
                .push(format!("the log names the invalid value: {reason}"));
        }
    }
    findings.assert_none(&local);
}

/// The body of a refusal haproxy answered itself (no backend reached).
fn web_untouched(response: &Response) -> bool {
    response.header("x-backend").is_none()
}

#[test]
fn redirect_annotations_answer_with_the_documented_status_and_location() {
    let web = echo("web", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    let ingresses = [
        ("ssl", json!({"haproxy.org/ssl-redirect": "true"})),
        (
            "ssl-coded",
            json!({"haproxy.org/ssl-redirect": "true", "haproxy.org/ssl-redirect-code": "301",
                             "haproxy.org/ssl-redirect-port": "8443"}),
        ),
        ("ssl-off", json!({"haproxy.org/ssl-redirect": "false"})),
        (
            "nginx-ssl",
            json!({"nginx.ingress.kubernetes.io/ssl-redirect": "true"}),
        ),
        (
            "nginx-force",
            json!({"nginx.ingress.kubernetes.io/force-ssl-redirect": "true"}),
        ),
        (
            "elsewhere",
            json!({"haproxy.org/request-redirect": "other.example:8080",
                             "haproxy.org/request-redirect-code": "307"}),
        ),
        (
            "moved",
            json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.example/landing"}),
        ),
        (
            "moved-308",
            json!({"nginx.ingress.kubernetes.io/permanent-redirect": "https://new.example/",
                             "nginx.ingress.kubernetes.io/permanent-redirect-code": "308"}),
        ),
        (
            "temporal",
            json!({"nginx.ingress.kubernetes.io/temporal-redirect": "https://maintenance.example/"}),
        ),
        (
            "approot",
            json!({"nginx.ingress.kubernetes.io/app-root": "/app"}),
        ),
        (
            "temporal-307",
            json!({"nginx.ingress.kubernetes.io/temporal-redirect": "https://maintenance.example/",
                   "nginx.ingress.kubernetes.io/temporal-redirect-code": "307"}),
        ),
    ];
    for (name, annotations) in &ingresses {
        objects.push(ingress(
            name,
            &format!("{name}.test"),
            "web",
            annotations.clone(),
        ));
    }
    // TLS-terminated hosts, to see the redirect stop once the request is HTTPS.
    objects.push(ingress(
        "ssl-tls",
        "redirect.secure.example",
        "web",
        json!({"haproxy.org/ssl-redirect": "true"}),
    ));
    // from-to-www-redirect both ways, over HTTPS too, and yielding to a route of the very
    // host and path that another Ingress serves.
    let www = json!({"nginx.ingress.kubernetes.io/from-to-www-redirect": "true"});
    objects.push(ingress("www", "www.shop.test", "web", www.clone()));
    objects.push(ingress("bare", "blog.test", "web", www.clone()));
    objects.push(ingress("bare-tls", "secure.example", "web", www));
    let mut api_only = ingress("api-only", "shop.test", "web", json!({}));
    api_only["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("/api");
    objects.push(api_only);
    let local = start(&objects, "ssl-off.test");
    let port = local.http;
    let mut findings = Findings::default();
    let expect = |findings: &mut Findings,
                  what: &str,
                  host: &str,
                  path: &str,
                  status: u16,
                  location: &str| {
        let r = get(host, path).send(port);
        findings.check(
            what,
            r.status == status && r.header("location") == Some(location) && web_untouched(&r),
            &r,
        );
    };
    expect(
        &mut findings,
        "ssl-redirect: 302 to https, path kept",
        "ssl.test",
        "/a?b=1",
        302,
        "https://ssl.test/a?b=1",
    );
    expect(
        &mut findings,
        "ssl-redirect-code 301 and -port 8443",
        "ssl-coded.test",
        "/a",
        301,
        "https://ssl-coded.test:8443/a",
    );
    expect(
        &mut findings,
        "nginx ssl-redirect: 308",
        "nginx-ssl.test",
        "/x",
        308,
        "https://nginx-ssl.test/x",
    );
    expect(
        &mut findings,
        "nginx force-ssl-redirect: 308",
        "nginx-force.test",
        "/x",
        308,
        "https://nginx-force.test/x",
    );
    expect(
        &mut findings,
        "request-redirect with code 307 keeps the path",
        "elsewhere.test",
        "/p?q",
        307,
        "http://other.example:8080/p?q",
    );
    expect(
        &mut findings,
        "permanent-redirect: 301 to the URL",
        "moved.test",
        "/old",
        301,
        "https://new.example/landing",
    );
    expect(
        &mut findings,
        "permanent-redirect-code 308",
        "moved-308.test",
        "/",
        308,
        "https://new.example/",
    );
    expect(
        &mut findings,
        "temporal-redirect: 302",
        "temporal.test",
        "/",
        302,
        "https://maintenance.example/",
    );
    expect(
        &mut findings,
        "temporal-redirect-code 307",
        "temporal-307.test",
        "/x",
        307,
        "https://maintenance.example/",
    );
    expect(
        &mut findings,
        "app-root: / goes to /app",
        "approot.test",
        "/",
        302,
        "/app",
    );
    let r = get("approot.test", "/app").send(port);
    findings.check(
        "app-root: other paths are served",
        r.status == 200 && r.received_request_line() == "GET /app HTTP/1.1",
        &r,
    );
    let r = get("ssl-off.test", "/").send(port);
    findings.check(
        "ssl-redirect false serves plain HTTP",
        r.status == 200 && r.backend() == "web",
        &r,
    );
    let r = get("redirect.secure.example", "/s").send_tls(local.https);
    findings.check(
        "ssl-redirect does not redirect HTTPS",
        r.status == 200 && r.backend() == "web",
        &r,
    );

    expect(
        &mut findings,
        "from-to-www-redirect: the bare name goes to the www host, URI kept",
        "shop.test",
        "/a/?q=1",
        308,
        "http://www.shop.test/a/?q=1",
    );
    expect(
        &mut findings,
        "from-to-www-redirect: the port of the Host header is kept",
        "shop.test:8080",
        "/x",
        308,
        "http://www.shop.test:8080/x",
    );
    expect(
        &mut findings,
        "from-to-www-redirect: the www name goes to the bare host",
        "WWW.Blog.test",
        "/",
        308,
        "http://blog.test/",
    );
    for (what, host, path) in [
        (
            "from-to-www-redirect: the host itself is served",
            "www.shop.test",
            "/a",
        ),
        (
            "from-to-www-redirect: another Ingress's route of the other name wins",
            "shop.test",
            "/api/v1",
        ),
    ] {
        let r = get(host, path).send(port);
        findings.check(what, r.status == 200 && r.backend() == "web", &r);
    }
    let r = get("www.ssl-off.test", "/").send(port);
    findings.check(
        "without from-to-www-redirect the other name is not routed",
        r.status == 404,
        &r,
    );
    let r = get("www.secure.example", "/s?t").send_tls(local.https);
    findings.check(
        "from-to-www-redirect over HTTPS keeps the scheme",
        r.status == 308 && r.header("location") == Some("https://secure.example/s?t"),
        &r,
    );
    findings.assert_none(&local);
}

#[test]
fn request_and_response_annotations_change_what_the_backend_and_the_client_see() {
    let web = echo("web", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    let ingresses = [
        ("host", json!({"haproxy.org/set-host": "upstream.example"})),
        (
            "vhost",
            json!({"nginx.ingress.kubernetes.io/upstream-vhost": "internal.example:8080"}),
        ),
        (
            "headers",
            json!({"haproxy.org/request-set-header": "X-One 1\nX-Quoted a \"b\" $HOME 100% %[src]",
                           "haproxy.org/response-set-header": "X-Served-By haptor\nCache-Control no-store"}),
        ),
        (
            "rewrite",
            json!({"haproxy.org/path-rewrite": "^/api/(.*) /v2/\\1"}),
        ),
        ("rewrite-all", json!({"haproxy.org/path-rewrite": "/fixed"})),
        (
            "target",
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/"}),
        ),
        (
            "prefix",
            json!({"nginx.ingress.kubernetes.io/x-forwarded-prefix": "/shop"}),
        ),
        ("noxff", json!({"haproxy.org/forwarded-for": "false"})),
        (
            "cors",
            json!({"haproxy.org/cors-enable": "true",
                        "haproxy.org/cors-allow-origin": "https://app.example",
                        "haproxy.org/cors-allow-methods": "GET, POST",
                        "haproxy.org/cors-allow-headers": "X-Token",
                        "haproxy.org/cors-allow-credentials": "true",
                        "haproxy.org/cors-max-age": "60"}),
        ),
        (
            "nginx-cors",
            json!({"nginx.ingress.kubernetes.io/enable-cors": "true"}),
        ),
    ];
    for (name, annotations) in &ingresses {
        objects.push(ingress(
            name,
            &format!("{name}.test"),
            "web",
            annotations.clone(),
        ));
    }
    objects.push(ingress("plain", "plain.test", "web", json!({})));
    objects.push(ingress(
        "hsts",
        "hsts.secure.example",
        "web",
        json!({"haproxy.org/hsts": "true", "haproxy.org/hsts-max-age": "600",
               "haproxy.org/hsts-include-subdomains": "true", "haproxy.org/hsts-preload": "true"}),
    ));
    let local = start(&objects, "plain.test");
    let port = local.http;
    let mut findings = Findings::default();

    let r = get("host.test", "/").send(port);
    findings.check(
        "set-host: the backend receives Host upstream.example",
        r.received_header("host", "upstream.example"),
        &r,
    );
    let r = get("vhost.test", "/").send(port);
    findings.check(
        "upstream-vhost: the backend receives Host internal.example:8080",
        r.received_header("host", "internal.example:8080"),
        &r,
    );
    let r = get("headers.test", "/").send(port);
    findings.check(
        "request-set-header: X-One 1",
        r.received_header("x-one", "1"),
        &r,
    );
    findings.check(
        "request-set-header: a value with quotes, $ and % arrives verbatim",
        r.received_header("x-quoted", "a \"b\" $HOME 100% %[src]"),
        &r,
    );
    findings.check(
        "response-set-header: the client gets both headers",
        r.header("x-served-by") == Some("haptor") && r.header("cache-control") == Some("no-store"),
        &r,
    );
    let r = get("rewrite.test", "/api/users?id=1").send(port);
    findings.check(
        "path-rewrite with a group: /api/users → /v2/users, query kept",
        r.received_request_line() == "GET /v2/users?id=1 HTTP/1.1",
        &r,
    );
    let r = get("rewrite.test", "/other").send(port);
    findings.check(
        "path-rewrite leaves non-matching paths",
        r.received_request_line() == "GET /other HTTP/1.1",
        &r,
    );
    let r = get("rewrite-all.test", "/any/thing").send(port);
    findings.check(
        "path-rewrite with only a replacement replaces the whole path",
        r.received_request_line() == "GET /fixed HTTP/1.1",
        &r,
    );
    let r = get("target.test", "/some/path?x=1").send(port);
    findings.check(
        "rewrite-target /: the backend receives /, query kept",
        r.received_request_line() == "GET /?x=1 HTTP/1.1",
        &r,
    );
    let r = get("prefix.test", "/").send(port);
    findings.check(
        "x-forwarded-prefix: the backend receives X-Forwarded-Prefix /shop",
        r.received_header("x-forwarded-prefix", "/shop"),
        &r,
    );
    let r = get("plain.test", "/")
        .header("x-forwarded-for", "203.0.113.7")
        .send(port);
    findings.check(
        "by default the backend receives the client's address appended to X-Forwarded-For",
        r.received_header("x-forwarded-for", "203.0.113.7, 127.0.0.1")
            || r.received_header("x-forwarded-for", "127.0.0.1"),
        &r,
    );
    let r = get("noxff.test", "/").send(port);
    findings.check(
        "forwarded-for false: no X-Forwarded-For is added",
        !r.received_any("x-forwarded-for"),
        &r,
    );

    let preflight = get("cors.test", "/resource")
        .method("OPTIONS")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST");
    let r = preflight.send(port);
    findings.check(
        "CORS preflight from an allowed origin: 204 from haproxy with the allow headers",
        r.status == 204
            && web_untouched(&r)
            && r.header("access-control-allow-origin") == Some("https://app.example")
            && r.header("access-control-allow-methods") == Some("GET, POST")
            && r.header("access-control-allow-headers") == Some("X-Token")
            && r.header("access-control-max-age") == Some("60")
            && r.header("access-control-allow-credentials") == Some("true"),
        &r,
    );
    let r = get("cors.test", "/")
        .header("origin", "https://app.example")
        .send(port);
    findings.check(
        "CORS: a response to an allowed origin carries Access-Control-Allow-Origin",
        r.status == 200 && r.header("access-control-allow-origin") == Some("https://app.example"),
        &r,
    );
    let r = get("cors.test", "/")
        .header("origin", "https://evil.example")
        .send(port);
    findings.check(
        "CORS: another origin gets no Access-Control-Allow-Origin",
        r.status == 200 && r.header("access-control-allow-origin").is_none(),
        &r,
    );
    let r = get("cors.test", "/resource")
        .method("OPTIONS")
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send(port);
    findings.check(
        "CORS: a preflight from another origin is not answered by haproxy",
        r.backend() == "web",
        &r,
    );
    let r = get("nginx-cors.test", "/")
        .header("origin", "https://any.example")
        .send(port);
    findings.check(
        "enable-cors (nginx) allows every origin with *",
        r.header("access-control-allow-origin") == Some("*"),
        &r,
    );

    let r = get("hsts.secure.example", "/").send_tls(local.https);
    findings.check(
        "hsts over HTTPS",
        r.header("strict-transport-security") == Some("max-age=600; includeSubDomains; preload"),
        &r,
    );
    let r = get("hsts.secure.example", "/").send(port);
    findings.check(
        "no hsts over plain HTTP",
        r.status == 200 && r.header("strict-transport-security").is_none(),
        &r,
    );
    findings.assert_none(&local);
}

#[test]
fn backend_annotations_shape_how_haproxy_talks_to_the_servers() {
    let slow = echo("slow", EchoOptions::default());
    let (a, b) = (
        echo("a", EchoOptions::default()),
        echo("b", EchoOptions::default()),
    );
    let proxied = echo("proxied", EchoOptions::default());
    let sick = echo(
        "sick",
        EchoOptions {
            sick: true,
            ..EchoOptions::default()
        },
    );
    let mut objects = service("slow", &[slow.port]);
    objects.extend(service("pair", &[a.port, b.port]));
    objects.extend(service("proxied", &[proxied.port]));
    objects.extend(service("sick", &[sick.port]));
    objects.extend(secrets());
    let ingresses = [
        (
            "impatient",
            "slow",
            json!({"haproxy.org/timeout-server": "1s"}),
        ),
        ("patient", "slow", json!({})),
        (
            "nginx-impatient",
            "slow",
            json!({"nginx.ingress.kubernetes.io/proxy-read-timeout": "1"}),
        ),
        (
            "by-user",
            "pair",
            json!({"haproxy.org/load-balance": "hdr(X-User)"}),
        ),
        (
            "hashed",
            "pair",
            json!({"nginx.ingress.kubernetes.io/upstream-hash-by": "$http_x_user"}),
        ),
        ("spread", "pair", json!({})),
        (
            "sticky",
            "pair",
            json!({"haproxy.org/cookie-persistence": "SRV"}),
        ),
        (
            "affinity",
            "pair",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                                    "nginx.ingress.kubernetes.io/session-cookie-name": "route",
                                    "nginx.ingress.kubernetes.io/session-cookie-max-age": "3600",
                                    "nginx.ingress.kubernetes.io/session-cookie-samesite": "Lax"}),
        ),
        (
            "proxy",
            "proxied",
            json!({"haproxy.org/send-proxy-protocol": "proxy-v1"}),
        ),
        (
            "checked",
            "sick",
            json!({"haproxy.org/check-http": "/healthz", "haproxy.org/check-interval": "300ms"}),
        ),
        ("unchecked", "sick", json!({})),
        (
            "limited",
            "pair",
            json!({"haproxy.org/pod-maxconn": "1", "haproxy.org/timeout-queue": "5s"}),
        ),
        (
            "first-free",
            "pair",
            json!({"haproxy.org/load-balance": "first"}),
        ),
        (
            "nginx-send",
            "slow",
            json!({"nginx.ingress.kubernetes.io/proxy-send-timeout": "1"}),
        ),
        (
            "secure-affinity",
            "pair",
            json!({"nginx.ingress.kubernetes.io/affinity": "cookie",
                   "nginx.ingress.kubernetes.io/session-cookie-secure": "true",
                   "nginx.ingress.kubernetes.io/session-cookie-path": "/shop",
                   "nginx.ingress.kubernetes.io/session-cookie-expires": "7200"}),
        ),
        (
            "least-busy",
            "pair",
            json!({"nginx.ingress.kubernetes.io/load-balance": "least_conn"}),
        ),
    ];
    for (name, service, annotations) in &ingresses {
        objects.push(ingress(
            name,
            &format!("{name}.test"),
            service,
            annotations.clone(),
        ));
    }
    let local = start(&objects, "patient.test");
    let port = local.http;
    let mut findings = Findings::default();

    let r = get("impatient.test", "/sleep").send(port);
    findings.check(
        "timeout-server 1s: a server silent for 2s gives 504",
        r.status == 504,
        &r,
    );
    let r = get("nginx-impatient.test", "/sleep").send(port);
    findings.check(
        "proxy-read-timeout 1: a server silent for 2s gives 504",
        r.status == 504,
        &r,
    );
    let r = get("nginx-send.test", "/sleep").send(port);
    findings.check(
        "proxy-send-timeout 1 (without proxy-read-timeout): a server silent for 2s gives 504",
        r.status == 504,
        &r,
    );
    let r = get("patient.test", "/sleep").send(port);
    findings.check(
        "without it the default 30s timeout waits",
        r.status == 200 && r.backend() == "slow",
        &r,
    );

    for host in ["by-user.test", "hashed.test"] {
        let reached: BTreeSet<String> = (0..8)
            .map(|_| {
                get(host, "/")
                    .header("x-user", "alice")
                    .send(port)
                    .backend()
                    .to_string()
            })
            .collect();
        if reached.len() != 1 {
            findings.0.push(format!(
                "{host}: one X-User always reaches one server, got {reached:?}"
            ));
        }
    }
    let reached: BTreeSet<String> = (0..8)
        .map(|_| get("spread.test", "/").send(port).backend().to_string())
        .collect();
    if reached.len() != 2 {
        findings.0.push(format!(
            "round robin (the default) reaches both servers, got {reached:?}"
        ));
    }
    let reached: BTreeSet<String> = (0..8)
        .map(|_| get("first-free.test", "/").send(port).backend().to_string())
        .collect();
    if reached.len() != 1 {
        findings.0.push(format!(
            "load-balance first: one request at a time always reaches the first server, got {reached:?}"
        ));
    }

    let first = get("sticky.test", "/").send(port);
    let cookie = first.header("set-cookie").unwrap_or_default().to_string();
    findings.check(
        "cookie-persistence inserts the SRV cookie",
        cookie.starts_with("SRV="),
        &first,
    );
    let value = cookie.split(';').next().unwrap_or_default().to_string();
    let reached: BTreeSet<String> = (0..8)
        .map(|_| {
            get("sticky.test", "/")
                .header("cookie", value.clone())
                .send(port)
                .backend()
                .to_string()
        })
        .collect();
    if reached != BTreeSet::from([first.backend().to_string()]) {
        findings.0.push(format!(
            "with its cookie a client stays on {}, got {reached:?}",
            first.backend()
        ));
    }
    let r = get("affinity.test", "/").send(port);
    let cookie = r.header("set-cookie").unwrap_or_default();
    findings.check(
        "affinity cookie: the route cookie with Max-Age and SameSite, not Secure",
        cookie.starts_with("route=")
            && cookie.contains("Max-Age=3600")
            && cookie.contains("SameSite=Lax")
            && !cookie.contains("Secure"),
        &r,
    );
    let r = get("secure-affinity.test", "/").send(port);
    let cookie = r.header("set-cookie").unwrap_or_default();
    // HAProxy writes `path=/` first; a cookie's last Path attribute is the one a browser
    // keeps (RFC 6265, 5.3).
    findings.check(
        "session-cookie-secure, -path and -expires: a Secure INGRESSCOOKIE for /shop living 7200 s",
        cookie.starts_with("INGRESSCOOKIE=")
            && cookie.contains("Secure")
            && cookie.ends_with("Path=/shop")
            && cookie.contains("Max-Age=7200"),
        &r,
    );

    // least_conn: while one server is busy with a slow request, the next ones go to the
    // other; round robin (spread.test) would alternate.
    let slow_one = std::thread::spawn(move || get("least-busy.test", "/sleep").send(port));
    std::thread::sleep(Duration::from_millis(500));
    let during: BTreeSet<String> = (0..4)
        .map(|_| get("least-busy.test", "/").send(port).backend().to_string())
        .collect();
    let busy = slow_one
        .join()
        .expect("the slow request")
        .backend()
        .to_string();
    if during.len() != 1 || during.contains(&busy) {
        findings.0.push(format!(
            "load-balance least_conn: requests beside a slow one on {busy} reach the other server, got {during:?}"
        ));
    }

    let r = get("proxy.test", "/").send(port);
    findings.check(
        "send-proxy-protocol proxy-v1: the server receives a PROXY TCP4 line first",
        r.body
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("PROXY TCP4 127.0.0.1 ")),
        &r,
    );

    let r = eventually(
        "the failing health check to take the server out",
        Duration::from_secs(30),
        || {
            let r = get("checked.test", "/").send(port);
            (r.status == 503).then_some(r)
        },
    );
    findings.check(
        "check-http /healthz answered 503: the server is out, 503",
        r.status == 503 && web_untouched(&r),
        &r,
    );
    let r = get("unchecked.test", "/").send(port);
    findings.check(
        "without checks the same server still serves",
        r.status == 200 && r.backend() == "sick",
        &r,
    );

    // pod-maxconn 1: two slow requests at once to a pair of servers still both succeed
    // (each server takes one; the queue holds the rest).
    let handles: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(move || get("limited.test", "/sleep").send(port).status))
        .collect();
    let statuses: Vec<u16> = handles
        .into_iter()
        .map(|h| h.join().expect("a request"))
        .collect();
    if statuses.iter().any(|s| *s != 200) {
        findings.0.push(format!(
            "pod-maxconn 1 queues rather than refuses: got {statuses:?}"
        ));
    }
    let cfg = std::fs::read_to_string(local.work().join("haproxy.cfg")).unwrap_or_default();
    if !cfg.contains("default-server maxconn 1") {
        findings
            .0
            .push("pod-maxconn 1 sets maxconn on every server".into());
    }
    findings.assert_none(&local);
}

/// A CA and a server certificate it signed for `backend.test`, PEM: (CA certificate,
/// server chain, server key).
fn backend_pki() -> (String, String, String) {
    pki_for(&["backend.test"])
}

/// A CA and a server certificate it signed for `hosts`, PEM: (CA certificate, server
/// chain, server key).
fn pki_for(hosts: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct subjects: a leaf named like its issuer would look self-signed to OpenSSL.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "haptor test CA");
    let ca = ca_params.clone().self_signed(&ca_key).expect("a CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("a key");
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name.push(DnType::CommonName, hosts[0]);
    let cert = params.signed_by(&key, &issuer).expect("a certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A kubernetes.io/tls Secret holding `ca` as its `ca.crt` and the library's test pair as
/// its certificate and key (a client certificate, whose key must match for HAProxy to load
/// it).
fn ca_secret(name: &str, ca: &str) -> Value {
    let (cert, key) = test_certificate();
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": name, "namespace": "default"},
           "data": {"ca.crt": b64(ca), "tls.crt": b64(&cert), "tls.key": b64(&key)}})
}

#[test]
fn backend_tls_is_spoken_and_verified_against_the_annotated_ca() {
    let (ca, chain, key) = backend_pki();
    let (other_ca, _, _) = backend_pki();
    let tls = echo(
        "tls",
        EchoOptions {
            tls: Some((chain, key)),
            ..EchoOptions::default()
        },
    );
    let mut objects = service("tls", &[tls.port]);
    objects.extend(secrets());
    objects.push(ca_secret("backend-ca", &ca));
    objects.push(ca_secret("other-ca", &other_ca));
    let ingresses = [
        ("ssl", json!({"haproxy.org/server-ssl": "true"})),
        ("verified", json!({"haproxy.org/server-ca": "backend-ca"})),
        ("mismatched", json!({"haproxy.org/server-ca": "other-ca"})),
        (
            "missing-ca",
            json!({"haproxy.org/server-ca": "no-such-secret"}),
        ),
        (
            "nginx-https",
            json!({"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}),
        ),
        (
            "nginx-verified",
            json!({"nginx.ingress.kubernetes.io/proxy-ssl-secret": "default/backend-ca",
                                  "nginx.ingress.kubernetes.io/proxy-ssl-verify": "on"}),
        ),
        ("plain", json!({})),
    ];
    for (name, annotations) in &ingresses {
        objects.push(ingress(
            name,
            &format!("{name}.test"),
            "tls",
            annotations.clone(),
        ));
    }
    let local = start(&objects, "ssl.test");
    let port = local.http;
    let mut findings = Findings::default();
    for host in ["ssl.test", "verified.test", "nginx-https.test"] {
        let r = get(host, "/").send(port);
        findings.check(
            &format!("{host}: TLS to the server"),
            r.status == 200 && r.backend() == "tls",
            &r,
        );
    }
    // proxy-ssl-secret presents the Secret's certificate from HAProxy 3.0 on, which this
    // echo does not ask for; the CA check is what is seen.
    let r = get("nginx-verified.test", "/").send(port);
    findings.check(
        "proxy-ssl-verify on with the right CA",
        r.status == 200 && r.backend() == "tls",
        &r,
    );
    let r = get("mismatched.test", "/").send(port);
    findings.check(
        "server-ca naming another CA: the handshake fails, 503",
        r.status == 503 && web_untouched(&r),
        &r,
    );
    let r = get("missing-ca.test", "/").send(port);
    findings.check(
        "server-ca naming no Secret: 503, never an unverified connection",
        r.status == 503 && web_untouched(&r),
        &r,
    );
    let r = get("plain.test", "/").send(port);
    findings.check(
        "without an annotation haproxy speaks plain HTTP to a TLS server and fails",
        r.status != 200,
        &r,
    );
    if !local
        .log_text()
        .contains("annotation haproxy.org/server-ca: no kubernetes.io/tls Secret 'no-such-secret'")
    {
        findings
            .0
            .push("the log names the missing CA Secret".into());
    }
    findings.assert_none(&local);
}

#[test]
fn invalid_unknown_and_refused_annotations_are_named_and_the_rest_is_served() {
    let web = echo("web", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    objects.push(ingress(
        "mixed",
        "mixed.test",
        "web",
        json!({
            "haproxy.org/timeout-server": "-5s",
            "haproxy.org/request-set-header": "X-Good yes",
            "haproxy.org/set-host": "evil.example\n  http-request deny",
            "haproxy.org/response-set-header": "X-Bad\u{1}Header value",
            "haproxy.org/ssl-redirect-code": "200",
            "haproxy.org/no-such-annotation": "1",
            "haproxy.org/backend-config-snippet": "http-request deny",
            "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers \"X: y\";",
            "nginx.ingress.kubernetes.io/proxy-body-size": "lots",
            "nginx.ingress.kubernetes.io/mirror-target": "https://mirror.example/",
        }),
    ));
    let local = start(&objects, "mixed.test");
    let mut findings = Findings::default();
    let r = get("mixed.test", "/").send(local.http);
    findings.check(
        "the valid annotation applies and the invalid ones change nothing",
        r.status == 200
            && r.received_header("x-good", "yes")
            && r.received_header("host", "mixed.test"),
        &r,
    );
    let log = eventually(
        "the log to name what was left out",
        Duration::from_secs(30),
        || {
            let log = local.log_text();
            log.contains("Ingress default/mixed is served without some of its parts")
                .then_some(log)
        },
    );
    for reason in [
        "annotation haproxy.org/timeout-server: \"-5s\" is not a duration such as 30s or 500ms; it is left out",
        "annotation haproxy.org/set-host: ",
        "annotation haproxy.org/response-set-header: \"X-Bad",
        "annotation haproxy.org/ssl-redirect-code: \"200\" is not 301, 302, 303, 307 or 308",
        "annotation haproxy.org/no-such-annotation is not one haptor knows",
        "annotation haproxy.org/backend-config-snippet: configuration snippets are off",
        "annotation nginx.ingress.kubernetes.io/configuration-snippet is not supported: nginx syntax cannot be translated",
        "annotation nginx.ingress.kubernetes.io/proxy-body-size: \"lots\" is not a size",
        "annotation nginx.ingress.kubernetes.io/mirror-target is not supported",
    ] {
        if !log.contains(reason) {
            findings.0.push(format!("the log names: {reason}"));
        }
    }
    let cfg = std::fs::read_to_string(local.work().join("haproxy.cfg")).unwrap_or_default();
    if cfg.contains("evil.example") || cfg.contains("-5s") || cfg.contains("more_set_headers") {
        findings
            .0
            .push(format!("an invalid value reached haproxy.cfg:\n{cfg}"));
    }
    findings.assert_none(&local);
}

#[test]
fn canary_ingresses_take_requests_by_header_then_cookie_then_weight() {
    let (stable, canary, canary2) = (
        echo("stable", EchoOptions::default()),
        echo("canary", EchoOptions::default()),
        echo("canary2", EchoOptions::default()),
    );
    let mut objects = service("stable", &[stable.port]);
    objects.extend(service("canary", &[canary.port]));
    objects.extend(service("canary2", &[canary2.port]));
    objects.extend(secrets());
    objects.push(ingress("main", "shop.test", "stable", json!({})));
    objects.push(ingress(
        "shop-canary",
        "shop.test",
        "canary",
        json!({
        "nginx.ingress.kubernetes.io/canary": "true",
        "nginx.ingress.kubernetes.io/canary-weight": "30",
        "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
        "nginx.ingress.kubernetes.io/canary-by-cookie": "canary"}),
    ));
    objects.push(ingress("all", "all.test", "stable", json!({})));
    objects.push(ingress(
        "all-canary",
        "all.test",
        "canary",
        json!({
        "nginx.ingress.kubernetes.io/canary": "true",
        "nginx.ingress.kubernetes.io/canary-weight": "3",
        "nginx.ingress.kubernetes.io/canary-weight-total": "3"}),
    ));
    objects.push(ingress("api", "api.test", "stable", json!({})));
    objects.push(ingress(
        "api-canary",
        "api.test",
        "canary2",
        json!({
        "nginx.ingress.kubernetes.io/canary": "true",
        "nginx.ingress.kubernetes.io/canary-by-header": "X-Version",
        "nginx.ingress.kubernetes.io/canary-by-header-value": "v2"}),
    ));
    let local = start(&objects, "shop.test");
    let port = local.http;
    let mut findings = Findings::default();

    // A weight of 30 over 300 requests: 90 expected. The count is binomial (standard
    // deviation 7.9; 15 runs against HAProxy 3.0 spread 72 to 110, a deviation of about
    // 10), so the band is five observed deviations each way (40 to 140): a correct weight
    // falls outside it far less than once in a million runs, while a weight that is
    // ignored (0 or 300) or read as an even split (150) never falls inside.
    let to_canary = (0..300)
        .filter(|_| get("shop.test", "/").send(port).backend() == "canary")
        .count();
    eprintln!("canary-weight 30: {to_canary} of 300 requests reached the canary");
    if !(40..=140).contains(&to_canary) {
        findings.0.push(format!(
            "canary-weight 30: {to_canary} of 300 requests reached the canary, not 90 ± 50"
        ));
    }
    let backends = |request: &dyn Fn() -> Response| -> BTreeSet<String> {
        (0..20).map(|_| request().backend().to_string()).collect()
    };
    let always = backends(&|| {
        get("shop.test", "/")
            .header("x-canary", "always")
            .send(port)
    });
    let never = backends(&|| get("shop.test", "/").header("x-canary", "never").send(port));
    let cookie = backends(&|| {
        get("shop.test", "/")
            .header("cookie", "canary=always")
            .send(port)
    });
    let header_over_cookie = backends(&|| {
        get("shop.test", "/")
            .header("x-canary", "never")
            .header("cookie", "canary=always")
            .send(port)
    });
    let whole_weight = backends(&|| get("all.test", "/").send(port));
    let by_value = backends(&|| get("api.test", "/").header("x-version", "v2").send(port));
    let other_value = backends(&|| get("api.test", "/").header("x-version", "v1").send(port));
    let expected = |name: &str| BTreeSet::from([name.to_string()]);
    for (what, got, want) in [
        ("canary-by-header always", always, expected("canary")),
        ("canary-by-header never", never, expected("stable")),
        ("canary-by-cookie always", cookie, expected("canary")),
        (
            "the header decides before the cookie",
            header_over_cookie,
            expected("stable"),
        ),
        ("canary-by-header-value v2", by_value, expected("canary2")),
        (
            "canary-weight 3 of canary-weight-total 3: always the canary",
            whole_weight,
            expected("canary"),
        ),
        (
            "another header value, no weight: never the canary",
            other_value,
            expected("stable"),
        ),
    ] {
        if got != want {
            findings
                .0
                .push(format!("{what}: reached {got:?}, expected {want:?}"));
        }
    }
    findings.assert_none(&local);
}

/// The subject of the certificate haproxy on `port` presents for SNI `host` (openssl
/// s_client; `./scripts/test` installs openssl).
fn certificate_subject(port: u16, host: &str) -> String {
    let output = std::process::Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", host])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_default()
        .to_string()
}

/// Sets the library's extraContext not_found_page (HTML) and error_pages (a JSON object)
/// in the folder's config, as a user does.
fn with_error_pages(local: &Local, not_found_page: &str, error_pages: &str) {
    let library =
        std::fs::read_to_string(local::repo("deploy/library/ingress.yaml")).expect("the library");
    assert!(library.contains("    not_found_page: \"\"\n    "));
    let config = local
        .read("config.yaml")
        .replace(
            "    not_found_page: \"\"\n",
            &format!("    not_found_page: \"{not_found_page}\"\n"),
        )
        .replace(
            "    error_pages: {}\n",
            &format!("    error_pages: {error_pages}\n"),
        );
    local.write("config.yaml", &config);
}

#[test]
fn haptor_local_presents_its_default_certificate_and_the_configured_error_pages() {
    let web = echo("web", EchoOptions::default());
    let slow = echo("slow", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(service("slow", &[slow.port]));
    objects.extend(secrets());
    objects.push(ingress("web", "hsts.secure.example", "web", json!({})));
    objects.push(ingress(
        "slow",
        "slow.test",
        "slow",
        json!({"haproxy.org/timeout-server": "1s"}),
    ));
    let local = quickstart_with(&objects).start();
    with_error_pages(
        &local,
        "<html><body>Nothing here</body></html>",
        r#"{"504": "<html><body>Too slow</body></html>"}"#,
    );
    local.wait_ready(Duration::from_secs(60));
    let mut findings = Findings::default();
    let r = eventually("the 404 page", Duration::from_secs(60), || {
        let r = get("nowhere.test", "/").send(local.http);
        r.body.contains("Nothing here").then_some(r)
    });
    findings.check(
        "no route: 404 with the configured page",
        r.status == 404 && r.header("content-type") == Some("text/html"),
        &r,
    );
    let r = get("slow.test", "/sleep").send(local.http);
    findings.check(
        "an error haproxy answers itself (504) uses the configured page",
        r.status == 504 && r.body.contains("Too slow"),
        &r,
    );
    let subject = certificate_subject(local.https, "unknown.test");
    if !subject.contains("haptor default certificate") {
        findings.0.push(format!(
            "an unknown SNI gets the default certificate, got subject '{subject}'"
        ));
    }
    let subject = certificate_subject(local.https, "hsts.secure.example");
    if !subject.contains("secure.example") {
        findings.0.push(format!(
            "an Ingress host gets its own certificate, got subject '{subject}'"
        ));
    }
    let generated = local.work().join("default-certificate.yaml");
    let first = std::fs::read_to_string(&generated).unwrap_or_default();
    if !first.contains("type: kubernetes.io/tls") {
        findings.0.push(format!(
            "the default certificate is kept in {}",
            generated.display()
        ));
    }
    findings.assert_none(&local);
}

#[test]
fn ssl_passthrough_hands_tls_to_the_service_by_sni_and_terminates_the_rest() {
    let (ca, chain, key) = pki_for(&["pass.test", "nginx-pass.test"]);
    let tls = echo(
        "passthrough",
        EchoOptions {
            tls: Some((chain, key)),
            ..EchoOptions::default()
        },
    );
    let web = echo("web", EchoOptions::default());
    let mut objects = service("tls", &[tls.port]);
    objects.extend(service("web", &[web.port]));
    objects.extend(secrets());
    objects.push(ingress(
        "pass",
        "pass.test",
        "tls",
        json!({"haproxy.org/ssl-passthrough": "true"}),
    ));
    objects.push(ingress(
        "nginx-pass",
        "nginx-pass.test",
        "tls",
        json!({"nginx.ingress.kubernetes.io/ssl-passthrough": "true"}),
    ));
    objects.push(ingress(
        "terminated",
        "web.secure.example",
        "web",
        json!({}),
    ));
    let setup = quickstart_with(&objects);
    let local = setup.start();
    let config = local.read("config.yaml");
    assert!(
        config.contains("    ssl_passthrough: false\n"),
        "the library has the switch"
    );
    // Off first: the annotation is left out and HAProxy terminates TLS for that host.
    local.wait_ready(Duration::from_secs(60));
    let log = eventually(
        "the passthrough annotation to be reported off",
        Duration::from_secs(30),
        || {
            let log = local.log_text();
            log.contains("annotation haproxy.org/ssl-passthrough: SSL passthrough is off")
                .then_some(log)
        },
    );
    assert!(
        log.contains("Ingress default/pass is served without some of its parts"),
        "{log}"
    );
    local.write(
        "config.yaml",
        &config.replace(
            "    ssl_passthrough: false\n",
            "    ssl_passthrough: true\n",
        ),
    );
    let mut findings = Findings::default();
    let r = eventually(
        "TLS passed through to the Service",
        Duration::from_secs(60),
        || {
            let r = std::panic::catch_unwind(|| {
                get("pass.test", "/p").send_tls_trusting(local.https, &ca)
            })
            .ok()?;
            (r.backend() == "passthrough").then_some(r)
        },
    );
    findings.check(
        "the Service terminated TLS itself: its certificate verified, its echo of the request unchanged",
        r.status == 200 && r.received_request_line() == "GET /p HTTP/1.1" && !r.received_any("x-forwarded-proto"),
        &r,
    );
    let r = get("nginx-pass.test", "/").send_tls_trusting(local.https, &ca);
    findings.check(
        "nginx ssl-passthrough: the same",
        r.backend() == "passthrough",
        &r,
    );
    let r = get("web.secure.example", "/t").send_tls(local.https);
    findings.check(
        "another host's TLS is still terminated by HAProxy",
        r.status == 200 && r.backend() == "web" && r.received_header("x-forwarded-proto", "https"),
        &r,
    );
    let r = get("pass.test", "/plain").send(local.http);
    findings.check(
        "plain HTTP to a passthrough host is routed by its paths",
        r.backend() == "passthrough" || r.status == 502 || r.status == 503,
        &r,
    );
    findings.assert_none(&local);
}

/// The quickstart folder's config with `annotation_defaults` replaced by `defaults`.
fn with_annotation_defaults(local: &Local, defaults: &str) -> String {
    let config = local.read("config.yaml");
    let start = config
        .find("    annotation_defaults:")
        .expect("the library's extraContext has annotation_defaults");
    let end = start + config[start..].find('\n').expect("a line");
    format!(
        "{}    annotation_defaults: {defaults}{}",
        &config[..start],
        &config[end..]
    )
}

#[test]
fn service_annotations_win_over_the_ingress_and_config_defaults_fill_in_the_rest() {
    let api = echo("api", EchoOptions::default());
    let web = echo("web", EchoOptions::default());
    let mut objects = service("api", &[api.port]);
    objects[0]["metadata"]["annotations"] = json!({
        "haproxy.org/request-set-header": "X-Team platform",
        "haproxy.org/auth-type": "basic-auth",
    });
    objects.extend(service("web", &[web.port]));
    objects.extend(secrets());
    objects.push(ingress("plain", "plain.test", "api", json!({})));
    objects.push(ingress(
        "own",
        "own.test",
        "api",
        json!({
            "haproxy.org/request-set-header": "X-Team ingress",
            "haproxy.org/response-set-header": "X-Said ingress",
        }),
    ));
    objects.push(ingress("web", "web.test", "web", json!({})));
    let setup = quickstart_with(&objects);
    let local = setup.start();
    local.write(
        "config.yaml",
        &with_annotation_defaults(
            &local,
            r#"{"haproxy.org/response-set-header": "X-Said default"}"#,
        ),
    );
    local.wait_ready(Duration::from_secs(60));
    eventually("the defaults deployed", Duration::from_secs(60), || {
        let r = get("web.test", "/").send(local.http);
        (r.header("x-said") == Some("default")).then_some(())
    });
    let mut findings = Findings::default();
    let r = get("plain.test", "/").send(local.http);
    findings.check(
        "the Service's annotation applies to its shared backend, and the default too",
        r.backend() == "api"
            && r.received_header("x-team", "platform")
            && r.header("x-said") == Some("default"),
        &r,
    );
    findings.check(
        "an Ingress-only annotation on a Service does nothing",
        r.status == 200 && r.header("www-authenticate").is_none(),
        &r,
    );
    let r = get("own.test", "/").send(local.http);
    findings.check(
        "the Service wins over the Ingress; the Ingress's own value wins over the default",
        r.backend() == "api"
            && r.received_header("x-team", "platform")
            && !r.received_header("x-team", "ingress")
            && r.header("x-said") == Some("ingress"),
        &r,
    );
    let r = get("web.test", "/").send(local.http);
    findings.check(
        "another Service's backend gets the default only",
        r.backend() == "web" && !r.received_any("x-team") && r.header("x-said") == Some("default"),
        &r,
    );
    let log = eventually(
        "the log to name the Service's left-out annotation",
        Duration::from_secs(30),
        || {
            let log = local.log_text();
            log.contains("Service default/api is served without some of its parts")
                .then_some(log)
        },
    );
    let reason =
        "annotation haproxy.org/auth-type is read on Ingresses only; on a Service it has no effect";
    if !log.contains(reason) {
        findings.0.push(format!("the log names: {reason}"));
    }

    // A default that is not valid is the config's error, named; the last good
    // configuration keeps serving.
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    local.write(
        "config.yaml",
        &with_annotation_defaults(
            &local,
            r#"{"haproxy.org/response-set-header": "X-Said default", "haproxy.org/timeout-server": "forever"}"#,
        ),
    );
    let error = eventually(
        "the invalid default to be reported",
        Duration::from_secs(30),
        || {
            let (_, errors) = local.debug_json("/debug/vars/errors")?;
            errors.as_array()?.iter().find_map(|record| {
                let at = u128::from(record["at_ms"].as_u64()?);
                let message = record["message"].as_str()?;
                (at + 50 >= since && message.contains("annotation_defaults"))
                    .then(|| message.to_string())
            })
        },
    );
    if !error.contains("haproxy.org/timeout-server") || !error.contains("forever") {
        findings.0.push(format!(
            "the error names the default and its value: {error}"
        ));
    }
    let r = get("plain.test", "/").send(local.http);
    findings.check(
        "the last good configuration keeps serving",
        r.backend() == "api" && r.header("x-said") == Some("default"),
        &r,
    );
    findings.assert_none(&local);
}

#[test]
fn server_alias_serves_the_ingress_rules_under_more_hosts_and_never_takes_another_ingress_host() {
    let web = echo("web", EchoOptions::default());
    let other = echo("other", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(service("other", &[other.port]));
    objects.extend(secrets());
    // "a-aliased" sorts before "owner": its alias of owner's host still loses.
    objects.push(ingress(
        "a-aliased",
        "shop.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/server-alias": "WWW.shop.test, owned.test"}),
    ));
    objects.push(ingress("owner", "owned.test", "other", json!({})));
    objects.push(ingress(
        "broken",
        "broken.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/server-alias": "bad alias!"}),
    ));
    let local = start(&objects, "www.shop.test");
    let mut findings = Findings::default();
    for (host, backend, why) in [
        ("shop.test", "web", "the Ingress's own host"),
        (
            "www.shop.test",
            "web",
            "an alias (written in capitals) routes as the host does",
        ),
        (
            "owned.test",
            "other",
            "another Ingress's own host wins over the alias",
        ),
        (
            "broken.test",
            "web",
            "an invalid alias leaves the Ingress served",
        ),
    ] {
        let r = get(host, "/x").send(local.http);
        findings.check(why, r.status == 200 && r.backend() == backend, &r);
    }
    let r = get("alias.test", "/").send(local.http);
    findings.check("no other host is aliased", r.status == 404, &r);
    let log = eventually(
        "the log to name the invalid alias",
        Duration::from_secs(30),
        || {
            let log = local.log_text();
            log.contains("Ingress default/broken is served without some of its parts")
                .then_some(log)
        },
    );
    if !log.contains("annotation nginx.ingress.kubernetes.io/server-alias: \"bad alias!\"") {
        findings
            .0
            .push("the log names the invalid server-alias".into());
    }
    findings.assert_none(&local);
}

#[test]
fn default_backend_stands_in_for_a_service_without_endpoints_and_custom_errors_get_the_configured_pages()
 {
    let (web, fallback) = (
        echo("web", EchoOptions::default()),
        echo("fallback", EchoOptions::default()),
    );
    let mut objects = service("web", &[web.port]);
    objects.extend(service("fallback", &[fallback.port]));
    // A Service whose pods are all gone: no EndpointSlice.
    objects.push(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "empty", "namespace": "default"},
        "spec": {"ports": [{"name": "http", "port": 80}]}}));
    objects.extend(secrets());
    let fallback_to = |name: &str| json!({"nginx.ingress.kubernetes.io/default-backend": name});
    objects.push(ingress(
        "down",
        "down.test",
        "empty",
        fallback_to("fallback"),
    ));
    objects.push(ingress("up", "up.test", "web", fallback_to("fallback")));
    objects.push(ingress(
        "lost",
        "lost.test",
        "empty",
        fallback_to("nowhere"),
    ));
    objects.push(ingress(
        "pages",
        "pages.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/custom-http-errors": "404, 503,504"}),
    ));
    objects.push(ingress("plain", "plain.test", "web", json!({})));
    let local = quickstart_with(&objects).start();
    with_error_pages(
        &local,
        "<html><body>Nothing here</body></html>",
        r#"{"503": "<html><body>Back soon</body></html>"}"#,
    );
    local.wait_ready(Duration::from_secs(60));
    let port = local.http;
    let mut findings = Findings::default();
    eventually("the configured pages", Duration::from_secs(60), || {
        let r = get("nowhere.test", "/").send(port);
        r.body.contains("Nothing here").then_some(())
    });
    let r = get("pages.test", "/status/503").send(port);
    findings.check(
        "custom-http-errors: a listed 503 gets the configured 503 page",
        r.status == 503 && r.body.contains("Back soon") && !r.body.contains("backend=web"),
        &r,
    );
    let r = get("pages.test", "/status/404").send(port);
    findings.check(
        "custom-http-errors: a listed 404 gets the configured not-found page",
        r.status == 404 && r.body.contains("Nothing here") && !r.body.contains("backend=web"),
        &r,
    );
    let r = get("pages.test", "/status/504").send(port);
    findings.check(
        "custom-http-errors: a listed status without a configured page gets HAProxy's",
        r.status == 504 && r.body.contains("504 Gateway Time-out"),
        &r,
    );
    for (what, host, path, status) in [
        (
            "custom-http-errors: an unlisted status is the Service's",
            "pages.test",
            "/status/500",
            500,
        ),
        (
            "custom-http-errors: a success is the Service's",
            "pages.test",
            "/",
            200,
        ),
        (
            "without custom-http-errors the Service's 503 passes",
            "plain.test",
            "/status/503",
            503,
        ),
    ] {
        let r = get(host, path).send(port);
        findings.check(
            what,
            r.status == status && r.body.contains("backend=web"),
            &r,
        );
    }

    let reached = |host: &str| -> BTreeSet<String> {
        (0..6)
            .map(|_| get(host, "/").send(port).backend().to_string())
            .collect()
    };
    for (what, host, want) in [
        (
            "default-backend answers for a Service without endpoints",
            "down.test",
            "fallback",
        ),
        (
            "default-backend stays out while the Service has endpoints",
            "up.test",
            "web",
        ),
    ] {
        let got = reached(host);
        if got != BTreeSet::from([want.to_string()]) {
            findings.0.push(format!("{what}: reached {got:?}"));
        }
    }
    let r = get("lost.test", "/").send(port);
    findings.check(
        "a default-backend Service that does not exist stands in for nothing",
        r.status == 503,
        &r,
    );
    let reason = "annotation nginx.ingress.kubernetes.io/default-backend: no Service 'nowhere' in namespace default";
    eventually(
        "the log to name the missing Service",
        Duration::from_secs(30),
        || local.log_text().contains(reason).then_some(()),
    );
    findings.assert_none(&local);
}

#[test]
fn the_access_log_records_each_request_with_the_captures_of_its_ingress() {
    let web = echo("web", EchoOptions::default());
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    objects.push(ingress(
        "traced",
        "traced.test",
        "web",
        json!({"haproxy.org/request-capture": "req.hdr(user-agent),lower\nurl_param(id)",
               "haproxy.org/request-capture-len": "5"}),
    ));
    objects.push(ingress("plain", "plain.test", "web", json!({})));
    let local = start(&objects, "plain.test");
    let mut findings = Findings::default();
    let r = get("traced.test", "/a?id=4242424")
        .header("user-agent", "Probe/1.0")
        .send(local.http);
    findings.check("the traced Ingress is served", r.status == 200, &r);
    let r = get("plain.test", "/b")
        .header("user-agent", "Probe/1.0")
        .send(local.http);
    findings.check("the plain Ingress is served", r.status == 200, &r);
    let log_file = local.work().join("haproxy.log");
    let lines = eventually(
        "haproxy to log both requests",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&log_file).unwrap_or_default();
            let traced = log
                .lines()
                .find(|l| l.contains("\"GET /a?id=4242424 HTTP/1.1\""))?;
            let plain = log.lines().find(|l| l.contains("\"GET /b HTTP/1.1\""))?;
            Some((traced.to_string(), plain.to_string()))
        },
    );
    let (traced, plain) = lines;
    for (what, ok) in [
        (
            "the traced request's line names its backend and status",
            traced.contains(" http ing_default_traced_web_80/SRV_1 ") && traced.contains(" 200 "),
        ),
        (
            "its captures are the lower-cased user agent and the id, each cut to 5 bytes",
            traced.contains("{probe|42424}"),
        ),
        (
            "the plain request's line leaves both captures empty",
            plain.contains("{|}") && plain.contains(" 200 "),
        ),
    ] {
        if !ok {
            findings.0.push(format!("{what}:\n  {traced}\n  {plain}"));
        }
    }
    findings.assert_none(&local);
}

#[test]
fn server_crt_presents_the_client_certificate_a_mutual_tls_server_requires() {
    let (ca, chain, key) = backend_pki();
    let (client_ca, client_cert, client_key) = pki_for(&["haptor-client"]);
    let mutual = echo(
        "mutual",
        EchoOptions {
            tls: Some((chain, key)),
            client_ca: Some(client_ca),
            ..EchoOptions::default()
        },
    );
    let mut objects = service("mutual", &[mutual.port]);
    objects.extend(secrets());
    objects.push(ca_secret("backend-ca", &ca));
    objects.push(
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "client-cert", "namespace": "default"},
        "data": {"tls.crt": b64(&client_cert), "tls.key": b64(&client_key)}}),
    );
    objects.push(ingress(
        "with-cert",
        "with-cert.test",
        "mutual",
        json!({"haproxy.org/server-ca": "backend-ca", "haproxy.org/server-crt": "client-cert"}),
    ));
    objects.push(ingress(
        "without-cert",
        "without-cert.test",
        "mutual",
        json!({"haproxy.org/server-ca": "backend-ca"}),
    ));
    let local = start(&objects, "without-cert.test");
    let mut findings = Findings::default();
    let r = get("without-cert.test", "/").send(local.http);
    // Over TLS 1.3 the server's refusal arrives after HAProxy sent the request: 502, else 503.
    findings.check(
        "without server-crt the server refuses the connection: 502 or 503",
        (r.status == 502 || r.status == 503) && r.backend() == "none",
        &r,
    );
    let r = get("with-cert.test", "/").send(local.http);
    if crate::support::haproxy_line() >= "3.0".parse().expect("a version") {
        findings.check(
            "server-crt: the server accepts HAProxy's client certificate",
            r.status == 200 && r.backend() == "mutual",
            &r,
        );
    } else {
        findings.check(
            "server-crt on HAProxy 2.6: 503, never a connection without the certificate",
            r.status == 503 && r.body.contains("backend client certificate unsupported"),
            &r,
        );
        if !local
            .log_text()
            .contains("annotation haproxy.org/server-crt: HAProxy 2.6 cannot load")
        {
            findings
                .0
                .push("the log names why server-crt is left out on 2.6".into());
        }
    }
    findings.assert_none(&local);
}

#[test]
fn regular_expression_paths_route_and_rewrite_with_their_groups_as_ingress_nginx_documents() {
    let (web, other) = (
        echo("web", EchoOptions::default()),
        echo("other", EchoOptions::default()),
    );
    let mut objects = service("web", &[web.port]);
    objects.extend(service("other", &[other.port]));
    objects.extend(secrets());
    let with_path = |mut ingress: Value, path: &str, path_type: &str| {
        ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!(path);
        ingress["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = json!(path_type);
        ingress
    };
    // ingress-nginx's rewrite example, beside a Prefix and an Exact path other Ingresses give
    // the same host.
    objects.push(with_path(
        ingress(
            "rewrite",
            "rewrite.test",
            "web",
            json!({"nginx.ingress.kubernetes.io/use-regex": "true",
                   "nginx.ingress.kubernetes.io/rewrite-target": "/$2"}),
        ),
        "/something(/|$)(.*)",
        "ImplementationSpecific",
    ));
    objects.push(with_path(
        ingress("prefixed", "rewrite.test", "other", json!({})),
        "/something/else",
        "Prefix",
    ));
    objects.push(with_path(
        ingress("exact", "rewrite.test", "other", json!({})),
        "/something/exact",
        "Exact",
    ));
    objects.push(with_path(
        ingress(
            "versions",
            "*.api.test",
            "web",
            json!({"nginx.ingress.kubernetes.io/rewrite-target": "/$1"}),
        ),
        "/v[0-9]+/(.*)",
        "Prefix",
    ));
    objects.push(ingress("ready", "ready.test", "other", json!({})));
    let local = start(&objects, "ready.test");
    let port = local.http;
    let mut findings = Findings::default();
    for (what, host, path, backend, received) in [
        (
            "the prefix alone becomes /",
            "rewrite.test",
            "/something",
            "web",
            "GET / HTTP/1.1",
        ),
        (
            "a trailing slash too",
            "rewrite.test",
            "/something/",
            "web",
            "GET / HTTP/1.1",
        ),
        (
            "case-insensitive, the group kept and the query string too",
            "rewrite.test",
            "/SOMETHING/new?x=1",
            "web",
            "GET /new?x=1 HTTP/1.1",
        ),
        (
            "the regular expression wins over a Prefix path of the host",
            "rewrite.test",
            "/something/else",
            "web",
            "GET /else HTTP/1.1",
        ),
        (
            "the regular expression wins over another Ingress's Exact path of the host too",
            "rewrite.test",
            "/something/exact",
            "web",
            "GET /exact HTTP/1.1",
        ),
        (
            "a wildcard host's regular expression, its group in the target (no use-regex needed)",
            "v.api.test",
            "/v2/users/7",
            "web",
            "GET /users/7 HTTP/1.1",
        ),
    ] {
        let r = get(host, path).send(port);
        findings.check(
            &format!("{what}: {host}{path}"),
            r.status == 200 && r.backend() == backend && r.received_request_line() == received,
            &r,
        );
    }
    for (what, host, path) in [
        (
            "(/|$) needs a slash or the end",
            "rewrite.test",
            "/somethingelse",
        ),
        (
            "the expression is anchored at the path's start",
            "rewrite.test",
            "/x/something",
        ),
        ("v[0-9]+ needs a digit", "v.api.test", "/vx/users"),
    ] {
        let r = get(host, path).send(port);
        findings.check(&format!("{what}: {host}{path}"), r.status == 404, &r);
    }

    // A new regular-expression path to a Service that already has a backend changes only
    // the two maps: HAProxy takes it live, without a reload.
    let before = local::worker_and_reloads(&local.work());
    let mut added = with_path(
        ingress(
            "added",
            "added.test",
            "other",
            json!({"nginx.ingress.kubernetes.io/use-regex": "true"}),
        ),
        "/v[0-9]+",
        "Prefix",
    );
    // No TLS entry: a new certificate list would rightly need a reload.
    if let Some(spec) = added["spec"].as_object_mut() {
        spec.remove("tls");
    }
    local.write("added.yaml", &added.to_string());
    let r = eventually(
        "the added regular-expression path",
        Duration::from_secs(30),
        || {
            let r = get("added.test", "/V7/z").send(port);
            (r.status == 200).then_some(r)
        },
    );
    findings.check(
        "the added path is served as it arrived",
        r.backend() == "other" && r.received_request_line() == "GET /V7/z HTTP/1.1",
        &r,
    );
    if local::worker_and_reloads(&local.work()) != before {
        findings
            .0
            .push("adding a regular-expression path reloaded HAProxy".into());
    }
    findings.assert_none(&local);
}

/// An external authentication service for nginx auth-url: `Authorization: Bearer good` gets
/// 200 with `X-Auth-User: alice`, `Bearer forbidden` 403, anything else 401. It keeps the
/// request heads it received.
fn auth_service() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the auth service");
    let port = listener.local_addr().expect("its address").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let received = Arc::clone(&heads);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let head = String::from_utf8_lossy(&request).to_lowercase();
            received.lock().expect("the log").push(head.clone());
            let answer = if head.contains("authorization: bearer good") {
                "200 OK\r\nx-auth-user: alice\r\nx-other: not-copied"
            } else if head.contains("authorization: bearer forbidden") {
                "403 Forbidden"
            } else {
                "401 Unauthorized"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (port, heads)
}

#[test]
fn auth_url_asks_the_external_service_and_passes_denies_or_sends_to_sign_in() {
    let web = echo("web", EchoOptions::default());
    let (auth_port, asked) = auth_service();
    let mut objects = service("web", &[web.port]);
    objects.extend(secrets());
    let auth_url = format!("http://127.0.0.1:{auth_port}/auth");
    objects.push(ingress(
        "guarded",
        "guarded.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/auth-url": auth_url,
               "nginx.ingress.kubernetes.io/auth-response-headers": "X-Auth-User"}),
    ));
    objects.push(ingress(
        "signin",
        "signin.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/auth-url": auth_url,
               "nginx.ingress.kubernetes.io/auth-signin": "https://login.example/start"}),
    ));
    objects.push(ingress(
        "unreachable",
        "unreachable.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/auth-url": "http://127.0.0.1:1/auth"}),
    ));
    objects.push(ingress(
        "misconfigured",
        "misconfigured.test",
        "web",
        json!({"nginx.ingress.kubernetes.io/auth-url": "ftp://auth.example/"}),
    ));
    objects.push(ingress("open", "open.test", "web", json!({})));
    let local = start(&objects, "open.test");
    let port = local.http;
    let mut findings = Findings::default();
    let r = get("guarded.test", "/private?x=1")
        .header("authorization", "Bearer good")
        .send(port);
    findings.check(
        "a 2xx answer lets the request pass with the listed answer headers only",
        r.status == 200
            && r.backend() == "web"
            && r.received_header("x-auth-user", "alice")
            && !r.received_any("x-other"),
        &r,
    );
    let heads = asked.lock().expect("the log").clone();
    if !heads.iter().any(|h| {
        h.contains("x-original-url: http://guarded.test/private?x=1")
            && h.contains("x-original-method: get")
            && h.contains("x-forwarded-host: guarded.test")
    }) {
        findings.0.push(format!(
            "the auth service is told the original request, got {heads:?}"
        ));
    }
    for (what, token, status) in [
        ("403 from the service answers 403", "Bearer forbidden", 403),
        ("401 from the service answers 401", "Bearer wrong", 401),
    ] {
        let r = get("guarded.test", "/private")
            .header("authorization", token)
            .send(port);
        findings.check(what, r.status == status && web_untouched(&r), &r);
    }
    let r = get("signin.test", "/p?q=1").send(port);
    findings.check(
        "with auth-signin a 401 redirects there with rd= the request's URL",
        r.status == 302
            && r.header("location")
                == Some("https://login.example/start?rd=http%3A%2F%2Fsignin.test%2Fp%3Fq%3D1"),
        &r,
    );
    let r = get("unreachable.test", "/").send(port);
    findings.check(
        "an auth service that does not answer: 500, never a pass",
        r.status == 500 && web_untouched(&r),
        &r,
    );
    let r = get("misconfigured.test", "/").send(port);
    findings.check(
        "an auth-url that is no http(s) URL denies every request (fail closed)",
        r.status == 500 && web_untouched(&r),
        &r,
    );
    let r = get("open.test", "/").send(port);
    findings.check(
        "an Ingress without auth-url is not asked about",
        r.status == 200,
        &r,
    );
    findings.assert_none(&local);
}
