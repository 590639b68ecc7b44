//! Templating: compiles a configuration's templates (the `haproxy.cfg` template, maps,
//! general files, SSL certificates and named snippets) into one [`TemplateSet`] with
//! handlebars, and renders them against one snapshot of the resource stores into a
//! [`RenderedConfig`].
//!
//! Handlebars runs in strict mode (an undefined variable is an error naming the template
//! and line) and with HTML escaping switched off. Snippets are partials (`{{> name}}`); the
//! helpers are listed in `helpers.rs` (stateless) and `render.rs` (per-render:
//! `resources`, `fetch`, `get_single`, `path_for`, `register_file`, `render`,
//! `render_glob`, `with_rendered` (a snippet's text as a block parameter: a decision made
//! once and used in several places), `server_slots`, `served`/`ignored`, which record what
//! a template did with a Kubernetes object into [`RenderedConfig::outcomes`] and render
//! nothing, `condition`/`listener_kinds`/`attached_route`, which record Gateway API status
//! into [`RenderedConfig::status_records`] the same way, and the annotation helpers
//! `annotation`, `annotated` and `with_backend_annotations`, which judge values against
//! `spec.annotations` and record what they leave out).
//!
//! The context of a render holds `paths` (`base_dir`, `maps_dir`, `files_dir`,
//! `certs_dir`), the caller's extra values (e.g. `dataplane`) and the user's
//! `extraContext`, all at the top level. Store data is not in it: the store helpers
//! `resources`, `fetch` and `get_single` hand out objects (see `render.rs`).
//!
//! A template whose inputs did not change since the last successful render (the same
//! context, the same snapshot of every store it read) is not rendered again: its output,
//! the files it registered, the server slots it assigned and the outcomes it recorded are
//! reused (`memo.rs`). One that renders again writes each iteration of its top-level
//! `resources`/`fetch` loops whose object and reads are unchanged from that iteration's
//! fragment of the last render (`render/fragment.rs`).
//!
//! Notes for template authors (handlebars-rust 6 behaviour):
//! - In strict mode `{{#if a.b}}` tolerates a missing `b`, but `{{#with x}}` on null fails
//!   unless it has an `{{else}}`; `(default x "y")` and `(dig obj "a" "b")` tolerate both.
//! - Inside `#each`, names resolve against the current item only: use block parameters
//!   (`as |ing|`), `../` or `@root.` to reach outer values.
//! - Prefer block tags on lines of their own (handlebars removes such lines) over `~`:
//!   after `{{#x ~}}`, the whitespace following the next expression is dropped as well.
//! - Iterate stores with the block forms, `{{#resources "store" as |x|}}` and
//!   `{{#fetch "store" key... as |x|}}`: each iteration gets a short-lived copy of one
//!   object (the block parameter; without one, `this`; with one, `this` stays the
//!   enclosing `this`). `{{#each (resources "store")}}` works too but copies the whole
//!   store twice.
//!
//! Compile-time checks (`check.rs`) reject unknown helpers, partials naming no snippet,
//! computed partial names, `{{#*inline}}` decorators and include cycles between snippets.

mod blocks;
mod check;
mod helpers;
mod literal;
mod located;
mod memo;
pub mod pool;
mod render;
pub mod report;
pub mod slots;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use handlebars::{Context, Handlebars, RenderContext as HbRenderContext, Renderable};
use serde_json::{Map, Value};

use crate::pure::annotations::{self, AnnotationTable};
use crate::pure::config::AnnotationSettings;
use crate::pure::rendered::{AuxFile, AuxKind, PathResolver, RenderedConfig};
use crate::pure::store::StoresSnapshot;
use crate::pure::yaml_lines::YamlLines;
pub use literal::literal_lines;
use render::trace::Instrumentation;
use render::{GuardedOutput, RenderState};
pub use report::{Instrument, RenderReport};

/// The registry name of the main template.
pub const HAPROXY_CFG: &str = "haproxy.cfg";

/// Registry-name prefixes of the auxiliary templates; snippet names may not use them.
const MAP_PREFIX: &str = "maps/";
const FILE_PREFIX: &str = "files/";
const CERT_PREFIX: &str = "sslCertificates/";

/// Whether a registry name is a snippet's: not `haproxy.cfg` nor a map, file or
/// certificate template.
pub(crate) fn is_snippet_name(name: &str) -> bool {
    name != HAPROXY_CFG
        && ![MAP_PREFIX, FILE_PREFIX, CERT_PREFIX]
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Every template source of one configuration. Map keys are the names templates and
/// errors use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateSetInput {
    pub haproxy_config: String,
    pub maps: BTreeMap<String, String>,
    pub files: BTreeMap<String, String>,
    pub ssl_certificates: BTreeMap<String, String>,
    /// Partials, usable as `{{> name}}`, `{{render "name"}}` or `{{render_glob "prefix-*"}}`.
    pub snippets: BTreeMap<String, String>,
    /// The annotations the `annotation` and `annotated` helpers judge; the templates of
    /// those that act join the snippets as `annotations/<section>/<order>/<name>`.
    pub annotations: AnnotationSettings,
    /// Where the config holding these templates was read from, when it was read from a
    /// file: errors then name the file and line too ([`TemplateError::InConfig`]).
    pub source: Option<Arc<YamlLines>>,
}

/// Resource limits for one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    pub max_render_time: Duration,
    /// Total bytes across `haproxy.cfg` and every auxiliary file.
    pub max_output_bytes: usize,
}

impl Default for RenderLimits {
    fn default() -> Self {
        RenderLimits {
            max_render_time: Duration::from_secs(30),
            max_output_bytes: 64 * 1024 * 1024,
        }
    }
}

/// What a render reads besides the templates.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    pub stores: StoresSnapshot,
    pub path_resolver: PathResolver,
    /// The user's `extraContext`: an object whose keys land at the top level (or null).
    pub extra_context: Value,
    /// Controller-provided top-level values, e.g. `dataplane`.
    pub values: Map<String, Value>,
}

impl RenderContext {
    pub fn new(stores: StoresSnapshot, path_resolver: PathResolver) -> RenderContext {
        RenderContext {
            stores,
            path_resolver,
            extra_context: Value::Null,
            values: Map::new(),
        }
    }

    pub fn with_extra_context(mut self, extra_context: Value) -> RenderContext {
        self.extra_context = extra_context;
        self
    }

    pub fn with_value(mut self, key: impl Into<String>, value: Value) -> RenderContext {
        self.values.insert(key.into(), value);
        self
    }
}

/// A compile or render failure, with the template and position it happened at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template does not parse or fails a compile-time check.
    #[error("{}: {message}", at(.template, .line, .column))]
    Compile {
        template: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// Rendering failed: undefined variable, helper misuse, unknown store, ...
    #[error("{}: {message}", at(.template, .line, .column))]
    Render {
        template: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    /// The template called `fail`; `message` is the template author's text.
    #[error("{}: {message}", at(.template, .line, .column))]
    Failed {
        template: String,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    #[error("{}: the render took longer than its limit of {limit:?}", at(.template, .line, .column))]
    TimeLimit {
        template: String,
        line: Option<usize>,
        column: Option<usize>,
        limit: Duration,
    },
    #[error("template '{template}': the rendered output exceeds the limit of {limit_bytes} bytes")]
    OutputLimit {
        template: String,
        limit_bytes: usize,
    },
    /// The render context itself is unusable (bad `extraContext`).
    #[error("render context: {message}")]
    Context { message: String },
    /// Any of the others, in a template of a config read from a file: `line` is the line
    /// of `file` the template's line is at (see `located.rs`).
    #[error("{file}:{line}: {error}")]
    InConfig {
        file: String,
        line: usize,
        error: Box<TemplateError>,
    },
}

fn at(template: &str, line: &Option<usize>, column: &Option<usize>) -> String {
    let mut out = format!("template '{template}'");
    if let Some(line) = line {
        let _ = write!(out, " line {line}");
        if let Some(column) = column {
            let _ = write!(out, ", column {column}");
        }
    }
    out
}

impl TemplateError {
    /// The template the error is in (registry name: `haproxy.cfg`, `maps/<name>`,
    /// `files/<name>`, `sslCertificates/<name>` or a snippet name).
    pub fn template(&self) -> Option<&str> {
        match self {
            TemplateError::Compile { template, .. }
            | TemplateError::Render { template, .. }
            | TemplateError::Failed { template, .. }
            | TemplateError::TimeLimit { template, .. }
            | TemplateError::OutputLimit { template, .. } => Some(template),
            TemplateError::Context { .. } => None,
            TemplateError::InConfig { error, .. } => error.template(),
        }
    }

    /// The config file and its line the error is at, when the config was read from a file.
    pub fn file_line(&self) -> Option<(&str, usize)> {
        match self {
            TemplateError::InConfig { file, line, .. } => Some((file, *line)),
            _ => None,
        }
    }

    pub fn line(&self) -> Option<usize> {
        match self {
            TemplateError::Compile { line, .. }
            | TemplateError::Render { line, .. }
            | TemplateError::Failed { line, .. }
            | TemplateError::TimeLimit { line, .. } => *line,
            TemplateError::InConfig { error, .. } => error.line(),
            _ => None,
        }
    }

    pub fn column(&self) -> Option<usize> {
        match self {
            TemplateError::Compile { column, .. }
            | TemplateError::Render { column, .. }
            | TemplateError::Failed { column, .. }
            | TemplateError::TimeLimit { column, .. } => *column,
            TemplateError::InConfig { error, .. } => error.column(),
            _ => None,
        }
    }

    /// The message without the position prefix.
    pub fn message(&self) -> String {
        match self {
            TemplateError::Compile { message, .. }
            | TemplateError::Render { message, .. }
            | TemplateError::Failed { message, .. }
            | TemplateError::Context { message } => message.clone(),
            TemplateError::TimeLimit { limit, .. } => {
                format!("the render took longer than its limit of {limit:?}")
            }
            TemplateError::OutputLimit { limit_bytes, .. } => {
                format!("the rendered output exceeds the limit of {limit_bytes} bytes")
            }
            TemplateError::InConfig { error, .. } => error.message(),
        }
    }
}

/// One configuration's templates, compiled together. Cheap to share (`Send + Sync`); two
/// renders may run at the same time on different threads.
pub struct TemplateSet {
    registry: Handlebars<'static>,
    /// `(kind, name, registry name)` of every auxiliary template, in render order.
    aux: Vec<(AuxKind, String, String)>,
    snippets: Arc<[String]>,
    annotations: AnnotationTable,
    limits: RenderLimits,
    /// The last render's context; renders of one set take turns on it.
    context_cache: std::sync::Mutex<render::ContextCache>,
    /// Server slot assignments of the last successful render (`server_slots`).
    slot_memory: std::sync::Mutex<Arc<slots::SlotMemory>>,
    /// Backend pool members of the last successful render (`pool.rs`).
    pool_memory: std::sync::Mutex<Arc<pool::PoolMemory>>,
    /// Each template's memo from the last successful render.
    memos: std::sync::Mutex<Arc<memo::TemplateMemos>>,
    /// False only in tests that compare memoised renders with full ones.
    memoise: bool,
    /// Registry names of the templates the last render reused rather than rendered.
    reused: std::sync::Mutex<Vec<String>>,
    /// Registry names of the templates the last render made by replacing server lines in
    /// their last output (`RenderState::splice`).
    spliced: std::sync::Mutex<Vec<String>>,
    /// Whether a template or snippet reads `@index` (a fragment's key then holds it).
    reads_index: bool,
    /// Iterations the last render wrote from their fragments.
    fragments_reused: std::sync::atomic::AtomicUsize,
    /// The trace and profile hooks of a set compiled with [`Self::compile_instrumented`].
    instrumentation: Option<Arc<Instrumentation>>,
    /// What the last successful render of an instrumented set collected.
    report: std::sync::Mutex<Option<RenderReport>>,
    /// Where the templates are in the config file, for errors (`located.rs`).
    origins: located::Origins,
}

impl std::fmt::Debug for TemplateSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateSet")
            .field("aux", &self.aux)
            .field("snippets", &self.snippets)
            .field("limits", &self.limits)
            .finish()
    }
}

impl TemplateSet {
    /// Compiles every template with default [`RenderLimits`]. The first error is returned
    /// (order: `haproxy.cfg`, snippets, maps, files, certificates, each by name).
    pub fn compile(input: TemplateSetInput) -> Result<TemplateSet, TemplateError> {
        TemplateSet::compile_located(input, Instrument::default())
    }

    /// Compiles like [`Self::compile`], with the hooks that trace which template line
    /// wrote each output line and profile each template and snippet (`render/trace.rs`).
    /// Each render of such a set is a full one (no memo or fragment of an earlier render
    /// is reused) and leaves its [`RenderReport`] for [`Self::take_report`]. For `haptor
    /// render --trace/--profile` and `haptor bench`; the controller never instruments.
    pub fn compile_instrumented(
        input: TemplateSetInput,
        what: Instrument,
    ) -> Result<TemplateSet, TemplateError> {
        TemplateSet::compile_located(input, what)
    }

    /// Compiles, a failure naming the config file and line too when the config was read
    /// from a file; the set keeps where its templates are for its render errors.
    fn compile_located(
        input: TemplateSetInput,
        what: Instrument,
    ) -> Result<TemplateSet, TemplateError> {
        let origins = located::Origins::of(&input);
        match TemplateSet::compile_with(input, what) {
            Ok(set) => Ok(TemplateSet { origins, ..set }),
            Err(error) => Err(origins.locate(error)),
        }
    }

    fn compile_with(
        input: TemplateSetInput,
        what: Instrument,
    ) -> Result<TemplateSet, TemplateError> {
        let mut registry = Handlebars::new();
        registry.set_strict_mode(true);
        registry.register_escape_fn(handlebars::no_escape);
        helpers::register(&mut registry);

        let mut sources: Vec<(String, String)> =
            vec![(HAPROXY_CFG.to_string(), input.haproxy_config)];
        for name in input.snippets.keys() {
            check_snippet_name(name)?;
            if name.starts_with(annotations::SNIPPET_PREFIX) {
                return Err(TemplateError::Compile {
                    template: name.clone(),
                    line: None,
                    column: None,
                    message: format!(
                        "snippet names starting with '{}' are reserved for annotation templates",
                        annotations::SNIPPET_PREFIX
                    ),
                });
            }
        }
        let table = AnnotationTable::new(&input.annotations).map_err(|problems| {
            let first = problems.into_iter().next();
            TemplateError::Compile {
                template: first
                    .as_ref()
                    .map_or_else(|| "spec.annotations".into(), |p| p.field.clone()),
                line: None,
                column: None,
                message: first.map(|p| p.message).unwrap_or_default(),
            }
        })?;
        let mut all_snippets = input.snippets;
        all_snippets.extend(annotations::generated_snippets(&input.annotations));
        let snippets: Arc<[String]> = all_snippets.keys().cloned().collect();
        sources.extend(all_snippets);
        let mut aux = Vec::new();
        for (kind, prefix, templates) in [
            (AuxKind::Map, MAP_PREFIX, input.maps),
            (AuxKind::File, FILE_PREFIX, input.files),
            (AuxKind::Cert, CERT_PREFIX, input.ssl_certificates),
        ] {
            for (name, source) in templates {
                let registry_name = format!("{prefix}{name}");
                aux.push((kind, name, registry_name.clone()));
                sources.push((registry_name, source));
            }
        }
        for (name, source) in &sources {
            registry
                .register_template_string(name, source)
                .map_err(|err| compile_error(name, source, &err))?;
        }

        let snippet_names: BTreeSet<String> = snippets.iter().cloned().collect();
        let known_helpers: HashSet<&'static str> = helpers::BUILTIN_HELPERS
            .iter()
            .copied()
            .chain(helpers::names())
            .chain(render::STATEFUL_HELPERS.iter().copied())
            .collect();
        let checker = check::Checker {
            snippets: &snippet_names,
            helpers: &known_helpers,
        };
        let templates = sources.iter().filter_map(|(name, _)| {
            registry
                .get_template(name)
                .map(|template| (name.as_str(), template))
        });
        checker.check(templates)?;
        let reads_index = sources.iter().any(|(_, source)| source.contains("@index"));
        let instrumentation = if what.any() {
            let names: Vec<String> = sources.into_iter().map(|(name, _)| name).collect();
            let config_file = input.source.as_ref().map(|lines| lines.file().to_string());
            Some(Arc::new(Instrumentation::instrument(
                &mut registry,
                &names,
                what,
                config_file,
            )?))
        } else {
            None
        };

        Ok(TemplateSet {
            registry,
            aux,
            snippets,
            annotations: table,
            limits: RenderLimits::default(),
            context_cache: std::sync::Mutex::default(),
            slot_memory: std::sync::Mutex::default(),
            pool_memory: std::sync::Mutex::default(),
            memos: std::sync::Mutex::default(),
            memoise: true,
            reused: std::sync::Mutex::default(),
            spliced: std::sync::Mutex::default(),
            reads_index,
            fragments_reused: std::sync::atomic::AtomicUsize::new(0),
            instrumentation,
            report: std::sync::Mutex::default(),
            origins: located::Origins::default(),
        })
    }

    /// What the last successful render collected, when the set is instrumented
    /// ([`Self::compile_instrumented`]); taken, so a second call returns `None`.
    pub fn take_report(&self) -> Option<RenderReport> {
        self.report.lock().ok()?.take()
    }

    /// Forgets what the last renders left for the next (memos, fragments, server slot and
    /// backend pool assignments), so the next render is a first, full one: `haptor
    /// bench` times the same render every time.
    pub fn forget_last_render(&self) {
        if let Ok(mut memos) = self.memos.lock() {
            *memos = Arc::default();
        }
        if let Ok(mut slots) = self.slot_memory.lock() {
            *slots = Arc::default();
        }
        if let Ok(mut pool) = self.pool_memory.lock() {
            *pool = Arc::default();
        }
    }

    /// A set that renders every template every time (for tests comparing the two).
    #[cfg(test)]
    pub(crate) fn without_memos(mut self) -> TemplateSet {
        self.memoise = false;
        self
    }

    /// Registry names of the templates the last render made by replacing the server lines
    /// of their last output, because only EndpointSlices their `server_slots` calls read
    /// had changed.
    pub fn spliced_in_last_render(&self) -> Vec<String> {
        self.spliced.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// How many top-level `resources`/`fetch` iterations the last render wrote from their
    /// fragments (`memo.rs`) instead of rendering them.
    pub fn fragments_reused_in_last_render(&self) -> usize {
        self.fragments_reused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Registry names (`haproxy.cfg`, `maps/<name>`, …) of the templates the last render
    /// reused because nothing they read had changed.
    pub fn reused_in_last_render(&self) -> Vec<String> {
        self.reused
            .lock()
            .map(|names| names.clone())
            .unwrap_or_default()
    }

    /// Replaces the render limits.
    pub fn with_limits(mut self, limits: RenderLimits) -> TemplateSet {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> RenderLimits {
        self.limits
    }

    /// Snippet names in render order.
    pub fn snippet_names(&self) -> &[String] {
        &self.snippets
    }

    /// Renders `haproxy.cfg`, then every map, file and certificate (each kind by name),
    /// building the handlebars context once. A successful render is remembered: the next
    /// render reuses its memos and keeps its server slot assignments.
    pub fn render(&self, input: &RenderContext) -> Result<RenderedConfig, TemplateError> {
        self.render_and(input, true)
            .map_err(|error| self.origins.locate(error))
    }

    /// Renders like [`Self::render`] but remembers nothing: what-if renders (an admission
    /// check of a proposed object) use the last render's memos and server slots without
    /// moving the slots or memos the next real render starts from.
    pub fn render_trial(&self, input: &RenderContext) -> Result<RenderedConfig, TemplateError> {
        self.render_and(input, false)
            .map_err(|error| self.origins.locate(error))
    }

    fn render_and(
        &self,
        input: &RenderContext,
        remember: bool,
    ) -> Result<RenderedConfig, TemplateError> {
        // A poisoned cache is rebuilt from scratch rather than trusted.
        let mut cache = self.context_cache.lock().unwrap_or_else(|poisoned| {
            let mut guard = poisoned.into_inner();
            *guard = render::ContextCache::default();
            guard
        });
        let (context, context_generation) = cache.refresh(input)?;
        let previous_slots = self
            .slot_memory
            .lock()
            .map(|m| Arc::clone(&m))
            .unwrap_or_default();
        // An instrumented render renders every line: nothing is reused.
        let previous_memos = self
            .memos
            .lock()
            .ok()
            .filter(|_| self.instrumentation.is_none())
            .map(|m| Arc::clone(&m))
            .unwrap_or_default();
        let previous_pool = self
            .pool_memory
            .lock()
            .map(|m| Arc::clone(&m))
            .unwrap_or_default();
        let mut memos = memo::TemplateMemos::new();
        if self.instrumentation.is_some()
            && let Ok(mut report) = self.report.lock()
        {
            *report = None;
        }
        if remember && let Ok(mut reused) = self.reused.lock() {
            reused.clear();
        }
        if remember && let Ok(mut spliced) = self.spliced.lock() {
            spliced.clear();
        }
        let state = RenderState::new(
            input,
            &self.snippets,
            &self.annotations,
            self.limits.max_render_time,
            &previous_slots,
            &previous_pool,
            self.reads_index,
        )
        .traced(self.instrumentation.as_ref());
        let mut remaining = self.limits.max_output_bytes;

        let mut render = |name: &str, remaining: &mut usize| {
            self.render_memoised(
                name,
                (context, context_generation),
                &state,
                remaining,
                (&previous_memos, &mut memos),
                remember,
            )
        };
        let haproxy_cfg = render(HAPROXY_CFG, &mut remaining)?;
        let mut aux_files: BTreeMap<String, AuxFile> = BTreeMap::new();
        for (kind, name, registry_name) in &self.aux {
            let content = render(registry_name, &mut remaining)?;
            let path = input.path_resolver.path(*kind, name);
            if let Some(existing) = aux_files.get(&path) {
                return Err(TemplateError::Render {
                    template: registry_name.clone(),
                    line: None,
                    column: None,
                    message: format!(
                        "its path {path} is also the path of {} '{}'",
                        existing.kind, existing.name
                    ),
                });
            }
            aux_files.insert(
                path.clone(),
                AuxFile {
                    kind: *kind,
                    name: name.clone(),
                    path,
                    content,
                },
            );
        }
        let slots = state.take_slots();
        let pool = state.take_pool();
        let outcomes = state.take_outcomes();
        let status_records = state.take_statuses();
        let fragments_reused = state
            .fragments_reused
            .load(std::sync::atomic::Ordering::Relaxed);
        let report = state
            .take_report(|name| {
                self.aux
                    .iter()
                    .find(|(_, _, registry_name)| registry_name == name)
                    .map_or_else(
                        || name.to_string(),
                        |(kind, aux_name, _)| input.path_resolver.path(*kind, aux_name),
                    )
            })
            .map(|mut report| {
                if let Some(trace) = &mut report.trace {
                    trace.locate(|template, line| self.origins.file_line(template, Some(line)));
                }
                report
            });
        for (path, file) in state.into_registered() {
            match aux_files.get(&path) {
                Some(existing) if existing.content == file.content => {}
                Some(existing) => {
                    return Err(TemplateError::Render {
                        template: HAPROXY_CFG.to_string(),
                        line: None,
                        column: None,
                        message: format!(
                            "register_file {} '{}' has the path {path} of {} '{}' but different content",
                            file.kind, file.name, existing.kind, existing.name
                        ),
                    });
                }
                None => {
                    aux_files.insert(path, file);
                }
            }
        }
        if let (Some(report), Ok(mut kept)) = (report, self.report.lock()) {
            *kept = Some(report);
        }
        // Only a successful render's assignments and memos are remembered.
        if remember {
            self.fragments_reused
                .store(fragments_reused, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut memory) = self.slot_memory.lock() {
                *memory = Arc::new(slots);
            }
            if let Ok(mut memory) = self.pool_memory.lock() {
                *memory = Arc::new(pool.into_memory(&previous_pool));
            }
            if let Ok(mut kept) = self.memos.lock() {
                *kept = Arc::new(memos);
            }
        }
        Ok(RenderedConfig {
            haproxy_cfg,
            aux_files,
            outcomes,
            status_records,
            ..Default::default()
        })
    }

    /// Renders one template, or reuses its memo when its inputs did not change.
    fn render_memoised(
        &self,
        name: &str,
        (context, context_generation): (&Context, u64),
        state: &RenderState<'_>,
        remaining: &mut usize,
        (previous, next): (&memo::TemplateMemos, &mut memo::TemplateMemos),
        remember: bool,
    ) -> Result<String, TemplateError> {
        if let Some(memo) = previous.get(name).filter(|_| self.memoise)
            && memo.inputs_unchanged(context_generation, state.stores())
            && memo.output.len() <= *remaining
            && state.replay(memo)
        {
            *remaining -= memo.output.len();
            next.insert(name.to_string(), Arc::clone(memo));
            if remember && let Ok(mut reused) = self.reused.lock() {
                reused.push(name.to_string());
            }
            return Ok(memo.output.clone());
        }
        // A spliced output too large for the budget falls through to a render, which fails
        // on the same size.
        if let Some(memo) = previous.get(name).filter(|_| self.memoise)
            && let Some((output, spliced)) = state.splice(memo, context_generation)
            && output.len() <= *remaining
        {
            *remaining -= output.len();
            next.insert(name.to_string(), Arc::new(spliced));
            if remember && let Ok(mut reused) = self.spliced.lock() {
                reused.push(name.to_string());
            }
            return Ok(output);
        }
        state.take_trace();
        let fragments = previous
            .get(name)
            .filter(|memo| self.memoise && memo.context_generation == context_generation)
            .map(|memo| Arc::clone(&memo.fragments))
            .unwrap_or_default();
        state.begin_fragments(fragments, remember && self.memoise);
        // Room for the last output and a little more, so it is not regrown by doubling.
        let capacity = previous
            .get(name)
            .map_or(0, |memo| memo.output.len() + memo.output.len() / 16);
        let output = self.render_one(name, context, state, remaining, capacity)?;
        let memo = state.memo(state.take_trace(), context_generation, &output);
        next.insert(name.to_string(), Arc::new(memo));
        Ok(output)
    }

    fn render_one(
        &self,
        name: &str,
        context: &Context,
        state: &RenderState<'_>,
        remaining: &mut usize,
        capacity: usize,
    ) -> Result<String, TemplateError> {
        if state.expired() {
            return Err(TemplateError::TimeLimit {
                template: name.to_string(),
                line: None,
                column: None,
                limit: state.time_limit,
            });
        }
        let template = self
            .registry
            .get_template(name)
            .ok_or_else(|| TemplateError::Render {
                // Every name rendered here was registered by `compile`; this is defensive.
                template: name.to_string(),
                line: None,
                column: None,
                message: "the template is not compiled".to_string(),
            })?;
        let mut rc = HbRenderContext::new(template.name.as_ref());
        state.install(&mut rc);
        let mut output = GuardedOutput::new(state, *remaining, capacity);
        state.set_top_output(&output);
        state.trace_begin(name);
        let result = template.render(&self.registry, context, &mut rc, &mut output);
        state.trace_end(&output.text);
        if let Err(err) = result {
            return Err(render::convert_render_error(
                err,
                name,
                output.tripped,
                state,
                self.limits.max_output_bytes,
            ));
        }
        *remaining = output.remaining;
        Ok(output.text)
    }
}

fn check_snippet_name(name: &str) -> Result<(), TemplateError> {
    let reserved = name.is_empty()
        || name == HAPROXY_CFG
        || name.starts_with('@')
        || [MAP_PREFIX, FILE_PREFIX, CERT_PREFIX]
            .iter()
            .any(|prefix| name.starts_with(prefix));
    if reserved {
        return Err(TemplateError::Compile {
            template: name.to_string(),
            line: None,
            column: None,
            message: format!(
                "'{name}' cannot name a snippet: empty, '{HAPROXY_CFG}', names starting with '@' and the \
                 prefixes '{MAP_PREFIX}', '{FILE_PREFIX}', '{CERT_PREFIX}' are reserved"
            ),
        });
    }
    Ok(())
}

/// A template that does not parse, located where handlebars stopped; a block that is left
/// open or closed by the wrong tag is named instead, with where it opened (`blocks.rs`).
fn compile_error(name: &str, source: &str, err: &handlebars::TemplateError) -> TemplateError {
    use handlebars::TemplateErrorReason as Reason;
    let template = err.name().cloned().unwrap_or_else(|| name.to_string());
    let about_blocks = matches!(
        err.reason(),
        Reason::InvalidSyntax(_)
            | Reason::MismatchingClosedHelper(..)
            | Reason::MismatchingClosedDecorator(..)
    );
    if let Some(problem) = about_blocks
        .then(|| blocks::explain(source, err.pos()))
        .flatten()
    {
        let (line, column) = problem.position();
        return TemplateError::Compile {
            template,
            line: Some(line),
            column: Some(column),
            message: problem.message(),
        };
    }
    let (line, column) = match err.pos() {
        Some((line, column)) => (Some(line), Some(column)),
        None => (None, None),
    };
    TemplateError::Compile {
        template,
        line,
        column,
        message: err.reason().to_string(),
    }
}

#[cfg(test)]
mod tests;
