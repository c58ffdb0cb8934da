//! The blocking clients of a collector: connect (TCP, or TLS verified against a CA file or, in
//! the collector's own process, against its own certificate), run the wire's handshake (crate
//! `openprof_format::handshake`), and send control requests as `openprof control` does. The
//! replay client connects through here too.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use openprof_format::handshake::{
    ClientHandshake, ClientStep, CommandSigner, HandshakeError, Identity,
};
use openprof_format::wire::{
    self, Command, ControlRequest, ControlResponse, FrameKind, Hello, Refusal, Role, Welcome,
};

/// How long connecting and the handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A byte stream to the collector: TCP, or TLS over TCP.
pub trait Transport: Read + Write + Send {
    /// The TCP socket underneath, for timeouts.
    fn socket(&self) -> &TcpStream;
}

impl Transport for TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }
}

impl Transport
    for tokio_rustls::rustls::StreamOwned<tokio_rustls::rustls::ClientConnection, TcpStream>
{
    fn socket(&self) -> &TcpStream {
        self.get_ref()
    }
}

/// Where a client connects, and how.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `host:port`.
    pub address: String,
    /// TLS, and whom it trusts; plain TCP without.
    pub tls: Option<Trust>,
}

/// Whose certificate a TLS client accepts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// One signed by the CA certificates of this PEM file, for the host name connected to
    /// (`--tls-ca`).
    CaFile(std::path::PathBuf),
    /// What this configuration accepts: the web UI's, in the collector's process, accepts the
    /// collector's own certificate and no other (`crate::tls::Tls::own_client`).
    Config(Arc<tokio_rustls::rustls::ClientConfig>),
}

impl Endpoint {
    pub fn plain(address: &str) -> Endpoint {
        Endpoint {
            address: address.to_string(),
            tls: None,
        }
    }
}

/// An authenticated connection.
pub struct Connected {
    pub stream: Box<dyn Transport>,
    pub welcome: Welcome,
    /// The session's command key (agents check the collector's commands with it).
    pub signer: CommandSigner,
}

fn open_stream(endpoint: &Endpoint) -> Result<Box<dyn Transport>, String> {
    let address = &endpoint.address;
    let resolved = address
        .to_socket_addrs()
        .map_err(|error| format!("can't resolve {address}: {error}"))?
        .next()
        .ok_or_else(|| format!("{address} resolves to no address"))?;
    let socket = TcpStream::connect_timeout(&resolved, HANDSHAKE_TIMEOUT)
        .map_err(|error| format!("can't connect to the collector at {address}: {error}"))?;
    let _ = socket.set_nodelay(true);
    socket
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|error| error.to_string())?;
    let config = match &endpoint.tls {
        None => return Ok(Box::new(socket)),
        Some(Trust::CaFile(ca)) => openprof_format::tls_client::config(&ca.to_string_lossy())
            .map_err(|error| format!("--tls-ca {error}"))?,
        Some(Trust::Config(config)) => config.clone(),
    };
    let host = address
        .rsplit_once(':')
        .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(address);
    Ok(Box::new(openprof_format::tls_client::connect(
        config, host, socket,
    )?))
}

/// Connects and authenticates with `credential`; the collector must prove it knows it too.
pub fn connect(
    endpoint: &Endpoint,
    hello: Hello,
    credential: &str,
    identity: Option<Arc<Identity>>,
) -> Result<Connected, String> {
    let mut stream = open_stream(endpoint)?;
    let failed = |error: HandshakeError| format!("collector {}: {error}", endpoint.address);
    let (mut handshake, first) =
        ClientHandshake::start(hello, credential, identity).map_err(failed)?;
    let io = |error: std::io::Error| format!("talking to {}: {error}", endpoint.address);
    stream.write_all(&first).map_err(io)?;
    stream.flush().map_err(io)?;
    loop {
        let frame = wire::read_frame(&mut stream)
            .map_err(|error| format!("collector {}: {error}", endpoint.address))?
            .ok_or_else(|| {
                format!(
                    "the collector at {} closed the connection during the handshake",
                    endpoint.address
                )
            })?;
        match handshake.on_frame(frame).map_err(failed)? {
            ClientStep::Send(bytes) => {
                stream.write_all(&bytes).map_err(io)?;
                stream.flush().map_err(io)?;
            }
            ClientStep::Done(signer, welcome) => {
                stream
                    .socket()
                    .set_read_timeout(None)
                    .map_err(|error| error.to_string())?;
                return Ok(Connected {
                    stream,
                    welcome,
                    signer,
                });
            }
        }
    }
}

/// Sends one control request through a collector and returns its agents' replies.
pub fn send_control(
    endpoint: &Endpoint,
    credential: &str,
    request: &ControlRequest,
) -> Result<ControlResponse, String> {
    let hello = Hello::new(Role::Control, None);
    let Connected { mut stream, .. } = connect(endpoint, hello, credential, None)?;
    let io = |error: std::io::Error| format!("talking to the collector: {error}");
    wire::write_frame(&mut stream, FrameKind::Command, &wire::to_json(request)).map_err(io)?;
    stream.flush().map_err(io)?;
    let reply = wire::read_frame(&mut stream)
        .map_err(|error| error.to_string())?
        .ok_or("the collector closed the connection before replying")?;
    match reply.kind {
        FrameKind::Reply => {
            wire::parse_json(FrameKind::Reply, &reply.payload).map_err(|error| error.to_string())
        }
        FrameKind::Refused => Err(format!(
            "the collector refused: {}",
            Refusal::decode(&reply.payload).reason
        )),
        other => Err(format!("the collector answered with {other:?}")),
    }
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
        "dump",
        "interval",
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
        "dump" => none(Command::DumpProfile),
        "interval" => {
            let text = argument.ok_or_else(|| needs("milliseconds, e.g. 'interval 5'"))?;
            let ms = text
                .parse::<u32>()
                .ok()
                .filter(|ms| (1..=openprof_format::options::MAX_INTERVAL_MS).contains(ms))
                .ok_or_else(|| {
                    format!(
                        "interval '{text}' is not a number of milliseconds from 1 to {}",
                        openprof_format::options::MAX_INTERVAL_MS
                    )
                })?;
            Ok(Command::SetInterval { ms })
        }
        other => Err(format!(
            "'{other}' is not a command; the commands are: {}",
            command_names().join(", ")
        )),
    }
}
