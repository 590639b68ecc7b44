//! The Gateway API conformance cases of the corpus (`../shared/corpus/kubernetes/
//! gateway-conformance`, facts restated from the upstream Go suite in `<name>.expect.yaml`)
//! run against `haptor local` on the Gateway library (`deploy/library/gateway.yaml`). Each
//! case gets its own folder: the library with its listeners moved by a port offset (a
//! listener on port P binds 127.0.0.1:P+offset), a GatewayClass `haptor`, the base and the
//! case's manifests with the class placeholder filled in, the TLS Secret the upstream suite
//! makes at run time, and an EndpointSlice per Service pointing at an echo backend
//! (`tests/support/echo.rs`) that answers like the upstream `echo-basic`. The status checks
//! read what haptor would write from `/debug/vars/status`; the requests go through `curl`
//! and their answers are compared as the corpus README defines. A case needing a feature not
//! in [`SUPPORTED_FEATURES`] is skipped. The corpus reading and the status checks are
//! `tests/support/gateway_checks.rs`, which the API server tier's
//! `gateway_conformance_status.rs` shares. The results are written as an upstream-shaped
//! `ConformanceReport` to `gateway-conformance.yaml` in Cargo's test scratch directory
//! (`target/tmp`; and to
//! `docs/gateway-conformance.yaml` with `HAPTOR_UPDATE_CONFORMANCE_REPORT=1`), and every case
//! the committed report lists as passed must still pass. `HAPTOR_CONFORMANCE_CASES=a,b`
//! (file stems or test names) runs only those cases, `HAPTOR_GATEWAY_LIBRARY=FILE` another
//! library file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::echo::{self, EchoServer};
use super::gateway_checks::{
    CONTROLLER_NAME, Case, CheckContext, GATEWAY_CLASS, Outcome, SUPPORTED_FEATURES,
    endpoint_slice, gateway_ip, load_cases, mutate, nn, read_manifests, selected_cases,
    status_check, status_of, str_of, strings, text, tls_secret, truncate,
};
use super::local::{Local, get, repo};
use super::support::free_port;

/// The features of the GATEWAY-HTTP profile's core support level; a test needing only these
/// is a core test, any other an extended one.
const CORE_FEATURES: &[&str] = &["Gateway", "HTTPRoute", "ReferenceGrant"];

const CORPUS_COMMIT: &str = "4564255ac2c35d582249b3cdf261bdf51c8bca32";
/// Every listener port a corpus Gateway declares; the offset leaves them all free.
const LISTENER_PORTS: &[u16] = &[80, 443, 8080, 8090, 8443];
/// How long a status check may take to hold.
const STATUS_PATIENCE: Duration = Duration::from_secs(10);
/// How long a request case may keep failing (it must then pass three times in a row).
const REQUEST_PATIENCE: Duration = Duration::from_secs(5);
const PASSES_IN_A_ROW: usize = 3;

/// The Gateway library: `HAPTOR_GATEWAY_LIBRARY` when set, else `deploy/library/gateway.yaml`.
fn library_path() -> PathBuf {
    std::env::var_os("HAPTOR_GATEWAY_LIBRARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo("deploy/library/gateway.yaml"))
}

// ---------------------------------------------------------------------------------------
// The folder haptor local runs on
// ---------------------------------------------------------------------------------------

/// What every case shares: the echo backends (one per namespace and app) and the TLS Secret.
struct Shared {
    echoes: HashMap<(String, String), EchoServer>,
    tls_secret: Value,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            echoes: HashMap::new(),
            tls_secret: tls_secret(),
        }
    }

    /// The echo backend for the pods of `app` in `namespace`, started on first use.
    fn echo(&mut self, namespace: &str, app: &str) -> &EchoServer {
        self.echoes
            .entry((namespace.to_string(), app.to_string()))
            .or_insert_with(|| echo::start(namespace, app))
    }

    fn echo_by_pod(&self, pod: &str) -> Option<&EchoServer> {
        self.echoes.values().find(|e| e.pod == pod)
    }
}

/// A port offset in 12000..24000 (a multiple of 100) whose listener ports are all free on
/// 127.0.0.1: they then lie below the kernel's ephemeral range (32768 on), where client
/// sockets could take them.
fn free_offset() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let start = (std::process::id() % 120) as u16;
    (0..120u16)
        .map(|_| {
            let n = NEXT.fetch_add(7, std::sync::atomic::Ordering::Relaxed);
            12_000 + (start.wrapping_add(n) % 120) * 100
        })
        .find(|offset| {
            LISTENER_PORTS
                .iter()
                .all(|p| std::net::TcpListener::bind(("127.0.0.1", offset + p)).is_ok())
        })
        .expect("a free port offset")
}

/// The library as `config.yaml`: its extraContext's port offset (`gateway_port_offset`,
/// whatever its value) set to `offset` and every
/// `127.0.0.1:PORT` address there (a status bind and the like) moved to a free port.
fn library_config(library: &str, offset: u16) -> String {
    let address = regex::Regex::new(r"127\.0\.0\.1:\d+").expect("a regex");
    let offset_line = regex::Regex::new(r"gateway_port_offset:\s*-?\d+\b").expect("a regex");
    let mut out = Vec::new();
    let mut block_indent: Option<usize> = None;
    let mut done = false;
    for line in library.lines() {
        let indent = line.len() - line.trim_start().len();
        match block_indent {
            None if !done && line.trim_start().starts_with("extraContext:") => {
                block_indent = Some(indent);
                out.push(line.to_string());
            }
            Some(at) if line.trim().is_empty() || indent > at => {
                let line = offset_line.replace_all(line, format!("gateway_port_offset: {offset}"));
                let line = address.replace_all(&line, |_: &regex::Captures<'_>| {
                    format!("127.0.0.1:{}", free_port())
                });
                out.push(line.into_owned());
            }
            Some(_) => {
                block_indent = None;
                done = true;
                out.push(line.to_string());
            }
            None => out.push(line.to_string()),
        }
    }
    out.join("\n") + "\n"
}

/// A running case: haptor local on its folder and the manifests as the folder holds them.
struct Run {
    local: Local,
    offset: u16,
    /// (file name, its objects), in apply order.
    files: Vec<(String, Vec<Value>)>,
}

impl Run {
    fn objects(&self) -> impl Iterator<Item = &Value> {
        self.files.iter().flat_map(|(_, docs)| docs.iter())
    }

    fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects().find(|o| is(o, kind, namespace, name))
    }

    fn object_mut(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<(usize, &mut Value)> {
        self.files
            .iter_mut()
            .enumerate()
            .find_map(|(i, (_, docs))| {
                docs.iter_mut()
                    .find(|o| is(o, kind, namespace, name))
                    .map(|o| (i, o))
            })
    }

    /// Writes file `index` again as the folder's copy of the cluster.
    fn rewrite(&self, index: usize) {
        let (name, docs) = &self.files[index];
        self.local.write(name, &yaml_docs(docs));
    }

    /// `/debug/vars/status`, each entry given the `generation` of its object as the folder
    /// holds it (1 unless a `mutate_route` raised it).
    fn status(&self) -> Result<Vec<Value>, String> {
        let (code, body) = get(self.local.debug, "localhost", "/debug/vars/status")
            .ok_or("GET /debug/vars/status got no answer")?;
        if code != 200 {
            return Err(format!("GET /debug/vars/status answered {code}: {body}"));
        }
        let Ok(Value::Array(mut list)) = serde_json::from_str(&body) else {
            return Err(format!("GET /debug/vars/status is not a JSON list: {body}"));
        };
        for entry in &mut list {
            let generation = self
                .object(
                    str_of(entry, "kind").unwrap_or_default(),
                    str_of(entry, "namespace").unwrap_or("default"),
                    str_of(entry, "name").unwrap_or_default(),
                )
                .and_then(|o| o["metadata"]["generation"].as_i64())
                .unwrap_or(1);
            entry["generation"] = json!(generation);
        }
        Ok(list)
    }
}

fn is(object: &Value, kind: &str, namespace: &str, name: &str) -> bool {
    object["kind"] == kind
        && object["metadata"]["name"] == name
        && object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            == namespace
}

fn yaml_docs(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_yaml_ng::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The app whose pods a Service selects (its `app` label, else its name).
fn service_app(service: &Value) -> String {
    let selector = &service["spec"]["selector"];
    str_of(selector, "app")
        .or_else(|| {
            selector
                .as_object()
                .and_then(|s| s.values().next()?.as_str())
        })
        .or_else(|| str_of(&service["metadata"], "name"))
        .unwrap_or_default()
        .to_string()
}

/// Starts haptor local on a new folder for `case`.
fn start(case: &Case, library: &str, shared: &mut Shared) -> Result<Run, String> {
    let offset = free_offset();
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = tmp.path().join("gateway");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))
    };
    write("config.yaml", &library_config(library, offset))?;
    write(
        "gatewayclass.yaml",
        &yaml_docs(&[json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS, "generation": 1},
            "spec": {"controllerName": CONTROLLER_NAME},
        })]),
    )?;
    write(
        "tls-secret.yaml",
        &yaml_docs(std::slice::from_ref(&shared.tls_secret)),
    )?;
    let mut files = Vec::new();
    for file in strings(&case.expect["apply"]) {
        let mut docs = read_manifests(&file)?;
        for doc in &mut docs {
            // The folder is the cluster: its objects are at their first generation.
            if str_of(doc, "apiVersion").is_some_and(|v| v.starts_with("gateway.networking.k8s.io"))
                && doc["metadata"].get("generation").is_none()
            {
                doc["metadata"]["generation"] = json!(1);
            }
        }
        write(&file, &yaml_docs(&docs))?;
        files.push((file, docs));
    }
    let mut slices = Vec::new();
    for (_, docs) in &files {
        for service in docs.iter().filter(|d| d["kind"] == "Service") {
            if service["spec"]["selector"].is_null() {
                continue; // its EndpointSlices are the manifests' own
            }
            let namespace = str_of(&service["metadata"], "namespace").unwrap_or("default");
            let port = shared.echo(namespace, &service_app(service)).port;
            slices.push(endpoint_slice(service, "127.0.0.1", port));
        }
    }
    write("endpointslices.yaml", &yaml_docs(&slices))?;
    let (debug, metrics) = (free_port(), free_port());
    let child = spawn_haptor(&dir, metrics, debug)?;
    let local = Local {
        child,
        dir,
        http: offset + 80,
        https: offset + 443,
        debug,
        metrics,
        env: Vec::new(),
        args: Vec::new(),
        _tmp: tmp,
    };
    Ok(Run {
        local,
        offset,
        files,
    })
}

/// `haptor local DIR` with its output beside the folder (as `tests/support/local.rs` does).
fn spawn_haptor(dir: &Path, metrics: u16, debug: u16) -> Result<std::process::Child, String> {
    let append = |name: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_file_name(name))
            .map_err(|e| e.to_string())
    };
    Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(["local", dir.to_str().ok_or("a UTF-8 path")?])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--debug-addr", &format!("127.0.0.1:{debug}")])
        .env("HAPROXY_BIN", super::support::haproxy_binary())
        .stdin(std::process::Stdio::null())
        .stdout(append("haptor.out")?)
        .stderr(append("haptor.log")?)
        .spawn()
        .map_err(|e| format!("haptor local does not start: {e}"))
}

/// Waits for `/readyz`; on a timeout says what haptor waits for and what it logged.
fn wait_ready(run: &mut Run, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let answer = get(run.local.debug, "localhost", "/readyz");
        if answer.as_ref().is_some_and(|(code, _)| *code == 200) {
            return Ok(());
        }
        if let Ok(Some(status)) = run.local.child.try_wait() {
            return Err(format!(
                "haptor local exited ({status}) before it was ready; its log ends:\n{}",
                log_tail(&run.local, 30)
            ));
        }
        // An invalid config does not become valid by waiting.
        let invalid = answer
            .as_ref()
            .is_some_and(|(_, body)| body.contains("valid HAProxyTemplateConfig"));
        if started.elapsed() > timeout || (invalid && started.elapsed() > Duration::from_secs(8)) {
            let errors = config_errors(&run.local);
            return Err(format!(
                "haptor local not ready after {:.0?}: {}\n/readyz {answer:?}\n/debug/vars/errors (objects not watched left out):\n{errors}\nlog tail:\n{}",
                started.elapsed(),
                errors.lines().next().unwrap_or_default().trim(),
                log_tail(&run.local, 15)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The messages of `/debug/vars/errors` but the folder's objects the config does not watch.
fn config_errors(local: &Local) -> String {
    let errors = local.debug_get("/debug/vars/errors");
    let Ok(Value::Array(list)) = serde_json::from_str::<Value>(&errors) else {
        return truncate(&errors, 3000);
    };
    let messages: Vec<String> = list
        .iter()
        .filter_map(|e| e["message"].as_str())
        .filter(|m| !m.contains("is not read by the config"))
        .map(|m| format!("  {}", truncate(m, 1500)))
        .collect();
    messages.join("\n")
}

fn log_tail(local: &Local, lines: usize) -> String {
    let log = local.log_text();
    let tail: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("object not watched"))
        .rev()
        .take(lines)
        .collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

// ---------------------------------------------------------------------------------------
// Status checks
// ---------------------------------------------------------------------------------------

fn run_status_checks(run: &mut Run, checks: &[Value]) -> Result<(), String> {
    let mut context = CheckContext::default();
    for check in checks {
        if check["check"] == "mutate_route" {
            let route = str_of(check, "route").unwrap_or_default();
            let (ns, name) = nn(route);
            let (index, object) = run.object_mut("HTTPRoute", &ns, &name).ok_or(format!(
                "mutate_route: no HTTPRoute {route} in the manifests"
            ))?;
            let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
            context
                .original_generations
                .insert(route.to_string(), generation);
            mutate(object, check)?;
            object["metadata"]["generation"] = json!(generation + 1);
            run.rewrite(index);
            continue;
        }
        let started = Instant::now();
        loop {
            let result = run
                .status()
                .and_then(|list| status_check(check, &list, &context));
            match result {
                Ok(()) => break,
                Err(e) if started.elapsed() > STATUS_PATIENCE => {
                    return Err(format!(
                        "status check {} (did not hold within {STATUS_PATIENCE:?}): {e}\n  the check: {}",
                        str_of(check, "check").unwrap_or_default(),
                        serde_json::to_string(check).unwrap_or_default()
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

/// What came back from the gateway.
#[derive(Debug, Clone)]
struct Received {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    fn echo(&self) -> Option<Value> {
        let value: Value = serde_json::from_str(&self.body).ok()?;
        (value.get("pod").is_some() && value.get("namespace").is_some()).then_some(value)
    }

    fn describe(&self) -> String {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        format!(
            "status {}\n      headers: {}\n      body: {}",
            self.status,
            headers.join(" | "),
            truncate(&self.body, 1500)
        )
    }
}

/// Where a group's requests go.
struct Target {
    address: String,
    port: u16,
    scheme: String,
}

/// The curl command for `request` (the corpus's `cases[].request`).
fn curl_args(target: &Target, request: &Value) -> Vec<String> {
    let method = str_of(request, "method").unwrap_or("GET");
    let mut path = str_of(request, "path").unwrap_or("/").to_string();
    if let Some(query) = request["query"].as_object() {
        let pairs: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v).unwrap_or_default()))
            .collect();
        path.push(if path.contains('?') { '&' } else { '?' });
        path.push_str(&pairs.join("&"));
    }
    let host = str_of(request, "host");
    let mut args: Vec<String> = [
        "-sS",
        "-i",
        "-g",
        "--path-as-is",
        "--noproxy",
        "*",
        "--max-time",
        "10",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match str_of(request, "protocol") {
        Some("h2c-prior-knowledge") => args.push("--http2-prior-knowledge".into()),
        Some("h2") => args.push("--http2".into()),
        _ => args.push("--http1.1".into()),
    }
    if target.scheme == "https" {
        let sni = str_of(request, "tls_server_name").or(host).unwrap_or("");
        args.push("-k".into());
        if sni.is_empty() || sni.parse::<std::net::IpAddr>().is_ok() {
            args.push(format!("https://{}:{}{path}", target.address, target.port));
        } else {
            args.push("--resolve".into());
            args.push(format!("{sni}:{}:{}", target.port, target.address));
            args.push(format!("https://{sni}:{}{path}", target.port));
        }
    } else {
        args.push(format!("http://{}:{}{path}", target.address, target.port));
    }
    args.push("-H".into());
    args.push(format!("Host: {}", host.unwrap_or(&target.address)));
    if method == "HEAD" {
        args.push("--head".into());
    } else if method != "GET" {
        args.push("-X".into());
        args.push(method.to_string());
    }
    if let Some(headers) = request["headers"].as_object() {
        for (name, value) in headers {
            let value = text(value).unwrap_or_default();
            args.push("-H".into());
            args.push(if value.is_empty() {
                format!("{name};")
            } else {
                format!("{name}: {value}")
            });
        }
    }
    let set: Vec<String> = request["echo_backend_sets_response_headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .map(|(k, v)| format!("{k}:{}", text(v).unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    args.push("-H".into());
    args.push(if set.is_empty() {
        "X-Echo-Set-Header;".into()
    } else {
        format!("X-Echo-Set-Header: {}", set.join(","))
    });
    args
}

fn send(target: &Target, request: &Value) -> Result<Received, String> {
    let args = curl_args(target, request);
    let output = Command::new("curl")
        .args(&args)
        .output()
        .map_err(|e| format!("curl does not run: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "curl failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    // Skip interim 1xx responses.
    let mut rest = out.as_str();
    loop {
        let (head, body) = rest.split_once("\r\n\r\n").unwrap_or((rest, ""));
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or(format!(
                "curl printed no status line: {}",
                truncate(&out, 500)
            ))?;
        if (100..200).contains(&status) && status != 101 {
            rest = body;
            continue;
        }
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        return Ok(Received {
            status,
            headers,
            body: body.to_string(),
        });
    }
}

/// `curl ...` as a reader would type it.
fn describe_request(target: &Target, request: &Value) -> String {
    let args: Vec<String> = curl_args(target, request)
        .into_iter()
        .map(|a| {
            if a.contains([' ', '*', ';', '?', '&']) {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect();
    format!("curl {}", args.join(" "))
}

fn normalize_status(code: u16) -> u16 {
    if code == 408 { 504 } else { code }
}

/// (scheme, host, port, path) of a Location header; a relative one is taken against the
/// request's scheme and host.
fn parse_location(
    location: &str,
    scheme: &str,
    host: &str,
) -> (String, String, Option<u16>, String) {
    let Some((loc_scheme, rest)) = location.split_once("://") else {
        return (scheme.into(), host.into(), None, location.into());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            (h.to_string(), p.parse().ok())
        }
        _ => (authority.to_string(), None),
    };
    (loc_scheme.to_string(), host, port, path.to_string())
}

/// Compares an answer with `expect`; Err lists what differs.
fn compare(
    expect: &Value,
    got: &Received,
    request: &Value,
    scheme: &str,
    shared: &Shared,
) -> Result<(), String> {
    let mut problems = Vec::new();
    let allowed: Vec<u16> = expect["status"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_u64().map(|s| s as u16))
        .collect();
    if !allowed
        .iter()
        .any(|s| normalize_status(*s) == normalize_status(got.status))
    {
        problems.push(format!("status {} not in {allowed:?}", got.status));
    }
    let echo = got.echo();
    if matches!(got.status, 200 | 204) {
        let checks_backend = expect.get("backend").is_some_and(|b| !b.is_null())
            || expect.get("namespace").is_some()
            || expect.get("backend_request").is_some();
        if expect["answered_without_backend"] == true && echo.is_some() {
            problems.push("answered by a backend, wanted the gateway to answer".into());
        }
        match (&echo, checks_backend) {
            (None, true) => problems.push("the body is not an echo backend's answer".into()),
            (Some(echo), _) => {
                let pod = echo["pod"].as_str().unwrap_or_default();
                if let Some(backend) = str_of(expect, "backend")
                    && !pod.starts_with(backend)
                {
                    problems.push(format!("served by pod {pod}, wanted backend {backend}"));
                }
                if let Some(ns) = str_of(expect, "namespace")
                    && echo["namespace"] != ns
                {
                    problems.push(format!(
                        "served from namespace {}, wanted {ns}",
                        echo["namespace"]
                    ));
                }
                if let Some(wanted) = expect.get("backend_request") {
                    compare_backend_request(wanted, echo, &mut problems);
                }
            }
            (None, false) => {}
        }
    }
    if let Some(headers) = expect["response_headers"].as_object() {
        let squeeze = expect["ignore_whitespace_in_response_header_values"] == true;
        let norm = |s: &str| {
            if squeeze {
                s.replace(' ', "")
            } else {
                s.to_string()
            }
        };
        for (name, value) in headers {
            let value = text(value).unwrap_or_default();
            match got.header(name) {
                Some(actual) if norm(&actual) == norm(&value) => {}
                actual => problems.push(format!(
                    "response header {name}: {actual:?}, wanted {value:?}"
                )),
            }
        }
    }
    if let Some(headers) = expect["response_headers_one_of"].as_object() {
        let squeeze = expect["ignore_whitespace_in_response_header_values"] == true;
        for (name, values) in headers {
            let values = strings(values);
            let actual = got.header(name);
            let ok = actual.as_ref().is_some_and(|a| {
                values.iter().any(|v| {
                    if squeeze {
                        a.replace(' ', "") == v.replace(' ', "")
                    } else {
                        a == v
                    }
                })
            });
            if !ok {
                problems.push(format!(
                    "response header {name}: {actual:?}, wanted one of {values:?}"
                ));
            }
        }
    }
    for name in strings(&expect["response_absent_headers"]) {
        if let Some(value) = got.header(&name) {
            problems.push(format!(
                "response header {name} should be absent, is {value:?}"
            ));
        }
    }
    if let Some(redirect) = expect.get("redirect").filter(|r| !r.is_null()) {
        match got.header("location") {
            None => problems.push("no Location header".into()),
            Some(location) => {
                let host = str_of(request, "host").unwrap_or("127.0.0.1");
                let (s, h, p, path) = parse_location(&location, scheme, host);
                let want_scheme = str_of(redirect, "scheme").unwrap_or(scheme);
                if s != want_scheme {
                    problems.push(format!(
                        "Location {location}: scheme {s}, wanted {want_scheme}"
                    ));
                }
                if let Some(want_host) = str_of(redirect, "host")
                    && h != want_host
                {
                    problems.push(format!("Location {location}: host {h}, wanted {want_host}"));
                }
                let default = if s == "https" { 443 } else { 80 };
                match redirect["port"].as_u64() {
                    None if p.is_some_and(|p| p != default) => problems.push(format!(
                        "Location {location}: port {p:?}, wanted none (or {default})"
                    )),
                    Some(want) if p.map(u64::from) != Some(want) => {
                        problems.push(format!("Location {location}: port {p:?}, wanted {want}"))
                    }
                    _ => {}
                }
                if let Some(want_path) = str_of(redirect, "path")
                    && path != want_path
                {
                    problems.push(format!(
                        "Location {location}: path {path}, wanted {want_path}"
                    ));
                }
            }
        }
    }
    let _ = shared;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn compare_backend_request(wanted: &Value, echo: &Value, problems: &mut Vec<String>) {
    for field in ["host", "method", "path"] {
        if let Some(value) = str_of(wanted, field)
            && echo[field] != value
        {
            problems.push(format!(
                "the backend saw {field} {}, wanted {value:?}",
                echo[field]
            ));
        }
    }
    let echoed = |name: &str| -> Option<String> {
        echo["headers"]
            .as_object()?
            .iter()
            .find_map(|(n, v)| n.eq_ignore_ascii_case(name).then(|| strings(v).join(",")))
    };
    if let Some(headers) = wanted["headers"].as_object() {
        for (name, value) in headers {
            let value = text(value).unwrap_or_default();
            match echoed(name) {
                Some(actual) if actual == value => {}
                actual => problems.push(format!(
                    "the backend saw header {name}: {actual:?}, wanted {value:?}"
                )),
            }
        }
    }
    for name in strings(&wanted["absent_headers"]) {
        if let Some(value) = echoed(&name) {
            problems.push(format!(
                "the backend saw header {name}: {value:?}, wanted it absent"
            ));
        }
    }
}

/// Runs one case until it passes [`PASSES_IN_A_ROW`] times in a row; Err tells the request,
/// the expectation and the last answer.
fn run_request_case(target: &Target, case: &Value, shared: &Shared) -> Result<(), String> {
    let (request, expect) = (&case["request"], &case["expect"]);
    let started = Instant::now();
    let mut streak = 0;
    loop {
        let mirror_counts: Vec<(String, usize)> = mirror_targets(expect, shared);
        let result = send(target, request).and_then(|got| {
            compare(expect, &got, request, &target.scheme, shared)
                .and_then(|()| check_mirrors(&mirror_counts, shared))
                .map_err(|e| format!("{e}\n    got: {}", got.describe()))
        });
        match result {
            Ok(()) => {
                streak += 1;
                if streak == PASSES_IN_A_ROW {
                    return Ok(());
                }
            }
            Err(e) => {
                streak = 0;
                if started.elapsed() > REQUEST_PATIENCE {
                    return Err(format!(
                        "case {}\n    request: {}\n    expected: {}\n    problem: {e}",
                        str_of(case, "name").unwrap_or(""),
                        describe_request(target, request),
                        serde_json::to_string(expect).unwrap_or_default()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The request counts of the backends a case's request must be mirrored to.
fn mirror_targets(expect: &Value, shared: &Shared) -> Vec<(String, usize)> {
    expect["mirrored_to"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let key = (
                str_of(m, "namespace")?.to_string(),
                str_of(m, "backend")?.to_string(),
            );
            Some((
                format!("{}/{}", key.0, key.1),
                shared.echoes.get(&key)?.count(),
            ))
        })
        .collect()
}

fn check_mirrors(before: &[(String, usize)], shared: &Shared) -> Result<(), String> {
    for (backend, count) in before {
        let (ns, app) = nn(backend);
        let echo = shared
            .echoes
            .get(&(ns, app))
            .ok_or(format!("no echo backend {backend}"))?;
        let started = Instant::now();
        while echo.count() <= *count {
            if started.elapsed() > Duration::from_secs(2) {
                return Err(format!("no mirrored copy reached {backend}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// The weighted distribution check: shares of `requests` requests per backend within
/// `tolerance` of `expected_share`.
fn run_distribution(target: &Target, distribution: &Value) -> Result<(), String> {
    let shares: BTreeMap<String, f64> = distribution["expected_share"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap_or(0.0)))
                .collect()
        })
        .unwrap_or_default();
    let requests = distribution["requests"].as_u64().unwrap_or(500) as usize;
    let concurrency = distribution["concurrency"].as_u64().unwrap_or(10).max(1) as usize;
    let tolerance = distribution["tolerance"].as_f64().unwrap_or(0.05);
    let attempts = distribution["max_attempts"].as_u64().unwrap_or(10).max(1);
    let request = &distribution["request"];
    let mut last = String::new();
    for _ in 0..attempts {
        let counts: std::sync::Mutex<BTreeMap<String, usize>> = Default::default();
        std::thread::scope(|scope| {
            for worker in 0..concurrency {
                let (counts, shares) = (&counts, &shares);
                scope.spawn(move || {
                    for i in (worker..requests).step_by(concurrency) {
                        let mut request = request.clone();
                        if i % 2 == 0 {
                            request["headers"] = json!({"X-Jitter": i.to_string()});
                        }
                        let backend = match send(target, &request) {
                            Ok(got) => got
                                .echo()
                                .and_then(|e| e["pod"].as_str().map(str::to_string))
                                .map(|pod| {
                                    shares
                                        .keys()
                                        .filter(|k| pod.starts_with(k.as_str()))
                                        .max_by_key(|k| k.len())
                                        .cloned()
                                        .unwrap_or(pod)
                                })
                                .unwrap_or_else(|| format!("status {}", got.status)),
                            Err(e) => format!("error: {}", truncate(&e, 60)),
                        };
                        *counts.lock().expect("counts").entry(backend).or_default() += 1;
                    }
                });
            }
        });
        let counts = counts.into_inner().expect("counts");
        let mut problems = Vec::new();
        for (backend, count) in &counts {
            let share = *count as f64 / requests as f64;
            match shares.get(backend) {
                None => problems.push(format!("{count} requests went to {backend}")),
                Some(0.0) if *count > 0 => {
                    problems.push(format!("{backend} got {count}, wanted none"))
                }
                Some(want) if (share - want).abs() > tolerance => problems.push(format!(
                    "{backend} got {share:.3} of the requests, wanted {want} ± {tolerance}"
                )),
                _ => {}
            }
        }
        for (backend, want) in &shares {
            if *want > 0.0 && !counts.contains_key(backend) {
                problems.push(format!("{backend} got no request, wanted {want}"));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        last = format!("distribution {counts:?}: {}", problems.join("; "));
    }
    Err(format!(
        "weighted distribution failed {attempts} times; request {}; last: {last}",
        describe_request(target, request)
    ))
}

/// The repeat check of HTTPRouteRequestHeaderModifierBackendWeights: each answer's backend
/// saw exactly one `Backend` header, naming the Service of the pod that served it.
fn run_repeat_check(target: &Target, repeat: &Value) -> Result<(), String> {
    let requests = repeat["requests"].as_u64().unwrap_or(100);
    for _ in 0..requests {
        let got = send(target, &repeat["request"])?;
        let echo = got
            .echo()
            .ok_or(format!("not an echo answer: {}", got.describe()))?;
        let values = echo["headers"]
            .as_object()
            .and_then(|h| h.iter().find(|(n, _)| n.eq_ignore_ascii_case("backend")))
            .map(|(_, v)| strings(v))
            .unwrap_or_default();
        let pod = echo["pod"].as_str().unwrap_or_default();
        if values.len() != 1 || !pod.starts_with(values[0].as_str()) {
            return Err(format!(
                "pod {pod} saw Backend headers {values:?}, wanted exactly one naming its Service"
            ));
        }
    }
    Ok(())
}

/// A group's `before` action on the folder.
fn before(run: &mut Run, action: &Value, shared: &mut Shared) -> Result<(), String> {
    if let Some(delete) = action.get("delete") {
        let (kind, ns, name) = (
            str_of(delete, "kind").unwrap_or_default(),
            str_of(delete, "namespace").unwrap_or("default"),
            str_of(delete, "name").unwrap_or_default(),
        );
        let index = run
            .files
            .iter()
            .position(|(_, docs)| docs.iter().any(|o| is(o, kind, ns, name)))
            .ok_or(format!("before: no {kind} {ns}/{name} to delete"))?;
        run.files[index].1.retain(|o| !is(o, kind, ns, name));
        run.rewrite(index);
    }
    if let Some(patch) = action.get("patch_endpointslices") {
        let ns = str_of(patch, "namespace").unwrap_or("default");
        let (pod_ns, app) = nn(str_of(patch, "endpoints_from_pods_of").unwrap_or_default());
        let port = shared.echo(&pod_ns, &app).port;
        for name in strings(&patch["names"]) {
            let Some((index, slice)) = run.object_mut("EndpointSlice", ns, &name) else {
                continue;
            };
            if slice["addressType"] != "IPv4" {
                continue; // the echo backends have no IPv6 address
            }
            slice["endpoints"] = json!([{"addresses": ["127.0.0.1"],
                "conditions": {"ready": true, "serving": true, "terminating": false}}]);
            if let Some(ports) = slice["ports"].as_array_mut() {
                for p in ports {
                    p["port"] = json!(port);
                }
            }
            run.rewrite(index);
        }
    }
    Ok(())
}

/// The gateway's address: the first status address, else the loopback address the runner
/// asked for in its spec.addresses (haptor local writes no addresses).
fn gateway_address(run: &Run, gateway: &str) -> String {
    let (ns, name) = nn(gateway);
    run.status()
        .ok()
        .and_then(|list| {
            status_of(&list, "Gateway", &ns, &name)?["addresses"]
                .as_array()?
                .first()?["value"]
                .as_str()
                .map(str::to_string)
        })
        .filter(|a| a.parse::<std::net::IpAddr>().is_ok())
        .unwrap_or_else(|| gateway_ip(&ns, &name))
}

/// Runs one corpus test from the start of haptor to its last request.
fn run_case(case: &Case, library: Option<&str>, shared: &mut Shared) -> Outcome {
    let missing = case.missing_features();
    if !missing.is_empty() {
        return Outcome::Skip(format!("unsupported features: {}", missing.join(", ")));
    }
    // Parts the harness cannot drive, found before anything starts.
    let groups = case.expect["request_groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut skipped = Vec::new();
    for group in &groups {
        if group.get("websocket").is_some() || group["scheme"] == "ws" {
            skipped.push(
                "WebSocket exchanges are not driven by the harness (no WebSocket echo backend)",
            );
        }
        if group["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["request"]["protocol"] == "h2c-prior-knowledge")
        {
            skipped.push("the echo backend speaks no h2c");
        }
        if group["distribution"].get("requests_per_check").is_some() {
            skipped.push("HTTPRouteRequestMirror not supported (percentage mirror sampling)");
        }
    }
    if !skipped.is_empty() {
        skipped.dedup();
        return Outcome::Skip(skipped.join("; "));
    }
    let Some(library) = library else {
        return Outcome::Fail(format!("{} does not exist", library_path().display()));
    };
    let mut run = match start(case, library, shared) {
        Ok(run) => run,
        Err(e) => return Outcome::Fail(format!("setup: {e}")),
    };
    if let Err(e) = wait_ready(&mut run, Duration::from_secs(40)) {
        return Outcome::Fail(e);
    }
    let checks = case.status_checks();
    if let Err(e) = run_status_checks(&mut run, &checks) {
        return Outcome::Fail(e);
    }
    let mut failures = Vec::new();
    for group in &groups {
        if let Some(action) = group.get("before")
            && let Err(e) = before(&mut run, action, shared)
        {
            failures.push(e);
            continue;
        }
        let gateway = str_of(group, "gateway").unwrap_or_default();
        let port = group["port"].as_u64().unwrap_or(80) as u16;
        let target = Target {
            address: gateway_address(&run, gateway),
            port: port + run.offset,
            scheme: str_of(group, "scheme").unwrap_or("http").to_string(),
        };
        for request_case in group["cases"].as_array().into_iter().flatten() {
            if let Err(e) = run_request_case(&target, request_case, shared) {
                failures.push(format!(
                    "[group {} {gateway}:{port} {}] {e}",
                    str_of(group, "name").unwrap_or(""),
                    target.scheme
                ));
            }
        }
        if let Some(distribution) = group.get("distribution")
            && distribution.get("expected_share").is_some()
            && let Err(e) = run_distribution(&target, distribution)
        {
            failures.push(e);
        }
        if let Some(repeat) = group.get("repeat_check")
            && let Err(e) = run_repeat_check(&target, repeat)
        {
            failures.push(e);
        }
    }
    drop(run);
    if failures.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(failures.join("\n  "))
    }
}

// ---------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------

fn level_status(results: &[(&Case, &Outcome)]) -> Value {
    let count = |w: &str| results.iter().filter(|(_, o)| o.word() == w).count();
    let names = |w: &str| -> Vec<String> {
        results
            .iter()
            .filter(|(_, o)| o.word() == w)
            .map(|(c, _)| c.test.clone())
            .collect()
    };
    let (passed, skipped, failed) = (count("pass"), count("skip"), count("fail"));
    let result = if failed > 0 {
        "failure"
    } else if skipped > 0 {
        "partial"
    } else {
        "success"
    };
    let mut status = json!({
        "result": result,
        "statistics": {"Passed": passed, "Skipped": skipped, "Failed": failed},
    });
    if skipped > 0 {
        status["skippedTests"] = json!(names("skip"));
    }
    if failed > 0 {
        status["failedTests"] = json!(names("fail"));
    }
    status
}

fn is_core(case: &Case) -> bool {
    case.features
        .iter()
        .all(|f| CORE_FEATURES.contains(&f.as_str()))
}

/// The report as YAML.
fn report(cases: &[Case], results: &[Outcome]) -> String {
    let pairs: Vec<(&Case, &Outcome)> = cases.iter().zip(results).collect();
    let core: Vec<(&Case, &Outcome)> = pairs.iter().copied().filter(|(c, _)| is_core(c)).collect();
    let extended: Vec<(&Case, &Outcome)> =
        pairs.iter().copied().filter(|(c, _)| !is_core(c)).collect();
    let supported: BTreeSet<&str> = SUPPORTED_FEATURES
        .iter()
        .copied()
        .filter(|f| !CORE_FEATURES.contains(f))
        .collect();
    let unsupported: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.features.iter().map(String::as_str))
        .filter(|f| !SUPPORTED_FEATURES.contains(f) && !CORE_FEATURES.contains(f))
        .collect();
    let mut extended_status = level_status(&extended);
    extended_status["supportedFeatures"] = json!(supported);
    extended_status["unsupportedFeatures"] = json!(unsupported);
    // The upstream field order (a JSON map would sort the keys).
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Report {
        api_version: &'static str,
        kind: &'static str,
        date: String,
        #[serde(rename = "gatewayAPIVersion")]
        gateway_api_version: String,
        #[serde(rename = "gatewayAPIChannel")]
        gateway_api_channel: &'static str,
        implementation: Value,
        mode: &'static str,
        profiles: Value,
        tests: Value,
    }
    let report = Report {
        api_version: "gateway.networking.k8s.io/v1",
        kind: "ConformanceReport",
        date: jiff::Timestamp::now().to_string(),
        gateway_api_version: format!(
            "{CORPUS_COMMIT} (kubernetes-sigs/gateway-api commit the corpus restates; HTTPRoute tests only, run by tests/processes/gateway_conformance.rs on haptor local)"
        ),
        gateway_api_channel: "experimental",
        implementation: json!({
            "organization": "haptor",
            "project": "haptor",
            "url": "https://github.com/haptor/haptor",
            "version": env!("CARGO_PKG_VERSION"),
            "contact": ["https://github.com/haptor/haptor/issues"],
        }),
        mode: "default",
        profiles: json!([
            {
                "name": "GATEWAY-HTTP",
                "core": level_status(&core),
                "extended": extended_status,
            },
            {
                // The corpus holds no TLSRoute test of the upstream GATEWAY-TLS profile; the
                // features are supported and tested in tests/processes/gateway_library.rs.
                "name": "GATEWAY-TLS",
                "summary": "no test of this profile is in the shared corpus; TLSRoute passthrough by SNI and a TLS listener in Terminate mode are tested through haptor local by tests/processes/gateway_library.rs",
                "core": {
                    "result": "skipped",
                    "statistics": {"Passed": 0, "Skipped": 0, "Failed": 0},
                },
                "extended": {
                    "result": "skipped",
                    "statistics": {"Passed": 0, "Skipped": 0, "Failed": 0},
                    "supportedFeatures": ["TLSRoute", "TLSRouteModeTerminate"],
                },
            }
        ]),
        tests: json!(
            pairs
                .iter()
                .map(|(c, o)| {
                    let mut entry = json!({"name": c.test, "result": o.word()});
                    if c.provisional {
                        entry["provisional"] = json!(true);
                    }
                    if !o.reason().is_empty() {
                        entry["reason"] = json!(truncate(o.reason(), 2000));
                    }
                    entry
                })
                .collect::<Vec<_>>()
        ),
    };
    serde_yaml_ng::to_string(&report).expect("the report as YAML")
}

/// The tests the committed report lists as passed.
fn committed_passes(path: &Path) -> BTreeSet<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeSet::new();
    };
    let Ok(report) = serde_yaml_ng::from_str::<Value>(&text) else {
        return BTreeSet::new();
    };
    report["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["result"] == "pass")
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_gateway_api_conformance_cases_pass_through_haptor_local_as_the_committed_report_says() {
    let started = Instant::now();
    let library = std::fs::read_to_string(library_path()).ok();
    let only = selected_cases();
    let cases: Vec<Case> = load_cases()
        .into_iter()
        .filter(|c| {
            only.as_ref()
                .is_none_or(|only| only.iter().any(|o| *o == c.stem || *o == c.test))
        })
        .collect();
    assert!(!cases.is_empty(), "no conformance case selected");
    let mut shared = Shared::new();
    let mut results = Vec::new();
    for case in &cases {
        let case_started = Instant::now();
        let outcome = run_case(case, library.as_deref(), &mut shared);
        eprintln!(
            "gateway conformance: {:<55} {} ({:.1}s)",
            case.test,
            outcome.word(),
            case_started.elapsed().as_secs_f64()
        );
        if let Outcome::Fail(reason) = &outcome {
            eprintln!("  {}: {reason}\n", case.stem);
        }
        results.push(outcome);
    }
    let yaml = report(&cases, &results);
    // Cargo's scratch directory for integration tests (under the target directory, wherever
    // CARGO_TARGET_DIR puts it).
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-conformance.yaml");
    std::fs::write(&target, &yaml).unwrap_or_else(|e| panic!("write {}: {e}", target.display()));
    let committed = repo("docs/gateway-conformance.yaml");
    let expected_passes = committed_passes(&committed);
    let update = std::env::var("HAPTOR_UPDATE_CONFORMANCE_REPORT").as_deref() == Ok("1");
    if update && only.is_none() {
        std::fs::write(&committed, &yaml).expect("write docs/gateway-conformance.yaml");
    }
    eprintln!("\n{:<58} {:<6} reason", "test", "result");
    for (case, outcome) in cases.iter().zip(&results) {
        let reason = outcome.reason().lines().next().unwrap_or_default();
        eprintln!(
            "{:<58} {:<6} {}",
            case.test,
            outcome.word(),
            truncate(reason, 200)
        );
    }
    let count = |w: &str| results.iter().filter(|o| o.word() == w).count();
    eprintln!(
        "\n{} passed, {} skipped, {} failed in {:.0}s; report: {}",
        count("pass"),
        count("skip"),
        count("fail"),
        started.elapsed().as_secs_f64(),
        target.display()
    );
    let regressions: Vec<&str> = cases
        .iter()
        .zip(&results)
        .filter(|(c, o)| expected_passes.contains(&c.test) && **o != Outcome::Pass)
        .map(|(c, _)| c.test.as_str())
        .collect();
    if update {
        if !regressions.is_empty() {
            eprintln!(
                "no longer passing (accepted by HAPTOR_UPDATE_CONFORMANCE_REPORT=1): {regressions:?}"
            );
        }
        return;
    }
    assert!(
        regressions.is_empty(),
        "cases docs/gateway-conformance.yaml lists as passed no longer pass: {regressions:?}"
    );
}

#[test]
fn the_echo_backend_answers_like_the_conformance_echo_server() {
    let mut shared = Shared::new();
    let port = shared.echo("ns-a", "app-a").port;
    let target = Target {
        address: "127.0.0.1".into(),
        port,
        scheme: "http".into(),
    };
    let request = json!({"method": "POST", "path": "/a?b=c", "host": "example.org",
        "headers": {"x-custom": "one"},
        "echo_backend_sets_response_headers": {"X-Header-Set": "set", "Another": "two"}});
    let got = send(&target, &request).expect("the echo backend answers");
    let case = json!({
        "status": [200], "backend": "app-a", "namespace": "ns-a",
        "backend_request": {"host": "example.org", "method": "POST", "path": "/a?b=c",
            "headers": {"X-Custom": "one"}, "absent_headers": ["X-Other"]},
        "response_headers": {"x-header-set": "set", "another": "two"},
        "response_absent_headers": ["X-Header-Remove"],
    });
    compare(&case, &got, &request, "http", &shared)
        .unwrap_or_else(|e| panic!("{e}\n{}", got.describe()));
    let wrong = json!({"status": [404], "backend": "app-b", "namespace": "ns-b",
        "backend_request": {"method": "GET", "path": "/", "absent_headers": ["X-Custom"]}});
    let problems = compare(&wrong, &got, &request, "http", &shared).expect_err("a mismatch");
    for part in [
        "status 200",
        "backend app-b",
        "namespace",
        "method",
        "X-Custom",
    ] {
        assert!(problems.contains(part), "{part} in {problems}");
    }
    assert_eq!(
        shared
            .echo_by_pod(got.echo().expect("echo")["pod"].as_str().expect("pod"))
            .map(|e| e.count()),
        Some(1)
    );
    // The retry loop and the weighted sampling, with the echo backend standing in for a
    // gateway that sends everything to app-a.
    let case = json!({"request": {"method": "GET", "path": "/x"},
        "expect": {"status": [200], "backend": "app-a", "namespace": "ns-a",
                   "backend_request": {"method": "GET", "path": "/x"}}});
    run_request_case(&target, &case, &shared).expect("the case passes");
    let distribution = json!({"request": {"method": "GET", "path": "/"}, "requests": 40,
        "concurrency": 4, "tolerance": 0.05, "expected_share": {"app-a": 1.0, "app-b": 0.0}});
    run_distribution(&target, &distribution).expect("all requests reach app-a");
    let (scheme, host, port, path) = parse_location("https://example.org:8443/x?y", "http", "h");
    assert_eq!(
        (scheme.as_str(), host.as_str(), port, path.as_str()),
        ("https", "example.org", Some(8443), "/x?y")
    );
    let config = library_config(
        "spec:\n  extraContext:\n    gateway_bind_address: \"127.0.0.1\"\n    gateway_port_offset: 10000\n    status_bind: \"127.0.0.1:18405\"\n  validationTests:\n    gateway_port_offset: 0\n",
        21000,
    );
    assert!(
        config.contains("    gateway_port_offset: 21000\n"),
        "{config}"
    );
    assert!(!config.contains("18405"), "{config}");
    assert!(
        config.ends_with("  validationTests:\n    gateway_port_offset: 0\n"),
        "{config}"
    );
}
