//! The controller in process, as the controller tests start it: its real actors fed by
//! watch channels the test holds (config, leadership, instances), a resource source the
//! test controls, a pipeline the test picks (often [`RenderOnlyPipeline`]) and an in-memory
//! HAProxyCfg sink. Also the YAML those tests' configs start from ([`config_yaml!`]) and
//! lookups of the running actors and servers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haptor::actors::context::{ControllerSettings, Sources};
use haptor::actors::controller::{Controller, ServerAddresses, start_controller};
use haptor::actors::http::HttpServerMsg;
use haptor::messages::deploy::{FailureStage, RenderFailure, RenderedAndValidated};
use haptor::messages::{Instance, Leadership};
use haptor::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use haptor::pure::pipeline::CompiledConfig;
use haptor::pure::store::StoresSnapshot;
use haptor::seams::InMemorySink;
use haptor::seams::{ReconcilePipeline, ResourceSourceFactory};
use haptor::supervision::SupervisorMsg;
use ractor::{ActorCell, ActorRef};
use tokio::sync::watch;

/// A HAProxyTemplateConfig as YAML text (a `&'static str`): the object `$name` in the
/// namespace `default`, deploying at once (no minimum interval, drift checks hourly),
/// watching Services indexed by namespace and name without debounce, with a haproxy.cfg
/// template of `global` / `maxconn 100` followed by `$template`, whose lines are indented
/// six spaces as the block scalar holding them wants.
macro_rules! config_yaml {
    ($name:literal, $template:literal) => {
        concat!(
            r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: "#,
            $name,
            r#", namespace: default}
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
"#,
            $template
        )
    };
}
pub(crate) use config_yaml;

/// Parses a test config (as the file `test.yaml`).
pub fn config(text: &str) -> Arc<HAProxyTemplateConfig> {
    Arc::new(config_from_yaml("test.yaml", text).expect("test config parses"))
}

/// Renders with the config's templates, skipping validation; first waits while `hang` is
/// set, then sleeps `delay`; counts the renders it started and records every haproxy.cfg
/// it produced.
#[derive(Default)]
pub struct RenderOnlyPipeline {
    pub delay: Duration,
    pub hang: AtomicBool,
    started: AtomicUsize,
    renders: Mutex<Vec<String>>,
}

impl RenderOnlyPipeline {
    /// A pipeline that sleeps `delay` before every render.
    pub fn with_delay(delay: Duration) -> RenderOnlyPipeline {
        RenderOnlyPipeline {
            delay,
            ..RenderOnlyPipeline::default()
        }
    }

    /// How many renders have started (each on a snapshot taken before it started).
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Every haproxy.cfg rendered so far, oldest first.
    pub fn renders(&self) -> Vec<String> {
        self.renders.lock().expect("lock").clone()
    }
}

impl ReconcilePipeline for RenderOnlyPipeline {
    fn run(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<RenderedAndValidated, RenderFailure> {
        self.started.fetch_add(1, Ordering::SeqCst);
        while self.hang.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(self.delay);
        let rendered = compiled
            .render(
                snapshot,
                None,
                haptor::pure::haproxy::HaproxyVersion::DEFAULT,
            )
            .map_err(|e| RenderFailure {
                stage: FailureStage::Render,
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
            semantic_skipped: false,
        })
    }
}

/// What a controller starts from: the first value of each watch channel, where the
/// watchers read resources, the pipeline, the settings and where its HTTP servers listen.
pub struct ControllerSetup {
    pub config: Arc<HAProxyTemplateConfig>,
    pub leadership: Leadership,
    pub instances: Vec<Instance>,
    pub resources: Arc<dyn ResourceSourceFactory>,
    pub pipeline: Arc<dyn ReconcilePipeline>,
    pub settings: ControllerSettings,
    pub addresses: ServerAddresses,
}

/// A started controller and the senders of its watch channels: dropping a sender closes
/// its channel, so a test keeps this for as long as the controller runs.
pub struct RunningController {
    pub controller: Controller,
    pub config: watch::Sender<Option<Arc<HAProxyTemplateConfig>>>,
    pub leadership: watch::Sender<Leadership>,
    pub instances: watch::Sender<Vec<Instance>>,
    /// Where the ConfigPublisher writes HAProxyCfg.
    pub sink: Arc<InMemorySink>,
}

impl ControllerSetup {
    /// Starts the controller (installing the ring crypto provider first, if none is).
    pub async fn start(self) -> RunningController {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (config_tx, config_rx) = watch::channel(Some(self.config));
        let (leader_tx, leader_rx) = watch::channel(self.leadership);
        let (instances_tx, instances_rx) = watch::channel(self.instances);
        let sources = Sources {
            config: config_rx,
            resources: self.resources,
            leadership: leader_rx,
            instances: instances_rx,
            http: std::sync::Arc::new(
                haptor::drivers::http_resource::HttpResourceFetcher::new(std::sync::Arc::new(
                    haptor::drivers::http_resource::NoCredentials,
                ))
                .expect("the HTTP client builds"),
            ),
        };
        let sink = Arc::new(InMemorySink::default());
        let controller = start_controller(
            sources,
            self.pipeline,
            sink.clone(),
            self.settings,
            self.addresses,
            haptor::actors::controller::ControllerEdges::default(),
            None,
        )
        .await
        .expect("the controller starts");
        RunningController {
            controller,
            config: config_tx,
            leadership: leader_tx,
            instances: instances_tx,
            sink,
        }
    }
}

/// Where the controller's HTTP server `name` (a child of the root) listens.
pub async fn server_address(controller: &Controller, name: &str) -> SocketAddr {
    let cell = ractor::call!(controller.root, SupervisorMsg::ChildCell, name.to_string())
        .expect("root answers")
        .expect("server runs");
    ractor::call!(
        ActorRef::<HttpServerMsg>::from(cell),
        HttpServerMsg::LocalAddr
    )
    .expect("server answers")
}

/// Finds a live actor by its registered name anywhere below `root`.
pub fn find_cell(root: &ActorCell, name: &str) -> Option<ActorCell> {
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
