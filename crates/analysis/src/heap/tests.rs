//! The analyses on small dumps written here, whose every size is known by construction: retained
//! sizes and dominators, MAT's class retained size against the dominator lower bound, suspects
//! and accumulation points, named paths with and without weak references, unreachable objects,
//! dumps cut at every byte.

use std::path::Path;

use openprof_format::heap::{estimate, RootKind};
use openprof_format::hprof_binary::{
    read_profile, BasicType, ClassDump, HprofWriter, Record, SubRecord, Value,
};

use super::*;

const OBJECT: u64 = 0x100;
const HOLDER: u64 = 0x110;
const NODE: u64 = 0x120;
const REFERENCE: u64 = 0x130;
const WEAK: u64 = 0x140;
const NODE_ARRAY: u64 = 0x150;
const OTHER_HOLDER: u64 = 0x160;

// Objects.
const LIST: u64 = 0x1000;
const N1: u64 = 0x1010;
const N2: u64 = 0x1020;
const N3: u64 = 0x1030;
const P1: u64 = 0x1110;
const P2: u64 = 0x1120;
const SHARED: u64 = 0x1200;
const WEAK_REF: u64 = 0x1300;
const X: u64 = 0x1400;
const T: u64 = 0x1500;
const LOST: u64 = 0x1600;
const LOST_PAYLOAD: u64 = 0x1610;

/// Strings: ids 1.. in this order.
const STRINGS: &[&str] = &[
    "java/lang/Object",
    "Holder",
    "Node",
    "java/lang/ref/Reference",
    "java/lang/ref/WeakReference",
    "[LNode;",
    "OtherHolder",
    "next",
    "payload",
    "weight",
    "referent",
    "INSTANCE",
    "KEEP",
    "queue",
];

fn string_id(text: &str) -> u64 {
    STRINGS.iter().position(|s| *s == text).unwrap() as u64 + 1
}

fn id_bytes(id: u64, id_size: u32) -> Vec<u8> {
    if id_size == 8 {
        id.to_be_bytes().to_vec()
    } else {
        (id as u32).to_be_bytes().to_vec()
    }
}

fn reference(id: u64, id_size: u32) -> Value {
    Value {
        basic_type: BasicType::Object,
        bytes: id_bytes(id, id_size),
    }
}

fn class_dump(
    class_id: u64,
    super_id: u64,
    statics: Vec<(&str, u64)>,
    fields: Vec<(&str, BasicType)>,
    id_size: u32,
) -> SubRecord {
    SubRecord::ClassDump(Box::new(ClassDump {
        class_id,
        stack_serial: 0,
        super_id,
        loader_id: 0,
        signers_id: 0,
        protection_domain_id: 0,
        instance_size: fields.iter().map(|(_, t)| t.size(id_size)).sum(),
        constant_pool: Vec::new(),
        static_fields: statics
            .into_iter()
            .map(|(name, id)| (string_id(name), reference(id, id_size)))
            .collect(),
        instance_fields: fields
            .into_iter()
            .map(|(name, t)| (string_id(name), t))
            .collect(),
    }))
}

/// A Node's values: next, payload (references), weight (int).
fn node(id: u64, next: u64, payload: u64, id_size: u32) -> SubRecord {
    let mut values = id_bytes(next, id_size);
    values.extend(id_bytes(payload, id_size));
    values.extend(7u32.to_be_bytes());
    SubRecord::InstanceDump {
        id,
        stack_serial: 0,
        class_id: NODE,
        values,
    }
}

fn bytes_array(id: u64, length: u32) -> SubRecord {
    SubRecord::PrimitiveArrayDump {
        id,
        stack_serial: 0,
        element_type: BasicType::Byte,
        length,
        bytes: vec![0; length as usize],
    }
}

/// The test heap:
///
/// - class Holder's static INSTANCE is LIST, a Node[3] of N1, N2, N3;
/// - N1 -> next N2, payload P1 (byte[100]); N2 -> payload P2 (byte[50]), next SHARED;
///   N3 -> payload SHARED (byte[200]);
/// - WEAK_REF (a WeakReference, a JNI global root) has referent T; class OtherHolder's static
///   KEEP is X, a Node whose next is T (T is a Node with no references);
/// - LOST (a Node with payload LOST_PAYLOAD, byte[10]) is reached by nothing.
///
/// With `classes_last`, the CLASS DUMPs come after the instances.
fn dump(id_size: u32, classes_last: bool, segment_limit: usize) -> Vec<u8> {
    let mut writer = HprofWriter::new(Vec::new(), id_size, 1_795_318_001_000)
        .unwrap()
        .with_segment_limit(segment_limit);
    for (index, text) in STRINGS.iter().enumerate() {
        writer
            .record(&Record::Utf8 {
                id: index as u64 + 1,
                text: text.as_bytes().to_vec(),
            })
            .unwrap();
    }
    for (serial, (class_id, name)) in [
        (OBJECT, "java/lang/Object"),
        (HOLDER, "Holder"),
        (NODE, "Node"),
        (REFERENCE, "java/lang/ref/Reference"),
        (WEAK, "java/lang/ref/WeakReference"),
        (NODE_ARRAY, "[LNode;"),
        (OTHER_HOLDER, "OtherHolder"),
    ]
    .into_iter()
    .enumerate()
    {
        writer
            .record(&Record::LoadClass {
                class_serial: serial as u32 + 1,
                class_id,
                stack_serial: 0,
                name_id: string_id(name),
            })
            .unwrap();
    }
    let classes = vec![
        class_dump(OBJECT, 0, vec![], vec![], id_size),
        class_dump(HOLDER, OBJECT, vec![("INSTANCE", LIST)], vec![], id_size),
        class_dump(
            NODE,
            OBJECT,
            vec![],
            vec![
                ("next", BasicType::Object),
                ("payload", BasicType::Object),
                ("weight", BasicType::Int),
            ],
            id_size,
        ),
        class_dump(
            REFERENCE,
            OBJECT,
            vec![],
            vec![
                ("referent", BasicType::Object),
                ("queue", BasicType::Object),
            ],
            id_size,
        ),
        class_dump(WEAK, REFERENCE, vec![], vec![], id_size),
        class_dump(NODE_ARRAY, OBJECT, vec![], vec![], id_size),
        class_dump(OTHER_HOLDER, OBJECT, vec![("KEEP", X)], vec![], id_size),
    ];
    let mut weak_values = id_bytes(T, id_size);
    weak_values.extend(id_bytes(0, id_size));
    let objects = vec![
        SubRecord::ObjectArrayDump {
            id: LIST,
            stack_serial: 0,
            class_id: NODE_ARRAY,
            elements: vec![N1, N2, N3],
        },
        node(N1, N2, P1, id_size),
        node(N2, SHARED, P2, id_size),
        node(N3, 0, SHARED, id_size),
        bytes_array(P1, 100),
        bytes_array(P2, 50),
        bytes_array(SHARED, 200),
        SubRecord::InstanceDump {
            id: WEAK_REF,
            stack_serial: 0,
            class_id: WEAK,
            values: weak_values,
        },
        node(X, T, 0, id_size),
        node(T, 0, 0, id_size),
        node(LOST, 0, LOST_PAYLOAD, id_size),
        bytes_array(LOST_PAYLOAD, 10),
    ];
    let mut subs = Vec::new();
    for class_id in [
        OBJECT,
        HOLDER,
        NODE,
        REFERENCE,
        WEAK,
        NODE_ARRAY,
        OTHER_HOLDER,
    ] {
        subs.push(SubRecord::RootStickyClass { id: class_id });
    }
    subs.push(SubRecord::RootJniGlobal {
        id: WEAK_REF,
        global_ref_id: 1,
    });
    if classes_last {
        subs.extend(objects);
        subs.extend(classes);
    } else {
        subs.extend(classes);
        subs.extend(objects);
    }
    for sub in &subs {
        writer.sub_record(sub).unwrap();
    }
    writer.finish().unwrap()
}

fn graph_of(bytes: &[u8]) -> Result<HeapGraph, GraphError> {
    HeapGraph::read_from(
        bytes,
        Path::new("test.hprof"),
        &GraphOptions::default(),
        &mut |_| {},
    )
}

/// The dump written to a file (paths read objects again from it), and its analysis; the file
/// lasts as long as the returned path.
fn analysis_of(bytes: &[u8]) -> (HeapAnalysis, tempfile::TempPath) {
    let path = file_of(bytes);
    let graph = HeapGraph::read(&path, &GraphOptions::default(), &mut |_| {}).expect("reads");
    (HeapAnalysis::new(graph, &mut |_| {}).unwrap(), path)
}

fn file_of(bytes: &[u8]) -> tempfile::TempPath {
    let mut file = tempfile::Builder::new()
        .suffix(".hprof")
        .tempfile()
        .unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    file.into_temp_path()
}

/// Shallow sizes by construction (compressed oops: 12-byte header, 4-byte references).
fn node_bytes() -> u64 {
    estimate::instance(4, 2) // weight; next, payload
}
fn byte_array(length: u64) -> u64 {
    estimate::array(length, 1)
}

fn retained(analysis: &HeapAnalysis, id: u64) -> u64 {
    let node = analysis.graph.node(id).expect("in the dump");
    analysis.retained(node).expect("reachable")
}

fn idom(analysis: &HeapAnalysis, id: u64) -> Option<u64> {
    let node = analysis.graph.node(id).expect("in the dump");
    analysis
        .idom(node)
        .expect("reachable")
        .map(|dominator| analysis.graph.id(dominator))
}

#[test]
fn retained_sizes_and_dominators_are_exact() {
    for id_size in [4, 8] {
        for classes_last in [false, true] {
            let (analysis, _file) = analysis_of(&dump(id_size, classes_last, 64));
            let (node, array) = (node_bytes(), estimate::array(3, 4));
            assert_eq!(node, 24);
            assert_eq!(retained(&analysis, P1), byte_array(100));
            assert_eq!(retained(&analysis, N3), node, "SHARED is not N3's alone");
            assert_eq!(retained(&analysis, N2), node + byte_array(50));
            assert_eq!(retained(&analysis, N1), node + byte_array(100));
            assert_eq!(
                retained(&analysis, LIST),
                array + 3 * node + byte_array(100) + byte_array(50) + byte_array(200)
            );
            assert_eq!(idom(&analysis, SHARED), Some(LIST));
            assert_eq!(idom(&analysis, N2), Some(LIST), "from LIST[1] and N1.next");
            assert_eq!(idom(&analysis, LIST), Some(HOLDER));
            assert_eq!(idom(&analysis, HOLDER), None, "a root");
            // T is reached from the weak reference and from X.
            assert_eq!(idom(&analysis, T), None);
            assert_eq!(retained(&analysis, X), node);
            let lost = analysis.graph.node(LOST).unwrap();
            assert_eq!(analysis.retained(lost), None);
            // Every reachable object's bytes, once.
            let reachable: u64 = (0..analysis.graph.node_count() as u32)
                .filter(|&n| analysis.retained(n).is_some())
                .map(|n| analysis.graph.shallow(n))
                .sum();
            assert_eq!(analysis.reachable_bytes(), reachable);
        }
    }
}

#[test]
fn class_retained_size_is_mats_and_the_dominated_sum_its_lower_bound() {
    let (analysis, _file) = analysis_of(&dump(8, false, 1 << 20));
    // Every Node is an instance: N1, N2, N3, X, T (LOST is unreachable).
    let nodes = 5 * node_bytes();
    // Freed with every Node gone: the Nodes, P1, P2 and SHARED (reached only through Nodes).
    let expected = nodes + byte_array(100) + byte_array(50) + byte_array(200);
    assert_eq!(analysis.retained_by_class("Node"), expected);
    let histogram = analysis.retained_histogram(50);
    let row = histogram.iter().find(|row| row.class == "Node").unwrap();
    assert_eq!(row.retained, Some(expected));
    // The dominator tree's sum misses SHARED, which no one Node dominates.
    assert_eq!(row.dominated, expected - byte_array(200));
    assert_eq!(row.objects, 5);
    assert_eq!(row.shallow, nodes);
    // A set of one object retains what that object does.
    let n1 = analysis.graph.node(N1).unwrap();
    assert_eq!(
        analysis.retained_by_set(&|node| node == n1),
        retained(&analysis, N1)
    );
}

#[test]
fn suspects_and_their_accumulation_points() {
    let (analysis, _file) = analysis_of(&dump(8, false, 1 << 20));
    let suspects = analysis.suspects(0.10, 0.80);
    let holder_class = analysis.graph.node(HOLDER).unwrap();
    let first = &suspects[0];
    assert_eq!(first.what, SuspectKind::Object(holder_class));
    assert_eq!(first.retained, retained(&analysis, HOLDER));
    // class Holder -> LIST (all of it), then no Node holds 80% of LIST.
    let list = analysis.graph.node(LIST).unwrap();
    assert_eq!(first.accumulation, vec![holder_class, list]);
    // With a lower bar the descent goes on while one child holds that much.
    let path = analysis.accumulation_path(holder_class, 0.0);
    assert_eq!(path.len(), 3, "then into the largest child, which has none");
    assert!(suspects
        .iter()
        .all(|suspect| suspect.share >= 0.10 && suspect.retained >= first.retained / 100));
}

#[test]
fn paths_name_fields_elements_statics_and_roots() {
    let bytes = dump(8, false, 1 << 20);
    let (analysis, _file) = analysis_of(&bytes);
    let graph = &analysis.graph;
    let path = graph
        .path_to_roots(graph.node(SHARED).unwrap(), false)
        .unwrap()
        .unwrap();
    let steps: Vec<(u64, Option<&str>)> = path
        .steps
        .iter()
        .map(|step| (graph.id(step.node), step.via.as_deref()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (HOLDER, Some("static INSTANCE")),
            (LIST, Some("[1]")),
            (N2, Some("next")),
            (SHARED, None)
        ],
        "the shortest: through LIST[1], not N1"
    );
    assert_eq!(path.root_kinds, vec![RootKind::SystemClass]);
    // T: one step from the weak reference, or through OtherHolder.KEEP when weak ones are out.
    let t = graph.node(T).unwrap();
    let weak = graph.path_to_roots(t, false).unwrap().unwrap();
    assert_eq!(weak.steps.len(), 2);
    assert_eq!(weak.steps[0].via.as_deref(), Some("referent"));
    assert_eq!(weak.root_kinds, vec![RootKind::JniGlobal]);
    let strong = graph.path_to_roots(t, true).unwrap().unwrap();
    let strong: Vec<(u64, Option<&str>)> = strong
        .steps
        .iter()
        .map(|step| (graph.id(step.node), step.via.as_deref()))
        .collect();
    assert_eq!(
        strong,
        vec![
            (OTHER_HOLDER, Some("static KEEP")),
            (X, Some("next")),
            (T, None)
        ]
    );
    assert_eq!(
        graph
            .path_to_roots(graph.node(LOST).unwrap(), false)
            .unwrap(),
        None
    );
    // A class names its instance retaining most: N1, with P1 (byte[100]).
    assert_eq!(
        analysis.resolve(&Target::Class("Node".into())),
        Ok(graph.node(N1).unwrap())
    );
    assert_eq!(Target::parse("0x1010"), Target::Object(N1));
    assert_eq!(Target::parse("Node"), Target::Class("Node".into()));
}

#[test]
fn unreachable_objects_apart_and_the_histogram_as_the_format_counts_it() {
    let bytes = dump(8, false, 1 << 20);
    let (analysis, _file) = analysis_of(&bytes);
    let unreachable = analysis.class_rows(false);
    let row = |rows: &[ClassRow], class: &str| {
        rows.iter()
            .find(|row| row.class == class)
            .map(|row| (row.objects, row.shallow))
    };
    assert_eq!(row(&unreachable, "Node"), Some((1, node_bytes())));
    assert_eq!(row(&unreachable, "byte[]"), Some((1, byte_array(10))));
    assert_eq!(unreachable.len(), 2);
    // Reachable and unreachable together are the histogram `openprof report` prints.
    let profile = read_profile(bytes.as_slice(), &mut |_| {}).unwrap();
    let histogram = &profile.heap_dumps[0];
    let mut ours = analysis.class_rows(true);
    ours.extend(unreachable);
    let changes = histogram::diff(&ours, histogram);
    assert!(changes
        .iter()
        .all(|row| row.objects_change == 0 && row.shallow_change == 0));
    assert_eq!(
        changes.iter().map(|row| row.objects).sum::<u64>(),
        histogram.total().instances
    );
    let report = analysis
        .report(
            &ReportOptions::default(),
            Some(("same", histogram)),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(report.unreachable.objects, 2);
    assert!(report
        .diff
        .unwrap()
        .rows
        .iter()
        .all(|row| row.shallow_change == 0));
}

#[test]
fn a_diff_shows_each_classs_change() {
    let (analysis, _file) = analysis_of(&dump(8, false, 1 << 20));
    let mut other = openprof_format::heap::HeapHistogram::default();
    other.add_objects("Node", 2, 2 * node_bytes());
    other.add_objects("Gone", 1, 16);
    let rows = histogram::diff(&analysis.class_rows(true), &other);
    let node = rows.iter().find(|row| row.class == "Node").unwrap();
    assert_eq!(
        (node.objects, node.other_objects, node.objects_change),
        (5, 2, 3)
    );
    assert_eq!(node.shallow_change, 3 * node_bytes() as i64);
    let gone = rows.iter().find(|row| row.class == "Gone").unwrap();
    assert_eq!(
        (gone.objects, gone.objects_change, gone.shallow_change),
        (0, -1, -16)
    );
}

#[test]
fn a_dump_cut_at_any_byte_is_an_error_at_an_offset_never_a_panic() {
    let bytes = dump(8, false, 64);
    for cut in 0..bytes.len() {
        match graph_of(&bytes[..cut]) {
            Err(GraphError::Hprof(openprof_format::hprof_binary::HprofError::Malformed {
                offset,
                ..
            })) => assert!(offset <= cut as u64, "cut {cut}: offset {offset}"),
            Err(other) => panic!("cut {cut}: {other}"),
            Ok(_) => panic!("cut {cut}: a dump cut short was read whole"),
        }
    }
    // Corrupt bytes: errors or graphs, never panics.
    for position in (0..bytes.len()).step_by(3) {
        let mut corrupt = bytes.clone();
        corrupt[position] ^= 0xA5;
        if let Ok(graph) = graph_of(&corrupt) {
            let _ = HeapAnalysis::new(graph, &mut |_| {}).unwrap();
        }
    }
}

#[test]
fn spilled_references_and_parked_columns_give_the_same_analysis() {
    let bytes = dump(8, false, 1 << 20);
    let (whole, file) = analysis_of(&bytes);
    let options = GraphOptions {
        memory_limit: Some(0),
        spill_dir: None,
    };
    let spilled = HeapAnalysis::new(
        HeapGraph::read(&file, &options, &mut |_| {}).unwrap(),
        &mut |_| {},
    )
    .unwrap();
    for id in [LIST, N1, N2, N3, SHARED, X, T] {
        assert_eq!(retained(&whole, id), retained(&spilled, id));
    }
    // The columns parked during the dominator computation are back, whole.
    assert_eq!(spilled.graph.node_count(), whole.graph.node_count());
    assert_eq!(
        spilled.retained_by_class("Node"),
        whole.retained_by_class("Node")
    );
    let n2 = spilled.graph.node(N2).unwrap();
    let path = spilled.graph.path_to_roots(n2, false).unwrap().unwrap();
    assert_eq!(path.steps[1].via.as_deref(), Some("[1]"));
}

#[test]
fn a_later_dump_in_the_file_replaces_the_earlier() {
    let first = dump(8, false, 1 << 20);
    let mut writer = HprofWriter::new(Vec::new(), 8, 0).unwrap();
    writer
        .sub_record(&SubRecord::RootUnknown { id: 0x9000 })
        .unwrap();
    writer.sub_record(&bytes_array(0x9000, 8)).unwrap();
    let second = writer.finish().unwrap();
    // The second file's header dropped, its records appended.
    let mut both = first.clone();
    both.extend_from_slice(&second[31..]);
    let graph = graph_of(&both).unwrap();
    assert_eq!(graph.node_count(), 1);
    assert_eq!(graph.shallow(0), byte_array(8));
}

#[test]
fn the_html_page_holds_the_report_and_nothing_closes_its_script() {
    let (analysis, _file) = analysis_of(&dump(8, false, 1 << 20));
    let options = ReportOptions {
        tree_nodes: 100,
        all_classes: true,
        path: Some(Target::Class("Node".into())),
        ..ReportOptions::default()
    };
    let mut report = analysis.report(&options, None, &mut |_| {}).unwrap();
    assert!(!report.tree.is_empty());
    assert_eq!(report.tree[0].parent, -1);
    // The page's full histogram carries the exact figures of the top rows.
    let node = report
        .classes
        .iter()
        .find(|row| row.class == "Node")
        .unwrap();
    assert_eq!(node.retained, Some(analysis.retained_by_class("Node")));
    report.file = "</script><b>".into();
    let mut page = Vec::new();
    html::write(&report, &mut page).unwrap();
    let page = String::from_utf8(page).unwrap();
    assert!(!page.contains("</script><b>"));
    assert!(page.contains("&lt;/script&gt;&lt;b&gt;"));
    let start = page.find("id=\"openprof-data\">").unwrap() + "id=\"openprof-data\">".len();
    let end = page[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&page[start..start + end]).unwrap();
    assert_eq!(data["suspects"][0]["kind"], "object");
    assert!(data["classes"].as_array().unwrap().len() >= 3);
}
