//! What `haptor run` writes about Ingresses, decided from the outcomes the templates record
//! (`served`, `ignored`; [`crate::pure::rendered::Outcomes`]): the addresses a served
//! Ingress's `status.loadBalancer.ingress` carries, when that status is written or cleared,
//! and which Ingresses and Services get an Event about what the templates left out:
//! `IngressIgnored` for an Ingress not served at all, `IngressPartlyServed` for one served
//! with parts left out (a host, a path, a TLS entry or an annotation, each with its reason),
//! `ServicePartlyServed` for a Service whose backends are served without some of its
//! annotations.
//!
//! - The publish address comes from `--publish-address` (IPs and host names, repeatable or
//!   comma-separated; [`parse_publish_addresses`]) or from the `--publish-service` Service
//!   ([`service_addresses`]: its `status.loadBalancer.ingress`, else its `spec.clusterIP`).
//! - [`IngressStatusBook`] keeps what each Ingress is known to carry, so a status is written
//!   only when it differs; a new leadership term forgets that knowledge
//!   ([`IngressStatusBook::new_term`]), so every served Ingress is read and re-asserted.
//! - An Ingress served before and no longer served has its status cleared, but only while
//!   it still carries what haptor wrote (another controller may have taken it over).
//! - An Ingress is reported once per outcome and reasons: again only when they change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IngressLoadBalancerIngress;

use crate::pure::rendered::{ObjectKey, Outcome, Outcomes};

/// The reason of the Warning Event about an ignored Ingress.
pub const IGNORED_REASON: &str = "IngressIgnored";
/// The reason of the Warning Event about an Ingress served with parts left out.
pub const PARTLY_SERVED_REASON: &str = "IngressPartlyServed";
/// The reason of the Warning Event about a Service served with parts left out.
pub const SERVICE_PARTLY_SERVED_REASON: &str = "ServicePartlyServed";
/// The reason of the Warning Event about a Service not served at all.
pub const SERVICE_IGNORED_REASON: &str = "ServiceIgnored";
/// The action of both Events.
pub const LEFT_OUT_ACTION: &str = "Render";

/// How much of an Ingress the templates left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// The Ingress is not served (`Outcome::Ignored`).
    Wholly,
    /// It is served, but some of its parts are not (`Outcome::PartlyServed`).
    InPart,
}

/// The kinds of object whose left-out parts are reported in Events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReportedKind {
    /// A `networking.k8s.io/v1` Ingress.
    Ingress,
    /// A core `v1` Service (its backend annotations).
    Service,
}

impl ReportedKind {
    /// The kind's name, as an object reference gives it.
    pub fn kind(self) -> &'static str {
        match self {
            ReportedKind::Ingress => "Ingress",
            ReportedKind::Service => "Service",
        }
    }

    /// The apiVersion of an object reference to it.
    pub fn api_version(self) -> &'static str {
        match self {
            ReportedKind::Ingress => "networking.k8s.io/v1",
            ReportedKind::Service => "v1",
        }
    }

    /// The kind among `key`'s, when it is a namespaced object of one the reports cover.
    fn of(key: &ObjectKey) -> Option<ReportedKind> {
        if key.namespace.is_empty() {
            return None;
        }
        match (key.kind.as_str(), key.api_version.as_str()) {
            ("Ingress", version) if version.starts_with("networking.k8s.io/") => {
                Some(ReportedKind::Ingress)
            }
            ("Service", "v1") => Some(ReportedKind::Service),
            _ => None,
        }
    }
}

/// One object to report, by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReportedObject {
    pub kind: ReportedKind,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ReportedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.kind(), self.namespace, self.name)
    }
}

/// One Ingress or Service to report: what was left out of it and why (the reasons joined
/// by `; `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOutReport {
    pub object: ReportedObject,
    pub left_out: LeftOut,
    pub reason: String,
}

impl LeftOutReport {
    /// The reason of the Event reporting it.
    pub fn event_reason(&self) -> &'static str {
        match (self.object.kind, self.left_out) {
            (ReportedKind::Ingress, LeftOut::Wholly) => IGNORED_REASON,
            (ReportedKind::Ingress, LeftOut::InPart) => PARTLY_SERVED_REASON,
            (ReportedKind::Service, LeftOut::Wholly) => SERVICE_IGNORED_REASON,
            (ReportedKind::Service, LeftOut::InPart) => SERVICE_PARTLY_SERVED_REASON,
        }
    }

    /// The note of the Event about it.
    pub fn note(&self) -> String {
        let text = match self.left_out {
            LeftOut::Wholly => format!("{} is not served by haptor: {}", self.object, self.reason),
            LeftOut::InPart => format!(
                "{} is served by haptor with parts left out: {}",
                self.object, self.reason
            ),
        };
        crate::pure::kube_events::truncate_note(&text)
    }
}

/// One Ingress, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IngressRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for IngressRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The addresses of one `status.loadBalancer.ingress` list.
pub type Addresses = Vec<IngressLoadBalancerIngress>;

/// One address: an IP when it parses as one, else a host name.
pub fn address(text: &str) -> IngressLoadBalancerIngress {
    if text.parse::<IpAddr>().is_ok() {
        IngressLoadBalancerIngress {
            ip: Some(text.to_string()),
            ..Default::default()
        }
    } else {
        IngressLoadBalancerIngress {
            hostname: Some(text.to_string()),
            ..Default::default()
        }
    }
}

/// The addresses of `--publish-address` values: each value may list several, separated
/// by commas. An entry that is neither an IP nor a DNS name is an error naming it.
pub fn parse_publish_addresses(values: &[String]) -> Result<Addresses, String> {
    let mut out = Addresses::new();
    for entry in values.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        if entry.parse::<IpAddr>().is_err() && !is_dns_name(entry) {
            return Err(format!(
                "--publish-address '{entry}' is neither an IP address nor a DNS name"
            ));
        }
        let address = address(entry);
        if !out.contains(&address) {
            out.push(address);
        }
    }
    if out.is_empty() {
        return Err("--publish-address names no address".to_string());
    }
    Ok(out)
}

fn is_dns_name(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The addresses a `--publish-service` Service gives: its `status.loadBalancer.ingress`
/// (IPs and host names), else its `spec.clusterIP` (unless headless); empty when it has
/// neither.
pub fn service_addresses(service: &Service) -> Addresses {
    let balanced: Addresses = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let ip = entry.ip.clone().filter(|ip| !ip.is_empty());
            let hostname = entry.hostname.clone().filter(|h| !h.is_empty());
            (ip.is_some() || hostname.is_some()).then(|| IngressLoadBalancerIngress {
                ip,
                hostname,
                ..Default::default()
            })
        })
        .collect();
    if !balanced.is_empty() {
        return balanced;
    }
    service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .filter(|ip| !ip.is_empty() && *ip != "None")
        .map(|ip| vec![address(ip)])
        .unwrap_or_default()
}

/// The Ingresses and Services among `outcomes`, by outcome.
fn reported_outcomes(outcomes: &Outcomes) -> impl Iterator<Item = (ReportedObject, &Outcome)> {
    outcomes.iter().filter_map(|(key, outcome)| {
        ReportedKind::of(key).map(|kind| {
            (
                ReportedObject {
                    kind,
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                },
                outcome,
            )
        })
    })
}

/// One status write the driver is to consider: `ingress` should carry `wanted`. When
/// `clear` is set, `wanted` is empty and the write happens only while the Ingress still
/// carries what haptor wrote ([`IngressStatusBook::may_clear`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    pub ingress: IngressRef,
    pub wanted: Addresses,
    pub clear: bool,
    /// What the Ingress is known to carry (`None`: unknown, read it first).
    pub known: Option<Addresses>,
}

/// What the driver knows about the Ingresses it writes (see the module documentation).
#[derive(Debug, Default)]
pub struct IngressStatusBook {
    /// The Ingresses the latest outcomes serve.
    served: BTreeSet<IngressRef>,
    /// Ingresses served before and no longer: their status is still to be cleared.
    clearing: BTreeSet<IngressRef>,
    /// What each Ingress is known to carry (read from it or written to it this term).
    known: BTreeMap<IngressRef, Addresses>,
    /// The addresses haptor last wrote to each Ingress (kept across terms, for clearing).
    written: BTreeMap<IngressRef, Addresses>,
    /// What was left out of each Ingress or Service when it was last reported, and why.
    reported: BTreeMap<ReportedObject, (LeftOut, String)>,
}

impl IngressStatusBook {
    /// Takes the latest outcomes; returns the Ingresses and Services with something newly
    /// left out (not reported before with the same outcome and reasons), to be reported.
    pub fn apply_outcomes(&mut self, outcomes: &Outcomes) -> Vec<LeftOutReport> {
        let mut served = BTreeSet::new();
        let mut left_out = BTreeMap::new();
        for (object, outcome) in reported_outcomes(outcomes) {
            if object.kind == ReportedKind::Ingress && outcome.is_served() {
                served.insert(IngressRef {
                    namespace: object.namespace.clone(),
                    name: object.name.clone(),
                });
            }
            match outcome {
                Outcome::Ignored(reasons) => {
                    left_out.insert(object, (LeftOut::Wholly, reasons.join("; ")));
                }
                Outcome::PartlyServed(reasons) => {
                    left_out.insert(object, (LeftOut::InPart, reasons.join("; ")));
                }
                Outcome::Served => {}
            }
        }
        for gone in self.served.difference(&served) {
            self.clearing.insert(gone.clone());
        }
        for ingress in &served {
            self.clearing.remove(ingress);
        }
        self.served = served;
        let newly: Vec<LeftOutReport> = left_out
            .iter()
            .filter(|(object, what)| self.reported.get(*object) != Some(*what))
            .map(|(object, (left_out, reason))| LeftOutReport {
                object: object.clone(),
                left_out: *left_out,
                reason: reason.clone(),
            })
            .collect();
        // An object with nothing left out any more may be reported again when it has.
        self.reported
            .retain(|object, _| left_out.contains_key(object));
        newly
    }

    /// Notes that `report` was published.
    pub fn reported(&mut self, report: &LeftOutReport) {
        self.reported.insert(
            report.object.clone(),
            (report.left_out, report.reason.clone()),
        );
    }

    /// The status writes to consider with `addresses` as the publish address: every served
    /// Ingress that is not known to carry them, and every Ingress still to clear.
    pub fn writes(&self, addresses: &Addresses) -> Vec<StatusWrite> {
        let set = self.served.iter().filter_map(|ingress| {
            let known = self.known.get(ingress);
            (known != Some(addresses)).then(|| StatusWrite {
                ingress: ingress.clone(),
                wanted: addresses.clone(),
                clear: false,
                known: known.cloned(),
            })
        });
        let clear = self.clearing.iter().map(|ingress| StatusWrite {
            ingress: ingress.clone(),
            wanted: Addresses::new(),
            clear: true,
            known: self.known.get(ingress).cloned(),
        });
        set.chain(clear).collect()
    }

    /// Whether an Ingress to clear that carries `carried` is still haptor's to clear: it
    /// carries what haptor last wrote to it, or the current publish address.
    pub fn may_clear(
        &self,
        ingress: &IngressRef,
        carried: &Addresses,
        current: &Addresses,
    ) -> bool {
        !carried.is_empty() && (self.written.get(ingress) == Some(carried) || carried == current)
    }

    /// Notes what `ingress` was read to carry.
    pub fn read(&mut self, ingress: &IngressRef, carried: Addresses) {
        if carried.is_empty() {
            self.clearing.remove(ingress);
        }
        self.known.insert(ingress.clone(), carried);
    }

    /// Notes that `ingress` now carries `carried`, written by haptor.
    pub fn wrote(&mut self, ingress: &IngressRef, carried: Addresses) {
        if carried.is_empty() {
            self.clearing.remove(ingress);
            self.written.remove(ingress);
        } else {
            self.written.insert(ingress.clone(), carried.clone());
        }
        self.known.insert(ingress.clone(), carried);
    }

    /// Notes that an Ingress to clear is left alone (another controller's status is on it).
    pub fn leave(&mut self, ingress: &IngressRef) {
        self.clearing.remove(ingress);
        self.written.remove(ingress);
    }

    /// Notes that `ingress` no longer exists.
    pub fn gone(&mut self, ingress: &IngressRef) {
        self.clearing.remove(ingress);
        self.known.remove(ingress);
        self.written.remove(ingress);
    }

    /// A new leadership term: what the Ingresses carry is read again, so every served
    /// Ingress's status is re-asserted.
    pub fn new_term(&mut self) {
        self.known.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::rendered::ObjectKey;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "networking.k8s.io/v1".into(),
            kind: "Ingress".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn ingress(name: &str) -> IngressRef {
        IngressRef {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn outcomes(entries: &[(&str, Option<&str>)]) -> Outcomes {
        entries
            .iter()
            .map(|(name, reason)| {
                (
                    key(name),
                    match reason {
                        None => Outcome::Served,
                        Some(reason) => Outcome::ignored(*reason),
                    },
                )
            })
            .collect()
    }

    fn ip(text: &str) -> Addresses {
        vec![address(text)]
    }

    #[test]
    fn publish_addresses_are_split_on_commas_and_told_apart_as_ips_and_host_names() {
        let parsed = parse_publish_addresses(&[
            "10.0.0.1, lb.example.com".to_string(),
            "2001:db8::1".to_string(),
            "10.0.0.1".to_string(),
        ])
        .unwrap();
        assert_eq!(parsed.len(), 3, "{parsed:?}");
        assert_eq!(parsed[0].ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(parsed[1].hostname.as_deref(), Some("lb.example.com"));
        assert_eq!(parsed[2].ip.as_deref(), Some("2001:db8::1"));
        let error = parse_publish_addresses(&["a b".to_string()]).unwrap_err();
        assert!(error.contains("'a b'"), "{error}");
        assert!(parse_publish_addresses(&[" , ".to_string()]).is_err());
    }

    #[test]
    fn a_service_publishes_its_load_balancer_addresses_else_its_cluster_ip() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "spec": {"clusterIP": "10.96.0.10"},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"hostname": "lb.example"}]}},
        }))
        .unwrap();
        let addresses = service_addresses(&service);
        assert_eq!(addresses[0].ip.as_deref(), Some("203.0.113.7"));
        assert_eq!(addresses[1].hostname.as_deref(), Some("lb.example"));
        let cluster_only: Service =
            serde_json::from_value(serde_json::json!({"spec": {"clusterIP": "10.96.0.10"}}))
                .unwrap();
        assert_eq!(service_addresses(&cluster_only), ip("10.96.0.10"));
        let headless: Service =
            serde_json::from_value(serde_json::json!({"spec": {"clusterIP": "None"}})).unwrap();
        assert!(service_addresses(&headless).is_empty());
    }

    #[test]
    fn a_served_ingress_is_written_until_it_is_known_to_carry_the_address() {
        let mut book = IngressStatusBook::default();
        book.apply_outcomes(&outcomes(&[("a", None)]));
        let writes = book.writes(&ip("10.0.0.1"));
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].known, None, "read first");
        book.wrote(&ingress("a"), ip("10.0.0.1"));
        assert!(
            book.writes(&ip("10.0.0.1")).is_empty(),
            "unchanged: no write"
        );
        assert_eq!(
            book.writes(&ip("10.0.0.2")).len(),
            1,
            "a new address is written"
        );
    }

    #[test]
    fn a_new_term_re_asserts_every_served_ingress() {
        let mut book = IngressStatusBook::default();
        book.apply_outcomes(&outcomes(&[("a", None), ("b", None)]));
        book.wrote(&ingress("a"), ip("10.0.0.1"));
        book.wrote(&ingress("b"), ip("10.0.0.1"));
        assert!(book.writes(&ip("10.0.0.1")).is_empty());
        book.new_term();
        let writes = book.writes(&ip("10.0.0.1"));
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|w| w.known.is_none()));
    }

    #[test]
    fn an_ingress_no_longer_served_is_cleared_only_while_it_carries_what_haptor_wrote() {
        let mut book = IngressStatusBook::default();
        book.apply_outcomes(&outcomes(&[("a", None), ("b", None)]));
        book.wrote(&ingress("a"), ip("10.0.0.1"));
        book.wrote(&ingress("b"), ip("10.0.0.1"));
        book.apply_outcomes(&outcomes(&[
            ("a", Some("other class")),
            ("b", Some("other class")),
        ]));
        let writes = book.writes(&ip("10.0.0.1"));
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|w| w.clear && w.wanted.is_empty()));
        let current = ip("10.0.0.1");
        assert!(book.may_clear(&ingress("a"), &ip("10.0.0.1"), &current));
        assert!(
            !book.may_clear(&ingress("b"), &ip("192.0.2.9"), &current),
            "another controller's address stays"
        );
        book.wrote(&ingress("a"), Vec::new());
        book.leave(&ingress("b"));
        assert!(book.writes(&current).is_empty());
    }

    #[test]
    fn an_ingress_served_again_is_not_cleared() {
        let mut book = IngressStatusBook::default();
        book.apply_outcomes(&outcomes(&[("a", None)]));
        book.wrote(&ingress("a"), ip("10.0.0.1"));
        book.apply_outcomes(&outcomes(&[]));
        book.apply_outcomes(&outcomes(&[("a", None)]));
        assert!(book.writes(&ip("10.0.0.1")).is_empty());
    }

    fn report(name: &str, left_out: LeftOut, reason: &str) -> LeftOutReport {
        LeftOutReport {
            object: ReportedObject {
                kind: ReportedKind::Ingress,
                namespace: "default".into(),
                name: name.into(),
            },
            left_out,
            reason: reason.into(),
        }
    }

    fn service_key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn an_ignored_ingress_is_reported_once_per_reason() {
        let mut book = IngressStatusBook::default();
        let newly = book.apply_outcomes(&outcomes(&[("a", Some("class nginx")), ("b", None)]));
        assert_eq!(newly, [report("a", LeftOut::Wholly, "class nginx")]);
        book.reported(&newly[0]);
        assert!(
            book.apply_outcomes(&outcomes(&[("a", Some("class nginx"))]))
                .is_empty()
        );
        let changed = book.apply_outcomes(&outcomes(&[("a", Some("bad host"))]));
        assert_eq!(changed, [report("a", LeftOut::Wholly, "bad host")]);
    }

    #[test]
    fn a_partly_served_ingress_is_served_and_reported_once_per_reasons() {
        let mut book = IngressStatusBook::default();
        let mut partly = outcomes(&[]);
        partly.insert(
            key("a"),
            Outcome::PartlyServed(vec!["bad timeout".into(), "bad realm".into()]),
        );
        let newly = book.apply_outcomes(&partly);
        assert_eq!(
            newly,
            [report("a", LeftOut::InPart, "bad timeout; bad realm")]
        );
        assert_eq!(book.writes(&ip("10.0.0.1")).len(), 1, "it is served");
        book.reported(&newly[0]);
        assert!(book.apply_outcomes(&partly).is_empty());
        // Wholly served, then partly again: reported again.
        assert!(book.apply_outcomes(&outcomes(&[("a", None)])).is_empty());
        assert_eq!(book.apply_outcomes(&partly).len(), 1);
        // The same reason, now for an Ingress not served at all, is a new report.
        let mut ignored = outcomes(&[]);
        ignored.insert(key("a"), Outcome::ignored("bad timeout; bad realm"));
        book.reported(&report("a", LeftOut::InPart, "bad timeout; bad realm"));
        assert_eq!(
            book.apply_outcomes(&ignored),
            [report("a", LeftOut::Wholly, "bad timeout; bad realm")]
        );
    }

    #[test]
    fn only_namespaced_ingresses_get_a_status_and_only_they_and_core_services_are_reported() {
        let mut book = IngressStatusBook::default();
        let mut all = outcomes(&[]);
        let mut foreign = key("other");
        foreign.api_version = "extensions.example/v1".into();
        all.insert(foreign, Outcome::ignored("x"));
        let mut cluster_wide = service_key("cluster");
        cluster_wide.namespace = String::new();
        all.insert(cluster_wide, Outcome::ignored("x"));
        all.insert(
            service_key("svc"),
            Outcome::PartlyServed(vec![
                "annotation nginx.ingress.kubernetes.io/auth-type is Ingress-only".into(),
            ]),
        );
        let newly = book.apply_outcomes(&all);
        assert_eq!(newly.len(), 1, "{newly:?}");
        assert_eq!(newly[0].object.kind, ReportedKind::Service);
        assert_eq!(newly[0].event_reason(), "ServicePartlyServed");
        assert_eq!(
            newly[0].note(),
            "Service default/svc is served by haptor with parts left out: \
             annotation nginx.ingress.kubernetes.io/auth-type is Ingress-only"
        );
        assert!(
            book.writes(&ip("10.0.0.1")).is_empty(),
            "a Service gets no Ingress status"
        );
        book.reported(&newly[0]);
        assert!(book.apply_outcomes(&all).is_empty(), "reported once");
    }

    #[test]
    fn the_notes_name_the_ingress_what_was_left_out_and_why() {
        assert_eq!(
            report(
                "a",
                LeftOut::Wholly,
                "ingressClassName 'nginx' is not haptor's"
            )
            .note(),
            "Ingress default/a is not served by haptor: ingressClassName 'nginx' is not haptor's"
        );
        assert_eq!(
            report(
                "a",
                LeftOut::InPart,
                "haproxy.org/timeout-server is not a duration"
            )
            .note(),
            "Ingress default/a is served by haptor with parts left out: \
             haproxy.org/timeout-server is not a duration"
        );
        assert_eq!(
            report("a", LeftOut::InPart, "x").event_reason(),
            "IngressPartlyServed"
        );
        assert_eq!(
            report("a", LeftOut::Wholly, "x").event_reason(),
            "IngressIgnored"
        );
    }
}
