//! What the assembled controller does that no single actor shows: readiness, stall
//! detection of a real hang, deployments after an iteration rebuild, a restarted watcher's
//! relist, restart metrics, deployment timeouts and per-instance pacing. The controller runs
//! with its real actors, a resource source the test controls, recording deploy targets (or
//! targets that hang) and a render-only pipeline; the debug server answers over real HTTP.

use crate::controller;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use haptor::actors::context::ControllerSettings;
use haptor::actors::controller::ServerAddresses;
use haptor::actors::http::DEBUG_SERVER_NAME;
use haptor::messages::{DeploySchedulerMsg, Instance, Leadership, ResourceEvent, WatcherMsg};
use haptor::pure::config::WatchedResource;
use haptor::pure::deploy::{
    DeployError, DeployOutcome, DeployRequest, DeployTarget, RecordingTarget,
};
use haptor::pure::rendered::Checksum;
use haptor::pure::store::CompactObject;
use haptor::seams::{ReconcilePipeline, ResourceSourceFactory};
use ractor::ActorRef;
use serde_json::{Value, json};

use controller::{
    ControllerSetup, RenderOnlyPipeline, RunningController, config, config_yaml, find_cell,
    server_address,
};

const CONFIG: &str = config_yaml!(
    "test",
    r#"      {{#resources "services" as |svc|}}
      backend {{svc.metadata.name}}
      {{/resources}}
"#
);

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default"}})
}

/// A source whose objects the test sets without telling open streams: a change made here
/// reaches the controller only through the next list (a watcher's restart).
#[derive(Clone, Default)]
struct ListOnlySource {
    objects: Arc<Mutex<Vec<Value>>>,
}

impl ResourceSourceFactory for ListOnlySource {
    fn open(&self, _: &str, _: &WatchedResource) -> BoxStream<'static, ResourceEvent> {
        let objects = self.objects.lock().expect("lock").clone();
        let mut events = vec![ResourceEvent::InitStart];
        events.extend(
            objects
                .into_iter()
                .map(|o| ResourceEvent::InitApply(CompactObject::from(o))),
        );
        events.push(ResourceEvent::InitDone);
        futures::stream::iter(events)
            .chain(futures::stream::pending())
            .boxed()
    }
}

/// A target whose deployments never finish while `hang` is set (it counts attempts).
#[derive(Debug, Default)]
struct HangingTarget {
    hang: AtomicBool,
    attempts: Mutex<Vec<u64>>,
    inner: RecordingTarget,
}

impl DeployTarget for HangingTarget {
    fn name(&self) -> &str {
        "pod-hang"
    }

    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        Box::pin(async move {
            self.attempts.lock().expect("lock").push(request.generation);
            while self.hang.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.inner.deploy(request).await
        })
    }

    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        self.inner.deployed_checksum()
    }
}

async fn start(
    resources: Arc<dyn ResourceSourceFactory>,
    pipeline: Arc<dyn ReconcilePipeline>,
    targets: Vec<(&str, Arc<dyn DeployTarget>)>,
    settings: ControllerSettings,
    config_text: &str,
) -> RunningController {
    let instances = targets
        .into_iter()
        .map(|(name, target)| Instance {
            name: name.into(),
            target,
        })
        .collect();
    ControllerSetup {
        config: config(config_text),
        leadership: Leadership {
            is_leader: true,
            epoch: 1,
        },
        instances,
        resources,
        pipeline,
        settings,
        addresses: ServerAddresses {
            metrics: None,
            debug: Some("127.0.0.1:0".into()),
            health: None,
            webhook: None,
        },
    }
    .start()
    .await
}

/// Polls `check` every 10 ms for at least 30 s: only a failing test waits that long.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn debug_json(h: &RunningController, path: &str) -> (u16, Value) {
    let addr = server_address(&h.controller, DEBUG_SERVER_NAME).await;
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("GET");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

fn recording(name: &str) -> Arc<RecordingTarget> {
    Arc::new(RecordingTarget::new(name))
}

#[tokio::test]
async fn readyz_turns_ready_once_every_watched_resource_synced_and_every_instance_deployed() {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let down = recording("pod-a");
    down.set_unreachable(true);
    let settings = ControllerSettings {
        ready_requires_deployment: true,
        deploy_backoff_base: Duration::from_millis(20),
        deploy_backoff_max: Duration::from_millis(50),
        ..ControllerSettings::default()
    };
    let h = start(
        Arc::new(source.clone()),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", down.clone())],
        settings,
        CONFIG,
    )
    .await;
    // Synced, but the instance has not taken the config.
    let mut last = Value::Null;
    for _ in 0..3000 {
        let (status, body) = debug_json(&h, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        if body["waiting_for"]
            .to_string()
            .contains("first deployment to instances: pod-a")
        {
            last = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(last["waiting_for"].to_string().contains("pod-a"), "{last}");
    down.set_unreachable(false);
    let mut ready = false;
    for _ in 0..3000 {
        if debug_json(&h, "/readyz").await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready, "ready once pod-a took the config");
    h.controller.stop().await;
}

#[tokio::test]
async fn a_deployment_to_an_unreachable_instance_is_counted_and_reported_under_its_cause() {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let down = recording("pod-a");
    down.set_unreachable(true);
    let settings = ControllerSettings {
        deploy_backoff_base: Duration::from_millis(20),
        deploy_backoff_max: Duration::from_millis(50),
        ..ControllerSettings::default()
    };
    let h = start(
        Arc::new(source.clone()),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", down.clone())],
        settings,
        CONFIG,
    )
    .await;
    let series = "haptor_deployment_errors_total{error=\"unreachable\",instance=\"pod-a\"} ";
    eventually("the failed deployment counted under its cause", || {
        h.controller
            .metrics
            .encode_text()
            .is_ok_and(|text| text.contains(series))
    })
    .await;
    // The event keeps the error's message for /debug/events and the logs.
    let mut failed = Value::Null;
    for _ in 0..3000 {
        let (_, events) = debug_json(&h, "/debug/events").await;
        if let Some(event) = events
            .as_array()
            .and_then(|events| events.iter().find(|e| e["event"] == "deployment_failed"))
        {
            failed = event.clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(failed["instance"], "pod-a", "{failed}");
    assert_eq!(
        failed["error"], "instance unreachable: pod-a is down",
        "{failed}"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn healthz_names_the_coordinator_while_a_render_hangs_and_a_deployer_whose_deploy_hangs() {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let pipeline = Arc::new(RenderOnlyPipeline::default());
    let hanging = Arc::new(HangingTarget::default());
    let settings = ControllerSettings {
        stall_threshold: Duration::from_millis(200),
        ..ControllerSettings::default()
    };
    let h = start(
        Arc::new(source.clone()),
        pipeline.clone(),
        vec![("pod-hang", hanging.clone())],
        settings,
        CONFIG,
    )
    .await;
    eventually("the first deployment", || {
        !hanging.inner.deployed().is_empty()
    })
    .await;
    assert_eq!(debug_json(&h, "/healthz").await.0, 200);

    // A render that hangs on the render thread.
    pipeline.hang.store(true, Ordering::SeqCst);
    source.apply(service("api"));
    let mut body = Value::Null;
    for _ in 0..3000 {
        let (status, json) = debug_json(&h, "/healthz").await;
        if status == 503 {
            body = json;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(body["stalled"][0]["actor"], "coordinator", "{body}");
    pipeline.hang.store(false, Ordering::SeqCst);

    // The render finishes; its deployment hangs.
    hanging.hang.store(true, Ordering::SeqCst);
    let mut body = Value::Null;
    for _ in 0..3000 {
        let (status, json) = debug_json(&h, "/healthz").await;
        if status == 503 && json["stalled"].to_string().contains("deployer-pod-hang") {
            body = json;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        body["stalled"].to_string().contains("deployer-pod-hang"),
        "{body}"
    );
    hanging.hang.store(false, Ordering::SeqCst);
    h.controller.stop().await;
}

#[tokio::test]
async fn the_first_render_of_a_rebuilt_iteration_is_deployed_to_the_targets_of_the_old_one() {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let target = recording("pod-a");
    let h = start(
        Arc::new(source.clone()),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", target.clone())],
        ControllerSettings::default(),
        CONFIG,
    )
    .await;
    eventually("the first deployment", || target.deployed().len() == 1).await;
    // More renders in the first iteration, so its generations run ahead of a fresh count.
    for name in ["a", "b", "c"] {
        source.apply(service(name));
    }
    eventually("the later renders deployed", || {
        target.deployed().len() >= 2
            && target
                .deployed()
                .last()
                .is_some_and(|r| r.rendered.haproxy_cfg.contains("backend c"))
    })
    .await;
    let with_secrets = CONFIG
        .replace(
            "  haproxyConfig:",
            "    secrets:\n      apiVersion: v1\n      resources: secrets\n      indexBy: [\"metadata.namespace\", \"metadata.name\"]\n  haproxyConfig:",
        )
        .replace("maxconn 100", "maxconn 200");
    h.config.send(Some(config(&with_secrets))).expect("send");
    eventually("the rebuilt iteration's render deployed", || {
        target
            .deployed()
            .last()
            .is_some_and(|r| r.rendered.haproxy_cfg.contains("maxconn 200"))
    })
    .await;
    let generations: Vec<u64> = target.deployed().iter().map(|r| r.generation).collect();
    assert!(
        generations.windows(2).all(|w| w[0] < w[1]),
        "generations keep growing across iterations: {generations:?}"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn a_restarted_watcher_whose_relist_differs_from_its_store_triggers_a_render() {
    let source = ListOnlySource::default();
    source.objects.lock().expect("lock").push(service("web"));
    let pipeline = Arc::new(RenderOnlyPipeline::default());
    let target = recording("pod-a");
    let h = start(
        Arc::new(source.clone()),
        pipeline.clone(),
        vec![("pod-a", target.clone())],
        ControllerSettings::default(),
        CONFIG,
    )
    .await;
    eventually("the initial render", || pipeline.renders().len() == 1).await;
    // Changed at the source while the watch is broken: no event reaches the watcher.
    source
        .objects
        .lock()
        .expect("lock")
        .push(service("while-down"));
    let watcher =
        find_cell(&h.controller.root.get_cell(), "watcher-services").expect("the watcher runs");
    let _ = ActorRef::<WatcherMsg>::from(watcher).cast(WatcherMsg::SourceEnded);
    eventually("a render with the object listed after the restart", || {
        pipeline
            .renders()
            .iter()
            .any(|r| r.contains("backend while-down"))
    })
    .await;
    eventually("that render deployed", || {
        target
            .deployed()
            .last()
            .is_some_and(|r| r.rendered.haproxy_cfg.contains("backend while-down"))
    })
    .await;
    // The restart is counted by the supervisor, through an event the Metrics actor takes
    // from its queue in its own time: the render can be deployed before it is counted.
    let series = "haptor_actor_restarts_total{actor=\"watcher-services\"} ";
    eventually("the restart counted", || {
        h.controller
            .metrics
            .encode_text()
            .is_ok_and(|text| text.contains(series))
    })
    .await;
    let metrics = h.controller.metrics.encode_text().expect("metrics");
    assert!(
        metrics.contains("haptor_actor_restarts_total{actor=\"watcher-services\"} 1"),
        "{metrics}"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn a_listed_object_whose_read_field_has_the_wrong_type_is_left_out_and_named_in_debug_vars_errors()
 {
    // What `haptor run`'s watchers do with an object of the wrong shape (an API server
    // refuses one, so the source here stands in for it): the same store check as the folder's.
    let source = ListOnlySource::default();
    source.objects.lock().expect("lock").extend([
        service("web"),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "typed", "namespace": "default"},
               "spec": {"ports": [{"port": "80"}]}}),
    ]);
    let pipeline = Arc::new(RenderOnlyPipeline::default());
    let h = start(
        Arc::new(source),
        pipeline.clone(),
        vec![("pod-a", recording("pod-a"))],
        ControllerSettings::default(),
        CONFIG,
    )
    .await;
    eventually("the initial render", || pipeline.renders().len() == 1).await;
    let render = pipeline.renders().remove(0);
    assert!(render.contains("backend web"), "{render}");
    assert!(!render.contains("backend typed"), "left out: {render}");
    let (_, errors) = debug_json(&h, "/debug/vars/errors").await;
    let record = errors
        .as_array()
        .and_then(|errors| errors.iter().find(|e| e["source"] == "watch:services"))
        .cloned()
        .unwrap_or_else(|| panic!("no error of the services watch: {errors}"));
    assert_eq!(
        record["message"],
        "Service default/typed: spec.ports[0].port: expected an integer, got the string \"80\" (write 80 without quotes); the object is left out"
    );
    h.controller.stop().await;
}

#[tokio::test]
async fn reloads_are_paced_per_instance_and_a_shorter_interval_applies_to_a_waiting_instance_at_once()
 {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let first = recording("pod-a");
    let paced = CONFIG.replace("minDeploymentInterval: 0s", "minDeploymentInterval: 1h");
    let h = start(
        Arc::new(source.clone()),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", first.clone())],
        ControllerSettings::default(),
        &paced,
    )
    .await;
    eventually("the first deployment", || first.deployed().len() == 1).await;
    // pod-b joins already running that config: its first deployment changes nothing and
    // reloads nothing, while pod-a's first deployment was a reload.
    let second = recording("pod-b");
    second.tamper(&first.deployed()[0].checksum);
    h.instances
        .send(vec![
            Instance {
                name: "pod-a".into(),
                target: first.clone(),
            },
            Instance {
                name: "pod-b".into(),
                target: second.clone(),
            },
        ])
        .expect("send");
    eventually("pod-b's first deployment", || second.deployed().len() == 1).await;

    // A new backend needs a reload: pod-a reloaded within the hour and waits; pod-b, paced
    // on its own, takes it at once.
    source.apply(service("more"));
    eventually("pod-b deployed", || {
        second
            .deployed()
            .last()
            .is_some_and(|r| r.rendered.haproxy_cfg.contains("backend more"))
    })
    .await;
    let scheduler = || {
        find_cell(&h.controller.root.get_cell(), "deploy-scheduler")
            .map(ActorRef::<DeploySchedulerMsg>::from)
            .expect("the scheduler runs")
    };
    let waiting = ractor::call!(scheduler(), DeploySchedulerMsg::Waiting).expect("answers");
    assert_eq!(waiting, vec!["pod-a".to_string()]);
    assert_eq!(first.deployed().len(), 1, "pod-a waits");
    assert_eq!(
        h.controller.services.introspection.state().paced,
        vec!["pod-a".to_string()],
        "/debug/vars/state names the paced instance"
    );

    // minDeploymentInterval shortened in place: pod-a gets the latest render now.
    h.config
        .send(Some(config(&CONFIG.replace(
            "minDeploymentInterval: 0s",
            "minDeploymentInterval: 10ms",
        ))))
        .expect("send");
    eventually("pod-a deployed after the interval changed", || {
        first
            .deployed()
            .last()
            .is_some_and(|r| r.rendered.haproxy_cfg.contains("backend more"))
    })
    .await;
    assert!(h.controller.services.introspection.state().paced.is_empty());
    h.controller.stop().await;
}

const TWO_INSTANCES: &str = config_yaml!(
    "test",
    r#"      defaults
        mode http
        timeout connect 1s
        timeout client 5s
        timeout server 5s
      frontend fe
        # Relative to each haproxy's working directory: its own work dir.
        bind unix@fe.sock
        default_backend be
      backend be
      {{#resources "services" as |svc|}}
        server {{svc.metadata.name}} 127.0.0.1:{{svc.metadata.annotations.port}}
      {{/resources}}
"#
);

/// A backend answering every request with its name.
fn http_backend(name: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let body = format!("hello from {name}\n");
            let _ = write!(
                stream,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// GET / through a frontend on a unix socket; the body, if anything answered.
fn get_unix(socket: &std::path::Path) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split("\r\n\r\n").nth(1).map(String::from)
}

#[tokio::test]
async fn two_real_haproxy_instances_are_deployed_at_once_and_both_follow_a_change() {
    use haptor::drivers::local::{HaproxyProcess, LocalTarget, WorkDir};
    use haptor::drivers::pipeline::FullPipeline;

    let haproxy = haptor::drivers::haproxy_check::haproxy_binary();
    let (first, second) = (http_backend("first"), http_backend("second"));
    let source = haptor::drivers::memory_source::MemorySource::new();
    let with_port = |port: u16| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": "default",
                            "annotations": {"port": port.to_string()}}})
    };
    source.apply(with_port(first));
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("tmp")).collect();
    let mut processes = Vec::new();
    let mut instances: Vec<(String, Arc<dyn DeployTarget>)> = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let work = WorkDir::new(dir.path()).expect("work dir");
        processes.push(
            HaproxyProcess::start(&haproxy, &work)
                .await
                .expect("haproxy starts"),
        );
        let name = format!("haproxy-{i}");
        let target = LocalTarget::open(name.clone(), work).expect("target");
        instances.push((name, Arc::new(target)));
    }
    let targets: Vec<(&str, Arc<dyn DeployTarget>)> = instances
        .iter()
        .map(|(name, target)| (name.as_str(), Arc::clone(target)))
        .collect();
    let h = start(
        Arc::new(source.clone()),
        Arc::new(FullPipeline::new(
            haptor::drivers::haproxy_check::validator(&haproxy, 8),
        )),
        targets,
        ControllerSettings::default(),
        TWO_INSTANCES,
    )
    .await;
    let sockets: Vec<std::path::PathBuf> = dirs.iter().map(|d| d.path().join("fe.sock")).collect();
    for socket in &sockets {
        let mut answer = None;
        for _ in 0..3000 {
            answer = get_unix(socket);
            if answer.as_deref() == Some("hello from first\n") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(answer.as_deref(), Some("hello from first\n"), "{socket:?}");
    }
    // One change reaches both instances.
    source.apply(with_port(second));
    for socket in &sockets {
        let mut answer = None;
        for _ in 0..3000 {
            answer = get_unix(socket);
            if answer.as_deref() == Some("hello from second\n") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(answer.as_deref(), Some("hello from second\n"), "{socket:?}");
    }
    h.controller.stop().await;
    for mut process in processes {
        process.stop().await.expect("haproxy stops");
    }
}

#[tokio::test]
async fn the_published_haproxycfg_lists_every_deployed_auxiliary_file_with_path_checksum_and_size()
{
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let target = recording("pod-a");
    let with_map = CONFIG.replace(
        "  haproxyConfig:",
        "  maps:\n    hosts.map:\n      template: |\n        {{#resources \"services\" as |svc|}}\n        {{svc.metadata.name}}.example {{svc.metadata.name}}\n        {{/resources}}\n  haproxyConfig:",
    );
    let h = start(
        Arc::new(source.clone()),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", target.clone())],
        ControllerSettings::default(),
        &with_map,
    )
    .await;
    eventually("the first deployment", || target.deployed().len() == 1).await;
    let deployed = target.deployed()[0].rendered.clone();
    let (path, map) = deployed.aux_files.iter().next().expect("the map rendered");
    let mut published = None;
    for _ in 0..3000 {
        published = h.sink.last.lock().expect("lock").clone();
        if published.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (spec, _) = published.expect("published");
    let [entry] = spec.auxiliary_files.maps.as_slice() else {
        panic!("one map: {:?}", spec.auxiliary_files);
    };
    assert_eq!(entry.name, "hosts.map");
    assert_eq!(entry.path, format!("/etc/haproxy/{path}"));
    assert_eq!(entry.size, map.content.len() as u64);
    use sha2::Digest;
    let digest = sha2::Sha256::digest(map.content.as_bytes());
    assert_eq!(
        entry.checksum,
        format!("sha256:{}", haptor::pure::rendered::hex(&digest))
    );
    h.controller.stop().await;
}

/// A source whose `secrets` list never completes: a watcher of it never syncs.
#[derive(Clone)]
struct SecretsNeverSync(haptor::drivers::memory_source::MemorySource);

impl ResourceSourceFactory for SecretsNeverSync {
    fn open(&self, resource: &str, watched: &WatchedResource) -> BoxStream<'static, ResourceEvent> {
        if resource == "secrets" {
            futures::stream::iter(vec![ResourceEvent::InitStart])
                .chain(futures::stream::pending())
                .boxed()
        } else {
            self.0.open(resource, watched)
        }
    }
}

#[tokio::test]
async fn readiness_holds_through_a_rebuild_whose_new_watcher_has_not_synced_and_names_it() {
    let source = haptor::drivers::memory_source::MemorySource::new();
    source.apply(service("web"));
    let target = recording("pod-a");
    let settings = ControllerSettings {
        ready_requires_deployment: true,
        ..ControllerSettings::default()
    };
    let h = start(
        Arc::new(SecretsNeverSync(source.clone())),
        Arc::new(RenderOnlyPipeline::default()),
        vec![("pod-a", target.clone())],
        settings,
        CONFIG,
    )
    .await;
    let mut status = 0;
    for _ in 0..3000 {
        status = debug_json(&h, "/readyz").await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, 200, "ready before the rebuild");
    let with_secrets = CONFIG.replace(
        "  haproxyConfig:",
        "    secrets:\n      apiVersion: v1\n      resources: secrets\n      indexBy: [\"metadata.namespace\", \"metadata.name\"]\n  haproxyConfig:",
    );
    h.config.send(Some(config(&with_secrets))).expect("send");
    let mut body = Value::Null;
    for _ in 0..3000 {
        let (status, json) = debug_json(&h, "/readyz").await;
        assert_eq!(status, 200, "readiness dropped during the rebuild: {json}");
        if json["waiting_for"].to_string().contains("secrets") {
            body = json;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        body["waiting_for"].to_string().contains("secrets"),
        "the new iteration's unsynced watcher is named: {body}"
    );
    h.controller.stop().await;
}
