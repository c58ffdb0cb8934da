//! The JVMTI callbacks every run has, whatever its engines: the VM's start and death, threads
//! starting and ending, classes loaded and prepared, and dump requests (kill -QUIT).

use std::ffi::c_void;

use jvmti_bindings::sys::jvmti::{
    jvmtiEvent, JVMTI_EVENT_CLASS_LOAD, JVMTI_EVENT_CLASS_PREPARE,
    JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
    JVMTI_EVENT_DATA_DUMP_REQUEST, JVMTI_EVENT_DYNAMIC_CODE_GENERATED, JVMTI_EVENT_THREAD_END,
    JVMTI_EVENT_THREAD_START, JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_VM_INIT,
};

use super::{begin, collect, dump, register_thread, vm_death};
use crate::engine;
use crate::guard::{self, callback, guarded, Admit};
use crate::jni::current_jni;
use crate::jvmti::{jclass, jint, jmethodID, jthread, jvmtiEnv, jvmtiEventCallbacks, JNIEnv};
use crate::signals;
use crate::sync::lock;

/// The events of the callbacks below.
pub const CORE_EVENTS: [jvmtiEvent; 10] = [
    JVMTI_EVENT_VM_INIT,
    JVMTI_EVENT_VM_DEATH,
    JVMTI_EVENT_THREAD_START,
    JVMTI_EVENT_THREAD_END,
    JVMTI_EVENT_CLASS_LOAD,
    JVMTI_EVENT_CLASS_PREPARE,
    JVMTI_EVENT_DATA_DUMP_REQUEST,
    JVMTI_EVENT_COMPILED_METHOD_LOAD,
    JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
    JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
];

/// Points the table at the callbacks below.
pub fn core(callbacks: &mut jvmtiEventCallbacks) {
    callbacks.VMInit = Some(on_vm_init);
    callbacks.VMDeath = Some(on_vm_death);
    callbacks.ThreadStart = Some(on_thread_start);
    callbacks.ThreadEnd = Some(on_thread_end);
    callbacks.ClassPrepare = Some(on_class_prepare);
    callbacks.ClassLoad = Some(on_class_load);
    callbacks.DataDumpRequest = Some(on_data_dump_request);
    callbacks.CompiledMethodLoad = Some(on_compiled_method_load);
    callbacks.CompiledMethodUnload = Some(on_compiled_method_unload);
    callbacks.DynamicCodeGenerated = Some(on_dynamic_code_generated);
}

unsafe extern "system" fn on_vm_init(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guarded("VMInit", || {
        if let Some(context) = crate::context::get() {
            begin(context, jni, Some(thread));
        }
    });
}

unsafe extern "system" fn on_vm_death(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv) {
    guarded("VMDeath", || {
        if let Some(context) = crate::context::get() {
            vm_death(context, jni);
        }
    });
}

unsafe extern "system" fn on_thread_start(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
) {
    callback("ThreadStart", Admit::NotAgentThread, || {
        let Some(context) = crate::context::get() else {
            return;
        };
        let current = signals::current_thread_id();
        // A kernel thread that was another Java thread before (the launcher's main thread comes
        // back as DestroyJavaVM; native threads attach again): its samples still in the ring
        // are the earlier thread's, and go to it before the id changes hands.
        let reused = lock(&context.threads)
            .serial_of_kernel_id(current)
            .is_some();
        if let (true, Some(report)) = (reused, &context.report) {
            collect(context, &mut lock(report));
        }
        register_thread(context, thread, Some(current));
    });
}

unsafe extern "system" fn on_thread_end(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, thread: jthread) {
    callback("ThreadEnd", Admit::NotAgentThread, || {
        let Some(context) = crate::context::get() else {
            return;
        };
        let serial = context.thread_serial(thread);
        if serial != 0 {
            // ThreadEnd comes on the ending thread itself.
            lock(&context.threads).end(serial, signals::current_thread_id());
            for engine in engine::all() {
                engine.thread_ended(context, serial);
            }
        }
    });
}

unsafe extern "system" fn on_class_prepare(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    _thread: jthread,
    class: jclass,
) {
    guarded("ClassPrepare", || {
        if let Some(context) = crate::context::get() {
            if let Ok(methods) = context.jvmti.preload_method_ids(class) {
                crate::code_map::index_methods(&methods);
            }
            for engine in engine::all() {
                engine.class_prepared(jni, class);
            }
        }
    });
}

unsafe extern "system" fn on_data_dump_request(_jvmti: *mut jvmtiEnv) {
    guarded("DataDumpRequest", || {
        if guard::is_dying() {
            return;
        }
        if let Some(context) = crate::context::get() {
            dump(context, current_jni(context.vm));
        }
    });
}

/// Enabled only because AsyncGetCallTrace refuses to walk (`ticks_no_class_load`) unless some
/// agent receives ClassLoad events.
unsafe extern "system" fn on_class_load(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    _class: jclass,
) {
}

/// Enabled so that HotSpot keeps debug information at non-safepoints (see `plan.rs`), and to
/// know where compiled methods are (`code_map.rs`).
unsafe extern "system" fn on_compiled_method_load(
    jvmti: *mut jvmtiEnv,
    method: jmethodID,
    code_size: jint,
    code_addr: *const c_void,
    _map_length: jint,
    _map: *const jvmti_bindings::sys::jvmti::jvmtiAddrLocationMap,
    compile_info: *const c_void,
) {
    guarded("CompiledMethodLoad", || {
        let (start, size) = (code_addr as usize, code_size.max(0) as usize);
        // The frames our own walker needs, while the code is sure to be alive.
        let frames = crate::vm_walker::frames_of(
            crate::jvmti::Jvmti::of_callback(jvmti),
            method,
            start,
            size,
            compile_info,
        );
        // With its stubs, when the walker knows where they end.
        let size = frames
            .as_ref()
            .map_or(size, |frames| frames.code_size as usize);
        crate::code_map::loaded(method, start, size, frames);
    });
}

/// To know where the interpreter is (`code_map.rs`).
unsafe extern "system" fn on_dynamic_code_generated(
    _jvmti: *mut jvmtiEnv,
    name: *const std::os::raw::c_char,
    address: *const c_void,
    length: jint,
) {
    guarded("DynamicCodeGenerated", || {
        if name.is_null() {
            return;
        }
        // SAFETY: JVMTI passes a NUL-terminated name, valid during the callback.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        let frame_words = crate::vm_walker::stub_frame_words(address as usize);
        crate::code_map::generated(&name, address as usize, length.max(0) as usize, frame_words);
    });
}

unsafe extern "system" fn on_compiled_method_unload(
    _jvmti: *mut jvmtiEnv,
    method: jmethodID,
    code_addr: *const c_void,
) {
    guarded("CompiledMethodUnload", || {
        crate::code_map::unloaded(method, code_addr as usize);
    });
}
