//! The open trace format from inside the JVM (`format=x`): JVMTI events become trace elements
//! (docs/trace-format.md) with the node → processCreate → agentCreate → traceStart hierarchy,
//! ids defined before use and collation values in emission order. Application threads only serialise
//! elements into memory under a short lock; the agent's thread writes them to the file.
//! (The writer of every element kind the agent emits; at about 1,300 lines it is kept in one
//! file so that the ids, the element layouts and the buffering read together.)

use crate::error::AgentResult;
use crate::sync::lock;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openprof_format::java_names::class_name_from_signature;
use openprof_format::options::Options;
use openprof_format::trace::attrs::{IsArray, MultiPart, ObjRef, Seconds, SourceCoordinateType};
use openprof_format::trace::filter::FilterBlock;

use crate::call_hooks::CallSiteTarget;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};
use openprof_format::trace::*;
use uuid::Uuid;

use crate::jvmti::{jclass, jmethodID, jobject, jthread, jvalue, JNIEnv, Jvmti};
use crate::net::NetSink;
use openprof_format::wire::FrameKind;

/// The open-call key of a call site (callsites=y), apart from the methods' (jmethodIDs).
const CALL_SITE_KEY: usize = 1 << 62;

/// Serialised elements waiting for the agent's thread beyond this are dropped (and counted):
/// a tracer must not eat the heap of the process it traces.
const MAX_PENDING_BYTES: usize = 256 << 20;
/// Tags mark what an object is for the tracer: a class (by classId) or an object (by objId).
const CLASS_TAG: i64 = 1 << 40;
const OBJECT_TAG: i64 = 2 << 40;
const TAG_KIND: i64 = 0xff << 40;

#[derive(Clone, Copy)]
struct MethodRecord {
    id: u32,
    class_id: u32,
}

struct ClassRecord {
    name: String,
    included: bool,
    is_array: IsArray,
}

struct TraceState {
    /// The trace being written, if any: the collector may end it and start another.
    trace: Option<Uuid>,
    pending: String,
    /// Offsets in `pending` between elements where a fragment for the collector may end.
    cuts: Vec<usize>,
    filters: FilterBlock,
    collation: u128,
    dropped: u64,
    classes: HashMap<u32, ClassRecord>,
    methods: HashMap<usize, MethodRecord>,
    /// Methods seen but not yet defined: whether their class is traced.
    inclusion: HashMap<usize, bool>,
    object_sequence: HashMap<u32, u64>,
    entries: HashMap<usize, u64>,
    last_class_id: u32,
    last_method_id: u32,
    last_object_id: u32,
    /// Ids are scoped by their trace: what the current trace has defined. Classes, methods
    /// and objects keep their numbers across traces and are defined again on first use.
    classes_defined: HashSet<u32>,
    methods_defined: HashSet<u32>,
    objects_defined: HashSet<u32>,
    /// Classes by name (the defined ones, and those only named by a call site).
    class_names: HashMap<String, u32>,
    /// Methods only named by a call site: (class, name, descriptor) → record.
    named_methods: HashMap<(String, String, String), MethodRecord>,
    /// Every live numbered thread (name, group): a new trace starts by defining them.
    live_threads: BTreeMap<u32, (String, String)>,
    finished: bool,
}

/// The per-thread view: its thread id in the trace and its open method entries.
#[derive(Default)]
struct ThreadTrace {
    thread_id: u32,
    /// The trace generation `open` belongs to: entries opened in an earlier trace are not
    /// closed in a later one.
    generation: u64,
    /// Set by ThreadEnd, which JVMTI posts on the ending thread: HotSpot still runs Java code
    /// (shutdown hooks) on the DestroyJavaVM thread after its ThreadEnd.
    ended: bool,
    last_ticket: u128,
    /// Open entries, keyed by method: (method, ticket).
    open: crate::call_hooks::OpenCalls<(usize, u128)>,
    /// The thread's CPU time as the call hooks read it.
    clock: crate::call_hooks::CpuClock,
    /// When the exception passing through this thread's frames now was thrown: its throw
    /// elements all carry that time, also those of the steps the rewriter's handlers make.
    thrown_at: Option<Seconds>,
}

thread_local! {
    static THREAD_TRACE: RefCell<ThreadTrace> = RefCell::new(ThreadTrace::default());
}

/// GC start and finish times, written by the GC callbacks (which may not take locks) and
/// emitted by the agent's thread.
struct GcLog {
    starts: AtomicU64,
    finishes: AtomicU64,
    times: [AtomicU64; 128],
    emitted: Mutex<(u64, u64)>,
}

/// Which monitor event.
#[derive(Clone, Copy, Debug)]
pub enum MonitorEvent {
    ContendedEnter,
    ContendedEntered,
    Wait { timeout_ms: i64 },
    Waited { timed_out: bool },
}

/// Where the trace goes: a document in a file, or fragments to the collector.
enum TraceSink {
    File(BufWriter<File>),
    Net(Arc<NetSink>),
}

/// Fragments sent to the collector stay about this size.
const FRAGMENT_BYTES: usize = 512 << 10;

/// Where method entries and exits come from (cpu=times).
pub enum CallSource {
    /// The rewritten classes' hooks.
    Hooks(&'static crate::call_hooks::CallHooks),
    /// JVMTI's MethodEntry and MethodExit.
    Events,
}

pub struct Tracer {
    jvmti: Jvmti,
    /// This node's and process's ids in the trace (a call's context names them).
    node_id: Uuid,
    process_id: Uuid,
    /// The rewritten classes' hooks (cpu=times, coverage=y).
    pub hooks: Option<&'static crate::call_hooks::CallHooks>,
    /// heap=sites: sampled allocations become objAlloc elements.
    pub allocations: bool,
    /// Tags of tagged objects (classes, objects) the JVM freed, queued by ObjectFree (which may
    /// take no other lock) for the agent's thread.
    freed: Mutex<Vec<i64>>,
    /// With cpu=times, where calls come from.
    pub calls: Option<CallSource>,
    agent_id: Uuid,
    /// The options as (key, value), echoed as option elements after every traceStart.
    option_pairs: Vec<(String, String)>,
    /// Incremented by every traceStart after the first.
    generation: AtomicU64,
    /// cpu=times: methodEntry/methodExit and methodCount.
    methods: bool,
    state: Mutex<TraceState>,
    sink: Mutex<TraceSink>,
    gc: GcLog,
}

/// A methodEntry or methodCall (`$kind`: the two have the same attributes) of a traced call:
/// thread, time, ticket, thread CPU time and method, the rest left out.
macro_rules! call_start {
    ($kind:ident, $thread_id:expr, $time:expr, $ticket:expr, $cpu:expr, $record:expr) => {{
        let record: MethodRecord = $record;
        $kind {
            transient_thread_id_ref: None,
            thread_id_ref: Some($thread_id),
            time: Some($time),
            method_id_ref: Some(record.id),
            transient_method_id_ref: None,
            ticket: Some(MultiPart($ticket)),
            transient_obj_id_ref: None,
            obj_id_ref: None,
            transient_class_id_ref: None,
            class_id_ref: Some(record.class_id),
            thread_cpu_time: Some($cpu),
            sequence_counter: None,
            context_data: None,
            stack_depth: None,
            collation_value: None,
            trace_id_ref: None,
            content: Values::default(),
        }
    }};
}

/// A methodExit or methodReturn (`$kind`: the two have the same attributes) closing the start
/// of `$ticket`.
macro_rules! call_end {
    ($kind:ident, $thread_id:expr, $time:expr, $ticket:expr, $cpu:expr, $record:expr) => {{
        let record: MethodRecord = $record;
        $kind {
            transient_thread_id_ref: None,
            thread_id_ref: Some($thread_id),
            time: Some($time),
            ticket: Some(MultiPart($ticket)),
            thread_cpu_time: Some($cpu),
            method_id_ref: Some(record.id),
            transient_method_id_ref: None,
            transient_obj_id_ref: None,
            obj_id_ref: None,
            transient_class_id_ref: None,
            class_id_ref: Some(record.class_id),
            sequence_counter: None,
            context_data: None,
            collation_value: None,
            trace_id_ref: None,
            content: Values::default(),
        }
    }};
}

/// A methodEntry of a traced call with what cpu=times and parameter tracing both write; each
/// adds its own (the receiver and depth, or the values and stack).
fn method_entry_element(
    thread_id: u32,
    time: Seconds,
    ticket: u128,
    cpu: Seconds,
    record: MethodRecord,
) -> MethodEntry {
    call_start!(MethodEntry, thread_id, time, ticket, cpu, record)
}

/// The methodExit closing the entry of `ticket` (cpu=times and parameter tracing alike).
fn method_exit_element(
    thread_id: u32,
    time: Seconds,
    ticket: u128,
    cpu: Seconds,
    record: MethodRecord,
) -> MethodExit {
    call_end!(MethodExit, thread_id, time, ticket, cpu, record)
}

fn now() -> Seconds {
    Seconds::now()
}

fn thread_cpu_time() -> Seconds {
    Seconds::from_nanos(u128::from(crate::signals::thread_cpu_nanos()))
}

/// This machine's id as a UUID: /etc/machine-id when there is one, so that every process of a
/// node names the same node.
fn node_id() -> Uuid {
    std::fs::read_to_string("/etc/machine-id")
        .ok()
        .and_then(|text| Uuid::parse_str(text.trim()).ok())
        .unwrap_or_else(Uuid::new_v4)
}

/// When this process started, from /proc (boot time plus the process's start in ticks).
fn process_start_time() -> Seconds {
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
        stat.lines()
            .find_map(|line| line.strip_prefix("btime "))
            .and_then(|secs| secs.trim().parse::<u64>().ok())
    });
    let started = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let after_name = &stat[stat.rfind(')')? + 2..];
            after_name.split(' ').nth(19)?.parse::<u64>().ok()
        });
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    match (boot, started) {
        (Some(boot), Some(started)) => Seconds::from_nanos(
            u128::from(boot) * 1_000_000_000
                + u128::from(started) * 1_000_000_000 / u128::from(ticks),
        ),
        _ => now(),
    }
}

fn command_line() -> Option<String> {
    let raw = std::fs::read("/proc/self/cmdline").ok()?;
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect();
    Some(redact_token(&parts.join(" ")))
}

/// The command line with the value of every `token=` option replaced: the collector's secret
/// must not travel into traces.
fn redact_token(command_line: &str) -> String {
    let mut redacted = String::with_capacity(command_line.len());
    let mut rest = command_line;
    while let Some(at) = rest.find("token=") {
        let value_start = at + "token=".len();
        redacted.push_str(&rest[..value_start]);
        redacted.push_str("(hidden)");
        let value_end = rest[value_start..]
            .find([',', ' '])
            .map_or(rest.len(), |end| value_start + end);
        rest = &rest[value_end..];
    }
    redacted.push_str(rest);
    redacted
}

fn is_array_of(signature: &str) -> IsArray {
    match signature
        .strip_prefix('[')
        .map(|element| element.as_bytes()[0])
    {
        None => IsArray::NotArray,
        Some(b'Z') => IsArray::Booleans,
        Some(b'C') => IsArray::Chars,
        Some(b'F') => IsArray::Floats,
        Some(b'D') => IsArray::Doubles,
        Some(b'B') => IsArray::Bytes,
        Some(b'S') => IsArray::Shorts,
        Some(b'I') => IsArray::Ints,
        Some(b'J') => IsArray::Longs,
        Some(_) => IsArray::Objects,
    }
}

impl Tracer {
    /// Opens the trace file (or takes the collector's connection) and writes the hierarchy,
    /// traceStart, the options and the filters.
    pub fn start(
        vm: *mut crate::jvmti::JavaVM,
        jvmti: Jvmti,
        options: &Options,
        net: Option<Arc<NetSink>>,
    ) -> AgentResult<Tracer> {
        let filters = options.filter_block().map_err(|error| error.to_string())?;
        let timing = options.cpu == Some(openprof_format::options::CpuMode::Times);
        let ways = crate::call_hooks::Ways {
            calls: timing,
            receiver: true,
            coverage: options.coverage,
            call_sites: options.call_sites,
        };
        let hooks = if timing || options.coverage {
            crate::call_hooks::CallHooks::install(vm, filters.clone(), ways)
        } else {
            Err(String::new())
        };
        if let (true, Err(reason)) = (options.coverage, &hooks) {
            return Err(format!("coverage=y needs classes rewritten: {reason}").into());
        }
        let calls = if timing {
            Some(match &hooks {
                Ok(hooks) => CallSource::Hooks(hooks),
                Err(reason) => {
                    // JVMTI's method events, and `this` read from the entered frame.
                    let mut capabilities = crate::jvmti::jvmtiCapabilities::default();
                    capabilities.set_can_generate_method_entry_events(true);
                    capabilities.set_can_generate_method_exit_events(true);
                    capabilities.set_can_access_local_variables(true);
                    jvmti.add_capabilities(&capabilities).map_err(|error| {
                            format!("format=x with cpu=times: {reason}, and JVMTI's method events are not to be had: {error}")
                        })?;
                    CallSource::Events
                }
            })
        } else {
            None
        };
        let (sink, agent_id, head) = match net {
            Some(net) => {
                let agent_id = net.agent_id;
                (TraceSink::Net(net), agent_id, "")
            }
            None => {
                let (file, _path) = crate::output::create_output_file(options)?;
                (
                    TraceSink::File(BufWriter::new(file)),
                    Uuid::new_v4(),
                    DOCUMENT_HEAD,
                )
            }
        };
        let node_id = node_id();
        let process_id = Uuid::new_v4();
        let option_pairs = options
            .to_string()
            .split(',')
            .map(|item| {
                let (key, value) = item.split_once('=').unwrap_or((item, ""));
                (key.to_string(), value.to_string())
            })
            .collect();
        let allocations = matches!(
            options.heap,
            Some(openprof_format::options::HeapMode::Sites)
        );
        if allocations {
            jvmti
                .set_heap_sampling_interval(options.alloc_interval as i32)
                .map_err(|error| format!("can't sample allocations: {error}"))?;
        }
        let tracer = Tracer {
            jvmti,
            node_id,
            process_id,
            hooks: hooks.ok(),
            allocations,
            freed: Mutex::new(Vec::new()),
            calls,
            agent_id,
            option_pairs,
            generation: AtomicU64::new(0),
            methods: options.cpu == Some(openprof_format::options::CpuMode::Times),
            state: Mutex::new(TraceState {
                trace: None,
                pending: String::from(head),
                cuts: Vec::new(),
                filters,
                collation: 0,
                dropped: 0,
                classes: HashMap::new(),
                methods: HashMap::new(),
                inclusion: HashMap::new(),
                object_sequence: HashMap::new(),
                entries: HashMap::new(),
                last_class_id: 0,
                last_method_id: 0,
                last_object_id: 0,
                classes_defined: HashSet::new(),
                methods_defined: HashSet::new(),
                objects_defined: HashSet::new(),
                class_names: HashMap::new(),
                named_methods: HashMap::new(),
                live_threads: BTreeMap::new(),
                finished: false,
            }),
            sink: Mutex::new(sink),
            gc: GcLog {
                starts: AtomicU64::new(0),
                finishes: AtomicU64::new(0),
                times: std::array::from_fn(|_| AtomicU64::new(0)),
                emitted: Mutex::new((0, 0)),
            },
        };
        {
            let mut state = lock(&tracer.state);
            // Above the trace: no collationValue, no traceIdRef.
            let mut out = String::new();
            Node {
                node_id,
                hostname: crate::net::hostname(),
                content: NoContent,
            }
            .write(&mut out);
            out.push('\n');
            ProcessCreate {
                process_id,
                name: Some("java".into()),
                pid: std::process::id(),
                node_id_ref: node_id,
                time: process_start_time(),
                environment: None,
                application_executable: command_line(),
                content: NoContent,
            }
            .write(&mut out);
            out.push('\n');
            AgentCreate {
                agent_id,
                process_id_ref: process_id,
                agent_name: "openprof".into(),
                time: now(),
                // Spelled out from the parsed options: the token never enters a trace.
                agent_parameters: Some(options.to_string()),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                content: NoContent,
            }
            .write(&mut out);
            out.push('\n');
            state.pending.push_str(&out);
            tracer.open_trace(&mut state);
        }
        Ok(tracer)
    }

    /// Starts a new trace: traceStart (collationValue 1), the options spelled out, the filter
    /// block, and a threadStart for every live thread; ids are defined afresh on first use.
    fn open_trace(&self, state: &mut TraceState) -> Uuid {
        let trace_id = Uuid::new_v4();
        state.trace = Some(trace_id);
        state.collation = 0;
        state.classes_defined.clear();
        state.methods_defined.clear();
        state.objects_defined.clear();
        self.emit(
            state,
            TraceStart {
                trace_id,
                agent_id_ref: self.agent_id,
                time: now(),
                collation_value: None,
                content: NoContent,
            },
        );
        for (key, value) in &self.option_pairs {
            self.emit(
                state,
                OptionElement {
                    key: Some(key.clone()),
                    value: Some(value.clone()),
                    trace_id_ref: None,
                    collation_value: None,
                    content: NoContent,
                },
            );
        }
        for filter in state.filters.to_elements() {
            self.emit(state, filter);
        }
        let live: Vec<_> = state
            .live_threads
            .iter()
            .map(|(id, names)| (*id, names.clone()))
            .collect();
        for (thread_id, (name, group)) in live {
            self.emit_thread_start(state, thread_id, name, group);
        }
        trace_id
    }

    /// The collector's traceStart command: a new trace, when none is running.
    pub fn start_trace(&self) -> Result<String, String> {
        let mut state = lock(&self.state);
        if let Some(running) = state.trace {
            return Err(format!(
                "trace {running} is still running: end it first (trace-end)"
            ));
        }
        if state.finished {
            return Err("the JVM is shutting down".into());
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        let trace_id = self.open_trace(&mut state);
        Ok(format!("trace {trace_id} started"))
    }

    /// The collector's traceEnd command: methodCount elements (the counts since the JVM
    /// started, when methods are traced), then traceEnd; nothing is traced until the next
    /// traceStart.
    pub fn end_trace(&self, jni: *mut JNIEnv) -> Result<String, String> {
        let mut state = lock(&self.state);
        let Some(trace_id) = state.trace else {
            return Err("no trace is running: start one first (trace-start)".into());
        };
        self.close_trace(&mut state, jni);
        Ok(format!("trace {trace_id} ended"))
    }

    /// methodCounts and traceEnd for the running trace.
    fn close_trace(&self, state: &mut TraceState, jni: *mut JNIEnv) {
        let Some(trace_id) = state.trace else { return };
        self.emit_coverage(state, jni);
        if let Some(CallSource::Hooks(hooks)) = &self.calls {
            // The instrumented methods: those whose calls are counted.
            for site in 0..hooks.site_count() {
                let Some(method) = hooks.site(site).and_then(|site| site.method()) else {
                    continue;
                };
                self.emit_method_count(state, method);
            }
        } else if self.methods {
            for class in self.jvmti.loaded_classes().unwrap_or_default() {
                for method in self.jvmti.class_methods(class).unwrap_or_default() {
                    self.emit_method_count(state, method);
                }
                crate::jni::delete_local_ref(jni, class);
            }
        }
        self.emit(
            state,
            TraceEnd {
                trace_id_ref: trace_id,
                time: now(),
                collation_value: None,
                content: NoContent,
            },
        );
        state.trace = None;
    }

    /// Stamps and serialises one element (into memory; the agent's thread writes it); false
    /// when it is not written (no trace running, shutting down, or over the memory bound).
    fn emit(&self, state: &mut TraceState, element: impl Into<TraceElement>) -> bool {
        let Some(trace_id) = state.trace else {
            return false;
        };
        let mut element = element.into();
        element.set_context(trace_id, MultiPart(state.collation + 1));
        // Elements outside the trace's order (tag) take no collation value.
        if element.collation_value().is_some() {
            state.collation += 1;
        }
        if state.finished {
            return false;
        }
        if state.pending.len() > MAX_PENDING_BYTES {
            state.dropped += 1;
            return false;
        }
        element.write(&mut state.pending);
        state.pending.push('\n');
        let last_cut = state.cuts.last().copied().unwrap_or(0);
        if state.pending.len() - last_cut >= FRAGMENT_BYTES {
            let end = state.pending.len();
            state.cuts.push(end);
        }
        true
    }

    /// This thread's view, first forgetting method entries opened in an earlier trace.
    fn with_thread_trace<R>(&self, work: impl FnOnce(&mut ThreadTrace) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        THREAD_TRACE.with(|trace| {
            let mut trace = trace.borrow_mut();
            if trace.generation != generation {
                trace.generation = generation;
                trace.open.clear();
            }
            work(&mut trace)
        })
    }

    /// Writes what is pending to the file, or queues it for the collector in fragments of
    /// whole elements; the agent's thread calls this.
    pub fn flush(&self) {
        let (pending, cuts) = {
            let mut state = lock(&self.state);
            (
                std::mem::take(&mut state.pending),
                std::mem::take(&mut state.cuts),
            )
        };
        if pending.is_empty() {
            return;
        }
        match &mut *lock(&self.sink) {
            TraceSink::File(file) => {
                if let Err(error) = file
                    .write_all(pending.as_bytes())
                    .and_then(|()| file.flush())
                {
                    eprintln!("openprof: can't write the trace: {error}");
                }
            }
            TraceSink::Net(net) => {
                let mut start = 0;
                for end in cuts.into_iter().chain([pending.len()]) {
                    if end > start {
                        net.send(FrameKind::Fragment, &pending.as_bytes()[start..end]);
                        start = end;
                    }
                }
            }
        }
    }

    /// The class's id in the trace, defining it (classDef) on first use.
    fn class_id(&self, state: &mut TraceState, class: jclass) -> u32 {
        let tagged = self
            .jvmti
            .tag(class)
            .ok()
            .filter(|tag| tag & TAG_KIND == CLASS_TAG)
            .map(|tag| (tag & 0xffff_ffff) as u32);
        if let Some(id) = tagged {
            if state.trace.is_none() || state.classes_defined.contains(&id) {
                return id;
            }
        }
        let id = tagged.unwrap_or_else(|| {
            state.last_class_id += 1;
            let id = state.last_class_id;
            let _ = self.jvmti.set_tag(class, CLASS_TAG | i64::from(id));
            id
        });
        let signature = self.jvmti.class_signature(class).unwrap_or_default();
        let name = class_name_from_signature(&signature);
        let included = state.filters.includes(&name);
        state.class_names.insert(name.clone(), id);
        state.classes.insert(
            id,
            ClassRecord {
                name: name.clone(),
                included,
                is_array: is_array_of(&signature),
            },
        );
        let methods = self.jvmti.class_methods(class).map(|m| m.len() as u32).ok();
        let loader = crate::loaders::loader_of(class);
        let defined = self.emit(
            state,
            ClassDef {
                transient_thread_id_ref: None,
                thread_id_ref: None,
                time: Some(now()),
                num_interfaces: None,
                transient_class_id: None,
                class_id: Some(id),
                source_name: Some(self.jvmti.source_file_name(class).unwrap_or_default()),
                name: Some(name),
                access: self.jvmti.class_modifiers(class).ok(),
                num_static_fields: None,
                num_methods: methods,
                num_instance_fields: None,
                class_loader: Some(loader.index),
                class_loader_name: Some(loader.name),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
        if defined {
            state.classes_defined.insert(id);
        }
        id
    }

    /// The method's record, defining it (and its class) on first use.
    /// A methodCount: how many times `method` was entered in this trace.
    fn emit_method_count(&self, state: &mut TraceState, method: jmethodID) {
        let count = state.entries.get(&(method as usize)).copied().unwrap_or(0);
        let record = self.method(state, method);
        self.emit(
            state,
            MethodCount {
                count: Some(count),
                method_id_ref: Some(record.id),
                transient_method_id_ref: None,
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    fn method(&self, state: &mut TraceState, method: jmethodID) -> MethodRecord {
        let known = state.methods.get(&(method as usize)).copied();
        if let Some(record) = known {
            if state.trace.is_none() || state.methods_defined.contains(&record.id) {
                return record;
            }
        }
        let class = self
            .jvmti
            .method_declaring_class(method)
            .unwrap_or(std::ptr::null_mut());
        let class_id = self.class_id(state, class);
        let included = state.classes.get(&class_id).is_some_and(|c| c.included);
        let id = known.map_or_else(
            || {
                state.last_method_id += 1;
                state.last_method_id
            },
            |record| record.id,
        );
        let record = MethodRecord { id, class_id };
        state.methods.insert(method as usize, record);
        state.inclusion.insert(method as usize, included);
        let (name, signature) = self.jvmti.method_name(method).unwrap_or_default();
        let lines = self.jvmti.line_number_table(method).unwrap_or_default();
        let defined = self.emit(
            state,
            MethodDef {
                name: Some(name),
                signature: Some(signature),
                access: self.jvmti.method_modifiers(method).ok(),
                start_line_number: lines.iter().map(|l| l.1).filter(|&l| l > 0).min(),
                end_line_number: lines.iter().map(|l| l.1).max(),
                sig_notation: None,
                transient_class_id_ref: None,
                class_id_ref: Some(class_id),
                method_id: Some(record.id),
                transient_method_id: None,
                collation_value: None,
                trace_id_ref: None,
                content: Signature::default(),
            },
        );
        if defined {
            state.methods_defined.insert(id);
        }
        record
    }

    /// A method a call site names (callsites=y), defined by its names alone: its class need not
    /// be loaded yet, and is defined by its name if the trace has no class of that name.
    fn named_method(&self, state: &mut TraceState, target: &CallSiteTarget) -> MethodRecord {
        let key = (
            target.class.clone(),
            target.name.clone(),
            target.descriptor.clone(),
        );
        if let Some(&record) = state.named_methods.get(&key) {
            if state.trace.is_none() || state.methods_defined.contains(&record.id) {
                return record;
            }
        }
        let class_id = match state.class_names.get(&target.class).copied() {
            Some(id) if state.classes_defined.contains(&id) => id,
            known => {
                let id = known.unwrap_or_else(|| {
                    state.last_class_id += 1;
                    state.last_class_id
                });
                state.class_names.insert(target.class.clone(), id);
                state.classes.entry(id).or_insert_with(|| ClassRecord {
                    name: target.class.clone(),
                    included: false,
                    is_array: IsArray::NotArray,
                });
                let defined = self.emit(
                    state,
                    ClassDef {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        time: Some(now()),
                        num_interfaces: None,
                        transient_class_id: None,
                        class_id: Some(id),
                        source_name: None,
                        name: Some(target.class.clone()),
                        access: None,
                        num_static_fields: None,
                        num_methods: None,
                        num_instance_fields: None,
                        class_loader: None,
                        class_loader_name: None,
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
                if defined {
                    state.classes_defined.insert(id);
                }
                id
            }
        };
        let id = state.named_methods.get(&key).map_or_else(
            || {
                state.last_method_id += 1;
                state.last_method_id
            },
            |record| record.id,
        );
        let record = MethodRecord { id, class_id };
        state.named_methods.insert(key, record);
        let defined = self.emit(
            state,
            MethodDef {
                name: Some(target.name.clone()),
                signature: Some(target.descriptor.clone()),
                access: None,
                start_line_number: None,
                end_line_number: None,
                sig_notation: None,
                transient_class_id_ref: None,
                class_id_ref: Some(class_id),
                method_id: Some(id),
                transient_method_id: None,
                collation_value: None,
                trace_id_ref: None,
                content: Signature::default(),
            },
        );
        if defined {
            state.methods_defined.insert(id);
        }
        record
    }

    /// Whether a method's class is traced, asking the JVM once per method.
    fn included(&self, state: &mut TraceState, method: jmethodID) -> bool {
        if let Some(included) = state.inclusion.get(&(method as usize)) {
            return *included;
        }
        let included = self
            .jvmti
            .method_declaring_class(method)
            .and_then(|class| self.jvmti.class_signature(class))
            .map(|signature| {
                state
                    .filters
                    .includes(&class_name_from_signature(&signature))
            })
            .unwrap_or(false);
        state.inclusion.insert(method as usize, included);
        included
    }

    /// The id of an object's class, defining the class on first use.
    fn class_of(&self, state: &mut TraceState, jni: *mut JNIEnv, object: jobject) -> u32 {
        let class = crate::jni::Jni(jni).object_class(object);
        let class_id = self.class_id(state, class);
        crate::jni::delete_local_ref(jni, class);
        class_id
    }

    /// The object's id, defining it (objDef) on first use.
    fn object_id(&self, state: &mut TraceState, jni: *mut JNIEnv, object: jobject) -> u32 {
        let tagged = self
            .jvmti
            .tag(object)
            .ok()
            .filter(|tag| tag & TAG_KIND == OBJECT_TAG)
            .map(|tag| (tag & 0xffff_ffff) as u32);
        if let Some(id) = tagged {
            if state.trace.is_none() || state.objects_defined.contains(&id) {
                return id;
            }
        }
        let id = tagged.unwrap_or_else(|| {
            state.last_object_id += 1;
            let id = state.last_object_id;
            let _ = self.jvmti.set_tag(object, OBJECT_TAG | i64::from(id));
            id
        });
        let class_id = self.class_of(state, jni, object);
        let is_array = state.classes.get(&class_id).map(|c| c.is_array);
        let defined = self.emit(
            state,
            ObjDef {
                obj_id: id,
                is_array,
                size: self.jvmti.object_size(object).ok(),
                class_id_ref: Some(class_id),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
        if defined {
            state.objects_defined.insert(id);
        }
        id
    }

    fn thread_id(&self, thread: jthread) -> u32 {
        THREAD_TRACE.with(|trace| {
            let mut trace = trace.borrow_mut();
            if trace.thread_id == 0 {
                trace.thread_id = self.jvmti.thread_word(thread).unwrap_or(0) as u32;
            }
            trace.thread_id
        })
    }

    pub fn runtime_init(&self, thread_id: u32) {
        let mut state = lock(&self.state);
        self.emit(
            &mut state,
            RuntimeInitDone {
                transient_thread_id_ref: None,
                thread_id_ref: Some(thread_id),
                time: Some(now()),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    pub fn thread_start(&self, thread_id: u32, name: &str, group: &str) {
        let mut state = lock(&self.state);
        state
            .live_threads
            .insert(thread_id, (name.to_string(), group.to_string()));
        self.emit_thread_start(&mut state, thread_id, name.into(), group.into());
    }

    fn emit_thread_start(
        &self,
        state: &mut TraceState,
        thread_id: u32,
        name: String,
        group: String,
    ) {
        self.emit(
            state,
            ThreadStart {
                transient_thread_id: None,
                thread_id: Some(thread_id),
                time: Some(now()),
                group_name: Some(group),
                parent_name: None,
                transient_obj_id_ref: None,
                obj_id_ref: None,
                thread_name: Some(name),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    pub fn thread_end(&self, thread_id: u32) {
        THREAD_TRACE.with(|trace| trace.borrow_mut().ended = true);
        let mut state = lock(&self.state);
        state.live_threads.remove(&thread_id);
        self.emit(
            &mut state,
            ThreadEnd {
                transient_thread_id_ref: None,
                thread_id_ref: Some(thread_id),
                time: Some(now()),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    /// MethodEntry: counted always; a methodEntry element when the method's class is traced.
    pub fn method_entry(&self, jni: *mut JNIEnv, thread: jthread, method: jmethodID) {
        let count = |state: &mut TraceState| {
            *state.entries.entry(method as usize).or_default() += 1;
        };
        {
            let mut state = lock(&self.state);
            if state.trace.is_none() || !self.included(&mut state, method) {
                count(&mut state);
                return;
            }
        }
        let thread_id = self.thread_id(thread);
        if thread_id == 0 || THREAD_TRACE.with(|trace| trace.borrow().ended) {
            // Before VMInit (the start phase) threads are not numbered yet, so no element could
            // name its thread; the entry still counts for methodCount. Its exit finds no open
            // entry and is left out too.
            count(&mut lock(&self.state));
            return;
        }
        let time = now();
        let cpu = thread_cpu_time();
        let depth = self.jvmti.frame_count(thread).ok();
        let is_static = openprof_classfile::access::has(
            self.jvmti.method_modifiers(method).unwrap_or(0),
            openprof_classfile::access::STATIC,
        );
        let receiver = if is_static {
            std::ptr::null_mut()
        } else {
            self.jvmti
                .local_instance(thread, 0)
                .unwrap_or(std::ptr::null_mut())
        };
        let (ticket, generation) = self.with_thread_trace(|trace| {
            trace.last_ticket += 1;
            let ticket = trace.last_ticket;
            trace.open.enter(
                method as usize,
                false,
                |_| (method as usize, ticket),
                &mut |_, _, _| {},
            );
            (ticket, trace.generation)
        });
        // A traced entry is counted under the same lock as it is written, so that a trace's
        // methodCount and its methodEntry elements agree.
        let mut state = lock(&self.state);
        count(&mut state);
        if state.trace.is_none() || self.generation.load(Ordering::Acquire) != generation {
            // A trace ended or began since the entry was numbered: it belongs to neither.
            THREAD_TRACE.with(|trace| trace.borrow_mut().open.retain(|open| open.1 != ticket));
            drop(state);
            crate::jni::delete_local_ref(jni, receiver);
            return;
        }
        let record = self.method(&mut state, method);
        let (object, sequence) = if receiver.is_null() {
            (0, 0)
        } else {
            let object = self.object_id(&mut state, jni, receiver);
            let sequence = state.object_sequence.entry(object).or_default();
            *sequence += 1;
            (object, *sequence)
        };
        self.emit(
            &mut state,
            MethodEntry {
                obj_id_ref: Some(object),
                sequence_counter: Some(sequence),
                stack_depth: depth,
                ..method_entry_element(thread_id, time, ticket, cpu, record)
            },
        );
        drop(state);
        crate::jni::delete_local_ref(jni, receiver);
    }

    /// Line coverage (coverage=y): for each counted method, a lineTable (each block's source
    /// lines, `+` between the lines of one block, a space between blocks) and a line for each
    /// block that ran, with how many times it ran since its class was rewritten.
    fn emit_coverage(&self, state: &mut TraceState, jni: *mut JNIEnv) {
        let (Some(hooks), false) = (self.hooks, jni.is_null()) else {
            return;
        };
        let Some(coverage) = hooks.coverage() else {
            return;
        };
        let jni = crate::jni::Jni(jni);
        for site in coverage.sites() {
            let Some(method) = hooks.site(site).and_then(|site| site.method()) else {
                continue;
            };
            let Some((lines, counts)) = coverage.counts(jni, site) else {
                continue;
            };
            let record = self.method(state, method);
            let table = lines
                .iter()
                .map(|block| {
                    block
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect::<Vec<_>>()
                .join(" ");
            let all_lines = lines.iter().flatten().copied();
            let source_name = self
                .jvmti
                .method_declaring_class(method)
                .ok()
                .and_then(|class| self.jvmti.source_file_name(class));
            let line_table_id = site + 1;
            self.emit(
                state,
                LineTable {
                    line_table_id,
                    method_id_ref: record.id,
                    source_name,
                    start_line: all_lines.clone().min(),
                    end_line: all_lines.max(),
                    source_coordinate_type: Some(SourceCoordinateType::LineNumber),
                    source_coordinate_table: Some(table),
                    collation_value: None,
                    trace_id_ref: None,
                    content: NoContent,
                },
            );
            for (block, count) in counts.iter().enumerate() {
                if *count == 0 {
                    continue;
                }
                self.emit(
                    state,
                    Line {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        line_table_id_ref: Some(line_table_id),
                        time: Some(now()),
                        block_index: Some(block as u32),
                        count: Some(*count),
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
            }
        }
    }

    /// The calling thread's id in the trace (looked up once per thread).
    fn current_thread_id(&self) -> u32 {
        let cached = THREAD_TRACE.with(|trace| trace.borrow().thread_id);
        if cached != 0 {
            return cached;
        }
        let Ok(thread) = self.jvmti.current_thread() else {
            return 0;
        };
        let id = self.thread_id(thread);
        if let Some(jni) = crate::jni::thread_jni() {
            crate::jni::delete_local_ref(jni, thread);
        }
        id
    }

    /// A sampled allocation (heap=sites), on the allocating thread: for an object of a class the
    /// filters let through, an objAlloc defining the object's id; the object is tagged, so that
    /// its objFree comes when it is freed.
    pub fn sampled_allocation(&self, thread: jthread, object: jobject, class: jclass, size: i64) {
        let thread_id = self.thread_id(thread);
        let mut state = lock(&self.state);
        if state.trace.is_none() || thread_id == 0 {
            return;
        }
        let signature = self.jvmti.class_signature(class).unwrap_or_default();
        if !state
            .filters
            .includes(&class_name_from_signature(&signature))
        {
            return;
        }
        state.last_object_id += 1;
        let id = state.last_object_id;
        if self
            .jvmti
            .set_tag(object, OBJECT_TAG | i64::from(id))
            .is_err()
        {
            return;
        }
        let class_id = self.class_id(&mut state, class);
        let is_array = state.classes.get(&class_id).map(|c| c.is_array);
        let defined = self.emit(
            &mut state,
            ObjAlloc {
                transient_thread_id_ref: None,
                thread_id_ref: Some(thread_id),
                time: Some(now()),
                is_array,
                transient_obj_id: None,
                obj_id: Some(id),
                size: Some(size.max(0) as u64),
                transient_class_id_ref: None,
                class_id_ref: Some(class_id),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
        if defined {
            state.objects_defined.insert(id);
        }
    }

    /// ObjectFree of an object the tracer tagged: queued (the callback may take no other lock).
    pub fn object_freed(&self, tag: i64) {
        if tag & TAG_KIND == CLASS_TAG || tag & TAG_KIND == OBJECT_TAG {
            lock(&self.freed).push(tag);
        }
    }

    /// The frees queued since: a classUnload for a class the trace defined (the JVM freed its
    /// Class object: the class was unloaded), an objFree for an object it defined; each
    /// undefines its id (and a class's methods).
    pub fn emit_frees(&self) {
        let freed = std::mem::take(&mut *lock(&self.freed));
        if freed.is_empty() {
            return;
        }
        let mut state = lock(&self.state);
        for tag in freed {
            let id = (tag & 0xffff_ffff) as u32;
            if tag & TAG_KIND == CLASS_TAG {
                if !state.classes_defined.remove(&id) {
                    continue;
                }
                let methods: Vec<(usize, u32)> = state
                    .methods
                    .iter()
                    .filter(|(_, record)| record.class_id == id)
                    .map(|(&method, record)| (method, record.id))
                    .collect();
                for (method, method_id) in methods {
                    state.methods.remove(&method);
                    state.inclusion.remove(&method);
                    state.methods_defined.remove(&method_id);
                }
                state.classes.remove(&id);
                self.emit(
                    &mut state,
                    ClassUnload {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        time: Some(now()),
                        transient_class_id_ref: None,
                        class_id_ref: Some(id),
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
            } else if state.objects_defined.remove(&id) {
                let sequence = state.object_sequence.remove(&id);
                self.emit(
                    &mut state,
                    ObjFree {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        time: Some(now()),
                        transient_obj_id_ref: None,
                        obj_id_ref: Some(id),
                        sequence_counter: sequence,
                        context_data: None,
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
            }
        }
    }

    /// A call's entry from the call hooks: a methodEntry with the depth of the JVM's stack
    /// (the hook's own native frame left out), `this` when the hook passed it, and the thread's
    /// CPU time as the hooks' clock reads it; counted for methodCount either way.
    pub fn hooked_entry(
        &self,
        jni: *mut JNIEnv,
        method: jmethodID,
        receiver: jobject,
        constructor: bool,
    ) {
        let count = |state: &mut TraceState| {
            *state.entries.entry(method as usize).or_default() += 1;
        };
        {
            // A class a new filter block took away runs its rewritten code until it is
            // retransformed: its calls are no longer traced.
            let mut state = lock(&self.state);
            if state.trace.is_none() || !self.included(&mut state, method) {
                count(&mut state);
                return;
            }
        }
        let thread_id = self.current_thread_id();
        if thread_id == 0 || THREAD_TRACE.with(|trace| trace.borrow().ended) {
            count(&mut lock(&self.state));
            return;
        }
        let time = now();
        // A null thread is the current one.
        let depth = self
            .jvmti
            .frame_count(std::ptr::null_mut())
            .ok()
            .map(|frames| frames.saturating_sub(1));
        let (cpu, ticket, generation, closed) = self.with_thread_trace(|trace| {
            let cpu = trace.clock.now();
            trace.last_ticket += 1;
            let ticket = trace.last_ticket;
            let mut closed = Vec::new();
            trace.open.enter(
                method as usize,
                constructor,
                |_| (method as usize, ticket),
                &mut |call, end, _| closed.push((call, end)),
            );
            (cpu, ticket, trace.generation, closed)
        });
        let mut state = lock(&self.state);
        count(&mut state);
        // Calls known to have ended (a constructor left through its super(...) call) first.
        self.emit_closed(&mut state, thread_id, time, closed);
        if state.trace.is_none() || self.generation.load(Ordering::Acquire) != generation {
            THREAD_TRACE.with(|trace| trace.borrow_mut().open.retain(|open| open.1 != ticket));
            return;
        }
        let record = self.method(&mut state, method);
        let (object, sequence) = if receiver.is_null() {
            (0, 0)
        } else {
            let object = self.object_id(&mut state, jni, receiver);
            let sequence = state.object_sequence.entry(object).or_default();
            *sequence += 1;
            (object, *sequence)
        };
        let cpu = Seconds::from_nanos(u128::from(cpu));
        self.emit(
            &mut state,
            MethodEntry {
                obj_id_ref: Some(object),
                sequence_counter: Some(sequence),
                stack_depth: depth,
                ..method_entry_element(thread_id, time, ticket, cpu, record)
            },
        );
    }

    /// A call's exit from the call hooks: a methodExit closing the innermost open entry of the
    /// method, and one for any entry above it whose exit never came (`OpenCalls`), so that
    /// entries and exits stay paired.
    pub fn hooked_exit(&self, method: jmethodID, thrown: bool) {
        self.hooked_exit_key(method as usize, thrown);
    }

    /// The innermost open call of `key` (a method's, or a call site's) ended.
    fn hooked_exit_key(&self, key: usize, thrown: bool) {
        let closed = self.with_thread_trace(|trace| {
            if trace.ended {
                return Vec::new();
            }
            let cpu = if trace.open.contains(key) {
                trace.clock.now()
            } else {
                0
            };
            let mut closed = Vec::new();
            trace.open.exit(key, thrown, cpu, &mut |call, end, _| {
                closed.push((call, end))
            });
            closed
        });
        if closed.is_empty() {
            return;
        }
        let time = now();
        let thread_id = self.current_thread_id();
        let mut state = lock(&self.state);
        self.emit_closed(&mut state, thread_id, time, closed);
    }

    /// Elements closing open calls, innermost first: a methodExit for a method's entry, a
    /// methodReturn for a call site's call; each with the thread's CPU time at its end.
    fn emit_closed(
        &self,
        state: &mut TraceState,
        thread_id: u32,
        time: Seconds,
        closed: Vec<((usize, u128), u64)>,
    ) {
        for ((key, ticket), end) in closed {
            let cpu = Seconds::from_nanos(u128::from(end));
            if key & CALL_SITE_KEY != 0 {
                let Some(target) = self
                    .hooks
                    .and_then(|hooks| hooks.call_site((key & !CALL_SITE_KEY) as u32))
                else {
                    continue;
                };
                let record = self.named_method(state, target);
                self.emit(
                    state,
                    call_end!(MethodReturn, thread_id, time, ticket, cpu, record),
                );
            } else {
                let record = self.method(state, key as jmethodID);
                self.emit(
                    state,
                    method_exit_element(thread_id, time, ticket, cpu, record),
                );
            }
        }
    }

    /// A traced method is about to make a call into a class the filters leave out
    /// (callsites=y): a methodCall naming the callee as the call names it.
    pub fn hooked_call(&self, call_site: u32, target: &CallSiteTarget) {
        let thread_id = self.current_thread_id();
        if thread_id == 0 || THREAD_TRACE.with(|trace| trace.borrow().ended) {
            return;
        }
        let time = now();
        let key = CALL_SITE_KEY | call_site as usize;
        let (cpu, ticket, generation, closed) = self.with_thread_trace(|trace| {
            let cpu = trace.clock.now();
            trace.last_ticket += 1;
            let ticket = trace.last_ticket;
            let mut closed = Vec::new();
            trace
                .open
                .enter(key, false, |_| (key, ticket), &mut |call, end, _| {
                    closed.push((call, end))
                });
            (cpu, ticket, trace.generation, closed)
        });
        let mut state = lock(&self.state);
        if state.trace.is_none() || self.generation.load(Ordering::Acquire) != generation {
            THREAD_TRACE.with(|trace| trace.borrow_mut().open.retain(|open| open.1 != ticket));
            return;
        }
        self.emit_closed(&mut state, thread_id, time, closed);
        let record = self.named_method(&mut state, target);
        self.emit(
            &mut state,
            call_start!(
                MethodCall,
                thread_id,
                time,
                ticket,
                Seconds::from_nanos(u128::from(cpu)),
                record
            ),
        );
    }

    /// The call of `call_site` is about to send an HTTP request on `connection`: the request
    /// carries the call's context (its methodCall's ticket) in a header.
    pub fn hooked_outgoing(&self, jni: crate::jni::Jni, connection: jobject, call_site: u32) {
        let key = CALL_SITE_KEY | call_site as usize;
        let Some(ticket) = self.with_thread_trace(|trace| {
            trace
                .open
                .innermost_of(key)
                .next()
                .map(|&(_, ticket)| ticket)
        }) else {
            return;
        };
        let context = openprof_format::invocation::InvocationContext {
            node: self.node_id,
            process: self.process_id,
            agent: self.agent_id,
            thread: self.current_thread_id(),
            ticket,
        };
        let class = jni.object_class(connection);
        let method = jni.method_id(
            class,
            "setRequestProperty",
            "(Ljava/lang/String;Ljava/lang/String;)V",
        );
        if let (Ok(method), Ok(name), Ok(value)) = (
            method,
            jni.new_string(crate::call_hooks::CONTEXT_HEADER),
            jni.new_string(&context.to_header()),
        ) {
            // A connection already connected refuses (it carried the header then): ignored.
            let _ = jni.call(
                connection,
                method,
                b'V',
                &[jvalue { l: name }, jvalue { l: value }],
            );
            jni.delete_local_ref(name);
            jni.delete_local_ref(value);
        }
        jni.delete_local_ref(class);
    }

    /// The call of `method` just entered handles an HTTP request: when the request carries a
    /// caller's context, an invocationContext naming the caller's methodCall, for this entry.
    pub fn hooked_incoming(&self, jni: crate::jni::Jni, exchange: jobject, method: jmethodID) {
        let Some(header) = Self::request_header(jni, exchange, crate::call_hooks::CONTEXT_HEADER)
        else {
            return;
        };
        // From the network: a malformed value is no context.
        let Ok(context) = openprof_format::invocation::InvocationContext::parse(&header) else {
            return;
        };
        let Some(entry_ticket) = self.with_thread_trace(|trace| {
            trace
                .open
                .innermost_of(method as usize)
                .next()
                .map(|&(_, ticket)| ticket)
        }) else {
            return;
        };
        let thread_id = self.current_thread_id();
        let mut state = lock(&self.state);
        self.emit(
            &mut state,
            InvocationContext {
                node_id_ref: Some(context.node),
                process_id_ref: Some(context.process),
                agent_id_ref: Some(context.agent),
                thread_id_ref: Some(context.thread),
                ticket: Some(MultiPart(context.ticket)),
                sequence_counter: None,
                entry_thread_id_ref: Some(thread_id),
                entry_ticket: Some(MultiPart(entry_ticket)),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    /// The first value of a request header of an `HttpExchange`, through its own methods.
    fn request_header(jni: crate::jni::Jni, exchange: jobject, name: &str) -> Option<String> {
        let class = jni.object_class(exchange);
        let headers_method = jni
            .method_id(
                class,
                "getRequestHeaders",
                "()Lcom/sun/net/httpserver/Headers;",
            )
            .ok();
        jni.delete_local_ref(class);
        let headers = jni
            .call(exchange, headers_method?, b'L', &[])
            .ok()?
            .reference();
        if headers.is_null() {
            return None;
        }
        let headers_class = jni.object_class(headers);
        let first = jni
            .method_id(
                headers_class,
                "getFirst",
                "(Ljava/lang/String;)Ljava/lang/String;",
            )
            .ok();
        jni.delete_local_ref(headers_class);
        let key = jni.new_string(name).ok();
        let value = match (first, key) {
            (Some(first), Some(key)) => jni
                .call(headers, first, b'L', &[jvalue { l: key }])
                .ok()
                .map(|value| value.reference()),
            _ => None,
        };
        if let Some(key) = key {
            jni.delete_local_ref(key);
        }
        jni.delete_local_ref(headers);
        let value = value.filter(|value| !value.is_null())?;
        let text = jni.string(value).ok();
        jni.delete_local_ref(value);
        text
    }

    /// The call of `call_site` returned: its methodReturn.
    pub fn hooked_return(&self, call_site: u32) {
        self.hooked_exit_key(CALL_SITE_KEY | call_site as usize, false);
    }

    /// A handler of `method`'s innermost open call caught a throwable: the calls it made that
    /// the throwable left end now.
    pub fn hooked_caught(&self, method: jmethodID) {
        let closed = self.with_thread_trace(|trace| {
            let cpu = trace.clock.now();
            let mut closed = Vec::new();
            trace
                .open
                .unwind_to(method as usize, cpu, &mut |call, end, _| {
                    closed.push((call, end))
                });
            closed
        });
        if closed.is_empty() {
            return;
        }
        let time = now();
        let thread_id = self.current_thread_id();
        let mut state = lock(&self.state);
        self.emit_closed(&mut state, thread_id, time, closed);
    }

    /// A traced constructor's `super(...)` or `this(...)` call returned.
    pub fn hooked_initialized(&self, method: jmethodID) {
        self.with_thread_trace(|trace| trace.open.initialized(method as usize));
    }

    /// MethodExit: a methodExit element closing the innermost open entry of this method.
    pub fn method_exit(&self, thread: jthread, method: jmethodID) {
        let ticket = self.with_thread_trace(|trace| {
            if trace.ended {
                return None;
            }
            let mut ticket = None;
            trace
                .open
                .exit(method as usize, false, 0, &mut |(_, closed), _, _| {
                    ticket = Some(closed)
                });
            ticket
        });
        let Some(ticket) = ticket else { return };
        let time = now();
        let cpu = thread_cpu_time();
        let thread_id = self.thread_id(thread);
        let mut state = lock(&self.state);
        let record = self.method(&mut state, method);
        self.emit(
            &mut state,
            method_exit_element(thread_id, time, ticket, cpu, record),
        );
    }

    /// The exception's id, or -Unavailable- when its class is filtered out.
    fn exception_ref(
        &self,
        state: &mut TraceState,
        jni: *mut JNIEnv,
        exception: jobject,
    ) -> ObjRef {
        let class_id = self.class_of(state, jni, exception);
        if state.classes.get(&class_id).is_some_and(|c| c.included) {
            ObjRef::Id(self.object_id(state, jni, exception))
        } else {
            ObjRef::Unavailable
        }
    }

    /// The ticket of the innermost open entry of `method` on this thread, skipping `skip` of them.
    fn open_ticket(&self, method: jmethodID, skip: usize) -> Option<u128> {
        self.with_thread_trace(|trace| {
            trace
                .open
                .innermost_of(method as usize)
                .nth(skip)
                .map(|(_, ticket)| *ticket)
        })
    }

    /// Exception: a throw element for each traced frame the exception passes through, up to and
    /// including the frame that catches it (every frame when nothing does).
    ///
    /// With the call hooks, every traced method has a handler of the rewriter's that catches
    /// any throwable to report the call's end and throws it on: the exception then passes
    /// through each frame in steps, one event per frame. A step thrown on from such a handler
    /// starts above the frame it left (which had its throw), and a step caught by one ends at
    /// the frame it enters.
    #[allow(clippy::too_many_arguments)]
    pub fn exception(
        &self,
        jni: *mut JNIEnv,
        thread: jthread,
        exception: jobject,
        method: jmethodID,
        location: i64,
        catch_method: jmethodID,
    ) {
        let Ok(mut frames) = self.jvmti.stack_trace(thread, 4096) else {
            return;
        };
        let thrown_on = matches!(&self.calls, Some(CallSource::Hooks(hooks)) if hooks.in_handler(method, location));
        if thrown_on && !frames.is_empty() {
            frames.remove(0);
        }
        let time = THREAD_TRACE.with(|trace| {
            let mut trace = trace.borrow_mut();
            match trace.thrown_at {
                Some(time) if thrown_on => time,
                _ => *trace.thrown_at.insert(now()),
            }
        });
        let through = if catch_method.is_null() {
            frames.len()
        } else {
            frames
                .iter()
                .position(|frame| frame.method == catch_method)
                .map_or(frames.len(), |index| index + 1)
        };
        let thread_id = self.thread_id(thread);
        let mut state = lock(&self.state);
        if state.trace.is_none() {
            return;
        }
        let mut object = None;
        let mut seen: HashMap<usize, usize> = HashMap::new();
        for frame in &frames[..through] {
            let occurrence = seen.entry(frame.method as usize).or_default();
            let skip = *occurrence;
            *occurrence += 1;
            if !self.included(&mut state, frame.method) {
                continue;
            }
            let object =
                *object.get_or_insert_with(|| self.exception_ref(&mut state, jni, exception));
            let record = self.method(&mut state, frame.method);
            self.emit(
                &mut state,
                Throw {
                    transient_thread_id_ref: None,
                    thread_id_ref: Some(thread_id),
                    time: Some(time),
                    obj_id_ref: Some(object),
                    transient_obj_id_ref: None,
                    obj_handle: None,
                    method_id_ref: Some(record.id),
                    transient_method_id_ref: None,
                    ticket: self.open_ticket(frame.method, skip).map(MultiPart),
                    collation_value: None,
                    trace_id_ref: None,
                    content: NoContent,
                },
            );
        }
    }

    /// ExceptionCatch: a catch element in the frame that caught it, when traced.
    pub fn exception_catch(
        &self,
        jni: *mut JNIEnv,
        thread: jthread,
        method: jmethodID,
        location: i64,
        exception: jobject,
    ) {
        // Caught by the rewriter's handler only to be thrown on: no catch of the program's.
        if let Some(CallSource::Hooks(hooks)) = &self.calls {
            if hooks.in_handler(method, location) {
                return;
            }
        }
        let thread_id = self.thread_id(thread);
        let mut state = lock(&self.state);
        if state.trace.is_none() || !self.included(&mut state, method) {
            return;
        }
        let object = self.exception_ref(&mut state, jni, exception);
        let record = self.method(&mut state, method);
        self.emit(
            &mut state,
            Catch {
                transient_thread_id_ref: None,
                thread_id_ref: Some(thread_id),
                time: Some(now()),
                obj_id_ref: Some(object),
                transient_obj_id_ref: None,
                obj_handle: None,
                method_id_ref: Some(record.id),
                transient_method_id_ref: None,
                ticket: self.open_ticket(method, 0).map(MultiPart),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    /// Monitor contention and waits (monitor=y).
    pub fn monitor(&self, jni: *mut JNIEnv, thread: jthread, object: jobject, event: MonitorEvent) {
        let thread_id = self.thread_id(thread);
        // A thread that has ended (its ThreadEnd written) still takes its own Thread object's
        // monitor to wake threads joining it: the trace no longer defines the thread, so such
        // late events are left out, as method events are.
        if thread_id == 0 || THREAD_TRACE.with(|trace| trace.borrow().ended) {
            return;
        }
        let thread_id = Some(thread_id);
        let (time, cpu) = (Some(now()), Some(thread_cpu_time()));
        let mut state = lock(&self.state);
        if state.trace.is_none() {
            return;
        }
        let obj = Some(self.object_id(&mut state, jni, object));
        let class = Some(self.class_of(&mut state, jni, object));
        let element: TraceElement = match event {
            MonitorEvent::ContendedEnter => MonitorContendedEnter {
                transient_thread_id_ref: None,
                thread_id_ref: thread_id,
                time,
                obj_id_ref: obj,
                class_id_ref: class,
                thread_cpu_time: cpu,
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            }
            .into(),
            MonitorEvent::ContendedEntered => MonitorContendedEntered {
                transient_thread_id_ref: None,
                thread_id_ref: thread_id,
                time,
                obj_id_ref: obj,
                class_id_ref: class,
                thread_cpu_time: cpu,
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            }
            .into(),
            MonitorEvent::Wait { timeout_ms } => MonitorWait {
                transient_thread_id_ref: None,
                thread_id_ref: thread_id,
                time,
                obj_id_ref: obj,
                class_id_ref: class,
                timeout: Some(timeout_ms),
                thread_cpu_time: cpu,
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            }
            .into(),
            MonitorEvent::Waited { timed_out } => MonitorWaited {
                transient_thread_id_ref: None,
                thread_id_ref: thread_id,
                time,
                obj_id_ref: obj,
                class_id_ref: class,
                timed_out: Some(timed_out),
                thread_cpu_time: cpu,
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            }
            .into(),
        };
        self.emit(&mut state, element);
    }

    /// GarbageCollectionStart: runs inside a safepoint, so it only records the time.
    pub fn gc_started(&self) {
        let index = self.gc.starts.load(Ordering::Relaxed);
        self.gc.times[(index * 2 % 128) as usize]
            .store(crate::signals::wall_nanos(), Ordering::Relaxed);
        self.gc.starts.store(index + 1, Ordering::Release);
    }

    /// GarbageCollectionFinish: likewise.
    pub fn gc_finished(&self) {
        let index = self.gc.finishes.load(Ordering::Relaxed);
        self.gc.times[(index * 2 % 128 + 1) as usize]
            .store(crate::signals::wall_nanos(), Ordering::Relaxed);
        self.gc.finishes.store(index + 1, Ordering::Release);
    }

    /// Emits the GCs recorded since the last call, with the heap's (total, used) bytes as
    /// `heap` finds them now (agent thread).
    pub fn emit_gcs(&self, heap: impl FnOnce() -> Option<(u64, u64)>) {
        let starts = self.gc.starts.load(Ordering::Acquire);
        let finishes = self.gc.finishes.load(Ordering::Acquire);
        let mut emitted = lock(&self.gc.emitted);
        if (emitted.0, emitted.1) == (starts, finishes) {
            return;
        }
        let heap = heap();
        let mut state = lock(&self.state);
        while emitted.0 < starts || emitted.1 < finishes {
            if emitted.0 < starts && emitted.0 <= emitted.1 {
                let nanos = self.gc.times[(emitted.0 * 2 % 128) as usize].load(Ordering::Relaxed);
                self.emit(
                    &mut state,
                    GcStart {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        time: Some(Seconds::from_nanos(nanos.into())),
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
                emitted.0 += 1;
            } else {
                let nanos =
                    self.gc.times[(emitted.1 * 2 % 128 + 1) as usize].load(Ordering::Relaxed);
                self.emit(
                    &mut state,
                    GcFinish {
                        transient_thread_id_ref: None,
                        thread_id_ref: None,
                        time: Some(Seconds::from_nanos(nanos.into())),
                        total_obj_space: heap.map(|(total, _)| total),
                        used_obj_space: heap.map(|(_, used)| used),
                        used_objects: None,
                        collation_value: None,
                        trace_id_ref: None,
                        content: NoContent,
                    },
                );
                emitted.1 += 1;
            }
        }
    }

    /// A new filter block, from the collector: it applies to what is traced from now on, and
    /// is written into the trace.
    pub fn set_filters(&self, block: &str) -> Result<String, String> {
        let filters = FilterBlock::parse_inline(block)?;
        // The block is in force (and in the trace) before any code changes: no call of a
        // class it adds comes before it, none of a class it takes away after it.
        let count = {
            let mut state = lock(&self.state);
            for class in state.classes.values_mut() {
                class.included = filters.includes(&class.name);
            }
            state.inclusion.clear();
            let elements = filters.to_elements();
            let count = elements.len();
            state.filters = filters.clone();
            for element in elements {
                self.emit(&mut state, element);
            }
            count
        };
        // The classes whose inclusion changed get their instrumented or their original code.
        let retransformed = match (&self.calls, crate::jni::thread_jni()) {
            (Some(CallSource::Hooks(hooks)), Some(jni)) => Some(hooks.set_filters(jni, filters)),
            _ => None,
        };
        Ok(match retransformed {
            Some(classes) => format!("{count} filters in force; {classes} classes retransformed"),
            None => format!("{count} filters in force"),
        })
    }

    /// A traced call of method parameter tracing: a methodEntry holding its parameter values
    /// (and, when asked for, the stack in contextData). Returns the entry's ticket.
    pub fn mpt_entry(
        &self,
        jni: *mut JNIEnv,
        method: jmethodID,
        time: Seconds,
        cpu_nanos: u64,
        values: Vec<Value>,
        stack: Option<String>,
    ) -> Option<u128> {
        let thread_id = THREAD_TRACE.with(|trace| trace.borrow().thread_id);
        let thread_id = if thread_id == 0 {
            let thread = self.jvmti.current_thread().ok()?;
            let id = self.thread_id(thread);
            crate::jni::delete_local_ref(jni, thread);
            id
        } else {
            thread_id
        };
        let (ticket, generation, ended) = self.with_thread_trace(|trace| {
            trace.last_ticket += 1;
            (trace.last_ticket, trace.generation, trace.ended)
        });
        if thread_id == 0 || ended {
            return None;
        }
        let mut state = lock(&self.state);
        if state.trace.is_none() || self.generation.load(Ordering::Acquire) != generation {
            return None;
        }
        let record = self.method(&mut state, method);
        let cpu = Seconds::from_nanos(u128::from(cpu_nanos));
        let written = self.emit(
            &mut state,
            MethodEntry {
                context_data: stack,
                content: Values(values),
                ..method_entry_element(thread_id, time, ticket, cpu, record)
            },
        );
        written.then_some(ticket)
    }

    /// The exit of a call `mpt_entry` wrote.
    pub fn mpt_exit(&self, method: jmethodID, ticket: u128, time: Seconds, cpu_nanos: u64) {
        let (thread_id, generation) =
            self.with_thread_trace(|trace| (trace.thread_id, trace.generation));
        let mut state = lock(&self.state);
        if state.trace.is_none() || self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        let record = self.method(&mut state, method);
        let cpu = Seconds::from_nanos(u128::from(cpu_nanos));
        self.emit(
            &mut state,
            method_exit_element(thread_id, time, ticket, cpu, record),
        );
    }

    /// A name/value pair in the trace (a tag element).
    pub fn note(&self, name: &str, value: &str) {
        let mut state = lock(&self.state);
        if state.trace.is_none() {
            return;
        }
        self.emit(
            &mut state,
            Tag {
                name: Some(name.into()),
                value: Some(value.into()),
                content: NoContent,
            },
        );
    }

    /// A snapshot marker: what follows it, up to the next one, is a snapshot.
    pub fn snapshot(&self, name: &str) {
        let mut state = lock(&self.state);
        self.emit(
            &mut state,
            Snapshot {
                name: Some(name.into()),
                time: Some(now()),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
    }

    /// At VMDeath: runtimeShutdown, a methodCount for every method of every loaded class (when
    /// methods are traced), traceEnd, agentDestroy; then the document is closed and written.
    pub fn finish(&self, jni: *mut JNIEnv, thread_id: Option<u32>) {
        self.emit_frees();
        let mut state = lock(&self.state);
        self.emit(
            &mut state,
            RuntimeShutdown {
                transient_thread_id_ref: None,
                thread_id_ref: thread_id,
                time: Some(now()),
                collation_value: None,
                trace_id_ref: None,
                content: NoContent,
            },
        );
        // The counts go before traceEnd, in the trace that is running (if the collector ended
        // the last one, they went with its traceEnd).
        self.close_trace(&mut state, jni);
        if state.dropped > 0 {
            // A tag carries no collationValue: it reports the loss without making another gap.
            let mut out = String::new();
            Tag {
                name: Some("openprof.dropped".into()),
                value: Some(state.dropped.to_string()),
                content: NoContent,
            }
            .write(&mut out);
            out.push('\n');
            state.pending.push_str(&out);
        }
        let mut out = String::new();
        AgentDestroy {
            agent_id_ref: self.agent_id,
            time: now(),
            content: NoContent,
        }
        .write(&mut out);
        out.push('\n');
        if matches!(&*lock(&self.sink), TraceSink::File(_)) {
            out.push_str(DOCUMENT_TAIL);
        }
        state.pending.push_str(&out);
        state.finished = true;
        drop(state);
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_cut_out_of_command_lines() {
        assert_eq!(
            super::redact_token("java -agentpath:a.so=net=h:1,token=s3cret,format=x Main token=x"),
            "java -agentpath:a.so=net=h:1,token=(hidden),format=x Main token=(hidden)"
        );
    }
}
