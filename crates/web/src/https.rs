//! HTTPS for the UI beside a collector that has TLS: the collector's certificate and key, served
//! by axum through a listener that yields only connections whose TLS handshake finished. Each
//! handshake runs in a task of its own, within [`HANDSHAKE_TIMEOUT`], so a slow or silent
//! client holds up no other; one that does not speak TLS (plain HTTP to this port) fails it and
//! never reaches the router.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections that finished their handshake and wait for axum to take them, at most.
const READY: usize = 64;

/// The UI's TLS configuration: the collector's, speaking HTTP/1.1 (what the UI serves).
pub fn ui_config(collector: &ServerConfig) -> Arc<ServerConfig> {
    let mut config = collector.clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// TLS connections for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` (in a task that ends when this listener is dropped) and hands
    /// over each connection once its handshake with `config` finished.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let local_addr = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = sender.closed() => return,
                };
                let (socket, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors, most likely: wait for some to be given back.
                        tracing::warn!("web UI: can't accept a connection: {error}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
                        Ok(Ok(stream)) => {
                            let _ = sender.send((stream, peer)).await;
                        }
                        Ok(Err(error)) => tracing::info!(
                            "web UI: TLS handshake failed with {}: {error}",
                            peer.ip()
                        ),
                        Err(_) => {
                            tracing::info!("web UI: TLS handshake timed out with {}", peer.ip())
                        }
                    }
                });
            }
        });
        Ok(TlsListener { ready, local_addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task holds the sender until this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
