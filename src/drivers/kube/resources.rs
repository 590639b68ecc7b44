//! The watched resources on kube-rs: [`KubeResources`] is the [`ResourceSourceFactory`] of
//! `haptor run`. Each watched resource is resolved to an [`ApiResource`] by discovery of
//! its pinned group/version ([`KubeResources::resolve`], cached; a resource the server
//! does not serve is a [`SourceError`] naming it, which config loading reports), then
//! watched cluster-wide by `kube::runtime::watcher` with the default backoff. The stream
//! it opens carries what the watcher says as [`ResourceEvent`]s: a list (`InitStart`,
//! `InitApply`…, `InitDone`) first and after every relist — after a `410 Gone`, say,
//! when the watch resumed from a resourceVersion etcd has compacted away — then each
//! change. The watcher's `WatchState` treats a later list as a relist, so the store
//! converges on what the server holds, deletions missed while the watch was down included.
//!
//! ```text
//!  WatchedResource ──resolve──▶ ApiResource (discovery, cached)
//!  watcher(Api::all_with, labelSelector + the server's part of the fieldSelector)
//!     │  Event<DynamicObject> ─▶ CompactObject (apiVersion and kind always set)
//!     ├─ no namespaceSelector ──────────────────────────────────────▶ ResourceEvent
//!     └─ namespaceSelector ─▶ NamespaceJoin ◀─ watcher(PartialObjectMeta<Namespace>) ─▶ ResourceEvent
//! ```
//!
//! Selectors. The label selector goes to the server as it is (in its canonical form); the
//! field selector goes to the server only where the server selects on that field for the
//! kind (`pure::store::field_selector`: `metadata.name` and `metadata.namespace` for most
//! kinds, `type` for Secrets, …), and either way the watcher applies both again before an
//! object is stored, so the store holds the same objects whichever side filtered. Ignored
//! fields (`watchedResourcesIgnoreFields`) are stripped by the store as it stores an object.
//!
//! A `namespaceSelector` needs the labels of the objects' namespaces, which no server-side
//! selector sees. The resource is still watched once, cluster-wide, next to a metadata-only
//! watch of Namespaces; a [`NamespaceJoin`] keeps what both say and forwards the objects
//! of matching namespaces only, with [`NamespaceLabels`] and [`NamespaceChange::membership`]
//! deciding, as `MemorySource` does for `haptor local`: when a namespace's labels change,
//! its objects enter (an `Apply` each) or leave (a `Delete` each). A list is forwarded
//! only once the Namespaces have been listed, so staged start-up waits for both.
//!
//! Errors. A failing list or watch (403 Forbidden, 404 Not Found, a broken connection) is
//! told as `pure::api_failure` says — the API server's URL, the real cause, what to do; a
//! refusal only once it lasts, since a restarted API server refuses for a moment — and the
//! stream goes on: the watcher retries with its backoff and relists when it recovers. A
//! resource that cannot be resolved when its stream opens (a CRD not installed yet) is
//! logged and resolved again with a backoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::{GroupVersion, PartialObjectMeta, TypeMeta};
use kube::discovery::{self, verbs};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::drivers::kube::{KubeApi, tell_watch_failure, tell_watch_resumed};
use crate::messages::ResourceEvent;
use crate::pure::api_failure::{ApiFailure, ApiServer, FailureLog, Request};
use crate::pure::config::WatchedResource;
use crate::pure::selector::LabelSelector;
use crate::pure::store::CompactObject;
use crate::pure::store::field_selector::server_field_selector;
use crate::pure::store::namespace_join::{Keyed, ListEvent, NamespaceJoin};
use crate::seams::ResourceSourceFactory;

/// The first wait before resolving a resource again that could not be resolved when its
/// stream opened; it doubles up to [`RESOLVE_RETRY_MAX`].
const RESOLVE_RETRY_FIRST: Duration = Duration::from_secs(1);
const RESOLVE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Why a watched resource cannot be resolved to something the API server serves.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(
        "resource '{resources}' has apiVersion '{api_version}', which is neither group/version \
         nor v1 (the core group)"
    )]
    InvalidApiVersion {
        resources: String,
        api_version: String,
    },
    #[error("resource '{resources}' in {api_version} does not exist on this API server")]
    NotFound {
        resources: String,
        api_version: String,
    },
    #[error(
        "resource '{resources}' in {api_version} holds objects of kind {served}, not \
         {configured}: correct the kind or leave it out"
    )]
    KindMismatch {
        resources: String,
        api_version: String,
        configured: String,
        served: String,
    },
    #[error(
        "resource '{resources}' in {api_version} cannot be watched: the API server offers \
         the verbs [{verbs}] on it, not both list and watch"
    )]
    NotWatchable {
        resources: String,
        api_version: String,
        verbs: String,
    },
    #[error("discovering resource '{resources}' in {api_version} failed: {failure}")]
    Discovery {
        resources: String,
        api_version: String,
        failure: Box<ApiFailure>,
    },
}

impl SourceError {
    /// The error's cause as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SourceError::InvalidApiVersion { .. } => "invalid_api_version",
            SourceError::NotFound { .. } => "not_found",
            SourceError::KindMismatch { .. } => "kind_mismatch",
            SourceError::NotWatchable { .. } => "not_watchable",
            SourceError::Discovery { .. } => "discovery",
        }
    }
}

/// The resource sources of `haptor run`, over one `kube::Client`. Cheap to clone; clones
/// share the cache of resolved resources.
#[derive(Clone)]
pub struct KubeResources {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The API server the client talks to, as failures name it.
    server: ApiServer,
    /// Watch namespaced resources in this namespace only (`--watch-namespace`); cluster-
    /// scoped ones are watched cluster-wide either way.
    namespace: Option<String>,
    /// Resolved resources by (apiVersion, plural), with whether they are namespaced.
    resolved: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
}

impl std::fmt::Debug for KubeResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeResources").finish_non_exhaustive()
    }
}

impl KubeResources {
    pub fn new(client: impl Into<KubeApi>) -> KubeResources {
        KubeResources::in_namespace(client, None)
    }

    /// Watches namespaced resources only in `namespace` when one is given (a namespaced
    /// install: RBAC grants Roles there, not ClusterRoles).
    pub fn in_namespace(client: impl Into<KubeApi>, namespace: Option<String>) -> KubeResources {
        let KubeApi { client, server } = client.into();
        KubeResources {
            inner: Arc::new(Inner {
                client,
                server,
                namespace: namespace.filter(|n| !n.is_empty()),
                resolved: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The API resource the server serves for a watched resource: discovery of its
    /// group/version (`kube::discovery::pinned_group`), the resource found by its plural.
    /// The kind, when the config gives one, must be the served one, and the server must
    /// offer list and watch on it. A resolved resource is cached; failures are not, so a
    /// CRD installed later is found.
    pub async fn resolve(&self, watched: &WatchedResource) -> Result<ApiResource, SourceError> {
        let found = self.discover(watched).await?;
        match watched.kind.as_deref().filter(|k| !k.is_empty()) {
            Some(configured) if configured != found.kind => Err(SourceError::KindMismatch {
                resources: watched.resources.clone(),
                api_version: watched.api_version.clone(),
                configured: configured.to_string(),
                served: found.kind,
            }),
            _ => Ok(found),
        }
    }

    /// The served, watchable resource of this apiVersion and plural (cached).
    async fn discover(&self, watched: &WatchedResource) -> Result<ApiResource, SourceError> {
        let key = (watched.api_version.clone(), watched.resources.clone());
        if let Some((found, _)) = self.cache().get(&key) {
            return Ok(found.clone());
        }
        let resources = || watched.resources.clone();
        let api_version = || watched.api_version.clone();
        let invalid = || SourceError::InvalidApiVersion {
            resources: resources(),
            api_version: api_version(),
        };
        // `group/version` or `version`: one slash at most, nothing blank.
        if watched.api_version.split('/').count() > 2
            || watched.api_version.split('/').any(str::is_empty)
        {
            return Err(invalid());
        }
        let group_version: GroupVersion = watched.api_version.parse().map_err(|_| invalid())?;
        let group = match discovery::pinned_group(&self.inner.client, &group_version).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(SourceError::NotFound {
                    resources: resources(),
                    api_version: api_version(),
                });
            }
            Err(source) => {
                let request =
                    Request::new("discover", &watched.resources, &group_version.group, None);
                return Err(SourceError::Discovery {
                    resources: resources(),
                    api_version: api_version(),
                    failure: Box::new(ApiFailure::of(&self.inner.server, &request, &source)),
                });
            }
        };
        let Some((found, capabilities)) = group
            .versioned_resources(&group_version.version)
            .into_iter()
            .find(|(resource, _)| resource.plural == watched.resources)
        else {
            return Err(SourceError::NotFound {
                resources: resources(),
                api_version: api_version(),
            });
        };
        if !(capabilities.supports_operation(verbs::LIST)
            && capabilities.supports_operation(verbs::WATCH))
        {
            return Err(SourceError::NotWatchable {
                resources: resources(),
                api_version: api_version(),
                verbs: capabilities.operations.join(", "),
            });
        }
        let namespaced = capabilities.scope == discovery::Scope::Namespaced;
        self.cache().insert(key, (found.clone(), namespaced));
        Ok(found)
    }

    /// The namespace a resolved resource is watched in: `--watch-namespace` for a namespaced
    /// one, none (cluster-wide) otherwise.
    fn watch_namespace(&self, watched: &WatchedResource) -> Option<String> {
        let key = (watched.api_version.clone(), watched.resources.clone());
        let namespaced = self.cache().get(&key).is_some_and(|(_, n)| *n);
        self.inner.namespace.clone().filter(|_| namespaced)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (ApiResource, bool)>> {
        self.inner
            .resolved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Resolves until it succeeds, logging each failure.
    async fn resolve_retrying(&self, plan: &WatchPlan) -> ApiResource {
        let mut delay = RESOLVE_RETRY_FIRST;
        loop {
            match self.resolve(&plan.watched).await {
                Ok(found) => return found,
                Err(error) => {
                    tracing::error!(
                        resource = %plan.resource,
                        %error,
                        retry_in = ?delay,
                        "cannot watch resource '{}' yet; trying again",
                        plan.resource
                    );
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RESOLVE_RETRY_MAX);
                }
            }
        }
    }

    /// The events of one resolved resource (see the module documentation).
    fn watch(
        &self,
        plan: WatchPlan,
        api_resource: ApiResource,
    ) -> BoxStream<'static, ResourceEvent> {
        let client = self.inner.client.clone();
        let watch_namespace = self.watch_namespace(&plan.watched);
        let field_selector = plan.watched.field_selector.as_deref().and_then(|selector| {
            server_field_selector(&api_resource.api_version, &api_resource.kind, selector)
        });
        let mut config = watcher::Config::default();
        if let Some(labels) = &plan.label_selector {
            config = config.labels(labels);
        }
        if let Some(fields) = &field_selector {
            config = config.fields(fields);
        }
        tracing::info!(
            resource = %plan.resource,
            api_version = %api_resource.api_version,
            plural = %api_resource.plural,
            label_selector = plan.label_selector.as_deref().unwrap_or_default(),
            server_field_selector = field_selector.as_deref().unwrap_or_default(),
            field_selector = plan.watched.field_selector.as_deref().unwrap_or_default(),
            namespace_selector = plan.watched.namespace_selector.as_deref().unwrap_or_default(),
            "watching resource '{}' {}",
            plan.resource,
            match &watch_namespace {
                Some(namespace) => format!("in namespace {namespace}"),
                None => "cluster-wide".to_string(),
            }
        );
        let mut watched = Watched {
            what: if plan.resource == api_resource.plural {
                plan.resource.clone()
            } else {
                format!(
                    "{} (watched resource '{}')",
                    api_resource.plural, plan.resource
                )
            },
            server: self.inner.server.clone(),
            request: Request::watch(
                &api_resource.plural,
                &api_resource.group,
                watch_namespace.as_deref(),
            ),
            failures: FailureLog::new(),
        };
        let api = match &watch_namespace {
            Some(namespace) => {
                Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &api_resource)
            }
            None => Api::<DynamicObject>::all_with(client.clone(), &api_resource),
        };
        let objects = super::retried(watcher::watcher(api, config))
            .filter_map(move |item| future::ready(keep(&mut watched, item)))
            .filter_map(move |event| future::ready(keyed_event(event, &api_resource)));
        let Some(selector) = plan.namespace_selector else {
            return objects.map(ResourceEvent::from).boxed();
        };
        let mut namespaces_watched = Watched {
            what: format!(
                "namespaces (for the namespaceSelector of '{}')",
                plan.resource
            ),
            server: self.inner.server.clone(),
            request: Request::watch("namespaces", "", None),
            failures: FailureLog::new(),
        };
        let namespaces = super::retried(watcher::watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client),
            watcher::Config::default(),
        ))
        .filter_map(move |item| future::ready(keep(&mut namespaces_watched, item)))
        .map(|event| list_event(event, namespace_metadata));
        let mut join = NamespaceJoin::new(selector);
        stream::select(
            objects.map(Side::Objects).boxed(),
            namespaces.map(Side::Namespaces).boxed(),
        )
        .flat_map(move |side| {
            stream::iter(match side {
                Side::Objects(event) => join.on_objects(event),
                Side::Namespaces(event) => join.on_namespaces(event),
            })
        })
        .boxed()
    }
}

impl ResourceSourceFactory for KubeResources {
    fn open(&self, resource: &str, watched: &WatchedResource) -> BoxStream<'static, ResourceEvent> {
        let plan = WatchPlan::new(resource, watched);
        let source = self.clone();
        stream::once(async move {
            let api_resource = source.resolve_retrying(&plan).await;
            source.watch(plan, api_resource)
        })
        .flatten()
        .boxed()
    }
}

/// What one stream watches, with the selectors as they are sent.
struct WatchPlan {
    resource: String,
    watched: WatchedResource,
    /// The label selector in Kubernetes' canonical text form.
    label_selector: Option<String>,
    namespace_selector: Option<LabelSelector>,
}

impl WatchPlan {
    fn new(resource: &str, watched: &WatchedResource) -> WatchPlan {
        // Config validation refuses a config with a selector that does not parse before
        // any watcher opens; should one get here anyway, the label selector is left to the
        // client-side filter and the namespace selector admits no namespaced object, as
        // `MemorySource` does.
        let label_selector = match LabelSelector::parse_optional(watched.label_selector.as_deref())
        {
            Ok(selector) => selector.map(|s| s.to_string()),
            Err(error) => {
                tracing::error!(%resource, %error, "unusable labelSelector: not sent to the API server");
                None
            }
        };
        let namespace_selector = match LabelSelector::parse_optional(
            watched.namespace_selector.as_deref(),
        ) {
            Ok(selector) => selector,
            Err(error) => {
                tracing::error!(%resource, %error, "unusable namespaceSelector: the stream carries no namespaced objects");
                Some(LabelSelector::nothing())
            }
        };
        WatchPlan {
            resource: resource.to_string(),
            watched: watched.clone(),
            label_selector,
            namespace_selector,
        }
    }
}

/// A watch, as its errors name it.
struct Watched {
    /// What the log calls the watch: the plural, with the config's name of the resource
    /// when that differs (two resources may watch secrets), or `namespaces` with the
    /// resource whose namespaceSelector it serves.
    what: String,
    server: ApiServer,
    /// The list and watch, as a refusal's hint names it.
    request: Request,
    /// How the watch's failures are told (`pure::api_failure::FailureLog`).
    failures: FailureLog,
}

/// Passes an event on; tells an error as the watch's `FailureLog` decides (the API
/// server's URL, the cause, a refusal's advice once it lasts) and drops it (the watcher
/// retries with `watch_retry`, see `retried`). The first answer after failures says, once,
/// that the watch resumed, after how many tries and how long (an expired watch's relist,
/// `410 Gone`, is no failure; `Init`, which opens a list before any request, is no answer).
fn keep<T>(watched: &mut Watched, item: watcher::Result<Event<T>>) -> Option<Event<T>> {
    match item {
        Ok(event) => {
            if !matches!(event, Event::Init) {
                tell_watch_resumed(&mut watched.failures, &watched.what);
            }
            Some(event)
        }
        Err(error) => {
            let failure = ApiFailure::of_watch(&watched.server, &watched.request, &error);
            tell_watch_failure(&mut watched.failures, &failure, &watched.what);
            None
        }
    }
}

/// The watcher's event with its object in compact form, or `None` for an object that
/// cannot be written as JSON (logged; not expected from objects the server sent).
fn keyed_event(
    event: Event<DynamicObject>,
    api_resource: &ApiResource,
) -> Option<ListEvent<Keyed>> {
    Some(match event {
        Event::Init => ListEvent::Init,
        Event::InitDone => ListEvent::InitDone,
        Event::InitApply(object) => ListEvent::InitApply(keyed(object, api_resource)?),
        Event::Apply(object) => ListEvent::Apply(keyed(object, api_resource)?),
        Event::Delete(object) => ListEvent::Delete(keyed(object, api_resource)?),
    })
}

/// An object in compact form. Objects of a list carry no apiVersion and kind (the list
/// does), those of watch events do: both are set from the resource, so a listed object and
/// the same object from a watch event are the same text.
fn keyed(mut object: DynamicObject, api_resource: &ApiResource) -> Option<Keyed> {
    object.types = Some(TypeMeta {
        api_version: api_resource.api_version.clone(),
        kind: api_resource.kind.clone(),
    });
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    match serde_json::to_value(&object) {
        Ok(value) => Some(Keyed {
            namespace,
            name,
            object: CompactObject::from_value(&value),
        }),
        Err(error) => {
            tracing::warn!(kind = %api_resource.kind, %namespace, %name, %error, "an object that cannot be written as JSON is skipped");
            None
        }
    }
}

/// What `NamespaceLabels` reads of a Namespace: its name and labels.
fn namespace_metadata(namespace: PartialObjectMeta<Namespace>) -> Value {
    json!({ "metadata": { "name": namespace.name_any(), "labels": namespace.labels() } })
}

/// A watcher's event as the pure code takes it.
fn list_event<T, U>(event: Event<T>, f: impl FnOnce(T) -> U) -> ListEvent<U> {
    match event {
        Event::Init => ListEvent::Init,
        Event::InitDone => ListEvent::InitDone,
        Event::InitApply(object) => ListEvent::InitApply(f(object)),
        Event::Apply(object) => ListEvent::Apply(f(object)),
        Event::Delete(object) => ListEvent::Delete(f(object)),
    }
}

/// An event of either watch behind a namespace-selected stream.
enum Side {
    Objects(ListEvent<Keyed>),
    /// A Namespace's metadata (`namespace_metadata`).
    Namespaces(ListEvent<Value>),
}
