//! The admission webhook's certificate when haptor issues it itself (`haptor run
//! --webhook-self-issued-secret NAME --webhook-service SERVICE`): every replica, every
//! [`IssuerSettings::check_every`], reads the Secret NAME of its namespace, issues what
//! `pure::webhook_certificate::plan` says is due (a CA and a serving certificate for the
//! Service's DNS names when the Secret is missing or unreadable, a serving certificate when
//! a third of its validity remains, a new CA when a third of the CA's remains), writes it
//! back (create when missing, update at the resourceVersion read: of two replicas that
//! issue at once one wins and the other serves what it wrote), and hands the Secret's pair
//! to the webhook's TLS server ([`ReloadingCertificate::load_pem`], no restart).
//!
//! With `--webhook-configuration`, it then patches that ValidatingWebhookConfiguration:
//! each webhook's `caBundle` becomes the Secret's `ca.crt` as soon as the certificate
//! serves, and its `failurePolicy` becomes `--webhook-failure-policy` only once this replica
//! has been ready (`/readyz`) for [`IssuerSettings::policy_settle`], time for its pod to turn
//! Ready and become an endpoint of the webhook Service. The shipped configuration starts
//! with `failurePolicy: Ignore` and no `caBundle`: until haptor answers, the API server
//! admits everything as it would without the webhook. A configuration applied again (its
//! `Ignore` and empty `caBundle` back) is patched again at the next check.
//!
//! Key generation and signing (ECDSA P-256) use rcgen on ring; the decisions are pure.
//! [`spawn`] takes everything by value and its inputs are `Clone`, so a supervisor can start
//! it again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use prometheus::IntCounterVec;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::drivers::webhook_certificate::ReloadingCertificate;
use crate::pure::admission::FailurePolicy;
use crate::pure::webhook_certificate::{
    CA_COMMON_NAME, CA_VALIDITY_DAYS, DNS_NAMES_ANNOTATION, Reason, Renewal, SERVING_VALIDITY_DAYS,
    StoredCertificates, issue_period, next_ca_bundle, plan, service_dns_names,
    webhook_configuration_patch,
};

/// How long one API request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is looked at between two checks.
const READINESS_POLL: Duration = Duration::from_millis(500);
/// The field manager of the webhook configuration patch.
const FIELD_MANAGER: &str = "haptor-webhook-issuer";

/// Whether this replica is ready (`/readyz`): the webhook's failure policy is set only
/// once it is.
pub type ReadyProbe = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the issuer issues, where it keeps it and what it patches.
#[derive(Debug, Clone)]
pub struct IssuerSettings {
    /// haptor's namespace: the Secret's and the Service's.
    pub namespace: String,
    /// The Secret holding the CA and the serving certificate.
    pub secret: String,
    /// The webhook Service, whose DNS names the serving certificate carries.
    pub service: String,
    /// The ValidatingWebhookConfiguration whose `caBundle` and `failurePolicy` are set.
    pub configuration: Option<String>,
    /// The `failurePolicy` the configuration gets once this replica is ready.
    pub failure_policy: FailurePolicy,
    /// How often the Secret and the configuration are read.
    pub check_every: Duration,
    /// How long this replica must have been ready before the failure policy is set.
    pub policy_settle: Duration,
}

impl IssuerSettings {
    /// Settings with the default periods: a check every 10 s, the policy set after 10 s of
    /// readiness (a pod's readinessProbe period is 5 s in the chart).
    pub fn new(
        namespace: String,
        secret: String,
        service: String,
        configuration: Option<String>,
        failure_policy: FailurePolicy,
    ) -> IssuerSettings {
        IssuerSettings {
            namespace,
            secret,
            service,
            configuration,
            failure_policy,
            check_every: Duration::from_secs(10),
            policy_settle: Duration::from_secs(10),
        }
    }

    fn dns_names(&self) -> Vec<String> {
        service_dns_names(&self.service, &self.namespace)
    }

    fn secret_label(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.secret)
    }
}

/// Why one check did not complete (retried at the next).
#[derive(Debug, thiserror::Error)]
pub enum IssuerError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { what: String },
    #[error("issuing the webhook certificate failed: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("the issued certificate does not load: {0}")]
    Load(#[from] crate::drivers::webhook_certificate::CertificateError),
}

/// Starts the issuer; it runs until the task is aborted. Loads (successes and failures of
/// handing a new pair to the TLS server) are counted in `reloads` (`result`).
pub fn spawn(
    client: Client,
    settings: IssuerSettings,
    certificate: Arc<ReloadingCertificate>,
    ready: ReadyProbe,
    reloads: IntCounterVec,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let issuer = IssuerTask {
            secrets: Api::namespaced(client.clone(), &settings.namespace),
            configurations: Api::all(client),
            settings,
            certificate,
            reloads,
        };
        let mut ready_since: Option<Instant> = None;
        let mut last_error: Option<String> = None;
        let mut retry = Duration::from_secs(1);
        loop {
            if ready() {
                ready_since.get_or_insert_with(Instant::now);
            }
            let settled =
                ready_since.is_some_and(|since| since.elapsed() >= issuer.settings.policy_settle);
            let wait = match issuer.check(settled).await {
                Ok(()) => {
                    if last_error.take().is_some() {
                        tracing::info!(secret = %issuer.settings.secret_label(), "the webhook certificate check succeeds again");
                    }
                    retry = Duration::from_secs(1);
                    match ready_since {
                        // Wake when the policy may be set, not a whole period later.
                        Some(since) if !settled => issuer
                            .settings
                            .policy_settle
                            .saturating_sub(since.elapsed())
                            .min(issuer.settings.check_every),
                        _ => issuer.settings.check_every,
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    if last_error.as_deref() != Some(message.as_str()) {
                        tracing::warn!(error = %message, secret = %issuer.settings.secret_label(), "the webhook certificate check failed; retrying");
                        last_error = Some(message);
                    }
                    let wait = retry;
                    retry = (retry * 2).min(issuer.settings.check_every);
                    wait
                }
            };
            // Readiness is looked at twice a second meanwhile: the policy is set
            // `policy_settle` after it turns true, not a whole period later.
            let mut deadline = Instant::now() + wait.max(Duration::from_millis(100));
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                tokio::time::sleep(left.min(READINESS_POLL)).await;
                if ready_since.is_none() && ready() {
                    let now = Instant::now();
                    ready_since = Some(now);
                    deadline = deadline.min(now + issuer.settings.policy_settle);
                }
            }
        }
    })
}

/// The issuer's state between checks.
struct IssuerTask {
    secrets: Api<Secret>,
    configurations: Api<ValidatingWebhookConfiguration>,
    settings: IssuerSettings,
    certificate: Arc<ReloadingCertificate>,
    reloads: IntCounterVec,
}

impl IssuerTask {
    /// One check: the Secret issued and read, its pair serving, the configuration patched
    /// (its failure policy too when `settled`).
    async fn check(&self, settled: bool) -> Result<(), IssuerError> {
        let stored = self.ensure_secret().await?;
        match self.certificate.load_pem(
            &self.settings.secret_label(),
            stored.cert.as_bytes(),
            stored.key.as_bytes(),
        ) {
            Ok(true) => {
                self.reloads.with_label_values(&["success"]).inc();
                tracing::info!(secret = %self.settings.secret_label(), names = %stored.dns_names_annotation(), "webhook certificate loaded");
            }
            Ok(false) => {}
            Err(e) => {
                self.reloads.with_label_values(&["failure"]).inc();
                return Err(e.into());
            }
        }
        let Some(name) = &self.settings.configuration else {
            return Ok(());
        };
        let what = format!("reading ValidatingWebhookConfiguration {name}");
        let Some(configuration) = request(&what, self.configurations.get_opt(name)).await? else {
            tracing::debug!(configuration = %name, "the webhook configuration does not exist (yet)");
            return Ok(());
        };
        let current = serde_json::to_value(&configuration).unwrap_or_default();
        let policy = settled.then(|| self.settings.failure_policy.to_string());
        let Some(patch) =
            webhook_configuration_patch(&current, &stored.ca_bundle, policy.as_deref())
        else {
            return Ok(());
        };
        let what = format!("patching ValidatingWebhookConfiguration {name}");
        request(
            &what,
            self.configurations.patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Strategic(&patch),
            ),
        )
        .await?;
        match policy {
            Some(policy) => {
                tracing::info!(configuration = %name, failure_policy = %policy, "the webhook configuration trusts haptor's CA and fails as --webhook-failure-policy says")
            }
            None => {
                tracing::info!(configuration = %name, "the webhook configuration trusts haptor's CA (its failure policy is set once this replica is ready)")
            }
        }
        Ok(())
    }

    /// The Secret's certificates, issued and written first when due. A write that lost to
    /// another replica's is read again.
    async fn ensure_secret(&self) -> Result<StoredCertificates, IssuerError> {
        let names = self.settings.dns_names();
        let name = &self.settings.secret;
        for _ in 0..3 {
            let what = format!("reading {}", self.settings.secret_label());
            let existing = request(&what, self.secrets.get_opt(name)).await?;
            let stored = existing.as_ref().and_then(read_secret);
            let now = jiff::Timestamp::now().as_second();
            let renewal = plan(stored.as_ref(), &names, now);
            let reason = match (renewal, stored.clone()) {
                (Renewal::Serving(reason) | Renewal::CaAndServing(reason), _) => reason,
                (Renewal::Keep, Some(stored)) => return Ok(stored),
                (Renewal::Keep, None) => Reason::Missing,
            };
            let issued = issue(renewal, stored.as_ref(), &names, now)?;
            let written = match existing {
                None => {
                    let what = format!("creating {}", self.settings.secret_label());
                    self.secrets
                        .create(&PostParams::default(), &self.secret_object(&issued, None))
                        .await
                        .map_err(|source| IssuerError::Api { what, source })
                }
                Some(existing) => {
                    let what = format!("updating {}", self.settings.secret_label());
                    self.secrets
                        .replace(
                            name,
                            &PostParams::default(),
                            &self.secret_object(&issued, existing.resource_version()),
                        )
                        .await
                        .map_err(|source| IssuerError::Api { what, source })
                }
            };
            match written {
                Ok(_) => {
                    let what = match renewal {
                        Renewal::CaAndServing(_) => "a CA and a serving certificate",
                        _ => "a serving certificate",
                    };
                    tracing::info!(secret = %self.settings.secret_label(), names = %issued.dns_names_annotation(), reason = %reason, "issued {what} for the webhook");
                    return Ok(issued);
                }
                // Another replica wrote first (409 on create or on update): read its.
                Err(IssuerError::Api {
                    source: kube::Error::Api(status),
                    ..
                }) if status.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        Err(IssuerError::Timeout {
            what: format!(
                "{} kept changing while it was written",
                self.settings.secret_label()
            ),
        })
    }

    fn secret_object(
        &self,
        stored: &StoredCertificates,
        resource_version: Option<String>,
    ) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.settings.secret.clone()),
                namespace: Some(self.settings.namespace.clone()),
                resource_version,
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "haptor".to_string(),
                )])),
                annotations: Some(BTreeMap::from([(
                    DNS_NAMES_ANNOTATION.to_string(),
                    stored.dns_names_annotation(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(
                stored
                    .secret_data()
                    .into_iter()
                    .map(|(k, v)| (k, ByteString(v)))
                    .collect(),
            ),
            ..Secret::default()
        }
    }
}

/// What a Secret holds, if it holds the four keys.
fn read_secret(secret: &Secret) -> Option<StoredCertificates> {
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .as_ref()?
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    StoredCertificates::from_secret(
        &data,
        secret
            .annotations()
            .get(DNS_NAMES_ANNOTATION)
            .map(String::as_str),
    )
}

async fn request<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, IssuerError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(IssuerError::Api {
            what: what.to_string(),
            source,
        }),
        Err(_) => Err(IssuerError::Timeout {
            what: what.to_string(),
        }),
    }
}

/// Issues what `renewal` says at `now`: a new CA (keeping the still valid ones of
/// `stored`'s bundle behind it) or `stored`'s CA, and a serving certificate for `names`
/// under it. A stored CA key that does not parse means a new CA.
pub fn issue(
    renewal: Renewal,
    stored: Option<&StoredCertificates>,
    names: &[String],
    now: i64,
) -> Result<StoredCertificates, rcgen::Error> {
    let reuse = match (renewal, stored) {
        (Renewal::Serving(_), Some(stored)) => KeyPair::from_pem(&stored.ca_key)
            .ok()
            .zip(stored.ca_validity())
            .map(|(key, validity)| (stored, key, validity)),
        _ => None,
    };
    let (ca_bundle, ca_key_pem, ca_key, (ca_from, ca_until)) = match reuse {
        Some((stored, key, validity)) => (
            stored.ca_bundle.clone(),
            stored.ca_key.clone(),
            key,
            validity,
        ),
        None => {
            let key = KeyPair::generate()?;
            let period = issue_period(now, CA_VALIDITY_DAYS, None);
            let ca = ca_params(period)?.self_signed(&key)?;
            let bundle = next_ca_bundle(&ca.pem(), stored.map(|s| s.ca_bundle.as_str()), now);
            (bundle, key.serialize_pem(), key, period)
        }
    };
    let issuer = Issuer::new(ca_params((ca_from, ca_until))?, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    set_period(
        &mut params,
        issue_period(now, SERVING_VALIDITY_DAYS, Some(ca_until)),
    );
    let mut subject = DistinguishedName::new();
    subject.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = subject;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(StoredCertificates {
        ca_bundle,
        ca_key: ca_key_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
        dns_names: names.to_vec(),
    })
}

/// The CA's parameters: the same subject every time, so a serving certificate issued later
/// under the stored CA names it as its issuer.
fn ca_params((from, until): (i64, i64)) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = subject;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_period(&mut params, (from, until));
    Ok(params)
}

/// Sets a certificate's validity from day-aligned Unix times.
fn set_period(params: &mut CertificateParams, (from, until): (i64, i64)) {
    let (year, month, day) = civil_date(from);
    params.not_before = rcgen::date_time_ymd(year, month, day);
    let (year, month, day) = civil_date(until);
    params.not_after = rcgen::date_time_ymd(year, month, day);
}

/// The UTC date of a Unix time (a time beyond jiff's range, ±9999 years, is the epoch's).
fn civil_date(seconds: i64) -> (i32, u8, u8) {
    let date = jiff::Timestamp::from_second(seconds)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    (
        i32::from(date.year()),
        u8::try_from(date.month()).unwrap_or(1),
        u8::try_from(date.day()).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::certificates::pem_certificates;
    use crate::pure::webhook_certificate::Reason;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

    fn names() -> Vec<String> {
        service_dns_names("haptor-webhook", "haptor")
    }

    /// Whether a TLS client trusting `ca_bundle` accepts `cert` for `name` at `now`.
    fn trusted(ca_bundle: &str, cert: &str, name: &str, now: i64) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        for der in pem_certificates(ca_bundle) {
            roots
                .add(CertificateDer::from(der))
                .expect("a CA certificate");
        }
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("a verifier");
        let leaf = CertificateDer::from(pem_certificates(cert).next().expect("a certificate"));
        verifier
            .verify_server_cert(
                &leaf,
                &[],
                &ServerName::try_from(name.to_string()).expect("a DNS name"),
                &[],
                UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(now).unwrap())),
            )
            .map(|_| ())
    }

    #[test]
    fn an_issued_serving_certificate_is_trusted_through_the_ca_bundle_for_both_service_names() {
        let now = jiff::Timestamp::now().as_second();
        let issued =
            issue(Renewal::CaAndServing(Reason::Missing), None, &names(), now).expect("issued");
        for name in names() {
            trusted(&issued.ca_bundle, &issued.cert, &name, now).expect("trusted");
        }
        assert!(trusted(&issued.ca_bundle, &issued.cert, "other.haptor.svc", now).is_err());
        assert_eq!(plan(Some(&issued), &names(), now), Renewal::Keep);
        let served = ReloadingCertificate::in_memory();
        assert!(
            served
                .load_pem(
                    "Secret haptor/x",
                    issued.cert.as_bytes(),
                    issued.key.as_bytes()
                )
                .expect("loads")
        );
        assert!(served.is_loaded());
    }

    #[test]
    fn a_renewed_serving_certificate_keeps_the_ca_and_a_renewed_ca_keeps_the_old_one_trusted() {
        let now = jiff::Timestamp::now().as_second();
        let first =
            issue(Renewal::CaAndServing(Reason::Missing), None, &names(), now).expect("issued");
        let serving = issue(
            Renewal::Serving(Reason::NamesChanged),
            Some(&first),
            &names(),
            now,
        )
        .expect("renewed");
        assert_eq!(serving.ca_bundle, first.ca_bundle);
        assert_eq!(serving.ca_key, first.ca_key);
        assert_ne!(serving.cert, first.cert);
        trusted(&first.ca_bundle, &serving.cert, &names()[0], now).expect("same CA");

        let renewed = issue(
            Renewal::CaAndServing(Reason::Expiring { not_after: now }),
            Some(&serving),
            &names(),
            now,
        )
        .expect("a new CA");
        assert_ne!(renewed.ca_key, serving.ca_key);
        assert_eq!(pem_certificates(&renewed.ca_bundle).count(), 2);
        // The new bundle trusts the new pair and the pair other replicas still serve.
        trusted(&renewed.ca_bundle, &renewed.cert, &names()[0], now).expect("new pair");
        trusted(&renewed.ca_bundle, &serving.cert, &names()[0], now).expect("old pair");
    }

    #[test]
    fn a_stored_ca_key_that_does_not_parse_means_a_new_ca() {
        let now = jiff::Timestamp::now().as_second();
        let mut first =
            issue(Renewal::CaAndServing(Reason::Missing), None, &names(), now).expect("issued");
        first.ca_key = "not a key".into();
        let again = issue(
            Renewal::Serving(Reason::Unreadable),
            Some(&first),
            &names(),
            now,
        )
        .expect("issued");
        assert_ne!(again.ca_key, "not a key");
        trusted(&again.ca_bundle, &again.cert, &names()[0], now).expect("trusted");
    }
}
