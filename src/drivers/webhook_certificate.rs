//! The webhook's serving certificate, read from a PEM certificate chain and a PEM private key
//! (the `tls.crt` and `tls.key` of a kubernetes.io/tls Secret, as cert-manager writes them)
//! and read again whenever the files change, or handed over as PEM text by haptor's own
//! issuer (`drivers::kube::webhook_issuer`, [`ReloadingCertificate::in_memory`]):
//! [`ReloadingCertificate`] is the rustls certificate resolver, so each TLS handshake uses
//! the latest pair that loaded. A pair that does not load (half-written during a rotation, a
//! key that does not match) is logged and counted, and the previous pair keeps serving.

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

/// A certificate resolver over two files, reloaded when they change, or over PEM text
/// handed to [`Self::load_pem`].
#[derive(Debug)]
pub struct ReloadingCertificate {
    /// The files; `None` for a resolver fed by [`Self::load_pem`] only.
    files: Option<(PathBuf, PathBuf)>,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// The bytes of the pair that loaded last (or failed last), to notice a change.
    seen: Mutex<Option<(Vec<u8>, Vec<u8>)>>,
}

impl ReloadingCertificate {
    /// A resolver for the pair; nothing is loaded yet (see [`Self::reload`]).
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        ReloadingCertificate {
            files: Some((cert_file.into(), key_file.into())),
            current: RwLock::new(None),
            seen: Mutex::new(None),
        }
    }

    /// A resolver with no files, fed by [`Self::load_pem`]; nothing is loaded yet.
    pub fn in_memory() -> Self {
        ReloadingCertificate {
            files: None,
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
    /// A resolver without files has nothing to read: `Ok(false)`.
    pub fn reload(&self) -> Result<bool, CertificateError> {
        let Some((cert_file, key_file)) = &self.files else {
            return Ok(false);
        };
        let cert = read(cert_file)?;
        let key = read(key_file)?;
        self.load(cert_file, cert, key_file, key)
    }

    /// Loads a PEM certificate chain and key given as bytes, when they differ from the last
    /// pair seen; `source` names where they came from in an error (`Secret haptor/x`).
    /// `Ok(true)`: the pair serves from now on; `Ok(false)`: unchanged. On an error the pair
    /// that served keeps serving.
    pub fn load_pem(
        &self,
        source: &str,
        cert: &[u8],
        key: &[u8],
    ) -> Result<bool, CertificateError> {
        self.load(
            Path::new(&format!("{source} tls.crt")),
            cert.to_vec(),
            Path::new(&format!("{source} tls.key")),
            key.to_vec(),
        )
    }

    fn load(
        &self,
        cert_path: &Path,
        cert: Vec<u8>,
        key_path: &Path,
        key: Vec<u8>,
    ) -> Result<bool, CertificateError> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.as_ref().is_some_and(|(c, k)| *c == cert && *k == key) {
            return Ok(false);
        }
        *seen = Some((cert.clone(), key.clone()));
        drop(seen);
        let certified = certified_key(cert_path, &cert, key_path, &key)?;
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
                        if let Some((cert, key)) = &self.files {
                            tracing::info!(cert = %cert.display(), key = %key.display(), "webhook certificate loaded");
                        }
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
