//! The deployment plan: what it takes to bring an instance from one rendered configuration to
//! another. Server address, port, weight and state changes, servers that come and go in a
//! backend with a dynamic algorithm, backends removed (their servers deleted, after the map
//! changes that stop routing to them), map content changes, certificate content and crt-list
//! lines go through the runtime API with no reload; anything else in `haproxy.cfg`, and any other
//! auxiliary file change, needs one reload. Files are always rewritten too, so a later
//! reload keeps what the runtime API changed. `haptor plan` prints exactly this plan, and the
//! deploy targets execute it, so what the command says is what a deployment does.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::pure::haproxy::parse_config;
use crate::pure::rendered::{AuxKind, Checksum, RenderedConfig};

/// A server's administrative state as the runtime API sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    Ready,
    Maint,
}

/// How a map's entries changed, by key: added, removed, and kept with another value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MapDelta {
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
}

impl MapDelta {
    /// The difference between two entry lists (the first value of a key counts, as
    /// HAProxy's lookup takes it).
    pub fn between(old: &[(String, String)], new: &[(String, String)]) -> MapDelta {
        let index = |entries: &[(String, String)]| {
            let mut by_key = std::collections::BTreeMap::new();
            for (key, value) in entries {
                by_key.entry(key.clone()).or_insert_with(|| value.clone());
            }
            by_key
        };
        let (old, new) = (index(old), index(new));
        MapDelta {
            added: new.keys().filter(|k| !old.contains_key(*k)).count(),
            removed: old.keys().filter(|k| !new.contains_key(*k)).count(),
            changed: new
                .iter()
                .filter(|(k, v)| old.get(*k).is_some_and(|before| before != *v))
                .count(),
        }
    }
}

/// One step of a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Operation {
    /// `set server <backend>/<server> addr <address> port <port>`
    SetServerAddress {
        backend: String,
        server: String,
        address: String,
        port: Option<u16>,
    },
    /// `set server <backend>/<server> weight <weight>`
    SetServerWeight {
        backend: String,
        server: String,
        weight: u32,
    },
    /// `set server <backend>/<server> state ready|maint`
    SetServerState {
        backend: String,
        server: String,
        state: ServerState,
    },
    /// `add server <backend>/<server> <address>:<port> <parameters>`, then `enable server`
    /// unless the parameters leave it disabled, and `enable health` / `enable agent` where
    /// they turn checks on (HAProxy creates a runtime server in maintenance with its checks
    /// off). `parameters` already carry the `default-server` settings, which HAProxy does
    /// not give a runtime server.
    AddServer {
        backend: String,
        server: String,
        address: String,
        port: Option<u16>,
        parameters: Vec<String>,
    },
    /// `set server <backend>/<server> state maint`, then `del server <backend>/<server>`.
    DelServer { backend: String, server: String },
    /// A certificate's new content for new TLS handshakes: `new ssl cert <path>` first when
    /// HAProxy has not seen it, then `set ssl cert <path>` with the PEM and `commit ssl
    /// cert <path>`. The PEM holds a private key: it is never printed.
    SetCertificate {
        path: String,
        new: bool,
        #[serde(skip)]
        pem: String,
    },
    /// `add ssl crt-list <list>` with the line (certificate, options, SNI filters).
    AddCrtListEntry { list: String, line: String },
    /// `del ssl crt-list <list> <certificate>`.
    DelCrtListEntry { list: String, certificate: String },
    /// `del ssl cert <path>`, once no crt-list line names it.
    DelCertificate { path: String },
    /// Replace a loaded map's entries atomically (`prepare map`, `add map @ver`, `commit map`).
    ReplaceMap {
        path: String,
        entries: Vec<(String, String)>,
        /// How the entries differ from the map's before, for people reading the plan.
        delta: MapDelta,
    },
    /// Write `haproxy.cfg`.
    WriteConfig,
    /// Write an auxiliary file.
    WriteFile { path: String },
    /// Delete an auxiliary file that the new render no longer has.
    DeleteFile { path: String },
}

impl Operation {
    /// Whether this operation goes through the runtime API.
    pub fn is_runtime(&self) -> bool {
        matches!(
            self,
            Operation::SetServerAddress { .. }
                | Operation::SetServerWeight { .. }
                | Operation::SetServerState { .. }
                | Operation::AddServer { .. }
                | Operation::DelServer { .. }
                | Operation::SetCertificate { .. }
                | Operation::AddCrtListEntry { .. }
                | Operation::DelCrtListEntry { .. }
                | Operation::DelCertificate { .. }
                | Operation::ReplaceMap { .. }
        )
    }

    /// Whether this operation changes certificates or crt-lists, whose content only
    /// `haproxy -c` fully judges (a key that does not match its certificate, say).
    pub fn touches_certificates(&self) -> bool {
        matches!(
            self,
            Operation::SetCertificate { .. }
                | Operation::AddCrtListEntry { .. }
                | Operation::DelCrtListEntry { .. }
                | Operation::DelCertificate { .. }
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::SetServerAddress {
                backend,
                server,
                address,
                port: Some(port),
            } => {
                write!(
                    f,
                    "runtime: set server {backend}/{server} addr {address} port {port}"
                )
            }
            Operation::SetServerAddress {
                backend,
                server,
                address,
                port: None,
            } => {
                write!(f, "runtime: set server {backend}/{server} addr {address}")
            }
            Operation::SetServerWeight {
                backend,
                server,
                weight,
            } => write!(f, "runtime: set server {backend}/{server} weight {weight}"),
            Operation::SetServerState {
                backend,
                server,
                state,
            } => {
                let state = match state {
                    ServerState::Ready => "ready",
                    ServerState::Maint => "maint",
                };
                write!(f, "runtime: set server {backend}/{server} state {state}")
            }
            Operation::AddServer {
                backend,
                server,
                address,
                port,
                parameters,
            } => {
                write!(f, "runtime: add server {backend}/{server} {address}")?;
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                for word in parameters {
                    write!(f, " {word}")?;
                }
                Ok(())
            }
            Operation::DelServer { backend, server } => {
                write!(f, "runtime: del server {backend}/{server}")
            }
            Operation::SetCertificate { path, new, .. } => {
                let verb = if *new { "new" } else { "set" };
                write!(f, "runtime: {verb} ssl cert {path}")
            }
            Operation::AddCrtListEntry { list, line } => {
                write!(f, "runtime: add ssl crt-list {list} {line}")
            }
            Operation::DelCrtListEntry { list, certificate } => {
                write!(f, "runtime: del ssl crt-list {list} {certificate}")
            }
            Operation::DelCertificate { path } => write!(f, "runtime: del ssl cert {path}"),
            Operation::ReplaceMap {
                path,
                entries,
                delta,
            } => {
                write!(
                    f,
                    "runtime: replace map {path} ({} entries: {} added, {} removed, {} changed)",
                    entries.len(),
                    delta.added,
                    delta.removed,
                    delta.changed
                )
            }
            Operation::WriteConfig => write!(f, "file: write haproxy.cfg"),
            Operation::WriteFile { path } => write!(f, "file: write {path}"),
            Operation::DeleteFile { path } => write!(f, "file: delete {path}"),
        }
    }
}

/// A backend the new configuration no longer has, removed without a reload: the map changes
/// that stop routing to it come first, then each of its servers is deleted; the running
/// HAProxy keeps it, empty and routed to by nothing, until the next reload drops it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemovedBackend {
    pub name: String,
    /// How many servers it had, each deleted at runtime.
    pub servers: usize,
}

impl fmt::Display for RemovedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match self.servers {
            0 => write!(f, "backend {name} removed: it had no servers"),
            1 => write!(f, "backend {name} removed: its 1 server deleted at runtime"),
            n => write!(
                f,
                "backend {name} removed: its {n} servers deleted at runtime"
            ),
        }?;
        write!(f, "; the next reload drops the empty backend")
    }
}

/// Everything a deployment from one render to another does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeploymentPlan {
    /// Runtime operations first, then file writes, in a stable order.
    pub operations: Vec<Operation>,
    pub reload: bool,
    /// Why a reload is needed (empty when none is).
    pub reload_reasons: Vec<String>,
    /// Backends removed without a reload, whose servers' deletions come after every other
    /// runtime operation (empty when the plan reloads).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_backends: Vec<RemovedBackend>,
    /// Added servers whose parameters match those of no server the old configuration had
    /// in the same backend: their lines were never judged by `haproxy -c` in that form, so
    /// a validation that skips it for a runtime-only change must not skip it for them.
    #[serde(skip)]
    pub novel_servers: usize,
}

impl DeploymentPlan {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty() && !self.reload
    }

    /// The runtime operations in the order targets apply them: servers leaving a backend that
    /// stays (to maintenance, or deleted) first, so no request reaches a server slot while its
    /// address is being replaced; then the others in the plan's order, which puts the map
    /// changes that stop routing to a removed backend before its servers' deletions, so no
    /// request is sent to it while it empties.
    pub fn runtime_operations(&self) -> Vec<&Operation> {
        let mut operations: Vec<&Operation> = self
            .operations
            .iter()
            .filter(|op| op.is_runtime())
            .collect();
        let leaving = |op: &Operation| match op {
            Operation::SetServerState {
                state: ServerState::Maint,
                ..
            } => true,
            Operation::DelServer { backend, .. } => {
                !self.removed_backends.iter().any(|r| r.name == *backend)
            }
            _ => false,
        };
        // A stable sort keeps the plan's order otherwise.
        operations.sort_by_key(|op| !leaving(op));
        operations
    }

    /// The plan as `haptor plan` prints it: one operation per line, a `live:` line for each
    /// backend removed without a reload, then `reload: yes|no`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for op in &self.operations {
            out.push_str(&op.to_string());
            out.push('\n');
        }
        for removed in &self.removed_backends {
            out.push_str(&format!("live: {removed}\n"));
        }
        out.push_str(if self.reload {
            "reload: yes\n"
        } else {
            "reload: no\n"
        });
        out
    }
}

/// The new configuration cannot be planned for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot plan the deployment: the {which} haproxy.cfg does not parse at line {line}: {message}"
)]
pub struct PlanError {
    pub which: &'static str,
    pub line: usize,
    pub message: String,
}

mod certificates;
mod dynamic;
mod fast;
mod structural;
#[cfg(test)]
mod tests;

use certificates::certificate_changes;
pub use dynamic::{checks_agent, checks_health, starts_disabled};
use fast::*;
use structural::*;

/// Plans the deployment from `from` (what the instance runs; `None` when it runs nothing
/// haptor deployed) to `to`.
pub fn plan(
    from: Option<&RenderedConfig>,
    to: &RenderedConfig,
) -> Result<DeploymentPlan, PlanError> {
    // `first_line` is the line of the whole text that `text` starts on, so errors in a part
    // name the line of the whole.
    let parse = |which: &'static str, text: &str, first_line: usize| {
        parse_config(text).map_err(|e| PlanError {
            which,
            line: e.line + first_line - 1,
            message: e.message,
        })
    };
    let mut plan = DeploymentPlan::default();
    let mut runtime = Vec::new();
    let mut files = Vec::new();
    // Backends removed, with their servers' deletions: the last runtime operations.
    let mut removed_backends = Vec::new();
    // Most changes touch a few server lines of an otherwise identical text: compare lines
    // first and parse only what differs (at 1 000 backends this is ~50x cheaper than two
    // full parses).
    let fast = from.and_then(|from| server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg));
    if let (Some(from), Some(ops)) = (from, fast) {
        if from.haproxy_cfg != to.haproxy_cfg {
            files.push(Operation::WriteConfig);
            runtime.extend(ops);
        }
    } else {
        let Some(from) = from else {
            // A render reaches a target validated; parsing it again to reload it anyway
            // would only hold its whole syntax tree for nothing.
            plan.reload = true;
            plan.reload_reasons
                .push("the instance runs no configuration deployed by haptor".into());
            plan.operations.push(Operation::WriteConfig);
            plan.operations.extend(
                to.aux_files
                    .keys()
                    .map(|path| Operation::WriteFile { path: path.clone() }),
            );
            return Ok(plan);
        };
        // Only the sections that differ are parsed and compared: the rest is the same text.
        let part = differing_sections(&from.haproxy_cfg, &to.haproxy_cfg);
        let (old_text, new_text, first_line) = match &part {
            Some(part) => (part.old, part.new, part.above.matches('\n').count() + 1),
            None => (from.haproxy_cfg.as_str(), to.haproxy_cfg.as_str(), 1),
        };
        let new = parse("new", new_text, first_line)?;
        // An old configuration that does not parse cannot be diffed: replace it.
        let old = match parse("old", old_text, first_line) {
            Ok(old) => old,
            Err(e) => {
                plan.reload = true;
                plan.reload_reasons.push(e.to_string());
                plan.operations.push(Operation::WriteConfig);
                plan.operations.extend(
                    to.aux_files
                        .keys()
                        .map(|path| Operation::WriteFile { path: path.clone() }),
                );
                return Ok(plan);
            }
        };
        if from.haproxy_cfg != to.haproxy_cfg {
            files.push(Operation::WriteConfig);
            // The defaults section above the compared parts, where they start below it.
            let outer_defaults = match &part {
                Some(part) => last_defaults_section(part.above),
                None => None,
            };
            match runtime_changes(&old, &new, outer_defaults.as_ref()) {
                Err(reason) => {
                    plan.reload = true;
                    plan.reload_reasons.push(reason);
                }
                Ok(changes) => {
                    plan.novel_servers = changes.novel_servers;
                    runtime.extend(changes.operations);
                    removed_backends = changes.removed_backends;
                }
            }
            // The sections compared are all a removed backend's name was checked against;
            // the text around them is the same in both configurations, and it may name it too.
            if let Some(part) = &part {
                let below = &to.haproxy_cfg[part.above.len() + part.new.len()..];
                let named = removed_backends.iter().find_map(|(name, _)| {
                    [part.above, below]
                        .into_iter()
                        .find_map(|text| mentioning_line(text, name))
                        .map(|line| (name, line))
                });
                if let Some((name, line)) = named {
                    plan.reload = true;
                    plan.reload_reasons.push(format!(
                        "section 'backend {name}' was removed, but '{line}' still names it"
                    ));
                }
            }
        }
    }
    let Some(from) = from else {
        return Ok(plan);
    };

    for (path, file) in &to.aux_files {
        match from.aux_files.get(path) {
            Some(previous) if previous.content == file.content => {}
            Some(previous) if file.kind == AuxKind::Map => {
                files.push(Operation::WriteFile { path: path.clone() });
                let entries = map_entries(&file.content);
                let delta = MapDelta::between(&map_entries(&previous.content), &entries);
                runtime.push(Operation::ReplaceMap {
                    path: path.clone(),
                    entries,
                    delta,
                });
            }
            // Certificates and crt-list lines change at runtime (`certificate_changes`).
            _ if file.kind == AuxKind::Cert => {
                files.push(Operation::WriteFile { path: path.clone() });
            }
            Some(_) if file.kind == AuxKind::CrtList => {
                files.push(Operation::WriteFile { path: path.clone() });
            }
            Some(_) => {
                files.push(Operation::WriteFile { path: path.clone() });
                plan.reload = true;
                plan.reload_reasons
                    .push(format!("{} {path} changed", file.kind));
            }
            None => {
                files.push(Operation::WriteFile { path: path.clone() });
                plan.reload = true;
                plan.reload_reasons
                    .push(format!("{} {path} is new", file.kind));
            }
        }
    }
    for path in from
        .aux_files
        .keys()
        .filter(|p| !to.aux_files.contains_key(*p))
    {
        files.push(Operation::DeleteFile { path: path.clone() });
        if from.aux_files[path].kind != AuxKind::Cert {
            plan.reload = true;
            plan.reload_reasons.push(format!("{path} was removed"));
        }
    }
    match certificate_changes(&from.aux_files, &to.aux_files) {
        Ok(operations) => runtime.extend(operations),
        Err(reason) => {
            plan.reload = true;
            plan.reload_reasons.push(reason);
        }
    }
    // When HAProxy reloads, the runtime changes come with the new files anyway.
    if !plan.reload {
        // A removed backend's servers go once the map changes above stopped routing to it.
        for (name, deletions) in removed_backends {
            plan.removed_backends.push(RemovedBackend {
                name,
                servers: deletions.len(),
            });
            runtime.extend(deletions);
        }
        plan.operations.extend(runtime);
    }
    plan.operations.extend(files);
    Ok(plan)
}

/// How many plans [`plan_between`] keeps.
const PLANS_KEPT: usize = 4;

/// The plans [`plan_between`] computed last, by the checksums of their two renders.
type KeptPlan = (
    Option<Checksum>,
    Checksum,
    Result<Arc<DeploymentPlan>, PlanError>,
);
static PLANS: Mutex<VecDeque<KeptPlan>> = Mutex::new(VecDeque::new());

/// [`plan`] for renders whose checksums are known, computed once for each pair: the
/// validator (is the change runtime-only?), the scheduler (is it paced?) and the target
/// (what to do) each plan the same change from the same render, and at 10 000 backends
/// each plan compares megabytes. Equal checksums are equal bytes, and a plan depends on
/// nothing else, so a plan kept for a pair is the plan of any renders with those checksums.
pub fn plan_between(
    from: Option<(&RenderedConfig, Checksum)>,
    to: (&RenderedConfig, Checksum),
) -> Result<Arc<DeploymentPlan>, PlanError> {
    let key = (from.map(|(_, checksum)| checksum), to.1);
    let kept = |plans: &VecDeque<KeptPlan>| {
        plans
            .iter()
            .find(|(from, to, _)| (*from, *to) == key)
            .map(|(_, _, plan)| plan.clone())
    };
    if let Some(plan) = kept(&PLANS.lock().unwrap_or_else(PoisonError::into_inner)) {
        return plan;
    }
    let planned = plan(from.map(|(rendered, _)| rendered), to.0).map(Arc::new);
    let mut plans = PLANS.lock().unwrap_or_else(PoisonError::into_inner);
    if kept(&plans).is_none() {
        if plans.len() == PLANS_KEPT {
            plans.pop_front();
        }
        plans.push_back((key.0, key.1, planned.clone()));
    }
    planned
}

/// Whether `to` differs from `from` only in server lines' runtime values and map contents,
/// judged by comparing lines, with no section parsed: the cheap form of "`plan(from, to)`
/// needs no reload", which answers `false` wherever the full plan would parse sections
/// (a what-if admission of a structural change then goes straight to full validation
/// instead of parsing half the configuration twice to learn it must).
pub fn runtime_only_by_lines(from: &RenderedConfig, to: &RenderedConfig) -> bool {
    let config_ok = from.haproxy_cfg == to.haproxy_cfg
        || server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg).is_some();
    config_ok
        && from.aux_files.len() == to.aux_files.len()
        && to
            .aux_files
            .iter()
            .all(|(path, file)| match from.aux_files.get(path) {
                Some(previous) => previous.content == file.content || file.kind == AuxKind::Map,
                None => false,
            })
}

/// The last `defaults` section of `text` (a configuration's first part), parsed on its own;
/// `None` when there is none or it does not parse.
fn last_defaults_section(text: &str) -> Option<crate::pure::haproxy::Section> {
    let start = text
        .match_indices("defaults")
        .map(|(at, _)| at)
        .filter(|&at| at == 0 || text.as_bytes()[at - 1] == b'\n')
        .filter(|&at| is_section_header(&text[at..]))
        .last()?;
    let rest = &text[start..];
    let mut end = rest.find('\n').map_or(rest.len(), |at| at + 1);
    for line in rest[end..].split_inclusive('\n') {
        if is_section_header(line) {
            break;
        }
        end += line.len();
    }
    parse_config(&rest[..end]).ok()?.sections.into_iter().next()
}

/// Map file text to entries: one `key value` per line, `#` comments and blank lines skipped.
pub fn map_entries(content: &str) -> Vec<(String, String)> {
    content
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((k, v)) => (k.to_string(), v.trim().to_string()),
            None => (l.to_string(), String::new()),
        })
        .collect()
}
