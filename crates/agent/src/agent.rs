//! The coordinator: options → plan → engines; the JVMTI callbacks every run has (VMInit,
//! VMDeath, threads, classes, dump requests); the agent's own thread, which drives the engines
//! each round and carries out the collector's commands; the dumps and the VM's death. What is
//! profiled, and how, lives in the engines (`engines/`).

mod callbacks;
mod commands;
mod session;
mod startup;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jvmti_bindings::sys::jni::{JNI_ERR, JNI_OK};
use jvmti_bindings::sys::jvmti::event_callbacks_size_for_feature;
use openprof_format::options::{CpuMode, Options};
use openprof_format::wire::Command;

pub use crate::context::Phase;
use crate::context::{Context, Report};
use crate::engine::{self, Dump};
use crate::engines::{mpt, trace};
use crate::error::{AgentError, AgentResult, JvmtiContext};
use crate::guard::{self, guarded};
use crate::jni::{attach_current_thread, current_jni, delete_local_ref, with_local_frame};
use crate::jvmti::{jint, jthread, jvmtiEventCallbacks, JNIEnv, JavaVM, Jvmti};
use crate::output::Output;
use crate::plan::Plan;
use crate::profile::CpuProfile;
use crate::signals;
use crate::sync::lock;
use crate::threads::Threads;
use startup::{checked_options, pin_library, write_attach_report};

/// How long the exiting JVM waits for the collector to acknowledge the last data.
const NET_GOODBYE_PATIENCE: Duration = Duration::from_secs(10);
/// How long the exiting JVM waits for the agent's thread to finish what it is doing (a window,
/// a dump, a command) before it exits without the agent's last output.
const WORKER_STOP_PATIENCE: Duration = Duration::from_secs(60);
/// How often the agent's thread comes round (drains the ring, flushes the trace, runs commands).
const DRAIN_PERIOD: Duration = Duration::from_millis(20);

/// The coordinator's own state: the agent's thread and the commands waiting for it.
struct Agent {
    stop: Mutex<bool>,
    wake: Condvar,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Commands from the collector waiting for the agent's thread.
    commands: Mutex<VecDeque<(u32, Command)>>,
}

static AGENT: OnceLock<Agent> = OnceLock::new();

/// The system properties that label the agent: `-Dopenprof.label.NAME=VALUE` adds the label
/// NAME:VALUE, checked as `label=` is; a label the options give wins over a property's.
const LABEL_PROPERTY: &str = "openprof.label.";

fn add_property_labels(jvmti: Jvmti, options: &mut Options) -> AgentResult<()> {
    let mut properties = jvmti.system_properties_with_prefix(LABEL_PROPERTY);
    properties.sort();
    for (name, value) in properties {
        if options.labels.iter().any(|(known, _)| *known == name) {
            eprintln!(
                "openprof: label={name}:... is given, so -D{LABEL_PROPERTY}{name} is not used"
            );
            continue;
        }
        options
            .add_checked_label(&format!("{name}:{value}"))
            .map_err(|error| format!("-D{LABEL_PROPERTY}{name}={value}: {error}"))?;
    }
    Ok(())
}

/// Agent_OnLoad: parse and check the options, set everything up, or refuse to start the JVM.
pub fn on_load(vm: *mut JavaVM, options_text: &str) -> jint {
    match start(vm, options_text, Phase::OnLoad) {
        Ok(_) => JNI_OK,
        Err(error) => refuse(Phase::OnLoad, &error.to_string()),
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
        Err(error) => refuse(Phase::Live, &error.to_string()),
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

/// Sets the agent up from its options, at either phase; returns what it set up, in words.
fn start(vm: *mut JavaVM, options_text: &str, phase: Phase) -> AgentResult<String> {
    let options = checked_options(options_text, phase)?;
    match (options.action, phase, crate::context::get()) {
        (Some(_), Phase::OnLoad, _) => {
            return Err(AgentError::Refused(
                "option action: is for an agent already loaded in a running JVM (openprof \
                 profile attaches with it); leave it out of -agentpath"
                    .into(),
            ))
        }
        (Some(action), Phase::Live, Some(context)) => {
            return session::act(context, vm, action, &options, options_text)
        }
        (Some(action), Phase::Live, None) if action != openprof_format::options::Action::Start => {
            return Err(AgentError::Refused(format!(
                "action={}: openprof is not loaded in this JVM; action=start loads it",
                action.word()
            )))
        }
        (None, _, Some(_)) => {
            return Err(AgentError::Refused(
                "openprof is already loaded in this JVM; it profiles once per JVM (its profile \
                 is written at exit, or on kill -QUIT; openprof profile starts and stops \
                 sessions of it)"
                    .into(),
            ))
        }
        _ => {}
    }
    let jvmti = Jvmti::from_vm(vm).ok_or(match phase {
        Phase::OnLoad => "this JVM offers no JVMTI 1.2 environment",
        // A JVM attached to while it is still starting has none to give yet.
        Phase::Live => {
            "this JVM offers no JVMTI 1.2 environment (is it still starting? attach once it runs)"
        }
    })?;
    let result = set_up(vm, jvmti, options, phase);
    if result.is_err() && phase == Phase::Live && crate::context::get().is_none() {
        // The JVM runs on: give back the environment, and with it any callback and event.
        let _ = jvmti.dispose();
    }
    result
}

fn set_up(
    vm: *mut JavaVM,
    jvmti: Jvmti,
    mut options: Options,
    phase: Phase,
) -> AgentResult<String> {
    add_property_labels(jvmti, &mut options)?;
    let plan = Plan::new(&options);
    let needs = plan.needs(&options);
    let mut capabilities = crate::jvmti::jvmtiCapabilities::default();
    if phase == Phase::Live {
        let potential = jvmti
            .potential_capabilities()
            .doing("can't ask the JVM what it can do")?;
        engine::refuse_missing(&needs, &potential)?;
        // Only to tell which running Java thread is which kernel thread (see
        // `register_running_threads`); without it the threads are still sampled.
        capabilities.set_can_get_thread_cpu_time(potential.can_get_thread_cpu_time());
        // From here on signal handlers, callbacks and threads point into this library.
        pin_library()?;
    }
    for need in &needs {
        (need.set)(&mut capabilities);
    }
    jvmti
        .add_capabilities(&capabilities)
        .doing("the JVM refused the capabilities openprof needs")?;
    if plan.engines.contains(&crate::plan::EngineKind::WallSamples) {
        crate::engines::virtual_parks::ask_for_capability(jvmti);
    }
    crate::jni::set_vm(vm);

    let net = crate::net::start_from_options(&options)?;
    if plan.loader_index {
        crate::loaders::start(vm);
    }
    let report = if plan.tracing {
        None
    } else {
        let output = Output::create(&options, net.clone())?;
        // cpu=times frames carry no location, as in HPROF: no line numbers.
        let timing = options.cpu == Some(CpuMode::Times);
        let profile = CpuProfile::new(options.lineno && !timing, options.continuous_ms.is_some());
        Some(Mutex::new(Report { profile, output }))
    };
    let engines = plan
        .engines
        .iter()
        .map(|kind| crate::plan::build_engine(*kind, vm, jvmti, &options, phase, &plan, &net))
        .collect::<AgentResult<Vec<_>>>()?;
    let context = Context {
        phase,
        jvmti,
        vm,
        threads: Mutex::new({
            let mut threads = Threads::new(!plan.tracing);
            threads.sample_only(options.threads.clone());
            threads
        }),
        report,
        net,
        agent_thread_cpu_nanos: AtomicU64::new(0),
        options,
    };
    if !crate::context::install(context) {
        return Err("the agent is loaded twice; load it once".into());
    }
    engine::install(engines)?;
    let _ = AGENT.set(Agent {
        stop: Mutex::new(false),
        wake: Condvar::new(),
        worker: Mutex::new(None),
        commands: Mutex::new(VecDeque::new()),
    });
    let context = crate::context::get().ok_or("the agent was not set up")?;
    // Parameter tracing's traced calls become trace elements when there is a trace.
    if let (Some(parameters), Some(tracer)) = (
        engine::running::<mpt::Mpt>(),
        engine::running::<trace::Tracer>(),
    ) {
        parameters.set_sink(tracer);
    }
    if let Some(net) = &context.net {
        net.set_handler(Box::new(|serial, command| {
            if let Some(agent) = AGENT.get() {
                lock(&agent.commands).push_back((serial, command));
            }
        }));
    }

    set_callbacks(jvmti)?;
    let engine_events = engine::all().flat_map(|engine| engine.events());
    for event in engine_events.chain(callbacks::CORE_EVENTS) {
        jvmti
            .set_event(event, true)
            .doing("can't enable an event")?;
    }
    match phase {
        // VMInit does the rest.
        Phase::OnLoad => Ok(String::new()),
        // VMInit is long past: do now what it does, on this (the attach listener's) thread.
        Phase::Live => {
            let jni = current_jni(vm);
            if jni.is_null() {
                return Err("the attaching thread has no JNI environment".into());
            }
            let mut summary = String::new();
            with_local_frame(jni, || summary = begin(context, jni, None));
            Ok(startup::attach_summary(context, &summary))
        }
    }
}

/// Points JVMTI at the core callbacks and every engine's (again when an engine is added).
fn set_callbacks(jvmti: Jvmti) -> AgentResult<()> {
    let mut callbacks = jvmtiEventCallbacks::default();
    callbacks::core(&mut callbacks);
    for engine in engine::all() {
        engine.callbacks(&mut callbacks);
    }
    jvmti
        .set_event_callbacks_sized(&callbacks, event_callbacks_size_for_feature(11))
        .doing("can't set the event callbacks")?;
    Ok(())
}

/// Numbers a thread and, when it is new, tells the engines.
fn register_thread(context: &Context, thread: jthread, kernel_id: Option<i32>) -> u32 {
    let registered = context.register_thread(thread, kernel_id);
    if registered.new {
        for engine in engine::all() {
            engine.thread_started(
                context,
                registered.serial,
                &registered.name,
                &registered.group,
            );
        }
    }
    registered.serial
}

/// What follows VMInit, or the attach: number the threads already running, name the methods
/// of the classes already loaded (AsyncGetCallTrace needs their jmethodIDs), start the engines
/// and the agent's thread. `vm_init_thread` is the thread VMInit came on (which then gets its
/// CPU timer on itself); when attaching there is none. Returns what was set up, in words.
fn begin(context: &'static Context, jni: *mut JNIEnv, vm_init_thread: Option<jthread>) -> String {
    let jvmti = context.jvmti;
    if let Some(thread) = vm_init_thread {
        register_thread(context, thread, Some(signals::current_thread_id()));
    }
    if let Ok(classes) = jvmti.loaded_classes() {
        for class in classes {
            if let Ok(methods) = jvmti.preload_method_ids(class) {
                crate::code_map::index_methods(&methods);
            }
            delete_local_ref(jni, class);
        }
    }
    let threads = jvmti.all_threads().unwrap_or_default();
    let mut summary = match vm_init_thread {
        // Threads started before VMInit: recorded, but their kernel ids are unknown, so they are
        // not sampled (they are the VM's housekeeping threads).
        Some(_) => {
            for other in &threads {
                register_thread(context, *other, None);
            }
            String::new()
        }
        None => register_running_threads(context, &threads),
    };
    for thread in threads {
        delete_local_ref(jni, thread);
    }
    for engine in engine::all() {
        if let Some(line) = engine.start(context, jni) {
            summary.push_str("; ");
            summary.push_str(&line);
        }
    }
    session::first(context);
    let spawned = std::thread::Builder::new()
        .name(crate::context::AGENT_THREAD_NAME.into())
        .spawn(move || guarded("the agent thread", || run_worker(context)));
    match spawned {
        Ok(handle) => {
            if let Some(agent) = AGENT.get() {
                *lock(&agent.worker) = Some(handle);
            }
        }
        Err(error) => eprintln!("openprof: can't start the agent thread: {error}"),
    }
    summary
}

/// At attach: numbers the Java threads already running. JVMTI does not say which kernel
/// thread a Java thread is; so each Java thread is matched to the kernel thread whose CPU time
/// (read just before and just after) brackets the CPU time JVMTI gives for it, the same clock.
/// Unmatched Java threads are still sampled, their samples only lack a thread.
fn register_running_threads(context: &Context, threads: &[jthread]) -> String {
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
        .map(|thread| context.jvmti.thread_cpu_time(*thread).ok())
        .collect();
    let after: std::collections::HashMap<i32, Option<u64>> = read_tasks().into_iter().collect();
    let brackets: Vec<(i32, u64, u64)> = before
        .iter()
        .filter_map(|(id, early)| Some((*id, (*early)?, (*after.get(id)?)?)))
        .collect();
    let matches = crate::threads::match_by_cpu_time(&java, &brackets);
    for (thread, kernel_id) in threads.iter().zip(&matches) {
        register_thread(context, *thread, *kernel_id);
    }
    let matched = matches.iter().flatten().count();
    format!(
        "{} Java threads were running; {matched} of them matched to their kernel threads",
        threads.len()
    )
}

/// The agent's thread: each round, every engine's tick (JVMTI sampling, the trace's flush),
/// the recorded data into the report, and the collector's commands.
fn run_worker(context: &'static Context) {
    guard::mark_agent_thread();
    let Some(agent) = AGENT.get() else { return };
    let Some(jni) = attach_current_thread(context.vm) else {
        eprintln!("openprof: can't attach the agent thread to the JVM; no samples");
        return;
    };
    // continuous=: when the next profile window is due.
    let window = context
        .options
        .continuous_ms
        .filter(|_| context.net.is_some() && context.report.is_some())
        .map(Duration::from_millis);
    let mut next_window = window.map(|window| Instant::now() + window);
    loop {
        // Asked each round: a profiling session may add an engine or change its interval.
        let mut period = engine::all()
            .filter_map(|engine| engine.period(context))
            .min()
            .unwrap_or(DRAIN_PERIOD);
        if let Some(due) = next_window {
            period = period.min(due.saturating_duration_since(Instant::now()));
        }
        {
            let stop = lock(&agent.stop);
            let (stop, _) = agent
                .wake
                .wait_timeout_while(stop, period, |stop| !*stop)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *stop {
                break;
            }
        }
        with_local_frame(jni, || {
            for engine in engine::all() {
                engine.tick(context, jni);
            }
            if let Some(report) = &context.report {
                collect(context, &mut lock(report));
            }
            if context.net.is_some() {
                commands::run(agent, context, jni);
            }
            if let (Some(due), Some(window)) = (next_window, window) {
                let now = Instant::now();
                if now >= due {
                    if let Err(why) = dump_profile(context, jni) {
                        eprintln!("openprof: no profile window: {why}");
                    }
                    // A window missed (the JVM stopped, the machine slept) is not made up for.
                    let mut next = due + window;
                    while next <= now {
                        next += window;
                    }
                    next_window = Some(next);
                }
            }
        });
        context
            .agent_thread_cpu_nanos
            .store(signals::thread_cpu_nanos(), Ordering::Relaxed);
    }
    crate::jni::detach_current_thread(context.vm);
}

/// Moves what every engine recorded into the report and writes pending thread records.
fn collect(context: &Context, report: &mut Report) {
    for engine in engine::all() {
        engine.collect(context, report);
    }
    let events = lock(&context.threads).take_pending();
    if let Err(error) = report.output.thread_events(&events) {
        report.complain(error);
    }
}

/// What HPROF writes at a dump (on SIGQUIT and at exit): each engine's part, in their order.
/// `jni` is the calling thread's JNIEnv.
fn dump(context: &Context, jni: *mut JNIEnv) {
    let Some(report) = &context.report else {
        // A trace has no report; its engine only flushes.
        if let Some(tracer) = engine::running::<trace::Tracer>() {
            tracer.flush();
        }
        return;
    };
    let collect = |report: &mut Report| collect(context, report);
    let dump = Dump {
        jni,
        report,
        collect: &collect,
    };
    for engine in engine::all() {
        engine.dump(context, &dump);
    }
    forget_unused_traces(&mut lock(report));
}

/// After a dump: the stacks nothing refers to any more are forgotten once there are many
/// (`CpuProfile::forget_unused_traces`), and the output forgets their names.
fn forget_unused_traces(report: &mut Report) {
    let mut kept = std::collections::HashSet::new();
    for engine in engine::all() {
        engine.traces_kept(&mut kept);
    }
    if report.profile.forget_unused_traces(&kept) {
        // The stacks still used (an allocation site's) are written again when next referred
        // to: a reader that kept up has forgotten them with the rest.
        report.profile.forget_printed();
        if let Err(error) = report.output.forget_names() {
            report.complain(error);
        }
    }
}

/// What the collector's DUMP PROFILE command writes: each engine's part of a dump, as
/// [`dump`], but the heap dump (every object, on demand only).
fn dump_profile(context: &Context, jni: *mut JNIEnv) -> Result<(), String> {
    let report = context
        .report
        .as_ref()
        .ok_or("DumpProfile needs HPROF output (format=a or format=b)")?;
    let collect = |report: &mut Report| collect(context, report);
    let dump = Dump {
        jni,
        report,
        collect: &collect,
    };
    for engine in engine::all() {
        let heap = (engine as &dyn std::any::Any).is::<crate::engines::heap_dump::HeapDump>();
        if !heap {
            engine.dump(context, &dump);
        }
    }
    let mut report = lock(report);
    forget_unused_traces(&mut report);
    let _ = report.output.flush();
    Ok(())
}

/// Whether `worker` ends within `patience` (polled: a thread can't be joined with a limit).
fn stopped_within(worker: &JoinHandle<()>, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while !worker.is_finished() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn vm_death(context: &Context, jni: *mut JNIEnv) {
    guard::set_dying();
    signals::disable_all();
    lock(&context.threads).close();
    if let Some(agent) = AGENT.get() {
        *lock(&agent.stop) = true;
        agent.wake.notify_all();
        if let Some(worker) = lock(&agent.worker).take() {
            if !stopped_within(&worker, WORKER_STOP_PATIENCE) {
                // It may hold the report or the engines' state: the rest would wait on it.
                eprintln!(
                    "openprof WARNING: the agent's thread did not finish its work within {} s \
                     of the JVM's exit; the JVM exits without the agent's last output",
                    WORKER_STOP_PATIENCE.as_secs()
                );
                return;
            }
            let _ = worker.join();
        }
    }
    for engine in engine::all() {
        engine.stop(context, jni);
    }
    if let Some(report) = &context.report {
        if context.options.doe {
            dump(context, jni);
        }
        let mut report = lock(report);
        collect(context, &mut report);
        let _ = report.output.flush();
    }
    if let Some(net) = &context.net {
        // Bounded: a collector that is gone must not hold the JVM's exit.
        net.finish(NET_GOODBYE_PATIENCE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_does_not_stop_is_given_up_on_after_the_patience() {
        let (finish, finished) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            let _ = finished.recv();
        });
        let started = Instant::now();
        assert!(!stopped_within(&worker, Duration::from_millis(50)));
        assert!(started.elapsed() >= Duration::from_millis(50));
        finish.send(()).unwrap();
        assert!(stopped_within(&worker, Duration::from_secs(30)));
        worker.join().unwrap();
    }
}
