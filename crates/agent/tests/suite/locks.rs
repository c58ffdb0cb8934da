//! lock= against ground truth: WallStates' workers block on their `Ledger` monitors for a time
//! they measure themselves; the MONITOR TIME tables must hold that time, on the workers' stacks,
//! and a threshold above the waits must leave them out.

use std::time::Duration;

use openprof_format::hprof_text::{CpuRow, TextProfile};
use openprof_testkit::run_java;

const LIMIT: Duration = Duration::from_secs(120);

/// The workload's own total of time blocked entering the monitor, in milliseconds.
fn measured_blocked_ms(stdout: &str) -> f64 {
    stdout
        .split_whitespace()
        .find_map(|field| field.strip_prefix("blocked_ms="))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no blocked_ms in the workload's output: {stdout}"))
}

/// The MONITOR TIME rows of WallStates' `Ledger` monitor in a profile's last table, with that
/// table's total.
fn ledger_rows(profile: &TextProfile) -> (Vec<CpuRow>, u64) {
    let table = profile.monitor_tables.last().expect("a MONITOR TIME table");
    let rows = table
        .rows
        .iter()
        .filter(|row| row.method.as_deref() == Some("WallStates$Ledger"))
        .cloned()
        .collect();
    (rows, table.total_ms)
}

fn enters(rows: &[CpuRow]) -> u64 {
    rows.iter().map(|row| row.count).sum()
}

#[test]
fn contended_monitors_time_and_class() {
    let run = run_java(
        Some("lock=0,thread=y,depth=8,cutoff=0,file=locks.txt"),
        "WallStates",
        &["4", "30"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let measured = measured_blocked_ms(&run.stdout());
    let profile = run.profile("locks.txt");
    let (rows, total_ms) = ledger_rows(&profile);
    let ledger_ms: f64 = rows
        .iter()
        .map(|row| row.self_percent / 100.0 * total_ms as f64)
        .sum();
    assert!(
        (ledger_ms - measured).abs() <= 0.1 * measured,
        "{ledger_ms:.0} ms blocked on WallStates$Ledger in MONITOR TIME, {measured} ms measured"
    );
    // Each worker's 30 enters, on the stack of WallStates.work.
    assert_eq!(enters(&rows), 4 * 30);
    for row in &rows {
        let top = profile.traces[&row.trace]
            .frames
            .first()
            .map(|f| f.qualified_method());
        assert_eq!(top.as_deref(), Some("WallStates.work"), "{row:?}");
    }
}

#[test]
fn a_threshold_leaves_out_shorter_waits() {
    // Every wait on the Ledger lasts about 20 ms: a 200 ms threshold leaves all of them out.
    let run = run_java(
        Some("lock=200ms,file=locks.txt"),
        "WallStates",
        &["2", "10"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let (rows, _) = ledger_rows(&run.profile("locks.txt"));
    assert!(rows.is_empty(), "{rows:?}");
    // And a 5 ms one keeps every one of them.
    let run = run_java(
        Some("lock=5ms,file=locks.txt"),
        "WallStates",
        &["2", "10"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let (rows, _) = ledger_rows(&run.profile("locks.txt"));
    assert_eq!(enters(&rows), 2 * 10, "{rows:?}");
}
