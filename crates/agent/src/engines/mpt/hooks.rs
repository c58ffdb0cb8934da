//! The natives instrumented methods call (`openprof.MptHook`'s methods, bound with
//! RegisterNatives) and the ClassFileLoadHook that rewrites classes: the hot path of method
//! parameter tracing, each entry behind the agent's callback guard.

use std::ffi::{c_char, c_void, CString};

use jvmti_bindings::sys::jni::{jboolean, jbyte, jchar, jdouble, jfloat, jlong, jshort};

use super::Mpt;
use crate::jni::{Jni, Typed};
use crate::jvmti::{jclass, jint, jobject, jvalue, jvmtiEnv, JNIEnv};
use openprof_classfile::HOOK_METHODS;

fn mpt() -> Option<&'static Mpt> {
    crate::engine::running::<Mpt>()
}

/// Runs a hook body as the agent's own work, unless the agent is off or this thread is inside
/// the agent's work already (a modifier's Java call reached a traced method: that call is the
/// agent's, not the program's), keeping panics on this side of the boundary.
fn hook(what: &str, body: impl FnOnce(&'static Mpt)) {
    crate::guard::guarded(what, || {
        if crate::agent_work::in_agent_work() {
            return;
        }
        if let Some(mpt) = mpt() {
            crate::agent_work::agent_work(|| body(mpt));
        }
    });
}

unsafe extern "system" fn hook_begin(
    jni: *mut JNIEnv,
    _class: jclass,
    site: jint,
    receiver: jobject,
) {
    hook("MptHook.begin", |mpt| mpt.begin(Jni(jni), site, receiver));
}

macro_rules! arg_hook {
    ($name:ident, $type:ty, $kind:literal, $member:ident) => {
        unsafe extern "system" fn $name(
            jni: *mut JNIEnv,
            _class: jclass,
            index: jint,
            value: $type,
        ) {
            hook("MptHook.arg", |mpt| {
                mpt.arg(
                    Jni(jni),
                    index,
                    Typed {
                        kind: $kind,
                        value: jvalue { $member: value },
                    },
                )
            });
        }
    };
}

arg_hook!(hook_arg_boolean, jboolean, b'Z', z);
arg_hook!(hook_arg_byte, jbyte, b'B', b);
arg_hook!(hook_arg_char, jchar, b'C', c);
arg_hook!(hook_arg_short, jshort, b'S', s);
arg_hook!(hook_arg_int, jint, b'I', i);
arg_hook!(hook_arg_long, jlong, b'J', j);
arg_hook!(hook_arg_float, jfloat, b'F', f);
arg_hook!(hook_arg_double, jdouble, b'D', d);
arg_hook!(hook_arg_object, jobject, b'L', l);

unsafe extern "system" fn hook_enter(jni: *mut JNIEnv, _class: jclass) {
    hook("MptHook.enter", |mpt| mpt.enter(Jni(jni)));
}

unsafe extern "system" fn hook_exit(_jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("MptHook.exit", |mpt| mpt.exit(site));
}

unsafe extern "system" fn hook_exit_thrown(_jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("MptHook.exitThrown", |mpt| mpt.exit(site));
}

/// The natives of HOOK_METHODS, in its order, as (name, descriptor, function).
pub(super) fn natives() -> Vec<(CString, CString, *mut c_void)> {
    let functions: [*mut c_void; 13] = [
        hook_begin as *mut c_void,
        hook_arg_boolean as *mut c_void,
        hook_arg_byte as *mut c_void,
        hook_arg_char as *mut c_void,
        hook_arg_short as *mut c_void,
        hook_arg_int as *mut c_void,
        hook_arg_long as *mut c_void,
        hook_arg_float as *mut c_void,
        hook_arg_double as *mut c_void,
        hook_arg_object as *mut c_void,
        hook_enter as *mut c_void,
        hook_exit as *mut c_void,
        hook_exit_thrown as *mut c_void,
    ];
    HOOK_METHODS
        .iter()
        .zip(functions)
        .filter_map(|((name, descriptor), function)| {
            Some((
                CString::new(*name).ok()?,
                CString::new(*descriptor).ok()?,
                function,
            ))
        })
        .collect()
}

pub(super) unsafe extern "system" fn on_class_file_load_hook(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    class_being_redefined: jclass,
    _loader: jobject,
    name: *const c_char,
    _protection_domain: jobject,
    class_data_len: jint,
    class_data: *const u8,
    new_class_data_len: *mut jint,
    new_class_data: *mut *mut u8,
) {
    crate::guard::guarded("ClassFileLoadHook", || {
        if class_being_redefined.is_null() {
            return;
        }
        let Some(mpt) = mpt() else { return };
        // SAFETY: these are the hook's own arguments, as JVMTI passed them.
        unsafe {
            mpt.jvmti.replace_class_file(
                name,
                class_data_len,
                class_data,
                new_class_data_len,
                new_class_data,
                |name, bytes| mpt.transform(name, bytes),
            );
        }
    });
}
