//! `haptor run`'s HTTP resources against the real kube-apiserver: the credential of
//! `auth.secretRef` is read from the Secret (listed by name, as the chart's RBAC allows),
//! a missing Secret is a failed fetch told in an Event, and the Secret once created is used
//! by the next fetch.

use crate::haptor_run;
use crate::kube_kit;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use haptor::pure::config::{HAProxyCfg, HAProxyTemplateConfig};
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Api, PostParams};
use serde_json::json;

use haptor_run::{Replica, create_ingress, library_config, no_election, wait_for, wait_for_event};
use kube_kit::Kit;

const LIST: &str = "192.0.2.0/24\n";

/// A list server answering 200 with [`LIST`] to requests carrying `Authorization: Bearer
/// s3cret`, 401 to others; counts the authorized ones.
fn list_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/deny.txt", listener.local_addr().expect("addr"));
    let authorized = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&authorized);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0u8; 4096];
            let read = stream.read(&mut request).unwrap_or(0);
            let request = String::from_utf8_lossy(&request[..read]).to_lowercase();
            if request.contains("authorization: bearer s3cret") {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{LIST}",
                    LIST.len()
                );
            } else {
                let _ = write!(
                    stream,
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        }
    });
    (url, authorized)
}

#[tokio::test]
async fn an_http_resource_is_fetched_with_the_token_of_its_secret_once_the_secret_exists() {
    let kit = Kit::shared();
    let client = kit.admin().await;
    let ns = kit.temp_ns("run-http").await;
    let (url, authorized) = list_server();

    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "ports": [{ "name": "http", "port": 80, "targetPort": 8080 }] },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service is created");
    create_ingress(&client, &ns, "web", "haptor", "web.example").await;
    let mut config = library_config(&ns, no_election());
    config.spec.http_resources = serde_json::from_value(json!({
        "client-deny-list": {
            "url": url,
            "refreshInterval": "500ms",
            "retries": 0,
            "auth": { "type": "bearer", "secretRef": { "name": "deny-list-token" } },
        }
    }))
    .expect("the HTTP resources");
    Api::<HAProxyTemplateConfig>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &config)
        .await
        .expect("the config is created");
    let replica = Replica::start(kit.admin_kubeconfig(), &ns, "solo");

    // No Secret yet: the fetch fails, naming it, and an Event says so; the deny rule is
    // rendered (the list is on) over an empty list.
    let event = wait_for_event(&client, &ns, "HTTPResourceFetchFailed", &[&replica]).await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("client-deny-list") && note.contains(&format!("Secret {ns}/deny-list-token")),
        "{note}"
    );
    assert_eq!(authorized.load(Ordering::SeqCst), 0);
    let published = || async {
        Api::<HAProxyCfg>::namespaced(client.clone(), &ns)
            .get_opt("haptor-config")
            .await
            .ok()
            .flatten()
    };
    let failing = wait_for(
        "the HAProxyCfg status naming the failure",
        &[&replica],
        || async {
            published()
                .await
                .filter(|c| c.spec.content.contains("client-deny-list.map"))?
                .status?
                .http_resources
                .into_iter()
                .find(|r| r.name == "client-deny-list" && r.last_error.is_some())
        },
    )
    .await;
    assert_eq!(failing.url, url);
    assert_eq!(failing.bytes, None, "no content in use yet");

    // The Secret appears: the next fetch carries its token, and the list is in use.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "deny-list-token" },
        "stringData": { "token": "s3cret" },
    }))
    .expect("a Secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret is created");
    let series = "haptor_http_resource_bytes{resource=\"client-deny-list\"}";
    let bytes = wait_for("the list in use", &[&replica], || replica.metric(series)).await;
    assert_eq!(bytes, LIST.len() as f64);
    assert!(authorized.load(Ordering::SeqCst) >= 1);
    let in_use = wait_for(
        "the HAProxyCfg status with the list in use",
        &[&replica],
        || async {
            published()
                .await?
                .status?
                .http_resources
                .into_iter()
                .find(|r| r.name == "client-deny-list" && r.last_error.is_none())
        },
    )
    .await;
    assert_eq!(in_use.bytes, Some(LIST.len() as u64));
    assert!(in_use.in_use_since.is_some());
}
