//! The Data Plane API credentials Secret when nobody gave one (`haptor run
//! --create-credentials-secret NAME`, which the chart passes when
//! `haproxy.credentials.password` and `existingSecret` are empty): the Secret NAME of
//! haptor's namespace is created once, with `dataplane_username: admin` and a random
//! `dataplane_password` (24 bytes from the system's randomness, base64url: 32 characters),
//! and never changed afterwards. Every replica tries at start; the API server keeps the
//! first and answers the others 409 (AlreadyExists), so replicas never disagree and a
//! Secret that exists (from an earlier start, or the user's) is left alone. The HAProxy pods
//! read it (their init container's environment), so they wait until it exists; haptor reads
//! it through the config's `credentialsSecretRef` like any other.
//!
//! Creating needs `create` on secrets in haptor's namespace, which RBAC cannot narrow to one
//! name (the name of an object being created is not part of what RBAC authorizes); nothing
//! here reads, updates or deletes a Secret.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::drivers::kube::credentials::{PASSWORD_KEY, USERNAME_KEY};

/// The user the generated Secret names.
pub const USERNAME: &str = "admin";
/// Random bytes in a generated password.
const PASSWORD_BYTES: usize = 24;
/// How long one create may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two tries.
const RETRY_LONGEST: Duration = Duration::from_secs(30);

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsSecret {
    pub namespace: String,
    pub name: String,
}

/// Why the Secret was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("no system randomness for the password: {0}")]
    Random(String),
    #[error("creating Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating Secret {namespace}/{name}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { namespace: String, name: String },
}

/// What one try found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// This replica created it.
    Created,
    /// It existed already; left as it is.
    Existed,
}

/// Creates the Secret unless it exists, retrying (1 s doubling to 30 s) until the API
/// server answers either way; the task then ends.
pub fn spawn(client: Client, secret: CredentialsSecret) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = Duration::from_secs(1);
        let mut last_error: Option<String> = None;
        loop {
            match create_once(client.clone(), &secret).await {
                Ok(Created::Created) => {
                    tracing::info!(namespace = %secret.namespace, secret = %secret.name, "created the Data Plane API credentials Secret with a random password");
                    return;
                }
                Ok(Created::Existed) => {
                    tracing::debug!(namespace = %secret.namespace, secret = %secret.name, "the Data Plane API credentials Secret exists; left as it is");
                    return;
                }
                Err(e) => {
                    let message = e.to_string();
                    if last_error.as_deref() != Some(message.as_str()) {
                        tracing::warn!(error = %message, "the Data Plane API credentials Secret is not created yet; the HAProxy pods wait for it; retrying");
                        last_error = Some(message);
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_LONGEST);
                }
            }
        }
    })
}

/// One try: create, or find that it exists.
pub async fn create_once(
    client: Client,
    secret: &CredentialsSecret,
) -> Result<Created, CreateError> {
    let mut random = [0u8; PASSWORD_BYTES];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut random)
        .map_err(|e| CreateError::Random(format!("{e:?}")))?;
    let api: Api<Secret> = Api::namespaced(client, &secret.namespace);
    let object = secret_object(secret, &random);
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &object)).await {
        Ok(Ok(_)) => Ok(Created::Created),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Ok(Created::Existed),
        Ok(Err(source)) => Err(CreateError::Api {
            namespace: secret.namespace.clone(),
            name: secret.name.clone(),
            source,
        }),
        Err(_) => Err(CreateError::Timeout {
            namespace: secret.namespace.clone(),
            name: secret.name.clone(),
        }),
    }
}

/// The password made of `random`: base64url without padding (letters, digits, `-`, `_`:
/// nothing a shell, a userlist line or a URL quotes).
fn password(random: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
}

fn secret_object(secret: &CredentialsSecret, random: &[u8]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret.name.clone()),
            namespace: Some(secret.namespace.clone()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "haptor".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([
            (USERNAME_KEY.to_string(), USERNAME.to_string()),
            (PASSWORD_KEY.to_string(), password(random)),
        ])),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_secret_holds_the_admin_user_and_a_32_character_password() {
        let secret = secret_object(
            &CredentialsSecret {
                namespace: "haptor".into(),
                name: "haptor-dataplane".into(),
            },
            &[0xfb; PASSWORD_BYTES],
        );
        let data = secret.string_data.expect("string data");
        assert_eq!(data[USERNAME_KEY], "admin");
        let password = &data[PASSWORD_KEY];
        assert_eq!(password.len(), 32);
        assert!(
            password
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{password}"
        );
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    }
}
