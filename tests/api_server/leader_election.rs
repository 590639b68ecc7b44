//! Leader election on a real kube-apiserver and etcd (the kit of `tests/support/kube.rs`,
//! one server shared by the tests, each in a namespace of its own): `LeaseElector`s of
//! different identities compete for one coordination.k8s.io/v1 Lease with short timings
//! (lease 2 s, renew deadline 1 s, retry 200 ms). What is proven: one candidate leads and
//! the other waits; a released Lease is taken over within a retry period, a dead leader's
//! only after the lease expired, each time with one more transition and a higher epoch;
//! the epoch never goes backwards, not when the Lease is deleted and recreated, and stays
//! above the highest a target reports; a leader cut off from the API server says it lost
//! leadership before anyone else may take the Lease, and on reconnecting takes back its
//! own Lease with a new epoch, or waits when another took it; an identity without RBAC on
//! leases gets an error naming the Role it needs, and leads once it has one.
//!
//! Timing assertions are generous bounds with deadlines on the published leadership (a
//! watch channel), never sleeps standing for an outcome.

use crate::kube_kit;

use std::time::{Duration, Instant};

use haptor::drivers::kube::lease::{ElectorOptions, LeaseElector, LeaseError};
use haptor::messages::Leadership;
use haptor::pure::config::LeaderElectionSettings;
use haptor::pure::election::{EPOCH_ANNOTATION, LeaseRecord, LeaseTimings};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube_kit::{CuttableProxy, Kit, RESTRICTED_USER};
use serde_json::json;
use tokio::sync::watch;

/// How long a test waits for something that must happen.
const WAIT: Duration = Duration::from_secs(30);
const LEASE: &str = "haptor-leader";
/// The test timings' lease duration.
const LEASE_DURATION: Duration = Duration::from_secs(2);

fn settings() -> LeaderElectionSettings {
    settings_lasting("2s", "1s")
}

/// The test settings with another lease duration and renew deadline, for a test whose
/// point is a margin between them that a loaded machine must not eat.
fn settings_lasting(lease_duration: &str, renew_deadline: &str) -> LeaderElectionSettings {
    LeaderElectionSettings {
        enabled: true,
        lease_name: LEASE.into(),
        lease_duration: lease_duration.into(),
        renew_deadline: renew_deadline.into(),
        retry_period: "200ms".into(),
    }
}

struct Elected {
    elector: LeaseElector,
    leadership: watch::Receiver<Leadership>,
}

fn elect(client: Client, ns: &str, identity: &str, highest_target_epoch: u64) -> Elected {
    elect_with(client, ns, identity, highest_target_epoch, settings())
}

fn elect_with(
    client: Client,
    ns: &str,
    identity: &str,
    highest_target_epoch: u64,
    settings: LeaderElectionSettings,
) -> Elected {
    let (tx, leadership) = watch::channel(Leadership::default());
    let elector = LeaseElector::start(
        client,
        ElectorOptions {
            namespace: ns.into(),
            settings,
            identity: identity.into(),
            highest_target_epoch,
        },
        tx,
    )
    .expect("the test settings are valid");
    Elected {
        elector,
        leadership,
    }
}

/// Waits until `rx` publishes a leadership `wanted` accepts; panics naming `what` after
/// `within`.
async fn until(
    rx: &mut watch::Receiver<Leadership>,
    what: &str,
    within: Duration,
    wanted: impl FnMut(&Leadership) -> bool,
) -> Leadership {
    let result = tokio::time::timeout(within, rx.wait_for(wanted))
        .await
        .map(|r| r.map(|l| *l));
    match result {
        Ok(Ok(leadership)) => leadership,
        Ok(Err(_)) => panic!("{what}: the elector stopped publishing"),
        Err(_) => panic!("{what}: not within {within:?} (last: {:?})", *rx.borrow()),
    }
}

async fn leads(rx: &mut watch::Receiver<Leadership>, who: &str) -> Leadership {
    until(rx, &format!("{who} leads"), WAIT, |l| l.is_leader).await
}

/// Asserts that `rx` does not publish leadership for `period` (a bound, several renewals
/// and retries long).
async fn never_leads(rx: &mut watch::Receiver<Leadership>, who: &str, period: Duration) {
    let led = tokio::time::timeout(period, rx.wait_for(|l| l.is_leader))
        .await
        .map(|r| r.map(|l| *l));
    assert!(
        led.is_err(),
        "{who} led within {period:?}: {:?}",
        *rx.borrow()
    );
}

async fn lease(admin: &Client, ns: &str) -> (Lease, LeaseRecord) {
    let lease = Api::<Lease>::namespaced(admin.clone(), ns)
        .get(LEASE)
        .await
        .expect("the Lease exists");
    let record = LeaseRecord::from_lease(&lease);
    (lease, record)
}

#[tokio::test]
async fn the_first_candidate_acquires_the_lease_and_the_second_waits() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-first").await;
    let mut a = elect(admin.clone(), &ns, "replica-a", 0);
    let first = leads(&mut a.leadership, "replica-a").await;
    assert_eq!(first.epoch, 1, "the first term of a new Lease");
    let mut b = elect(admin.clone(), &ns, "replica-b", 0);
    // Longer than the lease: replica-a renews, replica-b keeps waiting.
    never_leads(&mut b.leadership, "replica-b", LEASE_DURATION * 2).await;
    assert!(a.leadership.borrow().is_leader);
    let (stored, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder.as_deref(), Some("replica-a"));
    assert_eq!((record.transitions, record.epoch), (0, Some(1)));
    assert_eq!(record.lease_duration, Some(LEASE_DURATION));
    assert!(
        record.renew_time > record.acquire_time,
        "renewed since acquired: {record:?}"
    );
    assert_eq!(
        stored
            .metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .map(|f| f.manager.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["haptor"]
    );
    assert!(a.elector.errors().borrow().is_none());
    b.elector.shutdown().await.expect("replica-b stops");
    a.elector.shutdown().await.expect("replica-a releases");
}

#[tokio::test]
async fn a_released_lease_is_taken_over_at_once_with_a_higher_epoch() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-release").await;
    // A 20 s Lease: a takeover well within it came from the release, not from an expiry,
    // however slow the machine.
    let long = || settings_lasting("20s", "10s");
    let mut a = elect_with(admin.clone(), &ns, "replica-a", 0, long());
    let first = leads(&mut a.leadership, "replica-a").await;
    let mut b = elect_with(admin.clone(), &ns, "replica-b", 0, long());
    never_leads(&mut b.leadership, "replica-b", Duration::from_millis(600)).await;

    let mut a_rx = a.leadership.clone();
    let released = Instant::now();
    a.elector.shutdown().await.expect("replica-a releases");
    assert!(
        !a_rx.borrow_and_update().is_leader,
        "stopping ends the term"
    );
    let second = leads(&mut b.leadership, "replica-b").await;
    let took = released.elapsed();
    // A retry period (200 ms) and a request or two, far from the 20 s expiry.
    assert!(
        took < Duration::from_secs(10),
        "replica-b took {took:?} after the release"
    );
    assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder.as_deref(), Some("replica-b"));
    assert_eq!(record.transitions, 1);
    assert_eq!(record.epoch, Some(second.epoch));
    b.elector.shutdown().await.expect("replica-b releases");
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder, None, "released");
    assert_eq!(
        record.epoch,
        Some(second.epoch),
        "the epoch stays on the Lease"
    );
}

#[tokio::test]
async fn a_holder_that_stops_renewing_loses_to_the_other_after_the_lease_expires() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-dead").await;
    let mut a = elect(admin.clone(), &ns, "replica-a", 0);
    let first = leads(&mut a.leadership, "replica-a").await;
    let mut b = elect(admin.clone(), &ns, "replica-b", 0);
    never_leads(&mut b.leadership, "replica-b", Duration::from_millis(600)).await;

    // Dies: no release, no more renewals.
    let dead = a.leadership.clone();
    let died = Instant::now();
    drop(a.elector);
    let second = leads(&mut b.leadership, "replica-b").await;
    let took = died.elapsed();
    // replica-a last renewed at most a retry period (200 ms, plus a request) before it
    // died: the Lease stayed held until 2 s after that.
    assert!(
        took >= LEASE_DURATION - Duration::from_millis(500),
        "replica-b took the Lease {took:?} after replica-a died, before it expired"
    );
    assert!(
        dead.borrow().is_leader,
        "the dead leader never said otherwise"
    );
    assert!(
        dead.borrow().epoch < second.epoch,
        "a late write of the dead leader ({first:?}) is fenced by {second:?}"
    );
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder.as_deref(), Some("replica-b"));
    assert_eq!((record.transitions, record.epoch), (1, Some(second.epoch)));
    b.elector.shutdown().await.expect("replica-b releases");
}

#[tokio::test]
async fn a_deleted_and_recreated_lease_never_lowers_the_epoch() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-deleted").await;
    let leases = Api::<Lease>::namespaced(admin.clone(), &ns);
    // Three terms: epochs 1, 2, 3 and two transitions.
    let mut a = elect(admin.clone(), &ns, "replica-a", 0);
    assert_eq!(leads(&mut a.leadership, "replica-a").await.epoch, 1);
    a.elector.shutdown().await.expect("released");
    let mut b = elect(admin.clone(), &ns, "replica-b", 0);
    assert_eq!(leads(&mut b.leadership, "replica-b").await.epoch, 2);
    b.elector.shutdown().await.expect("released");
    let mut a = elect(admin.clone(), &ns, "replica-a", 0);
    let third = leads(&mut a.leadership, "replica-a").await;
    assert_eq!(third.epoch, 3);
    let (_, before) = lease(&admin, &ns).await;
    assert_eq!((before.transitions, before.epoch), (2, Some(3)));

    // The leader goes on leading while its Lease is deleted: it recreates it with its
    // epoch, the transitions restarted at 0.
    leases
        .delete(LEASE, &DeleteParams::default())
        .await
        .expect("the Lease is deleted");
    let deadline = Instant::now() + WAIT;
    let recreated = loop {
        if let Some(l) = leases.get_opt(LEASE).await.expect("a GET") {
            break LeaseRecord::from_lease(&l);
        }
        assert!(Instant::now() < deadline, "the Lease was not recreated");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(recreated.holder.as_deref(), Some("replica-a"));
    assert_eq!((recreated.transitions, recreated.epoch), (0, Some(3)));
    assert!(
        !a.leadership.has_changed().expect("publishing"),
        "the term went on: {:?}",
        *a.leadership.borrow()
    );

    // A new candidate after the release of the recreated Lease: one transition counted,
    // yet the epoch is above 3.
    a.elector.shutdown().await.expect("released");
    let mut c = elect(admin.clone(), &ns, "replica-c", 0);
    let fourth = leads(&mut c.leadership, "replica-c").await;
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.transitions, 1);
    assert_eq!(fourth.epoch, 4, "above the epoch before the deletion");

    // replica-d waits, knowing epoch 4; replica-c dies and its Lease is deleted with it:
    // replica-d creates a new one, above what it knew.
    let mut d = elect(admin.clone(), &ns, "replica-d", 0);
    never_leads(&mut d.leadership, "replica-d", Duration::from_millis(600)).await;
    drop(c.elector);
    leases
        .delete(LEASE, &DeleteParams::default())
        .await
        .expect("the Lease is deleted");
    let fifth = leads(&mut d.leadership, "replica-d").await;
    assert_eq!(fifth.epoch, 5, "the waiting candidate knew epoch 4");
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!((record.transitions, record.epoch), (0, Some(5)));
    d.elector.shutdown().await.expect("released");
}

#[tokio::test]
async fn the_epoch_is_above_the_highest_a_target_reports() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-targets").await;
    let mut a = elect(admin.clone(), &ns, "replica-a", 41);
    let first = leads(&mut a.leadership, "replica-a").await;
    assert_eq!(first.epoch, 42);
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!((record.transitions, record.epoch), (0, Some(42)));
    // Raising the floor of a leader changes nothing in its term.
    a.elector.raise_epoch_floor(50);

    let mut b = elect(admin.clone(), &ns, "replica-b", 0);
    never_leads(&mut b.leadership, "replica-b", Duration::from_millis(600)).await;
    // A target reports epoch 100 (it was deployed by a term this Lease no longer shows).
    b.elector.raise_epoch_floor(100);
    assert_eq!(*a.leadership.borrow(), first);
    a.elector.shutdown().await.expect("released");
    let second = leads(&mut b.leadership, "replica-b").await;
    assert_eq!(second.epoch, 101);
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!((record.transitions, record.epoch), (1, Some(101)));
    b.elector.shutdown().await.expect("released");
}

#[tokio::test]
async fn a_leader_that_cannot_renew_publishes_that_it_lost_leadership_and_reacquires_later() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-cut").await;
    let proxy = CuttableProxy::start(kit.port).await;
    // A 4 s Lease renewed within 1 s: 3 s in which the loss must be published.
    let cut_settings = settings_lasting("4s", "1s");
    let timings = LeaseTimings::from_settings(&cut_settings).expect("the test timings nest");
    let mut a = elect_with(
        kit.admin_via(&proxy.url).await,
        &ns,
        "replica-a",
        0,
        cut_settings,
    );
    let first = leads(&mut a.leadership, "replica-a").await;

    // Cut off: the renew deadline (1 s) passes before the Lease (4 s) expires for others.
    proxy.cut().await;
    let cut = Instant::now();
    until(&mut a.leadership, "replica-a loses", WAIT, |l| !l.is_leader).await;
    let lost_at = Timestamp::now();
    let lost_after = cut.elapsed();
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder.as_deref(), Some("replica-a"));
    let expiry = record.expires_at(&timings).expect("renewed");
    assert!(
        lost_at < expiry,
        "replica-a said it lost leadership at {lost_at} ({lost_after:?} after the cut), \
         not before its Lease expired at {expiry}"
    );
    assert!(
        a.elector.errors().borrow().is_some(),
        "the failed renewals are reported"
    );

    // Reconnected, nobody took it: its own Lease again, a new term (epoch + 1), no
    // transition (the holder never changed).
    proxy.restore();
    let again = leads(&mut a.leadership, "replica-a again").await;
    assert_eq!(again.epoch, first.epoch + 1);
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!((record.transitions, record.epoch), (0, Some(again.epoch)));

    // Cut off again, and this time replica-b takes the Lease once it expired: on
    // reconnecting replica-a waits, its epoch below replica-b's.
    let mut b = elect(admin.clone(), &ns, "replica-b", 0);
    never_leads(&mut b.leadership, "replica-b", Duration::from_millis(600)).await;
    proxy.cut().await;
    until(&mut a.leadership, "replica-a loses again", WAIT, |l| {
        !l.is_leader
    })
    .await;
    let taken = leads(&mut b.leadership, "replica-b").await;
    assert!(taken.epoch > again.epoch, "{taken:?} after {again:?}");
    proxy.restore();
    never_leads(&mut a.leadership, "replica-a", LEASE_DURATION * 2).await;
    let deadline = Instant::now() + WAIT;
    while a.elector.errors().borrow().is_some() {
        assert!(
            Instant::now() < deadline,
            "replica-a did not reach the API server again: {:?}",
            a.elector.errors().borrow()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder.as_deref(), Some("replica-b"));
    assert_eq!((record.transitions, record.epoch), (1, Some(taken.epoch)));
    a.elector.shutdown().await.expect("replica-a stops");
    b.elector.shutdown().await.expect("replica-b releases");
}

#[tokio::test]
async fn a_restricted_identity_needs_a_role_on_leases() {
    let kit = Kit::shared();
    let admin = kit.admin().await;
    let ns = kit.temp_ns("election-rbac").await;
    let mut r = elect(kit.restricted().await, &ns, "replica-r", 0);
    let mut errors = r.elector.errors();
    let error = tokio::time::timeout(WAIT, errors.wait_for(Option::is_some))
        .await
        .expect("an error within the wait")
        .expect("the elector runs")
        .clone()
        .expect("an error");
    assert!(
        matches!(*error, LeaseError::Forbidden { verb: "get", .. }),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "forbidden");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "grant get/create/update on leases.coordination.k8s.io in namespace {ns}"
        )) && message.contains(&format!("Lease {ns}/{LEASE}")),
        "{message}"
    );
    assert!(!r.leadership.borrow().is_leader);

    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "haptor-leader-election", "namespace": ns },
        "rules": [{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "create", "update"],
        }],
    }))
    .expect("a Role");
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("Role created");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "haptor-leader-election", "namespace": ns },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "haptor-leader-election",
        },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": RESTRICTED_USER }],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("RoleBinding created");

    let term = leads(&mut r.leadership, "replica-r").await;
    assert_eq!(term.epoch, 1);
    assert!(r.elector.errors().borrow().is_none());
    r.elector
        .shutdown()
        .await
        .expect("the Role allows the release");
    let (stored, record) = lease(&admin, &ns).await;
    assert_eq!(record.holder, None);
    let annotations = stored.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(EPOCH_ANNOTATION).map(String::as_str),
        Some("1")
    );
}
