//! Heap histograms of the JDK's own heap dump (`jcmd PID GC.heap_dump`) of a workload that keeps
//! a known number of its objects, checked against that count and against the JVM's own class
//! histogram (`jcmd PID GC.class_histogram`); and `openprof report` on that dump, whole and cut.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use openprof_analysis::ShallowSizes;
use openprof_format::hprof_binary::read_profile;
use openprof_testkit::{jcmd, jdk, wait_until_ready, workload_classes};

use crate::helpers::{assert_refused_at_a_byte, openprof_in};

const NODES: u64 = 5000;

/// The JVM's class histogram: class name (as jcmd prints it) to (instances, bytes).
fn parse_class_histogram(text: &str) -> HashMap<String, (u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let rank = fields.next()?;
            rank.strip_suffix(':')?.parse::<u32>().ok()?;
            let instances = fields.next()?.parse().ok()?;
            let bytes = fields.next()?.parse().ok()?;
            Some((fields.next()?.to_string(), (instances, bytes)))
        })
        .collect()
}

/// Runs `Keep NODES`, takes the JVM's class histogram then its heap dump; returns the dump's
/// path and the histogram.
fn dump_keep(dir: &Path) -> (PathBuf, HashMap<String, (u64, u64)>) {
    // A small heap keeps compressed oops on, the layout the size estimate is for.
    let mut child = Command::new(jdk().java().unwrap())
        .args(["-Xmx256m", "-cp"])
        .arg(workload_classes())
        .args(["Keep", &NODES.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_ready(&mut child);
    let histogram = parse_class_histogram(&jcmd(child.id(), &["GC.class_histogram"]));
    let dump = dir.join("keep.hprof");
    jcmd(child.id(), &["GC.heap_dump", dump.to_str().unwrap()]);
    drop(child.stdin.take().map(|mut stdin| stdin.flush()));
    assert!(child.wait().unwrap().success());
    (dump, histogram)
}

#[test]
fn the_jdks_heap_dump_gives_the_workloads_exact_histogram_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let (dump, jvm_histogram) = dump_keep(dir.path());

    let file = std::fs::File::open(&dump).unwrap();
    let file_bytes = file.metadata().unwrap().len();
    let mut reported = Vec::new();
    let profile =
        read_profile(BufReader::new(file), &mut |bytes| reported.push(bytes)).expect("reads");
    assert_eq!(
        reported.last(),
        Some(&file_bytes),
        "progress ends at the file's size"
    );
    assert_eq!(profile.heap_dumps.len(), 1);
    let heap = &profile.heap_dumps[0];
    assert_eq!(heap.sizes, ShallowSizes::Estimated);
    let nodes = heap.get("Keep$Node").expect("Keep$Node in the histogram");
    assert_eq!(nodes.instances, NODES);
    let node_arrays = heap
        .get("Keep$Node[]")
        .expect("Keep$Node[] in the histogram");
    assert_eq!(node_arrays.instances, 1);
    let int_arrays = heap.get("int[]").expect("int[] in the histogram");
    assert!(int_arrays.instances >= NODES, "{int_arrays:?}");
    // The estimate is HotSpot's own figure for these (no injected fields, no padding).
    assert_eq!(
        jvm_histogram.get("Keep$Node"),
        Some(&(nodes.instances, nodes.bytes)),
        "the JVM's class histogram"
    );
    assert_eq!(
        jvm_histogram.get("[LKeep$Node;"),
        Some(&(1, node_arrays.bytes))
    );
    assert!(heap.root_total() > 0);
    assert!(heap.class_dumps > 100, "{} CLASS DUMPs", heap.class_dumps);

    let output = openprof_in(dir.path(), &["report", "keep.hprof", "--top", "50"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let row = stdout
        .lines()
        .find(|line| line.ends_with("  Keep$Node"))
        .unwrap_or_else(|| panic!("no Keep$Node row: {stdout}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[1], NODES.to_string(), "{row}");
    assert_eq!(columns[2], nodes.bytes.to_string(), "{row}");
    assert!(stdout.contains("  Keep$Node[]\n"), "{stdout}");
    assert!(stdout.contains("estimated for 64-bit HotSpot"), "{stdout}");
    assert!(stdout.contains(&format!(
        "{} objects, {} bytes",
        heap.total().instances,
        heap.total().bytes
    )));

    // Cut in half: an error at a byte offset, never a panic or a partial report.
    let bytes = std::fs::read(&dump).unwrap();
    let cut = bytes.len() / 2;
    std::fs::write(dir.path().join("cut.hprof"), &bytes[..cut]).unwrap();
    let output = openprof_in(dir.path(), &["report", "cut.hprof"]);
    assert_refused_at_a_byte(
        &output,
        "cut.hprof is not a readable HPROF binary profile",
        cut,
    );
}

#[test]
fn report_shows_a_text_profiles_heap_dump_and_allocation_sites() {
    use openprof_format::hprof_text::{
        Frame, FrameLine, SiteEntry, SitesTable, TextInstance, TextPrimitiveArray, TextRoot,
        TextWriter, Trace,
    };
    let mut writer = TextWriter::new(Vec::new());
    writer.header("Sun Nov 22 02:18:41 2026").unwrap();
    let frames = ["Gen.make", "Gen.loop", "Gen.main"]
        .iter()
        .enumerate()
        .map(|(line, method)| Frame {
            class_name: "Gen".into(),
            method_name: method.trim_start_matches("Gen.").into(),
            source_file: Some("Gen.java".into()),
            line: FrameLine::Line(10 + line as u32),
        })
        .collect();
    writer
        .trace(&Trace {
            serial: 300001,
            thread: None,
            frames,
        })
        .unwrap();
    let site = |class_name: &str, live_bytes, live_objects| SiteEntry {
        trace: 300001,
        class_name: class_name.into(),
        live_bytes,
        live_objects,
        allocated_bytes: live_bytes * 3,
        allocated_objects: live_objects * 3,
    };
    let sites = vec![site("char[]", 7600, 100), site("Gen$Item", 2400, 100)];
    writer
        .sites(&SitesTable::rank(
            "Sun Nov 22 02:18:41 2026".into(),
            sites,
            0.0001,
        ))
        .unwrap();
    writer
        .heap_dump_begin(3, 100, "Sun Nov 22 02:18:42 2026")
        .unwrap();
    writer
        .root(&TextRoot::JavaFrame {
            id: 0x10,
            thread: 200001,
            frame: 1,
        })
        .unwrap();
    for id in [0x10, 0x11] {
        writer
            .instance(&TextInstance {
                id,
                size: 24,
                trace: 300001,
                class_name: "Gen$Item",
                class_id: 0x5,
                fields: &[("chars", 0x12)],
            })
            .unwrap();
    }
    writer
        .primitive_array(&TextPrimitiveArray {
            id: 0x12,
            size: 52,
            trace: 300001,
            length: 18,
            type_name: "char[]",
        })
        .unwrap();
    writer.heap_dump_end().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("heap.txt"), writer.into_inner()).unwrap();

    let output = openprof_in(dir.path(), &["report", "heap.txt", "--frames", "2"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "Heap dump 1 of 1 (Sun Nov 22 02:18:42 2026): 3 objects, 100 bytes in 2 classes",
        "shallow sizes as the dump records them",
        "GC roots: 1 (Java stack 1)",
        "    1            1             52  52.0%  char[]",
        "    2            2             48  48.0%  Gen$Item",
        "2 sites listed, 10000 live bytes in 200 objects",
        "    1 76.00% 76.00%        7600        100          22800           300  300001  char[]",
        "                    Gen.make(Gen.java:10)",
    ] {
        assert!(stdout.contains(expected), "'{expected}' in:\n{stdout}");
    }
    assert!(
        !stdout.contains("Gen.main(Gen.java:12)"),
        "--frames 2:\n{stdout}"
    );
    assert!(!stdout.contains("no CPU samples"), "{stdout}");

    // A broken line of a heap dump: the line, and what is wrong.
    let text = std::fs::read_to_string(dir.path().join("heap.txt")).unwrap();
    let broken = text.replace("sz=52", "sz=fifty-two");
    std::fs::write(dir.path().join("broken.txt"), &broken).unwrap();
    let output = openprof_in(dir.path(), &["report", "broken.txt"]);
    assert_eq!(output.status.code(), Some(2));
    let line = broken
        .lines()
        .position(|line| line.contains("sz=fifty-two"))
        .unwrap()
        + 1;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "broken.txt is not an HPROF text profile: line {line}: ARR sz: 'fifty-two' is not a number"
        )),
        "{stderr}"
    );
}
