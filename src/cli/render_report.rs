//! `haptor render --trace / --profile / -o json` and `haptor bench`: a config's templates
//! compiled with the trace and profile hooks (`pure::template::report`), their report
//! printed for people or machines, and the render timed over many runs.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::offline::{load_config, load_fixture_dir, load_http_resources};
use super::{BenchArgs, EXIT_PROBLEMS, EXIT_UNUSABLE, OutputFormat};
use crate::output::{out, outln};
use crate::pure::pipeline::CompiledConfig;
use crate::pure::rendered::RenderedConfig;
use crate::pure::template::report::TimingSummary;
use crate::pure::template::{Instrument, RenderReport};

pub(super) fn instrument_for(trace: bool, profile: bool) -> Instrument {
    Instrument { trace, profile }
}

/// Compiles the config's templates again with the hooks `what` asks for (none: nothing).
pub(super) fn instrument(
    compiled: &mut CompiledConfig,
    what: Instrument,
    file: &Path,
) -> Result<(), ExitCode> {
    if !what.any() {
        return Ok(());
    }
    compiled.instrument(what).map_err(|e| {
        eprintln!("{}: {e}", file.display());
        ExitCode::from(EXIT_PROBLEMS)
    })
}

/// What `render` prints besides (or instead of) the files: the trace and the profile of
/// an instrumented render, or everything as one JSON object with `-o json`.
pub(super) fn print(
    compiled: &CompiledConfig,
    rendered: &RenderedConfig,
    format: OutputFormat,
) -> Result<(), ExitCode> {
    let report = compiled.templates.take_report().unwrap_or_default();
    match format {
        OutputFormat::Summary => {
            if let Some(trace) = &report.trace {
                out!("{}", trace.to_text());
            }
            if let Some(profile) = &report.profile {
                if report.trace.is_some() {
                    outln!();
                }
                out!("{}", profile.to_text());
            }
            Ok(())
        }
        OutputFormat::Json => {
            let value = rendered_json(rendered, &report);
            match serde_json::to_string_pretty(&value) {
                Ok(text) => {
                    outln!("{text}");
                    Ok(())
                }
                Err(e) => {
                    eprintln!("haptor render: cannot serialise the output: {e}");
                    Err(ExitCode::from(EXIT_UNUSABLE))
                }
            }
        }
    }
}

/// `{"haproxy.cfg": TEXT, "files": {PATH: TEXT}, "trace": ..., "profile": ...}`.
fn rendered_json(rendered: &RenderedConfig, report: &RenderReport) -> Value {
    let files: serde_json::Map<String, Value> = rendered
        .aux_files
        .iter()
        .map(|(path, file)| (path.clone(), file.content.clone().into()))
        .collect();
    let mut value = json!({ "haproxy.cfg": rendered.haproxy_cfg, "files": files });
    if let Some(object) = value.as_object_mut() {
        if let Some(trace) = &report.trace {
            object.insert("trace".into(), trace.to_json());
        }
        if let Some(profile) = &report.profile {
            object.insert("profile".into(), profile.to_json());
        }
    }
    value
}

/// `haptor bench`: loads the config and fixtures as `render` does, renders `--warmup`
/// times, then `--iterations` times, each a first, full render (no memo of the one before
/// is reused), and prints the distribution of the timed renders.
pub fn bench(args: &BenchArgs) -> ExitCode {
    let (_, mut compiled) = match load_config(&args.file) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let what = instrument_for(args.trace, args.profile);
    if let Err(code) = instrument(&mut compiled, what, &args.file) {
        return code;
    }
    let stores = match compiled.new_stores() {
        Ok(stores) => stores,
        Err(e) => {
            eprintln!("{}: {e}", args.file.display());
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    if let Err(e) = load_http_resources(&compiled, &stores, &args.http_resources) {
        eprintln!("{e}");
        return ExitCode::from(EXIT_UNUSABLE);
    }
    if let Some(dir) = &args.fixtures {
        match load_fixture_dir(&compiled, &stores, dir) {
            Ok(problems) => {
                for problem in &problems {
                    eprintln!("{problem}");
                }
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    }
    let target = args.versions.target(&args.haproxy_bin);
    let snapshot = stores.snapshot();
    let mut samples = Vec::new();
    let mut last = None;
    for run in 0..args.warmup.saturating_add(args.iterations) {
        compiled.templates.forget_last_render();
        let started = Instant::now();
        let rendered = compiled.render(snapshot.clone(), None, target);
        // Collecting the report is part of an instrumented render's cost.
        let report = compiled.templates.take_report();
        let spent = started.elapsed();
        match rendered {
            Ok(rendered) => last = Some(rendered),
            Err(e) => {
                eprintln!("{}: {e}", args.file.display());
                return ExitCode::from(EXIT_PROBLEMS);
            }
        }
        drop(report);
        if run >= args.warmup {
            samples.push(spent);
        }
    }
    let Some(summary) = TimingSummary::of(&samples) else {
        eprintln!("haptor bench: no render was timed");
        return ExitCode::from(EXIT_UNUSABLE);
    };
    let (lines, files) = last.as_ref().map_or((0, 0), |rendered| {
        (
            rendered.haproxy_cfg.lines().count(),
            rendered.aux_files.len(),
        )
    });
    let hooks = match (what.trace, what.profile) {
        (true, true) => "traced and profiled",
        (true, false) => "traced",
        (false, true) => "profiled",
        (false, false) => "plain",
    };
    match args.output {
        OutputFormat::Summary => {
            outln!(
                "{}: {} {hooks} renders after {} not timed, each a first, full render",
                args.file.display(),
                summary.count,
                args.warmup
            );
            outln!("output: haproxy.cfg of {lines} lines and {files} other files");
            out!("{}", summary.to_text());
        }
        OutputFormat::Json => {
            let mut value = summary.to_json();
            if let Some(object) = value.as_object_mut() {
                object.insert("warmup".into(), args.warmup.into());
                object.insert("trace".into(), what.trace.into());
                object.insert("profile".into(), what.profile.into());
                object.insert("haproxy_cfg_lines".into(), lines.into());
                object.insert("files".into(), files.into());
                object.insert(
                    "samples_ms".into(),
                    samples
                        .iter()
                        .copied()
                        .map(millis)
                        .collect::<Vec<_>>()
                        .into(),
                );
            }
            outln!("{value}");
        }
    }
    ExitCode::SUCCESS
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
