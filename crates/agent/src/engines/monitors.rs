//! monitor=y with format=x: contended monitor enters and waits (JVMTI's MonitorContendedEnter,
//! MonitorContendedEntered, MonitorWait and MonitorWaited) as trace elements.

use jvmti_bindings::sys::jvmti::{
    JVMTI_EVENT_MONITOR_CONTENDED_ENTER, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
    JVMTI_EVENT_MONITOR_WAIT, JVMTI_EVENT_MONITOR_WAITED,
};
use openprof_format::options::Options;

use crate::engine::{need, running, Engine, Need};
use crate::engines::trace::{MonitorEvent, Tracer};
use crate::guard::{callback, Admit};
use crate::jvmti::{jobject, jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv};

pub struct Monitors;

impl Engine for Monitors {
    fn needs(_options: &Options) -> Vec<Need> {
        vec![need!(
            can_generate_monitor_events,
            set_can_generate_monitor_events,
            "monitor=y"
        )]
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        callbacks.MonitorContendedEnter = Some(on_monitor_contended_enter);
        callbacks.MonitorContendedEntered = Some(on_monitor_contended_entered);
        callbacks.MonitorWait = Some(on_monitor_wait);
        callbacks.MonitorWaited = Some(on_monitor_waited);
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        vec![
            JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
            JVMTI_EVENT_MONITOR_WAIT,
            JVMTI_EVENT_MONITOR_WAITED,
        ]
    }
}

fn monitor_event(jni: *mut JNIEnv, thread: jthread, object: jobject, event: MonitorEvent) {
    callback("a monitor event", Admit::Profiling, || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.monitor(jni, thread, object, event);
        }
    });
}

unsafe extern "system" fn on_monitor_contended_enter(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    monitor_event(jni, thread, object, MonitorEvent::ContendedEnter);
}

unsafe extern "system" fn on_monitor_contended_entered(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    monitor_event(jni, thread, object, MonitorEvent::ContendedEntered);
}

unsafe extern "system" fn on_monitor_wait(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timeout: i64,
) {
    monitor_event(
        jni,
        thread,
        object,
        MonitorEvent::Wait {
            timeout_ms: timeout,
        },
    );
}

unsafe extern "system" fn on_monitor_waited(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timed_out: jvmti_bindings::sys::jni::jboolean,
) {
    monitor_event(
        jni,
        thread,
        object,
        MonitorEvent::Waited {
            timed_out: timed_out != 0,
        },
    );
}
