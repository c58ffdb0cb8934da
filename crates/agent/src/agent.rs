//! The agent inside the JVM: start-up from the option string, the JVMTI event callbacks, the
//! agent's own thread that drains samples and writes records, and the dumps.

mod commands;

use crate::sync::lock;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use jvmti_bindings::sys::jni::{JavaVMAttachArgs, JNI_ERR, JNI_OK, JNI_VERSION_1_6};
use jvmti_bindings::sys::jvmti::{
    event_callbacks_size_for_feature, JVMTI_EVENT_CLASS_LOAD, JVMTI_EVENT_CLASS_PREPARE,
    JVMTI_EVENT_COMPILED_METHOD_LOAD, JVMTI_EVENT_DATA_DUMP_REQUEST, JVMTI_EVENT_EXCEPTION,
    JVMTI_EVENT_EXCEPTION_CATCH, JVMTI_EVENT_GARBAGE_COLLECTION_FINISH,
    JVMTI_EVENT_GARBAGE_COLLECTION_START, JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT,
    JVMTI_EVENT_MONITOR_CONTENDED_ENTER, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
    JVMTI_EVENT_MONITOR_WAIT, JVMTI_EVENT_MONITOR_WAITED, JVMTI_EVENT_OBJECT_FREE,
    JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, JVMTI_EVENT_THREAD_END, JVMTI_EVENT_THREAD_START,
    JVMTI_EVENT_VM_DEATH, JVMTI_EVENT_VM_INIT, JVMTI_THREAD_STATE_INTERRUPTED,
    JVMTI_THREAD_STATE_RUNNABLE, JVMTI_THREAD_STATE_SUSPENDED,
};
use openprof_format::hprof_text::{CpuTableKind, SamplerReport};
use openprof_format::options::{CpuMode, CpuTimer, HeapMode, Options, Sampler, MAX_DEPTH};

use crate::heap_sites::{AllocSampler, SampledAllocation};
use crate::jvmti::{
    jclass, jint, jmethodID, jobject, jthread, jvmtiCapabilities, jvmtiEnv, jvmtiEventCallbacks,
    JNIEnv, JavaVM, Jvmti,
};
use crate::methods::Location;
use crate::net::{NetConfig, NetSink};
use crate::output::{hprof_date, Output};
use crate::profile::CpuProfile;
use crate::ring::SampleRing;
use crate::signals::{self, CpuClock, InstallError, ThreadTimer};
use crate::threads::Threads;
use crate::times::MethodTimes;
use crate::tracer::{MonitorEvent, Tracer};
use commands::SamplingControl;
use openprof_format::options::OutputFormat;
use openprof_format::wire::Command;

/// How long the exiting JVM waits for the collector to acknowledge the last data.
const NET_GOODBYE_PATIENCE: Duration = Duration::from_secs(10);
/// How the agent's thread drains the ring when sampling with signals.
const DRAIN_PERIOD: Duration = Duration::from_millis(20);

/// A sample as it left the ring: kernel thread id, frame count or error code, frames.
type RawSample = (i32, i32, Vec<(jmethodID, Location)>);

/// How samples are taken in this run.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SamplerKind {
    /// No CPU samples (format=x traces instead).
    None,
    Signals,
    /// JVMTI GetAllStackTraces from the agent's thread, with why.
    Jvmti {
        note: String,
    },
}

struct State {
    profile: CpuProfile,
    output: Output,
}

pub struct Agent {
    jvmti: Jvmti,
    vm: *mut JavaVM,
    options: Options,
    sampler: SamplerKind,
    /// HPROF text output (format=a); `None` when tracing (format=x).
    state: Option<Mutex<State>>,
    tracer: Option<Tracer>,
    /// cpu=times in HPROF text output.
    times: Option<MethodTimes>,
    /// heap=sites|all: the sampled allocations.
    allocations: Option<AllocSampler>,
    /// heap=dump|all.
    heap_dumps: bool,
    threads: Mutex<Threads>,
    stop: Mutex<bool>,
    wake: Condvar,
    worker: Mutex<Option<JoinHandle<()>>>,
    dying: AtomicBool,
    /// The clock new threads get, and why it is not the one asked for, if it is not.
    clock: Mutex<(CpuClock, Option<String>)>,
    /// The agent thread's CPU time so far, and the part of it already reported in a dump.
    worker_cpu_nanos: AtomicU64,
    worker_cpu_reported: AtomicU64,
    /// net=: the connection to the collector.
    net: Option<Arc<NetSink>>,
    /// Commands from the collector waiting for the agent's thread.
    commands: Mutex<VecDeque<(u32, Command)>>,
    sampling: SamplingControl,
    /// mpt=, or net= (specifications may arrive from the collector).
    mpt: Option<crate::mpt::Mpt>,
}

// SAFETY: the JavaVM pointer is valid for the life of the process and its invoke interface is
// thread-safe; everything else is synchronised by the mutexes and atomics above.
unsafe impl Send for Agent {}
// SAFETY: as above.
unsafe impl Sync for Agent {}

static AGENT: OnceLock<Agent> = OnceLock::new();
/// Set when a callback panicked: the agent then stays out of the JVM's way.
static DISABLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// True on the agent's own thread, which must not be profiled.
    static IS_AGENT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a callback body, keeping any panic on this side of the FFI boundary: the first one is
/// reported and the agent stops profiling; the JVM carries on.
pub(crate) fn guarded(what: &str, body: impl FnOnce()) {
    if DISABLED.load(Ordering::Acquire) {
        return;
    }
    if catch_unwind(AssertUnwindSafe(body)).is_err() && !DISABLED.swap(true, Ordering::AcqRel) {
        signals::set_enabled(false);
        eprintln!(
            "openprof ERROR: internal error in {what}; profiling is off for the rest of this run"
        );
    }
}

/// Method parameter tracing, when it is on.
pub(crate) fn mpt() -> Option<&'static crate::mpt::Mpt> {
    agent().and_then(|agent| agent.mpt.as_ref())
}

/// The calling thread's JNIEnv, when the agent runs and the thread is attached.
pub(crate) fn thread_jni() -> Option<*mut JNIEnv> {
    agent()
        .map(|agent| current_jni(agent.vm))
        .filter(|jni| !jni.is_null())
}

fn agent() -> Option<&'static Agent> {
    AGENT.get()
}

/// When the agent starts: with the JVM (Agent_OnLoad, before VMInit) or in a JVM that is
/// already running (Agent_OnAttach, in JVMTI's live phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    OnLoad,
    Live,
}

/// Agent_OnLoad: parse and check the options, set everything up, or refuse to start the JVM.
pub fn on_load(vm: *mut JavaVM, options_text: &str) -> jint {
    match start(vm, options_text, Phase::OnLoad) {
        Ok(_) => JNI_OK,
        Err(message) => refuse(Phase::OnLoad, &message),
    }
}

/// Agent_OnAttach: the same start in the live phase. A refusal leaves the JVM running as it
/// was; what happened is also written where `openprof attach` reads it (the attach protocol
/// carries only Agent_OnAttach's return code back).
pub fn on_attach(vm: *mut JavaVM, options_text: &str) -> jint {
    match start(vm, options_text, Phase::Live) {
        Ok(summary) => {
            write_attach_report(&summary);
            JNI_OK
        }
        Err(message) => refuse(Phase::Live, &message),
    }
}

/// Says why the agent does not start, where the phase's user looks for it, and returns the
/// refusal for the JVM.
pub fn refuse(phase: Phase, message: &str) -> jint {
    eprintln!("openprof ERROR: {message}");
    if phase == Phase::Live {
        write_attach_report(&format!("openprof ERROR: {message}"));
    }
    JNI_ERR
}

/// Leaves what the attach did in `/tmp/.openprof_attach<pid>` (the JVM's own /tmp and pid,
/// which `openprof attach` reaches through /proc, as it reaches the attach socket). Created
/// afresh and private to the JVM's user; a file someone else put there is not written through.
fn write_attach_report(report: &str) {
    use openprof_format::private_file::{create_private, AtALink};
    use std::io::Write;
    let path = format!(
        "/tmp/{}{}",
        openprof_format::options::ATTACH_REPORT_FILE_PREFIX,
        std::process::id()
    );
    // A stale report of an earlier attach is ours to replace; /tmp's sticky bit keeps anyone
    // else's, and then no report is written (`openprof attach` says so).
    if let Ok(mut file) = create_private(std::path::Path::new(&path), AtALink::Replace) {
        let _ = writeln!(file, "{report}");
    }
}

/// Parses the options; `help` prints the usage table and ends the process, as HPROF's does,
/// except in a running JVM, which the agent must not end.
fn checked_options(options_text: &str, phase: Phase) -> Result<Options, String> {
    let options = Options::parse(options_text).map_err(|error| error.to_string())?;
    if options.help {
        if phase == Phase::Live {
            return Err(
                "help would end the JVM after printing the options; `openprof attach --help` \
                 and `java -agentpath:libopenprof_agent.so=help -version` list them"
                    .into(),
            );
        }
        print!("{}", Options::help_text());
        std::process::exit(0);
    }
    options
        .refuse_unbuilt()
        .map_err(|error| error.to_string())?;
    Ok(options)
}

/// A JVMTI capability the options need, and which option needs it (to name it in a refusal).
struct Need {
    capability: &'static str,
    needed_for: &'static str,
    set: fn(&mut jvmtiCapabilities),
    has: fn(&jvmtiCapabilities) -> bool,
}

macro_rules! need {
    ($capability:ident, $set:ident, $needed_for:expr) => {
        Need {
            capability: stringify!($capability),
            needed_for: $needed_for,
            set: |capabilities| capabilities.$set(true),
            has: |capabilities| capabilities.$capability(),
        }
    };
}

/// The capabilities the options call for.
fn capability_needs(options: &Options) -> Vec<Need> {
    let mut needs = vec![
        need!(
            can_get_line_numbers,
            set_can_get_line_numbers,
            "line numbers in traces"
        ),
        need!(
            can_get_source_file_name,
            set_can_get_source_file_name,
            "source file names in traces"
        ),
        // HotSpot keeps debug information at every instruction, not only at safepoints, once an
        // agent can receive CompiledMethodLoad events: without it sampled frames in compiled
        // code would be attributed to the nearest safepoint.
        need!(
            can_generate_compiled_method_load_events,
            set_can_generate_compiled_method_load_events,
            "exact frames in compiled code"
        ),
    ];
    let tracing = options.format == OutputFormat::Xml;
    let timing = options.cpu == Some(CpuMode::Times);
    if timing {
        needs.push(need!(
            can_generate_method_entry_events,
            set_can_generate_method_entry_events,
            "cpu=times"
        ));
        needs.push(need!(
            can_generate_method_exit_events,
            set_can_generate_method_exit_events,
            "cpu=times"
        ));
    }
    if matches!(
        options.heap_profile(),
        Some(HeapMode::Sites | HeapMode::All)
    ) {
        needs.push(need!(can_tag_objects, set_can_tag_objects, "heap=sites"));
        needs.push(need!(
            can_generate_sampled_object_alloc_events,
            set_can_generate_sampled_object_alloc_events,
            "heap=sites"
        ));
        needs.push(need!(
            can_generate_object_free_events,
            set_can_generate_object_free_events,
            "heap=sites"
        ));
    }
    if tracing {
        needs.push(need!(can_tag_objects, set_can_tag_objects, "format=x"));
        needs.push(need!(
            can_generate_exception_events,
            set_can_generate_exception_events,
            "format=x (exception elements)"
        ));
        needs.push(need!(
            can_generate_garbage_collection_events,
            set_can_generate_garbage_collection_events,
            "format=x (GC elements)"
        ));
        if options.monitor {
            needs.push(need!(
                can_generate_monitor_events,
                set_can_generate_monitor_events,
                "monitor=y"
            ));
        }
        if timing {
            needs.push(need!(
                can_access_local_variables,
                set_can_access_local_variables,
                "format=x with cpu=times (object ids of `this`)"
            ));
        }
    }
    needs
}

/// The refusal when some needed capability is not to be had now, naming what needs it.
fn refuse_missing(needs: &[Need], potential: &jvmtiCapabilities) -> Result<(), String> {
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
    Err(format!(
        "{}, which this JVM grants only to agents loaded at its start; start the JVM with \
         -agentpath:libopenprof_agent.so=... for these options (attached, cpu=samples and heap= \
         work)",
        missing.join("; ")
    ))
}

/// Keeps this library loaded for the rest of the process. HotSpot unloads an agent whose
/// Agent_OnAttach fails; once a signal handler, JVMTI callbacks or threads point into the
/// library, unloading it would leave them pointing at unmapped code.
fn pin_library() -> Result<(), String> {
    // SAFETY: Dl_info is plain C data; dladdr fills it for an address inside this library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the dynamic loader's tables.
    let found = unsafe { libc::dladdr(pin_library as *const () as *const c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err("can't find the agent library's own path to keep it loaded".into());
    }
    // SAFETY: RTLD_NOLOAD only looks up the library already loaded; RTLD_NODELETE marks it
    // never to be unloaded. The handle is deliberately never closed.
    let handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    if handle.is_null() {
        return Err("can't keep the agent library loaded (dlopen RTLD_NODELETE failed)".into());
    }
    Ok(())
}

/// Sets the agent up from its options, at either phase; returns what it set up, in words.
fn start(vm: *mut JavaVM, options_text: &str, phase: Phase) -> Result<String, String> {
    let options = checked_options(options_text, phase)?;
    if AGENT.get().is_some() {
        return Err(
            "openprof is already loaded in this JVM; it profiles once per JVM (its profile is \
             written at exit, or on kill -QUIT)"
                .into(),
        );
    }
    let jvmti = Jvmti::from_vm(vm).ok_or("this JVM offers no JVMTI 1.2 environment")?;
    let result = set_up(vm, jvmti, options, phase);
    if result.is_err() && phase == Phase::Live && AGENT.get().is_none() {
        // The JVM runs on: give back the environment, and with it any callback and event.
        let _ = jvmti.dispose();
    }
    result
}

fn set_up(vm: *mut JavaVM, jvmti: Jvmti, options: Options, phase: Phase) -> Result<String, String> {
    let needs = capability_needs(&options);
    let mut capabilities = jvmtiCapabilities::default();
    if phase == Phase::Live {
        let potential = jvmti
            .potential_capabilities()
            .map_err(|error| format!("can't ask the JVM what it can do: {error}"))?;
        refuse_missing(&needs, &potential)?;
        // Only to tell which running Java thread is which kernel thread (see
        // `register_running_threads`); without it the threads are still sampled.
        capabilities.set_can_get_thread_cpu_time(potential.can_get_thread_cpu_time());
        // From here on signal handlers, callbacks and threads point into this library.
        pin_library()?;
    }
    for need in &needs {
        (need.set)(&mut capabilities);
    }
    let tracing = options.format == OutputFormat::Xml;
    let timing = options.cpu == Some(CpuMode::Times);
    let heap = options.heap_profile();
    let sites = matches!(heap, Some(HeapMode::Sites | HeapMode::All));
    jvmti
        .add_capabilities(&capabilities)
        .map_err(|error| format!("the JVM refused the capabilities openprof needs: {error}"))?;

    let sampler = if options.cpu == Some(CpuMode::Samples) {
        choose_sampler(vm, &options, phase)?
    } else {
        SamplerKind::None
    };
    let clock = match options.cputimer {
        CpuTimer::Perf => CpuClock::PerfTaskClock,
        CpuTimer::Posix => CpuClock::PosixCpuTimer,
    };
    let monitor = options.monitor;
    let net = match &options.net {
        Some(address) => {
            let token = options.token_value().map_err(|error| error.to_string())?;
            let tls = match &options.tls_ca {
                Some(ca) => Some(crate::net::tls_config(ca)?),
                None => None,
            };
            let format = match options.format {
                OutputFormat::Ascii => "a",
                OutputFormat::Binary => "b",
                OutputFormat::Xml => "x",
            };
            let hello = crate::net::hello(uuid::Uuid::new_v4(), format, options.to_string());
            let identity = openprof_format::handshake::Identity::generate()
                .map_err(|error| format!("net=: {error}"))?;
            Some(Arc::new(NetSink::start(NetConfig {
                host: address.host.clone(),
                port: address.port,
                hello,
                credential: token,
                identity: Arc::new(identity),
                tls,
                max_queued_bytes: usize::try_from(options.net_buffer).unwrap_or(usize::MAX),
            })?))
        }
        None => None,
    };
    let mpt_wanted = options.mpt.is_some() || options.net.is_some();
    if tracing || mpt_wanted {
        crate::loaders::start(vm);
    }
    let (state, tracer) = if tracing {
        (None, Some(Tracer::start(jvmti, &options, net.clone())?))
    } else {
        let output = Output::create(&options, net.clone())?;
        // cpu=times frames carry no location, as in HPROF: no line numbers.
        let profile = CpuProfile::new(options.lineno && !timing);
        (Some(Mutex::new(State { profile, output })), None)
    };
    let times = (timing && !tracing).then(|| {
        let filters = options.filter_block().unwrap_or_default();
        MethodTimes::new(jvmti, filters, options.depth, options.thread)
    });
    let allocations = sites.then(|| AllocSampler::new(options.alloc_interval));
    let mpt = if mpt_wanted {
        let specs = options.mpt_specs().map_err(|error| error.to_string())?;
        Some(crate::mpt::Mpt::new(vm, specs, !tracing)?)
    } else {
        None
    };
    if let Some(allocations) = &allocations {
        jvmti
            .set_heap_sampling_interval(allocations.interval() as jint)
            .map_err(|error| format!("can't sample allocations: {error}"))?;
    }
    let agent = Agent {
        jvmti,
        vm,
        sampler,
        state,
        tracer,
        times,
        allocations,
        heap_dumps: matches!(heap, Some(HeapMode::Dump | HeapMode::All)),
        threads: Mutex::new(Threads::new(!tracing)),
        stop: Mutex::new(false),
        wake: Condvar::new(),
        worker: Mutex::new(None),
        dying: AtomicBool::new(false),
        clock: Mutex::new((clock, None)),
        worker_cpu_nanos: AtomicU64::new(0),
        worker_cpu_reported: AtomicU64::new(0),
        sampling: SamplingControl::new(options.depth),
        options,
        net,
        commands: Mutex::new(VecDeque::new()),
        mpt,
    };
    if AGENT.set(agent).is_err() {
        return Err("the agent is loaded twice; load it once".into());
    }
    if let Some(net) = AGENT.get().and_then(|started| started.net.as_ref()) {
        net.set_handler(Box::new(|serial, command| {
            if let Some(started) = AGENT.get() {
                started.queue_command(serial, command);
            }
        }));
    }

    let mut callbacks = jvmtiEventCallbacks::default();
    callbacks.VMInit = Some(on_vm_init);
    callbacks.VMDeath = Some(on_vm_death);
    callbacks.ThreadStart = Some(on_thread_start);
    callbacks.ThreadEnd = Some(on_thread_end);
    callbacks.ClassPrepare = Some(on_class_prepare);
    callbacks.ClassLoad = Some(on_class_load);
    callbacks.DataDumpRequest = Some(on_data_dump_request);
    callbacks.CompiledMethodLoad = Some(on_compiled_method_load);
    callbacks.MethodEntry = Some(on_method_entry);
    callbacks.MethodExit = Some(on_method_exit);
    callbacks.Exception = Some(on_exception);
    callbacks.ExceptionCatch = Some(on_exception_catch);
    callbacks.MonitorContendedEnter = Some(on_monitor_contended_enter);
    callbacks.MonitorContendedEntered = Some(on_monitor_contended_entered);
    callbacks.MonitorWait = Some(on_monitor_wait);
    callbacks.MonitorWaited = Some(on_monitor_waited);
    callbacks.GarbageCollectionStart = Some(on_gc_start);
    callbacks.GarbageCollectionFinish = Some(on_gc_finish);
    callbacks.SampledObjectAlloc = Some(on_sampled_object_alloc);
    callbacks.ObjectFree = Some(on_object_free);
    jvmti
        .set_event_callbacks_sized(&callbacks, event_callbacks_size_for_feature(11))
        .map_err(|error| error.to_string())?;
    if sites {
        for event in [JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, JVMTI_EVENT_OBJECT_FREE] {
            jvmti
                .set_event(event, true)
                .map_err(|error| error.to_string())?;
        }
    }
    if timing && !tracing {
        for event in [JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT] {
            jvmti
                .set_event(event, true)
                .map_err(|error| error.to_string())?;
        }
    }
    if tracing {
        let mut events = vec![
            JVMTI_EVENT_EXCEPTION,
            JVMTI_EVENT_EXCEPTION_CATCH,
            JVMTI_EVENT_GARBAGE_COLLECTION_START,
            JVMTI_EVENT_GARBAGE_COLLECTION_FINISH,
        ];
        if timing {
            events.extend([JVMTI_EVENT_METHOD_ENTRY, JVMTI_EVENT_METHOD_EXIT]);
        }
        if monitor {
            events.extend([
                JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
                JVMTI_EVENT_MONITOR_CONTENDED_ENTERED,
                JVMTI_EVENT_MONITOR_WAIT,
                JVMTI_EVENT_MONITOR_WAITED,
            ]);
        }
        for event in events {
            jvmti
                .set_event(event, true)
                .map_err(|error| error.to_string())?;
        }
    }
    for event in [
        JVMTI_EVENT_VM_INIT,
        JVMTI_EVENT_VM_DEATH,
        JVMTI_EVENT_THREAD_START,
        JVMTI_EVENT_THREAD_END,
        JVMTI_EVENT_CLASS_LOAD,
        JVMTI_EVENT_CLASS_PREPARE,
        JVMTI_EVENT_DATA_DUMP_REQUEST,
        JVMTI_EVENT_COMPILED_METHOD_LOAD,
    ] {
        jvmti
            .set_event(event, true)
            .map_err(|error| error.to_string())?;
    }
    match phase {
        // VMInit does the rest.
        Phase::OnLoad => Ok(String::new()),
        // VMInit is long past: do now what it does, on this (the attach listener's) thread.
        Phase::Live => {
            let agent = AGENT.get().ok_or("the agent was not set up")?;
            let jni = current_jni(vm);
            if jni.is_null() {
                return Err("the attaching thread has no JNI environment".into());
            }
            let mut threads = String::new();
            with_local_frame(jni, || threads = agent.begin(jni, None));
            Ok(agent.attach_summary(&threads))
        }
    }
}

fn choose_sampler(vm: *mut JavaVM, options: &Options, phase: Phase) -> Result<SamplerKind, String> {
    if options.sampler == Sampler::GetAllStackTraces {
        return Ok(SamplerKind::Jvmti {
            note: "sampler=jvmti asked for; samples are biased towards safepoints".into(),
        });
    }
    // At start-up nothing else can have taken SIGPROF yet; in a running JVM another profiler
    // may have, and replacing its handler would break it.
    if phase == Phase::Live && signals::sigprof_taken() {
        return Ok(SamplerKind::Jvmti {
            note: "SIGPROF already has a handler in this JVM (another profiler?); sampling with \
                   GetAllStackTraces, biased towards safepoints"
                .into(),
        });
    }
    // Up to 4096 samples (two seconds of two cores sampled every millisecond, a hundred drains'
    // worth), fewer for deep stacks so that the ring stays within 16 MiB.
    let depth = options.depth.clamp(1, MAX_DEPTH) as usize;
    let frame_bytes = std::mem::size_of::<crate::ring::CallFrame>();
    let slots = (16 << 20) / (depth * frame_bytes);
    match signals::install(vm, SampleRing::new(slots.clamp(64, 4096), depth)) {
        Ok(()) => Ok(SamplerKind::Signals),
        Err(InstallError::NoAsyncGetCallTrace) => Ok(SamplerKind::Jvmti {
            note: "AsyncGetCallTrace not found in this JVM; samples are biased towards safepoints"
                .into(),
        }),
        Err(InstallError::Sigaction(error)) => {
            Err(format!("can't install the SIGPROF handler: {error}"))
        }
    }
}

impl Agent {
    fn samples_with_signals(&self) -> bool {
        self.sampler == SamplerKind::Signals && self.options.depth > 0
    }

    /// Numbers a thread seen for the first time (its serial number is kept in its JVMTI thread
    /// word) and returns its serial; `kernel_id` is its kernel thread, when known.
    fn register_thread(&self, thread: jthread, kernel_id: Option<i32>) -> u32 {
        let (name, group) = self.jvmti.thread_names(thread).unwrap_or_default();
        let serial = {
            // Checked and numbered under one lock: at attach, the attaching thread and the
            // thread's own ThreadStart may both see it first.
            let mut threads = lock(&self.threads);
            let known = self.jvmti.thread_word(thread).unwrap_or(0) as u32;
            if known != 0 {
                if let Some(kernel_id) = kernel_id {
                    threads.set_kernel_id(known, kernel_id);
                }
                return known;
            }
            let serial = threads.start(name.clone(), group.clone(), kernel_id);
            let _ = self.jvmti.set_thread_word(thread, serial as usize);
            serial
        };
        if let Some(tracer) = &self.tracer {
            tracer.thread_start(serial, &name, &group);
        }
        serial
    }

    /// Starts a CPU timer for a thread of this process, unless it has one or nothing is sampled
    /// with signals.
    fn time_thread(&self, kernel_id: i32) {
        if !self.samples_with_signals() || self.dying.load(Ordering::Acquire) {
            return;
        }
        let mut threads = lock(&self.threads);
        if !threads.wants_timer(kernel_id) {
            return;
        }
        match self.start_timer(kernel_id) {
            Ok(timer) => {
                threads.attach_timer(kernel_id, timer);
            }
            // A thread that ended meanwhile needs no timer and no message.
            Err(_) if signals::task_cpu_nanos(kernel_id).is_none() => {}
            Err(error) => eprintln!("openprof: can't sample thread {kernel_id}: {error}"),
        }
    }

    /// A CPU timer for a thread. When the kernel refuses perf events, every thread from then on
    /// gets a POSIX CPU timer, and the output says why.
    fn start_timer(&self, kernel_id: i32) -> std::io::Result<ThreadTimer> {
        let interval = self.options.interval_ms;
        let clock = lock(&self.clock).0;
        match ThreadTimer::start(clock, interval, kernel_id) {
            // A thread that is gone says nothing about the kernel's perf events.
            Err(error)
                if clock == CpuClock::PerfTaskClock
                    && signals::task_cpu_nanos(kernel_id).is_some() =>
            {
                *lock(&self.clock) = (
                    CpuClock::PosixCpuTimer,
                    Some(format!(
                        "perf_event_open failed ({error}); POSIX CPU timers sample at most once per scheduler tick"
                    )),
                );
                ThreadTimer::start(CpuClock::PosixCpuTimer, interval, kernel_id)
            }
            result => result,
        }
    }

    /// What follows VMInit, or the attach: number the threads already running, name the
    /// methods of the classes already loaded (AsyncGetCallTrace needs their jmethodIDs), start
    /// sampling and the agent's thread. `vm_init_thread` is the thread VMInit came on, which
    /// then gets its timer on itself; when attaching there is none. Returns what was set up.
    fn begin(&self, jni: *mut JNIEnv, vm_init_thread: Option<jthread>) -> String {
        if let Some(thread) = vm_init_thread {
            let current = signals::current_thread_id();
            self.register_thread(thread, Some(current));
            self.time_thread(current);
        }
        if let Ok(classes) = self.jvmti.loaded_classes() {
            for class in classes {
                let _ = self.jvmti.preload_method_ids(class);
                delete_local_ref(jni, class);
            }
        }
        if let (Some(mpt), Some(sink)) = (&self.mpt, agent()) {
            if let Err(error) = mpt.start(jni, sink) {
                eprintln!("openprof: method parameter tracing is off: {error}");
            }
        }
        let threads = self.jvmti.all_threads().unwrap_or_default();
        let summary = match vm_init_thread {
            // Threads started before VMInit: recorded, but their kernel ids are unknown, so they
            // are not sampled (they are the VM's housekeeping threads).
            Some(_) => {
                for other in &threads {
                    self.register_thread(*other, None);
                }
                String::new()
            }
            None => self.register_running_threads(&threads),
        };
        for thread in threads {
            delete_local_ref(jni, thread);
        }
        if self.samples_with_signals() {
            signals::set_enabled(true);
        }
        if let Some(tracer) = &self.tracer {
            let thread = vm_init_thread.or_else(|| self.jvmti.current_thread().ok());
            let serial = thread.map_or(0, |thread| self.jvmti.thread_word(thread).unwrap_or(0));
            tracer.runtime_init(serial as u32);
        }
        let spawned = std::thread::Builder::new()
            .name("openprof".into())
            .spawn(|| {
                if let Some(agent) = agent() {
                    guarded("the agent thread", || agent.run_worker());
                }
            });
        match spawned {
            Ok(handle) => *lock(&self.worker) = Some(handle),
            Err(error) => eprintln!("openprof: can't start the agent thread: {error}"),
        }
        summary
    }

    /// What an attach set up, for `openprof attach` to print.
    fn attach_summary(&self, threads: &str) -> String {
        let mut lines = vec![format!("openprof agent attached with {}", self.options)];
        if let Some(net) = &self.options.net {
            lines.push(format!(
                "sending to the collector at {}:{}",
                net.host, net.port
            ));
        } else {
            let path = match &self.state {
                Some(state) => lock(state).output.path().to_path_buf(),
                None => self.options.output_file().into(),
            };
            // The JVM's working directory is not the attaching command's.
            let path = std::path::absolute(&path).unwrap_or(path);
            let when = if self.options.doe {
                "at exit and on each kill -QUIT"
            } else {
                "on each kill -QUIT"
            };
            lines.push(format!("profile: {} (written {when})", path.display()));
        }
        match &self.sampler {
            SamplerKind::Signals => lines.push(format!(
                "sampling with AsyncGetCallTrace every {} ms of each thread's CPU time ({})",
                self.options.interval_ms,
                lock(&self.clock).0.describe()
            )),
            SamplerKind::Jvmti { note } => {
                lines.push(format!("sampling with GetAllStackTraces: {note}"))
            }
            SamplerKind::None => {}
        }
        lines.push(threads.to_string());
        lines.join("\n")
    }

    /// At attach: numbers the Java threads already running and, sampling with signals, starts
    /// a CPU timer for every thread of the process. A thread cannot start a timer for itself
    /// that late, and JVMTI does not say which kernel thread a Java thread is; so each Java
    /// thread is matched to the kernel thread whose CPU time (read just before and just after)
    /// brackets the CPU time JVMTI gives for it, the same clock. Unmatched Java threads are
    /// still sampled, their samples only lack a thread; kernel threads that prove not to be
    /// the VM's lose their timers at their first sample.
    fn register_running_threads(&self, threads: &[jthread]) -> String {
        let read_tasks = || -> Vec<(i32, Option<u64>)> {
            signals::process_threads()
                .unwrap_or_default()
                .into_iter()
                .map(|id| (id, signals::task_cpu_nanos(id)))
                .collect()
        };
        let before = read_tasks();
        let java: Vec<Option<u64>> = threads
            .iter()
            .map(|thread| self.jvmti.thread_cpu_time(*thread).ok())
            .collect();
        let after: std::collections::HashMap<i32, Option<u64>> = read_tasks().into_iter().collect();
        let brackets: Vec<(i32, u64, u64)> = before
            .iter()
            .filter_map(|(id, early)| Some((*id, (*early)?, (*after.get(id)?)?)))
            .collect();
        let matches = crate::threads::match_by_cpu_time(&java, &brackets);
        for (thread, kernel_id) in threads.iter().zip(&matches) {
            self.register_thread(*thread, *kernel_id);
        }
        let matched = matches.iter().flatten().count();
        let timed_before = lock(&self.threads).timer_count();
        for (kernel_id, _) in &before {
            self.time_thread(*kernel_id);
        }
        let timed = lock(&self.threads)
            .timer_count()
            .saturating_sub(timed_before);
        let mut summary = format!(
            "{} Java threads were running; {matched} of them matched to their kernel threads",
            threads.len()
        );
        if self.samples_with_signals() {
            summary.push_str(&format!(
                "; CPU timers started on {timed} of the {} threads of the process",
                before.len()
            ));
        }
        summary
    }

    /// The agent's thread: drains the ring (or samples through JVMTI) and writes thread records.
    fn run_worker(&self) {
        IS_AGENT_THREAD.with(|flag| flag.set(true));
        let Some(jni) = attach_current_thread(self.vm) else {
            eprintln!("openprof: can't attach the agent thread to the JVM; no samples");
            return;
        };
        let period = match self.sampler {
            SamplerKind::Signals | SamplerKind::None => DRAIN_PERIOD,
            SamplerKind::Jvmti { .. } => Duration::from_millis(self.options.interval_ms.into()),
        };
        loop {
            {
                let stop = lock(&self.stop);
                let (stop, _) = self
                    .wake
                    .wait_timeout_while(stop, period, |stop| !*stop)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if *stop {
                    break;
                }
            }
            with_local_frame(jni, || {
                if matches!(self.sampler, SamplerKind::Jvmti { .. }) && self.options.depth > 0 {
                    self.sample_all_threads();
                }
                if let Some(state) = &self.state {
                    self.collect(&mut lock(state));
                }
                if let Some(tracer) = &self.tracer {
                    tracer.emit_gcs(|| heap_figures(jni));
                    tracer.flush();
                }
                if self.net.is_some() {
                    self.run_commands(jni);
                }
            });
            self.worker_cpu_nanos
                .store(signals::thread_cpu_nanos(), Ordering::Relaxed);
        }
        // SAFETY: this thread attached itself above and holds no JNI references across this.
        unsafe { ((**self.vm).DetachCurrentThread)(self.vm) };
    }

    /// HPROF's own sampling: the stacks of all runnable threads, from a JVMTI call that waits for
    /// a safepoint.
    fn sample_all_threads(&self) {
        let mut samples: Vec<(u32, Vec<(jmethodID, Location)>)> = Vec::new();
        let _ = self
            .jvmti
            .with_all_stack_traces(self.options.depth, |infos| {
                for info in infos {
                    let runnable = info.state & JVMTI_THREAD_STATE_RUNNABLE != 0;
                    let held = info.state
                        & (JVMTI_THREAD_STATE_SUSPENDED | JVMTI_THREAD_STATE_INTERRUPTED)
                        != 0;
                    let serial = self.jvmti.thread_word(info.thread).unwrap_or(0) as u32;
                    if !runnable || held || info.frame_count <= 0 || serial == 0 {
                        continue;
                    }
                    // SAFETY: JVMTI filled `frame_count` frames at `frame_buffer`.
                    let frames = unsafe {
                        std::slice::from_raw_parts(info.frame_buffer, info.frame_count as usize)
                    };
                    let frames = frames
                        .iter()
                        .map(|frame| {
                            let location = if frame.location >= 0 {
                                Location::Bytecode(frame.location)
                            } else {
                                Location::Native
                            };
                            (frame.method, location)
                        })
                        .collect();
                    samples.push((serial, frames));
                }
            });
        let Some(state) = &self.state else { return };
        let mut state = lock(state);
        for (serial, frames) in samples {
            let thread = self.options.thread.then_some(serial);
            state
                .profile
                .add_sample(self.jvmti, thread, frames.into_iter());
        }
    }

    /// A sampled allocation, on the allocating thread: its stack and class are noted, then the
    /// object is tagged so that its death is seen.
    fn sampled_allocation(&self, thread: jthread, object: jobject, class: jclass, size: i64) {
        let Some(allocations) = &self.allocations else {
            return;
        };
        let frames = if self.options.depth == 0 {
            Vec::new()
        } else {
            self.jvmti
                .stack_trace(thread, self.options.depth)
                .unwrap_or_default()
                .into_iter()
                .map(|frame| {
                    let location = if frame.location >= 0 {
                        Location::Bytecode(frame.location)
                    } else {
                        Location::Native
                    };
                    (frame.method, location)
                })
                .collect()
        };
        let Ok(class_signature) = self.jvmti.class_signature(class) else {
            return;
        };
        let thread_serial = self
            .options
            .thread
            .then(|| self.jvmti.thread_word(thread).unwrap_or(0) as u32)
            .filter(|serial| *serial != 0);
        let tag = allocations.next_tag();
        allocations.sampled(SampledAllocation {
            tag,
            class_signature,
            size: size.max(0) as u64,
            thread: thread_serial,
            frames,
        });
        let _ = self.jvmti.set_tag(object, tag);
    }

    /// Moves samples from the ring into the profile and writes pending thread records.
    fn collect(&self, state: &mut State) {
        if let Some(allocations) = &self.allocations {
            allocations.collect(self.jvmti, &mut state.profile);
        }
        let mut raw: Vec<RawSample> = Vec::new();
        if let Some(ring) = signals::ring() {
            ring.drain(|kernel_id, num_frames, frames| {
                let frames = frames
                    .iter()
                    .map(|frame| {
                        let location = match frame.lineno {
                            bci if bci >= 0 => Location::Bytecode(bci.into()),
                            -3 => Location::Native,
                            _ => Location::Unknown,
                        };
                        (frame.method_id, location)
                    })
                    .collect();
                raw.push((kernel_id, num_frames, frames));
            });
            state.profile.add_dropped(ring.take_dropped());
        }
        let (events, serials): (_, Vec<Option<u32>>) = {
            let mut threads = lock(&self.threads);
            let serials: Vec<Option<u32>> = raw
                .iter()
                .map(|(kernel_id, ..)| threads.serial_of_kernel_id(*kernel_id))
                .collect();
            // Threads timed at attach that are not the VM's (GC workers, native threads) have
            // shown it with their first sample: their timers go.
            for ((kernel_id, num_frames, _), serial) in raw.iter().zip(&serials) {
                if serial.is_none() && *num_frames == signals::NOT_A_VM_THREAD {
                    threads.stop_stranger_timer(*kernel_id);
                }
            }
            // And those that ended, before their kernel ids go to new threads.
            threads.stop_gone_stranger_timers(|kernel_id| {
                signals::task_cpu_nanos(kernel_id).is_some()
            });
            (threads.take_pending(), serials)
        };
        let depth = self.sampling.max_depth.load(Ordering::Relaxed) as usize;
        for ((_, num_frames, frames), serial) in raw.into_iter().zip(serials) {
            if !self.sampling.samples(serial) {
                continue;
            }
            if num_frames <= 0 {
                // A failed walk on a thread that is no Java thread the agent knows comes from a
                // thread timed at attach that is the VM's own (a compiler thread, say): no Java
                // code was interrupted, so it is neither a sample nor a failure to report.
                if serial.is_some() {
                    state.profile.add_failure(num_frames);
                }
            } else {
                let thread = serial.filter(|_| self.options.thread);
                state
                    .profile
                    .add_sample(self.jvmti, thread, frames.into_iter().take(depth));
            }
        }
        if let Err(error) = state.output.thread_events(&events) {
            eprintln!(
                "openprof: can't write {}: {error}",
                state.output.path().display()
            );
        }
    }

    fn sampler_report(
        &self,
        dump: &crate::profile::CpuDump,
        cost_us: BTreeMap<String, u64>,
    ) -> SamplerReport {
        let (sampler, note, clock) = match &self.sampler {
            SamplerKind::Signals => {
                let (clock, fallback) = lock(&self.clock).clone();
                (
                    "AsyncGetCallTrace",
                    fallback,
                    Some(clock.describe().to_string()),
                )
            }
            SamplerKind::Jvmti { note } => ("GetAllStackTraces", Some(note.clone()), None),
            SamplerKind::None => ("none", None, None),
        };
        SamplerReport {
            sampler: sampler.into(),
            note,
            clock,
            interval_ms: self.options.interval_ms,
            failed: dump.failed.clone(),
            dropped: dump.dropped,
            cost_us,
        }
    }

    /// What HPROF writes at a dump (on SIGQUIT and at exit): the CPU profile since the last
    /// dump, the allocation sites, a heap dump. `jni` is the calling thread's JNIEnv.
    fn dump(&self, jni: *mut JNIEnv) {
        if let Some(tracer) = &self.tracer {
            tracer.flush();
        }
        let Some(state) = &self.state else { return };
        if let Some(times) = &self.times {
            self.dump_times(state, times);
        } else if self.options.cpu == Some(CpuMode::Samples) {
            self.dump_samples(state);
        }
        if let Some(allocations) = &self.allocations {
            self.dump_sites(state, allocations);
        }
        if self.heap_dumps && !jni.is_null() {
            self.dump_heap(state, jni);
        }
        if let Some(mpt) = &self.mpt {
            let tables = mpt.tables();
            let mut state = lock(state);
            if let Err(error) = state.output.mpt(&tables) {
                eprintln!(
                    "openprof: can't write {}: {error}",
                    state.output.path().display()
                );
            }
        }
    }

    /// HPROF's SITES: every allocation site since the start, live figures after a full GC.
    fn dump_sites(&self, state: &Mutex<State>, allocations: &AllocSampler) {
        self.dump_sites_cut(state, allocations, self.options.cutoff);
    }

    /// SITES with a cutoff of its own (the ALLOC SITES command carries one).
    fn dump_sites_cut(&self, state: &Mutex<State>, allocations: &AllocSampler, cutoff: f64) {
        if self.options.verbose {
            eprint!("Dumping allocation sites ...");
        }
        // Live figures need the dead gone and their ObjectFree events posted: HotSpot posts
        // them lazily, and flushes them when the event is (re)enabled.
        let _ = self.jvmti.force_garbage_collection();
        let _ = self.jvmti.set_event(JVMTI_EVENT_OBJECT_FREE, true);
        let mut state = lock(state);
        self.collect(&mut state);
        let (sites, _samples) = allocations.sites();
        let table = openprof_format::hprof_text::SitesTable::rank(hprof_date(), sites, cutoff);
        let new_traces = state
            .profile
            .unprinted_traces(table.rows.iter().map(|row| row.site.trace));
        if let Err(error) = state.output.sites(&new_traces, &table, cutoff) {
            eprintln!(
                "openprof: can't write {}: {error}",
                state.output.path().display()
            );
        }
        if self.options.verbose {
            eprintln!(" done.");
        }
    }

    /// HPROF's HEAP DUMP: every live object, after a full GC.
    fn dump_heap(&self, state: &Mutex<State>, jni: *mut JNIEnv) {
        if self.options.verbose {
            eprint!("Dumping Java heap ...");
        }
        let started = std::time::Instant::now();
        let mut state = lock(state);
        self.collect(&mut state);
        let jvmti = self.jvmti;
        let result = state
            .output
            .with_heap_sink(|sink| {
                crate::heap_dump::dump_heap(self.vm, jni, sink, |thread| {
                    jvmti.thread_word(thread).unwrap_or(0) as u32
                })
            })
            .unwrap_or_else(|error| Err(format!("can't write the heap dump: {error}")));
        match result {
            Ok(summary) => {
                if self.options.verbose {
                    eprintln!(
                        " done ({} objects, {} bytes, {} classes in {} ms).",
                        summary.objects,
                        summary.bytes,
                        summary.classes,
                        started.elapsed().as_millis()
                    );
                }
                if summary.layout_mismatches > 0 {
                    eprintln!(
                        "openprof: heap dump: {} field values did not fit their class's layout and were left out",
                        summary.layout_mismatches
                    );
                }
                if summary.unknown_class_objects > 0 {
                    eprintln!(
                        "openprof: heap dump: {} objects of classes loaded during the dump were left out",
                        summary.unknown_class_objects
                    );
                }
            }
            Err(error) => eprintln!("\nopenprof ERROR: heap dump failed: {error}"),
        }
    }

    /// Writes the CPU samples since the last dump.
    fn dump_samples(&self, state: &Mutex<State>) {
        if self.options.verbose {
            eprint!("Dumping CPU usage by sampling running threads ...");
        }
        let started = signals::thread_cpu_nanos();
        let mut state = lock(state);
        self.collect(&mut state);
        let dump =
            state
                .profile
                .take_dump(CpuTableKind::Samples, hprof_date(), self.options.cutoff);
        // What profiling cost since the last dump, so users (and BENCHMARKS.md) can see it.
        let mut cost_us = BTreeMap::new();
        if self.sampler == SamplerKind::Signals {
            cost_us.insert("handler".into(), signals::take_handler_nanos() / 1000);
        }
        let worker = self.worker_cpu_nanos.load(Ordering::Relaxed);
        let reported = self.worker_cpu_reported.swap(worker, Ordering::Relaxed);
        cost_us.insert(
            "agent_thread".into(),
            worker.saturating_sub(reported) / 1000,
        );
        let dumping = signals::thread_cpu_nanos().saturating_sub(started);
        cost_us.insert("dump".into(), dumping / 1000);
        let report = self.sampler_report(&dump, cost_us);
        if let Err(error) = state.output.cpu_dump(&dump, &report) {
            eprintln!(
                "openprof: can't write {}: {error}",
                state.output.path().display()
            );
        }
        if self.options.verbose {
            eprintln!(" done.");
        }
    }

    /// HPROF's CPU TIME table: entries and CPU time of the traced methods since the last dump.
    fn dump_times(&self, state: &Mutex<State>, times: &MethodTimes) {
        if self.options.verbose {
            eprint!("Dumping CPU usage by timing methods ...");
        }
        let mut state = lock(state);
        self.collect(&mut state);
        for ((thread, frames), (entries, cpu)) in times.take() {
            let frames = frames
                .into_iter()
                .map(|method| (method as jmethodID, Location::Unknown));
            state
                .profile
                .add_cost(self.jvmti, thread, frames, entries, cpu);
        }
        let dump = state
            .profile
            .take_dump(CpuTableKind::Time, hprof_date(), self.options.cutoff);
        if let Err(error) = state.output.cpu_times(&dump) {
            eprintln!(
                "openprof: can't write {}: {error}",
                state.output.path().display()
            );
        }
        if self.options.verbose {
            eprintln!(" done.");
        }
    }

    fn vm_death(&self, jni: *mut JNIEnv) {
        self.dying.store(true, Ordering::Release);
        signals::set_enabled(false);
        lock(&self.threads).close();
        *lock(&self.stop) = true;
        self.wake.notify_all();
        if let Some(worker) = lock(&self.worker).take() {
            let _ = worker.join();
        }
        if let Some(tracer) = &self.tracer {
            tracer.emit_gcs(|| heap_figures(jni));
            let current = signals::current_thread_id();
            // HotSpot ends the DestroyJavaVM thread before VMDeath on the same OS thread.
            let thread = lock(&self.threads).live_serial_of_kernel_id(current);
            tracer.finish(jni, thread);
        }
        if let Some(state) = &self.state {
            if self.options.doe {
                self.dump(jni);
            }
            let mut state = lock(state);
            self.collect(&mut state);
            let _ = state.output.flush();
        }
        if let Some(net) = &self.net {
            // Bounded: a collector that is gone must not hold the JVM's exit.
            net.finish(NET_GOODBYE_PATIENCE);
        }
    }
}

/// Traced calls of method parameter tracing go to the trace (format=x, net=).
impl crate::mpt::MptSink for Agent {
    fn entry(
        &self,
        jni: *mut JNIEnv,
        method: jmethodID,
        time: openprof_format::trace::attrs::Seconds,
        cpu_nanos: u64,
        values: Vec<openprof_format::trace::Value>,
        stack: Option<String>,
    ) -> Option<u128> {
        let tracer = self.tracer.as_ref()?;
        tracer.mpt_entry(jni, method, time, cpu_nanos, values, stack)
    }

    fn exit(
        &self,
        method: jmethodID,
        ticket: u128,
        time: openprof_format::trace::attrs::Seconds,
        cpu_nanos: u64,
    ) {
        if let Some(tracer) = &self.tracer {
            tracer.mpt_exit(method, ticket, time, cpu_nanos);
        }
    }

    fn note(&self, name: &str, value: &str) {
        if let Some(tracer) = &self.tracer {
            tracer.note(name, value);
        }
    }
}

/// The heap's (total, used) bytes, from java.lang.Runtime on this thread.
fn heap_figures(jni: *mut JNIEnv) -> Option<(u64, u64)> {
    // SAFETY: `jni` is this thread's JNIEnv; every reference and id is checked before use and
    // any Java exception is cleared.
    unsafe {
        let functions = &**jni;
        let class = (functions.FindClass)(jni, c"java/lang/Runtime".as_ptr());
        if class.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let get = (functions.GetStaticMethodID)(
            jni,
            class,
            c"getRuntime".as_ptr(),
            c"()Ljava/lang/Runtime;".as_ptr(),
        );
        let total = (functions.GetMethodID)(jni, class, c"totalMemory".as_ptr(), c"()J".as_ptr());
        let free = (functions.GetMethodID)(jni, class, c"freeMemory".as_ptr(), c"()J".as_ptr());
        if get.is_null() || total.is_null() || free.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let runtime = (functions.CallStaticObjectMethodA)(jni, class, get, std::ptr::null());
        if runtime.is_null() {
            (functions.ExceptionClear)(jni);
            return None;
        }
        let total = (functions.CallLongMethodA)(jni, runtime, total, std::ptr::null());
        let free = (functions.CallLongMethodA)(jni, runtime, free, std::ptr::null());
        if (functions.ExceptionCheck)(jni) != 0 {
            (functions.ExceptionClear)(jni);
            return None;
        }
        delete_local_ref(jni, runtime);
        delete_local_ref(jni, class);
        Some((total.max(0) as u64, (total - free).max(0) as u64))
    }
}

pub(crate) fn delete_local_ref(jni: *mut JNIEnv, object: *mut c_void) {
    if !jni.is_null() && !object.is_null() {
        // SAFETY: `object` is a local reference of this thread's current JNI frame.
        unsafe { ((**jni).DeleteLocalRef)(jni, object) };
    }
}

/// Runs `body` inside a JNI local frame, so the local references JVMTI hands the agent's thread
/// are freed each round (a native thread has no Java frame to free them).
fn with_local_frame(jni: *mut JNIEnv, body: impl FnOnce()) {
    // SAFETY: `jni` is the agent thread's own JNIEnv.
    let pushed = unsafe { ((**jni).PushLocalFrame)(jni, 64) } == 0;
    body();
    if pushed {
        // SAFETY: pops the frame pushed above; no reference in it is used afterwards.
        unsafe { ((**jni).PopLocalFrame)(jni, std::ptr::null_mut()) };
    }
}

fn attach_current_thread(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    let mut env: *mut c_void = std::ptr::null_mut();
    let mut args = JavaVMAttachArgs {
        version: JNI_VERSION_1_6,
        name: c"openprof".as_ptr().cast_mut(),
        group: std::ptr::null_mut(),
    };
    // SAFETY: `vm` is the live JavaVM; the args struct and name outlive the call.
    let status = unsafe {
        ((**vm).AttachCurrentThreadAsDaemon)(
            vm,
            &mut env,
            (&mut args as *mut JavaVMAttachArgs).cast(),
        )
    };
    (status == 0 && !env.is_null()).then_some(env.cast())
}

unsafe extern "system" fn on_vm_init(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv, thread: jthread) {
    guarded("VMInit", || {
        if let Some(agent) = agent() {
            agent.begin(jni, Some(thread));
        }
    });
}

unsafe extern "system" fn on_vm_death(_jvmti: *mut jvmtiEnv, jni: *mut JNIEnv) {
    guarded("VMDeath", || {
        if let Some(agent) = agent() {
            agent.vm_death(jni);
        }
    });
}

/// The tracer, when tracing and the callback is not on the agent's own thread.
fn tracer() -> Option<&'static Tracer> {
    if IS_AGENT_THREAD.with(|flag| flag.get()) {
        return None;
    }
    agent()
        .filter(|agent| !agent.dying.load(Ordering::Acquire))
        .and_then(|agent| agent.tracer.as_ref())
}

/// The cpu=times recorder, when timing for text output and not on the agent's own thread.
fn times() -> Option<&'static MethodTimes> {
    if IS_AGENT_THREAD.with(|flag| flag.get()) {
        return None;
    }
    agent()
        .filter(|agent| !agent.dying.load(Ordering::Acquire))
        .and_then(|agent| agent.times.as_ref())
}

unsafe extern "system" fn on_method_entry(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
) {
    guarded("MethodEntry", || {
        if let Some(tracer) = tracer() {
            tracer.method_entry(jni, thread, method);
        } else if let Some(times) = times() {
            times.entry(method);
        }
    });
}

unsafe extern "system" fn on_method_exit(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    _was_popped_by_exception: jvmti_bindings::sys::jni::jboolean,
    _return_value: jvmti_bindings::sys::jni::jvalue,
) {
    guarded("MethodExit", || {
        if let Some(tracer) = tracer() {
            tracer.method_exit(thread, method);
        } else if let Some(times) = times() {
            times.exit(thread, method);
        }
    });
}

unsafe extern "system" fn on_exception(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    _method: jmethodID,
    _location: i64,
    exception: jobject,
    catch_method: jmethodID,
    _catch_location: i64,
) {
    guarded("Exception", || {
        if let Some(tracer) = tracer() {
            tracer.exception(jni, thread, exception, catch_method);
        }
    });
}

unsafe extern "system" fn on_exception_catch(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    method: jmethodID,
    _location: i64,
    exception: jobject,
) {
    guarded("ExceptionCatch", || {
        if let Some(tracer) = tracer() {
            tracer.exception_catch(jni, thread, method, exception);
        }
    });
}

fn monitor_event(jni: *mut JNIEnv, thread: jthread, object: jobject, event: MonitorEvent) {
    guarded("a monitor event", || {
        if let Some(tracer) = tracer() {
            tracer.monitor(jni, thread, object, event);
        }
    });
}

unsafe extern "system" fn on_monitor_contended_enter(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    monitor_event(jni, thread, object, MonitorEvent::ContendedEnter);
}

unsafe extern "system" fn on_monitor_contended_entered(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
) {
    monitor_event(jni, thread, object, MonitorEvent::ContendedEntered);
}

unsafe extern "system" fn on_monitor_wait(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timeout: i64,
) {
    monitor_event(
        jni,
        thread,
        object,
        MonitorEvent::Wait {
            timeout_ms: timeout,
        },
    );
}

unsafe extern "system" fn on_monitor_waited(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    timed_out: jvmti_bindings::sys::jni::jboolean,
) {
    monitor_event(
        jni,
        thread,
        object,
        MonitorEvent::Waited {
            timed_out: timed_out != 0,
        },
    );
}

/// GC start and finish run inside a safepoint: no locks, no JVMTI; the tracer only notes the time.
unsafe extern "system" fn on_gc_start(_jvmti: *mut jvmtiEnv) {
    if let Some(tracer) = AGENT.get().and_then(|agent| agent.tracer.as_ref()) {
        tracer.gc_started();
    }
}

unsafe extern "system" fn on_gc_finish(_jvmti: *mut jvmtiEnv) {
    if let Some(tracer) = AGENT.get().and_then(|agent| agent.tracer.as_ref()) {
        tracer.gc_finished();
    }
}

unsafe extern "system" fn on_thread_start(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
) {
    guarded("ThreadStart", || {
        if IS_AGENT_THREAD.with(|flag| flag.get()) {
            return;
        }
        if let Some(agent) = agent() {
            let current = signals::current_thread_id();
            // A kernel thread that was another Java thread before (the launcher's main thread
            // comes back as DestroyJavaVM; native threads attach again): its samples still in
            // the ring are the earlier thread's, and go to it before the id changes hands.
            let reused = lock(&agent.threads).serial_of_kernel_id(current).is_some();
            if let (true, Some(state)) = (reused, &agent.state) {
                agent.collect(&mut lock(state));
            }
            agent.register_thread(thread, Some(current));
            agent.time_thread(current);
        }
    });
}

unsafe extern "system" fn on_thread_end(_jvmti: *mut jvmtiEnv, _jni: *mut JNIEnv, thread: jthread) {
    guarded("ThreadEnd", || {
        if IS_AGENT_THREAD.with(|flag| flag.get()) {
            return;
        }
        if let Some(agent) = agent() {
            let serial = agent.jvmti.thread_word(thread).unwrap_or(0) as u32;
            if serial != 0 {
                // ThreadEnd comes on the ending thread itself.
                lock(&agent.threads).end(serial, signals::current_thread_id());
                if let Some(tracer) = &agent.tracer {
                    tracer.thread_end(serial);
                }
            }
        }
    });
}

unsafe extern "system" fn on_class_prepare(
    _jvmti: *mut jvmtiEnv,
    jni: *mut JNIEnv,
    _thread: jthread,
    class: jclass,
) {
    guarded("ClassPrepare", || {
        if let Some(agent) = agent() {
            let _ = agent.jvmti.preload_method_ids(class);
            if let Some(mpt) = &agent.mpt {
                mpt.class_prepared(jni, class);
            }
        }
    });
}

unsafe extern "system" fn on_data_dump_request(_jvmti: *mut jvmtiEnv) {
    guarded("DataDumpRequest", || {
        if let Some(agent) = agent().filter(|agent| !agent.dying.load(Ordering::Acquire)) {
            agent.dump(current_jni(agent.vm));
        }
    });
}

/// The calling thread's JNIEnv, or null when it is not attached to the VM.
fn current_jni(vm: *mut JavaVM) -> *mut JNIEnv {
    let mut env: *mut c_void = std::ptr::null_mut();
    // SAFETY: `vm` is the live JavaVM; GetEnv writes one pointer.
    let status = unsafe { ((**vm).GetEnv)(vm, &mut env, JNI_VERSION_1_6) };
    if status == 0 {
        env.cast()
    } else {
        std::ptr::null_mut()
    }
}

unsafe extern "system" fn on_sampled_object_alloc(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    thread: jthread,
    object: jobject,
    class: jclass,
    size: i64,
) {
    guarded("SampledObjectAlloc", || {
        if IS_AGENT_THREAD.with(|flag| flag.get()) {
            return;
        }
        if let Some(agent) = agent().filter(|agent| !agent.dying.load(Ordering::Acquire)) {
            agent.sampled_allocation(thread, object, class, size);
        }
    });
}

/// ObjectFree may be posted inside other JVMTI calls: it only queues the tag.
unsafe extern "system" fn on_object_free(_jvmti: *mut jvmtiEnv, tag: i64) {
    guarded("ObjectFree", || {
        if let Some(allocations) = agent().and_then(|agent| agent.allocations.as_ref()) {
            allocations.freed(tag);
        }
    });
}

/// Enabled only because AsyncGetCallTrace refuses to walk (`ticks_no_class_load`) unless some
/// agent receives ClassLoad events.
unsafe extern "system" fn on_class_load(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    _class: jclass,
) {
}

/// Enabled only so that HotSpot keeps debug information at non-safepoints (see `start`).
unsafe extern "system" fn on_compiled_method_load(
    _jvmti: *mut jvmtiEnv,
    _method: jmethodID,
    _code_size: jint,
    _code_addr: *const c_void,
    _map_length: jint,
    _map: *const jvmti_bindings::sys::jvmti::jvmtiAddrLocationMap,
    _compile_info: *const c_void,
) {
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_capabilities_are_named_with_the_option_that_needs_them() {
        let options = Options::parse("cpu=times,heap=sites").unwrap();
        let needs = capability_needs(&options);
        // What HotSpot offers in the live phase: neither method entry nor exit events.
        let mut live = jvmtiCapabilities::default();
        for need in &needs {
            (need.set)(&mut live);
        }
        live.set_can_generate_method_entry_events(false);
        live.set_can_generate_method_exit_events(false);
        let refusal = refuse_missing(&needs, &live).unwrap_err();
        assert!(
            refusal.starts_with(
                "cpu=times needs JVMTI's can_generate_method_entry_events and \
                 can_generate_method_exit_events, which this JVM grants only"
            ),
            "{refusal}"
        );
        assert!(!refusal.contains("heap=sites"), "{refusal}");
        live.set_can_generate_method_entry_events(true);
        live.set_can_generate_method_exit_events(true);
        assert!(refuse_missing(&needs, &live).is_ok());
    }

    #[test]
    fn help_is_refused_in_a_running_jvm_rather_than_ending_it() {
        let refusal = checked_options("help", Phase::Live).unwrap_err();
        assert!(refusal.contains("would end the JVM"), "{refusal}");
        assert!(checked_options("cpu=bogus", Phase::Live)
            .unwrap_err()
            .contains("option cpu"));
    }
}
