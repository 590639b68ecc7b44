//! An in-process axum stub of the HAProxy Data Plane API v3, strict as the contract is
//! (see `tests/processes/dataplane_target.rs`, whose module documentation lists what it answers), for
//! the tests that deploy to a Data Plane target without the real API. Besides answering as
//! the API does, it can be told to misbehave (`StubState::fault`): answer 500, answer what
//! is not JSON, or hang, for every request after the switch.
//!
//! The quirks of the real API v3.4.0 it keeps (each seen against the real one): storage
//! names are cleaned as the API cleans them (`www.example.com-tls.pem` is stored as
//! `www_example_com-tls.pem`, and reads, replaces and deletes clean the name they are
//! given); a runtime change HAProxy refuses (a weight on a `balance source` backend) is a
//! 500 carrying HAProxy's answer, and so is an `X-Runtime-Actions` action, after the
//! configuration was stored; a certificate that is no PEM certificate, or has no key, is a
//! 500; and with [`ReloadCommand::SignalOnly`] the reload is reported `succeeded` as soon
//! as it is started, as the API does with a reload command that only signals HAProxy, while
//! the worker (`pid` in `/services/haproxy/runtime/info`) changes later or, when HAProxy
//! refuses the configuration, never.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;

use haptor::drivers::dataplane::{DataplaneSettings, DataplaneTarget};

pub const USER: &str = "admin";
pub const PASSWORD: &str = "adminpwd";
pub const FAIL_RELOAD_MARKER: &str = "# fail-reload";
pub const INVALID_MARKER: &str = "# invalid-config";
pub const RELOAD_FAILURE_LOG: &str =
    "[ALERT] (42) : config : parsing [/etc/haproxy/haproxy.cfg:3] : reload refused by the stub";
pub const VALIDATION_FAILURE: &str = "validation error: exit status 1\n[ALERT] (7) : config : parsing [/tmp/onlyvalidate:9] : unknown keyword 'bogus' in 'backend' section";

/// One request as the stub saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub runtime_actions: Option<String>,
    pub body: String,
}

impl Recorded {
    pub fn is(&self, method: Method, path: &str) -> bool {
        self.method == method && self.path == path
    }

    pub fn query_is(&self, name: &str, value: &str) -> bool {
        self.query.get(name).map(String::as_str) == Some(value)
    }

    pub fn is_write(&self) -> bool {
        self.method != Method::GET
    }
}

/// How the stub's reload command behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadCommand {
    /// It waits for the new worker and fails when HAProxy refuses the configuration (the
    /// chart's reload.sh): the reload's status is the outcome, and the worker has changed
    /// once it says `succeeded`.
    Verified,
    /// It only signals HAProxy: the reload is `succeeded` at once; the new worker answers
    /// the runtime API after `worker_after_reads` reads of the runtime info, or never when
    /// HAProxy refuses the configuration.
    SignalOnly { worker_after_reads: u32 },
}

#[derive(Debug)]
pub struct StubReload {
    pub polls_before_done: u32,
    pub fails: bool,
    pub restored: bool,
}

#[derive(Debug)]
pub struct StubState {
    pub api_version: String,
    /// What `/services/haproxy/runtime/info` reports as the HAProxy version.
    pub haproxy_version: String,
    pub config_version: u64,
    pub config: String,
    /// What a failed reload restores.
    pub last_good: String,
    /// (storage kind, name) → content.
    pub storage: BTreeMap<(String, String), String>,
    pub reloads: BTreeMap<String, StubReload>,
    pub reload_counter: u64,
    /// Storage writes that would have reloaded HAProxy (no `skip_reload`).
    pub unexpected_reloads: u32,
    /// The next pushes find another writer's version first (409).
    pub conflicts_to_inject: u32,
    /// The next pushes answer 406 after another commit.
    pub outdated_to_inject: u32,
    /// Runtime server changes answer 404.
    pub refuse_runtime_servers: bool,
    /// The configuration names its maps outside the API's maps directory: the map list
    /// gives them no `storage_name` (and shows them only with `include_unmanaged=true`).
    pub unmanaged_maps: bool,
    pub runtime_maps: BTreeMap<String, Vec<(String, String)>>,
    pub requests: Vec<Recorded>,
    /// How the stub misbehaves for every request from now on (`None`: it does not).
    pub fault: Option<Fault>,
    pub reload_command: ReloadCommand,
    /// The pid of the worker that answers the runtime API.
    pub worker_pid: u64,
    /// A worker started by a signal-only reload, and the runtime info reads before it
    /// answers.
    pub starting_worker: Option<u32>,
    /// Backends with a static load-balancing algorithm (`balance source`): HAProxy refuses
    /// weights other than 0% and 100% there at runtime.
    pub static_backends: Vec<String>,
    /// The configuration the running worker was started from (set when a reload is
    /// queued), and the servers added (`true`) and deleted (`false`) at runtime since.
    pub running_config: String,
    pub runtime_server_changes: BTreeMap<(String, String), bool>,
}

/// A way for the stub to misbehave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 500 with a JSON error body.
    ServerError,
    /// 200 with a body that is not JSON.
    Garbage,
    /// No answer at all (the connection stays open).
    Hang,
    /// 409 version conflicts on every configuration push (and reads that work).
    ConflictStorm,
}

#[derive(Clone)]
pub struct Stub {
    pub state: Arc<Mutex<StubState>>,
    pub addr: SocketAddr,
}

impl Stub {
    pub async fn start(api_version: &str) -> Stub {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let state = Arc::new(Mutex::new(StubState {
            api_version: api_version.to_string(),
            haproxy_version: "2.6.12-1+deb12u1".to_string(),
            config_version: 1,
            config: String::new(),
            last_good: String::new(),
            storage: BTreeMap::new(),
            reloads: BTreeMap::new(),
            reload_counter: 0,
            unexpected_reloads: 0,
            conflicts_to_inject: 0,
            outdated_to_inject: 0,
            refuse_runtime_servers: false,
            unmanaged_maps: false,
            runtime_maps: BTreeMap::new(),
            requests: Vec::new(),
            fault: None,
            reload_command: ReloadCommand::Verified,
            worker_pid: 1000,
            starting_worker: None,
            static_backends: Vec::new(),
            running_config: String::new(),
            runtime_server_changes: BTreeMap::new(),
        }));
        let app = Router::new().fallback(handle).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the stub");
        let addr = listener.local_addr().expect("stub address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Stub { state, addr }
    }

    pub fn state(&self) -> MutexGuard<'_, StubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.state().requests.clear();
    }

    pub fn target(&self) -> DataplaneTarget {
        self.target_with(PASSWORD)
    }

    pub fn target_with(&self, password: &str) -> DataplaneTarget {
        DataplaneTarget::new("haproxy-0", settings(&self.url(), password)).expect("target")
    }
}

pub fn settings(url: &str, password: &str) -> DataplaneSettings {
    let mut settings = DataplaneSettings::new(url, USER, password);
    settings.connect_timeout = Duration::from_secs(2);
    settings.request_timeout = Duration::from_secs(5);
    settings.reload_timeout = Duration::from_secs(5);
    settings.reload_poll_interval = Duration::from_millis(10);
    settings.max_version_retries = 2;
    settings
}

pub const API: &str = "/v3/services/haproxy";

pub fn json_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "code": status.as_u16(), "message": message }).to_string(),
    )
        .into_response()
}

pub fn text(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

pub fn accepted_with_reload(id: &str, body: String) -> Response {
    let mut response = text(StatusCode::ACCEPTED, body);
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert("Reload-ID", value);
    }
    response
}

pub async fn handle(State(state): State<Arc<Mutex<StubState>>>, request: Request) -> Response {
    let fault = state.lock().map(|s| s.fault).unwrap_or_default();
    match fault {
        Some(Fault::ServerError) => {
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "injected: the API failed",
            );
        }
        Some(Fault::Garbage) => {
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                "<html>{not json",
            )
                .into_response();
        }
        Some(Fault::Hang) => std::future::pending::<()>().await,
        Some(Fault::ConflictStorm) if request.method() != Method::GET => {
            return json_error(
                StatusCode::CONFLICT,
                "version in configuration file is 99, given version is 1",
            );
        }
        _ => {}
    }
    let (parts, body) = request.into_parts();
    let body = match to_bytes(body, usize::MAX).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => return json_error(StatusCode::BAD_REQUEST, "unreadable body"),
    };
    let query: BTreeMap<String, String> = parts
        .uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (pair.to_string(), String::new()),
        })
        .collect();
    let header = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let recorded = Recorded {
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query,
        runtime_actions: parts
            .headers
            .get("X-Runtime-Actions")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body,
    };
    let mut stub = state.lock().unwrap_or_else(|p| p.into_inner());
    stub.requests.push(recorded.clone());
    let mut response = stub.answer(
        &recorded,
        header(header::AUTHORIZATION),
        header(header::CONTENT_TYPE),
    );
    if let Ok(value) = HeaderValue::from_str(&stub.config_version.to_string()) {
        response
            .headers_mut()
            .insert("Configuration-Version", value);
    }
    response
}

/// The `file_upload` part of a multipart body: (file name, content).
pub fn multipart_file(content_type: &str, body: &str) -> Option<(String, String)> {
    let boundary = content_type
        .strip_prefix("multipart/form-data")?
        .split("boundary=")
        .nth(1)?
        .trim_matches('"');
    for part in body.split(&format!("--{boundary}")) {
        let Some((head, rest)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        if !head.contains("name=\"file_upload\"") {
            continue;
        }
        let file_name = head.split("filename=\"").nth(1)?.split('"').next()?;
        return Some((
            file_name.to_string(),
            rest.strip_suffix("\r\n")?.to_string(),
        ));
    }
    None
}

impl StubState {
    pub fn answer(
        &mut self,
        request: &Recorded,
        authorization: Option<String>,
        content_type: Option<String>,
    ) -> Response {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        );
        if authorization.as_deref() != Some(expected.as_str()) {
            let mut response = json_error(StatusCode::UNAUTHORIZED, "invalid username or password");
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"dataplaneapi\""),
            );
            return response;
        }
        let content_type = content_type.unwrap_or_default();
        let Some(rest) = request.path.strip_prefix("/v3/") else {
            return json_error(
                StatusCode::NOT_FOUND,
                &format!("path {} was not found", request.path),
            );
        };
        let segments: Vec<&str> = rest.split('/').collect();
        let method = request.method.clone();
        match (method, segments.as_slice()) {
            (Method::GET, ["info"]) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                json!({
                    "api": { "version": self.api_version, "build_date": "2025-06-01T00:00:00Z" },
                    "system": {}
                })
                .to_string(),
            )
                .into_response(),
            (Method::GET, ["services", "haproxy", "runtime", "info"]) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                json!({
                    "runtimeAPI": "/etc/haproxy/runtime.sock",
                    "info": {
                        "version": self.haproxy_version,
                        "release_date": "2023-12-16",
                        "pid": self.read_worker_pid(),
                    }
                })
                .to_string(),
            )
                .into_response(),
            (Method::GET, ["services", "haproxy", "configuration", "version"]) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                self.config_version.to_string(),
            )
                .into_response(),
            (Method::GET, ["services", "haproxy", "configuration", "raw"]) => {
                let (checksum, stored) = self.stored_config();
                let mut response = text(StatusCode::OK, stored);
                if let Ok(value) = HeaderValue::from_str(&checksum) {
                    response
                        .headers_mut()
                        .insert("Configuration-Checksum", value);
                }
                response
            }
            (Method::GET, ["services", "haproxy", "runtime", "maps"]) => {
                let all = request.query_is("include_unmanaged", "true");
                let listed: Vec<Value> = self
                    .runtime_maps
                    .keys()
                    .filter(|_| all || !self.unmanaged_maps)
                    .map(|name| {
                        let mut map = json!({ "file": format!("maps/{name}.map"), "id": "0" });
                        if !self.unmanaged_maps {
                            map["storage_name"] = json!(format!("{name}.map"));
                        }
                        map
                    })
                    .collect();
                (StatusCode::OK, axum::Json(Value::Array(listed))).into_response()
            }
            (Method::POST, ["services", "haproxy", "configuration", "raw"]) => {
                self.push(request, &content_type)
            }
            (Method::GET, ["services", "haproxy", "reloads", id]) => self.reload_status(id),
            (Method::POST, ["services", "haproxy", "storage", kind]) => {
                self.storage_create(kind, request, &content_type)
            }
            (Method::GET, ["services", "haproxy", "storage", kind, name]) => {
                match self
                    .storage
                    .get(&(kind.to_string(), api_storage_name(name)))
                {
                    Some(content) => (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/octet-stream")],
                        content.clone(),
                    )
                        .into_response(),
                    None => json_error(
                        StatusCode::NOT_FOUND,
                        &format!("file {name} doesn't exist in dir: /etc/haproxy/{kind}"),
                    ),
                }
            }
            (Method::PUT, ["services", "haproxy", "storage", kind, name]) => {
                self.storage_replace(kind, &api_storage_name(name), request, &content_type)
            }
            (Method::DELETE, ["services", "haproxy", "storage", kind, name]) => {
                self.storage_delete(kind, &api_storage_name(name), request)
            }
            (
                Method::PUT,
                [
                    "services",
                    "haproxy",
                    "runtime",
                    "backends",
                    backend,
                    "servers",
                    server,
                ],
            ) => {
                if self.refuse_runtime_servers {
                    return json_error(
                        StatusCode::NOT_FOUND,
                        &format!("Runtime server {server} not found in backend {backend}"),
                    );
                }
                let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(&request.body)
                else {
                    return json_error(StatusCode::BAD_REQUEST, "body is not a JSON object");
                };
                if let Some(weight) = fields.get("weight")
                    && let Some(refusal) = self.weight_refusal(backend, server, &weight.to_string())
                {
                    return json_error(StatusCode::INTERNAL_SERVER_ERROR, &refusal);
                }
                fields.insert("name".into(), json!(server));
                (StatusCode::OK, axum::Json(Value::Object(fields))).into_response()
            }
            (
                Method::POST,
                [
                    "services",
                    "haproxy",
                    "runtime",
                    "backends",
                    backend,
                    "servers",
                ],
            ) => {
                let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&request.body) else {
                    return json_error(StatusCode::BAD_REQUEST, "body is not a JSON object");
                };
                let Some(server) = fields.get("name").and_then(Value::as_str) else {
                    return json_error(StatusCode::BAD_REQUEST, "the new server must have a name");
                };
                if !self.running_has_backend(backend) {
                    return json_error(
                        StatusCode::NOT_FOUND,
                        &format!(
                            "/etc/haproxy/runtime.sock [3]  No such backend. [add server {backend}/{server}]"
                        ),
                    );
                }
                if self.static_backends.iter().any(|b| b == backend) {
                    return json_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!(
                            "/etc/haproxy/runtime.sock [3]  Backend must use a dynamic load balancing to support dynamic servers. [add server {backend}/{server}]"
                        ),
                    );
                }
                if self.runtime_server_exists(backend, server) {
                    return json_error(
                        StatusCode::CONFLICT,
                        &format!(
                            "/etc/haproxy/runtime.sock [3]  Already exists a server with the same name in backend. [add server {backend}/{server}]"
                        ),
                    );
                }
                self.runtime_server_changes
                    .insert((backend.to_string(), server.to_string()), true);
                (StatusCode::CREATED, axum::Json(Value::Object(fields))).into_response()
            }
            (
                Method::DELETE,
                [
                    "services",
                    "haproxy",
                    "runtime",
                    "backends",
                    backend,
                    "servers",
                    server,
                ],
            ) => {
                if !self.runtime_server_exists(backend, server) {
                    return json_error(
                        StatusCode::NOT_FOUND,
                        &format!("server {server} not found in backend {backend}"),
                    );
                }
                self.runtime_server_changes
                    .insert((backend.to_string(), server.to_string()), false);
                StatusCode::NO_CONTENT.into_response()
            }
            // The certificate HAProxy knows as the configuration wrote it (`ssl/a.pem`, its
            // slash encoded in the one path segment): known when the storage holds its file.
            (
                Method::PUT | Method::DELETE,
                ["services", "haproxy", "runtime", "ssl_certs", name],
            ) => {
                let name = name.replace("%2F", "/");
                let file = name.rsplit('/').next().unwrap_or(&name).to_string();
                if !self
                    .storage
                    .contains_key(&("ssl_certificates".to_string(), file))
                {
                    return json_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!(
                            "/etc/haproxy/runtime.sock [3]  Can't replace a certificate which is not referenced by the configuration! [set ssl cert {name}]"
                        ),
                    );
                }
                if request.method == Method::DELETE {
                    return StatusCode::NO_CONTENT.into_response();
                }
                if multipart_file(&content_type, &request.body).is_none() {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        "request Content-Type isn't multipart/form-data",
                    );
                }
                (StatusCode::OK, axum::Json(Value::Null)).into_response()
            }
            (Method::DELETE, ["services", "haproxy", "runtime", "ssl_crt_lists", "entries"]) => {
                if !(request.query.contains_key("name") && request.query.contains_key("cert_file"))
                {
                    return json_error(StatusCode::BAD_REQUEST, "name and cert_file are required");
                }
                StatusCode::NO_CONTENT.into_response()
            }
            (Method::POST, ["services", "haproxy", "runtime", "maps", map, "entries"]) => {
                let Ok(entry) = serde_json::from_str::<Value>(&request.body) else {
                    return json_error(StatusCode::BAD_REQUEST, "body is not JSON");
                };
                let (Some(key), Some(value)) = (entry["key"].as_str(), entry["value"].as_str())
                else {
                    return json_error(StatusCode::BAD_REQUEST, "key and value are required");
                };
                let Some(entries) = self.runtime_maps.get_mut(*map) else {
                    return json_error(StatusCode::NOT_FOUND, &format!("map {map} is not loaded"));
                };
                entries.push((key.to_string(), value.to_string()));
                (StatusCode::CREATED, axum::Json(entry)).into_response()
            }
            (
                Method::PUT,
                [
                    "services",
                    "haproxy",
                    "runtime",
                    "maps",
                    map,
                    "entries",
                    key,
                ],
            ) => {
                let Ok(entry) = serde_json::from_str::<Value>(&request.body) else {
                    return json_error(StatusCode::BAD_REQUEST, "body is not JSON");
                };
                let Some(value) = entry["value"].as_str() else {
                    return json_error(StatusCode::BAD_REQUEST, "value is required");
                };
                let Some(slot) = self
                    .runtime_maps
                    .get_mut(*map)
                    .and_then(|entries| entries.iter_mut().find(|(k, _)| k == key))
                else {
                    return json_error(StatusCode::NOT_FOUND, &format!("{key} entry not found"));
                };
                slot.1 = value.to_string();
                (
                    StatusCode::OK,
                    axum::Json(json!({ "key": key, "value": value })),
                )
                    .into_response()
            }
            (
                Method::DELETE,
                [
                    "services",
                    "haproxy",
                    "runtime",
                    "maps",
                    map,
                    "entries",
                    key,
                ],
            ) => {
                let Some(entries) = self.runtime_maps.get_mut(*map) else {
                    return json_error(StatusCode::NOT_FOUND, &format!("map {map} is not loaded"));
                };
                let before = entries.len();
                entries.retain(|(k, _)| k != key);
                if entries.len() == before {
                    return json_error(StatusCode::NOT_FOUND, &format!("{key} entry not found"));
                }
                StatusCode::NO_CONTENT.into_response()
            }
            _ => json_error(
                StatusCode::NOT_FOUND,
                &format!("path {} was not found", request.path),
            ),
        }
    }

    pub fn push(&mut self, request: &Recorded, content_type: &str) -> Response {
        if !content_type.starts_with("text/plain") {
            return json_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the configuration must be sent as text/plain",
            );
        }
        if !request.body.is_empty() && !request.body.contains('\n') {
            return json_error(
                StatusCode::BAD_REQUEST,
                "invalid configuration: no newline character found",
            );
        }
        let Some(given) = request
            .query
            .get("version")
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return json_error(
                StatusCode::BAD_REQUEST,
                "version or skip_version must be given",
            );
        };
        if self.outdated_to_inject > 0 {
            self.outdated_to_inject -= 1;
            self.config_version += 1;
            return json_error(
                StatusCode::NOT_ACCEPTABLE,
                "transaction 5f1d0c2e is outdated and cannot be committed",
            );
        }
        if self.conflicts_to_inject > 0 {
            self.conflicts_to_inject -= 1;
            self.config_version += 1;
        }
        if given != self.config_version {
            return json_error(
                StatusCode::CONFLICT,
                &format!(
                    "version in configuration file is {}, given version is {given}",
                    self.config_version
                ),
            );
        }
        if request.body.contains(INVALID_MARKER) {
            return json_error(StatusCode::BAD_REQUEST, VALIDATION_FAILURE);
        }
        let body: String = request
            .body
            .split_inclusive('\n')
            .filter(|line| !line.starts_with("# _version="))
            .collect();
        self.last_good = std::mem::replace(&mut self.config, body);
        self.config_version += 1;
        let (checksum, stored) = self.stored_config();
        // The API runs the actions after storing the configuration, and answers 500 when
        // one fails; the new configuration stays.
        if request.query_is("skip_reload", "true")
            && let Some(actions) = &request.runtime_actions
        {
            for action in actions.split(';') {
                let words: Vec<&str> = action.split(' ').collect();
                if let ["SetServerWeight", backend, server, weight] = words.as_slice()
                    && let Some(refusal) = self.weight_refusal(backend, server, weight)
                {
                    return json_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("cannot execute SetServerWeight: {refusal}"),
                    );
                }
            }
        }
        let mut response = if request.query_is("skip_reload", "true") {
            text(StatusCode::CREATED, stored)
        } else {
            let fails = self.config.contains(FAIL_RELOAD_MARKER);
            let id = self.queue_reload(fails);
            accepted_with_reload(&id, stored)
        };
        if let Ok(value) = HeaderValue::from_str(&checksum) {
            response
                .headers_mut()
                .insert("Configuration-Checksum", value);
        }
        response
    }

    /// The configuration file as the API keeps it: its checksum, then the text with the
    /// checksum and version lines on top, printed again as the API's parser prints it.
    pub fn stored_config(&self) -> (String, String) {
        let mut unnamed = 0;
        let reprinted: String = self
            .config
            .lines()
            .map(|line| {
                if line.trim() == "defaults" {
                    unnamed += 1;
                    format!("defaults unnamed_defaults_{unnamed}\n")
                } else if line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
                    format!("  {}\n", line.trim_start())
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        let body = format!("# _version={}\n{reprinted}", self.config_version);
        let checksum =
            haptor::pure::rendered::hex(&sha2::Sha256::digest(body.as_bytes()))[..32].to_string();
        (checksum.clone(), format!("# _md5hash={checksum}\n{body}"))
    }

    /// Queues a reload, or joins the one still pending (requests made while a reload is
    /// pending share its id).
    pub fn queue_reload(&mut self, fails: bool) -> String {
        if !fails {
            self.running_config = self.config.clone();
            self.runtime_server_changes.clear();
        }
        if let Some((id, pending)) = self
            .reloads
            .iter_mut()
            .find(|(_, r)| r.polls_before_done > 0)
        {
            pending.fails |= fails;
            return id.clone();
        }
        self.reload_counter += 1;
        let id = format!("2025-06-01-{}", self.reload_counter);
        self.reloads.insert(
            id.clone(),
            StubReload {
                polls_before_done: 1,
                fails,
                restored: false,
            },
        );
        // Loading the maps the configuration now has, as HAProxy does at start.
        if !fails {
            self.runtime_maps = self
                .storage
                .iter()
                .filter(|((kind, _), _)| kind == "maps")
                .map(|((_, name), content)| {
                    let entries = content
                        .lines()
                        .filter_map(|l| l.split_once(' '))
                        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                        .collect();
                    (name.trim_end_matches(".map").to_string(), entries)
                })
                .collect();
        }
        id
    }

    pub fn reload_status(&mut self, id: &str) -> Response {
        let Some(reload) = self.reloads.get_mut(id) else {
            return json_error(StatusCode::NOT_FOUND, &format!("reload {id} not found"));
        };
        let signal_only = matches!(self.reload_command, ReloadCommand::SignalOnly { .. });
        let status = if reload.polls_before_done > 0 {
            reload.polls_before_done -= 1;
            "in_progress"
        } else if signal_only {
            // The signal was sent; the API knows nothing more.
            if !reload.restored {
                reload.restored = true;
                if !reload.fails
                    && let ReloadCommand::SignalOnly { worker_after_reads } = self.reload_command
                {
                    self.starting_worker = Some(worker_after_reads);
                }
            }
            "succeeded"
        } else if reload.fails {
            if !reload.restored {
                reload.restored = true;
                self.config = self.last_good.clone();
            }
            "failed"
        } else {
            if !reload.restored {
                reload.restored = true;
                self.worker_pid += 1;
            }
            "succeeded"
        };
        let response = if status == "failed" && !signal_only {
            RELOAD_FAILURE_LOG
        } else {
            ""
        };
        (
            StatusCode::OK,
            axum::Json(json!({
                "id": id,
                "status": status,
                "reload_timestamp": 1_748_736_000,
                "response": response,
            })),
        )
            .into_response()
    }

    pub fn storage_create(
        &mut self,
        kind: &str,
        request: &Recorded,
        content_type: &str,
    ) -> Response {
        if !matches!(kind, "maps" | "general" | "ssl_certificates") {
            return json_error(StatusCode::NOT_FOUND, "unknown storage");
        }
        let Some((given, content)) = multipart_file(content_type, &request.body) else {
            return json_error(
                StatusCode::BAD_REQUEST,
                "http: no such file (multipart field file_upload)",
            );
        };
        let mut name = api_storage_name(&given);
        if kind == "ssl_certificates"
            && let Some(refusal) = pem_refusal(&content)
        {
            return json_error(StatusCode::INTERNAL_SERVER_ERROR, refusal);
        }
        if kind == "maps" && !name.ends_with(".map") {
            name.push_str(".map");
        }
        let key = (kind.to_string(), name.clone());
        if self.storage.contains_key(&key) {
            return json_error(
                StatusCode::CONFLICT,
                &format!("file /etc/haproxy/{kind}/{name} already exists"),
            );
        }
        self.storage.insert(key, content);
        let description = json!({
            "storage_name": name,
            "file": format!("/etc/haproxy/{kind}/{name}"),
            "description": "managed file",
        });
        if kind == "ssl_certificates" && !request.query_is("skip_reload", "true") {
            self.unexpected_reloads += 1;
            let id = self.queue_reload(false);
            let mut response = (StatusCode::ACCEPTED, axum::Json(description)).into_response();
            if let Ok(value) = HeaderValue::from_str(&id) {
                response.headers_mut().insert("Reload-ID", value);
            }
            return response;
        }
        (StatusCode::CREATED, axum::Json(description)).into_response()
    }

    pub fn storage_replace(
        &mut self,
        kind: &str,
        name: &str,
        request: &Recorded,
        content_type: &str,
    ) -> Response {
        let key = (kind.to_string(), name.to_string());
        if !self.storage.contains_key(&key) {
            return json_error(
                StatusCode::NOT_FOUND,
                &format!("file {name} doesn't exist in dir: /etc/haproxy/{kind}"),
            );
        }
        let content = if kind == "general" {
            match multipart_file(content_type, &request.body) {
                Some((_, content)) => content,
                None => {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        "request Content-Type isn't multipart/form-data",
                    );
                }
            }
        } else {
            // The API's text body is required: an empty one is refused.
            if request.body.is_empty() {
                return json_error(StatusCode::BAD_REQUEST, "value is required but missing");
            }
            request.body.clone()
        };
        if kind == "ssl_certificates"
            && let Some(refusal) = pem_refusal(&content)
        {
            return json_error(StatusCode::INTERNAL_SERVER_ERROR, refusal);
        }
        self.storage.insert(key, content);
        if !request.query_is("skip_reload", "true") {
            self.unexpected_reloads += 1;
            let id = self.queue_reload(false);
            return accepted_with_reload(&id, String::new());
        }
        if kind == "ssl_certificates" {
            (StatusCode::OK, axum::Json(json!({ "storage_name": name }))).into_response()
        } else {
            StatusCode::NO_CONTENT.into_response()
        }
    }

    pub fn storage_delete(&mut self, kind: &str, name: &str, request: &Recorded) -> Response {
        let key = (kind.to_string(), name.to_string());
        if !self.storage.contains_key(&key) {
            return json_error(
                StatusCode::NOT_FOUND,
                &format!("file {name} doesn't exist in dir: /etc/haproxy/{kind}"),
            );
        }
        if let Some((number, line)) = self
            .config
            .lines()
            .enumerate()
            .find(|(_, line)| !line.trim_start().starts_with('#') && line.contains(name))
        {
            return json_error(
                StatusCode::CONFLICT,
                &format!(
                    "rejecting attempt to delete file /etc/haproxy/{kind}/{name} referenced in haproxy conf at line {number}: {}",
                    line.trim()
                ),
            );
        }
        self.storage.remove(&key);
        if kind == "ssl_certificates" && !request.query_is("skip_reload", "true") {
            self.unexpected_reloads += 1;
            let id = self.queue_reload(false);
            return accepted_with_reload(&id, String::new());
        }
        StatusCode::NO_CONTENT.into_response()
    }
}

impl StubState {
    /// The worker pid the runtime info reports now; a worker a signal-only reload started
    /// answers after its reads.
    fn read_worker_pid(&mut self) -> u64 {
        if let Some(reads) = self.starting_worker {
            if reads == 0 {
                self.starting_worker = None;
                self.worker_pid += 1;
            } else {
                self.starting_worker = Some(reads - 1);
            }
        }
        self.worker_pid
    }

    /// HAProxy's answer to a weight change it refuses, as the API passes it on.
    /// The server lines of `backend` in the configuration the worker runs.
    fn running_servers(&self, backend: &str) -> Option<Vec<String>> {
        let mut lines = self.running_config.lines();
        lines.find(|l| l.split_whitespace().collect::<Vec<_>>() == ["backend", backend])?;
        Some(
            lines
                .take_while(|l| l.starts_with(char::is_whitespace) || l.trim().is_empty())
                .filter_map(|l| {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    (words.first() == Some(&"server"))
                        .then(|| words.get(1).map(|w| w.to_string()))?
                })
                .collect(),
        )
    }

    fn running_has_backend(&self, backend: &str) -> bool {
        self.running_servers(backend).is_some()
    }

    /// Whether the worker has this server: as the configuration it was started from says,
    /// unless a runtime call added or deleted it since.
    pub fn runtime_server_exists(&self, backend: &str, server: &str) -> bool {
        match self
            .runtime_server_changes
            .get(&(backend.to_string(), server.to_string()))
        {
            Some(added) => *added,
            None => self
                .running_servers(backend)
                .is_some_and(|servers| servers.iter().any(|s| s == server)),
        }
    }

    fn weight_refusal(&self, backend: &str, server: &str, weight: &str) -> Option<String> {
        let weight = weight.trim_matches('"');
        (self.static_backends.iter().any(|b| b == backend) && !matches!(weight, "0" | "100" | "0%" | "100%")).then(|| {
            format!(
                "/etc/haproxy/runtime.sock [3]  Backend is using a static LB algorithm and only accepts weights '0%' and '100%'. [set server {backend}/{server} weight {weight}]"
            )
        })
    }
}

/// The name the API stores an upload named `name` under (client-native's SanitizeFilename,
/// written again here so that the stub checks haptor's naming rather than repeating it):
/// the last extension stays, and each run of characters other than ASCII letters, digits,
/// `_`, `-` and `\` in the stem and in the extension becomes one `_`.
pub fn api_storage_name(name: &str) -> String {
    let replace_runs = |text: &str| -> String {
        let mut out = String::new();
        let mut previous_replaced = false;
        for c in text.chars() {
            let kept = c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '\\';
            if kept {
                out.push(c);
            } else if !previous_replaced {
                out.push('_');
            }
            previous_replaced = !kept;
        }
        out
    };
    let base_start = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (stem, extension) = match name[base_start..].rfind('.') {
        Some(i) => (&name[..base_start + i], Some(&name[base_start + i + 1..])),
        None => (name, None),
    };
    let stem = replace_runs(stem);
    match extension {
        None => stem,
        Some(extension) if stem.is_empty() => format!("_{}", replace_runs(extension)),
        Some(extension) => format!("{stem}.{}", replace_runs(extension)),
    }
}

/// Why the API refuses a certificate file (it parses the PEM blocks: a certificate and a
/// private key are both required), by its messages.
fn pem_refusal(content: &str) -> Option<&'static str> {
    if !content.contains("-----BEGIN CERTIFICATE-----") {
        Some("failed to parse certificate")
    } else if !content.contains("PRIVATE KEY-----") {
        Some("file should contain both certificate and private key")
    } else {
        None
    }
}
