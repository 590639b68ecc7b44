//! The CredentialsLoader edge of `haptor run`: a watch on the one Secret the config's
//! `credentialsSecretRef` names (a `metadata.name` field selector: no other Secret is
//! listed or cached), whose `dataplane_username` and `dataplane_password` keys become the
//! [`DataplaneCredentials`] pod discovery builds its Data Plane API targets with. A change of
//! the reference restarts the watch; a Secret that is missing, deleted or lacks a key is
//! logged, naming it and the key, and the last good credentials stay.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::drivers::kube::discovery::DataplaneCredentials;
use crate::drivers::kube::{KubeApi, tell_watch_failure, tell_watch_resumed};
use crate::pure::api_failure::{ApiFailure, FailureLog, Request};

/// The Secret key holding the Data Plane API user name.
pub const USERNAME_KEY: &str = "dataplane_username";
/// The Secret key holding its password.
pub const PASSWORD_KEY: &str = "dataplane_password";

/// Which Secret holds the credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretName {
    pub namespace: String,
    pub name: String,
}

/// The credentials a Secret holds, or what is wrong with it.
pub fn credentials_from_secret(secret: &Secret) -> Result<DataplaneCredentials, String> {
    let key = |key: &str| -> Result<String, String> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| s.clone().into_bytes())
            })
            .ok_or_else(|| format!("has no key {key}"))?;
        String::from_utf8(bytes).map_err(|_| format!("key {key} is not UTF-8 text"))
    };
    Ok(DataplaneCredentials {
        username: key(USERNAME_KEY)?
            .trim_end_matches(['\r', '\n'])
            .to_string(),
        password: key(PASSWORD_KEY)?
            .trim_end_matches(['\r', '\n'])
            .to_string(),
    })
}

/// Watches the Secret `reference` names (none while it is `None`) and publishes its
/// credentials on `out`, until the task is aborted. `reference` starts as `None` before any
/// config is read: only a config read without a `credentialsSecretRef` is warned about,
/// once until it names one again.
pub fn spawn(
    client: impl Into<KubeApi>,
    mut reference: watch::Receiver<Option<SecretName>>,
    out: watch::Sender<DataplaneCredentials>,
) -> tokio::task::JoinHandle<()> {
    let client: KubeApi = client.into();
    tokio::spawn(async move {
        // The channel's initial value was sent by no config; every later one by a config.
        let mut first = true;
        let mut warned = false;
        loop {
            let from_a_config = !first || reference.has_changed().unwrap_or(false);
            first = false;
            let current = reference.borrow_and_update().clone();
            match current {
                None => {
                    if from_a_config && !warned {
                        tracing::warn!(
                            "the config has no credentialsSecretRef; the HAProxy pods' Data Plane API is called without credentials"
                        );
                        warned = true;
                    }
                    if reference.changed().await.is_err() {
                        return;
                    }
                }
                Some(secret) => {
                    warned = false;
                    tokio::select! {
                        () = watch_secret(client.clone(), &secret, &out) => return,
                        changed = reference.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    })
}

async fn watch_secret(
    client: KubeApi,
    secret: &SecretName,
    out: &watch::Sender<DataplaneCredentials>,
) {
    let api: Api<Secret> = Api::namespaced(client.client, &secret.namespace);
    let request = Request::watch("secrets", "", Some(&secret.namespace)).named(&secret.name);
    let selector = format!("metadata.name={}", secret.name);
    let mut events = super::retried(watcher(api, watcher::Config::default().fields(&selector)));
    let object = format!("Secret {}/{}", secret.namespace, secret.name);
    let what = format!("the credentials {object}");
    let mut found = false;
    let mut failures = FailureLog::new();
    while let Some(event) = events.next().await {
        if matches!(&event, Ok(e) if !matches!(e, watcher::Event::Init)) {
            tell_watch_resumed(&mut failures, &what);
        }
        match event {
            Ok(watcher::Event::Init) => found = false,
            Ok(watcher::Event::InitApply(s) | watcher::Event::Apply(s)) => {
                found = true;
                match credentials_from_secret(&s) {
                    Ok(credentials) => {
                        if out.send_if_modified(|c| {
                            let changed = *c != credentials;
                            *c = credentials;
                            changed
                        }) {
                            tracing::info!(secret = %object, "Data Plane API credentials loaded");
                        }
                    }
                    Err(problem) => {
                        tracing::warn!(secret = %object, %problem, "the credentials Secret is unusable (it needs the keys {USERNAME_KEY} and {PASSWORD_KEY}); the last good credentials stay")
                    }
                }
            }
            Ok(watcher::Event::InitDone) => {
                if !found {
                    tracing::warn!(secret = %object, "the credentials Secret does not exist; create it with the keys {USERNAME_KEY} and {PASSWORD_KEY}");
                }
            }
            Ok(watcher::Event::Delete(_)) => {
                tracing::warn!(secret = %object, "the credentials Secret was deleted; the last good credentials stay");
            }
            Err(e) => {
                let failure = ApiFailure::of_watch(&client.server, &request, &e);
                tell_watch_failure(&mut failures, &failure, &what);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(entries: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_secret_with_both_keys_gives_its_credentials_without_a_trailing_newline() {
        let found = credentials_from_secret(&secret(&[
            (USERNAME_KEY, "admin\n"),
            (PASSWORD_KEY, "s3cret"),
        ]))
        .expect("credentials");
        assert_eq!(found.username, "admin");
        assert_eq!(found.password, "s3cret");
    }

    #[test]
    fn a_secret_without_the_password_key_is_refused_naming_the_key() {
        let error = credentials_from_secret(&secret(&[(USERNAME_KEY, "admin")])).unwrap_err();
        assert!(error.contains(PASSWORD_KEY), "{error}");
    }
}
