//! The TLS client side shared by the agent and the command-line clients: rustls (ring
//! provider) trusting the CA certificates of one PEM file.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// A TLS client configuration trusting the certificates in `ca_file`; errors name the file
/// but not the option it came from (the caller adds that).
pub fn config(ca_file: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let certificates =
        CertificateDer::pem_file_iter(ca_file).map_err(|error| format!("{ca_file}: {error}"))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|error| format!("{ca_file}: {error}"))?;
        roots
            .add(certificate)
            .map_err(|error| format!("{ca_file}: {error}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{ca_file} holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS: {error}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A TLS stream over `socket` to `host`, verified against `config`'s roots.
pub fn connect<S: std::io::Read + std::io::Write>(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    socket: S,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, S>, String> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|error| format!("{host} is not a TLS server name: {error}"))?;
    let client =
        rustls::ClientConnection::new(config, name).map_err(|error| format!("TLS: {error}"))?;
    Ok(rustls::StreamOwned::new(client, socket))
}
