//! The web UI's fleet profile on ClickHouse (`openprof serve --clickhouse URL --http ADDR`): a
//! JVM running MptJoined in continuous mode (HPROF text, so that its windows carry method
//! parameter tracing's values too) and a JVM running Calls writing a trace (format=x) stream to
//! a collector that forwards them into a real ClickHouse server. In headless Chromium
//! (Playwright, `tests/browser/ui.mjs`) the form of the "Fleet profile" page, filled with the
//! slow key's sample label, loads the flame graph ClickHouse summed (slowBranch's frames, never
//! fastBranch's) and the top methods over time; user alice's requests are three quarters of the
//! labelled samples; the differential page of two ranges loads, a service without windows is
//! told beside the form, and the traced values table (filtered by lookup's method) shows the
//! slow key first and the calls table Calls.work's 5,000 calls. Over HTTP: the traced values
//! (every lookup counted once, slow's CPU 3 to 5 times fast's) and the calls from traces, the
//! differential page, bad parameters refused by name, no credential, a collector without
//! ClickHouse (404, and its page has no fleet profile) and one whose ClickHouse is away (502).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use openprof_testkit::{java_command, poll, wait_with_limit};
use serde_json::{json, Value};

use crate::collector::{agent_options, Collector, CONTROL_TOKEN};
use crate::fleet::{wait_for_every_window, ClickHouseServer};
use crate::helpers::text;
use crate::ui::{api_get, drive, exchange};

/// The sample label of MptJoined's lookup(key) calls with the key "slow".
const SLOW_KEY: &str = "MptJoined.lookup(java.lang.String) 1=slow";
/// The method whose values MptJoined's agent traces.
const LOOKUP: &str = "MptJoined.lookup(java.lang.String)";
/// The calls Calls makes of work().
const WORK_CALLS: u64 = 5_000;

/// GET `path` from the web UI with the control credential (or none): status, head and body.
fn get(web: &str, path: &str, bearer: Option<&str>) -> (u16, String, String) {
    let stream = TcpStream::connect(web).expect("connect to the web UI");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    exchange(stream, web, "GET", path, bearer, None)
}

/// GET a JSON route of the web UI with the control credential; 200 expected.
fn json_of(web: &str, path: &str) -> Value {
    let (status, body) = api_get(web, path, Some(CONTROL_TOKEN));
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|error| panic!("{path}: {error}: {body}"))
}

/// lookup(key)'s traced values over HTTP: its rows, and the calls they count.
fn lookups_in_clickhouse(web: &str) -> (Vec<Value>, u64) {
    let values = json_of(
        web,
        &format!("/api/fleet/values?service=joined&seconds=3600&method={LOOKUP}"),
    );
    let rows = values["values"].as_array().unwrap().clone();
    let calls = rows.iter().map(|row| row["calls"].as_u64().unwrap()).sum();
    (rows, calls)
}

/// Calls.work's calls counted from the trace over HTTP (0 before any).
fn work_calls_in_clickhouse(web: &str) -> u64 {
    let calls = json_of(web, "/api/fleet/calls?service=calls&seconds=3600&top=50");
    calls["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["method"] == "Calls.work")
        .map_or(0, |row| row["calls"].as_u64().unwrap())
}

/// The samples `/api/fleet/top` counts for the service in the last hour: every bucket's total,
/// which its top methods leave part of (two a second: a loaded machine's run has more leaves,
/// JIT and class loading among them).
fn samples_in_clickhouse(web: &str) -> u64 {
    let (status, body) = api_get(
        web,
        "/api/fleet/top?service=joined&seconds=3600&bucket=1&top=2",
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let top: Value = serde_json::from_str(&body).unwrap_or_else(|error| panic!("{error}: {body}"));
    // Every bucket's total counts every method, its top ones and the rest.
    top["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|bucket| {
            let methods = bucket["methods"].as_array().unwrap();
            let total = bucket["total"].as_u64().unwrap();
            let shown: u64 = methods
                .iter()
                .map(|method| method["value"].as_u64().unwrap())
                .sum();
            assert!(methods.len() <= 2 && shown <= total, "{bucket:#}");
            total
        })
        .sum()
}

#[test]
fn the_fleet_profile_page_answers_from_clickhouse_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let collector = Collector::start_with(
        &dir.path().join("store"),
        "127.0.0.1:0",
        &[
            "--clickhouse",
            &url,
            "--database",
            "ui_fleet",
            "--http",
            "127.0.0.1:0",
        ],
    );
    let web = collector.web.clone().expect("the web UI's address");
    // MptJoined as the fleet test runs it: lookup(key)'s key traced, alice's and bob's requests
    // labelled by the application, a window a second. In HPROF text, whose windows carry the
    // MPT record (the traced values), with the last one at exit (doe=y).
    let specs = dir.path().join("lookup.mpt");
    std::fs::write(&specs, format!("{LOOKUP} 1\n")).unwrap();
    let options = agent_options(
        &collector.address,
        &format!(
            "cpu=samples,interval=1,format=a,doe=y,continuous=1s,label=service:joined,mpt=@{}",
            specs.display()
        ),
    );
    let (mut command, _java_dir) = java_command(Some(&options), "MptJoined", &["6"]);
    let started = Instant::now();
    let jvm = command.spawn().expect("start java");
    // Calls writing a trace: work() called exactly 5,000 times, each a methodEntry element.
    let options = agent_options(
        &collector.address,
        "format=x,cpu=times,filter=+Calls,label=service:calls",
    );
    let (mut command, _calls_dir) =
        java_command(Some(&options), "Calls", &[&WORK_CALLS.to_string(), "3"]);
    let calls_jvm = command.spawn().expect("start java");

    // While it runs: what needs no windows.
    // Bad parameters are refused by name, before ClickHouse is asked.
    for (path, named) in [
        ("/view/fleet/flame?compare=0", "compare=\"0\""),
        ("/view/fleet/flame?event=cpu_time", "event=\"cpu_time\""),
        ("/view/fleet/flame?label=team", "label=\"team\""),
        (
            "/view/fleet/flame?seconds=5&since=1",
            "seconds= with since=",
        ),
        ("/view/fleet/flame?since=9&until=3", "until=3"),
        ("/api/fleet/top?bucket=0", "bucket=\"0\""),
        ("/api/fleet/top?top=1000", "top=\"1000\""),
        ("/api/fleet/top?sample_label=user", "sample_label=\"user\""),
        ("/api/fleet/top?compare=60", "compare= is not a parameter"),
        // Calls count no samples: what selects samples is refused by name.
        (
            "/api/fleet/values?sample_label=user%3Dalice",
            "sample_label= counts samples",
        ),
        ("/api/fleet/values?event=cpu", "event= counts samples"),
        ("/api/fleet/values?method=", "method= is empty"),
        ("/api/fleet/values?top=5", "top= is not a parameter"),
        ("/api/fleet/calls?event=wall", "event= counts samples"),
        ("/api/fleet/calls?top=0", "top=\"0\""),
        ("/api/fleet/calls?label=team", "label=\"team\""),
    ] {
        let (status, _, body) = get(&web, path, Some(CONTROL_TOKEN));
        assert_eq!(status, 400, "{path}: {body}");
        let message = serde_json::from_str::<Value>(&body).unwrap()["error"].clone();
        assert!(
            message.as_str().unwrap().contains(named),
            "{path}: {message}"
        );
    }
    // No credential: the API answers 401, the page sends the browser to log in.
    for path in [
        "/api/fleet/top?service=joined",
        "/api/fleet/values?service=joined",
        "/api/fleet/calls?service=calls",
    ] {
        let (status, _, body) = get(&web, path, None);
        assert_eq!(status, 401, "{path}: {body}");
    }
    let (status, head, _) = get(&web, "/view/fleet/flame?service=joined", None);
    assert_eq!(status, 303, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("location: /login"),
        "{head}"
    );
    let (status, _, body) = get(&web, "/view/fleet/flame?service=joined", Some("not-it"));
    assert_eq!(status, 303, "{body}");
    // A collector without ClickHouse says so on every fleet route, and its page has no fleet
    // profile.
    let plain = Collector::start_with(
        &dir.path().join("plain-store"),
        "127.0.0.1:0",
        &["--http", "127.0.0.1:0"],
    );
    let plain_web = plain.web.clone().expect("the web UI's address");
    for path in [
        "/view/fleet/flame?service=joined",
        "/api/fleet/top?service=joined",
        "/api/fleet/pprof?service=joined",
        "/api/fleet/values?service=joined",
        "/api/fleet/calls?service=calls",
    ] {
        let (status, _, body) = get(&plain_web, path, Some(CONTROL_TOKEN));
        assert_eq!(status, 404, "{path}: {body}");
        assert!(
            body.contains("forwards no windows to ClickHouse (openprof serve --clickhouse URL)"),
            "{path}: {body}"
        );
    }
    // A collector whose ClickHouse is away: 502, and why.
    let away_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let away = Collector::start_with(
        &dir.path().join("away-store"),
        "127.0.0.1:0",
        &[
            "--clickhouse",
            &format!("http://127.0.0.1:{away_port}"),
            "--http",
            "127.0.0.1:0",
        ],
    );
    let away_web = away.web.clone().expect("the web UI's address");
    for path in [
        "/api/fleet/values?service=joined",
        "/api/fleet/calls?service=calls",
    ] {
        let (status, _, body) = get(&away_web, path, Some(CONTROL_TOKEN));
        assert_eq!(status, 502, "{path}: {body}");
        assert!(
            serde_json::from_str::<Value>(&body).unwrap()["error"]
                .as_str()
                .is_some_and(|message| !message.is_empty()),
            "{path}: {body}"
        );
    }
    drop(away);
    let (_, session) = api_get(&plain_web, "/api/session", Some(CONTROL_TOKEN));
    assert_eq!(
        serde_json::from_str::<Value>(&session).unwrap()["clickhouse"],
        false
    );
    let absent = drive(&plain_web, &["fleet-profile", r#"{"absent": true}"#]);
    assert_eq!(absent["navShown"], false, "{absent:#}");
    assert!(
        absent["absentText"]
            .as_str()
            .unwrap()
            .contains("forwards no windows to ClickHouse"),
        "{absent:#}"
    );
    drop(plain);

    let output = wait_with_limit(jvm, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let requests: u64 = stdout
        .trim()
        .strip_prefix("requests=")
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let output = wait_with_limit(calls_jvm, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    // Until the forwarder has every window: ClickHouse holds every sample the store has (the
    // web UI counts them all too), every lookup is counted, and so is every call of work().
    let stored = wait_for_every_window(
        &url,
        "ui_fleet",
        &dir.path().join("store"),
        &collector,
        "cpu",
        &[],
        dir.path(),
    );
    let (mut looked_up, mut worked) = (0, 0);
    poll(Duration::from_secs(120), || {
        let lookups;
        (lookups, looked_up) = lookups_in_clickhouse(&web);
        worked = work_calls_in_clickhouse(&web);
        assert!(looked_up <= requests, "{requests} requests: {lookups:#?}");
        assert!(worked <= WORK_CALLS, "Calls.work {worked}");
        (looked_up == requests && worked == WORK_CALLS).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "ClickHouse holds {looked_up} of {requests} lookups, {worked} calls of Calls.work\n{}",
            collector.log()
        )
    });
    assert_eq!(samples_in_clickhouse(&web), stored);

    // The traced values over HTTP: lookup's two keys, each call once, the slow key's calls
    // taking 3 to 5 times the CPU of the fast key's (4 times the rounds), the slow key first
    // (the most wall time).
    let (lookups, _) = lookups_in_clickhouse(&web);
    let keys: Vec<&str> = lookups
        .iter()
        .map(|row| row["value"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["slow", "fast"], "{lookups:#?}");
    let (slow, fast) = (&lookups[0], &lookups[1]);
    for row in [slow, fast] {
        // Named with its loader where the agent names it so (docs/clickhouse.md).
        assert!(
            row["method"].as_str().unwrap().starts_with(LOOKUP),
            "{row:#}"
        );
        assert_eq!(row["spec"], format!("{LOOKUP} 1"), "{row:#}");
        assert!(
            row["type"].as_str().is_some_and(|kind| !kind.is_empty()),
            "{row:#}"
        );
        let (mean, max) = (
            row["wallMeanMs"].as_f64().unwrap(),
            row["wallMaxMs"].as_f64().unwrap(),
        );
        assert!(mean > 0.0 && max >= mean, "{row:#}");
    }
    let calls = |row: &Value| row["calls"].as_u64().unwrap();
    assert!(calls(slow).abs_diff(calls(fast)) <= 4, "{lookups:#?}");
    assert_eq!(calls(slow) + calls(fast), requests, "{lookups:#?}");
    let ratio = slow["cpuMeanMs"].as_f64().unwrap() / fast["cpuMeanMs"].as_f64().unwrap();
    assert!(
        (3.0..=5.0).contains(&ratio),
        "slow/fast CPU {ratio:.2}: {lookups:#?}"
    );
    // Without method=, the application's context is there too (alice, bob); a service without
    // agents has no values, and an HPROF agent no trace: empty lists, not refusals.
    let all_values = json_of(&web, "/api/fleet/values?service=joined&seconds=3600");
    let all_values = all_values["values"].as_array().unwrap();
    assert!(
        all_values.iter().any(|row| row["value"] == "alice") && all_values.len() > lookups.len(),
        "{all_values:#?}"
    );
    let nobody = json_of(&web, "/api/fleet/values?service=nobody&seconds=3600");
    assert_eq!(nobody["values"], json!([]), "{nobody:#}");
    let joined_calls = json_of(&web, "/api/fleet/calls?service=joined&seconds=3600");
    assert_eq!(joined_calls["methods"], json!([]), "{joined_calls:#}");
    // The JDK's methods Calls runs are traced too: top=2 lists the two called most, once the
    // trace's elements are all in ClickHouse (the forwarder may still be inserting the rest).
    let mut top_calls = Value::Null;
    poll(Duration::from_secs(120), || {
        top_calls = json_of(&web, "/api/fleet/calls?service=calls&seconds=3600&top=2");
        let methods = top_calls["methods"].as_array()?;
        (methods.len() == 2 && methods[1]["calls"].as_u64() >= Some(WORK_CALLS)).then_some(())
    });
    assert_eq!(top_calls["top"], 2, "{top_calls:#}");
    let top_calls = top_calls["methods"].as_array().unwrap();
    assert_eq!(top_calls.len(), 2, "{top_calls:#?}");
    assert!(
        top_calls[0]["calls"].as_u64() >= top_calls[1]["calls"].as_u64()
            && top_calls[1]["calls"].as_u64() >= Some(WORK_CALLS),
        "{top_calls:#?}"
    );

    // The differential page of the run's second half (up to now) against its first, over HTTP.
    let half = started.elapsed().as_secs().saturating_sub(4).max(4);
    let (status, head, body) = get(
        &web,
        &format!("/view/fleet/flame?service=joined&seconds={half}&compare={half}"),
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("frame-ancestors 'self'"), "{head}");
    assert!(
        body.contains("<html") && body.contains("MptJoined"),
        "{head}"
    );

    // The page, in a browser.
    let plan = json!({
        "searches": ["MptJoined\\.slowBranch", "MptJoined\\.fastBranch"],
        "loads": [
            {"service": "joined", "sampleLabels": [SLOW_KEY], "seconds": 3600, "bucket": 1,
             "top": 2, "shot": "ui-fleet-profile.png"},
            {"service": "joined", "sampleLabels": ["user=alice"], "seconds": 3600},
            {"service": "joined", "sampleLabels": ["user=bob"], "seconds": 3600},
            // The last hour against the hour up to 2 s ago: both hold the run.
            {"service": "joined", "seconds": 3600, "compare": 2},
            {"service": "nobody", "seconds": 3600, "refused": 404},
            // Every agent: MptJoined's windows and values, Calls' trace.
            {"service": "", "seconds": 3600, "method": LOOKUP, "callsTop": 50},
        ],
    });
    let seen = drive(&web, &["fleet-profile", &plan.to_string()]);
    let loads = seen["loads"].as_array().unwrap();
    assert!(
        seen["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|event| event == "wall"),
        "{seen:#}"
    );
    // The slow key's calls: slowBranch's frames, never fastBranch's.
    let slow = &loads[0];
    assert_eq!(slow["state"], "ready", "{seen:#}");
    // Enough samples for the shares to mean something, on a machine busy with other tests too.
    assert!(slow["total"].as_f64().unwrap() >= 300.0, "{slow:#}");
    assert!(
        slow["shares"]["MptJoined\\.slowBranch"].as_f64().unwrap() >= 90.0,
        "{slow:#}"
    );
    assert_eq!(
        slow["shares"]["MptJoined\\.fastBranch"].as_f64(),
        Some(0.0),
        "{slow:#}"
    );
    // The page says what it shows.
    assert!(
        slow["title"].as_str().unwrap().contains(SLOW_KEY),
        "{slow:#}"
    );
    // Its top methods by the second: spin() first in every well-filled second. With the
    // other methods of each second, they weigh what the flame graph does.
    let top = slow["top"].as_array().unwrap();
    let others = slow["topOthers"].as_array().unwrap();
    assert!(
        others
            .iter()
            .all(|row| row["value"].as_u64().unwrap() > 0 && row["text"] == "(other methods)"),
        "{others:#?}"
    );
    let tabled: u64 = top
        .iter()
        .chain(others)
        .map(|row| row["value"].as_u64().unwrap())
        .sum();
    assert_eq!(tabled as f64, slow["total"].as_f64().unwrap(), "{slow:#}");
    let mut firsts: Vec<&Value> = Vec::new();
    for row in top {
        if firsts
            .last()
            .is_none_or(|first| first["time"] != row["time"])
        {
            firsts.push(row);
        }
    }
    let full: Vec<&&Value> = firsts
        .iter()
        .filter(|row| row["value"].as_u64().unwrap() >= 50)
        .collect();
    assert!(full.len() >= 2, "{top:#?}");
    assert!(
        full.iter().all(|row| row["method"] == "MptJoined.spin"),
        "{top:#?}"
    );
    assert!(
        top.iter().all(
            |row| row["method"].as_str().unwrap().starts_with("MptJoined.")
                || row["value"].as_u64().unwrap() < 100
        ),
        "{top:#?}"
    );
    // Three of every four requests are alice's.
    let (alice, bob) = (&loads[1], &loads[2]);
    assert_eq!(alice["state"], "ready", "{seen:#}");
    assert_eq!(bob["state"], "ready", "{seen:#}");
    let (alice, bob) = (
        alice["total"].as_f64().unwrap(),
        bob["total"].as_f64().unwrap(),
    );
    let share = alice / (alice + bob);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "alice {alice} bob {bob}: {share:.3}"
    );
    // A differential page, with its base.
    let diff = &loads[3];
    assert_eq!(diff["state"], "ready", "{seen:#}");
    assert!(diff["baseTotal"].as_f64().unwrap() > 0.0, "{diff:#}");
    assert!(diff["total"].as_f64().unwrap() > 0.0, "{diff:#}");
    // A service without windows is told beside the form, not drawn empty.
    let nobody = &loads[4];
    assert_eq!(nobody["state"], "failed", "{seen:#}");
    assert!(
        nobody["error"].as_str().unwrap().contains("no windows"),
        "{nobody:#}"
    );
    // Its tables say so: no values or calls for a service that has none.
    assert_eq!(nobody["values"], json!([]), "{nobody:#}");
    assert_eq!(nobody["calls"], json!([]), "{nobody:#}");
    // The traced values table, lookup's only: the slow key first, its calls as the JSON API
    // counts them; the calls table: Calls.work's 5,000.
    let every = &loads[5];
    assert_eq!(every["state"], "ready", "{seen:#}");
    let shown = every["values"].as_array().unwrap();
    assert_eq!(shown.len(), 2, "{every:#}");
    for (row, json) in shown.iter().zip(&lookups) {
        assert_eq!(row["method"], json["method"], "{every:#}");
        assert_eq!(row["value"], json["value"], "{every:#}");
        assert_eq!(row["valueText"], json["value"], "{every:#}");
        assert_eq!(row["calls"].as_u64(), json["calls"].as_u64(), "{every:#}");
    }
    assert_eq!(shown[0]["value"], "slow", "{every:#}");
    let shown = every["calls"].as_array().unwrap();
    assert!(shown.len() <= 50, "{every:#}");
    assert!(
        shown.contains(&json!({"method": "Calls.work", "calls": WORK_CALLS})),
        "{every:#}"
    );
    assert!(
        shown
            .windows(2)
            .all(|pair| pair[0]["calls"].as_u64() >= pair[1]["calls"].as_u64()),
        "{every:#}"
    );
}
