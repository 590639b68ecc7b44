//! Supervision for haptor's actor tree. ractor leaves restart strategy to the implementor
//! (and its default stops a parent whenever a child exits), so every supervisor in haptor is
//! a [`Supervisor`]: one-for-one restarts with backoff, a restart intensity (at most N
//! restarts within a window, after which the supervisor fails and its own supervisor
//! decides), per-child restart counts, and a graceful stop that waits for every child.
//! [`registry`] records each live actor's name, role and restart count for `/debug/actors`.

pub mod registry;
mod supervisor;

pub use registry::{ActorInfo, ActorRole, ActorTreeNode, actor_tree};
pub use supervisor::{
    ChildSpec, ChildStatus, Restart, RestartObserver, RestartPolicy, Supervisor, SupervisorArgs,
    SupervisorMsg,
};
