//! lock= (and monitor=y with HPROF text output): contended `synchronized` enters as a profile.
//! JVMTI's MonitorContendedEnter marks when a thread starts to block on a monitor another
//! thread holds, MonitorContendedEntered when it got it; enters that blocked at least the
//! threshold are counted with the blocked thread's stack and the monitor's class, and each dump
//! writes them as HPROF's MONITOR TIME table.

use std::cell::Cell;

use jvmti_bindings::sys::jvmti::{
    JVMTI_EVENT_MONITOR_CONTENDED_ENTER, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
};
use openprof_format::java_names::class_name_from_signature;
use openprof_format::options::Options;

use crate::context::Context;
use crate::engine::{need, running, Dump, Engine, Need};
use crate::guard::{callback, Admit};
use crate::jni::Jni;
use crate::jvmti::{jobject, jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv};
use crate::methods::Location;
use crate::output::hprof_date;
use crate::signals::wall_nanos;
use crate::sync::lock;

pub struct Locks {
    threshold_ns: u64,
}

thread_local! {
    /// When this thread began to block on a contended monitor (JVMTI callbacks only: never
    /// touched in a signal handler).
    static BLOCKED_SINCE: Cell<Option<u64>> = const { Cell::new(None) };
}

impl Locks {
    pub fn new(options: &Options) -> Locks {
        Locks {
            threshold_ns: options.lock_threshold_ns().unwrap_or(0),
        }
    }

    fn entered(&self, jni: *mut JNIEnv, thread: jthread, object: jobject) {
        let Some(since) = BLOCKED_SINCE.with(Cell::take) else {
            return;
        };
        let blocked = wall_nanos().saturating_sub(since);
        if blocked < self.threshold_ns {
            return;
        }
        let Some(context) = crate::context::get() else {
            return;
        };
        let jvmti = context.jvmti;
        let Ok(frames) = jvmti.stack_trace(thread, context.options.depth) else {
            return;
        };
        let class = jvmti
            .class_signature(Jni(jni).object_class(object))
            .map(|signature| class_name_from_signature(&signature))
            .unwrap_or_else(|_| "<unknown>".into());
        let serial = context.thread_serial(thread);
        let thread = (context.options.thread && serial != 0).then_some(serial);
        let Some(report) = &context.report else {
            return;
        };
        lock(report).profile.add_lock(
            jvmti,
            thread,
            frames
                .iter()
                .map(|frame| (frame.method, Location::of_jvmti(frame.location))),
            class,
            blocked,
        );
    }
}

impl Engine for Locks {
    fn needs(_options: &Options) -> Vec<Need> {
        vec![need!(
            can_generate_monitor_events,
            set_can_generate_monitor_events,
            "lock="
        )]
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        callbacks.MonitorContendedEnter = Some(on_contended_enter);
        callbacks.MonitorContendedEntered = Some(on_contended_entered);
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        vec![
            JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
        ]
    }

    fn dump(&self, _context: &Context, dump: &Dump<'_>) {
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let (traces, table) = report.profile.take_monitor_table(hprof_date());
        if let Err(error) = report.output.monitor_dump(&traces, &table) {
            report.complain(error);
        }
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        Some(format!(
            "contended monitor enters of {} ns or more",
            self.threshold_ns
        ))
    }
}

unsafe extern "system" fn on_contended_enter(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    _object: jobject,
) {
    callback("a contended monitor enter", Admit::Profiling, || {
        BLOCKED_SINCE.with(|since| since.set(Some(wall_nanos())));
    });
}

unsafe extern "system" fn on_contended_entered(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    callback("a contended monitor entered", Admit::Profiling, || {
        if let Some(locks) = running::<Locks>() {
            locks.entered(jni, thread, object);
        }
    });
}
