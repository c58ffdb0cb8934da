//! HPROF text's records as Rust types (threads, traces and their frames, CPU tables, the
//! sampler's report), and [`TextProfile`], everything one file holds.

use std::collections::BTreeMap;

use super::SitesTable;
use crate::heap::HeapHistogram;

/// Trace serial numbers count from here, as HPROF's do (the first trace is 300001).
pub const TRACE_SERIAL_START: u32 = 300000;
/// Thread serial numbers count from here, as HPROF's do (the first thread is 200001).
pub const THREAD_SERIAL_START: u32 = 200000;

/// Where in its method a frame was.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameLine {
    /// A source line number.
    Line(u32),
    /// No line information (HPROF's `Unknown line`, its -1).
    Unknown,
    /// A compiled method without location (HPROF's -2).
    Compiled,
    /// A native method (HPROF's -3).
    Native,
    /// Not a Java method's frame but one of native code (C, C++) the sampled thread was running:
    /// the frame's `method_name` is the function's symbol and its `class_name` the library.
    NativeCode,
    /// Not a frame at all but a mark that the sample's Java stack could not be walked: the
    /// frame's `method_name` says why (e.g. `[GC active]`), its `class_name` is empty.
    FailedWalk,
    /// Not a frame but the JVM's own thread (a JIT compiler, a GC worker) the sample was taken
    /// on, outermost in its trace: the frame's `method_name` is `[thread name]`, its
    /// `class_name` is empty.
    VmThread,
    /// Not a frame but the mark that the frames above it are a virtual thread's (JDK 21 and
    /// later), outermost in its trace where its carrier thread's frames would be: the frame's
    /// `method_name` is `[virtual thread]`, its `class_name` is empty.
    VirtualThread,
    /// Not a frame but the labels of the samples counted on its trace, outermost: the values
    /// of the traced calls they were taken in and the application's context (continuous mode
    /// only). The frame's `method_name` holds them encoded as [`encode_labels`] does, its
    /// `class_name` is empty.
    Labels,
}

/// The source file HPROF binary gives a native code frame, to tell it from a Java method's.
pub const NATIVE_CODE_SOURCE: &str = "<native code>";
/// The class and source file HPROF binary gives a failed walk's mark.
pub const FAILED_WALK_SOURCE: &str = "<failed walk>";
/// The class and source file HPROF binary gives a JVM thread's root frame.
pub const VM_THREAD_SOURCE: &str = "<vm thread>";
/// The class and source file HPROF binary gives a virtual thread's root frame.
pub const VIRTUAL_THREAD_SOURCE: &str = "<virtual thread>";
/// The name of a virtual thread's root frame.
pub const VIRTUAL_THREAD_MARK: &str = "[virtual thread]";

/// The name of openprof's record saying the TRACEs printed before it are forgotten
/// (`TextWriter::forgotten_traces`).
pub const FORGOTTEN_TRACES: &str = "FORGOTTEN TRACES";

/// The class and source file HPROF binary gives a labels frame.
pub const LABELS_SOURCE: &str = "<labels>";

/// Labels as a labels frame holds them: `name=value` pairs joined by `;`, with `%`, `;`, `=`
/// and line breaks in names and values written as `%XX`.
pub fn encode_labels(labels: &[(String, String)]) -> String {
    fn escaped(text: &str, into: &mut String) {
        for character in text.chars() {
            match character {
                '%' | ';' | '=' | '\n' | '\r' => {
                    into.push_str(&format!("%{:02X}", character as u32))
                }
                _ => into.push(character),
            }
        }
    }
    let mut encoded = String::new();
    for (at, (name, value)) in labels.iter().enumerate() {
        if at > 0 {
            encoded.push(';');
        }
        escaped(name, &mut encoded);
        encoded.push('=');
        escaped(value, &mut encoded);
    }
    encoded
}

/// The labels [`encode_labels`] encoded; a pair without `=` is a name with an empty value.
pub fn decode_labels(encoded: &str) -> Vec<(String, String)> {
    fn unescaped(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut decoded = Vec::with_capacity(bytes.len());
        let mut at = 0;
        while at < bytes.len() {
            let byte = std::str::from_utf8(bytes.get(at + 1..at + 3).unwrap_or_default())
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok());
            match (bytes[at], byte) {
                (b'%', Some(byte)) => {
                    decoded.push(byte);
                    at += 3;
                }
                (byte, _) => {
                    decoded.push(byte);
                    at += 1;
                }
            }
        }
        String::from_utf8_lossy(&decoded).into_owned()
    }
    encoded
        .split(';')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) => (unescaped(name), unescaped(value)),
            None => (unescaped(pair), String::new()),
        })
        .collect()
}

/// One stack frame of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    /// The class in Java source form: `java.util.HashMap`, `int[]`.
    pub class_name: String,
    pub method_name: String,
    /// The source file, `None` when the class has none (`<Unknown Source>`).
    pub source_file: Option<String>,
    pub line: FrameLine,
}

impl Frame {
    /// A frame of native code: `symbol` (or `library+0xoffset` when it has none) in `library`.
    pub fn native_code(library: &str, symbol: &str) -> Frame {
        Frame {
            class_name: library.to_string(),
            method_name: symbol.to_string(),
            source_file: None,
            line: FrameLine::NativeCode,
        }
    }

    /// The mark of a sample whose Java stack could not be walked, e.g. `[GC active]`.
    pub fn failed_walk(mark: &str) -> Frame {
        Frame {
            class_name: String::new(),
            method_name: mark.to_string(),
            source_file: None,
            line: FrameLine::FailedWalk,
        }
    }

    /// The root of a sample taken on the JVM's own thread `name` (a JIT compiler, a GC
    /// worker): `[name]`.
    pub fn vm_thread(name: &str) -> Frame {
        Frame {
            class_name: String::new(),
            method_name: if name.starts_with('[') {
                name.to_string()
            } else {
                format!("[{name}]")
            },
            source_file: None,
            line: FrameLine::VmThread,
        }
    }

    /// The root of a virtual thread's frames (see [`FrameLine::VirtualThread`]).
    pub fn virtual_thread() -> Frame {
        Frame {
            class_name: String::new(),
            method_name: VIRTUAL_THREAD_MARK.to_string(),
            source_file: None,
            line: FrameLine::VirtualThread,
        }
    }

    /// The frame that holds a trace's labels (see [`FrameLine::Labels`]), from their encoding.
    pub fn labels(encoded: &str) -> Frame {
        Frame {
            class_name: String::new(),
            method_name: encoded.to_string(),
            source_file: None,
            line: FrameLine::Labels,
        }
    }

    /// Whether this is a Java method's frame (not native code, a failed walk's mark, a JVM
    /// thread's or a virtual thread's root, or labels).
    pub fn is_java(&self) -> bool {
        !matches!(
            self.line,
            FrameLine::NativeCode
                | FrameLine::FailedWalk
                | FrameLine::VmThread
                | FrameLine::VirtualThread
                | FrameLine::Labels
        )
    }

    /// `class.method`, as the CPU SAMPLES table names a trace's top frame; a native code
    /// frame's symbol, or a failed walk's mark, stands alone.
    pub fn qualified_method(&self) -> String {
        if self.is_java() {
            format!("{}.{}", self.class_name, self.method_name)
        } else {
            self.method_name.clone()
        }
    }
}

impl std::fmt::Display for Frame {
    /// HPROF's frame layout: `class.method(Source.java:line)`; native code is
    /// `symbol(library:native)`, a failed walk's mark `[reason](failed walk)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = self.source_file.as_deref().unwrap_or("<Unknown Source>");
        let line = match &self.line {
            FrameLine::Line(line) => {
                return write!(
                    f,
                    "{}.{}({source}:{line})",
                    self.class_name, self.method_name
                )
            }
            FrameLine::Unknown => "Unknown line",
            FrameLine::Compiled => "Compiled method",
            FrameLine::Native => "Native method",
            FrameLine::NativeCode => {
                return write!(f, "{}({}:native)", self.method_name, self.class_name)
            }
            FrameLine::FailedWalk => return write!(f, "{}(failed walk)", self.method_name),
            FrameLine::VmThread => return write!(f, "{}(vm thread)", self.method_name),
            FrameLine::VirtualThread => return write!(f, "{}(virtual thread)", self.method_name),
            FrameLine::Labels => return write!(f, "{}(labels)", self.method_name),
        };
        write!(
            f,
            "{}.{}({source}:{line})",
            self.class_name, self.method_name
        )
    }
}

/// A `TRACE n:` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub serial: u32,
    /// The thread's serial number when traces carry threads (`thread=y`).
    pub thread: Option<u32>,
    /// Innermost frame first.
    pub frames: Vec<Frame>,
}

/// A `THREAD START` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStart {
    pub object_id: u64,
    pub serial: u32,
    pub name: String,
    pub group: String,
}

/// Which table a [`CpuTable`] is: sampled (`CPU SAMPLES`), timed (`CPU TIME (ms)`), or
/// openprof's wall-clock samples (`WALL SAMPLES`: every thread, running or not, with its state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuTableKind {
    Samples,
    Time,
    Wall,
}

impl CpuTableKind {
    pub(super) fn record_name(self) -> &'static str {
        match self {
            CpuTableKind::Samples => "CPU SAMPLES",
            CpuTableKind::Time => "CPU TIME (ms)",
            CpuTableKind::Wall => "WALL SAMPLES",
        }
    }
}

/// One row of a CPU SAMPLES or CPU TIME table.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuRow {
    pub rank: u32,
    pub self_percent: f64,
    pub accum_percent: f64,
    pub count: u64,
    pub trace: u32,
    /// The thread's state in a WALL SAMPLES row (`running`, `native`, `blocked`, `waiting`,
    /// `parked`, `sleeping`, `unknown`); `None` in the other tables.
    pub state: Option<String>,
    /// The trace's top frame as `class.method`, or `None` for an empty trace.
    pub method: Option<String>,
}

/// A `CPU SAMPLES BEGIN … END` (or `CPU TIME (ms)`) table.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTable {
    pub kind: CpuTableKind,
    pub total: u64,
    /// The date as HPROF prints it (C's `ctime` layout, without the newline).
    pub date: String,
    pub rows: Vec<CpuRow>,
}

/// Which lock table a [`LockTable`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockTableKind {
    /// HPROF's `MONITOR TIME`: time threads spent blocked entering contended monitors, by the
    /// blocked thread's trace and the monitor's class.
    Monitor,
    /// openprof's `PARK TIME`: time threads spent parked (`LockSupport.park`: the locks,
    /// conditions and queues of `java.util.concurrent`), by the parked thread's trace and the
    /// class of the object it parked on (its park blocker).
    Park,
    /// openprof's `LOCK OWNERS`: the same waits' time by the trace of the thread that held the
    /// lock when the wait began, with how its waiters waited (`blocked` or `parked`) and the
    /// lock's class.
    Owners,
}

impl LockTableKind {
    pub const ALL: [LockTableKind; 3] = [
        LockTableKind::Monitor,
        LockTableKind::Park,
        LockTableKind::Owners,
    ];

    /// The record's name, before ` BEGIN` and ` END`.
    pub fn record_name(self) -> &'static str {
        match self {
            LockTableKind::Monitor => "MONITOR TIME",
            LockTableKind::Park => "PARK TIME",
            LockTableKind::Owners => "LOCK OWNERS",
        }
    }

    /// The name of the rows' last column.
    pub(super) fn class_column(self) -> &'static str {
        match self {
            LockTableKind::Monitor => "monitor",
            LockTableKind::Park => "blocker",
            LockTableKind::Owners => "lock",
        }
    }
}

/// A row's class when there is none to give (a park without a blocker object).
pub const NO_LOCK_CLASS: &str = "<none>";

/// How a thread waited for a lock, as `LOCK OWNERS` rows say it.
pub const WAITED_BLOCKED: &str = "blocked";
pub const WAITED_PARKED: &str = "parked";

/// A lock table: MONITOR TIME (HPROF's `monitor=y`), PARK TIME or LOCK OWNERS. Its rows have a
/// CPU table's columns: a row's `method` holds the lock's class (`None`: a park without a
/// blocker), `count` the waits, `self` the share of the time; LOCK OWNERS rows have `state`,
/// how the waiters waited.
#[derive(Clone, Debug, PartialEq)]
pub struct LockTable {
    pub kind: LockTableKind,
    /// Milliseconds waited, over all rows.
    pub total_ms: u64,
    pub date: String,
    pub rows: Vec<CpuRow>,
}

/// One row's figures before ranking: its trace, how the waiters waited (LOCK OWNERS only),
/// the lock's class, the waits and the nanoseconds waited.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockEntry {
    pub trace: u32,
    pub state: Option<String>,
    pub class: Option<String>,
    pub waits: u64,
    pub nanoseconds: u64,
}

impl LockTable {
    /// Ranks entries by time waited, most first (ties by trace, then class): percentages of
    /// the whole, every entry listed (a wait counts whatever its share).
    pub fn rank(kind: LockTableKind, date: String, mut entries: Vec<LockEntry>) -> LockTable {
        entries.sort_by(|a, b| {
            b.nanoseconds
                .cmp(&a.nanoseconds)
                .then_with(|| (a.trace, &a.state, &a.class).cmp(&(b.trace, &b.state, &b.class)))
        });
        let total_ns: u64 = entries.iter().map(|entry| entry.nanoseconds).sum();
        let mut accum = 0.0;
        let rows = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                let share = 100.0 * entry.nanoseconds as f64 / total_ns.max(1) as f64;
                accum += share;
                CpuRow {
                    rank: index as u32 + 1,
                    self_percent: share,
                    accum_percent: accum,
                    count: entry.waits,
                    trace: entry.trace,
                    state: entry.state,
                    method: entry.class,
                }
            })
            .collect();
        LockTable {
            kind,
            total_ms: total_ns / 1_000_000,
            date,
            rows,
        }
    }
}

/// One trace's cost for a CPU table: samples (cost = hits) or CPU time with entry counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuEntry {
    pub trace: u32,
    /// What the table ranks by: samples, or nanoseconds of CPU.
    pub cost: u64,
    /// What its count column shows: samples, or the true number of entries.
    pub hits: u64,
    /// The thread state of a wall-clock entry.
    pub state: Option<String>,
    pub method: Option<String>,
}

impl CpuTable {
    /// Ranks traces by count, most first, the way HPROF does: percentages of `total`, rows cut
    /// where a trace's share falls below `cutoff`. Each entry is (trace serial, count, method).
    pub fn rank(
        kind: CpuTableKind,
        date: String,
        entries: Vec<(u32, u64, Option<String>)>,
        cutoff: f64,
    ) -> CpuTable {
        let total: u64 = entries.iter().map(|entry| entry.1).sum();
        let entries = entries
            .into_iter()
            .map(|(trace, count, method)| CpuEntry {
                trace,
                cost: count,
                hits: count,
                state: None,
                method,
            })
            .collect();
        Self::rank_by_cost(kind, date, entries, cutoff, total)
    }

    /// Ranks traces by cost, most first; `total` is what the header prints (samples, or
    /// milliseconds for CPU TIME).
    pub fn rank_by_cost(
        kind: CpuTableKind,
        date: String,
        mut entries: Vec<CpuEntry>,
        cutoff: f64,
        total: u64,
    ) -> CpuTable {
        let total_cost: u64 = entries.iter().map(|entry| entry.cost).sum();
        entries.sort_by(|a, b| {
            b.cost
                .cmp(&a.cost)
                .then(a.trace.cmp(&b.trace))
                .then_with(|| a.state.cmp(&b.state))
        });
        let mut rows = Vec::new();
        let mut accum = 0.0;
        for entry in entries {
            let ratio = entry.cost as f64 / total_cost as f64;
            if entry.cost == 0 || ratio < cutoff {
                break;
            }
            accum += ratio;
            rows.push(CpuRow {
                rank: rows.len() as u32 + 1,
                self_percent: ratio * 100.0,
                accum_percent: accum * 100.0,
                count: entry.hits,
                trace: entry.trace,
                state: entry.state,
                method: entry.method,
            });
        }
        CpuTable {
            kind,
            total,
            date,
            rows,
        }
    }
}

/// openprof's `WALL SAMPLER` record, before each WALL SAMPLES table: how the wall-clock samples
/// were taken and how many were not. A WALL SAMPLES row counts thread-intervals: a sample
/// stands for the intervals since its thread's previous sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WallSampler {
    pub interval_ms: u32,
    /// At most this many threads are sampled per interval.
    pub threads_per_tick: u32,
    /// Intervals (rounds of signals) since the last dump.
    pub intervals: u64,
    /// Samples taken (threads signalled) since the last dump.
    pub sampled: u64,
    /// Thread-intervals not sampled because of that bound, since the last dump.
    pub skipped: u64,
    /// Signals the kernel refused (the thread had ended), since the last dump.
    pub lost: u64,
}

/// openprof's `CPU SAMPLER` record: how samples were taken and what could not be walked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SamplerReport {
    /// `AsyncGetCallTrace` or `GetAllStackTraces`.
    pub sampler: String,
    /// Why that sampler, when it is not the one asked for (e.g. AsyncGetCallTrace missing).
    pub note: Option<String>,
    /// What timed the samples (e.g. `perf_events task-clock`), when a clock did.
    pub clock: Option<String>,
    pub interval_ms: u32,
    /// How many Java frames a sample keeps (`depth=`): a trace that deep may have been cut.
    pub depth: Option<u32>,
    /// Samples taken whose stack walk failed, by reason (AsyncGetCallTrace's names).
    pub failed: BTreeMap<String, u64>,
    /// Samples whose first walk failed and that a second way walked, by that way (e.g.
    /// `stub_return_address`); they count as samples, not as failures.
    pub recovered: BTreeMap<String, u64>,
    /// The Java stack walker other than AsyncGetCallTrace, when one was asked for (`vm`,
    /// `check`), and its counts: `walked`, `failed.<why>` (AsyncGetCallTrace walked those),
    /// and with `check` how the two walks of each sample compared (`check.<kind>`).
    pub walker: Option<String>,
    pub walker_counts: BTreeMap<String, u64>,
    /// With `check`, a few samples of each kind of disagreement, so a reader sees what it is.
    pub walker_examples: Vec<WalkerExample>,
    /// Samples lost because the sample buffer was full.
    pub dropped: u64,
    /// Samples that caught an application thread running the agent's own wall-clock signal
    /// handler: the profiler's cost, not the application's, left out of the table.
    pub in_agent: u64,
    /// What taking the samples cost, in microseconds of CPU, by part (`handler`: inside the
    /// signal handler; `agent_thread`: the agent's own thread; `dump`: writing this dump).
    pub cost_us: BTreeMap<String, u64>,
}

/// One sample the two walkers of `walker=check` walked differently: the kind (`check.<kind>`'s
/// name) and each walk's frames from the `first` (the leaf is 0; a few above where the walks
/// first differ), as `package.Class.method@bci` (`?` for a method whose class is gone); a walk
/// that failed has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalkerExample {
    pub kind: String,
    pub first: usize,
    /// How ours walked: `TOP/START/LEAF_FRAMES` (where it found the top Java frame, how it
    /// got there, how many Java frames that frame gave) or `failed/WHY`.
    pub vm_walk: String,
    pub vm: Vec<String>,
    pub asgct: Vec<String>,
}

impl WalkerExample {
    /// The example as the `walker.example` line's value: `KIND at=N vm_walk=HOW vm=F;F;...
    /// asgct=F;F;...`
    /// (`-` for a walk without frames).
    pub fn to_line(&self) -> String {
        let frames = |frames: &[String]| {
            if frames.is_empty() {
                "-".to_string()
            } else {
                frames.join(";")
            }
        };
        format!(
            "{} at={} vm_walk={} vm={} asgct={}",
            self.kind,
            self.first,
            self.vm_walk,
            frames(&self.vm),
            frames(&self.asgct)
        )
    }

    /// Reads a `walker.example` line's value; `None` when it is not one.
    pub fn from_line(value: &str) -> Option<WalkerExample> {
        let mut fields = value.split(' ');
        let kind = fields.next()?.to_string();
        let first = fields.next()?.strip_prefix("at=")?.parse().ok()?;
        let vm_walk = fields.next()?.strip_prefix("vm_walk=")?.to_string();
        let frames = |field: Option<&str>, name: &str| -> Option<Vec<String>> {
            let list = field?.strip_prefix(name)?.strip_prefix('=')?;
            Some(if list == "-" {
                Vec::new()
            } else {
                list.split(';').map(str::to_string).collect()
            })
        };
        let vm = frames(fields.next(), "vm")?;
        let asgct = frames(fields.next(), "asgct")?;
        (fields.next().is_none() && !kind.is_empty()).then_some(WalkerExample {
            kind,
            first,
            vm_walk,
            vm,
            asgct,
        })
    }
}

impl SamplerReport {
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// Everything read from an HPROF text file (or, by [`crate::hprof_binary::read_profile`], from an
/// HPROF binary one).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextProfile {
    /// The header's first line, e.g. `JAVA PROFILE 1.0.1, created …`.
    pub header: String,
    pub threads_started: Vec<ThreadStart>,
    pub threads_ended: Vec<u32>,
    pub traces: BTreeMap<u32, Trace>,
    /// Every sampler record, one per dump.
    pub samplers: Vec<SamplerReport>,
    /// Every wall sampler record, one per dump.
    pub wall_samplers: Vec<WallSampler>,
    /// Every CPU table, one per dump, in file order.
    pub cpu_tables: Vec<CpuTable>,
    /// Every SITES table, one per dump, in file order.
    pub sites: Vec<SitesTable>,
    /// Every heap dump, summed by class as it was read, in file order.
    pub heap_dumps: Vec<HeapHistogram>,
    /// MONITOR TIME, PARK TIME and LOCK OWNERS tables, in file order.
    pub lock_tables: Vec<LockTable>,
    /// Sections this reader does not model (e.g. `MONITOR DUMP`), by name, in file order.
    pub skipped_sections: Vec<String>,
    /// How many FORGOTTEN TRACES records there were (the traces printed again after one are
    /// the same traces under the same serials).
    pub traces_forgotten: u32,
    /// The tables of the last `MPT` record (method parameter tracing): the agent's figures run
    /// from the start of the run, so the last record holds all the others do.
    pub mpt: Vec<crate::mpt_stats::MptTable>,
    /// Every `MPT` record with its date (`None` where it has none), in file order: the figures
    /// as each dump had them, for how a value's calls went over time.
    pub mpt_dumps: Vec<(Option<String>, Vec<crate::mpt_stats::MptTable>)>,
    /// Every `MPT SAMPLES` record (samples inside traced calls), one per dump and event: each
    /// counts since the last dump.
    pub mpt_samples: Vec<super::mpt_samples::MptSamples>,
}

impl TextProfile {
    /// The lock tables of one kind, in file order (one per dump: each counts since the last).
    pub fn lock_tables_of(&self, kind: LockTableKind) -> impl Iterator<Item = &LockTable> {
        self.lock_tables
            .iter()
            .filter(move |table| table.kind == kind)
    }

    /// The last CPU SAMPLES table: at exit it holds every sample of the run.
    pub fn last_cpu_samples(&self) -> Option<&CpuTable> {
        self.cpu_tables
            .iter()
            .rev()
            .find(|table| table.kind == CpuTableKind::Samples)
    }

    /// The last SITES table: HPROF's site figures are not reset by dumps, so it is the latest.
    pub fn last_sites(&self) -> Option<&SitesTable> {
        self.sites.last()
    }

    /// The last heap dump.
    pub fn last_heap_dump(&self) -> Option<&HeapHistogram> {
        self.heap_dumps.last()
    }

    pub fn thread(&self, serial: u32) -> Option<&ThreadStart> {
        self.threads_started
            .iter()
            .find(|thread| thread.serial == serial)
    }
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn labels_come_back_as_they_went_in_whatever_they_hold() {
        let labels = vec![
            ("user".to_string(), "alice".to_string()),
            (
                "MptSlow.lookup(java.lang.String) 1".to_string(),
                "a;b=c%d\nz".to_string(),
            ),
            ("empty".to_string(), String::new()),
        ];
        let encoded = encode_labels(&labels);
        assert!(!encoded.contains('\n'));
        assert_eq!(encoded.matches(';').count(), 2);
        assert_eq!(decode_labels(&encoded), labels);
        let frame = Frame::labels(&encoded);
        assert!(!frame.is_java());
        assert_eq!(frame.to_string(), format!("{encoded}(labels)"));
        assert_eq!(decode_labels("%zz=%4"), vec![("%zz".into(), "%4".into())]);
    }
}
