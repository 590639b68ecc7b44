//! A real Kubernetes API server for the in-cluster tests: etcd and kube-apiserver (the
//! binaries `scripts/test-peers` builds, found through `TEST_ASSET_ETCD` and
//! `TEST_ASSET_KUBE_APISERVER`, or by running that script when they are unset) started on
//! free loopback ports in a temp dir, the way controller-runtime's envtest runs them: no
//! kubelet, no controller-manager. A [`Kit`] waits for `/readyz`, installs haptor's CRDs
//! from `deploy/crds/` (and, with [`KitOptions::gateway_api`], the Gateway API's: see
//! [`gateway_api_crds`]) and waits until they are established, writes a kubeconfig for an
//! admin and for a restricted identity (a user with no RBAC bindings, so a test can show a
//! 403 until it binds a role) and hands out `kube::Client`s built from those files, which
//! trust the apiserver's self-signed certificate and nothing else.
//!
//! No process is left behind, whatever ends the test: both servers run under one tiny `sh`
//! launcher whose standard input is a pipe this process holds. When the kit is dropped, or
//! the test process exits or is killed (a server shared by a whole test binary through
//! [`Kit::shared`] is never dropped), the pipe closes, and the launcher kills the servers,
//! waits for them and removes the temp dir. Without a controller-manager deleted namespaces
//! never finish deleting, so tests share a server through uniquely named namespaces
//! ([`Kit::temp_ns`]) instead. Included by the test crates that need it with
//! `#[path = "support/kube.rs"] mod kube_kit;` next to `mod support;`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::support::{Launcher, free_port};

/// How long the servers may take to answer `/readyz` (about 4 s on an idle 2-core machine;
/// a loaded one running several test binaries' servers at once is much slower).
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a CRD may take to become established and served.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

/// The bearer token of the admin identity (group `system:masters`).
const ADMIN_TOKEN: &str = "haptor-kit-admin-token";
/// The bearer token of the restricted identity.
const RESTRICTED_TOKEN: &str = "haptor-kit-restricted-token";
/// The user name of the restricted identity: no rights beyond what the API server grants
/// every authenticated user (discovery, self reviews) until a test binds a role to it.
pub const RESTRICTED_USER: &str = "haptor-restricted";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The paths of the two peer binaries.
#[derive(Debug, Clone)]
pub struct Peers {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
}

/// The peers this test binary runs: `TEST_ASSET_KUBE_APISERVER` and `TEST_ASSET_ETCD`
/// (`./scripts/test` exports them), else what `scripts/test-peers kube-apiserver etcd`
/// prints (it builds a missing peer first). A peer that cannot be found or built fails the
/// test with a message naming it: these tests are never skipped.
pub fn peers() -> &'static Peers {
    static PEERS: OnceLock<Peers> = OnceLock::new();
    PEERS.get_or_init(find_peers)
}

fn find_peers() -> Peers {
    const WANTED: [(&str, &str); 2] = [
        ("kube-apiserver", "TEST_ASSET_KUBE_APISERVER"),
        ("etcd", "TEST_ASSET_ETCD"),
    ];
    let mut found: Vec<Option<(PathBuf, String)>> = WANTED
        .iter()
        .map(|(_, var)| {
            std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map(|v| (PathBuf::from(v), format!("${var}")))
        })
        .collect();
    let missing: Vec<&str> = WANTED
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|((peer, _), _)| *peer)
        .collect();
    if !missing.is_empty() {
        let script = repo("scripts/test-peers");
        let output = Command::new(&script)
            .args(&missing)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "missing peer {}: {} could not be run: {e}",
                    missing.join(", "),
                    script.display()
                )
            });
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "missing peer {}: scripts/test-peers {} failed ({}):\n{}",
            missing.join(", "),
            missing.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        for ((peer, var), slot) in WANTED.iter().zip(found.iter_mut()) {
            if slot.is_none() {
                let prefix = format!("{var}=");
                *slot = stdout
                    .lines()
                    .find_map(|l| l.strip_prefix(&prefix))
                    .map(|p| (PathBuf::from(p), "scripts/test-peers".to_string()));
                assert!(
                    slot.is_some(),
                    "missing peer {peer}: scripts/test-peers printed no {var}= line:\n{stdout}"
                );
            }
        }
    }
    let mut paths = WANTED.iter().zip(found).map(|((peer, _), slot)| {
        let (path, from) = slot.expect("every peer was found above");
        let executable = std::fs::metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        assert!(
            executable,
            "missing peer {peer}: {} (from {from}) is not an executable file; \
             ./scripts/test-peers builds it",
            path.display()
        );
        path
    });
    Peers {
        kube_apiserver: paths.next().expect("kube-apiserver"),
        etcd: paths.next().expect("etcd"),
    }
}

/// The environment variable naming the Gateway API CRDs (`scripts/test-peers
/// gateway-api-crds` prints it).
const GATEWAY_API_CRDS_VAR: &str = "TEST_ASSET_GATEWAY_API_CRDS";

/// The Gateway API's CRDs, experimental channel (GatewayClass, Gateway, HTTPRoute,
/// GRPCRoute, ReferenceGrant, TLSRoute, TCPRoute, UDPRoute, ...), as one multi-document
/// file: `TEST_ASSET_GATEWAY_API_CRDS`, which `scripts/test-peers gateway-api-crds` prints
/// after copying them out of `sigs.k8s.io/gateway-api` at the version `tools/gateway-api`
/// pins (`./scripts/test` exports it). Never skipped: without it the test fails, naming that
/// command.
pub fn gateway_api_crds() -> PathBuf {
    let path = std::env::var_os(GATEWAY_API_CRDS_VAR)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{GATEWAY_API_CRDS_VAR} is not set: this test needs the Gateway API CRDs; run \
                 `export $(./scripts/test-peers gateway-api-crds)` (./scripts/test does)"
            )
        });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{GATEWAY_API_CRDS_VAR}={} names no file: run `export $(./scripts/test-peers \
         gateway-api-crds)`",
        path.display()
    );
    path
}

/// How to start a kit.
#[derive(Debug, Clone)]
pub struct KitOptions {
    /// The apiserver's watch cache (`--watch-cache`). With it, watches are served from the
    /// apiserver's memory, which keeps recent events however etcd is compacted; without it
    /// every watch reaches etcd, so a compaction expires old resourceVersions (410).
    pub watch_cache: bool,
    /// The CRD manifests installed before the kit is handed out (none: `None`).
    pub crds: Option<PathBuf>,
    /// Also install the Gateway API's CRDs ([`gateway_api_crds`]), after `crds`.
    pub gateway_api: bool,
}

impl Default for KitOptions {
    fn default() -> Self {
        KitOptions {
            watch_cache: true,
            crds: Some(repo("deploy/crds/haptor.dev_crds.yaml")),
            gateway_api: false,
        }
    }
}

/// The processes of a kit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KitPids {
    pub launcher: u32,
    pub etcd: u32,
    pub kube_apiserver: u32,
}

impl KitPids {
    pub fn all(&self) -> [(&'static str, u32); 3] {
        [
            ("launcher", self.launcher),
            ("etcd", self.etcd),
            ("kube-apiserver", self.kube_apiserver),
        ]
    }
}

/// A running etcd + kube-apiserver pair. See the module documentation.
pub struct Kit {
    dir: PathBuf,
    launcher: Mutex<Option<Launcher>>,
    pids: KitPids,
    /// A kube-apiserver started again by [`Kit::start_apiserver`] (the launcher's first one
    /// stopped), under a guard of its own.
    restarted_apiserver: Mutex<Option<RestartedApiserver>>,
    /// `https://127.0.0.1:PORT` of the apiserver.
    pub url: String,
    /// The apiserver's port.
    pub port: u16,
    /// `http://127.0.0.1:PORT` of etcd's client endpoint (and its v3 HTTP gateway).
    pub etcd_url: String,
    admin_kubeconfig: PathBuf,
    restricted_kubeconfig: PathBuf,
    /// From starting the launcher until `/readyz` answered `ok`.
    pub ready_in: Duration,
    /// From then until every CRD was established and served.
    pub crds_in: Duration,
}

impl Kit {
    /// The kit this test binary shares among its tests, started on first use with the
    /// default options (CRDs installed). It is never dropped; its servers stop when the
    /// test process exits, however it exits.
    pub fn shared() -> &'static Kit {
        static SHARED: OnceLock<Kit> = OnceLock::new();
        SHARED.get_or_init(Kit::start)
    }

    /// A kit of its own, with the default options; stopped when dropped.
    pub fn start() -> Kit {
        Kit::start_with(KitOptions::default())
    }

    /// A kit of its own; stopped when dropped. Blocks until the apiserver is ready and the
    /// CRDs are established (it runs its own runtime on a thread of its own, so it may be
    /// called from inside a test's runtime).
    pub fn start_with(options: KitOptions) -> Kit {
        Kit::start_with_apiserver_args(options, &[])
    }

    /// A kit of its own whose kube-apiserver also gets `extra` flags (e.g.
    /// `--enable-aggregator-routing=true`: a webhook's Service is reached at an address of
    /// its EndpointSlices, as the kit has no Service network).
    pub fn start_with_apiserver_args(options: KitOptions, extra: &[&str]) -> Kit {
        let started = Instant::now();
        let peers = peers();
        // Removed by the launcher once it runs; until then (a failure while preparing) by
        // its guard.
        let guard = tempfile::Builder::new()
            .prefix("haptor-kit-")
            .tempdir()
            .expect("a temp dir for the kit");
        let dir = guard.path().to_path_buf();
        let (etcd_port, peer_port, port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let url = format!("https://127.0.0.1:{port}");

        std::fs::create_dir_all(dir.join("pki")).expect("the kit's pki dir");
        let key = Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(dir.join("sa.key"))
            .arg("2048")
            .stdin(Stdio::null())
            .output()
            .expect("openssl runs (./scripts/test installs it)");
        assert!(
            key.status.success(),
            "openssl genrsa failed: {}",
            String::from_utf8_lossy(&key.stderr)
        );
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},haptor-admin,1,\"system:masters\"\n\
                 {RESTRICTED_TOKEN},{RESTRICTED_USER},2\n"
            ),
        )
        .expect("tokens.csv");

        let d = |p: &str| dir.join(p).display().to_string();
        let etcd_args = vec![
            format!("--data-dir={}", d("etcd")),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync".to_string(),
        ];
        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            // No Service network here: nothing may write the kubernetes Endpoints.
            "--endpoint-reconciler-type=none".to_string(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d("pki")),
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            format!("--service-account-issuer={url}"),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            format!("--service-account-key-file={}", d("sa.key")),
            "--authorization-mode=RBAC".to_string(),
            format!("--token-auth-file={}", d("tokens.csv")),
            // No controller-manager creates default ServiceAccounts.
            "--disable-admission-plugins=ServiceAccount".to_string(),
        ];
        if !options.watch_cache {
            apiserver_args.push("--watch-cache=false".to_string());
        }
        apiserver_args.extend(extra.iter().map(|a| a.to_string()));
        write_exec_script(&dir.join("etcd.sh"), &peers.etcd, &etcd_args);
        write_exec_script(
            &dir.join("kube-apiserver.sh"),
            &peers.kube_apiserver,
            &apiserver_args,
        );

        let launcher = Launcher::start(&dir, &["etcd", "kube-apiserver"]);
        // From here on the launcher owns the directory.
        let _ = guard.keep();
        let pids = KitPids {
            launcher: launcher.pid(),
            etcd: read_pid(&dir, "etcd"),
            kube_apiserver: read_pid(&dir, "kube-apiserver"),
        };

        let mut kit = Kit {
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            restricted_kubeconfig: dir.join("restricted.kubeconfig"),
            dir,
            launcher: Mutex::new(Some(launcher)),
            pids,
            restarted_apiserver: Mutex::new(None),
            url,
            port,
            etcd_url,
            ready_in: Duration::ZERO,
            crds_in: Duration::ZERO,
        };
        block_on(kit.wait_ready());
        kit.ready_in = started.elapsed();
        if let Some(crds) = &options.crds {
            block_on(kit.install_crds(crds));
        }
        if options.gateway_api {
            block_on(kit.install_crds(&gateway_api_crds()));
        }
        kit.crds_in = started.elapsed() - kit.ready_in;
        eprintln!(
            "kit: etcd + kube-apiserver on {} ready in {:.1} s, CRDs established {:.1} s later",
            kit.url,
            kit.ready_in.as_secs_f64(),
            kit.crds_in.as_secs_f64()
        );
        kit
    }

    /// The pid of the kube-apiserver running now (the launcher's, or the one
    /// [`Kit::start_apiserver`] started last).
    pub fn apiserver_pid(&self) -> u32 {
        self.restarted_apiserver
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map_or(self.pids.kube_apiserver, |restarted| restarted.pid)
    }

    /// Stops the kube-apiserver (SIGTERM, SIGKILL once `grace` has passed: with watches
    /// open its graceful shutdown takes about 30 s) and waits until it is gone; etcd keeps
    /// running, with everything the apiserver wrote. Until [`Kit::start_apiserver`] its
    /// port refuses connections. Returns how long it took.
    pub fn stop_apiserver(&self, grace: Duration) -> Duration {
        let started = Instant::now();
        let pid = self.apiserver_pid();
        let signal = |name: &str| {
            let _ = Command::new("kill")
                .args([name, &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        signal("-TERM");
        while process_alive(pid) && started.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(20));
        }
        if process_alive(pid) {
            signal("-KILL");
        }
        while process_alive(pid) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "kube-apiserver (pid {pid}) does not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    }

    /// Starts the kube-apiserver again after [`Kit::stop_apiserver`], from the same script:
    /// the same port, etcd, serving certificate (its `--cert-dir` keeps it) and tokens, so
    /// every kubeconfig and client of the kit works again. Its output is appended to its
    /// log. Blocks until it is ready; returns how long that took. The new process is stopped
    /// with the kit, or when the test process exits however it exits (it runs under a guard
    /// holding a pipe, like the launcher).
    pub fn start_apiserver(&self) -> Duration {
        let started = Instant::now();
        let mut slot = self
            .restarted_apiserver
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The previous restart's guard, if any (its apiserver was stopped).
        drop(slot.take());
        let _ = std::fs::remove_file(self.dir.join("kube-apiserver.pid"));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(RESTARTED_APISERVER)
            .arg("haptor-test-apiserver")
            .arg(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs the restarted apiserver's guard");
        let stdin = child.stdin.take();
        let pid = read_pid(&self.dir, "kube-apiserver");
        *slot = Some(RestartedApiserver { child, stdin, pid });
        drop(slot);
        block_on(async {
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                assert!(
                    process_alive(pid),
                    "the restarted kube-apiserver (pid {pid}) exited; its log ends:\n{}",
                    log_tail(&self.dir, "kube-apiserver")
                );
                let last = match self.probe_ready().await {
                    Ok(()) => return,
                    Err(e) => e,
                };
                assert!(
                    Instant::now() < deadline,
                    "the restarted kube-apiserver is not ready within {READY_TIMEOUT:?} (last: \
                     {last}); its log ends:\n{}",
                    log_tail(&self.dir, "kube-apiserver")
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        started.elapsed()
    }

    /// The kit's directory (removed by the launcher when the kit stops).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The launcher's and the servers' pids.
    pub fn pids(&self) -> KitPids {
        self.pids
    }

    /// A kubeconfig (server, the apiserver's certificate as its CA, a token) for the admin
    /// identity, for the haptor binary.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// The same for the restricted identity ([`RESTRICTED_USER`]).
    pub fn restricted_kubeconfig(&self) -> &Path {
        &self.restricted_kubeconfig
    }

    /// A client of the admin identity, built from its kubeconfig.
    pub async fn admin(&self) -> Client {
        client_from(&self.admin_kubeconfig, None).await
    }

    /// A client of the restricted identity, built from its kubeconfig.
    pub async fn restricted(&self) -> Client {
        client_from(&self.restricted_kubeconfig, None).await
    }

    /// A client of the admin identity that reaches the apiserver through `url` (a proxy on
    /// 127.0.0.1, which the serving certificate covers).
    pub async fn admin_via(&self, url: &str) -> Client {
        client_from(&self.admin_kubeconfig, Some(url)).await
    }

    /// Creates a namespace of its own for one test: `PREFIX-PID-N`, labelled
    /// `haptor.dev/test=PREFIX`. Namespaces are not removed (without a controller-manager
    /// their deletion never finishes); they go with the server.
    pub async fn temp_ns(&self, prefix: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": { "haptor.dev/test": prefix } }
        }))
        .expect("a Namespace");
        Api::<Namespace>::all(self.admin().await)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// Creates pod `name` in `ns` with `labels` and makes it what a kubelet would report
    /// for a started pod, as no kubelet runs here: through the status subresource (a merge
    /// patch, as field manager `haptor-kit`) phase `Running`, condition `Ready=True`, and
    /// `pod_ip` as its `podIP` and only `podIPs` entry. Returns the pod as the server then
    /// stores it. The pod's single container names an image that is never pulled.
    pub async fn ready_pod(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        pod_ip: &str,
    ) -> Pod {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": labels },
            "spec": { "containers": [{ "name": "main", "image": "haptor-kit.invalid/none" }] },
        }))
        .expect("a Pod");
        let api = Api::<Pod>::namespaced(self.admin().await, ns);
        api.create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("creating pod {ns}/{name}: {e}"));
        let status = serde_json::json!({
            "status": {
                "phase": "Running",
                "conditions": [{ "type": "Ready", "status": "True" }],
                "podIP": pod_ip,
                "podIPs": [{ "ip": pod_ip }],
            }
        });
        api.patch_status(
            name,
            &PatchParams {
                field_manager: Some("haptor-kit".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&status),
        )
        .await
        .unwrap_or_else(|e| panic!("making pod {ns}/{name} Running and Ready with {pod_ip}: {e}"))
    }

    /// Creates EndpointSlice `SERVICE-kit` in `ns` for Service `service` as the
    /// EndpointSlice controller would (there is none here): labelled
    /// `kubernetes.io/service-name=SERVICE`, address type IPv4, one ready endpoint per
    /// address in `addresses`, and one TCP port `port` (unnamed, as for a Service with a
    /// single port). The Service itself need not exist. The server validates the
    /// addresses: a loopback (127.0.0.0/8) or link-local (169.254.0.0/16) one is refused
    /// with 422 Unprocessable Entity, which is returned, not panicked on. So tests use
    /// private-range addresses such as `10.244.0.5`: they are only written to the API.
    pub async fn endpoint_slice(
        &self,
        ns: &str,
        service: &str,
        addresses: &[&str],
        port: i32,
    ) -> kube::Result<EndpointSlice> {
        let endpoints: Vec<serde_json::Value> = addresses
            .iter()
            .map(|address| {
                serde_json::json!({ "addresses": [address], "conditions": { "ready": true } })
            })
            .collect();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("{service}-kit"),
                "labels": { "kubernetes.io/service-name": service },
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{ "port": port, "protocol": "TCP" }],
        }))
        .expect("an EndpointSlice");
        Api::<EndpointSlice>::namespaced(self.admin().await, ns)
            .create(&PostParams::default(), &slice)
            .await
    }

    /// etcd's current revision, from its v3 HTTP gateway (`/v3/kv/range`).
    pub async fn etcd_revision(&self) -> i64 {
        let reply = self
            .etcd_post("/v3/kv/range", serde_json::json!({ "key": "AA==" }))
            .await;
        reply["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no header.revision in etcd's answer {reply}"))
    }

    /// Compacts etcd at its current revision (physically, so the compaction has happened
    /// when this returns) and returns that revision: every older resourceVersion is gone.
    pub async fn compact_etcd(&self) -> i64 {
        let revision = self.etcd_revision().await;
        self.etcd_post(
            "/v3/kv/compaction",
            serde_json::json!({ "revision": revision.to_string(), "physical": true }),
        )
        .await;
        revision
    }

    async fn etcd_post(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        install_crypto();
        let response = reqwest::Client::new()
            .post(format!("{}{path}", self.etcd_url))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("etcd {path}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "etcd {path} answered {status}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("etcd {path}: {e}: {text}"))
    }

    /// The last lines of a server's log, for failure messages.
    pub fn log_tail(&self, server: &str) -> String {
        log_tail(&self.dir, server)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for (name, pid) in [
                ("etcd", self.pids.etcd),
                ("kube-apiserver", self.pids.kube_apiserver),
            ] {
                assert!(
                    process_alive(pid),
                    "{name} (pid {pid}) exited before kube-apiserver was ready; its log ends:\n{}",
                    log_tail(&self.dir, name)
                );
            }
            let last = match self.probe_ready().await {
                Ok(()) => return,
                Err(e) => e,
            };
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {READY_TIMEOUT:?} (last: {last}); its log ends:\n{}",
                log_tail(&self.dir, "kube-apiserver")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ready: the serving certificate is written (the kubeconfigs are written from it),
    /// `/readyz` answers `ok` and the `default` namespace exists.
    async fn probe_ready(&self) -> Result<(), String> {
        let cert = std::fs::read_to_string(self.dir.join("pki/apiserver.crt"))
            .map_err(|e| format!("no serving certificate yet: {e}"))?;
        // The file holds the serving certificate and the CA that signed it.
        if cert.matches("-----END CERTIFICATE-----").count() < 2 {
            return Err("serving certificate not completely written yet".into());
        }
        self.write_kubeconfigs(&cert);
        let client = Client::try_from(config_from(&self.admin_kubeconfig, None).await?)
            .map_err(|e| e.to_string())?;
        let readyz = client
            .request_text(
                http::Request::get("/readyz")
                    .body(Vec::new())
                    .expect("a request"),
            )
            .await
            .map_err(|e| format!("/readyz: {e}"))?;
        if readyz.trim() != "ok" {
            return Err(format!("/readyz answered {readyz}"));
        }
        Api::<Namespace>::all(client)
            .get("default")
            .await
            .map_err(|e| format!("namespace default: {e}"))?;
        Ok(())
    }

    fn write_kubeconfigs(&self, ca_pem: &str) {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        for (path, user, token) in [
            (&self.admin_kubeconfig, "haptor-admin", ADMIN_TOKEN),
            (
                &self.restricted_kubeconfig,
                RESTRICTED_USER,
                RESTRICTED_TOKEN,
            ),
        ] {
            let text = format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: haptor-kit\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\n\
                 users:\n- name: {user}\n  user:\n    token: {token}\n\
                 contexts:\n- name: {user}\n  context:\n    cluster: haptor-kit\n    user: {user}\n    namespace: default\n\
                 current-context: {user}\n",
                url = self.url
            );
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, text).expect("write a kubeconfig");
            std::fs::rename(&tmp, path).expect("move a kubeconfig in place");
        }
    }

    /// Installs the Gateway API's CRDs ([`gateway_api_crds`]) in a running kit, e.g. the
    /// shared one, unless they are there: [`Kit::install_crds`].
    pub async fn install_gateway_api_crds(&self) {
        self.install_crds(&gateway_api_crds()).await;
    }

    /// Creates every CRD in `path` (a multi-document YAML file of CRDs only) and waits until
    /// each is established and its resource answers a list. A CRD that already exists (a
    /// shared kit: another test installed it) is left as it is and waited for the same way.
    /// A CRD the apiserver does not accept (names taken, a non-structural schema) fails at
    /// once with the apiserver's condition.
    pub async fn install_crds(&self, path: &Path) {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading CRDs {}: {e}", path.display()));
        let documents: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|document| {
                serde::Deserialize::deserialize(document)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            })
            .filter(|value: &serde_json::Value| !value.is_null())
            .collect();
        let client = self.admin().await;
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        let mut crds = Vec::new();
        for value in documents {
            let crd: CustomResourceDefinition = serde_json::from_value(value)
                .unwrap_or_else(|e| panic!("{}: not a CRD: {e}", path.display()));
            match api.create(&PostParams::default(), &crd).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(e) => panic!("the apiserver refused CRD {:?}: {e}", crd.metadata.name),
            }
            crds.push(crd);
        }
        assert!(!crds.is_empty(), "{} holds no CRD", path.display());
        let deadline = Instant::now() + CRD_TIMEOUT;
        for crd in &crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            loop {
                let conditions = api
                    .get_status(&name)
                    .await
                    .ok()
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .unwrap_or_default();
                for c in &conditions {
                    let refused = (c.type_ == "NamesAccepted" && c.status == "False")
                        || (c.type_ == "NonStructuralSchema" && c.status == "True");
                    assert!(
                        !refused,
                        "CRD {name}: {} {}: {}",
                        c.type_,
                        c.reason.as_deref().unwrap_or_default(),
                        c.message.as_deref().unwrap_or_default()
                    );
                }
                if conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "CRD {name} not established within {CRD_TIMEOUT:?}: {conditions:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Established means served, but a handler may lag a moment behind it. (A
            // version may be defined but not served: the Gateway API's standard channel
            // keeps its older route versions so.)
            let version = &crd
                .spec
                .versions
                .iter()
                .find(|v| v.served)
                .unwrap_or_else(|| panic!("CRD {name} serves no version"))
                .name;
            let gvk = GroupVersionKind::gvk(&crd.spec.group, version, &crd.spec.names.kind);
            let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
            let objects = Api::<DynamicObject>::all_with(client.clone(), &resource);
            while let Err(e) = objects.list(&ListParams::default().limit(1)).await {
                assert!(
                    Instant::now() < deadline,
                    "CRD {name} established but its resource does not answer: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        // A restarted apiserver first: the launcher removes the directory it logs into.
        drop(
            self.restarted_apiserver
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
        let launcher = self
            .launcher
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(launcher);
    }
}

/// The guard of a restarted kube-apiserver (argument: the kit's directory): starts
/// `DIR/kube-apiserver.sh` with its output appended to its log, writes its pid, and kills it
/// when its standard input closes.
const RESTARTED_APISERVER: &str = r#"dir=$1
sh "$dir/kube-apiserver.sh" </dev/null >>"$dir/kube-apiserver.log" 2>&1 &
pid=$!
echo $pid >"$dir/kube-apiserver.pid.new" && mv "$dir/kube-apiserver.pid.new" "$dir/kube-apiserver.pid"
cat >/dev/null
kill -KILL $pid 2>/dev/null
wait
"#;

/// A kube-apiserver started again, under [`RESTARTED_APISERVER`]; dropping it stops it.
struct RestartedApiserver {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    pid: u32,
}

impl Drop for RestartedApiserver {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Installs the ring rustls provider (haptor's `main` does the same) unless one is.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn config_from(kubeconfig: &Path, url: Option<&str>) -> Result<Config, String> {
    install_crypto();
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let mut config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    if let Some(url) = url {
        config.cluster_url = url.parse().expect("a URL");
    }
    Ok(config)
}

/// A client built from a kubeconfig file, optionally to another URL.
pub async fn client_from(kubeconfig: &Path, url: Option<&str>) -> Client {
    let config = config_from(kubeconfig, url)
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
    Client::try_from(config).expect("a client from the kit's kubeconfig")
}

/// Runs `future` to completion on a runtime of its own, on a thread of its own, so that a
/// blocking caller inside another runtime is fine. A panic in it is the caller's panic.
fn block_on<F>(future: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the kit")
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Writes a script that `exec`s `program` with `args` (each single-quoted for `sh`).
fn write_exec_script(path: &Path, program: &Path, args: &[String]) {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut line = format!("exec {}", quote(&program.display().to_string()));
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    let mut file = std::fs::File::create(path).expect("a launcher script");
    writeln!(file, "{line}").expect("write a launcher script");
}

/// The pid the launcher wrote for `name`.
fn read_pid(dir: &Path, name: &str) -> u32 {
    let path = dir.join(format!("{name}.pid"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "the kit's launcher wrote no {}; its log: {}",
            path.display(),
            std::fs::read_to_string(dir.join("launcher.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn log_tail(dir: &Path, server: &str) -> String {
    let text = std::fs::read_to_string(dir.join(format!("{server}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A process's state letter and start time (in clock ticks since boot), from
/// `/proc/PID/stat`; `None` when there is no such process.
pub fn process_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the fields follow its last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// Whether `pid` is a running (not exited, not a zombie) process.
pub fn process_alive(pid: u32) -> bool {
    process_stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// A TCP proxy on 127.0.0.1 in front of the apiserver whose connections a test can cut:
/// [`cut`](Self::cut) closes every connection through it and holds new ones (accepted, not
/// forwarded) until [`restore`](Self::restore). A client through it sees its watch break
/// and its next requests wait, without backoff, until the test is done with the outage.
/// TLS passes through untouched. Stops when dropped.
pub struct CuttableProxy {
    pub url: String,
    /// (open, generation): the generation counts cuts.
    state: Arc<tokio::sync::watch::Sender<(bool, u64)>>,
    /// How many connections are being forwarded.
    live: Arc<tokio::sync::watch::Sender<usize>>,
    task: tokio::task::JoinHandle<()>,
}

/// Counts one forwarded connection while it lives.
struct Live(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl CuttableProxy {
    pub async fn start(target_port: u16) -> CuttableProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let state = Arc::new(tokio::sync::watch::channel((true, 0u64)).0);
        let live = Arc::new(tokio::sync::watch::channel(0usize).0);
        let (shared, counted) = (Arc::clone(&state), Arc::clone(&live));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut state = shared.subscribe();
                let counted = Arc::clone(&counted);
                connections.spawn(async move {
                    let generation = loop {
                        let (open, generation) = *state.borrow_and_update();
                        if open {
                            break generation;
                        }
                        if state.changed().await.is_err() {
                            return;
                        }
                    };
                    counted.send_modify(|n| *n += 1);
                    let _live = Live(counted);
                    let Ok(mut upstream) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    let cut = async {
                        while state.changed().await.is_ok() {
                            if state.borrow().1 != generation {
                                break;
                            }
                        }
                    };
                    tokio::select! {
                        biased;
                        () = cut => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut upstream) => {}
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        CuttableProxy {
            url: format!("https://127.0.0.1:{port}"),
            state,
            live,
            task,
        }
    }

    /// Closes every connection through the proxy and returns once they are closed; new
    /// ones wait until [`Self::restore`].
    pub async fn cut(&self) {
        self.state
            .send_modify(|(open, generation)| (*open, *generation) = (false, *generation + 1));
        self.live
            .subscribe()
            .wait_for(|n| *n == 0)
            .await
            .expect("the proxy runs");
    }

    /// Forwards the waiting connections and any new one again.
    pub fn restore(&self) {
        self.state.send_modify(|(open, _)| *open = true);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
