//! The manifest folder of `haptor local`: the stand-in for a Kubernetes API server. A scan
//! reads every manifest file that changed since the last scan (created, modified, deleted or
//! renamed), and turns the folder's content into changes of an in-memory resource source and
//! of the config channel. A file with a malformed document keeps its last good content: its
//! problems are reported with file and line, and nothing it held is removed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::actors::sources::MemorySource;
use crate::pure::config::{HAProxyTemplateConfig, config_from_value};
use crate::pure::manifests::{self, ManifestError};
use crate::pure::store::CompactObject;

/// When a file last changed, as far as a scan can tell without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

#[derive(Debug, Default)]
struct FileContent {
    stamp: Option<Stamp>,
    /// The file's objects by identity, with a hash of their content: the objects themselves
    /// live in the resource source only, so a large folder is held in memory once.
    objects: HashMap<ObjectKey, u64>,
    configs: Vec<(usize, Value)>,
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
    /// Problems with the file and line they are at; the affected files kept their last good content.
    pub problems: Vec<ManifestError>,
    /// A new config (the folder's HAProxyTemplateConfig changed).
    pub config_changed: bool,
}

/// The folder and what was last read from it.
pub struct ManifestFolder {
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileContent>,
    /// What the source holds: each object's content hash.
    published: BTreeMap<ObjectKey, u64>,
    config: Option<Arc<HAProxyTemplateConfig>>,
}

impl ManifestFolder {
    pub fn new(dir: impl Into<PathBuf>) -> ManifestFolder {
        ManifestFolder {
            dir: dir.into(),
            files: BTreeMap::new(),
            published: BTreeMap::new(),
            config: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder's HAProxyTemplateConfig, if it has a valid one.
    pub fn config(&self) -> Option<Arc<HAProxyTemplateConfig>> {
        self.config.clone()
    }

    /// Reads what changed and publishes the differences into `source`.
    pub fn scan(&mut self, source: &MemorySource) -> ScanReport {
        let mut report = ScanReport::default();
        let mut seen = Vec::new();
        let paths = match crate::drivers::manifest_dir::manifest_files(&self.dir) {
            Ok(paths) => paths,
            Err(e) => {
                report.problems.push(e);
                return report;
            }
        };
        let mut changed = false;
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
            if entry.stamp.is_some() && entry.stamp == stamp {
                continue;
            }
            report.files_read += 1;
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) => {
                    report.problems.push(ManifestError {
                        file: path.clone(),
                        line: None,
                        message: format!("cannot read: {e}"),
                    });
                    continue;
                }
            };
            let mut read = Vec::new();
            let mut configs = Vec::new();
            let problems = manifests::visit_manifests(&path, &text, &mut |manifest| {
                if manifest.kind() == "HAProxyTemplateConfig" {
                    configs.push((manifest.line, manifest.object));
                } else {
                    let key = object_key(&manifest.object);
                    let object = CompactObject::from(manifest.object);
                    read.push((key, content_hash(&object), object));
                }
            });
            drop(text);
            if !problems.is_empty() {
                // Keep the last good content; remember the stamp so the same broken file is
                // reported once, not on every scan.
                entry.stamp = stamp;
                report.problems.extend(problems);
                continue;
            }
            let mut objects = HashMap::new();
            for (key, hash, object) in read {
                objects.insert(key.clone(), hash);
                incoming.insert(key, (hash, object));
            }
            dropped.extend(
                entry
                    .objects
                    .keys()
                    .filter(|k| !objects.contains_key(*k))
                    .cloned(),
            );
            *entry = FileContent {
                stamp,
                objects,
                configs,
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
            if let Some(content) = self.files.remove(&path) {
                dropped.extend(content.objects.into_keys());
                changed = true;
            }
        }
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

        let configs: Vec<(&PathBuf, usize, &Value)> = self
            .files
            .iter()
            .flat_map(|(path, c)| c.configs.iter().map(move |(line, v)| (path, *line, v)))
            .collect();
        match configs.as_slice() {
            [] => {}
            [(path, line, value)] => match config_from_value(&path.display().to_string(), (*value).clone()) {
                Ok(config) => {
                    let config = Arc::new(config);
                    if self.config.as_ref().is_none_or(|c| c.spec != config.spec) {
                        self.config = Some(config);
                        report.config_changed = true;
                    }
                }
                Err(e) => report.problems.push(ManifestError { file: (*path).clone(), line: Some(*line), message: e.to_string() }),
            },
            [(first, first_line, _), (second, second_line, _), ..] => report.problems.push(ManifestError {
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
        folder.scan(&source);
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
}
