//! `haptor run`: the in-cluster controller. The actor tree is the one `haptor local` runs;
//! only its edges differ, and they are the Kubernetes drivers of `crate::drivers::kube`,
//! each run by a supervised actor of the tree ([`edges`]: restarted with backoff when its
//! task ends or panics, counted in `haptor_actor_restarts_total`, listed in
//! `/debug/actors`):
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
//! The Events, Ingress status and `HAProxyCfg` writers run only while this replica leads
//! (the root's `leader-only-edges` subtree). A deployment refused for an older epoch raises
//! the epoch floor: the next Lease term is above it, and an always-leading replica moves its
//! epoch above it at once. SIGTERM first turns /readyz to 503 for `--shutdown-delay` (5 s)
//! while everything serves on, so the pod leaves the Services' rules before it stops
//! listening; then it stops the config iteration (a deployment in flight gets its
//! `deploymentTimeout`), then the rest of the tree, whose election edge releases the
//! Lease so a successor leads at its next retry, and exits 0.

pub mod edges;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Config, Resource};
use tokio::sync::{mpsc, watch};

use crate::actors::context::{ControllerSettings, Sources};
use crate::actors::controller::{ControllerEdges, ServerAddresses, start_controller};
use crate::actors::edge::EdgeTask;
use crate::drivers::kube::config::{ConfigChannels, ConfigReporting, status_writes_counter};
use crate::drivers::kube::credentials::SecretName;
use crate::drivers::kube::discovery::DataplaneCredentials;
use crate::drivers::kube::ingress_status::{IngressStatus, PublishAddress, WithIngressStatus};
use crate::drivers::kube::publish::KubePublishSink;
use crate::drivers::kube::resources::KubeResources;
use crate::drivers::pipeline::FullPipeline;
use crate::messages::{EventKind, Instance, Leadership, ObservedEvent};
use crate::pure::haproxy::HaproxyVersion;
use crate::supervision::ActorRole;
use crate::telemetry::LogLevelHandle;
use edges::EventsOutlet;

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
    /// `--default-certificate-secret`: the default TLS certificate's Secret of this name in
    /// haptor's namespace is created (self-signed) when it does not exist
    /// (`drivers::kube::default_certificate`).
    pub default_certificate_secret: Option<String>,
    /// Watch namespaced resources in this namespace only (`--watch-namespace`).
    pub watch_namespace: Option<String>,
    /// `--debug-fault-injection`: `POST /debug/actors/{name}/panic` makes the named edge's
    /// task panic (to see its supervision at work; off in production).
    pub fault_injection: bool,
    /// `--shutdown-delay`: after SIGTERM, /readyz answers 503 for this long while
    /// everything goes on serving, then haptor stops.
    pub shutdown_delay: Duration,
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
    /// The actor tree stopped without being asked to (a restart storm escalated to it).
    #[error("{0}")]
    TreeStopped(&'static str),
}

/// How often the run loop looks at readiness (to log it once).
const READY_POLL: Duration = Duration::from_millis(200);

/// The client configuration: the given kubeconfig, else kube's inference.
pub(crate) async fn kube_config(kubeconfig: Option<&PathBuf>) -> Result<Config, RunError> {
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
    // The client and the API server's URL, which every failure the drivers report names.
    let client = crate::drivers::kube::KubeApi::connect(config)
        .map_err(|e| RunError::Kubernetes(e.to_string()))?;
    let identity = options
        .identity
        .clone()
        .unwrap_or_else(crate::drivers::kube::lease::identity);

    let (config_tx, config_rx) = watch::channel(None);
    let (seen_tx, mut seen) = watch::channel(None);
    let (leader_tx, leader_rx) = watch::channel(Leadership::default());
    let (instances_tx, instances_rx) = watch::channel(Vec::<Instance>::new());
    let resources = KubeResources::in_namespace(client.clone(), options.watch_namespace.clone());
    // The HAProxyCfg and Ingress status writers are leader-only edges; the sinks keep the
    // latest publication for whichever writer runs.
    let sink = Arc::new(KubePublishSink::new(
        client.clone(),
        namespace.clone(),
        options.config_name.clone(),
        jiff::Timestamp::now,
    ));
    let ingress_status = IngressStatus::new();
    let publish_sink = Arc::new(WithIngressStatus {
        inner: sink.clone(),
        status: ingress_status.clone(),
    });
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
        http: Arc::new(
            crate::drivers::http_resource::HttpResourceFetcher::new(Arc::new(
                crate::drivers::kube::http_credentials::SecretCredentials {
                    client: client.clone(),
                    namespace: namespace.clone(),
                },
            ))
            .map_err(|e| RunError::Controller(format!("the HTTP resource client: {e}")))?,
        ),
    };
    let run_metrics =
        RunMetrics::new().map_err(|e| RunError::Controller(format!("metrics: {e}")))?;
    // The all-replica edges, started under the root once the tree runs.
    let mut edges: Vec<EdgeTask> = Vec::new();
    // The webhook: its certificate loads (and reloads) from files, or haptor issues it and
    // keeps it in a Secret; until one loads, TLS handshakes fail (and the API server applies
    // its failure policy), so /readyz waits for it.
    let mut webhook_certificate = None;
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
                    let watched = Arc::clone(&certificate);
                    edges.push(EdgeTask::new(
                        edges::names::WEBHOOK_CERTIFICATE,
                        move |_| {
                            Arc::clone(&watched).spawn_watch(CERTIFICATE_POLL, reloads.clone())
                        },
                    ));
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
                    let (client, served, readiness) = (
                        client.client.clone(),
                        Arc::clone(&certificate),
                        Arc::clone(&readiness),
                    );
                    edges.push(EdgeTask::new(
                        edges::names::WEBHOOK_CERTIFICATE,
                        move |_| {
                            let readiness = Arc::clone(&readiness);
                            crate::drivers::kube::webhook_issuer::spawn(
                                client.clone(),
                                issuer.clone(),
                                Arc::clone(&served),
                                Arc::new(move || readiness.get().is_some_and(|r| r.is_ready())),
                                reloads.clone(),
                            )
                        },
                    ));
                    certificate
                }
            };
            webhook_certificate = Some(Arc::clone(&certificate));
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
    // The leader-only edges: Kubernetes Events, Ingress status, the HAProxyCfg writer.
    let regarding_tx = watch::Sender::new(None);
    let events_outlet = EventsOutlet::default();
    let fault_injection = options
        .fault_injection
        .then(crate::actors::edge::FaultInjection::default);
    let reporter = kube::runtime::events::Reporter {
        controller: "haptor".into(),
        instance: Some(
            crate::pure::kube_events::truncate_to(
                &identity,
                crate::pure::kube_events::REPORTING_INSTANCE_LIMIT,
            )
            .to_string(),
        )
        .filter(|i| !i.is_empty()),
    };
    // The config watch's verdicts, which the leader's status writer writes.
    let (verdicts_tx, verdicts_rx) = watch::channel(None);
    let leader_only = {
        let writer = sink.clone();
        let config_status = {
            let (client, namespace, writes, verdicts) = (
                client.clone(),
                namespace.clone(),
                run_metrics.status_writes.clone(),
                verdicts_rx.clone(),
            );
            EdgeTask::new(edges::names::CONFIG_STATUS, move |_| {
                crate::drivers::kube::config::spawn_status_writer(
                    client.clone(),
                    namespace.clone(),
                    verdicts.clone(),
                    writes.clone(),
                )
            })
        };
        let status = ingress_status.clone();
        let (client, publish, leadership) =
            (client.clone(), options.publish.clone(), leader_rx.clone());
        vec![
            config_status,
            events_outlet.edge(
                client.clone(),
                identity.clone(),
                regarding_tx.clone(),
                verdicts_rx.clone(),
            ),
            EdgeTask::new(edges::names::INGRESS_STATUS, move |_| {
                status.start_writer(
                    client.clone(),
                    reporter.clone(),
                    publish.clone(),
                    leadership.clone(),
                )
            }),
            EdgeTask::new(edges::names::HAPROXYCFG, move |_| writer.start_writer()),
        ]
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
        ControllerEdges {
            leader_only: leader_only
                .into_iter()
                .map(|e| {
                    e.with_faults(fault_injection.clone())
                        .spec(ActorRole::LeaderOnly)
                })
                .collect(),
            fault_injection: fault_injection.clone(),
        },
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
    if webhook_certificate.is_some() {
        controller
            .services
            .readiness
            .update(|r| r.webhook_certificate_awaited());
    }
    if let Err(e) = run_metrics.register(&controller.metrics, sink.write_counter()) {
        tracing::warn!(error = %e, "some of haptor run's metric families are not registered");
    }

    // The all-replica edges: the config, the credentials, the election, pod discovery.
    let (floor_tx, floor_rx) = watch::channel(0u64);
    let (secret_tx, secret_rx) = watch::channel(None);
    let (credentials_tx, credentials_rx) = watch::channel(DataplaneCredentials::default());
    {
        let reporting = ConfigReporting {
            fanout: controller.services.fanout.clone(),
            introspection: controller.services.introspection.clone(),
            status_writes: run_metrics.status_writes.clone(),
            invalid: run_metrics.config_invalid.clone(),
        };
        let (client, namespace, name) = (
            client.clone(),
            namespace.clone(),
            options.config_name.clone(),
        );
        edges.insert(
            0,
            EdgeTask::new(edges::names::CONFIG, move |_| {
                crate::drivers::kube::config::spawn(
                    client.clone(),
                    namespace.clone(),
                    name.clone(),
                    resources.clone(),
                    ConfigChannels {
                        configs: config_tx.clone(),
                        seen: seen_tx.clone(),
                        verdicts: verdicts_tx.clone(),
                    },
                    reporting.clone(),
                )
            }),
        );
    }
    {
        let client = client.clone();
        edges.push(EdgeTask::new(edges::names::CREDENTIALS, move |_| {
            crate::drivers::kube::credentials::spawn(
                client.clone(),
                secret_rx.clone(),
                credentials_tx.clone(),
            )
        }));
    }
    if let Some(name) = options.create_credentials_secret.clone() {
        // Creates the Data Plane API credentials Secret once when it is missing; done once
        // it exists (created, or found).
        let (client, namespace) = (client.client.clone(), namespace.clone());
        edges.push(EdgeTask::one_shot(
            edges::names::CREDENTIALS_SECRET,
            move |_| {
                crate::drivers::kube::dataplane_secret::spawn(
                    client.clone(),
                    crate::drivers::kube::dataplane_secret::CredentialsSecret {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    },
                )
            },
        ));
    }
    if let Some(name) = options.default_certificate_secret.clone() {
        // Creates the default certificate's Secret once when it is missing.
        let (client, namespace) = (client.client.clone(), namespace.clone());
        edges.push(EdgeTask::one_shot(
            edges::names::DEFAULT_CERTIFICATE,
            move |_| {
                crate::drivers::kube::default_certificate::spawn(
                    client.clone(),
                    namespace.clone(),
                    name.clone(),
                )
            },
        ));
    }
    edges.push(
        edges::Election {
            client: client.clone(),
            namespace: namespace.clone(),
            identity: identity.clone(),
            seen: seen.clone(),
            leader: leader_tx,
            floor: floor_rx,
        }
        .edge(),
    );
    edges.push(
        edges::PodDiscovery {
            client: client.clone(),
            namespace: namespace.clone(),
            haproxy_version: options.haproxy_version,
            accepted: config_rx.clone(),
            credentials: credentials_rx,
            instances: instances_tx,
        }
        .edge(),
    );
    for edge in edges {
        controller
            .start_edge(
                edge.with_faults(fault_injection.clone())
                    .spec(ActorRole::AllReplica),
            )
            .await
            .map_err(RunError::Controller)?;
    }

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
    let mut tree_stopped = false;
    loop {
        tokio::select! {
            // A config read is handled before the events its verdict produces.
            biased;
            () = &mut shutdown => break,
            () = controller.stopped() => {
                tree_stopped = true;
                break;
            }
            changed = seen.changed() => {
                if changed.is_err() {
                    break;
                }
                let Some(config) = seen.borrow_and_update().clone() else { continue };
                let _ = regarding_tx.send_replace(Some(config.object_ref(&())));
            }
            changed = accepted.changed() => {
                if changed.is_err() {
                    break;
                }
                let Some(config) = accepted.borrow_and_update().clone() else { continue };
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
                            // The election's next term (or an always-leader's epoch) goes
                            // above it.
                            floor_tx.send_if_modified(|floor| {
                                let raised = *epoch > *floor;
                                *floor = (*floor).max(*epoch);
                                raised
                            });
                        }
                        events_outlet.send(event);
                    }
                    None => external = None,
                }
            }
            _ = ticker.tick() => {
                // Loaded once is enough: a rotation that does not load keeps the loaded pair.
                if webhook_certificate.as_ref().is_some_and(|c| c.is_loaded()) {
                    controller.services.readiness.update(|r| r.webhook_certificate_loaded());
                    webhook_certificate = None;
                }
                let behind = controller.services.introspection.state().instances_behind().len();
                run_metrics.instances_behind.set(i64::try_from(behind).unwrap_or(i64::MAX));
                if !ready_logged && controller.services.readiness.is_ready() {
                    ready_logged = true;
                    tracing::info!("haptor run: ready (the config is valid and every watched resource synced; /readyz answers 200)");
                }
            }
        }
    }
    if !tree_stopped && !options.shutdown_delay.is_zero() {
        // Not ready, still serving: the pod's endpoint leaves the Services' rules before
        // anything stops listening (the webhook's callers included).
        controller.services.readiness.update(|r| r.shutting_down());
        tracing::info!(
            delay = ?options.shutdown_delay,
            "haptor run: SIGTERM: /readyz answers 503 and everything serves on for the shutdown delay, so that this pod leaves the Services first"
        );
        tokio::select! {
            () = tokio::time::sleep(options.shutdown_delay) => {}
            () = controller.stopped() => tree_stopped = true,
        }
    }
    tracing::info!("haptor run: stopping");
    // The config iteration first (a deployment in flight gets its deploymentTimeout), then
    // the rest of the tree: the election edge hands the Lease back as it stops, so a
    // successor leads at its next retry.
    let _ = ractor::call!(
        controller.root,
        crate::supervision::SupervisorMsg::StopChild,
        crate::actors::tree::CONFIG_ITERATION.to_string()
    );
    controller.stop().await;
    if tree_stopped {
        tracing::error!("{}", crate::actors::controller::TREE_STOPPED);
        return Err(RunError::TreeStopped(
            crate::actors::controller::TREE_STOPPED,
        ));
    }
    Ok(())
}

async fn next_event(external: &mut Option<mpsc::Receiver<ObservedEvent>>) -> Option<ObservedEvent> {
    match external {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}
