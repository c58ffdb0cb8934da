//! The wire between agents and collectors (docs/protocol.md): frames of `u1 kind, u4 length,
//! payload`, the messages they carry, and HPROF's socket commands with our extensions.
//! Blocking and async code share it: the agent reads frames from a `std` socket, the collector
//! parses the 5-byte header itself and hands the payload to the same decoders.

use std::io::{self, Read, Write};

use thiserror::Error;
use uuid::Uuid;

/// The protocol version a hello carries; a collector refuses versions it does not speak.
pub const PROTOCOL_VERSION: u32 = 2;
/// The largest payload either side accepts: a frame claiming more is malformed.
pub const MAX_PAYLOAD: u32 = 16 << 20;
/// The bytes of a frame header: kind and length.
pub const HEADER_LEN: usize = 5;
/// The largest hello a collector reads: it arrives before authentication, so it is small.
pub const MAX_HELLO: u32 = 4096;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// First frame of every connection, from agent or control client: JSON [`Hello`].
    Hello = 1,
    /// Collector's answer to an accepted hello: JSON [`Welcome`].
    Welcome = 2,
    /// Collector's answer to a refused hello or a fatal fault; the connection then closes.
    Refused = 3,
    /// Agent → collector: `u8 sequence` then whole trace elements as XML.
    Fragment = 4,
    /// Agent → collector: `u8 sequence` then bytes of an HPROF output (text or binary).
    Hprof = 5,
    /// Collector → agent: `u8 sequence`: everything up to it is stored durably.
    Ack = 6,
    /// Collector → agent: an HPROF command record ([`Command::encode`]). Control client →
    /// collector: JSON [`ControlRequest`].
    Command = 7,
    /// Agent → collector: `u4 serial, u1 status (0 done, 1 failed)`, then a UTF-8 message.
    /// Collector → control client: JSON [`ControlResponse`].
    Reply = 8,
    /// Collector → agent: `u8 number, u8 collector clock (ns since the epoch)`.
    Ping = 9,
    /// Agent → collector: `u8 number, u8 agent clock (ns since the epoch)` answering a ping.
    Pong = 10,
    /// Agent → collector: `u8 sequence` then JSON [`Loss`]: data dropped while disconnected.
    Loss = 11,
    /// Agent → collector: `u8 sequence`: the agent has sent its last frame.
    Goodbye = 12,
    /// Collector → peer, answering a hello: JSON [`crate::handshake::Challenge`].
    Challenge = 13,
    /// Peer → collector, answering the challenge: JSON [`crate::handshake::Proof`].
    Proof = 14,
}

impl FrameKind {
    pub fn from_byte(byte: u8) -> Option<FrameKind> {
        use FrameKind::*;
        Some(match byte {
            1 => Hello,
            2 => Welcome,
            3 => Refused,
            4 => Fragment,
            5 => Hprof,
            6 => Ack,
            7 => Command,
            8 => Reply,
            9 => Ping,
            10 => Pong,
            11 => Loss,
            12 => Goodbye,
            13 => Challenge,
            14 => Proof,
            _ => return None,
        })
    }

    /// Frames that carry an agent's data sequence number and are stored and acknowledged.
    pub fn is_data(self) -> bool {
        matches!(
            self,
            FrameKind::Fragment | FrameKind::Hprof | FrameKind::Loss | FrameKind::Goodbye
        )
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireFrame {
    pub kind: FrameKind,
    pub payload: Vec<u8>,
}

/// Why bytes are not a valid frame or message.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("frame kind {0} is unknown")]
    UnknownKind(u8),
    #[error("frame of {0} bytes is longer than the {MAX_PAYLOAD}-byte limit")]
    TooLong(u32),
    #[error("{kind:?} frame: {problem}")]
    BadPayload { kind: FrameKind, problem: String },
}

fn bad(kind: FrameKind, problem: impl Into<String>) -> WireError {
    WireError::BadPayload {
        kind,
        problem: problem.into(),
    }
}

/// Parses a frame header: its kind and payload length.
pub fn parse_header(header: [u8; HEADER_LEN]) -> Result<(FrameKind, u32), WireError> {
    let kind = FrameKind::from_byte(header[0]).ok_or(WireError::UnknownKind(header[0]))?;
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if length > MAX_PAYLOAD {
        return Err(WireError::TooLong(length));
    }
    Ok((kind, length))
}

/// Appends a whole frame to `out`.
pub fn encode_frame(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) {
    out.push(kind as u8);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Writes one frame.
pub fn write_frame(out: &mut impl Write, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    encode_frame(kind, payload, &mut bytes);
    out.write_all(&bytes)
}

/// Reads one frame; `Ok(None)` when the peer closed the connection between frames.
pub fn read_frame(input: &mut impl Read) -> Result<Option<WireFrame>, WireError> {
    let mut header = [0u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        match input.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
    }
    let (kind, length) = parse_header(header)?;
    let mut payload = vec![0u8; length as usize];
    input.read_exact(&mut payload)?;
    Ok(Some(WireFrame { kind, payload }))
}

/// Frames from a byte stream read in pieces (a socket with a read timeout): bytes go in as
/// they arrive, whole frames come out.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    bytes: Vec<u8>,
}

impl FrameBuffer {
    pub fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    /// The next whole frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<WireFrame>, WireError> {
        if self.bytes.len() < HEADER_LEN {
            return Ok(None);
        }
        let header: [u8; HEADER_LEN] = self.bytes[..HEADER_LEN].try_into().expect("5 bytes");
        let (kind, length) = parse_header(header)?;
        let end = HEADER_LEN + length as usize;
        if self.bytes.len() < end {
            return Ok(None);
        }
        let payload = self.bytes[HEADER_LEN..end].to_vec();
        self.bytes.drain(..end);
        Ok(Some(WireFrame { kind, payload }))
    }
}

/// Who is saying hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An agent streaming data and taking commands.
    Agent,
    /// `openprof control`: sends commands to agents through the collector.
    Control,
}

/// The first frame of a connection. It carries no secret: the credential is proven by the
/// handshake that follows (crate::handshake).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    pub version: u32,
    pub role: Role,
    /// 32 random bytes in hex, fresh for each connection.
    #[serde(default)]
    pub nonce: String,
    /// An agent's Ed25519 public key in hex: its agent id stays bound to it.
    #[serde(default)]
    pub identity: Option<String>,
    /// The agent's id (the agentCreate's agentId); stable across reconnections.
    #[serde(default)]
    pub agent_id: Option<Uuid>,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub pid: u32,
    /// `x` (trace fragments), `a` (HPROF text) or `b` (HPROF binary).
    #[serde(default)]
    pub format: String,
    /// The agent's options as given, for the catalog.
    #[serde(default)]
    pub options: String,
}

impl Hello {
    /// A hello of this protocol version; the handshake fills its nonce and identity.
    pub fn new(role: Role, agent_id: Option<Uuid>) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            role,
            nonce: String::new(),
            identity: None,
            agent_id,
            hostname: String::new(),
            pid: std::process::id(),
            format: String::new(),
            options: String::new(),
        }
    }
}

/// A Refused frame's payload: why, and whether connecting again could help.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub reason: String,
    /// False for reasons that stay true until someone changes a configuration (a wrong
    /// credential, a protocol version the collector does not speak): the agent gives up.
    pub retry: bool,
}

impl Refusal {
    pub fn final_(reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            retry: false,
        }
    }

    pub fn transient(reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            retry: true,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        to_json(self)
    }

    /// Reads a refusal; text that is not one (an older collector's plain reason) is taken as
    /// a reason worth retrying.
    pub fn decode(payload: &[u8]) -> Refusal {
        serde_json::from_slice(payload)
            .unwrap_or_else(|_| Refusal::transient(String::from_utf8_lossy(payload)))
    }
}

impl std::fmt::Display for Hello {
    /// For logs: what the peer chose (its host name, its format) with control characters
    /// escaped, so that a CR or LF cannot forge a line of the log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.agent_id {
            Some(agent) => write!(
                f,
                "{:?} {agent} (pid {} on {}, format={})",
                self.role,
                self.pid,
                printable(&self.hostname),
                printable(&self.format)
            ),
            None => write!(f, "{:?} client", self.role),
        }
    }
}

/// Text that agents sent (host names, process names, replies), with control characters shown
/// as escapes: printed raw, they could drive the reader's terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// The collector's answer to an accepted hello.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Welcome {
    pub version: u32,
    /// The highest data sequence already stored for this agent (0: none); the agent resends
    /// what follows it.
    pub resume_after: u64,
}

/// Data an agent dropped because its buffer was full while the collector was slow or gone.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Loss {
    pub frames: u64,
    pub bytes: u64,
    /// The sequence numbers dropped lie in this range (inclusive).
    pub first_sequence: u64,
    pub last_sequence: u64,
}

/// Parses a JSON message, naming the frame kind when it is not one.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    kind: FrameKind,
    payload: &[u8],
) -> Result<T, WireError> {
    serde_json::from_slice(payload).map_err(|error| bad(kind, error.to_string()))
}

pub fn to_json(message: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(message).expect("protocol messages always serialise")
}

/// Splits a data frame into its sequence number and body.
pub fn split_sequence(kind: FrameKind, payload: &[u8]) -> Result<(u64, &[u8]), WireError> {
    if payload.len() < 8 {
        return Err(bad(kind, "shorter than its 8-byte sequence number"));
    }
    let (head, body) = payload.split_at(8);
    let sequence = u64::from_be_bytes(head.try_into().expect("8 bytes"));
    if sequence == 0 {
        return Err(bad(kind, "sequence numbers start at 1"));
    }
    Ok((sequence, body))
}

/// A data frame's payload: sequence number, then body.
pub fn with_sequence(sequence: u64, body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(8 + body.len());
    payload.extend_from_slice(&sequence.to_be_bytes());
    payload.extend_from_slice(body);
    payload
}

/// Two u64s, as Ack (one), Ping and Pong carry.
pub fn encode_pair(first: u64, second: u64) -> Vec<u8> {
    let mut payload = first.to_be_bytes().to_vec();
    payload.extend_from_slice(&second.to_be_bytes());
    payload
}

pub fn decode_pair(kind: FrameKind, payload: &[u8]) -> Result<(u64, u64), WireError> {
    if payload.len() != 16 {
        return Err(bad(kind, format!("{} bytes, expected 16", payload.len())));
    }
    Ok((
        u64::from_be_bytes(payload[..8].try_into().expect("8 bytes")),
        u64::from_be_bytes(payload[8..].try_into().expect("8 bytes")),
    ))
}

pub fn decode_u64(kind: FrameKind, payload: &[u8]) -> Result<u64, WireError> {
    let bytes: [u8; 8] = payload
        .try_into()
        .map_err(|_| bad(kind, format!("{} bytes, expected 8", payload.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// An agent's answer to one command.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub serial: u32,
    pub ok: bool,
    pub message: String,
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = self.serial.to_be_bytes().to_vec();
        payload.push(u8::from(!self.ok));
        payload.extend_from_slice(self.message.as_bytes());
        payload
    }

    pub fn decode(payload: &[u8]) -> Result<Reply, WireError> {
        if payload.len() < 5 || payload[4] > 1 {
            return Err(bad(FrameKind::Reply, "not a serial and a status 0 or 1"));
        }
        Ok(Reply {
            serial: u32::from_be_bytes(payload[..4].try_into().expect("4 bytes")),
            ok: payload[4] == 0,
            message: String::from_utf8_lossy(&payload[5..]).into_owned(),
        })
    }
}

/// HPROF's socket commands (tags 0x01-0x08, CONTROL's sub-options 1-6) and openprof's
/// extensions (tags 0x80-0x83).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// 0x01 FORCE GC.
    ForceGc,
    /// 0x02 DUMP HEAP.
    DumpHeap,
    /// 0x03 ALLOC SITES: u2 flags, u4 cutoff ratio (an IEEE float).
    AllocSites { flags: u16, cutoff: f32 },
    /// 0x04 HEAP SUMMARY.
    HeapSummary,
    /// 0x05 EXIT THE VM.
    ExitVm,
    /// 0x06 DUMP TRACES.
    DumpTraces,
    /// 0x07 CPU SAMPLES: u2 ignored, u4 cutoff ratio.
    CpuSamples { cutoff: f32 },
    /// 0x08 CONTROL 0x1 / 0x2: allocation traces on or off.
    AllocTraces { on: bool },
    /// 0x08 CONTROL 0x3 / 0x4: CPU sampling on or off for one thread (its serial number, as
    /// the output numbers threads) or, with 0, for all.
    CpuSampling { on: bool, thread: u64 },
    /// 0x08 CONTROL 0x5.
    ClearCpuSamples,
    /// 0x08 CONTROL 0x6: u2 depth.
    SetMaxDepth { depth: u16 },
    /// 0x80 (openprof): start a new trace (traceStart).
    TraceStart,
    /// 0x81 (openprof): end the current trace (traceEnd).
    TraceEnd,
    /// 0x82 (openprof): a new filter block, in the `filter=` option's syntax.
    Filter { block: String },
    /// 0x83 (openprof): a snapshot marker with a name.
    Snapshot { name: String },
    /// 0x84 (openprof): method parameter tracing specifications to add, one a line
    /// (docs/mpt.md).
    MptAdd { specs: String },
    /// 0x85 (openprof): method parameter tracing specifications to remove, as they were added.
    MptRemove { specs: String },
    /// 0x86 (openprof): list the method parameter tracing specifications in force.
    MptList,
    /// 0x87 (openprof): dump what every engine recorded since its last dump, as a kill -QUIT
    /// does, but no heap dump.
    DumpProfile,
    /// 0x88 (openprof): u4 milliseconds: cpu=samples' interval from now on.
    SetInterval { ms: u32 },
}

const CMD_GC: u8 = 0x01;
const CMD_DUMP_HEAP: u8 = 0x02;
const CMD_ALLOC_SITES: u8 = 0x03;
const CMD_HEAP_SUMMARY: u8 = 0x04;
const CMD_EXIT: u8 = 0x05;
const CMD_DUMP_TRACES: u8 = 0x06;
const CMD_CPU_SAMPLES: u8 = 0x07;
const CMD_CONTROL: u8 = 0x08;
const CMD_TRACE_START: u8 = 0x80;
const CMD_TRACE_END: u8 = 0x81;
const CMD_FILTER: u8 = 0x82;
const CMD_SNAPSHOT: u8 = 0x83;
const CMD_MPT_ADD: u8 = 0x84;
const CMD_MPT_REMOVE: u8 = 0x85;
const CMD_MPT_LIST: u8 = 0x86;
const CMD_DUMP_PROFILE: u8 = 0x87;
const CMD_SET_INTERVAL: u8 = 0x88;

/// What a command may do beyond steering the profile; an agent carries out such commands only
/// when its `commands=` option allows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommandClass {
    /// Steers or dumps the profile: always allowed.
    Profile,
    /// Reads every object's contents (DUMP HEAP): `commands=heap`.
    Heap,
    /// Ends the JVM: `commands=exit`.
    Exit,
    /// Reads parameter values of running code (MPT_ADD, MPT_REMOVE): `commands=mpt`.
    Mpt,
}

impl CommandClass {
    /// The word of the `commands=` option that allows this class.
    pub fn option_word(self) -> &'static str {
        match self {
            CommandClass::Profile => "profile",
            CommandClass::Heap => "heap",
            CommandClass::Exit => "exit",
            CommandClass::Mpt => "mpt",
        }
    }
}

impl Command {
    /// What the command may do, for the agent's permission check.
    pub fn class(&self) -> CommandClass {
        match self {
            Command::DumpHeap => CommandClass::Heap,
            Command::ExitVm => CommandClass::Exit,
            Command::MptAdd { .. } | Command::MptRemove { .. } => CommandClass::Mpt,
            _ => CommandClass::Profile,
        }
    }

    /// The command as HPROF's record: `u1 tag, u4 serial, u4 length, body`, ids 8 bytes wide.
    pub fn encode(&self, serial: u32) -> Vec<u8> {
        let (tag, body): (u8, Vec<u8>) = match self {
            Command::ForceGc => (CMD_GC, vec![]),
            Command::DumpHeap => (CMD_DUMP_HEAP, vec![]),
            Command::AllocSites { flags, cutoff } => {
                let mut body = flags.to_be_bytes().to_vec();
                body.extend_from_slice(&cutoff.to_bits().to_be_bytes());
                (CMD_ALLOC_SITES, body)
            }
            Command::HeapSummary => (CMD_HEAP_SUMMARY, vec![]),
            Command::ExitVm => (CMD_EXIT, vec![]),
            Command::DumpTraces => (CMD_DUMP_TRACES, vec![]),
            Command::CpuSamples { cutoff } => {
                let mut body = 0u16.to_be_bytes().to_vec();
                body.extend_from_slice(&cutoff.to_bits().to_be_bytes());
                (CMD_CPU_SAMPLES, body)
            }
            Command::AllocTraces { on } => (CMD_CONTROL, control(if *on { 1 } else { 2 })),
            Command::CpuSampling { on, thread } => {
                let mut body = control(if *on { 3 } else { 4 });
                body.extend_from_slice(&thread.to_be_bytes());
                (CMD_CONTROL, body)
            }
            Command::ClearCpuSamples => (CMD_CONTROL, control(5)),
            Command::SetMaxDepth { depth } => {
                let mut body = control(6);
                body.extend_from_slice(&depth.to_be_bytes());
                (CMD_CONTROL, body)
            }
            Command::TraceStart => (CMD_TRACE_START, vec![]),
            Command::TraceEnd => (CMD_TRACE_END, vec![]),
            Command::Filter { block } => (CMD_FILTER, block.as_bytes().to_vec()),
            Command::Snapshot { name } => (CMD_SNAPSHOT, name.as_bytes().to_vec()),
            Command::MptAdd { specs } => (CMD_MPT_ADD, specs.as_bytes().to_vec()),
            Command::MptRemove { specs } => (CMD_MPT_REMOVE, specs.as_bytes().to_vec()),
            Command::MptList => (CMD_MPT_LIST, vec![]),
            Command::DumpProfile => (CMD_DUMP_PROFILE, vec![]),
            Command::SetInterval { ms } => (CMD_SET_INTERVAL, ms.to_be_bytes().to_vec()),
        };
        let mut record = vec![tag];
        record.extend_from_slice(&serial.to_be_bytes());
        record.extend_from_slice(&(body.len() as u32).to_be_bytes());
        record.extend_from_slice(&body);
        record
    }

    /// Parses an HPROF command record into its serial and command.
    pub fn decode(record: &[u8]) -> Result<(u32, Command), WireError> {
        let fault = |problem: String| bad(FrameKind::Command, problem);
        if record.len() < 9 {
            return Err(fault(format!(
                "{} bytes is shorter than a command's 9-byte header",
                record.len()
            )));
        }
        let tag = record[0];
        let serial = u32::from_be_bytes(record[1..5].try_into().expect("4 bytes"));
        let length = u32::from_be_bytes(record[5..9].try_into().expect("4 bytes")) as usize;
        let body = &record[9..];
        if body.len() != length {
            return Err(fault(format!(
                "command 0x{tag:02x} says {length} bytes follow, {} do",
                body.len()
            )));
        }
        let exact = |expected: usize| {
            if body.len() == expected {
                Ok(())
            } else {
                Err(fault(format!(
                    "command 0x{tag:02x} takes {expected} bytes, not {}",
                    body.len()
                )))
            }
        };
        let u16_at = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
        let f32_at =
            |at: usize| f32::from_bits(u32::from_be_bytes(body[at..at + 4].try_into().expect("4")));
        let text = || {
            String::from_utf8(body.to_vec())
                .map_err(|_| fault(format!("command 0x{tag:02x}'s text is not UTF-8")))
        };
        let command = match tag {
            CMD_GC => exact(0).map(|()| Command::ForceGc)?,
            CMD_DUMP_HEAP => exact(0).map(|()| Command::DumpHeap)?,
            CMD_ALLOC_SITES => {
                exact(6)?;
                Command::AllocSites {
                    flags: u16_at(0),
                    cutoff: cutoff(f32_at(2)).map_err(fault)?,
                }
            }
            CMD_HEAP_SUMMARY => exact(0).map(|()| Command::HeapSummary)?,
            CMD_EXIT => exact(0).map(|()| Command::ExitVm)?,
            CMD_DUMP_TRACES => exact(0).map(|()| Command::DumpTraces)?,
            CMD_CPU_SAMPLES => {
                exact(6)?;
                Command::CpuSamples {
                    cutoff: cutoff(f32_at(2)).map_err(fault)?,
                }
            }
            CMD_CONTROL => {
                if body.len() < 2 {
                    return Err(fault("CONTROL lacks its sub-option".into()));
                }
                match u16_at(0) {
                    1 | 2 => exact(2).map(|()| Command::AllocTraces { on: u16_at(0) == 1 })?,
                    3 | 4 => {
                        exact(10)?;
                        Command::CpuSampling {
                            on: u16_at(0) == 3,
                            thread: u64::from_be_bytes(body[2..10].try_into().expect("8")),
                        }
                    }
                    5 => exact(2).map(|()| Command::ClearCpuSamples)?,
                    6 => {
                        exact(4)?;
                        Command::SetMaxDepth { depth: u16_at(2) }
                    }
                    other => return Err(fault(format!("CONTROL sub-option {other} is unknown"))),
                }
            }
            CMD_TRACE_START => exact(0).map(|()| Command::TraceStart)?,
            CMD_TRACE_END => exact(0).map(|()| Command::TraceEnd)?,
            CMD_FILTER => Command::Filter { block: text()? },
            CMD_SNAPSHOT => Command::Snapshot { name: text()? },
            CMD_MPT_ADD => Command::MptAdd { specs: text()? },
            CMD_MPT_REMOVE => Command::MptRemove { specs: text()? },
            CMD_MPT_LIST => exact(0).map(|()| Command::MptList)?,
            CMD_DUMP_PROFILE => exact(0).map(|()| Command::DumpProfile)?,
            CMD_SET_INTERVAL => {
                exact(4)?;
                Command::SetInterval {
                    ms: u32::from_be_bytes(body[0..4].try_into().expect("4 bytes")),
                }
            }
            other => return Err(fault(format!("command tag 0x{other:02x} is unknown"))),
        };
        Ok((serial, command))
    }
}

fn control(sub_option: u16) -> Vec<u8> {
    sub_option.to_be_bytes().to_vec()
}

fn cutoff(value: f32) -> Result<f32, String> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("cutoff ratio {value} is not between 0.0 and 1.0"))
    }
}

/// A control client's request: a command for one agent, or for every connected agent.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ControlRequest {
    /// `None`: every connected agent.
    pub agent: Option<Uuid>,
    pub command: Command,
}

/// The replies to a control request, one per agent it went to.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ControlResponse {
    pub replies: Vec<AgentReply>,
    /// Set when the request itself was refused (no such agent, bad request).
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AgentReply {
    pub agent: Uuid,
    pub ok: bool,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_in_the_log_cannot_forge_a_line() {
        let hello = Hello {
            hostname: "web-1\r\n2026-11-28T00:00:00Z  WARN forged".into(),
            format: "a\u{1b}[31m".into(),
            ..Hello::new(Role::Agent, Some(Uuid::nil()))
        };
        let logged = hello.to_string();
        assert!(!logged.contains('\n') && !logged.contains('\r') && !logged.contains('\u{1b}'));
        assert!(logged.contains("web-1\\r\\n2026"), "{logged}");
    }

    fn all_commands() -> Vec<Command> {
        vec![
            Command::ForceGc,
            Command::DumpHeap,
            Command::AllocSites {
                flags: 1,
                cutoff: 0.25,
            },
            Command::HeapSummary,
            Command::ExitVm,
            Command::DumpTraces,
            Command::CpuSamples { cutoff: 0.0 },
            Command::AllocTraces { on: true },
            Command::AllocTraces { on: false },
            Command::CpuSampling {
                on: false,
                thread: 0,
            },
            Command::CpuSampling {
                on: true,
                thread: 7,
            },
            Command::ClearCpuSamples,
            Command::SetMaxDepth { depth: 2 },
            Command::TraceStart,
            Command::TraceEnd,
            Command::Filter {
                block: "+java.*".into(),
            },
            Command::Snapshot {
                name: "after login".into(),
            },
            Command::MptAdd {
                specs: "Slow.work(int) 1\nHashMap.get(Object) 1 instance_method:toString()".into(),
            },
            Command::MptRemove {
                specs: "Slow.work(int) 1".into(),
            },
            Command::MptList,
            Command::DumpProfile,
            Command::SetInterval { ms: 5 },
        ]
    }

    #[test]
    fn every_command_round_trips_through_hprof_records() {
        for (serial, command) in all_commands().into_iter().enumerate() {
            let record = command.encode(serial as u32);
            assert_eq!(
                Command::decode(&record).unwrap(),
                (serial as u32, command.clone())
            );
            // Every truncation is an error, never a panic.
            for cut in 0..record.len() {
                assert!(
                    Command::decode(&record[..cut]).is_err(),
                    "{command:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn hprof_command_layout_is_hprofs() {
        // CONTROL (0x08), serial 5, 4 bytes: sub-option 6 (set max stack depth), depth 3.
        assert_eq!(
            Command::SetMaxDepth { depth: 3 }.encode(5),
            [8, 0, 0, 0, 5, 0, 0, 0, 4, 0, 6, 0, 3]
        );
    }

    #[test]
    fn bad_commands_are_named() {
        let unknown = Command::decode(&[0x42, 0, 0, 0, 1, 0, 0, 0, 0]).unwrap_err();
        assert!(unknown.to_string().contains("0x42 is unknown"), "{unknown}");
        let mut sites = Command::AllocSites {
            flags: 0,
            cutoff: 0.5,
        }
        .encode(1);
        sites[11..15].copy_from_slice(&2.5f32.to_bits().to_be_bytes());
        let error = Command::decode(&sites).unwrap_err().to_string();
        assert!(error.contains("not between 0.0 and 1.0"), "{error}");
        let error = Command::decode(&[8, 0, 0, 0, 1, 0, 0, 0, 2, 0, 9])
            .unwrap_err()
            .to_string();
        assert!(error.contains("sub-option 9 is unknown"), "{error}");
    }

    #[test]
    fn frames_round_trip_and_bad_headers_are_named() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, FrameKind::Fragment, &with_sequence(3, b"<x/>")).unwrap();
        write_frame(&mut bytes, FrameKind::Ack, &3u64.to_be_bytes()).unwrap();
        let mut input = bytes.as_slice();
        let first = read_frame(&mut input).unwrap().unwrap();
        assert_eq!(first.kind, FrameKind::Fragment);
        assert_eq!(
            split_sequence(first.kind, &first.payload).unwrap(),
            (3, &b"<x/>"[..])
        );
        let ack = read_frame(&mut input).unwrap().unwrap();
        assert_eq!(decode_u64(ack.kind, &ack.payload).unwrap(), 3);
        assert!(read_frame(&mut input).unwrap().is_none());
        assert!(matches!(
            parse_header([99, 0, 0, 0, 0]),
            Err(WireError::UnknownKind(99))
        ));
        assert!(matches!(
            parse_header([4, 0xff, 0, 0, 0]),
            Err(WireError::TooLong(_))
        ));
        // A header cut short is an error, not a clean end.
        assert!(read_frame(&mut &[4u8, 0][..]).is_err());
        assert!(split_sequence(FrameKind::Fragment, &[0; 8]).is_err());
    }

    #[test]
    fn frames_arrive_in_pieces() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, FrameKind::Ping, &encode_pair(1, 2)).unwrap();
        write_frame(&mut bytes, FrameKind::Ack, &7u64.to_be_bytes()).unwrap();
        let mut buffer = FrameBuffer::default();
        let mut frames = Vec::new();
        for byte in &bytes {
            buffer.push(&[*byte]);
            while let Some(frame) = buffer.next_frame().unwrap() {
                frames.push(frame);
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(
            decode_pair(FrameKind::Ping, &frames[0].payload).unwrap(),
            (1, 2)
        );
        let mut bad = FrameBuffer::default();
        bad.push(&[200, 0, 0, 0, 0]);
        assert!(bad.next_frame().is_err());
    }

    #[test]
    fn hellos_and_refusals_round_trip() {
        let mut hello = Hello::new(Role::Agent, Some(Uuid::nil()));
        hello.hostname = "h".into();
        let parsed: Hello = parse_json(FrameKind::Hello, &to_json(&hello)).unwrap();
        assert_eq!(parsed, hello);
        let refusal = Refusal::final_("wrong agent credential");
        assert_eq!(Refusal::decode(&refusal.encode()), refusal);
        assert_eq!(
            Refusal::decode(b"plain words"),
            Refusal::transient("plain words")
        );
    }
}
