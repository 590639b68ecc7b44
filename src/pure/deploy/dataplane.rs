//! The decisions of the Data Plane API target, without I/O: which storage area and name each
//! auxiliary file takes, which changes a running pod takes through the runtime API (server
//! addresses, weights and states; map entries) and which need a reload, and how version
//! lines and API versions are read, which refusals of the API mean "HAProxy or the API said
//! no" rather than "unreachable", and what haptor keeps on a pod to recognise its own
//! deployment after a restart. `drivers::dataplane` executes them over HTTP.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use serde_json::{Map, Value};

use super::plan::{DeploymentPlan, Operation, ServerState, map_entries};
use crate::pure::rendered::{AuxFile, AuxKind, Checksum, RenderedConfig, storage_file_name};

/// The general storage file that keeps the highest epoch a pod accepted.
pub const EPOCH_FILE: &str = "haptor-epoch";

/// The general storage file that records which render the pod runs ([`DeployedMarker`]).
pub const DEPLOYED_FILE: &str = "haptor-deployed";

/// The general storage file that keeps the `haproxy.cfg` of the render [`DEPLOYED_FILE`]
/// names, as haptor rendered it (the API's own copy is its reprint): what a new leader plans
/// its first change from when its render differs from the pod's.
pub const DEPLOYED_CONFIG_FILE: &str = "haptor-deployed.cfg";

/// Storage names haptor keeps for itself; a render's file may not take one.
const RESERVED_NAMES: [&str; 3] = [EPOCH_FILE, DEPLOYED_FILE, DEPLOYED_CONFIG_FILE];

/// What haptor keeps on a pod after each deployment: the checksum of the render the pod
/// runs and the API's checksum of the `haproxy.cfg` that deployment left. The API prints
/// the configuration it stores again through its own parser, so the text on the pod never
/// equals the render; a controller that restarts (a rolling update, a new leader) reads
/// this file and knows the pod already runs a render while the API's checksum of the file
/// is still the recorded one, instead of reloading every pod to find out. It also lists the
/// checksum of each auxiliary file of that render, so that a controller whose render differs
/// (the endpoints moved while it was not leading) knows the pod's files without reading them
/// and can change the pod live rather than reload it ([`DeployedMarker::files_known_in`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployedMarker {
    /// [`RenderedConfig::checksum`] of the render (written as plain hex).
    pub render: Checksum,
    /// The `Configuration-Checksum` the API answered for the configuration it stored.
    pub configuration: String,
    /// Each auxiliary file of the render: its path and the checksum of its content.
    pub files: BTreeMap<String, Checksum>,
}

impl DeployedMarker {
    /// The record of `rendered` (whose checksum is `render`) stored as `configuration`.
    pub fn of(render: Checksum, configuration: String, rendered: &RenderedConfig) -> Self {
        let files = rendered
            .aux_files
            .iter()
            .map(|(path, file)| (path.clone(), Checksum::of(file.content.as_bytes())))
            .collect();
        DeployedMarker {
            render,
            configuration,
            files,
        }
    }

    /// The file's text: `render <checksum>` and `configuration <checksum>` lines, then one
    /// `file <checksum> <path>` line per auxiliary file.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "render {}\nconfiguration {}\n",
            self.render, self.configuration
        );
        for (path, checksum) in &self.files {
            text.push_str(&format!("file {checksum} {path}\n"));
        }
        text
    }

    /// The recorded files `to` holds with the same content (those the pod has as `to` has
    /// them), and the paths of the others (changed, or gone from `to`): what the pod runs,
    /// as far as `to` tells it.
    pub fn files_known_in(&self, to: &RenderedConfig) -> (BTreeMap<String, AuxFile>, Vec<String>) {
        let mut known = BTreeMap::new();
        let mut unknown = Vec::new();
        for (path, checksum) in &self.files {
            match to.aux_files.get(path) {
                Some(file) if Checksum::of(file.content.as_bytes()) == *checksum => {
                    known.insert(path.clone(), file.clone());
                }
                _ => unknown.push(path.clone()),
            }
        }
        (known, unknown)
    }

    /// Reads [`DeployedMarker::to_text`]; `None` for anything else (a file from another
    /// writer or a damaged one counts as no record, which costs a reload, never a wrong
    /// "unchanged").
    pub fn parse(text: &str) -> Option<DeployedMarker> {
        let mut render = None;
        let mut configuration = None;
        let mut files = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match line.split_once(' ') {
                Some(("render", value)) if render.is_none() => render = Some(value.trim()),
                Some(("configuration", value)) if configuration.is_none() => {
                    configuration = Some(value.trim())
                }
                Some(("file", value)) => {
                    let (checksum, path) = value.split_once(' ')?;
                    if path.is_empty() {
                        return None;
                    }
                    files.insert(path.to_string(), checksum.parse().ok()?);
                }
                _ => return None,
            }
        }
        let (render, configuration) = (render?, configuration?);
        if configuration.is_empty() {
            return None;
        }
        Some(DeployedMarker {
            render: render.parse().ok()?,
            configuration: configuration.to_string(),
            files,
        })
    }

    /// Whether a pod whose `haproxy.cfg` the API checksums as `live_checksum` still runs the
    /// recorded render.
    pub fn still_runs(&self, live_checksum: Option<&str>) -> bool {
        live_checksum == Some(self.configuration.as_str())
    }
}

/// A Data Plane API version, from `/v3/info`'s `api.version` (`v3.1.2 4a1b2c3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ApiVersion {
    /// The oldest API this target talks to: v3.2.0 is the first whose certificate upload
    /// honours `skip_reload` (older ones reload HAProxy on every certificate written, before
    /// the configuration naming it is pushed), and v3.0.5 the first whose general file
    /// replace takes the multipart upload haptor sends (older ones want a text body). Every
    /// other endpoint haptor uses (`/info`, raw configuration with `Configuration-Checksum`
    /// and `X-Runtime-Actions`, reloads, map and general storage, runtime maps with
    /// `include_unmanaged`, runtime servers, runtime info) is in every v3.
    pub const MINIMUM: ApiVersion = ApiVersion::new(3, 2, 0);
    /// From this version on, the runtime server endpoint sets address, port and weight.
    pub const RUNTIME_SERVER_FIELDS: ApiVersion = ApiVersion::new(3, 3, 1);

    pub const fn new(major: u32, minor: u32, patch: u32) -> ApiVersion {
        ApiVersion {
            major,
            minor,
            patch,
        }
    }

    /// Reads `v3.1.2 4a1b2c3`, `3.1.2`, `v3.2.0-dev1`; missing minor or patch count as 0.
    pub fn parse(text: &str) -> Option<ApiVersion> {
        let word = text.split_whitespace().next()?;
        let word = word
            .strip_prefix(['v', 'V'])
            .unwrap_or(word)
            .split(['-', '+'])
            .next()?;
        let mut parts = word.split('.').map(|part| -> Option<u32> {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(ApiVersion::new(major, minor, patch))
    }
}

/// What `/v3/info`'s `api.version` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportedApiVersion {
    /// A release's version.
    Release(ApiVersion),
    /// A binary built without the release's version flags: the API reports its version as
    /// ` dev.dirty` (or `dev`), which says nothing of the features it has.
    DevelopmentBuild,
}

impl ReportedApiVersion {
    /// Reads `api.version`; `None` when it is neither a version nor a development build.
    pub fn read(text: &str) -> Option<ReportedApiVersion> {
        if let Some(version) = ApiVersion::parse(text) {
            return Some(ReportedApiVersion::Release(version));
        }
        let word = text.split_whitespace().next()?;
        (word == "dev" || word.starts_with("dev.")).then_some(ReportedApiVersion::DevelopmentBuild)
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The storage areas haptor writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StorageKind {
    /// `/storage/maps`: create multipart, replace with a text body.
    Maps,
    /// `/storage/general`: create and replace multipart.
    General,
    /// `/storage/ssl_certificates`: create multipart, replace with a text body; every write
    /// and delete takes `skip_reload`.
    SslCertificates,
}

impl StorageKind {
    pub fn segment(self) -> &'static str {
        match self {
            StorageKind::Maps => "maps",
            StorageKind::General => "general",
            StorageKind::SslCertificates => "ssl_certificates",
        }
    }
}

impl fmt::Display for StorageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.segment())
    }
}

/// Where an auxiliary file lives in the API's storage.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Placement {
    pub kind: StorageKind,
    /// The storage name: the file name of the auxiliary path.
    pub name: String,
}

/// The `N` of a leading `# _version=N` line.
pub fn version_line(text: &str) -> Option<u64> {
    text.lines()
        .next()?
        .trim()
        .strip_prefix("# _version=")?
        .trim()
        .parse()
        .ok()
}

/// The `H` of a leading `# _md5hash=H` line, the checksum the API writes above its version
/// line.
pub fn checksum_line(text: &str) -> Option<&str> {
    text.lines()
        .next()?
        .trim()
        .strip_prefix("# _md5hash=")
        .map(str::trim)
        .filter(|h| !h.is_empty())
}

/// Whether the pod's `haproxy.cfg` is still the one haptor pushed. The API prints the text
/// it is given again through its own parser, so the text read back differs from the pushed
/// one even when nothing changed: the API's checksum of the file, as it answered the push,
/// decides. Without checksums on both sides (an API that keeps the text as given), the
/// texts below their version lines are compared.
pub fn runs_pushed(
    live_text: &str,
    live_checksum: Option<&str>,
    pushed_text: &str,
    pushed_checksum: Option<&str>,
) -> bool {
    match (live_checksum, pushed_checksum) {
        (Some(live), Some(pushed)) => live == pushed,
        _ => {
            strip_version_lines(live_text).trim_end() == strip_version_lines(pushed_text).trim_end()
        }
    }
}

/// The configuration text without the `# _version=N` (and `# _md5hash=`) lines the API puts
/// at its top.
pub fn strip_version_lines(text: &str) -> &str {
    let mut rest = text;
    while rest.starts_with("# _version=") || rest.starts_with("# _md5hash=") {
        rest = match rest.split_once('\n') {
            Some((_, after)) => after,
            None => "",
        };
    }
    rest
}

/// Where an auxiliary file goes: maps to map storage (the name must end in `.map`, which the
/// API adds to any other name), certificates to certificate storage, general files and
/// crt-lists to general storage, all under the file name of their path.
pub fn placement(file: &AuxFile) -> Result<Placement, String> {
    let name = file.path.rsplit('/').next().unwrap_or(&file.path);
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!(
            "{} '{}' has no file name to store it under",
            file.kind, file.path
        ));
    }
    let kind = match file.kind {
        AuxKind::Map => {
            if !name.ends_with(".map") {
                return Err(format!(
                    "map '{}' must end in .map: the Data Plane API's map storage adds .map to any other name, so HAProxy would not find the file at the path the configuration names",
                    file.path
                ));
            }
            StorageKind::Maps
        }
        AuxKind::Cert => StorageKind::SslCertificates,
        AuxKind::File | AuxKind::CrtList => {
            if RESERVED_NAMES.contains(&name) {
                return Err(format!(
                    "{} '{}' is stored as general file '{name}', a name haptor keeps its own records under ({EPOCH_FILE}: the fencing epoch, {DEPLOYED_FILE} and {DEPLOYED_CONFIG_FILE}: the deployed render); rename it",
                    file.kind, file.path
                ));
            }
            StorageKind::General
        }
    };
    let stored = storage_file_name(name);
    if stored != name {
        return Err(format!(
            "{} '{}' would be stored by the Data Plane API as '{stored}', so the configuration would name a file that does not exist; name it '{stored}' (haptor's path_for and register_file do)",
            file.kind, file.path
        ));
    }
    Ok(Placement {
        kind,
        name: name.to_string(),
    })
}

/// Every auxiliary file's placement, by path; two files in one place are an error.
pub fn placements(rendered: &RenderedConfig) -> Result<BTreeMap<String, Placement>, String> {
    let mut by_path = BTreeMap::new();
    let mut taken: BTreeMap<Placement, &str> = BTreeMap::new();
    for (path, file) in &rendered.aux_files {
        let placement = placement(file)?;
        if let Some(other) = taken.insert(placement.clone(), path) {
            return Err(format!(
                "auxiliary files '{other}' and '{path}' would both be stored as {} file '{}'",
                placement.kind, placement.name
            ));
        }
        by_path.insert(path.clone(), placement);
    }
    Ok(by_path)
}

/// The runtime calls a plan without reload makes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LiveChanges {
    /// `PUT /runtime/backends/{b}/servers/{s}` bodies, by backend and server.
    pub servers: BTreeMap<(String, String), Map<String, Value>>,
    /// `X-Runtime-Actions` for APIs before v3.3.1 (address and weight changes).
    pub actions: Vec<String>,
    pub maps: Vec<MapChange>,
    /// `DELETE /runtime/backends/{b}/servers/{s}` (the API puts the server in maintenance
    /// first), by backend and server, before any other server call.
    pub deleted_servers: Vec<(String, String)>,
    /// The same for the servers of backends the configuration no longer has
    /// ([`super::plan::RemovedBackend`]), after every other call, the map entries that stop
    /// routing to them included. The API's runtime endpoints address the running HAProxy,
    /// which keeps such a backend until the next reload, so the pushed `haproxy.cfg` lacking
    /// it does not stop them.
    pub emptied_servers: Vec<(String, String)>,
    /// `POST /runtime/backends/{b}/servers` bodies, after every other server call.
    pub added_servers: Vec<AddedServer>,
    /// Certificate and crt-list calls, in the plan's order.
    pub certificates: Vec<CertificateCall>,
    /// How many runtime operations of the plan these calls carry out.
    pub count: usize,
}

/// A certificate or crt-list change through the runtime endpoints.
#[derive(Debug, PartialEq, Eq)]
pub enum CertificateCall {
    /// `PUT /runtime/ssl_certs/{name}`: a rotated certificate.
    Replace { name: String, pem: String },
    /// `DELETE /runtime/ssl_crt_lists/entries?name=LIST&cert_file=CERT`.
    DeleteEntry { list: String, certificate: String },
    /// `DELETE /runtime/ssl_certs/{name}`.
    Delete { name: String },
}

/// A server the runtime API adds: the `runtime_add_server` body, then, unless it starts
/// disabled, `admin_state: ready` (HAProxy creates it in maintenance).
#[derive(Debug, PartialEq, Eq)]
pub struct AddedServer {
    pub backend: String,
    pub server: String,
    pub body: Map<String, Value>,
    pub ready: bool,
}

/// The `runtime_add_server` body for a server with these parameters (v3.4.0's field names;
/// the API writes them back as `add server` words). Health and agent checks are refused:
/// the API cannot turn on the checks of a server it adds (`enable health` has no endpoint),
/// and a server whose checks never run would take traffic while down.
pub fn runtime_add_server_body(
    server: &str,
    address: &str,
    port: Option<u16>,
    parameters: &[String],
) -> Result<(Map<String, Value>, bool), String> {
    let mut body = Map::new();
    body.insert("name".into(), Value::from(server));
    body.insert(
        "address".into(),
        Value::from(address.trim_start_matches('[').trim_end_matches(']')),
    );
    if let Some(port) = port {
        body.insert("port".into(), Value::from(port));
    }
    let mut ready = true;
    let mut words = parameters.iter();
    while let Some(word) = words.next() {
        let flag = |field: &str, value: &str| (field.to_string(), Value::from(value));
        let (field, value) = match word.as_str() {
            "backup" => flag("backup", "enabled"),
            "ssl" => flag("ssl", "enabled"),
            "send-proxy" => flag("send-proxy", "enabled"),
            "send-proxy-v2" => flag("send-proxy-v2", "enabled"),
            "send-proxy-v2-ssl" => flag("send_proxy_v2_ssl", "enabled"),
            "send-proxy-v2-ssl-cn" => flag("send_proxy_v2_ssl_cn", "enabled"),
            "tfo" => flag("tfo", "enabled"),
            "tls-tickets" => flag("tls_tickets", "enabled"),
            "no-tls-tickets" => flag("tls_tickets", "disabled"),
            "no-ssl-reuse" => flag("ssl_reuse", "disabled"),
            "allow-0rtt" => ("allow_0rtt".to_string(), Value::from(true)),
            "disabled" => {
                ready = false;
                flag("maintenance", "enabled")
            }
            "enabled" => {
                ready = true;
                flag("maintenance", "disabled")
            }
            keyword => {
                let field = match keyword {
                    "alpn" | "proto" | "sni" | "verify" | "verifyhost" | "ciphers"
                    | "ciphersuites" | "observe" | "ws" | "on-error" | "on-marked-down"
                    | "on-marked-up" => keyword.to_string(),
                    "ssl-min-ver" => "ssl_min_ver".into(),
                    "ssl-max-ver" => "ssl_max_ver".into(),
                    "weight" | "maxconn" | "maxqueue" | "minconn" | "rise" | "fall" => {
                        keyword.to_string()
                    }
                    "error-limit" => "error_limit".into(),
                    "pool-max-conn" => "pool_max_conn".into(),
                    "pool-low-conn" => "pool_low_conn".into(),
                    "slowstart" | "inter" | "fastinter" | "downinter" => keyword.to_string(),
                    "pool-purge-delay" => "pool_purge_delay".into(),
                    "check" | "agent-check" => {
                        return Err(format!(
                            "server {server} would be added with '{keyword}', but the Data Plane API cannot turn on the checks of a server it adds"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "server {server} would be added with '{keyword}', which haptor does not add through the Data Plane API"
                        ));
                    }
                };
                let Some(value) = words.next() else {
                    return Err(format!("server {server}: '{keyword}' has no value"));
                };
                let value = match keyword {
                    "weight" | "maxconn" | "maxqueue" | "minconn" | "rise" | "fall"
                    | "error-limit" | "pool-max-conn" | "pool-low-conn" => {
                        Value::from(value.parse::<i64>().map_err(|_| {
                            format!("server {server}: {keyword} '{value}' is not a number")
                        })?)
                    }
                    "slowstart" | "inter" | "fastinter" | "downinter" | "pool-purge-delay" => {
                        Value::from(haproxy_milliseconds(value).ok_or_else(|| {
                            format!("server {server}: {keyword} '{value}' is not a duration")
                        })?)
                    }
                    _ => Value::from(value.as_str()),
                };
                (field, value)
            }
        };
        body.insert(field, value);
    }
    Ok((body, ready))
}

/// An HAProxy duration (`500`, `500ms`, `2s`, `1m`, `1h`, `1d`) in milliseconds.
fn haproxy_milliseconds(text: &str) -> Option<i64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let number: i64 = text[..digits].parse().ok()?;
    let factor = match &text[digits..] {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// Entry changes that turn a loaded map's old content into the new one.
#[derive(Debug, PartialEq, Eq)]
pub struct MapChange {
    /// The auxiliary path: the map is found among the loaded ones by it
    /// ([`loaded_map_reference`]).
    pub path: String,
    pub adds: Vec<(String, String)>,
    pub sets: Vec<(String, String)>,
    pub deletes: Vec<String>,
}

/// A map HAProxy has loaded, as `GET /runtime/maps?include_unmanaged=true` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct LoadedMap {
    /// The path as the configuration wrote it.
    #[serde(default)]
    pub file: String,
    /// Set by the API when that path lies in its maps directory.
    #[serde(default)]
    pub storage_name: Option<String>,
}

/// How the runtime endpoints must name the map loaded from the auxiliary `path`, or why
/// they cannot reach it. The API turns the name `N` into `<maps_dir>/N.map` and refuses
/// HAProxy's `#<id>` references, and HAProxy knows a map by the path the configuration
/// wrote: so only a map the configuration names by its absolute path in the API's maps
/// directory can be changed at runtime; any other needs a reload.
pub fn loaded_map_reference(loaded: &[LoadedMap], path: &str) -> Result<String, String> {
    let wanted = path.trim_start_matches("./");
    let same = |file: &str| {
        let file = file.trim_start_matches("./");
        file == wanted || file.ends_with(&format!("/{wanted}"))
    };
    let Some(map) = loaded.iter().find(|m| same(&m.file)) else {
        let files: Vec<&str> = loaded.iter().map(|m| m.file.as_str()).collect();
        return Err(format!(
            "HAProxy has loaded no map from {path} (its maps: {})",
            if files.is_empty() {
                "none".to_string()
            } else {
                files.join(", ")
            }
        ));
    };
    match map.storage_name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => Ok(name.strip_suffix(".map").unwrap_or(name).to_string()),
        _ => Err(format!(
            "the configuration names map {path} as '{}', which the Data Plane API's runtime endpoints cannot reach: they address a map by its absolute path in the API's maps directory (write e.g. map(/etc/haproxy/maps/{}) in the template to change it without a reload)",
            map.file,
            path.rsplit('/').next().unwrap_or(path)
        )),
    }
}

/// The runtime calls for a plan without reload, or why it needs a reload after all.
pub fn live_changes(
    plan: &DeploymentPlan,
    from: &RenderedConfig,
    placements: &BTreeMap<String, Placement>,
    version: ApiVersion,
) -> Result<LiveChanges, String> {
    let full_server_api = version >= ApiVersion::RUNTIME_SERVER_FIELDS;
    let mut changes = LiveChanges::default();
    for op in plan.operations.iter().filter(|op| op.is_runtime()) {
        changes.count += 1;
        match op {
            Operation::SetServerAddress {
                backend,
                server,
                address,
                port,
            } => {
                if address.parse::<IpAddr>().is_err() {
                    return Err(format!(
                        "server {backend}/{server} moves to '{address}', not an IP address; the runtime API sets IP addresses only"
                    ));
                }
                if full_server_api {
                    let fields = changes
                        .servers
                        .entry((backend.clone(), server.clone()))
                        .or_default();
                    fields.insert("address".into(), Value::from(address.as_str()));
                    if let Some(port) = port {
                        fields.insert("port".into(), Value::from(*port));
                    }
                } else {
                    let Some(port) = port else {
                        return Err(format!(
                            "server {backend}/{server} has no port, which API {version} needs to change its address"
                        ));
                    };
                    changes.actions.push(format!(
                        "SetServerAddr {} {} {address} {port}",
                        action_word(backend)?,
                        action_word(server)?
                    ));
                }
            }
            Operation::SetServerWeight {
                backend,
                server,
                weight,
            } => {
                if full_server_api {
                    changes
                        .servers
                        .entry((backend.clone(), server.clone()))
                        .or_default()
                        .insert("weight".into(), Value::from(*weight));
                } else {
                    changes.actions.push(format!(
                        "SetServerWeight {} {} {weight}",
                        action_word(backend)?,
                        action_word(server)?
                    ));
                }
            }
            Operation::SetServerState {
                backend,
                server,
                state,
            } => {
                let state = match state {
                    ServerState::Ready => "ready",
                    ServerState::Maint => "maint",
                };
                changes
                    .servers
                    .entry((backend.clone(), server.clone()))
                    .or_default()
                    .insert("admin_state".into(), Value::from(state));
            }
            Operation::ReplaceMap { path, entries, .. } => {
                let old = from
                    .aux_files
                    .get(path)
                    .map(|f| map_entries(&f.content))
                    .unwrap_or_default();
                if !placements.contains_key(path) {
                    return Err(format!("map {path} has no storage place"));
                }
                changes.maps.push(map_change(path, &old, entries)?);
            }
            Operation::AddServer {
                backend,
                server,
                address,
                port,
                parameters,
            } => {
                let (body, ready) = runtime_add_server_body(server, address, *port, parameters)
                    .map_err(|reason| format!("{reason} (backend {backend})"))?;
                changes.added_servers.push(AddedServer {
                    backend: backend.clone(),
                    server: server.clone(),
                    body,
                    ready,
                });
            }
            Operation::DelServer { backend, server } => {
                let removed = plan.removed_backends.iter().any(|r| r.name == *backend);
                let list = if removed {
                    &mut changes.emptied_servers
                } else {
                    &mut changes.deleted_servers
                };
                list.push((backend.clone(), server.clone()));
            }
            Operation::SetCertificate {
                path,
                new: false,
                pem,
            } => changes.certificates.push(CertificateCall::Replace {
                name: path.clone(),
                pem: pem.clone(),
            }),
            // The API keeps only the file name of an upload (Go's multipart reader drops
            // the folder), so it cannot create `ssl/x.pem` at runtime, and a crt-list line
            // would name a certificate HAProxy does not have.
            Operation::SetCertificate {
                path, new: true, ..
            }
            | Operation::AddCrtListEntry { line: path, .. } => {
                return Err(format!(
                    "certificate {} is new; the Data Plane API cannot create it at runtime under the name the configuration gives it, so a reload loads it",
                    path.split_whitespace().next().unwrap_or(path)
                ));
            }
            Operation::DelCrtListEntry { list, certificate } => {
                changes.certificates.push(CertificateCall::DeleteEntry {
                    list: list.clone(),
                    certificate: certificate.clone(),
                });
            }
            Operation::DelCertificate { path } => {
                changes
                    .certificates
                    .push(CertificateCall::Delete { name: path.clone() });
            }
            Operation::WriteConfig | Operation::WriteFile { .. } | Operation::DeleteFile { .. } => {
            }
        }
    }
    Ok(changes)
}

/// Whether an error answer of a runtime endpoint (a server or map entry change) carries
/// HAProxy's own refusal of the command: the API runs it on HAProxy's runtime socket and,
/// when HAProxy answers with an error, says so with status 500 and the message
/// `<socket> [<severity>] <HAProxy's answer> [<command>]` (v3.4.0: `/etc/haproxy/runtime.sock
/// [3]  Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.
/// [set server be/s1 weight 5]`). Any
/// 4xx but refused credentials is the API refusing the call. Either way a reload can still
/// apply the change; other 5xx (the runtime socket cannot be reached, a crash) cannot be
/// told from an outage.
pub fn is_runtime_refusal(status: u16, message: &str) -> bool {
    match status {
        401 | 403 => false,
        400..=499 => true,
        500 => is_haproxy_answer(message),
        _ => false,
    }
}

/// A runtime answer HAProxy tagged with its severity: `[N]` somewhere in the message (the
/// API puts the socket's path before it).
fn is_haproxy_answer(message: &str) -> bool {
    message.split('[').skip(1).any(|after| {
        after
            .split_once(']')
            .is_some_and(|(tag, _)| !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Whether the API's error answer to a configuration push with `X-Runtime-Actions` says an
/// action failed. The API stores the configuration first and runs the actions after it
/// (`cannot execute SetServerWeight: ...`), so the pod has the new file without its live
/// changes: a reload applies them.
pub fn is_runtime_action_failure(status: u16, message: &str) -> bool {
    status == 500 && message.trim_start().starts_with("cannot execute ")
}

/// Whether the API's error answer to a storage upload is its refusal of the content (it
/// checks certificates: a file that is no PEM certificate, or one without its private key).
/// The API answers these with 500, like its own failures; the messages tell them apart.
pub fn is_content_refusal(kind: StorageKind, status: u16, message: &str) -> bool {
    const CERTIFICATE_REFUSALS: [&str; 2] = [
        "failed to parse certificate",
        "file should contain both certificate and private key",
    ];
    match kind {
        StorageKind::SslCertificates => {
            (400..=500).contains(&status)
                && !matches!(status, 401 | 403 | 404 | 409)
                && CERTIFICATE_REFUSALS.iter().any(|m| message.contains(m))
        }
        StorageKind::Maps | StorageKind::General => false,
    }
}

/// A backend or server name as one word of `X-Runtime-Actions` (split on `;` and spaces).
pub fn action_word(word: &str) -> Result<&str, String> {
    if word.is_empty() || word.contains(|c: char| c.is_whitespace() || c == ';') {
        Err(format!(
            "'{word}' cannot be passed in X-Runtime-Actions, which splits on spaces and ';'"
        ))
    } else {
        Ok(word)
    }
}

/// The entry changes from `old` to `new`, or why the runtime API cannot make them: a key
/// given twice (HAProxy keeps both, entry calls address one), or a key or value the runtime
/// command line would split or cut.
pub fn map_change(
    path: &str,
    old: &[(String, String)],
    new: &[(String, String)],
) -> Result<MapChange, String> {
    let unique = |entries: &[(String, String)]| -> Result<BTreeMap<String, String>, String> {
        let mut by_key = BTreeMap::new();
        for (key, value) in entries {
            if by_key.insert(key.clone(), value.clone()).is_some() {
                return Err(format!(
                    "map {path} has the key '{key}' twice; the runtime API cannot reproduce that"
                ));
            }
        }
        Ok(by_key)
    };
    let old_by_key = unique(old)?;
    unique(new)?;
    let awkward = |text: &str| {
        text.is_empty()
            || text.contains(|c: char| c.is_whitespace() || matches!(c, ';' | '\\' | '"' | '\''))
    };
    let mut change = MapChange {
        path: path.to_string(),
        adds: Vec::new(),
        sets: Vec::new(),
        deletes: Vec::new(),
    };
    for (key, value) in new {
        if awkward(key) || awkward(value) {
            return Err(format!(
                "map {path} entry '{key} {value}' cannot go through the runtime API's command line"
            ));
        }
        match old_by_key.get(key) {
            None => change.adds.push((key.clone(), value.clone())),
            Some(previous) if previous != value => change.sets.push((key.clone(), value.clone())),
            Some(_) => {}
        }
    }
    let new_keys: BTreeSet<&String> = new.iter().map(|(k, _)| k).collect();
    change.deletes = old
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !new_keys.contains(k))
        .cloned()
        .collect();
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aux(kind: AuxKind, path: &str) -> AuxFile {
        AuxFile {
            kind,
            name: path.rsplit('/').next().unwrap_or(path).into(),
            path: path.into(),
            content: String::new(),
        }
    }

    #[test]
    fn api_versions_are_read_with_or_without_the_v_and_build_suffix() {
        assert_eq!(
            ApiVersion::parse("v3.1.2 4a1b2c3"),
            Some(ApiVersion::new(3, 1, 2))
        );
        assert_eq!(ApiVersion::parse("3.3"), Some(ApiVersion::new(3, 3, 0)));
        assert_eq!(
            ApiVersion::parse("v3.2.0-dev1"),
            Some(ApiVersion::new(3, 2, 0))
        );
        assert_eq!(ApiVersion::parse("garbage"), None);
        assert!(ApiVersion::parse("v2.9.4").expect("parses") < ApiVersion::MINIMUM);
        assert!(ApiVersion::new(3, 3, 0) < ApiVersion::RUNTIME_SERVER_FIELDS);
    }

    #[test]
    fn version_lines_at_the_top_are_dropped_and_nothing_else() {
        assert_eq!(
            strip_version_lines("# _version=7\nglobal\n# _version=8\n"),
            "global\n# _version=8\n"
        );
        assert_eq!(strip_version_lines("global\n"), "global\n");
    }

    #[test]
    fn files_are_placed_by_kind_under_their_file_name() {
        let placed = |kind, path| placement(&aux(kind, path));
        assert_eq!(
            placed(AuxKind::Map, "maps/hosts.map"),
            Ok(Placement {
                kind: StorageKind::Maps,
                name: "hosts.map".into()
            })
        );
        assert_eq!(
            placed(AuxKind::CrtList, "general/certs.list").map(|p| p.kind),
            Ok(StorageKind::General)
        );
        assert_eq!(
            placed(AuxKind::Cert, "ssl/site.pem").map(|p| p.kind),
            Ok(StorageKind::SslCertificates)
        );
        let no_suffix = placed(AuxKind::Map, "maps/hosts").expect_err("needs .map");
        assert!(no_suffix.contains("maps/hosts"), "{no_suffix}");
        let epoch = placed(AuxKind::File, "general/haptor-epoch").expect_err("reserved");
        assert!(epoch.contains(EPOCH_FILE), "{epoch}");
    }

    #[test]
    fn two_files_with_one_storage_name_are_refused() {
        let mut rendered = RenderedConfig::default();
        for path in ["general/a.txt", "other/a.txt"] {
            rendered
                .aux_files
                .insert(path.into(), aux(AuxKind::File, path));
        }
        let error = placements(&rendered).expect_err("collision");
        assert!(
            error.contains("general/a.txt") && error.contains("other/a.txt"),
            "{error}"
        );
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_map_change_adds_sets_and_deletes_only_what_differs() {
        let old = entries(&[
            ("a.example", "be_a"),
            ("b.example", "be_b"),
            ("c.example", "be_c"),
        ]);
        let new = entries(&[
            ("a.example", "be_a"),
            ("b.example", "be_x"),
            ("d.example", "be_d"),
        ]);
        let change = map_change("maps/hosts.map", &old, &new).expect("expressible");
        assert_eq!(change.adds, entries(&[("d.example", "be_d")]));
        assert_eq!(change.sets, entries(&[("b.example", "be_x")]));
        assert_eq!(change.deletes, vec!["c.example".to_string()]);
    }

    #[test]
    fn duplicate_keys_and_values_with_spaces_need_a_reload() {
        let old = entries(&[("a", "x")]);
        let twice = entries(&[("a", "x"), ("a", "y")]);
        assert!(map_change("m.map", &old, &twice).is_err());
        let spaced = entries(&[("a", "x y")]);
        assert!(map_change("m.map", &old, &spaced).is_err());
    }

    #[test]
    fn an_old_api_gets_address_and_weight_as_runtime_actions() {
        let plan = DeploymentPlan {
            operations: vec![
                Operation::SetServerAddress {
                    backend: "be".into(),
                    server: "s1".into(),
                    address: "10.0.0.2".into(),
                    port: Some(8080),
                },
                Operation::SetServerWeight {
                    backend: "be".into(),
                    server: "s1".into(),
                    weight: 5,
                },
                Operation::SetServerState {
                    backend: "be".into(),
                    server: "s2".into(),
                    state: ServerState::Maint,
                },
                Operation::WriteConfig,
            ],
            ..DeploymentPlan::default()
        };
        let from = RenderedConfig::default();
        let old = live_changes(&plan, &from, &BTreeMap::new(), ApiVersion::new(3, 0, 5))
            .expect("expressible");
        assert_eq!(
            old.actions,
            vec![
                "SetServerAddr be s1 10.0.0.2 8080",
                "SetServerWeight be s1 5"
            ]
        );
        assert_eq!(
            old.servers.len(),
            1,
            "state goes through the runtime endpoint"
        );
        assert_eq!(old.count, 3);
        let new = live_changes(&plan, &from, &BTreeMap::new(), ApiVersion::new(3, 3, 1))
            .expect("expressible");
        assert!(new.actions.is_empty());
        let s1 = &new.servers[&("be".to_string(), "s1".to_string())];
        assert_eq!(s1["address"], "10.0.0.2");
        assert_eq!(s1["port"], 8080);
        assert_eq!(s1["weight"], 5);
    }

    #[test]
    fn a_removed_backends_servers_are_deleted_after_the_map_changes_and_a_kept_ones_before() {
        let del = |backend: &str, server: &str| Operation::DelServer {
            backend: backend.into(),
            server: server.into(),
        };
        let plan = DeploymentPlan {
            operations: vec![del("be", "s1"), del("api", "a1"), Operation::WriteConfig],
            removed_backends: vec![crate::pure::deploy::plan::RemovedBackend {
                name: "api".into(),
                servers: 1,
            }],
            ..DeploymentPlan::default()
        };
        let changes = live_changes(
            &plan,
            &RenderedConfig::default(),
            &BTreeMap::new(),
            ApiVersion::new(3, 4, 0),
        )
        .expect("expressible");
        assert_eq!(
            changes.deleted_servers,
            vec![("be".to_string(), "s1".to_string())]
        );
        assert_eq!(
            changes.emptied_servers,
            vec![("api".to_string(), "a1".to_string())]
        );
        assert_eq!(changes.count, 2);
    }

    #[test]
    fn a_server_moving_to_a_host_name_needs_a_reload() {
        let plan = DeploymentPlan {
            operations: vec![Operation::SetServerAddress {
                backend: "be".into(),
                server: "s1".into(),
                address: "db.internal".into(),
                port: Some(80),
            }],
            ..DeploymentPlan::default()
        };
        let reason = live_changes(
            &plan,
            &RenderedConfig::default(),
            &BTreeMap::new(),
            ApiVersion::new(3, 3, 1),
        )
        .expect_err("not an IP");
        assert!(reason.contains("db.internal"), "{reason}");
    }

    #[test]
    fn only_a_map_named_by_its_absolute_path_in_the_maps_directory_is_reachable_at_runtime() {
        let loaded = vec![
            LoadedMap {
                file: "maps/hosts.map".into(),
                storage_name: None,
            },
            LoadedMap {
                file: "/etc/haproxy/maps/paths.map".into(),
                storage_name: Some("paths.map".into()),
            },
        ];
        assert_eq!(
            loaded_map_reference(&loaded, "maps/paths.map"),
            Ok("paths".to_string())
        );
        let relative = loaded_map_reference(&loaded, "./maps/hosts.map").expect_err("relative");
        assert!(
            relative.contains("'maps/hosts.map'")
                && relative.contains("/etc/haproxy/maps/hosts.map"),
            "{relative}"
        );
        let missing = loaded_map_reference(&loaded, "maps/other.map").expect_err("not loaded");
        assert!(missing.contains("no map from maps/other.map"), "{missing}");
    }

    #[test]
    fn the_pod_runs_what_was_pushed_when_the_apis_checksums_agree_whatever_the_text() {
        let pushed = "global\n    maxconn 10\n";
        let reprinted = "# _md5hash=abc\n# _version=4\nglobal\n  maxconn 10\n";
        assert!(runs_pushed(reprinted, Some("abc"), pushed, Some("abc")));
        assert!(!runs_pushed(reprinted, Some("abd"), pushed, Some("abc")));
        // Without checksums the texts decide.
        assert!(!runs_pushed(reprinted, None, pushed, None));
        assert!(runs_pushed(
            "# _version=4\nglobal\n    maxconn 10\n",
            None,
            pushed,
            None
        ));
        assert_eq!(checksum_line(reprinted), Some("abc"));
        assert_eq!(checksum_line("# _version=4\n"), None);
    }

    #[test]
    fn a_development_build_is_told_from_a_release_and_from_garbage() {
        assert_eq!(
            ReportedApiVersion::read("v3.4.0 8c7bce50"),
            Some(ReportedApiVersion::Release(ApiVersion::new(3, 4, 0)))
        );
        assert_eq!(
            ReportedApiVersion::read(" dev.dirty"),
            Some(ReportedApiVersion::DevelopmentBuild)
        );
        assert_eq!(
            ReportedApiVersion::read("dev"),
            Some(ReportedApiVersion::DevelopmentBuild)
        );
        assert_eq!(ReportedApiVersion::read("developer"), None);
        assert_eq!(ReportedApiVersion::read(""), None);
        assert!(ApiVersion::new(3, 1, 14) < ApiVersion::MINIMUM);
        assert!(ApiVersion::new(3, 2, 0) >= ApiVersion::MINIMUM);
    }

    #[test]
    fn a_file_whose_name_the_api_would_change_is_refused_naming_the_stored_name() {
        let dotted = placement(&aux(AuxKind::Cert, "ssl/default_www.example.com-tls.pem"))
            .expect_err("the API stores another name");
        assert!(
            dotted.contains("'default_www_example_com-tls.pem'"),
            "{dotted}"
        );
        let deployed =
            placement(&aux(AuxKind::File, "general/haptor-deployed")).expect_err("reserved");
        assert!(deployed.contains(DEPLOYED_FILE), "{deployed}");
    }

    #[test]
    fn haproxys_runtime_refusals_are_told_from_outages() {
        // As the real API v3.4.0 answered them.
        let weight = "/etc/haproxy/runtime.sock [3]  Backend is using a static LB algorithm and only accepts weights '0%' and '100%'. [set server be/s1 weight 5]";
        assert!(is_runtime_refusal(500, weight));
        assert!(is_runtime_refusal(404, "Runtime server s9 not found"));
        assert!(!is_runtime_refusal(
            500,
            "dial unix /etc/haproxy/runtime.sock: connect: connection refused [set server be/s1 weight 5]"
        ));
        assert!(!is_runtime_refusal(503, weight));
        assert!(!is_runtime_refusal(401, "invalid username or password"));
        assert!(is_runtime_action_failure(
            500,
            "cannot execute SetServerWeight: /etc/haproxy/runtime.sock [3]  Backend is using a static LB algorithm and only accepts weights '0%' and '100%'. [set server be/s1 weight 20]"
        ));
        assert!(!is_runtime_action_failure(500, "injected: the API failed"));
    }

    #[test]
    fn only_the_apis_certificate_checks_count_as_refused_content() {
        let kind = StorageKind::SslCertificates;
        assert!(is_content_refusal(kind, 500, "failed to parse certificate"));
        assert!(is_content_refusal(
            kind,
            500,
            "file should contain both certificate and private key"
        ));
        assert!(!is_content_refusal(
            kind,
            500,
            "open /etc/haproxy/ssl/x.pem: no space left on device"
        ));
        assert!(!is_content_refusal(
            StorageKind::Maps,
            500,
            "failed to parse certificate"
        ));
    }

    #[test]
    fn the_deployed_record_reads_back_what_it_wrote_and_nothing_else() {
        let marker = DeployedMarker {
            render: Checksum::of(b"a render"),
            configuration: "f00d".into(),
            files: BTreeMap::from([("maps/hosts.map".to_string(), Checksum::of(b"a.example 1\n"))]),
        };
        assert_eq!(
            DeployedMarker::parse(&marker.to_text()),
            Some(marker.clone())
        );
        assert!(marker.still_runs(Some("f00d")));
        assert!(!marker.still_runs(Some("f00e")));
        assert!(!marker.still_runs(None));
        assert_eq!(DeployedMarker::parse("7\n"), None);
        assert_eq!(DeployedMarker::parse("render abc\n"), None);
        assert_eq!(
            DeployedMarker::parse("render abc\nconfiguration f00d\n"),
            None,
            "a render that is no checksum"
        );
        assert_eq!(DeployedMarker::parse("render \nconfiguration x\n"), None);
        assert_eq!(
            DeployedMarker::parse("render a\nconfiguration b\nextra c\n"),
            None
        );
        let render = Checksum::of(b"r");
        assert_eq!(
            DeployedMarker::parse(&format!(
                "render {render}\nconfiguration b\nfile nothex maps/a.map\n"
            )),
            None,
            "a file line without a checksum"
        );
        // A record written before files were listed still reads, with no files.
        let old =
            DeployedMarker::parse(&format!("render {render}\nconfiguration b\n")).expect("reads");
        assert!(old.files.is_empty());
    }

    #[test]
    fn a_record_knows_the_files_a_new_render_holds_unchanged_and_names_the_others() {
        let file = |path: &str, content: &str| AuxFile {
            kind: AuxKind::Map,
            name: path.trim_start_matches("maps/").to_string(),
            path: path.to_string(),
            content: content.to_string(),
        };
        let deployed = RenderedConfig {
            haproxy_cfg: "global\n".into(),
            aux_files: BTreeMap::from([
                ("maps/same.map".to_string(), file("maps/same.map", "a 1\n")),
                (
                    "maps/changed.map".to_string(),
                    file("maps/changed.map", "b 1\n"),
                ),
                ("maps/gone.map".to_string(), file("maps/gone.map", "c 1\n")),
            ]),
            ..Default::default()
        };
        let record = DeployedMarker::of(deployed.checksum(), "f00d".into(), &deployed);
        let record = DeployedMarker::parse(&record.to_text()).expect("reads back");
        let next = RenderedConfig {
            haproxy_cfg: "global\n  maxconn 10\n".into(),
            aux_files: BTreeMap::from([
                ("maps/same.map".to_string(), file("maps/same.map", "a 1\n")),
                (
                    "maps/changed.map".to_string(),
                    file("maps/changed.map", "b 2\n"),
                ),
                ("maps/new.map".to_string(), file("maps/new.map", "d 1\n")),
            ]),
            ..Default::default()
        };
        let (known, unknown) = record.files_known_in(&next);
        assert_eq!(known.keys().collect::<Vec<_>>(), ["maps/same.map"]);
        assert_eq!(known["maps/same.map"].content, "a 1\n");
        assert_eq!(unknown, ["maps/changed.map", "maps/gone.map"]);
    }
}
