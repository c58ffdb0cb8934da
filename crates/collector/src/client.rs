//! The blocking clients of a collector: connect (TCP, or TLS verified against a CA file), run
//! the wire's handshake (crate `openprof_format::handshake`), and send control requests as
//! `openprof control` does. The replay client connects through here too.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use openprof_format::handshake::{
    ClientHandshake, ClientStep, CommandSigner, HandshakeError, Identity,
};
use openprof_format::wire::{
    self, ControlRequest, ControlResponse, FrameKind, Hello, Refusal, Role, Welcome,
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
    /// TLS, trusting the CA certificates of this PEM file.
    pub tls_ca: Option<std::path::PathBuf>,
}

impl Endpoint {
    pub fn plain(address: &str) -> Endpoint {
        Endpoint {
            address: address.to_string(),
            tls_ca: None,
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
    match &endpoint.tls_ca {
        None => Ok(Box::new(socket)),
        Some(ca) => {
            let ca = ca.to_string_lossy();
            let config = openprof_format::tls_client::config(&ca)
                .map_err(|error| format!("--tls-ca {error}"))?;
            let host = address
                .rsplit_once(':')
                .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or(address);
            Ok(Box::new(openprof_format::tls_client::connect(
                config, host, socket,
            )?))
        }
    }
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
