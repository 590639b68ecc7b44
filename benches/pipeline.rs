//! The render-and-validate pipeline at 1 000 Ingresses (with their Services and
//! EndpointSlices), on the example ingress config, against the reference measured in the
//! same run: `haproxy -c` on the very same rendered configuration.
//!
//! - `render_parse_schema`: after one EndpointSlice change (applied outside the timing), the
//!   template render + haptor's parser + schema check (what a reconciliation does before
//!   `haproxy -c`).
//! - `render_full`, `parse_schema_only`: the two parts on their own, for profiling. A full
//!   render: the context changes every iteration, so no template's memo applies.
//! - `render_unchanged`: the same snapshot rendered again; every template reuses its memo.
//! - `haproxy_c`: the semantic phase alone (real `haproxy -c`, no cache).
//! - `cache_hit`: a full `Validator::validate` of an already validated render.
//!
//! The ratio render_parse_schema / haproxy_c is the figure the issue tracks (target ≤ 25 %).
//!
//! `ingress_library_1000_ingresses` does the same for the embedded Ingress library
//! (`deploy/library/ingress.yaml`, what `haptor local` runs by default): render + parse +
//! schema after one EndpointSlice change, against `haproxy -c` on that render.
//!
//! `parse_1000_backends`: haptor's parser alone on a plain 30 000-line configuration of 1 000
//! backends with 27 servers each (`fixtures::haproxy_config_with_backends`; the
//! `haproxy_corpus` tests check what that parse yields).
//!
//! The haproxy is the test suite's (`drivers::haproxy_check::haproxy_binary`).

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, criterion_group, criterion_main};
use haptor::drivers::haproxy_check::{CheckerSettings, HaproxyChecker, haproxy_binary};
use haptor::pure::config::config_from_yaml;
use haptor::pure::fixtures;
use haptor::pure::haproxy::parse_config;
use haptor::pure::pipeline::{CompiledConfig, check_offline};
use haptor::pure::store::Stores;

const INGRESSES: usize = 1_000;

fn example() -> CompiledConfig {
    compiled(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/ingress/config.yaml"
    ))
}

fn compiled(path: &str) -> CompiledConfig {
    let text = std::fs::read_to_string(path).expect("example config");
    let config = config_from_yaml(path, &text).expect("parses");
    CompiledConfig::compile(config.spec).expect("compiles")
}

fn loaded_stores(config: &CompiledConfig) -> Stores {
    let stores = config.new_stores().expect("stores");
    fixtures::load_apps(&stores, INGRESSES, "haptor", 3).expect("applies");
    stores
}

/// `render_parse_schema`: render + parser + schema check, each iteration after one
/// EndpointSlice change (applied outside the timing), as a reconciliation does.
fn bench_render_after_endpoint_change(
    group: &mut BenchmarkGroup<'_, WallTime>,
    config: &CompiledConfig,
    stores: &Stores,
) {
    let slices = stores.get("endpointslices").expect("store").clone();
    let mut change = 0usize;
    group.bench_function("render_parse_schema", |b| {
        b.iter_batched(
            || {
                change += 1;
                slices
                    .apply(fixtures::endpoint_slice(change % INGRESSES, 2 + change % 3))
                    .expect("applies");
            },
            |()| {
                let rendered = config
                    .render(
                        stores.snapshot(),
                        None,
                        haptor::pure::haproxy::HaproxyVersion::DEFAULT,
                    )
                    .expect("renders");
                black_box(check_offline(&rendered).expect("valid"));
            },
            BatchSize::PerIteration,
        )
    });
}

fn pipeline(c: &mut Criterion) {
    let config = example();
    let stores = loaded_stores(&config);
    let rendered = config
        .render(
            stores.snapshot(),
            None,
            haptor::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let checker = checker();
    checker
        .check_blocking(&rendered)
        .expect("the 1 000-ingress render is valid");

    let mut group = c.benchmark_group("pipeline_1000_ingresses");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    bench_render_after_endpoint_change(&mut group, &config, &stores);
    let extra = config.spec.extra_context.clone().unwrap_or_default();
    let mut round = 0u64;
    group.bench_function("render_full", |b| {
        b.iter(|| {
            round += 1;
            let mut context = extra.clone();
            if let Some(values) = context.as_object_mut() {
                values.insert("bench_round".into(), round.into());
            }
            black_box(
                config
                    .render(
                        stores.snapshot(),
                        Some(&context),
                        haptor::pure::haproxy::HaproxyVersion::DEFAULT,
                    )
                    .expect("renders"),
            )
        })
    });
    group.bench_function("render_unchanged", |b| {
        b.iter(|| {
            black_box(
                config
                    .render(
                        stores.snapshot(),
                        None,
                        haptor::pure::haproxy::HaproxyVersion::DEFAULT,
                    )
                    .expect("renders"),
            )
        })
    });
    group.bench_function("parse_schema_only", |b| {
        b.iter(|| black_box(check_offline(&rendered).expect("valid")))
    });
    group.bench_function("haproxy_c", |b| {
        b.iter(|| black_box(checker.check_blocking(&rendered).expect("valid")))
    });
    let validator = haptor::drivers::haproxy_check::validator(haproxy_binary(), 4);
    validator.validate(rendered.clone()).expect("valid");
    group.bench_function("cache_hit", |b| {
        b.iter(|| {
            let validated = validator.validate(rendered.clone()).expect("valid");
            assert!(validated.from_cache);
            black_box(validated)
        })
    });
    group.finish();
}

fn ingress_library(c: &mut Criterion) {
    let config = compiled(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/library/ingress.yaml"
    ));
    let stores = loaded_stores(&config);
    let rendered = config
        .render(
            stores.snapshot(),
            None,
            haptor::pure::haproxy::HaproxyVersion::DEFAULT,
        )
        .expect("renders");
    let checker = checker();
    checker
        .check_blocking(&rendered)
        .expect("the library's 1 000-ingress render is valid");
    let mut group = c.benchmark_group("ingress_library_1000_ingresses");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    bench_render_after_endpoint_change(&mut group, &config, &stores);
    group.bench_function("haproxy_c", |b| {
        b.iter(|| black_box(checker.check_blocking(&rendered).expect("valid")))
    });
    group.finish();
}

fn parser(c: &mut Criterion) {
    let text = fixtures::haproxy_config_with_backends(1_000, 27);
    let mut group = c.benchmark_group("parser");
    group.sample_size(20);
    group.bench_function("parse_1000_backends", |b| {
        b.iter(|| black_box(parse_config(&text).expect("parses")))
    });
    group.finish();
}

/// `haproxy -c` with the suite's haproxy, no cache.
fn checker() -> HaproxyChecker {
    HaproxyChecker::new(CheckerSettings {
        binary: haproxy_binary(),
        ..CheckerSettings::default()
    })
}

criterion_group!(benches, pipeline, ingress_library, parser);
criterion_main!(benches);
