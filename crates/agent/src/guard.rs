//! The one gate every JVMTI callback and native hook passes through: it keeps panics on this
//! side of the FFI boundary, keeps the agent's own thread and the agent's own work on any
//! thread out of its own profile, and keeps the engines quiet once the VM is dying or the agent
//! has switched itself off.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::agent_work::in_agent_work;
use crate::signals;

/// Set when a callback panicked: the agent then stays out of the JVM's way.
static DISABLED: AtomicBool = AtomicBool::new(false);
/// Set at VMDeath: from then on only the callbacks that must (ObjectFree, ClassPrepare) run.
static DYING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// True on the agent's own thread, which must not be profiled.
    static IS_AGENT_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Which callbacks a body is run for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Always (unless the agent switched itself off): bookkeeping the JVM relies on.
    Always,
    /// Not on the agent's own thread: events that would profile the profiler.
    NotAgentThread,
    /// Not on the agent's thread, not inside the agent's own work on any thread, and not once
    /// the VM is dying: the profiling events proper.
    Profiling,
}

/// Runs a callback body, keeping any panic on this side of the FFI boundary: the first one is
/// reported and the agent stops profiling; the JVM carries on.
pub fn guarded(what: &str, body: impl FnOnce()) {
    callback(what, Admit::Always, body);
}

/// Runs a callback body if `admit` lets it in, behind the same panic guard as `guarded`.
pub fn callback(what: &str, admit: Admit, body: impl FnOnce()) {
    if DISABLED.load(Ordering::Acquire) {
        return;
    }
    let refused = match admit {
        Admit::Always => false,
        Admit::NotAgentThread => is_agent_thread(),
        Admit::Profiling => is_agent_thread() || is_dying() || in_agent_work(),
    };
    if refused {
        return;
    }
    if catch_unwind(AssertUnwindSafe(body)).is_err() && !DISABLED.swap(true, Ordering::AcqRel) {
        signals::disable_all();
        eprintln!(
            "openprof ERROR: internal error in {what}; profiling is off for the rest of this run"
        );
    }
}

/// The agent's thread's kernel id, once it has marked itself (0 before).
static AGENT_KERNEL_ID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Marks the calling thread as the agent's own.
pub fn mark_agent_thread() {
    IS_AGENT_THREAD.with(|flag| flag.set(true));
    signals::never_sample_this_thread();
    // SAFETY: gettid has no arguments and cannot fail.
    let kernel_id = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    AGENT_KERNEL_ID.store(kernel_id, Ordering::Release);
}

/// Whether `kernel_id` is the agent's thread (known once that thread has marked itself).
pub fn is_agent_kernel_id(kernel_id: i32) -> bool {
    kernel_id != 0 && AGENT_KERNEL_ID.load(Ordering::Acquire) == kernel_id
}

pub fn is_agent_thread() -> bool {
    IS_AGENT_THREAD.with(|flag| flag.get())
}

/// From VMDeath on.
pub fn set_dying() {
    DYING.store(true, Ordering::Release);
}

pub fn is_dying() -> bool {
    DYING.load(Ordering::Acquire)
}
