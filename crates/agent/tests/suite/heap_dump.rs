//! heap=dump against ground truth: a workload keeps known objects; our dump (binary and ASCII)
//! and the JDK's own (`jcmd GC.heap_dump`) of the same heap agree on them, field by field, and
//! a reader we did not write (jvm-hprof) reads ours.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use openprof_format::heap::HeapHistogram;
use openprof_format::hprof_binary::read_profile;
use openprof_format::hprof_binary::{BasicType, HprofReader, Item, Record, SubRecord};
use openprof_format::hprof_text;
use openprof_testkit::{java_command, jcmd, wait_until_ready, wait_with_limit};

const SHAPES: usize = 3000;
const BASES: usize = 700;
const SHAPE: &str = "HeapShapes$Shape";
const BASE: &str = "HeapShapes$Base";

/// Runs HeapShapes under the agent; while it waits, takes the JDK's dump too. Returns the
/// run's directory, the JDK's dump and the JVM's stderr.
fn run_with_jdk_dump(options: &str, jvm_flags: &str) -> (PathBuf, PathBuf, String) {
    run_with_jdk_dump_in(options, jvm_flags, &[])
}

/// As `run_with_jdk_dump`, with `env` set for the JVM.
fn run_with_jdk_dump_in(
    options: &str,
    jvm_flags: &str,
    env: &[(&str, &str)],
) -> (PathBuf, PathBuf, String) {
    let (mut command, dir) = java_command(
        Some(options),
        "HeapShapes",
        &[&SHAPES.to_string(), &BASES.to_string()],
    );
    if !jvm_flags.is_empty() {
        command.env("JAVA_TOOL_OPTIONS", jvm_flags);
    }
    command.envs(env.iter().copied());
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    wait_until_ready(&mut child);
    let jdk_dump = dir.join("jcmd.hprof");
    jcmd(child.id(), &["GC.heap_dump", jdk_dump.to_str().unwrap()]);
    drop(child.stdin.take().map(|mut stdin| stdin.flush()));
    let output = wait_with_limit(child, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    (dir, jdk_dump, stderr)
}

fn histogram_of_binary(path: &Path) -> HeapHistogram {
    let file = std::fs::File::open(path).unwrap();
    let profile = read_profile(BufReader::new(file), &mut |_| {})
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    profile.heap_dumps.last().cloned().expect("a heap dump")
}

fn instances(histogram: &HeapHistogram, class: &str) -> u64 {
    histogram.get(class).map_or(0, |count| count.instances)
}

/// The values of every primitive field of every instance of `class_name` (and its super
/// classes), decoded through the dump's own CLASS DUMP records, as sorted rows of
/// `name=value` text; also the class's static primitive values.
fn field_rows(path: &Path, class_name: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let reader = HprofReader::new(BufReader::new(std::fs::File::open(path).unwrap())).unwrap();
    let id_size = reader.header().id_size;
    let mut strings: HashMap<u64, String> = HashMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut layouts: HashMap<u64, (u64, Vec<(String, BasicType)>)> = HashMap::new();
    let mut statics = BTreeMap::new();
    let mut objects: Vec<(u64, Vec<u8>)> = Vec::new();
    for item in reader {
        match item.unwrap() {
            Item::Record(Record::Utf8 { id, text }) => {
                strings.insert(id, String::from_utf8_lossy(&text).into_owned());
            }
            Item::Record(Record::LoadClass {
                class_id, name_id, ..
            }) => {
                let name = strings[&name_id].replace('/', ".");
                names.insert(class_id, name);
            }
            Item::Sub(SubRecord::ClassDump(class)) => {
                let fields = class
                    .instance_fields
                    .iter()
                    .map(|(name, basic_type)| (strings[name].clone(), *basic_type))
                    .collect();
                if names.get(&class.class_id).map(String::as_str) == Some(class_name) {
                    for (name, value) in &class.static_fields {
                        if value.basic_type != BasicType::Object {
                            statics.insert(strings[name].clone(), format!("{:?}", value.bytes));
                        }
                    }
                }
                layouts.insert(class.class_id, (class.super_id, fields));
            }
            Item::Sub(SubRecord::InstanceDump {
                class_id, values, ..
            }) => objects.push((class_id, values)),
            _ => {}
        }
    }
    let mut rows = Vec::new();
    for (class_id, values) in objects {
        if names.get(&class_id).map(String::as_str) != Some(class_name) {
            continue;
        }
        let mut row = Vec::new();
        let mut at = 0usize;
        let mut class = class_id;
        while let Some((super_id, fields)) = layouts.get(&class) {
            for (name, basic_type) in fields {
                let width = basic_type.size(id_size) as usize;
                let bytes = &values[at..at + width];
                if *basic_type != BasicType::Object {
                    row.push(format!("{name}={bytes:?}"));
                }
                at += width;
            }
            class = *super_id;
        }
        assert_eq!(at, values.len(), "{class_name}: field bytes");
        row.sort();
        rows.push(row.join(" "));
    }
    rows.sort();
    (rows, statics)
}

#[test]
fn binary_dump_agrees_with_the_jdks_on_counts_and_every_field_value() {
    // Without class data sharing: the JDK's dump also holds the objects of the CDS archive
    // that nothing references (they are never collected), which no walk from the roots finds.
    let (dir, jdk_dump, stderr) =
        run_with_jdk_dump("heap=dump,format=b,file=ours.hprof", "-Xshare:off");
    assert!(
        stderr.contains("Dumping Java heap ... done (the JVM's dumper"),
        "{stderr}"
    );
    agrees_with_the_jdks_dump(&dir.join("ours.hprof"), &jdk_dump, &stderr, false);
}

#[test]
fn the_walks_binary_dump_agrees_with_the_jdks_on_counts_and_every_field_value() {
    // Without jdk.management HotSpot's dumper can't be reached: the agent walks the heap
    // itself (as it does for text and to a collector), telling objects apart by address.
    the_walk_agrees_with_the_jdks_dump(&[], "addresses");
}

#[test]
fn the_walk_by_tags_agrees_with_the_jdks_on_counts_and_every_field_value() {
    // JVMTI's own way, where the probe finds HotSpot's callbacks otherwise laid out.
    the_walk_agrees_with_the_jdks_dump(
        &[("OPENPROF_HEAP_WALK", "tags")],
        "tags (OPENPROF_HEAP_WALK=tags)",
    );
}

/// The agent's walk (`env` for the JVM) tells objects apart by `identity`, and its dump
/// agrees with the JDK's.
fn the_walk_agrees_with_the_jdks_dump(env: &[(&str, &str)], identity: &str) {
    let (dir, jdk_dump, stderr) = run_with_jdk_dump_in(
        "heap=dump,format=b,file=ours.hprof",
        "-Xshare:off --limit-modules=java.base,java.management",
        env,
    );
    assert!(
        stderr.contains("openprof: heap dump by the agent's own walk"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("heap walk, objects told apart by {identity}:")),
        "{stderr}"
    );
    let ours_path = dir.join("ours.hprof");
    agrees_with_the_jdks_dump(&ours_path, &jdk_dump, &stderr, true);
    // Every array element and every root points at an object of the dump (or a class), in a
    // reader we did not write too; the primitive types' classes (int.class) are instances of
    // java.lang.Class, as in the JDK's dump.
    assert_eq!(
        instances(&histogram_of_binary(&ours_path), "java.lang.Class"),
        instances(&histogram_of_binary(&jdk_dump), "java.lang.Class"),
        "primitive types' classes"
    );
    let bytes = std::fs::read(&ours_path).unwrap();
    let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof reads the header");
    let mut objects = std::collections::HashSet::new();
    let mut references = Vec::new();
    let mut roots = Vec::new();
    for record in hprof.records_iter() {
        let record = record.expect("jvm-hprof reads every record");
        if let Some(load) = record.as_load_class() {
            objects.insert(load.unwrap().class_obj_id().id());
        }
        let Some(segment) = record.as_heap_dump_segment() else {
            continue;
        };
        for sub in segment.unwrap().sub_records() {
            match sub.expect("jvm-hprof reads every sub-record") {
                jvm_hprof::heap_dump::SubRecord::Instance(instance) => {
                    objects.insert(instance.obj_id().id());
                }
                jvm_hprof::heap_dump::SubRecord::GcRootSystemClass(root) => {
                    roots.push(root.obj_id().id());
                }
                jvm_hprof::heap_dump::SubRecord::GcRootJniGlobal(root) => {
                    roots.push(root.obj_id().id());
                }
                jvm_hprof::heap_dump::SubRecord::GcRootThreadObj(root) => {
                    roots.extend(root.thread_obj_id().map(|id| id.id()));
                }
                jvm_hprof::heap_dump::SubRecord::ObjectArray(array) => {
                    objects.insert(array.obj_id().id());
                    for element in array.elements(jvm_hprof::IdSize::U64) {
                        if let Some(id) = element.unwrap() {
                            references.push(id.id());
                        }
                    }
                }
                jvm_hprof::heap_dump::SubRecord::PrimitiveArray(array) => {
                    objects.insert(array.obj_id().id());
                }
                _ => {}
            }
        }
    }
    assert!(references.len() > SHAPES, "{}", references.len());
    let dangling: Vec<&u64> = references
        .iter()
        .filter(|id| !objects.contains(id))
        .collect();
    assert!(
        dangling.is_empty(),
        "{} dangling of {}",
        dangling.len(),
        references.len()
    );
    assert!(roots.len() > 100, "{}", roots.len());
    let dangling_roots: Vec<&u64> = roots.iter().filter(|id| !objects.contains(id)).collect();
    assert!(
        dangling_roots.is_empty(),
        "roots of no object: {dangling_roots:x?}"
    );
}

/// Our dump at `ours_path` agrees with the JDK's: ground truth counts, the whole histogram,
/// every field value of the workload's objects. `walked`: ours is the agent's JVMTI walk.
fn agrees_with_the_jdks_dump(ours_path: &Path, jdk_dump: &Path, stderr: &str, walked: bool) {
    assert!(!stderr.contains("did not fit"), "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    let ours = histogram_of_binary(ours_path);
    let theirs = histogram_of_binary(jdk_dump);

    // Exact ground truth.
    for histogram in [&ours, &theirs] {
        assert_eq!(instances(histogram, SHAPE), SHAPES as u64);
        assert_eq!(instances(histogram, BASE), BASES as u64);
        assert_eq!(instances(histogram, "HeapShapes$Shape[]"), 1);
        assert_eq!(instances(histogram, "HeapShapes$Base[]"), 1);
        assert_eq!(instances(histogram, "long[][]"), 1);
        assert_eq!(instances(histogram, "short[][][]"), 1);
        assert_eq!(instances(histogram, "short[][]"), 3);
        assert!(instances(histogram, "long[]") >= 100);
    }
    // The whole histograms agree, up to what the JVM itself did between the two dumps (jcmd's
    // attach listener, shutdown): every class within 2 % or 20 objects.
    // HotSpot fills the gaps G1 leaves with int[] filler objects, and its dumper writes the
    // empty ones with the real objects (ours is HotSpot's dumper too, reached in-process); they
    // are not program objects, so they are not counted.
    let theirs_fillers = empty_int_arrays(jdk_dump);
    let ours_fillers = empty_int_arrays(ours_path);
    let mut differences = Vec::new();
    for (class, count) in theirs.sorted() {
        let mut other = instances(&ours, class);
        let mut count = count;
        if class == "int[]" {
            count.instances -= theirs_fillers;
            other -= ours_fillers;
        }
        let mut allowed = (count.instances / 50).max(20);
        // JVMTI reports no java.lang.Class object's own fields, so the names Class.getName()
        // cached there are not in its walk (nor, as HotSpot's dumper, the VM's hidden threads'
        // names): a few dozen more strings when the module graph is built at start-up.
        if walked && (class == "java.lang.String" || class == "byte[]") {
            allowed = (count.instances / 20).max(20);
        }
        if count.instances.abs_diff(other) > allowed {
            differences.push(format!("{class}: jcmd {} ours {other}", count.instances));
        }
    }
    for (class, count) in ours.sorted() {
        if theirs.get(class).is_none() && count.instances > 20 {
            differences.push(format!("{class}: only ours, {}", count.instances));
        }
    }
    assert!(differences.is_empty(), "{differences:#?}");

    // Every field value of every kept object, and the statics, as the JDK wrote them.
    for class in [SHAPE, BASE] {
        let (ours_rows, ours_statics) = field_rows(ours_path, class);
        let (jdk_rows, jdk_statics) = field_rows(jdk_dump, class);
        assert_eq!(ours_rows.len(), jdk_rows.len(), "{class}");
        assert_eq!(ours_rows, jdk_rows, "{class}: field values differ");
        assert_eq!(ours_statics, jdk_statics, "{class}: statics differ");
    }
    let (shape_rows, shape_statics) = field_rows(ours_path, SHAPE);
    assert!(shape_rows[0].contains("sides="), "{}", shape_rows[0]);
    assert_eq!(
        shape_statics["count"],
        format!("{:?}", (SHAPES as i32).to_be_bytes())
    );
}

#[test]
fn a_reader_we_did_not_write_counts_our_objects() {
    let (dir, _, _) = run_with_jdk_dump("heap=dump,format=b,file=ours.hprof", "");
    let bytes = std::fs::read(dir.join("ours.hprof")).unwrap();
    let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof reads the header");
    let mut utf8: HashMap<u64, String> = HashMap::new();
    let mut class_names: HashMap<u64, u64> = HashMap::new();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut long_arrays_of_333 = 0;
    let mut long_sum = 0i64;
    for record in hprof.records_iter() {
        let record = record.expect("jvm-hprof reads every record");
        if let Some(text) = record.as_utf_8() {
            let text = text.unwrap();
            utf8.insert(
                text.name_id().id(),
                String::from_utf8_lossy(text.text()).into_owned(),
            );
        }
        if let Some(load) = record.as_load_class() {
            let load = load.unwrap();
            class_names.insert(load.class_obj_id().id(), load.class_name_id().id());
        }
        if let Some(segment) = record.as_heap_dump_segment() {
            for sub in segment.unwrap().sub_records() {
                match sub.expect("jvm-hprof reads every sub-record") {
                    jvm_hprof::heap_dump::SubRecord::Instance(instance) => {
                        *counts.entry(instance.class_obj_id().id()).or_default() += 1
                    }
                    jvm_hprof::heap_dump::SubRecord::PrimitiveArray(array) => {
                        if let Some(longs) = array.longs() {
                            let values: Vec<i64> = longs.map(|value| value.unwrap()).collect();
                            if values.len() == 333 {
                                long_arrays_of_333 += 1;
                                long_sum += values.iter().sum::<i64>();
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let count_of = |name: &str| {
        class_names
            .iter()
            .filter(|(_, name_id)| utf8.get(name_id).map(String::as_str) == Some(name))
            .map(|(class_id, _)| counts.get(class_id).copied().unwrap_or(0))
            .sum::<u64>()
    };
    assert_eq!(count_of(SHAPE), SHAPES as u64);
    assert_eq!(count_of(BASE), BASES as u64);
    assert_eq!(long_arrays_of_333, 100);
    // longs[i][i] = i: the values came through in the right byte order.
    assert_eq!(long_sum, (0..100).sum::<i64>());
}

#[test]
fn ascii_dump_has_hprofs_layout_and_the_same_counts() {
    let (dir, jdk_dump, stderr) = run_with_jdk_dump("heap=dump,file=ours.txt", "");
    assert!(stderr.contains("Dumping Java heap ... done"), "{stderr}");
    let text = std::fs::read(dir.join("ours.txt")).unwrap();
    let profile = hprof_text::read(text.as_slice()).expect("our reader reads the ASCII dump");
    let ours = profile.heap_dumps.last().expect("HEAP DUMP");
    let theirs = histogram_of_binary(&jdk_dump);
    for class in [
        SHAPE,
        BASE,
        "HeapShapes$Shape[]",
        "short[][][]",
        "short[][]",
    ] {
        assert_eq!(instances(ours, class), instances(&theirs, class), "{class}");
    }
    assert_eq!(
        ours.announced.map(|count| count.instances),
        Some(ours.total().instances),
        "the header's object count is the dump's"
    );
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("HEAP DUMP BEGIN ("), "header");
    assert!(text.contains("\nHEAP DUMP END\n"), "footer");
    // A kept Shape: its class line, and its reference field `next` listed.
    let shape_line = text
        .lines()
        .find(|line| line.starts_with("OBJ ") && line.contains("class=HeapShapes$Shape@"))
        .expect("an OBJ line for a Shape");
    assert!(shape_line.contains("(sz="), "{shape_line}");
    assert!(text.contains("\tnext\t"), "reference fields are listed");
    assert!(text.contains("elem type=char[])"), "the char[12345]");
    assert!(text.contains("nelems=12345"), "its length");
    assert!(text.contains("(kind=<thread>"), "thread roots");
}

#[test]
fn sigquit_writes_a_heap_dump_while_running() {
    // CPU samples too: the output holds our records before, between and after the JVM
    // dumper's dumps, and everything reads back in order.
    let (mut command, dir) = java_command(
        Some("heap=dump,cpu=samples,format=b,file=ours.hprof"),
        "HeapShapes",
        &["500", "10"],
    );
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    wait_until_ready(&mut child);
    let path = dir.join("ours.hprof");
    for dumps in 1..=2 {
        openprof_testkit::send_signal(child.id(), libc::SIGQUIT);
        // A dump is complete once the file reads whole with its HEAP DUMP END (the JVM's
        // dumper writes the first aside, then it is moved into place).
        openprof_testkit::wait_for(
            &format!("dump {dumps} was written after SIGQUIT"),
            Duration::from_secs(60),
            || openprof_testkit::complete_heap_dumps(&path) >= dumps,
        );
    }
    drop(child.stdin.take());
    let output = wait_with_limit(child, Duration::from_secs(60));
    assert!(output.status.success());
    let file = std::fs::File::open(&path).unwrap();
    let profile = read_profile(BufReader::new(file), &mut |_| {}).unwrap();
    assert_eq!(profile.heap_dumps.len(), 3, "two on SIGQUIT, one at exit");
    for histogram in &profile.heap_dumps {
        assert_eq!(instances(histogram, SHAPE), 500);
        assert_eq!(instances(histogram, BASE), 10);
    }
    assert_eq!(profile.cpu_tables.len(), 3, "CPU SAMPLES with each dump");
    let bytes = std::fs::read(&path).unwrap();
    let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof reads the header");
    for record in hprof.records_iter() {
        record.expect("jvm-hprof reads every record");
    }
}

fn empty_int_arrays(path: &Path) -> u64 {
    let reader = HprofReader::new(BufReader::new(std::fs::File::open(path).unwrap())).unwrap();
    let mut empty = 0;
    for item in reader {
        if let Item::Sub(SubRecord::PrimitiveArrayDump {
            element_type: BasicType::Int,
            length: 0,
            ..
        }) = item.unwrap()
        {
            empty += 1;
        }
    }
    empty
}
