//! `openprof`: run a JVM under the openprof agent and read the profiles it writes.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use openprof_format::hprof_text::SitesOrder;

mod agent_library;
mod attach_command;
mod collector_commands;
mod convert_command;
mod fleet_command;
mod heap_command;
mod mpt_command;
mod profile_command;
mod report;
mod run_command;
mod statistics_command;
mod validate_command;

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
            Agents' continuous= windows go on to ClickHouse (--clickhouse) and Pyroscope (--pyroscope),\n\
            each by a thread of its own (docs/clickhouse.md).\n\
            See docs/protocol.md. Stops on Ctrl-C or SIGTERM; what was acknowledged is on disk."
    )]
    Serve(collector_commands::ServeArgs),
    /// Serve the web UI over a store alone, read-only (`openprof serve --http` serves it beside
    /// a running collector, with live agents and their controls).
    Ui(collector_commands::UiArgs),
    /// Send a command to live agents through a collector (HPROF's socket commands and ours).
    Control(collector_commands::ControlArgs),
    /// List what a store holds: nodes, processes, agents (clock offsets, losses), traces
    /// (elements, duplicates dropped, gaps).
    Ls(collector_commands::LsArgs),
    /// Write a stored trace as a document (valid by docs/trace.dtd), elements in collation
    /// order, each once; or with --agent an agent's HPROF output.
    Export(collector_commands::ExportArgs),
    /// Join the calls between agents a store holds: each call one traced JVM made into another
    /// (format=x,cpu=times,callsites=y on both; the request carried the call's context), with
    /// the callee's method and both sides' times on the collector's clock.
    Invocations(collector_commands::InvocationsArgs),
    /// Replay a recorded trace to a collector as a new agent (for tests and benchmarks):
    /// prints elements/s, MB/s and the delay until stored.
    Replay(collector_commands::ReplayArgs),
    /// Run a Java program with the agent, then print what its profile holds (as `report` does).
    #[command(
        after_help = "Example:\n  openprof run -o cpu=samples,interval=1 -f profile.html -- java -cp classes Main\n\n\
            Unless OPTIONS give depth=, stacks are recorded 256 frames deep (HPROF's default is 4).\n\
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
        /// Also write the profile to this file when the JVM exits: a flame graph (.html), folded
        /// stacks (.collapsed), pprof (.pb.gz), speedscope (.json), a Chrome trace (.trace.json).
        #[arg(short = 'f', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        view: convert_command::ViewArgs,
        /// The Java command: `java` (found through JAVA_HOME, then PATH) or a path, and its
        /// arguments.
        #[arg(last = true, required = true, value_name = "JAVA ARGS")]
        java: Vec<String>,
    },
    /// Load the agent into a running JVM (HotSpot's attach mechanism) and start profiling it.
    Attach(attach_command::AttachArgs),
    /// Profile a running JVM for a while and write the result (as asprof): start, stop, dump
    /// and status of profiling sessions, continuous profiling with --loop.
    Profile(profile_command::ProfileArgs),
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
    /// its heap dump by shallow bytes, the top allocation sites and their frames; or with
    /// --stats, the statistics of any profile (methods, allocations, threads, components, one
    /// resource), as tables or JSON.
    #[command(
        after_help = "The format is told by the file's start: HPROF binary is \"JAVA PROFILE 1.0.x\" and\n\
            a NUL byte, HPROF text \"JAVA PROFILE 1.0.1, created <date>\". Binary heap dumps\n\
            record no object sizes: their shallow bytes are estimated for a 64-bit HotSpot VM\n\
            with compressed oops (docs/hprof-text.md). On a terminal, files of 64 MiB or more\n\
            show a progress bar while they are read.\n\n\
            --stats reads any input convert reads: `--stats methods --sort calls`, `--stats\n\
            components --components map.txt`, `--stats resource --resource com.acme.Dao.find`,\n\
            `--stats threads --diff base.txt` (docs/statistics.md)."
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
        /// Rank allocation sites by live bytes (`live`, HPROF's order) or by bytes allocated
        /// (`alloc`: where the allocation churn is); default: the order the table was written in.
        #[arg(long, value_name = "live|alloc", value_parser = ["live", "alloc"])]
        by: Option<String>,
        /// With the view options below (or --tree), or for an input that is not HPROF (a trace,
        /// a JFR recording): one event's hottest methods by self and total, from the same views
        /// `convert` writes, and with --tree the call tree this many levels deep.
        #[arg(long, value_name = "LEVELS", num_args = 0..=1, default_missing_value = "32")]
        tree: Option<usize>,
        #[command(flatten)]
        view: convert_command::ViewArgs,
        #[command(flatten)]
        stats: statistics_command::StatsArgs,
    },
    /// Convert a profile into a flame graph (.html), folded stacks (.collapsed), pprof
    /// (.pb.gz), speedscope (.json) or a Chrome trace (.trace.json).
    #[command(
        after_help = "Example:\n  openprof convert java.hprof.txt -o profile.collapsed --threads\n\n\
            The input is told by its content (docs/views.md lists what is read); the output by\n\
            --format or the output file's extension."
    )]
    Convert(convert_command::ConvertArgs),
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
    /// Analyse a heap dump past its histogram: retained sizes by class, the dominator tree,
    /// leak suspects, the shortest path from a GC root to an object, unreachable objects, the
    /// change from another dump; as text, JSON or an HTML page.
    #[command(
        after_help = "Examples:\n  openprof heap app.hprof --suspects\n              openprof heap app.hprof --dominators 30 -o heap.html\n              openprof heap app.hprof --path-to-roots java.util.HashMap --exclude-weak\n              openprof heap after.hprof --diff before.hprof\n\n\
            Reads HPROF binary dumps (heap=dump,format=b, jcmd GC.heap_dump). Shallow sizes are\n\
            computed for a 64-bit HotSpot VM with compressed oops; docs/heap.md defines every\n\
            figure. On a terminal, dumps of 64 MiB or more show a progress bar."
    )]
    Heap(heap_command::HeapArgs),
    /// The fleet's profile: the continuous= windows that collectors forwarded to ClickHouse
    /// (`openprof serve --clickhouse`), summed there for a service, labels or an agent over a
    /// time range (CPU by default, or --event), written as a flame graph or any view `convert`
    /// writes; or its traced values (--values), or its calls per method from traces (--calls).
    #[command(
        after_help = "Examples:\n  openprof fleet --clickhouse http://127.0.0.1:8123 --service checkout --since 15m -o checkout.html\n  \
            openprof fleet --clickhouse http://127.0.0.1:8123 --service checkout --event alloc_bytes -o alloc.html\n  \
            openprof fleet --clickhouse http://127.0.0.1:8123 --service checkout --values\n\n\
            The queries run in ClickHouse (docs/clickhouse.md); only the sums come back."
    )]
    Fleet(fleet_command::FleetArgs),
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
            output,
            view,
            java,
        } => run_command::run(&options, agent, top, &java, output, &view),
        Commands::Validate { file, max } => validate_command::validate(&file, max),
        Commands::Attach(args) => attach_command::attach(args),
        Commands::Profile(args) => profile_command::profile(args),
        Commands::Serve(args) => collector_commands::serve(args),
        Commands::Control(args) => collector_commands::control(args),
        Commands::Ui(args) => collector_commands::ui(args),
        Commands::Ls(args) => collector_commands::ls(args),
        Commands::Export(args) => collector_commands::export(args),
        Commands::Invocations(args) => collector_commands::invocations(args),
        Commands::Replay(args) => collector_commands::replay_command(args),
        Commands::Mpt(args) => mpt_command::mpt(args),
        Commands::Convert(args) => convert_command::convert(args),
        Commands::Fleet(args) => fleet_command::fleet(args),
        Commands::Heap(args) => heap_command::heap(args),
        Commands::Report {
            file,
            top,
            view,
            stats,
            ..
        } if stats.stats.is_some() => statistics_command::report_stats(&file, &stats, &view, top),
        Commands::Report {
            file,
            top,
            tree,
            view,
            ..
        } if tree.is_some() || view.asks_for_a_view() || !report::is_hprof(&file) => {
            report::report_view(&file, &view, top, tree)
        }
        Commands::Report {
            file,
            top,
            traces,
            frames,
            by,
            ..
        } => report::report(
            &file,
            &report::Shown {
                top,
                traces,
                frames,
                sites_by: match by.as_deref() {
                    Some("alloc") => Some(SitesOrder::AllocatedBytes),
                    Some(_) => Some(SitesOrder::LiveBytes),
                    None => None,
                },
            },
        ),
    }
}
