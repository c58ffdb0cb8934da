//! `openprof fleet`: the profile of the fleet's `continuous=` windows that collectors
//! forwarded to ClickHouse, summed there for the agents and the time range asked for, and
//! written as any view (a flame graph, folded stacks, pprof, ...). `--label NAME=VALUE` takes
//! the samples with that label (a traced call's value, the application's context), in
//! ClickHouse too. `--values` and `--calls` print the traced values and the calls per method
//! from traces instead, also summed there.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use openprof_analysis::profile::Event;
use openprof_collector::clickhouse::{ClickHouse, WindowFilter};
use openprof_format::private_file::{create_private, AtALink};
use openprof_web::fleet_query::{
    check_agent_label, check_sample_label, window_event, window_event_names, FleetQuery,
};

use crate::convert_command::{write_diff_view, write_view, ViewArgs};

#[derive(Args, Debug)]
pub struct FleetArgs {
    /// ClickHouse's HTTP interface, e.g. http://127.0.0.1:8123 (as `openprof serve
    /// --clickhouse` was given).
    #[arg(long, value_name = "URL")]
    pub clickhouse: String,
    /// The database the collectors forward into.
    #[arg(long, default_value = "openprof")]
    pub database: String,
    /// Only the agents of this service (their label=service:NAME).
    #[arg(long)]
    pub service: Option<String>,
    /// Only the agents with this label, NAME:VALUE as their label= option gives it
    /// (repeatable: all of them).
    #[arg(long = "agent-label", value_name = "NAME:VALUE")]
    pub agent_labels: Vec<String>,
    /// Only this agent (its id, as `openprof ls` shows).
    #[arg(long)]
    pub agent: Option<uuid::Uuid>,
    /// Only the windows of the last DURATION (e.g. 60s, 15m, 24h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub since: String,
    /// A differential view: the windows of --since against those of the same length of time
    /// DURATION earlier (e.g. --since 1h --compare 1d: the last hour against the same hour
    /// yesterday); written as HTML or folded stacks.
    #[arg(long, value_name = "DURATION")]
    pub compare: Option<String>,
    /// Instead of a view, print the top methods (by self samples) of every BUCKET of the time
    /// range (e.g. 1m), summed in ClickHouse; --top of them a bucket.
    #[arg(long, value_name = "BUCKET", conflicts_with = "compare")]
    pub top_over_time: Option<String>,
    /// How many methods a bucket of --top-over-time lists (default 5), or --calls lists
    /// (default 20).
    #[arg(long)]
    pub top: Option<u32>,
    /// Instead of a view, print the values that method parameter tracing recorded (HPROF
    /// text agents: calls, wall and CPU time per method, specification and value), summed in
    /// ClickHouse, the most wall time first.
    #[arg(long, conflicts_with_all = ["compare", "top_over_time", "calls"])]
    pub values: bool,
    /// With --values: only this method's, as `package.Class.method(types)`.
    #[arg(long, requires = "values")]
    pub method: Option<String>,
    /// Instead of a view, print the methods called most in the traces (format=x agents with
    /// cpu=times), their methodEntry elements counted in ClickHouse.
    #[arg(long, conflicts_with_all = ["compare", "top_over_time"])]
    pub calls: bool,
    /// Instead of a view, write this trace (its id, as `openprof ls` shows it) to -o as a
    /// document (docs/trace.dtd), from the elements ClickHouse holds.
    #[arg(
        long,
        value_name = "TRACE",
        conflicts_with_all = ["compare", "top_over_time", "values", "calls"]
    )]
    pub export_trace: Option<uuid::Uuid>,
    /// The output file; its extension tells the format unless --format does (not with
    /// --top-over-time, --values or --calls, which print).
    #[arg(
        short = 'o',
        long = "output",
        required_unless_present_any = ["top_over_time", "values", "calls"]
    )]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub view: ViewArgs,
}

pub fn fleet(args: FleetArgs) -> Result<ExitCode> {
    // Windows in ClickHouse are summed per stack: they keep no threads and no sample times.
    if args.view.from.is_some() || args.view.to.is_some() {
        bail!("--from and --to are for recordings with sample times; the fleet's time range is --since");
    }
    if args.view.threads {
        bail!("--threads: the fleet's windows are summed per stack, without threads");
    }
    let since = parse_since(&args.since)?;
    let clickhouse =
        ClickHouse::new(&args.clickhouse, &args.database).map_err(anyhow::Error::msg)?;
    let mut labels = args.agent_labels.clone();
    for label in &labels {
        check_agent_label(label).map_err(|fault| anyhow!("--agent-label {label}: {fault}"))?;
    }
    if let Some(service) = &args.service {
        labels.push(format!("service:{service}"));
    }
    // Sample labels are matched in ClickHouse; the windows it sums keep none.
    let mut view = args.view.clone();
    let sample_labels = std::mem::take(&mut view.label);
    for label in &sample_labels {
        check_sample_label(label).map_err(|fault| anyhow!("--label {label}: {fault}"))?;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    // The windows' events; the view shows the one asked for, summed in ClickHouse.
    let event = match view.event.take() {
        None => Event::Cpu,
        Some(name) => window_event(&name).ok_or_else(|| {
            anyhow!(
                "--event {name}: the fleet's windows hold {}",
                window_event_names()
            )
        })?,
    };
    let query = FleetQuery::new(
        event,
        WindowFilter {
            labels,
            sample_labels,
            agent: args.agent,
            since: Some(now.saturating_sub(since)),
            ..WindowFilter::default()
        },
    );
    if args.top.is_some() && args.top_over_time.is_none() && !args.calls {
        bail!("--top: how many methods --top-over-time or --calls lists");
    }
    if let Some(trace) = args.export_trace {
        let Some(output) = &args.output else {
            bail!("--export-trace: give the document's file with -o");
        };
        // Written beside the output and renamed over it once whole: a failure leaves no
        // partial document, and an older file of that name as it was.
        let partial = output.with_extension("partial");
        let written = (|| {
            let mut file = std::io::BufWriter::new(
                // The trace holds what the application did: private, never through a link.
                create_private(&partial, AtALink::Refuse)
                    .map_err(|error| anyhow!("{} {error}", partial.display()))?,
            );
            let elements = clickhouse
                .export_trace(trace, &mut file)
                .map_err(anyhow::Error::msg)?;
            std::io::Write::flush(&mut file)
                .map_err(|error| anyhow!("{}: {error}", partial.display()))?;
            std::fs::rename(&partial, output)
                .map_err(|error| anyhow!("{}: {error}", output.display()))?;
            Ok::<u64, anyhow::Error>(elements)
        })();
        let elements = written.inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })?;
        eprintln!(
            "openprof: trace {trace}: {elements} elements to {}",
            output.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.values {
        let values = clickhouse
            .traced_values(&query.filter, args.method.as_deref())
            .map_err(anyhow::Error::msg)?;
        println!(
            "{:>8} {:>13} {:>13} {:>13}  specification  value",
            "calls", "wall mean ms", "wall max ms", "cpu mean ms"
        );
        let ms = |total: u64, calls: u64| total as f64 / calls.max(1) as f64 / 1e6;
        for value in values {
            println!(
                "{:>8} {:>13.3} {:>13.3} {:>13.3}  {}  {} {}",
                value.calls,
                ms(value.wall_total_ns, value.calls),
                ms(value.wall_max_ns, 1),
                ms(value.cpu_total_ns, value.calls),
                value.spec,
                value.value_type,
                value.value
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.calls {
        let calls = clickhouse
            .method_calls(&query.filter, args.top.unwrap_or(20))
            .map_err(anyhow::Error::msg)?;
        println!("{:>10}  method", "calls");
        for (method, count) in calls {
            println!("{count:>10}  {method}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(bucket) = &args.top_over_time {
        let bucket = parse_since(bucket).map_err(|_| {
            anyhow!("--top-over-time {bucket}: give a duration such as 10s, 1m or 1h")
        })?;
        let rows = clickhouse
            .top_methods_over_time(&query.filter, bucket, args.top.unwrap_or(5))
            .map_err(anyhow::Error::msg)?;
        println!("{:<20} {:>10}  method", "from (UTC)", event.name());
        for (start, method, samples) in rows {
            let time = openprof_collector::clickhouse::utc_text(start);
            println!("{time:<20} {samples:>10}  {method}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(output) = &args.output else {
        bail!("-o FILE: the view's output file");
    };
    let source = format!("{} at {}", args.database, args.clickhouse);
    let Some(profile) = query
        .profile(&clickhouse, source.clone())
        .map_err(anyhow::Error::msg)?
    else {
        bail!(
            "no windows in ClickHouse's {} for these agents{} in the last {}",
            args.database,
            if query.filter.sample_labels.is_empty() {
                ""
            } else {
                " and labels"
            },
            args.since
        );
    };
    if let Some(compare) = &args.compare {
        let earlier = parse_since(compare)
            .map_err(|_| anyhow!("--compare {compare}: give a duration such as 1h or 1d"))?;
        let Some(base) = query
            .earlier(earlier, now)
            .profile(&clickhouse, format!("{source}, {compare} earlier"))
            .map_err(anyhow::Error::msg)?
        else {
            bail!("--compare {compare}: no windows in ClickHouse for these agents then");
        };
        write_diff_view(&base, &profile, output, &view)?;
        return Ok(ExitCode::SUCCESS);
    }
    write_view(&profile, output, &view)?;
    Ok(ExitCode::SUCCESS)
}

/// A duration back from now, in seconds: a number with s, m, h or d.
fn parse_since(text: &str) -> Result<u64> {
    let unit = match text.chars().last() {
        Some('s') => 1,
        Some('m') => 60,
        Some('h') => 3_600,
        Some('d') => 86_400,
        _ => 0,
    };
    match text[..text.len().saturating_sub(1)].parse::<u64>() {
        Ok(number) if unit > 0 && number > 0 => Ok(number.saturating_mul(unit)),
        _ => bail!("--since {text}: give a duration such as 60s, 15m, 24h or 7d"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_seconds_to_days_and_refuses_the_rest() {
        assert_eq!(parse_since("60s").unwrap(), 60);
        assert_eq!(parse_since("2h").unwrap(), 7_200);
        assert_eq!(parse_since("7d").unwrap(), 604_800);
        for bad in ["", "5", "0s", "s", "1w", "-1h"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
