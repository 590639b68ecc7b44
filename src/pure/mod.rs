//! The pure core of haptor: every library that turns Kubernetes objects plus one
//! `HAProxyTemplateConfig` into a validated `haproxy.cfg` and its auxiliary files. Nothing in
//! here knows about actors; the actors in `crate::actors` are thin adapters that call these
//! modules and move their results around. Tests drive these modules directly.

pub mod admission;
pub mod annotations;
pub mod api_failure;
pub mod assertions;
pub mod certificates;
pub mod checksum;
pub mod config;
pub mod config_status;
pub mod deploy;
pub mod discovery;
pub mod election;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod gateway_status;
pub mod haproxy;
pub mod http_resources;
pub mod ingress_status;
pub mod kube_events;
pub mod manifests;
pub mod migration;
pub mod object_schema;
pub mod pipeline;
pub mod readiness;
pub mod redact;
pub mod rendered;
pub mod selector;
pub mod store;
pub mod suggest;
pub mod template;
pub mod validate;
pub mod validation_tests;
pub mod watched_kinds;
pub mod webhook_certificate;
pub mod yaml_lines;
