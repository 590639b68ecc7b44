//! The credentials of the config's HTTP resources in a cluster: `auth.secretRef`'s Secret,
//! read at each fetch (so a rotated Secret is used by the next one) as a list with a
//! `metadata.name` field selector, which the list/watch on Secrets the chart grants allows
//! (it grants no get). Its keys: `username` and `password` (basic), `token` (bearer),
//! `value` (header).

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

use super::KubeApi;
use crate::drivers::http_resource::HttpCredentials;
use crate::pure::config::HttpAuth;
use crate::pure::http_resources::Credential;

/// Reads `auth.secretRef` in `namespace` unless it names another.
pub struct SecretCredentials {
    pub client: KubeApi,
    pub namespace: String,
}

impl HttpCredentials for SecretCredentials {
    fn read(&self, auth: &HttpAuth) -> BoxFuture<'static, Result<Credential, String>> {
        let auth = auth.clone();
        let client = self.client.client.clone();
        let default_namespace = self.namespace.clone();
        Box::pin(async move {
            let Some(secret) = &auth.secret_ref else {
                return Err(
                    "auth.file is read by haptor local; in a cluster set auth.secretRef".into(),
                );
            };
            let namespace = secret.namespace.as_deref().unwrap_or(&default_namespace);
            let api: Api<Secret> = Api::namespaced(client, namespace);
            let object = format!("Secret {namespace}/{}", secret.name);
            let listed = api
                .list(&ListParams::default().fields(&format!("metadata.name={}", secret.name)))
                .await
                .map_err(|e| format!("cannot read {object}: {e}"))?;
            let found = listed
                .items
                .into_iter()
                .next()
                .ok_or_else(|| format!("{object} does not exist"))?;
            let keys: BTreeMap<String, String> = found
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| (key, String::from_utf8_lossy(&value.0).into_owned()))
                .collect();
            Credential::from_keys(&auth, &keys).map_err(|e| format!("{object}: {e}"))
        })
    }
}
