//! The admission webhook as the chart installs it: registered with the controller's own
//! certificate (the controller issues it, fills the caBundle and sets `failurePolicy: Fail`
//! once it answers), and called by the API server through the webhook Service, which
//! kube-proxy translates to a controller pod.

use crate::node_kit::Node;
use crate::release::Release;

use std::process::Command;

/// A `kubernetes.io/tls` Secret whose key does not match its certificate (haproxy refuses
/// to load it: the configuration fails `haproxy -c`).
fn mismatched_tls_secret(name: &str) -> String {
    let dir = tempfile::tempdir().expect("a temp dir");
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("openssl runs");
        assert!(output.status.success(), "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "one.key",
        "-out",
        "one.crt",
        "-days",
        "1",
        "-subj",
        "/CN=broken.example",
    ]);
    openssl(&["genrsa", "-out", "other.key", "2048"]);
    let base64 = |file: &str| {
        use base64::Engine;
        let bytes = std::fs::read(dir.path().join(file)).expect("openssl wrote it");
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        base64("one.crt"),
        base64("other.key")
    )
}

pub fn ingress(name: &str, host: &str, tls_secret: Option<&str>) -> String {
    let tls = tls_secret
        .map(|secret| format!("  tls:\n    - hosts: [\"{host}\"]\n      secretName: {secret}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
spec:
  ingressClassName: haptor
{tls}  rules:
    - host: {host}
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: web
                port:
                  number: 80
"
    )
}

pub const WEB_SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
    - port: 80
      targetPort: 8080
";

/// A namespace of applications with the Service `web` and the Secret `mismatched`.
pub fn applications(node: &Node) -> String {
    let apps = node.namespace("apps");
    let applied = node.apply(&apps, WEB_SERVICE);
    assert!(applied.status.success(), "{applied:?}");
    let applied = node.apply(&apps, &mismatched_tls_secret("mismatched"));
    assert!(applied.status.success(), "{applied:?}");
    apps
}

/// Waits until a server-side dry run of `ingress` in `ns` is refused by the webhook (until
/// the controller's stores hold the Secret it names, it may still pass); the refusal.
pub fn refused(node: &Node, ns: &str, ingress: &str) -> String {
    node.wait_for("the webhook to refuse the broken Ingress", || {
        let output = node.kubectl_output(
            &["-n", ns, "apply", "--dry-run=server", "-f", "-"],
            Some(ingress),
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (!output.status.success() && stderr.contains("denied the request")).then_some(stderr)
    })
}

#[test]
fn the_api_server_calls_the_webhook_through_its_service_refusing_a_bad_ingress_and_admitting_a_good_one()
 {
    let (node, _turn) = Node::take();
    let release = Release::install_wait(node, "webhook", &[]);

    let configuration = release.registered_webhook();
    for webhook in configuration["webhooks"].as_array().expect("webhooks") {
        assert_eq!(
            webhook["clientConfig"]["service"]["name"], "haptor-webhook",
            "the API server reaches the webhook through its Service: {webhook}"
        );
        assert!(webhook["clientConfig"]["url"].is_null(), "{webhook}");
    }

    // The chart keeps its own namespace out of the resources webhook: the applications'.
    let apps = &applications(node);
    let broken = ingress("broken-tls", "broken.example", Some("mismatched"));
    let refusal = refused(node, apps, &broken);
    assert!(
        refusal.contains("broken-tls"),
        "the refusal names the Ingress: {refusal}"
    );
    let created = node.apply(apps, &broken);
    assert!(!created.status.success(), "the broken Ingress is refused");
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(
        stderr.contains("haptor") && stderr.contains("denied the request"),
        "refused by haptor's webhook: {stderr}"
    );
    let stored = node.kubectl_output(&["-n", apps, "get", "ingress", "broken-tls"], None);
    assert!(!stored.status.success(), "a refused Ingress is not stored");

    let good = node.apply(apps, &ingress("good", "good.example", None));
    assert!(
        good.status.success(),
        "a good Ingress is admitted: {}",
        String::from_utf8_lossy(&good.stderr)
    );
}
