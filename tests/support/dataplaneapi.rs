//! A real HAProxy Data Plane API in front of a real haproxy, for the tests of the
//! `DataplaneTarget` against the API itself rather than against our stub of it. The
//! dataplaneapi binary is found through `TEST_ASSET_DATAPLANEAPI`.
//!
//! The peer is the chart's HAProxy pod, not a copy of it: haproxy is started by the chart's
//! `start-haproxy.sh` (master-worker mode, `-W -S`, its stderr copied to `haproxy.stderr`),
//! the API runs on the chart's `dataplaneapi.yaml` and reloads haproxy with the chart's
//! `reload.sh` (SIGUSR2 to the master, then waiting until the new worker serves, or failing
//! with HAProxy's message: HAProxy 2.6's master CLI `reload` answers nothing, so the API's
//! `reload_cmd` route is the one that works there), all read from
//! `deploy/chart/haptor/files/` with only what a pod's `init.sh` fills in (the pod's name,
//! the API's port, the haproxy binary) and what a test's pod differs in (the API's listen
//! address, the directory when it is not `/etc/haproxy`) replaced ([`write_api_files`]).
//!
//! The API reaches the runtime API through the configuration's own `stats socket`, not the
//! master socket: on 2.6 the master CLI refuses the `set severity-output number` that
//! client-native prefixes to every command routed through it, and every runtime call then
//! answers 404 "no data for be/s1". The master socket serves `reload.sh` and the tests
//! (reload counts). Each peer has a directory of its own that plays the pod's
//! `/etc/haproxy`: the configuration, `maps/`, `ssl/` and `general/` storage, and a userlist
//! file with the peer's credentials.
//!
//! Both processes run under a `sh` launcher whose standard input is a pipe this process
//! holds; when the peer is dropped or the test process dies, the pipe closes and the
//! launcher kills them and removes the directory, so nothing is left behind.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::support::{Launcher, free_port, haproxy_binary};

/// The environment variable naming the dataplaneapi binary.
pub const DATAPLANEAPI_VAR: &str = "TEST_ASSET_DATAPLANEAPI";

/// The dataplaneapi binary, if this run has one.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os(DATAPLANEAPI_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// How the API is told where maps live. HAProxy names a loaded map by the path the
/// configuration wrote (`maps/hosts.map` under a `default-path`), and the API's runtime
/// map endpoints find a map by `<maps_dir>/<name>.map`: only `maps` relative to the
/// configuration's directory (the API's working directory) makes the two agree for the
/// relative paths haptor's templates write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapsDir {
    /// `maps_dir: maps`, the API started in the configuration's directory.
    Relative,
    /// `maps_dir: <root>/maps`, as the API's own examples have it.
    Absolute,
}

/// A running haproxy + dataplaneapi pair.
pub struct DataplanePeer {
    dir: PathBuf,
    launcher: Option<Launcher>,
    /// `http://127.0.0.1:PORT/v3`.
    pub url: String,
    pub user: String,
    pub password: String,
}

impl DataplanePeer {
    /// Starts haproxy on `initial` (which must bind only loopback addresses and may name
    /// `ROOT` for the peer's directory) and the API in front of it, and waits until both
    /// answer.
    pub fn start(initial: &str) -> DataplanePeer {
        DataplanePeer::start_with(initial, MapsDir::Relative)
    }

    /// [`DataplanePeer::start`] with the API's maps directory given as `maps_dir`.
    pub fn start_with(initial: &str, maps_dir: MapsDir) -> DataplanePeer {
        let api = binary().unwrap_or_else(|| {
            panic!(
                "{DATAPLANEAPI_VAR} names no dataplaneapi binary: these tests need the real Data Plane API"
            )
        });
        let dir = tempfile::Builder::new()
            .prefix("haptor-dpa-")
            .tempdir()
            .expect("a temp dir for the Data Plane API peer")
            .keep();
        let port = free_port();
        let password = format!("pw-{port}");
        std::fs::write(
            dir.join("haproxy.cfg"),
            initial.replace("ROOT", &dir.display().to_string()),
        )
        .expect("haproxy.cfg");
        write_api_files(
            &dir,
            &dir.display().to_string(),
            &ApiListener {
                name: format!("haptor-test-{port}"),
                host: "127.0.0.1".to_string(),
                port,
            },
            &password,
            maps_dir,
        );
        let d = |p: &str| dir.join(p).display().to_string();
        // The launcher's server script runs the chart's, as the haproxy container does.
        std::fs::write(
            dir.join("haproxy.sh"),
            format!(
                "exec sh {start} {bin}\n",
                start = d("start-haproxy.sh"),
                bin = haproxy_binary().display(),
            ),
        )
        .expect("haproxy.sh");

        // haproxy forks its workers itself: they are killed by command line.
        std::fs::write(
            dir.join("cleanup.sh"),
            format!(
                "kill -KILL $(cat {pid}) 2>/dev/null\npkill -KILL -f {cfg}\n",
                pid = d("haproxy.pid"),
                cfg = d("haproxy.cfg"),
            ),
        )
        .expect("cleanup.sh");
        // haproxy first: the API reads the configuration's version and the master socket.
        std::fs::write(
            dir.join("dataplaneapi.sh"),
            format!(
                "while ! test -S {master}; do sleep 0.05; done\ncd {root} && exec {api} -f {yaml}\n",
                root = dir.display(),
                master = d("master.sock"),
                api = api.display(),
                yaml = d("dataplaneapi.yaml"),
            ),
        )
        .expect("dataplaneapi.sh");
        let launcher = Launcher::start(&dir, &["haproxy", "dataplaneapi"]);
        let mut peer = DataplanePeer {
            url: format!("http://127.0.0.1:{port}/v3"),
            dir,
            launcher: Some(launcher),
            user: "admin".to_string(),
            password,
        };
        peer.wait_ready();
        peer
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let port: u16 = self
            .url
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/v3")
            .parse()
            .expect("the peer's port");
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && self.reloads().is_some()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Data Plane API peer did not start in 30 s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The peer's directory: the pod's `/etc/haproxy`.
    pub fn root(&self) -> &Path {
        &self.dir
    }

    /// The configuration file as it is on disk now.
    pub fn config_on_disk(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.cfg")).unwrap_or_default()
    }

    /// A file under the peer's directory, if it exists.
    pub fn file(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(path)).ok()
    }

    /// One master CLI command's answer.
    pub fn master(&self, command: &str) -> Option<String> {
        cli(&self.dir.join("master.sock"), command)
    }

    /// One runtime API command, on the `stats socket ROOT/runtime.sock` the configurations
    /// of these tests declare.
    pub fn runtime(&self, command: &str) -> Option<String> {
        cli(&self.dir.join("runtime.sock"), command)
    }

    /// Reloads haproxy the way the API does (the chart's `reload.sh`).
    pub fn reload(&self) {
        let output = Command::new("sh")
            .arg(self.dir.join("reload.sh"))
            .output()
            .expect("sh runs reload.sh");
        assert!(
            output.status.success(),
            "reload.sh failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
    }

    /// How many times the master has reloaded (`show proc`), once it answers.
    pub fn reloads(&self) -> Option<u64> {
        master_reloads(&self.dir.join("master.sock"))
    }

    /// Waits until the master has reloaded at least `count` times and a worker of the new
    /// generation answers on the runtime API.
    pub fn wait_reloads(&self, count: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.reloads().unwrap_or(0);
            if now >= count
                && self
                    .master("@1 show info")
                    .is_some_and(|i| i.contains("Pid:"))
            {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "haproxy reloaded {now} times, expected {count}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tails of both logs, for assertion messages.
    pub fn logs(&self) -> String {
        ["haproxy", "dataplaneapi"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.join(format!("{name}.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                format!("--- {name}.log\n{tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The API's access log lines (method and path of each request it served): none with the
    /// chart's `log_types: [app]`.
    pub fn access_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("dataplaneapi.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("HTTP/1.1\\\""))
            .map(str::to_string)
            .collect()
    }
}

/// Where the API listens, and the name it reports.
pub struct ApiListener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// The chart's directory of the files its HAProxy pods run, relative to the repository.
pub const CHART_FILES: &str = "deploy/chart/haptor/files";

/// A file of the chart's HAProxy pods ([`CHART_FILES`]), as the chart's ConfigMap carries it.
pub fn chart_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CHART_FILES)
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` (the chart's `file`) with every `from` replaced by `to`; `from` must be there, so
/// that a chart file that changes shape fails here rather than silently running unreplaced.
fn replaced(text: &str, file: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "{CHART_FILES}/{file} no longer holds {from:?}, which the tests' pods replace"
    );
    text.replace(from, to)
}

/// A chart file for a pod whose `/etc/haproxy` is `seen_as`.
fn chart_file_in(name: &str, seen_as: &str) -> String {
    let text = chart_file(name);
    if seen_as == "/etc/haproxy" {
        text
    } else {
        replaced(&text, name, "/etc/haproxy", seen_as)
    }
}

/// The API's configuration: the chart's `dataplaneapi.yaml` for a pod whose `/etc/haproxy`
/// is `seen_as`, with what its `init.sh` fills in (the pod's name, the API's port, the haproxy
/// binary) and the API's listen address `listener.host` (the chart's `0.0.0.0`); with
/// [`MapsDir::Absolute`], `maps_dir` is `<seen_as>/maps` instead of the chart's `maps`.
pub fn api_config(
    seen_as: &str,
    listener: &ApiListener,
    haproxy_bin: &str,
    maps_dir: MapsDir,
) -> String {
    const FILE: &str = "dataplaneapi.yaml";
    let mut text = chart_file_in(FILE, seen_as);
    for (from, to) in [
        ("${POD_NAME}", listener.name.clone()),
        ("${DATAPLANE_PORT}", listener.port.to_string()),
        ("${HAPROXY_BIN}", haproxy_bin.to_string()),
        (
            "\n  host: 0.0.0.0\n",
            format!("\n  host: {}\n", listener.host),
        ),
    ] {
        text = replaced(&text, FILE, from, &to);
    }
    if maps_dir == MapsDir::Absolute {
        text = replaced(
            &text,
            FILE,
            "\n    maps_dir: maps\n",
            &format!("\n    maps_dir: {seen_as}/maps\n"),
        );
    }
    text
}

/// Writes what the pod's init container writes into `dir`, the directory holding
/// `haproxy.cfg`, which the API and haproxy see as `seen_as` (`/etc/haproxy` in a pod): the
/// storage directories, the userlist with the `admin` user, the chart's `reload.sh` and the
/// API's configuration ([`api_config`]); and the chart's `start-haproxy.sh`, which the
/// haproxy container runs from the ConfigMap (`sh start-haproxy.sh HAPROXY_BIN`). The API
/// must be started in `seen_as` for a relative `maps_dir`.
pub fn write_api_files(
    dir: &Path,
    seen_as: &str,
    listener: &ApiListener,
    password: &str,
    maps_dir: MapsDir,
) {
    for sub in [
        "maps",
        "ssl",
        "general",
        "dataplane",
        "spoe",
        "transactions",
        "backups",
    ] {
        std::fs::create_dir_all(dir.join(sub)).expect("a storage dir");
    }
    let write = |file: &str, text: String| {
        std::fs::write(dir.join(file), text)
            .unwrap_or_else(|e| panic!("writing {}/{file}: {e}", dir.display()));
    };
    write(
        "userlist.cfg",
        format!("userlist controller\n  user admin insecure-password {password}\n"),
    );
    write("reload.sh", chart_file_in("reload.sh", seen_as));
    write(
        "start-haproxy.sh",
        chart_file_in("start-haproxy.sh", seen_as),
    );
    write(
        "dataplaneapi.yaml",
        api_config(
            seen_as,
            listener,
            &haproxy_binary().display().to_string(),
            maps_dir,
        ),
    );
}

/// How many times the haproxy behind master socket `socket` reloaded (`show proc`).
pub fn master_reloads(socket: &Path) -> Option<u64> {
    let proc = cli(socket, "show proc")?;
    proc.lines()
        .find(|l| l.split_whitespace().nth(1) == Some("master"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|n| n.parse().ok())
}

impl Drop for DataplanePeer {
    fn drop(&mut self) {
        drop(self.launcher.take());
    }
}

/// Sends one command to a HAProxy CLI socket and reads the answer to its end.
pub fn cli(socket: &Path, command: &str) -> Option<String> {
    let mut stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(format!("{command}\n").as_bytes()).ok()?;
    // The end of the input ends the session: the socket answers and closes.
    stream.shutdown(std::net::Shutdown::Write).ok()?;
    let mut answer = String::new();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => answer.push_str(&line),
            Err(_) => break,
        }
    }
    let _ = reader.read_to_string(&mut answer);
    Some(answer)
}
