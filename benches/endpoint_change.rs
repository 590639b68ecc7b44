//! An endpoint change at 1 000 backends, end to end through the real parts: an EndpointSlice
//! update enters the resource source, goes through watcher → reconciler → coordinator
//! (render, parser, schema; `haproxy -c` is skipped for a runtime-only change) → scheduler →
//! deployer → the local target, which applies it with the runtime API of a real haproxy.
//! Each iteration ends when the target's deploy returns (the runtime API acknowledged the
//! change). The reference measured in the same run is `haproxy -c` on the same
//! configuration, what every change would cost if it were validated and reloaded.
//!
//! The haproxy and the frontend's port come from the test suite's helpers
//! (`tests/support`): the one haproxy binary the suite runs, and a port below the ephemeral
//! range, so no socket given an ephemeral port can take it between its choice and haproxy
//! binding it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::future::BoxFuture;
use haptor::actors::context::{ControllerSettings, Sources};
use haptor::actors::controller::{ServerAddresses, start_controller};
use haptor::drivers::haproxy_check::{CheckerSettings, HaproxyChecker};
use haptor::drivers::local::{HaproxyProcess, LocalTarget, WorkDir};
use haptor::drivers::memory_source::MemorySource;
use haptor::drivers::pipeline::FullPipeline;
use haptor::messages::{Instance, Leadership};
use haptor::pure::config::config_from_yaml;
use haptor::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget};
use haptor::pure::fixtures;
use haptor::pure::rendered::Checksum;
use haptor::seams::InMemorySink;
use tokio::sync::{mpsc, watch};

#[path = "../tests/support/mod.rs"]
mod support;
use support::{free_port, haproxy_binary};

const BACKENDS: usize = 1_000;

/// Passes deployments on to the local target and reports each outcome.
#[derive(Debug)]
struct Reporting {
    inner: Arc<LocalTarget>,
    done: mpsc::UnboundedSender<DeployOutcome>,
}

impl DeployTarget for Reporting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        Box::pin(async move {
            let outcome = self.inner.deploy(request).await?;
            let _ = self.done.send(outcome.clone());
            Ok(outcome)
        })
    }
    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        self.inner.deployed_checksum()
    }
}

fn endpoint_change(c: &mut Criterion) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/ingress/config.yaml"
    ))
    .expect("example")
    .replace("127.0.0.1:18080", &format!("127.0.0.1:{port}"))
    .replace("minDeploymentInterval: 2s", "minDeploymentInterval: 0s");
    let config = Arc::new(config_from_yaml("example", &text).expect("config"));
    let source = MemorySource::new();
    for n in 0..BACKENDS {
        source.apply(fixtures::ingress(n, "haptor"));
        source.apply(fixtures::service(n));
        source.apply(fixtures::endpoint_slice(n, 3));
    }
    let work = WorkDir::new(tmp.path().join("work")).expect("work dir");
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let (controller, mut process) = runtime.block_on(async {
        let process = HaproxyProcess::start(haproxy_binary(), &work)
            .await
            .expect("haproxy starts");
        let target = Arc::new(Reporting {
            inner: Arc::new(LocalTarget::open("bench", work.clone()).expect("target")),
            done: done_tx,
        });
        let (config_tx, config_rx) = watch::channel(Some(config));
        let (leader_tx, leader_rx) = watch::channel(Leadership {
            is_leader: true,
            epoch: 1,
        });
        let (instances_tx, instances_rx) = watch::channel(vec![Instance {
            name: "bench".into(),
            target,
        }]);
        std::mem::forget((config_tx, leader_tx, instances_tx));
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
        let controller = start_controller(
            sources,
            Arc::new(FullPipeline::new(
                haptor::drivers::haproxy_check::validator(haproxy_binary(), 8),
            )),
            Arc::new(InMemorySink::default()),
            ControllerSettings::default(),
            ServerAddresses::default(),
            haptor::actors::controller::ControllerEdges::default(),
            None,
        )
        .await
        .expect("controller starts");
        let first = tokio::time::timeout(Duration::from_secs(120), done.recv())
            .await
            .expect("first deployment")
            .expect("outcome");
        assert!(
            first.reloaded,
            "the first deployment loads the 1 000 backends"
        );
        (controller, process)
    });

    let rendered = controller
        .services
        .introspection
        .rendered()
        .expect("a render");
    let checker = HaproxyChecker::new(CheckerSettings {
        binary: haproxy_binary(),
        ..CheckerSettings::default()
    });
    let mut group = c.benchmark_group("endpoint_change_1000_backends");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    let mut n = 0usize;
    // Criterion reports each sample as the mean of its iterations; the target is a
    // median of single events, so every event's latency is kept too and summarised below.
    let mut latencies: Vec<Duration> = Vec::new();
    group.bench_function("event_to_runtime_api_ack", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    // Move one backend's endpoints within its reserved slots: every slice starts
                    // with 3 endpoints, then alternates between 1 and 2, so each apply changes it.
                    let endpoints = 1 + (n / BACKENDS) % 2;
                    let started = Instant::now();
                    source.apply(fixtures::endpoint_slice(n % BACKENDS, endpoints));
                    let outcome = done.recv().await.expect("a deployment");
                    let latency = started.elapsed();
                    latencies.push(latency);
                    total += latency;
                    assert!(!outcome.reloaded, "an endpoint change must not reload");
                }
                total
            })
        })
    });
    group.bench_function("reference_haproxy_c_same_config", |b| {
        b.iter(|| checker.check_blocking(&rendered).expect("valid"))
    });
    group.finish();
    if !latencies.is_empty() {
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        eprintln!(
            "endpoint change at {BACKENDS} backends, {} single events: p50 {:.2?}, p90 {:.2?}, p99 {:.2?}, max {:.2?}",
            latencies.len(),
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0),
        );
    }
    runtime.block_on(async {
        controller.stop().await;
        let _ = process.stop().await;
    });
}

criterion_group!(benches, endpoint_change);
criterion_main!(benches);
