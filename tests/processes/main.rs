//! The process tier: the real `haproxy` (its `-c` checker and running instances), the
//! `haptor` binary, the Data Plane API stub, the manifest folders of `haptor local` and helm
//! (the chart's monitoring rules); no Kubernetes API server. One test program for the tier, so the shared support code is
//! compiled and linked once.

#[path = "../support/controller.rs"]
mod controller;
#[path = "../support/dataplane_stub.rs"]
mod dataplane_stub;
#[path = "../support/echo.rs"]
mod echo;
#[path = "../support/gateway_checks.rs"]
mod gateway_checks;
#[path = "../support/local.rs"]
mod local;
#[path = "../support/mod.rs"]
mod support;

mod annotations;
mod bad_inputs;
mod cli;
mod code_running_directives;
mod controller_wiring;
mod dataplane_target;
mod dockerfile;
mod gateway_conformance;
mod gateway_library;
mod haproxy_corpus;
mod haproxy_versions;
mod http_resources;
mod ingress_library;
mod keyword_tables;
mod lint_one_mistake;
mod local_mode;
mod local_target;
mod migrate;
mod monitoring;
mod offline_cli;
mod selectors;
mod semantic_check;
