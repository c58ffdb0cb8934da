//! wall= against ground truth: WallStates' workers spend known shares of their wall time
//! sleeping, blocked on a monitor, parked on a ReentrantLock and computing, and measure them
//! themselves; IdleCrowd has thousands of idle threads beside a few busy ones.

use std::collections::BTreeMap;
use std::time::Duration;

use openprof_format::hprof_text::{CpuTableKind, TextProfile};
use openprof_testkit::run_java;

const LIMIT: Duration = Duration::from_secs(120);

/// The samples of one kind of table whose trace's thread has a name starting with `prefix`,
/// by state (wall) or by whether the stack holds `method` (CPU: "in" and "out").
fn by_thread_prefix(
    profile: &TextProfile,
    kind: CpuTableKind,
    prefix: &str,
    key: impl Fn(&openprof_format::hprof_text::CpuRow) -> String,
) -> BTreeMap<String, u64> {
    let names: BTreeMap<u32, &str> = profile
        .threads_started
        .iter()
        .map(|thread| (thread.serial, thread.name.as_str()))
        .collect();
    let mut counts = BTreeMap::new();
    for table in profile.cpu_tables.iter().filter(|table| table.kind == kind) {
        for row in &table.rows {
            let thread = profile
                .traces
                .get(&row.trace)
                .and_then(|trace| trace.thread);
            let name = thread.and_then(|serial| names.get(&serial)).copied();
            if name.is_some_and(|name| name.starts_with(prefix)) {
                *counts.entry(key(row)).or_insert(0) += row.count;
            }
        }
    }
    counts
}

/// The shares the workload printed: `sleeping=0.2970 blocked=0.1992 ...`.
fn measured_shares(stdout: &str) -> BTreeMap<String, f64> {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("sleeping="))
        .unwrap_or_else(|| panic!("no shares in the workload's output: {stdout}"));
    line.split_whitespace()
        .map(|pair| {
            let (state, share) = pair.split_once('=').unwrap();
            (state.to_string(), share.parse().unwrap())
        })
        .collect()
}

#[test]
fn states_of_the_workers_wall_time() {
    let run = run_java(
        Some("cpu=samples,interval=2,wall=10,threads=worker-*,thread=y,depth=16,cutoff=0,file=wall.txt"),
        "WallStates",
        &["4", "40"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let measured = measured_shares(&run.stdout());
    let profile = run.profile("wall.txt");
    let wall = by_thread_prefix(&profile, CpuTableKind::Wall, "worker-", |row| {
        row.state.clone().unwrap_or_default()
    });
    let total: u64 = wall.values().sum();
    // 4 workers sampled every 10 ms for about 4 s.
    assert!(
        total > 1000,
        "{total} wall samples of the workers: {wall:?}"
    );
    for (state, share) in &measured {
        let sampled = 100.0 * *wall.get(state).unwrap_or(&0) as f64 / total as f64;
        assert!(
            (sampled - 100.0 * share).abs() <= 5.0,
            "{state}: {sampled:.1} % of the wall samples, {:.1} % measured; {wall:?}",
            100.0 * share
        );
    }
    // CPU samples of the workers: the computing phase only.
    let cpu = by_thread_prefix(&profile, CpuTableKind::Samples, "worker-", |row| {
        let computing = profile.traces.get(&row.trace).is_some_and(|trace| {
            trace
                .frames
                .iter()
                .any(|frame| frame.qualified_method() == "WallStates.compute")
        });
        if computing { "compute" } else { "other" }.to_string()
    });
    let computing = *cpu.get("compute").unwrap_or(&0) as f64;
    let all: u64 = cpu.values().sum();
    assert!(
        computing >= 0.9 * all as f64 && all > 100,
        "CPU samples of the workers: {cpu:?}"
    );
    // threads=worker-*: no sample of any other thread (the holders, main), CPU or wall.
    for kind in [CpuTableKind::Samples, CpuTableKind::Wall] {
        let others = by_thread_prefix(&profile, kind, "", |_| "any".into());
        let workers = by_thread_prefix(&profile, kind, "worker-", |_| "any".into());
        assert_eq!(
            others, workers,
            "{kind:?}: samples of threads not named worker-*"
        );
    }
    // The sampler says how it sampled: every thread fits in one interval's bound here.
    let sampler = profile.wall_samplers.last().expect("a WALL SAMPLER record");
    assert_eq!(
        (sampler.interval_ms, sampler.skipped),
        (10, 0),
        "{sampler:?}"
    );
}

#[test]
fn thousands_of_idle_threads_cost_a_bounded_tick() {
    // 2,000 sleeping threads and 4 busy ones; the busy ones spend 3:1 in heavy and light.
    let run = run_java(
        Some("wall=10,thread=y,depth=8,cutoff=0,file=crowd.txt"),
        "IdleCrowd",
        &["2000", "4", "3"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let profile = run.profile("crowd.txt");
    let sampler = profile.wall_samplers.last().expect("a WALL SAMPLER record");
    assert_eq!(sampler.threads_per_tick, 16, "{sampler:?}");
    // Each interval signals at most 16 of the 2,000-odd threads and skips the rest.
    assert!(sampler.intervals > 100, "{sampler:?}");
    assert!(
        sampler.sampled > 0 && sampler.sampled <= 16 * sampler.intervals,
        "{sampler:?}"
    );
    assert!(sampler.skipped > 1000 * sampler.intervals, "{sampler:?}");
    // The busy threads' running samples split between heavy and light as the threads measured.
    let busy = by_thread_prefix(&profile, CpuTableKind::Wall, "busy-", |row| {
        format!(
            "{} {}",
            row.state.as_deref().unwrap_or(""),
            row.method.as_deref().unwrap_or("")
        )
    });
    let heavy = *busy.get("running IdleCrowd.heavy").unwrap_or(&0) as f64;
    let light = *busy.get("running IdleCrowd.light").unwrap_or(&0) as f64;
    // Busy threads are sampled every interval: 4 of them for about 3 s.
    assert!(heavy + light > 400.0, "{busy:?}");
    let split = 100.0 * heavy / (heavy + light);
    // The split the busy threads measured (3:1 once the JIT has compiled both alike).
    let truth = 100.0 * openprof_testkit::printed_figure(&run.stdout(), "heavy_wall_share");
    assert!(
        (split - truth).abs() <= 5.0,
        "heavy {split:.1} %, the threads measured {truth:.1} %: {busy:?}"
    );
}

/// Virtual threads off their carriers (JDK 21 and later): VirtualWaits' 100 virtual threads,
/// half sleeping and half parked, 40 times 20 ms each, run on no OS thread while they wait, so
/// no signal finds them; the mount events count that time. The wall profile gives sleeper()
/// the sleeping time and parker() the parked time the threads measured, within 5 %, each
/// under the virtual thread mark. On a JDK without virtual threads (the suite's JDK 17) the
/// workload says so; the JDK 25 run of the core tests checks it.
#[test]
fn virtual_threads_waiting_off_their_carriers_are_counted() {
    let run = run_java(
        Some("wall=5,depth=16,file=virtual-waits.txt"),
        "VirtualWaits",
        &["100", "40", "20"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    if !openprof_testkit::ran_virtual_threads(&stdout) {
        return;
    }
    let slept_ms = openprof_testkit::printed_figure(&stdout, "slept_ns") / 1e6;
    let parked_ms = openprof_testkit::printed_figure(&stdout, "parked_ns") / 1e6;
    let profile = run.profile("virtual-waits.txt");
    // Milliseconds of wall time by (state, the workload's method the trace is in).
    let mut counted: BTreeMap<(String, &str), f64> = BTreeMap::new();
    for table in profile
        .cpu_tables
        .iter()
        .filter(|table| table.kind == CpuTableKind::Wall)
    {
        for row in &table.rows {
            let frames = &profile.traces[&row.trace].frames;
            let Some(method) = ["VirtualWaits.sleeper", "VirtualWaits.parker"]
                .into_iter()
                .find(|method| {
                    frames
                        .iter()
                        .any(|frame| frame.qualified_method() == *method)
                })
            else {
                continue;
            };
            assert_eq!(
                frames.last().map(|frame| frame.line.clone()),
                Some(openprof_format::hprof_text::FrameLine::VirtualThread),
                "a virtual thread's trace without the mark: {frames:?}"
            );
            *counted
                .entry((row.state.clone().unwrap_or_default(), method))
                .or_default() += 5.0 * row.count as f64;
        }
    }
    let at = |state: &str, method: &str| {
        counted
            .get(&(state.to_string(), method))
            .copied()
            .unwrap_or(0.0)
    };
    let sleeping = at("sleeping", "VirtualWaits.sleeper");
    let parked = at("parked", "VirtualWaits.parker");
    assert!(
        (sleeping - slept_ms).abs() <= 0.05 * slept_ms,
        "sleeping {sleeping} ms under sleeper(), the threads slept {slept_ms:.0} ms: {counted:?}"
    );
    assert!(
        (parked - parked_ms).abs() <= 0.05 * parked_ms,
        "parked {parked} ms under parker(), the threads parked {parked_ms:.0} ms: {counted:?}"
    );
}
