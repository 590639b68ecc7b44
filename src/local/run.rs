//! Running `haptor local DIR`: the manifest folder, an owned haproxy in master-worker mode,
//! the local deploy target and the same actor tree as in a cluster, until Ctrl-C or SIGTERM;
//! then everything stops, haproxy included.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::watch;

use crate::actors::context::{ControllerSettings, FullPipeline, Sources};
use crate::actors::controller::{ServerAddresses, start_controller};
use crate::actors::http::{DEBUG_SERVER_NAME, HttpServerMsg, METRICS_SERVER_NAME};
use crate::actors::introspection::ErrorRecord;
use crate::actors::publisher::InMemorySink;
use crate::actors::sources::MemorySource;
use crate::drivers::local::{HaproxyProcess, LocalTarget, WorkDir};
use crate::local::folder::ManifestFolder;
use crate::messages::{Instance, Leadership};
use crate::output::outln;
use crate::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use crate::supervision::SupervisorMsg;
use crate::telemetry::LogLevelHandle;

/// The Ingress template library `haptor local` uses when the folder has no
/// HAProxyTemplateConfig of its own (`deploy/library/ingress.yaml`).
pub const EMBEDDED_DEFAULT: &str = include_str!("../../deploy/library/ingress.yaml");

/// How often the folder is scanned for changes.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// What `haptor local` was asked to do.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    pub dir: PathBuf,
    pub work_dir: Option<PathBuf>,
    pub metrics_addr: String,
    pub debug_addr: String,
    pub haproxy_bin: String,
    /// Changes the process's log level when a config's `logging.level` does (`None`: the
    /// level stays as it started).
    pub log_level: Option<LogLevelHandle>,
}

/// Why `haptor local` could not run.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{0}")]
    Folder(String),
    #[error("the embedded default config is broken: {0}")]
    EmbeddedDefault(String),
    #[error("could not start haproxy: {0}")]
    Haproxy(String),
    #[error("could not start the controller: {0}")]
    Controller(String),
}

/// The embedded Ingress library as a config.
pub fn embedded_default() -> Result<HAProxyTemplateConfig, LocalError> {
    config_from_yaml("deploy/library/ingress.yaml (embedded)", EMBEDDED_DEFAULT)
        .map_err(|e| LocalError::EmbeddedDefault(e.to_string()))
}

async fn bound_address(
    root: &ActorRef<SupervisorMsg>,
    server: &str,
) -> Option<std::net::SocketAddr> {
    let cell = ractor::call!(root, SupervisorMsg::ChildCell, server.to_string()).ok()??;
    ractor::call!(
        ActorRef::<HttpServerMsg>::from(cell),
        HttpServerMsg::LocalAddr
    )
    .ok()
}

/// Runs until `shutdown` completes.
pub async fn run(
    options: LocalOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), LocalError> {
    if !options.dir.is_dir() {
        return Err(LocalError::Folder(format!(
            "{}: not a folder of manifests",
            options.dir.display()
        )));
    }
    let work_path = options
        .work_dir
        .clone()
        .unwrap_or_else(|| options.dir.join(".haptor"));
    let work_dir = WorkDir::new(&work_path).map_err(|e| LocalError::Folder(e.to_string()))?;

    let memory = MemorySource::new();
    let mut folder = ManifestFolder::new(&options.dir);
    let first = folder.scan(&memory);
    for problem in &first.problems {
        tracing::warn!(%problem, "manifest not loaded");
    }
    let config = match folder.config() {
        Some(config) => config,
        None => {
            tracing::info!(
                "no HAProxyTemplateConfig in the folder; using the embedded Ingress library"
            );
            Arc::new(embedded_default()?)
        }
    };
    let (config_tx, config_rx) = watch::channel(Some(config));

    let mut process = HaproxyProcess::start(&options.haproxy_bin, &work_dir)
        .await
        .map_err(|e| LocalError::Haproxy(e.to_string()))?;
    let target = Arc::new(
        LocalTarget::open("local", work_dir.clone())
            .map_err(|e| LocalError::Haproxy(e.to_string()))?,
    );
    // Every run is a new leadership: its epoch is above any a previous run wrote.
    let epoch = target.accepted_epoch().await + 1;
    let (_leader_tx, leader_rx) = watch::channel(Leadership {
        is_leader: true,
        epoch,
    });
    let (_instances_tx, instances_rx) = watch::channel(vec![Instance {
        name: "local".into(),
        target: target.clone(),
    }]);

    let validator = crate::drivers::haproxy_check::validator(&options.haproxy_bin, 64);
    let sources = Sources {
        config: config_rx,
        resources: Arc::new(memory.clone()),
        leadership: leader_rx,
        instances: instances_rx,
    };
    let addresses = ServerAddresses {
        metrics: Some(options.metrics_addr.clone()),
        debug: Some(options.debug_addr.clone()),
        // The debug server answers the probes too.
        health: None,
        webhook: None,
    };
    let controller = match start_controller(
        sources,
        Arc::new(FullPipeline::new(validator.clone())),
        Arc::new(InMemorySink::default()),
        ControllerSettings {
            // haptor owns this haproxy: it is ready only once haproxy holds the full config.
            ready_requires_deployment: true,
            ..ControllerSettings::default()
        },
        addresses,
        options.log_level.clone(),
    )
    .await
    {
        Ok(controller) => controller,
        Err(e) => {
            let _ = process.stop().await;
            return Err(LocalError::Controller(e));
        }
    };
    let cache = validator.clone();
    controller
        .metrics
        .set_validation_cache_source(Arc::new(move || {
            (cache.cache().hits(), cache.cache().misses())
        }));
    for problem in &first.problems {
        controller
            .services
            .introspection
            .record_error(ErrorRecord::new("manifest", problem.to_string()));
    }

    let metrics = bound_address(&controller.root, METRICS_SERVER_NAME).await;
    let debug = bound_address(&controller.root, DEBUG_SERVER_NAME).await;
    outln!(
        "haptor local: watching {} (haproxy work dir {})",
        options.dir.display(),
        work_path.display()
    );
    if let Some(addr) = metrics {
        outln!("  metrics:   http://{addr}/metrics");
    }
    if let Some(addr) = debug {
        outln!(
            "  debug:     http://{addr}/debug/actors  http://{addr}/debug/vars/errors  http://{addr}/healthz  http://{addr}/readyz"
        );
    }
    outln!(
        "  haproxy:   master pid {} (listening as the rendered haproxy.cfg says; see /debug/vars/rendered)",
        process.master_pid()
    );

    tokio::pin!(shutdown);
    let mut ticker = tokio::time::interval(SCAN_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut printed_binds = false;
    let mut printed_ready = false;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = ticker.tick() => {}
        }
        if !process.is_running() {
            tracing::warn!("haproxy exited; starting it again on the last deployed files");
            match HaproxyProcess::start(&options.haproxy_bin, &work_dir).await {
                Ok(restarted) => process = restarted,
                Err(e) => {
                    tracing::error!(error = %e, "haproxy did not start; retrying");
                    controller
                        .services
                        .introspection
                        .record_error(ErrorRecord::new("haproxy", e.to_string()));
                }
            }
        }
        let report = folder.scan(&memory);
        for problem in &report.problems {
            tracing::warn!(%problem, "manifest not loaded; its last good content stays");
            controller
                .services
                .introspection
                .record_error(ErrorRecord::new("manifest", problem.to_string()));
        }
        if report.config_changed
            && let Some(config) = folder.config()
        {
            let _ = config_tx.send(Some(config));
        }
        if !printed_ready && controller.services.readiness.is_ready() {
            printed_ready = true;
            outln!(
                "haptor local: ready (every watched resource synced and haproxy took the configuration; /readyz answers 200)"
            );
        }
        if !printed_binds
            && let Some(rendered) = controller
                .services
                .introspection
                .state()
                .last_deployed_checksum
                .as_ref()
                .and_then(|_| controller.services.introspection.rendered())
        {
            printed_binds = true;
            if let Ok(binds) = crate::pure::haproxy::view::frontend_binds(&rendered.haproxy_cfg) {
                for (frontend, address) in binds {
                    outln!("  frontend {frontend}: {address}");
                }
            }
        }
    }
    outln!("haptor local: stopping");
    controller.stop().await;
    process
        .stop()
        .await
        .map_err(|e| LocalError::Haproxy(e.to_string()))?;
    Ok(())
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
