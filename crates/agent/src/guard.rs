//! The one gate every JVMTI callback and native hook passes through: it keeps panics on this
//! side of the FFI boundary, keeps the agent's own thread and the agent's own work on any
//! thread out of its own profile, and keeps the engines quiet once the VM is dying or the agent
//! has switched itself off.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::signals;

/// Set when a callback panicked: the agent then stays out of the JVM's way.
static DISABLED: AtomicBool = AtomicBool::new(false);
/// Set at VMDeath: from then on only the callbacks that must (ObjectFree, ClassPrepare) run.
static DYING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// True on the agent's own thread, which must not be profiled.
    static IS_AGENT_THREAD: Cell<bool> = const { Cell::new(false) };
    /// How deep this thread is in the agent's own work: a call hook's body, or Java code the
    /// agent runs (a JNI call, a class it finds). See [`agent_work`].
    static AGENT_WORK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// How deep the agent's own work may nest on one thread (the agent's Java call loads a class,
/// whose rewrite makes the agent run Java again, ...) before the agent gives up on it.
const MAX_AGENT_WORK_DEPTH: u32 = 8;
/// Set once the agent gave up on work nested past [`MAX_AGENT_WORK_DEPTH`] (said once).
static NESTED_TOO_DEEP: AtomicBool = AtomicBool::new(false);

/// Runs `body` as the agent's own work on this thread. While it runs, what it sets off is not
/// the program's: the call hooks of rewritten code it reaches report nothing, profiling
/// callbacks (exceptions, monitors, allocations) are not recorded, and the classes it loads are
/// not rewritten. So the agent can never re-enter itself through the code it instruments,
/// whatever the filters let through. Work nested past a small depth is refused (`None`): the
/// agent says so once and carries on without it, and the JVM goes on.
pub fn agent_work<T>(body: impl FnOnce() -> T) -> Option<T> {
    let depth = AGENT_WORK_DEPTH.with(|depth| depth.get());
    if depth >= MAX_AGENT_WORK_DEPTH {
        if !NESTED_TOO_DEEP.swap(true, Ordering::AcqRel) {
            eprintln!(
                "openprof WARNING: the agent's own work nested {depth} deep on one thread \
                 (its Java calls set off its hooks again); it skips such work from now on"
            );
        }
        return None;
    }
    Some(as_agent_work(body))
}

/// Runs `body` marked as the agent's own work, as [`agent_work`] does, without its bound: for
/// the agent's bookkeeping (planning which classes to rewrite), which does not nest.
pub fn as_agent_work<T>(body: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            AGENT_WORK_DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
        }
    }
    AGENT_WORK_DEPTH.with(|depth| depth.set(depth.get() + 1));
    let _leave = Leave;
    body()
}

/// Whether this thread is inside the agent's own work ([`agent_work`]).
pub fn in_agent_work() -> bool {
    AGENT_WORK_DEPTH.with(|depth| depth.get()) > 0
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
