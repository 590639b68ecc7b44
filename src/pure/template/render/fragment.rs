//! Fragments (see `memo.rs`): recording one top-level `resources`/`fetch` iteration's text
//! and side effects as it renders, and writing them again in a later render when nothing
//! the iteration read has changed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use handlebars::{Output, RenderContext as HbRenderContext, RenderError, template::Template};

use super::RenderState;
use crate::pure::rendered::AuxFile;
use crate::pure::rendered::record_outcome;
use crate::pure::store::{CompactObject, EntryKey, StoreSnapshot};
use crate::pure::template::memo::{
    BlockBuild, BlockFragments, Fragment, FragmentEffects, FragmentKey, FragmentReads, Fragments,
    IterationTrace, PoolCall, TemplateTrace,
};
use crate::pure::template::pool::PoolMember;
use crate::pure::template::slots::SlotEntry;

const FIRST: u8 = 1;
const LAST: u8 = 1 << 1;
const TRAILING_NEWLINE: u8 = 1 << 2;
const CONTENT_PRODUCED: u8 = 1 << 3;
const INDENT_BEFORE_WRITE: u8 = 1 << 4;
/// Written into the template's own output (its `server_slots` positions are kept), not a
/// capture.
const INTO_TEMPLATE_OUTPUT: u8 = 1 << 5;

/// The handlebars line state that decides how the next text is written (indentation of
/// standalone lines), as flags. Whether content was produced so far is not part of it: no
/// text depends on it (handlebars clears it around each helper and block to learn whether
/// that one wrote), and an iteration only ever sets it.
fn line_state(rc: &HbRenderContext<'_, '_>) -> u8 {
    let mut flags = 0;
    if rc.get_trailine_newline() {
        flags |= TRAILING_NEWLINE;
    }
    if rc.get_indent_before_write() {
        flags |= INDENT_BEFORE_WRITE;
    }
    flags
}

/// The line state after an iteration: `end` as recorded, and content produced when it was
/// before or the iteration produced some.
fn set_line_state(rc: &mut HbRenderContext<'_, '_>, end: u8) {
    rc.set_trailing_newline(end & TRAILING_NEWLINE != 0);
    rc.set_indent_before_write(end & INDENT_BEFORE_WRITE != 0);
    if end & CONTENT_PRODUCED != 0 {
        rc.set_content_produced(true);
    }
}

/// Writes through to the template's output and keeps a copy: the iteration's text.
struct Recording<'o> {
    inner: &'o mut dyn Output,
    text: String,
}

impl Output for Recording<'_> {
    fn write(&mut self, segment: &str) -> Result<(), std::io::Error> {
        self.inner.write(segment)?;
        self.text.push_str(segment);
        Ok(())
    }
}

impl Fragment {
    /// Its effects (none: the empty set).
    fn effects(&self) -> &FragmentEffects {
        static NONE: std::sync::OnceLock<FragmentEffects> = std::sync::OnceLock::new();
        self.effects
            .as_deref()
            .unwrap_or_else(|| NONE.get_or_init(FragmentEffects::default))
    }
}

/// A fragment's place: its block and its key there.
pub(crate) type FragmentPlace = (usize, FragmentKey);

impl RenderState<'_> {
    /// Starts a template's render with the fragments of its last render; `collect` keeps
    /// this render's for its memo.
    pub(crate) fn begin_fragments(&self, before: Arc<Fragments>, collect: bool) {
        *self
            .fragments_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = before;
        *self
            .fragments
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = collect.then(HashMap::new);
    }

    /// Whether a block helper sits at the template's top level: no enclosing block or
    /// included snippet (whose values an iteration could read without it being noted).
    /// Snippets rendered in place (`render`, `with_rendered` without arguments) keep the
    /// scope they are rendered in, so a loop in one is at the top level when they are.
    pub(crate) fn at_top_level(&self, rc: &mut HbRenderContext<'_, '_>) -> bool {
        if rc.context().is_some() {
            return false;
        }
        let blocks = rc.replace_blocks(VecDeque::new());
        let top = blocks.len() == 1
            && blocks
                .front()
                .is_some_and(|block| block.base_path().is_empty() && block.base_value().is_none());
        rc.replace_blocks(blocks);
        top
    }

    pub(crate) fn fragment_place(
        &self,
        body: &Template,
        object: &CompactObject,
        (index, count): (usize, usize),
        rc: &HbRenderContext<'_, '_>,
        out: &dyn Output,
    ) -> FragmentPlace {
        let mut flags = line_state(rc);
        if self.top_offset(out).is_some() {
            flags |= INTO_TEMPLATE_OUTPUT;
        }
        if index == 0 {
            flags |= FIRST;
        }
        if index + 1 == count {
            flags |= LAST;
        }
        let key = FragmentKey {
            object: object.json().as_ptr().addr(),
            // Past u32::MAX iterations the index wraps; `@first`/`@last` and the object
            // still tell fragments apart, and a template set that reads `@index` with that
            // many objects is not one a render finishes anyway.
            index: if self.reads_index {
                index as u32
            } else {
                u32::MAX
            },
            flags,
        };
        (std::ptr::from_ref(body).addr(), key)
    }

    /// Writes the fragment at `place` again when everything it read is unchanged; false
    /// (and nothing written) when the iteration must render.
    pub(crate) fn replay_fragment(
        &self,
        (block, key): &FragmentPlace,
        object: &CompactObject,
        rc: &mut HbRenderContext<'_, '_>,
        out: &mut dyn Output,
    ) -> Result<bool, RenderError> {
        let before = Arc::clone(
            &self
                .fragments_before
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let Some(table) = before.get(block) else {
            return Ok(false);
        };
        let Some((at, fragment)) = table
            .by_key
            .get(key)
            .and_then(|at| Some((*at as usize, table.entries.get(*at as usize)?)))
            .filter(|(_, f)| CompactObject::same(&f.object, object))
        else {
            return Ok(false);
        };
        let Some(text) = (fragment.start as usize)
            .checked_add(fragment.len as usize)
            .and_then(|end| table.text.get(fragment.start as usize..end))
        else {
            return Ok(false);
        };
        let Some(reads) = self.current_reads(fragment) else {
            return Ok(false);
        };
        let effects = fragment.effects();
        if !effects.registered.is_empty() {
            let files = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if super::conflicts(&files, &effects.registered) {
                return Ok(false);
            }
        }
        if !effects.pool_calls.is_empty() {
            // Taking again is what a render would do; an answer that differs means the pool
            // moved (members freed, a Service no longer in the baseline): render it.
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            for call in &effects.pool_calls {
                let same = match call {
                    PoolCall::OwnBackend(key) => self
                        .previous_pool
                        .baseline
                        .as_ref()
                        .is_some_and(|baseline| baseline.contains(key)),
                    PoolCall::Member(member, name) => {
                        pool.take(self.previous_pool, PoolMember::clone(member))
                            .as_ref()
                            == Some(name)
                    }
                };
                if !same {
                    return Ok(false);
                }
            }
        }
        let start = self.written.load(Ordering::Relaxed);
        out.write(text)?;
        set_line_state(rc, fragment.end_flags);
        self.apply(fragment, &reads, start);
        if !self.keep_shared(*block, table, at, &reads) {
            self.keep(
                *block,
                *key,
                Fragment {
                    reads,
                    ..fragment.clone()
                },
                text,
            );
        }
        self.fragments_reused.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Notes that the fragment written was entry `at` of the last render's `table`, unchanged
    /// (`reads` are its own): true when this render's table of `block` is still that table
    /// (every fragment so far its next one), which then stays shared.
    fn keep_shared(
        &self,
        block: usize,
        table: &Arc<BlockFragments>,
        at: usize,
        reads: &FragmentReads,
    ) -> bool {
        let mut kept = self
            .fragments
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(kept) = kept.as_mut() else {
            // Nothing is kept: nothing to do.
            return true;
        };
        let unchanged = table
            .entries
            .get(at)
            .is_some_and(|fragment| Arc::ptr_eq(&fragment.reads, reads));
        let build = kept.entry(block).or_insert_with(|| BlockBuild {
            shared: Some((Arc::clone(table), 0)),
            own: BlockFragments::default(),
        });
        match &mut build.shared {
            Some((shared, matched))
                if unchanged && Arc::ptr_eq(shared, table) && *matched == at =>
            {
                *matched += 1;
                true
            }
            _ => false,
        }
    }

    /// Adds a fragment and its text to this render's table of `block`, when this render
    /// keeps fragments.
    fn keep(&self, block: usize, key: FragmentKey, mut fragment: Fragment, text: &str) {
        let mut kept = self
            .fragments
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(kept) = kept.as_mut() else {
            return;
        };
        let table: &mut BlockFragments = kept.entry(block).or_default().table_mut();
        let (Ok(start), Ok(len), Ok(at)) = (
            u32::try_from(table.text.len()),
            u32::try_from(text.len()),
            u32::try_from(table.entries.len()),
        ) else {
            // A table past 4 GiB is not kept; its iterations render next time.
            return;
        };
        fragment.start = start;
        fragment.len = len;
        table.text.push_str(text);
        table.entries.push(fragment);
        table.by_key.insert(key, at);
    }

    /// The fragment's reads as the current snapshots (the fragment's own when none moved),
    /// or `None` when one it read changed in a way that can change its text.
    fn current_reads(&self, fragment: &Fragment) -> Option<FragmentReads> {
        let mut moved = false;
        for (read, slot_only) in fragment.reads.iter() {
            let current = self.stores.get(read.name())?;
            if Arc::ptr_eq(current, read) {
                continue;
            }
            if !slot_only || !self.spans_untouched(fragment, read, current) {
                return None;
            }
            moved = true;
        }
        if !moved {
            return Some(Arc::clone(&fragment.reads));
        }
        // Only EndpointSlices under none of its `server_slots` calls moved on: the same
        // fragment, noted as reading the current snapshots.
        Some(
            fragment
                .reads
                .iter()
                .map(|(read, slot_only)| {
                    let current = self.stores.get(read.name()).unwrap_or(read);
                    (Arc::clone(current), *slot_only)
                })
                .collect(),
        )
    }

    /// Whether no object of `current` under the Services of the fragment's `server_slots`
    /// calls over this store differs from `older`: their lines would be the same.
    fn spans_untouched(
        &self,
        fragment: &Fragment,
        older: &Arc<StoreSnapshot>,
        current: &StoreSnapshot,
    ) -> bool {
        let effects = fragment.effects();
        if effects.unspliceable {
            return false;
        }
        let changed = {
            let mut cache = self
                .changes_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Arc::clone(
                cache
                    .entry(Arc::as_ptr(older).addr())
                    .or_insert_with(|| current.changed_since(older).into_iter().cloned().collect()),
            )
        };
        effects
            .spans
            .iter()
            .filter(|span| &*span.site.store == older.name())
            .all(|span| {
                let prefix = [&*span.site.namespace, &*span.site.service];
                !changed
                    .iter()
                    .any(|key: &EntryKey| key.cmp_prefix(&prefix).is_eq())
            })
    }

    /// Takes over what the fragment did besides its text, written at `start`, into this
    /// render and the template's trace.
    fn apply(&self, fragment: &Fragment, reads: &FragmentReads, start: usize) {
        let effects = fragment.effects();
        if !effects.registered.is_empty() {
            let mut files = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for file in &effects.registered {
                files
                    .entry(file.path.clone())
                    .or_insert_with(|| file.clone());
            }
        }
        if !effects.slots.is_empty() {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, entry) in &effects.slots {
                slots.insert(key.clone(), Arc::clone(entry));
            }
        }
        if !effects.pool_taken.is_empty() {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, member) in &effects.pool_taken {
                pool.taken.insert(key.clone(), member.clone());
            }
        }
        if !effects.statuses.is_empty() {
            self.statuses
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(effects.statuses.iter().cloned());
        }
        self.with_trace(|trace| {
            for (read, slot_only) in reads.iter() {
                let name = read.name();
                if !trace.reads.contains_key(name) {
                    trace.reads.insert(name.to_string(), Arc::clone(read));
                }
                let readers = if *slot_only {
                    &mut trace.slot_stores
                } else {
                    &mut trace.other_stores
                };
                if !readers.contains(name) {
                    readers.insert(name.to_string());
                }
            }
            if fragment.effects.is_none() {
                return;
            }
            for (key, outcome) in effects.outcomes.iter() {
                record_outcome(&mut trace.outcomes, key.clone(), outcome.clone());
            }
            trace
                .registered
                .extend(effects.registered.iter().map(|file| file.path.clone()));
            trace
                .slot_keys
                .extend(effects.slots.iter().map(|(key, _)| key.clone()));
            trace.statuses.extend(effects.statuses.iter().cloned());
            trace.spans.extend(effects.spans.iter().map(|span| {
                let mut span = span.clone();
                span.offset += start;
                span
            }));
            trace.unspliceable |= effects.unspliceable;
            trace.pool_taken.extend(effects.pool_taken.iter().cloned());
            trace.pool_calls.extend(effects.pool_calls.iter().cloned());
        });
    }

    /// Renders one iteration (`render`, with its block pushed) and, when this render keeps
    /// fragments, records it at `place`.
    pub(crate) fn record_fragment<'reg, 'rc>(
        &self,
        (block, key): FragmentPlace,
        object: &CompactObject,
        rc: &mut HbRenderContext<'reg, 'rc>,
        out: &mut dyn Output,
        render: impl FnOnce(&mut HbRenderContext<'reg, 'rc>, &mut dyn Output) -> Result<(), RenderError>,
    ) -> Result<(), RenderError> {
        let collect = self
            .fragments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if !collect {
            return render(rc, out);
        }
        // What the iteration adds to the template's trace is what its lists gain from here.
        let mut marks = TraceMarks::default();
        self.with_trace(|trace| {
            marks = TraceMarks::of(trace);
            trace.unspliceable = false;
            trace.pool_dependent = false;
            trace.iteration = Some(IterationTrace::default());
        });
        let start = self.written.load(Ordering::Relaxed);
        let mut recording = Recording {
            inner: out,
            text: std::mem::take(
                &mut *self
                    .recording
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            ),
        };
        recording.text.clear();
        // Helpers writing to the recording write to the template's output (when the
        // iteration writes there, not into a capture).
        let top = (key.flags & INTO_TEMPLATE_OUTPUT != 0).then(|| {
            self.top_output
                .swap(std::ptr::from_ref(&recording).addr(), Ordering::Relaxed)
        });
        let produced_before = rc.get_content_produced();
        rc.set_content_produced(false);
        let result = render(rc, &mut recording);
        if let Some(top) = top {
            self.top_output.store(top, Ordering::Relaxed);
        }
        let mut end = line_state(rc);
        if rc.get_content_produced() {
            end |= CONTENT_PRODUCED;
        }
        set_line_state(rc, end);
        if produced_before {
            rc.set_content_produced(true);
        }
        let mut fragment = None;
        self.with_trace(|trace| {
            let iteration = trace.iteration.take().unwrap_or_default();
            if result.is_ok() && !trace.pool_dependent {
                fragment = Some(self.fragment_of(trace, &marks, iteration, object, end, start));
            }
            trace.unspliceable |= marks.unspliceable;
            trace.pool_dependent |= marks.pool_dependent;
        });
        if let Some(fragment) = fragment {
            self.keep(block, key, fragment, &recording.text);
        }
        *self
            .recording
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = recording.text;
        result
    }

    /// The fragment of the iteration whose trace is `iteration` and what `trace` gained
    /// since `marks`.
    fn fragment_of(
        &self,
        trace: &TemplateTrace,
        marks: &TraceMarks,
        iteration: IterationTrace,
        object: &CompactObject,
        end_flags: u8,
        start: usize,
    ) -> Fragment {
        let reads = self.interned_reads(&iteration.reads);
        let registered: Box<[AuxFile]> = match &trace.registered[marks.registered..] {
            [] => Box::default(),
            paths => {
                let files = self
                    .registered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                paths
                    .iter()
                    .filter_map(|path| files.get(path).cloned())
                    .collect()
            }
        };
        let slots: Box<[(Arc<str>, Arc<SlotEntry>)]> = match &trace.slot_keys[marks.slot_keys..] {
            [] => Box::default(),
            keys => {
                let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
                keys.iter()
                    .filter_map(|key| slots.get(key).map(|entry| (key.clone(), Arc::clone(entry))))
                    .collect()
            }
        };
        let effects = FragmentEffects {
            outcomes: iteration.outcomes.into(),
            registered,
            slots,
            statuses: trace.statuses[marks.statuses..].into(),
            spans: trace.spans[marks.spans..]
                .iter()
                .map(|span| {
                    let mut span = span.clone();
                    span.offset -= start;
                    span
                })
                .collect(),
            unspliceable: trace.unspliceable,
            pool_calls: trace.pool_calls[marks.pool_calls..].into(),
            pool_taken: trace.pool_taken[marks.pool_taken..].into(),
        };
        Fragment {
            object: object.clone(),
            start: 0,
            len: 0,
            end_flags,
            reads,
            effects: effects.shared(),
        }
    }

    /// An iteration's reads (each store with whether `server_slots` alone read it), shared
    /// with the last fragment's when they are the same (most iterations of a loop read the
    /// same stores).
    fn interned_reads(&self, reads: &[(Arc<StoreSnapshot>, bool, bool)]) -> FragmentReads {
        let mut last = self
            .last_fragment_reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let same = last.as_ref().is_some_and(|last| {
            last.len() == reads.len()
                && last.iter().zip(reads).all(
                    |((read, slot_only), (current, by_slots, by_others))| {
                        Arc::ptr_eq(read, current) && *slot_only == (*by_slots && !*by_others)
                    },
                )
        });
        if !same {
            *last = Some(
                reads
                    .iter()
                    .map(|(read, by_slots, by_others)| (Arc::clone(read), *by_slots && !*by_others))
                    .collect(),
            );
        }
        last.clone().unwrap_or_else(|| Arc::from([]))
    }
}

/// How long the template trace's lists were when an iteration started, and its flags then.
#[derive(Default)]
struct TraceMarks {
    registered: usize,
    slot_keys: usize,
    statuses: usize,
    spans: usize,
    pool_calls: usize,
    pool_taken: usize,
    unspliceable: bool,
    pool_dependent: bool,
}

impl TraceMarks {
    fn of(trace: &TemplateTrace) -> TraceMarks {
        TraceMarks {
            registered: trace.registered.len(),
            slot_keys: trace.slot_keys.len(),
            statuses: trace.statuses.len(),
            spans: trace.spans.len(),
            pool_calls: trace.pool_calls.len(),
            pool_taken: trace.pool_taken.len(),
            unspliceable: trace.unspliceable,
            pool_dependent: trace.pool_dependent,
        }
    }
}
