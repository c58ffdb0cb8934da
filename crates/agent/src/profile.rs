//! The CPU sample profile: stacks turned into TRACEs numbered as HPROF numbers them, how often
//! each was sampled since the last dump, and the samples that could not be walked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use openprof_format::hprof_text::encode_labels;
use openprof_format::hprof_text::mpt_samples::{MptSampledValue, MptSamples};
use openprof_format::hprof_text::{
    CpuEntry, CpuTable, CpuTableKind, Frame, FrameLine, LockEntry, LockTable, LockTableKind, Trace,
    TRACE_SERIAL_START,
};
use openprof_format::mpt_stats::ValueKey;
use openprof_format::options::CONTEXT_CLASS;

use crate::jvmti::{jmethodID, Jvmti};
use crate::methods::{Location, MethodInfo, Methods};
use crate::native_symbols::NativeSymbols;
use crate::signals::failure_name;

/// Traces a profile holds before a dump forgets those nothing refers to any more
/// (`forget_unused_traces`): a JVM whose classes come and go makes new stacks without end.
const TRACES_KEPT: usize = 20_000;

/// [`TRACES_KEPT`], or `OPENPROF_TRACES_KEPT` from the environment (a number of at least 1),
/// read once: fewer bound the memory lower and send stacks again more often.
fn traces_kept() -> usize {
    static KEPT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| match std::env::var("OPENPROF_TRACES_KEPT") {
        Err(_) => TRACES_KEPT,
        Ok(value) => match value.parse::<usize>() {
            Ok(kept) if kept >= 1 => kept,
            _ => {
                eprintln!(
                    "openprof: OPENPROF_TRACES_KEPT={value} is not a number of at least 1; \
                     {TRACES_KEPT} are kept"
                );
                TRACES_KEPT
            }
        },
    })
}

/// One frame of a sample as it was taken.
#[derive(Clone, Debug)]
pub enum SampledFrame {
    Java(jmethodID, Location),
    /// Native code at this pc.
    NativeCode(usize),
    /// The Java stack could not be walked: AsyncGetCallTrace's failure code.
    FailedWalk(i32),
    /// The sample was taken on this thread of the JVM's own (vmthreads=y): its trace's root.
    VmThread(std::sync::Arc<str>),
    /// Our walk ended at a virtual thread's continuation: the frames above were the virtual
    /// thread's, the rest of them are in the heap.
    VirtualThread,
}

/// The mark a failed walk's sample shows, by AsyncGetCallTrace's failure code (one per code;
/// docs/hprof-text.md lists them).
pub fn failed_walk_mark(code: i32) -> &'static str {
    match code {
        0 => "[no Java frame]",
        -1 => "[no class load]",
        -2 => "[GC active]",
        -3 => "[unknown native]",
        -4 => "[not walkable native]",
        -5 => "[unknown Java]",
        -6 => "[not walkable Java]",
        -7 => "[unknown state]",
        -8 => "[thread exit]",
        -9 => "[deopt]",
        -10 => "[safepoint]",
        _ => "[unknown failure]",
    }
}

/// A trace's frame as traces are told apart: a Java method by its jmethodID and line, other
/// frames by what they show (pcs of one function make one frame). A trace is kept as these
/// frames, and its frames' text made only when it is printed: a stack of 300 frames kept as
/// text took some 80 KiB, and a deep recursion sampled for minutes makes tens of thousands of
/// such stacks (gigabytes, where these frames take a tenth).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum KeyFrame {
    Java(JavaFrame),
    /// A native frame, by its number in the profile's native symbols.
    Native(u32),
    Shown(Arc<Frame>),
}

/// A Java frame: its method (the jmethodID and line tell frames apart) and what is known of it.
#[derive(Clone, Debug)]
struct JavaFrame {
    method: usize,
    line: FrameLine,
    info: Arc<MethodInfo>,
}

impl PartialEq for JavaFrame {
    fn eq(&self, other: &Self) -> bool {
        self.method == other.method && self.line == other.line
    }
}

impl Eq for JavaFrame {}

impl std::hash::Hash for JavaFrame {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.method.hash(state);
        self.line.hash(state);
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TraceKey {
    thread: Option<u32>,
    frames: Vec<KeyFrame>,
}

impl KeyFrame {
    /// The frame as a TRACE shows it.
    fn shown(&self, natives: &NativeSymbols) -> Frame {
        match self {
            KeyFrame::Java(frame) => frame.info.frame(frame.line.clone()),
            KeyFrame::Native(number) => natives.numbered(*number).clone(),
            KeyFrame::Shown(frame) => Frame::clone(frame),
        }
    }

    /// `class.method` of a Java frame.
    fn java_method(&self) -> Option<String> {
        match self {
            KeyFrame::Java(frame) => Some(format!(
                "{}.{}",
                frame.info.class_name, frame.info.method_name
            )),
            KeyFrame::Shown(frame) if frame.is_java() => Some(frame.qualified_method()),
            _ => None,
        }
    }
}

/// What one dump writes: the TRACEs not printed before, the ranked table, the samples taken
/// inside traced calls, the walk failures.
pub struct CpuDump {
    pub new_traces: Vec<Trace>,
    pub table: CpuTable,
    pub mpt_samples: Option<MptSamples>,
    pub failed: BTreeMap<String, u64>,
    pub dropped: u64,
}

/// What lock waits are counted by in the report.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct LockKey {
    table: LockTableKind,
    trace: u32,
    state: Option<String>,
    class: Option<String>,
}

pub struct CpuProfile {
    /// Line numbers in traces (`lineno=y`); without them frames are told apart by method only.
    lineno: bool,
    /// Samples taken inside traced calls get their calls' values as labels, in a labels frame
    /// outermost in their traces (continuous mode).
    labelled: bool,
    /// The labels frame of each traced call met (bounded as the calls' numbers are).
    label_frames: HashMap<u32, Arc<Frame>>,
    methods: Methods,
    natives: NativeSymbols,
    serial_by_key: HashMap<Arc<TraceKey>, u32>,
    traces: HashMap<u32, Arc<TraceKey>>,
    /// (hits, cost) per trace since the last dump: samples, or entries and CPU nanoseconds.
    counts: HashMap<u32, (u64, u64)>,
    /// Wall-clock samples per trace and thread state since the last dump.
    wall_counts: HashMap<(u32, &'static str), u64>,
    /// Samples since the last dump taken inside traced calls (`traced_calls`), by table
    /// (CPU or wall), trace, call and wall state.
    call_counts: HashMap<CallSampleKey, u64>,
    /// Waits for locks since the last dump, by table, trace, how the waiters waited (LOCK
    /// OWNERS) and lock class: (waits, nanoseconds).
    lock_counts: HashMap<LockKey, (u64, u64)>,
    printed: HashSet<u32>,
    failed: BTreeMap<String, u64>,
    dropped: u64,
    last_serial: u32,
}

impl CpuProfile {
    pub fn new(lineno: bool, labelled: bool) -> Self {
        CpuProfile {
            lineno,
            labelled,
            label_frames: HashMap::new(),
            methods: Methods::default(),
            natives: NativeSymbols::default(),
            serial_by_key: HashMap::new(),
            traces: HashMap::new(),
            counts: HashMap::new(),
            wall_counts: HashMap::new(),
            call_counts: HashMap::new(),
            lock_counts: HashMap::new(),
            printed: HashSet::new(),
            failed: BTreeMap::new(),
            dropped: 0,
            // HPROF's first trace, 300000, is the empty trace of the VM's own work.
            last_serial: TRACE_SERIAL_START,
        }
    }

    /// Counts one sample of `frames` (innermost first), taken on `thread` when traces carry
    /// threads.
    pub fn add_sample(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = (jmethodID, Location)>,
    ) {
        self.add_cost(jvmti, thread, frames, 1, 1);
    }

    /// Adds `hits` and `cost` to the trace of `frames` (innermost first).
    pub fn add_cost(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = (jmethodID, Location)>,
        hits: u64,
        cost: u64,
    ) {
        let serial = self.intern(jvmti, thread, frames);
        let counted = self.counts.entry(serial).or_default();
        counted.0 += hits;
        counted.1 += cost;
    }

    /// The serial number of the TRACE of `frames` (innermost first), numbered on first sight:
    /// CPU samples and allocation sites share one numbering, as in HPROF.
    pub fn intern(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = (jmethodID, Location)>,
    ) -> u32 {
        self.intern_sampled(
            jvmti,
            thread,
            frames.map(|(method, location)| SampledFrame::Java(method, location)),
            0,
        )
    }

    /// Counts one sample of `frames` (innermost first), Java or not, taken inside the traced
    /// call `call` (0: none).
    pub fn add_sampled(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = SampledFrame>,
        call: u32,
    ) {
        let serial = self.intern_sampled(jvmti, thread, frames, call);
        let counted = self.counts.entry(serial).or_default();
        counted.0 += 1;
        counted.1 += 1;
        if call != 0 {
            *self
                .call_counts
                .entry((CpuTableKind::Samples, serial, call, None))
                .or_default() += 1;
        }
    }

    /// Counts one wall-clock sample of `frames` (innermost first) taken in `vm_state`
    /// (`JavaThread::_thread_state`, 0 when unknown) inside the traced call `call` (0: none),
    /// standing for `intervals` intervals of its thread's wall time. Returns the state it was
    /// counted in.
    pub fn add_wall_sampled(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = SampledFrame>,
        vm_state: i32,
        intervals: u64,
        call: u32,
    ) -> &'static str {
        let serial = self.intern_sampled(jvmti, thread, frames, call);
        let top = self.traces[&serial]
            .frames
            .iter()
            .find_map(KeyFrame::java_method);
        let state = wall_state(vm_state, top.as_deref());
        *self.wall_counts.entry((serial, state)).or_default() += intervals;
        if call != 0 {
            *self
                .call_counts
                .entry((CpuTableKind::Wall, serial, call, Some(state)))
                .or_default() += intervals;
        }
        state
    }

    /// Counts `intervals` of wall time a virtual thread spent off its carrier (parked, asleep,
    /// waiting or blocked) on `frames`, the stack it resumed with; its state is told by the
    /// methods on top of it. The state counted.
    pub fn add_virtual_thread_off_carrier(
        &mut self,
        jvmti: Jvmti,
        frames: impl Iterator<Item = SampledFrame>,
        intervals: u64,
    ) -> &'static str {
        let serial = self.intern_sampled(jvmti, None, frames, 0);
        let top: Vec<String> = self.traces[&serial]
            .frames
            .iter()
            .filter_map(KeyFrame::java_method)
            .take(OFF_CARRIER_TOP_FRAMES)
            .collect();
        let state = off_carrier_state(&top);
        *self.wall_counts.entry((serial, state)).or_default() += intervals;
        state
    }

    /// Counts `waits` waits for a lock of `class` (`None`: a park without a blocker) that took
    /// `nanoseconds` together, on `frames`, in the lock table `table` (`state`: how the waiters
    /// waited, for LOCK OWNERS).
    #[allow(clippy::too_many_arguments)]
    pub fn add_lock(
        &mut self,
        jvmti: Jvmti,
        table: LockTableKind,
        thread: Option<u32>,
        frames: impl Iterator<Item = (jmethodID, Location)>,
        state: Option<&str>,
        class: Option<String>,
        waits: u64,
        nanoseconds: u64,
    ) {
        let trace = self.intern(jvmti, thread, frames);
        let key = LockKey {
            table,
            trace,
            state: state.map(str::to_string),
            class,
        };
        let counted = self.lock_counts.entry(key).or_default();
        counted.0 += waits;
        counted.1 += nanoseconds;
    }

    /// The lock tables of these kinds with the waits since the last dump, ranked by time
    /// waited, and the TRACEs they need that no earlier dump printed.
    pub fn take_lock_tables(
        &mut self,
        kinds: &[LockTableKind],
        date: String,
    ) -> (Vec<Trace>, Vec<LockTable>) {
        let mut entries: HashMap<LockTableKind, Vec<LockEntry>> = HashMap::new();
        for (key, (waits, nanoseconds)) in self.lock_counts.drain() {
            entries.entry(key.table).or_default().push(LockEntry {
                trace: key.trace,
                state: key.state,
                class: key.class,
                waits,
                nanoseconds,
            });
        }
        let tables: Vec<LockTable> = kinds
            .iter()
            .map(|kind| {
                let entries = entries.remove(kind).unwrap_or_default();
                LockTable::rank(*kind, date.clone(), entries)
            })
            .collect();
        let traces = tables
            .iter()
            .flat_map(|table| table.rows.iter().map(|row| row.trace))
            .collect::<Vec<u32>>();
        let new_traces = self.unprinted_traces(traces.into_iter());
        (new_traces, tables)
    }

    /// The serial number of the TRACE of `frames` (innermost first), taken inside the traced
    /// call `call` (0: none; with `labelled`, its values are the trace's labels).
    fn intern_sampled(
        &mut self,
        jvmti: Jvmti,
        thread: Option<u32>,
        frames: impl Iterator<Item = SampledFrame>,
        call: u32,
    ) -> u32 {
        let mut key = TraceKey {
            thread,
            frames: Vec::new(),
        };
        for frame in frames {
            key.frames.push(match frame {
                SampledFrame::Java(method, location) => {
                    let info = self.methods.get(jvmti, method);
                    // A virtual thread's frames end where its continuation was entered: its
                    // carrier's below are not its own, and are left out.
                    if info.continuation_entry {
                        key.frames
                            .push(KeyFrame::Shown(Arc::new(Frame::virtual_thread())));
                        break;
                    }
                    let line = if self.lineno {
                        info.line_of(location)
                    } else {
                        FrameLine::Unknown
                    };
                    KeyFrame::Java(JavaFrame {
                        method: method as usize,
                        line,
                        info,
                    })
                }
                SampledFrame::NativeCode(pc) => KeyFrame::Native(self.natives.frame_number(pc)),
                SampledFrame::FailedWalk(code) => {
                    KeyFrame::Shown(Arc::new(Frame::failed_walk(failed_walk_mark(code))))
                }
                SampledFrame::VmThread(name) => KeyFrame::Shown(Arc::new(Frame::vm_thread(&name))),
                SampledFrame::VirtualThread => {
                    key.frames
                        .push(KeyFrame::Shown(Arc::new(Frame::virtual_thread())));
                    break;
                }
            });
        }
        if self.labelled && call != 0 {
            let labels = self
                .label_frames
                .entry(call)
                .or_insert_with(|| Arc::new(Frame::labels(&encode_labels(&call_labels(call)))));
            key.frames.push(KeyFrame::Shown(labels.clone()));
        }
        if let Some(serial) = self.serial_by_key.get(&key) {
            return *serial;
        }
        // A trace not seen before.
        self.last_serial += 1;
        let serial = self.last_serial;
        let key = Arc::new(key);
        self.traces.insert(serial, key.clone());
        self.serial_by_key.insert(key, serial);
        serial
    }

    /// The TRACEs among `serials` that no earlier output printed, marked printed now.
    pub fn unprinted_traces(&mut self, serials: impl Iterator<Item = u32>) -> Vec<Trace> {
        let mut traces = Vec::new();
        for serial in serials {
            if let Some(key) = self.traces.get(&serial) {
                if self.printed.insert(serial) {
                    traces.push(Trace {
                        serial,
                        thread: key.thread,
                        frames: key
                            .frames
                            .iter()
                            .map(|frame| frame.shown(&self.natives))
                            .collect(),
                    });
                }
            }
        }
        traces
    }

    /// Starts again for a profiling session's own file: every count since the last dump is
    /// forgotten, and every TRACE is printed again when a table needs it.
    pub fn start_session(&mut self) {
        self.counts.clear();
        self.wall_counts.clear();
        self.call_counts.clear();
        self.lock_counts.clear();
        self.printed.clear();
        self.failed.clear();
        self.dropped = 0;
    }

    /// Every TRACE is printed again when a record next needs it (after the output told its
    /// readers to forget the traces printed).
    pub fn forget_printed(&mut self) {
        self.printed.clear();
    }

    /// After a dump, when the profile holds more than [`traces_kept`] traces: forgets every
    /// trace that neither a count since the dump nor `kept` (an engine's cumulative table)
    /// refers to. Their stacks, sampled again, get new serial numbers and are printed again.
    /// Returns whether it forgot any.
    pub fn forget_unused_traces(&mut self, kept: &HashSet<u32>) -> bool {
        if self.traces.len() <= traces_kept() {
            return false;
        }
        let mut used = kept.clone();
        used.extend(self.counts.keys());
        used.extend(self.wall_counts.keys().map(|(serial, _)| *serial));
        used.extend(self.call_counts.keys().map(|(_, serial, ..)| *serial));
        used.extend(self.lock_counts.keys().map(|key| key.trace));
        self.traces.retain(|serial, _| used.contains(serial));
        self.serial_by_key.retain(|_, serial| used.contains(serial));
        self.printed.retain(|serial| used.contains(serial));
        self.traces.shrink_to_fit();
        self.serial_by_key.shrink_to_fit();
        self.printed.shrink_to_fit();
        true
    }

    /// Forgets the sample counts since the last dump (CONTROL: clear CPU samples).
    pub fn clear_counts(&mut self) {
        self.counts.clear();
        self.call_counts
            .retain(|(kind, ..), _| *kind != CpuTableKind::Samples);
    }

    /// Every TRACE not printed yet, marked printed now.
    pub fn all_unprinted_traces(&mut self) -> Vec<Trace> {
        let mut serials: Vec<u32> = self.traces.keys().copied().collect();
        serials.sort_unstable();
        self.unprinted_traces(serials.into_iter())
    }

    /// Counts a sample whose stack walk failed with AsyncGetCallTrace's `code`.
    pub fn add_failure(&mut self, code: i32) {
        *self
            .failed
            .entry(failure_name(code).to_string())
            .or_default() += 1;
    }

    pub fn add_dropped(&mut self, dropped: u64) {
        self.dropped += dropped;
    }

    /// The table of the samples since the last dump, cut at `cutoff`, and the TRACEs it needs
    /// that no earlier dump printed. Counts start again from zero afterwards, as in HPROF.
    pub fn take_dump(&mut self, kind: CpuTableKind, date: String, cutoff: f64) -> CpuDump {
        let method = |serial: u32| top_method(&self.traces, &self.natives, serial);
        let entries: Vec<CpuEntry> = match kind {
            CpuTableKind::Wall => self
                .wall_counts
                .drain()
                .map(|((serial, state), count)| CpuEntry {
                    trace: serial,
                    cost: count,
                    hits: count,
                    state: Some(state.to_string()),
                    method: method(serial),
                })
                .collect(),
            _ => self
                .counts
                .drain()
                .map(|(serial, (hits, cost))| CpuEntry {
                    trace: serial,
                    cost,
                    hits,
                    state: None,
                    method: method(serial),
                })
                .collect(),
        };
        let total_cost: u64 = entries.iter().map(|entry| entry.cost).sum();
        // CPU TIME's total is in milliseconds; CPU SAMPLES' in samples.
        let total = match kind {
            CpuTableKind::Samples | CpuTableKind::Wall => total_cost,
            CpuTableKind::Time => total_cost / 1_000_000,
        };
        let mpt_samples = self.take_mpt_samples(kind, &date);
        let table = CpuTable::rank_by_cost(kind, date, entries, cutoff, total);
        let in_calls = mpt_samples
            .iter()
            .flat_map(|record| &record.values)
            .flat_map(|value| value.table.rows.iter().map(|row| row.trace));
        let serials: Vec<u32> = table
            .rows
            .iter()
            .map(|row| row.trace)
            .chain(in_calls)
            .collect();
        let new_traces = self.unprinted_traces(serials.into_iter());
        CpuDump {
            new_traces,
            table,
            mpt_samples,
            failed: std::mem::take(&mut self.failed),
            dropped: std::mem::take(&mut self.dropped),
        }
    }
}

impl CpuProfile {
    /// The MPT SAMPLES record of one table's samples inside traced calls since the last dump
    /// (`None` when there were none): per traced method, specification and value, its samples
    /// by trace. A call with several specifications counts its samples under each value.
    fn take_mpt_samples(&mut self, kind: CpuTableKind, date: &str) -> Option<MptSamples> {
        if matches!(kind, CpuTableKind::Time) {
            return None;
        }
        let (counted, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.call_counts)
            .into_iter()
            .partition(|((of, ..), _)| *of == kind);
        self.call_counts = kept.into_iter().collect();
        if counted.is_empty() {
            return None;
        }
        let samples = counted.iter().map(|(_, count)| count).sum();
        type ValueGroup = (String, String, ValueKey);
        let mut groups: HashMap<ValueGroup, HashMap<(u32, Option<&'static str>), u64>> =
            HashMap::new();
        for ((_, serial, call, state), count) in counted {
            let Some(call) = crate::traced_calls::values_of(call) else {
                continue;
            };
            for (spec, key) in call.values {
                *groups
                    .entry((call.method.clone(), spec, key))
                    .or_default()
                    .entry((serial, state))
                    .or_default() += count;
            }
        }
        let values = groups
            .into_iter()
            .map(|((method, spec, key), rows)| {
                let entries = rows
                    .into_iter()
                    .map(|((trace, state), count)| CpuEntry {
                        trace,
                        cost: count,
                        hits: count,
                        state: state.map(str::to_string),
                        method: top_method(&self.traces, &self.natives, trace),
                    })
                    .collect();
                MptSampledValue::rank(kind, method, spec, key, entries)
            })
            .collect();
        Some(MptSamples {
            kind,
            date: date.to_string(),
            samples,
            values,
        })
    }
}

/// The labels of a sample taken inside the traced call `call`: each traced call's values,
/// outermost call first, a value labelled by its specification (`Slow.work(int) 1=100`); a
/// call of the Context API gives its own name and value (`user=alice`).
fn call_labels(call: u32) -> Vec<(String, String)> {
    let mut calls = Vec::new();
    let mut at = call;
    // Bounded: an outer call was numbered before the calls made in it.
    while let Some(values) = crate::traced_calls::values_of(at) {
        let outer = values.outer;
        calls.push(values);
        if outer == 0 || outer >= at {
            break;
        }
        at = outer;
    }
    let context = format!("{CONTEXT_CLASS}.");
    let mut labels = Vec::new();
    for call in calls.iter().rev() {
        if call.method.replace('/', ".").starts_with(&context) {
            if let [(_, name), (_, value), ..] = call.values.as_slice() {
                labels.push((name.value.clone(), value.value.clone()));
            }
            continue;
        }
        for (spec, key) in &call.values {
            labels.push((spec.clone(), key.value.clone()));
        }
    }
    labels
}

/// The method at the top of a TRACE (what a CPU table's row names), `None` for an empty one.
fn top_method(
    traces: &HashMap<u32, Arc<TraceKey>>,
    natives: &NativeSymbols,
    serial: u32,
) -> Option<String> {
    traces[&serial]
        .frames
        .first()
        .map(|frame| frame.shown(natives).qualified_method())
}

/// A sample inside a traced call: its table (CPU or wall), trace, call, and wall state.
type CallSampleKey = (CpuTableKind, u32, u32, Option<&'static str>);

/// What a thread was doing when a wall-clock sample interrupted it, from its VM state
/// (HotSpot's `JavaThreadState`: in native 4, in VM 6, in Java 8, blocked 10; odd values are the
/// transitions out of each) and the Java method on top of its stack: a blocked thread is parked,
/// sleeping or waiting when that method is the JDK's park, sleep or wait, else it is blocked
/// entering a monitor. Without the VM state (VMStructs missing), the top method alone tells.
/// How many of the frames on top of a virtual thread's stack tell why it left its carrier
/// (the JDK's own park, sleep and wait methods are within them).
const OFF_CARRIER_TOP_FRAMES: usize = 8;

/// What a virtual thread off its carrier was doing, by the methods on top of its stack
/// (innermost first): sleeping in `Thread.sleep`, waiting in `Object.wait`, parked (in
/// `LockSupport.park`, which the virtual thread's queues and locks use), yielding (runnable,
/// waiting for a carrier), else blocked (JDK 24 and later unmount a virtual thread that waits
/// for a monitor).
pub fn off_carrier_state(top_methods: &[String]) -> &'static str {
    let has = |prefix: &str| top_methods.iter().any(|method| method.starts_with(prefix));
    if has("java.lang.Thread.sleep") || has("java.lang.VirtualThread.sleepNanos") {
        "sleeping"
    } else if has("java.lang.Object.wait") {
        "waiting"
    } else if has("java.lang.VirtualThread.park")
        || has("java.util.concurrent.locks.LockSupport.park")
    {
        "parked"
    } else if has("java.lang.Thread.yield") || has("java.lang.VirtualThread.tryYield") {
        "running"
    } else {
        "blocked"
    }
}

pub fn wall_state(vm_state: i32, top_method: Option<&str>) -> &'static str {
    const IN_NATIVE: i32 = 4;
    const IN_VM: i32 = 6;
    const IN_JAVA: i32 = 8;
    const BLOCKED: i32 = 10;
    let method = top_method.unwrap_or("");
    let waiting_kind = if method.ends_with("Unsafe.park") {
        Some("parked")
    } else if method.starts_with("java.lang.Thread.sleep") {
        Some("sleeping")
    } else if method == "java.lang.Object.wait" || method == "java.lang.Object.wait0" {
        Some("waiting")
    } else {
        None
    };
    match vm_state & !1 {
        IN_JAVA | IN_VM => "running",
        IN_NATIVE => waiting_kind.unwrap_or("native"),
        BLOCKED => waiting_kind.unwrap_or("blocked"),
        _ => waiting_kind.unwrap_or("unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_thread_off_its_carrier_is_told_by_its_top_methods() {
        let state = |methods: &[&str]| {
            off_carrier_state(
                &methods
                    .iter()
                    .map(|method| method.to_string())
                    .collect::<Vec<_>>(),
            )
        };
        let yielded = "java.lang.VirtualThread.yieldContinuation";
        assert_eq!(
            state(&[
                yielded,
                "java.lang.VirtualThread.parkNanos",
                "java.lang.VirtualThread.sleepNanos",
                "java.lang.Thread.sleep"
            ]),
            "sleeping"
        );
        assert_eq!(
            state(&[
                yielded,
                "java.lang.VirtualThread.park",
                "java.util.concurrent.locks.LockSupport.park",
                "java.util.concurrent.LinkedBlockingQueue.take"
            ]),
            "parked"
        );
        assert_eq!(
            state(&[yielded, "java.lang.Object.wait0", "java.lang.Object.wait"]),
            "waiting"
        );
        assert_eq!(
            state(&[
                yielded,
                "java.lang.VirtualThread.tryYield",
                "java.lang.Thread.yield"
            ]),
            "running"
        );
        assert_eq!(state(&[yielded, "com.acme.Ledger.post"]), "blocked");
    }
}
