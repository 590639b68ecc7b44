//! The seams between the actor tree and what it drives: the traits that the edges
//! implement (the Kubernetes drivers in `haptor run`, the manifest folder and memory in
//! `haptor local`, stand-ins in tests and benches) and that actors call. Both sides depend
//! on this module; the drivers do not depend on `crate::actors`.
//!
//! - [`ResourceSourceFactory`]: the events of one watched resource (a Kubernetes watch, a
//!   manifest folder, a test channel);
//! - [`ReconcilePipeline`]: one render and validation (the coordinator runs `FullPipeline`);
//! - [`HttpFetcher`]: one fetch of an HTTP resource the templates read;
//! - [`PublishSink`]: where the `HAProxyCfg` of each render goes ([`InMemorySink`] keeps it
//!   in memory).

use std::sync::Mutex;

use futures::stream::BoxStream;

use crate::messages::ResourceEvent;
use crate::messages::deploy::{RenderFailure, RenderedAndValidated};
use crate::pure::config::{HAProxyCfgSpec, HAProxyCfgStatus, WatchedResource};
use crate::pure::http_resources::{Fetched, HttpResource, Validators};
use crate::pure::pipeline::CompiledConfig;
use crate::pure::rendered::Outcomes;
use crate::pure::store::StoresSnapshot;

/// Opens a stream of events for one watched resource (a Kubernetes watch, a manifest
/// folder, a test channel). Called again when a watcher restarts.
pub trait ResourceSourceFactory: Send + Sync {
    fn open(&self, resource: &str, watched: &WatchedResource) -> BoxStream<'static, ResourceEvent>;
}

/// Runs one render+validate step. The real one is `drivers::pipeline::FullPipeline`; tests
/// and benches plug in others.
pub trait ReconcilePipeline: Send + Sync {
    fn run(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<RenderedAndValidated, RenderFailure>;

    /// Judges a what-if snapshot without moving anything the next [`Self::run`] uses (the
    /// templates' memos, server slots, the baseline): content on trial (an HTTP resource's
    /// new body) may be used only when this passes. The production pipeline runs all three
    /// validation phases with no baseline, so `haproxy -c` reads the new content; this
    /// default renders only, as a render-only pipeline's `run` does.
    fn trial(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<(), RenderFailure> {
        compiled
            .render_trial(
                snapshot,
                None,
                crate::pure::haproxy::HaproxyVersion::default(),
            )
            .map(|_| ())
            .map_err(|e| RenderFailure::of_render(&e))
    }
}

/// Fetches one HTTP resource of the config: its credential, timeout, retries, size limit
/// and a request conditional on `validators` (the content in use). The real one is
/// `drivers::http_resource::HttpResourceFetcher`.
pub trait HttpFetcher: Send + Sync {
    fn fetch(
        &self,
        resource: HttpResource,
        validators: Validators,
    ) -> futures::future::BoxFuture<'static, Fetched>;
}

/// Where the ConfigPublisher writes `HAProxyCfg`: the Kubernetes API in-cluster, memory
/// elsewhere.
pub trait PublishSink: Send + Sync {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus);

    /// What the templates of each published render recorded about the objects they served
    /// or ignored (`served`, `ignored`); called on every publication of a render, before
    /// [`PublishSink::publish`]. Nothing by default.
    fn outcomes(&self, _outcomes: &Outcomes) {}

    /// What the templates of each published render recorded about Gateway API status
    /// (`condition`, `listener_kinds`, `attached_route`); called with
    /// [`PublishSink::outcomes`]. Nothing by default.
    fn gateway_statuses(&self, _records: &[crate::pure::gateway_status::StatusRecord]) {}
}

/// Keeps the last published resource in memory (local mode, tests).
#[derive(Debug, Default)]
pub struct InMemorySink {
    pub last: Mutex<Option<(HAProxyCfgSpec, HAProxyCfgStatus)>>,
}

impl PublishSink for InMemorySink {
    fn publish(&self, spec: &HAProxyCfgSpec, status: &HAProxyCfgStatus) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((spec.clone(), status.clone()));
    }
}
