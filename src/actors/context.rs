//! What the actors of one controller share: the process-wide [`Services`] (event fan-out,
//! introspection, validator, sources), the pluggable [`Sources`] of configs, resources,
//! leadership and instances, the per-iteration [`Wiring`] through which actors find each
//! other (refreshed when one restarts), and the [`LatestState`] that is replayed into the
//! leader-only subtree when this replica becomes leader.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::watch;

use crate::messages::{
    ConfigPublisherMsg, CoordinatorMsg, DeploySchedulerMsg, EventFanout, IndexTrackerMsg, Instance,
    IterationManagerMsg, Leadership, ReconcilerMsg, ValidatedRender, ValidatorMsg,
};
use crate::observability::introspection::Introspection;
use crate::pure::config::HAProxyTemplateConfig;
use crate::pure::pipeline::CompiledConfig;
use crate::pure::store::Stores;
use crate::seams::{ReconcilePipeline, ResourceSourceFactory};

/// Where the controller's inputs come from. Each is the latest value of a watch channel, so
/// a restarted actor picks up the current state.
#[derive(Clone)]
pub struct Sources {
    pub config: watch::Receiver<Option<Arc<HAProxyTemplateConfig>>>,
    pub resources: Arc<dyn ResourceSourceFactory>,
    pub leadership: watch::Receiver<Leadership>,
    pub instances: watch::Receiver<Vec<Instance>>,
    /// Fetches the config's HTTP resources (`spec.httpResources`).
    pub http: Arc<dyn crate::seams::HttpFetcher>,
}

/// Timing settings of the actor system.
#[derive(Debug, Clone, Copy)]
pub struct ControllerSettings {
    /// How long each config validator may take before the config counts as invalid.
    pub validator_timeout: Duration,
    /// First retry delay of a failing Deployer; doubles up to `deploy_backoff_max`.
    pub deploy_backoff_base: Duration,
    pub deploy_backoff_max: Duration,
    /// Whether `/readyz` also waits until every instance took a configuration (a controller
    /// that owns its HAProxy, as `haptor local` does).
    pub ready_requires_deployment: bool,
    /// An actor busy with one message (or a render) for longer than this makes `/healthz`
    /// fail naming it.
    pub stall_threshold: Duration,
    /// Whether the event fan-out gets a third queue for a consumer outside the tree
    /// (`Controller::external_events`).
    pub external_events: bool,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            validator_timeout: Duration::from_secs(5),
            deploy_backoff_base: Duration::from_millis(500),
            deploy_backoff_max: Duration::from_secs(30),
            ready_requires_deployment: false,
            stall_threshold: crate::actors::http::DEFAULT_STALL_THRESHOLD,
            external_events: false,
        }
    }
}

/// Process-wide services every actor may use. Cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub fanout: EventFanout,
    pub introspection: Introspection,
    pub pipeline: Arc<dyn ReconcilePipeline>,
    /// Where the coordinator runs the pipeline (see `render_thread`).
    pub render_thread: Arc<crate::actors::render_thread::RenderThread>,
    pub sources: Sources,
    pub settings: ControllerSettings,
    pub iteration_manager: Arc<RwLock<Option<ActorRef<IterationManagerMsg>>>>,
    /// What `/readyz` waits for: the running iteration's indexes and, where required, the
    /// instances' first deployments.
    pub readiness: crate::actors::http::Readiness,
    /// The last render generation handed out by any coordinator of this process. Renders
    /// are numbered from here, so a new iteration's (or a new leader-only subtree's) first
    /// render is newer than everything the long-lived deploy targets hold.
    pub generations: Arc<std::sync::atomic::AtomicU64>,
    /// Changes the process's log level to an accepted config's `logging.level` (`None` when
    /// the process installed no logging of its own, as in tests).
    pub log_level: Option<crate::telemetry::LogLevelHandle>,
    /// The running config iteration (set as each one is built): what the admission webhook
    /// lays proposed objects over. Weak: a stopped iteration is not kept alive by it.
    pub current_iteration: Arc<RwLock<std::sync::Weak<Iteration>>>,
}

impl Services {
    /// Publishes every restart a supervisor decides as an `ActorRestarted` event
    /// (`haptor_actor_restarts_total`, and a warning from the Commentator).
    pub fn restart_observer(&self) -> crate::supervision::RestartObserver {
        let fanout = self.fanout.clone();
        crate::supervision::RestartObserver::new(move |actor, restarts| {
            fanout.publish(
                None,
                crate::messages::EventKind::ActorRestarted {
                    actor: actor.to_string(),
                    restarts,
                },
            );
        })
    }

    /// The running config iteration, if one is built and not yet dropped.
    pub fn iteration(&self) -> Option<Arc<Iteration>> {
        current(&self.current_iteration).upgrade()
    }

    /// The next render generation: above every generation handed out before in this
    /// process.
    pub fn next_generation(&self) -> u64 {
        self.generations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }
}

/// How the actors of one config iteration find each other. Each actor registers itself in
/// `pre_start` (and again after a restart), so senders always reach the live instance.
#[derive(Default)]
pub struct Wiring {
    pub reconciler: RwLock<Option<ActorRef<ReconcilerMsg>>>,
    pub index_tracker: RwLock<Option<ActorRef<IndexTrackerMsg>>>,
    pub coordinator: RwLock<Option<ActorRef<CoordinatorMsg>>>,
    pub scheduler: RwLock<Option<ActorRef<DeploySchedulerMsg>>>,
    pub publisher: RwLock<Option<ActorRef<ConfigPublisherMsg>>>,
    pub validators: RwLock<Vec<(&'static str, ActorRef<ValidatorMsg>)>>,
}

/// Reads a wiring slot; a poisoned lock still holds a usable reference.
pub fn current<T: Clone>(slot: &RwLock<T>) -> T {
    slot.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Writes a wiring slot.
pub fn set<T>(slot: &RwLock<T>, value: T) {
    *slot.write().unwrap_or_else(|p| p.into_inner()) = value;
}

/// The latest state of one config iteration: what the leader-only subtree needs when it
/// starts (state replay), kept by the all-replica actors whether or not this replica leads.
pub struct LatestState {
    pub compiled: Arc<CompiledConfig>,
    pub stores: Arc<Stores>,
    pub leadership: Leadership,
    pub all_synced: bool,
    pub instances: Vec<Instance>,
    pub last_render: Option<ValidatedRender>,
    /// Each HTTP resource's state as last published, replayed into a new publisher.
    pub http_resources: std::collections::BTreeMap<String, crate::pure::config::HttpResourceStatus>,
}

/// Everything one config iteration shares.
pub struct Iteration {
    pub services: Services,
    pub wiring: Wiring,
    pub latest: Mutex<LatestState>,
    /// Counts in-place config changes (same watches, new values), for actors that hold a
    /// setting across messages (the DriftMonitor's interval) and must apply a new one at once.
    pub config_updates: watch::Sender<u64>,
}

impl Iteration {
    pub fn new(
        services: Services,
        compiled: Arc<CompiledConfig>,
        stores: Arc<Stores>,
    ) -> Arc<Iteration> {
        let leadership = *services.sources.leadership.borrow();
        let instances = services.sources.instances.borrow().clone();
        Arc::new(Iteration {
            services,
            wiring: Wiring::default(),
            latest: Mutex::new(LatestState {
                compiled,
                stores,
                leadership,
                all_synced: false,
                instances,
                last_render: None,
                http_resources: std::collections::BTreeMap::new(),
            }),
            config_updates: watch::channel(0).0,
        })
    }

    /// Replaces the running config in place (its watches are unchanged) and tells the actors
    /// that hold settings of it.
    pub fn update_config(&self, compiled: Arc<CompiledConfig>) {
        self.with_latest(|l| l.compiled = compiled);
        self.config_updates.send_modify(|n| *n += 1);
    }

    /// Runs `f` on the latest state.
    pub fn with_latest<T>(&self, f: impl FnOnce(&mut LatestState) -> T) -> T {
        let mut guard = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

/// Forwards the current value of a watch channel, then every change, into an actor's mailbox
/// as the message `to_message` makes of it (`None`: nothing to send for that value). Ends
/// when the channel closes or the actor is gone. The actor aborts the returned task when it
/// stops.
pub fn forward_watch<T, M>(
    mut source: watch::Receiver<T>,
    target: ActorRef<M>,
    to_message: impl Fn(T) -> Option<M> + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    T: Clone + Send + Sync + 'static,
    M: ractor::Message,
{
    tokio::spawn(async move {
        loop {
            let value = source.borrow_and_update().clone();
            if let Some(message) = to_message(value)
                && target.cast(message).is_err()
            {
                return;
            }
            if source.changed().await.is_err() {
                return;
            }
        }
    })
}
