//! HPROF text's `MPT` record (openprof's own): method parameter tracing's figures, a ranked
//! table of values per traced method and specification, written at exit and read back. The
//! layout is docs/mpt.md's ("Reports"): numbers in fixed columns, the value last, so that it may
//! hold spaces, and quoted with escapes when it is a string, so that each row stays one line.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::{malformed, parse_number, TextReadError, TextWriter};
use crate::mpt_stats::{MptTable, ValueKey, ValueStats, ValueType};
use crate::trace::attrs::AttrValue;

/// The column names line of each table.
const COLUMNS: &str = "rank   calls  wall total ms   wall mean ms    wall max ms   cpu total ms    cpu mean ms     cpu max ms type     value";

/// Nanoseconds as milliseconds with three decimals, rounded to the microsecond; exact integer
/// arithmetic, so that the reader gets back the microseconds written.
pub fn format_ms(nanos: u64) -> String {
    let micros = nanos / 1000 + u64::from(nanos % 1000 >= 500);
    format!("{}.{:03}", micros / 1000, micros % 1000)
}

/// Milliseconds with up to six decimals (`12.345`, `0.000250`) as nanoseconds.
fn parse_ms(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || fraction.len() > 6 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u64>().ok()? * 10u64.pow(6 - fraction.len() as u32)
    };
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

/// A value as the last column shows it: strings always quoted, other values as they are unless
/// that would be ambiguous (empty, spaces at either end, a leading quote, control characters).
pub fn format_value(key: &ValueKey) -> String {
    let value = &key.value;
    let plain = !value.is_empty()
        && !value.starts_with('"')
        && !value.starts_with(char::is_whitespace)
        && !value.ends_with(char::is_whitespace)
        && !value.chars().any(char::is_control);
    if plain && key.value_type != ValueType::String {
        return value.clone();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The value column back: a quoted string unescaped, or the text as it is.
pub(super) fn parse_value(text: &str) -> Result<String, String> {
    let Some(quoted) = text.strip_prefix('"') else {
        return Ok(text.to_string());
    };
    let mut value = String::with_capacity(quoted.len());
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' if at + 1 == quoted.len() => return Ok(value),
            '"' => return Err(format!("text after the closing quote: '{}'", &quoted[at..])),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('"') => value.push('"'),
                Some('\\') => value.push('\\'),
                Some('n') => value.push('\n'),
                Some('t') => value.push('\t'),
                Some('r') => value.push('\r'),
                Some('u') => {
                    let rest = &quoted[at + 2..];
                    let code = rest
                        .strip_prefix('{')
                        .and_then(|rest| rest.split_once('}'))
                        .map(|(hex, _)| hex)
                        .ok_or_else(|| "\\u without {hex}".to_string())?;
                    let c = u32::from_str_radix(code, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("\\u{{{code}}} is not a character"))?;
                    value.push(c);
                    for _ in 0..code.len() + 2 {
                        chars.next();
                    }
                }
                Some(other) => return Err(format!("unknown escape '\\{other}'")),
                None => return Err("the value ends inside an escape".into()),
            },
            c => value.push(c),
        }
    }
    Err("the quoted value is not closed".into())
}

impl<W: Write> TextWriter<W> {
    /// The `MPT` record: totals and the date it was written (when known), then per table its
    /// method, its specification and its values, ranked slowest mean first (docs/mpt.md,
    /// "Reports").
    pub fn mpt(&mut self, tables: &[MptTable], date: Option<&str>) -> io::Result<()> {
        let calls: u64 = tables.iter().map(MptTable::calls).sum();
        let unfinished: u64 = tables.iter().map(|table| table.unfinished).sum();
        writeln!(
            self.out,
            "MPT BEGIN (tables = {}, calls = {calls}, unfinished = {unfinished}){}",
            tables.len(),
            date.map(|date| format!(" {date}")).unwrap_or_default()
        )?;
        for table in tables {
            writeln!(
                self.out,
                "METHOD {} (calls = {}, unfinished = {})",
                table.method,
                table.calls(),
                table.unfinished
            )?;
            writeln!(self.out, "SPEC {}", table.spec)?;
            let ranked = table.ranked();
            if !ranked.is_empty() {
                writeln!(self.out, "{COLUMNS}")?;
            }
            for (rank, row) in ranked.into_iter().enumerate() {
                writeln!(
                    self.out,
                    "{:4} {:7} {:>14} {:>14} {:>14} {:>14} {:>14} {:>14} {:<8} {}",
                    rank + 1,
                    row.calls,
                    format_ms(row.wall_total_ns),
                    format_ms(row.wall_mean_ns()),
                    format_ms(row.wall_max_ns),
                    format_ms(row.cpu_total_ns),
                    format_ms(row.cpu_mean_ns()),
                    format_ms(row.cpu_max_ns),
                    row.key.value_type.as_str(),
                    format_value(&row.key)
                )?;
            }
        }
        writeln!(self.out, "MPT END")
    }
}

/// Counts `MPT BEGIN (tables = T, calls = C, unfinished = U)` or `METHOD name (calls = C,
/// unfinished = U)` announce, checked against what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Announced {
    calls: u64,
    unfinished: u64,
}

fn parse_counts(text: &str, number: usize, record: &str) -> Result<Announced, TextReadError> {
    let bad = || {
        malformed(
            number,
            format!("{record}: expected '(calls = N, unfinished = N)', found '{text}'"),
        )
    };
    let inner = text
        .strip_prefix("(calls = ")
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or_else(bad)?;
    let (calls, unfinished) = inner.split_once(", unfinished = ").ok_or_else(bad)?;
    Ok(Announced {
        calls: parse_number(calls, number, &format!("{record} calls"))?,
        unfinished: parse_number(unfinished, number, &format!("{record} unfinished"))?,
    })
}

/// Reads the lines of one `MPT BEGIN … END` record.
pub(super) struct MptReader {
    begin: usize,
    /// The date after the header, when the record has one.
    pub(super) date: Option<String>,
    tables: usize,
    total: Announced,
    done: Vec<MptTable>,
    /// The table being read, what its METHOD line announced and that line's number.
    current: Option<(MptTable, Announced, usize)>,
}

impl MptReader {
    pub(super) fn begin(line: &str, number: usize) -> Result<MptReader, TextReadError> {
        let rest = line
            .strip_prefix("MPT BEGIN (tables = ")
            .ok_or_else(|| {
                malformed(
                    number,
                    format!("MPT: expected 'MPT BEGIN (tables = N, calls = N, unfinished = N)', found '{line}'"),
                )
            })?;
        let (tables, counts) = rest
            .split_once(", ")
            .ok_or_else(|| malformed(number, format!("MPT: no ', calls = ' in '{line}'")))?;
        // `unfinished = U)`, then the date when the writer knew it.
        let (counts, date) = match counts.split_once(')') {
            Some((counts, date)) => (format!("{counts})"), date.trim()),
            None => (counts.to_string(), ""),
        };
        Ok(MptReader {
            begin: number,
            date: (!date.is_empty()).then(|| date.to_string()),
            tables: parse_number(tables, number, "MPT tables")?,
            total: parse_counts(&format!("({counts}"), number, "MPT")?,
            done: Vec::new(),
            current: None,
        })
    }

    /// Closes the table being read, checking its rows against its METHOD line.
    fn close_table(&mut self) -> Result<(), TextReadError> {
        let Some((table, announced, number)) = self.current.take() else {
            return Ok(());
        };
        if table.spec.is_empty() {
            return Err(malformed(number, "MPT: METHOD without its SPEC line"));
        }
        let found = Announced {
            calls: table.calls(),
            unfinished: table.unfinished,
        };
        if found.calls != announced.calls {
            return Err(malformed(
                number,
                format!(
                    "MPT: METHOD {} announces {} calls, its rows hold {}",
                    table.method, announced.calls, found.calls
                ),
            ));
        }
        self.done.push(table);
        Ok(())
    }

    pub(super) fn line(&mut self, line: &str, number: usize) -> Result<(), TextReadError> {
        if let Some(rest) = line.strip_prefix("METHOD ") {
            self.close_table()?;
            let (method, counts) = rest
                .rsplit_once(" (calls = ")
                .ok_or_else(|| malformed(number, format!("MPT: no '(calls = ' in '{line}'")))?;
            if method.trim().is_empty() {
                return Err(malformed(number, "MPT: METHOD names no method"));
            }
            let announced = parse_counts(&format!("(calls = {counts}"), number, "MPT METHOD")?;
            let mut table = MptTable::new(method, "");
            table.unfinished = announced.unfinished;
            self.current = Some((table, announced, number));
            return Ok(());
        }
        let Some((table, _, _)) = self.current.as_mut() else {
            return Err(malformed(
                number,
                format!("MPT: '{line}' before any METHOD line"),
            ));
        };
        if let Some(spec) = line.strip_prefix("SPEC ") {
            if !table.spec.is_empty() {
                return Err(malformed(number, "MPT: a second SPEC line for one METHOD"));
            }
            if spec.trim().is_empty() {
                return Err(malformed(number, "MPT: SPEC holds no specification"));
            }
            table.spec = spec.to_string();
            return Ok(());
        }
        if table.spec.is_empty() {
            return Err(malformed(
                number,
                format!("MPT: '{line}' where the SPEC line should be"),
            ));
        }
        if line.starts_with("rank ") {
            return Ok(());
        }
        let row = parse_row(line, number)?;
        if table.rows.iter().any(|other| other.key == row.key) {
            return Err(malformed(
                number,
                format!(
                    "MPT: the value {} {} is listed twice",
                    row.key.value_type.as_str(),
                    format_value(&row.key)
                ),
            ));
        }
        table.rows.push(row);
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<Vec<MptTable>, TextReadError> {
        self.close_table()?;
        let found = Announced {
            calls: self.done.iter().map(MptTable::calls).sum(),
            unfinished: self.done.iter().map(|table| table.unfinished).sum(),
        };
        if self.done.len() != self.tables || found != self.total {
            return Err(malformed(
                self.begin,
                format!(
                    "MPT: the header announces {} tables, {} calls, {} unfinished; the record holds {}, {}, {}",
                    self.tables,
                    self.total.calls,
                    self.total.unfinished,
                    self.done.len(),
                    found.calls,
                    found.unfinished
                ),
            ));
        }
        Ok(self.done)
    }
}

/// `rank calls wall-total wall-mean wall-max cpu-total cpu-mean cpu-max type value`.
fn parse_row(line: &str, number: usize) -> Result<ValueStats, TextReadError> {
    let mut rest = line;
    let mut fields = Vec::with_capacity(9);
    for _ in 0..9 {
        let start = rest.trim_start_matches(' ');
        let end = start.find(' ').unwrap_or(start.len());
        if end == 0 {
            break;
        }
        fields.push(&start[..end]);
        rest = &start[end..];
    }
    const NAMES: [&str; 9] = [
        "rank",
        "calls",
        "wall total",
        "wall mean",
        "wall max",
        "cpu total",
        "cpu mean",
        "cpu max",
        "type",
    ];
    if fields.len() < NAMES.len() {
        return Err(malformed(
            number,
            format!("MPT row: no {} column in '{line}'", NAMES[fields.len()]),
        ));
    }
    let value = rest
        .strip_prefix(' ')
        .map(|value| value.trim_start_matches(' '))
        .filter(|value| !value.is_empty())
        .ok_or_else(|| malformed(number, format!("MPT row: no value column in '{line}'")))?;
    let _rank: u64 = parse_number(fields[0], number, "MPT rank")?;
    let ms = |index: usize| {
        parse_ms(fields[index]).ok_or_else(|| {
            malformed(
                number,
                format!(
                    "MPT row: {} '{}' is not milliseconds",
                    NAMES[index], fields[index]
                ),
            )
        })
    };
    let calls = parse_number(fields[1], number, "MPT calls")?;
    // The means are checked as numbers but not kept: they follow from totals and calls.
    let times = (2..8)
        .map(ms)
        .collect::<Result<Vec<u64>, TextReadError>>()?;
    let value_type = ValueType::parse_value(fields[8])
        .map_err(|problem| malformed(number, format!("MPT row: type {problem}")))?;
    let value = parse_value(value)
        .map_err(|problem| malformed(number, format!("MPT row: value {problem}")))?;
    Ok(ValueStats {
        key: ValueKey { value_type, value },
        calls,
        wall_total_ns: times[0],
        wall_max_ns: times[2],
        cpu_total_ns: times[3],
        cpu_max_ns: times[5],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hprof_text::read;
    use proptest::prelude::*;

    const HEAD: &str = "JAVA PROFILE 1.0.1, created Sun Nov 22 02:18:41 2026\n\n--------\n\n";

    fn written(tables: &[MptTable]) -> String {
        let mut writer = TextWriter::new(Vec::new());
        writer.header("Sun Nov 22 02:18:41 2026").unwrap();
        writer.mpt(tables, None).unwrap();
        String::from_utf8(writer.into_inner()).unwrap()
    }

    fn key(value_type: ValueType, value: &str) -> ValueKey {
        ValueKey::new(value_type, value)
    }

    /// Tables with awkward values; times in whole microseconds, as the record keeps them.
    fn sample_tables() -> Vec<MptTable> {
        let mut work = MptTable::new("example.Slow.work(int)", "Slow.work(int) 1");
        work.record(key(ValueType::Int, "100"), 120_000_000, 2_000_000);
        work.record(key(ValueType::Int, "100"), 80_000_000, 1_000_000);
        work.record(key(ValueType::Int, "1"), 1_000, 1_000);
        work.unfinished = 2;
        let mut get = MptTable::new(
            "java.util.HashMap.get(java.lang.Object)",
            "java.util.HashMap.get(java.lang.Object)java.lang.Object 1 instance_method:toString()String",
        );
        for (value_type, value, wall) in [
            (ValueType::String, "two words", 5_000),
            (ValueType::String, "say \"hi\"", 6_000),
            (ValueType::String, "line\nbreak\tand\\slash", 7_000),
            (ValueType::String, "naïve ☃ 日本", 8_000),
            (ValueType::String, "", 9_000),
            (ValueType::String, "  padded  ", 10_000),
            (ValueType::Class, "java.lang.String (loader 0)", 11_000),
            (ValueType::Error, "NullInCall", 12_000),
            (ValueType::ObjectId, "4711", 13_000),
            (ValueType::Char, "\"", 14_000),
            (ValueType::Char, " ", 15_000),
            (ValueType::String, "bell\u{7}", 16_000),
        ] {
            get.record(key(value_type, value), wall, wall / 2000 * 1000);
        }
        let empty = MptTable {
            unfinished: 1,
            ..MptTable::new("A.never()", "A.never() 0")
        };
        vec![work, get, empty]
    }

    #[test]
    fn the_record_has_its_layout() {
        let mut table = MptTable::new("example.Slow.work(int)", "Slow.work(int) 1");
        table.record(key(ValueType::Int, "1"), 1_000, 1_000);
        table.record(key(ValueType::Int, "100"), 120_000_000, 2_000_000);
        table.record(key(ValueType::Int, "100"), 80_000_400, 1_000_500);
        table.record(key(ValueType::String, "a b"), 1_000, 0);
        table.unfinished = 1;
        let text = written(&[table]);
        let record = &text[text.find("MPT BEGIN").unwrap()..];
        assert_eq!(
            record,
            "MPT BEGIN (tables = 1, calls = 4, unfinished = 1)\n\
             METHOD example.Slow.work(int) (calls = 4, unfinished = 1)\n\
             SPEC Slow.work(int) 1\n\
             rank   calls  wall total ms   wall mean ms    wall max ms   cpu total ms    cpu mean ms     cpu max ms type     value\n   \
             1       2        200.000        100.000        120.000          3.001          1.500          2.000 int      100\n   \
             2       1          0.001          0.001          0.001          0.001          0.001          0.001 int      1\n   \
             3       1          0.001          0.001          0.001          0.000          0.000          0.000 string   \"a b\"\n\
             MPT END\n"
        );
    }

    #[test]
    fn written_tables_read_back_unchanged() {
        let tables = sample_tables();
        let text = written(&tables);
        assert!(
            text.contains("MPT             (openprof)"),
            "the header says what MPT is"
        );
        let profile = read(text.as_bytes()).unwrap();
        let mut expected = tables.clone();
        for table in &mut expected {
            table.rank();
        }
        assert_eq!(profile.mpt, expected);
        // Each row is one line: 3 METHOD, 3 SPEC, 2 column lines, 2 + 12 rows, BEGIN, END.
        let record = &text[text.find("MPT BEGIN").unwrap()..];
        assert_eq!(record.lines().count(), 24, "{record}");
        assert!(record.contains("string   \"line\\nbreak\\tand\\\\slash\"\n"));
        assert!(record.contains("class    java.lang.String (loader 0)\n"));
        assert!(record.contains("error    NullInCall\n"));
        assert!(record.contains("string   \"naïve ☃ 日本\"\n"));
        assert!(record.contains("string   \"bell\\u{7}\"\n"));
    }

    #[test]
    fn the_last_record_is_the_one_kept() {
        let tables = sample_tables();
        let mut text = written(&tables[..1]);
        let mut writer = TextWriter::new(Vec::new());
        writer.mpt(&tables[2..], None).unwrap();
        text.push_str(std::str::from_utf8(&writer.into_inner()).unwrap());
        let profile = read(text.as_bytes()).unwrap();
        assert_eq!(profile.mpt, tables[2..]);
        assert!(profile.skipped_sections.is_empty());
    }

    #[test]
    fn milliseconds_are_exact_to_the_microsecond() {
        assert_eq!(format_ms(0), "0.000");
        assert_eq!(format_ms(499), "0.000");
        assert_eq!(format_ms(500), "0.001");
        assert_eq!(format_ms(1_234_567_890), "1234.568");
        assert_eq!(parse_ms("1234.568"), Some(1_234_568_000));
        assert_eq!(parse_ms("7"), Some(7_000_000));
        assert_eq!(parse_ms("0.000250"), Some(250));
        for bad in ["", ".5", "1.", "1.2.3", "-1.000", "1.0000001", "x"] {
            assert_eq!(
                parse_ms(bad),
                if bad == "1." { Some(1_000_000) } else { None },
                "{bad}"
            );
        }
    }

    fn error_of(record: &str) -> String {
        read(format!("{HEAD}{record}").as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn malformed_records_name_their_line() {
        let method = "METHOD A.f(int) (calls = 1, unfinished = 0)\nSPEC A.f(int) 1\n";
        let begin = "MPT BEGIN (tables = 1, calls = 1, unfinished = 0)\n";
        let row = "   1       1          1.000          1.000          1.000          0.000          0.000          0.000 int      5\n";
        for (record, expected) in [
            (
                "MPT BEGIN (tables = x, calls = 1, unfinished = 0)\nMPT END\n",
                "line 5: MPT tables: 'x' is not a number",
            ),
            (
                "MPT BEGIN\nMPT END\n",
                "line 5: MPT: expected 'MPT BEGIN (tables",
            ),
            (
                &format!("{begin}{method}{row}"),
                "line 5: section not closed by 'MPT END'",
            ),
            (
                &format!("{begin}SPEC A.f(int) 1\n{row}MPT END\n"),
                "line 6: MPT: 'SPEC A.f(int) 1' before any METHOD line",
            ),
            (
                &format!("{begin}METHOD A.f(int)\nSPEC A.f(int) 1\nMPT END\n"),
                "line 6: MPT: no '(calls = '",
            ),
            (
                &format!("{begin}METHOD A.f(int) (calls = 1, unfinished = 0)\n{row}MPT END\n"),
                "line 7: MPT: '   1 ",
            ),
            (
                &format!("{begin}{method}SPEC again\n{row}MPT END\n"),
                "line 8: MPT: a second SPEC line",
            ),
            (
                &format!("{begin}{method}   1       1          1.000\nMPT END\n"),
                "line 8: MPT row: no wall mean column",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("1.000  ", "1,000  ")
                ),
                "line 8: MPT row: wall total '1,000' is not milliseconds",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("int   ", "integer")
                ),
                "line 8: MPT row: type 'integer' is not one of",
            ),
            (
                &format!("{begin}{method}{}MPT END\n", row.replace(" 5\n", "\n")),
                "line 8: MPT row: no value column",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("int      5", "string   \"open")
                ),
                "line 8: MPT row: value the quoted value is not closed",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("int      5", "string   \"a\\qb\"")
                ),
                "line 8: MPT row: value unknown escape '\\q'",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("int      5", "string   \"a\" b")
                ),
                "line 8: MPT row: value text after the closing quote",
            ),
            (
                &format!(
                    "{begin}{method}{}MPT END\n",
                    row.replace("int      5", "string   \"\\u{d800}\"")
                ),
                "line 8: MPT row: value \\u{d800} is not a character",
            ),
            (
                &format!("{begin}{method}{row}{row}MPT END\n"),
                "line 9: MPT: the value int 5 is listed twice",
            ),
            (
                &format!(
                    "{begin}{}{row}MPT END\n",
                    method.replace("calls = 1", "calls = 3")
                ),
                "line 6: MPT: METHOD A.f(int) announces 3 calls, its rows hold 1",
            ),
            (
                &format!(
                    "{}{method}{row}MPT END\n",
                    begin.replace("tables = 1", "tables = 2")
                ),
                "line 5: MPT: the header announces 2 tables",
            ),
            (
                &format!("{begin}METHOD A.f(int) (calls = 0, unfinished = 0)\nMPT END\n"),
                "line 6: MPT: METHOD without its SPEC line",
            ),
        ] {
            let error = error_of(record);
            assert!(
                error.starts_with(expected),
                "{record}\ngives: {error}\nexpected: {expected}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_value_stays_on_one_line_and_reads_back(value in any::<String>(), string in any::<bool>()) {
            let value_type = if string { ValueType::String } else { ValueType::Class };
            let shown = format_value(&ValueKey::new(value_type, value.clone()));
            prop_assert!(!shown.contains('\n') && !shown.contains('\r'));
            prop_assert_eq!(parse_value(&shown).unwrap(), value.clone());
            let mut table = MptTable::new("A.f(java.lang.Object)", "A.f(Object) 1");
            table.record(ValueKey::new(value_type, value), 1_000, 0);
            let profile = read(written(std::slice::from_ref(&table)).as_bytes()).unwrap();
            prop_assert_eq!(profile.mpt, vec![table]);
        }
    }
}
