//! The supervised edges of the tree: an [`EdgeTask`] actor owns one long-running task that
//! talks to the outside world (a Kubernetes watch, the Lease election, a status writer),
//! started from a factory so that a restart starts it afresh. The task ending, cleanly or by
//! a panic, is a failure of the actor: its supervisor restarts it with backoff, counts the
//! restart (`haptor_actor_restarts_total`, an `ActorRestarted` event) and escalates a
//! restart storm, and `/debug/actors` lists it with its role and restart count.
//!
//! Stopping an edge asks its task to stop (the [`EdgeStop`] it was started with) and waits
//! up to [`EDGE_STOP_GRACE`] before aborting it, so an edge that holds something outside
//! (the Lease) can hand it back. [`FaultInjection`] (opt-in, `haptor run
//! --debug-fault-injection`) lets `POST /debug/actors/{name}/panic` make an edge's task
//! panic, which is how the supervision of the edges is shown through the running binary.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, JoinHandle};

use crate::actors::context::{Services, forward_watch};
use crate::drivers::AbortOnDrop;
use crate::messages::{Leadership, LeadershipChange};
use crate::supervision::{
    ActorRole, ChildSpec, RestartObserver, RestartPolicy, Supervisor, SupervisorArgs, SupervisorMsg,
};

/// The name of the leader-only edges' subtree under the root.
pub const LEADER_ONLY_EDGES: &str = "leader-only-edges";

/// How long a stopping edge's task may take to end on its own before it is aborted.
pub const EDGE_STOP_GRACE: Duration = Duration::from_secs(5);

/// Resolves when the edge is asked to stop. Most edges ignore it (they are aborted); one
/// that must hand something back (the Lease) waits on it.
#[derive(Debug, Clone)]
pub struct EdgeStop(watch::Receiver<bool>);

impl EdgeStop {
    /// Waits until the edge is asked to stop (or its actor is gone).
    pub async fn requested(&mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }
}

/// Starts an edge's task; called again for every restart.
pub type EdgeStart = Arc<dyn Fn(EdgeStop) -> JoinHandle<()> + Send + Sync>;

/// The switches through which `POST /debug/actors/{name}/panic` reaches each edge, keyed by
/// the edge's name. Only present when fault injection is enabled.
#[derive(Debug, Clone, Default)]
pub struct FaultInjection(Arc<DashMap<String, Arc<Notify>>>);

impl FaultInjection {
    fn switch(&self, name: &str) -> Arc<Notify> {
        Arc::clone(self.0.entry(name.to_string()).or_default().value())
    }

    /// Makes the running task of edge `name` panic; `false` when no edge has that name.
    pub fn inject(&self, name: &str) -> bool {
        match self.0.get(name) {
            Some(switch) => {
                switch.notify_one();
                true
            }
            None => false,
        }
    }

    /// The names of the edges a fault can be injected into.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.0.iter().map(|e| e.key().clone()).collect();
        names.sort();
        names
    }
}

/// One supervised edge (see the module documentation).
#[derive(Clone)]
pub struct EdgeTask {
    pub name: String,
    pub start: EdgeStart,
    pub faults: Option<FaultInjection>,
    /// A one-shot edge's task may finish: a clean end stops the edge for good (a panic is
    /// still a failure, restarted).
    pub one_shot: bool,
}

impl EdgeTask {
    /// An edge named `name` whose task `start` starts.
    pub fn new(
        name: impl Into<String>,
        start: impl Fn(EdgeStop) -> JoinHandle<()> + Send + Sync + 'static,
    ) -> EdgeTask {
        EdgeTask {
            name: name.into(),
            start: Arc::new(start),
            faults: None,
            one_shot: false,
        }
    }

    /// An edge whose task finishes its job and ends (creating an object once): a clean end
    /// stops it without a restart.
    pub fn one_shot(
        name: impl Into<String>,
        start: impl Fn(EdgeStop) -> JoinHandle<()> + Send + Sync + 'static,
    ) -> EdgeTask {
        EdgeTask {
            one_shot: true,
            ..EdgeTask::new(name, start)
        }
    }

    /// Lets `faults` make this edge's task panic.
    pub fn with_faults(mut self, faults: Option<FaultInjection>) -> EdgeTask {
        self.faults = faults;
        self
    }

    /// The child spec of this edge, in `role` (all-replica under the root, leader-only in
    /// the leader-only subtree).
    pub fn spec(self, role: ActorRole) -> ChildSpec {
        let one_shot = self.one_shot;
        let spec = ChildSpec::new(self.name.clone(), role, self, ());
        if one_shot { spec.transient() } else { spec }
    }
}

/// What an edge actor is told.
#[derive(Debug)]
pub enum EdgeMsg {
    /// The task ended: `Ok` when it returned, `Err` with the panic's message.
    Ended(Result<(), String>),
}

pub struct EdgeState {
    stop: watch::Sender<bool>,
    ended: watch::Receiver<bool>,
    task: AbortHandle,
    monitor: JoinHandle<()>,
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

impl Actor for EdgeTask {
    type Msg = EdgeMsg;
    type State = EdgeState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        let (stop, stop_rx) = watch::channel(false);
        let inner = (self.start)(EdgeStop(stop_rx));
        let inner_abort = inner.abort_handle();
        let fault = self.faults.as_ref().map(|f| f.switch(&self.name));
        let name = self.name.clone();
        // The edge's task as the supervisor sees it: the driver's task, or a panic injected
        // through the debug endpoint (a real panic, caught by tokio like any other).
        let task = tokio::spawn(async move {
            let guard = AbortOnDrop(inner_abort);
            match fault {
                Some(fault) => {
                    tokio::select! {
                        outcome = inner => resume(outcome),
                        () = fault.notified() => {
                            drop(guard);
                            panic!("a fault was injected into edge {name}");
                        }
                    }
                }
                None => resume(inner.await),
            }
        });
        let task_abort = task.abort_handle();
        let (ended_tx, ended) = watch::channel(false);
        let monitor = tokio::spawn(async move {
            let outcome = match task.await {
                Ok(()) => Ok(()),
                Err(e) if e.is_panic() => Err(panic_message(&*e.into_panic())),
                Err(e) => Err(e.to_string()),
            };
            let _ = ended_tx.send(true);
            // A stopped edge is not told: its stop ended the task.
            let _ = myself.cast(EdgeMsg::Ended(outcome));
        });
        Ok(EdgeState {
            stop,
            ended,
            task: task_abort,
            monitor,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let EdgeMsg::Ended(outcome) = msg;
        match outcome {
            Ok(()) if self.one_shot => {
                tracing::debug!(edge = %self.name, "the edge finished its job");
                myself.stop(Some("finished".into()));
                Ok(())
            }
            Ok(()) => Err(format!("edge {}: its task ended", self.name).into()),
            Err(panic) => Err(format!("edge {}: its task panicked: {panic}", self.name).into()),
        }
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = state.stop.send(true);
        if tokio::time::timeout(EDGE_STOP_GRACE, state.ended.wait_for(|ended| *ended))
            .await
            .is_err()
        {
            tracing::warn!(edge = %self.name, "the edge's task did not stop within {EDGE_STOP_GRACE:?}; aborting it");
        }
        state.task.abort();
        state.monitor.abort();
        Ok(())
    }
}

/// Starts the leader-only edges (a subtree of the root named [`LEADER_ONLY_EDGES`]) when
/// this replica gains leadership, stops them (waiting for each) when it loses it, and
/// restarts them on a new term. They live beside the config iterations rather than in
/// one, so that a leader with no valid config yet still reports (its Events say why the
/// config is refused) and a rebuilt iteration does not restart them.
#[derive(Clone)]
pub struct LeaderEdges {
    pub edges: Vec<ChildSpec>,
    pub leadership: watch::Receiver<Leadership>,
    pub on_restart: Option<RestartObserver>,
}

impl LeaderEdges {
    /// The root's child that manages `edges`, following the controller's leadership.
    pub fn spec(services: &Services, edges: Vec<ChildSpec>) -> ChildSpec {
        ChildSpec::new(
            "leader-edges",
            ActorRole::AllReplica,
            LeaderEdges {
                edges,
                leadership: services.sources.leadership.clone(),
                on_restart: Some(services.restart_observer()),
            },
            (),
        )
    }

    fn subtree(&self) -> ChildSpec {
        let args = SupervisorArgs {
            name: LEADER_ONLY_EDGES.into(),
            policy: RestartPolicy::default(),
            children: self.edges.clone(),
            on_restart: self.on_restart.clone(),
        };
        ChildSpec::new(LEADER_ONLY_EDGES, ActorRole::Supervisor, Supervisor, args)
    }

    async fn start(&self, root: &ActorRef<SupervisorMsg>) -> Result<(), ActorProcessingErr> {
        match ractor::call!(root, SupervisorMsg::StartChild, self.subtree()) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("could not start the leader-only edges: {e}").into()),
            Err(e) => Err(format!("the root supervisor did not answer: {e}").into()),
        }
    }

    async fn stop(root: &ActorRef<SupervisorMsg>) {
        // StopChild returns once the subtree and every edge in it has stopped.
        let _ = ractor::call!(
            root,
            SupervisorMsg::StopChild,
            LEADER_ONLY_EDGES.to_string()
        );
    }
}

/// What the leader-edges manager is told: the leadership now.
#[derive(Debug)]
pub struct LeadershipNow(pub Leadership);

pub struct LeaderEdgesState {
    /// The leadership the running subtree (if any) was started for.
    running: Leadership,
    source_task: JoinHandle<()>,
}

impl Actor for LeaderEdges {
    type Msg = LeadershipNow;
    type State = LeaderEdgesState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        // A restarted manager may find a subtree its predecessor left: it is stopped, and
        // the current leadership (forwarded first) starts a new one if this replica leads.
        if let Some(root) = myself.try_get_supervisor() {
            LeaderEdges::stop(&ActorRef::from(root)).await;
        }
        let source_task = forward_watch(self.leadership.clone(), myself, |now| {
            Some(LeadershipNow(now))
        });
        Ok(LeaderEdgesState {
            running: Leadership::default(),
            source_task,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        LeadershipNow(next): Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let root: ActorRef<SupervisorMsg> = myself
            .try_get_supervisor()
            .map(ActorRef::from)
            .ok_or("the leader-edges manager has no supervisor")?;
        let change = state.running.change_to(next);
        state.running = next;
        match change {
            LeadershipChange::Gained => self.start(&root).await?,
            LeadershipChange::Lost => LeaderEdges::stop(&root).await,
            LeadershipChange::NewTerm => {
                LeaderEdges::stop(&root).await;
                self.start(&root).await?;
            }
            LeadershipChange::Unchanged => {}
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

/// A driver task's outcome, re-raised in the edge's own task: a panic stays a panic.
fn resume(outcome: Result<(), tokio::task::JoinError>) {
    if let Err(e) = outcome
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervision::{RestartPolicy, Supervisor, SupervisorArgs, SupervisorMsg};
    use std::sync::atomic::{AtomicU32, Ordering};

    async fn supervised(edge: EdgeTask) -> ActorRef<SupervisorMsg> {
        let args = SupervisorArgs {
            name: "edges".into(),
            policy: RestartPolicy {
                backoff_base: Duration::from_millis(1),
                ..RestartPolicy::default()
            },
            children: vec![edge.spec(ActorRole::AllReplica)],
            on_restart: None,
        };
        let (supervisor, _) = Actor::spawn(None, Supervisor, args).await.expect("spawn");
        supervisor
    }

    async fn restarts(supervisor: &ActorRef<SupervisorMsg>) -> u32 {
        let children = ractor::call!(supervisor, SupervisorMsg::Children).expect("children");
        children[0].restarts
    }

    async fn wait_until(mut condition: impl AsyncFnMut() -> bool) {
        for _ in 0..500 {
            if condition().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the condition never held");
    }

    #[tokio::test]
    async fn an_edge_whose_task_ends_is_started_again() {
        let starts = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&starts);
        let edge = EdgeTask::new("ends", move |_| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if n == 0 {
                    return;
                }
                std::future::pending::<()>().await;
            })
        });
        let supervisor = supervised(edge).await;
        wait_until(async || starts.load(Ordering::SeqCst) == 2).await;
        assert_eq!(restarts(&supervisor).await, 1);
        supervisor.stop_and_wait(None, None).await.expect("stop");
    }

    #[tokio::test]
    async fn an_injected_fault_panics_the_task_and_the_edge_restarts() {
        let faults = FaultInjection::default();
        let starts = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&starts);
        let edge = EdgeTask::new("watch", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(std::future::pending::<()>())
        })
        .with_faults(Some(faults.clone()));
        let supervisor = supervised(edge).await;
        wait_until(async || starts.load(Ordering::SeqCst) == 1).await;
        assert_eq!(faults.names(), vec!["watch".to_string()]);
        assert!(faults.inject("watch"));
        assert!(!faults.inject("no-such-edge"));
        wait_until(async || starts.load(Ordering::SeqCst) == 2).await;
        assert_eq!(restarts(&supervisor).await, 1);
        supervisor.stop_and_wait(None, None).await.expect("stop");
    }

    #[tokio::test]
    async fn a_one_shot_edge_that_finishes_stops_without_a_restart() {
        let starts = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&starts);
        let edge = EdgeTask::one_shot("create-once", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async {})
        });
        let supervisor = supervised(edge).await;
        wait_until(async || {
            ractor::call!(supervisor, SupervisorMsg::Children)
                .expect("children")
                .is_empty()
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        supervisor.stop_and_wait(None, None).await.expect("stop");
    }

    #[tokio::test]
    async fn a_stopping_edge_lets_its_task_finish_what_it_holds() {
        let handed_back = Arc::new(AtomicU32::new(0));
        let flag = Arc::clone(&handed_back);
        let edge = EdgeTask::new("lease", move |mut stop| {
            let flag = Arc::clone(&flag);
            tokio::spawn(async move {
                stop.requested().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                flag.store(1, Ordering::SeqCst);
            })
        });
        let supervisor = supervised(edge).await;
        supervisor.stop_and_wait(None, None).await.expect("stop");
        assert_eq!(handed_back.load(Ordering::SeqCst), 1);
    }
}
