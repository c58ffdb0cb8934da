//! `delay=`: a busy delay of known cost put into the methods of one name in one class, so that
//! a profile of the run can be checked against the truth: the delays' count and the time they
//! took, which the agent counts and prints at exit. The methods call `openprof.Delay.spin()`
//! at entry (or at each basic block), rewritten by a ClassFileLoadHook of the engine's own
//! JVMTI environment when the class loads, or by RetransformClasses when it was loaded before
//! the agent attached.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use jvmti_bindings::sys::jni::jlong;
use jvmti_bindings::sys::jvmti::{
    event_callbacks_size_for_feature, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK,
};
use openprof_classfile::{
    declared_methods, delay_class_file, instrument_each, HookKind, MethodPlan, Plan, DELAY_CLASS,
    DELAY_CLOCK, DELAY_EVERY_FIELD, DELAY_NANOS_FIELD, DELAY_SPUN,
};
use openprof_format::options::{Delay as DelayOption, Options};

use crate::context::Context;
use crate::engine::{Engine, Need};
use crate::error::AgentResult;
use crate::guard::guarded;
use crate::jni::Jni;
use crate::jvmti::{
    jclass, jint, jobject, jvmtiCapabilities, jvmtiEnv, jvmtiEventCallbacks, JNIEnv, JavaVM, Jvmti,
};

/// The delays run so far and the nanoseconds they took, counted by `spun`.
static DELAYS: AtomicU64 = AtomicU64::new(0);
static DELAYED_NS: AtomicU64 = AtomicU64::new(0);

pub struct Delay {
    jvmti: Jvmti,
    option: DelayOption,
    /// The class's internal name (`a/b/C`), as the load hook names classes.
    internal_name: String,
    /// Its signature (`La/b/C;`), as JVMTI names loaded classes.
    signature: String,
    /// Methods rewritten so far.
    methods: AtomicU64,
    /// The delay class's module (a global reference), once defined.
    hook_module: OnceLock<usize>,
}

// SAFETY: the JVMTI environment and the global reference held are valid on every thread; the
// rest is immutable or atomic.
unsafe impl Send for Delay {}
// SAFETY: as above.
unsafe impl Sync for Delay {}

impl Delay {
    /// A JVMTI environment of its own whose load hook rewrites the class from now on.
    pub fn new(vm: *mut JavaVM, option: DelayOption) -> AgentResult<Delay> {
        let jvmti = Jvmti::from_vm(vm).ok_or("no JVMTI environment for delay=")?;
        let potential = jvmti
            .potential_capabilities()
            .map_err(|error| format!("can't ask the JVM what it can do: {error}"))?;
        // Needed only for a class loaded before an attach; asked for when offered.
        let mut capabilities = jvmtiCapabilities::default();
        capabilities.set_can_retransform_classes(potential.can_retransform_classes());
        jvmti
            .add_capabilities(&capabilities)
            .map_err(|error| format!("delay=: {error}"))?;
        let mut callbacks = jvmtiEventCallbacks::default();
        callbacks.ClassFileLoadHook = Some(on_class_file_load_hook);
        jvmti
            .set_event_callbacks_sized(&callbacks, event_callbacks_size_for_feature(11))
            .map_err(|error| error.to_string())?;
        let internal_name = option.class.replace('.', "/");
        Ok(Delay {
            jvmti,
            signature: format!("L{internal_name};"),
            internal_name,
            option,
            methods: AtomicU64::new(0),
            hook_module: OnceLock::new(),
        })
    }

    /// The class file with the delay put into every method of the option's name, if it is
    /// the class and has such a method.
    fn transform(&self, name: &str, bytes: &[u8]) -> Option<Vec<u8>> {
        if name != self.internal_name {
            return None;
        }
        let methods: Vec<MethodPlan> = declared_methods(bytes)
            .ok()?
            .into_iter()
            .filter(|method| method.has_code && method.name == self.option.method)
            .map(|method| MethodPlan {
                name: method.name,
                descriptor: method.descriptor,
                site: 0,
                parameters: Vec::new(),
                call_sites: Vec::new(),
                outgoing: Vec::new(),
                incoming: false,
            })
            .collect();
        if methods.is_empty() {
            eprintln!(
                "openprof WARNING: delay=: class {} has no method {} with code; nothing is delayed",
                self.option.class, self.option.method
            );
            return None;
        }
        let plan = Plan {
            hook_class: DELAY_CLASS.into(),
            hooks: HookKind::Delay {
                blocks: self.option.blocks,
            },
            methods,
            coverage: None,
        };
        let instrumented = match instrument_each(bytes, &plan) {
            Ok(instrumented) => instrumented,
            Err(error) => {
                eprintln!(
                    "openprof WARNING: delay=: {} can't be rewritten: {error}",
                    self.option.class
                );
                return None;
            }
        };
        for (method, reason) in &instrumented.refused {
            eprintln!(
                "openprof WARNING: delay=: {}.{}{} is left as it was: {reason}",
                self.option.class, method.name, method.descriptor
            );
        }
        let rewritten = plan.methods.len() - instrumented.refused.len();
        self.methods.fetch_add(rewritten as u64, Ordering::Relaxed);
        instrumented.class_file
    }

    /// Defines the delay class, binds its native, sets its length and lets every module call
    /// it; then rewrites the class if it is loaded already.
    fn start_delays(&self, jni: Jni) -> Result<(), String> {
        let class = jni
            .define_class(DELAY_CLASS, std::ptr::null_mut(), &delay_class_file())
            .map_err(|_| "can't define the delay class".to_string())?;
        let natives = [
            (DELAY_SPUN, spun as *mut c_void),
            (DELAY_CLOCK, clock as *mut c_void),
        ];
        let names: Vec<(CString, CString, *mut c_void)> = natives
            .iter()
            .filter_map(|((name, descriptor), function)| {
                Some((
                    CString::new(*name).ok()?,
                    CString::new(*descriptor).ok()?,
                    *function,
                ))
            })
            .collect();
        let table: Vec<(&CStr, &CStr, *mut c_void)> = names
            .iter()
            .map(|(name, descriptor, function)| (name.as_c_str(), descriptor.as_c_str(), *function))
            .collect();
        jni.register_natives(class, &table)
            .map_err(|_| "can't bind the delay's natives".to_string())?;
        let (field, field_descriptor) = DELAY_NANOS_FIELD;
        let field = jni
            .static_field_id(class, field, field_descriptor)
            .map_err(|_| "the delay class has no length field".to_string())?;
        jni.set_static_long_field(class, field, self.option.ns as i64)
            .map_err(|_| "can't set the delay's length".to_string())?;
        let (every, every_descriptor) = DELAY_EVERY_FIELD;
        let every = jni
            .static_field_id(class, every, every_descriptor)
            .map_err(|_| "the delay class has no count of calls".to_string())?;
        jni.set_static_long_field(class, every, i64::from(self.option.every.max(1)))
            .map_err(|_| "can't set which calls spin".to_string())?;
        let module = jni
            .module_of(class)
            .map_err(|_| "the delay class has no module".to_string())?;
        let _ = self.hook_module.set(jni.new_global_ref(module) as usize);
        // Code in named modules (javac's) may call the delay only if its module reads the
        // delay's; modules defined later are made to when the class is prepared.
        for reading in jni.make_modules_read(self.jvmti, module) {
            jni.delete_global_ref(reading as jobject);
        }
        jni.delete_local_ref(module);
        self.jvmti
            .set_event(JVMTI_EVENT_CLASS_FILE_LOAD_HOOK, true)
            .map_err(|error| format!("can't turn the class file hook on: {error}"))?;
        let loaded: Vec<jclass> = self.jvmti.loaded_classes().unwrap_or_default();
        let mut target = Vec::new();
        for class in loaded {
            if self.jvmti.class_signature(class).ok().as_deref() == Some(self.signature.as_str()) {
                target.push(class);
            } else {
                jni.delete_local_ref(class);
            }
        }
        if !target.is_empty() {
            self.jvmti.retransform_classes(&target).map_err(|error| {
                format!(
                    "{} was loaded before and can't be rewritten: {error}",
                    self.option.class
                )
            })?;
        }
        for class in target {
            jni.delete_local_ref(class);
        }
        Ok(())
    }
}

/// The delay class's native `spun`: one delay ran, which began when the thread's CPU time
/// was `cpu`.
unsafe extern "system" fn spun(_jni: *mut JNIEnv, _class: jclass, cpu: jlong) {
    let now = crate::signals::thread_cpu_nanos();
    DELAYS.fetch_add(1, Ordering::Relaxed);
    DELAYED_NS.fetch_add(now.saturating_sub(cpu.max(0) as u64), Ordering::Relaxed);
}

/// The delay class's native `clock`: the calling thread's CPU time, in nanoseconds.
unsafe extern "system" fn clock(_jni: *mut JNIEnv, _class: jclass) -> jlong {
    crate::signals::thread_cpu_nanos() as jlong
}

/// ClassFileLoadHook of the delay's environment.
#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn on_class_file_load_hook(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _class_being_redefined: jclass,
    _loader: jobject,
    name: *const c_char,
    _protection_domain: jobject,
    class_data_len: jint,
    class_data: *const u8,
    new_class_data_len: *mut jint,
    new_class_data: *mut *mut u8,
) {
    guarded("ClassFileLoadHook (delay)", || {
        let Some(delay) = crate::engine::running::<Delay>() else {
            return;
        };
        // SAFETY: these are the hook's own arguments, as JVMTI passed them.
        unsafe {
            delay.jvmti.replace_class_file(
                name,
                class_data_len,
                class_data,
                new_class_data_len,
                new_class_data,
                |name, bytes| delay.transform(name, bytes),
            );
        }
    });
}

impl Engine for Delay {
    /// The delay runs in a JVMTI environment of its own.
    fn needs(_options: &Options) -> Vec<Need> {
        Vec::new()
    }

    fn start(&self, _context: &Context, jni: *mut JNIEnv) -> Option<String> {
        match self.start_delays(Jni(jni)) {
            Ok(()) => Some(self.describe_delay()),
            Err(error) => {
                eprintln!("openprof: delay= is off: {error}");
                None
            }
        }
    }

    fn class_prepared(&self, jni: *mut JNIEnv, class: jclass) {
        let Some(&hook_module) = self.hook_module.get() else {
            return;
        };
        if self.jvmti.class_signature(class).ok().as_deref() != Some(self.signature.as_str()) {
            return;
        }
        // A module defined after the start (a layer of its own) reads the delay's too.
        let jni = Jni(jni);
        if let Ok(module) = jni.module_of(class) {
            let _ = self.jvmti.add_module_reads(module, hook_module as jobject);
            jni.delete_local_ref(module);
        }
    }

    fn stop(&self, _context: &Context, _jni: *mut JNIEnv) {
        let delays = DELAYS.load(Ordering::Relaxed);
        let ns = DELAYED_NS.load(Ordering::Relaxed);
        eprintln!(
            "openprof: delay={}: {delays} delays took {ns} ns in all ({} methods delayed)",
            self.option,
            self.methods.load(Ordering::Relaxed)
        );
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        Some(self.describe_delay())
    }
}

impl Delay {
    fn describe_delay(&self) -> String {
        format!(
            "delay={}: {} methods delayed; {} delays so far",
            self.option,
            self.methods.load(Ordering::Relaxed),
            DELAYS.load(Ordering::Relaxed)
        )
    }
}
