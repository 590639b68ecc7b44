//! The default TLS certificate: what HAProxy presents to a client whose SNI names no host of
//! an Ingress's TLS entry (or that sends none), so HTTPS answers on every host as users of
//! an ingress controller expect. It is self-signed (ECDSA P-256, ten years, the subject
//! `haptor default certificate`), generated once and kept: in a cluster as the
//! kubernetes.io/tls Secret `haptor run --default-certificate-secret NAME` creates in
//! haptor's namespace when it is missing (`drivers::kube::default_certificate`), in
//! `haptor local` as a Secret manifest in the work directory, read with the folder. Either
//! way the templates find it like any TLS Secret: the Ingress library names it in
//! extraContext `default_certificate` (`NAMESPACE/NAME`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rcgen::{CertificateParams, DnType, KeyPair};

/// The Secret's name unless told otherwise.
pub const DEFAULT_SECRET_NAME: &str = "haptor-default-tls";
/// The file `haptor local` keeps the Secret manifest in, in its work directory.
pub const LOCAL_FILE_NAME: &str = "default-certificate.yaml";
/// How long the certificate is valid.
const VALIDITY_DAYS: i64 = 3650;

/// A certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificatePair {
    pub cert: String,
    pub key: String,
}

/// A new self-signed certificate, valid from the day of `now` (a Unix time) for ten years.
pub fn generate(now: i64) -> Result<CertificatePair, rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["haptor-default.invalid".to_string()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "haptor default certificate");
    let date = |seconds: i64| {
        let date = jiff::Timestamp::from_second(seconds)
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        rcgen::date_time_ymd(
            i32::from(date.year()),
            u8::try_from(date.month()).unwrap_or(1),
            u8::try_from(date.day()).unwrap_or(1),
        )
    };
    params.not_before = date(now);
    params.not_after = date(now + VALIDITY_DAYS * 86_400);
    let cert = params.self_signed(&key)?;
    Ok(CertificatePair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The kubernetes.io/tls Secret manifest holding `pair`, as YAML.
pub fn secret_manifest(namespace: &str, name: &str, pair: &CertificatePair) -> String {
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    format!(
        "# haptor's default TLS certificate, generated once (self-signed); delete this file to\n\
         # have a new one generated at the next start.\n\
         apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels: {{app.kubernetes.io/managed-by: haptor}}\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        encode(&pair.cert),
        encode(&pair.key)
    )
}

/// The Secret manifest of `haptor local` in `work_dir`, written with a new certificate
/// when it does not exist yet (kept afterwards), and its path.
pub fn ensure_local_file(
    work_dir: &Path,
    namespace: &str,
    name: &str,
    now: i64,
) -> Result<PathBuf, String> {
    let path = work_dir.join(LOCAL_FILE_NAME);
    if path.exists() {
        return Ok(path);
    }
    let pair = generate(now).map_err(|e| format!("generating the default certificate: {e}"))?;
    std::fs::write(&path, secret_manifest(namespace, name, &pair))
        .map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_certificate_is_self_signed_for_ten_years_from_today() {
        let now = 1_796_000_000; // 2026-11-29
        let pair = generate(now).expect("generated");
        assert!(pair.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(pair.key.contains("PRIVATE KEY-----"));
        let der = crate::pure::certificates::pem_certificates(&pair.cert)
            .next()
            .expect("one certificate");
        let (from, until) = crate::pure::certificates::validity(&der).expect("a validity");
        assert!((now - 86_400..=now).contains(&from), "{from}");
        assert_eq!(until - from, VALIDITY_DAYS * 86_400);
        let manifest = secret_manifest("haptor", DEFAULT_SECRET_NAME, &pair);
        assert!(manifest.contains("type: kubernetes.io/tls\n"));
        assert!(manifest.contains("  name: haptor-default-tls\n  namespace: haptor\n"));
    }

    #[test]
    fn the_local_file_is_written_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = ensure_local_file(dir.path(), "haptor", "x", 1_796_000_000).expect("written");
        let first = std::fs::read_to_string(&path).expect("read");
        ensure_local_file(dir.path(), "haptor", "x", 1_796_000_000).expect("kept");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), first);
    }
}
