//! One watched resource kept in memory: objects indexed by the values of the configured
//! `indexBy` paths, with cheap immutable snapshots for renders.
//!
//! # Concurrency design
//!
//! The live state is a `BTreeMap` behind an `RwLock`. Writers do every expensive step
//! (stripping ignored fields, normalising numbers, evaluating index paths) *before* taking
//! the lock, so the write critical section is an `O(log n)` map update. Readers hold the read
//! lock only while copying pointers.
//!
//! Renders read a [`StoreSnapshot`]: a sorted `Vec` of `(Arc<key>, object)`, each object a
//! [`CompactObject`] (its compact JSON text, reference counted). Building one copies `2n`
//! reference counts and no object data, and the result is cached until the next change, so
//! repeated renders between changes share one snapshot. A render thus sees one consistent
//! state of each store even while events keep arriving.
//!
//! # Memory
//!
//! The store parses an object once, on insert, to strip ignored fields and compute its
//! index key, and keeps only the compact text; the tree is dropped. Whoever reads fields
//! later (a template) makes its own short-lived tree with [`CompactObject::to_value`].

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde_json::{Number, Value};

use super::StoreError;
use super::compact::CompactObject;
use super::path::FieldPath;

/// An object's identity inside one store. `uid` is not part of it: a deleted and recreated
/// object with the same namespace and name replaces the old one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Reads `metadata.namespace` and `metadata.name`; `None` when the name is missing.
    pub fn of(object: &Value) -> Option<ObjectRef> {
        let metadata = object.get("metadata")?;
        let name = metadata
            .get("name")?
            .as_str()
            .filter(|name| !name.is_empty())?;
        let namespace = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        Some(ObjectRef::new(namespace, name))
    }
}

/// Where an object sorts in its store: by index values, then namespace, then name. This is
/// the order of [`ResourceStore::list`], and it keeps every key prefix contiguous.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryKey {
    /// One value per `indexBy` path; a missing value is the empty string.
    pub index: Vec<String>,
    pub namespace: String,
    pub name: String,
}

impl EntryKey {
    fn object_ref(&self) -> ObjectRef {
        ObjectRef::new(self.namespace.clone(), self.name.clone())
    }

    /// Compares the first `prefix.len()` index values with `prefix`.
    fn cmp_prefix(&self, prefix: &[&str]) -> std::cmp::Ordering {
        let head = &self.index[..prefix.len().min(self.index.len())];
        head.iter().map(String::as_str).cmp(prefix.iter().copied())
    }
}

/// What an [`ResourceStore::apply`] did, so callers can skip work for no-op resyncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreChange {
    Added,
    Updated,
    Unchanged,
}

#[derive(Default)]
struct LiveState {
    /// Bumped on every change; a cached snapshot is valid while its generation matches.
    generation: u64,
    entries: BTreeMap<Arc<EntryKey>, CompactObject>,
    by_identity: HashMap<ObjectRef, Arc<EntryKey>>,
}

impl LiveState {
    fn remove(&mut self, identity: &ObjectRef) -> Option<CompactObject> {
        let key = self.by_identity.remove(identity)?;
        self.entries.remove(&key)
    }
}

/// What a relist did.
#[derive(Debug)]
pub struct Relist {
    /// Objects that could not be stored.
    pub rejected: Vec<StoreError>,
    /// The content differs from what the store held before.
    pub changed: bool,
}

/// The objects of one watched resource.
pub struct ResourceStore {
    name: Arc<str>,
    index_sources: Arc<[String]>,
    index_by: Vec<FieldPath>,
    ignore_fields: Vec<FieldPath>,
    live: RwLock<LiveState>,
    cached: Mutex<Option<Arc<StoreSnapshot>>>,
    listed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ResourceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceStore")
            .field("name", &self.name)
            .field("index_by", &self.index_sources)
            .field("len", &self.len())
            .finish()
    }
}

impl ResourceStore {
    /// Builds an empty store. `index_by` and `ignore_fields` are kubectl-style paths
    /// (see [`FieldPath`]), compiled here once; the first invalid one is reported.
    pub fn new(
        name: impl Into<String>,
        index_by: Vec<String>,
        ignore_fields: Vec<String>,
    ) -> Result<ResourceStore, StoreError> {
        let index_paths = index_by
            .iter()
            .map(|p| FieldPath::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let ignore_paths = ignore_fields
            .iter()
            .map(|p| FieldPath::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ResourceStore {
            name: Arc::from(name.into()),
            index_sources: Arc::from(index_by),
            index_by: index_paths,
            ignore_fields: ignore_paths,
            live: RwLock::new(LiveState::default()),
            cached: Mutex::new(None),
            listed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The watched-resource name templates use, e.g. `ingresses`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `indexBy` paths as configured.
    pub fn index_by(&self) -> &[String] {
        &self.index_sources
    }

    /// Inserts or replaces (by namespace/name) one object.
    pub fn apply(&self, object: impl Into<CompactObject>) -> Result<StoreChange, StoreError> {
        self.apply_parsed(object.into(), None)
    }

    /// As [`ResourceStore::apply`], for a caller that already made the object's tree (so it
    /// is not parsed twice). `value` must be `object`'s own tree.
    pub fn apply_parsed(
        &self,
        object: CompactObject,
        value: Option<Value>,
    ) -> Result<StoreChange, StoreError> {
        let (key, object) = self.prepare(object, value)?;
        let identity = key.object_ref();
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old_key) = live.by_identity.get(&identity)
            && **old_key == *key
            && live
                .entries
                .get(old_key)
                .is_some_and(|old| old.json() == object.json())
        {
            return Ok(StoreChange::Unchanged);
        }
        let change = match live.remove(&identity) {
            Some(_) => StoreChange::Updated,
            None => StoreChange::Added,
        };
        live.entries.insert(Arc::clone(&key), object);
        live.by_identity.insert(identity, key);
        live.generation += 1;
        Ok(change)
    }

    /// Removes the object with the same namespace/name as `object`; `true` if one was held.
    pub fn delete(&self, object: &Value) -> bool {
        match ObjectRef::of(object) {
            Some(identity) => self.delete_ref(&identity),
            None => false,
        }
    }

    /// Removes the object with this namespace/name; `true` if one was held.
    pub fn delete_ref(&self, identity: &ObjectRef) -> bool {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        let removed = live.remove(identity).is_some();
        if removed {
            live.generation += 1;
        }
        removed
    }

    /// Replaces the whole content (an initial sync or a relist). Objects that cannot be
    /// stored are skipped and returned; later duplicates of an identity win.
    pub fn replace_all<O: Into<CompactObject>>(
        &self,
        objects: impl IntoIterator<Item = O>,
    ) -> Vec<StoreError> {
        self.relist(objects).rejected
    }

    /// Whether a full list has replaced the content at least once (a watcher restarted
    /// after its first sync finds its store listed).
    pub fn has_listed(&self) -> bool {
        self.listed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Replaces the whole content, as [`ResourceStore::replace_all`], and tells whether the
    /// content differs from what the store held (a relist after a watch broke carries the
    /// changes made meanwhile; an identical one changes nothing, not even the generation).
    pub fn relist<O: Into<CompactObject>>(&self, objects: impl IntoIterator<Item = O>) -> Relist {
        let mut rejected = Vec::new();
        let mut fresh = LiveState::default();
        for object in objects {
            match self.prepare(object.into(), None) {
                Ok((key, object)) => {
                    let identity = key.object_ref();
                    fresh.remove(&identity);
                    fresh.entries.insert(Arc::clone(&key), object);
                    fresh.by_identity.insert(identity, key);
                }
                Err(err) => rejected.push(err),
            }
        }
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        self.listed.store(true, std::sync::atomic::Ordering::SeqCst);
        let same = live.entries.len() == fresh.entries.len()
            && live.entries.iter().zip(fresh.entries.iter()).all(
                |((old_key, old), (new_key, new))| old_key == new_key && old.json() == new.json(),
            );
        if !same {
            fresh.generation = live.generation + 1;
            *live = fresh;
        }
        Relist {
            rejected,
            changed: !same,
        }
    }

    /// The number of objects held.
    pub fn len(&self) -> usize {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every object, ordered by index key, then namespace, then name.
    pub fn list(&self) -> Vec<CompactObject> {
        self.snapshot()
            .entries
            .iter()
            .map(|e| e.object.clone())
            .collect()
    }

    /// The objects whose index key starts with `keys` (all of them for an empty slice).
    pub fn fetch(&self, keys: &[&str]) -> Result<Vec<CompactObject>, StoreError> {
        self.check_arity(keys.len())?;
        let lower = EntryKey {
            index: keys.iter().map(|k| (*k).to_string()).collect(),
            namespace: String::new(),
            name: String::new(),
        };
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        Ok(live
            .entries
            .range::<EntryKey, _>((Bound::Included(&lower), Bound::Unbounded))
            .take_while(|(key, _)| key.cmp_prefix(keys).is_eq())
            .map(|(_, object)| object.clone())
            .collect())
    }

    /// The one object whose key starts with `keys`, `None` if there is none, and an error
    /// naming the count when there are several.
    pub fn get_single(&self, keys: &[&str]) -> Result<Option<CompactObject>, StoreError> {
        let mut found = self.fetch(keys)?;
        match found.len() {
            0 | 1 => Ok(found.pop()),
            count => Err(self.not_single(keys, count)),
        }
    }

    /// A consistent, immutable view for one render. Cached until the store changes.
    pub fn snapshot(&self) -> Arc<StoreSnapshot> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(snapshot) = cached.as_ref()
            && snapshot.generation == live.generation
        {
            return Arc::clone(snapshot);
        }
        let snapshot = Arc::new(StoreSnapshot {
            store: Arc::clone(&self.name),
            index_by: Arc::clone(&self.index_sources),
            generation: live.generation,
            entries: live
                .entries
                .iter()
                .map(|(key, object)| SnapshotEntry {
                    key: Arc::clone(key),
                    object: object.clone(),
                })
                .collect(),
        });
        *cached = Some(Arc::clone(&snapshot));
        snapshot
    }

    /// A snapshot of the current state with `object` applied, leaving the store untouched.
    /// Admission checks use it to render "what if this object were accepted".
    pub fn snapshot_with_applied(
        &self,
        object: impl Into<CompactObject>,
    ) -> Result<Arc<StoreSnapshot>, StoreError> {
        let (key, object) = self.prepare(object.into(), None)?;
        let identity = key.object_ref();
        let base = self.snapshot();
        let mut entries: Vec<SnapshotEntry> = base
            .entries
            .iter()
            .filter(|e| e.key.object_ref() != identity)
            .cloned()
            .collect();
        let at = entries.partition_point(|e| *e.key < *key);
        entries.insert(at, SnapshotEntry { key, object });
        Ok(Arc::new(base.with_entries(entries)))
    }

    /// A snapshot of the current state without the object `identity`, leaving the store
    /// untouched.
    pub fn snapshot_with_deleted(&self, identity: &ObjectRef) -> Arc<StoreSnapshot> {
        let base = self.snapshot();
        let entries = base
            .entries
            .iter()
            .filter(|e| e.key.object_ref() != *identity)
            .cloned()
            .collect();
        Arc::new(base.with_entries(entries))
    }

    /// Strips ignored fields, normalises numbers and computes the key; runs outside locks.
    /// The object as stored, and its key. An object that needs no change (no ignored field,
    /// no whole number written as a float) is kept as it is, shared with whoever sent it, so a
    /// source and the store hold one copy. `parsed` is the object's tree when the caller
    /// already made it.
    fn prepare(
        &self,
        object: CompactObject,
        parsed: Option<Value>,
    ) -> Result<(Arc<EntryKey>, CompactObject), StoreError> {
        let mut value = parsed.unwrap_or_else(|| object.to_value());
        let identity = ObjectRef::of(&value).ok_or_else(|| StoreError::MissingName {
            store: self.name.to_string(),
        })?;
        let object = if self.ignore_fields.iter().any(|p| p.first(&value).is_some())
            || has_unnormalised_numbers(&value)
        {
            for path in &self.ignore_fields {
                path.remove_from(&mut value);
            }
            normalise_numbers(&mut value);
            CompactObject::from_value(&value)
        } else {
            object
        };
        let index = self
            .index_by
            .iter()
            .map(|path| path.index_value(&value))
            .collect();
        let key = EntryKey {
            index,
            namespace: identity.namespace,
            name: identity.name,
        };
        Ok((Arc::new(key), object))
    }

    fn check_arity(&self, given: usize) -> Result<(), StoreError> {
        check_arity(&self.name, &self.index_sources, given)
    }

    fn not_single(&self, keys: &[&str], count: usize) -> StoreError {
        StoreError::NotSingle {
            store: self.name.to_string(),
            keys: keys.join(", "),
            count,
        }
    }
}

fn check_arity(store: &str, index_by: &[String], given: usize) -> Result<(), StoreError> {
    if given > index_by.len() {
        return Err(StoreError::TooManyKeys {
            store: store.to_string(),
            fields: index_by.join(", "),
            expected: index_by.len(),
            given,
        });
    }
    Ok(())
}

/// 2^63: floats in `[-2^63, 2^63)` convert to `i64` exactly when they have no fraction.
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

/// Rewrites every float with no fractional part (`80.0`) as an integer (`80`), so templates
/// print ports and counts the way Kubernetes users wrote them.
/// The integer a float without a fraction stands for (`8080.0` → `8080`); `None` for
/// integers, fractions and floats outside the `i64` range.
fn whole_float(number: &Number) -> Option<i64> {
    let float = number.as_f64().filter(|_| number.is_f64())?;
    // The range check makes the cast exact.
    (float.fract() == 0.0 && (-I64_BOUND..I64_BOUND).contains(&float)).then_some(float as i64)
}

/// Whether [`normalise_numbers`] would change anything.
fn has_unnormalised_numbers(value: &Value) -> bool {
    match value {
        Value::Number(number) => whole_float(number).is_some(),
        Value::Array(items) => items.iter().any(has_unnormalised_numbers),
        Value::Object(map) => map.values().any(has_unnormalised_numbers),
        _ => false,
    }
}

pub fn normalise_numbers(value: &mut Value) {
    match value {
        Value::Number(number) => {
            if let Some(whole) = whole_float(number) {
                *number = Number::from(whole);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_numbers),
        Value::Object(map) => map.values_mut().for_each(normalise_numbers),
        _ => {}
    }
}

/// One stored object and its sort key.
#[derive(Debug, Clone)]
pub struct SnapshotEntry {
    key: Arc<EntryKey>,
    object: CompactObject,
}

impl SnapshotEntry {
    pub fn key(&self) -> &EntryKey {
        &self.key
    }

    pub fn object(&self) -> &CompactObject {
        &self.object
    }

    /// A fresh tree of the object.
    pub fn value(&self) -> Value {
        self.object.to_value()
    }
}

/// An immutable view of one store, sorted like [`ResourceStore::list`].
#[derive(Debug, Clone)]
pub struct StoreSnapshot {
    store: Arc<str>,
    index_by: Arc<[String]>,
    generation: u64,
    entries: Vec<SnapshotEntry>,
}

impl StoreSnapshot {
    /// A snapshot built directly from objects, for tests and tools without a live store.
    pub fn from_objects(
        name: impl Into<String>,
        index_by: Vec<String>,
        objects: impl IntoIterator<Item = Value>,
    ) -> Result<StoreSnapshot, StoreError> {
        let store = ResourceStore::new(name, index_by, Vec::new())?;
        if let Some(err) = store.replace_all(objects).into_iter().next() {
            return Err(err);
        }
        Ok((*store.snapshot()).clone())
    }

    /// A snapshot of the same store holding other entries (never matches the live cache).
    fn with_entries(&self, entries: Vec<SnapshotEntry>) -> StoreSnapshot {
        StoreSnapshot {
            store: Arc::clone(&self.store),
            index_by: Arc::clone(&self.index_by),
            generation: u64::MAX,
            entries,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.store
    }

    pub fn index_by(&self) -> &[String] {
        &self.index_by
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry in list order.
    pub fn entries(&self) -> &[SnapshotEntry] {
        &self.entries
    }

    /// Every object in list order.
    pub fn objects(&self) -> impl ExactSizeIterator<Item = &CompactObject> {
        self.entries.iter().map(|e| &e.object)
    }

    /// The positions (in list order) of the objects whose key starts with `keys`. Matches
    /// are contiguous because entries sort by key first.
    pub fn fetch_range(&self, keys: &[&str]) -> Result<Range<usize>, StoreError> {
        check_arity(&self.store, &self.index_by, keys.len())?;
        let start = self
            .entries
            .partition_point(|e| e.key.cmp_prefix(keys).is_lt());
        let len = self.entries[start..].partition_point(|e| e.key.cmp_prefix(keys).is_eq());
        Ok(start..start + len)
    }

    /// The entries whose key starts with `keys`.
    pub fn fetch(&self, keys: &[&str]) -> Result<&[SnapshotEntry], StoreError> {
        let range = self.fetch_range(keys)?;
        Ok(&self.entries[range])
    }

    /// The position of the one entry whose key starts with `keys`, `None` if there is none,
    /// an error when there are several.
    pub fn single_position(&self, keys: &[&str]) -> Result<Option<usize>, StoreError> {
        let range = self.fetch_range(keys)?;
        match range.len() {
            0 => Ok(None),
            1 => Ok(Some(range.start)),
            count => Err(StoreError::NotSingle {
                store: self.store.to_string(),
                keys: keys.join(", "),
                count,
            }),
        }
    }

    /// The one object whose key starts with `keys`, as [`ResourceStore::get_single`].
    pub fn get_single(&self, keys: &[&str]) -> Result<Option<&CompactObject>, StoreError> {
        Ok(self
            .single_position(keys)?
            .map(|at| &self.entries[at].object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn slice(ns: &str, name: &str, service: &str) -> Value {
        json!({
            "metadata": {
                "namespace": ns,
                "name": name,
                "labels": {"kubernetes.io/service-name": service},
                "managedFields": [{"manager": "kube-controller-manager"}]
            },
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"port": 8080.0}]
        })
    }

    fn slices_store() -> ResourceStore {
        ResourceStore::new(
            "endpointslices",
            vec![
                "metadata.namespace".into(),
                r"metadata.labels.kubernetes\.io/service-name".into(),
            ],
            vec!["metadata.managedFields".into()],
        )
        .unwrap()
    }

    fn names(objects: &[CompactObject]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                o.to_value()["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn an_object_that_needs_no_change_is_shared_with_its_sender_and_one_that_does_is_copied() {
        let store = slices_store();
        let clean = CompactObject::from(json!({
            "metadata": {"namespace": "shop", "name": "web-abc",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "ports": [{"port": 8080}]
        }));
        store.apply(clean.clone()).unwrap();
        assert!(
            CompactObject::same(&store.list()[0], &clean),
            "no second copy"
        );

        // Ignored fields and whole floats are changed, so the store keeps its own copy and
        // the sender's object is left as it was.
        let sent = CompactObject::from(slice("shop", "web-abc", "web"));
        store.apply(sent.clone()).unwrap();
        let stored = &store.list()[0];
        assert!(!CompactObject::same(stored, &sent));
        let stored = stored.to_value();
        assert!(stored["metadata"].get("managedFields").is_none());
        assert_eq!(stored["ports"][0]["port"], json!(8080));
        assert!(sent.to_value()["metadata"].get("managedFields").is_some());
    }

    #[test]
    fn objects_are_found_by_a_label_whose_key_contains_dots() {
        let store = slices_store();
        store.apply(slice("shop", "web-abc", "web")).unwrap();
        store.apply(slice("shop", "web-def", "web")).unwrap();
        store.apply(slice("shop", "api-xyz", "api")).unwrap();
        assert_eq!(
            names(&store.fetch(&["shop", "web"]).unwrap()),
            ["web-abc", "web-def"]
        );
        assert_eq!(names(&store.fetch(&["shop", "api"]).unwrap()), ["api-xyz"]);
        assert!(store.fetch(&["shop", "nope"]).unwrap().is_empty());
    }

    #[test]
    fn a_prefix_key_fetches_every_object_under_it() {
        let store = slices_store();
        store.apply(slice("a", "one", "x")).unwrap();
        store.apply(slice("b", "two", "y")).unwrap();
        store.apply(slice("b", "three", "z")).unwrap();
        assert_eq!(store.fetch(&["b"]).unwrap().len(), 2);
        assert_eq!(store.fetch(&[]).unwrap().len(), 3);
        let snapshot = store.snapshot();
        assert_eq!(snapshot.fetch(&["b"]).unwrap().len(), 2);
        assert_eq!(snapshot.fetch_range(&["a"]).unwrap(), 0..1);
    }

    #[test]
    fn more_keys_than_index_fields_is_an_error_naming_the_fields() {
        let store = slices_store();
        let err = store.fetch(&["a", "b", "c"]).unwrap_err();
        assert!(err.to_string().contains("metadata.namespace"), "{err}");
        assert!(store.snapshot().fetch(&["a", "b", "c"]).is_err());
    }

    #[test]
    fn get_single_refuses_two_matches_and_allows_none() {
        let store = slices_store();
        store.apply(slice("shop", "web-abc", "web")).unwrap();
        assert_eq!(
            names(&[store.get_single(&["shop", "web"]).unwrap().unwrap()]),
            ["web-abc"]
        );
        store.apply(slice("shop", "web-def", "web")).unwrap();
        let err = store.get_single(&["shop", "web"]).unwrap_err();
        assert!(
            matches!(err, StoreError::NotSingle { count: 2, .. }),
            "{err}"
        );
        assert!(store.snapshot().get_single(&["shop", "web"]).is_err());
        assert!(store.get_single(&["shop", "none"]).unwrap().is_none());
    }

    #[test]
    fn ignored_fields_are_stripped_and_whole_floats_become_integers() {
        let store = slices_store();
        store.apply(slice("shop", "web-abc", "web")).unwrap();
        let stored = store.list().pop().unwrap().to_value();
        assert!(stored["metadata"].get("managedFields").is_none());
        assert!(
            stored["ports"][0]["port"].is_i64(),
            "{}",
            stored["ports"][0]["port"]
        );
        assert_eq!(stored["ports"][0]["port"].to_string(), "8080");
    }

    #[test]
    fn a_fractional_float_stays_a_float() {
        let mut value = json!({"weight": 0.5, "big": 1e300});
        normalise_numbers(&mut value);
        assert!(value["weight"].is_f64());
        assert!(value["big"].is_f64());
    }

    #[test]
    fn list_order_is_key_then_namespace_then_name_whatever_the_insert_order() {
        let objects = [
            slice("b", "z", "svc1"),
            slice("a", "y", "svc2"),
            slice("a", "x", "svc2"),
            slice("a", "w", "svc1"),
        ];
        let forward = slices_store();
        let backward = slices_store();
        for o in objects.iter().cloned() {
            forward.apply(o).unwrap();
        }
        for o in objects.iter().rev().cloned() {
            backward.apply(o).unwrap();
        }
        let order = names(&forward.list());
        assert_eq!(order, names(&backward.list()));
        let keys: Vec<EntryKey> = forward
            .snapshot()
            .entries()
            .iter()
            .map(|e| e.key().clone())
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(order, ["w", "x", "y", "z"]);
    }

    #[test]
    fn a_relist_reports_whether_it_changed_the_content_and_an_identical_one_keeps_the_snapshot() {
        let store = slices_store();
        assert!(!store.has_listed());
        let first = store.relist(vec![slice("a", "x", "web")]);
        assert!(first.changed && first.rejected.is_empty());
        assert!(store.has_listed());
        let before = store.snapshot();
        let same = store.relist(vec![slice("a", "x", "web")]);
        assert!(!same.changed);
        assert!(Arc::ptr_eq(&before, &store.snapshot()));
        let moved = store.relist(vec![slice("a", "x", "api")]);
        assert!(moved.changed);
        let gone = store.relist(Vec::<Value>::new());
        assert!(gone.changed);
        assert!(store.is_empty());
    }

    #[test]
    fn apply_replaces_by_identity_even_when_the_key_changes() {
        let store = slices_store();
        assert_eq!(
            store.apply(slice("shop", "s1", "web")).unwrap(),
            StoreChange::Added
        );
        assert_eq!(
            store.apply(slice("shop", "s1", "web")).unwrap(),
            StoreChange::Unchanged
        );
        assert_eq!(
            store.apply(slice("shop", "s1", "api")).unwrap(),
            StoreChange::Updated
        );
        assert_eq!(store.len(), 1);
        assert!(store.fetch(&["shop", "web"]).unwrap().is_empty());
        assert!(store.delete(&slice("shop", "s1", "whatever")));
        assert!(store.is_empty());
        assert!(!store.delete_ref(&ObjectRef::new("shop", "s1")));
    }

    #[test]
    fn replace_all_swaps_content_and_reports_nameless_objects() {
        let store = slices_store();
        store.apply(slice("old", "gone", "x")).unwrap();
        let rejected = store.replace_all(vec![slice("new", "a", "x"), json!({"metadata": {}})]);
        assert_eq!(rejected.len(), 1);
        assert!(rejected[0].to_string().contains("endpointslices"));
        assert_eq!(names(&store.list()), ["a"]);
    }

    #[test]
    fn a_snapshot_is_cached_until_the_store_changes() {
        let store = slices_store();
        store.apply(slice("a", "one", "x")).unwrap();
        let first = store.snapshot();
        assert!(Arc::ptr_eq(&first, &store.snapshot()));
        store.apply(slice("a", "two", "x")).unwrap();
        let second = store.snapshot();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!((first.len(), second.len()), (1, 2));
    }

    #[test]
    fn overlay_snapshots_leave_the_store_untouched() {
        let store = slices_store();
        store.apply(slice("a", "one", "x")).unwrap();
        let with = store.snapshot_with_applied(slice("a", "two", "x")).unwrap();
        let without = store.snapshot_with_deleted(&ObjectRef::new("a", "one"));
        assert_eq!((with.len(), without.len(), store.len()), (2, 0, 1));
        let replaced = store.snapshot_with_applied(slice("a", "one", "y")).unwrap();
        assert_eq!(replaced.len(), 1);
        assert!(replaced.fetch(&["a", "x"]).unwrap().is_empty());
    }

    #[test]
    fn readers_see_consistent_snapshots_while_a_writer_applies() {
        let store = Arc::new(slices_store());
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let store = Arc::clone(&store);
                let done = Arc::clone(&done);
                std::thread::spawn(move || {
                    let mut observed = 0usize;
                    let mut reads = 0usize;
                    while !done.load(Ordering::Acquire) {
                        let snapshot = store.snapshot();
                        let keys: Vec<&EntryKey> =
                            snapshot.entries().iter().map(|e| e.key()).collect();
                        assert!(
                            keys.windows(2).all(|w| w[0] < w[1]),
                            "snapshot out of order"
                        );
                        // Objects only ever get added, so a later view never shrinks.
                        assert!(snapshot.len() >= observed, "snapshot went back in time");
                        observed = snapshot.len();
                        let _ = store.fetch(&["ns"]).map(|found| found.len());
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for i in 0..5_000 {
            store
                .apply(slice(
                    "ns",
                    &format!("slice-{i:05}"),
                    &format!("svc-{}", i % 50),
                ))
                .unwrap();
        }
        done.store(true, Ordering::Release);
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
        assert_eq!(store.len(), 5_000);
        assert_eq!(store.fetch(&["ns", "svc-7"]).unwrap().len(), 100);
    }
}
