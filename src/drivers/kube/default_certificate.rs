//! The default TLS certificate's Secret in a cluster (`haptor run
//! --default-certificate-secret NAME`, which the chart passes): the kubernetes.io/tls Secret
//! NAME of haptor's namespace is created once with a self-signed certificate
//! (`drivers::default_certificate`) when it is missing, and never changed afterwards (replace
//! it with a certificate of your own, or delete it to have a new one made at the next
//! start). Every replica tries at start; the API server keeps the first and answers the
//! others 409, so replicas never disagree. The templates read it like any TLS Secret.
//!
//! Creating needs `create` on secrets in haptor's namespace (RBAC cannot narrow a create to
//! one name); nothing here reads, updates or deletes a Secret.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::drivers::default_certificate::{CertificatePair, generate};

/// How long one create may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two tries.
const RETRY_LONGEST: Duration = Duration::from_secs(30);

/// Creates the Secret `namespace/name` unless it exists, retrying (1 s doubling to 30 s)
/// until the API server answers either way; the task then ends.
pub fn spawn(client: Client, namespace: String, name: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = Duration::from_secs(1);
        let mut last_error: Option<String> = None;
        loop {
            match create_once(client.clone(), &namespace, &name).await {
                Ok(true) => {
                    tracing::info!(%namespace, secret = %name, "created the default TLS certificate (self-signed)");
                    return;
                }
                Ok(false) => {
                    tracing::debug!(%namespace, secret = %name, "the default TLS certificate's Secret exists; left as it is");
                    return;
                }
                Err(message) => {
                    if last_error.as_ref() != Some(&message) {
                        tracing::warn!(error = %message, "the default TLS certificate is not created yet; retrying");
                        last_error = Some(message);
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_LONGEST);
                }
            }
        }
    })
}

/// One try: true when this replica created it, false when it existed.
pub async fn create_once(client: Client, namespace: &str, name: &str) -> Result<bool, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    let pair = generate(now).map_err(|e| format!("generating the certificate: {e}"))?;
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let object = secret_object(namespace, name, &pair);
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &object)).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Ok(false),
        Ok(Err(e)) => Err(format!("creating Secret {namespace}/{name}: {e}")),
        Err(_) => Err(format!(
            "creating Secret {namespace}/{name}: no answer within {REQUEST_TIMEOUT:?}"
        )),
    }
}

fn secret_object(namespace: &str, name: &str, pair: &CertificatePair) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "haptor".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_string(),
                ByteString(pair.cert.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(pair.key.clone().into_bytes()),
            ),
        ])),
        ..Secret::default()
    }
}
