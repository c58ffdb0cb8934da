//! The embedded store: one directory with an SQLite catalog (`catalog.sqlite`) and
//! zstd-compressed segments (`segments/NNNNNN.zst`) of the frames exactly as received. Each
//! append is one group commit: one zstd block appended and synced, then one SQLite transaction
//! indexing it. A crash between the two leaves an unindexed tail, cut off at the next open.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use openprof_format::trace::attrs::Seconds;
use openprof_format::trace::reader::read_all;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};
use openprof_format::trace::TraceElement;
use openprof_format::wire::FrameKind;
use rusqlite::{params, Connection, OptionalExtension};
use uuid::Uuid;

use super::{
    AgentEntry, AgentInfo, Catalog, ClockEstimate, ExportOptions, ExportSummary, FrameVisitor,
    NodeEntry, ProcessEntry, Received, Store, StoreError, TraceEntry,
};
use crate::scan::scan_fragment;

/// A segment past this size is closed and the next one started.
const SEGMENT_BYTES: u64 = 64 << 20;
/// zstd level 1: ingest speed matters more than the last few percent of size.
const ZSTD_LEVEL: i32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agents (
    agent TEXT PRIMARY KEY, hostname TEXT, pid INTEGER, format TEXT, options TEXT,
    process TEXT, last_sequence INTEGER NOT NULL DEFAULT 0, frames INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0, lost_frames INTEGER NOT NULL DEFAULT 0,
    lost_bytes INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0,
    clock_offset INTEGER, clock_error INTEGER, clock_samples INTEGER);
CREATE TABLE IF NOT EXISTS nodes (node TEXT PRIMARY KEY, hostname TEXT, element BLOB);
CREATE TABLE IF NOT EXISTS processes (
    process TEXT PRIMARY KEY, node TEXT, pid INTEGER, name TEXT, element BLOB);
CREATE TABLE IF NOT EXISTS agent_elements (
    agent TEXT PRIMARY KEY, process TEXT, create_element BLOB, destroy_element BLOB);
CREATE TABLE IF NOT EXISTS traces (
    trace TEXT PRIMARY KEY, agent TEXT, creator TEXT, elements INTEGER NOT NULL,
    duplicates INTEGER NOT NULL, ranges TEXT NOT NULL, ended INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS frames (
    agent TEXT NOT NULL, sequence INTEGER NOT NULL, kind INTEGER NOT NULL,
    segment INTEGER NOT NULL, block_offset INTEGER NOT NULL, block_length INTEGER NOT NULL,
    inner_offset INTEGER NOT NULL, inner_length INTEGER NOT NULL, received_ns INTEGER NOT NULL,
    PRIMARY KEY (agent, sequence));
CREATE TABLE IF NOT EXISTS frame_traces (
    trace TEXT NOT NULL, agent TEXT NOT NULL, sequence INTEGER NOT NULL,
    PRIMARY KEY (trace, agent, sequence));
";

/// An agent's process and its agentCreate and agentDestroy elements as received.
type AgentElements = (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>);

/// Per trace: which collation values arrived, as disjoint inclusive ranges (start → end).
#[derive(Clone, Debug, Default)]
struct Collation {
    agent: Uuid,
    creator: Option<Uuid>,
    ranges: BTreeMap<u128, u128>,
    elements: u64,
    duplicates: u64,
    ended: bool,
}

impl Collation {
    /// Adds a value; false when it was there already.
    fn insert(&mut self, value: u128) -> bool {
        if let Some((&start, &end)) = self.ranges.range(..=value).next_back() {
            if value <= end {
                return false;
            }
            if end + 1 == value {
                let mut new_end = value;
                if let Some(&next_end) = self.ranges.get(&(value + 1)) {
                    self.ranges.remove(&(value + 1));
                    new_end = next_end;
                }
                self.ranges.insert(start, new_end);
                return true;
            }
        }
        if let Some(&next_end) = self.ranges.get(&(value + 1)) {
            self.ranges.remove(&(value + 1));
            self.ranges.insert(value, next_end);
        } else {
            self.ranges.insert(value, value);
        }
        true
    }

    fn gaps(&self) -> Vec<(u128, u128)> {
        let mut gaps = Vec::new();
        let mut expected = 1u128;
        for (&start, &end) in &self.ranges {
            if start > expected {
                gaps.push((expected, start - 1));
            }
            expected = end + 1;
        }
        gaps
    }

    fn last(&self) -> u128 {
        self.ranges.values().next_back().copied().unwrap_or(0)
    }

    fn ranges_text(&self) -> String {
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|(start, end)| format!("{start}-{end}"))
            .collect();
        parts.join(",")
    }

    fn parse_ranges(text: &str) -> BTreeMap<u128, u128> {
        text.split(',')
            .filter_map(|part| {
                let (start, end) = part.split_once('-')?;
                Some((start.parse().ok()?, end.parse().ok()?))
            })
            .collect()
    }
}

struct Inner {
    db: Connection,
    dir: PathBuf,
    segment: u64,
    segment_file: File,
    segment_length: u64,
    last_sequence: HashMap<Uuid, u64>,
    traces: HashMap<Uuid, Collation>,
}

/// The embedded store. One mutex serialises appends and queries: appends are group commits
/// from one writer thread, queries are rare.
pub struct SqliteStore {
    inner: Mutex<Inner>,
}

fn other(message: impl Into<String>) -> StoreError {
    StoreError::Other(message.into())
}

fn uuid_of(text: String) -> Result<Uuid, StoreError> {
    Uuid::parse_str(&text).map_err(|_| other(format!("catalog holds a bad id '{text}'")))
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join("segments").join(format!("{segment:06}.zst"))
}

impl SqliteStore {
    /// Opens the store in `dir`, creating it if needed; cuts any segment tail a crash left
    /// unindexed.
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(dir.join("segments"))?;
        let db = Connection::open(dir.join("catalog.sqlite"))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(SCHEMA)?;
        // Cut every segment to the end of the last block the catalog indexes.
        let mut ends: HashMap<u64, u64> = HashMap::new();
        {
            let mut query = db.prepare(
                "SELECT segment, MAX(block_offset + block_length) FROM frames GROUP BY segment",
            )?;
            let rows =
                query.query_map([], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)))?;
            for row in rows {
                let (segment, end) = row?;
                ends.insert(segment as u64, end as u64);
            }
        }
        let mut segment = 0;
        for entry in std::fs::read_dir(dir.join("segments"))? {
            let path = entry?.path();
            let Some(number) = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .and_then(|stem| stem.parse::<u64>().ok())
            else {
                continue;
            };
            let end = ends.get(&number).copied().unwrap_or(0);
            let file = OpenOptions::new().write(true).open(&path)?;
            if file.metadata()?.len() > end {
                file.set_len(end)?;
                file.sync_all()?;
            }
            segment = segment.max(number);
        }
        let path = segment_path(dir, segment);
        let segment_file = OpenOptions::new().create(true).append(true).open(&path)?;
        let segment_length = segment_file.metadata()?.len();

        let mut last_sequence = HashMap::new();
        {
            let mut query = db.prepare("SELECT agent, last_sequence FROM agents")?;
            let rows = query.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })?;
            for row in rows {
                let (agent, sequence) = row?;
                last_sequence.insert(uuid_of(agent)?, sequence as u64);
            }
        }
        let mut traces = HashMap::new();
        {
            let mut query = db.prepare(
                "SELECT trace, agent, creator, elements, duplicates, ranges, ended FROM traces",
            )?;
            let rows = query.query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, i64>(4)?,
                    row.get::<_, String>(5)?,
                    row.get::<_, bool>(6)?,
                ))
            })?;
            for row in rows {
                let (trace, agent, creator, elements, duplicates, ranges, ended) = row?;
                traces.insert(
                    uuid_of(trace)?,
                    Collation {
                        agent: uuid_of(agent)?,
                        creator: creator.map(uuid_of).transpose()?,
                        ranges: Collation::parse_ranges(&ranges),
                        elements: elements as u64,
                        duplicates: duplicates as u64,
                        ended,
                    },
                );
            }
        }
        Ok(SqliteStore {
            inner: Mutex::new(Inner {
                db,
                dir: dir.to_path_buf(),
                segment,
                segment_file,
                segment_length,
                last_sequence,
                traces,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Reads one stored frame's body.
fn read_frame_body(
    dir: &Path,
    cache: &mut Option<((u64, u64), Vec<u8>)>,
    segment: u64,
    block_offset: u64,
    block_length: u64,
    inner_offset: usize,
    inner_length: usize,
) -> Result<Vec<u8>, StoreError> {
    let key = (segment, block_offset);
    if cache.as_ref().is_none_or(|(cached, _)| *cached != key) {
        let mut file = File::open(segment_path(dir, segment))?;
        file.seek(SeekFrom::Start(block_offset))?;
        let mut block = vec![0u8; block_length as usize];
        file.read_exact(&mut block)?;
        let data = zstd::stream::decode_all(block.as_slice())?;
        *cache = Some((key, data));
    }
    let data = &cache.as_ref().expect("just filled").1;
    data.get(inner_offset..inner_offset + inner_length)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            other(format!(
                "segment {segment} block {block_offset} is shorter than indexed"
            ))
        })
}

fn shift_time(element: &mut TraceElement, offset_ns: i64) {
    fn shift(time: &mut Seconds, offset_ns: i64) {
        let nanos = time.as_nanos() as i128 - i128::from(offset_ns);
        *time = Seconds::from_nanos(nanos.max(0) as u128);
    }
    macro_rules! optional {
        ($($variant:ident),*) => {
            match element {
                $(TraceElement::$variant(e) => { if let Some(time) = &mut e.time { shift(time, offset_ns) } })*
                TraceElement::ProcessCreate(e) => shift(&mut e.time, offset_ns),
                TraceElement::AgentCreate(e) => shift(&mut e.time, offset_ns),
                TraceElement::AgentDestroy(e) => shift(&mut e.time, offset_ns),
                TraceElement::TraceStart(e) => shift(&mut e.time, offset_ns),
                TraceElement::TraceEnd(e) => shift(&mut e.time, offset_ns),
                _ => {}
            }
        };
    }
    optional!(
        ProcessSuspend,
        ProcessResume,
        ThreadStart,
        ThreadEnd,
        ClassDef,
        ClassUnload,
        ObjAlloc,
        ObjFree,
        ObjMove,
        MethodEntry,
        MethodExit,
        MethodCall,
        MethodReturn,
        Line,
        GcStart,
        GcFinish,
        Throw,
        Catch,
        RuntimeInitDone,
        RuntimeShutdown,
        MonitorContendedEnter,
        MonitorContendedEntered,
        MonitorWait,
        MonitorWaited,
        Snapshot
    )
}

impl Store for SqliteStore {
    fn open_agent(&self, info: &AgentInfo) -> Result<u64, StoreError> {
        let inner = self.lock();
        inner.db.execute(
            "INSERT INTO agents (agent, hostname, pid, format, options) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(agent) DO UPDATE SET hostname = ?2, pid = ?3, format = ?4, options = ?5",
            params![
                info.agent.to_string(),
                info.hostname,
                info.pid,
                info.format,
                info.options
            ],
        )?;
        Ok(inner.last_sequence.get(&info.agent).copied().unwrap_or(0))
    }

    fn append(&self, frames: &[Received]) -> Result<(), StoreError> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        // Resends of what is stored already are left out.
        let mut last = inner.last_sequence.clone();
        let mut kept = Vec::new();
        for frame in frames {
            let stored = last.entry(frame.agent).or_insert(0);
            if frame.sequence > *stored {
                *stored = frame.sequence;
                kept.push(frame);
            }
        }
        if kept.is_empty() {
            return Ok(());
        }
        let mut block = Vec::new();
        let mut placement = Vec::with_capacity(kept.len());
        for frame in &kept {
            placement.push((block.len(), frame.body.len()));
            block.extend_from_slice(&frame.body);
        }
        let compressed = zstd::bulk::compress(&block, ZSTD_LEVEL)?;
        if inner.segment_length > 0
            && inner.segment_length + compressed.len() as u64 > SEGMENT_BYTES
        {
            inner.segment += 1;
            inner.segment_file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(segment_path(&inner.dir, inner.segment))?;
            inner.segment_length = 0;
        }
        let block_offset = inner.segment_length;
        inner.segment_file.write_all(&compressed)?;
        inner.segment_file.sync_data()?;
        inner.segment_length += compressed.len() as u64;

        let mut traces = inner.traces.clone();
        let mut touched: Vec<Uuid> = Vec::new();
        let transaction = inner.db.transaction()?;
        {
            let mut insert_frame = transaction.prepare_cached(
                "INSERT INTO frames (agent, sequence, kind, segment, block_offset, block_length,
                 inner_offset, inner_length, received_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            let mut insert_frame_trace = transaction.prepare_cached(
                "INSERT OR IGNORE INTO frame_traces (trace, agent, sequence) VALUES (?1, ?2, ?3)",
            )?;
            let mut update_agent = transaction.prepare_cached(
                "UPDATE agents SET last_sequence = MAX(last_sequence, ?2), frames = frames + 1,
                 bytes = bytes + ?3 WHERE agent = ?1",
            )?;
            for (frame, (inner_offset, inner_length)) in kept.iter().zip(&placement) {
                let agent = frame.agent.to_string();
                insert_frame.execute(params![
                    agent,
                    frame.sequence as i64,
                    frame.kind as u8,
                    inner.segment as i64,
                    block_offset as i64,
                    compressed.len() as i64,
                    *inner_offset as i64,
                    *inner_length as i64,
                    frame.received_ns as i64
                ])?;
                update_agent.execute(params![
                    agent,
                    frame.sequence as i64,
                    frame.body.len() as i64
                ])?;
                match frame.kind {
                    FrameKind::Goodbye => {
                        transaction
                            .execute("UPDATE agents SET finished = 1 WHERE agent = ?1", [&agent])?;
                    }
                    FrameKind::Loss => {
                        if let Some(loss) = &frame.loss {
                            transaction.execute(
                                "UPDATE agents SET lost_frames = lost_frames + ?2,
                                 lost_bytes = lost_bytes + ?3 WHERE agent = ?1",
                                params![agent, loss.frames as i64, loss.bytes as i64],
                            )?;
                        }
                    }
                    _ => {}
                }
                let Some(summary) = &frame.summary else {
                    continue;
                };
                let mut frame_traces: Vec<Uuid> = Vec::new();
                for element in &summary.elements {
                    let bytes = &frame.body[element.range.clone()];
                    match &element.hierarchy {
                        Some(TraceElement::Node(node)) => {
                            transaction.execute(
                                "INSERT OR IGNORE INTO nodes (node, hostname, element) VALUES (?1, ?2, ?3)",
                                params![node.node_id.to_string(), node.hostname, bytes],
                            )?;
                        }
                        Some(TraceElement::ProcessCreate(process)) => {
                            transaction.execute(
                                "INSERT OR IGNORE INTO processes (process, node, pid, name, element)
                                 VALUES (?1, ?2, ?3, ?4, ?5)",
                                params![
                                    process.process_id.to_string(),
                                    process.node_id_ref.to_string(),
                                    process.pid,
                                    process.name,
                                    bytes
                                ],
                            )?;
                        }
                        Some(TraceElement::AgentCreate(created)) => {
                            transaction.execute(
                                "INSERT INTO agent_elements (agent, process, create_element)
                                 VALUES (?1, ?2, ?3) ON CONFLICT(agent) DO UPDATE SET
                                 process = ?2, create_element = ?3 WHERE create_element IS NULL",
                                params![
                                    created.agent_id.to_string(),
                                    created.process_id_ref.to_string(),
                                    bytes
                                ],
                            )?;
                            // The connection that carried it belongs to that process.
                            transaction.execute(
                                "UPDATE agents SET process = ?2 WHERE agent = ?1",
                                params![agent, created.process_id_ref.to_string()],
                            )?;
                        }
                        Some(TraceElement::AgentDestroy(destroyed)) => {
                            transaction.execute(
                                "INSERT INTO agent_elements (agent, destroy_element) VALUES (?1, ?2)
                                 ON CONFLICT(agent) DO UPDATE SET destroy_element = ?2
                                 WHERE destroy_element IS NULL",
                                params![destroyed.agent_id_ref.to_string(), bytes],
                            )?;
                        }
                        _ => {}
                    }
                    let Some(trace) = element.trace else { continue };
                    let collation = traces.entry(trace).or_insert_with(|| Collation {
                        agent: frame.agent,
                        ..Collation::default()
                    });
                    match &element.hierarchy {
                        Some(TraceElement::TraceStart(start)) => {
                            collation.creator = Some(start.agent_id_ref)
                        }
                        Some(TraceElement::TraceEnd(_)) => collation.ended = true,
                        _ => {}
                    }
                    if let Some(value) = element.collation {
                        if collation.insert(value) {
                            collation.elements += 1;
                        } else {
                            collation.duplicates += 1;
                        }
                    }
                    if !frame_traces.contains(&trace) {
                        frame_traces.push(trace);
                    }
                    if !touched.contains(&trace) {
                        touched.push(trace);
                    }
                }
                for trace in frame_traces {
                    insert_frame_trace.execute(params![
                        trace.to_string(),
                        agent,
                        frame.sequence as i64
                    ])?;
                }
            }
            let mut upsert_trace = transaction.prepare_cached(
                "INSERT INTO traces (trace, agent, creator, elements, duplicates, ranges, ended)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(trace) DO UPDATE SET creator = ?3, elements = ?4, duplicates = ?5,
                 ranges = ?6, ended = ?7",
            )?;
            for trace in &touched {
                let collation = &traces[trace];
                upsert_trace.execute(params![
                    trace.to_string(),
                    collation.agent.to_string(),
                    collation.creator.map(|creator| creator.to_string()),
                    collation.elements as i64,
                    collation.duplicates as i64,
                    collation.ranges_text(),
                    collation.ended
                ])?;
            }
        }
        transaction.commit()?;
        inner.traces = traces;
        inner.last_sequence = last;
        Ok(())
    }

    fn last_sequence(&self, agent: Uuid) -> Result<u64, StoreError> {
        Ok(self.lock().last_sequence.get(&agent).copied().unwrap_or(0))
    }

    fn record_clock(&self, agent: Uuid, estimate: ClockEstimate) -> Result<(), StoreError> {
        self.lock().db.execute(
            "UPDATE agents SET clock_offset = ?2, clock_error = ?3, clock_samples = ?4 WHERE agent = ?1",
            params![
                agent.to_string(),
                estimate.offset_ns,
                estimate.error_ns as i64,
                estimate.samples
            ],
        )?;
        Ok(())
    }

    fn catalog(&self) -> Result<Catalog, StoreError> {
        let inner = self.lock();
        let mut catalog = Catalog::default();
        let mut query = inner
            .db
            .prepare("SELECT node, hostname FROM nodes ORDER BY hostname, node")?;
        for row in query.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })? {
            let (node, hostname) = row?;
            catalog.nodes.push(NodeEntry {
                node: uuid_of(node)?,
                hostname,
            });
        }
        let mut query = inner
            .db
            .prepare("SELECT process, node, pid, name FROM processes ORDER BY pid")?;
        for row in query.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })? {
            let (process, node, pid, name) = row?;
            catalog.processes.push(ProcessEntry {
                process: uuid_of(process)?,
                node: uuid_of(node)?,
                pid: pid as u32,
                name,
            });
        }
        let mut query = inner.db.prepare(
            "SELECT agent, process, hostname, pid, format, last_sequence, frames, bytes,
             clock_offset, clock_error, clock_samples, lost_frames, lost_bytes, finished
             FROM agents ORDER BY pid, agent",
        )?;
        for row in query.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Option<String>>(1)?,
                row.get::<_, Option<String>>(2)?,
                row.get::<_, Option<i64>>(3)?,
                row.get::<_, Option<String>>(4)?,
                [
                    row.get::<_, i64>(5)?,
                    row.get::<_, i64>(6)?,
                    row.get::<_, i64>(7)?,
                ],
                (
                    row.get::<_, Option<i64>>(8)?,
                    row.get::<_, Option<i64>>(9)?,
                    row.get::<_, Option<i64>>(10)?,
                ),
                [row.get::<_, i64>(11)?, row.get::<_, i64>(12)?],
                row.get::<_, bool>(13)?,
            ))
        })? {
            let (agent, process, hostname, pid, format, counts, clock, lost, finished) = row?;
            catalog.agents.push(AgentEntry {
                agent: uuid_of(agent)?,
                process: process.map(uuid_of).transpose()?,
                hostname: hostname.unwrap_or_default(),
                pid: pid.unwrap_or(0) as u32,
                format: format.unwrap_or_default(),
                last_sequence: counts[0] as u64,
                frames: counts[1] as u64,
                bytes: counts[2] as u64,
                clock: match clock {
                    (Some(offset), Some(error), Some(samples)) => Some(ClockEstimate {
                        offset_ns: offset,
                        error_ns: error as u64,
                        samples: samples as u32,
                    }),
                    _ => None,
                },
                lost_frames: lost[0] as u64,
                lost_bytes: lost[1] as u64,
                finished,
            });
        }
        let mut traces: Vec<(&Uuid, &Collation)> = inner.traces.iter().collect();
        traces.sort_by_key(|(trace, collation)| (collation.agent, **trace));
        for (trace, collation) in traces {
            catalog.traces.push(TraceEntry {
                trace: *trace,
                agent: collation.agent,
                elements: collation.elements,
                duplicates: collation.duplicates,
                last_collation: collation.last(),
                gaps: collation.gaps(),
                ended: collation.ended,
            });
        }
        Ok(catalog)
    }

    fn export_trace(
        &self,
        trace: Uuid,
        options: ExportOptions,
        out: &mut dyn Write,
    ) -> Result<ExportSummary, StoreError> {
        let inner = self.lock();
        let collation = inner
            .traces
            .get(&trace)
            .ok_or(StoreError::NoSuchTrace(trace))?;
        // The hierarchy above the trace: its creator's agentCreate, process and node.
        let creator = collation.creator.unwrap_or(collation.agent);
        let agent_row: Option<AgentElements> = inner
            .db
            .query_row(
                "SELECT process, create_element, destroy_element FROM agent_elements WHERE agent = ?1",
                [creator.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?;
        let (process, create_element, destroy_element) = agent_row.unwrap_or((None, None, None));
        let process_row: Option<(String, Vec<u8>)> = match &process {
            Some(process) => inner
                .db
                .query_row(
                    "SELECT node, element FROM processes WHERE process = ?1",
                    [process],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?,
            None => None,
        };
        let node_element: Option<Vec<u8>> = match &process_row {
            Some((node, _)) => inner
                .db
                .query_row("SELECT element FROM nodes WHERE node = ?1", [node], |row| {
                    row.get(0)
                })
                .optional()?,
            None => None,
        };
        let offset_ns: i64 = if options.align_clock {
            inner
                .db
                .query_row(
                    "SELECT clock_offset FROM agents WHERE agent = ?1",
                    [collation.agent.to_string()],
                    |row| row.get::<_, Option<i64>>(0),
                )
                .optional()?
                .flatten()
                .unwrap_or(0)
        } else {
            0
        };
        let write_element = |bytes: &[u8], out: &mut dyn Write| -> Result<(), StoreError> {
            if options.align_clock {
                let mut element = read_all(bytes)
                    .next()
                    .ok_or_else(|| other("an empty stored element"))?
                    .map_err(|error| other(error.message))?;
                shift_time(&mut element, offset_ns);
                let mut text = String::new();
                element.write(&mut text);
                out.write_all(text.as_bytes())?;
            } else {
                out.write_all(bytes)?;
            }
            out.write_all(b"\n")?;
            Ok(())
        };

        // The trace's elements from every frame that holds some, in the order received.
        let mut frames = inner.db.prepare(
            "SELECT f.segment, f.block_offset, f.block_length, f.inner_offset, f.inner_length
             FROM frame_traces t JOIN frames f ON f.agent = t.agent AND f.sequence = t.sequence
             WHERE t.trace = ?1 ORDER BY f.received_ns, f.agent, f.sequence",
        )?;
        let mut elements: Vec<(u128, Vec<u8>)> = Vec::new();
        let mut cache = None;
        let rows = frames.query_map([trace.to_string()], |row| {
            Ok([
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
            ])
        })?;
        for row in rows {
            let [segment, block_offset, block_length, inner_offset, inner_length] = row?;
            let body = read_frame_body(
                &inner.dir,
                &mut cache,
                segment as u64,
                block_offset as u64,
                block_length as u64,
                inner_offset as usize,
                inner_length as usize,
            )?;
            let summary = scan_fragment(&body).map_err(other)?;
            for element in summary.elements {
                if element.trace == Some(trace) {
                    if let Some(value) = element.collation {
                        elements.push((value, body[element.range].to_vec()));
                    }
                }
            }
        }
        // Stable: among equal collation values the first received stays.
        elements.sort_by_key(|(value, _)| *value);
        let before = elements.len();
        elements.dedup_by_key(|(value, _)| *value);
        let summary = ExportSummary {
            elements: elements.len() as u64,
            duplicates_dropped: (before - elements.len()) as u64,
            gaps: collation.gaps(),
        };
        out.write_all(DOCUMENT_HEAD.as_bytes())?;
        for above in [
            node_element.as_deref(),
            process_row.as_ref().map(|(_, element)| element.as_slice()),
            create_element.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            write_element(above, out)?;
        }
        for (_, bytes) in &elements {
            write_element(bytes, out)?;
        }
        if let Some(destroy) = &destroy_element {
            write_element(destroy, out)?;
        }
        out.write_all(DOCUMENT_TAIL.as_bytes())?;
        Ok(summary)
    }

    fn replay_agent(&self, agent: Uuid, visit: &mut FrameVisitor) -> Result<(), StoreError> {
        let inner = self.lock();
        if !inner.last_sequence.contains_key(&agent) {
            return Err(StoreError::NoSuchAgent(agent));
        }
        let mut query = inner.db.prepare(
            "SELECT kind, sequence, segment, block_offset, block_length, inner_offset, inner_length
             FROM frames WHERE agent = ?1 ORDER BY sequence",
        )?;
        let rows = query.query_map([agent.to_string()], |row| {
            Ok([
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, i64>(5)?,
                row.get::<_, i64>(6)?,
            ])
        })?;
        let mut cache = None;
        for row in rows {
            let [kind, sequence, segment, block_offset, block_length, inner_offset, inner_length] =
                row?;
            let kind = FrameKind::from_byte(kind as u8)
                .ok_or_else(|| other(format!("catalog holds frame kind {kind}")))?;
            let body = read_frame_body(
                &inner.dir,
                &mut cache,
                segment as u64,
                block_offset as u64,
                block_length as u64,
                inner_offset as usize,
                inner_length as usize,
            )?;
            visit(kind, sequence as u64, &body)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collation_ranges_merge_and_report_gaps() {
        let mut collation = Collation::default();
        for value in [5, 1, 2, 4, 9, 3] {
            assert!(collation.insert(value));
        }
        assert!(!collation.insert(3), "a duplicate");
        assert_eq!(collation.ranges.len(), 2);
        assert_eq!(collation.gaps(), vec![(6, 8)]);
        assert!(collation.insert(7));
        assert_eq!(collation.gaps(), vec![(6, 6), (8, 8)]);
        assert!(collation.insert(6) && collation.insert(8));
        assert!(collation.gaps().is_empty());
        assert_eq!(collation.ranges.len(), 1);
        let text = collation.ranges_text();
        assert_eq!(Collation::parse_ranges(&text), collation.ranges);
    }
}
