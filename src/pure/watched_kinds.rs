//! Which objects a config reads, by `apiVersion` and kind: those of its watched resources,
//! and Namespaces when a watched resource selects namespaces by label. `haptor local` and
//! `haptor render` both tell the user about each object of a folder that nothing reads (a
//! typo in `kind` or `apiVersion` is the usual cause), with the closest kind the config does
//! read ([`crate::pure::suggest`]'s rule): one message, made here.

use std::collections::BTreeSet;

use crate::pure::config::HAProxyTemplateConfigSpec;

/// The kind of the config object itself: haptor reads it as the config, never as a watched
/// object, so it is never "not read".
const CONFIG_KIND: &str = "HAProxyTemplateConfig";

/// The `(apiVersion, kind)` pairs a config reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchedKinds {
    pairs: BTreeSet<(String, String)>,
}

impl WatchedKinds {
    /// What `spec` reads: the kind of each watched resource in its apiVersion, and
    /// `v1` Namespaces when a watched resource has a `namespaceSelector` (their labels decide).
    pub fn of(spec: &HAProxyTemplateConfigSpec) -> WatchedKinds {
        let mut pairs: BTreeSet<(String, String)> = spec
            .watched_resources
            .values()
            .map(|w| (w.api_version.clone(), w.kind_name()))
            .collect();
        if spec
            .watched_resources
            .values()
            .any(|w| w.namespace_selector.is_some())
        {
            pairs.insert(("v1".into(), "Namespace".into()));
        }
        WatchedKinds { pairs }
    }

    /// From explicit pairs (tests, callers that know them).
    pub fn from_pairs<A: Into<String>, K: Into<String>>(
        pairs: impl IntoIterator<Item = (A, K)>,
    ) -> WatchedKinds {
        WatchedKinds {
            pairs: pairs
                .into_iter()
                .map(|(api_version, kind)| (api_version.into(), kind.into()))
                .collect(),
        }
    }

    /// Whether objects of this apiVersion and kind are read.
    pub fn reads(&self, api_version: &str, kind: &str) -> bool {
        kind == CONFIG_KIND
            || self
                .pairs
                .iter()
                .any(|(a, k)| a.as_str() == api_version && k.as_str() == kind)
    }

    /// Why `object` (named for messages, `Servce default/web`) is not read, with the closest
    /// kind the config reads when there is one; `None` when it is read.
    pub fn not_read(&self, api_version: &str, kind: &str, object: &str) -> Option<String> {
        if self.reads(api_version, kind) {
            return None;
        }
        let mut message = format!(
            "{object} is not read by the config: no watched resource has apiVersion {api_version} and kind {kind}"
        );
        if let Some(hint) = self.suggestion(api_version, kind) {
            message.push_str("; did you mean ");
            message.push_str(&hint);
            message.push('?');
        }
        Some(message)
    }

    /// The kind (and apiVersion, when it differs) the user probably meant.
    fn suggestion(&self, api_version: &str, kind: &str) -> Option<String> {
        // The kind is right and the apiVersion is not (`networking.k8s.io/v1beta1`).
        let same_kind: Vec<&str> = self
            .pairs
            .iter()
            .filter(|(_, k)| k.as_str() == kind)
            .map(|(a, _)| a.as_str())
            .collect();
        if let [only] = same_kind.as_slice() {
            return Some(format!("apiVersion {only}"));
        }
        let closest =
            crate::pure::suggest::closest(kind, self.pairs.iter().map(|(_, kind)| kind.as_str()))?;
        let versions: Vec<&str> = self
            .pairs
            .iter()
            .filter(|(_, k)| k.as_str() == closest)
            .map(|(a, _)| a.as_str())
            .collect();
        Some(if versions.contains(&api_version) || versions.len() != 1 {
            format!("kind {closest}")
        } else {
            format!("kind {closest} (apiVersion {})", versions[0])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library() -> WatchedKinds {
        WatchedKinds::from_pairs([
            ("networking.k8s.io/v1", "Ingress"),
            ("networking.k8s.io/v1", "IngressClass"),
            ("v1", "Service"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
            ("v1", "Secret"),
        ])
    }

    #[test]
    fn a_misspelt_kind_is_not_read_and_the_closest_watched_kind_is_suggested() {
        assert_eq!(
            library()
                .not_read("v1", "Servce", "Servce default/web")
                .as_deref(),
            Some(
                "Servce default/web is not read by the config: no watched resource has apiVersion v1 and kind Servce; did you mean kind Service?"
            )
        );
        assert_eq!(
            library()
                .not_read("v1", "Endpointslice", "Endpointslice default/web-1")
                .as_deref(),
            Some(
                "Endpointslice default/web-1 is not read by the config: no watched resource has apiVersion v1 and kind Endpointslice; did you mean kind EndpointSlice (apiVersion discovery.k8s.io/v1)?"
            )
        );
    }

    #[test]
    fn a_watched_kind_in_another_api_version_suggests_the_watched_version() {
        let message = library()
            .not_read(
                "networking.k8s.io/v1beta1",
                "Ingress",
                "Ingress default/web",
            )
            .expect("not read");
        assert!(
            message.ends_with("; did you mean apiVersion networking.k8s.io/v1?"),
            "{message}"
        );
    }

    #[test]
    fn a_kind_far_from_every_watched_one_gets_no_suggestion() {
        let message = library()
            .not_read("v1", "ConfigMap", "ConfigMap default/settings")
            .expect("not read");
        assert!(!message.contains("did you mean"), "{message}");
    }

    #[test]
    fn watched_kinds_and_the_config_itself_are_read() {
        assert_eq!(
            library().not_read("v1", "Service", "Service default/web"),
            None
        );
        assert_eq!(
            library().not_read("haptor.dev/v1alpha1", "HAProxyTemplateConfig", "c"),
            None
        );
    }

    #[test]
    fn namespaces_are_read_when_a_watched_resource_selects_namespaces() {
        let spec = |selector: Option<&str>| {
            let mut spec = HAProxyTemplateConfigSpec::default();
            spec.watched_resources.insert(
                "services".into(),
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "v1",
                    "resources": "services",
                    "namespaceSelector": selector,
                }))
                .expect("a watched resource"),
            );
            spec
        };
        assert!(WatchedKinds::of(&spec(Some("team=web"))).reads("v1", "Namespace"));
        assert!(!WatchedKinds::of(&spec(None)).reads("v1", "Namespace"));
        assert!(WatchedKinds::of(&spec(None)).reads("v1", "Service"));
    }
}
