//! Gateway API status in `haptor run`: the status the templates recorded
//! (`pure::gateway_status`), written by the leader to each GatewayClass, Gateway and Route
//! with server-side apply of its `status` subresource, field manager `haptor`.
//!
//! The Ingress status task runs it (`drivers::kube::ingress_status`): the same leadership
//! term, the same publish address. For each object whose desired status differs from what
//! was last written this term ([`GatewayStatusBook`]), the writer reads the object, merges
//! (`merged_status`: unchanged conditions keep their `lastTransitionTime`, other
//! controllers' Route parents are kept, a Gateway's `addresses` are its IPAddress
//! `spec.addresses` or the publish address), and applies the result only when it differs
//! from what the object carries, with the resourceVersion read as a precondition (a
//! concurrent writer makes it read again on the next try). A Route haptor wrote and no
//! longer serves has haptor's parents removed. Each request is bounded by
//! [`super::ingress_status::REQUEST_TIMEOUT`]; a failure is retried with the Ingress
//! status writes.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::pure::api_failure::{ApiFailure, ApiServer, Request};
use crate::pure::gateway_status::{
    GATEWAY_GROUP, GatewayStatusBook, ObjectStatus, merged_status, parent_controllers, plural,
};
use crate::pure::ingress_status::Addresses;
use crate::pure::rendered::ObjectKey;

use super::ingress_status::{FIELD_MANAGER, REQUEST_TIMEOUT};

/// Why one Gateway API status write failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayStatusFailure {
    #[error("{0} took longer than {REQUEST_TIMEOUT:?}")]
    TimedOut(&'static str),
    #[error("{0}")]
    Kube(Box<ApiFailure>),
}

/// Writes the Gateway API status of the latest render while this replica leads.
pub struct GatewayStatusWriter {
    client: Client,
    server: ApiServer,
    book: GatewayStatusBook,
}

impl GatewayStatusWriter {
    pub fn new(client: Client, server: ApiServer) -> GatewayStatusWriter {
        GatewayStatusWriter {
            client,
            server,
            book: GatewayStatusBook::default(),
        }
    }

    /// A new leadership term: every object is read and written again.
    pub fn new_term(&mut self) {
        self.book.new_term();
    }

    /// Writes every status due; the failures, by object, to be retried.
    pub async fn write(
        &mut self,
        desired: &[ObjectStatus],
        publish: Option<&Addresses>,
    ) -> Vec<(ObjectKey, GatewayStatusFailure)> {
        let mut failures = Vec::new();
        self.book.forget_absent(desired);
        let due: Vec<ObjectStatus> = self.book.due(desired).into_iter().cloned().collect();
        for status in due {
            let key = status.key();
            let mut ours = parent_controllers(&status.status);
            ours.extend(
                self.book
                    .written(&key)
                    .map(parent_controllers)
                    .unwrap_or_default(),
            );
            match self.apply(&key, &status.status, &ours, publish).await {
                Ok(true) => self.book.wrote(key, status.status.clone()),
                Ok(false) => self.book.forget(&key),
                Err(failure) => failures.push((key, failure)),
            }
        }
        for key in self.book.dropped(desired) {
            let ours = self
                .book
                .written(&key)
                .map(parent_controllers)
                .unwrap_or_default();
            match self.apply(&key, &json!({}), &ours, None).await {
                Ok(_) => self.book.forget(&key),
                Err(failure) => failures.push((key, failure)),
            }
        }
        failures
    }

    fn api(&self, key: &ObjectKey) -> (Api<DynamicObject>, ApiResource) {
        let (group, version) = key
            .api_version
            .split_once('/')
            .unwrap_or(("", key.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural(&key.kind));
        let api = if key.namespace.is_empty() {
            Api::all_with(self.client.clone(), &resource)
        } else {
            Api::namespaced_with(self.client.clone(), &key.namespace, &resource)
        };
        (api, resource)
    }

    fn failure(&self, verb: &str, key: &ObjectKey, error: &kube::Error) -> GatewayStatusFailure {
        let resource = plural(&key.kind);
        let resource = if verb == "patch" {
            format!("{resource}/status")
        } else {
            resource
        };
        let namespace = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
        GatewayStatusFailure::Kube(Box::new(ApiFailure::of(
            &self.server,
            &Request::new(verb, &resource, GATEWAY_GROUP, namespace).named(&key.name),
            error,
        )))
    }

    /// Reads the object and applies `desired` merged over its status when that changes it.
    /// True when the object carries the status now; false when it is gone.
    async fn apply(
        &self,
        key: &ObjectKey,
        desired: &Value,
        ours: &std::collections::BTreeSet<String>,
        publish: Option<&Addresses>,
    ) -> Result<bool, GatewayStatusFailure> {
        let (api, resource) = self.api(key);
        let read = tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(&key.name))
            .await
            .map_err(|_| GatewayStatusFailure::TimedOut("reading the object"))?
            .map_err(|e| self.failure("get", key, &e))?;
        let Some(object) = read else {
            return Ok(false);
        };
        let current = object.data.get("status").cloned().unwrap_or(Value::Null);
        let addresses = (key.kind == "Gateway").then(|| gateway_addresses(&object.data, publish));
        let now = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string());
        let merged = merged_status(&current, desired, ours, &now, addresses.flatten().as_ref());
        if without_times(&merged) == without_times(&current) {
            return Ok(true);
        }
        let body = json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {
                "name": key.name,
                "namespace": (!key.namespace.is_empty()).then_some(&key.namespace),
                "resourceVersion": object.metadata.resource_version,
            },
            "status": merged,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let written = tokio::time::timeout(
            REQUEST_TIMEOUT,
            api.patch_status(&key.name, &params, &Patch::Apply(&body)),
        )
        .await
        .map_err(|_| GatewayStatusFailure::TimedOut("writing its status"))?;
        match written {
            Ok(_) => {
                tracing::info!(object = %key, "Gateway API status written");
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(self.failure("patch", key, &e)),
        }
    }
}

/// A Gateway's `status.addresses`: its IPAddress `spec.addresses` (haptor binds its
/// listeners there), else the publish address; `None` without either.
fn gateway_addresses(gateway: &Value, publish: Option<&Addresses>) -> Option<Value> {
    let requested: Vec<Value> = gateway
        .pointer("/spec/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a.get("type").and_then(Value::as_str).unwrap_or("IPAddress") == "IPAddress")
        .filter_map(|a| a.get("value").and_then(Value::as_str))
        .map(|value| json!({"type": "IPAddress", "value": value}))
        .collect();
    if !requested.is_empty() {
        return Some(Value::Array(requested));
    }
    let published: Vec<Value> = publish
        .into_iter()
        .flatten()
        .filter_map(|address| match (&address.ip, &address.hostname) {
            (Some(ip), _) => Some(json!({"type": "IPAddress", "value": ip})),
            (None, Some(host)) => Some(json!({"type": "Hostname", "value": host})),
            (None, None) => None,
        })
        .collect();
    (!published.is_empty()).then_some(Value::Array(published))
}

/// `status` with every `lastTransitionTime` removed, for comparing what a write changes.
fn without_times(status: &Value) -> Value {
    match status {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| key.as_str() != "lastTransitionTime")
                .map(|(key, value)| (key.clone(), without_times(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}
