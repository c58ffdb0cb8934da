//! `net=host:port`: the agent's side of the wire (docs/protocol.md). Data waits in a bounded
//! queue until the collector acknowledges it as stored; one thread of ours connects (with
//! backoff), says hello, resends what the collector lacks, sends new data, answers heartbeats
//! and hands commands to the agent. Nothing here ever blocks an application thread: when the
//! queue is full the oldest data goes, and the loss is reported once the collector is back.

use crate::error::{AgentError, AgentResult};
use crate::sync::lock;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openprof_format::handshake::{ClientHandshake, ClientStep, CommandSigner, Identity};
use openprof_format::wire::{self, Command, FrameBuffer, FrameKind, Hello, Loss, Reply, Role};
use uuid::Uuid;

/// How long a read waits before the thread looks for data to send.
const POLL: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The connection `net=` asks for, started (it connects in the background), or none.
pub fn start_from_options(
    options: &openprof_format::options::Options,
) -> AgentResult<Option<Arc<NetSink>>> {
    use openprof_format::options::OutputFormat;
    let Some(address) = &options.net else {
        return Ok(None);
    };
    let token = options.token_value().map_err(|error| error.to_string())?;
    let tls = match &options.tls_ca {
        Some(ca) => Some(tls_config(ca)?),
        None => None,
    };
    let format = match options.format {
        OutputFormat::Ascii => "a",
        OutputFormat::Binary => "b",
        OutputFormat::Xml => "x",
    };
    let hello = hello(Uuid::new_v4(), format, options.to_string());
    let identity = Identity::generate().map_err(|error| format!("net=: {error}"))?;
    Ok(Some(Arc::new(NetSink::start(NetConfig {
        host: address.host.clone(),
        port: address.port,
        hello,
        credential: token,
        identity: Arc::new(identity),
        tls,
        max_queued_bytes: usize::try_from(options.net_buffer).unwrap_or(usize::MAX),
    })?)))
}

/// Where commands from the collector go.
pub type CommandHandler = Box<dyn Fn(u32, Command) + Send + Sync>;

struct Queued {
    sequence: u64,
    frame: Vec<u8>,
}

#[derive(Default)]
struct NetState {
    next_sequence: u64,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    max_queued_bytes: usize,
    /// The highest sequence written on the current connection.
    sent_up_to: u64,
    acked: u64,
    /// Pongs and replies: sent once, never acknowledged.
    control: VecDeque<Vec<u8>>,
    /// Dropped since the last Loss frame was queued.
    loss: Loss,
    connected: bool,
    stopping: bool,
    /// The collector's last refusal, reported once per distinct reason.
    last_problem: Option<String>,
    /// A refusal that retrying can't cure (a wrong credential): the thread has stopped and
    /// `finish` does not wait.
    gave_up: bool,
}

struct Shared {
    state: Mutex<NetState>,
    changed: Condvar,
    handler: Mutex<Option<CommandHandler>>,
}

/// The agent's connection to its collector.
pub struct NetSink {
    shared: Arc<Shared>,
    pub agent_id: Uuid,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos() as u64)
        .unwrap_or(0)
}

fn encode(kind: FrameKind, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(wire::HEADER_LEN + payload.len());
    wire::encode_frame(kind, payload, &mut bytes);
    bytes
}

/// How to reach the collector.
pub struct NetConfig {
    pub host: String,
    pub port: u16,
    pub hello: Hello,
    /// The agent credential: proven to the collector, never sent.
    pub credential: String,
    /// The key pair this agent's id is bound to at the collector.
    pub identity: Arc<Identity>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Unacknowledged bytes kept for the collector (`netbuffer=`); beyond them the oldest
    /// frames are dropped.
    pub max_queued_bytes: usize,
}

/// Builds a TLS client trusting the CA certificates of a PEM file.
pub fn tls_config(ca_file: &str) -> AgentResult<Arc<rustls::ClientConfig>> {
    openprof_format::tls_client::config(ca_file)
        .map_err(|error| AgentError::Refused(format!("tlsca={error}")))
}

impl NetSink {
    /// Starts the connection thread; data can be queued at once.
    pub fn start(config: NetConfig) -> AgentResult<NetSink> {
        let agent_id = config
            .hello
            .agent_id
            .ok_or("the hello carries no agent id")?;
        if config.tls.is_some() {
            rustls::pki_types::ServerName::try_from(config.host.clone())
                .map_err(|error| format!("net={}: not a TLS server name: {error}", config.host))?;
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(NetState {
                next_sequence: 1,
                max_queued_bytes: config.max_queued_bytes,
                ..NetState::default()
            }),
            changed: Condvar::new(),
            handler: Mutex::new(None),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("openprof-net".into())
            .spawn(move || run(&thread_shared, &config))
            .map_err(|error| format!("can't start the network thread: {error}"))?;
        Ok(NetSink { shared, agent_id })
    }

    /// Where commands go from now on.
    pub fn set_handler(&self, handler: CommandHandler) {
        *lock(&self.shared.handler) = Some(handler);
    }

    /// Queues a data frame (Fragment or Hprof). Never blocks on the network.
    pub fn send(&self, kind: FrameKind, body: &[u8]) {
        let mut state = lock(&self.shared.state);
        queue_data(&mut state, kind, body);
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Sends a command's reply.
    pub fn reply(&self, reply: &Reply) {
        lock(&self.shared.state)
            .control
            .push_back(encode(FrameKind::Reply, &reply.encode()));
        self.shared.changed.notify_all();
    }

    /// Says goodbye and waits, at most `patience`, for the collector to acknowledge everything;
    /// then stops. Returns whether everything was acknowledged.
    pub fn finish(&self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut state = lock(&self.shared.state);
        let goodbye = state.next_sequence;
        queue_data(&mut state, FrameKind::Goodbye, &[]);
        self.shared.changed.notify_all();
        while state.acked < goodbye && !state.gave_up {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left.min(POLL))
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        let done = state.acked >= goodbye;
        if !done && !state.gave_up {
            eprintln!(
                "openprof: the collector did not acknowledge the last {} frames in time; they are lost",
                state.queue.len()
            );
        }
        state.stopping = true;
        self.shared.changed.notify_all();
        done
    }
}

/// Appends a data frame, dropping the oldest while the queue is over its bound.
fn queue_data(state: &mut NetState, kind: FrameKind, body: &[u8]) {
    let sequence = state.next_sequence;
    state.next_sequence += 1;
    let frame = encode(kind, &wire::with_sequence(sequence, body));
    state.queued_bytes += frame.len();
    state.queue.push_back(Queued { sequence, frame });
    while state.queued_bytes > state.max_queued_bytes && state.queue.len() > 1 {
        let dropped = state.queue.pop_front().expect("more than one queued");
        state.queued_bytes -= dropped.frame.len();
        let loss = &mut state.loss;
        if loss.frames == 0 {
            loss.first_sequence = dropped.sequence;
        }
        loss.frames += 1;
        loss.bytes += dropped.frame.len() as u64;
        loss.last_sequence = dropped.sequence;
    }
}

/// The connection thread: connect, serve until the connection fails, back off, again.
fn run(shared: &Shared, config: &NetConfig) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if lock(&shared.state).stopping {
            return;
        }
        let outcome = connect(config).and_then(|stream| serve(shared, config, stream));
        {
            let mut state = lock(&shared.state);
            if std::mem::take(&mut state.connected) {
                // It worked for a while: reconnect quickly.
                backoff = Duration::from_millis(50);
            }
            match outcome {
                Ok(Finished) => return,
                Err(Problem::Final(problem)) => {
                    eprintln!(
                        "openprof: collector {}:{}: {problem}; not retrying: the data meant for it is dropped",
                        config.host, config.port
                    );
                    state.gave_up = true;
                    state.stopping = true;
                    drop(state);
                    shared.changed.notify_all();
                    return;
                }
                Err(Problem::Retry(problem)) => {
                    if state.last_problem.as_deref() != Some(problem.as_str()) {
                        eprintln!(
                            "openprof: collector {}:{}: {problem}; retrying",
                            config.host, config.port
                        );
                        state.last_problem = Some(problem);
                    }
                }
            }
            if state.stopping {
                return;
            }
            let _ = shared.changed.wait_timeout(state, backoff);
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

trait Connection: Read + Write + Send {}
impl<T: Read + Write + Send> Connection for T {}

/// Why a connection ended: worth retrying, or not until someone changes a configuration.
enum Problem {
    Retry(String),
    Final(String),
}

impl From<String> for Problem {
    fn from(problem: String) -> Problem {
        Problem::Retry(problem)
    }
}

impl From<&str> for Problem {
    fn from(problem: &str) -> Problem {
        Problem::Retry(problem.to_string())
    }
}

fn connect(config: &NetConfig) -> Result<Box<dyn Connection>, Problem> {
    let address = (config.host.as_str(), config.port)
        .to_socket_addrs()
        .map_err(|error| format!("can't resolve: {error}"))?
        .next()
        .ok_or("the name resolves to no address")?;
    let socket = TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .map_err(|error| format!("can't connect: {error}"))?;
    let _ = socket.set_nodelay(true);
    socket
        .set_read_timeout(Some(POLL))
        .map_err(|error| error.to_string())?;
    match &config.tls {
        None => Ok(Box::new(socket)),
        Some(tls) => Ok(Box::new(openprof_format::tls_client::connect(
            tls.clone(),
            &config.host,
            socket,
        )?)),
    }
}

/// Goodbye acknowledged, or the agent is stopping.
struct Finished;

fn is_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Reads what has arrived (waiting at most one poll interval) into `buffer`.
fn read_some(stream: &mut dyn Connection, buffer: &mut FrameBuffer) -> Result<(), Problem> {
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk) {
        Ok(0) => Err("the collector closed the connection".into()),
        Ok(read) => {
            buffer.push(&chunk[..read]);
            Ok(())
        }
        Err(error) if is_timeout(&error) => Ok(()),
        Err(error) => Err(format!("reading: {error}").into()),
    }
}

fn serve(
    shared: &Shared,
    config: &NetConfig,
    mut stream: Box<dyn Connection>,
) -> Result<Finished, Problem> {
    let write_error = |error: io::Error| format!("writing: {error}");
    let (mut handshake, hello) = ClientHandshake::start(
        config.hello.clone(),
        &config.credential,
        Some(config.identity.clone()),
    )
    .map_err(|error| Problem::Final(error.to_string()))?;
    stream
        .write_all(&hello)
        .and_then(|()| stream.flush())
        .map_err(write_error)?;
    let mut buffer = FrameBuffer::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (signer, welcome) = loop {
        if let Some(frame) = buffer.next_frame().map_err(|error| error.to_string())? {
            match handshake.on_frame(frame) {
                Ok(ClientStep::Send(bytes)) => stream
                    .write_all(&bytes)
                    .and_then(|()| stream.flush())
                    .map_err(write_error)?,
                Ok(ClientStep::Done(signer, welcome)) => break (signer, welcome),
                Err(error) if error.retryable() => return Err(Problem::Retry(error.to_string())),
                Err(error) => return Err(Problem::Final(error.to_string())),
            }
            continue;
        }
        if Instant::now() > deadline {
            return Err("no answer to the hello".into());
        }
        read_some(stream.as_mut(), &mut buffer)?;
    };
    let mut commands = CommandGate {
        signer,
        last_serial: None,
    };
    {
        let mut state = lock(&shared.state);
        state.connected = true;
        state.last_problem = None;
        acknowledge(&mut state, welcome.resume_after);
        state.sent_up_to = welcome.resume_after;
        state.control.clear();
    }
    shared.changed.notify_all();
    loop {
        // What to write, taken under the lock and written outside it.
        let (control, data, finished) = {
            let mut state = lock(&shared.state);
            if state.loss.frames > 0 {
                let loss = std::mem::take(&mut state.loss);
                eprintln!(
                    "openprof: {} frames ({} bytes) were dropped while the collector was slow or away",
                    loss.frames, loss.bytes
                );
                queue_data(&mut state, FrameKind::Loss, &wire::to_json(&loss));
            }
            let control: Vec<Vec<u8>> = state.control.drain(..).collect();
            let mut data = Vec::new();
            let mut bytes = 0;
            let sent_up_to = state.sent_up_to;
            for queued in state
                .queue
                .iter()
                .filter(|queued| queued.sequence > sent_up_to)
            {
                if bytes > 1 << 20 {
                    break;
                }
                bytes += queued.frame.len();
                data.push((queued.sequence, queued.frame.clone()));
            }
            if let Some((last, _)) = data.last() {
                state.sent_up_to = *last;
            }
            // `finish` sets stopping once the goodbye is acknowledged, or it gave up waiting.
            (control, data, state.stopping)
        };
        if finished {
            return Ok(Finished);
        }
        for frame in control.iter().chain(data.iter().map(|(_, frame)| frame)) {
            stream.write_all(frame).map_err(write_error)?;
        }
        if !control.is_empty() || !data.is_empty() {
            stream.flush().map_err(write_error)?;
        }
        read_some(stream.as_mut(), &mut buffer)?;
        while let Some(frame) = buffer.next_frame().map_err(|error| error.to_string())? {
            handle(shared, &mut commands, frame)?;
        }
    }
}

/// Lets through only commands sealed with this session's key, each with a serial above the
/// last: a command injected or replayed by someone who does not know the credential closes
/// the connection.
struct CommandGate {
    signer: CommandSigner,
    last_serial: Option<u32>,
}

impl CommandGate {
    fn open<'a>(&mut self, sealed: &'a [u8]) -> Result<&'a [u8], String> {
        let record = self
            .signer
            .open(sealed)
            .ok_or("a command without this session's signature: closing the connection")?;
        let serial = record
            .get(1..5)
            .map(|bytes| u32::from_be_bytes(bytes.try_into().expect("4 bytes")))
            .ok_or("a command too short for its serial")?;
        if self.last_serial.is_some_and(|last| serial <= last) {
            return Err(format!(
                "command serial {serial} repeats or goes back: closing the connection"
            ));
        }
        self.last_serial = Some(serial);
        Ok(record)
    }
}

fn acknowledge(state: &mut NetState, sequence: u64) {
    state.acked = state.acked.max(sequence);
    while state
        .queue
        .front()
        .is_some_and(|queued| queued.sequence <= sequence)
    {
        let done = state.queue.pop_front().expect("front exists");
        state.queued_bytes -= done.frame.len();
    }
}

fn handle(
    shared: &Shared,
    commands: &mut CommandGate,
    frame: wire::WireFrame,
) -> Result<(), Problem> {
    let fault = |error: wire::WireError| error.to_string();
    match frame.kind {
        FrameKind::Ack => {
            let sequence = wire::decode_u64(frame.kind, &frame.payload).map_err(fault)?;
            acknowledge(&mut lock(&shared.state), sequence);
            shared.changed.notify_all();
        }
        FrameKind::Ping => {
            let (number, _collector_ns) =
                wire::decode_pair(frame.kind, &frame.payload).map_err(fault)?;
            let pong = encode(FrameKind::Pong, &wire::encode_pair(number, now_ns()));
            lock(&shared.state).control.push_back(pong);
        }
        FrameKind::Command => match Command::decode(commands.open(&frame.payload)?) {
            Ok((serial, command)) => match lock(&shared.handler).as_ref() {
                Some(handler) => handler(serial, command),
                None => lock(&shared.state).control.push_back(encode(
                    FrameKind::Reply,
                    &Reply {
                        serial,
                        ok: false,
                        message: "the agent is not ready for commands yet".into(),
                    }
                    .encode(),
                )),
            },
            Err(error) => {
                // The gate read the serial even though the rest does not decode.
                let serial = commands.last_serial.unwrap_or(0);
                lock(&shared.state).control.push_back(encode(
                    FrameKind::Reply,
                    &Reply {
                        serial,
                        ok: false,
                        message: error.to_string(),
                    }
                    .encode(),
                ));
            }
        },
        FrameKind::Refused => {
            let refusal = wire::Refusal::decode(&frame.payload);
            let problem = format!("closed by the collector: {}", refusal.reason);
            return Err(if refusal.retry {
                Problem::Retry(problem)
            } else {
                Problem::Final(problem)
            });
        }
        other => return Err(format!("the collector sent an unexpected {other:?} frame").into()),
    }
    Ok(())
}

/// The hello of this agent (the handshake adds its nonce and identity key).
pub fn hello(agent_id: Uuid, format: &str, options: String) -> Hello {
    let mut hello = Hello::new(Role::Agent, Some(agent_id));
    hello.hostname = hostname();
    hello.format = format.into();
    hello.options = options;
    hello
}

/// The buffer in front of a [`Sink`]: large enough that HPROF output goes to the collector in
/// frames of a useful size.
pub const SINK_BUFFER: usize = 256 << 10;

/// Where HPROF output goes: its file, or the collector as Hprof frames; nowhere between two
/// profiling sessions.
pub enum Sink {
    File(std::fs::File),
    Net(Arc<NetSink>),
    Discard,
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Sink::File(file) => file.write(bytes),
            Sink::Net(net) => {
                net.send(FrameKind::Hprof, bytes);
                Ok(bytes.len())
            }
            Sink::Discard => Ok(bytes.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(file) => file.flush(),
            Sink::Net(_) | Sink::Discard => Ok(()),
        }
    }
}

/// This machine's name, as the trace's node and the collector's hello give it.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
