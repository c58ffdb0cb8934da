//! Calls through bytecode instrumentation, for cpu=times: every method of the classes the
//! filters let through is rewritten (at load by a ClassFileLoadHook, and by RetransformClasses
//! for the classes loaded before) to call `openprof.CallHook`'s natives at its entry and at
//! each exit, by return or by throwable; the natives tell the engine that listens (the CPU
//! TIME table, or the trace). Classes the filters leave out keep their code and run at full
//! speed. JVMTI's method events, which run every method of every class in the interpreter, are
//! left to JVMs that can't retransform classes.
//!
//! Each instrumented method is a site, numbered once per (class, method, descriptor): the
//! number the rewritten code passes to the hooks. A site's jmethodID is found when its class
//! is prepared (or right after it was retransformed).

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

use jvmti_bindings::sys::jvmti::{
    event_callbacks_size_for_feature, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK,
};
use openprof_classfile::{
    call_hook_class_file, call_sites, declared_methods, instrument_each, HookKind, MethodPlan,
    Plan, CALL_HOOK_CLASS, CALL_HOOK_METHODS,
};
use openprof_format::java_names::class_name_from_signature;
use openprof_format::trace::filter::FilterBlock;

use crate::agent_work::{agent_work, in_agent_work};
use crate::coverage::Coverage;
use crate::guard::{callback, guarded, Admit};
use crate::jni::Jni;
use crate::jvmti::{
    jclass, jint, jmethodID, jobject, jvmtiCapabilities, jvmtiEnv, jvmtiEventCallbacks, JNIEnv,
    JavaVM, Jvmti,
};
use crate::sync::lock;

/// What an engine does with the calls the hooks report. Called on the calling thread, inside
/// the instrumented method; it must not run Java code.
pub trait CallListener: Sync {
    /// A call of `site` began; `receiver` is `this` when the hooks pass it (format=x's object
    /// ids), else null; `constructor`: the site is a constructor, whose `initialized` follows.
    fn entered(&self, jni: Jni, site: u32, receiver: jobject, constructor: bool);
    /// The constructor open innermost on this thread, of `site`, has its `super(...)` or
    /// `this(...)` call behind it.
    fn initialized(&self, jni: Jni, site: u32);
    /// The innermost open call of `site` on this thread ended: by a return, or by a throwable
    /// (`thrown`).
    fn exited(&self, jni: Jni, site: u32, thrown: bool);
    /// A rewritten method is about to make the call `call_site` (callsites=y).
    fn called(&self, _jni: Jni, _call_site: u32) {}
    /// The call `call_site` returned.
    fn returned(&self, _jni: Jni, _call_site: u32) {}
    /// A handler of the innermost open call of `site` caught a throwable: what it called and
    /// did not see return (a call the throwable left) ended.
    fn caught(&self, _jni: Jni, _site: u32) {}
    /// The call `call_site` is about to send an HTTP request on `connection` (after `called`):
    /// the request may carry the call's context.
    fn outgoing(&self, _jni: Jni, _connection: jobject, _call_site: u32) {}
    /// The call of `site` just entered handles an HTTP request (`exchange`), which may carry
    /// the context of the call that sent it.
    fn incoming(&self, _jni: Jni, _exchange: jobject, _site: u32) {}
}

/// One open call of [`OpenCalls`].
struct Open<T> {
    key: usize,
    /// A constructor before its `super(...)` or `this(...)` call returned.
    before_init: bool,
    /// When it is known to have ended though its exit did not come (see [`OpenCalls`]).
    ended_at: Option<u64>,
    data: T,
}

/// A thread's open calls as the hooks report them, each with what its listener keeps (`T`),
/// and the rule for the one exit the hooks can't report: a throwable out of a constructor's
/// `super(...)` or `this(...)` call (no handler may cover that call). Code before that call
/// catches nothing, so a call made from it that ends by a throwable ends its constructor too:
/// the constructor is marked ended then, and closed at its own `exitThrown` if one comes (the
/// throwable came from its arguments' code) or else at the thread's next hook. Closing hands
/// each call's data to `close` with its end and its caller's data.
pub struct OpenCalls<T> {
    calls: Vec<Open<T>>,
}

impl<T> Default for OpenCalls<T> {
    fn default() -> Self {
        OpenCalls { calls: Vec::new() }
    }
}

impl<T> OpenCalls<T> {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Whether a call of `key` is open.
    pub fn contains(&self, key: usize) -> bool {
        self.calls.iter().any(|call| call.key == key)
    }

    /// The innermost open call's data.
    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.calls.last_mut().map(|call| &mut call.data)
    }

    /// Leaves out the open calls `keep` refuses.
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        let mut keep = keep;
        self.calls.retain(|call| keep(&call.data));
    }

    pub fn clear(&mut self) {
        self.calls.clear();
    }

    /// The open calls of `key`, innermost first.
    pub fn innermost_of(&self, key: usize) -> impl Iterator<Item = &T> {
        self.calls
            .iter()
            .rev()
            .filter(move |call| call.key == key)
            .map(|call| &call.data)
    }

    /// Closes the calls on top that are known to have ended.
    fn close_ended(&mut self, close: &mut impl FnMut(T, u64, Option<&mut T>)) {
        while let Some(ended_at) = self.calls.last().and_then(|call| call.ended_at) {
            let Some(call) = self.calls.pop() else { break };
            close(
                call.data,
                ended_at,
                self.calls.last_mut().map(|caller| &mut caller.data),
            );
        }
    }

    /// A call of `key` begins; its data is made from its caller's.
    pub fn enter(
        &mut self,
        key: usize,
        constructor: bool,
        make: impl FnOnce(Option<&T>) -> T,
        close: &mut impl FnMut(T, u64, Option<&mut T>),
    ) {
        self.close_ended(close);
        let data = make(self.calls.last().map(|caller| &caller.data));
        self.calls.push(Open {
            key,
            before_init: constructor,
            ended_at: None,
            data,
        });
    }

    /// A handler of the innermost open call of `key` caught a throwable: the calls open above it
    /// ended (at `now`, or when known to have ended).
    pub fn unwind_to(
        &mut self,
        key: usize,
        now: u64,
        close: &mut impl FnMut(T, u64, Option<&mut T>),
    ) {
        let Some(at) = self.calls.iter().rposition(|call| call.key == key) else {
            return;
        };
        while self.calls.len() > at + 1 {
            let Some(call) = self.calls.pop() else { break };
            let end = call.ended_at.unwrap_or(now);
            close(
                call.data,
                end,
                self.calls.last_mut().map(|caller| &mut caller.data),
            );
        }
    }

    /// The innermost open constructor of `key` has initialized `this`.
    pub fn initialized(&mut self, key: usize) {
        if let Some(call) = self.calls.iter_mut().rev().find(|call| call.key == key) {
            call.before_init = false;
        }
    }

    /// The innermost open call of `key` ends at `now` (by a throwable when `thrown`), and every
    /// call above it with it; false when no call of `key` is open (calls known to have ended are
    /// closed all the same).
    pub fn exit(
        &mut self,
        key: usize,
        thrown: bool,
        now: u64,
        close: &mut impl FnMut(T, u64, Option<&mut T>),
    ) -> bool {
        let Some(at) = self.calls.iter().rposition(|call| call.key == key) else {
            self.close_ended(close);
            return false;
        };
        while self.calls.len() > at {
            let Some(call) = self.calls.pop() else { break };
            let end = call.ended_at.unwrap_or(now);
            close(
                call.data,
                end,
                self.calls.last_mut().map(|caller| &mut caller.data),
            );
        }
        if thrown {
            if let Some(caller) = self.calls.last_mut() {
                if caller.before_init && caller.ended_at.is_none() {
                    caller.ended_at = Some(now);
                }
            }
        }
        true
    }
}

/// One instrumented method.
pub struct Site {
    /// Its name and descriptor.
    pub name: String,
    pub descriptor: String,
    /// Its jmethodID once known, 0 before.
    method: AtomicUsize,
    /// Where the rewriter's handlers begin in its code (0 before it is rewritten): a throwable
    /// caught from there on is only being reported and thrown on.
    handlers_from: AtomicU32,
}

impl Site {
    pub fn method(&self) -> Option<jmethodID> {
        match self.method.load(Ordering::Acquire) {
            0 => None,
            method => Some(method as jmethodID),
        }
    }
}

const SEGMENT_SIZE: usize = 4096;
const SEGMENTS: usize = 1024;

/// A segment of a table, each entry set once.
type Segment<T> = Box<[OnceLock<T>]>;

/// Numbered entries (sites, call sites), append-only and read without a lock: segments of
/// 4,096 made as needed, at most 4,194,304 entries in a run (past that, classes are no longer
/// instrumented).
struct Table<T> {
    segments: Box<[OnceLock<Segment<T>>]>,
    /// How many are numbered (only under `Keys`' lock).
    count: AtomicU32,
}

type Sites = Table<Site>;

impl<T> Table<T> {
    fn new() -> Table<T> {
        Table {
            segments: (0..SEGMENTS).map(|_| OnceLock::new()).collect(),
            count: AtomicU32::new(0),
        }
    }

    fn get(&self, id: u32) -> Option<&T> {
        let id = id as usize;
        self.segments
            .get(id / SEGMENT_SIZE)?
            .get()?
            .get(id % SEGMENT_SIZE)?
            .get()
    }

    /// Numbers a new entry; called with `Keys` locked, so one caller at a time.
    fn push(&self, site: T) -> Option<u32> {
        let id = self.count.load(Ordering::Acquire) as usize;
        let segment = self.segments.get(id / SEGMENT_SIZE)?.get_or_init(|| {
            (0..SEGMENT_SIZE)
                .map(|_| OnceLock::new())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        let _ = segment[id % SEGMENT_SIZE].set(site);
        self.count.store(id as u32 + 1, Ordering::Release);
        Some(id as u32)
    }
}

/// A call a rewritten method makes into a class the filters leave out (callsites=y): what it
/// calls, as its instruction names it.
pub struct CallSiteTarget {
    /// The called method's class (binary name), name and descriptor.
    pub class: String,
    pub name: String,
    pub descriptor: String,
}

#[derive(Default)]
struct Keys {
    /// (internal class name, method name, descriptor) → site.
    sites: HashMap<(String, String, String), u32>,
    /// (caller's site, the call's offset) → call site.
    call_sites: HashMap<(u32, u16), u32>,
    /// Internal class names → their sites whose jmethodID is not known yet.
    unresolved: HashMap<String, Vec<u32>>,
}

/// Classes never instrumented, whatever the filters say: what the agent's hooks and counters
/// run on, so that rewritten code can never call itself through them. A name ending in `.` is
/// a package and its subpackages, any other a class (with its nested classes).
/// - the agent's own hook classes and the application API it reads (`dev.openprof.Context`);
/// - the JVM's method handle and VarHandle machinery, through which coverage's atomic counters,
///   lambdas and string concatenation link and run, and its continuation internals (lambda
///   forms, hidden frames, stack switching);
/// - `jdk.internal.` (Unsafe, index checks, reflection, class loading support) and `sun.misc.`;
/// - the atomics, and the few `java.lang`/`java.util` classes the VarHandle and Unsafe paths
///   call (`Object`, `Class`, `Objects`): coverage counts through Unsafe, and the JDK code the
///   agent's own Java calls run leans on them.
///
/// Classes loaded while the agent runs Java code of its own are left out too (see
/// `CallHooks::own_classes`), which covers whatever else the agent's calls reach.
const NEVER: &[&str] = &[
    "openprof.",
    "dev.openprof.",
    "java.lang.invoke.",
    "sun.invoke.",
    "jdk.internal.",
    "sun.misc.",
    "java.util.concurrent.atomic.",
    "java.lang.Object",
    "java.lang.Class",
    "java.util.Objects",
];

/// Says once per run that a filter lets the JDK's classes through only because no pattern
/// matches them (the trace format's rule), which users who write `+com.acme*` rarely mean:
/// those classes are rewritten and their calls traced too, at a cost.
fn warn_if_the_jdk_is_let_through(filters: &FilterBlock) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let let_through = filters.jdk_included_by_default();
    if let Some(example) = let_through.first() {
        if !WARNED.swap(true, Ordering::AcqRel) {
            eprintln!(
                "openprof WARNING: the filter ({}) matches no pattern for the JDK's classes \
                 ({example} among them), and a class no pattern matches is included: they are \
                 traced too. End the filter with ';-*' (a filter file with 'exclude *') to \
                 trace only the classes it names",
                filters.inline()
            );
        }
    }
}

/// Whether a class (binary name) is one [`NEVER`] keeps from the rewriter.
fn never_instrumented(binary_name: &str) -> bool {
    NEVER.iter().any(|never| {
        if never.ends_with('.') {
            binary_name.starts_with(never)
        } else {
            binary_name
                .strip_prefix(never)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('$'))
        }
    })
}

/// How many loaded classes one RetransformClasses call is given.
const RETRANSFORM_BATCH: usize = 64;

pub struct CallHooks {
    /// Our own environment: retransformation and the ClassFileLoadHook.
    jvmti: Jvmti,
    filters: RwLock<FilterBlock>,
    ways: Ways,
    /// Line coverage's counters, once the hook class is defined.
    coverage: OnceLock<Coverage>,
    sites: Sites,
    call_sites: Table<CallSiteTarget>,
    keys: Mutex<Keys>,
    /// jmethodID → where the rewriter's handlers begin in its code.
    handlers: RwLock<HashMap<usize, u32>>,
    listener: OnceLock<&'static dyn CallListener>,
    started: AtomicBool,
    /// Classes (binary names) first loaded while this agent ran Java code of its own (a hook's
    /// work, a counter made, a class found): what its own work runs on, never instrumented.
    own_classes: Mutex<std::collections::HashSet<String>>,
    /// The hook class's module and the modules made to read it (global references), and
    /// java.lang.Module's `name` field.
    hook_module: OnceLock<usize>,
    read_modules: Mutex<Vec<usize>>,
    module_name: OnceLock<usize>,
    /// Classes rewritten, methods instrumented, methods that could not be (with the first
    /// reasons, for the log).
    classes: AtomicU64,
    methods: AtomicU64,
    refused: AtomicU64,
    refusals: Mutex<Vec<String>>,
}

// SAFETY: the raw handles held (JVMTI environment, global references, method ids as usize)
// are valid on every thread; all mutable state is behind locks or atomics.
unsafe impl Send for CallHooks {}
// SAFETY: as above.
unsafe impl Sync for CallHooks {}

static HOOKS: OnceLock<CallHooks> = OnceLock::new();

/// What the rewritten classes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ways {
    /// Report their calls (cpu=times).
    pub calls: bool,
    /// Instance methods pass `this` (format=x's object ids).
    pub receiver: bool,
    /// Count their basic blocks (coverage=y).
    pub coverage: bool,
    /// Report their calls into classes the filters leave out (callsites=y).
    pub call_sites: bool,
}

impl CallHooks {
    /// Installs the call hooks' JVMTI environment (once per process). An error when this JVM
    /// can't retransform classes: the caller then falls back to JVMTI's method events.
    pub fn install(
        vm: *mut JavaVM,
        filters: FilterBlock,
        ways: Ways,
    ) -> Result<&'static CallHooks, String> {
        if let Some(hooks) = HOOKS.get() {
            return Ok(hooks);
        }
        let jvmti = Jvmti::from_vm(vm).ok_or("no JVMTI environment for call tracing")?;
        let potential = jvmti
            .potential_capabilities()
            .map_err(|error| format!("can't ask the JVM what it can do: {error}"))?;
        if !potential.can_retransform_classes() {
            let _ = jvmti.dispose();
            return Err("this JVM can't retransform classes".into());
        }
        let mut capabilities = jvmtiCapabilities::default();
        capabilities.set_can_retransform_classes(true);
        capabilities.set_can_retransform_any_class(potential.can_retransform_any_class());
        if let Err(error) = jvmti.add_capabilities(&capabilities) {
            let _ = jvmti.dispose();
            return Err(format!("call tracing: {error}"));
        }
        warn_if_the_jdk_is_let_through(&filters);
        let mut callbacks = jvmtiEventCallbacks::default();
        callbacks.ClassFileLoadHook = Some(on_class_file_load_hook);
        jvmti
            .set_event_callbacks_sized(&callbacks, event_callbacks_size_for_feature(11))
            .map_err(|error| error.to_string())?;
        let hooks = CallHooks {
            jvmti,
            filters: RwLock::new(filters),
            ways,
            coverage: OnceLock::new(),
            sites: Sites::new(),
            call_sites: Table::new(),
            keys: Mutex::new(Keys::default()),
            handlers: RwLock::new(HashMap::new()),
            listener: OnceLock::new(),
            started: AtomicBool::new(false),
            own_classes: Mutex::default(),
            hook_module: OnceLock::new(),
            read_modules: Mutex::new(Vec::new()),
            module_name: OnceLock::new(),
            classes: AtomicU64::new(0),
            methods: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refusals: Mutex::new(Vec::new()),
        };
        Ok(HOOKS.get_or_init(|| hooks))
    }

    /// In the live phase (VMInit, or at once when attached): defines the hook class and binds
    /// its natives, makes the modules read it, turns the load hook on and retransforms the
    /// loaded classes the filters let through. From then on `listener` hears every call.
    /// Returns what was done, in words.
    pub fn start(
        &self,
        jni: *mut JNIEnv,
        listener: &'static dyn CallListener,
    ) -> Result<String, String> {
        let _ = self.listener.set(listener);
        if self.started.load(Ordering::Acquire) {
            return Ok(self.describe());
        }
        let jni = Jni(jni);
        let hook = jni
            .define_class(
                CALL_HOOK_CLASS,
                std::ptr::null_mut(),
                &call_hook_class_file(),
            )
            .map_err(|_| "can't define the call hook class".to_string())?;
        let natives = natives();
        let table: Vec<(&CStr, &CStr, *mut c_void)> = natives
            .iter()
            .map(|(name, descriptor, function)| (name.as_c_str(), descriptor.as_c_str(), *function))
            .collect();
        jni.register_natives(hook, &table)
            .map_err(|_| "can't bind the call hook's natives".to_string())?;
        let module = jni
            .module_of(hook)
            .map_err(|_| "the call hook class has no module".to_string())?;
        let _ = self.hook_module.set(jni.new_global_ref(module) as usize);
        // Code in named modules (java.base) may call the hook only if its module reads the
        // hook's (the bootstrap loader's unnamed module). Modules defined later are made to
        // read it when a class of theirs is prepared.
        // (No lock is held meanwhile: adding a read runs Java code.)
        let reading = jni.make_modules_read(self.jvmti, module);
        lock(&self.read_modules).extend(reading);
        if let Ok(module_class) = jni.find_class("java/lang/Module") {
            if let Ok(field) = jni.field_id(module_class, "name", "Ljava/lang/String;") {
                let _ = self.module_name.set(field as usize);
            }
            jni.delete_local_ref(module_class);
        }
        jni.delete_local_ref(module);
        if self.ways.coverage {
            let coverage = Coverage::new(self.jvmti, jni, hook)?;
            let _ = self.coverage.set(coverage);
        }
        self.started.store(true, Ordering::Release);
        self.jvmti
            .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true)
            .map_err(|error| format!("can't turn the class file hook on: {error}"))?;
        self.retransform_loaded(jni, |_| true);
        Ok(self.describe())
    }

    /// What is instrumented, in words.
    pub fn describe(&self) -> String {
        let refused = self.refused.load(Ordering::Relaxed);
        let what = match (self.ways.calls, self.ways.coverage) {
            (true, true) => "cpu=times and coverage=y instrument",
            (true, false) => "cpu=times instruments",
            _ => "coverage=y instruments",
        };
        let mut text = format!(
            "{what} {} methods of {} classes",
            self.methods.load(Ordering::Relaxed),
            self.classes.load(Ordering::Relaxed)
        );
        if refused > 0 {
            text.push_str(&format!(
                "; {refused} methods could not be instrumented (first: {})",
                lock(&self.refusals).first().cloned().unwrap_or_default()
            ));
        }
        text
    }

    pub fn site(&self, id: u32) -> Option<&Site> {
        self.sites.get(id)
    }

    /// What a call site calls.
    pub fn call_site(&self, id: u32) -> Option<&CallSiteTarget> {
        self.call_sites.get(id)
    }

    /// Line coverage's counters, when asked for.
    pub fn coverage(&self) -> Option<&Coverage> {
        self.coverage.get()
    }

    /// Whether `location` (a bytecode index) in `method` is in one of the rewriter's handlers,
    /// which catch a throwable only to report it and throw it on: JVMTI's exception events
    /// there are not the program's.
    pub fn in_handler(&self, method: jmethodID, location: i64) -> bool {
        let handlers = self
            .handlers
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        handlers
            .get(&(method as usize))
            .is_some_and(|&from| from > 0 && location >= i64::from(from))
    }

    /// Notes a site's jmethodID (and where its handlers are, by method).
    fn learn(&self, site: &Site, method: jmethodID) {
        site.method.store(method as usize, Ordering::Release);
        let from = site.handlers_from.load(Ordering::Acquire);
        self.handlers
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(method as usize, from);
    }

    /// How many sites are numbered.
    pub fn site_count(&self) -> u32 {
        self.sites.count.load(Ordering::Acquire)
    }

    /// Whether the calls of this class (binary name) are instrumented.
    fn wants(&self, binary_name: &str) -> bool {
        !never_instrumented(binary_name)
            && !lock(&self.own_classes).contains(binary_name)
            && self
                .filters
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .includes(binary_name)
    }

    /// Replaces the filters; the loaded classes whose inclusion changed are retransformed (to
    /// their instrumented or their original code). Returns how many were.
    pub fn set_filters(&self, jni: *mut JNIEnv, filters: FilterBlock) -> usize {
        warn_if_the_jdk_is_let_through(&filters);
        let before = std::mem::replace(
            &mut *self
                .filters
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            filters,
        );
        if !self.started.load(Ordering::Acquire) {
            return 0;
        }
        let changed = |binary: &str| {
            let never = never_instrumented(binary) || lock(&self.own_classes).contains(binary);
            !never && before.includes(binary) != self.wants(binary)
        };
        self.retransform_loaded(Jni(jni), changed)
    }

    /// Retransforms the loaded classes `chosen` picks (by binary name) among those that can be;
    /// returns how many were.
    fn retransform_loaded(&self, jni: Jni, chosen: impl Fn(&str) -> bool) -> usize {
        let classes = self.jvmti.loaded_classes().unwrap_or_default();
        let mut picked: Vec<(jclass, String)> = Vec::new();
        for class in classes {
            let signature = self.jvmti.class_signature(class).unwrap_or_default();
            let binary = class_name_from_signature(&signature);
            let keep = signature.starts_with('L')
                && (chosen(&binary))
                && self.jvmti.is_modifiable_class(class);
            if keep {
                picked.push((class, signature));
            } else {
                jni.delete_local_ref(class);
            }
        }
        let mut done = 0;
        for batch in picked.chunks(RETRANSFORM_BATCH) {
            let classes: Vec<jclass> = batch.iter().map(|(class, _)| *class).collect();
            if self.jvmti.retransform_classes(&classes).is_ok() {
                done += classes.len();
            } else {
                // One class of the batch failed it: each on its own.
                for &class in &classes {
                    if self.jvmti.retransform_classes(&[class]).is_ok() {
                        done += 1;
                    }
                }
            }
            for (class, signature) in batch {
                self.resolve(*class, &internal_name(signature));
                jni.delete_local_ref(*class);
            }
        }
        done
    }

    /// ClassPrepare: the class's sites get their jmethodIDs, and a class of a named module the
    /// hook's module was not read by yet gets that read added, before any of its code runs.
    pub fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        if !self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(signature) = self.jvmti.class_signature(class) else {
            return;
        };
        let internal = internal_name(&signature);
        if !lock(&self.keys).unresolved.contains_key(&internal) {
            return;
        }
        let jni = Jni(jni);
        self.make_read(jni, class);
        self.resolve(class, &internal);
    }

    /// The class's sites get their jmethodIDs.
    fn resolve(&self, class: jclass, internal: &str) {
        let Some(sites) = lock(&self.keys).unresolved.remove(internal) else {
            return;
        };
        let methods = self.jvmti.class_methods(class).unwrap_or_default();
        let mut left = Vec::new();
        for site_id in sites {
            let Some(site) = self.sites.get(site_id) else {
                continue;
            };
            let found = methods.iter().find(|&&method| {
                self.jvmti
                    .method_name(method)
                    .is_ok_and(|(name, descriptor)| {
                        name == site.name && descriptor == site.descriptor
                    })
            });
            match found {
                Some(&method) => self.learn(site, method),
                None => left.push(site_id),
            }
        }
        if !left.is_empty() {
            lock(&self.keys)
                .unresolved
                .entry(internal.to_string())
                .or_default()
                .extend(left);
        }
    }

    /// Adds the read of the hook's module to the class's module, if it is named and does not
    /// have it yet.
    fn make_read(&self, jni: Jni, class: jclass) {
        let (Some(&hook_module), Some(&name_field)) =
            (self.hook_module.get(), self.module_name.get())
        else {
            return;
        };
        let Ok(module) = jni.module_of(class) else {
            return;
        };
        let name = jni
            .field(module, name_field as crate::jvmti::jfieldID, b'L')
            .reference();
        let named = !name.is_null();
        jni.delete_local_ref(name);
        let known = !named
            || lock(&self.read_modules)
                .iter()
                .any(|&known| jni.is_same_object(known as jobject, module));
        // Adding the read runs Java code (which may prepare classes): no lock is held.
        if !known
            && self
                .jvmti
                .add_module_reads(module, hook_module as jobject)
                .is_ok()
        {
            let global = jni.new_global_ref(module) as usize;
            lock(&self.read_modules).push(global);
        }
        jni.delete_local_ref(module);
    }

    /// The ClassFileLoadHook's work: the class with every method that has code instrumented,
    /// if the filters let it through.
    fn transform(&self, jni: Jni, internal: &str, bytes: &[u8]) -> Option<Vec<u8>> {
        let binary = internal.replace('/', ".");
        if !self.wants(&binary) {
            return None;
        }
        let declared = declared_methods(bytes).ok()?;
        let calls = if self.ways.call_sites {
            call_sites(bytes).unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut methods = Vec::new();
        {
            let mut keys = lock(&self.keys);
            for method in declared.into_iter().filter(|method| method.has_code) {
                let key = (
                    internal.to_string(),
                    method.name.clone(),
                    method.descriptor.clone(),
                );
                let site = match keys.sites.get(&key) {
                    Some(&site) => site,
                    None => {
                        let site = self.sites.push(Site {
                            name: method.name.clone(),
                            descriptor: method.descriptor.clone(),
                            method: AtomicUsize::new(0),
                            handlers_from: AtomicU32::new(0),
                        })?;
                        keys.sites.insert(key, site);
                        site
                    }
                };
                if self
                    .sites
                    .get(site)
                    .is_some_and(|site| site.method().is_none())
                {
                    keys.unresolved
                        .entry(internal.to_string())
                        .or_default()
                        .push(site);
                }
                // Its calls into classes left out (of its own class, and of classes traced,
                // the callee's entry says it all); of those, HTTP requests sent carry the
                // call's context to the other JVM.
                let mut call_sites = Vec::new();
                let mut outgoing = Vec::new();
                for call in calls.iter().filter(|call| {
                    call.caller.0 == method.name && call.caller.1 == method.descriptor
                }) {
                    let callee = call.class.replace('/', ".");
                    if call.class == internal || self.wants(&callee) {
                        continue;
                    }
                    let number = match keys.call_sites.get(&(site, call.offset)) {
                        Some(&number) => number,
                        None => {
                            let number = self.call_sites.push(CallSiteTarget {
                                class: callee,
                                name: call.name.clone(),
                                descriptor: call.descriptor.clone(),
                            })?;
                            keys.call_sites.insert((site, call.offset), number);
                            number
                        }
                    };
                    call_sites.push((call.offset, number as i32));
                    if sends_a_request(&call.class, &call.name, &call.descriptor) {
                        outgoing.push(call.offset);
                    }
                }
                let incoming = self.ways.call_sites
                    && method.access & openprof_classfile::access::STATIC == 0
                    && method.name == HTTP_HANDLER.0
                    && method.descriptor == HTTP_HANDLER.1;
                methods.push(MethodPlan {
                    name: method.name,
                    descriptor: method.descriptor,
                    site: site as i32,
                    parameters: Vec::new(),
                    call_sites,
                    outgoing,
                    incoming,
                });
            }
            if let Some(pending) = keys.unresolved.get_mut(internal) {
                pending.sort_unstable();
                pending.dedup();
            }
        }
        if methods.is_empty() {
            return None;
        }
        let mut plan = Plan {
            hook_class: CALL_HOOK_CLASS.to_string(),
            hooks: if self.ways.calls {
                HookKind::Calls {
                    receiver: self.ways.receiver,
                }
            } else {
                HookKind::Counters
            },
            methods,
            coverage: None,
        };
        let planned = plan.methods.len() as u64;
        let instrumented = match self.coverage.get() {
            Some(coverage) => coverage.instrumented(jni, |slot| {
                plan.coverage = Some(slot);
                instrument_each(bytes, &plan)
            }),
            None => instrument_each(bytes, &plan),
        };
        match instrumented {
            Ok(instrumented) => {
                let (rewritten, refused) = (instrumented.class_file, instrumented.refused);
                for (site, handlers_from) in instrumented.handlers {
                    if let Some(site) = self.sites.get(site as u32) {
                        site.handlers_from
                            .store(u32::from(handlers_from), Ordering::Release);
                    }
                }
                if !refused.is_empty() {
                    self.refused
                        .fetch_add(refused.len() as u64, Ordering::Relaxed);
                    let mut refusals = lock(&self.refusals);
                    for (method, error) in
                        refused.iter().take(8usize.saturating_sub(refusals.len()))
                    {
                        refusals.push(format!(
                            "{binary}.{}{}: {error}",
                            method.name, method.descriptor
                        ));
                    }
                }
                if rewritten.is_some() {
                    self.classes.fetch_add(1, Ordering::Relaxed);
                    self.methods
                        .fetch_add(planned - refused.len() as u64, Ordering::Relaxed);
                }
                rewritten
            }
            Err(error) => {
                self.refused.fetch_add(planned, Ordering::Relaxed);
                let mut refusals = lock(&self.refusals);
                if refusals.len() < 8 {
                    refusals.push(format!("{binary}: {error}"));
                }
                None
            }
        }
    }

    /// A call's jmethodID from the calling thread's stack (the instrumented method is just
    /// under the hook's native frame), for a site whose class was not prepared or
    /// retransformed yet when the call came.
    pub fn method_on_stack(&self, site: u32) -> Option<jmethodID> {
        let site = self.sites.get(site)?;
        if let Some(method) = site.method() {
            return Some(method);
        }
        // A null thread is the current one.
        let frames = self.jvmti.stack_trace(std::ptr::null_mut(), 2).ok()?;
        let method = frames.get(1)?.method;
        let (name, descriptor) = self.jvmti.method_name(method).ok()?;
        if name != site.name || descriptor != site.descriptor {
            return None;
        }
        self.learn(site, method);
        Some(method)
    }
}

/// The header an HTTP request carries the calling context in (callsites=y).
pub const CONTEXT_HEADER: &str = "X-Openprof-Context";

/// The method of the JDK's HTTP server that handles a request
/// (`com.sun.net.httpserver.HttpHandler.handle`): a traced implementation reads the caller's
/// context from the request at its entry.
const HTTP_HANDLER: (&str, &str) = ("handle", "(Lcom/sun/net/httpserver/HttpExchange;)V");

/// Whether a call (class, name, descriptor) sends an HTTP request of the JDK's client, taking
/// no argument: its receiver, a `URLConnection`, gets the context header first.
fn sends_a_request(class: &str, name: &str, descriptor: &str) -> bool {
    matches!(
        class,
        "java/net/URLConnection"
            | "java/net/HttpURLConnection"
            | "javax/net/ssl/HttpsURLConnection"
            | "sun/net/www/protocol/http/HttpURLConnection"
    ) && matches!(
        name,
        "connect" | "getInputStream" | "getOutputStream" | "getResponseCode"
    ) && descriptor.starts_with("()")
}

/// `java/util/HashMap` from `Ljava/util/HashMap;`.
fn internal_name(signature: &str) -> String {
    signature
        .strip_prefix('L')
        .and_then(|name| name.strip_suffix(';'))
        .unwrap_or(signature)
        .to_string()
}

/// Runs a hook's body with the listener, as the agent's own work, unless the agent is off,
/// this is the agent's own thread or the VM is dying, or this thread is inside the agent's work
/// already (a hook, or Java code the agent runs, reached rewritten code); panics stay here.
fn hook(what: &str, body: impl FnOnce(&'static dyn CallListener)) {
    callback(what, Admit::Profiling, || {
        let Some(listener) = HOOKS.get().and_then(|hooks| hooks.listener.get()) else {
            return;
        };
        agent_work(|| body(*listener));
    });
}

unsafe extern "system" fn hook_enter(jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("CallHook.enter", |listener| {
        let constructor = HOOKS
            .get()
            .and_then(|hooks| hooks.site(site as u32))
            .is_some_and(|site| site.name == "<init>");
        listener.entered(Jni(jni), site as u32, std::ptr::null_mut(), constructor)
    });
}

unsafe extern "system" fn hook_called(jni: *mut JNIEnv, _class: jclass, call_site: jint) {
    hook("CallHook.called", |listener| {
        listener.called(Jni(jni), call_site as u32)
    });
}

unsafe extern "system" fn hook_returned(jni: *mut JNIEnv, _class: jclass, call_site: jint) {
    hook("CallHook.returned", |listener| {
        listener.returned(Jni(jni), call_site as u32)
    });
}

unsafe extern "system" fn hook_caught(jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("CallHook.caught", |listener| {
        listener.caught(Jni(jni), site as u32)
    });
}

unsafe extern "system" fn hook_outgoing(
    jni: *mut JNIEnv,
    _class: jclass,
    connection: jobject,
    call_site: jint,
) {
    hook("CallHook.outgoing", |listener| {
        listener.outgoing(Jni(jni), connection, call_site as u32)
    });
}

unsafe extern "system" fn hook_incoming(
    jni: *mut JNIEnv,
    _class: jclass,
    exchange: jobject,
    site: jint,
) {
    hook("CallHook.incoming", |listener| {
        listener.incoming(Jni(jni), exchange, site as u32)
    });
}

unsafe extern "system" fn hook_initialized(jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("CallHook.initialized", |listener| {
        listener.initialized(Jni(jni), site as u32)
    });
}

unsafe extern "system" fn hook_enter_this(
    jni: *mut JNIEnv,
    _class: jclass,
    site: jint,
    receiver: jobject,
) {
    hook("CallHook.enterThis", |listener| {
        listener.entered(Jni(jni), site as u32, receiver, false)
    });
}

unsafe extern "system" fn hook_exit(jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("CallHook.exit", |listener| {
        listener.exited(Jni(jni), site as u32, false)
    });
}

unsafe extern "system" fn hook_exit_thrown(jni: *mut JNIEnv, _class: jclass, site: jint) {
    hook("CallHook.exitThrown", |listener| {
        listener.exited(Jni(jni), site as u32, true)
    });
}

/// The natives of CALL_HOOK_METHODS, in its order, as (name, descriptor, function).
fn natives() -> Vec<(CString, CString, *mut c_void)> {
    let functions: [*mut c_void; 10] = [
        hook_enter as *mut c_void,
        hook_enter_this as *mut c_void,
        hook_exit as *mut c_void,
        hook_exit_thrown as *mut c_void,
        hook_initialized as *mut c_void,
        hook_called as *mut c_void,
        hook_returned as *mut c_void,
        hook_caught as *mut c_void,
        hook_outgoing as *mut c_void,
        hook_incoming as *mut c_void,
    ];
    CALL_HOOK_METHODS
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

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn on_class_file_load_hook(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    _class_being_redefined: jclass,
    _loader: jobject,
    name: *const c_char,
    _protection_domain: jobject,
    class_data_len: jint,
    class_data: *const u8,
    new_class_data_len: *mut jint,
    new_class_data: *mut *mut u8,
) {
    guarded("ClassFileLoadHook (call tracing)", || {
        let Some(hooks) = HOOKS.get() else { return };
        if !hooks.started.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: these are the hook's own arguments, as JVMTI passed them.
        unsafe {
            hooks.jvmti.replace_class_file(
                name,
                class_data_len,
                class_data,
                new_class_data_len,
                new_class_data,
                |name, bytes| {
                    if in_agent_work() {
                        // Loaded by the agent's own work: part of what its hooks run on.
                        lock(&hooks.own_classes).insert(name.replace('/', "."));
                        return None;
                    }
                    hooks.transform(Jni(jni), name, bytes)
                },
            );
        }
    });
}

/// A thread's CPU time as the hooks read it. The kernel's per-thread CPU clock costs a system
/// call (about a microsecond on this project's machines, and perf_events' user-space time is
/// not offered for it), so it is read at most once per `CPU_CLOCK_RESOLUTION_NS` of wall
/// time; in between, the time is the last reading plus the wall time since (a vDSO read), as
/// if the thread ran all along. A call's CPU time is therefore exact to within the resolution:
/// a wait or preemption shorter than that between two hooks counts as CPU. The time never
/// goes backwards.
#[derive(Default)]
pub struct CpuClock {
    anchor_wall: u64,
    anchor_cpu: u64,
    last: u64,
}

/// See [`CpuClock`].
pub const CPU_CLOCK_RESOLUTION_NS: u64 = 20_000;

impl CpuClock {
    /// The thread's CPU time now, in nanoseconds.
    pub fn now(&mut self) -> u64 {
        self.at(
            crate::signals::monotonic_nanos(),
            crate::signals::thread_cpu_nanos,
        )
    }

    /// The CPU time at wall time `wall`, reading the CPU clock with `cpu` if the last reading
    /// is too old.
    fn at(&mut self, wall: u64, cpu: impl FnOnce() -> u64) -> u64 {
        let estimate = if self.anchor_wall == 0
            || wall.saturating_sub(self.anchor_wall) >= CPU_CLOCK_RESOLUTION_NS
        {
            self.anchor_wall = wall;
            self.anchor_cpu = cpu();
            self.anchor_cpu
        } else {
            self.anchor_cpu + (wall - self.anchor_wall)
        };
        self.last = self.last.max(estimate);
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_clock_reads_the_kernel_once_per_resolution_and_never_goes_back() {
        let mut clock = CpuClock::default();
        let mut reads = 0;
        let mut read = |value: u64| {
            reads += 1;
            value
        };
        assert_eq!(clock.at(1_000_000, || read(500)), 500);
        // Within the resolution: the wall time since, as CPU.
        assert_eq!(clock.at(1_005_000, || read(9)), 5_500);
        assert_eq!(clock.at(1_019_999, || read(9)), 20_499);
        // Past it: the kernel again. The thread slept (CPU 10,000 only): the clock holds.
        assert_eq!(clock.at(1_030_000, || read(10_000)), 20_499);
        assert_eq!(clock.at(1_031_000, || read(9)), 20_499);
        assert_eq!(clock.at(1_050_000, || read(30_000)), 30_000);
        assert_eq!(reads, 3);
    }

    /// (key, end) of the calls closed, in order.
    fn closer(closed: &mut Vec<(usize, u64)>) -> impl FnMut(usize, u64, Option<&mut usize>) + '_ {
        |key, end, _caller| closed.push((key, end))
    }

    #[test]
    fn a_throwable_out_of_a_super_call_ends_its_constructor_at_the_next_hook() {
        let mut closed = Vec::new();
        let mut calls: OpenCalls<usize> = OpenCalls::default();
        // main { new Sub(-1): Sub's super(...) runs Base's constructor, which throws }
        calls.enter(1, false, |_| 1, &mut closer(&mut closed));
        calls.enter(2, true, |_| 2, &mut closer(&mut closed));
        calls.enter(3, true, |_| 3, &mut closer(&mut closed));
        assert!(calls.exit(3, true, 30, &mut closer(&mut closed)));
        // Sub's exit never comes; main's next call closes it, at Base's throw.
        calls.enter(4, false, |_| 4, &mut closer(&mut closed));
        assert_eq!(closed, [(3, 30), (2, 30)]);
        assert!(calls.exit(4, false, 40, &mut closer(&mut closed)));
        assert!(calls.exit(1, false, 50, &mut closer(&mut closed)));
        assert_eq!(closed, [(3, 30), (2, 30), (4, 40), (1, 50)]);
        assert!(calls.is_empty());
    }

    #[test]
    fn a_constructor_whose_arguments_throw_is_closed_once_by_its_own_exit() {
        let mut closed = Vec::new();
        let mut calls: OpenCalls<usize> = OpenCalls::default();
        // Outer(check()) { this(...) } where check throws: check's exit marks Outer ended,
        // Outer's own exitThrown closes it, and the outer constructor of the same key that
        // is open below is left alone.
        calls.enter(7, true, |_| 1, &mut closer(&mut closed));
        calls.initialized(7);
        calls.enter(7, true, |_| 2, &mut closer(&mut closed));
        calls.enter(9, false, |_| 3, &mut closer(&mut closed));
        assert!(calls.exit(9, true, 10, &mut closer(&mut closed)));
        assert!(calls.exit(7, true, 12, &mut closer(&mut closed)));
        assert_eq!(closed, [(3, 10), (2, 10)]);
        // The first constructor (initialized) is still open; a call after it stays under it.
        calls.enter(5, false, |_| 4, &mut closer(&mut closed));
        assert!(calls.exit(5, false, 20, &mut closer(&mut closed)));
        assert!(calls.exit(7, false, 30, &mut closer(&mut closed)));
        assert_eq!(closed, [(3, 10), (2, 10), (4, 20), (1, 30)]);
    }

    #[test]
    fn internal_names_come_from_signatures() {
        assert_eq!(internal_name("Ljava/util/HashMap;"), "java/util/HashMap");
        assert_eq!(internal_name("[I"), "[I");
    }

    #[test]
    fn the_jvms_own_machinery_is_never_instrumented() {
        for name in [
            "openprof.CallHook",
            "java.lang.invoke.LambdaForm",
            "jdk.internal.vm.Continuation",
            "jdk.internal.misc.Unsafe",
            "java.util.concurrent.atomic.AtomicLongArray",
            "java.lang.Object",
            "java.lang.Class$Atomic",
            "dev.openprof.Context",
        ] {
            assert!(never_instrumented(name), "{name}");
        }
        for name in [
            "java.util.HashMap",
            "java.lang.ClassLoader",
            "java.lang.ObjectStreamException",
            "java.util.concurrent.ConcurrentHashMap",
        ] {
            assert!(!never_instrumented(name), "{name}");
        }
    }
}
