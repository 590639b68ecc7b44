//! The chart's HAProxy pods on a real node: haproxy starts on the placeholder configuration
//! (503 on the HTTP port, nothing on the status port), so the pods stay not Ready while no
//! controller runs; once one does, with a Data Plane API in the image, it discovers them,
//! deploys to them and they become Ready. Without one (CI: none can be built there) their
//! Data Plane API container never becomes ready, and the test stops where the leader runs
//! and counts neither pod as an instance.

use crate::node_kit::{Node, pod_name, pod_ready};
use crate::release::{Release, http_get, http_status};

use serde_json::Value;
use std::time::Duration;

fn haproxy_running(pod: &Value) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .is_some_and(|statuses| {
            statuses
                .iter()
                .any(|s| s["name"] == "haproxy" && !s["state"]["running"].is_null())
        })
}

/// Whether the leader's `/readyz` or metrics name the instance `pod`.
fn leader_knows(release: &Release<'_>, pod: &str) -> bool {
    let Some(readyz) = release.leader_readyz() else {
        return false;
    };
    let behind = readyz["instances_without_the_latest_render"]
        .as_array()
        .is_some_and(|names| names.iter().any(|name| name == pod));
    let holder = release.lease_holder().unwrap_or_default();
    let metrics = release
        .controller_pods()
        .into_iter()
        .find(|p| pod_name(p) == holder)
        .and_then(|p| p["status"]["podIP"].as_str().map(str::to_string))
        .and_then(|ip| http_get(&format!("http://{ip}:9090/metrics")))
        .unwrap_or_default();
    behind || metrics.contains(&format!("instance=\"{pod}\""))
}

#[test]
fn the_haproxy_pods_stay_not_ready_until_a_configuration_is_deployed_and_the_controller_discovers_them()
 {
    let (node, _turn) = Node::take();
    // No controller yet; the credentials Secret from the chart, so the pods can start.
    let values = [
        "controller.replicas=0",
        "haproxy.credentials.password=node-test",
    ]
    .map(str::to_string);
    let release = Release::install(node, "haproxy", &values, false);

    let pods = node.wait_for("both HAProxy pods running haproxy", || {
        let pods = release.haproxy_pods();
        (pods.len() == 2 && pods.iter().all(haproxy_running)).then_some(pods)
    });
    // haproxy serves the placeholder: 503 on the HTTP port.
    for pod in &pods {
        let ip = pod["status"]["podIP"]
            .as_str()
            .expect("a running pod has an IP");
        assert_eq!(
            http_status(&format!("http://{ip}:8080/")),
            Some(503),
            "{} answers the placeholder's 503",
            pod_name(pod)
        );
    }
    // Several readiness periods (2 s) pass with the status port closed: not Ready.
    node.wait_for("a failed readiness probe of an HAProxy pod", || {
        let events = node.get_json(&["events", "-n", &release.ns]);
        events["items"]
            .as_array()?
            .iter()
            .any(|event| {
                event["reason"] == "Unhealthy"
                    && event["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("/healthz"))
            })
            .then_some(())
    });
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(2));
        for pod in release.haproxy_pods() {
            assert!(
                !pod_ready(&pod),
                "{} is not Ready while nothing is deployed",
                pod_name(&pod)
            );
        }
    }

    node.kubectl(&[
        "-n",
        &release.ns,
        "scale",
        "deployment/haptor",
        "--replicas=1",
    ]);
    let names: Vec<String> = pods.iter().map(pod_name).collect();
    if node.dataplaneapi.is_none() {
        // Without a Data Plane API its container never becomes ready, and a pod is an
        // instance only once it is (nothing could be deployed to it): the leader runs and
        // names neither pod.
        node.wait_for("a leader answering /readyz", || release.leader_readyz());
        for _ in 0..3 {
            std::thread::sleep(Duration::from_secs(2));
            for name in &names {
                assert!(
                    !leader_knows(&release, name),
                    "{name} is no instance while its Data Plane API container is not ready"
                );
            }
        }
        eprintln!(
            "NOTE: no Data Plane API in the HAProxy image (TEST_ASSET_DATAPLANEAPI unset): the test stops where the leader runs and holds the pods, whose Data Plane API container is not ready, as no instances; their discovery and the deployment to them are shown only with one"
        );
        return;
    }
    node.wait_for("the leader to name both HAProxy pods", || {
        names
            .iter()
            .all(|name| leader_knows(&release, name))
            .then_some(())
    });
    node.wait_for("both HAProxy pods Ready once deployed to", || {
        let pods = release.haproxy_pods();
        (pods.len() == 2 && pods.iter().all(pod_ready)).then_some(())
    });
    for pod in release.haproxy_pods() {
        let ip = pod["status"]["podIP"].as_str().expect("an IP");
        assert_eq!(
            http_status(&format!("http://{ip}:8404/healthz")),
            Some(200),
            "{} answers /healthz on the status port",
            pod_name(&pod)
        );
    }
}
