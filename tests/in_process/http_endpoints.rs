//! The metrics and debug servers started under a Supervisor on 127.0.0.1:0, exercised over
//! real TCP with reqwest.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use haptor::actors::commentator::{Commentator, CommentatorArgs};
use haptor::actors::event_pump::SharedEventReceiver;
use haptor::actors::http::{
    DEBUG_SERVER_NAME, DebugState, HttpServerMsg, METRICS_SERVER_NAME, Readiness,
    debug_server_spec, metrics_server_spec,
};
use haptor::messages::events::{EventFanout, EventKind};
use haptor::observability::event_log::EventLog;
use haptor::observability::introspection::{ErrorRecord, Introspection};
use haptor::observability::metrics::Metrics;
use haptor::pure::rendered::RenderedConfig;
use haptor::supervision::{
    ActorRole, ChildSpec, RestartPolicy, Supervisor, SupervisorArgs, SupervisorMsg,
};
use ractor::{Actor, ActorRef};
use serde_json::Value;

struct Running {
    supervisor: ActorRef<SupervisorMsg>,
    handle: tokio::task::JoinHandle<()>,
    debug: SocketAddr,
    metrics: SocketAddr,
    introspection: Introspection,
    readiness: Readiness,
    fanout: EventFanout,
    client: reqwest::Client,
}

impl Running {
    async fn get(&self, addr: SocketAddr, path: &str) -> reqwest::Response {
        self.client
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    async fn debug_json(&self, path: &str) -> (u16, Value) {
        let response = self.get(self.debug, path).await;
        let status = response.status().as_u16();
        let body = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {path} is not JSON: {e}"));
        (status, body)
    }

    async fn stop(self) {
        self.supervisor.stop(None);
        self.handle.await.expect("supervisor stops");
    }
}

async fn server_addr(supervisor: &ActorRef<SupervisorMsg>, name: &str) -> SocketAddr {
    let cell = ractor::call!(supervisor, SupervisorMsg::ChildCell, name.to_string())
        .expect("supervisor answers")
        .unwrap_or_else(|| panic!("{name} is running"));
    let server: ActorRef<HttpServerMsg> = ActorRef::from(cell);
    ractor::call!(server, HttpServerMsg::LocalAddr).expect("server answers")
}

async fn start(stall_threshold: Duration) -> Running {
    // reqwest is built without a bundled crypto provider; plain http needs none, but
    // building a client still asks for one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let introspection = Introspection::new();
    let readiness = Readiness::new(false);
    let events = EventLog::new(50);
    let (fanout, mut receivers) = EventFanout::new(&["commentator"], 64);
    let commentator_events = receivers.pop().map(SharedEventReceiver::new);
    let metrics = Arc::new(Metrics::new().expect("metrics build"));
    metrics.watch_event_fanout(&fanout);
    let debug_state = DebugState {
        introspection: introspection.clone(),
        events: events.clone(),
        readiness: readiness.clone(),
        stall_threshold,
        fault_injection: None,
    };
    let args = SupervisorArgs {
        name: "root".into(),
        policy: RestartPolicy::default(),
        children: vec![
            metrics_server_spec("127.0.0.1:0", metrics),
            debug_server_spec("127.0.0.1:0", debug_state),
            ChildSpec::new(
                "commentator",
                ActorRole::Server,
                Commentator,
                CommentatorArgs {
                    log: events,
                    events: commentator_events,
                    busy: None,
                },
            ),
        ],
        on_restart: None,
    };
    let (supervisor, handle) = Actor::spawn(None, Supervisor, args)
        .await
        .expect("supervisor starts");
    introspection.set_root(supervisor.get_cell());
    let debug = server_addr(&supervisor, DEBUG_SERVER_NAME).await;
    let metrics = server_addr(&supervisor, METRICS_SERVER_NAME).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");
    Running {
        supervisor,
        handle,
        debug,
        metrics,
        introspection,
        readiness,
        fanout,
        client,
    }
}

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let running = start(Duration::from_secs(60)).await;
    let response = running.get(running.metrics, "/metrics").await;
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let body = response.text().await.expect("metrics body");
    assert!(body.contains("# TYPE haptor_build_info gauge"), "{body}");
    assert!(
        body.contains("# TYPE haptor_observability_events_dropped_total counter"),
        "{body}"
    );
    running.stop().await;
}

#[tokio::test]
async fn the_actor_tree_lists_the_servers_as_json_and_as_indented_text() {
    let running = start(Duration::from_secs(60)).await;
    let (status, tree) = running.debug_json("/debug/actors").await;
    assert_eq!(status, 200);
    let children = tree["children"].as_array().expect("the root has children");
    for name in [DEBUG_SERVER_NAME, METRICS_SERVER_NAME] {
        let node = children
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {tree}"));
        assert_eq!(node["role"], "server", "{node}");
        assert_eq!(node["status"], "running", "{node}");
    }

    let response = running
        .get(running.debug, "/debug/actors?format=text")
        .await;
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().await.expect("text body");
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines[0].starts_with(' '), "{text}");
    let server_line = lines
        .iter()
        .find(|l| l.contains(DEBUG_SERVER_NAME))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        server_line.starts_with("  ") && !server_line.starts_with("   "),
        "{text}"
    );

    let response = running
        .get(running.debug, "/debug/actors?format=yaml")
        .await;
    assert_eq!(response.status().as_u16(), 400);
    running.stop().await;
}

#[tokio::test]
async fn published_events_appear_in_the_debug_event_log() {
    let running = start(Duration::from_secs(60)).await;
    running.fanout.publish(
        Some(11),
        EventKind::ResourceChanged {
            resource: "EndpointSlice".into(),
            object: "default/web".into(),
            deleted: false,
            objects: 1,
        },
    );
    running.fanout.publish(
        Some(11),
        EventKind::RenderFailed {
            error: "line 3: unknown helper".into(),
        },
    );
    let mut events = Value::Null;
    for _ in 0..3000 {
        let (status, body) = running.debug_json("/debug/events").await;
        assert_eq!(status, 200);
        events = body;
        if events.as_array().is_some_and(|a| a.len() >= 2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = events.as_array().expect("a JSON array");
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["event"], "resource_changed");
    assert_eq!(events[0]["object"], "default/web");
    assert_eq!(events[1]["event"], "render_failed");
    assert_eq!(events[1]["correlation"], 11);
    running.stop().await;
}

#[tokio::test]
async fn debug_vars_serve_the_introspection_record_and_refuse_unknown_names() {
    let running = start(Duration::from_secs(60)).await;
    let introspection = &running.introspection;
    introspection.set_config(serde_json::json!({ "pod_selector": { "app": "haproxy" } }));
    let rendered = RenderedConfig {
        haproxy_cfg: "global\n    daemon\n".into(),
        ..RenderedConfig::default()
    };
    introspection.set_rendered(Arc::new(rendered.clone()), rendered.checksum());
    introspection.set_resource_count("services", 4);
    introspection.update_state(|s| s.epoch = 3);
    introspection.record_error(ErrorRecord::new("render", "line 9: boom"));

    let (status, index) = running.debug_json("/debug/vars").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = index["vars"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "config",
            "rendered",
            "resources",
            "state",
            "errors",
            "status"
        ]
    );
    // The Gateway API status of the render: none recorded, an empty list.
    let (status, statuses) = running.debug_json("/debug/vars/status").await;
    assert_eq!((status, statuses), (200, serde_json::json!([])));

    let (status, config) = running.debug_json("/debug/vars/config").await;
    assert_eq!(status, 200);
    assert_eq!(config["pod_selector"]["app"], "haproxy");
    let (_, served) = running.debug_json("/debug/vars/rendered").await;
    assert_eq!(served["haproxy.cfg"], rendered.haproxy_cfg.as_str());
    assert!(served["files"].is_object(), "{served}");
    let (_, resources) = running.debug_json("/debug/vars/resources").await;
    assert_eq!(resources["services"], 4);
    let (_, state) = running.debug_json("/debug/vars/state").await;
    assert_eq!(state["epoch"], 3);
    assert_eq!(
        state["last_rendered_checksum"],
        rendered.checksum().to_string()
    );
    let (_, errors) = running.debug_json("/debug/vars/errors").await;
    assert_eq!(errors[0]["message"], "line 9: boom");

    let (status, refusal) = running.debug_json("/debug/vars/nope").await;
    assert_eq!(status, 404);
    let message = refusal["error"].as_str().expect("an error message");
    assert!(
        message.contains("nope") && message.contains("rendered") && message.contains("errors"),
        "{message}"
    );
    running.stop().await;
}

#[tokio::test]
async fn readyz_answers_503_naming_what_it_waits_for_until_the_state_is_ready() {
    let running = start(Duration::from_secs(60)).await;
    let (status, body) = running.debug_json("/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(
        body["waiting_for"][0], "a valid HAProxyTemplateConfig",
        "{body}"
    );
    running
        .readiness
        .update(|r| r.iteration_started(vec!["services".to_string()]));
    let (status, body) = running.debug_json("/readyz").await;
    assert_eq!(status, 503);
    assert!(
        body["waiting_for"][0]
            .as_str()
            .is_some_and(|w| w.contains("services")),
        "{body}"
    );
    running.readiness.update(|r| r.resource_synced("services"));
    let (status, body) = running.debug_json("/readyz").await;
    assert_eq!(status, 200, "{body}");
    running.stop().await;
}

#[tokio::test]
async fn stopping_the_supervisor_shuts_both_servers_down() {
    let running = start(Duration::from_secs(60)).await;
    let (debug, metrics) = (running.debug, running.metrics);
    let (status, _) = running.debug_json("/healthz").await;
    assert_eq!(status, 200);
    running.stop().await;
    assert!(tokio::net::TcpStream::connect(debug).await.is_err());
    assert!(tokio::net::TcpStream::connect(metrics).await.is_err());
}
