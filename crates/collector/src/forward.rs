//! The forwarder thread of `openprof serve --clickhouse` and `--pyroscope`: it follows every
//! HPROF agent's frames (binary or text) in the collector's own store, decodes the profile
//! windows in them and hands a [`WindowSink`] those it does not hold yet, retrying while the
//! sink is away. A sink that keeps traces also gets format=x agents' trace elements, and the
//! node → process → agent → trace hierarchy above them.
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

use crate::elements::{element_rows, ElementRow};
use crate::store::{AgentEntry, Catalog, Store, TraceEntry};
use crate::windows::{Window, WindowDecoder};

/// How often the forwarder looks for new windows.
const FORWARD_PERIOD: Duration = Duration::from_secs(1);
/// How many windows and elements a pass gathers before it hands them over (more wait for the
/// next pass); one agent catching up is handed over whole.
const BATCH_ROWS: usize = 100_000;
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
    /// Whether `agent`'s id belongs to the identity key this collector bound it to, where
    /// several collectors' data meets in the sink: the first key that claims an id there keeps
    /// it. `false`: another collector's agent holds the id, and this one's windows stay in the
    /// store; `None`: not known yet, ask again next pass. A sink whose rows can't mix agents
    /// of different collectors takes every agent.
    fn claim_agent(&mut self, _agent: &AgentEntry) -> Result<Option<bool>, String> {
        Ok(Some(true))
    }
    /// The highest frame sequence of `agent` all of whose windows the sink holds (0: none):
    /// the forwarder hands it only windows above it.
    fn resume_point(&mut self, agent: Uuid) -> Result<u64, String>;
    /// Records an agent (with its node and process, which `catalog` holds) before its first
    /// windows or elements go in, where the sink keeps agents apart.
    fn record_agent(&mut self, _agent: &AgentEntry, _catalog: &Catalog) -> Result<(), String> {
        Ok(())
    }
    /// Whether it keeps format=x agents' trace elements; if not, those agents are not followed.
    fn takes_traces(&self) -> bool {
        false
    }
    /// Records the traces of the agents followed, as the store has them now (elements, ended):
    /// called every pass, so a sink inserts only what changed.
    fn record_traces(&mut self, _traces: &[TraceEntry]) -> Result<(), String> {
        Ok(())
    }
    /// Housekeeping between passes (retention); errors are logged and the forwarding goes on.
    fn maintain(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Takes what a pass gathered: for each agent, its windows (and trace elements, where the
    /// sink takes traces) in the order of its stream, all above its resume point. Batched
    /// across agents, so that a store built for few large inserts gets them. On `Err` the
    /// forwarder starts over from [`WindowSink::resume_point`].
    fn insert(&mut self, batch: &[AgentBatch]) -> Result<(), String>;
}

/// What one pass took from the store for one agent.
pub struct AgentBatch<'a> {
    pub agent: &'a AgentEntry,
    pub windows: Vec<Window>,
    pub elements: Vec<ElementRow>,
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
    /// Whether the sink granted its id to its identity key; `None` until asked.
    claimed: Option<bool>,
    /// Why its stream can't be read, once said.
    unreadable: bool,
}

/// Forwards every HPROF agent's windows from `store` to `sink` until `stop`.
pub fn forward(store: Arc<dyn Store>, mut sink: impl WindowSink, stop: Arc<AtomicBool>) {
    let mut followed: HashMap<Uuid, Followed> = HashMap::new();
    let mut prepared = false;
    let mut failing: Option<String> = None;
    let mut next = Instant::now();
    let mut pass = 0usize;
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
            // HPROF text and binary have windows; traces (format x) have elements.
            let takes_traces = sink.takes_traces();
            let agents: Vec<&AgentEntry> = (catalog.agents.iter())
                .filter(|agent| {
                    matches!(agent.format.as_str(), "a" | "b")
                        || (takes_traces && agent.format == "x")
                })
                .collect();
            // Each pass starts at another agent, so that a full batch delays no one for long.
            pass += 1;
            let mut batch = Vec::new();
            let mut rows = 0;
            for index in 0..agents.len() {
                if rows >= BATCH_ROWS {
                    break;
                }
                let agent = agents[(pass + index) % agents.len()];
                let state = followed.entry(agent.agent).or_default();
                if let Some(taken) = read_agent(&*store, &mut sink, agent, state)? {
                    rows += taken.windows.len() + taken.elements.len();
                    if !state.recorded {
                        sink.record_agent(agent, &catalog)?;
                        state.recorded = true;
                    }
                    batch.push(taken);
                }
            }
            if !batch.is_empty() {
                sink.insert(&batch)?;
            }
            if takes_traces {
                let traces: Vec<TraceEntry> = (catalog.traces.iter())
                    .filter(|trace| followed.contains_key(&trace.agent))
                    .cloned()
                    .collect();
                sink.record_traces(&traces)?;
            }
            Ok::<(), String>(())
        })();
        if result.is_ok() {
            if let Err(why) = sink.maintain() {
                tracing::warn!("{}: {why}", sink.name());
            }
        }
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

/// The windows (or trace elements) of `agent` stored since the forwarder last looked and not
/// in the sink yet, if there are any. The state moves on as if the sink took them: when it
/// does not, the forwarder forgets every state and starts over.
fn read_agent<'a>(
    store: &dyn Store,
    sink: &mut impl WindowSink,
    agent: &'a AgentEntry,
    state: &mut Followed,
) -> Result<Option<AgentBatch<'a>>, String> {
    if state.unreadable || state.claimed == Some(false) {
        return Ok(None);
    }
    if state.claimed.is_none() {
        let Some(claimed) = sink.claim_agent(agent)? else {
            return Ok(None);
        };
        if !claimed {
            tracing::warn!(
                "agent {}: its windows are not forwarded to {}: another collector's agent \
                 holds that id with another identity key",
                agent.agent,
                sink.name()
            );
        }
        state.claimed = Some(claimed);
        if !claimed {
            return Ok(None);
        }
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
        return Ok(None);
    }
    let mut windows = Vec::new();
    let mut elements = Vec::new();
    let mut unreadable = None;
    let decoder = &mut state.decoder;
    let mut fed = state.fed;
    store
        .frames_after(agent.agent, state.fed, &mut |frame| {
            fed = frame.sequence;
            if unreadable.is_some() {
                return Ok(());
            }
            match frame.kind {
                FrameKind::Hprof => {
                    match decoder.feed(frame.body, frame.sequence, frame.received_ns) {
                        Ok(decoded) => windows.extend(
                            decoded
                                .into_iter()
                                .filter(|window| window.sequence > forwarded),
                        ),
                        Err(why) => unreadable = Some(why),
                    }
                }
                // Fragments are whole in their frame: only those above the sink's are read.
                FrameKind::Fragment if frame.sequence > forwarded => {
                    match element_rows(frame.body, frame.sequence, frame.received_ns) {
                        Ok(rows) => elements.extend(rows),
                        Err(why) => unreadable = Some(why),
                    }
                }
                _ => {}
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
        // Nothing more is decoded: what the decoder holds goes now.
        state.decoder = WindowDecoder::default();
        return Ok(None);
    }
    state.fed = fed;
    if agent.finished && fed >= agent.last_sequence {
        // The agent said goodbye and all it sent is decoded: no record is left to complete.
        state.decoder = WindowDecoder::default();
    }
    if windows.is_empty() && elements.is_empty() {
        return Ok(None);
    }
    let last_window = windows.last().map(|window| window.sequence);
    let last_element = elements.last().map(|element| element.sequence);
    state.forwarded = last_window.max(last_element);
    Ok(Some(AgentBatch {
        agent,
        windows,
        elements,
    }))
}
