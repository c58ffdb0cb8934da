//! Fuzzes the wire protocol's decoders: any bytes, as a stream of frames (whole or in pieces),
//! a frame header, a command record, a reply, a JSON message, a handshake message or a data
//! frame's payload, must
//! decode or give an error, never panic; and what decodes encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openprof_format::handshake::{ClientHandshake, ServerHandshake};
use openprof_format::wire::{
    self, Command, ControlRequest, ControlResponse, Frame, FrameBuffer, FrameKind, Hello, Loss,
    Refusal, Reply, Role, Welcome, HEADER_LEN,
};

/// The frames a buffer yields from `pieces`, and whether it stopped at an error.
fn frames_of<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> (Vec<Frame>, bool) {
    let mut buffer = FrameBuffer::default();
    let mut frames = Vec::new();
    for piece in pieces {
        buffer.push(piece);
        loop {
            match buffer.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(_) => return (frames, true),
            }
        }
    }
    (frames, false)
}

fuzz_target!(|data: &[u8]| {
    // A stream read whole or cut where the first byte says: the same frames, the same fault,
    // and the frames encode back to the bytes they came from.
    let (whole, whole_failed) = frames_of(std::iter::once(data));
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let (pieces, pieces_failed) = frames_of(data.chunks(step));
    assert_eq!(whole, pieces);
    assert_eq!(whole_failed, pieces_failed);
    let mut encoded = Vec::new();
    for frame in &whole {
        wire::encode_frame(frame.kind, &frame.payload, &mut encoded);
    }
    assert_eq!(&data[..encoded.len()], &encoded[..]);
    // The blocking reader agrees with the buffer up to the first fault.
    let mut input = data;
    for frame in &whole {
        assert_eq!(wire::read_frame(&mut input).ok().flatten().as_ref(), Some(frame));
    }

    if let Some(header) = data.get(..HEADER_LEN) {
        if let Ok((kind, length)) = wire::parse_header(header.try_into().expect("5 bytes")) {
            assert_eq!(kind as u8, data[0]);
            assert!(length <= wire::MAX_PAYLOAD);
        }
    }

    if let Ok((serial, command)) = Command::decode(data) {
        let encoded = command.encode(serial);
        // CPU SAMPLES' first two body bytes are ignored, as in HPROF, and written as zero.
        if data[0] != 0x07 {
            assert_eq!(encoded, data);
        }
        assert_eq!(Command::decode(&encoded).ok(), Some((serial, command)));
    }
    if let Ok(reply) = Reply::decode(data) {
        if std::str::from_utf8(&data[5..]).is_ok() {
            assert_eq!(reply.encode(), data);
        }
        assert_eq!(Reply::decode(&reply.encode()).ok(), Some(reply));
    }

    if let Ok(hello) = wire::parse_json::<Hello>(FrameKind::Hello, data) {
        let _ = hello.to_string();
        let again: Hello = wire::parse_json(FrameKind::Hello, &wire::to_json(&hello)).unwrap();
        assert_eq!(again, hello);
    }
    // The handshake: a collector reading any hello and any proof, a client reading any
    // challenge, and any refusal, give errors, never panics; no proof passes without the key.
    let _ = Refusal::decode(data);
    if let Ok(server) = ServerHandshake::start(data) {
        let _ = server.challenge(b"key");
        assert!(server.finish(b"key", data).is_err());
    }
    let hello = Hello::new(Role::Control, None);
    if let Ok((mut client, _)) = ClientHandshake::start(hello, "key", None) {
        let _ = client.on_frame(Frame {
            kind: FrameKind::Challenge,
            payload: data.to_vec(),
        });
    }
    let _ = wire::parse_json::<Welcome>(FrameKind::Welcome, data);
    let _ = wire::parse_json::<Loss>(FrameKind::Loss, data);
    let _ = wire::parse_json::<ControlRequest>(FrameKind::Command, data);
    let _ = wire::parse_json::<ControlResponse>(FrameKind::Command, data);

    if let Ok((sequence, body)) = wire::split_sequence(FrameKind::Fragment, data) {
        assert!(sequence > 0);
        assert_eq!(wire::with_sequence(sequence, body), data);
    }
    if let Ok((first, second)) = wire::decode_pair(FrameKind::Pong, data) {
        assert_eq!(wire::encode_pair(first, second), data);
    }
    if let Ok(value) = wire::decode_u64(FrameKind::Ack, data) {
        assert_eq!(value.to_be_bytes(), data);
    }
});
