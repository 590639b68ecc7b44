//! The leader-only Coordinator: runs render+validate as one synchronous step on the render
//! thread, one at a time. Triggers that arrive while a step runs coalesce into one pending
//! trigger (the latest correlation wins), so a burst of N events costs at most one more
//! render, and that render reads the stores after the last event. A successful step is
//! numbered and handed to the DeployScheduler and recorded for state replay; a failure is
//! reported with its template and line, and the last good configuration keeps serving.
//! Renders are numbered from the process-wide counter in `Services`, so a render of a new
//! iteration or a new leadership term is newer than anything deployed before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, current, set};
use crate::messages::deploy::{FailureStage, RenderFailure, RenderOutcome};
use crate::messages::{
    ConfigPublisherMsg, CoordinatorMsg, CorrelationId, DeploySchedulerMsg, EventKind,
    ReconcilerMsg, ValidatedRender,
};
use crate::observability::introspection::ErrorRecord;
use crate::pure::certificates::expired_certificates;
use crate::pure::rendered::{Checksum, Outcomes, RenderedConfig, newly_left_out};

#[derive(Clone)]
pub struct Coordinator {
    pub iteration: Arc<Iteration>,
}

pub struct CoordinatorState {
    rendering: bool,
    pending: Option<(CorrelationId, Option<Instant>)>,
    renders: u64,
    /// The checksum this coordinator last handed on; starts empty so a new leader deploys
    /// the replayed state even when it equals the previous leader's render.
    last_checksum: Option<Checksum>,
    /// The outcomes of the last render that passed validation: what the templates left
    /// out is reported when it is new.
    last_outcomes: std::sync::Arc<Outcomes>,
    /// The expired certificate files already reported (path, notAfter).
    expired_reported: BTreeSet<(String, String)>,
}

/// How many objects one render reports as left out one by one; the rest are counted.
const LEFT_OUT_REPORTED_ONE_BY_ONE: usize = 20;

/// What a failed render or validation is about in `/debug/vars/errors`: the next render
/// that passes resolves it.
const RECONCILIATION: &str = "reconciliation";

impl Coordinator {
    fn start_render(
        &self,
        myself: &ActorRef<CoordinatorMsg>,
        state: &mut CoordinatorState,
        correlation: CorrelationId,
        changed_at: Option<Instant>,
    ) {
        state.rendering = true;
        state.renders += 1;
        let (compiled, stores) = self
            .iteration
            .with_latest(|l| (Arc::clone(&l.compiled), Arc::clone(&l.stores)));
        let pipeline = Arc::clone(&self.iteration.services.pipeline);
        let render_thread = Arc::clone(&self.iteration.services.render_thread);
        let target = myself.clone();
        // The render counts as the coordinator's work for stall detection: a render that
        // hangs on the render thread makes `/healthz` name the coordinator.
        let busy = self.iteration.services.introspection.busy("coordinator");
        tokio::spawn(async move {
            let _busy = busy;
            let snapshot = stores.snapshot();
            let result = render_thread
                .run(move || pipeline.run(&compiled, snapshot))
                .await
                .unwrap_or_else(|| {
                    Err(RenderFailure {
                        stage: FailureStage::Render,
                        message: "the render failed unexpectedly (a panic); the last good \
                                  configuration keeps serving"
                            .into(),
                        template: None,
                        line: None,
                    })
                });
            let _ = target.cast(CoordinatorMsg::RenderFinished(Box::new(RenderOutcome {
                correlation,
                changed_at,
                result,
            })));
        });
    }

    /// Logs and records (in `/debug/vars/errors`) each object the templates newly left out,
    /// wholly or in part, with their reasons; in a cluster the Ingress status driver also
    /// records an `IngressIgnored` or `IngressPartlyServed` Event for the Ingress.
    fn report_left_out(&self, state: &mut CoordinatorState, outcomes: &std::sync::Arc<Outcomes>) {
        let newly = if std::sync::Arc::ptr_eq(&state.last_outcomes, outcomes) {
            Vec::new()
        } else {
            newly_left_out(&state.last_outcomes, outcomes)
        };
        state.last_outcomes = std::sync::Arc::clone(outcomes);
        let services = &self.iteration.services;
        for (key, outcome) in newly.iter().take(LEFT_OUT_REPORTED_ONE_BY_ONE) {
            let reasons = outcome.reasons().join("; ");
            let message = if outcome.is_served() {
                format!("{key} is served without some of its parts: {reasons}")
            } else {
                format!("{key} is not served: {reasons}")
            };
            tracing::warn!(object = %key, reasons = %reasons, "{message}");
            services
                .introspection
                .record_error(ErrorRecord::new("templates", message));
        }
        if newly.len() > LEFT_OUT_REPORTED_ONE_BY_ONE {
            tracing::warn!(
                more = newly.len() - LEFT_OUT_REPORTED_ONE_BY_ONE,
                "more objects are left out by the templates than are logged one by one"
            );
        }
    }

    /// Logs and records each certificate file of a good render that holds an expired
    /// certificate (HAProxy serves it; clients refuse it), once per file and date.
    fn report_expired(&self, state: &mut CoordinatorState, rendered: &RenderedConfig) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        let expired = expired_certificates(rendered, now);
        let current: BTreeSet<(String, String)> = expired
            .iter()
            .map(|e| (e.path.clone(), e.not_after.clone()))
            .collect();
        for key in current.difference(&state.expired_reported) {
            let message = format!(
                "{}: the certificate expired at {}; HAProxy serves it and clients will refuse the connection (renew the Secret it comes from)",
                key.0, key.1
            );
            tracing::warn!(file = %key.0, not_after = %key.1, "{message}");
            self.iteration
                .services
                .introspection
                .record_error(ErrorRecord::new("certificates", message));
        }
        state.expired_reported = current;
    }

    fn finish(&self, state: &mut CoordinatorState, outcome: RenderOutcome) {
        let services = &self.iteration.services;
        let correlation = Some(outcome.correlation);
        match outcome.result {
            Ok(done) => {
                self.report_left_out(state, &done.rendered.outcomes);
                self.report_expired(state, &done.rendered);
                services.fanout.publish(
                    correlation,
                    EventKind::RenderSucceeded {
                        duration: done.render_time,
                        checksum: done.checksum,
                    },
                );
                services.fanout.publish(
                    correlation,
                    EventKind::ValidationSucceeded {
                        duration: done.validate_time,
                        cache_hit: done.cache_hit,
                        semantic_skipped: done.semantic_skipped,
                    },
                );
                services
                    .introspection
                    .set_rendered(Arc::clone(&done.rendered), done.checksum);
                services
                    .introspection
                    .resolve_errors_about(RECONCILIATION, "a later render passed every check");
                services
                    .introspection
                    .update_state(|s| s.reconciliations += 1);
                if state.last_checksum == Some(done.checksum) {
                    tracing::debug!(checksum = %done.checksum, "render unchanged; nothing to deploy");
                    // The same bytes may come with other outcomes (`served`/`ignored`: an
                    // Ingress of another class appeared) or another Gateway API status (a
                    // Route whose matches an older one shadows, a reference refused for
                    // another reason): only the publisher hears of them.
                    let changed = self.iteration.with_latest(|l| {
                        let last = l.last_render.as_mut()?;
                        if last.rendered.outcomes == done.rendered.outcomes
                            && last.rendered.status_records == done.rendered.status_records
                        {
                            return None;
                        }
                        last.rendered = Arc::clone(&done.rendered);
                        Some(last.clone())
                    });
                    if let Some(render) = changed
                        && let Some(publisher) = current(&self.iteration.wiring.publisher)
                    {
                        let _ = publisher.cast(ConfigPublisherMsg::Publish(render));
                    }
                    return;
                }
                state.last_checksum = Some(done.checksum);
                let render = ValidatedRender {
                    rendered: done.rendered,
                    checksum: done.checksum,
                    generation: services.next_generation(),
                    correlation: outcome.correlation,
                    changed_at: outcome.changed_at,
                };
                self.iteration
                    .with_latest(|l| l.last_render = Some(render.clone()));
                if let Some(publisher) = current(&self.iteration.wiring.publisher) {
                    let _ = publisher.cast(ConfigPublisherMsg::Publish(render.clone()));
                }
                if let Some(scheduler) = current(&self.iteration.wiring.scheduler) {
                    let _ = scheduler.cast(DeploySchedulerMsg::Deploy(render));
                }
            }
            Err(failure) => {
                let error = failure.message.clone();
                let kind = match failure.stage {
                    FailureStage::Render => EventKind::RenderFailed { error },
                    FailureStage::Validation(phase) => EventKind::ValidationFailed { phase, error },
                    FailureStage::CheckUnavailable => EventKind::CheckerUnavailable { error },
                };
                services.fanout.publish(correlation, kind);
                tracing::warn!(stage = %failure.stage, error = %failure.message, "reconciliation failed; the last good configuration keeps serving");
                services.introspection.record_error(
                    ErrorRecord::new(failure.stage.metric_label(), failure.message)
                        .at(failure.template, failure.line)
                        .about(RECONCILIATION),
                );
            }
        }
    }
}

impl Actor for Coordinator {
    type Msg = CoordinatorMsg;
    type State = CoordinatorState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.iteration.wiring.coordinator, Some(myself));
        Ok(CoordinatorState {
            rendering: false,
            pending: None,
            renders: 0,
            last_checksum: None,
            last_outcomes: std::sync::Arc::default(),
            expired_reported: BTreeSet::new(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Tell the Reconciler a coordinator exists; it replays a trigger when indexes are synced.
        if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::SetCoordinator(Some(myself)));
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _busy = self.iteration.services.introspection.busy("coordinator");
        match msg {
            CoordinatorMsg::Trigger {
                correlation,
                changed_at,
                ..
            } => {
                if state.rendering {
                    // Latest wins; keep the earliest change time for latency accounting.
                    let earlier = state.pending.and_then(|(_, at)| at);
                    let first = match (earlier, changed_at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    state.pending = Some((correlation, first));
                } else {
                    self.start_render(&myself, state, correlation, changed_at);
                }
            }
            CoordinatorMsg::RenderFinished(outcome) => {
                state.rendering = false;
                self.finish(state, *outcome);
                if let Some((correlation, changed_at)) = state.pending.take() {
                    self.start_render(&myself, state, correlation, changed_at);
                }
            }
            CoordinatorMsg::RenderCount(reply) => {
                let _ = reply.send(state.renders);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let wiring = &self.iteration.wiring;
        if current(&wiring.coordinator).is_some_and(|c| c.get_id() == myself.get_id()) {
            set(&wiring.coordinator, None);
        }
        if let Some(reconciler) = current(&wiring.reconciler) {
            let _ = reconciler.cast(ReconcilerMsg::SetCoordinator(None));
        }
        Ok(())
    }
}
