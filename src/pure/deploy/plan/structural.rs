//! The plan's structural path: two parsed configurations compared section by section with
//! server lines reduced to their shape (address, weight and state removed), so any other
//! difference means a reload, and the server operations the runtime API can apply read
//! from the parsed servers' facts: servers that stay change in place, servers that come
//! and go are added and deleted where the backend allows it (`dynamic.rs`). A `backend`
//! section the new configuration no longer has, and that nothing left names, has its servers
//! deleted: the running HAProxy keeps it empty, routed to by nothing, until the next reload.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::dynamic::{added_server_parameters, applicable_defaults, static_backend_reason};
use super::{Operation, ServerState};
use crate::pure::haproxy::{Config, Section, SectionKind, view};

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

/// What a comparison of two parsed configurations found the runtime API can do.
#[derive(Debug, Default)]
pub(super) struct RuntimeChanges {
    pub(super) operations: Vec<Operation>,
    /// Added servers whose parameters match no server the old configuration had in their
    /// backend (see [`super::DeploymentPlan::novel_servers`]).
    pub(super) novel_servers: usize,
    /// The backends the new configuration no longer has, by name, each with the deletions of
    /// its servers: applied after the map changes that stop routing to it
    /// ([`super::RemovedBackend`]). The caller still checks that no text outside the
    /// compared sections names them.
    pub(super) removed_backends: Vec<(String, Vec<Operation>)>,
}

/// One proxy section's servers in order: name and words.
fn servers_of(section: &Section) -> Vec<(&str, &[String])> {
    section
        .directives
        .iter()
        .filter(|d| d.keyword() == "server" && d.words.len() >= 3)
        .map(|d| (d.words[1].as_str(), d.words.as_slice()))
        .collect()
}

/// A server line's shape without its name: what two servers of one backend share when
/// they differ only in name, address, weight and state.
fn nameless_shape(words: &[String]) -> Vec<String> {
    let mut shape = server_shape(words);
    if shape.len() > 1 {
        shape.remove(1);
    }
    shape
}

/// Compares two configurations section by section. Any difference the runtime API cannot
/// apply is the error, as the reason to reload; otherwise the server operations: servers
/// changed in address, port, weight or state, servers deleted, and servers added with
/// every parameter they need. `outer_defaults` is the defaults section above the first
/// section compared (the parts compared may start below it).
pub(super) fn runtime_changes(
    old: &Config,
    new: &Config,
    outer_defaults: Option<&Section>,
) -> Result<RuntimeChanges, String> {
    if old
        .preamble
        .iter()
        .map(|d| &d.words)
        .ne(new.preamble.iter().map(|d| &d.words))
    {
        return Err("lines before the first section changed".into());
    }
    let header = |section: &Section| {
        format!(
            "{} {}",
            section.keyword(),
            section.name.as_deref().unwrap_or("")
        )
    };
    let old_names: Vec<String> = old.sections.iter().map(header).collect();
    let new_names: Vec<String> = new.sections.iter().map(header).collect();
    let Pairing { pairs, removed } = pair_sections(old, &old_names, &new_names)?;
    let defaults = applicable_defaults(&new.sections, outer_defaults);
    let old_facts = server_facts(old);
    let new_facts = server_facts(new);
    let mut changes = RuntimeChanges::default();
    for index in removed {
        let section = &old.sections[index];
        let name = section.name.clone().unwrap_or_default();
        changes.removed_backends.push((
            name.clone(),
            removed_backend_deletions(section, &name, new)?,
        ));
    }
    let (mut deletions, mut additions) = (Vec::new(), Vec::new());
    for (old_index, index) in pairs {
        let (before, after) = (&old.sections[old_index], &new.sections[index]);
        let changed = || format!("section '{}' changed", header(after).trim());
        if before.args != after.args {
            return Err(changed());
        }
        let is_proxy = matches!(after.kind, SectionKind::Backend | SectionKind::Listen);
        let others = |section: &'_ Section| -> Vec<Vec<String>> {
            section
                .directives
                .iter()
                .filter(|d| !(is_proxy && d.keyword() == "server"))
                .map(|d| d.words.clone())
                .collect()
        };
        if others(before) != others(after) {
            return Err(changed());
        }
        if !is_proxy {
            continue;
        }
        let backend = after.name.clone().unwrap_or_default();
        let (old_servers, new_servers) = (servers_of(before), servers_of(after));
        let mut names = std::collections::BTreeSet::new();
        if let Some((name, _)) = new_servers.iter().find(|(name, _)| !names.insert(*name)) {
            return Err(format!(
                "backend {backend} names server {name} twice, which HAProxy refuses"
            ));
        }
        let kept_old: Vec<_> = old_servers
            .iter()
            .filter(|(name, _)| new_servers.iter().any(|(n, _)| n == name))
            .collect();
        let kept_new: Vec<_> = new_servers
            .iter()
            .filter(|(name, _)| old_servers.iter().any(|(n, _)| n == name))
            .collect();
        if kept_old.len() != kept_new.len()
            || kept_old
                .iter()
                .zip(&kept_new)
                .any(|((a, a_words), (b, b_words))| {
                    a != b || server_shape(a_words) != server_shape(b_words)
                })
        {
            return Err(changed());
        }
        for (name, _) in &kept_new {
            let key = (backend.clone(), name.to_string());
            if let (Some(previous), Some(next)) = (old_facts.get(&key), new_facts.get(&key)) {
                server_changes(
                    &mut changes.operations,
                    backend.clone(),
                    name.to_string(),
                    previous,
                    next,
                );
            }
        }
        let leaving: Vec<&str> = old_servers
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| !new_servers.iter().any(|(n, _)| n == name))
            .collect();
        let coming: Vec<(&str, &[String])> = new_servers
            .iter()
            .filter(|(name, _)| !old_servers.iter().any(|(n, _)| n == name))
            .copied()
            .collect();
        if leaving.is_empty() && coming.is_empty() {
            continue;
        }
        if after
            .directives
            .iter()
            .any(|d| d.keyword().starts_with('.'))
        {
            return Err(format!(
                "servers of backend {backend} changed inside conditional blocks"
            ));
        }
        // HAProxy deletes servers from any backend, but adds them only to dynamic ones.
        if !coming.is_empty()
            && let Some(reason) = static_backend_reason(defaults[index], after)
        {
            return Err(reason);
        }
        for name in leaving {
            deletions.push(Operation::DelServer {
                backend: backend.clone(),
                server: name.to_string(),
            });
        }
        let validated_shapes: Vec<Vec<String>> = old_servers
            .iter()
            .map(|(_, words)| nameless_shape(words))
            .collect();
        for (name, words) in coming {
            let parameters = added_server_parameters(defaults[index], after, words)?;
            let facts = new_facts
                .get(&(backend.clone(), name.to_string()))
                .ok_or_else(changed)?;
            let bare = facts.address.trim_start_matches('[').trim_end_matches(']');
            if bare.parse::<IpAddr>().is_err() || facts.port.is_none() {
                return Err(format!(
                    "server {backend}/{name} was added with address '{}', not an IP address and port, which a server added at runtime needs",
                    words[2]
                ));
            }
            if !validated_shapes.contains(&nameless_shape(words)) {
                changes.novel_servers += 1;
            }
            additions.push(Operation::AddServer {
                backend: backend.clone(),
                server: name.to_string(),
                address: facts.address.clone(),
                port: facts.port,
                parameters,
            });
        }
    }
    // Deletions first (a name that leaves is never the one that comes), then the changes
    // of servers that stay, then additions.
    deletions.append(&mut changes.operations);
    deletions.append(&mut additions);
    changes.operations = deletions;
    Ok(changes)
}

/// How the sections of two configurations correspond: each section of the new one paired
/// in order with one of the old one (by index, old first), and the `backend` sections of the
/// old one that the new one has nowhere (by index): removed, which the runtime API follows
/// by emptying them.
struct Pairing {
    pairs: Vec<(usize, usize)>,
    removed: Vec<usize>,
}

/// The [`Pairing`] of `old`'s sections with `new`'s, by their headers. Any other difference
/// of the two section lists (a section added, another kind removed, sections reordered) is
/// the reason to reload.
fn pair_sections(
    old: &Config,
    old_names: &[String],
    new_names: &[String],
) -> Result<Pairing, String> {
    if old_names == new_names {
        return Ok(Pairing {
            pairs: (0..old_names.len()).map(|i| (i, i)).collect(),
            removed: Vec::new(),
        });
    }
    let mut pairing = Pairing {
        pairs: Vec::with_capacity(new_names.len()),
        removed: Vec::new(),
    };
    let mut next = 0;
    for (index, name) in old_names.iter().enumerate() {
        if new_names.get(next) == Some(name) {
            pairing.pairs.push((index, next));
            next += 1;
        } else if old.sections[index].kind == SectionKind::Backend && !new_names.contains(name) {
            pairing.removed.push(index);
        } else {
            break;
        }
    }
    if pairing.pairs.len() + pairing.removed.len() == old_names.len() && next == new_names.len() {
        return Ok(pairing);
    }
    let added = new_names.iter().find(|n| !old_names.contains(n));
    // A removed section the runtime API cannot follow is the one to name.
    let mut gone = old_names
        .iter()
        .zip(&old.sections)
        .filter(|(name, _)| !new_names.contains(name));
    let removed = gone
        .clone()
        .find(|(_, section)| section.kind != SectionKind::Backend)
        .or_else(|| gone.next())
        .map(|(name, _)| name);
    Err(match (added, removed) {
        (Some(a), _) => format!("section '{}' was added", a.trim()),
        (None, Some(r)) => format!("section '{}' was removed", r.trim()),
        (None, None) => "sections were reordered".into(),
    })
}

/// The deletions of the servers of `section`, the backend `name` that `new` no longer has;
/// or why its removal needs a reload: something `new` still has names it (which `haproxy -c`
/// would refuse), or its servers are not all plain `server` lines outside conditional blocks.
fn removed_backend_deletions(
    section: &Section,
    name: &str,
    new: &Config,
) -> Result<Vec<Operation>, String> {
    let removed = format!("section 'backend {name}' was removed");
    if section
        .directives
        .iter()
        .any(|d| d.keyword().starts_with('.'))
    {
        return Err(format!(
            "{removed}, and its servers sat inside conditional blocks"
        ));
    }
    if section
        .directives
        .iter()
        .any(|d| d.keyword() == "server-template")
    {
        return Err(format!(
            "{removed}, and it had servers from a server-template"
        ));
    }
    let naming = |words: &[String]| words.iter().any(|word| names(word, name));
    let still_named = new
        .preamble
        .iter()
        .chain(new.sections.iter().flat_map(|s| &s.directives))
        .find(|d| naming(&d.words))
        .map(|d| d.words.join(" "))
        .or_else(|| {
            new.sections
                .iter()
                .find(|s| naming(&s.args))
                .map(|s| format!("{} {}", s.keyword(), s.args.join(" ")))
        });
    if let Some(line) = still_named {
        return Err(format!("{removed}, but '{line}' still names it"));
    }
    Ok(servers_of(section)
        .into_iter()
        .map(|(server, _)| Operation::DelServer {
            backend: name.to_string(),
            server: server.to_string(),
        })
        .collect())
}

/// Whether `text` holds `name` at byte `at` as a whole word: not inside a longer name, so
/// none of the characters HAProxy allows in a proxy name (letters, digits, `-`, `_`, `.`,
/// `:`) on either side.
fn whole_word_at(text: &str, at: usize, name: &str) -> bool {
    let in_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    !text[..at].chars().next_back().is_some_and(in_name)
        && !text[at + name.len()..].chars().next().is_some_and(in_name)
}

/// Whether `text` names `name` as a whole word.
fn names(text: &str, name: &str) -> bool {
    !name.is_empty()
        && text
            .match_indices(name)
            .any(|(at, _)| whole_word_at(text, at, name))
}

/// The first line of `text` that names `name` as a whole word, trimmed; comment lines do
/// not count.
pub(super) fn mentioning_line<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    if name.is_empty() {
        return None;
    }
    text.match_indices(name).find_map(|(at, _)| {
        if !whole_word_at(text, at, name) {
            return None;
        }
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let line = text[start..end].trim();
        (!line.starts_with('#')).then_some(line)
    })
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
