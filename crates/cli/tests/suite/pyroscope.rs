//! `openprof serve --pyroscope`: a collector pushes a JVM's continuous windows to an HTTP
//! receiver of the test's own, which answers as Pyroscope's ingest API does (no Pyroscope server
//! can be installed here), through an outage and a collector killed with a push in flight;
//! `go tool pprof` reads what was pushed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openprof_testkit::{java_command, poll, wait_with_limit};

use crate::collector::{agent_options, Collector};
use crate::fleet::{agents_in, stored_samples};
use crate::helpers::text;
use crate::views_pprof::{go_pprof, parse_top};

/// Requests the receiver refuses first (503, as an unavailable Pyroscope answers).
const REFUSED_FIRST: usize = 2;

/// A request the receiver took.
#[derive(Clone, Debug)]
struct Push {
    method: String,
    path: String,
    query: BTreeMap<String, String>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Seen {
    refused: usize,
    taken: Vec<Push>,
    /// Requests held unanswered (the one in flight when the collector was killed).
    held: usize,
}

/// The HTTP receiver: refuses the first requests, then takes them, but for one held without
/// an answer (the first after `hold_next` is set) until `released`.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
    hold_next: Arc<AtomicBool>,
    released: Arc<AtomicBool>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let hold_next = Arc::new(AtomicBool::new(false));
        let released = Arc::new(AtomicBool::new(false));
        let receiver = Receiver {
            url,
            seen,
            hold_next,
            released,
        };
        let (seen, hold_next, released) = (
            receiver.seen.clone(),
            receiver.hold_next.clone(),
            receiver.released.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                answer(stream, &seen, &hold_next, &released);
            }
        });
        receiver
    }

    /// Waits until `done` holds of what was seen.
    fn wait_for(&self, what: &str, done: impl Fn(&Seen) -> bool, collector: &Collector) {
        poll(Duration::from_secs(120), || {
            done(&self.seen.lock().unwrap()).then_some(())
        })
        .unwrap_or_else(|| panic!("no {what} came\n{}", collector.log()));
    }

    fn taken(&self) -> Vec<Push> {
        self.seen.lock().unwrap().taken.clone()
    }
}

/// Reads one request from `stream` and answers it as `seen` and the flags say (one request a
/// connection: the answer closes it). What went wrong is asserted by the test, not here.
fn answer(stream: TcpStream, seen: &Mutex<Seen>, hold_next: &AtomicBool, released: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let target = words.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let push = Push {
        method,
        path: path.to_string(),
        query: query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, value)| (form_decoded(name), form_decoded(value)))
            .collect(),
        body,
    };
    let status = {
        let mut seen = seen.lock().unwrap();
        if seen.refused < REFUSED_FIRST {
            seen.refused += 1;
            Some("503 Service Unavailable")
        } else if seen.held == 0 && hold_next.load(Ordering::Relaxed) {
            seen.held += 1;
            None
        } else {
            seen.taken.push(push);
            Some("200 OK")
        }
    };
    let Some(status) = status else {
        // In flight: no answer until the collector that sent it is gone (the test's limit),
        // then none at all.
        poll(Duration::from_secs(300), || {
            released.load(Ordering::Relaxed).then_some(())
        });
        return;
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

/// A query string's part as a form decodes it (`+` a space, `%XX` a byte; a `%` without two
/// hex digits kept as it is, for the test to see).
fn form_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match (bytes[at], escaped) {
            (_, Some(byte)) => {
                decoded.push(byte);
                at += 2;
            }
            (b'+', None) => decoded.push(b' '),
            (byte, None) => decoded.push(byte),
        }
        at += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// `app{name=value,...}` split into the application and its labels.
fn series(name: &str) -> (String, BTreeMap<String, String>) {
    let (application, rest) = name.split_once('{').unwrap_or_else(|| panic!("{name}"));
    let labels = rest
        .strip_suffix('}')
        .unwrap_or_else(|| panic!("{name}"))
        .split(',')
        .map(|pair| {
            let (label, value) = pair.split_once('=').unwrap_or_else(|| panic!("{name}"));
            (label.to_string(), value.to_string())
        })
        .collect();
    (application.to_string(), labels)
}

#[test]
fn windows_are_pushed_to_pyroscope_as_pprof_each_once_through_an_outage_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let receiver = Receiver::start();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let first = Collector::start_with(&store, "127.0.0.1:0", &["--pyroscope", &receiver.url]);
    let address = first.address.clone();
    let options = agent_options(
        &address,
        "cpu=samples,interval=2,format=b,doe=n,continuous=1s,label=service:split,\
         label=team-name:perf-eng",
    );
    // Long enough for windows after the outage and after the restart.
    let (mut command, _run) = java_command(Some(&options), "CpuSplit", &["8"]);
    let jvm = command.spawn().expect("start java");
    let pid = jvm.id();
    // Pyroscope refuses the first pushes, then takes them; then the collector is killed while
    // a push is in flight: Pyroscope never took that one, the restarted collector sends it.
    first.log_with("Pyroscope takes windows again");
    receiver.hold_next.store(true, Ordering::Relaxed);
    receiver.wait_for("push held in flight", |seen| seen.held > 0, &first);
    let first_log = first.log();
    drop(first);
    receiver.released.store(true, Ordering::Relaxed);
    let second = Collector::start_with(&store, &address, &["--pyroscope", &receiver.url]);
    let output = wait_with_limit(jvm, Duration::from_secs(180));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        first_log.contains("windows wait in the store: Pyroscope at")
            && first_log.contains("answered 503"),
        "{first_log}"
    );
    let agents = agents_in(&store);
    assert_eq!(agents.len(), 1, "{agents:?}");
    let (_, _, stored) = stored_samples(&store, &agents[0]);
    assert!(stored >= 500, "{stored} samples stored");
    // Until every window is in: all the pushes, read together by go tool pprof (again each
    // time more came), hold every stored sample, none twice.
    let mut read = 0;
    let (rows, total, pushes) = poll(Duration::from_secs(120), || {
        let pushes = receiver.taken();
        if pushes.len() == read {
            return None;
        }
        read = pushes.len();
        let files: Vec<String> = pushes
            .iter()
            .enumerate()
            .map(|(index, push)| {
                let file = dir.path().join(format!("push-{index}.pb.gz"));
                std::fs::write(&file, &push.body).unwrap();
                file.to_str().unwrap().to_string()
            })
            .collect();
        let mut args = vec!["-top", "-nodecount=20"];
        args.extend(files.iter().map(String::as_str));
        let top = go_pprof(dir.path(), &args);
        let (rows, total) = parse_top(&top);
        assert!(
            total <= stored,
            "{total} samples pushed, {stored} stored: some twice\n{}",
            second.log()
        );
        (total == stored).then_some((rows, total, pushes))
    })
    .unwrap_or_else(|| {
        panic!(
            "{} pushes, not all the stored samples\n{}",
            receiver.taken().len(),
            second.log()
        )
    });
    assert!(
        pushes.len() >= 3,
        "{} pushes: one a window was expected",
        pushes.len()
    );
    // CpuSplit's split, as a reader we did not write sees it.
    let flat = |name: &str| {
        rows.iter()
            .find(|row| row.name == name)
            .map_or(0.0, |row| row.flat_percent)
    };
    let (heavy, light) = (flat("CpuSplit.heavy"), flat("CpuSplit.light"));
    let share = heavy / (heavy + light);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "heavy {heavy} % light {light} % of {total}"
    );
    // Each push as Pyroscope's ingest API takes it: the application, the agent's labels (names
    // in Pyroscope's characters), host and pid, the window's seconds, pprof.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for push in &pushes {
        assert_eq!(
            (push.method.as_str(), push.path.as_str()),
            ("POST", "/ingest")
        );
        let query = &push.query;
        assert_eq!(query.get("format").map(String::as_str), Some("pprof"));
        assert_eq!(query.get("spyName").map(String::as_str), Some("openprof"));
        let (application, labels) = series(&query["name"]);
        assert_eq!(application, "split", "{query:?}");
        assert_eq!(labels.get("pid"), Some(&pid.to_string()), "{query:?}");
        assert!(!labels["host"].is_empty(), "{query:?}");
        assert_eq!(
            labels.get("team_name").map(String::as_str),
            Some("perf-eng"),
            "{query:?}"
        );
        assert_eq!(labels.len(), 3, "{query:?}");
        let from: u64 = query["from"].parse().unwrap();
        let until: u64 = query["until"].parse().unwrap();
        assert!(
            started <= from && from <= until && until <= now,
            "{started} {query:?} {now}"
        );
    }
    // The cursor: in the store, its owner's only.
    let cursor = store.join("pyroscope-cursor.json");
    let mode = std::fs::metadata(&cursor).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", cursor.display());
    assert!(
        std::fs::read_to_string(&cursor)
            .unwrap()
            .contains(&agents[0]),
        "{}",
        cursor.display()
    );
    // Every window was in: no push came since.
    assert_eq!(receiver.taken().len(), pushes.len(), "{}", second.log());
    drop(second);
}

#[test]
fn a_bad_pyroscope_url_is_refused_by_its_option() {
    let dir = tempfile::tempdir().unwrap();
    let output = crate::helpers::openprof(&[
        "serve",
        "--store",
        dir.path().join("store").to_str().unwrap(),
        "--token",
        "a-token-of-some-length",
        "--pyroscope",
        "pyroscope:4040",
    ]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("--pyroscope pyroscope:4040") && stderr.contains("http://HOST:PORT"),
        "{stderr}"
    );
    assert!(!dir.path().join("store").exists(), "a store was made");
}
