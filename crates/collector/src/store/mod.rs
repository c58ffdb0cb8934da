//! Where the collector keeps what agents sent: the [`Store`] trait, so that a distributed
//! backend can stand in for the embedded one ([`sqlite::SqliteStore`]).

pub mod sqlite;

use std::io::Write;

use openprof_format::wire::{FrameKind, Loss};
use thiserror::Error;
use uuid::Uuid;

use crate::scan::FragmentSummary;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
    #[error("store catalog: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("store: {0}")]
    Other(String),
    #[error("no trace {0} in the store")]
    NoSuchTrace(Uuid),
    #[error("no agent {0} in the store")]
    NoSuchAgent(Uuid),
    /// Another process (a running collector) writes the store.
    #[error("another collector{} writes the store {}; stop it first, or give this one another --store", .pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default(), .dir.display())]
    Locked {
        dir: std::path::PathBuf,
        pid: Option<u32>,
    },
    /// The store reached its size limit.
    #[error("the store is full: {used} bytes used, the limit (--max-store-bytes) is {limit}")]
    Full { used: u64, limit: u64 },
}

/// An agent as its hello describes it (the token is never part of it).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentInfo {
    pub agent: Uuid,
    pub hostname: String,
    pub pid: u32,
    /// `x`, `a` or `b`.
    pub format: String,
    /// The agent's options with the token left out.
    pub options: String,
}

/// One data frame as received from an agent.
#[derive(Clone, Debug)]
pub struct Received {
    pub agent: Uuid,
    pub kind: FrameKind,
    pub sequence: u64,
    /// The frame's body after its sequence number, exactly as received.
    pub body: Vec<u8>,
    /// For Fragment frames: what [`crate::scan::scan_fragment`] found (already checked).
    pub summary: Option<FragmentSummary>,
    /// For Loss frames: the decoded loss.
    pub loss: Option<Loss>,
    /// When the collector received it, ns since the epoch on the collector's clock.
    pub received_ns: u64,
}

/// An agent's clock against the collector's: agent clock − collector clock, with the error
/// bound of the best (shortest round trip) sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockEstimate {
    pub offset_ns: i64,
    pub error_ns: u64,
    pub samples: u32,
}

/// What the store holds, for `openprof ls`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    pub nodes: Vec<NodeEntry>,
    pub processes: Vec<ProcessEntry>,
    pub agents: Vec<AgentEntry>,
    pub traces: Vec<TraceEntry>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeEntry {
    pub node: Uuid,
    pub hostname: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcessEntry {
    pub process: Uuid,
    pub node: Uuid,
    pub pid: u32,
    pub name: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AgentEntry {
    pub agent: Uuid,
    /// From agentCreate; `None` until it arrived (HPROF-format agents have none).
    pub process: Option<Uuid>,
    pub hostname: String,
    pub pid: u32,
    pub format: String,
    pub last_sequence: u64,
    pub frames: u64,
    pub bytes: u64,
    pub clock: Option<ClockEstimate>,
    /// Data the agent dropped and told us about (Loss frames), summed.
    pub lost_frames: u64,
    pub lost_bytes: u64,
    /// Whether its Goodbye arrived.
    pub finished: bool,
    /// Its `label=NAME:VALUE` options, in order, read from the options of its Hello.
    pub labels: Vec<(String, String)>,
    /// The public identity key its id is bound to; `None` for an agent that proved none.
    pub identity: Option<Vec<u8>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TraceEntry {
    pub trace: Uuid,
    pub agent: Uuid,
    /// Distinct collation values stored.
    pub elements: u64,
    /// Elements received again with a collation value already stored (dropped on export).
    pub duplicates: u64,
    /// Highest collation value seen.
    pub last_collation: u128,
    /// Missing collation values below the highest: `(first, last)` inclusive ranges.
    pub gaps: Vec<(u128, u128)>,
    /// Whether its traceEnd arrived.
    pub ended: bool,
}

/// How a trace is exported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExportOptions {
    /// Shift every `time` attribute by the agent's clock offset onto the collector's clock.
    pub align_clock: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExportSummary {
    pub elements: u64,
    pub duplicates_dropped: u64,
    pub gaps: Vec<(u128, u128)>,
}

/// What [`Store::replay_agent`] calls for each frame: kind, sequence, body.
pub type FrameVisitor<'a> = dyn FnMut(FrameKind, u64, &[u8]) -> Result<(), StoreError> + 'a;

/// A stored data frame as [`Store::frames_after`] hands it over.
pub struct StoredFrame<'a> {
    pub kind: FrameKind,
    pub sequence: u64,
    /// When the collector received it, ns since the epoch on its clock.
    pub received_ns: u64,
    pub body: &'a [u8],
}

/// What [`Store::frames_after`] calls for each frame.
pub type StoredFrameVisitor<'a> = dyn FnMut(&StoredFrame) -> Result<(), StoreError> + 'a;

/// The collector's storage. Implementations are shared between connections.
pub trait Store: Send + Sync + 'static {
    /// Registers an agent's (re)connection; returns the highest sequence stored for it (0: none).
    fn open_agent(&self, info: &AgentInfo) -> Result<u64, StoreError>;
    /// Binds an agent id to the identity key of the agent that first proved it, durably;
    /// returns whether `identity` is the key the id is bound to.
    fn bind_identity(&self, agent: Uuid, identity: &[u8]) -> Result<bool, StoreError>;
    /// Stores frames durably: when this returns `Ok`, they survive the collector's death
    /// (SIGKILL) and may be acknowledged. Frames at or below an agent's stored sequence are
    /// ignored (a resend after reconnection). On `Err` none of them is stored and
    /// [`Store::last_sequence`] is as before: the caller must not acknowledge anything after
    /// them either.
    fn append(&self, frames: &[Received]) -> Result<(), StoreError>;
    fn last_sequence(&self, agent: Uuid) -> Result<u64, StoreError>;
    fn record_clock(&self, agent: Uuid, estimate: ClockEstimate) -> Result<(), StoreError>;
    fn catalog(&self) -> Result<Catalog, StoreError>;
    /// Writes a trace as a document (docs/trace.dtd): its node, processCreate and agentCreate,
    /// then its elements in collationValue order, each once.
    fn export_trace(
        &self,
        trace: Uuid,
        options: ExportOptions,
        out: &mut dyn Write,
    ) -> Result<ExportSummary, StoreError>;
    /// Every data frame of an agent exactly as received, in sequence order.
    fn replay_agent(&self, agent: Uuid, visit: &mut FrameVisitor) -> Result<(), StoreError> {
        self.frames_after(agent, 0, &mut |frame| {
            visit(frame.kind, frame.sequence, frame.body)
        })
    }
    /// The data frames of an agent with a sequence above `after`, exactly as received, with
    /// when they were received, in sequence order (a reader that keeps up with an agent).
    fn frames_after(
        &self,
        agent: Uuid,
        after: u64,
        visit: &mut StoredFrameVisitor,
    ) -> Result<(), StoreError>;
}
