//! The actor system end to end, without a cluster: an in-memory resource source, watch
//! channels for config, leadership and instances, recording deploy targets, and a
//! render-only pipeline that counts renders (validation has its own tests). The debug and
//! metrics servers run on real sockets and are read over HTTP. Tests about timers (debounce,
//! backoff) run on tokio's paused clock, where time moves only when every task waits, so
//! what they assert is exact; they start no HTTP server. The render thread is an OS thread,
//! outside that clock: [`eventually`] bounds its waits in real time, and [`settle`] waits
//! for renders in real time before a test checks that something did not happen.

use crate::controller;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use haptor::actors::context::ControllerSettings;
use haptor::actors::controller::{Controller, ServerAddresses};
use haptor::actors::http::{DEBUG_SERVER_NAME, METRICS_SERVER_NAME};
use haptor::drivers::memory_source::MemorySource;
use haptor::messages::{DeploySchedulerMsg, Instance, Leadership, ResourceEvent};
use haptor::pure::config::{
    HAProxyCfgSpec, HAProxyCfgStatus, HAProxyTemplateConfig, WatchedResource,
};
use haptor::pure::deploy::{DeployError, RecordingTarget};
use haptor::pure::rendered::Checksum;
use haptor::seams::InMemorySink;
use haptor::seams::ResourceSourceFactory;
use ractor::ActorRef;
use serde_json::{Value, json};
use tokio::sync::watch;

use controller::{
    ControllerSetup, RenderOnlyPipeline, RunningController, config, config_yaml, find_cell,
    server_address,
};

const CONFIG: &str = config_yaml!(
    "test",
    r#"      {{#resources "services"}}
      backend {{metadata.name}}
        # marker {{default metadata.annotations.marker "none"}}
      {{/resources}}
"#
);

struct Harness {
    controller: Controller,
    source: MemorySource,
    config: watch::Sender<Option<Arc<HAProxyTemplateConfig>>>,
    leadership: watch::Sender<Leadership>,
    instances: watch::Sender<Vec<Instance>>,
    /// The first instance's target.
    target: Arc<RecordingTarget>,
    pipeline: Arc<RenderOnlyPipeline>,
    /// Where the ConfigPublisher writes HAProxyCfg.
    sink: Arc<InMemorySink>,
}

fn service(name: &str, marker: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default", "annotations": {"marker": marker}}})
}

/// What a harness starts: by default [`CONFIG`] on a source holding the Service `web`, a
/// follower, one instance `pod-a`, default settings, no HTTP servers.
struct Setup {
    config: String,
    source: MemorySource,
    /// What the watchers read; the source itself when `None`.
    resources: Option<Arc<dyn ResourceSourceFactory>>,
    leader: bool,
    epoch: u64,
    delay: Duration,
    servers: bool,
    settings: ControllerSettings,
    targets: Vec<Arc<RecordingTarget>>,
}

impl Default for Setup {
    fn default() -> Setup {
        let source = MemorySource::new();
        source.apply(service("web", "initial"));
        Setup {
            config: CONFIG.to_string(),
            source,
            resources: None,
            leader: false,
            epoch: 0,
            delay: Duration::ZERO,
            servers: false,
            settings: ControllerSettings::default(),
            targets: vec![Arc::new(RecordingTarget::new("pod-a"))],
        }
    }
}

impl Setup {
    fn leading(self) -> Setup {
        Setup {
            leader: true,
            epoch: 1,
            ..self
        }
    }
}

async fn start(leader: bool, delay: Duration, servers: bool) -> Harness {
    start_with(Setup {
        leader,
        epoch: u64::from(leader),
        delay,
        servers,
        ..Setup::default()
    })
    .await
}

async fn start_with(setup: Setup) -> Harness {
    let instances = setup
        .targets
        .iter()
        .map(|target| Instance {
            name: haptor::pure::deploy::DeployTarget::name(target.as_ref()).to_string(),
            target: target.clone(),
        })
        .collect();
    let pipeline = Arc::new(RenderOnlyPipeline::with_delay(setup.delay));
    let addresses = if setup.servers {
        ServerAddresses {
            metrics: Some("127.0.0.1:0".into()),
            debug: Some("127.0.0.1:0".into()),
            health: None,
            webhook: None,
        }
    } else {
        ServerAddresses::default()
    };
    let RunningController {
        controller,
        config,
        leadership,
        instances,
        sink,
    } = ControllerSetup {
        config: config(&setup.config),
        leadership: Leadership {
            is_leader: setup.leader,
            epoch: setup.epoch,
        },
        instances,
        resources: setup
            .resources
            .unwrap_or_else(|| Arc::new(setup.source.clone())),
        pipeline: pipeline.clone(),
        settings: setup.settings,
        addresses,
    }
    .start()
    .await;
    Harness {
        controller,
        source: setup.source,
        config,
        leadership,
        instances,
        target: setup.targets[0].clone(),
        pipeline,
        sink,
    }
}

/// Polls `check` every 10 ms (of tokio's clock, so paused-clock tests let timers fire in
/// between) for up to 30 s of real time: only a failing test waits that long.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// For paused-clock tests, before checking that something did *not* happen: lets work off
/// the runtime (a render on the render thread) come back, waiting in real time while the
/// paused clock stands still, then lets `virtual_time` pass on the paused clock, so every
/// timer due by then (debounce, backoff) fires, then waits for off-runtime work again.
async fn settle(virtual_time: Duration) {
    let real_wait =
        || tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(300)));
    real_wait().await.expect("waits");
    tokio::time::sleep(virtual_time).await;
    real_wait().await.expect("waits");
}

/// The published HAProxyCfg spec and status, once there is one.
fn published(h: &Harness) -> Option<(HAProxyCfgSpec, HAProxyCfgStatus)> {
    h.sink.last.lock().expect("lock").clone()
}

async fn server_url(h: &Harness, name: &str) -> String {
    format!("http://{}", server_address(&h.controller, name).await)
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
    for _ in 0..3000 {
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
    // Once the render for event 0 has started, send 100 more while it runs.
    eventually("the render for event 0 to start", || {
        h.pipeline.started() == 2
    })
    .await;
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

    let families = [
        "haptor_reconciliations_total",
        "haptor_deployments_total",
        "haptor_resources",
        "haptor_leader_is_leader 1",
        "haptor_observability_events_dropped_total",
        "haptor_build_info",
    ];
    // The Metrics actor counts events from its queue in its own time: the deployment can be
    // recorded before it (or the sync, or the leadership) shows in /metrics.
    let url = format!("{}/metrics", server_url(&h, METRICS_SERVER_NAME).await);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let metrics = reqwest::get(&url)
            .await
            .expect("GET")
            .text()
            .await
            .expect("text");
        if families.iter().all(|f| metrics.contains(f)) || std::time::Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for family in families {
        assert!(
            metrics.contains(family),
            "{family} missing from /metrics:\n{metrics}"
        );
    }
    h.controller.stop().await;
}

#[tokio::test]
async fn reloading_deployments_are_paced_and_runtime_only_ones_skip_the_pacing() {
    let source = MemorySource::new();
    source.apply(service("web", "initial"));
    let paced = CONFIG.replace("minDeploymentInterval: 0s", "minDeploymentInterval: 1h");
    let target = Arc::new(RecordingTarget::new("pod-a"));
    let pipeline = Arc::new(RenderOnlyPipeline::default());
    let RunningController {
        controller,
        config: config_tx,
        leadership: _leadership,
        instances: _instances,
        ..
    } = ControllerSetup {
        config: config(&paced),
        leadership: Leadership {
            is_leader: true,
            epoch: 1,
        },
        instances: vec![Instance {
            name: "pod-a".into(),
            target: target.clone(),
        }],
        resources: Arc::new(source.clone()),
        pipeline: pipeline.clone(),
        settings: ControllerSettings::default(),
        addresses: ServerAddresses::default(),
    }
    .start()
    .await;
    eventually("the first deployment", || target.deployed().len() == 1).await;
    let scheduler = || {
        find_cell(&controller.root.get_cell(), "deploy-scheduler")
            .map(ActorRef::<DeploySchedulerMsg>::from)
            .expect("the scheduler runs")
    };
    let waiting =
        || async { ractor::call!(scheduler(), DeploySchedulerMsg::Waiting).expect("answers") };

    // The first deployment reloaded pod-a; a new backend needs another reload: it waits for
    // the interval (an hour), holding the latest render.
    source.apply(service("api", "x"));
    eventually("the render with the new backend", || {
        pipeline.renders().iter().any(|r| r.contains("backend api"))
    })
    .await;
    let mut waited = Vec::new();
    for _ in 0..3000 {
        waited = waiting().await;
        if !waited.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(waited, vec!["pod-a".to_string()]);
    assert_eq!(target.deployed().len(), 1, "the reload waits");

    // The interval shortened in place: the waiting render goes out.
    config_tx
        .send(Some(config(&paced.replace(
            "minDeploymentInterval: 1h",
            "minDeploymentInterval: 0s",
        ))))
        .expect("send");
    eventually("the paced deployment", || target.deployed().len() == 2).await;
    // Back to an hour: pod-a has just reloaded.
    config_tx.send(Some(config(&paced))).expect("send");
    eventually("the hour back in force", || {
        controller
            .services
            .introspection
            .config()
            .is_some_and(|c| c["dataplane"]["minDeploymentInterval"] == "1h")
    })
    .await;

    // Only a comment changes: no reload, so no pacing although pod-a just reloaded.
    source.apply(service("web", "changed"));
    eventually("the runtime-only deployment", || {
        target.deployed().len() == 3
    })
    .await;
    assert!(waiting().await.is_empty(), "nothing waits");
    assert!(
        target.deployed()[2]
            .rendered
            .haproxy_cfg
            .contains("marker changed")
    );
    controller.stop().await;
}

/// The gaps between attempts on tokio's paused clock: every retry waits exactly its
/// backoff.
fn gaps(attempts: &[haptor::pure::deploy::DeployAttempt]) -> Vec<Duration> {
    attempts.windows(2).map(|w| w[1].at - w[0].at).collect()
}

#[tokio::test]
async fn an_instance_that_comes_back_with_a_new_target_is_deployed_through_the_new_one() {
    let first = Arc::new(RecordingTarget::new("pod-a"));
    let h = start_with(Setup {
        leader: true,
        epoch: 1,
        targets: vec![first.clone()],
        ..Setup::default()
    })
    .await;
    eventually("pod-a deployed", || first.deployed().len() == 1).await;
    // Discovery rebuilt pod-a's target (new credentials, say): same name, new target.
    let second = Arc::new(RecordingTarget::new("pod-a"));
    let _ = h.instances.send(vec![Instance {
        name: "pod-a".into(),
        target: second.clone(),
    }]);
    eventually("the new target gets the desired config", || {
        second.deployed().len() == 1
    })
    .await;
    assert_eq!(second.deployed()[0].checksum, first.deployed()[0].checksum);
    h.controller.stop().await;
}

/// [`CONFIG`] with `dataplane.deploymentTimeout` set.
fn config_with_deployment_timeout(timeout: &str) -> String {
    CONFIG.replace(
        "driftPreventionInterval: 1h",
        &format!("driftPreventionInterval: 1h\n    deploymentTimeout: {timeout}"),
    )
}

#[tokio::test]
async fn deployments_are_bounded_by_the_deployment_timeout_the_running_config_compiled() {
    let h = start_with(Setup {
        config: config_with_deployment_timeout("7s"),
        ..Setup::default().leading()
    })
    .await;
    eventually("pod-a deployed", || h.target.deployed().len() == 1).await;
    assert_eq!(h.target.deployed()[0].timeout, Duration::from_secs(7));
    // Changed in place, the next deployment takes the new value.
    let _ = h
        .config
        .send(Some(config(&config_with_deployment_timeout("9s"))));
    eventually("the changed config accepted", || {
        h.controller
            .services
            .introspection
            .config()
            .is_some_and(|spec| spec["dataplane"]["deploymentTimeout"] == "9s")
    })
    .await;
    settle(Duration::from_millis(100)).await;
    h.source.apply(service("api", "x"));
    eventually("pod-a deployed again", || h.target.deployed().len() == 2).await;
    assert_eq!(h.target.deployed()[1].timeout, Duration::from_secs(9));
    h.controller.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_instance_backs_off_without_delaying_another_and_a_fenced_one_stops() {
    let healthy = Arc::new(RecordingTarget::new("pod-a"));
    let down = Arc::new(RecordingTarget::new("pod-b"));
    down.set_unreachable(true);
    let newer_leader_seen = Arc::new(RecordingTarget::new("pod-c"));
    // pod-c already accepted a write from epoch 9: this controller (epoch 5) is a deposed leader there.
    haptor::pure::deploy::DeployTarget::deploy(
        newer_leader_seen.as_ref(),
        &haptor::pure::deploy::DeployRequest {
            rendered: Arc::new(Default::default()),
            checksum: Checksum::of(b"from-the-new-leader"),
            epoch: 9,
            generation: 1,
            timeout: haptor::pure::deploy::DEFAULT_DEPLOYMENT_TIMEOUT,
        },
    )
    .await
    .expect("the newer leader's write");
    let h = start_with(Setup {
        leader: true,
        epoch: 5,
        settings: ControllerSettings {
            deploy_backoff_base: Duration::from_millis(50),
            deploy_backoff_max: Duration::from_millis(200),
            ..ControllerSettings::default()
        },
        targets: vec![healthy.clone(), down.clone(), newer_leader_seen.clone()],
        ..Setup::default()
    })
    .await;
    eventually("pod-a deployed although pod-b is down", || {
        healthy.deployed().len() == 1
    })
    .await;
    eventually("five attempts on pod-b", || down.attempts().len() >= 5).await;
    let attempts = down.attempts();
    assert!(
        attempts[..5].iter().all(|a| a.result
            == Err(DeployError::Unreachable("pod-b is down".into()))
            && a.request.checksum == healthy.deployed()[0].checksum),
        "{attempts:?}"
    );
    // Exponential backoff from deploy_backoff_base, capped at deploy_backoff_max.
    assert_eq!(
        gaps(&attempts[..5]),
        [50, 100, 200, 200].map(Duration::from_millis),
        "the gaps between pod-b's attempts"
    );
    assert!(
        healthy.attempts()[0].at < attempts[1].at,
        "pod-a was deployed before pod-b's first retry, not after pod-b's backoff"
    );
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
    eventually("the fencing to be reported", || {
        h.controller
            .services
            .introspection
            .errors()
            .iter()
            .any(|e| {
                e.source == "deploy:pod-c" && e.message.contains("epoch 5 is older than epoch 9")
            })
    })
    .await;
    let fenced: Vec<_> = newer_leader_seen
        .attempts()
        .into_iter()
        .map(|a| (a.request.epoch, a.result.is_ok()))
        .collect();
    assert_eq!(
        fenced,
        [(9, true), (5, false)],
        "the newer leader's write, then this leader's one refused attempt"
    );
    assert_eq!(
        newer_leader_seen.attempts()[1].result,
        Err(DeployError::Fenced {
            offered: 5,
            accepted: 9
        })
    );
    // A later render goes to pod-a and pod-b; pod-c is not even asked any more, however
    // long one waits (any retry timer would fire within the virtual second).
    h.source.apply(service("api", "x"));
    eventually("pod-a and pod-b get the new render", || {
        healthy.deployed().len() == 2 && down.deployed().len() == 2
    })
    .await;
    settle(Duration::from_secs(1)).await;
    assert_eq!(
        newer_leader_seen.attempts().len(),
        2,
        "the fenced deployer made no further attempt: {:?}",
        newer_leader_seen.attempts()
    );
    assert_eq!(newer_leader_seen.deployed().len(), 1);
    assert_eq!(
        newer_leader_seen.deployed()[0].checksum,
        Checksum::of(b"from-the-new-leader")
    );
    h.controller.stop().await;
}

/// A config whose Services are watched with a debounce.
fn debounced_config(debounce: &str) -> String {
    CONFIG.replace("debounce: 0s", &format!("debounce: {debounce}"))
}

#[tokio::test(start_paused = true)]
async fn changes_within_a_watchers_debounce_are_merged_into_one_reconciliation() {
    let h = start_with(
        Setup {
            config: debounced_config("200ms"),
            ..Setup::default()
        }
        .leading(),
    )
    .await;
    eventually("the initial render", || h.pipeline.renders().len() == 1).await;
    settle(Duration::ZERO).await;

    // Three changes 50 ms apart, all within 200 ms of the first.
    h.source.apply(service("one", "x"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.source.apply(service("two", "x"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.source.apply(service("three", "x"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    settle(Duration::ZERO).await;
    assert_eq!(
        h.pipeline.renders().len(),
        1,
        "nothing is rendered before the debounce has passed"
    );

    settle(Duration::from_secs(1)).await;
    // The render runs on its own thread: on a loaded machine it may outlast the settling.
    eventually("the render for the three changes", || {
        h.pipeline.renders().len() >= 2
    })
    .await;
    eventually("its deployment", || h.target.deployed().len() >= 2).await;
    let renders = h.pipeline.renders();
    assert_eq!(
        renders.len(),
        2,
        "the initial render and one for the three changes: {renders:#?}"
    );
    for name in ["one", "two", "three"] {
        assert!(
            renders[1].contains(&format!("backend {name}")),
            "{name} missing from {}",
            renders[1]
        );
    }
    assert_eq!(h.target.deployed().len(), 2, "one deployment for the three");
    h.controller.stop().await;
}

/// A resource source whose stream for `resource` holds the end of its initial list
/// (`InitDone`) back until `release` turns true; every other stream flows at once.
struct HeldBackSource {
    inner: MemorySource,
    resource: &'static str,
    release: watch::Receiver<bool>,
}

impl ResourceSourceFactory for HeldBackSource {
    fn open(&self, resource: &str, watched: &WatchedResource) -> BoxStream<'static, ResourceEvent> {
        let stream = self.inner.open(resource, watched);
        if resource != self.resource {
            return stream;
        }
        let release = self.release.clone();
        stream
            .then(move |event| {
                let mut release = release.clone();
                async move {
                    if matches!(event, ResourceEvent::InitDone) {
                        let _ = release.wait_for(|released| *released).await;
                    }
                    event
                }
            })
            .boxed()
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_rendered_or_deployed_until_every_watcher_has_synced() {
    let config = CONFIG.replace(
        "  haproxyConfig:",
        "    secrets:\n      apiVersion: v1\n      resources: secrets\n      indexBy: [\"metadata.namespace\", \"metadata.name\"]\n      debounce: 0s\n  haproxyConfig:",
    );
    let source = MemorySource::new();
    source.apply(service("web", "initial"));
    source.apply(json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "tls", "namespace": "default"}}));
    let (release, released) = watch::channel(false);
    let h = start_with(
        Setup {
            config,
            resources: Some(Arc::new(HeldBackSource {
                inner: source.clone(),
                resource: "secrets",
                release: released,
            })),
            source,
            ..Setup::default()
        }
        .leading(),
    )
    .await;
    // The services watcher syncs and then sees a change; the secrets one has not synced.
    settle(Duration::from_secs(1)).await;
    h.source.apply(service("api", "x"));
    settle(Duration::from_secs(1)).await;
    assert!(
        !h.controller
            .services
            .introspection
            .state()
            .all_indexes_synced
    );
    assert_eq!(
        h.pipeline.renders().len(),
        0,
        "nothing is rendered before every watcher synced"
    );
    assert!(h.target.attempts().is_empty(), "nothing is deployed either");

    release.send(true).expect("release");
    eventually("the first render", || h.pipeline.renders().len() == 1).await;
    settle(Duration::from_secs(1)).await;
    let renders = h.pipeline.renders();
    assert_eq!(renders.len(), 1, "one render for the sync: {renders:#?}");
    assert!(
        renders[0].contains("backend web") && renders[0].contains("backend api"),
        "the render reads the stores after the change: {}",
        renders[0]
    );
    eventually("the deployment", || h.target.deployed().len() == 1).await;
    h.controller.stop().await;
}

/// Checks that an RFC 3339 time of the published status lies between two Unix times (in
/// seconds, as the status has them).
fn assert_time_between(what: &str, text: Option<&str>, earliest: i64, latest: i64) {
    let text = text.unwrap_or_else(|| panic!("{what} is missing"));
    let at: k8s_openapi::jiff::Timestamp = text
        .parse()
        .unwrap_or_else(|e| panic!("{what} {text:?} is not an RFC 3339 time: {e}"));
    assert!(
        (earliest..=latest).contains(&at.as_second()),
        "{what} {text} is not the time of the deployment"
    );
}

fn unix_now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

#[tokio::test(start_paused = true)]
async fn the_published_haproxycfg_carries_the_render_and_each_instances_deployment_and_errors() {
    let before = unix_now();
    let h = start_with(
        Setup {
            settings: ControllerSettings {
                deploy_backoff_base: Duration::from_millis(50),
                deploy_backoff_max: Duration::from_millis(200),
                ..ControllerSettings::default()
            },
            ..Setup::default()
        }
        .leading(),
    )
    .await;
    eventually("the instance status", || {
        published(&h).is_some_and(|(_, status)| {
            status
                .instances
                .first()
                .is_some_and(|i| i.checksum.is_some())
        })
    })
    .await;
    let after = unix_now();
    let (spec, status) = published(&h).expect("published");
    let deployed = h.target.deployed();
    assert_eq!(deployed.len(), 1);
    assert_eq!(spec.content, h.pipeline.renders()[0]);
    assert_eq!(spec.checksum, format!("sha256:{}", deployed[0].checksum));
    let hex = spec.checksum.strip_prefix("sha256:").expect("sha256:");
    assert!(
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hex}"
    );
    assert_eq!(spec.path, "/etc/haproxy/haproxy.cfg");
    let [pod_a] = status.instances.as_slice() else {
        panic!("one instance: {status:?}");
    };
    assert_eq!(pod_a.name, "pod-a");
    assert_eq!(pod_a.checksum.as_ref(), Some(&spec.checksum));
    assert_time_between("deployedAt", pod_a.deployed_at.as_deref(), before, after);
    assert_eq!(
        pod_a.last_reload_at, pod_a.deployed_at,
        "the recording target reloads for a new config"
    );
    assert_eq!(
        (pod_a.last_error.as_deref(), pod_a.consecutive_errors),
        (None, 0)
    );
    let first_deployment = pod_a.clone();

    // The instance goes down: the new render is published, the instance keeps its last
    // deployment, and every failed attempt counts.
    h.target.set_unreachable(true);
    h.source.apply(service("api", "x"));
    eventually("the failure in the status", || {
        published(&h).is_some_and(|(_, status)| status.instances[0].last_error.is_some())
    })
    .await;
    settle(Duration::ZERO).await;
    let (spec, status) = published(&h).expect("published");
    let renders = h.pipeline.renders();
    assert_eq!(spec.content, renders[renders.len() - 1]);
    assert!(spec.content.contains("backend api"));
    assert_ne!(Some(&spec.checksum), first_deployment.checksum.as_ref());
    let failed = |h: &Harness| {
        h.target
            .attempts()
            .iter()
            .filter(|a| a.result.is_err())
            .count()
    };
    let pod_a = &status.instances[0];
    assert_eq!(
        pod_a.last_error.as_deref(),
        Some("instance unreachable: pod-a is down")
    );
    assert_eq!(pod_a.consecutive_errors as usize, failed(&h));
    assert_eq!(
        pod_a.checksum, first_deployment.checksum,
        "still the old one"
    );
    assert_eq!(pod_a.deployed_at, first_deployment.deployed_at);
    let errors_then = pod_a.consecutive_errors;
    // The retries fail too.
    settle(Duration::from_millis(500)).await;
    let (_, status) = published(&h).expect("published");
    assert_eq!(status.instances[0].consecutive_errors as usize, failed(&h));
    assert!(
        status.instances[0].consecutive_errors > errors_then,
        "{status:?}"
    );

    // Back up: the next retry deploys the new render and clears the errors.
    let recovered = unix_now();
    h.target.set_unreachable(false);
    eventually("the recovery in the status", || {
        published(&h).is_some_and(|(spec, status)| {
            status.instances[0].checksum.as_ref() == Some(&spec.checksum)
        })
    })
    .await;
    let (spec, status) = published(&h).expect("published");
    let pod_a = &status.instances[0];
    assert_eq!(
        spec.checksum,
        format!("sha256:{}", h.target.deployed()[1].checksum)
    );
    assert_eq!(
        (pod_a.last_error.as_deref(), pod_a.consecutive_errors),
        (None, 0)
    );
    assert_time_between(
        "deployedAt",
        pod_a.deployed_at.as_deref(),
        recovered,
        unix_now(),
    );
    h.controller.stop().await;
}
