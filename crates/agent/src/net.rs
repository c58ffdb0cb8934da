//! `net=host:port`: the agent's side of the wire (docs/protocol.md). Data waits in a bounded
//! queue until the collector acknowledges it as stored; one thread of ours connects (with
//! backoff), says hello, resends what the collector lacks, sends new data, answers heartbeats
//! and hands commands to the agent. Nothing here ever blocks an application thread: when the
//! queue is full the oldest data goes, and the loss is reported once the collector is back.
//! A heap dump is the exception: dropping a piece of it spoils all of it, so its frames are
//! never dropped and the dumping thread waits for room instead (see [`NetSink::send_whole`]).

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

/// The largest frame of data that must arrive whole. The wire takes up to 16 MiB, but a frame
/// is also the unit the queue waits for: smaller ones keep the collector storing while the
/// dump goes on.
const WHOLE_FRAME: usize = 1 << 20;

/// How long a heap dump waits without the collector acknowledging anything before it is
/// abandoned: the JVM is stopped meanwhile (the walk holds a safepoint), so a collector that
/// is gone must not hold it for long. The same patience the JVM's exit has for the goodbye.
pub const WHOLE_PATIENCE: Duration = Duration::from_secs(10);

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
    frame: Arc<[u8]>,
    /// Part of data that must arrive whole (a heap dump): never dropped.
    whole: bool,
}

#[derive(Default)]
struct NetState {
    next_sequence: u64,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// The part of `queued_bytes` in frames that must arrive whole.
    whole_bytes: usize,
    /// The size of the whole frame a sender waits to queue, while it waits for room.
    whole_waiting: Option<usize>,
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
    /// host:port, for messages.
    address: String,
    /// The largest body of an Hprof frame (see [`NetSink::frame_limit`]).
    frame_limit: usize,
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

/// A data frame: its header, then its sequence number and body, in one allocation.
fn encode_data(kind: FrameKind, sequence: u64, body: &[u8]) -> Arc<[u8]> {
    let payload = 8 + body.len();
    let mut bytes = Vec::with_capacity(wire::HEADER_LEN + payload);
    bytes.push(kind as u8);
    bytes.extend_from_slice(&(payload as u32).to_be_bytes());
    bytes.extend_from_slice(&sequence.to_be_bytes());
    bytes.extend_from_slice(body);
    bytes.into()
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
        let address = format!("{}:{}", config.host, config.port);
        let frame_limit = (config.max_queued_bytes / 4).clamp(1, WHOLE_FRAME);
        std::thread::Builder::new()
            .name("openprof-net".into())
            .spawn(move || run(&thread_shared, &config))
            .map_err(|error| format!("can't start the network thread: {error}"))?;
        Ok(NetSink {
            shared,
            agent_id,
            address,
            frame_limit,
        })
    }

    /// Where commands go from now on.
    pub fn set_handler(&self, handler: CommandHandler) {
        *lock(&self.shared.handler) = Some(handler);
    }

    /// Queues a data frame (Fragment or Hprof). Never blocks on the network.
    pub fn send(&self, kind: FrameKind, body: &[u8]) {
        let mut state = lock(&self.shared.state);
        queue_data(&mut state, kind, body, false);
        drop(state);
        self.shared.changed.notify_all();
    }

    /// The largest body of an Hprof frame: a quarter of `netbuffer=` (so that the collector
    /// stores some while a heap dump's next frames wait for room), at most 1 MiB.
    pub fn frame_limit(&self) -> usize {
        self.frame_limit
    }

    /// Queues a data frame that must arrive whole (a piece of a heap dump): it is never
    /// dropped, and while such frames fill `netbuffer=` this waits for the collector to
    /// acknowledge some. Gives up, with the reason, when the collector acknowledges nothing
    /// for `patience` or the connection has stopped for good: the caller abandons what it was
    /// sending. Other data still goes oldest first when the queue is over its bound.
    pub fn send_whole(
        &self,
        kind: FrameKind,
        body: &[u8],
        patience: Duration,
    ) -> Result<(), String> {
        let mut state = lock(&self.shared.state);
        let mut acked = state.acked;
        let mut deadline = Instant::now() + patience;
        let length = wire::HEADER_LEN + 8 + body.len();
        while !has_room(&state, length) {
            state.whole_waiting = Some(length);
            if state.gave_up || state.stopping {
                state.whole_waiting = None;
                return Err(format!(
                    "the connection to the collector {} has stopped",
                    self.address
                ));
            }
            if state.acked != acked {
                acked = state.acked;
                deadline = Instant::now() + patience;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.whole_waiting = None;
                let how = if state.connected {
                    "acknowledged nothing"
                } else {
                    "was not reachable"
                };
                return Err(format!(
                    "the collector {} {how} for {}",
                    self.address,
                    seconds(patience)
                ));
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        state.whole_waiting = None;
        queue_data(&mut state, kind, body, true);
        drop(state);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// Data that will not be sent after all (the rest of an abandoned heap dump), counted as
    /// lost in frames of `frame_limit` bytes: the collector hears of it as of dropped frames.
    pub fn count_lost(&self, bytes: usize, frame_limit: usize) {
        if bytes == 0 {
            return;
        }
        let frames = bytes.div_ceil(frame_limit.max(1)) as u64;
        let mut state = lock(&self.shared.state);
        let first = state.next_sequence;
        state.next_sequence += frames;
        let loss = &mut state.loss;
        if loss.frames == 0 {
            loss.first_sequence = first;
        }
        loss.frames += frames;
        loss.bytes += bytes as u64;
        loss.last_sequence = first + frames - 1;
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
        queue_data(&mut state, FrameKind::Goodbye, &[], false);
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

/// "10 s", "0.2 s".
fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

/// Whether a whole frame of `length` bytes may be queued: whole frames fill `netbuffer=` at
/// most, except one alone, however large.
fn has_room(state: &NetState, length: usize) -> bool {
    state.whole_bytes == 0 || state.whole_bytes + length <= state.max_queued_bytes
}

/// Appends a data frame, dropping the oldest that may be dropped (not `whole`, not this one)
/// while the queue is over its bound.
fn queue_data(state: &mut NetState, kind: FrameKind, body: &[u8], whole: bool) {
    let sequence = state.next_sequence;
    state.next_sequence += 1;
    let frame = encode_data(kind, sequence, body);
    state.queued_bytes += frame.len();
    if whole {
        state.whole_bytes += frame.len();
    }
    state.queue.push_back(Queued {
        sequence,
        frame,
        whole,
    });
    while state.queued_bytes > state.max_queued_bytes {
        // Whole frames at the front are at most `netbuffer=` of them (their sender waits), so
        // this look past them stays short.
        let newest = state.queue.len() - 1;
        let Some(at) = state
            .queue
            .iter()
            .take(newest)
            .position(|queued| !queued.whole)
        else {
            break;
        };
        let dropped = state.queue.remove(at).expect("found in the queue");
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
        let outcome =
            connect(config).and_then(|(stream, socket)| serve(shared, config, stream, &socket));
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

/// The connection, and its socket (to switch between waiting and not).
fn connect(config: &NetConfig) -> Result<(Box<dyn Connection>, TcpStream), Problem> {
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
    let control = socket.try_clone().map_err(|error| error.to_string())?;
    let stream: Box<dyn Connection> = match &config.tls {
        None => Box::new(socket),
        Some(tls) => Box::new(openprof_format::tls_client::connect(
            tls.clone(),
            &config.host,
            socket,
        )?),
    };
    Ok((stream, control))
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
    socket: &TcpStream,
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
        let (control, data, finished, more) = {
            let mut state = lock(&shared.state);
            // A heap dump waiting for the room an acknowledgement just made queues its next
            // frame at once: wait for that, not for the collector (which waits for it).
            while !state.stopping
                && state
                    .queue
                    .back()
                    .is_none_or(|last| last.sequence <= state.sent_up_to)
                && state
                    .whole_waiting
                    .is_some_and(|length| has_room(&state, length))
            {
                state = shared
                    .changed
                    .wait_timeout(state, POLL)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0;
            }
            if state.loss.frames > 0 {
                let loss = std::mem::take(&mut state.loss);
                eprintln!(
                    "openprof: {} frames ({} bytes) were dropped while the collector was slow or away",
                    loss.frames, loss.bytes
                );
                queue_data(&mut state, FrameKind::Loss, &wire::to_json(&loss), false);
            }
            let control: Vec<Vec<u8>> = state.control.drain(..).collect();
            let mut data: Vec<(u64, Arc<[u8]>)> = Vec::new();
            let mut bytes = 0;
            let sent_up_to = state.sent_up_to;
            let unsent = state
                .queue
                .partition_point(|queued| queued.sequence <= sent_up_to);
            for queued in state.queue.range(unsent..) {
                if bytes > 1 << 20 {
                    break;
                }
                bytes += queued.frame.len();
                data.push((queued.sequence, queued.frame.clone()));
            }
            if let Some((last, _)) = data.last() {
                state.sent_up_to = *last;
            }
            let more = unsent + data.len() < state.queue.len();
            // `finish` sets stopping once the goodbye is acknowledged, or it gave up waiting.
            (control, data, state.stopping, more)
        };
        if finished {
            return Ok(Finished);
        }
        for frame in control
            .iter()
            .map(|frame| &frame[..])
            .chain(data.iter().map(|(_, frame)| &frame[..]))
        {
            stream.write_all(frame).map_err(write_error)?;
        }
        if !control.is_empty() || !data.is_empty() {
            stream.flush().map_err(write_error)?;
        }
        if more {
            // More to send: take what the collector said, without waiting for it.
            socket
                .set_nonblocking(true)
                .map_err(|error| error.to_string())?;
            let read = read_some(stream.as_mut(), &mut buffer);
            socket
                .set_nonblocking(false)
                .map_err(|error| error.to_string())?;
            read?;
        } else {
            read_some(stream.as_mut(), &mut buffer)?;
        }
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
        if done.whole {
            state.whole_bytes -= done.frame.len();
        }
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
    Net(Arc<NetSink>, Delivery),
    Discard,
}

/// How HPROF output goes to the collector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// As all data: the oldest frames go when the queue is full.
    DropOldest,
    /// Whole (a heap dump): the writer waits for the collector (see [`NetSink::send_whole`]).
    Whole,
    /// Given up on, for this reason: what is written until the dump ends is counted as lost.
    Abandoned(String),
}

impl Sink {
    pub fn net(net: Arc<NetSink>) -> Sink {
        Sink::Net(net, Delivery::DropOldest)
    }

    /// Until [`end_whole`](Self::end_whole), the output must arrive whole (a heap dump). A
    /// file's always does.
    pub fn begin_whole(&mut self) {
        if let Sink::Net(_, delivery) = self {
            *delivery = Delivery::Whole;
        }
    }

    /// Back to dropping the oldest; why what was written since `begin_whole` was given up on,
    /// if it was. The caller flushes its buffers first.
    pub fn end_whole(&mut self) -> Option<String> {
        match self {
            Sink::Net(_, delivery) => match std::mem::replace(delivery, Delivery::DropOldest) {
                Delivery::Abandoned(why) => Some(why),
                _ => None,
            },
            _ => None,
        }
    }

    /// Why output that must arrive whole is being given up on, if it is.
    pub fn abandoned(&self) -> Option<&str> {
        match self {
            Sink::Net(_, Delivery::Abandoned(why)) => Some(why),
            _ => None,
        }
    }
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Sink::File(file) => file.write(bytes),
            Sink::Net(net, delivery) => {
                // A heap dump's segment comes in one write; the wire takes frames of 16 MiB at
                // most, and the queue is bounded: cut it.
                let limit = bytes.len().min(net.frame_limit());
                match delivery {
                    Delivery::DropOldest => net.send(FrameKind::Hprof, &bytes[..limit]),
                    Delivery::Whole => {
                        if let Err(why) =
                            net.send_whole(FrameKind::Hprof, &bytes[..limit], WHOLE_PATIENCE)
                        {
                            // Taken, and counted as lost: the writer goes on and the dump's
                            // caller stops it (an error here would leave pieces in buffers).
                            net.count_lost(limit, net.frame_limit());
                            *delivery = Delivery::Abandoned(why);
                        }
                    }
                    Delivery::Abandoned(_) => net.count_lost(limit, net.frame_limit()),
                }
                Ok(limit)
            }
            Sink::Discard => Ok(bytes.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(file) => file.flush(),
            Sink::Net(..) | Sink::Discard => Ok(()),
        }
    }
}

/// This machine's name, as the trace's node and the collector's hello give it.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A heap dump given up on: the collector has its beginning only.
pub(crate) fn abandoned_dump(why: String) -> io::Error {
    io::Error::other(format!(
        "{why}: the dump was abandoned, the collector has its beginning only"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(max_queued_bytes: usize) -> NetState {
        NetState {
            next_sequence: 1,
            max_queued_bytes,
            ..NetState::default()
        }
    }

    fn sequences(state: &NetState) -> Vec<u64> {
        state.queue.iter().map(|queued| queued.sequence).collect()
    }

    #[test]
    fn a_full_queue_drops_the_oldest_frames_that_need_not_arrive_whole() {
        // Frames of 100 bytes of body are 113 on the wire; four fit in 460.
        let mut state = state(460);
        queue_data(&mut state, FrameKind::Fragment, &[0; 100], false);
        queue_data(&mut state, FrameKind::Hprof, &[1; 100], true);
        queue_data(&mut state, FrameKind::Hprof, &[2; 100], true);
        queue_data(&mut state, FrameKind::Fragment, &[3; 100], false);
        assert_eq!(sequences(&state), [1, 2, 3, 4]);
        queue_data(&mut state, FrameKind::Fragment, &[4; 100], false);
        assert_eq!(sequences(&state), [2, 3, 4, 5], "the oldest, 1, goes");
        queue_data(&mut state, FrameKind::Hprof, &[5; 100], true);
        assert_eq!(
            sequences(&state),
            [2, 3, 5, 6],
            "4 goes, not the whole 2 and 3"
        );
        queue_data(&mut state, FrameKind::Hprof, &[6; 100], true);
        queue_data(&mut state, FrameKind::Hprof, &[7; 100], true);
        assert_eq!(
            sequences(&state),
            [2, 3, 6, 7, 8],
            "whole frames stay, over the bound: their sender is the one that waits"
        );
        assert_eq!(state.loss.frames, 3);
        assert_eq!(
            (state.loss.first_sequence, state.loss.last_sequence),
            (1, 5)
        );
        assert_eq!(state.whole_bytes, 5 * 113);
        acknowledge(&mut state, 6);
        assert_eq!(sequences(&state), [7, 8]);
        assert_eq!((state.queued_bytes, state.whole_bytes), (226, 226));
    }

    fn unreachable_sink(max_queued_bytes: usize) -> NetSink {
        // A port nothing listens on: the connection thread retries in the background.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        NetSink::start(NetConfig {
            host: "127.0.0.1".into(),
            port,
            hello: hello(Uuid::new_v4(), "b", String::new()),
            credential: "token".into(),
            identity: Arc::new(Identity::generate().unwrap()),
            tls: None,
            max_queued_bytes,
        })
        .unwrap()
    }

    #[test]
    fn whole_data_waits_for_room_and_gives_up_on_a_collector_that_is_away() {
        let net = unreachable_sink(64 << 10);
        assert_eq!(net.frame_limit(), 16 << 10);
        let frame = vec![7u8; 16 << 10];
        for _ in 0..3 {
            net.send_whole(FrameKind::Hprof, &frame, Duration::from_millis(200))
                .unwrap();
        }
        let started = Instant::now();
        let why = net
            .send_whole(FrameKind::Hprof, &frame, Duration::from_millis(200))
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(why.contains("was not reachable for 0.2 s"), "{why}");
        // The frames that were queued are still there for the collector.
        let state = lock(&net.shared.state);
        assert_eq!(state.queue.len(), 3);
        assert_eq!(state.loss.frames, 0);
        drop(state);
        net.finish(Duration::ZERO);
    }

    #[test]
    fn a_sink_gives_up_on_a_heap_dump_and_counts_its_rest_as_lost() {
        let net = Arc::new(unreachable_sink(64 << 10));
        let mut sink = Sink::net(net.clone());
        sink.begin_whole();
        // Cut into frames of a quarter of the buffer; three fit, the fourth waits in vain
        // (for WHOLE_PATIENCE: this test takes that long).
        sink.write_all(&vec![1u8; 100 << 10]).unwrap();
        let why = sink.abandoned().expect("abandoned").to_string();
        assert!(why.contains("was not reachable for 10 s"), "{why}");
        sink.write_all(&[2u8; 1000]).unwrap();
        assert_eq!(sink.end_whole(), Some(why));
        let state = lock(&net.shared.state);
        assert_eq!(state.queue.len(), 3);
        assert_eq!(state.loss.bytes, (100 << 10) - 3 * (16 << 10) + 1000);
        assert_eq!(
            state.loss.frames, 5,
            "52 KiB in frames of 16 KiB, and the last write"
        );
        drop(state);
        net.finish(Duration::ZERO);
    }
}
