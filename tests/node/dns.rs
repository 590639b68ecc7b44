//! The cluster DNS as the chart's pods meet it: the kubelet points their resolver at CoreDNS
//! (`scripts/test-node` runs it on the node's IP, answering for `cluster.local` from the API
//! server), so a Service is found by its name, short or qualified, and a name no Service has
//! is not found.

use crate::node_kit::{Node, pod_name};
use crate::release::Release;

use std::process::Output;

/// `getent hosts NAME` run in the pod by `kubectl exec` (glibc's resolver, as the
/// controller's own lookups would use it).
fn resolve_in(node: &Node, ns: &str, pod: &str, name: &str) -> Output {
    node.kubectl_output(
        &["exec", "-n", ns, pod, "--", "getent", "hosts", name],
        None,
    )
}

#[test]
fn the_controller_pods_resolve_the_chart_s_services_by_name_through_the_cluster_dns() {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "dns", &[]);
    let ns = &release.ns;
    let service = node.get_json(&["service", "haptor-webhook", "-n", ns]);
    let cluster_ip = service["spec"]["clusterIP"]
        .as_str()
        .expect("the webhook Service has a ClusterIP")
        .to_string();

    let pod = pod_name(&release.controller_pods()[0]);
    let resolv_conf = node.kubectl(&["exec", "-n", ns, &pod, "--", "cat", "/etc/resolv.conf"]);
    assert!(
        resolv_conf.contains(&format!("search {ns}.svc.cluster.local")),
        "the kubelet gives the pod the cluster's search path: {resolv_conf}"
    );

    for name in [
        format!("haptor-webhook.{ns}.svc.cluster.local"),
        "haptor-webhook".to_string(),
    ] {
        let answer = resolve_in(node, ns, &pod, &name);
        let stdout = String::from_utf8_lossy(&answer.stdout);
        assert!(
            answer.status.success() && stdout.split_whitespace().next() == Some(&cluster_ip),
            "{name} resolves to the Service's ClusterIP {cluster_ip} in {pod}: {answer:?}"
        );
    }

    let unknown = resolve_in(
        node,
        ns,
        &pod,
        &format!("no-such-service.{ns}.svc.cluster.local"),
    );
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "a name no Service has is not found (getent's 2): {unknown:?}"
    );
}
