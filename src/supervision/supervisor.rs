//! The one-for-one supervisor actor.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SpawnErr,
    SupervisionEvent,
};
use serde::Serialize;

use super::registry::{self, ActorInfo, ActorRole};

/// Whether a child is restarted after it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Restarted whenever it stops, cleanly or not.
    Permanent,
    /// Restarted only when it fails (panics or returns an error); a clean stop is final.
    Transient,
}

/// How eagerly a supervisor restarts its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// At most this many restarts of one child within `window`; one more and the supervisor
    /// fails, handing the decision to its own supervisor.
    pub max_restarts: usize,
    pub window: Duration,
    /// Delay before the first restart; doubled for each further restart within the window.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
        }
    }
}

impl RestartPolicy {
    fn backoff(&self, recent_restarts: usize) -> Duration {
        let exponent = recent_restarts.saturating_sub(1).min(16) as u32;
        self.backoff_base
            .saturating_mul(2u32.saturating_pow(exponent))
            .min(self.backoff_max)
    }
}

type SpawnFn =
    Arc<dyn Fn(ActorCell) -> BoxFuture<'static, Result<ActorCell, SpawnErr>> + Send + Sync>;

/// How to start (and restart) one child.
#[derive(Clone)]
pub struct ChildSpec {
    pub name: String,
    pub role: ActorRole,
    pub restart: Restart,
    spawn: SpawnFn,
}

impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildSpec")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("restart", &self.restart)
            .finish()
    }
}

impl ChildSpec {
    /// A child built from an actor value and its start arguments, both cloned for every
    /// (re)start.
    pub fn new<A>(
        name: impl Into<String>,
        role: ActorRole,
        actor: A,
        args: A::Arguments,
    ) -> ChildSpec
    where
        A: Actor + Clone,
        A::Arguments: Clone + Sync,
    {
        let spawn: SpawnFn = Arc::new(move |supervisor: ActorCell| {
            let actor = actor.clone();
            let args = args.clone();
            Box::pin(async move {
                let (actor_ref, _) = Actor::spawn_linked(None, actor, args, supervisor).await?;
                Ok(actor_ref.get_cell())
            })
        });
        ChildSpec {
            name: name.into(),
            role,
            restart: Restart::Permanent,
            spawn,
        }
    }

    /// Makes the child transient: a clean stop is not restarted.
    pub fn transient(mut self) -> ChildSpec {
        self.restart = Restart::Transient;
        self
    }
}

/// What a supervisor reports about one child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildStatus {
    pub name: String,
    pub running: bool,
    pub restarts: u32,
}

/// Messages a supervisor accepts.
pub enum SupervisorMsg {
    /// Starts a new child (its name must be unused under this supervisor).
    StartChild(ChildSpec, RpcReplyPort<Result<(), String>>),
    /// Stops a child, waits for it and forgets it; replies `false` when it was unknown.
    StopChild(String, RpcReplyPort<bool>),
    /// The children and their restart counts.
    Children(RpcReplyPort<Vec<ChildStatus>>),
    /// The cell of a running child, to talk to it.
    ChildCell(String, RpcReplyPort<Option<ActorCell>>),
    /// Internal: restart a child after its backoff. `generation` guards against a restart
    /// scheduled for a slot that has since been replaced.
    RestartChild { name: String, generation: u64 },
}

/// Told of every restart a supervisor decides: the child's name and its restart count
/// (the controller publishes it as an observability event, which the metrics count and the
/// Commentator logs).
#[derive(Clone)]
pub struct RestartObserver(Arc<ObserveRestart>);

type ObserveRestart = dyn Fn(&str, u32) + Send + Sync;

impl RestartObserver {
    pub fn new(observe: impl Fn(&str, u32) + Send + Sync + 'static) -> RestartObserver {
        RestartObserver(Arc::new(observe))
    }
}

impl std::fmt::Debug for RestartObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RestartObserver")
    }
}

/// Arguments of a supervisor: its name in the registry, its policy, initial children and
/// who is told of restarts. Cloneable, so a supervisor can itself be a [`ChildSpec`] of
/// another supervisor.
#[derive(Debug, Clone)]
pub struct SupervisorArgs {
    pub name: String,
    pub policy: RestartPolicy,
    pub children: Vec<ChildSpec>,
    pub on_restart: Option<RestartObserver>,
}

/// A one-for-one supervisor (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervisor;

struct ChildSlot {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    restarts: u32,
    recent: VecDeque<Instant>,
    generation: u64,
}

pub struct SupervisorState {
    name: String,
    policy: RestartPolicy,
    on_restart: Option<RestartObserver>,
    slots: BTreeMap<String, ChildSlot>,
    by_id: HashMap<ActorId, String>,
}

impl SupervisorState {
    async fn start(&mut self, myself: &ActorCell, name: &str) -> Result<(), SpawnErr> {
        let Some(slot) = self.slots.get_mut(name) else {
            return Ok(());
        };
        let cell = (slot.spec.spawn)(myself.clone()).await?;
        registry::register(
            cell.get_id(),
            ActorInfo {
                name: slot.spec.name.clone(),
                role: slot.spec.role,
                restarts: slot.restarts,
            },
        );
        self.by_id.insert(cell.get_id(), name.to_string());
        slot.cell = Some(cell);
        Ok(())
    }

    /// Records a restart of `name` and returns the backoff, or an error when the restart
    /// intensity is exhausted.
    fn note_restart(&mut self, name: &str) -> Result<(Duration, u64), ActorProcessingErr> {
        let policy = self.policy;
        let supervisor = self.name.clone();
        let Some(slot) = self.slots.get_mut(name) else {
            return Err(format!("unknown child {name}").into());
        };
        let now = Instant::now();
        while slot
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > policy.window)
        {
            slot.recent.pop_front();
        }
        if slot.recent.len() >= policy.max_restarts {
            return Err(format!(
                "supervisor {supervisor}: child {name} failed more than {} times within {:?}; escalating",
                policy.max_restarts, policy.window
            )
            .into());
        }
        slot.recent.push_back(now);
        slot.restarts += 1;
        slot.generation += 1;
        if let Some(observer) = &self.on_restart {
            (observer.0)(name, slot.restarts);
        }
        Ok((policy.backoff(slot.recent.len()), slot.generation))
    }

    async fn restart_or_escalate(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        name: &str,
    ) -> Result<(), ActorProcessingErr> {
        let (delay, generation) = self.note_restart(name).inspect_err(|e| {
            tracing::error!(supervisor = %self.name, child = name, "{e}");
        })?;
        tracing::warn!(supervisor = %self.name, child = name, delay_ms = delay.as_millis() as u64, "restarting child");
        if delay.is_zero() {
            return self.restart_now(myself, name).await;
        }
        let target = myself.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            // The supervisor may have stopped meanwhile; then there is nothing to restart.
            let _ = target.cast(SupervisorMsg::RestartChild { name, generation });
        });
        Ok(())
    }

    async fn restart_now(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        name: &str,
    ) -> Result<(), ActorProcessingErr> {
        match self.start(&myself.get_cell(), name).await {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::error!(supervisor = %self.name, child = name, error = %e, "child failed to start");
                Box::pin(self.restart_or_escalate(myself, name)).await
            }
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = SupervisorState {
            name: args.name,
            policy: args.policy,
            on_restart: args.on_restart,
            slots: BTreeMap::new(),
            by_id: HashMap::new(),
        };
        for spec in args.children {
            let name = spec.name.clone();
            state.slots.insert(
                name.clone(),
                ChildSlot {
                    spec,
                    cell: None,
                    restarts: 0,
                    recent: VecDeque::new(),
                    generation: 0,
                },
            );
            state
                .start(&myself.get_cell(), &name)
                .await
                .map_err(|e| format!("{}: child {name} failed to start: {e}", state.name))?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::StartChild(spec, reply) => {
                let name = spec.name.clone();
                if state.slots.contains_key(&name) {
                    let _ = reply.send(Err(format!("a child named {name} already exists")));
                    return Ok(());
                }
                state.slots.insert(
                    name.clone(),
                    ChildSlot {
                        spec,
                        cell: None,
                        restarts: 0,
                        recent: VecDeque::new(),
                        generation: 0,
                    },
                );
                let result = state
                    .start(&myself.get_cell(), &name)
                    .await
                    .map_err(|e| e.to_string());
                if result.is_err() {
                    state.slots.remove(&name);
                }
                let _ = reply.send(result);
            }
            SupervisorMsg::StopChild(name, reply) => {
                let known = match state.slots.remove(&name) {
                    Some(slot) => {
                        if let Some(cell) = slot.cell {
                            state.by_id.remove(&cell.get_id());
                            registry::unregister(cell.get_id());
                            let _ = cell
                                .stop_and_wait(
                                    Some("stopped by supervisor".into()),
                                    Some(Duration::from_secs(10)),
                                )
                                .await;
                        }
                        true
                    }
                    None => false,
                };
                let _ = reply.send(known);
            }
            SupervisorMsg::Children(reply) => {
                let children = state
                    .slots
                    .values()
                    .map(|s| ChildStatus {
                        name: s.spec.name.clone(),
                        running: s.cell.is_some(),
                        restarts: s.restarts,
                    })
                    .collect();
                let _ = reply.send(children);
            }
            SupervisorMsg::ChildCell(name, reply) => {
                let _ = reply.send(state.slots.get(&name).and_then(|s| s.cell.clone()));
            }
            SupervisorMsg::RestartChild { name, generation } => {
                let current = state
                    .slots
                    .get(&name)
                    .is_some_and(|s| s.generation == generation && s.cell.is_none());
                if current {
                    state.restart_now(&myself, &name).await?;
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        let id = cell.get_id();
        registry::unregister(id);
        let Some(name) = state.by_id.remove(&id) else {
            return Ok(());
        };
        let Some(slot) = state.slots.get_mut(&name) else {
            return Ok(());
        };
        slot.cell = None;
        match (&failure, slot.spec.restart) {
            (None, Restart::Transient) => {
                tracing::debug!(supervisor = %state.name, child = %name, "child stopped");
                state.slots.remove(&name);
                Ok(())
            }
            _ => {
                tracing::warn!(supervisor = %state.name, child = %name, error = failure.as_deref().unwrap_or("stopped"), "child exited");
                state.restart_or_escalate(&myself, &name).await
            }
        }
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stop children before this supervisor disappears, so none keeps running and each
        // gets its post_stop. Their unregistration happens here because this supervisor will
        // not process their termination events any more.
        myself
            .stop_children_and_wait(
                Some("supervisor stopping".into()),
                Some(Duration::from_secs(10)),
            )
            .await;
        for id in state.by_id.keys() {
            registry::unregister(*id);
        }
        registry::unregister(myself.get_id());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
