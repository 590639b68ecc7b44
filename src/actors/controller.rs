//! Starting a whole controller: the services (event fan-out, introspection, metrics,
//! readiness), the process-wide children of the root (metrics and debug servers, the
//! Commentator, the Metrics actor) and the IterationManager that builds the config
//! iterations. `haptor run`, `haptor local` and the tests all start haptor through here and
//! differ only in their [`Sources`], pipeline and publish sink.

use std::sync::{Arc, RwLock};

use ractor::ActorRef;

use crate::actors::commentator::{Commentator, CommentatorArgs};
use crate::actors::context::{ControllerSettings, Services, Sources};
use crate::actors::event_pump::SharedEventReceiver;
use crate::actors::http::{DebugState, Readiness, debug_server_spec, metrics_server_spec};
use crate::actors::metrics::{MetricsActor, MetricsArgs};
use crate::actors::tree::start_root;
use crate::messages::EventFanout;
use crate::observability::event_log::EventLog;
use crate::observability::introspection::Introspection;
use crate::observability::metrics::Metrics;
use crate::seams::PublishSink;
use crate::seams::ReconcilePipeline;
use crate::supervision::{ActorRole, ChildSpec, SupervisorMsg};
use crate::telemetry::LogLevelHandle;

/// How many observability events each consumer may have queued before events are dropped.
pub const EVENT_QUEUE_CAPACITY: usize = 1024;

/// Where the HTTP servers listen; `None` leaves a server out (tests that need none).
#[derive(Debug, Clone, Default)]
pub struct ServerAddresses {
    pub metrics: Option<String>,
    pub debug: Option<String>,
    /// A probe-only server (`/healthz`, `/readyz`), apart from the debug endpoints.
    pub health: Option<String>,
    /// An HTTPS-only server whose router is built from the controller's services (the
    /// admission webhook of `haptor run`).
    pub webhook: Option<TlsServing>,
}

/// What a caller adds to the tree besides the servers: the leader-only edges (a subtree
/// of the root that runs only while this replica leads, restarted with each new term, see
/// [`crate::actors::edge::LeaderEdges`]), and the fault injection
/// `POST /debug/actors/{name}/panic` serves, if enabled.
/// All-replica edges need the controller's services, so they are started under the root
/// once it runs ([`Controller::start_edge`]).
#[derive(Clone, Default)]
pub struct ControllerEdges {
    pub leader_only: Vec<ChildSpec>,
    pub fault_injection: Option<crate::actors::edge::FaultInjection>,
}

/// Builds a router over the controller's services once they exist.
pub type RouterFactory = Arc<dyn Fn(&Services) -> axum::Router + Send + Sync>;

/// An HTTPS server of the root: where it listens, its TLS configuration, its router.
#[derive(Clone)]
pub struct TlsServing {
    pub addr: String,
    pub tls: Arc<rustls::ServerConfig>,
    pub router: RouterFactory,
}

impl std::fmt::Debug for TlsServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServing")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// A running controller.
pub struct Controller {
    pub root: ActorRef<SupervisorMsg>,
    pub services: Services,
    pub metrics: Arc<Metrics>,
    pub events: EventLog,
    /// The observability events for a consumer outside the tree (`haptor run`'s Kubernetes
    /// Events and epoch floor), when [`ControllerSettings::external_events`] asked for one;
    /// taken once.
    pub external_events:
        std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<crate::messages::ObservedEvent>>>,
}

/// Why a controller's tree stopped without being asked to.
pub const TREE_STOPPED: &str = "the actor tree stopped: a component failed more often than its supervisor allows (a restart storm; the log names it), so haptor exits for its own restart";

impl Controller {
    /// Resolves when the root supervisor has stopped: asked to ([`Controller::stop`]), or
    /// because a restart storm escalated to it. The caller exits on the latter, so that
    /// what runs haptor (the kubelet, systemd) restarts the whole process.
    pub async fn stopped(&self) {
        let _ = self.root.get_cell().wait(None).await;
    }

    /// Starts an all-replica edge under the root supervisor.
    pub async fn start_edge(&self, spec: ChildSpec) -> Result<(), String> {
        let name = spec.name.clone();
        match ractor::call!(self.root, SupervisorMsg::StartChild, spec) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("edge {name} did not start: {e}")),
            Err(e) => Err(format!("the root supervisor did not answer: {e}")),
        }
    }

    /// Stops the whole tree and waits until every actor has stopped.
    pub async fn stop(&self) {
        let _ = self
            .root
            .stop_and_wait(
                Some("controller stopping".into()),
                Some(std::time::Duration::from_secs(15)),
            )
            .await;
    }
}

/// Starts a controller. `log_level`, when given, is set to each accepted config's
/// `logging.level`.
pub async fn start_controller(
    sources: Sources,
    pipeline: Arc<dyn ReconcilePipeline>,
    sink: Arc<dyn PublishSink>,
    settings: ControllerSettings,
    addresses: ServerAddresses,
    edges: ControllerEdges,
    log_level: Option<LogLevelHandle>,
) -> Result<Controller, String> {
    let names: &[&'static str] = if settings.external_events {
        &["commentator", "metrics", "external"]
    } else {
        &["commentator", "metrics"]
    };
    let (fanout, mut receivers) = EventFanout::new(names, EVENT_QUEUE_CAPACITY);
    let external = if settings.external_events {
        receivers.pop()
    } else {
        None
    };
    let metrics_events = SharedEventReceiver::new(receivers.pop().ok_or("no metrics queue")?);
    let commentator_events =
        SharedEventReceiver::new(receivers.pop().ok_or("no commentator queue")?);
    let metrics = Arc::new(Metrics::new().map_err(|e| e.to_string())?);
    metrics.watch_event_fanout(&fanout);
    let services = Services {
        fanout,
        introspection: Introspection::new(),
        pipeline,
        render_thread: Arc::new(
            crate::actors::render_thread::RenderThread::start()
                .map_err(|e| format!("cannot start the render thread: {e}"))?,
        ),
        sources,
        settings,
        iteration_manager: Arc::new(RwLock::new(None)),
        readiness: Readiness::new(settings.ready_requires_deployment),
        generations: Arc::default(),
        log_level,
        current_iteration: Arc::default(),
    };
    let events = EventLog::default();
    let mut children = vec![
        ChildSpec::new(
            "commentator",
            ActorRole::Server,
            Commentator,
            CommentatorArgs {
                log: events.clone(),
                events: Some(commentator_events),
                busy: Some(services.introspection.clone()),
            },
        ),
        ChildSpec::new(
            "metrics",
            ActorRole::Server,
            MetricsActor,
            MetricsArgs {
                metrics: Arc::clone(&metrics),
                events: Some(metrics_events),
                busy: Some(services.introspection.clone()),
            },
        ),
    ];
    if let Some(addr) = &addresses.metrics {
        children.push(metrics_server_spec(addr.clone(), Arc::clone(&metrics)));
    }
    let debug_state = DebugState {
        stall_threshold: settings.stall_threshold,
        fault_injection: edges.fault_injection,
        ..DebugState::new(
            services.introspection.clone(),
            events.clone(),
            services.readiness.clone(),
        )
    };
    if let Some(addr) = &addresses.health {
        children.push(crate::actors::http::health_server_spec(
            addr.clone(),
            debug_state.clone(),
        ));
    }
    if let Some(addr) = &addresses.debug {
        children.push(debug_server_spec(addr.clone(), debug_state));
    }
    if let Some(webhook) = &addresses.webhook {
        children.push(crate::actors::http::webhook_server_spec(
            webhook.addr.clone(),
            (webhook.router)(&services),
            Arc::clone(&webhook.tls),
        ));
    }
    if !edges.leader_only.is_empty() {
        children.push(crate::actors::edge::LeaderEdges::spec(
            &services,
            edges.leader_only,
        ));
    }
    let root = start_root(&services, sink, children).await?;
    Ok(Controller {
        root,
        services,
        metrics,
        events,
        external_events: std::sync::Mutex::new(external),
    })
}
