//! `openprof report FILE --stats KIND`: the statistics of any profile (methods, allocations,
//! threads, components, everything about one resource) or their differences from a base
//! profile, as tables or as the JSON the analysis serializes (docs/statistics.md). The
//! statistics are computed in `openprof_analysis::statistics`; this parses and renders.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use openprof_analysis::profile::{Event, Unit};
use openprof_analysis::statistics::{
    thread_timeline, AllocationRow, AllocationStats, ComponentMap, ComponentStats, DiffKind,
    MethodSort, MethodStats, Related, ResourceStats, StatisticsIndex, StatsDiff, ThreadStats,
    ThreadTimeline, WeightedRow,
};
use openprof_analysis::views::ViewOptions;

use crate::convert_command::{check_event, read_input, view_options, ViewArgs};

/// Which statistics `--stats` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatsKind {
    Methods,
    Allocations,
    Threads,
    Components,
    Resource,
}

/// The options of `report --stats`.
#[derive(Args, Debug, Clone, Default)]
pub struct StatsArgs {
    /// Statistics of any profile instead of the report: per method (self, total, calls),
    /// allocations (by class, allocating method, site), threads (CPU, states, locks, over
    /// time), components (packages, --components, class loaders), or everything about one
    /// resource (--resource). The view options --event, --include, --exclude, --threads, --from
    /// and --to apply.
    #[arg(long, value_enum, value_name = "KIND", conflicts_with_all = ["tree", "by"])]
    pub stats: Option<StatsKind>,
    /// A component map for --stats components: lines `COMPONENT = PACKAGE-PATTERN[, ...]`
    /// (`persistence = com.acme.db.*`), first match wins, the rest is `other`.
    #[arg(long, value_name = "FILE", requires = "stats")]
    pub components: Option<PathBuf>,
    /// The method, class, package or thread --stats resource shows: `NAME`, or `KIND:NAME`
    /// (method:, class:, package:, thread:).
    #[arg(long, value_name = "NAME", requires = "stats")]
    pub resource: Option<String>,
    /// Print the statistics as JSON (what the web UI's API returns).
    #[arg(long, requires = "stats")]
    pub json: bool,
    /// The differences from BASE, another profile: per method, allocated class, thread or
    /// component, the change of value and of share, largest change first.
    #[arg(long, value_name = "BASE", requires = "stats")]
    pub diff: Option<PathBuf>,
    /// What --stats methods sorts by: self, total, self_count, total_count, calls, wall_mean,
    /// wall_max, cpu_mean, name (default self).
    #[arg(long, value_name = "KEY", requires = "stats")]
    pub sort: Option<String>,
    /// The width of --stats threads' timeline buckets, in seconds (default: at most 20
    /// buckets).
    #[arg(long, value_name = "SECONDS", requires = "stats")]
    pub bucket: Option<f64>,
}

/// What was asked, checked before any profile is read.
struct Asked {
    kind: StatsKind,
    options: ViewOptions,
    map: Option<ComponentMap>,
    sort: MethodSort,
    bucket_ns: Option<u64>,
}

fn check(args: &StatsArgs, view: &ViewArgs) -> Result<Asked> {
    let kind = args.stats.context("--stats names the statistics")?;
    let shaping = [
        (view.reverse, "--reverse"),
        (view.total, "--total"),
        (view.simple, "--simple"),
        (view.lines, "--lines"),
        (view.minwidth > 0.0, "--minwidth"),
        (view.title.is_some(), "--title"),
        (view.format.is_some(), "--format"),
    ];
    if let Some((_, option)) = shaping.iter().find(|(given, _)| *given) {
        bail!(
            "{option} shapes flame graphs and trees, not statistics: --stats takes --event, \
             --include, --exclude, --threads, --from and --to"
        );
    }
    let for_one_kind = [
        (
            args.components.is_some(),
            "--components",
            StatsKind::Components,
            "",
        ),
        (
            args.resource.is_some(),
            "--resource",
            StatsKind::Resource,
            "",
        ),
        (
            args.sort.is_some(),
            "--sort",
            StatsKind::Methods,
            " (allocations and threads are sorted by --event)",
        ),
        (args.bucket.is_some(), "--bucket", StatsKind::Threads, ""),
    ];
    for (given, option, only, why) in for_one_kind {
        if given && kind != only {
            let name = only
                .to_possible_value()
                .map(|value| value.get_name().to_string());
            bail!("{option} is for --stats {}{why}", name.unwrap_or_default());
        }
    }
    if view.threads
        && (args.diff.is_some() || matches!(kind, StatsKind::Threads | StatsKind::Resource))
    {
        bail!(
            "--threads splits methods, allocations and components by thread; not threads, one \
             resource (whose threads it lists) or a difference"
        );
    }
    if kind == StatsKind::Resource {
        if args.resource.is_none() {
            bail!("--stats resource needs --resource NAME (a method, class, package or thread)");
        }
        if args.diff.is_some() {
            bail!("--diff compares methods, allocations, threads or components, not one resource");
        }
    }
    let sort = match &args.sort {
        Some(name) => MethodSort::from_name(name).with_context(|| {
            format!(
                "bad --sort {name:?}: one of {}",
                MethodSort::ALL.map(MethodSort::name).join(", ")
            )
        })?,
        None => MethodSort::SelfValue,
    };
    let bucket_ns = match args.bucket {
        Some(seconds) if !(seconds.is_finite() && seconds > 0.0) => {
            bail!("bad --bucket {seconds}: seconds, more than 0")
        }
        Some(seconds) => Some(((seconds * 1e9).round() as u64).max(1)),
        None => None,
    };
    let map = match &args.components {
        Some(file) => {
            let text = fs::read_to_string(file)
                .with_context(|| format!("can't read {}", file.display()))?;
            Some(
                ComponentMap::parse(&text)
                    .with_context(|| format!("bad component map {}", file.display()))?,
            )
        }
        None => None,
    };
    Ok(Asked {
        kind,
        options: view_options(view)?,
        map,
        sort,
        bucket_ns,
    })
}

/// Prints the statistics asked for, of `file` (against `--diff BASE` when given).
pub fn report_stats(
    file: &Path,
    args: &StatsArgs,
    view: &ViewArgs,
    top: usize,
) -> Result<ExitCode> {
    let asked = check(args, view)?;
    let profile = read_input(file)?;
    check_event(&profile, &asked.options)?;
    let index = StatisticsIndex::build(&profile, &asked.options);
    let event = asked.options.event;
    let by_thread = asked.options.by_thread;
    if let Some(base) = &args.diff {
        let base_profile = read_input(base)?;
        check_event(&base_profile, &asked.options)?;
        let base_index = StatisticsIndex::build(&base_profile, &asked.options);
        let kind = match asked.kind {
            StatsKind::Methods => DiffKind::Methods,
            StatsKind::Allocations => DiffKind::Allocations,
            StatsKind::Threads => DiffKind::Threads,
            StatsKind::Components => DiffKind::Components,
            StatsKind::Resource => unreachable!("refused by check"),
        };
        let diff = StatsDiff::of(kind, &base_index, &index, event, asked.map.as_ref())?;
        return print(args.json, &diff, || render_diff(&diff, top));
    }
    match asked.kind {
        StatsKind::Methods => {
            let stats = index.methods(event, asked.sort, by_thread)?;
            print(args.json, &stats, || render_methods(&stats, top))
        }
        StatsKind::Allocations => {
            let stats = index.allocations(event, by_thread)?;
            print(args.json, &stats, || render_allocations(&stats, top))
        }
        StatsKind::Threads => {
            let stats = index.threads(event)?;
            let timeline = thread_timeline(&profile, &asked.options, event, asked.bucket_ns)
                .map_err(|e| e.to_string());
            let json = serde_json::json!({
                "threads": stats,
                "timeline": timeline.as_ref().ok(),
                "timeline_note": timeline.as_ref().err(),
            });
            print(args.json, &json, || render_threads(&stats, &timeline, top))
        }
        StatsKind::Components => {
            let stats = index.components(event, asked.map.as_ref(), by_thread)?;
            print(args.json, &stats, || render_components(&stats, top))
        }
        StatsKind::Resource => {
            let name = args.resource.as_deref().unwrap_or_default();
            // JSON has every row; the tables the `top` of each list.
            let stats = index.lookup(name, if args.json { 0 } else { top })?;
            print(args.json, &stats, || render_resource(&stats, event, top))
        }
    }
}

fn print(
    json: bool,
    value: &impl serde::Serialize,
    text: impl FnOnce() -> String,
) -> Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    } else {
        print!("{}", text());
    }
    Ok(ExitCode::SUCCESS)
}

/// What a column of an event's values is headed: its unit, nanoseconds as milliseconds.
fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Nanoseconds => "ms",
        other => other.name(),
    }
}

/// A value in its column: nanoseconds as milliseconds.
fn amount(unit: Unit, value: u64) -> String {
    match unit {
        Unit::Nanoseconds => format!("{:.3}", value as f64 / 1e6),
        _ => value.to_string(),
    }
}

fn ms(nanoseconds: u64) -> String {
    amount(Unit::Nanoseconds, nanoseconds)
}

/// ` [thread tid=ID]` after a row's name when split by thread.
fn on_thread(thread: Option<&openprof_analysis::statistics::ResourceRef>) -> String {
    match thread {
        Some(thread) => match thread.thread_id {
            Some(id) => format!("  [{} tid={id}]", thread.name),
            None => format!("  [{}]", thread.name),
        },
        None => String::new(),
    }
}

fn render_methods(stats: &MethodStats, top: usize) -> String {
    let mut out = String::new();
    let unit = unit_name(stats.unit);
    let _ = writeln!(
        out,
        "openprof: {}, {}: {} {unit} in {} methods{}, sorted by {}",
        stats.source,
        stats.event.name(),
        amount(stats.unit, stats.total_value),
        stats.methods.len(),
        if stats.by_thread { " and threads" } else { "" },
        stats.sort.name()
    );
    let with_calls = stats.methods.iter().any(|method| method.calls.is_some());
    let header = if with_calls {
        format!(
            " {:>10} {:>12} {:>12} {:>12} {:>12}",
            "calls", "wall mean ms", "wall min ms", "wall max ms", "cpu mean ms"
        )
    } else {
        String::new()
    };
    out.push('\n');
    weighted_table(
        &mut out,
        &stats.methods,
        stats.unit,
        top,
        &header,
        |method| {
            if !with_calls {
                return (&method.row, String::new());
            }
            let calls = method.calls.as_ref();
            let wall = calls.and_then(|calls| calls.wall.as_ref());
            let cpu = calls.and_then(|calls| calls.cpu.as_ref());
            let or_dash = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
            let columns = format!(
                " {:>10} {:>12} {:>12} {:>12} {:>12}",
                or_dash(calls.map(|calls| calls.calls.to_string())),
                or_dash(wall.map(|wall| ms(wall.mean_ns))),
                or_dash(wall.map(|wall| ms(wall.min_ns))),
                or_dash(wall.map(|wall| ms(wall.max_ns))),
                or_dash(cpu.map(|cpu| ms(cpu.self_mean_ns)))
            );
            (&method.row, columns)
        },
    );
    out
}

/// Rows of weights: rank, shares, self and total, the columns `columns` adds (headed
/// `header`), then the name and thread; the first `top`.
fn weighted_table<T>(
    out: &mut String,
    rows: &[T],
    unit: Unit,
    top: usize,
    header: &str,
    columns: impl Fn(&T) -> (&WeightedRow, String),
) {
    let name = unit_name(unit);
    let _ = writeln!(
        out,
        " rank  self %  total % {:>12} {:>12}{header}  name",
        format!("self {name}"),
        format!("total {name}")
    );
    for (rank, item) in rows.iter().take(top).enumerate() {
        let (row, extra) = columns(item);
        let _ = writeln!(
            out,
            "{:5} {:6.2}% {:7.2}% {:>12} {:>12}{extra}  {}{}",
            rank + 1,
            row.self_percent,
            row.total_percent,
            amount(unit, row.weights.self_value),
            amount(unit, row.weights.total_value),
            row.name,
            on_thread(row.thread.as_ref())
        );
    }
    more(out, rows.len(), top);
}

/// Says how many rows `--top` left out.
fn more(out: &mut String, rows: usize, top: usize) {
    if rows > top {
        let _ = writeln!(
            out,
            "  ... and {} more (--top {rows} shows them)",
            rows - top
        );
    }
}

fn render_allocations(stats: &AllocationStats, top: usize) -> String {
    let mut out = String::new();
    let events: Vec<&str> = stats.events.iter().map(|event| event.name()).collect();
    let _ = writeln!(
        out,
        "openprof: {}, allocations ({}): {} bytes in {} objects allocated, {} bytes in {} \
         objects live; sorted by {}",
        stats.source,
        events.join(", "),
        stats.totals[0],
        stats.totals[1],
        stats.totals[2],
        stats.totals[3],
        stats.sorted_by.name()
    );
    for (title, rows) in [
        ("By class allocated", &stats.by_class),
        ("By allocating method", &stats.by_method),
        ("By site (class, allocating method)", &stats.by_site),
    ] {
        let _ = writeln!(
            out,
            "\n{title}:\n rank  alloc bytes      %  alloc objs   live bytes      %   live objs  name"
        );
        for (rank, row) in rows.iter().take(top).enumerate() {
            let _ = writeln!(
                out,
                "{:5} {:12} {:5.1}% {:11} {:12} {:5.1}% {:11}  {}{}",
                rank + 1,
                row.alloc_bytes,
                row.alloc_bytes_percent,
                row.alloc_objects,
                row.live_bytes,
                row.live_bytes_percent,
                row.live_objects,
                allocation_name(row),
                on_thread(row.thread.as_ref())
            );
        }
        more(&mut out, rows.len(), top);
    }
    out
}

fn allocation_name(row: &AllocationRow) -> String {
    match (&row.class, &row.method) {
        (Some(class), Some(method)) => format!("{class} in {method}"),
        (Some(name), None) | (None, Some(name)) => name.clone(),
        (None, None) => String::new(),
    }
}

fn render_threads(
    stats: &ThreadStats,
    timeline: &std::result::Result<ThreadTimeline, String>,
    top: usize,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "openprof: {}, {} threads, sorted by {}",
        stats.source,
        stats.threads.len(),
        stats.sorted_by.name()
    );
    // The columns of the figures some thread has.
    type Column = (
        &'static str,
        fn(&ThreadStatsRow) -> String,
        fn(&ThreadStatsRow) -> u64,
    );
    let columns: [Column; 9] = [
        (
            "cpu samples",
            |row| row.cpu_samples.to_string(),
            |row| row.cpu_samples,
        ),
        (
            "cpu %",
            |row| format!("{:.2}%", row.cpu_percent),
            |row| row.cpu_samples,
        ),
        (
            "cpu time ms",
            |row| ms(row.cpu_time_ns),
            |row| row.cpu_time_ns,
        ),
        (
            "wall samples",
            |row| row.wall_samples.to_string(),
            |row| row.wall_samples,
        ),
        (
            "wall %",
            |row| format!("{:.2}%", row.wall_percent),
            |row| row.wall_samples,
        ),
        ("lock ms", |row| ms(row.lock_ns), |row| row.lock_ns),
        ("blocked ms", |row| ms(row.blocked_ns), |row| row.blocked_ns),
        ("parked ms", |row| ms(row.parked_ns), |row| row.parked_ns),
        (
            "alloc bytes",
            |row| row.alloc_bytes.to_string(),
            |row| row.alloc_bytes,
        ),
    ];
    let shown: Vec<&Column> = columns
        .iter()
        .filter(|(_, _, has)| stats.threads.iter().any(|row| has(row) > 0))
        .collect();
    let _ = write!(out, "\n rank");
    for (header, _, _) in &shown {
        let _ = write!(out, " {header:>12}");
    }
    let _ = writeln!(out, "  thread");
    for (rank, row) in stats.threads.iter().take(top).enumerate() {
        let _ = write!(out, "{:5}", rank + 1);
        for (_, value, _) in &shown {
            let _ = write!(out, " {:>12}", value(row));
        }
        let _ = writeln!(
            out,
            "  {}{}",
            row.name,
            row.thread_id
                .map(|id| format!(" tid={id}"))
                .unwrap_or_default()
        );
    }
    more(&mut out, stats.threads.len(), top);
    let states: Vec<&ThreadStatsRow> = stats
        .threads
        .iter()
        .take(top)
        .filter(|row| {
            !row.wall_states.is_empty()
                || row.monitor_blocked.is_some()
                || row.monitor_waited.is_some()
        })
        .collect();
    if !states.is_empty() {
        let _ = writeln!(
            out,
            "\nWall-clock samples by state, monitor waits (traces):"
        );
        for row in states {
            let mut parts: Vec<String> = row
                .wall_states
                .iter()
                .map(|(state, samples)| format!("{state} {samples}"))
                .collect();
            for (what, durations) in [
                ("blocked entering", &row.monitor_blocked),
                ("waited", &row.monitor_waited),
            ] {
                if let Some(durations) = durations {
                    parts.push(format!(
                        "{what} {} times, {} ms",
                        durations.count,
                        ms(durations.total_ns)
                    ));
                }
            }
            let _ = writeln!(out, "  {}: {}", row.name, parts.join(", "));
        }
    }
    match timeline {
        Ok(timeline) => {
            let _ = writeln!(
                out,
                "\nTimeline of {} ({}), buckets of {} ms from {:.3} s:",
                timeline.event.name(),
                unit_name(timeline.unit),
                ms(timeline.bucket_ns),
                timeline.start_ns as f64 / 1e9
            );
            for thread in timeline.threads.iter().take(top) {
                let values: Vec<String> = thread
                    .values
                    .iter()
                    .map(|value| amount(timeline.unit, *value))
                    .collect();
                let _ = writeln!(out, "  {}: {}", thread.name, values.join(" "));
            }
        }
        Err(note) => {
            let _ = writeln!(out, "\nNo timeline: {note}");
        }
    }
    out
}

type ThreadStatsRow = openprof_analysis::statistics::ThreadRow;

fn group_table(out: &mut String, title: &str, rows: &[WeightedRow], unit: Unit, top: usize) {
    let _ = writeln!(out, "\n{title}:");
    weighted_table(out, rows, unit, top, "", |row| (row, String::new()));
}

fn render_components(stats: &ComponentStats, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "openprof: {}, {}: {} {} (self: where it is spent; total: where it passes)",
        stats.source,
        stats.event.name(),
        amount(stats.unit, stats.total_value),
        unit_name(stats.unit)
    );
    if let (Some(rules), Some(components)) = (&stats.rules, &stats.components) {
        let mut named: Vec<(&str, Vec<&str>)> = Vec::new();
        for rule in rules {
            match named.iter_mut().find(|(name, _)| *name == rule.component) {
                Some((_, patterns)) => patterns.push(&rule.pattern),
                None => named.push((&rule.component, vec![&rule.pattern])),
            }
        }
        let rules: Vec<String> = named
            .iter()
            .map(|(name, patterns)| format!("{name} = {}", patterns.join(", ")))
            .collect();
        group_table(
            &mut out,
            &format!("By component ({})", rules.join("; ")),
            components,
            stats.unit,
            top,
        );
    }
    group_table(&mut out, "By package", &stats.packages, stats.unit, top);
    match (&stats.loaders, &stats.loaders_note) {
        (Some(loaders), _) => group_table(&mut out, "By class loader", loaders, stats.unit, top),
        (None, Some(note)) => {
            let _ = writeln!(out, "\nBy class loader: none, {note}");
        }
        (None, None) => {}
    }
    out
}

fn render_resource(stats: &ResourceStats, event: Option<Event>, top: usize) -> String {
    let mut out = String::new();
    let resource = &stats.resource;
    let _ = writeln!(
        out,
        "openprof: {} {}{}{}{}",
        resource.kind.name(),
        resource.name,
        resource
            .thread_id
            .map(|id| format!(" tid={id}"))
            .unwrap_or_default(),
        stats
            .parent
            .as_ref()
            .map(|parent| format!(", in {} {}", parent.kind.name(), parent.name))
            .unwrap_or_default(),
        stats
            .loader
            .as_ref()
            .map(|loader| format!(", loader {loader}"))
            .unwrap_or_default()
    );
    let shown = |row_event: Event| event.is_none_or(|event| event == row_event);
    if stats.events.iter().any(|weights| shown(weights.event)) {
        let _ = writeln!(
            out,
            "\n event               self %  total %         self        total  unit"
        );
    }
    for weights in stats.events.iter().filter(|weights| shown(weights.event)) {
        let _ = writeln!(
            out,
            " {:<18} {:6.2}% {:7.2}% {:>12} {:>12}  {}",
            weights.event.name(),
            weights.self_percent,
            weights.total_percent,
            amount(weights.unit, weights.weights.self_value),
            amount(weights.unit, weights.weights.total_value),
            unit_name(weights.unit)
        );
    }
    for (title, weights) in [
        ("Allocated of it", &stats.allocated),
        ("Waits for its locks", &stats.waited_on),
    ] {
        if weights.iter().any(|weights| shown(weights.event)) {
            let parts: Vec<String> = weights
                .iter()
                .filter(|weights| shown(weights.event))
                .map(|weights| {
                    format!(
                        "{} {} {} ({:.2}%)",
                        weights.event.name(),
                        amount(weights.unit, weights.weights.total_value),
                        unit_name(weights.unit),
                        weights.total_percent
                    )
                })
                .collect();
            let _ = writeln!(out, "\n{title}: {}", parts.join(", "));
        }
    }
    if let Some(calls) = &stats.calls {
        let mut line = format!("\nCalls: {}", calls.calls);
        if let Some(wall) = &calls.wall {
            let _ = write!(
                line,
                "; wall per call: mean {} ms, min {} ms, max {} ms",
                ms(wall.mean_ns),
                ms(wall.min_ns),
                ms(wall.max_ns)
            );
        }
        if let Some(cpu) = &calls.cpu {
            let _ = write!(line, "; own CPU per call: mean {} ms", ms(cpu.self_mean_ns));
            if let (Some(min), Some(max)) = (cpu.self_min_ns, cpu.self_max_ns) {
                let _ = write!(line, ", min {} ms, max {} ms", ms(min), ms(max));
            }
            let _ = write!(line, "; with callees: mean {} ms", ms(cpu.total_mean_ns));
        }
        let _ = writeln!(out, "{line}");
    }
    for (title, rows) in [
        ("Callers", &stats.callers),
        ("Callees", &stats.callees),
        ("Contents", &stats.contents),
        ("Threads", &stats.threads),
        ("Allocates", &stats.allocations),
        ("Allocated by", &stats.allocated_by),
        ("Waiters on its locks", &stats.lock_waiters),
    ] {
        related_table(&mut out, title, rows, &shown, top);
    }
    let states: Vec<String> = stats
        .states
        .iter()
        .filter(|row| shown(row.event))
        .map(|row| {
            format!(
                "{} {} {}",
                row.event.name(),
                row.state,
                row.weights.total_value
            )
        })
        .collect();
    if !states.is_empty() {
        let _ = writeln!(out, "\nBy thread state: {}", states.join(", "));
    }
    if !stats.lock_waits.is_empty() {
        let _ = writeln!(
            out,
            "\nLock waits (self: waiting here; total: on the stack):"
        );
        for row in stats
            .lock_waits
            .iter()
            .filter(|row| shown(row.event))
            .take(top)
        {
            let _ = writeln!(
                out,
                "  {} {}, {}: self {} ms in {} waits, total {} ms in {} waits",
                row.event.name(),
                row.state.as_deref().unwrap_or("[no state]"),
                row.lock_class.as_deref().unwrap_or("[no lock class]"),
                ms(row.weights.self_value),
                row.weights.self_count,
                ms(row.weights.total_value),
                row.weights.total_count
            );
        }
    }
    if !stats.mpt.is_empty() {
        let _ = writeln!(
            out,
            "\nMethod parameter tracing (`openprof mpt` ranks the values):"
        );
        for table in &stats.mpt {
            let _ = writeln!(
                out,
                "  {}: {} calls, {} values, {} unfinished",
                table.spec,
                table.calls,
                table.values.len(),
                table.unfinished
            );
        }
    }
    out
}

fn related_table(
    out: &mut String,
    title: &str,
    rows: &[Related],
    shown: &dyn Fn(Event) -> bool,
    top: usize,
) {
    let rows: Vec<&Related> = rows.iter().filter(|row| shown(row.event)).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{title}:\n event              self %  total %         self        total  name"
    );
    let mut shown_of_event = 0;
    let mut last_event = None;
    for row in rows {
        if last_event != Some(row.event) {
            last_event = Some(row.event);
            shown_of_event = 0;
        }
        shown_of_event += 1;
        if shown_of_event > top {
            continue;
        }
        let unit = row.event.unit();
        let _ = writeln!(
            out,
            " {:<17} {:6.2}% {:7.2}% {:>12} {:>12}  {}{}",
            row.event.name(),
            row.self_percent,
            row.total_percent,
            amount(unit, row.weights.self_value),
            amount(unit, row.weights.total_value),
            row.resource.name,
            row.resource
                .thread_id
                .map(|id| format!(" tid={id}"))
                .unwrap_or_default()
        );
    }
}

fn render_diff(diff: &StatsDiff, top: usize) -> String {
    let mut out = String::new();
    let unit = unit_name(diff.unit);
    let what = match diff.kind {
        DiffKind::Methods => "methods",
        DiffKind::Allocations => "allocated classes",
        DiffKind::Threads => "threads",
        DiffKind::Components => "components",
    };
    let _ = writeln!(
        out,
        "openprof: {} against {}, {} by {}: {} {unit} against {}",
        diff.new_source,
        diff.base_source,
        diff.event.name(),
        what,
        amount(diff.unit, diff.new_total),
        amount(diff.unit, diff.base_total)
    );
    let _ = writeln!(
        out,
        "\n    self: base %    new %   change   total: base %    new %   change {:>20}  name",
        format!("self change {unit}")
    );
    for row in diff.rows.iter().take(top) {
        let _ = writeln!(
            out,
            "          {:6.2}%  {:6.2}%  {:+7.2}           {:6.2}%  {:6.2}%  {:+7.2} {:>20}  {}",
            row.base_self_percent,
            row.new_self_percent,
            row.self_percent_change,
            row.base_total_percent,
            row.new_total_percent,
            row.total_percent_change,
            signed(diff.unit, row.self_change),
            row.name
        );
    }
    more(&mut out, diff.rows.len(), top);
    out
}

fn signed(unit: Unit, value: i64) -> String {
    match unit {
        Unit::Nanoseconds => format!("{:+.3}", value as f64 / 1e6),
        _ => format!("{value:+}"),
    }
}
