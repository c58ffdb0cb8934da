//! `openprof mpt FILE`: method parameter tracing's report. Per traced method and specification,
//! the values its calls recorded, slowest mean wall time first, from an HPROF text profile's
//! MPT record or from a trace (format=x), whose traced calls it pairs and times itself.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use openprof_analysis::{mpt_from_trace, MptTraceError};
use openprof_format::hprof_text::mpt::{format_ms, format_value};
use openprof_format::mpt_stats::MptTable;
use openprof_format::trace::reader::read_all;

#[derive(Args)]
pub struct MptArgs {
    /// An HPROF text profile (format=a) with an MPT record, or a trace (format=x: a TRACE
    /// document or a stream of fragments, as the agent or `openprof export` writes it).
    pub file: PathBuf,
    /// How many values to print per method and specification (the slowest).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
}

/// Where the figures came from, for the report's first line.
enum Source {
    Trace,
    Profile,
}

pub fn mpt(args: MptArgs) -> Result<ExitCode> {
    let (tables, source) = read_tables(&args.file)?;
    if tables.is_empty() {
        bail!(
            "{} has no method parameter tracing data: run the agent with mpt=@SPECS",
            args.file.display()
        );
    }
    print!("{}", render(&args.file, &tables, &source, args.top));
    Ok(ExitCode::SUCCESS)
}

/// A trace is XML: its first character (after a byte order mark and white space) is `<`.
/// Anything else is read as a profile, HPROF text or binary.
fn read_tables(file: &Path) -> Result<(Vec<MptTable>, Source)> {
    let input = fs::File::open(file).with_context(|| format!("can't read {}", file.display()))?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let start = input
        .fill_buf()
        .with_context(|| format!("can't read {}", file.display()))?;
    // A byte order mark is no markup: the trace reader would see text outside any element.
    let bom = if start.starts_with(b"\xef\xbb\xbf") {
        3
    } else {
        0
    };
    let is_xml = start[bom..]
        .iter()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|&byte| byte == b'<');
    if !is_xml {
        let profile = crate::report::read_profile(file)?;
        return Ok((profile.mpt, Source::Profile));
    }
    input.consume(bom);
    match mpt_from_trace(read_all(input)) {
        Ok(tables) => Ok((tables, Source::Trace)),
        Err(MptTraceError::Read(mut error)) => {
            error.offset += bom as u64;
            let line = line_of(file, error.offset)
                .map(|line| format!("line {line}, "))
                .unwrap_or_default();
            bail!(
                "{} is not a readable trace: {line}byte {}: {}",
                file.display(),
                error.offset,
                error.message
            )
        }
        Err(error) => bail!("{}: {error}", file.display()),
    }
}

/// The line (from 1) that holds a byte offset of the file.
fn line_of(file: &Path, offset: u64) -> Option<usize> {
    let mut bytes = Vec::new();
    fs::File::open(file)
        .ok()?
        .take(offset)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(1 + bytes.iter().filter(|&&byte| byte == b'\n').count())
}

fn render(file: &Path, tables: &[MptTable], source: &Source, top: usize) -> String {
    let mut out = String::new();
    let calls: u64 = tables.iter().map(MptTable::calls).sum();
    let unfinished: u64 = tables.iter().map(|table| table.unfinished).sum();
    let source = match source {
        Source::Trace => "trace",
        Source::Profile => "profile",
    };
    let _ = writeln!(
        out,
        "openprof: {} ({source}): method parameter tracing, {} method/spec tables, {calls} calls, \
         {unfinished} unfinished",
        file.display(),
        tables.len()
    );
    out.push_str(&render_tables(tables, top));
    out
}

/// The tables, each with its `top` slowest values (also part of `openprof report` and run).
pub fn render_tables(tables: &[MptTable], top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "times in ms; values ranked by mean wall time, slowest first"
    );
    for table in tables {
        let _ = writeln!(out, "\n{}", table.method);
        let _ = writeln!(out, "  spec {}", table.spec);
        let _ = writeln!(
            out,
            "  {} calls, {} values, {} unfinished",
            table.calls(),
            table.rows.len(),
            table.unfinished
        );
        let ranked = table.ranked();
        if ranked.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "   rank     calls   wall total    wall mean     wall max    cpu total     cpu mean      cpu max  value"
        );
        for (rank, row) in ranked.iter().take(top).enumerate() {
            let _ = writeln!(
                out,
                "  {:5} {:9} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}  {} {}",
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
            );
        }
        if ranked.len() > top {
            let _ = writeln!(
                out,
                "  ... and {} faster values (--top {} shows them)",
                ranked.len() - top,
                ranked.len()
            );
        }
    }
    out
}
