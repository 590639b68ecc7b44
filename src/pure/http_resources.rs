//! HTTP resources: documents a config names by URL (`spec.httpResources`) and its templates
//! read with `http_resource "name"` — a block list, a list of maintenance hosts, a bundle.
//!
//! Each resource's content lives in a store of its own (named [`store_name`]) holding at
//! most one object, [`content_object`], so the render reads it like any store: the memos
//! and fragments of the templates that read it are dropped when it changes, and only then.
//! The decisions about it are here, without I/O: the settings as validation parses them
//! ([`HttpResource::from_spec`]), what one response means ([`judge_response`]), how long a
//! retry waits ([`retry_delay`]), and the two-version rule ([`ResourceState`]): content
//! that differs from the content in use is *pending* until a trial render with it passed
//! all three validation phases; a failed trial keeps the last good content serving. The
//! fetching itself is `drivers::http_resource`, run by the `http-resources` actor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::pure::config::{
    HAProxyTemplateConfigSpec, HttpAuth, HttpAuthKind, HttpFixture, SpecProblem, parse_duration,
};

/// The prefix of an HTTP resource's store name; watched resource names cannot hold `:`.
const STORE_PREFIX: &str = "http:";
/// How often a resource is fetched again when its settings say nothing.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);
/// How long one request may take when the settings say nothing.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a failed request is tried again when the settings say nothing.
pub const DEFAULT_RETRIES: u32 = 3;
/// The largest body accepted when the settings say nothing.
pub const DEFAULT_MAX_BYTES: u64 = 1024 * 1024;
/// The first retry's delay; each next one doubles, up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// The name of the store that holds the content of HTTP resource `name`.
pub fn store_name(name: &str) -> String {
    format!("{STORE_PREFIX}{name}")
}

/// The HTTP resource a store name belongs to, if it is one's.
pub fn resource_of_store(store: &str) -> Option<&str> {
    store.strip_prefix(STORE_PREFIX)
}

/// One HTTP resource's settings, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResource {
    pub name: String,
    pub url: String,
    pub refresh: Duration,
    pub timeout: Duration,
    pub retries: u32,
    pub max_bytes: u64,
    pub critical: bool,
    pub auth: Option<HttpAuth>,
}

impl HttpResource {
    /// Every HTTP resource of `spec`, or every problem with its field path.
    pub fn from_spec(
        spec: &HAProxyTemplateConfigSpec,
    ) -> Result<Vec<HttpResource>, Vec<SpecProblem>> {
        let mut problems = Vec::new();
        let mut resources = Vec::new();
        for (name, settings) in &spec.http_resources {
            let base = format!("spec.httpResources.{name}");
            let mut problem = |field: &str, message: String| {
                problems.push(SpecProblem {
                    path: if field.is_empty() {
                        base.clone()
                    } else {
                        format!("{base}.{field}")
                    },
                    message,
                });
            };
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                problem(
                    "",
                    "the name must be letters, digits, '_' or '-' (templates refer to it)".into(),
                );
            }
            let url = settings.url.trim();
            match url_host(url) {
                Some(host) if !host.is_empty() => {}
                // An empty URL turns the resource off: it is never fetched and reads as empty.
                None if url.is_empty() => {
                    if settings.critical {
                        problem(
                            "url",
                            "is empty (the resource is off), but the resource is critical: the first render would wait for it forever".into(),
                        );
                    }
                }
                _ => problem("url", format!("'{url}' is not an http:// or https:// URL")),
            }
            let mut duration = |field: &str, text: Option<&String>, default: Duration| match text {
                None => default,
                Some(text) => match parse_duration(text) {
                    Ok(d) if d.is_zero() => {
                        problem(field, "must be more than zero".into());
                        default
                    }
                    Ok(d) => d,
                    Err(e) => {
                        problem(field, e.to_string());
                        default
                    }
                },
            };
            let refresh = duration(
                "refreshInterval",
                settings.refresh_interval.as_ref(),
                DEFAULT_REFRESH,
            );
            let timeout = duration("timeout", settings.timeout.as_ref(), DEFAULT_TIMEOUT);
            let max_bytes = settings.max_size_bytes.unwrap_or(DEFAULT_MAX_BYTES);
            if max_bytes == 0 {
                problem("maxSizeBytes", "must be at least 1".into());
            }
            if let Some(auth) = &settings.auth {
                match (&auth.secret_ref, &auth.file) {
                    (None, None) => problem(
                        "auth",
                        "names no credential: set secretRef (in a cluster) or file (haptor local)"
                            .into(),
                    ),
                    (Some(secret), _) if secret.name.trim().is_empty() => {
                        problem("auth.secretRef.name", "is empty".into());
                    }
                    _ => {}
                }
                if auth.kind == HttpAuthKind::Header
                    && auth.header.as_deref().is_none_or(|h| !is_header_name(h))
                {
                    problem(
                        "auth.header",
                        "type header needs the header's name (letters, digits and -)".into(),
                    );
                }
            }
            resources.push(HttpResource {
                name: name.clone(),
                url: url.to_string(),
                refresh,
                timeout,
                retries: settings.retries.unwrap_or(DEFAULT_RETRIES),
                max_bytes,
                critical: settings.critical,
                auth: settings.auth.clone(),
            });
        }
        if problems.is_empty() {
            Ok(resources)
        } else {
            Err(problems)
        }
    }
}

/// What follows the scheme of an http or https URL, up to its path.
fn url_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    Some(rest.split(['/', '?', '#']).next().unwrap_or_default())
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// A credential read from a Secret or a file, as the request carries it.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    Basic { username: String, password: String },
    Bearer(String),
    Header { name: String, value: String },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself, in logs or panics.
        f.write_str(match self {
            Credential::Basic { .. } => "Credential::Basic(..)",
            Credential::Bearer(_) => "Credential::Bearer(..)",
            Credential::Header { .. } => "Credential::Header(..)",
        })
    }
}

impl Credential {
    /// The credential `auth` describes, from a Secret's keys (`username`/`password`,
    /// `token`, `value`).
    pub fn from_keys(
        auth: &HttpAuth,
        keys: &BTreeMap<String, String>,
    ) -> Result<Credential, String> {
        let key = |name: &str| {
            keys.get(name)
                .map(|v| v.trim().to_string())
                .ok_or_else(|| format!("the Secret has no key '{name}'"))
        };
        Ok(match auth.kind {
            HttpAuthKind::Basic => Credential::Basic {
                username: key("username")?,
                password: key("password")?,
            },
            HttpAuthKind::Bearer => Credential::Bearer(key("token")?),
            HttpAuthKind::Header => Credential::Header {
                name: auth.header.clone().unwrap_or_default(),
                value: key("value")?,
            },
        })
    }

    /// The credential `auth` describes, from a file's text.
    pub fn from_file_text(auth: &HttpAuth, text: &str) -> Result<Credential, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the credential file is empty".into());
        }
        Ok(match auth.kind {
            HttpAuthKind::Basic => {
                let (username, password) = text
                    .split_once(':')
                    .ok_or("a basic credential file holds username:password")?;
                Credential::Basic {
                    username: username.to_string(),
                    password: password.to_string(),
                }
            }
            HttpAuthKind::Bearer => Credential::Bearer(text.to_string()),
            HttpAuthKind::Header => Credential::Header {
                name: auth.header.clone().unwrap_or_default(),
                value: text.to_string(),
            },
        })
    }
}

/// What identifies the content in use to the server, for a conditional request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

/// One fetch's result, after its retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// A body (200), with what identifies it for the next conditional request.
    Content {
        body: Arc<str>,
        validators: Validators,
    },
    /// 304: the content in use is still current.
    NotModified,
    /// No usable answer; the message says why.
    Failed(String),
}

impl Fetched {
    /// The label of the fetch counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Fetched::Content { .. } => "content",
            Fetched::NotModified => "not_modified",
            Fetched::Failed(_) => "error",
        }
    }
}

/// What one answer means: `Ok` is final, `Err` says why it failed and whether trying
/// again may help (a 5xx, 408 or 429 may; a 404 or an oversized body will not).
pub fn judge_response(
    status: u16,
    body: Option<Vec<u8>>,
    validators: Validators,
) -> Result<Fetched, (String, bool)> {
    match status {
        304 => Ok(Fetched::NotModified),
        200..=299 => {
            let body = body.unwrap_or_default();
            match String::from_utf8(body) {
                Ok(text) => Ok(Fetched::Content {
                    body: Arc::from(text),
                    validators,
                }),
                Err(_) => Err(("the body is not UTF-8 text".into(), false)),
            }
        }
        408 | 429 | 500..=599 => Err((format!("the server answered {status}"), true)),
        _ => Err((format!("the server answered {status}"), false)),
    }
}

/// How long to wait before retry `attempt` (1 for the first retry).
pub fn retry_delay(attempt: u32) -> Duration {
    let doubled = FIRST_RETRY_DELAY.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    doubled.min(MAX_RETRY_DELAY)
}

impl HttpResource {
    /// Whether the resource is on (it has a URL): an empty URL turns it off.
    pub fn is_on(&self) -> bool {
        !self.url.is_empty()
    }
}

/// The object a resource's store holds before any content: its URL, no body (it reads as
/// empty; `http_resource_on` tells whether the resource has a URL at all).
pub fn declared_object(name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HTTPResource",
        "metadata": {"name": name, "namespace": ""},
        "url": url,
    })
}

/// The object a resource's store holds: what `http_resource` reads.
pub fn content_object(name: &str, url: &str, body: &str) -> Value {
    json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HTTPResource",
        "metadata": {"name": name, "namespace": ""},
        "url": url,
        "body": body,
    })
}

/// The object a validation test's store holds for a URL no fixture gives: reading it
/// fails the test, naming the URL.
pub fn unmocked_object(name: &str, url: &str) -> Value {
    json!({
        "apiVersion": "haptor.dev/v1alpha1",
        "kind": "HTTPResource",
        "metadata": {"name": name, "namespace": ""},
        "url": url,
        "unmocked": true,
    })
}

/// The object a validation test's store holds for a resource: what its fixture gives (by
/// URL, or by the resource's name, which also turns on a resource the config leaves off),
/// nothing for a failing status (the declared object stays: empty, as a failed fetch
/// reads), the unmocked marker for a resource that is on and has no fixture, and nothing
/// for one that is off.
pub fn fixture_object(
    resource: &HttpResource,
    fixtures: &BTreeMap<String, HttpFixture>,
) -> Option<Value> {
    let by_url = resource
        .is_on()
        .then(|| fixtures.get(&resource.url))
        .flatten();
    let (fixture, url) = match (by_url, fixtures.get(&resource.name)) {
        (Some(fixture), _) => (fixture, resource.url.as_str()),
        (None, Some(fixture)) if resource.is_on() => (fixture, resource.url.as_str()),
        (None, Some(fixture)) => (fixture, "fixture:"),
        (None, None) if resource.is_on() => {
            return Some(unmocked_object(&resource.name, &resource.url));
        }
        (None, None) => return None,
    };
    match fixture {
        HttpFixture::Body(body) => Some(content_object(&resource.name, url, body)),
        HttpFixture::Answer { body, status } => match status {
            Some(status) if !(200..300).contains(status) => None,
            _ => Some(content_object(
                &resource.name,
                url,
                body.as_deref().unwrap_or(""),
            )),
        },
    }
}

/// How a template reads a resource's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyForm {
    /// The text as fetched.
    Text,
    /// The non-empty lines, trimmed, without `#` comments.
    Lines,
    /// The body parsed as JSON.
    Json,
}

impl BodyForm {
    pub fn parse(text: &str) -> Option<BodyForm> {
        match text {
            "text" => Some(BodyForm::Text),
            "lines" => Some(BodyForm::Lines),
            "json" => Some(BodyForm::Json),
            _ => None,
        }
    }

    /// What a resource with no content yet reads as.
    pub fn empty(self) -> Value {
        match self {
            BodyForm::Text => Value::String(String::new()),
            BodyForm::Lines => Value::Array(Vec::new()),
            BodyForm::Json => Value::Null,
        }
    }

    /// The body in this form; JSON that does not parse is an error naming where.
    pub fn read(self, body: &str) -> Result<Value, String> {
        match self {
            BodyForm::Text => Ok(Value::String(body.to_string())),
            BodyForm::Lines => Ok(Value::Array(
                body_lines(body)
                    .map(|line| Value::String(line.to_string()))
                    .collect(),
            )),
            BodyForm::Json => serde_json::from_str(body).map_err(|e| {
                format!(
                    "the body is not JSON (line {}, column {}): {e}",
                    e.line(),
                    e.column()
                )
            }),
        }
    }
}

/// The non-empty lines of a body, trimmed, without lines that start with `#` or the part
/// of a line after ` #`.
pub fn body_lines(body: &str) -> impl Iterator<Item = &str> {
    body.lines()
        .map(|line| match line.find(" #") {
            Some(at) => &line[..at],
            None => line,
        })
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
}

/// A body's digest: content is compared by it.
pub fn digest(body: &str) -> [u8; 32] {
    Sha256::digest(body.as_bytes()).into()
}

/// What to do with content that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The same as the content in use (or as the pending one): nothing to render.
    Unchanged,
    /// Nothing is in use, or nothing has rendered yet: use it at once (there is no good
    /// content to keep serving).
    Install,
    /// It differs from the content in use: pending until a trial render passes.
    Trial,
}

/// One resource's two versions: the content in use, and the content on trial.
#[derive(Debug, Default, Clone)]
pub struct ResourceState {
    in_use: Option<[u8; 32]>,
    pending: Option<[u8; 32]>,
    /// The validators of the content in use (a conditional request asks about it).
    pub validators: Validators,
    /// The last failure (fetch or trial), until content is in use again.
    pub last_error: Option<String>,
}

impl ResourceState {
    /// Whether content is in use.
    pub fn has_content(&self) -> bool {
        self.in_use.is_some()
    }

    /// Content arrived; `rendered` says whether a render with the current content has
    /// been made (else there is nothing serving to protect).
    pub fn on_content(&mut self, body: &str, rendered: bool) -> Arrival {
        let digest = digest(body);
        if self.in_use == Some(digest) || self.pending == Some(digest) {
            return Arrival::Unchanged;
        }
        if self.in_use.is_none() || !rendered {
            return Arrival::Install;
        }
        self.pending = Some(digest);
        Arrival::Trial
    }

    /// The content is in use now (installed, or promoted by a passing trial).
    pub fn in_use(&mut self, body: &str, validators: Validators) {
        self.in_use = Some(digest(body));
        self.pending = None;
        self.validators = validators;
        self.last_error = None;
    }

    /// The trial of the pending content failed: the content in use stays.
    pub fn rejected(&mut self, why: String) {
        self.pending = None;
        self.last_error = Some(why);
    }

    /// A fetch failed: the content in use (if any) stays.
    pub fn failed(&mut self, why: String) {
        self.last_error = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::config::HttpResourceSettings;

    fn spec_with(settings: HttpResourceSettings) -> HAProxyTemplateConfigSpec {
        let mut spec = HAProxyTemplateConfigSpec::default();
        spec.http_resources.insert("deny-list".into(), settings);
        spec
    }

    #[test]
    fn settings_left_out_take_their_defaults() {
        let spec = spec_with(HttpResourceSettings {
            url: "http://lists.example/deny.txt".into(),
            ..Default::default()
        });
        let resources = HttpResource::from_spec(&spec).expect("valid");
        assert_eq!(resources[0].refresh, DEFAULT_REFRESH);
        assert_eq!(resources[0].timeout, DEFAULT_TIMEOUT);
        assert_eq!(resources[0].retries, DEFAULT_RETRIES);
        assert_eq!(resources[0].max_bytes, DEFAULT_MAX_BYTES);
        assert!(!resources[0].critical);
    }

    #[test]
    fn bad_settings_are_problems_at_their_fields() {
        let spec = spec_with(HttpResourceSettings {
            url: "ftp://lists.example/deny.txt".into(),
            refresh_interval: Some("often".into()),
            timeout: Some("0s".into()),
            max_size_bytes: Some(0),
            auth: Some(HttpAuth {
                kind: HttpAuthKind::Header,
                ..Default::default()
            }),
            ..Default::default()
        });
        let problems = HttpResource::from_spec(&spec).expect_err("invalid");
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.httpResources.deny-list.url",
                "spec.httpResources.deny-list.refreshInterval",
                "spec.httpResources.deny-list.timeout",
                "spec.httpResources.deny-list.maxSizeBytes",
                "spec.httpResources.deny-list.auth",
                "spec.httpResources.deny-list.auth.header",
            ]
        );
    }

    #[test]
    fn server_errors_are_retried_and_client_errors_are_not() {
        assert!(
            judge_response(503, None, Validators::default())
                .unwrap_err()
                .1
        );
        assert!(
            judge_response(429, None, Validators::default())
                .unwrap_err()
                .1
        );
        assert!(
            !judge_response(404, None, Validators::default())
                .unwrap_err()
                .1
        );
        assert_eq!(
            judge_response(304, None, Validators::default()),
            Ok(Fetched::NotModified)
        );
    }

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_a_limit() {
        assert_eq!(retry_delay(1), Duration::from_millis(500));
        assert_eq!(retry_delay(2), Duration::from_secs(1));
        assert_eq!(retry_delay(3), Duration::from_secs(2));
        assert_eq!(retry_delay(40), MAX_RETRY_DELAY);
    }

    #[test]
    fn lines_drop_blanks_and_comments() {
        let lines: Vec<&str> =
            body_lines("# list\n10.0.0.0/8 # office\n\n  192.0.2.1  \n").collect();
        assert_eq!(lines, ["10.0.0.0/8", "192.0.2.1"]);
    }

    #[test]
    fn content_that_differs_from_the_content_in_use_goes_on_trial_once_rendered() {
        let mut state = ResourceState::default();
        assert_eq!(state.on_content("a", false), Arrival::Install);
        state.in_use("a", Validators::default());
        assert_eq!(state.on_content("a", true), Arrival::Unchanged);
        assert_eq!(state.on_content("b", false), Arrival::Install);
        assert_eq!(state.on_content("b", true), Arrival::Trial);
        assert_eq!(
            state.on_content("b", true),
            Arrival::Unchanged,
            "already on trial"
        );
        state.rejected("haproxy -c failed".into());
        assert!(state.has_content());
        assert_eq!(
            state.on_content("b", true),
            Arrival::Trial,
            "tried again when fetched again"
        );
    }

    #[test]
    fn a_fixture_gives_a_body_nothing_for_a_failing_status_or_the_unmocked_marker() {
        let resource = HttpResource {
            name: "deny".into(),
            url: "http://x/deny".into(),
            refresh: DEFAULT_REFRESH,
            timeout: DEFAULT_TIMEOUT,
            retries: 0,
            max_bytes: 10,
            critical: false,
            auth: None,
        };
        let mut fixtures = BTreeMap::new();
        assert_eq!(
            fixture_object(&resource, &fixtures).unwrap()["unmocked"],
            true
        );
        fixtures.insert("http://x/deny".into(), HttpFixture::Body("1.2.3.4".into()));
        assert_eq!(
            fixture_object(&resource, &fixtures).unwrap()["body"],
            "1.2.3.4"
        );
        fixtures.insert(
            "http://x/deny".into(),
            HttpFixture::Answer {
                body: None,
                status: Some(503),
            },
        );
        assert_eq!(fixture_object(&resource, &fixtures), None);
    }

    #[test]
    fn a_fixture_by_name_turns_on_a_resource_the_config_leaves_off() {
        let resource = HttpResource {
            name: "deny".into(),
            url: String::new(),
            refresh: DEFAULT_REFRESH,
            timeout: DEFAULT_TIMEOUT,
            retries: 0,
            max_bytes: 10,
            critical: false,
            auth: None,
        };
        let mut fixtures = BTreeMap::new();
        assert_eq!(
            fixture_object(&resource, &fixtures),
            None,
            "off and unmocked is fine"
        );
        fixtures.insert("deny".into(), HttpFixture::Body("1.2.3.4".into()));
        let object = fixture_object(&resource, &fixtures).unwrap();
        assert_eq!(object["body"], "1.2.3.4");
        assert_eq!(object["url"], "fixture:");
    }
}
