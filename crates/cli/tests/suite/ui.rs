//! The web UI (`openprof serve --http`) in headless Chromium (Playwright, `tests/browser/ui.mjs`)
//! with real JVMs streaming to a real collector: the fleet lists both agents, the CpuSplit
//! agent's flame graph shows its 3:1 split and grows while live, a parameter tracing
//! specification added from the Controls traces Phases' requests and ranks the slow key first
//! (with the slow key's calls over time and the profile of its calls), a trace's values have
//! their calls over time exactly (MptSlow's known durations), two snapshots of Phases' two phases compare with the method that changed highlighted, and
//! a wrong credential gets no data. With a collector that has TLS, the UI is served over HTTPS
//! and its commands reach the agent through the collector's TLS port. `OPENPROF_SCREENSHOTS=
//! docs/images` keeps each page's picture for docs/ui.md.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use openprof_testkit::{cpu_time, java_command, poll, wait_for, workspace_root};
use serde_json::{json, Value};

use crate::collector::{agent_options, Collector, CONTROL_TOKEN, TOKEN};
use crate::helpers::{finish, text, LIMIT};
use crate::views_html::{browser_deps, chromium};

/// A request to the web API, with the control credential as a bearer token (or none): its
/// status and body.
pub(crate) fn http(
    web: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    json: Option<(&str, &str)>,
) -> (u16, String) {
    let stream = TcpStream::connect(web).expect("connect to the web UI");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let (status, _, body) = exchange(stream, web, method, path, bearer, json);
    (status, body)
}

/// One request over `stream` (`Connection: close`): the status, the head and the body.
pub(crate) fn exchange(
    mut stream: impl Read + Write,
    web: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    content: Option<(&str, &str)>,
) -> (u16, String, String) {
    let authorization = bearer
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let (content_type, body) = content.unwrap_or(("", ""));
    let content = if content_type.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {content_type}\r\n")
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {web}\r\n{authorization}{content}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    let response = read_to_close(&mut stream);
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    // A chunked body's framing is left in; callers look for what it holds.
    (status, head.to_string(), body.to_string())
}

/// Everything the peer sends until it closes (or resets, or ends TLS without saying so).
fn read_to_close(stream: &mut impl Read) -> Vec<u8> {
    let mut response = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => response.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                break
            }
            Err(error) => panic!("reading the web UI's answer: {error}"),
        }
    }
    response
}

pub(crate) fn api_get(web: &str, path: &str, bearer: Option<&str>) -> (u16, String) {
    http(web, "GET", path, bearer, None)
}

/// Runs one scenario of the browser script and returns what it saw.
pub(crate) fn drive(web: &str, args: &[&str]) -> Value {
    let mut command = Command::new("node");
    command
        .arg(workspace_root().join("crates/cli/tests/browser/ui.mjs"))
        .arg(format!("http://{web}"))
        .args(args)
        .env("OPENPROF_BROWSER_DEPS", browser_deps())
        .env("CHROMIUM", chromium())
        .env("OPENPROF_UI_TOKEN", CONTROL_TOKEN)
        .env("OPENPROF_UI_NAME", "ui-tester")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = std::env::var_os("OPENPROF_SCREENSHOTS").filter(|dir| !dir.is_empty()) {
        let dir = workspace_root().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        command.arg("--screenshots").arg(dir);
    }
    let output = finish(command, LIMIT);
    assert!(
        output.status.success(),
        "ui.mjs {args:?}: {}",
        text(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("ui.mjs {args:?}: {error}: {}", text(&output.stdout)));
    assert_eq!(
        seen["errors"],
        serde_json::json!([]),
        "ui.mjs {args:?}: {seen:#}"
    );
    assert_eq!(
        seen["requests"],
        serde_json::json!([]),
        "the UI used the network: {seen:#}"
    );
    seen
}

/// A JVM with the agent streaming to the collector, once it printed "ready" (or at once).
pub(crate) fn jvm(address: &str, extra: &str, class: &str, args: &[&str]) -> Child {
    let options = agent_options(address, extra);
    let (mut command, _) = java_command(Some(&options), class, args);
    command.stdin(Stdio::piped()).spawn().expect("start java")
}

/// The agent id of the JVM of this pid, once the collector has it connected.
pub(crate) fn agent_of(web: &str, pid: u32) -> String {
    agent_in_fleet(|path| api_get(web, path, Some(CONTROL_TOKEN)), pid)
}

/// The agent id of the JVM of this pid, once the fleet `get` reads has it connected.
fn agent_in_fleet(get: impl Fn(&str) -> (u16, String), pid: u32) -> String {
    let mut body = String::new();
    poll(LIMIT, || {
        let (status, fleet) = get("/api/fleet");
        assert_eq!(status, 200, "{fleet}");
        body = fleet;
        let start = body.find('{').unwrap_or(0);
        let end = body.rfind('}').map_or(body.len(), |end| end + 1);
        let fleet = serde_json::from_str::<Value>(&body[start..end]).ok()?;
        let agent = fleet["agents"]
            .as_array()?
            .iter()
            .find(|agent| agent["pid"] == pid && agent["connected"] == true)?;
        Some(agent["agent"].as_str().unwrap().to_string())
    })
    .unwrap_or_else(|| panic!("JVM {pid} never connected: {body}"))
}

/// The fleet as the API lists it with this filter (percent-encoded by the caller).
fn fleet_of(web: &str, filter: &str) -> Value {
    let (status, body) = api_get(
        web,
        &format!("/api/fleet?filter={filter}"),
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 200, "filter={filter}: {body}");
    let start = body.find('{').unwrap_or(0);
    let end = body.rfind('}').map_or(body.len(), |end| end + 1);
    serde_json::from_str(&body[start..end])
        .unwrap_or_else(|error| panic!("filter={filter}: {error}: {body}"))
}

/// The agent ids a fleet lists.
fn agent_ids(fleet: &Value) -> Vec<&str> {
    fleet["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| agent["agent"].as_str().unwrap())
        .collect()
}

fn number(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

#[test]
fn the_ui_shows_and_drives_the_fleet_in_a_browser() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start_with(
        &store.path().join("store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let web = collector.web.clone().expect("the web UI's address");
    let mut hot = jvm(
        &collector.address,
        "cpu=samples,interval=1,depth=64,thread=y,label=team:hot",
        "CpuSplit",
        &["300"],
    );
    let mut phases = jvm(
        &collector.address,
        "cpu=samples,interval=1,depth=64,commands=mpt",
        "Phases",
        &[],
    );
    let mut phases_out = BufReader::new(phases.stdout.take().unwrap());
    let mut line = String::new();
    phases_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let hot_agent = agent_of(&web, hot.id());
    let phases_agent = agent_of(&web, phases.id());

    // No credential, or a wrong one: the login page, 401, and no data.
    let refused = drive(&web, &["refused"]);
    assert_eq!(refused["redirectedTo"], "/login", "{refused:#}");
    assert_eq!(refused["apiStatus"], 401, "{refused:#}");
    assert!(
        !refused["apiBody"].as_str().unwrap().contains(&hot_agent),
        "{refused:#}"
    );
    assert_eq!(refused["afterRefusal"], 401, "{refused:#}");
    assert!(
        refused["refused"]
            .as_str()
            .unwrap()
            .contains("not the control credential"),
        "{refused:#}"
    );
    let (status, body) = api_get(&web, "/api/fleet", Some("not-the-token"));
    assert_eq!(status, 401);
    assert!(!body.contains(&hot_agent));

    // The fleet lists both agents, connected, CpuSplit's with its label; a click on the label
    // leaves CpuSplit's alone.
    let fleet = drive(&web, &["fleet", "team=hot"]);
    for (agent, labels) in [
        (&hot_agent, json!(["team=hot"])),
        (&phases_agent, json!([])),
    ] {
        let row = fleet["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["agent"] == agent.as_str())
            .unwrap_or_else(|| panic!("agent {agent} is not in the fleet: {fleet:#}"));
        assert_eq!(row["status"], "connected", "{fleet:#}");
        assert_eq!(row["labels"], labels, "{fleet:#}");
    }
    assert_eq!(fleet["filter"], "label:team=hot", "{fleet:#}");
    let filtered: Vec<&Value> = fleet["filtered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["agent"])
        .collect();
    assert_eq!(filtered, [&json!(hot_agent)], "{fleet:#}");

    // CpuSplit's flame graph: heavy three times light; live, the total grows.
    let flame = drive(&web, &["flame", &hot_agent]);
    let heavy = number(&flame["searches"]["CpuSplit\\.heavy"]);
    let light = number(&flame["searches"]["CpuSplit\\.light"]);
    let heavy_of_both = 100.0 * heavy / (heavy + light);
    assert!(
        (heavy_of_both - 75.0).abs() <= 3.0 && heavy + light > 90.0,
        "heavy {heavy:.2} %, light {light:.2} %: heavy {heavy_of_both:.1} % of the two, built to be 75 %"
    );
    let totals: Vec<f64> = flame["liveTotals"]
        .as_array()
        .unwrap()
        .iter()
        .map(number)
        .collect();
    // A dump every 1.5 s at most, stored a moment later: a reading may come before the next.
    assert!(
        totals.windows(2).all(|pair| pair[1] >= pair[0]) && totals[totals.len() - 1] > totals[0],
        "the live total did not grow: {totals:?}"
    );
    assert_eq!(flame["pageKept"], true, "the page was loaded again");
    assert_eq!(flame["flameHiddenOnMethods"], true, "{flame}");
    assert_eq!(
        flame["flameKeptAcrossTabs"], true,
        "back on its tab, the flame graph's page was loaded again"
    );
    assert_eq!(flame["resource"], "CpuSplit.heavy", "{flame:#}");
    assert!(
        flame["resourceCallers"]
            .to_string()
            .contains("CpuSplit.main"),
        "heavy's caller is main: {flame:#}"
    );

    // The statistics tab: the same split by self samples, and the main thread doing the work.
    let stats = drive(&web, &["statistics", &hot_agent]);
    let self_of = |name: &str| -> f64 {
        stats["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["name"] == name)
            .map_or(0.0, |row| number(&row["self"]))
    };
    let (heavy, light) = (self_of("CpuSplit.heavy"), self_of("CpuSplit.light"));
    assert!(
        (100.0 * heavy / (heavy + light) - 75.0).abs() <= 3.0,
        "heavy {heavy}, light {light}: {stats:#}"
    );
    let busiest = &stats["threads"][0];
    assert_eq!(busiest["name"], "main", "{stats:#}");

    // Parameter tracing added from the Controls: "slow" is ranked first, about 8 ms a call
    // against 1 ms.
    let mpt = drive(&web, &["mpt", &phases_agent, "Phases.handle(String) 1"]);
    assert!(
        mpt["commandResult"].as_str().unwrap().starts_with("done"),
        "{mpt:#}"
    );
    let values = mpt["values"].as_array().unwrap();
    assert!(values.len() >= 2, "{mpt:#}");
    assert_eq!(values[0]["value"], "\"slow\"", "{mpt:#}");
    assert_eq!(values[1]["value"], "\"fast\"", "{mpt:#}");
    let (slow, fast) = (number(&values[0]["mean"]), number(&values[1]["mean"]));
    assert!(
        slow > 4.0 * fast && fast >= 0.9,
        "slow {slow} ms, fast {fast} ms"
    );
    // The slow value's calls over time add up to its calls so far, drawn as bars; the CPU
    // profile of its calls holds only samples inside handle("slow"): all under handle (but for
    // a failed walk now and then), mostly in spin, none in alpha or beta (which run outside
    // the traced calls).
    assert!(number(&mpt["slowCalls"]) >= 3.0, "{mpt:#}");
    assert!(number(&mpt["chartBars"]) >= 1.0, "{mpt:#}");
    let share = |pattern: &str| number(&mpt["valueProfile"][pattern]);
    assert!(number(&mpt["valueTotal"]) >= 10.0, "{mpt:#}");
    assert!(share("Phases\\.handle") >= 98.0, "{mpt:#}");
    assert!(share("Phases\\.spin") >= 90.0, "{mpt:#}");
    assert_eq!(share("Phases\\.alpha|Phases\\.beta"), 0.0, "{mpt:#}");

    // Two phases, two snapshots: alpha's share goes, beta's comes.
    let taken = drive(&web, &["snapshot", &phases_agent, "phase-1"]);
    assert!(
        taken["snapshots"].to_string().contains("phase-1"),
        "{taken:#}"
    );
    let mut stdin = phases.stdin.take().unwrap();
    writeln!(stdin, "next").unwrap();
    stdin.flush().unwrap();
    line.clear();
    phases_out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "phase 2");
    // Phase 2's samples: the JVM computes in beta while it uses a second of CPU time (about
    // a thousand samples at 1 ms).
    let phase_2 = cpu_time(phases.id());
    wait_for(
        "the JVM used a second of CPU time in phase 2",
        LIMIT,
        || cpu_time(phases.id()) >= phase_2 + Duration::from_secs(1),
    );
    drive(&web, &["snapshot", &phases_agent, "phase-2"]);
    let diff = drive(&web, &["diff"]);
    let change_of = |method: &str| -> f64 {
        diff["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| row["name"] == method)
            .map(|row| number(&row["change"]))
            .sum()
    };
    let delta_of = |method: &str| -> f64 {
        diff["deltas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["name"] == method)
            .map_or(0.0, |row| number(&row["change"]))
    };
    assert!(
        delta_of("Phases.beta") > 30.0 && delta_of("Phases.alpha") < -30.0,
        "the statistics' changes: beta {:+.1}, alpha {:+.1}: {diff:#}",
        delta_of("Phases.beta"),
        delta_of("Phases.alpha")
    );
    assert!(
        change_of("Phases.beta") > 30.0 && change_of("Phases.alpha") < -30.0,
        "beta {:+.1} points, alpha {:+.1} points: {diff:#}",
        change_of("Phases.beta"),
        change_of("Phases.alpha")
    );

    // Every command sent from the UI is in the action log, with who sent it.
    let actions = drive(&web, &["actions"]);
    assert!(
        actions["actions"].as_array().unwrap().iter().any(|row| {
            row[1].as_str().unwrap().starts_with("ui-tester")
                && row[2].as_str().unwrap().starts_with("mpt-add")
        }),
        "{actions:#}"
    );
    // The log is the store owner's only.
    let log = store.path().join("store/ui/actions.log");
    let mode = std::fs::metadata(&log).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o077,
        0,
        "{} is readable by others",
        log.display()
    );

    drop(stdin);
    let _ = hot.kill();
    let _ = hot.wait();
    let _ = phases.wait();
    assert!(!collector.log().contains("panicked"), "{}", collector.log());
}

#[test]
fn the_api_refuses_bad_requests_by_name_and_commands_change_the_agent() {
    let store = tempfile::tempdir().unwrap();
    let collector = Collector::start_with(
        &store.path().join("store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let web = collector.web.clone().expect("the web UI's address");
    let mut hot = jvm(
        &collector.address,
        "cpu=samples,interval=20,depth=64,label=team:pay,label=env:test",
        "CpuSplit",
        &["300"],
    );
    let agent = agent_of(&web, hot.id());
    let token = Some(CONTROL_TOKEN);
    // Its labels, and the fleet filtered by them: exactly, by name, by a value's text.
    let fleet = fleet_of(&web, "");
    let row = fleet["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["agent"] == agent.as_str())
        .unwrap_or_else(|| panic!("agent {agent} is not in the fleet: {fleet:#}"));
    assert_eq!(
        row["labels"],
        json!([{"name": "team", "value": "pay"}, {"name": "env", "value": "test"}]),
        "{fleet:#}"
    );
    for (filter, listed) in [
        ("label%3Ateam%3Dpay", true),
        ("label:team=pay", true),
        ("label%3Ateam%3Dpay+label%3Aenv%3Dtest", true),
        ("label%3Ateam", true),
        ("PAY", true),
        ("label%3Ateam%3Dother", false),
        ("label%3Aowner", false),
        ("label%3Ateam%3Dpay+label%3Aenv%3Dprod", false),
    ] {
        let fleet = fleet_of(&web, filter);
        let expected: &[&str] = if listed { &[agent.as_str()] } else { &[] };
        assert_eq!(agent_ids(&fleet), expected, "filter={filter}: {fleet:#}");
    }

    let bad = |path: &str, status: u16, expected: &str| {
        let (got, body) = api_get(&web, path, token);
        assert_eq!(got, status, "{path}: {body}");
        assert!(body.contains(expected), "{path}: {body}");
    };
    bad(
        &format!("/api/methods?agent={agent}&colour=red"),
        400,
        "\\\"colour\\\" is not a parameter",
    );
    bad(
        "/api/fleet?filter=label%3Ateam%3D",
        400,
        "filter \\\"label:team=\\\": the label's value is empty",
    );
    bad(
        "/api/fleet?filter=label%3A",
        400,
        "the label's name is empty; use label:NAME=VALUE or label:NAME",
    );
    bad(
        "/api/fleet?filter=label%3Ate%2Fam",
        400,
        "'/' is not allowed in a label's name",
    );
    bad("/api/methods?agent=12", 400, "is not an id");
    bad("/api/methods", 400, "name a source");
    bad(
        &format!("/api/methods?agent={}", uuid::Uuid::nil()),
        404,
        "no agent",
    );
    bad(
        &format!("/api/methods?agent={agent}&include=%28"),
        400,
        "bad include",
    );
    bad(
        &format!("/api/methods?agent={agent}&event=heat"),
        400,
        "bad event",
    );
    bad(
        &format!("/api/export?agent={agent}&format=gif"),
        400,
        "format=\\\"gif\\\"",
    );
    bad("/api/nothing", 404, "no such page");
    // A state-changing request that is not JSON is refused before anything is done.
    let command = format!("/api/agents/{agent}/command");
    let (status, body) = http(&web, "POST", &command, token, Some(("text/plain", "dump")));
    assert_eq!(status, 415, "{body}");
    let (status, body) = http(
        &web,
        "POST",
        &command,
        token,
        Some((
            "application/json",
            r#"{"command": "interval", "argument": "0"}"#,
        )),
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("not a number of milliseconds"), "{body}");
    // An agent connects before the JVM has started, and answers "not ready" until it has.
    let mut answer = (0, String::new());
    poll(LIMIT, || {
        answer = http(
            &web,
            "POST",
            &command,
            token,
            Some((
                "application/json",
                r#"{"command": "interval", "argument": "2"}"#,
            )),
        );
        (!answer.1.contains("not ready for commands yet")).then_some(())
    });
    let (status, body) = answer;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("every 2 ms"), "{body}");
    // The next dump's CPU SAMPLER record says the new interval.
    let (status, body) = http(
        &web,
        "POST",
        &command,
        token,
        Some(("application/json", r#"{"command": "dump"}"#)),
    );
    assert_eq!(status, 200, "{body}");
    // Once stored.
    let mut exported = None;
    poll(LIMIT, || {
        let output = crate::helpers::openprof(&[
            "export",
            &agent,
            "--agent",
            "--store",
            store.path().join("store").to_str().unwrap(),
        ]);
        let stored = text(&output.stdout).contains("interval 2 ms");
        exported = Some(output);
        stored.then_some(())
    })
    .unwrap_or_else(|| {
        let exported = exported.expect("exported at least once");
        panic!("{}{}", text(&exported.stdout), text(&exported.stderr))
    });
    // The action log has both, the refusal too.
    let (_, actions) = api_get(&web, "/api/actions", token);
    assert!(
        actions.contains("interval 0") && actions.contains("interval 2"),
        "{actions}"
    );
    let _ = hot.kill();
    let _ = hot.wait();
}

/// A request to the web UI over HTTPS, trusting `ca` for the name `localhost`: its status, head
/// and body.
fn https(
    web: &str,
    ca: &Path,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    content: Option<(&str, &str)>,
) -> (u16, String, String) {
    let socket = TcpStream::connect(web).expect("connect to the web UI");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let config = openprof_format::tls_client::config(ca.to_str().unwrap()).unwrap();
    let stream = openprof_format::tls_client::connect(config, "localhost", socket).unwrap();
    exchange(stream, web, method, path, bearer, content)
}

#[test]
fn with_tls_the_ui_is_https_and_its_commands_reach_the_agent_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let collector = Collector::start_with(
        &dir.path().join("store"),
        "127.0.0.1:0",
        &[
            "--http",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let web = collector.web.clone().expect("the web UI's address");
    assert_eq!(
        collector.web_url.as_deref(),
        Some(format!("https://{web}/").as_str())
    );
    let port = collector.address.rsplit(':').next().unwrap();
    let options = format!(
        "net=localhost:{port},token={TOKEN},tlsca={},cpu=samples,interval=20,depth=64",
        cert.display()
    );
    let (mut command, _run) = java_command(Some(&options), "CpuSplit", &["300"]);
    let mut hot = command.stdin(Stdio::piped()).spawn().expect("start java");
    let get = |path: &str, bearer: Option<&str>| {
        let (status, _, body) = https(&web, &cert, "GET", path, bearer, None);
        (status, body)
    };
    let post = |path: &str, json: &str| {
        let (status, _, body) = https(
            &web,
            &cert,
            "POST",
            path,
            Some(CONTROL_TOKEN),
            Some(("application/json", json)),
        );
        (status, body)
    };

    // Over HTTPS, with the credential: the fleet has the agent, streaming over TLS.
    let agent = agent_in_fleet(|path| get(path, Some(CONTROL_TOKEN)), hot.id());

    // A command, through the collector's TLS port, reaches the agent and is carried out (an
    // agent connects before the JVM has started, and answers "not ready" until it has).
    let command = format!("/api/agents/{agent}/command");
    let mut answer = (0, String::new());
    poll(LIMIT, || {
        answer = post(&command, r#"{"command": "interval", "argument": "2"}"#);
        (!answer.1.contains("not ready for commands yet")).then_some(())
    });
    let (status, body) = answer;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("every 2 ms"), "{body}");
    let (status, body) = post(&command, r#"{"command": "dump"}"#);
    assert_eq!(status, 200, "{body}");
    // The live view's dump, and a snapshot (which has a live agent dump first).
    let (status, body) = post(&format!("/api/agents/{agent}/live"), "{}");
    assert_eq!(status, 200, "{body}");
    let live: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
    assert_eq!(live["connected"], true, "{body}");
    assert_eq!(live["dumped"]["ok"], true, "{body}");
    let (status, body) = post(
        "/api/snapshots",
        &format!(r#"{{"agent": "{agent}", "name": "over-tls"}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let (status, actions) = get("/api/actions", Some(CONTROL_TOKEN));
    assert_eq!(status, 200, "{actions}");
    // Every failed action is a try before the agent was ready.
    assert!(
        actions.contains("interval 2")
            && actions.matches("\"ok\":false").count()
                == actions.matches("not ready for commands yet").count(),
        "{actions}"
    );

    // A wrong credential: 401 and no data.
    let (status, body) = get("/api/fleet", Some("not-the-token"));
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(&agent), "{body}");
    let (status, body) = get("/api/fleet", None);
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(&agent), "{body}");

    // A browser's login: the session cookie is sent back over HTTPS only.
    let (status, head, _) = https(
        &web,
        &cert,
        "POST",
        "/login",
        None,
        Some((
            "application/x-www-form-urlencoded",
            &format!("token={CONTROL_TOKEN}&name=tls-tester"),
        )),
    );
    assert_eq!(status, 303, "{head}");
    let cookie = head
        .lines()
        .find(|line| line.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {head}"));
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );

    // Plain HTTP to the HTTPS port, with the credential: the handshake fails, no data.
    let mut plain = TcpStream::connect(&web).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // The server may close on the first bytes that are no TLS: a write after that fails.
    let _ = write!(
        plain,
        "GET /api/fleet HTTP/1.1\r\nHost: {web}\r\nAuthorization: Bearer {CONTROL_TOKEN}\r\nConnection: close\r\n\r\n"
    );
    let answer = read_to_close(&mut plain);
    let shown = String::from_utf8_lossy(&answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was answered: {shown}"
    );
    assert!(!shown.contains(&agent), "{shown}");
    // And a client that does not trust the certificate gets nowhere either.
    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let stranger_ca = dir.path().join("stranger.pem");
    std::fs::write(&stranger_ca, stranger.cert.pem()).unwrap();
    let config = openprof_format::tls_client::config(stranger_ca.to_str().unwrap()).unwrap();
    let socket = TcpStream::connect(&web).unwrap();
    let mut untrusting = openprof_format::tls_client::connect(config, "localhost", socket).unwrap();
    let refused =
        write!(untrusting, "GET /api/fleet HTTP/1.1\r\n\r\n").and_then(|_| untrusting.flush());
    assert!(
        refused.is_err(),
        "a client that does not trust the certificate got through"
    );

    let log = collector.log_with("web UI: TLS handshake failed");
    assert!(log.contains("web UI: TLS handshake failed"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let _ = hot.kill();
    let _ = hot.wait();

    // `openprof ui` over the store alone, with the same certificate: HTTPS too.
    let mut ui = crate::helpers::openprof_command(&[
        "ui",
        "--store",
        dir.path().join("store").to_str().unwrap(),
        "--http",
        "127.0.0.1:0",
        "--control-token",
        CONTROL_TOKEN,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start openprof ui");
    let mut said = String::new();
    BufReader::new(ui.stdout.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    let url = said
        .trim()
        .strip_prefix("openprof web UI on https://")
        .unwrap_or_else(|| panic!("not an HTTPS UI: {said}"));
    let store_web = url.trim_end_matches('/').to_string();
    let (status, _, body) = https(
        &store_web,
        &cert,
        "GET",
        "/api/fleet",
        Some(CONTROL_TOKEN),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&agent), "{body}");
    let (status, _, body) = https(
        &store_web,
        &cert,
        "GET",
        "/api/fleet",
        Some("not-the-token"),
        None,
    );
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains(&agent), "{body}");
    let mut plain = TcpStream::connect(&store_web).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let _ = write!(
        plain,
        "GET /api/fleet HTTP/1.1\r\nHost: {store_web}\r\nAuthorization: Bearer {CONTROL_TOKEN}\r\nConnection: close\r\n\r\n"
    );
    let answer = read_to_close(&mut plain);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP was answered");
    let _ = ui.kill();
    let _ = ui.wait();
}

/// A query parameter's value, percent-encoded.
fn encoded(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[test]
fn a_values_calls_over_time_come_exact_from_a_trace() {
    // MptSlow: work(n) spins n * 2 ms; work(1), work(5) and work(20) five times each, traced
    // into a trace (format=x) streamed to the collector.
    let store = tempfile::tempdir().unwrap();
    let specs = store.path().join("specs.mpt");
    std::fs::write(&specs, "MptSlow.work(int) 1\n").unwrap();
    let collector = Collector::start_with(
        &store.path().join("store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let web = collector.web.clone().expect("the web UI's address");
    let slow = jvm(
        &collector.address,
        &format!("format=x,mpt=@{}", specs.display()),
        "MptSlow",
        &[],
    );
    let pid = slow.id();
    let ended = openprof_testkit::wait_with_limit(slow, LIMIT);
    assert!(ended.status.success(), "MptSlow failed");
    // The trace, once the agent said goodbye.
    let mut fleet = Value::Null;
    let trace = poll(LIMIT, || {
        fleet = fleet_of(&web, "");
        let finished = fleet["agents"]
            .as_array()?
            .iter()
            .find(|agent| agent["pid"] == pid && agent["finished"] == true)?;
        Some(finished["traces"][0]["trace"].as_str()?.to_string())
    })
    .unwrap_or_else(|| panic!("no finished trace: {fleet:#}"));
    let (status, body) = api_get(
        &web,
        &format!("/api/mpt?trace={trace}"),
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let mpt: Value = serde_json::from_str(&body).unwrap();
    let method = &mpt["methods"][0];
    let values: Vec<&str> = method["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|value| value["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, ["20", "5", "1"], "{mpt:#}");
    let calls_of = |value: &str| {
        let (status, body) = api_get(
            &web,
            &format!(
                "/api/mpt/calls?trace={trace}&method={}&spec={}&value={value}",
                encoded(method["method"].as_str().unwrap()),
                encoded(method["spec"].as_str().unwrap())
            ),
            Some(CONTROL_TOKEN),
        );
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    // Each value's five calls, each by when it began, with their known durations.
    for (value, spin_ms) in [("20", 40.0), ("1", 2.0)] {
        let over = calls_of(value);
        assert_eq!(over["exact"], true, "{over:#}");
        let points = over["points"].as_array().unwrap();
        let calls: u64 = points
            .iter()
            .map(|point| point["calls"].as_u64().unwrap())
            .sum();
        assert_eq!(calls, 5, "{over:#}");
        for point in points {
            let mean = point["wallMeanMs"].as_f64().unwrap();
            let longest = point["wallMaxMs"].as_f64().unwrap();
            assert!(mean >= spin_ms && longest >= mean, "{over:#}");
        }
    }
    // A value never recorded has no calls; a request that names no value is refused by name.
    assert_eq!(calls_of("3")["points"], json!([]));
    let (status, body) = api_get(
        &web,
        &format!("/api/mpt/calls?trace={trace}&method=x&spec=y"),
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("value is missing"), "{body}");
}
