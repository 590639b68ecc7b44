//! `labelSelector` and `namespaceSelector` of watched resources, through the real binary:
//! `haptor render --fixtures` and `haptor validate` leave out the objects the selectors
//! exclude (namespace labels coming from the Namespace manifests and fixtures present), an
//! invalid selector is refused naming its field and the character at fault, and under
//! `haptor local` relabelling a Namespace manifest moves its Ingresses in and out of routing.

use crate::support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, haproxy_binary, haptor, text};

/// Ingresses of tier frontend or edge, not deprecated, in namespaces of team web; and
/// IngressClasses (cluster-scoped, so the namespace selector lets them all through).
const WATCHED: &str = r#"  watchedResources:
    ingresses:
      apiVersion: networking.k8s.io/v1
      resources: ingresses
      indexBy: ["metadata.namespace", "metadata.name"]
      labelSelector: "tier in (frontend, edge),!deprecated"
      namespaceSelector: "team=web"
    ingressclasses:
      apiVersion: networking.k8s.io/v1
      resources: ingressclasses
      indexBy: ["metadata.name"]
      namespaceSelector: "team=web"
  haproxyConfig:
    template: |
      global
        maxconn 100
      {{#resources "ingresses" as |ing|}}
      # ingress {{ing.metadata.namespace}}/{{ing.metadata.name}}
      {{/resources}}
      {{#resources "ingressclasses" as |class|}}
      # class {{class.metadata.name}}
      {{/resources}}
"#;

fn config(extra: &str) -> String {
    format!(
        "apiVersion: haptor.dev/v1alpha1\nkind: HAProxyTemplateConfig\nmetadata: {{name: selectors}}\nspec:\n{WATCHED}{extra}"
    )
}

fn namespace(name: &str, team: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{team: {team}}}\n"
    )
}

fn ingress(namespace: &str, name: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels: {{{labels}}}\nspec: {{}}\n"
    )
}

/// The objects every selector test starts from: (namespace, name, labels, kept?).
const INGRESSES: [(&str, &str, &str, bool); 7] = [
    ("shop", "kept", "tier: frontend", true),
    ("shop", "edge-kept", "tier: edge", true),
    (
        "shop",
        "deprecated",
        "tier: frontend, deprecated: \"yes\"",
        false,
    ),
    ("shop", "backend-tier", "tier: backend", false),
    ("shop", "unlabelled", "", false),
    ("blog", "other-team", "tier: frontend", false),
    ("nowhere", "no-namespace-object", "tier: frontend", false),
];

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

#[test]
fn render_with_fixtures_leaves_out_the_objects_the_selectors_exclude() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixtures = tmp.path().join("fixtures");
    std::fs::create_dir(&fixtures).expect("mkdir");
    write(&tmp.path().join("config.yaml"), &config(""));
    write(
        &fixtures.join("namespaces.yaml"),
        &format!(
            "{}---\n{}",
            namespace("shop", "web"),
            namespace("blog", "docs")
        ),
    );
    let ingresses: Vec<String> = INGRESSES
        .iter()
        .map(|(ns, name, labels, _)| ingress(ns, name, labels))
        .collect();
    write(&fixtures.join("ingresses.yaml"), &ingresses.join("---\n"));
    write(
        &fixtures.join("class.yaml"),
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: haptor}\nspec: {controller: haptor.dev/ingress-controller}\n",
    );

    let config = tmp.path().join("config.yaml");
    let output = haptor(&[
        "render",
        "-f",
        config.to_str().expect("utf-8"),
        "--fixtures",
        fixtures.to_str().expect("utf-8"),
    ]);
    let out = text(&output);
    assert!(output.status.success(), "{out}");
    for (ns, name, _, kept) in INGRESSES {
        let line = format!("# ingress {ns}/{name}\n");
        assert_eq!(out.contains(&line), kept, "{ns}/{name} kept: {kept}\n{out}");
    }
    assert!(
        out.contains("# class haptor\n"),
        "cluster-scoped objects pass the namespace selector:\n{out}"
    );
}

/// A validation test's fixtures as YAML flow lists.
fn fixtures_yaml(namespaces: &[(&str, &str)]) -> String {
    let namespaces: Vec<String> = namespaces
        .iter()
        .map(|(name, team)| {
            format!("{{apiVersion: v1, kind: Namespace, metadata: {{name: {name}, labels: {{team: {team}}}}}}}")
        })
        .collect();
    let ingresses: Vec<String> = INGRESSES
        .iter()
        .map(|(ns, name, labels, _)| {
            format!("{{apiVersion: networking.k8s.io/v1, kind: Ingress, metadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}}}")
        })
        .collect();
    format!(
        "      fixtures:\n        namespaces: [{}]\n        ingresses: [{}]\n",
        namespaces.join(", "),
        ingresses.join(", ")
    )
}

#[test]
fn validate_shows_that_fixtures_the_selectors_exclude_never_reach_the_templates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut tests = String::from("  validationTests:\n    excluded-fixtures:\n");
    tests.push_str(&fixtures_yaml(&[("shop", "web"), ("blog", "docs")]));
    tests.push_str("      assertions:\n");
    tests.push_str("        - {type: match_count, pattern: '# ingress ', expected: '2'}\n");
    tests.push_str("        - {type: contains, pattern: '# ingress shop/kept\\n'}\n");
    tests.push_str("        - {type: contains, pattern: '# ingress shop/edge-kept\\n'}\n");
    for (ns, name, _, kept) in INGRESSES {
        if !kept {
            tests.push_str(&format!(
                "        - {{type: not_contains, pattern: '# ingress {ns}/{name}\\n'}}\n"
            ));
        }
    }
    // The same Ingresses, with the blog namespace relabelled by this test's own fixture.
    tests.push_str("    relabelled-namespace:\n");
    tests.push_str(&fixtures_yaml(&[("shop", "web"), ("blog", "web")]));
    tests.push_str("      assertions:\n");
    tests.push_str("        - {type: contains, pattern: '# ingress blog/other-team\\n'}\n");
    tests.push_str("        - {type: match_count, pattern: '# ingress ', expected: '3'}\n");
    let path = tmp.path().join("config.yaml");
    write(&path, &config(&tests));

    let output = haptor(&["validate", "-f", path.to_str().expect("utf-8")]);
    let out = text(&output);
    assert!(out.contains("PASS excluded-fixtures"), "{out}");
    assert!(out.contains("PASS relabelled-namespace"), "{out}");
    assert!(
        out.contains("validation tests: 2 passed, 0 failed"),
        "{out}"
    );
    assert!(output.status.success(), "{out}");
}

#[test]
fn an_invalid_selector_is_refused_with_its_field_path_and_the_character_at_fault() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("bad.yaml");
    let broken = config("")
        .replace(
            "labelSelector: \"tier in (frontend, edge),!deprecated\"",
            "labelSelector: \"tier in (frontend\"",
        )
        .replacen(
            "namespaceSelector: \"team=web\"",
            "namespaceSelector: \"!team=web\"",
            1,
        );
    write(&path, &broken);
    let file = path.to_str().expect("utf-8");
    for command in ["validate", "render"] {
        let output = haptor(&[command, "-f", file]);
        let out = text(&output);
        assert_eq!(output.status.code(), Some(1), "haptor {command}: {out}");
        assert!(
            out.contains(&format!(
                "{file}: spec.watchedResources.ingresses.labelSelector: 'tier in (frontend' is not a valid label selector: at character 18: expected ',' or ')' in the value list, found the end of the selector"
            )),
            "haptor {command}: {out}"
        );
        assert!(
            out.contains(&format!(
                "{file}: spec.watchedResources.ingresses.namespaceSelector: '!team=web' is not a valid label selector: at character 6: '!team' selects objects without the label and takes no operator or value; write 'team!=web' to exclude one value"
            )),
            "haptor {command}: {out}"
        );
    }
}

/// A backend answering every request with its name.
fn backend(name: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let body = format!("hello from {name}\n");
                let _ = write!(
                    stream,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

/// The status of `GET /` with `Host: host`, or None when nothing answered.
fn status(port: u16, host: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `haptor local` on a temp folder, stopped (with its haproxy) when dropped.
struct Local {
    child: Child,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Local {
    fn write(&self, file: &str, text: &str) {
        let path = self.dir.join(file);
        write(&path, text);
        // Visible to a scanner comparing modification times within one clock tick.
        let later = std::time::SystemTime::now() + Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("touch");
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let started = Instant::now();
            while matches!(self.child.try_wait(), Ok(None))
                && started.elapsed() < Duration::from_secs(15)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let master = std::fs::read_to_string(self.dir.join(".haptor/haproxy.pid"))
            .unwrap_or_default()
            .trim()
            .to_string();
        if !master.is_empty() && Path::new("/proc").join(&master).exists() {
            let _ = Command::new("pkill").args(["-9", "-P", &master]).status();
            let _ = Command::new("kill").args(["-9", &master]).status();
        }
        if std::thread::panicking() {
            let log =
                std::fs::read_to_string(self.dir.with_file_name("haptor.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- the last lines haptor local logged ---");
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn shop_namespace(routing: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {{routing: {routing}}}\n"
    )
}

/// A Service with its EndpointSlice and an Ingress for `host`, in `namespace`.
fn app(namespace: &str, host: &str, port: u16) -> String {
    let ingress = routed_ingress(namespace, "web", host, "{}");
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: app, namespace: {namespace}}}\nspec:\n  ports: [{{name: http, port: 80}}]\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: app-1\n  namespace: {namespace}\n  labels: {{kubernetes.io/service-name: app}}\naddressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n  - addresses: [\"127.0.0.1\"]\n---\n{ingress}"
    )
}

/// An Ingress for `host` to the Service `app` of its namespace, with `labels` (YAML flow).
fn routed_ingress(namespace: &str, name: &str, host: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: {namespace}, labels: {labels}}}\nspec:\n  ingressClassName: haptor\n  rules:\n    - host: {host}\n      http:\n        paths:\n          - {{path: /, pathType: Prefix, backend: {{service: {{name: app, port: {{number: 80}}}}}}}}\n"
    )
}

#[test]
fn relabelling_a_namespace_or_an_ingress_manifest_moves_the_ingress_in_and_out_of_routing() {
    let shop = backend("shop");
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cluster");
    std::fs::create_dir(&dir).expect("mkdir");
    let (http, https, status_port) = (free_port(), free_port(), free_port());
    let library = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/library/ingress.yaml"),
    )
    .expect("library");
    let config = library
        .replace("127.0.0.1:18080", &format!("127.0.0.1:{http}"))
        .replace("127.0.0.1:18443", &format!("127.0.0.1:{https}"))
        .replace("127.0.0.1:18404", &format!("127.0.0.1:{status_port}"))
        .replacen(
            "      resources: ingresses\n",
            "      resources: ingresses\n      namespaceSelector: routing=enabled\n      labelSelector: '!haptor.dev/hidden'\n",
            1,
        );
    assert!(config.contains("namespaceSelector: routing=enabled"));
    write(&dir.join("config.yaml"), &config);
    write(&dir.join("namespace.yaml"), &shop_namespace("enabled"));
    write(&dir.join("shop.yaml"), &app("shop", "shop.localhost", shop));
    // A namespace without a Namespace manifest has only its name label: never routed.
    write(
        &dir.join("other.yaml"),
        &app("other", "other.localhost", shop),
    );
    let hidden = |labels| routed_ingress("shop", "hidden", "hidden.localhost", labels);
    write(
        &dir.join("hidden.yaml"),
        &hidden("{haptor.dev/hidden: \"yes\"}"),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_haptor"))
        .args(["local", dir.to_str().expect("utf-8")])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
        ])
        .args(["--haproxy-bin", haproxy_binary().to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.path().join("haptor.log")).expect("log file"))
        .spawn()
        .expect("haptor local starts");
    let local = Local {
        child,
        dir,
        _tmp: tmp,
    };

    eventually(
        "shop.localhost routed while its namespace matches",
        Duration::from_secs(60),
        || status(http, "shop.localhost") == Some(200),
    );
    assert_eq!(
        status(http, "other.localhost"),
        Some(404),
        "the Ingress of an unselected namespace is not routed"
    );
    assert_eq!(
        status(http, "hidden.localhost"),
        Some(404),
        "an Ingress the label selector excludes is not routed"
    );

    // The label selector: an Ingress whose labels start, then stop, matching.
    local.write("hidden.yaml", &hidden("{}"));
    eventually(
        "hidden.localhost routed once its labels match",
        Duration::from_secs(30),
        || status(http, "hidden.localhost") == Some(200),
    );
    local.write("hidden.yaml", &hidden("{haptor.dev/hidden: \"again\"}"));
    eventually(
        "hidden.localhost gone once its labels stop matching",
        Duration::from_secs(30),
        || status(http, "hidden.localhost") == Some(404),
    );

    local.write("namespace.yaml", &shop_namespace("disabled"));
    eventually(
        "shop.localhost gone once its namespace stops matching",
        Duration::from_secs(30),
        || status(http, "shop.localhost") == Some(404),
    );

    local.write("namespace.yaml", &shop_namespace("enabled"));
    eventually(
        "shop.localhost back once its namespace matches again",
        Duration::from_secs(30),
        || status(http, "shop.localhost") == Some(200),
    );
    assert_eq!(status(http, "other.localhost"), Some(404));
}
