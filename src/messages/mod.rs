//! The typed messages haptor's actors exchange. There is no event bus: each actor has one
//! message enum, requests that need an answer carry a ractor `RpcReplyPort`, and business
//! messages are cast to the `ActorRef` the iteration's wiring holds for the receiver at that
//! moment, into an unbounded mailbox. A receiver that is not there does not get them: a
//! leader-only actor on a follower (nothing to deploy or publish there), or one between a
//! crash and its restart; what it needs is the latest state, which is replayed into it when
//! it starts (a new coordinator renders again, a new scheduler gets the known instances), so no
//! change is lost, though the messages themselves are. Observability events
//! ([`events::ObservedEvent`]) fan out to the Commentator and Metrics through a lossy,
//! counted channel ([`events::EventFanout`]).

pub mod config;
pub mod deploy;
pub mod events;
pub mod resources;

pub use config::{
    ConfigLoaderMsg, IterationManagerMsg, LeaderElectorMsg, Leadership, LeadershipChange,
    ValidatorMsg, ValidatorVerdict,
};
pub use deploy::{
    ConfigPublisherMsg, CoordinatorMsg, DeploySchedulerMsg, DeployerMsg, DiscoveryMsg,
    DriftMonitorMsg, Instance, ValidatedRender,
};
pub use events::{CorrelationId, EventFanout, EventKind, ObservedEvent};
pub use resources::{HttpResourcesMsg, IndexTrackerMsg, ReconcilerMsg, ResourceEvent, WatcherMsg};
