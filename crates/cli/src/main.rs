//! `openprof`: run a JVM under the openprof agent and read the profiles it writes.

use std::fs;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use openprof_analysis::{
    summarize, summarize_cpu, summarize_sites, top_classes, CpuSummary, HeapHistogram, ShallowSizes,
};
use openprof_format::hprof_binary;
use openprof_format::hprof_text::CpuTableKind;
use openprof_format::hprof_text::{self, SitesOrder, TextProfile};
use openprof_format::options::{Options, OutputFormat};
use openprof_jdk::Jdk;

mod attach_command;
mod collector_commands;
mod mpt_command;

const AGENT_FILE: &str = "libopenprof_agent.so";

#[derive(Parser)]
#[command(
    name = "openprof",
    version,
    about = "An open profiler for the JVM: HPROF's profiles, without safepoint bias",
    long_about = "An open profiler for the JVM.\n\n\
        `openprof run` starts a JVM with the openprof agent and prints the top methods when it \
        exits; `openprof report` reads a profile in HPROF's text (format=a) or binary format \
        (format=b, or a JDK heap dump from `jcmd PID GC.heap_dump`) and prints its top methods, \
        heap histogram and allocation sites; `openprof validate` checks a trace (format=x); \
        `openprof mpt` shows which parameter values make traced methods slow (mpt=)."
)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Collect from agents over the network (agents started with net=HOST:PORT,token=...):
    /// store what they send, estimate their clocks, forward commands to them.
    #[command(
        after_help = "Agents connect with -agentpath:libopenprof_agent.so=format=x,net=127.0.0.1:7911,token=@FILE.\n\
            The store is one directory: catalog.sqlite and zstd segments of the frames as received.\n\
            See docs/protocol.md. Stops on Ctrl-C or SIGTERM; what was acknowledged is on disk."
    )]
    Serve(collector_commands::ServeArgs),
    /// Send a command to live agents through a collector (HPROF's socket commands and ours).
    Control(collector_commands::ControlArgs),
    /// List what a store holds: nodes, processes, agents (clock offsets, losses), traces
    /// (elements, duplicates dropped, gaps).
    Ls(collector_commands::LsArgs),
    /// Write a stored trace as a document (valid by docs/trace.dtd), elements in collation
    /// order, each once; or with --agent an agent's HPROF output.
    Export(collector_commands::ExportArgs),
    /// Replay a recorded trace to a collector as a new agent (for tests and benchmarks):
    /// prints elements/s, MB/s and the delay until stored.
    Replay(collector_commands::ReplayArgs),
    /// Run a Java program with the agent, then print what its profile holds (as `report` does).
    #[command(
        after_help = "Example:\n  openprof run -o cpu=samples,interval=1 -- java -cp classes Main\n\n\
            The agent is looked for in --agent, $OPENPROF_AGENT, next to this binary, then in\n\
            target/release and target/debug. When OPTIONS has no file=, the profile is written\n\
            to java.hprof.txt in the current directory, as HPROF does (java.hprof with\n\
            format=b; java.trace.xml with format=x, which openprof run then names instead of\n\
            printing methods)."
    )]
    Run {
        /// Agent options in HPROF's syntax (`openprof run -o help -- java` lists them).
        #[arg(short = 'o', long = "options", default_value = "cpu=samples")]
        options: String,
        /// The agent library to load.
        #[arg(long)]
        agent: Option<PathBuf>,
        /// How many methods (and classes, allocation sites) to print.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// The Java command: `java` (found through JAVA_HOME, then PATH) or a path, and its
        /// arguments.
        #[arg(last = true, required = true, value_name = "JAVA ARGS")]
        java: Vec<String>,
    },
    /// Load the agent into a running JVM (HotSpot's attach mechanism) and start profiling it.
    Attach(attach_command::AttachArgs),
    /// Check a trace (format=x): well-formed, ids defined before use, tickets paired,
    /// stackDepth consistent, collation values without gaps. Exit code 1 if any problem.
    Validate {
        /// A trace document or stream of fragments.
        file: PathBuf,
        /// How many problems to print at most.
        #[arg(long, default_value_t = 50)]
        max: usize,
    },
    /// Print what a profile holds: the top methods and the traces behind them, the classes of
    /// its heap dump by shallow bytes, the top allocation sites and their frames.
    #[command(
        after_help = "The format is told by the file's start: HPROF binary is \"JAVA PROFILE 1.0.x\" and\n\
            a NUL byte, HPROF text \"JAVA PROFILE 1.0.1, created <date>\". Binary heap dumps\n\
            record no object sizes: their shallow bytes are estimated for a 64-bit HotSpot VM\n\
            with compressed oops (docs/hprof-text.md). On a terminal, files of 64 MiB or more\n\
            show a progress bar while they are read."
    )]
    Report {
        /// A profile: HPROF text (format=a), HPROF binary (format=b), or a JDK heap dump.
        file: PathBuf,
        /// How many methods, classes and allocation sites to print.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// How many traces to print under each method.
        #[arg(long, default_value_t = 3)]
        traces: usize,
        /// How many frames of each allocation site's trace to print.
        #[arg(long, default_value_t = 4)]
        frames: usize,
    },
    /// Print method parameter tracing's figures (mpt=): per traced method and specification,
    /// the values its calls recorded, with calls and wall clock and CPU times, slowest first.
    #[command(
        after_help = "FILE is told by its content: a trace (format=x, a TRACE document or fragments) starts\n\
            with '<'; anything else is read as a profile, whose MPT record (written at exit with\n\
            format=a) holds the figures. From a trace, each methodEntry carrying <value>s is a\n\
            traced call, paired with its methodExit by ticket on its thread (else by the thread's\n\
            stack); entries without values (cpu=times) are not counted, and calls never exited are\n\
            counted as unfinished. Values are ranked by mean wall time, then calls. Strings are\n\
            shown quoted, with \\n, \\t, \\\" and \\\\ escapes. See docs/mpt.md, \"Reports\"."
    )]
    Mpt(mpt_command::MptArgs),
}

fn main() -> ExitCode {
    match run_cli(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("openprof: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run_cli(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Commands::Run {
            options,
            agent,
            top,
            java,
        } => run(&options, agent, top, &java),
        Commands::Validate { file, max } => validate(&file, max),
        Commands::Attach(args) => attach_command::attach(args),
        Commands::Serve(args) => collector_commands::serve(args),
        Commands::Control(args) => collector_commands::control(args),
        Commands::Ls(args) => collector_commands::ls(args),
        Commands::Export(args) => collector_commands::export(args),
        Commands::Replay(args) => collector_commands::replay_command(args),
        Commands::Mpt(args) => mpt_command::mpt(args),
        Commands::Report {
            file,
            top,
            traces,
            frames,
        } => {
            let profile = read_profile(&file)?;
            let shown = Shown {
                top,
                traces,
                frames,
            };
            print!("{}", render(&file, &profile, &shown));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The agent library: --agent, $OPENPROF_AGENT, next to this binary, then target/{release,debug}.
fn find_agent(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = explicit.or_else(|| std::env::var_os("OPENPROF_AGENT").map(PathBuf::from)) {
        if !path.is_file() {
            bail!("the agent library {} does not exist", path.display());
        }
        return Ok(path);
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(AGENT_FILE));
    }
    candidates.push(PathBuf::from("target/release").join(AGENT_FILE));
    candidates.push(PathBuf::from("target/debug").join(AGENT_FILE));
    candidates
        .iter()
        .find(|path| path.is_file())
        .map(|path| path.canonicalize().unwrap_or_else(|_| path.clone()))
        .with_context(|| {
            format!(
                "can't find {AGENT_FILE} (looked in {}); build it with `cargo build --release` or pass --agent",
                candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        })
}

fn run(
    options_text: &str,
    agent: Option<PathBuf>,
    top: usize,
    java: &[String],
) -> Result<ExitCode> {
    let options =
        Options::parse(options_text).map_err(|error| anyhow::anyhow!("bad -o: {error}"))?;
    let agent = find_agent(agent)?;
    let (program, arguments) = java
        .split_first()
        .context("give the Java command after --")?;
    let program = if program == "java" {
        Jdk::find()?.java()?
    } else {
        PathBuf::from(program)
    };
    let agent_argument = if options_text.is_empty() {
        format!("-agentpath:{}", agent.display())
    } else {
        format!("-agentpath:{}={options_text}", agent.display())
    };
    let mut child = Command::new(&program)
        .arg(agent_argument)
        .args(arguments)
        .spawn()
        .with_context(|| format!("can't run {}", program.display()))?;
    let pid = child.id();
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", program.display()))?;
    let code = ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8);
    if options.format == OutputFormat::Xml && !options.help {
        let file = PathBuf::from(options.output_file());
        if let Ok(input) = fs::File::open(&file) {
            let reader = std::io::BufReader::new(input);
            let elements = openprof_format::trace::reader::read_all(reader)
                .take_while(Result::is_ok)
                .count();
            eprintln!(
                "openprof: trace written to {} ({elements} elements); `openprof validate {}` checks it",
                file.display(),
                file.display()
            );
        }
        return Ok(code);
    }
    // What is left is HPROF text or binary, which read_profile tells apart.
    if options.help || !options.doe {
        return Ok(code);
    }
    let mut file = PathBuf::from(options.output_file());
    let unique = PathBuf::from(options.unique_output_file(pid));
    if !options.force && unique.is_file() {
        file = unique;
    }
    if !file.is_file() {
        if status.success() {
            eprintln!("openprof: the JVM wrote no profile to {}", file.display());
        }
        return Ok(code);
    }
    let profile = read_profile(&file)?;
    let shown = Shown {
        top,
        traces: 1,
        frames: 2,
    };
    eprint!("{}", render(&file, &profile, &shown));
    Ok(code)
}

fn validate(file: &Path, max: usize) -> Result<ExitCode> {
    let input = fs::File::open(file).with_context(|| format!("can't read {}", file.display()))?;
    let mut elements = 0usize;
    let counted = openprof_format::trace::reader::read_all(std::io::BufReader::new(input))
        .inspect(|element| elements += usize::from(element.is_ok()));
    let problems = openprof_format::trace::validate::validate(counted);
    for problem in problems.iter().take(max) {
        println!("{}: {problem}", file.display());
    }
    if problems.len() > max {
        println!("... and {} more problems", problems.len() - max);
    }
    if problems.is_empty() {
        println!("{}: valid, {elements} elements", file.display());
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{}: {} problems in {elements} elements",
            file.display(),
            problems.len()
        );
        Ok(ExitCode::from(1))
    }
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
            .map(|(trace, _)| summary.entries.get(trace).copied().unwrap_or(0))
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
            for (serial, cost) in stat.traces.iter().take(traces) {
                let entries = summary.entries.get(serial).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "  {:9.1} ms {entries:8} entries  TRACE {serial}",
                    *cost as f64 / 1000.0
                );
                write_frames(out, profile, *serial);
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

fn progress_bar(file_bytes: u64) -> ProgressBar {
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

/// Reads a profile in HPROF text or binary, streaming: heap dumps are summed as they are read.
fn read_profile(file: &Path) -> Result<TextProfile> {
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
struct Shown {
    /// Methods, classes, allocation sites.
    top: usize,
    /// Traces under each method.
    traces: usize,
    /// Frames under each allocation site.
    frames: usize,
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
    let Some(summary) = summarize_sites(profile, shown.top) else {
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

fn render(file: &Path, profile: &TextProfile, shown: &Shown) -> String {
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
    {
        let _ = writeln!(
            out,
            "no CPU samples, CPU times, heap dump, allocation sites or parameter values in this \
             profile"
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
            for (serial, count) in stat.traces.iter().take(traces) {
                let _ = writeln!(out, "  {count:7} samples  TRACE {serial}");
                write_frames(out, profile, *serial);
            }
        }
    }
}
