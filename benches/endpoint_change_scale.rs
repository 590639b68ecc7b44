//! The parts of an endpoint change at 10 000 Ingresses (with their Services and
//! EndpointSlices, one endpoint each) on the embedded Ingress library, in process and each
//! timed alone, so one run gives their ratios: the render (memo replay and the splice of
//! the server lines), the render's checksum (from the last render's file digests, as the
//! validator computes it), the plan from the last render, the published summary of the
//! auxiliary files (from the last digests too), `haproxy.cfg` as the local target writes it,
//! and the drop of the render the change replaced. No haproxy runs; `scripts/measure-scale` is the
//! end-to-end figure.
//!
//!   cargo bench --bench endpoint_change_scale [-- <objects> <changes>]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use haptor::drivers::local::{WorkDir, inject_local_settings};
use haptor::pure::checksum::{AuxDigests, FileDigests};
use haptor::pure::config::{AuxiliaryFileSummary, config_from_yaml};
use haptor::pure::deploy::plan::plan;
use haptor::pure::fixtures;
use haptor::pure::haproxy::HaproxyVersion;
use haptor::pure::pipeline::CompiledConfig;
use haptor::pure::rendered::RenderedConfig;

/// haptor's allocator (`src/main.rs`), so allocation costs are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The times of one part, summarised as the median and the 90th percentile.
#[derive(Default)]
struct Times(Vec<Duration>);

impl Times {
    fn time<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = work();
        self.0.push(started.elapsed());
        out
    }

    fn line(&mut self, name: &str) -> String {
        self.0.sort();
        let at = |q: usize| {
            self.0
                .get(self.0.len() * q / 100)
                .copied()
                .unwrap_or_default()
        };
        format!(
            "{name:<28} p50 {:>8.3} ms   p90 {:>8.3} ms",
            at(50).as_secs_f64() * 1e3,
            at(90).as_secs_f64() * 1e3
        )
    }
}

fn main() {
    // `cargo bench` passes `--bench`; numbers after it are the objects and the changes.
    let numbers: Vec<usize> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let objects = numbers.first().copied().unwrap_or(10_000);
    let changes = numbers.get(1).copied().unwrap_or(40);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/library/ingress.yaml");
    let text = std::fs::read_to_string(path).expect("the Ingress library");
    let config = config_from_yaml(path, &text).expect("parses");
    let compiled = CompiledConfig::compile(config.spec).expect("compiles");
    let stores = compiled.new_stores().expect("stores");
    fixtures::load_apps(&stores, objects, "haptor", 1).expect("applies");
    let slices = stores.get("endpointslices").expect("store").clone();
    let render = || {
        compiled
            .render(stores.snapshot(), None, HaproxyVersion::DEFAULT)
            .expect("renders")
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let work_dir = WorkDir::new(tmp.path()).expect("work dir");
    let mut previous: Arc<RenderedConfig> = Arc::new(render());
    let mut digests = FileDigests::of(&previous);
    println!(
        "{objects} objects: haproxy.cfg {} bytes, {} auxiliary files ({} bytes)",
        previous.haproxy_cfg.len(),
        previous.aux_files.len(),
        previous
            .aux_files
            .values()
            .map(|f| f.content.len())
            .sum::<usize>()
    );
    let [mut rendering, mut checksum, mut planning] = [(); 3].map(|()| Times::default());
    let [mut summary, mut local_text, mut dropping] = [(); 3].map(|()| Times::default());
    for change in 1..=changes {
        let n = (change * 37) % objects;
        // App n's one endpoint moves (what `scripts/measure-scale` does).
        let mut slice = fixtures::endpoint_slice(n, 1);
        slice["endpoints"][0]["addresses"][0] = format!("127.4.0.{}", change % 250 + 1).into();
        slices.apply(slice).expect("applies");
        let rendered = Arc::new(rendering.time(render));
        // As the validator computes it: from the last render's digests.
        let next = checksum.time(|| FileDigests::after(&rendered, Some((&previous, &digests))));
        black_box(next.checksum());
        let p = planning.time(|| plan(Some(&previous), &rendered).expect("plans"));
        assert!(!p.reload, "an endpoint change needs no reload: {p:?}");
        // As the publisher makes it: from the digests of the last render it published.
        black_box(summary.time(|| {
            let aux = AuxDigests::after(&rendered, Some((&previous, digests.aux())));
            AuxiliaryFileSummary::with_digests(&rendered, "/etc/haproxy", &aux)
        }));
        black_box(local_text.time(|| inject_local_settings(&rendered.haproxy_cfg, &work_dir)));
        digests = next;
        let old = std::mem::replace(&mut previous, rendered);
        dropping.time(|| drop(old));
    }
    println!("{changes} endpoint changes:");
    for (name, times) in [
        ("render (replay + splice)", &mut rendering),
        ("checksum", &mut checksum),
        ("plan", &mut planning),
        ("auxiliary file summary", &mut summary),
        ("local haproxy.cfg text", &mut local_text),
        ("drop of the last render", &mut dropping),
    ] {
        println!("  {}", times.line(name));
    }
}
