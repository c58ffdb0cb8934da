//! HTTPS for the UI beside a collector that has TLS: the collector's certificate and key. Each
//! connection's handshake runs in its connection's task (`connections`), within
//! [`HANDSHAKE_TIMEOUT`], so a slow or silent client holds up no other; one that does not speak
//! TLS (plain HTTP to this port) fails it and never reaches the router.

use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::ServerConfig;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The UI's TLS configuration: the collector's, speaking HTTP/1.1 (what the UI serves).
pub fn ui_config(collector: &ServerConfig) -> Arc<ServerConfig> {
    let mut config = collector.clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}
