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
    pub(crate) fn cmp_prefix(&self, prefix: &[&str]) -> std::cmp::Ordering {
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

    /// Checks the types of the fields templates read (`pure::object_schema`), strips ignored
    /// fields, normalises numbers and computes the key; runs outside locks.
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
        // What is stored is checked: a field the config ignores is gone by now.
        crate::pure::object_schema::check(&value).map_err(StoreError::Schema)?;
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

    /// The store's change counter when the snapshot was taken: two snapshots of one live
    /// store with the same generation hold the same objects (an overlay's is `u64::MAX`).
    pub fn generation(&self) -> u64 {
        self.generation
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

    /// The keys of the entries added, removed or replaced since `older`, a snapshot of the
    /// same store: one pass over both (they are sorted by key), where an entry that stayed
    /// shares its key and object with `older` and costs a pointer comparison.
    pub fn changed_since<'s>(&'s self, older: &'s StoreSnapshot) -> Vec<&'s EntryKey> {
        let (old, new) = (older.entries(), self.entries());
        let (mut i, mut j) = (0, 0);
        let mut changed = Vec::new();
        while i < old.len() && j < new.len() {
            let order = if Arc::ptr_eq(&old[i].key, &new[j].key) {
                std::cmp::Ordering::Equal
            } else {
                old[i].key.cmp(&new[j].key)
            };
            match order {
                std::cmp::Ordering::Less => {
                    changed.push(&*old[i].key);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    changed.push(&*new[j].key);
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    if !CompactObject::same(&old[i].object, &new[j].object) {
                        changed.push(&*new[j].key);
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        changed.extend(old[i..].iter().map(|e| &*e.key));
        changed.extend(new[j..].iter().map(|e| &*e.key));
        changed
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
mod tests;
