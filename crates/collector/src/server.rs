//! `openprof serve`: accepts agents and control clients (docs/protocol.md), checks every frame,
//! hands data to one writer thread that stores it in group commits and acknowledges what is
//! durable, estimates each agent's clock from heartbeats, and forwards commands to live agents.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openprof_format::wire::{
    self, AgentReply, Command, ControlRequest, ControlResponse, FrameKind, Hello, Loss, Reply,
    Role, Welcome, WireError, HEADER_LEN, PROTOCOL_VERSION,
};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};
use uuid::Uuid;

use crate::clock::ClockEstimator;
use crate::scan::scan_fragment;
use crate::store::{AgentInfo, Received, Store};

/// How the collector runs.
#[derive(Clone)]
pub struct ServerConfig {
    /// Needed by every connection; compared in constant time.
    pub token: String,
    /// TLS, when the collector has a certificate.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// How often agents are pinged for a clock sample.
    pub heartbeat: Duration,
    /// How long a command may take an agent (a heap dump of a large heap takes a while).
    pub command_timeout: Duration,
    /// How long a peer has to say hello.
    pub hello_timeout: Duration,
}

impl ServerConfig {
    pub fn new(token: impl Into<String>) -> ServerConfig {
        ServerConfig {
            token: token.into(),
            tls: None,
            heartbeat: Duration::from_secs(1),
            command_timeout: Duration::from_secs(120),
            hello_timeout: Duration::from_secs(10),
        }
    }
}

/// Data on its way to the writer thread, with the way back to its connection.
struct Submission {
    frame: Received,
    acks: mpsc::UnboundedSender<u64>,
}

/// A connected agent, as control requests reach it.
struct LiveAgent {
    /// Frames to write to the agent.
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    /// Commands sent and not yet answered, by serial.
    pending: Mutex<HashMap<u32, oneshot::Sender<Reply>>>,
    /// Which connection this is, so that a replaced connection does not unregister its successor.
    connection: u64,
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
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || write_loop(writer_store, received))?;
        let (shutdown, shutdown_seen) = watch::channel(false);
        let registry = Arc::new(Registry::default());
        let shared = Arc::new(Shared {
            config,
            store,
            submissions,
            registry: registry.clone(),
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
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let shared = shared.clone();
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        let _ = socket.set_nodelay(true);
                        if let Err(reason) = connection(socket, peer, shared, shutdown).await {
                            warn!("{peer}: connection closed: {reason}");
                        }
                    });
                }
                Err(error) => {
                    warn!("accepting a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Stores submissions in group commits: whatever arrived while the previous commit ran goes
/// into the next. Acknowledges each connection's highest stored sequence after each commit.
fn write_loop(store: Arc<dyn Store>, mut received: mpsc::Receiver<Submission>) {
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
        let (frames, acks): (Vec<Received>, Vec<_>) = batch
            .into_iter()
            .map(|submission| (submission.frame, submission.acks))
            .unzip();
        match store.append(&frames) {
            Ok(()) => {
                // The highest sequence per agent in this batch.
                let mut highest: HashMap<Uuid, (u64, &mpsc::UnboundedSender<u64>)> = HashMap::new();
                for (frame, acks) in frames.iter().zip(&acks) {
                    let entry = highest.entry(frame.agent).or_insert((0, acks));
                    if frame.sequence >= entry.0 {
                        *entry = (frame.sequence, acks);
                    }
                }
                for (sequence, acks) in highest.into_values() {
                    let _ = acks.send(sequence);
                }
            }
            // Not acknowledged: the agents keep the data and resend it when they reconnect.
            Err(error) => warn!("storing {} frames failed: {error}", frames.len()),
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
}

fn protocol(message: impl Into<String>) -> Fault {
    Fault::Protocol(message.into())
}

async fn read_frame<R: AsyncRead + Unpin>(input: &mut R) -> Result<Option<wire::Frame>, Fault> {
    let mut header = [0u8; HEADER_LEN];
    match input.read_exact(&mut header).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    let (kind, length) = wire::parse_header(header)?;
    let mut payload = vec![0u8; length as usize];
    input.read_exact(&mut payload).await?;
    Ok(Some(wire::Frame { kind, payload }))
}

fn frame(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    wire::encode_frame(kind, payload, &mut bytes);
    bytes
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

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
    let first = tokio::time::timeout(shared.config.hello_timeout, read_frame(&mut stream)).await;
    let hello_frame = match first {
        Err(_) => return Err(protocol("no hello within the time allowed")),
        Ok(result) => result?.ok_or_else(|| protocol("closed before saying hello"))?,
    };
    let hello = match check_hello(&hello_frame, &shared.config.token) {
        Ok(hello) => hello,
        Err(reason) => {
            let refusal = frame(FrameKind::Refused, reason.to_string().as_bytes());
            let _ = stream.write_all(&refusal).await;
            let _ = stream.shutdown().await;
            return Err(reason);
        }
    };
    match hello.role {
        Role::Agent => agent_connection(stream, peer, hello, shared, shutdown).await,
        Role::Control => control_connection(stream, peer, shared).await,
    }
}

fn check_hello(frame: &wire::Frame, token: &str) -> Result<Hello, Fault> {
    if frame.kind != FrameKind::Hello {
        return Err(protocol(format!(
            "the first frame must be a hello, not {:?}",
            frame.kind
        )));
    }
    let hello: Hello = wire::parse_json(FrameKind::Hello, &frame.payload)?;
    // Compare in constant time before anything else about the hello is acted on.
    let token_ok: bool = hello.token.as_bytes().ct_eq(token.as_bytes()).into();
    if !token_ok {
        return Err(protocol("wrong or missing token"));
    }
    if hello.version != PROTOCOL_VERSION {
        return Err(protocol(format!(
            "protocol version {} is not spoken here (this collector speaks {PROTOCOL_VERSION})",
            hello.version
        )));
    }
    if hello.role == Role::Agent && hello.agent_id.is_none() {
        return Err(protocol("an agent's hello must carry its agent_id"));
    }
    Ok(hello)
}

async fn agent_connection(
    stream: Box<dyn Stream>,
    peer: SocketAddr,
    hello: Hello,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Fault> {
    let agent = hello.agent_id.expect("checked in check_hello");
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
    let (frames_in, mut incoming_frames) = mpsc::channel::<Result<Option<wire::Frame>, Fault>>(16);
    let reader = tokio::spawn(async move {
        let mut input = input;
        loop {
            let frame = read_frame(&mut input).await;
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
    });
    lock(&shared.registry.agents).insert(agent, live.clone());

    let (acks, mut acked) = mpsc::unbounded_channel::<u64>();
    let mut clock = ClockEstimator::new();
    let mut pings: HashMap<u64, u64> = HashMap::new();
    let mut ping_number = 0u64;
    let mut heartbeat = tokio::time::interval(shared.config.heartbeat);
    let mut last_heard = tokio::time::Instant::now();
    let mut last_sequence = resume_after;
    let result: Result<(), Fault> = loop {
        tokio::select! {
            incoming = incoming_frames.recv() => {
                let frame = match incoming {
                    Some(Ok(Some(frame))) => frame,
                    Some(Ok(None)) | None => break Ok(()),
                    Some(Err(fault)) => break Err(fault),
                };
                last_heard = tokio::time::Instant::now();
                match frame.kind {
                    kind if kind.is_data() => {
                        let (sequence, body) = match wire::split_sequence(kind, &frame.payload) {
                            Ok(split) => split,
                            Err(error) => break Err(error.into()),
                        };
                        if sequence <= last_sequence {
                            if sequence <= resume_after {
                                // Already stored before this connection: acknowledge again.
                                let _ = acks.send(sequence);
                                continue;
                            }
                            break Err(protocol(format!(
                                "sequence {sequence} after {last_sequence}: sequences must increase"
                            )));
                        }
                        last_sequence = sequence;
                        // Checking a fragment is CPU work proportional to its size: off the async
                        // workers, so that one large frame does not stall other connections.
                        let body = body.to_vec();
                        let checked = tokio::task::spawn_blocking(move || {
                            received_frame(agent, kind, sequence, body)
                        })
                        .await;
                        let received = match checked {
                            Ok(Ok(received)) => received,
                            Ok(Err(fault)) => break Err(fault),
                            Err(error) => {
                                break Err(protocol(format!("checking frame {sequence} failed: {error}")))
                            }
                        };
                        let submission = Submission { frame: received, acks: acks.clone() };
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
            Some(sequence) = acked.recv() => {
                let _ = outgoing.send(frame(FrameKind::Ack, &sequence.to_be_bytes()));
            }
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
    while let Ok(sequence) = acked.try_recv() {
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
        let _ = outgoing.send(frame(FrameKind::Refused, fault.to_string().as_bytes()));
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
        let record = request.command.encode(serial);
        let sent = live
            .outgoing
            .send(frame(FrameKind::Command, &record))
            .is_ok();
        waiting.push((agent, sent, reply));
    }
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
                message: reply.message,
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

/// Sends one command through a collector, as `openprof control` does (blocking).
pub fn send_control(
    collector: &str,
    token: &str,
    request: &ControlRequest,
) -> Result<ControlResponse, String> {
    let mut socket = std::net::TcpStream::connect(collector)
        .map_err(|error| format!("can't connect to the collector at {collector}: {error}"))?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        role: Role::Control,
        token: token.to_string(),
        agent_id: None,
        hostname: String::new(),
        pid: std::process::id(),
        format: String::new(),
        options: String::new(),
    };
    let io = |error: std::io::Error| format!("talking to the collector: {error}");
    wire::write_frame(&mut socket, FrameKind::Hello, &wire::to_json(&hello)).map_err(io)?;
    let answer = wire::read_frame(&mut socket)
        .map_err(|error| error.to_string())?
        .ok_or("the collector closed the connection")?;
    match answer.kind {
        FrameKind::Welcome => {}
        FrameKind::Refused => {
            return Err(format!(
                "the collector refused: {}",
                String::from_utf8_lossy(&answer.payload)
            ))
        }
        other => return Err(format!("the collector answered with {other:?}")),
    }
    wire::write_frame(&mut socket, FrameKind::Command, &wire::to_json(request)).map_err(io)?;
    let reply = wire::read_frame(&mut socket)
        .map_err(|error| error.to_string())?
        .ok_or("the collector closed the connection before replying")?;
    if reply.kind != FrameKind::Reply {
        return Err(format!("the collector answered with {:?}", reply.kind));
    }
    wire::parse_json(FrameKind::Reply, &reply.payload).map_err(|error| error.to_string())
}

/// Commands by name, for the command line.
pub fn command_names() -> &'static [&'static str] {
    &[
        "gc",
        "dump-heap",
        "alloc-sites",
        "heap-summary",
        "exit",
        "dump-traces",
        "cpu-samples",
        "alloc-traces-on",
        "alloc-traces-off",
        "cpu-sampling-on",
        "cpu-sampling-off",
        "clear-cpu-samples",
        "depth",
        "trace-start",
        "trace-end",
        "filter",
        "snapshot",
        "mpt-add",
        "mpt-remove",
        "mpt-list",
    ]
}

/// Parses a command line's command: a name and, for some, one argument.
pub fn parse_command(
    name: &str,
    argument: Option<&str>,
    thread: u64,
    cutoff: f32,
) -> Result<Command, String> {
    let needs = |what: &str| format!("'{name}' needs {what}");
    let none = |command: Command| match argument {
        Some(extra) => Err(format!("'{name}' takes no argument, '{extra}' given")),
        None => Ok(command),
    };
    match name {
        "gc" => none(Command::ForceGc),
        "dump-heap" => none(Command::DumpHeap),
        "alloc-sites" => none(Command::AllocSites { flags: 0, cutoff }),
        "heap-summary" => none(Command::HeapSummary),
        "exit" => none(Command::ExitVm),
        "dump-traces" => none(Command::DumpTraces),
        "cpu-samples" => none(Command::CpuSamples { cutoff }),
        "alloc-traces-on" => none(Command::AllocTraces { on: true }),
        "alloc-traces-off" => none(Command::AllocTraces { on: false }),
        "cpu-sampling-on" => none(Command::CpuSampling { on: true, thread }),
        "cpu-sampling-off" => none(Command::CpuSampling { on: false, thread }),
        "clear-cpu-samples" => none(Command::ClearCpuSamples),
        "depth" => {
            let text = argument.ok_or_else(|| needs("a depth, e.g. 'depth 2'"))?;
            let depth = text
                .parse::<u16>()
                .map_err(|_| format!("depth '{text}' is not a number from 0 to 65535"))?;
            Ok(Command::SetMaxDepth { depth })
        }
        "trace-start" => none(Command::TraceStart),
        "trace-end" => none(Command::TraceEnd),
        "filter" => Ok(Command::Filter {
            block: argument
                .ok_or_else(|| needs("a filter block, e.g. 'filter +com.example.*'"))?
                .to_string(),
        }),
        "snapshot" => Ok(Command::Snapshot {
            name: argument
                .ok_or_else(|| needs("a name, e.g. 'snapshot after-login'"))?
                .to_string(),
        }),
        "mpt-add" | "mpt-remove" => {
            let specs = argument
                .ok_or_else(|| {
                    needs("method parameter tracing specifications, e.g. 'mpt-add \"Slow.work(int) 1\"'")
                })?
                .to_string();
            // Checked here too, so that a fault is named before anything is sent.
            let parsed = openprof_format::mpt::parse_specs(&specs)
                .map_err(|error| format!("bad specification: {error}"))?;
            if parsed.is_empty() {
                return Err(needs("at least one specification (docs/mpt.md)"));
            }
            Ok(if name == "mpt-add" {
                Command::MptAdd { specs }
            } else {
                Command::MptRemove { specs }
            })
        }
        "mpt-list" => none(Command::MptList),
        other => Err(format!(
            "'{other}' is not a command; the commands are: {}",
            command_names().join(", ")
        )),
    }
}
