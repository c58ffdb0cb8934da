//! Time parked: `LockSupport.park` (java.util.concurrent's locks, conditions, queues, futures)
//! parks in the native `jdk.internal.misc.Unsafe.park(boolean, long)`, for which JVMTI has no
//! event. The agent rebinds that native to [`park_wrapper`], which reads the clock, calls the
//! function HotSpot had bound (found by replaying Unsafe's own registration of its natives
//! against a stand-in RegisterNatives), and hands parks over the threshold to the lock engine.
//!
//! The rebinding is done by RegisterNatives called from a Java method of a class the agent
//! defines in the bootstrap loader (`openprof/ParkHook`): HotSpot warns on the program's output
//! when a JDK class's native is rebound from anywhere else. HotSpot makes the compiled native
//! wrapper of the old binding not entrant, so compiled callers bind the new function at their
//! next call. NativeMethodBind keeps the wrapper in front if anyone binds Unsafe.park again.

use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};

use jvmti_bindings::sys::jni::{jboolean, jlong};
use openprof_classfile::{
    park_hook_class_file, PARK_HOOK_CLASS, PARK_HOOK_METHOD, PARK_HOOK_NATIVE,
};

use super::natives::natives_registered;
use super::{Locks, Owner};
use crate::engine::running;
use crate::guard::{callback, guarded, Admit};
use crate::jni::Jni;
use crate::jvmti::{jclass, jfieldID, jmethodID, jobject, jthread, jvmtiEnv, JNIEnv, Jvmti};
use crate::signals::monotonic_nanos;

/// Unsafe.park's native signature.
type ParkFn = unsafe extern "system" fn(*mut JNIEnv, jobject, jboolean, jlong);

const UNSAFE_CLASS: &str = "jdk/internal/misc/Unsafe";
const PARK_NAME: &str = "park";
const PARK_DESCRIPTOR: &str = "(ZJ)V";

/// The function Unsafe.park was bound to before the wrapper (0 until known): what the wrapper
/// calls. Set before the wrapper is bound, and again if someone rebinds the native.
static ORIGINAL: AtomicUsize = AtomicUsize::new(0);
/// Unsafe.park's jmethodID, once known: its NativeMethodBind events are the agent's to redirect.
static PARK_METHOD: AtomicUsize = AtomicUsize::new(0);
/// The Unsafe class (a global reference), for the rebinding.
static UNSAFE: AtomicUsize = AtomicUsize::new(0);
/// Whether ParkHook's native bound the wrapper (1) or failed (2).
static BOUND: AtomicUsize = AtomicUsize::new(0);

/// What a park needs to read its blocker and the blocker's owner (JNI ids, global references).
pub struct ParkFields {
    /// `Thread.parkBlocker`.
    park_blocker: jfieldID,
    /// `java.util.concurrent.locks.AbstractOwnableSynchronizer` (a global reference).
    ownable: jclass,
    /// Its `exclusiveOwnerThread`.
    owner_thread: jfieldID,
}

// SAFETY: field ids are valid on any thread; `ownable` is a global reference.
unsafe impl Send for ParkFields {}
// SAFETY: as above; nothing is mutated.
unsafe impl Sync for ParkFields {}

impl ParkFields {
    /// The object the current thread parks on (`thread` is the current thread), if any.
    fn blocker(&self, jni: Jni, thread: jthread) -> Option<jobject> {
        let blocker = jni.field(thread, self.park_blocker, b'L').reference();
        (!jni.clear_exception() && !blocker.is_null()).then_some(blocker)
    }

    /// The thread holding `blocker` exclusively, when it is a synchronizer that says so
    /// (ReentrantLock, ReentrantReadWriteLock's write lock, ...).
    fn owner(&self, jni: Jni, blocker: jobject) -> Option<jthread> {
        if !jni.is_instance_of(blocker, self.ownable) {
            return None;
        }
        let owner = jni.field(blocker, self.owner_thread, b'L').reference();
        (!jni.clear_exception() && !owner.is_null()).then_some(owner)
    }
}

/// Rebinds Unsafe.park to the wrapper (on a thread in the live phase: VMInit's, or the attach
/// listener's). Returns the fields parks are read with, or why parks cannot be timed.
pub fn install(jvmti: Jvmti, jni: *mut JNIEnv) -> Result<ParkFields, String> {
    let jni = Jni(jni);
    let fields = park_fields(jni)
        .ok_or("Thread.parkBlocker or the JDK's synchronizers are not as expected")?;
    let unsafe_class = jni
        .find_class(UNSAFE_CLASS)
        .map_err(|_| format!("{UNSAFE_CLASS} is not found"))?;
    let park = jni
        .method_id(unsafe_class, PARK_NAME, PARK_DESCRIPTOR)
        .map_err(|_| "Unsafe.park(boolean, long) is not found".to_string())?;
    let register = jni
        .static_method_id(unsafe_class, "registerNatives", "()V")
        .map_err(|_| "Unsafe.registerNatives is not found".to_string())?;
    let noted = natives_registered(jvmti, jni, unsafe_class, || {
        let _ = jni.call_static(unsafe_class, register, b'V', &[]);
    })
    .map_err(|error| format!("can't read Unsafe's natives: {error}"))?;
    let original = noted
        .iter()
        .find(|(name, descriptor, _)| name == PARK_NAME && descriptor == PARK_DESCRIPTOR)
        .map(|(_, _, function)| *function)
        .filter(|function| *function != 0)
        .ok_or("Unsafe registers no park(boolean, long) native")?;
    ORIGINAL.store(original, Ordering::Release);
    UNSAFE.store(jni.new_global_ref(unsafe_class) as usize, Ordering::Release);
    PARK_METHOD.store(park as usize, Ordering::Release);

    let hook = jni
        .define_class(
            PARK_HOOK_CLASS,
            std::ptr::null_mut(),
            &park_hook_class_file(),
        )
        .map_err(|_| "can't define the park hook class".to_string())?;
    let native = CString::new(PARK_HOOK_NATIVE).map_err(|_| "bad hook name")?;
    jni.register_natives(hook, &[(&native, c"()V", park_hook_bind as *mut _)])
        .map_err(|_| "can't bind the park hook's native".to_string())?;
    let bind = jni
        .static_method_id(hook, PARK_HOOK_METHOD, "()V")
        .map_err(|_| "the park hook has no bind()".to_string())?;
    jni.call_static(hook, bind, b'V', &[])
        .map_err(|_| "the park hook threw".to_string())?;
    jni.delete_local_ref(hook);
    match BOUND.load(Ordering::Acquire) {
        1 => Ok(fields),
        _ => Err("RegisterNatives refused the park wrapper".into()),
    }
}

fn park_fields(jni: Jni) -> Option<ParkFields> {
    let thread = jni.find_class("java/lang/Thread").ok()?;
    let park_blocker = jni
        .field_id(thread, "parkBlocker", "Ljava/lang/Object;")
        .ok()?;
    jni.delete_local_ref(thread);
    let ownable = jni
        .find_class("java/util/concurrent/locks/AbstractOwnableSynchronizer")
        .ok()?;
    let owner_thread = jni
        .field_id(ownable, "exclusiveOwnerThread", "Ljava/lang/Thread;")
        .ok()?;
    let global = jni.new_global_ref(ownable);
    jni.delete_local_ref(ownable);
    Some(ParkFields {
        park_blocker,
        ownable: global,
        owner_thread,
    })
}

/// `ParkHook.bind0()`: binds Unsafe.park to the wrapper. Called from `ParkHook.bind()`, a Java
/// frame of the bootstrap loader, as HotSpot wants of a rebinding of a JDK native.
unsafe extern "system" fn park_hook_bind(jni: *mut JNIEnv, _class: jclass) {
    guarded("binding the park wrapper", || {
        let unsafe_class = UNSAFE.load(Ordering::Acquire) as jclass;
        let wrapper = park_wrapper as ParkFn as *mut std::ffi::c_void;
        let (Ok(name), Ok(descriptor)) = (CString::new(PARK_NAME), CString::new(PARK_DESCRIPTOR))
        else {
            return;
        };
        let bound = Jni(jni)
            .register_natives(unsafe_class, &[(&name, &descriptor, wrapper)])
            .is_ok();
        BOUND.store(if bound { 1 } else { 2 }, Ordering::Release);
    });
}

/// NativeMethodBind: a later binding of Unsafe.park (another agent's) becomes what the wrapper
/// calls, and the wrapper stays bound. Every other binding is let be.
pub unsafe extern "system" fn on_native_method_bind(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    method: jmethodID,
    address: *mut std::ffi::c_void,
    new_address: *mut *mut std::ffi::c_void,
) {
    let wrapper = park_wrapper as ParkFn as usize;
    let park = PARK_METHOD.load(Ordering::Acquire);
    if park == 0 || method as usize != park || address as usize == wrapper || address.is_null() {
        return;
    }
    guarded("a native method bind", || {
        ORIGINAL.store(address as usize, Ordering::Release);
        if !new_address.is_null() {
            // SAFETY: JVMTI passes where the binding's address is written; it is ours to change
            // during the callback.
            unsafe { *new_address = wrapper as *mut std::ffi::c_void };
        }
    });
}

/// The function the wrapper calls (`None` only if the wrapper were bound before it was known,
/// which `install` does not do).
fn original() -> Option<ParkFn> {
    let original = ORIGINAL.load(Ordering::Acquire);
    // SAFETY: ORIGINAL holds 0 or the address of a function with Unsafe.park's native
    // signature (the JVM's, or one a later binding gave); Option of a function pointer is null
    // for None.
    unsafe { std::mem::transmute::<usize, Option<ParkFn>>(original) }
}

/// Unsafe.park, as the agent binds it: times the original and tells the lock engine. A park
/// shorter than the threshold costs two clock reads and two loads; nothing is allocated.
unsafe extern "system" fn park_wrapper(
    jni: *mut JNIEnv,
    receiver: jobject,
    absolute: jboolean,
    time: jlong,
) {
    // Without the original (never, see `original`), returning at once is what a spurious
    // wakeup does, which every caller of park must expect.
    let Some(park) = original() else { return };
    let Some(locks) = running::<Locks>().filter(|locks| locks.is_recording()) else {
        // SAFETY: the arguments are the caller's, passed on unchanged.
        unsafe { park(jni, receiver, absolute, time) };
        return;
    };
    // The owner's stack is taken within the wait, as for monitors: the thread is stopped
    // either way.
    let started = monotonic_nanos();
    let mut owner: Option<Owner> = None;
    if locks.owners {
        callback("a park's lock owner", Admit::Profiling, || {
            owner = locks.park_owner(Jni(jni));
        });
    }
    // SAFETY: as above.
    unsafe { park(jni, receiver, absolute, time) };
    let parked = monotonic_nanos().saturating_sub(started);
    if parked >= locks.threshold_ns() {
        callback("a park", Admit::Profiling, || {
            locks.parked(Jni(jni), parked, owner);
        });
    }
}

// The local references made below die when the native returns to Java.
impl Locks {
    /// The stack of the thread holding the object the current thread parks on, when the object
    /// says which thread holds it.
    fn park_owner(&self, jni: Jni) -> Option<Owner> {
        let fields = self.park_fields()?;
        let context = crate::context::get()?;
        let thread = context.jvmti.current_thread().ok()?;
        let owner = fields.owner(jni, fields.blocker(jni, thread)?)?;
        self.owner_stack(context, owner)
    }

    /// A park of `parked` nanoseconds (over the threshold) just ended on the current thread.
    fn parked(&self, jni: Jni, parked: u64, owner: Option<Owner>) {
        let Some(context) = crate::context::get() else {
            return;
        };
        let Ok(thread) = context.jvmti.current_thread() else {
            return;
        };
        // LockSupport clears the blocker only once park has returned: it is still there.
        let class = self
            .park_fields()
            .and_then(|fields| fields.blocker(jni, thread))
            .map(|blocker| self.class_of(jni, blocker));
        self.record(context, super::Waited::Parked, thread, class, parked, owner);
    }
}
