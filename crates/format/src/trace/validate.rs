//! Checks a trace beyond well-formedness: every idref defined (and not yet undefined) before it
//! is used, stable ids unique, transient ids not reused while defined, tickets paired per thread,
//! stackDepth consistent with the open entries, collationValue without gaps.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::attrs::{MultiPart, ObjRef};
use super::reader::TraceReadError;
use super::TraceElement;

/// One problem, with where it is: the element's number in the stream (from 1) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub element: usize,
    pub tag: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "element {} <{}>: {}",
            self.element, self.tag, self.message
        )
    }
}

#[derive(Default)]
struct Ids {
    defined: HashSet<u64>,
    ever: HashSet<u64>,
}

impl Ids {
    /// Defines an id; a stable id may never be defined twice, a transient one not while defined.
    fn define(&mut self, id: u64, stable: bool) -> Result<(), String> {
        if self.defined.contains(&id) {
            return Err(format!("{id} is defined again while still defined"));
        }
        if stable && !self.ever.insert(id) {
            return Err(format!("{id} is a stable id defined a second time"));
        }
        self.defined.insert(id);
        Ok(())
    }

    fn undefine(&mut self, id: u64) -> bool {
        self.defined.remove(&id)
    }

    fn is_defined(&self, id: u64) -> bool {
        self.defined.contains(&id)
    }
}

/// Feeds elements one by one; [`Validator::finish`] returns the problems.
#[derive(Default)]
pub struct Validator {
    count: usize,
    problems: Vec<Problem>,
    nodes: HashSet<Uuid>,
    processes: HashSet<Uuid>,
    agents: HashSet<Uuid>,
    traces: HashMap<Uuid, u128>,
    current_trace: Option<Uuid>,
    threads: Ids,
    transient_threads: Ids,
    classes: Ids,
    methods: Ids,
    methods_of_class: HashMap<u32, Vec<u32>>,
    objects: Ids,
    line_tables: HashSet<u32>,
    /// Open method entries per thread: (ticket, stackDepth).
    open: HashMap<u32, Vec<(u128, Option<u32>)>>,
}

impl Validator {
    pub fn new() -> Self {
        Self::default()
    }

    fn problem(&mut self, tag: &str, message: String) {
        self.problems.push(Problem {
            element: self.count,
            tag: tag.to_string(),
            message,
        });
    }

    fn need(&mut self, tag: &str, what: &str, id: Option<u32>, ids: fn(&Self) -> &Ids) {
        if let Some(id) = id {
            if !ids(self).is_defined(u64::from(id)) {
                self.problem(
                    tag,
                    format!("{what} {id} is not defined (or no longer) here"),
                );
            }
        }
    }

    fn need_object(&mut self, tag: &str, reference: Option<ObjRef>) {
        if let Some(ObjRef::Id(id)) = reference {
            self.need(tag, "objIdRef", Some(id), |v| &v.objects);
        }
    }

    fn define(
        &mut self,
        tag: &str,
        what: &str,
        id: Option<u32>,
        stable: bool,
        ids: fn(&mut Self) -> &mut Ids,
    ) {
        if let Some(id) = id {
            if let Err(problem) = ids(self).define(u64::from(id), stable) {
                self.problem(tag, format!("{what} {problem}"));
            }
        }
    }

    fn collate(&mut self, tag: &str, trace: Option<Uuid>, value: Option<MultiPart>) {
        let Some(MultiPart(value)) = value else {
            return;
        };
        let Some(trace) = trace.or(self.current_trace) else {
            self.problem(tag, "a collationValue outside any trace".into());
            return;
        };
        if let Some(last) = self.traces.get_mut(&trace) {
            let expected = *last + 1;
            *last = value;
            if value != expected {
                self.problem(
                    tag,
                    format!("collationValue {value} where {expected} was due"),
                );
            }
        }
    }

    fn need_trace(&mut self, tag: &str, trace: Option<Uuid>) {
        if let Some(trace) = trace {
            if !self.traces.contains_key(&trace) {
                self.problem(tag, format!("traceIdRef {trace} is not a started trace"));
            }
        }
    }

    /// Checks one element, in stream order.
    pub fn check(&mut self, element: &TraceElement) {
        use TraceElement as E;
        self.count += 1;
        let tag = element.tag();
        match element {
            E::Node(node) => {
                self.nodes.insert(node.node_id);
            }
            E::ProcessCreate(process) => {
                if !self.nodes.contains(&process.node_id_ref) {
                    self.problem(
                        tag,
                        format!("nodeIdRef {} names no node", process.node_id_ref),
                    );
                }
                self.processes.insert(process.process_id);
            }
            E::AgentCreate(agent) => {
                if !self.processes.contains(&agent.process_id_ref) {
                    self.problem(
                        tag,
                        format!(
                            "processIdRef {} names no processCreate",
                            agent.process_id_ref
                        ),
                    );
                }
                self.agents.insert(agent.agent_id);
            }
            E::AgentDestroy(destroy) => {
                if !self.agents.remove(&destroy.agent_id_ref) {
                    self.problem(
                        tag,
                        format!("agentIdRef {} names no live agent", destroy.agent_id_ref),
                    );
                }
            }
            E::TraceStart(start) => {
                if !self.agents.contains(&start.agent_id_ref) {
                    self.problem(
                        tag,
                        format!("agentIdRef {} names no agentCreate", start.agent_id_ref),
                    );
                }
                if let Some(MultiPart(value)) = start.collation_value {
                    if value != 1 {
                        self.problem(
                            tag,
                            format!("traceStart's collationValue is {value}, not 1"),
                        );
                    }
                }
                self.traces.insert(start.trace_id, 1);
                self.current_trace = Some(start.trace_id);
                // Ids are scoped by their trace: an agent's next trace defines them again.
                self.threads = Ids::default();
                self.transient_threads = Ids::default();
                self.classes = Ids::default();
                self.methods = Ids::default();
                self.methods_of_class.clear();
                self.objects = Ids::default();
                self.line_tables.clear();
                self.open.clear();
            }
            E::TraceEnd(end) => {
                self.need_trace(tag, Some(end.trace_id_ref));
                self.collate(tag, Some(end.trace_id_ref), end.collation_value);
                if self.current_trace == Some(end.trace_id_ref) {
                    self.current_trace = None;
                }
            }
            E::ThreadStart(start) => {
                self.need_trace(tag, start.trace_id_ref);
                self.collate(tag, start.trace_id_ref, start.collation_value);
                self.define(tag, "threadId", start.thread_id, true, |v| &mut v.threads);
                self.define(
                    tag,
                    "transientThreadId",
                    start.transient_thread_id,
                    false,
                    |v| &mut v.transient_threads,
                );
                self.need_object(tag, start.obj_id_ref.map(ObjRef::Id));
            }
            E::ThreadEnd(end) => {
                self.need_trace(tag, end.trace_id_ref);
                self.collate(tag, end.trace_id_ref, end.collation_value);
                self.need(tag, "threadIdRef", end.thread_id_ref, |v| &v.threads);
                if let Some(thread) = end.thread_id_ref {
                    self.threads.undefine(u64::from(thread));
                    let open = self.open.remove(&thread).map_or(0, |stack| stack.len());
                    if open > 0 {
                        self.problem(
                            tag,
                            format!("thread {thread} ends with {open} methodEntry not exited"),
                        );
                    }
                }
                if let Some(thread) = end.transient_thread_id_ref {
                    self.transient_threads.undefine(u64::from(thread));
                }
            }
            E::ClassDef(class) => {
                self.need_trace(tag, class.trace_id_ref);
                self.collate(tag, class.trace_id_ref, class.collation_value);
                self.need(tag, "threadIdRef", class.thread_id_ref, |v| &v.threads);
                self.define(tag, "classId", class.class_id, true, |v| &mut v.classes);
            }
            E::ClassUnload(unload) => {
                self.need_trace(tag, unload.trace_id_ref);
                self.collate(tag, unload.trace_id_ref, unload.collation_value);
                self.need(tag, "classIdRef", unload.class_id_ref, |v| &v.classes);
                if let Some(class) = unload.class_id_ref {
                    self.classes.undefine(u64::from(class));
                    for method in self.methods_of_class.remove(&class).unwrap_or_default() {
                        self.methods.undefine(u64::from(method));
                    }
                }
            }
            E::MethodDef(method) => {
                self.need_trace(tag, method.trace_id_ref);
                self.collate(tag, method.trace_id_ref, method.collation_value);
                self.need(tag, "classIdRef", method.class_id_ref, |v| &v.classes);
                self.define(tag, "methodId", method.method_id, true, |v| &mut v.methods);
                if let (Some(class), Some(id)) = (method.class_id_ref, method.method_id) {
                    self.methods_of_class.entry(class).or_default().push(id);
                }
                let signature = &method.content;
                let classes = signature
                    .returns
                    .iter()
                    .map(|r| r.class_id_ref)
                    .chain(signature.parameters.iter().map(|p| p.class_id_ref))
                    .chain(signature.exceptions.iter().map(|e| e.class_id_ref))
                    .collect::<Vec<_>>();
                for class in classes {
                    self.need(tag, "classIdRef", class, |v| &v.classes);
                }
            }
            E::ObjAlloc(alloc) => {
                self.need_trace(tag, alloc.trace_id_ref);
                self.collate(tag, alloc.trace_id_ref, alloc.collation_value);
                self.need(tag, "threadIdRef", alloc.thread_id_ref, |v| &v.threads);
                self.need(tag, "classIdRef", alloc.class_id_ref, |v| &v.classes);
                self.define(tag, "objId", alloc.obj_id, true, |v| &mut v.objects);
            }
            E::ObjDef(def) => {
                self.need_trace(tag, def.trace_id_ref);
                self.collate(tag, def.trace_id_ref, def.collation_value);
                self.define(tag, "objId", Some(def.obj_id), false, |v| &mut v.objects);
            }
            E::ObjFree(free) => {
                self.need_trace(tag, free.trace_id_ref);
                self.collate(tag, free.trace_id_ref, free.collation_value);
                self.need(tag, "objIdRef", free.obj_id_ref, |v| &v.objects);
                if let Some(object) = free.obj_id_ref {
                    self.objects.undefine(u64::from(object));
                }
            }
            E::MethodEntry(entry) => {
                self.need_trace(tag, entry.trace_id_ref);
                self.collate(tag, entry.trace_id_ref, entry.collation_value);
                self.need(tag, "threadIdRef", entry.thread_id_ref, |v| &v.threads);
                self.need(tag, "methodIdRef", entry.method_id_ref, |v| &v.methods);
                self.need(tag, "classIdRef", entry.class_id_ref, |v| &v.classes);
                if entry.obj_id_ref != Some(0) {
                    self.need_object(tag, entry.obj_id_ref.map(ObjRef::Id));
                }
                if let (Some(thread), Some(MultiPart(ticket))) = (entry.thread_id_ref, entry.ticket)
                {
                    let stack = self.open.entry(thread).or_default();
                    let enclosing = stack.last().and_then(|(_, depth)| *depth);
                    let duplicate = stack.iter().any(|(open, _)| *open == ticket);
                    stack.push((ticket, entry.stack_depth));
                    if duplicate {
                        self.problem(
                            tag,
                            format!("ticket {ticket} is already open on thread {thread}"),
                        );
                    }
                    if let (Some(enclosing), Some(depth)) = (enclosing, entry.stack_depth) {
                        if depth <= enclosing {
                            self.problem(tag, format!("stackDepth {depth} is not deeper than the enclosing entry's {enclosing}"));
                        }
                    }
                }
            }
            E::MethodExit(exit) => {
                self.need_trace(tag, exit.trace_id_ref);
                self.collate(tag, exit.trace_id_ref, exit.collation_value);
                self.need(tag, "threadIdRef", exit.thread_id_ref, |v| &v.threads);
                self.need(tag, "methodIdRef", exit.method_id_ref, |v| &v.methods);
                if let (Some(thread), Some(MultiPart(ticket))) = (exit.thread_id_ref, exit.ticket) {
                    let innermost = self.open.get_mut(&thread).and_then(Vec::pop);
                    match innermost {
                        Some((open, _)) if open == ticket => {}
                        Some((open, _)) => self.problem(tag, format!("ticket {ticket} exits, but the innermost open entry on thread {thread} is ticket {open}")),
                        None => self.problem(tag, format!("ticket {ticket} exits with no entry open on thread {thread}")),
                    }
                }
            }
            E::MethodCount(count) => {
                self.need_trace(tag, count.trace_id_ref);
                self.collate(tag, count.trace_id_ref, count.collation_value);
                self.need(tag, "methodIdRef", count.method_id_ref, |v| &v.methods);
            }
            E::Throw(throw) => {
                self.need_trace(tag, throw.trace_id_ref);
                self.collate(tag, throw.trace_id_ref, throw.collation_value);
                self.need(tag, "threadIdRef", throw.thread_id_ref, |v| &v.threads);
                self.need(tag, "methodIdRef", throw.method_id_ref, |v| &v.methods);
                self.need_object(tag, throw.obj_id_ref);
            }
            E::Catch(catch) => {
                self.need_trace(tag, catch.trace_id_ref);
                self.collate(tag, catch.trace_id_ref, catch.collation_value);
                self.need(tag, "threadIdRef", catch.thread_id_ref, |v| &v.threads);
                self.need(tag, "methodIdRef", catch.method_id_ref, |v| &v.methods);
                self.need_object(tag, catch.obj_id_ref);
            }
            E::LineTable(table) => {
                self.need_trace(tag, table.trace_id_ref);
                self.collate(tag, table.trace_id_ref, table.collation_value);
                self.need(tag, "methodIdRef", Some(table.method_id_ref), |v| {
                    &v.methods
                });
                self.line_tables.insert(table.line_table_id);
            }
            E::Line(line) => {
                self.need_trace(tag, line.trace_id_ref);
                self.collate(tag, line.trace_id_ref, line.collation_value);
                if let Some(table) = line.line_table_id_ref {
                    if !self.line_tables.contains(&table) {
                        self.problem(tag, format!("lineTableIdRef {table} is not defined here"));
                    }
                }
            }
            other => {
                // The rest carry only thread, trace and collation references.
                let (trace, collation, thread) = common_references(other);
                self.need_trace(tag, trace);
                self.collate(tag, trace, collation);
                self.need(tag, "threadIdRef", thread, |v| &v.threads);
            }
        }
    }

    pub fn finish(self) -> Vec<Problem> {
        self.problems
    }
}

/// traceIdRef, collationValue and threadIdRef of the elements the match above leaves over.
fn common_references(element: &TraceElement) -> (Option<Uuid>, Option<MultiPart>, Option<u32>) {
    use TraceElement as E;
    match element {
        E::ProcessSuspend(e) => (e.trace_id_ref, e.collation_value, None),
        E::ProcessResume(e) => (e.trace_id_ref, e.collation_value, None),
        E::OptionElement(e) => (e.trace_id_ref, e.collation_value, None),
        E::Filter(e) => (e.trace_id_ref, e.collation_value, None),
        E::ObjMove(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::MethodCall(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::MethodReturn(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::Value(e) => (e.trace_id_ref, e.collation_value, None),
        E::GcStart(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::GcFinish(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::RuntimeInitDone(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::RuntimeShutdown(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::InvocationContext(e) => (e.trace_id_ref, e.collation_value, None),
        E::MonitorContendedEnter(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::MonitorContendedEntered(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::MonitorWait(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::MonitorWaited(e) => (e.trace_id_ref, e.collation_value, e.thread_id_ref),
        E::Snapshot(e) => (e.trace_id_ref, e.collation_value, None),
        _ => (None, None, None),
    }
}

/// Validates a stream: a read error ends it and is reported as a problem with its byte offset.
pub fn validate(
    elements: impl IntoIterator<Item = Result<TraceElement, TraceReadError>>,
) -> Vec<Problem> {
    let mut validator = Validator::new();
    for element in elements {
        match element {
            Ok(element) => validator.check(&element),
            Err(error) => {
                validator.count += 1;
                validator.problem(
                    "?",
                    format!(
                        "not well-formed at byte {}: {}",
                        error.offset, error.message
                    ),
                );
                break;
            }
        }
    }
    validator.finish()
}
