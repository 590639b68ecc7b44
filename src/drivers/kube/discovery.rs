//! Discovery of the HAProxy pods on kube-rs: one watch on the Pods of the config's
//! namespace with the `podSelector` sent to the server as a label selector, a map of what
//! it saw, and after every change the pods to deploy to ([`pod_endpoints`]) published as
//! [`Instance`]s, each a [`DataplaneTarget`] at `podIP:port`. An instance whose pod keeps
//! its name, address and the credentials keeps its target (and so its Deployer and what it
//! knows of the pod); a pod that goes away leaves the list, which stops its Deployer; a new
//! pod joins, and the DeployScheduler gives it the current configuration at once.
//!
//! The watch recovers on its own ([`super::retried`]); an error is told as
//! `pure::api_failure` says (the API server's URL, the cause, the RBAC hint for a 403 that
//! lasts), and the last published list stands meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::drivers::dataplane::{DataplaneSettings, DataplaneTarget};
use crate::drivers::kube::{KubeApi, tell_watch_failure, tell_watch_resumed};
use crate::messages::Instance;
use crate::pure::api_failure::{ApiFailure, FailureLog, Request};
use crate::pure::deploy::DeployTarget;
use crate::pure::discovery::{ObservedPod, PodEndpoint, pod_endpoints};
use crate::pure::haproxy::HaproxyVersion;

/// The Data Plane API credentials every pod is reached with.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct DataplaneCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for DataplaneCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataplaneCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Where and how to look for HAProxy pods.
#[derive(Debug, Clone)]
pub struct PodDiscoverySettings {
    pub namespace: String,
    /// `podSelector.matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// The Data Plane API port on each pod.
    pub port: u16,
    /// Whether the pods need credentials (the config names a credentials Secret): until
    /// they are known no pod is published, so no Deployer calls a pod without them.
    pub credentials_required: bool,
    /// The HAProxy version each pod must report before it is deployed to (renders are
    /// validated for it); `None`: not checked.
    pub haproxy_version: Option<HaproxyVersion>,
}

impl PodDiscoverySettings {
    /// The label selector sent to the server.
    pub fn label_selector(&self) -> String {
        self.match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// What discovery publishes: the endpoints (for status and tests) and the instances.
#[derive(Clone, Default)]
pub struct Discovered {
    pub endpoints: Vec<PodEndpoint>,
    pub instances: Vec<Instance>,
}

/// Builds the instances for `endpoints`, reusing the target of an unchanged one.
fn instances(
    endpoints: &[PodEndpoint],
    previous: &BTreeMap<PodEndpoint, Arc<dyn DeployTarget>>,
    credentials: &DataplaneCredentials,
    haproxy_version: Option<HaproxyVersion>,
) -> BTreeMap<PodEndpoint, Arc<dyn DeployTarget>> {
    let mut next = BTreeMap::new();
    for endpoint in endpoints {
        if let Some(target) = previous.get(endpoint) {
            next.insert(endpoint.clone(), Arc::clone(target));
            continue;
        }
        let mut settings =
            DataplaneSettings::new(&endpoint.url, &credentials.username, &credentials.password);
        settings.haproxy_version = haproxy_version;
        match DataplaneTarget::new(&endpoint.name, settings) {
            Ok(target) => {
                next.insert(endpoint.clone(), Arc::new(target) as Arc<dyn DeployTarget>);
            }
            Err(e) => {
                tracing::warn!(pod = %endpoint.name, url = %endpoint.url, error = %e, "HAProxy pod left out: no Data Plane API target for it");
            }
        }
    }
    next
}

/// Runs discovery until the returned task is aborted, publishing on `out`. A credentials
/// change rebuilds every target.
pub fn spawn(
    client: impl Into<KubeApi>,
    settings: PodDiscoverySettings,
    mut credentials: watch::Receiver<DataplaneCredentials>,
    out: watch::Sender<Discovered>,
) -> tokio::task::JoinHandle<()> {
    let KubeApi { client, server } = client.into();
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client, &settings.namespace);
        let request = Request::watch("pods", "", Some(&settings.namespace));
        let what = format!("HAProxy pods (selector {})", settings.label_selector());
        let mut failures = FailureLog::new();
        let config = watcher::Config::default().labels(&settings.label_selector());
        let mut events = super::retried(watcher(api, config));
        let mut pods: BTreeMap<String, ObservedPod> = BTreeMap::new();
        let mut listing: Option<BTreeMap<String, ObservedPod>> = None;
        let mut targets: BTreeMap<PodEndpoint, Arc<dyn DeployTarget>> = BTreeMap::new();
        let mut creds = credentials.borrow_and_update().clone();
        let mut published: Option<Vec<PodEndpoint>> = None;
        let mut waiting_logged = false;
        loop {
            tokio::select! {
                event = events.next() => {
                    let Some(event) = event else { return };
                    if matches!(&event, Ok(e) if !matches!(e, watcher::Event::Init)) {
                        tell_watch_resumed(&mut failures, &what);
                    }
                    match event {
                        Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
                        Ok(watcher::Event::InitApply(pod)) => {
                            if let (Some(list), Some(seen)) = (listing.as_mut(), ObservedPod::of(&pod)) {
                                list.insert(seen.name.clone(), seen);
                            }
                        }
                        Ok(watcher::Event::InitDone) => {
                            pods = listing.take().unwrap_or_default();
                        }
                        Ok(watcher::Event::Apply(pod)) => {
                            if let Some(seen) = ObservedPod::of(&pod) {
                                pods.insert(seen.name.clone(), seen);
                            }
                        }
                        Ok(watcher::Event::Delete(pod)) => {
                            if let Some(name) = pod.metadata.name.as_deref() {
                                pods.remove(name);
                            }
                        }
                        Err(e) => {
                            tell_watch_failure(&mut failures, &ApiFailure::of_watch(&server, &request, &e), &what);
                            continue;
                        }
                    }
                    if listing.is_some() {
                        continue;
                    }
                }
                changed = credentials.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    creds = credentials.borrow_and_update().clone();
                    targets.clear();
                    published = None;
                }
            }
            if settings.credentials_required && creds.username.is_empty() {
                if !waiting_logged {
                    tracing::info!(namespace = %settings.namespace, "waiting for the Data Plane API credentials before deploying to the HAProxy pods");
                    waiting_logged = true;
                }
                continue;
            }
            let endpoints = pod_endpoints(&pods, settings.port);
            if published.as_ref() == Some(&endpoints) {
                continue;
            }
            targets = instances(&endpoints, &targets, &creds, settings.haproxy_version);
            let instances: Vec<Instance> = targets
                .iter()
                .map(|(endpoint, target)| Instance {
                    name: endpoint.name.clone(),
                    target: Arc::clone(target),
                })
                .collect();
            tracing::info!(namespace = %settings.namespace, pods = ?endpoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), "HAProxy pods discovered");
            published = Some(endpoints.clone());
            let _ = out.send(Discovered {
                endpoints,
                instances,
            });
        }
    })
}
