//! `openprof serve` with real JVMs streaming to it over loopback: the hierarchy of three agents,
//! a collector killed and restarted mid-stream, a shuffled replay with duplicates, malformed
//! frames, tokens, commands that change a running agent, and a JVM attached to while running.
//! (Long because each test drives whole processes, a collector and JVMs, over real sockets; the
//! fixtures at the top serve them all.)

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use openprof_collector::client::{self, Endpoint, Transport};
use openprof_format::handshake::Identity;
use openprof_format::trace::reader::{read_all, MAX_ATTRIBUTES, MAX_DEPTH};
use openprof_format::trace::TraceElement;
use openprof_format::wire::{self, FrameKind, Hello, Refusal, Role};
use openprof_testkit::{
    cpu_time, java_command, java_command_with, poll, wait_for, wait_until,
    wait_until_ready_keeping_output, wait_with_limit, xmllint_trace, PipeText,
};

use crate::helpers::{openprof, text};

pub(crate) const TOKEN: &str = "test-token-4d1f";
pub(crate) const CONTROL_TOKEN: &str = "test-control-token-9a2e";

/// `openprof serve` as a child process, so that it can be killed for real.
pub(crate) struct Collector {
    child: Child,
    pub(crate) address: String,
    /// The web UI's `host:port`, when started with `--http`.
    pub(crate) web: Option<String>,
    /// The web UI's URL as the collector printed it (`https://` with `--tls-cert`).
    pub(crate) web_url: Option<String>,
    log: PipeText,
}

impl Collector {
    fn start(store: &Path, listen: &str) -> Collector {
        Collector::start_with(store, listen, &[])
    }

    pub(crate) fn start_with(store: &Path, listen: &str, extra: &[&str]) -> Collector {
        Collector::start_under(None, store, listen, extra)
    }

    /// With `shell` (a shell command line ending in `exec "$0" "$@"`), the collector runs
    /// under what that shell sets up: a umask, an ignored signal. `exec` keeps the pid.
    pub(crate) fn start_under(
        shell: Option<&str>,
        store: &Path,
        listen: &str,
        extra: &[&str],
    ) -> Collector {
        let mut command = match shell {
            Some(script) => {
                let mut command = Command::new("sh");
                command
                    .args(["-c", script])
                    .arg(env!("CARGO_BIN_EXE_openprof"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_openprof")),
        };
        let mut child = command
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
            .env("OPENPROF_CONTROL_TOKEN", CONTROL_TOKEN)
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
        let web_url = extra.contains(&"--http").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix("openprof web UI on ")
                .unwrap_or_else(|| panic!("unexpected second line: {line}"))
                .to_string()
        });
        let web = web_url.as_ref().map(|url| {
            url.strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .and_then(|rest| rest.strip_suffix('/'))
                .unwrap_or_else(|| panic!("not a URL of the web UI: {url}"))
                .to_string()
        });
        let log = PipeText::read(child.stderr.take().unwrap());
        Collector {
            child,
            address,
            web,
            web_url,
            log,
        }
    }

    pub(crate) fn log(&self) -> String {
        self.log.text()
    }

    /// The log once it holds `needle` (the test fails if it does not within a minute): the
    /// collector logs a refused peer on its own task, which may run after the peer has seen
    /// the refusal.
    pub(crate) fn log_with(&self, needle: &str) -> String {
        self.log.wait_for(needle, Duration::from_secs(60))
    }

    /// How many sockets the collector has open (its listeners and its connections).
    fn sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|entries| {
                entries
                    .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                    .filter(|target| target.to_string_lossy().starts_with("socket:"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// Waits until the collector has `count` sockets open: it took (or closed) the
    /// connections the test opened (or closed).
    fn wait_for_sockets(&self, count: usize) {
        wait_for(
            &format!("the collector had {count} sockets open"),
            Duration::from_secs(60),
            || self.sockets() == count,
        );
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

/// The id of the store's one agent, as `openprof ls` shows it.
fn only_agent(store: &Path) -> String {
    let listing = ls(store);
    listing
        .lines()
        .find_map(|line| line.trim().strip_prefix("agent "))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("{listing}"))
        .to_string()
}

/// Exports the HPROF output of the store's one agent, as received, into `name` in the store.
fn export_only_agent(store: &Path, name: &str) -> PathBuf {
    export_agent(store, &only_agent(store), name)
}

/// Exports the HPROF output of an agent, as received, into `name` in the store.
pub(crate) fn export_agent(store: &Path, agent: &str, name: &str) -> PathBuf {
    let file = store.join(name);
    let exported = openprof(&[
        "export",
        agent,
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

pub(crate) fn agent_options(address: &str, extra: &str) -> String {
    format!("net={address},token={TOKEN},{extra}")
}

/// Starts a JVM running Ticker for `seconds` with the agent streaming to `address`.
fn ticker(address: &str, seconds: &str) -> (Child, PathBuf) {
    let options = agent_options(address, "format=x,cpu=times,filter=+Ticker");
    let (mut command, dir) = java_command(Some(&options), "Ticker", &[seconds]);
    (command.spawn().expect("start java"), dir)
}

/// A JVM running a workload that prints how far it got (Ticker's `progress=N`, MptSlow's
/// `pairs=N`) until a line on its standard input ends it; its output read while it runs.
struct Counting {
    /// `None` once stopped.
    child: Option<Child>,
    /// What it prints its count after (`progress=`).
    key: &'static str,
    stdout: PipeText,
    stderr: PipeText,
}

impl Counting {
    fn start(mut command: Command, key: &'static str) -> Counting {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start java");
        let stdout = PipeText::read(child.stdout.take().unwrap());
        let stderr = PipeText::read(child.stderr.take().unwrap());
        Counting {
            child: Some(child),
            key,
            stdout,
            stderr,
        }
    }

    /// Ticker streaming to `address` (`extra` agent options after the trace's), until told.
    fn ticker(address: &str, extra: &str) -> Counting {
        let options = agent_options(address, &format!("format=x,cpu=times,{extra}"));
        let (command, _dir) = java_command(Some(&options), "Ticker", &["-"]);
        Counting::start(command, "progress=")
    }

    /// The last count printed (0 before the first).
    fn count(&self) -> u64 {
        self.stdout
            .text()
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix(self.key)?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits until it has printed a count of at least `count`; returns the count then.
    fn wait_count(&self, count: u64) -> u64 {
        let what = format!("the workload printed {}{count}", self.key);
        self.stdout.wait_until(&what, LIMIT, |_| {
            let now = self.count();
            (now >= count).then_some(now)
        })
    }

    /// Tells it to stop and waits for its end, which must be a success; returns its standard
    /// output and error.
    fn stop(mut self) -> (String, String) {
        let mut child = self.child.take().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"stop\n").unwrap();
        drop(stdin);
        let output = wait_with_limit(child, LIMIT);
        let stderr = self.stderr.whole(LIMIT);
        assert!(output.status.success(), "{stderr}");
        (self.stdout.whole(LIMIT), stderr)
    }
}

impl Drop for Counting {
    /// A test that failed before stopping it does not leave it running.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How long a JVM of these tests may take to do what a step waits for.
const LIMIT: Duration = Duration::from_secs(120);

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
    let ticker = Counting::ticker(&address, "filter=+Ticker");
    // Data is stored, then the collector goes.
    wait_until("a trace was stored", LIMIT, || {
        ls(store.path()).contains("trace ").then_some(())
    });
    first.kill();
    // The JVM runs on without its collector (its agent says it retries, and a thousand calls
    // more are made), then gets it back on the same address and carries on where it was.
    ticker.stderr.wait_for("retrying", LIMIT);
    ticker.wait_count(ticker.count() + 1_000);
    let second = Collector::start(store.path(), &address);
    second.log_with("resuming after sequence");
    let (stdout, _) = ticker.stop();
    let calls = calls_in(&stdout);
    let listing = ls(store.path());
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

/// A connection that has done the handshake as a new agent with `token`.
fn raw_agent(address: &str, token: &str) -> Result<Box<dyn Transport>, String> {
    raw_agent_as(address, token, uuid::Uuid::new_v4(), "test").map(|(stream, _)| stream)
}

/// The same with a chosen agent id and host name; returns the identity key too.
fn raw_agent_as(
    address: &str,
    token: &str,
    agent: uuid::Uuid,
    hostname: &str,
) -> Result<(Box<dyn Transport>, std::sync::Arc<Identity>), String> {
    raw_agent_of(address, token, agent, hostname, "x", None)
}

/// The same for an agent of output format `format` (`a`, `b` or `x`), with `identity` or a
/// new identity key.
pub(crate) fn raw_agent_of(
    address: &str,
    token: &str,
    agent: uuid::Uuid,
    hostname: &str,
    format: &str,
    identity: Option<std::sync::Arc<Identity>>,
) -> Result<(Box<dyn Transport>, std::sync::Arc<Identity>), String> {
    let mut hello = Hello::new(Role::Agent, Some(agent));
    hello.hostname = hostname.into();
    hello.format = format.into();
    let identity = identity.unwrap_or_else(|| std::sync::Arc::new(Identity::generate().unwrap()));
    let connected = client::connect(
        &Endpoint::plain(address),
        hello,
        token,
        Some(identity.clone()),
    )?;
    connected
        .stream
        .socket()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    Ok((connected.stream, identity))
}

/// Reads frames until the collector refuses (and closes); returns the reason.
fn refusal(mut socket: &mut dyn Read) -> String {
    loop {
        match wire::read_frame(&mut socket) {
            Ok(Some(frame)) if frame.kind == FrameKind::Refused => {
                return Refusal::decode(&frame.payload).reason
            }
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
    let stdout = wait_until_ready_keeping_output(&mut healthy);

    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
    wire::write_frame(
        &mut socket,
        FrameKind::Fragment,
        &wire::with_sequence(1, b"<threadStart threadId=\"1\"><oops></threadStart>"),
    )
    .unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("fragment 1 is malformed"), "{reason}");

    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
    socket.write_all(&[99, 0, 0, 0, 0]).unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("frame kind 99 is unknown"), "{reason}");

    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
    socket.write_all(&[4, 0x7f, 0, 0, 0]).unwrap();
    let reason = refusal(&mut socket);
    assert!(reason.contains("longer than"), "{reason}");

    // A frame cut short by a vanishing peer.
    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
    socket.write_all(&[4, 0, 0, 1, 0, 1, 2]).unwrap();
    drop(socket);

    the_healthy_agents_trace_is_whole(healthy, stdout, store.path());
    collector.log_with("fragment 1 is malformed");
    let log = collector.log_with("frame kind 99 is unknown");
    assert!(log.contains("fragment 1 is malformed"), "logged: {log}");
    assert!(log.contains("frame kind 99 is unknown"), "logged: {log}");
}

/// Waits for the JVM that streamed while others misbehaved: its trace is the only one in the
/// store, valid, with exactly the calls it printed.
fn the_healthy_agents_trace_is_whole(
    healthy: Child,
    stdout: std::thread::JoinHandle<String>,
    store: &Path,
) {
    let output = wait_with_limit(healthy, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_in(&stdout.join().unwrap());
    let listing = ls(store);
    let traces = trace_ids(&listing);
    assert_eq!(
        traces.len(),
        1,
        "only the healthy agent has a trace: {listing}"
    );
    let file = store.join("healthy.xml");
    let document = export(store, &traces[0], &file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls));
}

/// A client that says a well-formed hello, reads the challenge and answers it with `proof`
/// (it does not know the credential); returns the collector's answer to the proof.
fn rogue_client(address: &str, role: Role, proof: &[u8]) -> wire::WireFrame {
    let mut socket = TcpStream::connect(address).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut hello = Hello::new(role, (role == Role::Agent).then(uuid::Uuid::new_v4));
    hello.nonce = openprof_format::handshake::fresh_nonce().unwrap();
    hello.identity = Some(Identity::generate().unwrap().public_hex());
    wire::write_frame(&mut socket, FrameKind::Hello, &wire::to_json(&hello)).unwrap();
    let challenge = wire::read_frame(&mut socket).unwrap().unwrap();
    assert_eq!(challenge.kind, FrameKind::Challenge);
    let proof = format!(
        "{{\"proof\":\"{}\",\"signature\":\"{}\"}}",
        hex(proof),
        hex(&[0; 64])
    );
    wire::write_frame(&mut socket, FrameKind::Proof, proof.as_bytes()).unwrap();
    wire::read_frame(&mut socket).unwrap().unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[test]
fn fragments_nested_too_deep_or_with_too_many_attributes_are_refused_and_the_rest_goes_on() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (mut healthy, _dir) = ticker(&collector.address, "3");
    let stdout = wait_until_ready_keeping_output(&mut healthy);

    // A node (typed in full by the collector) holding 100,000 levels of values.
    let head = "<node nodeId=\"67e55044-10b1-426f-9247-bb680e5fe0c8\" hostname=\"h\">";
    let mut deep = String::from(head);
    deep.push_str(&"<value>".repeat(99_999));
    deep.push_str(&"</value>".repeat(99_999));
    deep.push_str("</node>");
    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
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
    let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
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

    // Still serving: a new agent is welcomed, and the JVM streaming all along gets its trace whole.
    let _socket = raw_agent(&collector.address, TOKEN).unwrap();
    the_healthy_agents_trace_is_whole(healthy, stdout, store.path());
}

#[test]
fn an_agent_cannot_add_to_a_trace_another_agent_started() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let owner = uuid::Uuid::new_v4();
    let trace = uuid::Uuid::new_v4();
    let (mut started, _) = raw_agent_as(&collector.address, TOKEN, owner, "owner").unwrap();
    let start = format!(
        "<traceStart traceId=\"{trace}\" agentIdRef=\"{owner}\" time=\"1.0\" collationValue=\"1\"/>"
    );
    wire::write_frame(
        &mut started,
        FrameKind::Fragment,
        &wire::with_sequence(1, start.as_bytes()),
    )
    .unwrap();
    while wire::read_frame(&mut started).unwrap().unwrap().kind != FrameKind::Ack {}
    // Another holder of the agent credential, knowing the trace's id, tries to end it.
    let mut intruder = raw_agent(&collector.address, TOKEN).unwrap();
    let end = format!("<traceEnd traceIdRef=\"{trace}\" time=\"2.0\" collationValue=\"2\"/>");
    wire::write_frame(
        &mut intruder,
        FrameKind::Fragment,
        &wire::with_sequence(1, end.as_bytes()),
    )
    .unwrap();
    let reason = refusal(&mut intruder);
    assert!(
        reason.contains(&format!("trace {trace} belongs to agent {owner}")),
        "{reason}"
    );
    // The trace has its owner's element only, and is not ended; its owner may end it.
    let listing = ls(store.path());
    assert!(listing.contains(&trace.to_string()), "{listing}");
    assert!(!listing.contains("ended"), "{listing}");
    wire::write_frame(
        &mut started,
        FrameKind::Fragment,
        &wire::with_sequence(2, end.as_bytes()),
    )
    .unwrap();
    while wire::read_frame(&mut started).unwrap().unwrap().kind != FrameKind::Ack {}
    let listing = ls(store.path());
    assert!(listing.contains("ended"), "{listing}");
}

#[test]
fn a_wrong_credential_is_refused_for_good_and_never_travels() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    // A client that can't prove the credential is refused, and told not to retry.
    for role in [Role::Agent, Role::Control] {
        let answer = rogue_client(&collector.address, role, &[7; 32]);
        assert_eq!(answer.kind, FrameKind::Refused);
        let refusal = Refusal::decode(&answer.payload);
        assert!(refusal.reason.contains("wrong"), "{refusal:?}");
        assert!(refusal.reason.contains("credential"), "{refusal:?}");
        assert!(!refusal.retry, "{refusal:?}");
    }
    // A client with another credential does not believe the collector either: the
    // collector's proof was made with a key it does not share.
    let error = raw_agent(&collector.address, "wrong-token-xyz")
        .err()
        .unwrap();
    assert!(error.contains("could not prove"), "{error}");
    // Control needs the control credential: the agent credential is not enough.
    for (flag, token) in [
        ("--control-token", "wrong-token-xyz"),
        ("--control-token", TOKEN),
    ] {
        control_is_not_believed(&collector.address, flag, token);
    }

    // A JVM with the wrong token runs to its end unharmed, says once why nothing was sent,
    // and does not wait at exit for a collector that will never take its data.
    let options = format!(
        "net={},token=wrong-token-xyz,format=x,cpu=times,filter=+Ticker",
        collector.address
    );
    let (mut command, _dir) = java_command(Some(&options), "Ticker", &["0.5"]);
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.matches("could not prove").count(), 1, "{stderr}");
    assert!(stderr.contains("not retrying"), "{stderr}");
    assert!(!stderr.contains("did not acknowledge"), "{stderr}");
    assert!(trace_ids(&ls(store.path())).is_empty());
    let log = collector.log_with("wrong agent credential");
    assert!(log.contains("wrong agent credential"), "{log}");
    assert!(
        !log.contains("wrong-token-xyz") && !log.contains(TOKEN) && !log.contains(CONTROL_TOKEN),
        "{log}"
    );
    // Colour codes only on a terminal: this log goes to a pipe.
    assert!(!log.contains('\u{1b}'), "{log}");
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

/// `openprof control gc` with this credential fails: the collector's proof is not believed.
fn control_is_not_believed(address: &str, flag: &str, token: &str) {
    let output = openprof(&["control", "--collector", address, flag, token, "gc"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("could not prove"),
        "{}",
        text(&output.stderr)
    );
}

/// Listens where a collector would, records every byte agents send and answers each hello
/// with a challenge whose proof is made up (it does not know the token).
fn impostor() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = heard.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            let record = record.clone();
            std::thread::spawn(move || {
                let _ = socket.set_read_timeout(Some(Duration::from_secs(30)));
                if let Ok(Some(hello)) = wire::read_frame(&mut socket) {
                    record.lock().unwrap().extend_from_slice(&hello.payload);
                    let challenge = format!(
                        "{{\"nonce\":\"{}\",\"proof\":\"{}\"}}",
                        hex(&[1; 32]),
                        hex(&[2; 32])
                    );
                    let _ =
                        wire::write_frame(&mut socket, FrameKind::Challenge, challenge.as_bytes());
                }
                let mut rest = [0u8; 4096];
                while let Ok(read) = socket.read(&mut rest) {
                    if read == 0 {
                        break;
                    }
                    record.lock().unwrap().extend_from_slice(&rest[..read]);
                }
            });
        }
    });
    (address, heard)
}

#[test]
fn an_impostor_on_the_collectors_port_learns_nothing_and_gets_no_data() {
    let (address, heard) = impostor();
    let options = format!("net={address},token={TOKEN},format=x,cpu=times,filter=+Ticker");
    let (mut command, _dir) = java_command(Some(&options), "Ticker", &["0.5"]);
    let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("could not prove"), "{stderr}");
    assert!(!stderr.contains(TOKEN), "{stderr}");
    let heard = heard.lock().unwrap().clone();
    assert!(!heard.is_empty(), "the agent never said hello");
    assert!(
        !heard.windows(TOKEN.len()).any(|w| w == TOKEN.as_bytes()),
        "the impostor heard the token"
    );
    // Nothing past the hello: no proof, no trace data.
    assert!(
        !text(&heard).contains("threadStart") && !text(&heard).contains("\"proof\""),
        "the impostor got more than a hello: {}",
        text(&heard)
    );
    // The control client, likewise, sends nothing to it.
    let (address, heard) = impostor();
    control_is_not_believed(&address, "--control-token", CONTROL_TOKEN);
    let heard = heard.lock().unwrap().clone();
    assert!(!heard
        .windows(CONTROL_TOKEN.len())
        .any(|w| w == CONTROL_TOKEN.as_bytes()));
}

#[test]
fn an_agent_id_cannot_be_taken_over_by_another_token_holder() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let agent = uuid::Uuid::new_v4();
    let (first, _) = raw_agent_as(&collector.address, TOKEN, agent, "first").unwrap();
    drop(first);
    // The same agent id with another identity key: someone else holding the agent credential.
    let error = raw_agent_as(&collector.address, TOKEN, agent, "thief")
        .err()
        .unwrap();
    assert!(error.contains("belongs to another agent"), "{error}");
}

#[test]
fn before_authentication_frames_are_small_and_faults_are_answered() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let refused = |first: &[u8]| {
        let mut socket = TcpStream::connect(&collector.address).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        socket.write_all(first).unwrap();
        let answer = wire::read_frame(&mut socket).unwrap().unwrap();
        assert_eq!(answer.kind, FrameKind::Refused);
        Refusal::decode(&answer.payload).reason
    };
    // A hello claiming 16 MiB is refused from its header, before its payload is read.
    let reason = refused(&[1, 1, 0, 0, 0]);
    assert!(reason.contains("before authentication"), "{reason}");
    // A bad frame before the hello is answered with the reason, as for any other fault.
    let reason = refused(&[99, 0, 0, 0, 0]);
    assert!(reason.contains("frame kind 99 is unknown"), "{reason}");
    let reason = refused(&[4, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert!(reason.contains("must be a hello"), "{reason}");
    // An older agent's hello (protocol 1, token inside) is refused for good, naming versions.
    let mut old = Vec::new();
    wire::encode_frame(
        FrameKind::Hello,
        br#"{"version":1,"role":"agent","token":"t","agent_id":"00000000-0000-0000-0000-000000000001"}"#,
        &mut old,
    );
    let reason = refused(&old);
    assert!(reason.contains("protocol version 1"), "{reason}");
}

#[test]
fn names_agents_send_are_shown_with_control_characters_escaped() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (mut socket, _) = raw_agent_as(
        &collector.address,
        TOKEN,
        uuid::Uuid::new_v4(),
        "evil\u{1b}]0;owned\u{7}\u{1b}[2J\r\n2026-01-01T00:00:00Z  WARN forged line",
    )
    .unwrap();
    wire::write_frame(
        &mut socket,
        FrameKind::Goodbye,
        &wire::with_sequence(1, b""),
    )
    .unwrap();
    // Pings may come first.
    while wire::read_frame(&mut socket).unwrap().unwrap().kind != FrameKind::Ack {}
    let listing = ls(store.path());
    assert!(
        !listing.contains('\u{1b}') && !listing.contains('\u{7}'),
        "{listing:?}"
    );
    assert!(listing.contains("evil\\u{1b}]0;owned\\u{7}"), "{listing}");
    // The collector's log names the agent's host on the line that says it connected: a CR or
    // LF in the name cannot start a forged line.
    let log = collector.log_with(" connected; resuming");
    assert!(
        !log.lines()
            .any(|line| line.starts_with("2026-01-01T00:00:00Z")),
        "{log}"
    );
    assert!(log.contains("\\r\\n2026-01-01T00:00:00Z"), "{log}");
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
    let mut all = vec![
        "control",
        "--collector",
        address,
        "--control-token",
        CONTROL_TOKEN,
    ];
    all.extend_from_slice(args);
    openprof(&all)
}

/// Sends a command until an agent is there to take it (or a minute has passed: then the
/// last refusal).
fn control_when_connected(address: &str, args: &[&str]) -> Output {
    let mut last = None;
    poll(Duration::from_secs(60), || {
        let output = control(address, args);
        if output.status.success() {
            return Some(output);
        }
        last = Some(output);
        None
    })
    .unwrap_or_else(|| last.expect("asked at least once"))
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
    // Dumps (each of what was counted since the last) until the store has one of more than
    // 100 samples. Each waits for 150 ms of the JVM's CPU first: on a busy machine the dumps
    // came faster than the JVM ran, 143 of them with fewer samples each, until it ended.
    let mut dumps = 0;
    let mut since = cpu_time(child.id());
    wait_until("a dump of more than 100 samples was stored", LIMIT, || {
        wait_for(
            "the JVM used 150 ms of CPU since the last dump",
            LIMIT,
            || cpu_time(child.id()) >= since + Duration::from_millis(150),
        );
        since = cpu_time(child.id());
        let dump = control(&collector.address, &["cpu-samples"]);
        assert!(
            dump.status.success(),
            "dump {dumps}: {}{}",
            text(&dump.stdout),
            text(&dump.stderr)
        );
        dumps += 1;
        let hprof = std::fs::read_to_string(export_only_agent(store.path(), "so-far.hprof.txt"));
        let last = hprof
            .ok()?
            .rsplit("CPU SAMPLES BEGIN (total = ")
            .next()?
            .to_string();
        let total: u64 = last.split(')').next()?.parse().ok()?;
        (total > 100).then_some(())
    });
    let off = control(&collector.address, &["cpu-sampling-off"]);
    assert!(off.status.success(), "{}", text(&off.stderr));
    // What was counted between the dump and the switch goes too.
    let clear = control(&collector.address, &["clear-cpu-samples"]);
    assert!(clear.status.success(), "{}", text(&clear.stderr));
    // No sample comes while the JVM runs on for 300 ms of CPU time (as many samples at 1 ms).
    let off_at = cpu_time(child.id());
    wait_for("the JVM used 300 ms of CPU time", LIMIT, || {
        cpu_time(child.id()) >= off_at + Duration::from_millis(300)
    });
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
    // Commands that read or end the JVM are refused by an agent whose options don't allow
    // them, whoever holds the control credential.
    for (command, word) in [
        (&["dump-heap"][..], "commands=heap"),
        (&["exit"][..], "commands=exit"),
        (
            &["mpt-add", "CpuSplit.heavy(long,int) 1"][..],
            "commands=mpt",
        ),
    ] {
        let refused = control(&collector.address, command);
        assert!(!refused.status.success(), "{command:?} was obeyed");
        assert!(
            text(&refused.stdout).contains(word),
            "{command:?}: {}",
            text(&refused.stdout)
        );
    }
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));

    // The agent's HPROF text as stored, read with our HPROF reader.
    let file = export_only_agent(store.path(), "agent.hprof.txt");
    let hprof = std::fs::read_to_string(&file).unwrap();
    let tables: Vec<&str> = hprof.split("CPU SAMPLES BEGIN (total = ").skip(1).collect();
    assert_eq!(
        tables.len(),
        dumps + 2,
        "{dumps} commanded dumps while sampling, one after and the one at exit:\n{hprof}"
    );
    let total = |table: &str| -> u64 { table.split(')').next().unwrap().parse().unwrap() };
    assert!(
        total(tables[dumps - 1]) > 100,
        "samples before sampling was turned off"
    );
    assert_eq!(total(tables[dumps]), 0, "sampling off: no samples");
    assert_eq!(total(tables[dumps + 1]), 0, "still off at exit");
    // Every trace printed after the depth change has at most two frames that depth counts
    // (Java frames, or a failed walk's mark; native frames come on top).
    let traces = hprof.split("\nTRACE ").skip(1);
    let mut checked = 0;
    for trace in traces {
        let frames = trace
            .lines()
            .skip(1)
            .take_while(|line| line.starts_with('\t'))
            .filter(|line| !line.ends_with(":native)"))
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
    let mut hello = Hello::new(Role::Agent, Some(uuid::Uuid::new_v4()));
    hello.nonce = openprof_format::handshake::fresh_nonce().unwrap();
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
    let log = collector.log_with("TLS handshake failed");
    assert!(log.contains("TLS handshake failed"), "{log}");
    // The command-line clients speak TLS too.
    let address = format!("localhost:{port}");
    let control = openprof(&[
        "control",
        "--collector",
        &address,
        "--tls-ca",
        cert.to_str().unwrap(),
        "--control-token",
        CONTROL_TOKEN,
        "gc",
    ]);
    assert!(
        text(&control.stderr).contains("no agent is connected"),
        "the control client did not get through TLS: {}",
        text(&control.stderr)
    );
    let plain_control = openprof(&[
        "control",
        "--collector",
        &address,
        "--control-token",
        CONTROL_TOKEN,
        "gc",
    ]);
    assert!(!plain_control.status.success());
    assert!(!text(&plain_control.stderr).contains("no agent is connected"));
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
    let stdout = wait_until_ready_keeping_output(&mut child);
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

    // The same profile read from the store by `convert`, as folded stacks: the same split.
    let folded_file = store.path().join("stored.collapsed");
    let converted = openprof(&[
        "convert",
        "--stored",
        &only_agent(store.path()),
        "--agent",
        "--store",
        store.path().to_str().unwrap(),
        "-o",
        folded_file.to_str().unwrap(),
    ]);
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    let folded = std::fs::read_to_string(&folded_file).unwrap();
    let leaves = crate::helpers::leaf_samples(&folded);
    let leaf_samples = |method: &str| leaves.get(method).copied().unwrap_or(0) as f64;
    let (folded_heavy, folded_light) = (
        leaf_samples("AttachTarget.heavy"),
        leaf_samples("AttachTarget.light"),
    );
    let folded_share = folded_heavy / (folded_heavy + folded_light);
    assert!(
        (folded_share - share).abs() <= 0.01,
        "heavy {folded_share:.3} from the store, {share:.3} exported: {folded}"
    );
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
    let ticker = Counting::ticker(&collector.address, "filter=+Ticker");
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
    // More than a thousand calls in the first trace.
    ticker.wait_count(2_000);
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
    // The calls of a while are traced nowhere (and still counted): more than a thousand
    // (the counts are printed every thousand calls, and may be read late).
    ticker.wait_count(ticker.count() + 4_000);
    let start = control(&collector.address, &["trace-start"]);
    assert!(start.status.success(), "{}", text(&start.stdout));
    // More than a thousand in the second trace.
    ticker.wait_count(ticker.count() + 4_000);
    let (stdout, _) = ticker.stop();
    let calls = calls_in(&stdout);

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
    let ticker = Counting::ticker(&address, "filter=+Ticker,netbuffer=6m");
    // 25,000 calls' method events (about 25 MB) against a 6 MiB buffer: most of it must go;
    // the burst at exit (the counts, 1 to 2 MB) fits.
    ticker.wait_count(25_000);
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), &address);
    // Back in touch, the agent says what it dropped.
    ticker
        .stderr
        .wait_for("were dropped while the collector was slow or away", LIMIT);
    let (stdout, _) = ticker.stop();
    let calls = calls_in(&stdout);
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
    let options = agent_options(&collector.address, "format=x,commands=mpt");
    let (command, _dir) = java_command(Some(&options), "MptSlow", &["loop"]);
    let slow = Counting::start(command, "pairs=");
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
    // Calls before the specification, untraced.
    slow.wait_count(10);
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
    // work(1) and work(3) alternate: 2 ms and 6 ms; more than 50 pairs traced (the pairs
    // are printed every tenth, and may be read late).
    slow.wait_count(slow.count() + 70);
    let remove = control(&collector.address, &["mpt-remove", "MptSlow.work(int) 1"]);
    assert!(remove.status.success(), "{}", text(&remove.stdout));
    marker("after");
    // Calls after it, untraced.
    slow.wait_count(slow.count() + 10);
    slow.stop();

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

/// A collector that knows the agent credential and runs the real handshake, then sends one
/// command frame made by `command` from the session's signer; returns whether the agent closed
/// the connection after it.
fn collector_sending(
    command: fn(&openprof_format::handshake::CommandSigner) -> Vec<u8>,
) -> (String, std::sync::mpsc::Receiver<bool>) {
    use openprof_format::handshake::ServerHandshake;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (closed, closed_seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut socket, _)) = listener.accept() else {
            return;
        };
        socket
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let hello = wire::read_frame(&mut socket).unwrap().unwrap();
        let handshake = ServerHandshake::start(&hello.payload).unwrap();
        wire::write_frame(
            &mut socket,
            FrameKind::Challenge,
            &handshake.challenge(TOKEN.as_bytes()),
        )
        .unwrap();
        let proof = wire::read_frame(&mut socket).unwrap().unwrap();
        let (signer, _) = handshake.finish(TOKEN.as_bytes(), &proof.payload).unwrap();
        let welcome = br#"{"version":2,"resume_after":0}"#;
        wire::write_frame(&mut socket, FrameKind::Welcome, welcome).unwrap();
        wire::write_frame(&mut socket, FrameKind::Command, &command(&signer)).unwrap();
        // Read until the agent closes (it should) or goes quiet.
        let mut sink = [0u8; 65536];
        let closed_by_agent = loop {
            match socket.read(&mut sink) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(_) => break false,
            }
        };
        let _ = closed.send(closed_by_agent);
        // Later connections are turned away.
        for socket in listener.incoming() {
            drop(socket);
        }
    });
    (address, closed_seen)
}

#[test]
fn an_agent_obeys_only_commands_sealed_with_its_session_key() {
    let unsealed: fn(&openprof_format::handshake::CommandSigner) -> Vec<u8> =
        |_| wire::Command::ForceGc.encode(1);
    let forged: fn(&openprof_format::handshake::CommandSigner) -> Vec<u8> = |signer| {
        let mut sealed = signer.seal(&wire::Command::ForceGc.encode(1));
        let last = sealed.len() - 1;
        sealed[last] ^= 0x55;
        sealed
    };
    for make in [unsealed, forged] {
        let (address, closed) = collector_sending(make);
        let options = format!("net={address},token={TOKEN},format=x,cpu=times,filter=+Ticker");
        let (mut command, _dir) = java_command(Some(&options), "Ticker", &["1"]);
        let output = wait_with_limit(command.spawn().unwrap(), Duration::from_secs(120));
        assert!(output.status.success(), "{}", text(&output.stderr));
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("without this session's signature"),
            "{stderr}"
        );
        assert!(
            closed.recv_timeout(Duration::from_secs(30)).unwrap(),
            "the agent kept the connection"
        );
    }
}

/// `openprof export` under umask 000, writing to `into`.
fn export_permissive(store: &Path, trace: &str, into: &Path) -> Output {
    let child = Command::new("sh")
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_openprof"))
        .args(["export", trace, "--store"])
        .arg(store)
        .arg("-o")
        .arg(into)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start openprof export");
    wait_with_limit(child, Duration::from_secs(120))
}

#[test]
fn exports_are_private_and_never_written_through_a_link() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |path: &Path| std::fs::symlink_metadata(path).unwrap().mode() & 0o7777;
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let (child, _) = ticker(&collector.address, "0.3");
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let traces = trace_ids(&ls(store.path()));
    assert_eq!(traces.len(), 1);
    let out = tempfile::tempdir().unwrap();

    let fresh = out.path().join("fresh.xml");
    let exported = export_permissive(store.path(), &traces[0], &fresh);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    assert_eq!(mode(&fresh), 0o600);
    xmllint(&fresh);

    // A file already there is replaced by a private one.
    let earlier = out.path().join("earlier.xml");
    std::fs::write(&earlier, "earlier").unwrap();
    std::fs::set_permissions(&earlier, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exported = export_permissive(store.path(), &traces[0], &earlier);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    assert_eq!(mode(&earlier), 0o600);
    assert_eq!(
        std::fs::read(&earlier).unwrap(),
        std::fs::read(&fresh).unwrap()
    );

    // A link is neither followed nor replaced.
    let victim = out.path().join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    let link = out.path().join("link.xml");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let exported = export_permissive(store.path(), &traces[0], &link);
    let stderr = text(&exported.stderr);
    assert!(!exported.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{} is a symbolic link", link.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim\n");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    drop(collector);
}

/// Sets the soft limit on the size of the files process `pid` writes; `None` lifts it.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads no new limit (null) and writes the current one into `current`.
    let got = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            std::ptr::null(),
            &mut current,
        )
    };
    assert_eq!(got, 0, "prlimit: {}", std::io::Error::last_os_error());
    let wanted = libc::rlimit {
        rlim_cur: bytes.unwrap_or(current.rlim_max),
        rlim_max: current.rlim_max,
    };
    // SAFETY: prlimit reads the new limit from `wanted` and writes nothing (null).
    let set = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &wanted,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn appends_that_fail_for_a_while_acknowledge_nothing_that_was_not_stored() {
    let store = tempfile::tempdir().unwrap();
    // With SIGXFSZ ignored, a write past the file size limit fails (EFBIG) as on a full disk.
    let collector = Collector::start_under(
        Some("trap '' XFSZ; exec \"$0\" \"$@\""),
        store.path(),
        "127.0.0.1:0",
        &[],
    );
    let pid = collector.child.id();
    let ticker = Counting::ticker(&collector.address, "filter=+Ticker");
    wait_until("a trace was stored", LIMIT, || {
        ls(store.path()).contains("trace ").then_some(())
    });
    // About 10 MB a second of method events meet a store that can't grow, until its commits
    // have failed and the agent was told why its connection closed.
    limit_file_size(pid, Some(64 << 10));
    ticker
        .stderr
        .wait_for("closed by the collector: store", LIMIT);
    limit_file_size(pid, None);
    let (stdout, stderr) = ticker.stop();
    let calls = calls_in(&stdout);
    let log = collector.log();
    assert!(
        log.contains("File too large") || log.contains("disk I/O error"),
        "the failed commits are logged: {log}"
    );
    let listing = ls(store.path());
    assert!(listing.contains(", finished"), "{listing}\n{log}");
    assert!(!listing.contains("GAPS"), "{listing}\n{log}");
    assert!(!listing.contains("LOST"), "{listing}\n{log}");
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = store.path().join("trace.xml");
    let document = export(store.path(), &traces[0], &file);
    validate(&file);
    assert_eq!(method_count(&document, "work"), Some(calls), "{log}");
    // The agent was told why its connection closed.
    assert!(
        stderr.contains("closed by the collector: store"),
        "{stderr}"
    );
}

#[test]
fn a_second_collector_on_a_store_fails_at_start_and_readers_never_lock_it() {
    let store = tempfile::tempdir().unwrap();
    let first = Collector::start(store.path(), "127.0.0.1:0");
    let (child, _dir) = ticker(&first.address, "1");
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let calls = calls_printed(&output);

    let mut second = Command::new(env!("CARGO_BIN_EXE_openprof"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store.path())
        .env("OPENPROF_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if poll(Duration::from_secs(60), || second.try_wait().unwrap()).is_none() {
        let _ = second.kill();
        let _ = second.wait();
        panic!("a second collector kept running on the same store");
    }
    let output = wait_with_limit(second, Duration::from_secs(5));
    assert!(!output.status.success());
    let reason = text(&output.stderr);
    assert!(
        reason.contains(&store.path().display().to_string())
            && reason.contains("another collector")
            && reason.contains(&format!("pid {}", first.child.id())),
        "{reason}"
    );

    // Listing and exporting while the collector runs.
    let listing = ls(store.path());
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = store.path().join("while-running.xml");
    let document = export(store.path(), &traces[0], &file);
    assert_eq!(method_count(&document, "work"), Some(calls));
    // The collector still takes data.
    let (child, _dir) = ticker(&first.address, "0.5");
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(trace_ids(&ls(store.path())).len(), 2);
    first.kill();

    // Without a collector, readers change nothing: a tail no catalog row points to stays
    // (only a writer cuts it).
    let segment = store.path().join("segments/000000.zst");
    let mut tail = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    tail.write_all(b"a block never committed").unwrap();
    let length = std::fs::metadata(&segment).unwrap().len();
    let listing = ls(store.path());
    assert_eq!(trace_ids(&listing).len(), 2, "{listing}");
    export(store.path(), &traces[0], &file);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), length);
    // And the next collector does.
    let next = Collector::start(store.path(), "127.0.0.1:0");
    assert!(std::fs::metadata(&segment).unwrap().len() < length);
    drop(next);
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_store_is_private_whatever_the_umask() {
    for umask in ["022", "000"] {
        let base = tempfile::tempdir().unwrap();
        let store = base.path().join("store");
        let script = format!("umask {umask}; exec \"$0\" \"$@\"");
        let collector = Collector::start_under(Some(&script), &store, "127.0.0.1:0", &[]);
        let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
        wire::write_frame(
            &mut socket,
            FrameKind::Hprof,
            &wire::with_sequence(1, b"JAVA PROFILE 1.0.2\0"),
        )
        .unwrap();
        loop {
            let frame = wire::read_frame(&mut socket).unwrap().unwrap();
            if frame.kind == FrameKind::Ack {
                break;
            }
        }
        drop(socket);
        drop(collector);
        let mut checked = 0;
        let mut dirs = vec![store.clone()];
        while let Some(dir) = dirs.pop() {
            assert_eq!(mode_of(&dir), 0o700, "umask {umask}: {}", dir.display());
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    assert_eq!(mode_of(&path), 0o600, "umask {umask}: {}", path.display());
                    checked += 1;
                }
            }
        }
        // The catalog, its lock and at least one segment.
        assert!(checked >= 3, "{checked} files");
    }
}

/// Reads what the collector sends a connection that said nothing, until it closes or `wait`
/// passes; the Refused frame's reason if one came.
fn refusal_without_hello(socket: &mut TcpStream, wait: Duration) -> Option<String> {
    socket.set_read_timeout(Some(wait)).unwrap();
    match wire::read_frame(socket) {
        Ok(Some(frame)) if frame.kind == FrameKind::Refused => {
            Some(Refusal::decode(&frame.payload).reason)
        }
        _ => None,
    }
}

#[test]
fn connections_that_never_say_hello_are_capped_and_logged_briefly() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let listening = collector.sockets();
    // The default cap (64) of connections that have not authenticated yet, once the
    // collector has taken them all.
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(&collector.address).unwrap())
        .collect();
    collector.wait_for_sockets(listening + 64);
    let mut extra = TcpStream::connect(&collector.address).unwrap();
    let reason = refusal_without_hello(&mut extra, Duration::from_secs(5))
        .expect("the connection past the cap is refused at once");
    assert!(reason.contains("64 connections"), "{reason}");
    // Many more: each is turned away, and the log does not grow with them.
    for _ in 0..300 {
        let mut socket = TcpStream::connect(&collector.address).unwrap();
        assert!(refusal_without_hello(&mut socket, Duration::from_secs(5)).is_some());
    }
    let log = collector.log();
    let lines = log
        .lines()
        .filter(|line| line.contains("not authenticated"))
        .count();
    assert!((1..=3).contains(&lines), "{lines} lines:\n{log}");
    // Once they go (the collector has closed them), agents get in again.
    drop(idle);
    collector.wait_for_sockets(listening);
    let (child, _dir) = ticker(&collector.address, "0.5");
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(trace_ids(&ls(store.path())).len(), 1);

    // A smaller cap, from the command line.
    let other = tempfile::tempdir().unwrap();
    let small = Collector::start_with(other.path(), "127.0.0.1:0", &["--max-unauthenticated", "2"]);
    let listening = small.sockets();
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&small.address).unwrap())
        .collect();
    small.wait_for_sockets(listening + 2);
    let mut extra = TcpStream::connect(&small.address).unwrap();
    let reason = refusal_without_hello(&mut extra, Duration::from_secs(5)).unwrap();
    assert!(reason.contains("2 connections"), "{reason}");

    // And a cap on all connections, authenticated or not.
    let third = tempfile::tempdir().unwrap();
    let capped = Collector::start_with(
        third.path(),
        "127.0.0.1:0",
        &["--max-connections", "3", "--max-unauthenticated", "10"],
    );
    let listening = capped.sockets();
    let _agent = raw_agent(&capped.address, TOKEN).unwrap();
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&capped.address).unwrap())
        .collect();
    capped.wait_for_sockets(listening + 3);
    let mut extra = TcpStream::connect(&capped.address).unwrap();
    let reason = refusal_without_hello(&mut extra, Duration::from_secs(5)).unwrap();
    assert!(reason.contains("3 connections are open"), "{reason}");
}

/// The bytes of a store's segments and catalog.
fn store_bytes(store: &Path) -> u64 {
    let mut total = std::fs::metadata(store.join("catalog.sqlite"))
        .unwrap()
        .len();
    for entry in std::fs::read_dir(store.join("segments")).unwrap() {
        total += entry.unwrap().metadata().unwrap().len();
    }
    total
}

#[test]
fn a_full_store_refuses_data_and_says_why() {
    let bad = openprof(&["serve", "--max-store-bytes", "12q", "--token", TOKEN]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("12q"), "{}", text(&bad.stderr));

    let store = tempfile::tempdir().unwrap();
    let collector =
        Collector::start_with(store.path(), "127.0.0.1:0", &["--max-store-bytes", "300k"]);
    let (child, _dir) = ticker(&collector.address, "3");
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let agent_said = text(&output.stderr);
    assert!(agent_said.contains("the store is full"), "{agent_said}");
    let log = collector.log_with("--max-store-bytes");
    assert!(
        log.contains("the store is full") && log.contains("--max-store-bytes"),
        "{log}"
    );
    let used = store_bytes(store.path());
    assert!(used <= (300 << 10) + (64 << 10), "{used} bytes stored");
    // What was stored before it filled up is intact: one trace without gaps.
    let listing = ls(store.path());
    assert!(!listing.contains("GAPS"), "{listing}");
    let traces = trace_ids(&listing);
    assert_eq!(traces.len(), 1, "{listing}");
    let file = store.path().join("partial.xml");
    export(store.path(), &traces[0], &file);
}

/// The most memory process `pid` has held (VmHWM), in bytes.
/// A process's memory figure from /proc: `VmHWM` (its peak) or `VmRSS` (resident now), bytes.
fn process_memory(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    kib << 10
}

fn peak_memory(pid: u32) -> u64 {
    process_memory(pid, "VmHWM")
}

#[test]
fn data_arriving_faster_than_it_is_stored_waits_within_the_byte_budget() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start_with(store.path(), "127.0.0.1:0", &["--queue-bytes", "16m"]);
    let before = peak_memory(collector.child.id());
    // 16 MiB that do not compress, sent 8 times by each of 4 agents as fast as loopback goes:
    // far faster than they can be compressed and synced.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let chunk: Vec<u8> = (0..(16 << 20) - 16)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let chunk = std::sync::Arc::new(chunk);
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let mut socket = raw_agent(&collector.address, TOKEN).unwrap();
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                // Plain TCP: the socket underneath can be written from another thread.
                let mut writer = socket.socket().try_clone().unwrap();
                let sending = std::thread::spawn(move || {
                    for sequence in 1..=8u64 {
                        wire::write_frame(
                            &mut writer,
                            FrameKind::Hprof,
                            &wire::with_sequence(sequence, &chunk),
                        )
                        .unwrap();
                    }
                });
                socket
                    .socket()
                    .set_read_timeout(Some(Duration::from_secs(120)))
                    .unwrap();
                loop {
                    let frame = wire::read_frame(&mut socket).unwrap().unwrap();
                    if frame.kind == FrameKind::Ack && frame.payload == 8u64.to_be_bytes() {
                        break;
                    }
                }
                sending.join().unwrap();
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    let grown = peak_memory(collector.child.id()) - before;
    // 512 MiB went through. The budget's 16 MiB, the frame copied for the store, a group
    // commit's block and its compressed form: about 64 MiB, with room for the allocator.
    assert!(
        grown < 160 << 20,
        "the collector grew by {} MiB",
        grown >> 20
    );
    let listing = ls(store.path());
    assert_eq!(listing.matches(": 8 frames, ").count(), 4, "{listing}");
    // Once stored, the burst's buffers go back to the system: a collector that keeps every
    // burst's buffers grows with each larger one for the rest of its life.
    let resident = || process_memory(collector.child.id(), "VmRSS");
    let returned = poll(Duration::from_secs(30), || {
        (resident() < before + (32 << 20)).then_some(())
    });
    assert!(
        returned.is_some(),
        "resident {} MiB after the burst, {} MiB before it",
        resident() >> 20,
        before >> 20
    );
}

#[test]
fn a_call_from_one_jvm_into_another_is_joined_under_the_callers_call() {
    // HttpCaller's Client.fetch calls HttpCallee's Greeter.handle over HTTP, five times; both
    // JVMs trace their own classes (callsites=y) to one collector: the request carries the
    // caller's context, the callee's trace an invocationContext, and the collector joins them.
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let traced = |class: &str| {
        agent_options(
            &collector.address,
            &format!("format=x,cpu=times,callsites=y,filter=+{class}*;-*"),
        )
    };
    let (mut command, _) = java_command(Some(&traced("HttpCallee")), "HttpCallee", &[]);
    let mut callee = command.stdin(Stdio::piped()).spawn().expect("start java");
    let mut stdout = BufReader::new(callee.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .strip_prefix("port=")
        .unwrap_or_else(|| panic!("no port: {line}"))
        .to_string();
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    });
    let (command, _) = java_command(Some(&traced("HttpCaller")), "HttpCaller", &[&port, "5"]);
    let caller = wait_with_limit(
        {
            let mut command = command;
            command.spawn().expect("start java")
        },
        Duration::from_secs(120),
    );
    assert!(caller.status.success(), "{}", text(&caller.stderr));
    drop(callee.stdin.take());
    let callee = wait_with_limit(callee, Duration::from_secs(120));
    assert!(callee.status.success(), "{}", text(&callee.stderr));
    assert!(rest.join().unwrap().contains("handled=5"));
    drop(collector);

    let joined = openprof(&[
        "invocations",
        "--store",
        store.path().to_str().unwrap(),
        "--json",
    ]);
    assert!(joined.status.success(), "{}", text(&joined.stderr));
    let calls: serde_json::Value = serde_json::from_slice(&joined.stdout).unwrap();
    let calls = calls.as_array().unwrap();
    assert_eq!(calls.len(), 5, "{calls:#?}");
    for call in calls {
        assert_eq!(call["callerMethod"], "HttpCaller$Client.fetch", "{call}");
        assert_eq!(call["calleeMethod"], "HttpCallee$Greeter.handle", "{call}");
        assert_ne!(call["callerAgent"], call["calleeAgent"]);
        // On the collector's clock, the callee's entry lies within the caller's call, up to the
        // error bounds of the two agents' clock offsets, which the join states (half the
        // shortest heartbeat round trip of each: under a millisecond on an idle machine, more
        // when heartbeats wait for a CPU). Its exit may come after the call returned: the
        // handler sends the response and closes the exchange before it returns.
        let ns = |name: &str| {
            call[name]
                .as_u64()
                .unwrap_or_else(|| panic!("no {name}: {call}"))
        };
        let slack = ns("clockErrorNs");
        assert!(ns("entryNs") + slack >= ns("callNs"), "{call}");
        assert!(ns("entryNs") <= ns("returnNs") + slack, "{call}");
        assert!(ns("exitNs") >= ns("entryNs"), "{call}");
    }
}

#[test]
fn a_new_filter_block_rewrites_the_loaded_classes_it_takes_in_or_leaves_out() {
    // Ticker starts with nothing traced; the block `+Ticker;-*` retransforms Ticker alone,
    // whose work() then reports its calls; the block `-*` takes that code away again.
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let ticker = Counting::ticker(&collector.address, "filter=-*");
    let connected = control_when_connected(&collector.address, &["snapshot", "connected"]);
    assert!(connected.status.success(), "{}", text(&connected.stderr));
    // work() runs (untraced) before its class is rewritten.
    ticker.wait_count(1_000);
    let traced = control(&collector.address, &["filter", "+Ticker;-*"]);
    assert!(traced.status.success(), "{}", text(&traced.stdout));
    assert!(
        text(&traced.stdout).contains("1 classes retransformed"),
        "{}",
        text(&traced.stdout)
    );
    // Traced calls, then untraced ones again.
    ticker.wait_count(ticker.count() + 2_000);
    let untraced = control(&collector.address, &["filter", "-*"]);
    assert!(untraced.status.success(), "{}", text(&untraced.stdout));
    assert!(
        text(&untraced.stdout).contains("1 classes retransformed"),
        "{}",
        text(&untraced.stdout)
    );
    ticker.wait_count(ticker.count() + 1_000);
    ticker.stop();

    let listing = ls(store.path());
    let traces = trace_ids(&listing);
    let file = store.path().join("trace.xml");
    let document = export(store.path(), &traces[0], &file);
    validate(&file);
    let elements: Vec<TraceElement> = read_all(document.as_slice()).map(Result::unwrap).collect();
    // Where the two new blocks are, in collation order: the one naming Ticker, and the last.
    let filters: Vec<(usize, &str)> = elements
        .iter()
        .enumerate()
        .filter_map(|(index, element)| match element {
            TraceElement::Filter(filter) => Some((index, filter.pattern.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(filters.len(), 4, "{filters:?}");
    let blocks = [filters[1].0, filters[3].0];
    assert_eq!(filters[1].1, "Ticker", "{filters:?}");
    let entries: Vec<usize> = elements
        .iter()
        .enumerate()
        .filter(|(_, element)| matches!(element, TraceElement::MethodEntry(_)))
        .map(|(index, _)| index)
        .collect();
    // Entries only while Ticker was traced (a call already running when its code was taken
    // away may still end in the rewritten code).
    assert!(entries.len() > 100, "{} entries", entries.len());
    assert!(
        entries.iter().all(|&at| at > blocks[0]),
        "an entry before +Ticker;-*"
    );
    assert!(
        entries.iter().filter(|&&at| at > blocks[1]).count() <= 1,
        "entries after -*"
    );
}

/// HeapShapes keeping `shapes` Shapes and 50 Bases, its agent (`extra` options) streaming to a
/// collector of its own, asked once for a heap dump there, then told to exit (a second dump).
/// Returns the store, the JVM's stderr and the agent's exported HPROF output.
fn heap_dumps_over_a_collector(
    extra: &str,
    shapes: usize,
    limit: Duration,
) -> (tempfile::TempDir, String, Vec<u8>) {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let options = agent_options(&collector.address, extra);
    let (mut command, _dir) =
        java_command(Some(&options), "HeapShapes", &[&shapes.to_string(), "50"]);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start java");
    let _stdout = wait_until_ready_keeping_output(&mut child);
    let dumped = control_when_connected(&collector.address, &["dump-heap"]);
    assert!(dumped.status.success(), "{}", text(&dumped.stderr));
    drop(child.stdin.take());
    let output = wait_with_limit(child, limit);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let file = export_only_agent(store.path(), "agent.hprof");
    let bytes = std::fs::read(&file).unwrap();
    (store, stderr, bytes)
}

/// The commanded dump and the one at exit, each with HeapShapes' exact counts.
fn assert_two_dumps_of_heap_shapes(bytes: &[u8], shapes: u64) {
    let profile = openprof_format::hprof_binary::read_profile(bytes, &mut |_| {}).unwrap();
    assert_eq!(
        profile.heap_dumps.len(),
        2,
        "the commanded dump and the one at exit"
    );
    for histogram in &profile.heap_dumps {
        let count = |class: &str| histogram.get(class).map_or(0, |count| count.instances);
        assert_eq!(count("HeapShapes$Shape"), shapes);
        assert_eq!(count("HeapShapes$Base"), 50);
        assert_eq!(count("HeapShapes$Shape[]"), 1);
        assert_eq!(count("short[][][]"), 1);
    }
}

#[test]
fn dump_heap_over_the_collector_streams_the_agents_walk_with_the_workloads_exact_counts() {
    // HeapShapes keeps a known 400 Shapes and 50 Bases until its stdin closes. With net= the
    // agent walks the heap itself and streams the HPROF binary dump as it goes: nothing of
    // the heap is written on the profiled machine.
    let (_store, stderr, bytes) = heap_dumps_over_a_collector(
        "heap=dump,format=b,commands=heap",
        400,
        Duration::from_secs(120),
    );
    assert!(!stderr.contains("the JVM's dumper"), "{stderr}");
    assert_two_dumps_of_heap_shapes(&bytes, 400);
}

#[test]
fn dump_heap_over_the_collector_arrives_whole_through_the_smallest_netbuffer() {
    // 200,000 Shapes make a dump of about 15 MB, over 200 times netbuffer=64k: the walk must
    // wait for the collector (frames of 16 KiB, four at most unacknowledged) instead of
    // dropping what does not fit, and no frame may exceed what the wire takes.
    let (store, stderr, bytes) = heap_dumps_over_a_collector(
        "heap=dump,format=b,commands=heap,netbuffer=64k",
        200_000,
        Duration::from_secs(300),
    );
    assert!(!stderr.contains("dropped"), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    let listed = openprof(&["ls", "--store", store.path().to_str().unwrap()]);
    assert!(
        !text(&listed.stdout).contains("LOST"),
        "{}",
        text(&listed.stdout)
    );
    assert!(
        bytes.len() > 2 * 15_000_000,
        "two dumps of 15 MB: {}",
        bytes.len()
    );
    assert_two_dumps_of_heap_shapes(&bytes, 200_000);
}

#[test]
fn continuous_mode_forgets_the_stacks_of_classes_gone_and_names_every_window_whole() {
    // ClassChurn loads a new class every millisecond or two, each a new stack to sample. With
    // OPENPROF_TRACES_KEPT=200 the agent holds at most that many stacks past a window: it
    // forgets them after nearly every window, says so (a CONTROL SETTINGS record in binary, a
    // FORGOTTEN TRACES record in text), and writes again the names a later window needs,
    // those of the allocation sites it still counts included. Every window must still name
    // its stacks, and a reader of the whole stream count what the windows count.
    for format in ["b", "a"] {
        let store = tempfile::tempdir().unwrap();
        let collector = Collector::start(store.path(), "127.0.0.1:0");
        let options = agent_options(
            &collector.address,
            &format!(
                "cpu=samples,interval=1,heap=sites,format={format},doe=n,continuous=500ms,\
                 depth=8,cutoff=0"
            ),
        );
        let (mut command, _dir) = java_command(Some(&options), "ClassChurn", &["6"]);
        command.env("OPENPROF_TRACES_KEPT", "200");
        let output = wait_with_limit(
            command.spawn().expect("start java"),
            Duration::from_secs(120),
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        let file = export_only_agent(store.path(), "churn.hprof");
        let bytes = std::fs::read(&file).unwrap();
        let (forgotten, read) = if format == "b" {
            let mut reader =
                openprof_format::hprof_binary::HprofReader::new(std::io::Cursor::new(&bytes))
                    .unwrap();
            let mut settings = 0;
            while let Some(item) = reader.next_item() {
                if let openprof_format::hprof_binary::Item::Record(
                    openprof_format::hprof_binary::Record::ControlSettings { .. },
                ) = item.unwrap()
                {
                    settings += 1;
                }
            }
            let profile =
                openprof_format::hprof_binary::read_profile(bytes.as_slice(), &mut |_| {}).unwrap();
            (settings - 1, profile)
        } else {
            let profile = openprof_format::hprof_text::read(bytes.as_slice()).unwrap();
            (profile.traces_forgotten, profile)
        };
        assert!(
            forgotten >= 3,
            "format={format}: the stacks were forgotten {forgotten} times"
        );
        let windows = openprof_collector::windows::WindowDecoder::default()
            .feed(&bytes, 1, 0)
            .unwrap();
        assert!(
            windows.len() >= 8,
            "format={format}: {} windows",
            windows.len()
        );
        let mut in_churn = 0;
        let mut allocations = 0;
        for window in &windows {
            for (stack, count) in &window.stacks {
                assert!(
                    stack
                        .frames
                        .iter()
                        .all(|frame| !frame.starts_with("<unknown")),
                    "format={format}: a {} window names a stack it forgot: {stack:?}",
                    window.event
                );
                if window.event == "cpu"
                    && stack
                        .frames
                        .last()
                        .is_some_and(|leaf| leaf == "ChurnTarget.work")
                {
                    in_churn += count;
                }
                if window.event == "alloc_objects" {
                    allocations += count;
                }
            }
        }
        assert!(allocations > 0, "format={format}: no allocation windows");
        // A reader of the whole stream counts the same samples.
        let read: u64 = read
            .cpu_tables
            .iter()
            .flat_map(|table| &table.rows)
            .filter(|row| row.method.as_deref() == Some("ChurnTarget.work"))
            .map(|row| row.count)
            .sum();
        assert!(
            in_churn >= 1_000,
            "format={format}: {in_churn} samples in ChurnTarget.work"
        );
        assert_eq!(read, in_churn, "format={format}");
    }
}

#[test]
fn continuous_mode_ships_a_window_a_second_each_with_the_workloads_split() {
    // CpuSplit spends three times as much CPU in heavy() as in light(); with continuous=1s
    // the agent ships what it sampled each second, unasked, and no dump at exit (doe=n): every
    // CPU SAMPLES table the collector stored is one window, and each shows the split.
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start(store.path(), "127.0.0.1:0");
    let options = agent_options(
        &collector.address,
        "cpu=samples,interval=1,format=b,doe=n,continuous=1s,label=service:split",
    );
    // Labels also come from system properties; a label the options give wins.
    let (mut command, _dir) = java_command_with(
        &[
            "-Dopenprof.label.team=pay",
            "-Dopenprof.label.service=not-this-one",
        ],
        Some(&options),
        "CpuSplit",
        &["5"],
    );
    let output = wait_with_limit(
        command.spawn().expect("start java"),
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("-Dopenprof.label.service is not used"),
        "{}",
        text(&output.stderr)
    );
    let file = export_only_agent(store.path(), "agent.hprof");
    let bytes = std::fs::read(&file).unwrap();
    let profile =
        openprof_format::hprof_binary::read_profile(bytes.as_slice(), &mut |_| {}).unwrap();
    // 5 s of CPU or more: at least 4 whole windows.
    assert!(
        profile.cpu_tables.len() >= 4,
        "{} windows",
        profile.cpu_tables.len()
    );
    let mut full_windows = 0;
    for table in &profile.cpu_tables {
        let count = |method: &str| -> u64 {
            table
                .rows
                .iter()
                .filter(|row| row.method.as_deref() == Some(method))
                .map(|row| row.count)
                .sum()
        };
        let (heavy, light) = (count("CpuSplit.heavy"), count("CpuSplit.light"));
        // A window is about a second of CPU at interval=1: up to 1,000 samples; the last one
        // may be cut short by the exit.
        assert!(heavy + light <= 1_300, "{heavy} + {light} in one window");
        if heavy + light < 300 {
            continue;
        }
        full_windows += 1;
        let share = heavy as f64 / (heavy + light) as f64;
        assert!(
            (share - 0.75).abs() <= 0.08,
            "a window's heavy share {share:.3} ({heavy} against {light})"
        );
    }
    assert!(
        full_windows >= 3,
        "{full_windows} windows of 300 samples or more"
    );
    let listed = openprof(&["ls", "--store", store.path().to_str().unwrap()]);
    assert!(
        text(&listed.stdout).contains("service:split")
            && text(&listed.stdout).contains("team:pay")
            && !text(&listed.stdout).contains("not-this-one"),
        "{}",
        text(&listed.stdout)
    );
    // A property label is checked as label= is, and a bad one stops the JVM, named.
    let (mut command, _dir) = java_command_with(
        &["-Dopenprof.label.team=has space"],
        Some(&options),
        "CpuSplit",
        &["1"],
    );
    let output = wait_with_limit(
        command.spawn().expect("start java"),
        Duration::from_secs(60),
    );
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("-Dopenprof.label.team=has space: ")
            && text(&output.stderr).contains("not allowed in a label's value"),
        "{}",
        text(&output.stderr)
    );
}
