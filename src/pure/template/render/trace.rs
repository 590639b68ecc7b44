//! The hooks behind `haptor render --trace` and `--profile` (see `template/report.rs` for
//! what they report).
//!
//! Nothing here runs in an ordinary render: an instrumented [`TemplateSet`] is compiled
//! apart (`TemplateSet::compile_instrumented`), and only its renders carry a [`Tracer`].
//! Instrumenting rewrites the parsed templates once:
//!
//! - before every expression, block and partial it inserts a *marker*, a call of the
//!   local helper [`MARKER_HELPER`] with a number that stands for "template T, line L"; the
//!   marker writes nothing and leaves handlebars' line state (indentation, standalone
//!   lines) as it was, so the output is the very same;
//! - around every `{{> partial}}` it inserts an *enter* and a *leave* marker, so includes
//!   are seen although handlebars expands partials itself (`render`, `render_glob` and
//!   `with_rendered` call the tracer directly);
//! - text between expressions needs no marker: handlebars writes a template's text straight
//!   from the parsed template, so the address of a written segment tells which text of
//!   which template it is, and its offset there which line ([`Instrumentation::raw_at`]).
//!
//! While a template renders, every write into its output ([`super::GuardedOutput`]) is
//! attributed: an output line belongs to the place that wrote its first non-blank
//! character (the template text's own line, or the line of the last marker for what an
//! expression wrote). Captures (`with_rendered`, `sort_lines`) write elsewhere: their text
//! is attributed where it is finally written. Memos and fragments are not used by an
//! instrumented set, so every line is rendered, never replayed.
//!
//! [`TemplateSet`]: super::super::TemplateSet

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use handlebars::template::{Parameter, Template, TemplateElement, TemplateMapping};
use handlebars::{
    Context, Handlebars, Helper, HelperDef, HelperResult, Output, RenderContext as HbRenderContext,
};
use serde_json::Value;

use super::RenderState;
use crate::pure::template::TemplateError;
use crate::pure::template::check::{PARTIAL_BLOCK, unquote};
use crate::pure::template::report::{
    ConfigLines, Include, Instrument, Origin, Place, ProfileRow, RenderProfile, RenderReport,
    RenderTrace, TracedFile,
};

/// The local helper the markers call. Templates cannot call it: it is not one of the
/// helpers the compile-time check knows, and it exists only in instrumented renders.
const MARKER_HELPER: &str = "__haptor_trace";

/// Block helpers that render their body into a capture and write something made of it
/// afterwards: a marker at the end of the body brings the place back to the block's line.
const CAPTURING_BLOCKS: &[&str] = &["sort_lines"];

/// What a marker stands for.
#[derive(Debug, Clone, Copy)]
enum Marker {
    /// The next element is at this place.
    At(Place),
    /// A partial at `site` includes the snippet `snippet`.
    Enter { site: Place, snippet: u32 },
    /// The partial entered last has ended.
    Leave,
}

/// One text element of a parsed template: where its bytes are, and which lines they are.
#[derive(Debug)]
struct RawSpan {
    start: usize,
    end: usize,
    template: u32,
    /// The line of its first byte.
    first_line: u32,
    /// Offsets of its newlines.
    newlines: Box<[u32]>,
}

impl RawSpan {
    fn line_at(&self, offset: usize) -> u32 {
        let before = self.newlines.partition_point(|n| (*n as usize) < offset);
        self.first_line
            .saturating_add(u32::try_from(before).unwrap_or(u32::MAX))
    }
}

/// The compile-time half of tracing: template names, markers and the template texts'
/// addresses in the (rewritten) registry.
#[derive(Debug)]
pub(crate) struct Instrumentation {
    pub(crate) what: Instrument,
    /// The config file the templates were read from, when they were.
    config_file: Option<String>,
    names: Vec<String>,
    ids: HashMap<String, u32>,
    markers: Vec<Marker>,
    /// Sorted by address.
    raws: Vec<RawSpan>,
}

impl Instrumentation {
    /// Rewrites every template of `registry` named in `names` (see the module notes) and
    /// records where their texts are.
    pub(crate) fn instrument(
        registry: &mut Handlebars<'static>,
        names: &[String],
        what: Instrument,
        config_file: Option<String>,
    ) -> Result<Instrumentation, TemplateError> {
        let marker = marker_element()?;
        let mut instrumentation = Instrumentation {
            what,
            config_file,
            names: names.to_vec(),
            ids: names
                .iter()
                .enumerate()
                .map(|(id, name)| (name.clone(), id as u32))
                .collect(),
            markers: Vec::new(),
            raws: Vec::new(),
        };
        for (id, name) in names.iter().enumerate() {
            let Some(mut template) = registry.get_template(name).cloned() else {
                continue;
            };
            instrumentation.rewrite(&mut template, id as u32, &marker);
            registry.register_template(name, template);
        }
        // Addresses are taken from the registry's own copies, which stay where they are.
        for (id, name) in names.iter().enumerate() {
            if let Some(template) = registry.get_template(name) {
                instrumentation.collect_raws(template, id as u32);
            }
        }
        instrumentation.raws.sort_by_key(|raw| raw.start);
        Ok(instrumentation)
    }

    fn marker(&mut self, marker: Marker, element: &TemplateElement) -> TemplateElement {
        let id = self.markers.len();
        self.markers.push(marker);
        let mut element = element.clone();
        if let TemplateElement::Expression(helper) = &mut element {
            helper.params = vec![Parameter::Literal(Value::from(id))];
        }
        element
    }

    fn rewrite(&mut self, template: &mut Template, id: u32, marker: &TemplateElement) {
        let elements = std::mem::take(&mut template.elements);
        // Markers go only where every element has its position (an `{{else if}}` chain's
        // inner template has none).
        let aligned = template.mapping.len() == elements.len();
        let mapping = std::mem::take(&mut template.mapping);
        if !aligned {
            template.mapping = mapping;
            template.elements = elements;
            for element in &mut template.elements {
                self.rewrite_inner(element, id, None, marker);
            }
            return;
        }
        let mut new_elements = Vec::with_capacity(elements.len() * 2);
        let mut new_mapping = Vec::with_capacity(elements.len() * 2);
        for (mut element, position) in elements.into_iter().zip(mapping) {
            let place = Place {
                template: id,
                line: u32::try_from(position.0).unwrap_or(0),
            };
            self.rewrite_inner(&mut element, id, Some((place, &position)), marker);
            let (before, after) = match &element {
                TemplateElement::Expression(_)
                | TemplateElement::HtmlExpression(_)
                | TemplateElement::HelperBlock(_) => {
                    (self.what.trace.then_some(Marker::At(place)), None)
                }
                TemplateElement::PartialExpression(partial)
                | TemplateElement::PartialBlock(partial) => {
                    let snippet = match &partial.name {
                        Parameter::Name(name) if unquote(name) != PARTIAL_BLOCK => {
                            self.ids.get(unquote(name)).copied()
                        }
                        _ => None,
                    };
                    match snippet {
                        Some(snippet) => (
                            Some(Marker::Enter {
                                site: place,
                                snippet,
                            }),
                            Some(Marker::Leave),
                        ),
                        None => (self.what.trace.then_some(Marker::At(place)), None),
                    }
                }
                _ => (None, None),
            };
            if let Some(before) = before {
                new_elements.push(self.marker(before, marker));
                new_mapping.push(position.clone());
            }
            new_elements.push(element);
            new_mapping.push(position.clone());
            if let Some(after) = after {
                new_elements.push(self.marker(after, marker));
                new_mapping.push(position);
            }
        }
        template.elements = new_elements;
        template.mapping = new_mapping;
    }

    /// Rewrites the templates inside one element; `at` is the element's place and position.
    fn rewrite_inner(
        &mut self,
        element: &mut TemplateElement,
        id: u32,
        at: Option<(Place, &TemplateMapping)>,
        marker: &TemplateElement,
    ) {
        match element {
            TemplateElement::HelperBlock(helper) => {
                let capturing = helper
                    .name
                    .as_name()
                    .is_some_and(|name| CAPTURING_BLOCKS.contains(&name));
                for inner in [&mut helper.template, &mut helper.inverse]
                    .into_iter()
                    .flatten()
                {
                    self.rewrite(inner, id, marker);
                }
                if let (true, true, Some(body), Some((place, position))) =
                    (self.what.trace, capturing, &mut helper.template, at)
                    && body.mapping.len() == body.elements.len()
                {
                    let back = self.marker(Marker::At(place), marker);
                    body.elements.push(back);
                    body.mapping.push(position.clone());
                }
            }
            TemplateElement::PartialExpression(partial)
            | TemplateElement::PartialBlock(partial) => {
                if let Some(inner) = &mut partial.template {
                    self.rewrite(inner, id, marker);
                }
            }
            _ => {}
        }
    }

    fn collect_raws(&mut self, template: &Template, id: u32) {
        let aligned = template.mapping.len() == template.elements.len();
        for (index, element) in template.elements.iter().enumerate() {
            match element {
                TemplateElement::RawString(text) if aligned && !text.is_empty() => {
                    let line = template.mapping.get(index).map_or(0, |m| m.0);
                    self.raws.push(RawSpan {
                        start: text.as_ptr().addr(),
                        end: text.as_ptr().addr() + text.len(),
                        template: id,
                        first_line: first_line(text, line),
                        newlines: memchr::memchr_iter(b'\n', text.as_bytes())
                            .map(|at| u32::try_from(at).unwrap_or(u32::MAX))
                            .collect(),
                    });
                }
                TemplateElement::HelperBlock(helper) => {
                    for inner in [&helper.template, &helper.inverse].into_iter().flatten() {
                        self.collect_raws(inner, id);
                    }
                }
                TemplateElement::PartialExpression(partial)
                | TemplateElement::PartialBlock(partial) => {
                    if let Some(inner) = &partial.template {
                        self.collect_raws(inner, id);
                    }
                }
                _ => {}
            }
        }
    }

    /// The template text a written segment lies in, if it is one.
    fn raw_at(&self, address: usize) -> Option<&RawSpan> {
        let after = self.raws.partition_point(|raw| raw.start <= address);
        self.raws
            .get(after.checked_sub(1)?)
            .filter(|raw| address < raw.end)
    }

    pub(crate) fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

/// The line of a text element's first byte. handlebars positions a text at its first
/// non-blank character (or, when it is all blank, at the element after it), so the
/// newlines before that character are counted back.
fn first_line(text: &str, position_line: usize) -> u32 {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let bytes = text.as_bytes();
    let lead = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let newlines = memchr::memchr_iter(b'\n', &bytes[..lead]).count();
    u32::try_from(position_line.saturating_sub(newlines).max(1)).unwrap_or(u32::MAX)
}

/// A parsed marker call, `{{__haptor_trace 0}}`, to copy.
fn marker_element() -> Result<TemplateElement, TemplateError> {
    let source = format!("{{{{{MARKER_HELPER} 0}}}}");
    let compiled = Template::compile(&source).map_err(|err| TemplateError::Compile {
        template: MARKER_HELPER.to_string(),
        line: None,
        column: None,
        message: err.to_string(),
    })?;
    compiled
        .elements
        .into_iter()
        .next()
        .ok_or_else(|| TemplateError::Compile {
            template: MARKER_HELPER.to_string(),
            line: None,
            column: None,
            message: "the trace marker did not parse".to_string(),
        })
}

/// The trace of the output being written.
#[derive(Default)]
struct FileTrace {
    template: u32,
    lines: Vec<Origin>,
    /// The origin of the line being written, once known.
    pending: Option<Origin>,
    /// Whether `pending` wrote a non-blank character (it then stays).
    settled: bool,
}

/// One template or snippet call on the profile's stack.
struct Frame {
    template: u32,
    started: Instant,
    nested: Duration,
}

#[derive(Default, Clone, Copy)]
struct Stat {
    calls: u64,
    total: Duration,
    self_time: Duration,
    /// Calls under way (a snippet inside itself counts once in the total).
    active: u32,
}

/// The per-render half: what is being written where, and the time per template.
pub(crate) struct Tracer {
    instrumentation: Arc<Instrumentation>,
    started: Instant,
    place: Place,
    include: u32,
    includes: Vec<Include>,
    include_ids: HashMap<(u32, Place), u32>,
    file: Option<FileTrace>,
    files: Vec<(u32, TracedFile)>,
    registered: Vec<TracedFile>,
    frames: Vec<Frame>,
    stats: Vec<Stat>,
}

impl Tracer {
    pub(crate) fn new(instrumentation: Arc<Instrumentation>) -> Tracer {
        Tracer {
            started: Instant::now(),
            place: Place::default(),
            include: 0,
            includes: vec![Include {
                parent: 0,
                site: Place::default(),
            }],
            include_ids: HashMap::new(),
            file: None,
            files: Vec::new(),
            registered: Vec::new(),
            frames: Vec::new(),
            stats: vec![Stat::default(); instrumentation.names.len()],
            instrumentation,
        }
    }

    fn tracing(&self) -> bool {
        self.instrumentation.what.trace
    }

    /// A top-level template starts writing its output.
    pub(crate) fn begin(&mut self, template: u32) {
        self.place = Place { template, line: 0 };
        self.include = 0;
        if self.tracing() {
            self.file = Some(FileTrace {
                template,
                ..FileTrace::default()
            });
        }
        self.push_frame(template);
    }

    /// The top-level template begun last wrote `text`.
    pub(crate) fn end(&mut self, text: &str) {
        if let Some(mut file) = self.file.take() {
            if let Some(last) = file.pending.take() {
                file.lines.push(last);
            }
            self.files.push((
                file.template,
                TracedFile {
                    path: String::new(),
                    text: text.to_string(),
                    lines: file.lines,
                },
            ));
        }
        self.pop_frame();
    }

    fn marker(&mut self, id: usize) {
        match self.instrumentation.markers.get(id) {
            Some(Marker::At(place)) => self.place = *place,
            Some(Marker::Enter { site, snippet }) => {
                self.place = *site;
                self.enter(*snippet);
            }
            Some(Marker::Leave) => self.leave(),
            None => {}
        }
    }

    /// A snippet is included at the current place.
    pub(crate) fn enter(&mut self, snippet: u32) {
        if self.tracing() {
            let key = (self.include, self.place);
            let next = u32::try_from(self.includes.len()).unwrap_or(u32::MAX);
            let include = *self.include_ids.entry(key).or_insert(next);
            if include == next {
                self.includes.push(Include {
                    parent: self.include,
                    site: self.place,
                });
            }
            self.include = include;
            self.place = Place {
                template: snippet,
                line: 0,
            };
        }
        self.push_frame(snippet);
    }

    /// The snippet entered last has ended: back to where it was included.
    pub(crate) fn leave(&mut self) {
        if self.tracing()
            && self.include != 0
            && let Some(include) = self.includes.get(self.include as usize)
        {
            self.place = include.site;
            self.include = include.parent;
        }
        self.pop_frame();
    }

    fn push_frame(&mut self, template: u32) {
        if !self.instrumentation.what.profile {
            return;
        }
        if let Some(stat) = self.stats.get_mut(template as usize) {
            stat.active += 1;
        }
        self.frames.push(Frame {
            template,
            started: Instant::now(),
            nested: Duration::ZERO,
        });
    }

    fn pop_frame(&mut self) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        let spent = frame.started.elapsed();
        if let Some(stat) = self.stats.get_mut(frame.template as usize) {
            stat.calls += 1;
            stat.self_time += spent.saturating_sub(frame.nested);
            if stat.active == 1 {
                stat.total += spent;
            }
            stat.active = stat.active.saturating_sub(1);
        }
        if let Some(parent) = self.frames.last_mut() {
            parent.nested += spent;
        }
    }

    /// Attributes one segment written into the output being traced.
    fn write(&mut self, segment: &str) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let address = segment.as_ptr().addr();
        let (template, mut line, is_text) = match self.instrumentation.raw_at(address) {
            Some(raw) => (raw.template, raw.line_at(address - raw.start), true),
            None => (self.place.template, self.place.line, false),
        };
        let bytes = segment.as_bytes();
        let mut start = 0;
        loop {
            let newline = memchr::memchr(b'\n', &bytes[start..]).map(|at| start + at);
            let piece = &bytes[start..newline.unwrap_or(bytes.len())];
            let origin = Origin {
                include: self.include,
                place: Place { template, line },
            };
            if !file.settled {
                if piece.iter().any(|b| !matches!(b, b' ' | b'\t' | b'\r')) {
                    file.pending = Some(origin);
                    file.settled = true;
                } else if file.pending.is_none() && (!piece.is_empty() || newline.is_some()) {
                    file.pending = Some(origin);
                }
            }
            let Some(at) = newline else {
                break;
            };
            file.lines.push(file.pending.take().unwrap_or(origin));
            file.settled = false;
            start = at + 1;
            if is_text {
                line = line.saturating_add(1);
            }
        }
    }

    /// `register_file` added a file: each of its lines comes from the current place.
    fn registered(&mut self, path: &str, content: &str) {
        if !self.tracing() || self.registered.iter().any(|f| f.path == path) {
            return;
        }
        let origin = Origin {
            include: self.include,
            place: self.place,
        };
        self.registered.push(TracedFile {
            path: path.to_string(),
            text: content.to_string(),
            lines: vec![origin; content.lines().count()],
        });
    }

    /// The report, with the path of each top-level template's file from `path_of`.
    pub(crate) fn finish(self, path_of: impl Fn(&str) -> String) -> RenderReport {
        let names = &self.instrumentation.names;
        let what = self.instrumentation.what;
        let trace = what.trace.then(|| {
            let mut files: Vec<TracedFile> = self
                .files
                .into_iter()
                .map(|(template, mut file)| {
                    file.path = path_of(names.get(template as usize).map_or("?", String::as_str));
                    file
                })
                .collect();
            for file in self.registered {
                if !files.iter().any(|f| f.path == file.path) {
                    files.push(file);
                }
            }
            RenderTrace {
                templates: names.clone(),
                includes: self.includes,
                files,
                config: self
                    .instrumentation
                    .config_file
                    .clone()
                    .map(|file| ConfigLines {
                        file,
                        lines: HashMap::new(),
                    }),
            }
        });
        let profile = what.profile.then(|| {
            let mut profile = RenderProfile {
                rows: names
                    .iter()
                    .zip(&self.stats)
                    .filter(|(_, stat)| stat.calls > 0)
                    .map(|(name, stat)| ProfileRow {
                        template: name.clone(),
                        calls: stat.calls,
                        total: stat.total,
                        self_time: stat.self_time,
                    })
                    .collect(),
                render_time: self.started.elapsed(),
            };
            profile.sort();
            profile
        });
        RenderReport { trace, profile }
    }
}

/// Locks a tracer whatever a panicking holder left (a trace is a report, not a decision).
fn lock(tracer: &Mutex<Tracer>) -> std::sync::MutexGuard<'_, Tracer> {
    tracer.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes every write into a traced output (called by [`super::GuardedOutput`]).
pub(crate) fn note_write(tracer: &Mutex<Tracer>, segment: &str) {
    lock(tracer).write(segment);
}

impl RenderState<'_> {
    /// Gives this render a tracer (an instrumented set's renders).
    pub(crate) fn traced(mut self, instrumentation: Option<&Arc<Instrumentation>>) -> Self {
        self.tracer = instrumentation.map(|i| Mutex::new(Tracer::new(Arc::clone(i))));
        self
    }

    /// The tracer of the output being written, when lines are traced.
    pub(crate) fn line_tracer(&self) -> Option<&Mutex<Tracer>> {
        self.tracer.as_ref().filter(|tracer| lock(tracer).tracing())
    }

    /// A top-level template starts rendering.
    #[inline]
    pub(crate) fn trace_begin(&self, name: &str) {
        if let Some(tracer) = &self.tracer {
            let mut tracer = lock(tracer);
            if let Some(id) = tracer.instrumentation.id(name) {
                tracer.begin(id);
            }
        }
    }

    /// The top-level template begun last wrote `text`.
    #[inline]
    pub(crate) fn trace_end(&self, text: &str) {
        if let Some(tracer) = &self.tracer {
            lock(tracer).end(text);
        }
    }

    /// `render`, `render_glob` or `with_rendered` starts rendering `snippet`; true when
    /// [`Self::trace_leave`] must follow.
    #[inline]
    pub(crate) fn trace_enter(&self, snippet: &str) -> bool {
        let Some(tracer) = &self.tracer else {
            return false;
        };
        let mut tracer = lock(tracer);
        match tracer.instrumentation.id(snippet) {
            Some(id) => {
                tracer.enter(id);
                true
            }
            None => false,
        }
    }

    #[inline]
    pub(crate) fn trace_leave(&self) {
        if let Some(tracer) = &self.tracer {
            lock(tracer).leave();
        }
    }

    /// `register_file` added a file.
    #[inline]
    pub(crate) fn trace_registered(&self, path: &str, content: &str) {
        if let Some(tracer) = &self.tracer {
            lock(tracer).registered(path, content);
        }
    }

    /// Registers the marker helper on a template's render context when tracing.
    pub(crate) fn install_trace<'reg: 'rc, 'rc>(&'rc self, rc: &mut HbRenderContext<'reg, 'rc>) {
        if self.tracer.is_some() {
            rc.register_local_helper(MARKER_HELPER, Box::new(TraceMarker { state: self }));
        }
    }

    /// The report of this render, when it was traced or profiled.
    pub(crate) fn take_report(&self, path_of: impl Fn(&str) -> String) -> Option<RenderReport> {
        let mut guard = lock(self.tracer.as_ref()?);
        let fresh = Tracer::new(Arc::clone(&guard.instrumentation));
        let tracer = std::mem::replace(&mut *guard, fresh);
        drop(guard);
        Some(tracer.finish(path_of))
    }
}

/// `{{__haptor_trace N}}`: notes marker N; writes nothing.
struct TraceMarker<'s> {
    state: &'s RenderState<'s>,
}

impl HelperDef for TraceMarker<'_> {
    fn call<'reg: 'rc, 'rc>(
        &self,
        helper: &Helper<'rc>,
        _: &'reg Handlebars<'reg>,
        _: &'rc Context,
        _: &mut HbRenderContext<'reg, 'rc>,
        _: &mut dyn Output,
    ) -> HelperResult {
        if let (Some(tracer), Some(id)) = (
            &self.state.tracer,
            helper.param(0).and_then(|p| p.value().as_u64()),
        ) {
            lock(tracer).marker(usize::try_from(id).unwrap_or(usize::MAX));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::first_line;
    use crate::pure::rendered::{PathResolver, RenderedConfig};
    use crate::pure::store::StoresSnapshot;
    use crate::pure::template::report::Site;
    use crate::pure::template::{
        Instrument, RenderContext, RenderReport, TemplateSet, TemplateSetInput,
    };

    const BOTH: Instrument = Instrument {
        trace: true,
        profile: true,
    };

    fn services() -> StoresSnapshot {
        let snapshot = crate::pure::store::StoreSnapshot::from_objects(
            "services",
            vec!["metadata.namespace".into(), "metadata.name".into()],
            vec![
                json!({"metadata": {"namespace": "shop", "name": "web"}}),
                json!({"metadata": {"namespace": "shop", "name": "api"}}),
            ],
        )
        .expect("a snapshot");
        let mut stores = StoresSnapshot::new();
        stores.insert(std::sync::Arc::new(snapshot));
        stores
    }

    fn input(haproxy_config: &str, snippets: &[(&str, &str)]) -> TemplateSetInput {
        TemplateSetInput {
            haproxy_config: haproxy_config.to_string(),
            snippets: snippets
                .iter()
                .map(|(name, text)| (name.to_string(), text.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn context() -> RenderContext {
        RenderContext::new(services(), PathResolver::default())
            .with_extra_context(json!({"maxconn": 10, "tune": true, "rows": "a 1\nb 2\n"}))
    }

    fn render(input: TemplateSetInput, what: Instrument) -> (RenderedConfig, RenderReport) {
        let set = TemplateSet::compile_instrumented(input, what).expect("compiles");
        let rendered = set.render(&context()).expect("renders");
        let report = set.take_report().expect("an instrumented render reports");
        (rendered, report)
    }

    /// The origin of the first line of `path` that is `text`, as `template:line` steps.
    fn origin(report: &RenderReport, path: &str, text: &str) -> Vec<String> {
        let trace = report.trace.as_ref().expect("a trace");
        let file = trace
            .files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("no traced file {path}"));
        let number = file
            .text
            .lines()
            .position(|line| line == text)
            .unwrap_or_else(|| panic!("no line {text:?} in {}", file.text))
            + 1;
        trace
            .origin_of(path, number)
            .expect("an origin")
            .into_iter()
            .map(|Site { template, line, .. }| format!("{template}:{line}"))
            .collect()
    }

    const CONFIG: &str = "global\n  maxconn {{maxconn}}\n{{#if tune}}\n  tune.bufsize 1\n{{/if}}\n\
        {{#resources \"services\" as |svc|}}\nbackend {{svc.metadata.name}}\n  {{> servers}}\n\
        {{/resources}}\n{{render \"tail\"}}\n{{#with_rendered \"decide\" as |verdict|}}\n\
        decision {{verdict}}\n{{/with_rendered}}\n{{{maxconn}}}\n";
    const SERVERS: &str =
        "server a 1.1.1.1:80\n{{#if @root.tune}}\nserver b {{@root.maxconn}}\n{{/if}}\n";

    fn snippets() -> Vec<(&'static str, &'static str)> {
        vec![
            ("servers", SERVERS),
            ("tail", "# end\n"),
            ("decide", "{{#if tune}}tuned{{/if}}"),
        ]
    }

    #[test]
    fn a_trace_names_the_template_line_and_the_includes_that_wrote_each_line() {
        let (rendered, report) = render(input(CONFIG, &snippets()), BOTH);
        assert_eq!(
            rendered.haproxy_cfg,
            "global\n  maxconn 10\n  tune.bufsize 1\nbackend api\n  server a 1.1.1.1:80\n  \
             server b 10\nbackend web\n  server a 1.1.1.1:80\n  server b 10\n# end\n\n\
             decision tuned\n10\n"
        );
        let cfg = |text| origin(&report, "haproxy.cfg", text);
        assert_eq!(cfg("global"), ["haproxy.cfg:1"]);
        assert_eq!(cfg("  maxconn 10"), ["haproxy.cfg:2"]);
        assert_eq!(cfg("  tune.bufsize 1"), ["haproxy.cfg:4"]);
        assert_eq!(cfg("backend api"), ["haproxy.cfg:7"]);
        assert_eq!(cfg("  server a 1.1.1.1:80"), ["haproxy.cfg:8", "servers:1"]);
        assert_eq!(cfg("  server b 10"), ["haproxy.cfg:8", "servers:3"]);
        assert_eq!(cfg("# end"), ["haproxy.cfg:10", "tail:1"]);
        assert_eq!(cfg("decision tuned"), ["haproxy.cfg:12"]);
        assert_eq!(cfg("10"), ["haproxy.cfg:14"]);
        let trace = report.trace.as_ref().expect("a trace");
        assert_eq!(trace.files[0].lines.len(), 13, "one origin per line");
    }

    #[test]
    fn a_profile_counts_the_calls_of_each_template_and_snippet() {
        let (_, report) = render(input(CONFIG, &snippets()), BOTH);
        let profile = report.profile.expect("a profile");
        let calls: BTreeMap<&str, u64> = profile
            .rows
            .iter()
            .map(|row| (row.template.as_str(), row.calls))
            .collect();
        assert_eq!(
            calls,
            BTreeMap::from([
                ("haproxy.cfg", 1),
                ("servers", 2),
                ("tail", 1),
                ("decide", 1)
            ])
        );
        let cfg = profile
            .rows
            .iter()
            .find(|row| row.template == "haproxy.cfg")
            .expect("haproxy.cfg");
        assert!(cfg.total >= cfg.self_time);
        assert!(profile.render_time >= cfg.total);
        let snippets: std::time::Duration = profile
            .rows
            .iter()
            .filter(|row| row.is_snippet())
            .map(|row| row.total)
            .sum();
        assert!(
            cfg.total >= snippets,
            "the snippets' time is inside the template's"
        );
    }

    #[test]
    fn a_profile_alone_or_a_trace_alone_collects_only_itself() {
        let (_, report) = render(
            input(CONFIG, &snippets()),
            Instrument {
                trace: false,
                profile: true,
            },
        );
        assert!(report.trace.is_none());
        assert_eq!(report.profile.expect("a profile").rows.len(), 4);
        let (_, report) = render(
            input(CONFIG, &snippets()),
            Instrument {
                trace: true,
                profile: false,
            },
        );
        assert!(report.profile.is_none());
        assert_eq!(
            origin(&report, "haproxy.cfg", "# end"),
            ["haproxy.cfg:10", "tail:1"]
        );
    }

    #[test]
    fn instrumented_renders_write_exactly_what_plain_renders_write() {
        let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
            (CONFIG, snippets()),
            (
                "a {{~#if tune~}} b {{~/if~}} c\n{{#if nope}}x{{else if tune}}y\n{{else}}z{{/if}}\n",
                vec![],
            ),
            (
                "x\n    {{> inner}}\n  {{> inner}} tail\n{{#each (resources \"services\")}}{{> inner}}{{/each}}",
                vec![("inner", "one\n  {{> deeper}}\ntwo\n"), ("deeper", "d\n")],
            ),
            (
                "{{#sort_lines}}\nb\tsecond\na\tfirst\n{{/sort_lines}}\n{{register_file \"map\" \"m\" rows}}\n",
                vec![],
            ),
            (
                "{{> part name=\"n\"}}\n{{render_glob \"pl*\"}}",
                vec![("part", "[{{name}}]\n"), ("pl", "glob\n"), ("pla", "in\n")],
            ),
        ];
        for (config, snippets) in cases {
            let plain = TemplateSet::compile(input(config, &snippets))
                .expect("compiles")
                .render(&context())
                .expect("renders");
            let (traced, report) = render(input(config, &snippets), BOTH);
            assert_eq!(traced.haproxy_cfg, plain.haproxy_cfg, "{config}");
            assert_eq!(traced.aux_files, plain.aux_files, "{config}");
            let trace = report.trace.expect("a trace");
            assert_eq!(trace.files[0].text, plain.haproxy_cfg);
            assert_eq!(
                trace.files[0].lines.len(),
                plain.haproxy_cfg.lines().count(),
                "{config}"
            );
        }
    }

    #[test]
    fn sorted_lines_come_from_the_sort_lines_block_and_registered_files_from_their_call() {
        let config = "x\n{{#sort_lines}}\nb\tsecond\na\tfirst\n{{/sort_lines}}\n\
            use {{register_file \"map\" \"hosts.map\" rows}}\n";
        let (rendered, report) = render(input(config, &[]), BOTH);
        assert_eq!(
            rendered.haproxy_cfg,
            "x\nfirst\nsecond\nuse maps/hosts.map\n"
        );
        assert_eq!(origin(&report, "haproxy.cfg", "first"), ["haproxy.cfg:2"]);
        assert_eq!(origin(&report, "maps/hosts.map", "b 2"), ["haproxy.cfg:6"]);
    }

    #[test]
    fn auxiliary_templates_are_traced_under_their_file_path() {
        let mut input = input("global\n", &[("row", "{{metadata.name}} 1\n")]);
        input.maps = BTreeMap::from([(
            "hosts.map".to_string(),
            "# hosts\n{{#resources \"services\"}}{{> row}}{{/resources}}".to_string(),
        )]);
        let (rendered, report) = render(input, BOTH);
        assert!(rendered.aux_files.contains_key("maps/hosts.map"));
        assert_eq!(
            origin(&report, "maps/hosts.map", "# hosts"),
            ["maps/hosts.map:1"]
        );
        assert_eq!(
            origin(&report, "maps/hosts.map", "api 1"),
            ["maps/hosts.map:2", "row:1"]
        );
    }

    #[test]
    fn an_instrumented_set_renders_every_line_again_rather_than_reusing_memos() {
        let set =
            TemplateSet::compile_instrumented(input(CONFIG, &snippets()), BOTH).expect("compiles");
        for _ in 0..2 {
            set.render(&context()).expect("renders");
            let report = set.take_report().expect("a report");
            assert_eq!(report.trace.expect("a trace").files[0].lines.len(), 13);
            assert!(set.reused_in_last_render().is_empty());
        }
        assert!(set.take_report().is_none(), "taken");
    }

    #[test]
    fn a_template_texts_first_line_counts_back_the_blank_lines_before_its_position() {
        // handlebars places a text at its first non-blank character ...
        assert_eq!(first_line("\n  maxconn 4096\n", 3), 2);
        assert_eq!(first_line("global\n", 1), 1);
        // ... or, when it is all blank, at the element after it.
        assert_eq!(first_line("\n", 7), 6);
        assert_eq!(first_line("  ", 12), 12);
    }

    #[test]
    fn the_ingress_library_renders_the_same_instrumented_and_every_line_has_a_template_line() {
        let library = crate::pure::config::config_from_yaml(
            "deploy/library/ingress.yaml",
            include_str!("../../../../deploy/library/ingress.yaml"),
        )
        .expect("the library parses");
        let plain =
            crate::pure::pipeline::CompiledConfig::compile(library.spec.clone()).expect("compiles");
        let mut traced =
            crate::pure::pipeline::CompiledConfig::compile(library.spec.clone()).expect("compiles");
        traced.instrument(BOTH).expect("instruments");
        let stores = plain.new_stores().expect("stores");
        crate::pure::fixtures::load_apps(&stores, 12, "haptor", 2).expect("applies");
        let version = crate::pure::haproxy::HaproxyVersion::DEFAULT;
        let a = plain
            .render(stores.snapshot(), None, version)
            .expect("renders");
        let b = traced
            .render(stores.snapshot(), None, version)
            .expect("renders");
        assert_eq!(a.haproxy_cfg, b.haproxy_cfg);
        assert_eq!(a.aux_files, b.aux_files);
        let report = traced.templates.take_report().expect("a report");
        let trace = report.trace.expect("a trace");
        let cfg = &trace.files[0];
        assert_eq!(cfg.path, "haproxy.cfg");
        for number in 1..=cfg.lines.len() {
            let chain = trace.origin_of("haproxy.cfg", number).expect("an origin");
            assert!(
                chain.iter().all(|site| site.line > 0),
                "line {number} has an unknown template line: {chain:?}"
            );
        }
        // A server line comes from the `server_slots` call's line.
        let server = cfg
            .text
            .lines()
            .position(|line| line.trim_start().starts_with("server SRV_1 "))
            .expect("a server line");
        let chain = trace.origin_of("haproxy.cfg", server + 1).expect("origin");
        let writer = chain.last().expect("a writer");
        let source = if writer.template == "haproxy.cfg" {
            &library.spec.haproxy_config.template
        } else {
            &library.spec.template_snippets[writer.template].template
        };
        let written_by = source.lines().nth(writer.line as usize - 1).unwrap_or("");
        assert!(
            written_by.contains("server_slots"),
            "{chain:?}: {written_by}"
        );
        // The routes map's lines are written by a snippet the map template includes.
        let routes = trace.origin_of("maps/routes.map", 1).expect("a route");
        assert_eq!(routes.len(), 2, "{routes:?}");
        assert_eq!(routes[0].template, "maps/routes.map");
        for file in b.aux_files.keys() {
            assert!(
                trace.files.iter().any(|f| &f.path == file),
                "{file} is traced"
            );
        }
        let profile = report.profile.expect("a profile");
        assert!(
            profile
                .rows
                .iter()
                .any(|row| row.is_snippet() && row.calls >= 12)
        );
    }
}
