//! Template memos: a template is a function of the render context and of the store
//! snapshots it reads, so when none of those changed since the last successful render, its
//! output is the same and rendering it again is wasted work. While a template renders, the
//! per-render helpers note what it read (`resources`, `fetch`, `get_single`,
//! `server_slots`) and what it produced besides its text (`register_file` files, server
//! slot assignments, `served`/`ignored` outcomes); the next render reuses all of it when the context is the same and
//! every store it read has the very same snapshot. An EndpointSlice change then renders
//! only the templates that read EndpointSlices.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// One template's last successful render: what it read and everything it produced.
pub(crate) struct TemplateMemo {
    pub(crate) context_generation: u64,
    pub(crate) reads: BTreeMap<String, Arc<StoreSnapshot>>,
    pub(crate) output: String,
    pub(crate) registered: Vec<AuxFile>,
    pub(crate) slots: Vec<(String, Arc<SlotEntry>)>,
    pub(crate) outcomes: Outcomes,
    pub(crate) statuses: Vec<StatusRecord>,
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
