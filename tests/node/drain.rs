//! `kubectl drain` of the node under the chart's PodDisruptionBudgets (minAvailable 1 for the
//! controllers and for the HAProxy pods): the drain evicts one pod of each Deployment, is
//! refused the last one, and gives up naming the budget; one controller (and one HAProxy pod)
//! keeps running, and after `kubectl uncordon` both replicas are back.

use crate::node_kit::{Node, pod_name, pod_ready};
use crate::release::Release;

use serde_json::Value;

const NODE_NAME: &str = "haptor-node";

/// Uncordons the node however the test ends.
struct Uncordon(&'static Node);

impl Drop for Uncordon {
    fn drop(&mut self) {
        let _ = self.0.kubectl_output(&["uncordon", NODE_NAME], None);
    }
}

fn running(pods: &[Value]) -> Vec<String> {
    pods.iter()
        .filter(|pod| {
            pod["status"]["phase"] == "Running" && pod["metadata"]["deletionTimestamp"].is_null()
        })
        .map(pod_name)
        .collect()
}

#[test]
fn a_drain_evicts_only_what_the_pod_disruption_budgets_allow() {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "drain", &[]);
    let ns = release.ns.clone();
    let with_haproxy = node.dataplaneapi.is_some();
    let before = release.controller_pods();
    assert_eq!(running(&before).len(), 2);

    let uncordon = Uncordon(node);
    let selector = "app.kubernetes.io/instance=haptor";
    let drain = node.kubectl_output(
        &[
            "drain",
            NODE_NAME,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--pod-selector",
            selector,
            "--timeout=40s",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&drain.stderr).into_owned();
    assert!(
        !drain.status.success(),
        "the drain cannot finish: the budgets keep one pod of each"
    );
    assert!(
        stderr.contains("disruption budget"),
        "the drain names the budget it was refused by: {stderr}"
    );

    // One controller was evicted (its replacement waits: the node is cordoned); one runs on.
    let controllers = release.controller_pods();
    let still = running(&controllers);
    assert_eq!(still.len(), 1, "one controller keeps running: {still:?}");
    assert!(before.iter().map(pod_name).any(|name| name == still[0]));
    assert!(
        controllers
            .iter()
            .any(|pod| pod["status"]["phase"] == "Pending"),
        "the evicted controller's replacement waits for a node"
    );
    let budgets = node.get_json(&["pdb", "-n", &ns]);
    let budget = |component: &str| -> Value {
        budgets["items"]
            .as_array()
            .and_then(|items| {
                items.iter().find(|pdb| {
                    pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                        == component
                })
            })
            .cloned()
            .unwrap_or_else(|| panic!("a PodDisruptionBudget for the {component} pods: {budgets}"))
    };
    let controller_budget = budget("controller");
    assert_eq!(controller_budget["status"]["disruptionsAllowed"], 0);
    assert_eq!(controller_budget["status"]["currentHealthy"], 1);
    if with_haproxy {
        let haproxy = running(&release.haproxy_pods());
        assert_eq!(
            haproxy.len(),
            1,
            "one HAProxy pod keeps serving: {haproxy:?}"
        );
        assert_eq!(budget("haproxy")["status"]["disruptionsAllowed"], 0);
    }
    // The one left still leads or took the Lease over.
    node.wait_for("the remaining controller to hold the Lease", || {
        (release.lease_holder()? == still[0]).then_some(())
    });

    drop(uncordon);
    node.wait_for("both controllers back after uncordon", || {
        (release.ready_controllers().len() == 2).then_some(())
    });
    if with_haproxy {
        node.wait_for("both HAProxy pods back after uncordon", || {
            (release
                .haproxy_pods()
                .iter()
                .filter(|pod| pod_ready(pod))
                .count()
                == 2)
                .then_some(())
        });
    }
}
