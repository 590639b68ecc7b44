//! The API server tier: the real kube-apiserver and etcd of the test kit
//! (`scripts/test-peers` builds them; `support/kube.rs` starts them, one shared kit per
//! program), with the `haptor` binary, helm and the pod network where a test needs them. One
//! test program for the tier, so the kit and the support code are built once.

#[path = "../support/dataplaneapi.rs"]
mod dataplane_peer;
#[path = "../support/gateway_checks.rs"]
mod gateway_checks;
#[path = "../support/haptor_run.rs"]
mod haptor_run;
#[path = "../support/helm.rs"]
mod helm;
#[path = "../support/kube.rs"]
mod kube_kit;
#[path = "../support/local.rs"]
mod local;
#[path = "../support/pod_network.rs"]
mod pod_network;
#[path = "../support/mod.rs"]
mod support;

mod chart;
mod fault_injection;
mod gateway_api;
mod gateway_conformance_status;
mod kube_apiserver;
mod kube_discovery;
mod kube_events;
mod kube_publish;
mod kube_sources;
mod leader_election;
mod migrate_cluster;
mod pod_networks;
mod run_gateway_status;
mod run_http_resources;
mod run_ingress_status;
mod run_mode;
mod run_rbac;
mod run_startup_errors;
mod run_webhook;
