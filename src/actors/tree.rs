//! Assembling the tree: the root supervisor, the IterationManager that owns the
//! config-iteration subtree, the ConfigLoader inside each iteration, and the specs of the
//! iteration's all-replica subtree.
//!
//! ```text
//! haptor (root supervisor)
//! ├── [servers, commentator, metrics — added by the caller]
//! ├── iteration-manager
//! └── config-iteration (supervisor, rebuilt when the watched resources change)
//!     ├── all-replica (supervisor)
//!     │   ├── validator-basic, validator-template, validator-jsonpath
//!     │   ├── config-loader
//!     │   ├── index-tracker, reconciler
//!     │   ├── watcher-<resource> × N
//!     │   ├── http-resources (when the config declares any)
//!     │   ├── discovery
//!     │   └── leader-elector
//!     └── leader-only (supervisor, only while leading)
//!         ├── config-publisher, deploy-scheduler, drift-monitor, coordinator
//!         └── deployer-<instance> × M
//! ```

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::context::{Iteration, Services, current, forward_watch, set};
use crate::actors::http_resources::HttpResources;
use crate::actors::leadership::{Discovery, LeaderElector};
use crate::actors::reconciler::Reconciler;
use crate::actors::validators::{ConfigValidator, ValidatorKind, gather_verdicts};
use crate::actors::watcher::{IndexTracker, ResourceWatcher};
use crate::messages::{ConfigLoaderMsg, EventKind, IterationManagerMsg, ReconcilerMsg};
use crate::observability::introspection::ErrorRecord;
use crate::pure::config::{HAProxyTemplateConfig, HAProxyTemplateConfigSpec};
use crate::pure::pipeline::CompiledConfig;
use crate::seams::PublishSink;
use crate::supervision::registry::{self, ActorInfo};
use crate::supervision::{
    ActorRole, ChildSpec, RestartPolicy, Supervisor, SupervisorArgs, SupervisorMsg,
};

/// The name of the config-iteration subtree under the root.
pub const CONFIG_ITERATION: &str = "config-iteration";

/// Whether two specs watch the same resources the same way (if so, a config change needs
/// no new iteration: the running one renders with the new templates).
fn same_watches(a: &HAProxyTemplateConfigSpec, b: &HAProxyTemplateConfigSpec) -> bool {
    a.watched_resources == b.watched_resources
        && a.watched_resources_ignore_fields == b.watched_resources_ignore_fields
        && a.http_resources == b.http_resources
}

/// Reports a config that cannot be used, each error naming the config object; the running
/// configuration stays.
fn reject(services: &Services, config: &HAProxyTemplateConfig, errors: Vec<String>) {
    let object = format!(
        "HAProxyTemplateConfig {}/{}",
        config.metadata.namespace.as_deref().unwrap_or("default"),
        config.metadata.name.as_deref().unwrap_or("<unnamed>")
    );
    let errors: Vec<String> = errors
        .into_iter()
        .map(|e| format!("{object}: {e}"))
        .collect();
    for error in &errors {
        tracing::warn!(%error, "config rejected; the previous configuration keeps running");
        services
            .introspection
            .record_error(ErrorRecord::new("config", error.clone()));
    }
    services
        .fanout
        .publish(None, EventKind::ConfigRejected { errors });
}

/// Reports an accepted config (the errors of configs rejected before it are resolved now)
/// and applies its log level.
fn accept(services: &Services, config: &HAProxyTemplateConfig) {
    services
        .introspection
        .set_config(serde_json::to_value(&config.spec).unwrap_or_default());
    services
        .introspection
        .resolve_errors_of("config", "a later configuration was accepted");
    services.fanout.publish(
        None,
        EventKind::ConfigAccepted {
            generation: config.metadata.generation,
        },
    );
    if let Some(log_level) = &services.log_level {
        let level = log_level.effective_level(config.spec.logging.level.as_deref());
        if let Err(e) = log_level.set_level(&level) {
            tracing::warn!(error = %e, "logging.level not applied");
        }
    }
}

/// Reads config changes inside an iteration, validates them with the scatter-gather over
/// the validators, and applies them: in place when the watched resources are unchanged,
/// through a new iteration otherwise.
#[derive(Clone)]
pub struct ConfigLoader {
    pub iteration: Arc<Iteration>,
}

pub struct ConfigLoaderState {
    source_task: tokio::task::JoinHandle<()>,
    /// The last config read was rejected: the running one coming back is accepted again.
    rejected: bool,
}

impl Actor for ConfigLoader {
    type Msg = ConfigLoaderMsg;
    type State = ConfigLoaderState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        // The iteration was built from the current value; a restarted loader compares the
        // current value too, in case it missed a change.
        let source_task = forward_watch(
            self.iteration.services.sources.config.clone(),
            myself,
            |config| {
                config.map(|config| ConfigLoaderMsg::ConfigChanged(Box::new((*config).clone())))
            },
        );
        Ok(ConfigLoaderState {
            source_task,
            rejected: false,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ConfigLoaderMsg::ConfigChanged(config) = msg;
        let services = &self.iteration.services;
        let _busy = services.introspection.busy("config-loader");
        let running = self.iteration.with_latest(|l| Arc::clone(&l.compiled));
        if *running.spec == config.spec {
            // Back to the running config after a rejection (the edit undone): it is the
            // config in use, accepted again, and the rejection's errors are resolved.
            if std::mem::take(&mut state.rejected) {
                accept(services, &config);
            }
            return Ok(());
        }
        let validators = current(&self.iteration.wiring.validators);
        let spec = Arc::new(config.spec.clone());
        let verdicts = gather_verdicts(
            &validators,
            Arc::clone(&spec),
            services.settings.validator_timeout,
        )
        .await;
        let problems: Vec<String> = verdicts.into_iter().flat_map(|v| v.problems).collect();
        if !problems.is_empty() {
            reject(services, &config, problems);
            state.rejected = true;
            return Ok(());
        }
        let compiled = match CompiledConfig::compile(config.spec.clone()) {
            Ok(compiled) => Arc::new(compiled),
            Err(e) => {
                reject(services, &config, vec![e.to_string()]);
                state.rejected = true;
                return Ok(());
            }
        };
        state.rejected = false;
        accept(services, &config);
        if same_watches(&running.spec, &compiled.spec) {
            self.iteration.update_config(compiled);
            if let Some(reconciler) = current(&self.iteration.wiring.reconciler) {
                let _ = reconciler.cast(ReconcilerMsg::Trigger {
                    reason: "config changed".into(),
                });
            }
        } else if let Some(manager) = current(&services.iteration_manager) {
            let _ = manager.cast(IterationManagerMsg::Rebuild(compiled));
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.source_task.abort();
        Ok(())
    }
}

/// The child spec of an all-replica actor that takes no start arguments.
fn all_replica<A>(name: impl Into<String>, actor: A) -> ChildSpec
where
    A: Actor<Arguments = ()> + Clone,
{
    ChildSpec::new(name, ActorRole::AllReplica, actor, ())
}

/// The spec of one config iteration: its all-replica subtree (the leader-only subtree is
/// added by the LeaderElector while this replica leads).
pub fn iteration_spec(
    services: &Services,
    compiled: Arc<CompiledConfig>,
    sink: Arc<dyn PublishSink>,
) -> Result<ChildSpec, String> {
    let stores = Arc::new(compiled.new_stores().map_err(|e| e.to_string())?);
    let iteration = Iteration::new(services.clone(), Arc::clone(&compiled), stores);
    crate::actors::context::set(&services.current_iteration, Arc::downgrade(&iteration));
    let mut children = Vec::new();
    for kind in [
        ValidatorKind::Basic,
        ValidatorKind::Template,
        ValidatorKind::JsonPath,
    ] {
        let validator = ConfigValidator {
            kind,
            iteration: Arc::clone(&iteration),
        };
        children.push(all_replica(format!("validator-{}", kind.name()), validator));
    }
    children.push(all_replica(
        "config-loader",
        ConfigLoader {
            iteration: Arc::clone(&iteration),
        },
    ));
    children.push(all_replica(
        "index-tracker",
        IndexTracker {
            iteration: Arc::clone(&iteration),
        },
    ));
    children.push(all_replica(
        "reconciler",
        Reconciler {
            iteration: Arc::clone(&iteration),
        },
    ));
    for (name, watched) in &compiled.spec.watched_resources {
        let watcher = ResourceWatcher {
            resource: name.clone(),
            watched: watched.clone(),
            iteration: Arc::clone(&iteration),
        };
        children.push(all_replica(format!("watcher-{name}"), watcher));
    }
    if !compiled.http_resources.is_empty() {
        children.push(all_replica(
            "http-resources",
            HttpResources {
                iteration: Arc::clone(&iteration),
            },
        ));
    }
    children.push(all_replica(
        "discovery",
        Discovery {
            iteration: Arc::clone(&iteration),
        },
    ));
    children.push(ChildSpec::new(
        "leader-elector",
        ActorRole::AllReplica,
        LeaderElector {
            iteration: Arc::clone(&iteration),
            sink,
        },
        (),
    ));
    let all_replica = SupervisorArgs {
        name: "all-replica".into(),
        policy: RestartPolicy::default(),
        children,
        on_restart: Some(services.restart_observer()),
    };
    let iteration_args = SupervisorArgs {
        name: CONFIG_ITERATION.into(),
        policy: RestartPolicy::default(),
        children: vec![ChildSpec::new(
            "all-replica",
            ActorRole::Supervisor,
            Supervisor,
            all_replica,
        )],
        on_restart: Some(services.restart_observer()),
    };
    Ok(ChildSpec::new(
        CONFIG_ITERATION,
        ActorRole::Supervisor,
        Supervisor,
        iteration_args,
    ))
}

/// Owns the config-iteration subtree: waits for the first valid config, starts an
/// iteration with it, and replaces the iteration when a config changes what is watched.
#[derive(Clone)]
pub struct IterationManager {
    pub services: Services,
    pub sink: Arc<dyn PublishSink>,
}

pub struct IterationManagerState {
    running: Option<Arc<CompiledConfig>>,
    bootstrap: tokio::task::JoinHandle<()>,
}

impl IterationManager {
    fn root(
        myself: &ActorRef<IterationManagerMsg>,
    ) -> Result<ActorRef<SupervisorMsg>, ActorProcessingErr> {
        myself
            .try_get_supervisor()
            .map(ActorRef::from)
            .ok_or_else(|| "the iteration manager has no supervisor".into())
    }
}

impl Actor for IterationManager {
    type Msg = IterationManagerMsg;
    type State = IterationManagerState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        set(&self.services.iteration_manager, Some(myself.clone()));
        // Until an iteration runs (and its ConfigLoader takes over), compile configs here.
        let services = self.services.clone();
        let mut source = services.sources.config.clone();
        let bootstrap = tokio::spawn(async move {
            loop {
                let next = source.borrow_and_update().clone();
                if let Some(config) = next {
                    match CompiledConfig::compile(config.spec.clone()) {
                        Ok(compiled) => {
                            accept(&services, &config);
                            let _ = myself.cast(IterationManagerMsg::Rebuild(Arc::new(compiled)));
                            return;
                        }
                        Err(e) => reject(&services, &config, vec![e.to_string()]),
                    }
                }
                if source.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(IterationManagerState {
            running: None,
            bootstrap,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let IterationManagerMsg::Rebuild(compiled) = msg;
        let _busy = self.services.introspection.busy("iteration-manager");
        let root = Self::root(&myself)?;
        if let Some(running) = &state.running {
            if running.spec == compiled.spec {
                return Ok(());
            }
            tracing::info!("the watched resources changed; rebuilding the config iteration");
            let _ = ractor::call!(root, SupervisorMsg::StopChild, CONFIG_ITERATION.to_string());
        }
        let spec = iteration_spec(
            &self.services,
            Arc::clone(&compiled),
            Arc::clone(&self.sink),
        )?;
        // Before the watchers start (they may sync before StartChild returns): what the new
        // iteration watches, and a fresh start for what the old one knew.
        let resources: Vec<String> = compiled.spec.watched_resources.keys().cloned().collect();
        let awaited = resources
            .iter()
            .cloned()
            .chain(compiled.critical_http_stores())
            .collect::<Vec<_>>();
        self.services
            .readiness
            .update(|r| r.iteration_started(awaited));
        self.services
            .introspection
            .iteration_started(resources.clone());
        self.services
            .fanout
            .publish(None, EventKind::IterationStarted { resources });
        match ractor::call!(root, SupervisorMsg::StartChild, spec) {
            Ok(Ok(())) => state.running = Some(compiled),
            Ok(Err(e)) => return Err(format!("could not start the config iteration: {e}").into()),
            Err(e) => return Err(format!("the root supervisor did not answer: {e}").into()),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.bootstrap.abort();
        Ok(())
    }
}

/// Starts the root supervisor with the given process-wide children (servers, commentator,
/// metrics) and the IterationManager. Returns the root.
pub async fn start_root(
    services: &Services,
    sink: Arc<dyn PublishSink>,
    mut children: Vec<ChildSpec>,
) -> Result<ActorRef<SupervisorMsg>, String> {
    children.push(ChildSpec::new(
        "iteration-manager",
        ActorRole::AllReplica,
        IterationManager {
            services: services.clone(),
            sink,
        },
        (),
    ));
    let args = SupervisorArgs {
        name: "haptor".into(),
        policy: RestartPolicy::default(),
        children,
        on_restart: Some(services.restart_observer()),
    };
    let (root, _) = Actor::spawn(None, Supervisor, args)
        .await
        .map_err(|e| format!("the actor tree did not start: {e}"))?;
    registry::register(
        root.get_id(),
        ActorInfo {
            name: "haptor".into(),
            role: ActorRole::Supervisor,
            restarts: 0,
        },
    );
    services.introspection.set_root(root.get_cell());
    Ok(root)
}
