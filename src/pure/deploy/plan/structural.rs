//! The plan's structural path: two parsed configurations compared section by section with
//! server lines reduced to their shape (address, weight and state removed), so any other
//! difference means a reload, and the server operations the runtime API can apply read
//! from the parsed servers' facts.

use std::collections::BTreeMap;

use super::{Operation, ServerState};
use crate::pure::haproxy::{Config, SectionKind, view};

/// The runtime-changeable facts of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerFacts {
    pub(super) address: String,
    pub(super) port: Option<u16>,
    pub(super) weight: u32,
    pub(super) disabled: bool,
}

/// Words of a server line with the runtime-changeable parts removed: the address and the
/// `weight`, `disabled` and `enabled` parameters.
pub(super) fn server_shape(words: &[String]) -> Vec<String> {
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
pub(super) fn normalised(config: &Config) -> Vec<(String, Vec<Vec<String>>)> {
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
pub(super) fn structural_difference(old: &Config, new: &Config) -> Option<String> {
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

pub(super) fn server_facts(config: &Config) -> BTreeMap<(String, String), ServerFacts> {
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
pub(super) fn server_changes(
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

pub(super) fn server_operations(old: &Config, new: &Config) -> Vec<Operation> {
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
