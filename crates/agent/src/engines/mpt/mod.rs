//! Method parameter tracing in the agent: which methods to instrument and planning their
//! instrumentation (the class rewriter run from a ClassFileLoadHook of our own JVMTI
//! environment), what each traced call reports, and the engine that starts it and writes its
//! tables. The natives the instrumented code calls and the ClassFileLoadHook are in `hooks`;
//! the modifier chains in `chain`. (The planning and the per-call state of one engine read
//! together; at about 1,200 lines the file is kept whole for that.)
//!
//! Instrumented methods call `openprof.MptHook` (defined in the bootstrap loader, so every
//! class sees it): `begin(site, this)`, `arg(index, value)` for each traced parameter,
//! `enter()`, and `exit(site)` or `exitThrown(site)`. A site is one instrumented method; which
//! specifications a call is traced by depends on the receiver's class (the variants), decided
//! once per receiver class and site.

pub mod chain;
mod hooks;

use crate::error::AgentResult;
use crate::sync::lock;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, TryLockError};
use std::time::{Duration, Instant};

use jvmti_bindings::sys::jvmti::{
    event_callbacks_size_for_feature, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK,
};
use openprof_classfile::{MethodPlan, Plan};
use openprof_format::java_names::class_name_from_signature;
use openprof_format::mpt::{ClassShape, MethodShape, MptSpec};
use openprof_format::mpt_stats::{MptAggregator, MptTable, ValueKey};
use openprof_format::trace::attrs::{Seconds, ValueType};

use crate::context::Context;
use crate::engine::{Dump, Engine, Need};
use crate::jni::{Jni, Typed};
use crate::jvmti::{
    jclass, jint, jmethodID, jobject, jvmtiCapabilities, jvmtiEventCallbacks, JNIEnv, JavaVM, Jvmti,
};
use crate::traced_calls::{self, CallValues};
use chain::{Chain, Failure, Known, ObjectIds};
use openprof_classfile::access::{self, ABSTRACT, BRIDGE, INTERFACE, NATIVE, STATIC};
use openprof_classfile::{hook_class_file, HOOK_CLASS};
use openprof_format::options::Options;

/// How long a class being prepared waits for another thread's instrumentation work.
const PREPARE_WAIT: Duration = Duration::from_secs(2);

/// Where traced calls go: the tracer (format=x, net=) and/or the text profile's tables.
pub trait MptSink: Sync {
    /// A traced entry; returns its ticket when an element was written.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        &self,
        jni: *mut JNIEnv,
        method: jmethodID,
        time: Seconds,
        cpu_nanos: u64,
        values: Vec<openprof_format::trace::Value>,
        stack: Option<String>,
    ) -> Option<u128>;
    fn exit(&self, method: jmethodID, ticket: u128, time: Seconds, cpu_nanos: u64);
    /// A name/value note in the trace (MPT Apply Errors).
    fn note(&self, name: &str, value: &str);
}

/// A specification in force, with the number it is known by.
#[derive(Clone)]
struct SpecEntry {
    id: u32,
    spec: MptSpec,
    text: String,
    /// Binary names of the superclasses of loaded classes the spec names: their methods run
    /// for receivers of the named class, so they are instrumented too.
    ancestor_names: HashSet<String>,
}

/// A specification as it applies to one instrumented method.
struct SiteSpec {
    spec_id: u32,
    spec: MptSpec,
    text: String,
    /// The traced parameter's declared type (a field descriptor).
    declared: String,
    /// Checked at the first traced call: the chain, or the MPT Apply Error.
    chain: OnceLock<Result<Chain, String>>,
    /// Set by the thread that checks the chain.
    compiling: AtomicBool,
    /// Its table in the text profile's figures, once it has one.
    table: OnceLock<usize>,
    /// Calls entered and not yet exited: the text profile counts them as unfinished.
    open: AtomicU64,
}

#[derive(Default)]
struct SiteState {
    specs: Arc<Vec<SiteSpec>>,
    /// Per receiver class (a global reference; null for static methods): which specs trace it.
    decisions: Vec<(usize, Arc<[bool]>)>,
}

/// One instrumented method.
struct MethodSite {
    /// Global reference to the declaring class.
    class: usize,
    class_name: String,
    method: usize,
    name: String,
    descriptor: String,
    is_static: bool,
    bridge: bool,
    /// `example.Slow.work(int) [loader 1: java.net.URLClassLoader]`.
    label: String,
    state: RwLock<SiteState>,
}

/// One open call on a thread.
struct OpenCall {
    site: u32,
    specs: Arc<Vec<SiteSpec>>,
    chosen: Arc<[bool]>,
    values: Vec<(usize, ValueType, String)>,
    started: Option<(Instant, u64)>,
    ticket: Option<u128>,
    /// When this call tags its thread's samples: the traced call the thread was in before.
    previous_call: Option<u32>,
}

impl OpenCall {
    /// The call is over (exited, or its exit lost): no longer open in its specs' counts.
    fn close(&self) {
        for (at, _, _) in &self.values {
            if let Some(spec) = self.specs.get(*at) {
                // Never below zero: a count that wrapped would stall every dump.
                let _ = spec
                    .open
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                        open.checked_sub(1)
                    });
            }
        }
    }
}

#[derive(Default)]
struct ThreadState {
    open_calls: Vec<OpenCall>,
    /// The thread's kernel id, once a call of it tagged its samples.
    kernel_id: i32,
}

impl Drop for ThreadState {
    /// A thread that ends inside traced calls gives their tag up.
    fn drop(&mut self) {
        if self
            .open_calls
            .iter()
            .any(|call| call.previous_call.is_some())
        {
            traced_calls::leave(self.kernel_id, 0);
        }
    }
}

thread_local! {
    static THREAD: RefCell<ThreadState> = RefCell::new(ThreadState::default());
    /// Set while this thread holds the instrumentation lock: a class it prepares meanwhile is
    /// planned after the lock is given back (taking it again would deadlock).
    static PLANNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Plans for the classes this thread is retransforming, by JNI name.
    static PENDING: RefCell<HashMap<String, Plan>> = RefCell::new(HashMap::new());
}

/// What is instrumented in a class now.
struct Instrumented {
    class: usize,
    methods: Vec<MethodPlan>,
}

struct Instrumentation {
    specs: Vec<SpecEntry>,
    next_spec_id: u32,
    instrumented: Vec<Instrumented>,
}

pub struct Mpt {
    /// Our own environment: retransformation, and tags for the `id` modifier.
    jvmti: Jvmti,
    known: OnceLock<Known>,
    hook_module: OnceLock<usize>,
    /// The named modules defined at start, each made to read the hook's module (global
    /// references); a class of a named module not among them is not instrumented.
    read_modules: OnceLock<Vec<usize>>,
    /// The `name` field of java.lang.Module, read without running Java code.
    module_name: OnceLock<usize>,
    /// Classes prepared while their thread held the instrumentation lock (global references).
    deferred: Mutex<Vec<usize>>,
    started: AtomicBool,
    instrumentation: Mutex<Instrumentation>,
    sites: RwLock<Vec<Arc<MethodSite>>>,
    next_object_id: AtomicI64,
    /// Text output: per (site, spec), the calls by value.
    tables: Option<Mutex<MptAggregator>>,
    sink: OnceLock<&'static dyn MptSink>,
}

// SAFETY: the raw handles held (JVMTI environment, global references, method ids as usize)
// are valid on every thread; all mutable state is behind locks.
unsafe impl Send for Mpt {}
// SAFETY: as above.
unsafe impl Sync for Mpt {}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Mpt {
    /// A second JVMTI environment for parameter tracing, with the specifications to start
    /// with. `aggregate`: keep per-value tables for the text profile.
    pub fn new(vm: *mut JavaVM, specs: Vec<MptSpec>, aggregate: bool) -> AgentResult<Mpt> {
        let jvmti = Jvmti::from_vm(vm).ok_or("no JVMTI environment for parameter tracing")?;
        let potential = jvmti
            .potential_capabilities()
            .map_err(|error| format!("can't ask the JVM what it can do: {error}"))?;
        if !potential.can_retransform_classes() {
            return Err(
                "method parameter tracing needs JVMTI's can_retransform_classes, which this JVM \
                 does not offer"
                    .into(),
            );
        }
        let mut capabilities = jvmtiCapabilities::default();
        capabilities.set_can_retransform_classes(true);
        capabilities.set_can_retransform_any_class(potential.can_retransform_any_class());
        capabilities.set_can_tag_objects(potential.can_tag_objects());
        capabilities.set_can_get_line_numbers(potential.can_get_line_numbers());
        jvmti
            .add_capabilities(&capabilities)
            .map_err(|error| format!("parameter tracing: {error}"))?;
        let mut callbacks = jvmtiEventCallbacks::default();
        callbacks.ClassFileLoadHook = Some(hooks::on_class_file_load_hook);
        jvmti
            .set_event_callbacks_sized(&callbacks, event_callbacks_size_for_feature(11))
            .map_err(|error| error.to_string())?;
        let mut instrumentation = Instrumentation {
            specs: Vec::new(),
            next_spec_id: 1,
            instrumented: Vec::new(),
        };
        for spec in specs {
            instrumentation.add(spec);
        }
        Ok(Mpt {
            jvmti,
            known: OnceLock::new(),
            hook_module: OnceLock::new(),
            read_modules: OnceLock::new(),
            module_name: OnceLock::new(),
            deferred: Mutex::new(Vec::new()),
            started: AtomicBool::new(false),
            instrumentation: Mutex::new(instrumentation),
            sites: RwLock::new(Vec::new()),
            next_object_id: AtomicI64::new(1),
            tables: aggregate.then(|| Mutex::new(MptAggregator::new())),
            sink: OnceLock::new(),
        })
    }

    /// In the live phase (VMInit, or at once when attached): defines the hook class, binds its
    /// natives, and instruments the loaded classes the specifications name.
    fn start(&self, jni: *mut JNIEnv) -> AgentResult<()> {
        let jni = Jni(jni);
        crate::agent_work::as_agent_work(|| {
            let known = Known::resolve(jni).ok_or("can't resolve java.lang.String and Class")?;
            let _ = self.known.set(known);
            let hook = jni
                .define_class(HOOK_CLASS, std::ptr::null_mut(), &hook_class_file())
                .map_err(|_| "can't define the parameter tracing hook class".to_string())?;
            let natives = hooks::natives();
            let table: Vec<(&CStr, &CStr, *mut c_void)> = natives
                .iter()
                .map(|(name, descriptor, function)| {
                    (name.as_c_str(), descriptor.as_c_str(), *function)
                })
                .collect();
            jni.register_natives(hook, &table)
                .map_err(|_| "can't bind the parameter tracing natives".to_string())?;
            let module = jni
                .module_of(hook)
                .map_err(|_| "the hook class has no module".to_string())?;
            let _ = self.hook_module.set(jni.new_global_ref(module) as usize);
            // Code in named modules (java.base's HashMap) may call the hook only if its module
            // reads the hook's. Done now, before any lock is held: it runs Java code.
            let _ = self
                .read_modules
                .set(jni.make_modules_read(self.jvmti, module));
            if let Ok(module_class) = jni.find_class("java/lang/Module") {
                if let Ok(field) = jni.field_id(module_class, "name", "Ljava/lang/String;") {
                    let _ = self.module_name.set(field as usize);
                }
                jni.delete_local_ref(module_class);
            }
            self.started.store(true, Ordering::Release);
            self.rescan(jni);
            self.drain_deferred(jni);
            Ok(())
        })
    }

    /// Where traced calls go as trace elements (the tracer, with format=x or net=).
    pub fn set_sink(&self, sink: &'static dyn MptSink) {
        let _ = self.sink.set(sink);
    }

    /// Adds specifications at run time; returns what was done, in words.
    pub fn add_specs(&self, jni: *mut JNIEnv, specs: Vec<MptSpec>) -> String {
        let count = specs.len();
        {
            let mut instrumentation = lock(&self.instrumentation);
            for spec in specs {
                instrumentation.add(spec);
            }
        }
        let methods = crate::agent_work::as_agent_work(|| self.rescan(Jni(jni)));
        self.drain_deferred(Jni(jni));
        format!("{count} specification(s) added; {methods} method(s) instrumented now")
    }

    /// Removes the specifications whose text (as `MptSpec` prints it) is given; returns what
    /// was done, or what was not found.
    pub fn remove_specs(&self, jni: *mut JNIEnv, specs: &[MptSpec]) -> Result<String, String> {
        {
            let mut instrumentation = lock(&self.instrumentation);
            for spec in specs {
                let text = spec.to_string();
                let before = instrumentation.specs.len();
                instrumentation.specs.retain(|entry| entry.text != text);
                if instrumentation.specs.len() == before {
                    let known: Vec<&str> = instrumentation
                        .specs
                        .iter()
                        .map(|entry| entry.text.as_str())
                        .collect();
                    return Err(format!(
                        "no specification '{text}' is in force; in force: {}",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(" | ")
                        }
                    ));
                }
            }
        }
        let methods = crate::agent_work::as_agent_work(|| self.rescan(Jni(jni)));
        self.drain_deferred(Jni(jni));
        Ok(format!(
            "{} specification(s) removed; {methods} method(s) instrumented now",
            specs.len()
        ))
    }

    /// The specifications in force, as text.
    pub fn specs_in_force(&self) -> Vec<String> {
        lock(&self.instrumentation)
            .specs
            .iter()
            .map(|entry| entry.text.clone())
            .collect()
    }

    /// ClassPrepare: instruments the class (and superclasses whose methods it runs) if a
    /// specification names it.
    pub fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        if !self.started.load(Ordering::Acquire) {
            return;
        }
        let jni = Jni(jni);
        if PLANNING.with(|planning| planning.get()) || !self.try_prepare(jni, class, PREPARE_WAIT) {
            lock(&self.deferred).push(jni.new_global_ref(class) as usize);
        }
        self.drain_deferred(jni);
    }

    /// Plans a prepared class if the instrumentation lock can be had within `wait`: false if
    /// not. A thread preparing a class may hold its loader's lock, which the lock holder's
    /// retransformation could need (the verifier loads classes): waiting for good could hang
    /// both, so after `wait` the class is left to the holder (`drain_deferred`).
    fn try_prepare(&self, jni: Jni, class: jclass, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut instrumentation = loop {
            match self.instrumentation.try_lock() {
                Ok(guard) => break guard,
                Err(TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => return false,
            }
        };
        crate::agent_work::as_agent_work(|| {
            planning(&mut instrumentation, |instrumentation| {
                if instrumentation.specs.is_empty() {
                    return;
                }
                let chain = self.chain_of(jni, class);
                let mut candidates = self.note_ancestors(instrumentation, &chain);
                candidates.insert(0, class as usize);
                for candidate in candidates {
                    self.replan(jni, instrumentation, candidate as jclass);
                }
            })
        });
        true
    }

    /// Plans the classes left while the lock was held, unless another thread holds it now
    /// (that thread drains them once it lets go: each thread drains after its own work).
    fn drain_deferred(&self, jni: Jni) {
        loop {
            let Some(class) = lock(&self.deferred).pop() else {
                return;
            };
            if !self.try_prepare(jni, class as jclass, Duration::ZERO) {
                lock(&self.deferred).push(class);
                return;
            }
            jni.delete_global_ref(class as jobject);
        }
    }

    /// Runs `work` holding the instrumentation lock, marked on this thread.
    fn with_instrumentation<R>(&self, work: impl FnOnce(&mut Instrumentation) -> R) -> R {
        planning(&mut lock(&self.instrumentation), work)
    }

    /// Plans every loaded class again (after specifications changed); returns how many
    /// methods are instrumented.
    fn rescan(&self, jni: Jni) -> usize {
        if !self.started.load(Ordering::Acquire) {
            return 0;
        }
        let classes = self.jvmti.loaded_classes().unwrap_or_default();
        let methods = self.with_instrumentation(|instrumentation| {
            for spec in &mut instrumentation.specs {
                spec.ancestor_names.clear();
            }
            for &class in &classes {
                let pushed = jni.push_local_frame(16);
                let chain = self.chain_of(jni, class);
                self.note_ancestors(instrumentation, &chain);
                if pushed {
                    jni.pop_local_frame();
                }
            }
            for &class in &classes {
                let pushed = jni.push_local_frame(32);
                self.replan(jni, instrumentation, class);
                if pushed {
                    jni.pop_local_frame();
                }
            }
            instrumentation
                .instrumented
                .iter()
                .map(|entry| entry.methods.len())
                .sum()
        });
        for class in classes {
            jni.delete_local_ref(class);
        }
        methods
    }

    /// The class and its superclasses: (local reference, binary name).
    fn chain_of(&self, jni: Jni, class: jclass) -> Vec<(usize, String)> {
        let mut chain = Vec::new();
        let mut current = class;
        while !current.is_null() && chain.len() < 64 {
            let signature = self.jvmti.class_signature(current).unwrap_or_default();
            if !signature.starts_with('L') {
                break;
            }
            chain.push((current as usize, class_name_from_signature(&signature)));
            current = jni.superclass(current);
        }
        chain
    }

    /// Records the superclasses of the classes a spec names; returns those newly recorded
    /// (they must be planned again).
    fn note_ancestors(
        &self,
        instrumentation: &mut Instrumentation,
        chain: &[(usize, String)],
    ) -> Vec<usize> {
        let mut added = Vec::new();
        for spec in &mut instrumentation.specs {
            if let Some(named) = chain
                .iter()
                .position(|(_, name)| spec.spec.method.names_class(name))
            {
                for (class, name) in &chain[named + 1..] {
                    if spec.ancestor_names.insert(name.clone()) {
                        added.push(*class);
                    }
                }
            }
        }
        added
    }

    /// Works out what a class's instrumentation should be and retransforms it if that changed.
    fn replan(&self, jni: Jni, instrumentation: &mut Instrumentation, class: jclass) {
        let chain = self.chain_of(jni, class);
        let Some((_, binary_name)) = chain.first().cloned() else {
            return;
        };
        let related: Vec<&SpecEntry> = instrumentation
            .specs
            .iter()
            .filter(|entry| {
                entry.ancestor_names.contains(&binary_name)
                    || chain
                        .iter()
                        .any(|(_, name)| entry.spec.method.names_class(name))
            })
            .collect();
        let is_interface = access::has(self.jvmti.class_modifiers(class).unwrap_or(0), INTERFACE);
        if is_interface {
            // The variants are rules about a receiver's class and its superclasses; an
            // interface is neither. Refused, not ignored.
            for entry in &related {
                self.apply_error(
                    &entry.text,
                    &binary_name,
                    "names an interface: parameter tracing follows classes, so name a class \
                     that implements the method (interfaces and their default methods are not \
                     traced yet)",
                );
            }
            return;
        }
        let existing = instrumentation
            .instrumented
            .iter()
            .position(|entry| jni.is_same_object(entry.class as jobject, class));
        if related.is_empty() && existing.is_none() {
            return;
        }
        let mut methods = Vec::new();
        for method in self.jvmti.class_methods(class).unwrap_or_default() {
            let Ok((name, descriptor)) = self.jvmti.method_name(method) else {
                continue;
            };
            let modifiers = self.jvmti.method_modifiers(method).unwrap_or(0);
            if access::has(modifiers, NATIVE | ABSTRACT) || name.starts_with('<') {
                continue;
            }
            let is_static = access::has(modifiers, STATIC);
            let shape = MethodShape {
                name: name.clone(),
                descriptor: descriptor.clone(),
                bridge: access::has(modifiers, BRIDGE),
            };
            let specs: Vec<&SpecEntry> = related
                .iter()
                .copied()
                .filter(|entry| {
                    entry.spec.counts(&shape)
                        && (!is_static || entry.spec.method.names_class(&binary_name))
                        && !(is_static && entry.spec.parameter == 0)
                })
                .collect();
            if specs.is_empty() {
                continue;
            }
            let site = self.site_for(jni, class, method, &binary_name, &shape, is_static);
            let site_specs = specs
                .iter()
                .map(|entry| SiteSpec {
                    spec_id: entry.id,
                    spec: entry.spec.clone(),
                    text: entry.text.clone(),
                    declared: declared_type(&binary_name, &descriptor, entry.spec.parameter),
                    chain: OnceLock::new(),
                    compiling: AtomicBool::new(false),
                    table: OnceLock::new(),
                    open: AtomicU64::new(0),
                })
                .collect::<Vec<_>>();
            self.set_site_specs(site, site_specs);
            let mut parameters: Vec<u16> = specs
                .iter()
                .map(|entry| u16::from(entry.spec.parameter))
                .collect();
            parameters.sort_unstable();
            parameters.dedup();
            methods.push(MethodPlan {
                name,
                descriptor,
                site: site as i32,
                parameters,
                call_sites: Vec::new(),
                outgoing: Vec::new(),
                incoming: false,
            });
        }
        let unchanged = match existing {
            Some(index) => instrumentation.instrumented[index].methods == methods,
            None => methods.is_empty(),
        };
        if unchanged {
            return;
        }
        // Sites no longer planned stop tracing at once, before the class is retransformed.
        if let Some(index) = existing {
            for old in &instrumentation.instrumented[index].methods {
                if !methods.iter().any(|new| new.site == old.site) {
                    self.set_site_specs(old.site as u32, Vec::new());
                }
            }
        }
        let internal = binary_name.replace('.', "/");
        if self.retransform(jni, class, &internal, &methods) {
            match existing {
                Some(index) => instrumentation.instrumented[index].methods = methods,
                None => instrumentation.instrumented.push(Instrumented {
                    class: jni.new_global_ref(class) as usize,
                    methods,
                }),
            }
        }
    }

    /// The site of a method, created on first use.
    fn site_for(
        &self,
        jni: Jni,
        class: jclass,
        method: jmethodID,
        binary_name: &str,
        shape: &MethodShape,
        is_static: bool,
    ) -> u32 {
        let mut sites = write(&self.sites);
        if let Some(index) = sites.iter().position(|site| {
            site.method == method as usize
                || (site.name == shape.name
                    && site.descriptor == shape.descriptor
                    && jni.is_same_object(site.class as jobject, class))
        }) {
            return index as u32;
        }
        let loader = self.loader_of(class);
        let parameters = openprof_format::mpt::split_descriptor(&shape.descriptor)
            .map(|(parameters, _)| {
                parameters
                    .iter()
                    .map(|p| class_name_from_signature(p))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        sites.push(Arc::new(MethodSite {
            class: jni.new_global_ref(class) as usize,
            class_name: binary_name.to_string(),
            method: method as usize,
            name: shape.name.clone(),
            descriptor: shape.descriptor.clone(),
            is_static,
            bridge: shape.bridge,
            label: format!("{binary_name}.{}({parameters}) [{loader}]", shape.name),
            state: RwLock::new(SiteState::default()),
        }));
        (sites.len() - 1) as u32
    }

    fn set_site_specs(&self, site: u32, specs: Vec<SiteSpec>) {
        let Some(site) = read(&self.sites).get(site as usize).cloned() else {
            return;
        };
        let mut state = write(&site.state);
        let same = state.specs.len() == specs.len()
            && state
                .specs
                .iter()
                .zip(&specs)
                .all(|(old, new)| old.spec_id == new.spec_id);
        if same {
            return;
        }
        // Decisions hold global references to receiver classes: give them back.
        let old: Vec<usize> = state.decisions.drain(..).map(|(class, _)| class).collect();
        state.specs = Arc::new(specs);
        drop(state);
        if let Some(jni) = crate::jni::thread_jni() {
            for class in old {
                Jni(jni).delete_global_ref(class as jobject);
            }
        }
    }

    /// Passes a class through our ClassFileLoadHook with `methods` to instrument (none: the
    /// class goes back to its original code).
    fn retransform(&self, jni: Jni, class: jclass, internal: &str, methods: &[MethodPlan]) -> bool {
        if !self.jvmti.is_modifiable_class(class) {
            self.apply_error_for(methods, &format!("class {internal} can't be retransformed"));
            return false;
        }
        if !self.reads_hook(jni, class) {
            self.apply_error_for(
                methods,
                &format!(
                    "{internal} is in a named module defined after the agent started, which \
                     can't be made to read the hook's module"
                ),
            );
            return false;
        }
        PENDING.with(|pending| {
            pending.borrow_mut().insert(
                internal.to_string(),
                Plan {
                    hook_class: HOOK_CLASS.to_string(),
                    hooks: openprof_classfile::HookKind::Parameters,
                    coverage: None,
                    methods: methods.to_vec(),
                },
            )
        });
        let _ = self.jvmti.set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true);
        let result = self.jvmti.retransform_classes(&[class]);
        let _ = self
            .jvmti
            .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, false);
        let unused = PENDING.with(|pending| pending.borrow_mut().remove(internal));
        match result {
            Ok(()) if unused.is_none() => true,
            Ok(()) => {
                self.apply_error_for(
                    methods,
                    &format!("the JVM did not pass {internal} through the class file hook"),
                );
                false
            }
            Err(error) => {
                self.apply_error_for(methods, &format!("can't retransform {internal}: {error}"));
                false
            }
        }
    }

    /// Whether code of the class may call the hook: its module is unnamed (those read every
    /// module) or was made to read the hook's at start.
    fn reads_hook(&self, jni: Jni, class: jclass) -> bool {
        let Ok(module) = jni.module_of(class) else {
            return false;
        };
        let named = match self.module_name.get() {
            Some(&field) => {
                let name = jni
                    .field(module, field as crate::jvmti::jfieldID, b'L')
                    .reference();
                let named = !name.is_null();
                jni.delete_local_ref(name);
                named
            }
            None => true,
        };
        let reads = !named
            || self.read_modules.get().is_some_and(|modules| {
                modules
                    .iter()
                    .any(|&m| jni.is_same_object(m as jobject, module))
            });
        jni.delete_local_ref(module);
        reads
    }

    /// The ClassFileLoadHook's work: the rewritten class, if this thread planned one.
    fn transform(&self, name: &str, bytes: &[u8]) -> Option<Vec<u8>> {
        let plan = PENDING.with(|pending| pending.borrow_mut().remove(name))?;
        if plan.methods.is_empty() {
            return None;
        }
        match openprof_classfile::instrument(bytes, &plan) {
            Ok(rewritten) => Some(rewritten),
            Err(error) => {
                self.apply_error_for(&plan.methods, &format!("can't instrument {name}: {error}"));
                None
            }
        }
    }

    fn apply_error_for(&self, methods: &[MethodPlan], reason: &str) {
        let sites = read(&self.sites);
        for method in methods {
            if let Some(site) = sites.get(method.site as usize) {
                for spec in read(&site.state).specs.iter() {
                    self.apply_error(&spec.text, &site.label, reason);
                }
            }
        }
    }

    fn apply_error(&self, spec: &str, method: &str, reason: &str) {
        let text = format!("{spec} on {method}: {reason}");
        eprintln!("openprof: MPT Apply Error: {text}");
        if let Some(sink) = self.sink.get() {
            sink.note("MPT Apply Error", &text);
        }
    }

    /// `loader N: ClassName` for a class's loader (0: bootstrap; crate::loaders).
    fn loader_of(&self, class: jclass) -> String {
        let loader = crate::loaders::loader_of(class);
        format!("loader {}: {}", loader.index, loader.name)
    }

    fn site(&self, site: jint) -> Option<Arc<MethodSite>> {
        read(&self.sites).get(usize::try_from(site).ok()?).cloned()
    }

    /// Which of the site's specifications trace a call on `receiver`.
    fn decide(
        &self,
        jni: Jni,
        site: &MethodSite,
        receiver: jobject,
    ) -> (Arc<Vec<SiteSpec>>, Arc<[bool]>) {
        let class = if site.is_static || receiver.is_null() {
            std::ptr::null_mut()
        } else {
            jni.object_class(receiver)
        };
        {
            let state = read(&site.state);
            if state.specs.is_empty() {
                return (state.specs.clone(), Arc::from(Vec::new()));
            }
            if let Some((_, chosen)) = state.decisions.iter().find(|(known, _)| {
                if class.is_null() {
                    *known == 0
                } else {
                    *known != 0 && jni.is_same_object(*known as jobject, class)
                }
            }) {
                let chosen = chosen.clone();
                let specs = state.specs.clone();
                jni.delete_local_ref(class);
                return (specs, chosen);
            }
        }
        let mut state = write(&site.state);
        let specs = state.specs.clone();
        let chosen: Arc<[bool]> = self.traced_by(jni, site, class, &specs).into();
        let key = if class.is_null() {
            0
        } else {
            jni.new_global_ref(class) as usize
        };
        state.decisions.push((key, chosen.clone()));
        drop(state);
        jni.delete_local_ref(class);
        (specs, chosen)
    }

    /// The variant rules (docs/mpt.md, `variant=`) for a receiver class.
    fn traced_by(
        &self,
        jni: Jni,
        site: &MethodSite,
        receiver: jclass,
        specs: &[SiteSpec],
    ) -> Vec<bool> {
        let method = MethodShape {
            name: site.name.clone(),
            descriptor: site.descriptor.clone(),
            bridge: site.bridge,
        };
        if receiver.is_null() {
            return specs
                .iter()
                .map(|spec| {
                    spec.spec
                        .traces_call(|_| None, None, &site.class_name, &method)
                })
                .collect();
        }
        // The chain's superclasses are local references: freed with the frame.
        let pushed = jni.push_local_frame(128);
        let shapes: Vec<ClassShape> = self
            .chain_of(jni, receiver)
            .iter()
            .map(|(class, name)| {
                let class = *class as jclass;
                let superclass = jni.superclass(class);
                let superclass_name = (!superclass.is_null())
                    .then(|| self.jvmti.class_signature(superclass).ok())
                    .flatten()
                    .map(|signature| class_name_from_signature(&signature));
                jni.delete_local_ref(superclass);
                ClassShape {
                    name: name.clone(),
                    superclass: superclass_name,
                    methods: self
                        .jvmti
                        .class_methods(class)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|method| {
                            let (name, descriptor) = self.jvmti.method_name(method).ok()?;
                            let modifiers = self.jvmti.method_modifiers(method).unwrap_or(0);
                            (!access::has(modifiers, STATIC)).then_some(MethodShape {
                                name,
                                descriptor,
                                bridge: access::has(modifiers, BRIDGE),
                            })
                        })
                        .collect(),
                }
            })
            .collect();
        if pushed {
            jni.pop_local_frame();
        }
        let find = |name: &str| shapes.iter().find(|shape| shape.name == name);
        let receiver_name = shapes.first().map(|shape| shape.name.clone());
        specs
            .iter()
            .map(|spec| {
                spec.spec
                    .traces_call(find, receiver_name.as_deref(), &site.class_name, &method)
            })
            .collect()
    }

    fn begin(&self, jni: Jni, site_id: jint, receiver: jobject) {
        let frame = match self.site(site_id) {
            Some(site) => {
                let (specs, chosen) = self.decide(jni, &site, receiver);
                OpenCall {
                    site: site_id as u32,
                    specs,
                    chosen,
                    values: Vec::new(),
                    started: None,
                    ticket: None,
                    previous_call: None,
                }
            }
            None => OpenCall {
                site: site_id as u32,
                specs: Arc::new(Vec::new()),
                chosen: Arc::from(Vec::new()),
                values: Vec::new(),
                started: None,
                ticket: None,
                previous_call: None,
            },
        };
        THREAD.with(|thread| thread.borrow_mut().open_calls.push(frame));
    }

    fn arg(&self, jni: Jni, index: jint, value: Typed) {
        let Some((site_id, specs, positions)) = THREAD.with(|thread| {
            let thread = thread.borrow();
            let frame = thread.open_calls.last()?;
            let positions: Vec<usize> = (0..frame.specs.len())
                .filter(|&at| {
                    frame.chosen.get(at) == Some(&true)
                        && i32::from(frame.specs[at].spec.parameter) == index
                })
                .collect();
            (!positions.is_empty()).then(|| (frame.site, frame.specs.clone(), positions))
        }) else {
            return;
        };
        let Some(site) = self.site(site_id as jint) else {
            return;
        };
        let values: Vec<(usize, ValueType, String)> = positions
            .into_iter()
            .map(|at| {
                let (kind, text) = self.value_of(jni, &site, &specs[at], value);
                (at, kind, text)
            })
            .collect();
        THREAD.with(|thread| {
            if let Some(frame) = thread.borrow_mut().open_calls.last_mut() {
                frame.values.extend(values);
            }
        });
    }

    /// One specification's value for a call: the chain applied (checked on first use).
    fn value_of(
        &self,
        jni: Jni,
        site: &MethodSite,
        spec: &SiteSpec,
        value: Typed,
    ) -> (ValueType, String) {
        let Some(known) = self.known.get() else {
            return (ValueType::Error, Failure::Unknown.name().into());
        };
        // The first call checks the chain. Where that runs Java code (loading the classes of
        // a value that is an object), other threads calling meanwhile don't wait for it (they
        // might hold a lock that code needs): their value is Unknown. A chain on a primitive
        // value (or an array of them) is checked without Java code, in microseconds, and
        // every call waits for it.
        if spec.chain.get().is_none()
            && spec.declared.contains('L')
            && spec.compiling.swap(true, Ordering::AcqRel)
            && spec.chain.get().is_none()
        {
            return (ValueType::Error, Failure::Unknown.name().into());
        }
        let chain = spec.chain.get_or_init(|| {
            // Classes the chain names are looked for as docs/mpt.md says, through the loader of
            // the value's class first (HashMap's is the bootstrap loader, its keys' are not).
            let object = value.reference();
            let value_loader = if object.is_null() {
                std::ptr::null_mut()
            } else {
                let class = jni.object_class(object);
                let loader = self
                    .jvmti
                    .class_loader(class)
                    .unwrap_or(std::ptr::null_mut());
                jni.delete_local_ref(class);
                loader
            };
            let declaring_loader = self
                .jvmti
                .class_loader(site.class as jclass)
                .unwrap_or(std::ptr::null_mut());
            let loaders = [value_loader, declaring_loader, known.system_loader];
            let compiled = chain::compile(
                jni,
                self.jvmti,
                known,
                &spec.declared,
                &loaders,
                &spec.spec.modifiers,
            );
            jni.delete_local_ref(value_loader);
            jni.delete_local_ref(declaring_loader);
            if let Err(reason) = &compiled {
                self.apply_error(&spec.text, &site.label, reason);
            }
            compiled
        });
        let Ok(chain) = chain else {
            return (ValueType::Error, "EnableFailed".into());
        };
        let pushed = jni.push_local_frame(16);
        let result = match chain.apply(jni, self, value) {
            Ok(value) => chain::render(jni, known, value, &|class| self.loader_of(class)),
            Err(failure) => (ValueType::Error, failure.name().to_string()),
        };
        if pushed {
            jni.pop_local_frame();
        }
        result
    }

    fn enter(&self, jni: Jni) {
        let Some((site_id, specs, chosen, mut values)) = THREAD.with(|thread| {
            let mut thread = thread.borrow_mut();
            let frame = thread.open_calls.last_mut()?;
            frame.chosen.iter().any(|&c| c).then(|| {
                (
                    frame.site,
                    frame.specs.clone(),
                    frame.chosen.clone(),
                    std::mem::take(&mut frame.values),
                )
            })
        }) else {
            return;
        };
        // A spec added after the class was instrumented may have no argument passed yet.
        for at in 0..specs.len() {
            if chosen.get(at) == Some(&true) && !values.iter().any(|(v, _, _)| *v == at) {
                values.push((at, ValueType::Error, Failure::Unknown.name().into()));
            }
        }
        values.sort_by_key(|(at, _, _)| *at);
        let traced = |events: fn(&openprof_format::mpt::Events) -> bool| {
            specs
                .iter()
                .zip(chosen.iter())
                .any(|(spec, &on)| on && events(&spec.spec.events))
        };
        // One read of the thread's CPU clock (a system call) serves the event and the timing.
        let cpu = crate::signals::thread_cpu_nanos();
        let ticket = match (self.sink.get(), self.site(site_id as jint)) {
            (Some(sink), Some(site)) if traced(|e| e.entry || e.exit) => {
                let stack = traced(|e| e.stack).then(|| self.stack_text());
                let elements = values
                    .iter()
                    .map(|(at, kind, text)| openprof_format::trace::Value {
                        parameter_name: Some(specs[*at].spec.parameter.to_string()),
                        reference_name: Some(specs[*at].text.clone()),
                        value_type: Some(*kind),
                        value: Some(text.clone()),
                        obj_id_ref: None,
                        collation_value: None,
                        trace_id_ref: None,
                        content: Default::default(),
                    })
                    .collect();
                sink.entry(
                    jni.0,
                    site.method as jmethodID,
                    Seconds::now(),
                    cpu,
                    elements,
                    stack,
                )
            }
            _ => None,
        };
        if self.tables.is_some() {
            for (at, _, _) in &values {
                specs[*at].open.fetch_add(1, Ordering::Relaxed);
            }
        }
        let previous_call = self.tag_samples(site_id as jint, &specs, &values);
        let started = (Instant::now(), cpu);
        THREAD.with(|thread| {
            if let Some(frame) = thread.borrow_mut().open_calls.last_mut() {
                frame.values = values;
                frame.started = Some(started);
                frame.ticket = ticket;
                frame.previous_call = previous_call;
            }
        });
    }

    fn exit(&self, site_id: jint) {
        let (ended, cpu) = (Instant::now(), crate::signals::thread_cpu_nanos());
        let Some(mut frame) = THREAD.with(|thread| {
            let mut thread = thread.borrow_mut();
            // Frames left open above this one lost their exit (a StackOverflowError inside the
            // hook itself, say): drop them. An exit whose entry was never seen (its method was
            // instrumented while the call ran) leaves the open calls as they are.
            let at = thread
                .open_calls
                .iter()
                .rposition(|frame| frame.site == site_id as u32)?;
            let untag = thread.open_calls[at..]
                .iter()
                .find_map(|frame| frame.previous_call);
            if let Some(previous) = untag {
                traced_calls::leave(thread.kernel_id, previous);
            }
            for lost in thread.open_calls.drain(at + 1..) {
                lost.close();
            }
            thread.open_calls.pop()
        }) else {
            return;
        };
        let Some((started, cpu_started)) = frame.started else {
            return;
        };
        let wall_nanos = ended.duration_since(started).as_nanos() as u64;
        let cpu_nanos = cpu.saturating_sub(cpu_started);
        let Some(site) = self.site(site_id) else {
            return;
        };
        if let (Some(sink), Some(ticket)) = (self.sink.get(), frame.ticket) {
            let wants_exit = frame
                .specs
                .iter()
                .zip(frame.chosen.iter())
                .any(|(spec, &on)| on && spec.spec.events.exit);
            if wants_exit {
                sink.exit(site.method as jmethodID, ticket, Seconds::now(), cpu);
            }
        }
        if let Some(tables) = &self.tables {
            let mut tables = lock(tables);
            frame.close();
            for (at, kind, text) in std::mem::take(&mut frame.values) {
                let spec = &frame.specs[at];
                let table = *spec
                    .table
                    .get_or_init(|| tables.table(&site.label, &spec.text));
                tables.record_in(table, ValueKey::new(kind, text), wall_nanos, cpu_nanos);
            }
        }
    }

    /// While sampling signals are taken: this call's values tag its thread's samples until it
    /// exits (`traced_calls`). Returns the traced call the thread was in before.
    fn tag_samples(
        &self,
        site_id: jint,
        specs: &[SiteSpec],
        values: &[(usize, ValueType, String)],
    ) -> Option<u32> {
        if !crate::signals::installed() {
            return None;
        }
        let key: Vec<(u32, ValueType, &str)> = values
            .iter()
            .map(|(at, kind, text)| (specs[*at].spec_id, *kind, text.as_str()))
            .collect();
        let kernel_id = THREAD.with(|thread| {
            let mut thread = thread.borrow_mut();
            if thread.kernel_id == 0 {
                thread.kernel_id = crate::signals::current_thread_id();
            }
            thread.kernel_id
        });
        let outer = traced_calls::current(kernel_id);
        let call = traced_calls::number_of((site_id as u32, outer, &key), || CallValues {
            method: self
                .site(site_id)
                .map(|site| site.label.clone())
                .unwrap_or_default(),
            values: values
                .iter()
                .map(|(at, kind, text)| {
                    (specs[*at].text.clone(), ValueKey::new(*kind, text.clone()))
                })
                .collect(),
            outer,
        })?;
        Some(traced_calls::enter(kernel_id, call))
    }

    /// The calling thread's stack below the hook, innermost first: `class.method(line)`.
    fn stack_text(&self) -> String {
        let Ok(thread) = self.jvmti.current_thread() else {
            return String::new();
        };
        let frames = self.jvmti.stack_trace(thread, 64).unwrap_or_default();
        crate::jni::delete_local_ref(
            crate::jni::thread_jni().unwrap_or(std::ptr::null_mut()),
            thread,
        );
        frames
            .iter()
            .skip(1) // the hook's native method
            .filter_map(|frame| {
                let (name, _) = self.jvmti.method_name(frame.method).ok()?;
                let class = self.jvmti.method_declaring_class(frame.method).ok()?;
                let class_name =
                    class_name_from_signature(&self.jvmti.class_signature(class).ok()?);
                let line = self
                    .jvmti
                    .line_number_table(frame.method)
                    .and_then(|table| {
                        table
                            .iter()
                            .rev()
                            .find(|(start, _)| *start <= frame.location)
                            .map(|(_, line)| *line)
                    })
                    .map(|line| format!(":{line}"))
                    .unwrap_or_default();
                Some(format!("{class_name}.{name}{line}"))
            })
            .collect::<Vec<_>>()
            .join(" <- ")
    }

    /// The per-value tables for the text profile, each named by method and spec.
    pub fn tables(&self) -> Vec<MptTable> {
        let Some(tables) = &self.tables else {
            return Vec::new();
        };
        let mut tables = lock(tables).clone();
        // Calls running now (or whose thread the run ended inside them) are unfinished.
        for site in read(&self.sites).iter() {
            for spec in read(&site.state).specs.iter() {
                let open = spec.open.load(Ordering::Relaxed);
                if open > 0 {
                    tables.unfinished_calls(&site.label, &spec.text, open);
                }
            }
        }
        tables.finish()
    }
}

impl Instrumentation {
    fn add(&mut self, spec: MptSpec) {
        let text = spec.to_string();
        if self.specs.iter().any(|entry| entry.text == text) {
            return;
        }
        self.specs.push(SpecEntry {
            id: self.next_spec_id,
            spec,
            text,
            ancestor_names: HashSet::new(),
        });
        self.next_spec_id += 1;
    }
}

impl ObjectIds for Mpt {
    fn id_of(&self, object: jobject) -> i64 {
        match self.jvmti.tag(object) {
            Ok(tag) if tag != 0 => tag,
            _ => {
                let id = self.next_object_id.fetch_add(1, Ordering::Relaxed);
                let _ = self.jvmti.set_tag(object, id);
                id
            }
        }
    }
}

/// The declared type of parameter `parameter` of a method (`this`: its class).
fn declared_type(binary_name: &str, descriptor: &str, parameter: u8) -> String {
    if parameter == 0 {
        return format!("L{};", binary_name.replace('.', "/"));
    }
    openprof_format::mpt::split_descriptor(descriptor)
        .and_then(|(parameters, _)| {
            parameters
                .get(usize::from(parameter) - 1)
                .map(|p| p.to_string())
        })
        .unwrap_or_default()
}

/// Runs `work` on the locked instrumentation with this thread marked as planning (a class it
/// prepares meanwhile is deferred: taking the lock again would deadlock).
fn planning<R>(
    instrumentation: &mut Instrumentation,
    work: impl FnOnce(&mut Instrumentation) -> R,
) -> R {
    PLANNING.with(|planning| planning.set(true));
    let result = work(instrumentation);
    PLANNING.with(|planning| planning.set(false));
    result
}

impl Engine for Mpt {
    /// Parameter tracing runs in a JVMTI environment of its own, with its own capabilities.
    fn needs(_options: &Options) -> Vec<Need> {
        Vec::new()
    }

    fn start(&self, _context: &Context, jni: *mut JNIEnv) -> Option<String> {
        if let Err(error) = Mpt::start(self, jni) {
            eprintln!("openprof: method parameter tracing is off: {error}");
        }
        None
    }

    fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        Mpt::class_prepared(self, jni, class);
    }

    fn dump(&self, _context: &Context, dump: &Dump<'_>) {
        let tables = self.tables();
        let mut report = lock(dump.report);
        if let Err(error) = report.output.mpt(&tables) {
            report.complain(error);
        }
    }
}
