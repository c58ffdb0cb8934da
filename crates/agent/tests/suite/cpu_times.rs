//! cpu=times in HPROF text output: true entry counts and thread CPU time per method.

use std::time::Duration;

use openprof_format::hprof_text::CpuTableKind;
use openprof_testkit::run_java;

#[test]
fn cpu_time_table_has_true_counts_and_the_built_in_split() {
    let run = run_java(
        Some("cpu=times,filter=+CpuSplit;-*,file=times.txt"),
        "CpuSplit",
        &["2"],
        Duration::from_secs(180),
    );
    assert!(run.success(), "{}", run.stderr());
    let calls: u64 = run
        .stdout()
        .split("calls=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|calls| calls.parse().ok())
        .expect("the workload prints its calls");
    let profile = run.profile("times.txt");
    let table = profile
        .cpu_tables
        .iter()
        .find(|table| table.kind == CpuTableKind::Time)
        .expect("a CPU TIME (ms) table");
    assert!(profile.last_cpu_samples().is_none());
    let row = |method: &str| {
        table
            .rows
            .iter()
            .find(|row| row.method.as_deref() == Some(method))
            .unwrap_or_else(|| panic!("no {method} in {table:?}"))
    };
    let (heavy, light) = (row("CpuSplit.heavy"), row("CpuSplit.light"));
    assert_eq!(
        (heavy.count, light.count),
        (calls, calls),
        "true entry counts"
    );
    let share = heavy.self_percent / (heavy.self_percent + light.self_percent);
    assert!((share - 0.75).abs() <= 0.05, "heavy's CPU share {share:.3}");
    // Only CpuSplit's methods are timed: the filter leaves the JDK out.
    assert!(table.rows.iter().all(|row| row
        .method
        .as_deref()
        .unwrap_or("")
        .starts_with("CpuSplit.")));
    assert!(table.total > 1000, "total {} ms", table.total);
}
