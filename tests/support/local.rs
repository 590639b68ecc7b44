//! Running `haptor local` as a user runs it, for the tests that drive the binary: backends
//! that answer with their name, plain HTTP/1.0 requests, the master CLI of the haproxy
//! haptor owns, and a [`Local`] that starts haptor on a temp copy of the quickstart (or any
//! folder) and leaves no process behind when dropped. Included by the test crates that
//! need it with `#[path = "support/local.rs"] mod local;` (it needs the haptor binary,
//! which benches do not have).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::support::free_port;

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A backend answering every request with its name; `requests` counts what it answered.
pub struct Backend {
    pub port: u16,
    pub requests: Arc<AtomicUsize>,
}

/// Starts a backend on a free loopback port.
pub fn backend(name: &'static str) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requests);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                counted.fetch_add(1, Ordering::SeqCst);
                let body = format!("hello from {name}\n");
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Backend { port, requests }
}

/// GET `path` with `Host: host`; returns (status, body), or None when nothing answered.
pub fn get(port: u16, host: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Some((status, body))
}

/// Polls `check` every 20 ms until it answers, failing the test after `timeout`.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn master_cli(work: &Path, command: &str) -> String {
    // Right after a reload the master may refuse a connection for a moment (seen with
    // haproxy 2.6 on a loaded machine): try again for up to 20 s.
    let socket = work.join("master.sock");
    let started = Instant::now();
    let mut stream = loop {
        match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(stream) => break stream,
            Err(_) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("master socket {}: {e}", socket.display()),
        }
    };
    stream
        .write_all(format!("{command}\n").as_bytes())
        .expect("write");
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

/// (current worker pid, reload count of the master) from `show proc`.
pub fn worker_and_reloads(work: &Path) -> (String, String) {
    let proc = master_cli(work, "show proc");
    let mut lines = proc.lines();
    let master = lines
        .find(|l| l.contains("master"))
        .unwrap_or_default()
        .split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string();
    let worker = proc
        .lines()
        .skip_while(|l| !l.starts_with("# workers"))
        .nth(1)
        .unwrap_or_default();
    (
        worker
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
        master,
    )
}

pub fn pid_alive(pid: &str) -> bool {
    !pid.is_empty() && Path::new("/proc").join(pid).exists()
}

/// The pids of live processes whose command line names `path`.
fn processes_naming(path: &Path) -> Vec<String> {
    let needle = path.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&needle).then_some(pid)
        })
        .collect()
}

/// Sends a signal (`-INT`, `-TERM`, `-KILL`, `-STOP`, `-CONT`) to a process.
pub fn signal(pid: &str, signal: &str) {
    Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("kill runs");
}

/// A running `haptor local`.
pub struct Local {
    pub child: Child,
    pub dir: PathBuf,
    pub http: u16,
    pub https: u16,
    pub debug: u16,
    pub metrics: u16,
    pub env: Vec<(String, String)>,
    /// Arguments added after the ones every run gets (`--work-dir DIR`, ...).
    pub args: Vec<String>,
    pub _tmp: tempfile::TempDir,
}

/// Starts `haptor local DIR` with its output appended to `haptor.out` and `haptor.log`
/// beside the folder.
fn spawn_haptor(
    dir: &Path,
    metrics: u16,
    debug: u16,
    env: &[(String, String)],
    args: &[String],
) -> Child {
    let append = |name: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.with_file_name(name))
            .expect("output file")
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_haptor"));
    command
        .args(["local", dir.to_str().expect("utf-8")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--debug-addr", &format!("127.0.0.1:{debug}")])
        .args(args)
        .env("HAPROXY_BIN", super::support::haproxy_binary())
        .stdin(Stdio::null())
        .stdout(append("haptor.out"))
        .stderr(append("haptor.log"));
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().expect("haptor local starts")
}

impl Local {
    /// Starts `haptor local` on `dir` (a folder inside `tmp`, which the `Local` keeps) as it
    /// is laid out, with its debug and metrics servers on free ports.
    pub fn start_in(tmp: tempfile::TempDir, dir: PathBuf) -> Local {
        let (debug, metrics) = (free_port(), free_port());
        let child = spawn_haptor(&dir, metrics, debug, &[], &[]);
        Local {
            child,
            dir,
            http: 0,
            https: 0,
            debug,
            metrics,
            env: Vec::new(),
            args: Vec::new(),
            _tmp: tmp,
        }
    }

    /// Starts haptor again on the same folder (after the previous one exited or was
    /// killed), with the same addresses.
    pub fn respawn(&mut self) {
        self.child = spawn_haptor(&self.dir, self.metrics, self.debug, &self.env, &self.args);
    }

    /// The haproxy work directory: `--work-dir` when given, else `DIR/.haptor`.
    pub fn work(&self) -> PathBuf {
        self.args
            .iter()
            .position(|a| a == "--work-dir")
            .and_then(|at| self.args.get(at + 1))
            .map(PathBuf::from)
            .unwrap_or_else(|| self.dir.join(".haptor"))
    }

    /// Writes a manifest file, with a modification time a scan cannot miss.
    pub fn write(&self, file: &str, text: &str) {
        let path = self.dir.join(file);
        std::fs::write(&path, text).expect("write manifest");
        // Make the change visible to a scanner comparing modification times within one tick.
        let later = std::time::SystemTime::now() + Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("touch");
    }

    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).expect("read manifest")
    }

    /// Points the first EndpointSlice of `apps.yaml` that uses port `from` (app-a's, unless
    /// it was moved before) at port `to`.
    pub fn move_first_endpoint_port(&self, from: u16, to: u16) {
        let apps = self.read("apps.yaml");
        let moved = apps.replacen(
            &format!("ports: [{{name: http, port: {from}}}]"),
            &format!("ports: [{{name: http, port: {to}}}]"),
            1,
        );
        assert_ne!(apps, moved, "apps.yaml has an EndpointSlice on port {from}");
        self.write("apps.yaml", &moved);
    }

    /// Where haptor's log goes (beside the manifest folder, not in it).
    pub fn log(&self) -> PathBuf {
        self.dir.with_file_name("haptor.log")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Where haptor's standard output goes.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.with_file_name("haptor.out")).unwrap_or_default()
    }

    pub fn debug_get(&self, path: &str) -> String {
        get(self.debug, "localhost", path)
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// A debug endpoint's status and JSON body.
    pub fn debug_json(&self, path: &str) -> Option<(u16, serde_json::Value)> {
        let (status, body) = get(self.debug, "localhost", path)?;
        Some((status, serde_json::from_str(&body).ok()?))
    }

    pub fn metrics_text(&self) -> String {
        get(self.metrics, "localhost", "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The pid of the haproxy master haptor started.
    pub fn master_pid(&self) -> String {
        std::fs::read_to_string(self.work().join("haproxy.pid"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self, timeout: Duration) {
        eventually("/readyz to answer 200", timeout, || {
            (get(self.debug, "localhost", "/readyz")?.0 == 200).then_some(())
        });
    }
}

impl Drop for Local {
    /// Stops haptor the way a user would (SIGINT), so it stops its haproxy; if it does not
    /// exit (a failed test), kills it and the haproxy it started, leaving no process behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(&self.pid(), "-INT");
            let started = Instant::now();
            while matches!(self.child.try_wait(), Ok(None))
                && started.elapsed() < Duration::from_secs(15)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let master = self.master_pid();
        if pid_alive(&master) {
            let _ = Command::new("kill").args(["-CONT", &master]).status();
            let _ = Command::new("pkill").args(["-9", "-P", &master]).status();
            let _ = Command::new("kill").args(["-9", &master]).status();
        }
        // Any haproxy still started on this work dir (a master the pid file no longer
        // names, a worker whose master is gone), found by its command line.
        for pid in processes_naming(&self.work()) {
            let _ = Command::new("kill").args(["-CONT", &pid]).status();
            let _ = Command::new("kill").args(["-9", &pid]).status();
        }
        if std::thread::panicking() {
            // A failed test shows what haptor said, which is otherwise discarded.
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- the last lines haptor local logged ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// How to lay out the folder a test runs `haptor local` on.
pub struct Setup {
    /// Backends the quickstart's Services app-a and app-b point at.
    pub app_a: u16,
    pub app_b: u16,
    /// Put the Ingress library (its listen addresses moved to free ports) in the folder
    /// as `config.yaml`; without it, haptor uses its embedded copy at the library's ports.
    pub library_in_folder: bool,
    /// Lines added at the top of the config's `spec:` (two-space indented).
    pub spec_prefix: String,
    /// Extra environment for haptor (`LOG_LEVEL`, ...).
    pub env: Vec<(String, String)>,
    /// Files written into the folder (replacing the quickstart's) before haptor starts.
    pub files: Vec<(String, String)>,
    /// Arguments added to `haptor local DIR --metrics-addr .. --debug-addr ..`.
    pub args: Vec<String>,
    /// Text replacements made in the library's config (each `from` must occur).
    pub library_edits: Vec<(String, String)>,
}

impl Setup {
    pub fn quickstart(app_a: u16, app_b: u16) -> Setup {
        Setup {
            app_a,
            app_b,
            library_in_folder: true,
            // Drift repair within the test's patience.
            spec_prefix: "  dataplane:\n    driftPreventionInterval: 500ms\n".into(),
            env: Vec::new(),
            files: Vec::new(),
            args: Vec::new(),
            library_edits: Vec::new(),
        }
    }

    /// Starts haptor on a temp copy of the quickstart laid out as asked.
    pub fn start(self) -> Local {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("quickstart");
        std::fs::create_dir(&dir).expect("mkdir");
        for file in ["apps.yaml", "ingresses.yaml", "tls.yaml"] {
            let text = std::fs::read_to_string(repo("examples/quickstart").join(file))
                .expect("quickstart file");
            std::fs::write(
                dir.join(file),
                text.replace("19001", &self.app_a.to_string())
                    .replace("19002", &self.app_b.to_string()),
            )
            .expect("copy");
        }
        for (file, text) in &self.files {
            std::fs::write(dir.join(file), text).expect("write a test file");
        }
        let (http, https, debug, metrics) = if self.library_in_folder {
            let (http, https, status, debug, metrics) = (
                free_port(),
                free_port(),
                free_port(),
                free_port(),
                free_port(),
            );
            let library =
                std::fs::read_to_string(repo("deploy/library/ingress.yaml")).expect("library");
            let library = self.library_edits.iter().fold(library, |text, (from, to)| {
                assert!(text.contains(from.as_str()), "the library holds {from:?}");
                text.replacen(from.as_str(), to, 1)
            });
            let config = library
                .replace("127.0.0.1:18080", &format!("127.0.0.1:{http}"))
                .replace("127.0.0.1:18443", &format!("127.0.0.1:{https}"))
                .replace("127.0.0.1:18404", &format!("127.0.0.1:{status}"))
                .replacen("spec:\n", &format!("spec:\n{}", self.spec_prefix), 1);
            std::fs::write(dir.join("config.yaml"), config).expect("config");
            (http, https, debug, metrics)
        } else {
            (18080, 18443, free_port(), free_port())
        };
        let child = spawn_haptor(&dir, metrics, debug, &self.env, &self.args);
        Local {
            child,
            dir,
            http,
            https,
            debug,
            metrics,
            env: self.env,
            args: self.args,
            _tmp: tmp,
        }
    }
}

/// The value of the Prometheus sample line that starts with `series` (name plus labels).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}
