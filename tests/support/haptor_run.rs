//! `haptor run` processes for the end-to-end tests (`run_mode.rs`, `run_pods.rs`): the real
//! binary started against the kit's API server with its own probe, debug and metrics ports
//! and its log in a file, killed when dropped; the Ingress library as a test's
//! `HAProxyTemplateConfig` and an Ingress to route through it ([`create_ingress`]); and
//! polling with a deadline that shows the replicas' logs when it fails. Included with `#[path = "support/haptor_run.rs"] mod haptor_run;` beside
//! `mod support;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use haptor::pure::config::HAProxyTemplateConfig;
use serde_json::{Value, json};

use super::support::{free_port, haproxy_binary};

/// How long a controller may take to do what a test waits for (generous: the machine may be
/// running several test binaries' servers at once).
pub const WAIT: Duration = Duration::from_secs(90);

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The Ingress library as the HAProxyTemplateConfig `haptor-config` of `ns`, with the
/// given leader election settings.
pub fn library_config(ns: &str, leader_election: Value) -> HAProxyTemplateConfig {
    let text = std::fs::read_to_string(repo("deploy/library/ingress.yaml")).expect("the library");
    let mut value: Value = serde_yaml_ng::from_str(&text).expect("the library is YAML");
    value["metadata"] = json!({ "name": "haptor-config", "namespace": ns });
    value["spec"]["leaderElection"] = leader_election;
    serde_json::from_value(value).expect("the library is an HAProxyTemplateConfig")
}

/// Creates the Ingress `name` of `ns`, of class `class`, routing `host` `/` to the Service
/// `web` port 80.
pub async fn create_ingress(client: &kube::Client, ns: &str, name: &str, class: &str, host: &str) {
    let ingress: k8s_openapi::api::networking::v1::Ingress = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "ingressClassName": class,
            "rules": [{ "host": host, "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    }))
    .expect("an Ingress");
    kube::Api::namespaced(client.clone(), ns)
        .create(&kube::api::PostParams::default(), &ingress)
        .await
        .expect("the Ingress is created");
}

pub fn no_election() -> Value {
    json!({ "enabled": false })
}

/// Short Lease timings, so a takeover happens within seconds.
pub fn fast_election() -> Value {
    json!({ "enabled": true, "leaseName": "haptor-leader", "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms" })
}

/// A `haptor run` process of a test, killed when dropped.
pub struct Replica {
    child: Option<Child>,
    pub identity: String,
    pub health: u16,
    pub debug: u16,
    pub metrics: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Replica {
    pub fn start(kubeconfig: &Path, ns: &str, identity: &str) -> Replica {
        Replica::start_with_args(kubeconfig, ns, identity, &[])
    }

    /// [`Replica::start`] with `extra` arguments after the usual ones.
    pub fn start_with_args(kubeconfig: &Path, ns: &str, identity: &str, extra: &[&str]) -> Replica {
        let mut args = vec!["run", "--config-name", "haptor-config", "--namespace", ns];
        args.extend(extra);
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        Replica::start_as(kubeconfig, identity, &args, &[("LOG_LEVEL", "info")])
    }

    /// `haptor` with exactly `args` (`run` and its flags, as a Deployment gives them) and
    /// the environment `env`, plus the kubeconfig, the identity and the probe, debug and
    /// metrics addresses on free loopback ports.
    pub fn start_as(
        kubeconfig: &Path,
        identity: &str,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Replica {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = dir.path().join("haptor.log");
        let (health, debug, metrics) = (free_port(), free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_haptor"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--identity", identity])
            .args(["--health-addr", &format!("127.0.0.1:{health}")])
            .args(["--debug-addr", &format!("127.0.0.1:{debug}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .env("HAPROXY_BIN", haproxy_binary())
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log file"))
            .spawn()
            .expect("haptor runs");
        Replica {
            child: Some(child),
            identity: identity.to_string(),
            health,
            debug,
            metrics,
            log,
            _dir: dir,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` and waits for the process; returns its exit code (None: killed).
    /// Sends `signal` (`TERM`, `KILL`) and returns at once.
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &child.id().to_string()])
                .status();
        }
    }

    pub fn stop_with(&mut self, signal: &str) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status();
        child.wait().ok()?.code()
    }

    pub async fn get(&self, port: u16, path: &str) -> Option<(u16, String)> {
        let response = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}{path}"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.text().await.ok()?))
    }

    /// The value of one series of `/metrics`, written as it appears there
    /// (`haptor_config_invalid`, `name{label="value"}`).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.get(self.metrics, "/metrics").await?;
        body.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// The exit code once the process has exited by itself (`Some(None)`: by a signal).
    pub fn exited(&mut self) -> Option<Option<i32>> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        Some(status.code())
    }

    pub async fn readyz(&self) -> Option<(u16, String)> {
        self.get(self.health, "/readyz").await
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `check` every 100 ms until it gives a value, failing after [`WAIT`] with `what`
/// and the replicas' logs.
pub async fn wait_for<T, F, Fut>(what: &str, replicas: &[&Replica], mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if started.elapsed() > WAIT {
            let logs: Vec<String> = replicas
                .iter()
                .map(|r| format!("--- {} ---\n{}", r.identity, tail(&r.log_text(), 80)))
                .collect();
            panic!(
                "timed out after {WAIT:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The holder of Lease `haptor-leader` in `ns`, once it has one.
pub async fn lease_holder(client: &kube::Client, ns: &str) -> Option<String> {
    kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), ns)
        .get_opt("haptor-leader")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits for an Event with `reason` in `ns` (the replicas' logs in the panic otherwise).
pub async fn wait_for_event(
    client: &kube::Client,
    ns: &str,
    reason: &str,
    replicas: &[&Replica],
) -> k8s_openapi::api::events::v1::Event {
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns);
    wait_for(&format!("a {reason} Event"), replicas, || async {
        events
            .list(&kube::api::ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}
