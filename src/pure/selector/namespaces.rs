//! Namespace labels, for `namespaceSelector`: which labels each namespace carries, as the
//! Namespace objects a source holds declare them, and what a change of them means for the
//! objects in that namespace.
//!
//! Every namespace carries `kubernetes.io/metadata.name=<name>` (the API server sets it on
//! every Namespace), whether or not a Namespace object for it is present: a manifest folder
//! or a fixture set without Namespace objects still has namespaces, each with just that
//! label. A Namespace object (apiVersion `v1`, kind `Namespace`) adds its own labels.
//! Cluster-scoped objects (no namespace) are in no namespace, and a namespace selector
//! does not filter them.
//!
//! When a Namespace object is added, changed or removed, [`NamespaceLabels::apply`] and
//! [`NamespaceLabels::remove`] return the [`NamespaceChange`] (the labels before and after);
//! [`NamespaceChange::membership`] tells a stream with a given selector whether the objects
//! of that namespace enter it, leave it or stay as they were.

use std::collections::BTreeMap;

use serde_json::Value;

use super::LabelSelector;

/// The label every namespace carries, with the namespace's name as its value.
pub const METADATA_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Labels by key.
pub type Labels = BTreeMap<String, String>;

/// Whether an apiVersion and kind name Kubernetes' Namespace.
pub fn is_namespace_kind(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Namespace"
}

/// Whether an object is a Namespace.
pub fn is_namespace(object: &Value) -> bool {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    is_namespace_kind(text("apiVersion"), text("kind"))
}

/// The namespace an object lives in; `None` for cluster-scoped objects.
pub fn namespace_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
}

/// The labels of every namespace, as far as the Namespace objects seen declare them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceLabels {
    /// The labels Namespace objects declare, by namespace name (without the name label).
    declared: BTreeMap<String, Labels>,
}

/// What a Namespace object's change did to its namespace's labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceChange {
    pub namespace: String,
    pub before: Labels,
    pub after: Labels,
}

/// What a [`NamespaceChange`] means for the objects of that namespace in one selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// The namespace matches now and did not before: its objects enter.
    Enter,
    /// The namespace matched before and does not now: its objects leave.
    Leave,
    /// It matches, or does not, as before.
    Unchanged,
}

impl NamespaceChange {
    /// Whether the namespace's objects enter or leave a selection by `selector`.
    pub fn membership(&self, selector: &LabelSelector) -> Membership {
        match (
            selector.matches(&self.before),
            selector.matches(&self.after),
        ) {
            (false, true) => Membership::Enter,
            (true, false) => Membership::Leave,
            _ => Membership::Unchanged,
        }
    }
}

/// The labels an object declares in `metadata.labels` (non-string values are skipped).
fn declared_labels(object: &Value) -> Labels {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter(|(key, _)| *key != METADATA_NAME_LABEL)
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl NamespaceLabels {
    pub fn new() -> NamespaceLabels {
        NamespaceLabels::default()
    }

    /// The namespace labels the Namespace objects among `objects` declare (other objects are
    /// ignored; of two Namespaces with one name the later wins).
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> NamespaceLabels {
        let mut labels = NamespaceLabels::new();
        for object in objects.into_iter().filter(|o| is_namespace(o)) {
            labels.apply(object);
        }
        labels
    }

    /// Every label of a namespace: those its Namespace object declares, and the name label.
    pub fn labels(&self, namespace: &str) -> Labels {
        let mut labels = self.declared.get(namespace).cloned().unwrap_or_default();
        labels.insert(METADATA_NAME_LABEL.to_string(), namespace.to_string());
        labels
    }

    /// Whether objects in `namespace` pass `selector`; the empty namespace (cluster-scoped
    /// objects) always does.
    pub fn admits(&self, selector: &LabelSelector, namespace: &str) -> bool {
        if namespace.is_empty() {
            return true;
        }
        let declared = self.declared.get(namespace);
        selector.matches_with(|key| {
            if key == METADATA_NAME_LABEL {
                Some(namespace)
            } else {
                declared.and_then(|d| d.get(key)).map(String::as_str)
            }
        })
    }

    /// Whether an object passes an optional namespace selector (none: every object does).
    pub fn admits_object(&self, selector: Option<&LabelSelector>, object: &Value) -> bool {
        match (selector, namespace_of(object)) {
            (Some(selector), Some(namespace)) => self.admits(selector, namespace),
            _ => true,
        }
    }

    /// Records a Namespace object (added or changed). Returns the change of its namespace's
    /// labels, or `None` when they are what they were (or the object has no name).
    pub fn apply(&mut self, namespace: &Value) -> Option<NamespaceChange> {
        let name = namespace
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())?;
        let before = self.labels(name);
        self.declared
            .insert(name.to_string(), declared_labels(namespace));
        self.change(name, before)
    }

    /// Forgets the Namespace object `name` (the namespace keeps only its name label).
    /// Returns the change, or `None` when it declared no labels of its own.
    pub fn remove(&mut self, name: &str) -> Option<NamespaceChange> {
        let before = self.labels(name);
        self.declared.remove(name)?;
        self.change(name, before)
    }

    fn change(&self, name: &str, before: Labels) -> Option<NamespaceChange> {
        let after = self.labels(name);
        (before != after).then(|| NamespaceChange {
            namespace: name.to_string(),
            before,
            after,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    fn selector(text: &str) -> LabelSelector {
        LabelSelector::parse(text).expect("parses")
    }

    fn ingress_in(namespace: &str) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web", "namespace": namespace}})
    }

    #[test]
    fn every_namespace_carries_its_name_label_even_without_a_namespace_object() {
        let labels = NamespaceLabels::new();
        assert_eq!(
            labels.labels("shop"),
            Labels::from([(METADATA_NAME_LABEL.to_string(), "shop".to_string())])
        );
        assert!(labels.admits(&selector("kubernetes.io/metadata.name=shop"), "shop"));
        assert!(!labels.admits(&selector("kubernetes.io/metadata.name=shop"), "other"));
    }

    #[test]
    fn a_namespace_object_adds_its_labels_and_cannot_change_the_name_label() {
        let labels = NamespaceLabels::from_objects([&namespace(
            "shop",
            json!({"team": "web", "kubernetes.io/metadata.name": "forged"}),
        )]);
        assert!(labels.admits(&selector("team=web"), "shop"));
        assert!(labels.admits(&selector("kubernetes.io/metadata.name=shop"), "shop"));
        assert!(!labels.admits(&selector("team=web"), "other"));
    }

    #[test]
    fn objects_other_than_namespaces_declare_no_namespace_labels() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop", "labels": {"team": "web"}}});
        let labels = NamespaceLabels::from_objects([&service]);
        assert!(!labels.admits(&selector("team=web"), "shop"));
    }

    #[test]
    fn cluster_scoped_objects_pass_any_namespace_selector() {
        let labels = NamespaceLabels::new();
        let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "haptor"}});
        assert!(labels.admits_object(Some(&selector("team=web")), &class));
        assert!(!labels.admits_object(Some(&selector("team=web")), &ingress_in("shop")));
        assert!(labels.admits_object(None, &ingress_in("shop")));
    }

    #[test]
    fn a_label_change_that_starts_matching_lets_the_namespaces_objects_enter() {
        let mut labels = NamespaceLabels::new();
        let change = labels
            .apply(&namespace("shop", json!({"team": "web"})))
            .expect("the labels changed");
        assert_eq!(change.namespace, "shop");
        assert_eq!(change.membership(&selector("team=web")), Membership::Enter);
        assert_eq!(
            change.membership(&selector("team!=web")),
            Membership::Leave,
            "a negated selector sees the same change the other way round"
        );
        assert_eq!(change.membership(&selector("team")), Membership::Enter);
        assert_eq!(
            change.membership(&selector("kubernetes.io/metadata.name=shop")),
            Membership::Unchanged
        );
    }

    #[test]
    fn a_label_change_that_stops_matching_makes_the_namespaces_objects_leave() {
        let mut labels =
            NamespaceLabels::from_objects([&namespace("shop", json!({"team": "web"}))]);
        let change = labels
            .apply(&namespace("shop", json!({"team": "db"})))
            .expect("the labels changed");
        assert_eq!(change.membership(&selector("team=web")), Membership::Leave);
        assert_eq!(
            change.membership(&selector("team in (web,db)")),
            Membership::Unchanged
        );
    }

    #[test]
    fn removing_a_namespace_object_leaves_the_namespace_with_its_name_label_only() {
        let mut labels =
            NamespaceLabels::from_objects([&namespace("shop", json!({"team": "web"}))]);
        let change = labels.remove("shop").expect("the labels changed");
        assert_eq!(change.membership(&selector("team=web")), Membership::Leave);
        assert_eq!(change.after, NamespaceLabels::new().labels("shop"));
        assert_eq!(
            labels.remove("shop"),
            None,
            "removing twice changes nothing"
        );
    }

    #[test]
    fn applying_the_same_labels_again_is_no_change() {
        let mut labels =
            NamespaceLabels::from_objects([&namespace("shop", json!({"team": "web"}))]);
        assert_eq!(
            labels.apply(&namespace("shop", json!({"team": "web"}))),
            None
        );
        assert_eq!(
            NamespaceLabels::new().apply(&namespace("bare", json!({}))),
            None,
            "a Namespace without labels of its own adds nothing to the name label"
        );
        assert_eq!(
            labels.remove("bare"),
            None,
            "a namespace without an object has nothing to remove"
        );
    }
}
