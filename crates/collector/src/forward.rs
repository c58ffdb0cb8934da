//! The forwarder thread of `openprof serve --clickhouse` and `--pyroscope`: it follows every
//! HPROF agent's frames (binary or text) in the collector's own store, decodes the profile
//! windows in them and hands a [`WindowSink`] those it does not hold yet, retrying while the
//! sink is away.
//!
//! The collector's own store stays the place that acknowledges: a window reaches a sink after
//! it was stored locally, so a sink being away loses nothing; when it is back, the forwarder
//! asks it how far each agent's windows got and carries on from there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openprof_format::wire::FrameKind;
use uuid::Uuid;

use crate::store::{AgentEntry, Store};
use crate::windows::{Window, WindowDecoder};

/// How often the forwarder looks for new windows.
const FORWARD_PERIOD: Duration = Duration::from_secs(1);
/// How long the forwarder waits after its sink failed it.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// How often the forwarder looks at its stop flag while it waits.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Where the forwarder puts windows. Errors are one line naming the sink (and its address),
/// since the forwarder logs them as they are.
pub trait WindowSink {
    /// The sink's name in log lines ("ClickHouse takes windows again").
    fn name(&self) -> &str;
    /// Makes what the sink needs before windows go in (a schema). Called before the first
    /// windows and again after every failure, when the forwarder starts over.
    fn prepare(&mut self) -> Result<(), String>;
    /// The highest frame sequence of `agent` all of whose windows the sink holds (0: none):
    /// the forwarder hands it only windows above it.
    fn resume_point(&mut self, agent: Uuid) -> Result<u64, String>;
    /// Records an agent before its first windows go in, where the sink keeps agents apart.
    fn record_agent(&mut self, _agent: &AgentEntry) -> Result<(), String> {
        Ok(())
    }
    /// Takes windows of one agent, in the order of its stream, all above its resume point.
    /// On `Err` the forwarder starts over from [`WindowSink::resume_point`].
    fn insert_windows(&mut self, agent: &AgentEntry, windows: &[Window]) -> Result<(), String>;
}

/// One agent as the forwarder follows it.
#[derive(Default)]
struct Followed {
    decoder: WindowDecoder,
    /// The last frame fed to the decoder.
    fed: u64,
    /// The last frame whose windows the sink holds; `None` until asked.
    forwarded: Option<u64>,
    recorded: bool,
    /// Why its stream can't be read, once said.
    unreadable: bool,
}

/// Forwards every HPROF agent's windows from `store` to `sink` until `stop`.
pub fn forward(store: Arc<dyn Store>, mut sink: impl WindowSink, stop: Arc<AtomicBool>) {
    let mut followed: HashMap<Uuid, Followed> = HashMap::new();
    let mut prepared = false;
    let mut failing: Option<String> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(STOP_POLL);
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + FORWARD_PERIOD;
        let result = (|| {
            if !prepared {
                sink.prepare()?;
                prepared = true;
            }
            let catalog = store
                .catalog()
                .map_err(|error| format!("the store's catalog: {error}"))?;
            // HPROF text and binary have windows; traces (format x) have none.
            let hprof_agents =
                (catalog.agents.iter()).filter(|agent| matches!(agent.format.as_str(), "a" | "b"));
            for agent in hprof_agents {
                let state = followed.entry(agent.agent).or_default();
                forward_agent(&*store, &mut sink, agent, state)?;
            }
            Ok::<(), String>(())
        })();
        match result {
            Ok(()) => {
                if failing.take().is_some() {
                    tracing::info!("{} takes windows again", sink.name());
                }
            }
            Err(why) => {
                if failing.as_deref() != Some(why.as_str()) {
                    tracing::warn!("windows wait in the store: {why}");
                }
                failing = Some(why);
                // What was decoded and not taken is read again from the store.
                followed.clear();
                prepared = false;
                next = Instant::now() + RETRY_AFTER;
            }
        }
    }
}

/// Hands `sink` the windows of `agent` stored since the forwarder last looked.
fn forward_agent(
    store: &dyn Store,
    sink: &mut impl WindowSink,
    agent: &AgentEntry,
    state: &mut Followed,
) -> Result<(), String> {
    if state.unreadable {
        return Ok(());
    }
    let forwarded = match state.forwarded {
        Some(forwarded) => forwarded,
        None => {
            let forwarded = sink.resume_point(agent.agent)?;
            state.forwarded = Some(forwarded);
            forwarded
        }
    };
    if agent.last_sequence <= state.fed {
        return Ok(());
    }
    let mut windows = Vec::new();
    let mut unreadable = None;
    let decoder = &mut state.decoder;
    let mut fed = state.fed;
    store
        .frames_after(agent.agent, state.fed, &mut |frame| {
            fed = frame.sequence;
            if frame.kind != FrameKind::Hprof || unreadable.is_some() {
                return Ok(());
            }
            match decoder.feed(frame.body, frame.sequence, frame.received_ns) {
                Ok(decoded) => windows.extend(
                    decoded
                        .into_iter()
                        .filter(|window| window.sequence > forwarded),
                ),
                Err(why) => unreadable = Some(why),
            }
            Ok(())
        })
        .map_err(|error| format!("the store, agent {}: {error}", agent.agent))?;
    if let Some(why) = unreadable {
        tracing::warn!(
            "agent {}: its windows are not forwarded to {}: {why}",
            agent.agent,
            sink.name()
        );
        state.unreadable = true;
        return Ok(());
    }
    if !windows.is_empty() {
        if !state.recorded {
            sink.record_agent(agent)?;
            state.recorded = true;
        }
        sink.insert_windows(agent, &windows)?;
        state.forwarded = windows.last().map(|window| window.sequence);
    }
    state.fed = fed;
    Ok(())
}
