//! The admission webhook's certificates when haptor issues them itself (`haptor run
//! --webhook-self-issued-secret`), as decisions: what the Secret holds, when a certificate
//! is issued again, which CA certificates the API server must trust, and the patch that
//! tells it so. The Secret holds a CA (`ca.crt`, `ca.key`) and a serving certificate for the
//! webhook Service's DNS names (`tls.crt`, `tls.key`), with those names in an annotation;
//! every replica serves the pair it finds there, so replicas share one certificate.
//!
//! A certificate is issued again once less than a third of its validity remains: the
//! serving certificate (a year) under the same CA, the CA (ten years) with a new serving
//! certificate under it. A new CA goes first in `ca.crt`, followed by the CA certificates
//! before it that are still valid, and `ca.crt` is the webhook configuration's `caBundle`:
//! a replica that still serves the previous serving certificate stays trusted until it
//! reads the new one. The webhook configuration is patched (a strategic merge patch keyed
//! by each webhook's name) only where its `caBundle` or `failurePolicy` differ from what
//! they must be. Key generation and signing are I/O (the system's randomness) and live in
//! `drivers::kube::webhook_issuer`.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use crate::pure::certificates::{pem_certificates, validity};

/// The Secret's keys.
pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
/// The annotation naming the DNS names the serving certificate was issued for
/// (comma-separated).
pub const DNS_NAMES_ANNOTATION: &str = "haptor.dev/webhook-dns-names";
/// The CA's subject common name.
pub const CA_COMMON_NAME: &str = "haptor webhook CA";
/// The CA's validity, in days.
pub const CA_VALIDITY_DAYS: i64 = 3650;
/// The serving certificate's validity, in days.
pub const SERVING_VALIDITY_DAYS: i64 = 365;

const DAY: i64 = 86_400;

/// The DNS names the API server uses for a webhook Service: `<service>.<namespace>.svc`
/// (the TLS server name it sends) and the cluster domain's full form.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// What the Secret holds, as PEM text.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredCertificates {
    /// `ca.crt`: the current CA first, then earlier CA certificates still trusted.
    pub ca_bundle: String,
    /// `ca.key`: the current CA's private key.
    pub ca_key: String,
    /// `tls.crt`: the serving certificate.
    pub cert: String,
    /// `tls.key`: its private key.
    pub key: String,
    /// The names `tls.crt` was issued for (the annotation).
    pub dns_names: Vec<String>,
}

impl std::fmt::Debug for StoredCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredCertificates")
            .field("dns_names", &self.dns_names)
            .finish_non_exhaustive()
    }
}

impl StoredCertificates {
    /// Reads a Secret's data and annotation; `None` when a key is missing or not text (the
    /// Secret is then issued anew).
    pub fn from_secret(
        data: &BTreeMap<String, Vec<u8>>,
        dns_names: Option<&str>,
    ) -> Option<StoredCertificates> {
        let text = |key: &str| -> Option<String> {
            let bytes = data.get(key)?;
            String::from_utf8(bytes.clone())
                .ok()
                .filter(|t| !t.trim().is_empty())
        };
        Some(StoredCertificates {
            ca_bundle: text(CA_CERT_KEY)?,
            ca_key: text(CA_KEY_KEY)?,
            cert: text(CERT_KEY)?,
            key: text(KEY_KEY)?,
            dns_names: dns_names
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }

    /// The Secret's data.
    pub fn secret_data(&self) -> BTreeMap<String, Vec<u8>> {
        [
            (CA_CERT_KEY, &self.ca_bundle),
            (CA_KEY_KEY, &self.ca_key),
            (CERT_KEY, &self.cert),
            (KEY_KEY, &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
    }

    /// The annotation's value.
    pub fn dns_names_annotation(&self) -> String {
        self.dns_names.join(",")
    }

    /// The validity period of the current CA (the first certificate of `ca.crt`).
    pub fn ca_validity(&self) -> Option<(i64, i64)> {
        first_validity(&self.ca_bundle)
    }

    /// The validity period of the serving certificate.
    pub fn serving_validity(&self) -> Option<(i64, i64)> {
        first_validity(&self.cert)
    }
}

fn first_validity(pem: &str) -> Option<(i64, i64)> {
    validity(&pem_certificates(pem).next()?)
}

/// Why a certificate is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The Secret does not exist yet.
    Missing,
    /// The Secret lacks a key, or a certificate in it does not parse.
    Unreadable,
    /// Less than a third of the certificate's validity remains.
    Expiring { not_after: i64 },
    /// The serving certificate names other DNS names than the webhook Service's.
    NamesChanged,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Missing => f.write_str("the Secret does not exist"),
            Reason::Unreadable => f.write_str("the Secret does not hold a readable certificate"),
            Reason::Expiring { not_after } => write!(
                f,
                "less than a third of its validity remains (notAfter {})",
                jiff::Timestamp::from_second(*not_after)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| not_after.to_string())
            ),
            Reason::NamesChanged => f.write_str("the webhook Service's DNS names changed"),
        }
    }
}

/// What to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The Secret's certificates serve as they are.
    Keep,
    /// A new serving certificate under the stored CA.
    Serving(Reason),
    /// A new CA and a new serving certificate under it.
    CaAndServing(Reason),
}

/// Whether a certificate valid from `not_before` to `not_after` is due for renewal at `now`
/// (seconds since the Unix epoch): less than a third of its validity remains.
pub fn renewal_due(not_before: i64, not_after: i64, now: i64) -> bool {
    let lifetime = (not_after - not_before).max(0);
    now >= not_after - lifetime / 3
}

/// What must be issued at `now` for a Secret holding `stored` (`None`: no Secret) so that
/// it serves `dns_names`.
pub fn plan(stored: Option<&StoredCertificates>, dns_names: &[String], now: i64) -> Renewal {
    let Some(stored) = stored else {
        return Renewal::CaAndServing(Reason::Missing);
    };
    let Some((ca_from, ca_until)) = stored.ca_validity() else {
        return Renewal::CaAndServing(Reason::Unreadable);
    };
    if renewal_due(ca_from, ca_until, now) {
        return Renewal::CaAndServing(Reason::Expiring {
            not_after: ca_until,
        });
    }
    let Some((from, until)) = stored.serving_validity() else {
        return Renewal::Serving(Reason::Unreadable);
    };
    if renewal_due(from, until, now) {
        return Renewal::Serving(Reason::Expiring { not_after: until });
    }
    if stored.dns_names != dns_names {
        return Renewal::Serving(Reason::NamesChanged);
    }
    Renewal::Keep
}

/// The validity period of a certificate issued at `now` for `days` days, in whole days from
/// the midnight (UTC) before yesterday's, so a peer whose clock is a day behind accepts it,
/// and ending no later than `until` (the issuing CA's `notAfter`), rounded down to a day.
pub fn issue_period(now: i64, days: i64, until: Option<i64>) -> (i64, i64) {
    let not_before = now.div_euclid(DAY) * DAY - DAY;
    let end = not_before + (days + 1) * DAY;
    let not_after = match until {
        Some(limit) => end.min(limit.div_euclid(DAY) * DAY),
        None => end,
    };
    (not_before, not_after)
}

/// `ca.crt` after a new CA was issued: `new_ca` first, then the certificates of `previous`
/// (the old `ca.crt`) that are still valid at `now` and differ from it, as PEM.
pub fn next_ca_bundle(new_ca: &str, previous: Option<&str>, now: i64) -> String {
    let mut bundle = new_ca.trim_end().to_string();
    bundle.push('\n');
    let new_der: Vec<Vec<u8>> = pem_certificates(new_ca).collect();
    for der in pem_certificates(previous.unwrap_or_default()) {
        let valid = validity(&der).is_some_and(|(_, until)| until > now);
        if valid && !new_der.contains(&der) {
            bundle.push_str(&pem_encode(&der));
        }
    }
    bundle
}

/// One certificate as PEM, 64 characters a line.
fn pem_encode(der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The strategic merge patch that makes every webhook of `configuration` (a
/// ValidatingWebhookConfiguration as JSON, as the API server returns it) trust `ca_bundle`
/// and, when given, answer with `failure_policy` (`Fail` or `Ignore`); `None` when each
/// already does. Webhooks are matched by name, so the patch leaves the rest of each one
/// (its Service, rules, selectors) as it is.
pub fn webhook_configuration_patch(
    configuration: &Value,
    ca_bundle: &str,
    failure_policy: Option<&str>,
) -> Option<Value> {
    let engine = base64::engine::general_purpose::STANDARD;
    let wanted = engine.encode(ca_bundle.as_bytes());
    let webhooks = configuration.get("webhooks")?.as_array()?;
    let changes: Vec<Value> = webhooks
        .iter()
        .filter_map(|webhook| {
            let name = webhook.get("name")?.as_str()?;
            let current = webhook
                .pointer("/clientConfig/caBundle")
                .and_then(Value::as_str)
                .and_then(|b| engine.decode(b).ok());
            let bundle_differs = current.as_deref() != Some(ca_bundle.as_bytes());
            let policy_differs = failure_policy.is_some_and(|wanted| {
                webhook.get("failurePolicy").and_then(Value::as_str) != Some(wanted)
            });
            if !bundle_differs && !policy_differs {
                return None;
            }
            let mut change = json!({"name": name, "clientConfig": {"caBundle": wanted}});
            if let Some(policy) = failure_policy {
                change["failurePolicy"] = json!(policy);
            }
            Some(change)
        })
        .collect();
    (!changes.is_empty()).then(|| json!({ "webhooks": changes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two certificates of tests/data: one valid for years, one valid for a day in 2020.
    const VALID: &str = include_str!("../../tests/data/valid.pem");
    const EXPIRED: &str = include_str!("../../tests/data/expired.pem");

    fn names() -> Vec<String> {
        service_dns_names("haptor-webhook", "haptor")
    }

    fn stored(ca: &str, cert: &str) -> StoredCertificates {
        StoredCertificates {
            ca_bundle: ca.to_string(),
            ca_key: "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n".into(),
            cert: cert.to_string(),
            key: "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n".into(),
            dns_names: names(),
        }
    }

    fn valid_period() -> (i64, i64) {
        first_validity(VALID).expect("valid.pem reads")
    }

    #[test]
    fn the_webhook_services_two_dns_names_are_the_short_and_the_cluster_domain_form() {
        assert_eq!(
            names(),
            [
                "haptor-webhook.haptor.svc",
                "haptor-webhook.haptor.svc.cluster.local"
            ]
        );
    }

    #[test]
    fn a_certificate_is_renewed_once_less_than_a_third_of_its_validity_remains() {
        assert!(!renewal_due(0, 300, 0));
        assert!(!renewal_due(0, 300, 199));
        assert!(renewal_due(0, 300, 200));
        assert!(renewal_due(0, 300, 400));
    }

    #[test]
    fn no_secret_means_a_new_ca_and_serving_certificate() {
        assert_eq!(
            plan(None, &names(), 0),
            Renewal::CaAndServing(Reason::Missing)
        );
    }

    #[test]
    fn certificates_within_the_first_two_thirds_of_their_validity_are_kept() {
        let (from, _) = valid_period();
        assert_eq!(
            plan(Some(&stored(VALID, VALID)), &names(), from + DAY),
            Renewal::Keep
        );
    }

    #[test]
    fn an_expiring_serving_certificate_is_issued_again_under_the_same_ca() {
        let (from, _) = valid_period();
        assert_eq!(
            plan(Some(&stored(VALID, EXPIRED)), &names(), from + DAY),
            Renewal::Serving(Reason::Expiring {
                not_after: first_validity(EXPIRED).expect("reads").1
            })
        );
    }

    #[test]
    fn an_expiring_ca_is_issued_again_with_its_serving_certificate() {
        let (from, until) = valid_period();
        let late = until - (until - from) / 4;
        assert_eq!(
            plan(Some(&stored(VALID, VALID)), &names(), late),
            Renewal::CaAndServing(Reason::Expiring { not_after: until })
        );
    }

    #[test]
    fn a_secret_with_unreadable_certificates_or_other_names_is_issued_again() {
        let (from, _) = valid_period();
        let now = from + DAY;
        assert_eq!(
            plan(Some(&stored("garbage", VALID)), &names(), now),
            Renewal::CaAndServing(Reason::Unreadable)
        );
        assert_eq!(
            plan(Some(&stored(VALID, "garbage")), &names(), now),
            Renewal::Serving(Reason::Unreadable)
        );
        let other = service_dns_names("other", "haptor");
        assert_eq!(
            plan(Some(&stored(VALID, VALID)), &other, now),
            Renewal::Serving(Reason::NamesChanged)
        );
    }

    #[test]
    fn a_secret_missing_a_key_is_not_read() {
        let full = stored(VALID, VALID);
        let data = full.secret_data();
        let annotation = full.dns_names_annotation();
        assert_eq!(
            StoredCertificates::from_secret(&data, Some(&annotation)),
            Some(full)
        );
        let mut partial = data.clone();
        partial.remove(KEY_KEY);
        assert_eq!(
            StoredCertificates::from_secret(&partial, Some(&annotation)),
            None
        );
    }

    #[test]
    fn a_period_starts_the_day_before_and_ends_no_later_than_its_ca() {
        let now = 20_000 * DAY + 3600;
        assert_eq!(
            issue_period(now, 365, None),
            (19_999 * DAY, 19_999 * DAY + 366 * DAY)
        );
        assert_eq!(
            issue_period(now, 365, Some(20_100 * DAY + 5)),
            (19_999 * DAY, 20_100 * DAY)
        );
    }

    #[test]
    fn a_new_ca_bundle_keeps_the_previous_cas_still_valid_and_drops_expired_ones() {
        let (from, _) = valid_period();
        let now = from + DAY;
        let previous = format!("{VALID}{EXPIRED}");
        let bundle = next_ca_bundle(VALID, Some(&previous), now);
        // The new CA is the valid one: it is not repeated, and the expired one goes.
        assert_eq!(pem_certificates(&bundle).count(), 1);
        let bundle = next_ca_bundle(EXPIRED, Some(VALID), now);
        let ders: Vec<Vec<u8>> = pem_certificates(&bundle).collect();
        assert_eq!(ders.len(), 2);
        assert_eq!(ders[0], pem_certificates(EXPIRED).next().expect("one"));
        assert_eq!(ders[1], pem_certificates(VALID).next().expect("one"));
    }

    #[test]
    fn the_webhook_configuration_is_patched_only_where_bundle_or_policy_differ() {
        let engine = base64::engine::general_purpose::STANDARD;
        let bundle = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        let configuration = json!({
            "metadata": {"name": "haptor"},
            "webhooks": [
                {"name": "a.haptor.dev", "failurePolicy": "Ignore",
                 "clientConfig": {"service": {"name": "haptor-webhook", "namespace": "haptor"}}},
                {"name": "b.haptor.dev", "failurePolicy": "Ignore",
                 "clientConfig": {"caBundle": engine.encode(bundle)}},
            ]
        });
        assert_eq!(
            webhook_configuration_patch(&configuration, bundle, None),
            Some(json!({"webhooks": [
                {"name": "a.haptor.dev", "clientConfig": {"caBundle": engine.encode(bundle)}}
            ]}))
        );
        assert_eq!(
            webhook_configuration_patch(&configuration, bundle, Some("Fail")),
            Some(json!({"webhooks": [
                {"name": "a.haptor.dev", "clientConfig": {"caBundle": engine.encode(bundle)}, "failurePolicy": "Fail"},
                {"name": "b.haptor.dev", "clientConfig": {"caBundle": engine.encode(bundle)}, "failurePolicy": "Fail"},
            ]}))
        );
        assert_eq!(
            webhook_configuration_patch(&configuration, bundle, Some("Ignore"))
                .map(|p| p["webhooks"].as_array().map(Vec::len)),
            Some(Some(1))
        );
        let done = json!({"webhooks": [
            {"name": "b.haptor.dev", "failurePolicy": "Fail", "clientConfig": {"caBundle": engine.encode(bundle)}}
        ]});
        assert_eq!(
            webhook_configuration_patch(&done, bundle, Some("Fail")),
            None
        );
    }
}
