//! `openprof mpt` on files written with the format crate's writers: a trace (as a document and
//! as fragments) and an HPROF text profile with an MPT record; the order and the figures of
//! its report, and its errors on files without MPT data or unreadable ones. No JVM.

use std::path::Path;

use openprof_format::hprof_text::TextWriter;
use openprof_format::mpt_stats::{MptTable, ValueKey, ValueType};
use openprof_format::trace::attrs::{MultiPart, Seconds};
use openprof_format::trace::writer::TraceWriter;
use openprof_format::trace::{
    ClassDef, MethodDef, MethodEntry, MethodExit, NoContent, Signature, TraceElement, Value, Values,
};

use crate::helpers::{openprof, text};

const MS: u64 = 1_000_000;

/// A time `ms` milliseconds after a fixed start.
fn at(ms: u64) -> Seconds {
    Seconds::from_nanos(u128::from(1_700_000_000_000 * MS + ms * MS))
}

fn class(id: u32, name: &str) -> TraceElement {
    ClassDef {
        transient_thread_id_ref: None,
        thread_id_ref: None,
        time: None,
        num_interfaces: None,
        transient_class_id: None,
        class_id: Some(id),
        source_name: None,
        name: Some(name.into()),
        access: None,
        num_static_fields: None,
        num_methods: None,
        num_instance_fields: None,
        class_loader: None,
        class_loader_name: None,
        collation_value: None,
        trace_id_ref: None,
        content: NoContent,
    }
    .into()
}

fn method(id: u32, class: u32, name: &str, signature: &str) -> TraceElement {
    MethodDef {
        name: Some(name.into()),
        signature: Some(signature.into()),
        access: None,
        start_line_number: None,
        end_line_number: None,
        sig_notation: None,
        transient_class_id_ref: None,
        class_id_ref: Some(class),
        method_id: Some(id),
        transient_method_id: None,
        collation_value: None,
        trace_id_ref: None,
        content: Signature::default(),
    }
    .into()
}

/// A call's entry: thread, time and CPU time (ms), method, ticket, values (spec, type, value).
fn entry(
    thread: u32,
    time: u64,
    cpu: u64,
    method: u32,
    ticket: u128,
    values: &[(&str, ValueType, &str)],
) -> TraceElement {
    let values = values
        .iter()
        .enumerate()
        .map(|(index, (spec, value_type, value))| Value {
            parameter_name: Some((index + 1).to_string()),
            reference_name: Some(spec.to_string()),
            value_type: Some(*value_type),
            value: Some(value.to_string()),
            obj_id_ref: None,
            collation_value: None,
            trace_id_ref: None,
            content: Default::default(),
        })
        .collect();
    MethodEntry {
        transient_thread_id_ref: None,
        thread_id_ref: Some(thread),
        time: Some(at(time)),
        method_id_ref: Some(method),
        transient_method_id_ref: None,
        ticket: Some(MultiPart(ticket)),
        transient_obj_id_ref: None,
        obj_id_ref: None,
        transient_class_id_ref: None,
        class_id_ref: None,
        thread_cpu_time: Some(at(cpu)),
        sequence_counter: None,
        context_data: None,
        stack_depth: None,
        collation_value: None,
        trace_id_ref: None,
        content: Values(values),
    }
    .into()
}

fn exit(thread: u32, time: u64, cpu: u64, method: u32, ticket: u128) -> TraceElement {
    MethodExit {
        transient_thread_id_ref: None,
        thread_id_ref: Some(thread),
        time: Some(at(time)),
        ticket: Some(MultiPart(ticket)),
        thread_cpu_time: Some(at(cpu)),
        method_id_ref: Some(method),
        transient_method_id_ref: None,
        transient_obj_id_ref: None,
        obj_id_ref: None,
        transient_class_id_ref: None,
        class_id_ref: None,
        sequence_counter: None,
        context_data: None,
        collation_value: None,
        trace_id_ref: None,
        content: Values::default(),
    }
    .into()
}

const WORK: &str = "Slow.work(int) 1";
const KEY: &str =
    "example.Cache.get(java.lang.Object)java.lang.Object 1 instance_method:toString()String";

/// work(int) called with 100 (twice, 50 and 70 ms, one of them recursively inside the other's
/// call on another thread's ticket numbers), 5 (once, 2 ms) and 1 (once, 1 ms, on thread 2);
/// get(Object) with "slow key" (30 ms) and a null (error NullInCall, 1 ms); a plain call of
/// other profiles in between, and a work(7) never exited.
fn elements() -> Vec<TraceElement> {
    let int = |value| [(WORK, ValueType::Int, value)];
    vec![
        class(1, "example.Slow"),
        class(2, "example.Cache"),
        method(1, 1, "work", "(I)V"),
        method(2, 2, "get", "(Ljava/lang/Object;)Ljava/lang/Object;"),
        method(3, 1, "plain", "()V"),
        entry(1, 0, 0, 1, 1, &int("100")),
        entry(1, 1, 1, 3, 2, &[]),
        entry(1, 2, 1, 1, 3, &int("5")),
        entry(2, 2, 0, 1, 1, &int("1")),
        exit(1, 4, 2, 1, 3),
        exit(2, 3, 1, 1, 1),
        exit(1, 5, 2, 3, 2),
        exit(1, 50, 40, 1, 1),
        entry(1, 60, 40, 1, 4, &int("100")),
        exit(1, 130, 100, 1, 4),
        entry(1, 200, 100, 2, 5, &[(KEY, ValueType::String, "slow key")]),
        exit(1, 230, 110, 2, 5),
        entry(1, 240, 110, 2, 6, &[(KEY, ValueType::Error, "NullInCall")]),
        exit(1, 241, 110, 2, 6),
        entry(2, 300, 10, 1, 2, &int("7")),
    ]
}

fn write_trace(path: &Path, document: bool) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = if document {
        TraceWriter::document(file)
    } else {
        TraceWriter::fragments(file)
    };
    for element in elements() {
        writer.write(&element).unwrap();
    }
    writer.finish().unwrap();
}

/// The report's lines from the one naming `method` to the next blank line.
fn section<'a>(report: &'a str, method: &str) -> Vec<&'a str> {
    report
        .lines()
        .skip_while(|line| *line != method)
        .take_while(|line| !line.is_empty())
        .collect()
}

/// The numbers and value of a row: (rank, calls, wall total, mean, max, cpu total, mean, max),
/// value.
fn row(line: &str) -> (Vec<&str>, String) {
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[..8].to_vec(), fields[8..].join(" "))
}

#[test]
fn a_trace_is_reported_per_method_and_spec_slowest_value_first() {
    let dir = tempfile::tempdir().unwrap();
    for document in [true, false] {
        let path = dir
            .path()
            .join(if document { "doc.xml" } else { "stream.xml" });
        write_trace(&path, document);
        if !document {
            // A byte order mark, as some editors add, is no obstacle.
            let mut bytes = b"\xef\xbb\xbf".to_vec();
            bytes.extend(std::fs::read(&path).unwrap());
            std::fs::write(&path, bytes).unwrap();
        }
        let output = openprof(&["mpt", path.to_str().unwrap()]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report = text(&output.stdout);
        assert!(
            report.lines().next().unwrap().ends_with(
                "(trace): method parameter tracing, 2 method/spec tables, 6 calls, 1 unfinished"
            ),
            "{report}"
        );
        // Tables by method name: Cache.get before Slow.work.
        let get_at = report
            .find("\nexample.Cache.get(java.lang.Object)\n")
            .unwrap();
        let work_at = report.find("\nexample.Slow.work(int)\n").unwrap();
        assert!(get_at < work_at, "{report}");

        let work = section(&report, "example.Slow.work(int)");
        assert_eq!(work[1], format!("  spec {WORK}"));
        assert_eq!(work[2], "  4 calls, 3 values, 1 unfinished");
        let rows: Vec<_> = work[4..].iter().map(|line| row(line)).collect();
        assert_eq!(rows.len(), 3, "{report}");
        assert_eq!(
            rows[0],
            (
                vec!["1", "2", "120.000", "60.000", "70.000", "100.000", "50.000", "60.000"],
                "int 100".to_string()
            )
        );
        assert_eq!(
            rows[1],
            (
                vec!["2", "1", "2.000", "2.000", "2.000", "1.000", "1.000", "1.000"],
                "int 5".to_string()
            )
        );
        assert_eq!(rows[2].1, "int 1");

        let get = section(&report, "example.Cache.get(java.lang.Object)");
        assert_eq!(get[1], format!("  spec {KEY}"));
        assert_eq!(row(get[4]).1, "string \"slow key\"");
        assert_eq!(row(get[4]).0[2], "30.000");
        assert_eq!(row(get[5]).1, "error NullInCall");
    }
}

fn profile_with(tables: &[MptTable]) -> Vec<u8> {
    let mut writer = TextWriter::new(Vec::new());
    writer.header("Sun Nov 22 02:18:41 2026").unwrap();
    writer.mpt(tables, None).unwrap();
    writer.into_inner()
}

#[test]
fn a_profiles_mpt_record_is_reported_and_top_cuts_the_fast_values() {
    let mut table = MptTable::new(
        "example.Names.find(java.lang.String)",
        "Names.find(String) 1",
    );
    for (value, wall) in [
        ("fast", 1),
        ("two words", 40),
        ("line\nbreak", 30),
        ("naïve ☃", 20),
        ("quote \"q\"", 10),
    ] {
        table.record(
            ValueKey::new(ValueType::String, value),
            wall * MS,
            wall * MS / 2,
        );
    }
    table.record(ValueKey::new(ValueType::String, "fast"), 3 * MS, 0);
    table.unfinished = 3;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("java.hprof.txt");
    std::fs::write(&path, profile_with(&[table])).unwrap();

    let output = openprof(&["mpt", path.to_str().unwrap(), "--top", "3"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report = text(&output.stdout);
    assert!(
        report.contains(
            "(profile): method parameter tracing, 1 method/spec tables, 6 calls, 3 unfinished"
        ),
        "{report}"
    );
    let lines = section(&report, "example.Names.find(java.lang.String)");
    assert_eq!(lines[2], "  6 calls, 5 values, 3 unfinished");
    let values: Vec<String> = lines[4..7].iter().map(|line| row(line).1).collect();
    assert_eq!(
        values,
        [
            "string \"two words\"",
            "string \"line\\nbreak\"",
            "string \"naïve ☃\""
        ]
    );
    assert_eq!(row(lines[4]).0[2..5], ["40.000", "40.000", "40.000"]);
    assert_eq!(lines[7], "  ... and 2 faster values (--top 5 shows them)");

    let all = text(&openprof(&["mpt", path.to_str().unwrap()]).stdout);
    let last = section(&all, "example.Names.find(java.lang.String)")
        .last()
        .map(|line| row(line))
        .unwrap();
    assert_eq!(last.1, "string \"fast\"");
    assert_eq!(last.0[1..5], ["2", "4.000", "2.000", "3.000"]);
}

#[test]
fn files_without_mpt_data_or_unreadable_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let plain_trace = dir.path().join("plain.xml");
    let mut writer = TraceWriter::document(std::fs::File::create(&plain_trace).unwrap());
    for element in [
        method(3, 1, "plain", "()V"),
        entry(1, 0, 0, 3, 1, &[]),
        exit(1, 1, 0, 3, 1),
    ] {
        writer.write(&element).unwrap();
    }
    writer.finish().unwrap();
    let plain_profile = dir.path().join("plain.hprof.txt");
    let mut writer = TextWriter::new(Vec::new());
    writer.header("d").unwrap();
    std::fs::write(&plain_profile, writer.into_inner()).unwrap();
    for path in [&plain_trace, &plain_profile] {
        let output = openprof(&["mpt", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(
            text(&output.stderr),
            format!(
                "openprof: {} has no method parameter tracing data: run the agent with mpt=@SPECS\n",
                path.display()
            )
        );
    }

    let missing = dir.path().join("missing.txt");
    let output = openprof(&["mpt", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("can't read"),
        "{}",
        text(&output.stderr)
    );

    let mut table = MptTable::new("A.f(int)", "A.f(int) 1");
    table.record(ValueKey::new(ValueType::Int, "1"), MS, 0);
    let broken = text(&profile_with(&[table])).replace(" 1.000 ", " 1.0x0 ");
    let broken_path = dir.path().join("broken.hprof.txt");
    std::fs::write(&broken_path, &broken).unwrap();
    let line = broken
        .lines()
        .position(|line| line.contains("1.0x0"))
        .unwrap()
        + 1;
    let stderr = text(&openprof(&["mpt", broken_path.to_str().unwrap()]).stderr);
    assert!(
        stderr.contains(&format!("is not an HPROF text profile: line {line}: MPT row: wall total '1.0x0' is not milliseconds")),
        "{stderr}"
    );

    let bad_trace = dir.path().join("bad.xml");
    std::fs::write(
        &bad_trace,
        "<TRACE>\n<classDef classId=\"1\"/>\n<methodEntry time=\"soon\"/>\n</TRACE>\n",
    )
    .unwrap();
    let stderr = text(&openprof(&["mpt", bad_trace.to_str().unwrap()]).stderr);
    assert!(stderr.contains("is not a readable trace: line 3, byte 32: <methodEntry> time: 'soon' is not seconds.fraction"), "{stderr}");
}

#[test]
fn help_explains_the_command() {
    let help = text(&openprof(&["mpt", "--help"]).stdout);
    for words in [
        "method parameter tracing",
        "--top",
        "unfinished",
        "MPT record",
        "ticket",
    ] {
        assert!(help.contains(words), "{words}: {help}");
    }
    assert!(text(&openprof(&["--help"]).stdout).contains("mpt"));
}
