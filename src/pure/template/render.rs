//! One render: the context built once, the per-render state the stateful helpers use, the
//! output guard, and the translation of handlebars errors into [`TemplateError`]s.
//!
//! # Per-render state
//!
//! Helpers that need the render's data (`resources`, `fetch`, `get_single`, `path_for`,
//! `register_file`, `render`, `render_glob`, `server_slots`, `served`, `ignored`,
//! `annotation`, `annotated`, `with_backend_annotations`) are registered as handlebars
//! *local* helpers on each template's `RenderContext`, holding a reference to a [`RenderState`] that lives on
//! the stack of [`TemplateSet::render`](super::TemplateSet::render). Two renders on two
//! threads therefore never share state, and nothing global is swapped per render.
//!
//! # Store data: one short-lived tree per object
//!
//! Stores hold objects as compact JSON text ([`CompactObject`]), and the context holds no
//! store data: a `serde_json` tree of every object in the context would cost kilobytes per
//! object, which at ten thousand objects dominates the controller's memory. The store
//! helpers make a tree only for the object a template is looking at:
//! `{{#resources "ingresses" as |ing|}}...{{/resources}}` and
//! `{{#fetch "endpointslices" ns name as |slice|}}...{{/fetch}}` iterate their matches and
//! give the block one fresh tree per iteration (as the block parameter, or as `this`
//! without one), dropped when the iteration ends; `get_single` returns one tree. As a
//! subexpression, `(resources "x")` and `(fetch ...)` return the whole list as trees,
//! which `#each` then copies again: correct, but it holds the list twice for as long as
//! the loop runs, so the block forms are what templates over large stores should use.
//!
//! # Guards
//!
//! handlebars cannot interrupt a template mid-way. The time limit is checked between
//! templates, in every stateful helper, and every few dozen writes to the output; a loop
//! that writes nothing and calls no stateful helper runs to its end. The output limit
//! counts bytes across all templates of one render and stops at the first write past it.

mod fragment;
mod http;
pub(super) mod trace;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use handlebars::{
    BlockContext, BlockParams, Context, Handlebars, Helper, HelperDef, HelperResult, Output,
    RenderContext as HbRenderContext, RenderError, RenderErrorReason, Renderable, ScopedJson,
};
use memchr::memmem::Finder;
use serde_json::{Map, Value, json};

use super::helpers::{Args, HelperFailure, glob_match, misuse};
use super::memo::{
    Fragments, PoolCall, SlotSpan, SpanSite, SpanTable, TemplateMemo, TemplateTrace,
    next_context_generation,
};
use super::pool::{PoolMember, PoolMemory, PoolRender};
use super::slots::{SlotEntry, SlotMemory, SlotTable};
use super::{RenderContext, TemplateError};
use crate::pure::annotations::{AnnotationTable, Judged};
use crate::pure::gateway_status::{ParentRef, RecordedCondition, Scope, StatusRecord};
use crate::pure::rendered::{
    AuxFile, AuxKind, ObjectKey, Outcome, Outcomes, PathResolver, record_outcome,
};
use crate::pure::store::{
    EntryKey, SnapshotEntry, StoreSnapshot, StoresSnapshot, normalise_numbers,
};

/// Context keys haptor fills itself; `values` and `extra_context` cannot use them.
pub(crate) const RESERVED_KEYS: &[&str] = &["resources", "paths"];

/// How deep `render`/`render_glob` may nest before a snippet is assumed to include itself.
const RENDER_DEPTH_LIMIT: usize = 32;

/// Names of the helpers registered per render.
pub(crate) const STATEFUL_HELPERS: &[&str] = &[
    "resources",
    "fetch",
    "get_single",
    "http_resource",
    "http_resource_on",
    "path_for",
    "register_file",
    "render",
    "render_glob",
    "with_rendered",
    "server_slots",
    "take_pool_backend",
    "pool_backend",
    "pool_backends",
    "served",
    "ignored",
    "condition",
    "listener_kinds",
    "attached_route",
    "annotation",
    "annotated",
    "with_backend_annotations",
];

/// The handlebars context of the last render (everything but store data), reused while the
/// values it was built from are unchanged.
#[derive(Default)]
pub(crate) struct ContextCache {
    /// The values the cached context was built from.
    rest: Map<String, Value>,
    /// The cached context and its generation (see [`next_context_generation`]).
    context: Option<(Context, u64)>,
}

impl ContextCache {
    /// Brings the cached context up to date with `input` and returns it with its
    /// generation, which changes exactly when the context is rebuilt.
    pub(crate) fn refresh(
        &mut self,
        input: &RenderContext,
    ) -> Result<(&Context, u64), TemplateError> {
        let rest = context_values(input)?;
        let current = match self.context.take() {
            Some(cached) if self.rest == rest => cached,
            _ => {
                let context = Context::from(Value::Object(rest.clone()));
                self.rest = rest;
                (context, next_context_generation())
            }
        };
        let (context, generation) = self.context.insert(current);
        Ok((context, *generation))
    }
}

/// Every top-level context value (store data is not among them: see the module notes).
fn context_values(input: &RenderContext) -> Result<Map<String, Value>, TemplateError> {
    let mut root = Map::new();
    let paths = &input.path_resolver;
    root.insert(
        "paths".to_string(),
        json!({
            "base_dir": paths.base_dir,
            "maps_dir": paths.maps_dir,
            "files_dir": paths.files_dir,
            "certs_dir": paths.certs_dir,
        }),
    );
    for (key, value) in &input.values {
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(TemplateError::Context {
                message: format!("the context value '{key}' is reserved for haptor"),
            });
        }
        let mut value = value.clone();
        normalise_numbers(&mut value);
        root.insert(key.clone(), value);
    }
    match &input.extra_context {
        Value::Null => {}
        Value::Object(extra) => {
            for (key, value) in extra {
                if RESERVED_KEYS.contains(&key.as_str()) || input.values.contains_key(key) {
                    return Err(TemplateError::Context {
                        message: format!(
                            "extraContext key '{key}' collides with a built-in context value; rename it"
                        ),
                    });
                }
                let mut value = value.clone();
                normalise_numbers(&mut value);
                root.insert(key.clone(), value);
            }
        }
        other => {
            return Err(TemplateError::Context {
                message: format!("extraContext must be an object, not {}", json_kind(other)),
            });
        }
    }
    Ok(root)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// What one render's stateful helpers read and write.
pub(crate) struct RenderState<'a> {
    stores: &'a StoresSnapshot,
    paths: &'a PathResolver,
    snippets: &'a [String],
    annotations: &'a AnnotationTable,
    deadline: Instant,
    pub(crate) time_limit: Duration,
    timed_out: AtomicBool,
    depth: AtomicUsize,
    /// Files added with `register_file`, by relative path.
    registered: Mutex<BTreeMap<String, AuxFile>>,
    /// Slot assignments of the last successful render (read) and of this one (written).
    previous_slots: &'a SlotMemory,
    slots: Mutex<SlotMemory>,
    /// Backend pool members of the last successful render (read) and of this one.
    previous_pool: &'a PoolMemory,
    pool: Mutex<PoolRender>,
    /// The `served`/`ignored` outcomes of each template rendered or reused so far, merged
    /// when the render ends (most renders have one, shared with its memo: no copy).
    outcomes: Mutex<Vec<Arc<Outcomes>>>,
    /// The Gateway API status records of this render, in the order recorded.
    statuses: Mutex<Vec<StatusRecord>>,
    /// What the template being rendered has read and produced so far.
    trace: Mutex<TemplateTrace>,
    /// The address of the output the template being rendered writes to (a
    /// [`GuardedOutput`]), and how many bytes it holds: where a helper writing to that very
    /// output is writing. Captures (`with_rendered`, `sort_lines`) write elsewhere.
    top_output: AtomicUsize,
    written: AtomicUsize,
    /// The fragments of the template being rendered (`memo.rs`): its last render's, read,
    /// and this render's, written when the render will be remembered (`None`: not kept).
    fragments_before: Mutex<Arc<Fragments>>,
    fragments: Mutex<Option<HashMap<usize, super::memo::BlockBuild>>>,
    /// Whether a template of the set reads `@index`: then it is part of a fragment's key.
    reads_index: bool,
    /// Iterations written from fragments in this render.
    pub(crate) fragments_reused: AtomicUsize,
    /// What changed in a store since an older snapshot of it (by the older one's address),
    /// computed once per render for the fragments that find their EndpointSlices moved on.
    changes_since: Mutex<HashMap<usize, Arc<[EntryKey]>>>,
    /// The reads of the last fragment recorded, shared by the next when the same.
    last_fragment_reads: Mutex<Option<super::memo::FragmentReads>>,
    /// The buffer an iteration's text is recorded in, kept between iterations.
    recording: Mutex<String>,
    /// What an instrumented set's render traces and profiles (`render/trace.rs`); `None`
    /// in every other render.
    tracer: Option<Mutex<trace::Tracer>>,
}

impl<'a> RenderState<'a> {
    pub(crate) fn new(
        input: &'a RenderContext,
        snippets: &'a [String],
        annotations: &'a AnnotationTable,
        time_limit: Duration,
        previous_slots: &'a SlotMemory,
        previous_pool: &'a PoolMemory,
        reads_index: bool,
    ) -> RenderState<'a> {
        RenderState {
            stores: &input.stores,
            paths: &input.path_resolver,
            snippets,
            annotations,
            deadline: Instant::now() + time_limit,
            time_limit,
            timed_out: AtomicBool::new(false),
            depth: AtomicUsize::new(0),
            registered: Mutex::new(BTreeMap::new()),
            previous_slots,
            slots: Mutex::new(SlotMemory::default()),
            previous_pool,
            pool: Mutex::new(PoolRender::default()),
            outcomes: Mutex::new(Vec::new()),
            statuses: Mutex::new(Vec::new()),
            trace: Mutex::new(TemplateTrace::default()),
            top_output: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            fragments_before: Mutex::default(),
            fragments: Mutex::default(),
            reads_index,
            fragments_reused: AtomicUsize::new(0),
            changes_since: Mutex::default(),
            last_fragment_reads: Mutex::default(),
            recording: Mutex::default(),
            tracer: None,
        }
    }

    /// Notes the output the template about to render writes to.
    pub(crate) fn set_top_output(&self, output: &GuardedOutput<'_>) {
        self.top_output
            .store(std::ptr::from_ref(output).addr(), Ordering::Relaxed);
        self.written.store(output.text.len(), Ordering::Relaxed);
    }

    /// The byte offset a helper writing to `out` writes at, when `out` is the template's
    /// own output (not a capture).
    fn top_offset(&self, out: &dyn Output) -> Option<usize> {
        let here = std::ptr::from_ref(out).cast::<()>().addr();
        (here == self.top_output.load(Ordering::Relaxed))
            .then(|| self.written.load(Ordering::Relaxed))
    }

    /// The store snapshots this render reads.
    pub(crate) fn stores(&self) -> &StoresSnapshot {
        self.stores
    }

    /// The snapshot of the store `name`, noted as read by the template being rendered; an
    /// error naming the known stores when there is none.
    fn read_store(&self, name: &str) -> Result<&'a Arc<StoreSnapshot>, HelperFailure> {
        self.read_store_by(name, false)
    }

    /// [`Self::read_store`], noting whether `server_slots` is the reader: a store only it
    /// reads changes a memoised template only in the server lines it wrote.
    fn read_store_by(
        &self,
        name: &str,
        server_slots: bool,
    ) -> Result<&'a Arc<StoreSnapshot>, HelperFailure> {
        let snapshot = self.stores.get(name).ok_or_else(|| {
            misuse(format!(
                "no watched resource named '{name}' (known: {})",
                self.store_names()
            ))
        })?;
        self.with_trace(|trace| {
            trace
                .reads
                .entry(name.to_string())
                .or_insert_with(|| Arc::clone(snapshot));
            let readers = if server_slots {
                &mut trace.slot_stores
            } else {
                &mut trace.other_stores
            };
            if !readers.contains(name) {
                readers.insert(name.to_string());
            }
            if let Some(iteration) = &mut trace.iteration {
                match iteration
                    .reads
                    .iter_mut()
                    .find(|(read, _, _)| Arc::ptr_eq(read, snapshot))
                {
                    Some((_, by_slots, by_others)) => {
                        *by_slots |= server_slots;
                        *by_others |= !server_slots;
                    }
                    None => {
                        iteration
                            .reads
                            .push((Arc::clone(snapshot), server_slots, !server_slots));
                    }
                }
            }
        });
        Ok(snapshot)
    }

    fn with_trace(&self, note: impl FnOnce(&mut TemplateTrace)) {
        note(&mut self.trace.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Ends the current template's trace and returns it.
    pub(crate) fn take_trace(&self) -> TemplateTrace {
        std::mem::take(&mut *self.trace.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The memo of the template just rendered, from its trace.
    pub(crate) fn memo(
        &self,
        trace: TemplateTrace,
        context_generation: u64,
        output: &str,
    ) -> TemplateMemo {
        let registered = {
            let files = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            trace
                .registered
                .iter()
                .filter_map(|path| files.get(path).cloned())
                .collect()
        };
        let slots = {
            let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            SlotTable::new(
                trace
                    .slot_keys
                    .iter()
                    .filter_map(|key| slots.get(key).map(|entry| (key.clone(), Arc::clone(entry))))
                    .collect(),
            )
        };
        let slot_only = trace
            .slot_stores
            .difference(&trace.other_stores)
            .cloned()
            .collect();
        TemplateMemo {
            context_generation,
            reads: trace.reads,
            output: output.to_string(),
            registered,
            slots: Arc::new(slots),
            outcomes: {
                let outcomes = Arc::new(trace.outcomes);
                self.outcomes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Arc::clone(&outcomes));
                outcomes
            },
            statuses: trace.statuses,
            spans: (!trace.unspliceable)
                .then(|| SpanTable::new(trace.spans))
                .flatten(),
            slot_only,
            pool_taken: trace.pool_taken,
            fragments: Arc::new(
                self.fragments
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(block, build)| (block, build.finish()))
                    .collect(),
            ),
        }
    }

    /// The template of `memo` again, when only stores that its `server_slots` calls alone
    /// read changed since: its last output with the server lines of each call made anew
    /// from the current snapshots (most calls find their EndpointSlices unchanged and keep
    /// their lines), and what it produced besides its text taken over as
    /// [`Self::replay`] does. An endpoint change then costs one pass over the calls instead
    /// of a whole render. `None` (and nothing changed) when anything else it read changed,
    /// a call wrote elsewhere than into the template's own output, or the recorded
    /// positions are out of order or, where lines are made again, do not hold the lines
    /// they should.
    pub(crate) fn splice(
        &self,
        memo: &TemplateMemo,
        context_generation: u64,
    ) -> Option<(String, TemplateMemo)> {
        let spans = memo.spans.as_ref()?;
        if memo.context_generation != context_generation {
            return None;
        }
        let mut reads = BTreeMap::new();
        for (name, read) in &memo.reads {
            let current = self.stores.get(name)?;
            if !Arc::ptr_eq(current, read) && !memo.slot_only.contains(name) {
                return None;
            }
            reads.insert(name.clone(), Arc::clone(current));
        }
        // The calls to make again: those over a Service with an EndpointSlice changed since
        // the memo's snapshot, in a store only `server_slots` read; every call over another
        // store (unchanged, as read by other helpers too).
        let mut touched: Vec<u32> = Vec::new();
        for store in spans.stores() {
            let changed = memo
                .slot_only
                .contains(&*store)
                .then(|| Some((self.stores.get(&store)?, memo.reads.get(&*store)?)))
                .flatten();
            match changed {
                Some((current, read)) => {
                    for key in current.changed_since(read) {
                        if let [namespace, service, ..] = key.index.as_slice() {
                            touched.extend(spans.calls_over(&store, namespace, service));
                        }
                    }
                }
                None => touched.extend(spans.calls_of(&store)),
            }
        }
        touched.sort_unstable();
        touched.dedup();
        // The calls whose lines are made again, by key.
        let mut made: BTreeMap<&str, Arc<SlotEntry>> = BTreeMap::new();
        let mut new_spans = spans.clone();
        let mut output = String::with_capacity(memo.output.len() + memo.output.len() / 64);
        // `output` holds the new text of `memo.output[..cursor]`; how much longer (or
        // shorter) the lines made again so far are, by the call they end after.
        let mut cursor = 0;
        let mut shifts: Vec<(usize, isize)> = Vec::new();
        for &at in &touched {
            let at = at as usize;
            let (call, &offset) = (spans.call(at)?, spans.offsets.get(at)?);
            let old = &call.entry;
            let end = offset.checked_add(old.lines.len())?;
            // The lines replaced must be the ones the call wrote there.
            if offset < cursor || memo.output.get(offset..end)? != &*old.lines {
                return None;
            }
            let site = &call.site;
            let entry = if let Some(entry) = made.get(&*site.key) {
                Arc::clone(entry)
            } else {
                let snapshot = self.stores.get(&site.store)?;
                let range = snapshot
                    .fetch_range(&[&*site.namespace, &*site.service])
                    .ok()?;
                let entry = slot_entry(
                    self.previous_slots.get(&site.key),
                    &snapshot.entries()[range],
                    &old.settings,
                );
                made.insert(&*site.key, Arc::clone(&entry));
                entry
            };
            output.push_str(memo.output.get(cursor..offset)?);
            output.push_str(&entry.lines);
            cursor = end;
            let grown = entry.lines.len() as isize - old.lines.len() as isize;
            if grown != 0 {
                shifts.push((at, grown));
            }
            new_spans.set_entry(at, entry);
        }
        output.push_str(memo.output.get(cursor..)?);
        // Every call after one whose lines grew or shrank moves by as much.
        if !shifts.is_empty() {
            let mut offsets = Vec::with_capacity(spans.offsets.len());
            let (mut shift, mut next) = (0isize, shifts.iter().peekable());
            for (at, &offset) in spans.offsets.iter().enumerate() {
                offsets.push(offset.checked_add_signed(shift)?);
                if let Some((_, grown)) = next.next_if(|(call, _)| *call == at) {
                    shift += grown;
                }
            }
            new_spans.offsets = Arc::new(offsets);
        }
        let slots = if made.is_empty() {
            Arc::clone(&memo.slots)
        } else {
            Arc::new(memo.slots.with_entries(&made))
        };
        let memo = TemplateMemo {
            context_generation,
            reads,
            output: output.clone(),
            registered: memo.registered.clone(),
            slots,
            outcomes: Arc::clone(&memo.outcomes),
            statuses: memo.statuses.clone(),
            spans: Some(new_spans),
            slot_only: memo.slot_only.clone(),
            pool_taken: memo.pool_taken.clone(),
            fragments: Arc::clone(&memo.fragments),
        };
        // Taken over with the entries made again in place of the old ones.
        if !self.replay(&memo) {
            return None;
        }
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, entry) in &made {
            slots.insert(Arc::from(*key), Arc::clone(entry));
        }
        drop(slots);
        Some((output, memo))
    }

    /// Takes over what a memoised template produced besides its text, as if it had just
    /// rendered. False (and nothing changed) when one of its files conflicts with a file
    /// another template registered in this render: then the template must render, so the
    /// conflict is reported as `register_file` reports it.
    pub(crate) fn replay(&self, memo: &TemplateMemo) -> bool {
        let mut files = self
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if conflicts(&files, &memo.registered) {
            return false;
        }
        for file in &memo.registered {
            files
                .entry(file.path.clone())
                .or_insert_with(|| file.clone());
        }
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert_table(&memo.slots);
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, member) in &memo.pool_taken {
            pool.taken.insert(key.clone(), member.clone());
        }
        drop(pool);
        self.outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&memo.outcomes));
        self.statuses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(memo.statuses.iter().cloned());
        true
    }

    /// The `served`/`ignored` outcomes this render recorded.
    pub(crate) fn take_outcomes(&self) -> Arc<Outcomes> {
        let parts =
            std::mem::take(&mut *self.outcomes.lock().unwrap_or_else(PoisonError::into_inner));
        let mut recorded = parts.into_iter().filter(|part| !part.is_empty());
        let Some(first) = recorded.next() else {
            return Arc::default();
        };
        let rest: Vec<Arc<Outcomes>> = recorded.collect();
        if rest.is_empty() {
            return first;
        }
        let mut merged = Outcomes::clone(&first);
        for part in rest {
            for (key, outcome) in part.iter() {
                record_outcome(&mut merged, key.clone(), outcome.clone());
            }
        }
        Arc::new(merged)
    }

    /// The Gateway API status records of this render.
    pub(crate) fn take_statuses(&self) -> Vec<StatusRecord> {
        std::mem::take(&mut *self.statuses.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records a status record for the render and for the trace of the template being
    /// rendered.
    fn record_status(&self, record: StatusRecord) {
        self.with_trace(|trace| trace.statuses.push(record.clone()));
        self.statuses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }

    /// Records an outcome for the render and for the trace of the template being rendered.
    fn record(&self, key: ObjectKey, outcome: Outcome) {
        self.with_trace(|trace| {
            if let Some(iteration) = &mut trace.iteration {
                iteration.outcomes.push((key.clone(), outcome.clone()));
            }
            record_outcome(&mut trace.outcomes, key, outcome);
        });
    }

    /// The backend pool decisions this render made.
    pub(crate) fn take_pool(&self) -> PoolRender {
        std::mem::take(&mut *self.pool.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The slot assignments this render made.
    pub(crate) fn take_slots(&self) -> SlotMemory {
        std::mem::take(&mut *self.slots.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Records and reports an expired deadline.
    pub(crate) fn expired(&self) -> bool {
        if self.timed_out.load(Ordering::Relaxed) {
            return true;
        }
        let expired = Instant::now() >= self.deadline;
        if expired {
            self.timed_out.store(true, Ordering::Relaxed);
        }
        expired
    }

    fn check_time(&self) -> Result<(), HelperFailure> {
        if self.expired() {
            Err(HelperFailure::TimeLimit)
        } else {
            Ok(())
        }
    }

    pub(crate) fn into_registered(self) -> BTreeMap<String, AuxFile> {
        self.registered
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Installs the stateful helpers on one template's render context.
    pub(crate) fn install<'reg: 'rc, 'rc>(&'rc self, rc: &mut HbRenderContext<'reg, 'rc>) {
        rc.register_local_helper(
            "resources",
            Box::new(StoreHelper {
                state: self,
                op: StoreOp::Resources,
            }),
        );
        rc.register_local_helper(
            "fetch",
            Box::new(StoreHelper {
                state: self,
                op: StoreOp::Fetch,
            }),
        );
        rc.register_local_helper(
            "get_single",
            Box::new(StoreHelper {
                state: self,
                op: StoreOp::GetSingle,
            }),
        );
        rc.register_local_helper(
            "http_resource",
            Box::new(http::HttpResourceHelper { state: self }),
        );
        rc.register_local_helper(
            "http_resource_on",
            Box::new(http::HttpResourceOn { state: self }),
        );
        rc.register_local_helper("path_for", Box::new(PathFor { state: self }));
        rc.register_local_helper("server_slots", Box::new(ServerSlots { state: self }));
        for op in [PoolOp::Take, PoolOp::Lookup, PoolOp::Members] {
            rc.register_local_helper(op.name(), Box::new(PoolHelper { state: self, op }));
        }
        rc.register_local_helper("register_file", Box::new(RegisterFile { state: self }));
        rc.register_local_helper(
            "served",
            Box::new(RecordOutcome {
                state: self,
                ignored: false,
            }),
        );
        rc.register_local_helper(
            "ignored",
            Box::new(RecordOutcome {
                state: self,
                ignored: true,
            }),
        );
        rc.register_local_helper(
            "condition",
            Box::new(RecordStatus {
                state: self,
                what: StatusHelper::Condition,
            }),
        );
        rc.register_local_helper(
            "listener_kinds",
            Box::new(RecordStatus {
                state: self,
                what: StatusHelper::ListenerKinds,
            }),
        );
        rc.register_local_helper(
            "attached_route",
            Box::new(RecordStatus {
                state: self,
                what: StatusHelper::AttachedRoute,
            }),
        );
        rc.register_local_helper("annotation", Box::new(AnnotationValue { state: self }));
        rc.register_local_helper("annotated", Box::new(Annotated { state: self }));
        rc.register_local_helper(
            "with_backend_annotations",
            Box::new(WithBackendAnnotations { state: self }),
        );
        rc.register_local_helper("with_rendered", Box::new(WithRendered { state: self }));
        rc.register_local_helper(
            "render",
            Box::new(RenderSnippets {
                state: self,
                glob: false,
            }),
        );
        rc.register_local_helper(
            "render_glob",
            Box::new(RenderSnippets {
                state: self,
                glob: true,
            }),
        );
        self.install_trace(rc);
    }

    fn store_names(&self) -> String {
        let names: Vec<&str> = self.stores.names().collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    }
}

#[derive(Clone, Copy)]
enum StoreOp {
    Resources,
    Fetch,
    GetSingle,
}

/// `resources "name"`, `fetch "name" key...`, `get_single "name" key...`.
struct StoreHelper<'s> {
    state: &'s RenderState<'s>,
    op: StoreOp,
}

impl StoreHelper<'_> {
    fn helper_name(&self) -> &'static str {
        match self.op {
            StoreOp::Resources => "resources",
            StoreOp::Fetch => "fetch",
            StoreOp::GetSingle => "get_single",
        }
    }

    /// The store's snapshot and the positions (in list order) the call selects.
    fn lookup(
        &self,
        helper: &Helper<'_>,
    ) -> Result<(Arc<StoreSnapshot>, Range<usize>), HelperFailure> {
        self.state.check_time()?;
        let args = Args {
            name: self.helper_name(),
            helper,
        };
        let snapshot = self.state.read_store(&args.text(0)?)?;
        let keys: Vec<String> = (1..args.count())
            .map(|i| args.text(i).map(|k| k.into_owned()))
            .collect::<Result<_, _>>()?;
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let range = match self.op {
            StoreOp::Resources => 0..snapshot.len(),
            StoreOp::Fetch => snapshot
                .fetch_range(&keys)
                .map_err(|err| misuse(err.to_string()))?,
            StoreOp::GetSingle => match snapshot
                .single_position(&keys)
                .map_err(|err| misuse(err.to_string()))?
            {
                Some(at) => at..at + 1,
                None => 0..0,
            },
        };
        Ok((Arc::clone(snapshot), range))
    }
}

impl HelperDef for StoreHelper<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let (snapshot, range) = self.lookup(helper)?;
        let entries = &snapshot.entries()[range];
        let mentioning = mentioning(helper)?;
        let result = match self.op {
            StoreOp::Resources | StoreOp::Fetch => Value::Array(
                entries
                    .iter()
                    .filter(|e| mentions(e, mentioning.as_deref()))
                    .map(|e| e.value())
                    .collect(),
            ),
            StoreOp::GetSingle => entries.first().map_or(Value::Null, |e| e.value()),
        };
        Ok(ScopedJson::Derived(result))
    }

    /// With `mentioning="WORD ..."` only the objects whose JSON text holds one of the
    /// (space-separated) words are taken, before any is turned into a tree: a pass that
    /// wants the few objects carrying an annotation (`mentioning="example.com/flag"`)
    /// skips the rest at the cost of a text search. It narrows, never decides: the
    /// template still checks what it reads.
    ///
    /// As a block (`{{#fetch "endpointslices" ns svc as |slice|}}...{{else}}...{{/fetch}}`,
    /// likewise `{{#resources "x"}}`), iterates the matches, each as a fresh tree that lives
    /// for its iteration only: the block parameter when there is one, `this` otherwise.
    /// `@index`, `@first` and `@last` are set as in `each`; a second block parameter is the
    /// index. With a block parameter, `this` inside the block is the enclosing `this`.
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        registry: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let body = helper
            .template()
            .filter(|_| helper.is_block() && !matches!(self.op, StoreOp::GetSingle));
        let Some(body) = body else {
            let value = self.call_inner(helper, registry, ctx, rc)?;
            out.write(&value.render())?;
            return Ok(());
        };
        let (snapshot, range) = self.lookup(helper)?;
        let mentioning = mentioning(helper)?;
        let entries: Vec<&SnapshotEntry> = snapshot.entries()[range]
            .iter()
            .filter(|e| mentions(e, mentioning.as_deref()))
            .collect();
        if entries.is_empty() {
            return match helper.inverse() {
                Some(inverse) => inverse.render(registry, ctx, rc, out),
                None => Ok(()),
            };
        }
        let count = entries.len();
        // Iterations at the template's top level are fragments (`memo.rs`).
        let fragments = self.state.at_top_level(rc);
        for (n, entry) in entries.iter().enumerate() {
            self.state.check_time()?;
            let key = fragments.then(|| {
                self.state
                    .fragment_place(body, entry.object(), (n, count), rc, out)
            });
            if let Some(key) = &key
                && self.state.replay_fragment(key, entry.object(), rc, out)?
            {
                continue;
            }
            let mut block = BlockContext::new();
            if let Some(enclosing) = rc.block() {
                // With a block parameter, `this` stays what it was around the block.
                *block.base_path_mut() = enclosing.base_path().clone();
                if let Some(value) = enclosing.base_value() {
                    block.set_base_value(value.clone());
                }
            }
            block.set_local_var("index", Value::from(n));
            block.set_local_var("first", Value::Bool(n == 0));
            block.set_local_var("last", Value::Bool(n + 1 == count));
            let object = entry.value();
            if let Some(name) = helper.block_param() {
                let mut params = BlockParams::new();
                params.add_value(name, object)?;
                block.set_block_params(params);
            } else if let Some((name, index)) = helper.block_param_pair() {
                let mut params = BlockParams::new();
                params.add_value(name, object)?;
                params.add_value(index, Value::from(n))?;
                block.set_block_params(params);
            } else {
                block.set_base_value(object);
            }
            rc.push_block(block);
            let result = match key {
                Some(key) => self
                    .state
                    .record_fragment(key, entry.object(), rc, out, |rc, out| {
                        body.render(registry, ctx, rc, out)
                    }),
                None => body.render(registry, ctx, rc, out),
            };
            rc.pop_block();
            result?;
        }
        Ok(())
    }
}

/// Whether a file of `taken` has the path of a file already `registered` with other
/// content: what was written before cannot be taken over as it was, so it renders again and
/// `register_file` reports the conflict.
fn conflicts(registered: &BTreeMap<String, AuxFile>, taken: &[AuxFile]) -> bool {
    taken.iter().any(|file| {
        registered
            .get(&file.path)
            .is_some_and(|existing| existing.content != file.content)
    })
}

/// The words of a store helper's `mentioning=` (see [`StoreHelper`]), if it has one, each
/// ready to be searched for (the search is built once per call, not once per object).
fn mentioning(helper: &Helper<'_>) -> Result<Option<Vec<Finder<'static>>>, HelperFailure> {
    match helper.hash_get("mentioning").map(|v| v.value()) {
        None => Ok(None),
        Some(Value::String(words)) if !words.trim().is_empty() => Ok(Some(
            words
                .split_whitespace()
                .map(|word| Finder::new(word).into_owned())
                .collect(),
        )),
        Some(other) => Err(misuse(format!(
            "mentioning={other} is not words separated by spaces"
        ))),
    }
}

/// Whether `entry` passes `mentioning` (no words: every entry does).
fn mentions(entry: &SnapshotEntry, words: Option<&[Finder<'_>]>) -> bool {
    words.is_none_or(|words| {
        let json = entry.object().json().as_bytes();
        words.iter().any(|word| word.find(json).is_some())
    })
}

/// `server_slots "endpointslices" namespace service port_name slots=10 params="check"
/// name="SRV"`: the `server SRV_n` lines of a backend (see [`super::slots`]); `slots="dynamic"`
/// writes exactly the endpoints, for servers added and deleted at runtime.
const DEFAULT_SLOT_NAME: &str = "SRV";

fn is_slot_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

struct ServerSlots<'s> {
    state: &'s RenderState<'s>,
}

impl ServerSlots<'_> {
    /// The call's key, its span facts (where its EndpointSlices are) and its server lines.
    fn entry(&self, helper: &Helper<'_>) -> Result<(SlotSpan, Arc<SlotEntry>), RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "server_slots",
            helper,
        };
        let store = args.text(0)?;
        let namespace = args.text(1)?;
        let service = args.text(2)?;
        let port_name = args
            .optional(3)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let min_slots = match helper.hash_get("slots").map(|v| v.value()) {
            None => 10,
            Some(Value::String(word)) if word == "dynamic" => 0,
            Some(value) => match value.as_u64().or_else(|| value.as_str()?.parse().ok()) {
                Some(count @ 1..=10_000) => count as usize,
                _ => {
                    return Err(misuse(format!(
                        "slots={value} is neither a number of server slots (1 to 10000) nor \"dynamic\""
                    ))
                    .into());
                }
            },
        };
        let params = helper
            .hash_get("params")
            .and_then(|v| v.value().as_str().map(String::from))
            .unwrap_or_default();
        let indent = helper
            .hash_get("indent")
            .and_then(|v| v.value().as_str().map(String::from))
            .unwrap_or_else(|| "  ".into());
        let name = match helper.hash_get("name").map(|v| v.value()) {
            None => DEFAULT_SLOT_NAME.to_string(),
            Some(Value::String(name)) if is_slot_name(name) => name.clone(),
            Some(other) => {
                return Err(misuse(format!(
                    "name={other} is not a server name prefix (1 to 32 letters, digits or '_')"
                ))
                .into());
            }
        };
        let snapshot = self.state.read_store_by(&store, true)?;
        let range = snapshot
            .fetch_range(&[namespace.as_ref(), service.as_ref()])
            .map_err(|err| misuse(err.to_string()))?;
        let entries = &snapshot.entries()[range];
        // Slots named otherwise are another set of the same Service's endpoints (in another
        // role, e.g. backup servers), remembered apart.
        let key: Arc<str> = if name == DEFAULT_SLOT_NAME {
            format!("{namespace}/{service}/{port_name}").into()
        } else {
            format!("{namespace}/{service}/{port_name}#{name}").into()
        };
        self.state
            .with_trace(|trace| trace.slot_keys.push(key.clone()));
        let settings = super::slots::SlotSettings {
            port_name,
            name,
            min_slots,
            params,
            indent,
        };
        let entry = slot_entry(self.state.previous_slots.get(&key), entries, &settings);
        self.state
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), Arc::clone(&entry));
        let span = SlotSpan {
            offset: 0,
            len: entry.lines.len(),
            entry: Arc::clone(&entry),
            site: Arc::new(SpanSite {
                key,
                store: store.into(),
                namespace: namespace.into(),
                service: service.into(),
            }),
        };
        Ok((span, entry))
    }
}

/// The slot entry of a call over `entries` with `settings`: the previous render's when it
/// was made from the very same EndpointSlices (nothing to compute), else a new assignment
/// that keeps every endpoint in the slot it had.
fn slot_entry(
    previous: Option<&Arc<SlotEntry>>,
    entries: &[SnapshotEntry],
    settings: &super::slots::SlotSettings,
) -> Arc<SlotEntry> {
    match previous {
        Some(previous) if previous.made_from(entries.iter().map(|e| e.object()), settings) => {
            Arc::clone(previous)
        }
        _ => {
            let slices: Vec<Value> = entries.iter().map(|e| e.value()).collect();
            let wanted = super::slots::ready_endpoints(slices.iter(), &settings.port_name);
            let slots = super::slots::assign_slots(
                previous.map(|p| p.slots.as_slice()),
                &wanted,
                settings.min_slots,
            );
            let lines: Arc<str> = super::slots::server_lines(&slots, settings).into();
            Arc::new(SlotEntry {
                slots,
                slices: entries.iter().map(|e| e.object().clone()).collect(),
                settings: settings.clone(),
                lines,
            })
        }
    }
}

impl HelperDef for ServerSlots<'_> {
    /// Written straight into the template's output: its position is noted, so an endpoint
    /// change can replace these lines alone (see [`RenderState::splice`]).
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let (mut span, entry) = self.entry(helper)?;
        match self.state.top_offset(out) {
            Some(offset) => {
                span.offset = offset;
                self.state.with_trace(|trace| trace.spans.push(span));
            }
            None => self.state.with_trace(|trace| trace.unspliceable = true),
        }
        out.write(&entry.lines)?;
        Ok(())
    }

    /// As a subexpression its lines go wherever the caller puts them: the template can
    /// only be rendered whole.
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let (_, entry) = self.entry(helper)?;
        self.state.with_trace(|trace| trace.unspliceable = true);
        Ok(ScopedJson::Derived(Value::String(entry.lines.to_string())))
    }
}

/// The backend pool helpers (see [`super::pool`]):
/// - `take_pool_backend namespace service port port_name="http" when=BOOL`: the pool member
///   this Service port takes (`pool_3`), or null when it keeps a backend of its own (the
///   template set's first render saw it, or `when` is false: its backend is not a plain
///   one a member can stand for);
/// - `pool_backend namespace service port`: the member this render gave it, or null;
/// - `pool_backends size`: every declared member, `{name, namespace, service, port,
///   port_name}` (`service` null when free), in pools of `size`.
#[derive(Clone, Copy)]
enum PoolOp {
    Take,
    Lookup,
    Members,
}

impl PoolOp {
    fn name(self) -> &'static str {
        match self {
            PoolOp::Take => "take_pool_backend",
            PoolOp::Lookup => "pool_backend",
            PoolOp::Members => "pool_backends",
        }
    }
}

struct PoolHelper<'s> {
    state: &'s RenderState<'s>,
    op: PoolOp,
}

impl HelperDef for PoolHelper<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let args = Args {
            name: self.op.name(),
            helper,
        };
        let mut pool = self
            .state
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let value = match self.op {
            PoolOp::Take | PoolOp::Lookup => {
                let member = PoolMember {
                    index: 0,
                    namespace: args.text(0)?.into_owned(),
                    service: args.text(1)?.into_owned(),
                    port: args.text(2)?.into_owned(),
                    port_name: helper
                        .hash_get("port_name")
                        .and_then(|v| v.value().as_str().map(String::from))
                        .unwrap_or_default(),
                };
                let key = super::pool::key_of(&member);
                let name = match self.op {
                    PoolOp::Take => {
                        let when = helper
                            .hash_get("when")
                            .is_none_or(|v| v.value().as_bool().unwrap_or(false));
                        if when {
                            let taken = pool.take(self.state.previous_pool, member.clone());
                            let noted = taken
                                .as_ref()
                                .and_then(|_| pool.taken.get(&key))
                                .map(|member| (key.clone(), member.clone()));
                            let call = match &taken {
                                Some(name) => PoolCall::Member(Box::new(member), name.clone()),
                                None => PoolCall::OwnBackend(key.clone()),
                            };
                            self.state.with_trace(|trace| {
                                trace.pool_taken.extend(noted);
                                trace.pool_calls.push(call);
                            });
                            taken
                        } else {
                            None
                        }
                    }
                    _ => {
                        self.state.with_trace(|trace| trace.pool_dependent = true);
                        pool.lookup(&key)
                    }
                };
                name.map_or(Value::Null, Value::String)
            }
            PoolOp::Members => {
                self.state.with_trace(|trace| trace.pool_dependent = true);
                let size = args
                    .optional(0)
                    .and_then(Value::as_u64)
                    .map_or(0, |n| n.min(10_000) as usize);
                Value::Array(
                    pool.members(size)
                        .into_iter()
                        .map(|(name, member)| match member {
                            Some(m) => json!({"name": name, "namespace": m.namespace,
                                "service": m.service, "port": m.port, "port_name": m.port_name}),
                            None => json!({"name": name, "service": null}),
                        })
                        .collect(),
                )
            }
        };
        Ok(ScopedJson::Derived(value))
    }
}

/// `path_for "name" "map|file|cert|crt-list"`: the path relative to `default-path origin`.
struct PathFor<'s> {
    state: &'s RenderState<'s>,
}

fn parse_kind(helper: &str, kind: &str) -> Result<AuxKind, HelperFailure> {
    AuxKind::parse(kind).ok_or_else(|| {
        misuse(format!(
            "{helper}: unknown file kind '{kind}' (expected map, file, cert or crt-list)"
        ))
    })
}

impl HelperDef for PathFor<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        let args = Args {
            name: "path_for",
            helper,
        };
        let name = args.text(0)?;
        let kind = parse_kind("path_for", &args.text(1)?)?;
        Ok(ScopedJson::Derived(Value::String(
            self.state.paths.path(kind, &name),
        )))
    }
}

/// `register_file "kind" "name" content`: adds an auxiliary file to this render and
/// returns its relative path. Registering equal content twice is fine; different content
/// under the same path is an error.
struct RegisterFile<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for RegisterFile<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "register_file",
            helper,
        };
        let kind = parse_kind("register_file", &args.text(0)?)?;
        let name = args.text(1)?.into_owned();
        let content = args.text(2)?.into_owned();
        let path = self.state.paths.path(kind, &name);
        self.state
            .with_trace(|trace| trace.registered.push(path.clone()));
        self.state.trace_registered(&path, &content);
        let mut registered = self
            .state
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = registered.get(&path) {
            if existing.content != content {
                return Err(misuse(format!(
                    "register_file: {path} was already registered (as {} '{}') with different content",
                    existing.kind, existing.name
                ))
                .into());
            }
        } else {
            registered.insert(
                path.clone(),
                AuxFile {
                    kind,
                    name,
                    path: path.clone(),
                    content,
                },
            );
        }
        Ok(ScopedJson::Derived(Value::String(path)))
    }
}

/// `served obj` and `ignored obj "reason"`: record what the template did with a Kubernetes
/// object (its apiVersion, kind, `metadata.namespace` and `metadata.name`) and render
/// nothing. When both are recorded for one object, served wins and keeps the reasons of
/// what was skipped; every reason is kept once.
struct RecordOutcome<'s> {
    state: &'s RenderState<'s>,
    ignored: bool,
}

impl HelperDef for RecordOutcome<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let name = if self.ignored { "ignored" } else { "served" };
        let args = Args { name, helper };
        let key = object_key(name, args.value(0)?)?;
        let outcome = if self.ignored {
            let reason = args.text(1)?;
            if reason.trim().is_empty() {
                return Err(misuse("ignored: the reason (argument 2) is empty").into());
            }
            Outcome::ignored(reason.into_owned())
        } else {
            Outcome::Served
        };
        self.state.record(key, outcome);
        Ok(ScopedJson::Derived(Value::String(String::new())))
    }
}

/// The Gateway API status helpers.
#[derive(Clone, Copy)]
enum StatusHelper {
    Condition,
    ListenerKinds,
    AttachedRoute,
}

impl StatusHelper {
    fn name(self) -> &'static str {
        match self {
            StatusHelper::Condition => "condition",
            StatusHelper::ListenerKinds => "listener_kinds",
            StatusHelper::AttachedRoute => "attached_route",
        }
    }
}

/// The controller name a Route's parent status carries when `condition` is not given one.
pub(crate) const DEFAULT_GATEWAY_CONTROLLER: &str = "haptor.dev/gateway-controller";

/// What templates record about Gateway API status (see `pure::gateway_status`), rendering
/// nothing:
/// - `condition OBJ TYPE STATUS REASON MESSAGE [priority=N] [listener=NAME | parent=REF
///   controller=NAME]`: a condition of OBJ, of its listener NAME, or of its parent REF (the
///   parentRef object as the Route wrote it); per scope and type the highest priority
///   (default 0) wins, the first recorded among equals;
/// - `listener_kinds GATEWAY LISTENER "Kind Kind"`: the Route kinds a listener accepts;
/// - `attached_route ROUTE GATEWAY LISTENER`: ROUTE is attached to that listener.
struct RecordStatus<'s> {
    state: &'s RenderState<'s>,
    what: StatusHelper,
}

impl HelperDef for RecordStatus<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let name = self.what.name();
        let args = Args { name, helper };
        let object = args.value(0)?;
        let key = object_key(name, object)?;
        let generation = object
            .get("metadata")
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64);
        let hash_text = |key: &str| {
            helper
                .hash_get(key)
                .map(|v| v.value())
                .filter(|v| !v.is_null())
                .and_then(|v| super::helpers::as_text(v).map(|t| t.into_owned()))
        };
        let record = match self.what {
            StatusHelper::Condition => {
                let type_ = args.text(1)?.into_owned();
                let status = args.text(2)?.into_owned();
                if !matches!(status.as_str(), "True" | "False" | "Unknown") {
                    return Err(misuse(format!(
                        "condition: the status (argument 3) is '{status}', not True, False or Unknown"
                    ))
                    .into());
                }
                let reason = args.text(3)?.into_owned();
                if type_.is_empty() || reason.is_empty() {
                    return Err(
                        misuse("condition: the type and the reason must not be empty").into(),
                    );
                }
                let message = if args.count() > 4 {
                    args.text(4)?.into_owned()
                } else {
                    String::new()
                };
                let priority = match hash_text("priority") {
                    Some(text) => text.trim().parse::<i64>().map_err(|_| {
                        misuse(format!("condition: priority={text} is not an integer"))
                    })?,
                    None => 0,
                };
                let scope = match (helper.hash_get("parent"), hash_text("listener")) {
                    (Some(parent), None) => {
                        let parent = ParentRef::from_spec(parent.value(), &key.namespace)
                            .ok_or_else(|| {
                                misuse("condition: parent= is not a parentRef with a name")
                            })?;
                        Scope::Parent {
                            parent,
                            controller: hash_text("controller")
                                .unwrap_or_else(|| DEFAULT_GATEWAY_CONTROLLER.to_string()),
                        }
                    }
                    (None, Some(listener)) => Scope::Listener(listener),
                    (None, None) => Scope::Object,
                    (Some(_), Some(_)) => {
                        return Err(misuse("condition: give parent= or listener=, not both").into());
                    }
                };
                StatusRecord::Condition {
                    object: key,
                    generation,
                    scope,
                    condition: RecordedCondition {
                        type_,
                        status,
                        reason,
                        message,
                        priority,
                    },
                }
            }
            StatusHelper::ListenerKinds => StatusRecord::ListenerKinds {
                gateway: key,
                generation,
                listener: args.text(1)?.into_owned(),
                kinds: args
                    .text(2)?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect(),
            },
            StatusHelper::AttachedRoute => {
                let gateway = args.value(1)?;
                StatusRecord::Attached {
                    gateway: object_key(name, gateway)?,
                    generation: gateway
                        .get("metadata")
                        .and_then(|m| m.get("generation"))
                        .and_then(Value::as_i64),
                    listener: args.text(2)?.into_owned(),
                    route: key,
                }
            }
        };
        self.state.record_status(record);
        Ok(ScopedJson::Derived(Value::String(String::new())))
    }
}

/// The key of a Kubernetes object given to `served` or `ignored`.
fn object_key(helper: &str, object: &Value) -> Result<ObjectKey, HelperFailure> {
    let text = |path: &[&str]| {
        path.iter()
            .try_fold(object, |value, key| value.get(key))
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    let needed = |path: &[&str]| {
        text(path).ok_or_else(|| {
            misuse(format!(
                "{helper}: argument 1 is not a Kubernetes object with {} (give it the object, e.g. `{{{{{helper} ing}}}}`)",
                path.join(".")
            ))
        })
    };
    Ok(ObjectKey {
        api_version: needed(&["apiVersion"])?,
        kind: needed(&["kind"])?,
        namespace: text(&["metadata", "namespace"]).unwrap_or_default(),
        name: needed(&["metadata", "name"])?,
    })
}

/// `annotation obj "name"`: the checked value of a defined annotation on a Kubernetes
/// object, or null when the object does not carry it or carries an invalid value (recorded
/// as left out of the object, with the reason). `as_list=true` gives a list of the value or
/// none, which `#each` renders even for `false`; `invalid=true` gives whether the value is
/// present but invalid.
struct AnnotationValue<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for AnnotationValue<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "annotation",
            helper,
        };
        let object = args.value(0)?;
        let name = args.text(1)?;
        let definition = self.state.annotations.definition(&name).ok_or_else(|| {
            misuse(format!(
                "annotation: '{name}' is not defined in spec.annotations.definitions"
            ))
        })?;
        let flag = |key: &str| {
            helper
                .hash_get(key)
                .is_some_and(|v| v.value().as_bool() == Some(true))
        };
        let annotations = object
            .pointer("/metadata/annotations")
            .unwrap_or(&Value::Null);
        let judged = self.state.annotations.judge(definition, annotations);
        if let Judged::Invalid(reason) = &judged {
            let key = object_key("annotation", object)?;
            self.state.record(key, Outcome::ignored(reason.clone()));
        }
        let result = if flag("invalid") {
            Value::Bool(matches!(judged, Judged::Invalid(_)))
        } else {
            match (judged, flag("as_list")) {
                (Judged::Valid(value), true) => Value::Array(vec![value]),
                (Judged::Valid(value), false) => value,
                (_, true) => Value::Array(Vec::new()),
                (_, false) => Value::Null,
            }
        };
        Ok(ScopedJson::Derived(result))
    }
}

/// `annotated obj "section"`: whether a Kubernetes object carries a valid value for an
/// annotation whose template joins `section`. It also records, as left out of the object,
/// every annotation under an owned prefix that is invalid, refused or defined nowhere, so
/// one call per object reports all of them.
struct Annotated<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for Annotated<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "annotated",
            helper,
        };
        let object = args.value(0)?;
        let section = args.text(1)?;
        let Some(annotations) = object.pointer("/metadata/annotations") else {
            return Ok(ScopedJson::Derived(Value::Bool(false)));
        };
        let reasons = self.state.annotations.left_out(annotations);
        if !reasons.is_empty() {
            let key = object_key("annotated", object)?;
            for reason in reasons {
                self.state.record(key.clone(), Outcome::ignored(reason));
            }
        }
        Ok(ScopedJson::Derived(Value::Bool(
            self.state.annotations.any_in_section(&section, annotations),
        )))
    }
}

/// `with_backend_annotations ing service defaults=…`: the Ingress `ing` (or, when it is
/// null, the Service: its shared backends) with the `metadata.annotations` its backends to
/// `service` apply: the Service's values of `Service`-scope annotations win over the
/// Ingress's, and `defaults` (the config's extraContext `annotation_defaults`) fill in
/// `Defaults`-scope ones neither carries (`AnnotationTable::backend_annotations`). What
/// the Service carries and does not apply is recorded as left out of the Service (served
/// in part: its backends serve it); a default that is not valid fails the render, naming
/// it.
struct WithBackendAnnotations<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for WithBackendAnnotations<'_> {
    fn call_inner<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
    ) -> Result<ScopedJson<'rc>, RenderError> {
        self.state.check_time()?;
        let args = Args {
            name: "with_backend_annotations",
            helper,
        };
        let ingress = args.optional(0).filter(|v| v.is_object());
        let service = args.optional(1).filter(|v| v.is_object());
        let defaults = helper
            .hash_get("defaults")
            .map(|v| v.value())
            .unwrap_or(&Value::Null);
        let Some(base) = ingress.or(service) else {
            return Ok(ScopedJson::Derived(Value::Null));
        };
        fn annotations_of(object: Option<&Value>) -> &Value {
            object
                .and_then(|o| o.pointer("/metadata/annotations"))
                .unwrap_or(&Value::Null)
        }
        let merged = self
            .state
            .annotations
            .backend_annotations(annotations_of(ingress), annotations_of(service), defaults)
            .map_err(misuse)?;
        if let Some(service) = service
            && !merged.service_left_out.is_empty()
        {
            let key = object_key("with_backend_annotations", service)?;
            // The Service's backends serve it: only the annotation is left out.
            for reason in merged.service_left_out {
                self.state
                    .record(key.clone(), Outcome::PartlyServed(vec![reason]));
            }
        }
        let mut object = base.clone();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("annotations".to_string(), Value::Object(merged.annotations));
        }
        Ok(ScopedJson::Derived(object))
    }
}

/// `render "snippet"` and `render_glob "pattern"`: render snippets chosen at render time,
/// in the current scope, in name order.
struct RenderSnippets<'s> {
    state: &'s RenderState<'s>,
    glob: bool,
}

impl HelperDef for RenderSnippets<'_> {
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        registry: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let name = if self.glob { "render_glob" } else { "render" };
        let args = Args { name, helper };
        let wanted = args.text(0)?;
        let chosen: Vec<&String> = if self.glob {
            self.state
                .snippets
                .iter()
                .filter(|s| glob_match(&wanted, s))
                .collect()
        } else {
            let found = self
                .state
                .snippets
                .iter()
                .find(|s| **s == wanted)
                .ok_or_else(|| {
                    misuse(format!(
                        "no template snippet named '{wanted}' (known: {})",
                        self.state.snippets.join(", ")
                    ))
                })?;
            vec![found]
        };
        let depth = self.state.depth.fetch_add(1, Ordering::Relaxed);
        let result = if depth >= RENDER_DEPTH_LIMIT {
            Err(misuse(format!(
                "{name} '{wanted}' nests deeper than {RENDER_DEPTH_LIMIT} levels; does a snippet render itself?"
            ))
            .into())
        } else {
            self.render_each(&chosen, registry, ctx, rc, out)
        };
        self.state.depth.fetch_sub(1, Ordering::Relaxed);
        result
    }
}

impl RenderSnippets<'_> {
    fn render_each<'reg: 'rc, 'rc>(
        &self,
        chosen: &[&String],
        registry: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let current = rc.get_current_template_name();
        for snippet in chosen {
            self.state.check_time()?;
            let template = registry.get_template(snippet).ok_or_else(|| {
                RenderError::from(RenderErrorReason::PartialNotFound(snippet.to_string()))
            })?;
            let traced = self.state.trace_enter(snippet);
            let result = template.render(registry, ctx, rc, out);
            if traced {
                self.state.trace_leave();
            }
            rc.set_current_template_name(current);
            result?;
        }
        Ok(())
    }
}

/// `{{#with_rendered "snippet" as |text|}}...{{/with_rendered}}`: renders the snippet in
/// the current scope (it sees the caller's block parameters, as `{{> snippet}}` does),
/// with the helper's hash arguments as further block parameters (`from="HTTPRoute"`),
/// trims the text, and renders the block with it as the block parameter (the hash
/// arguments stay block parameters there too), or the
/// `{{else}}` block when the text is empty. Lets a library decide something once, in one
/// snippet, and act on the decision in several places (a listener's conflict, a route's
/// attachment), where handlebars has no variables.
struct WithRendered<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for WithRendered<'_> {
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        registry: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        self.state.check_time()?;
        let args = Args {
            name: "with_rendered",
            helper,
        };
        let wanted = args.text(0)?;
        if !self.state.snippets.iter().any(|s| *s == wanted) {
            return Err(misuse(format!(
                "with_rendered: no template snippet named '{wanted}' (known: {})",
                self.state.snippets.join(", ")
            ))
            .into());
        }
        let Some(name) = helper.block_param() else {
            return Err(misuse("with_rendered needs a block parameter: `as |text|`").into());
        };
        let template = registry.get_template(&wanted).ok_or_else(|| {
            RenderError::from(RenderErrorReason::PartialNotFound(wanted.to_string()))
        })?;
        let depth = self.state.depth.fetch_add(1, Ordering::Relaxed);
        let text = if depth >= RENDER_DEPTH_LIMIT {
            Err(misuse(format!(
                "with_rendered '{wanted}' nests deeper than {RENDER_DEPTH_LIMIT} levels; does a snippet render itself?"
            ))
            .into())
        } else {
            let current = rc.get_current_template_name();
            let mut buffer = handlebars::StringOutput::new();
            // The hash arguments are block parameters the snippet reads by name.
            let given = !helper.hash().is_empty();
            if given {
                let block = block_with_hash(helper, rc, None)?;
                rc.push_block(block);
            }
            let traced = self.state.trace_enter(&wanted);
            let result = template.render(registry, ctx, rc, &mut buffer);
            if traced {
                self.state.trace_leave();
            }
            if given {
                rc.pop_block();
            }
            rc.set_current_template_name(current);
            result.and_then(|()| buffer.into_string().map_err(RenderError::from))
        };
        self.state.depth.fetch_sub(1, Ordering::Relaxed);
        let text = text?.trim().to_string();
        if text.is_empty() {
            return match helper.inverse() {
                Some(inverse) => inverse.render(registry, ctx, rc, out),
                None => Ok(()),
            };
        }
        let Some(body) = helper.template() else {
            return Ok(());
        };
        let block = block_with_hash(helper, rc, Some((name, Value::String(text))))?;
        rc.push_block(block);
        let result = body.render(registry, ctx, rc, out);
        rc.pop_block();
        result
    }
}

/// A block that keeps the enclosing `this` and has the helper's hash arguments, and `extra`,
/// as block parameters.
fn block_with_hash<'rc>(
    helper: &Helper<'rc>,
    rc: &HbRenderContext<'_, 'rc>,
    extra: Option<(&'rc str, Value)>,
) -> Result<BlockContext<'rc>, RenderError> {
    let mut block = BlockContext::new();
    if let Some(enclosing) = rc.block() {
        *block.base_path_mut() = enclosing.base_path().clone();
        if let Some(value) = enclosing.base_value() {
            block.set_base_value(value.clone());
        }
    }
    let mut params = BlockParams::new();
    for (key, value) in helper.hash() {
        params.add_value(key, value.value().clone())?;
    }
    if let Some((name, value)) = extra {
        params.add_value(name, value)?;
    }
    block.set_block_params(params);
    Ok(block)
}

/// Why an output stopped accepting writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trip {
    Size,
    Time,
}

/// Collects one template's output, enforcing the shared byte budget and the deadline.
pub(crate) struct GuardedOutput<'s> {
    pub(crate) text: String,
    pub(crate) remaining: usize,
    pub(crate) tripped: Option<Trip>,
    writes: u32,
    state: &'s RenderState<'s>,
    /// Set only in a traced render (`render/trace.rs`).
    tracer: Option<&'s Mutex<trace::Tracer>>,
}

/// Check the clock once per this many writes (a clock read costs about as much as a write).
const WRITES_PER_CLOCK_CHECK: u32 = 64;

impl<'s> GuardedOutput<'s> {
    /// An empty output with room for `capacity` bytes (the size of the template's last
    /// output, so a large text is not regrown and copied by doubling on every render).
    pub(crate) fn new(
        state: &'s RenderState<'s>,
        remaining: usize,
        capacity: usize,
    ) -> GuardedOutput<'s> {
        GuardedOutput {
            text: String::with_capacity(capacity.min(remaining)),
            remaining,
            tripped: None,
            writes: 0,
            state,
            tracer: state.line_tracer(),
        }
    }
}

impl Output for GuardedOutput<'_> {
    fn write(&mut self, segment: &str) -> Result<(), io::Error> {
        if segment.len() > self.remaining {
            self.tripped = Some(Trip::Size);
            return Err(io::Error::other("output size limit exceeded"));
        }
        self.remaining -= segment.len();
        if let Some(tracer) = self.tracer {
            trace::note_write(tracer, segment);
        }
        self.text.push_str(segment);
        self.state.written.store(self.text.len(), Ordering::Relaxed);
        self.writes = self.writes.wrapping_add(1);
        if self.writes.is_multiple_of(WRITES_PER_CLOCK_CHECK) && self.state.expired() {
            self.tripped = Some(Trip::Time);
            return Err(io::Error::other("render time limit exceeded"));
        }
        Ok(())
    }

    fn write_fmt(&mut self, args: std::fmt::Arguments<'_>) -> Result<(), io::Error> {
        match args.as_str() {
            Some(text) => self.write(text),
            None => self.write(&args.to_string()),
        }
    }
}

/// Turns a handlebars render error into a [`TemplateError`] naming where it happened.
pub(crate) fn convert_render_error(
    err: RenderError,
    top_template: &str,
    tripped: Option<Trip>,
    state: &RenderState<'_>,
    output_limit: usize,
) -> TemplateError {
    let template = err
        .template_name
        .clone()
        .unwrap_or_else(|| top_template.to_string());
    let (line, column) = (err.line_no, err.column_no);
    if tripped == Some(Trip::Size) {
        return TemplateError::OutputLimit {
            template,
            limit_bytes: output_limit,
        };
    }
    let timed_out = || TemplateError::TimeLimit {
        template: template.clone(),
        line,
        column,
        limit: state.time_limit,
    };
    if tripped == Some(Trip::Time) {
        return timed_out();
    }
    let message = match err.reason() {
        RenderErrorReason::NestedError(inner) => match inner.downcast_ref::<HelperFailure>() {
            Some(HelperFailure::Fail(message)) => {
                return TemplateError::Failed { template, line, column, message: message.clone() };
            }
            Some(HelperFailure::TimeLimit) => return timed_out(),
            Some(HelperFailure::Misuse(message)) => message.clone(),
            None => inner.to_string(),
        },
        RenderErrorReason::MissingVariable(Some(path)) => format!(
            "'{path}' is not defined (strict mode); guard optional fields with {{{{#if ...}}}} or (default ...)"
        ),
        RenderErrorReason::MissingVariable(None) => {
            "a value used here is missing or null (strict mode); guard optional fields with {{#if ...}} \
             or (default ...), and give {{#with}} an {{else}}".to_string()
        }
        RenderErrorReason::HelperNotFound(name) => format!("unknown helper '{name}'"),
        RenderErrorReason::PartialNotFound(name) => format!("no template snippet named '{name}'"),
        RenderErrorReason::ParamNotFoundForIndex(helper, index) => {
            format!("helper '{helper}' needs argument {}", index + 1)
        }
        other => other.to_string(),
    };
    TemplateError::Render {
        template,
        line,
        column,
        message,
    }
}
