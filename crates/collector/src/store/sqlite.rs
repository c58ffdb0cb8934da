//! The embedded store: one directory with an SQLite catalog (`catalog.sqlite`, WAL mode) and
//! zstd-compressed segments (`segments/NNNNNN.zst`) of the frames exactly as received.
//!
//! Each [`Store::append`] is one group commit: the new frames' bodies, concatenated, become one
//! zstd frame appended to the current segment and synced; then one SQLite transaction indexes
//! them and updates the catalog. A crash between the two leaves a block no row points to; the
//! next [`SqliteStore::open`] cuts it off. A segment is a valid multi-frame `.zst` file.
//!
//! One process writes a store (the writer lock, with the writer's pid beside it in
//! `writer.pid`); others open it read-only. Everything in it is private to its owner: the
//! directories 0700, the files 0600, whatever the umask.
//!
//! The catalog also keeps, per trace, the collation values received as disjoint ranges (agents
//! number consecutively, so a trace has one range unless something was lost), from which the
//! duplicates and gaps come; the same state lives in memory, rebuilt at open, so that an append
//! costs no catalog reads.
//! (About 1,500 lines with its unit tests: the catalog's schema and migration, the segment
//! files and the crash recovery between them are one unit of consistency, kept in one file.)

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use openprof_format::trace::attrs::Seconds;
use openprof_format::trace::reader::FragmentDecoder;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};
use openprof_format::trace::TraceElement;
use openprof_format::wire::{self, FrameKind, Loss};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};
use tracing::warn;
use uuid::Uuid;

use super::{
    AgentEntry, AgentInfo, Catalog, ClockEstimate, ExportOptions, ExportSummary, NodeEntry,
    ProcessEntry, Received, Store, StoreError, StoredFrame, StoredFrameVisitor, TraceEntry,
};
use crate::scan::scan_fragment;

/// How a store writes. [`SqliteStore::open`] takes the defaults; tests take small segments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SqliteOptions {
    /// A segment past this size is closed and the next one started (64 MiB).
    pub segment_bytes: u64,
    /// 1: on method events level 3 took twice as long and compressed no better (see
    /// `throughput` in tests/suite/store.rs); the writer thread's time is the ingest rate.
    pub zstd_level: i32,
    /// Appends that would take the segments and catalog past this many bytes are refused
    /// ([`StoreError::Full`]); `None`: no limit.
    pub max_bytes: Option<u64>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            segment_bytes: 64 << 20,
            zstd_level: 1,
            max_bytes: None,
        }
    }
}
/// The catalog's layout (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 2;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agents (
    agent TEXT PRIMARY KEY, hostname TEXT, pid INTEGER, format TEXT, options TEXT,
    process TEXT, last_sequence INTEGER NOT NULL DEFAULT 0, frames INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0, lost_frames INTEGER NOT NULL DEFAULT 0,
    lost_bytes INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0,
    clock_offset INTEGER, clock_error INTEGER, clock_samples INTEGER, identity BLOB);
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
    trace TEXT, elements INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, sequence));
CREATE TABLE IF NOT EXISTS frame_traces (
    trace TEXT NOT NULL, agent TEXT NOT NULL, sequence INTEGER NOT NULL,
    PRIMARY KEY (trace, agent, sequence));
";

/// Per trace: which collation values arrived, as disjoint inclusive ranges (start → end).
#[derive(Clone, Debug, Default)]
struct Collation {
    /// The agent whose connection carried it.
    agent: Uuid,
    /// traceStart's agentIdRef, once it arrived.
    creator: Option<Uuid>,
    ranges: BTreeMap<u128, u128>,
    elements: u64,
    duplicates: u64,
    ended: bool,
}

impl Collation {
    /// Adds a value; false when it was there already.
    fn insert(&mut self, value: u128) -> bool {
        // The common case first: the next value after the last range, or beyond it.
        if let Some(mut last) = self.ranges.last_entry() {
            let (start, end) = (*last.key(), *last.get());
            if end.checked_add(1) == Some(value) {
                *last.get_mut() = value;
                return true;
            }
            if value > end {
                self.ranges.insert(value, value);
                return true;
            }
            if value >= start {
                return false;
            }
        }
        // Below the last range: in a range, next to one or two, or alone.
        let before = self
            .ranges
            .range(..=value)
            .next_back()
            .map(|(&start, &end)| (start, end));
        if let Some((_, end)) = before {
            if value <= end {
                return false;
            }
        }
        let after_end = value
            .checked_add(1)
            .and_then(|next| self.ranges.remove(&next));
        match before {
            // end < value here, so end + 1 cannot overflow.
            Some((start, end)) if end + 1 == value => {
                self.ranges.insert(start, after_end.unwrap_or(value));
            }
            _ => {
                self.ranges.insert(value, after_end.unwrap_or(value));
            }
        }
        true
    }

    /// The values missing between 1 and the highest.
    fn gaps(&self) -> Vec<(u128, u128)> {
        let mut gaps = Vec::new();
        let mut expected = 1u128;
        for (&start, &end) in &self.ranges {
            if start > expected {
                gaps.push((expected, start - 1));
            }
            expected = expected.max(end.saturating_add(1));
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

    fn parse_ranges(text: &str) -> Result<BTreeMap<u128, u128>, StoreError> {
        text.split(',')
            .filter(|part| !part.is_empty())
            .map(|part| {
                let (start, end) = part.split_once('-')?;
                Some((start.parse().ok()?, end.parse().ok()?))
            })
            .collect::<Option<_>>()
            .ok_or_else(|| other(format!("catalog holds bad collation ranges '{text}'")))
    }
}

/// Where a frame's body lies: a zstd block in a segment, and a range of the block decompressed.
#[derive(Clone, Copy, Debug)]
struct Location {
    segment: u64,
    block_offset: u64,
    block_length: u64,
    inner_offset: usize,
    inner_length: usize,
}

impl Location {
    fn from_row(row: &rusqlite::Row, first: usize) -> rusqlite::Result<Location> {
        Ok(Location {
            segment: row.get::<_, i64>(first)? as u64,
            block_offset: row.get::<_, i64>(first + 1)? as u64,
            block_length: row.get::<_, i64>(first + 2)? as u64,
            inner_offset: row.get::<_, i64>(first + 3)? as usize,
            inner_length: row.get::<_, i64>(first + 4)? as usize,
        })
    }
}

/// Reads frame bodies out of the segments, keeping the last block read decompressed: the
/// frames of one group commit share a block and are read one after the other.
struct SegmentReader {
    dir: PathBuf,
    file: Option<(u64, File)>,
    block: Option<((u64, u64), Vec<u8>)>,
}

impl SegmentReader {
    fn new(dir: &Path) -> SegmentReader {
        SegmentReader {
            dir: dir.to_path_buf(),
            file: None,
            block: None,
        }
    }

    fn body(&mut self, at: Location) -> Result<&[u8], StoreError> {
        let key = (at.segment, at.block_offset);
        if self.block.as_ref().is_none_or(|(cached, _)| *cached != key) {
            if self
                .file
                .as_ref()
                .is_none_or(|(open, _)| *open != at.segment)
            {
                self.file = Some((at.segment, File::open(segment_path(&self.dir, at.segment))?));
            }
            let (_, file) = self.file.as_mut().expect("just opened");
            file.seek(SeekFrom::Start(at.block_offset))?;
            let mut compressed = vec![0u8; at.block_length as usize];
            file.read_exact(&mut compressed)?;
            let data = zstd::stream::decode_all(compressed.as_slice())?;
            self.block = Some((key, data));
        }
        let (_, data) = self.block.as_ref().expect("just filled");
        data.get(at.inner_offset..at.inner_offset + at.inner_length)
            .ok_or_else(|| {
                other(format!(
                    "segment {} block at {} is shorter than the catalog says",
                    at.segment, at.block_offset
                ))
            })
    }
}

/// The writing side of a store, in the one process that holds its writer lock.
struct Writer {
    /// Held for the store's life: see [`writer_lock`].
    _lock: Connection,
    segment_bytes: u64,
    segment: u64,
    file: File,
    max_bytes: Option<u64>,
    /// The bytes of every segment together, kept up to date by each append.
    segments_total: u64,
    /// Kept from one append to the next: the block, its compressed form, zstd's context; the
    /// two buffers only while they are small ([`Writer::release_large_buffers`]).
    block: Vec<u8>,
    compressed: Vec<u8>,
    compressor: zstd::bulk::Compressor<'static>,
}

struct Inner {
    db: Connection,
    dir: PathBuf,
    /// `None` when another process writes the store: this one only reads, and re-reads the
    /// state below from the catalog for each query.
    writer: Option<Writer>,
    /// Every agent in the catalog and its highest stored sequence.
    last_sequence: HashMap<Uuid, u64>,
    traces: HashMap<Uuid, Collation>,
}

/// The embedded store. `Send + Sync`: one mutex guards the connection and the segment being
/// written. Appends hold it for a whole group commit; exports and replays hold it only to read
/// the catalog and then read the segments without it, so they never stall ingest for long.
///
/// One process writes a store: [`SqliteStore::open`] takes the writer lock and fails when another
/// process holds it (a live collector); tools list and export through
/// [`SqliteStore::open_read_only`], which takes no lock and touches nothing the writer writes.
pub struct SqliteStore {
    dir: PathBuf,
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

/// The store's writer lock: an exclusive SQLite transaction on `writer.lock`, held as long as
/// the connection is. SQLite's file locks go with the process, so a killed collector leaves no
/// stale lock (and `File::try_lock` is newer than the workspace's minimum Rust). `None`: another
/// connection, in this process or another, holds it.
fn writer_lock(dir: &Path) -> Result<Option<Connection>, StoreError> {
    let path = dir.join("writer.lock");
    create_private(&path)?;
    let lock = Connection::open(path)?;
    lock.busy_timeout(Duration::ZERO)?;
    match lock.execute_batch("BEGIN EXCLUSIVE") {
        Ok(()) => Ok(Some(lock)),
        Err(rusqlite::Error::SqliteFailure(error, _))
            if error.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

/// Runs a catalog write that need not be on disk at once (an agent's hello, a clock estimate)
/// without the fsync of a FULL commit, which would hold up the group commits waiting on the
/// lock; the next group commit's sync makes it durable along with its own.
fn lazily<T>(
    db: &Connection,
    write: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    db.pragma_update(None, "synchronous", "NORMAL")?;
    let written = write(db);
    db.pragma_update(None, "synchronous", "FULL")?;
    Ok(written?)
}

/// The agents' sequences and the traces' collation state, as the catalog has them.
type State = (HashMap<Uuid, u64>, HashMap<Uuid, Collation>);

fn load_state(db: &Connection) -> Result<State, StoreError> {
    let mut last_sequence = HashMap::new();
    let mut query = db.prepare_cached("SELECT agent, last_sequence FROM agents")?;
    let rows = query.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (agent, sequence) = row?;
        last_sequence.insert(uuid_of(agent)?, sequence as u64);
    }
    let mut traces = HashMap::new();
    let mut query = db.prepare_cached(
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
                ranges: Collation::parse_ranges(&ranges)?,
                elements: elements as u64,
                duplicates: duplicates as u64,
                ended,
            },
        );
    }
    Ok((last_sequence, traces))
}

/// Opens a segment for appending, creating it (0600) if needed, with its directory entry durable.
fn create_segment(dir: &Path, segment: u64) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(segment_path(dir, segment))?;
    File::open(dir.join("segments"))?.sync_all()?;
    Ok(file)
}

/// Creates a directory (and its parents) 0700 if missing. An existing one is made 0700 only if
/// it is a store's (`ours`): what an older collector made may be open to everyone, but a
/// directory someone points a new store at is theirs.
fn private_dir(dir: &Path, ours: bool) -> Result<(), StoreError> {
    let existed = dir.is_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if !existed || ours {
        // The umask may have taken bits the mode asked for.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Creates an empty file 0600 before SQLite opens it: SQLite would create it 0644 less the
/// umask, and gives the catalog's journal and shared memory files the catalog's mode. An
/// existing file is made 0600 too.
fn create_private(path: &Path) -> Result<(), StoreError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// Whose the writer lock is: the pid in `writer.pid`, as the writer left it.
fn writer_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("writer.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Brings a catalog from an earlier layout up to this one.
fn migrate(db: &Connection) -> Result<(), StoreError> {
    let version: i64 = db.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(other(format!(
            "the catalog has layout {version}; this collector knows up to {SCHEMA_VERSION}"
        )));
    }
    // Layout 0 had frames without their trace and element count.
    let columns = column_names(db, "frames")?;
    if !columns.iter().any(|name| name == "trace") {
        db.execute_batch("ALTER TABLE frames ADD COLUMN trace TEXT")?;
    }
    if !columns.iter().any(|name| name == "elements") {
        db.execute_batch("ALTER TABLE frames ADD COLUMN elements INTEGER NOT NULL DEFAULT 0")?;
    }
    // Layout 1 had agents without the identity key their id is bound to.
    if !column_names(db, "agents")?
        .iter()
        .any(|name| name == "identity")
    {
        db.execute_batch("ALTER TABLE agents ADD COLUMN identity BLOB")?;
    }
    db.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    Ok(())
}

/// The columns a table has now.
fn column_names(db: &Connection, table: &str) -> Result<Vec<String>, StoreError> {
    let mut query = db.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let names = query.query_map([table], |row| row.get::<_, String>(0))?;
    Ok(names.collect::<Result<_, _>>()?)
}

impl SqliteStore {
    /// Opens the store in `dir`, creating it if needed, as its writer: cuts any segment tail a
    /// crash left unindexed and rebuilds the in-memory state from the catalog. Fails with
    /// [`StoreError::Locked`] if another writer (a running collector) has it.
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        Self::open_with(dir, SqliteOptions::default())
    }

    /// [`SqliteStore::open`] with options of one's own.
    pub fn open_with(dir: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        private_dir(dir, dir.join("catalog.sqlite").exists())?;
        private_dir(&dir.join("segments"), true)?;
        match writer_lock(dir)? {
            Some(lock) => {
                // Only for telling a second writer who has the store; a stale pid is harmless.
                let pid_file = dir.join("writer.pid");
                create_private(&pid_file)?;
                std::fs::write(&pid_file, format!("{}\n", std::process::id()))?;
                Self::open_writer(dir, lock, options)
            }
            None => Err(StoreError::Locked {
                dir: dir.to_path_buf(),
                pid: writer_pid(dir),
            }),
        }
    }

    /// Opens an existing store only to read it (list, export, replay), whether or not a
    /// collector writes it meanwhile; changes nothing on disk.
    pub fn open_read_only(dir: &Path) -> Result<SqliteStore, StoreError> {
        let path = dir.join("catalog.sqlite");
        if !path.exists() {
            return Err(other(format!("{} holds no catalog", dir.display())));
        }
        let db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // The writer's commits are short; wait for one rather than fail.
        db.busy_timeout(Duration::from_secs(10))?;
        let (last_sequence, traces) = load_state(&db)?;
        Ok(SqliteStore {
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                db,
                dir: dir.to_path_buf(),
                writer: None,
                last_sequence,
                traces,
            }),
        })
    }

    /// Whether this store only reads (opened by [`SqliteStore::open_read_only`]): then
    /// `append`, `open_agent` and `record_clock` fail.
    pub fn is_read_only(&self) -> bool {
        self.lock().writer.is_none()
    }

    fn open_writer(
        dir: &Path,
        lock: Connection,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let catalog = dir.join("catalog.sqlite");
        create_private(&catalog)?;
        let db = Connection::open(catalog)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        // A commit is on disk when it returns: acknowledged data must survive a power cut too.
        db.pragma_update(None, "synchronous", "FULL")?;
        db.execute_batch(SCHEMA)?;
        migrate(&db)?;

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
        let mut segment = ends.keys().copied().max().unwrap_or(0);
        let mut damaged = false;
        let mut segments_total = 0u64;
        for entry in std::fs::read_dir(dir.join("segments"))? {
            let path = entry?.path();
            let Some(number) = path
                .file_name()
                .and_then(|name| name.to_str())
                .and_then(|name| name.strip_suffix(".zst"))
                .and_then(|stem| stem.parse::<u64>().ok())
            else {
                continue;
            };
            let end = ends.get(&number).copied().unwrap_or(0);
            let file = OpenOptions::new().write(true).open(&path)?;
            let length = file.metadata()?.len();
            if length > end {
                warn!(
                    "store: cutting {} unindexed bytes off {} (a commit cut short)",
                    length - end,
                    path.display()
                );
                file.set_len(end)?;
                file.sync_all()?;
            } else if length < end {
                warn!(
                    "store: {} is {} bytes shorter than the catalog says",
                    path.display(),
                    end - length
                );
                damaged = true;
            }
            segment = segment.max(number);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            // What is left after the cut.
            segments_total += length.min(end);
        }
        for &number in ends.keys() {
            if !segment_path(dir, number).exists() {
                warn!("store: segment {number} is missing");
                damaged = true;
            }
        }
        // Never append where the catalog already points.
        if damaged {
            segment += 1;
        }
        let file = create_segment(dir, segment)?;

        let (last_sequence, traces) = load_state(&db)?;
        Ok(SqliteStore {
            dir: dir.to_path_buf(),
            inner: Mutex::new(Inner {
                db,
                dir: dir.to_path_buf(),
                writer: Some(Writer {
                    _lock: lock,
                    segment_bytes: options.segment_bytes,
                    segment,
                    file,
                    max_bytes: options.max_bytes,
                    segments_total,
                    block: Vec::new(),
                    compressed: Vec::new(),
                    compressor: zstd::bulk::Compressor::new(options.zstd_level)?,
                }),
                last_sequence,
                traces,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves nothing half-done that matters: the catalog is
        // transactional and the in-memory state is replaced only after a commit.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What an export needs from the catalog, read under the lock.
    fn export_plan(&self, trace: Uuid, options: ExportOptions) -> Result<ExportPlan, StoreError> {
        let mut inner = self.lock();
        inner.refresh()?;
        let collation = inner
            .traces
            .get(&trace)
            .ok_or(StoreError::NoSuchTrace(trace))?;
        // The hierarchy above the trace: its creator's agentCreate, process and node.
        let creator = collation.creator.unwrap_or(collation.agent);
        let (process, create, destroy): (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>) = inner
            .db
            .query_row(
                "SELECT process, create_element, destroy_element FROM agent_elements
                 WHERE agent = ?1",
                [creator.to_string()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?
            .unwrap_or_default();
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
        let node: Option<Vec<u8>> = match &process_row {
            Some((node, _)) => inner
                .db
                .query_row("SELECT element FROM nodes WHERE node = ?1", [node], |row| {
                    row.get(0)
                })
                .optional()?,
            None => None,
        };
        let mut above: Vec<Vec<u8>> = Vec::new();
        above.extend(node);
        above.extend(process_row.map(|(_, element)| element));
        above.extend(create);
        let align = if options.align_clock {
            let offset = inner
                .db
                .query_row(
                    "SELECT clock_offset FROM agents WHERE agent = ?1",
                    [collation.agent.to_string()],
                    |row| row.get::<_, Option<i64>>(0),
                )
                .optional()?
                .flatten();
            if offset.is_none() {
                warn!(
                    "store: no clock estimate for agent {}: its times are left as they are",
                    collation.agent
                );
            }
            Some(offset.unwrap_or(0))
        } else {
            None
        };
        // Every frame holding some of the trace, in the order stored (rowid): among elements
        // with the same collation value, the first received is kept.
        let mut query = inner.db.prepare(
            "SELECT f.segment, f.block_offset, f.block_length, f.inner_offset, f.inner_length
             FROM frame_traces t JOIN frames f ON f.agent = t.agent AND f.sequence = t.sequence
             WHERE t.trace = ?1 ORDER BY f.rowid",
        )?;
        let frames = query
            .query_map([trace.to_string()], |row| Location::from_row(row, 0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ExportPlan {
            above,
            destroy,
            align,
            gaps: collation.gaps(),
            frames,
        })
    }
}

/// What an export needs from the catalog: the elements above the trace and agentDestroy as
/// received, the clock offset to subtract if aligning, and where the trace's frames lie.
struct ExportPlan {
    above: Vec<Vec<u8>>,
    destroy: Option<Vec<u8>>,
    align: Option<i64>,
    gaps: Vec<(u128, u128)>,
    frames: Vec<Location>,
}

/// Moves an element's time onto the collector's clock: collector = agent − offset.
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

/// Writes one stored element and its line break, re-timed when aligning clocks.
fn write_element(
    bytes: &[u8],
    align: Option<i64>,
    text: &mut String,
    out: &mut impl Write,
) -> Result<(), StoreError> {
    match align {
        None => out.write_all(bytes)?,
        Some(offset_ns) => {
            let mut decoder = FragmentDecoder::new();
            decoder.push(bytes);
            decoder.end();
            let mut element = decoder
                .next_element()
                .ok_or_else(|| other("an empty stored element"))?
                .map_err(|error| other(format!("a stored element: {error}")))?;
            shift_time(&mut element, offset_ns);
            text.clear();
            element.write(text);
            out.write_all(text.as_bytes())?;
        }
    }
    out.write_all(b"\n")?;
    Ok(())
}

/// The changes one append makes, applied to the in-memory state only once committed.
#[derive(Default)]
struct Staged {
    last_sequence: HashMap<Uuid, u64>,
    /// Per agent: frames and bytes added.
    counts: HashMap<Uuid, (u64, u64)>,
    traces: HashMap<Uuid, Collation>,
}

impl Inner {
    /// A read-only store's view of the catalog is re-read for each query: the writer moves on.
    fn refresh(&mut self) -> Result<(), StoreError> {
        if self.writer.is_none() {
            (self.last_sequence, self.traces) = load_state(&self.db)?;
        }
        Ok(())
    }

    fn read_only(&self) -> StoreError {
        other(format!(
            "the store in {} is open only for reading here",
            self.dir.display()
        ))
    }
}

/// The most a writer's block and compressed buffers keep between appends. Steady ingest
/// batches are kilobytes; a rare batch of tens of MiB (a heap dump's frames, a resend after an
/// outage) would otherwise stay allocated for the collector's life, its pages touched a little
/// further by each larger batch after it.
const KEPT_BUFFER_BYTES: usize = 4 << 20;

impl Writer {
    /// Gives back a buffer a large batch grew past [`KEPT_BUFFER_BYTES`].
    fn release_large_buffers(&mut self) {
        for buffer in [&mut self.block, &mut self.compressed] {
            if buffer.capacity() > KEPT_BUFFER_BYTES {
                *buffer = Vec::new();
            }
        }
    }

    /// Appends the compressed block to the current segment (or a new one) and syncs it;
    /// returns where it went.
    fn write_block(&mut self, dir: &Path) -> Result<(u64, u64), StoreError> {
        // The file's own length, not a count kept in memory: a failed write must not shift
        // the offsets of later blocks.
        let mut offset = self.file.metadata()?.len();
        if offset > 0 && offset + self.compressed.len() as u64 > self.segment_bytes {
            self.file = create_segment(dir, self.segment + 1)?;
            self.segment += 1;
            offset = self.file.metadata()?.len();
        }
        let written = self
            .file
            .write_all(&self.compressed)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            self.cut(offset);
            return Err(error.into());
        }
        self.segments_total += self.compressed.len() as u64;
        Ok((self.segment, offset))
    }

    /// Takes a block no row points to back off the segment's end.
    fn cut(&mut self, offset: u64) {
        if let Err(error) = self.file.set_len(offset) {
            // Harmless but for the space: no row points there, and the next open cuts it.
            warn!(
                "store: can't cut a failed block off segment {}: {error}",
                self.segment
            );
        }
    }
}

/// Indexes the kept frames (each with its offset in the block) and updates the catalog, in
/// the caller's transaction; the in-memory changes go to `staged`.
fn index(
    transaction: &Transaction,
    traces: &HashMap<Uuid, Collation>,
    staged: &mut Staged,
    kept: &[(&Received, usize)],
    (segment, block_offset, block_length): (u64, u64, u64),
) -> Result<(), StoreError> {
    let mut insert_frame = transaction.prepare_cached(
        "INSERT INTO frames (agent, sequence, kind, segment, block_offset, block_length,
         inner_offset, inner_length, received_ns, trace, elements)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    let mut insert_frame_trace = transaction.prepare_cached(
        "INSERT OR IGNORE INTO frame_traces (trace, agent, sequence) VALUES (?1, ?2, ?3)",
    )?;
    let mut touched: Vec<Uuid> = Vec::new();
    for &(frame, inner_offset) in kept {
        let agent = frame.agent.to_string();
        let counts = staged.counts.entry(frame.agent).or_default();
        counts.0 += 1;
        counts.1 += frame.body.len() as u64;
        match frame.kind {
            FrameKind::Goodbye => {
                transaction.execute(
                    "INSERT INTO agents (agent, finished) VALUES (?1, 1)
                     ON CONFLICT(agent) DO UPDATE SET finished = 1",
                    [&agent],
                )?;
            }
            FrameKind::Loss => {
                let loss = match &frame.loss {
                    Some(loss) => Some(loss.clone()),
                    None => wire::parse_json::<Loss>(FrameKind::Loss, &frame.body).ok(),
                };
                if let Some(loss) = loss {
                    transaction.execute(
                        "INSERT INTO agents (agent, lost_frames, lost_bytes) VALUES (?1, ?2, ?3)
                         ON CONFLICT(agent) DO UPDATE SET lost_frames = lost_frames + ?2,
                         lost_bytes = lost_bytes + ?3",
                        params![agent, loss.frames as i64, loss.bytes as i64],
                    )?;
                }
            }
            _ => {}
        }
        let mut frame_traces: Vec<Uuid> = Vec::new();
        let elements = frame
            .summary
            .as_ref()
            .map_or(&[][..], |summary| &summary.elements[..]);
        for element in elements {
            let bytes = frame.body.get(element.range.clone()).ok_or_else(|| {
                other(format!(
                    "frame {} of {agent}: its summary does not fit its body",
                    frame.sequence
                ))
            })?;
            match &element.hierarchy {
                Some(TraceElement::Node(node)) => {
                    transaction
                        .prepare_cached(
                            "INSERT OR IGNORE INTO nodes (node, hostname, element)
                             VALUES (?1, ?2, ?3)",
                        )?
                        .execute(params![node.node_id.to_string(), node.hostname, bytes])?;
                }
                Some(TraceElement::ProcessCreate(process)) => {
                    transaction
                        .prepare_cached(
                            "INSERT OR IGNORE INTO processes (process, node, pid, name, element)
                             VALUES (?1, ?2, ?3, ?4, ?5)",
                        )?
                        .execute(params![
                            process.process_id.to_string(),
                            process.node_id_ref.to_string(),
                            process.pid,
                            process.name,
                            bytes
                        ])?;
                }
                Some(TraceElement::AgentCreate(created)) => {
                    // The first received stays, as for every element.
                    transaction
                        .prepare_cached(
                            "INSERT INTO agent_elements (agent, process, create_element)
                             VALUES (?1, ?2, ?3) ON CONFLICT(agent) DO UPDATE SET
                             process = ?2, create_element = ?3 WHERE create_element IS NULL",
                        )?
                        .execute(params![
                            created.agent_id.to_string(),
                            created.process_id_ref.to_string(),
                            bytes
                        ])?;
                    transaction
                        .prepare_cached("UPDATE agents SET process = ?2 WHERE agent = ?1")?
                        .execute(params![
                            created.agent_id.to_string(),
                            created.process_id_ref.to_string()
                        ])?;
                }
                Some(TraceElement::AgentDestroy(destroyed)) => {
                    transaction
                        .prepare_cached(
                            "INSERT INTO agent_elements (agent, destroy_element) VALUES (?1, ?2)
                             ON CONFLICT(agent) DO UPDATE SET destroy_element = ?2
                             WHERE destroy_element IS NULL",
                        )?
                        .execute(params![destroyed.agent_id_ref.to_string(), bytes])?;
                }
                _ => {}
            }
            let Some(trace) = element.trace else { continue };
            let collation = match staged.traces.entry(trace) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    entry.insert(traces.get(&trace).cloned().unwrap_or_else(|| Collation {
                        agent: frame.agent,
                        ..Collation::default()
                    }))
                }
            };
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
            // Frames rarely hold more than one trace: a short list beats a set.
            if !frame_traces.contains(&trace) {
                frame_traces.push(trace);
            }
            if !touched.contains(&trace) {
                touched.push(trace);
            }
        }
        insert_frame.execute(params![
            agent,
            frame.sequence as i64,
            frame.kind as u8,
            segment as i64,
            block_offset as i64,
            block_length as i64,
            inner_offset as i64,
            frame.body.len() as i64,
            frame.received_ns as i64,
            frame_traces.first().map(Uuid::to_string),
            elements.len() as i64
        ])?;
        for trace in frame_traces {
            insert_frame_trace.execute(params![trace.to_string(), agent, frame.sequence as i64])?;
        }
    }
    let mut update_agent = transaction.prepare_cached(
        "INSERT INTO agents (agent, last_sequence, frames, bytes) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(agent) DO UPDATE SET last_sequence = MAX(last_sequence, ?2),
         frames = frames + ?3, bytes = bytes + ?4",
    )?;
    for (agent, (frames, bytes)) in &staged.counts {
        update_agent.execute(params![
            agent.to_string(),
            staged.last_sequence[agent] as i64,
            *frames as i64,
            *bytes as i64
        ])?;
    }
    let mut upsert_trace = transaction.prepare_cached(
        "INSERT INTO traces (trace, agent, creator, elements, duplicates, ranges, ended)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(trace) DO UPDATE SET creator = ?3, elements = ?4, duplicates = ?5,
         ranges = ?6, ended = ?7",
    )?;
    for trace in &touched {
        let collation = &staged.traces[trace];
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
    Ok(())
}

impl Inner {
    /// With `--max-store-bytes`, refuses to add an agent the catalog does not have yet once the
    /// store is at its limit: the catalog counts against the limit too, and new agent ids must
    /// not grow it past. An agent already there may always come back for its data.
    fn room_for_agent(&self, agent: Uuid) -> Result<(), StoreError> {
        let Some(limit) = self.writer.as_ref().and_then(|writer| writer.max_bytes) else {
            return Ok(());
        };
        let known: bool = self.db.query_row(
            "SELECT EXISTS (SELECT 1 FROM agents WHERE agent = ?1)",
            params![agent.to_string()],
            |row| row.get(0),
        )?;
        if known {
            return Ok(());
        }
        let catalog = std::fs::metadata(self.dir.join("catalog.sqlite"))?.len();
        let used = self
            .writer
            .as_ref()
            .map_or(0, |writer| writer.segments_total)
            + catalog;
        if used >= limit {
            return Err(StoreError::Full { used, limit });
        }
        Ok(())
    }
}

impl SqliteStore {
    /// [`Store::append`] under the store's lock.
    fn append_locked(guard: &mut Inner, frames: &[Received]) -> Result<(), StoreError> {
        let Inner {
            db,
            dir,
            writer,
            last_sequence,
            traces,
        } = &mut *guard;
        let Some(writer) = writer.as_mut() else {
            return Err(guard.read_only());
        };
        // Resends of what is stored already are left out; the rest goes into one block.
        let mut staged = Staged::default();
        let mut kept: Vec<(&Received, usize)> = Vec::with_capacity(frames.len());
        writer.block.clear();
        for frame in frames {
            let stored = staged
                .last_sequence
                .get(&frame.agent)
                .or_else(|| last_sequence.get(&frame.agent))
                .copied()
                .unwrap_or(0);
            if frame.sequence > stored {
                staged.last_sequence.insert(frame.agent, frame.sequence);
                kept.push((frame, writer.block.len()));
                writer.block.extend_from_slice(&frame.body);
            }
        }
        if kept.is_empty() {
            return Ok(());
        }
        writer.compressed.clear();
        writer
            .compressed
            .reserve(zstd::zstd_safe::compress_bound(writer.block.len()));
        writer
            .compressor
            .compress_to_buffer(&writer.block, &mut writer.compressed)?;
        if let Some(limit) = writer.max_bytes {
            // The catalog's write-ahead log is left out: checkpoints bound it (about 4 MB).
            let catalog = std::fs::metadata(dir.join("catalog.sqlite"))?.len();
            let used = writer.segments_total + catalog;
            if used + writer.compressed.len() as u64 > limit {
                return Err(StoreError::Full { used, limit });
            }
        }
        let (segment, block_offset) = writer.write_block(dir)?;
        let placed = (segment, block_offset, writer.compressed.len() as u64);

        let indexed = db
            .transaction()
            .map_err(StoreError::from)
            .and_then(|transaction| {
                index(&transaction, traces, &mut staged, &kept, placed)?;
                transaction.commit()?;
                Ok(())
            });
        if let Err(error) = indexed {
            // Nothing of this append stays: the transaction rolled back, the block goes.
            writer.cut(block_offset);
            writer.segments_total -= writer.compressed.len() as u64;
            return Err(error);
        }
        last_sequence.extend(staged.last_sequence);
        traces.extend(staged.traces);
        Ok(())
    }
}

impl Store for SqliteStore {
    fn open_agent(&self, info: &AgentInfo) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        if inner.writer.is_none() {
            return Err(inner.read_only());
        }
        inner.room_for_agent(info.agent)?;
        lazily(&inner.db, |db| {
            db.execute(
                "INSERT INTO agents (agent, hostname, pid, format, options)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(agent) DO UPDATE SET hostname = ?2,
                 pid = ?3, format = ?4, options = ?5",
                params![
                    info.agent.to_string(),
                    info.hostname,
                    info.pid,
                    info.format,
                    info.options
                ],
            )
        })?;
        Ok(*inner.last_sequence.entry(info.agent).or_insert(0))
    }

    fn append(&self, frames: &[Received]) -> Result<(), StoreError> {
        let mut guard = self.lock();
        let appended = Self::append_locked(&mut guard, frames);
        if let Some(writer) = guard.writer.as_mut() {
            writer.release_large_buffers();
        }
        appended
    }

    fn last_sequence(&self, agent: Uuid) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        inner.refresh()?;
        Ok(inner.last_sequence.get(&agent).copied().unwrap_or(0))
    }

    fn bind_identity(&self, agent: Uuid, identity: &[u8]) -> Result<bool, StoreError> {
        let inner = self.lock();
        if inner.writer.is_none() {
            return Err(inner.read_only());
        }
        inner.room_for_agent(agent)?;
        // Synchronous: a binding lost in a crash would let the id be taken over.
        inner.db.execute(
            "INSERT INTO agents (agent, identity) VALUES (?1, ?2)
             ON CONFLICT(agent) DO UPDATE SET identity = COALESCE(identity, ?2)",
            params![agent.to_string(), identity],
        )?;
        let bound: Option<Vec<u8>> = inner.db.query_row(
            "SELECT identity FROM agents WHERE agent = ?1",
            params![agent.to_string()],
            |row| row.get(0),
        )?;
        Ok(bound.as_deref() == Some(identity))
    }

    fn record_clock(&self, agent: Uuid, estimate: ClockEstimate) -> Result<(), StoreError> {
        let inner = self.lock();
        if inner.writer.is_none() {
            return Err(inner.read_only());
        }
        lazily(&inner.db, |db| {
            db.execute(
                "INSERT INTO agents (agent, clock_offset, clock_error, clock_samples)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT(agent) DO UPDATE SET clock_offset = ?2,
                 clock_error = ?3, clock_samples = ?4",
                params![
                    agent.to_string(),
                    estimate.offset_ns,
                    estimate.error_ns as i64,
                    estimate.samples
                ],
            )
        })?;
        Ok(())
    }

    fn catalog(&self) -> Result<Catalog, StoreError> {
        let mut inner = self.lock();
        inner.refresh()?;
        let mut catalog = Catalog::default();
        let mut query = inner
            .db
            .prepare("SELECT node, hostname FROM nodes ORDER BY hostname, node")?;
        for row in query.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?))
        })? {
            let (node, hostname) = row?;
            catalog.nodes.push(NodeEntry {
                node: uuid_of(node)?,
                hostname: hostname.unwrap_or_default(),
            });
        }
        let mut query = inner
            .db
            .prepare("SELECT process, node, pid, name FROM processes ORDER BY pid, process")?;
        for row in query.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Option<i64>>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })? {
            let (process, node, pid, name) = row?;
            catalog.processes.push(ProcessEntry {
                process: uuid_of(process)?,
                node: uuid_of(node)?,
                pid: pid.unwrap_or(0) as u32,
                name,
            });
        }
        // The process comes from the agent's agentCreate, whichever connection carried it.
        let mut query = inner.db.prepare(
            "SELECT a.agent, COALESCE(e.process, a.process), a.hostname, a.pid, a.format,
             a.last_sequence, a.frames, a.bytes, a.clock_offset, a.clock_error, a.clock_samples,
             a.lost_frames, a.lost_bytes, a.finished, a.options, a.identity
             FROM agents a LEFT JOIN agent_elements e ON e.agent = a.agent
             ORDER BY a.pid, a.agent",
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
                row.get::<_, Option<String>>(14)?,
                row.get::<_, Option<Vec<u8>>>(15)?,
            ))
        })? {
            let (
                agent,
                process,
                hostname,
                pid,
                format,
                counts,
                clock,
                lost,
                finished,
                options,
                identity,
            ) = row?;
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
                labels: openprof_format::options::labels_in(options.as_deref().unwrap_or("")),
                identity,
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
        let plan = self.export_plan(trace, options)?;
        // From here on the lock is free: committed blocks never change.
        let mut reader = SegmentReader::new(&self.dir);
        let mut bodies: Vec<Vec<u8>> = Vec::with_capacity(plan.frames.len());
        // (collation value, frame, start, end) of each element of the trace.
        let mut elements: Vec<(u128, u32, u32, u32)> = Vec::new();
        let mut unordered = 0usize;
        for location in &plan.frames {
            let body = reader.body(*location)?.to_vec();
            let summary = scan_fragment(&body)
                .map_err(|problem| other(format!("a stored fragment: {problem}")))?;
            for element in summary.elements {
                if element.trace != Some(trace) {
                    continue;
                }
                match element.collation {
                    Some(value) => elements.push((
                        value,
                        bodies.len() as u32,
                        element.range.start as u32,
                        element.range.end as u32,
                    )),
                    None => unordered += 1,
                }
            }
            bodies.push(body);
        }
        if unordered > 0 {
            warn!("store: {unordered} elements of trace {trace} have no collationValue: left out");
        }
        // Stable: among equal collation values the first received stays.
        elements.sort_by_key(|&(value, ..)| value);
        let received = elements.len();
        elements.dedup_by_key(|&mut (value, ..)| value);

        let mut out = BufWriter::with_capacity(1 << 16, out);
        let mut text = String::new();
        out.write_all(DOCUMENT_HEAD.as_bytes())?;
        for element in &plan.above {
            write_element(element, plan.align, &mut text, &mut out)?;
        }
        for &(_, frame, start, end) in &elements {
            let bytes = &bodies[frame as usize][start as usize..end as usize];
            write_element(bytes, plan.align, &mut text, &mut out)?;
        }
        if let Some(destroy) = &plan.destroy {
            write_element(destroy, plan.align, &mut text, &mut out)?;
        }
        out.write_all(DOCUMENT_TAIL.as_bytes())?;
        out.flush()?;
        Ok(ExportSummary {
            elements: elements.len() as u64,
            duplicates_dropped: (received - elements.len()) as u64,
            gaps: plan.gaps,
        })
    }

    fn frames_after(
        &self,
        agent: Uuid,
        after: u64,
        visit: &mut StoredFrameVisitor,
    ) -> Result<(), StoreError> {
        let frames = {
            let mut inner = self.lock();
            inner.refresh()?;
            if !inner.last_sequence.contains_key(&agent) {
                return Err(StoreError::NoSuchAgent(agent));
            }
            let mut query = inner.db.prepare(
                "SELECT kind, sequence, segment, block_offset, block_length, inner_offset,
                 inner_length, received_ns FROM frames WHERE agent = ?1 AND sequence > ?2
                 ORDER BY sequence",
            )?;
            let rows = query.query_map(
                rusqlite::params![agent.to_string(), after.min(i64::MAX as u64) as i64],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        Location::from_row(row, 2)?,
                        row.get::<_, i64>(7)?,
                    ))
                },
            )?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        // Without the lock: committed blocks never change.
        let mut reader = SegmentReader::new(&self.dir);
        for (kind, sequence, location, received_ns) in frames {
            let kind = FrameKind::from_byte(kind as u8)
                .ok_or_else(|| other(format!("catalog holds frame kind {kind}")))?;
            visit(&StoredFrame {
                kind,
                sequence: sequence as u64,
                received_ns: received_ns as u64,
                body: reader.body(location)?,
            })?;
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
        assert!(!collation.insert(9), "a duplicate of the last");
        assert_eq!(collation.ranges.len(), 2);
        assert_eq!(collation.gaps(), vec![(6, 8)]);
        assert!(collation.insert(7));
        assert_eq!(collation.gaps(), vec![(6, 6), (8, 8)]);
        assert!(collation.insert(6) && collation.insert(8));
        assert!(collation.gaps().is_empty());
        assert_eq!(collation.ranges.len(), 1);
        assert!(collation.insert(10));
        assert_eq!(collation.ranges.len(), 1);
        assert_eq!(collation.last(), 10);
        let text = collation.ranges_text();
        assert_eq!(Collation::parse_ranges(&text).unwrap(), collation.ranges);
        assert!(Collation::parse_ranges("").unwrap().is_empty());
        assert!(Collation::parse_ranges("1-x").is_err());
    }

    /// Random insertions agree with a plain set, and the ranges stay disjoint and apart.
    #[test]
    fn collation_ranges_agree_with_a_set() {
        let mut seed = 7u64;
        for _ in 0..200 {
            let mut collation = Collation::default();
            let mut set = std::collections::BTreeSet::new();
            for _ in 0..100 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let value = u128::from((seed >> 33) % 60);
                assert_eq!(collation.insert(value), set.insert(value));
            }
            let mut previous_end: Option<u128> = None;
            for (&start, &end) in &collation.ranges {
                assert!(start <= end);
                if let Some(previous) = previous_end {
                    assert!(start > previous + 1, "ranges touch: {:?}", collation.ranges);
                }
                previous_end = Some(end);
                assert!((start..=end).all(|value| set.contains(&value)));
            }
            let covered: u128 = collation.ranges.iter().map(|(s, e)| e - s + 1).sum();
            assert_eq!(covered, set.len() as u128);
        }
    }

    #[test]
    fn a_catalog_of_layout_0_gains_the_frame_columns() {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE frames (
                agent TEXT NOT NULL, sequence INTEGER NOT NULL, kind INTEGER NOT NULL,
                segment INTEGER NOT NULL, block_offset INTEGER NOT NULL,
                block_length INTEGER NOT NULL, inner_offset INTEGER NOT NULL,
                inner_length INTEGER NOT NULL, received_ns INTEGER NOT NULL,
                PRIMARY KEY (agent, sequence));",
        )
        .unwrap();
        db.execute_batch(SCHEMA).unwrap();
        migrate(&db).unwrap();
        db.execute(
            "INSERT INTO frames VALUES ('a', 1, 4, 0, 0, 10, 0, 10, 5, 't', 3)",
            [],
        )
        .unwrap();
        let version: i64 = db
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        // Again: nothing to do.
        migrate(&db).unwrap();
        db.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(migrate(&db).is_err(), "a newer layout is refused");
    }

    /// A large batch's buffers are given back once it is stored, or refused by the quota.
    #[test]
    fn a_large_batch_leaves_no_large_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            max_bytes: Some(64 << 20),
            ..SqliteOptions::default()
        };
        let store = SqliteStore::open_with(dir.path(), options).unwrap();
        let agent = Uuid::new_v4();
        store
            .open_agent(&AgentInfo {
                agent,
                hostname: "h".into(),
                pid: 1,
                format: "b".into(),
                options: String::new(),
            })
            .unwrap();
        let hprof = |sequence: u64, bytes: usize| Received {
            agent,
            kind: FrameKind::Hprof,
            sequence,
            // Not compressible, so that the compressed buffer grows as far as the block.
            body: (0..bytes)
                .scan(
                    sequence.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
                    |state, _| {
                        // xorshift64: random bytes.
                        *state ^= *state << 13;
                        *state ^= *state >> 7;
                        *state ^= *state << 17;
                        Some(*state as u8)
                    },
                )
                .collect(),
            summary: None,
            loss: None,
            received_ns: sequence,
        };
        let capacities = |store: &SqliteStore| {
            let inner = store.lock();
            let writer = inner.writer.as_ref().unwrap();
            (writer.block.capacity(), writer.compressed.capacity())
        };
        store.append(&[hprof(1, 1000)]).unwrap();
        let (block, compressed) = capacities(&store);
        assert!(
            block >= 1000 && compressed > 0,
            "a small batch keeps its buffers"
        );
        store
            .append(&[hprof(2, 24 << 20), hprof(3, 8 << 20)])
            .unwrap();
        let (block, compressed) = capacities(&store);
        assert!(
            block <= KEPT_BUFFER_BYTES && compressed <= KEPT_BUFFER_BYTES,
            "after a 32 MiB batch: {block} and {compressed} bytes kept"
        );
        let refused = store.append(&[hprof(4, 40 << 20)]);
        assert!(
            matches!(refused, Err(StoreError::Full { .. })),
            "{refused:?}"
        );
        let (block, compressed) = capacities(&store);
        assert!(
            block <= KEPT_BUFFER_BYTES && compressed <= KEPT_BUFFER_BYTES,
            "after a refused 40 MiB batch: {block} and {compressed} bytes kept"
        );
        assert_eq!(store.last_sequence(agent).unwrap(), 3);
    }

    #[test]
    fn extreme_collation_values_do_not_overflow() {
        let mut collation = Collation::default();
        assert!(collation.insert(u128::MAX));
        assert!(collation.insert(u128::MAX - 1));
        assert!(!collation.insert(u128::MAX));
        assert!(collation.insert(0));
        assert_eq!(collation.gaps(), vec![(1, u128::MAX - 2)]);
    }
}
