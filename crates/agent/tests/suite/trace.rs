//! format=x against ground truth: a workload that calls a method exactly N times and throws and
//! catches a known number of exceptions, read back with our reader, checked by xmllint against
//! docs/trace.dtd and by the validator.

use std::collections::HashMap;
use std::time::Duration;

use openprof_format::trace::attrs::{FilterMode, ObjRef};
use openprof_format::trace::reader::read_all;
use openprof_format::trace::validate::validate;
use openprof_format::trace::TraceElement;
use openprof_testkit::{
    coverage_line_counts, kept_temp_dir, read_trace, run_java, run_java_with, Run,
};

use crate::helpers::xmllint;

const CALLS: usize = 1000;
const EXCEPTIONS: usize = 5;

fn traced(options: &str, args: &[&str]) -> (Run, Vec<TraceElement>) {
    let run = run_java(Some(options), "Calls", args, Duration::from_secs(180));
    assert!(run.success(), "{}", run.stderr());
    let elements = read_trace(&run.dir.join("trace.xml"));
    (run, elements)
}

/// methodId → (class name, method name), from the classDef and methodDef elements.
fn method_names(elements: &[TraceElement]) -> HashMap<u32, (String, String)> {
    let mut classes = HashMap::new();
    let mut methods = HashMap::new();
    for element in elements {
        match element {
            TraceElement::ClassDef(class) => {
                classes.insert(
                    class.class_id.unwrap(),
                    class.name.clone().unwrap_or_default(),
                );
            }
            TraceElement::MethodDef(method) => {
                let class = classes[&method.class_id_ref.unwrap()].clone();
                methods.insert(
                    method.method_id.unwrap(),
                    (class, method.name.clone().unwrap_or_default()),
                );
            }
            _ => {}
        }
    }
    methods
}

#[test]
fn a_real_trace_matches_the_workloads_ground_truth() {
    let (run, elements) = traced(
        "format=x,cpu=times,monitor=y,filter=+Calls;-*,file=trace.xml",
        &[&CALLS.to_string(), &EXCEPTIONS.to_string(), "extras"],
    );
    xmllint(&run);
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");

    // The hierarchy opens and closes the trace.
    let tags: Vec<&str> = elements.iter().map(TraceElement::tag).collect();
    assert_eq!(
        &tags[..4],
        ["node", "processCreate", "agentCreate", "traceStart"]
    );
    assert_eq!(&tags[tags.len() - 2..], ["traceEnd", "agentDestroy"]);
    let shutdown = tags.iter().position(|t| *t == "runtimeShutdown").unwrap();
    assert!(
        tags[shutdown..].contains(&"methodCount"),
        "methodCount comes just before the end"
    );
    assert!(elements.iter().any(|e| matches!(e, TraceElement::OptionElement(o) if o.key.as_deref() == Some("cpu") && o.value.as_deref() == Some("times"))));
    let filters: Vec<_> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::Filter(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(filters.len(), 2);
    assert_eq!(
        (filters[0].pattern.as_str(), filters[0].mode),
        ("Calls", FilterMode::Include)
    );
    assert!(tags.contains(&"runtimeInitDone"));

    let names = method_names(&elements);
    let id_of = |name: &str| {
        *names
            .iter()
            .find(|(_, (class, method))| class == "Calls" && method == name)
            .unwrap()
            .0
    };
    let (work, thrower, catcher) = (id_of("work"), id_of("thrower"), id_of("catcher"));

    // work() ran CALLS times: that many entries, exits and the methodCount.
    let entries = elements
        .iter()
        .filter(|e| matches!(e, TraceElement::MethodEntry(m) if m.method_id_ref == Some(work)))
        .count();
    let exits = elements
        .iter()
        .filter(|e| matches!(e, TraceElement::MethodExit(m) if m.method_id_ref == Some(work)))
        .count();
    assert_eq!((entries, exits), (CALLS, CALLS));
    let count = elements.iter().find_map(|e| match e {
        TraceElement::MethodCount(c) if c.method_id_ref == Some(work) => c.count,
        _ => None,
    });
    assert_eq!(count, Some(CALLS as u64));

    // Only the filter's class is traced.
    for element in &elements {
        if let TraceElement::MethodEntry(entry) = element {
            let (class, _) = &names[&entry.method_id_ref.unwrap()];
            assert!(class.starts_with("Calls"), "{class} was filtered out");
        }
    }

    // Each exception: a throw in thrower(0), thrower(1), thrower(2) and catcher, caught in catcher.
    let throws: Vec<u32> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::Throw(t) => t.method_id_ref,
            _ => None,
        })
        .collect();
    let expected: Vec<u32> = (0..EXCEPTIONS)
        .flat_map(|_| [thrower, thrower, thrower, catcher])
        .collect();
    assert_eq!(throws, expected);
    let catches: Vec<&openprof_format::trace::Catch> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::Catch(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(catches.len(), EXCEPTIONS);
    assert!(catches.iter().all(|c| c.method_id_ref == Some(catcher)));
    // IllegalStateException's class (java.lang) is filtered out: its object is unavailable.
    assert!(catches
        .iter()
        .all(|c| c.obj_id_ref == Some(ObjRef::Unavailable)));

    // The lock: main contends for it, the holder waits 200 ms on it (Thread.join's own waits on
    // the Thread object are there too, as they happen).
    let class_names: HashMap<u32, String> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::ClassDef(c) => {
                Some((c.class_id.unwrap(), c.name.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    let waits: Vec<_> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::MonitorWait(w)
                if class_names[&w.class_id_ref.unwrap()] == "java.lang.Object" =>
            {
                Some(w)
            }
            _ => None,
        })
        .collect();
    assert_eq!(waits.len(), 1, "one wait on LOCK");
    assert_eq!(waits[0].timeout, Some(200));
    assert!(elements
        .iter()
        .any(|e| matches!(e, TraceElement::MonitorWaited(w) if w.timed_out == Some(true))));
    assert!(tags.contains(&"monitorContendedEnter") && tags.contains(&"monitorContendedEntered"));

    // System.gc(): a GC with the heap's figures.
    let finish = elements
        .iter()
        .find_map(|e| match e {
            TraceElement::GcFinish(g) => Some(g),
            _ => None,
        })
        .expect("a gcFinish");
    assert!(finish.total_obj_space.unwrap() >= finish.used_obj_space.unwrap());
    assert!(tags.contains(&"gcStart"));
}

#[test]
fn filters_from_a_file_and_without_method_tracing() {
    let dir = kept_temp_dir("openprof-filters-");
    let filters = dir.join("filters.txt");
    std::fs::write(&filters, "# only Calls\ninclude Calls\nexclude *\n").unwrap();
    let options = format!("format=x,filter=@{},file=trace.xml", filters.display());
    let (run, elements) = traced(&options, &["10", "2"]);
    xmllint(&run);
    assert!(validate(elements.iter().cloned().map(Ok)).is_empty());
    // Without cpu=times there are no method entries and no counts, but throws and catches.
    assert!(!elements.iter().any(|e| matches!(
        e,
        TraceElement::MethodEntry(_) | TraceElement::MethodCount(_)
    )));
    assert_eq!(
        elements
            .iter()
            .filter(|e| matches!(e, TraceElement::Catch(_)))
            .count(),
        2
    );
    assert_eq!(
        elements
            .iter()
            .filter(|e| matches!(e, TraceElement::Filter(_)))
            .count(),
        2
    );
}

#[test]
fn many_threads_traced_at_once_give_a_valid_trace() {
    let run = run_java(
        Some("format=x,cpu=times,monitor=y,filter=+ThreadChurn*;-*,file=trace.xml"),
        "ThreadChurn",
        &["2", "6"],
        Duration::from_secs(240),
    );
    assert!(run.success(), "{}", run.stderr());
    assert!(!run.files().iter().any(|file| file.starts_with("hs_err")));
    xmllint(&run);
    let bytes = std::fs::read(run.dir.join("trace.xml")).unwrap();
    let elements: Vec<TraceElement> = read_all(bytes.as_slice())
        .collect::<Result<_, _>>()
        .unwrap();
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(
        problems.is_empty(),
        "{:#?}",
        &problems[..problems.len().min(10)]
    );
    // Every worker thread has entries of its own.
    let names: HashMap<u32, String> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::ThreadStart(t) => Some((
                t.thread_id.unwrap(),
                t.thread_name.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect();
    let traced: std::collections::HashSet<&str> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::MethodEntry(m) => Some(names[&m.thread_id_ref.unwrap()].as_str()),
            _ => None,
        })
        .collect();
    for worker in (0..8)
        .map(|i| format!("busy-{i}"))
        .chain((0..6).map(|i| format!("churn-{i}")))
    {
        assert!(traced.contains(worker.as_str()), "no entries on {worker}");
    }
}

/// CallTree traced under format=x,cpu=times (and `extra` options), its classes rewritten and
/// verified (-Xverify:all): the trace's elements, valid by the DTD and by `validate`, and its
/// methods' names by id.
fn call_tree_trace(extra: &str) -> (Vec<TraceElement>, HashMap<u32, (String, String)>) {
    let options = format!("format=x,cpu=times{extra},filter=+CallTree*;-*,file=trace.xml");
    let run = run_java_with(
        &["-Xverify:all"],
        Some(&options),
        "CallTree",
        &["300"],
        Duration::from_secs(180),
    );
    assert!(run.success(), "{}", run.stderr());
    xmllint(&run);
    let elements = read_trace(&run.dir.join("trace.xml"));
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
    let names = method_names(&elements);
    (elements, names)
}

#[test]
fn instrumented_calls_pair_entries_with_exits_and_exceptions_pass_each_frame_once() {
    // CallTree under format=x,cpu=times, its classes rewritten and verified (-Xverify:all).
    let (elements, names) = call_tree_trace("");
    let name = |id: Option<u32>| {
        let (class, method) = &names[&id.unwrap()];
        format!("{class}.{method}")
    };
    let mut entries: HashMap<String, u64> = HashMap::new();
    let mut exits: HashMap<String, u64> = HashMap::new();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut throws: HashMap<String, u64> = HashMap::new();
    let mut catches: HashMap<String, u64> = HashMap::new();
    for element in &elements {
        match element {
            TraceElement::MethodEntry(e) => *entries.entry(name(e.method_id_ref)).or_default() += 1,
            TraceElement::MethodExit(e) => *exits.entry(name(e.method_id_ref)).or_default() += 1,
            TraceElement::MethodCount(c) => {
                counts.insert(name(c.method_id_ref), c.count.unwrap_or(0));
            }
            TraceElement::Throw(t) => *throws.entry(name(t.method_id_ref)).or_default() += 1,
            TraceElement::Catch(c) => *catches.entry(name(c.method_id_ref)).or_default() += 1,
            _ => {}
        }
    }
    let expected: HashMap<String, u64> = [
        ("CallTree.main", 1),
        ("CallTree.<init>", 300),
        ("CallTree.outer", 300),
        ("CallTree.middle", 300),
        ("CallTree.leaf", 900),
        ("CallTree.fails", 300),
        ("CallTree$Sub.<init>", 10),
        ("CallTree$Base.<init>", 10),
    ]
    .into_iter()
    .map(|(method, calls)| (method.to_string(), calls))
    .collect();
    assert_eq!(entries, expected);
    assert_eq!(exits, expected, "every entry has its exit");
    assert_eq!(counts, expected, "methodCount counts every call");
    // fails() throws 30 times and main catches; Base throws 5 times, through Sub's super(...)
    // call into main; Integer.parseInt once: each traced frame passed once, not once more for
    // the rewriter's handlers.
    let throws_expected: HashMap<String, u64> = [
        ("CallTree.fails", 30),
        ("CallTree$Base.<init>", 5),
        ("CallTree$Sub.<init>", 5),
        ("CallTree.main", 36),
    ]
    .into_iter()
    .map(|(method, calls)| (method.to_string(), calls))
    .collect();
    assert_eq!(throws, throws_expected);
    assert_eq!(
        catches,
        HashMap::from([("CallTree.main".to_string(), 36)]),
        "only the program's catches"
    );
}

#[test]
fn allocations_frees_and_unloads_of_traced_classes_are_elements() {
    // heap=sites in a trace: sampled allocations (every one, alloc_interval=0) of the classes
    // the filters let through are objAlloc elements, their deaths objFree; Unloadable's class
    // loader is let go and the class unloaded: a classUnload.
    let run = run_java(
        Some(
            "format=x,cpu=times,heap=sites,alloc_interval=0,filter=+Unloads*;+Unloadable;-*,\
             file=trace.xml",
        ),
        "Unloads",
        &["50000"],
        Duration::from_secs(180),
    );
    assert!(run.success(), "{}", run.stderr());
    assert!(
        run.stdout().contains("payloads=50000 unloaded=true"),
        "{}",
        run.stdout()
    );
    xmllint(&run);
    let elements = read_trace(&run.dir.join("trace.xml"));
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
    let class_named = |name: &str| {
        elements.iter().find_map(|e| match e {
            TraceElement::ClassDef(c) if c.name.as_deref() == Some(name) => c.class_id,
            _ => None,
        })
    };
    let payload = class_named("Unloads$Payload").expect("Payload is defined");
    let allocated: std::collections::HashSet<u32> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::ObjAlloc(a) if a.class_id_ref == Some(payload) => a.obj_id,
            _ => None,
        })
        .collect();
    // Every allocation is sampled once the thread's sampling is armed (at its first TLAB
    // refill): all but a handful of the first.
    assert!(
        allocated.len() <= 50000 && allocated.len() >= 49900,
        "{} payloads allocated",
        allocated.len()
    );
    // Only classes the filters let through.
    for element in &elements {
        if let TraceElement::ObjAlloc(alloc) = element {
            let class = alloc.class_id_ref.unwrap();
            let name = elements.iter().find_map(|e| match e {
                TraceElement::ClassDef(c) if c.class_id == Some(class) => c.name.clone(),
                _ => None,
            });
            assert!(
                name.as_deref()
                    .is_some_and(|n| n.starts_with("Unloads") || n == "Unloadable"),
                "{name:?} was filtered out"
            );
        }
    }
    // The payloads were let go and collected: each allocated one is freed.
    let freed: std::collections::HashSet<u32> = elements
        .iter()
        .filter_map(|e| match e {
            TraceElement::ObjFree(f) => f.obj_id_ref,
            _ => None,
        })
        .collect();
    assert!(
        allocated.is_subset(&freed),
        "{} not freed",
        allocated.difference(&freed).count()
    );
    let unloadable = class_named("Unloadable").expect("Unloadable is defined");
    assert!(
        elements.iter().any(
            |e| matches!(e, TraceElement::ClassUnload(u) if u.class_id_ref == Some(unloadable))
        ),
        "no classUnload of Unloadable"
    );
}

#[test]
fn line_coverage_counts_each_lines_runs_exactly() {
    // The lines marked `// runs N` in LineCoverage.java run N times.
    let expected = marked_lines("LineCoverage");
    assert_eq!(expected.len(), 17);
    // Coverage alone, and with cpu=times.
    for options in [
        "format=x,coverage=y,filter=+LineCoverage$*;-*,file=trace.xml",
        "format=x,cpu=times,coverage=y,filter=+LineCoverage$*;-*,file=trace.xml",
    ] {
        let run = run_java_with(
            &["-Xverify:all"],
            Some(options),
            "LineCoverage",
            &[],
            Duration::from_secs(120),
        );
        assert!(run.success(), "{}", run.stderr());
        xmllint(&run);
        let elements = read_trace(&run.dir.join("trace.xml"));
        let problems = validate(elements.iter().cloned().map(Ok));
        assert!(problems.is_empty(), "{problems:#?}");
        let mut counts = coverage_line_counts(&elements, None);
        counts.retain(|line, _| expected.contains_key(line));
        assert_eq!(counts, expected, "{options}");
    }
}

/// The lines of a workload's source marked `// runs N`, with N.
fn marked_lines(workload: &str) -> std::collections::BTreeMap<u32, u64> {
    let source = std::fs::read_to_string(
        openprof_testkit::workspace_root().join(format!("java/workloads/{workload}.java")),
    )
    .unwrap();
    source
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            Some((
                index as u32 + 1,
                line.split("// runs ").nth(1)?.trim().parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_filter_that_lets_the_jdk_through_counts_exactly_and_never_hangs() {
    // `+Covers` includes every class no pattern matches, the JDK's among them: the rewriter
    // counts and times them too, except what its own hooks and counters run on, so the
    // program ends with its own output and Covers' lines count exactly. The user is told once
    // what such a filter does; a filter that ends in `-*` says nothing.
    let mut expected = marked_lines("Covers");
    assert_eq!(expected.len(), 5);
    expected.retain(|_, runs| *runs > 0);
    for options in [
        "format=x,coverage=y,filter=+Covers,file=trace.xml",
        "format=x,cpu=times,coverage=y,filter=+Covers,file=trace.xml",
        "format=x,cpu=times,coverage=y,filter=+Covers;-*,file=trace.xml",
    ] {
        let run = run_java_with(&[], Some(options), "Covers", &[], Duration::from_secs(180));
        assert!(run.success(), "{options}: {}", run.stderr());
        assert_eq!(run.stdout().trim(), "3334 / 6666 / 0", "{options}");
        let warnings = run.stderr().matches("lets through").count()
            + run.stderr().matches("matches no pattern").count();
        let closed = options.contains(";-*");
        assert_eq!(
            warnings,
            usize::from(!closed),
            "{options}: {}",
            run.stderr()
        );
        xmllint(&run);
        let elements = read_trace(&run.dir.join("trace.xml"));
        let problems = validate(elements.iter().cloned().map(Ok));
        assert!(problems.is_empty(), "{options}: {problems:#?}");
        let mut counts = coverage_line_counts(&elements, Some("Covers.java"));
        counts.retain(|line, _| expected.contains_key(line));
        assert_eq!(counts, expected, "{options}");
        if !closed {
            // The JDK's classes were counted too.
            let others = coverage_line_counts(&elements, Some("HashMap.java"));
            assert!(!others.is_empty(), "{options}: no line of HashMap counted");
        }
    }
}

#[test]
fn calls_into_untraced_classes_are_method_calls_each_paired_with_its_return() {
    // callsites=y: CallTree's calls into the JDK (left out by the filters) are methodCall and
    // methodReturn elements, by the callee the call names; the call Integer.parseInt throws
    // out of ends where main catches it.
    let (elements, names) = call_tree_trace(",callsites=y");
    let name = |id: Option<u32>| {
        let (class, method) = &names[&id.unwrap()];
        format!("{class}.{method}")
    };
    let mut calls: HashMap<String, u64> = HashMap::new();
    let mut open: HashMap<(u32, u128), String> = HashMap::new();
    let mut returned: HashMap<String, u64> = HashMap::new();
    for element in &elements {
        match element {
            TraceElement::MethodCall(call) => {
                let callee = name(call.method_id_ref);
                *calls.entry(callee.clone()).or_default() += 1;
                let key = (call.thread_id_ref.unwrap(), call.ticket.unwrap().0);
                assert!(open.insert(key, callee).is_none(), "a ticket used twice");
            }
            TraceElement::MethodReturn(back) => {
                let key = (back.thread_id_ref.unwrap(), back.ticket.unwrap().0);
                let callee = open.remove(&key).expect("a return of a call made");
                assert_eq!(Some(&callee), Some(&name(back.method_id_ref)));
                *returned.entry(callee).or_default() += 1;
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "calls that never returned: {open:?}");
    assert_eq!(calls, returned);
    for (callee, count) in [
        ("java.util.zip.Adler32.update", 300),
        ("java.util.zip.Adler32.<init>", 1),
        ("java.util.zip.Adler32.getValue", 1),
        ("java.lang.IllegalStateException.<init>", 30),
        ("java.lang.IllegalArgumentException.<init>", 5),
        ("java.lang.Integer.parseInt", 2),
        ("java.lang.Object.<init>", 300 + 10),
    ] {
        assert_eq!(calls.get(callee), Some(&count), "{callee}: {calls:?}");
    }
    // The traced methods' own entries are still there, exact.
    let entries = elements
        .iter()
        .filter(|e| matches!(e, TraceElement::MethodEntry(m) if name(m.method_id_ref) == "CallTree.leaf"))
        .count();
    assert_eq!(entries, 900);
}
