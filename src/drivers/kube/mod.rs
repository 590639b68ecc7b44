//! The Kubernetes drivers of `haptor run`, on kube-rs: the leader Lease (`lease`), the
//! watched resources (`resources`) and the HAProxy pods (`discovery`). Each turns what the
//! API server says into the watch channels and event streams the actor tree reads
//! (`actors::context::Sources`); the decisions they take (who leads, which epoch, which
//! objects are kept, which pods are deployed to) are pure functions in `crate::pure`.

pub mod discovery;
pub mod lease;
pub mod resources;
