//! `openprof serve` with real JVMs streaming to it over loopback: the hierarchy of three agents,
//! a collector killed and restarted mid-stream, a shuffled replay with duplicates, malformed
//! frames, tokens, commands that change a running agent, and a JVM attached to while running.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use openprof_format::trace::reader::{read_all, MAX_ATTRIBUTES, MAX_DEPTH};
use openprof_format::trace::TraceElement;
use openprof_format::wire::{self, FrameKind, Hello, Role, PROTOCOL_VERSION};
use openprof_testkit::{java_command, wait_with_limit, xmllint_trace};

const TOKEN: &str = "test-token-4d1f";

fn openprof(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_openprof"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start openprof");
    wait_with_limit(child, Duration::from_secs(120))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `openprof serve` as a child process, so that it can be killed for real.
struct Collector {
    child: Child,
    address: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Collector {
    fn start(store: &Path, listen: &str) -> Collector {
        Collector::start_with(store, listen, &[])
    }

    fn start_with(store: &Path, listen: &str, extra: &[&str]) -> Collector {
        let mut child = Command::new(env!("CARGO_BIN_EXE_openprof"))
            .args([
                "serve",
                "--heartbeat-ms",
                "100",
                "--listen",
                listen,
                "--store",
            ])
            .arg(store)
            .args(extra)
            .env("OPENPROF_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start openprof serve");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let address = line
            .trim()
            .strip_prefix("openprof collector listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line}"))
            .to_string();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Collector {
            child,
            address,
            log,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ls(store: &Path) -> String {
    let output = openprof(&["ls", "--store", store.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

/// The trace ids `openprof ls` lists.
fn trace_ids(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("trace "))
        .map(|rest| rest.split(':').next().unwrap().to_string())
        .collect()
}

fn export(store: &Path, trace: &str, into: &Path) -> Vec<u8> {
    let output = openprof(&[
        "export",
        trace,
        "--store",
        store.to_str().unwrap(),
        "-o",
        into.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    std::fs::read(into).unwrap()
}

/// Exports the HPROF output of the store's one agent, as received, into `name` in the store.
fn export_only_agent(store: &Path, name: &str) -> PathBuf {
    let listing = ls(store);
    let agent = listing
        .lines()
        .find_map(|line| line.trim().strip_prefix("agent "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{listing}"))
        .to_string();
    let file = store.join(name);
    let exported = openprof(&[
        "export",
        &agent,
        "--agent",
        "--store",
        store.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    file
}

fn xmllint(file: &Path) {
    xmllint_trace(file);
}

fn validate(file: &Path) {
    let output = openprof(&["validate", file.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "openprof validate {}: {}{}",
        file.display(),
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// How often the document's methodCount says `name` was entered.
fn method_count(document: &[u8], name: &str) -> Option<u64> {
    let elements: Vec<TraceElement> = read_all(document).collect::<Result<_, _>>().unwrap();
    let mut names = HashMap::new();
    for element in &elements {
        if let TraceElement::MethodDef(def) = element {
            names.insert(def.method_id, def.name.clone());
        }
    }
    elements.iter().find_map(|element| match element {
        TraceElement::MethodCount(count)
            if names.get(&count.method_id_ref).and_then(|n| n.as_deref()) == Some(name) =>
        {
            count.count
        }
        _ => None,
    })
}

fn agent_options(address: &str, extra: &str) -> String {
    format!("net={address},token={TOKEN},{extra}")
}

/// Starts a JVM running Ticker for `seconds` with the agent streaming to `address`.
fn ticker(address: &str, seconds: &str) -> (Child, PathBuf) {
    let options = agent_options(address, "format=x,cpu=times,filter=+Ticker");
    let (mut command, dir) = java_command(Some(&options), "Ticker", &[seconds]);
    (command.spawn().expect("start java"), dir)
}

/// Waits for a workload's "ready" and keeps the rest of its standard output.
fn wait_for_ready(child: &mut Child) -> std::thread::JoinHandle<String> {
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    })
}

fn calls_in(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("calls="))
        .unwrap_or_else(|| panic!("no calls= line in {stdout}"))
        .parse()
        .unwrap()
}

fn calls_printed(output: &Output) -> u64 {
    text(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("calls="))
        .unwrap_or_else(|| panic!("no calls= line: {}", text(&output.stderr)))
        .parse()
        .unwrap()
}

#[test]
fn three_jvms_stream_to_one_collector_and_each_trace_exports_valid() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let runs: Vec<_> = ["1", "1.5", "2"]
        .iter()
        .map(|seconds| ticker(&collector.address, seconds))
        .collect();
    let mut calls = Vec::new();
    for (child, _) in runs {
        let output = wait_with_limit(child, Duration::from_secs(120));
        assert!(output.status.success(), "{}", text(&output.stderr));
        calls.push(calls_printed(&output));
    }
    let listing = ls(store.path());
    assert_eq!(listing.matches("agent ").count(), 3, "{listing}");
    assert_eq!(listing.matches("process ").count(), 3, "{listing}");
    // One machine: the three processes hang under one node.
    assert_eq!(listing.matches("node ").count(), 1, "{listing}");
    assert_eq!(listing.matches(", finished").count(), 3, "{listing}");
    assert!(!listing.contains("GAPS"), "{listing}");
    assert!(!listing.contains("LOST"), "{listing}");
    assert!(listing.contains("clock offset"), "{listing}");
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 3, "{listing}");
    let mut counted = Vec::new();
    for trace in traces {
        let file = store.path().join(format!("{trace}.xml"));
        let document = export(store.path(), &trace, &file);
        xmllint(&file);
        validate(&file);
        counted.push(method_count(&document, "work").expect("a methodCount for work()"));
    }
    // Ground truth: each exported trace counts exactly the calls its JVM made.
    calls.sort_unstable();
    counted.sort_unstable();
    assert_eq!(counted, calls);
    drop(collector);
}

#[test]
fn a_collector_killed_mid_stream_loses_nothing_it_acknowledged() {
    let store = tempfile::tempdir().unwrap();
    let first = Collector::start(store.path(), "127.0.0.1:0");
    let address = first.address.clone();
    let (mut child, _dir) = ticker(&address, "6");
    let stdout = wait_for_ready(&mut child);
    std::thread::sleep(Duration::from_millis(1500));
    let before = ls(store.path());
    first.kill();
    std::thread::sleep(Duration::from_millis(1500));
    // The JVM runs on without its collector, then gets it back on the same address.
    let second = Collector::start(store.path(), &address);
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_in(&stdout.join().unwrap());
    let listing = ls(store.path());
    assert!(
        before.contains("trace "),
        "data was stored before the kill: {before}"
    );
    assert!(
        listing.contains(", finished"),
        "{listing}\n{}",
        second.log()
    );
    assert!(!listing.contains("GAPS"), "{listing}");
    assert!(!listing.contains("LOST"), "{listing}");
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = store.path().join("trace.xml");
    let document = export(store.path(), &traces[0], &file);
    xmllint(&file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls));
    assert!(
        second.log().contains("resuming after sequence"),
        "{}",
        second.log()
    );
}

#[test]
fn a_shuffled_replay_with_duplicates_stores_the_original_trace() {
    // A recorded trace: Ticker traced to a file.
    let (mut command, dir) = java_command(
        Some("format=x,cpu=times,filter=+Ticker,file=trace.xml"),
        "Ticker",
        &["0.5"],
    );
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let recording = dir.join("trace.xml");
    let original = std::fs::read(&recording).unwrap();

    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let replayed = openprof(&[
        "replay",
        recording.to_str().unwrap(),
        "--collector",
        &collector.address,
        "--token",
        TOKEN,
        "--shuffle",
        "7",
        "--duplicate-every",
        "3",
        "--elements-per-fragment",
        "40",
    ]);
    assert!(replayed.status.success(), "{}", text(&replayed.stderr));
    let listing = ls(store.path());
    assert!(!listing.contains("GAPS"), "{listing}");
    assert!(
        !listing.contains(" 0 duplicates"),
        "duplicates were sent: {listing}"
    );
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let exported = export(store.path(), &traces[0], &store.path().join("out.xml"));
    assert!(
        exported == original,
        "the stored trace differs from the recording ({} vs {} bytes)",
        exported.len(),
        original.len()
    );
}

/// A raw connection that says hello as an agent.
fn raw_agent(address: &str, token: &str) -> (TcpStream, wire::Frame) {
    let mut socket = TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        role: Role::Agent,
        token: token.into(),
        agent_id: Some(uuid::Uuid::new_v4()),
        hostname: "test".into(),
        pid: 1,
        format: "x".into(),
        options: String::new(),
    };
    wire::write_frame(&mut socket, FrameKind::Hello, &wire::to_json(&hello)).unwrap();
    let answer = wire::read_frame(&mut socket).unwrap().unwrap();
    (socket, answer)
}

/// Reads frames until the collector refuses (and closes); returns the reason.
fn refusal(socket: &mut TcpStream) -> String {
    loop {
        match wire::read_frame(socket) {
            Ok(Some(frame)) if frame.kind == FrameKind::Refused => return text(&frame.payload),
            Ok(Some(_)) => continue,
            other => panic!("no refusal, got {other:?}"),
        }
    }
}

#[test]
fn malformed_frames_close_only_their_own_connection() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (mut healthy, _dir) = ticker(&collector.address, "3");
    let stdout = wait_for_ready(&mut healthy);

    let (mut socket, answer) = raw_agent(&collector.address, TOKEN);
    assert_eq!(answer.kind, FrameKind::Welcome);
    wire::write_frame(
        &mut socket,
        FrameKind::Fragment,
        &wire::with_sequence(1, b"<threadStart threadId=\"1\"><oops></threadStart>"),
    )
    .unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("fragment 1 is malformed"), "{reason}");

    let (mut socket, _) = raw_agent(&collector.address, TOKEN);
    socket.write_all(&[99, 0, 0, 0, 0]).unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("frame kind 99 is unknown"), "{reason}");

    let (mut socket, _) = raw_agent(&collector.address, TOKEN);
    socket.write_all(&[4, 0x7f, 0, 0, 0]).unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("longer than"), "{reason}");

    // A frame cut short by a vanishing peer.
    let (mut socket, _) = raw_agent(&collector.address, TOKEN);
    socket.write_all(&[4, 0, 0, 1, 0, 1, 2]).unwrap();
    drop(socket);

    let output = wait_with_limit(healthy, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_in(&stdout.join().unwrap());
    let log = collector.log();
    assert!(log.contains("fragment 1 is malformed"), "logged: {log}");
    assert!(log.contains("frame kind 99 is unknown"), "logged: {log}");
    let listing = ls(store.path());
    let traces = trace_ids(&listing);
    assert_eq!(
        traces.len(),
        1,
        "only the healthy agent has a trace: {listing}"
    );
    let file = store.path().join("healthy.xml");
    let document = export(store.path(), &traces[0], &file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls));
}

#[test]
fn fragments_nested_too_deep_or_with_too_many_attributes_are_refused_and_the_rest_goes_on() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (mut healthy, _dir) = ticker(&collector.address, "3");
    let stdout = wait_for_ready(&mut healthy);

    // A node (typed in full by the collector) holding 100,000 levels of values.
    let head = "<node nodeId=\"67e55044-10b1-426f-9247-bb680e5fe0c8\" hostname=\"h\">";
    let mut deep = String::from(head);
    deep.push_str(&"<value>".repeat(99_999));
    deep.push_str(&"</value>".repeat(99_999));
    deep.push_str("</node>");
    let (mut socket, answer) = raw_agent(&collector.address, TOKEN);
    assert_eq!(answer.kind, FrameKind::Welcome);
    wire::write_frame(
        &mut socket,
        FrameKind::Fragment,
        &wire::with_sequence(1, deep.as_bytes()),
    )
    .unwrap();
    let reason = refusal(&mut socket);
    let offset = head.len() + (MAX_DEPTH - 1) * "<value>".len();
    assert!(
        reason.contains(&format!(
            "fragment 1 is malformed: at byte {offset}: <value> is nested more than {MAX_DEPTH} deep"
        )),
        "{reason}"
    );

    // 100,000 attributes on one element: refused as soon as read.
    let mut crowded = String::from("<gcStart");
    for number in 0..100_000 {
        crowded.push_str(&format!(" a{number}=\"{number}\""));
    }
    crowded.push_str("/>");
    let (mut socket, _) = raw_agent(&collector.address, TOKEN);
    let started = Instant::now();
    wire::write_frame(
        &mut socket,
        FrameKind::Fragment,
        &wire::with_sequence(1, crowded.as_bytes()),
    )
    .unwrap();
    let reason = refusal(&mut socket);
    assert!(
        reason.contains(&format!(
            "fragment 1 is malformed: at byte 0: <gcStart>: more than {MAX_ATTRIBUTES} attributes"
        )),
        "{reason}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused after {:?}",
        started.elapsed()
    );

    // Still serving: a new agent is welcomed, and the JVM streaming all along gets its trace whole.
    let (_socket, answer) = raw_agent(&collector.address, TOKEN);
    assert_eq!(answer.kind, FrameKind::Welcome);
    let output = wait_with_limit(healthy, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_in(&stdout.join().unwrap());
    let listing = ls(store.path());
    let traces = trace_ids(&listing);
    assert_eq!(
        traces.len(),
        1,
        "only the healthy agent has a trace: {listing}"
    );
    let file = store.path().join("healthy.xml");
    let document = export(store.path(), &traces[0], &file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls));
}

#[test]
fn a_wrong_or_missing_token_is_refused_and_never_logged() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    for token in ["wrong-token-xyz", ""] {
        let (mut socket, answer) = raw_agent(&collector.address, token);
        assert_eq!(answer.kind, FrameKind::Refused);
        assert!(text(&answer.payload).contains("wrong or missing token"));
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest);
    }
    // A control client with a wrong token can't run a command.
    let output = openprof(&[
        "control",
        "--collector",
        &collector.address,
        "--token",
        "wrong-token-xyz",
        "gc",
    ]);
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("wrong or missing token"));

    // A JVM with the wrong token runs to its end unharmed and says why nothing was sent.
    let options = format!(
        "net={},token=wrong-token-xyz,format=x,cpu=times,filter=+Ticker",
        collector.address
    );
    let (mut command, _dir) = java_command(Some(&options), "Ticker", &["0.5"]);
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("wrong or missing token"),
        "{}",
        text(&output.stderr)
    );
    assert!(trace_ids(&ls(store.path())).is_empty());
    let log = collector.log();
    assert!(log.contains("wrong or missing token"), "{log}");
    assert!(
        !log.contains("wrong-token-xyz") && !log.contains(TOKEN),
        "{log}"
    );
    // Nor is the right one stored anywhere.
    for entry in walk(store.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
            "{} holds the token",
            entry.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn control(address: &str, args: &[&str]) -> Output {
    let mut all = vec!["control", "--collector", address, "--token", TOKEN];
    all.extend_from_slice(args);
    openprof(&all)
}

/// Sends a command until an agent is there to take it.
fn control_when_connected(address: &str, args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = control(address, args);
        if output.status.success() || Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn commands_change_a_running_agent_and_the_data_shows_it() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let options = agent_options(&collector.address, "cpu=samples,interval=1,depth=8");
    let (mut command, _dir) = java_command(Some(&options), "CpuSplit", &["6"]);
    let child = command.spawn().unwrap();

    let depth = control_when_connected(&collector.address, &["depth", "2"]);
    assert!(
        depth.status.success(),
        "{}{}",
        text(&depth.stdout),
        text(&depth.stderr)
    );
    assert!(text(&depth.stdout).contains("ok: stack depth 2"));
    // Counts from before the change go; what is counted from now on is at most two deep.
    let clear = control(&collector.address, &["clear-cpu-samples"]);
    assert!(clear.status.success(), "{}", text(&clear.stderr));
    std::thread::sleep(Duration::from_secs(1));
    let dump = control(&collector.address, &["cpu-samples"]);
    assert!(dump.status.success(), "{}", text(&dump.stderr));
    let off = control(&collector.address, &["cpu-sampling-off"]);
    assert!(off.status.success(), "{}", text(&off.stderr));
    // What was counted between the dump and the switch goes too.
    let clear = control(&collector.address, &["clear-cpu-samples"]);
    assert!(clear.status.success(), "{}", text(&clear.stderr));
    std::thread::sleep(Duration::from_secs(1));
    let quiet = control(&collector.address, &["cpu-samples"]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    // A bad command gets a clear error, and the agent carries on.
    let deeper = control(&collector.address, &["depth", "50"]);
    assert!(!deeper.status.success());
    assert!(
        text(&deeper.stdout).contains("deeper than the depth=8"),
        "{}",
        text(&deeper.stdout)
    );
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));

    // The agent's HPROF text as stored, read with our HPROF reader.
    let file = export_only_agent(store.path(), "agent.hprof.txt");
    let hprof = std::fs::read_to_string(&file).unwrap();
    let tables: Vec<&str> = hprof.split("CPU SAMPLES BEGIN (total = ").skip(1).collect();
    assert_eq!(
        tables.len(),
        3,
        "two commanded dumps and the one at exit:\n{hprof}"
    );
    let total = |table: &str| -> u64 { table.split(')').next().unwrap().parse().unwrap() };
    assert!(
        total(tables[0]) > 100,
        "samples before sampling was turned off"
    );
    assert_eq!(total(tables[1]), 0, "sampling off: no samples");
    assert_eq!(total(tables[2]), 0, "still off at exit");
    // Every trace printed after the depth change has at most two frames.
    let traces = hprof.split("\nTRACE ").skip(1);
    let mut checked = 0;
    for trace in traces {
        let frames = trace
            .lines()
            .skip(1)
            .take_while(|line| line.starts_with('\t'))
            .count();
        assert!(frames <= 2, "a trace deeper than 2: TRACE {trace}");
        checked += 1;
    }
    assert!(checked > 0, "{hprof}");
}

#[test]
fn fifty_agents_at_once_each_get_their_own_complete_trace() {
    let (mut command, dir) = java_command(
        Some("format=x,cpu=times,filter=+Ticker,file=trace.xml"),
        "Ticker",
        &["0.2"],
    );
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let recording = dir.join("trace.xml");
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let replays: Vec<Child> = (0..50)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_openprof"))
                .args(["replay", recording.to_str().unwrap(), "--fresh-ids"])
                .args(["--collector", &collector.address, "--token", TOKEN])
                .args(["--elements-per-fragment", "100"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for replay in replays {
        let output = wait_with_limit(replay, Duration::from_secs(120));
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    let listing = ls(store.path());
    assert_eq!(trace_ids(&listing).len(), 50, "{listing}");
    assert_eq!(listing.matches(", finished").count(), 50, "{listing}");
    assert_eq!(listing.matches(", ended").count(), 50, "{listing}");
    assert!(!listing.contains("GAPS"), "{listing}");
    let original =
        openprof_collector::replay::recorded_elements(&std::fs::read(&recording).unwrap())
            .unwrap()
            .len();
    for trace in trace_ids(&listing).iter().step_by(10) {
        let file = store.path().join(format!("{trace}.xml"));
        let document = export(store.path(), trace, &file);
        validate(&file);
        assert_eq!(
            openprof_collector::replay::recorded_elements(&document)
                .unwrap()
                .len(),
            original
        );
    }
}

#[test]
fn tls_agents_stream_and_plain_ones_are_turned_away() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let store = dir.path().join("store");
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let port = collector.address.rsplit(':').next().unwrap().to_string();
    let options = format!(
        "net=localhost:{port},token={TOKEN},tlsca={},format=x,cpu=times,filter=+Ticker",
        cert.display()
    );
    let (mut command, _run) = java_command(Some(&options), "Ticker", &["0.5"]);
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_printed(&output);
    // A plain connection gets no further than the handshake.
    let mut plain = TcpStream::connect(&collector.address).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        role: Role::Agent,
        token: TOKEN.into(),
        agent_id: Some(uuid::Uuid::new_v4()),
        hostname: "plain".into(),
        pid: 1,
        format: "x".into(),
        options: String::new(),
    };
    let _ = wire::write_frame(&mut plain, FrameKind::Hello, &wire::to_json(&hello));
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(&[FrameKind::Welcome as u8]),
        "a plain client was welcomed"
    );
    let listing = ls(&store);
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = dir.path().join("tls.xml");
    let document = export(&store, &traces[0], &file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls));
    assert!(
        collector.log().contains("TLS handshake failed"),
        "{}",
        collector.log()
    );
}

#[test]
fn a_jvm_whose_collector_never_answers_still_runs_and_exits() {
    // A port nobody listens on: the agent retries in the background and gives up at exit.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let options = agent_options(&address, "format=x,cpu=times,filter=+Ticker");
    let (mut command, _dir) = java_command(Some(&options), "Ticker", &["0.5"]);
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(60));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(calls_printed(&output) > 0);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("can't connect"), "{stderr}");
    assert!(stderr.contains("did not acknowledge"), "{stderr}");
}

#[test]
fn a_jvm_attached_to_while_running_streams_its_profile_to_the_collector() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    // AttachTarget runs without any agent and waits for "go" (3:1 CPU split once it goes).
    let (mut command, _dir) = java_command(None, "AttachTarget", &["3"]);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    let stdout = wait_for_ready(&mut child);
    let pid = child.id().to_string();

    let options = agent_options(&collector.address, "cpu=samples,interval=1");
    let attached = openprof(&["attach", &pid, &options]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let said = text(&attached.stdout);
    assert!(said.contains(&format!("attached to JVM {pid}")), "{said}");
    assert!(!said.contains(TOKEN), "the token is echoed: {said}");

    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let measured: f64 = stdout
        .join()
        .unwrap()
        .split("heavy_cpu_share=")
        .nth(1)
        .and_then(|share| share.trim().parse().ok())
        .expect("the workload prints its measured split");

    // The agent's HPROF text as the collector stored it, read with the HPROF text reader.
    let file = export_only_agent(store.path(), "attached.hprof.txt");
    let profile = openprof_format::hprof_text::read(std::fs::read(&file).unwrap().as_slice())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let by_method = openprof_testkit::samples_by_method(&profile);
    let heavy = by_method.get("AttachTarget.heavy").copied().unwrap_or(0) as f64;
    let light = by_method.get("AttachTarget.light").copied().unwrap_or(0) as f64;
    assert!(heavy + light > 1000.0, "{by_method:?}");
    let share = heavy / (heavy + light);
    assert!(
        (share - 0.75).abs() <= 0.05 && (share - measured).abs() <= 0.05,
        "heavy share {share:.3}, built-in 0.75, measured {measured:.3}: {by_method:?}"
    );
    assert!(!collector.log().contains(TOKEN));
}

/// The methodEntry elements of `name` in a document.
fn entries_of(document: &[u8], name: &str) -> u64 {
    let elements: Vec<TraceElement> = read_all(document).collect::<Result<_, _>>().unwrap();
    let ids: Vec<u32> = elements
        .iter()
        .filter_map(|element| match element {
            TraceElement::MethodDef(def) if def.name.as_deref() == Some(name) => def.method_id,
            _ => None,
        })
        .collect();
    elements
        .iter()
        .filter(|element| {
            matches!(element, TraceElement::MethodEntry(entry)
                if entry.method_id_ref.is_some_and(|id| ids.contains(&id)))
        })
        .count() as u64
}

#[test]
fn the_collector_ends_a_trace_and_starts_another_in_a_running_agent() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (child, _dir) = ticker(&collector.address, "4");
    let snapshot = control_when_connected(&collector.address, &["snapshot", "connected"]);
    assert!(snapshot.status.success(), "{}", text(&snapshot.stderr));
    // One trace at a time: the one the agent started with is running.
    let early = control(&collector.address, &["trace-start"]);
    assert!(!early.status.success());
    assert!(
        text(&early.stdout).contains("is still running: end it first"),
        "{}",
        text(&early.stdout)
    );
    std::thread::sleep(Duration::from_millis(700));
    let end = control(&collector.address, &["trace-end"]);
    assert!(end.status.success(), "{}", text(&end.stdout));
    assert!(text(&end.stdout).contains("ended"), "{}", text(&end.stdout));
    let again = control(&collector.address, &["trace-end"]);
    assert!(!again.status.success());
    assert!(
        text(&again.stdout).contains("no trace is running"),
        "{}",
        text(&again.stdout)
    );
    // Calls in this second are traced nowhere (and still counted).
    std::thread::sleep(Duration::from_secs(1));
    let start = control(&collector.address, &["trace-start"]);
    assert!(start.status.success(), "{}", text(&start.stdout));
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_printed(&output);

    let listing = ls(store.path());
    assert!(!listing.contains("GAPS"), "{listing}");
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 2, "{listing}");
    let mut exported = Vec::new();
    for trace in &traces {
        let file = store.path().join(format!("{trace}.xml"));
        let document = export(store.path(), trace, &file);
        xmllint(&file);
        validate(&file);
        let count = method_count(&document, "work").expect("a methodCount for work()");
        exported.push((count, entries_of(&document, "work")));
    }
    // The first trace (ended by the command) counted fewer calls than the second (at exit).
    exported.sort_unstable();
    let [(first_count, first_entries), (second_count, second_entries)] = exported[..] else {
        panic!("{exported:?}")
    };
    // Ground truth: the first trace holds every call up to its end; the counts are the JVM's
    // since it started, so the last one is every call; the calls of the untraced second are
    // in neither trace.
    assert_eq!(first_entries, first_count);
    assert_eq!(second_count, calls);
    let untraced = calls - first_count - second_entries;
    assert!(
        first_entries > 1000 && second_entries > 1000 && untraced > 1000,
        "traced {first_entries} + {second_entries}, untraced {untraced} of {calls}"
    );
}

#[test]
fn data_dropped_while_the_collector_was_away_is_reported_as_lost() {
    // A port nobody listens on yet: the agent starts, finds no collector and backs off.
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let options = agent_options(&address, "format=x,cpu=times,filter=+Ticker,netbuffer=6m");
    let (mut command, _dir) = java_command(Some(&options), "Ticker", &["6"]);
    let mut child = command.spawn().expect("start java");
    let stdout = wait_for_ready(&mut child);
    // 2.5 s of method events (about 10 MB a second) against a 6 MiB buffer: most of it must
    // go; the burst at exit (the counts, 1 to 2 MB) fits.
    std::thread::sleep(Duration::from_millis(2500));
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), &address);
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_in(&stdout.join().unwrap());
    drop(collector);

    let listing = ls(store.path());
    let lost: u64 = listing
        .split(", LOST ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|frames| frames.parse().ok())
        .unwrap_or_else(|| panic!("no loss reported: {listing}"));
    assert!(lost > 0, "{listing}");
    assert!(listing.contains(", finished"), "{listing}");
    // What came after the reconnection is stored: the trace's end and its counts.
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    assert!(
        listing.contains("GAPS"),
        "the dropped elements show as gaps: {listing}"
    );
    let file = store.path().join("lossy.xml");
    let document = export(store.path(), &traces[0], &file);
    // work()'s methodDef went with the lost data, but its count came after the reconnection.
    let elements: Vec<TraceElement> = read_all(document.as_slice())
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        elements.iter().any(|element| matches!(element,
            TraceElement::MethodCount(count) if count.count == Some(calls))),
        "no methodCount of {calls} calls: {listing}"
    );
    assert!(matches!(
        elements.iter().rev().nth(1),
        Some(TraceElement::TraceEnd(_))
    ));
}

#[test]
fn a_parameter_tracing_specification_added_at_run_time_takes_effect_at_once() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let options = agent_options(&collector.address, "format=x");
    let (mut command, _dir) = java_command(Some(&options), "MptSlow", &["loop"]);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    let stdout = wait_for_ready(&mut child);
    let none = control_when_connected(&collector.address, &["mpt-list"]);
    assert!(none.status.success(), "{}", text(&none.stderr));
    assert!(text(&none.stdout).contains("no method parameter tracing specifications"));
    // A bad specification is refused where it is wrong, before anything is sent.
    let bad = control(
        &collector.address,
        &["mpt-add", "MptSlow.work(int) 1 length"],
    );
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("line 1, column 21: parameter 1 is a int"),
        "{}",
        text(&bad.stderr)
    );
    let unknown = control(&collector.address, &["mpt-remove", "MptSlow.work(int) 1"]);
    assert!(!unknown.status.success());
    assert!(text(&unknown.stdout).contains("no specification 'MptSlow.work(int) 1' is in force"));

    let marker = |name: &str| {
        let output = control(&collector.address, &["snapshot", name]);
        assert!(output.status.success(), "{}", text(&output.stdout));
    };
    std::thread::sleep(Duration::from_millis(300));
    marker("before");
    let add = control(&collector.address, &["mpt-add", "MptSlow.work(int) 1"]);
    assert!(add.status.success(), "{}", text(&add.stdout));
    assert!(
        text(&add.stdout).contains("1 specification(s) added; 1 method(s) instrumented now"),
        "{}",
        text(&add.stdout)
    );
    let listed = control(&collector.address, &["mpt-list"]);
    assert!(text(&listed.stdout).contains("MptSlow.work(int) 1"));
    // work(1) and work(3) alternate: 2 ms and 6 ms.
    std::thread::sleep(Duration::from_millis(1500));
    let remove = control(&collector.address, &["mpt-remove", "MptSlow.work(int) 1"]);
    assert!(remove.status.success(), "{}", text(&remove.stdout));
    marker("after");
    std::thread::sleep(Duration::from_millis(300));
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let output = wait_with_limit(child, Duration::from_secs(60));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let _ = stdout.join();

    let listing = ls(store.path());
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = store.path().join("mpt.xml");
    let document = export(store.path(), &traces[0], &file);
    xmllint(&file);
    validate(&file);
    // Values only between the markers, and both arguments, about as often as each other.
    let mut phase = "";
    let mut values: HashMap<String, u64> = HashMap::new();
    for element in read_all(document.as_slice()) {
        match element.unwrap() {
            TraceElement::Snapshot(snapshot) => {
                phase = if snapshot.name.as_deref() == Some("before") {
                    "traced"
                } else {
                    "after"
                }
            }
            TraceElement::MethodEntry(entry) if !entry.content.0.is_empty() => {
                assert_eq!(
                    phase, "traced",
                    "a traced call outside the specification's time"
                );
                for value in &entry.content.0 {
                    *values.entry(value.value.clone().unwrap()).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    let (ones, threes) = (values["1"], values["3"]);
    assert!(ones >= 50 && ones.abs_diff(threes) <= 2, "{values:?}");
    assert_eq!(values.len(), 2, "{values:?}");
}
