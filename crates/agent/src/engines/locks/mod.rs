//! lock= (and monitor=y with HPROF text output): time threads wait for locks, as a profile.
//! Two waits are timed: blocking on a contended `synchronized` monitor (JVMTI's
//! MonitorContendedEnter marks when a thread starts to block on a monitor another thread holds,
//! MonitorContendedEntered when it got it) and parking in `Unsafe.park` (`park`). Waits of at
//! least the threshold are counted with the waiting thread's stack and the class of the monitor
//! or of the park's blocker object; with `lockowner=y` also with the stack of the thread that
//! held the lock when the wait began. Each dump writes them as MONITOR TIME, PARK TIME and LOCK
//! OWNERS tables.

mod natives;
mod park;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use jvmti_bindings::sys::jvmti::{
    JVMTI_EVENT_MONITOR_CONTENDED_ENTER, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
    JVMTI_EVENT_NATIVE_METHOD_BIND, JVMTI_THREAD_STATE_RUNNABLE,
};
use openprof_format::hprof_text::{LockTableKind, WAITED_BLOCKED, WAITED_PARKED};
use openprof_format::java_names::class_name_from_signature;
use openprof_format::options::Options;

use crate::context::{Context, Report};
use crate::engine::{need, running, Dump, Engine, Need};
use crate::error::{AgentError, JvmtiContext};
use crate::guard::{callback, Admit};
use crate::jni::Jni;
use crate::jvmti::{
    jobject, jthread, jvmtiCapabilities, jvmtiEnv, jvmtiEvent, jvmtiEventCallbacks, JNIEnv, Jvmti,
};
use crate::methods::Location;
use crate::output::hprof_date;
use crate::signals::monotonic_nanos;
use crate::sync::lock;

/// How a thread waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Waited {
    /// Entering a contended monitor.
    Blocked,
    /// In Unsafe.park.
    Parked,
}

impl Waited {
    /// The table its waits go to.
    fn table(self) -> LockTableKind {
        match self {
            Waited::Blocked => LockTableKind::Monitor,
            Waited::Parked => LockTableKind::Park,
        }
    }

    /// What LOCK OWNERS rows say of it.
    fn name(self) -> &'static str {
        match self {
            Waited::Blocked => WAITED_BLOCKED,
            Waited::Parked => WAITED_PARKED,
        }
    }
}

/// A stack as JVMTI gave it: (jmethodID, jlocation) frames, innermost first.
type RawFrames = Vec<(usize, i64)>;

/// The thread that held a lock when a wait began: its serial (with `thread=y`) and its stack.
pub struct Owner {
    thread: Option<u32>,
    frames: RawFrames,
}

/// Waits counted the same way: how, on which stack (of the waiting thread, or of the owner),
/// and the lock's class (`None`: a park without a blocker).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WaitKey {
    waited: Waited,
    thread: Option<u32>,
    frames: RawFrames,
    class: Option<String>,
}

/// How many threads one contended enter asks for the monitor's owner (a handshake each) before
/// it reads the monitor's usage at a safepoint instead: with hundreds of threads, one
/// safepoint costs less than their handshakes.
const MAX_THREADS_ASKED: usize = 32;

/// How many monitors [`Locks::last_owners`] remembers an owner of; past it, it starts again.
const LAST_OWNERS: usize = 1024;

/// A thread remembered as a monitor's last owner (a global reference).
struct LastOwner(jthread);

// SAFETY: a global reference is valid on any thread; it is deleted under the map's lock.
unsafe impl Send for LastOwner {}

/// Waits since the last collect: (how many, nanoseconds) by key, for the waiting threads'
/// stacks and for the owners'.
#[derive(Default)]
struct Waits {
    waiters: HashMap<WaitKey, (u64, u64)>,
    owners: HashMap<WaitKey, (u64, u64)>,
}

pub struct Locks {
    /// `lock=`: the shortest wait counted (a profiling session may change it).
    threshold_ns: AtomicU64,
    /// `lockowner=y`.
    owners: bool,
    /// Off: the callbacks and the park wrapper record nothing (they still pass parks on).
    recording: AtomicBool,
    /// Set at start: whether parks are timed (Unsafe.park rebound), or why not.
    parks: OnceLock<Result<park::ParkFields, String>>,
    waits: Mutex<Waits>,
    /// With `lockowner=y`: whether threads can be asked which monitors they hold
    /// (GetOwnedMonitorInfo, whose capability HotSpot grants only to an agent loaded with the
    /// JVM).
    ask_threads: bool,
    /// With `lockowner=y`: the thread found owning each contended monitor the last time its
    /// owner was looked for, by the monitor's identity hash. It is asked first.
    last_owners: Mutex<HashMap<i32, LastOwner>>,
}

/// A contended enter under way on this OS thread.
struct Blocking {
    /// The Java thread that blocked (a global reference): on JDK 24 and later a virtual thread
    /// blocked on a monitor gives up its carrier and may get the monitor on another, so the
    /// enter an OS thread saw last need not be the one that ends on it.
    thread: jthread,
    since: u64,
    owner: Option<Owner>,
}

thread_local! {
    /// The contended enter this thread is blocked in (JVMTI callbacks only: never touched in
    /// a signal handler).
    static BLOCKING: RefCell<Option<Blocking>> = const { RefCell::new(None) };
}

impl Locks {
    pub fn new(jvmti: Jvmti, options: &Options) -> Locks {
        let ask_threads = options.lock_owners && {
            let mut capabilities = jvmtiCapabilities::default();
            capabilities.set_can_get_owned_monitor_info(true);
            jvmti.add_capabilities(&capabilities).is_ok()
        };
        Locks {
            threshold_ns: AtomicU64::new(options.lock_threshold_ns().unwrap_or(0)),
            owners: options.lock_owners,
            recording: AtomicBool::new(true),
            parks: OnceLock::new(),
            waits: Mutex::new(Waits::default()),
            ask_threads,
            last_owners: Mutex::new(HashMap::new()),
        }
    }

    /// Turns recording on or off, at once: waits that end while it is off are not counted.
    pub fn set_recording(&self, on: bool) {
        self.recording.store(on, Ordering::Release);
    }

    fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Acquire)
    }

    /// The shortest wait counted, in nanoseconds.
    fn threshold_ns(&self) -> u64 {
        self.threshold_ns.load(Ordering::Relaxed)
    }

    fn park_fields(&self) -> Option<&park::ParkFields> {
        self.parks.get().and_then(|parks| parks.as_ref().ok())
    }

    /// The tables each dump writes: MONITOR TIME always, PARK TIME once parks are timed, LOCK
    /// OWNERS with `lockowner=y`.
    fn tables(&self) -> Vec<LockTableKind> {
        let mut tables = vec![LockTableKind::Monitor];
        if self.park_fields().is_some() {
            tables.push(LockTableKind::Park);
        }
        if self.owners {
            tables.push(LockTableKind::Owners);
        }
        tables
    }

    fn class_of(&self, jni: Jni, object: jobject) -> String {
        let class = jni.object_class(object);
        let name = crate::context::get()
            .and_then(|context| context.jvmti.class_signature(class).ok())
            .map(|signature| class_name_from_signature(&signature))
            .unwrap_or_else(|| "<unknown>".into());
        jni.delete_local_ref(class);
        name
    }

    /// A thread's serial number when traces carry threads (`thread=y`).
    fn serial(context: &Context, thread: jthread) -> Option<u32> {
        let serial = context.thread_serial(thread);
        (context.options.thread && serial != 0).then_some(serial)
    }

    fn stack(context: &Context, thread: jthread) -> Option<RawFrames> {
        let frames = context
            .jvmti
            .stack_trace(thread, context.options.depth)
            .ok()?;
        Some(
            frames
                .iter()
                .map(|frame| (frame.method as usize, frame.location))
                .collect(),
        )
    }

    /// The stack of a lock's owner (`thread`, another thread), taken now. None when it has no
    /// Java frames left: between reading the owner and walking it, the owner may have released
    /// the lock and ended, and an empty stack would be counted as nobody's code.
    fn owner_stack(&self, context: &Context, thread: jthread) -> Option<Owner> {
        let frames = Self::stack(context, thread).filter(|frames| !frames.is_empty())?;
        Some(Owner {
            thread: Self::serial(context, thread),
            frames,
        })
    }

    /// The stack of the thread that owns a contended monitor now, found without a safepoint
    /// when it can be: each candidate is asked whether it holds the monitor
    /// (GetOwnedMonitorInfo, a handshake with that thread alone), first the thread found
    /// owning that monitor last time, then up to [`MAX_THREADS_ASKED`] others, those not
    /// running first (a thread asleep or waiting while it holds a lock is asked at once; a
    /// running one must reach a safepoint poll). Only when none of them holds it (a virtual
    /// thread may, or one not asked), or when threads can't be asked (an agent attached to a
    /// running JVM), is the monitor's usage read
    /// (GetObjectMonitorUsage), a safepoint operation: a busy machine can hold that up, for
    /// tens of milliseconds, past the owner's release, and the wait then had no owner.
    fn monitor_owner(&self, context: &Context, jni: Jni, object: jobject) -> Option<Owner> {
        let jvmti = context.jvmti;
        if !self.ask_threads {
            let owner = jvmti.monitor_owner(object).ok().flatten()?;
            let stack = self.owner_stack(context, owner);
            jni.delete_local_ref(owner);
            return stack;
        }
        let hash = jvmti.object_hash_code(object).ok();
        let holds = |thread: jthread| {
            let owned = jvmti.owned_monitors(thread).unwrap_or_default();
            let holds = owned
                .iter()
                .any(|&monitor| jni.is_same_object(monitor, object));
            for monitor in owned {
                jni.delete_local_ref(monitor);
            }
            holds
        };
        if let Some(hash) = hash {
            // A reference of its own: the map's may be replaced meanwhile.
            let last = lock(&self.last_owners)
                .get(&hash)
                .map(|last| jni.new_global_ref(last.0));
            if let Some(last) = last {
                let stack = holds(last)
                    .then(|| self.owner_stack(context, last))
                    .flatten();
                jni.delete_global_ref(last);
                if stack.is_some() {
                    return stack;
                }
            }
        }
        let current = jvmti.current_thread().ok();
        let mut threads: Vec<(bool, jthread)> = jvmti
            .all_threads()
            .unwrap_or_default()
            .into_iter()
            .map(|thread| {
                let running = jvmti
                    .thread_state(thread)
                    .is_ok_and(|state| state & JVMTI_THREAD_STATE_RUNNABLE != 0);
                (running, thread)
            })
            .collect();
        threads.sort_by_key(|(running, _)| *running);
        let mut owner = None;
        for (index, (_, thread)) in threads.into_iter().enumerate() {
            let found = owner.is_none()
                && index < MAX_THREADS_ASKED
                && !current.is_some_and(|current| jni.is_same_object(current, thread))
                && holds(thread);
            if found {
                owner = Some(thread);
            } else {
                jni.delete_local_ref(thread);
            }
        }
        if let Some(current) = current {
            jni.delete_local_ref(current);
        }
        let owner = match owner {
            Some(owner) => owner,
            None => jvmti.monitor_owner(object).ok().flatten()?,
        };
        if let Some(hash) = hash {
            let mut last_owners = lock(&self.last_owners);
            if last_owners.len() >= LAST_OWNERS && !last_owners.contains_key(&hash) {
                for (_, forgotten) in last_owners.drain() {
                    jni.delete_global_ref(forgotten.0);
                }
            }
            let remembered = LastOwner(jni.new_global_ref(owner));
            if let Some(replaced) = last_owners.insert(hash, remembered) {
                jni.delete_global_ref(replaced.0);
            }
        }
        let stack = self.owner_stack(context, owner);
        jni.delete_local_ref(owner);
        stack
    }

    /// A wait over the threshold just ended on `thread` (the current thread): counted on its
    /// stack, and on its owner's when there was one.
    fn record(
        &self,
        context: &Context,
        waited: Waited,
        thread: jthread,
        class: Option<String>,
        nanoseconds: u64,
        owner: Option<Owner>,
    ) {
        let Some(frames) = Self::stack(context, thread) else {
            return;
        };
        let key = WaitKey {
            waited,
            thread: Self::serial(context, thread),
            frames,
            class: class.clone(),
        };
        let mut waits = lock(&self.waits);
        add(&mut waits.waiters, key, nanoseconds);
        if let Some(owner) = owner {
            let key = WaitKey {
                waited,
                thread: owner.thread,
                frames: owner.frames,
                class,
            };
            add(&mut waits.owners, key, nanoseconds);
        }
    }

    /// MonitorContendedEnter: the time, and the owner's stack with `lockowner=y` (taken
    /// within the wait, which it lengthens: the thread could not go on anyway).
    fn blocking(&self, jni: Jni, thread: jthread, object: jobject) {
        let since = monotonic_nanos();
        let owner = if self.owners {
            crate::context::get().and_then(|context| self.monitor_owner(context, jni, object))
        } else {
            None
        };
        let blocking = Blocking {
            thread: jni.new_global_ref(thread),
            since,
            owner,
        };
        if let Some(earlier) = BLOCKING.with(|cell| cell.borrow_mut().replace(blocking)) {
            // An enter that ended on another carrier: not counted.
            jni.delete_global_ref(earlier.thread);
        }
    }

    /// MonitorContendedEntered: counts the wait if it was long enough, and began on this
    /// thread.
    fn entered(&self, jni: Jni, thread: jthread, object: jobject) {
        let Some(blocking) = BLOCKING.with(|cell| cell.borrow_mut().take()) else {
            return;
        };
        let same_thread = jni.is_same_object(blocking.thread, thread);
        jni.delete_global_ref(blocking.thread);
        let blocked = monotonic_nanos().saturating_sub(blocking.since);
        if !same_thread || blocked < self.threshold_ns() {
            return;
        }
        let Some(context) = crate::context::get() else {
            return;
        };
        let class = self.class_of(jni, object);
        self.record(
            context,
            Waited::Blocked,
            thread,
            Some(class),
            blocked,
            blocking.owner,
        );
    }
}

fn add(counts: &mut HashMap<WaitKey, (u64, u64)>, key: WaitKey, nanoseconds: u64) {
    let counted = counts.entry(key).or_default();
    counted.0 += 1;
    counted.1 += nanoseconds;
}

impl Engine for Locks {
    fn needs(options: &Options) -> Vec<Need> {
        let mut needs = vec![
            need!(
                can_generate_monitor_events,
                set_can_generate_monitor_events,
                "lock="
            ),
            need!(
                can_generate_native_method_bind_events,
                set_can_generate_native_method_bind_events,
                "lock="
            ),
        ];
        if options.lock_owners {
            needs.push(need!(
                can_get_monitor_info,
                set_can_get_monitor_info,
                "lockowner=y"
            ));
        }
        needs
    }

    fn callbacks(&self, callbacks: &mut jvmtiEventCallbacks) {
        callbacks.MonitorContendedEnter = Some(on_contended_enter);
        callbacks.MonitorContendedEntered = Some(on_contended_entered);
        callbacks.NativeMethodBind = Some(park::on_native_method_bind);
    }

    fn events(&self) -> Vec<jvmtiEvent> {
        vec![
            JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
            JVMTI_EVENT_NATIVE_METHOD_BIND,
        ]
    }

    fn start(&self, context: &Context, jni: *mut JNIEnv) -> Option<String> {
        let parks = self.parks.get_or_init(|| park::install(context.jvmti, jni));
        match parks {
            Ok(_) => None,
            Err(why) => {
                let said = format!("lock=: parks are not timed: {why}");
                eprintln!("openprof WARNING: {said}");
                Some(said)
            }
        }
    }

    fn collect(&self, context: &Context, report: &mut Report) {
        let waits = std::mem::take(&mut *lock(&self.waits));
        let jvmti = context.jvmti;
        for (owned, counts) in [(false, waits.waiters), (true, waits.owners)] {
            for (key, (waits, nanoseconds)) in counts {
                let frames = key.frames.iter().map(|&(method, location)| {
                    (
                        method as crate::jvmti::jmethodID,
                        Location::of_jvmti(location),
                    )
                });
                let (table, state) = if owned {
                    (LockTableKind::Owners, Some(key.waited.name()))
                } else {
                    (key.waited.table(), None)
                };
                report.profile.add_lock(
                    jvmti,
                    table,
                    key.thread,
                    frames,
                    state,
                    key.class,
                    waits,
                    nanoseconds,
                );
            }
        }
    }

    fn dump(&self, _context: &Context, dump: &Dump<'_>) {
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let (traces, tables) = report
            .profile
            .take_lock_tables(&self.tables(), hprof_date());
        if let Err(error) = report.output.lock_dump(&traces, &tables) {
            report.complain(error);
        }
    }

    fn stop(&self, _context: &Context, _jni: *mut JNIEnv) {
        // The last dump holds the waits that ended before the VM's death, not those during it.
        self.set_recording(false);
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        let owners = if self.owners {
            ", with the lock owners' stacks"
        } else {
            ""
        };
        let what = if self.park_fields().is_some() {
            "contended monitor enters and parks"
        } else {
            "contended monitor enters"
        };
        Some(format!(
            "{what} of {} ns or more{owners}",
            self.threshold_ns()
        ))
    }

    fn in_sessions(&self) -> bool {
        true
    }

    fn pause(&self, context: &Context) {
        self.set_recording(false);
        // With the monitor events off a blocked thread costs the profile nothing; the park
        // wrapper stays bound (NativeMethodBind with it), passing parks on untimed.
        for event in [
            JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
        ] {
            let _ = context.jvmti.set_event(event, false);
        }
    }

    fn resume(
        &self,
        context: &Context,
        _jni: *mut JNIEnv,
        options: &Options,
    ) -> Result<Option<String>, AgentError> {
        self.threshold_ns
            .store(options.lock_threshold_ns().unwrap_or(0), Ordering::Relaxed);
        // What ended while paused is nobody's.
        *lock(&self.waits) = Waits::default();
        for event in [
            JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
            JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
        ] {
            context
                .jvmti
                .set_event(event, true)
                .doing("can't turn the monitor events on")?;
        }
        self.set_recording(true);
        Ok(self.describe(context))
    }
}

unsafe extern "system" fn on_contended_enter(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    callback("a contended monitor enter", Admit::Profiling, || {
        if let Some(locks) = running::<Locks>().filter(|locks| locks.is_recording()) {
            locks.blocking(Jni(jni), thread, object);
        }
    });
}

unsafe extern "system" fn on_contended_entered(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    callback("a contended monitor entered", Admit::Profiling, || {
        if let Some(locks) = running::<Locks>().filter(|locks| locks.is_recording()) {
            locks.entered(Jni(jni), thread, object);
        }
    });
}
