//! Calls between JVMs, joined: an agent's invocationContext names the methodCall another agent
//! made (its agent, thread and ticket; carried in the request, docs/call-tracing.md), and the
//! methodEntry it belongs to. Joining the stored traces puts the callee's entry under the
//! caller's call, both agents' times on the collector's clock (each trace exported with its
//! agent's clock offset applied).

use std::collections::HashMap;

use openprof_format::trace::reader::read_all;
use openprof_format::trace::TraceElement;
use serde::Serialize;
use uuid::Uuid;

use crate::store::{ExportOptions, Store, StoreError};

/// One call from one agent's method into another agent's, joined.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinedCall {
    pub caller_agent: Uuid,
    pub caller_thread: u32,
    /// The traced method that made the call (its innermost open entry), if any.
    pub caller_method: Option<String>,
    /// What the call named (the methodCall's method, e.g. `java.net.HttpURLConnection.connect`).
    pub called: String,
    /// The methodCall's and methodReturn's times, ns on the collector's clock.
    pub call_ns: Option<u128>,
    pub return_ns: Option<u128>,
    pub callee_agent: Uuid,
    pub callee_thread: u32,
    pub callee_method: String,
    /// The callee's methodEntry's and methodExit's times, ns on the collector's clock.
    pub entry_ns: Option<u128>,
    pub exit_ns: Option<u128>,
    /// How far apart the two agents' times may be on the collector's clock: the sum of their
    /// clock offsets' error bounds (half the shortest heartbeat round trip each), when both
    /// are known. The callee's entry and exit lie within the caller's call up to this.
    pub clock_error_ns: Option<u64>,
}

/// A call or an entry, by (agent, thread, ticket).
#[derive(Clone, Default)]
struct Span {
    method: String,
    /// For a call: the traced method open when it was made.
    within: Option<String>,
    start: Option<u128>,
    end: Option<u128>,
}

type Key = (Uuid, u32, u128);

/// What the traces of a store say about calls between agents.
#[derive(Default)]
struct Calls {
    calls: HashMap<Key, Span>,
    entries: HashMap<Key, Span>,
    /// (the callee's agent, its invocationContext: the caller's key, the callee entry's thread
    /// and ticket).
    contexts: Vec<(Uuid, Key, u32, u128)>,
}

impl Calls {
    /// Reads one exported trace of `agent`.
    fn read(&mut self, agent: Uuid, document: &[u8]) -> Result<(), StoreError> {
        let mut classes: HashMap<u32, String> = HashMap::new();
        let mut methods: HashMap<u32, String> = HashMap::new();
        // Per thread, the open entries' tickets and methods.
        let mut open: HashMap<u32, Vec<(u128, String)>> = HashMap::new();
        let name = |methods: &HashMap<u32, String>, id: Option<u32>| {
            id.and_then(|id| methods.get(&id).cloned())
                .unwrap_or_else(|| "?".to_string())
        };
        for element in read_all(document) {
            let element = element.map_err(|error| {
                StoreError::Other(format!("a stored trace of agent {agent}: {error}"))
            })?;
            match element {
                TraceElement::ClassDef(class) => {
                    if let (Some(id), Some(name)) = (class.class_id, class.name) {
                        classes.insert(id, name);
                    }
                }
                TraceElement::MethodDef(method) => {
                    if let (Some(id), Some(name)) = (method.method_id, method.name) {
                        let class = method
                            .class_id_ref
                            .and_then(|class| classes.get(&class).cloned())
                            .unwrap_or_default();
                        methods.insert(id, format!("{class}.{name}"));
                    }
                }
                TraceElement::MethodEntry(entry) => {
                    let (Some(thread), Some(ticket)) = (entry.thread_id_ref, entry.ticket) else {
                        continue;
                    };
                    let method = name(&methods, entry.method_id_ref);
                    open.entry(thread)
                        .or_default()
                        .push((ticket.0, method.clone()));
                    self.entries.insert(
                        (agent, thread, ticket.0),
                        Span {
                            method,
                            within: None,
                            start: entry.time.map(|time| time.as_nanos()),
                            end: None,
                        },
                    );
                }
                TraceElement::MethodExit(exit) => {
                    let (Some(thread), Some(ticket)) = (exit.thread_id_ref, exit.ticket) else {
                        continue;
                    };
                    if let Some(stack) = open.get_mut(&thread) {
                        stack.retain(|(open, _)| *open != ticket.0);
                    }
                    if let Some(span) = self.entries.get_mut(&(agent, thread, ticket.0)) {
                        span.end = exit.time.map(|time| time.as_nanos());
                    }
                }
                TraceElement::MethodCall(call) => {
                    let (Some(thread), Some(ticket)) = (call.thread_id_ref, call.ticket) else {
                        continue;
                    };
                    let within = open
                        .get(&thread)
                        .and_then(|stack| stack.last())
                        .map(|(_, method)| method.clone());
                    self.calls.insert(
                        (agent, thread, ticket.0),
                        Span {
                            method: name(&methods, call.method_id_ref),
                            within,
                            start: call.time.map(|time| time.as_nanos()),
                            end: None,
                        },
                    );
                }
                TraceElement::MethodReturn(back) => {
                    let (Some(thread), Some(ticket)) = (back.thread_id_ref, back.ticket) else {
                        continue;
                    };
                    if let Some(span) = self.calls.get_mut(&(agent, thread, ticket.0)) {
                        span.end = back.time.map(|time| time.as_nanos());
                    }
                }
                TraceElement::InvocationContext(context) => {
                    let (Some(caller), Some(thread), Some(ticket)) =
                        (context.agent_id_ref, context.thread_id_ref, context.ticket)
                    else {
                        continue;
                    };
                    let (Some(entry_thread), Some(entry_ticket)) =
                        (context.entry_thread_id_ref, context.entry_ticket)
                    else {
                        continue;
                    };
                    self.contexts.push((
                        agent,
                        (caller, thread, ticket.0),
                        entry_thread,
                        entry_ticket.0,
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn joined(self, clock_errors: &HashMap<Uuid, u64>) -> Vec<JoinedCall> {
        let mut joined = Vec::new();
        for (callee_agent, caller, entry_thread, entry_ticket) in self.contexts {
            let (Some(call), Some(entry)) = (
                self.calls.get(&caller),
                self.entries
                    .get(&(callee_agent, entry_thread, entry_ticket)),
            ) else {
                continue;
            };
            joined.push(JoinedCall {
                caller_agent: caller.0,
                caller_thread: caller.1,
                caller_method: call.within.clone(),
                called: call.method.clone(),
                call_ns: call.start,
                return_ns: call.end,
                callee_agent,
                callee_thread: entry_thread,
                callee_method: entry.method.clone(),
                entry_ns: entry.start,
                exit_ns: entry.end,
                clock_error_ns: clock_errors
                    .get(&caller.0)
                    .zip(clock_errors.get(&callee_agent))
                    .map(|(caller, callee)| caller + callee),
            });
        }
        joined.sort_by_key(|call| (call.call_ns, call.entry_ns));
        joined
    }
}

/// Every call between two agents of the store whose both ends it holds, in the order they
/// were made.
pub fn join_calls(store: &dyn Store) -> Result<Vec<JoinedCall>, StoreError> {
    let catalog = store.catalog()?;
    let mut calls = Calls::default();
    for trace in &catalog.traces {
        let mut document = Vec::new();
        store.export_trace(
            trace.trace,
            ExportOptions { align_clock: true },
            &mut document,
        )?;
        calls.read(trace.agent, &document)?;
    }
    let clock_errors: HashMap<Uuid, u64> = catalog
        .agents
        .iter()
        .filter_map(|agent| Some((agent.agent, agent.clock?.error_ns)))
        .collect();
    Ok(calls.joined(&clock_errors))
}
