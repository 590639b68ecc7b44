//! `haptor migrate` and `haptor annotations`: what a config (by default the embedded
//! Ingress library) does with a set of Ingresses before anyone switches to it, and the
//! reference of the annotations it reads.
//!
//! `migrate` reads Ingresses, with whatever else the config watches that comes along
//! (Services, Secrets, ...), from manifest files and folders (`kubectl get ingress -A -o
//! yaml` output works, `-` is standard input) or, with `--cluster`, from the API server the
//! kubeconfig names, listed with the config's own selectors. Every Ingress is taken as one
//! of the config's class (extraContext `ingress_class`) unless `--keep-class` is given, the
//! stores are filled as the controller fills them, and one render with the controller's
//! code decides the report ([`MigrationReport`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use super::{EXIT_PROBLEMS, EXIT_UNUSABLE, MigrateArgs, MigrateOutput};
use crate::output::{out, outln};
use crate::pure::annotations::reference_markdown;
use crate::pure::config::{HAProxyTemplateConfig, config_from_yaml};
use crate::pure::manifests::{ManifestSet, parse_manifests};
use crate::pure::migration::MigrationReport;
use crate::pure::pipeline::CompiledConfig;
use crate::pure::selector::NamespaceLabels;

/// Where the embedded library comes from, as messages name it.
const EMBEDDED: &str = "the embedded Ingress library";

/// The config of `-f`, else the embedded Ingress library, with the name messages use.
fn config_text(file: Option<&Path>) -> Result<(String, String), ExitCode> {
    match file {
        Some(path) => std::fs::read_to_string(path)
            .map(|text| (path.display().to_string(), text))
            .map_err(|e| {
                eprintln!("{}: cannot read: {e}", path.display());
                ExitCode::from(EXIT_UNUSABLE)
            }),
        None => Ok((
            EMBEDDED.to_string(),
            crate::local::run::EMBEDDED_DEFAULT.to_string(),
        )),
    }
}

fn parse_config(source: &str, text: &str) -> Result<HAProxyTemplateConfig, ExitCode> {
    config_from_yaml(source, text).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(EXIT_PROBLEMS)
    })
}

/// `haptor annotations`: the annotation reference of a config, as Markdown.
pub fn annotations(file: Option<&Path>) -> ExitCode {
    let (source, text) = match config_text(file) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let config = match parse_config(&source, &text) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Err(problems) = crate::pure::annotations::AnnotationTable::new(&config.spec.annotations)
    {
        for problem in problems {
            eprintln!("{source}: {}: {}", problem.field, problem.message);
        }
        return ExitCode::from(EXIT_PROBLEMS);
    }
    let shown = if file.is_some() {
        source
    } else {
        "deploy/library/ingress.yaml".to_string()
    };
    out!("{}", reference_markdown(&config.spec.annotations, &shown));
    ExitCode::SUCCESS
}

/// `haptor migrate`.
pub fn migrate(args: &MigrateArgs) -> ExitCode {
    let (source, text) = match config_text(args.file.as_deref()) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let config = match parse_config(&source, &text) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let class = config
        .spec
        .extra_context
        .as_ref()
        .and_then(|extra| extra.get("ingress_class"))
        .and_then(Value::as_str)
        .unwrap_or("haptor")
        .to_string();
    let prefixes = config.spec.annotations.prefixes.clone();
    let compiled = match CompiledConfig::compile(config.spec.clone()) {
        Ok(compiled) => compiled,
        Err(e) => {
            match &e {
                // A template error names the file and line itself.
                crate::pure::pipeline::ConfigError::Template(t) if t.file_line().is_some() => {
                    eprintln!("{e}");
                }
                _ => eprintln!("{source}: {e}"),
            }
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    let objects = if args.cluster {
        match read_cluster(&compiled, args.kubeconfig.as_ref()) {
            Ok(objects) => objects,
            Err(problem) => {
                eprintln!("haptor migrate: {problem}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    } else {
        if args.inputs.is_empty() {
            eprintln!(
                "haptor migrate: give manifest files or folders (- for standard input), or --cluster"
            );
            return ExitCode::from(EXIT_UNUSABLE);
        }
        match read_inputs(&args.inputs) {
            Ok(set) => {
                for problem in &set.problems {
                    eprintln!("{problem}");
                }
                set.manifests.into_iter().map(|m| m.object).collect()
            }
            Err(problem) => {
                eprintln!("haptor migrate: {problem}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        }
    };
    let (ingresses, stores) = match fill_stores(&compiled, objects, &class, args.keep_class) {
        Ok(filled) => filled,
        Err(problem) => {
            eprintln!("{source}: {problem}");
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    let target = args.versions.target(&args.haproxy_bin);
    let rendered = match compiled.render(stores.snapshot(), None, target) {
        Ok(rendered) => rendered,
        Err(e) => {
            eprintln!("{source}: the render failed: {e}");
            return ExitCode::from(EXIT_PROBLEMS);
        }
    };
    let report = MigrationReport::new(&ingresses, &rendered.outcomes, &prefixes);
    match args.output {
        MigrateOutput::Text => {
            if !args.keep_class {
                outln!(
                    "(every Ingress is taken as one of class '{class}'; --keep-class to keep theirs)"
                );
            }
            out!("{}", report.text());
        }
        MigrateOutput::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => outln!("{json}"),
            Err(e) => {
                eprintln!("haptor migrate: cannot write JSON: {e}");
                return ExitCode::from(EXIT_UNUSABLE);
            }
        },
    }
    if report.all_as_is() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_PROBLEMS)
    }
}

/// Every manifest of the files, folders and `-` (standard input) given.
fn read_inputs(inputs: &[PathBuf]) -> Result<ManifestSet, String> {
    let mut set = ManifestSet::default();
    for input in inputs {
        let part = if input.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("cannot read standard input: {e}"))?;
            parse_manifests(Path::new("<stdin>"), &text)
        } else if input.is_dir() {
            crate::drivers::manifest_dir::load_dir(input).map_err(|e| e.to_string())?
        } else {
            let text = std::fs::read_to_string(input)
                .map_err(|e| format!("{}: cannot read: {e}", input.display()))?;
            parse_manifests(input, &text)
        };
        set.manifests.extend(part.manifests);
        set.problems.extend(part.problems);
    }
    Ok(set)
}

/// The Ingresses of `objects` (as read, for the report) and stores filled as the
/// controller fills them, every Ingress of the config's class unless `keep_class`.
fn fill_stores(
    compiled: &CompiledConfig,
    objects: Vec<Value>,
    class: &str,
    keep_class: bool,
) -> Result<(Vec<Value>, crate::pure::store::Stores), String> {
    let stores = compiled.new_stores().map_err(|e| e.to_string())?;
    let namespaces = NamespaceLabels::from_objects(objects.iter());
    let mut ingresses = Vec::new();
    for mut object in objects {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind == "Ingress" {
            if !keep_class && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.insert("ingressClassName".into(), Value::String(class.to_string()));
            }
            ingresses.push(object.clone());
        }
        let resources: Vec<String> = compiled
            .watched_resources_for(&api_version, &kind)
            .map(str::to_string)
            .collect();
        for resource in resources {
            if !compiled.admits(&resource, &object, &namespaces) {
                continue;
            }
            if let Some(store) = stores.get(&resource)
                && let Err(e) = store.apply(object.clone())
            {
                tracing::warn!(%resource, "an object was not stored: {e}");
            }
        }
    }
    Ok((ingresses, stores))
}

/// Every object the config watches, listed from the cluster with its selectors.
fn read_cluster(
    compiled: &CompiledConfig,
    kubeconfig: Option<&PathBuf>,
) -> Result<Vec<Value>, String> {
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let config = crate::run::kube_config(kubeconfig)
            .await
            .map_err(|e| e.to_string())?;
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        let mut objects = Vec::new();
        for (name, watched) in &compiled.spec.watched_resources {
            let (group, version) = watched
                .api_version
                .split_once('/')
                .unwrap_or(("", watched.api_version.as_str()));
            let resource = kube::api::ApiResource {
                group: group.to_string(),
                version: version.to_string(),
                api_version: watched.api_version.clone(),
                kind: watched.kind_name(),
                plural: watched.resources.clone(),
            };
            let api: kube::Api<kube::api::DynamicObject> =
                kube::Api::all_with(client.clone(), &resource);
            let mut params = kube::api::ListParams::default();
            if let Some(labels) = &watched.label_selector {
                params = params.labels(labels);
            }
            if let Some(fields) = &watched.field_selector {
                params = params.fields(fields);
            }
            let list = api
                .list(&params)
                .await
                .map_err(|e| format!("cannot list {name} ({}): {e}", watched.resources))?;
            for item in list.items {
                let mut value = serde_json::to_value(&item).map_err(|e| e.to_string())?;
                if let Some(object) = value.as_object_mut() {
                    object.insert("apiVersion".into(), watched.api_version.clone().into());
                    object.insert("kind".into(), watched.kind_name().into());
                }
                objects.push(value);
            }
        }
        Ok(objects)
    })
}
