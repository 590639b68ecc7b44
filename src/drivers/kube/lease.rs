//! The leader Lease of `haptor run`: a [`LeaseElector`] runs one task that reads and writes
//! a coordination.k8s.io/v1 Lease through `kube::Api<Lease>` and publishes the replica's
//! [`Leadership`] on the watch channel the actor tree reads (`Sources.leadership`; the
//! LeaderElector actor starts and stops the leader-only subtree on its changes). Every
//! decision — take the Lease, renew it, wait, or admit that the term is over, and which
//! epoch a new term gets — is `pure::election::decide`; this file does the requests, the
//! timeouts and the sleeping.
//!
//! The loop: a candidate GETs the Lease and creates it (POST) when there is none, or takes
//! it over when it is free by a replace (PUT) carrying the resourceVersion it read, so that
//! of two candidates racing for it one gets a 409 and looks again: optimistic concurrency,
//! never a forced write. A leader renews every `retryPeriod` by replacing the object its last
//! write returned (a 409 means someone else wrote: it reads the Lease again and decides).
//! Every request a leader sends is bounded by its renew deadline; when no renewal succeeded
//! by then it publishes `is_leader: false` at once — `leaseDuration - renewDeadline` before
//! anyone else may take the Lease — and goes on as a candidate: losing the Lease never ends
//! the task. API errors are retried, a leader's every `retryPeriod` until its deadline, a
//! candidate's with a backoff doubling from `retryPeriod` up to `leaseDuration`; the latest
//! one is kept in [`LeaseElector::errors`], worded to say what to check (the API server's
//! URL and the cause, or the RBAC rule), and logged as `pure::api_failure::FailureLog`
//! decides: once while it repeats, a refusal only once it lasts (a restarted API server
//! refuses for a moment), and once the requests succeed again.
//! [`LeaseElector::shutdown`] (on SIGTERM) publishes `is_leader: false`, then releases a
//! held Lease — no holder, epoch annotation kept — so a successor takes it within its next
//! `retryPeriod` instead of waiting for the expiry.
//! Dropping the elector instead aborts the task without a release, as a crash would.
//!
//! Epochs (see `pure::election`): a new term's epoch is one above the Lease's epoch
//! annotation, its `leaseTransitions` and the floor — the highest epoch the targets report
//! (given at start, raised with [`LeaseElector::raise_epoch_floor`]) and every epoch this
//! replica held or saw. With election disabled there is no Lease: [`always_leader`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};

use crate::drivers::kube::KubeApi;
use crate::messages::Leadership;
use crate::pure::api_failure::{ApiFailure, ApiServer, Cause, FailureLog, Request};
use crate::pure::config::LeaderElectionSettings;
use crate::pure::election::{
    Candidate, Decision, LeaseRecord, LeaseTimings, LostReason, Term, TimingsError, Write, decide,
    release,
};

/// The field manager of every Lease write.
const FIELD_MANAGER: &str = "haptor";
/// How often a release is tried again after a conflict before giving up.
const RELEASE_ATTEMPTS: usize = 3;

/// Why the elector could not start, or what its latest request ran into.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("leader election cannot start: {0}")]
    Settings(#[from] TimingsError),
    #[error(
        "the API server refused to {verb} Lease {namespace}/{lease}: {message}; grant get/create/update \
         on leases.coordination.k8s.io in namespace {namespace} to haptor's service account \
         (a Role and a RoleBinding)"
    )]
    Forbidden {
        namespace: String,
        lease: String,
        verb: &'static str,
        message: String,
    },
    #[error("could not {verb} Lease {namespace}/{lease}: {failure}")]
    Api {
        namespace: String,
        lease: String,
        verb: &'static str,
        failure: Box<ApiFailure>,
    },
    #[error(
        "the {verb} of Lease {namespace}/{lease} got no answer within {after:?}; check the \
         connection to {server}"
    )]
    TimedOut {
        namespace: String,
        lease: String,
        verb: &'static str,
        after: Duration,
        server: ApiServer,
    },
    #[error("the leader elector of Lease {namespace}/{lease} stopped abnormally: {reason}")]
    Stopped {
        namespace: String,
        lease: String,
        reason: String,
    },
}

impl LeaseError {
    /// The error's cause as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            LeaseError::Settings(_) => "settings",
            LeaseError::Forbidden { .. } => "forbidden",
            LeaseError::Api { .. } => "api",
            LeaseError::TimedOut { .. } => "timed_out",
            LeaseError::Stopped { .. } => "stopped",
        }
    }

    /// The cause, as `pure::api_failure::FailureLog` weighs it.
    pub fn cause(&self) -> Cause {
        match self {
            LeaseError::Forbidden { message, .. } => Cause::Forbidden {
                message: message.clone(),
            },
            LeaseError::Api { failure, .. } => failure.cause.clone(),
            LeaseError::TimedOut { after, .. } => Cause::TimedOut { after: *after },
            LeaseError::Settings(_) | LeaseError::Stopped { .. } => Cause::Other {
                detail: self.to_string(),
            },
        }
    }
}

/// What an elector needs besides its client and channel.
#[derive(Debug, Clone)]
pub struct ElectorOptions {
    /// The namespace of the Lease (haptor's own).
    pub namespace: String,
    /// `spec.leaderElection` (its lease name and durations; `enabled` is the caller's
    /// business: disabled means [`always_leader`], no elector).
    pub settings: LeaderElectionSettings,
    /// The Lease's `holderIdentity` for this replica ([`identity`]).
    pub identity: String,
    /// The highest epoch any target reports at start.
    pub highest_target_epoch: u64,
}

/// A running leader election. See the module documentation.
pub struct LeaseElector {
    identity: String,
    leadership: watch::Receiver<Leadership>,
    errors: watch::Receiver<Option<Arc<LeaseError>>>,
    floor: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), LeaseError>>>,
    namespace: String,
    lease: String,
}

impl LeaseElector {
    /// Starts electing on `options.settings.lease_name` in `options.namespace`, publishing on
    /// `leadership` (which starts as it is: the caller's initial value, normally not leading).
    /// Fails only on settings that cannot drive an election; must run inside a tokio runtime.
    pub fn start(
        client: impl Into<KubeApi>,
        options: ElectorOptions,
        leadership: watch::Sender<Leadership>,
    ) -> Result<LeaseElector, LeaseError> {
        let timings = LeaseTimings::from_settings(&options.settings)?;
        let KubeApi { client, server } = client.into();
        let namespace = options.namespace;
        let lease = options.settings.lease_name;
        let floor = Arc::new(AtomicU64::new(options.highest_target_epoch));
        let (errors_tx, errors) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let receiver = leadership.subscribe();
        let runner = Runner {
            api: Api::namespaced(client, &namespace),
            server,
            told: FailureLog::new(),
            namespace: namespace.clone(),
            lease: lease.clone(),
            identity: options.identity.clone(),
            timings,
            leadership,
            errors: errors_tx,
            floor: Arc::clone(&floor),
            known: 0,
            term: None,
            stored: None,
            writing: false,
            failures: 0,
            conflicts: 0,
            waiting_for: None,
        };
        tracing::info!(
            namespace = %namespace, lease = %lease, identity = %options.identity,
            ?timings, "leader election starting"
        );
        let task = tokio::spawn(runner.run(stopped));
        Ok(LeaseElector {
            identity: options.identity,
            leadership: receiver,
            errors,
            floor,
            stop: Some(stop),
            task: Some(task),
            namespace,
            lease,
        })
    }

    /// This replica's holder identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The leadership it publishes.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// The latest error of a Lease request (`None` again after a request succeeds).
    pub fn errors(&self) -> watch::Receiver<Option<Arc<LeaseError>>> {
        self.errors.clone()
    }

    /// A target reported `epoch`: the next term's epoch will be above it.
    pub fn raise_epoch_floor(&self, epoch: u64) {
        self.floor.fetch_max(epoch, Ordering::Relaxed);
    }

    /// Resolves when the election's task has ended by itself, which it does only by a
    /// panic (losing the Lease or an API error never ends it): the message says how.
    pub async fn ended(&mut self) -> String {
        let Some(task) = self.task.as_mut() else {
            return std::future::pending().await;
        };
        let outcome = task.await;
        self.task = None;
        match outcome {
            Ok(Ok(())) => "the election ended".into(),
            Ok(Err(e)) => format!("the election ended: {e}"),
            Err(e) if e.is_panic() => {
                std::panic::resume_unwind(e.into_panic());
            }
            Err(e) => format!("the election ended: {e}"),
        }
    }

    /// Stops: publishes `is_leader: false`, releases the Lease if this replica holds it (so
    /// a successor takes over at once), and returns once the task has ended. An error says
    /// the release failed; the Lease then expires on its own after `leaseDuration`.
    pub async fn shutdown(mut self) -> Result<(), LeaseError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        task.await.unwrap_or_else(|e| {
            Err(LeaseError::Stopped {
                namespace: self.namespace.clone(),
                lease: self.lease.clone(),
                reason: e.to_string(),
            })
        })
    }
}

impl Drop for LeaseElector {
    /// Dropped without [`LeaseElector::shutdown`]: the task ends without releasing.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The leadership of a replica that does not elect (`leaderElection.enabled: false`, a
/// single replica): leading, one epoch above the highest any target reports.
pub fn always_leader(highest_target_epoch: u64) -> Leadership {
    Leadership {
        is_leader: true,
        epoch: highest_target_epoch.saturating_add(1),
    }
}

/// This replica's holder identity: `POD_NAME` (the downward API), else the host name.
pub fn identity() -> String {
    identity_from(
        std::env::var("POD_NAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok()),
    )
}

/// The first non-empty of `pod_name` and `hostname`; `haptor-PID` when neither is.
fn identity_from(pod_name: Option<String>, hostname: Option<String>) -> String {
    [pod_name, hostname]
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| format!("haptor-{}", std::process::id()))
}

/// How one request ended, as the loop cares.
enum Outcome<T> {
    Done(T),
    /// 409 on a replace, AlreadyExists on a create, 404 on a replace: someone else wrote
    /// meanwhile; read the Lease again.
    Raced,
    Failed(LeaseError),
}

/// The task's state.
struct Runner {
    api: Api<Lease>,
    /// The API server, as failures name it.
    server: ApiServer,
    /// How failures are told (`pure::api_failure::FailureLog`).
    told: FailureLog,
    namespace: String,
    lease: String,
    identity: String,
    timings: LeaseTimings,
    leadership: watch::Sender<Leadership>,
    errors: watch::Sender<Option<Arc<LeaseError>>>,
    floor: Arc<AtomicU64>,
    /// The highest epoch held or seen on the Lease.
    known: u64,
    /// The term this replica leads.
    term: Option<Term>,
    /// The Lease as this replica's last write left it (a leader renews from it).
    stored: Option<Lease>,
    /// A write was sent and not answered (a cancelled one may have landed).
    writing: bool,
    /// Consecutive failed requests (the candidate's backoff).
    failures: u32,
    /// Consecutive lost races (after a few, pause a retry period).
    conflicts: u32,
    /// The holder last waited for (logged when it changes).
    waiting_for: Option<String>,
}

impl Runner {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) -> Result<(), LeaseError> {
        loop {
            let pause = tokio::select! {
                biased;
                signal = &mut stop => return self.stopped(signal.is_ok()).await,
                pause = self.step() => pause,
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                biased;
                signal = &mut stop => return self.stopped(signal.is_ok()).await,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One round: observe, decide, act. Returns how long to pause before the next.
    async fn step(&mut self) -> Duration {
        if let Some(term) = self.term
            && Timestamp::now() >= term.renew_deadline(&self.timings)
        {
            self.lose(LostReason::RenewDeadlinePassed {
                deadline: term.renew_deadline(&self.timings),
            });
            return Duration::ZERO;
        }
        // A leader renews from what its last write returned; anyone else reads.
        let observed = match (self.term, self.stored.take()) {
            (Some(_), Some(stored)) => Some(stored),
            _ => match self.request("get", self.api.get_opt(&self.lease)).await {
                Outcome::Done(lease) => lease,
                Outcome::Raced => None,
                Outcome::Failed(e) => return self.failed(e),
            },
        };
        let record = observed.as_ref().map(LeaseRecord::from_lease);
        if let Some(epoch) = record.as_ref().and_then(|r| r.epoch) {
            self.known = self.known.max(epoch);
        }
        let now = Timestamp::now();
        let candidate = Candidate {
            identity: &self.identity,
            term: self.term,
            epoch_floor: self.known.max(self.floor.load(Ordering::Relaxed)),
        };
        match decide(record.as_ref(), now, &candidate, &self.timings) {
            Decision::Acquire(write) | Decision::Renew(write) => {
                self.write(observed, write, now).await
            }
            Decision::Wait {
                holder,
                expires_at,
                look_again,
            } => {
                self.succeeded();
                if self.waiting_for.as_deref() != Some(holder.as_str()) {
                    tracing::info!(
                        namespace = %self.namespace, lease = %self.lease, %holder, %expires_at,
                        "the leader Lease is held by another replica; waiting"
                    );
                    self.waiting_for = Some(holder);
                }
                unsigned(now.duration_until(look_again)).max(Duration::from_millis(10))
            }
            Decision::Lost(reason) => {
                self.lose(reason);
                Duration::ZERO
            }
        }
    }

    /// Creates or replaces the Lease as `write` says.
    async fn write(&mut self, observed: Option<Lease>, write: Write, now: Timestamp) -> Duration {
        let mut lease = match (write.create, observed) {
            (false, Some(observed)) => observed,
            _ => Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease.clone()),
                    ..ObjectMeta::default()
                },
                spec: None,
            },
        };
        write.record.write_into(&mut lease);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.writing = true;
        let outcome = if write.create {
            let api = self.api.clone();
            self.request("create", async move { api.create(&params, &lease).await })
                .await
        } else {
            let api = self.api.clone();
            let name = self.lease.clone();
            self.request("update", async move {
                api.replace(&name, &params, &lease).await
            })
            .await
        };
        self.writing = false;
        match outcome {
            Outcome::Done(stored) => {
                self.succeeded();
                self.conflicts = 0;
                self.waiting_for = None;
                self.stored = Some(stored);
                self.known = self.known.max(write.epoch);
                let gained = self.term.is_none();
                self.term = Some(Term {
                    epoch: write.epoch,
                    renewed_at: now,
                });
                if gained {
                    tracing::info!(
                        namespace = %self.namespace, lease = %self.lease,
                        identity = %self.identity, epoch = write.epoch,
                        transitions = write.record.transitions,
                        "leader Lease acquired; leading"
                    );
                    self.publish(Leadership {
                        is_leader: true,
                        epoch: write.epoch,
                    });
                }
                self.until_deadline(self.timings.retry_period)
            }
            Outcome::Raced => {
                self.conflicts += 1;
                tracing::debug!(
                    namespace = %self.namespace, lease = %self.lease,
                    "the Lease changed under a write; reading it again"
                );
                if self.conflicts > 3 {
                    self.until_deadline(self.timings.retry_period)
                } else {
                    Duration::ZERO
                }
            }
            Outcome::Failed(e) => self.failed(e),
        }
    }

    /// Sends one request, bounded by the renew deadline while leading.
    async fn request<T>(
        &self,
        verb: &'static str,
        future: impl Future<Output = kube::Result<T>>,
    ) -> Outcome<T> {
        let limit = match self.term {
            Some(term) => {
                unsigned(Timestamp::now().duration_until(term.renew_deadline(&self.timings)))
            }
            None => self.timings.renew_deadline,
        };
        match tokio::time::timeout(limit, future).await {
            Ok(Ok(value)) => Outcome::Done(value),
            Ok(Err(kube::Error::Api(status)))
                if status.is_conflict()
                    || status.is_already_exists()
                    || (verb == "update" && status.is_not_found()) =>
            {
                Outcome::Raced
            }
            Ok(Err(kube::Error::Api(status))) if status.is_forbidden() => {
                Outcome::Failed(LeaseError::Forbidden {
                    namespace: self.namespace.clone(),
                    lease: self.lease.clone(),
                    verb,
                    message: status.message,
                })
            }
            Ok(Err(source)) => {
                let request =
                    Request::new(verb, "leases", "coordination.k8s.io", Some(&self.namespace))
                        .named(&self.lease);
                Outcome::Failed(LeaseError::Api {
                    namespace: self.namespace.clone(),
                    lease: self.lease.clone(),
                    verb,
                    failure: Box::new(ApiFailure::of(&self.server, &request, &source)),
                })
            }
            Err(_) => Outcome::Failed(LeaseError::TimedOut {
                namespace: self.namespace.clone(),
                lease: self.lease.clone(),
                verb,
                after: limit,
                server: self.server.clone(),
            }),
        }
    }

    /// Records a failed request; returns the pause before the next try.
    fn failed(&mut self, error: LeaseError) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let cause = error.cause();
        let telling = self.told.failed(&cause, std::time::Instant::now());
        if telling.advice {
            log_at!(telling.level, error = %error, kind = error.metric_label(), "leader Lease request failed");
        } else {
            log_at!(telling.level, %cause, failures = self.failures, "leader Lease request failed ({cause}); retrying");
        }
        self.errors.send_replace(Some(Arc::new(error)));
        if self.term.is_some() {
            return self.until_deadline(self.timings.retry_period);
        }
        let doubled = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
        self.timings
            .retry_period
            .saturating_mul(doubled)
            .min(self.timings.lease_duration)
    }

    fn succeeded(&mut self) {
        self.failures = 0;
        if let Some(resumed) = self.told.succeeded(std::time::Instant::now()) {
            log_at!(
                resumed.level,
                namespace = %self.namespace, lease = %self.lease,
                "leader Lease requests succeed again after {} failed tries over {:.1} s",
                resumed.failures,
                resumed.over.as_secs_f64()
            );
        }
        if self.errors.borrow().is_some() {
            self.errors.send_replace(None);
        }
    }

    /// `pause`, but never past a leader's renew deadline.
    fn until_deadline(&self, pause: Duration) -> Duration {
        match self.term {
            Some(term) => pause.min(unsigned(
                Timestamp::now().duration_until(term.renew_deadline(&self.timings)),
            )),
            None => pause,
        }
    }

    fn lose(&mut self, reason: LostReason) {
        self.stored = None;
        if let Some(term) = self.term.take() {
            tracing::warn!(
                namespace = %self.namespace, lease = %self.lease, epoch = term.epoch,
                %reason, "leadership lost; trying to acquire the Lease again"
            );
            self.publish(Leadership {
                is_leader: false,
                epoch: term.epoch,
            });
        }
    }

    fn publish(&self, leadership: Leadership) {
        self.leadership.send_if_modified(|current| {
            let changed = *current != leadership;
            *current = leadership;
            changed
        });
    }

    /// The task is asked to stop: on `shutdown` (`releasing`) stop leading and release the
    /// Lease; when the elector was dropped, just end.
    async fn stopped(mut self, releasing: bool) -> Result<(), LeaseError> {
        if !releasing {
            return Ok(());
        }
        let held = self.term.is_some() || self.writing;
        if let Some(term) = self.term.take() {
            self.publish(Leadership {
                is_leader: false,
                epoch: term.epoch,
            });
        }
        if !held {
            tracing::info!(namespace = %self.namespace, lease = %self.lease, "leader election stopped");
            return Ok(());
        }
        for _ in 0..RELEASE_ATTEMPTS {
            let lease = match self.request("get", self.api.get_opt(&self.lease)).await {
                Outcome::Done(Some(lease)) => lease,
                Outcome::Done(None) | Outcome::Raced => return Ok(()),
                Outcome::Failed(e) => return Err(e),
            };
            let Some(record) = release(
                &LeaseRecord::from_lease(&lease),
                &self.identity,
                Timestamp::now(),
            ) else {
                return Ok(());
            };
            let mut released = lease;
            record.write_into(&mut released);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            let api = self.api.clone();
            let name = self.lease.clone();
            match self
                .request("update", async move {
                    api.replace(&name, &params, &released).await
                })
                .await
            {
                Outcome::Done(_) => {
                    tracing::info!(
                        namespace = %self.namespace, lease = %self.lease,
                        "leader Lease released; leader election stopped"
                    );
                    return Ok(());
                }
                Outcome::Raced => continue,
                Outcome::Failed(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A signed duration as a std one, negative as zero.
fn unsigned(duration: jiff::SignedDuration) -> Duration {
    Duration::try_from(duration).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_the_pod_name_else_the_host_name() {
        assert_eq!(
            identity_from(Some("haptor-0".into()), Some("node\n".into())),
            "haptor-0"
        );
        assert_eq!(
            identity_from(Some(" ".into()), Some("node\n".into())),
            "node"
        );
        assert!(identity_from(None, None).starts_with("haptor-"));
    }

    #[test]
    fn a_replica_that_does_not_elect_leads_above_the_targets_highest_epoch() {
        assert_eq!(
            always_leader(7),
            Leadership {
                is_leader: true,
                epoch: 8
            }
        );
    }
}
