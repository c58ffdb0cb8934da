//! HPROF's text output (`format=a`, seed 002): the records, one writer and one reader.
//!
//! The layouts follow the JDK's HPROF agent to the character, so that eyes and tools that read
//! HPROF read ours. openprof adds one record, `CPU SAMPLER BEGIN … END`, documented in
//! docs/hprof-text.md: how the samples were taken and how many walks failed.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};

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
    /// `class.method`, as the CPU SAMPLES table names a trace's top frame.
    pub fn qualified_method(&self) -> String {
        format!("{}.{}", self.class_name, self.method_name)
    }
}

impl std::fmt::Display for Frame {
    /// HPROF's frame layout: `class.method(Source.java:line)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = self.source_file.as_deref().unwrap_or("<Unknown Source>");
        write!(f, "{}.{}({source}:", self.class_name, self.method_name)?;
        match &self.line {
            FrameLine::Line(line) => write!(f, "{line})"),
            FrameLine::Unknown => f.write_str("Unknown line)"),
            FrameLine::Compiled => f.write_str("Compiled method)"),
            FrameLine::Native => f.write_str("Native method)"),
        }
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

/// Which table a [`CpuTable`] is: sampled (`CPU SAMPLES`) or timed (`CPU TIME (ms)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuTableKind {
    Samples,
    Time,
}

impl CpuTableKind {
    fn record_name(self) -> &'static str {
        match self {
            CpuTableKind::Samples => "CPU SAMPLES",
            CpuTableKind::Time => "CPU TIME (ms)",
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

/// One trace's cost for a CPU table: samples (cost = hits) or CPU time with entry counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuEntry {
    pub trace: u32,
    /// What the table ranks by: samples, or nanoseconds of CPU.
    pub cost: u64,
    /// What its count column shows: samples, or the true number of entries.
    pub hits: u64,
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
        entries.sort_by(|a, b| b.cost.cmp(&a.cost).then(a.trace.cmp(&b.trace)));
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
    /// Samples taken whose stack walk failed, by reason (AsyncGetCallTrace's names).
    pub failed: BTreeMap<String, u64>,
    /// Samples lost because the sample buffer was full.
    pub dropped: u64,
    /// What taking the samples cost, in microseconds of CPU, by part (`handler`: inside the
    /// signal handler; `agent_thread`: the agent's own thread; `dump`: writing this dump).
    pub cost_us: BTreeMap<String, u64>,
}

impl SamplerReport {
    pub fn failed_total(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// Writes HPROF text records to any byte sink.
pub struct TextWriter<W: Write> {
    out: W,
}

impl<W: Write> TextWriter<W> {
    pub fn new(out: W) -> Self {
        TextWriter { out }
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// The file header: format name and date, the description of the records, the separator.
    pub fn header(&mut self, date: &str) -> io::Result<()> {
        writeln!(self.out, "JAVA PROFILE 1.0.1, created {date}\n")?;
        self.out.write_all(PRELUDE.as_bytes())?;
        write!(self.out, "\n--------\n\n")
    }

    pub fn thread_start(&mut self, thread: &ThreadStart) -> io::Result<()> {
        writeln!(
            self.out,
            "THREAD START (obj={:x}, id = {}, name=\"{}\", group=\"{}\")",
            thread.object_id, thread.serial, thread.name, thread.group
        )
    }

    pub fn thread_end(&mut self, serial: u32) -> io::Result<()> {
        writeln!(self.out, "THREAD END (id = {serial})")
    }

    pub fn trace(&mut self, trace: &Trace) -> io::Result<()> {
        write!(self.out, "TRACE {}:", trace.serial)?;
        if let Some(thread) = trace.thread {
            write!(self.out, " (thread={thread})")?;
        }
        writeln!(self.out)?;
        if trace.frames.is_empty() {
            writeln!(self.out, "\t<empty>")?;
        }
        for frame in &trace.frames {
            writeln!(self.out, "\t{frame}")?;
        }
        Ok(())
    }

    pub fn sampler(&mut self, report: &SamplerReport) -> io::Result<()> {
        writeln!(self.out, "CPU SAMPLER BEGIN")?;
        writeln!(self.out, "sampler {}", report.sampler)?;
        if let Some(note) = &report.note {
            writeln!(self.out, "note {note}")?;
        }
        if let Some(clock) = &report.clock {
            writeln!(self.out, "clock {clock}")?;
        }
        writeln!(self.out, "interval {} ms", report.interval_ms)?;
        writeln!(self.out, "failed {}", report.failed_total())?;
        for (reason, count) in &report.failed {
            writeln!(self.out, "failed.{reason} {count}")?;
        }
        writeln!(self.out, "dropped {}", report.dropped)?;
        for (part, micros) in &report.cost_us {
            writeln!(self.out, "cost.{part}_us {micros}")?;
        }
        writeln!(self.out, "CPU SAMPLER END")
    }

    pub fn cpu_table(&mut self, table: &CpuTable) -> io::Result<()> {
        let name = table.kind.record_name();
        writeln!(
            self.out,
            "{name} BEGIN (total = {}) {}",
            table.total, table.date
        )?;
        if !table.rows.is_empty() {
            writeln!(self.out, "rank   self  accum   count trace method")?;
        }
        for row in &table.rows {
            write!(
                self.out,
                "{:4} {:5.2}% {:5.2}% {:7} {:5}",
                row.rank, row.self_percent, row.accum_percent, row.count, row.trace
            )?;
            match &row.method {
                Some(method) => writeln!(self.out, " {method}")?,
                None => writeln!(self.out, " <empty trace>")?,
            }
        }
        writeln!(self.out, "{name} END")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// What the header says the records are, in HPROF's manner and our words.
const PRELUDE: &str = "\
Header for openprof's HPROF-compatible ASCII output (format=a)

This file contains the following types of records:

THREAD START
THREAD END      mark the lifetime of Java threads

TRACE           represents a Java stack trace.  Each trace consists
                of a series of stack frames.  Other records refer to
                TRACEs to identify where the program was when it was
                sampled.

CPU SAMPLER     (openprof) says how the CPU samples were taken and
                counts the samples whose stack could not be walked.

CPU SAMPLES     is a statistical profile of program execution.  Each
                thread is sampled after every interval of its own CPU
                time, and the sample is assigned to the TRACE it was
                running.  Entries in this record are TRACEs ranked by
                the percentage of samples they received; top-ranked
                TRACEs are the hot spots of the program.

CPU SAMPLER and CPU SAMPLES records are written at program exit (doe=y)
and whenever the JVM is sent SIGQUIT (kill -QUIT <pid>).
";

/// Everything read from an HPROF text file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextProfile {
    /// The header's first line, e.g. `JAVA PROFILE 1.0.1, created …`.
    pub header: String,
    pub threads_started: Vec<ThreadStart>,
    pub threads_ended: Vec<u32>,
    pub traces: BTreeMap<u32, Trace>,
    /// Every sampler record, one per dump.
    pub samplers: Vec<SamplerReport>,
    /// Every CPU table, one per dump, in file order.
    pub cpu_tables: Vec<CpuTable>,
    /// Sections this reader does not model (e.g. `HEAP DUMP`), by name, in file order.
    pub skipped_sections: Vec<String>,
}

impl TextProfile {
    /// The last CPU SAMPLES table: at exit it holds every sample of the run.
    pub fn last_cpu_samples(&self) -> Option<&CpuTable> {
        self.cpu_tables
            .iter()
            .rev()
            .find(|table| table.kind == CpuTableKind::Samples)
    }

    pub fn thread(&self, serial: u32) -> Option<&ThreadStart> {
        self.threads_started
            .iter()
            .find(|thread| thread.serial == serial)
    }
}

/// A malformed HPROF text file: which line, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("line {line}: {message}")]
    Malformed { line: usize, message: String },
    #[error("reading HPROF text: {0}")]
    Io(#[from] io::Error),
}

fn malformed(line: usize, message: impl Into<String>) -> ReadError {
    ReadError::Malformed {
        line,
        message: message.into(),
    }
}

/// Reads HPROF text from a buffered source.
pub fn read(input: impl BufRead) -> Result<TextProfile, ReadError> {
    let mut lines = Vec::new();
    for line in input.lines() {
        lines.push(line?);
    }
    parse_lines(&lines)
}

/// Cuts `prefix` off `text`, or says the line is malformed.
fn expect_prefix<'a>(
    text: &'a str,
    prefix: &str,
    number: usize,
    record: &str,
) -> Result<&'a str, ReadError> {
    text.strip_prefix(prefix)
        .ok_or_else(|| malformed(number, format!("{record}: expected '{prefix}' in '{text}'")))
}

fn parse_number<T: std::str::FromStr>(
    text: &str,
    number: usize,
    what: &str,
) -> Result<T, ReadError> {
    text.trim()
        .parse()
        .map_err(|_| malformed(number, format!("{what}: '{text}' is not a number")))
}

fn parse_thread_start(text: &str, number: usize) -> Result<ThreadStart, ReadError> {
    const RECORD: &str = "THREAD START";
    let rest = expect_prefix(text, "THREAD START (obj=", number, RECORD)?;
    let (object, rest) = rest
        .split_once(", id = ")
        .ok_or_else(|| malformed(number, "THREAD START: no 'id = '"))?;
    let (serial, rest) = rest
        .split_once(", name=\"")
        .ok_or_else(|| malformed(number, "THREAD START: no 'name=\"'"))?;
    let rest = rest
        .strip_suffix("\")")
        .ok_or_else(|| malformed(number, "THREAD START: does not end with '\")'"))?;
    let (name, group) = rest
        .rsplit_once("\", group=\"")
        .ok_or_else(|| malformed(number, "THREAD START: no 'group=\"'"))?;
    Ok(ThreadStart {
        object_id: u64::from_str_radix(object, 16)
            .map_err(|_| malformed(number, format!("THREAD START: obj '{object}' is not hex")))?,
        serial: parse_number(serial, number, "THREAD START id")?,
        name: name.to_string(),
        group: group.to_string(),
    })
}

fn parse_frame(text: &str, number: usize) -> Result<Frame, ReadError> {
    let body = text
        .strip_suffix(')')
        .ok_or_else(|| malformed(number, format!("frame '{text}' does not end with ')'")))?;
    let open = body
        .rfind('(')
        .ok_or_else(|| malformed(number, format!("frame '{text}' has no '('")))?;
    let (qualified, location) = (&body[..open], &body[open + 1..]);
    let (class_name, method_name) = qualified
        .rsplit_once('.')
        .ok_or_else(|| malformed(number, format!("frame '{text}' has no class.method")))?;
    let (source, line) = location
        .rsplit_once(':')
        .ok_or_else(|| malformed(number, format!("frame '{text}' has no source:line")))?;
    let line = match line {
        "Unknown line" => FrameLine::Unknown,
        "Compiled method" => FrameLine::Compiled,
        "Native method" => FrameLine::Native,
        digits => FrameLine::Line(parse_number(digits, number, "frame line")?),
    };
    Ok(Frame {
        class_name: class_name.to_string(),
        method_name: method_name.to_string(),
        source_file: (source != "<Unknown Source>").then(|| source.to_string()),
        line,
    })
}

fn parse_trace_header(text: &str, number: usize) -> Result<(u32, Option<u32>), ReadError> {
    let rest = expect_prefix(text, "TRACE ", number, "TRACE")?;
    let (serial, rest) = rest
        .split_once(':')
        .ok_or_else(|| malformed(number, "TRACE: no ':' after the serial number"))?;
    let serial = parse_number(serial, number, "TRACE serial")?;
    let thread = match rest.trim().strip_prefix("(thread=") {
        Some(thread) => {
            let end = thread
                .find(')')
                .ok_or_else(|| malformed(number, "TRACE: '(thread=' without ')'"))?;
            Some(parse_number(&thread[..end], number, "TRACE thread")?)
        }
        None => None,
    };
    Ok((serial, thread))
}

fn parse_cpu_header(text: &str, number: usize) -> Result<(CpuTableKind, u64, String), ReadError> {
    let (kind, rest) = if let Some(rest) = text.strip_prefix("CPU SAMPLES BEGIN (total = ") {
        (CpuTableKind::Samples, rest)
    } else if let Some(rest) = text.strip_prefix("CPU TIME (ms) BEGIN (total = ") {
        (CpuTableKind::Time, rest)
    } else {
        return Err(malformed(
            number,
            format!("not a CPU table header: '{text}'"),
        ));
    };
    let (total, date) = rest
        .split_once(')')
        .ok_or_else(|| malformed(number, "CPU table: no ')' after the total"))?;
    Ok((
        kind,
        parse_number(total, number, "CPU total")?,
        date.trim().to_string(),
    ))
}

fn parse_cpu_row(text: &str, number: usize) -> Result<CpuRow, ReadError> {
    let mut fields = text.split_whitespace();
    let mut next = |what: &str| {
        fields
            .next()
            .ok_or_else(|| malformed(number, format!("CPU row: no {what}")))
    };
    let rank = parse_number(next("rank")?, number, "CPU rank")?;
    let percent = |field: &str, what: &str| -> Result<f64, ReadError> {
        let digits = field
            .strip_suffix('%')
            .ok_or_else(|| malformed(number, format!("CPU row: {what} '{field}' has no '%'")))?;
        parse_number(digits, number, what)
    };
    let self_percent = percent(next("self")?, "self")?;
    let accum_percent = percent(next("accum")?, "accum")?;
    let count = parse_number(next("count")?, number, "CPU count")?;
    let trace = parse_number(next("trace")?, number, "CPU trace")?;
    let method = next("method")?.to_string();
    Ok(CpuRow {
        rank,
        self_percent,
        accum_percent,
        count,
        trace,
        method: (method != "<empty").then_some(method),
    })
}

fn parse_sampler(lines: &[(usize, &str)]) -> Result<SamplerReport, ReadError> {
    let mut report = SamplerReport::default();
    for &(number, line) in lines {
        let (key, value) = line.split_once(' ').ok_or_else(|| {
            malformed(number, format!("CPU SAMPLER: '{line}' is not 'key value'"))
        })?;
        match key {
            "sampler" => report.sampler = value.to_string(),
            "note" => report.note = Some(value.to_string()),
            "clock" => report.clock = Some(value.to_string()),
            "interval" => {
                let ms = value.strip_suffix(" ms").unwrap_or(value);
                report.interval_ms = parse_number(ms, number, "CPU SAMPLER interval")?;
            }
            "failed" => {}
            "dropped" => report.dropped = parse_number(value, number, "CPU SAMPLER dropped")?,
            _ => {
                if let Some(reason) = key.strip_prefix("failed.") {
                    let count = parse_number(value, number, "CPU SAMPLER failed")?;
                    report.failed.insert(reason.to_string(), count);
                } else if let Some(part) = key
                    .strip_prefix("cost.")
                    .and_then(|part| part.strip_suffix("_us"))
                {
                    let micros = parse_number(value, number, "CPU SAMPLER cost")?;
                    report.cost_us.insert(part.to_string(), micros);
                }
                // Other keys are skipped: a newer agent may add some, older readers go on.
            }
        }
    }
    Ok(report)
}

fn parse_lines(lines: &[String]) -> Result<TextProfile, ReadError> {
    let mut profile = TextProfile::default();
    let first = lines
        .first()
        .ok_or_else(|| malformed(1, "empty file: no 'JAVA PROFILE' header"))?;
    if !first.starts_with("JAVA PROFILE ") {
        return Err(malformed(
            1,
            format!("no 'JAVA PROFILE' header, found '{first}'"),
        ));
    }
    profile.header = first.clone();
    // The prelude is free text, up to the separator line.
    let mut index = lines
        .iter()
        .position(|line| line == "--------")
        .ok_or_else(|| malformed(1, "the header is not closed by a '--------' line"))?
        + 1;
    while index < lines.len() {
        let number = index + 1;
        let line = lines[index].as_str();
        index += 1;
        if line.trim().is_empty() {
            continue;
        }
        if line.starts_with("THREAD START ") {
            profile
                .threads_started
                .push(parse_thread_start(line, number)?);
        } else if let Some(rest) = line.strip_prefix("THREAD END (id = ") {
            let serial = rest
                .strip_suffix(')')
                .ok_or_else(|| malformed(number, "THREAD END: no ')'"))?;
            profile
                .threads_ended
                .push(parse_number(serial, number, "THREAD END id")?);
        } else if line.starts_with("TRACE ") {
            let (serial, thread) = parse_trace_header(line, number)?;
            let mut frames = Vec::new();
            while index < lines.len() && lines[index].starts_with('\t') {
                let frame = &lines[index][1..];
                if frame != "<empty>" {
                    frames.push(parse_frame(frame, index + 1)?);
                }
                index += 1;
            }
            let trace = Trace {
                serial,
                thread,
                frames,
            };
            if profile.traces.insert(serial, trace).is_some() {
                return Err(malformed(
                    number,
                    format!("TRACE {serial} is defined twice"),
                ));
            }
        } else if line == "CPU SAMPLER BEGIN" {
            let body = take_section(lines, &mut index, "CPU SAMPLER END", number)?;
            profile.samplers.push(parse_sampler(&body)?);
        } else if line.starts_with("CPU SAMPLES BEGIN") || line.starts_with("CPU TIME (ms) BEGIN") {
            let (kind, total, date) = parse_cpu_header(line, number)?;
            let end = format!("{} END", kind.record_name());
            let body = take_section(lines, &mut index, &end, number)?;
            let rows = body
                .iter()
                .filter(|(_, row)| !row.starts_with("rank "))
                .map(|&(row_number, row)| parse_cpu_row(row, row_number))
                .collect::<Result<Vec<_>, _>>()?;
            profile.cpu_tables.push(CpuTable {
                kind,
                total,
                date,
                rows,
            });
        } else if let Some(name) = section_name(line) {
            let end = format!("{name} END");
            take_section(lines, &mut index, &end, number)?;
            profile.skipped_sections.push(name.to_string());
        } else {
            return Err(malformed(number, format!("unknown record '{line}'")));
        }
    }
    Ok(profile)
}

/// The name of a `NAME BEGIN …` section line that this reader does not model.
fn section_name(line: &str) -> Option<&str> {
    let (name, _) = line.split_once(" BEGIN")?;
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == ' ' || c == '(' || c == ')'))
    .then_some(name)
}

/// The lines of a section up to its end line, which must come.
fn take_section<'a>(
    lines: &'a [String],
    index: &mut usize,
    end: &str,
    begin_number: usize,
) -> Result<Vec<(usize, &'a str)>, ReadError> {
    let mut body = Vec::new();
    while *index < lines.len() {
        let line = lines[*index].as_str();
        *index += 1;
        if line == end {
            return Ok(body);
        }
        body.push((*index, line));
    }
    Err(malformed(
        begin_number,
        format!("section not closed by '{end}'"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(class: &str, method: &str, line: FrameLine) -> Frame {
        Frame {
            class_name: class.to_string(),
            method_name: method.to_string(),
            source_file: Some(format!("{}.java", class.rsplit('.').next().unwrap())),
            line,
        }
    }

    #[test]
    fn rows_have_hprofs_layout() {
        let table = CpuTable::rank(
            CpuTableKind::Samples,
            "Fri Feb  6 13:33:07 2004".into(),
            vec![
                (
                    300187,
                    229,
                    Some("java.util.zip.ZipFile.getNextEntry".into()),
                ),
                (300190, 32, Some("java.util.zip.ZipEntry.initFields".into())),
                (300122, 201, None),
            ],
            0.0001,
        );
        let mut writer = TextWriter::new(Vec::new());
        writer.cpu_table(&table).unwrap();
        let text = String::from_utf8(writer.into_inner()).unwrap();
        assert_eq!(
            text,
            "CPU SAMPLES BEGIN (total = 462) Fri Feb  6 13:33:07 2004\n\
             rank   self  accum   count trace method\n   \
             1 49.57% 49.57%     229 300187 java.util.zip.ZipFile.getNextEntry\n   \
             2 43.51% 93.07%     201 300122 <empty trace>\n   \
             3  6.93% 100.00%      32 300190 java.util.zip.ZipEntry.initFields\n\
             CPU SAMPLES END\n"
        );
    }

    #[test]
    fn cutoff_drops_the_tail() {
        let entries = vec![(1, 90, None), (2, 9, None), (3, 1, None)];
        let table = CpuTable::rank(CpuTableKind::Samples, String::new(), entries, 0.05);
        assert_eq!(table.total, 100);
        assert_eq!(table.rows.len(), 2);
    }

    #[test]
    fn trace_frames_have_hprofs_layout() {
        let trace = Trace {
            serial: 301926,
            thread: Some(200001),
            frames: vec![
                frame("java.util.zip.ZipEntry", "<init>", FrameLine::Line(101)),
                frame("java.lang.Object", "wait", FrameLine::Native),
                Frame {
                    source_file: None,
                    ..frame("Gen", "run", FrameLine::Unknown)
                },
            ],
        };
        let mut writer = TextWriter::new(Vec::new());
        writer.trace(&trace).unwrap();
        let text = String::from_utf8(writer.into_inner()).unwrap();
        assert_eq!(
            text,
            "TRACE 301926: (thread=200001)\n\
             \tjava.util.zip.ZipEntry.<init>(ZipEntry.java:101)\n\
             \tjava.lang.Object.wait(Object.java:Native method)\n\
             \tGen.run(<Unknown Source>:Unknown line)\n"
        );
    }

    #[test]
    fn reader_errors_name_the_line() {
        let text = "JAVA PROFILE 1.0.1, created x\n\n--------\n\nTRACE 12:\n\tbroken frame\n";
        let error = read(text.as_bytes()).unwrap_err();
        assert!(error.to_string().starts_with("line 6:"), "{error}");
        let unclosed = "JAVA PROFILE 1.0.1\n--------\nCPU SAMPLES BEGIN (total = 1) d\n";
        let error = read(unclosed.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("not closed"), "{error}");
        assert!(read("garbage".as_bytes()).is_err());
        assert!(read("".as_bytes()).is_err());
    }

    #[test]
    fn unknown_sections_are_skipped_by_name() {
        let text =
            "JAVA PROFILE 1.0.1\n--------\nHEAP DUMP BEGIN (39 objects) x\nROOT 1\nHEAP DUMP END\n";
        let profile = read(text.as_bytes()).unwrap();
        assert_eq!(profile.skipped_sections, vec!["HEAP DUMP".to_string()]);
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        let line = prop_oneof![
            (1u32..100_000).prop_map(FrameLine::Line),
            Just(FrameLine::Unknown),
            Just(FrameLine::Compiled),
            Just(FrameLine::Native),
        ];
        (
            "[a-z]{1,8}(\\.[A-Z][a-zA-Z0-9$]{0,10}){1,3}(\\[\\])?",
            "(<init>|<clinit>|[a-z][a-zA-Z0-9$]{0,12})",
            proptest::option::of("[A-Z][a-zA-Z0-9]{0,10}\\.java"),
            line,
        )
            .prop_map(|(class_name, method_name, source_file, line)| Frame {
                class_name,
                method_name,
                source_file,
                line,
            })
    }

    proptest! {
        #[test]
        fn written_profiles_read_back_unchanged(
            traces in proptest::collection::vec(
                (proptest::option::of(200001u32..200100), proptest::collection::vec(arb_frame(), 0..6), 1u64..10_000),
                1..20,
            ),
            threads in proptest::collection::vec(("[a-zA-Z0-9 _-]{0,20}", "[a-z]{0,10}"), 0..5),
        ) {
            let mut writer = TextWriter::new(Vec::new());
            writer.header("Sun Nov 22 02:18:41 2026").unwrap();
            let starts: Vec<ThreadStart> = threads.iter().enumerate().map(|(i, (name, group))| ThreadStart {
                object_id: 0x5000_0000 + i as u64,
                serial: THREAD_SERIAL_START + 1 + i as u32,
                name: name.clone(),
                group: group.clone(),
            }).collect();
            for start in &starts {
                writer.thread_start(start).unwrap();
            }
            let mut entries = Vec::new();
            let mut written = Vec::new();
            for (i, (thread, frames, count)) in traces.iter().enumerate() {
                let trace = Trace { serial: TRACE_SERIAL_START + 1 + i as u32, thread: *thread, frames: frames.clone() };
                writer.trace(&trace).unwrap();
                entries.push((trace.serial, *count, frames.first().map(Frame::qualified_method)));
                written.push(trace);
            }
            let report = SamplerReport {
                sampler: "AsyncGetCallTrace".into(),
                note: None,
                clock: Some("perf_events task-clock".into()),
                interval_ms: 10,
                failed: [("ticks_GC_active".to_string(), 3u64)].into_iter().collect(),
                dropped: 1,
                cost_us: [("handler".to_string(), 120u64), ("agent_thread".to_string(), 40)].into_iter().collect(),
            };
            writer.sampler(&report).unwrap();
            let table = CpuTable::rank(CpuTableKind::Samples, "Sun Nov 22 02:18:41 2026".into(), entries, 0.0);
            writer.cpu_table(&table).unwrap();
            for start in &starts {
                writer.thread_end(start.serial).unwrap();
            }
            let bytes = writer.into_inner();
            let profile = read(bytes.as_slice()).unwrap();
            prop_assert_eq!(&profile.threads_started, &starts);
            prop_assert_eq!(profile.threads_ended.len(), starts.len());
            prop_assert_eq!(profile.traces.values().cloned().collect::<Vec<_>>(), written);
            prop_assert_eq!(&profile.samplers, &vec![report]);
            let read_table = profile.last_cpu_samples().unwrap();
            prop_assert_eq!(read_table.total, table.total);
            prop_assert_eq!(read_table.rows.len(), table.rows.len());
            for (read_row, row) in read_table.rows.iter().zip(&table.rows) {
                prop_assert_eq!((read_row.rank, read_row.count, read_row.trace), (row.rank, row.count, row.trace));
                prop_assert_eq!(&read_row.method, &row.method);
                prop_assert!((read_row.self_percent - row.self_percent).abs() < 0.006);
            }
        }
    }
}
