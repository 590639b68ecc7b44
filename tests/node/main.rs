//! The node tier: the chart and the default manifest installed on a real one-node cluster
//! (`scripts/test-node`: kubelet on containerd, kube-proxy, kube-controller-manager,
//! kube-scheduler, the API server and etcd), running the controller image built from the
//! Dockerfile's runtime stage with the test's own `haptor` binary. What an operator meets
//! first: `helm install --wait` and `kubectl apply`, the probes, the non-root user and the
//! read-only root filesystem, the webhook reached through its Service, the Lease held by a
//! pod, a rolling `helm upgrade`, a drain under the PodDisruptionBudgets and the HAProxy pods'
//! start-up. Needs root (it runs a kubelet); the tests take turns on the one node.
//!
//! The HAProxy pods' image carries a Data Plane API only when `TEST_ASSET_DATAPLANEAPI`
//! names one (the Go module proxy serves none to build: README, "Development"). Without
//! it their pods never become Ready, the tests say so and stop where the leader counts them as
//! no instances (their Data Plane API container is not ready), and
//! the traffic tests (`traffic`, feature `real-dataplaneapi`) are not built.

#[path = "../support/helm.rs"]
mod helm;
#[path = "../support/node.rs"]
mod node_kit;

mod dns;
mod drain;
mod haproxy_pods;
mod install;
mod release;
#[cfg(feature = "real-dataplaneapi")]
mod traffic;
mod upgrade;
mod webhook;
