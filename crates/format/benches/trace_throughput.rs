//! Trace writer and reader throughput on one core, over a recorded trace.
//!
//! `cargo bench -p openprof-format --bench trace_throughput -- TRACE.xml` (bench/trace_bench.py
//! records one with the agent first). Reads the file, then times reading it and writing its
//! elements back, five rounds each, and prints elements/s and MB/s. The writer writes into one
//! buffer reused from round to round, as a file's pages are: a fresh buffer the size of the
//! trace would time the kernel's first touch of every page (about as long as the writing).

use std::time::Instant;

use openprof_format::trace::reader::read_all;
use openprof_format::trace::writer::TraceWriter;
use openprof_format::trace::TraceElement;

fn main() {
    let Some(path) = std::env::args().skip(1).find(|arg| !arg.starts_with("--")) else {
        eprintln!("usage: cargo bench -p openprof-format --bench trace_throughput -- TRACE.xml");
        return;
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let elements: Vec<TraceElement> = read_all(bytes.as_slice())
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let megabytes = bytes.len() as f64 / 1e6;
    println!(
        "trace: {path}: {} elements, {megabytes:.1} MB",
        elements.len()
    );

    let mut read_rates = Vec::new();
    let mut write_rates = Vec::new();
    // Touched once here, so that no round pays for it.
    let mut sink = vec![b' '; bytes.len() + (1 << 20)];
    sink.clear();
    for _ in 0..5 {
        let started = Instant::now();
        let count = read_all(bytes.as_slice()).filter(Result::is_ok).count();
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(count, elements.len());
        read_rates.push((count as f64 / seconds, megabytes / seconds));

        sink.clear();
        let started = Instant::now();
        let mut writer = TraceWriter::document(std::mem::take(&mut sink));
        for element in &elements {
            writer.write(element).unwrap();
        }
        sink = writer.finish().unwrap();
        let seconds = started.elapsed().as_secs_f64();
        write_rates.push((
            elements.len() as f64 / seconds,
            sink.len() as f64 / 1e6 / seconds,
        ));
    }
    let median = |rates: &mut Vec<(f64, f64)>| {
        rates.sort_by(|a, b| a.0.total_cmp(&b.0));
        rates[rates.len() / 2]
    };
    let (read, read_mb) = median(&mut read_rates);
    let (write, write_mb) = median(&mut write_rates);
    println!(
        "read:  {:.2} M elements/s, {read_mb:.0} MB/s (median of 5)",
        read / 1e6
    );
    println!(
        "write: {:.2} M elements/s, {write_mb:.0} MB/s (median of 5)",
        write / 1e6
    );
}
