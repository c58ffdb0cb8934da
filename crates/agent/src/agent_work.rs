//! The agent's own work on a thread: a hook's body, or Java code the agent runs itself. While it
//! runs, what it sets off is not the program's (see [`agent_work`]); the guard refuses
//! profiling callbacks there and the rewriter leaves the classes it loads alone. A leaf module:
//! the JNI and JVMTI wrappers mark their calls with it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// How deep this thread is in the agent's own work.
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
