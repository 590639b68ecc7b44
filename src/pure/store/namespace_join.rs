//! The namespace selection of a watched resource fed by two watches: the resource's
//! cluster-wide watch and a watch of the Namespaces' labels. [`NamespaceJoin`] keeps what
//! both said and turns it into the one stream of [`ResourceEvent`]s the resource's store
//! follows, holding the objects of namespaces whose labels match the `namespaceSelector`
//! (cluster-scoped objects always pass). [`moving_objects`] is the one rule for what a
//! namespace's relabelling does to a selection, its objects entering or leaving; the
//! in-memory source of `haptor local` applies it too. Pure: `drivers::kube::resources`
//! runs the watches and feeds their events in.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::pure::selector::{LabelSelector, Membership, NamespaceChange, NamespaceLabels};
use crate::pure::store::{CompactObject, ResourceEvent};

/// A watch's event as a watcher reports it: a list (`Init`, `InitApply`…, `InitDone`)
/// first and after every relist, then each change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListEvent<T> {
    Init,
    InitApply(T),
    InitDone,
    Apply(T),
    Delete(T),
}

/// One object of the watched resource with its namespace (empty when cluster-scoped) and
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    pub namespace: String,
    pub name: String,
    pub object: CompactObject,
}

impl From<ListEvent<Keyed>> for ResourceEvent {
    fn from(event: ListEvent<Keyed>) -> ResourceEvent {
        match event {
            ListEvent::Init => ResourceEvent::InitStart,
            ListEvent::InitApply(keyed) => ResourceEvent::InitApply(keyed.object),
            ListEvent::InitDone => ResourceEvent::InitDone,
            ListEvent::Apply(keyed) => ResourceEvent::Apply(keyed.object),
            ListEvent::Delete(keyed) => ResourceEvent::Delete(keyed.object),
        }
    }
}

/// What a change of one namespace's labels does to a selection holding `objects` (by
/// namespace and name): each object of that namespace enters (`Apply`) when the namespace
/// starts to match `selector`, leaves (`Delete`) when it stops; nothing otherwise.
pub fn moving_objects(
    objects: &BTreeMap<(String, String), CompactObject>,
    change: &NamespaceChange,
    selector: &LabelSelector,
) -> Vec<ResourceEvent> {
    let event: fn(CompactObject) -> ResourceEvent = match change.membership(selector) {
        Membership::Enter => ResourceEvent::Apply,
        Membership::Leave => ResourceEvent::Delete,
        Membership::Unchanged => return vec![],
    };
    let namespace = &change.namespace;
    objects
        .range((namespace.clone(), String::new())..)
        .take_while(|((ns, _), _)| ns == namespace)
        .map(|(_, object)| event(object.clone()))
        .collect()
}

/// The namespace selection of one watched resource: the resource's cluster-wide watch and
/// the Namespaces watch in, the objects of namespaces whose labels match the selector out
/// (cluster-scoped objects always pass). Its own events mirror the watcher's: a list
/// (`InitStart`, `InitApply`…, `InitDone`), sent as one once the resource's list is complete
/// and the Namespaces have been listed, then changes. A namespace whose labels start or stop
/// matching lets its objects enter (`Apply` each) or leave (`Delete` each).
#[derive(Debug)]
pub struct NamespaceJoin {
    selector: LabelSelector,
    labels: NamespaceLabels,
    /// The Namespaces `labels` holds objects of.
    known: BTreeSet<String>,
    /// The Namespaces listed so far by a Namespaces (re)list in progress.
    namespaces_listing: Option<BTreeSet<String>>,
    namespaces_listed: bool,
    /// Every object of the resource as the server has it, matching or not, by namespace
    /// and name: an object enters when its namespace starts to match.
    objects: BTreeMap<(String, String), CompactObject>,
    /// The objects of a list of the resource in progress.
    listing: Option<BTreeMap<(String, String), CompactObject>>,
    /// A complete list of the resource waits for the Namespaces' first list.
    list_waiting: bool,
    /// A list has been sent: changes are sent from now on.
    live: bool,
}

impl NamespaceJoin {
    pub fn new(selector: LabelSelector) -> NamespaceJoin {
        NamespaceJoin {
            selector,
            labels: NamespaceLabels::new(),
            known: BTreeSet::new(),
            namespaces_listing: None,
            namespaces_listed: false,
            objects: BTreeMap::new(),
            listing: None,
            list_waiting: false,
            live: false,
        }
    }

    fn admits(&self, namespace: &str) -> bool {
        self.labels.admits(&self.selector, namespace)
    }

    /// An event of the resource's watch.
    pub fn on_objects(&mut self, event: ListEvent<Keyed>) -> Vec<ResourceEvent> {
        match event {
            ListEvent::Init => {
                self.listing = Some(BTreeMap::new());
                self.list_waiting = false;
                vec![]
            }
            ListEvent::InitApply(keyed) => {
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert((keyed.namespace, keyed.name), keyed.object);
                vec![]
            }
            ListEvent::InitDone => {
                self.objects = self.listing.take().unwrap_or_default();
                if self.namespaces_listed {
                    self.list()
                } else {
                    self.list_waiting = true;
                    vec![]
                }
            }
            ListEvent::Apply(keyed) => {
                let admitted = self.admits(&keyed.namespace);
                self.objects
                    .insert((keyed.namespace, keyed.name), keyed.object.clone());
                if self.live && admitted {
                    vec![ResourceEvent::Apply(keyed.object)]
                } else {
                    vec![]
                }
            }
            ListEvent::Delete(keyed) => {
                let admitted = self.admits(&keyed.namespace);
                self.objects.remove(&(keyed.namespace, keyed.name));
                if self.live && admitted {
                    vec![ResourceEvent::Delete(keyed.object)]
                } else {
                    vec![]
                }
            }
        }
    }

    /// An event of the Namespaces watch (each object a Namespace's metadata).
    pub fn on_namespaces(&mut self, event: ListEvent<Value>) -> Vec<ResourceEvent> {
        match event {
            ListEvent::Init => {
                self.namespaces_listing = Some(BTreeSet::new());
                vec![]
            }
            ListEvent::InitApply(namespace) => {
                if let Some(name) = name_of(&namespace) {
                    self.namespaces_listing
                        .get_or_insert_with(BTreeSet::new)
                        .insert(name.to_string());
                }
                self.namespace_applied(&namespace)
            }
            ListEvent::InitDone => {
                // Namespaces not listed again are gone.
                let listed = self.namespaces_listing.take().unwrap_or_default();
                let gone: Vec<String> = self.known.difference(&listed).cloned().collect();
                let mut events = Vec::new();
                for name in gone {
                    events.extend(self.namespace_removed(&name));
                }
                self.known = listed;
                self.namespaces_listed = true;
                if self.list_waiting {
                    events.extend(self.list());
                }
                events
            }
            ListEvent::Apply(namespace) => self.namespace_applied(&namespace),
            ListEvent::Delete(namespace) => match name_of(&namespace) {
                Some(name) => {
                    let name = name.to_string();
                    self.namespace_removed(&name)
                }
                None => vec![],
            },
        }
    }

    fn namespace_applied(&mut self, namespace: &Value) -> Vec<ResourceEvent> {
        if let Some(name) = name_of(namespace) {
            self.known.insert(name.to_string());
        }
        let change = self.labels.apply(namespace);
        self.membership(change)
    }

    fn namespace_removed(&mut self, name: &str) -> Vec<ResourceEvent> {
        self.known.remove(name);
        let change = self.labels.remove(name);
        self.membership(change)
    }

    /// The objects of a namespace whose labels changed, entering or leaving.
    fn membership(&self, change: Option<NamespaceChange>) -> Vec<ResourceEvent> {
        match change.filter(|_| self.live) {
            Some(change) => moving_objects(&self.objects, &change, &self.selector),
            None => vec![],
        }
    }

    /// The whole list of admitted objects, as one list.
    fn list(&mut self) -> Vec<ResourceEvent> {
        self.list_waiting = false;
        self.live = true;
        let mut events = vec![ResourceEvent::InitStart];
        events.extend(
            self.objects
                .iter()
                .filter(|((namespace, _), _)| self.admits(namespace))
                .map(|(_, object)| ResourceEvent::InitApply(object.clone())),
        );
        events.push(ResourceEvent::InitDone);
        events
    }
}

fn name_of(namespace: &Value) -> Option<&str> {
    namespace
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ingress(namespace: &str, name: &str) -> Keyed {
        let value = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": { "name": name, "namespace": namespace },
        });
        Keyed {
            namespace: namespace.into(),
            name: name.into(),
            object: CompactObject::from_value(&value),
        }
    }

    fn namespace(name: &str, team: &str) -> Value {
        json!({ "metadata": { "name": name, "labels": { "team": team } } })
    }

    fn join() -> NamespaceJoin {
        NamespaceJoin::new(LabelSelector::parse("team=web").expect("parses"))
    }

    fn list(join: &mut NamespaceJoin, objects: &[Keyed]) -> Vec<ResourceEvent> {
        let mut events = join.on_objects(ListEvent::Init);
        for object in objects {
            events.extend(join.on_objects(ListEvent::InitApply(object.clone())));
        }
        events.extend(join.on_objects(ListEvent::InitDone));
        events
    }

    fn list_namespaces(join: &mut NamespaceJoin, namespaces: &[Value]) -> Vec<ResourceEvent> {
        let mut events = join.on_namespaces(ListEvent::Init);
        for namespace in namespaces {
            events.extend(join.on_namespaces(ListEvent::InitApply(namespace.clone())));
        }
        events.extend(join.on_namespaces(ListEvent::InitDone));
        events
    }

    #[test]
    fn the_list_waits_for_the_namespaces_and_carries_only_matching_namespaces_objects() {
        let mut join = join();
        let objects = [ingress("shop", "a"), ingress("blog", "b")];
        assert_eq!(
            list(&mut join, &objects),
            vec![],
            "the namespaces are not known yet"
        );
        assert_eq!(
            join.on_objects(ListEvent::Apply(ingress("shop", "c"))),
            vec![],
            "nothing is sent before the list"
        );
        assert_eq!(
            list_namespaces(
                &mut join,
                &[namespace("shop", "web"), namespace("blog", "docs")]
            ),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(ingress("shop", "a").object),
                ResourceEvent::InitApply(ingress("shop", "c").object),
                ResourceEvent::InitDone,
            ]
        );
        assert_eq!(
            join.on_objects(ListEvent::Apply(ingress("blog", "d"))),
            vec![]
        );
        assert_eq!(
            join.on_objects(ListEvent::Delete(ingress("shop", "a"))),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)]
        );
    }

    #[test]
    fn relabelling_a_namespace_moves_its_objects_in_and_out() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "docs")]);
        assert_eq!(
            list(&mut join, &[ingress("shop", "a"), ingress("shop", "b")]),
            vec![ResourceEvent::InitStart, ResourceEvent::InitDone]
        );
        let entered = join.on_namespaces(ListEvent::Apply(namespace("shop", "web")));
        assert_eq!(
            entered,
            vec![
                ResourceEvent::Apply(ingress("shop", "a").object),
                ResourceEvent::Apply(ingress("shop", "b").object),
            ]
        );
        assert_eq!(
            join.on_namespaces(ListEvent::Apply(namespace("shop", "web"))),
            vec![],
            "the same labels again change nothing"
        );
        assert_eq!(
            join.on_namespaces(ListEvent::Delete(namespace("shop", "web"))),
            vec![
                ResourceEvent::Delete(ingress("shop", "a").object),
                ResourceEvent::Delete(ingress("shop", "b").object),
            ]
        );
    }

    #[test]
    fn a_namespaces_relist_drops_namespaces_no_longer_listed() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "web")]);
        assert_eq!(list(&mut join, &[ingress("shop", "a")]).len(), 3);
        assert_eq!(
            list_namespaces(&mut join, &[]),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)],
            "its labels went with it"
        );
    }

    #[test]
    fn a_relist_of_the_resource_is_judged_by_the_labels_at_its_end() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "web")]);
        list(&mut join, &[ingress("shop", "a")]);
        assert_eq!(join.on_objects(ListEvent::Init), vec![]);
        join.on_objects(ListEvent::InitApply(ingress("shop", "b")));
        assert_eq!(
            join.on_namespaces(ListEvent::Apply(namespace("shop", "docs"))),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)],
            "what was sent leaves at once"
        );
        assert_eq!(
            join.on_objects(ListEvent::InitDone),
            vec![ResourceEvent::InitStart, ResourceEvent::InitDone]
        );
    }

    #[test]
    fn cluster_scoped_objects_pass() {
        let mut join = join();
        list_namespaces(&mut join, &[]);
        let class = ingress("", "haptor");
        assert_eq!(
            list(&mut join, std::slice::from_ref(&class)),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(class.object),
                ResourceEvent::InitDone,
            ]
        );
    }
}
