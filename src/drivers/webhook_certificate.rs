//! The webhook's serving certificate, read from a PEM certificate chain and a PEM private key
//! (the `tls.crt` and `tls.key` of a kubernetes.io/tls Secret, as cert-manager writes them)
//! and read again whenever the files change: [`ReloadingCertificate`] is the rustls
//! certificate resolver, so each TLS handshake uses the latest pair that loaded. A pair that
//! does not load (half-written during a rotation, a key that does not match) is logged and
//! counted, and the previous pair keeps serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use prometheus::IntCounterVec;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate pair did not load.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// A certificate resolver over two files, reloaded when they change.
#[derive(Debug)]
pub struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// The bytes of the pair that loaded last (or failed last), to notice a change.
    seen: Mutex<Option<(Vec<u8>, Vec<u8>)>>,
}

impl ReloadingCertificate {
    /// A resolver for the pair; nothing is loaded yet (see [`Self::reload`]).
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        ReloadingCertificate {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            current: RwLock::new(None),
            seen: Mutex::new(None),
        }
    }

    /// Whether a pair has loaded (handshakes fail until one has).
    pub fn is_loaded(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Reads both files and, when they differ from the last reading, loads them. `Ok(true)`:
    /// a new pair serves from now on; `Ok(false)`: unchanged. On an error the pair that
    /// served keeps serving (and the same broken bytes are not reported again).
    pub fn reload(&self) -> Result<bool, CertificateError> {
        let cert = read(&self.cert_file)?;
        let key = read(&self.key_file)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.as_ref().is_some_and(|(c, k)| *c == cert && *k == key) {
            return Ok(false);
        }
        *seen = Some((cert.clone(), key.clone()));
        drop(seen);
        let certified = certified_key(&self.cert_file, &cert, &self.key_file, &key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(certified));
        Ok(true)
    }

    /// Reloads every `every` until the task is aborted, logging each change and failure and
    /// counting them in `reloads` (`result`: success, failure).
    pub fn spawn_watch(
        self: Arc<Self>,
        every: Duration,
        reloads: IntCounterVec,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            let mut last_error: Option<String> = None;
            loop {
                ticker.tick().await;
                let resolver = Arc::clone(&self);
                let outcome = tokio::task::spawn_blocking(move || resolver.reload()).await;
                match outcome {
                    Ok(Ok(true)) => {
                        reloads.with_label_values(&["success"]).inc();
                        last_error = None;
                        tracing::info!(cert = %self.cert_file.display(), key = %self.key_file.display(), "webhook certificate loaded");
                    }
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        let message = e.to_string();
                        if last_error.as_deref() != Some(message.as_str()) {
                            reloads.with_label_values(&["failure"]).inc();
                            if self.is_loaded() {
                                tracing::warn!(error = %message, "the webhook certificate did not load; the previous one keeps serving");
                            } else {
                                tracing::error!(error = %message, "the webhook certificate did not load; the webhook refuses TLS handshakes until it does");
                            }
                            last_error = Some(message);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "reading the webhook certificate failed"),
                }
            }
        })
    }

    /// The TLS configuration that serves with this resolver (HTTP/1.1, ring).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, CertificateError> {
    std::fs::read(path).map_err(|source| CertificateError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a PEM chain and key into a rustls certified key, checking that they match.
fn certified_key(
    cert_path: &Path,
    cert: &[u8],
    key_path: &Path,
    key: &[u8],
) -> Result<CertifiedKey, CertificateError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| CertificateError::Invalid {
            path: cert_path.to_path_buf(),
            message: format!("not a PEM certificate chain: {e}"),
        })?;
    if chain.is_empty() {
        return Err(CertificateError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| CertificateError::Invalid {
        path: key_path.to_path_buf(),
        message: format!("not a PEM private key: {e}"),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing =
        provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| CertificateError::Invalid {
                path: key_path.to_path_buf(),
                message: format!("unsupported private key: {e}"),
            })?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| CertificateError::Invalid {
            path: key_path.to_path_buf(),
            message: format!(
                "the key does not match the certificate of {}: {e}",
                cert_path.display()
            ),
        })?;
    Ok(certified)
}
