//! HPROF text's `MPT SAMPLES` record (openprof's own): the CPU or wall-clock samples taken while
//! a thread was inside a traced call (method parameter tracing), per traced method,
//! specification and value, ranked by trace as CPU SAMPLES ranks them. One record per dump and
//! event, after that dump's CPU SAMPLES or WALL SAMPLES table; like that table it counts the
//! samples since the previous dump. The layout is docs/mpt.md's ("Samples inside traced
//! calls").

use std::io::{self, Write};

use super::mpt::{format_value, parse_value};
use super::reader::parse_cpu_row;
use super::{malformed, parse_number, CpuEntry, CpuTable, CpuTableKind, TextReadError, TextWriter};
use crate::mpt_stats::{ValueKey, ValueType};
use crate::trace::attrs::AttrValue;

/// One record: the samples of one event (CPU or wall clock) taken inside traced calls.
#[derive(Clone, Debug, PartialEq)]
pub struct MptSamples {
    /// `Samples` (CPU) or `Wall`.
    pub kind: CpuTableKind,
    pub date: String,
    /// Samples taken inside traced calls, each once (a call traced by several specifications
    /// counts its samples under each of its values).
    pub samples: u64,
    pub values: Vec<MptSampledValue>,
}

/// The samples of the calls of one method that recorded one value under one specification.
#[derive(Clone, Debug, PartialEq)]
pub struct MptSampledValue {
    /// `package.Class.method(types)`, as the MPT record names it.
    pub method: String,
    /// The specification's text, as the MPT record prints it.
    pub spec: String,
    pub key: ValueKey,
    /// The value's samples by trace (and thread state, for wall samples); its total is the
    /// value's samples.
    pub table: CpuTable,
}

impl MptSampledValue {
    /// A value's samples ranked by trace, most first, with no cutoff: every sample of a value
    /// is listed, so that its profile is whole.
    pub fn rank(
        kind: CpuTableKind,
        method: String,
        spec: String,
        key: ValueKey,
        entries: Vec<CpuEntry>,
    ) -> MptSampledValue {
        let total = entries.iter().map(|entry| entry.cost).sum();
        MptSampledValue {
            method,
            spec,
            key,
            table: CpuTable::rank_by_cost(kind, String::new(), entries, 0.0, total),
        }
    }
}

fn event_name(kind: CpuTableKind) -> &'static str {
    match kind {
        CpuTableKind::Wall => "wall",
        _ => "cpu",
    }
}

impl<W: Write> TextWriter<W> {
    /// The `MPT SAMPLES` record: per method and specification (in name order) its values, most
    /// samples first, each with its ranked traces.
    pub fn mpt_samples(&mut self, record: &MptSamples) -> io::Result<()> {
        writeln!(
            self.out,
            "MPT SAMPLES BEGIN (event = {}, samples = {}) {}",
            event_name(record.kind),
            record.samples,
            record.date
        )?;
        let mut values: Vec<&MptSampledValue> = record.values.iter().collect();
        values.sort_by(|a, b| {
            (&a.method, &a.spec)
                .cmp(&(&b.method, &b.spec))
                .then(b.table.total.cmp(&a.table.total))
                .then_with(|| a.key.value.cmp(&b.key.value))
        });
        let mut group: Option<(&str, &str)> = None;
        for value in values {
            if group != Some((&value.method, &value.spec)) {
                writeln!(self.out, "METHOD {}", value.method)?;
                writeln!(self.out, "SPEC {}", value.spec)?;
                group = Some((&value.method, &value.spec));
            }
            writeln!(
                self.out,
                "VALUE (samples = {}) {} {}",
                value.table.total,
                value.key.value_type.as_str(),
                format_value(&value.key)
            )?;
            self.cpu_rows(&value.table)?;
        }
        writeln!(self.out, "MPT SAMPLES END")
    }
}

/// Reads the lines of one `MPT SAMPLES BEGIN … END` record.
pub(super) struct MptSamplesReader {
    begin: usize,
    record: MptSamples,
    method: Option<String>,
    spec: Option<String>,
}

impl MptSamplesReader {
    pub(super) fn begin(line: &str, number: usize) -> Result<MptSamplesReader, TextReadError> {
        let bad = || {
            malformed(
                number,
                format!(
                    "MPT SAMPLES: expected 'MPT SAMPLES BEGIN (event = cpu|wall, samples = N) DATE', found '{line}'"
                ),
            )
        };
        let rest = line
            .strip_prefix("MPT SAMPLES BEGIN (event = ")
            .ok_or_else(bad)?;
        let (event, rest) = rest.split_once(", samples = ").ok_or_else(bad)?;
        let kind = match event {
            "cpu" => CpuTableKind::Samples,
            "wall" => CpuTableKind::Wall,
            other => {
                return Err(malformed(
                    number,
                    format!("MPT SAMPLES: the event is cpu or wall, not '{other}'"),
                ))
            }
        };
        let (samples, date) = rest.split_once(')').ok_or_else(bad)?;
        Ok(MptSamplesReader {
            begin: number,
            record: MptSamples {
                kind,
                date: date.trim().to_string(),
                samples: parse_number(samples, number, "MPT SAMPLES samples")?,
                values: Vec::new(),
            },
            method: None,
            spec: None,
        })
    }

    pub(super) fn line(&mut self, line: &str, number: usize) -> Result<(), TextReadError> {
        if let Some(method) = line.strip_prefix("METHOD ") {
            if method.trim().is_empty() {
                return Err(malformed(number, "MPT SAMPLES: METHOD names no method"));
            }
            self.method = Some(method.to_string());
            self.spec = None;
            return Ok(());
        }
        let Some(method) = &self.method else {
            return Err(malformed(
                number,
                format!("MPT SAMPLES: '{line}' before any METHOD line"),
            ));
        };
        if let Some(spec) = line.strip_prefix("SPEC ") {
            if spec.trim().is_empty() {
                return Err(malformed(
                    number,
                    "MPT SAMPLES: SPEC holds no specification",
                ));
            }
            self.spec = Some(spec.to_string());
            return Ok(());
        }
        let Some(spec) = &self.spec else {
            return Err(malformed(
                number,
                format!("MPT SAMPLES: '{line}' where the SPEC line should be"),
            ));
        };
        if let Some(rest) = line.strip_prefix("VALUE (samples = ") {
            let (samples, rest) = rest.split_once(") ").ok_or_else(|| {
                malformed(
                    number,
                    format!("MPT SAMPLES: no ') ' after the samples in '{line}'"),
                )
            })?;
            let (value_type, value) = rest.split_once(' ').ok_or_else(|| {
                malformed(number, format!("MPT SAMPLES: no 'type value' in '{line}'"))
            })?;
            let value_type = ValueType::parse_value(value_type)
                .map_err(|problem| malformed(number, format!("MPT SAMPLES: type {problem}")))?;
            let value = parse_value(value)
                .map_err(|problem| malformed(number, format!("MPT SAMPLES: {problem}")))?;
            let key = ValueKey::new(value_type, value);
            if self
                .record
                .values
                .iter()
                .any(|other| &other.method == method && &other.spec == spec && other.key == key)
            {
                return Err(malformed(
                    number,
                    format!(
                        "MPT SAMPLES: the value {} {} is listed twice",
                        key.value_type.as_str(),
                        format_value(&key)
                    ),
                ));
            }
            self.record.values.push(MptSampledValue {
                method: method.clone(),
                spec: spec.clone(),
                key,
                table: CpuTable {
                    kind: self.record.kind,
                    total: parse_number(samples, number, "MPT SAMPLES value samples")?,
                    date: String::new(),
                    rows: Vec::new(),
                },
            });
            return Ok(());
        }
        if line.starts_with("rank ") {
            return Ok(());
        }
        let Some(value) = self.record.values.last_mut() else {
            return Err(malformed(
                number,
                format!("MPT SAMPLES: '{line}' before any VALUE line"),
            ));
        };
        let row = parse_cpu_row(line, number, self.record.kind == CpuTableKind::Wall)?;
        value.table.rows.push(row);
        Ok(())
    }

    pub(super) fn finish(self) -> Result<MptSamples, TextReadError> {
        for value in &self.record.values {
            let listed: u64 = value.table.rows.iter().map(|row| row.count).sum();
            if listed != value.table.total {
                return Err(malformed(
                    self.begin,
                    format!(
                        "MPT SAMPLES: the value {} {} of {} announces {} samples, its rows hold {listed}",
                        value.key.value_type.as_str(),
                        format_value(&value.key),
                        value.method,
                        value.table.total
                    ),
                ));
            }
        }
        Ok(self.record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hprof_text::read;

    fn entry(trace: u32, count: u64, state: Option<&str>) -> CpuEntry {
        CpuEntry {
            trace,
            cost: count,
            hits: count,
            state: state.map(str::to_string),
            method: Some(format!("example.Slow.m{trace}")),
        }
    }

    fn record(kind: CpuTableKind) -> MptSamples {
        let state = (kind == CpuTableKind::Wall).then_some("sleeping");
        MptSamples {
            kind,
            date: "Wed Nov 25 18:40:00 2026".into(),
            samples: 9,
            values: vec![
                MptSampledValue::rank(
                    kind,
                    "example.Slow.work(int)".into(),
                    "Slow.work(int) 1".into(),
                    ValueKey::new(ValueType::Int, "1"),
                    vec![entry(300002, 1, state)],
                ),
                MptSampledValue::rank(
                    kind,
                    "example.Slow.work(int)".into(),
                    "Slow.work(int) 1".into(),
                    ValueKey::new(ValueType::Int, "100"),
                    vec![entry(300001, 2, state), entry(300003, 6, state)],
                ),
            ],
        }
    }

    fn document(record: &MptSamples) -> String {
        let mut out = Vec::new();
        let mut writer = TextWriter::new(&mut out);
        writer.mpt_samples(record).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn read_back(text: &str) -> Result<Vec<MptSamples>, TextReadError> {
        read(format!("JAVA PROFILE 1.0.1\n--------\n{text}").as_bytes()).map(|p| p.mpt_samples)
    }

    #[test]
    fn the_record_has_its_layout() {
        assert_eq!(
            document(&record(CpuTableKind::Samples)),
            "MPT SAMPLES BEGIN (event = cpu, samples = 9) Wed Nov 25 18:40:00 2026\n\
             METHOD example.Slow.work(int)\n\
             SPEC Slow.work(int) 1\n\
             VALUE (samples = 8) int 100\n\
             rank   self  accum   count trace method\n   \
             1 75.00% 75.00%       6 300003 example.Slow.m300003\n   \
             2 25.00% 100.00%       2 300001 example.Slow.m300001\n\
             VALUE (samples = 1) int 1\n\
             rank   self  accum   count trace method\n   \
             1 100.00% 100.00%       1 300002 example.Slow.m300002\n\
             MPT SAMPLES END\n"
        );
    }

    #[test]
    fn written_records_read_back_with_their_values_and_states() {
        for kind in [CpuTableKind::Samples, CpuTableKind::Wall] {
            let written = record(kind);
            let read = read_back(&document(&written)).unwrap();
            assert_eq!(read.len(), 1);
            let mut values = written.values.clone();
            values.reverse(); // the writer ranks the value with more samples first
            assert_eq!(read[0].kind, kind);
            assert_eq!(read[0].samples, 9);
            for (read, written) in read[0].values.iter().zip(&values) {
                assert_eq!(
                    (&read.method, &read.spec, &read.key),
                    (&written.method, &written.spec, &written.key)
                );
                assert_eq!(read.table.rows, written.table.rows);
            }
        }
    }

    #[test]
    fn a_string_value_with_spaces_and_quotes_reads_back() {
        let mut written = record(CpuTableKind::Samples);
        written.values[0].key = ValueKey::new(ValueType::String, "slow \"key\") x");
        let read = read_back(&document(&written)).unwrap();
        assert!(read[0]
            .values
            .iter()
            .any(|value| value.key == written.values[0].key));
    }

    #[test]
    fn malformed_records_name_their_line() {
        let cases = [
            ("MPT SAMPLES BEGIN (event = gpu, samples = 1) d\nMPT SAMPLES END\n", "line 3", "not 'gpu'"),
            ("MPT SAMPLES BEGIN (samples = 1) d\nMPT SAMPLES END\n", "line 3", "expected 'MPT SAMPLES BEGIN"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nSPEC x\nMPT SAMPLES END\n", "line 4", "before any METHOD"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nMETHOD m\nVALUE (samples = 1) int 1\nMPT SAMPLES END\n", "line 5", "SPEC line should be"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nMETHOD m\nSPEC s\nVALUE (samples = 1) integer 1\nMPT SAMPLES END\n", "line 6", "is not one of"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nMETHOD m\nSPEC s\nVALUE (samples = 2) int 1\n   1 100.00% 100.00%       1 300002 m\nMPT SAMPLES END\n", "line 3", "announces 2 samples, its rows hold 1"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nMETHOD m\nSPEC s\n   1 100.00% 100.00%       1 300002 m\nMPT SAMPLES END\n", "line 6", "before any VALUE"),
            ("MPT SAMPLES BEGIN (event = cpu, samples = 1) d\nMETHOD m\nSPEC s\nVALUE (samples = 0) int 1\nVALUE (samples = 0) int 1\nMPT SAMPLES END\n", "line 7", "listed twice"),
        ];
        for (text, line, message) in cases {
            let error = read_back(text).unwrap_err().to_string();
            assert!(
                error.contains(line) && error.contains(message),
                "{text}: {error}"
            );
        }
    }
}
