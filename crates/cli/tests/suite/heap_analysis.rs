//! `openprof heap` on real dumps of RetainedShapes, whose retained sizes are known by
//! construction: the JDK's dump (`jcmd GC.heap_dump`) and openprof's (heap=dump,format=b, on
//! SIGQUIT) of the same JVM give the same retained sizes, dominators, leak suspect and paths,
//! each equal to what the dump's own records say the shapes hold; VisualVM's heap library (a
//! reader we did not write) computes the same retained sizes; cut dumps are errors at a byte
//! offset.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use openprof_analysis::heap::{GraphOptions, HeapAnalysis, HeapGraph};
use openprof_format::hprof_binary::{BasicType, HprofReader, Item, Record, SubRecord};
use openprof_testkit::{
    java_command_with, jcmd, jdk, kept_temp_dir, send_signal, wait_until_ready, wait_with_limit,
    workspace_root,
};
use serde_json::Value;

use crate::helpers::{assert_refused_at_a_byte, openprof_in, text};

// RetainedShapes' constants.
const LINKS: u64 = 1000;
const PAYLOAD: u64 = 1000;
const ENTRIES: u64 = 200;
const SHARED: u64 = 50;
const DATA: u64 = 500;
const LISTENERS: u64 = 10000;
const STATE: u64 = 4000;

/// One JVM's two dumps: openprof's and the JDK's.
struct Dumps {
    ours: PathBuf,
    jdk: PathBuf,
}

fn dumps() -> &'static Dumps {
    static DUMPS: OnceLock<Dumps> = OnceLock::new();
    DUMPS.get_or_init(|| {
        let (mut command, dir) = java_command_with(
            &["-Xmx256m"],
            Some("heap=dump,format=b,file=ours.hprof,doe=n"),
            "RetainedShapes",
            &[],
        );
        let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
        wait_until_ready(&mut child);
        let jdk_dump = dir.join("jcmd.hprof");
        jcmd(child.id(), &["GC.heap_dump", jdk_dump.to_str().unwrap()]);
        send_signal(child.id(), libc::SIGQUIT);
        let ours = dir.join("ours.hprof");
        openprof_testkit::wait_for(
            "the heap dump asked for by SIGQUIT was written",
            Duration::from_secs(120),
            || openprof_testkit::complete_heap_dumps(&ours) > 0,
        );
        drop(child.stdin.take().map(|mut stdin| stdin.flush()));
        let output = wait_with_limit(child, Duration::from_secs(120));
        assert!(output.status.success(), "{}", text(&output.stderr));
        Dumps {
            ours,
            jdk: jdk_dump,
        }
    })
}

/// What a dump's own records say, read here apart from the analysis: class names, CLASS DUMPs,
/// every object's class and references.
#[derive(Default)]
struct Facts {
    id_size: u32,
    strings: HashMap<u64, String>,
    class_names: HashMap<u64, String>,
    /// class id: (super id, instance size, own fields, statics (name, value bytes)).
    classes: HashMap<u64, ClassFacts>,
    instances: HashMap<u64, (u64, Vec<u8>)>,
    object_arrays: HashMap<u64, Vec<u64>>,
    primitive_arrays: HashMap<u64, (BasicType, u64)>,
}

struct ClassFacts {
    super_id: u64,
    instance_size: u32,
    fields: Vec<(String, BasicType)>,
    statics: Vec<(String, Vec<u8>)>,
}

fn id_of(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |v, &b| (v << 8) | u64::from(b))
}

fn align(bytes: u64) -> u64 {
    bytes.div_ceil(8) * 8
}

impl Facts {
    fn read(path: &Path) -> Facts {
        let file = std::fs::File::open(path).unwrap();
        let mut reader = HprofReader::new(BufReader::new(file)).unwrap();
        let mut facts = Facts {
            id_size: reader.header().id_size,
            ..Facts::default()
        };
        let mut class_name_ids = Vec::new();
        let mut class_dumps = Vec::new();
        while let Some(item) = reader.next_item() {
            match item.expect("the dump reads") {
                Item::Record(Record::Utf8 { id, text }) => {
                    facts
                        .strings
                        .insert(id, String::from_utf8_lossy(&text).into());
                }
                Item::Record(Record::LoadClass {
                    class_id, name_id, ..
                }) => class_name_ids.push((class_id, name_id)),
                Item::Sub(SubRecord::ClassDump(class)) => class_dumps.push(*class),
                Item::Sub(SubRecord::InstanceDump {
                    id,
                    class_id,
                    values,
                    ..
                }) => {
                    facts.instances.insert(id, (class_id, values));
                }
                Item::Sub(SubRecord::ObjectArrayDump { id, elements, .. }) => {
                    facts.object_arrays.insert(id, elements);
                }
                Item::Sub(SubRecord::PrimitiveArrayDump {
                    id,
                    element_type,
                    length,
                    ..
                }) => {
                    facts
                        .primitive_arrays
                        .insert(id, (element_type, u64::from(length)));
                }
                _ => {}
            }
        }
        for (class_id, name_id) in class_name_ids {
            facts
                .class_names
                .insert(class_id, facts.strings[&name_id].replace('/', "."));
        }
        for class in class_dumps {
            let name = |id: u64| facts.strings.get(&id).cloned().unwrap_or_default();
            facts.classes.insert(
                class.class_id,
                ClassFacts {
                    super_id: class.super_id,
                    instance_size: class.instance_size,
                    fields: class
                        .instance_fields
                        .iter()
                        .map(|(n, t)| (name(*n), *t))
                        .collect(),
                    statics: class
                        .static_fields
                        .iter()
                        .map(|(n, v)| (name(*n), v.bytes.clone()))
                        .collect(),
                },
            );
        }
        facts
    }

    fn class(&self, name: &str) -> u64 {
        *self
            .class_names
            .iter()
            .find(|(id, n)| *n == name && self.classes.contains_key(id))
            .unwrap_or_else(|| panic!("no class {name}"))
            .0
    }

    fn static_ref(&self, class: &str, field: &str) -> u64 {
        let class = &self.classes[&self.class(class)];
        id_of(&class.statics.iter().find(|(n, _)| n == field).unwrap().1)
    }

    /// A reference field's value: the instance's values hold its class's fields, then its
    /// super classes'.
    fn field_ref(&self, object: u64, field: &str) -> u64 {
        let (mut class_id, values) = self.instances.get(&object).expect("an instance");
        let mut offset = 0usize;
        loop {
            let class = &self.classes[&class_id];
            for (name, field_type) in &class.fields {
                let size = field_type.size(self.id_size) as usize;
                if name == field && *field_type == BasicType::Object {
                    return id_of(&values[offset..offset + size]);
                }
                offset += size;
            }
            class_id = class.super_id;
            assert_ne!(class_id, 0, "no field {field}");
        }
    }

    /// Shallow bytes, from the dump's own sizes: an instance of a class extending Object
    /// directly is a 12-byte header and the CLASS DUMP's instance size with references
    /// counted at 4 bytes (the dump counts them at the identifier size); an array a 16-byte
    /// header and its elements; both aligned to 8.
    fn shallow(&self, object: u64) -> u64 {
        if let Some((class_id, _)) = self.instances.get(&object) {
            let class = &self.classes[class_id];
            let mut size = 0u64;
            let mut references = 0u64;
            let mut at = *class_id;
            while at != 0 {
                let c = &self.classes[&at];
                for (_, t) in &c.fields {
                    size += u64::from(t.size(self.id_size));
                    references += u64::from(*t == BasicType::Object);
                }
                at = c.super_id;
            }
            if self.classes[&class.super_id].super_id == 0 {
                assert_eq!(
                    u64::from(class.instance_size),
                    size,
                    "the CLASS DUMP's instance size is its fields' bytes"
                );
            }
            return align(12 + size - references * (u64::from(self.id_size) - 4));
        }
        if let Some(elements) = self.object_arrays.get(&object) {
            return align(16 + 4 * elements.len() as u64);
        }
        let (element, length) = self.primitive_arrays[&object];
        align(16 + length * u64::from(element.size(self.id_size)))
    }
}

/// The figures both dumps must agree on, each checked against the facts.
#[derive(Debug, PartialEq, Eq)]
struct Figures {
    head: u64,
    head_next: u64,
    first_cache: u64,
    second_cache: u64,
    listeners: u64,
    element_data: u64,
    class_link: u64,
    class_entry: u64,
    class_listener: u64,
    suspect_point: u64,
}

fn heap_json(dir: &Path, dump: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["heap", dump.to_str().unwrap(), "--json", "--top", "60"];
    args.extend_from_slice(extra);
    let output = openprof_in(dir, &args);
    assert!(
        output.status.success(),
        "openprof {args:?}: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

fn hex(id: u64) -> String {
    format!("0x{id:x}")
}

fn class_retained(report: &Value, class: &str) -> u64 {
    report["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["class"] == class)
        .unwrap_or_else(|| panic!("{class} not in the histogram"))["retained"]
        .as_u64()
        .unwrap()
}

fn path_steps(path: &Value) -> Vec<(String, Option<String>)> {
    path["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step["id"].as_str().unwrap().to_string(),
                step["via"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Checks one dump against what its records say the shapes hold; returns its figures.
fn check(dump: &Path) -> Figures {
    let facts = Facts::read(dump);
    let dir = dump.parent().unwrap();
    let head = facts.static_ref("RetainedShapes$Chain", "head");
    let link = facts.shallow(head) + facts.shallow(facts.field_ref(head, "payload"));
    assert_eq!(
        facts.shallow(facts.field_ref(head, "payload")),
        align(16 + PAYLOAD)
    );
    let first = facts.static_ref("RetainedShapes$Caches", "first");
    let second = facts.static_ref("RetainedShapes$Caches", "second");
    let first_entries = &facts.object_arrays[&first];
    let entry = facts.shallow(first_entries[0]) + align(16 + DATA);
    let listeners = facts.static_ref("RetainedShapes$Bus", "listeners");
    let element_data = facts.field_ref(listeners, "elementData");
    let listener_objects: Vec<u64> = facts.object_arrays[&element_data]
        .iter()
        .copied()
        .filter(|&id| id != 0)
        .collect();
    assert_eq!(listener_objects.len() as u64, LISTENERS);
    let listener = facts.shallow(listener_objects[0])
        + facts.shallow(facts.field_ref(listener_objects[0], "state"));
    assert_eq!(
        facts.shallow(facts.field_ref(listener_objects[0], "state")),
        align(16 + STATE)
    );

    let expected = Figures {
        head: LINKS * link,
        head_next: (LINKS - 1) * link,
        first_cache: facts.shallow(first) + (ENTRIES - SHARED) * entry,
        second_cache: facts.shallow(second) + (ENTRIES - SHARED) * entry,
        element_data: facts.shallow(element_data) + LISTENERS * listener,
        listeners: facts.shallow(listeners) + facts.shallow(element_data) + LISTENERS * listener,
        class_link: LINKS * link,
        class_entry: (2 * ENTRIES - SHARED) * entry,
        class_listener: LISTENERS * listener,
        suspect_point: facts.shallow(element_data) + LISTENERS * listener,
    };

    // Retained sizes of single objects and dominators, through the library.
    let graph = HeapGraph::read(dump, &GraphOptions::default(), &mut |_| {}).unwrap();
    let analysis = HeapAnalysis::new(graph, &mut |_| {}).unwrap();
    let node = |id: u64| analysis.graph.node(id).unwrap();
    let retained = |id: u64| analysis.retained(node(id)).expect("reachable");
    let report = heap_json(
        dir,
        dump,
        &["--suspects", "--path-to-roots", "RetainedShapes$Link"],
    );
    let suspect = &report["suspects"][0];
    let point = suspect["accumulation"].as_array().unwrap().last().unwrap();
    assert_eq!(point["id"], hex(element_data), "{suspect:#}");
    assert!(suspect["share"].as_f64().unwrap() > 0.5, "{suspect:#}");
    // The path to the accumulation point goes through the static and the list's array.
    let steps = path_steps(&suspect["path"]);
    let n = steps.len();
    assert_eq!(
        steps[n - 3].1.as_deref(),
        Some("static listeners"),
        "{steps:?}"
    );
    assert_eq!(steps[n - 2], (hex(listeners), Some("elementData".into())));
    assert_eq!(steps[n - 1], (hex(element_data), None));
    // The path to the Link that retains most (the head) is through Chain's static.
    let steps = path_steps(&report["path"]);
    let n = steps.len();
    assert_eq!(steps[n - 2].1.as_deref(), Some("static head"), "{steps:?}");
    assert_eq!(steps[n - 1], (hex(head), None));
    // A listener: through the static, the list, its array, an element.
    let listener_path = heap_json(dir, dump, &["--path-to-roots", &hex(listener_objects[7])]);
    let steps = path_steps(&listener_path["path"]);
    let n = steps.len();
    assert_eq!(
        steps[n - 3],
        (hex(listeners), Some("elementData".into())),
        "{steps:?}"
    );
    assert_eq!(steps[n - 2], (hex(element_data), Some("[7]".into())));

    let figures = Figures {
        head: retained(head),
        head_next: retained(facts.field_ref(head, "next")),
        first_cache: retained(first),
        second_cache: retained(second),
        listeners: retained(listeners),
        element_data: retained(element_data),
        class_link: class_retained(&report, "RetainedShapes$Link"),
        class_entry: class_retained(&report, "RetainedShapes$Entry"),
        class_listener: class_retained(&report, "RetainedShapes$Listener"),
        suspect_point: point["retained"].as_u64().unwrap(),
    };
    assert_eq!(figures, expected, "{}", dump.display());

    let idom = |id: u64| {
        analysis
            .idom(node(id))
            .expect("reachable")
            .map(|d| analysis.graph.id(d))
    };
    let caches_class = facts.class("RetainedShapes$Caches");
    assert_eq!(idom(first_entries[0]), Some(caches_class), "a shared entry");
    assert_eq!(idom(first_entries[SHARED as usize]), Some(first));
    assert_eq!(idom(first), Some(caches_class));
    assert_eq!(idom(head), Some(facts.class("RetainedShapes$Chain")));
    assert_eq!(idom(facts.field_ref(head, "next")), Some(head));
    assert_eq!(idom(listener_objects[0]), Some(element_data));
    assert_eq!(idom(element_data), Some(listeners));
    assert_eq!(idom(listeners), Some(facts.class("RetainedShapes$Bus")));
    figures
}

#[test]
fn retained_sizes_dominators_suspect_and_paths_are_exact_in_both_dumps() {
    let dumps = dumps();
    let ours = check(&dumps.ours);
    let jdks = check(&dumps.jdk);
    assert_eq!(ours, jdks);
}

/// VisualVM's heap library, from Debian's visualvm package.
fn visualvm_heap_library() -> PathBuf {
    let roots = [
        "/usr/share/visualvm",
        "/usr/lib/visualvm",
        "/usr/share/java",
    ];
    let mut found = Vec::new();
    for root in roots {
        let mut stack = vec![PathBuf::from(root)];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    stack.push(path);
                } else if name.ends_with(".jar")
                    && (name.contains("lib-jfluid-heap")
                        || name.starts_with("org-netbeans-lib-profiler"))
                {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found.into_iter().next().unwrap_or_else(|| {
        panic!(
            "VisualVM's heap library (org-graalvm-visualvm-lib-jfluid-heap.jar or \
             org-netbeans-lib-profiler*.jar) is not under /usr/share/visualvm: install Debian's \
             visualvm package (apt-get install visualvm; scripts/test does as root)"
        )
    })
}

/// VisualVmRetained compiled against the library.
fn visualvm_program(library: &Path) -> PathBuf {
    let out = kept_temp_dir("openprof-visualvm-");
    let status = Command::new(jdk().javac().expect("javac"))
        .arg("-cp")
        .arg(library)
        .arg("-d")
        .arg(&out)
        .arg(workspace_root().join("java/heapcheck/VisualVmRetained.java"))
        .status()
        .expect("run javac");
    assert!(status.success(), "javac failed on java/heapcheck");
    out
}

#[test]
fn visualvms_heap_library_computes_the_same_retained_sizes() {
    let library = visualvm_heap_library();
    let classes = visualvm_program(&library);
    let dumps = dumps();
    for dump in [&dumps.jdk, &dumps.ours] {
        let output = Command::new(jdk().java().unwrap())
            .arg("-cp")
            .arg(format!("{}:{}", library.display(), classes.display()))
            .arg("VisualVmRetained")
            .arg(dump)
            .arg("shapes")
            .output()
            .expect("run java");
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
        let dir = dump.parent().unwrap();
        let report = heap_json(dir, dump, &[]);
        let graph = HeapGraph::read(dump, &GraphOptions::default(), &mut |_| {}).unwrap();
        let analysis = HeapAnalysis::new(graph, &mut |_| {}).unwrap();
        let mut checked = 0;
        for line in stdout.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields[0] == "class" {
                // class NAME INSTANCES RETAINED
                assert_eq!(
                    class_retained(&report, fields[1]),
                    fields[3].parse::<u64>().unwrap(),
                    "{}: {line}",
                    dump.display()
                );
            } else {
                // NAME ID SHALLOW RETAINED
                let id = u64::from_str_radix(fields[1].trim_start_matches("0x"), 16).unwrap();
                let node = analysis.graph.node(id).expect("the same object");
                assert_eq!(
                    analysis.graph.shallow(node),
                    fields[2].parse::<u64>().unwrap(),
                    "{line}"
                );
                assert_eq!(
                    analysis.retained(node),
                    Some(fields[3].parse::<u64>().unwrap()),
                    "{}: {line}",
                    dump.display()
                );
            }
            checked += 1;
        }
        assert_eq!(checked, 13, "{stdout}");
    }
}

#[test]
fn cut_dumps_are_errors_at_a_byte_offset() {
    let dumps = dumps();
    let bytes = std::fs::read(&dumps.jdk).unwrap();
    let dir = kept_temp_dir("openprof-cut-");
    for eighth in 1..8 {
        let cut = bytes.len() * eighth / 8 + eighth;
        std::fs::write(dir.join("cut.hprof"), &bytes[..cut]).unwrap();
        let output = openprof_in(&dir, &["heap", "cut.hprof"]);
        assert_refused_at_a_byte(&output, "cut.hprof is not a readable HPROF heap dump", cut);
    }
}

#[test]
fn the_html_report_and_the_diff_of_two_dumps() {
    let dumps = dumps();
    let dir = dumps.jdk.parent().unwrap();
    let output = openprof_in(
        dir,
        &["heap", "jcmd.hprof", "--dominators", "5", "-o", "heap.html"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("Top of the dominator tree"), "{stdout}");
    let page = std::fs::read_to_string(dir.join("heap.html")).unwrap();
    assert!(page.contains("RetainedShapes$Listener"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no network"
    );
    let diff = heap_json(dir, &dumps.jdk, &["--diff", dumps.ours.to_str().unwrap()]);
    let rows = diff["diff"]["rows"].as_array().unwrap();
    for class in [
        "RetainedShapes$Listener",
        "RetainedShapes$Link",
        "RetainedShapes$Entry",
    ] {
        let row = rows.iter().find(|row| row["class"] == class).unwrap();
        assert_eq!(row["objects_change"], 0, "{row}");
        assert_eq!(row["shallow_change"], 0, "{row}");
    }
}

/// The HTML report in Chromium (`tests/browser/heap.mjs`): the suspect named, the dominator
/// tree's largest node expanded into its children (largest first) and collapsed with its
/// expanded child, the histogram sorted by a click. OPENPROF_SCREENSHOTS=DIR keeps pictures.
#[test]
fn the_html_report_in_a_browser() {
    let dumps = dumps();
    let dir = kept_temp_dir("openprof-heap-page-");
    let page = dir.join("heap.html");
    let output = openprof_in(
        &dir,
        &[
            "heap",
            dumps.jdk.to_str().unwrap(),
            "-o",
            page.to_str().unwrap(),
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let seen = in_a_browser(&page);

    let report = heap_json(dumps.jdk.parent().unwrap(), &dumps.jdk, &["--suspects"]);
    let point = report["suspects"][0]["accumulation"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let suspect = seen["suspects"][0].as_str().unwrap();
    assert!(suspect.contains(&point), "{suspect}");
    assert!(suspect.contains("static listeners"), "{suspect}");

    let rows =
        |key: &str| -> Vec<Vec<String>> { serde_json::from_value(seen[key].clone()).unwrap() };
    let before = rows("treeBefore");
    let expanded = rows("treeExpanded");
    let two_levels = rows("treeTwoLevels");
    assert_eq!(rows("treeCollapsed"), before, "collapsed as it was");
    assert!(expanded.len() > before.len(), "{expanded:?}");
    assert!(two_levels.len() > expanded.len(), "{two_levels:?}");
    // The top node is the largest: the first of the dominators list.
    let top = &report["dominators"][0];
    assert!(
        before[0][0].contains(top["id"].as_str().unwrap()),
        "{before:?}"
    );
    let number = |cell: &str| cell.replace(',', "").parse::<u64>().unwrap();
    assert_eq!(number(&before[0][2]), top["retained"].as_u64().unwrap());
    // Children come largest first, each retaining no more than its parent.
    let children: Vec<u64> = expanded[1..expanded.len() - (before.len() - 1)]
        .iter()
        .filter(|row| row.len() > 2)
        .map(|row| number(&row[2]))
        .collect();
    assert!(!children.is_empty());
    assert!(
        children.windows(2).all(|pair| pair[0] >= pair[1]),
        "{children:?}"
    );
    assert!(children[0] <= number(&before[0][2]));

    let by_objects = rows("histogramByObjects");
    let ascending = rows("histogramByObjectsAscending");
    let counts: Vec<u64> = by_objects.iter().map(|row| number(&row[1])).collect();
    assert!(
        counts.windows(2).all(|pair| pair[0] >= pair[1]),
        "{counts:?}"
    );
    let counts: Vec<u64> = ascending.iter().map(|row| number(&row[1])).collect();
    assert!(
        counts.windows(2).all(|pair| pair[0] <= pair[1]),
        "{counts:?}"
    );
    assert!(rows("histogramFirst").len() == 5);
}

/// A list of HeapChain's LINKS links: the suspect's dominator path and its path from a GC root
/// are each about LINKS long. Text, JSON and HTML list the first and last links and count the
/// ones between, exactly: the output's size does not grow with the list.
#[test]
fn long_chains_are_listed_by_their_ends_and_counted_between() {
    const LINKS: u64 = 300_000;
    let (mut command, dir) =
        java_command_with(&["-Xmx256m"], None, "HeapChain", &[&LINKS.to_string()]);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
    wait_until_ready(&mut child);
    let dump = dir.join("chain.hprof");
    jcmd(child.id(), &["GC.heap_dump", dump.to_str().unwrap()]);
    drop(child.stdin.take());
    wait_with_limit(child, Duration::from_secs(120));

    let report = heap_json(&dir, &dump, &["--suspects"]);
    let suspect = &report["suspects"][0];
    let accumulation = suspect["accumulation"].as_array().unwrap();
    let first = &accumulation[0];
    assert_eq!(first["class"], "class HeapChain", "{suspect:#}");
    assert_eq!(accumulation[1]["class"], "HeapChain$Link", "{suspect:#}");
    // The accumulation point is a link k links before the end; it retains those k links.
    let point = accumulation.last().unwrap();
    let link_bytes = accumulation[1]["shallow"].as_u64().unwrap();
    let to_the_end = point["retained"].as_u64().unwrap() / link_bytes;
    assert!((1..10).contains(&to_the_end), "{point}");
    // The class, then every link from the head to the point.
    let whole = 1 + (LINKS - to_the_end + 1);
    let elided = |value: &Value| -> (u64, u64) {
        (
            value["after"].as_u64().expect("an elision"),
            value["links"].as_u64().expect("an elision"),
        )
    };
    let (after, links) = elided(&suspect["accumulation_elided"]);
    assert_eq!(accumulation.len() as u64 + links, whole, "{suspect:#}");
    assert!(after > 1 && accumulation.len() < 100, "{after}");
    // Each listed link retains its distance to the end, also after the gap.
    for (index, link) in accumulation.iter().enumerate().skip(1) {
        let position = index as u64 - 1 + if index as u64 >= after { links } else { 0 };
        assert_eq!(
            link["retained"].as_u64().unwrap(),
            (LINKS - position) * link_bytes,
            "{link}"
        );
    }
    // The path from the root reaches the class (through the launcher's static, or as a root
    // itself), then goes through its static and from link to link by `next`.
    let path = &suspect["path"];
    let steps = path_steps(path);
    let (_, path_links) = elided(&path["elided"]);
    let class_at = steps
        .iter()
        .position(|(id, _)| *id == first["id"].as_str().unwrap())
        .expect("the path goes through the class");
    assert!(class_at < 5, "{path:#}");
    assert_eq!(
        steps.len() as u64 + path_links,
        class_at as u64 + whole,
        "{path:#}"
    );
    assert_eq!(steps[class_at].1.as_deref(), Some("static head"));
    assert!(steps[class_at + 1..steps.len() - 1]
        .iter()
        .all(|(_, via)| via.as_deref() == Some("next")));
    assert_eq!(steps.last().unwrap().0, point["id"].as_str().unwrap());

    // The text and the page stay small and say how many links they leave out.
    let output = openprof_in(&dir, &["heap", "chain.hprof", "-o", "chain.html"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(&format!("... {links} links left out ...")),
        "{stdout}"
    );
    assert!(stdout.len() < 64 << 10, "{} bytes of text", stdout.len());
    let page = dir.join("chain.html");
    let page_bytes = std::fs::metadata(&page).unwrap().len();
    assert!(page_bytes < 4 << 20, "{page_bytes} bytes of HTML");
    let seen = in_a_browser(&page);
    let suspect = seen["suspects"][0].as_str().unwrap();
    assert!(
        suspect.contains(&format!("... {} links left out ...", group(links))),
        "{suspect}"
    );
    assert!(
        suspect.contains(&format!("... {} links left out ...", group(path_links))),
        "{suspect}"
    );
}

/// A number with a comma between each group of three digits, as the page shows it.
fn group(number: u64) -> String {
    let digits = number.to_string();
    let mut grouped = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// What `tests/browser/heap.mjs` sees of a heap page in Chromium (no script errors, no network).
/// OPENPROF_SCREENSHOTS=DIR keeps pictures.
fn in_a_browser(page: &Path) -> Value {
    use crate::views_html::{browser_deps, chromium};
    let mut command = Command::new("node");
    command
        .arg(workspace_root().join("crates/cli/tests/browser/heap.mjs"))
        .arg(page)
        .env("OPENPROF_BROWSER_DEPS", browser_deps())
        .env("CHROMIUM", chromium())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(shots) = std::env::var_os("OPENPROF_SCREENSHOTS").filter(|d| !d.is_empty()) {
        let shots = workspace_root().join(shots);
        std::fs::create_dir_all(&shots).unwrap();
        command.arg("--screenshots").arg(shots);
    }
    let output = crate::helpers::finish(command, crate::helpers::LIMIT);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the script's JSON");
    assert_eq!(seen["errors"], Value::Array(Vec::new()), "script errors");
    assert_eq!(seen["requests"], Value::Array(Vec::new()), "the network");
    seen
}
