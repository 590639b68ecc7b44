//! Running `haptor local DIR`: the manifest folder (watched with inotify and scanned as
//! `local::watch` decides), an owned haproxy in master-worker mode, the local deploy target
//! and the same actor tree as in a cluster, until Ctrl-C or SIGTERM; then everything stops,
//! haproxy included.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;
use tokio::sync::watch;

use crate::actors::context::{ControllerSettings, Sources};
use crate::actors::controller::{ServerAddresses, start_controller};
use crate::actors::http::{DEBUG_SERVER_NAME, HttpServerMsg, METRICS_SERVER_NAME};
use crate::drivers::local::{HaproxyProcess, LocalTarget, WorkDir};
use crate::drivers::memory_source::MemorySource;
use crate::drivers::pipeline::FullPipeline;
use crate::local::folder::ManifestFolder;
use crate::local::watch::{
    FolderWatch, SAFETY_SCAN_INTERVAL, SCAN_INTERVAL, Scan, ScanSchedule, Signal, Wanted,
};
use crate::messages::{Instance, Leadership};
use crate::observability::introspection::{ErrorRecord, Introspection};
use crate::output::outln;
use crate::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use crate::pure::manifests::ManifestError;
use crate::pure::watched_kinds::WatchedKinds;
use crate::seams::InMemorySink;
use crate::supervision::SupervisorMsg;
use crate::telemetry::LogLevelHandle;

/// The Ingress template library `haptor local` uses when the folder has no
/// HAProxyTemplateConfig of its own (`deploy/library/ingress.yaml`).
pub const EMBEDDED_DEFAULT: &str = include_str!("../../deploy/library/ingress.yaml");

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
    /// The default certificate's Secret (`NAMESPACE`, `NAME`), generated once into the work
    /// directory and read with the folder; `None` for none.
    pub default_certificate: Option<(String, String)>,
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
    /// The actor tree stopped without being asked to (a restart storm escalated to it).
    #[error("{0}")]
    TreeStopped(&'static str),
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
    if let Some((namespace, name)) = &options.default_certificate {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or_default();
        match crate::drivers::default_certificate::ensure_local_file(
            &work_path, namespace, name, now,
        ) {
            Ok(file) => folder = folder.with_extra_file(file),
            Err(problem) => tracing::warn!(%problem, "no default certificate"),
        }
    }
    // Watched before the first scan, so no change falls between the two.
    let mut watch = watch_folder(&options.dir, work_dir.root());
    let first = folder.scan(&memory);
    let mut schedule = ScanSchedule::new(watch.is_some(), Instant::now(), folder.needs_rescan());
    for problem in &first.problems {
        tracing::warn!(%problem, "manifest not loaded");
    }
    // Parsed once: it is also what the folder falls back to when its own config goes.
    let embedded = Arc::new(embedded_default()?);
    let config = match folder.config() {
        Some(config) => config,
        None => {
            tracing::info!(
                "no HAProxyTemplateConfig in the folder; using the embedded Ingress library"
            );
            Arc::clone(&embedded)
        }
    };
    let mut unwatched = UnwatchedReport::default();
    let mut current_config = Arc::clone(&config);
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
        http: Arc::new(
            crate::drivers::http_resource::HttpResourceFetcher::new(Arc::new(
                crate::drivers::http_resource::FileCredentials {
                    base: options.dir.clone(),
                },
            ))
            .map_err(|e| LocalError::Controller(format!("the HTTP resource client: {e}")))?,
        ),
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
        crate::actors::controller::ControllerEdges::default(),
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
            .record_error(manifest_error(problem));
    }
    unwatched.report(&folder, &current_config, &controller.services.introspection);

    let metrics = bound_address(&controller.root, METRICS_SERVER_NAME).await;
    let debug = bound_address(&controller.root, DEBUG_SERVER_NAME).await;
    outln!(
        "haptor local: watching {} ({}; haproxy work dir {})",
        options.dir.display(),
        if schedule.watching() {
            "with inotify".to_string()
        } else {
            format!("polled every {} ms", SCAN_INTERVAL.as_millis())
        },
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
    // Ticks a socket has been seen missing; below zero after a failed replacement, so the
    // next attempt waits about two seconds.
    let mut missing_ticks = 0i32;
    let mut tree_stopped = false;
    loop {
        let wake = tokio::select! {
            () = &mut shutdown => break,
            () = controller.stopped() => {
                tree_stopped = true;
                break;
            }
            _ = ticker.tick() => None,
            signal = next_signal(&mut watch) => Some(signal),
        };
        let scan = match wake {
            Some(signal) => {
                let wanted = match signal {
                    Signal::Change(wanted) => wanted,
                    Signal::Failed(why) => {
                        warn_polled(&options.dir, &why);
                        watch = None;
                        schedule.watch_lost();
                        Wanted::NOW
                    }
                };
                schedule.on_change(wanted).then_some(Scan::ForChange)
            }
            None => {
                supervise_haproxy(
                    &mut process,
                    &mut missing_ticks,
                    &options.haproxy_bin,
                    &work_dir,
                    &target,
                    &controller.services.introspection,
                )
                .await;
                schedule.on_tick(Instant::now()).then_some(Scan::Timed)
            }
        };
        if let Some(scan) = scan {
            let report = match scan {
                Scan::Timed => folder.scan(&memory),
                Scan::ForChange => folder.scan_for_change(&memory),
            };
            let introspection = &controller.services.introspection;
            for file in &report.resolved {
                introspection.resolve_errors_about(
                    &file.display().to_string(),
                    "a later scan read it without problems (or it is gone)",
                );
            }
            for problem in &report.problems {
                tracing::warn!(%problem, "manifest not loaded; its last good content stays");
                introspection.record_error(manifest_error(problem));
            }
            if report.config_changed {
                let config = folder.config().unwrap_or_else(|| {
                    tracing::info!(
                        "the folder holds no HAProxyTemplateConfig any more; using the embedded Ingress library"
                    );
                    Arc::clone(&embedded)
                });
                current_config = Arc::clone(&config);
                let _ = config_tx.send(Some(config));
            }
            if report.applied > 0 || report.deleted > 0 || report.config_changed {
                unwatched.report(&folder, &current_config, &controller.services.introspection);
            }
            let rewatch = schedule.scanned(
                scan,
                Instant::now(),
                folder.needs_rescan(),
                folder.readable(),
            );
            if rewatch {
                // The folder went away and is back: its watch went with it. The old one
                // stops before the new one starts.
                drop(watch.take());
                watch = watch_folder(&options.dir, work_dir.root());
                if watch.is_none() {
                    schedule.watch_lost();
                }
            }
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
    if tree_stopped {
        return Err(LocalError::TreeStopped(
            crate::actors::controller::TREE_STOPPED,
        ));
    }
    Ok(())
}

/// Watches the folder with inotify, or says why it is polled instead.
fn watch_folder(dir: &Path, work_dir: &Path) -> Option<FolderWatch> {
    match FolderWatch::start(dir, work_dir) {
        Ok(watch) => {
            tracing::info!(
                folder = %dir.display(),
                "the folder is watched with inotify: a change is read at once, and the folder is scanned every {} s besides",
                SAFETY_SCAN_INTERVAL.as_secs()
            );
            Some(watch)
        }
        Err(error) => {
            warn_polled(dir, &crate::local::watch::describe(&error));
            None
        }
    }
}

fn warn_polled(dir: &Path, why: &str) {
    tracing::warn!(
        folder = %dir.display(),
        error = %why,
        "the folder cannot be watched with inotify, so it is polled every {} ms instead",
        SCAN_INTERVAL.as_millis()
    );
}

/// The watch's next signal; never, without a watch.
async fn next_signal(watch: &mut Option<FolderWatch>) -> Signal {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// On each tick: starts haproxy again if it exited, and replaces one whose socket is gone.
async fn supervise_haproxy(
    process: &mut HaproxyProcess,
    missing_ticks: &mut i32,
    haproxy_bin: &str,
    work_dir: &WorkDir,
    target: &LocalTarget,
    introspection: &Introspection,
) {
    if !process.is_running() {
        tracing::warn!("haproxy exited; starting it again on the last deployed files");
        introspection.record_error(ErrorRecord::new(
            "haproxy",
            format!(
                "haproxy exited (master pid {}); starting it again on the last deployed files",
                process.master_pid()
            ),
        ));
        *missing_ticks = 0;
        match HaproxyProcess::start(haproxy_bin, work_dir).await {
            Ok(restarted) => *process = restarted,
            Err(e) => {
                tracing::error!(error = %e, "haproxy did not start; retrying");
                introspection.record_error(ErrorRecord::new("haproxy", e.to_string()));
            }
        }
    }
    // A socket haptor reaches haproxy through was deleted (or the whole work directory
    // with it): the running haproxy serves on, but no deployment can reach it, and only a
    // new process binds the sockets again. Seen on two ticks in a row, so a socket being
    // replaced is not taken for a missing one.
    match missing_socket(work_dir) {
        Some(socket) if process.is_running() => {
            *missing_ticks += 1;
            if *missing_ticks >= 2
                && replace_unreachable(
                    process,
                    &socket,
                    haproxy_bin,
                    work_dir,
                    target,
                    introspection,
                )
                .await
            {
                *missing_ticks = 0;
            } else if *missing_ticks >= 2 {
                *missing_ticks = -18;
            }
        }
        _ => *missing_ticks = 0,
    }
}

/// A manifest problem as `/debug/vars/errors` holds it: about its file, so a later scan
/// that reads the file without problems marks it resolved.
fn manifest_error(problem: &ManifestError) -> ErrorRecord {
    ErrorRecord::new("manifest", problem.to_string()).about(problem.file.display().to_string())
}

/// Tells the user, once per object, about objects in the folder the config does not watch
/// (a kind it names no watched resource for, or a typo in `kind` or `apiVersion`, with the
/// closest kind it watches): they are held, like a cluster holds them, and no template sees
/// them.
#[derive(Default)]
struct UnwatchedReport {
    reported: std::collections::BTreeSet<String>,
}

impl UnwatchedReport {
    fn report(
        &mut self,
        folder: &ManifestFolder,
        config: &HAProxyTemplateConfig,
        introspection: &Introspection,
    ) {
        let found = folder.unwatched(&WatchedKinds::of(&config.spec));
        let now: std::collections::BTreeSet<String> =
            found.iter().map(|(object, _)| object.clone()).collect();
        for (object, problem) in found {
            if self.reported.contains(&object) {
                continue;
            }
            tracing::warn!(%problem, "object not watched");
            introspection.record_error(
                ErrorRecord::new("manifest", problem.to_string()).about(unwatched_subject(&object)),
            );
        }
        // An object watched again (the config changed), or removed, is told of again when
        // it is unwatched again; what was told of it is resolved.
        for object in self.reported.difference(&now) {
            introspection.resolve_errors_about(
                &unwatched_subject(object),
                "the object is read by the config now, or gone",
            );
        }
        self.reported = now;
    }
}

fn unwatched_subject(object: &str) -> String {
    format!("not read: {object}")
}

/// The master or runtime socket of the work directory, when it is gone.
fn missing_socket(work_dir: &WorkDir) -> Option<PathBuf> {
    [work_dir.master_socket(), work_dir.runtime_socket()]
        .into_iter()
        .find(|socket| !socket.exists())
}

/// Replaces a running haproxy whose `socket` is gone: writes the last deployment's files
/// back if the work directory went with it, starts a new haproxy on them beside the old one
/// (its listeners share the ports) and stops the old one gracefully, so no connection is
/// refused meanwhile. Returns whether the new one runs. While the work directory's parent
/// (the manifest folder, for the default work directory) is gone too, it waits: creating it
/// would bring back an empty manifest folder, read as every object deleted.
async fn replace_unreachable(
    process: &mut HaproxyProcess,
    socket: &Path,
    haproxy_bin: &str,
    work_dir: &WorkDir,
    target: &LocalTarget,
    introspection: &Introspection,
) -> bool {
    let root = work_dir.root();
    if !root.exists() && !root.parent().is_some_and(Path::exists) {
        tracing::debug!(
            work_dir = %root.display(),
            "the work directory and its parent are gone; waiting for the folder to come back"
        );
        return false;
    }
    let message = format!(
        "{} is gone (deleted?), so haproxy (master pid {}) cannot be reached through it; \
         starting a new haproxy on the last deployed files and stopping the old one gracefully",
        socket.display(),
        process.master_pid()
    );
    tracing::warn!(socket = %socket.display(), master_pid = process.master_pid(), "{message}");
    introspection.record_error(ErrorRecord::new("haproxy", message));
    if let Err(e) = target.restore_files().await {
        tracing::error!(error = %e, "the last deployment's files could not be written back");
        introspection.record_error(ErrorRecord::new("haproxy", e.to_string()));
        return false;
    }
    // The pid file names the old master, which `start` would take for one still running.
    if let Err(e) = std::fs::remove_file(work_dir.pid_file())
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(error = %e, "cannot remove the old haproxy's pid file");
    }
    match HaproxyProcess::start(haproxy_bin, work_dir).await {
        Ok(started) => {
            let mut old = std::mem::replace(process, started);
            tokio::spawn(async move {
                if let Err(e) = old.soft_stop().await {
                    tracing::warn!(error = %e, "the old haproxy did not stop");
                }
            });
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "a new haproxy did not start; retrying");
            introspection.record_error(ErrorRecord::new("haproxy", e.to_string()));
            false
        }
    }
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
