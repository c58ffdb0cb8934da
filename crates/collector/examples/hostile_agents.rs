//! Hostile agents for the collector's soak benchmark (`bench/soak.py`): each holds the agent
//! credential and tries one way to hurt the collector or other agents' data.
//!
//! Usage: hostile_agents KIND ADDRESS TOKEN [ARG]
//!   huge-record        an HPROF binary record that says it is 4 GiB long, then 300 MiB of it
//!   endless-text       200 MiB of HPROF text with no table's END line
//!   new-ids N          N handshakes, each with a new agent id
//!   crlf-host          a host name with CR, LF and terminal escapes
//!   steal-id ID        agent id ID (another agent's) with a new identity key, and one window
//!   huge-reply SECONDS an agent answering every command with 3 MB of control bytes, for SECONDS
//! Prints one line saying what it did; exits 1 if the collector broke a promise it can see.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openprof_collector::client::{self, Connected, Endpoint};
use openprof_format::handshake::Identity;
use openprof_format::hprof_binary::sample::one_cpu_window;
use openprof_format::wire::{self, Command, FrameKind, Hello, Reply, Role};

fn connect(address: &str, token: &str, agent: uuid::Uuid, host: &str, format: &str) -> Connected {
    let mut hello = Hello::new(Role::Agent, Some(agent));
    hello.hostname = host.into();
    hello.format = format.into();
    let identity = Arc::new(Identity::generate().expect("an identity key"));
    client::connect(&Endpoint::plain(address), hello, token, Some(identity))
        .unwrap_or_else(|why| fail(&format!("handshake: {why}")))
}

fn fail(why: &str) -> ! {
    eprintln!("hostile_agents: {why}");
    std::process::exit(1)
}

/// Sends `bytes` as data frames of at most 1 MiB, numbered from `sequence`; returns the next.
fn send(connected: &mut Connected, mut sequence: u64, bytes: &[u8]) -> u64 {
    for chunk in bytes.chunks(1 << 20) {
        if wire::write_frame(
            &mut connected.stream,
            FrameKind::Hprof,
            &wire::with_sequence(sequence, chunk),
        )
        .is_err()
        {
            // The collector may close a stream it refuses: that is its right.
            return sequence;
        }
        sequence += 1;
    }
    sequence
}

/// Says goodbye as data frame `sequence` (the next after the last sent) and reads until the
/// collector closes or acknowledges it.
fn goodbye(connected: &mut Connected, sequence: u64) {
    let _ = wire::write_frame(
        &mut connected.stream,
        FrameKind::Goodbye,
        &wire::with_sequence(sequence, b""),
    );
    let _ = connected.stream.flush();
    let _ = connected
        .stream
        .socket()
        .set_read_timeout(Some(Duration::from_secs(30)));
    while let Ok(Some(frame)) = wire::read_frame(&mut connected.stream) {
        if frame.kind == FrameKind::Ack && frame.payload.as_slice() == sequence.to_be_bytes() {
            break;
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, address, token, rest @ ..] = args.as_slice() else {
        fail("usage: hostile_agents KIND ADDRESS TOKEN [ARG]");
    };
    let arg = rest.first().map(String::as_str);
    match kind.as_str() {
        "huge-record" => {
            let mut connected = connect(address, token, uuid::Uuid::new_v4(), "hostile", "b");
            let mut head = b"JAVA PROFILE 1.0.2\0".to_vec();
            head.extend_from_slice(&8u32.to_be_bytes());
            head.extend_from_slice(&0u64.to_be_bytes());
            // A CPU SAMPLES record (tag 0x0d) claiming u32::MAX bytes.
            head.extend_from_slice(&[0x0d, 0, 0, 0, 0]);
            head.extend_from_slice(&u32::MAX.to_be_bytes());
            let mut sequence = send(&mut connected, 1, &head);
            let chunk = vec![0xabu8; 1 << 20];
            for _ in 0..300 {
                sequence = send(&mut connected, sequence, &chunk);
            }
            goodbye(&mut connected, sequence);
            println!("huge-record: sent a 4 GiB record header and 300 MiB");
        }
        "endless-text" => {
            let mut connected = connect(address, token, uuid::Uuid::new_v4(), "hostile", "a");
            let mut sequence = send(
                &mut connected,
                1,
                b"JAVA PROFILE 1.0.1, created Sat Nov 28 00:00:00 2026\n\nCPU SAMPLES BEGIN \
                  (total = 1) Sat Nov 28 00:00:00 2026\nrank   self  accum   count trace method\n",
            );
            let lines = b"    1 100.00% 100.00%       1 300001 com.example.Class.method\n"
                .repeat((1 << 20) / 64);
            for _ in 0..200 {
                sequence = send(&mut connected, sequence, &lines);
            }
            goodbye(&mut connected, sequence);
            println!("endless-text: sent 200 MiB of text without an END line");
        }
        "new-ids" => {
            let count: usize = arg.and_then(|n| n.parse().ok()).unwrap_or(3000);
            let mut refused = 0;
            for _ in 0..count {
                let mut hello = Hello::new(Role::Agent, Some(uuid::Uuid::new_v4()));
                hello.hostname = "hostile".into();
                hello.format = "b".into();
                let identity = Arc::new(Identity::generate().expect("an identity key"));
                if client::connect(&Endpoint::plain(address), hello, token, Some(identity)).is_err()
                {
                    refused += 1;
                }
            }
            println!("new-ids: {count} handshakes with new ids, {refused} refused");
        }
        "crlf-host" => {
            let mut connected = connect(
                address,
                token,
                uuid::Uuid::new_v4(),
                "evil\u{1b}[2J\r\n2026-01-01T00:00:00Z  WARN forged line",
                "b",
            );
            goodbye(&mut connected, 1);
            println!("crlf-host: connected with CR, LF and escapes in its host name");
        }
        "steal-id" => {
            let agent: uuid::Uuid = arg
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| fail("steal-id needs an agent id"));
            let mut hello = Hello::new(Role::Agent, Some(agent));
            hello.hostname = "thief".into();
            hello.format = "b".into();
            let identity = Arc::new(Identity::generate().expect("an identity key"));
            match client::connect(&Endpoint::plain(address), hello, token, Some(identity)) {
                Ok(mut connected) => {
                    // Far above the real agent's sequence numbers.
                    let sequence = 1 << 40;
                    let next = send(
                        &mut connected,
                        sequence,
                        &one_cpu_window("Forged", "work", 1_000_000),
                    );
                    goodbye(&mut connected, next);
                    println!("steal-id: {agent} taken on this collector, one forged window sent");
                }
                Err(why) => println!("steal-id: {agent} refused: {why}"),
            }
        }
        "huge-reply" => {
            let seconds: u64 = arg.and_then(|n| n.parse().ok()).unwrap_or(60);
            let mut connected = connect(address, token, uuid::Uuid::new_v4(), "hostile", "b");
            let _ = connected
                .stream
                .socket()
                .set_read_timeout(Some(Duration::from_secs(1)));
            let message: String = (0..3_000_000).map(|i| char::from((i % 31) as u8)).collect();
            let until = Instant::now() + Duration::from_secs(seconds);
            let mut replies = 0;
            while Instant::now() < until {
                let frame = match wire::read_frame(&mut connected.stream) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => fail("the collector closed the huge-reply agent's connection"),
                    Err(_) => continue,
                };
                match frame.kind {
                    FrameKind::Ping => {
                        let number = &frame.payload[..8.min(frame.payload.len())];
                        let mut pong = number.to_vec();
                        pong.extend_from_slice(&0u64.to_be_bytes());
                        let _ = wire::write_frame(&mut connected.stream, FrameKind::Pong, &pong);
                    }
                    FrameKind::Command => {
                        let Some(record) = connected.signer.open(&frame.payload) else {
                            fail("a command not sealed with the session key");
                        };
                        let serial = Command::decode(record).map(|(serial, _)| serial);
                        let reply = Reply {
                            serial: serial.unwrap_or(0),
                            ok: true,
                            message: message.clone(),
                        };
                        let _ = wire::write_frame(
                            &mut connected.stream,
                            FrameKind::Reply,
                            &reply.encode(),
                        );
                        replies += 1;
                    }
                    _ => {}
                }
            }
            goodbye(&mut connected, 1);
            println!("huge-reply: answered {replies} commands with 3 MB each");
        }
        other => fail(&format!("{other} is not a kind of hostile agent")),
    }
}
