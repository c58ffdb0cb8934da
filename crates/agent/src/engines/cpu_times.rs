//! cpu=times for HPROF output: the true number of calls of every method of the traced classes
//! and the thread CPU time spent in it (callees excluded), by the trace of traced callers above
//! it; and the CPU TIME dump. The calls come from the class rewriter's hooks (`call_hooks`);
//! on a JVM that can't retransform classes, from JVMTI's MethodEntry and MethodExit events.
//! Methods of classes the filters exclude are not traced: their time counts to their caller.
//! (With format=x the trace engine hears the calls instead.)
//!
//! Each thread keeps its own tree of call paths (who called whom among traced methods) with
//! each path's calls and CPU time, behind a lock of its own that only a dump contends for; a
//! dump turns the paths into HPROF traces of `depth` frames.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openprof_format::java_names::class_name_from_signature;
use openprof_format::trace::filter::FilterBlock;

use jvmti_bindings::sys::jvmti::{JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT};
use openprof_format::hprof_text::CpuTableKind;
use openprof_format::options::Options;

use crate::call_hooks::{CallHooks, CallListener, CpuClock, OpenCalls};
use crate::context::Context;
use crate::engine::{Dump, Engine, Need};
use crate::error::{AgentError, AgentResult};
use crate::guard::{callback, Admit};
use crate::jni::Jni;
use crate::jvmti::{
    jclass, jmethodID, jobject, jthread, jvmtiCapabilities, jvmtiEnv, jvmtiEvent,
    jvmtiEventCallbacks, JNIEnv, JavaVM, Jvmti,
};
use crate::methods::Location;
use crate::output::hprof_date;
use crate::sync::lock;

/// Where the calls come from.
enum Source {
    /// The rewritten classes' hooks; a call's key is its site.
    Hooks(&'static CallHooks),
    /// JVMTI's method events; a call's key is its jmethodID, kept if its class is traced.
    Events {
        filters: FilterBlock,
        included: Mutex<HashMap<usize, bool>>,
    },
}

/// A path of traced calls from the thread's first: the method called last (its key), who
/// called it, and its calls and CPU time since the last dump.
struct PathNode {
    parent: u32,
    key: usize,
    calls: u64,
    cpu_ns: u64,
}

/// What an open call keeps: its path, and CPU times to find its own.
struct OpenCall {
    node: u32,
    entered_cpu: u64,
    callees_cpu: u64,
}

/// One thread's calls.
struct ThreadCalls {
    /// The thread's serial number, once looked up (only when traces carry threads).
    serial: Option<u32>,
    /// Node 0 is the root (no call).
    nodes: Vec<PathNode>,
    children: HashMap<(u32, usize), u32>,
    open: OpenCalls<OpenCall>,
    clock: CpuClock,
}

impl ThreadCalls {
    fn new() -> ThreadCalls {
        ThreadCalls {
            serial: None,
            nodes: vec![PathNode {
                parent: 0,
                key: 0,
                calls: 0,
                cpu_ns: 0,
            }],
            children: HashMap::new(),
            open: OpenCalls::default(),
            clock: CpuClock::default(),
        }
    }

    /// Counts a call that ended at `end` on its path, and its time as its caller's callees'.
    fn closer(nodes: &mut [PathNode]) -> impl FnMut(OpenCall, u64, Option<&mut OpenCall>) + '_ {
        |call, end, caller| {
            let spent = end.saturating_sub(call.entered_cpu);
            let node = &mut nodes[call.node as usize];
            node.calls += 1;
            node.cpu_ns += spent.saturating_sub(call.callees_cpu);
            if let Some(caller) = caller {
                caller.callees_cpu += spent;
            }
        }
    }

    fn enter(&mut self, key: usize, constructor: bool, now: u64) {
        let ThreadCalls {
            nodes,
            children,
            open,
            ..
        } = self;
        // Calls known to have ended are closed first: the path is the caller's.
        let mut node_of = |parent: u32, nodes: &mut Vec<PathNode>| {
            let next = nodes.len() as u32;
            let node = *children.entry((parent, key)).or_insert(next);
            if node == next {
                nodes.push(PathNode {
                    parent,
                    key,
                    calls: 0,
                    cpu_ns: 0,
                });
            }
            node
        };
        let mut parent = None;
        open.enter(
            key,
            constructor,
            |caller| {
                parent = Some(caller.map_or(0, |caller| caller.node));
                OpenCall {
                    node: 0,
                    entered_cpu: now,
                    callees_cpu: 0,
                }
            },
            &mut Self::closer(nodes),
        );
        let node = node_of(parent.unwrap_or(0), nodes);
        if let Some(call) = open.last_mut() {
            call.node = node;
        }
    }

    fn initialized(&mut self, key: usize) {
        self.open.initialized(key);
    }

    /// Closes the innermost open call of `key` (see [`OpenCalls::exit`]).
    fn exit(&mut self, key: usize, thrown: bool, now: u64) {
        let ThreadCalls { nodes, open, .. } = self;
        open.exit(key, thrown, now, &mut Self::closer(nodes));
    }

    /// Each path's innermost `depth` keys (innermost first) with its calls and CPU time since
    /// the last take, which starts them from zero again.
    fn take(&mut self, depth: usize) -> Vec<(Vec<usize>, u64, u64)> {
        let mut taken = Vec::new();
        for index in 1..self.nodes.len() {
            let (calls, cpu_ns) = {
                let node = &mut self.nodes[index];
                (
                    std::mem::take(&mut node.calls),
                    std::mem::take(&mut node.cpu_ns),
                )
            };
            if calls == 0 {
                continue;
            }
            let mut keys = Vec::with_capacity(depth);
            let mut at = index;
            while at != 0 && keys.len() < depth {
                keys.push(self.nodes[at].key);
                at = self.nodes[at].parent as usize;
            }
            taken.push((keys, calls, cpu_ns));
        }
        taken
    }
}

thread_local! {
    static CALLS: RefCell<Option<Arc<Mutex<ThreadCalls>>>> = const { RefCell::new(None) };
}

/// (thread serial when traces carry threads, methods innermost first) → (calls, CPU ns).
type TimedTraces = HashMap<(Option<u32>, Vec<usize>), (u64, u64)>;

pub struct CpuTimes {
    jvmti: Jvmti,
    source: Source,
    depth: usize,
    with_thread: bool,
    /// Every thread's calls; a thread's entry goes once the thread has ended and its calls
    /// were taken.
    threads: Mutex<Vec<Arc<Mutex<ThreadCalls>>>>,
}

impl CpuTimes {
    /// The hooks when this JVM can retransform classes; else JVMTI's method events, which only
    /// an agent loaded at the JVM's start can have.
    pub fn new(
        vm: *mut JavaVM,
        jvmti: Jvmti,
        filters: FilterBlock,
        depth: u32,
        with_thread: bool,
    ) -> AgentResult<Self> {
        let ways = crate::call_hooks::Ways {
            calls: true,
            receiver: false,
            coverage: false,
            call_sites: false,
        };
        let source = match CallHooks::install(vm, filters.clone(), ways) {
            Ok(hooks) => Source::Hooks(hooks),
            Err(reason) => {
                let mut capabilities = jvmtiCapabilities::default();
                capabilities.set_can_generate_method_entry_events(true);
                capabilities.set_can_generate_method_exit_events(true);
                jvmti.add_capabilities(&capabilities).map_err(|_| {
                    AgentError::Refused(format!(
                        "cpu=times: {reason}, and its JVMTI method events (can_generate_method_\
                         entry_events, can_generate_method_exit_events) are granted only to \
                         agents loaded at the JVM's start"
                    ))
                })?;
                Source::Events {
                    filters,
                    included: Mutex::new(HashMap::new()),
                }
            }
        };
        Ok(CpuTimes {
            jvmti,
            source,
            depth: depth.max(1) as usize,
            with_thread,
            threads: Mutex::new(Vec::new()),
        })
    }

    /// Runs `body` on this thread's calls, registering them on first use.
    fn with_thread<R>(&self, body: impl FnOnce(&mut ThreadCalls) -> R) -> R {
        CALLS.with(|cell| {
            let mut cell = cell.borrow_mut();
            let shared = cell.get_or_insert_with(|| {
                let shared = Arc::new(Mutex::new(ThreadCalls::new()));
                lock(&self.threads).push(Arc::clone(&shared));
                shared
            });
            let mut calls = lock(shared);
            if self.with_thread && calls.serial.is_none() {
                calls.serial = self.current_serial();
            }
            body(&mut calls)
        })
    }

    /// The calling thread's serial number, when it has one yet.
    fn current_serial(&self) -> Option<u32> {
        let context = crate::context::get()?;
        let thread = self.jvmti.current_thread().ok()?;
        let serial = context.thread_serial(thread);
        if let Some(jni) = crate::jni::thread_jni() {
            crate::jni::delete_local_ref(jni, thread);
        }
        (serial != 0).then_some(serial)
    }

    fn enter(&self, key: usize, constructor: bool) {
        self.with_thread(|calls| {
            let now = calls.clock.now();
            calls.enter(key, constructor, now);
        });
    }

    fn exit(&self, key: usize, thrown: bool) {
        self.with_thread(|calls| {
            // The clock is read only for a call that is open.
            let now = if calls.open.contains(key) {
                calls.clock.now()
            } else {
                0
            };
            calls.exit(key, thrown, now);
        });
    }

    /// Whether an event's method is of a traced class, asking the JVM once per method.
    fn included(&self, method: jmethodID) -> bool {
        let Source::Events { filters, included } = &self.source else {
            return true;
        };
        *lock(included).entry(method as usize).or_insert_with(|| {
            self.jvmti
                .method_declaring_class(method)
                .and_then(|class| self.jvmti.class_signature(class))
                .map(|signature| filters.includes(&class_name_from_signature(&signature)))
                .unwrap_or(false)
        })
    }

    /// A key's jmethodID: the site's (hooks) or the key itself (events).
    fn method_of(&self, key: usize) -> Option<jmethodID> {
        match self.source {
            Source::Hooks(hooks) => hooks.site(key as u32)?.method(),
            Source::Events { .. } => Some(key as jmethodID),
        }
    }

    /// What every thread recorded since the last call; threads that ended leave.
    fn take(&self) -> TimedTraces {
        let mut traces: TimedTraces = HashMap::new();
        lock(&self.threads).retain(|shared| {
            let (serial, taken) = {
                let mut calls = lock(shared);
                (calls.serial, calls.take(self.depth))
            };
            for (keys, calls, cpu_ns) in taken {
                let Some(methods) = keys
                    .iter()
                    .map(|&key| self.method_of(key).map(|method| method as usize))
                    .collect::<Option<Vec<usize>>>()
                else {
                    continue;
                };
                let timed = traces.entry((serial, methods)).or_default();
                timed.0 += calls;
                timed.1 += cpu_ns;
            }
            // The thread's own reference is gone once it ended.
            Arc::strong_count(shared) > 1
        });
        traces
    }
}

impl CallListener for CpuTimes {
    fn entered(&self, _jni: Jni, site: u32, _receiver: jobject, constructor: bool) {
        self.enter(site as usize, constructor);
    }

    fn initialized(&self, _jni: Jni, site: u32) {
        self.with_thread(|calls| calls.initialized(site as usize));
    }

    fn exited(&self, _jni: Jni, site: u32, thrown: bool) {
        self.exit(site as usize, thrown);
    }
}

impl Engine for CpuTimes {
    fn needs(_options: &Options) -> Vec<Need> {
        // The hooks bring their own JVMTI environment; the events' capabilities are asked for
        // only where the hooks can't be had.
        Vec::new()
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        if let Source::Events { .. } = self.source {
            callbacks.MethodEntry = Some(on_method_entry);
            callbacks.MethodExit = Some(on_method_exit);
        }
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        match self.source {
            Source::Hooks(_) => Vec::new(),
            Source::Events { .. } => vec![JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT],
        }
    }

    fn start(&self, _context: &Context, jni: *mut JNIEnv) -> Option<String> {
        let Source::Hooks(hooks) = self.source else {
            return Some("cpu=times times methods by JVMTI's method events".into());
        };
        let listener: &'static dyn CallListener = crate::engine::running::<CpuTimes>()?;
        Some(match hooks.start(jni, listener) {
            Ok(done) => done,
            Err(error) => {
                eprintln!("openprof: cpu=times: {error}");
                format!("cpu=times: {error}")
            }
        })
    }

    fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        if let Source::Hooks(hooks) = self.source {
            hooks.class_prepared(jni, class);
        }
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        match self.source {
            Source::Hooks(hooks) => Some(hooks.describe()),
            Source::Events { .. } => None,
        }
    }

    /// HPROF's CPU TIME table: calls and CPU time of the traced methods since the last dump.
    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        let options = &context.options;
        if options.verbose {
            eprint!("Dumping CPU usage by timing methods ...");
        }
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        for ((thread, frames), (calls, cpu)) in self.take() {
            let frames = frames
                .into_iter()
                .map(|method| (method as jmethodID, Location::Unknown));
            report
                .profile
                .add_cost(context.jvmti, thread, frames, calls, cpu);
        }
        let times = report
            .profile
            .take_dump(CpuTableKind::Time, hprof_date(), options.cutoff);
        if let Err(error) = report.output.cpu_times(&times) {
            report.complain(error);
        }
        if options.verbose {
            eprintln!(" done.");
        }
    }
}

unsafe extern "system" fn on_method_entry(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    method: jmethodID,
) {
    callback("MethodEntry", Admit::Profiling, || {
        if let Some(times) = crate::engine::running::<CpuTimes>() {
            if times.included(method) {
                times.enter(method as usize, false);
            }
        }
    });
}

unsafe extern "system" fn on_method_exit(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    method: jmethodID,
    _was_popped_by_exception: jvmti_bindings::sys::jni::jboolean,
    _return_value: jvmti_bindings::sys::jni::jvalue,
) {
    callback("MethodExit", Admit::Profiling, || {
        if let Some(times) = crate::engine::running::<CpuTimes>() {
            times.exit(method as usize, false);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_count_calls_and_cpu_without_the_callees_and_cut_to_depth() {
        let mut calls = ThreadCalls::new();
        // a { b { c } b } at CPU times 0 .. 100.
        calls.enter(1, false, 0);
        calls.enter(2, false, 10);
        calls.enter(3, false, 15);
        calls.exit(3, false, 25);
        calls.exit(2, false, 40);
        calls.enter(2, false, 50);
        calls.exit(2, false, 60);
        calls.exit(1, false, 100);
        let mut taken = calls.take(2);
        taken.sort();
        assert_eq!(
            taken,
            vec![
                (vec![1], 1, 100 - 30 - 10),
                (vec![2, 1], 2, 20 + 10),
                (vec![3, 2], 1, 10),
            ]
        );
        // Taken means started again from zero.
        assert!(calls.take(2).is_empty());
    }

    #[test]
    fn an_exit_closes_calls_whose_exit_never_came() {
        let mut calls = ThreadCalls::new();
        calls.enter(1, false, 0);
        calls.enter(2, false, 10); // never exits
        calls.exit(1, false, 30);
        let mut taken = calls.take(8);
        taken.sort();
        assert_eq!(taken, vec![(vec![1], 1, 10), (vec![2, 1], 1, 20)]);
        assert!(calls.open.is_empty());
        // An exit of nothing open changes nothing.
        calls.exit(7, false, 40);
        assert!(calls.take(8).is_empty());
    }

    #[test]
    fn a_constructor_left_through_its_super_call_ends_where_its_superclass_threw() {
        let mut calls = ThreadCalls::new();
        // main { new Sub(): Base() throws at 30; main catches it and calls f at 35 }
        calls.enter(1, false, 0);
        calls.enter(2, true, 10);
        calls.enter(3, true, 20);
        calls.exit(3, true, 30);
        calls.enter(4, false, 35);
        calls.exit(4, false, 45);
        calls.exit(1, false, 50);
        let mut taken = calls.take(8);
        taken.sort();
        assert_eq!(
            taken,
            vec![
                (vec![1], 1, 50 - 20 - 10),
                (vec![2, 1], 1, 10),
                (vec![3, 2, 1], 1, 10),
                (vec![4, 1], 1, 10),
            ]
        );
    }
}
