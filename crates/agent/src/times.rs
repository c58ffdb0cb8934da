//! cpu=times for HPROF text output: the true number of entries of every traced method and the
//! thread CPU time spent in it (callees excluded), by the trace of traced callers above it.
//! Methods of classes the filters exclude are not traced: their time counts to their caller.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use openprof_format::java_names::class_name_from_signature;
use openprof_format::trace::filter::FilterBlock;

use crate::jvmti::{jmethodID, jthread, Jvmti};
use crate::signals::thread_cpu_nanos;

struct OpenCall {
    method: usize,
    entered_cpu: u64,
    callees_cpu: u64,
}

thread_local! {
    static CALLS: RefCell<Vec<OpenCall>> = const { RefCell::new(Vec::new()) };
}

/// (thread serial when traces carry threads, methods innermost first) → (entries, CPU ns).
pub type TimedTraces = HashMap<(Option<u32>, Vec<usize>), (u64, u64)>;

pub struct MethodTimes {
    jvmti: Jvmti,
    filters: FilterBlock,
    depth: usize,
    with_thread: bool,
    included: Mutex<HashMap<usize, bool>>,
    traces: Mutex<TimedTraces>,
}

impl MethodTimes {
    pub fn new(jvmti: Jvmti, filters: FilterBlock, depth: u32, with_thread: bool) -> Self {
        MethodTimes {
            jvmti,
            filters,
            depth: depth.max(1) as usize,
            with_thread,
            included: Mutex::new(HashMap::new()),
            traces: Mutex::new(HashMap::new()),
        }
    }

    fn included(&self, method: jmethodID) -> bool {
        let mut included = self.included.lock().unwrap_or_else(|p| p.into_inner());
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

    pub fn entry(&self, method: jmethodID) {
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

    pub fn exit(&self, thread: jthread, method: jmethodID) {
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
        let mut traces = self.traces.lock().unwrap_or_else(|p| p.into_inner());
        let timed = traces.entry((thread, frames)).or_default();
        timed.0 += 1;
        timed.1 += own_cpu;
    }

    /// What was recorded since the last call.
    pub fn take(&self) -> TimedTraces {
        std::mem::take(&mut *self.traces.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
