//! The I/O drivers: the code that starts processes, talks over sockets and HTTP, and reads
//! and writes files, each behind a trait or a plan that `crate::pure` defines and tests
//! without I/O. `local` drives a haproxy haptor owns (its files, master CLI and runtime
//! API, the process itself); `dataplane` a pod's HAProxy Data Plane API; `haproxy_check`
//! runs `haproxy -c` for the validation pipeline; `manifest_dir` reads folders of
//! manifests; `kube` is the Kubernetes side of `haptor run`; `webhook_certificate` the admission
//! webhook's serving certificate, reloaded when its files change. Two implement the seams of
//! `crate::seams` without a cluster: `memory_source` (an in-memory resource source, for
//! `haptor local` and the tests) and `pipeline` (the reconcile pipeline production runs:
//! render, then the three validation phases, `haproxy -c` last).

/// Aborts a task when dropped: a sub-task ends with whatever started it, however that
/// ends (returns, panics, is aborted).
pub struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub mod dataplane;
pub mod default_certificate;
pub mod haproxy_check;
pub mod http_resource;
pub mod kube;
pub mod local;
pub mod manifest_dir;
pub mod memory_source;
pub mod pipeline;
pub mod webhook_certificate;

/// An error with its causes, as one line (reqwest's errors keep the reason in their
/// sources: "error sending request: connection refused").
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
