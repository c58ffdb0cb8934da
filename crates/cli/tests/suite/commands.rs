//! The `openprof` command on real JVM runs and on bad input.

use std::time::Duration;

use openprof_format::trace::reader::MAX_DEPTH;
use openprof_testkit::{jdk, run_java, workload_classes};

use crate::helpers::{openprof_in, text};

#[test]
fn run_profiles_a_java_program_and_prints_its_top_methods() {
    let dir = tempfile::tempdir().unwrap();
    let classes = workload_classes().to_str().unwrap().to_string();
    let output = openprof_in(
        dir.path(),
        &["run", "--", "java", "-cp", &classes, "CpuSplit", "2"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("heavy_cpu_share="),
        "the program's own output passes through"
    );
    let stderr = text(&output.stderr);
    let first_row = stderr
        .lines()
        .skip_while(|line| !line.contains("rank   self  total"))
        .nth(1)
        .expect("a method table");
    assert!(first_row.ends_with("CpuSplit.heavy"), "{stderr}");
    assert!(stderr.contains("CpuSplit.light"));
    assert!(
        dir.path().join("java.hprof.txt").is_file(),
        "HPROF's default file name"
    );
}

#[test]
fn run_passes_the_programs_exit_code_through() {
    let dir = tempfile::tempdir().unwrap();
    let classes = workload_classes().to_str().unwrap().to_string();
    let output = openprof_in(
        dir.path(),
        &["run", "--", "java", "-cp", &classes, "NoSuchClass"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
}

#[test]
fn run_refuses_bad_options_before_starting_java() {
    let dir = tempfile::tempdir().unwrap();
    let output = openprof_in(
        dir.path(),
        &["run", "-o", "cpu=samples,depth=x", "--", "java", "-version"],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("bad -o: option depth: 'x' is not a number"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("openjdk version"),
        "java must not have run: {stderr}"
    );
}

#[test]
fn run_says_when_java_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let output = openprof_in(
        dir.path(),
        &["run", "--", "/nonexistent/bin/java", "-version"],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("can't run /nonexistent/bin/java"),
        "{}",
        text(&output.stderr)
    );
    let output = openprof_in(
        dir.path(),
        &["run", "--agent", "/nonexistent/agent.so", "--", "java"],
    );
    assert!(text(&output.stderr).contains("the agent library /nonexistent/agent.so does not exist"));
}

#[test]
fn report_reads_a_real_profile() {
    let run = run_java(
        Some("cpu=samples,thread=y,file=p.txt"),
        "CpuSplit",
        &["2"],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let output = openprof_in(
        &run.dir,
        &["report", "p.txt", "--top", "2", "--traces", "1"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.contains("rank   self  total"))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(
        rows[0].ends_with("CpuSplit.heavy") && rows[1].ends_with("CpuSplit.light"),
        "{stdout}"
    );
    assert!(
        stdout.contains("CpuSplit.heavy(CpuSplit.java:"),
        "the trace behind it: {stdout}"
    );
    assert!(stdout.contains("sampled with AsyncGetCallTrace"));
    assert!(stdout.contains("profiling cost "), "{stdout}");
}

#[test]
fn report_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let output = openprof_in(dir.path(), &["report", "missing.txt"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("can't read missing.txt"));
    std::fs::write(
        dir.path().join("bad.txt"),
        "JAVA PROFILE 1.0.1\n--------\nTRACE x:\n",
    )
    .unwrap();
    let output = openprof_in(dir.path(), &["report", "bad.txt"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "bad.txt is not an HPROF text profile: line 3: TRACE serial: 'x' is not a number"
        ),
        "{stderr}"
    );
}

#[test]
fn every_command_has_help() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["report", "--help"],
    ] {
        let output = openprof_in(dir.path(), &args);
        assert!(output.status.success(), "{args:?}");
        assert!(text(&output.stdout).contains("Usage: openprof"), "{args:?}");
    }
    // The JDK is found the way the README says.
    assert!(jdk().java().is_ok());
}

#[test]
fn validate_accepts_a_real_trace_and_reports_problems_with_their_position() {
    let run = run_java(
        Some("format=x,cpu=times,filter=+Calls;-*,file=trace.xml"),
        "Calls",
        &["50", "1"],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let output = openprof_in(&run.dir, &["validate", "trace.xml"]);
    assert!(output.status.success(), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("trace.xml: valid,"));
    // Drop one element from the middle: a collation gap, reported with its element number.
    let trace = std::fs::read_to_string(run.dir.join("trace.xml")).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let cut = lines
        .iter()
        .position(|line| line.starts_with("<methodEntry"))
        .unwrap();
    let broken: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != cut)
        .map(|(_, l)| *l)
        .collect();
    std::fs::write(run.dir.join("broken.xml"), broken.join("\n")).unwrap();
    let output = openprof_in(&run.dir, &["validate", "broken.xml"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("collationValue"), "{stdout}");
    assert!(
        stdout.contains(&format!("element {} <", cut - 1)),
        "the position: {stdout}"
    );
    // Truncated: not well-formed, with the byte offset.
    std::fs::write(run.dir.join("cut.xml"), &trace[..trace.len() / 2]).unwrap();
    let output = openprof_in(&run.dir, &["validate", "cut.xml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stdout).contains("not well-formed at byte"),
        "{}",
        text(&output.stdout)
    );
}

#[test]
fn a_trace_nested_too_deep_is_refused_with_its_place_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // 200,000 levels: a methodEntry holding values in values.
    let head = "<TRACE>\n<methodEntry>";
    let mut trace = String::from(head);
    trace.push_str(&"<value>".repeat(199_999));
    trace.push_str(&"</value>".repeat(199_999));
    trace.push_str("</methodEntry>\n</TRACE>\n");
    std::fs::write(dir.path().join("deep.xml"), &trace).unwrap();
    let offset = head.len() + (MAX_DEPTH - 1) * "<value>".len();
    let problem = format!("byte {offset}: <value> is nested more than {MAX_DEPTH} deep");

    let output = openprof_in(dir.path(), &["validate", "deep.xml"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "deep.xml: element 1 <?>: not well-formed at {problem}"
        )),
        "{stdout}"
    );

    // mpt exits 2 on any file it cannot read, as for every other unreadable trace.
    let output = openprof_in(dir.path(), &["mpt", "deep.xml"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "deep.xml is not a readable trace: line 2, {problem}"
        )),
        "{stderr}"
    );
}

#[test]
fn report_reads_a_cpu_times_profile() {
    let run = run_java(
        Some("cpu=times,filter=+Calls;-*,file=times.txt"),
        "Calls",
        &["300", "2"],
        Duration::from_secs(120),
    );
    assert!(run.success(), "{}", run.stderr());
    let output = openprof_in(&run.dir, &["report", "times.txt", "--traces", "1"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("cpu=times: true entry counts"), "{stdout}");
    let work = stdout
        .lines()
        .find(|line| line.ends_with("  Calls.work"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let entries: u64 = work.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(entries, 300, "{work}");
}

#[test]
fn run_says_where_a_trace_went() {
    let dir = tempfile::tempdir().unwrap();
    let classes = workload_classes().to_str().unwrap().to_string();
    let output = openprof_in(
        dir.path(),
        &[
            "run",
            "-o",
            "format=x,cpu=times,filter=+Calls;-*",
            "--",
            "java",
            "-cp",
            &classes,
            "Calls",
            "20",
            "1",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("openprof: trace written to java.trace.xml ("),
        "{stderr}"
    );
    let output = openprof_in(dir.path(), &["validate", "java.trace.xml"]);
    assert!(output.status.success(), "{}", text(&output.stdout));
}
