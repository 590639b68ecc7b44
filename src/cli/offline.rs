//! The offline subcommands: `crd`, `render`, `validate` and `lint`. They need no cluster and
//! no running HAProxy (only the `haproxy` binary for `haproxy -c`). Problems are printed one
//! per line as `file:line: message`; the exit code is 0 when all is well, 1 when the input
//! has problems and 2 when the command could not run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{
    DumpFormat, EXIT_PROBLEMS, EXIT_UNUSABLE, LintArgs, OutputFormat, PlanArgs, RenderArgs,
    ValidateArgs,
};
use crate::drivers::haproxy_check::{CheckerSettings, VersionedChecker};
use crate::output::{out, outln};
use crate::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use crate::pure::haproxy::{Config, SectionKind, check_schema_for, parse_config, view};
use crate::pure::pipeline::{CompiledConfig, PipelineError};
use crate::pure::rendered::{AuxFile, AuxKind, RenderedConfig};
use crate::pure::selector::NamespaceLabels;
use crate::pure::store::Stores;
use crate::pure::validate::semantic::prepare::{PreparedConfig, quote_config_word};
use crate::pure::validate::semantic::{HaproxyMessage, Severity, parse_haproxy_output};
use crate::pure::validation_tests::run_suite;
use crate::pure::watched_kinds::WatchedKinds;

pub fn print_crds() -> ExitCode {
    match crate::pure::config::crds_yaml() {
        Ok(yaml) => {
            out!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("haptor crd: could not serialise the CRDs: {e}");
            ExitCode::from(EXIT_UNUSABLE)
        }
    }
}

/// Reads and compiles a config file, printing every problem on failure.
pub(super) fn load_config(
    path: &Path,
) -> Result<(HAProxyTemplateConfig, CompiledConfig), ExitCode> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        eprintln!("{}: cannot read: {e}", path.display());
        ExitCode::from(EXIT_UNUSABLE)
    })?;
    let source = path.display().to_string();
    let config = config_from_yaml(&source, &text).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(EXIT_PROBLEMS)
    })?;
    let compiled = CompiledConfig::compile(config.spec.clone()).map_err(|e| {
        match &e {
            crate::pure::pipeline::ConfigError::Structure(problems) => {
                for problem in problems {
                    eprintln!("{source}: {problem}");
                }
            }
            // A template error names the file and line itself.
            crate::pure::pipeline::ConfigError::Template(e) if e.file_line().is_some() => {
                eprintln!("{e}");
            }
            other => eprintln!("{source}: {other}"),
        }
        ExitCode::from(EXIT_PROBLEMS)
    })?;
    Ok((config, compiled))
}

/// `--dump-rendered` in JSON: each failing test's entry gains `rendered`, its `haproxy.cfg`
/// and auxiliary files by path, as the summary prints them.
fn add_rendered_of_failing_tests(
    value: &mut serde_json::Value,
    report: &crate::pure::validation_tests::SuiteReport,
) {
    let Some(entries) = value.get_mut("tests").and_then(|t| t.as_array_mut()) else {
        return;
    };
    for (entry, test) in entries.iter_mut().zip(&report.tests) {
        if test.passed {
            continue;
        }
        if let (Some(rendered), Some(object)) = (&test.rendered, entry.as_object_mut()) {
            let files: serde_json::Map<String, serde_json::Value> = rendered
                .aux_files
                .iter()
                .map(|(path, file)| (path.clone(), file.content.clone().into()))
                .collect();
            object.insert(
                "rendered".into(),
                serde_json::json!({ "haproxy.cfg": rendered.haproxy_cfg, "files": files }),
            );
        }
    }
}

pub fn validate(args: &ValidateArgs) -> ExitCode {
    let (_, compiled) = match load_config(&args.file) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let validator = crate::drivers::haproxy_check::versioned_validator(
        args.versions.target(&args.haproxy_bin),
        &args.versions.haproxy_checkers,
        &args.haproxy_bin,
        64,
    );
    let report = run_suite(&compiled, &validator, &args.tests);
    match args.output {
        OutputFormat::Json => {
            let json = serde_json::to_value(&report).map(|mut value| {
                if args.dump_rendered {
                    add_rendered_of_failing_tests(&mut value, &report);
                }
                value
            });
            match json.and_then(|value| serde_json::to_string_pretty(&value)) {
                Ok(json) => outln!("{json}"),
                Err(e) => {
                    eprintln!("haptor validate: cannot serialise the report: {e}");
                    return ExitCode::from(EXIT_UNUSABLE);
                }
            }
        }
        OutputFormat::Summary => {
            for test in &report.tests {
                let verdict = if test.passed { "PASS" } else { "FAIL" };
                outln!(
                    "{verdict} {} ({:.1} ms)",
                    test.name,
                    test.duration.as_secs_f64() * 1000.0
                );
                if let Some(error) = &test.error {
                    outln!("     {error}");
                }
                for (i, assertion) in test
                    .assertions
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| !a.passed)
                {
                    let kind = serde_json::to_value(assertion.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default();
                    outln!(
                        "     assertion {} ({kind} on {}): {}",
                        i + 1,
                        assertion.target,
                        assertion.message
                    );
                }
                if args.dump_rendered
                    && !test.passed
                    && let Some(rendered) = &test.rendered
                {
                    print_rendered(rendered);
                }
            }
            if report.tests.is_empty() {
                outln!("no validation tests in {}", args.file.display());
            }
            outln!(
                "validation tests: {} passed, {} failed",
                report.passed,
                report.failed
            );
        }
    }
    if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_PROBLEMS)
    }
}

pub fn render(args: &RenderArgs) -> ExitCode {
    let (_, mut compiled) = match load_config(&args.file) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let instrument = super::render_report::instrument_for(args.trace, args.profile);
    if let Err(code) = super::render_report::instrument(&mut compiled, instrument, &args.file) {
        return code;
    }
    let stores = match compiled.new_stores() {
        Ok(stores) => stores,
        Err(e) => {
            eprintln!("{}: {e}", args.file.display());
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    let mut had_problems = false;
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
                had_problems |= !problems.is_empty();
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    }
    // The line the render is for: --haproxy-version, else the --haproxy-bin binary's.
    let target = args.versions.target(&args.haproxy_bin);
    let rendered = match compiled.render(stores.snapshot(), None, target) {
        Ok(rendered) => rendered,
        Err(e) => {
            match e.file_line() {
                Some(_) => eprintln!("{e}"),
                None => eprintln!("{}: {e}", args.file.display()),
            }
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    // What the templates left out (`ignored`, the annotation helpers), as haptor run's
    // IngressIgnored/IngressPartlyServed Events would say it.
    for (key, outcome) in rendered.outcomes.iter() {
        for reason in outcome.reasons() {
            eprintln!("left out of {key}: {reason}");
        }
    }
    match &args.out {
        Some(out) => {
            if let Err(e) = write_rendered(out, &rendered) {
                eprintln!("{e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
            eprintln!(
                "wrote haproxy.cfg and {} auxiliary file(s) to {}",
                rendered.aux_files.len(),
                out.display()
            );
        }
        None if instrument.any() || args.output == OutputFormat::Json => {}
        None => print_rendered(&rendered),
    }
    if let Err(code) = super::render_report::print(&compiled, &rendered, args.output) {
        return code;
    }
    if args.validate {
        let validator = crate::drivers::haproxy_check::versioned_validator(
            target,
            &args.versions.haproxy_checkers,
            &args.haproxy_bin,
            1,
        );
        match validator.validate(rendered) {
            Ok(validated) => {
                for warning in &validated.warnings {
                    eprintln!("warning: {warning}");
                }
                eprintln!(
                    "valid: syntax, schema and haproxy -c passed (checksum {})",
                    validated.checksum
                );
            }
            Err(PipelineError::Invalid(invalid)) => {
                for problem in &invalid.problems {
                    eprintln!("{problem}");
                }
                return ExitCode::from(EXIT_PROBLEMS);
            }
            Err(other) => {
                eprintln!("{other}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    }
    if had_problems {
        ExitCode::from(EXIT_PROBLEMS)
    } else {
        ExitCode::SUCCESS
    }
}

/// Puts the bodies `--http-resource NAME=FILE` gives into the HTTP resources' stores, and
/// warns on standard error of each resource that is on and not given: offline commands fetch
/// nothing, so it reads as empty.
pub(super) fn load_http_resources(
    compiled: &CompiledConfig,
    stores: &Stores,
    given: &[String],
) -> Result<(), String> {
    use crate::pure::http_resources::{content_object, store_name};
    let mut bodies = std::collections::BTreeMap::new();
    for argument in given {
        let (name, file) = argument
            .split_once('=')
            .ok_or_else(|| format!("--http-resource {argument}: expected NAME=FILE"))?;
        let resource = compiled
            .http_resources
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| {
                format!("--http-resource {argument}: the config declares no HTTP resource named '{name}' (spec.httpResources)")
            })?;
        let body = std::fs::read_to_string(file)
            .map_err(|e| format!("--http-resource {argument}: cannot read {file}: {e}"))?;
        bodies.insert(resource.name.clone(), body);
    }
    for resource in &compiled.http_resources {
        let store = stores
            .get(&store_name(&resource.name))
            .ok_or_else(|| format!("no store for the HTTP resource '{}'", resource.name))?;
        match bodies.get(&resource.name) {
            Some(body) => {
                let url = if resource.is_on() {
                    resource.url.as_str()
                } else {
                    "file:"
                };
                store
                    .apply(content_object(&resource.name, url, body))
                    .map_err(|e| format!("HTTP resource '{}': {e}", resource.name))?;
            }
            None if resource.is_on() => eprintln!(
                "warning: HTTP resource {} ({}) is not fetched offline and reads as empty; give its body with --http-resource {}=FILE",
                resource.name, resource.url, resource.name
            ),
            None => {}
        }
    }
    Ok(())
}

/// Loads a folder of manifests into the stores of the watched resources they belong to,
/// leaving out the objects their selectors exclude (namespace selectors match the labels of
/// the folder's Namespace manifests). Returns the problems of documents that could not be
/// used (an object whose fields have the wrong type among them: `pure::object_schema`), and
/// warns on standard error of each object the config does not read, as `haptor local` does.
pub(super) fn load_fixture_dir(
    compiled: &CompiledConfig,
    stores: &Stores,
    dir: &Path,
) -> Result<Vec<String>, String> {
    let set = crate::drivers::manifest_dir::load_dir(dir).map_err(|e| e.to_string())?;
    let mut problems: Vec<String> = set.problems.iter().map(ToString::to_string).collect();
    let namespaces = NamespaceLabels::from_objects(set.manifests.iter().map(|m| &m.object));
    let read = WatchedKinds::of(&compiled.spec);
    for manifest in &set.manifests {
        // An object goes into every watched resource of its kind whose selectors admit it
        // (the library watches Secrets twice: by TLS type and by basic-auth label).
        let mut watched = false;
        for resource in compiled.watched_resources_for(manifest.api_version(), manifest.kind()) {
            watched = true;
            if !compiled.admits(resource, &manifest.object, &namespaces) {
                tracing::debug!(file = %manifest.file.display(), object = %manifest.display_name(), "excluded by the selectors of {resource}");
                continue;
            }
            if let Some(store) = stores.get(resource)
                && let Err(e) = store.apply(manifest.object.clone())
            {
                let problem = format!("{}:{}: {e}", manifest.file.display(), manifest.line);
                // Once, though the object goes to several stores.
                if problems.last() != Some(&problem) {
                    problems.push(problem);
                }
            }
        }
        if !watched
            && let Some(why) = read.not_read(
                manifest.api_version(),
                manifest.kind(),
                &manifest.display_name(),
            )
        {
            eprintln!(
                "{}:{}: warning: {why}",
                manifest.file.display(),
                manifest.line
            );
        }
    }
    Ok(problems)
}

fn print_rendered(rendered: &RenderedConfig) {
    // The Gateway API status the templates decided, first: it is not a deployed file.
    let statuses = crate::pure::gateway_status::statuses(&rendered.status_records);
    if !statuses.is_empty() {
        outln!("# ---- status (Gateway API status haptor run would write; not deployed)");
        match serde_yaml_ng::to_string(&statuses) {
            Ok(text) => out!("{text}"),
            Err(e) => outln!("# cannot print the status: {e}"),
        }
    }
    outln!("# ---- haproxy.cfg");
    out!("{}", rendered.haproxy_cfg);
    for (path, file) in &rendered.aux_files {
        outln!("# ---- {path} ({})", file.kind);
        out!("{}", file.content);
        if !file.content.ends_with('\n') && !file.content.is_empty() {
            outln!();
        }
    }
}

fn write_rendered(out: &Path, rendered: &RenderedConfig) -> Result<(), String> {
    let write = |path: &Path, content: &str| -> Result<(), String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("{}: cannot create: {e}", parent.display()))?;
        }
        std::fs::write(path, content).map_err(|e| format!("{}: cannot write: {e}", path.display()))
    };
    write(&out.join("haproxy.cfg"), &rendered.haproxy_cfg)?;
    for AuxFile { path, content, .. } in rendered.aux_files.values() {
        write(&out.join(path), content)?;
    }
    Ok(())
}

pub fn lint(args: &LintArgs) -> ExitCode {
    let target = args.versions.target(&args.haproxy_bin);
    // `haproxy -c` of the target's version, or none at all.
    let checker = if args.haproxy {
        let checkers = VersionedChecker::new(
            target,
            &args.versions.haproxy_checkers,
            Path::new(&args.haproxy_bin),
            CheckerSettings::default(),
        );
        match checkers.chosen() {
            Ok(chosen) => Some(chosen.settings().binary.display().to_string()),
            Err(e) => {
                eprintln!("haptor lint: {e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    } else {
        None
    };
    let mut problems = 0usize;
    let mut dumps = Vec::new();
    for file in &args.files {
        // A folder `haptor render --out` wrote stands for its haproxy.cfg.
        let file = &if file.is_dir() {
            file.join("haproxy.cfg")
        } else {
            file.clone()
        };
        let name = file.display();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("{name}: cannot read: {e}");
                problems += 1;
                continue;
            }
        };
        let parsed = match parse_config(&text) {
            Ok(parsed) => parsed,
            Err(e) => {
                outln!("{name}:{}: {}", e.line, e.message);
                problems += 1;
                continue;
            }
        };
        // The keyword tables only: the code-running guard (`pure::haproxy::guard`) is for
        // renders of templates, which carry objects' values; a hand-written file has neither,
        // so all of it is its author's and `lua-load` or `program` in it are accepted.
        for problem in check_schema_for(&parsed, target) {
            outln!("{name}:{}: {}", problem.line, problem.message);
            problems += 1;
        }
        if let Some(binary) = &checker {
            let origin = rendered_origin(&parsed, file);
            if let Some((configured, folder)) = &origin {
                eprintln!(
                    "{name}: haproxy -c resolves its relative paths against {} (laid out as haptor render --out writes: maps/, ssl/, general/), not the '{configured}' of its default-path",
                    folder.display()
                );
            }
            match haproxy_check_in_place(binary, file, origin.map(|(_, folder)| folder).as_deref())
            {
                Ok(messages) => {
                    for message in messages.iter().filter(|m| m.severity == Severity::Alert) {
                        match &message.location {
                            Some((_, line)) => {
                                outln!("{name}:{line}: {} (haproxy -c)", message.text)
                            }
                            None => outln!("{name}: {} (haproxy -c)", message.text),
                        }
                        problems += 1;
                    }
                }
                Err(e) => {
                    eprintln!("{name}: {e}");
                    return ExitCode::from(EXIT_UNUSABLE);
                }
            }
        }
        if args.dump == Some(DumpFormat::Json) {
            dumps.push(serde_json::json!({ "file": name.to_string(), "view": view(&parsed) }));
        }
    }
    if args.dump == Some(DumpFormat::Json) {
        let out = if dumps.len() == 1 {
            dumps.remove(0)
        } else {
            serde_json::Value::Array(dumps)
        };
        match serde_json::to_string_pretty(&out) {
            Ok(json) => outln!("{json}"),
            Err(e) => eprintln!("cannot serialise the structured view: {e}"),
        }
    }
    if problems == 0 {
        eprintln!("{} file(s) checked, no problems", args.files.len());
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "{} file(s) checked, {problems} problem(s)",
            args.files.len()
        );
        ExitCode::from(EXIT_PROBLEMS)
    }
}

/// The folders `haptor render --out` writes beside haproxy.cfg, by the default layout (and
/// `haptor plan` reads back): maps, certificates, crt-lists and other files.
const RENDERED_LAYOUT: [(&str, AuxKind); 3] = [
    ("maps", AuxKind::Map),
    ("ssl", AuxKind::Cert),
    ("general", AuxKind::File),
];

/// When `file` is the haproxy.cfg of a folder `haptor render --out` wrote (one of the
/// [`RENDERED_LAYOUT`] folders beside it) and its `global` section's `default-path` names
/// another directory (the pods' `/etc/haproxy`, where a deployment puts those files): what
/// it names, and the folder, against which `haproxy -c` resolves the relative paths instead.
fn rendered_origin(parsed: &Config, file: &Path) -> Option<(String, PathBuf)> {
    let configured = parsed
        .sections_of(SectionKind::Global)
        .flat_map(|global| global.directives_named("default-path"))
        .last()?
        .args()
        .join(" ");
    let folder = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let folder = std::fs::canonicalize(folder).ok()?;
    let rendered = RENDERED_LAYOUT
        .iter()
        .any(|(dir, _)| folder.join(dir).is_dir());
    let names_folder = configured
        .strip_prefix("origin ")
        .is_some_and(|base| std::fs::canonicalize(base.trim()).ok().as_deref() == Some(&folder));
    (rendered && !names_folder).then_some((configured, folder))
}

/// Runs `haproxy -c` on a file where it lies (relative paths resolve as they would for the
/// user), returning HAProxy's messages. With `origin`, a copy whose `default-path` is
/// `origin <origin>` is checked instead (the same lines, so HAProxy's line numbers hold, and
/// its messages name `file`). A failure to run is an error; a rejection is a list of alerts.
fn haproxy_check_in_place(
    binary: &str,
    file: &Path,
    origin: Option<&Path>,
) -> Result<Vec<HaproxyMessage>, String> {
    // Kept until HAProxy has run.
    let mut copy = None;
    let checked = match origin.map(|origin| (origin, origin.to_str())) {
        None => file.to_path_buf(),
        Some((origin, None)) => {
            return Err(format!(
                "{}: the path is not UTF-8, so a configuration cannot name it",
                origin.display()
            ));
        }
        Some((_, Some(origin))) => {
            let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
            let prepared = PreparedConfig::new(&text, &quote_config_word(origin));
            let dir = tempfile::Builder::new()
                .prefix("haptor-lint-")
                .tempdir()
                .map_err(|e| format!("cannot create a scratch directory: {e}"))?;
            let path = dir.path().join("haproxy.cfg");
            std::fs::write(&path, &prepared.text)
                .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
            copy = Some((dir, path.clone(), prepared));
            path
        }
    };
    let output = std::process::Command::new(binary)
        .args(["-c", "-dr", "-f"])
        .arg(&checked)
        .output()
        .map_err(|e| format!("cannot run '{binary}': {e}; install haproxy (apt-get install haproxy) or pass --haproxy-bin"))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    if let Some((_, path, _)) = &copy {
        text = text.replace(&path.display().to_string(), &file.display().to_string());
    }
    let mut messages = parse_haproxy_output(&text);
    if let Some((_, _, prepared)) = &copy {
        for message in &mut messages {
            if let Some((_, line)) = &mut message.location {
                *line = prepared.original_line(*line).unwrap_or(*line);
            }
        }
    }
    let code = output.status.code();
    if matches!(code, Some(0) | Some(2)) || messages.iter().any(|m| m.severity == Severity::Alert) {
        Ok(messages)
    } else {
        Err(format!(
            "haproxy -c failed ({}) without an alert: {}",
            output.status,
            text.trim()
        ))
    }
}

/// A configuration as `plan` compares it: a haproxy.cfg file alone, or a folder `haptor
/// render --out` wrote (its haproxy.cfg and, by the default layout, its maps under `maps/`,
/// certificates under `ssl/`, crt-lists (`*.crtlist`) and other files under `general/`), so
/// a change that only touches a map shows as the runtime operations it is.
fn read_rendered(path: &Path) -> Result<RenderedConfig, String> {
    let cannot = |p: &Path, e: std::io::Error| format!("{}: cannot read: {e}", p.display());
    if !path.is_dir() {
        let haproxy_cfg = std::fs::read_to_string(path).map_err(|e| cannot(path, e))?;
        return Ok(RenderedConfig {
            haproxy_cfg,
            ..Default::default()
        });
    }
    let cfg = path.join("haproxy.cfg");
    let haproxy_cfg = std::fs::read_to_string(&cfg).map_err(|e| cannot(&cfg, e))?;
    let mut aux_files = std::collections::BTreeMap::new();
    for (dir, kind) in RENDERED_LAYOUT {
        let Ok(entries) = std::fs::read_dir(path.join(dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let file = path.join(dir).join(&name);
            let content = std::fs::read_to_string(&file).map_err(|e| cannot(&file, e))?;
            let kind = if kind == AuxKind::File && name.ends_with(".crtlist") {
                AuxKind::CrtList
            } else {
                kind
            };
            let relative = format!("{dir}/{name}");
            aux_files.insert(
                relative.clone(),
                AuxFile {
                    kind,
                    name,
                    path: relative,
                    content,
                },
            );
        }
    }
    Ok(RenderedConfig {
        haproxy_cfg,
        aux_files,
        ..Default::default()
    })
}

pub fn plan(args: &PlanArgs) -> ExitCode {
    let read = |path: &Path| -> Result<RenderedConfig, ExitCode> {
        read_rendered(path).map_err(|e| {
            eprintln!("{e}");
            ExitCode::from(EXIT_UNUSABLE)
        })
    };
    let (from, to) = match (read(&args.from), read(&args.to)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let plan = match crate::pure::deploy::plan::plan(Some(&from), &to) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("{}: {e}", args.to.display());
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&plan) {
            Ok(json) => outln!("{json}"),
            Err(e) => {
                eprintln!("haptor plan: cannot serialise the plan: {e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        },
        OutputFormat::Summary => {
            for reason in &plan.reload_reasons {
                eprintln!("reload needed: {reason}");
            }
            out!("{}", plan.to_text());
        }
    }
    ExitCode::SUCCESS
}
