//! Which HAProxy pods the controller deploys to: the pods of the config's namespace that
//! match its `podSelector` (the API server applies the selector), are ready, are not being
//! deleted and have a pod IP, each reached through its Data Plane API at
//! `http://<podIP>:<dataplane.port>`. Pure: the driver in `drivers::kube::discovery` feeds it
//! what the pod watch sees and publishes the answer.
//!
//! "Ready" is the pod's `Ready` condition, or its [`DATAPLANE_CONTAINER`] container being
//! ready: an HAProxy pod whose readinessProbe is the configuration's own health check (the
//! library's `monitor-uri`) becomes Ready only once it serves a configuration haptor
//! deployed, so waiting for the pod condition alone would never deploy to it. The Data
//! Plane API container being ready is what a deployment needs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The name of the Data Plane API container in an HAProxy pod (the chart's sidecar).
pub const DATAPLANE_CONTAINER: &str = "dataplaneapi";

/// What discovery needs of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedPod {
    pub name: String,
    pub ip: Option<String>,
    /// The `Ready` condition is `True`, or the [`DATAPLANE_CONTAINER`] container is ready.
    pub ready: bool,
    /// A deletion timestamp is set: the pod is shutting down.
    pub deleting: bool,
}

impl ObservedPod {
    pub fn of(pod: &Pod) -> Option<ObservedPod> {
        let name = pod.metadata.name.clone()?;
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        let dataplane_ready = status
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|containers| {
                containers
                    .iter()
                    .any(|c| c.name == DATAPLANE_CONTAINER && c.ready)
            });
        let ready = ready || dataplane_ready;
        let ip = status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty());
        Some(ObservedPod {
            name,
            ip,
            ready,
            deleting: pod.metadata.deletion_timestamp.is_some(),
        })
    }
}

/// One HAProxy pod to deploy to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodEndpoint {
    /// The pod's name: the instance name in metrics, status and logs.
    pub name: String,
    /// `http://<podIP>:<port>` (an IPv6 address in brackets).
    pub url: String,
}

/// The pods to deploy to, by name.
pub fn pod_endpoints(pods: &BTreeMap<String, ObservedPod>, port: u16) -> Vec<PodEndpoint> {
    pods.values()
        .filter(|p| p.ready && !p.deleting)
        .filter_map(|p| {
            let ip = p.ip.as_deref()?;
            let host = if ip.contains(':') {
                format!("[{ip}]")
            } else {
                ip.to_string()
            };
            Some(PodEndpoint {
                name: p.name.clone(),
                url: format!("http://{host}:{port}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: Option<&str>, ready: bool, deleting: bool) -> (String, ObservedPod) {
        (
            name.to_string(),
            ObservedPod {
                name: name.to_string(),
                ip: ip.map(str::to_string),
                ready,
                deleting,
            },
        )
    }

    #[test]
    fn only_ready_pods_with_an_ip_that_are_not_terminating_are_deployed_to() {
        let pods: BTreeMap<String, ObservedPod> = [
            pod("haproxy-0", Some("10.0.0.5"), true, false),
            pod("haproxy-1", Some("10.0.0.6"), false, false),
            pod("haproxy-2", None, true, false),
            pod("haproxy-3", Some("10.0.0.8"), true, true),
            pod("haproxy-4", Some("fd00::4"), true, false),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            pod_endpoints(&pods, 5555),
            vec![
                PodEndpoint {
                    name: "haproxy-0".into(),
                    url: "http://10.0.0.5:5555".into()
                },
                PodEndpoint {
                    name: "haproxy-4".into(),
                    url: "http://[fd00::4]:5555".into()
                },
            ]
        );
    }

    #[test]
    fn a_pod_whose_data_plane_api_container_is_ready_is_deployed_to_before_the_pod_is_ready() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p" },
            "status": {
                "podIP": "10.0.0.9",
                "conditions": [{ "type": "Ready", "status": "False" }],
                "containerStatuses": [
                    { "name": "haproxy", "ready": false, "restartCount": 0, "image": "h", "imageID": "" },
                    { "name": "dataplaneapi", "ready": true, "restartCount": 0, "image": "d", "imageID": "" }
                ]
            }
        }))
        .expect("a pod");
        assert!(ObservedPod::of(&pod).expect("named").ready);
    }

    #[test]
    fn a_pod_is_ready_only_with_a_true_ready_condition() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p" },
            "status": {
                "podIP": "10.0.0.9",
                "conditions": [
                    { "type": "ContainersReady", "status": "True" },
                    { "type": "Ready", "status": "False" }
                ]
            }
        }))
        .expect("a pod");
        let observed = ObservedPod::of(&pod).expect("named");
        assert!(!observed.ready);
        assert_eq!(observed.ip.as_deref(), Some("10.0.0.9"));
    }
}
