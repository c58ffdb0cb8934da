//! `openprof convert`: a profile read from any input openprof knows, written as a flame graph,
//! folded stacks, pprof, speedscope or a Chrome trace.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use openprof_analysis::inputs;
use openprof_analysis::profile::Profile;
use openprof_analysis::views::{self, OutputFormat, ViewOptions, ViewRequest};
use openprof_format::private_file::{create_private, AtALink};

/// How a profile is shown, for `convert`, `run` and `attach`.
#[derive(Args, Debug, Clone, Default)]
pub struct ViewArgs {
    /// The output format: collapsed, html, pprof, speedscope, chrome (default: told by the
    /// output file's extension: .collapsed/.txt, .html, .pb.gz, .json, .trace.json).
    #[arg(long = "format")]
    pub format: Option<String>,
    /// The event shown: cpu, wall, alloc_bytes, alloc_objects, live_bytes, live_objects, lock,
    /// lock_owner, cpu_time, calls, mpt_cpu, mpt_wall (default: the profile's first, CPU first).
    #[arg(long)]
    pub event: Option<String>,
    /// Only stacks with a frame matching this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub include: Vec<String>,
    /// No stack with a frame matching this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub exclude: Vec<String>,
    /// Only samples with this label, NAME=VALUE (repeatable: all of them), e.g. state=blocked,
    /// or mpt.value=7 for the samples inside traced calls that recorded 7.
    #[arg(long, value_name = "NAME=VALUE")]
    pub label: Vec<String>,
    /// One tree per thread (the thread is each stack's root).
    #[arg(short = 't', long)]
    pub threads: bool,
    /// Stacks leaf first: who calls the hot methods (an icicle graph in HTML).
    #[arg(long)]
    pub reverse: bool,
    /// Weigh stacks by the event's value (bytes, nanoseconds) rather than by samples.
    #[arg(long)]
    pub total: bool,
    /// Only samples from this many seconds after the recording's start (inputs with times).
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,
    /// Only samples before this many seconds after the recording's start.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,
    /// Class names without their packages.
    #[arg(long)]
    pub simple: bool,
    /// A method's source lines as frames of their own (`Method:LINE`); pprof always has them.
    #[arg(long)]
    pub lines: bool,
    /// Leave out of flame graphs the frames narrower than this percentage of the total.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0)]
    pub minwidth: f64,
    /// The title of the flame graph.
    #[arg(long)]
    pub title: Option<String>,
}

impl ViewArgs {
    /// Whether any option that shapes a view was given (not the output format or the title).
    pub fn asks_for_a_view(&self) -> bool {
        self.event.is_some()
            || !self.include.is_empty()
            || !self.exclude.is_empty()
            || !self.label.is_empty()
            || self.threads
            || self.reverse
            || self.total
            || self.from.is_some()
            || self.to.is_some()
            || self.simple
            || self.lines
            || self.minwidth > 0.0
    }
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The input: HPROF text (format=a) or binary (format=b), a trace (format=x), or a JFR
    /// recording (the JDK's Flight Recorder, async-profiler).
    #[arg(required_unless_present_any = ["diff", "stored"])]
    pub input: Option<PathBuf>,
    /// Read a profile from a collector's store instead: a trace's id (as `openprof ls` shows),
    /// or with --agent an agent's id (its HPROF output).
    #[arg(long, value_name = "ID", conflicts_with_all = ["input", "diff"])]
    pub stored: Option<uuid::Uuid>,
    /// The store's directory, for --stored.
    #[arg(long, default_value = "openprof-store", requires = "stored")]
    pub store: PathBuf,
    /// --stored names an agent, whose HPROF output is read.
    #[arg(long, requires = "stored")]
    pub agent: bool,
    /// A differential view of two profiles instead: NEW's stacks against BASE's, by change of
    /// share (folded stacks as `stack base new`; HTML coloured by the change).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with = "input")]
    pub diff: Vec<PathBuf>,
    /// The output file; its extension tells the format unless --format does.
    #[arg(short = 'o', long = "output", short_alias = 'f')]
    pub output: PathBuf,
    #[command(flatten)]
    pub view: ViewArgs,
}

pub fn convert(args: ConvertArgs) -> Result<ExitCode> {
    // Bad options are told before a long read.
    let format = output_format(&args.output, &args.view)?;
    view_options(&args.view)?;
    if let [base, new] = args.diff.as_slice() {
        check_diff_format(format)?;
        let base = read_input(base)?;
        let new = read_input(new)?;
        write_diff_view(&base, &new, &args.output, &args.view)?;
        return Ok(ExitCode::SUCCESS);
    }
    let profile = match (&args.stored, &args.input) {
        (Some(id), _) => {
            let file = crate::collector_commands::stored_to_file(&args.store, *id, args.agent)?;
            let mut profile = read_input(file.path())?;
            profile.source = format!("{} in {}", id, args.store.display());
            profile
        }
        (None, Some(input)) => read_input(input)?,
        (None, None) => bail!("give the input profile"),
    };
    write_view(&profile, &args.output, &args.view)?;
    Ok(ExitCode::SUCCESS)
}

/// Reads an input, with a progress bar on a terminal for large files.
pub fn read_input(input: &Path) -> Result<Profile> {
    let bytes = fs::metadata(input)
        .with_context(|| format!("can't read {}", input.display()))?
        .len();
    let bar = crate::report::progress_bar(bytes);
    let profile = inputs::read_file(input, &mut |read| bar.set_position(read));
    bar.finish_and_clear();
    let profile = profile?;
    if profile.saturated() {
        eprintln!(
            "openprof WARNING: {}: its counts add up past 2^64 - 1 (a crafted or corrupt input?); \
             they are held at that, and the shares shown are not exact",
            input.display()
        );
    }
    Ok(profile)
}

/// The view options of the arguments, checked.
pub fn view_options(args: &ViewArgs) -> Result<ViewOptions> {
    ViewRequest {
        event: args.event.clone(),
        include: args.include.clone(),
        exclude: args.exclude.clone(),
        threads: args.threads,
        reverse: args.reverse,
        total: args.total,
        from: args.from,
        to: args.to,
        simple: args.simple,
        lines: args.lines,
        minwidth: args.minwidth,
        title: args.title.clone(),
        labels: args.label.clone(),
    }
    .options("--")
    .map_err(anyhow::Error::msg)
}

/// The output format asked for, or told by the output file's extension.
pub fn output_format(output: &Path, args: &ViewArgs) -> Result<OutputFormat> {
    match &args.format {
        Some(name) => OutputFormat::from_name(name).with_context(|| {
            format!(
                "bad --format {name:?}: one of {}",
                OutputFormat::ALL.map(OutputFormat::name).join(", ")
            )
        }),
        None => OutputFormat::from_path(output).with_context(|| {
            format!(
                "can't tell the format of {} from its name: give --format, or end it in \
                 .collapsed, .txt, .html, .pb.gz, .json or .trace.json",
                output.display()
            )
        }),
    }
}

/// Writes a profile to `output` in the format asked for (or told by its extension).
pub fn write_view(profile: &Profile, output: &Path, args: &ViewArgs) -> Result<()> {
    let format = output_format(output, args)?;
    let options = view_options(args)?;
    views::check(profile, format, &options).map_err(anyhow::Error::msg)?;
    write_file(output, |out| views::write(profile, format, &options, out))
}

/// Refuses an output format a differential view is not written in.
pub fn check_diff_format(format: OutputFormat) -> Result<()> {
    if !matches!(format, OutputFormat::Collapsed | OutputFormat::Html) {
        bail!(
            "a differential view is written as folded stacks (.collapsed) or an HTML flame \
             graph (.html), not {}",
            format.name()
        );
    }
    Ok(())
}

/// Writes `new` against `base` (folded with the same view options) to `output`: an HTML flame
/// graph coloured by change, or folded stacks with both weights.
pub fn write_diff_view(
    base: &Profile,
    new: &Profile,
    output: &Path,
    args: &ViewArgs,
) -> Result<()> {
    let format = output_format(output, args)?;
    check_diff_format(format)?;
    let options = view_options(args)?;
    check_event(base, &options)?;
    check_event(new, &options)?;
    if format == OutputFormat::Html {
        write_file(output, |out| {
            views::html::write_diff(new, base, &options, out)
        })
    } else {
        let diff = views::diff::fold_diff(base, new, &options);
        write_file(output, |out| views::diff::write_collapsed(&diff, out))
    }
}

/// Refuses an event the profile has no samples of.
pub fn check_event(profile: &Profile, options: &ViewOptions) -> Result<()> {
    views::check(profile, OutputFormat::Collapsed, options).map_err(anyhow::Error::msg)
}

/// Creates `output` and writes it through a buffer. A view holds what the application did
/// (its methods, its threads, parameter values): the file is private to its owner, whatever
/// the umask, and never written through a link found at its path.
fn write_file(
    output: &Path,
    write: impl FnOnce(&mut BufWriter<fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let file = create_private(output, AtALink::Refuse)
        .map_err(|error| anyhow::anyhow!("can't write {}: it {error}", output.display()))?;
    let mut out = BufWriter::new(file);
    write(&mut out)
        .and_then(|()| out.flush())
        .with_context(|| format!("can't write {}", output.display()))
}
