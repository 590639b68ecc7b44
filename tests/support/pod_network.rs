//! A pod network for the in-cluster tests: Linux network namespaces joined by veth pairs to
//! a bridge on the host, on a private /24 out of 10.213.0.0/16 that nothing but those
//! namespaces uses. The kube-apiserver refuses loopback addresses in Pods and
//! EndpointSlices, so the backends and "HAProxy pods" a test writes to the API must listen
//! on real, non-loopback addresses: each [`NetPod`] is a namespace `hpt-<X>-<name>` with
//! `lo` up and one interface `eth0` holding `10.213.X.N/24`, default route via the bridge
//! `hpt<X>` which holds `10.213.X.1` (so the host reaches every pod, and pods reach each
//! other and the host at [`PodNetwork::gateway`]). Processes run inside a pod through
//! `ip netns exec` ([`NetPod::spawn`], [`NetPod::run`]), which also bind-mounts the entries
//! of `/etc/netns/<ns>/` over `/etc/` for them ([`NetPod::etc_dir`]): a pod can have its own
//! `/etc/haproxy`. [`NetPod::http_backend`] serves a fixed body with a real HAProxy.
//!
//! Nothing is left behind, whatever ends the test. A network's /24 is claimed by creating
//! its bridge (creation fails if another test binary holds that name), and a tiny `sh`
//! launcher, like the kit's in `kube.rs`, whose standard input is a pipe this process holds
//! owns everything the network creates: when the network is dropped, or the test process
//! exits or is killed (the network shared by a test binary through [`PodNetwork::shared`]
//! is never dropped), the pipe closes and the launcher kills every process in the
//! network's namespaces (`ip netns pids`: whoever started them), deletes the veths, the
//! namespaces, their `/etc/netns` dirs, the bridge (last, freeing the /24) and its temp
//! dir. Dropping a [`NetPod`] does the same for that pod at once. Needs root and iproute2.
//! Included by test crates with `#[path = "support/pod_network.rs"] mod pod_network;`.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// iproute2.
pub const IP: &str = "/usr/sbin/ip";
/// The first two octets of every pod network; each network is `10.213.X.0/24`.
const RANGE: [u8; 2] = [10, 213];
/// How long a backend may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// `clean_ns NS [HOST-VETH]`: kills every process in namespace NS (until none is left),
/// deletes the host end of its veth, the namespace and its `/etc/netns` dir. Shared by the
/// launcher and [`NetPod`]'s drop.
const CLEAN_NS: &str = r#"PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH
clean_ns() {
  i=0
  while pids=$(ip netns pids "$1" 2>/dev/null) && [ -n "$pids" ] && [ $i -lt 200 ]; do
    kill -KILL $pids 2>/dev/null
    i=$((i + 1))
    sleep 0.05
  done
  [ -z "$2" ] || ip link del "$2" 2>/dev/null
  ip netns del "$1" 2>/dev/null
  rm -rf "/etc/netns/$1"
  rmdir /etc/netns 2>/dev/null
  return 0
}
"#;

/// The launcher (after [`CLEAN_NS`]). Arguments: the network's dir, its bridge, the prefix
/// of its namespaces. Ignores the terminal's signals (a Ctrl-C reaches the whole process
/// group); when standard input closes it removes everything the network made.
const LAUNCHER: &str = r#"trap '' INT HUP TERM PIPE
dir=$1 bridge=$2 prefix=$3
cat >/dev/null
for ns in $(ip netns list | cut -d' ' -f1); do
  case $ns in "$prefix"*) clean_ns "$ns" ;; esac
done
for link in $(ip -o link show type veth | cut -d: -f2 | cut -d@ -f1); do
  case $link in "$bridge"p*) ip link del "$link" 2>/dev/null ;; esac
done
ip link del "$bridge"
rm -rf "$dir"
"#;

/// Runs `ip ARGS`; its stdout, or a message naming the command and its stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let output = Command::new(IP)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{IP} {}` could not be run: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{IP} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The names of the network namespaces there are (`ip netns list`).
pub fn namespaces() -> Vec<String> {
    ip(&["netns", "list"])
        .unwrap_or_else(|e| panic!("listing network namespaces: {e}"))
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The names of the host's links (`ip -o link`), without the `@peer` part.
pub fn links() -> Vec<String> {
    ip(&["-o", "link", "show"])
        .unwrap_or_else(|e| panic!("listing links: {e}"))
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|name| {
            name.trim()
                .split('@')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Runs [`CLEAN_NS`] for `ns` (and `veth`) and waits for it.
fn clean_ns(ns: &str, veth: &str) {
    let result = Command::new("sh")
        .arg("-c")
        .arg(format!("{CLEAN_NS}clean_ns \"$1\" \"$2\""))
        .args(["haptor-pod-clean", ns, veth])
        .stdin(Stdio::null())
        .status();
    if !matches!(result, Ok(status) if status.success()) {
        eprintln!("pod network: cleaning up namespace {ns} failed: {result:?}");
    }
}

/// The launcher and the write end of its standard input.
struct Launcher {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// What a network's pods and processes share; the launcher cleans up when the last of them
/// goes.
struct Net {
    /// The third octet of the network's /24.
    x: u8,
    bridge: String,
    prefix: String,
    dir: PathBuf,
    launcher: Mutex<Option<Launcher>>,
    launcher_pid: u32,
    next_pod: AtomicU32,
}

impl Drop for Net {
    fn drop(&mut self) {
        let launcher = self
            .launcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(mut launcher) = launcher {
            drop(launcher.stdin.take());
            let _ = launcher.child.wait();
        }
    }
}

/// A bridge on the host, its /24 and the pods on it. See the module documentation.
pub struct PodNetwork {
    net: Arc<Net>,
}

impl PodNetwork {
    /// The network this test binary shares among its tests, made on first use. It is never
    /// dropped; its launcher removes it when the test process exits, however it exits.
    pub fn shared() -> &'static PodNetwork {
        static SHARED: OnceLock<PodNetwork> = OnceLock::new();
        SHARED.get_or_init(PodNetwork::new)
    }

    /// A network of its own: the first free `10.213.X.0/24`, starting from one keyed by
    /// this process's id and a counter (a /24 is free when bridge `hpt<X>` could be created
    /// and no address or route of the host lies in it). Removed when dropped, and its pods
    /// with it once they are dropped too.
    pub fn new() -> PodNetwork {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        for _ in 0..=u8::MAX {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let x = (pid.wrapping_mul(31).wrapping_add(n) % 256) as u8;
            let bridge = format!("hpt{x}");
            match ip(&["link", "add", "name", &bridge, "type", "bridge"]) {
                Ok(_) => {}
                // Another network (of this binary or another) holds this /24.
                Err(e) if e.contains("File exists") => continue,
                Err(e) => panic!("creating the pod network's bridge {bridge}: {e}"),
            }
            let subnet = format!("{}.{}.{x}.", RANGE[0], RANGE[1]);
            let used = |what: &[&str]| {
                ip(what)
                    .unwrap_or_else(|e| panic!("checking that {subnet}0/24 is free: {e}"))
                    .contains(&subnet)
            };
            if used(&["-o", "addr"]) || used(&["route"]) {
                let _ = ip(&["link", "del", &bridge]);
                continue;
            }
            return PodNetwork::claimed(x, bridge);
        }
        panic!(
            "no free /24 in {}.{}.0.0/16 for a pod network",
            RANGE[0], RANGE[1]
        );
    }

    /// Starts the launcher for the bridge just created, then sets the bridge up.
    fn claimed(x: u8, bridge: String) -> PodNetwork {
        let prefix = format!("hpt-{x}-");
        fn undo(bridge: &str, what: String) -> ! {
            let _ = ip(&["link", "del", bridge]);
            panic!("{what}")
        }
        let guard = tempfile::Builder::new()
            .prefix("haptor-pods-")
            .tempdir()
            .unwrap_or_else(|e| undo(&bridge, format!("a temp dir for pod network {bridge}: {e}")));
        let dir = guard.path().to_path_buf();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{CLEAN_NS}{LAUNCHER}"))
            .arg("haptor-pod-launcher")
            .arg(&dir)
            .args([&bridge, &prefix])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                undo(
                    &bridge,
                    format!("sh runs pod network {bridge}'s launcher: {e}"),
                )
            });
        // From here on the launcher owns the bridge, the namespaces and the dir.
        let _ = guard.keep();
        let stdin = child.stdin.take();
        let launcher_pid = child.id();
        let net = Arc::new(Net {
            x,
            bridge,
            prefix,
            dir,
            launcher: Mutex::new(Some(Launcher { child, stdin })),
            launcher_pid,
            next_pod: AtomicU32::new(0),
        });
        // Namespaces of this prefix left by an owner whose launcher was killed too (its
        // bridge is gone, or this one could not have been created).
        for ns in namespaces() {
            if ns.starts_with(&net.prefix) {
                clean_ns(&ns, "");
            }
        }
        let network = PodNetwork { net };
        let gateway = format!("{}/24", network.gateway());
        for args in [
            &["addr", "add", &gateway, "dev", &network.net.bridge][..],
            &["link", "set", &network.net.bridge, "up"],
        ] {
            ip(args).unwrap_or_else(|e| panic!("setting up pod network bridge: {e}"));
        }
        network
    }

    /// The host's address on the network (`10.213.X.1`): the pods' default gateway, and
    /// where a pod reaches a server of the test process (bound to it or to `0.0.0.0`).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(RANGE[0], RANGE[1], self.net.x, 1)
    }

    /// The network's bridge, `hpt<X>`.
    pub fn bridge(&self) -> &str {
        &self.net.bridge
    }

    /// What every namespace of this network's pods starts with, `hpt-<X>-`.
    pub fn namespace_prefix(&self) -> &str {
        &self.net.prefix
    }

    /// The network's temp dir (the processes' logs, the backends' configs); removed by the
    /// launcher.
    pub fn dir(&self) -> &Path {
        &self.net.dir
    }

    /// The launcher's pid.
    pub fn launcher_pid(&self) -> u32 {
        self.net.launcher_pid
    }

    /// Makes pod `name` (lowercase letters, digits and `-`, at most 20 characters, unique in
    /// the network): namespace `hpt-<X>-<name>`, veth `hpt<X>p<N>` on the bridge with its
    /// peer `eth0` in the namespace holding the next address of the /24, `lo` and `eth0`
    /// up, default route via [`Self::gateway`].
    pub fn pod(&self, name: &str) -> NetPod {
        assert!(
            !name.is_empty()
                && name.len() <= 20
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "pod name {name:?}: use 1 to 20 lowercase letters, digits and '-'"
        );
        let n = self.net.next_pod.fetch_add(1, Ordering::Relaxed);
        assert!(
            n < 253,
            "pod network {} is full (253 pods)",
            self.net.bridge
        );
        let namespace = format!("{}{name}", self.net.prefix);
        // Not in the loop below: the namespace may be another pod's of the same name, which
        // a failure must not remove.
        ip(&["netns", "add", &namespace])
            .unwrap_or_else(|e| panic!("making pod {name} (namespace {namespace}): {e}"));
        let pod = NetPod {
            net: Arc::clone(&self.net),
            name: name.to_string(),
            namespace,
            veth: format!("{}p{n}", self.net.bridge),
            ip: Ipv4Addr::new(RANGE[0], RANGE[1], self.net.x, (n + 2) as u8),
        };
        // From here on a failure drops `pod`, which removes what was made.
        let (ns, veth, bridge) = (&pod.namespace[..], &pod.veth[..], &self.net.bridge[..]);
        let address = format!("{}/24", pod.ip);
        let gateway = self.gateway().to_string();
        for args in [
            &[
                "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ][..],
            &["link", "set", veth, "master", bridge, "up"],
            &["-n", ns, "addr", "add", &address, "dev", "eth0"],
            &["-n", ns, "link", "set", "lo", "up"],
            &["-n", ns, "link", "set", "eth0", "up"],
            &["-n", ns, "route", "add", "default", "via", &gateway],
        ] {
            ip(args).unwrap_or_else(|e| panic!("making pod {name} (namespace {ns}): {e}"));
        }
        pod
    }
}

impl Default for PodNetwork {
    fn default() -> Self {
        PodNetwork::new()
    }
}

/// A network namespace on a [`PodNetwork`], with one address. Removed when dropped: its
/// processes are killed, its veth, namespace and `/etc/netns` dir deleted.
pub struct NetPod {
    net: Arc<Net>,
    name: String,
    namespace: String,
    veth: String,
    ip: Ipv4Addr,
}

impl NetPod {
    /// The pod's address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// `ip:port` of the pod.
    pub fn addr(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, port)
    }

    /// The pod's name as given to [`PodNetwork::pod`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pod's network namespace, `hpt-<X>-<name>`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The host end of the pod's veth, `hpt<X>p<N>`.
    pub fn veth(&self) -> &str {
        &self.veth
    }

    /// `/etc/netns/<namespace>/`, made if missing (removed with the pod). Each entry in it
    /// appears over the `/etc` entry of the same name (which must exist on the host) for
    /// the processes the pod runs: `etc_dir()/haproxy/` is their `/etc/haproxy/`.
    /// `ip netns exec` mounts the entries there when a process starts, so make them first.
    pub fn etc_dir(&self) -> PathBuf {
        let dir = Path::new("/etc/netns").join(&self.namespace);
        // Another pod's cleanup may remove an empty /etc/netns between the two mkdirs.
        let mut tries = 0;
        while let Err(e) = std::fs::create_dir_all(&dir) {
            tries += 1;
            assert!(
                tries < 20,
                "creating {} for pod {}: {e}",
                dir.display(),
                self.namespace
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        dir
    }

    fn command(&self, program: &OsStr) -> Command {
        let mut command = Command::new(IP);
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program)
            .stdin(Stdio::null());
        command
    }

    /// Starts `program` with `args` (and the test process's environment plus `env`) in the
    /// pod, its stdout and stderr in a log file of the network's dir. Killed when the handle
    /// is dropped, when the pod or the network is removed, and when the test process dies.
    pub fn spawn<I, S>(
        &self,
        program: impl AsRef<OsStr>,
        args: I,
        env: &[(&str, &str)],
    ) -> PodProcess
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let program = program.as_ref();
        let short = Path::new(program)
            .file_name()
            .unwrap_or(program)
            .to_string_lossy()
            .into_owned();
        let label = format!("{short} in pod namespace {}", self.namespace);
        let log = self.net.dir.join(format!(
            "{}-{short}-{}.log",
            self.name,
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::create(&log).unwrap_or_else(|e| panic!("{label}: {}: {e}", log.display()));
        let stderr = file
            .try_clone()
            .unwrap_or_else(|e| panic!("{label}: {}: {e}", log.display()));
        let child = self
            .command(program)
            .args(args)
            .envs(env.iter().copied())
            .stdout(file)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("`{IP} netns exec` runs {label}: {e}"));
        PodProcess {
            child,
            label,
            log,
            _net: Arc::clone(&self.net),
        }
    }

    /// Runs `program` with `args` in the pod and waits for it (stdin closed, output
    /// captured).
    pub fn run<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let program = program.as_ref();
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "`{IP} netns exec {} {}` could not be run: {e}",
                    self.namespace,
                    program.to_string_lossy()
                )
            })
    }

    /// A real HAProxy (`haproxy_binary()`) in the pod answering every request on
    /// `ip:port` with 200 and `body` as `text/plain`; returns once it accepts connections
    /// from the host. `body` is one line.
    pub fn http_backend(&self, port: u16, body: &str) -> PodProcess {
        assert!(
            !body.contains(['\n', '\r']),
            "the backend body of pod {} is one line: {body:?}",
            self.namespace
        );
        // In double quotes HAProxy expands `$NAME` and takes `\` as an escape.
        let quoted: String = body
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' | '$' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let config = self
            .net
            .dir
            .join(format!("{}-backend-{port}.cfg", self.name));
        let text = format!(
            "defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend f\n  bind {ip}:{port}\n  \
             http-request return status 200 content-type text/plain string \"{quoted}\"\n",
            ip = self.ip
        );
        std::fs::write(&config, text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
        let haproxy = haptor::drivers::haproxy_check::haproxy_binary();
        let mut process = self.spawn(
            &haproxy,
            [OsStr::new("-db"), OsStr::new("-f"), config.as_os_str()],
            &[],
        );
        process.wait_listening(self.addr(port));
        process
    }
}

impl Drop for NetPod {
    fn drop(&mut self) {
        clean_ns(&self.namespace, &self.veth);
    }
}

/// A process running in a pod ([`NetPod::spawn`]). Killed and reaped when dropped.
pub struct PodProcess {
    child: Child,
    label: String,
    log: PathBuf,
    /// The log lives in the network's dir.
    _net: Arc<Net>,
}

impl PodProcess {
    /// Its pid (`ip netns exec` execs the program, so this is the program's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file holding its stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last 30 lines of its output, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.label))
    }

    /// Waits until it exits, at most `timeout`; panics with its log tail if it does not.
    pub fn wait_timeout(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {timeout:?}; its output ends:\n{}",
                self.label,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until `addr` accepts TCP connections from the host; panics, with the log tail,
    /// if the process exits first or `READY_TIMEOUT` passes.
    pub fn wait_listening(&mut self, addr: SocketAddrV4) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait() {
                panic!(
                    "{} exited ({status}) before {addr} accepted connections; its output ends:\n{}",
                    self.label,
                    self.log_tail()
                );
            }
            let error =
                match TcpStream::connect_timeout(&SocketAddr::V4(addr), Duration::from_millis(500))
                {
                    Ok(_) => return,
                    Err(e) => e,
                };
            assert!(
                Instant::now() < deadline,
                "{} does not accept connections on {addr} within {READY_TIMEOUT:?} (last: {error}); \
                 its output ends:\n{}",
                self.label,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PodProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
