//! cpu=times for HPROF output: the true number of entries of every traced method and the
//! thread CPU time spent in it (callees excluded), by the trace of traced callers above it,
//! from JVMTI's MethodEntry and MethodExit events; and the CPU TIME dump. Methods of classes
//! the filters exclude are not traced: their time counts to their caller. (With format=x the
//! trace engine handles these events instead.)

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use openprof_format::java_names::class_name_from_signature;
use openprof_format::trace::filter::FilterBlock;

use jvmti_bindings::sys::jvmti::{JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT};
use openprof_format::hprof_text::CpuTableKind;
use openprof_format::options::Options;

use crate::context::Context;
use crate::engine::{need, Dump, Engine, Need};
use crate::guard::{callback, Admit};
use crate::jvmti::{jmethodID, jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv, Jvmti};
use crate::methods::Location;
use crate::output::hprof_date;
use crate::signals::thread_cpu_nanos;
use crate::sync::lock;

struct OpenCall {
    method: usize,
    entered_cpu: u64,
    callees_cpu: u64,
}

thread_local! {
    static CALLS: RefCell<Vec<OpenCall>> = const { RefCell::new(Vec::new()) };
}

/// (thread serial when traces carry threads, methods innermost first) → (entries, CPU ns).
type TimedTraces = HashMap<(Option<u32>, Vec<usize>), (u64, u64)>;

pub struct CpuTimes {
    jvmti: Jvmti,
    filters: FilterBlock,
    depth: usize,
    with_thread: bool,
    included: Mutex<HashMap<usize, bool>>,
    traces: Mutex<TimedTraces>,
}

impl CpuTimes {
    pub fn new(jvmti: Jvmti, filters: FilterBlock, depth: u32, with_thread: bool) -> Self {
        CpuTimes {
            jvmti,
            filters,
            depth: depth.max(1) as usize,
            with_thread,
            included: Mutex::new(HashMap::new()),
            traces: Mutex::new(HashMap::new()),
        }
    }

    fn included(&self, method: jmethodID) -> bool {
        let mut included = lock(&self.included);
        *included.entry(method as usize).or_insert_with(|| {
            self.jvmti
                .method_declaring_class(method)
                .and_then(|class| self.jvmti.class_signature(class))
                .map(|signature| {
                    self.filters
                        .includes(&class_name_from_signature(&signature))
                })
                .unwrap_or(false)
        })
    }

    fn entry(&self, method: jmethodID) {
        if self.included(method) {
            let entered_cpu = thread_cpu_nanos();
            CALLS.with(|calls| {
                calls.borrow_mut().push(OpenCall {
                    method: method as usize,
                    entered_cpu,
                    callees_cpu: 0,
                })
            });
        }
    }

    fn exit(&self, thread: jthread, method: jmethodID) {
        let now = thread_cpu_nanos();
        let finished = CALLS.with(|calls| {
            let mut calls = calls.borrow_mut();
            if calls
                .last()
                .is_none_or(|call| call.method != method as usize)
            {
                return None;
            }
            let call = calls.pop()?;
            let spent = now.saturating_sub(call.entered_cpu);
            if let Some(caller) = calls.last_mut() {
                caller.callees_cpu += spent;
            }
            let mut frames = vec![call.method];
            frames.extend(calls.iter().rev().take(self.depth - 1).map(|c| c.method));
            Some((frames, spent.saturating_sub(call.callees_cpu)))
        });
        let Some((frames, own_cpu)) = finished else {
            return;
        };
        let thread = self
            .with_thread
            .then(|| self.jvmti.thread_word(thread).unwrap_or(0) as u32);
        let mut traces = lock(&self.traces);
        let timed = traces.entry((thread, frames)).or_default();
        timed.0 += 1;
        timed.1 += own_cpu;
    }

    /// What was recorded since the last call.
    fn take(&self) -> TimedTraces {
        std::mem::take(&mut *lock(&self.traces))
    }
}

impl Engine for CpuTimes {
    fn needs(_options: &Options) -> Vec<Need> {
        vec![
            need!(
                can_generate_method_entry_events,
                set_can_generate_method_entry_events,
                "cpu=times"
            ),
            need!(
                can_generate_method_exit_events,
                set_can_generate_method_exit_events,
                "cpu=times"
            ),
        ]
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        callbacks.MethodEntry = Some(on_method_entry);
        callbacks.MethodExit = Some(on_method_exit);
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        vec![JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT]
    }

    /// HPROF's CPU TIME table: entries and CPU time of the traced methods since the last dump.
    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        let options = &context.options;
        if options.verbose {
            eprint!("Dumping CPU usage by timing methods ...");
        }
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        for ((thread, frames), (entries, cpu)) in self.take() {
            let frames = frames
                .into_iter()
                .map(|method| (method as jmethodID, Location::Unknown));
            report
                .profile
                .add_cost(context.jvmti, thread, frames, entries, cpu);
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
            times.entry(method);
        }
    });
}

unsafe extern "system" fn on_method_exit(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    _was_popped_by_exception: jvmti_bindings::sys::jni::jboolean,
    _return_value: jvmti_bindings::sys::jni::jvalue,
) {
    callback("MethodExit", Admit::Profiling, || {
        if let Some(times) = crate::engine::running::<CpuTimes>() {
            times.exit(thread, method);
        }
    });
}
