//! Admission decisions: what the webhook answers when the API server asks whether an object
//! may be created, changed or deleted. Two questions, each answered synchronously from the
//! state every replica keeps (the running config, its stores), with the semantic phase
//! behind the [`Validator`]'s `SemanticCheck`:
//!
//! - [`admit_change`]: an object of a kind the running config watches with
//!   `enableValidationWebhook`. The proposed object (or its deletion) is laid over the
//!   current stores, the templates render that what-if state without moving the memos or
//!   server slots the next real render starts from, and the render must pass all three
//!   validation phases. A denial names the phase and the first problem with its line.
//! - [`admit_config`]: a new `HAProxyTemplateConfig`. Its structure and templates must
//!   compile, it must render against the objects the running config's stores hold (those of
//!   watched resources whose definition it keeps), the render must pass all three phases, and
//!   its own `validationTests` must pass.
//!
//! What cannot be decided (the stores are not synced yet, `haproxy -c` could not run) is an
//! [`Undecided`], which the edge answers as its failure policy says. [`AdmissionCache`]
//! remembers verdicts by [`admission_key`], a digest of every input, so a repeated admission
//! skips the render too.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::pure::config::HAProxyTemplateConfig;
use crate::pure::config_status::{describe, problems_of};
use crate::pure::deploy::plan::runtime_only_by_lines;
use crate::pure::pipeline::{CompiledConfig, PipelineError, Validator};
use crate::pure::rendered::RenderedConfig;
use crate::pure::store::{ObjectRef, Stores, StoresSnapshot};
use crate::pure::validation_tests::run_suite;

/// The longest denial message (the API server shows it to the user who applied the object).
pub const REASON_LIMIT: usize = 1024;

/// What the webhook answers when it cannot decide in time or at all (mirrors the
/// ValidatingWebhookConfiguration's `failurePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Deny what cannot be judged.
    #[default]
    Fail,
    /// Allow it, with a warning.
    Ignore,
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

impl std::str::FromStr for FailurePolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "Fail" | "fail" => Ok(FailurePolicy::Fail),
            "Ignore" | "ignore" => Ok(FailurePolicy::Ignore),
            other => Err(format!(
                "unknown failure policy '{other}' (expected Fail or Ignore)"
            )),
        }
    }
}

/// The operation the API server asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One object change the API server asks about.
#[derive(Debug, Clone, Copy)]
pub struct ProposedChange<'a> {
    pub operation: Operation,
    /// The object's `apiVersion` (`networking.k8s.io/v1`, `v1`).
    pub api_version: &'a str,
    pub kind: &'a str,
    /// Empty for cluster-scoped objects.
    pub namespace: &'a str,
    pub name: &'a str,
    /// The proposed object (none for a deletion).
    pub object: Option<&'a Value>,
    /// The object as stored (updates and deletions).
    pub old_object: Option<&'a Value>,
}

impl ProposedChange<'_> {
    /// `Ingress default/web`, the way denials name the object.
    pub fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The answer to one admission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// Why it was denied (at most [`REASON_LIMIT`] bytes).
    pub reason: Option<String>,
    /// Shown to the user by `kubectl` even when allowed.
    pub warnings: Vec<String>,
}

impl Verdict {
    pub fn allow() -> Verdict {
        Verdict {
            allowed: true,
            reason: None,
            warnings: Vec::new(),
        }
    }

    pub fn deny(reason: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            reason: Some(cut(reason.into(), REASON_LIMIT)),
            warnings: Vec::new(),
        }
    }

    fn with_warning(mut self, warning: impl Into<String>) -> Verdict {
        self.warnings.push(cut(warning.into(), REASON_LIMIT));
        self
    }
}

/// Why a request could not be decided; answered as the failure policy says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecided(pub String);

impl fmt::Display for Undecided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The verdict on a request that could not be decided.
pub fn undecided_verdict(policy: FailurePolicy, why: &Undecided) -> Verdict {
    match policy {
        FailurePolicy::Fail => Verdict::deny(format!(
            "haptor could not judge this change ({why}); denied because the webhook's failure policy is Fail"
        )),
        FailurePolicy::Ignore => Verdict::allow().with_warning(format!(
            "haptor could not judge this change ({why}); allowed because the webhook's failure policy is Ignore"
        )),
    }
}

/// What a resource admission reads: the running config, its stores, and the last render
/// that passed validation (a render that differs from it only in runtime-changeable values
/// needs no `haproxy -c`).
#[derive(Clone, Copy)]
pub struct RunningState<'a> {
    pub compiled: &'a CompiledConfig,
    pub stores: &'a Stores,
    /// Whether every store finished its initial list (else the stores are incomplete and
    /// a render of them proves nothing).
    pub synced: bool,
    pub baseline: Option<&'a RenderedConfig>,
}

/// The watched resources the webhook validates an object of `api_version`/`kind` for: those
/// with `enableValidationWebhook` whose field and label selectors take `object`. A resource
/// with a `namespaceSelector` is left out: whether the object's namespace is selected
/// depends on the Namespace's labels, which the stores do not hold, and laying over an
/// object the config would ignore could deny a change that breaks nothing.
pub fn validated_resources(
    compiled: &CompiledConfig,
    api_version: &str,
    kind: &str,
    object: &Value,
) -> Vec<String> {
    compiled
        .watched_resources_for(api_version, kind)
        .filter(|name| {
            compiled
                .spec
                .watched_resources
                .get(*name)
                .is_some_and(|w| w.enable_validation_webhook)
                && compiled.namespace_selector(name).is_none()
                && compiled.selects(name, object)
        })
        .map(String::from)
        .collect()
}

/// Whether any watched resource of this kind has `enableValidationWebhook`.
fn kind_is_validated(compiled: &CompiledConfig, api_version: &str, kind: &str) -> bool {
    compiled
        .watched_resources_for(api_version, kind)
        .any(|name| {
            compiled
                .spec
                .watched_resources
                .get(name)
                .is_some_and(|w| w.enable_validation_webhook)
                && compiled.namespace_selector(name).is_none()
        })
}

/// The stores as they would be after `change`: the proposed object applied to every
/// validated resource that selects it, and removed from those that held the old object but
/// do not select the new one (or from all of them, for a deletion).
pub fn overlay(
    compiled: &CompiledConfig,
    stores: &Stores,
    change: &ProposedChange<'_>,
) -> Result<StoresSnapshot, String> {
    let mut snapshot = stores.snapshot();
    let identity = ObjectRef::new(change.namespace, change.name);
    let taking = match (change.operation, change.object) {
        (Operation::Delete, _) | (_, None) => Vec::new(),
        (_, Some(object)) => validated_resources(compiled, change.api_version, change.kind, object),
    };
    let resources: Vec<&str> = compiled
        .watched_resources_for(change.api_version, change.kind)
        .collect();
    for resource in resources {
        let Some(store) = stores.get(resource) else {
            continue;
        };
        if let (true, Some(object)) = (taking.iter().any(|t| t == resource), change.object) {
            let applied = store.snapshot_with_applied(object).map_err(|e| {
                format!("{} cannot be indexed in {resource}: {e}", change.describe())
            })?;
            snapshot.insert(applied);
        } else if change.old_object.is_some() || change.operation == Operation::Delete {
            snapshot.insert(store.snapshot_with_deleted(&identity));
        }
    }
    Ok(snapshot)
}

/// Decides a change of an object of a watched kind (see the module documentation).
pub fn admit_change(
    running: RunningState<'_>,
    change: &ProposedChange<'_>,
    validator: &Validator,
) -> Result<Verdict, Undecided> {
    admit_change_validated(running, change, validator).map(|(verdict, _)| verdict)
}

/// [`admit_change`], with the render it allowed: it passed all three phases, or differs
/// from one that did only in runtime-changeable values, so it is a baseline for later
/// admissions (see `Validator::validate_after`).
pub fn admit_change_validated(
    running: RunningState<'_>,
    change: &ProposedChange<'_>,
    validator: &Validator,
) -> Result<(Verdict, Option<Arc<RenderedConfig>>), Undecided> {
    if change.operation == Operation::Connect
        || !kind_is_validated(running.compiled, change.api_version, change.kind)
    {
        return Ok((Verdict::allow(), None));
    }
    let takes = |object: Option<&Value>| {
        object.is_some_and(|o| {
            !validated_resources(running.compiled, change.api_version, change.kind, o).is_empty()
        })
    };
    // Neither the object nor what it replaces is watched with validation: nothing renders
    // differently.
    if !takes(change.object) && !takes(change.old_object) {
        return Ok((Verdict::allow(), None));
    }
    if !running.synced {
        return Err(Undecided(
            "its watched resources are still being listed".into(),
        ));
    }
    let who = change.describe();
    let snapshot = match overlay(running.compiled, running.stores, change) {
        Ok(snapshot) => snapshot,
        Err(message) => return Ok((Verdict::deny(message), None)),
    };
    let doing = match change.operation {
        Operation::Delete => "without",
        _ => "with",
    };
    let rendered = match running
        .compiled
        .render_trial(snapshot, None, validator.haproxy_version())
    {
        Ok(rendered) => rendered,
        Err(e) => {
            return Ok((
                Verdict::deny(format!(
                    "{who} is refused by haptor: the configuration {doing} it does not render: {e}"
                )),
                None,
            ));
        }
    };
    // The baseline spares `haproxy -c` only when the render differs from it in runtime
    // values alone; a line comparison says so without parsing, and a structural change
    // goes straight to the three phases.
    let baseline = running
        .baseline
        .filter(|baseline| runtime_only_by_lines(baseline, &rendered));
    match validator.validate_after(baseline, rendered) {
        Ok(validated) => Ok((Verdict::allow(), Some(validated.rendered))),
        Err(PipelineError::Invalid(invalid)) => {
            let first = invalid
                .problems
                .first()
                .map(ToString::to_string)
                .unwrap_or_else(|| invalid.to_string());
            Ok((
                Verdict::deny(format!(
                    "{who} is refused by haptor: the configuration {doing} it fails the {} phase: {first}",
                    invalid.phase
                )),
                None,
            ))
        }
        Err(PipelineError::Render(e)) => Ok((
            Verdict::deny(format!(
                "{who} is refused by haptor: the configuration {doing} it does not render: {e}"
            )),
            None,
        )),
        Err(PipelineError::CheckUnavailable(message)) => {
            Err(Undecided(format!("haproxy -c could not run: {message}")))
        }
    }
}

/// Decides a new or changed `HAProxyTemplateConfig` (see the module documentation).
/// `running` is the config this replica runs (none before its first valid config).
pub fn admit_config(
    config: &HAProxyTemplateConfig,
    running: Option<RunningState<'_>>,
    validator: &Validator,
) -> Result<Verdict, Undecided> {
    let name = format!(
        "HAProxyTemplateConfig {}/{}",
        config.metadata.namespace.as_deref().unwrap_or_default(),
        config.metadata.name.as_deref().unwrap_or_default()
    );
    let compiled = match CompiledConfig::compile(config.spec.clone()) {
        Ok(compiled) => compiled,
        Err(e) => {
            let problems = problems_of(&e);
            let shown: Vec<String> = problems.iter().take(3).map(describe).collect();
            let more = problems.len().saturating_sub(shown.len());
            let mut reason = format!("{name} is invalid: {}", shown.join("; "));
            if more > 0 {
                reason.push_str(&format!(" (and {more} more)"));
            }
            return Ok(Verdict::deny(reason));
        }
    };
    let mut verdict = Verdict::allow();
    let snapshot = match running {
        Some(running) if running.synced => {
            let (snapshot, fresh) = carried_stores(&compiled, running)?;
            if !fresh.is_empty() {
                verdict = verdict.with_warning(format!(
                    "rendered without objects for the watched resources it adds or changes ({}): haptor lists them once the config is applied",
                    fresh.join(", ")
                ));
            }
            snapshot
        }
        Some(_) => {
            return Err(Undecided(
                "the running config's watched resources are still being listed".into(),
            ));
        }
        None => compiled
            .new_stores()
            .map_err(|e| Undecided(e.to_string()))?
            .snapshot(),
    };
    let rendered = match compiled.render(snapshot, None, validator.haproxy_version()) {
        Ok(rendered) => rendered,
        Err(e) => {
            return Ok(Verdict::deny(format!(
                "{name} does not render with the current objects: {e}"
            )));
        }
    };
    match validator.validate(rendered) {
        Ok(_) => {}
        Err(PipelineError::Invalid(invalid)) => {
            let first = invalid
                .problems
                .first()
                .map(ToString::to_string)
                .unwrap_or_else(|| invalid.to_string());
            return Ok(Verdict::deny(format!(
                "{name}: its render with the current objects fails the {} phase: {first}",
                invalid.phase
            )));
        }
        Err(PipelineError::Render(e)) => {
            return Ok(Verdict::deny(format!(
                "{name} does not render with the current objects: {e}"
            )));
        }
        Err(PipelineError::CheckUnavailable(message)) => {
            return Err(Undecided(format!("haproxy -c could not run: {message}")));
        }
    }
    let suite = run_suite(&compiled, validator, &[]);
    if let Some(failed) = suite.tests.iter().find(|t| !t.passed) {
        let why = failed.error.clone().unwrap_or_else(|| {
            failed
                .assertions
                .iter()
                .find(|a| !a.passed)
                .map(|a| match &a.description {
                    Some(description) => format!("{description}: {}", a.message),
                    None => format!("{:?} on {}: {}", a.kind, a.target, a.message),
                })
                .unwrap_or_else(|| "an assertion failed".into())
        });
        return Ok(Verdict::deny(format!(
            "{name}: validation test '{}' fails ({} of {} fail): {why}",
            failed.name,
            suite.failed,
            suite.tests.len()
        )));
    }
    Ok(verdict)
}

/// The new config's stores filled with the running stores' objects wherever a watched
/// resource keeps its name and its definition; the names of the others (rendered empty).
fn carried_stores(
    compiled: &CompiledConfig,
    running: RunningState<'_>,
) -> Result<(StoresSnapshot, Vec<String>), Undecided> {
    let fresh_stores = compiled
        .new_stores()
        .map_err(|e| Undecided(e.to_string()))?;
    let mut snapshot = fresh_stores.snapshot();
    let mut fresh = Vec::new();
    for (name, watched) in &compiled.spec.watched_resources {
        let kept = running.compiled.spec.watched_resources.get(name) == Some(watched)
            && running.compiled.spec.watched_resources_ignore_fields
                == compiled.spec.watched_resources_ignore_fields;
        match running.stores.get(name) {
            Some(store) if kept => snapshot.insert(store.snapshot()),
            _ => fresh.push(name.clone()),
        }
    }
    Ok((snapshot, fresh))
}

/// The digest of every input of a decision: the running config and stores (`state`: an
/// identity the caller gives each distinct running config and set of stores), the
/// generation of every store, and the request (operation, object, old object). Server-side
/// bookkeeping fields (`managedFields`) are left out, so a repeated `kubectl apply` of the
/// same object hits.
pub fn admission_key(state: u64, stores: &Stores, request: &[(&str, Option<&Value>)]) -> String {
    let mut hash = Sha256::new();
    hash.update(state.to_le_bytes());
    for name in stores.names() {
        if let Some(store) = stores.get(name) {
            hash.update(name.as_bytes());
            hash.update(store.snapshot().generation().to_le_bytes());
        }
    }
    for (label, value) in request {
        hash.update(label.as_bytes());
        hash.update([0]);
        if let Some(value) = value {
            let mut value = (*value).clone();
            if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("managedFields");
            }
            hash.update(value.to_string().as_bytes());
        }
        hash.update([0]);
    }
    crate::pure::rendered::hex(&hash.finalize())
}

/// The request part of [`admission_key`] for a change.
pub fn change_key_parts<'a>(change: &ProposedChange<'a>) -> Vec<(&'a str, Option<&'a Value>)> {
    vec![
        (change.operation.as_str(), None),
        (change.api_version, None),
        (change.kind, None),
        (change.namespace, None),
        (change.name, None),
        ("object", change.object),
        ("oldObject", change.old_object),
    ]
}

/// Verdicts by [`admission_key`], the oldest forgotten first. Undecided requests are never
/// remembered.
#[derive(Debug)]
pub struct AdmissionCache {
    capacity: usize,
    entries: Mutex<(HashMap<String, Verdict>, VecDeque<String>)>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl AdmissionCache {
    pub fn new(capacity: usize) -> AdmissionCache {
        AdmissionCache {
            capacity: capacity.max(1),
            entries: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, key: &str) -> Option<Verdict> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let found = entries.0.get(key).cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub fn insert(&self, key: String, verdict: Verdict) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *entries;
        if map.insert(key.clone(), verdict).is_none() {
            order.push_back(key);
        }
        while map.len() > self.capacity {
            match order.pop_front() {
                Some(oldest) => {
                    map.remove(&oldest);
                }
                None => break,
            }
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, marked when cut.
fn cut(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests;
