//! Messages about watched resources: events from a source into a ResourceWatcher, sync
//! reports to the IndexTracker, and change notices to the Reconciler.

use ractor::{ActorRef, RpcReplyPort};

use super::deploy::CoordinatorMsg;
use super::events::CorrelationId;
/// One event of a resource source: plain data, defined beside the watch framing that
/// consumes it ([`crate::pure::store::WatchState`]).
pub use crate::pure::store::ResourceEvent;

/// Messages of a ResourceWatcher.
pub enum WatcherMsg {
    /// An event from the watcher's source (sent by its source task).
    Event(ResourceEvent),
    /// The debounce period ended: tell the Reconciler about the changes seen.
    Flush,
    /// The source ended (it is restarted by the supervisor when the watcher fails).
    SourceEnded,
}

/// Messages of the HttpResources actor (the config's HTTP resources).
pub enum HttpResourcesMsg {
    /// A resource's fetch loop fetched it (or failed to).
    Fetched {
        name: String,
        fetched: crate::pure::http_resources::Fetched,
    },
    /// The trial render of a resource's pending content finished.
    TrialFinished {
        name: String,
        body: std::sync::Arc<str>,
        validators: crate::pure::http_resources::Validators,
        result: Result<(), crate::messages::deploy::RenderFailure>,
    },
}

/// Messages of the IndexTracker.
pub enum IndexTrackerMsg {
    /// A watcher finished its initial list.
    Synced { resource: String, objects: usize },
    /// Whether every watcher has synced.
    IsSynced(RpcReplyPort<bool>),
}

/// Messages of the Reconciler.
pub enum ReconcilerMsg {
    /// Every index is synchronised: reconciliation may begin.
    AllSynced,
    /// Objects of `resource` changed (after the watcher's debounce).
    ResourcesChanged {
        resource: String,
        changes: usize,
        correlation: CorrelationId,
        /// When the watcher saw the first of these changes (before its debounce).
        first_seen: std::time::Instant,
    },
    /// The leader-only Coordinator started (Some) or stopped (None).
    SetCoordinator(Option<ActorRef<CoordinatorMsg>>),
    /// A trigger for reasons other than resources (config change).
    Trigger { reason: String },
}
