//! The custom resources haptor reads and writes, and their structural validation.
//!
//! `HAProxyTemplateConfig` is the one resource a user writes: what to watch, and the
//! Handlebars templates that turn it into `haproxy.cfg` and auxiliary files. `HAProxyCfg`
//! is what the leader publishes back: the rendered configuration and per-instance state.
//! Field names follow HAPTIC's so its users feel at home. [`validate_spec`] is the "basic"
//! validator of the config-change scatter-gather: a pure function that returns every
//! structural problem with its field path.

mod duration;
pub mod published;
mod spec_validation;
pub mod timings;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use duration::{DurationError, parse_duration};
pub use spec_validation::{NAMESPACE_FIXTURES, SpecProblem, validate_spec, validated_timings};
pub use timings::{ConfigTimings, LeaseTimings, TimingsError};

/// The API group of haptor's resources.
pub const GROUP: &str = "haptor.dev";
/// The API version of haptor's resources.
pub const VERSION: &str = "v1alpha1";

/// Schema for a field that holds arbitrary JSON: Kubernetes keeps it as written instead of
/// pruning unknown fields.
fn arbitrary_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema for validation tests' HTTP fixtures: each a string or an object, which a
/// structural schema can only leave open (an `anyOf` of types is refused by the API server).
fn http_fixtures(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// Schema for a list of arbitrary Kubernetes objects (validation test fixtures).
fn arbitrary_objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "type": "array",
            "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
        }
    })
}

/// The desired state of one haptor deployment: what to watch and how to render it.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "haptor.dev",
    version = "v1alpha1",
    kind = "HAProxyTemplateConfig",
    namespaced,
    shortname = "htc",
    status = "HAProxyTemplateConfigStatus",
    printcolumn = r#"{"name":"Validation","type":"string","jsonPath":".status.validationStatus"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyTemplateConfigSpec {
    /// Secret holding the Data Plane API credentials (keys `dataplane_username` and
    /// `dataplane_password`). Required for in-cluster deployment; unused by `haptor local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// Selects the HAProxy pods to deploy to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<PodSelector>,
    /// Where and how configurations are deployed.
    #[serde(default)]
    pub dataplane: DataplaneSettings,
    /// Leader election among controller replicas.
    #[serde(default)]
    pub leader_election: LeaderElectionSettings,
    /// Log settings, changeable at run time.
    #[serde(default)]
    pub logging: LoggingSettings,
    /// Guards on one render: how long it may take and how much it may write.
    #[serde(default)]
    pub rendering: RenderingSettings,
    /// The Kubernetes resources to watch, by the name templates use (`resources "name"`).
    #[serde(default)]
    pub watched_resources: BTreeMap<String, WatchedResource>,
    /// JSONPaths stripped from every watched object before it is stored, such as
    /// `metadata.managedFields`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched_resources_ignore_fields: Vec<String>,
    /// Reusable template fragments, usable as partials (`{{> name}}`) and ordered by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub template_snippets: BTreeMap<String, TemplateSnippet>,
    /// The annotations the templates read, each defined once: what it accepts, what it
    /// does and, for the ones that act, the template lines it adds (`haptor annotations`
    /// writes their reference).
    #[serde(default, skip_serializing_if = "AnnotationSettings::is_empty")]
    pub annotations: AnnotationSettings,
    /// Map files, by file name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub maps: BTreeMap<String, GeneratedFile>,
    /// General files (error pages, ACL lists, ...), by file name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, GeneratedFile>,
    /// Certificate bundles (PEM), by file name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ssl_certificates: BTreeMap<String, GeneratedFile>,
    /// Documents fetched over HTTP (block lists, host lists, bundles), by the name
    /// templates read them with (`http_resource "name"`). New content is used only once a
    /// render with it passed all three validation phases; until then, and after a failed
    /// fetch, the last good content keeps serving.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http_resources: BTreeMap<String, HttpResourceSettings>,
    /// The template of `haproxy.cfg` itself.
    pub haproxy_config: HaproxyConfigTemplate,
    /// Arbitrary values merged at the top level of every template's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "arbitrary_json")]
    pub extra_context: Option<serde_json::Value>,
    /// Tests that `haptor validate` and the admission webhook run: fixtures in, assertions
    /// on the rendered output. A test named `_global` provides fixtures to every test.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub validation_tests: BTreeMap<String, ValidationTest>,
    /// Where the spec was read from, when it was read from a file (the offline commands,
    /// `haptor local`): the line of each of its keys, so that a template error names the
    /// file and line as well. Not part of the resource: never serialised, absent for a
    /// config read from a cluster.
    #[serde(skip)]
    #[schemars(skip)]
    pub source: Option<std::sync::Arc<crate::pure::yaml_lines::YamlLines>>,
}

/// A reference to a Secret, in the config's namespace unless `namespace` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Selects HAProxy pods by label.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// Deployment settings. Durations use Go's syntax (`2s`, `1m30s`, `500ms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DataplaneSettings {
    /// Data Plane API port on each HAProxy pod.
    pub port: u16,
    pub maps_dir: String,
    pub ssl_certs_dir: String,
    pub general_storage_dir: String,
    pub config_file: String,
    /// Minimum time between two reloading deployments to one instance.
    pub min_deployment_interval: String,
    /// How often each instance is compared with the desired configuration.
    pub drift_prevention_interval: String,
    /// How long one deployment may take before it counts as failed.
    pub deployment_timeout: String,
}

impl Default for DataplaneSettings {
    fn default() -> Self {
        DataplaneSettings {
            port: 5555,
            maps_dir: "/etc/haproxy/maps".into(),
            ssl_certs_dir: "/etc/haproxy/ssl".into(),
            general_storage_dir: "/etc/haproxy/general".into(),
            config_file: "/etc/haproxy/haproxy.cfg".into(),
            min_deployment_interval: "2s".into(),
            drift_prevention_interval: "60s".into(),
            deployment_timeout: "30s".into(),
        }
    }
}

impl DataplaneSettings {
    /// The path convention these directories imply for templates.
    pub fn path_resolver(&self) -> crate::pure::rendered::PathResolver {
        crate::pure::rendered::PathResolver::from_dirs(
            &self.config_file,
            &self.maps_dir,
            &self.general_storage_dir,
            &self.ssl_certs_dir,
        )
    }
}

/// Leader election among controller replicas (a coordination.k8s.io Lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct LeaderElectionSettings {
    pub enabled: bool,
    pub lease_name: String,
    pub lease_duration: String,
    pub renew_deadline: String,
    pub retry_period: String,
}

impl Default for LeaderElectionSettings {
    fn default() -> Self {
        LeaderElectionSettings {
            enabled: true,
            lease_name: "haptor-leader".into(),
            lease_duration: "15s".into(),
            renew_deadline: "10s".into(),
            retry_period: "2s".into(),
        }
    }
}

/// Guards on one render. A render past either fails with the template it was in, and the
/// last good configuration keeps serving.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RenderingSettings {
    /// How long one render of every template may take (Go duration syntax).
    pub timeout: String,
    /// Total bytes one render may write, across `haproxy.cfg` and every auxiliary file.
    pub max_output_bytes: u64,
}

impl Default for RenderingSettings {
    fn default() -> Self {
        RenderingSettings {
            timeout: "30s".into(),
            max_output_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Log settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggingSettings {
    /// TRACE, DEBUG, INFO, WARN or ERROR. Empty: the `LOG_LEVEL` environment variable, then INFO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}

/// One kind of Kubernetes resource to watch and index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatchedResource {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// The plural resource name, e.g. `ingresses`.
    pub resources: String,
    /// The kind, e.g. `Ingress`. Derived from `resources` for well-known kinds when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// JSONPaths (kubectl style) forming the store's composite key.
    #[serde(default)]
    pub index_by: Vec<String>,
    /// Kubernetes label selector over each object's own `metadata.labels`; objects that do
    /// not match are not stored (an object whose labels stop matching leaves the store).
    /// Requirements are comma-separated and all must hold: `key=value` (or `==`),
    /// `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (present), `!key` (absent),
    /// `key>N`, `key<N` (whole numbers); `!=` and `notin` also match objects without the
    /// key. Example:
    /// `app.kubernetes.io/name=web,tier notin (cache)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Client-side filter `path=value` applied before storing (e.g. `spec.ingressClassName=haptor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,
    /// Kubernetes label selector (same syntax as `labelSelector`) over the labels of each
    /// object's namespace; objects in namespaces that do not match are not stored, and
    /// they enter or leave the store as their namespace's labels change. Every namespace
    /// has the label `kubernetes.io/metadata.name=<name>`, so
    /// `kubernetes.io/metadata.name in (shop,blog)` selects namespaces by name. Cluster-scoped
    /// objects are not filtered. With `haptor local` and `haptor render --fixtures` the
    /// labels come from the Namespace manifests present; in validation tests from the
    /// Namespace fixtures (under any list, or under `namespaces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<String>,
    /// Whether the admission webhook validates changes to this kind before they are stored.
    #[serde(default)]
    pub enable_validation_webhook: bool,
    /// How long to wait for more changes before triggering a render. Default 100ms; `0s`
    /// triggers at once (the default for EndpointSlices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<String>,
}

impl WatchedResource {
    /// The kind, as written or derived from the plural for Kubernetes' built-in resources.
    pub fn kind_name(&self) -> String {
        if let Some(kind) = self.kind.as_deref().filter(|k| !k.is_empty()) {
            return kind.to_string();
        }
        let known = [
            ("ingresses", "Ingress"),
            ("ingressclasses", "IngressClass"),
            ("services", "Service"),
            ("endpointslices", "EndpointSlice"),
            ("endpoints", "Endpoints"),
            ("secrets", "Secret"),
            ("configmaps", "ConfigMap"),
            ("pods", "Pod"),
            ("namespaces", "Namespace"),
            ("gateways", "Gateway"),
            ("gatewayclasses", "GatewayClass"),
            ("httproutes", "HTTPRoute"),
            ("grpcroutes", "GRPCRoute"),
        ];
        if let Some((_, kind)) = known.iter().find(|(plural, _)| *plural == self.resources) {
            return (*kind).to_string();
        }
        let singular = self.resources.strip_suffix('s').unwrap_or(&self.resources);
        let mut chars = singular.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }
}

/// A reusable template fragment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSnippet {
    pub template: String,
}

/// The annotations a config owns and defines (see [`crate::pure::annotations`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSettings {
    /// The prefixes the config owns, such as `haproxy.org/`: an annotation under one of them
    /// that no definition names is reported as unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
    /// Every annotation, by its full name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub definitions: BTreeMap<String, AnnotationDefinition>,
}

impl AnnotationSettings {
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty() && self.definitions.is_empty()
    }
}

/// One annotation: its value's kind, its documentation and what it adds to the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationDefinition {
    /// The kind of value: `bool`, `duration`, `seconds`, `integer [MIN..MAX]`, `size`,
    /// `redirect-code`, `status-code`, `statuses A|B`, `one-of A|B`, `addresses`, `headers`,
    /// `header-name`, `text`, `host`, `path`, `url`, `secret-name`, `origins`, `tokens`,
    /// `balance`, `path-rewrite`, `upstream-hash`, `rewrite-target`, `config-lines`,
    /// `samples` or `pattern REGEX`.
    #[serde(default = "default_accepts")]
    pub accepts: String,
    /// What applies when the annotation is absent (documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// What the annotation does, in HAProxy's terms (documentation).
    #[serde(default)]
    pub description: String,
    /// Where a value is read (`[Ingress]` when unset; `Ingress` is always among them):
    /// `Service` also reads it on the Service a backend serves, above the Ingress's value;
    /// `Defaults` also takes it from the config's extraContext `annotation_defaults`, below
    /// both. Beyond the Ingress, values are read where the templates ask for a backend's
    /// annotations (the `with_backend_annotations` helper).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<AnnotationScope>,
    /// The counterpart under the other prefix (documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equivalent: Option<String>,
    /// Where HAProxy's behaviour differs from ingress-nginx's in a way a user can observe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differs: Option<String>,
    /// Other names read as this annotation (the first present decides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// The snippets the template joins: `{{render_glob "annotations/<section>/*"}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The template's place among its section's (ascending, then by name).
    #[serde(default = "default_order")]
    pub order: u16,
    /// Lines rendered when the object carries a valid value, which they read as `value`
    /// (the object is `ing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Lines rendered instead when the value is present but invalid (a security setting
    /// that fails closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_invalid: Option<String>,
    /// What an invalid value leads to, in the words of the reason ("it is left out" when
    /// unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_effect: Option<String>,
    /// Set for an annotation that is recognised and never honoured: why, and what to use
    /// instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Where an annotation's value may come from (see [`AnnotationDefinition::scopes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AnnotationScope {
    /// The Ingress's `metadata.annotations`.
    Ingress,
    /// The `metadata.annotations` of the Service a backend serves; it wins over the Ingress.
    Service,
    /// The config's extraContext `annotation_defaults`, by annotation name; the Ingress and
    /// the Service win over it.
    Defaults,
}

impl AnnotationScope {
    /// The scope as the reference names it.
    pub fn name(self) -> &'static str {
        match self {
            AnnotationScope::Ingress => "Ingress",
            AnnotationScope::Service => "Service",
            AnnotationScope::Defaults => "Defaults",
        }
    }
}

fn default_scopes() -> Vec<AnnotationScope> {
    vec![AnnotationScope::Ingress]
}

fn default_accepts() -> String {
    "text".to_string()
}

fn default_order() -> u16 {
    50
}

/// One document fetched over HTTP for the templates (`spec.httpResources.<name>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpResourceSettings {
    /// The `http://` or `https://` URL fetched.
    pub url: String,
    /// How often the URL is fetched again (a Go-style duration; default `5m`). Requests
    /// after the first are conditional (`If-None-Match`, `If-Modified-Since`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_interval: Option<String>,
    /// How long one request may take (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// How many times a failed request is tried again, with a doubling backoff from 500 ms,
    /// before the fetch counts as failed (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// The largest body accepted, in bytes (default 1 MiB); a larger one fails the fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size_bytes: Option<u64>,
    /// A critical resource holds the first render until it is fetched (and `/readyz` names
    /// it); a non-critical one reads as empty until then.
    #[serde(default)]
    pub critical: bool,
    /// Credentials sent with each request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<HttpAuth>,
}

/// How an HTTP resource's requests authenticate, and where the secret comes from: a
/// Secret in the cluster (`haptor run`) or a file (`haptor local`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuth {
    /// `basic` (keys `username` and `password`), `bearer` (key `token`) or `header` (the
    /// header `header`, key `value`).
    #[serde(rename = "type")]
    pub kind: HttpAuthKind,
    /// The header sent, for `type: header`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The Secret holding the keys, in the config's namespace unless it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// A file holding the credential (`haptor local`; relative to the manifest folder): for
    /// `basic`, `username:password`; otherwise the token or header value. Surrounding
    /// whitespace is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// The kinds of HTTP authentication an HTTP resource can use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpAuthKind {
    #[default]
    Basic,
    Bearer,
    Header,
}

/// What a validation test's HTTP resource URL answers: a body (written as a plain string,
/// or `body:`), or a failing `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HttpFixture {
    Body(String),
    Answer {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
}

/// A generated auxiliary file: its template and optional post-processing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratedFile {
    pub template: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_processing: Vec<PostProcessor>,
}

/// The template of `haproxy.cfg`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HaproxyConfigTemplate {
    pub template: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_processing: Vec<PostProcessor>,
}

/// A transformation applied to rendered text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PostProcessor {
    /// Replace every match of a regular expression (`$1` refers to groups).
    RegexReplace { pattern: String, replace: String },
}

/// One validation test: fixtures in, assertions on the rendered output.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationTest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Objects per watched resource name, loaded into the stores before rendering; objects
    /// the resource's selectors exclude are left out. Namespace objects (kind Namespace,
    /// apiVersion v1) anywhere in the fixtures give their namespaces the labels
    /// `namespaceSelector` matches; a list named `namespaces` may hold them even when no
    /// watched resource has that name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "arbitrary_objects")]
    pub fixtures: BTreeMap<String, Vec<serde_json::Value>>,
    /// Replaces `extraContext` for this test. The `_global` test's, when set, replaces it
    /// for every test that sets none: the context the tests are written for, so that a
    /// config that changes its own extraContext still passes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "arbitrary_json")]
    pub extra_context: Option<serde_json::Value>,
    /// What each HTTP resource URL answers in this test (the `_global` test's apply to
    /// every test). A URL a template reads that no fixture gives fails the test.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "http_fixtures")]
    pub http_resources: BTreeMap<String, HttpFixture>,
    #[serde(default)]
    pub assertions: Vec<Assertion>,
}

/// What an assertion checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssertionKind {
    /// `haproxy -c` accepts the rendered configuration with its auxiliary files.
    HaproxyValid,
    /// The target matches the regular expression `pattern`.
    Contains,
    /// The target does not match `pattern`.
    NotContains,
    /// The target equals `expected` exactly.
    Equals,
    /// The JSONPath `jsonpath`, evaluated over the rendered output as JSON, yields `expected`.
    Jsonpath,
    /// `pattern` matches exactly `expected` times.
    MatchCount,
    /// The regular expressions in `patterns` match in this order.
    MatchOrder,
    /// Rendering twice gives byte-identical output.
    Deterministic,
}

/// One assertion of a validation test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Assertion {
    #[serde(rename = "type")]
    pub kind: AssertionKind,
    /// `haproxy.cfg` (default), `map:NAME`, `file:NAME`, `cert:NAME`, `crt-list:NAME`, or
    /// `outcomes`: one line per object the templates recorded (`<Kind> <ns>/<name>: served`,
    /// `<Kind> <ns>/<name>: left out: <reason>`), or `status`: the Gateway API status the
    /// templates recorded (`condition`, `listener_kinds`, `attached_route`), as YAML.
    #[serde(default = "default_assertion_target")]
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jsonpath: Option<String>,
}

fn default_assertion_target() -> String {
    "haproxy.cfg".to_string()
}

/// What the controller last concluded about a config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyTemplateConfigStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub validation_status: ValidationStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_errors: Vec<TemplateProblem>,
    /// RFC 3339 time of the last validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_validated: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Whether a config passed validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ValidationStatus {
    Valid,
    Invalid,
    #[default]
    Unknown,
}

/// A problem located in one template.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateProblem {
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    pub message: String,
}

/// The rendered configuration the leader published, and where it was deployed.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "haptor.dev",
    version = "v1alpha1",
    kind = "HAProxyCfg",
    namespaced,
    shortname = "hpcfg",
    status = "HAProxyCfgStatus",
    printcolumn = r#"{"name":"Checksum","type":"string","jsonPath":".spec.checksum"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyCfgSpec {
    /// Where the configuration lives on each instance.
    #[serde(default)]
    pub path: String,
    /// The rendered `haproxy.cfg` (userlist password hashes redacted), stored as
    /// `contentEncoding` says: as text when it is at most 256 KiB; above that gzip-compressed
    /// then base64-encoded; empty when even that form is above 1 MiB (the status condition
    /// `ContentPublished` is then `False` with reason `ContentTooLarge`).
    pub content: String,
    /// How `content` is stored. Absent: plain text (at most 256 KiB). `gzip+base64`: the
    /// configuration was above 256 KiB and `content` is its gzip compression, base64-encoded
    /// (at most 1 MiB). `omitted`: even the compressed form was above 1 MiB, so `content` is
    /// empty; `checksum` and `size` still describe the configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// The size in bytes of the uncompressed configuration, whatever `contentEncoding` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// `sha256:` followed by the hex SHA-256 of the configuration and its auxiliary files,
    /// present whatever `contentEncoding` is.
    pub checksum: String,
    /// The auxiliary files deployed with it.
    #[serde(default)]
    pub auxiliary_files: AuxiliaryFileSummary,
}

/// A summary of the auxiliary files of a published configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuxiliaryFileSummary {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maps: Vec<AuxiliaryFileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<AuxiliaryFileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssl_certificates: Vec<AuxiliaryFileEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crt_lists: Vec<AuxiliaryFileEntry>,
}

impl AuxiliaryFileSummary {
    /// The summary of a render's auxiliary files: per kind, each file's name, its path on
    /// the instance (under `base_dir`, the directory holding `haproxy.cfg`), the hex
    /// SHA-256 of its content and its size in bytes, ordered by path.
    pub fn of(rendered: &crate::pure::rendered::RenderedConfig, base_dir: &str) -> Self {
        let digests = crate::pure::checksum::AuxDigests::after(rendered, None);
        AuxiliaryFileSummary::with_digests(rendered, base_dir, &digests)
    }

    /// [`Self::of`] with the digests of the files' contents already known (taken over from
    /// an earlier render where a file is the same, [`crate::pure::checksum::AuxDigests`]).
    /// A file `digests` lacks is hashed here.
    pub fn with_digests(
        rendered: &crate::pure::rendered::RenderedConfig,
        base_dir: &str,
        digests: &crate::pure::checksum::AuxDigests,
    ) -> Self {
        use crate::pure::checksum::Checksum;
        use crate::pure::rendered::AuxKind;
        let mut summary = AuxiliaryFileSummary::default();
        let base = base_dir.trim_end_matches('/');
        for (path, file) in &rendered.aux_files {
            let checksum = digests
                .get(path)
                .unwrap_or_else(|| Checksum::of(file.content.as_bytes()));
            let entry = AuxiliaryFileEntry {
                name: file.name.clone(),
                path: format!("{base}/{path}"),
                checksum: checksum.prefixed(),
                size: file.content.len() as u64,
            };
            match file.kind {
                AuxKind::Map => summary.maps.push(entry),
                AuxKind::File => summary.files.push(entry),
                AuxKind::Cert => summary.ssl_certificates.push(entry),
                AuxKind::CrtList => summary.crt_lists.push(entry),
            }
        }
        summary
    }
}

/// One auxiliary file: name, path and checksum (contents of certificates are not published).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuxiliaryFileEntry {
    pub name: String,
    pub path: String,
    pub checksum: String,
    pub size: u64,
}

/// Per-instance deployment state of a published configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HAProxyCfgStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,
    /// Each HTTP resource the config fetches: the content in use and the last failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_resources: Vec<HttpResourceStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One HTTP resource's content in use, and why newer content is not (a failed fetch or a
/// rejected download; cleared when new content is in use).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpResourceStatus {
    pub name: String,
    pub url: String,
    /// When the content in use was put in use (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_use_since: Option<String>,
    /// The size of the content in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What one HAProxy instance runs and how its last deployment went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reload_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default)]
    pub consecutive_errors: u32,
}

/// Errors reading a config document.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDocumentError {
    #[error("{source_name}: not a valid HAProxyTemplateConfig: {message}")]
    Malformed {
        source_name: String,
        message: String,
    },
    #[error(
        "{source_name}: expected kind HAProxyTemplateConfig (apiVersion {GROUP}/{VERSION}), found kind '{found}'"
    )]
    WrongKind { source_name: String, found: String },
}

/// Reads a `HAProxyTemplateConfig` from YAML (or JSON) text. `source_name` names the file in
/// errors; YAML errors carry their line and column.
pub fn config_from_yaml(
    source_name: &str,
    text: &str,
) -> Result<HAProxyTemplateConfig, ConfigDocumentError> {
    let value: serde_json::Value =
        serde_yaml_ng::from_str(text).map_err(|e| ConfigDocumentError::Malformed {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
    let mut config = config_from_value(source_name, value)?;
    config.spec.source = Some(std::sync::Arc::new(
        crate::pure::yaml_lines::YamlLines::scan(source_name, text, 1),
    ));
    Ok(config)
}

/// Reads a `HAProxyTemplateConfig` from a JSON value already parsed from a manifest.
pub fn config_from_value(
    source_name: &str,
    value: serde_json::Value,
) -> Result<HAProxyTemplateConfig, ConfigDocumentError> {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    if kind != "HAProxyTemplateConfig" {
        return Err(ConfigDocumentError::WrongKind {
            source_name: source_name.to_string(),
            found: kind.to_string(),
        });
    }
    serde_json::from_value(value).map_err(|e| ConfigDocumentError::Malformed {
        source_name: source_name.to_string(),
        message: e.to_string(),
    })
}

/// The YAML of both CustomResourceDefinitions, as `haptor crd` prints it and `deploy/crds/`
/// holds it.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    use kube::CustomResourceExt;
    let mut out = String::new();
    for crd in [HAProxyTemplateConfig::crd(), HAProxyCfg::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
