//! The local deploy target: one HAProxy on the same host (or in the same pod) as haptor,
//! reached through its files, its master CLI and its runtime API.
//!
//! A deployment executes exactly the [`plan`] from what the work directory holds to the
//! request's render. A plan without a reload applies its server and map changes through the
//! runtime API and then writes the files, so a later reload keeps them; a runtime command
//! that answers unexpectedly turns the deployment into a reload. Runtime commands go to the
//! runtime socket while it answers as HAProxy's worker, and to the worker through the master
//! CLI (`@1 ...`) while it is missing, dead or someone else's, which a reload would not
//! mend (`route.rs` says why and how). A plan with a reload writes the files, asks the
//! master CLI to `reload`, and confirms it: a new worker pid in `show proc` means success, a
//! higher `[failed: N]` means HAProxy refused the files, which are then put back, so the disk
//! always matches what runs. Requests are epoch-fenced: the highest accepted epoch is kept in
//! memory and in the work directory, so a deposed leader's late write is refused even after
//! haptor restarts.
//!
//! [`HaproxyProcess`] starts and stops the HAProxy master itself (for `haptor local` and the
//! integration tests); the target works the same with a HAProxy started by anyone else, as
//! long as it runs with `-S <work dir>/master.sock -f <work dir>/haproxy.cfg`.

mod files;
mod layout;
mod process;
mod route;
mod sockets;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::pure::deploy::fence::Fence;
use crate::pure::deploy::plan::{
    DeploymentPlan, Operation, ServerState, checks_agent, checks_health, plan, plan_between,
    starts_disabled,
};
use crate::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget, ReloadReason};
use crate::pure::rendered::{AuxKind, Checksum, RenderedConfig};

pub use layout::{
    LOCAL_MARKER, WorkDir, bootstrap_config, inject_local_settings, strip_local_settings,
};
pub use process::{HaproxyProcess, START_TIMEOUT, STOP_TIMEOUT};
pub use sockets::{ProcInfo, parse_show_proc};

use files::Snapshot;
use route::{Route, RouteChange, RouteState, SocketFile};
use sockets::{LoadedMap, ReloadReply, cli_word, exchange, find_map, parse_reload_reply};

/// How often `show proc` is polled while a reload is being confirmed.
const RELOAD_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The largest `add map` payload sent at once. HAProxy 2.6 silently drops a command larger
/// than its buffer (16 kB by default), so payloads stay well below it.
const MAP_PAYLOAD_BYTES: usize = 8 * 1024;

/// Why the local target or the HAProxy process could not do something.
#[derive(Debug, thiserror::Error)]
pub enum LocalTargetError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot use {} as the local HAProxy work directory: {reason}", path.display())]
    UnusableWorkDir { path: PathBuf, reason: String },
    #[error("the render's auxiliary file path '{path}' is refused: {reason}")]
    UnsafeAuxPath { path: String, reason: String },
    #[error(
        "cannot connect to HAProxy at {}: {source} (is haproxy running on this work directory?)",
        socket.display()
    )]
    Unreachable { socket: PathBuf, source: io::Error },
    #[error("the connection to {} broke during '{command}': {source}", socket.display())]
    SocketIo {
        socket: PathBuf,
        command: String,
        source: io::Error,
    },
    #[error("HAProxy did not answer '{command}' on {} within {timeout:?}", socket.display())]
    CommandTimeout {
        socket: PathBuf,
        command: String,
        timeout: Duration,
    },
    #[error("HAProxy answered '{command}' unexpectedly: {reply}")]
    UnexpectedReply { command: String, reply: String },
    #[error("cannot run {}: {source}", binary.display())]
    Spawn { binary: PathBuf, source: io::Error },
    #[error("haproxy exited during start-up ({status}): {alerts} (full output in {})", log.display())]
    StartFailed {
        status: String,
        log: PathBuf,
        alerts: String,
    },
    #[error("haproxy did not come up within {timeout:?}: {alerts} (full output in {})", log.display())]
    StartTimeout {
        timeout: Duration,
        log: PathBuf,
        alerts: String,
    },
    #[error(
        "another haproxy (master pid {master_pid}) already answers on {}; stop it or use another work directory",
        socket.display()
    )]
    AlreadyRunning { socket: PathBuf, master_pid: u32 },
    #[error("cannot send SIG{signal} to process {pid}")]
    Signal { pid: u32, signal: String },
    #[error(
        "{} holds '{content}', not an epoch number; fix it, or delete it to drop the fencing record",
        path.display()
    )]
    BadEpochFile { path: PathBuf, content: String },
}

impl LocalTargetError {
    /// The connection itself failed (nothing answers, or the connection broke).
    fn is_connection_failure(&self) -> bool {
        matches!(
            self,
            LocalTargetError::Unreachable { .. } | LocalTargetError::SocketIo { .. }
        )
    }
}

impl From<LocalTargetError> for DeployError {
    fn from(error: LocalTargetError) -> DeployError {
        match error {
            LocalTargetError::UnsafeAuxPath { .. } => DeployError::Rejected(error.to_string()),
            other => DeployError::Unreachable(other.to_string()),
        }
    }
}

/// Timeouts of the local target. How long a reload may take until a new worker shows up
/// in `show proc` is not among them: it comes with each request, derived from
/// `dataplane.deploymentTimeout` ([`DeployRequest::reload_wait`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalTargetSettings {
    /// How long one runtime API or master CLI command may take.
    pub command_timeout: Duration,
}

impl Default for LocalTargetSettings {
    fn default() -> Self {
        LocalTargetSettings {
            command_timeout: Duration::from_secs(10),
        }
    }
}

/// The deploy target for the HAProxy of one work directory.
#[derive(Debug)]
pub struct LocalTarget {
    name: String,
    work_dir: WorkDir,
    settings: LocalTargetSettings,
    /// One deployment at a time; drift checks wait for a running deployment.
    state: tokio::sync::Mutex<TargetState>,
}

#[derive(Debug)]
struct TargetState {
    /// The accepted epoch (also kept in the work directory) and the generation last
    /// deployed in it (in memory only: a restarted controller numbers its renders from 1
    /// again).
    fence: Fence,
    /// The last configuration HAProxy took (`None`: nothing haptor deployed, or unknown).
    last_deployed: Option<Arc<RenderedConfig>>,
    /// Its checksum, when a request brought it (not when it was read back from disk).
    last_checksum: Option<Checksum>,
    /// The stamps of `last_deployed`'s files right after this target wrote them. While they
    /// hold, the files are `last_deployed` and need not be read back (a megabyte per
    /// deployment at 1 000 backends); `None` after a failure, or before the first write.
    written: Option<files::WrittenStamps>,
    /// Which socket carries runtime commands, and whether the runtime socket's trouble
    /// was told.
    route: RouteState,
}

/// The deployment the work directory's files hold, as [`LocalTarget::deployed_files`]
/// found it.
struct FilesFound {
    render: Option<Arc<RenderedConfig>>,
    /// Its checksum, when known without computing it.
    checksum: Option<Checksum>,
    /// The files are exactly as this target wrote them (their stamps held).
    as_written: bool,
}

/// Why the runtime part of a deployment stopped.
enum RuntimeStop {
    /// The runtime API cannot be reached: the deployment fails.
    Unreachable(LocalTargetError),
    /// A command answered unexpectedly: a reload takes over.
    Failed {
        applied: usize,
        error: LocalTargetError,
    },
}

impl LocalTarget {
    /// A target for the HAProxy of `work_dir`. Reads the accepted epoch and the last
    /// deployment back from the work directory, so fencing and planning carry over a
    /// controller restart. Does not need HAProxy to be running.
    pub fn open(
        name: impl Into<String>,
        work_dir: WorkDir,
    ) -> Result<LocalTarget, LocalTargetError> {
        let accepted_epoch = files::read_epoch(&work_dir)?;
        let last_deployed = files::read_back(&work_dir)?.map(Arc::new);
        Ok(LocalTarget {
            name: name.into(),
            work_dir,
            settings: LocalTargetSettings::default(),
            state: tokio::sync::Mutex::new(TargetState {
                fence: Fence::with_epoch(accepted_epoch),
                last_deployed,
                last_checksum: None,
                written: None,
                route: RouteState::default(),
            }),
        })
    }

    /// Replaces the timeouts.
    pub fn with_settings(mut self, settings: LocalTargetSettings) -> LocalTarget {
        self.settings = settings;
        self
    }

    pub fn work_dir(&self) -> &WorkDir {
        &self.work_dir
    }

    /// The highest epoch accepted so far.
    pub async fn accepted_epoch(&self) -> u64 {
        self.state.lock().await.fence.accepted_epoch()
    }

    /// The last configuration HAProxy took through this target (or found on disk at open).
    pub async fn last_deployed(&self) -> Option<Arc<RenderedConfig>> {
        self.state.lock().await.last_deployed.clone()
    }

    /// The deployment the work directory holds, read back from disk (what the next
    /// deployment plans from). `None` when haptor never deployed here.
    pub fn on_disk(&self) -> Result<Option<RenderedConfig>, LocalTargetError> {
        files::read_back(&self.work_dir)
    }

    /// Writes the last deployment's files back when `haproxy.cfg` is gone (the work
    /// directory was deleted under a running haproxy), so that a haproxy started again runs
    /// what the deleted files held rather than the bootstrap configuration: `haproxy.cfg`,
    /// every auxiliary file, the manifest and the accepted epoch (the fencing record).
    /// Returns whether it wrote anything; does nothing while the files are there or before
    /// anything was deployed.
    pub async fn restore_files(&self) -> Result<bool, LocalTargetError> {
        let mut state = self.state.lock().await;
        if self.work_dir.config_file().exists() {
            return Ok(false);
        }
        let Some(last) = state.last_deployed.clone() else {
            return Ok(false);
        };
        let accepted_epoch = state.fence.accepted_epoch();
        if accepted_epoch > 0 {
            files::write_epoch(&self.work_dir, accepted_epoch)?;
        }
        for (path, file) in &last.aux_files {
            let target = self.work_dir.aux_file(path)?;
            if file.kind == AuxKind::Cert {
                files::write_private(&target, file.content.as_bytes())?;
            } else {
                files::write_atomic(&target, file.content.as_bytes())?;
            }
        }
        files::write_atomic(
            &self.work_dir.config_file(),
            files::config_text(&last, &self.work_dir).as_bytes(),
        )?;
        files::write_atomic(
            &self.work_dir.manifest_file(),
            files::manifest_for(&last).as_bytes(),
        )?;
        state.written = Some(files::WrittenStamps::take(&self.work_dir, &last)?);
        tracing::info!(
            target_name = %self.name,
            work_dir = %self.work_dir.root().display(),
            "wrote the last deployment's files back into the work directory"
        );
        Ok(true)
    }

    /// `show proc` on the master CLI.
    pub async fn show_proc(&self) -> Result<ProcInfo, LocalTargetError> {
        let reply = exchange(
            &self.work_dir.master_socket(),
            "show proc",
            self.settings.command_timeout,
        )
        .await?;
        parse_show_proc(&reply).ok_or_else(|| LocalTargetError::UnexpectedReply {
            command: "show proc".into(),
            reply: reply.trim().to_string(),
        })
    }

    /// One runtime API command (with its payload, if any) and its whole reply.
    pub async fn runtime_command(&self, command: &str) -> Result<String, LocalTargetError> {
        exchange(
            &self.work_dir.runtime_socket(),
            command,
            self.settings.command_timeout,
        )
        .await
    }

    async fn run_deploy(&self, request: &DeployRequest) -> Result<DeployOutcome, DeployError> {
        let mut state = self.state.lock().await;
        state.fence.admit(request)?;
        if state.fence.raises_epoch(request) {
            files::write_epoch(&self.work_dir, request.epoch)?;
        }
        state.fence.accept(request);

        let to = &request.rendered;
        for path in to.aux_files.keys() {
            self.work_dir.aux_file(path)?;
        }
        let FilesFound {
            render: from,
            checksum: from_checksum,
            as_written: files_hold,
        } = self.deployed_files(&mut state)?;
        // Planned once for the validator, the scheduler and this target when the checksums
        // of both renders are known.
        let plan = match (&from, from_checksum) {
            (Some(from), Some(checksum)) => {
                plan_between(Some((from, checksum)), (to, request.checksum))
            }
            (None, _) => plan_between(None, (to, request.checksum)),
            (Some(from), None) => plan(Some(from), to).map(Arc::new),
        }
        .map_err(|e| DeployError::Rejected(e.to_string()))?;
        // The manifest names the auxiliary files: while the files are the last deployment's,
        // it already names those of a render with the same ones.
        let manifest_holds = files_hold
            && from
                .as_deref()
                .is_some_and(|from| files::same_manifest(from, to));
        if plan.is_empty() {
            // Nothing to change, but HAProxy must be there to be running it.
            self.show_proc().await?;
            state.written = Some(files::WrittenStamps::take(&self.work_dir, to)?);
            state.last_deployed = Some(to.clone());
            state.last_checksum = Some(request.checksum);
            return Ok(DeployOutcome {
                unchanged: true,
                ..DeployOutcome::default()
            });
        }

        let mut runtime_changes = 0;
        let mut degraded = None;
        let mut reason = ReloadReason::Structural;
        if !plan.reload {
            // The runtime API answering is proof enough that HAProxy runs.
            let mut note = None;
            let applied = self.apply_runtime(&plan, &mut state.route, &mut note).await;
            let with_note = |problem: String| match &note {
                Some(note) => format!("{note}; then {problem}"),
                None => problem,
            };
            match applied {
                Ok(applied) => {
                    self.write_files(&plan, to, manifest_holds)?;
                    state.written = Some(files::WrittenStamps::take(&self.work_dir, to)?);
                    state.last_deployed = Some(to.clone());
                    state.last_checksum = Some(request.checksum);
                    for removed in &plan.removed_backends {
                        tracing::info!(target_name = %self.name, generation = request.generation, "{removed}");
                    }
                    tracing::info!(
                        target_name = %self.name,
                        generation = request.generation,
                        runtime_changes = applied,
                        "deployed without a reload"
                    );
                    return Ok(DeployOutcome {
                        reloaded: false,
                        reload_reason: None,
                        runtime_changes: applied,
                        unchanged: false,
                        degraded: note,
                    });
                }
                Err(RuntimeStop::Unreachable(error)) => {
                    // Neither the runtime socket nor the master forwarding to the worker
                    // answered. A master that answers now (it was re-executing, say) can
                    // still reload; one that does not fails the deployment.
                    if self.show_proc().await.is_err() {
                        return Err(error.into());
                    }
                    tracing::warn!(
                        target_name = %self.name,
                        error = %error,
                        "the runtime API cannot be reached; reloading through the master instead"
                    );
                    degraded = Some(with_note(format!(
                        "{error}; deployed with a reload through the master CLI instead"
                    )));
                    reason = ReloadReason::RuntimeUnreachable;
                }
                Err(RuntimeStop::Failed { applied, error }) => {
                    tracing::warn!(
                        target_name = %self.name,
                        error = %error,
                        "a runtime API change failed; reloading instead"
                    );
                    runtime_changes = applied;
                    degraded = Some(with_note(format!(
                        "the runtime API refused a change ({error}); deployed with a reload instead"
                    )));
                    reason = ReloadReason::RuntimeRefused;
                }
            }
        }

        let before = self.show_proc().await?;
        let snapshot = Snapshot::capture(self.touched_paths(&plan)?)?;
        if let Err(error) = self.write_files(&plan, to, manifest_holds) {
            if let Err(restore) = snapshot.restore() {
                tracing::error!(error = %restore, "the previous files could not all be put back");
            }
            return Err(error.into());
        }
        match self.reload(&before, request.reload_wait()).await {
            Ok(()) => {
                state.written = Some(files::WrittenStamps::take(&self.work_dir, to)?);
                state.last_deployed = Some(to.clone());
                state.last_checksum = Some(request.checksum);
                tracing::info!(
                    target_name = %self.name,
                    generation = request.generation,
                    reason = %reason,
                    reasons = ?plan.reload_reasons,
                    "deployed with a reload"
                );
                Ok(DeployOutcome {
                    reloaded: true,
                    reload_reason: Some(reason),
                    runtime_changes,
                    unchanged: false,
                    degraded,
                })
            }
            Err(error) => {
                // HAProxy still runs what the old files say (or, after an unconfirmed
                // reload, the next deployment re-plans from them): put them back.
                if let Err(restore) = snapshot.restore() {
                    tracing::error!(error = %restore, "the previous files could not all be put back");
                }
                state.last_deployed = from;
                state.last_checksum = from_checksum;
                tracing::warn!(target_name = %self.name, error = %error, "deployment failed");
                Err(error)
            }
        }
    }

    /// The deployment the files hold, to plan from, its checksum when known, and whether
    /// the files are exactly as this target wrote them: the last deployment while the files
    /// still carry the stamps of its writing, else read back from disk (an edit behind
    /// haptor's back is planned from, and so undone). Clears the stamps: only a deployment
    /// that ends well sets them again.
    fn deployed_files(&self, state: &mut TargetState) -> Result<FilesFound, LocalTargetError> {
        if let Some(stamps) = state.written.take()
            && stamps.still_hold()?
            && state.last_deployed.is_some()
        {
            return Ok(FilesFound {
                render: state.last_deployed.clone(),
                checksum: state.last_checksum,
                as_written: true,
            });
        }
        let from = files::read_back(&self.work_dir)?.map(Arc::new);
        if state.last_deployed.is_some() && from != state.last_deployed {
            tracing::warn!(
                target_name = %self.name,
                work_dir = %self.work_dir.root().display(),
                "the files on disk differ from the last deployment (edited behind haptor's back); planning from the disk"
            );
            return Ok(FilesFound {
                render: from,
                checksum: None,
                as_written: false,
            });
        }
        // The same bytes as the last deployment: the same checksum.
        Ok(FilesFound {
            checksum: state.last_checksum.filter(|_| from.is_some()),
            render: from,
            as_written: false,
        })
    }

    /// Every file a plan writes or deletes, and the manifest.
    fn touched_paths(&self, plan: &DeploymentPlan) -> Result<Vec<PathBuf>, LocalTargetError> {
        let mut paths = vec![self.work_dir.config_file(), self.work_dir.manifest_file()];
        for op in &plan.operations {
            if let Operation::WriteFile { path } | Operation::DeleteFile { path } = op {
                paths.push(self.work_dir.aux_file(path)?);
            }
        }
        Ok(paths)
    }

    /// Executes the plan's file operations, then writes the manifest unless it `holds`
    /// already (it names `to`'s files as they are).
    fn write_files(
        &self,
        plan: &DeploymentPlan,
        to: &RenderedConfig,
        manifest_holds: bool,
    ) -> Result<(), LocalTargetError> {
        for op in &plan.operations {
            match op {
                Operation::WriteConfig => files::write_config(to, &self.work_dir)?,
                Operation::WriteFile { path } => {
                    let target = self.work_dir.aux_file(path)?;
                    match to.aux_files.get(path) {
                        Some(file) if file.kind == AuxKind::Cert => {
                            files::write_private(&target, file.content.as_bytes())?
                        }
                        Some(file) => files::write_atomic(&target, file.content.as_bytes())?,
                        None => files::write_atomic(&target, b"")?,
                    }
                }
                Operation::DeleteFile { path } => files::remove(&self.work_dir.aux_file(path)?)?,
                _ => {}
            }
        }
        if manifest_holds {
            return Ok(());
        }
        files::write_atomic(
            &self.work_dir.manifest_file(),
            files::manifest_for(to).as_bytes(),
        )
    }

    /// Applies the plan's runtime operations; returns how many changed something. `note`
    /// receives what the deployment reports about the runtime socket, the one time its
    /// trouble is found (`route.rs`).
    async fn apply_runtime(
        &self,
        plan: &DeploymentPlan,
        routes: &mut RouteState,
        note: &mut Option<String>,
    ) -> Result<usize, RuntimeStop> {
        // Servers leaving a backend that stays first; a removed backend's servers after the
        // map changes that stop routing to it.
        let operations = plan.runtime_operations();
        if operations.is_empty() {
            return Ok(0);
        }
        let mut route = self.runtime_route(routes, note).await;
        let mut applied = 0;
        for op in operations {
            let mut result = self.apply_operation(op, route).await;
            if route == Route::Direct
                && let Err(error) = &result
                && error.is_connection_failure()
                && self.show_proc().await.is_ok()
            {
                // The checked socket stopped answering while the master still does: this
                // operation (sent again whole: each is idempotent) and the rest go to the
                // worker through the master.
                let problem = error.to_string();
                route = self.through_master(routes, problem, note);
                result = self.apply_operation(op, route).await;
            }
            match result {
                Ok(true) => applied += 1,
                Ok(false) => {}
                Err(error) if error.is_connection_failure() => {
                    return Err(RuntimeStop::Unreachable(error));
                }
                Err(error) => return Err(RuntimeStop::Failed { applied, error }),
            }
        }
        Ok(applied)
    }

    /// Where this deployment's runtime commands go: the runtime socket while the file at its
    /// path is the one last found to answer as a worker of the master; otherwise that is
    /// checked first (`show info` on the socket, `show proc` on the master), and a file that
    /// is missing, refuses or answers as another process sends the commands through the
    /// master.
    async fn runtime_route(&self, routes: &mut RouteState, note: &mut Option<String>) -> Route {
        let socket = self.work_dir.runtime_socket();
        let file = SocketFile::at(&socket);
        if let Some(route) = routes.known(file) {
            return route;
        }
        let answer = self.runtime_command("show info").await;
        let Ok(proc) = self.show_proc().await else {
            // The master can neither tell whose socket it is nor forward to the worker: the
            // socket it is, and its commands tell what happens.
            return Route::Direct;
        };
        let problem = match answer {
            Ok(reply) if route::answers_as_worker(&reply, &proc.workers) => {
                let (route, change) = routes.trust(file);
                if change == Some(RouteChange::Recovered) {
                    tracing::info!(
                        target_name = %self.name,
                        socket = %socket.display(),
                        "the runtime socket answers as haproxy's worker again; runtime changes use it again"
                    );
                }
                return route;
            }
            Ok(reply) => format!(
                "{} answers as {}, not as a worker of the haproxy master (pid {}) of this work directory",
                socket.display(),
                route::info_pid(&reply).map_or_else(
                    || "something else".to_string(),
                    |pid| format!("process {pid}")
                ),
                proc.master_pid
            ),
            Err(LocalTargetError::Unreachable { socket, source })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                format!("{} is missing", socket.display())
            }
            Err(LocalTargetError::Unreachable { socket, source }) => {
                format!("{} cannot be connected to: {source}", socket.display())
            }
            Err(error) => error.to_string(),
        };
        self.through_master(routes, problem, note)
    }

    /// Sends runtime commands through the master from now on; warns, and fills `note`, the
    /// first time.
    fn through_master(
        &self,
        routes: &mut RouteState,
        problem: String,
        note: &mut Option<String>,
    ) -> Route {
        let (route, change) = routes.distrust();
        if change == Some(RouteChange::Degraded) {
            tracing::warn!(
                target_name = %self.name,
                socket = %self.work_dir.runtime_socket().display(),
                problem = %problem,
                "the runtime socket does not answer as haproxy's worker (dead or replaced; a reload would not bind it again); runtime changes go to the worker through the master CLI, still without a reload"
            );
            *note = Some(format!(
                "{problem}; runtime changes go to the worker through the master CLI (@1) until \
                 the runtime socket answers again (a reload would not bind it again: the new \
                 worker inherits the old socket)"
            ));
        } else {
            tracing::debug!(problem = %problem, "runtime changes go through the master CLI");
        }
        route
    }

    /// One runtime command on `route`, with its payload if any, and its whole reply.
    async fn send(&self, route: Route, command: &str) -> Result<String, LocalTargetError> {
        let socket = match route {
            Route::Direct => self.work_dir.runtime_socket(),
            Route::ThroughMaster => self.work_dir.master_socket(),
        };
        exchange(
            &socket,
            &route.request(command),
            self.settings.command_timeout,
        )
        .await
    }

    /// One runtime operation; `false` when it had nothing to change live.
    async fn apply_operation(
        &self,
        op: &Operation,
        route: Route,
    ) -> Result<bool, LocalTargetError> {
        let server =
            |backend: &str, server: &str| format!("{}/{}", cli_word(backend), cli_word(server));
        match op {
            Operation::SetServerAddress {
                backend,
                server: name,
                address,
                port,
            } => {
                let mut command = format!(
                    "set server {} addr {}",
                    server(backend, name),
                    cli_word(address)
                );
                if let Some(port) = port {
                    command.push_str(&format!(" port {port}"));
                }
                self.expect(route, &command, |reply| {
                    reply.contains("changed") || reply.contains("no need to change")
                })
                .await?;
            }
            Operation::SetServerWeight {
                backend,
                server: name,
                weight,
            } => {
                let command = format!("set server {} weight {weight}", server(backend, name));
                self.expect(route, &command, silent).await?;
            }
            Operation::SetServerState {
                backend,
                server: name,
                state,
            } => {
                let state = match state {
                    ServerState::Ready => "ready",
                    ServerState::Maint => "maint",
                };
                let command = format!("set server {} state {state}", server(backend, name));
                self.expect(route, &command, silent).await?;
            }
            Operation::AddServer {
                backend,
                server: name,
                address,
                port,
                parameters,
            } => {
                return self
                    .add_server(route, &server(backend, name), address, *port, parameters)
                    .await;
            }
            Operation::DelServer {
                backend,
                server: name,
            } => {
                return self.delete_server(route, &server(backend, name)).await;
            }
            Operation::SetCertificate { path, new, pem } => {
                return self.set_certificate(route, path, *new, pem).await;
            }
            Operation::AddCrtListEntry { list, line } => {
                if !self.crt_list_loaded(route, list).await? {
                    return Ok(false);
                }
                // A payload ends with an empty line.
                let command = format!("add ssl crt-list {} <<\n{line}\n\n", cli_word(list));
                self.expect(route, &command, |reply| reply.contains("Success!"))
                    .await?;
            }
            Operation::DelCrtListEntry { list, certificate } => {
                if !self.crt_list_loaded(route, list).await? {
                    return Ok(false);
                }
                let command = format!(
                    "del ssl crt-list {} {}",
                    cli_word(list),
                    cli_word(certificate)
                );
                self.expect(route, &command, |reply| reply.contains("deleted"))
                    .await?;
            }
            Operation::DelCertificate { path } => {
                let command = format!("del ssl cert {}", cli_word(path));
                let reply = self.send(route, &command).await?;
                if !reply.contains("deleted") {
                    // A certificate left in HAProxy's store serves nothing once no line
                    // names it, and the next reload does not load it again.
                    tracing::debug!(certificate = %path, reply = reply.trim(), "a certificate stays in haproxy's store until the next reload");
                    return Ok(false);
                }
            }
            Operation::ReplaceMap { path, entries, .. } => {
                return self.replace_map(route, path, entries).await;
            }
            Operation::WriteConfig | Operation::WriteFile { .. } | Operation::DeleteFile { .. } => {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether HAProxy loaded the crt-list `list` (`show ssl crt-list` names it as the
    /// configuration wrote it); one it has not loaded needs only its file written.
    async fn crt_list_loaded(&self, route: Route, list: &str) -> Result<bool, LocalTargetError> {
        let listing = self.send(route, "show ssl crt-list").await?;
        Ok(listing.lines().any(|l| l.trim() == list))
    }

    /// Replaces a certificate's content for new handshakes: `new ssl cert` when HAProxy has
    /// not seen it, `set ssl cert` with the PEM (blank lines dropped: one ends the payload),
    /// `commit ssl cert`. A certificate HAProxy has not loaded and is not new needs only its
    /// file written.
    async fn set_certificate(
        &self,
        route: Route,
        path: &str,
        new: bool,
        pem: &str,
    ) -> Result<bool, LocalTargetError> {
        let name = cli_word(path);
        let listing = self.send(route, "show ssl cert").await?;
        let loaded = listing.lines().any(|l| l.trim() == path);
        if !loaded && !new {
            tracing::debug!(certificate = %path, "HAProxy has not loaded this certificate; writing the file is enough");
            return Ok(false);
        }
        if !loaded {
            self.expect(route, &format!("new ssl cert {name}"), |reply| {
                reply.contains("New empty certificate store")
            })
            .await?;
        }
        let body: String = pem
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        let set = format!("set ssl cert {name} <<\n{body}\n");
        self.expect(route, &set, |reply| reply.contains("Transaction"))
            .await?;
        let commit = format!("commit ssl cert {name}");
        self.expect(route, &commit, |reply| reply.contains("Success!"))
            .await?;
        Ok(true)
    }

    /// `add server`, then `enable server` and the checks the parameters turn on (HAProxy
    /// creates a runtime server in maintenance with its checks off). A server of that name
    /// that is still there — one a deletion left in maintenance because connections still
    /// used it — takes the new address and comes back instead.
    async fn add_server(
        &self,
        route: Route,
        server: &str,
        address: &str,
        port: Option<u16>,
        parameters: &[String],
    ) -> Result<bool, LocalTargetError> {
        let mut command = format!("add server {server} {}", cli_word(address));
        if let Some(port) = port {
            command.push_str(&format!(":{port}"));
        }
        for word in parameters {
            command.push(' ');
            command.push_str(&cli_word(word));
        }
        let reply = self.send(route, &command).await?;
        if reply.contains("Already exists") {
            let mut moved = format!("set server {server} addr {}", cli_word(address));
            if let Some(port) = port {
                moved.push_str(&format!(" port {port}"));
            }
            self.expect(route, &moved, |reply| {
                reply.contains("changed") || reply.contains("no need to change")
            })
            .await?;
            tracing::debug!(
                server,
                "a server left in maintenance by a deletion takes the added one's place"
            );
        } else if !reply.contains("New server registered") {
            return Err(LocalTargetError::UnexpectedReply {
                command: command.clone(),
                reply: reply.trim().to_string(),
            });
        }
        if !starts_disabled(parameters) {
            self.expect(route, &format!("enable server {server}"), silent)
                .await?;
        }
        if checks_health(parameters) {
            self.expect(route, &format!("enable health {server}"), silent)
                .await?;
        }
        if checks_agent(parameters) {
            self.expect(route, &format!("enable agent {server}"), silent)
                .await?;
        }
        Ok(true)
    }

    /// `set server … state maint`, then `del server`. A server that connections still use
    /// stays in maintenance, taking no new request (HAProxy deletes only idle servers; the
    /// next reload drops it, and an addition of its name reuses it); one already gone is
    /// nothing to do.
    async fn delete_server(&self, route: Route, server: &str) -> Result<bool, LocalTargetError> {
        let maint = format!("set server {server} state maint");
        let reply = self.send(route, &maint).await?;
        if reply.contains("No such") {
            return Ok(false);
        }
        if !silent(&reply) {
            return Err(LocalTargetError::UnexpectedReply {
                command: maint,
                reply: reply.trim().to_string(),
            });
        }
        let command = format!("del server {server}");
        let reply = self.send(route, &command).await?;
        if reply.contains("Server deleted") {
            Ok(true)
        } else if reply.contains("connections") {
            tracing::debug!(
                server,
                reply = reply.trim(),
                "a server still in use stays in maintenance until it is idle or the next reload"
            );
            Ok(true)
        } else {
            Err(LocalTargetError::UnexpectedReply {
                command,
                reply: reply.trim().to_string(),
            })
        }
    }

    /// Sends a command and checks its reply.
    async fn expect(
        &self,
        route: Route,
        command: &str,
        accept: impl Fn(&str) -> bool,
    ) -> Result<String, LocalTargetError> {
        let reply = self.send(route, command).await?;
        if accept(&reply) {
            Ok(reply)
        } else {
            Err(LocalTargetError::UnexpectedReply {
                command: command.lines().next().unwrap_or_default().to_string(),
                reply: if reply.trim().is_empty() {
                    "(nothing)".into()
                } else {
                    reply.trim().to_string()
                },
            })
        }
    }

    async fn loaded_map(
        &self,
        route: Route,
        path: &str,
    ) -> Result<Option<LoadedMap>, LocalTargetError> {
        let listing = self.send(route, "show map").await?;
        let maps = sockets::parse_show_map(&listing);
        Ok(find_map(&maps, path, self.work_dir.root()).cloned())
    }

    /// Replaces a loaded map's entries atomically: `prepare map`, `add map @<version>` in
    /// payloads below HAProxy's buffer size, `commit map`, then checks the entry count. A map
    /// HAProxy has not loaded needs no live change (the file write is enough).
    async fn replace_map(
        &self,
        route: Route,
        path: &str,
        entries: &[(String, String)],
    ) -> Result<bool, LocalTargetError> {
        let Some(map) = self.loaded_map(route, path).await? else {
            tracing::debug!(
                map = path,
                "HAProxy has not loaded this map; writing the file is enough"
            );
            return Ok(false);
        };
        let reference = cli_word(&map.reference);
        let prepare = format!("prepare map {reference}");
        let reply = self
            .expect(route, &prepare, |reply| version_of(reply).is_some())
            .await?;
        // `expect` accepted the reply only with a version in it.
        let version = version_of(&reply).unwrap_or_default();
        let header = format!("add map @{version} {reference} <<\n");
        let mut payload = header.clone();
        for (key, value) in entries {
            let line = if value.is_empty() {
                format!("{key}\n")
            } else {
                format!("{key} {value}\n")
            };
            if payload.len() > header.len() && payload.len() + line.len() > MAP_PAYLOAD_BYTES {
                payload.push('\n');
                self.expect(route, &payload, silent).await?;
                payload.clone_from(&header);
            }
            payload.push_str(&line);
        }
        if payload.len() > header.len() {
            payload.push('\n');
            self.expect(route, &payload, silent).await?;
        }
        let commit = format!("commit map @{version} {reference}");
        self.expect(route, &commit, silent).await?;
        let loaded = self.loaded_map(route, path).await?;
        let count = loaded.as_ref().and_then(|m| m.entry_count);
        if count != Some(entries.len()) {
            return Err(LocalTargetError::UnexpectedReply {
                command: commit,
                reply: format!(
                    "the map holds {} entries after the commit, {} expected",
                    count.map_or("an unknown number of".into(), |n| n.to_string()),
                    entries.len()
                ),
            });
        }
        Ok(true)
    }

    /// Asks the master to reload and waits for the outcome: a new worker (success), a higher
    /// failed count or a `Success=0` reply (HAProxy refused the files).
    async fn reload(&self, before: &ProcInfo, wait: Duration) -> Result<(), DeployError> {
        let log = self.work_dir.log_file();
        let log_offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let refused = |detail: String| {
            DeployError::Rejected(format!(
                "HAProxy refused the new configuration and keeps running the previous one: {detail}"
            ))
        };
        let deadline = Instant::now() + wait;
        loop {
            match exchange(
                &self.work_dir.master_socket(),
                "reload",
                self.settings.command_timeout,
            )
            .await
            {
                Ok(reply) => match parse_reload_reply(&reply) {
                    ReloadReply::Failed(alerts) => return Err(refused(alerts)),
                    ReloadReply::Busy if Instant::now() < deadline => {
                        tracing::debug!("the master is still finishing a reload; asking again");
                        tokio::time::sleep(RELOAD_POLL_INTERVAL).await;
                        continue;
                    }
                    ReloadReply::Busy => {
                        return Err(DeployError::Unreachable(format!(
                            "HAProxy was still finishing an earlier reload after {wait:?} and \
                             took no new one (the wait is derived from \
                             dataplane.deploymentTimeout)"
                        )));
                    }
                    ReloadReply::Silent | ReloadReply::Succeeded => break,
                },
                Err(error) if error.is_connection_failure() => return Err(error.into()),
                Err(error) => {
                    tracing::debug!(error = %error, "no reply to reload; confirming through show proc");
                    break;
                }
            }
        }
        loop {
            tokio::time::sleep(RELOAD_POLL_INTERVAL).await;
            // While the master re-executes itself, its socket refuses connections: keep polling.
            if let Ok(now) = self.show_proc().await {
                if now.failed > before.failed {
                    let alerts = process::read_alerts_since(&log, log_offset);
                    let detail = if alerts.is_empty() {
                        format!(
                            "the master counts {} failed reload(s); its output names the error",
                            now.failed
                        )
                    } else {
                        format!(
                            "{alerts} (line numbers count the lines haptor adds after `global`)"
                        )
                    };
                    return Err(refused(detail));
                }
                if let Some(worker) = now.current_worker
                    && !before.workers.contains(&worker)
                {
                    tracing::debug!(worker, reloads = now.reloads, "reload confirmed");
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(DeployError::Unreachable(format!(
                    "HAProxy did not confirm the reload within {wait:?} (no new worker in show \
                     proc; the wait is derived from dataplane.deploymentTimeout)"
                )));
            }
        }
    }
}

/// A reply with nothing in it but its line break: how 2.6 acknowledges `set server ... weight`,
/// `state`, `add map` and `commit map`. An empty reply means the command was dropped.
fn silent(reply: &str) -> bool {
    !reply.is_empty() && reply.trim().is_empty()
}

/// The version in `New version created: 3`.
fn version_of(reply: &str) -> Option<u64> {
    reply
        .trim()
        .strip_prefix("New version created:")
        .and_then(|v| v.trim().parse().ok())
}

impl DeployTarget for LocalTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        Box::pin(self.run_deploy(request))
    }

    /// The checksum of the deployment on disk (the rendered text, the local settings left
    /// out); HAProxy must answer on its master CLI.
    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        Box::pin(async move {
            let _deploying = self.state.lock().await;
            self.show_proc().await?;
            Ok(files::read_back(&self.work_dir)?.map(|r| r.checksum()))
        })
    }
}

#[cfg(test)]
mod tests;
