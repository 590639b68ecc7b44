//! Messages about watched resources: events from a source into a ResourceWatcher, sync
//! reports to the IndexTracker, and change notices to the Reconciler.

use ractor::{ActorRef, RpcReplyPort};

use super::deploy::CoordinatorMsg;
use super::events::CorrelationId;
use crate::pure::store::CompactObject;

/// One event of a resource source (a Kubernetes watch, a manifest folder, a test).
/// Mirrors kube's watcher events: an initial list framed by `InitStart`/`InitDone`, then
/// changes.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceEvent {
    /// A (re)list begins: objects until `InitDone` replace the store's content.
    InitStart,
    InitApply(CompactObject),
    /// The list is complete; objects not listed are gone.
    InitDone,
    Apply(CompactObject),
    Delete(CompactObject),
}

/// Messages of a ResourceWatcher.
pub enum WatcherMsg {
    /// An event from the watcher's source (sent by its source task).
    Event(ResourceEvent),
    /// The debounce period ended: tell the Reconciler about the changes seen.
    Flush,
    /// The source ended (it is restarted by the supervisor when the watcher fails).
    SourceEnded,
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
