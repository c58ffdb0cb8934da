//! Which function a JDK class's natives are bound to, once bound: the class's own registration
//! (its `registerNatives`) is run again against a stand-in for JNI's RegisterNatives that notes
//! what the class registers instead of binding it. The park wrapper needs the function HotSpot
//! bound `Unsafe.park` to, in order to call it.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::jni::Jni;
use crate::jvmti::{jclass, JNIEnv, JNINativeMethod, Jvmti, JvmtiError, RegisterNativesFn};
use crate::sync::lock;

/// What the RegisterNatives stand-in watches for while [`natives_registered`] runs.
struct Capture {
    /// The class whose natives are noted (a global reference).
    class: jclass,
    /// (name, descriptor, function) of each native its registration binds.
    noted: Vec<(String, String, usize)>,
}

// SAFETY: `class` is a global reference, valid on any thread.
unsafe impl Send for Capture {}

/// One capture at a time; `None` between them.
static CAPTURE: Mutex<Option<Capture>> = Mutex::new(None);
/// The JVM's own RegisterNatives while the stand-in is in place (0 otherwise).
static JVM_REGISTER_NATIVES: AtomicUsize = AtomicUsize::new(0);

/// The natives a class's own registration binds, as (name, descriptor, function): `register`
/// (which makes the class register its natives, e.g. by calling its `registerNatives`) runs
/// with JNI's RegisterNatives replaced by a stand-in that notes what `class` registers instead
/// of binding it; every other class's registration goes through.
pub fn natives_registered(
    jvmti: Jvmti,
    jni: Jni,
    class: jclass,
    register: impl FnOnce(),
) -> Result<Vec<(String, String, usize)>, JvmtiError> {
    let mut capture = lock(&CAPTURE);
    *capture = Some(Capture {
        class: jni.new_global_ref(class),
        noted: Vec::new(),
    });
    // The stand-in takes the lock itself (on this thread, within `register`).
    drop(capture);
    let swapped = jvmti.with_register_natives(
        register_natives_stand_in,
        |jvm_own| JVM_REGISTER_NATIVES.store(jvm_own as usize, Ordering::Release),
        register,
    );
    let capture = lock(&CAPTURE).take();
    let noted = capture.map_or_else(Vec::new, |capture| {
        jni.delete_global_ref(capture.class);
        capture.noted
    });
    swapped.map(|()| noted)
}

/// RegisterNatives while [`natives_registered`] runs: notes the watched class's natives,
/// passes every other call on to the JVM's own.
unsafe extern "system" fn register_natives_stand_in(
    env: *mut JNIEnv,
    class: jclass,
    methods: *const JNINativeMethod,
    count: i32,
) -> i32 {
    let mut noted = false;
    crate::guard::guarded("RegisterNatives while the agent reads a binding", || {
        let mut capture = lock(&CAPTURE);
        let Some(capture) = capture.as_mut() else {
            return;
        };
        if !Jni(env).is_same_object(class, capture.class) || methods.is_null() {
            return;
        }
        // SAFETY: RegisterNatives' caller passes `count` entries at `methods`, each with
        // NUL-terminated name and signature.
        let entries = unsafe { std::slice::from_raw_parts(methods, count.max(0) as usize) };
        for entry in entries {
            // SAFETY: as above.
            let (name, signature) =
                unsafe { (CStr::from_ptr(entry.name), CStr::from_ptr(entry.signature)) };
            capture.noted.push((
                name.to_string_lossy().into_owned(),
                signature.to_string_lossy().into_owned(),
                entry.fnPtr as usize,
            ));
        }
        noted = true;
    });
    if noted {
        return 0;
    }
    let jvm_own = JVM_REGISTER_NATIVES.load(Ordering::Acquire);
    // SAFETY: the value was stored from the JVM's RegisterNatives before the stand-in was put in
    // place; a function pointer's Option is null for None.
    match unsafe { std::mem::transmute::<usize, Option<RegisterNativesFn>>(jvm_own) } {
        // SAFETY: the arguments are the caller's, passed on unchanged.
        Some(register) => unsafe { register(env, class, methods, count) },
        None => -1,
    }
}
