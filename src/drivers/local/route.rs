//! Which socket carries the local target's runtime API commands, and how a dead or replaced
//! runtime socket is found and routed around.
//!
//! Runtime commands normally go to `runtime.sock`, the `stats socket` the target adds to
//! `global`. Another process may remove or replace that file under a running HAProxy (a
//! cleanup script, a second HAProxy configured with the same path), leaving a file nobody
//! listens on, or one somebody else answers on. A reload does not bring the path back:
//! HAProxy 2.6's master hands the old worker's listeners to the new worker, which matches a
//! Unix socket by its path and so inherits the old socket's file descriptor (still bound to
//! the unlinked file) instead of binding the path again. Deleting the file does not help
//! either; only a new HAProxy binds it again (`haptor local` starts one when the file is
//! gone, not when it is dead), so reloading to reach the worker never ends.
//!
//! So the target does not try to repair the path: it routes around it. The master CLI
//! forwards a command prefixed with `@1` to the current worker over the master's own socket
//! pair with that worker, whatever happened to the path, payloads (`add map ... <<`)
//! included, and answers with the worker's reply. The runtime socket is trusted by the
//! identity of its file (device and inode): before the first runtime change, and again
//! whenever the file at the path is another one, the target asks it `show info` and the
//! master `show proc`, and uses it only when it answers as one of the master's workers. A
//! file that is missing, refuses connections or answers as another process sends the
//! runtime commands to the worker through the master instead, until a file that passes the
//! check is at the path again; a trusted socket that stops answering in the middle of a
//! deployment does the same from the command that failed. The change is live either way
//! (no reload), and the switch is told once: a warning, which the deployment also reports
//! as `degraded`, when the commands start going through the master, and an info line when
//! the runtime socket answers again.
//!
//! The direct socket stays the first choice because it is HAProxy's runtime API as
//! documented, keeps map replacements of several payloads off the master (one process,
//! which stops answering while it re-executes itself on a reload), and because checking it
//! is what finds a broken path to report at all.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The identity of the socket file at a path: its device and inode. A bound Unix socket
/// holds its inode, so no other file takes that number while the socket lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SocketFile {
    device: u64,
    inode: u64,
}

impl SocketFile {
    /// The socket file at `path` (symbolic links followed, as a connection follows them);
    /// `None` when there is none, or the path holds something else.
    pub(crate) fn at(path: &Path) -> Option<SocketFile> {
        let metadata = std::fs::metadata(path).ok()?;
        metadata.file_type().is_socket().then(|| SocketFile {
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }
}

/// Where runtime commands go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The runtime socket, `runtime.sock`.
    Direct,
    /// The master CLI, which forwards `@1 <command>` to the current worker.
    ThroughMaster,
}

impl Route {
    /// The request to send on this route's socket for a runtime `command` (a payload, on
    /// the lines after the first, goes along unchanged).
    pub(crate) fn request(self, command: &str) -> String {
        match self {
            Route::Direct => command.to_string(),
            Route::ThroughMaster => format!("@1 {command}"),
        }
    }
}

/// A change of route to tell, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteChange {
    /// Commands start going through the master: warn, and report the deployment degraded.
    Degraded,
    /// The runtime socket answers again.
    Recovered,
}

/// What the target knows of its runtime socket, across deployments.
#[derive(Debug, Default)]
pub(crate) struct RouteState {
    /// The socket file last found to answer as a worker of the master.
    trusted: Option<SocketFile>,
    /// Commands go through the master (and that was told).
    through_master: bool,
}

impl RouteState {
    /// The route when the file at the path is `file`, if no check is needed: the trusted
    /// file is still there. `None`: check it first.
    pub(crate) fn known(&self, file: Option<SocketFile>) -> Option<Route> {
        (file.is_some() && file == self.trusted).then_some(Route::Direct)
    }

    /// The socket `file` answered as one of the master's workers: use it.
    pub(crate) fn trust(&mut self, file: Option<SocketFile>) -> (Route, Option<RouteChange>) {
        self.trusted = file;
        let change = std::mem::take(&mut self.through_master).then_some(RouteChange::Recovered);
        (Route::Direct, change)
    }

    /// The socket is missing, dead or someone else's: go through the master.
    pub(crate) fn distrust(&mut self) -> (Route, Option<RouteChange>) {
        self.trusted = None;
        let change =
            (!std::mem::replace(&mut self.through_master, true)).then_some(RouteChange::Degraded);
        (Route::ThroughMaster, change)
    }
}

/// The pid in a `show info` reply (`Pid: 4242`).
pub(crate) fn info_pid(reply: &str) -> Option<u32> {
    reply
        .lines()
        .find_map(|line| line.strip_prefix("Pid:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Whether a `show info` reply comes from one of `workers` (the master's, from `show proc`).
pub(crate) fn answers_as_worker(reply: &str, workers: &[u32]) -> bool {
    info_pid(reply).is_some_and(|pid| workers.contains(&pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: SocketFile = SocketFile {
        device: 1,
        inode: 10,
    };
    const B: SocketFile = SocketFile {
        device: 1,
        inode: 11,
    };

    #[test]
    fn a_socket_file_is_checked_before_its_first_use_and_whenever_another_file_takes_the_path() {
        let mut state = RouteState::default();
        assert_eq!(state.known(Some(A)), None, "never checked");
        assert_eq!(state.trust(Some(A)), (Route::Direct, None));
        assert_eq!(state.known(Some(A)), Some(Route::Direct));
        assert_eq!(state.known(Some(B)), None, "replaced");
        assert_eq!(state.known(None), None, "missing");
    }

    #[test]
    fn going_through_the_master_is_told_once_and_so_is_the_socket_answering_again() {
        let mut state = RouteState::default();
        state.trust(Some(A));
        assert_eq!(
            state.distrust(),
            (Route::ThroughMaster, Some(RouteChange::Degraded))
        );
        assert_eq!(state.distrust(), (Route::ThroughMaster, None));
        assert_eq!(
            state.known(Some(A)),
            None,
            "a distrusted file is checked again"
        );
        assert_eq!(
            state.trust(Some(B)),
            (Route::Direct, Some(RouteChange::Recovered))
        );
        assert_eq!(state.trust(Some(B)), (Route::Direct, None));
        assert_eq!(
            state.distrust(),
            (Route::ThroughMaster, Some(RouteChange::Degraded)),
            "a second breakage is told again"
        );
    }

    #[test]
    fn only_the_first_line_of_a_command_through_the_master_is_prefixed() {
        assert_eq!(
            Route::ThroughMaster.request("add map @2 maps/a.map <<\nk v\n\n"),
            "@1 add map @2 maps/a.map <<\nk v\n\n"
        );
        assert_eq!(Route::Direct.request("show map"), "show map");
    }

    #[test]
    fn a_socket_answers_as_ours_only_with_the_pid_of_one_of_the_masters_workers() {
        let info = "Name: HAProxy\nVersion: 2.6.12-1+deb12u4\nPid: 4242\nUptime: 0d 0h00m05s\n";
        assert_eq!(info_pid(info), Some(4242));
        assert!(answers_as_worker(info, &[4100, 4242]));
        assert!(!answers_as_worker(info, &[4100]), "another process");
        assert!(!answers_as_worker("\n", &[4242]), "no pid");
        assert!(!answers_as_worker("Unknown command.\n", &[]));
    }

    #[test]
    fn only_a_socket_file_has_a_socket_identity() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.sock");
        assert_eq!(SocketFile::at(&path), None, "missing");
        std::fs::write(&path, "").expect("a plain file");
        assert_eq!(SocketFile::at(&path), None, "not a socket");
        std::fs::remove_file(&path).expect("remove");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let first = SocketFile::at(&path).expect("a socket");
        drop(listener);
        assert_eq!(
            SocketFile::at(&path),
            Some(first),
            "a dead socket is the same file"
        );
        let other = dir.path().join("other.sock");
        let _other = std::os::unix::net::UnixListener::bind(&other).expect("bind");
        std::fs::rename(&other, &path).expect("replace");
        assert_ne!(SocketFile::at(&path), Some(first), "replaced");
    }
}
