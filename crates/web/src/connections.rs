//! How the UI's port takes connections, so that clients that hold connections open without a
//! credential cannot use up the collector's descriptors: at most [`Limits::max_connections`]
//! at once and [`Limits::max_per_address`] from one address (more are answered 503 and closed
//! at once), each closed when a request's head takes longer than [`Limits::header_timeout`]
//! (which also bounds the wait for the next request on a kept-alive connection) or when no
//! byte moves either way for [`Limits::stall_timeout`]. Over HTTPS the TLS handshake runs
//! inside the same bounds, within [`crate::https::HANDSHAKE_TIMEOUT`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use openprof_collector::repeated_warnings::RepeatedWarnings;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

/// The bounds of the UI's connections.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once, at most (handshaking, waiting or answering).
    pub max_connections: usize,
    /// Connections open at once from one IP address, at most: one client cannot take them all.
    pub max_per_address: usize,
    /// How long a request's head may take to arrive, counted from the connection's opening or
    /// from the end of the previous response.
    pub header_timeout: Duration,
    /// How long a connection may move no byte, either way, while a request is read or
    /// answered.
    pub stall_timeout: Duration,
}

/// Far more than a browser opens (6 a host) or a team's scripts need; few enough to leave most
/// of a 1024-descriptor process to the agents.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;
pub const DEFAULT_MAX_PER_ADDRESS: usize = 24;
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest answer the UI computes (a fleet's profile summed by ClickHouse) takes seconds;
/// a client that reads nothing of it for two minutes is gone.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        }
    }
}

/// The answer to a connection over the bounds, on plain HTTP (over HTTPS it is just closed).
const TURNED_AWAY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Content-Type: text/plain\r\nContent-Length: 42\r\nConnection: close\r\n\r\n\
too many connections: try again in a while";

/// Connections open now, by address.
#[derive(Default)]
struct PerAddress(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place among those of its address, given back when dropped.
struct AddressPlace {
    table: Arc<PerAddress>,
    address: IpAddr,
}

impl PerAddress {
    fn take(table: &Arc<PerAddress>, address: IpAddr, bound: usize) -> Option<AddressPlace> {
        let mut open = table
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(address).or_default();
        if *count >= bound {
            return None;
        }
        *count += 1;
        Some(AddressPlace {
            table: table.clone(),
            address,
        })
    }
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        let mut open = self
            .table
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// Serves `router` on `listener`, over TLS with `tls`, within `limits`, until the task is
/// dropped.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_address = Arc::new(PerAddress::default());
    let warnings = RepeatedWarnings::default();
    let mut flush = tokio::time::interval(RepeatedWarnings::INTERVAL);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = flush.tick() => {
                warnings.flush();
                continue;
            }
        };
        let (socket, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, most likely: wait for some to be given back.
                warnings.warn(
                    "accept",
                    format_args!("web UI: can't accept a connection: {error}"),
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let place = open.clone().try_acquire_owned().ok().and_then(|place| {
            PerAddress::take(&per_address, peer.ip(), limits.max_per_address.max(1))
                .map(|address| (place, address))
        });
        let Some(place) = place else {
            warnings.warn(
                "turned away",
                format_args!(
                    "web UI: {} turned away: {} connections are open, at most {} from one address",
                    peer.ip(),
                    limits
                        .max_connections
                        .saturating_sub(open.available_permits()),
                    limits.max_per_address
                ),
            );
            if tls.is_none() {
                // A fresh connection's send buffer is empty: the answer fits, or the peer is gone.
                let _ = socket.try_write(TURNED_AWAY);
            }
            continue;
        };
        let _ = socket.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            connection(socket, peer, router, tls, &limits).await;
            drop(place);
        });
    }
}

async fn connection(
    socket: TcpStream,
    peer: SocketAddr,
    router: Router,
    tls: Option<TlsAcceptor>,
    limits: &Limits,
) {
    let activity = Arc::new(Activity::new());
    let socket = Watched {
        inner: socket,
        activity: activity.clone(),
    };
    match tls {
        None => http(socket, peer, router, activity, limits).await,
        Some(acceptor) => {
            match tokio::time::timeout(crate::https::HANDSHAKE_TIMEOUT, acceptor.accept(socket))
                .await
            {
                Ok(Ok(stream)) => http(stream, peer, router, activity, limits).await,
                Ok(Err(error)) => {
                    tracing::info!("web UI: TLS handshake failed with {}: {error}", peer.ip())
                }
                Err(_) => tracing::info!("web UI: TLS handshake timed out with {}", peer.ip()),
            }
        }
    }
}

/// Serves HTTP/1.1 on one connection until it ends, its head times out or it stalls.
async fn http<S>(
    stream: S,
    peer: SocketAddr,
    router: Router,
    activity: Arc<Activity>,
    limits: &Limits,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        // What the log in and the action log read as the client's address.
        request.extensions_mut().insert(ConnectInfo(peer));
        let mut router = router.clone();
        async move {
            Ok::<_, Infallible>(
                router
                    .call(request)
                    .await
                    .unwrap_or_else(|never| match never {}),
            )
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let check = (limits.stall_timeout / 4).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            outcome = &mut served => {
                if let Err(error) = outcome {
                    tracing::debug!("web UI: connection with {} ended: {error}", peer.ip());
                }
                return;
            }
            _ = tokio::time::sleep(check) => {
                if activity.idle() >= limits.stall_timeout {
                    tracing::info!(
                        "web UI: closed a connection with {} that moved nothing for {:.0?}",
                        peer.ip(),
                        limits.stall_timeout
                    );
                    return;
                }
            }
        }
    }
}

/// When a connection last moved a byte.
struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn moved(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last.store(now, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last.load(Ordering::Relaxed)))
    }
}

/// A socket that notes each read or write that moved bytes.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.moved();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.moved();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
