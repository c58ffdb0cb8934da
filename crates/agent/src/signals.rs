//! CPU sampling without safepoint bias: a CPU timer per Java thread (a perf_events task-clock,
//! else a POSIX CPU timer) raises SIGPROF on that thread after every `interval` of its own CPU
//! time, and the handler walks the thread's Java stack with HotSpot's AsyncGetCallTrace straight
//! into the [`SampleRing`] (as async-profiler does). Timers are started by a thread for itself
//! (at ThreadStart) or, for the threads already running when the agent is attached, by the
//! attaching thread for each of them: both clocks can name any thread of the process.
//!
//! Wall-clock samples (`wall=`) take the same walk into the same ring on another signal,
//! SIGVTALRM, which the agent's thread sends to the Java threads it picks (running or not, as
//! async-profiler's wall mode does); the handler tags them with the thread's VM state.
//!
//! Everything the handler touches is set up before it is installed and never freed, and the
//! handler itself only reads atomics, makes raw syscalls and writes into the ring.

use std::ffi::{c_int, c_void};
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use openprof_format::options::Walker;

use crate::jvmti::{jint, JNIEnv, JavaVM};
use crate::ring::{CallFrame, SampleRing};

/// HotSpot's `ASGCT_CallTrace`.
#[repr(C)]
struct CallTrace {
    env: *mut JNIEnv,
    num_frames: jint,
    frames: *mut CallFrame,
}

type AsyncGetCallTrace = unsafe extern "C" fn(*mut CallTrace, jint, *mut c_void);

/// AsyncGetCallTrace's failure codes (zero or negative `num_frames`), by the names HotSpot gives
/// them; index is the negated code.
pub const FAILURE_NAMES: [&str; 11] = [
    "ticks_no_Java_frame",
    "ticks_no_class_load",
    "ticks_GC_active",
    "ticks_unknown_not_Java",
    "ticks_not_walkable_not_Java",
    "ticks_unknown_Java",
    "ticks_not_walkable_Java",
    "ticks_unknown_state",
    "ticks_thread_exit",
    "ticks_deopt",
    "ticks_safepoint",
];

/// What the handler records for a thread that is not attached to the VM: HotSpot's
/// `ticks_unknown_not_Java`, which AsyncGetCallTrace itself gives such threads.
pub const NOT_A_VM_THREAD: i32 = -3;

/// The name of a failed walk's code.
pub fn failure_name(code: i32) -> &'static str {
    usize::try_from(-i64::from(code))
        .ok()
        .and_then(|index| FAILURE_NAMES.get(index).copied())
        .unwrap_or("ticks_unknown_code")
}

struct SignalSampler {
    vm: *mut JavaVM,
    walk: AsyncGetCallTrace,
    ring: SampleRing,
    /// Java frames walked at most (`depth=`); a ring slot has room for native frames on top.
    java_depth: usize,
}

static SAMPLER: AtomicPtr<SignalSampler> = AtomicPtr::new(ptr::null_mut());
/// Whether CPU samples (SIGPROF) and wall-clock samples (the wall signal) are taken, by
/// [`SampleKind`].
static ENABLED: [AtomicBool; 2] = [const { AtomicBool::new(false) }; 2];
/// Signals the handler received, by [`SampleKind`], taken or ignored.
static RECEIVED: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// The two kinds of signal sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleKind {
    Cpu = 0,
    Wall = 1,
}
/// Whether samples of threads the VM does not know (GC workers and other threads of the JVM's
/// own) are walked and kept (`vmthreads=y`) rather than only counted.
static VM_THREADS: AtomicBool = AtomicBool::new(false);
/// Time spent inside the handler taking samples, so the profile can say what it cost.
static HANDLER_NANOS: AtomicU64 = AtomicU64::new(0);
/// A clock read that is async-signal-safe (POSIX lists clock_gettime as such).
fn clock_nanos(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The calling thread's CPU time, in nanoseconds.
pub fn thread_cpu_nanos() -> u64 {
    clock_nanos(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Nanoseconds of a clock that only goes forward (for durations: waits for locks).
pub fn monotonic_nanos() -> u64 {
    clock_nanos(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds since the epoch (async-signal-safe, so callbacks inside safepoints may use it).
pub fn wall_nanos() -> u64 {
    clock_nanos(libc::CLOCK_REALTIME)
}

/// Slots holding the threads (`pthread_self`) running the wall-clock handler now (0: free). A
/// CPU timer that fires meanwhile caught the agent's own work on that thread. `pthread_self`
/// reads the thread pointer, with no system call: a system call before the slot is taken
/// would be where the kernel delivers the CPU timer's signal.
static IN_WALL_HANDLER: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];
/// The agent library's executable mapping, `[start, end)`: a CPU timer's signal delivered on
/// top of the wall-clock signal (both pending as the thread wakes up) interrupts the wall
/// handler's first instruction, before it takes a slot.
static OWN_CODE: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// Finds the agent library's code in /proc/self/maps (outside any handler).
fn learn_own_code() {
    let own = on_wall_signal as *const () as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    if let Some(mapping) = maps
        .lines()
        .filter_map(crate::native_symbols::Mapping::parse)
        .find(|mapping| mapping.executable && (mapping.start..mapping.end).contains(&own))
    {
        OWN_CODE[0].store(mapping.start, Ordering::Relaxed);
        OWN_CODE[1].store(mapping.end, Ordering::Release);
    }
}

/// The pc a signal interrupted.
fn interrupted_pc(context: *mut c_void) -> Option<usize> {
    if context.is_null() {
        return None;
    }
    // SAFETY: the kernel passes the interrupted thread's ucontext to an SA_SIGINFO handler.
    let context = unsafe { &*context.cast::<libc::ucontext_t>() };
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    return Some(context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize);
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    return Some(context.uc_mcontext.pc as usize);
    #[allow(unreachable_code)]
    None
}

/// Where the interrupted code was, for the walker of our own: (pc, sp, fp, r13), r13 being
/// where HotSpot's interpreter keeps its bytecode pointer.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn interrupted_frame(context: *mut c_void) -> Option<crate::vm_walker::StartFrame> {
    if context.is_null() {
        return None;
    }
    // SAFETY: the kernel passes the interrupted thread's ucontext to an SA_SIGINFO handler.
    let registers = unsafe { &(*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    Some(crate::vm_walker::StartFrame {
        pc: registers[libc::REG_RIP as usize] as usize,
        sp: registers[libc::REG_RSP as usize] as usize,
        fp: registers[libc::REG_RBP as usize] as usize,
        bcp: registers[libc::REG_R13 as usize] as usize,
        method_register: registers[libc::REG_RBX as usize] as usize,
        interrupted: true,
    })
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn interrupted_frame(_context: *mut c_void) -> Option<crate::vm_walker::StartFrame> {
    None
}

/// Our walk of the interrupted thread, from where the native frames entered Java code (or
/// from the signal's registers).
fn walk_ours(
    env: *mut c_void,
    context: *mut c_void,
    entered: Option<(usize, usize, usize)>,
    out: *mut CallFrame,
    room: usize,
) -> Result<crate::vm_walker::Walk, crate::vm_walker::WalkFailure> {
    use crate::vm_walker::{StartFrame, WalkFailure};
    let layout = crate::vm_structs::thread_layout().ok_or(WalkFailure::UnknownCode)?;
    let thread = layout
        .thread_of(env.cast())
        .ok_or(WalkFailure::UnknownCode)?;
    // SAFETY: the JavaThread of this thread's own JNIEnv is live.
    let stack = unsafe { layout.stack_of(thread) }.ok_or(WalkFailure::BadFrame)?;
    let start = match entered {
        Some((pc, sp, fp)) => StartFrame::returned_to(pc, sp, fp),
        None => interrupted_frame(context).ok_or(WalkFailure::UnknownCode)?,
    };
    // SAFETY: this is the handler on the interrupted thread; `thread` is its JavaThread and
    // `stack` its stack as the JavaThread has it; `out` has room for `room` frames.
    unsafe { crate::vm_walker::walk(thread, layout, stack, start, out, room) }
}

/// Moves the Java frames of the `count` at `frames` to the front, in order, dropping the stub
/// frames (native pcs); returns how many are left.
///
/// # Safety
/// `frames` must hold `count` initialised frames.
unsafe fn keep_java_frames(frames: *mut CallFrame, count: usize) -> usize {
    let mut kept = 0;
    for index in 0..count {
        // SAFETY: `index` and `kept` <= `index` are below `count`, the caller's frames.
        unsafe {
            let frame = *frames.add(index);
            if frame.lineno != crate::ring::NATIVE_PC_LINENO {
                *frames.add(kept) = frame;
                kept += 1;
            }
        }
    }
    kept
}

/// CPU samples that caught a thread in the wall-clock handler, since the last call of
/// [`take_in_agent_samples`].
static IN_AGENT_SAMPLES: AtomicU64 = AtomicU64::new(0);

/// CPU samples left out since the last call because they caught the agent's wall-clock
/// handler (its cost, not the application's).
pub fn take_in_agent_samples() -> u64 {
    IN_AGENT_SAMPLES.swap(0, Ordering::Relaxed)
}

/// Nanoseconds spent in the signal handler since the last call.
pub fn take_handler_nanos() -> u64 {
    HANDLER_NANOS.swap(0, Ordering::Relaxed)
}

/// HotSpot's AsyncGetCallTrace, if this JVM exports it.
fn find_async_get_call_trace() -> Option<AsyncGetCallTrace> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"AsyncGetCallTrace".as_ptr()) };
    // SAFETY: HotSpot's exported AsyncGetCallTrace has exactly this C signature.
    (!symbol.is_null())
        .then(|| unsafe { std::mem::transmute::<*mut c_void, AsyncGetCallTrace>(symbol) })
}

/// Why signal sampling could not be set up.
#[derive(Debug)]
pub enum InstallError {
    NoAsyncGetCallTrace,
    Sigaction(io::Error),
}

/// Finds AsyncGetCallTrace, allocates the ring and installs the SIGPROF handler (disabled until
/// [`set_enabled`]). Called once, in Agent_OnLoad or Agent_OnAttach.
pub fn install(vm: *mut JavaVM, ring: SampleRing, java_depth: usize) -> Result<(), InstallError> {
    let walk = find_async_get_call_trace().ok_or(InstallError::NoAsyncGetCallTrace)?;
    let sampler = Box::into_raw(Box::new(SignalSampler {
        vm,
        walk,
        ring,
        java_depth: java_depth.max(1),
    }));
    // Never freed: a late signal may still read it while the process exits.
    SAMPLER.store(sampler, Ordering::Release);
    // SAFETY: sigaction is given a fully initialised struct whose handler has the SA_SIGINFO
    // signature; SIGPROF is not used by HotSpot itself.
    let status = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigprof as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        // A wall-clock signal waits for the CPU sample's end: its sample is of the thread's
        // own code, not of this handler.
        libc::sigaddset(&mut action.sa_mask, WALL_SIGNAL);
        libc::sigaction(libc::SIGPROF, &action, ptr::null_mut())
    };
    if status != 0 {
        return Err(InstallError::Sigaction(io::Error::last_os_error()));
    }
    Ok(())
}

/// The tag of a CPU sample in the ring.
pub const CPU_SAMPLE: u32 = 0;
/// The tag bit of a wall-clock sample; the low byte holds the thread's
/// `JavaThread::_thread_state` when VMStructs gave its place, else 0.
pub const WALL_SAMPLE: u32 = 1 << 31;
/// Where a sample's tag (CPU or wall) holds the traced call its thread was in
/// (`traced_calls`), 0 for none: bits 8 to 30.
pub const CALL_SHIFT: u32 = 8;
pub const CALL_MASK: u32 = crate::traced_calls::MAX_CALL << CALL_SHIFT;
/// The signal of wall-clock samples: HotSpot does not use it on Linux.
pub const WALL_SIGNAL: c_int = libc::SIGVTALRM;

/// Whether the handler is installed: the ring exists.
pub fn installed() -> bool {
    !SAMPLER.load(Ordering::Acquire).is_null()
}

/// Installs the wall-clock signal's handler (after [`install`]).
pub fn install_wall_signal() -> io::Result<()> {
    learn_own_code();
    // SAFETY: as in `install`: a fully initialised struct with an SA_SIGINFO handler.
    let status = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_wall_signal as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(WALL_SIGNAL, &action, ptr::null_mut())
    };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether some other code already handles the wall-clock signal.
pub fn wall_signal_taken() -> bool {
    // SAFETY: sigaction with a null new action only reads the current one.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(WALL_SIGNAL, ptr::null(), &mut current) == 0
            && current.sa_sigaction != libc::SIG_DFL
            && current.sa_sigaction != libc::SIG_IGN
            && current.sa_sigaction != on_wall_signal as *const () as usize
    }
}

/// The threads with a wall-clock signal sent and not yet handled, one slot per kernel id
/// modulo the table's size (0: none). The kernel keeps at most one pending SIGVTALRM per
/// thread: a signal sent to a thread that is runnable but waiting for a CPU (a busy machine)
/// before it handled the previous one is merged into it, and the intervals the second stood
/// for would be lost, from running threads only. The agent's thread asks here first and adds
/// those intervals to the pending sample instead.
static WALL_PENDING: [AtomicI32; 1024] = [const { AtomicI32::new(0) }; 1024];

fn wall_pending_slot(kernel_id: i32) -> &'static AtomicI32 {
    &WALL_PENDING[kernel_id.unsigned_abs() as usize % WALL_PENDING.len()]
}

/// What became of a wall-clock signal for a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WallSignal {
    /// Sent: the thread's handler will take one sample.
    Sent,
    /// Not sent: the thread has not yet handled the last one, whose sample is still to come.
    StillPending,
    /// Not sent: the thread has ended.
    Gone,
}

/// Sends the wall-clock signal to a thread of this process, unless one is still pending there.
pub fn signal_for_wall_sample(kernel_id: i32) -> WallSignal {
    let slot = wall_pending_slot(kernel_id);
    // A slot held by another thread (ids equal modulo the table) is not ours to track: that
    // signal is sent untracked, as if there were no table.
    let tracked = match slot.compare_exchange(0, kernel_id, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => true,
        Err(holder) if holder == kernel_id => return WallSignal::StillPending,
        Err(_) => false,
    };
    // SAFETY: tgkill with our own pid and a thread id; a thread that ended is an error (ESRCH),
    // and a reused id is a thread of this process whose handler is ours.
    let sent =
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), kernel_id, WALL_SIGNAL) == 0 };
    if sent {
        WallSignal::Sent
    } else {
        if tracked {
            let _ = slot.compare_exchange(kernel_id, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
        WallSignal::Gone
    }
}

/// Forgets a wall-clock signal still marked pending for a thread: it ended before handling it,
/// or the mark is so old that the signal must have been lost, and a thread reusing the id
/// must not wait on it.
pub fn forget_wall_signal(kernel_id: i32) {
    let _ = wall_pending_slot(kernel_id).compare_exchange(
        kernel_id,
        0,
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// The ring the handler writes to, once installed.
pub fn ring() -> Option<&'static SampleRing> {
    let sampler = SAMPLER.load(Ordering::Acquire);
    // SAFETY: once stored, the sampler is never freed or changed.
    (!sampler.is_null()).then(|| unsafe { &(*sampler).ring })
}

/// Whether some other code (another profiler) already handles SIGPROF: installing ours would
/// silently take its signals away.
pub fn sigprof_taken() -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `current`.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPROF, ptr::null(), &mut current) == 0
            && current.sa_sigaction != libc::SIG_DFL
            && current.sa_sigaction != libc::SIG_IGN
            && current.sa_sigaction != on_sigprof as *const () as usize
    }
}

/// Keeps the native frames of samples taken on threads the VM does not know (`vmthreads=y`).
pub fn set_vm_threads(enabled: bool) {
    VM_THREADS.store(enabled, Ordering::Release);
}

/// Turns the taking of one kind of sample on or off; while off the handler returns at once
/// for that kind's signal (a signal still pending from before is ignored).
pub fn set_enabled(kind: SampleKind, enabled: bool) {
    ENABLED[kind as usize].store(enabled, Ordering::Release);
}

/// Turns every kind of sample off (the VM is dying, or the agent gave up).
pub fn disable_all() {
    for enabled in &ENABLED {
        enabled.store(false, Ordering::Release);
    }
}

/// How many signals of this kind the handler has received so far, sample taken or not.
pub fn signals_received(kind: SampleKind) -> u64 {
    RECEIVED[kind as usize].load(Ordering::Relaxed)
}

/// The calling thread's kernel id.
pub fn current_thread_id() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// The CPU clock of any thread of this process, by kernel id: the kernel's
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, the id glibc's pthread_getcpuclockid builds.
/// Unlike CLOCK_THREAD_CPUTIME_ID it names a thread other than the caller.
pub fn thread_cpu_clock(thread_id: i32) -> libc::clockid_t {
    const CPUCLOCK_PERTHREAD: libc::clockid_t = 4;
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    (!thread_id).wrapping_shl(3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
}

/// CPU time used so far by a thread of this process, or `None` once it is gone.
pub fn task_cpu_nanos(thread_id: i32) -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; a clock of a thread that ended is an
    // error, not undefined behaviour.
    let status = unsafe { libc::clock_gettime(thread_cpu_clock(thread_id), &mut now) };
    (status == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// The kernel ids of this process's threads right now.
pub fn process_threads() -> io::Result<Vec<i32>> {
    let mut ids: Vec<i32> = std::fs::read_dir("/proc/self/task")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

extern "C" fn on_sigprof(_signal: c_int, _info: *mut libc::siginfo_t, context: *mut c_void) {
    // A CPU timer that fired while this thread ran the wall-clock handler measured the
    // agent's work, not the application's: counted, not sampled.
    // SAFETY: pthread_self only reads the thread pointer; it is async-signal-safe.
    let thread = unsafe { libc::pthread_self() } as usize;
    let in_own_code = interrupted_pc(context).is_some_and(|pc| {
        (OWN_CODE[0].load(Ordering::Relaxed)..OWN_CODE[1].load(Ordering::Acquire)).contains(&pc)
    });
    if in_own_code
        || IN_WALL_HANDLER
            .iter()
            .any(|slot| slot.load(Ordering::Acquire) == thread)
    {
        IN_AGENT_SAMPLES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    on_sample_signal(context, CPU_SAMPLE);
}

extern "C" fn on_wall_signal(_signal: c_int, _info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: as in `on_sigprof`.
    let thread = unsafe { libc::pthread_self() } as usize;
    // No slot free (more than 64 threads in the handler at once): the samples go uncounted.
    let slot = IN_WALL_HANDLER.iter().find(|slot| {
        slot.compare_exchange(0, thread, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    // The signal is handled: the agent's thread may send the next one.
    forget_wall_signal(current_thread_id());
    on_sample_signal(context, WALL_SAMPLE);
    if let Some(slot) = slot {
        slot.store(0, Ordering::Release);
    }
}

fn on_sample_signal(context: *mut c_void, tag: u32) {
    // SAFETY: errno is thread-local; we put it back so the interrupted code never sees our use.
    let errno = unsafe { *libc::__errno_location() };
    let kind = if tag == WALL_SAMPLE {
        SampleKind::Wall
    } else {
        SampleKind::Cpu
    };
    RECEIVED[kind as usize].fetch_add(1, Ordering::Relaxed);
    if ENABLED[kind as usize].load(Ordering::Acquire) {
        let sampler = SAMPLER.load(Ordering::Acquire);
        if !sampler.is_null() {
            let started = clock_nanos(libc::CLOCK_MONOTONIC);
            // SAFETY: the sampler is never freed once stored.
            take_sample(unsafe { &*sampler }, context, tag);
            let spent = clock_nanos(libc::CLOCK_MONOTONIC).saturating_sub(started);
            HANDLER_NANOS.fetch_add(spent, Ordering::Relaxed);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// The kernel id of the thread whose samples are dropped (the agent's own); 0 for none.
static NEVER_SAMPLED: AtomicI32 = AtomicI32::new(0);

/// The calling thread's samples are dropped from now on.
pub fn never_sample_this_thread() {
    NEVER_SAMPLED.store(current_thread_id(), Ordering::Release);
}

fn take_sample(sampler: &SignalSampler, context: *mut c_void, tag: u32) {
    // The agent's own thread is never profiled. With vmthreads=y every thread of the process is
    // timed, and a scan may see the agent's thread before it has named itself; its samples are
    // dropped here, by its kernel id. Not by a thread-local: in a library the JVM loaded with
    // dlopen, a thread's first use of a thread-local may allocate its block, and the
    // interrupted code may hold the allocator's lock.
    let thread_id = current_thread_id();
    if thread_id == NEVER_SAMPLED.load(Ordering::Acquire) {
        return;
    }
    let mut env: *mut c_void = ptr::null_mut();
    // SAFETY: GetEnv only reads the VM's thread-local current thread, which HotSpot makes safe in
    // signal handlers; async-profiler relies on the same.
    let status = unsafe {
        ((**sampler.vm).GetEnv)(
            sampler.vm,
            &mut env,
            jvmti_bindings::sys::jni::JNI_VERSION_1_6,
        )
    };
    // A wall sample says what the thread was doing: its VM state, read from its JavaThread.
    let tag = match (tag, crate::vm_structs::thread_layout()) {
        (WALL_SAMPLE, Some(layout)) if status == 0 && !env.is_null() => {
            match layout.thread_of(env.cast()) {
                Some(thread) => {
                    // SAFETY: the JavaThread of this thread's own JNIEnv is live; the state
                    // field is at the offset VMStructs gave.
                    let state = unsafe { ((thread + layout.state) as *const i32).read_volatile() };
                    WALL_SAMPLE | (state as u32 & 0xff)
                }
                None => WALL_SAMPLE,
            }
        }
        (tag, _) => tag,
    };
    let tag = tag | (crate::traced_calls::current(thread_id) << CALL_SHIFT);
    sampler.ring.record(tag, |frames, depth| {
        if status != 0 || env.is_null() {
            if !VM_THREADS.load(Ordering::Acquire) {
                return (thread_id, NOT_A_VM_THREAD);
            }
            // A thread of the JVM's own that has no Java stack at all: its native frames, then
            // the mark saying so.
            // SAFETY: as below.
            let native = unsafe {
                crate::native_stack::walk(context, thread_id, None, frames, depth - 1, &mut None)
            };
            // SAFETY: `native` < `depth`, the frames the ring gave us.
            unsafe { *frames.add(native) = CallFrame::failed_walk(NOT_A_VM_THREAD) };
            return (thread_id, native as i32 + 1);
        }
        // The native frames first (innermost), leaving room for the Java frames' first or the
        // mark of a failed walk.
        // SAFETY: this is the handler, on the interrupted thread, with the kernel's ucontext;
        // `frames` has room for `depth` frames.
        // The stack of a thread that did not record it itself (one of the JVM's compiler
        // threads, one timed at attach), as its JavaThread has it.
        let known_stack = crate::vm_structs::thread_layout().and_then(|layout| {
            let thread = layout.thread_of(env.cast())?;
            // SAFETY: the JavaThread of this thread's own JNIEnv is live.
            unsafe { layout.stack_of(thread) }
        });
        let mut entered = None;
        // SAFETY: as above; `known_stack` is this thread's stack as its JavaThread has it.
        let native = unsafe {
            crate::native_stack::walk(
                context,
                thread_id,
                known_stack,
                frames,
                depth - 1,
                &mut entered,
            )
        };
        // A thread in a stub the JVM generated (an arraycopy, a dispatch stub, an adapter) gets
        // a frame for it on top of the Java frames, as a native one named at dump: its time is
        // the stub's, not its caller's. Only where the slot has room beside `java_depth`.
        let stub = (native == 0 && depth > sampler.java_depth)
            .then(|| interrupted_pc(context))
            .flatten()
            .filter(|&pc| !crate::code_map::in_interpreter(pc) && crate::code_map::in_stub(pc));
        let native = match stub {
            Some(pc) => {
                // SAFETY: 0 < `depth`, the frames the ring gave us.
                unsafe { *frames = CallFrame::native_pc(pc) };
                1
            }
            None => native,
        };
        // A slot without room beyond `depth=` is cstack=no's: Java frames only, so the stub
        // frames our walker names are left out, as AsyncGetCallTrace has none.
        let java_only = depth <= sampler.java_depth;
        // SAFETY: `native` < `depth`, the frames the ring gave us.
        let java_frames = unsafe { frames.add(native) };
        let depth = (depth - native).min(sampler.java_depth);
        let walker = crate::vm_walker::mode();
        if walker == Walker::Vm {
            let ours = walk_ours(env, context, entered, java_frames, depth);
            crate::vm_walker::count_walk(ours);
            if let Ok(walk) = ours {
                let mut frames = walk.frames;
                if java_only {
                    // SAFETY: our walk wrote `frames` frames at `java_frames`.
                    frames = unsafe { keep_java_frames(java_frames, frames) };
                }
                // A virtual thread's frames end here; its profile root says so.
                if walk.virtual_thread && frames < depth {
                    // SAFETY: `frames` < `depth`, the room at `java_frames`.
                    unsafe { *java_frames.add(frames) = CallFrame::virtual_thread() };
                    frames += 1;
                }
                return (thread_id, (native + frames) as i32);
            }
        }
        let mut trace = CallTrace {
            env: env.cast(),
            num_frames: 0,
            frames: java_frames,
        };
        // SAFETY: `java_frames` has room for `depth` frames; `context` is the ucontext the kernel
        // gave this handler; AsyncGetCallTrace is designed to run in a signal handler.
        unsafe { (sampler.walk)(&mut trace, depth as jint, context) };
        if walker == Walker::Check {
            let mut checked = [CallFrame::failed_walk(0); crate::walker_check::COMPARED_FRAMES];
            let ours = walk_ours(
                env,
                context,
                entered,
                checked.as_mut_ptr(),
                depth.min(crate::walker_check::COMPARED_FRAMES),
            );
            let theirs = if trace.num_frames > 0 {
                let compared =
                    (trace.num_frames as usize).min(crate::walker_check::COMPARED_FRAMES);
                // SAFETY: AsyncGetCallTrace wrote `num_frames` frames at `java_frames`.
                Ok(unsafe { std::slice::from_raw_parts(java_frames, compared) })
            } else {
                Err(trace.num_frames)
            };
            crate::vm_walker::count_walk(ours);
            crate::walker_check::compare(theirs, ours.map(|walk| (walk, &checked[..walk.frames])));
        }
        if trace.num_frames <= 0 {
            // The sample is kept, marked with why its Java stack is missing.
            // SAFETY: `depth` >= 1, so `java_frames` has room for one frame.
            unsafe { *java_frames = CallFrame::failed_walk(trace.num_frames) };
            return (thread_id, native as i32 + 1);
        }
        (thread_id, native as i32 + trace.num_frames)
    });
}

/// Which clock drives a thread's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuClock {
    /// A perf_events `task-clock` counter: an hrtimer, so intervals down to 1 ms are honoured.
    PerfTaskClock,
    /// A POSIX timer on the thread's CPU clock: checked at each scheduler tick, so intervals
    /// shorter than a tick give one sample per tick.
    PosixCpuTimer,
}

impl CpuClock {
    pub fn describe(self) -> &'static str {
        match self {
            CpuClock::PerfTaskClock => "perf_events task-clock",
            CpuClock::PosixCpuTimer => "POSIX thread CPU timer",
        }
    }
}

/// A timer that raises SIGPROF on one thread after every interval of that thread's CPU time.
#[derive(Debug)]
pub enum ThreadTimer {
    /// Counting stops when the descriptor closes.
    Perf {
        _events: std::os::fd::OwnedFd,
    },
    Posix(libc::timer_t),
}

// SAFETY: a timer_t is a process-wide kernel handle and may be deleted from any thread; an fd
// likewise.
unsafe impl Send for ThreadTimer {}

impl ThreadTimer {
    /// Starts a timer on `clock` for a thread of this process (the caller or another: both
    /// kinds count the CPU time of the thread named and signal that very thread).
    pub fn start(clock: CpuClock, interval_ms: u32, thread_id: i32) -> io::Result<ThreadTimer> {
        match clock {
            CpuClock::PerfTaskClock => start_perf_timer(interval_ms, thread_id),
            CpuClock::PosixCpuTimer => start_posix_timer(interval_ms, thread_id),
        }
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        if let ThreadTimer::Posix(timer) = self {
            // SAFETY: the timer was created by us and is deleted exactly once, here.
            unsafe { libc::timer_delete(*timer) };
        }
        // A perf event stops when its OwnedFd closes.
    }
}

/// fcntl's thread-directed signal delivery, from the kernel's asm-generic/fcntl.h (the same on
/// x86_64 and aarch64); the libc crate exports them only for some targets.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

#[repr(C)]
struct FOwnerEx {
    owner_type: libc::c_int,
    pid: libc::pid_t,
}

fn start_perf_timer(interval_ms: u32, thread_id: i32) -> io::Result<ThreadTimer> {
    use perf_event_open_sys::bindings::{
        perf_event_attr, PERF_COUNT_SW_TASK_CLOCK, PERF_FLAG_FD_CLOEXEC, PERF_TYPE_SOFTWARE,
    };
    use std::os::fd::FromRawFd;

    let open = |exclude_kernel: bool| {
        let mut attr = perf_event_attr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: u64::from(PERF_COUNT_SW_TASK_CLOCK),
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = u64::from(interval_ms) * 1_000_000;
        attr.__bindgen_anon_2.wakeup_events = 1;
        attr.set_disabled(1);
        attr.set_exclude_kernel(u64::from(exclude_kernel));
        attr.set_exclude_hv(1);
        // SAFETY: `attr` is fully initialised; the event measures only the thread named.
        unsafe {
            perf_event_open_sys::perf_event_open(
                &mut attr,
                thread_id,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC.into(),
            )
        }
    };
    // Counting kernel time too needs privilege where perf_event_paranoid > 1; without it, the
    // event still samples the thread's user time, which is where Java frames are.
    let mut fd = open(false);
    if fd < 0 {
        fd = open(true);
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new descriptor that nothing else owns.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let owner = FOwnerEx {
        owner_type: F_OWNER_TID,
        pid: thread_id,
    };
    // SAFETY: fcntl and ioctl on the descriptor we own, with arguments of the types they expect:
    // deliver SIGPROF to the measured thread on every counter overflow, then start counting.
    let failed = unsafe {
        libc::fcntl(fd, libc::F_SETFL, libc::O_ASYNC) != 0
            || libc::fcntl(fd, F_SETSIG, libc::SIGPROF) != 0
            || libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) != 0
            || perf_event_open_sys::ioctls::RESET(fd, 0) != 0
            || perf_event_open_sys::ioctls::ENABLE(fd, 0) != 0
    };
    if failed {
        return Err(io::Error::last_os_error());
    }
    Ok(ThreadTimer::Perf { _events: owned })
}

fn start_posix_timer(interval_ms: u32, thread_id: i32) -> io::Result<ThreadTimer> {
    let mut timer: libc::timer_t = ptr::null_mut();
    // SAFETY: sigevent is plain C data and zero is a valid start; the kernel reads it once.
    let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
    event.sigev_notify = libc::SIGEV_THREAD_ID;
    event.sigev_signo = libc::SIGPROF;
    event.sigev_notify_thread_id = thread_id;
    // SAFETY: valid clock id, event and out-pointer.
    if unsafe { libc::timer_create(thread_cpu_clock(thread_id), &mut event, &mut timer) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let period = libc::timespec {
        tv_sec: (interval_ms / 1000) as libc::time_t,
        tv_nsec: ((interval_ms % 1000) * 1_000_000) as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: period,
        it_value: period,
    };
    // SAFETY: `timer` was just created; `spec` is initialised.
    if unsafe { libc::timer_settime(timer, 0, &spec, ptr::null_mut()) } != 0 {
        let error = io::Error::last_os_error();
        // SAFETY: deleting the timer we created.
        unsafe { libc::timer_delete(timer) };
        return Err(error);
    }
    Ok(ThreadTimer::Posix(timer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_codes_have_hotspots_names() {
        assert_eq!(failure_name(0), "ticks_no_Java_frame");
        assert_eq!(failure_name(-2), "ticks_GC_active");
        assert_eq!(failure_name(-10), "ticks_safepoint");
        assert_eq!(failure_name(-11), "ticks_unknown_code");
        assert_eq!(failure_name(i32::MIN), "ticks_unknown_code");
    }

    /// Blocks or unblocks the wall-clock signal on the calling thread.
    fn mask_wall_signal(how: c_int) {
        // SAFETY: a signal set we own, built with sigemptyset/sigaddset, given to
        // pthread_sigmask for the calling thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, WALL_SIGNAL);
            assert_eq!(libc::pthread_sigmask(how, &set, ptr::null_mut()), 0);
        }
    }

    #[test]
    fn a_wall_signal_is_not_sent_again_before_it_is_handled() {
        install_wall_signal().expect("the wall-clock handler");
        let me = current_thread_id();
        // A thread that cannot take the signal yet, as one waiting for a CPU: the second signal
        // would be merged into the first by the kernel, so it is not sent.
        mask_wall_signal(libc::SIG_BLOCK);
        assert_eq!(signal_for_wall_sample(me), WallSignal::Sent);
        assert_eq!(signal_for_wall_sample(me), WallSignal::StillPending);
        assert_eq!(signal_for_wall_sample(me), WallSignal::StillPending);
        // Unblocked, the pending signal is handled at once, and the next one is sent.
        let handled = signals_received(SampleKind::Wall);
        mask_wall_signal(libc::SIG_UNBLOCK);
        assert_eq!(signals_received(SampleKind::Wall), handled + 1);
        assert_eq!(signal_for_wall_sample(me), WallSignal::Sent);
        // A mark left by a thread that ended is forgotten, and the id signalled again.
        mask_wall_signal(libc::SIG_BLOCK);
        assert_eq!(signal_for_wall_sample(me), WallSignal::Sent);
        forget_wall_signal(me);
        assert_eq!(signal_for_wall_sample(me), WallSignal::Sent);
        mask_wall_signal(libc::SIG_UNBLOCK);
        assert_eq!(signal_for_wall_sample(i32::MAX), WallSignal::Gone);
    }

    #[test]
    fn another_threads_cpu_clock_is_readable() {
        // The clock built from our own id is the one CLOCK_THREAD_CPUTIME_ID reads.
        let me = current_thread_id();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(20) {}
        let before = thread_cpu_nanos();
        let by_id = task_cpu_nanos(me).expect("our own clock");
        let after = thread_cpu_nanos();
        assert!(
            before <= by_id && by_id <= after,
            "{before} {by_id} {after}"
        );
        // Another thread's, from here.
        let (sender, receiver) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            sender.send(current_thread_id()).unwrap();
            let _ = stopped.recv();
        });
        let id = receiver.recv().unwrap();
        assert!(process_threads().unwrap().contains(&id));
        assert!(task_cpu_nanos(id).is_some());
        stop.send(()).unwrap();
        other.join().unwrap();
        // The kernel releases the task a moment after join returns.
        let joined = std::time::Instant::now();
        while task_cpu_nanos(id).is_some() {
            assert!(
                joined.elapsed() < std::time::Duration::from_secs(5),
                "{id} lives on"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
