//! Profiles read from the store for the UI: an agent's HPROF output (up to a frame, for a
//! snapshot), a trace, a snapshot's period (its reading less the one before). Reading is
//! the views' own (`inputs::read_file`); a profile stays cached while the store holds nothing
//! newer for its source, so switching views and statistics does not read it again.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

use openprof_analysis::inputs;
use openprof_analysis::profile::Profile;
use openprof_collector::store::{ExportOptions, Store};
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

/// Method parameter tracing's tables of an agent: its HPROF text's MPT record (written at its
/// dumps).
pub fn mpt_of_agent(store: &dyn Store, agent: Uuid) -> Result<Vec<MptTable>, ProfileError> {
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
    let profile = openprof_format::hprof_text::read(text.as_slice())
        .map_err(|error| ProfileError::Unreadable(format!("agent {agent}'s output: {error}")))?;
    Ok(profile.mpt)
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
/// times (milliseconds), slowest mean wall time first, as `openprof mpt` ranks them.
pub fn mpt_json(tables: &[MptTable]) -> serde_json::Value {
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
                "values": rows.iter().map(|row| serde_json::json!({
                    "value": openprof_format::hprof_text::mpt::format_value(&row.key),
                    "calls": row.calls,
                    "wallMeanMs": ms(row.wall_total_ns) / row.calls.max(1) as f64,
                    "wallMaxMs": ms(row.wall_max_ns),
                    "wallTotalMs": ms(row.wall_total_ns),
                    "cpuMeanMs": ms(row.cpu_total_ns) / row.calls.max(1) as f64,
                    "cpuMaxMs": ms(row.cpu_max_ns),
                })).collect::<Vec<_>>(),
            })
        }).collect::<Vec<_>>(),
    })
}
