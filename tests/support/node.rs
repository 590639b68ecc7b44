//! A real one-node cluster for the node tests: `scripts/test-node serve` starts etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler, a kubelet on containerd and
//! kube-proxy, and runs until its standard input closes. The pipe to it is held by a value
//! that is never dropped, so the node lives as long as this test process and is removed
//! however the process ends (a panic, a signal, SIGKILL): the script then sees end of file.
//!
//! The node is shared by the program's tests, which take turns ([`Node::take`]): one cluster
//! per machine, cluster-scoped objects (the webhook configurations, the IngressClass) and two
//! cores. The images are built from the test's own `haptor` binary (`scripts/test-node
//! images`: the Dockerfile's runtime stage, and the HAProxy pods' image with the Data Plane
//! API of `TEST_ASSET_DATAPLANEAPI` when given) and imported once.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a wait for the cluster to reach a state lasts before the test fails, showing
/// the cluster's pods and events.
pub const WAIT: Duration = Duration::from_secs(180);

pub struct Node {
    /// The node's dir (logs of every component in `logs/`).
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    kubectl: PathBuf,
    /// `scripts/test-node serve`, whose standard input is the node's lifeline.
    _serve: Mutex<Child>,
    /// The Data Plane API binary in the HAProxy image, if one was given.
    pub dataplaneapi: Option<PathBuf>,
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

impl Node {
    /// The node, started on first use, and this test's turn on it.
    pub fn take() -> (&'static Node, MutexGuard<'static, ()>) {
        static NODE: OnceLock<Node> = OnceLock::new();
        static TURN: Mutex<()> = Mutex::new(());
        // A test that failed holding the turn leaves the node usable.
        let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (NODE.get_or_init(Node::start), turn)
    }

    fn start() -> Node {
        let mut serve = Command::new(repo("scripts/test-node"))
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("scripts/test-node runs");
        let stdout = serve.stdout.take().expect("its stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut environment = std::collections::HashMap::new();
        let mut ready = false;
        for line in lines.by_ref() {
            let line = line.expect("scripts/test-node writes lines");
            if line.starts_with("ready ") {
                ready = true;
            } else if let Some((name, value)) = line.split_once('=') {
                environment.insert(name.to_string(), value.to_string());
                if name == "TEST_ASSET_KUBECTL" {
                    break;
                }
            }
        }
        assert!(
            ready && environment.contains_key("TEST_ASSET_KUBECTL"),
            "scripts/test-node serve ended before the node was ready (its errors are above): {:?}",
            serve.wait()
        );
        let dataplaneapi = std::env::var_os("TEST_ASSET_DATAPLANEAPI").map(PathBuf::from);
        let node = Node {
            dir: PathBuf::from(&environment["HAPTOR_TEST_NODE"]),
            kubeconfig: PathBuf::from(&environment["KUBECONFIG"]),
            kubectl: PathBuf::from(&environment["TEST_ASSET_KUBECTL"]),
            _serve: Mutex::new(serve),
            dataplaneapi,
        };
        let mut images = Command::new(repo("scripts/test-node"));
        images.args(["images", "--haptor", env!("CARGO_BIN_EXE_haptor")]);
        if let Some(dataplaneapi) = &node.dataplaneapi {
            images.arg("--dataplaneapi").arg(dataplaneapi);
        } else {
            eprintln!(
                "NOTE: TEST_ASSET_DATAPLANEAPI is not set: the HAProxy image has no Data Plane API, so its pods never become Ready, the leader counts them as no instances and the node tests stop there (traffic through them is tested only where a dataplaneapi binary is given)"
            );
        }
        let status = images.status().expect("scripts/test-node images runs");
        assert!(status.success(), "the images were not built: {status}");
        node
    }

    /// Runs kubectl with `args` (and `stdin`, if any); its output whatever the status.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new(&self.kubectl);
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(repo(""));
        run(command, stdin)
    }

    /// Runs kubectl; its standard output, or a panic with its errors.
    pub fn kubectl(&self, args: &[&str]) -> String {
        succeeded("kubectl", args, self.kubectl_output(args, None))
    }

    /// `kubectl apply -f -` of `yaml` in `ns`.
    pub fn apply(&self, ns: &str, yaml: &str) -> Output {
        self.kubectl_output(&["-n", ns, "apply", "-f", "-"], Some(yaml))
    }

    /// kubectl's JSON of `args` (`get ... -o json` is added).
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let output = self.kubectl_output(&all, None);
        if !output.status.success() {
            return Value::Null;
        }
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    /// Runs helm with `args` against the node; its output whatever the status.
    pub fn helm_output(&self, args: &[&str]) -> Output {
        let mut command = Command::new(crate::helm::helm());
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CONFIG_HOME", repo("target/node-test-helm/config"))
            .env("HELM_CACHE_HOME", repo("target/node-test-helm/cache"))
            .env("HELM_DATA_HOME", repo("target/node-test-helm/data"))
            .current_dir(repo(""));
        run(command, None)
    }

    /// Runs helm; its standard output, or a panic with its errors and the cluster's state.
    pub fn helm(&self, args: &[&str]) -> String {
        let output = self.helm_output(args);
        if !output.status.success() {
            panic!(
                "helm {} failed ({}):\n{}\n{}\n{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
                self.diagnostics()
            );
        }
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Polls `check` every half second until it gives a value; after [`WAIT`] the test fails
    /// naming `what`, with the cluster's pods, events and controller logs.
    pub fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            if started.elapsed() > WAIT {
                panic!("{what}: not within {WAIT:?}\n{}", self.diagnostics());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The cluster's pods, the last events and the controller pods' last log lines.
    pub fn diagnostics(&self) -> String {
        let mut text = String::new();
        let mut show = |args: &[&str], lines: usize| {
            let output = self.kubectl_output(args, None);
            let stdout = String::from_utf8_lossy(&output.stdout);
            let all: Vec<&str> = stdout.lines().collect();
            text.push_str(&format!(
                "--- kubectl {}:\n{}\n{}",
                args.join(" "),
                all[all.len().saturating_sub(lines)..].join("\n"),
                String::from_utf8_lossy(&output.stderr)
            ));
        };
        show(&["get", "pods", "-A", "-o", "wide"], 40);
        show(&["get", "events", "-A", "--sort-by=.lastTimestamp"], 40);
        let controllers =
            self.get_json(&["pods", "-A", "-l", "app.kubernetes.io/component=controller"]);
        for pod in controllers["items"].as_array().cloned().unwrap_or_default() {
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            show(&["logs", "-n", ns, &pod_name(&pod), "--tail=20"], 20);
        }
        text
    }

    /// The pods of `ns` whose labels match `selector`, as kubectl's JSON items.
    pub fn pods(&self, ns: &str, selector: &str) -> Vec<Value> {
        self.get_json(&["pods", "-n", ns, "-l", selector])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A new namespace named `prefix-N`, unique in this process.
    pub fn namespace(&self, prefix: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ns = format!("{prefix}-{n}");
        self.kubectl(&["create", "namespace", &ns]);
        ns
    }
}

/// Whether a pod (kubectl's JSON) is Ready.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

pub fn pod_name(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The host processes of the pod with UID `uid` (the kubelet puts each pod in a cgroup named
/// after its UID), as (pid, command line).
pub fn pod_processes(uid: &str) -> Vec<(u32, String)> {
    let needle = format!("pod{uid}");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if !cgroup.contains(&needle) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, cmdline.trim().to_string()));
    }
    found
}

/// The real (first) uid of process `pid`.
pub fn process_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The mount options of the root filesystem process `pid` sees (e.g. `ro,relatime`).
pub fn root_mount_options(pid: u32) -> Option<String> {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    mountinfo.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(4) == Some(&"/")).then(|| fields.get(5).unwrap_or(&"").to_string())
    })
}

fn run(mut command: Command, stdin: Option<&str>) -> Output {
    use std::io::Write;
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the command runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(text.as_bytes())
            .expect("the command reads its input");
    }
    child.wait_with_output().expect("the command ends")
}

fn succeeded(program: &str, args: &[&str], output: Output) -> String {
    assert!(
        output.status.success(),
        "{program} {} failed ({}):\n{}\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
