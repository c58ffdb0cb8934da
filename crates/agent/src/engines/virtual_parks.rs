//! The wall time of virtual threads that are not mounted (wall=, JDK 21 and later). A parked,
//! sleeping or blocked virtual thread gives up its carrier and runs on no OS thread, so the
//! wall-clock signals never find it. HotSpot's extension events say when a virtual thread is
//! unmounted and mounted again: the time between is counted, in whole intervals, on the stack
//! it resumes with (the one it stopped with), as if it had been sampled all along.
//!
//! Cost: a clock read and a map update at every unmount, a clock read and a map lookup at every
//! mount, and a stack trace only at a mount that completes an interval. The events exist only
//! for agents with JVMTI's `can_support_virtual_threads`, which the agent asks for here.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::guard::{callback, Admit};
use crate::jni::{Jni, Primitive};
use crate::jvmti::{jfieldID, jthread, jvmtiCapabilities, jvmtiEnv, jvmtiEvent, JNIEnv, Jvmti};
use crate::methods::Location;
use crate::profile::SampledFrame;
use crate::signals::monotonic_nanos;
use crate::sync::lock;

/// HotSpot's extension events, posted on the virtual thread itself.
const MOUNT_EVENT: &str = "com.sun.hotspot.events.VirtualThreadMount";
const UNMOUNT_EVENT: &str = "com.sun.hotspot.events.VirtualThreadUnmount";

/// A virtual thread's time off its carrier, counted on the stack it resumed with.
pub struct ParkedSample {
    /// Innermost first, ending with the virtual thread mark when the stack was whole.
    pub frames: Vec<SampledFrame>,
    pub intervals: u64,
}

struct VirtualParks {
    jvmti: Jvmti,
    /// `java.lang.Thread.tid`, the key a virtual thread is known by here.
    tid_field: jfieldID,
    interval_nanos: AtomicU64,
    depth: AtomicU32,
    recording: AtomicBool,
    /// When each virtual thread now unmounted was unmounted, by thread id.
    unmounted_at: Mutex<HashMap<i64, u64>>,
    /// Counted since the last collect.
    pending: Mutex<Vec<ParkedSample>>,
}

// SAFETY: the field ID is a process-wide JNI handle valid for the life of the class (and
// java.lang.Thread is never unloaded); everything else is Sync on its own.
unsafe impl Send for VirtualParks {}
// SAFETY: as above.
unsafe impl Sync for VirtualParks {}

static PARKS: OnceLock<VirtualParks> = OnceLock::new();

thread_local! {
    /// The parts of an interval this carrier's mounts counted that no whole interval took yet:
    /// carried to the next mount, so that many short parks add up as their time does.
    static LEFT_OVER_NANOS: Cell<u64> = const { Cell::new(0) };
}

/// Asks for JVMTI's `can_support_virtual_threads` where the JVM has it (JDK 21 and later), at
/// the agent's load: HotSpot turns its virtual thread transitions' notifications on for the
/// capability, and the mount events fire only then.
pub fn ask_for_capability(jvmti: Jvmti) {
    if jvmti
        .potential_capabilities()
        .is_ok_and(|potential| potential.can_support_virtual_threads())
    {
        // Refused here, it is asked for again when wall= starts, which says why.
        let _ = add_capability(jvmti);
    }
}

fn add_capability(jvmti: Jvmti) -> Result<(), String> {
    let mut wanted = jvmtiCapabilities::default();
    wanted.set_can_support_virtual_threads(true);
    jvmti
        .add_capabilities(&wanted)
        .map_err(|e| format!("can_support_virtual_threads: {e}"))
}

/// Starts counting unmounted virtual threads' time, every `interval_nanos` one sample of up
/// to `depth` frames. `Ok(false)`: this JVM has no virtual threads (before JDK 21); `Err`: it
/// has them and the events could not be had, said why.
pub fn start(
    jvmti: Jvmti,
    jni: *mut JNIEnv,
    interval_nanos: u64,
    depth: u32,
) -> Result<bool, String> {
    if let Some(parks) = PARKS.get() {
        // A profiling session starting wall= again: the events are still set.
        parks
            .interval_nanos
            .store(interval_nanos, Ordering::Relaxed);
        parks.depth.store(depth, Ordering::Relaxed);
        parks.recording.store(true, Ordering::Release);
        return Ok(true);
    }
    let potential = jvmti.potential_capabilities().map_err(|e| e.to_string())?;
    if !potential.can_support_virtual_threads() {
        return Ok(false);
    }
    let (Some(mount), Some(unmount)) = (
        jvmti.extension_event_index(MOUNT_EVENT),
        jvmti.extension_event_index(UNMOUNT_EVENT),
    ) else {
        return Err("this JVM has virtual threads but no events for their mounts".into());
    };
    add_capability(jvmti)?;
    let jni = Jni(jni);
    let tid_field = jni
        .find_class("java/lang/Thread")
        .and_then(|thread| jni.field_id(thread, "tid", "J"))
        .map_err(|_| {
            jni.clear_exception();
            "java.lang.Thread has no field tid".to_string()
        })?;
    let parks = VirtualParks {
        jvmti,
        tid_field,
        interval_nanos: AtomicU64::new(interval_nanos),
        depth: AtomicU32::new(depth),
        recording: AtomicBool::new(true),
        unmounted_at: Mutex::new(HashMap::new()),
        pending: Mutex::new(Vec::new()),
    };
    if PARKS.set(parks).is_err() {
        return Ok(true);
    }
    // HotSpot needs the events turned on as well as their callbacks set.
    jvmti
        .set_thread_extension_callback(unmount, on_unmount)
        .and_then(|()| jvmti.set_thread_extension_callback(mount, on_mount))
        .and_then(|()| jvmti.set_event(unmount as jvmtiEvent, true))
        .and_then(|()| jvmti.set_event(mount as jvmtiEvent, true))
        .map_err(|e| format!("the virtual thread events: {e}"))?;
    Ok(true)
}

/// Stops counting (a profiling session's end); the events stay set but do nothing.
pub fn pause() {
    if let Some(parks) = PARKS.get() {
        parks.recording.store(false, Ordering::Release);
        lock(&parks.unmounted_at).clear();
    }
}

/// The samples counted since the last call.
pub fn take() -> Vec<ParkedSample> {
    PARKS
        .get()
        .map(|parks| std::mem::take(&mut *lock(&parks.pending)))
        .unwrap_or_default()
}

impl VirtualParks {
    fn thread_id(&self, jni: Jni, thread: jthread) -> Option<i64> {
        match jni.field(thread, self.tid_field, b'J').primitive() {
            Some(Primitive::Long(tid)) => Some(tid),
            _ => None,
        }
    }

    fn unmounting(&self, jni: Jni, thread: jthread) {
        if let Some(tid) = self.thread_id(jni, thread) {
            lock(&self.unmounted_at).insert(tid, monotonic_nanos());
        }
    }

    fn mounted(&self, jni: Jni, thread: jthread) {
        let Some(tid) = self.thread_id(jni, thread) else {
            return;
        };
        let Some(unmounted_at) = lock(&self.unmounted_at).remove(&tid) else {
            return;
        };
        let interval = self.interval_nanos.load(Ordering::Relaxed).max(1);
        let off = monotonic_nanos().saturating_sub(unmounted_at) + LEFT_OVER_NANOS.get();
        LEFT_OVER_NANOS.set(off % interval);
        let intervals = off / interval;
        if intervals == 0 {
            return;
        }
        let depth = self.depth.load(Ordering::Relaxed);
        // The thread resumes where it stopped: its stack is the one it was off its carrier with.
        let Ok(frames) = self.jvmti.stack_trace(thread, depth) else {
            return;
        };
        let whole = (frames.len() as u32) < depth;
        let frames: Vec<SampledFrame> = frames
            .iter()
            .map(|frame| SampledFrame::Java(frame.method, Location::of_jvmti(frame.location)))
            .chain(whole.then_some(SampledFrame::VirtualThread))
            .collect();
        lock(&self.pending).push(ParkedSample { frames, intervals });
    }
}

/// The counting's state while it records, else `None`.
fn recording() -> Option<&'static VirtualParks> {
    PARKS
        .get()
        .filter(|parks| parks.recording.load(Ordering::Acquire))
}

unsafe extern "C" fn on_unmount(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    callback("a virtual thread's unmount", Admit::Profiling, || {
        if let Some(parks) = recording() {
            parks.unmounting(Jni(jni), thread);
        }
    });
}

unsafe extern "C" fn on_mount(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    callback("a virtual thread's mount", Admit::Profiling, || {
        if let Some(parks) = recording() {
            parks.mounted(Jni(jni), thread);
        }
    });
}
