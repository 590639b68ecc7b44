//! Kubernetes Events about the HAProxyTemplateConfig, against the real API server of the test
//! kit: what haptor observed (a rejected config, leadership gained) becomes an
//! events.k8s.io/v1 Event of the right type, reason and note on the config; an overlong note
//! is cut and still accepted; a repeat becomes a series and a new note a new Event; nothing is
//! published while no config is named; a missing RBAC rule drops Events without ending the
//! task, which publishes again once the rule is granted; an API server that does not answer
//! costs the one Event its timeout, not the ones after.

use crate::kube_kit;

use std::time::Duration;

use haptor::drivers::kube::events::{PUBLISH_TIMEOUT, spawn};
use haptor::messages::events::{EventKind, ObservedEvent};
use haptor::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use haptor::pure::kube_events::NOTE_LIMIT;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use kube_kit::{CuttableProxy, Kit, RESTRICTED_USER};

const CONFIG: &str = r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: haptor}
spec:
  haproxyConfig:
    template: |
      global
        maxconn 100
"#;

/// Creates the config in `ns`; returns a reference to it as the server stores it (with uid).
async fn create_config(client: &Client, ns: &str) -> ObjectReference {
    let config = config_from_yaml("config.yaml", CONFIG).expect("the config parses");
    let created = Api::<HAProxyTemplateConfig>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
    created.object_ref(&())
}

/// The task and the two channels that feed it.
struct Harness {
    events: mpsc::Sender<ObservedEvent>,
    regarding: watch::Sender<Option<ObjectReference>>,
    task: tokio::task::JoinHandle<()>,
}

fn start(client: Client, regarding: Option<ObjectReference>) -> Harness {
    let (events, queue) = mpsc::channel(16);
    let (regarding, watched) = watch::channel(regarding);
    let task = spawn(
        client,
        "haptor".into(),
        "haptor-7d9f-abcde".into(),
        watched,
        queue,
    );
    Harness {
        events,
        regarding,
        task,
    }
}

impl Harness {
    async fn send(&self, kind: EventKind) {
        self.events
            .send(ObservedEvent::new(None, kind))
            .await
            .expect("the task reads its queue");
    }
}

fn rejected(errors: &[&str]) -> EventKind {
    EventKind::ConfigRejected {
        errors: errors.iter().map(|e| e.to_string()).collect(),
    }
}

/// The Events in `ns` once `done` holds for them, or fails showing the last list.
async fn wait_for_events(client: &Client, ns: &str, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let api = Api::<Event>::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = api
            .list(&Default::default())
            .await
            .expect("events are listed")
            .items;
        if done(&events) {
            return events;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("the Events in {ns} never matched: {events:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn with_reason<'a>(events: &'a [Event], reason: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_config_and_a_new_leader_become_events_on_the_config() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events").await;
    let client = kit.admin().await;
    let config = create_config(&client, &ns).await;
    let harness = start(client.clone(), Some(config.clone()));

    harness
        .send(rejected(&[
            "line 3: unknown keyword 'maxcon'",
            "no frontend",
        ]))
        .await;
    harness.send(EventKind::LeadershipGained { epoch: 4 }).await;

    let events = wait_for_events(&client, &ns, |e| e.len() >= 2).await;
    let invalid = with_reason(&events, "ConfigInvalid");
    assert_eq!(invalid.len(), 1, "{events:#?}");
    let invalid = invalid[0];
    assert_eq!(invalid.type_.as_deref(), Some("Warning"));
    assert_eq!(invalid.action.as_deref(), Some("Validate"));
    let note = invalid.note.as_deref().unwrap_or_default();
    assert!(
        note.ends_with("line 3: unknown keyword 'maxcon'; no frontend"),
        "{note}"
    );
    let regarding = invalid.regarding.as_ref().expect("a regarding object");
    assert_eq!(regarding.kind.as_deref(), Some("HAProxyTemplateConfig"));
    assert_eq!(regarding.name.as_deref(), Some("haptor"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(regarding.uid, config.uid);
    assert_eq!(invalid.reporting_controller.as_deref(), Some("haptor"));
    assert_eq!(
        invalid.reporting_instance.as_deref(),
        Some("haptor-7d9f-abcde")
    );

    let gained = with_reason(&events, "LeadershipGained");
    assert_eq!(gained.len(), 1, "{events:#?}");
    assert_eq!(gained[0].type_.as_deref(), Some("Normal"));
    let note = gained[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("epoch 4"), "{note}");
    assert_eq!(
        gained[0].regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("haptor")
    );

    drop(harness.events);
    tokio::time::timeout(Duration::from_secs(30), harness.task)
        .await
        .expect("the task ends when its queue closes")
        .expect("the task did not panic");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_overlong_error_is_cut_to_the_limit_and_still_accepted() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events-long").await;
    let client = kit.admin().await;
    let config = create_config(&client, &ns).await;
    let harness = start(client.clone(), Some(config));

    // Multi-byte characters: the cut must fall on a character boundary.
    let long = format!("line 9: {}", "é€".repeat(2000));
    harness.send(rejected(&[&long])).await;

    let events = wait_for_events(&client, &ns, |e| !e.is_empty()).await;
    let note = events[0].note.as_deref().unwrap_or_default();
    assert_eq!(events[0].reason.as_deref(), Some("ConfigInvalid"));
    assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
    assert!(note.len() > NOTE_LIMIT - 8, "{}", note.len());
    assert!(note.contains("line 9: é€é€"), "{note}");
    assert!(note.ends_with('…'), "{note}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeat_joins_a_series_and_a_different_error_starts_a_new_event() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events-series").await;
    let client = kit.admin().await;
    let config = create_config(&client, &ns).await;
    let harness = start(client.clone(), Some(config));

    harness.send(rejected(&["first problem"])).await;
    harness.send(rejected(&["first problem"])).await;
    harness.send(rejected(&["second problem"])).await;

    let events = wait_for_events(&client, &ns, |e| {
        e.len() >= 2
            && e.iter()
                .any(|e| e.series.as_ref().is_some_and(|s| s.count == 2))
    })
    .await;
    assert_eq!(events.len(), 2, "{events:#?}");
    let notes: Vec<(&str, Option<i32>)> = events
        .iter()
        .map(|e| {
            (
                e.note.as_deref().unwrap_or_default(),
                e.series.as_ref().map(|s| s.count),
            )
        })
        .collect();
    assert!(
        notes
            .iter()
            .any(|(n, c)| n.ends_with("first problem") && *c == Some(2)),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|(n, c)| n.ends_with("second problem") && c.is_none()),
        "{notes:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_published_before_a_config_is_named_nor_for_per_object_events() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events-none").await;
    let client = kit.admin().await;
    let config = create_config(&client, &ns).await;
    let harness = start(client.clone(), None);

    harness.send(rejected(&["before the config"])).await;
    // The queue is read in order: once the config is named, what follows is published.
    harness
        .send(EventKind::ResourceChanged {
            resource: "services".into(),
            object: format!("{ns}/web"),
            deleted: false,
            objects: 1,
        })
        .await;
    // Both taken from the queue (a loaded machine can be slow to get to them), and a moment
    // more to drop them, before the config is named.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while harness.events.capacity() < harness.events.max_capacity() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task reads its queue"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    harness.regarding.send_replace(Some(config));
    harness
        .send(EventKind::ResourceChanged {
            resource: "services".into(),
            object: format!("{ns}/web"),
            deleted: true,
            objects: 0,
        })
        .await;
    harness.send(EventKind::LeadershipLost).await;

    wait_for_events(&client, &ns, |e| !e.is_empty()).await;
    // Give a stray Event the time to show up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = wait_for_events(&client, &ns, |_| true).await;
    let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons, ["LeadershipLost"], "{events:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_rbac_events_are_dropped_and_once_granted_they_are_published() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events-rbac").await;
    let admin = kit.admin().await;
    let config = create_config(&admin, &ns).await;
    let harness = start(kit.restricted().await, Some(config));

    harness.send(rejected(&["refused while forbidden"])).await;
    harness.send(EventKind::LeadershipGained { epoch: 1 }).await;
    // The task is still reading its queue: this send would fail if it had ended.
    harness.send(EventKind::AllIndexesSynced).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!harness.task.is_finished(), "the task ended on a 403");

    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "haptor-events" },
        "rules": [{ "apiGroups": ["events.k8s.io"], "resources": ["events"],
                    "verbs": ["create", "patch"] }],
    }))
    .expect("a Role");
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("Role created");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "haptor-events" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "haptor-events" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RESTRICTED_USER }],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding created");

    // The authorizer's cache may lag the binding: send until one is published.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let api = Api::<Event>::namespaced(admin.clone(), &ns);
    let published = loop {
        harness.send(rejected(&["refused once granted"])).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let events = api.list(&Default::default()).await.expect("listed").items;
        if !events.is_empty() {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Event was published after the RoleBinding"
        );
    };
    let notes: Vec<_> = published.iter().filter_map(|e| e.note.as_deref()).collect();
    assert!(
        notes.iter().all(|n| n.ends_with("refused once granted")),
        "{notes:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_the_api_server_does_not_take_in_time_is_dropped_and_the_next_is_published() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("events-timeout").await;
    let admin = kit.admin().await;
    let config = create_config(&admin, &ns).await;
    let proxy = CuttableProxy::start(kit.port).await;
    let harness = start(kit.admin_via(&proxy.url).await, Some(config));

    // While cut, the proxy holds connections open without forwarding them: the publication
    // hangs. Were it not bounded, the held connection would carry it once restored.
    proxy.cut().await;
    harness.send(rejected(&["sent while cut"])).await;
    tokio::time::sleep(PUBLISH_TIMEOUT + Duration::from_secs(2)).await;
    proxy.restore();
    harness.send(EventKind::LeadershipGained { epoch: 9 }).await;

    wait_for_events(&admin, &ns, |e| {
        !with_reason(e, "LeadershipGained").is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = wait_for_events(&admin, &ns, |_| true).await;
    let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons, ["LeadershipGained"], "{events:#?}");
}
