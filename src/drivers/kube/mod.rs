//! The Kubernetes drivers of `haptor run`, on kube-rs: the config and its status (`config`),
//! the Data Plane API credentials (`credentials`), the leader Lease (`lease`), the
//! watched resources (`resources`), the HAProxy pods (`discovery`), the HAProxyCfg writer
//! (`publish`) and the Kubernetes Events about the config (`events`). Each turns what the
//! API server says into the watch channels
//! and event streams the actor tree reads (`actors::context::Sources`), or, for `events`,
//! what the tree observed into Events; the decisions they take (who leads, which epoch, which
//! objects are kept, which pods are deployed to, what an Event says) are pure functions in
//! `crate::pure`. Every watch retries with [`watch_retry`].
//!
//! Every failed request is told through `pure::api_failure`: an [`ApiFailure`] names the API
//! server's URL (from the [`KubeApi`] a driver is given), what was asked and the real cause,
//! and one [`FailureLog`] per watch decides how loudly ([`tell_watch_failure`],
//! [`tell_watch_resumed`]): a refusal only once it lasts, any other failure once while it
//! repeats, and the watch working again after failures that were told.

use std::time::{Duration, Instant};

use futures::stream::{BoxStream, Stream, StreamExt};
use kube::Client;
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher;

use crate::pure::api_failure::{ApiFailure, ApiServer, Cause, FailureLog, Level, classify_watch};

/// Logs at a level decided at run time (`pure::api_failure::Level`).
macro_rules! log_at {
    ($level:expr, $($arg:tt)+) => {
        match $level {
            $crate::pure::api_failure::Level::Debug => tracing::debug!($($arg)+),
            $crate::pure::api_failure::Level::Info => tracing::info!($($arg)+),
            $crate::pure::api_failure::Level::Warn => tracing::warn!($($arg)+),
            $crate::pure::api_failure::Level::Error => tracing::error!($($arg)+),
        }
    };
}

pub mod config;
pub mod credentials;
pub mod dataplane_secret;
pub mod default_certificate;
pub mod discovery;
pub mod events;
pub mod gateway_status;
pub mod http_credentials;
pub mod ingress_status;
pub mod lease;
pub mod publish;
pub mod resources;
pub mod webhook_issuer;

/// A Kubernetes client and the API server it talks to, which every failure names. A driver
/// takes `impl Into<KubeApi>`: a bare `kube::Client` works too, its failures then naming
/// "the API server" without a URL.
#[derive(Clone)]
pub struct KubeApi {
    pub client: Client,
    pub server: ApiServer,
}

impl KubeApi {
    pub fn new(client: Client, server: ApiServer) -> KubeApi {
        KubeApi { client, server }
    }

    /// A client for `config`, its API server named by the config's `cluster_url`.
    pub fn connect(config: kube::Config) -> Result<KubeApi, kube::Error> {
        let server = ApiServer::new(&config.cluster_url);
        Ok(KubeApi {
            client: Client::try_from(config)?,
            server,
        })
    }
}

impl From<Client> for KubeApi {
    fn from(client: Client) -> KubeApi {
        KubeApi::new(client, ApiServer::unknown())
    }
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi")
            .field("server", &self.server.url())
            .finish_non_exhaustive()
    }
}

/// Tells a failure of the watch of `what` (a plural, "the config", …) as `log` decides: a
/// `410 Gone` as the relist it causes, a refusal only once it lasts (then with its advice,
/// the RBAC hint of a 403), any other failure once while it repeats.
pub fn tell_watch_failure(log: &mut FailureLog, failure: &ApiFailure, what: &str) {
    let telling = log.failed(&failure.cause, Instant::now());
    if let Cause::Gone { .. } = failure.cause {
        tracing::info!(
            watch = what, error = %failure.cause,
            "the watch of {what} expired (410 Gone): listing {what} again"
        );
        return;
    }
    let text = if telling.advice {
        failure.to_string()
    } else {
        failure.brief()
    };
    log_at!(
        telling.level,
        watch = what,
        cause = failure.metric_label(),
        "{text}; retrying"
    );
}

/// Tells, after failures, that the watch of `what` works again: once, with how many tries
/// failed over how long (at debug level when none of them was told).
pub fn tell_watch_resumed(log: &mut FailureLog, what: &str) {
    let Some(resumed) = log.succeeded(Instant::now()) else {
        return;
    };
    log_at!(
        resumed.level.min(Level::Info),
        watch = what,
        "the watch of {what} resumed after {} failed tries over {:.1} s",
        resumed.failures,
        resumed.over.as_secs_f64()
    );
}

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

/// A watcher's events, retried with [`watch_retry`]: after an error the watcher is polled
/// again only after the next wait, and the waits start over once the API server answered.
/// kube-rs's `StreamBackoff` starts them over at any `Ok` item, and the watcher yields
/// `Init` as it opens a list, before it sends any request: a list that keeps failing (no
/// API server there, a 403, a CRD not installed) was tried again every 250 ms for as long
/// as it failed. Here `Init` is no answer, so those waits grow to 2 s as well. A `410 Gone`
/// is an answer (the watch expired, the server is there): the watcher lists again at once,
/// not after the wait an outage before it built up.
pub fn retried<K: Send + 'static>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>> {
    futures::stream::unfold(
        (events.boxed(), watch_retry(), None::<Duration>),
        |(mut events, mut retry, wait)| async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            let item = events.next().await?;
            let wait = match &item {
                Err(error) if matches!(classify_watch(error), Cause::Gone { .. }) => {
                    retry.reset();
                    None
                }
                Err(_) => retry.next(),
                Ok(watcher::Event::Init) => None,
                Ok(_) => {
                    retry.reset();
                    None
                }
            };
            Some((item, (events, retry, wait)))
        },
    )
    .boxed()
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

    /// The waits `retried` makes between the items of `items`, in milliseconds.
    async fn waits_between(items: Vec<watcher::Result<watcher::Event<()>>>) -> Vec<u64> {
        let mut events = retried(futures::stream::iter(items));
        let mut waits = Vec::new();
        let mut last = tokio::time::Instant::now();
        while events.next().await.is_some() {
            let now = tokio::time::Instant::now();
            waits.push((now - last).as_millis() as u64);
            last = now;
        }
        waits
    }

    fn failed() -> watcher::Result<watcher::Event<()>> {
        Err(watcher::Error::NoResourceVersion)
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_that_keeps_failing_waits_longer_each_time_though_each_retry_opens_with_init() {
        let waits = waits_between(vec![
            failed(),
            Ok(watcher::Event::Init),
            failed(),
            Ok(watcher::Event::Init),
            failed(),
            Ok(watcher::Event::Init),
        ])
        .await;
        assert_eq!(waits, [0, 250, 0, 500, 0, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_after_failures_starts_the_waits_over() {
        let waits = waits_between(vec![
            failed(),
            Ok(watcher::Event::Init),
            failed(),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
            failed(),
            Ok(watcher::Event::Init),
        ])
        .await;
        assert_eq!(waits, [0, 250, 0, 500, 0, 0, 250]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_is_listed_again_at_once_whatever_waits_an_outage_built_up() {
        let gone = Err(watcher::Error::WatchError(Box::new(
            kube::core::Status::failure("too old resource version", "Expired").with_code(410),
        )));
        let waits = waits_between(vec![
            failed(),
            Ok(watcher::Event::Init),
            failed(),
            Ok(watcher::Event::Init),
            gone,
            Ok(watcher::Event::Init),
            failed(),
            Ok(watcher::Event::Init),
        ])
        .await;
        assert_eq!(waits, [0, 250, 0, 500, 0, 0, 0, 250]);
    }
}
