//! `haptor run`: the in-cluster controller. The actor tree is the one `haptor local` runs;
//! only its edges differ, and they are the Kubernetes drivers of `crate::drivers::kube`:
//!
//! - the config: the `HAProxyTemplateConfig` named by `--config-name` in haptor's namespace
//!   (`drivers::kube::config`: judged before the tree sees it, its status written by the
//!   leader);
//! - the watched resources: `drivers::kube::resources::KubeResources`, one kube-rs watcher
//!   per resource the config names;
//! - leadership: a Lease (`drivers::kube::lease`) or, with `leaderElection.enabled: false`,
//!   always leading; its settings are read from the first config read, valid or not, so
//!   that a leader writes an invalid config's status (a later change is logged as needing a
//!   restart: two Lease names at once would mean two leaders);
//! - the instances: the HAProxy pods the config's `podSelector` selects
//!   (`drivers::kube::discovery`), reached with the credentials of `credentialsSecretRef`
//!   (`drivers::kube::credentials`); a change of either restarts that watch;
//! - the published state: the `HAProxyCfg` (`drivers::kube::publish`) and Kubernetes Events
//!   (`drivers::kube::events`, fed by the event fan-out's external queue);
//! - Ingress status and `IngressIgnored`/`IngressPartlyServed` Events
//!   (`drivers::kube::ingress_status`), from the
//!   outcomes (`served`, `ignored`) of each published render, with the address of
//!   `--publish-address` or `--publish-service` (none: no status is written).
//!
//! A deployment refused for an older epoch raises the epoch floor: the next Lease term is
//! above it, and an always-leading replica moves its epoch above it at once. SIGTERM stops
//! the actor tree (a deployment in flight gets its `deploymentTimeout`), then releases the
//! Lease so a successor leads at its next retry, and exits 0.

pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use tokio::sync::{mpsc, watch};

use crate::actors::context::{ControllerSettings, FullPipeline, Sources};
use crate::actors::controller::{ServerAddresses, start_controller};
use crate::drivers::kube::config::{ConfigChannels, ConfigReporting, status_writes_counter};
use crate::drivers::kube::credentials::SecretName;
use crate::drivers::kube::discovery::{DataplaneCredentials, Discovered, PodDiscoverySettings};
use crate::drivers::kube::ingress_status::{PublishAddress, WithIngressStatus};
use crate::drivers::kube::lease::{ElectorOptions, LeaseElector, always_leader};
use crate::drivers::kube::publish::KubePublishSink;
use crate::drivers::kube::resources::KubeResources;
use crate::messages::{EventKind, Instance, Leadership, ObservedEvent};
use crate::pure::config::{HAProxyTemplateConfig, LeaderElectionSettings};
use crate::pure::haproxy::HaproxyVersion;
use crate::telemetry::LogLevelHandle;

/// What `haptor run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub config_name: String,
    /// haptor's namespace (`--namespace`, `POD_NAMESPACE`); else the kubeconfig context's or
    /// the service account's.
    pub namespace: Option<String>,
    /// A kubeconfig file; else `KUBECONFIG`, `~/.kube/config`, then the in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    pub metrics_addr: String,
    pub debug_addr: String,
    pub health_addr: String,
    pub haproxy_bin: String,
    /// The HAProxy version (major.minor) of the HAProxy pods (`--haproxy-version`, else the
    /// version of `haproxy_bin`): renders are schema-checked for it and `haproxy -c` runs the
    /// checker of that version; a pod whose Data Plane API reports another is not deployed to.
    pub haproxy_version: HaproxyVersion,
    /// `--haproxy-checker VERSION=PATH`; empty: `haproxy_bin` for its own version.
    pub haproxy_checkers: Vec<(HaproxyVersion, PathBuf)>,
    /// The Lease holder identity; else `POD_NAME`, then the host name.
    pub identity: Option<String>,
    pub log_level: Option<LogLevelHandle>,
    /// The address served Ingresses get in their status (`--publish-address`,
    /// `--publish-service`); `Nothing`: no Ingress status is written.
    pub publish: PublishAddress,
    /// The admission webhook, when it has a certificate.
    pub webhook: Option<WebhookOptions>,
    /// `--create-credentials-secret`: the Data Plane API credentials Secret of this name
    /// in haptor's namespace is created with a random password when it does not exist
    /// (`drivers::kube::dataplane_secret`).
    pub create_credentials_secret: Option<String>,
    /// Watch namespaced resources in this namespace only (`--watch-namespace`).
    pub watch_namespace: Option<String>,
}

/// How `haptor run` serves its admission webhook.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    pub addr: String,
    /// Where its serving certificate comes from.
    pub certificate: WebhookCertificate,
    pub timeout: Duration,
    pub failure_policy: crate::pure::admission::FailurePolicy,
}

/// Where the webhook's serving certificate comes from.
#[derive(Debug, Clone)]
pub enum WebhookCertificate {
    /// `--webhook-cert-file`, `--webhook-key-file` (a mounted Secret: cert-manager's or the
    /// user's), read again when they change.
    Files {
        cert_file: PathBuf,
        key_file: PathBuf,
    },
    /// `--webhook-self-issued-secret`: haptor issues a CA and a serving certificate for the
    /// `service`'s DNS names, kept in `secret` of its namespace, rotated before expiry, and
    /// sets the `caBundle` (then, once ready, the `failurePolicy`) of the
    /// ValidatingWebhookConfiguration `configuration` (`drivers::kube::webhook_issuer`).
    SelfIssued {
        secret: String,
        service: String,
        configuration: Option<String>,
    },
}

/// How often the webhook's certificate files are read for a rotation.
const CERTIFICATE_POLL: Duration = Duration::from_secs(2);

/// The metric families `haptor run` adds to the controller's (drivers and the webhook), one
/// handle each; registered by [`RunMetrics::register`], the one registration production
/// runs.
struct RunMetrics {
    status_writes: prometheus::IntCounterVec,
    webhook: webhook::WebhookMetrics,
    /// 1 while the newest config read was rejected.
    config_invalid: prometheus::IntGauge,
    /// While leading: the instances that do not hold the latest render.
    instances_behind: prometheus::IntGauge,
}

impl RunMetrics {
    fn new() -> Result<RunMetrics, prometheus::Error> {
        Ok(RunMetrics {
            status_writes: status_writes_counter()?,
            webhook: webhook::WebhookMetrics::new()?,
            config_invalid: prometheus::IntGauge::new(
                "haptor_config_invalid",
                "1 while the newest HAProxyTemplateConfig read was rejected (the last valid one keeps serving), else 0",
            )?,
            instances_behind: prometheus::IntGauge::new(
                "haptor_instances_behind",
                "While this replica leads: HAProxy instances that do not run the latest render (0 on followers)",
            )?,
        })
    }

    fn register(
        &self,
        metrics: &crate::observability::metrics::Metrics,
        kube_writes: prometheus::IntCounterVec,
    ) -> Result<(), prometheus::Error> {
        metrics.register(Box::new(kube_writes))?;
        metrics.register(Box::new(self.status_writes.clone()))?;
        metrics.register(Box::new(self.config_invalid.clone()))?;
        metrics.register(Box::new(self.instances_behind.clone()))?;
        self.webhook.register(metrics)
    }
}

/// The name of every metric family `haptor run` serves on `/metrics` (histograms by their
/// base name), from the same registration `run` performs: what dashboards and alerts may
/// name.
pub fn metric_families() -> Result<Vec<String>, String> {
    let metrics = crate::observability::metrics::Metrics::new().map_err(|e| e.to_string())?;
    let run = RunMetrics::new().map_err(|e| e.to_string())?;
    run.register(&metrics, crate::drivers::kube::publish::write_counters())
        .map_err(|e| e.to_string())?;
    Ok(metrics.family_names())
}

/// Why `haptor run` could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot reach the Kubernetes API: {0}")]
    Kubernetes(String),
    #[error("could not start the controller: {0}")]
    Controller(String),
}

/// How often the run loop looks at readiness (to log it once).
const READY_POLL: Duration = Duration::from_millis(200);

/// The client configuration: the given kubeconfig, else kube's inference.
async fn kube_config(kubeconfig: Option<&PathBuf>) -> Result<Config, RunError> {
    match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| RunError::Kubernetes(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Kubernetes(format!("{}: {e}", path.display())))
        }
        None => Config::infer().await.map_err(|e| {
            RunError::Kubernetes(format!(
                "no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config) and no in-cluster service account: {e}"
            ))
        }),
    }
}

/// Runs until `shutdown` completes.
pub async fn run(
    options: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let config = kube_config(options.kubeconfig.as_ref()).await?;
    let namespace = options
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| RunError::Kubernetes(e.to_string()))?;
    let identity = options
        .identity
        .clone()
        .unwrap_or_else(crate::drivers::kube::lease::identity);

    let (config_tx, config_rx) = watch::channel(None);
    let (seen_tx, mut seen) = watch::channel(None);
    let (leader_tx, leader_rx) = watch::channel(Leadership::default());
    let (instances_tx, instances_rx) = watch::channel(Vec::<Instance>::new());
    let resources = KubeResources::in_namespace(client.clone(), options.watch_namespace.clone());
    let (sink, sink_task) = KubePublishSink::start(
        client.clone(),
        namespace.clone(),
        options.config_name.clone(),
    );
    let sink = Arc::new(sink);
    // Ingress status and the Events about what was left out, from each published render.
    let (ingress_status, ingress_status_task) = crate::drivers::kube::ingress_status::spawn(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "haptor".into(),
            instance: Some(
                crate::pure::kube_events::truncate_to(
                    &identity,
                    crate::pure::kube_events::REPORTING_INSTANCE_LIMIT,
                )
                .to_string(),
            )
            .filter(|i| !i.is_empty()),
        },
        options.publish.clone(),
        leader_rx.clone(),
    );
    let publish_sink = Arc::new(WithIngressStatus {
        inner: sink.clone(),
        status: ingress_status,
    });
    // End of the Ingress status wiring.
    let validator = crate::drivers::haproxy_check::versioned_validator(
        options.haproxy_version,
        &options.haproxy_checkers,
        &options.haproxy_bin,
        64,
    );
    let sources = Sources {
        config: config_rx.clone(),
        resources: Arc::new(resources.clone()),
        leadership: leader_rx.clone(),
        instances: instances_rx,
    };
    let run_metrics =
        RunMetrics::new().map_err(|e| RunError::Controller(format!("metrics: {e}")))?;
    // The webhook: its certificate loads (and reloads) from files, or haptor issues it and
    // keeps it in a Secret; until one loads, TLS handshakes fail and the API server applies
    // its failure policy.
    let mut certificate_task = None;
    let webhook_serving = match &options.webhook {
        Some(settings) => {
            let reloads = run_metrics.webhook.certificate_reloads.clone();
            // Readiness exists once the tree runs; the webhook server, started with it,
            // hands it over for the issuer's failure-policy switch.
            let readiness = Arc::new(std::sync::OnceLock::<crate::actors::http::Readiness>::new());
            let certificate = match &settings.certificate {
                WebhookCertificate::Files {
                    cert_file,
                    key_file,
                } => {
                    let certificate = Arc::new(
                        crate::drivers::webhook_certificate::ReloadingCertificate::new(
                            cert_file, key_file,
                        ),
                    );
                    if let Err(e) = certificate.reload() {
                        tracing::error!(error = %e, "the webhook certificate does not load yet; the webhook refuses TLS handshakes until it does");
                    }
                    certificate_task =
                        Some(Arc::clone(&certificate).spawn_watch(CERTIFICATE_POLL, reloads));
                    certificate
                }
                WebhookCertificate::SelfIssued {
                    secret,
                    service,
                    configuration,
                } => {
                    let certificate = Arc::new(
                        crate::drivers::webhook_certificate::ReloadingCertificate::in_memory(),
                    );
                    let issuer = crate::drivers::kube::webhook_issuer::IssuerSettings::new(
                        namespace.clone(),
                        secret.clone(),
                        service.clone(),
                        configuration.clone(),
                        settings.failure_policy,
                    );
                    let ready = Arc::clone(&readiness);
                    certificate_task = Some(crate::drivers::kube::webhook_issuer::spawn(
                        client.clone(),
                        issuer,
                        Arc::clone(&certificate),
                        Arc::new(move || ready.get().is_some_and(|r| r.is_ready())),
                        reloads,
                    ));
                    certificate
                }
            };
            let tls = certificate
                .server_config()
                .map_err(|e| RunError::Controller(format!("webhook TLS: {e}")))?;
            let webhook_settings = webhook::WebhookSettings {
                timeout: settings.timeout,
                failure_policy: settings.failure_policy,
                haproxy_bin: options.haproxy_bin.clone(),
                haproxy_version: options.haproxy_version,
                haproxy_checkers: options.haproxy_checkers.clone(),
            };
            let webhook_metrics = run_metrics.webhook.clone();
            Some(crate::actors::controller::TlsServing {
                addr: settings.addr.clone(),
                tls,
                router: Arc::new(move |services| {
                    readiness.get_or_init(|| services.readiness.clone());
                    webhook::Admission::new(
                        services,
                        webhook_settings.clone(),
                        webhook_metrics.clone(),
                    )
                    .router()
                }),
            })
        }
        None => {
            tracing::info!(
                "no --webhook-cert-file/--webhook-key-file or --webhook-self-issued-secret: the admission webhook is not served"
            );
            None
        }
    };
    let addresses = ServerAddresses {
        metrics: Some(options.metrics_addr.clone()),
        debug: Some(options.debug_addr.clone()),
        health: Some(options.health_addr.clone()),
        webhook: webhook_serving,
    };
    let controller = start_controller(
        sources,
        Arc::new(FullPipeline::new(validator.clone())),
        publish_sink,
        ControllerSettings {
            external_events: true,
            ..ControllerSettings::default()
        },
        addresses,
        options.log_level.clone(),
    )
    .await
    .map_err(RunError::Controller)?;
    let cache = validator.clone();
    controller
        .metrics
        .set_validation_cache_source(Arc::new(move || {
            (cache.cache().hits(), cache.cache().misses())
        }));
    if let Err(e) = run_metrics.register(&controller.metrics, sink.write_counter()) {
        tracing::warn!(error = %e, "some of haptor run's metric families are not registered");
    }
    let status_writes = run_metrics.status_writes.clone();

    let config_task = crate::drivers::kube::config::spawn(
        client.clone(),
        namespace.clone(),
        options.config_name.clone(),
        resources,
        leader_rx.clone(),
        ConfigChannels {
            configs: config_tx,
            seen: seen_tx,
        },
        ConfigReporting {
            fanout: controller.services.fanout.clone(),
            introspection: controller.services.introspection.clone(),
            status_writes,
            invalid: run_metrics.config_invalid.clone(),
        },
    );
    let (regarding_tx, regarding_rx) = watch::channel(None);
    let (kube_events_tx, kube_events_rx) = mpsc::channel(256);
    let events_task = crate::drivers::kube::events::spawn(
        client.clone(),
        "haptor".into(),
        identity.clone(),
        regarding_rx,
        kube_events_rx,
    );
    let (secret_tx, secret_rx) = watch::channel(None);
    let (credentials_tx, credentials_rx) = watch::channel(DataplaneCredentials::default());
    let credentials_task =
        crate::drivers::kube::credentials::spawn(client.clone(), secret_rx, credentials_tx);
    let mut edges = Edges {
        client,
        namespace: namespace.clone(),
        identity: identity.clone(),
        leader: leader_tx,
        election: None,
        discovery: None,
        credentials: credentials_rx,
        instances: instances_tx,
        haproxy_version: options.haproxy_version,
    };

    tracing::info!(
        namespace = %namespace, config = %options.config_name, identity = %identity,
        health = %options.health_addr, debug = %options.debug_addr, metrics = %options.metrics_addr,
        "haptor run: started"
    );
    let mut external = controller
        .external_events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    let mut accepted = config_rx;
    let mut ready_logged = false;
    let mut ticker = tokio::time::interval(READY_POLL);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            // A config read is handled before the events its verdict produces.
            biased;
            () = &mut shutdown => break,
            changed = seen.changed() => {
                if changed.is_err() {
                    break;
                }
                let Some(config) = seen.borrow_and_update().clone() else { continue };
                // Even an invalid first config elects a leader, which writes its status.
                edges.start_election_once(&config.spec.leader_election);
                let _ = regarding_tx.send_replace(Some(config.object_ref(&())));
            }
            changed = accepted.changed() => {
                if changed.is_err() {
                    break;
                }
                let Some(config) = accepted.borrow_and_update().clone() else { continue };
                edges.apply(&config);
                let _ = secret_tx.send_replace(config.spec.credentials_secret_ref.as_ref().map(|r| SecretName {
                    namespace: r.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| namespace.clone()),
                    name: r.name.clone(),
                }));
                // The HAProxyCfg is owned by the config (garbage-collected with it).
                if let Some(owner) = config.controller_owner_ref(&()) {
                    sink.set_owner(owner);
                }
            }
            event = next_event(&mut external) => {
                match event {
                    Some(event) => {
                        if let EventKind::DeploymentFenced { epoch, .. } = &event.kind {
                            edges.fenced(*epoch);
                        }
                        // A full queue drops the event: Kubernetes Events are best effort.
                        let _ = kube_events_tx.try_send(event);
                    }
                    None => external = None,
                }
            }
            _ = ticker.tick() => {
                let behind = controller.services.introspection.state().instances_behind().len();
                run_metrics.instances_behind.set(i64::try_from(behind).unwrap_or(i64::MAX));
                if !ready_logged && controller.services.readiness.is_ready() {
                    ready_logged = true;
                    tracing::info!("haptor run: ready (the config is valid and every watched resource synced; /readyz answers 200)");
                }
            }
        }
    }
    tracing::info!("haptor run: stopping");
    controller.stop().await;
    edges.shutdown().await;
    for task in [
        config_task,
        events_task,
        credentials_task,
        sink_task,
        ingress_status_task,
    ]
    .into_iter()
    .chain(certificate_task)
    {
        task.abort();
    }
    Ok(())
}

async fn next_event(external: &mut Option<mpsc::Receiver<ObservedEvent>>) -> Option<ObservedEvent> {
    match external {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// How this replica leads.
enum Election {
    Lease {
        elector: LeaseElector,
        settings: LeaderElectionSettings,
    },
    /// `leaderElection.enabled: false`: leading, at this epoch.
    Always {
        epoch: u64,
        settings: LeaderElectionSettings,
    },
}

/// The edges the config configures: election, pod discovery.
struct Edges {
    client: Client,
    namespace: String,
    identity: String,
    leader: watch::Sender<Leadership>,
    election: Option<Election>,
    discovery: Option<(
        PodDiscovery,
        tokio::task::JoinHandle<()>,
        tokio::task::JoinHandle<()>,
    )>,
    credentials: watch::Receiver<DataplaneCredentials>,
    instances: watch::Sender<Vec<Instance>>,
    /// The HAProxy version every pod must report (renders are validated for it).
    haproxy_version: HaproxyVersion,
}

/// What a pod discovery watches (compared to see whether it must restart).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodDiscovery {
    match_labels: std::collections::BTreeMap<String, String>,
    port: u16,
    credentials_required: bool,
}

impl Edges {
    /// Applies a valid config to the election and the pod discovery.
    fn apply(&mut self, config: &HAProxyTemplateConfig) {
        self.start_election_once(&config.spec.leader_election);
        let wanted = config.spec.pod_selector.as_ref().map(|s| PodDiscovery {
            match_labels: s.match_labels.clone(),
            port: config.spec.dataplane.port,
            credentials_required: config.spec.credentials_secret_ref.is_some(),
        });
        let wanted = wanted.filter(|w| !w.match_labels.is_empty());
        if self.discovery.as_ref().map(|(d, _, _)| d) == wanted.as_ref() {
            return;
        }
        if let Some((_, watch_task, bridge)) = self.discovery.take() {
            watch_task.abort();
            bridge.abort();
        }
        let Some(wanted) = wanted else {
            tracing::warn!(
                "the config has no podSelector with matchLabels; no HAProxy pod is deployed to"
            );
            let _ = self.instances.send_replace(Vec::new());
            return;
        };
        let (discovered_tx, mut discovered_rx) = watch::channel(Discovered {
            endpoints: Vec::new(),
            instances: Vec::new(),
        });
        let watch_task = crate::drivers::kube::discovery::spawn(
            self.client.clone(),
            PodDiscoverySettings {
                namespace: self.namespace.clone(),
                match_labels: wanted.match_labels.clone(),
                port: wanted.port,
                credentials_required: wanted.credentials_required,
                haproxy_version: Some(self.haproxy_version),
            },
            self.credentials.clone(),
            discovered_tx,
        );
        let instances = self.instances.clone();
        let bridge = tokio::spawn(async move {
            while discovered_rx.changed().await.is_ok() {
                let now = discovered_rx.borrow_and_update().instances.clone();
                let _ = instances.send_replace(now);
            }
        });
        self.discovery = Some((wanted, watch_task, bridge));
    }

    /// Starts the election on the first config read; a later change of its settings is
    /// logged as needing a restart.
    fn start_election_once(&mut self, settings: &LeaderElectionSettings) {
        match &self.election {
            None => self.start_election(settings),
            Some(
                Election::Lease {
                    settings: started, ..
                }
                | Election::Always {
                    settings: started, ..
                },
            ) => {
                if started != settings {
                    tracing::warn!(
                        "spec.leaderElection changed; it applies when haptor restarts (changing the Lease of a running replica could make two leaders)"
                    );
                }
            }
        }
    }

    fn start_election(&mut self, settings: &LeaderElectionSettings) {
        if !settings.enabled {
            tracing::info!(
                "leader election disabled: this replica always leads (run one replica only)"
            );
            let leadership = always_leader(0);
            let _ = self.leader.send_replace(leadership);
            self.election = Some(Election::Always {
                epoch: leadership.epoch,
                settings: settings.clone(),
            });
            return;
        }
        let options = ElectorOptions {
            namespace: self.namespace.clone(),
            settings: settings.clone(),
            identity: self.identity.clone(),
            highest_target_epoch: 0,
        };
        match LeaseElector::start(self.client.clone(), options, self.leader.clone()) {
            Ok(elector) => {
                self.election = Some(Election::Lease {
                    elector,
                    settings: settings.clone(),
                })
            }
            Err(e) => {
                tracing::error!(error = %e, "leader election cannot start; this replica does not lead until the config's leaderElection is fixed and haptor restarts")
            }
        }
    }

    /// A target holds `epoch`, above the one this replica deployed with.
    fn fenced(&mut self, epoch: u64) {
        match &mut self.election {
            Some(Election::Lease { elector, .. }) => elector.raise_epoch_floor(epoch),
            Some(Election::Always { epoch: current, .. }) if *current <= epoch => {
                *current = epoch.saturating_add(1);
                tracing::warn!(
                    epoch = *current,
                    "an instance holds a newer epoch (an earlier haptor's); leading on above it"
                );
                let _ = self.leader.send_replace(Leadership {
                    is_leader: true,
                    epoch: *current,
                });
            }
            _ => {}
        }
    }

    async fn shutdown(&mut self) {
        if let Some((_, watch_task, bridge)) = self.discovery.take() {
            watch_task.abort();
            bridge.abort();
        }
        if let Some(Election::Lease { elector, .. }) = self.election.take()
            && let Err(e) = elector.shutdown().await
        {
            tracing::warn!(error = %e, "the Lease was not released; it expires on its own");
        }
    }
}
