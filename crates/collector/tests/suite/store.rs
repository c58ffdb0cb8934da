//! The embedded store on real files: recorded traces cut into fragments, appended in order,
//! shuffled, duplicated, with a fragment missing, across reopening and torn segment tails,
//! resent, replayed, from two agents of one node, and exported with clocks aligned.
//! (Long because each test builds a store on real files and checks it whole; the fixtures at
//! the top serve them all.)

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use openprof_collector::scan::scan_fragment;
use openprof_collector::store::sqlite::{SqliteOptions, SqliteStore};
use openprof_collector::store::{
    AgentInfo, Catalog, ClockEstimate, ExportOptions, Received, Store, StoreError, TraceEntry,
};
use openprof_format::trace::attrs::{MultiPart, Seconds};
use openprof_format::trace::reader::read_all;
use openprof_format::trace::sample::Rng;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};
use openprof_format::trace::{
    AgentCreate, AgentDestroy, MethodEntry, MethodExit, NoContent, Node, ProcessCreate,
    TraceElement, TraceEnd, TraceStart, Values,
};
use openprof_format::wire::{FrameKind, Loss};
use uuid::Uuid;

/// One agent's recorded trace: its elements as written, in the order written.
struct Recording {
    node: Uuid,
    process: Uuid,
    agent: Uuid,
    trace: Uuid,
    elements: Vec<String>,
}

impl Recording {
    /// The whole recording as one TRACE document, each element on a line of its own: what an
    /// export of a complete trace must give back byte for byte.
    fn document(&self) -> String {
        let mut document = String::from(DOCUMENT_HEAD);
        for element in &self.elements {
            document.push_str(element);
            document.push('\n');
        }
        document.push_str(DOCUMENT_TAIL);
        document
    }

    fn info(&self) -> AgentInfo {
        AgentInfo {
            agent: self.agent,
            hostname: "build-7".into(),
            pid: 4242,
            format: "x".into(),
            options: "net=collector:7100,label=team:pay,label=env:test".into(),
        }
    }

    /// The elements from `first` to `last` (indices, inclusive) as one fragment body.
    fn body(&self, range: std::ops::RangeInclusive<usize>) -> Vec<u8> {
        let mut body = String::new();
        for element in &self.elements[range] {
            body.push_str(element);
            body.push('\n');
        }
        body.into_bytes()
    }

    /// Consecutive fragments of `per` elements each, covering the recording once.
    fn fragments(&self, per: usize) -> Vec<Vec<u8>> {
        (0..self.elements.len())
            .step_by(per)
            .map(|first| self.body(first..=(first + per - 1).min(self.elements.len() - 1)))
            .collect()
    }

    /// The collationValue of the element at `index` (node, processCreate, agentCreate and
    /// agentDestroy have none).
    fn collation_of(&self, index: usize) -> Option<u128> {
        scan_fragment(self.elements[index].as_bytes())
            .unwrap()
            .elements[0]
            .collation
    }

    /// The highest collationValue: traceEnd's.
    fn last_collation(&self) -> u128 {
        self.elements.len() as u128 - 4
    }
}

fn time(seconds: u64, nanos: u32) -> Seconds {
    Seconds {
        secs: seconds,
        nanos,
    }
}

/// The elements above and around a trace, realistic and valid against docs/trace.dtd.
fn hierarchy(
    node: Uuid,
    hostname: &str,
    process: Uuid,
    agent: Uuid,
    trace: Uuid,
) -> [TraceElement; 4] {
    [
        Node {
            node_id: node,
            hostname: hostname.into(),
            content: NoContent,
        }
        .into(),
        ProcessCreate {
            process_id: process,
            name: Some("java -jar shop.jar".into()),
            pid: 4242,
            node_id_ref: node,
            time: time(1_732_262_564, 100_000_000),
            environment: None,
            application_executable: Some("/usr/bin/java".into()),
            content: NoContent,
        }
        .into(),
        AgentCreate {
            agent_id: agent,
            process_id_ref: process,
            agent_name: "openprof".into(),
            time: time(1_732_262_564, 200_000_000),
            agent_parameters: Some("trace=methods,net=collector:7100".into()),
            version: Some("0.1.0".into()),
            content: NoContent,
        }
        .into(),
        TraceStart {
            trace_id: trace,
            agent_id_ref: agent,
            time: time(1_732_262_564, 300_000_000),
            collation_value: Some(MultiPart(1)),
            content: NoContent,
        }
        .into(),
    ]
}

/// A method entered or left, as the agent writes them (~235 bytes).
fn method_event(n: u64, trace: Uuid) -> TraceElement {
    let thread = (n % 7 + 1) as u32;
    let at = time(
        1_732_262_565 + n / 1_000_000,
        (n % 1_000_000) as u32 * 1000 + 17,
    );
    let cpu = Some(time(0, (n * 977 % 1_000_000_000) as u32));
    let method = (n * 31 % 5000) as u32;
    let ticket = Some(MultiPart(u128::from(n / 2 + 1)));
    let mut element: TraceElement = if n % 2 == 0 {
        MethodEntry {
            transient_thread_id_ref: None,
            thread_id_ref: Some(thread),
            time: Some(at),
            method_id_ref: Some(method),
            transient_method_id_ref: None,
            ticket,
            transient_obj_id_ref: None,
            obj_id_ref: Some((n * 7 % 100_000) as u32),
            transient_class_id_ref: None,
            class_id_ref: Some(method / 10),
            thread_cpu_time: cpu,
            sequence_counter: None,
            context_data: None,
            stack_depth: Some((n % 40) as u32),
            collation_value: None,
            trace_id_ref: None,
            content: Values::default(),
        }
        .into()
    } else {
        MethodExit {
            transient_thread_id_ref: None,
            thread_id_ref: Some(thread),
            time: Some(at),
            ticket,
            thread_cpu_time: cpu,
            method_id_ref: Some(method),
            transient_method_id_ref: None,
            transient_obj_id_ref: None,
            obj_id_ref: Some((n * 7 % 100_000) as u32),
            transient_class_id_ref: None,
            class_id_ref: Some(method / 10),
            sequence_counter: None,
            context_data: None,
            collation_value: None,
            trace_id_ref: None,
            content: Values::default(),
        }
        .into()
    };
    element.set_context(trace, MultiPart(u128::from(n)));
    element
}

fn is_hierarchy(element: &TraceElement) -> bool {
    matches!(
        element,
        TraceElement::Node(_)
            | TraceElement::ProcessCreate(_)
            | TraceElement::AgentCreate(_)
            | TraceElement::AgentDestroy(_)
            | TraceElement::TraceStart(_)
            | TraceElement::TraceEnd(_)
    )
}

/// A recorded trace of `count` elements between traceStart and traceEnd: random elements of
/// every kind that stands in a trace (`random`), or the agent's method events.
fn recording(node: Uuid, hostname: &str, count: u64, random: Option<u64>) -> Recording {
    let (process, agent, trace) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut elements: Vec<TraceElement> = hierarchy(node, hostname, process, agent, trace).into();
    let mut rng = Rng::new(random.unwrap_or(0));
    let mut n = 2;
    while n < count + 2 {
        let mut element = match random {
            Some(_) => TraceElement::sample(&mut rng),
            None => method_event(n, trace),
        };
        if is_hierarchy(&element) {
            continue;
        }
        element.set_context(trace, MultiPart(u128::from(n)));
        // Tag, code and objRef stand outside any trace: not exported with it.
        if element.collation_value().is_none() {
            continue;
        }
        elements.push(element);
        n += 1;
    }
    elements.push(
        TraceEnd {
            trace_id_ref: trace,
            time: time(1_732_262_600, 0),
            collation_value: Some(MultiPart(u128::from(n))),
            content: NoContent,
        }
        .into(),
    );
    elements.push(
        AgentDestroy {
            agent_id_ref: agent,
            time: time(1_732_262_601, 0),
            content: NoContent,
        }
        .into(),
    );
    let elements = elements
        .iter()
        .map(|element| {
            let mut text = String::new();
            element.write(&mut text);
            text
        })
        .collect();
    Recording {
        node,
        process,
        agent,
        trace,
        elements,
    }
}

fn fragment(agent: Uuid, sequence: u64, body: Vec<u8>) -> Received {
    let summary = Some(scan_fragment(&body).expect("a well-formed fragment"));
    Received {
        agent,
        kind: FrameKind::Fragment,
        sequence,
        body,
        summary,
        loss: None,
        received_ns: 1_732_262_564_000_000_000 + sequence,
    }
}

/// Bodies as fragments of one agent numbered from `first`.
fn frames(agent: Uuid, first: u64, bodies: &[Vec<u8>]) -> Vec<Received> {
    bodies
        .iter()
        .enumerate()
        .map(|(index, body)| fragment(agent, first + index as u64, body.clone()))
        .collect()
}

fn export(store: &SqliteStore, trace: Uuid, options: ExportOptions) -> String {
    let mut out = Vec::new();
    store.export_trace(trace, options, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn trace_entry(catalog: &Catalog, trace: Uuid) -> &TraceEntry {
    catalog
        .traces
        .iter()
        .find(|entry| entry.trace == trace)
        .expect("the trace is in the catalog")
}

/// Whether docs/trace.dtd accepts the document (xmllint).
fn assert_dtd_valid(document: &str, dir: &Path) {
    let path = dir.join("export.xml");
    std::fs::write(&path, document).unwrap();
    let dtd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/trace.dtd");
    let output = Command::new("xmllint")
        .arg("--noout")
        .arg("--dtdvalid")
        .arg(&dtd)
        .arg(&path)
        .output()
        .expect("xmllint runs");
    assert!(
        output.status.success(),
        "xmllint: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

#[test]
fn fragments_appended_in_order_export_as_the_original_document() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 300, Some(5));
    assert_eq!(store.open_agent(&recording.info()).unwrap(), 0);
    let bodies = recording.fragments(17);
    // Two group commits.
    let all = frames(recording.agent, 1, &bodies);
    let (first, second) = all.split_at(all.len() / 2);
    store.append(first).unwrap();
    store.append(second).unwrap();

    let document = export(&store, recording.trace, ExportOptions::default());
    assert_eq!(document, recording.document());
    assert_dtd_valid(&document, dir.path());

    let catalog = store.catalog().unwrap();
    assert_eq!(catalog.nodes.len(), 1);
    assert_eq!(catalog.nodes[0].node, recording.node);
    assert_eq!(catalog.nodes[0].hostname, "build-7");
    assert_eq!(catalog.processes.len(), 1);
    assert_eq!(catalog.processes[0].process, recording.process);
    assert_eq!(catalog.processes[0].node, recording.node);
    assert_eq!(catalog.processes[0].pid, 4242);
    let agent = &catalog.agents[0];
    assert_eq!(agent.agent, recording.agent);
    assert_eq!(agent.process, Some(recording.process));
    assert_eq!(agent.last_sequence, bodies.len() as u64);
    assert_eq!(agent.frames, bodies.len() as u64);
    assert_eq!(
        agent.bytes,
        bodies.iter().map(|body| body.len() as u64).sum::<u64>()
    );
    assert!(!agent.finished);
    // Its labels, from the options of its hello.
    assert_eq!(
        agent.labels,
        [("team", "pay"), ("env", "test")]
            .map(|(name, value)| (name.to_string(), value.to_string()))
    );
    let trace = trace_entry(&catalog, recording.trace);
    assert_eq!(trace.agent, recording.agent);
    assert_eq!(trace.elements, recording.last_collation() as u64);
    assert_eq!(trace.last_collation, recording.last_collation());
    assert_eq!(trace.duplicates, 0);
    assert!(trace.gaps.is_empty());
    assert!(trace.ended);
}

#[test]
fn realistic_method_events_export_valid_against_the_dtd() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 500, None);
    store.open_agent(&recording.info()).unwrap();
    store
        .append(&frames(recording.agent, 1, &recording.fragments(64)))
        .unwrap();
    let document = export(&store, recording.trace, ExportOptions::default());
    assert_eq!(document, recording.document());
    assert_dtd_valid(&document, dir.path());
}

#[test]
fn shuffled_duplicated_and_overlapping_fragments_export_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 400, Some(6));
    store.open_agent(&recording.info()).unwrap();
    let mut bodies = recording.fragments(23);
    // The same fragment twice, and fragments overlapping others.
    bodies.push(bodies[3].clone());
    bodies.push(recording.body(40..=80));
    bodies.push(recording.body(100..=103));
    bodies.push(recording.body(5..=5));
    // A fragment with an element twice inside it.
    let mut twice = recording.body(200..=201);
    twice.extend_from_slice(&recording.body(200..=200));
    bodies.push(twice);
    let mut rng = Rng::new(3);
    shuffle(&mut bodies, &mut rng);

    // Every element with a collationValue beyond its first arrival is a duplicate.
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for body in &bodies {
        for element in scan_fragment(body).unwrap().elements {
            if let Some(value) = element.collation {
                if !seen.insert(value) {
                    duplicates += 1;
                }
            }
        }
    }
    assert_eq!(duplicates, 23 + 41 + 4 + 1 + 3);

    // Sequences are the order of arrival; a few frames per group commit.
    let all = frames(recording.agent, 1, &bodies);
    for group in all.chunks(3) {
        store.append(group).unwrap();
    }
    let summary = {
        let mut out = Vec::new();
        let summary = store
            .export_trace(recording.trace, ExportOptions::default(), &mut out)
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), recording.document());
        summary
    };
    assert_eq!(summary.elements, recording.last_collation() as u64);
    assert_eq!(summary.duplicates_dropped, duplicates);
    assert!(summary.gaps.is_empty());

    let catalog = store.catalog().unwrap();
    let trace = trace_entry(&catalog, recording.trace);
    assert_eq!(trace.duplicates, duplicates);
    assert_eq!(trace.elements, recording.last_collation() as u64);
    assert!(trace.gaps.is_empty());
    assert!(trace.ended);
}

#[test]
fn a_missing_fragment_is_reported_as_exactly_its_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 300, Some(7));
    store.open_agent(&recording.info()).unwrap();
    let mut bodies = recording.fragments(20);
    // Elements 100..=119: collation values 98..=117.
    let lost = bodies.remove(5);
    let lost_values: Vec<u128> = scan_fragment(&lost)
        .unwrap()
        .elements
        .iter()
        .filter_map(|element| element.collation)
        .collect();
    let gap = (lost_values[0], *lost_values.last().unwrap());
    assert_eq!(gap, (98, 117));
    assert_eq!(recording.collation_of(119), Some(117));
    store.append(&frames(recording.agent, 1, &bodies)).unwrap();

    let catalog = store.catalog().unwrap();
    let trace = trace_entry(&catalog, recording.trace);
    assert_eq!(trace.gaps, vec![gap]);
    assert_eq!(trace.elements, recording.last_collation() as u64 - 20);
    assert_eq!(trace.last_collation, recording.last_collation());

    let mut out = Vec::new();
    let summary = store
        .export_trace(recording.trace, ExportOptions::default(), &mut out)
        .unwrap();
    assert_eq!(summary.gaps, vec![gap]);
    let mut expected = recording.elements.clone();
    expected.drain(100..120);
    let expected = Recording {
        elements: expected,
        ..recording
    };
    assert_eq!(String::from_utf8(out).unwrap(), expected.document());
}

#[test]
fn a_reopened_store_has_the_same_catalog_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 300, Some(8));
    let bodies = recording.fragments(25);
    let (catalog, document) = {
        let store = SqliteStore::open(dir.path()).unwrap();
        store.open_agent(&recording.info()).unwrap();
        store
            .record_clock(
                recording.agent,
                ClockEstimate {
                    offset_ns: -3_000,
                    error_ns: 150,
                    samples: 4,
                },
            )
            .unwrap();
        store
            .append(&frames(recording.agent, 1, &bodies[..6]))
            .unwrap();
        (
            store.catalog().unwrap(),
            export(&store, recording.trace, ExportOptions::default()),
        )
    };
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(store.catalog().unwrap(), catalog);
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        document
    );
    drop(store);

    // A group commit cut short by SIGKILL: its block written, the catalog not.
    let segment = dir.path().join("segments/000000.zst");
    let length = std::fs::metadata(&segment).unwrap().len();
    let mut torn = std::fs::read(&segment).unwrap();
    torn.extend_from_slice(&zstd::bulk::compress(b"<gcStart/>", 1).unwrap()[..9]);
    torn.extend_from_slice(b"garbage");
    std::fs::write(&segment, torn).unwrap();

    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), length);
    assert_eq!(store.catalog().unwrap(), catalog);
    assert_eq!(store.open_agent(&recording.info()).unwrap(), 6);
    store
        .append(&frames(recording.agent, 7, &bodies[6..]))
        .unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    drop(store);
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    let catalog = store.catalog().unwrap();
    assert_eq!(catalog.agents[0].last_sequence, bodies.len() as u64);
    assert_eq!(
        catalog.agents[0].clock,
        Some(ClockEstimate {
            offset_ns: -3_000,
            error_ns: 150,
            samples: 4
        })
    );
    assert!(trace_entry(&catalog, recording.trace).gaps.is_empty());
}

#[test]
fn resent_frames_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 200, Some(9));
    store.open_agent(&recording.info()).unwrap();
    let all = frames(recording.agent, 1, &recording.fragments(20));
    store.append(&all[..5]).unwrap();
    let before = store.catalog().unwrap();
    // A reconnection resends what was not acknowledged: 3..=5 are stored already.
    store.append(&all[2..5]).unwrap();
    assert_eq!(store.catalog().unwrap(), before);
    store.append(&all[2..]).unwrap();
    assert_eq!(
        store.open_agent(&recording.info()).unwrap(),
        all.len() as u64
    );
    assert_eq!(
        store.last_sequence(recording.agent).unwrap(),
        all.len() as u64
    );

    let catalog = store.catalog().unwrap();
    assert_eq!(catalog.agents[0].frames, all.len() as u64);
    let trace = trace_entry(&catalog, recording.trace);
    assert_eq!(trace.duplicates, 0);
    assert!(trace.gaps.is_empty());
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    let mut replayed = 0;
    store
        .replay_agent(recording.agent, &mut |_, _, _| {
            replayed += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(replayed, all.len());
}

#[test]
fn replay_gives_back_every_frame_as_received() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 100, Some(10));
    store.open_agent(&recording.info()).unwrap();
    let mut sent = frames(recording.agent, 1, &recording.fragments(30));
    let loss = Loss {
        frames: 3,
        bytes: 4096,
        first_sequence: 10,
        last_sequence: 12,
    };
    let next = sent.len() as u64 + 1;
    sent.push(Received {
        agent: recording.agent,
        kind: FrameKind::Loss,
        sequence: next,
        body: serde_json::to_vec(&loss).unwrap(),
        summary: None,
        loss: Some(loss),
        received_ns: 5,
    });
    sent.push(Received {
        agent: recording.agent,
        kind: FrameKind::Hprof,
        sequence: next + 1,
        body: b"JAVA PROFILE 1.0.1\n\x00binary\xff".to_vec(),
        summary: None,
        loss: None,
        received_ns: 6,
    });
    sent.push(Received {
        agent: recording.agent,
        kind: FrameKind::Goodbye,
        sequence: next + 2,
        body: Vec::new(),
        summary: None,
        loss: None,
        received_ns: 7,
    });
    for frame in &sent {
        store.append(std::slice::from_ref(frame)).unwrap();
    }
    let mut replayed = Vec::new();
    store
        .replay_agent(recording.agent, &mut |kind, sequence, body| {
            replayed.push((kind, sequence, body.to_vec()));
            Ok(())
        })
        .unwrap();
    let expected: Vec<_> = sent
        .iter()
        .map(|frame| (frame.kind, frame.sequence, frame.body.clone()))
        .collect();
    assert_eq!(replayed, expected);

    let catalog = store.catalog().unwrap();
    let agent = &catalog.agents[0];
    assert!(agent.finished);
    assert_eq!((agent.lost_frames, agent.lost_bytes), (3, 4096));
    assert!(matches!(
        store.replay_agent(Uuid::new_v4(), &mut |_, _, _| Ok(())),
        Err(StoreError::NoSuchAgent(_))
    ));
    assert!(matches!(
        store.export_trace(Uuid::new_v4(), ExportOptions::default(), &mut Vec::new()),
        Err(StoreError::NoSuchTrace(_))
    ));
}

#[test]
fn two_agents_of_one_node_share_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let node = Uuid::new_v4();
    let first = recording(node, "build-7", 150, Some(11));
    let second = recording(node, "build-7", 120, None);
    store.open_agent(&first.info()).unwrap();
    store.open_agent(&second.info()).unwrap();
    // Interleaved in the same group commits.
    let mut all = frames(first.agent, 1, &first.fragments(16));
    all.extend(frames(second.agent, 1, &second.fragments(16)));
    let mut rng = Rng::new(4);
    shuffle(&mut all, &mut rng);
    all.sort_by_key(|frame| frame.sequence);
    for group in all.chunks(5) {
        store.append(group).unwrap();
    }
    let catalog = store.catalog().unwrap();
    assert_eq!(catalog.nodes.len(), 1);
    assert_eq!(catalog.processes.len(), 2);
    assert!(catalog.processes.iter().all(|process| process.node == node));
    assert_eq!(catalog.agents.len(), 2);
    assert_eq!(catalog.traces.len(), 2);
    for recording in [&first, &second] {
        let agent = catalog
            .agents
            .iter()
            .find(|agent| agent.agent == recording.agent)
            .unwrap();
        assert_eq!(agent.process, Some(recording.process));
        let trace = trace_entry(&catalog, recording.trace);
        assert_eq!(trace.agent, recording.agent);
        assert!(trace.gaps.is_empty() && trace.duplicates == 0 && trace.ended);
        assert_eq!(
            export(&store, recording.trace, ExportOptions::default()),
            recording.document()
        );
    }
}

#[test]
fn aligned_clocks_shift_times_by_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 100, None);
    store.open_agent(&recording.info()).unwrap();
    store
        .append(&frames(recording.agent, 1, &recording.fragments(40)))
        .unwrap();
    // The agent's clock runs 1.5 s ahead of the collector's.
    let offset_ns: i64 = 1_500_000_000;
    store
        .record_clock(
            recording.agent,
            ClockEstimate {
                offset_ns,
                error_ns: 20_000,
                samples: 8,
            },
        )
        .unwrap();
    let aligned = export(&store, recording.trace, ExportOptions { align_clock: true });
    let original = recording.document();
    let times = |document: &str| -> Vec<(String, Option<u128>)> {
        read_all(document.as_bytes())
            .map(|element| {
                let element = element.unwrap();
                let time = match &element {
                    TraceElement::Node(_) => None,
                    TraceElement::ProcessCreate(e) => Some(e.time),
                    TraceElement::AgentCreate(e) => Some(e.time),
                    TraceElement::AgentDestroy(e) => Some(e.time),
                    TraceElement::TraceStart(e) => Some(e.time),
                    TraceElement::TraceEnd(e) => Some(e.time),
                    TraceElement::MethodEntry(e) => e.time,
                    TraceElement::MethodExit(e) => e.time,
                    other => panic!("unexpected <{}>", other.tag()),
                };
                (element.tag().to_string(), time.map(Seconds::as_nanos))
            })
            .collect()
    };
    let before = times(&original);
    let after = times(&aligned);
    assert_eq!(before.len(), after.len());
    for ((tag, before), (tag_after, after)) in before.iter().zip(&after) {
        assert_eq!(tag, tag_after);
        assert_eq!(
            after.map(|t| t as i128),
            before.map(|t| t as i128 - i128::from(offset_ns)),
            "{tag}"
        );
    }
    // Everything but the times is as it was.
    let strip = |document: &str| -> Vec<TraceElement> {
        read_all(document.as_bytes())
            .map(|element| {
                let mut element = element.unwrap();
                match &mut element {
                    TraceElement::ProcessCreate(e) => e.time = Seconds::default(),
                    TraceElement::AgentCreate(e) => e.time = Seconds::default(),
                    TraceElement::AgentDestroy(e) => e.time = Seconds::default(),
                    TraceElement::TraceStart(e) => e.time = Seconds::default(),
                    TraceElement::TraceEnd(e) => e.time = Seconds::default(),
                    TraceElement::MethodEntry(e) => e.time = None,
                    TraceElement::MethodExit(e) => e.time = None,
                    _ => {}
                }
                element
            })
            .collect()
    };
    assert_eq!(strip(&aligned), strip(&original));
    assert_dtd_valid(&aligned, dir.path());
    // Without alignment, the bytes as received.
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        original
    );
}

#[test]
fn the_first_received_of_a_collation_value_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 50, None);
    store.open_agent(&recording.info()).unwrap();
    // A different element sent with collationValue 10 after the real one, in the same commit
    // and in a later one: dropped on export, counted as duplicates.
    let impostor = |seconds: u64| {
        let mut element = method_event(8, recording.trace);
        element.set_context(recording.trace, MultiPart(10));
        if let TraceElement::MethodEntry(entry) = &mut element {
            entry.time = Some(time(seconds, 0));
        }
        let mut text = String::new();
        element.write(&mut text);
        text.push('\n');
        text.into_bytes()
    };
    let mut bodies = recording.fragments(10);
    bodies.insert(2, impostor(1));
    bodies.push(impostor(2));
    let all = frames(recording.agent, 1, &bodies);
    store.append(&all[..4]).unwrap();
    store.append(&all[4..]).unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    assert_eq!(
        trace_entry(&store.catalog().unwrap(), recording.trace).duplicates,
        2
    );
}

#[test]
fn a_failed_append_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 100, Some(12));
    store.open_agent(&recording.info()).unwrap();
    let bodies = recording.fragments(10);
    let all = frames(recording.agent, 1, &bodies);
    store.append(&all[..3]).unwrap();
    let catalog = store.catalog().unwrap();
    let segment = dir.path().join("segments/000000.zst");
    let length = std::fs::metadata(&segment).unwrap().len();

    // The block is written before the catalog finds that a summary does not fit its body.
    let mut broken = all[3..6].to_vec();
    broken[2].summary = all[0].summary.clone();
    broken[2].body.truncate(10);
    assert!(store.append(&broken).is_err());
    assert_eq!(store.catalog().unwrap(), catalog);
    assert_eq!(store.last_sequence(recording.agent).unwrap(), 3);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), length);

    store.append(&all[3..]).unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    drop(store);
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
}

#[test]
fn segments_roll_over_and_reopen_across_them() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        segment_bytes: 4096,
        ..SqliteOptions::default()
    };
    let recording = recording(Uuid::new_v4(), "build-7", 600, Some(13));
    let bodies = recording.fragments(7);
    let all = frames(recording.agent, 1, &bodies);
    {
        let store = SqliteStore::open_with(dir.path(), options).unwrap();
        for group in all[..60].chunks(4) {
            store.append(group).unwrap();
        }
    }
    let segments = || {
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("segments"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let before = segments();
    assert!(before.len() > 3, "{before:?}");
    // A torn tail on the last segment only.
    let last = dir.path().join("segments").join(before.last().unwrap());
    let length = std::fs::metadata(&last).unwrap().len();
    let mut torn = std::fs::read(&last).unwrap();
    torn.extend_from_slice(b"\x28\xb5\x2f\xfd torn");
    std::fs::write(&last, torn).unwrap();

    let store = SqliteStore::open_with(dir.path(), options).unwrap();
    assert_eq!(std::fs::metadata(&last).unwrap().len(), length);
    for group in all[60..].chunks(4) {
        store.append(group).unwrap();
    }
    assert!(segments().len() > before.len());
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
    let mut replayed = Vec::new();
    store
        .replay_agent(recording.agent, &mut |_, _, body| {
            replayed.push(body.to_vec());
            Ok(())
        })
        .unwrap();
    assert_eq!(replayed, bodies);
}

#[test]
fn a_second_opener_reads_while_the_writer_writes() {
    let dir = tempfile::tempdir().unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 200, Some(14));
    let all = frames(recording.agent, 1, &recording.fragments(20));
    let writer = SqliteStore::open(dir.path()).unwrap();
    assert!(!writer.is_read_only());
    writer.open_agent(&recording.info()).unwrap();
    writer.append(&all[..4]).unwrap();

    // The writer is between writing a block and committing it.
    let segment = dir.path().join("segments/000000.zst");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    std::io::Write::write_all(&mut file, b"a block being committed").unwrap();
    let length = std::fs::metadata(&segment).unwrap().len();

    // A second writer is refused, naming the store and who holds it.
    match SqliteStore::open(dir.path()) {
        Err(StoreError::Locked { dir: locked, pid }) => {
            assert_eq!(locked, dir.path());
            assert_eq!(pid, Some(std::process::id()));
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a second writer opened the store"),
    }
    let reader = SqliteStore::open_read_only(dir.path()).unwrap();
    assert!(reader.is_read_only());
    assert_eq!(
        std::fs::metadata(&segment).unwrap().len(),
        length,
        "a reader cuts nothing"
    );
    assert_eq!(reader.catalog().unwrap(), writer.catalog().unwrap());
    assert!(reader.append(&all[4..5]).is_err());
    assert!(reader.open_agent(&recording.info()).is_err());

    // The reader follows the writer.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(length - 23)
        .unwrap();
    writer.append(&all[4..]).unwrap();
    assert_eq!(reader.catalog().unwrap(), writer.catalog().unwrap());
    assert_eq!(
        reader.last_sequence(recording.agent).unwrap(),
        all.len() as u64
    );
    assert_eq!(
        export(&reader, recording.trace, ExportOptions::default()),
        recording.document()
    );
    let explicit = SqliteStore::open_read_only(dir.path()).unwrap();
    assert!(explicit.is_read_only());
    assert_eq!(explicit.catalog().unwrap(), writer.catalog().unwrap());

    // Once the writer is gone, the next opener writes (even while readers read).
    drop(writer);
    let next = SqliteStore::open(dir.path()).unwrap();
    assert!(!next.is_read_only());
    assert!(explicit.catalog().is_ok());

    let empty = tempfile::tempdir().unwrap();
    assert!(SqliteStore::open_read_only(empty.path()).is_err());
}

#[test]
fn exports_run_while_another_thread_appends() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<SqliteStore>();

    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(dir.path()).unwrap());
    let first = recording(Uuid::new_v4(), "build-7", 300, None);
    let second = recording(first.node, "build-7", 3000, None);
    store
        .append(&frames(first.agent, 1, &first.fragments(50)))
        .unwrap();
    let writer = {
        let store = store.clone();
        let all = frames(second.agent, 1, &second.fragments(30));
        std::thread::spawn(move || {
            for group in all.chunks(2) {
                store.append(group).unwrap();
            }
        })
    };
    for _ in 0..20 {
        assert_eq!(
            export(&store, first.trace, ExportOptions::default()),
            first.document()
        );
        store.catalog().unwrap();
    }
    writer.join().unwrap();
    assert_eq!(
        export(&store, second.trace, ExportOptions::default()),
        second.document()
    );
}

/// Scan and append throughput on realistic method events; run with
/// `cargo test --release -p openprof-collector --test suite -- --ignored --nocapture throughput`.
#[test]
#[ignore]
fn throughput() {
    let trace = Uuid::new_v4();
    let agent = Uuid::new_v4();
    // 64 KiB fragments, as the agent sends them.
    let mut bodies = Vec::new();
    let mut body = String::new();
    let mut elements = 0u64;
    let mut n = 2;
    while bodies.len() < 1600 {
        method_event(n, trace).write(&mut body);
        body.push('\n');
        n += 1;
        elements += 1;
        if body.len() >= 64 * 1024 {
            bodies.push(std::mem::take(&mut body).into_bytes());
        }
    }
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    println!(
        "{} fragments, {elements} elements, {:.0} bytes per element",
        bodies.len(),
        bytes as f64 / elements as f64
    );

    let mut best = f64::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        for body in &bodies {
            std::hint::black_box(scan_fragment(body).unwrap());
        }
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!(
        "scan: {:.2} M elements/s, {:.0} MB/s",
        elements as f64 / best / 1e6,
        bytes as f64 / best / 1e6
    );

    for (per_commit, zstd_level) in [(1, 1), (16, 1), (64, 1), (64, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            zstd_level,
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(dir.path(), options).unwrap();
        let all = frames(agent, 1, &bodies);
        let started = Instant::now();
        for group in all.chunks(per_commit) {
            store.append(group).unwrap();
        }
        let seconds = started.elapsed().as_secs_f64();
        let stored: u64 = std::fs::read_dir(dir.path().join("segments"))
            .unwrap()
            .map(|entry| entry.unwrap().metadata().unwrap().len())
            .sum();
        println!(
            "append, {per_commit} frames per commit, zstd {zstd_level}: {:.2} M elements/s, \
             {:.0} MB/s, {:.1} ms per commit, compressed to {:.1}%",
            elements as f64 / seconds / 1e6,
            bytes as f64 / seconds / 1e6,
            seconds * 1e3 / all.chunks(per_commit).len() as f64,
            stored as f64 * 100.0 / bytes as f64
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    store.append(&frames(agent, 1, &bodies)).unwrap();
    for align_clock in [false, true] {
        let started = Instant::now();
        let mut out = Vec::new();
        store
            .export_trace(trace, ExportOptions { align_clock }, &mut out)
            .unwrap();
        println!(
            "export{}: {:.2} M elements/s",
            if align_clock { ", clock aligned" } else { "" },
            elements as f64 / started.elapsed().as_secs_f64() / 1e6
        );
    }
}

#[test]
fn a_store_at_its_limit_refuses_appends_and_keeps_what_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let recording = recording(Uuid::new_v4(), "build-7", 3000, Some(15));
    let all = frames(recording.agent, 1, &recording.fragments(30));
    let limit = 64 << 10;
    let store = SqliteStore::open_with(
        dir.path(),
        SqliteOptions {
            max_bytes: Some(limit),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    store.open_agent(&recording.info()).unwrap();
    let mut stored = 0;
    let refusal = loop {
        match store.append(&all[stored..stored + 1]) {
            Ok(()) => stored += 1,
            Err(error) => break error,
        }
        assert!(stored < all.len(), "the limit was never reached");
    };
    assert!(matches!(refusal, StoreError::Full { limit: l, .. } if l == limit));
    assert!(
        refusal.to_string().contains("the store is full"),
        "{refusal}"
    );
    assert_eq!(store.last_sequence(recording.agent).unwrap(), stored as u64);
    // Refused again, and the same after reopening: the limit holds what is on disk.
    assert!(store.append(&all[stored..stored + 1]).is_err());
    let on_disk: u64 = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum::<u64>()
        + std::fs::metadata(dir.path().join("catalog.sqlite"))
            .unwrap()
            .len();
    assert!(on_disk <= limit, "{on_disk} bytes");
    drop(store);
    let store = SqliteStore::open_with(
        dir.path(),
        SqliteOptions {
            max_bytes: Some(limit),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    assert!(store.append(&all[stored..stored + 1]).is_err());
    // New agent ids do not grow the catalog past the limit either: handshakes with fresh ids
    // are refused as the store is full (before, 3,000 of them took a 1 MiB store to 17 MB),
    // while the agent the store has may still come back for its data.
    let mut accepted = 0;
    let mut refused = None;
    for _ in 0..3000 {
        match store.bind_identity(Uuid::new_v4(), &[7u8; 32]) {
            Ok(_) if refused.is_none() => accepted += 1,
            Ok(_) => panic!("a new agent accepted after {accepted} and a refusal"),
            Err(error) => refused = Some(error),
        }
    }
    let refused = refused.expect("new agents were refused once the store was full");
    assert!(matches!(refused, StoreError::Full { .. }), "{refused}");
    assert!(accepted < 3000, "{accepted}");
    let info = AgentInfo {
        agent: Uuid::new_v4(),
        ..recording.info()
    };
    assert!(matches!(
        store.open_agent(&info),
        Err(StoreError::Full { .. })
    ));
    assert_eq!(store.open_agent(&recording.info()).unwrap(), stored as u64);
    // Without the limit the rest goes in and the trace is whole.
    drop(store);
    let store = SqliteStore::open(dir.path()).unwrap();
    store.append(&all[stored..]).unwrap();
    assert_eq!(
        export(&store, recording.trace, ExportOptions::default()),
        recording.document()
    );
}
