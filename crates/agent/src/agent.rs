//! The agent inside the JVM: start-up from the option string, the JVMTI event callbacks, the
//! agent's own thread that drains samples and writes records, and the dumps.

mod commands;

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not make the agent panic again on a poisoned lock.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a callback body, keeping any panic on this side of the FFI boundary: the first one is
/// reported and the agent stops profiling; the JVM carries on.
fn guarded(what: &str, body: impl FnOnce()) {
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

fn agent() -> Option<&'static Agent> {
    AGENT.get()
}

/// Agent_OnLoad: parse and check the options, set everything up, or refuse to start the JVM.
pub fn on_load(vm: *mut JavaVM, options_text: &str) -> jint {
    match start(vm, options_text) {
        Ok(()) => JNI_OK,
        Err(message) => {
            eprintln!("openprof ERROR: {message}");
            JNI_ERR
        }
    }
}

/// Agent_OnAttach: the options are checked, but attaching is not built yet.
pub fn on_attach(options_text: &str) -> jint {
    let message = match checked_options(options_text) {
        Err(message) => message,
        Ok(_) => "attaching to a running JVM is not implemented yet; start the JVM with -agentpath"
            .into(),
    };
    eprintln!("openprof ERROR: {message}");
    JNI_ERR
}

/// Parses the options; `help` prints the usage table and ends the process, as HPROF's does.
fn checked_options(options_text: &str) -> Result<Options, String> {
    let options = Options::parse(options_text).map_err(|error| error.to_string())?;
    if options.help {
        print!("{}", Options::help_text());
        std::process::exit(0);
    }
    options
        .refuse_unbuilt()
        .map_err(|error| error.to_string())?;
    Ok(options)
}

fn start(vm: *mut JavaVM, options_text: &str) -> Result<(), String> {
    let options = checked_options(options_text)?;
    let jvmti = Jvmti::from_vm(vm).ok_or("this JVM offers no JVMTI 1.2 environment")?;

    let mut capabilities = jvmtiCapabilities::default();
    capabilities.set_can_get_line_numbers(true);
    capabilities.set_can_get_source_file_name(true);
    // HotSpot keeps debug information at every instruction, not only at safepoints, once an
    // agent can receive CompiledMethodLoad events: without it sampled frames in compiled code
    // would be attributed to the nearest safepoint.
    capabilities.set_can_generate_compiled_method_load_events(true);
    let tracing = options.format == OutputFormat::Xml;
    let timing = options.cpu == Some(openprof_format::options::CpuMode::Times);
    if timing {
        capabilities.set_can_generate_method_entry_events(true);
        capabilities.set_can_generate_method_exit_events(true);
    }
    let heap = options.heap_profile();
    let sites = matches!(heap, Some(HeapMode::Sites | HeapMode::All));
    if sites {
        capabilities.set_can_tag_objects(true);
        capabilities.set_can_generate_sampled_object_alloc_events(true);
        capabilities.set_can_generate_object_free_events(true);
    }
    if tracing {
        capabilities.set_can_tag_objects(true);
        capabilities.set_can_generate_exception_events(true);
        capabilities.set_can_generate_garbage_collection_events(true);
        capabilities.set_can_generate_monitor_events(options.monitor);
        capabilities.set_can_access_local_variables(timing);
    }
    jvmti
        .add_capabilities(&capabilities)
        .map_err(|error| format!("the JVM refused the capabilities openprof needs: {error}"))?;

    let sampler = if options.cpu == Some(openprof_format::options::CpuMode::Samples) {
        choose_sampler(vm, &options)?
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
            let hello = crate::net::hello(uuid::Uuid::new_v4(), token, format, options.to_string());
            Some(Arc::new(NetSink::start(NetConfig {
                host: address.host.clone(),
                port: address.port,
                hello,
                tls,
            })?))
        }
        None => None,
    };
    let _ = options_text;
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
    Ok(())
}

fn choose_sampler(vm: *mut JavaVM, options: &Options) -> Result<SamplerKind, String> {
    if options.sampler == Sampler::GetAllStackTraces {
        return Ok(SamplerKind::Jvmti {
            note: "sampler=jvmti asked for; samples are biased towards safepoints".into(),
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

    /// Numbers a thread seen for the first time and, on its own thread, starts its CPU timer.
    fn register_thread(&self, thread: jthread, on_this_thread: bool) {
        if self.jvmti.thread_word(thread).unwrap_or(0) != 0 {
            return;
        }
        let (name, group) = self.jvmti.thread_names(thread).unwrap_or_default();
        let kernel_id = on_this_thread.then(signals::current_thread_id);
        let serial = lock(&self.threads).start(name.clone(), group.clone(), kernel_id);
        let _ = self.jvmti.set_thread_word(thread, serial as usize);
        if let Some(tracer) = &self.tracer {
            tracer.thread_start(serial, &name, &group);
        }
        if on_this_thread && self.samples_with_signals() && !self.dying.load(Ordering::Acquire) {
            match self.start_timer() {
                Ok(timer) => {
                    lock(&self.threads).attach_timer(serial, timer);
                }
                Err(error) => eprintln!("openprof: can't sample thread {serial}: {error}"),
            }
        }
    }

    /// A CPU timer for the calling thread. When the kernel refuses perf events, every thread
    /// from then on gets a POSIX CPU timer, and the output says why.
    fn start_timer(&self) -> std::io::Result<ThreadTimer> {
        let interval = self.options.interval_ms;
        let clock = lock(&self.clock).0;
        match ThreadTimer::start_for_current_thread(clock, interval) {
            Err(error) if clock == CpuClock::PerfTaskClock => {
                *lock(&self.clock) = (
                    CpuClock::PosixCpuTimer,
                    Some(format!(
                        "perf_event_open failed ({error}); POSIX CPU timers sample at most once per scheduler tick"
                    )),
                );
                ThreadTimer::start_for_current_thread(CpuClock::PosixCpuTimer, interval)
            }
            result => result,
        }
    }

    fn vm_init(&self, jni: *mut JNIEnv, thread: jthread) {
        self.register_thread(thread, true);
        if let Ok(classes) = self.jvmti.loaded_classes() {
            for class in classes {
                let _ = self.jvmti.preload_method_ids(class);
                delete_local_ref(jni, class);
            }
        }
        // Threads started before VMInit: recorded, but their kernel ids are unknown, so they are
        // not sampled (they are the VM's housekeeping threads).
        if let Ok(threads) = self.jvmti.all_threads() {
            for other in threads {
                self.register_thread(other, false);
                delete_local_ref(jni, other);
            }
        }
        if self.samples_with_signals() {
            signals::set_enabled(true);
        }
        if let Some(tracer) = &self.tracer {
            tracer.runtime_init(self.jvmti.thread_word(thread).unwrap_or(0) as u32);
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
            let serials = raw
                .iter()
                .map(|(kernel_id, ..)| threads.serial_of_kernel_id(*kernel_id))
                .collect();
            (threads.take_pending(), serials)
        };
        let depth = self.sampling.max_depth.load(Ordering::Relaxed) as usize;
        for ((_, num_frames, frames), serial) in raw.into_iter().zip(serials) {
            if !self.sampling.samples(serial) {
                continue;
            }
            if num_frames <= 0 {
                state.profile.add_failure(num_frames);
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
            agent.vm_init(jni, thread);
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
            agent.register_thread(thread, true);
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
                lock(&agent.threads).end(serial);
                if let Some(tracer) = &agent.tracer {
                    tracer.thread_end(serial);
                }
            }
        }
    });
}

unsafe extern "system" fn on_class_prepare(
    _jvmti: *mut jvmtiEnv,
    _jni: *mut JNIEnv,
    _thread: jthread,
    class: jclass,
) {
    guarded("ClassPrepare", || {
        if let Some(agent) = agent() {
            let _ = agent.jvmti.preload_method_ids(class);
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
