//! `openprof serve`: accepts agents and control clients (docs/protocol.md), checks every frame,
//! hands data to one writer thread that stores it in group commits and acknowledges what is
//! durable, estimates each agent's clock from heartbeats, and forwards commands to live agents.
//!
//! Resources are bounded: connections (all, and those not authenticated yet), the bytes of
//! frames read and not yet stored, and repeated log lines.
//!
//! (About 1,000 lines: the connection's state machine, the frame budget and the writer thread
//! share their types and invariants, and read best in one file.)

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openprof_format::handshake::{CommandSigner, ServerHandshake};
use openprof_format::wire::{
    self, AgentReply, ControlRequest, ControlResponse, FrameKind, Hello, Loss, Refusal, Reply,
    Role, Welcome, WireError, HEADER_LEN, MAX_HELLO, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};
use uuid::Uuid;

use crate::clock::ClockEstimator;
use crate::repeated_warnings::RepeatedWarnings;
use crate::scan::scan_fragment;
use crate::store::{AgentInfo, Received, Store};

/// How the collector runs.
#[derive(Clone)]
pub struct ServerConfig {
    /// The agent credential: agents (and replay clients) prove they know it, and so does the
    /// collector to them.
    pub agent_token: String,
    /// The control credential: `openprof control` proves it; without one, control clients are
    /// refused.
    pub control_token: Option<String>,
    /// TLS, when the collector has a certificate.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// How often agents are pinged for a clock sample.
    pub heartbeat: Duration,
    /// How long a command may take an agent (a heap dump of a large heap takes a while).
    pub command_timeout: Duration,
    /// How long a peer has to say hello.
    pub hello_timeout: Duration,
    /// Connections that have not authenticated yet, at most; more are turned away.
    pub max_unauthenticated: usize,
    /// Connections at most, authenticated or not; more are turned away.
    pub max_connections: usize,
    /// Bytes of frames read from agents and not yet stored, at most (over all connections):
    /// past it, connections are not read until the writer catches up.
    pub queue_bytes: usize,
}

/// Unauthenticated connections hold no more than a hello's worth of memory each, but each
/// holds a descriptor and a task for up to the hello timeout.
pub const DEFAULT_MAX_UNAUTHENTICATED: usize = 64;
/// Below the usual descriptor limit (1024), leaving room for the store's files.
pub const DEFAULT_MAX_CONNECTIONS: usize = 900;
/// Eight of the largest frames (16 MiB); a group commit takes up to 32 MiB.
pub const DEFAULT_QUEUE_BYTES: usize = 128 << 20;

impl ServerConfig {
    pub fn new(agent_token: impl Into<String>) -> ServerConfig {
        ServerConfig {
            agent_token: agent_token.into(),
            control_token: None,
            tls: None,
            heartbeat: Duration::from_secs(1),
            command_timeout: Duration::from_secs(120),
            hello_timeout: Duration::from_secs(10),
            max_unauthenticated: DEFAULT_MAX_UNAUTHENTICATED,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            queue_bytes: DEFAULT_QUEUE_BYTES,
        }
    }
}

/// Data on its way to the writer thread, with the way back to its connection.
struct Submission {
    frame: Received,
    link: ConnectionLink,
}

/// A connection as the writer sees it.
struct ConnectionLink {
    acks: mpsc::UnboundedSender<Stored>,
    /// Set by the writer when an append of this connection's data failed: its later frames
    /// are dropped unstored, since storing them would leave a gap behind an acknowledgement.
    refused: Arc<AtomicBool>,
    /// The frame's share of the queue's byte budget, given back once it is stored (or not).
    _budget: OwnedSemaphorePermit,
}

/// What the writer tells a connection.
enum Stored {
    /// Everything of the connection up to this sequence is durable.
    UpTo(u64),
    /// An append holding the connection's data failed (why): the connection must close so that
    /// its agent resends from what the store really has.
    Failed(String),
}

tokio::task_local! {
    /// The connection's place among those not authenticated yet, until it authenticates.
    static UNAUTHENTICATED: RefCell<Option<OwnedSemaphorePermit>>;
}

/// Marks the running connection as authenticated: it no longer counts against
/// [`ServerConfig::max_unauthenticated`].
fn authenticated() {
    let _ = UNAUTHENTICATED.try_with(|place| place.borrow_mut().take());
}

/// A connected agent, as control requests reach it.
struct LiveAgent {
    /// Frames to write to the agent.
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    /// Commands sent and not yet answered, by serial.
    pending: Mutex<HashMap<u32, oneshot::Sender<Reply>>>,
    /// Which connection this is, so that a replaced connection does not unregister its successor.
    connection: u64,
    /// Seals each command with the session's key, so that the agent can tell it came from us.
    signer: CommandSigner,
}

#[derive(Default)]
struct Registry {
    agents: Mutex<HashMap<Uuid, Arc<LiveAgent>>>,
    next_serial: AtomicU32,
    next_connection: std::sync::atomic::AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as u64)
        .unwrap_or(0)
}

/// A running collector.
pub struct Server {
    pub local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
    registry: Arc<Registry>,
}

impl Server {
    /// Binds and starts serving; the returned server runs until [`Server::shutdown`].
    pub async fn start(
        listen: SocketAddr,
        config: ServerConfig,
        store: Arc<dyn Store>,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let (submissions, received) = mpsc::channel::<Submission>(4096);
        let writer_store = store.clone();
        let warnings = Arc::new(RepeatedWarnings::default());
        let writer_warnings = warnings.clone();
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(writer_store, received, &writer_warnings))?;
        let (shutdown, shutdown_seen) = watch::channel(false);
        let registry = Arc::new(Registry::default());
        let trace_owners = match store.catalog() {
            Ok(catalog) => catalog
                .traces
                .iter()
                .map(|trace| (trace.trace, trace.agent))
                .collect(),
            Err(error) => {
                return Err(std::io::Error::other(format!(
                    "reading the store's traces: {error}"
                )))
            }
        };
        let shared = Arc::new(Shared {
            trace_owners: Mutex::new(trace_owners),
            connections: Arc::new(Semaphore::new(config.max_connections.max(1))),
            unauthenticated: Arc::new(Semaphore::new(config.max_unauthenticated.max(1))),
            // A frame as large as the wire allows must fit, or its connection would wait forever.
            queue_budget: Arc::new(Semaphore::new(queue_capacity(&config))),
            config,
            store,
            submissions,
            registry: registry.clone(),
            warnings,
        });
        let accept = tokio::spawn(accept_loop(listener, shared, shutdown_seen));
        info!("collecting on {local_addr}");
        Ok(Server {
            local_addr,
            shutdown,
            accept,
            registry,
        })
    }

    /// The agents connected now.
    pub fn connected_agents(&self) -> Vec<Uuid> {
        lock(&self.registry.agents).keys().copied().collect()
    }

    /// What tells the agents connected at any moment, for others to keep (the web UI).
    pub fn connected_agents_watch(&self) -> Arc<dyn Fn() -> Vec<Uuid> + Send + Sync> {
        let registry = self.registry.clone();
        Arc::new(move || lock(&registry.agents).keys().copied().collect())
    }

    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.accept.await;
    }
}

struct Shared {
    config: ServerConfig,
    store: Arc<dyn Store>,
    submissions: mpsc::Sender<Submission>,
    registry: Arc<Registry>,
    connections: Arc<Semaphore>,
    unauthenticated: Arc<Semaphore>,
    queue_budget: Arc<Semaphore>,
    warnings: Arc<RepeatedWarnings>,
    /// Which agent each trace belongs to: the one whose connection carried its first element.
    /// Another agent's elements for it are refused, a second traceEnd included.
    trace_owners: Mutex<HashMap<Uuid, Uuid>>,
}

fn queue_capacity(config: &ServerConfig) -> usize {
    config.queue_bytes.max(wire::MAX_PAYLOAD as usize)
}

/// Tells a connection the collector will not serve it why, and closes it; never waits.
fn turn_away(socket: TcpStream, reason: &str) {
    // A fresh connection's send buffer is empty: the refusal fits, or the peer is gone.
    let refusal = Refusal::transient(reason);
    let _ = socket.try_write(&frame(FrameKind::Refused, &refusal.encode()));
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut flush = tokio::time::interval(RepeatedWarnings::INTERVAL);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let Ok(place) = shared.connections.clone().try_acquire_owned() else {
                        let reason = format!(
                            "turned away: {} connections are open (--max-connections)",
                            shared.config.max_connections
                        );
                        shared.warnings.warn("connections", format_args!("{peer}: {reason}"));
                        turn_away(socket, &reason);
                        continue;
                    };
                    let Ok(unauthenticated) = shared.unauthenticated.clone().try_acquire_owned()
                    else {
                        let reason = format!(
                            "turned away: {} connections have not authenticated yet \
                             (--max-unauthenticated)",
                            shared.config.max_unauthenticated
                        );
                        shared.warnings.warn("unauthenticated", format_args!("{peer}: {reason}"));
                        turn_away(socket, &reason);
                        continue;
                    };
                    let shared = shared.clone();
                    let shutdown = shutdown.clone();
                    let served = async move {
                        let _ = socket.set_nodelay(true);
                        match connection(socket, peer, shared.clone(), shutdown).await {
                            Ok(()) => {}
                            // Every agent's connection fails alike while the store does.
                            Err(reason @ (Fault::Store(_) | Fault::Unstored(_))) => shared
                                .warnings
                                .warn("store", format_args!("{peer}: connection closed: {reason}")),
                            // A fault may quote what the peer sent: escaped, never raw.
                            Err(reason) => warn!(
                                "{peer}: connection closed: {}",
                                wire::printable(&reason.to_string())
                            ),
                        }
                        drop(place);
                    };
                    tokio::spawn(UNAUTHENTICATED.scope(RefCell::new(Some(unauthenticated)), served));
                }
                Err(error) => {
                    // EMFILE and the like: they last until connections close.
                    shared.warnings.warn("accept", format_args!("accepting a connection: {error}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = flush.tick() => shared.warnings.flush(),
            _ = shutdown.changed() => return,
        }
    }
}

/// Stores submissions in group commits: whatever arrived while the previous commit ran goes
/// into the next. Acknowledges each connection's highest stored sequence after each commit.
///
/// A failed commit is never skipped over: the connections whose frames it held are told to
/// close, and their frames queued behind it are dropped unstored. Their agents reconnect, learn
/// from the store what it really holds (`resume_after`) and resend the rest; acknowledging a
/// later frame instead would make them drop the lost ones.
fn write_loop(
    store: Arc<dyn Store>,
    mut received: mpsc::Receiver<Submission>,
    warnings: &RepeatedWarnings,
) {
    const MAX_BATCH_BYTES: usize = 32 << 20;
    while let Some(first) = received.blocking_recv() {
        let mut bytes = first.frame.body.len();
        let mut batch = vec![first];
        while bytes < MAX_BATCH_BYTES {
            match received.try_recv() {
                Ok(more) => {
                    bytes += more.frame.body.len();
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let (frames, links): (Vec<Received>, Vec<ConnectionLink>) = batch
            .into_iter()
            .filter(|submission| !submission.link.refused.load(Ordering::Relaxed))
            .map(|submission| (submission.frame, submission.link))
            .unzip();
        if frames.is_empty() {
            continue;
        }
        match store.append(&frames) {
            Ok(()) => {
                // The highest sequence of each connection in this batch.
                let mut highest: HashMap<*const AtomicBool, (u64, &ConnectionLink)> =
                    HashMap::new();
                for (frame, link) in frames.iter().zip(&links) {
                    let entry = highest
                        .entry(Arc::as_ptr(&link.refused))
                        .or_insert((0, link));
                    if frame.sequence >= entry.0 {
                        *entry = (frame.sequence, link);
                    }
                }
                for (sequence, link) in highest.into_values() {
                    let _ = link.acks.send(Stored::UpTo(sequence));
                }
            }
            Err(error) => {
                let mut agents: Vec<Uuid> = Vec::new();
                for (frame, link) in frames.iter().zip(&links) {
                    // Told once, with its first frame of the batch: its lowest sequence.
                    if !link.refused.swap(true, Ordering::Relaxed) {
                        let _ = link.acks.send(Stored::Failed(format!(
                            "{error}; nothing from sequence {} on was stored, send it again",
                            frame.sequence
                        )));
                    }
                    if !agents.contains(&frame.agent) {
                        agents.push(frame.agent);
                    }
                }
                warnings.warn(
                    "append",
                    format_args!(
                        "storing {} frames of {} agents failed: {error}; their connections \
                         close and they resend from what is stored",
                        frames.len(),
                        agents.len()
                    ),
                );
            }
        }
    }
}

/// What went wrong with a peer; logged, and sent to the peer when it can still be told.
#[derive(Debug, thiserror::Error)]
enum Fault {
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Protocol(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// An append holding the connection's data failed.
    #[error("{0}")]
    Unstored(String),
}

fn protocol(message: impl Into<String>) -> Fault {
    Fault::Protocol(message.into())
}

/// Reads a frame header; `None` when the peer closed the connection between frames.
async fn read_header<R: AsyncRead + Unpin>(
    input: &mut R,
) -> Result<Option<(FrameKind, u32)>, WireError> {
    let mut header = [0u8; HEADER_LEN];
    match input.read_exact(&mut header).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    wire::parse_header(header).map(Some)
}

async fn read_frame<R: AsyncRead + Unpin>(input: &mut R) -> Result<Option<wire::WireFrame>, Fault> {
    let Some((kind, length)) = read_header(input).await? else {
        return Ok(None);
    };
    let mut payload = vec![0u8; length as usize];
    input.read_exact(&mut payload).await?;
    Ok(Some(wire::WireFrame { kind, payload }))
}

/// A frame with its share of the queue's byte budget.
type Budgeted = (wire::WireFrame, OwnedSemaphorePermit);

/// Reads a frame as [`read_frame`] does, but its payload only once the byte budget has room
/// for it: a writer that falls behind slows the agents down instead of filling memory.
async fn read_budgeted_frame<R: AsyncRead + Unpin>(
    input: &mut R,
    budget: &Arc<Semaphore>,
    capacity: usize,
) -> Result<Option<Budgeted>, Fault> {
    let Some((kind, length)) = read_header(input).await? else {
        return Ok(None);
    };
    // At least one unit, so that empty frames are bounded in number too.
    let units = (length as usize).clamp(1, capacity) as u32;
    let share = budget
        .clone()
        .acquire_many_owned(units)
        .await
        .map_err(|_| protocol("the collector is stopping"))?;
    let mut payload = vec![0u8; length as usize];
    input.read_exact(&mut payload).await?;
    Ok(Some((wire::WireFrame { kind, payload }, share)))
}

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    wire::encode_frame(kind, payload, &mut bytes);
    bytes
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection that has proven its role's credential.
struct Authenticated {
    hello: Hello,
    signer: CommandSigner,
}

/// Why a connection is refused before or during authentication: sent to the peer in a Refused
/// frame (when it can still be told), and logged.
struct Refuse(Refusal);

impl From<WireError> for Refuse {
    fn from(error: WireError) -> Refuse {
        Refuse(Refusal::final_(error.to_string()))
    }
}

impl From<std::io::Error> for Refuse {
    fn from(error: std::io::Error) -> Refuse {
        Refuse(Refusal::transient(format!("connection: {error}")))
    }
}

async fn connection(
    socket: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Fault> {
    let mut stream: Box<dyn Stream> = match &shared.config.tls {
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
            let handshake =
                tokio::time::timeout(shared.config.hello_timeout, acceptor.accept(socket)).await;
            match handshake {
                Ok(Ok(stream)) => Box::new(stream),
                Ok(Err(error)) => return Err(protocol(format!("TLS handshake failed: {error}"))),
                Err(_) => return Err(protocol("TLS handshake timed out")),
            }
        }
        None => Box::new(socket),
    };
    let outcome = tokio::time::timeout(
        shared.config.hello_timeout,
        authenticate(&mut stream, &shared),
    )
    .await
    .unwrap_or_else(|_| {
        Err(Refuse(Refusal::transient(
            "the handshake did not finish within the time allowed",
        )))
    });
    let Authenticated { hello, signer } = match outcome {
        Ok(done) => {
            // No longer counted against the cap on unauthenticated connections.
            authenticated();
            done
        }
        Err(Refuse(refusal)) => {
            let refused = frame(FrameKind::Refused, &refusal.encode());
            let _ = stream.write_all(&refused).await;
            let _ = stream.shutdown().await;
            return Err(protocol(format!("refused: {}", refusal.reason)));
        }
    };
    match hello.role {
        Role::Agent => agent_connection(stream, peer, hello, signer, shared, shutdown).await,
        Role::Control => control_connection(stream, peer, shared).await,
    }
}

/// Reads the hello (at most [`MAX_HELLO`] bytes: nothing larger is buffered before the peer
/// is authenticated), proves the role's credential to the peer, and checks the peer's proof
/// and, for an agent, that its id is bound to its identity key.
async fn authenticate(
    stream: &mut Box<dyn Stream>,
    shared: &Shared,
) -> Result<Authenticated, Refuse> {
    let hello_frame = read_small_frame(stream)
        .await?
        .ok_or_else(|| Refuse(Refusal::transient("closed before saying hello")))?;
    if hello_frame.kind != FrameKind::Hello {
        return Err(Refuse(Refusal::final_(format!(
            "the first frame must be a hello, not {:?}",
            hello_frame.kind
        ))));
    }
    let handshake = ServerHandshake::start(&hello_frame.payload)
        .map_err(|reason| Refuse(Refusal::final_(reason)))?;
    let credential = match handshake.hello().role {
        Role::Agent => shared.config.agent_token.clone(),
        Role::Control => shared.config.control_token.clone().ok_or_else(|| {
            Refuse(Refusal::final_(
                "this collector takes no control clients: it was started without a control credential (--control-token-file)",
            ))
        })?,
    };
    let challenge = frame(
        FrameKind::Challenge,
        &handshake.challenge(credential.as_bytes()),
    );
    stream.write_all(&challenge).await?;
    let proof = read_small_frame(stream)
        .await?
        .ok_or_else(|| Refuse(Refusal::transient("closed during the handshake")))?;
    if proof.kind != FrameKind::Proof {
        return Err(Refuse(Refusal::final_(format!(
            "a proof must answer the challenge, not a {:?} frame",
            proof.kind
        ))));
    }
    let (signer, identity) = handshake
        .finish(credential.as_bytes(), &proof.payload)
        .map_err(|reason| Refuse(Refusal::final_(reason)))?;
    let hello = handshake.hello().clone();
    if let (Some(agent), Some(identity)) = (hello.agent_id, identity) {
        let store = shared.store.clone();
        let bound = tokio::task::spawn_blocking(move || store.bind_identity(agent, &identity))
            .await
            .map_err(|error| Refuse(Refusal::transient(format!("store task failed: {error}"))))?
            .map_err(|error| Refuse(Refusal::transient(format!("store: {error}"))))?;
        if !bound {
            return Err(Refuse(Refusal::final_(format!(
                "agent id {agent} belongs to another agent (its identity key differs): an agent id can't be taken over"
            ))));
        }
    }
    Ok(Authenticated { hello, signer })
}

/// Reads a frame of the handshake: its length is checked against [`MAX_HELLO`] before any of
/// its payload is read.
async fn read_small_frame(stream: &mut Box<dyn Stream>) -> Result<Option<wire::WireFrame>, Refuse> {
    let Some((kind, length)) = read_header(stream).await? else {
        return Ok(None);
    };
    if length > MAX_HELLO {
        return Err(Refuse(Refusal::final_(format!(
            "a {kind:?} frame of {length} bytes is longer than the {MAX_HELLO} bytes allowed before authentication"
        ))));
    }
    let mut payload = vec![0u8; length as usize];
    stream.read_exact(&mut payload).await?;
    Ok(Some(wire::WireFrame { kind, payload }))
}

async fn agent_connection(
    stream: Box<dyn Stream>,
    peer: SocketAddr,
    hello: Hello,
    signer: CommandSigner,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Fault> {
    let agent = hello.agent_id.expect("checked by the handshake");
    let info = AgentInfo {
        agent,
        hostname: hello.hostname.clone(),
        pid: hello.pid,
        format: hello.format.clone(),
        options: hello.options.clone(),
    };
    let store = shared.store.clone();
    let resume_after = tokio::task::spawn_blocking(move || store.open_agent(&info))
        .await
        .map_err(|error| protocol(format!("store task failed: {error}")))??;
    info!("{peer}: {hello} connected; resuming after sequence {resume_after}");

    let (input, mut output) = tokio::io::split(stream);
    // Frames are read by a task of their own: a read cut off by select! would lose the bytes
    // of a frame half read.
    let (frames_in, mut incoming_frames) = mpsc::channel::<Result<Option<Budgeted>, Fault>>(16);
    let budget = shared.queue_budget.clone();
    let capacity = queue_capacity(&shared.config);
    let reader = tokio::spawn(async move {
        let mut input = input;
        loop {
            let frame = read_budgeted_frame(&mut input, &budget, capacity).await;
            let last = !matches!(frame, Ok(Some(_)));
            if frames_in.send(frame).await.is_err() || last {
                return;
            }
        }
    });
    let (outgoing, mut to_write) = mpsc::unbounded_channel::<Vec<u8>>();
    let welcome = Welcome {
        version: PROTOCOL_VERSION,
        resume_after,
    };
    outgoing
        .send(frame(FrameKind::Welcome, &wire::to_json(&welcome)))
        .expect("the writer is not started yet, the queue is open");
    let writer = tokio::spawn(async move {
        while let Some(bytes) = to_write.recv().await {
            if output.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = output.shutdown().await;
    });

    let connection = shared
        .registry
        .next_connection
        .fetch_add(1, Ordering::Relaxed);
    let live = Arc::new(LiveAgent {
        outgoing: outgoing.clone(),
        pending: Mutex::new(HashMap::new()),
        connection,
        signer,
    });
    lock(&shared.registry.agents).insert(agent, live.clone());

    let (acks, mut acked) = mpsc::unbounded_channel::<Stored>();
    let refused = Arc::new(AtomicBool::new(false));
    let mut clock = ClockEstimator::new();
    let mut pings: HashMap<u64, u64> = HashMap::new();
    let mut ping_number = 0u64;
    let mut heartbeat = tokio::time::interval(shared.config.heartbeat);
    let mut last_heard = tokio::time::Instant::now();
    let mut last_sequence = resume_after;
    let result: Result<(), Fault> = loop {
        tokio::select! {
            incoming = incoming_frames.recv() => {
                let (frame, budget) = match incoming {
                    Some(Ok(Some(budgeted))) => budgeted,
                    Some(Ok(None)) | None => break Ok(()),
                    Some(Err(fault)) => break Err(fault),
                };
                last_heard = tokio::time::Instant::now();
                match frame.kind {
                    kind if kind.is_data() => {
                        let (sequence, body_length) =
                            match wire::split_sequence(kind, &frame.payload) {
                                Ok((sequence, body)) => (sequence, body.len()),
                                Err(error) => break Err(error.into()),
                            };
                        if sequence <= last_sequence {
                            if sequence <= resume_after {
                                // Already stored before this connection: acknowledge again.
                                let _ = acks.send(Stored::UpTo(sequence));
                                continue;
                            }
                            break Err(protocol(format!(
                                "sequence {sequence} after {last_sequence}: sequences must increase"
                            )));
                        }
                        last_sequence = sequence;
                        // The body in the payload's own buffer: a frame is in memory once.
                        let mut body = frame.payload;
                        body.drain(..body.len() - body_length);
                        // Checking a fragment is CPU work proportional to its size: a large
                        // frame is checked off the async workers, so that it does not stall
                        // other connections; a small one (well under a millisecond of work) in
                        // place, where handing it to another thread would cost more.
                        let checked = if body.len() > INLINE_CHECK_BYTES {
                            tokio::task::spawn_blocking(move || {
                                received_frame(agent, kind, sequence, body)
                            })
                            .await
                        } else {
                            Ok(received_frame(agent, kind, sequence, body))
                        };
                        let received = match checked {
                            Ok(Ok(received)) => received,
                            Ok(Err(fault)) => break Err(fault),
                            Err(error) => {
                                break Err(protocol(format!("checking frame {sequence} failed: {error}")))
                            }
                        };
                        if let Err(fault) = own_traces(&shared, &received) {
                            break Err(fault);
                        }
                        let submission = Submission {
                            frame: received,
                            link: ConnectionLink {
                                acks: acks.clone(),
                                refused: refused.clone(),
                                _budget: budget,
                            },
                        };
                        if shared.submissions.send(submission).await.is_err() {
                            break Err(protocol("the store writer has stopped"));
                        }
                    }
                    FrameKind::Pong => match wire::decode_pair(FrameKind::Pong, &frame.payload) {
                        Ok((number, agent_ns)) => {
                            let Some(sent) = pings.remove(&number) else {
                                break Err(protocol(format!("pong {number} answers no ping")));
                            };
                            if clock.sample(sent, agent_ns, wire_now()) {
                                let store = shared.store.clone();
                                let estimate = clock.estimate();
                                tokio::task::spawn_blocking(move || {
                                    if let Some(estimate) = estimate {
                                        if let Err(error) = store.record_clock(agent, estimate) {
                                            warn!("recording the clock of {agent}: {error}");
                                        }
                                    }
                                });
                            }
                        }
                        Err(error) => break Err(error.into()),
                    },
                    FrameKind::Reply => match Reply::decode(&frame.payload) {
                        Ok(reply) => {
                            if let Some(waiting) = lock(&live.pending).remove(&reply.serial) {
                                let _ = waiting.send(reply);
                            } else {
                                warn!("{peer}: reply {} answers no command", reply.serial);
                            }
                        }
                        Err(error) => break Err(error.into()),
                    },
                    other => break Err(protocol(format!("an agent may not send {other:?} frames"))),
                }
            }
            Some(stored) = acked.recv() => match stored {
                Stored::UpTo(sequence) => {
                    let _ = outgoing.send(frame(FrameKind::Ack, &sequence.to_be_bytes()));
                }
                Stored::Failed(reason) => break Err(Fault::Unstored(reason)),
            },
            _ = heartbeat.tick() => {
                if last_heard.elapsed() > shared.config.heartbeat * 10 + Duration::from_secs(5) {
                    break Err(protocol("the agent stopped answering heartbeats"));
                }
                ping_number += 1;
                let sent = wire_now();
                pings.insert(ping_number, sent);
                // Unanswered pings are forgotten after a while.
                pings.retain(|&number, _| number + 64 > ping_number);
                let _ = outgoing.send(frame(FrameKind::Ping, &wire::encode_pair(ping_number, sent)));
            }
            _ = shutdown.changed() => break Ok(()),
        }
    };
    // Acknowledge what was stored before the connection closes, as far as it still can be.
    // Nothing after a failed append: the agent must resend from what the store holds.
    while let Ok(Stored::UpTo(sequence)) = acked.try_recv() {
        let _ = outgoing.send(frame(FrameKind::Ack, &sequence.to_be_bytes()));
    }
    {
        let mut agents = lock(&shared.registry.agents);
        if agents
            .get(&agent)
            .is_some_and(|current| current.connection == connection)
        {
            agents.remove(&agent);
        }
    }
    if let Err(fault) = &result {
        let refusal = Refusal::transient(fault.to_string());
        let _ = outgoing.send(frame(FrameKind::Refused, &refusal.encode()));
    }
    drop(outgoing);
    drop(live);
    reader.abort();
    let _ = writer.await;
    info!("{peer}: agent {agent} disconnected");
    result
}

fn wire_now() -> u64 {
    now_ns()
}

/// Refuses a frame with elements of a trace another agent started (whoever holds an agent
/// credential and knows a trace's id could otherwise add to it, even end it a second time);
/// the traces it starts become its own.
fn own_traces(shared: &Shared, received: &Received) -> Result<(), Fault> {
    let Some(summary) = &received.summary else {
        return Ok(());
    };
    let mut owners = lock(&shared.trace_owners);
    for trace in summary.elements.iter().filter_map(|element| element.trace) {
        let owner = *owners.entry(trace).or_insert(received.agent);
        if owner != received.agent {
            return Err(protocol(format!(
                "fragment {}: trace {trace} belongs to agent {owner}: an agent adds elements \
                 only to its own traces",
                received.sequence
            )));
        }
    }
    Ok(())
}

/// Frames up to this size are checked on the async worker that read them.
const INLINE_CHECK_BYTES: usize = 256 << 10;

/// Checks a data frame's body and makes it ready for the store.
fn received_frame(
    agent: Uuid,
    kind: FrameKind,
    sequence: u64,
    body: Vec<u8>,
) -> Result<Received, Fault> {
    let mut received = Received {
        agent,
        kind,
        sequence,
        body,
        summary: None,
        loss: None,
        received_ns: now_ns(),
    };
    match kind {
        FrameKind::Fragment => {
            let summary = scan_fragment(&received.body).map_err(|problem| {
                protocol(format!("fragment {sequence} is malformed: {problem}"))
            })?;
            received.summary = Some(summary);
        }
        FrameKind::Loss => {
            let loss: Loss = wire::parse_json(kind, &received.body)?;
            warn!(
                "agent {agent} dropped {} frames ({} bytes) while it could not send",
                loss.frames, loss.bytes
            );
            received.loss = Some(loss);
        }
        FrameKind::Hprof | FrameKind::Goodbye => {}
        other => return Err(protocol(format!("{other:?} is not a data frame"))),
    }
    Ok(received)
}

async fn control_connection(
    mut stream: Box<dyn Stream>,
    peer: SocketAddr,
    shared: Arc<Shared>,
) -> Result<(), Fault> {
    let welcome = Welcome {
        version: PROTOCOL_VERSION,
        resume_after: 0,
    };
    stream
        .write_all(&frame(FrameKind::Welcome, &wire::to_json(&welcome)))
        .await?;
    while let Some(request) = read_frame(&mut stream).await? {
        if request.kind != FrameKind::Command {
            return Err(protocol(format!(
                "a control client may send only commands, not {:?}",
                request.kind
            )));
        }
        let response =
            match wire::parse_json::<ControlRequest>(FrameKind::Command, &request.payload) {
                Ok(request) => {
                    info!(
                        "{peer}: control request {:?} for {:?}",
                        request.command, request.agent
                    );
                    run_control(&shared, request).await
                }
                Err(error) => ControlResponse {
                    replies: vec![],
                    error: Some(error.to_string()),
                },
            };
        stream
            .write_all(&frame(FrameKind::Reply, &wire::to_json(&response)))
            .await?;
    }
    Ok(())
}

/// The most JSON text one of `agents` replies may take in a control answer: half a frame
/// shared out, at least 1 KiB and at most 64 KiB (far more than any command's reply).
fn reply_share(agents: usize) -> usize {
    (wire::MAX_PAYLOAD as usize / 2 / agents.max(1)).clamp(1 << 10, 64 << 10)
}

/// `message`, cut so that it takes at most `max_json` bytes once JSON-escaped (a control
/// character takes six), with what was cut said at its end.
fn bounded_reply(message: String, max_json: usize) -> String {
    let escaped_len = |c: char| match c {
        '"' | '\\' => 2,
        c if (c as u32) < 0x20 || c == '\u{7f}' => 6,
        c => c.len_utf8(),
    };
    let mut used = 0;
    let mut end = None;
    for (at, c) in message.char_indices() {
        used += escaped_len(c);
        if used > max_json.saturating_sub(80) {
            end = Some(at);
            break;
        }
    }
    match end {
        None => message,
        Some(at) => format!(
            "{}... (the agent's reply was cut here: {} bytes more)",
            &message[..at],
            message.len() - at
        ),
    }
}

/// Sends a command to its agents and gathers their replies.
async fn run_control(shared: &Shared, request: ControlRequest) -> ControlResponse {
    let targets: Vec<(Uuid, Arc<LiveAgent>)> = {
        let agents = lock(&shared.registry.agents);
        match request.agent {
            Some(agent) => match agents.get(&agent) {
                Some(live) => vec![(agent, live.clone())],
                None => {
                    return ControlResponse {
                        replies: vec![],
                        error: Some(format!("agent {agent} is not connected")),
                    }
                }
            },
            None => agents
                .iter()
                .map(|(agent, live)| (*agent, live.clone()))
                .collect(),
        }
    };
    if targets.is_empty() {
        return ControlResponse {
            replies: vec![],
            error: Some("no agent is connected".into()),
        };
    }
    let mut waiting = Vec::new();
    for (agent, live) in targets {
        let serial = shared.registry.next_serial.fetch_add(1, Ordering::Relaxed) + 1;
        let (reply_to, reply) = oneshot::channel();
        lock(&live.pending).insert(serial, reply_to);
        let record = live.signer.seal(&request.command.encode(serial));
        let sent = live
            .outgoing
            .send(frame(FrameKind::Command, &record))
            .is_ok();
        waiting.push((agent, sent, reply));
    }
    // Every reply fits its share of half a frame, as JSON: one agent's huge reply (a bug, or
    // an agent that means harm) is cut, and never makes the whole answer too large to send.
    let share = reply_share(waiting.len());
    let mut replies = Vec::new();
    for (agent, sent, reply) in waiting {
        let outcome = if !sent {
            Err("the agent disconnected before the command was sent".to_string())
        } else {
            match tokio::time::timeout(shared.config.command_timeout, reply).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(_)) => Err("the agent disconnected before replying".to_string()),
                Err(_) => Err(format!(
                    "no reply within {} s",
                    shared.config.command_timeout.as_secs()
                )),
            }
        };
        replies.push(match outcome {
            Ok(reply) => AgentReply {
                agent,
                ok: reply.ok,
                message: bounded_reply(reply.message, share),
            },
            Err(message) => AgentReply {
                agent,
                ok: false,
                message,
            },
        });
    }
    ControlResponse {
        replies,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_reply_is_cut_to_its_share_and_the_answer_fits_a_frame() {
        // 3 MB of control bytes: 18 MB of JSON once escaped, past a frame.
        let huge = "\u{1}".repeat(3 << 20);
        let share = reply_share(2);
        assert_eq!(share, 64 << 10);
        let cut = bounded_reply(huge, share);
        assert!(cut.ends_with("bytes more)"), "{}", &cut[cut.len() - 80..]);
        let json = serde_json::to_string(&cut).unwrap();
        assert!(json.len() <= share, "{} > {share}", json.len());
        // A reply within its share is kept whole, multi-byte characters and all.
        let fine = "ok: stack depth 2 — ünïcode".to_string();
        assert_eq!(bounded_reply(fine.clone(), share), fine);
        // Up to 8,192 agents, every share together fits in half a frame.
        for agents in [1, 10, 900, 8192] {
            assert!(reply_share(agents) * agents <= wire::MAX_PAYLOAD as usize / 2);
        }
    }
}
