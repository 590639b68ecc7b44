//! The Kubernetes drivers of `haptor run`, on kube-rs: the config and its status (`config`),
//! the Data Plane API credentials (`credentials`), the leader Lease (`lease`), the
//! watched resources (`resources`), the HAProxy pods (`discovery`), the HAProxyCfg writer
//! (`publish`) and the Kubernetes Events about the config (`events`). Each turns what the
//! API server says into the watch channels
//! and event streams the actor tree reads (`actors::context::Sources`), or, for `events`,
//! what the tree observed into Events; the decisions they take (who leads, which epoch, which
//! objects are kept, which pods are deployed to, what an Event says) are pure functions in
//! `crate::pure`.

pub mod config;
pub mod credentials;
pub mod discovery;
pub mod events;
pub mod ingress_status;
pub mod lease;
pub mod publish;
pub mod resources;
