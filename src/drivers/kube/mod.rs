//! The Kubernetes drivers of `haptor run`, on kube-rs: the config and its status (`config`),
//! the Data Plane API credentials (`credentials`), the leader Lease (`lease`), the
//! watched resources (`resources`), the HAProxy pods (`discovery`), the HAProxyCfg writer
//! (`publish`) and the Kubernetes Events about the config (`events`). Each turns what the
//! API server says into the watch channels
//! and event streams the actor tree reads (`actors::context::Sources`), or, for `events`,
//! what the tree observed into Events; the decisions they take (who leads, which epoch, which
//! objects are kept, which pods are deployed to, what an Event says) are pure functions in
//! `crate::pure`. Every watch retries with [`watch_retry`].

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};

pub mod config;
pub mod credentials;
pub mod dataplane_secret;
pub mod discovery;
pub mod events;
pub mod ingress_status;
pub mod lease;
pub mod publish;
pub mod resources;
pub mod webhook_issuer;

/// The first retry of a broken watch, and the longest wait between two.
const WATCH_RETRY_FIRST: Duration = Duration::from_millis(250);
const WATCH_RETRY_LONGEST: Duration = Duration::from_secs(2);
/// A watch that has run this long starts its retries from the first wait again.
const WATCH_RETRY_RESET_AFTER: Duration = Duration::from_secs(30);

/// How every watch of `haptor run` retries after the API server stopped answering: 250 ms,
/// then doubling up to 2 s between two tries, from 250 ms again once a watch has run for
/// 30 s. kube-rs's default grows to 30 s, so after an API server restart a watch could wait
/// 10 s and more after the server answered again (a change made meanwhile took about 20 s
/// to render after an 8 s outage); with these, about two seconds at most. A controller's
/// handful of watches retrying every 2 s is no load for an API server.
pub fn watch_retry() -> ResetTimerBackoff<WatchRetry> {
    ResetTimerBackoff::new(WatchRetry::default(), WATCH_RETRY_RESET_AFTER)
}

/// The waits between a broken watch's retries: doubling from [`WATCH_RETRY_FIRST`] up to
/// [`WATCH_RETRY_LONGEST`], forever.
#[derive(Debug, Clone)]
pub struct WatchRetry {
    next: Duration,
}

impl Default for WatchRetry {
    fn default() -> WatchRetry {
        WatchRetry {
            next: WATCH_RETRY_FIRST,
        }
    }
}

impl Iterator for WatchRetry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(WATCH_RETRY_LONGEST);
        Some(wait)
    }
}

impl Backoff for WatchRetry {
    fn reset(&mut self) {
        self.next = WATCH_RETRY_FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_watch_is_retried_within_two_seconds_however_long_the_outage() {
        let mut retry = WatchRetry::default();
        let waits: Vec<u64> = retry
            .by_ref()
            .take(6)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 2000, 2000]);
        retry.reset();
        assert_eq!(retry.next(), Some(WATCH_RETRY_FIRST));
    }
}
