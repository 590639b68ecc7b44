//! A release of the chart on the node, removed when the test ends, and what the tests ask of
//! it: its controller and HAProxy pods, the Lease, the leader's `/readyz`.

use crate::helm::CHART;
use crate::node_kit::{Node, pod_name, pod_ready};

use serde_json::Value;

/// The release name: the objects are named `haptor-...` as in the README's install.
pub const NAME: &str = "haptor";
pub const CONTROLLER: &str = "app.kubernetes.io/component=controller";
pub const HAPROXY: &str = "app.kubernetes.io/component=haproxy";

/// The chart's values that run the images built for the test: never pulled, and the
/// HAProxy Service a ClusterIP one (no load balancer here).
pub fn image_values() -> Vec<String> {
    [
        "image.repository=docker.io/library/haptor",
        "image.tag=dev",
        "image.pullPolicy=Never",
        "haproxy.image.repository=docker.io/library/haptor-haproxy",
        "haproxy.image.tag=dev",
        "haproxy.dataplane.image.repository=docker.io/library/haptor-haproxy",
        "haproxy.dataplane.image.tag=dev",
        "haproxy.service.type=ClusterIP",
        // Shorter shutdowns: the tests' uninstalls wait for the pods to go.
        "haproxy.preStopSleepSeconds=1",
    ]
    .iter()
    .map(|value| value.to_string())
    .collect()
}

pub struct Release<'a> {
    pub node: &'a Node,
    pub ns: String,
}

impl<'a> Release<'a> {
    /// `helm install --wait` of the chart into a new namespace `prefix-N`, with the test's
    /// images and `extra` values (`--set` each). Without a Data Plane API in the HAProxy
    /// image its pods could never be Ready, so `--wait` would never end: then the release has
    /// no HAProxy pods, and the test says so.
    pub fn install_wait(node: &'a Node, prefix: &str, extra: &[&str]) -> Release<'a> {
        let mut values: Vec<String> = extra.iter().map(|v| v.to_string()).collect();
        if node.dataplaneapi.is_none() {
            eprintln!(
                "NOTE: no Data Plane API in the HAProxy image (TEST_ASSET_DATAPLANEAPI unset): this release has no HAProxy pods (haproxy.enabled=false), since they could not become Ready"
            );
            values.push("haproxy.enabled=false".to_string());
        }
        Release::install(node, prefix, &values, true)
    }

    /// `helm install` of the chart into a new namespace `prefix-N` (`--wait` when `wait`).
    pub fn install(node: &'a Node, prefix: &str, extra: &[String], wait: bool) -> Release<'a> {
        let ns = node.namespace(prefix);
        let mut args: Vec<String> = ["install", NAME, CHART, "--namespace", &ns]
            .iter()
            .map(|a| a.to_string())
            .collect();
        for value in image_values().iter().chain(extra) {
            args.push("--set".to_string());
            args.push(value.clone());
        }
        if wait {
            args.extend([
                "--wait".to_string(),
                "--timeout".to_string(),
                "4m".to_string(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        node.helm(&args);
        Release { node, ns }
    }

    /// `helm upgrade --wait` that changes only the controllers' pod template (an
    /// annotation), so their Deployment rolls.
    pub fn roll_controllers(&self) {
        self.node.helm(&[
            "upgrade",
            NAME,
            CHART,
            "--namespace",
            &self.ns,
            "--reuse-values",
            "--set",
            "controller.podAnnotations.rolled=once",
            "--wait",
            "--timeout",
            "4m",
        ]);
    }

    pub fn controller_pods(&self) -> Vec<Value> {
        self.node.pods(&self.ns, CONTROLLER)
    }

    pub fn haproxy_pods(&self) -> Vec<Value> {
        self.node.pods(&self.ns, HAPROXY)
    }

    /// The Lease's holder, if any.
    pub fn lease_holder(&self) -> Option<String> {
        let lease = self
            .node
            .get_json(&["lease", "haptor-leader", "-n", &self.ns]);
        lease["spec"]["holderIdentity"]
            .as_str()
            .filter(|holder| !holder.is_empty())
            .map(str::to_string)
    }

    /// The names of the controller pods that are Ready and not being deleted.
    pub fn ready_controllers(&self) -> Vec<String> {
        self.controller_pods()
            .iter()
            .filter(|pod| pod_ready(pod) && pod["metadata"]["deletionTimestamp"].is_null())
            .map(pod_name)
            .collect()
    }

    /// The leader's `/readyz` (on its pod IP: the node routes to pods), once a Ready
    /// controller pod holds the Lease.
    pub fn leader_readyz(&self) -> Option<Value> {
        let holder = self.lease_holder()?;
        let pod = self
            .controller_pods()
            .into_iter()
            .find(|pod| pod_name(pod) == holder)?;
        let ip = pod["status"]["podIP"].as_str()?;
        let body = http_get(&format!("http://{ip}:8081/readyz"))?;
        serde_json::from_str(&body).ok()
    }

    /// The ValidatingWebhookConfiguration once the controller registered itself: its CA in
    /// every webhook's caBundle, then `failurePolicy: Fail` once it answers.
    pub fn registered_webhook(&self) -> Value {
        self.node
            .wait_for("the webhook configuration with Fail and a caBundle", || {
                let configuration = self
                    .node
                    .get_json(&["validatingwebhookconfiguration", NAME]);
                let webhooks = configuration["webhooks"].as_array()?;
                webhooks
                    .iter()
                    .all(|webhook| {
                        webhook["failurePolicy"] == "Fail"
                            && webhook["clientConfig"]["caBundle"]
                                .as_str()
                                .is_some_and(|ca| !ca.is_empty())
                    })
                    .then_some(configuration.clone())
            })
    }

    /// The config's validation status (`Valid`, `Invalid`), if written.
    pub fn config_status(&self) -> Option<String> {
        let config =
            self.node
                .get_json(&["haproxytemplateconfig", "haptor-config", "-n", &self.ns]);
        config["status"]["validationStatus"]
            .as_str()
            .map(str::to_string)
    }
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let uninstalled = self.node.helm_output(&[
            "uninstall",
            NAME,
            "--namespace",
            &self.ns,
            "--wait",
            "--timeout",
            "2m",
        ]);
        if !uninstalled.status.success() {
            eprintln!(
                "helm uninstall in {}: {}",
                self.ns,
                String::from_utf8_lossy(&uninstalled.stderr)
            );
        }
        let _ = self
            .node
            .kubectl_output(&["delete", "namespace", &self.ns, "--wait=false"], None);
    }
}

/// A plain HTTP GET with curl (no proxy); the body of a 2xx or 503 answer, or None.
pub fn http_get(url: &str) -> Option<String> {
    let output = std::process::Command::new("curl")
        .args(["-s", "--noproxy", "*", "--max-time", "5", url])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The HTTP status of a GET of `url` (curl, no proxy), or None when nothing answered.
pub fn http_status(url: &str) -> Option<u16> {
    let output = std::process::Command::new("curl")
        .args([
            "-s",
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["--max-time", "5", url])
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .parse()
        .ok()
        .filter(|status| *status != 0)
}
