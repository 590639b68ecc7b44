//! One reconciliation's actor overhead: from a resource event entering the in-memory source
//! to the deploy target being called, through source task → ResourceWatcher → Reconciler →
//! Coordinator (render step on the blocking pool) → DeployScheduler → Deployer → target,
//! with a pipeline that does nothing. The reference, measured in the same run, is the same
//! number of hops through plain tokio channels and one `spawn_blocking`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::future::BoxFuture;
use haptor::actors::context::{ControllerSettings, Sources};
use haptor::actors::controller::{ServerAddresses, start_controller};
use haptor::drivers::memory_source::MemorySource;
use haptor::messages::deploy::{RenderFailure, RenderedAndValidated};
use haptor::messages::{Instance, Leadership};
use haptor::pure::config::config_from_yaml;
use haptor::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget};
use haptor::pure::pipeline::CompiledConfig;
use haptor::pure::rendered::{Checksum, RenderedConfig};
use haptor::pure::store::StoresSnapshot;
use haptor::seams::InMemorySink;
use haptor::seams::ReconcilePipeline;
use serde_json::json;
use tokio::sync::{mpsc, watch};

const CONFIG: &str = r#"
apiVersion: haptor.dev/v1alpha1
kind: HAProxyTemplateConfig
metadata: {name: bench}
spec:
  dataplane: {minDeploymentInterval: 0s, driftPreventionInterval: 1h}
  watchedResources:
    services: {apiVersion: v1, resources: services, indexBy: ["metadata.name"], debounce: 0s}
  haproxyConfig: {template: "global\n"}
"#;

/// Renders nothing: every run returns a new checksum so every run deploys.
#[derive(Default)]
struct NoopPipeline {
    runs: std::sync::atomic::AtomicU64,
}

impl ReconcilePipeline for NoopPipeline {
    fn run(
        &self,
        _: &CompiledConfig,
        _: StoresSnapshot,
    ) -> Result<RenderedAndValidated, RenderFailure> {
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(RenderedAndValidated {
            rendered: Arc::new(RenderedConfig::default()),
            checksum: Checksum::of(&n.to_be_bytes()),
            render_time: Duration::ZERO,
            validate_time: Duration::ZERO,
            cache_hit: false,
            semantic_skipped: false,
        })
    }
}

/// Signals every deployment on a channel.
#[derive(Debug)]
struct SignallingTarget {
    deployed: mpsc::UnboundedSender<()>,
}

impl DeployTarget for SignallingTarget {
    fn name(&self) -> &str {
        "bench"
    }
    fn deploy<'a>(
        &'a self,
        _: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        let _ = self.deployed.send(());
        Box::pin(async { Ok(DeployOutcome::default()) })
    }
    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        Box::pin(async { Ok(None) })
    }
}

fn reconciliation(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let source = MemorySource::new();
    let (tx, mut deployed) = mpsc::unbounded_channel();
    let controller = runtime.block_on(async {
        let config = Arc::new(config_from_yaml("bench.yaml", CONFIG).expect("config"));
        let (_config_tx, config_rx) = watch::channel(Some(config));
        let (_leader_tx, leader_rx) = watch::channel(Leadership {
            is_leader: true,
            epoch: 1,
        });
        let target = Arc::new(SignallingTarget { deployed: tx });
        let (_instances_tx, instances_rx) = watch::channel(vec![Instance {
            name: "bench".into(),
            target,
        }]);
        let sources = Sources {
            config: config_rx,
            resources: Arc::new(source.clone()),
            leadership: leader_rx,
            instances: instances_rx,
            http: std::sync::Arc::new(
                haptor::drivers::http_resource::HttpResourceFetcher::new(std::sync::Arc::new(
                    haptor::drivers::http_resource::NoCredentials,
                ))
                .expect("the HTTP client builds"),
            ),
        };
        // Keep the senders alive for the whole bench.
        std::mem::forget((_config_tx, _leader_tx, _instances_tx));
        let controller = start_controller(
            sources,
            Arc::new(NoopPipeline::default()),
            Arc::new(InMemorySink::default()),
            ControllerSettings::default(),
            ServerAddresses::default(),
            haptor::actors::controller::ControllerEdges::default(),
            None,
        )
        .await
        .expect("starts");
        deployed.recv().await.expect("the initial deployment");
        controller
    });

    let mut group = c.benchmark_group("reconciliation_actor_overhead");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let mut n = 0u64;
    group.bench_function("event_to_deploy_through_actors", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    source.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{n}")}}));
                    deployed.recv().await.expect("a deployment");
                }
                started.elapsed()
            })
        })
    });

    // Reference: 6 channel hops and one spawn_blocking, the same shape without actors.
    group.bench_function("reference_six_channel_hops", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let (first_tx, mut rx) = mpsc::unbounded_channel::<u64>();
                let mut senders = Vec::new();
                for hop in 0..5 {
                    let (next_tx, next_rx) = mpsc::unbounded_channel::<u64>();
                    let mut this_rx = std::mem::replace(&mut rx, next_rx);
                    senders.push(tokio::spawn(async move {
                        while let Some(v) = this_rx.recv().await {
                            // The third hop stands for the coordinator's blocking render step.
                            let v = if hop == 2 {
                                tokio::task::spawn_blocking(move || v).await.unwrap_or(v)
                            } else {
                                v
                            };
                            if next_tx.send(v).is_err() {
                                return;
                            }
                        }
                    }));
                }
                let started = Instant::now();
                for i in 0..iters {
                    first_tx.send(i).expect("send");
                    rx.recv().await.expect("arrives");
                }
                started.elapsed()
            })
        })
    });
    group.finish();
    runtime.block_on(controller.stop());
}

criterion_group!(benches, reconciliation);
criterion_main!(benches);
