//! The process-wide record of haptor's live actors: the name, role and restart count of each
//! actor, keyed by ractor's actor id. Actors are spawned without ractor names (names are
//! global in ractor, and two trees, e.g. in tests or across a config rebuild, may hold
//! actors of the same name), so this registry is where names live. [`actor_tree`] walks
//! ractor's supervision links from a root and joins them with this record; it is what
//! `/debug/actors` serves.

use std::sync::LazyLock;

use dashmap::DashMap;
use ractor::{ActorCell, ActorId, ActorStatus};
use serde::Serialize;

/// Where an actor sits in haptor's tree, which decides when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActorRole {
    /// A supervisor: owns and restarts its children.
    Supervisor,
    /// Runs on every replica (watchers, stores, validators, leader election).
    AllReplica,
    /// Runs only on the elected leader (coordinator, scheduler, deployers, publisher).
    LeaderOnly,
    /// An HTTP server or other process-wide service that outlives config changes.
    Server,
}

/// What the registry knows of one live actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActorInfo {
    pub name: String,
    pub role: ActorRole,
    /// How often the slot this actor fills has been restarted.
    pub restarts: u32,
}

static LIVE_ACTORS: LazyLock<DashMap<ActorId, ActorInfo>> = LazyLock::new(DashMap::new);

/// Records an actor (called by whoever spawns it, normally a [`super::Supervisor`]).
pub fn register(id: ActorId, info: ActorInfo) {
    LIVE_ACTORS.insert(id, info);
}

/// Forgets an actor that has stopped.
pub fn unregister(id: ActorId) {
    LIVE_ACTORS.remove(&id);
}

/// What the registry knows of an actor, if it is live and registered.
pub fn info(id: ActorId) -> Option<ActorInfo> {
    LIVE_ACTORS.get(&id).map(|e| e.value().clone())
}

/// One node of the live actor tree.
#[derive(Debug, Clone, Serialize)]
pub struct ActorTreeNode {
    pub name: String,
    pub id: String,
    pub role: Option<ActorRole>,
    pub status: String,
    pub restarts: u32,
    pub children: Vec<ActorTreeNode>,
}

impl ActorTreeNode {
    /// Every node of this subtree, depth first.
    pub fn iter(&self) -> Box<dyn Iterator<Item = &ActorTreeNode> + '_> {
        Box::new(std::iter::once(self).chain(self.children.iter().flat_map(|c| c.iter())))
    }

    /// Finds a node by name in this subtree.
    pub fn find(&self, name: &str) -> Option<&ActorTreeNode> {
        self.iter().find(|n| n.name == name)
    }

    /// An indented text rendering, one actor per line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write_text(&mut out, 0);
        out
    }

    fn write_text(&self, out: &mut String, depth: usize) {
        let role = self
            .role
            .map(|r| format!("{r:?}"))
            .unwrap_or_else(|| "unregistered".into());
        out.push_str(&format!(
            "{}{} [{}] {} {} restarts={}\n",
            "  ".repeat(depth),
            self.name,
            self.id,
            role,
            self.status,
            self.restarts
        ));
        for child in &self.children {
            child.write_text(out, depth + 1);
        }
    }
}

/// Walks the live tree below `root`, children ordered by name.
pub fn actor_tree(root: &ActorCell) -> ActorTreeNode {
    let id = root.get_id();
    let info = info(id);
    let mut children: Vec<ActorTreeNode> = root
        .get_children()
        .iter()
        .filter(|c| !matches!(c.get_status(), ActorStatus::Stopped))
        .map(actor_tree)
        .collect();
    children.sort_by(|a, b| a.name.cmp(&b.name));
    ActorTreeNode {
        name: info
            .as_ref()
            .map(|i| i.name.clone())
            .or_else(|| root.get_name())
            .unwrap_or_else(|| format!("actor-{}", id.pid())),
        id: id.to_string(),
        role: info.as_ref().map(|i| i.role),
        status: format!("{:?}", root.get_status()).to_lowercase(),
        restarts: info.map_or(0, |i| i.restarts),
        children,
    }
}
