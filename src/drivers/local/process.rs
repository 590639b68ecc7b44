//! The HAProxy process of a local instance: `haproxy -W -S <master.sock> -f <haproxy.cfg> -p
//! <haproxy.pid>` in master-worker mode, in the foreground, so haptor owns the master as a
//! child process. The master re-executes itself in place on every reload (same pid), and its
//! workers exit when it dies, so stopping or killing the master leaves nothing behind.
//! Output goes to `haproxy.log` in the work directory, which also explains a failed start.
//!
//! If haptor itself dies without stopping HAProxy (SIGKILL, the OOM killer), the master
//! lives on without its owner. The next start on the same work directory recognises such a
//! master (it answers on the work directory's socket, but its parent is no longer a process
//! running haptor's program), waits for it to finish any reload it had been asked for (a
//! reload re-executes the master, which then binds the socket again), starts a new master
//! beside it and then soft-stops it, so no connection is refused; a master whose owner is
//! alive is left alone and the start fails.

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::layout::{WorkDir, bootstrap_config};
use super::sockets::{ProcInfo, exchange, parse_show_proc};
use super::{LocalTargetError, files};

/// How long a start may take until the master answers with a worker.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long `stop` waits for a graceful exit before it kills.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

const POLL_INTERVAL: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A running HAProxy master owned by haptor. Dropping it kills the master (best effort).
#[derive(Debug)]
pub struct HaproxyProcess {
    child: Option<Child>,
    master_pid: u32,
    work_dir: WorkDir,
}

impl HaproxyProcess {
    /// Starts HAProxy on the work directory's `haproxy.cfg` (writing the bootstrap
    /// configuration first when there is none) and waits until the master answers `show proc`
    /// with a worker. Fails when another master already answers on the work directory's
    /// socket, when HAProxy exits (the error quotes its alerts) or after [`START_TIMEOUT`].
    pub async fn start(
        binary: impl AsRef<Path>,
        work_dir: &WorkDir,
    ) -> Result<HaproxyProcess, LocalTargetError> {
        let binary = binary.as_ref();
        let orphan = find_master(work_dir).await;
        if let Some(master_pid) = orphan
            && has_live_owner(master_pid)
        {
            return Err(LocalTargetError::AlreadyRunning {
                socket: work_dir.master_socket(),
                master_pid,
            });
        }
        let config = work_dir.config_file();
        if !config.exists() {
            files::write_atomic(&config, bootstrap_config(work_dir).as_bytes())?;
        }
        let Some(orphan) = orphan else {
            return HaproxyProcess::launch(binary, work_dir).await;
        };
        // An orphan whose haptor died after asking it to reload re-executes itself when it
        // gets to that reload, and binds the master socket again: a master started beside it
        // before then would lose the socket to it, and haptor the means to drive its own.
        match settle_orphan(orphan, work_dir).await {
            Orphan::Settled => {}
            Orphan::Gone => return HaproxyProcess::launch(binary, work_dir).await,
            Orphan::Unsettled => {
                tracing::warn!(
                    master_pid = orphan,
                    timeout = ?START_TIMEOUT,
                    "the haproxy left running by an earlier haptor did not settle; stopping it before starting a new one"
                );
                stop_orphan(orphan, work_dir).await?;
                return HaproxyProcess::launch(binary, work_dir).await;
            }
        }
        // The new master starts beside the orphan (their listeners share the ports), which
        // then finishes its connections and goes, so none is refused meanwhile. One that
        // cannot start beside it (a port without `SO_REUSEPORT`, say) starts once it is gone.
        let process = match HaproxyProcess::launch(binary, work_dir).await {
            Ok(process) => process,
            Err(e) => {
                tracing::warn!(
                    master_pid = orphan,
                    error = %e,
                    "haproxy did not start beside the orphaned one; starting it once that one is gone"
                );
                stop_orphan(orphan, work_dir).await?;
                return HaproxyProcess::launch(binary, work_dir).await;
            }
        };
        stop_orphan(orphan, work_dir).await?;
        Ok(process)
    }

    /// Spawns the master on the work directory's `haproxy.cfg` and waits until it answers
    /// `show proc` with a worker.
    async fn launch(binary: &Path, work_dir: &WorkDir) -> Result<HaproxyProcess, LocalTargetError> {
        let config = work_dir.config_file();
        let log_path = work_dir.log_file();
        let open_log = || {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|source| LocalTargetError::Io {
                    action: "open the HAProxy log",
                    path: log_path.clone(),
                    source,
                })
        };
        let log_start = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let child = Command::new(binary)
            .arg("-W")
            .arg("-S")
            .arg(work_dir.master_socket())
            .arg("-f")
            .arg(&config)
            .arg("-p")
            .arg(work_dir.pid_file())
            .current_dir(work_dir.root())
            .stdin(Stdio::null())
            .stdout(open_log()?)
            .stderr(open_log()?)
            .spawn()
            .map_err(|source| LocalTargetError::Spawn {
                binary: binary.to_path_buf(),
                source,
            })?;
        let master_pid = child.id();
        let mut process = HaproxyProcess {
            child: Some(child),
            master_pid,
            work_dir: work_dir.clone(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = process.exit_status() {
                return Err(LocalTargetError::StartFailed {
                    status: status.to_string(),
                    log: log_path.clone(),
                    alerts: read_alerts_since(&log_path, log_start),
                });
            }
            if let Ok(info) = process.show_proc().await
                && info.master_pid == master_pid
                && info.current_worker.is_some()
            {
                tracing::info!(
                    master_pid,
                    work_dir = %work_dir.root().display(),
                    "haproxy started"
                );
                return Ok(process);
            }
            if Instant::now() >= deadline {
                process.kill();
                return Err(LocalTargetError::StartTimeout {
                    timeout: START_TIMEOUT,
                    log: log_path.clone(),
                    alerts: read_alerts_since(&log_path, log_start),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The master's pid (it stays the same across reloads).
    pub fn master_pid(&self) -> u32 {
        self.master_pid
    }

    /// The work directory this process serves.
    pub fn work_dir(&self) -> &WorkDir {
        &self.work_dir
    }

    /// `show proc` on this process's master CLI.
    pub async fn show_proc(&self) -> Result<ProcInfo, LocalTargetError> {
        let socket = self.work_dir.master_socket();
        let reply = exchange(&socket, "show proc", PROBE_TIMEOUT).await?;
        parse_show_proc(&reply).ok_or_else(|| LocalTargetError::UnexpectedReply {
            command: "show proc".into(),
            reply,
        })
    }

    /// Whether the master is still running.
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// The master's exit status once it has exited (reaping it).
    fn exit_status(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            Ok(None) => None,
            // The child cannot be waited for: treat it as gone.
            Err(_) => {
                self.child = None;
                Some(ExitStatus::default())
            }
        }
    }

    /// Stops HAProxy: SIGTERM to the master (which stops its workers and waits for them),
    /// then SIGKILL after [`STOP_TIMEOUT`]. Stopping a stopped process does nothing.
    pub async fn stop(&mut self) -> Result<(), LocalTargetError> {
        self.signal_and_wait("TERM", "haproxy stopped", "did not stop")
            .await
    }

    /// Stops HAProxy gracefully, for a new master started beside it to take over: SIGUSR1 to
    /// the master, whose workers stop accepting, finish the connections they hold and exit,
    /// and the master with them; SIGKILL after [`STOP_TIMEOUT`]. Stopping a stopped process
    /// does nothing.
    pub async fn soft_stop(&mut self) -> Result<(), LocalTargetError> {
        self.signal_and_wait(
            "USR1",
            "haproxy stopped gracefully",
            "did not finish its connections",
        )
        .await
    }

    /// Sends `signal` to the master and waits up to [`STOP_TIMEOUT`] for it to exit, then
    /// kills it; `stopped` is logged when it exits, `late` (what it did not do) when killed.
    async fn signal_and_wait(
        &mut self,
        signal: &str,
        stopped: &str,
        late: &str,
    ) -> Result<(), LocalTargetError> {
        if self.exit_status().is_some() || self.child.is_none() {
            return Ok(());
        }
        if let Err(e) = send_signal(self.master_pid, signal) {
            tracing::warn!(master_pid = self.master_pid, error = %e, "cannot send SIG{signal} to haproxy; killing it");
            self.kill();
            return Ok(());
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if self.exit_status().is_some() {
                tracing::info!(master_pid = self.master_pid, "{stopped}");
                return Ok(());
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        tracing::warn!(
            master_pid = self.master_pid,
            "haproxy {late} within {STOP_TIMEOUT:?}; killing it"
        );
        self.kill();
        Ok(())
    }

    /// Kills the master at once (SIGKILL) and reaps it; its workers exit when they see it
    /// gone. Killing a stopped process does nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                tracing::debug!(master_pid = self.master_pid, error = %e, "haproxy already exited");
            }
            if let Err(e) = child.wait() {
                tracing::warn!(master_pid = self.master_pid, error = %e, "cannot reap haproxy");
            }
        }
    }
}

impl Drop for HaproxyProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master of this work directory that may still run: found by its socket, or (when it
/// does not answer yet) by the pid file naming a live process started on that socket. A
/// master that is re-executing itself (after its first worker started, or on a reload)
/// neither answers nor shows its command line for a moment: while the pid file names a live
/// process, the look is repeated for up to [`PROBE_TIMEOUT`] before none is concluded (a
/// master missed so would keep running beside the new one and take its socket back).
async fn find_master(work_dir: &WorkDir) -> Option<u32> {
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        let answering = match exchange(&work_dir.master_socket(), "show proc", PROBE_TIMEOUT).await
        {
            Ok(reply) => parse_show_proc(&reply).map(|info| info.master_pid),
            Err(_) => None,
        };
        if let Some(found) = answering.or_else(|| master_from_pid_file(work_dir)) {
            return Some(found);
        }
        let named_alive = fs::read_to_string(work_dir.pid_file())
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .is_some_and(is_alive);
        if !named_alive || Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The pid in the work directory's pid file, when that process is alive and was started
/// with this work directory's master socket (so a reused pid is never taken for it).
fn master_from_pid_file(work_dir: &WorkDir) -> Option<u32> {
    let pid: u32 = fs::read_to_string(work_dir.pid_file())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let socket = work_dir.master_socket();
    let started_here = cmdline
        .split(|&b| b == 0)
        .any(|arg| Path::new(std::ffi::OsStr::from_bytes(arg)) == socket);
    (started_here && !is_zombie(pid)).then_some(pid)
}

/// Whether the process `pid` has a parent that runs haptor (this program, or one named
/// `haptor`; in tests, the test binary) and so still owns it. `false` for a process adopted
/// by init or a subreaper, and for one that is gone.
fn has_live_owner(pid: u32) -> bool {
    let Some(parent) = parent_pid(pid) else {
        return false;
    };
    // An orphan is adopted by init (or by a subreaper, whose program is not haptor's).
    if parent == 1 {
        return false;
    }
    let program = |pid: u32| fs::read_link(format!("/proc/{pid}/exe")).ok();
    match (program(parent), std::env::current_exe().ok()) {
        // Another build or install of haptor counts as an owner too.
        (Some(parent_program), Some(own)) => {
            parent_program == own
                || parent_program.file_name() == own.file_name()
                || parent_program.file_name() == Some(std::ffi::OsStr::new("haptor"))
        }
        // The parent's program cannot be read (another user's process): assume an owner.
        (None, _) => Path::new(&format!("/proc/{parent}")).exists(),
        (Some(_), None) => true,
    }
}

/// The parent of `pid`, from `/proc/PID/stat` (the field after the state, which follows
/// the parenthesised command name, itself free to contain spaces and parentheses).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// What [`settle_orphan`] found.
#[derive(Debug, PartialEq, Eq)]
enum Orphan {
    /// It answers as itself with the same worker and reload count twice in a row.
    Settled,
    /// It exited meanwhile.
    Gone,
    /// It did not answer steadily within [`START_TIMEOUT`].
    Unsettled,
}

/// How far apart the probes that must agree for an orphan to count as settled are.
const SETTLE_INTERVAL: Duration = Duration::from_millis(200);

/// Waits until the orphaned master `pid` has finished any reload it had been asked for: it
/// answers `show proc` on the work directory's socket as itself, with a current worker,
/// and two probes [`SETTLE_INTERVAL`] apart see the same worker and reload count.
async fn settle_orphan(pid: u32, work_dir: &WorkDir) -> Orphan {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last = None;
    loop {
        if !is_alive(pid) {
            return Orphan::Gone;
        }
        let seen = match exchange(&work_dir.master_socket(), "show proc", PROBE_TIMEOUT).await {
            Ok(reply) => parse_show_proc(&reply)
                .filter(|info| info.master_pid == pid)
                .and_then(|info| Some((info.current_worker?, info.reloads))),
            Err(_) => None,
        };
        if seen.is_some() && seen == last {
            return Orphan::Settled;
        }
        if Instant::now() >= deadline {
            return Orphan::Unsettled;
        }
        last = seen;
        tokio::time::sleep(SETTLE_INTERVAL).await;
    }
}

/// Whether `pid` runs (and has not merely exited unreaped).
fn is_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

/// Stops a master left running by a haptor that died, once a new one serves beside it:
/// SIGUSR1 (a soft stop: its workers finish their connections and exit, and the master with
/// them), then SIGKILL after [`STOP_TIMEOUT`]; returns once it is gone.
async fn stop_orphan(pid: u32, work_dir: &WorkDir) -> Result<(), LocalTargetError> {
    tracing::warn!(
        master_pid = pid,
        work_dir = %work_dir.root().display(),
        "stopping the haproxy left running by an earlier haptor on this work directory"
    );
    let alive = || is_alive(pid);
    if !alive() {
        return Ok(());
    }
    if let Err(e) = send_signal(pid, "USR1") {
        // It may have exited since it was last seen.
        return if alive() { Err(e) } else { Ok(()) };
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while alive() && Instant::now() < deadline {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    if alive() {
        send_signal(pid, "KILL")?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while alive() && Instant::now() < deadline {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    if alive() {
        return Err(LocalTargetError::AlreadyRunning {
            socket: work_dir.master_socket(),
            master_pid: pid,
        });
    }
    Ok(())
}

/// Whether `pid` has exited and waits for its parent to reap it.
fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after_name = stat[stat.rfind(')')? + 1..].to_string();
            after_name
                .split_whitespace()
                .next()
                .map(|state| state == "Z")
        })
        .unwrap_or(false)
}

/// Sends a signal by name with the system's `kill` command (the crate links no libc
/// bindings).
fn send_signal(pid: u32, signal: &str) -> Result<(), LocalTargetError> {
    let status = Command::new("kill")
        .arg("-s")
        .arg(signal)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|source| LocalTargetError::Spawn {
            binary: PathBuf::from("kill"),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(LocalTargetError::Signal {
            pid,
            signal: signal.to_string(),
        })
    }
}

/// The `[ALERT]` lines HAProxy logged after byte `offset` of its log (or its last lines).
pub(crate) fn read_alerts_since(log: &Path, offset: u64) -> String {
    let mut text = String::new();
    let Ok(mut file) = fs::File::open(log) else {
        return text;
    };
    if file.seek(SeekFrom::Start(offset)).is_err() {
        return text;
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return text;
    }
    text = super::sockets::alert_lines(&String::from_utf8_lossy(&bytes));
    text
}
