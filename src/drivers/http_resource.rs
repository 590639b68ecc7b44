//! Fetching the config's HTTP resources (`pure::http_resources` decides what a response
//! means): one GET with the resource's timeout, conditional on the content in use
//! (`If-None-Match`, `If-Modified-Since`), with its credential, reading at most its size
//! limit, tried again with a doubling backoff when the failure may pass (a connection
//! error, 408, 429, 5xx). Redirects are followed (at most 5). Credentials come through the
//! [`HttpCredentials`] seam: a file in `haptor local` ([`FileCredentials`]), a Secret in a
//! cluster (`drivers::kube::http_credentials`).

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};

use crate::drivers::error_chain;
use crate::pure::config::HttpAuth;
use crate::pure::http_resources::{
    Credential, Fetched, HttpResource, Validators, judge_response, retry_delay,
};
use crate::seams::HttpFetcher;

/// Where the credential of an HTTP resource's `auth` is read from.
pub trait HttpCredentials: Send + Sync {
    fn read(&self, auth: &HttpAuth) -> BoxFuture<'static, Result<Credential, String>>;
}

/// Credentials from files (`auth.file`, relative to `base`): `haptor local`.
pub struct FileCredentials {
    pub base: PathBuf,
}

impl HttpCredentials for FileCredentials {
    fn read(&self, auth: &HttpAuth) -> BoxFuture<'static, Result<Credential, String>> {
        let auth = auth.clone();
        let base = self.base.clone();
        Box::pin(async move {
            let Some(file) = &auth.file else {
                return Err(
                    "auth.secretRef is read in a cluster; haptor local reads auth.file".into(),
                );
            };
            let path = base.join(file);
            let text = tokio::fs::read_to_string(&path)
                .await
                .map_err(|e| format!("cannot read the credential file {}: {e}", path.display()))?;
            Credential::from_file_text(&auth, &text).map_err(|e| format!("{}: {e}", path.display()))
        })
    }
}

/// No credentials anywhere (tests that declare none).
pub struct NoCredentials;

impl HttpCredentials for NoCredentials {
    fn read(&self, _: &HttpAuth) -> BoxFuture<'static, Result<Credential, String>> {
        Box::pin(async { Err("this controller reads no HTTP credentials".to_string()) })
    }
}

/// The HTTP client the resources are fetched with.
#[derive(Clone)]
pub struct HttpResourceClient {
    client: reqwest::Client,
}

impl HttpResourceClient {
    pub fn new() -> Result<HttpResourceClient, String> {
        // reqwest is built with `rustls-no-provider`: it needs a process-wide provider
        // (`main` installs ring's; this covers any other caller).
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| error_chain(&e))?;
        Ok(HttpResourceClient { client })
    }

    /// Fetches `resource` once, with its retries.
    pub async fn fetch(
        &self,
        resource: &HttpResource,
        validators: &Validators,
        credential: Option<&Credential>,
    ) -> Fetched {
        let mut attempt = 0;
        loop {
            match self.attempt(resource, validators, credential).await {
                Ok(fetched) => return fetched,
                Err((why, may_pass)) => {
                    if !may_pass || attempt >= resource.retries {
                        let tries = attempt + 1;
                        return Fetched::Failed(if tries > 1 {
                            format!("{why} ({tries} attempts)")
                        } else {
                            why
                        });
                    }
                    attempt += 1;
                    tokio::time::sleep(retry_delay(attempt)).await;
                }
            }
        }
    }

    async fn attempt(
        &self,
        resource: &HttpResource,
        validators: &Validators,
        credential: Option<&Credential>,
    ) -> Result<Fetched, (String, bool)> {
        let mut request = self.client.get(&resource.url).timeout(resource.timeout);
        if let Some(etag) = &validators.etag {
            request = request.header(IF_NONE_MATCH, etag);
        }
        if let Some(modified) = &validators.last_modified {
            request = request.header(IF_MODIFIED_SINCE, modified);
        }
        request = match credential {
            None => request,
            Some(Credential::Basic { username, password }) => {
                request.basic_auth(username, Some(password))
            }
            Some(Credential::Bearer(token)) => request.bearer_auth(token),
            Some(Credential::Header { name, value }) => request.header(name.as_str(), value),
        };
        let mut response = request.send().await.map_err(|e| (error_chain(&e), true))?;
        let status = response.status().as_u16();
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let validators = Validators {
            etag: header(ETAG),
            last_modified: header(LAST_MODIFIED),
        };
        let body = if response.status().is_success() {
            if let Some(length) = response.content_length()
                && length > resource.max_bytes
            {
                return Err((too_large(length, resource.max_bytes), false));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| (error_chain(&e), true))?
            {
                body.extend_from_slice(&chunk);
                let length = u64::try_from(body.len()).unwrap_or(u64::MAX);
                if length > resource.max_bytes {
                    return Err((too_large(length, resource.max_bytes), false));
                }
            }
            Some(body)
        } else {
            None
        };
        judge_response(status, body, validators)
    }
}

fn too_large(length: u64, max: u64) -> String {
    format!("the body is larger than maxSizeBytes ({length} > {max} bytes)")
}

/// The production [`HttpFetcher`]: the credential read afresh for each fetch (a rotated
/// Secret or file is used at the next one), then [`HttpResourceClient::fetch`].
pub struct HttpResourceFetcher {
    client: HttpResourceClient,
    credentials: Arc<dyn HttpCredentials>,
}

impl HttpResourceFetcher {
    pub fn new(credentials: Arc<dyn HttpCredentials>) -> Result<HttpResourceFetcher, String> {
        Ok(HttpResourceFetcher {
            client: HttpResourceClient::new()?,
            credentials,
        })
    }
}

impl HttpFetcher for HttpResourceFetcher {
    fn fetch(&self, resource: HttpResource, validators: Validators) -> BoxFuture<'static, Fetched> {
        let client = self.client.clone();
        let credential = resource
            .auth
            .as_ref()
            .map(|auth| self.credentials.read(auth));
        Box::pin(async move {
            let credential = match credential {
                None => None,
                Some(reading) => match reading.await {
                    Ok(credential) => Some(credential),
                    Err(e) => return Fetched::Failed(format!("no credential: {e}")),
                },
            };
            client
                .fetch(&resource, &validators, credential.as_ref())
                .await
        })
    }
}
