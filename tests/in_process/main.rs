//! The in-process tier: the actor tree, the HTTP endpoints, the exact Kubernetes request
//! sequences (a mock service beneath a real `kube::Client`), the layering rules and the
//! templating engine, all inside this test process: nothing is started beside it.
//! One test program (not one per file), so the shared support code is compiled and linked
//! once for the tier.

#[path = "../support/controller.rs"]
mod controller;
#[path = "../support/verifier.rs"]
mod verifier;

mod actor_system;
mod http_endpoints;
mod kube_requests;
mod layering;
mod templating;
