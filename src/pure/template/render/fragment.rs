//! Fragments (see `memo.rs`): recording one top-level `resources`/`fetch` iteration's text
//! and side effects as it renders, and writing them again in a later render when nothing
//! the iteration read has changed.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use handlebars::{Output, RenderContext as HbRenderContext, RenderError, template::Template};

use super::RenderState;
use crate::pure::rendered::record_outcome;
use crate::pure::store::{CompactObject, EntryKey, StoreSnapshot};
use crate::pure::template::memo::{Fragment, FragmentKey, FragmentReads, Fragments, TemplateTrace};

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
            .unwrap_or_else(PoisonError::into_inner) = collect.then(Fragments::new);
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

    pub(crate) fn fragment_key(
        &self,
        body: &Template,
        object: &CompactObject,
        (index, count): (usize, usize),
        rc: &HbRenderContext<'_, '_>,
        out: &dyn Output,
    ) -> FragmentKey {
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
        FragmentKey {
            block: std::ptr::from_ref(body).addr(),
            object: object.json().as_ptr().addr(),
            index: self.reads_index.then_some(index),
            flags,
        }
    }

    /// Writes the fragment `key` again when everything it read is unchanged; false (and
    /// nothing written) when the iteration must render.
    pub(crate) fn replay_fragment(
        &self,
        key: &FragmentKey,
        object: &CompactObject,
        rc: &mut HbRenderContext<'_, '_>,
        out: &mut dyn Output,
    ) -> Result<bool, RenderError> {
        let found = self
            .fragments_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned();
        let Some(mut fragment) = found.filter(|f| CompactObject::same(&f.object, object)) else {
            return Ok(false);
        };
        let Some(reads) = self.current_reads(&fragment) else {
            return Ok(false);
        };
        if !Arc::ptr_eq(&reads, &fragment.reads) {
            // Only EndpointSlices under none of its `server_slots` calls moved on: the same
            // fragment, noted as reading the current snapshots.
            let mut refreshed = Fragment::clone(&fragment);
            refreshed.reads = reads;
            fragment = Arc::new(refreshed);
        }
        {
            let files = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let conflict = fragment.registered.iter().any(|file| {
                files
                    .get(&file.path)
                    .is_some_and(|existing| existing.content != file.content)
            });
            if conflict {
                return Ok(false);
            }
        }
        {
            // Taking again is what a render would do; an answer that differs means the pool
            // moved (a first render, members freed): render the iteration.
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            for (member, answer) in &fragment.pool_calls {
                if pool.take(self.previous_pool, member.clone()) != *answer {
                    return Ok(false);
                }
            }
        }
        let start = self.written.load(Ordering::Relaxed);
        out.write(&fragment.text)?;
        set_line_state(rc, fragment.end_flags);
        self.apply(&fragment, start);
        if let Some(kept) = self
            .fragments
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            kept.insert(*key, fragment);
        }
        self.fragments_reused.fetch_add(1, Ordering::Relaxed);
        Ok(true)
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
        fragment
            .spans
            .iter()
            .filter(|span| span.store == older.name())
            .all(|span| {
                let prefix = [span.namespace.as_str(), span.service.as_str()];
                !changed
                    .iter()
                    .any(|key: &EntryKey| key.cmp_prefix(&prefix).is_eq())
            })
            && !fragment.unspliceable
    }

    /// Takes over what the fragment did besides its text, written at `start`, into this
    /// render and the template's trace.
    fn apply(&self, fragment: &Fragment, start: usize) {
        {
            let mut files = self
                .registered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for file in &fragment.registered {
                files
                    .entry(file.path.clone())
                    .or_insert_with(|| file.clone());
            }
        }
        {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, entry) in &fragment.slots {
                slots.insert(key.clone(), Arc::clone(entry));
            }
        }
        if !fragment.pool_taken.is_empty() {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, member) in &fragment.pool_taken {
                pool.taken.insert(key.clone(), member.clone());
            }
        }
        if !fragment.statuses.is_empty() {
            self.statuses
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(fragment.statuses.iter().cloned());
        }
        self.with_trace(|trace| {
            for (read, slot_only) in fragment.reads.iter() {
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
            trace
                .registered
                .extend(fragment.registered.iter().map(|file| file.path.clone()));
            trace
                .slot_keys
                .extend(fragment.slots.iter().map(|(key, _)| key.clone()));
            for (key, outcome) in &fragment.outcomes {
                record_outcome(&mut trace.outcomes, key.clone(), outcome.clone());
            }
            trace.statuses.extend(fragment.statuses.iter().cloned());
            trace.spans.extend(fragment.spans.iter().map(|span| {
                let mut span = span.clone();
                span.offset += start;
                span
            }));
            trace.unspliceable |= fragment.unspliceable;
            trace.pool_taken.extend(fragment.pool_taken.iter().cloned());
            trace.pool_calls.extend(fragment.pool_calls.iter().cloned());
        });
    }

    /// Renders one iteration (`render`, with its block pushed) and, when this render keeps
    /// fragments, records it as the fragment `key`.
    pub(crate) fn record_fragment<'reg, 'rc>(
        &self,
        key: FragmentKey,
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
        let outer = self.take_trace();
        let start = self.written.load(Ordering::Relaxed);
        let mut recording = Recording {
            inner: out,
            text: String::new(),
        };
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
        let inner = self.take_trace();
        let fragment = (result.is_ok() && !inner.pool_dependent)
            .then(|| self.fragment_of(&inner, object, recording.text, end, start));
        self.restore_trace(outer, inner);
        result?;
        if let Some(fragment) = fragment
            && let Some(kept) = self
                .fragments
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
        {
            kept.insert(key, Arc::new(fragment));
        }
        Ok(())
    }

    fn fragment_of(
        &self,
        trace: &TemplateTrace,
        object: &CompactObject,
        text: String,
        end_flags: u8,
        start: usize,
    ) -> Fragment {
        let reads = trace
            .reads
            .iter()
            .map(|(name, read)| {
                let slot_only =
                    trace.slot_stores.contains(name) && !trace.other_stores.contains(name);
                (Arc::clone(read), slot_only)
            })
            .collect();
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
            trace
                .slot_keys
                .iter()
                .filter_map(|key| slots.get(key).map(|entry| (key.clone(), Arc::clone(entry))))
                .collect()
        };
        Fragment {
            object: object.clone(),
            text: text.into(),
            end_flags,
            reads,
            registered,
            slots,
            outcomes: trace.outcomes.clone(),
            statuses: trace.statuses.clone(),
            spans: trace
                .spans
                .iter()
                .map(|span| {
                    let mut span = span.clone();
                    span.offset -= start;
                    span
                })
                .collect(),
            unspliceable: trace.unspliceable,
            pool_calls: trace.pool_calls.clone(),
            pool_taken: trace.pool_taken.clone(),
        }
    }

    /// Puts the template's trace back, with what one iteration added to it.
    fn restore_trace(&self, mut outer: TemplateTrace, inner: TemplateTrace) {
        for (name, read) in inner.reads {
            outer.reads.entry(name).or_insert(read);
        }
        outer.registered.extend(inner.registered);
        outer.slot_keys.extend(inner.slot_keys);
        for (key, outcome) in inner.outcomes {
            record_outcome(&mut outer.outcomes, key, outcome);
        }
        outer.statuses.extend(inner.statuses);
        outer.slot_stores.extend(inner.slot_stores);
        outer.other_stores.extend(inner.other_stores);
        outer.spans.extend(inner.spans);
        outer.unspliceable |= inner.unspliceable;
        outer.pool_taken.extend(inner.pool_taken);
        outer.pool_calls.extend(inner.pool_calls);
        outer.pool_dependent |= inner.pool_dependent;
        self.with_trace(|trace| *trace = outer);
    }
}
