//! Resource stores: the in-memory copies of every watched Kubernetes resource that templates
//! read. Each [`ResourceStore`] indexes its objects (held as [`CompactObject`]s) by the
//! configured `indexBy` field paths, strips `ignoreFields` on insert and hands out cheap
//! immutable [`StoreSnapshot`]s so a render sees one consistent state. [`Stores`] is the
//! name → store collection; [`StoresSnapshot`] is its per-render view. [`WatchState`] is
//! what a watched resource's event stream does to its store: list framing, selector
//! filtering, relist detection and the batching of changes.

mod compact;
pub mod field_selector;
pub mod namespace_join;
mod path;
mod resource;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use compact::CompactObject;
pub use path::FieldPath;
pub use resource::{
    EntryKey, ObjectRef, Relist, ResourceStore, SnapshotEntry, StoreChange, StoreSnapshot,
    normalise_numbers,
};
pub use watch::{
    Change, ChangeBatch, Notify, ObjectSelection, ResourceEvent, StoreChanged, WatchOutcome,
    WatchState,
};

/// What can go wrong building or querying a store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("field path '{path}' is invalid: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("store '{store}': an object without metadata.name cannot be stored")]
    MissingName { store: String },
    /// A field templates read has the wrong type (`pure::object_schema`): the object is not
    /// stored, and a version stored before stays.
    #[error("{0}; the object is left out")]
    Schema(crate::pure::object_schema::SchemaError),
    #[error(
        "store '{store}' is indexed by {expected} field(s) ({fields}) but {given} keys were given"
    )]
    TooManyKeys {
        store: String,
        fields: String,
        expected: usize,
        given: usize,
    },
    #[error(
        "store '{store}' holds {count} objects for key [{keys}] where at most one was expected; \
         use fetch, or index by more fields"
    )]
    NotSingle {
        store: String,
        keys: String,
        count: usize,
    },
}

/// Every watched resource's store, by the name templates use.
#[derive(Debug, Default)]
pub struct Stores {
    stores: BTreeMap<String, Arc<ResourceStore>>,
}

impl Stores {
    pub fn new() -> Stores {
        Stores::default()
    }

    /// Adds a store under its own name, replacing any store of that name.
    pub fn insert(&mut self, store: ResourceStore) -> Arc<ResourceStore> {
        let store = Arc::new(store);
        self.stores
            .insert(store.name().to_string(), Arc::clone(&store));
        store
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ResourceStore>> {
        self.stores.get(name)
    }

    /// Store names in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.stores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }

    /// One consistent view of every store for a render. Each store is snapshotted
    /// independently (there is no cross-store transaction; events for different resources
    /// are unordered anyway).
    pub fn snapshot(&self) -> StoresSnapshot {
        StoresSnapshot {
            stores: self
                .stores
                .iter()
                .map(|(name, store)| (name.clone(), store.snapshot()))
                .collect(),
        }
    }
}

/// Snapshots of every store, by name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StoresSnapshot {
    stores: BTreeMap<String, Arc<StoreSnapshot>>,
}

impl StoresSnapshot {
    pub fn new() -> StoresSnapshot {
        StoresSnapshot::default()
    }

    /// Adds or replaces one store's snapshot (overlays for admission checks, tests).
    pub fn insert(&mut self, snapshot: Arc<StoreSnapshot>) {
        self.stores.insert(snapshot.name().to_string(), snapshot);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<StoreSnapshot>> {
        self.stores.get(name)
    }

    /// Store names in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<StoreSnapshot>)> {
        self.stores
            .iter()
            .map(|(name, snapshot)| (name.as_str(), snapshot))
    }

    pub fn len(&self) -> usize {
        self.stores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stores_snapshot_holds_every_store_by_name() {
        let mut stores = Stores::new();
        let ingresses = stores.insert(ResourceStore::new("ingresses", vec![], vec![]).unwrap());
        stores.insert(ResourceStore::new("services", vec![], vec![]).unwrap());
        ingresses.apply(json!({"metadata": {"name": "a"}})).unwrap();
        let snapshot = stores.snapshot();
        assert_eq!(
            snapshot.names().collect::<Vec<_>>(),
            ["ingresses", "services"]
        );
        assert_eq!(snapshot.get("ingresses").map(|s| s.len()), Some(1));
        ingresses.apply(json!({"metadata": {"name": "b"}})).unwrap();
        assert_eq!(
            snapshot.get("ingresses").map(|s| s.len()),
            Some(1),
            "a snapshot does not move"
        );
        assert!(snapshot.get("nope").is_none());
    }

    #[test]
    fn an_invalid_index_path_fails_store_construction() {
        let err = ResourceStore::new("x", vec!["metadata..name".into()], vec![]).unwrap_err();
        assert!(err.to_string().contains("metadata..name"), "{err}");
    }
}
