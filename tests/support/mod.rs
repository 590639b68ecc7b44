//! Helpers shared by the integration tests and the benches (which include this file with
//! `#[path]`): the binaries they run and loopback ports for the servers they start. Each
//! test crate uses a part of it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};

/// The ports handed out lie below the kernel's ephemeral range (32768–60999 by default).
const FIRST_PORT: u16 = 20_000;
const PORT_COUNT: u16 = 12_000;

/// A loopback port for a server the test starts later (a HAProxy frontend, a haptor
/// listener). A port from `bind(0)` is in the ephemeral range, where the tests' own
/// listeners and every client socket are given ports too, so between releasing it and the
/// server binding it another socket could take it ("Address already in use"). Ports from
/// here come from below that range, differ from call to call, and one in use is skipped.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Test binaries of one run start from different places.
    let base = (std::process::id() % u32::from(PORT_COUNT)) as u16;
    loop {
        let n = NEXT.fetch_add(7, Ordering::Relaxed);
        let port = FIRST_PORT + (base.wrapping_add(n) % PORT_COUNT);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The haproxy the tests run: `HAPTOR_HAPROXY_BIN`, else the Debian package's, else the one
/// on `PATH`. The library holds the one definition, so that its own unit tests and the
/// benches find the same binary.
pub use haptor::drivers::haproxy_check::haproxy_binary;

/// Runs the haptor binary built for these tests and waits for it. Its commands that run
/// haproxy run the tests' one ([`haproxy_binary`], through `HAPROXY_BIN`).
pub fn haptor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(args)
        .env("HAPROXY_BIN", haproxy_binary())
        .output()
        .expect("the haptor binary runs")
}

/// The HAProxy line of the haproxy the tests run (`HAPTOR_HAPROXY_BIN`, else the installed).
pub fn haproxy_line() -> haptor::pure::haproxy::HaproxyVersion {
    let binary = haproxy_binary();
    let output = Command::new(&binary)
        .arg("-v")
        .output()
        .unwrap_or_else(|error| panic!("{} -v: {error}", binary.display()));
    haptor::pure::haproxy::HaproxyVersion::from_haproxy_v(&String::from_utf8_lossy(&output.stdout))
        .unwrap_or_else(|| panic!("{} -v prints no version", binary.display()))
}

/// A haproxy of `line` on this machine: the one the tests run when it is of that line, else
/// `HAPTOR_HAPROXY_BIN_<X>_<Y>` (scripts/test exports what scripts/test-haproxy prints),
/// else the one scripts/test-haproxy makes from the Debian suite of that line (cached per
/// machine). For a process that stands for the controller image, whose haproxy is the
/// chart's HAProxy line.
pub fn haproxy_of_line(line: haptor::pure::haproxy::HaproxyVersion) -> std::path::PathBuf {
    if haproxy_line() == line {
        return haproxy_binary();
    }
    let variable = format!("HAPTOR_HAPROXY_BIN_{}_{}", line.major, line.minor);
    if let Some(path) = std::env::var_os(&variable) {
        return path.into();
    }
    let suite = match (line.major, line.minor) {
        (3, 0) => "trixie",
        (3, 2) => "forky",
        _ => panic!("no Debian suite carries HAProxy {line} for scripts/test-haproxy to make"),
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test-haproxy");
    let output = Command::new(&script)
        .arg(suite)
        .output()
        .unwrap_or_else(|error| panic!("{}: {error}", script.display()));
    let printed = String::from_utf8_lossy(&output.stdout);
    printed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{variable}=")))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "scripts/test-haproxy {suite} made no haproxy {line}: {printed}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

/// Standard output and standard error of a finished run, in that order.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The launcher of the servers a test starts (etcd and kube-apiserver, haproxy and
/// dataplaneapi). Arguments: a directory of the test's own, then the names of the servers;
/// each runs `DIR/NAME.sh` (which `exec`s the server, so the pid written to `DIR/NAME.pid` is
/// the server's) with its output in `DIR/NAME.log`. When its standard input closes (the
/// test dropped the [`Launcher`], exited or was killed) it kills the servers, runs
/// `DIR/cleanup.sh` if there is one (for processes a server started itself), reaps them and
/// removes the directory.
const LAUNCHER: &str = r#"dir=$1; shift
pids=
for name in "$@"; do
  sh "$dir/$name.sh" </dev/null >"$dir/$name.log" 2>&1 &
  pids="$pids $!"
  echo $! >"$dir/$name.pid.new" && mv "$dir/$name.pid.new" "$dir/$name.pid"
done
cat >/dev/null
kill -KILL $pids 2>/dev/null
test -f "$dir/cleanup.sh" && sh "$dir/cleanup.sh" 2>/dev/null
wait
rm -rf "$dir"
"#;

/// A running [`LAUNCHER`] and the write end of its standard input. Dropping it stops the
/// servers and waits until they are gone and the directory is removed.
pub struct Launcher {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Launcher {
    /// Starts the servers `names` of `dir` (see [`LAUNCHER`]); from here on the launcher
    /// owns `dir`. Its own messages go to `DIR/launcher.log`.
    pub fn start(dir: &Path, names: &[&str]) -> Launcher {
        let log = std::fs::File::create(dir.join("launcher.log")).expect("launcher.log");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(LAUNCHER)
            .arg("haptor-test-launcher")
            .arg(dir)
            .args(names)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("sh runs the test's launcher");
        let stdin = child.stdin.take();
        Launcher { child, stdin }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// A self-signed ECDSA certificate for `host` and its key, made by openssl (which
/// `./scripts/test` installs): (certificate PEM, key PEM).
pub fn self_signed_pem(host: &str) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "30", "-subj"])
        .arg(format!("/CN={host}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl made no certificate for {host}");
    (
        std::fs::read_to_string(&cert).expect("certificate"),
        std::fs::read_to_string(&key).expect("key"),
    )
}

/// The serial of a PEM certificate, as `openssl x509 -serial` prints it (`serial=…`).
pub fn serial_of_pem(pem: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(pem.as_bytes())
        .expect("write the certificate");
    let output = child.wait_with_output().expect("the serial");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// The serial of the certificate the TLS server at `address` presents for SNI `host`;
/// `None` when no certificate came back.
pub fn served_serial(address: &str, host: &str) -> Option<String> {
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {address} -servername {host} </dev/null 2>/dev/null | openssl x509 -noout -serial"
        ))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
    text.starts_with("serial=").then_some(text)
}
