use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ractor::{Actor, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort};

use super::*;
use crate::supervision::registry::actor_tree;

/// A child that counts its starts, answers pings and panics on request.
#[derive(Clone)]
struct Crashy {
    starts: Arc<AtomicUsize>,
}

enum CrashyMsg {
    Ping(RpcReplyPort<()>),
    Panic,
}

impl Actor for Crashy {
    type Msg = CrashyMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CrashyMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            CrashyMsg::Panic => panic!("asked to panic"),
        }
        Ok(())
    }
}

fn quick_policy(max_restarts: usize) -> RestartPolicy {
    RestartPolicy {
        max_restarts,
        window: Duration::from_secs(30),
        backoff_base: Duration::from_millis(5),
        backoff_max: Duration::from_millis(20),
    }
}

async fn child_ref(
    supervisor: &ActorRef<SupervisorMsg>,
    name: &str,
) -> Option<ActorRef<CrashyMsg>> {
    let cell = ractor::call!(supervisor, SupervisorMsg::ChildCell, name.to_string()).ok()??;
    Some(ActorRef::from(cell))
}

/// Waits until the child has started `n` times and answers a ping.
async fn wait_for_start(supervisor: &ActorRef<SupervisorMsg>, starts: &AtomicUsize, n: usize) {
    for _ in 0..200 {
        if starts.load(Ordering::SeqCst) >= n
            && let Some(child) = child_ref(supervisor, "crashy").await
            && ractor::call!(child, CrashyMsg::Ping).is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "child did not reach {n} starts (has {})",
        starts.load(Ordering::SeqCst)
    );
}

async fn spawn_supervisor(
    name: &str,
    max_restarts: usize,
    starts: Arc<AtomicUsize>,
) -> ActorRef<SupervisorMsg> {
    let child = ChildSpec::new("crashy", ActorRole::AllReplica, Crashy { starts }, ());
    let args = SupervisorArgs {
        name: name.into(),
        policy: quick_policy(max_restarts),
        children: vec![child],
        on_restart: None,
    };
    let (supervisor, _) = Actor::spawn(None, Supervisor, args)
        .await
        .expect("supervisor starts");
    registry::register(
        supervisor.get_id(),
        ActorInfo {
            name: name.into(),
            role: ActorRole::Supervisor,
            restarts: 0,
        },
    );
    supervisor
}

#[tokio::test]
async fn a_child_that_panics_is_restarted_and_the_tree_is_whole_again() {
    let starts = Arc::new(AtomicUsize::new(0));
    let supervisor = spawn_supervisor("one-for-one", 3, starts.clone()).await;
    wait_for_start(&supervisor, &starts, 1).await;

    let child = child_ref(&supervisor, "crashy").await.expect("child runs");
    let _ = child.cast(CrashyMsg::Panic);
    wait_for_start(&supervisor, &starts, 2).await;

    let tree = actor_tree(&supervisor.get_cell());
    let node = tree
        .find("crashy")
        .expect("the restarted child is in the tree");
    assert_eq!(node.restarts, 1);
    assert_eq!(node.status, "running");
    assert_eq!(tree.children.len(), 1, "{}", tree.to_text());
    let children = ractor::call!(supervisor, SupervisorMsg::Children).expect("answers");
    assert_eq!(
        children,
        vec![ChildStatus {
            name: "crashy".into(),
            running: true,
            restarts: 1
        }]
    );
    supervisor.stop_and_wait(None, None).await.expect("stops");
}

#[tokio::test]
async fn a_child_failing_more_often_than_the_intensity_allows_escalates_to_its_supervisor() {
    let starts = Arc::new(AtomicUsize::new(0));
    // outer supervises inner; inner allows one restart of crashy.
    let inner_starts = starts.clone();
    let inner_args = SupervisorArgs {
        name: "inner".into(),
        policy: quick_policy(1),
        children: vec![ChildSpec::new(
            "crashy",
            ActorRole::AllReplica,
            Crashy {
                starts: inner_starts,
            },
            (),
        )],
        on_restart: None,
    };
    let outer_args = SupervisorArgs {
        name: "outer".into(),
        policy: quick_policy(5),
        children: vec![ChildSpec::new(
            "inner",
            ActorRole::Supervisor,
            Supervisor,
            inner_args,
        )],
        on_restart: None,
    };
    let (outer, _) = Actor::spawn(None, Supervisor, outer_args)
        .await
        .expect("outer starts");
    let inner = || async {
        let cell = ractor::call!(outer, SupervisorMsg::ChildCell, "inner".to_string())
            .ok()
            .flatten();
        cell.map(ActorRef::<SupervisorMsg>::from)
    };
    let first_inner = inner().await.expect("inner runs");
    wait_for_start(&first_inner, &starts, 1).await;

    // First panic: inner restarts crashy (within its intensity of 1).
    let _ = child_ref(&first_inner, "crashy")
        .await
        .expect("crashy")
        .cast(CrashyMsg::Panic);
    wait_for_start(&first_inner, &starts, 2).await;
    // Second panic: over the intensity, inner fails and outer restarts inner.
    let _ = child_ref(&first_inner, "crashy")
        .await
        .expect("crashy")
        .cast(CrashyMsg::Panic);

    for _ in 0..200 {
        if matches!(first_inner.get_status(), ActorStatus::Stopped) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        matches!(first_inner.get_status(), ActorStatus::Stopped),
        "inner escalated by failing"
    );
    let children = loop {
        let children = ractor::call!(outer, SupervisorMsg::Children).expect("outer answers");
        if children.iter().all(|c| c.running) {
            break children;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        children,
        vec![ChildStatus {
            name: "inner".into(),
            running: true,
            restarts: 1
        }]
    );
    let second_inner = inner().await.expect("a new inner runs");
    assert_ne!(second_inner.get_id(), first_inner.get_id());
    wait_for_start(&second_inner, &starts, 3).await;
    outer.stop_and_wait(None, None).await.expect("stops");
}

#[tokio::test]
async fn stopping_a_supervisor_stops_every_child_and_forgets_them() {
    let starts = Arc::new(AtomicUsize::new(0));
    let supervisor = spawn_supervisor("stopper", 3, starts.clone()).await;
    wait_for_start(&supervisor, &starts, 1).await;
    let child = child_ref(&supervisor, "crashy").await.expect("child runs");
    supervisor.stop_and_wait(None, None).await.expect("stops");
    assert!(matches!(child.get_status(), ActorStatus::Stopped));
    assert!(registry::info(child.get_id()).is_none());
}

#[tokio::test]
async fn a_transient_child_that_stops_cleanly_is_not_restarted() {
    let starts = Arc::new(AtomicUsize::new(0));
    let child = ChildSpec::new(
        "crashy",
        ActorRole::AllReplica,
        Crashy {
            starts: starts.clone(),
        },
        (),
    )
    .transient();
    let args = SupervisorArgs {
        name: "transient".into(),
        policy: quick_policy(3),
        children: vec![child],
        on_restart: None,
    };
    let (supervisor, _) = Actor::spawn(None, Supervisor, args).await.expect("starts");
    wait_for_start(&supervisor, &starts, 1).await;
    let child = child_ref(&supervisor, "crashy").await.expect("runs");
    child.stop_and_wait(None, None).await.expect("stops");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    assert!(
        ractor::call!(supervisor, SupervisorMsg::Children)
            .expect("answers")
            .is_empty()
    );
    supervisor.stop_and_wait(None, None).await.expect("stops");
}
