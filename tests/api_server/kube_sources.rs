//! `haptor run`'s resource sources (`drivers::kube::resources::KubeResources`) against a
//! real kube-apiserver and etcd (the kit of `tests/support/kube.rs`, shared by the tests of
//! this binary, each in namespaces of its own, and a private one where etcd is compacted).
//! Each test opens a source the way a watcher does (`ResourceSourceFactory::open`), reads
//! its events with deadlines and, where the point is what ends up stored, feeds them into
//! the real store through `WatchState` with the compiled config's selectors, as the
//! ResourceWatcher actor does.
//!
//! What the server is sent is read, not guessed: the source's client is a
//! `tower_test::mock` service whose requests are recorded and forwarded to the real API
//! server by a second client ([`Recording`]), so a test can assert that a label selector
//! went to the server, that a field selector went only where the server supports it, and
//! that a namespaceSelector opened one cluster-wide watch and no watch per namespace.
//!
//! Sources on the shared server watch cluster-wide, so they also see the objects other
//! tests make at the same time: tests select by labels unique to them, or look only at
//! their own namespaces. That an object does not arrive is shown by order, not by waiting:
//! the watch of one resource delivers its changes in order, so when an object made after
//! the excluded one arrives, the excluded one would have arrived before it.

use crate::kube_kit;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use haptor::drivers::kube::resources::{KubeResources, SourceError};
use haptor::messages::ResourceEvent;
use haptor::pure::config::{WatchedResource, config_from_yaml};
use haptor::pure::pipeline::CompiledConfig;
use haptor::pure::store::field_selector::server_fields;
use haptor::pure::store::{ObjectSelection, WatchOutcome, WatchState};
use haptor::seams::ResourceSourceFactory;
use http::{Request, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::client::Body;
use kube_kit::{CuttableProxy, Kit, KitOptions};
use serde_json::{Value, json};

/// How long a test waits for something the server or the source is expected to do.
const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// A client whose requests are recorded.

/// The requests a client sent, each as `METHOD PATH?QUERY` with the query decoded.
#[derive(Clone, Default)]
struct Recording {
    requests: Arc<Mutex<Vec<String>>>,
}

impl Recording {
    /// A client that records every request and has `real` send it.
    fn client(&self, real: Client) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let requests = Arc::clone(&self.requests);
        tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                let line = format!(
                    "{} {}",
                    request.method(),
                    decoded(&request.uri().to_string())
                );
                requests.lock().expect("lock").push(line);
                let real = real.clone();
                tokio::spawn(async move {
                    match real.send(request).await {
                        Ok(response) => respond.send_response(response),
                        Err(error) => respond.send_error(error),
                    }
                });
            }
        });
        Client::new(service, "default")
    }

    fn all(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }

    /// The requests to exactly `path` (no sub-path), watches or lists as `watch` says.
    fn to(&self, path: &str, watch: bool) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|line| {
                let target = line.split_once(' ').map_or("", |(_, t)| t);
                let (p, query) = target.split_once('?').unwrap_or((target, ""));
                p == path && query.split('&').any(|q| q == "watch=true") == watch
            })
            .collect()
    }
}

/// A URI with its percent-escapes and `+` decoded.
fn decoded(uri: &str) -> String {
    let bytes = uri.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        if let Some(byte) = escaped {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------
// Configs, stores and the source's events.

/// A compiled config watching one resource, `name`, described by `watched` (YAML lines of
/// the watched resource, indented by six spaces), with `metadata.managedFields` ignored.
fn compiled(name: &str, watched: &str) -> CompiledConfig {
    let text = format!(
        r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {{name: test, namespace: default}}
spec:
  watchedResourcesIgnoreFields: ["metadata.managedFields"]
  watchedResources:
    {name}:
{watched}
      indexBy: ["metadata.namespace", "metadata.name"]
  haproxyConfig:
    template: |
      global
        maxconn 100
"#
    );
    let config = config_from_yaml("test.yaml", &text).expect("the test config parses");
    CompiledConfig::compile(config.spec).expect("the test config compiles")
}

/// The running config's field and label selectors, as the ResourceWatcher applies them.
struct Selection<'a> {
    compiled: &'a CompiledConfig,
    resource: &'a str,
}

impl ObjectSelection for Selection<'_> {
    fn filters_objects(&self) -> bool {
        self.compiled.has_object_selector(self.resource)
    }

    fn selects(&self, object: &Value) -> bool {
        self.compiled.selects(self.resource, object)
    }
}

/// One source stream and the store it feeds, as a ResourceWatcher has them.
struct Watch {
    name: String,
    compiled: CompiledConfig,
    state: WatchState,
    stream: BoxStream<'static, ResourceEvent>,
    /// Every event, as `describe` writes it.
    seen: Vec<String>,
}

impl Watch {
    fn open(source: &KubeResources, name: &str, compiled: CompiledConfig) -> Watch {
        let watched = compiled.spec.watched_resources[name].clone();
        let stream = source.open(name, &watched);
        let stores = compiled.new_stores().expect("stores");
        let store = Arc::clone(stores.get(name).expect("the store"));
        let mut correlation = 0;
        let state = WatchState::new(
            store,
            Duration::ZERO,
            Box::new(move || {
                correlation += 1;
                correlation
            }),
        );
        Watch {
            name: name.to_string(),
            compiled,
            state,
            stream,
            seen: Vec::new(),
        }
    }

    /// The next event (failing after [`WAIT`]), applied to the store.
    async fn next(&mut self) -> (ResourceEvent, WatchOutcome) {
        let event = tokio::time::timeout(WAIT, self.stream.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no event within {WAIT:?}; the events so far: {:#?}",
                    self.seen
                )
            })
            .expect("the source's stream does not end");
        self.seen.push(describe(&event));
        let selection = Selection {
            compiled: &self.compiled,
            resource: &self.name,
        };
        let outcome = self
            .state
            .on_event(event.clone(), &selection, Instant::now());
        (event, outcome)
    }

    /// The next event about an object in one of `namespaces` or a list's framing.
    async fn next_in(&mut self, namespaces: &[&str]) -> ResourceEvent {
        loop {
            let (event, _) = self.next().await;
            if object_of(&event).is_none_or(|o| namespaces.contains(&namespace_of(&o))) {
                return event;
            }
        }
    }

    /// Reads one complete list; returns `namespace/name` of the objects listed in
    /// `namespaces` and how many objects the store held when the list synced it.
    async fn list_in(&mut self, namespaces: &[&str]) -> (BTreeSet<String>, Option<usize>) {
        let first = self.next_in(namespaces).await;
        assert_eq!(first, ResourceEvent::InitStart, "{:#?}", self.seen);
        let mut listed = BTreeSet::new();
        loop {
            let (event, outcome) = self.next().await;
            match event {
                ResourceEvent::InitApply(object) => {
                    let value = object.to_value();
                    if namespaces.contains(&namespace_of(&value)) {
                        listed.insert(identity(&value));
                    }
                }
                ResourceEvent::InitDone => return (listed, outcome.synced),
                other => panic!("during the list: {}", describe(&other)),
            }
        }
    }

    /// `namespace/name` of the stored objects in `namespaces`.
    fn stored_in(&self, namespaces: &[&str]) -> BTreeSet<String> {
        self.state
            .store()
            .list()
            .iter()
            .map(|o| o.to_value())
            .filter(|o| namespaces.contains(&namespace_of(o)))
            .map(|o| identity(&o))
            .collect()
    }
}

fn object_of(event: &ResourceEvent) -> Option<Value> {
    match event {
        ResourceEvent::InitApply(o) | ResourceEvent::Apply(o) | ResourceEvent::Delete(o) => {
            Some(o.to_value())
        }
        ResourceEvent::InitStart | ResourceEvent::InitDone => None,
    }
}

fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn identity(object: &Value) -> String {
    format!(
        "{}/{}",
        namespace_of(object),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn describe(event: &ResourceEvent) -> String {
    let object = |o: &haptor::pure::store::CompactObject| identity(&o.to_value());
    match event {
        ResourceEvent::InitStart => "InitStart".into(),
        ResourceEvent::InitApply(o) => format!("InitApply({})", object(o)),
        ResourceEvent::InitDone => "InitDone".into(),
        ResourceEvent::Apply(o) => format!("Apply({})", object(o)),
        ResourceEvent::Delete(o) => format!("Delete({})", object(o)),
    }
}

fn ingress(name: &str, labels: Value, class: &str) -> Ingress {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "ingressClassName": class,
            "defaultBackend": { "service": { "name": "web", "port": { "number": 80 } } },
        },
    }))
    .expect("an Ingress")
}

fn ingresses(client: &Client, ns: &str) -> Api<Ingress> {
    Api::namespaced(client.clone(), ns)
}

/// Sets the labels of a namespace (a merge patch: `null` removes one).
async fn label_namespace(client: &Client, ns: &str, labels: Value) {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": labels } })),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling namespace {ns}: {e}"));
}

// ---------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn creates_updates_and_deletes_of_an_ingress_arrive_as_apply_and_delete_after_the_initial_list()
 {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("events").await;
    let api = ingresses(&admin, &ns);
    api.create(
        &PostParams::default(),
        &ingress("before", json!({}), "haptor"),
    )
    .await
    .expect("created");

    let source = KubeResources::new(admin.clone());
    let config = compiled(
        "ingresses",
        "      apiVersion: networking.k8s.io/v1\n      resources: ingresses",
    );
    let mut watch = Watch::open(&source, "ingresses", config);
    let (listed, synced) = watch.list_in(&[&ns]).await;
    assert_eq!(listed, BTreeSet::from([format!("{ns}/before")]));
    assert!(
        synced.is_some_and(|n| n >= 1),
        "the first list syncs the watch"
    );

    api.create(&PostParams::default(), &ingress("web", json!({}), "haptor"))
        .await
        .expect("created");
    let ResourceEvent::Apply(created) = watch.next_in(&[&ns]).await else {
        panic!("the create did not arrive as an Apply: {:#?}", watch.seen);
    };
    let created = created.to_value();
    assert_eq!(identity(&created), format!("{ns}/web"));
    assert_eq!(
        (created["apiVersion"].as_str(), created["kind"].as_str()),
        (Some("networking.k8s.io/v1"), Some("Ingress"))
    );
    assert!(
        created["metadata"]["managedFields"].is_array(),
        "the server sends managedFields"
    );

    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "ingressClassName": "other" } })),
    )
    .await
    .expect("updated");
    let ResourceEvent::Apply(updated) = watch.next_in(&[&ns]).await else {
        panic!("the update did not arrive as an Apply: {:#?}", watch.seen);
    };
    assert_eq!(updated.to_value()["spec"]["ingressClassName"], "other");
    let stored = watch
        .state
        .store()
        .list()
        .into_iter()
        .map(|o| o.to_value())
        .find(|o| identity(o) == format!("{ns}/web"))
        .expect("the updated Ingress is stored");
    assert_eq!(stored["spec"]["ingressClassName"], "other");
    assert!(
        stored["metadata"].get("managedFields").is_none(),
        "ignored fields are stripped before the store: {stored}"
    );

    api.delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    let deleted = watch.next_in(&[&ns]).await;
    assert!(
        matches!(&deleted, ResourceEvent::Delete(o) if identity(&o.to_value()) == format!("{ns}/web")),
        "{}",
        describe(&deleted)
    );
    assert_eq!(
        watch.stored_in(&[&ns]),
        BTreeSet::from([format!("{ns}/before")])
    );
}

#[tokio::test]
async fn a_label_selector_is_sent_to_the_server_and_an_object_not_matching_never_arrives() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("labels").await;
    let api = ingresses(&admin, &ns);
    let app = ns.as_str();
    for (name, labels) in [
        ("listed", json!({ "app": app })),
        ("cached", json!({ "app": app, "tier": "cache" })),
        ("other", json!({ "app": "other" })),
    ] {
        api.create(&PostParams::default(), &ingress(name, labels, "haptor"))
            .await
            .expect("created");
    }

    let recording = Recording::default();
    let source = KubeResources::new(recording.client(admin.clone()));
    let config = compiled(
        "ingresses",
        &format!(
            "      apiVersion: networking.k8s.io/v1\n      resources: ingresses\n      \
             labelSelector: \"app = {app}, tier notin (cache)\""
        ),
    );
    let mut watch = Watch::open(&source, "ingresses", config);
    let (listed, _) = watch.list_in(&[&ns]).await;
    assert_eq!(listed, BTreeSet::from([format!("{ns}/listed")]));

    // Made in this order: had the server not filtered, "excluded" would come first.
    api.create(
        &PostParams::default(),
        &ingress("excluded", json!({ "app": "other" }), "haptor"),
    )
    .await
    .expect("created");
    api.create(
        &PostParams::default(),
        &ingress("included", json!({ "app": app }), "haptor"),
    )
    .await
    .expect("created");
    let next = watch.next_in(&[&ns]).await;
    assert!(
        matches!(&next, ResourceEvent::Apply(o) if identity(&o.to_value()) == format!("{ns}/included")),
        "{:#?}",
        watch.seen
    );
    assert!(
        watch
            .seen
            .iter()
            .all(|e| !e.contains("/excluded") && !e.contains("/other") && !e.contains("/cached")),
        "the server sent an object the selector does not match: {:#?}",
        watch.seen
    );

    let selector = format!("labelSelector=app={app},tier notin (cache)");
    let lists = recording.to("/apis/networking.k8s.io/v1/ingresses", false);
    let watches = recording.to("/apis/networking.k8s.io/v1/ingresses", true);
    assert!(
        !lists.is_empty() && !watches.is_empty(),
        "{:#?}",
        recording.all()
    );
    for request in lists.iter().chain(&watches) {
        assert!(request.contains(&selector), "{request} lacks {selector}");
        assert!(!request.contains("fieldSelector"), "{request}");
    }
}

#[tokio::test]
async fn a_secret_field_selector_on_type_is_sent_to_the_server_and_keeps_only_tls_secrets() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("secrets").await;
    let secrets = Api::<Secret>::namespaced(admin.clone(), &ns);
    let secret = |name: &str, kind: &str| -> Secret {
        let data = if kind == "kubernetes.io/tls" {
            json!({ "tls.crt": "", "tls.key": "" })
        } else {
            json!({ "value": "" })
        };
        serde_json::from_value(json!({
            "metadata": { "name": name }, "type": kind, "data": data,
        }))
        .expect("a Secret")
    };
    secrets
        .create(&PostParams::default(), &secret("opaque", "Opaque"))
        .await
        .expect("created");
    secrets
        .create(&PostParams::default(), &secret("tls", "kubernetes.io/tls"))
        .await
        .expect("created");

    let recording = Recording::default();
    let source = KubeResources::new(recording.client(admin.clone()));
    let config = compiled(
        "secrets",
        "      apiVersion: v1\n      resources: secrets\n      fieldSelector: type=kubernetes.io/tls",
    );
    let mut watch = Watch::open(&source, "secrets", config);
    let (listed, _) = watch.list_in(&[&ns]).await;
    assert_eq!(listed, BTreeSet::from([format!("{ns}/tls")]));

    secrets
        .create(&PostParams::default(), &secret("opaque-2", "Opaque"))
        .await
        .expect("created");
    secrets
        .create(
            &PostParams::default(),
            &secret("tls-2", "kubernetes.io/tls"),
        )
        .await
        .expect("created");
    let next = watch.next_in(&[&ns]).await;
    assert!(
        matches!(&next, ResourceEvent::Apply(o) if identity(&o.to_value()) == format!("{ns}/tls-2")),
        "{:#?}",
        watch.seen
    );
    assert!(
        watch.seen.iter().all(|e| !e.contains("/opaque")),
        "the server sent an Opaque secret: {:#?}",
        watch.seen
    );
    assert_eq!(
        watch.stored_in(&[&ns]),
        BTreeSet::from([format!("{ns}/tls"), format!("{ns}/tls-2")])
    );
    let requests = [
        recording.to("/api/v1/secrets", false),
        recording.to("/api/v1/secrets", true),
    ]
    .concat();
    assert!(requests.len() >= 2, "{:#?}", recording.all());
    for request in &requests {
        assert!(
            request.contains("fieldSelector=type=kubernetes.io/tls"),
            "{request}"
        );
    }
}

#[tokio::test]
async fn a_field_selector_the_server_does_not_support_for_the_kind_is_applied_client_side_and_the_watch_works()
 {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("classes").await;
    let api = ingresses(&admin, &ns);
    // The server itself refuses this selector on Ingresses: sending it would fail the watch.
    let refused = api
        .list(&ListParams::default().fields("spec.ingressClassName=haptor"))
        .await
        .expect_err("the server does not select Ingresses by class");
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 400),
        "{refused:?}"
    );

    let label = json!({ "haptor.dev/test": ns });
    api.create(
        &PostParams::default(),
        &ingress("ours", label.clone(), "haptor"),
    )
    .await
    .expect("created");
    api.create(
        &PostParams::default(),
        &ingress("theirs", label.clone(), "nginx"),
    )
    .await
    .expect("created");

    let recording = Recording::default();
    let source = KubeResources::new(recording.client(admin.clone()));
    let config = compiled(
        "ingresses",
        &format!(
            "      apiVersion: networking.k8s.io/v1\n      resources: ingresses\n      \
             labelSelector: haptor.dev/test={ns}\n      fieldSelector: spec.ingressClassName=haptor"
        ),
    );
    let mut watch = Watch::open(&source, "ingresses", config);
    let (listed, synced) = watch.list_in(&[&ns]).await;
    assert_eq!(
        listed,
        BTreeSet::from([format!("{ns}/ours"), format!("{ns}/theirs")]),
        "the server does not filter by class"
    );
    assert_eq!(synced, Some(1), "the client-side filter keeps one");
    assert_eq!(
        watch.stored_in(&[&ns]),
        BTreeSet::from([format!("{ns}/ours")])
    );

    // The watch runs: a class change moves an Ingress into the store and out of it.
    api.patch(
        "theirs",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "ingressClassName": "haptor" } })),
    )
    .await
    .expect("updated");
    watch.next_in(&[&ns]).await;
    api.patch(
        "ours",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "ingressClassName": "nginx" } })),
    )
    .await
    .expect("updated");
    watch.next_in(&[&ns]).await;
    assert_eq!(
        watch.stored_in(&[&ns]),
        BTreeSet::from([format!("{ns}/theirs")])
    );
    let requests = [
        recording.to("/apis/networking.k8s.io/v1/ingresses", false),
        recording.to("/apis/networking.k8s.io/v1/ingresses", true),
    ]
    .concat();
    assert!(requests.len() >= 2, "{:#?}", recording.all());
    assert!(
        requests.iter().all(|r| !r.contains("fieldSelector")),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn every_field_the_source_sends_to_the_server_is_one_the_server_selects_on_for_that_kind() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    for (api_version, kind, plural) in [
        ("v1", "Secret", "secrets"),
        ("v1", "Pod", "pods"),
        ("v1", "Namespace", "namespaces"),
        ("v1", "Node", "nodes"),
        ("v1", "ReplicationController", "replicationcontrollers"),
        ("v1", "Event", "events"),
        ("batch/v1", "Job", "jobs"),
        (
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
        ),
        ("v1", "Service", "services"),
        ("v1", "ConfigMap", "configmaps"),
        ("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
        ("networking.k8s.io/v1", "Ingress", "ingresses"),
        ("networking.k8s.io/v1", "IngressClass", "ingressclasses"),
        (
            "haptor.dev/v1alpha1",
            "HAProxyTemplateConfig",
            "haproxytemplateconfigs",
        ),
    ] {
        let resource = kube::api::ApiResource {
            group: api_version.split_once('/').map_or("", |(g, _)| g).into(),
            version: api_version.rsplit('/').next().unwrap_or_default().into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api = Api::<kube::api::DynamicObject>::all_with(admin.clone(), &resource);
        for field in server_fields(api_version, kind) {
            let listed = api
                .list(&ListParams::default().fields(&format!("{field}=x")).limit(1))
                .await;
            assert!(
                listed.is_ok(),
                "the server refuses fieldSelector {field} on {plural}: {listed:?}"
            );
        }
    }
    // And the table's exceptions are real: Namespaces are not selected by namespace.
    let refused = Api::<Namespace>::all(admin)
        .list(&ListParams::default().fields("metadata.namespace=x"))
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test]
async fn a_namespace_selector_admits_matching_namespaces_and_relabelling_moves_objects_in_and_out_over_one_cluster_wide_watch()
 {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let (shop, blog) = (kit.temp_ns("shop").await, kit.temp_ns("blog").await);
    let team = shop.clone();
    label_namespace(&admin, &shop, json!({ "haptor.dev/team": team })).await;
    for ns in [&shop, &blog] {
        ingresses(&admin, ns)
            .create(&PostParams::default(), &ingress("web", json!({}), "haptor"))
            .await
            .expect("created");
    }

    let recording = Recording::default();
    let source = KubeResources::new(recording.client(admin.clone()));
    let config = compiled(
        "ingresses",
        &format!(
            "      apiVersion: networking.k8s.io/v1\n      resources: ingresses\n      \
             namespaceSelector: haptor.dev/team={team}"
        ),
    );
    let mut watch = Watch::open(&source, "ingresses", config);
    let both = [shop.as_str(), blog.as_str()];
    let (listed, _) = watch.list_in(&both).await;
    assert_eq!(listed, BTreeSet::from([format!("{shop}/web")]));
    assert!(
        watch
            .seen
            .iter()
            .all(|e| !e.contains("/web") || e.contains(&shop)),
        "only objects of the matching namespace are listed: {:#?}",
        watch.seen
    );

    // Changes in a namespace that does not match are not sent; made first, one would come
    // before the change in the matching one.
    ingresses(&admin, &blog)
        .create(
            &PostParams::default(),
            &ingress("more", json!({}), "haptor"),
        )
        .await
        .expect("created");
    ingresses(&admin, &shop)
        .create(
            &PostParams::default(),
            &ingress("more", json!({}), "haptor"),
        )
        .await
        .expect("created");
    let next = watch.next_in(&both).await;
    assert_eq!(describe(&next), format!("Apply({shop}/more)"));

    // blog starts to match: its objects enter; shop stops: its objects leave.
    label_namespace(&admin, &blog, json!({ "haptor.dev/team": team })).await;
    let mut entered = BTreeSet::new();
    for _ in 0..2 {
        entered.insert(describe(&watch.next_in(&both).await));
    }
    assert_eq!(
        entered,
        BTreeSet::from([format!("Apply({blog}/more)"), format!("Apply({blog}/web)")])
    );
    label_namespace(&admin, &shop, json!({ "haptor.dev/team": null })).await;
    let mut left = BTreeSet::new();
    for _ in 0..2 {
        left.insert(describe(&watch.next_in(&both).await));
    }
    assert_eq!(
        left,
        BTreeSet::from([
            format!("Delete({shop}/more)"),
            format!("Delete({shop}/web)")
        ])
    );
    assert_eq!(
        watch.stored_in(&both),
        BTreeSet::from([format!("{blog}/more"), format!("{blog}/web")])
    );

    // One cluster-wide watch of the resource and one of Namespaces; none per namespace.
    let cluster_wide = recording.to("/apis/networking.k8s.io/v1/ingresses", true);
    assert_eq!(cluster_wide.len(), 1, "{:#?}", recording.all());
    assert_eq!(
        recording.to("/api/v1/namespaces", true).len(),
        1,
        "{:#?}",
        recording.all()
    );
    assert!(
        recording
            .all()
            .iter()
            .all(|r| !r.contains("/namespaces/") || !r.contains("/ingresses")),
        "a per-namespace request: {:#?}",
        recording.all()
    );
}

#[tokio::test]
async fn an_unknown_resource_gives_the_resolve_error_naming_it() {
    let kit = Kit::shared();
    let source = KubeResources::new(kit.admin().await);
    let watched = |api_version: &str, resources: &str, kind: Option<&str>| WatchedResource {
        api_version: api_version.into(),
        resources: resources.into(),
        kind: kind.map(String::from),
        ..WatchedResource::default()
    };

    let found = source
        .resolve(&watched("networking.k8s.io/v1", "ingresses", None))
        .await
        .expect("Ingresses are served");
    assert_eq!(
        (found.kind.as_str(), found.plural.as_str()),
        ("Ingress", "ingresses")
    );

    for (api_version, resources) in [
        ("networking.k8s.io/v1", "ingressses"),
        ("v1", "ingresses"),
        ("networking.k8s.io/v9", "ingresses"),
        ("nothing.example.com/v1", "widgets"),
    ] {
        let error = source
            .resolve(&watched(api_version, resources, None))
            .await
            .expect_err("not served");
        assert!(matches!(error, SourceError::NotFound { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!("resource '{resources}' in {api_version} does not exist on this API server")
        );
        assert_eq!(error.metric_label(), "not_found");
    }

    let error = source
        .resolve(&watched(
            "networking.k8s.io/v1",
            "ingresses",
            Some("Service"),
        ))
        .await
        .expect_err("the wrong kind");
    assert_eq!(
        error.to_string(),
        "resource 'ingresses' in networking.k8s.io/v1 holds objects of kind Ingress, not \
         Service: correct the kind or leave it out"
    );
    let error = source
        .resolve(&watched("a/b/c", "ingresses", None))
        .await
        .expect_err("not an apiVersion");
    assert!(
        matches!(error, SourceError::InvalidApiVersion { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn after_etcd_compaction_the_source_relists_and_the_store_converges_on_the_servers_state() {
    // A server of its own: compaction is global, and without the watch cache every watch
    // reaches etcd, so a resumed watch from a compacted resourceVersion gets 410 Gone.
    let kit = Kit::start_with(KitOptions {
        watch_cache: false,
        crds: None,
        gateway_api: false,
    });
    let admin = kit.admin().await;
    let ns = kit.temp_ns("compaction").await;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let configmap = |name: &str, value: &str| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "haptor.dev/test": "compaction" } },
            "data": { "value": value },
        }))
        .expect("a ConfigMap")
    };
    for name in ["kept", "changed", "deleted"] {
        cms.create(&PostParams::default(), &configmap(name, "1"))
            .await
            .expect("created");
    }

    let proxy = CuttableProxy::start(kit.port).await;
    let recording = Recording::default();
    let source = KubeResources::new(recording.client(kit.admin_via(&proxy.url).await));
    let config = compiled(
        "configmaps",
        "      apiVersion: v1\n      resources: configmaps\n      labelSelector: haptor.dev/test=compaction",
    );
    let mut watch = Watch::open(&source, "configmaps", config);
    let (listed, _) = watch.list_in(&[&ns]).await;
    assert_eq!(
        listed,
        ["changed", "deleted", "kept"]
            .map(|n| format!("{ns}/{n}"))
            .into()
    );
    cms.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "value": "2" } })),
    )
    .await
    .expect("updated");
    let next = watch.next_in(&[&ns]).await;
    assert_eq!(describe(&next), format!("Apply({ns}/kept)"));

    // The watch breaks; meanwhile objects change, and etcd is compacted past them all.
    proxy.cut().await;
    cms.patch(
        "changed",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "value": "2" } })),
    )
    .await
    .expect("updated");
    cms.delete("deleted", &DeleteParams::default())
        .await
        .expect("deleted");
    cms.create(&PostParams::default(), &configmap("added", "1"))
        .await
        .expect("created");
    kit.compact_etcd().await;
    let watches_before = recording.to("/api/v1/configmaps", true).len();
    proxy.restore();

    // The source resumes, is told 410 Gone and lists again; the relist differs from the
    // store, which then holds what the server holds.
    let server = || async {
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|c| {
                let value = c.data.as_ref().and_then(|d| d.get("value")).cloned();
                (
                    format!("{ns}/{}", c.metadata.name.unwrap_or_default()),
                    value.unwrap_or_default(),
                )
            })
            .collect::<BTreeMap<String, String>>()
    };
    let expected = server().await;
    assert_eq!(
        expected.keys().cloned().collect::<BTreeSet<_>>(),
        ["added", "changed", "kept"]
            .map(|n| format!("{ns}/{n}"))
            .into()
    );
    let first_list_at = watch.seen.len();
    let relisted = loop {
        let (event, outcome) = watch.next().await;
        if event == ResourceEvent::InitDone {
            break outcome;
        }
    };
    assert_eq!(
        watch.seen[first_list_at..].first().map(String::as_str),
        Some("InitStart"),
        "the missed changes arrive in a new list, not as events: {:#?}",
        watch.seen
    );
    assert!(
        relisted.changed.is_some(),
        "a relist that differs from the store is a change"
    );
    let stored: BTreeMap<String, String> = watch
        .state
        .store()
        .list()
        .iter()
        .map(|o| o.to_value())
        .map(|o| {
            let value = o["data"]["value"].as_str().unwrap_or_default().to_string();
            (identity(&o), value)
        })
        .collect();
    assert_eq!(
        stored, expected,
        "the store converged on the server's state"
    );
    let watches = recording.to("/api/v1/configmaps", true);
    assert!(
        watches.len() > watches_before,
        "the source watched again after the cut: {watches:#?}"
    );
    assert!(
        recording.to("/api/v1/configmaps", false).len() >= 2,
        "it listed again: {:#?}",
        recording.all()
    );
}
