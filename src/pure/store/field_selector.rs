//! Which part of a watched resource's `fieldSelector` the Kubernetes API server can apply.
//!
//! haptor always applies the whole field selector itself, before an object reaches the
//! store (`CompiledConfig::selects`), so the server's filtering only saves traffic and
//! memory: it must never drop an object the client-side filter would keep. The API server
//! selects on a few fields only, and which ones depends on the kind: `metadata.name` and
//! `metadata.namespace` for every resource, and a handful more for some built-in kinds
//! ([`server_fields`]). A selector on any other field (`spec.ingressClassName` on
//! Ingresses, say) would make the server refuse the whole list and watch with 400 Bad
//! Request, so [`server_field_selector`] sends it only when the server supports the field
//! for that kind, and otherwise sends nothing and leaves the filtering to the client.
//!
//! The selector is read exactly as the client-side filter reads it (`path=value`,
//! `path==value` or `path!=value`, the first `!=`, else `==`, else `=` splitting it, path and
//! value trimmed), and the value is escaped for the server (`\`, `,` and `=`), so both
//! filters mean the same thing: the server's result is what the client keeps.

/// The fields the API server selects on for most resources: every custom resource and
/// every built-in kind without field labels of its own.
pub const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// The fields the API server selects on for objects of this apiVersion and kind: the field
/// label conversions Kubernetes registers for its built-in kinds, [`COMMON_FIELDS`] for the
/// others (custom resources included). Namespaces, Nodes and CertificateSigningRequests are
/// cluster-scoped kinds with their own list, which lacks `metadata.namespace`.
pub fn server_fields(api_version: &str, kind: &str) -> &'static [&'static str] {
    match (api_version, kind) {
        ("v1", "Secret") => &["metadata.name", "metadata.namespace", "type"],
        ("v1", "Pod") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("v1", "Namespace") => &["metadata.name", "status.phase"],
        ("v1", "Node") => &["metadata.name", "spec.unschedulable"],
        ("v1", "ReplicationController") => {
            &["metadata.name", "metadata.namespace", "status.replicas"]
        }
        ("v1", "Event") => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("batch/v1", "Job") => &["metadata.name", "metadata.namespace", "status.successful"],
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
            &["metadata.name", "spec.signerName"]
        }
        _ => COMMON_FIELDS,
    }
}

/// Whether the API server selects on `field` (plain dotted form) for this kind.
pub fn server_supports(api_version: &str, kind: &str, field: &str) -> bool {
    server_fields(api_version, kind).contains(&field)
}

/// The field selector to send to the API server for a watched resource whose config says
/// `selector`: the selector in the server's syntax when the server supports its field for
/// this kind, `None` when it does not (or the selector is blank or has no operator), in
/// which case only the client-side filter applies. Either way the client-side filter also
/// applies the whole selector.
pub fn server_field_selector(api_version: &str, kind: &str, selector: &str) -> Option<String> {
    let (path, operator, value) = split(selector.trim())?;
    let field = plain_path(path)?;
    server_supports(api_version, kind, field).then(|| format!("{field}{operator}{}", escape(value)))
}

/// `path`, operator, `value`, split where the client-side filter splits them.
fn split(text: &str) -> Option<(&str, &'static str, &str)> {
    let (path, operator, value) = if let Some((p, v)) = text.split_once("!=") {
        (p, "!=", v)
    } else if let Some((p, v)) = text.split_once("==") {
        (p, "=", v)
    } else {
        let (p, v) = text.split_once('=')?;
        (p, "=", v)
    };
    Some((path.trim(), operator, value.trim()))
}

/// A kubectl-style path (`metadata.name`, `.metadata.name`, `{.metadata.name}`,
/// `$.metadata.name`) in the plain dotted form the server's field labels use; `None` for
/// one with brackets or escapes, which names no field label.
fn plain_path(path: &str) -> Option<&str> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path)
        .trim();
    let path = path.strip_prefix('$').unwrap_or(path);
    let path = path.strip_prefix('.').unwrap_or(path);
    (!path.is_empty() && !path.contains(['[', ']', '\\', ' ', '{', '}'])).then_some(path)
}

/// A value as the server's field selector parser reads it back (`fields.EscapeValue`).
fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_name_and_namespace_are_sent_for_most_kinds() {
        assert_eq!(
            server_field_selector("networking.k8s.io/v1", "Ingress", "metadata.name=web"),
            Some("metadata.name=web".into())
        );
        assert_eq!(
            server_field_selector("example.com/v1", "Widget", " metadata.namespace != shop "),
            Some("metadata.namespace!=shop".into())
        );
    }

    #[test]
    fn a_field_the_server_supports_only_for_some_kinds_is_sent_only_for_those() {
        assert_eq!(
            server_field_selector("v1", "Secret", "type=kubernetes.io/tls"),
            Some("type=kubernetes.io/tls".into())
        );
        assert_eq!(
            server_field_selector("v1", "ConfigMap", "type=kubernetes.io/tls"),
            None
        );
        assert_eq!(
            server_field_selector("v1", "Pod", "status.phase==Running"),
            Some("status.phase=Running".into())
        );
    }

    #[test]
    fn a_field_the_server_does_not_support_is_left_to_the_client() {
        assert_eq!(
            server_field_selector(
                "networking.k8s.io/v1",
                "Ingress",
                "spec.ingressClassName=haptor"
            ),
            None
        );
        assert_eq!(
            server_field_selector("v1", "Service", "spec.type=ClusterIP"),
            None
        );
    }

    #[test]
    fn namespaces_and_nodes_are_not_selected_by_namespace_on_the_server() {
        assert_eq!(
            server_field_selector("v1", "Namespace", "metadata.namespace=x"),
            None
        );
        assert_eq!(
            server_field_selector("v1", "Namespace", "metadata.name=shop"),
            Some("metadata.name=shop".into())
        );
        assert!(!server_supports("v1", "Node", "metadata.namespace"));
    }

    #[test]
    fn kubectl_style_paths_name_the_same_field() {
        for path in ["{.metadata.name}", ".metadata.name", "$.metadata.name"] {
            assert_eq!(
                server_field_selector("v1", "Service", &format!("{path}=web")),
                Some("metadata.name=web".into()),
                "{path}"
            );
        }
        assert_eq!(
            server_field_selector("v1", "Service", "metadata['name']=web"),
            None
        );
    }

    #[test]
    fn values_are_escaped_so_the_server_reads_the_value_the_client_compares_with() {
        assert_eq!(
            server_field_selector("v1", "Secret", r"type=a,b=c\d"),
            Some(r"type=a\,b\=c\\d".into())
        );
    }

    #[test]
    fn a_blank_selector_or_one_without_an_operator_sends_nothing() {
        assert_eq!(server_field_selector("v1", "Secret", ""), None);
        assert_eq!(server_field_selector("v1", "Secret", "type"), None);
        assert_eq!(server_field_selector("v1", "Secret", "=x"), None);
    }
}
