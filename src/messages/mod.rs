//! The typed messages haptor's actors exchange. There is no event bus: each actor has one
//! message enum, requests that need an answer carry a ractor `RpcReplyPort`, and business
//! messages are sent to a known `ActorRef` and never dropped. Observability events
//! ([`events::ObservedEvent`]) are the one exception: they fan out to the Commentator and
//! Metrics through a lossy, counted channel ([`events::EventFanout`]).

pub mod config;
pub mod deploy;
pub mod events;
pub mod resources;

pub use config::{
    ConfigLoaderMsg, IterationManagerMsg, LeaderElectorMsg, Leadership, ValidatorMsg,
    ValidatorVerdict,
};
pub use deploy::{
    ConfigPublisherMsg, CoordinatorMsg, DeploySchedulerMsg, DeployerMsg, DiscoveryMsg,
    DriftMonitorMsg, Instance, ValidatedRender,
};
pub use events::{CorrelationId, EventFanout, EventKind, ObservedEvent};
pub use resources::{IndexTrackerMsg, ReconcilerMsg, ResourceEvent, WatcherMsg};
