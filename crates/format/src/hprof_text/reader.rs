//! The HPROF text reader: line by line, sections it does not model skipped by name, heap dumps
//! summed as they are read so that no object is kept.

use std::io::{self, BufRead};

use super::{
    heap_dump, mpt, mpt_samples, sites, CpuRow, CpuTable, CpuTableKind, Frame, FrameLine,
    LockTable, LockTableKind, SamplerReport, SitesTable, TextProfile, ThreadStart, Trace,
    WalkerExample, WallSampler, FORGOTTEN_TRACES, NO_LOCK_CLASS,
};

/// A malformed HPROF text file: which line, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TextReadError {
    #[error("line {line}: {message}")]
    Malformed { line: usize, message: String },
    #[error("reading HPROF text: {0}")]
    Io(#[from] io::Error),
}

pub(super) fn malformed(line: usize, message: impl Into<String>) -> TextReadError {
    TextReadError::Malformed {
        line,
        message: message.into(),
    }
}

/// Reads HPROF text from a buffered source.
pub fn read(input: impl BufRead) -> Result<TextProfile, TextReadError> {
    read_with_progress(input, &mut |_| {})
}

/// How often, in bytes read, [`read_with_progress`] reports.
const PROGRESS_STEP: u64 = 1 << 20;

/// Reads HPROF text line by line, keeping no line longer than it takes to parse it (heap dumps
/// are summed into histograms as they go), and calls `progress` with the bytes consumed so far
/// every megabyte and at the end.
pub fn read_with_progress(
    input: impl BufRead,
    progress: &mut dyn FnMut(u64),
) -> Result<TextProfile, TextReadError> {
    read_passing_traces(input, progress, None)
}

/// Reads HPROF text as [`read_with_progress`] does, but hands each TRACE to `on_trace` as soon as
/// it is read instead of keeping it in the profile (whose `traces` stay empty): a reader that
/// keeps traces in a form of its own does not hold them twice.
pub fn read_passing_traces(
    input: impl BufRead,
    progress: &mut dyn FnMut(u64),
    on_trace: Option<&mut dyn FnMut(Trace)>,
) -> Result<TextProfile, TextReadError> {
    let mut lines = Lines {
        input,
        line: String::new(),
        number: 0,
        consumed: 0,
        reported: 0,
        again: false,
        progress,
    };
    let profile = parse(&mut lines, on_trace)?;
    (lines.progress)(lines.consumed);
    Ok(profile)
}

/// The input's lines one at a time, numbered from 1.
struct Lines<'p, R> {
    input: R,
    /// The current line, without its line end.
    line: String,
    number: usize,
    consumed: u64,
    reported: u64,
    /// The next `advance` stays on the current line.
    again: bool,
    progress: &'p mut dyn FnMut(u64),
}

impl<R: BufRead> Lines<'_, R> {
    /// Moves to the next line; false at the end of the input.
    fn advance(&mut self) -> Result<bool, TextReadError> {
        if self.again {
            self.again = false;
            return Ok(true);
        }
        // The line's buffer is reused: one allocation for the whole file, not one per line.
        let mut bytes = std::mem::take(&mut self.line).into_bytes();
        bytes.clear();
        let read = self.input.read_until(b'\n', &mut bytes)?;
        if read == 0 {
            return Ok(false);
        }
        self.number += 1;
        self.consumed += read as u64;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        self.line = String::from_utf8(bytes)
            .map_err(|error| malformed(self.number, format!("not UTF-8 text: {error}")))?;
        if self.consumed - self.reported >= PROGRESS_STEP {
            self.reported = self.consumed;
            (self.progress)(self.consumed);
        }
        Ok(true)
    }

    fn text(&self) -> &str {
        &self.line
    }

    /// Leaves the current line for the next `advance`, which will not read.
    fn keep_for_next(&mut self) {
        self.again = true;
    }

    /// Passes each line of a section to `each` until its `end` line, which must come.
    fn section(
        &mut self,
        end: &str,
        begin: usize,
        mut each: impl FnMut(&str, usize) -> Result<(), TextReadError>,
    ) -> Result<(), TextReadError> {
        while self.advance()? {
            if self.line == end {
                return Ok(());
            }
            each(&self.line, self.number)?;
        }
        Err(malformed(
            begin,
            format!(
                "section not closed by '{end}' (the file ends at line {})",
                self.number
            ),
        ))
    }
}

/// Cuts `prefix` off `text`, or says the line is malformed.
fn expect_prefix<'a>(
    text: &'a str,
    prefix: &str,
    number: usize,
    record: &str,
) -> Result<&'a str, TextReadError> {
    text.strip_prefix(prefix)
        .ok_or_else(|| malformed(number, format!("{record}: expected '{prefix}' in '{text}'")))
}

pub(super) fn parse_number<T: std::str::FromStr>(
    text: &str,
    number: usize,
    what: &str,
) -> Result<T, TextReadError> {
    text.trim()
        .parse()
        .map_err(|_| malformed(number, format!("{what}: '{text}' is not a number")))
}

fn parse_thread_start(text: &str, number: usize) -> Result<ThreadStart, TextReadError> {
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

fn parse_frame(text: &str, number: usize) -> Result<Frame, TextReadError> {
    let body = text
        .strip_suffix(')')
        .ok_or_else(|| malformed(number, format!("frame '{text}' does not end with ')'")))?;
    let open = body
        .rfind('(')
        .ok_or_else(|| malformed(number, format!("frame '{text}' has no '('")))?;
    let (qualified, location) = (&body[..open], &body[open + 1..]);
    if location == "failed walk" {
        return Ok(Frame::failed_walk(qualified));
    }
    if location == "vm thread" {
        return Ok(Frame::vm_thread(qualified));
    }
    if location == "virtual thread" {
        return Ok(Frame::virtual_thread());
    }
    if location == "labels" {
        return Ok(Frame::labels(qualified));
    }
    if let Some(library) = location.strip_suffix(":native") {
        return Ok(Frame::native_code(library, qualified));
    }
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

fn parse_trace_header(text: &str, number: usize) -> Result<(u32, Option<u32>), TextReadError> {
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

fn parse_cpu_header(
    text: &str,
    number: usize,
) -> Result<(CpuTableKind, u64, String), TextReadError> {
    let (kind, rest) = if let Some(rest) = text.strip_prefix("CPU SAMPLES BEGIN (total = ") {
        (CpuTableKind::Samples, rest)
    } else if let Some(rest) = text.strip_prefix("CPU TIME (ms) BEGIN (total = ") {
        (CpuTableKind::Time, rest)
    } else if let Some(rest) = text.strip_prefix("WALL SAMPLES BEGIN (total = ") {
        (CpuTableKind::Wall, rest)
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

/// What follows the first `count` whitespace-separated fields of `text`, trimmed.
fn after_fields(text: &str, count: usize) -> &str {
    let mut rest = text.trim_start();
    for _ in 0..count {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = rest[end..].trim_start();
    }
    rest.trim_end()
}

/// A row of a CPU table; a WALL SAMPLES row (`with_state`) has the thread's state before the
/// method.
pub(super) fn parse_cpu_row(
    text: &str,
    number: usize,
    with_state: bool,
) -> Result<CpuRow, TextReadError> {
    let mut fields = text.split_whitespace();
    let mut next = |what: &str| {
        fields
            .next()
            .ok_or_else(|| malformed(number, format!("CPU row: no {what}")))
    };
    let rank = parse_number(next("rank")?, number, "CPU rank")?;
    let percent = |field: &str, what: &str| -> Result<f64, TextReadError> {
        let digits = field
            .strip_suffix('%')
            .ok_or_else(|| malformed(number, format!("CPU row: {what} '{field}' has no '%'")))?;
        parse_number(digits, number, what)
    };
    let self_percent = percent(next("self")?, "self")?;
    let accum_percent = percent(next("accum")?, "accum")?;
    let count = parse_number(next("count")?, number, "CPU count")?;
    let trace = parse_number(next("trace")?, number, "CPU trace")?;
    let state = match with_state {
        true => Some(next("state")?.to_string()),
        false => None,
    };
    next("method")?;
    // The method is the rest of the line: a native symbol may hold spaces (`operator new`).
    let method = after_fields(text, 5 + usize::from(with_state)).to_string();
    Ok(CpuRow {
        rank,
        self_percent,
        accum_percent,
        count,
        trace,
        state,
        method: (method != "<empty trace>").then_some(method),
    })
}

fn parse_sampler_line(
    report: &mut SamplerReport,
    line: &str,
    number: usize,
) -> Result<(), TextReadError> {
    let (key, value) = line
        .split_once(' ')
        .ok_or_else(|| malformed(number, format!("CPU SAMPLER: '{line}' is not 'key value'")))?;
    match key {
        "sampler" => report.sampler = value.to_string(),
        "note" => report.note = Some(value.to_string()),
        "clock" => report.clock = Some(value.to_string()),
        "interval" => {
            let ms = value.strip_suffix(" ms").unwrap_or(value);
            report.interval_ms = parse_number(ms, number, "CPU SAMPLER interval")?;
        }
        "depth" => report.depth = Some(parse_number(value, number, "CPU SAMPLER depth")?),
        "walker" => report.walker = Some(value.to_string()),
        "walker.example" => {
            report
                .walker_examples
                .push(WalkerExample::from_line(value).ok_or_else(|| {
                    malformed(
                        number,
                        format!(
                    "CPU SAMPLER: '{value}' is not 'KIND at=N vm_walk=HOW vm=FRAMES asgct=FRAMES'"
                ),
                    )
                })?)
        }
        "failed" | "recovered" => {}
        "dropped" => report.dropped = parse_number(value, number, "CPU SAMPLER dropped")?,
        "in_agent" => report.in_agent = parse_number(value, number, "CPU SAMPLER in_agent")?,
        _ => {
            if let Some(reason) = key.strip_prefix("failed.") {
                let count = parse_number(value, number, "CPU SAMPLER failed")?;
                report.failed.insert(reason.to_string(), count);
            } else if let Some(what) = key.strip_prefix("walker.") {
                let count = parse_number(value, number, "CPU SAMPLER walker")?;
                report.walker_counts.insert(what.to_string(), count);
            } else if let Some(how) = key.strip_prefix("recovered.") {
                let count = parse_number(value, number, "CPU SAMPLER recovered")?;
                report.recovered.insert(how.to_string(), count);
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
    Ok(())
}

fn parse<R: BufRead>(
    lines: &mut Lines<'_, R>,
    mut on_trace: Option<&mut dyn FnMut(Trace)>,
) -> Result<TextProfile, TextReadError> {
    let mut profile = TextProfile::default();
    // Serials of the traces passed on, which must not come twice either.
    let mut passed = std::collections::HashSet::new();
    if !lines.advance()? {
        return Err(malformed(1, "empty file: no 'JAVA PROFILE' header"));
    }
    if !lines.text().starts_with("JAVA PROFILE ") {
        return Err(malformed(
            1,
            format!("no 'JAVA PROFILE' header, found '{}'", lines.text()),
        ));
    }
    profile.header = lines.text().to_string();
    // The prelude is free text, up to the separator line.
    loop {
        if !lines.advance()? {
            return Err(malformed(
                1,
                "the header is not closed by a '--------' line",
            ));
        }
        if lines.text() == "--------" {
            break;
        }
    }
    while lines.advance()? {
        let number = lines.number;
        let line = lines.text();
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
            while lines.advance()? {
                let Some(frame) = lines.text().strip_prefix('\t') else {
                    lines.keep_for_next();
                    break;
                };
                if frame != "<empty>" {
                    frames.push(parse_frame(frame, lines.number)?);
                }
            }
            let trace = Trace {
                serial,
                thread,
                frames,
            };
            let twice = match on_trace.as_mut() {
                Some(on_trace) => {
                    let twice = !passed.insert(serial);
                    if !twice {
                        on_trace(trace);
                    }
                    twice
                }
                // Printed again after FORGOTTEN TRACES: the same trace is no second definition.
                None => match profile.traces.insert(serial, trace.clone()) {
                    Some(before) => before != trace,
                    None => false,
                },
            };
            if twice {
                return Err(malformed(
                    number,
                    format!("TRACE {serial} is defined twice"),
                ));
            }
        } else if line == "CPU SAMPLER BEGIN" {
            let mut report = SamplerReport::default();
            lines.section("CPU SAMPLER END", number, |line, number| {
                parse_sampler_line(&mut report, line, number)
            })?;
            profile.samplers.push(report);
        } else if line == "WALL SAMPLER BEGIN" {
            let mut sampler = WallSampler::default();
            lines.section("WALL SAMPLER END", number, |line, number| {
                let (key, value) = line.split_once(' ').ok_or_else(|| {
                    malformed(number, format!("WALL SAMPLER: '{line}' is not 'key value'"))
                })?;
                let value = value.strip_suffix(" ms").unwrap_or(value);
                match key {
                    "interval" => sampler.interval_ms = parse_number(value, number, key)?,
                    "threads_per_tick" => {
                        sampler.threads_per_tick = parse_number(value, number, key)?
                    }
                    "intervals" => sampler.intervals = parse_number(value, number, key)?,
                    "sampled" => sampler.sampled = parse_number(value, number, key)?,
                    "skipped" => sampler.skipped = parse_number(value, number, key)?,
                    "lost" => sampler.lost = parse_number(value, number, key)?,
                    // A newer agent may add keys; older readers go on.
                    _ => {}
                }
                Ok(())
            })?;
            profile.wall_samplers.push(sampler);
        } else if line.starts_with("CPU SAMPLES BEGIN")
            || line.starts_with("CPU TIME (ms) BEGIN")
            || line.starts_with("WALL SAMPLES BEGIN")
        {
            let (kind, total, date) = parse_cpu_header(line, number)?;
            let end = format!("{} END", kind.record_name());
            let mut rows = Vec::new();
            lines.section(&end, number, |row, number| {
                if !row.starts_with("rank ") {
                    rows.push(parse_cpu_row(row, number, kind == CpuTableKind::Wall)?);
                }
                Ok(())
            })?;
            profile.cpu_tables.push(CpuTable {
                kind,
                total,
                date,
                rows,
            });
        } else if let Some((kind, rest)) = LockTableKind::ALL.iter().find_map(|kind| {
            line.strip_prefix(kind.record_name())
                .and_then(|rest| rest.strip_prefix(" BEGIN (total = "))
                .map(|rest| (*kind, rest))
        }) {
            let name = kind.record_name();
            let (total, date) = rest
                .split_once(" ms)")
                .ok_or_else(|| malformed(number, format!("{name}: no ' ms)' after the total")))?;
            let total_ms = parse_number(total, number, &format!("{name} total"))?;
            let date = date.trim().to_string();
            let mut rows = Vec::new();
            lines.section(&format!("{name} END"), number, |row, number| {
                if !row.starts_with("rank ") {
                    let mut row = parse_cpu_row(row, number, kind == LockTableKind::Owners)?;
                    // `java.lang.Object (Java)`: the class, and the kind HPROF prints after it.
                    row.method = row
                        .method
                        .map(|class| class.trim_end_matches(" (Java)").to_string())
                        .filter(|class| class != NO_LOCK_CLASS);
                    rows.push(row);
                }
                Ok(())
            })?;
            profile.lock_tables.push(LockTable {
                kind,
                total_ms,
                date,
                rows,
            });
        } else if line.starts_with("SITES BEGIN") {
            let (ordered_by, incremental, date) = sites::parse_sites_header(line, number)?;
            let mut rows = Vec::new();
            lines.section("SITES END", number, |row, number| {
                if !sites::is_sites_column_line(row) {
                    rows.push(sites::parse_site_row(row, number)?);
                }
                Ok(())
            })?;
            profile.sites.push(SitesTable {
                date,
                ordered_by,
                totals: None,
                rows,
                incremental,
            });
        } else if line.starts_with("HEAP DUMP BEGIN") {
            let mut dump = heap_dump::HeapDumpReader::begin(line, number)?;
            lines.section("HEAP DUMP END", number, |line, number| {
                dump.line(line, number)
            })?;
            profile.heap_dumps.push(dump.finish());
        } else if line.starts_with("MPT BEGIN") {
            let mut record = mpt::MptReader::begin(line, number)?;
            lines.section("MPT END", number, |line, number| record.line(line, number))?;
            let date = record.date.clone();
            profile.mpt = record.finish()?;
            profile.mpt_dumps.push((date, profile.mpt.clone()));
        } else if line.starts_with("MPT SAMPLES BEGIN") {
            let mut record = mpt_samples::MptSamplesReader::begin(line, number)?;
            lines.section("MPT SAMPLES END", number, |line, number| {
                record.line(line, number)
            })?;
            profile.mpt_samples.push(record.finish()?);
        } else if line.starts_with(&format!("{FORGOTTEN_TRACES} BEGIN")) {
            lines.section(&format!("{FORGOTTEN_TRACES} END"), number, |_, _| Ok(()))?;
            // What comes after may print those traces again.
            passed.clear();
            profile.traces_forgotten += 1;
        } else if let Some(name) = section_name(line) {
            let name = name.to_string();
            let end = format!("{name} END");
            lines.section(&end, number, |_, _| Ok(()))?;
            profile.skipped_sections.push(name);
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

/// Cuts `text` at `separator`, or says which part of which record is missing.
pub(super) fn cut<'a>(
    text: &'a str,
    separator: &str,
    number: usize,
    record: &str,
) -> Result<(&'a str, &'a str), TextReadError> {
    text.split_once(separator)
        .ok_or_else(|| malformed(number, format!("{record}: no '{separator}' in '{text}'")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hprof_text::{LockEntry, TextWriter, THREAD_SERIAL_START, TRACE_SERIAL_START};
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
    fn cpu_rows_name_native_symbols_with_spaces_and_empty_traces() {
        let text = "JAVA PROFILE 1.0.1\n--------\nTRACE 300001:\n\t<empty>\nTRACE 300002:\n\toperator new(libstdc++.so.6:native)\n\t[GC active](failed walk)\nCPU SAMPLES BEGIN (total = 3) d\nrank   self  accum   count trace method\n   1 66.67% 66.67%       2 300002 operator new\n   2 33.33% 100.00%       1 300001 <empty trace>\nCPU SAMPLES END\n";
        let profile = read(text.as_bytes()).unwrap();
        let rows = &profile.last_cpu_samples().unwrap().rows;
        assert_eq!(rows[0].method.as_deref(), Some("operator new"));
        assert_eq!(rows[1].method, None);
        assert_eq!(
            profile.traces[&300002].frames,
            vec![
                Frame::native_code("libstdc++.so.6", "operator new"),
                Frame::failed_walk("[GC active]")
            ]
        );
    }

    /// HPROF's own `monitor=y` table: `%4u %5.2f%% %5.2f%% %7u %5u %s (Java)` rows.
    #[test]
    fn monitor_time_tables_are_read() {
        let text = "JAVA PROFILE 1.0.1\n--------\n\
            MONITOR TIME BEGIN (total = 250 ms) Mon Nov 23 10:00:00 2026\n\
            rank   self  accum   count trace monitor\n   \
            1 80.00% 80.00%       4 300010 java.lang.Object (Java)\n   \
            2 20.00% 100.00%       1 300011 Calls$Lock (Java)\n\
            MONITOR TIME END\n\
            MONITOR TIME BEGIN (total = 0 ms) Mon Nov 23 10:00:01 2026\n\
            MONITOR TIME END\n";
        let profile = read(text.as_bytes()).unwrap();
        assert_eq!(profile.lock_tables.len(), 2);
        let table = &profile.lock_tables[0];
        assert_eq!(table.kind, LockTableKind::Monitor);
        assert_eq!((table.total_ms, table.rows.len()), (250, 2));
        assert_eq!(table.rows[0].method.as_deref(), Some("java.lang.Object"));
        assert_eq!((table.rows[1].count, table.rows[1].trace), (1, 300011));
        assert_eq!(table.rows[1].self_percent, 20.0);
        assert!(profile.lock_tables[1].rows.is_empty());
        let bad =
            "JAVA PROFILE 1.0.1\n--------\nMONITOR TIME BEGIN (total = x ms) d\nMONITOR TIME END\n";
        assert!(read(bad.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("line 3"));
    }

    /// Every kind of lock table, written and read back: classes, states, the park without a
    /// blocker, the totals.
    #[test]
    fn lock_tables_read_back_as_written() {
        let entry = |trace, state: Option<&str>, class: Option<&str>, waits, ms: u64| LockEntry {
            trace,
            state: state.map(str::to_string),
            class: class.map(str::to_string),
            waits,
            nanoseconds: ms * 1_000_000,
        };
        let date = "Mon Nov 23 10:00:00 2026".to_string();
        let tables = [
            LockTable::rank(
                LockTableKind::Monitor,
                date.clone(),
                vec![entry(300001, None, Some("WallStates$Ledger"), 40, 800)],
            ),
            LockTable::rank(
                LockTableKind::Park,
                date.clone(),
                vec![
                    entry(300002, None, None, 3, 100),
                    entry(
                        300003,
                        None,
                        Some("java.util.concurrent.locks.ReentrantLock$NonfairSync"),
                        40,
                        300,
                    ),
                ],
            ),
            LockTable::rank(
                LockTableKind::Owners,
                date,
                vec![
                    entry(300004, Some("blocked"), Some("WallStates$Ledger"), 40, 750),
                    entry(
                        300005,
                        Some("parked"),
                        Some("java.util.concurrent.locks.ReentrantLock$NonfairSync"),
                        40,
                        250,
                    ),
                ],
            ),
        ];
        let mut writer = TextWriter::new(Vec::new());
        writer.header("Mon Nov 23 10:00:00 2026").unwrap();
        for table in &tables {
            writer.lock_table(table).unwrap();
        }
        let bytes = writer.into_inner();
        let text = String::from_utf8_lossy(&bytes);
        // HPROF's own layout for monitors.
        assert!(
            text.contains("rank   self  accum   count trace monitor\n   1 100.00% 100.00%      40 300001 WallStates$Ledger (Java)\n"),
            "{text}"
        );
        assert!(
            text.contains("   2 25.00% 100.00%       3 300002 <none>\n"),
            "{text}"
        );
        assert!(
            text.contains("rank   self  accum   count trace state lock\n"),
            "{text}"
        );
        let profile = read(bytes.as_slice()).unwrap();
        assert_eq!(profile.lock_tables, tables);
        assert_eq!(profile.lock_tables_of(LockTableKind::Park).count(), 1);
        let parks = &profile.lock_tables[1];
        assert_eq!(parks.total_ms, 400);
        assert_eq!(
            parks.rows[0].method.as_deref(),
            Some("java.util.concurrent.locks.ReentrantLock$NonfairSync")
        );
        assert_eq!(parks.rows[1].method, None);
        assert_eq!(
            profile.lock_tables[2].rows[1].state.as_deref(),
            Some("parked")
        );
    }

    #[test]
    fn unknown_sections_are_skipped_by_name() {
        let text = "JAVA PROFILE 1.0.1\n--------\nMONITOR DUMP BEGIN\n    THREAD 200001, trace 300001, status: R\nMONITOR DUMP END\n";
        let profile = read(text.as_bytes()).unwrap();
        assert_eq!(profile.skipped_sections, vec!["MONITOR DUMP".to_string()]);
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        let line = prop_oneof![
            (1u32..100_000).prop_map(FrameLine::Line),
            Just(FrameLine::Unknown),
            Just(FrameLine::Compiled),
            Just(FrameLine::Native),
        ];
        let java = (
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
            });
        let native = (
            "lib[a-z0-9_]{1,8}\\.so(\\.[0-9]){0,2}",
            "([a-z_][a-zA-Z0-9_:<>]{0,20}( [a-z]{1,4})?|lib[a-z]\\.so\\+0x[0-9a-f]{1,6})",
        )
            .prop_map(|(library, symbol)| Frame::native_code(&library, &symbol));
        let mark = "\\[[a-zA-Z ]{1,16}\\]".prop_map(|mark| Frame::failed_walk(&mark));
        let root = "\\[[a-zA-Z ]{1,15}\\]".prop_map(|name| Frame::vm_thread(&name));
        prop_oneof![
            6 => java,
            2 => native,
            1 => mark,
            1 => root,
            1 => Just(Frame::virtual_thread())
        ]
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
                depth: Some(64),
                failed: [("ticks_GC_active".to_string(), 3u64)].into_iter().collect(),
                recovered: [("stub_return_address".to_string(), 5u64)].into_iter().collect(),
                walker: Some("check".into()),
                walker_counts: [("check.same".to_string(), 7u64), ("failed.stub_on_top".to_string(), 2)].into_iter().collect(),
                walker_examples: vec![
                    WalkerExample { kind: "other_frames".into(), first: 3, vm_walk: "compiled/interrupted/2".into(), vm: vec!["a.B.c@3".into(), "a.B.main@0".into()], asgct: vec!["a.B.main@0".into()] },
                    WalkerExample { kind: "only_asgct_walked".into(), first: 0, vm_walk: "failed/stub_on_top".into(), vm: vec![], asgct: vec!["?".into()] },
                ],
                dropped: 1,
                in_agent: 2,
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
