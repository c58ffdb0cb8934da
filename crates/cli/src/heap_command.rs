//! `openprof heap`: a heap dump's retained sizes, dominator tree, leak suspects, paths to GC
//! roots, unreachable objects and its difference from another dump, as text, JSON or an HTML
//! page (docs/heap.md).

use std::fmt::Write as _;
use std::fs;
use std::io::{BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use openprof_analysis::heap::{
    html, Elision, GraphError, GraphOptions, HeapAnalysis, HeapGraph, HeapReport, ObjectRef,
    PathReport, Progress, ReportOptions, Target, DEFAULT_CONCENTRATION, DEFAULT_THRESHOLD,
};
use openprof_format::private_file::{create_private, AtALink};

#[derive(Args)]
pub struct HeapArgs {
    /// An HPROF binary heap dump (openprof's heap=dump,format=b, `jcmd PID GC.heap_dump`,
    /// -XX:+HeapDumpOnOutOfMemoryError).
    file: PathBuf,
    /// Classes in the histogram by retained size.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// List the largest objects at the top of the dominator tree (20 unless N is given).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "20")]
    dominators: Option<usize>,
    /// List the leak suspects: what retains --threshold of the heap or more, with the
    /// accumulation point and the path from a GC root to it.
    #[arg(long)]
    suspects: bool,
    /// The shortest path from a GC root to an object (its id: 0x7f3a10 or decimal) or to the
    /// instance of a class that retains most (its name: java.util.HashMap, Keep$Node[]).
    #[arg(long, value_name = "OBJECT_ID|CLASS")]
    path_to_roots: Option<String>,
    /// Paths do not go from a java.lang.ref.Reference to its referent (weak, soft, phantom
    /// and final references).
    #[arg(long)]
    exclude_weak: bool,
    /// Compare the class histogram with another dump's (this one's figures less the other's).
    #[arg(long, value_name = "OTHER")]
    diff: Option<PathBuf>,
    /// The report as JSON on standard output.
    #[arg(long)]
    json: bool,
    /// Also write the report as an HTML page (the dominator tree, the histogram, the suspects).
    #[arg(short = 'o', long = "output", value_name = "REPORT.html")]
    output: Option<PathBuf>,
    /// The share of the reachable bytes a leak suspect retains at least, in percent.
    #[arg(long, value_name = "PERCENT", default_value_t = DEFAULT_THRESHOLD * 100.0)]
    threshold: f64,
    /// The references read may take this many bytes of memory (K, M, G suffixes) before they
    /// go to a temporary file.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    memory_limit: Option<u64>,
    /// Where temporary files go (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    spill_dir: Option<PathBuf>,
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (a number, with K, M or G)"))?;
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        other => return Err(format!("'{other}' is not a size unit (K, M or G)")),
    };
    Ok(value * scale)
}

/// Files this large get a progress bar (on a terminal).
const PROGRESS_BAR_BYTES: u64 = 64 << 20;

struct Bar {
    bar: ProgressBar,
}

impl Bar {
    fn new(file_bytes: u64) -> Bar {
        if file_bytes < PROGRESS_BAR_BYTES || !std::io::stderr().is_terminal() {
            return Bar {
                bar: ProgressBar::hidden(),
            };
        }
        let bar = ProgressBar::with_draw_target(Some(file_bytes), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{msg:22} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        ) {
            bar.set_style(style);
        }
        bar.set_message("reading");
        Bar { bar }
    }

    fn update(&self, progress: Progress) {
        match progress {
            Progress::Reading(bytes) => self.bar.set_position(bytes),
            Progress::Step(step) => {
                if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
                    self.bar.set_style(style);
                }
                self.bar.set_message(step);
                self.bar.tick();
            }
        }
    }
}

fn read_error(file: &Path, error: GraphError) -> anyhow::Error {
    match error {
        GraphError::Hprof(error) => {
            anyhow::anyhow!(
                "{} is not a readable HPROF heap dump: {error}",
                file.display()
            )
        }
        other => anyhow::anyhow!("{}: {other}", file.display()),
    }
}

pub fn heap(args: HeapArgs) -> Result<ExitCode> {
    let file_bytes = fs::metadata(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?
        .len();
    if !(0.0..=100.0).contains(&args.threshold) {
        bail!("--threshold is a percentage, 0 to 100");
    }
    let bar = Bar::new(file_bytes);
    let started = std::time::Instant::now();
    let timings = std::env::var_os("OPENPROF_HEAP_TIMINGS").is_some();
    let mut progress = |step: Progress| {
        if timings {
            if let Progress::Step(name) = step {
                let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                let memory: Vec<&str> = status
                    .lines()
                    .filter(|line| line.starts_with("VmHWM") || line.starts_with("VmRSS"))
                    .collect();
                eprintln!(
                    "{:>8.2} s {name} {}",
                    started.elapsed().as_secs_f64(),
                    memory.join(" ")
                );
            }
        }
        bar.update(step)
    };
    let options = GraphOptions {
        memory_limit: args.memory_limit,
        spill_dir: args.spill_dir.clone(),
    };
    let graph = HeapGraph::read(&args.file, &options, &mut progress)
        .map_err(|error| read_error(&args.file, error))?;
    let analysis =
        HeapAnalysis::new(graph, &mut progress).map_err(|error| read_error(&args.file, error))?;
    let other = match &args.diff {
        Some(path) => {
            let input =
                fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
            let profile =
                openprof_format::hprof_binary::read_profile(BufReader::new(input), &mut |_| {})
                    .map_err(|error| {
                        anyhow::anyhow!(
                            "{} is not a readable HPROF heap dump: {error}",
                            path.display()
                        )
                    })?;
            let Some(histogram) = profile.heap_dumps.last().cloned() else {
                bail!("{} holds no heap dump", path.display());
            };
            Some((path.display().to_string(), histogram))
        }
        None => None,
    };
    let report_options = ReportOptions {
        top: args.top,
        dominators: args.dominators.unwrap_or(20),
        threshold: args.threshold / 100.0,
        concentration: DEFAULT_CONCENTRATION,
        path: args.path_to_roots.as_deref().map(Target::parse),
        exclude_weak: args.exclude_weak,
        tree_nodes: if args.output.is_some() { 5000 } else { 0 },
        all_classes: args.output.is_some(),
    };
    let report = analysis
        .report(
            &report_options,
            other
                .as_ref()
                .map(|(name, histogram)| (name.as_str(), histogram)),
            &mut progress,
        )
        .map_err(|error| match error {
            GraphError::Limit(message) => anyhow::anyhow!("{message}"),
            other => read_error(&args.file, other),
        })?;
    bar.bar.finish_and_clear();
    if let Some(output) = &args.output {
        let mut out = std::io::BufWriter::new(
            // The report shows the heap's contents: private, never through a link.
            create_private(output, AtALink::Refuse)
                .map_err(|error| anyhow::anyhow!("writing {}: it {error}", output.display()))?,
        );
        html::write(&report, &mut out)
            .and_then(|()| out.flush())
            .with_context(|| format!("writing {}", output.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
        return Ok(ExitCode::SUCCESS);
    }
    let everything = args.dominators.is_none()
        && !args.suspects
        && args.path_to_roots.is_none()
        && args.diff.is_none();
    let text = render(
        &report,
        &Sections {
            dominators: args.dominators.is_some(),
            suspects: args.suspects || everything,
            unreachable: everything,
        },
    );
    stdout.write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

struct Sections {
    dominators: bool,
    suspects: bool,
    unreachable: bool,
}

fn object(o: &ObjectRef) -> String {
    format!("{} @ {}", o.class, o.id)
}

/// The line standing for a chain's links left out, before the link at `index`.
fn elision_line(out: &mut String, elided: Option<Elision>, index: usize, indent: &str) {
    if let Some(elision) = elided.filter(|elision| elision.after == index) {
        let _ = writeln!(out, "{indent}... {} links left out ...", elision.links);
    }
}

fn render_path(out: &mut String, path: &PathReport, indent: &str) {
    if path.steps.is_empty() {
        let _ = writeln!(
            out,
            "{indent}no GC root reaches {}{}",
            object(&path.target),
            if path.exclude_weak {
                " except through a weak, soft, phantom or final reference"
            } else {
                ""
            }
        );
        return;
    }
    let _ = writeln!(
        out,
        "{indent}from a GC root ({}){}:",
        path.root_kinds.join(", "),
        if path.exclude_weak {
            ", not through references' referents"
        } else {
            ""
        }
    );
    for (index, step) in path.steps.iter().enumerate() {
        elision_line(out, path.elided, index, &format!("{indent}  "));
        let _ = writeln!(
            out,
            "{indent}  {}{}",
            object(&step.object),
            step.via
                .as_ref()
                .map(|via| format!("  .{via}"))
                .unwrap_or_default()
        );
    }
}

fn render(report: &HeapReport, sections: &Sections) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Heap dump {} ({}, {}-byte ids)",
        report.file, report.format, report.id_size
    );
    let _ = writeln!(
        out,
        "objects {} ({} bytes), reachable {} ({} bytes), unreachable {} ({} bytes), class objects {}",
        report.objects.objects,
        report.objects.bytes,
        report.reachable.objects,
        report.reachable.bytes,
        report.unreachable.objects,
        report.unreachable.bytes,
        report.class_objects.objects
    );
    let roots: Vec<String> = report
        .roots
        .iter()
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect();
    let _ = writeln!(out, "GC roots: {}", roots.join(", "));
    let _ = writeln!(out, "Shallow sizes: {}", report.sizes);
    if report.dangling_references > 0 || report.dangling_roots > 0 {
        let _ = writeln!(
            out,
            "References to objects not in the dump: {} (roots: {})",
            report.dangling_references, report.dangling_roots
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Classes by retained size (top {})",
        report.histogram.len()
    );
    let _ = writeln!(
        out,
        "{:>14} {:>14} {:>11} {:>14}  class",
        "retained", "dominated", "objects", "shallow"
    );
    for row in &report.histogram {
        let _ = writeln!(
            out,
            "{:>14} {:>14} {:>11} {:>14}  {}",
            row.retained.unwrap_or(row.dominated),
            row.dominated,
            row.objects,
            row.shallow,
            row.class
        );
    }
    if sections.dominators {
        let _ = writeln!(out);
        let _ = writeln!(out, "Top of the dominator tree");
        let _ = writeln!(
            out,
            "{:>14} {:>8} {:>12}  object",
            "retained", "share", "shallow"
        );
        for o in &report.dominators {
            let retained = o.retained.unwrap_or(0);
            let _ = writeln!(
                out,
                "{:>14} {:>7.2}% {:>12}  {}",
                retained,
                100.0 * retained as f64 / report.reachable.bytes.max(1) as f64,
                o.shallow,
                object(o)
            );
        }
    }
    if sections.suspects {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Leak suspects (retaining {}% of {} reachable bytes or more)",
            report.threshold * 100.0,
            report.reachable.bytes
        );
        if report.suspects.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for (index, suspect) in report.suspects.iter().enumerate() {
            let what = match suspect.kind {
                "object" => object(&suspect.object),
                _ => format!("{} instances of {}", suspect.instances, suspect.class),
            };
            let _ = writeln!(
                out,
                "{:>3}. {what} retains {} bytes ({:.2}%)",
                index + 1,
                suspect.retained,
                suspect.share * 100.0
            );
            if let Some(point) = suspect.accumulation.last() {
                let _ = writeln!(
                    out,
                    "     accumulation point: {} retaining {} bytes; dominator path:",
                    object(point),
                    point.retained.unwrap_or(0)
                );
                for (index, step) in suspect.accumulation.iter().enumerate() {
                    elision_line(
                        &mut out,
                        suspect.accumulation_elided,
                        index,
                        &format!("       {:>14}  ", ""),
                    );
                    let _ = writeln!(
                        out,
                        "       {:>14}  {}",
                        step.retained.unwrap_or(0),
                        object(step)
                    );
                }
            }
            if let Some(path) = &suspect.path {
                render_path(&mut out, path, "     ");
            }
        }
    }
    if let Some(path) = &report.path {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Path to GC roots of {} (retains {} bytes)",
            object(&path.target),
            path.target
                .retained
                .map(|bytes| bytes.to_string())
                .unwrap_or_else(|| "nothing: unreachable".into())
        );
        render_path(&mut out, path, "  ");
    }
    if sections.unreachable {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Unreachable objects: {} ({} bytes)",
            report.unreachable.objects, report.unreachable.bytes
        );
        for row in report.unreachable_classes.iter().take(20) {
            let _ = writeln!(
                out,
                "{:>11} {:>14}  {}",
                row.objects, row.shallow, row.class
            );
        }
    }
    if let Some(diff) = &report.diff {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Histogram against {} (this dump less that one)",
            diff.other
        );
        let _ = writeln!(
            out,
            "{:>11} {:>11} {:>11} {:>14} {:>14} {:>14}  class",
            "objects", "other", "change", "shallow", "other", "change"
        );
        for row in diff
            .rows
            .iter()
            .filter(|row| row.objects_change != 0 || row.shallow_change != 0)
        {
            let _ = writeln!(
                out,
                "{:>11} {:>11} {:>+11} {:>14} {:>14} {:>+14}  {}",
                row.objects,
                row.other_objects,
                row.objects_change,
                row.shallow,
                row.other_shallow,
                row.shallow_change,
                row.class
            );
        }
    }
    out
}
