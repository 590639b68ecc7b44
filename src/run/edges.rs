//! The Kubernetes edges of `haptor run` as supervised actors ([`EdgeTask`]s): each is a
//! factory that starts one driver task of `crate::drivers::kube` from what it needs (cloned
//! channel ends, the client), so that its supervisor can start it again after it ends or
//! panics. Every edge reads its inputs from watch channels, whose latest value a restarted
//! task reads first: that is its state replay.
//!
//! All-replica edges (under the root): the config watch, the credentials Secret watch, pod
//! discovery, the Lease election and the webhook certificate reloader. Leader-only edges
//! (the root's `leader-only-edges` subtree, run while this replica leads): the config's
//! status writer, the Kubernetes Events recorder, the Ingress status writer and the
//! `HAProxyCfg` writer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Resource;
use tokio::sync::{mpsc, watch};

use crate::actors::edge::{EdgeStop, EdgeTask};
use crate::drivers::AbortOnDrop;
use crate::drivers::kube::KubeApi;
use crate::drivers::kube::config::Verdict;
use crate::drivers::kube::discovery::{DataplaneCredentials, Discovered, PodDiscoverySettings};
use crate::drivers::kube::lease::{ElectorOptions, LeaseElector, always_leader};
use crate::messages::events::EventKind;
use crate::messages::{Instance, Leadership, ObservedEvent};
use crate::pure::config::{HAProxyTemplateConfig, LeaderElectionSettings};
use crate::pure::haproxy::HaproxyVersion;

/// A config as the config watch publishes it (`None` until one is read).
pub type ConfigChannel = watch::Receiver<Option<Arc<HAProxyTemplateConfig>>>;

/// The edge names, as `/debug/actors` lists them (and the fault injection takes them).
pub mod names {
    pub const CONFIG: &str = "kube-config-watch";
    pub const CREDENTIALS: &str = "kube-credentials-watch";
    pub const CREDENTIALS_SECRET: &str = "kube-credentials-secret";
    pub const DEFAULT_CERTIFICATE: &str = "kube-default-certificate";
    pub const DISCOVERY: &str = "kube-pod-discovery";
    pub const LEASE: &str = "kube-lease-election";
    pub const WEBHOOK_CERTIFICATE: &str = "webhook-certificate";
    pub const CONFIG_STATUS: &str = "kube-config-status";
    pub const EVENTS: &str = "kube-events";
    pub const INGRESS_STATUS: &str = "kube-ingress-status";
    pub const HAPROXYCFG: &str = "kube-haproxycfg-writer";
}

/// Publishes "not leading" when dropped: an election that is not running (stopped,
/// crashed, restarting) must not leave this replica believing it leads. The epoch is kept,
/// so the next term is above it.
struct StepDownOnDrop(watch::Sender<Leadership>);

impl Drop for StepDownOnDrop {
    fn drop(&mut self) {
        self.0.send_if_modified(|now| {
            let was = now.is_leader;
            now.is_leader = false;
            was
        });
    }
}

/// The Lease election (or, with `leaderElection.enabled: false`, always leading), started
/// from the first config read, valid or not, so that a leader writes an invalid config's
/// status. A later change of the settings is logged as applying at the next start of the
/// election (two Lease names at once would mean two leaders); settings that cannot drive
/// an election are logged and the edge waits for a config that fixes them.
///
/// `floor` is the highest epoch a target reported (raised by fenced deployments): a new
/// term is above it. Stopping the edge releases a held Lease, so a successor takes over at
/// its next retry.
#[derive(Clone)]
pub struct Election {
    pub client: KubeApi,
    pub namespace: String,
    pub identity: String,
    pub seen: ConfigChannel,
    pub leader: watch::Sender<Leadership>,
    pub floor: watch::Receiver<u64>,
}

impl Election {
    pub fn edge(self) -> EdgeTask {
        EdgeTask::new(names::LEASE, move |stop| {
            tokio::spawn(self.clone().run(stop))
        })
    }

    /// The settings of the config read now, waiting for one; `None` when asked to stop.
    async fn settings(
        &mut self,
        stop: &mut EdgeStop,
        unlike: Option<&LeaderElectionSettings>,
    ) -> Option<LeaderElectionSettings> {
        loop {
            let read = self
                .seen
                .borrow_and_update()
                .as_ref()
                .map(|c| c.spec.leader_election.clone());
            if let Some(settings) = read
                && Some(&settings) != unlike
            {
                return Some(settings);
            }
            tokio::select! {
                changed = self.seen.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                () = stop.requested() => return None,
            }
        }
    }

    async fn run(mut self, mut stop: EdgeStop) {
        let _step_down = StepDownOnDrop(self.leader.clone());
        let mut refused: Option<LeaderElectionSettings> = None;
        let (settings, mut elector) = loop {
            let Some(settings) = self.settings(&mut stop, refused.as_ref()).await else {
                return;
            };
            if !settings.enabled {
                tracing::info!(
                    "leader election disabled: this replica always leads (run one replica only)"
                );
                return self.always_lead(settings, stop).await;
            }
            let options = ElectorOptions {
                namespace: self.namespace.clone(),
                settings: settings.clone(),
                identity: self.identity.clone(),
                highest_target_epoch: *self.floor.borrow_and_update(),
            };
            match LeaseElector::start(self.client.clone(), options, self.leader.clone()) {
                Ok(elector) => break (settings, elector),
                Err(e) => {
                    tracing::error!(error = %e, "leader election cannot start; this replica does not lead until the config's leaderElection is fixed");
                    refused = Some(settings);
                }
            }
        };
        let mut warned = false;
        loop {
            tokio::select! {
                () = stop.requested() => {
                    if let Err(e) = elector.shutdown().await {
                        tracing::warn!(error = %e, "the Lease was not released; it expires on its own");
                    }
                    return;
                }
                message = elector.ended() => {
                    tracing::error!("{message}");
                    return;
                }
                changed = self.floor.changed() => {
                    if changed.is_ok() {
                        elector.raise_epoch_floor(*self.floor.borrow_and_update());
                    }
                }
                changed = self.seen.changed() => {
                    if changed.is_ok() {
                        self.warn_on_changed_settings(&settings, &mut warned);
                    }
                }
            }
        }
    }

    /// Says once that a config read changed `spec.leaderElection` from the `running`
    /// settings: the change applies at the next start of the election.
    fn warn_on_changed_settings(&mut self, running: &LeaderElectionSettings, warned: &mut bool) {
        let now = self
            .seen
            .borrow_and_update()
            .as_ref()
            .map(|c| c.spec.leader_election.clone());
        if !*warned && now.is_some_and(|now| &now != running) {
            *warned = true;
            tracing::warn!(
                "spec.leaderElection changed; it applies when haptor restarts (changing the Lease of a running replica could make two leaders)"
            );
        }
    }

    /// Leads at one epoch above the floor, moving above it whenever it rises.
    async fn always_lead(mut self, settings: LeaderElectionSettings, mut stop: EdgeStop) {
        let mut leadership = always_leader(*self.floor.borrow_and_update());
        let _ = self.leader.send_replace(leadership);
        let mut warned = false;
        loop {
            tokio::select! {
                () = stop.requested() => return,
                changed = self.floor.changed() => {
                    if changed.is_err() {
                        continue;
                    }
                    let floor = *self.floor.borrow_and_update();
                    if leadership.epoch <= floor {
                        leadership.epoch = floor.saturating_add(1);
                        tracing::warn!(
                            epoch = leadership.epoch,
                            "an instance holds a newer epoch (an earlier haptor's); leading on above it"
                        );
                        let _ = self.leader.send_replace(leadership);
                    }
                }
                changed = self.seen.changed() => {
                    if changed.is_ok() {
                        self.warn_on_changed_settings(&settings, &mut warned);
                    }
                }
            }
        }
    }
}

/// What a pod discovery watches (compared to see whether it must restart).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodSelection {
    match_labels: BTreeMap<String, String>,
    port: u16,
    credentials_required: bool,
}

impl PodSelection {
    /// What `config` selects; `None` without a `podSelector` with `matchLabels`.
    fn of(config: &HAProxyTemplateConfig) -> Option<PodSelection> {
        let selector = config.spec.pod_selector.as_ref()?;
        (!selector.match_labels.is_empty()).then(|| PodSelection {
            match_labels: selector.match_labels.clone(),
            port: config.spec.dataplane.port,
            credentials_required: config.spec.credentials_secret_ref.is_some(),
        })
    }
}

/// Pod discovery: the HAProxy pods the accepted config's `podSelector` selects, reached
/// with the credentials of its `credentialsSecretRef`; a change of either restarts the
/// pod watch. What it finds goes to the tree's instances channel.
#[derive(Clone)]
pub struct PodDiscovery {
    pub client: KubeApi,
    pub namespace: String,
    pub haproxy_version: HaproxyVersion,
    pub accepted: ConfigChannel,
    pub credentials: watch::Receiver<DataplaneCredentials>,
    pub instances: watch::Sender<Vec<Instance>>,
}

impl PodDiscovery {
    pub fn edge(self) -> EdgeTask {
        EdgeTask::new(names::DISCOVERY, move |_| tokio::spawn(self.clone().run()))
    }

    async fn run(mut self) {
        // The selection applied (outer `None`: no config read yet) and its pod watch.
        let mut applied: Option<Option<PodSelection>> = None;
        let mut pod_watch: Option<PodWatch> = None;
        let mut found: Option<watch::Receiver<Discovered>> = None;
        loop {
            let config = self.accepted.borrow_and_update().clone();
            if let Some(config) = config {
                let wanted = PodSelection::of(&config);
                if applied.as_ref() != Some(&wanted) {
                    pod_watch = None;
                    found = None;
                    match &wanted {
                        None => {
                            tracing::warn!(
                                "the config has no podSelector with matchLabels; no HAProxy pod is deployed to"
                            );
                            let _ = self.instances.send_replace(Vec::new());
                        }
                        Some(selection) => {
                            let (watch, discovered) = self.start(selection);
                            pod_watch = Some(watch);
                            found = Some(discovered);
                        }
                    }
                    applied = Some(wanted);
                }
            }
            tokio::select! {
                changed = self.accepted.changed() => {
                    if changed.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                changed = async {
                    match found.as_mut() {
                        Some(found) => found.changed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if changed.is_ok()
                        && let Some(found) = found.as_mut()
                    {
                        let now = found.borrow_and_update().instances.clone();
                        let _ = self.instances.send_replace(now);
                    }
                }
                outcome = async {
                    match pod_watch.as_mut() {
                        Some(w) => (&mut w.task).await,
                        None => std::future::pending().await,
                    }
                } => {
                    // The pod watch ended: so does this edge, and its supervisor restarts it.
                    if let Err(e) = outcome
                        && e.is_panic()
                    {
                        std::panic::resume_unwind(e.into_panic());
                    }
                    tracing::warn!("the watch of HAProxy pods ended; pod discovery restarts");
                    return;
                }
            }
        }
    }

    fn start(&self, selection: &PodSelection) -> (PodWatch, watch::Receiver<Discovered>) {
        // The first value (nothing found yet) is not forwarded: a restarted discovery keeps
        // the instances known until its watch lists them again.
        let (found_tx, found) = watch::channel(Discovered {
            endpoints: Vec::new(),
            instances: Vec::new(),
        });
        let task = crate::drivers::kube::discovery::spawn(
            self.client.clone(),
            PodDiscoverySettings {
                namespace: self.namespace.clone(),
                match_labels: selection.match_labels.clone(),
                port: selection.port,
                credentials_required: selection.credentials_required,
                haproxy_version: Some(self.haproxy_version),
            },
            self.credentials.clone(),
            found_tx,
        );
        let watch = PodWatch {
            _abort: AbortOnDrop(task.abort_handle()),
            task,
        };
        (watch, found)
    }
}

/// A running pod watch's task, aborted when this is dropped.
struct PodWatch {
    task: tokio::task::JoinHandle<()>,
    _abort: AbortOnDrop,
}

/// Where the run loop sends observability events for Kubernetes Events: the sender of the
/// running recorder, replaced each time it starts. While no recorder runs (a follower, a
/// leader whose recorder is still starting or restarting) the events wait, and a recorder
/// that starts posts those of the last [`EVENTS_WAIT`]: the events of gaining leadership
/// are observed the moment the recorder is started for it, and were lost to that race.
/// Older ones are dropped (a follower's past is not the new leader's to report), as are
/// events beyond [`EVENTS_QUEUE`]: Kubernetes Events are best effort.
#[derive(Clone, Default)]
pub struct EventsOutlet(Arc<Mutex<Outlet>>);

#[derive(Default)]
struct Outlet {
    sender: Option<mpsc::Sender<ObservedEvent>>,
    waiting: std::collections::VecDeque<(std::time::Instant, ObservedEvent)>,
}

/// How many events may wait for the recorder.
const EVENTS_QUEUE: usize = 256;

/// How old a waiting event may be when a recorder starts and still be posted.
const EVENTS_WAIT: Duration = Duration::from_secs(10);

impl EventsOutlet {
    /// Hands `event` to the running recorder (dropped when its queue is full), or keeps it
    /// for the next recorder when none runs.
    pub fn send(&self, event: ObservedEvent) {
        let mut outlet = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match outlet.sender.as_ref() {
            Some(sender) if !sender.is_closed() => {
                let _ = sender.try_send(event);
            }
            _ => {
                if outlet.waiting.len() == EVENTS_QUEUE {
                    outlet.waiting.pop_front();
                }
                outlet.waiting.push_back((std::time::Instant::now(), event));
            }
        }
    }

    /// Makes `sender` the running recorder's, first handing it the waiting events of the
    /// last [`EVENTS_WAIT`], but for those of the kind `replayed` (one the recorder was
    /// already given).
    fn attach(&self, sender: mpsc::Sender<ObservedEvent>, replayed: Option<&EventKind>) {
        let mut outlet = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let replayed = replayed.map(std::mem::discriminant);
        for (observed, event) in outlet.waiting.drain(..) {
            if observed.elapsed() <= EVENTS_WAIT
                && Some(std::mem::discriminant(&event.kind)) != replayed
            {
                let _ = sender.try_send(event);
            }
        }
        outlet.sender = Some(sender);
    }

    /// The recorder edge: Events about the config `regarding` names. A recorder starts by
    /// reporting the config's current problems, if it is invalid (`verdicts`): the event of
    /// its read may have gone out before this replica led, and a new leader says it again.
    pub fn edge(
        &self,
        client: KubeApi,
        identity: String,
        regarding: watch::Sender<Option<k8s_openapi::api::core::v1::ObjectReference>>,
        verdicts: watch::Receiver<Option<Arc<Verdict>>>,
    ) -> EdgeTask {
        let outlet = self.clone();
        EdgeTask::new(names::EVENTS, move |_| {
            let (sender, receiver) = mpsc::channel(EVENTS_QUEUE);
            let verdict = verdicts.borrow().clone();
            let mut replayed = None;
            if let Some(verdict) = verdict
                && let Some(rejection) = verdict.rejection()
            {
                // The Event is about the config the verdict is on, even if the run loop has
                // not named it yet.
                regarding.send_if_modified(|named| {
                    let unnamed = named.is_none();
                    if unnamed {
                        *named = Some(verdict.object.object_ref(&()));
                    }
                    unnamed
                });
                let _ = sender.try_send(ObservedEvent::new(None, rejection.clone()));
                replayed = Some(rejection);
            }
            outlet.attach(sender, replayed.as_ref());
            crate::drivers::kube::events::spawn(
                client.clone(),
                "haptor".into(),
                identity.clone(),
                regarding.subscribe(),
                receiver,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gained(epoch: u64) -> ObservedEvent {
        ObservedEvent::new(None, EventKind::LeadershipGained { epoch })
    }

    #[test]
    fn events_sent_while_no_recorder_runs_reach_the_recorder_that_starts_next() {
        let outlet = EventsOutlet::default();
        outlet.send(gained(1));
        let (sender, mut receiver) = mpsc::channel(EVENTS_QUEUE);
        outlet.attach(sender, None);
        outlet.send(gained(2));
        let epochs: Vec<_> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|event| match event.kind {
                EventKind::LeadershipGained { epoch } => epoch,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(epochs, [1, 2]);

        // A recorder that stopped leaves its events waiting for the next one again.
        drop(receiver);
        outlet.send(gained(3));
        let (sender, mut receiver) = mpsc::channel(EVENTS_QUEUE);
        outlet.attach(sender, Some(&EventKind::LeadershipLost));
        assert!(matches!(
            receiver.try_recv().map(|e| e.kind),
            Ok(EventKind::LeadershipGained { epoch: 3 })
        ));
    }
}
