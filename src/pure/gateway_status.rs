//! The Gateway API status a render decided: what the templates recorded with `condition`,
//! `listener_kinds` and `attached_route` while they rendered, shaped into the `status` each
//! GatewayClass, Gateway and Route carries. The decisions (which listener a route attaches
//! to, why a reference is refused) are the templates'; this module only gathers them:
//!
//! - a condition belongs to an object (GatewayClass, Gateway), one of a Gateway's listeners
//!   (`listener=NAME`) or one of a Route's parents (`parent=REF`, the parentRef as the Route
//!   wrote it); per scope and type, the record of the highest `priority` wins, the first
//!   recorded among equals, so a template can record a default and let a later, more
//!   important finding (an unresolved reference, an attachment) replace it;
//! - a listener's `supportedKinds` are the kinds `listener_kinds` recorded for it, and its
//!   `attachedRoutes` the number of distinct Routes `attached_route` recorded for it;
//! - every condition carries the object's `metadata.generation` as `observedGeneration`.
//!
//! [`statuses`] gives, per object in key order, the status haptor would write, without
//! `lastTransitionTime` (the writer keeps the time of a condition that did not change and
//! stamps the others). `haptor render`, `/debug/vars/status` and `haptor run`'s status
//! writer all read it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::pure::rendered::ObjectKey;

/// The API group of the Gateway API kinds.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// One condition as a template recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub priority: i64,
}

/// A Route's reference to its parent, as the Route wrote it (kept as given, so the status
/// names the parent the way the spec did; group and kind default to a Gateway's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParentRef {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<i64>,
}

impl ParentRef {
    /// The parentRef object `value` of a Route in `route_namespace`; `None` without a name.
    pub fn from_spec(value: &Value, route_namespace: &str) -> Option<ParentRef> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        Some(ParentRef {
            group: text("group").unwrap_or_else(|| GATEWAY_GROUP.to_string()),
            kind: text("kind").unwrap_or_else(|| "Gateway".to_string()),
            namespace: text("namespace").unwrap_or_else(|| route_namespace.to_string()),
            name: text("name").filter(|name| !name.is_empty())?,
            section_name: text("sectionName"),
            port: value.get("port").and_then(Value::as_i64),
        })
    }

    fn to_json(&self) -> Value {
        let mut reference = Map::new();
        reference.insert("group".into(), json!(self.group));
        reference.insert("kind".into(), json!(self.kind));
        reference.insert("namespace".into(), json!(self.namespace));
        reference.insert("name".into(), json!(self.name));
        if let Some(section) = &self.section_name {
            reference.insert("sectionName".into(), json!(section));
        }
        if let Some(port) = self.port {
            reference.insert("port".into(), json!(port));
        }
        Value::Object(reference)
    }
}

/// What part of an object a condition is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The object itself (`status.conditions`).
    Object,
    /// A Gateway's listener (`status.listeners[name].conditions`).
    Listener(String),
    /// A Route's parent (`status.parents[parentRef].conditions`), with the controller name
    /// the entry carries.
    Parent {
        parent: ParentRef,
        controller: String,
    },
}

/// One thing a template recorded about an object's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusRecord {
    Condition {
        object: ObjectKey,
        generation: Option<i64>,
        scope: Scope,
        condition: RecordedCondition,
    },
    /// The kinds of Route a listener accepts.
    ListenerKinds {
        gateway: ObjectKey,
        generation: Option<i64>,
        listener: String,
        kinds: Vec<String>,
    },
    /// A Route attached to a listener.
    Attached {
        gateway: ObjectKey,
        generation: Option<i64>,
        listener: String,
        route: ObjectKey,
    },
}

impl StatusRecord {
    fn object(&self) -> (&ObjectKey, Option<i64>) {
        match self {
            StatusRecord::Condition {
                object, generation, ..
            } => (object, *generation),
            StatusRecord::ListenerKinds {
                gateway,
                generation,
                ..
            }
            | StatusRecord::Attached {
                gateway,
                generation,
                ..
            } => (gateway, *generation),
        }
    }
}

/// The status haptor writes to one object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectStatus {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

impl ObjectStatus {
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The conditions of one scope, by type in first-recorded order.
#[derive(Default)]
struct Conditions(Vec<RecordedCondition>);

impl Conditions {
    /// Keeps `next` unless a condition of its type with at least its priority is there.
    fn record(&mut self, next: &RecordedCondition) {
        match self.0.iter_mut().find(|c| c.type_ == next.type_) {
            Some(existing) if existing.priority < next.priority => *existing = next.clone(),
            Some(_) => {}
            None => self.0.push(next.clone()),
        }
    }

    fn to_json(&self, generation: Option<i64>) -> Value {
        Value::Array(
            self.0
                .iter()
                .map(|c| {
                    let mut condition = Map::new();
                    condition.insert("type".into(), json!(c.type_));
                    condition.insert("status".into(), json!(c.status));
                    condition.insert("reason".into(), json!(c.reason));
                    condition.insert("message".into(), json!(c.message));
                    if let Some(generation) = generation {
                        condition.insert("observedGeneration".into(), json!(generation));
                    }
                    Value::Object(condition)
                })
                .collect(),
        )
    }
}

#[derive(Default)]
struct Listener {
    conditions: Conditions,
    kinds: Vec<String>,
    attached: BTreeSet<ObjectKey>,
}

#[derive(Default)]
struct Gathered {
    generation: Option<i64>,
    conditions: Conditions,
    /// Listeners in first-recorded order.
    listeners: Vec<(String, Listener)>,
    /// Parents in first-recorded order.
    parents: Vec<(ParentRef, String, Conditions)>,
}

impl Gathered {
    fn listener(&mut self, name: &str) -> &mut Listener {
        let index = match self.listeners.iter().position(|(n, _)| n == name) {
            Some(index) => index,
            None => {
                self.listeners.push((name.to_string(), Listener::default()));
                self.listeners.len() - 1
            }
        };
        &mut self.listeners[index].1
    }
}

/// The status of every object the records name, in key order. An object with listener
/// records gets `listeners` (a Gateway), one with parent records `parents` (a Route), one
/// with object conditions `conditions`.
pub fn statuses(records: &[StatusRecord]) -> Vec<ObjectStatus> {
    let mut objects: BTreeMap<ObjectKey, Gathered> = BTreeMap::new();
    for record in records {
        let (key, generation) = record.object();
        let gathered = objects.entry(key.clone()).or_default();
        gathered.generation = gathered.generation.or(generation);
        match record {
            StatusRecord::Condition {
                scope, condition, ..
            } => match scope {
                Scope::Object => gathered.conditions.record(condition),
                Scope::Listener(name) => gathered.listener(name).conditions.record(condition),
                Scope::Parent { parent, controller } => {
                    match gathered
                        .parents
                        .iter_mut()
                        .find(|(p, c, _)| p == parent && c == controller)
                    {
                        Some((_, _, conditions)) => conditions.record(condition),
                        None => {
                            let mut conditions = Conditions::default();
                            conditions.record(condition);
                            gathered
                                .parents
                                .push((parent.clone(), controller.clone(), conditions));
                        }
                    }
                }
            },
            StatusRecord::ListenerKinds {
                listener, kinds, ..
            } => {
                let listener = gathered.listener(listener);
                for kind in kinds {
                    if !listener.kinds.contains(kind) {
                        listener.kinds.push(kind.clone());
                    }
                }
            }
            StatusRecord::Attached {
                listener, route, ..
            } => {
                gathered.listener(listener).attached.insert(route.clone());
            }
        }
    }
    objects
        .into_iter()
        .map(|(key, gathered)| {
            let mut status = Map::new();
            if !gathered.conditions.0.is_empty() {
                status.insert(
                    "conditions".into(),
                    gathered.conditions.to_json(gathered.generation),
                );
            }
            if !gathered.listeners.is_empty() {
                let listeners = gathered
                    .listeners
                    .iter()
                    .map(|(name, listener)| {
                        json!({
                            "name": name,
                            "supportedKinds": listener.kinds.iter().map(|kind| json!({"group": GATEWAY_GROUP, "kind": kind})).collect::<Vec<_>>(),
                            "attachedRoutes": listener.attached.len(),
                            "conditions": listener.conditions.to_json(gathered.generation),
                        })
                    })
                    .collect();
                status.insert("listeners".into(), Value::Array(listeners));
            }
            if !gathered.parents.is_empty() {
                let parents = gathered
                    .parents
                    .iter()
                    .map(|(parent, controller, conditions)| {
                        json!({
                            "parentRef": parent.to_json(),
                            "controllerName": controller,
                            "conditions": conditions.to_json(gathered.generation),
                        })
                    })
                    .collect();
                status.insert("parents".into(), Value::Array(parents));
            }
            ObjectStatus {
                api_version: key.api_version,
                kind: key.kind,
                namespace: key.namespace,
                name: key.name,
                status: Value::Object(status),
            }
        })
        .collect()
}

/// The plural resource name of a Gateway API kind (`HTTPRoute` → `httproutes`).
pub fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The `controllerName`s of a Route status's parents.
pub fn parent_controllers(status: &Value) -> BTreeSet<String> {
    status
        .get("parents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|parent| parent.get("controllerName").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// The status to write over `current` (the object's status as read, or null): `desired`'s
/// conditions, each keeping the `lastTransitionTime` of the condition of its type and
/// status in the same place of `current`, else stamped `now`; a Route's parents of other
/// controllers kept before haptor's, where haptor's are those of a `controllerName` in
/// `ours` (the names haptor writes, and wrote before); a Gateway's `addresses` set to
/// `addresses` when given. Everything else of `current` that haptor does not write is
/// dropped, as the status is haptor's to apply whole.
pub fn merged_status(
    current: &Value,
    desired: &Value,
    ours: &BTreeSet<String>,
    now: &str,
    addresses: Option<&Value>,
) -> Value {
    let stamp = |wanted: &Value, before: Option<&Value>| -> Value {
        let before = before.and_then(Value::as_array);
        let conditions = wanted
            .as_array()
            .into_iter()
            .flatten()
            .map(|condition| {
                let mut condition = condition.clone();
                let kept = before
                    .into_iter()
                    .flatten()
                    .find(|old| {
                        old["type"] == condition["type"] && old["status"] == condition["status"]
                    })
                    .and_then(|old| old.get("lastTransitionTime").cloned());
                condition["lastTransitionTime"] = kept.unwrap_or_else(|| json!(now));
                condition
            })
            .collect();
        Value::Array(conditions)
    };
    let mut merged = Map::new();
    if let Some(conditions) = desired.get("conditions") {
        merged.insert(
            "conditions".into(),
            stamp(conditions, current.get("conditions")),
        );
    }
    if let Some(Value::Array(listeners)) = desired.get("listeners") {
        let before = current.get("listeners").and_then(Value::as_array);
        let listeners = listeners
            .iter()
            .map(|listener| {
                let mut listener = listener.clone();
                let old = before
                    .into_iter()
                    .flatten()
                    .find(|old| old["name"] == listener["name"]);
                listener["conditions"] = stamp(
                    &listener["conditions"],
                    old.and_then(|o| o.get("conditions")),
                );
                listener
            })
            .collect();
        merged.insert("listeners".into(), Value::Array(listeners));
    }
    if let Some(addresses) = addresses {
        merged.insert("addresses".into(), addresses.clone());
    }
    if desired.get("parents").is_some() || current.get("parents").is_some() {
        let before = current.get("parents").and_then(Value::as_array);
        let mut parents: Vec<Value> = before
            .into_iter()
            .flatten()
            .filter(|parent| {
                !parent["controllerName"]
                    .as_str()
                    .is_some_and(|name| ours.contains(name))
            })
            .cloned()
            .collect();
        for parent in desired
            .get("parents")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut parent = parent.clone();
            let old = before.into_iter().flatten().find(|old| {
                old["controllerName"] == parent["controllerName"]
                    && old["parentRef"] == parent["parentRef"]
            });
            parent["conditions"] =
                stamp(&parent["conditions"], old.and_then(|o| o.get("conditions")));
            parents.push(parent);
        }
        merged.insert("parents".into(), Value::Array(parents));
    }
    Value::Object(merged)
}

/// What the leader last wrote to each object this term, so a render that changes nothing
/// about an object writes nothing to it; a new term forgets it and re-asserts everything.
#[derive(Debug, Default)]
pub struct GatewayStatusBook {
    written: BTreeMap<ObjectKey, Value>,
}

impl GatewayStatusBook {
    /// A new leadership term: every object is read and written again.
    pub fn new_term(&mut self) {
        self.written.clear();
    }

    /// The objects whose desired status differs from what was last written.
    pub fn due<'s>(&self, desired: &'s [ObjectStatus]) -> Vec<&'s ObjectStatus> {
        desired
            .iter()
            .filter(|status| self.written.get(&status.key()) != Some(&status.status))
            .collect()
    }

    /// Forgets the objects other than Routes that the desired statuses no longer name (a
    /// Gateway deleted, or of another class now): nothing is written to them, and one that
    /// comes back is written again.
    pub fn forget_absent(&mut self, desired: &[ObjectStatus]) {
        let named: BTreeSet<ObjectKey> = desired.iter().map(ObjectStatus::key).collect();
        self.written
            .retain(|key, _| key.kind.ends_with("Route") || named.contains(key));
    }

    /// The Routes written this term that the desired statuses no longer name: their
    /// parents of haptor are to be removed.
    pub fn dropped(&self, desired: &[ObjectStatus]) -> Vec<ObjectKey> {
        let named: BTreeSet<ObjectKey> = desired.iter().map(ObjectStatus::key).collect();
        self.written
            .keys()
            .filter(|key| key.kind.ends_with("Route") && !named.contains(*key))
            .cloned()
            .collect()
    }

    /// What was last written to `key` this term.
    pub fn written(&self, key: &ObjectKey) -> Option<&Value> {
        self.written.get(key)
    }

    /// `desired` was written (or found in place) for `key`.
    pub fn wrote(&mut self, key: ObjectKey, desired: Value) {
        self.written.insert(key, desired);
    }

    /// The object is gone, or haptor's entries were removed from it.
    pub fn forget(&mut self, key: &ObjectKey) {
        self.written.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "gateway.networking.k8s.io/v1".into(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn condition(type_: &str, status: &str, reason: &str, priority: i64) -> RecordedCondition {
        RecordedCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            priority,
        }
    }

    fn parent(name: &str) -> Scope {
        Scope::Parent {
            parent: ParentRef::from_spec(&json!({"name": name}), "ns").expect("named"),
            controller: "haptor.dev/gateway-controller".into(),
        }
    }

    #[test]
    fn a_higher_priority_condition_replaces_a_default_and_the_first_wins_among_equals() {
        let route = key("HTTPRoute", "r");
        let at = |c| StatusRecord::Condition {
            object: route.clone(),
            generation: Some(3),
            scope: parent("gw"),
            condition: c,
        };
        let records = [
            at(condition("Accepted", "False", "NotAllowedByListeners", 1)),
            at(condition("Accepted", "True", "Accepted", 2)),
            at(condition(
                "Accepted",
                "False",
                "NoMatchingListenerHostname",
                1,
            )),
            at(condition("ResolvedRefs", "True", "ResolvedRefs", 0)),
            at(condition("ResolvedRefs", "False", "BackendNotFound", 1)),
            at(condition("ResolvedRefs", "False", "RefNotPermitted", 1)),
        ];
        let status = &statuses(&records)[0].status;
        let conditions = &status["parents"][0]["conditions"];
        assert_eq!(conditions[0]["reason"], "Accepted");
        assert_eq!(conditions[1]["reason"], "BackendNotFound");
        assert_eq!(conditions[1]["observedGeneration"], 3);
        assert_eq!(
            status["parents"][0]["parentRef"],
            json!({"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": "ns", "name": "gw"})
        );
    }

    #[test]
    fn a_merged_status_keeps_unchanged_transition_times_and_other_controllers_parents() {
        let current = json!({"parents": [
            {"controllerName": "other.io/x", "parentRef": {"name": "a"}, "conditions": []},
            {"controllerName": "haptor.dev/gateway-controller", "parentRef": {"name": "gw"}, "conditions": [
                {"type": "Accepted", "status": "True", "lastTransitionTime": "T0"},
                {"type": "ResolvedRefs", "status": "True", "lastTransitionTime": "T0"}
            ]}
        ]});
        let desired = json!({"parents": [
            {"controllerName": "haptor.dev/gateway-controller", "parentRef": {"name": "gw"}, "conditions": [
                {"type": "Accepted", "status": "True"},
                {"type": "ResolvedRefs", "status": "False"}
            ]}
        ]});
        let haptor = BTreeSet::from(["haptor.dev/gateway-controller".to_string()]);
        let merged = merged_status(&current, &desired, &haptor, "T1", None);
        assert_eq!(merged["parents"][0]["controllerName"], "other.io/x");
        let ours = &merged["parents"][1]["conditions"];
        assert_eq!(ours[0]["lastTransitionTime"], "T0");
        assert_eq!(ours[1]["lastTransitionTime"], "T1");
        let cleared = merged_status(&current, &json!({}), &haptor, "T1", None);
        assert_eq!(cleared["parents"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn the_book_writes_a_status_once_per_term_and_names_routes_it_no_longer_serves() {
        let route = ObjectStatus {
            api_version: "gateway.networking.k8s.io/v1".into(),
            kind: "HTTPRoute".into(),
            namespace: "ns".into(),
            name: "r".into(),
            status: json!({"parents": []}),
        };
        let mut book = GatewayStatusBook::default();
        assert_eq!(book.due(std::slice::from_ref(&route)).len(), 1);
        book.wrote(route.key(), route.status.clone());
        assert!(book.due(std::slice::from_ref(&route)).is_empty());
        assert_eq!(book.dropped(&[]), vec![route.key()]);
        book.new_term();
        assert_eq!(book.due(std::slice::from_ref(&route)).len(), 1);
    }

    #[test]
    fn a_gateway_that_leaves_and_comes_back_is_written_again() {
        let gateway = ObjectStatus {
            api_version: "gateway.networking.k8s.io/v1".into(),
            kind: "Gateway".into(),
            namespace: "ns".into(),
            name: "gw".into(),
            status: json!({"conditions": []}),
        };
        let mut book = GatewayStatusBook::default();
        book.wrote(gateway.key(), gateway.status.clone());
        book.forget_absent(&[]);
        assert!(book.dropped(&[]).is_empty(), "only Routes lose parents");
        assert_eq!(book.due(std::slice::from_ref(&gateway)).len(), 1);
    }

    #[test]
    fn a_listener_counts_each_attached_route_once_and_lists_its_kinds() {
        let gateway = key("Gateway", "gw");
        let attached = |route: &str| StatusRecord::Attached {
            gateway: gateway.clone(),
            generation: Some(1),
            listener: "http".into(),
            route: key("HTTPRoute", route),
        };
        let records = [
            StatusRecord::ListenerKinds {
                gateway: gateway.clone(),
                generation: Some(1),
                listener: "http".into(),
                kinds: vec!["HTTPRoute".into(), "GRPCRoute".into()],
            },
            attached("a"),
            attached("b"),
            attached("a"),
            StatusRecord::ListenerKinds {
                gateway: gateway.clone(),
                generation: Some(1),
                listener: "empty".into(),
                kinds: vec![],
            },
        ];
        let status = &statuses(&records)[0].status;
        assert_eq!(status["listeners"][0]["attachedRoutes"], 2);
        assert_eq!(
            status["listeners"][0]["supportedKinds"][1],
            json!({"group": GATEWAY_GROUP, "kind": "GRPCRoute"})
        );
        assert_eq!(status["listeners"][1]["name"], "empty");
        assert_eq!(status["listeners"][1]["attachedRoutes"], 0);
    }
}
