//! A replay client: sends a recorded trace to a collector as an agent would, optionally with
//! its elements shuffled and some sent twice, to test collation and to measure ingest; or an
//! HPROF profile as an HPROF-output agent's stream (for the web UI's tests and benchmarks).

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openprof_format::handshake::Identity;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};
use openprof_format::wire::{self, FrameBuffer, FrameKind, Hello, Refusal, Role};
use uuid::Uuid;

use crate::client::{connect, Endpoint, Transport};
use crate::scan::scan_fragment;

/// How long the acknowledgement reader holds the connection before the sender may write.
const ACK_POLL: Duration = Duration::from_millis(1);

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayPlan {
    /// Elements per fragment frame.
    pub elements_per_fragment: usize,
    /// Shuffle the elements with this seed.
    pub shuffle: Option<u64>,
    /// Send every n-th fragment a second time (0: never).
    pub duplicate_every: usize,
    /// Give the recording's process, agent and trace fresh ids, so that one recording can be
    /// replayed as many distinct agents.
    pub fresh_ids: bool,
    /// The recording is an HPROF profile (text or binary), sent as HPROF output in frames of
    /// 256 KiB, not a trace.
    pub hprof: bool,
}

/// The recording with its processId, agentId and traceId replaced by fresh ones.
fn with_fresh_ids(recording: &[u8]) -> Result<Vec<u8>, String> {
    use openprof_format::trace::TraceElement;
    let mut body = recording;
    if let Some(rest) = body.strip_prefix(DOCUMENT_HEAD.as_bytes()) {
        body = rest;
    }
    let body = body.strip_suffix(DOCUMENT_TAIL.as_bytes()).unwrap_or(body);
    let mut old = Vec::new();
    for element in scan_fragment(body)?.elements {
        match element.hierarchy {
            Some(TraceElement::ProcessCreate(e)) => old.push(e.process_id),
            Some(TraceElement::AgentCreate(e)) => old.push(e.agent_id),
            Some(TraceElement::TraceStart(e)) => old.push(e.trace_id),
            _ => {}
        }
    }
    let mut text = String::from_utf8(recording.to_vec()).map_err(|_| "not UTF-8")?;
    for id in old {
        text = text.replace(&id.to_string(), &Uuid::new_v4().to_string());
    }
    Ok(text.into_bytes())
}

/// What a replay did.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    pub agent: Uuid,
    pub elements: usize,
    pub frames: usize,
    pub bytes: usize,
    /// From the first frame sent to the acknowledgement of the last.
    pub elapsed: Duration,
    /// Time from sending a frame to its acknowledgement, sorted.
    pub ack_delays: Vec<Duration>,
}

/// The top-level elements of a recorded trace (document or fragments), as byte slices.
pub fn recorded_elements(recording: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut body = recording;
    if let Some(rest) = body.strip_prefix(DOCUMENT_HEAD.as_bytes()) {
        body = rest
            .strip_suffix(DOCUMENT_TAIL.as_bytes())
            .ok_or("the document does not end with </TRACE>")?;
    }
    let summary = scan_fragment(body)?;
    Ok(summary
        .elements
        .iter()
        .map(|element| &body[element.range.clone()])
        .collect())
}

/// A small deterministic generator (xorshift), so that a shuffle is repeatable from its seed.
fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed.max(1);
    for i in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(i, (state % (i as u64 + 1)) as usize);
    }
}

/// Sends `recording` to the collector at `endpoint` as a new agent and waits until the
/// collector has acknowledged all of it.
pub fn replay(
    endpoint: &Endpoint,
    token: &str,
    recording: &[u8],
    plan: &ReplayPlan,
) -> Result<ReplayReport, String> {
    let (kind, format, elements, fragments) = if plan.hprof {
        let format = if recording.starts_with(b"JAVA PROFILE 1.0.2\0") {
            "b"
        } else {
            "a"
        };
        let chunks: Vec<Vec<u8>> = recording.chunks(256 << 10).map(<[u8]>::to_vec).collect();
        (FrameKind::Hprof, format, 0, chunks)
    } else {
        let renamed;
        let recording = if plan.fresh_ids {
            renamed = with_fresh_ids(recording)?;
            renamed.as_slice()
        } else {
            recording
        };
        let mut elements = recorded_elements(recording)?;
        if let Some(seed) = plan.shuffle {
            shuffle(&mut elements, seed);
        }
        let per = plan.elements_per_fragment.max(1);
        let mut fragments: Vec<Vec<u8>> = Vec::new();
        for (index, chunk) in elements.chunks(per).enumerate() {
            let mut fragment = Vec::new();
            for element in chunk {
                fragment.extend_from_slice(element);
                fragment.push(b'\n');
            }
            if plan.duplicate_every > 0 && index % plan.duplicate_every == plan.duplicate_every - 1
            {
                fragments.push(fragment.clone());
            }
            fragments.push(fragment);
        }
        (FrameKind::Fragment, "x", elements.len(), fragments)
    };
    let agent = Uuid::new_v4();
    let mut hello = Hello::new(Role::Agent, Some(agent));
    hello.hostname = "replay".into();
    hello.format = format.into();
    hello.options = "replay".into();
    let identity = Arc::new(Identity::generate().map_err(|error| error.to_string())?);
    let connected = connect(endpoint, hello, token, Some(identity))?;
    let address = endpoint.address.clone();
    let io = move |error: std::io::Error| format!("talking to {address}: {error}");
    // Plain TCP: the acknowledgement reader reads a socket of its own, blocking. TLS can't be
    // split: the reader and the sender take turns on the one stream, the reader waiting at
    // most ACK_POLL each time.
    let plain_reader = match endpoint.tls {
        None => Some(connected.stream.socket().try_clone().map_err(io.clone())?),
        Some(_) => {
            connected
                .stream
                .socket()
                .set_read_timeout(Some(ACK_POLL))
                .map_err(io.clone())?;
            None
        }
    };
    let stream: Arc<Mutex<Box<dyn Transport>>> = Arc::new(Mutex::new(connected.stream));
    let reader = stream.clone();
    let total = fragments.len() as u64 + 1;
    let acks = std::thread::spawn(move || -> Result<Vec<(u64, Instant)>, String> {
        let mut seen = Vec::new();
        let mut buffer = FrameBuffer::default();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            while let Some(frame) = buffer.next_frame().map_err(|error| error.to_string())? {
                match frame.kind {
                    FrameKind::Ack => {
                        let sequence = wire::decode_u64(frame.kind, &frame.payload)
                            .map_err(|error| error.to_string())?;
                        seen.push((sequence, Instant::now()));
                        if sequence >= total {
                            return Ok(seen);
                        }
                    }
                    FrameKind::Ping => {}
                    FrameKind::Refused => {
                        return Err(format!(
                            "closed by the collector: {}",
                            Refusal::decode(&frame.payload).reason
                        ))
                    }
                    other => return Err(format!("unexpected {other:?} frame")),
                }
            }
            let read = match plain_reader.as_ref() {
                Some(mut socket) => socket.read(&mut chunk),
                None => reader
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .read(&mut chunk),
            };
            match read {
                Ok(0) => {
                    return Err(
                        "the collector closed the connection before acknowledging everything"
                            .into(),
                    )
                }
                Ok(read) => buffer.push(&chunk[..read]),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    std::thread::yield_now()
                }
                Err(error) => return Err(format!("reading: {error}")),
            }
        }
    });
    let started = Instant::now();
    let mut sent_at = Vec::with_capacity(fragments.len() + 1);
    let mut bytes = 0;
    // Frames go out in batches of about a megabyte, each written while holding the stream.
    let mut batch = Vec::with_capacity(1 << 20);
    let mut batch_frames = 0;
    let mut send = |batch: &mut Vec<u8>, batch_frames: &mut usize| -> Result<(), String> {
        let mut stream = stream
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stream
            .write_all(batch)
            .and_then(|()| stream.flush())
            .map_err(io.clone())?;
        drop(stream);
        let now = Instant::now();
        sent_at.extend(std::iter::repeat_n(now, *batch_frames));
        batch.clear();
        *batch_frames = 0;
        Ok(())
    };
    for (index, fragment) in fragments.iter().enumerate() {
        let payload = wire::with_sequence(index as u64 + 1, fragment);
        bytes += payload.len();
        wire::encode_frame(kind, &payload, &mut batch);
        batch_frames += 1;
        if batch.len() >= 1 << 20 {
            send(&mut batch, &mut batch_frames)?;
        }
    }
    wire::encode_frame(
        FrameKind::Goodbye,
        &wire::with_sequence(total, &[]),
        &mut batch,
    );
    batch_frames += 1;
    send(&mut batch, &mut batch_frames)?;
    let acked = acks
        .join()
        .map_err(|_| "the acknowledgement reader failed".to_string())??;
    let elapsed = started.elapsed();
    // Each ack covers every sequence up to it.
    let mut ack_delays = Vec::new();
    let mut next = 1u64;
    for (sequence, at) in acked {
        while next <= sequence {
            let sent = sent_at[(next - 1) as usize];
            ack_delays.push(at.saturating_duration_since(sent));
            next += 1;
        }
    }
    ack_delays.sort();
    Ok(ReplayReport {
        agent,
        elements,
        frames: fragments.len(),
        bytes,
        elapsed,
        ack_delays,
    })
}
