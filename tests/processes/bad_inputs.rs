//! The catalogue of bad inputs, one table per way in, each row run through the running
//! controller: `haptor local` (the real binary and its real haproxy) on a copy of the
//! quickstart with the Ingress library. Every row writes its bad input into the folder and
//! then checks the one standard for it: haptor does not panic, one error names the file or
//! object and the line or field, the error is in the log and in `/debug/vars/errors`, and
//! the last good configuration keeps serving (real HTTP to the routes served before). Then
//! the row is undone and the controller must be back on the good configuration before the
//! next row starts. `every_row_of_the_catalogue_is_counted` prints the rows by category.
//!
//! Deploy-side faults need a work directory that fills up, or a Data Plane API that
//! misbehaves; they are the last tables.

use crate::controller;
use crate::dataplane_stub;
use crate::local;
use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;

use local::{Local, Setup, backend, eventually, get};

/// What a row is about, as the closing note counts rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Category {
    Template,
    Manifest,
    HostileField,
    Config,
}

/// One bad input: what it is, where it enters, how to write it and take it back, and what
/// the one error about it must say.
struct Row {
    category: Category,
    input: &'static str,
    enters: &'static str,
    apply: Box<dyn Fn(&Local)>,
    undo: Box<dyn Fn(&Local)>,
    /// Every one of these is in one record of `/debug/vars/errors` (its message, template
    /// and line) and in the log.
    error: Vec<String>,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The text a record of `/debug/vars/errors` is searched in: its source, template, line
/// and message.
fn record_text(record: &serde_json::Value) -> String {
    format!(
        "{} {}:{} {}",
        record["source"].as_str().unwrap_or_default(),
        record["template"].as_str().unwrap_or_default(),
        record["line"],
        record["message"].as_str().unwrap_or_default()
    )
}

/// The routes of the good configuration answer as they did.
fn assert_serving(local: &Local, row: &str) {
    for (host, path, body) in [
        ("a.localhost", "/", "hello from app-a\n"),
        ("a.localhost", "/api/x", "hello from app-b\n"),
        ("b.localhost", "/", "hello from app-b\n"),
    ] {
        assert_eq!(
            get(local.http, host, path).map(|(_, b)| b).as_deref(),
            Some(body),
            "{row}: the last good configuration keeps serving http://{host}{path}"
        );
    }
}

fn deployed_checksum(local: &Local) -> String {
    local
        .debug_json("/debug/vars/state")
        .and_then(|(_, state)| state["last_deployed_checksum"].as_str().map(String::from))
        .unwrap_or_default()
}

/// Starts `haptor local` on the quickstart, waits until it serves, and returns it with the
/// checksum of the good configuration.
fn start() -> (Local, String) {
    let (a, b) = (backend("app-a").port, backend("app-b").port);
    let local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    eventually("the quickstart served", Duration::from_secs(30), || {
        (get(local.http, "a.localhost", "/")?.0 == 200).then_some(())
    });
    assert_serving(&local, "before any row");
    let good = deployed_checksum(&local);
    assert!(!good.is_empty(), "a deployed checksum");
    (local, good)
}

/// Runs the rows one after the other on one running haptor.
fn run_rows(local: &mut Local, good: &str, rows: &[Row]) {
    for (n, row) in rows.iter().enumerate() {
        let name = format!("row {} ({:?}: {})", n + 1, row.category, row.input);
        eprintln!("{name}: enters through {}", row.enters);
        let since = now_ms();
        let log_before = local.log_text().len();
        (row.apply)(local);
        let (record, message) = eventually(
            &format!("{name}: an error holding {:?}", row.error),
            Duration::from_secs(30),
            || {
                let (_, errors) = local.debug_json("/debug/vars/errors")?;
                errors.as_array()?.iter().find_map(|record| {
                    let at = record["at_ms"].as_u64().map(u128::from)?;
                    let text = record_text(record);
                    (at + 50 >= since && row.error.iter().all(|part| text.contains(part.as_str())))
                        .then(|| {
                            (
                                text,
                                record["message"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                })
            },
        );
        // The log holds the message as it is (a value's newline too): its first line will do.
        // The deployer records an error before it logs it: wait for the line.
        let first_line = message.lines().next().unwrap_or_default();
        let log = eventually(
            &format!("{name}: the log to say {first_line:?}"),
            Duration::from_secs(30),
            || {
                let log = local.log_text();
                log.get(log_before..)
                    .unwrap_or_default()
                    .contains(first_line)
                    .then_some(log)
            },
        );
        let logged = log.get(log_before..).unwrap_or_default();
        assert!(
            !log.contains("panicked"),
            "{name}: haptor panicked:\n{logged}"
        );
        assert!(
            matches!(local.child.try_wait(), Ok(None)),
            "{name}: haptor is still running"
        );
        assert_serving(local, &name);
        assert_eq!(
            local.debug_json("/readyz").map(|(status, _)| status),
            Some(200),
            "{name}: still ready"
        );
        eprintln!("{name}: reported as {record:?}");
        (row.undo)(local);
        eventually(
            &format!("{name}: undone, the good configuration deployed again"),
            Duration::from_secs(30),
            || (deployed_checksum(local) == good).then_some(()),
        );
        assert_serving(local, &format!("{name}, undone"));
    }
}

// ----- building rows -----

fn row(
    category: Category,
    input: &'static str,
    enters: &'static str,
    apply: impl Fn(&Local) + 'static,
    undo: impl Fn(&Local) + 'static,
    error: &[&str],
) -> Row {
    Row {
        category,
        input,
        enters,
        apply: Box::new(apply),
        undo: Box::new(undo),
        error: error.iter().map(|s| s.to_string()).collect(),
    }
}

/// A row that writes `text` as a new file `file` of the folder and removes it again.
fn new_file(
    category: Category,
    input: &'static str,
    file: &'static str,
    text: String,
    error: &[&str],
) -> Row {
    row(
        category,
        input,
        "a manifest file of the folder",
        move |local| local.write(file, &text),
        move |local| remove(local, file),
        error,
    )
}

fn remove(local: &Local, file: &str) {
    let path = local.dir.join(file);
    if path.is_dir() {
        std::fs::remove_dir_all(&path).expect("remove the row's folder");
    } else {
        let _ = std::fs::remove_file(&path);
    }
}

/// A row that edits the folder's `config.yaml` (the Ingress library) with `edit` and puts
/// the original back.
fn config_edit(
    category: Category,
    input: &'static str,
    enters: &'static str,
    edit: impl Fn(&str) -> String + 'static,
    error: &[&str],
) -> Row {
    row(
        category,
        input,
        enters,
        move |local| {
            let original = local.read("config.yaml");
            std::fs::write(local.dir.with_file_name("config.yaml.good"), &original)
                .expect("keep the good config");
            let edited = edit(&original);
            assert_ne!(edited, original, "the row changes config.yaml");
            local.write("config.yaml", &edited);
        },
        |local| {
            let good = std::fs::read_to_string(local.dir.with_file_name("config.yaml.good"))
                .expect("the good config");
            local.write("config.yaml", &good);
        },
        error,
    )
}

/// `text` with `anchor` replaced by `replacement` (once; the anchor must be there).
fn replace_once(text: &str, anchor: &str, replacement: &str) -> String {
    assert!(text.contains(anchor), "config.yaml holds {anchor:?}");
    text.replacen(anchor, replacement, 1)
}

/// `config.yaml:N`: the line of the quickstart's `config.yaml` (the Ingress library with
/// the quickstart's spec prefix) that holds `needle` once `edit` is made.
fn config_line(edit: impl Fn(&str) -> String, needle: &str) -> String {
    let library =
        std::fs::read_to_string(local::repo("deploy/library/ingress.yaml")).expect("library");
    let prefix = Setup::quickstart(0, 0).spec_prefix;
    let config = edit(&library.replacen("spec:\n", &format!("spec:\n{prefix}"), 1));
    let line = config
        .lines()
        .position(|line| line.contains(needle))
        .map(|index| index + 1)
        .expect("the edited config holds the needle");
    format!("config.yaml:{line}:")
}

/// Inserts `template` at the start of the library's `{{#if runtime_socket}}` line, line 9 of
/// its `haproxy.cfg` template.
fn in_haproxy_cfg(template: &'static str) -> impl Fn(&str) -> String {
    move |config| {
        replace_once(
            config,
            "      {{#if runtime_socket}}\n",
            &format!("      {template}{{{{#if runtime_socket}}}}\n"),
        )
    }
}

/// An Ingress of class haptor named `name` with one rule: `host`, `path`, Service `service`.
fn ingress(name: &str, annotations: &str, host: &str, path: &str, service: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: default\n  annotations: {{{annotations}}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: {host}\n      http:\n        paths:\n          - {{path: {path}, pathType: Prefix, backend: {{service: {{name: {service}, port: {{number: 80}}}}}}}}\n"
    )
}

fn hostile_ingress(input: &'static str, name: &'static str, host: &str, path: &str) -> Row {
    new_file(
        Category::HostileField,
        input,
        "hostile.yaml",
        ingress(name, "", host, path, "app-a"),
        &[&format!("Ingress default/{name} is not served")],
    )
}

fn hostile_annotation(
    input: &'static str,
    name: &'static str,
    annotation: &'static str,
    value: &str,
) -> Row {
    new_file(
        Category::HostileField,
        input,
        "hostile.yaml",
        ingress(
            name,
            &format!("{annotation}: {value}"),
            &format!("{name}.localhost"),
            "/",
            "app-a",
        ),
        &[
            &format!("Ingress default/{name} is served without some of its parts"),
            annotation,
        ],
    )
}

/// The quickstart's TLS Secret with `tls.crt` and `tls.key` replaced (base64-encoded here).
fn tls_secret(local: &Local, crt: Option<&str>, key: Option<&str>) -> String {
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    local
        .read("tls.yaml")
        .lines()
        .map(|line| match line.trim_start() {
            l if l.starts_with("tls.crt:") && crt.is_some() => {
                format!("  tls.crt: {}", b64(crt.unwrap_or_default()))
            }
            l if l.starts_with("tls.key:") && key.is_some() => {
                format!("  tls.key: {}", b64(key.unwrap_or_default()))
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A row that replaces the quickstart's `tls.yaml` with `secret(local)` and puts it back.
fn tls_row(
    input: &'static str,
    secret: impl Fn(&Local) -> String + 'static,
    error: &[&str],
) -> Row {
    row(
        Category::HostileField,
        input,
        "the TLS Secret an Ingress names",
        move |local| {
            let original = local.read("tls.yaml");
            std::fs::write(local.dir.with_file_name("tls.yaml.good"), &original)
                .expect("keep the good Secret");
            local.write("tls.yaml", &secret(local));
        },
        |local| {
            let good = std::fs::read_to_string(local.dir.with_file_name("tls.yaml.good"))
                .expect("the good Secret");
            local.write("tls.yaml", &good);
        },
        error,
    )
}

/// A new RSA key in PEM, from openssl.
fn other_private_key() -> String {
    let out = Command::new("openssl")
        .args(["genrsa", "2048"])
        .output()
        .expect("openssl runs (./scripts/test installs it)");
    assert!(out.status.success(), "openssl genrsa");
    String::from_utf8(out.stdout).expect("PEM is text")
}

// ----- the tables -----

fn template_rows() -> Vec<Row> {
    use Category::Template;
    let enters = "the HAProxyTemplateConfig's templates (config.yaml)";
    // The file line of the haproxy.cfg template's line 9, which the rows below edit.
    let line_9 = config_line(|config| config.to_string(), "{{#if runtime_socket}}");
    vec![
        config_edit(
            Template,
            "a block opened and never closed",
            enters,
            in_haproxy_cfg("{{#each}}"),
            &[
                "HAProxyTemplateConfig",
                &line_9,
                "template 'haproxy.cfg' line 9, column 1: `{{#each}}` opened at line 9, column 1 is never closed: add `{{/each}}` where its block ends",
            ],
        ),
        config_edit(
            Template,
            "a block closed by the wrong tag",
            enters,
            in_haproxy_cfg("{{#with x}}{{/each}}"),
            &[
                "HAProxyTemplateConfig",
                &line_9,
                "`{{/each}}` at line 9, column 12 does not close `{{#with x}}` opened at line 9, column 1: close that block with `{{/with}}` instead",
            ],
        ),
        config_edit(
            Template,
            "an unknown helper",
            enters,
            in_haproxy_cfg("{{nosuchhelper 1}}"),
            &[
                &line_9,
                "template 'haproxy.cfg' line 9",
                "unknown helper 'nosuchhelper'",
            ],
        ),
        config_edit(
            Template,
            "an unknown partial",
            enters,
            in_haproxy_cfg("{{> nosuchpartial}}"),
            &[
                &line_9,
                "template 'haproxy.cfg' line 9",
                "no template snippet named 'nosuchpartial'",
            ],
        ),
        config_edit(
            Template,
            "a partial that includes itself",
            enters,
            |config| {
                replace_once(
                    config,
                    "    ingress-default-route:\n      template: |\n",
                    "    ingress-default-route:\n      template: |\n        {{> ingress-default-route}}\n",
                )
            },
            &["ingress-default-route"],
        ),
        config_edit(
            Template,
            "output past the size guard (spec.rendering.maxOutputBytes)",
            enters,
            |config| {
                replace_once(
                    config,
                    "spec:\n",
                    "spec:\n  rendering:\n    maxOutputBytes: 2000\n",
                )
            },
            &["2000"],
        ),
        config_edit(
            Template,
            "a render past the time guard (spec.rendering.timeout)",
            enters,
            |config| replace_once(config, "spec:\n", "spec:\n  rendering:\n    timeout: 1us\n"),
            &["1µs"],
        ),
        config_edit(
            Template,
            "the fail helper",
            enters,
            in_haproxy_cfg("{{fail \"the operator said no\"}}"),
            &["haproxy.cfg:9", &line_9, "the operator said no"],
        ),
        config_edit(
            Template,
            "a store that is not watched",
            enters,
            in_haproxy_cfg("{{#each (resources \"nosuchstore\") as |x|}}{{/each}}"),
            &[
                "haproxy.cfg:9",
                &line_9,
                "no watched resource named 'nosuchstore'",
            ],
        ),
        config_edit(
            Template,
            "an argument of the wrong type",
            enters,
            in_haproxy_cfg("{{add \"x\" 1}}"),
            &[
                "haproxy.cfg:9",
                &line_9,
                "argument 1 of add is not a number",
            ],
        ),
        config_edit(
            Template,
            "a config whose structure is wrong (a watched resource without apiVersion)",
            "the HAProxyTemplateConfig's spec (config.yaml)",
            |config| {
                replace_once(
                    config,
                    "      apiVersion: discovery.k8s.io/v1\n",
                    "      apiVersion: \"\"\n",
                )
            },
            &["HAProxyTemplateConfig", "apiVersion", "is required"],
        ),
    ]
}

fn manifest_rows() -> Vec<Row> {
    use Category::Manifest;
    let service = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ports: [{{name: http, port: 80}}]\n"
        )
    };
    let bomb = {
        let mut text = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\n");
        text.push_str(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        let mut previous = 'a';
        for name in ['b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'] {
            let refs = vec![format!("*{previous}"); 9].join(",");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
            previous = name;
        }
        text
    };
    vec![
        new_file(
            Manifest,
            "invalid YAML",
            "bad.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: [broken\n".into(),
            &["bad.yaml:", "malformed YAML"],
        ),
        new_file(
            Manifest,
            "invalid YAML in a later document (both of the parser's locations, in the file's lines)",
            "bad.yaml",
            format!("{}---\n{}", service("yaml-ok"), "apiVersion: v1\nkind: Service\nmetadata:\n  name: broken\n  labels:\n    a: \"x\n"),
            &["bad.yaml:13", "malformed YAML: found unexpected end of stream at line 13 column 1, while scanning a quoted scalar at line 12 column 8"],
        ),
        config_edit(
            Manifest,
            "a config whose metadata.name Kubernetes would refuse (at the name's own line)",
            "the HAProxyTemplateConfig's metadata (config.yaml)",
            |config| replace_once(config, "  name: haptor-ingress\n", "  name: Bad_Name\n"),
            &[
                &config_line(|config| config.to_string(), "  name: haptor-ingress"),
                "metadata.name \"Bad_Name\" is not a name Kubernetes accepts",
            ],
        ),
        new_file(
            Manifest,
            "a YAML alias bomb",
            "bad.yaml",
            bomb,
            &["bad.yaml:1", "malformed YAML"],
        ),
        row(
            Manifest,
            "a 100 MB document",
            "a manifest file of the folder",
            |local| {
                let mut text = String::from(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n  big: \"",
                );
                text.push_str(&"x".repeat(100 * 1024 * 1024));
                text.push_str("\"\n");
                local.write("huge.yaml", &text);
            },
            |local| remove(local, "huge.yaml"),
            &["huge.yaml", "MiB"],
        ),
        row(
            Manifest,
            "non-UTF-8 bytes",
            "a manifest file of the folder",
            move |local| {
                let mut bytes = service("latin").into_bytes();
                bytes.extend_from_slice(b"  labels: {owner: caf\xe9}\n");
                std::fs::write(local.dir.join("latin.yaml"), bytes).expect("write");
            },
            |local| remove(local, "latin.yaml"),
            &["latin.yaml:6", "UTF-8"],
        ),
        new_file(
            Manifest,
            "a document without kind",
            "bad.yaml",
            "apiVersion: v1\nmetadata: {name: nokind}\n".into(),
            &["bad.yaml:1", "the document has no kind"],
        ),
        new_file(
            Manifest,
            "a document without apiVersion",
            "bad.yaml",
            "kind: Service\nmetadata: {name: noversion}\n".into(),
            &["bad.yaml:1", "the document has no apiVersion"],
        ),
        new_file(
            Manifest,
            "a document without a name",
            "bad.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {namespace: default}\n".into(),
            &["bad.yaml:1", "the document has no metadata.name"],
        ),
        new_file(
            Manifest,
            "the same object twice in one file",
            "twice.yaml",
            format!("{}---\n{}", service("twin"), service("twin")),
            &["twice.yaml:", "Service default/twin is defined twice in this file (first at line 1)"],
        ),
        new_file(
            Manifest,
            "the same object in two files",
            "zz-again.yaml",
            service("app-a").replace("port: 80}", "port: 80, targetPort: 1}"),
            &["zz-again.yaml:1", "Service default/app-a is also defined at", "apps.yaml"],
        ),
        new_file(
            Manifest,
            "an object of a kind the config does not watch",
            "unwatched.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\ndata: {a: b}\n".into(),
            &["unwatched.yaml:1", "ConfigMap default/settings is not read by the config"],
        ),
        new_file(
            Manifest,
            "an object of a misspelt kind",
            "typo.yaml",
            "apiVersion: v1\nkind: Servce\nmetadata: {name: app-c, namespace: default}\nspec:\n  ports: [{name: http, port: 80}]\n".into(),
            &["typo.yaml:1", "Servce default/app-c is not read by the config", "did you mean kind Service?"],
        ),
        row(
            Manifest,
            "an EndpointSlice port written as a string",
            "a manifest file of the folder",
            |local| {
                let apps = local.read("apps.yaml");
                std::fs::write(local.dir.with_file_name("apps.yaml.good"), &apps)
                    .expect("keep the good apps");
                // app-a-1's ports, the first at the top level of a document.
                let anchor = "\nports: [{name: http, port: ";
                let at = apps.find(anchor).expect("app-a's slice has ports") + anchor.len();
                let digits = apps[at..].find('}').expect("the port ends");
                let quoted = format!(
                    "{}\"{}\"{}",
                    &apps[..at],
                    &apps[at..at + digits],
                    &apps[at + digits..]
                );
                local.write("apps.yaml", &quoted);
            },
            |local| {
                let good = std::fs::read_to_string(local.dir.with_file_name("apps.yaml.good"))
                    .expect("the good apps");
                local.write("apps.yaml", &good);
            },
            &[
                "apps.yaml:9",
                "EndpointSlice default/app-a-1: ports[0].port: expected an integer, got the string",
                "its last good version stays",
            ],
        ),
        row(
            Manifest,
            "a file replaced by a directory",
            "a manifest file of the folder",
            |local| {
                let path = local.dir.join("ingresses.yaml");
                std::fs::write(local.dir.with_file_name("ingresses.yaml.good"), local.read("ingresses.yaml"))
                    .expect("keep the good Ingresses");
                std::fs::remove_file(&path).expect("remove ingresses.yaml");
                std::fs::create_dir(&path).expect("a directory in its place");
            },
            |local| {
                let path = local.dir.join("ingresses.yaml");
                std::fs::remove_dir_all(&path).expect("remove the directory");
                let good = std::fs::read_to_string(local.dir.with_file_name("ingresses.yaml.good"))
                    .expect("the good Ingresses");
                local.write("ingresses.yaml", &good);
            },
            &["ingresses.yaml", "is a directory"],
        ),
    ]
}

fn hostile_field_rows() -> Vec<Row> {
    use Category::HostileField;
    vec![
        hostile_ingress("a newline in a host", "host-newline", "\"evil.localhost\\nglobal\\n  lua-load /tmp/x.lua\"", "/"),
        hostile_ingress("a quote in a host", "host-quote", "'evil\"q.localhost'", "/"),
        hostile_ingress("'#' in a host", "host-hash", "\"evil#x.localhost\"", "/"),
        hostile_ingress("spaces and HAProxy keywords in a host", "host-keywords", "\"a.localhost use_backend be_unavailable if TRUE\"", "/"),
        hostile_ingress("a newline in a path", "path-newline", "path-newline.localhost", "\"/x\\n  lua-load /tmp/x.lua\""),
        hostile_ingress("a space in a path", "path-space", "path-space.localhost", "\"/a b\""),
        hostile_ingress("'#' in a path", "path-hash", "path-hash.localhost", "\"/a#b\""),
        hostile_annotation(
            "a newline and a keyword in an annotation value",
            "ann-newline",
            "haproxy.org/timeout-server",
            "\"5s\\n  lua-load /tmp/x.lua\"",
        ),
        hostile_annotation(
            "a quote in an annotation value",
            "ann-quote",
            "haproxy.org/auth-realm",
            "'a\" realm', haproxy.org/auth-type: basic-auth",
        ),
        hostile_annotation("'#' in an annotation value", "ann-hash", "haproxy.org/load-balance", "\"roundrobin # x\""),
        hostile_annotation(
            "HAProxy keywords in an annotation value",
            "ann-keywords",
            "haproxy.org/allow-list",
            "\"10.0.0.0/8 } use_backend be_unavailable if { always_true\"",
        ),
        hostile_annotation(
            "an annotation naming a file path",
            "ann-path",
            "haproxy.org/auth-secret",
            "\"../../../etc/shadow\", haproxy.org/auth-type: basic-auth",
        ),
        new_file(
            HostileField,
            "a newline in a Secret name an Ingress names",
            "hostile.yaml",
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: tls-newline, namespace: default}\nspec:\n  ingressClassName: haptor\n  tls: [{hosts: [tls-newline.localhost], secretName: \"secure-tls\\nlua-load /x\"}]\n  rules:\n    - host: tls-newline.localhost\n      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: app-a, port: {number: 80}}}}]}\n".into(),
            &["Ingress default/tls-newline is served without some of its parts", "spec.tls[0]: no TLS Secret"],
        ),
        new_file(
            HostileField,
            "a space in a Secret's own name",
            "hostile.yaml",
            "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata: {name: \"bad name\", namespace: default}\ndata: {}\n".into(),
            &["hostile.yaml:4", "metadata.name \"bad name\" is not a name Kubernetes accepts"],
        ),
        new_file(
            HostileField,
            "a newline in a Service name an Ingress names",
            "hostile.yaml",
            ingress("svc-newline", "", "svc-newline.localhost", "/", "\"app-a\\n  lua-load /x\""),
            &["Ingress default/svc-newline is served without some of its parts", "is not a Service name and port"],
        ),
        new_file(
            HostileField,
            "'#' in a Service's own name",
            "hostile.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: \"app#1\", namespace: default}\nspec: {ports: [{port: 80}]}\n".into(),
            &["hostile.yaml:3", "metadata.name \"app#1\""],
        ),
        new_file(
            HostileField,
            "a newline in an Ingress's own name",
            "hostile.yaml",
            ingress("\"x\\nglobal\"", "", "x.localhost", "/", "app-a"),
            &["hostile.yaml:4", "is not a name Kubernetes accepts for kind Ingress"],
        ),
        tls_row(
            "a TLS Secret whose certificate is invalid",
            |local| {
                tls_secret(
                    local,
                    Some("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"),
                    None,
                )
            },
            &["semantic", "haproxy.cfg:", "secure-tls"],
        ),
        tls_row(
            "a TLS Secret whose certificate has expired",
            |local| {
                let read = |file: &str| {
                    std::fs::read_to_string(local::repo("tests/data").join(file)).expect("test data")
                };
                tls_secret(local, Some(&read("expired.pem")), Some(&read("expired.key")))
            },
            &["certificates", "ssl/default_secure-tls.pem: the certificate expired at 2020-01-02T00:00:00Z"],
        ),
        tls_row(
            "a TLS Secret whose key does not match its certificate",
            |local| tls_secret(local, None, Some(&other_private_key())),
            &["semantic", "haproxy.cfg:", "secure-tls"],
        ),
        tls_row(
            "a TLS Secret without a PEM key",
            |local| tls_secret(local, None, Some("not a key\n")),
            &["Ingress default/secure is served without some of its parts", "holds no PEM private key"],
        ),
    ]
}

/// The library with a map of integers (a weight per Ingress host, from its `weight`
/// annotation) that the frontend reads with `map_str_int`.
fn with_weights_map(config: &str) -> String {
    let config = replace_once(
        config,
        "        http-request set-var(txn.path) path\n",
        "        http-request set-var(txn.path) path\n        http-request set-var(txn.weight) var(txn.host),map_str_int({{path_for \"weights.map\" \"map\"}},0)\n",
    );
    replace_once(
        &config,
        "  maps:\n",
        "  maps:\n    weights.map:\n      template: |\n        {{#resources \"ingresses\" as |ing|}}\n        {{ing.metadata.name}}.localhost {{default (dig ing \"metadata\" \"annotations\" \"weight\") \"1\"}}\n        {{/resources}}\n",
    )
}

fn config_rows() -> Vec<Row> {
    use Category::Config;
    let enters = "the haproxy.cfg the templates render";
    vec![
        row(
            Config,
            "a map line only the runtime API refuses (not an integer in a map_str_int map)",
            "a map file, changed live without haproxy -c",
            |local| {
                let original = local.read("config.yaml");
                std::fs::write(local.dir.with_file_name("config.yaml.good"), &original)
                    .expect("keep the good config");
                let before = deployed_checksum(local);
                local.write("config.yaml", &with_weights_map(&original));
                eventually("the weights map deployed", Duration::from_secs(30), || {
                    let now = deployed_checksum(local);
                    (now != before && !now.is_empty()).then_some(())
                });
                // Only a map entry changes: no haproxy -c, the runtime API is asked.
                local.write(
                    "heavy.yaml",
                    &ingress(
                        "heavy",
                        "weight: not-a-number",
                        "heavy.localhost",
                        "/",
                        "app-a",
                    ),
                );
            },
            |local| {
                remove(local, "heavy.yaml");
                let good = std::fs::read_to_string(local.dir.with_file_name("config.yaml.good"))
                    .expect("the good config");
                local.write("config.yaml", &good);
            },
            &[
                "deploy:local",
                "unable to parse 'not-a-number'",
                "maps/weights.map",
            ],
        ),
        config_edit(
            Config,
            "a config haproxy -c rejects (a bind on a port number out of range)",
            enters,
            |config| {
                replace_once(
                    config,
                    "  maxconn 4096\n",
                    "  maxconn 4096\n      {{#if true}}{{/if}}\n",
                )
                .replacen(
                    "    frontend status\n",
                    "    frontend status\n      bind 127.0.0.1:70000\n",
                    1,
                )
            },
            &["haproxy.cfg:"],
        ),
        config_edit(
            Config,
            "a config the schema check rejects (an unknown keyword)",
            enters,
            in_haproxy_cfg("  frobnicate on\n      "),
            &["schema", "haproxy.cfg:", "frobnicate"],
        ),
    ]
}

#[test]
fn bad_templates_are_reported_at_their_template_and_line_and_the_last_good_config_keeps_serving() {
    let (mut local, good) = start();
    run_rows(&mut local, &good, &template_rows());
}

#[test]
fn bad_manifests_are_reported_at_their_file_and_line_and_the_last_good_config_keeps_serving() {
    let (mut local, good) = start();
    run_rows(&mut local, &good, &manifest_rows());
}

#[test]
fn hostile_fields_are_refused_or_left_out_with_their_object_and_field_and_the_last_good_config_keeps_serving()
 {
    let (mut local, good) = start();
    run_rows(&mut local, &good, &hostile_field_rows());
    // Nothing hostile reached a file haproxy reads.
    let work = local.work();
    for entry in walk(&work) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains("lua-load"),
            "{} holds a lua-load",
            entry.display()
        );
    }
}

#[test]
fn configs_haproxy_or_the_schema_check_rejects_are_reported_at_their_line_and_the_last_good_config_keeps_serving()
 {
    let (mut local, good) = start();
    run_rows(&mut local, &good, &config_rows());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

// ----- deploy-side faults -----

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`8m`) on a new temp dir. Needs root, as CI and these
    /// machines run the tests.
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "mounting a tmpfs failed: the full-disk row needs root (CI runs as root)"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes zeros into `file` until the file system is full.
fn fill(file: &Path) {
    use std::io::Write;
    let mut out = std::fs::File::create(file).expect("the filler");
    let chunk = vec![0u8; 64 * 1024];
    while out.write_all(&chunk).is_ok() {}
    for _ in 0..4096 {
        if out.write_all(&[0u8; 64]).is_err() && out.write_all(&[0u8]).is_err() {
            break;
        }
    }
    let _ = out.flush();
}

/// The newest error of `/debug/vars/errors` since `since` whose text holds every part.
fn error_since(local: &Local, since: u128, parts: &[&str]) -> Option<String> {
    let (_, errors) = local.debug_json("/debug/vars/errors")?;
    errors.as_array()?.iter().rev().find_map(|record| {
        let at = record["at_ms"].as_u64().map(u128::from)?;
        let text = record_text(record);
        (at + 50 >= since && parts.iter().all(|part| text.contains(part))).then_some(text)
    })
}

#[test]
fn a_full_work_dir_is_reported_with_the_file_nothing_half_written_is_loaded_and_space_again_deploys()
 {
    let disk = Tmpfs::mount("16m");
    let work = disk.path().join("work");
    let (a, b) = (backend("app-a").port, backend("app-b").port);
    let mut setup = Setup::quickstart(a, b);
    setup.args = vec!["--work-dir".into(), work.display().to_string()];
    let local = setup.start();
    local.wait_ready(Duration::from_secs(60));
    assert_serving(&local, "before the disk fills");
    let cfg_before = std::fs::read_to_string(work.join("haproxy.cfg")).expect("the deployed cfg");

    let filler = disk.path().join("filler");
    fill(&filler);
    let since = now_ms();
    // A structural change (its own backend, for the annotation): haproxy.cfg is written.
    local.write(
        "full.yaml",
        &ingress(
            "full",
            "haproxy.org/timeout-server: 7s",
            "full.localhost",
            "/",
            "app-a",
        ),
    );
    let error = eventually("the deployment's ENOSPC", Duration::from_secs(30), || {
        error_since(&local, since, &["deploy:local", "No space left on device"])
    });
    eprintln!("reported: {error}");
    assert!(
        error.contains(&work.display().to_string()),
        "names the file: {error}"
    );
    assert_serving(&local, "with the disk full");
    assert_eq!(
        get(local.http, "full.localhost", "/").map(|(status, _)| status),
        Some(404),
        "the change is not live"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("haproxy.cfg")).expect("cfg"),
        cfg_before,
        "nothing half-written replaced the deployed haproxy.cfg"
    );
    let leftovers: Vec<String> = walk(&work)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with(".tmp"))
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary files left: {leftovers:?}"
    );
    // The deployer records the error before it logs it: wait for the line.
    eventually("the log to say so", Duration::from_secs(30), || {
        local
            .log_text()
            .contains("No space left on device")
            .then_some(())
    });
    assert!(!local.log_text().contains("panicked"));

    // Space again: the deployer's retry deploys the change.
    std::fs::remove_file(&filler).expect("free the disk");
    eventually("full.localhost deployed", Duration::from_secs(60), || {
        get(local.http, "full.localhost", "/").filter(|(_, body)| body == "hello from app-a\n")
    });
    assert_serving(&local, "after the disk has room again");
    drop(local);
}

#[test]
fn a_runtime_socket_that_refuses_connections_is_reported_and_the_change_is_still_deployed() {
    let (a, b) = (backend("app-a").port, backend("app-b").port);
    let local = Setup::quickstart(a, b).start();
    local.wait_ready(Duration::from_secs(60));
    assert_serving(&local, "before the socket refuses");
    // A socket file nobody listens on: connections to it are refused.
    let socket = local.work().join("runtime.sock");
    std::fs::remove_file(&socket).expect("remove runtime.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("a dead socket"));
    let since = now_ms();
    local.move_first_endpoint_port(a, b);
    let error = eventually("the refused runtime API", Duration::from_secs(30), || {
        error_since(&local, since, &["runtime.sock"])
    });
    eprintln!("reported: {error}");
    assert!(
        error.contains("refused") || error.contains("Connection refused"),
        "{error}"
    );
    // The change still reaches haproxy, and the routes it did not touch kept answering.
    eventually(
        "a.localhost moved to app-b",
        Duration::from_secs(60),
        || get(local.http, "a.localhost", "/").filter(|(_, body)| body == "hello from app-b\n"),
    );
    assert_eq!(
        get(local.http, "b.localhost", "/")
            .map(|(_, body)| body)
            .as_deref(),
        Some("hello from app-b\n")
    );
    assert!(!local.log_text().contains("panicked"));
}

#[test]
fn every_row_of_the_catalogue_is_counted() {
    let tables = [
        template_rows(),
        manifest_rows(),
        hostile_field_rows(),
        config_rows(),
    ];
    let mut counts = std::collections::BTreeMap::new();
    for row in tables.iter().flatten() {
        *counts.entry(row.category).or_insert(0) += 1;
    }
    let total: usize = counts.values().sum();
    eprintln!("bad-input catalogue: {total} rows through haptor local: {counts:?}");
    assert!(total >= 40 - DEPLOY_SIDE_ROWS, "{counts:?}");
}

/// The deploy-side rows of the catalogue, run by their own tests: the full work dir, the
/// refusing runtime socket, and the four Data Plane API faults.
const DEPLOY_SIDE_ROWS: usize = 6;

mod data_plane_faults {
    //! The Data Plane API rows: one controller deploys to two instances, a real haproxy
    //! (the local target) and a Data Plane target whose API (the strict stub) is told to
    //! fail. Each fault must be reported naming the instance and what the API did, must not
    //! hold up the healthy instance, must leave the API's configuration as it was (nothing
    //! half-pushed is taken), and once the API behaves again the change reaches it.

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use haptor::actors::context::ControllerSettings;
    use haptor::actors::controller::ServerAddresses;
    use haptor::drivers::dataplane::{DataplaneSettings, DataplaneTarget};
    use haptor::drivers::local::{HaproxyProcess, LocalTarget, WorkDir};
    use haptor::drivers::memory_source::MemorySource;
    use haptor::drivers::pipeline::FullPipeline;
    use haptor::messages::{Instance, Leadership};
    use haptor::pure::config::config_from_yaml;
    use haptor::pure::deploy::DeployTarget;
    use serde_json::json;

    use super::controller::{ControllerSetup, RunningController, config_yaml};
    use super::dataplane_stub::{Fault, PASSWORD, Stub, USER};

    /// The config, with `{port}` where its frontend's port goes.
    const CONFIG: &str = config_yaml!(
        "faults",
        r#"      defaults
        mode http
        timeout connect 1s
        timeout client 5s
        timeout server 5s
      frontend fe
        bind 127.0.0.1:{port}
      {{#resources "services" as |svc|}}
        maxconn {{svc.metadata.annotations.maxconn}}
        default_backend be
      backend be
        server s 127.0.0.1:{{svc.metadata.annotations.port}}
      {{/resources}}
"#
    );

    fn config(port: u16) -> String {
        CONFIG.replace("{port}", &port.to_string())
    }

    fn service(backend: u16, maxconn: u32) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "app", "namespace": "default",
                            "annotations": {"port": backend.to_string(),
                                            "maxconn": maxconn.to_string()}}})
    }

    async fn until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(started.elapsed() < timeout, "timed out waiting for: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_data_plane_api_that_fails_answers_garbage_hangs_or_conflicts_is_reported_and_the_other_instance_keeps_serving()
     {
        let haproxy = haptor::drivers::haproxy_check::haproxy_binary();
        let app = super::backend("app").port;
        let frontend = super::support::free_port();
        let stub = Stub::start("v3.4.0").await;
        let mut settings = DataplaneSettings::new(format!("http://{}", stub.addr), USER, PASSWORD);
        settings.connect_timeout = Duration::from_secs(1);
        settings.request_timeout = Duration::from_secs(2);
        settings.reload_timeout = Duration::from_secs(5);
        settings.reload_poll_interval = Duration::from_millis(10);
        settings.max_version_retries = 2;
        let dp: Arc<dyn DeployTarget> =
            Arc::new(DataplaneTarget::new("dp", settings).expect("the Data Plane target"));
        let dir = tempfile::tempdir().expect("tmp");
        let work = WorkDir::new(dir.path()).expect("work dir");
        let mut process = HaproxyProcess::start(&haproxy, &work)
            .await
            .expect("haproxy starts");
        let local: Arc<dyn DeployTarget> =
            Arc::new(LocalTarget::open("local", work).expect("the local target"));

        let source = MemorySource::new();
        source.apply(service(app, 100));
        let yaml = config(frontend);
        let RunningController {
            controller,
            config: _config,
            leadership: _leadership,
            instances: _instances,
            ..
        } = ControllerSetup {
            config: Arc::new(config_from_yaml("faults.yaml", &yaml).expect("the config parses")),
            leadership: Leadership {
                is_leader: true,
                epoch: 1,
            },
            instances: vec![
                Instance {
                    name: "local".into(),
                    target: local,
                },
                Instance {
                    name: "dp".into(),
                    target: dp,
                },
            ],
            resources: Arc::new(source.clone()),
            pipeline: Arc::new(FullPipeline::new(
                haptor::drivers::haproxy_check::validator(&haproxy, 8),
            )),
            settings: ControllerSettings {
                deploy_backoff_base: Duration::from_millis(200),
                deploy_backoff_max: Duration::from_secs(1),
                ..ControllerSettings::default()
            },
            addresses: ServerAddresses::default(),
        }
        .start()
        .await;
        let introspection = controller.services.introspection.clone();
        let served = || super::get(frontend, "x", "/").map(|(_, body)| body);
        until("both instances deployed", Duration::from_secs(30), || {
            (stub.state().config.contains("maxconn 100")
                && served().as_deref() == Some("hello from app\n"))
            .then_some(())
        })
        .await;

        for (n, (fault, said)) in [
            (Fault::ServerError, "500"),
            (Fault::Garbage, "JSON"),
            (Fault::Hang, "timed out"),
            (Fault::ConflictStorm, "409"),
        ]
        .into_iter()
        .enumerate()
        {
            let row = format!("the Data Plane API row {fault:?}");
            let maxconn = 101 + n as u32;
            let before = stub.state().config.clone();
            stub.state().fault = Some(fault);
            let since = std::time::SystemTime::now();
            source.apply(service(app, maxconn));
            let started = Instant::now();
            let error = loop {
                let errors = introspection.errors();
                let found = errors.iter().rev().find(|e| {
                    e.source == "deploy:dp"
                        && e.message.contains(said)
                        && std::time::UNIX_EPOCH
                            + Duration::from_millis(e.at_ms as u64)
                            + Duration::from_millis(50)
                            >= since
                });
                if let Some(found) = found {
                    break found.clone();
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "{row}: no error of deploy:dp saying {said:?}; the errors: {errors:#?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            eprintln!("{row}: reported as {}", error.message);
            // The healthy instance took the change and serves.
            until(
                &format!("{row}: the local instance deployed"),
                Duration::from_secs(30),
                || {
                    std::fs::read_to_string(dir.path().join("haproxy.cfg"))
                        .ok()
                        .filter(|cfg| cfg.contains(&format!("maxconn {maxconn}")))
                },
            )
            .await;
            assert_eq!(
                served().as_deref(),
                Some("hello from app\n"),
                "{row}: traffic flows"
            );
            assert_eq!(
                stub.state().config,
                before,
                "{row}: the API's configuration is as it was"
            );
            // The API behaves again: the retry brings the change.
            stub.state().fault = None;
            until(
                &format!("{row}: the API converged"),
                Duration::from_secs(30),
                || {
                    stub.state()
                        .config
                        .contains(&format!("maxconn {maxconn}"))
                        .then_some(())
                },
            )
            .await;
        }
        controller.stop().await;
        process.stop().await.expect("haproxy stops");
    }
}
