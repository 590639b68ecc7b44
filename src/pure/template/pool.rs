//! Backend pools: empty backends declared ahead (`pool_1`, `pool_2`, …) so that a Service
//! that appears after the first render takes one at runtime: its servers are added to the
//! member (`add server`) and the maps point its routes there, where a backend of its own
//! would be a new section and a reload. Services the template set's first render saw keep
//! their own backends. A Service keeps its member for as long as it exists, across
//! reloads, so no reload routes a request differently; a member whose Service left is
//! free again from the next render on. The declared members grow by the pool size only
//! when every one is taken (that render reloads).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The name of pool member `index` (from 1).
pub fn member_name(index: usize) -> String {
    format!("pool_{index}")
}

/// One taken member: which Service port it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    pub index: usize,
    pub namespace: String,
    pub service: String,
    pub port: String,
    /// The Service port's name (what its EndpointSlices' port carries).
    pub port_name: String,
}

/// What the last successful render left for the next.
#[derive(Debug, Clone, Default)]
pub struct PoolMemory {
    /// The keys the first render saw; `None` before the first render.
    pub baseline: Option<Arc<BTreeSet<String>>>,
    /// Members taken, by key (`namespace/service/port`).
    pub taken: BTreeMap<String, PoolMember>,
}

/// One render's pool decisions.
#[derive(Debug, Default)]
pub struct PoolRender {
    /// Keys seen by a first render (they become the baseline).
    pub seen: BTreeSet<String>,
    pub taken: BTreeMap<String, PoolMember>,
}

impl PoolRender {
    /// The member for `member`'s key when it should take one (`None`: its own backend).
    pub fn take(&mut self, previous: &PoolMemory, member: PoolMember) -> Option<String> {
        let key = key_of(&member);
        let Some(baseline) = &previous.baseline else {
            self.seen.insert(key);
            return None;
        };
        if baseline.contains(&key) {
            return None;
        }
        if let Some(taken) = self.taken.get(&key) {
            return Some(member_name(taken.index));
        }
        // A member taken before stays; a new Service takes the lowest member nobody held
        // in the last render nor holds in this one.
        let index = match previous.taken.get(&key) {
            Some(before) => before.index,
            None => (1..)
                .find(|i| {
                    !previous.taken.values().any(|m| m.index == *i)
                        && !self.taken.values().any(|m| m.index == *i)
                })
                .unwrap_or(1),
        };
        self.taken.insert(key, PoolMember { index, ..member });
        Some(member_name(index))
    }

    /// The member this render gave `key`, if any.
    pub fn lookup(&self, key: &str) -> Option<String> {
        self.taken.get(key).map(|m| member_name(m.index))
    }

    /// Members `1..=M` with the Service each serves: `M` is `size` times as many pools of
    /// `size` as the highest taken member needs (at least one pool).
    pub fn members(&self, size: usize) -> Vec<(String, Option<&PoolMember>)> {
        if size == 0 {
            return Vec::new();
        }
        let highest = self.taken.values().map(|m| m.index).max().unwrap_or(0);
        let count = highest.div_ceil(size).max(1) * size;
        (1..=count)
            .map(|index| {
                (
                    member_name(index),
                    self.taken.values().find(|m| m.index == index),
                )
            })
            .collect()
    }

    /// The memory the next render starts from.
    pub fn into_memory(self, previous: &PoolMemory) -> PoolMemory {
        PoolMemory {
            baseline: Some(
                previous
                    .baseline
                    .clone()
                    .unwrap_or_else(|| Arc::new(self.seen)),
            ),
            taken: self.taken,
        }
    }
}

/// The key of a Service port.
pub fn key_of(member: &PoolMember) -> String {
    format!("{}/{}/{}", member.namespace, member.service, member.port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(service: &str) -> PoolMember {
        PoolMember {
            index: 0,
            namespace: "default".into(),
            service: service.into(),
            port: "80".into(),
            port_name: "http".into(),
        }
    }

    #[test]
    fn services_of_the_first_render_keep_their_own_backends_and_later_ones_take_members() {
        let mut first = PoolRender::default();
        assert_eq!(first.take(&PoolMemory::default(), port("web")), None);
        let memory = first.into_memory(&PoolMemory::default());

        let mut second = PoolRender::default();
        assert_eq!(second.take(&memory, port("web")), None);
        assert_eq!(second.take(&memory, port("new")), Some("pool_1".into()));
        assert_eq!(second.take(&memory, port("newer")), Some("pool_2".into()));
        assert_eq!(second.lookup("default/new/80"), Some("pool_1".into()));
        let memory = second.into_memory(&memory);

        // `new` leaves; `newer` keeps pool_2 and a third Service does not take pool_1
        // while it was held in the last render.
        let mut third = PoolRender::default();
        assert_eq!(third.take(&memory, port("third")), Some("pool_3".into()));
        assert_eq!(third.take(&memory, port("newer")), Some("pool_2".into()));
        let memory = third.into_memory(&memory);
        let mut fourth = PoolRender::default();
        assert_eq!(fourth.take(&memory, port("fourth")), Some("pool_1".into()));
    }

    #[test]
    fn the_declared_members_grow_by_a_pool_only_when_every_one_is_taken() {
        let mut render = PoolRender::default();
        assert_eq!(render.members(3).len(), 3);
        let memory = PoolMemory {
            baseline: Some(Arc::default()),
            taken: BTreeMap::new(),
        };
        for service in ["a", "b", "c"] {
            render.take(&memory, port(service));
        }
        assert_eq!(render.members(3).len(), 3);
        render.take(&memory, port("d"));
        let members = render.members(3);
        assert_eq!(members.len(), 6);
        assert_eq!(
            members[3].1.map(|m| m.service.as_str()),
            Some("d"),
            "{members:?}"
        );
        assert!(PoolRender::default().members(0).is_empty());
    }
}
