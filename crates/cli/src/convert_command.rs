//! `openprof convert`: a profile read from any input openprof knows, written as a flame graph,
//! folded stacks, pprof, speedscope or a Chrome trace.

use std::fs;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use openprof_analysis::inputs;
use openprof_analysis::profile::{Event, Profile};
use openprof_analysis::views::{self, OutputFormat, ViewOptions};
use regex::Regex;

/// How a profile is shown, for `convert`, `run` and `attach`.
#[derive(Args, Debug, Clone, Default)]
pub struct ViewArgs {
    /// The output format: collapsed, html, pprof, speedscope, chrome (default: told by the
    /// output file's extension: .collapsed/.txt, .html, .pb.gz, .json, .trace.json).
    #[arg(short = 'f', long = "format")]
    pub format: Option<String>,
    /// The event shown: cpu, wall, alloc_bytes, alloc_objects, live_bytes, live_objects, lock,
    /// cpu_time, calls, parameter_time (default: the profile's first, CPU first).
    #[arg(long)]
    pub event: Option<String>,
    /// Only stacks with a frame matching this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub include: Vec<String>,
    /// No stack with a frame matching this regular expression (repeatable).
    #[arg(long, value_name = "REGEX")]
    pub exclude: Vec<String>,
    /// One tree per thread (the thread is each stack's root).
    #[arg(long)]
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
    /// Leave out of flame graphs the frames narrower than this percentage of the total.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.0)]
    pub minwidth: f64,
    /// The title of the flame graph.
    #[arg(long)]
    pub title: Option<String>,
    /// A differential flame graph (HTML): each frame coloured by how its share changed from
    /// this earlier profile's, red grew, blue shrank.
    #[arg(long, value_name = "BASE")]
    pub diff: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The input: HPROF text (format=a) or binary (format=b).
    pub input: PathBuf,
    /// The output file; its extension tells the format unless --format does.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    #[command(flatten)]
    pub view: ViewArgs,
}

pub fn convert(args: ConvertArgs) -> Result<ExitCode> {
    let profile = read_input(&args.input)?;
    write_view(&profile, &args.output, &args.view)?;
    Ok(ExitCode::SUCCESS)
}

/// Reads an input, with a progress bar on a terminal for large files.
pub fn read_input(input: &Path) -> Result<Profile> {
    let bytes = fs::metadata(input)
        .with_context(|| format!("can't read {}", input.display()))?
        .len();
    let bar = if bytes >= 64 << 20 && std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "reading {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let profile = inputs::read_file(input, &mut |read| bar.set_position(read));
    bar.finish_and_clear();
    Ok(profile?)
}

/// The view options of the arguments, checked.
pub fn view_options(args: &ViewArgs) -> Result<ViewOptions> {
    let regexes = |patterns: &[String], option: &str| -> Result<Vec<Regex>> {
        patterns
            .iter()
            .map(|pattern| {
                Regex::new(pattern).with_context(|| format!("bad --{option} {pattern:?}"))
            })
            .collect()
    };
    let event = match &args.event {
        Some(name) => Some(Event::from_name(name).with_context(|| {
            format!(
                "bad --event {name:?}: one of {}",
                Event::ALL.map(Event::name).join(", ")
            )
        })?),
        None => None,
    };
    let seconds = |value: Option<f64>, option: &str| -> Result<Option<u64>> {
        match value {
            Some(seconds) if !(seconds.is_finite() && seconds >= 0.0) => {
                bail!("bad --{option} {seconds}: seconds from the recording's start, 0 or more")
            }
            Some(seconds) => Ok(Some((seconds * 1e9) as u64)),
            None => Ok(None),
        }
    };
    if !(args.minwidth.is_finite() && (0.0..=100.0).contains(&args.minwidth)) {
        bail!("bad --minwidth {}: a percentage, 0 to 100", args.minwidth);
    }
    Ok(ViewOptions {
        event,
        include: regexes(&args.include, "include")?,
        exclude: regexes(&args.exclude, "exclude")?,
        by_thread: args.threads,
        reverse: args.reverse,
        total: args.total,
        from_ns: seconds(args.from, "from")?,
        to_ns: seconds(args.to, "to")?,
        simple: args.simple,
        min_width_percent: args.minwidth,
        title: args.title.clone(),
    })
}

/// Writes a profile to `output` in the format asked for (or told by its extension).
pub fn write_view(profile: &Profile, output: &Path, args: &ViewArgs) -> Result<()> {
    let format = match &args.format {
        Some(name) => OutputFormat::from_name(name).with_context(|| {
            format!(
                "bad --format {name:?}: one of {}",
                OutputFormat::ALL.map(OutputFormat::name).join(", ")
            )
        })?,
        None => OutputFormat::from_path(output).with_context(|| {
            format!(
                "can't tell the format of {} from its name: give --format, or end it in \
                 .collapsed, .txt, .html, .pb.gz, .json or .trace.json",
                output.display()
            )
        })?,
    };
    let options = view_options(args)?;
    if let Some(event) = options.event {
        if !profile.events().contains(&event) {
            bail!(
                "{} has no {} samples; it has: {}",
                profile.source,
                event.name(),
                event_names(profile)
            );
        }
    }
    if !matches!(format, OutputFormat::Collapsed | OutputFormat::Html) {
        bail!("the {} output is not built yet", format.name());
    }
    if args.diff.is_some() && format != OutputFormat::Html {
        bail!(
            "--diff makes an HTML flame graph only, not {}",
            format.name()
        );
    }
    let base = args.diff.as_deref().map(read_input).transpose()?;
    let file =
        fs::File::create(output).with_context(|| format!("can't write {}", output.display()))?;
    let mut out = BufWriter::new(file);
    let written = match format {
        OutputFormat::Collapsed => {
            views::collapsed::write(&views::fold(profile, &options), &mut out)
        }
        OutputFormat::Html => match &base {
            Some(base) => views::html::write_diff(profile, base, &options, &mut out),
            None => views::html::write(profile, &options, &mut out),
        },
        _ => unreachable!("refused above"),
    };
    written
        .and_then(|()| out.flush())
        .with_context(|| format!("can't write {}", output.display()))
}

fn event_names(profile: &Profile) -> String {
    let names: Vec<&str> = profile.events().into_iter().map(Event::name).collect();
    if names.is_empty() {
        "no samples at all".into()
    } else {
        names.join(", ")
    }
}
