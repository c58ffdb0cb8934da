//! TLS for `openprof serve --tls-cert --tls-key`: rustls with the ring provider.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A server configuration from a PEM certificate chain and its PEM private key.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|error| anyhow::anyhow!("--tls-cert {}: {error}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|error| anyhow::anyhow!("--tls-cert {}: {error}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {} holds no certificate", cert.display());
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|error| anyhow::anyhow!("--tls-key {}: {error}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}
