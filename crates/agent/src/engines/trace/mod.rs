//! format=x: the open trace format from inside the JVM. This module is the engine (its
//! capabilities, events and callbacks: method entry and exit with cpu=times, exceptions, GC;
//! thread starts and ends; the trace's start and end); `tracer` writes the elements.

mod tracer;

pub use tracer::{CallSource, MonitorEvent, Tracer};

use jvmti_bindings::sys::jvmti::{
    JVMTI_EVENT_EXCEPTION, JVMTI_EVENT_EXCEPTION_CATCH, JVMTI_EVENT_GARBAGE_COLLECTION_FINISH,
    JVMTI_EVENT_GARBAGE_COLLECTION_START, JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT,
    JVMTI_EVENT_OBJECT_FREE, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC,
};
use openprof_format::options::{HeapMode, Options};
use openprof_format::trace::attrs::Seconds;

use crate::call_hooks::CallListener;
use crate::context::Context;
use crate::engine::{need, running, Dump, Engine, Need};
use crate::engines::mpt::MptSink;
use crate::guard::{callback, guarded, Admit};
use crate::jni::heap_figures;
use crate::jni::Jni;
use crate::jvmti::{
    jclass, jmethodID, jobject, jthread, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv,
};
use crate::signals;
use crate::sync::lock;

impl Engine for Tracer {
    fn needs(options: &Options) -> Vec<Need> {
        let mut needs = vec![
            need!(can_tag_objects, set_can_tag_objects, "format=x"),
            need!(
                can_generate_object_free_events,
                set_can_generate_object_free_events,
                "format=x (classUnload and objFree elements)"
            ),
            need!(
                can_generate_exception_events,
                set_can_generate_exception_events,
                "format=x (exception elements)"
            ),
            need!(
                can_generate_garbage_collection_events,
                set_can_generate_garbage_collection_events,
                "format=x (GC elements)"
            ),
        ];
        if matches!(options.heap, Some(HeapMode::Sites)) {
            needs.push(need!(
                can_generate_sampled_object_alloc_events,
                set_can_generate_sampled_object_alloc_events,
                "format=x with heap=sites (objAlloc elements)"
            ));
        }
        // With cpu=times, calls come from the call hooks (an environment of their own), or
        // where those can't be had from JVMTI's method events, asked for then.
        needs
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        if let Some(CallSource::Events) = self.calls {
            callbacks.MethodEntry = Some(on_method_entry);
            callbacks.MethodExit = Some(on_method_exit);
        }
        callbacks.Exception = Some(on_exception);
        callbacks.ExceptionCatch = Some(on_exception_catch);
        callbacks.GarbageCollectionStart = Some(on_gc_start);
        callbacks.GarbageCollectionFinish = Some(on_gc_finish);
        callbacks.ObjectFree = Some(on_object_free);
        if self.allocations {
            callbacks.SampledObjectAlloc = Some(on_sampled_object_alloc);
        }
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        let mut events = vec![
            JVMTI_EVENT_EXCEPTION,
            JVMTI_EVENT_EXCEPTION_CATCH,
            JVMTI_EVENT_GARBAGE_COLLECTION_START,
            JVMTI_EVENT_GARBAGE_COLLECTION_FINISH,
            JVMTI_EVENT_OBJECT_FREE,
        ];
        if self.allocations {
            events.push(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC);
        }
        if let Some(CallSource::Events) = self.calls {
            events.extend([JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT]);
        }
        events
    }

    /// The runtime is up: on the thread VMInit came on, or the attaching thread.
    fn start(&self, context: &Context, jni: *mut JNIEnv) -> Option<String> {
        let serial = context
            .jvmti
            .current_thread()
            .map_or(0, |thread| context.thread_serial(thread));
        self.runtime_init(serial);
        let hooks = self.hooks?;
        let listener: &'static dyn CallListener = running::<Tracer>()?;
        match hooks.start(jni, listener) {
            Ok(done) => Some(done),
            Err(error) => {
                eprintln!("openprof: format=x with cpu=times: {error}");
                None
            }
        }
    }

    fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        if let Some(hooks) = self.hooks {
            hooks.class_prepared(jni, class);
        }
    }

    fn thread_started(&self, _context: &Context, serial: u32, name: &str, group: &str) {
        self.thread_start(serial, name, group);
    }

    fn thread_ended(&self, _context: &Context, serial: u32) {
        self.thread_end(serial);
    }

    fn tick(&self, _context: &Context, jni: *mut JNIEnv) {
        self.emit_gcs(|| heap_figures(jni));
        self.emit_frees();
        self.flush();
    }

    fn dump(&self, _context: &Context, _dump: &Dump<'_>) {
        self.flush();
    }

    fn stop(&self, context: &Context, jni: *mut JNIEnv) {
        self.emit_gcs(|| heap_figures(jni));
        let current = signals::current_thread_id();
        // HotSpot ends the DestroyJavaVM thread before VMDeath on the same OS thread.
        let thread = lock(&context.threads).live_serial_of_kernel_id(current);
        self.finish(jni, thread);
    }
}

/// Calls from the call hooks become methodEntry and methodExit elements.
impl CallListener for Tracer {
    fn entered(&self, jni: Jni, site: u32, receiver: jobject, constructor: bool) {
        let Some(CallSource::Hooks(hooks)) = self.calls else {
            return;
        };
        if let Some(method) = hooks.method_on_stack(site) {
            self.hooked_entry(jni.0, method, receiver, constructor);
        }
    }

    fn initialized(&self, _jni: Jni, site: u32) {
        let Some(CallSource::Hooks(hooks)) = self.calls else {
            return;
        };
        if let Some(method) = hooks.site(site).and_then(|site| site.method()) {
            self.hooked_initialized(method);
        }
    }

    fn exited(&self, _jni: Jni, site: u32, thrown: bool) {
        let Some(CallSource::Hooks(hooks)) = self.calls else {
            return;
        };
        if let Some(method) = hooks.site(site).and_then(|site| site.method()) {
            self.hooked_exit(method, thrown);
        }
    }

    fn called(&self, _jni: Jni, call_site: u32) {
        if let Some(target) = self.hooks.and_then(|hooks| hooks.call_site(call_site)) {
            self.hooked_call(call_site, target);
        }
    }

    fn returned(&self, _jni: Jni, call_site: u32) {
        self.hooked_return(call_site);
    }

    fn outgoing(&self, jni: Jni, connection: jobject, call_site: u32) {
        self.hooked_outgoing(jni, connection, call_site);
    }

    fn incoming(&self, jni: Jni, exchange: jobject, site: u32) {
        if let Some(method) = self
            .hooks
            .and_then(|hooks| hooks.site(site))
            .and_then(|site| site.method())
        {
            self.hooked_incoming(jni, exchange, method);
        }
    }

    fn caught(&self, _jni: Jni, site: u32) {
        if let Some(method) = self
            .hooks
            .and_then(|hooks| hooks.site(site))
            .and_then(|site| site.method())
        {
            self.hooked_caught(method);
        }
    }
}

/// Traced calls of method parameter tracing become trace elements.
impl MptSink for Tracer {
    fn entry(
        &self,
        jni: *mut JNIEnv,
        method: jmethodID,
        time: Seconds,
        cpu_nanos: u64,
        values: Vec<openprof_format::trace::Value>,
        stack: Option<String>,
    ) -> Option<u128> {
        self.mpt_entry(jni, method, time, cpu_nanos, values, stack)
    }

    fn exit(&self, method: jmethodID, ticket: u128, time: Seconds, cpu_nanos: u64) {
        self.mpt_exit(method, ticket, time, cpu_nanos);
    }

    fn note(&self, name: &str, value: &str) {
        Tracer::note(self, name, value);
    }
}

unsafe extern "system" fn on_method_entry(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
) {
    callback("MethodEntry", Admit::Profiling, || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.method_entry(jni, thread, method);
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
        if let Some(tracer) = running::<Tracer>() {
            tracer.method_exit(thread, method);
        }
    });
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn on_exception(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    location: i64,
    exception: jobject,
    catch_method: jmethodID,
    _catch_location: i64,
) {
    callback("Exception", Admit::Profiling, || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.exception(jni, thread, exception, method, location, catch_method);
        }
    });
}

unsafe extern "system" fn on_exception_catch(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    location: i64,
    exception: jobject,
) {
    callback("ExceptionCatch", Admit::Profiling, || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.exception_catch(jni, thread, method, location, exception);
        }
    });
}

unsafe extern "system" fn on_sampled_object_alloc(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    class: jclass,
    size: i64,
) {
    callback("SampledObjectAlloc", Admit::Profiling, || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.sampled_allocation(thread, object, class, size);
        }
    });
}

/// ObjectFree may be posted inside other JVMTI calls: the tag is only queued.
unsafe extern "system" fn on_object_free(_jvmti: *mut jvmtiEnv, tag: i64) {
    guarded("ObjectFree", || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.object_freed(tag);
        }
    });
}

/// GC start and finish run inside a safepoint: no locks, no JVMTI; the tracer only notes the
/// time (the guard itself reads two atomics).
unsafe extern "system" fn on_gc_start(_jvmti: *mut jvmtiEnv) {
    guarded("GarbageCollectionStart", || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.gc_started();
        }
    });
}

unsafe extern "system" fn on_gc_finish(_jvmti: *mut jvmtiEnv) {
    guarded("GarbageCollectionFinish", || {
        if let Some(tracer) = running::<Tracer>() {
            tracer.gc_finished();
        }
    });
}
