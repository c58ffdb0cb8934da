//! TLS for `openprof serve --tls-cert --tls-key`: rustls with the ring provider. The
//! collector's certificate serves its agents and control clients, and the web UI beside it;
//! the UI's own control client trusts exactly that certificate ([`Tls::own_client`]).

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

pub use tokio_rustls::rustls::ServerConfig;

/// The collector's TLS, read once from its PEM files.
pub struct Tls {
    /// What the collector (and the web UI beside it) serves.
    pub server: Arc<rustls::ServerConfig>,
    /// A client configuration that trusts the collector's own certificate and no other: for
    /// clients in the collector's process (the web UI's commands), which know the very
    /// certificate they must meet, whatever name or address they connect by.
    pub own_client: Arc<rustls::ClientConfig>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_chain(cert: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|error| anyhow::anyhow!("--tls-cert {}: {error}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|error| anyhow::anyhow!("--tls-cert {}: {error}", cert.display()))?;
    if chain.is_empty() {
        anyhow::bail!("--tls-cert {} holds no certificate", cert.display());
    }
    Ok(chain)
}

/// The collector's TLS from a PEM certificate chain (its own certificate first) and its PEM
/// private key.
pub fn load(cert: &Path, key: &Path) -> anyhow::Result<Tls> {
    let chain = read_chain(cert)?;
    let own = chain[0].clone();
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|error| anyhow::anyhow!("--tls-key {}: {error}", key.display()))?;
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Tls {
        server: Arc::new(server),
        own_client: pinned_client(own)?,
    })
}

/// A client configuration that accepts the server only if it presents `certificate` and
/// proves it holds its private key (the handshake's signature, checked as usual).
pub fn pinned_client(
    certificate: CertificateDer<'static>,
) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = provider();
    let verifier = Arc::new(Pinned {
        certificate,
        algorithms: provider.signature_verification_algorithms,
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Trusts one certificate, byte for byte. Neither names nor validity dates are looked at: the
/// client knows the certificate it must meet, not a name to check it by; the signature over
/// the handshake is still checked with the certificate's key, so only the holder of the
/// private key gets through.
#[derive(Debug)]
struct Pinned {
    certificate: CertificateDer<'static>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.certificate.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for a name the client does not connect by, in PEM files; its
    /// TLS and the certificate and key themselves.
    fn certified(dir: &Path, name: &str) -> (Tls, rcgen::CertifiedKey) {
        let certified = rcgen::generate_simple_self_signed(vec![format!("{name}.example")])
            .expect("a certificate");
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
        (load(&cert, &key).expect("the collector's TLS"), certified)
    }

    /// Presents one certificate chain with one key, whether they belong together or not.
    #[derive(Debug)]
    struct Presents(Arc<rustls::sign::CertifiedKey>);

    impl rustls::server::ResolvesServerCert for Presents {
        fn resolve(
            &self,
            _hello: rustls::server::ClientHello<'_>,
        ) -> Option<Arc<rustls::sign::CertifiedKey>> {
            Some(self.0.clone())
        }
    }

    /// A TLS handshake in memory, by 127.0.0.1: what the client made of the server.
    fn handshake(
        client: Arc<rustls::ClientConfig>,
        server: Arc<rustls::ServerConfig>,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut client = rustls::ClientConnection::new(client, name)?;
        let mut server = rustls::ServerConnection::new(server)?;
        for _ in 0..16 {
            let mut bytes = Vec::new();
            client.write_tls(&mut bytes).unwrap();
            let mut unread = &bytes[..];
            while !unread.is_empty() {
                server.read_tls(&mut unread).unwrap();
                server.process_new_packets()?;
            }
            let mut bytes = Vec::new();
            server.write_tls(&mut bytes).unwrap();
            let mut unread = &bytes[..];
            while !unread.is_empty() {
                client.read_tls(&mut unread).unwrap();
                client.process_new_packets()?;
            }
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not end");
    }

    #[test]
    fn the_own_client_trusts_its_collectors_certificate_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let (collector, collector_pem) = certified(dir.path(), "collector");
        let (other, other_pem) = certified(dir.path(), "other");
        // Its own certificate, though it names neither 127.0.0.1 nor a CA the client knows.
        handshake(collector.own_client.clone(), collector.server.clone())
            .expect("the collector's own certificate is trusted");
        // Another server's certificate is refused.
        let refused = handshake(collector.own_client.clone(), other.server.clone());
        assert!(
            matches!(
                refused,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure
                ))
            ),
            "{refused:?}"
        );
        let refused = handshake(other.own_client.clone(), collector.server.clone());
        assert!(
            matches!(
                refused,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure
                ))
            ),
            "{refused:?}"
        );
        // The collector's certificate without its key: the handshake's signature fails.
        let key = PrivateKeyDer::try_from(other_pem.key_pair.serialize_der()).unwrap();
        let signer = provider().key_provider.load_private_key(key).unwrap();
        let impostor =
            rustls::sign::CertifiedKey::new(vec![collector_pem.cert.der().clone()], signer);
        let impostor = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Presents(Arc::new(impostor))));
        let refused = handshake(collector.own_client.clone(), Arc::new(impostor));
        assert!(
            matches!(
                refused,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::BadSignature
                ))
            ),
            "{refused:?}"
        );
    }

    #[test]
    fn a_file_without_certificates_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let error = load(&empty, &empty).err().expect("refused").to_string();
        assert!(error.contains("holds no certificate"), "{error}");
    }
}
