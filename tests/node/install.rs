//! The two installs the README gives, on a real node: `helm install --wait` of the chart and
//! `kubectl apply` of the default manifest. Both bring the controllers to Ready through their
//! probes, running as uid 65532 on a read-only root filesystem, and a controller pod holds the
//! Lease.

use crate::node_kit::{Node, pod_name, pod_processes, pod_ready, process_uid, root_mount_options};
use crate::release::{CONTROLLER, HAPROXY, Release};

use serde_json::Value;

/// The pod's processes that run `program` (the start of their command line), checked to run
/// as uid 65532 on a read-only root: returns how many there are.
fn assert_runs_unprivileged(pod: &Value, program: &str) -> usize {
    let uid = pod["metadata"]["uid"].as_str().expect("a pod has a uid");
    let processes: Vec<(u32, String)> = pod_processes(uid)
        .into_iter()
        .filter(|(_, cmdline)| cmdline.starts_with(program))
        .collect();
    assert!(
        !processes.is_empty(),
        "pod {} runs no {program}: {:?}",
        pod_name(pod),
        pod_processes(uid)
    );
    for (pid, cmdline) in &processes {
        assert_eq!(
            process_uid(*pid),
            Some(65532),
            "{cmdline} (pid {pid}) of pod {} runs as uid 65532",
            pod_name(pod)
        );
        let options = root_mount_options(*pid).unwrap_or_default();
        assert!(
            options.split(',').next() == Some("ro"),
            "{cmdline} (pid {pid}) of pod {} sees its root filesystem read-only, not {options}",
            pod_name(pod)
        );
    }
    processes.len()
}

#[test]
fn helm_install_wait_brings_both_controllers_ready_through_their_probes_as_uid_65532_on_a_read_only_root()
 {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "install", &[]);

    // --wait returned: both controller pods passed their readiness probe (/readyz).
    let controllers = release.controller_pods();
    assert_eq!(controllers.len(), 2, "the chart runs two controllers");
    for pod in &controllers {
        assert!(pod_ready(pod), "{} is Ready", pod_name(pod));
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(
            pod["status"]["containerStatuses"][0]["restartCount"],
            0,
            "{} was never restarted by its liveness probe",
            pod_name(pod)
        );
        assert_runs_unprivileged(pod, "/usr/local/bin/haptor run");
    }
    assert_eq!(release.config_status().as_deref(), Some("Valid"));

    if node.dataplaneapi.is_some() {
        let haproxy = release.haproxy_pods();
        assert_eq!(haproxy.len(), 2, "the chart runs two HAProxy pods");
        for pod in &haproxy {
            assert!(pod_ready(pod), "{} is Ready", pod_name(pod));
            assert_runs_unprivileged(pod, "/usr/local/sbin/haproxy");
            assert_runs_unprivileged(pod, "dataplaneapi");
        }
    }
}

#[test]
fn a_controller_pod_holds_the_lease_and_only_it_leads() {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "lease", &[]);

    let holder = node.wait_for("the Lease held by a Ready controller pod", || {
        let holder = release.lease_holder()?;
        release
            .ready_controllers()
            .contains(&holder)
            .then_some(holder)
    });
    // Each replica says whether it leads; only the holder does.
    for pod in release.controller_pods() {
        let ip = pod["status"]["podIP"]
            .as_str()
            .expect("a Ready pod has an IP");
        let metrics = crate::release::http_get(&format!("http://{ip}:9090/metrics"))
            .expect("the controller serves its metrics on the pod IP");
        let leads = metrics
            .lines()
            .any(|line| line.trim() == "haptor_leader_is_leader 1");
        assert_eq!(
            leads,
            pod_name(&pod) == holder,
            "{} leads exactly when it holds the Lease ({holder})",
            pod_name(&pod)
        );
    }
}

#[test]
fn kubectl_apply_of_the_default_manifest_installs_the_controllers_without_helm() {
    let (node, _turn) = Node::take();
    // As the README's "Installing" says, word for word.
    node.kubectl(&["apply", "--server-side", "-f", "deploy/crds/"]);
    node.kubectl(&["create", "namespace", "haptor"]);
    let applied = node.kubectl_output(&["apply", "-f", "deploy/manifests/haptor.yaml"], None);
    let removed = Removal(node);
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let rollout = node.kubectl_output(
        &[
            "-n",
            "haptor",
            "rollout",
            "status",
            "deployment/haptor",
            "--timeout=4m",
        ],
        None,
    );
    assert!(
        rollout.status.success(),
        "the controllers roll out: {}\n{}",
        String::from_utf8_lossy(&rollout.stderr),
        node.diagnostics()
    );
    let controllers = node.pods("haptor", CONTROLLER);
    assert_eq!(controllers.len(), 2);
    for pod in &controllers {
        assert!(pod_ready(pod), "{} is Ready", pod_name(pod));
        assert_runs_unprivileged(pod, "/usr/local/bin/haptor run");
    }
    node.wait_for("the config Valid", || {
        let config = node.get_json(&["haproxytemplateconfig", "haptor-config", "-n", "haptor"]);
        (config["status"]["validationStatus"] == "Valid").then_some(())
    });
    // The credentials Secret the HAProxy pods wait for is made by the controller.
    node.wait_for("the Secret haptor-dataplane", || {
        let secret = node.get_json(&["secret", "haptor-dataplane", "-n", "haptor"]);
        secret["data"]["dataplane_password"].as_str().map(|_| ())
    });
    if node.dataplaneapi.is_some() {
        let rollout = node.kubectl_output(
            &[
                "-n",
                "haptor",
                "rollout",
                "status",
                "deployment/haptor-haproxy",
                "--timeout=4m",
            ],
            None,
        );
        assert!(
            rollout.status.success(),
            "the HAProxy pods roll out: {}\n{}",
            String::from_utf8_lossy(&rollout.stderr),
            node.diagnostics()
        );
        assert_eq!(node.pods("haptor", HAPROXY).len(), 2);
    } else {
        eprintln!(
            "NOTE: no Data Plane API in the HAProxy image: the manifest's HAProxy pods are not waited for"
        );
    }
    drop(removed);
}

/// Removes what the manifest made, however the test ends.
struct Removal(&'static Node);

impl Drop for Removal {
    fn drop(&mut self) {
        let node = self.0;
        let _ = node.kubectl_output(
            &[
                "delete",
                "-f",
                "deploy/manifests/haptor.yaml",
                "--wait",
                "--timeout=2m",
            ],
            None,
        );
        let _ = node.kubectl_output(&["delete", "namespace", "haptor", "--wait=false"], None);
    }
}
