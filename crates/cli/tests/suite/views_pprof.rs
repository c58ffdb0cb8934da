//! `openprof convert` to pprof (read back by `go tool pprof`, a reader we did not write) and to
//! speedscope's JSON, from a real CPU profile of CpuSplit: heavy's and light's shares must be
//! the HPROF text's, within a point, and no sample may be lost or added; and to pprof from
//! AllocMix's allocation sites, every allocated and live byte of the HPROF text accounted for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use openprof_format::hprof_text::{CpuTableKind, LockTableKind, TextProfile};
use openprof_testkit::{printed_figure, run_java, samples_by_method};
use serde_json::Value;

use crate::helpers::{convert_in, leaf_samples, openprof_in, text, LIMIT};

/// A profile of CpuSplit (with threads) and the HPROF text's own figures, shared by the tests.
struct Recorded {
    dir: PathBuf,
    hprof: TextProfile,
}

impl Recorded {
    /// Every sample of the CPU SAMPLES tables, the rows below the cutoff too.
    fn total(&self) -> u64 {
        self.hprof
            .cpu_tables
            .iter()
            .filter(|table| table.kind == CpuTableKind::Samples)
            .map(|table| table.total)
            .sum()
    }

    /// A method's percentage of every sample, as the HPROF text counts it.
    fn share(&self, method: &str) -> f64 {
        let samples = samples_by_method(&self.hprof)
            .get(method)
            .copied()
            .unwrap_or(0);
        100.0 * samples as f64 / self.total() as f64
    }
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let run = run_java(
            Some("cpu=samples,interval=1,thread=y,file=x.txt"),
            "CpuSplit",
            &["3"],
            LIMIT,
        );
        assert!(run.success(), "{}", run.stderr());
        let hprof = run.profile("x.txt");
        Recorded {
            dir: run.dir,
            hprof,
        }
    })
}

/// `go tool pprof ARGS`, which must succeed; its standard output.
pub(crate) fn go_pprof(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .current_dir(dir)
        // Never a toolchain download; pprof's own files in the run's directory.
        .env("GOTOOLCHAIN", "local")
        .env("PPROF_TMPDIR", dir)
        .output()
        .expect("go (Debian's golang-go) is a prerequisite of the tests");
    assert!(
        output.status.success(),
        "go tool pprof {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// One row of `-top`: a function and its flat and cumulative percentages.
#[derive(Debug)]
pub(crate) struct TopRow {
    pub(crate) name: String,
    pub(crate) flat_percent: f64,
    pub(crate) cum_percent: f64,
}

/// `-top`'s rows, and the total of its header (samples, or bytes with `-unit=byte`).
pub(crate) fn parse_top(top: &str) -> (Vec<TopRow>, u64) {
    let total = top
        .lines()
        .find_map(|line| {
            let (_, rest) = line.split_once("% of ")?;
            let total = rest.strip_suffix(" total")?.trim();
            total.strip_suffix('B').unwrap_or(total).parse().ok()
        })
        .unwrap_or_else(|| panic!("no total in go tool pprof -top's output:\n{top}"));
    let percent = |field: &str| field.strip_suffix('%')?.parse().ok();
    let rows = top
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat  flat%"))
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some(TopRow {
                name: fields.get(5..)?.join(" "),
                flat_percent: percent(fields.get(1)?)?,
                cum_percent: percent(fields.get(4)?)?,
            })
        })
        .collect();
    (rows, total)
}

fn row<'a>(rows: &'a [TopRow], name: &str, top: &str) -> &'a TopRow {
    rows.iter()
        .find(|row| row.name == name)
        .unwrap_or_else(|| panic!("no {name} in:\n{top}"))
}

#[test]
fn go_tool_pprof_reads_the_split() {
    let recorded = recorded();
    convert_in(&recorded.dir, &["x.txt", "-o", "x.pb.gz"]);
    let top = go_pprof(&recorded.dir, &["-top", "-nodecount=50", "x.pb.gz"]);
    let (rows, total) = parse_top(&top);
    assert_eq!(total, recorded.total(), "{top}");
    let flat = |method: &str| row(&rows, method, &top).flat_percent;
    let (heavy, light) = (flat("CpuSplit.heavy"), flat("CpuSplit.light"));
    for (method, percent) in [("CpuSplit.heavy", heavy), ("CpuSplit.light", light)] {
        let expected = recorded.share(method);
        assert!(
            (percent - expected).abs() <= 1.0,
            "{method}: {percent}% in pprof, {expected:.2}% in the HPROF text\n{top}"
        );
    }
    // The workload's ground truth: 3:1 between the two, as the HPROF text has it.
    let split = 100.0 * heavy / (heavy + light);
    let expected = 100.0 * recorded.share("CpuSplit.heavy")
        / (recorded.share("CpuSplit.heavy") + recorded.share("CpuSplit.light"));
    assert!((split - expected).abs() <= 1.0, "{split} vs {expected}");
    assert!(
        (split - 75.0).abs() <= 5.0,
        "heavy's part of the two: {split}"
    );

    // The thread is a label pprof can group by.
    let tags = go_pprof(&recorded.dir, &["-tags", "x.pb.gz"]);
    assert!(tags.contains("thread:") && tags.contains("main"), "{tags}");
}

/// The line numbers of a workload's source: where `method`'s body starts and ends, and the line
/// that holds `text`.
struct Source(Vec<String>);

impl Source {
    fn of(workload: &str) -> Source {
        let path =
            openprof_testkit::workspace_root().join(format!("java/workloads/{workload}.java"));
        let text = std::fs::read_to_string(&path).expect("the workload's source");
        Source(text.lines().map(str::to_string).collect())
    }

    fn line_of(&self, text: &str) -> u32 {
        let index = self.0.iter().position(|line| line.contains(text));
        index.unwrap_or_else(|| panic!("no {text:?} in the source")) as u32 + 1
    }

    /// The lines from a method's declaration to its closing brace (the first line that is
    /// only `    }`, at the declaration's indentation).
    fn body_of(&self, declaration: &str) -> std::ops::RangeInclusive<u32> {
        let start = self.line_of(declaration);
        let end = self.0[start as usize..]
            .iter()
            .position(|line| line == "    }")
            .expect("the method's end") as u32
            + start
            + 1;
        start..=end
    }
}

#[test]
fn go_tool_pprof_shows_the_source_lines() {
    let recorded = recorded();
    convert_in(&recorded.dir, &["x.txt", "-o", "lines.pb.gz"]);
    let top = go_pprof(
        &recorded.dir,
        &["-lines", "-top", "-nodecount=200", "lines.pb.gz"],
    );
    let (rows, _) = parse_top(&top);
    let source = Source::of("CpuSplit");
    // Every sample of heavy and light is on a line of its own body, and the lines add up to
    // the method's share.
    for (method, declaration) in [
        ("CpuSplit.heavy", "static long heavy("),
        ("CpuSplit.light", "static long light("),
    ] {
        let body = source.body_of(declaration);
        let mut flat = 0.0;
        for row in rows
            .iter()
            .filter(|row| row.name.starts_with(&format!("{method} ")))
        {
            let line: u32 = row
                .name
                .rsplit_once("CpuSplit.java:")
                .and_then(|(_, line)| line.parse().ok())
                .unwrap_or_else(|| panic!("no line in {:?}\n{top}", row.name));
            assert!(
                body.contains(&line),
                "{method} at line {line}, outside {body:?}\n{top}"
            );
            flat += row.flat_percent;
        }
        let expected = recorded.share(method);
        assert!(
            (flat - expected).abs() <= 1.0,
            "{method}: {flat}% on its lines, {expected:.2}% in the HPROF text\n{top}"
        );
    }
    // The same lines in folded stacks with --lines, as `Method:LINE` frames. A sample whose
    // frame has no bytecode index to map to a line (HPROF's `Unknown line`, as a compiled
    // frame at its method's entry has; seen about once in eight runs) is plain
    // `CpuSplit.heavy`, and heavy's all the same.
    convert_in(
        &recorded.dir,
        &["x.txt", "--lines", "-o", "lines.collapsed"],
    );
    let collapsed = std::fs::read_to_string(recorded.dir.join("lines.collapsed")).unwrap();
    let body = source.body_of("static long heavy(");
    let mut heavy_samples = 0;
    for (leaf, samples) in leaf_samples(&collapsed) {
        if let Some(line) = leaf.strip_prefix("CpuSplit.heavy:") {
            let line: u32 = line.parse().expect("a line number");
            assert!(body.contains(&line), "{leaf} outside {body:?}");
            heavy_samples += samples;
        } else if leaf == "CpuSplit.heavy" {
            heavy_samples += samples;
        }
    }
    assert_eq!(
        Some(&heavy_samples),
        samples_by_method(&recorded.hprof).get("CpuSplit.heavy"),
        "{collapsed}"
    );
    // main calls each from one line: heavy's whole share is under that line's call.
    let call_to_heavy = format!(
        "CpuSplit.main CpuSplit.java:{}",
        source.line_of("sink += heavy(")
    );
    let cum = row(&rows, &call_to_heavy, &top).cum_percent;
    let heavy = recorded.share("CpuSplit.heavy");
    assert!(
        (cum - heavy).abs() <= 1.0,
        "{call_to_heavy}: {cum}% against {heavy:.2}%\n{top}"
    );
}

#[test]
fn go_tool_pprof_reads_a_per_thread_view_of_one_event() {
    let recorded = recorded();
    convert_in(
        &recorded.dir,
        &[
            "x.txt",
            "-o",
            "threads.pb.gz",
            "--event",
            "cpu",
            "--threads",
        ],
    );
    let top = go_pprof(
        &recorded.dir,
        &["-top", "-cum", "-nodecount=5", "threads.pb.gz"],
    );
    let (rows, total) = parse_top(&top);
    assert_eq!(total, recorded.total(), "{top}");
    // The main thread's root holds every sample of the workload's methods under it.
    assert!(
        rows.iter().any(|row| row.name.starts_with("[main tid=")),
        "{top}"
    );
}

#[test]
fn go_tool_pprof_reads_allocation_sites() {
    // AllocMix allocates 69.7 % of its bytes at keep(), all kept live, the rest at temp().
    let run = run_java(
        Some("heap=sites,alloc_interval=8k,cutoff=0,file=sites.txt"),
        "AllocMix",
        &["50000"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let hprof = run.profile("sites.txt");
    let rows_of = || hprof.sites.iter().flat_map(|table| &table.rows);
    let allocated: u64 = rows_of().map(|row| row.site.allocated_bytes).sum();
    let live: u64 = rows_of().map(|row| row.site.live_bytes).sum();
    let kept: u64 = rows_of()
        .filter(|row| {
            hprof
                .traces
                .get(&row.site.trace)
                .and_then(|trace| trace.frames.first())
                .is_some_and(|frame| frame.qualified_method() == "AllocMix.keep")
        })
        .map(|row| row.site.allocated_bytes)
        .sum();
    let kept_share = 100.0 * kept as f64 / allocated as f64;
    assert!((kept_share - 69.7).abs() <= 5.0, "{kept_share}");

    convert_in(&run.dir, &["sites.txt", "-o", "sites.pb.gz"]);
    let top = go_pprof(
        &run.dir,
        &[
            "-sample_index=alloc_bytes",
            "-unit=byte",
            "-top",
            "-cum",
            "sites.pb.gz",
        ],
    );
    let (rows, total) = parse_top(&top);
    assert_eq!(total, allocated, "{top}");
    let keep = row(&rows, "AllocMix.keep", &top).cum_percent;
    assert!(
        (keep - kept_share).abs() <= 1.0,
        "{keep}% vs {kept_share:.2}%\n{top}"
    );
    // The allocated class is the leaf: every byte is byte[]'s own.
    assert!(row(&rows, "byte[]", &top).flat_percent >= 99.0, "{top}");

    let top = go_pprof(
        &run.dir,
        &[
            "-sample_index=live_bytes",
            "-unit=byte",
            "-top",
            "sites.pb.gz",
        ],
    );
    assert_eq!(parse_top(&top).1, live, "{top}");
}

/// speedscope's sampled profile of an event, checked against the file format's rules.
fn sampled_profile<'a>(file: &'a Value, name: &str) -> &'a Value {
    assert_eq!(
        file["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = file["shared"]["frames"].as_array().expect("shared.frames");
    assert!(frames.iter().all(|frame| frame["name"].is_string()));
    let profiles = file["profiles"].as_array().expect("profiles");
    let profile = profiles
        .iter()
        .find(|profile| profile["name"] == name)
        .unwrap_or_else(|| panic!("no profile {name}"));
    assert_eq!(profile["type"], "sampled");
    assert!(
        [
            "none",
            "nanoseconds",
            "microseconds",
            "milliseconds",
            "seconds",
            "bytes"
        ]
        .contains(&profile["unit"].as_str().expect("unit")),
        "{}",
        profile["unit"]
    );
    let samples = profile["samples"].as_array().expect("samples");
    let weights = profile["weights"].as_array().expect("weights");
    assert_eq!(samples.len(), weights.len());
    for sample in samples {
        for frame in sample.as_array().expect("a sample's frames") {
            let index = frame.as_u64().expect("a frame index") as usize;
            assert!(index < frames.len(), "frame {index} of {}", frames.len());
        }
    }
    let start = profile["startValue"].as_u64().expect("startValue");
    let end = profile["endValue"].as_u64().expect("endValue");
    assert!(start <= end);
    profile
}

#[test]
fn speedscope_json_has_the_split() {
    let recorded = recorded();
    convert_in(&recorded.dir, &["x.txt", "-o", "x.json"]);
    let bytes = std::fs::read(recorded.dir.join("x.json")).unwrap();
    let file: Value = serde_json::from_slice(&bytes).expect("speedscope's JSON");
    let profile = sampled_profile(&file, "cpu");
    let frames = file["shared"]["frames"].as_array().unwrap();
    let mut by_leaf: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    let mut total = 0;
    let samples = profile["samples"].as_array().unwrap();
    for (sample, weight) in samples.iter().zip(profile["weights"].as_array().unwrap()) {
        let weight = weight.as_u64().unwrap();
        total += weight;
        // Root first: the leaf is the last frame.
        if let Some(leaf) = sample.as_array().unwrap().last() {
            let name = frames[leaf.as_u64().unwrap() as usize]["name"]
                .as_str()
                .unwrap();
            *by_leaf.entry(name).or_default() += weight;
        }
    }
    // Samples, or their CPU time when the profile gives the sampling interval (1 ms here).
    let per_sample = match profile["unit"].as_str() {
        Some("nanoseconds") => 1_000_000,
        _ => 1,
    };
    assert_eq!(total, recorded.total() * per_sample);
    assert_eq!(profile["endValue"].as_u64().unwrap(), total);
    for method in ["CpuSplit.heavy", "CpuSplit.light"] {
        let share = 100.0 * by_leaf.get(method).copied().unwrap_or(0) as f64 / total as f64;
        let expected = recorded.share(method);
        assert!(
            (share - expected).abs() <= 1.0,
            "{method}: {share:.2}% in speedscope's JSON, {expected:.2}% in the HPROF text"
        );
    }
    // The frames say where they are.
    assert!(frames
        .iter()
        .any(|frame| frame["name"] == "CpuSplit.heavy" && frame["file"] == "CpuSplit.java"));

    // speedscope's own app reads the file: its Sandwich view gives each method's self share.
    let seen = crate::views_html::open_in_speedscope(&recorded.dir.join("x.json"));
    let rows = seen["rows"].as_array().expect("the Sandwich view's rows");
    for method in ["CpuSplit.heavy", "CpuSplit.light"] {
        let row = rows
            .iter()
            .find(|row| row[2] == method)
            .unwrap_or_else(|| panic!("{method} not in speedscope's view: {seen}"));
        let shown = crate::views_html::speedscope_share(&row[1]);
        let expected = recorded.share(method);
        assert!(
            (shown - expected).abs() <= 1.0,
            "{method}: {shown}% self in speedscope, {expected:.2}% of all samples in the text"
        );
    }

    convert_in(&recorded.dir, &["x.txt", "-o", "threads.json", "--threads"]);
    let bytes = std::fs::read(recorded.dir.join("threads.json")).unwrap();
    let file: Value = serde_json::from_slice(&bytes).expect("speedscope's JSON");
    let main = file["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|profile| {
            let name = profile["name"].as_str()?;
            name.starts_with("cpu [main tid=").then_some(name)
        })
        .expect("a profile of the main thread");
    sampled_profile(&file, main);
}

#[test]
fn unwritable_outputs_are_named() {
    let recorded = recorded();
    for output in ["/nonexistent/x.pb.gz", "/nonexistent/x.json"] {
        let result = openprof_in(&recorded.dir, &["convert", "x.txt", "-o", output]);
        assert_eq!(result.status.code(), Some(2), "{output}");
        let stderr = text(&result.stderr);
        assert!(
            stderr.contains(&format!("can't write {output}")),
            "{stderr}"
        );
    }
}

#[test]
fn wall_samples_carry_their_states_into_the_views() {
    let run = run_java(
        Some("wall=10,lock=0,thread=y,depth=16,cutoff=0,file=wall.txt"),
        "WallStates",
        &["2", "15"],
        LIMIT,
    );
    assert!(run.success(), "{}", run.stderr());
    let hprof = run.profile("wall.txt");
    let total: u64 = hprof
        .cpu_tables
        .iter()
        .filter(|table| table.kind == CpuTableKind::Wall)
        .map(|table| table.total)
        .sum();
    // Folded stacks of the wall event: every thread-interval of the WALL SAMPLES tables.
    convert_in(
        &run.dir,
        &["wall.txt", "--event", "wall", "-o", "wall.collapsed"],
    );
    let collapsed = std::fs::read_to_string(run.dir.join("wall.collapsed")).unwrap();
    assert_eq!(leaf_samples(&collapsed).values().sum::<u64>(), total);
    // pprof: the state of each sample as a label pprof groups by.
    convert_in(&run.dir, &["wall.txt", "-o", "wall.pb.gz"]);
    let tags = go_pprof(&run.dir, &["-tags", "wall.pb.gz"]);
    for state in ["sleeping", "blocked", "parked", "running"] {
        assert!(tags.contains(state), "no {state} in\n{tags}");
    }
    let parked = go_pprof(
        &run.dir,
        &[
            "-top",
            "-tagfocus=state=parked",
            "-nodecount=5",
            "wall.pb.gz",
        ],
    );
    assert!(parked.contains("Unsafe.park"), "{parked}");
    // The lock profile of the same run: nanoseconds blocked and parked, the lock's class as
    // the leaf and as a label, how the thread waited as the state.
    let table_ms = |kind| -> f64 {
        hprof
            .lock_tables_of(kind)
            .map(|table| table.total_ms as f64)
            .sum()
    };
    let blocked_ms = table_ms(LockTableKind::Monitor);
    let parked_ms = table_ms(LockTableKind::Park);
    assert!(
        blocked_ms > 0.0 && parked_ms > 0.0,
        "{blocked_ms} {parked_ms}"
    );
    convert_in(
        &run.dir,
        &[
            "wall.txt",
            "--event",
            "lock",
            "--total",
            "-o",
            "lock.collapsed",
        ],
    );
    let collapsed = std::fs::read_to_string(run.dir.join("lock.collapsed")).unwrap();
    let by_leaf = leaf_samples(&collapsed);
    let lock_ms = by_leaf.values().sum::<u64>() as f64 / 1e6;
    let expected_ms = blocked_ms + parked_ms;
    assert!(
        (lock_ms - expected_ms).abs() <= 0.01 * expected_ms + 2.0,
        "{lock_ms} ms in the view, {blocked_ms} + {parked_ms} ms in MONITOR TIME and PARK TIME"
    );
    let ledger_ms = by_leaf.get("WallStates$Ledger").copied().unwrap_or(0) as f64 / 1e6;
    assert!(
        (ledger_ms - blocked_ms).abs() <= 0.01 * blocked_ms + 1.0,
        "{ledger_ms} ms on the Ledger leaf, {blocked_ms} ms blocked"
    );
    assert!(
        by_leaf.contains_key("java.util.concurrent.locks.ReentrantLock$NonfairSync"),
        "{by_leaf:?}"
    );
    for (state, expected) in [("blocked", blocked_ms), ("parked", parked_ms)] {
        let top = go_pprof(
            &run.dir,
            &[
                "-top",
                "-unit=ms",
                "-sample_index=lock",
                &format!("-tagfocus=state={state}"),
                "wall.pb.gz",
            ],
        );
        // "Showing nodes accounting for 603ms, 25.10% of 2402.82ms total": the focused part.
        let total: f64 = top
            .split("accounting for ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|ms| ms.trim_end_matches("ms").parse().ok())
            .unwrap_or_else(|| panic!("no total in\n{top}"));
        assert!(
            (total - expected).abs() <= 0.01 * expected + 2.0,
            "{state}: {total} ms in pprof, {expected} ms in the tables"
        );
    }
    let tags = go_pprof(&run.dir, &["-tags", "-sample_index=lock", "wall.pb.gz"]);
    assert!(tags.contains("WallStates$Ledger"), "{tags}");
    // `openprof report` sums the lock tables: the time blocked is the workload's own.
    let report = openprof_in(&run.dir, &["report", "wall.txt"]);
    let said = text(&report.stdout);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let reported_ms: f64 = said
        .lines()
        .find(|line| line.contains("blocked entering monitors"))
        .and_then(|line| line.split_whitespace().next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no blocked time in the report:\n{said}"));
    let measured_ms = printed_figure(&run.stdout(), "blocked_ms");
    assert!(
        (reported_ms - measured_ms).abs() <= 0.1 * measured_ms,
        "{reported_ms} ms blocked in the report, {measured_ms} ms measured by the workload"
    );
}
