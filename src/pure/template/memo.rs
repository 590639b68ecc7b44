//! Template memos: a template is a function of the render context and of the store
//! snapshots it reads, so when none of those changed since the last successful render, its
//! output is the same and rendering it again is wasted work. While a template renders, the
//! per-render helpers note what it read (`resources`, `fetch`, `get_single`,
//! `server_slots`) and what it produced besides its text (`register_file` files, server
//! slot assignments, `served`/`ignored` outcomes); the next render reuses all of it when the context is the same and
//! every store it read has the very same snapshot. A template whose only changed input is
//! a store its `server_slots` calls alone read (EndpointSlices, in the libraries) is not
//! rendered either: each call's lines sit at a noted position of its output ([`SlotSpan`]),
//! and only they are made again (`RenderState::splice`), so an endpoint change costs a
//! pass over the calls, not a render.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::pool::PoolMember;
use super::slots::SlotEntry;
use crate::pure::gateway_status::StatusRecord;
use crate::pure::rendered::{AuxFile, Outcomes};
use crate::pure::store::{StoreSnapshot, StoresSnapshot};

/// A number for a newly built render context, never given twice in a process, so a memo
/// can tell "the same context" from "an equal number after a reset".
pub(crate) fn next_context_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What the per-render helpers saw while one template rendered.
#[derive(Default)]
pub(crate) struct TemplateTrace {
    /// Every store read, with the snapshot read (held, so pointer identity is sound).
    pub(crate) reads: BTreeMap<String, Arc<StoreSnapshot>>,
    /// Paths of the files registered with `register_file`.
    pub(crate) registered: Vec<String>,
    /// Keys of the `server_slots` assignments made.
    pub(crate) slot_keys: Vec<String>,
    /// The `served`/`ignored` outcomes recorded, merged as the render merges them.
    pub(crate) outcomes: Outcomes,
    /// The Gateway API status records (`condition`, `listener_kinds`, `attached_route`),
    /// in the order recorded.
    pub(crate) statuses: Vec<StatusRecord>,
    /// Stores `server_slots` read, and stores any other helper read.
    pub(crate) slot_stores: BTreeSet<String>,
    pub(crate) other_stores: BTreeSet<String>,
    /// Where each `server_slots` call wrote its lines into the template's output.
    pub(crate) spans: Vec<SlotSpan>,
    /// A `server_slots` call wrote elsewhere (a capture, a subexpression).
    pub(crate) unspliceable: bool,
    /// Backend pool members taken (`take_pool_backend`).
    pub(crate) pool_taken: Vec<(String, PoolMember)>,
}

/// Where one `server_slots` call wrote its lines into a template's output, and what it
/// read: enough to make its lines again from newer EndpointSlices and put them there.
#[derive(Debug, Clone)]
pub(crate) struct SlotSpan {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// The slot assignment's key (`namespace/service/port[#name]`).
    pub(crate) key: String,
    pub(crate) store: String,
    pub(crate) namespace: String,
    pub(crate) service: String,
    /// The lines' slot entry.
    pub(crate) entry: Arc<SlotEntry>,
}

/// One template's last successful render: what it read and everything it produced.
pub(crate) struct TemplateMemo {
    pub(crate) context_generation: u64,
    pub(crate) reads: BTreeMap<String, Arc<StoreSnapshot>>,
    pub(crate) output: String,
    pub(crate) registered: Vec<AuxFile>,
    pub(crate) slots: Vec<(String, Arc<SlotEntry>)>,
    pub(crate) outcomes: Arc<Outcomes>,
    pub(crate) statuses: Vec<StatusRecord>,
    /// Where the `server_slots` calls wrote, when every one wrote into the output itself.
    pub(crate) spans: Option<Vec<SlotSpan>>,
    /// Stores only `server_slots` read.
    pub(crate) slot_only: BTreeSet<String>,
    /// Backend pool members taken.
    pub(crate) pool_taken: Vec<(String, PoolMember)>,
}

impl TemplateMemo {
    /// Whether rendering the template again would read exactly what this render read.
    pub(crate) fn inputs_unchanged(
        &self,
        context_generation: u64,
        stores: &StoresSnapshot,
    ) -> bool {
        self.context_generation == context_generation
            && self.reads.iter().all(|(name, read)| {
                stores
                    .get(name)
                    .is_some_and(|current| Arc::ptr_eq(current, read))
            })
    }
}

/// The memos of a template set's last successful render, by registry name.
pub(crate) type TemplateMemos = HashMap<String, Arc<TemplateMemo>>;
