//! The actor system end to end, without a cluster: an in-memory resource source, watch
//! channels for config, leadership and instances, recording deploy targets, and a
//! render-only pipeline that counts renders (validation has its own tests). The debug and
//! metrics servers run on real sockets and are read over HTTP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptor::actors::context::{ControllerSettings, ReconcilePipeline, Sources};
use haptor::actors::controller::{Controller, ServerAddresses, start_controller};
use haptor::actors::deployment::InMemorySink;
use haptor::actors::http::{DEBUG_SERVER_NAME, HttpServerMsg, METRICS_SERVER_NAME};
use haptor::actors::sources::MemorySource;
use haptor::messages::deploy::{RenderFailure, RenderedAndValidated};
use haptor::messages::{Instance, Leadership};
use haptor::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use haptor::pure::deploy::RecordingTarget;
use haptor::pure::pipeline::CompiledConfig;
use haptor::pure::store::StoresSnapshot;
use haptor::supervision::SupervisorMsg;
use ractor::ActorRef;
use serde_json::{Value, json};
use tokio::sync::watch;

const CONFIG: &str = r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: test, namespace: default}
spec:
  dataplane:
    minDeploymentInterval: 0s
    driftPreventionInterval: 1h
  watchedResources:
    services:
      apiVersion: v1
      resources: services
      indexBy: ["metadata.namespace", "metadata.name"]
      debounce: 0s
  haproxyConfig:
    template: |
      global
        maxconn 100
      {{#resources "services"}}
      backend {{metadata.name}}
        # marker {{default metadata.annotations.marker "none"}}
      {{/resources}}
"#;

/// Renders with the config's templates, skipping validation, optionally slowly; records
/// every haproxy.cfg it produced.
#[derive(Default)]
struct RecordingPipeline {
    delay: Duration,
    renders: Mutex<Vec<String>>,
}

impl RecordingPipeline {
    fn renders(&self) -> Vec<String> {
        self.renders.lock().expect("lock").clone()
    }
}

impl ReconcilePipeline for RecordingPipeline {
    fn run(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<RenderedAndValidated, RenderFailure> {
        std::thread::sleep(self.delay);
        let rendered = compiled.render(snapshot, None).map_err(|e| RenderFailure {
            stage: "render".into(),
            message: e.to_string(),
            template: None,
            line: None,
        })?;
        self.renders
            .lock()
            .expect("lock")
            .push(rendered.haproxy_cfg.clone());
        Ok(RenderedAndValidated {
            checksum: rendered.checksum(),
            rendered: Arc::new(rendered),
            render_time: Duration::ZERO,
            validate_time: Duration::ZERO,
            cache_hit: false,
        })
    }
}

struct Harness {
    controller: Controller,
    source: MemorySource,
    config: watch::Sender<Option<Arc<HAProxyTemplateConfig>>>,
    leadership: watch::Sender<Leadership>,
    _instances: watch::Sender<Vec<Instance>>,
    target: Arc<RecordingTarget>,
    pipeline: Arc<RecordingPipeline>,
}

fn service(name: &str, marker: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default", "annotations": {"marker": marker}}})
}

fn config(text: &str) -> Arc<HAProxyTemplateConfig> {
    Arc::new(config_from_yaml("test.yaml", text).expect("test config parses"))
}

async fn start(leader: bool, delay: Duration, servers: bool) -> Harness {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let source = MemorySource::new();
    source.apply(service("web", "initial"));
    let (config_tx, config_rx) = watch::channel(Some(config(CONFIG)));
    let (leader_tx, leader_rx) = watch::channel(Leadership {
        is_leader: leader,
        epoch: u64::from(leader),
    });
    let target = Arc::new(RecordingTarget::new("pod-a"));
    let (instances_tx, instances_rx) = watch::channel(vec![Instance {
        name: "pod-a".into(),
        target: target.clone(),
    }]);
    let pipeline = Arc::new(RecordingPipeline {
        delay,
        ..Default::default()
    });
    let sources = Sources {
        config: config_rx,
        resources: Arc::new(source.clone()),
        leadership: leader_rx,
        instances: instances_rx,
    };
    let addresses = if servers {
        ServerAddresses {
            metrics: Some("127.0.0.1:0".into()),
            debug: Some("127.0.0.1:0".into()),
        }
    } else {
        ServerAddresses::default()
    };
    let controller = start_controller(
        sources,
        pipeline.clone(),
        Arc::new(InMemorySink::default()),
        ControllerSettings::default(),
        addresses,
    )
    .await
    .expect("controller starts");
    Harness {
        controller,
        source,
        config: config_tx,
        leadership: leader_tx,
        _instances: instances_tx,
        target,
        pipeline,
    }
}

/// Polls `check` every 10 ms for up to 5 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn server_url(h: &Harness, name: &str) -> String {
    let cell = ractor::call!(
        h.controller.root,
        SupervisorMsg::ChildCell,
        name.to_string()
    )
    .expect("root answers")
    .expect("server runs");
    let addr = ractor::call!(
        ActorRef::<HttpServerMsg>::from(cell),
        HttpServerMsg::LocalAddr
    )
    .expect("server answers");
    format!("http://{addr}")
}

async fn actor_names(h: &Harness) -> Vec<String> {
    let url = format!("{}/debug/actors", server_url(h, DEBUG_SERVER_NAME).await);
    let tree: Value = reqwest::get(url)
        .await
        .expect("GET /debug/actors")
        .json()
        .await
        .expect("JSON");
    let mut names = Vec::new();
    fn walk(node: &Value, names: &mut Vec<String>) {
        if let Some(name) = node["name"].as_str() {
            names.push(name.to_string());
        }
        for child in node["children"].as_array().into_iter().flatten() {
            walk(child, names);
        }
    }
    walk(&tree, &mut names);
    names
}

#[tokio::test]
async fn becoming_leader_starts_the_leader_only_subtree_and_replays_the_latest_state() {
    let h = start(false, Duration::ZERO, true).await;
    eventually("indexes synced", || {
        h.controller
            .services
            .introspection
            .state()
            .all_indexes_synced
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        h.pipeline.renders().is_empty(),
        "a follower does not render"
    );
    assert!(!actor_names(&h).await.contains(&"coordinator".to_string()));

    // Gaining leadership: a render and a deployment happen without any resource event.
    h.leadership
        .send(Leadership {
            is_leader: true,
            epoch: 7,
        })
        .expect("send");
    eventually("a render after gaining leadership", || {
        !h.pipeline.renders().is_empty()
    })
    .await;
    eventually("a deployment to pod-a", || !h.target.deployed().is_empty()).await;
    assert!(h.pipeline.renders()[0].contains("backend web"));
    assert_eq!(
        h.target.deployed()[0].epoch,
        7,
        "deployments carry the leader's epoch"
    );
    let names = actor_names(&h).await;
    for leader_only in [
        "leader-only",
        "coordinator",
        "deploy-scheduler",
        "drift-monitor",
        "config-publisher",
        "deployer-pod-a",
    ] {
        assert!(
            names.contains(&leader_only.to_string()),
            "{leader_only} missing from {names:?}"
        );
    }

    // Losing leadership stops every leader-only actor.
    h.leadership
        .send(Leadership {
            is_leader: false,
            epoch: 8,
        })
        .expect("send");
    let mut names = actor_names(&h).await;
    for _ in 0..200 {
        if !names.contains(&"leader-only".to_string()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        names = actor_names(&h).await;
    }
    for leader_only in [
        "leader-only",
        "coordinator",
        "deploy-scheduler",
        "drift-monitor",
        "config-publisher",
        "deployer-pod-a",
    ] {
        assert!(
            !names.contains(&leader_only.to_string()),
            "{leader_only} still running: {names:?}"
        );
    }
    let renders = h.pipeline.renders().len();
    h.source.apply(service("api", "x"));
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        h.pipeline.renders().len(),
        renders,
        "a follower ignores resource events"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn a_hundred_events_during_a_render_cause_at_most_one_more_render_reflecting_the_last() {
    let h = start(true, Duration::from_millis(300), false).await;
    eventually("the initial render", || h.pipeline.renders().len() == 1).await;

    h.source.apply(service("web", "event-0"));
    // Let the render for event 0 start, then send 100 more while it runs.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 1..=100 {
        h.source.apply(service("web", &format!("event-{i}")));
    }
    eventually("the renders to settle", || {
        h.pipeline
            .renders()
            .last()
            .is_some_and(|r| r.contains("marker event-100"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let renders = h.pipeline.renders();
    assert_eq!(
        renders.len(),
        3,
        "initial + the one running during the burst + one coalesced: {}",
        renders.len()
    );
    assert!(
        renders[2].contains("marker event-100"),
        "the last render reflects the last event"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn a_watcher_that_fails_is_restarted_and_reconciliation_goes_on() {
    let h = start(true, Duration::ZERO, false).await;
    eventually("the initial render", || h.pipeline.renders().len() == 1).await;
    let watcher =
        find_cell(&h.controller.root.get_cell(), "watcher-services").expect("the watcher runs");
    let _ = ActorRef::<haptor::messages::WatcherMsg>::from(watcher.clone())
        .cast(haptor::messages::WatcherMsg::SourceEnded);
    eventually("a new watcher", || {
        find_cell(&h.controller.root.get_cell(), "watcher-services")
            .is_some_and(|c| c.get_id() != watcher.get_id())
    })
    .await;
    let tree = haptor::supervision::actor_tree(&h.controller.root.get_cell());
    assert_eq!(
        tree.find("watcher-services").map(|n| n.restarts),
        Some(1),
        "{}",
        tree.to_text()
    );
    h.source.apply(service("after-restart", "x"));
    eventually("a render with the new service", || {
        h.pipeline
            .renders()
            .iter()
            .any(|r| r.contains("backend after-restart"))
    })
    .await;
    h.controller.stop().await;
}

#[tokio::test]
async fn an_invalid_config_change_is_rejected_and_the_running_config_stays() {
    let h = start(true, Duration::ZERO, false).await;
    eventually("the initial render", || h.pipeline.renders().len() == 1).await;
    h.config
        .send(Some(config(&CONFIG.replace(
            "{{#resources \"services\"}}",
            "{{#resources \"services\"",
        ))))
        .expect("send");
    eventually("the rejection to be recorded", || {
        !h.controller.services.introspection.errors().is_empty()
    })
    .await;
    let error = &h.controller.services.introspection.errors()[0];
    assert!(error.message.contains("haproxy.cfg"), "{error:?}");
    h.source.apply(service("still-works", "x"));
    eventually("a render with the old templates", || {
        h.pipeline
            .renders()
            .iter()
            .any(|r| r.contains("backend still-works"))
    })
    .await;
    h.controller.stop().await;
}

#[tokio::test]
async fn a_template_change_renders_again_and_a_new_watched_resource_rebuilds_the_iteration() {
    let h = start(true, Duration::ZERO, false).await;
    eventually("the initial render", || h.pipeline.renders().len() == 1).await;
    h.config
        .send(Some(config(&CONFIG.replace("maxconn 100", "maxconn 200"))))
        .expect("send");
    eventually("a render with the new template", || {
        h.pipeline
            .renders()
            .iter()
            .any(|r| r.contains("maxconn 200"))
    })
    .await;
    let before = find_cell(&h.controller.root.get_cell(), "config-iteration")
        .expect("iteration")
        .get_id();
    let with_secrets = CONFIG.replace(
        "  haproxyConfig:",
        "    secrets:\n      apiVersion: v1\n      resources: secrets\n      indexBy: [\"metadata.namespace\", \"metadata.name\"]\n  haproxyConfig:",
    );
    h.config.send(Some(config(&with_secrets))).expect("send");
    eventually("a new iteration", || {
        find_cell(&h.controller.root.get_cell(), "config-iteration")
            .is_some_and(|c| c.get_id() != before)
    })
    .await;
    eventually("a watcher for secrets", || {
        find_cell(&h.controller.root.get_cell(), "watcher-secrets").is_some()
    })
    .await;
    h.controller.stop().await;
}

#[tokio::test]
async fn debug_actors_lists_every_actor_and_metrics_are_exposed() {
    let h = start(true, Duration::ZERO, true).await;
    eventually("a deployment", || !h.target.deployed().is_empty()).await;
    let names = actor_names(&h).await;
    for expected in [
        "haptor",
        "metrics-server",
        "debug-server",
        "commentator",
        "metrics",
        "iteration-manager",
        "config-iteration",
        "all-replica",
        "validator-basic",
        "validator-template",
        "validator-jsonpath",
        "config-loader",
        "credentials-loader",
        "index-tracker",
        "reconciler",
        "watcher-services",
        "discovery",
        "leader-elector",
        "leader-only",
        "coordinator",
        "deploy-scheduler",
        "deployer-pod-a",
        "drift-monitor",
        "config-publisher",
    ] {
        assert!(
            names.contains(&expected.to_string()),
            "{expected} missing from /debug/actors: {names:?}"
        );
    }
    let text = reqwest::get(format!(
        "{}/debug/actors?format=text",
        server_url(&h, DEBUG_SERVER_NAME).await
    ))
    .await
    .expect("GET")
    .text()
    .await
    .expect("text");
    assert!(
        text.lines().any(|l| l.starts_with("    leader-only ")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("      coordinator ")),
        "{text}"
    );

    let metrics = reqwest::get(format!(
        "{}/metrics",
        server_url(&h, METRICS_SERVER_NAME).await
    ))
    .await
    .expect("GET")
    .text()
    .await
    .expect("text");
    for family in [
        "haptor_reconciliations_total",
        "haptor_deployments_total",
        "haptor_resources",
        "haptor_leader_is_leader 1",
        "haptor_observability_events_dropped_total",
        "haptor_build_info",
    ] {
        assert!(
            metrics.contains(family),
            "{family} missing from /metrics:\n{metrics}"
        );
    }
    h.controller.stop().await;
}

/// Finds a live actor by its registered name anywhere below `root`.
fn find_cell(root: &ractor::ActorCell, name: &str) -> Option<ractor::ActorCell> {
    for child in root.get_children() {
        if haptor::supervision::registry::info(child.get_id()).is_some_and(|i| i.name == name) {
            return Some(child);
        }
        if let Some(found) = find_cell(&child, name) {
            return Some(found);
        }
    }
    None
}

#[tokio::test]
async fn reloading_deployments_are_paced_and_runtime_only_ones_skip_the_pacing() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let source = MemorySource::new();
    source.apply(service("web", "initial"));
    let paced = CONFIG.replace("minDeploymentInterval: 0s", "minDeploymentInterval: 1500ms");
    let (_config_tx, config_rx) = watch::channel(Some(config(&paced)));
    let (_leader_tx, leader_rx) = watch::channel(Leadership {
        is_leader: true,
        epoch: 1,
    });
    let target = Arc::new(RecordingTarget::new("pod-a"));
    let (_instances_tx, instances_rx) = watch::channel(vec![Instance {
        name: "pod-a".into(),
        target: target.clone(),
    }]);
    let pipeline = Arc::new(RecordingPipeline::default());
    let sources = Sources {
        config: config_rx,
        resources: Arc::new(source.clone()),
        leadership: leader_rx,
        instances: instances_rx,
    };
    let controller = start_controller(
        sources,
        pipeline.clone(),
        Arc::new(InMemorySink::default()),
        ControllerSettings::default(),
        ServerAddresses::default(),
    )
    .await
    .expect("starts");
    eventually("the first deployment", || target.deployed().len() == 1).await;

    // A new backend needs a reload: it waits for the pacing interval.
    let started = std::time::Instant::now();
    source.apply(service("api", "x"));
    eventually("the paced deployment", || target.deployed().len() == 2).await;
    let paced_after = started.elapsed();
    assert!(
        paced_after >= Duration::from_millis(1000),
        "deployed after {paced_after:?}, before the interval"
    );

    // Only a comment changes: no reload, so no pacing although the last deployment was just now.
    let started = std::time::Instant::now();
    source.apply(service("web", "changed"));
    eventually("the runtime-only deployment", || {
        target.deployed().len() == 3
    })
    .await;
    let runtime_after = started.elapsed();
    assert!(
        runtime_after < Duration::from_millis(1000),
        "a runtime-only change waited {runtime_after:?}"
    );
    controller.stop().await;
}

#[tokio::test]
async fn a_failing_instance_backs_off_without_delaying_another_and_a_fenced_one_stops() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let source = MemorySource::new();
    source.apply(service("web", "initial"));
    let (_config_tx, config_rx) = watch::channel(Some(config(CONFIG)));
    let (_leader_tx, leader_rx) = watch::channel(Leadership {
        is_leader: true,
        epoch: 5,
    });
    let healthy = Arc::new(RecordingTarget::new("pod-a"));
    let down = Arc::new(RecordingTarget::new("pod-b"));
    down.set_unreachable(true);
    let newer_leader_seen = Arc::new(RecordingTarget::new("pod-c"));
    // pod-c already accepted a write from epoch 9: this controller (epoch 5) is a deposed leader there.
    futures::executor::block_on(haptor::pure::deploy::DeployTarget::deploy(
        newer_leader_seen.as_ref(),
        &haptor::pure::deploy::DeployRequest {
            rendered: Arc::new(Default::default()),
            checksum: "from-the-new-leader".into(),
            epoch: 9,
            generation: 1,
        },
    ))
    .expect("the newer leader's write");
    let instances = vec![
        Instance {
            name: "pod-a".into(),
            target: healthy.clone(),
        },
        Instance {
            name: "pod-b".into(),
            target: down.clone(),
        },
        Instance {
            name: "pod-c".into(),
            target: newer_leader_seen.clone(),
        },
    ];
    let (_instances_tx, instances_rx) = watch::channel(instances);
    let sources = Sources {
        config: config_rx,
        resources: Arc::new(source.clone()),
        leadership: leader_rx,
        instances: instances_rx,
    };
    let settings = ControllerSettings {
        deploy_backoff_base: Duration::from_millis(50),
        deploy_backoff_max: Duration::from_millis(200),
        ..ControllerSettings::default()
    };
    let controller = start_controller(
        sources,
        Arc::new(RecordingPipeline::default()),
        Arc::new(InMemorySink::default()),
        settings,
        ServerAddresses::default(),
    )
    .await
    .expect("starts");
    eventually("pod-a deployed although pod-b is down", || {
        healthy.deployed().len() == 1
    })
    .await;
    assert!(down.deployed().is_empty());
    tokio::time::sleep(Duration::from_millis(300)).await;
    down.set_unreachable(false);
    eventually("pod-b recovers after its backoff", || {
        down.deployed().len() == 1
    })
    .await;
    assert_eq!(
        down.deployed()[0].checksum,
        healthy.deployed()[0].checksum,
        "pod-b gets the desired config"
    );

    // pod-c refused the write (fenced) and kept the newer leader's config.
    assert_eq!(newer_leader_seen.deployed().len(), 1);
    assert_eq!(
        newer_leader_seen.deployed()[0].checksum,
        "from-the-new-leader"
    );
    eventually("the fencing to be reported", || {
        controller.services.introspection.errors().iter().any(|e| {
            e.source == "deploy:pod-c" && e.message.contains("epoch 5 is older than epoch 9")
        })
    })
    .await;
    // A later render is not attempted on pod-c any more.
    source.apply(service("api", "x"));
    eventually("pod-a gets the new render", || {
        healthy.deployed().len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(newer_leader_seen.deployed().len(), 1);
    controller.stop().await;
}
