//! An in-memory resource source: the stand-in for a Kubernetes API server's watch that
//! `haptor local` (fed by the manifest folder) and the tests (fed directly) use. Like a
//! real watch after a (re)connect, every stream opened on it starts with the full current
//! list (`InitStart`, `InitApply`…, `InitDone`) and then carries each change. Objects are
//! held and sent as [`CompactObject`]s: the source, the events and the stores share one
//! compact copy of each.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::actors::context::ResourceSourceFactory;
use crate::messages::ResourceEvent;
use crate::pure::config::WatchedResource;
use crate::pure::store::CompactObject;

#[derive(Default)]
struct Channel {
    objects: BTreeMap<(String, String), CompactObject>,
    subscribers: Vec<mpsc::UnboundedSender<ResourceEvent>>,
}

/// Objects by `apiVersion`/`kind`, with live subscribers. Cheap to clone.
#[derive(Clone, Default)]
pub struct MemorySource {
    channels: Arc<Mutex<HashMap<(String, String), Channel>>>,
}

fn identity(object: &Value) -> (String, String) {
    let meta = object.get("metadata");
    let get = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    (get("namespace"), get("name"))
}

fn type_key(object: &Value) -> (String, String) {
    let get = |k: &str| {
        object
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    (get("apiVersion"), get("kind"))
}

impl MemorySource {
    pub fn new() -> MemorySource {
        MemorySource::default()
    }

    fn with_channel<T>(&self, key: (String, String), f: impl FnOnce(&mut Channel) -> T) -> T {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        f(channels.entry(key).or_default())
    }

    /// Adds or replaces an object (by apiVersion, kind, namespace and name). The source and
    /// every subscriber share the one compact copy.
    pub fn apply(&self, object: Value) {
        let (api_version, kind) = type_key(&object);
        let (namespace, name) = identity(&object);
        self.apply_compact(&api_version, &kind, &namespace, &name, object.into());
    }

    /// Adds or replaces an object already in compact form, named by its apiVersion, kind,
    /// namespace and name (the manifest folder knows them from reading it).
    pub fn apply_compact(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        object: CompactObject,
    ) {
        let key = (api_version.to_string(), kind.to_string());
        self.with_channel(key, |channel| {
            channel
                .objects
                .insert((namespace.to_string(), name.to_string()), object.clone());
            channel
                .subscribers
                .retain(|s| s.send(ResourceEvent::Apply(object.clone())).is_ok());
        });
    }

    /// Removes an object; returns whether it existed.
    pub fn delete(&self, object: &Value) -> bool {
        let key = type_key(object);
        self.with_channel(key, |channel| {
            let Some(old) = channel.objects.remove(&identity(object)) else {
                return false;
            };
            channel
                .subscribers
                .retain(|s| s.send(ResourceEvent::Delete(old.clone())).is_ok());
            true
        })
    }

    /// Every object of one apiVersion and kind.
    pub fn objects(&self, api_version: &str, kind: &str) -> Vec<CompactObject> {
        self.with_channel((api_version.to_string(), kind.to_string()), |c| {
            c.objects.values().cloned().collect()
        })
    }

    /// Opens a stream of one apiVersion and kind: the current list, then changes.
    pub fn stream(&self, api_version: &str, kind: &str) -> BoxStream<'static, ResourceEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.with_channel((api_version.to_string(), kind.to_string()), |channel| {
            let _ = tx.send(ResourceEvent::InitStart);
            for object in channel.objects.values() {
                let _ = tx.send(ResourceEvent::InitApply(object.clone()));
            }
            let _ = tx.send(ResourceEvent::InitDone);
            channel.subscribers.push(tx);
        });
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .boxed()
    }
}

impl ResourceSourceFactory for MemorySource {
    fn open(
        &self,
        _resource: &str,
        watched: &WatchedResource,
    ) -> BoxStream<'static, ResourceEvent> {
        self.stream(&watched.api_version, &watched.kind_name())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_new_stream_starts_with_the_current_list_then_carries_changes() {
        let source = MemorySource::new();
        let svc = |name: &str| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}});
        source.apply(svc("a"));
        let mut stream = source.stream("v1", "Service");
        assert_eq!(stream.next().await, Some(ResourceEvent::InitStart));
        assert_eq!(
            stream.next().await,
            Some(ResourceEvent::InitApply(svc("a").into()))
        );
        assert_eq!(stream.next().await, Some(ResourceEvent::InitDone));
        source.apply(svc("b"));
        assert!(source.delete(&svc("a")));
        assert_eq!(
            stream.next().await,
            Some(ResourceEvent::Apply(svc("b").into()))
        );
        assert_eq!(
            stream.next().await,
            Some(ResourceEvent::Delete(svc("a").into()))
        );
        assert!(!source.delete(&svc("a")), "deleting twice finds nothing");
    }
}
