//! Unit tests of `resource`.

use super::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};

fn slice(ns: &str, name: &str, service: &str) -> Value {
    json!({
        "metadata": {
            "namespace": ns,
            "name": name,
            "labels": {"kubernetes.io/service-name": service},
            "managedFields": [{"manager": "kube-controller-manager"}]
        },
        "endpoints": [{"addresses": ["10.0.0.1"]}],
        "ports": [{"port": 8080.0}]
    })
}

fn slices_store() -> ResourceStore {
    ResourceStore::new(
        "endpointslices",
        vec![
            "metadata.namespace".into(),
            r"metadata.labels.kubernetes\.io/service-name".into(),
        ],
        vec!["metadata.managedFields".into()],
    )
    .unwrap()
}

fn names(objects: &[CompactObject]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            o.to_value()["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn an_object_that_needs_no_change_is_shared_with_its_sender_and_one_that_does_is_copied() {
    let store = slices_store();
    let clean = CompactObject::from(json!({
        "metadata": {"namespace": "shop", "name": "web-abc",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "ports": [{"port": 8080}]
    }));
    store.apply(clean.clone()).unwrap();
    assert!(
        CompactObject::same(&store.list()[0], &clean),
        "no second copy"
    );

    // Ignored fields and whole floats are changed, so the store keeps its own copy and
    // the sender's object is left as it was.
    let sent = CompactObject::from(slice("shop", "web-abc", "web"));
    store.apply(sent.clone()).unwrap();
    let stored = &store.list()[0];
    assert!(!CompactObject::same(stored, &sent));
    let stored = stored.to_value();
    assert!(stored["metadata"].get("managedFields").is_none());
    assert_eq!(stored["ports"][0]["port"], json!(8080));
    assert!(sent.to_value()["metadata"].get("managedFields").is_some());
}

#[test]
fn objects_are_found_by_a_label_whose_key_contains_dots() {
    let store = slices_store();
    store.apply(slice("shop", "web-abc", "web")).unwrap();
    store.apply(slice("shop", "web-def", "web")).unwrap();
    store.apply(slice("shop", "api-xyz", "api")).unwrap();
    assert_eq!(
        names(&store.fetch(&["shop", "web"]).unwrap()),
        ["web-abc", "web-def"]
    );
    assert_eq!(names(&store.fetch(&["shop", "api"]).unwrap()), ["api-xyz"]);
    assert!(store.fetch(&["shop", "nope"]).unwrap().is_empty());
}

#[test]
fn a_prefix_key_fetches_every_object_under_it() {
    let store = slices_store();
    store.apply(slice("a", "one", "x")).unwrap();
    store.apply(slice("b", "two", "y")).unwrap();
    store.apply(slice("b", "three", "z")).unwrap();
    assert_eq!(store.fetch(&["b"]).unwrap().len(), 2);
    assert_eq!(store.fetch(&[]).unwrap().len(), 3);
    let snapshot = store.snapshot();
    assert_eq!(snapshot.fetch(&["b"]).unwrap().len(), 2);
    assert_eq!(snapshot.fetch_range(&["a"]).unwrap(), 0..1);
}

#[test]
fn more_keys_than_index_fields_is_an_error_naming_the_fields() {
    let store = slices_store();
    let err = store.fetch(&["a", "b", "c"]).unwrap_err();
    assert!(err.to_string().contains("metadata.namespace"), "{err}");
    assert!(store.snapshot().fetch(&["a", "b", "c"]).is_err());
}

#[test]
fn get_single_refuses_two_matches_and_allows_none() {
    let store = slices_store();
    store.apply(slice("shop", "web-abc", "web")).unwrap();
    assert_eq!(
        names(&[store.get_single(&["shop", "web"]).unwrap().unwrap()]),
        ["web-abc"]
    );
    store.apply(slice("shop", "web-def", "web")).unwrap();
    let err = store.get_single(&["shop", "web"]).unwrap_err();
    assert!(
        matches!(err, StoreError::NotSingle { count: 2, .. }),
        "{err}"
    );
    assert!(store.snapshot().get_single(&["shop", "web"]).is_err());
    assert!(store.get_single(&["shop", "none"]).unwrap().is_none());
}

#[test]
fn ignored_fields_are_stripped_and_whole_floats_become_integers() {
    let store = slices_store();
    store.apply(slice("shop", "web-abc", "web")).unwrap();
    let stored = store.list().pop().unwrap().to_value();
    assert!(stored["metadata"].get("managedFields").is_none());
    assert!(
        stored["ports"][0]["port"].is_i64(),
        "{}",
        stored["ports"][0]["port"]
    );
    assert_eq!(stored["ports"][0]["port"].to_string(), "8080");
}

#[test]
fn a_fractional_float_stays_a_float() {
    let mut value = json!({"weight": 0.5, "big": 1e300});
    normalise_numbers(&mut value);
    assert!(value["weight"].is_f64());
    assert!(value["big"].is_f64());
}

#[test]
fn list_order_is_key_then_namespace_then_name_whatever_the_insert_order() {
    let objects = [
        slice("b", "z", "svc1"),
        slice("a", "y", "svc2"),
        slice("a", "x", "svc2"),
        slice("a", "w", "svc1"),
    ];
    let forward = slices_store();
    let backward = slices_store();
    for o in objects.iter().cloned() {
        forward.apply(o).unwrap();
    }
    for o in objects.iter().rev().cloned() {
        backward.apply(o).unwrap();
    }
    let order = names(&forward.list());
    assert_eq!(order, names(&backward.list()));
    let keys: Vec<EntryKey> = forward
        .snapshot()
        .entries()
        .iter()
        .map(|e| e.key().clone())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(order, ["w", "x", "y", "z"]);
}

#[test]
fn a_relist_reports_whether_it_changed_the_content_and_an_identical_one_keeps_the_snapshot() {
    let store = slices_store();
    assert!(!store.has_listed());
    let first = store.relist(vec![slice("a", "x", "web")]);
    assert!(first.changed && first.rejected.is_empty());
    assert!(store.has_listed());
    let before = store.snapshot();
    let same = store.relist(vec![slice("a", "x", "web")]);
    assert!(!same.changed);
    assert!(Arc::ptr_eq(&before, &store.snapshot()));
    let moved = store.relist(vec![slice("a", "x", "api")]);
    assert!(moved.changed);
    let gone = store.relist(Vec::<Value>::new());
    assert!(gone.changed);
    assert!(store.is_empty());
}

#[test]
fn apply_replaces_by_identity_even_when_the_key_changes() {
    let store = slices_store();
    assert_eq!(
        store.apply(slice("shop", "s1", "web")).unwrap(),
        StoreChange::Added
    );
    assert_eq!(
        store.apply(slice("shop", "s1", "web")).unwrap(),
        StoreChange::Unchanged
    );
    assert_eq!(
        store.apply(slice("shop", "s1", "api")).unwrap(),
        StoreChange::Updated
    );
    assert_eq!(store.len(), 1);
    assert!(store.fetch(&["shop", "web"]).unwrap().is_empty());
    assert!(store.delete(&slice("shop", "s1", "whatever")));
    assert!(store.is_empty());
    assert!(!store.delete_ref(&ObjectRef::new("shop", "s1")));
}

#[test]
fn replace_all_swaps_content_and_reports_nameless_objects() {
    let store = slices_store();
    store.apply(slice("old", "gone", "x")).unwrap();
    let rejected = store.replace_all(vec![slice("new", "a", "x"), json!({"metadata": {}})]);
    assert_eq!(rejected.len(), 1);
    assert!(rejected[0].to_string().contains("endpointslices"));
    assert_eq!(names(&store.list()), ["a"]);
}

#[test]
fn a_snapshot_is_cached_until_the_store_changes() {
    let store = slices_store();
    store.apply(slice("a", "one", "x")).unwrap();
    let first = store.snapshot();
    assert!(Arc::ptr_eq(&first, &store.snapshot()));
    store.apply(slice("a", "two", "x")).unwrap();
    let second = store.snapshot();
    assert!(!Arc::ptr_eq(&first, &second));
    assert_eq!((first.len(), second.len()), (1, 2));
}

#[test]
fn overlay_snapshots_leave_the_store_untouched() {
    let store = slices_store();
    store.apply(slice("a", "one", "x")).unwrap();
    let with = store.snapshot_with_applied(slice("a", "two", "x")).unwrap();
    let without = store.snapshot_with_deleted(&ObjectRef::new("a", "one"));
    assert_eq!((with.len(), without.len(), store.len()), (2, 0, 1));
    let replaced = store.snapshot_with_applied(slice("a", "one", "y")).unwrap();
    assert_eq!(replaced.len(), 1);
    assert!(replaced.fetch(&["a", "x"]).unwrap().is_empty());
}

#[test]
fn readers_see_consistent_snapshots_while_a_writer_applies() {
    let store = Arc::new(slices_store());
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let store = Arc::clone(&store);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut observed = 0usize;
                let mut reads = 0usize;
                while !done.load(Ordering::Acquire) {
                    let snapshot = store.snapshot();
                    let keys: Vec<&EntryKey> = snapshot.entries().iter().map(|e| e.key()).collect();
                    assert!(
                        keys.windows(2).all(|w| w[0] < w[1]),
                        "snapshot out of order"
                    );
                    // Objects only ever get added, so a later view never shrinks.
                    assert!(snapshot.len() >= observed, "snapshot went back in time");
                    observed = snapshot.len();
                    let _ = store.fetch(&["ns"]).map(|found| found.len());
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 0..5_000 {
        store
            .apply(slice(
                "ns",
                &format!("slice-{i:05}"),
                &format!("svc-{}", i % 50),
            ))
            .unwrap();
    }
    done.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    assert_eq!(store.len(), 5_000);
    assert_eq!(store.fetch(&["ns", "svc-7"]).unwrap().len(), 100);
}

#[test]
fn changed_since_names_the_entries_added_removed_and_replaced_between_two_snapshots() {
    let store = ResourceStore::new("svc", vec!["metadata.name".into()], vec![]).unwrap();
    let object = |name: &str, port: u16| serde_json::json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"port": port}});
    for (name, port) in [("a", 1), ("b", 2), ("c", 3)] {
        store.apply(object(name, port)).unwrap();
    }
    let before = store.snapshot();
    assert!(before.changed_since(&before).is_empty());
    store.apply(object("b", 20)).unwrap();
    store.apply(object("d", 4)).unwrap();
    store.delete_ref(&ObjectRef::new("default", "a"));
    let after = store.snapshot();
    let names: Vec<&str> = after
        .changed_since(&before)
        .iter()
        .map(|key| key.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "d"]);
}

#[test]
fn an_object_whose_read_field_has_the_wrong_type_is_not_stored_and_the_stored_version_stays() {
    let store = slices_store();
    let typed = |port: Value| {
        let mut object = slice("default", "web-1", "web");
        object["apiVersion"] = json!("discovery.k8s.io/v1");
        object["kind"] = json!("EndpointSlice");
        object["ports"] = json!([{ "port": port }]);
        object
    };
    store
        .apply(typed(json!(8080)))
        .expect("an integer port is stored");
    let error = store
        .apply(typed(json!("8081")))
        .expect_err("a string port is refused");
    assert!(matches!(error, StoreError::Schema(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "EndpointSlice default/web-1: ports[0].port: expected an integer, got the string \"8081\" (write 8081 without quotes); the object is left out"
    );
    assert_eq!(store.list()[0].to_value()["ports"][0]["port"], json!(8080));
    let rejected = store.replace_all([typed(json!("8081"))]);
    assert_eq!(rejected.len(), 1, "a relist reports it too");
}
