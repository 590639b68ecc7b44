//! The HttpResources actor: fetches the config's HTTP resources (`spec.httpResources`) and
//! keeps each one's content in use in its store, under the two-version rule of
//! `pure::http_resources`.
//!
//! One task per resource fetches it through the `HttpFetcher` seam every refresh interval
//! (every 5 s, or its interval if shorter, while a resource has no content yet) and casts
//! what it got here. Content that differs from the content in use is pending: a trial
//! render with it laid over the stores runs on the render thread (`ReconcilePipeline::
//! trial`, all three validation phases), and only a passing trial puts it in the store,
//! which the reconciler hears of as a change of that store, so the next render uses it.
//! A failed trial or fetch keeps the content in use serving and is logged, recorded in
//! `/debug/vars/errors` and in the `HAProxyCfg` status (`httpResources`, through the
//! leader's publisher), counted and (in a cluster) an Event. Before the first render,
//! and for a resource with no content yet, content is used at once: there is nothing good
//! to keep. A critical resource counts as a watched resource the IndexTracker waits for,
//! so it holds the first render and `/readyz` names it until fetched. The actor lives in
//! the config iteration: a config that drops a resource stops its fetching with the
//! iteration.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;

use crate::actors::context::{Iteration, current};
use crate::actors::publisher::now_rfc3339;
use crate::messages::deploy::{FailureStage, RenderFailure};
use crate::messages::events::{HttpFetchResult, new_correlation_id};
use crate::messages::{
    ConfigPublisherMsg, EventKind, HttpResourcesMsg, IndexTrackerMsg, ReconcilerMsg,
};
use crate::observability::introspection::ErrorRecord;
use crate::pure::config::HttpResourceStatus;
use crate::pure::http_resources::{
    Arrival, Fetched, HttpResource, ResourceState, Validators, content_object, store_name,
};

/// How soon a resource with no content yet is fetched again after a failure (unless its
/// refresh interval is shorter).
const FIRST_CONTENT_RETRY: Duration = Duration::from_secs(5);

/// Fetches the iteration's HTTP resources and keeps their content in use.
#[derive(Clone)]
pub struct HttpResources {
    pub iteration: Arc<Iteration>,
}

/// One resource: its settings, its two versions, and what its fetch loop reads.
struct Tracked {
    resource: HttpResource,
    state: ResourceState,
    /// The validators of the content in use, read by the fetch loop for each request.
    validators: Arc<Mutex<Validators>>,
    /// Whether content is in use (the fetch loop retries sooner while not).
    has_content: Arc<AtomicBool>,
    /// The size of the content in use.
    bytes: Option<usize>,
    /// Whether the IndexTracker was told this critical resource has content.
    synced: bool,
    /// What the published status says of it.
    status: HttpResourceStatus,
    task: tokio::task::JoinHandle<()>,
}

pub struct HttpResourcesState {
    resources: BTreeMap<String, Tracked>,
}

impl HttpResources {
    fn publish(
        &self,
        tracked: &Tracked,
        result: HttpFetchResult,
        in_use_bytes: Option<usize>,
        error: Option<String>,
    ) {
        self.iteration.services.fanout.publish(
            None,
            EventKind::HttpResourceFetched {
                resource: tracked.resource.name.clone(),
                url: tracked.resource.url.clone(),
                result,
                in_use_bytes,
                error,
            },
        );
    }

    /// Publishes the resource's state in the `HAProxyCfg` status (through the leader's
    /// publisher; kept for a publisher that starts later).
    fn report_status(&self, tracked: &Tracked) {
        let status = tracked.status.clone();
        self.iteration.with_latest(|l| {
            l.http_resources.insert(status.name.clone(), status.clone());
        });
        if let Some(publisher) = current(&self.iteration.wiring.publisher) {
            let _ = publisher.cast(ConfigPublisherMsg::HttpResource(status));
        }
    }

    /// The server confirmed the content in use: a failure shown in the status is over.
    fn confirmed(&self, tracked: &mut Tracked) {
        if tracked.status.last_error.take().is_some() {
            self.report_status(tracked);
        }
    }

    fn record_error(&self, tracked: &Tracked, message: String) {
        self.iteration
            .services
            .introspection
            .record_error(ErrorRecord::new(
                "http-resources",
                format!(
                    "HTTP resource {} ({}): {message}",
                    tracked.resource.name, tracked.resource.url
                ),
            ));
    }

    /// Puts `body` in the resource's store, tells the IndexTracker (a critical resource's
    /// first content) and the Reconciler.
    fn install(&self, tracked: &mut Tracked, body: &str, validators: Validators) {
        let name = tracked.resource.name.clone();
        let store = self
            .iteration
            .with_latest(|l| l.stores.get(&store_name(&name)).cloned());
        let Some(store) = store else {
            return;
        };
        if let Err(e) = store.apply(content_object(&name, &tracked.resource.url, body)) {
            self.record_error(tracked, format!("the content cannot be stored: {e}"));
            return;
        }
        tracked.state.in_use(body, validators.clone());
        *tracked
            .validators
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = validators;
        tracked.has_content.store(true, Ordering::Relaxed);
        tracked.bytes = Some(body.len());
        tracked.status.in_use_since = Some(now_rfc3339());
        tracked.status.bytes = u64::try_from(body.len()).ok();
        tracked.status.last_error = None;
        self.report_status(tracked);
        self.publish(tracked, HttpFetchResult::Changed, tracked.bytes, None);
        if tracked.resource.critical
            && !tracked.synced
            && let Some(tracker) = current(&self.iteration.wiring.index_tracker)
        {
            tracked.synced = true;
            let _ = tracker.cast(IndexTrackerMsg::Synced {
                resource: store_name(&name),
                objects: 1,
            });
        }
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::ResourcesChanged {
                resource: store_name(&name),
                changes: 1,
                correlation: new_correlation_id(),
                first_seen: Instant::now(),
            });
        }
    }

    /// Renders and validates the stores with `body` laid over the resource's store, on the
    /// render thread; the verdict comes back as `TrialFinished`.
    fn start_trial(
        &self,
        myself: &ActorRef<HttpResourcesMsg>,
        tracked: &Tracked,
        body: Arc<str>,
        validators: Validators,
    ) {
        let name = tracked.resource.name.clone();
        let object = content_object(&name, &tracked.resource.url, &body);
        let (compiled, stores) = self
            .iteration
            .with_latest(|l| (Arc::clone(&l.compiled), Arc::clone(&l.stores)));
        let Some(store) = stores.get(&store_name(&name)) else {
            return;
        };
        let mut snapshot = stores.snapshot();
        match store.snapshot_with_applied(object) {
            Ok(applied) => snapshot.insert(applied),
            Err(e) => {
                let _ = myself.cast(HttpResourcesMsg::TrialFinished {
                    name,
                    body,
                    validators,
                    result: Err(RenderFailure {
                        stage: FailureStage::Render,
                        message: format!("the content cannot be stored: {e}"),
                        template: None,
                        line: None,
                    }),
                });
                return;
            }
        }
        let pipeline = Arc::clone(&self.iteration.services.pipeline);
        let render_thread = Arc::clone(&self.iteration.services.render_thread);
        let target = myself.clone();
        tokio::spawn(async move {
            let result = render_thread
                .run(move || pipeline.trial(&compiled, snapshot))
                .await
                .unwrap_or_else(|| {
                    Err(RenderFailure {
                        stage: FailureStage::Render,
                        message: "the trial render failed unexpectedly (a panic)".into(),
                        template: None,
                        line: None,
                    })
                });
            let _ = target.cast(HttpResourcesMsg::TrialFinished {
                name,
                body,
                validators,
                result,
            });
        });
    }

    fn on_fetched(
        &self,
        myself: &ActorRef<HttpResourcesMsg>,
        tracked: &mut Tracked,
        fetched: Fetched,
    ) {
        match fetched {
            Fetched::Failed(why) => {
                let served = if tracked.state.has_content() {
                    "the content in use keeps serving"
                } else if tracked.resource.critical {
                    "it is critical: the first render waits for it"
                } else {
                    "it reads as empty until fetched"
                };
                self.record_error(tracked, format!("fetch failed ({served}): {why}"));
                tracked.state.failed(why.clone());
                tracked.status.last_error = Some(format!("fetch failed: {why}"));
                self.report_status(tracked);
                self.publish(tracked, HttpFetchResult::Error, None, Some(why));
            }
            Fetched::NotModified => {
                self.confirmed(tracked);
                self.publish(tracked, HttpFetchResult::NotModified, tracked.bytes, None);
            }
            Fetched::Content { body, validators } => {
                let rendered = self.iteration.with_latest(|l| l.all_synced);
                match tracked.state.on_content(&body, rendered) {
                    Arrival::Unchanged => {
                        if tracked.state.has_content() {
                            // Same content, perhaps new validators for it.
                            *tracked
                                .validators
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner) = validators.clone();
                            tracked.state.validators = validators;
                            self.confirmed(tracked);
                        }
                        self.publish(tracked, HttpFetchResult::Unchanged, tracked.bytes, None);
                    }
                    Arrival::Install => self.install(tracked, &body, validators),
                    Arrival::Trial => self.start_trial(myself, tracked, body, validators),
                }
            }
        }
    }

    fn on_trial(
        &self,
        tracked: &mut Tracked,
        body: &str,
        validators: Validators,
        result: Result<(), RenderFailure>,
    ) {
        match result {
            Ok(()) => self.install(tracked, body, validators),
            Err(failure) => {
                let location = match (&failure.template, failure.line) {
                    (Some(template), Some(line)) => format!(" ({template}:{line})"),
                    (Some(template), None) => format!(" ({template})"),
                    _ => String::new(),
                };
                let why = format!(
                    "the render with it fails the {} stage{location}: {}",
                    failure.stage, failure.message
                );
                self.record_error(
                    tracked,
                    format!(
                        "new content ({} bytes) rejected, the last good content keeps serving: {why}",
                        body.len()
                    ),
                );
                tracked.state.rejected(why.clone());
                tracked.status.last_error = Some(format!("new content rejected: {why}"));
                self.report_status(tracked);
                self.publish(tracked, HttpFetchResult::Rejected, None, Some(why));
            }
        }
    }
}

/// Fetches `resource` every refresh interval for as long as the actor takes the results.
fn spawn_fetch_loop(
    iteration: &Iteration,
    myself: ActorRef<HttpResourcesMsg>,
    resource: HttpResource,
    validators: Arc<Mutex<Validators>>,
    has_content: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let fetcher = Arc::clone(&iteration.services.sources.http);
    tokio::spawn(async move {
        loop {
            let asking = validators
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let fetched = fetcher.fetch(resource.clone(), asking).await;
            let failed = matches!(fetched, Fetched::Failed(_));
            if myself
                .cast(HttpResourcesMsg::Fetched {
                    name: resource.name.clone(),
                    fetched,
                })
                .is_err()
            {
                return;
            }
            let wait = if failed && !has_content.load(Ordering::Relaxed) {
                resource.refresh.min(FIRST_CONTENT_RETRY)
            } else {
                resource.refresh
            };
            tokio::time::sleep(wait).await;
        }
    })
}

impl Actor for HttpResources {
    type Msg = HttpResourcesMsg;
    type State = HttpResourcesState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let (resources, stores) = self
            .iteration
            .with_latest(|l| (l.compiled.http_resources.clone(), Arc::clone(&l.stores)));
        let mut tracked = BTreeMap::new();
        // A resource without a URL is off: nothing to fetch.
        for resource in resources.into_iter().filter(HttpResource::is_on) {
            // A restarted actor finds the content in use in the store (it lives with the
            // iteration); its validators are gone, so the first request asks for all.
            let mut state = ResourceState::default();
            let mut bytes = None;
            if let Some(body) = stores
                .get(&store_name(&resource.name))
                .and_then(|store| store.snapshot().entries().first().map(|e| e.value()))
                .as_ref()
                .and_then(|object| object.get("body").and_then(Value::as_str).map(String::from))
            {
                state.in_use(&body, Validators::default());
                bytes = Some(body.len());
            }
            let validators = Arc::new(Mutex::new(Validators::default()));
            let has_content = Arc::new(AtomicBool::new(state.has_content()));
            let task = spawn_fetch_loop(
                &self.iteration,
                myself.clone(),
                resource.clone(),
                Arc::clone(&validators),
                Arc::clone(&has_content),
            );
            let status = self
                .iteration
                .with_latest(|l| l.http_resources.get(&resource.name).cloned())
                .unwrap_or_else(|| HttpResourceStatus {
                    name: resource.name.clone(),
                    url: resource.url.clone(),
                    ..HttpResourceStatus::default()
                });
            tracked.insert(
                resource.name.clone(),
                Tracked {
                    status,
                    synced: state.has_content(),
                    resource,
                    state,
                    validators,
                    has_content,
                    bytes,
                    task,
                },
            );
        }
        Ok(HttpResourcesState { resources: tracked })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("http-resources");
        match msg {
            HttpResourcesMsg::Fetched { name, fetched } => {
                if let Some(tracked) = state.resources.get_mut(&name) {
                    self.on_fetched(&myself, tracked, fetched);
                }
            }
            HttpResourcesMsg::TrialFinished {
                name,
                body,
                validators,
                result,
            } => {
                if let Some(tracked) = state.resources.get_mut(&name) {
                    self.on_trial(tracked, &body, validators, result);
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for tracked in state.resources.values() {
            tracked.task.abort();
        }
        Ok(())
    }
}
