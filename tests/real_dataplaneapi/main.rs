//! The tier that needs the real HAProxy Data Plane API (`TEST_ASSET_DATAPLANEAPI`; built only
//! with the `real-dataplaneapi` feature, which `./scripts/test` turns on when the variable is
//! set): the deploy target against the real API, HAProxy pods run from the chart's files, and
//! `haptor run` deploying to them.

#[path = "../support/dataplaneapi.rs"]
mod dataplane_peer;
#[path = "../support/haproxy_pod.rs"]
mod haproxy_pod;
#[path = "../support/haptor_run.rs"]
mod haptor_run;
#[path = "../support/kube.rs"]
mod kube_kit;
#[path = "../support/pod_network.rs"]
mod pod_network;
#[path = "../support/mod.rs"]
mod support;

mod dataplane_api;
mod haproxy_pods;
mod run_pods;
