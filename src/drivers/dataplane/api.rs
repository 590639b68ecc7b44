//! The HTTP side of the Data Plane API v3 target: one method per endpoint haptor uses, each
//! answering with what the API said or an [`ApiError`] that keeps the HTTP status and the
//! API's own `message`, so the target can decide what a status means at that step (a 409 on a
//! storage upload means "exists", on a configuration push "someone wrote in between").
//!
//! Every request carries HTTP Basic credentials. URLs are built segment by segment, so a
//! backend, server, map key or file name is percent-encoded and cannot change the path.
//! reqwest is built without its `query` and `multipart` features: queries go through
//! [`Url::query_pairs_mut`] and the few multipart uploads the storage endpoints require are
//! assembled here.

use crate::drivers::error_chain;
use std::fmt;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap};
use reqwest::{Client, Method, StatusCode, Url};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::pure::deploy::dataplane::{LoadedMap, StorageKind, checksum_line, version_line};
use crate::pure::rendered::hex;

/// The response header that carries a queued reload's id (HTTP header names are
/// case-insensitive; the API spells it `Reload-ID`).
pub const RELOAD_ID_HEADER: &str = "Reload-ID";
/// The response header with the configuration version the answer refers to.
pub const CONFIGURATION_VERSION_HEADER: &str = "Configuration-Version";
/// The response header with the API's checksum of the stored `haproxy.cfg`. The API
/// rewrites the text it is given (its own parser prints it again: indentation, keyword
/// order, names for anonymous `defaults`), so this, not the text, tells whether the file is
/// still the one a push stored.
pub const CONFIGURATION_CHECKSUM_HEADER: &str = "Configuration-Checksum";
/// The multipart field name the storage endpoints read an upload from.
const UPLOAD_FIELD: &str = "file_upload";

/// Why an API call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// No HTTP answer: connection refused, name resolution, timeout, broken connection.
    Transport(String),
    /// An answer with a status outside 2xx; `message` is the API's `message` field, or the
    /// body text when it is not the API's JSON error shape.
    Status { status: u16, message: String },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Transport(reason) => f.write_str(reason),
            ApiError::Status { status, message } => write!(f, "HTTP {status}: {message}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The `Reload-ID` header of a 202 that queued a reload.
    pub fn reload_id(&self) -> Option<String> {
        header_text(&self.headers, RELOAD_ID_HEADER)
    }

    /// The `Configuration-Checksum` header: the API's checksum of the `haproxy.cfg` it
    /// stored.
    pub fn configuration_checksum(&self) -> Option<String> {
        header_text(&self.headers, CONFIGURATION_CHECKSUM_HEADER)
    }
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// `GET /services/haproxy/configuration/raw`: the text, its version and the API's checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawConfiguration {
    /// From the `Configuration-Version` header, else from a `# _version=N` first line.
    pub version: Option<u64>,
    /// From the `Configuration-Checksum` header, else from a `# _md5hash=` first line.
    pub checksum: Option<String>,
    pub text: String,
}

/// `GET /services/haproxy/reloads/{id}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadState {
    /// `in_progress`, `succeeded` or `failed`.
    pub status: String,
    /// HAProxy's output for a failed reload.
    pub response: String,
}

/// A request body.
enum Body<'a> {
    Empty,
    Text(&'a str),
    Json(Value),
    /// One file in the `file_upload` field.
    Upload {
        file_name: &'a str,
        content: &'a str,
    },
}

/// The Data Plane API of one instance.
pub struct Api {
    client: Client,
    /// `http://host:port/v3` (or with the path prefix the caller gave before `/v3`).
    base: Url,
    username: String,
    password: String,
}

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base.as_str())
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Api {
    /// `base` must already end in `/v3` (see `DataplaneSettings::base_url`).
    pub fn new(
        base: Url,
        username: String,
        password: String,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Api, String> {
        // reqwest is built with `rustls-no-provider` and panics when it builds a client with
        // no process-wide rustls provider; `main` installs ring's, and so does this for any
        // other caller (a second install is refused harmlessly).
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| error_chain(&e))?;
        Ok(Api {
            client,
            base,
            username,
            password,
        })
    }

    /// The base URL, `…/v3`.
    pub fn base(&self) -> &str {
        self.base.as_str()
    }

    pub fn username(&self) -> &str {
        &self.username
    }

    /// `base` + `segments` (each percent-encoded) + `query`.
    fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        // An http(s) URL always has path segments; the constructor refuses anything else.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends one request; any HTTP answer comes back as `Ok`, whatever its status.
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Body<'_>,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, Answer), ApiError> {
        let mut request = self
            .client
            .request(method.clone(), url.clone())
            .basic_auth(&self.username, Some(&self.password));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request = match body {
            Body::Empty => request,
            Body::Text(text) => request
                .header(CONTENT_TYPE, "text/plain")
                .body(text.to_string()),
            Body::Json(value) => request.json(&value),
            Body::Upload { file_name, content } => {
                let (content_type, bytes) = multipart_upload(file_name, content);
                request.header(CONTENT_TYPE, content_type).body(bytes)
            }
        };
        tracing::debug!(%method, %url, "data plane API request");
        let response = request
            .send()
            .await
            .map_err(|e| ApiError::Transport(format!("{method} {url}: {}", error_chain(&e))))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.text().await.map_err(|e| {
            ApiError::Transport(format!(
                "{method} {url}: reading the answer: {}",
                error_chain(&e)
            ))
        })?;
        Ok((
            status,
            Answer {
                status,
                headers,
                body,
            },
        ))
    }

    /// Sends one request and turns any status outside 2xx into [`ApiError::Status`].
    async fn call(&self, method: Method, url: Url, body: Body<'_>) -> Result<Answer, ApiError> {
        self.call_with_headers(method, url, body, &[]).await
    }

    /// [`Api::call`] with extra request headers.
    async fn call_with_headers(
        &self,
        method: Method,
        url: Url,
        body: Body<'_>,
        headers: &[(&str, &str)],
    ) -> Result<Answer, ApiError> {
        let (status, answer) = self.send(method, url, body, headers).await?;
        if status.is_success() {
            Ok(answer)
        } else {
            Err(ApiError::Status {
                status: status.as_u16(),
                message: error_message(status, &answer.body),
            })
        }
    }

    /// `GET /info`: the API's version string (`api.version`).
    pub async fn info(&self) -> Result<String, ApiError> {
        let answer = self
            .call(Method::GET, self.url(&["info"], &[]), Body::Empty)
            .await?;
        let info: Value = serde_json::from_str(&answer.body).map_err(|e| ApiError::Status {
            status: answer.status.as_u16(),
            message: format!("/info is not JSON: {e}"),
        })?;
        Ok(info
            .pointer("/api/version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }

    /// `GET /services/haproxy/runtime/info`: the HAProxy process information, whose
    /// `info.version` is the HAProxy version the pod runs.
    pub async fn haproxy_info(&self) -> Result<Value, ApiError> {
        let url = self.url(&["services", "haproxy", "runtime", "info"], &[]);
        let answer = self.call(Method::GET, url, Body::Empty).await?;
        serde_json::from_str(&answer.body).map_err(|e| ApiError::Status {
            status: answer.status.as_u16(),
            message: format!("/services/haproxy/runtime/info is not JSON: {e}"),
        })
    }

    /// `GET /services/haproxy/configuration/version`: a JSON integer.
    pub async fn configuration_version(&self) -> Result<u64, ApiError> {
        let url = self.url(&["services", "haproxy", "configuration", "version"], &[]);
        let answer = self.call(Method::GET, url, Body::Empty).await?;
        answer.body.trim().parse().map_err(|_| ApiError::Status {
            status: answer.status.as_u16(),
            message: format!(
                "/services/haproxy/configuration/version is not a JSON integer: '{}'",
                answer.body.trim()
            ),
        })
    }

    /// `GET /services/haproxy/configuration/raw`.
    pub async fn raw_configuration(&self) -> Result<RawConfiguration, ApiError> {
        let url = self.url(&["services", "haproxy", "configuration", "raw"], &[]);
        let answer = self.call(Method::GET, url, Body::Empty).await?;
        let version = answer
            .headers
            .get(CONFIGURATION_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .or_else(|| version_line(&answer.body));
        let checksum = answer
            .configuration_checksum()
            .or_else(|| checksum_line(&answer.body).map(str::to_string));
        Ok(RawConfiguration {
            version,
            checksum,
            text: answer.body,
        })
    }

    /// `POST /services/haproxy/configuration/raw?version=N[&skip_reload=true]`, with an
    /// `X-Runtime-Actions` header when `runtime_actions` is given (the API runs them only
    /// with `skip_reload`).
    pub async fn push_configuration(
        &self,
        text: &str,
        version: u64,
        skip_reload: bool,
        runtime_actions: Option<&str>,
    ) -> Result<Answer, ApiError> {
        let version = version.to_string();
        let mut query = vec![("version", version.as_str())];
        if skip_reload {
            query.push(("skip_reload", "true"));
        }
        let url = self.url(&["services", "haproxy", "configuration", "raw"], &query);
        // The API refuses a body without a newline.
        let owned;
        let text = if text.contains('\n') {
            text
        } else {
            owned = format!("{text}\n");
            &owned
        };
        let headers: Vec<(&str, &str)> = runtime_actions
            .map(|actions| ("X-Runtime-Actions", actions))
            .into_iter()
            .collect();
        self.call_with_headers(Method::POST, url, Body::Text(text), &headers)
            .await
    }

    /// `GET /services/haproxy/reloads/{id}`.
    pub async fn reload(&self, id: &str) -> Result<ReloadState, ApiError> {
        let url = self.url(&["services", "haproxy", "reloads", id], &[]);
        let answer = self.call(Method::GET, url, Body::Empty).await?;
        let value: Value = serde_json::from_str(&answer.body).map_err(|e| ApiError::Status {
            status: answer.status.as_u16(),
            message: format!("the reload status is not JSON: {e}"),
        })?;
        let field = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(ReloadState {
            status: field("status"),
            response: field("response"),
        })
    }

    fn storage_url(&self, kind: StorageKind, name: Option<&str>, query: &[(&str, &str)]) -> Url {
        let mut segments = vec!["services", "haproxy", "storage", kind.segment()];
        segments.extend(name);
        self.url(&segments, query)
    }

    /// `GET /storage/{kind}/{name}`: the file's bytes, `None` on 404.
    pub async fn storage_read(
        &self,
        kind: StorageKind,
        name: &str,
    ) -> Result<Option<String>, ApiError> {
        let url = self.storage_url(kind, Some(name), &[]);
        match self.call(Method::GET, url, Body::Empty).await {
            Ok(answer) => Ok(Some(answer.body)),
            Err(ApiError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /storage/{kind}` (multipart `file_upload`). `Ok(false)` when the file exists
    /// already (409).
    pub async fn storage_create(
        &self,
        kind: StorageKind,
        name: &str,
        content: &str,
    ) -> Result<bool, ApiError> {
        let query: &[(&str, &str)] = match kind {
            StorageKind::SslCertificates => &[("skip_reload", "true")],
            StorageKind::Maps | StorageKind::General => &[],
        };
        let url = self.storage_url(kind, None, query);
        let body = Body::Upload {
            file_name: name,
            content,
        };
        match self.call(Method::POST, url, body).await {
            Ok(_) => Ok(true),
            Err(ApiError::Status { status: 409, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `PUT /storage/{kind}/{name}?skip_reload=true`. `Ok(false)` when there is no such file
    /// (404).
    pub async fn storage_replace(
        &self,
        kind: StorageKind,
        name: &str,
        content: &str,
    ) -> Result<bool, ApiError> {
        let url = self.storage_url(kind, Some(name), &[("skip_reload", "true")]);
        let body = match kind {
            StorageKind::General => Body::Upload {
                file_name: name,
                content,
            },
            // The API refuses an empty text body ("value is required but missing"); a map
            // of one empty line is the same empty map to HAProxy.
            StorageKind::Maps if content.is_empty() => Body::Text("\n"),
            StorageKind::Maps | StorageKind::SslCertificates => Body::Text(content),
        };
        match self.call(Method::PUT, url, body).await {
            Ok(answer) => {
                if let Some(id) = answer.reload_id() {
                    tracing::warn!(%kind, name, reload_id = %id, "a storage replace with skip_reload queued a reload");
                }
                Ok(true)
            }
            Err(ApiError::Status { status: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `DELETE /storage/{kind}/{name}`; a file that is already gone (404) counts as deleted.
    pub async fn storage_delete(&self, kind: StorageKind, name: &str) -> Result<(), ApiError> {
        let query: &[(&str, &str)] = match kind {
            StorageKind::SslCertificates => &[("skip_reload", "true")],
            StorageKind::Maps | StorageKind::General => &[],
        };
        let url = self.storage_url(kind, Some(name), query);
        match self.call(Method::DELETE, url, Body::Empty).await {
            Ok(_) | Err(ApiError::Status { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `PUT /services/haproxy/runtime/backends/{backend}/servers/{server}` with the fields to
    /// change (`address`, `port`, `weight`, `admin_state`); fields left out stay as they are.
    pub async fn runtime_server(
        &self,
        backend: &str,
        server: &str,
        fields: Value,
    ) -> Result<(), ApiError> {
        let url = self.url(
            &[
                "services", "haproxy", "runtime", "backends", backend, "servers", server,
            ],
            &[],
        );
        self.call(Method::PUT, url, Body::Json(fields))
            .await
            .map(drop)
    }

    /// `POST /services/haproxy/runtime/backends/{backend}/servers` with a
    /// `runtime_add_server` body: HAProxy's `add server` (the server starts in maintenance).
    pub async fn runtime_add_server(&self, backend: &str, body: Value) -> Result<(), ApiError> {
        let url = self.url(
            &[
                "services", "haproxy", "runtime", "backends", backend, "servers",
            ],
            &[],
        );
        self.call(Method::POST, url, Body::Json(body))
            .await
            .map(drop)
    }

    /// `DELETE /services/haproxy/runtime/backends/{backend}/servers/{server}`: the API puts
    /// the server in maintenance, then runs `del server`.
    pub async fn runtime_delete_server(&self, backend: &str, server: &str) -> Result<(), ApiError> {
        let url = self.url(
            &[
                "services", "haproxy", "runtime", "backends", backend, "servers", server,
            ],
            &[],
        );
        self.call(Method::DELETE, url, Body::Empty).await.map(drop)
    }

    /// `PUT /services/haproxy/runtime/ssl_certs/{name}` (multipart `file_upload`): the API
    /// runs `set ssl cert` and `commit ssl cert` for the certificate HAProxy knows as `name`
    /// (as the configuration wrote it: `ssl/x.pem`, one path segment here).
    pub async fn runtime_certificate_replace(&self, name: &str, pem: &str) -> Result<(), ApiError> {
        let url = self.url(&["services", "haproxy", "runtime", "ssl_certs", name], &[]);
        let body = Body::Upload {
            file_name: name,
            content: pem,
        };
        self.call(Method::PUT, url, body).await.map(drop)
    }

    /// `DELETE /services/haproxy/runtime/ssl_certs/{name}`: `del ssl cert`.
    pub async fn runtime_certificate_delete(&self, name: &str) -> Result<(), ApiError> {
        let url = self.url(&["services", "haproxy", "runtime", "ssl_certs", name], &[]);
        self.call(Method::DELETE, url, Body::Empty).await.map(drop)
    }

    /// `DELETE /services/haproxy/runtime/ssl_crt_lists/entries?name=LIST&cert_file=CERT`:
    /// `del ssl crt-list LIST CERT`.
    pub async fn runtime_crt_list_entry_delete(
        &self,
        list: &str,
        certificate: &str,
    ) -> Result<(), ApiError> {
        let url = self.url(
            &["services", "haproxy", "runtime", "ssl_crt_lists", "entries"],
            &[("name", list), ("cert_file", certificate)],
        );
        self.call(Method::DELETE, url, Body::Empty).await.map(drop)
    }

    /// `GET /services/haproxy/runtime/maps?include_unmanaged=true`: every map the running
    /// worker loaded (without the flag the API lists only maps whose path, as the
    /// configuration wrote it, lies in its maps directory: none, for relative paths).
    pub async fn loaded_maps(&self) -> Result<Vec<LoadedMap>, ApiError> {
        let url = self.url(
            &["services", "haproxy", "runtime", "maps"],
            &[("include_unmanaged", "true")],
        );
        let answer = self.call(Method::GET, url, Body::Empty).await?;
        serde_json::from_str(&answer.body).map_err(|e| ApiError::Status {
            status: answer.status.as_u16(),
            message: format!("the list of loaded maps is not the API's JSON: {e}"),
        })
    }

    fn map_entries_url(&self, map: &str, key: Option<&str>) -> Url {
        let mut segments = vec!["services", "haproxy", "runtime", "maps", map, "entries"];
        segments.extend(key);
        self.url(&segments, &[])
    }

    /// `POST /services/haproxy/runtime/maps/{map}/entries` `{key, value}`.
    pub async fn map_entry_add(&self, map: &str, key: &str, value: &str) -> Result<(), ApiError> {
        let url = self.map_entries_url(map, None);
        let body = Body::Json(json!({ "key": key, "value": value }));
        self.call(Method::POST, url, body).await.map(drop)
    }

    /// `PUT /services/haproxy/runtime/maps/{map}/entries/{key}` `{value}`.
    pub async fn map_entry_set(&self, map: &str, key: &str, value: &str) -> Result<(), ApiError> {
        let url = self.map_entries_url(map, Some(key));
        let body = Body::Json(json!({ "value": value }));
        self.call(Method::PUT, url, body).await.map(drop)
    }

    /// `DELETE /services/haproxy/runtime/maps/{map}/entries/{key}`.
    pub async fn map_entry_delete(&self, map: &str, key: &str) -> Result<(), ApiError> {
        let url = self.map_entries_url(map, Some(key));
        self.call(Method::DELETE, url, Body::Empty).await.map(drop)
    }
}

/// The API's error text: the `message` of its JSON error shape `{code, message}`, else the
/// body, else the status's reason phrase.
fn error_message(status: StatusCode, body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body)
        && let Some(message) = value.get("message").and_then(Value::as_str)
    {
        return message.trim().to_string();
    }
    let body = body.trim();
    if body.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("no message")
            .to_string()
    } else {
        body.to_string()
    }
}

/// A `multipart/form-data` body with one file in the `file_upload` field, and its content
/// type. The boundary is derived from the content and lengthened until the content does not
/// contain it.
pub fn multipart_upload(file_name: &str, content: &str) -> (String, Vec<u8>) {
    let digest = hex(&Sha256::digest(content.as_bytes()));
    let mut boundary = format!("haptor-{}", &digest[..24]);
    while content.contains(&boundary) {
        boundary.push('x');
    }
    let file_name: String = file_name
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\r' | '\n' => '_',
            c => c,
        })
        .collect();
    let mut body = Vec::with_capacity(content.len() + 256);
    body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    body.extend_from_slice(
        format!(
            "Content-Disposition: form-data; name=\"{UPLOAD_FIELD}\"; filename=\"{file_name}\"\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
    body.extend_from_slice(content.as_bytes());
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_carries_the_file_name_and_exact_content_between_boundaries() {
        let content = "a.example be_a\r\nb.example be_b\n";
        let (content_type, body) = multipart_upload("hosts.map", content);
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .expect("boundary");
        let body = String::from_utf8(body).expect("utf-8");
        assert!(body.starts_with(&format!("--{boundary}\r\n")));
        assert!(body.ends_with(&format!("\r\n--{boundary}--\r\n")));
        assert!(body.contains("name=\"file_upload\"; filename=\"hosts.map\""));
        let start = body.find("\r\n\r\n").expect("headers end") + 4;
        let end = body.rfind(&format!("\r\n--{boundary}--")).expect("closing");
        assert_eq!(&body[start..end], content);
    }

    #[test]
    fn a_boundary_never_occurs_in_the_content() {
        let (probe_type, _) = multipart_upload("f", "x");
        let boundary = probe_type.rsplit('=').next().expect("boundary").to_string();
        // Content that contains the boundary the digest of "x" would give still gets one
        // that it does not contain, because the digest changes with the content.
        let content = format!("x{boundary}");
        let (content_type, _) = multipart_upload("f", &content);
        let chosen = content_type.rsplit('=').next().expect("boundary");
        assert!(!content.contains(chosen));
    }

    #[test]
    fn the_api_message_is_preferred_over_the_raw_body() {
        let body =
            r#"{"code":409,"message":"version in configuration file is 4, given version is 3"}"#;
        assert_eq!(
            error_message(StatusCode::CONFLICT, body),
            "version in configuration file is 4, given version is 3"
        );
        assert_eq!(
            error_message(StatusCode::BAD_REQUEST, "plain words\n"),
            "plain words"
        );
        assert_eq!(error_message(StatusCode::UNAUTHORIZED, ""), "Unauthorized");
    }

    #[test]
    fn a_version_line_is_read_only_from_the_first_line() {
        assert_eq!(version_line("# _version=42\nglobal\n"), Some(42));
        assert_eq!(version_line("global\n# _version=42\n"), None);
    }
}
