//! What a profiling engine is to the coordinator: the JVMTI capabilities it needs for the
//! options, the callbacks it handles and the events it turns on, and what it does at start, on
//! each round of the agent's thread, at a dump and at the VM's death. The coordinator
//! (`agent.rs`) only loops over the engines the options chose; each engine module
//! (`engines/`) owns its state and its callbacks, which find their engine with [`running`].

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use openprof_format::options::Options;

use crate::context::{Context, Report};
use crate::error::AgentError;
use crate::jvmti::{jclass, jvmtiCapabilities, jvmtiEvent, jvmtiEventCallbacks, JNIEnv};
use crate::sync::lock;

/// A JVMTI capability an engine needs, and which option needs it (to name it in a refusal).
pub struct Need {
    pub capability: &'static str,
    pub needed_for: &'static str,
    pub set: fn(&mut jvmtiCapabilities),
    pub has: fn(&jvmtiCapabilities) -> bool,
}

/// `need!(can_x, set_can_x, "the option that needs it")`.
macro_rules! need {
    ($capability:ident, $set:ident, $needed_for:expr) => {
        $crate::engine::Need {
            capability: stringify!($capability),
            needed_for: $needed_for,
            set: |capabilities| capabilities.$set(true),
            has: |capabilities| capabilities.$capability(),
        }
    };
}
pub(crate) use need;

/// The refusal when some needed capability is not to be had now, naming what needs it.
pub fn refuse_missing(needs: &[Need], potential: &jvmtiCapabilities) -> Result<(), AgentError> {
    // (what needs them, the capabilities), in the order of the needs.
    let mut missing: Vec<(&str, Vec<&str>)> = Vec::new();
    for need in needs.iter().filter(|need| !(need.has)(potential)) {
        match missing
            .iter_mut()
            .find(|(what, _)| *what == need.needed_for)
        {
            Some((_, capabilities)) => capabilities.push(need.capability),
            None => missing.push((need.needed_for, vec![need.capability])),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let missing: Vec<String> = missing
        .iter()
        .map(|(what, capabilities)| format!("{what} needs JVMTI's {}", capabilities.join(" and ")))
        .collect();
    Err(AgentError::Refused(format!(
        "{}, which this JVM grants only to agents loaded at its start; start the JVM with \
         -agentpath:libopenprof_agent.so=... for these options (attached, cpu=samples, cpu=times, \
         wall=, lock= and heap= work)",
        missing.join("; ")
    )))
}

/// What a dump hands each engine: the calling thread's JNIEnv (null on a thread the VM does
/// not know), HPROF's report, and the step that first moves every engine's recorded data into
/// the report.
pub struct Dump<'a> {
    pub jni: *mut JNIEnv,
    pub report: &'a Mutex<Report>,
    pub collect: &'a dyn Fn(&mut Report),
}

/// A profiling mode. Every method has a default that does nothing, so an engine implements
/// only the moments it takes part in.
pub trait Engine: Any + Send + Sync {
    /// The capabilities it needs for these options (before it exists: a refusal must come
    /// before anything is set up).
    fn needs(options: &Options) -> Vec<Need>
    where
        Self: Sized;

    /// Points the JVMTI callbacks it handles at its own functions.
    fn callbacks(&self, _callbacks: &mut jvmtiEventCallbacks) {}

    /// The events it turns on once the callbacks are set.
    fn events(&self) -> Vec<jvmtiEvent> {
        Vec::new()
    }

    /// At VMInit, or at attach once the running threads are numbered. Returns a line for the
    /// attach report, if it has something to say.
    fn start(&self, _context: &Context, _jni: *mut JNIEnv) -> Option<String> {
        None
    }

    /// A Java thread began (called on that thread, once it is numbered).
    fn thread_started(&self, _context: &Context, _serial: u32, _name: &str, _group: &str) {}

    /// A class was prepared (called on the preparing thread).
    fn class_prepared(&self, _jni: *mut JNIEnv, _class: jclass) {}

    /// A Java thread ended (called on that thread).
    fn thread_ended(&self, _context: &Context, _serial: u32) {}

    /// How often it wants the agent's thread to come round, when more often than usual.
    fn period(&self, _context: &Context) -> Option<Duration> {
        None
    }

    /// On the agent's thread, each round.
    fn tick(&self, _context: &Context, _jni: *mut JNIEnv) {}

    /// Moves what it recorded since into HPROF's report (before anything is written to it).
    fn collect(&self, _context: &Context, _report: &mut Report) {}

    /// Writes its part of a dump (on kill -QUIT, at exit, or on a collector's command).
    fn dump(&self, _context: &Context, _dump: &Dump<'_>) {}

    /// Adds the TRACE serials its cumulative tables still refer to after a dump (the profile
    /// keeps those when it forgets stacks).
    fn traces_kept(&self, _kept: &mut std::collections::HashSet<u32>) {}

    /// At VMDeath, after the agent's thread has stopped and before the last dump.
    fn stop(&self, _context: &Context, _jni: *mut JNIEnv) {}

    /// What it is doing, for the attach report.
    fn describe(&self, _context: &Context) -> Option<String> {
        None
    }

    /// Whether it takes part in profiling sessions (`action=`): a session's stop pauses it
    /// and dumps it, a session's start resumes it.
    fn in_sessions(&self) -> bool {
        false
    }

    /// Stops taking data, at once and entirely: no timer armed, no event on, nothing left
    /// waiting. What it recorded stays for the dump that follows.
    fn pause(&self, _context: &Context) {}

    /// Takes data again for a new session with these options (its settings may differ from
    /// the last session's), from zero. Returns what it does now, in words.
    fn resume(
        &self,
        _context: &Context,
        _jni: *mut JNIEnv,
        _options: &Options,
    ) -> Result<Option<String>, AgentError> {
        Ok(None)
    }
}

/// At most this many engines in one run: one of each kind.
const MAX_ENGINES: usize = 16;

/// The engines of this run, in the order they dump: those the options chose at the start, then
/// any a profiling session added. Append-only, so callbacks read it without a lock.
static ENGINES: [OnceLock<Box<dyn Engine>>; MAX_ENGINES] = [const { OnceLock::new() }; MAX_ENGINES];
/// How many of `ENGINES` are set (each is set before the count counts it).
static ENGINE_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Held while engines are added: one adder at a time.
static ADDING: Mutex<()> = Mutex::new(());

/// Makes the engines of this run the ones callbacks find; once per process.
pub fn install(engines: Vec<Box<dyn Engine>>) -> Result<(), AgentError> {
    if ENGINE_COUNT.load(Ordering::Acquire) != 0 {
        return Err(AgentError::Refused(
            "the agent is loaded twice; load it once".into(),
        ));
    }
    add(engines)
}

/// Adds engines to the run (a profiling session that asks for a kind the run did not have).
pub fn add(engines: Vec<Box<dyn Engine>>) -> Result<(), AgentError> {
    let _adding = lock(&ADDING);
    let count = ENGINE_COUNT.load(Ordering::Acquire);
    if count + engines.len() > MAX_ENGINES {
        return Err(AgentError::Refused("too many engines in one run".into()));
    }
    for (slot, engine) in ENGINES[count..].iter().zip(engines) {
        if slot.set(engine).is_err() {
            return Err(AgentError::Refused("the engines were added twice".into()));
        }
        ENGINE_COUNT.fetch_add(1, Ordering::AcqRel);
    }
    Ok(())
}

/// Every engine of this run.
pub fn all() -> impl Iterator<Item = &'static dyn Engine> + Clone {
    ENGINES[..ENGINE_COUNT.load(Ordering::Acquire)]
        .iter()
        .filter_map(|slot| slot.get().map(Box::as_ref))
}

/// The engine of type `E`, when the run has one.
pub fn running<E: Engine>() -> Option<&'static E> {
    all().find_map(|engine| (engine as &dyn Any).downcast_ref::<E>())
}
