//! Profiles read from the store for the UI: an agent's HPROF output (up to a frame, for a
//! snapshot), a trace, a snapshot's period (its reading less the one before). Reading is
//! the views' own (`inputs::read_file`); a profile stays cached while the store holds nothing
//! newer for its source, so switching views and statistics does not read it again.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::{Arc, Mutex};

use openprof_analysis::inputs;
use openprof_analysis::profile::Profile;
use openprof_collector::store::{ExportOptions, Store};
use openprof_format::hprof_text::mpt::format_value;
use openprof_format::mpt_stats::MptTable;
use openprof_format::wire::FrameKind;
use uuid::Uuid;

/// Where a profile comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// An agent's HPROF output (format=a or b), up to a sequence number (all of it: `None`).
    Agent { agent: Uuid, upto: Option<u64> },
    /// A trace (format=x), as a document.
    Trace(Uuid),
}

/// Why a profile could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unreadable(String),
}

/// Profiles by source and the store's mark for it (an agent's last sequence, a trace's
/// elements), the last few used.
#[derive(Default)]
pub struct ProfileCache {
    entries: Mutex<VecDeque<(Source, u128, Arc<Profile>)>>,
}

/// Profiles kept: each can be large (a million samples), and the UI looks at a few at a time.
const CACHED: usize = 6;

/// What was made from profiles, by what was asked and how far the store went for its
/// sources, the last few used: views (a flame graph page, its data, a table) and statistics
/// indexes, so that going back to one is not folding a million samples again.
pub struct Kept<T> {
    entries: Mutex<VecDeque<(String, Arc<T>)>>,
    capacity: usize,
}

impl<T> Kept<T> {
    pub fn new(capacity: usize) -> Kept<T> {
        Kept {
            entries: Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    /// What is kept under `key`, made by `make` when nothing is.
    pub fn get_or_make<E>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        {
            let mut entries = crate::api::lock(&self.entries);
            if let Some(at) = entries.iter().position(|(cached, _)| *cached == key) {
                let entry = entries.remove(at).expect("found");
                let kept = entry.1.clone();
                entries.push_front(entry);
                return Ok(kept);
            }
        }
        let made = Arc::new(make()?);
        let mut entries = crate::api::lock(&self.entries);
        entries.push_front((key, made.clone()));
        entries.truncate(self.capacity);
        Ok(made)
    }
}

/// Views kept; a large profile's page is a few megabytes.
pub const VIEWS_KEPT: usize = 24;
/// Statistics indexes kept; one of a million samples takes about 100 MiB.
pub const INDEXES_KEPT: usize = 3;

impl ProfileCache {
    /// The profile of `source`, read again only when the store has more for it.
    pub fn get(&self, store: &dyn Store, source: &Source) -> Result<Arc<Profile>, ProfileError> {
        let mark = mark_of(store, source)?;
        {
            let mut entries = crate::api::lock(&self.entries);
            if let Some(at) = entries
                .iter()
                .position(|(cached, cached_mark, _)| cached == source && *cached_mark == mark)
            {
                let entry = entries.remove(at).expect("found");
                let profile = entry.2.clone();
                entries.push_front(entry);
                return Ok(profile);
            }
        }
        let profile = Arc::new(read(store, source)?);
        let mut entries = crate::api::lock(&self.entries);
        entries.retain(|(cached, _, _)| cached != source);
        entries.push_front((source.clone(), mark, profile.clone()));
        entries.truncate(CACHED);
        Ok(profile)
    }
}

/// What the store holds for a source now: changes whenever there is more to read.
pub fn mark_of(store: &dyn Store, source: &Source) -> Result<u128, ProfileError> {
    let catalog = store
        .catalog()
        .map_err(|error| ProfileError::Unreadable(error.to_string()))?;
    match source {
        Source::Agent { agent, upto } => {
            let entry = catalog
                .agents
                .iter()
                .find(|entry| entry.agent == *agent)
                .ok_or_else(|| ProfileError::NotFound(format!("no agent {agent} in the store")))?;
            Ok(u128::from(upto.unwrap_or(entry.last_sequence)))
        }
        Source::Trace(trace) => catalog
            .traces
            .iter()
            .find(|entry| entry.trace == *trace)
            .map(|entry| u128::from(entry.elements) ^ (entry.last_collation << 64))
            .ok_or_else(|| ProfileError::NotFound(format!("no trace {trace} in the store"))),
    }
}

/// Reads a source's profile from the store, through a private temporary file (what the
/// application did is its owner's only).
pub fn read(store: &dyn Store, source: &Source) -> Result<Profile, ProfileError> {
    let unreadable = |error: &dyn std::fmt::Display| ProfileError::Unreadable(error.to_string());
    let mut file = tempfile::Builder::new()
        .prefix("openprof-web-")
        .tempfile()
        .map_err(|error| unreadable(&error))?;
    let name = match source {
        Source::Agent { agent, upto } => {
            let mut out = std::io::BufWriter::new(file.as_file_mut());
            let mut any = false;
            store
                .replay_agent(*agent, &mut |kind, sequence, body| {
                    if kind == FrameKind::Hprof && upto.is_none_or(|upto| sequence <= upto) {
                        any = true;
                        out.write_all(body)?;
                    }
                    Ok(())
                })
                .map_err(|error| unreadable(&error))?;
            out.flush().map_err(|error| unreadable(&error))?;
            if !any {
                return Err(ProfileError::NotFound(format!(
                    "agent {agent} has sent no profile yet (HPROF output comes at its dumps: \
                     the live view asks for one)"
                )));
            }
            format!("agent {agent}")
        }
        Source::Trace(trace) => {
            let mut out = std::io::BufWriter::new(file.as_file_mut());
            store
                .export_trace(*trace, ExportOptions::default(), &mut out)
                .map_err(|error| unreadable(&error))?;
            out.flush().map_err(|error| unreadable(&error))?;
            format!("trace {trace}")
        }
    };
    let mut profile =
        inputs::read_file(file.path(), &mut |_| {}).map_err(|error| unreadable(&error))?;
    profile.source = name;
    Ok(profile)
}

/// Method parameter tracing as an agent's HPROF text holds it: the MPT record of every dump
/// (the last holds the figures), and the samples taken inside traced calls.
pub fn mpt_of_agent(
    store: &dyn Store,
    agent: Uuid,
) -> Result<openprof_format::hprof_text::TextProfile, ProfileError> {
    let mut text = Vec::new();
    store
        .replay_agent(agent, &mut |kind, _, body| {
            if kind == FrameKind::Hprof {
                text.extend_from_slice(body);
            }
            Ok(())
        })
        .map_err(|error| ProfileError::NotFound(error.to_string()))?;
    if text.starts_with(b"JAVA PROFILE 1.0.2\0") {
        return Err(ProfileError::Unreadable(format!(
            "agent {agent} writes HPROF binary, which has no record for parameter values"
        )));
    }
    openprof_format::hprof_text::read(text.as_slice())
        .map_err(|error| ProfileError::Unreadable(format!("agent {agent}'s output: {error}")))
}

/// The samples taken inside each value's calls (method, specification, value as shown): CPU
/// and wall clock.
pub fn mpt_samples_by_value(
    profile: &openprof_format::hprof_text::TextProfile,
) -> HashMap<(String, String, String), (u64, u64)> {
    let mut samples: HashMap<(String, String, String), (u64, u64)> = HashMap::new();
    for record in &profile.mpt_samples {
        for value in &record.values {
            let counted = samples
                .entry((
                    value.method.clone(),
                    value.spec.clone(),
                    format_value(&value.key),
                ))
                .or_default();
            match record.kind {
                openprof_format::hprof_text::CpuTableKind::Wall => counted.1 += value.table.total,
                _ => counted.0 += value.table.total,
            }
        }
    }
    samples
}

/// One value's calls over time from an agent's dumps: per dump, the calls that ended since
/// the previous one and their mean wall time; seconds from the first dump (dates are to the
/// second). Dumps without a date are left out.
pub fn mpt_calls_by_dump(
    profile: &openprof_format::hprof_text::TextProfile,
    selected: &openprof_analysis::SelectedValue,
) -> Vec<serde_json::Value> {
    let parse = |date: &str| {
        chrono::NaiveDateTime::parse_from_str(date.trim(), "%a %b %e %H:%M:%S %Y").ok()
    };
    let mut points = Vec::new();
    let mut first = None;
    let (mut calls_before, mut wall_before) = (0u64, 0u64);
    for (date, tables) in &profile.mpt_dumps {
        let Some(time) = date.as_deref().and_then(parse) else {
            continue;
        };
        let first = *first.get_or_insert(time);
        let row = tables
            .iter()
            .filter(|table| table.method == selected.method && table.spec == selected.spec)
            .flat_map(|table| &table.rows)
            .find(|row| format_value(&row.key) == selected.value);
        let (calls, wall) = row.map_or((0, 0), |row| (row.calls, row.wall_total_ns));
        let (new_calls, new_wall) = (
            calls.saturating_sub(calls_before),
            wall.saturating_sub(wall_before),
        );
        (calls_before, wall_before) = (calls, wall);
        points.push(serde_json::json!({
            "t": (time - first).num_milliseconds() as f64 / 1000.0,
            "calls": new_calls,
            "wallMeanMs": (new_calls > 0).then(|| new_wall as f64 / 1e6 / new_calls as f64),
            "wallMaxMs": null,
        }));
    }
    points
}

/// One value's calls over time from a trace, exact: in at most 100 buckets of equal width from
/// the first call's start, each with its calls and their mean and longest wall time.
pub fn mpt_calls_of_trace(
    store: &dyn Store,
    trace: Uuid,
    selected: openprof_analysis::SelectedValue,
) -> Result<Vec<serde_json::Value>, ProfileError> {
    let mut document = Vec::new();
    store
        .export_trace(trace, ExportOptions::default(), &mut document)
        .map_err(|error| ProfileError::NotFound(error.to_string()))?;
    let calls = openprof_analysis::mpt_calls_from_trace(
        openprof_format::trace::reader::read_all(document.as_slice()),
        selected,
    )
    .map_err(|error| ProfileError::Unreadable(format!("trace {trace}: {error}")))?;
    let Some(first) = calls.iter().map(|call| call.start_ns).min() else {
        return Ok(Vec::new());
    };
    let last = calls
        .iter()
        .map(|call| call.start_ns)
        .max()
        .unwrap_or(first);
    let width = ((last - first) / 100 + 1).max(1_000_000);
    let mut buckets: std::collections::BTreeMap<u64, (u64, u64, u64)> = Default::default();
    for call in &calls {
        let bucket = buckets.entry((call.start_ns - first) / width).or_default();
        bucket.0 += 1;
        bucket.1 += call.wall_ns;
        bucket.2 = bucket.2.max(call.wall_ns);
    }
    Ok(buckets
        .into_iter()
        .map(|(index, (calls, wall, longest))| {
            serde_json::json!({
                "t": (index * width) as f64 / 1e9,
                "calls": calls,
                "wallMeanMs": wall as f64 / 1e6 / calls as f64,
                "wallMaxMs": longest as f64 / 1e6,
            })
        })
        .collect())
}

/// Method parameter tracing's tables of a trace: its traced calls paired and timed.
pub fn mpt_of_trace(store: &dyn Store, trace: Uuid) -> Result<Vec<MptTable>, ProfileError> {
    let mut document = Vec::new();
    store
        .export_trace(trace, ExportOptions::default(), &mut document)
        .map_err(|error| ProfileError::NotFound(error.to_string()))?;
    openprof_analysis::mpt_from_trace(openprof_format::trace::reader::read_all(
        document.as_slice(),
    ))
    .map_err(|error| ProfileError::Unreadable(format!("trace {trace}: {error}")))
}

/// The tables as the UI shows them: per method and specification, each value's calls and
/// times (milliseconds), slowest mean wall time first, as `openprof mpt` ranks them, with the
/// CPU and wall samples taken inside its calls (`samples`, where the source has them).
pub fn mpt_json(
    tables: &[MptTable],
    samples: &HashMap<(String, String, String), (u64, u64)>,
) -> serde_json::Value {
    let ms = |nanos: u64| nanos as f64 / 1e6;
    serde_json::json!({
        "methods": tables.iter().map(|table| {
            let mut rows: Vec<&openprof_format::mpt_stats::ValueStats> = table.rows.iter().collect();
            rows.sort_by(|a, b| {
                let mean = |row: &openprof_format::mpt_stats::ValueStats| row.wall_total_ns as f64 / row.calls.max(1) as f64;
                mean(b).total_cmp(&mean(a)).then(b.calls.cmp(&a.calls))
            });
            serde_json::json!({
                "method": table.method,
                "spec": table.spec,
                "unfinished": table.unfinished,
                "values": rows.iter().map(|row| {
                    let value = format_value(&row.key);
                    let (cpu, wall) = samples
                        .get(&(table.method.clone(), table.spec.clone(), value.clone()))
                        .copied()
                        .unwrap_or_default();
                    serde_json::json!({
                    "value": value,
                    "cpuSamples": cpu,
                    "wallSamples": wall,
                    "calls": row.calls,
                    "wallMeanMs": ms(row.wall_total_ns) / row.calls.max(1) as f64,
                    "wallMaxMs": ms(row.wall_max_ns),
                    "wallTotalMs": ms(row.wall_total_ns),
                    "cpuMeanMs": ms(row.cpu_total_ns) / row.calls.max(1) as f64,
                    "cpuMaxMs": ms(row.cpu_max_ns),
                })}).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}
