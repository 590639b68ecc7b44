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
//!
//! A template that must render again still reuses most of its last render: each iteration
//! of a `resources` or `fetch` block written at the template's top level (not inside
//! another block or a snippet) is a *fragment* whose text depends only on its object, the
//! context and what its helpers read. Its text and side effects are kept per object
//! ([`BlockFragments`]), and the next render writes them again without turning the object into a
//! tree when that very object (the same stored text), every store snapshot the iteration
//! read and its backend pool decisions are unchanged. One changed Ingress at 1 000 then
//! costs one iteration per loop, not a thousand, in the live render and in the admission
//! webhook's what-if render alike.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::pool::PoolMember;
use super::slots::{SlotEntry, SlotTable};
use crate::pure::gateway_status::StatusRecord;
use crate::pure::rendered::{AuxFile, ObjectKey, Outcome, Outcomes};
use crate::pure::store::{CompactObject, StoreSnapshot, StoresSnapshot};

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
    pub(crate) slot_keys: Vec<Arc<str>>,
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
    /// Every `take_pool_backend` call that took part (its `when` true) and what it
    /// answered: a fragment replays only when each would answer the same again.
    pub(crate) pool_calls: Vec<PoolCall>,
    /// A helper read this render's pool decisions (`pool_backend`, `pool_backends`): the
    /// text depends on other iterations.
    pub(crate) pool_dependent: bool,
    /// While a fragment records: what its iteration read and recorded (the rest of what it
    /// did is what the lists above gained meanwhile).
    pub(crate) iteration: Option<IterationTrace>,
}

/// What one recorded iteration read and recorded, beside the template's trace.
#[derive(Default)]
pub(crate) struct IterationTrace {
    /// Each store snapshot read, with whether `server_slots` and whether another helper
    /// read it.
    pub(crate) reads: Vec<(Arc<StoreSnapshot>, bool, bool)>,
    pub(crate) outcomes: Vec<(ObjectKey, Outcome)>,
}

/// Where one `server_slots` call wrote its lines into a template's output, and what it
/// read: enough to make its lines again from newer EndpointSlices and put them there.
#[derive(Debug, Clone)]
pub(crate) struct SlotSpan {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// What the call read, the same from one splice to the next (shared, so a splice copies
    /// one pointer of it per call).
    pub(crate) site: Arc<SpanSite>,
    /// The lines' slot entry.
    pub(crate) entry: Arc<SlotEntry>,
}

/// The EndpointSlices one `server_slots` call read, and the key of its slot assignment.
#[derive(Debug)]
pub(crate) struct SpanSite {
    /// The slot assignment's key (`namespace/service/port[#name]`).
    pub(crate) key: Arc<str>,
    pub(crate) store: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) service: Arc<str>,
}

/// How many calls share one chunk of a [`SpanTable`].
const SPAN_CHUNK: usize = 128;

/// Where a template's `server_slots` calls wrote their lines, arranged so that a splice
/// costs what it changes: each call's offset (plain numbers, copied and shifted by a
/// splice), its site and entry in chunks that splices share (one copies only the chunks of
/// the calls it makes again), and the calls in the order of the Service they read (shared),
/// to find the calls over a changed Service without going through the others.
#[derive(Clone)]
pub(crate) struct SpanTable {
    /// Where each call's lines start in the output, in output order.
    pub(crate) offsets: Arc<Vec<usize>>,
    pub(crate) calls: Vec<Arc<Vec<SpanCall>>>,
    /// Call positions in (store, namespace, service) order.
    by_service: Arc<Vec<u32>>,
}

/// One call of a [`SpanTable`]: what it read, and its entry (whose lines it wrote).
#[derive(Clone)]
pub(crate) struct SpanCall {
    pub(crate) site: Arc<SpanSite>,
    pub(crate) entry: Arc<SlotEntry>,
}

impl SpanTable {
    /// The table of the calls of a render, as recorded in output order; `None` when two
    /// overlap or one is out of order or does not span its lines (never spliced).
    pub(crate) fn new(spans: Vec<SlotSpan>) -> Option<SpanTable> {
        let mut end = 0;
        for span in &spans {
            if span.offset < end || span.len != span.entry.lines.len() {
                return None;
            }
            end = span.offset.checked_add(span.len)?;
        }
        let offsets = spans.iter().map(|span| span.offset).collect();
        let calls: Vec<SpanCall> = spans
            .into_iter()
            .map(|span| SpanCall {
                site: span.site,
                entry: span.entry,
            })
            .collect();
        let mut by_service: Vec<u32> = (0..calls.len() as u32).collect();
        by_service.sort_by(|a, b| {
            let site = |at: &u32| {
                let site = &calls[*at as usize].site;
                (&*site.store, &*site.namespace, &*site.service)
            };
            site(a).cmp(&site(b))
        });
        Some(SpanTable {
            offsets: Arc::new(offsets),
            calls: calls
                .chunks(SPAN_CHUNK)
                .map(|chunk| Arc::new(chunk.to_vec()))
                .collect(),
            by_service: Arc::new(by_service),
        })
    }

    /// The call at position `at`.
    pub(crate) fn call(&self, at: usize) -> Option<&SpanCall> {
        self.calls.get(at / SPAN_CHUNK)?.get(at % SPAN_CHUNK)
    }

    /// Replaces the entry of the call at position `at` (copying its chunk if it is shared).
    pub(crate) fn set_entry(&mut self, at: usize, entry: Arc<SlotEntry>) {
        if let Some(chunk) = self.calls.get_mut(at / SPAN_CHUNK)
            && let Some(call) = Arc::make_mut(chunk).get_mut(at % SPAN_CHUNK)
        {
            call.entry = entry;
        }
    }

    /// The positions of the calls whose (store, namespace, service) `site` orders equal to
    /// `wanted`, in that order.
    fn calls_where(&self, wanted: impl Fn(&SpanSite) -> std::cmp::Ordering) -> &[u32] {
        let order = |at: &u32| self.call(*at as usize).map(|call| wanted(&call.site));
        let start = self
            .by_service
            .partition_point(|at| order(at) == Some(std::cmp::Ordering::Less));
        let len = self.by_service[start..]
            .partition_point(|at| order(at) == Some(std::cmp::Ordering::Equal));
        &self.by_service[start..start + len]
    }

    /// The positions of the calls over the Service `namespace/service` of `store`.
    pub(crate) fn calls_over(&self, store: &str, namespace: &str, service: &str) -> &[u32] {
        self.calls_where(|site| {
            (&*site.store, &*site.namespace, &*site.service).cmp(&(store, namespace, service))
        })
    }

    /// The positions of every call over `store`.
    pub(crate) fn calls_of(&self, store: &str) -> &[u32] {
        self.calls_where(|site| (*site.store).cmp(store))
    }

    /// The stores the calls read, each once.
    pub(crate) fn stores(&self) -> Vec<Arc<str>> {
        let mut stores: Vec<Arc<str>> = Vec::new();
        let mut at = 0;
        while let Some(call) = self
            .by_service
            .get(at)
            .and_then(|first| self.call(*first as usize))
        {
            let store = Arc::clone(&call.site.store);
            at += self.calls_of(&store).len().max(1);
            stores.push(store);
        }
        stores
    }
}

/// One template's last successful render: what it read and everything it produced.
pub(crate) struct TemplateMemo {
    pub(crate) context_generation: u64,
    pub(crate) reads: BTreeMap<String, Arc<StoreSnapshot>>,
    pub(crate) output: String,
    pub(crate) registered: Vec<AuxFile>,
    /// The slot assignments made, shared with the slot memory of the render that took
    /// them over.
    pub(crate) slots: Arc<SlotTable>,
    pub(crate) outcomes: Arc<Outcomes>,
    pub(crate) statuses: Vec<StatusRecord>,
    /// Where the `server_slots` calls wrote, when every one wrote into the output itself,
    /// in order.
    pub(crate) spans: Option<SpanTable>,
    /// Stores only `server_slots` read.
    pub(crate) slot_only: BTreeSet<String>,
    /// Backend pool members taken.
    pub(crate) pool_taken: Vec<(String, PoolMember)>,
    /// The fragments of its top-level `resources`/`fetch` blocks, by block and object.
    pub(crate) fragments: Arc<Fragments>,
}

/// Which fragment of a block: the object (the address of its stored text, held by the
/// fragment so it cannot be reused), its `@index` when a template reads `@index`
/// (`u32::MAX` otherwise), and the iteration's `@first`/`@last` and the handlebars line
/// state it started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FragmentKey {
    pub(crate) object: usize,
    pub(crate) index: u32,
    pub(crate) flags: u8,
}

/// One `take_pool_backend` call and its answer.
#[derive(Debug, Clone)]
pub(crate) enum PoolCall {
    /// The Service port (by key) keeps a backend of its own: the same while the first
    /// render's baseline holds it (a first render's answer too, as the key joins it).
    OwnBackend(String),
    /// It took this member (by name).
    Member(Box<PoolMember>, String),
}

/// The fragments of one block (a `resources`/`fetch` body, by the address of its compiled
/// template, fixed for the life of the template set). At 10 000 Ingresses a render keeps
/// some 50 000 fragments, so they are laid out in one table per block: every text in one
/// string, each fragment a small record, and what most lack kept apart.
#[derive(Default)]
pub(crate) struct BlockFragments {
    pub(crate) by_key: HashMap<FragmentKey, u32>,
    pub(crate) text: String,
    pub(crate) entries: Vec<Fragment>,
}

/// One iteration: where its text is, and what it read.
#[derive(Clone)]
pub(crate) struct Fragment {
    /// The iterated object (kept so the key's address stays its own).
    pub(crate) object: CompactObject,
    /// Its text: `text[start..start + len]` of its block's table.
    pub(crate) start: u32,
    pub(crate) len: u32,
    /// The handlebars line state the iteration ended in.
    pub(crate) end_flags: u8,
    pub(crate) reads: FragmentReads,
    /// What it did besides writing, when anything.
    pub(crate) effects: Option<Arc<FragmentEffects>>,
}

/// What an iteration did besides writing: outcomes, files, server lines, status records,
/// pool members.
#[derive(Default)]
pub(crate) struct FragmentEffects {
    /// The `served`/`ignored` outcomes recorded.
    pub(crate) outcomes: Box<[(ObjectKey, Outcome)]>,
    pub(crate) registered: Box<[AuxFile]>,
    pub(crate) slots: Box<[(Arc<str>, Arc<SlotEntry>)]>,
    pub(crate) statuses: Box<[StatusRecord]>,
    /// `server_slots` positions, relative to the fragment's start.
    pub(crate) spans: Box<[SlotSpan]>,
    pub(crate) pool_calls: Box<[PoolCall]>,
    pub(crate) pool_taken: Box<[(String, PoolMember)]>,
    pub(crate) unspliceable: bool,
}

impl FragmentEffects {
    fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
            && self.registered.is_empty()
            && self.slots.is_empty()
            && self.statuses.is_empty()
            && self.spans.is_empty()
            && !self.unspliceable
            && self.pool_calls.is_empty()
            && self.pool_taken.is_empty()
    }

    /// `Some` only when there is anything.
    pub(crate) fn shared(self) -> Option<Arc<FragmentEffects>> {
        (!self.is_empty()).then(|| Arc::new(self))
    }
}

/// The store snapshots a fragment read, each with whether only `server_slots` read it.
pub(crate) type FragmentReads = Arc<[(Arc<StoreSnapshot>, bool)]>;

/// A template's fragments, by block.
pub(crate) type Fragments = HashMap<usize, Arc<BlockFragments>>;

impl BlockFragments {
    /// A table of the first `count` fragments of this one.
    pub(crate) fn prefix(&self, count: usize) -> BlockFragments {
        let entries: Vec<Fragment> = self.entries.iter().take(count).cloned().collect();
        let end = entries
            .last()
            .map_or(0, |last| last.start as usize + last.len as usize);
        BlockFragments {
            by_key: self
                .by_key
                .iter()
                .filter(|(_, at)| (**at as usize) < entries.len())
                .map(|(key, at)| (*key, *at))
                .collect(),
            text: self.text.get(..end).unwrap_or_default().to_string(),
            entries,
        }
    }
}

/// A block's table as a render makes it: while every iteration so far was written from
/// the last render's table in the same order, that table itself (`shared`, with how many
/// of its fragments were matched), so nothing is copied: a render that changes one Ingress
/// shares the tables of every loop it did not change.
#[derive(Default)]
pub(crate) struct BlockBuild {
    pub(crate) shared: Option<(Arc<BlockFragments>, usize)>,
    pub(crate) own: BlockFragments,
}

impl BlockBuild {
    /// The table being made, copied out of the last render's when it was shared so far.
    pub(crate) fn table_mut(&mut self) -> &mut BlockFragments {
        if let Some((table, matched)) = self.shared.take() {
            self.own = table.prefix(matched);
        }
        &mut self.own
    }

    /// The finished table.
    pub(crate) fn finish(self) -> Arc<BlockFragments> {
        match self.shared {
            Some((table, matched)) if matched == table.entries.len() => table,
            Some((table, matched)) => Arc::new(table.prefix(matched)),
            None => {
                let mut table = self.own;
                // Kept until the next render: no room to grow.
                table.text.shrink_to_fit();
                table.entries.shrink_to_fit();
                table.by_key.shrink_to_fit();
                Arc::new(table)
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::template::slots::SlotSettings;

    fn span(offset: usize, store: &str, namespace: &str, service: &str) -> SlotSpan {
        let lines = format!("  server SRV_1 {service}:80\n");
        SlotSpan {
            offset,
            len: lines.len(),
            site: Arc::new(SpanSite {
                key: format!("{namespace}/{service}/http").into(),
                store: store.into(),
                namespace: namespace.into(),
                service: service.into(),
            }),
            entry: Arc::new(SlotEntry {
                slots: Vec::new(),
                slices: Vec::new(),
                settings: SlotSettings {
                    port_name: "http".into(),
                    name: "SRV".into(),
                    min_slots: 1,
                    params: String::new(),
                    indent: "  ".into(),
                },
                lines: lines.into(),
            }),
        }
    }

    #[test]
    fn the_calls_over_a_service_are_found_by_store_namespace_and_service() {
        let mut spans = Vec::new();
        let mut offset = 0;
        for n in 0..300 {
            let (store, service) = if n % 3 == 0 {
                ("slices-b", format!("svc{}", n % 7))
            } else {
                ("slices-a", format!("svc{}", n % 7))
            };
            let next = span(offset, store, &format!("ns{}", n % 2), &service);
            offset += next.len + 10;
            spans.push(next);
        }
        let expected = |store: &str, namespace: &str, service: &str| -> Vec<u32> {
            (0..300u32)
                .filter(|n| {
                    let site = &spans[*n as usize].site;
                    (&*site.store, &*site.namespace, &*site.service) == (store, namespace, service)
                })
                .collect()
        };
        let wanted = expected("slices-a", "ns1", "svc3");
        let of_b = (0..300u32).filter(|n| n % 3 == 0).count();
        let table = SpanTable::new(spans.clone()).expect("in order");
        assert!(!wanted.is_empty());
        assert_eq!(table.calls_over("slices-a", "ns1", "svc3"), wanted);
        assert!(table.calls_over("slices-a", "ns9", "svc3").is_empty());
        assert_eq!(table.calls_of("slices-b").len(), of_b);
        let stores: Vec<String> = table.stores().iter().map(|s| s.to_string()).collect();
        assert_eq!(stores, ["slices-a", "slices-b"]);
        assert_eq!(table.call(299).map(|c| &*c.site.service), Some("svc5"));
        assert!(table.call(300).is_none());
    }

    #[test]
    fn overlapping_or_unordered_calls_make_no_table() {
        let first = span(100, "s", "ns", "a");
        let overlapping = span(100 + first.len - 1, "s", "ns", "b");
        assert!(SpanTable::new(vec![first.clone(), overlapping]).is_none());
        assert!(SpanTable::new(vec![first.clone(), span(0, "s", "ns", "b")]).is_none());
        let mut wrong_length = span(500, "s", "ns", "c");
        wrong_length.len += 1;
        assert!(SpanTable::new(vec![first.clone(), wrong_length]).is_none());
        assert!(SpanTable::new(vec![first, span(500, "s", "ns", "c")]).is_some());
    }
}
