//! The form in which sources, events and stores hold a Kubernetes object: its compact JSON
//! text, shared by reference count. A `serde_json::Value` tree costs several kilobytes per
//! object (every JSON object is a B-tree node of ~600 bytes however few keys it has), about
//! ten times its compact text, so at 10 000 Ingresses keeping trees was most of haptor's
//! memory. Trees are now made only where something reads an object's fields (the store
//! computing index keys, a template iterating a store) and dropped when that is done.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// One object as compact JSON text. Cloning copies a pointer; two objects made from equal
/// values have equal text, because `serde_json` writes object keys in sorted order.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CompactObject {
    json: Arc<str>,
}

impl CompactObject {
    /// The compact text of `value`.
    pub fn from_value(value: &Value) -> CompactObject {
        CompactObject {
            json: Arc::from(value.to_string()),
        }
    }

    /// A fresh tree of the object, owned by the caller.
    pub fn to_value(&self) -> Value {
        // Invariant: the text was written by `serde_json` from a `Value` (`from_value` is the
        // only constructor), so it parses back to an equal value; `Null` is unreachable.
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// The compact JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Whether both hold the very same text allocation (a cheap "unchanged" test).
    pub fn same(a: &CompactObject, b: &CompactObject) -> bool {
        Arc::ptr_eq(&a.json, &b.json)
    }
}

impl From<Value> for CompactObject {
    fn from(value: Value) -> CompactObject {
        CompactObject::from_value(&value)
    }
}

impl From<&Value> for CompactObject {
    fn from(value: &Value) -> CompactObject {
        CompactObject::from_value(value)
    }
}

impl fmt::Debug for CompactObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_object_reads_back_as_the_value_it_was_made_from() {
        let value = json!({
            "metadata": {"name": "web", "labels": {"a": "b"}},
            "spec": {"ports": [{"port": 80, "weight": 1.5}], "on": true, "none": null}
        });
        assert_eq!(CompactObject::from_value(&value).to_value(), value);
    }

    #[test]
    fn equal_values_written_with_keys_in_another_order_have_equal_text() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": 2, "x": 3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": 3, "y": 2}, "b": 1}"#).unwrap();
        assert_eq!(CompactObject::from(a), CompactObject::from(b));
    }

    #[test]
    fn a_clone_shares_the_text_and_an_equal_copy_does_not() {
        let value = json!({"metadata": {"name": "web"}});
        let one = CompactObject::from_value(&value);
        assert!(CompactObject::same(&one, &one.clone()));
        assert!(!CompactObject::same(
            &one,
            &CompactObject::from_value(&value)
        ));
    }
}
