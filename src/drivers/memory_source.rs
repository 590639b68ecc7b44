//! An in-memory resource source: the stand-in for a Kubernetes API server's watch that
//! `haptor local` (fed by the manifest folder) and the tests (fed directly) use. Like a
//! real watch after a (re)connect, every stream opened on it starts with the full current
//! list (`InitStart`, `InitApply`…, `InitDone`) and then carries each change. Objects are
//! held and sent as [`CompactObject`]s: the source, the events and the stores share one
//! compact copy of each.
//!
//! A stream opened for a watched resource with a `namespaceSelector` carries only the
//! objects of namespaces whose labels match, as the Namespace objects (`v1`/`Namespace`)
//! the source holds declare them (every namespace also has `kubernetes.io/metadata.name`).
//! When a Namespace is applied or deleted and its labels change, the objects of that
//! namespace enter such a stream (an `Apply` each) or leave it (a `Delete` each), so the
//! watcher's store follows; [`NamespaceLabels`] and [`NamespaceChange::membership`] decide
//! which. Label and field selectors are the watcher's to apply.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::messages::ResourceEvent;
use crate::pure::config::WatchedResource;
use crate::pure::selector::namespaces::is_namespace_kind;
use crate::pure::selector::{LabelSelector, NamespaceChange, NamespaceLabels};
use crate::pure::store::CompactObject;
use crate::pure::store::namespace_join::moving_objects;
use crate::seams::ResourceSourceFactory;

/// One open stream.
struct Subscriber {
    tx: mpsc::UnboundedSender<ResourceEvent>,
    /// Only objects of namespaces matching it are sent (cluster-scoped ones always are).
    namespace_selector: Option<LabelSelector>,
}

impl Subscriber {
    fn admits(&self, namespaces: &NamespaceLabels, namespace: &str) -> bool {
        self.namespace_selector
            .as_ref()
            .is_none_or(|s| namespaces.admits(s, namespace))
    }

    /// Sends an event; false when the stream is gone.
    fn send(&self, event: ResourceEvent) -> bool {
        self.tx.send(event).is_ok()
    }
}

#[derive(Default)]
struct Channel {
    objects: BTreeMap<(String, String), CompactObject>,
    subscribers: Vec<Subscriber>,
}

impl Channel {
    /// Sends `event` about an object of `namespace` to every subscriber that admits it, and
    /// drops the subscribers that are gone.
    fn publish(&mut self, namespaces: &NamespaceLabels, namespace: &str, event: ResourceEvent) {
        self.subscribers
            .retain(|s| !s.admits(namespaces, namespace) || s.send(event.clone()));
    }

    /// Lets the objects of a namespace whose labels changed enter or leave every
    /// subscriber's stream, as its namespace selector decides.
    fn namespace_changed(&mut self, change: &NamespaceChange) {
        let objects = &self.objects;
        self.subscribers.retain(|s| {
            let Some(selector) = &s.namespace_selector else {
                return true;
            };
            moving_objects(objects, change, selector)
                .into_iter()
                .all(|event| s.send(event))
        });
    }
}

#[derive(Default)]
struct State {
    channels: HashMap<(String, String), Channel>,
    /// The labels of every namespace, from the Namespace objects held.
    namespaces: NamespaceLabels,
}

impl State {
    fn namespace_changed(&mut self, change: Option<NamespaceChange>) {
        let Some(change) = change else {
            return;
        };
        tracing::debug!(namespace = %change.namespace, "namespace labels changed");
        for channel in self.channels.values_mut() {
            channel.namespace_changed(&change);
        }
    }
}

/// Objects by `apiVersion`/`kind`, with live subscribers. Cheap to clone.
#[derive(Clone, Default)]
pub struct MemorySource {
    state: Arc<Mutex<State>>,
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

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    fn with_channel<T>(&self, key: (String, String), f: impl FnOnce(&mut Channel) -> T) -> T {
        self.with_state(|state| f(state.channels.entry(key).or_default()))
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
        let namespace_change = is_namespace_kind(api_version, kind);
        self.with_state(|state| {
            let change = if namespace_change {
                state.namespaces.apply(&object.to_value())
            } else {
                None
            };
            let channel = state.channels.entry(key).or_default();
            channel
                .objects
                .insert((namespace.to_string(), name.to_string()), object.clone());
            channel.publish(&state.namespaces, namespace, ResourceEvent::Apply(object));
            state.namespace_changed(change);
        });
    }

    /// Removes an object; returns whether it existed.
    pub fn delete(&self, object: &Value) -> bool {
        let key = type_key(object);
        let (namespace, name) = identity(object);
        let namespace_change = is_namespace_kind(&key.0, &key.1);
        self.with_state(|state| {
            let channel = state.channels.entry(key).or_default();
            let Some(old) = channel.objects.remove(&(namespace.clone(), name.clone())) else {
                return false;
            };
            channel.publish(&state.namespaces, &namespace, ResourceEvent::Delete(old));
            if namespace_change {
                let change = state.namespaces.remove(&name);
                state.namespace_changed(change);
            }
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
        self.stream_selected(api_version, kind, None)
    }

    /// Opens a stream of one apiVersion and kind restricted to the namespaces that match
    /// `namespace_selector` (none: every namespace): the current list, then changes,
    /// including objects entering and leaving as their namespace's labels change.
    pub fn stream_selected(
        &self,
        api_version: &str,
        kind: &str,
        namespace_selector: Option<LabelSelector>,
    ) -> BoxStream<'static, ResourceEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let key = (api_version.to_string(), kind.to_string());
        self.with_state(|state| {
            let subscriber = Subscriber {
                tx,
                namespace_selector,
            };
            let channel = state.channels.entry(key).or_default();
            subscriber.send(ResourceEvent::InitStart);
            for ((namespace, _), object) in &channel.objects {
                if subscriber.admits(&state.namespaces, namespace) {
                    subscriber.send(ResourceEvent::InitApply(object.clone()));
                }
            }
            subscriber.send(ResourceEvent::InitDone);
            channel.subscribers.push(subscriber);
        });
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .boxed()
    }
}

impl ResourceSourceFactory for MemorySource {
    fn open(&self, resource: &str, watched: &WatchedResource) -> BoxStream<'static, ResourceEvent> {
        let namespace_selector = match LabelSelector::parse_optional(
            watched.namespace_selector.as_deref(),
        ) {
            Ok(selector) => selector,
            Err(error) => {
                // Config validation refuses such a config before any watcher opens.
                tracing::error!(%resource, %error, "unusable namespaceSelector: the stream carries no namespaced objects");
                Some(LabelSelector::nothing())
            }
        };
        self.stream_selected(
            &watched.api_version,
            &watched.kind_name(),
            namespace_selector,
        )
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
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

    fn ingress(namespace: &str, name: &str) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": namespace}})
    }

    fn namespace(name: &str, team: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}})
    }

    fn team_web() -> Option<LabelSelector> {
        LabelSelector::parse_optional(Some("team=web")).expect("parses")
    }

    /// The events a stream holds right now.
    fn pending(stream: &mut BoxStream<'static, ResourceEvent>) -> Vec<ResourceEvent> {
        let mut events = Vec::new();
        while let Some(Some(event)) = stream.next().now_or_never() {
            events.push(event);
        }
        events
    }

    #[test]
    fn a_namespace_selected_stream_lists_only_objects_of_matching_namespaces() {
        let source = MemorySource::new();
        source.apply(namespace("shop", "web"));
        source.apply(namespace("blog", "docs"));
        source.apply(ingress("shop", "a"));
        source.apply(ingress("blog", "b"));
        source.apply(ingress("bare", "c"));
        let mut stream = source.stream_selected("networking.k8s.io/v1", "Ingress", team_web());
        assert_eq!(
            pending(&mut stream),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(ingress("shop", "a").into()),
                ResourceEvent::InitDone,
            ]
        );
        source.apply(ingress("blog", "b2"));
        source.delete(&ingress("blog", "b"));
        assert_eq!(
            pending(&mut stream),
            vec![],
            "changes in other namespaces are not sent"
        );
        source.apply(ingress("shop", "a2"));
        assert_eq!(
            pending(&mut stream),
            vec![ResourceEvent::Apply(ingress("shop", "a2").into())]
        );
    }

    #[test]
    fn objects_enter_and_leave_a_stream_as_their_namespaces_labels_change() {
        let source = MemorySource::new();
        source.apply(ingress("shop", "a"));
        source.apply(ingress("shop", "b"));
        source.apply(ingress("blog", "c"));
        let mut selected = source.stream_selected("networking.k8s.io/v1", "Ingress", team_web());
        let mut everything = source.stream("networking.k8s.io/v1", "Ingress");
        assert_eq!(pending(&mut selected).len(), 2, "nothing matches yet");
        assert_eq!(pending(&mut everything).len(), 5);

        source.apply(namespace("shop", "web"));
        assert_eq!(
            pending(&mut selected),
            vec![
                ResourceEvent::Apply(ingress("shop", "a").into()),
                ResourceEvent::Apply(ingress("shop", "b").into()),
            ]
        );
        source.apply(namespace("shop", "web"));
        assert_eq!(
            pending(&mut selected),
            vec![],
            "the same labels again change nothing"
        );

        source.apply(namespace("shop", "db"));
        assert_eq!(
            pending(&mut selected),
            vec![
                ResourceEvent::Delete(ingress("shop", "a").into()),
                ResourceEvent::Delete(ingress("shop", "b").into()),
            ]
        );
        source.apply(namespace("shop", "web"));
        assert_eq!(pending(&mut selected).len(), 2, "back in");
        assert!(source.delete(&namespace("shop", "web")));
        assert_eq!(
            pending(&mut selected),
            vec![
                ResourceEvent::Delete(ingress("shop", "a").into()),
                ResourceEvent::Delete(ingress("shop", "b").into()),
            ],
            "a deleted Namespace takes its labels with it"
        );
        assert_eq!(
            pending(&mut everything),
            vec![],
            "a stream without a namespace selector never sees namespace changes"
        );
    }

    #[test]
    fn cluster_scoped_objects_pass_a_namespace_selector() {
        let source = MemorySource::new();
        let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "haptor"}});
        source.apply(class.clone());
        let mut stream = source.stream_selected("networking.k8s.io/v1", "IngressClass", team_web());
        assert_eq!(
            pending(&mut stream),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(class.into()),
                ResourceEvent::InitDone,
            ]
        );
    }

    #[test]
    fn opening_a_watched_resource_applies_its_namespace_selector() {
        let source = MemorySource::new();
        source.apply(ingress("shop", "a"));
        source.apply(ingress("blog", "b"));
        let watched = WatchedResource {
            api_version: "networking.k8s.io/v1".into(),
            resources: "ingresses".into(),
            namespace_selector: Some("kubernetes.io/metadata.name=blog".into()),
            ..Default::default()
        };
        let mut stream = source.open("ingresses", &watched);
        assert_eq!(
            pending(&mut stream),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(ingress("blog", "b").into()),
                ResourceEvent::InitDone,
            ],
            "every namespace has its name label, with or without a Namespace object"
        );
    }
}
