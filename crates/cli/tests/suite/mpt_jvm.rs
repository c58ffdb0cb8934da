//! Method parameter tracing end to end on real JVMs, read by `openprof mpt`: a method whose
//! duration depends on its argument (the slow values ranked first, with their known
//! durations), in HPROF text and in a trace, with stacks; classes of one name from two class
//! loaders, told apart by loader index; specifications given to `openprof attach`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use openprof_format::trace::TraceElement;
use openprof_testkit::{
    java_command, kept_temp_dir, read_trace, run_java, wait_for, wait_with_limit, xmllint_trace,
    PipeText, Run,
};

use crate::helpers::{openprof, text};

fn spec_file(specs: &str) -> PathBuf {
    let dir = kept_temp_dir("openprof-mpt-");
    let path = dir.join("specs.mpt");
    std::fs::write(&path, specs).unwrap();
    path
}

fn run(main_class: &str, options: &str) -> Run {
    let run = run_java(Some(options), main_class, &[], Duration::from_secs(120));
    assert!(run.success(), "{}\n{}", run.stdout(), run.stderr());
    assert!(run.stdout().contains("done"), "{}", run.stdout());
    run
}

/// The report's rows: (calls, wall mean ms, cpu mean ms, value).
fn rows(report: &str) -> Vec<(u64, f64, f64, String)> {
    report
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || fields[0].parse::<u64>().is_err() {
                return None;
            }
            Some((
                fields[1].parse().ok()?,
                fields[3].parse().ok()?,
                fields[6].parse().ok()?,
                fields[8..].join(" "),
            ))
        })
        .collect()
}

#[test]
fn the_slow_values_of_a_method_come_first_with_their_durations() {
    // MptSlow: work(n) spins for n * 2 ms; work(1), work(5) and work(20) five times each.
    let specs = spec_file("MptSlow.work(int) 1 events=entry,exit,stack\n");
    for format in ["a", "x"] {
        let file = if format == "a" {
            "slow.txt"
        } else {
            "slow.xml"
        };
        let run = run(
            "MptSlow",
            &format!("format={format},file={file},mpt=@{}", specs.display()),
        );
        let path = run.dir.join(file);
        let output = openprof(&["mpt", path.to_str().unwrap()]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report = text(&output.stdout);
        assert!(report.contains("MptSlow.work(int)"), "{report}");
        assert!(
            report.contains("15 calls, 3 values, 0 unfinished"),
            "{report}"
        );
        let ranked = rows(&report);
        let values: Vec<&str> = ranked.iter().map(|row| row.3.as_str()).collect();
        assert_eq!(values, ["int 20", "int 5", "int 1"], "{report}");
        for ((calls, wall, cpu, _), spin_ms) in ranked.iter().zip([40.0, 10.0, 2.0]) {
            assert_eq!(*calls, 5, "{report}");
            // Each call spins until spin_ms have passed: never less. A loaded machine may stretch
            // a spin several times (a full run once saw 23 ms for 10); more than that would mean
            // other calls' time was counted to this value.
            assert!(*wall >= spin_ms && *wall < spin_ms * 4.0 + 20.0, "{report}");
            // The spin runs on the CPU: the thread's CPU time is the wall time, or less when
            // the thread was descheduled.
            assert!(*cpu > 0.0 && *cpu <= *wall + 0.5, "{report}");
        }
        if format == "a" {
            // openprof report shows the profile's parameter values too, slowest first.
            let report = openprof(&["report", path.to_str().unwrap()]);
            assert!(report.status.success(), "{}", text(&report.stderr));
            let report = text(&report.stdout);
            assert!(report.contains("method parameter tracing"), "{report}");
            let first = rows(&report).into_iter().next().map(|row| row.3);
            assert_eq!(first.as_deref(), Some("int 20"), "{report}");
        }
        if format == "x" {
            // events=stack: each entry carries its caller's stack.
            let trace = std::fs::read_to_string(&path).unwrap();
            let stacks = trace.matches("contextData=\"MptSlow.work:").count();
            assert_eq!(stacks, 15, "{trace}");
            assert!(trace.contains("&lt;- MptSlow.main:"), "{trace}");
        }
    }
}

#[test]
fn classes_of_one_name_from_two_loaders_are_told_apart_by_loader_index() {
    // MptLoaders: two URLClassLoaders define MptTwin each; the first's applyAsInt is called
    // twice with 1, the second's three times with 2.
    let specs = spec_file("MptTwin.applyAsInt(int) 1\nMptTwin.applyAsInt(int) 0 class\n");
    for format in ["a", "x"] {
        let file = if format == "a" {
            "loaders.txt"
        } else {
            "loaders.xml"
        };
        let run = run(
            "MptLoaders",
            &format!("format={format},file={file},mpt=@{}", specs.display()),
        );
        let path = run.dir.join(file);
        if format == "x" {
            // The trace names each class's loader in its classDef, valid by the DTD.
            xmllint_trace(&path);
            let twins: Vec<(Option<u32>, Option<String>)> = read_trace(&path)
                .into_iter()
                .filter_map(|element| match element {
                    TraceElement::ClassDef(class) if class.name.as_deref() == Some("MptTwin") => {
                        Some((class.class_loader, class.class_loader_name))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(twins.len(), 2, "{twins:?}");
            assert_ne!(twins[0].0, twins[1].0, "{twins:?}");
            for (index, name) in &twins {
                assert!(index.is_some_and(|index| index > 0), "{twins:?}");
                assert_eq!(name.as_deref(), Some("java.net.URLClassLoader"));
            }
        }
        let output = openprof(&["mpt", path.to_str().unwrap()]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report = text(&output.stdout);
        let tables: Vec<&str> = report
            .lines()
            .filter(|line| line.starts_with("MptTwin.applyAsInt(int) [loader "))
            .collect();
        assert_eq!(tables.len(), 4, "{report}");
        let mut loaders = tables.clone();
        loaders.sort();
        loaders.dedup();
        assert_eq!(loaders.len(), 2, "two loaders, two tables each: {report}");
        for loader in &loaders {
            assert!(loader.ends_with(": java.net.URLClassLoader]"), "{report}");
        }
        // Per loader: the calls it made, its int value, and the class value naming the same loader.
        let rows = rows(&report);
        let (first, second) = (loaders[0], loaders[1]);
        let index = |table: &str| {
            table
                .split("[loader ")
                .nth(1)
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .to_string()
        };
        for (table, calls, value) in [(first, 2, "int 1"), (second, 3, "int 2")] {
            assert!(
                rows.iter().any(|row| row.0 == calls && row.3 == value),
                "{table}: {report}"
            );
            let class_value = format!(
                "class MptTwin (loader {}: java.net.URLClassLoader)",
                index(table)
            );
            assert!(
                rows.iter()
                    .any(|row| row.0 == calls && row.3 == class_value),
                "{class_value}: {report}"
            );
        }
    }
}

#[test]
fn specifications_given_when_attaching_trace_a_jvm_started_without_the_agent() {
    // MptSlow loop: a thread alternates work(1) (2 ms) and work(3) (6 ms) until "stop".
    let (mut command, dir) = java_command(None, "MptSlow", &["loop"]);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read stdout");
    assert_eq!(line.trim(), "ready");
    // It prints pairs=N every tenth pair of calls.
    let stdout = PipeText::read(stdout);
    let pairs = || {
        stdout
            .text()
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("pairs=")?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let specs = spec_file("MptSlow.work(int) 1\n");
    let profile = dir.join("attached.txt");
    let attach = openprof(&[
        "attach",
        &child.id().to_string(),
        &format!("mpt=@{},file={}", specs.display(), profile.display()),
    ]);
    assert!(attach.status.success(), "{}", text(&attach.stderr));
    // About 150 pairs traced (what 1.2 s gives on an idle machine): enough for each value's
    // mean to stand apart from a few calls that a busy machine stretches.
    let attached_at = pairs();
    wait_for(
        "150 pairs of calls were made since the attach",
        Duration::from_secs(120),
        || pairs() >= attached_at + 150,
    );
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    let output = wait_with_limit(child, Duration::from_secs(60));
    assert!(output.status.success(), "{}", text(&output.stderr));

    let report = openprof(&["mpt", profile.to_str().unwrap()]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let report = text(&report.stdout);
    let rows = rows(&report);
    let values: Vec<&str> = rows.iter().map(|row| row.3.as_str()).collect();
    assert_eq!(values, ["int 3", "int 1"], "{report}");
    // The calls alternate: as many of each, give or take the one running at either end.
    assert!(
        rows[0].0 >= 20 && rows[0].0.abs_diff(rows[1].0) <= 1,
        "{report}"
    );
    assert!(rows[0].1 >= 6.0 && rows[1].1 >= 2.0, "{report}");
}

#[test]
fn a_call_still_running_when_the_jvm_exits_is_counted_unfinished() {
    // MptUnfinished: a daemon thread blocks inside wait(7) for good; main calls wait(0) three
    // times, then exits.
    let specs = spec_file("MptUnfinished.wait(int) 1\n");
    for format in ["a", "x"] {
        let file = if format == "a" {
            "wait.txt"
        } else {
            "wait.xml"
        };
        let run = run(
            "MptUnfinished",
            &format!("format={format},file={file},mpt=@{}", specs.display()),
        );
        let output = openprof(&["mpt", run.dir.join(file).to_str().unwrap()]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report = text(&output.stdout);
        assert!(
            report.contains("3 calls, 1 values, 1 unfinished"),
            "{format}: {report}"
        );
        let ranked = rows(&report);
        assert_eq!(ranked.len(), 1, "{report}");
        assert_eq!(
            (ranked[0].0, ranked[0].3.as_str()),
            (3, "int 0"),
            "{report}"
        );
    }
}

/// Folded stacks of a collapsed file: (stack, samples).
fn folded(path: &std::path::Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((stack.to_string(), count.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_samples_inside_a_values_calls_are_its_profile() {
    // MptProfile: handle(1) burns 8 ms of CPU in slowPath, handle(2) 2 ms in fastPath, and
    // outside() 4 ms between them, in no traced call.
    let specs = spec_file("MptProfile.handle(int) 1\n");
    let run = run(
        "MptProfile",
        &format!(
            "cpu=samples,interval=2,depth=32,format=a,file=p.txt,mpt=@{}",
            specs.display()
        ),
    );
    let profile = std::fs::read_to_string(run.dir.join("p.txt")).unwrap();
    assert!(
        profile.contains("MPT SAMPLES BEGIN (event = cpu"),
        "{profile}"
    );
    let convert = |args: &[&str], out: &str| {
        let mut all = vec!["convert", "p.txt", "-o", out];
        all.extend_from_slice(args);
        let output = crate::helpers::openprof_in(&run.dir, &all);
        assert!(output.status.success(), "{all:?}: {}", text(&output.stderr));
        folded(&run.dir.join(out))
    };
    let all = convert(&["--event", "cpu"], "all.collapsed");
    let slow = convert(
        &["--event", "mpt_cpu", "--label", "mpt.value=1"],
        "slow.collapsed",
    );
    let fast = convert(
        &[
            "--event",
            "mpt_cpu",
            "--label",
            "mpt.spec=MptProfile.handle(int) 1",
            "--label",
            "mpt.value=2",
        ],
        "fast.collapsed",
    );
    let total = |stacks: &[(String, u64)]| stacks.iter().map(|(_, n)| n).sum::<u64>() as f64;
    let within = |stacks: &[(String, u64)], frame: &str| {
        stacks
            .iter()
            .filter(|(stack, _)| stack.contains(frame))
            .map(|(_, n)| n)
            .sum::<u64>() as f64
            / total(stacks)
    };
    let (cpu, in_slow, in_fast) = (total(&all), total(&slow), total(&fast));
    let figures = format!("cpu {cpu}, slow {in_slow}, fast {in_fast}");
    assert!(cpu >= 500.0 && in_fast >= 50.0, "{figures}");
    // Built: 8 ms inside handle(1) for 2 ms inside handle(2), of 14 ms a round.
    assert!((3.0..=5.3).contains(&(in_slow / in_fast)), "{figures}");
    let traced = (in_slow + in_fast) / cpu;
    assert!((traced - 10.0 / 14.0).abs() <= 0.1, "{figures}: {traced}");
    // Each value's samples are inside its calls, where its calls spend their CPU, and none is
    // in outside() (a failed walk now and then has no Java frames).
    assert!(within(&slow, "MptProfile.handle") >= 0.98, "{slow:?}");
    assert!(within(&fast, "MptProfile.handle") >= 0.98, "{fast:?}");
    assert!(within(&slow, "MptProfile.slowPath") >= 0.95, "{slow:?}");
    assert!(within(&fast, "MptProfile.fastPath") >= 0.95, "{fast:?}");
    assert_eq!(within(&slow, "outside") + within(&fast, "outside"), 0.0);
    assert_eq!(within(&slow, "fastPath") + within(&fast, "slowPath"), 0.0);
    // A label no sample has: nothing to show, said by name.
    let none = crate::helpers::openprof_in(
        &run.dir,
        &[
            "convert",
            "p.txt",
            "-o",
            "none.collapsed",
            "--event",
            "mpt_cpu",
            "--label",
            "mpt.value",
        ],
    );
    assert!(!none.status.success());
    assert!(
        text(&none.stderr).contains("--label \"mpt.value\""),
        "{}",
        text(&none.stderr)
    );
}
