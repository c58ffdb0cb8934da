//! Traces (format=x) as an input of `convert`, and the timelines written from them, against
//! the Calls workload's ground truth: work() called exactly CALLS times, thrower() three times
//! and catcher() once per exception, one contended lock, one timed wait, one System.gc().

use std::collections::HashMap;
use std::time::Duration;

use openprof_testkit::{run_java, Run};
use serde_json::Value;

use crate::helpers::{convert_in, openprof_in, text};

const CALLS: usize = 300;
const EXCEPTIONS: usize = 4;

/// The calls each traced method makes in one run with extras: main once, contend once (and the
/// lambda it starts on the holder thread once), the static initialiser once.
fn expected_calls() -> HashMap<String, u64> {
    [
        ("Calls.work", CALLS),
        ("Calls.catcher", EXCEPTIONS),
        ("Calls.thrower", 3 * EXCEPTIONS),
        ("Calls.main", 1),
        ("Calls.contend", 1),
        ("Calls.lambda$contend$0", 1),
        ("Calls.<clinit>", 1),
    ]
    .into_iter()
    .map(|(name, count)| (name.to_string(), count as u64))
    .collect()
}

fn traced(args: &[&str]) -> Run {
    let run = run_java(
        Some("format=x,cpu=times,monitor=y,filter=+Calls;-*,file=t.xml"),
        "Calls",
        args,
        Duration::from_secs(180),
    );
    assert!(run.success(), "{}", run.stderr());
    run
}

/// Microseconds with three decimals as nanoseconds.
fn nanos(value: &Value) -> u64 {
    (value.as_f64().expect("a time") * 1000.0).round() as u64
}

#[test]
fn a_traced_runs_calls_are_the_workloads_in_chrome_trace_speedscope_and_folded_stacks() {
    let run = traced(&[&CALLS.to_string(), &EXCEPTIONS.to_string(), "extras"]);

    // Chrome trace: a complete event per call.
    convert_in(&run.dir, &["t.xml", "-o", "t.trace.json"]);
    let trace: Value =
        serde_json::from_slice(&std::fs::read(run.dir.join("t.trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let mut calls: HashMap<String, u64> = HashMap::new();
    for event in events
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "call")
    {
        *calls
            .entry(event["name"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(calls, expected_calls());
    let thread_names: HashMap<u64, &str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    let on_thread = |name: &str, prefix: &str| {
        events
            .iter()
            .filter(|e| e["name"] == name)
            .filter(|e| thread_names[&e["tid"].as_u64().unwrap()].starts_with(prefix))
            .count()
    };
    assert_eq!(on_thread("Calls.work", "main (tid="), CALLS);
    assert_eq!(on_thread("Calls.lambda$contend$0", "holder (tid="), 1);
    // One instant per exception, where it was thrown; the lock and the wait as slices.
    assert_eq!(on_thread("throw in Calls.thrower", "main"), EXCEPTIONS);
    assert_eq!(on_thread("blocked on java.lang.Object", "main"), 1);
    assert_eq!(on_thread("waiting on java.lang.Object", "holder"), 1);
    assert!(on_thread("GC", "GC") >= 1, "System.gc() ran");

    // What Perfetto needs: per thread, times in order and slices nested, none overlapping.
    let mut open: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut last: HashMap<u64, u64> = HashMap::new();
    for event in events.iter().filter(|e| e["ph"] == "X" || e["ph"] == "i") {
        let tid = event["tid"].as_u64().unwrap();
        let ts = nanos(&event["ts"]);
        assert!(last.get(&tid).is_none_or(|&before| before <= ts), "{event}");
        last.insert(tid, ts);
        if event["ph"] == "X" {
            let end = ts + nanos(&event["dur"]);
            let stack = open.entry(tid).or_default();
            while stack.last().is_some_and(|&parent_end| parent_end <= ts) {
                stack.pop();
            }
            if let Some(&parent_end) = stack.last() {
                assert!(end <= parent_end, "{event} overlaps its parent's end");
            }
            stack.push(end);
        }
    }

    // speedscope, evented (a trace's .json): a frame opened and closed per call, closes
    // matching opens.
    convert_in(&run.dir, &["t.xml", "-o", "t.json"]);
    let speedscope: Value =
        serde_json::from_slice(&std::fs::read(run.dir.join("t.json")).unwrap()).unwrap();
    let frames = speedscope["shared"]["frames"].as_array().unwrap();
    let (mut opens, mut closes) = (HashMap::<String, u64>::new(), HashMap::<String, u64>::new());
    for thread in speedscope["profiles"].as_array().unwrap() {
        assert_eq!(thread["type"], "evented");
        let mut stack: Vec<u64> = Vec::new();
        let mut at = 0;
        for event in thread["events"].as_array().unwrap() {
            let frame = event["frame"].as_u64().unwrap();
            assert!(event["at"].as_u64().unwrap() >= at, "{event}");
            at = event["at"].as_u64().unwrap();
            let name = frames[frame as usize]["name"].as_str().unwrap().to_string();
            if event["type"] == "O" {
                stack.push(frame);
                *opens.entry(name).or_default() += 1;
            } else {
                assert_eq!(stack.pop(), Some(frame), "{event} closes another frame");
                *closes.entry(name).or_default() += 1;
            }
        }
        assert!(stack.is_empty());
    }
    for (method, count) in expected_calls() {
        assert_eq!(opens.get(&method), Some(&count), "{method}");
        assert_eq!(closes.get(&method), Some(&count), "{method}");
    }

    // speedscope's own app reads both files (its Chrome trace importer, its own format's): the
    // traced methods are in its Sandwich view, main's work the heaviest of Calls' own.
    for file in ["t.json", "t.trace.json"] {
        let seen = crate::views_html::open_in_speedscope(&run.dir.join(file));
        let names: Vec<&str> = seen["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|row| row[2].as_str())
            .collect();
        for method in expected_calls().keys() {
            assert!(
                names.contains(&method.as_str()),
                "{file}: no {method} in {names:?}"
            );
        }
    }

    // Folded stacks of the calls event: each method's calls under their callers.
    convert_in(
        &run.dir,
        &["t.xml", "-o", "t.collapsed", "--event", "calls"],
    );
    let folded = std::fs::read_to_string(run.dir.join("t.collapsed")).unwrap();
    let leaves: HashMap<String, u64> = crate::helpers::leaf_samples(&folded).into_iter().collect();
    assert_eq!(leaves, expected_calls());
    assert!(
        folded.contains(&format!("Calls.main;Calls.work {CALLS}\n")),
        "{folded}"
    );
}

#[test]
fn a_malformed_trace_is_refused_naming_the_file_and_where() {
    let run = traced(&["5", "1"]);
    let trace = std::fs::read_to_string(run.dir.join("t.xml")).unwrap();

    std::fs::write(run.dir.join("cut.xml"), &trace[..trace.len() * 2 / 3]).unwrap();
    let output = openprof_in(&run.dir, &["convert", "cut.xml", "-o", "cut.trace.json"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("cut.xml is not a readable trace (format=x): element ")
            && stderr.contains(": byte "),
        "{stderr}"
    );

    let start = trace.find("<traceStart").unwrap();
    let bad = format!("{}<bogus/>\n{}", &trace[..start], &trace[start..]);
    std::fs::write(run.dir.join("bad.xml"), bad).unwrap();
    let output = openprof_in(&run.dir, &["convert", "bad.xml", "-o", "bad.trace.json"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("bad.xml is not a readable trace (format=x): element 4: byte ")
            && stderr.contains("<bogus> is not a trace element"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_profile_without_spans_has_no_chrome_trace() {
    let run = run_java(
        Some("cpu=times,filter=+Calls;-*,file=times.txt"),
        "Calls",
        &["20", "1"],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let output = openprof_in(
        &run.dir,
        &["convert", "times.txt", "-o", "times.trace.json"],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("times.txt has no timeline (method calls, waits, GCs)"),
        "{stderr}"
    );
    assert!(!run.dir.join("times.trace.json").exists());
}
