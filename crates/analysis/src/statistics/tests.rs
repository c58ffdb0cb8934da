//! The statistics on hand-built profiles whose every figure is known, and the index against a
//! direct fold of random profiles.

use std::collections::{BTreeMap, BTreeSet};

use openprof_format::mpt_stats::{MptTable, ValueKey, ValueType};
use proptest::prelude::*;
use regex::Regex;

use super::*;
use crate::profile::{
    Frame, FrameKind, LockWait, Profile, Sample, Span, SpanKind, ThreadId, STATE_LABEL,
};
use crate::views::{self, ViewOptions};

const RUN: &str = "java.lang.Thread.run";
const HANDLE: &str = "com.acme.web.Handler.handle";
const QUERY: &str = "com.acme.db.Dao.query";
const FETCH: &str = "com.acme.db.Dao.fetch";
const GET: &str = "java.util.HashMap.get";
const MS: u64 = 1_000_000;

struct Add<'a> {
    frames: &'a [Frame],
    event: Event,
    value: u64,
    count: u64,
    thread: Option<ThreadId>,
    labels: Vec<(String, String)>,
}

fn add(profile: &mut Profile, sample: Add<'_>) {
    let stack = profile.stack_of_frames_leaf_first(sample.frames.iter().rev().cloned());
    profile.add_sample(Sample {
        stack,
        event: sample.event,
        value: sample.value,
        count: sample.count,
        thread: sample.thread,
        time_ns: None,
        labels: sample.labels,
    });
}

fn java(names: &[&str]) -> Vec<Frame> {
    names.iter().map(|name| Frame::java(*name)).collect()
}

fn with_leaf(names: &[&str], leaf: Frame) -> Vec<Frame> {
    let mut frames = java(names);
    frames.push(leaf);
    frames
}

fn state(name: &str) -> Vec<(String, String)> {
    vec![(STATE_LABEL.to_string(), name.to_string())]
}

/// Two threads of a web handler calling a DAO and a map: CPU, wall clock with states,
/// allocations, lock waits; every figure below is counted by hand.
fn shop() -> Profile {
    let mut profile = Profile::new("shop");
    let main = profile.thread_id(1, "main");
    let worker = profile.thread_id(2, "worker");
    for (frames, count, thread) in [
        (java(&[RUN, HANDLE, QUERY, FETCH]), 5, main),
        (java(&[RUN, HANDLE, GET]), 3, main),
        (java(&[RUN, HANDLE, QUERY]), 2, worker),
        // Recursion: handle and query twice on one stack, each counted once in totals.
        (java(&[RUN, HANDLE, QUERY, HANDLE, QUERY]), 1, worker),
    ] {
        add(
            &mut profile,
            Add {
                frames: &frames,
                event: Event::Cpu,
                value: count,
                count,
                thread: Some(thread),
                labels: Vec::new(),
            },
        );
    }
    for (frames, count, thread, state_name) in [
        (java(&[RUN, HANDLE, QUERY]), 4, main, "running"),
        (java(&[RUN, HANDLE, GET]), 2, main, "blocked"),
        (java(&[RUN, HANDLE]), 6, worker, "parked"),
    ] {
        add(
            &mut profile,
            Add {
                frames: &frames,
                event: Event::Wall,
                value: count,
                count,
                thread: Some(thread),
                labels: state(state_name),
            },
        );
    }
    let class = |name: &str| Frame {
        name: name.to_string(),
        file: None,
        line: None,
        kind: FrameKind::AllocatedClass,
    };
    for (frames, values) in [
        (
            with_leaf(&[RUN, HANDLE, QUERY], class("byte[]")),
            [1000, 10, 400, 4],
        ),
        (
            with_leaf(&[RUN, HANDLE, GET], class("java.lang.String")),
            [300, 5, 0, 0],
        ),
    ] {
        for (event, value) in ALLOCATION_EVENTS.into_iter().zip(values) {
            add(
                &mut profile,
                Add {
                    frames: &frames,
                    event,
                    value,
                    count: values[1],
                    thread: Some(main),
                    labels: Vec::new(),
                },
            );
        }
    }
    let blocked = with_leaf(
        &[RUN, HANDLE, QUERY],
        LockWait::Blocked.class_frame("java.lang.Object"),
    );
    add(
        &mut profile,
        Add {
            frames: &blocked,
            event: Event::Lock,
            value: 2 * MS,
            count: 2,
            thread: Some(main),
            labels: LockWait::Blocked.labels(Some("java.lang.Object")),
        },
    );
    let parked = with_leaf(
        &[RUN, HANDLE],
        LockWait::Parked.class_frame("java.util.concurrent.locks.ReentrantLock$NonfairSync"),
    );
    add(
        &mut profile,
        Add {
            frames: &parked,
            event: Event::Lock,
            value: MS,
            count: 1,
            thread: Some(worker),
            labels: LockWait::Parked
                .labels(Some("java.util.concurrent.locks.ReentrantLock$NonfairSync")),
        },
    );
    profile
}

fn index(profile: &Profile) -> StatisticsIndex {
    StatisticsIndex::build(profile, &ViewOptions::default())
}

/// (self, total) values of the named rows.
fn self_total<'a>(rows: impl Iterator<Item = (&'a str, Weights)>) -> BTreeMap<String, (u64, u64)> {
    rows.map(|(name, weights)| (name.to_string(), (weights.self_value, weights.total_value)))
        .collect()
}

#[test]
fn classes_and_packages_of_names() {
    assert_eq!(class_of("java.util.HashMap.getNode"), "java.util.HashMap");
    assert_eq!(class_of("Calls.work"), "Calls");
    assert_eq!(class_of("main"), "main");
    assert_eq!(package_of("java.util.HashMap"), "java.util");
    assert_eq!(package_of("java.lang.Object[][]"), "java.lang");
    assert_eq!(package_of("byte[]"), "java.lang");
    assert_eq!(package_of("Calls"), DEFAULT_PACKAGE);
    assert_eq!(
        package_of("com.acme.Foo$$Lambda/0x0000000800c03000"),
        "com.acme"
    );
}

#[test]
fn methods_self_and_total_count_recursion_once() {
    let index = index(&shop());
    let stats = index.methods(None, MethodSort::SelfValue, false).unwrap();
    assert_eq!((stats.event, stats.total_value), (Event::Cpu, 11));
    let rows = self_total(
        stats
            .methods
            .iter()
            .map(|method| (method.row.name.as_str(), method.row.weights)),
    );
    let expected: BTreeMap<String, (u64, u64)> = [
        (RUN, (0, 11)),
        (HANDLE, (0, 11)),
        (QUERY, (3, 8)),
        (FETCH, (5, 5)),
        (GET, (3, 3)),
    ]
    .into_iter()
    .map(|(name, figures)| (name.to_string(), figures))
    .collect();
    assert_eq!(rows, expected);
    // Sorted by self (then total, then name).
    let order: Vec<&str> = stats
        .methods
        .iter()
        .map(|method| method.row.name.as_str())
        .collect();
    assert_eq!(order, [FETCH, QUERY, GET, HANDLE, RUN]);
    let fetch = &stats.methods[0];
    assert!((fetch.row.self_percent - 100.0 * 5.0 / 11.0).abs() < 1e-9);
    assert!(fetch.calls.is_none(), "a sampled profile has no calls");

    let by_name = index.methods(None, MethodSort::Name, false).unwrap();
    assert_eq!(by_name.methods[0].row.name, FETCH);
    assert_eq!(by_name.methods[4].row.name, GET);
    // Split by thread: query on main 5 (total), on the worker 3.
    let split = index.methods(None, MethodSort::Total, true).unwrap();
    let query: BTreeMap<String, (u64, u64)> = split
        .methods
        .iter()
        .filter(|method| method.row.name == QUERY)
        .map(|method| {
            (
                method.row.thread.as_ref().unwrap().name.clone(),
                (
                    method.row.weights.self_value,
                    method.row.weights.total_value,
                ),
            )
        })
        .collect();
    assert_eq!(query["main"], (0, 5));
    assert_eq!(query["worker"], (3, 3));
}

#[test]
fn a_method_looked_up_has_its_callers_callees_threads_and_allocations() {
    let index = index(&shop());
    let query = index.lookup(QUERY, 0).unwrap();
    assert_eq!(query.resource.kind, ResourceKind::Method);
    assert_eq!(query.parent.as_ref().unwrap().name, "com.acme.db.Dao");
    let cpu = query
        .events
        .iter()
        .find(|weights| weights.event == Event::Cpu)
        .unwrap();
    assert_eq!((cpu.weights.self_value, cpu.weights.total_value), (3, 8));
    let related = |rows: &[Related], event: Event| -> BTreeMap<String, (u64, u64)> {
        self_total(
            rows.iter()
                .filter(|row| row.event == event)
                .map(|row| (row.resource.name.as_str(), row.weights)),
        )
    };
    // Callers: handle (8, of which 3 with query the leaf), once per stack despite recursion.
    assert_eq!(
        related(&query.callers, Event::Cpu),
        [(HANDLE.to_string(), (3, 8))].into()
    );
    assert_eq!(
        related(&query.callees, Event::Cpu),
        [(FETCH.to_string(), (5, 5)), (HANDLE.to_string(), (0, 1))].into()
    );
    assert_eq!(
        related(&query.threads, Event::Cpu),
        [("main".to_string(), (0, 5)), ("worker".to_string(), (3, 3))].into()
    );
    assert_eq!(
        related(&query.allocations, Event::AllocBytes),
        [("byte[]".to_string(), (1000, 1000))].into()
    );
    let wall_states: BTreeMap<&str, u64> = query
        .states
        .iter()
        .filter(|row| row.event == Event::Wall)
        .map(|row| (row.state.as_str(), row.weights.total_value))
        .collect();
    assert_eq!(wall_states, [("running", 4)].into());
    let waits: Vec<(Option<&str>, Option<&str>, u64, u64)> = query
        .lock_waits
        .iter()
        .map(|row| {
            (
                row.state.as_deref(),
                row.lock_class.as_deref(),
                row.weights.self_value,
                row.weights.self_count,
            )
        })
        .collect();
    assert_eq!(
        waits,
        [(Some("blocked"), Some("java.lang.Object"), 2 * MS, 2)]
    );
    // `top` keeps the heaviest per event.
    let top = index.lookup(QUERY, 1).unwrap();
    assert_eq!(related(&top.callees, Event::Cpu).len(), 1);
    assert_eq!(top.callees[0].resource.name, FETCH);
}

#[test]
fn classes_packages_and_threads_looked_up() {
    let index = index(&shop());
    let dao = index.lookup("class:com.acme.db.Dao", 0).unwrap();
    let cpu = |stats: &ResourceStats| {
        let weights = stats
            .events
            .iter()
            .find(|weights| weights.event == Event::Cpu)
            .unwrap()
            .weights;
        (weights.self_value, weights.total_value)
    };
    assert_eq!(cpu(&dao), (8, 8));
    // Calls within a class are not class edges; the recursion makes Dao a caller of Handler.
    let callers: Vec<(&str, u64, u64)> = dao
        .callers
        .iter()
        .filter(|row| row.event == Event::Cpu)
        .map(|row| {
            (
                row.resource.name.as_str(),
                row.weights.self_value,
                row.weights.total_value,
            )
        })
        .collect();
    assert_eq!(callers, [("com.acme.web.Handler", 8, 8)]);
    let methods: Vec<&str> = dao
        .contents
        .iter()
        .filter(|row| row.event == Event::Cpu)
        .map(|row| row.resource.name.as_str())
        .collect();
    assert_eq!(methods, [QUERY, FETCH]);
    let package = index.lookup("com.acme.db", 0).unwrap();
    assert_eq!(package.resource.kind, ResourceKind::Package);
    assert_eq!(cpu(&package), (8, 8));
    let java_lang = index.lookup("package:java.lang", 0).unwrap();
    assert_eq!(cpu(&java_lang), (0, 11));

    // A class as allocated and as locked: who allocates it, who waits for it.
    let bytes = index.lookup("byte[]", 0).unwrap();
    assert_eq!(bytes.resource.kind, ResourceKind::Class);
    assert_eq!(bytes.parent.as_ref().unwrap().name, "java.lang");
    let allocated: Vec<(&str, Event, u64)> = bytes
        .allocated_by
        .iter()
        .map(|row| {
            (
                row.resource.name.as_str(),
                row.event,
                row.weights.self_value,
            )
        })
        .collect();
    assert!(
        allocated.contains(&(QUERY, Event::AllocBytes, 1000)),
        "{allocated:?}"
    );
    assert!(
        allocated.contains(&(QUERY, Event::LiveObjects, 4)),
        "{allocated:?}"
    );
    let object = index.lookup("java.lang.Object", 0).unwrap();
    let waiters: Vec<(&str, u64, u64)> = object
        .lock_waiters
        .iter()
        .filter(|row| row.weights.self_value > 0)
        .map(|row| {
            (
                row.resource.name.as_str(),
                row.weights.self_value,
                row.weights.self_count,
            )
        })
        .collect();
    assert_eq!(waiters, [(QUERY, 2 * MS, 2)]);
    assert_eq!(object.waited_on.len(), 1);
    assert_eq!(
        (
            object.waited_on[0].event,
            object.waited_on[0].weights.total_value,
            object.waited_on[0].weights.total_count
        ),
        (Event::Lock, 2 * MS, 2)
    );

    let main = index.lookup("main", 0).unwrap();
    assert_eq!(main.resource.kind, ResourceKind::Thread);
    assert_eq!(main.resource.thread_id, Some(1));
    assert_eq!(cpu(&main), (8, 8));
    let hot: Vec<(&str, u64)> = main
        .contents
        .iter()
        .filter(|row| row.event == Event::Cpu && row.weights.self_value > 0)
        .map(|row| (row.resource.name.as_str(), row.weights.self_value))
        .collect();
    assert_eq!(hot, [(FETCH, 5), (GET, 3)]);
    let parked = index.lookup("thread:worker tid=2", 0).unwrap();
    assert_eq!(parked.lock_waits[0].state.as_deref(), Some("parked"));
    assert_eq!(parked.lock_waits[0].weights.total_value, MS);
}

#[test]
fn unknown_and_ambiguous_names_are_errors_that_help() {
    let mut profile = shop();
    let twin = profile.thread_id(3, "worker");
    add(
        &mut profile,
        Add {
            frames: &java(&[RUN]),
            event: Event::Cpu,
            value: 1,
            count: 1,
            thread: Some(twin),
            labels: Vec::new(),
        },
    );
    let index = index(&profile);
    let error = index.lookup("Dao.quer", 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no method, class, package or thread is named \"Dao.quer\" in shop; did you mean \
         method:com.acme.db.Dao.query?"
    );
    assert_eq!(
        index.lookup("class:nothing", 0).unwrap_err().to_string(),
        "no class is named \"nothing\" in shop"
    );
    let error = index.lookup("worker", 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "2 threads are named \"worker\": name one as \"worker tid=2\" or \"worker tid=3\""
    );
    assert!(index.lookup("worker tid=3", 0).is_ok());
    assert_eq!(
        index
            .methods(Some(Event::CpuTime), MethodSort::SelfValue, false)
            .unwrap_err()
            .to_string(),
        "shop has no cpu_time samples; it has: cpu, wall, alloc_bytes, alloc_objects, \
         live_bytes, live_objects, lock"
    );
}

#[test]
fn allocations_by_class_method_and_site() {
    let index = index(&shop());
    let stats = index.allocations(None, false).unwrap();
    assert_eq!(stats.sorted_by, Event::AllocBytes);
    assert_eq!(stats.totals, [1300, 15, 400, 4]);
    let class = &stats.by_class[0];
    assert_eq!(class.class.as_deref(), Some("byte[]"));
    assert_eq!(
        (
            class.alloc_bytes,
            class.alloc_objects,
            class.live_bytes,
            class.live_objects
        ),
        (1000, 10, 400, 4)
    );
    assert!((class.alloc_bytes_percent - 100.0 * 1000.0 / 1300.0).abs() < 1e-9);
    assert_eq!(class.live_bytes_percent, 100.0);
    let methods: Vec<(&str, u64)> = stats
        .by_method
        .iter()
        .map(|row| (row.method.as_deref().unwrap(), row.alloc_bytes))
        .collect();
    assert_eq!(methods, [(QUERY, 1000), (GET, 300)]);
    assert_eq!(stats.by_site[1].class.as_deref(), Some("java.lang.String"));
    assert_eq!(stats.by_site[1].method.as_deref(), Some(GET));
    // By live bytes, String (none live) last.
    let live = index.allocations(Some(Event::LiveBytes), false).unwrap();
    assert_eq!(live.by_class[1].class.as_deref(), Some("java.lang.String"));
    assert_eq!(
        index.allocations(Some(Event::Cpu), false).unwrap_err(),
        StatsError::NotAllocationEvent { event: Event::Cpu }
    );
    let mut sampled = Profile::new("cpu only");
    add(
        &mut sampled,
        Add {
            frames: &java(&[RUN]),
            event: Event::Cpu,
            value: 1,
            count: 1,
            thread: None,
            labels: Vec::new(),
        },
    );
    let error = self::index(&sampled).allocations(None, false).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cpu only holds no samples of allocations"),
        "{error}"
    );
}

#[test]
fn threads_with_states_and_lock_waits() {
    let index = index(&shop());
    let stats = index.threads(None).unwrap();
    assert_eq!(stats.sorted_by, Event::Cpu);
    let main = &stats.threads[0];
    assert_eq!((main.name.as_str(), main.thread_id), ("main", Some(1)));
    assert_eq!((main.cpu_samples, main.wall_samples), (8, 6));
    assert!((main.cpu_percent - 100.0 * 8.0 / 11.0).abs() < 1e-9);
    assert_eq!(
        main.wall_states,
        [("running".to_string(), 4), ("blocked".to_string(), 2)].into()
    );
    assert_eq!(
        (
            main.lock_ns,
            main.lock_waits,
            main.blocked_ns,
            main.parked_ns
        ),
        (2 * MS, 2, 2 * MS, 0)
    );
    assert_eq!(main.alloc_bytes, 1300);
    let worker = &stats.threads[1];
    assert_eq!((worker.cpu_samples, worker.parked_ns), (3, MS));
    assert_eq!(worker.wall_states, [("parked".to_string(), 6)].into());
    let by_wall = index.threads(Some(Event::Wall)).unwrap();
    assert_eq!(by_wall.threads.len(), 2);
}

#[test]
fn a_timeline_buckets_each_threads_samples() {
    let mut profile = Profile::new("timed");
    let one = profile.thread_id(1, "one");
    let two = profile.thread_id(2, "two");
    let stack = profile.stack_of_frames_leaf_first([Frame::java("A.a")]);
    for (thread, time_ms, state_name) in [
        (one, 0, "running"),
        (one, 5, "running"),
        (one, 15, "sleeping"),
        (two, 12, "running"),
        (two, 29, "running"),
    ] {
        profile.add_sample(Sample {
            stack,
            event: Event::Wall,
            value: 1,
            count: 1,
            thread: Some(thread),
            time_ns: Some(time_ms * MS),
            labels: state(state_name),
        });
    }
    let timeline = thread_timeline(&profile, &ViewOptions::default(), None, Some(10 * MS)).unwrap();
    assert_eq!((timeline.event, timeline.buckets), (Event::Wall, 3));
    let one = &timeline.threads[0];
    assert_eq!(
        (one.name.as_str(), one.values.as_slice()),
        ("one", &[2, 1, 0][..])
    );
    assert_eq!(one.states["sleeping"], [0, 1, 0]);
    assert_eq!(timeline.threads[1].values, [0, 1, 1]);
    // The window: from 10 ms on.
    let later = ViewOptions {
        from_ns: Some(10 * MS),
        ..ViewOptions::default()
    };
    let timeline = thread_timeline(&profile, &later, None, Some(10 * MS)).unwrap();
    assert_eq!((timeline.start_ns, timeline.buckets), (10 * MS, 2));
    assert_eq!(
        timeline.threads[0].total, 2,
        "two's samples at 12 and 29 ms"
    );
    // Defaults: at most 20 buckets of 1, 2 or 5 times a power of ten.
    let timeline = thread_timeline(&profile, &ViewOptions::default(), None, None).unwrap();
    assert_eq!(timeline.bucket_ns, 2 * MS);
    assert_eq!(
        thread_timeline(&shop(), &ViewOptions::default(), None, None).unwrap_err(),
        StatsError::NoTimes {
            profile: "shop".into(),
            event: Event::Cpu
        }
    );
}

#[test]
fn component_maps_parse_match_and_name_their_faults() {
    let map = ComponentMap::parse(
        "# the shop\npersistence = com.acme.db.*\nweb = com.acme.web, com.acme.*.rest\n\
         everything else = *\n",
    )
    .unwrap();
    assert_eq!(map.rules.len(), 4);
    assert_eq!(map.component_of("com.acme.db"), "persistence");
    assert_eq!(map.component_of("com.acme.db.jdbc"), "persistence");
    assert_eq!(map.component_of("com.acme.dbx"), "everything else");
    assert_eq!(map.component_of("com.acme.web"), "web");
    assert_eq!(map.component_of("com.acme.web.forms"), "everything else");
    assert_eq!(map.component_of("com.acme.shop.rest"), "web");
    assert_eq!(map.component_of(DEFAULT_PACKAGE), "everything else");
    assert_eq!(map.component_of("[native]"), "other");
    let faults = [
        ("web com.acme", "line 1, column 1: expected COMPONENT = PATTERN"),
        ("\n  = com.acme", "line 2, column 3: no component name before '='"),
        ("web =", "line 1, column 6: no package pattern after '=' for \"web\""),
        ("web = a,, b", "line 1, column 9: empty package pattern"),
        (
            "web = com.acme*",
            "line 1, column 11: \"com.acme*\": a * stands for a whole package name (write \
             com.acme.* for a package and the packages under it)",
        ),
        (
            "web = com..acme",
            "line 1, column 11: \"com..acme\" is not a package pattern: an empty package name",
        ),
        (
            "db = ok\nweb = com.ac me",
            "line 2, column 11: \"com.ac me\" is not a package pattern: ' ' is not part of a Java name",
        ),
        (
            "web = com.9x",
            "line 1, column 11: \"com.9x\" is not a package pattern: \"9x\" does not start as a \
             Java name does",
        ),
        ("a, b = c", "line 1, column 2: a component name holds no ','"),
        ("# nothing\n\n", "line 1, column 1: the map has no rules"),
    ];
    for (text, expected) in faults {
        let error = ComponentMap::parse(text).unwrap_err().to_string();
        assert!(error.starts_with(expected), "{text:?}: {error}");
    }
}

#[test]
fn components_packages_and_loaders_self_and_total() {
    let mut profile = shop();
    profile.add_class_loader("com.acme.db.Dao", "1: app");
    profile.add_class_loader("com.acme.db.Dao", "2: plugins");
    profile.add_class_loader("com.acme.web.Handler", "1: app");
    let index = index(&profile);
    let map = ComponentMap::parse("web = com.acme.web.*\ndb = com.acme.db\n").unwrap();
    let stats = index.components(None, Some(&map), false).unwrap();
    let rows =
        |rows: &[WeightedRow]| self_total(rows.iter().map(|row| (row.name.as_str(), row.weights)));
    assert_eq!(
        rows(stats.components.as_ref().unwrap()),
        [
            ("db".to_string(), (8, 8)),
            ("other".to_string(), (3, 11)),
            ("web".to_string(), (0, 11)),
        ]
        .into()
    );
    assert_eq!(
        rows(&stats.packages),
        [
            ("com.acme.db".to_string(), (8, 8)),
            ("com.acme.web".to_string(), (0, 11)),
            ("java.lang".to_string(), (0, 11)),
            ("java.util".to_string(), (3, 3)),
        ]
        .into()
    );
    assert_eq!(stats.components.as_ref().unwrap()[0].name, "db");
    assert_eq!(
        rows(stats.loaders.as_ref().unwrap()),
        [
            ("1: app".to_string(), (0, 11)),
            ("1: app, 2: plugins".to_string(), (8, 8)),
            ("[unknown loader]".to_string(), (3, 11)),
        ]
        .into()
    );
    let split = index.components(None, Some(&map), true).unwrap();
    let db_on: BTreeMap<String, u64> = split
        .components
        .unwrap()
        .iter()
        .filter(|row| row.name == "db")
        .map(|row| {
            (
                row.thread.as_ref().unwrap().name.clone(),
                row.weights.self_value,
            )
        })
        .collect();
    assert_eq!(
        db_on,
        [("main".to_string(), 5), ("worker".to_string(), 3)].into()
    );
    let without = self::index(&shop()).components(None, None, false).unwrap();
    assert!(without.components.is_none() && without.loaders.is_none());
    assert_eq!(
        without.loaders_note.as_deref(),
        Some("shop does not tell class loaders (traces, format=x, and JFR recordings do)")
    );
}

/// A traced run: outer() once, calling inner() three times; each call's own CPU time and span.
fn traced(summed: bool) -> Profile {
    let mut profile = Profile::new("traced");
    let thread = profile.thread_id(1, "main");
    let outer = profile.stack_of_frames_leaf_first([Frame::java("a.Outer.run")]);
    let inner = profile
        .stack_of_frames_leaf_first([Frame::java("a.Inner.step"), Frame::java("a.Outer.run")]);
    let sample = |stack, event, value, count| Sample {
        stack,
        event,
        value,
        count,
        thread: Some(thread),
        time_ns: Some(0),
        labels: Vec::new(),
    };
    profile.add_sample(sample(outer, Event::Calls, 1, 1));
    profile.add_sample(sample(outer, Event::CpuTime, 10, 1));
    if summed {
        profile.add_sample(sample(inner, Event::Calls, 3, 3));
        profile.add_sample(sample(inner, Event::CpuTime, 18, 3));
    } else {
        for cpu in [4, 6, 8] {
            profile.add_sample(sample(inner, Event::Calls, 1, 1));
            profile.add_sample(sample(inner, Event::CpuTime, cpu, 1));
        }
    }
    let outer_frame = profile.stack(outer)[0];
    let inner_frame = profile.stack(inner)[1];
    for (frame, start, end) in [
        (outer_frame, 0, 100),
        (inner_frame, 10, 20),
        (inner_frame, 30, 50),
        (inner_frame, 60, 63),
    ] {
        profile.spans.push(Span {
            thread: Some(thread),
            frame,
            kind: SpanKind::Call,
            start_ns: start,
            end_ns: end,
        });
    }
    let mut table = MptTable::new("a.Inner.step(int)", "Inner.step(int) 1");
    table.record(ValueKey::new(ValueType::Int, "5"), 20, 4);
    profile.mpt.push(table);
    profile
}

#[test]
fn calls_counted_and_timed_per_call() {
    let index = index(&traced(false));
    let stats = index
        .methods(Some(Event::CpuTime), MethodSort::Calls, false)
        .unwrap();
    let inner = &stats.methods[0];
    assert_eq!(inner.row.name, "a.Inner.step");
    let calls = inner.calls.as_ref().unwrap();
    assert_eq!(calls.calls, 3);
    let wall = calls.wall.as_ref().unwrap();
    assert_eq!(
        (
            wall.count,
            wall.total_ns,
            wall.mean_ns,
            wall.min_ns,
            wall.max_ns
        ),
        (3, 33, 11, 3, 20)
    );
    let cpu = calls.cpu.as_ref().unwrap();
    assert_eq!(
        (
            cpu.self_total_ns,
            cpu.self_mean_ns,
            cpu.self_min_ns,
            cpu.self_max_ns
        ),
        (18, 6, Some(4), Some(8))
    );
    let outer = stats.methods[1].calls.as_ref().unwrap();
    let outer_cpu = outer.cpu.as_ref().unwrap();
    assert_eq!(
        (
            outer.calls,
            outer_cpu.self_total_ns,
            outer_cpu.total_ns,
            outer_cpu.total_mean_ns
        ),
        (1, 10, 28, 28)
    );
    // Slowest per call first.
    let by_wall = index
        .methods(Some(Event::CpuTime), MethodSort::WallMean, false)
        .unwrap();
    assert_eq!(by_wall.methods[0].row.name, "a.Outer.run");

    // Rows that sum calls (HPROF's CPU TIME): the mean, no extremes.
    let summed = self::index(&traced(true));
    let stats = summed
        .methods(Some(Event::CpuTime), MethodSort::Calls, false)
        .unwrap();
    let cpu = stats.methods[0]
        .calls
        .as_ref()
        .unwrap()
        .cpu
        .clone()
        .unwrap();
    assert_eq!(
        (cpu.self_mean_ns, cpu.self_min_ns, cpu.self_max_ns),
        (6, None, None)
    );

    // Parameter tracing's table comes with the method.
    let step = index.lookup("a.Inner.step", 0).unwrap();
    assert_eq!(step.mpt.len(), 1);
    assert_eq!(step.mpt[0].values[0].value, "5");
    assert_eq!(step.mpt[0].values[0].wall_total_ns, 20);
    assert_eq!(step.calls.as_ref().unwrap().calls, 3);
}

#[test]
fn filters_apply_before_statistics() {
    let options = ViewOptions {
        include: vec![Regex::new("HashMap").unwrap()],
        ..ViewOptions::default()
    };
    let index = StatisticsIndex::build(&shop(), &options);
    let stats = index
        .methods(Some(Event::Cpu), MethodSort::SelfValue, false)
        .unwrap();
    assert_eq!(stats.total_value, 3);
    assert_eq!(stats.methods[0].row.name, GET);
    assert_eq!(index.event_total(Event::Wall), (2, 2));
}

#[test]
fn differences_by_change_of_share() {
    let base = shop();
    let mut new = shop();
    let main = new.thread_id(1, "main");
    add(
        &mut new,
        Add {
            frames: &java(&[RUN, HANDLE, GET]),
            event: Event::Cpu,
            value: 11,
            count: 11,
            thread: Some(main),
            labels: Vec::new(),
        },
    );
    let (base, new) = (index(&base), index(&new));
    let diff = StatsDiff::of(DiffKind::Methods, &base, &new, None, None).unwrap();
    assert_eq!(
        (diff.event, diff.base_total, diff.new_total),
        (Event::Cpu, 11, 22)
    );
    let top = &diff.rows[0];
    assert_eq!(top.name, GET);
    assert_eq!(
        (top.base.self_value, top.new.self_value, top.self_change),
        (3, 14, 11)
    );
    assert!((top.self_percent_change - (100.0 * 14.0 / 22.0 - 100.0 * 3.0 / 11.0)).abs() < 1e-9);
    let threads = StatsDiff::of(DiffKind::Threads, &base, &new, None, None).unwrap();
    // main's share grew as much as the worker's shrank.
    let changes: BTreeMap<&str, (i64, i64)> = threads
        .rows
        .iter()
        .map(|row| {
            (
                row.name.as_str(),
                (
                    row.total_change,
                    (row.total_percent_change * 1e6).round() as i64,
                ),
            )
        })
        .collect();
    let grew: f64 = (100.0 * 19.0 / 22.0 - 100.0 * 8.0 / 11.0) * 1e6;
    assert_eq!(changes["main"], (11, grew.round() as i64));
    assert_eq!(changes["worker"], (0, -(grew.round() as i64)));
    let map = ComponentMap::parse("db = com.acme.db.*").unwrap();
    let components = StatsDiff::of(DiffKind::Components, &base, &new, None, Some(&map)).unwrap();
    let names: BTreeSet<&str> = components
        .rows
        .iter()
        .map(|row| row.name.as_str())
        .collect();
    assert_eq!(names, ["db", "other"].into());
    let allocations = StatsDiff::of(DiffKind::Allocations, &base, &new, None, None).unwrap();
    assert_eq!(allocations.event, Event::AllocBytes);
    assert!(allocations.rows.iter().all(|row| row.self_change == 0));
}

#[test]
fn results_serialize_as_json() {
    let index = index(&shop());
    let json = serde_json::to_value(index.lookup(QUERY, 2).unwrap()).unwrap();
    assert_eq!(json["resource"]["kind"], "method");
    assert_eq!(json["events"][0]["event"], "cpu");
    assert_eq!(json["events"][0]["unit"], "samples");
    assert_eq!(json["events"][0]["self_value"], 3);
    assert_eq!(json["callers"][0]["name"], HANDLE);
    let json =
        serde_json::to_value(index.methods(None, MethodSort::SelfValue, false).unwrap()).unwrap();
    assert_eq!(json["sort"], "self");
    assert_eq!(json["methods"][0]["name"], FETCH);
}

/// A profile of up to 40 stacks over 12 methods in 6 classes and 3 packages, on up to 3
/// threads (and none), of CPU and wall samples.
fn random_profile() -> impl Strategy<Value = Profile> {
    let stack = prop::collection::vec(0usize..12, 1..8);
    let sample = (stack, 0u64..5, 1u64..20, prop::bool::ANY);
    prop::collection::vec(sample, 1..40).prop_map(|samples| {
        let mut profile = Profile::new("random");
        let threads: Vec<ThreadId> = (0..3)
            .map(|id| profile.thread_id(id, &format!("t{id}")))
            .collect();
        for (methods, thread, count, wall) in samples {
            let frames: Vec<Frame> = methods
                .iter()
                .map(|method| Frame::java(format!("p{}.C{}.m{}", method % 3, method % 6, method)))
                .collect();
            let stack = profile.stack_of_frames_leaf_first(frames.into_iter().rev());
            profile.add_sample(Sample {
                stack,
                event: if wall { Event::Wall } else { Event::Cpu },
                value: count,
                count,
                thread: threads.get(thread as usize).copied(),
                time_ns: None,
                labels: Vec::new(),
            });
        }
        profile
    })
}

/// Per (caller, callee) of adjacent frames, the weight of the folded stacks holding that pair,
/// each stack once.
fn folded_edges(folded: &views::Folded) -> BTreeMap<(String, String), u64> {
    let mut edges = BTreeMap::new();
    for (stack, weight) in &folded.stacks {
        let names: Vec<&str> = stack
            .iter()
            .map(|id| folded.frame(*id).name.as_str())
            .collect();
        let pairs: BTreeSet<(String, String)> = names
            .windows(2)
            .map(|pair| (pair[0].to_string(), pair[1].to_string()))
            .collect();
        for pair in pairs {
            *edges.entry(pair).or_insert(0) += weight;
        }
    }
    edges
}

proptest! {
    /// The index's methods, edges, threads and packages are those of the views' own fold, with
    /// and without a filter.
    #[test]
    fn the_index_agrees_with_a_direct_fold(profile in random_profile(), filtered in prop::bool::ANY) {
        let options = ViewOptions {
            include: if filtered { vec![Regex::new("m[0-5]$").unwrap()] } else { Vec::new() },
            ..ViewOptions::default()
        };
        let index = StatisticsIndex::build(&profile, &options);
        for event in profile.events() {
            let folded = views::fold(&profile, &ViewOptions { event: Some(event), ..options.clone() });
            let expected: BTreeMap<String, (u64, u64)> = views::tree::top_methods(&folded)
                .into_iter()
                .map(|method| (method.name, (method.self_weight, method.total)))
                .collect();
            let stats = index.methods(Some(event), MethodSort::Name, false).unwrap();
            let methods: BTreeMap<String, (u64, u64)> = stats
                .methods
                .iter()
                .map(|method| (method.row.name.clone(), (method.row.weights.self_count, method.row.weights.total_count)))
                .collect();
            prop_assert_eq!(&methods, &expected);
            prop_assert_eq!(stats.total_count, folded.total);

            let mut edges = BTreeMap::new();
            for name in expected.keys() {
                let stats = index.lookup(&format!("method:{name}"), 0).unwrap();
                for callee in stats.callees.iter().filter(|row| row.event == event) {
                    edges.insert((name.clone(), callee.resource.name.clone()), callee.weights.total_count);
                }
                // Every caller row is some callee row seen from the other side.
                for caller in stats.callers.iter().filter(|row| row.event == event) {
                    let callees = index.lookup(&format!("method:{}", caller.resource.name), 0).unwrap().callees;
                    prop_assert!(callees.iter().any(|row| row.event == event && row.resource.name == *name && row.weights == caller.weights));
                }
            }
            prop_assert_eq!(edges, folded_edges(&folded));

            let by_thread = views::fold(&profile, &ViewOptions { event: Some(event), by_thread: true, ..options.clone() });
            let mut threads: BTreeMap<String, u64> = BTreeMap::new();
            for (stack, weight) in &by_thread.stacks {
                let root = by_thread.frame(stack[0]).name.clone();
                *threads.entry(root).or_insert(0) += weight;
            }
            let rows: BTreeMap<String, u64> = index
                .threads(Some(event))
                .unwrap()
                .threads
                .iter()
                .filter(|row| row.events.iter().any(|weights| weights.event == event))
                .map(|row| {
                    let name = match row.thread_id {
                        Some(id) => format!("[{} tid={id}]", row.name),
                        None => row.name.clone(),
                    };
                    let weights = row.events.iter().find(|weights| weights.event == event).unwrap();
                    (name, weights.weights.total_count)
                })
                .collect();
            prop_assert_eq!(rows, threads);

            let mut packages: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            for (stack, weight) in &folded.stacks {
                let names: Vec<&str> = stack.iter().map(|id| folded.frame(*id).name.as_str()).collect();
                let distinct: BTreeSet<&str> = names.iter().map(|name| package_of(class_of(name))).collect();
                for package in distinct {
                    packages.entry(package.to_string()).or_default().1 += weight;
                }
                packages.entry(package_of(class_of(names[names.len() - 1])).to_string()).or_default().0 += weight;
            }
            let components = index.components(Some(event), None, false).unwrap();
            let rows: BTreeMap<String, (u64, u64)> = components
                .packages
                .iter()
                .map(|row| (row.name.clone(), (row.weights.self_count, row.weights.total_count)))
                .collect();
            prop_assert_eq!(rows, packages.clone());
            for (package, (self_weight, total)) in packages {
                let stats = index.lookup(&format!("package:{package}"), 0).unwrap();
                let weights = stats.events.iter().find(|weights| weights.event == event).unwrap().weights;
                prop_assert_eq!((weights.self_count, weights.total_count), (self_weight, total));
            }
        }
    }
}

/// The web UI keeps one index per profile and serves lookups from many threads.
#[test]
fn an_index_is_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<StatisticsIndex>();
    shared::<ResourceStats>();
}
