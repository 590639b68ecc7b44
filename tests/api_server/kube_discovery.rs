//! Discovery of HAProxy pods against the real API server of the test kit: the pods of a
//! namespace matching the `podSelector`, Ready, with a pod IP, become instances at
//! `http://<podIP>:<port>`; a pod that turns unready, is deleted or lies elsewhere is not
//! one; a pod that keeps its address keeps its target.

use crate::kube_kit;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use haptor::drivers::kube::discovery::{
    DataplaneCredentials, Discovered, PodDiscoverySettings, spawn,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use tokio::sync::watch;

use kube_kit::Kit;

/// Waits until the published pods are `expected` (name, url), or fails naming the last.
async fn wait_for(out: &mut watch::Receiver<Discovered>, expected: &[(&str, &str)]) -> Discovered {
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(n, u)| (n.to_string(), u.to_string()))
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = out.borrow_and_update().clone();
        let got: Vec<(String, String)> = now
            .endpoints
            .iter()
            .map(|e| (e.name.clone(), e.url.clone()))
            .collect();
        if got == want {
            assert_eq!(
                now.instances
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>(),
                expected.iter().map(|(n, _)| *n).collect::<Vec<_>>()
            );
            return now;
        }
        if tokio::time::timeout_at(deadline, out.changed())
            .await
            .is_err()
        {
            panic!("discovery published {got:?}, expected {want:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_selected_pods_become_instances_and_leave_when_they_stop_being_so() {
    let kit = Kit::shared();
    let ns = kit.temp_ns("discovery").await;
    let other = kit.temp_ns("discovery-other").await;
    let labels = [("app", "haproxy")];
    kit.ready_pod(&ns, "haproxy-0", &labels, "10.213.250.10")
        .await;
    kit.ready_pod(&ns, "web-0", &[("app", "web")], "10.213.250.11")
        .await;
    kit.ready_pod(&other, "haproxy-9", &labels, "10.213.250.12")
        .await;
    let client = kit.admin().await;
    let (credentials_tx, credentials) = watch::channel(DataplaneCredentials {
        username: "admin".into(),
        password: "secret".into(),
    });
    let (out_tx, mut out) = watch::channel(Discovered::default());
    let task = spawn(
        client.clone(),
        PodDiscoverySettings {
            namespace: ns.clone(),
            match_labels: BTreeMap::from([("app".to_string(), "haproxy".to_string())]),
            port: 5555,
            credentials_required: false,
            haproxy_version: None,
        },
        credentials,
        out_tx,
    );

    let first = wait_for(&mut out, &[("haproxy-0", "http://10.213.250.10:5555")]).await;

    // A new pod joins once Ready; the first keeps its target.
    kit.ready_pod(&ns, "haproxy-1", &labels, "10.213.250.13")
        .await;
    let second = wait_for(
        &mut out,
        &[
            ("haproxy-0", "http://10.213.250.10:5555"),
            ("haproxy-1", "http://10.213.250.13:5555"),
        ],
    )
    .await;
    assert!(Arc::ptr_eq(
        &first.instances[0].target,
        &second.instances[0].target
    ));

    // Unready: out. Ready again with another address: in, at that address.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let status = |ready: &str, ip: &str| {
        serde_json::json!({ "status": {
            "conditions": [{ "type": "Ready", "status": ready }],
            "podIP": ip, "podIPs": [{ "ip": ip }],
        }})
    };
    let params = PatchParams::default();
    pods.patch_status(
        "haproxy-0",
        &params,
        &Patch::Merge(&status("False", "10.213.250.10")),
    )
    .await
    .expect("unready");
    wait_for(&mut out, &[("haproxy-1", "http://10.213.250.13:5555")]).await;
    pods.patch_status(
        "haproxy-0",
        &params,
        &Patch::Merge(&status("True", "10.213.250.20")),
    )
    .await
    .expect("ready again");
    wait_for(
        &mut out,
        &[
            ("haproxy-0", "http://10.213.250.20:5555"),
            ("haproxy-1", "http://10.213.250.13:5555"),
        ],
    )
    .await;

    // Deleted: out (no kubelet here, so the deletion is immediate with a zero grace period).
    pods.delete("haproxy-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleted");
    let last = wait_for(&mut out, &[("haproxy-0", "http://10.213.250.20:5555")]).await;

    // New credentials: a new target for the same pod.
    credentials_tx
        .send(DataplaneCredentials {
            username: "admin".into(),
            password: "rotated".into(),
        })
        .expect("discovery listens");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = out.borrow_and_update().clone();
        if now.instances.len() == 1
            && !Arc::ptr_eq(&now.instances[0].target, &last.instances[0].target)
        {
            break;
        }
        tokio::time::timeout_at(deadline, out.changed())
            .await
            .expect("a new target after the credentials changed")
            .expect("discovery runs");
    }
    task.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn while_required_credentials_are_unknown_no_pod_is_published_and_once_they_arrive_every_ready_one_is()
 {
    let kit = Kit::shared();
    let ns = kit.temp_ns("discovery-creds").await;
    kit.ready_pod(&ns, "haproxy-0", &[("app", "haproxy")], "10.213.251.10")
        .await;
    let (credentials_tx, credentials) = watch::channel(DataplaneCredentials::default());
    let (out_tx, mut out) = watch::channel(Discovered {
        endpoints: Vec::new(),
        instances: Vec::new(),
    });
    let task = spawn(
        kit.admin().await,
        PodDiscoverySettings {
            namespace: ns.clone(),
            match_labels: BTreeMap::from([("app".to_string(), "haproxy".to_string())]),
            port: 5555,
            credentials_required: true,
            haproxy_version: None,
        },
        credentials,
        out_tx,
    );
    // Nothing while the credentials are unknown (the list of one pod takes milliseconds;
    // a publication would arrive well within this wait).
    assert!(
        tokio::time::timeout(Duration::from_secs(2), out.changed())
            .await
            .is_err(),
        "a pod was published before the credentials were known: {:?}",
        out.borrow().endpoints
    );
    credentials_tx
        .send(DataplaneCredentials {
            username: "admin".into(),
            password: "known".into(),
        })
        .expect("discovery listens");
    wait_for(&mut out, &[("haproxy-0", "http://10.213.251.10:5555")]).await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_whose_data_plane_api_is_ready_is_deployed_to_before_the_pod_turns_ready() {
    // The chart's HAProxy pods turn Ready only once they serve a configuration haptor
    // deployed (their readinessProbe is the library's monitor-uri), so discovery must not
    // wait for the pod's Ready condition when the Data Plane API container is ready.
    let kit = Kit::shared();
    let ns = kit.temp_ns("discovery-dataplane").await;
    let labels = [("app", "haproxy")];
    kit.ready_pod(&ns, "haproxy-0", &labels, "10.213.251.10")
        .await;
    let client = kit.admin().await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let status = |dataplane_ready: bool| {
        serde_json::json!({ "status": {
            "conditions": [{ "type": "Ready", "status": "False" }],
            "containerStatuses": [
                { "name": "haproxy", "ready": false, "restartCount": 0, "image": "haproxy", "imageID": "" },
                { "name": "dataplaneapi", "ready": dataplane_ready, "restartCount": 0, "image": "dataplaneapi", "imageID": "" },
            ],
        }})
    };
    pods.patch_status(
        "haproxy-0",
        &PatchParams::default(),
        &Patch::Merge(&status(false)),
    )
    .await
    .expect("unready, Data Plane API not ready");
    let (_credentials_tx, credentials) = watch::channel(DataplaneCredentials::default());
    let (out_tx, mut out) = watch::channel(Discovered::default());
    let task = spawn(
        client.clone(),
        PodDiscoverySettings {
            namespace: ns.clone(),
            match_labels: BTreeMap::from([("app".to_string(), "haproxy".to_string())]),
            port: 5555,
            credentials_required: false,
            haproxy_version: None,
        },
        credentials,
        out_tx,
    );
    wait_for(&mut out, &[]).await;
    pods.patch_status(
        "haproxy-0",
        &PatchParams::default(),
        &Patch::Merge(&status(true)),
    )
    .await
    .expect("the Data Plane API container is ready");
    wait_for(&mut out, &[("haproxy-0", "http://10.213.251.10:5555")]).await;
    task.abort();
}
