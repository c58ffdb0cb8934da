//! `openprof report`, and the report `openprof run` prints: a profile (HPROF text or binary) read
//! with a progress bar on large files, and rendered as text: top methods and their traces, the
//! heap histogram, allocation sites, method parameter tracing's figures.

use std::fs;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use openprof_analysis::{
    summarize, summarize_cpu, summarize_sites, top_classes, CpuSummary, HeapHistogram, ShallowSizes,
};
use openprof_format::hprof_binary;
use openprof_format::hprof_text::{self, SitesOrder, TextProfile};
use openprof_format::hprof_text::{CpuTableKind, LockTable, LockTableKind};

use crate::mpt_command;

/// Prints what the profile in `file` holds.
pub fn report(file: &Path, shown: &Shown) -> Result<ExitCode> {
    let profile = read_profile(file)?;
    print!("{}", render(file, &profile, shown));
    Ok(ExitCode::SUCCESS)
}

/// Prints one event of any input openprof reads, after the view options: the hottest methods by
/// self and total weight, and with `tree` the call tree (`depth` levels at most).
pub fn report_view(
    file: &Path,
    view: &crate::convert_command::ViewArgs,
    top: usize,
    tree: Option<usize>,
) -> Result<ExitCode> {
    use openprof_analysis::views::{self, tree as call_tree};
    if view.format.is_some() {
        anyhow::bail!("report prints text: --format is for `openprof convert`");
    }
    let options = crate::convert_command::view_options(view)?;
    let profile = crate::convert_command::read_input(file)?;
    crate::convert_command::check_event(&profile, &options)?;
    let folded = views::fold(&profile, &options);
    let Some(event) = folded.event else {
        println!("openprof: {} holds no samples", file.display());
        return Ok(ExitCode::SUCCESS);
    };
    let unit = if options.total {
        event.unit().name()
    } else {
        "samples"
    };
    println!(
        "openprof: {}, {}: {} {unit} in {} distinct stacks",
        file.display(),
        event.name(),
        folded.total,
        folded.stacks.len()
    );
    let share = |weight: u64| 100.0 * weight as f64 / folded.total.max(1) as f64;
    println!(
        "
 rank   self  total  {:>12}  {:>12}  method",
        "self", "total"
    );
    for (rank, method) in call_tree::top_methods(&folded).iter().take(top).enumerate() {
        println!(
            "{:5} {:5.2}% {:5.2}%  {:12}  {:12}  {}",
            rank + 1,
            share(method.self_weight),
            share(method.total),
            method.self_weight,
            method.total,
            method.name
        );
    }
    if let Some(depth) = tree {
        println!(
            "
Call tree ({} levels at most):",
            depth
        );
        let mut out = std::io::stdout().lock();
        call_tree::write_text(&folded, depth, options.min_width_percent, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// cpu=times: CPU milliseconds and true entry counts per method, the traces behind them.
fn render_times(
    out: &mut String,
    profile: &TextProfile,
    summary: &CpuSummary,
    top: usize,
    traces: usize,
) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "{:.1} ms of CPU in timed methods, in {} dump(s) (cpu=times: true entry counts)",
        summary.total_samples as f64 / 1000.0,
        summary.dumps
    );
    let percent = |cost: u64| 100.0 * cost as f64 / summary.total_samples.max(1) as f64;
    let _ = writeln!(out, "\n rank   self   self ms    entries  method");
    let shown: Vec<_> = summary
        .methods
        .iter()
        .filter(|s| s.self_samples > 0)
        .take(top)
        .collect();
    for (rank, stat) in shown.iter().enumerate() {
        let entries: u64 = stat
            .traces
            .iter()
            .map(|trace| summary.entries.get(&trace.serial).copied().unwrap_or(0))
            .sum();
        let _ = writeln!(
            out,
            "{:5} {:5.1}% {:9.1} {:10}  {}",
            rank + 1,
            percent(stat.self_samples),
            stat.self_samples as f64 / 1000.0,
            entries,
            stat.method
        );
    }
    if traces > 0 {
        let _ = writeln!(out, "\nTraces behind the top methods:");
        for stat in shown {
            let _ = writeln!(out, "{}", stat.method);
            for trace in stat.traces.iter().take(traces) {
                let entries = summary.entries.get(&trace.serial).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "  {:9.1} ms {entries:8} entries  TRACE {}",
                    trace.cost as f64 / 1000.0,
                    trace.serial
                );
                write_frames(out, profile, trace.serial);
            }
        }
    }
}

/// The frames of a trace, indented under the line that names it.
fn write_frames(out: &mut String, profile: &TextProfile, serial: u32) {
    use std::fmt::Write;
    let frames = profile.traces.get(&serial).map(|t| t.frames.as_slice());
    for frame in frames.unwrap_or_default() {
        let _ = writeln!(out, "                    {frame}");
    }
}

/// Files this large get a progress bar while they are read (on a terminal).
const PROGRESS_BAR_BYTES: u64 = 64 << 20;

/// HPROF binary begins with its format name and a NUL byte; HPROF text's first line has the
/// same name followed by ", created <date>", and no NUL.
fn is_hprof_binary(start: &[u8]) -> bool {
    start.starts_with(b"JAVA PROFILE ") && start.iter().take(64).any(|&byte| byte == 0)
}

/// A bar of a file's bytes read, drawn on standard error for large files when it is a terminal;
/// hidden otherwise.
pub(crate) fn progress_bar(file_bytes: u64) -> ProgressBar {
    if file_bytes < PROGRESS_BAR_BYTES || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(file_bytes), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "reading {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Whether a file starts as HPROF (text or binary) does; a file that can't be read counts as
/// HPROF, so that the HPROF report says why.
pub fn is_hprof(file: &Path) -> bool {
    let mut start = [0u8; 64];
    let read = fs::File::open(file).and_then(|mut input| {
        use std::io::Read;
        input.read(&mut start)
    });
    match read {
        Ok(count) => openprof_analysis::inputs::sniff(&start[..count]).is_none_or(|kind| {
            matches!(
                kind,
                openprof_analysis::inputs::InputKind::HprofText
                    | openprof_analysis::inputs::InputKind::HprofBinary
            )
        }),
        Err(_) => true,
    }
}

/// Reads a profile in HPROF text or binary, streaming: heap dumps are summed as they are read.
pub fn read_profile(file: &Path) -> Result<TextProfile> {
    let input = fs::File::open(file).with_context(|| format!("can't read {}", file.display()))?;
    let file_bytes = input.metadata().map(|meta| meta.len()).unwrap_or(0);
    let mut input = BufReader::with_capacity(1 << 20, input);
    let binary = is_hprof_binary(
        input
            .fill_buf()
            .with_context(|| format!("can't read {}", file.display()))?,
    );
    let bar = progress_bar(file_bytes);
    let mut progress = |bytes: u64| bar.set_position(bytes);
    let profile = if binary {
        hprof_binary::read_profile(input, &mut progress)
            .with_context(|| format!("{} is not a readable HPROF binary profile", file.display()))
    } else {
        hprof_text::read_with_progress(input, &mut progress)
            .with_context(|| format!("{} is not an HPROF text profile", file.display()))
    };
    bar.finish_and_clear();
    profile
}

/// How much of a profile to print.
pub struct Shown {
    /// Allocation sites ranked by live bytes or by allocated bytes; `None`: as the table is.
    pub sites_by: Option<SitesOrder>,
    /// Methods, classes, allocation sites.
    pub top: usize,
    /// Traces under each method.
    pub traces: usize,
    /// Frames under each allocation site.
    pub frames: usize,
}

/// lock=: the time and the waits of each kind of lock table, summed over the dumps; the stacks
/// are the `lock` and `lock_owner` events' (`--event`).
fn render_locks(out: &mut String, profile: &TextProfile) {
    use std::fmt::Write;
    if profile.lock_tables.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nLock waits (`--event lock` and `--event lock_owner` show their stacks):"
    );
    for kind in LockTableKind::ALL {
        let tables: Vec<&LockTable> = profile.lock_tables_of(kind).collect();
        if tables.is_empty() {
            continue;
        }
        let milliseconds: u64 = tables.iter().map(|table| table.total_ms).sum();
        let waits: u64 = tables
            .iter()
            .flat_map(|table| &table.rows)
            .map(|row| row.count)
            .sum();
        let what = match kind {
            LockTableKind::Monitor => "blocked entering monitors (MONITOR TIME)",
            LockTableKind::Park => "parked (PARK TIME)",
            LockTableKind::Owners => "waited on locks whose owner was seen (LOCK OWNERS)",
        };
        let _ = writeln!(out, "  {milliseconds} ms in {waits} waits {what}");
    }
}

/// A heap dump: totals, roots, the classes with the most shallow bytes.
fn render_heap(out: &mut String, profile: &TextProfile, histogram: &HeapHistogram, top: usize) {
    use std::fmt::Write;
    let total = histogram.total();
    let when = if histogram.date.is_empty() {
        String::new()
    } else {
        format!(" ({})", histogram.date)
    };
    let _ = writeln!(
        out,
        "\nHeap dump {} of {}{when}: {} objects, {} bytes in {} classes",
        profile.heap_dumps.len(),
        profile.heap_dumps.len(),
        total.instances,
        total.bytes,
        histogram.class_count()
    );
    let _ = writeln!(
        out,
        "{}",
        match histogram.sizes {
            ShallowSizes::Recorded => "shallow sizes as the dump records them",
            ShallowSizes::Estimated =>
                "shallow sizes estimated for 64-bit HotSpot with compressed oops (the dump has none)",
        }
    );
    if let Some(announced) = histogram.announced.filter(|announced| *announced != total) {
        let _ = writeln!(
            out,
            "the dump's header announces {} objects, {} bytes",
            announced.instances, announced.bytes
        );
    }
    if histogram.root_total() > 0 {
        let kinds: Vec<String> = histogram
            .roots()
            .iter()
            .map(|(kind, count)| {
                let name = kind
                    .hprof_text()
                    .trim_start_matches('<')
                    .trim_end_matches('>');
                format!("{name} {count}")
            })
            .collect();
        let _ = writeln!(
            out,
            "GC roots: {} ({})",
            histogram.root_total(),
            kinds.join(", ")
        );
    }
    let _ = writeln!(out, "\n rank    instances          bytes      %  class");
    for class in top_classes(histogram, top) {
        let _ = writeln!(
            out,
            "{:5} {:12} {:14} {:5.1}%  {}",
            class.rank, class.instances, class.bytes, class.percent, class.class_name
        );
    }
}

/// The top allocation sites and the frames of their traces.
fn render_sites(out: &mut String, profile: &TextProfile, shown: &Shown) {
    use std::fmt::Write;
    let Some(summary) = summarize_sites(profile, shown.top, shown.sites_by) else {
        return;
    };
    let order = match summary.ordered_by {
        SitesOrder::LiveBytes => "live bytes",
        SitesOrder::AllocatedBytes => "allocated bytes",
    };
    let when = if summary.date.is_empty() {
        String::new()
    } else {
        format!(", {}", summary.date)
    };
    let _ = writeln!(
        out,
        "\nAllocation sites (SITES table {} of {}, ordered by {order}{when}): {} sites listed, \
         {} live bytes in {} objects",
        summary.tables,
        summary.tables,
        summary.rows,
        summary.listed.live_bytes,
        summary.listed.live_objects
    );
    if let Some(totals) = summary.totals {
        let _ = writeln!(
            out,
            "all sites: {} live bytes in {} objects; {} bytes in {} objects allocated",
            totals.live_bytes,
            totals.live_objects,
            totals.allocated_bytes,
            totals.allocated_objects
        );
    }
    let _ = writeln!(
        out,
        "\n rank   self  accum  live bytes  live objs  alloc'd bytes  alloc'd objs   trace  class"
    );
    for stat in &summary.top {
        let (row, site) = (&stat.row, &stat.row.site);
        let _ = writeln!(
            out,
            "{:5} {:5.2}% {:5.2}% {:11} {:10} {:14} {:13} {:7}  {}",
            row.rank,
            row.self_percent,
            row.accum_percent,
            site.live_bytes,
            site.live_objects,
            site.allocated_bytes,
            site.allocated_objects,
            site.trace,
            site.class_name
        );
        for frame in stat.frames.iter().take(shown.frames) {
            let _ = writeln!(out, "                    {frame}");
        }
    }
}

pub fn render(file: &Path, profile: &TextProfile, shown: &Shown) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "openprof: {}", file.display());
    let summary: CpuSummary = summarize_cpu(profile);
    let times = summarize(profile, CpuTableKind::Time);
    if summary.dumps > 0 {
        render_samples(&mut out, profile, &summary, shown);
    } else if times.dumps > 0 {
        render_times(&mut out, profile, &times, shown.top, shown.traces);
    }
    if let Some(histogram) = profile.last_heap_dump() {
        render_heap(&mut out, profile, histogram, shown.top);
    }
    render_sites(&mut out, profile, shown);
    render_locks(&mut out, profile);
    if !profile.mpt.is_empty() {
        let _ = writeln!(
            out,
            "\nmethod parameter tracing (`openprof mpt` shows more):"
        );
        out.push_str(&mpt_command::render_tables(&profile.mpt, shown.top));
    }
    if summary.dumps == 0
        && times.dumps == 0
        && profile.heap_dumps.is_empty()
        && profile.sites.is_empty()
        && profile.mpt.is_empty()
        && profile.lock_tables.is_empty()
    {
        let _ = writeln!(
            out,
            "no CPU samples, CPU times, heap dump, allocation sites, lock waits or parameter \
             values in this profile"
        );
    }
    out
}

/// cpu=samples: samples per method, the traces behind them.
fn render_samples(out: &mut String, profile: &TextProfile, summary: &CpuSummary, shown: &Shown) {
    use std::fmt::Write;
    let (top, traces) = (shown.top, shown.traces);
    let samplers: Vec<&str> = summary.samplers.iter().map(String::as_str).collect();
    let _ = writeln!(
        out,
        "{} CPU samples in {} dump(s), sampled with {}; {} walks failed, {} samples dropped",
        summary.total_samples,
        summary.dumps,
        if samplers.is_empty() {
            "an unknown sampler".to_string()
        } else {
            samplers.join(", ")
        },
        summary.failed_walks,
        summary.dropped
    );
    for note in &summary.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if !summary.cost_us.is_empty() {
        let total: u64 = summary.cost_us.values().sum();
        let parts: Vec<String> = summary
            .cost_us
            .iter()
            .map(|(part, micros)| format!("{part} {:.1}", *micros as f64 / 1000.0))
            .collect();
        let _ = writeln!(
            out,
            "profiling cost {:.1} ms of CPU ({} ms)",
            total as f64 / 1000.0,
            parts.join(", ")
        );
    }
    if summary.listed_samples < summary.total_samples {
        let _ = writeln!(
            out,
            "{} samples fell below the profile's cutoff and are not listed",
            summary.total_samples - summary.listed_samples
        );
    }
    let percent = |count: u64| 100.0 * count as f64 / summary.total_samples.max(1) as f64;
    let _ = writeln!(out, "\n rank   self  total   samples  method");
    for (rank, stat) in summary
        .methods
        .iter()
        .filter(|s| s.self_samples > 0)
        .take(top)
        .enumerate()
    {
        let _ = writeln!(
            out,
            "{:5} {:5.1}% {:5.1}% {:9}  {}",
            rank + 1,
            percent(stat.self_samples),
            percent(stat.total_samples),
            stat.self_samples,
            stat.method
        );
    }
    if traces > 0 {
        let _ = writeln!(out, "\nTraces behind the top methods:");
        for stat in summary
            .methods
            .iter()
            .filter(|s| s.self_samples > 0)
            .take(top)
        {
            let _ = writeln!(out, "{}", stat.method);
            for trace in stat.traces.iter().take(traces) {
                let _ = writeln!(out, "  {:7} samples  TRACE {}", trace.cost, trace.serial);
                write_frames(out, profile, trace.serial);
            }
        }
    }
}
