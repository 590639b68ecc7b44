//! `haptor migrate --cluster`: the Ingresses, and the Services they name, read from the real
//! kube-apiserver of the test kit through a kubeconfig, judged by the embedded Ingress
//! library. The API server is shared with the other tests, so only this test's namespace
//! is looked at in the report.

use crate::kube_kit;
use crate::support;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use kube_kit::Kit;

async fn create<K>(client: &kube::Client, ns: &str, object: Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &object)
        .await
        .expect("the object is created");
}

fn ingress(name: &str, class: &str, annotations: Value) -> Value {
    json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "ingressClassName": class,
            "rules": [{ "host": format!("{name}.example"), "http": { "paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": { "service": { "name": "web", "port": { "number": 80 } } },
            }]}}],
        },
    })
}

/// The report's entries for namespace `ns`, by Ingress name: (verdict, left-out reasons).
fn verdicts(report: &Value, ns: &str) -> Vec<(String, String, String)> {
    report["ingresses"]
        .as_array()
        .expect("an ingresses list")
        .iter()
        .filter(|entry| entry["namespace"] == ns)
        .map(|entry| {
            let reasons: Vec<&str> = entry["left_out"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|l| l["reason"].as_str())
                .collect();
            (
                entry["name"].as_str().unwrap_or_default().to_string(),
                entry["verdict"].as_str().unwrap_or_default().to_string(),
                reasons.join("; "),
            )
        })
        .collect()
}

#[tokio::test]
async fn migrate_reads_the_ingresses_and_their_services_from_the_cluster() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("migrate").await;
    for name in ["web", "fallback"] {
        create::<Service>(
            &client,
            &ns,
            json!({"metadata": {"name": name},
                   "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
        )
        .await;
    }
    for (name, annotations) in [
        (
            "as-is",
            json!({"nginx.ingress.kubernetes.io/force-ssl-redirect": "true",
                   "nginx.ingress.kubernetes.io/default-backend": "fallback"}),
        ),
        (
            "mirrored",
            json!({"nginx.ingress.kubernetes.io/mirror-target": "https://mirror.example/"}),
        ),
        (
            "lost-fallback",
            json!({"nginx.ingress.kubernetes.io/default-backend": "nowhere"}),
        ),
    ] {
        create::<Ingress>(&client, &ns, ingress(name, "nginx", annotations)).await;
    }

    let kubeconfig = kit.admin_kubeconfig().to_string_lossy().into_owned();
    let output = support::haptor(&[
        "migrate",
        "--cluster",
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ]);
    let text = support::text(&output);
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("migrate --cluster prints a JSON report ({e}):\n{text}"));
    let mut got = verdicts(&report, &ns);
    got.sort();
    let expected = [
        ("as-is", "as-is", ""),
        (
            "lost-fallback",
            "with-parts",
            "annotation nginx.ingress.kubernetes.io/default-backend: no Service 'nowhere' in namespace NS",
        ),
        (
            "mirrored",
            "with-parts",
            "annotation nginx.ingress.kubernetes.io/mirror-target is not supported",
        ),
    ];
    assert_eq!(got.len(), expected.len(), "{got:?}\n{text}");
    for ((name, verdict, reasons), (want_name, want_verdict, want_reason)) in
        got.iter().zip(expected)
    {
        let want_reason = want_reason.replace("NS", &ns);
        assert!(
            name == want_name && verdict == want_verdict && reasons.contains(&want_reason),
            "{name}: {verdict} ({reasons}); expected {want_name}: {want_verdict} ({want_reason})\n{text}"
        );
    }
}
