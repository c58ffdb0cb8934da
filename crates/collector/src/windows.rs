//! Profile windows read back from an agent's HPROF stream as it arrives: each CPU SAMPLES
//! record of HPROF binary, or each CPU SAMPLES, WALL SAMPLES and lock table of HPROF text (one
//! `continuous=` window, or one dump), becomes the samples per stack it counts, its frames
//! named, timed by the frame that brought it.
//!
//! The stream is fed frame by frame; a record cut between frames waits for the rest. Only what
//! names stacks is kept (strings, classes, frames, traces), and only until a CONTROL SETTINGS
//! record says the agent forgot them: a decoder that keeps up with an agent for hours holds
//! what the agent holds.

use std::collections::HashMap;
use std::io::Cursor;

use openprof_format::hprof_binary::{
    binary_class_name, BasicType, HprofReader, Item, Record, SITES_INCREMENTAL,
};
use openprof_format::hprof_text::{
    self, decode_labels, CpuTableKind, FrameLine, LockTableKind, Trace, FORGOTTEN_TRACES,
    LABELS_SOURCE,
};
use openprof_format::mpt_stats::{MptTable, ValueKey, ValueStats};

/// HPROF's binary header: its format name with a NUL, the identifier size, the time.
const HEADER_TAIL: usize = 4 + 8;
/// A record's tag, time and length.
const RECORD_HEAD: usize = 9;
const TAG_HEAP_DUMP: u8 = 0x0c;
const TAG_HEAP_DUMP_SEGMENT: u8 = 0x1c;
/// The longest record of a window the decoder holds (CPU SAMPLES, ALLOC SITES, TRACE, ...):
/// far longer than any an agent writes, and a bound on what a hostile length makes it keep.
/// A heap dump's records are not windows: they are passed over as they come, never held.
pub const MAX_WINDOW_RECORD: usize = 64 << 20;
/// The most HPROF text the decoder holds without a table's END line.
pub const MAX_TEXT_PENDING: usize = 64 << 20;

/// Samples of one stack with one set of labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelledStack {
    /// `name=value`, as the trace's labels frame gave them (none outside traced calls).
    pub labels: Vec<String>,
    /// Frames outermost first, as `package.Class.method`.
    pub frames: Vec<String>,
}

/// One window: one event's samples by stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The sequence number of the frame its record ended in, and its place among the windows
    /// ending in that frame: together, the window's identity in the agent's stream.
    pub sequence: u64,
    pub ordinal: u32,
    /// When the collector received that frame, ns since the epoch.
    pub received_ns: u64,
    /// What the samples count, as the profile model names its events: `cpu` (samples), `wall`
    /// (samples, labelled by thread state), ...
    pub event: &'static str,
    /// Each stack with its samples.
    pub stacks: Vec<(LabelledStack, u64)>,
    /// An `mpt` window's calls per traced value (its `stacks` are empty).
    pub values: Vec<ValueCalls>,
}

/// The calls of one traced method that recorded one value under one specification in one
/// window (method parameter tracing, HPROF text's MPT record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueCalls {
    /// `package.Class.method(types)`.
    pub method: String,
    /// The specification's text.
    pub spec: String,
    /// The value's type (`int`, `string`, `error`, ...) and text.
    pub value_type: &'static str,
    pub value: String,
    /// Calls finished in the window, and their wall and CPU time in nanoseconds.
    pub calls: u64,
    pub wall_total_ns: u64,
    pub cpu_total_ns: u64,
    /// The slowest call since the run started (a maximum does not split into windows).
    pub wall_max_ns: u64,
    pub cpu_max_ns: u64,
}

/// Reads an agent's HPROF binary stream into windows, frame by frame.
#[derive(Default)]
pub struct WindowDecoder {
    /// The stream's header, once whole: prefixed to each record so the format's reader reads it.
    header: Option<Vec<u8>>,
    /// Bytes not decoded yet (the start of a record cut between frames).
    pending: Vec<u8>,
    strings: HashMap<u64, String>,
    /// Class serial → the class's name (string id).
    classes: HashMap<u32, u64>,
    /// Frame id → (method name id, class serial, source file id).
    frames: HashMap<u64, (u64, u32, u64)>,
    /// Trace serial → frame ids, innermost first.
    traces: HashMap<u32, Vec<u64>>,
    /// Set once the stream turned out to be HPROF text.
    text: Option<TextWindows>,
    /// Bytes of a heap dump record still to pass over.
    skip: u64,
}

/// What a decoder of HPROF text keeps between frames.
#[derive(Default)]
struct TextWindows {
    /// Whether the stream's header was read (later parts get one of their own to be read).
    header_read: bool,
    /// Each trace printed so far, as its windows name it.
    traces: HashMap<u32, LabelledStack>,
    /// The last MPT record's figures per method, specification and value: the agent's count
    /// from the start, so a window's are the difference.
    mpt_seen: HashMap<(String, String, ValueKey), ValueStats>,
    /// Where the pending text's last line starts that was not looked at yet: each byte is
    /// scanned for END lines once, however many frames a table spans.
    scanned: usize,
}

impl WindowDecoder {
    /// Takes the body of one Hprof frame; returns the windows whose records it completed.
    pub fn feed(
        &mut self,
        body: &[u8],
        sequence: u64,
        received_ns: u64,
    ) -> Result<Vec<Window>, String> {
        let needed = self.pending.len() + body.len();
        if needed > self.pending.capacity() {
            // Doubling, but not past what the bounds let the decoder hold: a hostile stream
            // at the bound costs the bound and a frame, not twice the bound.
            let bound = MAX_WINDOW_RECORD.max(MAX_TEXT_PENDING) + RECORD_HEAD;
            let target = (self.pending.capacity() * 2).min(bound).max(needed);
            self.pending.reserve_exact(target - self.pending.len());
        }
        self.pending.extend_from_slice(body);
        if self.header.is_none() && self.text.is_none() {
            // HPROF binary's format name ends with a NUL, HPROF text's first line with a line
            // break.
            let nul = self.pending.iter().position(|&byte| byte == 0);
            let newline = self.pending.iter().position(|&byte| byte == b'\n');
            if let (None, Some(_)) = (nul, newline) {
                if !self.pending.starts_with(b"JAVA PROFILE ") {
                    return Err("the agent's stream is not HPROF".into());
                }
                self.text = Some(TextWindows::default());
            }
        }
        if let Some(text) = &mut self.text {
            return text.feed(&mut self.pending, sequence, received_ns);
        }
        if self.header.is_none() {
            let Some(nul) = self.pending.iter().position(|&byte| byte == 0) else {
                return Ok(Vec::new());
            };
            if !self.pending.starts_with(b"JAVA PROFILE ") {
                return Err("the agent's stream is not HPROF binary".into());
            }
            if self.pending.len() < nul + 1 + HEADER_TAIL {
                return Ok(Vec::new());
            }
            let header: Vec<u8> = self.pending.drain(..nul + 1 + HEADER_TAIL).collect();
            self.header = Some(header);
        }
        let mut windows = Vec::new();
        let mut at = 0;
        // What is left of a heap dump record goes by unkept.
        if self.skip > 0 {
            let passed = self
                .pending
                .len()
                .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
            at = passed;
            self.skip -= passed as u64;
        }
        while self.pending.len() - at >= RECORD_HEAD {
            let head = &self.pending[at..at + RECORD_HEAD];
            let length = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
            let end = at + RECORD_HEAD + length;
            let tag = head[0];
            let heap_dump = tag == TAG_HEAP_DUMP || tag == TAG_HEAP_DUMP_SEGMENT;
            if heap_dump && self.pending.len() < end {
                self.skip = (end - self.pending.len()) as u64;
                at = self.pending.len();
                break;
            }
            if !heap_dump && length > MAX_WINDOW_RECORD {
                return Err(format!(
                    "a record (tag {tag:#04x}) of {length} bytes is longer than the \
                     {MAX_WINDOW_RECORD} bytes a window's record may be"
                ));
            }
            if self.pending.len() < end {
                break;
            }
            if !heap_dump {
                let record = self.read_record(at, end)?;
                for (event, stacks) in self.take(record) {
                    windows.push(Window {
                        sequence,
                        ordinal: windows.len() as u32,
                        received_ns,
                        event,
                        stacks,
                        values: Vec::new(),
                    });
                }
            }
            at = end;
        }
        self.pending.drain(..at);
        Ok(windows)
    }

    fn read_record(&self, start: usize, end: usize) -> Result<Option<Record>, String> {
        let header = self.header.as_deref().unwrap_or_default();
        let mut bytes = Vec::with_capacity(header.len() + end - start);
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&self.pending[start..end]);
        let mut reader = HprofReader::new(Cursor::new(bytes)).map_err(|error| error.to_string())?;
        match reader.next_item() {
            Some(Ok(Item::Record(record))) => Ok(Some(record)),
            Some(Ok(_)) | None => Ok(None),
            Some(Err(error)) => Err(error.to_string()),
        }
    }

    /// Keeps what names stacks; a CPU SAMPLES record comes back as its window, an incremental
    /// ALLOC SITES record as two (bytes and objects allocated).
    fn take(&mut self, record: Option<Record>) -> Vec<(&'static str, Vec<(LabelledStack, u64)>)> {
        let Some(record) = record else {
            return Vec::new();
        };
        match record {
            // The agent forgot the stacks written so far: nothing after refers to them.
            Record::ControlSettings { .. } => {
                self.strings = HashMap::new();
                self.classes = HashMap::new();
                self.frames = HashMap::new();
                self.traces = HashMap::new();
            }
            Record::Utf8 { id, text } => {
                self.strings
                    .insert(id, String::from_utf8_lossy(&text).into_owned());
            }
            Record::LoadClass {
                class_serial,
                name_id,
                ..
            } => {
                self.classes.insert(class_serial, name_id);
            }
            Record::StackFrame {
                frame_id,
                method_name_id,
                class_serial,
                source_id,
                ..
            } => {
                self.frames
                    .insert(frame_id, (method_name_id, class_serial, source_id));
            }
            Record::StackTrace {
                stack_serial,
                frames,
                ..
            } => {
                self.traces.insert(stack_serial, frames);
            }
            Record::CpuSamples { traces, .. } => {
                let mut counts: HashMap<LabelledStack, u64> = HashMap::new();
                for (count, trace) in traces {
                    *counts.entry(self.stack(trace)).or_default() += u64::from(count);
                }
                return vec![("cpu", sorted(counts))];
            }
            Record::AllocSites { flags, sites, .. } if flags & SITES_INCREMENTAL != 0 => {
                let mut bytes = HashMap::new();
                let mut objects = HashMap::new();
                for site in sites {
                    let class = self.class_name(site.class_serial, site.array_type);
                    let stack = allocation_stack(self.stack(site.stack_serial), class);
                    *bytes.entry(stack.clone()).or_default() += u64::from(site.allocated_bytes);
                    *objects.entry(stack).or_default() += u64::from(site.allocated_instances);
                }
                return vec![
                    (ALLOC_BYTES, sorted(bytes)),
                    (ALLOC_OBJECTS, sorted(objects)),
                ];
            }
            _ => {}
        }
        Vec::new()
    }

    /// An allocated class's name in Java source form, by its serial (or, for an array of a
    /// primitive type, by the site's array type).
    fn class_name(&self, class_serial: u32, array_type: u8) -> String {
        if let Some(name) = (self.classes.get(&class_serial)).and_then(|id| self.strings.get(id)) {
            return binary_class_name(name);
        }
        match BasicType::from_code(array_type) {
            Some(element) if element != BasicType::Object => element.array_name().to_string(),
            _ => format!("<class serial {class_serial}>"),
        }
    }

    /// A trace's frames, outermost first, as `package.Class.method`, and its labels (a labels
    /// frame is not a frame of the stack).
    fn stack(&self, trace: u32) -> LabelledStack {
        let Some(frames) = self.traces.get(&trace) else {
            return LabelledStack {
                labels: Vec::new(),
                frames: vec![format!("<unknown trace {trace}>")],
            };
        };
        let mut stack = LabelledStack {
            labels: Vec::new(),
            frames: Vec::with_capacity(frames.len()),
        };
        for frame in frames.iter().rev() {
            let Some(&(method, class, source)) = self.frames.get(frame) else {
                stack.frames.push("<unknown frame>".to_string());
                continue;
            };
            let method = self.strings.get(&method).map_or("?", String::as_str);
            if self.strings.get(&source).map(String::as_str) == Some(LABELS_SOURCE) {
                stack.labels.extend(
                    decode_labels(method)
                        .into_iter()
                        .map(|(name, value)| format!("{name}={value}")),
                );
                continue;
            }
            let class = self
                .classes
                .get(&class)
                .and_then(|name| self.strings.get(name))
                .map(|name| name.replace('/', "."));
            stack.frames.push(match class {
                Some(class) if !class.is_empty() && class != LABELS_SOURCE => {
                    format!("{class}.{method}")
                }
                _ => method.to_string(),
            });
        }
        stack
    }
}

impl TextWindows {
    /// Reads the records `pending` holds whole (up to its last table's END line) and returns
    /// their windows; the rest waits for more.
    fn feed(
        &mut self,
        pending: &mut Vec<u8>,
        sequence: u64,
        received_ns: u64,
    ) -> Result<Vec<Window>, String> {
        let (cut, last_line) = end_of_last_table(pending, self.scanned);
        let Some(cut) = cut else {
            if pending.len() > MAX_TEXT_PENDING {
                return Err(format!(
                    "more than {MAX_TEXT_PENDING} bytes of HPROF text without a table's END line"
                ));
            }
            self.scanned = last_line;
            return Ok(Vec::new());
        };
        self.scanned = last_line - cut;
        let whole: Vec<u8> = pending.drain(..cut).collect();
        let mut windows = Vec::new();
        // At each FORGOTTEN TRACES record the agent forgot the traces printed before it; so
        // does the decoder, which then holds no more traces than the agent does.
        let mut start = 0;
        let mut forget = false;
        for end in forgotten_traces_at(&whole).into_iter().chain([whole.len()]) {
            if forget {
                self.traces.clear();
            }
            if end > start {
                let part = &whole[start..end];
                windows.extend(self.windows_of(part, sequence, received_ns, windows.len())?);
            }
            start = end;
            forget = true;
        }
        Ok(windows)
    }

    /// The windows of whole records of HPROF text (after the stream's header, `part` is read
    /// under a header of its own); their ordinals start at `first_ordinal`.
    fn windows_of(
        &mut self,
        records: &[u8],
        sequence: u64,
        received_ns: u64,
        first_ordinal: usize,
    ) -> Result<Vec<Window>, String> {
        let mut part = Vec::with_capacity(records.len() + 32);
        if self.header_read {
            part.extend_from_slice(b"JAVA PROFILE 1.0.1\n--------\n");
        }
        part.extend_from_slice(records);
        self.header_read = true;
        let traces = &mut self.traces;
        let mut keep = |trace: Trace| {
            traces.insert(trace.serial, labelled_stack(&trace));
        };
        let profile =
            hprof_text::read_passing_traces(part.as_slice(), &mut |_| {}, Some(&mut keep))
                .map_err(|error| format!("the agent's HPROF text: {error}"))?;
        let mut windows = Vec::new();
        let mut window = |event: &'static str, stacks: HashMap<LabelledStack, u64>| {
            windows.push(Window {
                sequence,
                ordinal: (first_ordinal + windows.len()) as u32,
                received_ns,
                event,
                stacks: sorted(stacks),
                values: Vec::new(),
            });
        };
        let stack = |serial: u32| {
            self.traces
                .get(&serial)
                .cloned()
                .unwrap_or_else(|| LabelledStack {
                    labels: Vec::new(),
                    frames: vec![format!("<unknown trace {serial}>")],
                })
        };
        for table in &profile.cpu_tables {
            let event = match table.kind {
                CpuTableKind::Samples => "cpu",
                CpuTableKind::Wall => "wall",
                CpuTableKind::Time => continue,
            };
            let mut stacks: HashMap<LabelledStack, u64> = HashMap::new();
            for row in &table.rows {
                let mut labelled = stack(row.trace);
                if let Some(state) = &row.state {
                    labelled.labels.insert(0, format!("state={state}"));
                }
                *stacks.entry(labelled).or_default() += row.count;
            }
            window(event, stacks);
        }
        // A continuous profile's SITES tables are incremental: each counts its window.
        for table in profile.sites.iter().filter(|table| table.incremental) {
            let mut bytes = HashMap::new();
            let mut objects = HashMap::new();
            for row in &table.rows {
                let site = &row.site;
                let stack = allocation_stack(stack(site.trace), site.class_name.clone());
                *bytes.entry(stack.clone()).or_default() += site.allocated_bytes;
                *objects.entry(stack).or_default() += site.allocated_objects;
            }
            window(ALLOC_BYTES, bytes);
            window(ALLOC_OBJECTS, objects);
        }
        // Lock tables count nanoseconds waited (each row's share of the table's milliseconds).
        for table in &profile.lock_tables {
            let event = match table.kind {
                LockTableKind::Monitor | LockTableKind::Park => "lock",
                LockTableKind::Owners => "lock_owner",
            };
            let mut stacks: HashMap<LabelledStack, u64> = HashMap::new();
            for row in &table.rows {
                let nanoseconds = (row.self_percent / 100.0 * table.total_ms as f64 * 1e6).round();
                *stacks.entry(stack(row.trace)).or_default() += nanoseconds as u64;
            }
            window(event, stacks);
        }
        for (_, tables) in &profile.mpt_dumps {
            let values = self.mpt_window(tables);
            if !values.is_empty() {
                windows.push(Window {
                    sequence,
                    ordinal: (first_ordinal + windows.len()) as u32,
                    received_ns,
                    event: MPT,
                    stacks: Vec::new(),
                    values,
                });
            }
        }
        Ok(windows)
    }
}

/// The events of allocation windows, as the profile model names them.
const ALLOC_BYTES: &str = "alloc_bytes";
const ALLOC_OBJECTS: &str = "alloc_objects";
/// Every event a window may count.
pub const WINDOW_EVENTS: [&str; 6] = [
    "cpu",
    "wall",
    "lock",
    "lock_owner",
    ALLOC_BYTES,
    ALLOC_OBJECTS,
];

/// A window's stacks, in a stable order.
fn sorted(counts: HashMap<LabelledStack, u64>) -> Vec<(LabelledStack, u64)> {
    let mut stacks: Vec<(LabelledStack, u64)> = counts.into_iter().collect();
    stacks.sort();
    stacks
}

/// An allocation's stack: the allocating frames with the allocated class on top, as flame
/// graphs of allocations show it.
fn allocation_stack(mut stack: LabelledStack, class: String) -> LabelledStack {
    stack.frames.push(class);
    stack
}

impl TextWindows {
    /// What an MPT record adds to the last one: the values with calls since, each with its
    /// calls and times since.
    fn mpt_window(&mut self, tables: &[MptTable]) -> Vec<ValueCalls> {
        let mut values = Vec::new();
        for table in tables {
            for row in &table.rows {
                let key = (table.method.clone(), table.spec.clone(), row.key.clone());
                let before = self
                    .mpt_seen
                    .insert(key, row.clone())
                    .unwrap_or_else(|| ValueStats::new(row.key.clone()));
                let calls = row.calls.saturating_sub(before.calls);
                if calls == 0 {
                    continue;
                }
                values.push(ValueCalls {
                    method: table.method.clone(),
                    spec: table.spec.clone(),
                    value_type: row.key.value_type.as_str(),
                    value: row.key.value.clone(),
                    calls,
                    wall_total_ns: row.wall_total_ns.saturating_sub(before.wall_total_ns),
                    cpu_total_ns: row.cpu_total_ns.saturating_sub(before.cpu_total_ns),
                    wall_max_ns: row.wall_max_ns,
                    cpu_max_ns: row.cpu_max_ns,
                });
            }
        }
        values
    }
}

/// The event of a window of traced values.
pub const MPT: &str = "mpt";

/// Where each FORGOTTEN TRACES record of HPROF text starts (at the start of a line).
fn forgotten_traces_at(text: &[u8]) -> Vec<usize> {
    let marker = format!("{FORGOTTEN_TRACES} BEGIN");
    let mut starts = Vec::new();
    let mut line = 0;
    while line < text.len() {
        if text[line..].starts_with(marker.as_bytes()) {
            starts.push(line);
        }
        line = match text[line..].iter().position(|&byte| byte == b'\n') {
            Some(end) => line + end + 1,
            None => text.len(),
        };
    }
    starts
}

/// Where the last whole table of HPROF text ends (after its `… END` line), if one does,
/// looking from `from` (a line's start) on; and where the last line, not ended yet, starts.
fn end_of_last_table(text: &[u8], from: usize) -> (Option<usize>, usize) {
    let mut end = None;
    let mut start = from;
    for (at, &byte) in text.iter().enumerate().skip(from) {
        if byte != b'\n' {
            continue;
        }
        let line = &text[start..at];
        let is_end = line.ends_with(b" END")
            && line
                .iter()
                .all(|&c| c.is_ascii_uppercase() || c == b' ' || c == b'(' || c == b')');
        if is_end {
            end = Some(at + 1);
        }
        start = at + 1;
    }
    (end, start)
}

/// A TRACE as windows name it: frames outermost first as `package.Class.method`, its labels
/// frame's labels apart.
fn labelled_stack(trace: &Trace) -> LabelledStack {
    let mut stack = LabelledStack {
        labels: Vec::new(),
        frames: Vec::with_capacity(trace.frames.len()),
    };
    for frame in trace.frames.iter().rev() {
        if frame.line == FrameLine::Labels {
            stack.labels.extend(
                decode_labels(&frame.method_name)
                    .into_iter()
                    .map(|(name, value)| format!("{name}={value}")),
            );
        } else {
            stack.frames.push(frame.qualified_method());
        }
    }
    stack
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_binary::HprofWriter;

    /// A stream with two windows of two stacks, as the agent writes them.
    fn stream() -> Vec<u8> {
        let mut writer = HprofWriter::new(Vec::new(), 8, 0).unwrap();
        for record in [
            Record::Utf8 {
                id: 1,
                text: b"Split".to_vec(),
            },
            Record::Utf8 {
                id: 2,
                text: b"heavy".to_vec(),
            },
            Record::Utf8 {
                id: 3,
                text: b"main".to_vec(),
            },
            Record::LoadClass {
                class_serial: 1,
                class_id: 100,
                stack_serial: 0,
                name_id: 1,
            },
            Record::StackFrame {
                frame_id: 10,
                method_name_id: 2,
                signature_id: 0,
                source_id: 0,
                class_serial: 1,
                line: 1,
            },
            Record::StackFrame {
                frame_id: 11,
                method_name_id: 3,
                signature_id: 0,
                source_id: 0,
                class_serial: 1,
                line: 2,
            },
            Record::StackTrace {
                stack_serial: 1,
                thread_serial: 1,
                frames: vec![10, 11],
            },
            Record::StackTrace {
                stack_serial: 2,
                thread_serial: 1,
                frames: vec![11],
            },
            Record::CpuSamples {
                total: 4,
                traces: vec![(3, 1), (1, 2)],
            },
            Record::CpuSamples {
                total: 2,
                traces: vec![(2, 1)],
            },
        ] {
            writer.record(&record).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn windows_come_out_whole_however_the_stream_is_cut() {
        let bytes = stream();
        for frame_size in [1, 7, 64, bytes.len()] {
            let mut decoder = WindowDecoder::default();
            let mut windows = Vec::new();
            for (sequence, body) in bytes.chunks(frame_size).enumerate() {
                windows.extend(decoder.feed(body, sequence as u64 + 1, 0).unwrap());
            }
            let stacks: Vec<_> = windows.iter().map(|window| window.stacks.clone()).collect();
            let unlabelled = |frames: &[&str]| LabelledStack {
                labels: Vec::new(),
                frames: frames.iter().map(|frame| frame.to_string()).collect(),
            };
            let heavy = unlabelled(&["Split.main", "Split.heavy"]);
            let main = unlabelled(&["Split.main"]);
            assert_eq!(
                stacks,
                vec![vec![(main, 1), (heavy.clone(), 3)], vec![(heavy, 2)]],
                "frames of {frame_size} bytes"
            );
        }
    }

    impl WindowDecoder {
        /// Bytes held between frames.
        fn held(&self) -> usize {
            self.pending.len()
        }
    }

    /// A stream's header: the format name and its tail (identifier size and time).
    fn binary_header() -> Vec<u8> {
        let bytes = stream();
        let nul = bytes.iter().position(|&byte| byte == 0).unwrap();
        bytes[..nul + 1 + HEADER_TAIL].to_vec()
    }

    #[test]
    fn a_hostile_record_length_holds_nothing_and_windows_go_on() {
        // A heap dump record that says it is 4 GiB long is passed over as it comes: 300 MiB of
        // it in 1 MiB frames hold at most one frame's bytes.
        let mut decoder = WindowDecoder::default();
        decoder.feed(&binary_header(), 1, 0).unwrap();
        let mut head = vec![TAG_HEAP_DUMP_SEGMENT, 0, 0, 0, 0];
        head.extend_from_slice(&u32::MAX.to_be_bytes());
        decoder.feed(&head, 2, 0).unwrap();
        let chunk = vec![0xabu8; 1 << 20];
        for sequence in 0..300 {
            assert!(decoder.feed(&chunk, 3 + sequence, 0).unwrap().is_empty());
            assert!(
                decoder.held() <= chunk.len(),
                "{} bytes held",
                decoder.held()
            );
        }
        // Any other record longer than a window's may be is refused at its head, naming it.
        let mut decoder = WindowDecoder::default();
        decoder.feed(&binary_header(), 1, 0).unwrap();
        let mut head = vec![0x05, 0, 0, 0, 0];
        head.extend_from_slice(&u32::MAX.to_be_bytes());
        let error = decoder.feed(&head, 2, 0).unwrap_err();
        assert!(
            error.contains("of 4294967295 bytes is longer than"),
            "{error}"
        );
        // A heap dump between windows is skipped whole, and the windows around it come out.
        let bytes = stream();
        // Before the last record (the second window).
        let mut split = binary_header().len();
        loop {
            let length = u32::from_be_bytes(bytes[split + 5..split + 9].try_into().unwrap());
            let next = split + RECORD_HEAD + length as usize;
            if next >= bytes.len() {
                break;
            }
            split = next;
        }
        let mut dump = vec![TAG_HEAP_DUMP, 0, 0, 0, 0];
        dump.extend_from_slice(&(3u32 << 20).to_be_bytes());
        dump.extend(std::iter::repeat_n(0u8, 3 << 20));
        let mut with_dump = bytes[..split].to_vec();
        with_dump.extend_from_slice(&dump);
        with_dump.extend_from_slice(&bytes[split..]);
        let mut decoder = WindowDecoder::default();
        let mut windows = 0;
        for (sequence, body) in with_dump.chunks(4096).enumerate() {
            windows += decoder.feed(body, sequence as u64 + 1, 0).unwrap().len();
            assert!(decoder.held() <= 8192);
        }
        assert_eq!(windows, 2);
    }

    #[test]
    fn text_without_an_end_line_is_bounded_and_each_byte_scanned_once() {
        let mut decoder = WindowDecoder::default();
        decoder
            .feed(b"JAVA PROFILE 1.0.1, created today\n\n", 1, 0)
            .unwrap();
        let line = b"\tcom.example.Class.method(Class.java:1)\n".repeat(1 << 14);
        let mut sequence = 2;
        let error = loop {
            match decoder.feed(&line, sequence, 0) {
                Ok(windows) => assert!(windows.is_empty()),
                Err(error) => break error,
            }
            // The scan resumes where the last frame's whole lines ended.
            let text = decoder.text.as_ref().unwrap();
            assert_eq!(text.scanned, decoder.held());
            sequence += 1;
        };
        assert!(error.contains("without a table's END line"), "{error}");
        assert!(decoder.held() <= MAX_TEXT_PENDING + line.len());
    }

    #[test]
    fn a_labels_frame_labels_its_samples_and_control_settings_forget_the_names() {
        let mut writer = HprofWriter::new(Vec::new(), 8, 0).unwrap();
        let utf8 = |id, text: &str| Record::Utf8 {
            id,
            text: text.as_bytes().to_vec(),
        };
        let frame = |frame_id, method_name_id, class_serial, source_id| Record::StackFrame {
            frame_id,
            method_name_id,
            signature_id: 0,
            source_id,
            class_serial,
            line: -1,
        };
        let class = |class_serial, name_id| Record::LoadClass {
            class_serial,
            class_id: u64::from(class_serial),
            stack_serial: 0,
            name_id,
        };
        for record in [
            utf8(1, "Split"),
            utf8(2, "heavy"),
            utf8(4, LABELS_SOURCE),
            utf8(5, "user=alice;Split.work(int) 1=20"),
            class(1, 1),
            class(2, 4),
            frame(10, 2, 1, 0),
            frame(12, 5, 2, 4),
            Record::StackTrace {
                stack_serial: 3,
                thread_serial: 1,
                frames: vec![10, 12],
            },
            Record::CpuSamples {
                total: 2,
                traces: vec![(2, 3)],
            },
            Record::ControlSettings { flags: 2, depth: 4 },
            Record::CpuSamples {
                total: 1,
                traces: vec![(1, 3)],
            },
        ] {
            writer.record(&record).unwrap();
        }
        let windows = WindowDecoder::default()
            .feed(&writer.finish().unwrap(), 1, 0)
            .unwrap();
        let labelled = LabelledStack {
            labels: vec!["user=alice".into(), "Split.work(int) 1=20".into()],
            frames: vec!["Split.heavy".into()],
        };
        assert_eq!(windows[0].stacks, vec![(labelled, 2)]);
        assert_eq!(
            windows[1].stacks[0].0.frames,
            vec!["<unknown trace 3>".to_string()],
            "the trace was forgotten"
        );
    }

    #[test]
    fn hprof_text_gives_cpu_and_wall_windows_however_the_stream_is_cut() {
        use openprof_format::hprof_text::{CpuEntry, CpuTable, Frame, TextWriter};
        let java = |class: &str, method: &str| Frame {
            class_name: class.into(),
            method_name: method.into(),
            source_file: Some("Split.java".into()),
            line: FrameLine::Line(3),
        };
        let entry = |trace, count, state: Option<&str>| CpuEntry {
            trace,
            cost: count,
            hits: count,
            state: state.map(str::to_string),
            method: None,
        };
        let mut writer = TextWriter::new(Vec::new());
        writer.header("Thu Nov 26 10:00:00 2026").unwrap();
        for (serial, frames) in [
            (300001, vec![java("Split", "heavy"), java("Split", "main")]),
            (
                300002,
                vec![java("Split", "light"), Frame::labels("user=alice")],
            ),
        ] {
            writer
                .trace(&Trace {
                    serial,
                    thread: None,
                    frames,
                })
                .unwrap();
        }
        let table = |kind, entries| CpuTable::rank_by_cost(kind, "d".into(), entries, 0.0, 4);
        writer
            .cpu_table(&table(
                CpuTableKind::Samples,
                vec![entry(300001, 3, None), entry(300002, 1, None)],
            ))
            .unwrap();
        writer
            .cpu_table(&table(
                CpuTableKind::Wall,
                vec![entry(300001, 4, Some("running"))],
            ))
            .unwrap();
        let bytes = writer.into_inner();
        for frame_size in [1, 7, 64, bytes.len()] {
            let mut decoder = WindowDecoder::default();
            let mut windows = Vec::new();
            for (sequence, body) in bytes.chunks(frame_size).enumerate() {
                windows.extend(decoder.feed(body, sequence as u64 + 1, 0).unwrap());
            }
            // Each window as its event and (labels, frames joined by ';', count) per stack.
            type Shown<'a> = (&'a str, Vec<(Vec<String>, String, u64)>);
            let shown: Vec<Shown> = windows
                .iter()
                .map(|window| {
                    let stacks = window
                        .stacks
                        .iter()
                        .map(|(stack, count)| {
                            (stack.labels.clone(), stack.frames.join(";"), *count)
                        })
                        .collect();
                    (window.event, stacks)
                })
                .collect();
            assert_eq!(
                shown,
                vec![
                    (
                        "cpu",
                        vec![
                            (vec![], "Split.main;Split.heavy".into(), 3),
                            (vec!["user=alice".into()], "Split.light".into(), 1),
                        ]
                    ),
                    (
                        "wall",
                        vec![(
                            vec!["state=running".into()],
                            "Split.main;Split.heavy".into(),
                            4
                        )]
                    ),
                ],
                "frames of {frame_size} bytes"
            );
        }
    }

    #[test]
    fn traced_values_come_out_as_each_windows_calls() {
        use openprof_format::hprof_text::TextWriter;
        use openprof_format::mpt_stats::ValueType;
        let key = |value: &str| ValueKey::new(ValueType::String, value);
        let mut table = MptTable::new("A.lookup(java.lang.String)", "A.lookup(java.lang.String) 1");
        let mut writer = TextWriter::new(Vec::new());
        writer.header("Thu Nov 26 10:00:00 2026").unwrap();
        table.record(key("slow"), 4_000, 3_000);
        table.record(key("slow"), 6_000, 5_000);
        table.record(key("fast"), 1_000, 1_000);
        writer.mpt(std::slice::from_ref(&table), Some("d")).unwrap();
        // The next window: three more slow calls, no fast one.
        for _ in 0..3 {
            table.record(key("slow"), 10_000, 9_000);
        }
        writer.mpt(std::slice::from_ref(&table), Some("d")).unwrap();
        let bytes = writer.into_inner();
        for frame_size in [1, 7, 64, bytes.len()] {
            let mut decoder = WindowDecoder::default();
            let mut windows = Vec::new();
            for (sequence, body) in bytes.chunks(frame_size).enumerate() {
                windows.extend(decoder.feed(body, sequence as u64 + 1, 0).unwrap());
            }
            let shown: Vec<Vec<(String, u64, u64, u64)>> = (windows.iter())
                .map(|window| {
                    assert_eq!(window.event, MPT);
                    (window.values.iter())
                        .map(|value| {
                            let figures = (value.calls, value.wall_total_ns, value.wall_max_ns);
                            (value.value.clone(), figures.0, figures.1, figures.2)
                        })
                        .collect()
                })
                .collect();
            assert_eq!(
                shown,
                vec![
                    vec![
                        ("slow".to_string(), 2, 10_000, 6_000),
                        ("fast".to_string(), 1, 1_000, 1_000)
                    ],
                    vec![("slow".to_string(), 3, 30_000, 10_000)],
                ],
                "frames of {frame_size} bytes"
            );
        }
    }

    #[test]
    fn hprof_text_forgets_its_traces_where_the_agent_says_it_did() {
        use openprof_format::hprof_text::{CpuEntry, CpuTable, Frame, TextWriter};
        let trace = |serial, method: &str| Trace {
            serial,
            thread: None,
            frames: vec![Frame {
                class_name: "Split".into(),
                method_name: method.into(),
                source_file: None,
                line: FrameLine::Unknown,
            }],
        };
        let samples = |serial| {
            let entry = CpuEntry {
                trace: serial,
                cost: 1,
                hits: 1,
                state: None,
                method: None,
            };
            CpuTable::rank_by_cost(CpuTableKind::Samples, "d".into(), vec![entry], 0.0, 4)
        };
        let mut writer = TextWriter::new(Vec::new());
        writer.header("d").unwrap();
        writer.trace(&trace(300001, "old")).unwrap();
        writer.trace(&trace(300002, "kept")).unwrap();
        writer.cpu_table(&samples(300001)).unwrap();
        writer.forgotten_traces("d").unwrap();
        // The kept trace is printed again under its serial before it is used.
        writer.trace(&trace(300002, "kept")).unwrap();
        writer.cpu_table(&samples(300002)).unwrap();
        writer.cpu_table(&samples(300001)).unwrap();
        let bytes = writer.into_inner();
        // A whole-file reader takes the trace printed again as the same one.
        let whole = hprof_text::read(bytes.as_slice()).unwrap();
        assert_eq!(whole.traces_forgotten, 1);
        assert_eq!(whole.traces.len(), 2);
        for frame_size in [5, 64, bytes.len()] {
            let mut decoder = WindowDecoder::default();
            let mut windows = Vec::new();
            for (sequence, body) in bytes.chunks(frame_size).enumerate() {
                windows.extend(decoder.feed(body, sequence as u64 + 1, 0).unwrap());
            }
            let leaves: Vec<String> = (windows.iter())
                .map(|window| window.stacks[0].0.frames.join(";"))
                .collect();
            // After the record, the forgotten trace is unknown: the agent would never name it.
            assert_eq!(
                leaves,
                ["Split.old", "Split.kept", "<unknown trace 300001>"],
                "frames of {frame_size} bytes"
            );
            let held = decoder.text.as_ref().unwrap().traces.len();
            assert_eq!(held, 1, "frames of {frame_size} bytes");
        }
    }

    #[test]
    fn a_stream_that_is_not_hprof_binary_is_refused() {
        let mut decoder = WindowDecoder::default();
        let error = decoder.feed(b"<trace>\0 and more", 1, 0).unwrap_err();
        assert!(error.contains("not HPROF binary"), "{error}");
    }
}
