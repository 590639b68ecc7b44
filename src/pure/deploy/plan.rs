//! The deployment plan: what it takes to bring an instance from one rendered configuration to
//! another. Server address, port, weight and state changes, and map content changes, go
//! through the runtime API with no reload; anything else in `haproxy.cfg`, and any other
//! auxiliary file change, needs one reload. Files are always rewritten too, so a later
//! reload keeps what the runtime API changed. `haptor plan` prints exactly this plan, and the
//! deploy targets execute it, so what the command says is what a deployment does.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::pure::haproxy::{Config, SectionKind, parse_config, view};
use crate::pure::rendered::{AuxKind, RenderedConfig};

/// A server's administrative state as the runtime API sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    Ready,
    Maint,
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
    /// Replace a loaded map's entries atomically (`prepare map`, `add map @ver`, `commit map`).
    ReplaceMap {
        path: String,
        entries: Vec<(String, String)>,
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
                | Operation::ReplaceMap { .. }
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
            Operation::ReplaceMap { path, entries } => {
                write!(f, "runtime: replace map {path} ({} entries)", entries.len())
            }
            Operation::WriteConfig => write!(f, "file: write haproxy.cfg"),
            Operation::WriteFile { path } => write!(f, "file: write {path}"),
            Operation::DeleteFile { path } => write!(f, "file: delete {path}"),
        }
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
}

impl DeploymentPlan {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty() && !self.reload
    }

    /// The plan as `haptor plan` prints it: one operation per line, then `reload: yes|no`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for op in &self.operations {
            out.push_str(&op.to_string());
            out.push('\n');
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

/// The runtime-changeable facts of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerFacts {
    address: String,
    port: Option<u16>,
    weight: u32,
    disabled: bool,
}

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
            match structural_difference(&old, &new) {
                Some(reason) => {
                    plan.reload = true;
                    plan.reload_reasons.push(reason);
                }
                None => runtime.extend(server_operations(&old, &new)),
            }
        }
    }
    let Some(from) = from else {
        return Ok(plan);
    };

    for (path, file) in &to.aux_files {
        match from.aux_files.get(path) {
            Some(previous) if previous.content == file.content => {}
            Some(_) if file.kind == AuxKind::Map => {
                files.push(Operation::WriteFile { path: path.clone() });
                runtime.push(Operation::ReplaceMap {
                    path: path.clone(),
                    entries: map_entries(&file.content),
                });
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
        plan.reload = true;
        plan.reload_reasons.push(format!("{path} was removed"));
    }
    // When HAProxy reloads, the runtime changes come with the new files anyway.
    if !plan.reload {
        plan.operations.extend(runtime);
    }
    plan.operations.extend(files);
    Ok(plan)
}

/// The runtime operations between two texts that differ only in `server` lines of
/// `backend`/`listen` sections, where each changed line keeps its server name and every
/// parameter except address, port, weight and `disabled`; `None` when the texts differ in any
/// other way (the full comparison then decides).
fn server_line_changes(old: &str, new: &str) -> Option<Vec<Operation>> {
    let region = DifferingLines::between(old, new);
    let old_lines: Vec<&str> = region.old.lines().collect();
    let new_lines: Vec<&str> = region.new.lines().collect();
    if old_lines.len() != new_lines.len() {
        return None;
    }
    let mut ops = Vec::new();
    for (index, (before, after)) in old_lines.iter().zip(&new_lines).enumerate() {
        if before == after {
            continue;
        }
        let lines_above = old_lines[..index]
            .iter()
            .rev()
            .copied()
            .chain(region.above.lines().rev());
        let backend = enclosing_proxy(lines_above)?;
        let (old_server, new_server) = (single_server(before)?, single_server(after)?);
        if old_server.0 != new_server.0
            || server_shape(&old_server.1) != server_shape(&new_server.1)
        {
            return None;
        }
        let facts = |words: &[String]| -> Option<ServerFacts> {
            let config = parse_config(&format!(
                "backend b\n  {}\n",
                words
                    .iter()
                    .map(|w| quote_word(w))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
            .ok()?;
            server_facts(&config).into_values().next()
        };
        let (previous, next) = (facts(&old_server.1)?, facts(&new_server.1)?);
        // HAProxy takes weights up to 256; anything else is for the full check to judge.
        if next.weight > 256 {
            return None;
        }
        server_changes(&mut ops, backend, new_server.0, &previous, &next);
    }
    Some(ops)
}

/// Two texts cut into three parts: the whole lines they share at the start (`above`), the
/// whole lines where they differ (`old`, `new`), and the whole lines they share at the end.
/// Finding the cut points is a byte comparison, so a change of a few lines in a megabyte is
/// planned without splitting the megabyte into lines.
#[derive(Debug, PartialEq, Eq)]
struct DifferingLines<'a> {
    above: &'a str,
    old: &'a str,
    new: &'a str,
}

impl<'a> DifferingLines<'a> {
    fn between(old: &'a str, new: &'a str) -> DifferingLines<'a> {
        let (old_bytes, new_bytes) = (old.as_bytes(), new.as_bytes());
        let prefix = common_prefix(old_bytes, new_bytes);
        // Back to the start of the line the first difference is on.
        let start = old_bytes[..prefix]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        let room = old.len().min(new.len()) - start;
        let mut suffix = common_suffix(old_bytes, new_bytes).min(room);
        // Forward to the start of a line in both texts: the shared end must begin after a
        // line break, or at the very end.
        let begins_line = |bytes: &[u8], suffix: usize| {
            suffix == 0 || bytes.len() == suffix || bytes[bytes.len() - suffix - 1] == b'\n'
        };
        if !(begins_line(old_bytes, suffix) && begins_line(new_bytes, suffix)) {
            let shared = &old_bytes[old.len() - suffix..];
            suffix = shared
                .iter()
                .position(|&b| b == b'\n')
                .map_or(0, |at| suffix - at - 1);
        }
        // Every cut is at a line break (an ASCII byte) or an end, so each is a char boundary.
        DifferingLines {
            above: &old[..start],
            old: &old[start..old.len() - suffix],
            new: &new[start..new.len() - suffix],
        }
    }
}

/// The differing lines widened back to the header of the section the first difference is
/// in (or to the start), so the parts parse on their own and every line in them means what
/// it means in the whole text; `above` is what both texts share before the parts. What
/// follows the parts is the same text in both, so it cannot make them differ. `None` when
/// either text has conditional blocks (`.if`), which a section can start inside of.
fn differing_sections<'a>(old: &'a str, new: &'a str) -> Option<DifferingLines<'a>> {
    let conditional = |text: &str| text.lines().any(|l| l.trim_start().starts_with(".if"));
    if conditional(old) || conditional(new) {
        return None;
    }
    let region = DifferingLines::between(old, new);
    // The start of the last section header above the difference (headers start at column
    // 0; an indented one is passed over, which only widens the parts).
    let (mut start, mut offset) = (0, 0);
    for line in region.above.split_inclusive('\n') {
        if is_section_header(line) {
            start = offset;
        }
        offset += line.len();
    }
    let (old_end, new_end) = (
        region.above.len() + region.old.len(),
        region.above.len() + region.new.len(),
    );
    // Cuts are at line starts (after ASCII line breaks) or ends, so each is a char boundary.
    Some(DifferingLines {
        above: &old[..start],
        old: &old[start..old_end],
        new: &new[start..new_end],
    })
}

/// Whether a line opens a section: a section keyword at column 0.
fn is_section_header(line: &str) -> bool {
    !line.starts_with(char::is_whitespace)
        && line
            .split_whitespace()
            .next()
            .is_some_and(|word| SectionKind::from_keyword(word).is_some())
}

/// How many bytes two slices share at the start; compared a block at a time, which the
/// compiler turns into `memcmp`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let mut done = 0;
    for (x, y) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        if x == y {
            done += x.len();
            continue;
        }
        return done + x.iter().zip(y).take_while(|(p, q)| p == q).count();
    }
    done
}

/// How many bytes two slices share at the end.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let mut done = 0;
    for (x, y) in a.rchunks(BLOCK).zip(b.rchunks(BLOCK)) {
        if x == y {
            done += x.len();
            continue;
        }
        return done
            + x.iter()
                .rev()
                .zip(y.iter().rev())
                .take_while(|(p, q)| p == q)
                .count();
    }
    done
}

/// The name of the `backend` or `listen` section a line belongs to: the nearest section
/// header among the lines above it, given nearest first. `None` for any other section, or a
/// conditional block in between.
fn enclosing_proxy<'l>(lines_above: impl Iterator<Item = &'l str>) -> Option<String> {
    for line in lines_above {
        let trimmed = line.trim_start();
        if trimmed.starts_with(".if")
            || trimmed.starts_with(".elif")
            || trimmed.starts_with(".else")
            || trimmed.starts_with(".endif")
        {
            return None;
        }
        if line.starts_with(char::is_whitespace) || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut words = trimmed.split_whitespace();
        return match (words.next(), words.next(), words.next()) {
            (Some("backend" | "listen"), Some(name), None) => Some(name.to_string()),
            _ => None,
        };
    }
    None
}

/// The server name and words of a line that holds exactly one `server` directive.
fn single_server(line: &str) -> Option<(String, Vec<String>)> {
    let config = parse_config(&format!("backend b\n{line}\n")).ok()?;
    let section = config.sections.first()?;
    let [directive] = section.directives.as_slice() else {
        return None;
    };
    if directive.keyword() != "server" || directive.words.len() < 3 || directive.has_env_refs() {
        return None;
    }
    Some((directive.words[1].clone(), directive.words.clone()))
}

/// A word as it can be written back on a config line.
fn quote_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| !c.is_whitespace() && !matches!(c, '"' | '\'' | '\\' | '#'))
    {
        word.to_string()
    } else {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    }
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

/// Words of a server line with the runtime-changeable parts removed: the address and the
/// `weight`, `disabled` and `enabled` parameters.
fn server_shape(words: &[String]) -> Vec<String> {
    let mut shape = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        match (i, words[i].as_str()) {
            (2, _) => {}
            (_, "weight") if i > 2 => i += 1,
            (_, "disabled" | "enabled") if i > 2 => {}
            _ => shape.push(words[i].clone()),
        }
        i += 1;
    }
    shape
}

/// The config with server lines reduced to their shape, as comparable lines per section.
fn normalised(config: &Config) -> Vec<(String, Vec<Vec<String>>)> {
    config
        .sections
        .iter()
        .map(|section| {
            let header = format!(
                "{} {}",
                section.keyword(),
                section.name.as_deref().unwrap_or("")
            );
            let is_proxy = matches!(section.kind, SectionKind::Backend | SectionKind::Listen);
            let lines = section
                .directives
                .iter()
                .map(|d| {
                    if is_proxy && d.keyword() == "server" {
                        server_shape(&d.words)
                    } else {
                        d.words.clone()
                    }
                })
                .collect();
            (header, lines)
        })
        .collect()
}

/// Why two configs differ beyond what the runtime API can change, or `None`.
fn structural_difference(old: &Config, new: &Config) -> Option<String> {
    if old
        .preamble
        .iter()
        .map(|d| &d.words)
        .ne(new.preamble.iter().map(|d| &d.words))
    {
        return Some("lines before the first section changed".into());
    }
    let old_sections = normalised(old);
    let new_sections = normalised(new);
    let old_names: Vec<&String> = old_sections.iter().map(|(h, _)| h).collect();
    let new_names: Vec<&String> = new_sections.iter().map(|(h, _)| h).collect();
    if old_names != new_names {
        let added: Vec<&&String> = new_names
            .iter()
            .filter(|n| !old_names.contains(n))
            .collect();
        let removed: Vec<&&String> = old_names
            .iter()
            .filter(|n| !new_names.contains(n))
            .collect();
        return Some(match (added.first(), removed.first()) {
            (Some(a), _) => format!("section '{}' was added", a.trim()),
            (None, Some(r)) => format!("section '{}' was removed", r.trim()),
            (None, None) => "sections were reordered".into(),
        });
    }
    for ((header, old_lines), (_, new_lines)) in old_sections.iter().zip(&new_sections) {
        if old_lines != new_lines {
            return Some(format!("section '{}' changed", header.trim()));
        }
    }
    None
}

fn server_facts(config: &Config) -> BTreeMap<(String, String), ServerFacts> {
    let mut facts = BTreeMap::new();
    for backend in view(config).backends {
        for server in backend.servers {
            let weight = server
                .param("weight")
                .and_then(|p| p.values.first())
                .and_then(|w| w.parse().ok())
                .unwrap_or(1);
            let port = server.endpoint.port_number();
            facts.insert(
                (backend.name.clone(), server.name.clone()),
                ServerFacts {
                    address: server.endpoint.host.clone(),
                    port,
                    weight,
                    disabled: server.has_flag("disabled"),
                },
            );
        }
    }
    facts
}

/// The runtime operations that turn server `previous` into `next`.
fn server_changes(
    ops: &mut Vec<Operation>,
    backend: String,
    server: String,
    previous: &ServerFacts,
    next: &ServerFacts,
) {
    if previous.address != next.address || previous.port != next.port {
        ops.push(Operation::SetServerAddress {
            backend: backend.clone(),
            server: server.clone(),
            address: next.address.clone(),
            port: next.port,
        });
    }
    if previous.weight != next.weight {
        ops.push(Operation::SetServerWeight {
            backend: backend.clone(),
            server: server.clone(),
            weight: next.weight,
        });
    }
    if previous.disabled != next.disabled {
        let state = if next.disabled {
            ServerState::Maint
        } else {
            ServerState::Ready
        };
        ops.push(Operation::SetServerState {
            backend,
            server,
            state,
        });
    }
}

fn server_operations(old: &Config, new: &Config) -> Vec<Operation> {
    let before = server_facts(old);
    let mut ops = Vec::new();
    for ((backend, server), after) in server_facts(new) {
        let Some(previous) = before.get(&(backend.clone(), server.clone())) else {
            continue;
        };
        server_changes(&mut ops, backend, server, previous, &after);
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::rendered::AuxFile;

    fn cfg(servers: &str) -> RenderedConfig {
        RenderedConfig {
            haproxy_cfg: format!(
                "global\n  maxconn 100\n\nfrontend fe\n  bind :8080\n  default_backend be\n\nbackend be\n{servers}"
            ),
            ..Default::default()
        }
    }

    fn with_map(mut r: RenderedConfig, content: &str) -> RenderedConfig {
        r.aux_files.insert(
            "maps/hosts.map".into(),
            AuxFile {
                kind: AuxKind::Map,
                name: "hosts.map".into(),
                path: "maps/hosts.map".into(),
                content: content.into(),
            },
        );
        r
    }

    #[test]
    fn moving_a_server_to_a_new_address_needs_no_reload() {
        let from = cfg("  server s1 10.0.0.1:80 check\n");
        let to = cfg("  server s1 10.0.0.2:8080 check\n");
        let plan = plan(Some(&from), &to).expect("plans");
        assert!(!plan.reload, "{:?}", plan.reload_reasons);
        assert_eq!(
            plan.operations,
            vec![
                Operation::SetServerAddress {
                    backend: "be".into(),
                    server: "s1".into(),
                    address: "10.0.0.2".into(),
                    port: Some(8080)
                },
                Operation::WriteConfig,
            ]
        );
        assert_eq!(
            plan.to_text(),
            "runtime: set server be/s1 addr 10.0.0.2 port 8080\nfile: write haproxy.cfg\nreload: no\n"
        );
    }

    #[test]
    fn filling_a_reserved_slot_and_changing_a_weight_are_runtime_changes() {
        let from = cfg("  server s1 10.0.0.1:80 weight 10\n  server s2 127.0.0.1:1 disabled\n");
        let to = cfg("  server s1 10.0.0.1:80 weight 50\n  server s2 10.0.0.9:80\n");
        let plan = plan(Some(&from), &to).expect("plans");
        assert!(!plan.reload);
        let runtime: Vec<String> = plan
            .operations
            .iter()
            .filter(|o| o.is_runtime())
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            runtime,
            vec![
                "runtime: set server be/s1 weight 50",
                "runtime: set server be/s2 addr 10.0.0.9 port 80",
                "runtime: set server be/s2 state ready",
            ]
        );
    }

    #[test]
    fn adding_a_server_or_a_backend_needs_a_reload_with_the_reason() {
        let from = cfg("  server s1 10.0.0.1:80\n");
        let more_servers = cfg("  server s1 10.0.0.1:80\n  server s2 10.0.0.2:80\n");
        let plan1 = plan(Some(&from), &more_servers).expect("plans");
        assert!(plan1.reload);
        assert_eq!(
            plan1.reload_reasons,
            vec!["section 'backend be' changed".to_string()]
        );
        assert!(
            plan1.operations.iter().all(|o| !o.is_runtime()),
            "a reload carries every change"
        );

        let mut new_backend = from.clone();
        new_backend
            .haproxy_cfg
            .push_str("\nbackend api\n  server a1 10.0.1.1:80\n");
        let plan2 = plan(Some(&from), &new_backend).expect("plans");
        assert!(plan2.reload);
        assert_eq!(
            plan2.reload_reasons,
            vec!["section 'backend api' was added".to_string()]
        );
    }

    #[test]
    fn a_changed_map_is_replaced_live_and_a_new_map_needs_a_reload() {
        let base = cfg("  server s1 10.0.0.1:80\n");
        let from = with_map(base.clone(), "a.example be\n");
        let to = with_map(base.clone(), "a.example be\n# comment\nb.example be\n");
        let live = plan(Some(&from), &to).expect("plans");
        assert!(!live.reload);
        assert_eq!(
            live.operations[0],
            Operation::ReplaceMap {
                path: "maps/hosts.map".into(),
                entries: vec![
                    ("a.example".into(), "be".into()),
                    ("b.example".into(), "be".into())
                ]
            }
        );
        let fresh = plan(Some(&base), &to).expect("plans");
        assert!(fresh.reload);
        assert_eq!(
            fresh.reload_reasons,
            vec!["map maps/hosts.map is new".to_string()]
        );
    }

    #[test]
    fn identical_renders_need_nothing() {
        let r = with_map(cfg("  server s1 10.0.0.1:80\n"), "a b\n");
        let plan = plan(Some(&r), &r).expect("plans");
        assert!(plan.is_empty());
        assert_eq!(plan.to_text(), "reload: no\n");
    }

    #[test]
    fn a_first_deployment_writes_everything_and_reloads() {
        let r = with_map(cfg("  server s1 10.0.0.1:80\n"), "a b\n");
        let plan = plan(None, &r).expect("plans");
        assert!(plan.reload);
        assert_eq!(
            plan.operations,
            vec![
                Operation::WriteConfig,
                Operation::WriteFile {
                    path: "maps/hosts.map".into()
                }
            ]
        );
    }

    #[test]
    fn a_new_config_that_does_not_parse_is_an_error_naming_the_line_of_the_whole_text() {
        let text = |last: &str| RenderedConfig {
            haproxy_cfg: format!(
                "global\n  maxconn 10\n\nbackend a\n  server s1 10.0.0.1:80\n\nbackend b\n  {last}\n"
            ),
            ..Default::default()
        };
        let good = text("server s1 10.0.0.2:80");
        let bad = text("server s1 \"unterminated");
        let err = plan(Some(&good), &bad).expect_err("unparseable");
        assert_eq!((err.which, err.line), ("new", 8));
        // An old text that does not parse is replaced, for a reason naming its line.
        let replaced = plan(Some(&bad), &good).expect("replaced");
        assert!(replaced.reload);
        assert!(
            replaced.reload_reasons[0].contains("line 8"),
            "{replaced:?}"
        );
    }

    #[test]
    fn a_first_deployment_reloads_with_every_file_without_reading_the_config() {
        let unparseable = RenderedConfig {
            haproxy_cfg: "global\n  log \"unterminated\n".into(),
            ..Default::default()
        };
        let plan = plan(None, &unparseable).expect("nothing to compare with");
        assert!(plan.reload);
        assert_eq!(plan.operations, [Operation::WriteConfig]);
    }

    #[test]
    fn only_the_differing_sections_are_compared_and_they_mean_what_they_mean_in_the_whole() {
        let backends = |n: usize, changed: &str| {
            let mut text = String::from("global\n  maxconn 10\n\ndefaults\n  mode http\n");
            for b in 0..n {
                text.push_str(&format!("\nbackend b{b}\n  balance roundrobin\n"));
                if b == n / 2 {
                    text.push_str(changed);
                }
                text.push_str(&format!("  server s1 10.0.{b}.1:80\n"));
            }
            text
        };
        let from = RenderedConfig {
            haproxy_cfg: backends(50, ""),
            ..Default::default()
        };
        let checked = backends(50, "  option httpchk\n");
        let part = differing_sections(&from.haproxy_cfg, &checked).expect("no conditional blocks");
        assert_eq!(part.old, "backend b25\n  balance roundrobin\n");
        assert_eq!(
            part.new,
            "backend b25\n  balance roundrobin\n  option httpchk\n"
        );
        // A structural change inside the part is found; an address change is runtime-only.
        let to = RenderedConfig {
            haproxy_cfg: backends(50, "  option httpchk\n"),
            ..Default::default()
        };
        assert!(plan(Some(&from), &to).unwrap().reload);
        let moved = RenderedConfig {
            haproxy_cfg: from
                .haproxy_cfg
                .replace("10.0.25.1:80", "10.0.25.9:80\n  # moved"),
            ..Default::default()
        };
        let plan = plan(Some(&from), &moved).unwrap();
        assert!(!plan.reload, "{:?}", plan.reload_reasons);
        assert!(
            plan.operations.iter().any(
                |op| matches!(op, Operation::SetServerAddress { backend, .. } if backend == "b25")
            ),
            "{:?}",
            plan.operations
        );
    }

    #[test]
    fn the_line_comparison_agrees_with_the_full_comparison() {
        let from = cfg(
            "  server s1 10.0.0.1:80 check weight 10\n  server s2 127.0.0.1:1 disabled check\n",
        );
        let to = cfg("  server s1 10.0.0.3:81 check weight 20\n  server s2 10.0.0.4:80 check\n");
        let fast = server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg)
            .expect("only server lines differ");
        let old = parse_config(&from.haproxy_cfg).expect("parses");
        let new = parse_config(&to.haproxy_cfg).expect("parses");
        assert_eq!(structural_difference(&old, &new), None);
        assert_eq!(fast, server_operations(&old, &new));
        assert_eq!(fast.len(), 4, "{fast:?}");
    }

    #[test]
    fn the_line_comparison_gives_up_on_anything_but_server_lines() {
        let from = cfg("  server s1 10.0.0.1:80\n");
        let renamed = cfg("  server s9 10.0.0.1:80\n");
        let new_param = cfg("  server s1 10.0.0.1:80 backup\n");
        let mut other_line = from.clone();
        other_line.haproxy_cfg = other_line.haproxy_cfg.replace("maxconn 100", "maxconn 200");
        for to in [&renamed, &new_param, &other_line] {
            assert!(server_line_changes(&from.haproxy_cfg, &to.haproxy_cfg).is_none());
            assert!(plan(Some(&from), to).expect("plans").reload);
        }
    }

    /// A small deterministic generator: each call gives a number below its argument.
    fn numbers_below(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |bound: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) as usize) % bound
        }
    }

    #[test]
    fn the_differing_lines_are_whole_lines_that_rebuild_both_texts() {
        // Texts from a few short lines, then random edits, so shared starts and ends fall on
        // and off line boundaries.
        let mut next = numbers_below(0x5eed);
        let pieces = ["a", "ab", "b", "", "a b", "\r"];
        for _ in 0..5_000 {
            let mut old = String::new();
            for _ in 0..next(6) {
                old.push_str(pieces[next(pieces.len())]);
                if next(5) > 0 {
                    old.push('\n');
                }
            }
            let mut new = old.clone();
            for _ in 0..next(3) {
                let at = next(new.len() + 1);
                if next(2) == 0 && at < new.len() {
                    new.remove(at);
                } else {
                    new.insert_str(at, pieces[next(pieces.len())]);
                }
            }
            let region = DifferingLines::between(&old, &new);
            let old_rest = &old[region.above.len() + region.old.len()..];
            let new_rest = &new[region.above.len() + region.new.len()..];
            assert!(old.starts_with(region.above) && new.starts_with(region.above));
            assert_eq!(old_rest, new_rest, "{old:?} -> {new:?}: {region:?}");
            for (text, part) in [(&old, region.old), (&new, region.new)] {
                let start = region.above.len();
                let end = start + part.len();
                let begins_line = |at: usize| at == 0 || text.as_bytes()[at - 1] == b'\n';
                assert!(begins_line(start), "{old:?} -> {new:?}: {region:?}");
                assert!(
                    end == text.len() || begins_line(end),
                    "{old:?} -> {new:?}: {region:?}"
                );
            }
            if old == new {
                assert!(region.old.is_empty() && region.new.is_empty());
            }
            // Nothing shared is left in the differing parts: their first lines differ, and
            // so do their last ones.
            if !region.old.is_empty() && !region.new.is_empty() {
                let a: Vec<&str> = region.old.split_inclusive('\n').collect();
                let b: Vec<&str> = region.new.split_inclusive('\n').collect();
                assert_ne!(a.first(), b.first(), "{old:?} -> {new:?}: {region:?}");
                assert_ne!(a.last(), b.last(), "{old:?} -> {new:?}: {region:?}");
            }
        }
    }

    #[test]
    fn comparing_only_the_differing_sections_decides_as_comparing_the_whole_texts() {
        let mut next = numbers_below(0x5ec7);
        let pool = [
            "global",
            "  maxconn 10",
            "defaults",
            "  mode http",
            "backend a",
            "backend b",
            "listen l",
            "  balance roundrobin",
            "  server s1 10.0.0.1:80",
            "  server s1 10.0.0.2:80",
            "  server s2 10.0.0.3:80 weight 5",
            "  server s2 10.0.0.3:80 weight 7",
            "  server s3 10.0.0.4:80 disabled",
            "",
            "# a comment",
        ];
        // What a plan does with two texts: reload (runtime operations are then moot), or the
        // runtime operations. HAProxy refuses two proxies of one name, so such pairs are
        // left out.
        let decide = |old: &str, new: &str| -> Option<(bool, Vec<Operation>)> {
            let unique_proxies = |text: &str| {
                let names: Vec<&str> = text
                    .lines()
                    .filter(|l| ["backend ", "listen "].iter().any(|k| l.starts_with(k)))
                    .collect();
                names
                    .iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    == names.len()
            };
            if !(unique_proxies(old) && unique_proxies(new)) {
                return None;
            }
            let (old, new) = (parse_config(old).ok()?, parse_config(new).ok()?);
            Some(match structural_difference(&old, &new) {
                Some(_) => (true, Vec::new()),
                None => (false, server_operations(&old, &new)),
            })
        };
        let mut compared = 0;
        for _ in 0..3_000 {
            let mut lines: Vec<&str> = (0..3 + next(12)).map(|_| pool[next(pool.len())]).collect();
            let old = lines.join("\n") + "\n";
            for _ in 0..1 + next(3) {
                let at = next(lines.len() + 1);
                match next(3) {
                    0 if at < lines.len() => {
                        lines.remove(at);
                    }
                    1 if at < lines.len() => lines[at] = pool[next(pool.len())],
                    _ => lines.insert(at, pool[next(pool.len())]),
                }
            }
            let new = lines.join("\n") + "\n";
            let part = differing_sections(&old, &new).expect("no conditional blocks");
            assert_eq!(
                &old[part.above.len() + part.old.len()..],
                &new[part.above.len() + part.new.len()..]
            );
            if let Some(whole) = decide(&old, &new) {
                let by_part = decide(part.old, part.new).expect("parts of valid texts are valid");
                assert_eq!(by_part, whole, "{old:?} -> {new:?}: {part:?}");
                compared += 1;
            }
        }
        assert!(compared > 500, "only {compared} pairs compared");
    }

    #[test]
    fn a_change_deep_in_a_large_config_is_planned_from_its_own_lines() {
        let servers: String = (0..2_000)
            .map(|n| {
                format!(
                    "backend b{n}\n  server s1 10.0.{}.{}:80 check\n",
                    n / 250,
                    n % 250
                )
            })
            .collect();
        let from = RenderedConfig {
            haproxy_cfg: servers.clone(),
            ..Default::default()
        };
        let to = RenderedConfig {
            haproxy_cfg: servers.replace("10.0.6.1:80 check", "10.0.6.1:81 check"),
            ..Default::default()
        };
        let plan = plan(Some(&from), &to).expect("plans");
        assert!(!plan.reload);
        assert_eq!(
            plan.operations,
            vec![
                Operation::SetServerAddress {
                    backend: "b1501".into(),
                    server: "s1".into(),
                    address: "10.0.6.1".into(),
                    port: Some(81),
                },
                Operation::WriteConfig
            ]
        );
    }
}
