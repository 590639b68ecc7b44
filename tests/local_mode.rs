//! `haptor local` end to end, as a user runs it: the binary on a temp copy of the quickstart,
//! real haproxy, real HTTP and HTTPS traffic to backends started by the test, and the folder
//! edited while it runs. Ports are picked free so tests can run side by side; the Ingress
//! library is used with its listen addresses moved to those ports.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::free_port;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A backend answering every request with its name.
fn backend(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let body = format!("hello from {name}\n");
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// GET `path` with `Host: host`; returns (status, body), or None when nothing answered.
fn get(port: u16, host: &str, path: &str) -> Option<(u16, String)> {
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

fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
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

fn master_cli(work: &Path, command: &str) -> String {
    let mut stream =
        std::os::unix::net::UnixStream::connect(work.join("master.sock")).expect("master socket");
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
fn worker_and_reloads(work: &Path) -> (String, String) {
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

struct Local {
    child: Child,
    dir: PathBuf,
    http: u16,
    https: u16,
    debug: u16,
    _tmp: tempfile::TempDir,
}

impl Local {
    fn work(&self) -> PathBuf {
        self.dir.join(".haptor")
    }
    fn write(&self, file: &str, text: &str) {
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
    /// Where haptor's log goes (beside the manifest folder, not in it).
    fn log(&self) -> PathBuf {
        self.dir.with_file_name("haptor.log")
    }

    fn debug_get(&self, path: &str) -> String {
        get(self.debug, "localhost", path)
            .map(|(_, body)| body)
            .unwrap_or_default()
    }
}

impl Drop for Local {
    /// Stops haptor the way a user would (SIGINT), so it stops its haproxy; if it does not
    /// exit (a failed test), kills it and the haproxy it started, leaving no process behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let started = Instant::now();
            while matches!(self.child.try_wait(), Ok(None))
                && started.elapsed() < Duration::from_secs(15)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let master = std::fs::read_to_string(self.work().join("haproxy.pid"))
            .unwrap_or_default()
            .trim()
            .to_string();
        if pid_alive(&master) {
            let _ = Command::new("pkill").args(["-9", "-P", &master]).status();
            let _ = Command::new("kill").args(["-9", &master]).status();
        }
        if std::thread::panicking() {
            // A failed test shows what haptor said, which is otherwise discarded.
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- the last lines haptor local logged ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// A temp copy of the quickstart whose Services point at the given backend ports, with the
/// Ingress library (moved to free ports) as the folder's config.
fn start(app_a: u16, app_b: u16) -> Local {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("quickstart");
    std::fs::create_dir(&dir).expect("mkdir");
    for file in ["apps.yaml", "ingresses.yaml", "tls.yaml"] {
        let text = std::fs::read_to_string(repo("examples/quickstart").join(file))
            .expect("quickstart file");
        std::fs::write(
            dir.join(file),
            text.replace("19001", &app_a.to_string())
                .replace("19002", &app_b.to_string()),
        )
        .expect("copy");
    }
    let (http, https, status, debug) = (free_port(), free_port(), free_port(), free_port());
    let library = std::fs::read_to_string(repo("deploy/library/ingress.yaml")).expect("library");
    let config = library
        .replace("127.0.0.1:18080", &format!("127.0.0.1:{http}"))
        .replace("127.0.0.1:18443", &format!("127.0.0.1:{https}"))
        .replace("127.0.0.1:18404", &format!("127.0.0.1:{status}"))
        // Drift repair within the test's patience.
        .replacen(
            "spec:\n",
            "spec:\n  dataplane:\n    driftPreventionInterval: 500ms\n",
            1,
        );
    std::fs::write(dir.join("config.yaml"), config).expect("config");
    let child = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args([
            "local",
            dir.to_str().expect("utf-8"),
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--debug-addr", &format!("127.0.0.1:{debug}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.path().join("haptor.log")).expect("log file"))
        .spawn()
        .expect("haptor local starts");
    Local {
        child,
        dir,
        http,
        https,
        debug,
        _tmp: tmp,
    }
}

fn pid_alive(pid: &str) -> bool {
    !pid.is_empty() && Path::new("/proc").join(pid).exists()
}

#[test]
fn haptor_local_routes_reconfigures_live_and_stops_cleanly() {
    let (a, b) = (backend("app-a"), backend("app-b"));
    let mut local = start(a, b);

    // Routing by host and path; unknown hosts get 404.
    let body = eventually("a.localhost routed", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    assert_eq!(body.1, "hello from app-a\n");
    assert_eq!(
        get(local.http, "a.localhost", "/api/x").map(|r| r.1),
        Some("hello from app-b\n".into())
    );
    assert_eq!(
        get(local.http, "b.localhost", "/").map(|r| r.1),
        Some("hello from app-b\n".into())
    );
    assert_eq!(
        get(local.http, "nope.localhost", "/").map(|r| r.0),
        Some(404)
    );

    // Editing an EndpointSlice moves traffic without a reload.
    let before = worker_and_reloads(&local.work());
    let apps = std::fs::read_to_string(local.dir.join("apps.yaml")).expect("apps");
    let moved = apps.replacen(
        &format!("ports: [{{name: http, port: {a}}}]"),
        &format!("ports: [{{name: http, port: {b}}}]"),
        1,
    );
    assert_ne!(apps, moved, "the test edits the app-a EndpointSlice");
    local.write("apps.yaml", &moved);
    eventually(
        "a.localhost moved to app-b",
        Duration::from_secs(10),
        || get(local.http, "a.localhost", "/").filter(|(_, body)| body == "hello from app-b\n"),
    );
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "an endpoint change must not reload haproxy"
    );

    // A new Ingress to an existing Service only adds map entries: no reload at all.
    local.write(
        "new-route.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: c, namespace: default}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: c.localhost\n      http:\n        paths:\n          - {path: /, pathType: Prefix, backend: {service: {name: app-b, port: {number: 80}}}}\n",
    );
    eventually("c.localhost routed", Duration::from_secs(15), || {
        get(local.http, "c.localhost", "/").filter(|(s, _)| *s == 200)
    });
    assert_eq!(
        worker_and_reloads(&local.work()),
        before,
        "a route to an existing backend is added live"
    );

    // A new Ingress with a new Service (a new backend): exactly one reload.
    local.write(
        "new-app.yaml",
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: app-d, namespace: default}}\nspec:\n  ports: [{{name: http, port: 80}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-d-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: app-d}}\nports: [{{name: http, port: {a}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: d, namespace: default}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: d.localhost\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: app-d, port: {{number: 80}}}}}}}}\n"
        ),
    );
    eventually("d.localhost routed", Duration::from_secs(15), || {
        get(local.http, "d.localhost", "/").filter(|(_, body)| body == "hello from app-a\n")
    });
    let after = worker_and_reloads(&local.work());
    assert_ne!(after.0, before.0, "a new worker serves after the reload");
    let reloads = |r: &str| r.parse::<u64>().unwrap_or(u64::MAX);
    assert_eq!(
        reloads(&after.1),
        reloads(&before.1) + 1,
        "exactly one reload"
    );

    // TLS with the Secret's certificate, chosen by SNI.
    let output = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{}", local.https),
            "-servername",
            "secure.example",
        ])
        .stdin(Stdio::null())
        .output();
    if let Ok(output) = output {
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains("CN = secure.example") || text.contains("CN=secure.example"),
            "{text}"
        );
    }

    // A broken template: reported with template and line, old routes keep answering.
    let config = std::fs::read_to_string(local.dir.join("config.yaml")).expect("config");
    let broken = config.replacen(
        "    template: |\n      global\n",
        "    template: |\n      global\n      {{no_such_helper 1}}\n",
        1,
    );
    assert_ne!(config, broken, "the test breaks the haproxy.cfg template");
    local.write("config.yaml", &broken);
    let errors = eventually(
        "the template error in /debug/vars/errors",
        Duration::from_secs(10),
        || {
            let errors = local.debug_get("/debug/vars/errors");
            errors.contains("haproxy.cfg").then_some(errors)
        },
    );
    assert!(
        errors.contains("line 2"),
        "the error names the template line: {errors}"
    );
    assert_eq!(
        get(local.http, "b.localhost", "/").map(|r| r.1),
        Some("hello from app-b\n".into())
    );

    // The deployed haproxy.cfg edited behind haptor's back: the DriftMonitor restores it.
    let cfg_path = local.work().join("haproxy.cfg");
    let deployed = std::fs::read_to_string(&cfg_path).expect("deployed config");
    std::fs::write(&cfg_path, format!("{deployed}\n# edited by hand\n")).expect("tamper");
    eventually("the drift to be repaired", Duration::from_secs(15), || {
        (std::fs::read_to_string(&cfg_path).ok()? == deployed).then_some(())
    });

    // haproxy killed behind haptor's back: haptor starts it again and it serves the last config.
    let killed = std::fs::read_to_string(local.work().join("haproxy.pid"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let killed_worker = worker_and_reloads(&local.work()).0;
    Command::new("kill")
        .args(["-9", &killed, &killed_worker])
        .status()
        .expect("kill -9");
    eventually("haproxy restarted", Duration::from_secs(30), || {
        let master = std::fs::read_to_string(local.work().join("haproxy.pid"))
            .unwrap_or_default()
            .trim()
            .to_string();
        (master != killed && pid_alive(&master)).then_some(())
    });
    eventually("routes answer again", Duration::from_secs(30), || {
        get(local.http, "d.localhost", "/").filter(|(s, _)| *s == 200)
    });

    // SIGINT stops everything, haproxy included.
    let master = std::fs::read_to_string(local.work().join("haproxy.pid"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let workers = worker_and_reloads(&local.work()).0;
    assert!(pid_alive(&master));
    let pid = local.child.id().to_string();
    Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    let status = eventually("haptor local to exit", Duration::from_secs(20), || {
        local.child.try_wait().ok().flatten()
    });
    assert!(status.success(), "exit status {status}");
    eventually("haproxy gone", Duration::from_secs(5), || {
        (!pid_alive(&master) && !pid_alive(&workers)).then_some(())
    });
}

#[test]
fn a_malformed_manifest_is_reported_with_file_and_line_and_the_rest_keeps_serving() {
    let (a, b) = (backend("app-a"), backend("app-b"));
    let local = start(a, b);
    eventually("a.localhost routed", Duration::from_secs(30), || {
        get(local.http, "a.localhost", "/").filter(|(s, _)| *s == 200)
    });
    local.write(
        "ingresses.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: [broken\n",
    );
    let errors = eventually("the manifest error", Duration::from_secs(10), || {
        let errors = local.debug_get("/debug/vars/errors");
        errors.contains("ingresses.yaml:").then_some(errors)
    });
    assert!(errors.contains("malformed YAML"), "{errors}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        get(local.http, "a.localhost", "/").map(|r| r.1),
        Some("hello from app-a\n".into()),
        "the last good Ingresses keep serving"
    );
}
