//! JFR recordings as input: the JDK's own Flight Recorder (no agent) records the workloads, and
//! `openprof convert` must give the workload's known split and the very counts and byte totals
//! the JDK's `jfr` tool reads from the same file; broken recordings are refused with the file
//! and the byte offset, never with a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::UNIX_EPOCH;

use openprof_analysis::inputs::jfr::from_jfr;
use openprof_analysis::inputs::read_file;
use openprof_analysis::profile::Event;
use openprof_testkit::{kept_temp_dir, runtime, wait_with_limit, workload_classes};

use crate::helpers::{openprof_in, text, LIMIT};

/// A recording of `main_class ARGS` by the JDK's recorder with `settings=profile` and the
/// extra event settings given, and the workload's standard output.
pub(crate) fn record(
    name: &str,
    extra_settings: &str,
    jvm_options: &[&str],
    main_class: &str,
    args: &[&str],
) -> (PathBuf, String) {
    let dir = kept_temp_dir("openprof-jfr-");
    let recording = dir.join(format!("{name}.jfr"));
    let mut command = Command::new(runtime().java().expect("java"));
    command
        .current_dir(&dir)
        .arg(format!(
            "-XX:StartFlightRecording=filename={},settings=profile{extra_settings}",
            recording.display()
        ))
        .args(jvm_options)
        .arg("-cp")
        .arg(workload_classes())
        .arg(main_class)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = wait_with_limit(command.spawn().expect("start java"), LIMIT);
    assert!(
        output.status.success(),
        "{main_class} failed: {}",
        text(&output.stderr)
    );
    assert!(
        recording.is_file(),
        "no recording at {}",
        recording.display()
    );
    (recording, text(&output.stdout))
}

/// CpuSplit recorded once for the tests that need it, sampled every millisecond for enough
/// samples that the split's noise stays well inside the tolerance.
fn cpu_split_recording() -> &'static (PathBuf, String) {
    static RECORDING: OnceLock<(PathBuf, String)> = OnceLock::new();
    RECORDING.get_or_init(|| {
        record(
            "cpusplit",
            ",jdk.ExecutionSample#period=1ms",
            &[],
            "CpuSplit",
            &["3"],
        )
    })
}

/// The JDK's `jfr` tool run on a recording.
fn jfr_tool(args: &[&str], recording: &Path) -> String {
    let output = Command::new(runtime().tool("jfr").expect("the JDK's jfr tool"))
        .args(args)
        .arg(recording)
        .output()
        .expect("run jfr");
    assert!(
        output.status.success(),
        "jfr {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// An event type's count in `jfr summary`.
fn summary_count(recording: &Path, event: &str) -> u64 {
    jfr_tool(&["summary"], recording)
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next()? == event).then(|| fields.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// Converts a recording to folded stacks with the given options: stack to weight.
fn folded(recording: &Path, options: &[&str]) -> BTreeMap<String, u64> {
    let dir = recording.parent().unwrap();
    let output_file = dir.join("out.collapsed");
    let mut args = vec![
        "convert",
        recording.to_str().unwrap(),
        "-o",
        output_file.to_str().unwrap(),
    ];
    args.extend_from_slice(options);
    let output = openprof_in(dir, &args);
    assert!(output.status.success(), "convert: {}", text(&output.stderr));
    let mut stacks = BTreeMap::new();
    for line in std::fs::read_to_string(&output_file).unwrap().lines() {
        let (stack, weight) = line.rsplit_once(' ').expect("stack and weight");
        *stacks.entry(stack.to_string()).or_insert(0) += weight.parse::<u64>().unwrap();
    }
    stacks
}

/// The summed weight of the stacks whose leaf (or frame before the leaf, with `depth` 1) is
/// `frame`.
fn weight_at(stacks: &BTreeMap<String, u64>, frame: &str, depth: usize) -> u64 {
    stacks
        .iter()
        .filter(|(stack, _)| stack.split(';').rev().nth(depth) == Some(frame))
        .map(|(_, weight)| weight)
        .sum()
}

#[test]
fn cpu_samples_split_as_the_workload_ran_and_count_as_the_jdks_reader() {
    let (recording, stdout) = cpu_split_recording();
    let stacks = folded(recording, &[]);
    let heavy = weight_at(&stacks, "CpuSplit.heavy", 0);
    let light = weight_at(&stacks, "CpuSplit.light", 0);
    let share = heavy as f64 / (heavy + light) as f64;
    assert!(heavy + light > 1000, "too few samples: {heavy} + {light}");
    // 75 % is the split the workload is built for. The samples are the JDK's own sampler's,
    // not ours: what this checks is that our reader puts them on the right frames (a reader
    // that swapped or lost frames would be far off). That sampler, at 20 ms of wall time,
    // strays on a loaded machine: 78.8 % beside two busy loops, against 74.9 % measured.
    assert!(
        (share - 0.75).abs() <= 0.05,
        "heavy's share {share:.4} ({heavy}:{light}) is not 75 % within 5 points"
    );
    // The workload measures its own split with thread CPU time.
    let measured: f64 = stdout
        .split("heavy_cpu_share=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no heavy_cpu_share in {stdout}"));
    assert!(
        (share - measured).abs() <= 0.05,
        "heavy's share {share:.4} is not the measured {measured:.4} within 5 points"
    );
    let total: u64 = stacks.values().sum();
    assert_eq!(
        total,
        summary_count(recording, "jdk.ExecutionSample"),
        "our cpu samples against jfr summary's jdk.ExecutionSample"
    );
    // The sampled thread is named as in Java, with its Java thread id.
    let by_thread = folded(recording, &["--threads"]);
    assert!(
        by_thread
            .keys()
            .any(|stack| stack.starts_with("[main tid=1];") && stack.ends_with("CpuSplit.heavy")),
        "no heavy stack under the main thread: {:?}",
        by_thread.keys().take(5).collect::<Vec<_>>()
    );
}

#[test]
fn the_profile_has_the_recordings_clock_period_and_threads() {
    let (recording, _) = cpu_split_recording();
    let profile = read_file(recording, &mut |_| {}).unwrap();
    assert_eq!(profile.period_ns, Some(1_000_000), "the period asked for");
    let written = std::fs::metadata(recording).unwrap().modified().unwrap();
    let written_ns = written.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let start = profile.start_epoch_ns.expect("a start");
    let duration = profile.duration_ns.expect("a duration");
    assert!(
        start < written_ns && written_ns - start < 120_000_000_000,
        "the recording started {start}, was written {written_ns}"
    );
    // Three seconds of CPU for the workload, and the JVM's start and end around them.
    assert!(
        (3_000_000_000..120_000_000_000).contains(&duration),
        "{duration} ns"
    );
    let mut cpu_samples = 0;
    for sample in profile
        .samples
        .iter()
        .filter(|sample| sample.event == Event::Cpu)
    {
        cpu_samples += 1;
        let time = sample.time_ns.expect("a time");
        assert!(time <= duration, "a sample at {time} ns of {duration}");
        let leaf = profile
            .stack(sample.stack)
            .last()
            .map(|id| profile.frame(*id));
        if leaf.is_some_and(|frame| frame.name == "CpuSplit.heavy") {
            let thread = profile.thread(sample.thread.expect("a thread"));
            assert_eq!((thread.name.as_str(), thread.id), ("main", 1));
            assert!(leaf.unwrap().line.is_some(), "heavy has no line");
        }
    }
    assert!(cpu_samples > 1000);
}

#[test]
fn every_chunk_of_a_file_is_read() {
    let (recording, _) = cpu_split_recording();
    let dir = kept_temp_dir("openprof-jfr-chunks-");
    let two = dir.join("two.jfr");
    let bytes = std::fs::read(recording).unwrap();
    std::fs::write(&two, [bytes.as_slice(), bytes.as_slice()].concat()).unwrap();
    let once: u64 = folded(recording, &[]).values().sum();
    let twice: u64 = folded(&two, &[]).values().sum();
    assert_eq!(twice, 2 * once);
    assert_eq!(twice, summary_count(&two, "jdk.ExecutionSample"));
}

#[test]
fn allocation_samples_weigh_the_bytes_the_jdks_reader_reads() {
    let (recording, _) = record("allocmix", "", &["-Xmx1g"], "AllocMix", &["300000"]);
    let printed = jfr_tool(
        &["print", "--json", "--events", "jdk.ObjectAllocationSample"],
        &recording,
    );
    let weights: Vec<u64> = printed
        .split("\"weight\": ")
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap()
        })
        .collect();
    assert!(
        weights.len() > 50,
        "too few allocation samples: {}",
        weights.len()
    );
    let events = folded(&recording, &["--event", "alloc_bytes"]);
    assert_eq!(events.values().sum::<u64>(), weights.len() as u64);
    let bytes = folded(&recording, &["--event", "alloc_bytes", "--total"]);
    assert_eq!(bytes.values().sum::<u64>(), weights.iter().sum::<u64>());
    // Both sites allocate byte arrays, the allocated class being the leaf under the method.
    for site in ["AllocMix.keep", "AllocMix.temp"] {
        let stack = bytes
            .keys()
            .find(|stack| stack.contains(site))
            .unwrap_or_else(|| panic!("no stack through {site}"));
        assert!(stack.ends_with(&format!("{site};byte[]")), "{stack}");
    }
}

#[test]
fn broken_recordings_are_refused_with_the_file_and_the_offset() {
    let (recording, _) = cpu_split_recording();
    let bytes = std::fs::read(recording).unwrap();
    let dir = kept_temp_dir("openprof-jfr-broken-");
    let cut = dir.join("cut.jfr");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let mut version = bytes.clone();
    version[5] = 9;
    let bad_version = dir.join("version.jfr");
    std::fs::write(&bad_version, &version).unwrap();
    for (file, expected) in [
        (&cut, "at byte 8: the chunk's size"),
        (&bad_version, "at byte 4: version 9."),
    ] {
        let output = openprof_in(
            &dir,
            &["convert", file.to_str().unwrap(), "-o", "out.collapsed"],
        );
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{} was accepted", file.display());
        assert!(
            stderr.contains(file.to_str().unwrap()) && stderr.contains(expected),
            "{}: {stderr}",
            file.display()
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    // Cut anywhere or with any bit flipped, the reader answers: a profile or an error whose
    // offset lies inside the file, never a panic.
    let check = |mutated: &[u8]| match from_jfr(mutated, "mutated.jfr", &mut |_| {}) {
        Ok(_) => {}
        Err(error) => assert!(
            error.offset <= mutated.len() as u64,
            "offset {} past the {} bytes",
            error.offset,
            mutated.len()
        ),
    };
    let step = (bytes.len() / 300).max(1);
    for length in (0..bytes.len()).step_by(step) {
        check(&bytes[..length]);
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..600 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let position = (state >> 33) as usize % bytes.len();
        let mut mutated = bytes.clone();
        mutated[position] ^= 1 << (state >> 29 & 7);
        check(&mutated);
    }
}

#[test]
fn monitor_contention_is_lock_time_as_the_jdks_reader_reads_it() {
    // With EXTRAS, the main thread waits up to 300 ms for a monitor another thread holds.
    let (recording, _) = record("calls", "", &[], "Calls", &["10", "1", "extras"]);
    let printed = jfr_tool(
        &["print", "--json", "--events", "jdk.JavaMonitorEnter"],
        &recording,
    );
    // jfr prints durations as ISO-8601 seconds: "PT0.254091941S".
    let durations_ns: Vec<u64> = printed
        .split("\"duration\": \"PT")
        .skip(1)
        .map(|rest| {
            let seconds: f64 = rest.split('S').next().unwrap().parse().unwrap();
            (seconds * 1e9).round() as u64
        })
        .collect();
    assert!(!durations_ns.is_empty(), "no monitor event recorded");
    let lock = folded(&recording, &["--event", "lock", "--total"]);
    let total: u64 = lock.values().sum();
    let expected: u64 = durations_ns.iter().sum();
    assert!(
        total.abs_diff(expected) <= durations_ns.len() as u64,
        "lock time {total} ns, jfr reads {expected} ns"
    );
    // The monitor's class on top of the method that blocked.
    let contended = weight_at(&lock, "Calls.contend", 1);
    for stack in lock
        .keys()
        .filter(|stack| stack.split(';').rev().nth(1) == Some("Calls.contend"))
    {
        assert!(stack.ends_with(";java.lang.Object"), "{stack}");
    }
    assert!(
        (200_000_000..1_000_000_000).contains(&contended),
        "Calls.contend waited {contended} ns, not about 300 ms"
    );
}
