//! cpu=times in HPROF text output: true entry counts and thread CPU time per method, from the
//! traced classes' instrumented code.

use std::collections::BTreeMap;
use std::time::Duration;

use openprof_format::hprof_text::CpuTableKind;
use openprof_testkit::{run_java, run_java_with};

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

/// CallTree's calls with cpu=times: (method → calls summed over its traces, and each trace's
/// methods innermost first → its calls).
fn call_tree_times(
    run: &openprof_testkit::Run,
) -> (BTreeMap<String, u64>, BTreeMap<Vec<String>, u64>) {
    let profile = run.profile("times.txt");
    let table = profile
        .cpu_tables
        .iter()
        .find(|table| table.kind == CpuTableKind::Time)
        .expect("a CPU TIME (ms) table");
    let mut by_method = BTreeMap::new();
    let mut by_trace = BTreeMap::new();
    for row in &table.rows {
        *by_method
            .entry(row.method.clone().unwrap_or_default())
            .or_default() += row.count;
        let frames: Vec<String> = profile.traces[&row.trace]
            .frames
            .iter()
            .map(|frame| frame.qualified_method())
            .collect();
        *by_trace.entry(frames).or_default() += row.count;
    }
    (by_method, by_trace)
}

#[test]
fn instrumented_calls_are_counted_exactly_under_the_strictest_verifier() {
    // The classes the filters name are rewritten (a JDK class among them, loaded after the
    // agent started); -Xverify:all makes the JVM verify every class, the rewritten ones too.
    let run = run_java_with(
        &["-Xverify:all"],
        Some(
            "cpu=times,cutoff=0,depth=4,filter=+CallTree*;+java.util.zip.Adler32;-*,file=times.txt",
        ),
        "CallTree",
        &["3000"],
        Duration::from_secs(180),
    );
    assert!(run.success(), "{}", run.stderr());
    assert!(
        run.stdout().contains("calls=3000 thrown=300 failed_subs=5"),
        "{}",
        run.stdout()
    );
    let (by_method, by_trace) = call_tree_times(&run);
    let expected: BTreeMap<String, u64> = [
        ("CallTree.main", 1),
        ("CallTree.<init>", 3000),
        ("CallTree.outer", 3000),
        ("CallTree.middle", 3000),
        ("CallTree.leaf", 9000),
        ("CallTree.fails", 3000),
        ("CallTree$Sub.<init>", 10),
        ("CallTree$Base.<init>", 10),
        ("java.util.zip.Adler32.<init>", 1),
        ("java.util.zip.Adler32.<clinit>", 1),
        ("java.util.zip.Adler32.update", 3000),
        ("java.util.zip.Adler32.getValue", 1),
    ]
    .into_iter()
    .map(|(method, calls)| (method.to_string(), calls))
    .collect();
    assert_eq!(by_method, expected);
    // Who called whom: leaf twice under middle, once under outer itself; Base under Sub, also
    // for the five Subs that Base's throwable left through their super(...) call.
    let trace = |methods: &[&str]| {
        by_trace
            .get(&methods.iter().map(|m| m.to_string()).collect::<Vec<_>>())
            .copied()
    };
    assert_eq!(
        trace(&[
            "CallTree.leaf",
            "CallTree.middle",
            "CallTree.outer",
            "CallTree.main"
        ]),
        Some(6000)
    );
    assert_eq!(
        trace(&["CallTree.leaf", "CallTree.outer", "CallTree.main"]),
        Some(3000)
    );
    assert_eq!(
        trace(&[
            "CallTree$Base.<init>",
            "CallTree$Sub.<init>",
            "CallTree.main"
        ]),
        Some(10)
    );
    assert_eq!(trace(&["CallTree$Sub.<init>", "CallTree.main"]), Some(10));
}
