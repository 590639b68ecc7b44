//! The render-and-validate pipeline: everything between "a set of Kubernetes objects plus one
//! `HAProxyTemplateConfig`" and "a validated `haproxy.cfg` with its auxiliary files".
//!
//! [`CompiledConfig`] is built once per config (structural check, templates compiled, index
//! paths and selectors compiled, post-processors compiled) and renders any number of store
//! snapshots. [`Validator`] runs the three phases — haptor's parser (syntax), the schema
//! check, `haproxy -c` (semantic) — with a cache in front, so identical renders skip every
//! phase. The Coordinator actor, `haptor render` and `haptor validate` all go through here.
//!
//! Directives that run code when HAProxy reads or checks a configuration (`lua-load`,
//! external checks, `program`, `setenv`, OpenSSL engines and providers, ...) are refused in
//! the schema phase unless the config's own templates wrote their line literally, so that
//! `haproxy -c` never runs code a watched object smuggled into a render (ingress-nginx's
//! `nginx -t` on user input became CVE-2025-1974). [`CompiledConfig::compile`] collects the
//! literal lines once: the lines of the `haproxy.cfg` template and of every snippet that no
//! `{{ }}` expression touches ([`crate::pure::template::literal_lines`]; maps, files and
//! certificates are not `haproxy.cfg`). Every render carries them
//! ([`RenderedConfig::trusted_lines`]), outside its checksum but inside the validation
//! cache key, so a success cached under one config cannot vouch for a render under another.
//! A code-running directive whose whole line (trimmed, spacing collapsed) is not one of them
//! — built by an expression, or injected by an object value holding a newline — is a schema
//! problem at its line, and the semantic phase does not run. The rule itself is
//! [`crate::pure::haproxy::guard`]'s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::pure::checksum::FileDigests;
use crate::pure::config::{
    ConfigTimings, HAProxyTemplateConfigSpec, PostProcessor, SpecProblem, validated_timings,
};
use crate::pure::haproxy::{
    self, HaproxyVersion, TrustedLines, check_code_running, check_schema_for, parse_config,
};
use crate::pure::http_resources::{HttpResource, declared_object, store_name};
use crate::pure::rendered::{Checksum, PathResolver, RenderedConfig};
use crate::pure::selector::{LabelSelector, NamespaceLabels, SelectorError};
use crate::pure::store::{FieldPath, ResourceStore, StoreError, Stores, StoresSnapshot};
use crate::pure::template::{
    Instrument, RenderContext, RenderLimits, TemplateError, TemplateSet, TemplateSetInput,
    literal_lines,
};
use crate::pure::validate::cache::ValidationCache;
use crate::pure::validate::semantic::{CheckReport, SemanticCheck, SemanticCheckError};
use crate::pure::validate::{ConfigProblem, ValidationError, ValidationPhase};

/// Why a config cannot be used at all (before any render).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("the config has {} structural problem(s): {}", .0.len(), join_problems(.0))]
    Structure(Vec<SpecProblem>),
    #[error("{0}")]
    Template(#[from] TemplateError),
    #[error("spec.watchedResources.{resource}: {error}")]
    Store { resource: String, error: StoreError },
    #[error("{path}: {message}")]
    PostProcessor { path: String, message: String },
    #[error("spec.watchedResources.{resource}.fieldSelector: {message}")]
    FieldSelector { resource: String, message: String },
    /// `field` is `labelSelector` or `namespaceSelector`.
    #[error("spec.watchedResources.{resource}.{field}: {error}")]
    LabelSelector {
        resource: String,
        field: &'static str,
        error: SelectorError,
    },
}

fn join_problems(problems: &[SpecProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why one render+validate did not produce a deployable configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PipelineError {
    #[error("render failed: {0}")]
    Render(#[from] TemplateError),
    #[error("{0}")]
    Invalid(#[from] ValidationError),
    /// `haproxy -c` could not run (missing binary, timeout, I/O); says nothing about the config.
    #[error("the semantic check could not run: {0}")]
    CheckUnavailable(String),
}

/// A client-side field selector, `path=value`, `path==value` or `path!=value`.
#[derive(Debug, Clone)]
struct FieldSelector {
    path: FieldPath,
    value: String,
    negated: bool,
}

impl FieldSelector {
    fn parse(text: &str) -> Result<FieldSelector, String> {
        let (path, value, negated) = if let Some((p, v)) = text.split_once("!=") {
            (p, v, true)
        } else if let Some((p, v)) = text.split_once("==") {
            (p, v, false)
        } else if let Some((p, v)) = text.split_once('=') {
            (p, v, false)
        } else {
            return Err(format!(
                "'{text}' must have the form path=value or path!=value"
            ));
        };
        let path = FieldPath::parse(path.trim()).map_err(|e| e.to_string())?;
        Ok(FieldSelector {
            path,
            value: value.trim().to_string(),
            negated,
        })
    }

    fn matches(&self, object: &Value) -> bool {
        let actual = match self.path.first(object) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        (actual == self.value) != self.negated
    }
}

/// The compiled selectors of one watched resource.
#[derive(Debug, Clone, Default)]
struct ResourceSelectors {
    field: Option<FieldSelector>,
    labels: Option<LabelSelector>,
    namespaces: Option<LabelSelector>,
}

impl ResourceSelectors {
    fn compile(
        name: &str,
        watched: &crate::pure::config::WatchedResource,
    ) -> Result<ResourceSelectors, ConfigError> {
        let field =
            match watched
                .field_selector
                .as_deref()
                .filter(|s| !s.trim().is_empty())
            {
                Some(text) => Some(FieldSelector::parse(text).map_err(|message| {
                    ConfigError::FieldSelector {
                        resource: name.to_string(),
                        message,
                    }
                })?),
                None => None,
            };
        let label = |field: &'static str, text: Option<&str>| {
            LabelSelector::parse_optional(text).map_err(|error| ConfigError::LabelSelector {
                resource: name.to_string(),
                field,
                error,
            })
        };
        Ok(ResourceSelectors {
            field,
            labels: label("labelSelector", watched.label_selector.as_deref())?,
            namespaces: label("namespaceSelector", watched.namespace_selector.as_deref())?,
        })
    }

    fn is_empty(&self) -> bool {
        self.field.is_none() && self.labels.is_none() && self.namespaces.is_none()
    }
}

/// A compiled regex post-processor for one template target.
#[derive(Debug, Clone)]
struct CompiledPostProcessor {
    regex: regex::Regex,
    replace: String,
}

/// A config ready to render: validated structure, compiled templates, compiled index paths.
#[derive(Debug)]
pub struct CompiledConfig {
    pub spec: Arc<HAProxyTemplateConfigSpec>,
    pub templates: TemplateSet,
    pub path_resolver: PathResolver,
    /// Field, label and namespace selectors by watched resource (only those with any).
    selectors: BTreeMap<String, ResourceSelectors>,
    /// Post-processors by target: `haproxy.cfg` or the relative path of an auxiliary file's
    /// template (`maps/NAME`, `files/NAME`, `sslCertificates/NAME`).
    post_processors: BTreeMap<String, Vec<CompiledPostProcessor>>,
    /// The literal lines of the `haproxy.cfg` template and the snippets, which every render
    /// carries (the only lines a code-running directive is accepted on).
    trusted_lines: TrustedLines,
    /// The spec's durations, parsed once when it was validated: every actor reads its
    /// deployment timeout, pacing and drift intervals, debounce and render timeout here.
    pub timings: ConfigTimings,
    /// The HTTP resources the templates read (`spec.httpResources`), parsed once.
    pub http_resources: Vec<HttpResource>,
}

impl CompiledConfig {
    /// Checks and compiles a config. Fails with every structural problem, or the first
    /// template that does not compile.
    pub fn compile(spec: HAProxyTemplateConfigSpec) -> Result<CompiledConfig, ConfigError> {
        let timings = validated_timings(&spec).map_err(ConfigError::Structure)?;
        let http_resources = HttpResource::from_spec(&spec).map_err(ConfigError::Structure)?;
        let templates = TemplateSet::compile(template_input(&spec))?
            .with_limits(render_limits(&spec, &timings));
        // Index paths compile here so a bad path is a config error, not a watcher failure.
        build_stores(&spec)?;
        let mut selectors = BTreeMap::new();
        for (name, watched) in &spec.watched_resources {
            let compiled = ResourceSelectors::compile(name, watched)?;
            if !compiled.is_empty() {
                selectors.insert(name.clone(), compiled);
            }
        }
        let mut post_processors = BTreeMap::new();
        let targets = std::iter::once((
            "haproxy.cfg".to_string(),
            "spec.haproxyConfig".to_string(),
            &spec.haproxy_config.post_processing,
        ))
        .chain(spec.maps.iter().map(|(n, f)| {
            (
                format!("maps/{n}"),
                format!("spec.maps.{n}"),
                &f.post_processing,
            )
        }))
        .chain(spec.files.iter().map(|(n, f)| {
            (
                format!("files/{n}"),
                format!("spec.files.{n}"),
                &f.post_processing,
            )
        }))
        .chain(spec.ssl_certificates.iter().map(|(n, f)| {
            (
                format!("sslCertificates/{n}"),
                format!("spec.sslCertificates.{n}"),
                &f.post_processing,
            )
        }));
        for (target, field, list) in targets {
            let mut compiled = Vec::new();
            for (i, post) in list.iter().enumerate() {
                let PostProcessor::RegexReplace { pattern, replace } = post;
                let regex = regex::RegexBuilder::new(pattern)
                    .multi_line(true)
                    .build()
                    .map_err(|e| ConfigError::PostProcessor {
                        path: format!("{field}.postProcessing[{i}].pattern"),
                        message: e.to_string(),
                    })?;
                compiled.push(CompiledPostProcessor {
                    regex,
                    replace: replace.clone(),
                });
            }
            if !compiled.is_empty() {
                post_processors.insert(target, compiled);
            }
        }
        let path_resolver = spec.dataplane.path_resolver();
        let trusted_lines = trusted_lines(&spec);
        Ok(CompiledConfig {
            spec: Arc::new(spec),
            templates,
            path_resolver,
            selectors,
            post_processors,
            trusted_lines,
            timings,
            http_resources,
        })
    }

    /// Compiles the templates again with trace and profile hooks
    /// ([`TemplateSet::compile_instrumented`]), keeping the render limits: for `haptor
    /// render --trace/--profile` and `haptor bench`, never the controller.
    pub fn instrument(&mut self, what: Instrument) -> Result<(), TemplateError> {
        let limits = self.templates.limits();
        self.templates = TemplateSet::compile_instrumented(template_input(&self.spec), what)?
            .with_limits(limits);
        Ok(())
    }

    /// The lines this config's templates write literally (see the [module](self) docs).
    pub fn trusted_lines(&self) -> &TrustedLines {
        &self.trusted_lines
    }

    /// The store names of the critical HTTP resources: the first render waits for them as
    /// for a watched resource's initial list.
    pub fn critical_http_stores(&self) -> impl Iterator<Item = String> + '_ {
        self.http_resources
            .iter()
            .filter(|r| r.critical && r.is_on())
            .map(|r| store_name(&r.name))
    }

    /// Empty stores for every watched resource.
    pub fn new_stores(&self) -> Result<Stores, ConfigError> {
        build_stores(&self.spec)
    }

    /// The watched resources (by name) that hold objects of this apiVersion and kind (a
    /// kind may be watched several times, with different selectors).
    pub fn watched_resources_for<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.spec
            .watched_resources
            .iter()
            .filter(move |(_, w)| w.api_version == api_version && w.kind_name() == kind)
            .map(|(name, _)| name.as_str())
    }

    /// Whether `resource` has a field selector.
    pub fn has_field_selector(&self, resource: &str) -> bool {
        self.selectors
            .get(resource)
            .is_some_and(|s| s.field.is_some())
    }

    /// Whether `resource` has a field or label selector (only then does [`Self::selects`]
    /// read the object).
    pub fn has_object_selector(&self, resource: &str) -> bool {
        self.selectors
            .get(resource)
            .is_some_and(|s| s.field.is_some() || s.labels.is_some())
    }

    /// Whether an object passes the watched resource's field selector and label selector
    /// (its `metadata.labels`). The namespace selector needs the namespaces' labels: see
    /// [`Self::admits`].
    pub fn selects(&self, resource: &str, object: &Value) -> bool {
        self.selectors.get(resource).is_none_or(|s| {
            s.field.as_ref().is_none_or(|f| f.matches(object))
                && s.labels.as_ref().is_none_or(|l| l.matches_object(object))
        })
    }

    /// The watched resource's namespace selector, if it has one.
    pub fn namespace_selector(&self, resource: &str) -> Option<&LabelSelector> {
        self.selectors.get(resource)?.namespaces.as_ref()
    }

    /// Whether an object passes every selector of the watched resource: field, label and
    /// namespace (judged by `namespaces`; cluster-scoped objects pass it).
    pub fn admits(&self, resource: &str, object: &Value, namespaces: &NamespaceLabels) -> bool {
        self.selects(resource, object)
            && namespaces.admits_object(self.namespace_selector(resource), object)
    }

    /// Renders one snapshot of the stores for HAProxy `target` (the templates read it as
    /// `haproxy.version`, so a library uses a later line's feature only where the target has
    /// it). `extra_context` replaces the config's own `extraContext` when given (validation
    /// tests).
    pub fn render(
        &self,
        stores: StoresSnapshot,
        extra_context: Option<&Value>,
        target: HaproxyVersion,
    ) -> Result<RenderedConfig, TemplateError> {
        self.render_and(stores, extra_context, target, true)
    }

    /// Renders like [`Self::render`] but leaves the templates' memos and server slots as the
    /// last real render left them (see `TemplateSet::render_trial`): the admission webhook's
    /// "what if this object were accepted" render.
    pub fn render_trial(
        &self,
        stores: StoresSnapshot,
        extra_context: Option<&Value>,
        target: HaproxyVersion,
    ) -> Result<RenderedConfig, TemplateError> {
        self.render_and(stores, extra_context, target, false)
    }

    fn render_and(
        &self,
        stores: StoresSnapshot,
        extra_context: Option<&Value>,
        target: HaproxyVersion,
        remember: bool,
    ) -> Result<RenderedConfig, TemplateError> {
        let extra = extra_context
            .or(self.spec.extra_context.as_ref())
            .cloned()
            .unwrap_or(Value::Null);
        let dataplane = serde_json::to_value(&self.spec.dataplane).unwrap_or(Value::Null);
        let context = RenderContext::new(stores, self.path_resolver.clone())
            .with_extra_context(extra)
            .with_value("dataplane", dataplane)
            .with_value("haproxy", target_context(target));
        let mut rendered = if remember {
            self.templates.render(&context)?
        } else {
            self.templates.render_trial(&context)?
        };
        if let Some(list) = self.post_processors.get("haproxy.cfg") {
            rendered.haproxy_cfg = apply_post_processors(list, &rendered.haproxy_cfg);
        }
        rendered.trusted_lines = self.trusted_lines.clone();
        for file in rendered.aux_files.values_mut() {
            let target = match file.kind {
                crate::pure::rendered::AuxKind::Map => format!("maps/{}", file.name),
                crate::pure::rendered::AuxKind::File => format!("files/{}", file.name),
                crate::pure::rendered::AuxKind::Cert => format!("sslCertificates/{}", file.name),
                crate::pure::rendered::AuxKind::CrtList => continue,
            };
            if let Some(list) = self.post_processors.get(&target) {
                file.content = apply_post_processors(list, &file.content);
            }
        }
        Ok(rendered)
    }
}

/// The templates' view of the HAProxy line they render for: `haproxy.version` (`"3.2"`),
/// `haproxy.major` and `haproxy.minor`; `(version_at_least haproxy.version "3.0")` tests it.
fn target_context(target: HaproxyVersion) -> Value {
    serde_json::json!({
        "version": target.to_string(),
        "major": target.major,
        "minor": target.minor,
    })
}

fn apply_post_processors(list: &[CompiledPostProcessor], text: &str) -> String {
    let mut out = text.to_string();
    for post in list {
        out = post
            .regex
            .replace_all(&out, post.replace.as_str())
            .into_owned();
    }
    out
}

fn build_stores(spec: &HAProxyTemplateConfigSpec) -> Result<Stores, ConfigError> {
    let mut stores = Stores::new();
    // Each HTTP resource is a store of one object (`pure::http_resources`): its URL, and
    // its body once fetched.
    for (name, settings) in &spec.http_resources {
        let failed = |error| ConfigError::Store {
            resource: store_name(name),
            error,
        };
        let store = ResourceStore::new(store_name(name), Vec::new(), Vec::new()).map_err(failed)?;
        store
            .apply(declared_object(name, settings.url.trim()))
            .map_err(failed)?;
        stores.insert(store);
    }
    for (name, watched) in &spec.watched_resources {
        let store = ResourceStore::new(
            name.clone(),
            watched.index_by.clone(),
            spec.watched_resources_ignore_fields.clone(),
        )
        .map_err(|error| ConfigError::Store {
            resource: name.clone(),
            error,
        })?;
        stores.insert(store);
    }
    Ok(stores)
}

/// The literal lines of the spec's `haproxy.cfg` template and snippets (snippets are
/// included into `haproxy.cfg`; map, file and certificate templates are not).
fn trusted_lines(spec: &HAProxyTemplateConfigSpec) -> TrustedLines {
    TrustedLines::new(
        literal_lines(&spec.haproxy_config.template).chain(
            spec.template_snippets
                .values()
                .flat_map(|snippet| literal_lines(&snippet.template))
                .chain(
                    spec.annotations
                        .definitions
                        .values()
                        .flat_map(|d| d.template.iter().chain(&d.when_invalid))
                        .flat_map(|template| literal_lines(template)),
                ),
        ),
    )
}

/// The render guards `spec.rendering` sets, its timeout as validation parsed it.
pub fn render_limits(spec: &HAProxyTemplateConfigSpec, timings: &ConfigTimings) -> RenderLimits {
    RenderLimits {
        max_render_time: timings.rendering_timeout,
        max_output_bytes: usize::try_from(spec.rendering.max_output_bytes).unwrap_or(usize::MAX),
    }
}

/// The template sources of a spec, as the template engine takes them.
pub fn template_input(spec: &HAProxyTemplateConfigSpec) -> TemplateSetInput {
    TemplateSetInput {
        haproxy_config: spec.haproxy_config.template.clone(),
        maps: spec
            .maps
            .iter()
            .map(|(k, v)| (k.clone(), v.template.clone()))
            .collect(),
        files: spec
            .files
            .iter()
            .map(|(k, v)| (k.clone(), v.template.clone()))
            .collect(),
        ssl_certificates: spec
            .ssl_certificates
            .iter()
            .map(|(k, v)| (k.clone(), v.template.clone()))
            .collect(),
        snippets: spec
            .template_snippets
            .iter()
            .map(|(k, v)| (k.clone(), v.template.clone()))
            .collect(),
        annotations: spec.annotations.clone(),
        source: spec.source.clone(),
    }
}

/// The syntax and schema phases: parse `haproxy.cfg` with haptor's parser, check every
/// directive against HAProxy 2.6's keyword tables, and refuse every directive that runs code
/// at parse or check time on a line that is not one of `rendered.trusted_lines` (the lines
/// the config's templates wrote literally; see the [module](self) docs).
pub fn check_offline(rendered: &RenderedConfig) -> Result<haproxy::Config, ValidationError> {
    check_offline_for(rendered, HaproxyVersion::DEFAULT)
}

/// [`check_offline`] for a target running HAProxy `target`: what later versions added
/// (`crate::pure::haproxy::versions`) is accepted from the version that added it.
pub fn check_offline_for(
    rendered: &RenderedConfig,
    target: HaproxyVersion,
) -> Result<haproxy::Config, ValidationError> {
    let parsed = parse_config(&rendered.haproxy_cfg).map_err(|e| {
        ValidationError::single(
            ValidationPhase::Syntax,
            "haproxy.cfg",
            Some(e.line),
            e.message,
        )
    })?;
    let mut problems = check_code_running(&parsed, &rendered.haproxy_cfg, &rendered.trusted_lines);
    problems.extend(check_schema_for(&parsed, target));
    // Stable: at one line, the code-running refusal comes first.
    problems.sort_by_key(|problem| problem.line);
    if !problems.is_empty() {
        return Err(ValidationError {
            phase: ValidationPhase::Schema,
            problems: problems
                .into_iter()
                .map(|p| ConfigProblem {
                    phase: ValidationPhase::Schema,
                    file: "haproxy.cfg".into(),
                    line: Some(p.line),
                    message: p.message,
                })
                .collect(),
        });
    }
    Ok(parsed)
}

/// A rendered configuration that passed all three phases.
#[derive(Debug, Clone)]
pub struct ValidatedConfig {
    pub rendered: Arc<RenderedConfig>,
    /// The checksum of the configuration and its auxiliary files, computed here once: what
    /// follows the render (deployers, targets, publisher) carries this value.
    pub checksum: Checksum,
    /// HAProxy's warnings (they do not make the configuration invalid).
    pub warnings: Vec<ConfigProblem>,
    /// Every phase was skipped because an identical render was validated before.
    pub from_cache: bool,
    /// `haproxy -c` was skipped: the render differs from one that passed it only in what
    /// the runtime API changes (server addresses, ports, weights and states, map entries).
    pub semantic_skipped: bool,
    pub duration: Duration,
}

/// Runs the three validation phases with a cache in front.
#[derive(Debug, Clone)]
pub struct Validator {
    checker: Arc<dyn SemanticCheck>,
    cache: Arc<ValidationCache>,
    /// The last render validated, with the digests of its files: the next render's files
    /// that are the same are not hashed again for its checksum.
    last_digests: Arc<Mutex<LastDigests>>,
}

/// The last render a [`Validator`] validated, with the digests of its files.
type LastDigests = Option<(Arc<RenderedConfig>, FileDigests)>;

impl Validator {
    /// A validator whose semantic phase is `checker` (in production
    /// `drivers::haproxy_check::HaproxyChecker`, `haproxy -c`), with a cache of
    /// `cache_entries` successes.
    pub fn new(checker: Arc<dyn SemanticCheck>, cache_entries: usize) -> Validator {
        Validator {
            checker,
            cache: Arc::new(ValidationCache::new(cache_entries)),
            last_digests: Arc::default(),
        }
    }

    /// The checksum of `rendered` and the digests it is made of, from the digests of the
    /// last render validated for each file the two have the same.
    fn checksum_of(&self, rendered: &RenderedConfig) -> (Checksum, FileDigests) {
        let last = self
            .last_digests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let digests = FileDigests::after(
            rendered,
            last.as_ref().map(|(render, digests)| (&**render, digests)),
        );
        (digests.checksum(), digests)
    }

    /// The checksum of `rendered` when it is the last render validated (the pipeline's
    /// baseline).
    fn known_checksum(&self, rendered: &RenderedConfig) -> Option<Checksum> {
        let last = self
            .last_digests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (render, digests) = last.as_ref()?;
        std::ptr::eq(&**render, rendered).then(|| digests.checksum())
    }

    /// `rendered`, validated, shared, and kept with its digests for the next checksum.
    fn validated(&self, rendered: RenderedConfig, digests: FileDigests) -> Arc<RenderedConfig> {
        let rendered = Arc::new(rendered);
        *self
            .last_digests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some((Arc::clone(&rendered), digests));
        rendered
    }

    pub fn cache(&self) -> &ValidationCache {
        &self.cache
    }

    pub fn checker(&self) -> &dyn SemanticCheck {
        self.checker.as_ref()
    }

    /// The HAProxy version the schema phase judges for: the checker's target
    /// ([`SemanticCheck::haproxy_version`]), 2.6 when it names none.
    pub fn haproxy_version(&self) -> HaproxyVersion {
        self.checker.haproxy_version().unwrap_or_default()
    }

    /// Validates a render. A cache hit (same haproxy version, same bytes, same trusted lines)
    /// skips every phase; failures are never cached. The semantic phase runs only after the
    /// syntax and schema phases passed, so a refused directive never reaches `haproxy -c`.
    pub fn validate(&self, rendered: RenderedConfig) -> Result<ValidatedConfig, PipelineError> {
        let started = Instant::now();
        let version = self
            .checker
            .identity()
            .map_err(|e| PipelineError::CheckUnavailable(e.to_string()))?;
        let (checksum, digests) = self.checksum_of(&rendered);
        self.validate_summed(rendered, (checksum, digests), version, started)
    }

    /// [`Self::validate`] of a render whose checksum is computed.
    fn validate_summed(
        &self,
        rendered: RenderedConfig,
        (checksum, digests): (Checksum, FileDigests),
        version: String,
        started: Instant,
    ) -> Result<ValidatedConfig, PipelineError> {
        let key = ValidationCache::key_of(&version, &checksum, &rendered);
        if let Some(report) = self.cache.get(&key) {
            return Ok(ValidatedConfig {
                checksum,
                rendered: self.validated(rendered, digests),
                warnings: report.warnings,
                from_cache: true,
                semantic_skipped: false,
                duration: started.elapsed(),
            });
        }
        check_offline_for(&rendered, self.haproxy_version())?;
        let report: CheckReport = self
            .checker
            .check_blocking(&rendered)
            .map_err(|e| match e {
                SemanticCheckError::Rejected(invalid) => PipelineError::Invalid(invalid),
                other => PipelineError::CheckUnavailable(other.to_string()),
            })?;
        self.cache.insert_success(key, &report);
        Ok(ValidatedConfig {
            checksum,
            rendered: self.validated(rendered, digests),
            warnings: report.warnings,
            from_cache: false,
            semantic_skipped: false,
            duration: started.elapsed(),
        })
    }

    /// Validates a render that follows `baseline`, a render that passed all three phases or
    /// differs from one that did only in runtime-changeable values.
    /// When the plan from `baseline` to `rendered` needs no reload — only server addresses,
    /// ports, weights, states and map entries differ, and servers come and go with the
    /// parameters of servers already there — the phases do not run again: the plan
    /// has parsed every changed line and found each one equal to a validated line but for
    /// those values, so the parser, the schema check and `haproxy -c` would judge the same
    /// configuration again, and endpoint changes must reach HAProxy in milliseconds. HAProxy's
    /// runtime API still refuses a malformed value, and the deployer then falls back to a
    /// reload that HAProxy validates.
    pub fn validate_after(
        &self,
        baseline: Option<&RenderedConfig>,
        rendered: RenderedConfig,
    ) -> Result<ValidatedConfig, PipelineError> {
        // A baseline validated under other trusted lines (another config) vouches for nothing.
        let Some(baseline) = baseline.filter(|b| b.trusted_lines == rendered.trusted_lines) else {
            return self.validate(rendered);
        };
        let started = Instant::now();
        let (checksum, digests) = self.checksum_of(&rendered);
        // The plan the scheduler and the target take up again (planned once per pair).
        let planned = match self.known_checksum(baseline) {
            Some(from) => crate::pure::deploy::plan::plan_between(
                Some((baseline, from)),
                (&rendered, checksum),
            ),
            None => crate::pure::deploy::plan::plan(Some(baseline), &rendered).map(Arc::new),
        };
        // An added server whose parameters no validated server of its backend had is a
        // line `haproxy -c` has not judged in that form.
        // Certificates are judged by `haproxy -c` alone (a key that does not match its
        // certificate, say): a change of them validates in full, then deploys live.
        let runtime_only = planned.is_ok_and(|p| {
            !p.reload
                && p.novel_servers == 0
                && !p.operations.iter().any(|op| op.touches_certificates())
        });
        if !runtime_only {
            let version = self
                .checker
                .identity()
                .map_err(|e| PipelineError::CheckUnavailable(e.to_string()))?;
            return self.validate_summed(rendered, (checksum, digests), version, started);
        }
        Ok(ValidatedConfig {
            checksum,
            rendered: self.validated(rendered, digests),
            warnings: vec![],
            from_cache: false,
            semantic_skipped: true,
            duration: started.elapsed(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
