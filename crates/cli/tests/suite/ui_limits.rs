//! The UI's port against clients that hold connections open without a credential (`openprof
//! serve --http` with few descriptors): connections over the UI's bounds are answered 503 and
//! closed, idle and slow ones are closed once their request head is late, and meanwhile the
//! log in page answers another client and an agent connects to the collector.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

use crate::collector::{Collector, CONTROL_TOKEN};
use crate::ui::{agent_of, api_get, jvm};

/// A connection to `to` from the loopback address `source` (127.0.0.2: another client than the
/// tests' own 127.0.0.1).
fn connect_from(source: &str, to: &str) -> TcpStream {
    let to: SocketAddr = to.parse().expect("an address");
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
    socket
        .bind(&SocketAddr::new(source.parse().expect("an address"), 0).into())
        .expect("bind to a loopback address");
    socket.connect(&to.into()).expect("connect to the web UI");
    socket.into()
}

/// What the server sends on `stream` before it closes it, or None if it is still open after
/// `limit`.
fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return Some(answer),
            Ok(read) => answer.extend_from_slice(&chunk[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return Some(answer),
            Err(error) => panic!("reading from the web UI: {error}"),
        }
    }
}

#[test]
fn connections_without_a_credential_cannot_take_the_uis_port_or_the_agents_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    // 256 descriptors: before the UI's connections were bounded, 300 idle ones used them all.
    let collector = Collector::start_under(
        Some("ulimit -n 256 && exec \"$0\" \"$@\""),
        &dir.path().join("store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let web = collector.web.clone().expect("the web UI's address");

    // 300 connections from one client that send nothing.
    let mut held: Vec<TcpStream> = (0..300).map(|_| connect_from("127.0.0.2", &web)).collect();

    // Meanwhile another client logs in, and an agent connects to the collector and is listed.
    let (status, body) = api_get(&web, "/login", None);
    assert_eq!(status, 200, "{body}");
    let mut agent = jvm(&collector.address, "", "CpuSplit", &["300"]);
    let id = agent_of(&web, agent.id());
    assert!(!id.is_empty());
    let (status, fleet) = api_get(&web, "/api/fleet", Some(CONTROL_TOKEN));
    assert_eq!(status, 200, "{fleet}");

    // Every held connection ends: those over the bounds at once with 503, the others, which
    // never sent a request head, within the header timeout (10 s), unanswered. Before, they
    // stayed open 95 s.
    let mut turned_away = 0;
    for stream in &mut held {
        let answer = until_closed(stream, Duration::from_secs(60))
            .expect("a connection that sends nothing is closed by the UI");
        if answer.starts_with(b"HTTP/1.1 503") {
            turned_away += 1;
        } else {
            assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
        }
    }
    // One client holds at most the per-address share of the UI's connections (24 by default,
    // fewer with fewer descriptors).
    assert!(turned_away >= 300 - 24, "{turned_away} of 300 turned away");
    assert!(turned_away < 300, "no connection was served");

    // A request head sent one line a second is closed once the header timeout has passed,
    // whatever it keeps sending: before, such a connection stayed 70 s.
    let mut slow = connect_from("127.0.0.2", &web);
    slow.write_all(b"GET /login HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut lines = 0;
    let answer = loop {
        assert!(
            lines < 60,
            "a trickled request head was still read after 60 lines"
        );
        if let Some(answer) = until_closed(&mut slow, Duration::from_secs(1)) {
            break answer;
        }
        if slow
            .write_all(format!("X-Line-{lines}: 1\r\n").as_bytes())
            .is_err()
        {
            break Vec::new();
        }
        lines += 1;
    };
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    // The agent stayed connected through it all.
    assert_eq!(agent_of(&web, agent.id()), id);
    let _ = agent.kill();
    let _ = agent.wait();
}

/// One request from `source` with `bearer`: its status.
fn status_from(source: &str, web: &str, path: &str, bearer: &str) -> u16 {
    let stream = connect_from(source, web);
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    crate::ui::exchange(stream, web, "GET", path, Some(bearer), None).0
}

#[test]
fn guessing_the_credential_is_throttled_per_address_and_logged_in_counts() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start_with(
        &dir.path().join("store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let web = collector.web.clone().expect("the web UI's address");
    // 20 wrong bearer tokens from one address are refused as wrong; from the 21st its tries
    // are not even checked, the right credential included, until its minute is over.
    let statuses: Vec<u16> = (0..40)
        .map(|guess| status_from("127.0.0.2", &web, "/api/fleet", &format!("guess-{guess}")))
        .collect();
    assert!(
        statuses[..20].iter().all(|&status| status == 401),
        "{statuses:?}"
    );
    assert!(
        statuses[20..].iter().all(|&status| status == 429),
        "{statuses:?}"
    );
    assert_eq!(
        status_from("127.0.0.2", &web, "/api/fleet", CONTROL_TOKEN),
        429
    );
    // Another address is not held back.
    assert_eq!(
        status_from("127.0.0.1", &web, "/api/fleet", CONTROL_TOKEN),
        200
    );
    // The log says it in counts, not a line a guess.
    let log = collector.log_with("more like it");
    let lines = log
        .lines()
        .filter(|line| line.contains("wrong credential"))
        .count();
    assert!(lines < 10, "{lines} lines:\n{log}");
}
