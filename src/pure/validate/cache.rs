//! The validation cache: remembers which renders `haproxy -c` accepted, so an identical
//! render (same HAProxy version, same `haproxy.cfg`, same auxiliary files) is not checked
//! again. Only successes are stored, with their warnings; a failure is always re-checked,
//! because it may come from the environment rather than the configuration. The cache is
//! bounded: when full, the entry used least recently is dropped. It is safe to share
//! between threads.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sha2::{Digest, Sha256};

use super::semantic::CheckReport;
use crate::pure::rendered::{Checksum, RenderedConfig, hex};

/// How many successes a cache keeps by default.
pub const DEFAULT_CAPACITY: usize = 64;

/// Identifies one render checked by one HAProxy version: a hex SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey(String);

impl CacheKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bounded, thread-safe store of successful semantic checks.
pub struct ValidationCache {
    capacity: usize,
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<CacheKey, Entry>,
    /// Increases on every use; an entry's `last_used` orders evictions.
    clock: u64,
}

struct Entry {
    report: CheckReport,
    last_used: u64,
}

impl Default for ValidationCache {
    fn default() -> Self {
        ValidationCache::new(DEFAULT_CAPACITY)
    }
}

impl fmt::Debug for ValidationCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidationCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .finish()
    }
}

impl ValidationCache {
    /// A cache holding at most `capacity` successes; 0 stores nothing.
    pub fn new(capacity: usize) -> Self {
        ValidationCache {
            capacity,
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The key for a render checked by the given HAProxy version (any string that tells
    /// apart checkers whose verdicts may differ): SHA-256 over the version,
    /// [`RenderedConfig::checksum`], which covers `haproxy.cfg` and every auxiliary file's
    /// path and content, and the digest of the render's trusted lines (the schema phase
    /// accepts code-running directives only on those, so a success under one config's
    /// templates must not vouch for the same bytes under another's).
    pub fn key(version: &str, rendered: &RenderedConfig) -> CacheKey {
        ValidationCache::key_of(version, &rendered.checksum(), rendered)
    }

    /// [`ValidationCache::key`] for a render whose checksum the caller computed already.
    pub fn key_of(version: &str, checksum: &Checksum, rendered: &RenderedConfig) -> CacheKey {
        let mut hasher = Sha256::new();
        hasher.update(b"haptor-validation-cache-v2\0");
        hasher.update(version.as_bytes());
        hasher.update(b"\0");
        hasher.update(checksum.to_string().as_bytes());
        hasher.update(b"\0");
        hasher.update(rendered.trusted_lines.digest().as_bytes());
        CacheKey(hex(&hasher.finalize()))
    }

    /// The stored success for a key, marked `from_cache`. Counts a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<CheckReport> {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        match entries.by_key.get_mut(key) {
            Some(entry) => {
                entry.last_used = now;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(CheckReport {
                    from_cache: true,
                    ..entry.report.clone()
                })
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Remembers a success. When the cache is full, the least recently used entry goes.
    pub fn insert_success(&self, key: CacheKey, report: &CheckReport) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        if !entries.by_key.contains_key(&key) && entries.by_key.len() >= self.capacity {
            let oldest = entries
                .by_key
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                entries.by_key.remove(&oldest);
            }
        }
        let report = CheckReport {
            from_cache: false,
            ..report.clone()
        };
        entries.by_key.insert(
            key,
            Entry {
                report,
                last_used: now,
            },
        );
    }

    /// Lookups that found a stored success.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Lookups that found nothing.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every stored success (the counters keep counting).
    pub fn clear(&self) {
        self.lock().by_key.clear();
    }

    /// The entries stay consistent even if a holder panicked: every update is a single
    /// map operation, so a poisoned lock is safe to reuse.
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::rendered::{AuxFile, AuxKind};
    use crate::pure::validate::{ConfigProblem, ValidationPhase};

    fn render(text: &str) -> RenderedConfig {
        RenderedConfig {
            haproxy_cfg: text.to_string(),
            ..Default::default()
        }
    }

    fn report_with_warning(message: &str) -> CheckReport {
        CheckReport {
            warnings: vec![ConfigProblem {
                phase: ValidationPhase::Semantic,
                file: "haproxy.cfg".into(),
                line: Some(3),
                message: message.into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_stored_success_comes_back_with_its_warnings_marked_cached() {
        let cache = ValidationCache::default();
        let key = ValidationCache::key("2.6", &render("global\n"));
        let stored = report_with_warning("w");
        cache.insert_success(key.clone(), &stored);
        let found = cache.get(&key).expect("stored");
        assert!(found.from_cache);
        assert_eq!(found.warnings, stored.warnings);
        assert_eq!((cache.hits(), cache.misses()), (1, 0));
    }

    #[test]
    fn the_key_depends_on_version_text_and_aux_files() {
        let base = render("global\n");
        let mut with_map = base.clone();
        with_map.aux_files.insert(
            "maps/a.map".into(),
            AuxFile {
                kind: AuxKind::Map,
                name: "a.map".into(),
                path: "maps/a.map".into(),
                content: "a b\n".into(),
            },
        );
        let key = ValidationCache::key("2.6", &base);
        assert_eq!(key, ValidationCache::key("2.6", &base.clone()));
        assert_ne!(key, ValidationCache::key("2.8", &base));
        assert_ne!(key, ValidationCache::key("2.6", &render("global \n")));
        assert_ne!(key, ValidationCache::key("2.6", &with_map));
        assert_eq!(key.as_str().len(), 64);
    }

    #[test]
    fn an_unknown_key_counts_a_miss() {
        let cache = ValidationCache::default();
        assert!(
            cache
                .get(&ValidationCache::key("2.6", &render("x")))
                .is_none()
        );
        assert_eq!((cache.hits(), cache.misses()), (0, 1));
    }

    #[test]
    fn a_full_cache_drops_the_least_recently_used_entry() {
        let cache = ValidationCache::new(2);
        let keys: Vec<CacheKey> = ["a", "b", "c"]
            .iter()
            .map(|text| ValidationCache::key("v", &render(text)))
            .collect();
        cache.insert_success(keys[0].clone(), &CheckReport::default());
        cache.insert_success(keys[1].clone(), &CheckReport::default());
        assert!(
            cache.get(&keys[0]).is_some(),
            "touching a makes b the oldest"
        );
        cache.insert_success(keys[2].clone(), &CheckReport::default());
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&keys[0]).is_some());
        assert!(cache.get(&keys[1]).is_none());
        assert!(cache.get(&keys[2]).is_some());
    }

    #[test]
    fn replacing_an_entry_does_not_evict_another() {
        let cache = ValidationCache::new(2);
        let a = ValidationCache::key("v", &render("a"));
        let b = ValidationCache::key("v", &render("b"));
        cache.insert_success(a.clone(), &CheckReport::default());
        cache.insert_success(b.clone(), &CheckReport::default());
        cache.insert_success(a.clone(), &report_with_warning("new"));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&a).expect("kept").warnings[0].message, "new");
        assert!(cache.get(&b).is_some());
    }

    #[test]
    fn a_zero_capacity_cache_stores_nothing() {
        let cache = ValidationCache::new(0);
        let key = ValidationCache::key("v", &render("a"));
        cache.insert_success(key.clone(), &CheckReport::default());
        assert!(cache.is_empty());
        assert!(cache.get(&key).is_none());
    }

    #[test]
    fn clearing_forgets_entries_but_keeps_counting() {
        let cache = ValidationCache::default();
        let key = ValidationCache::key("v", &render("a"));
        cache.insert_success(key.clone(), &CheckReport::default());
        assert!(cache.get(&key).is_some());
        cache.clear();
        assert!(cache.get(&key).is_none());
        assert_eq!((cache.hits(), cache.misses()), (1, 1));
    }
}
