//! Server slots: the `server_slots` helper turns a Service's EndpointSlices into `server
//! SRV_n` lines. With `slots=N` it writes a fixed number of them, filling unused slots with
//! disabled placeholders, so scaling within the slots changes only server addresses and
//! states, which the runtime API applies without a reload; with `slots="dynamic"` it writes
//! exactly the endpoints, and the deployment adds and deletes servers at runtime (`add
//! server`, for backends whose algorithm allows it). A slot keeps its endpoint from one render to the next (the
//! template set remembers the last assignment), so an endpoint that stays never moves and
//! its connections are not disturbed. Written in Rust rather than as template code because
//! it runs once per backend and dominates large renders.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::pure::store::CompactObject;

/// The address placeholders get: a port nothing listens on, disabled anyway.
pub const PLACEHOLDER_ADDRESS: &str = "127.0.0.1:1";

/// What one `server_slots` call produced, kept for the next render: the slot assignment,
/// and — so an unchanged backend costs nothing next time — the EndpointSlices it was made
/// from (held, so pointer identity is sound), the call's settings and the lines.
#[derive(Debug, Clone)]
pub struct SlotEntry {
    pub slots: Vec<Option<String>>,
    pub slices: Vec<CompactObject>,
    pub settings: SlotSettings,
    pub lines: Arc<str>,
}

/// The arguments of a `server_slots` call besides its EndpointSlices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSettings {
    pub port_name: String,
    /// What the server names start with (`SRV` gives `SRV_1`, `SRV_2`, ...), so one backend
    /// can hold the slots of two Services.
    pub name: String,
    /// Slots reserved (0: dynamic, exactly the endpoints and no placeholder).
    pub min_slots: usize,
    pub params: String,
    pub indent: String,
}

impl SlotEntry {
    /// Whether this entry was made from exactly these slices with these settings; then the
    /// assignment (which keeps every endpoint in its slot) and the lines are the same again.
    pub fn made_from<'a>(
        &self,
        slices: impl ExactSizeIterator<Item = &'a CompactObject>,
        settings: &SlotSettings,
    ) -> bool {
        self.settings == *settings
            && self.slices.len() == slices.len()
            && self
                .slices
                .iter()
                .zip(slices)
                .all(|(a, b)| CompactObject::same(a, b))
    }
}

/// Slot assignments of one render, by `namespace/service/port`: the tables of the templates
/// that were taken over whole (shared with their memos, nothing copied) and the entries made
/// or taken over one at a time, in the order the render took them. A later entry for a key
/// wins, as it would by inserting each into one map, so an endpoint change that takes over
/// a template's 10 000 assignments costs one pointer here, not 10 000 insertions.
#[derive(Debug, Default)]
pub struct SlotMemory {
    parts: Vec<SlotPart>,
}

#[derive(Debug)]
enum SlotPart {
    Table(Arc<SlotTable>),
    Loose(HashMap<Arc<str>, Arc<SlotEntry>>),
}

impl SlotMemory {
    /// The assignment last taken for `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<SlotEntry>> {
        self.parts.iter().rev().find_map(|part| match part {
            SlotPart::Table(table) => table.get(key),
            SlotPart::Loose(entries) => entries.get(key),
        })
    }

    /// Takes one assignment.
    pub fn insert(&mut self, key: Arc<str>, entry: Arc<SlotEntry>) {
        if let Some(SlotPart::Loose(entries)) = self.parts.last_mut() {
            entries.insert(key, entry);
        } else {
            self.parts
                .push(SlotPart::Loose(HashMap::from([(key, entry)])));
        }
    }

    /// Takes every assignment of a template's table, as inserting each in order would.
    pub fn insert_table(&mut self, table: &Arc<SlotTable>) {
        if !table.is_empty() {
            self.parts.push(SlotPart::Table(Arc::clone(table)));
        }
    }
}

/// One slot assignment: its key and its entry.
pub type Assignment = (Arc<str>, Arc<SlotEntry>);

/// How many assignments share one chunk of a [`SlotTable`]: a table made from another with a
/// few entries replaced copies the chunks those are in and shares the rest.
const TABLE_CHUNK: usize = 128;

/// The slot assignments one template's render made, in the order made (a key may come
/// twice), with an index by key shared by every table made from this one.
#[derive(Debug, Default)]
pub struct SlotTable {
    chunks: Vec<Arc<Vec<Assignment>>>,
    /// The position of each key's last assignment.
    index: Arc<HashMap<Arc<str>, u32>>,
    len: usize,
}

impl SlotTable {
    /// The table of these assignments, in this order.
    pub fn new(entries: Vec<Assignment>) -> SlotTable {
        let len = entries.len();
        let index = entries
            .iter()
            .enumerate()
            .map(|(at, (key, _))| (Arc::clone(key), at as u32))
            .collect();
        let chunks = entries
            .chunks(TABLE_CHUNK)
            .map(|chunk| Arc::new(chunk.to_vec()))
            .collect();
        SlotTable {
            chunks,
            index: Arc::new(index),
            len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The last assignment made for `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<SlotEntry>> {
        let at = *self.index.get(key)? as usize;
        self.chunks
            .get(at / TABLE_CHUNK)?
            .get(at % TABLE_CHUNK)
            .map(|(_, entry)| entry)
    }

    /// Every assignment, in the order made.
    pub fn iter(&self) -> impl Iterator<Item = &Assignment> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// This table with every assignment of a key in `made` replaced by the one there;
    /// the chunks without such a key are shared with this table.
    pub fn with_entries(&self, made: &BTreeMap<&str, Arc<SlotEntry>>) -> SlotTable {
        let mut chunks = self.chunks.clone();
        let mut replace = |at: usize, entry: &Arc<SlotEntry>| {
            if let Some(chunk) = chunks.get_mut(at / TABLE_CHUNK)
                && let Some(slot) = Arc::make_mut(chunk).get_mut(at % TABLE_CHUNK)
            {
                slot.1 = Arc::clone(entry);
            }
        };
        if self.index.len() == self.len {
            // Each key once: the index says where.
            for (key, entry) in made {
                if let Some(&at) = self.index.get(*key) {
                    replace(at as usize, entry);
                }
            }
        } else {
            // A key made more than once (one Service port in two backends, say): every
            // assignment of it is replaced, found by going through the table.
            let positions: Vec<(usize, &Arc<SlotEntry>)> = self
                .iter()
                .enumerate()
                .filter_map(|(at, (key, _))| made.get(&**key).map(|entry| (at, entry)))
                .collect();
            for (at, entry) in positions {
                replace(at, entry);
            }
        }
        SlotTable {
            chunks,
            index: Arc::clone(&self.index),
            len: self.len,
        }
    }
}

/// Assigns `wanted` endpoints (`address:port`) to slots: at least `min_slots` slots, growing
/// in steps of `min_slots`; endpoints keep the slot they had in `previous`; new ones fill the
/// lowest free slots in sorted order. With `min_slots` 0 (dynamic servers) there are as many
/// slots as the highest one in use needs: a slot whose endpoint left stays empty (its
/// server is deleted) until a new endpoint takes it.
pub fn assign_slots(
    previous: Option<&[Option<String>]>,
    wanted: &BTreeSet<String>,
    min_slots: usize,
) -> Vec<Option<String>> {
    if min_slots == 0 {
        return assign_dynamic(previous.unwrap_or_default(), wanted);
    }
    let step = min_slots.max(1);
    let size = wanted.len().div_ceil(step).max(1) * step;
    let mut slots: Vec<Option<String>> = vec![None; size];
    let mut placed = BTreeSet::new();
    for (index, endpoint) in previous.unwrap_or_default().iter().enumerate().take(size) {
        if let Some(endpoint) = endpoint
            && wanted.contains(endpoint)
            && placed.insert(endpoint.clone())
        {
            slots[index] = Some(endpoint.clone());
        }
    }
    fill_free_slots(&mut slots, &placed, wanted, false);
    slots
}

/// Puts each endpoint of `wanted` not `placed` yet into the lowest free slot, in sorted
/// order; with `grow`, past the last slot once none is free (else it is left out).
fn fill_free_slots(
    slots: &mut Vec<Option<String>>,
    placed: &BTreeSet<String>,
    wanted: &BTreeSet<String>,
    grow: bool,
) {
    let mut free = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| i)
        .collect::<Vec<_>>()
        .into_iter();
    for endpoint in wanted.iter().filter(|e| !placed.contains(*e)) {
        match free.next() {
            Some(index) => slots[index] = Some(endpoint.clone()),
            None if grow => slots.push(Some(endpoint.clone())),
            None => {}
        }
    }
}

fn assign_dynamic(previous: &[Option<String>], wanted: &BTreeSet<String>) -> Vec<Option<String>> {
    let mut placed = BTreeSet::new();
    let mut slots: Vec<Option<String>> = previous
        .iter()
        .map(|slot| {
            slot.as_ref()
                .filter(|endpoint| wanted.contains(*endpoint) && placed.insert((*endpoint).clone()))
                .cloned()
        })
        .collect();
    fill_free_slots(&mut slots, &placed, wanted, true);
    while slots.last().is_some_and(Option::is_none) {
        slots.pop();
    }
    slots
}

/// The ready endpoints (`address:port`) of EndpointSlices for the Service port named
/// `port_name` (EndpointSlice ports carry the Service port's name; an unnamed Service port
/// matches a slice's only port).
pub fn ready_endpoints<'a>(
    slices: impl Iterator<Item = &'a Value>,
    port_name: &str,
) -> BTreeSet<String> {
    let mut endpoints = BTreeSet::new();
    for slice in slices {
        let ports = slice
            .get("ports")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name)
            .or_else(|| {
                if ports.len() == 1 && port_name.is_empty() {
                    ports.first()
                } else {
                    None
                }
            })
            .and_then(|p| p.get("port"))
            .and_then(Value::as_u64);
        let Some(port) = port else { continue };
        for endpoint in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ready = endpoint
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            if let Some(address) = endpoint
                .get("addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
            {
                let address = if address.contains(':') {
                    format!("[{address}]")
                } else {
                    address.to_string()
                };
                endpoints.insert(format!("{address}:{port}"));
            }
        }
    }
    endpoints
}

/// The `server` lines of one backend's slots (dynamic servers: of its filled slots only).
pub fn server_lines(slots: &[Option<String>], settings: &SlotSettings) -> String {
    let mut out = String::with_capacity(slots.len() * 48);
    let (name, params) = (&settings.name, settings.params.trim());
    let dynamic = settings.min_slots == 0;
    for (index, slot) in slots.iter().enumerate() {
        if dynamic && slot.is_none() {
            continue;
        }
        out.push_str(&settings.indent);
        match slot {
            Some(endpoint) => out.push_str(&format!("server {name}_{} {endpoint}", index + 1)),
            None => out.push_str(&format!(
                "server {name}_{} {PLACEHOLDER_ADDRESS} disabled",
                index + 1
            )),
        }
        if !params.is_empty() {
            out.push(' ');
            out.push_str(params);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_endpoint_that_stays_keeps_its_slot_when_others_come_and_go() {
        let first = assign_slots(None, &set(&["10.0.0.2:80", "10.0.0.3:80"]), 4);
        assert_eq!(
            first,
            vec![
                Some("10.0.0.2:80".into()),
                Some("10.0.0.3:80".into()),
                None,
                None
            ]
        );
        let second = assign_slots(Some(&first), &set(&["10.0.0.1:80", "10.0.0.3:80"]), 4);
        assert_eq!(
            second,
            vec![
                Some("10.0.0.1:80".into()),
                Some("10.0.0.3:80".into()),
                None,
                None
            ]
        );
    }

    #[test]
    fn slots_grow_in_steps_when_endpoints_outnumber_them() {
        let wanted: BTreeSet<String> = (1..=5).map(|i| format!("10.0.0.{i}:80")).collect();
        assert_eq!(assign_slots(None, &wanted, 4).len(), 8);
        assert_eq!(assign_slots(None, &BTreeSet::new(), 4).len(), 4);
    }

    #[test]
    fn only_ready_endpoints_of_the_named_port_count() {
        let slice = json!({
            "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["fd00::1"]}
            ]
        });
        assert_eq!(
            ready_endpoints([&slice].into_iter(), "http"),
            set(&["10.0.0.1:8080", "[fd00::1]:8080"])
        );
        assert_eq!(
            ready_endpoints([&slice].into_iter(), "admin"),
            set(&["10.0.0.1:9000", "[fd00::1]:9000"])
        );
        assert!(
            ready_endpoints([&slice].into_iter(), "").is_empty(),
            "an unnamed port matches only a single-port slice"
        );
    }

    #[test]
    fn dynamic_servers_keep_their_names_and_leave_no_placeholder() {
        let first = assign_slots(
            None,
            &set(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]),
            0,
        );
        assert_eq!(first.len(), 3);
        let second = assign_slots(Some(&first), &set(&["10.0.0.1:80", "10.0.0.3:80"]), 0);
        assert_eq!(
            second,
            vec![Some("10.0.0.1:80".into()), None, Some("10.0.0.3:80".into())]
        );
        let mut dynamic = settings("SRV", "");
        dynamic.min_slots = 0;
        assert_eq!(
            server_lines(&second, &dynamic),
            "  server SRV_1 10.0.0.1:80\n  server SRV_3 10.0.0.3:80\n",
            "SRV_3 keeps its name: its connections are not moved"
        );
        let third = assign_slots(
            Some(&second),
            &set(&["10.0.0.1:80", "10.0.0.3:80", "10.0.0.7:80", "10.0.0.8:80"]),
            0,
        );
        assert_eq!(
            third[1].as_deref(),
            Some("10.0.0.7:80"),
            "the gap is filled first"
        );
        assert_eq!(third[3].as_deref(), Some("10.0.0.8:80"));
        assert!(assign_slots(Some(&third), &BTreeSet::new(), 0).is_empty());
    }

    fn settings(name: &str, params: &str) -> SlotSettings {
        SlotSettings {
            port_name: "http".into(),
            name: name.into(),
            min_slots: 2,
            params: params.into(),
            indent: "  ".into(),
        }
    }

    #[test]
    fn placeholders_are_disabled_servers() {
        let lines = server_lines(
            &[Some("10.0.0.1:80".into()), None],
            &settings("SRV", "check inter 2s"),
        );
        assert_eq!(
            lines,
            "  server SRV_1 10.0.0.1:80 check inter 2s\n  server SRV_2 127.0.0.1:1 disabled check inter 2s\n"
        );
    }

    #[test]
    fn servers_are_named_after_the_name_setting() {
        let lines = server_lines(
            &[None, Some("10.0.0.1:80".into())],
            &settings("DEF", "backup"),
        );
        assert_eq!(
            lines,
            "  server DEF_1 127.0.0.1:1 disabled backup\n  server DEF_2 10.0.0.1:80 backup\n"
        );
    }

    fn entry(lines: &str) -> Arc<SlotEntry> {
        Arc::new(SlotEntry {
            slots: Vec::new(),
            slices: Vec::new(),
            settings: settings("SRV", ""),
            lines: lines.into(),
        })
    }

    fn lines(memory: &SlotMemory, key: &str) -> Option<String> {
        memory.get(key).map(|entry| entry.lines.to_string())
    }

    #[test]
    fn the_assignment_taken_last_for_a_key_wins_whether_taken_alone_or_with_a_table() {
        let table = Arc::new(SlotTable::new(vec![
            ("a".into(), entry("a1")),
            ("b".into(), entry("b1")),
            ("a".into(), entry("a2")),
        ]));
        let mut memory = SlotMemory::default();
        memory.insert("b".into(), entry("b0"));
        memory.insert("c".into(), entry("c0"));
        memory.insert_table(&table);
        assert_eq!(
            lines(&memory, "a").as_deref(),
            Some("a2"),
            "the last within a table"
        );
        assert_eq!(
            lines(&memory, "b").as_deref(),
            Some("b1"),
            "the table after the loose one"
        );
        assert_eq!(lines(&memory, "c").as_deref(), Some("c0"));
        memory.insert("b".into(), entry("b3"));
        assert_eq!(
            lines(&memory, "b").as_deref(),
            Some("b3"),
            "a loose one after the table"
        );
        assert_eq!(lines(&memory, "z"), None);
        memory.insert_table(&Arc::new(SlotTable::default()));
        assert_eq!(
            lines(&memory, "b").as_deref(),
            Some("b3"),
            "an empty table takes nothing"
        );
    }

    #[test]
    fn a_table_with_entries_replaced_shares_the_chunks_it_did_not_change() {
        let many: Vec<(Arc<str>, Arc<SlotEntry>)> = (0..1000)
            .map(|n| (format!("k{n}").into(), entry(&format!("old {n}"))))
            .collect();
        let table = SlotTable::new(many);
        let made = BTreeMap::from([("k500", entry("new 500")), ("absent", entry("x"))]);
        let next = table.with_entries(&made);
        assert_eq!(next.len(), 1000);
        assert_eq!(next.get("k500").map(|e| &*e.lines), Some("new 500"));
        assert_eq!(next.get("k499").map(|e| &*e.lines), Some("old 499"));
        assert_eq!(
            table.get("k500").map(|e| &*e.lines),
            Some("old 500"),
            "the old one stays"
        );
        let shared = table
            .chunks
            .iter()
            .zip(&next.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, table.chunks.len() - 1);

        // A key assigned twice is replaced in both places.
        let twice = SlotTable::new(vec![
            ("a".into(), entry("a1")),
            ("b".into(), entry("b1")),
            ("a".into(), entry("a2")),
        ]);
        let next = twice.with_entries(&BTreeMap::from([("a", entry("a3"))]));
        let all: Vec<String> = next
            .iter()
            .map(|(k, e)| format!("{k}={}", e.lines))
            .collect();
        assert_eq!(all, ["a=a3", "b=b1", "a=a3"]);
    }
}
