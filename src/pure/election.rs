//! Leader election on a coordination.k8s.io/v1 Lease, as pure decisions: what a candidate
//! does with the Lease it last observed, the clock, and what it knows of past terms. The
//! driver (`drivers::kube::lease`) reads and writes the Lease and sleeps; everything it
//! decides comes from [`decide`] and [`release`], so every rule is tested here without an
//! API server.
//!
//! The rules. A Lease with no holder (released) or whose `renewTime + leaseDuration` has
//! passed is free; a candidate takes a free Lease, or one it holds itself, and then leads
//! until its *renew deadline*: `renewDeadline` after the start of its last successful write.
//! A leader renews every `retryPeriod`; when it cannot renew before the deadline it has
//! [`Decision::Lost`] its leadership, on its own clock, `leaseDuration - renewDeadline`
//! before anyone else may take the Lease. `leaseTransitions` counts changes of holder (a
//! release and a re-acquisition by the same candidate count as one, as in client-go).
//!
//! The fencing epoch. Every term — every time a candidate starts leading — gets a new epoch,
//! `max(epoch annotation, leaseTransitions, epoch floor) + 1`, written to the Lease's
//! [`EPOCH_ANNOTATION`]; the floor is the highest epoch any target reports and any this
//! replica held or saw. So a deposed leader's late write carries a lower epoch than the
//! successor's, and the epoch never goes backwards: a Lease deleted and recreated restarts
//! `leaseTransitions` at 0, but the annotation (kept by a leader that recreates it) and the
//! targets' epochs still lie below the next term. A leader whose Lease vanished recreates it
//! with its own epoch (its term goes on: had anyone else created it first, the create would
//! have failed). A candidate that takes back its own Lease after losing leadership (the
//! holder is still itself, so no transition) starts a new term too: epoch + 1, which fences
//! whatever its previous term still had in flight.
//!
//! Clocks: expiry compares the holder's `renewTime` with this replica's clock, so replicas
//! are assumed to agree within `leaseDuration - renewDeadline`; a larger skew can make two
//! replicas lead at once, and then the epoch is what keeps the targets consistent.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

/// The election's typed settings and their one rule live with the config's other timings.
pub use crate::pure::config::{LeaseTimings, TimingsError};

/// The Lease annotation holding the epoch of the current (or last) term.
pub const EPOCH_ANNOTATION: &str = "haptor.dev/epoch";

/// What a candidate reads from (and writes to) a Lease.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `holderIdentity`; `None` (or empty on the wire) when released.
    pub holder: Option<String>,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    /// `leaseDurationSeconds`.
    pub lease_duration: Option<Duration>,
    /// `leaseTransitions` (a negative value on the wire reads as 0).
    pub transitions: u64,
    /// The [`EPOCH_ANNOTATION`] (absent or not a number: `None`).
    pub epoch: Option<u64>,
}

impl LeaseRecord {
    /// The record of a Lease as the API server returned it.
    pub fn from_lease(lease: &Lease) -> LeaseRecord {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseRecord {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            lease_duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            transitions: spec
                .lease_transitions
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0),
            epoch: lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(EPOCH_ANNOTATION))
                .and_then(|e| e.trim().parse().ok()),
        }
    }

    /// Writes this record into `lease` (spec fields and the epoch annotation), leaving
    /// everything else — name, resourceVersion, other annotations, other spec fields — as it
    /// was, so a replace sends back the stored object with only these fields changed.
    pub fn write_into(&self, lease: &mut Lease) {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = self.holder.clone();
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_duration_seconds = self
            .lease_duration
            .map(|d| i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX));
        spec.lease_transitions = Some(i32::try_from(self.transitions).unwrap_or(i32::MAX));
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        match self.epoch {
            Some(epoch) => {
                annotations.insert(EPOCH_ANNOTATION.to_string(), epoch.to_string());
            }
            None => {
                annotations.remove(EPOCH_ANNOTATION);
            }
        }
    }

    /// The holder, if the Lease is held by anyone (an empty identity is no holder).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }

    /// When the holder's claim ends: `renewTime + leaseDuration` (falling back on
    /// `acquireTime`, then on `timings`' duration). `None`: no time at all, so it has ended.
    pub fn expires_at(&self, timings: &LeaseTimings) -> Option<Timestamp> {
        let since = self.renew_time.or(self.acquire_time)?;
        let duration = self.lease_duration.unwrap_or(timings.lease_duration);
        Some(add(since, duration))
    }

    /// Whether nobody may be considered to hold the Lease at `now`.
    pub fn is_free(&self, now: Timestamp, timings: &LeaseTimings) -> bool {
        self.holder().is_none() || self.expires_at(timings).is_none_or(|end| now >= end)
    }
}

/// A term this replica leads: its epoch and when its last successful write began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    pub epoch: u64,
    /// When the last write that succeeded (acquisition or renewal) was sent: the renew
    /// deadline runs from there, so it is never later than the apiserver's `renewTime`.
    pub renewed_at: Timestamp,
}

impl Term {
    /// The instant after which this term is over unless a renewal succeeded.
    pub fn renew_deadline(&self, timings: &LeaseTimings) -> Timestamp {
        add(self.renewed_at, timings.renew_deadline)
    }
}

/// Who decides, and what it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// This replica's `holderIdentity`.
    pub identity: &'a str,
    /// The term it leads, if it leads.
    pub term: Option<Term>,
    /// The highest epoch it must stay above: the targets' highest and every epoch this
    /// replica held or saw on the Lease.
    pub epoch_floor: u64,
}

/// A Lease to write: create it (there is none) or replace the observed one at its
/// resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub record: LeaseRecord,
    pub create: bool,
    /// The term's epoch (also in `record.epoch`).
    pub epoch: u64,
}

/// Why a leader stopped leading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    #[error("the Lease is now held by {holder}")]
    HeldByAnother { holder: String },
    #[error("the Lease was released by someone else")]
    Released,
    #[error("the Lease carries epoch {epoch}, above this term's {ours}: another term began")]
    Superseded { epoch: u64, ours: u64 },
    #[error("no renewal succeeded before the renew deadline ({deadline})")]
    RenewDeadlinePassed { deadline: Timestamp },
}

/// What a candidate does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start a term: write the Lease as held by us with a new epoch.
    Acquire(Write),
    /// Go on leading: write the Lease with `renewTime` moved to now.
    Renew(Write),
    /// Someone else holds it: look again at `look_again` (the next retry, or the expiry
    /// if that comes first).
    Wait {
        holder: String,
        expires_at: Timestamp,
        look_again: Timestamp,
    },
    /// The term is over (publish it at once); decide again as a non-leader.
    Lost(LostReason),
}

/// The epoch of a new term: above the Lease's annotation, its transitions and `floor`.
pub fn next_epoch(observed: Option<&LeaseRecord>, floor: u64) -> u64 {
    let on_lease = observed.map_or(0, |r| r.epoch.unwrap_or(0).max(r.transitions));
    on_lease.max(floor).saturating_add(1)
}

/// The one decision: what `candidate` does at `now`, having observed `observed` (`None`: no
/// Lease exists).
pub fn decide(
    observed: Option<&LeaseRecord>,
    now: Timestamp,
    candidate: &Candidate<'_>,
    timings: &LeaseTimings,
) -> Decision {
    let us = candidate.identity;
    if let Some(term) = candidate.term {
        let deadline = term.renew_deadline(timings);
        if now >= deadline {
            return Decision::Lost(LostReason::RenewDeadlinePassed { deadline });
        }
        let Some(record) = observed else {
            // Deleted under us: recreate it, the term goes on (a create fails if anyone
            // else recreated it first).
            return Decision::Renew(Write {
                record: held_by(us, now, now, 0, term.epoch, timings),
                create: true,
                epoch: term.epoch,
            });
        };
        return match record.holder() {
            None => Decision::Lost(LostReason::Released),
            Some(holder) if holder != us => Decision::Lost(LostReason::HeldByAnother {
                holder: holder.to_string(),
            }),
            Some(_) => match record.epoch {
                Some(epoch) if epoch > term.epoch => Decision::Lost(LostReason::Superseded {
                    epoch,
                    ours: term.epoch,
                }),
                _ => Decision::Renew(Write {
                    record: held_by(
                        us,
                        record.acquire_time.unwrap_or(now),
                        now,
                        record.transitions,
                        term.epoch,
                        timings,
                    ),
                    create: false,
                    epoch: term.epoch,
                }),
            },
        };
    }

    let epoch = next_epoch(observed, candidate.epoch_floor);
    let Some(record) = observed else {
        // The first holder: no transition counted.
        return Decision::Acquire(Write {
            record: held_by(us, now, now, 0, epoch, timings),
            create: true,
            epoch,
        });
    };
    match record.holder() {
        Some(holder) if holder != us && !record.is_free(now, timings) => {
            let expires_at = record
                .expires_at(timings)
                .expect("a Lease that is not free has an expiry (is_free checked it)");
            Decision::Wait {
                holder: holder.to_string(),
                expires_at,
                look_again: add(now, timings.retry_period).min(expires_at),
            }
        }
        holder => {
            // Ours (a new term, the same holder), released or expired.
            let transitions = if holder == Some(us) {
                record.transitions
            } else {
                record.transitions.saturating_add(1)
            };
            Decision::Acquire(Write {
                record: held_by(us, now, now, transitions, epoch, timings),
                create: false,
                epoch,
            })
        }
    }
}

/// The record that releases a Lease `identity` holds, so a successor takes it at once:
/// no holder, the epoch annotation and the transitions kept. `None`: not ours to release.
pub fn release(observed: &LeaseRecord, identity: &str, now: Timestamp) -> Option<LeaseRecord> {
    if observed.holder() != Some(identity) {
        return None;
    }
    Some(LeaseRecord {
        holder: None,
        renew_time: Some(now),
        lease_duration: Some(Duration::from_secs(1)),
        ..observed.clone()
    })
}

fn held_by(
    us: &str,
    acquired: Timestamp,
    now: Timestamp,
    transitions: u64,
    epoch: u64,
    timings: &LeaseTimings,
) -> LeaseRecord {
    LeaseRecord {
        holder: Some(us.to_string()),
        acquire_time: Some(acquired),
        renew_time: Some(now),
        lease_duration: Some(Duration::from_secs(u64::from(
            timings.lease_seconds().unsigned_abs(),
        ))),
        transitions,
        epoch: Some(epoch),
    }
}

/// `at + duration`, saturating at the end of jiff's range.
fn add(at: Timestamp, duration: Duration) -> Timestamp {
    at.saturating_add(duration).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::config::LeaderElectionSettings;

    const US: &str = "haptor-a";
    const OTHER: &str = "haptor-b";

    fn timings() -> LeaseTimings {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn held(holder: &str, renewed: i64, transitions: u64, epoch: Option<u64>) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            acquire_time: Some(at(0)),
            renew_time: Some(at(renewed)),
            lease_duration: Some(Duration::from_secs(15)),
            transitions,
            epoch,
        }
    }

    fn candidate(term: Option<Term>, floor: u64) -> Candidate<'static> {
        Candidate {
            identity: US,
            term,
            epoch_floor: floor,
        }
    }

    fn acquired(decision: Decision) -> Write {
        match decision {
            Decision::Acquire(write) => write,
            other => panic!("expected Acquire, got {other:?}"),
        }
    }

    #[test]
    fn the_first_candidate_creates_the_lease_with_no_transition_and_epoch_one() {
        let write = acquired(decide(None, at(0), &candidate(None, 0), &timings()));
        assert!(write.create);
        assert_eq!(write.epoch, 1);
        assert_eq!(write.record, held(US, 0, 0, Some(1)));
    }

    #[test]
    fn a_lease_held_by_another_and_not_expired_is_waited_for_until_the_next_retry() {
        let lease = held(OTHER, 10, 3, Some(4));
        let decision = decide(Some(&lease), at(12), &candidate(None, 0), &timings());
        assert_eq!(
            decision,
            Decision::Wait {
                holder: OTHER.into(),
                expires_at: at(25),
                look_again: at(14),
            }
        );
        // Close to the expiry, the next look is at the expiry.
        let Decision::Wait { look_again, .. } =
            decide(Some(&lease), at(24), &candidate(None, 0), &timings())
        else {
            panic!("still held at 24 s");
        };
        assert_eq!(look_again, at(25));
    }

    #[test]
    fn an_expired_lease_held_by_another_is_taken_over_with_one_more_transition() {
        let lease = held(OTHER, 10, 3, Some(4));
        let write = acquired(decide(
            Some(&lease),
            at(25),
            &candidate(None, 0),
            &timings(),
        ));
        assert!(!write.create);
        assert_eq!(write.record.transitions, 4);
        assert_eq!(write.epoch, 5);
        assert_eq!(write.record.holder.as_deref(), Some(US));
        assert_eq!(write.record.acquire_time, Some(at(25)));
    }

    #[test]
    fn a_released_lease_is_taken_at_once_whatever_its_times_say() {
        let mut lease = held(OTHER, 10, 3, Some(4));
        lease = release(&lease, OTHER, at(11)).unwrap();
        assert_eq!(lease.holder, None);
        assert_eq!(lease.epoch, Some(4), "the epoch annotation is kept");
        let write = acquired(decide(
            Some(&lease),
            at(11),
            &candidate(None, 0),
            &timings(),
        ));
        assert_eq!((write.record.transitions, write.epoch), (4, 5));
    }

    #[test]
    fn only_the_holder_releases() {
        assert_eq!(release(&held(OTHER, 10, 3, Some(4)), US, at(11)), None);
    }

    #[test]
    fn a_deleted_and_recreated_lease_still_gives_a_higher_epoch() {
        // Epoch 7 was led before the Lease was deleted; the recreated one counts from 0.
        let recreated = held(OTHER, 0, 0, None);
        let write = acquired(decide(
            Some(&recreated),
            at(30),
            &candidate(None, 7),
            &timings(),
        ));
        assert_eq!(write.epoch, 8);
        // No Lease at all: the same.
        assert_eq!(
            acquired(decide(None, at(30), &candidate(None, 7), &timings())).epoch,
            8
        );
    }

    #[test]
    fn the_epoch_is_above_the_annotation_the_transitions_and_the_floor_whichever_is_highest() {
        assert_eq!(next_epoch(Some(&held(OTHER, 0, 9, Some(4))), 2), 10);
        assert_eq!(next_epoch(Some(&held(OTHER, 0, 3, Some(12))), 2), 13);
        assert_eq!(next_epoch(Some(&held(OTHER, 0, 3, Some(4))), 20), 21);
        assert_eq!(next_epoch(None, u64::MAX), u64::MAX, "saturates");
    }

    #[test]
    fn a_leader_renews_keeping_its_epoch_acquire_time_and_transitions() {
        let term = Term {
            epoch: 5,
            renewed_at: at(10),
        };
        let lease = held(US, 10, 4, Some(5));
        let decision = decide(Some(&lease), at(12), &candidate(Some(term), 5), &timings());
        let Decision::Renew(write) = decision else {
            panic!("expected Renew, got {decision:?}");
        };
        assert!(!write.create);
        assert_eq!(write.record, held(US, 12, 4, Some(5)));
    }

    #[test]
    fn a_leader_loses_once_another_holds_the_lease() {
        let term = Term {
            epoch: 5,
            renewed_at: at(10),
        };
        let lease = held(OTHER, 11, 5, Some(6));
        assert_eq!(
            decide(Some(&lease), at(12), &candidate(Some(term), 5), &timings()),
            Decision::Lost(LostReason::HeldByAnother {
                holder: OTHER.into()
            })
        );
        let mut released = held(US, 11, 5, Some(5));
        released.holder = None;
        assert_eq!(
            decide(
                Some(&released),
                at(12),
                &candidate(Some(term), 5),
                &timings()
            ),
            Decision::Lost(LostReason::Released)
        );
    }

    #[test]
    fn a_leader_whose_renew_deadline_passed_has_lost_even_if_the_lease_still_names_it() {
        let term = Term {
            epoch: 5,
            renewed_at: at(10),
        };
        let lease = held(US, 10, 4, Some(5));
        assert_eq!(
            decide(Some(&lease), at(20), &candidate(Some(term), 5), &timings()),
            Decision::Lost(LostReason::RenewDeadlinePassed { deadline: at(20) })
        );
        // Before the deadline, still a renewal.
        assert!(matches!(
            decide(Some(&lease), at(19), &candidate(Some(term), 5), &timings()),
            Decision::Renew(_)
        ));
    }

    #[test]
    fn a_lease_naming_us_with_a_higher_epoch_means_another_term_began() {
        let term = Term {
            epoch: 5,
            renewed_at: at(10),
        };
        assert_eq!(
            decide(
                Some(&held(US, 11, 4, Some(6))),
                at(12),
                &candidate(Some(term), 5),
                &timings()
            ),
            Decision::Lost(LostReason::Superseded { epoch: 6, ours: 5 })
        );
    }

    #[test]
    fn taking_back_our_own_lease_after_losing_is_a_new_term_without_a_transition() {
        // We lost (renew deadline) but nobody took it: the Lease still names us.
        let lease = held(US, 10, 4, Some(5));
        let write = acquired(decide(
            Some(&lease),
            at(21),
            &candidate(None, 5),
            &timings(),
        ));
        assert_eq!(write.record.transitions, 4, "the holder did not change");
        assert_eq!(write.epoch, 6, "a new term fences the previous one");
        // Also before it expired for others.
        assert_eq!(
            acquired(decide(
                Some(&lease),
                at(12),
                &candidate(None, 5),
                &timings()
            ))
            .epoch,
            6
        );
    }

    #[test]
    fn a_leader_whose_lease_was_deleted_recreates_it_with_its_own_epoch() {
        let term = Term {
            epoch: 9,
            renewed_at: at(10),
        };
        let decision = decide(None, at(12), &candidate(Some(term), 9), &timings());
        let Decision::Renew(write) = decision else {
            panic!("expected Renew, got {decision:?}");
        };
        assert!(write.create);
        assert_eq!(write.epoch, 9);
        assert_eq!(write.record.epoch, Some(9));
        assert_eq!(write.record.transitions, 0);
    }

    #[test]
    fn a_lease_without_times_is_free() {
        let lease = LeaseRecord {
            holder: Some(OTHER.into()),
            ..LeaseRecord::default()
        };
        assert!(lease.is_free(at(0), &timings()));
        assert_eq!(
            acquired(decide(Some(&lease), at(0), &candidate(None, 0), &timings()))
                .record
                .transitions,
            1
        );
    }

    #[test]
    fn a_record_round_trips_through_a_lease_keeping_other_fields_and_annotations() {
        let mut lease = Lease::default();
        lease.metadata.resource_version = Some("42".into());
        lease.metadata.annotations = Some([("team".to_string(), "edge".to_string())].into());
        lease.spec = Some(LeaseSpec {
            strategy: Some("OldestEmulationVersion".into()),
            ..LeaseSpec::default()
        });
        let record = held(US, 10, 4, Some(5));
        record.write_into(&mut lease);
        assert_eq!(LeaseRecord::from_lease(&lease), record);
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("42"));
        let annotations = lease.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["team"], "edge");
        assert_eq!(annotations[EPOCH_ANNOTATION], "5");
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
    }

    #[test]
    fn an_empty_holder_or_a_garbled_annotation_reads_as_none() {
        let mut lease = Lease::default();
        lease.metadata.annotations = Some([(EPOCH_ANNOTATION.to_string(), "x".to_string())].into());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_transitions: Some(-3),
            ..LeaseSpec::default()
        });
        let record = LeaseRecord::from_lease(&lease);
        assert_eq!(
            (record.holder, record.epoch, record.transitions),
            (None, None, 0)
        );
    }

    #[test]
    fn timings_come_from_the_settings_and_must_nest() {
        let mut settings = LeaderElectionSettings::default();
        assert_eq!(LeaseTimings::from_settings(&settings).unwrap(), timings());
        settings.renew_deadline = "20s".into();
        assert!(matches!(
            LeaseTimings::from_settings(&settings),
            Err(TimingsError::NotNested { .. })
        ));
        settings.renew_deadline = "soon".into();
        let error = LeaseTimings::from_settings(&settings).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("spec.leaderElection.renewDeadline: 'soon'"),
            "{error}"
        );
    }

    #[test]
    fn lease_seconds_round_up_to_a_whole_second_of_at_least_one() {
        let mut t = timings();
        t.lease_duration = Duration::from_millis(1500);
        assert_eq!(t.lease_seconds(), 2);
        t.lease_duration = Duration::from_millis(200);
        assert_eq!(t.lease_seconds(), 1);
    }
}
