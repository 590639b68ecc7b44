//! The manifest folder of `haptor local`: the stand-in for a Kubernetes API server. A scan
//! reads every manifest file that changed since the last scan (created, modified, deleted or
//! renamed), and turns the folder's content into changes of an in-memory resource source and
//! of the config channel. A file with a malformed document keeps its last good content: its
//! problems are reported with file and line, and nothing it held is removed.
//!
//! Editors and shells often write a file in place: they truncate it and write it again, or
//! delete it and create it anew. A scan between the two steps would see the file's objects
//! gone and the routes they make would drop for a moment. So a file that vanished, or that
//! reads empty where it held objects, keeps its objects until it has been so for
//! [`VANISHED_SCANS`] timed scans in a row; one renamed or whose objects moved to a file read
//! in the same scan is let go at once. Only timed scans ([`ManifestFolder::scan`]) count:
//! scans a change of the folder asked for ([`ManifestFolder::scan_for_change`]) come in
//! bursts, as fast as a writer works, so counting them would make the grace no time at all.
//! While something waits so, [`ManifestFolder::needs_rescan`] says so, and the caller keeps
//! the timed scans coming.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::drivers::memory_source::MemorySource;
use crate::pure::config::{HAProxyTemplateConfig, config_from_value};
use crate::pure::manifests::{self, ManifestError};
use crate::pure::object_schema::{self, SchemaError};
use crate::pure::store::CompactObject;
use crate::pure::watched_kinds::WatchedKinds;
use crate::pure::yaml_lines::YamlLines;

/// When a file last changed, as far as a scan can tell without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

#[derive(Debug, Default)]
struct FileContent {
    stamp: Option<Stamp>,
    /// The file's objects by identity, with a hash of their content and the line their
    /// document starts at: the objects themselves live in the resource source only, so a
    /// large folder is held in memory once.
    objects: HashMap<ObjectKey, (u64, usize)>,
    /// The distinct `(apiVersion, kind)` of its objects: a file whose kinds are all watched
    /// (most are, and big ones hold one kind) is passed over by [`ManifestFolder::unwatched`]
    /// without a look at each object.
    kinds: BTreeSet<(String, String)>,
    /// Each config's document line, object, and where its keys are (for error lines).
    configs: Vec<(usize, Value, Arc<YamlLines>)>,
    /// The path became a directory; reported once, its last good objects kept.
    shadowed: bool,
    /// Timed scans in a row the file was missing, or read empty while it held objects.
    vanished_scans: u32,
    /// The last scan found the file missing, or read it empty while it held objects, and
    /// kept its objects (whether or not that scan counted toward the grace).
    vanishing: bool,
}

/// How many timed scans in a row a file must be missing, or read empty while it held
/// objects, before its objects are deleted (see the module documentation): 500 ms, since
/// `haptor local` scans on its timer every 100 ms while such a file waits
/// (`local::watch::SCAN_INTERVAL`, whether or not the folder is watched with inotify) —
/// longer than an editor or a busy machine takes between truncating and writing.
pub const VANISHED_SCANS: u32 = 5;

/// The largest manifest file a scan reads. The API server stores objects of at most about
/// 1.5 MiB and takes request bodies of at most 3 MiB, so a larger file of many objects is
/// plausible and one of this size is not.
pub const MAX_MANIFEST_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A file's text, or the problem that keeps it from being read: too large, unreadable, or
/// not UTF-8 (named by the line of its first bad byte). With the problem comes whether the
/// same content is worth reading again (an unreadable file may become readable without
/// changing; a large or non-UTF-8 one stays so until it is rewritten).
fn read_manifest_text(path: &Path, len: Option<u64>) -> Result<String, (ManifestError, bool)> {
    let problem = |line: Option<usize>, message: String| ManifestError {
        file: path.to_path_buf(),
        line,
        message,
    };
    let too_large = |size: String| {
        problem(
            None,
            format!(
                "the file is {size} MiB; haptor local reads manifest files of up to {} MiB (an API server takes objects of at most 3 MiB)",
                MAX_MANIFEST_FILE_BYTES / (1024 * 1024)
            ),
        )
    };
    if let Some(len) = len.filter(|len| *len > MAX_MANIFEST_FILE_BYTES) {
        return Err((too_large((len / (1024 * 1024)).to_string()), false));
    }
    // Read no more than the limit, whatever the size was: a file still being written may
    // have grown past it since.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| {
            file.take(MAX_MANIFEST_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(|e| (problem(None, format!("cannot read: {e}")), true))?;
    if bytes.len() as u64 > MAX_MANIFEST_FILE_BYTES {
        return Err((
            too_large(format!("over {}", MAX_MANIFEST_FILE_BYTES / (1024 * 1024))),
            false,
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|b| **b == b'\n').count() + 1;
        let byte = e.as_bytes().get(good.len()).copied().unwrap_or_default();
        (
            problem(
                Some(line),
                format!("not UTF-8 text: byte 0x{byte:02x} cannot start a character; manifests are UTF-8"),
            ),
            false,
        )
    })
}

fn content_hash(object: &CompactObject) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.json().hash(&mut hasher);
    hasher.finish()
}

/// A stand-in object that names `key`, enough for the source to delete the real one.
fn key_object(key: &ObjectKey) -> Value {
    serde_json::json!({
        "apiVersion": key.0,
        "kind": key.1,
        "metadata": {"namespace": key.2, "name": key.3},
    })
}

/// `(apiVersion, kind, namespace, name)`: an object's identity in the folder.
type ObjectKey = (String, String, String, String);

fn object_key(object: &Value) -> ObjectKey {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    (
        text(object.get("apiVersion")),
        text(object.get("kind")),
        text(object.pointer("/metadata/namespace")),
        text(object.pointer("/metadata/name")),
    )
}

/// What one scan found.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// Files read because they changed.
    pub files_read: usize,
    pub applied: usize,
    pub deleted: usize,
    /// Problems with the file and line they are at; the affected files kept their last good
    /// content (an object whose fields have the wrong type, its last good version).
    pub problems: Vec<ManifestError>,
    /// Files (and the folder itself) whose earlier problems are gone: read again without a
    /// problem of their own, deleted, or (the folder) readable again.
    pub resolved: Vec<PathBuf>,
    /// A new config: the folder's HAProxyTemplateConfig changed, or it is gone
    /// ([`ManifestFolder::config`] is `None` then).
    pub config_changed: bool,
}

/// The folder and what was last read from it.
pub struct ManifestFolder {
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileContent>,
    /// What the source holds: each object's content hash.
    published: BTreeMap<ObjectKey, u64>,
    config: Option<Arc<HAProxyTemplateConfig>>,
    /// Why the folder itself could not be read at the last scan (it is gone, say): reported
    /// once, not on every scan, until it can be read again.
    unreadable: Option<String>,
    /// Manifest files read with the folder's own at every scan, from outside it (the
    /// default certificate's Secret in the work directory).
    extra_files: Vec<PathBuf>,
}

impl ManifestFolder {
    pub fn new(dir: impl Into<PathBuf>) -> ManifestFolder {
        ManifestFolder {
            dir: dir.into(),
            files: BTreeMap::new(),
            published: BTreeMap::new(),
            config: None,
            unreadable: None,
            extra_files: Vec::new(),
        }
    }

    /// Reads `file` with the folder's manifests at every scan.
    pub fn with_extra_file(mut self, file: PathBuf) -> ManifestFolder {
        self.extra_files.push(file);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder's HAProxyTemplateConfig, if it has a valid one; `None` once the folder
    /// holds none (any more).
    pub fn config(&self) -> Option<Arc<HAProxyTemplateConfig>> {
        self.config.clone()
    }

    /// Whether something the last scan found is to be looked at again by the next timed
    /// scan, though nothing changes meanwhile: a file missing or read empty within its grace
    /// (which only timed scans end), a file to read again (one that could not be read, or
    /// one holding an object another file let go), or the folder itself unreadable.
    pub fn needs_rescan(&self) -> bool {
        self.unreadable.is_some()
            || self
                .files
                .values()
                .any(|content| content.vanishing || content.stamp.is_none())
    }

    /// Whether the last scan could read the folder itself.
    pub fn readable(&self) -> bool {
        self.unreadable.is_none()
    }

    /// A timed scan: reads what changed and publishes the differences into `source`; counts
    /// toward the grace of a file that vanished.
    pub fn scan(&mut self, source: &MemorySource) -> ScanReport {
        self.scan_counting(source, true)
    }

    /// A scan a change of the folder asked for: as [`ManifestFolder::scan`], but it does not
    /// count toward the grace of a file that vanished (see the module documentation).
    pub fn scan_for_change(&mut self, source: &MemorySource) -> ScanReport {
        self.scan_counting(source, false)
    }

    fn scan_counting(&mut self, source: &MemorySource, timed: bool) -> ScanReport {
        let mut report = ScanReport::default();
        let mut seen = Vec::new();
        let paths = match crate::drivers::manifest_dir::manifest_files(&self.dir) {
            Ok(mut paths) => {
                paths.extend(self.extra_files.iter().filter(|p| p.is_file()).cloned());
                paths
            }
            Err(e) => {
                // Nothing is taken as deleted: what was read last stays published.
                if self.unreadable.as_deref() != Some(e.message.as_str()) {
                    self.unreadable = Some(e.message.clone());
                    report.problems.push(e);
                }
                return report;
            }
        };
        if self.unreadable.take().is_some() {
            report.resolved.push(self.dir.clone());
        }
        let mut changed = false;
        // A file that became a directory keeps its last good objects: a folder where a
        // manifest was is more likely a mistake than a deletion.
        for (path, content) in &mut self.files {
            if path.is_dir() {
                seen.push(path.clone());
                if !content.shadowed {
                    content.shadowed = true;
                    report.problems.push(ManifestError {
                        file: path.clone(),
                        line: None,
                        message: "is a directory now, not a manifest file; its last good objects stay until a file is back or the directory is removed".into(),
                    });
                }
            }
        }
        // Objects of the files read in this scan (compact: a folder of 10 000 objects must
        // not be held as trees), and the keys those files held before.
        let mut incoming: BTreeMap<ObjectKey, (u64, CompactObject)> = BTreeMap::new();
        let mut dropped: BTreeSet<ObjectKey> = BTreeSet::new();
        for path in paths {
            let stamp = std::fs::metadata(&path).ok().map(|m| Stamp {
                modified: m.modified().ok(),
                len: m.len(),
            });
            seen.push(path.clone());
            let entry = self.files.entry(path.clone()).or_default();
            entry.vanishing = false;
            if entry.stamp.is_some() && entry.stamp == stamp {
                // Back as it was (a file restored with its modification time, say).
                entry.vanished_scans = 0;
                continue;
            }
            report.files_read += 1;
            let text = match read_manifest_text(&path, stamp.map(|s| s.len)) {
                Ok(text) => text,
                Err((problem, retry)) => {
                    if !retry {
                        // Reported once for this content, like a malformed document.
                        entry.stamp = stamp;
                    }
                    report.problems.push(problem);
                    continue;
                }
            };
            let mut read = Vec::new();
            let mut configs = Vec::new();
            // Objects whose fields have the wrong type: not published, as an API server
            // would refuse them.
            let mut refused: Vec<(ObjectKey, usize, SchemaError)> = Vec::new();
            let problems = manifests::visit_manifests(&path, &text, &mut |manifest| {
                if manifest.kind() == "HAProxyTemplateConfig" {
                    let lines =
                        YamlLines::of_document(path.display().to_string(), &text, manifest.line);
                    configs.push((manifest.line, manifest.object, Arc::new(lines)));
                } else {
                    let key = object_key(&manifest.object);
                    if let Err(error) = object_schema::check(&manifest.object) {
                        refused.push((key, manifest.line, error));
                        return;
                    }
                    let object = CompactObject::from(manifest.object);
                    read.push((key, content_hash(&object), manifest.line, object));
                }
            });
            let holds_nothing = read.is_empty()
                && refused.is_empty()
                && configs.is_empty()
                && text.trim().is_empty();
            drop(text);
            if holds_nothing && (!entry.objects.is_empty() || !entry.configs.is_empty()) {
                entry.vanished_scans += u32::from(timed);
                if entry.vanished_scans < VANISHED_SCANS {
                    // Likely truncated to be written again: read it again next scan.
                    entry.stamp = None;
                    entry.vanishing = true;
                    continue;
                }
            }
            if !problems.is_empty() {
                // Keep the last good content; remember the stamp so the same broken file is
                // reported once, not on every scan.
                entry.stamp = stamp;
                report.problems.extend(problems);
                continue;
            }
            let problems_before = report.problems.len();
            let mut objects: HashMap<ObjectKey, (u64, usize)> = HashMap::new();
            for (key, hash, line, object) in read {
                // As `kubectl apply` of the file would: the later document wins.
                if let Some((_, first_line)) = objects.insert(key.clone(), (hash, line)) {
                    report.problems.push(ManifestError {
                        file: path.clone(),
                        line: Some(line),
                        message: format!(
                            "{} is defined twice in this file (first at line {first_line}); this later one is used",
                            display_key(&key)
                        ),
                    });
                }
                incoming.insert(key, (hash, object));
            }
            for (key, line, error) in refused {
                // The version this file held before stays published, as the file was.
                let kept = match (objects.contains_key(&key), entry.objects.get(&key)) {
                    (false, Some(held)) => {
                        objects.insert(key, *held);
                        "its last good version stays"
                    }
                    _ => "the object is left out",
                };
                report.problems.push(ManifestError {
                    file: path.clone(),
                    line: Some(line),
                    message: format!("{error}; {kept}"),
                });
            }
            if report.problems.len() == problems_before {
                report.resolved.push(path.clone());
            }
            dropped.extend(
                entry
                    .objects
                    .keys()
                    .filter(|k| !objects.contains_key(*k))
                    .cloned(),
            );
            let kinds = objects
                .keys()
                .map(|key| (key.0.clone(), key.1.clone()))
                .collect();
            *entry = FileContent {
                stamp,
                objects,
                kinds,
                configs,
                shadowed: false,
                vanished_scans: 0,
                vanishing: false,
            };
            changed = true;
        }
        let removed_files: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| !seen.contains(p))
            .cloned()
            .collect();
        for path in removed_files {
            let Some(content) = self.files.get_mut(&path) else {
                continue;
            };
            // Renamed, or its objects moved to a file read in this scan: let go at once.
            let moved = content.configs.is_empty()
                && content.objects.keys().all(|key| incoming.contains_key(key));
            content.vanished_scans += u32::from(timed);
            if !moved && content.vanished_scans < VANISHED_SCANS {
                content.vanishing = true;
                continue;
            }
            if let Some(content) = self.files.remove(&path) {
                dropped.extend(content.objects.into_keys());
                report.resolved.push(path);
                changed = true;
            }
        }
        report.problems.extend(self.defined_in_two_files(&incoming));
        if !changed {
            return report;
        }

        for (key, (hash, object)) in incoming {
            dropped.remove(&key);
            if self.published.get(&key) != Some(&hash) {
                source.apply_compact(&key.0, &key.1, &key.2, &key.3, object);
                self.published.insert(key, hash);
                report.applied += 1;
            }
        }
        for key in dropped {
            // Another file may still define the object (it moved): read that file again.
            let holder = self
                .files
                .iter_mut()
                .find(|(_, c)| c.objects.contains_key(&key));
            if let Some((_, content)) = holder {
                content.stamp = None;
                continue;
            }
            if self.published.remove(&key).is_some() {
                source.delete(&key_object(&key));
                report.deleted += 1;
            }
        }

        let configs: Vec<(&PathBuf, usize, &Value, &Arc<YamlLines>)> = self
            .files
            .iter()
            .flat_map(|(path, c)| {
                c.configs
                    .iter()
                    .map(move |(line, v, l)| (path, *line, v, l))
            })
            .collect();
        match configs.as_slice() {
            // Gone: the caller falls back to its default.
            [] => report.config_changed |= self.config.take().is_some(),
            [(path, line, value, lines)] => match config_from_value(&path.display().to_string(), (*value).clone()) {
                Ok(mut config) => {
                    config.spec.source = Some(Arc::clone(lines));
                    let config = Arc::new(config);
                    if self.config.as_ref().is_none_or(|c| c.spec != config.spec) {
                        self.config = Some(config);
                        report.config_changed = true;
                    }
                }
                Err(e) => report.problems.push(ManifestError { file: (*path).clone(), line: Some(*line), message: e.to_string() }),
            },
            [(first, first_line, ..), (second, second_line, ..), ..] => report.problems.push(ManifestError {
                file: (*second).clone(),
                line: Some(*second_line),
                message: format!(
                    "a second HAProxyTemplateConfig (the first is at {}:{first_line}); haptor local uses one, so both are ignored until one is removed",
                    first.display()
                ),
            }),
        }
        report
    }
}

impl ManifestFolder {
    /// One problem per object read in this scan that another file also defines: which of
    /// the two the cluster stand-in holds depends on which was written last, so the user
    /// is told where both are.
    fn defined_in_two_files(
        &self,
        incoming: &BTreeMap<ObjectKey, (u64, CompactObject)>,
    ) -> Vec<ManifestError> {
        let mut problems = Vec::new();
        for key in incoming.keys() {
            let holders: Vec<(&PathBuf, usize)> = self
                .files
                .iter()
                // A file vanishing for a moment is not a second definition.
                .filter(|(_, content)| !content.vanishing)
                .filter_map(|(path, content)| content.objects.get(key).map(|(_, l)| (path, *l)))
                .collect();
            if let [(first, first_line), rest @ ..] = holders.as_slice() {
                for (path, line) in rest {
                    problems.push(ManifestError {
                        file: (*path).clone(),
                        line: Some(*line),
                        message: format!(
                            "{} is also defined at {}:{first_line}; keep it in one file (the one written last is used)",
                            display_key(key),
                            first.display()
                        ),
                    });
                }
            }
        }
        problems
    }

    /// Each object in the folder that the config does not read, with where it is and why
    /// (`WatchedKinds::not_read`: with the closest kind it reads).
    pub fn unwatched(&self, watched: &WatchedKinds) -> Vec<(String, ManifestError)> {
        let mut found = Vec::new();
        for (path, content) in &self.files {
            // Most files hold watched kinds only: passed over without a look at each object.
            let all_watched = content
                .kinds
                .iter()
                .all(|(api_version, kind)| watched.reads(api_version, kind));
            if all_watched {
                continue;
            }
            for (key, (_, line)) in &content.objects {
                let Some(message) = watched.not_read(&key.0, &key.1, &display_key(key)) else {
                    continue;
                };
                found.push((
                    display_key(key),
                    ManifestError {
                        file: path.clone(),
                        line: Some(*line),
                        message,
                    },
                ));
            }
        }
        found.sort_by(|a, b| (&a.1.file, a.1.line).cmp(&(&b.1.file, b.1.line)));
        found
    }
}

/// `Kind namespace/name` (`Kind name` when cluster-scoped), for messages.
fn display_key(key: &ObjectKey) -> String {
    if key.2.is_empty() {
        format!("{} {}", key.1, key.3)
    } else {
        format!("{} {}/{}", key.1, key.2, key.3)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::messages::ResourceEvent;

    fn svc(name: &str, port: u16) -> String {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  ports: [{{port: {port}}}]\n"
        )
    }

    /// Writes a file with a new modification time even within the same clock tick.
    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).expect("write");
        let later = SystemTime::now() + std::time::Duration::from_secs(1);
        let file = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        file.set_modified(later).expect("touch");
    }

    async fn next_events(
        stream: &mut futures::stream::BoxStream<'static, ResourceEvent>,
        n: usize,
    ) -> Vec<ResourceEvent> {
        let mut events = Vec::new();
        for _ in 0..n {
            events.push(stream.next().await.expect("an event"));
        }
        events
    }

    #[tokio::test]
    async fn creating_editing_renaming_and_deleting_files_become_resource_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        write(&dir.path().join("a.yaml"), &svc("web", 80));
        let report = folder.scan(&source);
        assert_eq!((report.applied, report.deleted), (1, 0));
        let mut stream = source.stream("v1", "Service");
        assert_eq!(next_events(&mut stream, 3).await.len(), 3, "initial list");

        write(&dir.path().join("a.yaml"), &svc("web", 8080));
        assert_eq!(folder.scan(&source).applied, 1);
        assert!(
            matches!(&next_events(&mut stream, 1).await[0], ResourceEvent::Apply(v) if v.to_value().pointer("/spec/ports/0/port") == Some(&8080.into()))
        );

        // A rename moves the file but not the object: nothing changes.
        std::fs::rename(dir.path().join("a.yaml"), dir.path().join("b.yaml")).expect("rename");
        let report = folder.scan(&source);
        assert_eq!((report.applied, report.deleted), (0, 0));

        std::fs::remove_file(dir.path().join("b.yaml")).expect("delete");
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0, "not yet: it may come back");
        }
        assert_eq!(folder.scan(&source).deleted, 1);
        assert!(matches!(
            next_events(&mut stream, 1).await[0],
            ResourceEvent::Delete(_)
        ));
        assert_eq!(
            folder.scan(&source).files_read,
            0,
            "an unchanged folder reads nothing"
        );
    }

    #[test]
    fn a_file_truncated_or_deleted_and_written_again_between_scans_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let path = dir.path().join("a.yaml");
        write(&path, &svc("web", 80));
        assert_eq!(folder.scan(&source).applied, 1);

        // Truncated, seen empty on a scan, then written again.
        write(&path, "");
        let report = folder.scan(&source);
        assert_eq!((report.applied, report.deleted), (0, 0), "{report:?}");
        write(&path, &svc("web", 80));
        let report = folder.scan(&source);
        assert_eq!((report.applied, report.deleted), (0, 0), "{report:?}");

        // Deleted, seen missing on every scan of the grace but the last, then created again.
        std::fs::remove_file(&path).expect("delete");
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0);
        }
        write(&path, &svc("web", 80));
        let report = folder.scan(&source);
        assert_eq!((report.applied, report.deleted), (0, 0), "{report:?}");

        // Moved away and back with its modification time: the next vanishing gets the
        // whole grace again.
        let aside = dir.path().join("aside");
        std::fs::rename(&path, &aside).expect("move away");
        assert_eq!(folder.scan(&source).deleted, 0);
        std::fs::rename(&aside, &path).expect("move back");
        assert_eq!(folder.scan(&source).files_read, 0, "unchanged");
        std::fs::remove_file(&path).expect("delete");
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0, "the grace starts over");
        }
        write(&path, &svc("web", 80));
        assert_eq!(folder.scan(&source).deleted, 0);

        // Emptied for good: its objects go after the grace.
        write(&path, "");
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0);
        }
        assert_eq!(folder.scan(&source).deleted, 1);

        // A file whose objects are removed from it, leaving text, lets them go at once.
        write(&path, &svc("web", 80));
        assert_eq!(folder.scan(&source).applied, 1);
        write(&path, "# nothing here any more\n");
        assert_eq!(folder.scan(&source).deleted, 1);
    }

    #[test]
    fn scans_a_change_asked_for_leave_a_vanished_files_grace_to_the_timed_scans() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let path = dir.path().join("a.yaml");
        write(&path, &svc("web", 80));
        assert_eq!(folder.scan_for_change(&source).applied, 1);
        assert!(!folder.needs_rescan(), "nothing waits");

        // Deleted: however many changes are scanned for, the objects stay until the timed
        // scans ran out the grace, and until then a timed scan is asked for.
        std::fs::remove_file(&path).expect("delete");
        for _ in 0..3 * VANISHED_SCANS {
            assert_eq!(folder.scan_for_change(&source).deleted, 0);
            assert!(folder.needs_rescan(), "the grace waits for timed scans");
        }
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0);
        }
        assert_eq!(folder.scan(&source).deleted, 1);
        assert!(!folder.needs_rescan(), "nothing waits once the file let go");

        // Truncated: the same.
        write(&path, &svc("web", 80));
        assert_eq!(folder.scan_for_change(&source).applied, 1);
        write(&path, "");
        for _ in 0..3 * VANISHED_SCANS {
            assert_eq!(folder.scan_for_change(&source).deleted, 0);
            assert!(folder.needs_rescan());
        }
        for _ in 1..VANISHED_SCANS {
            assert_eq!(folder.scan(&source).deleted, 0);
        }
        assert_eq!(folder.scan(&source).deleted, 1);
        assert!(!folder.needs_rescan());
    }

    #[test]
    fn an_object_moved_by_emptying_one_file_and_writing_another_is_no_second_definition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        write(&dir.path().join("a.yaml"), &svc("web", 80));
        folder.scan_for_change(&source);
        write(&dir.path().join("a.yaml"), "");
        write(&dir.path().join("b.yaml"), &svc("web", 80));
        let report = folder.scan_for_change(&source);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!((report.applied, report.deleted), (0, 0));
        for _ in 0..VANISHED_SCANS {
            assert!(folder.scan(&source).problems.is_empty());
        }
        assert_eq!(source.objects("v1", "Service").len(), 1, "b.yaml holds it");
    }

    #[test]
    fn a_broken_file_is_reported_with_its_line_and_keeps_its_last_good_objects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        write(&dir.path().join("a.yaml"), &svc("web", 80));
        folder.scan(&source);
        write(
            &dir.path().join("a.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: [oops\n",
        );
        let report = folder.scan(&source);
        assert_eq!(report.problems.len(), 1);
        assert!(
            report.problems[0]
                .to_string()
                .starts_with(&format!("{}:", dir.path().join("a.yaml").display()))
        );
        assert_eq!(report.deleted, 0);
        assert_eq!(
            source.objects("v1", "Service").len(),
            1,
            "the last good Service stays"
        );
        assert!(
            folder.scan(&source).problems.is_empty(),
            "reported once, not on every scan"
        );
    }

    #[test]
    fn the_folders_config_is_picked_up_and_a_second_one_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let config = "apiVersion: haptor.dev/v1alpha1\nkind: HAProxyTemplateConfig\nmetadata: {name: c}\nspec:\n  haproxyConfig: {template: \"global\\n\"}\n";
        write(&dir.path().join("config.yaml"), config);
        assert!(folder.scan(&source).config_changed);
        assert!(folder.config().is_some());
        write(&dir.path().join("second.yaml"), config);
        let report = folder.scan(&source);
        assert!(!report.config_changed);
        assert!(
            report.problems[0]
                .message
                .contains("a second HAProxyTemplateConfig")
        );
    }

    fn slice(port: &str) -> String {
        format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: web}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n"
        )
    }

    #[test]
    fn an_object_whose_field_has_the_wrong_type_is_refused_naming_file_line_and_field_and_its_last_good_version_stays()
     {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let path = dir.path().join("apps.yaml");
        let port = |source: &MemorySource| {
            source.objects("discovery.k8s.io/v1", "EndpointSlice")[0]
                .to_value()
                .pointer("/ports/0/port")
                .cloned()
        };

        // Refused from the start: nothing of it is published, the rest of the file is.
        write(
            &path,
            &format!("{}---\n{}", svc("web", 80), slice("\"19001\"")),
        );
        let report = folder.scan(&source);
        assert_eq!(report.applied, 1, "the Service");
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(
            report.problems[0].to_string(),
            format!(
                "{}:9: EndpointSlice default/web-1: ports[0].port: expected an integer, got the string \"19001\" (write 19001 without quotes); the object is left out",
                path.display()
            )
        );
        assert!(
            source
                .objects("discovery.k8s.io/v1", "EndpointSlice")
                .is_empty()
        );
        assert!(!report.resolved.contains(&path), "the file has a problem");

        // Fixed: published, and the file's problems are resolved.
        write(&path, &format!("{}---\n{}", svc("web", 80), slice("19001")));
        let report = folder.scan(&source);
        assert_eq!(report.applied, 1);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(report.resolved, vec![path.clone()]);
        assert_eq!(port(&source), Some(19001.into()));

        // Broken again: the last good version stays.
        write(
            &path,
            &format!("{}---\n{}", svc("web", 8080), slice("\"19002\"")),
        );
        let report = folder.scan(&source);
        assert_eq!(
            (report.applied, report.deleted),
            (1, 0),
            "the Service changed"
        );
        assert!(
            report.problems[0]
                .message
                .ends_with("; its last good version stays"),
            "{:?}",
            report.problems
        );
        assert_eq!(port(&source), Some(19001.into()));
    }

    #[test]
    fn removing_the_folders_config_leaves_the_folder_without_one_and_says_the_config_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let config = "apiVersion: haptor.dev/v1alpha1\nkind: HAProxyTemplateConfig\nmetadata: {name: c}\nspec:\n  haproxyConfig: {template: \"global\\n\"}\n";
        write(&dir.path().join("config.yaml"), config);
        write(&dir.path().join("a.yaml"), &svc("web", 80));
        assert!(folder.scan(&source).config_changed);
        std::fs::remove_file(dir.path().join("config.yaml")).expect("delete");
        for _ in 1..VANISHED_SCANS {
            assert!(
                !folder.scan(&source).config_changed,
                "not yet: it may come back"
            );
        }
        let report = folder.scan(&source);
        assert!(report.config_changed);
        assert!(folder.config().is_none());
        assert!(
            !folder.scan(&source).config_changed,
            "told once, not on every scan"
        );
    }

    #[test]
    fn an_object_of_a_misspelt_kind_is_unwatched_with_the_closest_watched_kind_suggested() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        write(
            &dir.path().join("a.yaml"),
            &svc("web", 80).replace("kind: Service", "kind: Servce"),
        );
        write(&dir.path().join("b.yaml"), &svc("api", 80));
        folder.scan(&source);
        let found = folder.unwatched(&WatchedKinds::from_pairs([("v1", "Service")]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "Servce default/web");
        assert_eq!(
            found[0].1.to_string(),
            format!(
                "{}:1: Servce default/web is not read by the config: no watched resource has apiVersion v1 and kind Servce; did you mean kind Service?",
                dir.path().join("a.yaml").display()
            )
        );
    }

    #[test]
    fn an_object_defined_in_two_files_stays_while_one_of_them_still_has_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        write(&dir.path().join("a.yaml"), &svc("web", 80));
        write(&dir.path().join("b.yaml"), &svc("web", 80));
        folder.scan(&source);
        std::fs::remove_file(dir.path().join("a.yaml")).expect("delete");
        let report = folder.scan(&source);
        assert_eq!(report.deleted, 0, "b.yaml still defines the Service");
        assert_eq!(source.objects("v1", "Service").len(), 1);
        std::fs::remove_file(dir.path().join("b.yaml")).expect("delete");
        for _ in 0..VANISHED_SCANS {
            folder.scan(&source);
        }
        assert!(source.objects("v1", "Service").is_empty());
    }

    #[tokio::test]
    async fn editing_a_namespace_manifests_labels_moves_its_objects_in_and_out_of_a_selected_stream()
     {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(dir.path());
        let namespace = |team: &str| {
            format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: default\n  labels: {{team: {team}}}\n"
            )
        };
        write(&dir.path().join("ns.yaml"), &namespace("web"));
        write(&dir.path().join("svc.yaml"), &svc("web", 80));
        folder.scan(&source);
        let selector = crate::pure::selector::LabelSelector::parse("team=web").expect("parses");
        let mut stream = source.stream_selected("v1", "Service", Some(selector));
        let listed = next_events(&mut stream, 3).await;
        assert!(
            matches!(listed[1], ResourceEvent::InitApply(_)),
            "{listed:?}"
        );

        write(&dir.path().join("ns.yaml"), &namespace("db"));
        folder.scan(&source);
        assert!(matches!(
            next_events(&mut stream, 1).await[0],
            ResourceEvent::Delete(_)
        ));
        std::fs::remove_file(dir.path().join("ns.yaml")).expect("delete");
        folder.scan(&source);
        write(&dir.path().join("ns.yaml"), &namespace("web"));
        folder.scan(&source);
        assert!(matches!(
            next_events(&mut stream, 1).await[0],
            ResourceEvent::Apply(_)
        ));
    }

    #[test]
    fn a_folder_that_went_missing_is_reported_once_keeps_its_objects_and_is_read_again_when_back() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("manifests");
        std::fs::create_dir(&dir).expect("mkdir");
        let source = MemorySource::new();
        let mut folder = ManifestFolder::new(&dir);
        write(&dir.join("a.yaml"), &svc("web", 80));
        assert_eq!(folder.scan(&source).applied, 1);

        std::fs::remove_dir_all(&dir).expect("rm -rf");
        let gone = folder.scan(&source);
        assert_eq!(gone.problems.len(), 1, "{:?}", gone.problems);
        assert!(gone.problems[0].message.contains("cannot read the folder"));
        assert_eq!(gone.deleted, 0, "nothing is taken as deleted");
        for _ in 0..3 {
            let again = folder.scan(&source);
            assert!(
                again.problems.is_empty(),
                "reported once, not on every scan: {:?}",
                again.problems
            );
        }

        std::fs::create_dir(&dir).expect("mkdir");
        write(&dir.join("a.yaml"), &svc("web", 8080));
        let back = folder.scan(&source);
        assert_eq!((back.applied, back.deleted), (1, 0));
        assert!(back.problems.is_empty());
        std::fs::remove_dir_all(&dir).expect("rm -rf");
        assert_eq!(
            folder.scan(&source).problems.len(),
            1,
            "gone again: reported again"
        );
    }
}
