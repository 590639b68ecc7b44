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
//! logged naming the resource and what to do, and the stream goes on: the watcher retries
//! with its backoff and relists when it recovers. A resource that cannot be resolved when
//! its stream opens (a CRD not installed yet) is logged and resolved again with a backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::{GroupVersion, PartialObjectMeta, TypeMeta};
use kube::discovery::{self, verbs};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::actors::context::ResourceSourceFactory;
use crate::messages::ResourceEvent;
use crate::pure::config::WatchedResource;
use crate::pure::selector::{LabelSelector, Membership, NamespaceChange, NamespaceLabels};
use crate::pure::store::CompactObject;
use crate::pure::store::field_selector::server_field_selector;

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
    #[error("discovering resource '{resources}' in {api_version} failed: {source}")]
    Discovery {
        resources: String,
        api_version: String,
        #[source]
        source: kube::Error,
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
    /// Resolved resources by (apiVersion, plural).
    resolved: Mutex<HashMap<(String, String), ApiResource>>,
}

impl std::fmt::Debug for KubeResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeResources").finish_non_exhaustive()
    }
}

impl KubeResources {
    pub fn new(client: Client) -> KubeResources {
        KubeResources {
            inner: Arc::new(Inner {
                client,
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
        if let Some(found) = self.cache().get(&key) {
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
                return Err(SourceError::Discovery {
                    resources: resources(),
                    api_version: api_version(),
                    source,
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
        self.cache().insert(key, found.clone());
        Ok(found)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ApiResource>> {
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
            "watching resource '{}' cluster-wide",
            plan.resource
        );
        let watched = Watched {
            resource: plan.resource.clone(),
            api_version: api_resource.api_version.clone(),
            group: api_resource.group.clone(),
            plural: api_resource.plural.clone(),
            for_resource: None,
        };
        let api = Api::<DynamicObject>::all_with(client.clone(), &api_resource);
        let objects = watcher::watcher(api, config)
            .default_backoff()
            .filter_map(move |item| future::ready(keep(&watched, item)))
            .filter_map(move |event| future::ready(keyed_event(event, &api_resource)));
        let Some(selector) = plan.namespace_selector else {
            return objects.map(resource_event).boxed();
        };
        let namespaces_watched = Watched {
            resource: "namespaces".into(),
            api_version: "v1".into(),
            group: String::new(),
            plural: "namespaces".into(),
            for_resource: Some(plan.resource.clone()),
        };
        let namespaces = watcher::watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .filter_map(move |item| future::ready(keep(&namespaces_watched, item)))
        .map(|event| event.map_objects(namespace_metadata));
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
    /// The config's name of the watched resource (or `namespaces`).
    resource: String,
    api_version: String,
    group: String,
    plural: String,
    /// For the Namespaces watch: the resource whose namespaceSelector it serves.
    for_resource: Option<String>,
}

/// Passes an event on; logs an error, naming the watch and what to do about it, and drops
/// it (the watcher retries with its backoff).
fn keep<T>(watched: &Watched, item: watcher::Result<Event<T>>) -> Option<Event<T>> {
    match item {
        Ok(event) => Some(event),
        Err(error) => {
            report(watched, &error);
            None
        }
    }
}

fn report(watched: &Watched, error: &watcher::Error) {
    let Watched {
        resource,
        api_version,
        group,
        plural,
        for_resource,
    } = watched;
    let for_resource = for_resource.as_deref().unwrap_or_default();
    let status = match error {
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    };
    match status {
        Some(410) => tracing::info!(
            %resource, %for_resource, %error,
            "the watch of {plural} expired (410 Gone): listing {plural} again"
        ),
        Some(401 | 403) => tracing::error!(
            %resource, %for_resource, %error,
            "forbidden to watch {plural}: grant haptor's service account the verbs list and \
             watch on resource {plural} in API group '{group}' (a ClusterRole: the watch is \
             cluster-wide); retrying with backoff"
        ),
        Some(404) => tracing::error!(
            %resource, %for_resource, %error,
            "{plural} in {api_version} is not served (was its CustomResourceDefinition \
             removed?); retrying with backoff"
        ),
        _ => tracing::warn!(
            %resource, %for_resource, %error,
            "watching {plural} failed; retrying with backoff"
        ),
    }
}

/// One object of the watched resource with its namespace and name.
#[derive(Debug, Clone)]
struct Keyed {
    namespace: String,
    name: String,
    object: CompactObject,
}

/// The watcher's event with its object in compact form, or `None` for an object that
/// cannot be written as JSON (logged; not expected from objects the server sent).
fn keyed_event(event: Event<DynamicObject>, api_resource: &ApiResource) -> Option<Event<Keyed>> {
    let keyed = |object| keyed(object, api_resource);
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(object) => Event::InitApply(keyed(object)?),
        Event::Apply(object) => Event::Apply(keyed(object)?),
        Event::Delete(object) => Event::Delete(keyed(object)?),
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

fn resource_event(event: Event<Keyed>) -> ResourceEvent {
    match event {
        Event::Init => ResourceEvent::InitStart,
        Event::InitApply(keyed) => ResourceEvent::InitApply(keyed.object),
        Event::InitDone => ResourceEvent::InitDone,
        Event::Apply(keyed) => ResourceEvent::Apply(keyed.object),
        Event::Delete(keyed) => ResourceEvent::Delete(keyed.object),
    }
}

/// What `NamespaceLabels` reads of a Namespace: its name and labels.
fn namespace_metadata(namespace: PartialObjectMeta<Namespace>) -> Value {
    json!({ "metadata": { "name": namespace.name_any(), "labels": namespace.labels() } })
}

trait MapObjects<T> {
    fn map_objects<U>(self, f: impl FnOnce(T) -> U) -> Event<U>;
}

impl<T> MapObjects<T> for Event<T> {
    fn map_objects<U>(self, f: impl FnOnce(T) -> U) -> Event<U> {
        match self {
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
            Event::InitApply(object) => Event::InitApply(f(object)),
            Event::Apply(object) => Event::Apply(f(object)),
            Event::Delete(object) => Event::Delete(f(object)),
        }
    }
}

/// An event of either watch behind a namespace-selected stream.
enum Side {
    Objects(Event<Keyed>),
    /// A Namespace's metadata (`namespace_metadata`).
    Namespaces(Event<Value>),
}

/// The namespace selection of one watched resource: the resource's cluster-wide watch and
/// the Namespaces watch in, the objects of namespaces whose labels match the selector out
/// (cluster-scoped objects always pass). Its own events mirror the watcher's: a list
/// (`InitStart`, `InitApply`…, `InitDone`), sent as one once the resource's list is complete
/// and the Namespaces have been listed, then changes. A namespace whose labels start or stop
/// matching lets its objects enter (`Apply` each) or leave (`Delete` each).
#[derive(Debug)]
struct NamespaceJoin {
    selector: LabelSelector,
    labels: NamespaceLabels,
    /// The Namespaces `labels` holds objects of.
    known: BTreeSet<String>,
    /// The Namespaces listed so far by a Namespaces (re)list in progress.
    namespaces_listing: Option<BTreeSet<String>>,
    namespaces_listed: bool,
    /// Every object of the resource as the server has it, matching or not, by namespace
    /// and name: an object enters when its namespace starts to match.
    objects: BTreeMap<(String, String), CompactObject>,
    /// The objects of a list of the resource in progress.
    listing: Option<BTreeMap<(String, String), CompactObject>>,
    /// A complete list of the resource waits for the Namespaces' first list.
    list_waiting: bool,
    /// A list has been sent: changes are sent from now on.
    live: bool,
}

impl NamespaceJoin {
    fn new(selector: LabelSelector) -> NamespaceJoin {
        NamespaceJoin {
            selector,
            labels: NamespaceLabels::new(),
            known: BTreeSet::new(),
            namespaces_listing: None,
            namespaces_listed: false,
            objects: BTreeMap::new(),
            listing: None,
            list_waiting: false,
            live: false,
        }
    }

    fn admits(&self, namespace: &str) -> bool {
        self.labels.admits(&self.selector, namespace)
    }

    /// An event of the resource's watch.
    fn on_objects(&mut self, event: Event<Keyed>) -> Vec<ResourceEvent> {
        match event {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                self.list_waiting = false;
                vec![]
            }
            Event::InitApply(keyed) => {
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert((keyed.namespace, keyed.name), keyed.object);
                vec![]
            }
            Event::InitDone => {
                self.objects = self.listing.take().unwrap_or_default();
                if self.namespaces_listed {
                    self.list()
                } else {
                    self.list_waiting = true;
                    vec![]
                }
            }
            Event::Apply(keyed) => {
                let admitted = self.admits(&keyed.namespace);
                self.objects
                    .insert((keyed.namespace, keyed.name), keyed.object.clone());
                if self.live && admitted {
                    vec![ResourceEvent::Apply(keyed.object)]
                } else {
                    vec![]
                }
            }
            Event::Delete(keyed) => {
                let admitted = self.admits(&keyed.namespace);
                self.objects.remove(&(keyed.namespace, keyed.name));
                if self.live && admitted {
                    vec![ResourceEvent::Delete(keyed.object)]
                } else {
                    vec![]
                }
            }
        }
    }

    /// An event of the Namespaces watch (each object a Namespace's metadata).
    fn on_namespaces(&mut self, event: Event<Value>) -> Vec<ResourceEvent> {
        match event {
            Event::Init => {
                self.namespaces_listing = Some(BTreeSet::new());
                vec![]
            }
            Event::InitApply(namespace) => {
                if let Some(name) = name_of(&namespace) {
                    self.namespaces_listing
                        .get_or_insert_with(BTreeSet::new)
                        .insert(name.to_string());
                }
                self.namespace_applied(&namespace)
            }
            Event::InitDone => {
                // Namespaces not listed again are gone.
                let listed = self.namespaces_listing.take().unwrap_or_default();
                let gone: Vec<String> = self.known.difference(&listed).cloned().collect();
                let mut events = Vec::new();
                for name in gone {
                    events.extend(self.namespace_removed(&name));
                }
                self.known = listed;
                self.namespaces_listed = true;
                if self.list_waiting {
                    events.extend(self.list());
                }
                events
            }
            Event::Apply(namespace) => self.namespace_applied(&namespace),
            Event::Delete(namespace) => match name_of(&namespace) {
                Some(name) => {
                    let name = name.to_string();
                    self.namespace_removed(&name)
                }
                None => vec![],
            },
        }
    }

    fn namespace_applied(&mut self, namespace: &Value) -> Vec<ResourceEvent> {
        if let Some(name) = name_of(namespace) {
            self.known.insert(name.to_string());
        }
        let change = self.labels.apply(namespace);
        self.membership(change)
    }

    fn namespace_removed(&mut self, name: &str) -> Vec<ResourceEvent> {
        self.known.remove(name);
        let change = self.labels.remove(name);
        self.membership(change)
    }

    /// The objects of a namespace whose labels changed, entering or leaving.
    fn membership(&self, change: Option<NamespaceChange>) -> Vec<ResourceEvent> {
        let Some(change) = change.filter(|_| self.live) else {
            return vec![];
        };
        let event: fn(CompactObject) -> ResourceEvent = match change.membership(&self.selector) {
            Membership::Enter => ResourceEvent::Apply,
            Membership::Leave => ResourceEvent::Delete,
            Membership::Unchanged => return vec![],
        };
        let namespace = &change.namespace;
        self.objects
            .range((namespace.clone(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(_, object)| event(object.clone()))
            .collect()
    }

    /// The whole list of admitted objects, as one list.
    fn list(&mut self) -> Vec<ResourceEvent> {
        self.list_waiting = false;
        self.live = true;
        let mut events = vec![ResourceEvent::InitStart];
        events.extend(
            self.objects
                .iter()
                .filter(|((namespace, _), _)| self.admits(namespace))
                .map(|(_, object)| ResourceEvent::InitApply(object.clone())),
        );
        events.push(ResourceEvent::InitDone);
        events
    }
}

fn name_of(namespace: &Value) -> Option<&str> {
    namespace
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(namespace: &str, name: &str) -> Keyed {
        let value = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": { "name": name, "namespace": namespace },
        });
        Keyed {
            namespace: namespace.into(),
            name: name.into(),
            object: CompactObject::from_value(&value),
        }
    }

    fn namespace(name: &str, team: &str) -> Value {
        json!({ "metadata": { "name": name, "labels": { "team": team } } })
    }

    fn join() -> NamespaceJoin {
        NamespaceJoin::new(LabelSelector::parse("team=web").expect("parses"))
    }

    fn list(join: &mut NamespaceJoin, objects: &[Keyed]) -> Vec<ResourceEvent> {
        let mut events = join.on_objects(Event::Init);
        for object in objects {
            events.extend(join.on_objects(Event::InitApply(object.clone())));
        }
        events.extend(join.on_objects(Event::InitDone));
        events
    }

    fn list_namespaces(join: &mut NamespaceJoin, namespaces: &[Value]) -> Vec<ResourceEvent> {
        let mut events = join.on_namespaces(Event::Init);
        for namespace in namespaces {
            events.extend(join.on_namespaces(Event::InitApply(namespace.clone())));
        }
        events.extend(join.on_namespaces(Event::InitDone));
        events
    }

    #[test]
    fn the_list_waits_for_the_namespaces_and_carries_only_matching_namespaces_objects() {
        let mut join = join();
        let objects = [ingress("shop", "a"), ingress("blog", "b")];
        assert_eq!(
            list(&mut join, &objects),
            vec![],
            "the namespaces are not known yet"
        );
        assert_eq!(
            join.on_objects(Event::Apply(ingress("shop", "c"))),
            vec![],
            "nothing is sent before the list"
        );
        assert_eq!(
            list_namespaces(
                &mut join,
                &[namespace("shop", "web"), namespace("blog", "docs")]
            ),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(ingress("shop", "a").object),
                ResourceEvent::InitApply(ingress("shop", "c").object),
                ResourceEvent::InitDone,
            ]
        );
        assert_eq!(join.on_objects(Event::Apply(ingress("blog", "d"))), vec![]);
        assert_eq!(
            join.on_objects(Event::Delete(ingress("shop", "a"))),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)]
        );
    }

    #[test]
    fn relabelling_a_namespace_moves_its_objects_in_and_out() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "docs")]);
        assert_eq!(
            list(&mut join, &[ingress("shop", "a"), ingress("shop", "b")]),
            vec![ResourceEvent::InitStart, ResourceEvent::InitDone]
        );
        let entered = join.on_namespaces(Event::Apply(namespace("shop", "web")));
        assert_eq!(
            entered,
            vec![
                ResourceEvent::Apply(ingress("shop", "a").object),
                ResourceEvent::Apply(ingress("shop", "b").object),
            ]
        );
        assert_eq!(
            join.on_namespaces(Event::Apply(namespace("shop", "web"))),
            vec![],
            "the same labels again change nothing"
        );
        assert_eq!(
            join.on_namespaces(Event::Delete(namespace("shop", "web"))),
            vec![
                ResourceEvent::Delete(ingress("shop", "a").object),
                ResourceEvent::Delete(ingress("shop", "b").object),
            ]
        );
    }

    #[test]
    fn a_namespaces_relist_drops_namespaces_no_longer_listed() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "web")]);
        assert_eq!(list(&mut join, &[ingress("shop", "a")]).len(), 3);
        assert_eq!(
            list_namespaces(&mut join, &[]),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)],
            "its labels went with it"
        );
    }

    #[test]
    fn a_relist_of_the_resource_is_judged_by_the_labels_at_its_end() {
        let mut join = join();
        list_namespaces(&mut join, &[namespace("shop", "web")]);
        list(&mut join, &[ingress("shop", "a")]);
        assert_eq!(join.on_objects(Event::Init), vec![]);
        join.on_objects(Event::InitApply(ingress("shop", "b")));
        assert_eq!(
            join.on_namespaces(Event::Apply(namespace("shop", "docs"))),
            vec![ResourceEvent::Delete(ingress("shop", "a").object)],
            "what was sent leaves at once"
        );
        assert_eq!(
            join.on_objects(Event::InitDone),
            vec![ResourceEvent::InitStart, ResourceEvent::InitDone]
        );
    }

    #[test]
    fn cluster_scoped_objects_pass() {
        let mut join = join();
        list_namespaces(&mut join, &[]);
        let class = ingress("", "haptor");
        assert_eq!(
            list(&mut join, std::slice::from_ref(&class)),
            vec![
                ResourceEvent::InitStart,
                ResourceEvent::InitApply(class.object),
                ResourceEvent::InitDone,
            ]
        );
    }
}
