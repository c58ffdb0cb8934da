//! Our HPROF binary reader on the JDK's own heap dump (jcmd GC.heap_dump) of a workload that
//! keeps a known number of its own objects.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::process::{Command, Stdio};

use openprof_format::hprof_binary::{BasicType, HprofReader, Item, Record, SubRecord};
use openprof_testkit::{jcmd, runtime, wait_until_ready, workload_classes};

const NODES: usize = 5000;

#[test]
fn the_jdks_heap_dump_reads_back_with_the_workloads_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(runtime().java().unwrap())
        .arg("-cp")
        .arg(workload_classes())
        .args(["Keep", &NODES.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_ready(&mut child);
    let dump = dir.path().join("keep.hprof");
    jcmd(child.id(), &["GC.heap_dump", dump.to_str().unwrap()]);
    drop(child.stdin.take().map(|mut stdin| stdin.flush()));
    assert!(child.wait().unwrap().success());

    let file = std::fs::File::open(&dump).unwrap();
    let reader = HprofReader::new(BufReader::new(file)).unwrap();
    assert_eq!(reader.header().id_size, 8);
    let mut strings: HashMap<u64, String> = HashMap::new();
    let mut class_names: HashMap<u64, String> = HashMap::new();
    let mut instances: HashMap<u64, usize> = HashMap::new();
    let mut int_arrays_of_10 = 0;
    let mut node_arrays = Vec::new();
    let mut ended = false;
    for item in reader {
        match item.expect("the JDK's dump reads without error") {
            Item::Record(Record::Utf8 { id, text }) => {
                strings.insert(id, String::from_utf8_lossy(&text).into_owned());
            }
            Item::Record(Record::LoadClass {
                class_id, name_id, ..
            }) => {
                class_names.insert(class_id, strings.get(&name_id).cloned().unwrap_or_default());
            }
            Item::Sub(SubRecord::InstanceDump { class_id, .. }) => {
                *instances.entry(class_id).or_default() += 1
            }
            Item::Sub(SubRecord::PrimitiveArrayDump {
                element_type: BasicType::Int,
                length: 10,
                ..
            }) => int_arrays_of_10 += 1,
            Item::Sub(SubRecord::ObjectArrayDump {
                class_id, elements, ..
            }) => node_arrays.push((class_id, elements.len())),
            Item::HeapDumpEnd => ended = true,
            _ => {}
        }
    }
    assert!(ended, "HEAP DUMP END");
    let node_class = class_names
        .iter()
        .find(|(_, name)| name.as_str() == "Keep$Node")
        .map(|(id, _)| *id)
        .expect("LOAD CLASS Keep$Node");
    assert_eq!(
        instances.get(&node_class).copied(),
        Some(NODES),
        "instances of Keep$Node"
    );
    assert!(int_arrays_of_10 >= NODES, "{int_arrays_of_10} int[10]");
    let array_class = class_names
        .iter()
        .find(|(_, name)| name.as_str() == "[LKeep$Node;")
        .map(|(id, _)| *id)
        .expect("LOAD CLASS Keep$Node[]");
    assert_eq!(
        node_arrays
            .iter()
            .filter(|(class, len)| *class == array_class && *len == NODES)
            .count(),
        1
    );
}
