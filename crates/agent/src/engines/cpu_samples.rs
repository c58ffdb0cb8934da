//! cpu=samples: each Java thread's CPU time sampled by a timer signal whose handler walks the
//! stack with AsyncGetCallTrace into a ring, which the agent's thread drains; or, where that is
//! not to be had, HPROF's own sampling of all runnable threads through GetAllStackTraces. Owns
//! the sampler choice, the per-thread CPU timers, the CPU SAMPLES dump and what the collector's
//! commands change in sampling.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jvmti_bindings::sys::jvmti::{
    JVMTI_THREAD_STATE_INTERRUPTED, JVMTI_THREAD_STATE_RUNNABLE, JVMTI_THREAD_STATE_SUSPENDED,
};
use openprof_format::hprof_text::{CpuTableKind, SamplerReport};
use openprof_format::options::{CStack, CpuTimer, Options, Sampler, MAX_DEPTH};

use crate::context::{Context, Phase, Report};
use crate::engine::{Dump, Engine, Need};
use crate::error::{AgentError, AgentResult};
use crate::jvmti::{jmethodID, JNIEnv, JavaVM};
use crate::methods::Location;
use crate::output::hprof_date;
use crate::profile::{CpuDump, SampledFrame};
use crate::ring::SampleRing;
use crate::signals::{self, CpuClock, InstallError, ThreadTimer};
use crate::sync::lock;

/// How the samples of this run are taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SamplerKind {
    Signals,
    /// JVMTI GetAllStackTraces from the agent's thread, with why.
    Jvmti {
        note: String,
    },
}

/// What the collector's commands changed in CPU sampling.
pub struct SamplingControl {
    /// Frames kept per sample; at most the `depth=` the agent started with.
    pub max_depth: AtomicU32,
    /// CPU sampling off for every thread.
    pub all_off: AtomicBool,
    /// CPU sampling off for these threads (by serial number).
    pub threads_off: Mutex<HashSet<u32>>,
}

impl SamplingControl {
    fn new(depth: u32) -> SamplingControl {
        SamplingControl {
            max_depth: AtomicU32::new(depth),
            all_off: AtomicBool::new(false),
            threads_off: Mutex::new(HashSet::new()),
        }
    }

    /// Whether a sample of this thread counts.
    fn samples(&self, thread: Option<u32>) -> bool {
        !self.all_off.load(Ordering::Relaxed)
            && thread.is_none_or(|serial| !lock(&self.threads_off).contains(&serial))
    }
}

pub struct CpuSamples {
    sampler: SamplerKind,
    /// The clock new threads get, and why it is not the one asked for, if it is not.
    clock: Mutex<(CpuClock, Option<String>)>,
    /// The agent thread's CPU time already reported in a dump.
    agent_thread_reported: AtomicU64,
    pub control: SamplingControl,
    /// Native frames are walked (`cstack=fp` or `dwarf` with the signal sampler).
    native_frames: bool,
    /// The JVM's own threads are sampled too (`vmthreads=y` with the signal sampler).
    vm_threads: bool,
    /// Drains since the last look for new threads of the JVM's own.
    drains_since_thread_scan: AtomicU32,
    /// The names of the threads sampled that are not Java threads, by kernel id.
    vm_thread_names: Mutex<HashMap<i32, Arc<str>>>,
    /// `interval=`: milliseconds of each thread's CPU time between samples (a profiling
    /// session may change it).
    interval_ms: AtomicU32,
    /// Whether threads get timers: off between profiling sessions.
    recording: AtomicBool,
}

/// Drains (20 ms apart) between two looks for new threads of the JVM's own: compiler threads
/// come and go with the load.
const DRAINS_PER_THREAD_SCAN: u32 = 10;

impl CpuSamples {
    /// Chooses the sampler (installing the signal handler when it is the one).
    pub fn new(vm: *mut JavaVM, options: &Options, phase: Phase) -> AgentResult<CpuSamples> {
        let clock = match options.cputimer {
            CpuTimer::Perf => CpuClock::PerfTaskClock,
            CpuTimer::Posix => CpuClock::PosixCpuTimer,
        };
        crate::code_map::init();
        let sampler = choose_sampler(vm, options, phase)?;
        let native_frames = sampler == SamplerKind::Signals
            && options.cstack != CStack::No
            && cfg!(all(target_arch = "x86_64", target_os = "linux"));
        if native_frames {
            crate::native_stack::set_dwarf(options.cstack == CStack::Dwarf);
            crate::native_stack::refresh_code_ranges_if_changed();
            crate::native_stack::set_enabled(true);
        }
        if sampler == SamplerKind::Signals {
            crate::vm_walker::set_mode(options.walker);
        }
        let vm_threads = sampler == SamplerKind::Signals && options.vmthreads;
        signals::set_vm_threads(vm_threads);
        Ok(CpuSamples {
            sampler,
            clock: Mutex::new((clock, None)),
            agent_thread_reported: AtomicU64::new(0),
            control: SamplingControl::new(options.depth),
            native_frames,
            vm_threads,
            drains_since_thread_scan: AtomicU32::new(DRAINS_PER_THREAD_SCAN),
            vm_thread_names: Mutex::new(HashMap::new()),
            interval_ms: AtomicU32::new(options.interval_ms),
            recording: AtomicBool::new(true),
        })
    }

    /// Gives the threads of the JVM's own that have no timer yet one (vmthreads=y), and
    /// learns their names; the agent's own thread is left alone.
    fn time_vm_threads(&self, context: &Context) {
        let Ok(kernel_ids) = signals::process_threads() else {
            return;
        };
        let mut names = lock(&self.vm_thread_names);
        names.retain(|kernel_id, _| kernel_ids.binary_search(kernel_id).is_ok());
        for kernel_id in kernel_ids {
            // A thread's name is read once, when it is first seen.
            if names.contains_key(&kernel_id) {
                continue;
            }
            let name = std::fs::read_to_string(format!("/proc/self/task/{kernel_id}/comm"))
                .map(|name| name.trim_end().to_string())
                .unwrap_or_default();
            names.insert(kernel_id, Arc::from(name.as_str()));
            if name != crate::context::AGENT_THREAD_NAME
                && !crate::guard::is_agent_kernel_id(kernel_id)
            {
                self.time_thread(context, kernel_id);
            }
        }
    }

    /// The name of a thread of the JVM's own, as the kernel has it.
    fn vm_thread_name(&self, kernel_id: i32) -> Arc<str> {
        lock(&self.vm_thread_names)
            .get(&kernel_id)
            .cloned()
            .unwrap_or_else(|| Arc::from(format!("thread {kernel_id}").as_str()))
    }

    fn with_signals(&self, context: &Context) -> bool {
        self.sampler == SamplerKind::Signals && context.options.depth > 0
    }

    /// Starts a CPU timer for a thread of this process, unless it has one or nothing is sampled
    /// with signals.
    fn time_thread(&self, context: &Context, kernel_id: i32) {
        if !self.with_signals(context) || crate::guard::is_dying() {
            return;
        }
        let mut threads = lock(&context.threads);
        // Asked under the threads' lock, which `pause` takes to stop the timers: a timer is
        // never left running after a pause.
        if !self.recording.load(Ordering::Acquire) || !threads.wants_timer(kernel_id) {
            return;
        }
        match self.start_timer(self.interval_ms.load(Ordering::Relaxed), kernel_id) {
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
    fn start_timer(&self, interval: u32, kernel_id: i32) -> std::io::Result<ThreadTimer> {
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

    /// HPROF's own sampling: the stacks of all runnable threads, from a JVMTI call that waits
    /// for a safepoint.
    fn sample_all_threads(&self, context: &Context) {
        let jvmti = context.jvmti;
        let mut samples: Vec<(u32, Vec<(jmethodID, Location)>)> = Vec::new();
        let _ = jvmti.with_all_stack_traces(context.options.depth, |infos| {
            for info in infos {
                let runnable = info.state & JVMTI_THREAD_STATE_RUNNABLE != 0;
                let held = info.state
                    & (JVMTI_THREAD_STATE_SUSPENDED | JVMTI_THREAD_STATE_INTERRUPTED)
                    != 0;
                let serial = context.thread_serial(info.thread);
                if !runnable || held || info.frame_count <= 0 || serial == 0 {
                    continue;
                }
                // SAFETY: JVMTI filled `frame_count` frames at `frame_buffer`.
                let frames = unsafe {
                    std::slice::from_raw_parts(info.frame_buffer, info.frame_count as usize)
                };
                let frames = frames
                    .iter()
                    .map(|frame| (frame.method, Location::of_jvmti(frame.location)))
                    .collect();
                samples.push((serial, frames));
            }
        });
        let Some(report) = &context.report else {
            return;
        };
        let mut report = lock(report);
        for (serial, frames) in samples {
            let thread = context.options.thread.then_some(serial);
            report.profile.add_sample(jvmti, thread, frames.into_iter());
        }
    }

    fn sampler_report(
        &self,
        context: &Context,
        dump: &CpuDump,
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
        };
        SamplerReport {
            sampler: sampler.into(),
            note,
            clock,
            interval_ms: self.interval_ms.load(Ordering::Relaxed),
            depth: Some(self.control.max_depth.load(Ordering::Relaxed)),
            failed: dump.failed.clone(),
            // Written by earlier agents, whose second walks handed AsyncGetCallTrace made-up
            // frames; none are made now.
            recovered: Default::default(),
            walker: (self.sampler == SamplerKind::Signals)
                .then(|| context.options.walker.to_string()),
            walker_counts: crate::vm_walker::take_counts()
                .into_iter()
                .chain(crate::walker_check::take_counts())
                .collect(),
            walker_examples: crate::walker_check::take_named_examples(context.jvmti),
            dropped: dump.dropped,
            in_agent: signals::take_in_agent_samples(),
            cost_us,
        }
    }

    /// Writes the CPU samples since the last dump.
    pub fn dump_samples(&self, context: &Context, dump: &Dump<'_>) {
        let options = &context.options;
        if options.verbose {
            eprint!("Dumping CPU usage by sampling running threads ...");
        }
        let started = signals::thread_cpu_nanos();
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let cpu = report
            .profile
            .take_dump(CpuTableKind::Samples, hprof_date(), options.cutoff);
        // What profiling cost since the last dump, so users (and BENCHMARKS.md) can see it.
        let mut cost_us = BTreeMap::new();
        if self.sampler == SamplerKind::Signals {
            cost_us.insert("handler".into(), signals::take_handler_nanos() / 1000);
        }
        if self.native_frames && options.cstack == CStack::Dwarf {
            cost_us.insert(
                "unwind_tables".into(),
                crate::native_stack::take_unwind_build_nanos() / 1000,
            );
        }
        let worker = context.agent_thread_cpu_nanos.load(Ordering::Relaxed);
        let reported = self.agent_thread_reported.swap(worker, Ordering::Relaxed);
        cost_us.insert(
            "agent_thread".into(),
            worker.saturating_sub(reported) / 1000,
        );
        let dumping = signals::thread_cpu_nanos().saturating_sub(started);
        cost_us.insert("dump".into(), dumping / 1000);
        let sampler = self.sampler_report(context, &cpu, cost_us);
        if let Err(error) = report.output.cpu_dump(&cpu, &sampler) {
            report.complain(error);
        }
        if options.verbose {
            eprintln!(" done.");
        }
    }

    /// Samples every `ms` milliseconds of each thread's CPU time from now on: every timer is
    /// started again with the new interval.
    pub fn set_interval(&self, context: &Context, ms: u32) {
        self.interval_ms.store(ms, Ordering::Relaxed);
        if self.with_signals(context) && self.recording.load(Ordering::Acquire) {
            lock(&context.threads).stop_timers();
            self.time_running_threads(context);
        }
    }

    /// At attach, or when a profiling session starts: a CPU timer for every thread of the
    /// process but the agent's own, Java or not (the Java threads cannot start one on
    /// themselves that late). Returns the line for the attach report.
    fn time_running_threads(&self, context: &Context) -> Option<String> {
        let tasks: Vec<i32> = signals::process_threads()
            .unwrap_or_default()
            .into_iter()
            .filter(|kernel_id| !crate::guard::is_agent_kernel_id(*kernel_id))
            .collect();
        let timed_before = lock(&context.threads).timer_count();
        for kernel_id in &tasks {
            self.time_thread(context, *kernel_id);
        }
        let timed = lock(&context.threads)
            .timer_count()
            .saturating_sub(timed_before);
        self.with_signals(context).then(|| {
            format!(
                "CPU timers started on {timed} of the {} threads of the process",
                tasks.len()
            )
        })
    }
}

impl Engine for CpuSamples {
    fn needs(_options: &Options) -> Vec<Need> {
        // AsyncGetCallTrace's needs (ClassLoad events, jmethodIDs, debug information at
        // non-safepoints) are the agent's core needs.
        Vec::new()
    }

    fn start(&self, context: &Context, jni: *mut JNIEnv) -> Option<String> {
        prepare_walks(context, jni, self.with_signals(context));
        let line = if context.phase == Phase::Live {
            self.time_running_threads(context)
        } else {
            None
        };
        if self.native_frames {
            // The libraries the VM loaded while it started (libjava, libzip, ...).
            crate::native_stack::refresh_code_ranges_if_changed();
        }
        if self.with_signals(context) {
            signals::set_enabled(signals::SampleKind::Cpu, true);
        }
        line
    }

    fn thread_started(&self, context: &Context, serial: u32, _name: &str, _group: &str) {
        if !lock(&context.threads).is_sampled(serial) {
            return;
        }
        if self.native_frames {
            // Before its timer starts: the native walk reads only inside the thread's stack.
            crate::native_stack::remember_current_thread_stack(signals::current_thread_id());
        }
        self.time_thread(context, signals::current_thread_id());
    }

    fn thread_ended(&self, _context: &Context, _serial: u32) {
        if self.native_frames {
            crate::native_stack::forget_current_thread_stack(signals::current_thread_id());
        }
    }

    fn period(&self, _context: &Context) -> Option<Duration> {
        match self.sampler {
            SamplerKind::Signals => None,
            SamplerKind::Jvmti { .. } => Some(Duration::from_millis(
                self.interval_ms.load(Ordering::Relaxed).into(),
            )),
        }
    }

    fn tick(&self, context: &Context, _jni: *mut JNIEnv) {
        if matches!(self.sampler, SamplerKind::Jvmti { .. })
            && context.options.depth > 0
            && self.recording.load(Ordering::Acquire)
        {
            self.sample_all_threads(context);
        }
    }

    /// Moves the samples from the ring into the profile.
    fn collect(&self, context: &Context, report: &mut Report) {
        let Some(ring) = signals::ring() else {
            return;
        };
        let raw = crate::sampled::take(crate::sampled::Kind::Cpu);
        // Only the agent's thread reads the libraries and builds their unwind tables: it is not
        // sampled, and no application thread waits for it (a collect may come on one).
        if self.native_frames && crate::guard::is_agent_thread() {
            // The libraries first: a library loaded since (System.load) is walked by frame
            // pointers at once, while the first unwind tables take their time (a second and
            // more in a debug build, on a busy machine).
            crate::native_stack::refresh_code_ranges_if_changed();
            crate::native_stack::build_unwind_tables_if_missing();
        }
        if self.vm_threads
            && self
                .drains_since_thread_scan
                .fetch_add(1, Ordering::Relaxed)
                + 1
                >= DRAINS_PER_THREAD_SCAN
        {
            self.drains_since_thread_scan.store(0, Ordering::Relaxed);
            self.time_vm_threads(context);
        }
        report.profile.add_dropped(ring.take_dropped());
        let serials: Vec<Option<u32>> = {
            let mut threads = lock(&context.threads);
            let serials: Vec<Option<u32>> = raw
                .iter()
                .map(|sample| threads.serial_of_kernel_id(sample.kernel_id))
                .collect();
            // Threads timed at attach that are not the VM's (GC workers, native threads) have
            // shown it with their first sample: their timers go.
            for (sample, serial) in raw.iter().zip(&serials) {
                if !self.vm_threads
                    && serial.is_none()
                    && sample.failure == Some(signals::NOT_A_VM_THREAD)
                {
                    threads.stop_stranger_timer(sample.kernel_id);
                }
            }
            // And those that ended, before their kernel ids go to new threads.
            threads.stop_gone_stranger_timers(|kernel_id| {
                signals::task_cpu_nanos(kernel_id).is_some()
            });
            serials
        };
        let depth = self.control.max_depth.load(Ordering::Relaxed) as usize;
        let sampled_names = context.options.threads.is_some();
        for (sample, serial) in raw.into_iter().zip(serials) {
            if !self.control.samples(serial) {
                continue;
            }
            // threads=: threads timed at attach before their names were known, and samples of
            // threads the JVM owns, are left out unless their names match.
            if sampled_names
                && !serial.is_some_and(|serial| lock(&context.threads).is_sampled(serial))
            {
                continue;
            }
            let thread = serial.filter(|_| context.options.thread);
            match sample.failure {
                // A thread of the JVM's own (vmthreads=y): no Java stack, by nature; its native
                // frames under its name.
                Some(_) if serial.is_none() && self.vm_threads => {
                    let native = sample
                        .frames
                        .into_iter()
                        .filter(|frame| matches!(frame, SampledFrame::NativeCode(_)));
                    let root = SampledFrame::VmThread(self.vm_thread_name(sample.kernel_id));
                    report
                        .profile
                        .add_sampled(context.jvmti, None, native.chain([root]), 0);
                }
                // A failed walk on a thread that is no Java thread the agent knows comes from a
                // thread timed at attach that is the VM's own (a compiler thread, say): no Java
                // code was interrupted, so it is neither a sample nor a failure to report.
                Some(_) if serial.is_none() => {}
                Some(code) => {
                    report.profile.add_failure(code);
                    // Its native frames, then the mark.
                    let native = sample
                        .frames
                        .into_iter()
                        .filter(|frame| matches!(frame, SampledFrame::NativeCode(_)));
                    report.profile.add_sampled(
                        context.jvmti,
                        thread,
                        native.chain([SampledFrame::FailedWalk(code)]),
                        sample.call,
                    );
                }
                // The native frames on top, then `depth` Java frames (the depth asked for now).
                None => {
                    let native = sample
                        .frames
                        .iter()
                        .take_while(|frame| matches!(frame, SampledFrame::NativeCode(_)))
                        .count();
                    report.profile.add_sampled(
                        context.jvmti,
                        thread,
                        sample.frames.into_iter().take(native + depth),
                        sample.call,
                    )
                }
            }
        }
    }

    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        self.dump_samples(context, dump);
    }

    fn in_sessions(&self) -> bool {
        true
    }

    fn pause(&self, context: &Context) {
        self.recording.store(false, Ordering::Release);
        // Timers first (closing a perf event or deleting a POSIX timer stops its signals),
        // then the handler ignores any SIGPROF still pending on a thread.
        lock(&context.threads).stop_timers();
        signals::set_enabled(signals::SampleKind::Cpu, false);
    }

    fn resume(
        &self,
        context: &Context,
        _jni: *mut JNIEnv,
        options: &Options,
    ) -> AgentResult<Option<String>> {
        self.interval_ms
            .store(options.interval_ms, Ordering::Relaxed);
        signals::take_handler_nanos();
        self.recording.store(true, Ordering::Release);
        if self.with_signals(context) {
            signals::set_enabled(signals::SampleKind::Cpu, true);
        }
        self.time_running_threads(context);
        Ok(self.describe(context))
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        Some(match &self.sampler {
            SamplerKind::Signals => format!(
                "sampling with AsyncGetCallTrace every {} ms of each thread's CPU time ({})",
                self.interval_ms.load(Ordering::Relaxed),
                lock(&self.clock).0.describe()
            ),
            SamplerKind::Jvmti { note } => format!("sampling with GetAllStackTraces: {note}"),
        })
    }
}

/// What the signal handler's walks need once the VM runs, done once whichever sampling engine
/// (CPU or wall clock) starts first: VMStructs' thread layout (for the walks in VM code
/// AsyncGetCallTrace gives up on, and the wall samples' thread states) and where the code of
/// compiled methods and the interpreter is.
pub(crate) fn prepare_walks(context: &Context, jni: *mut JNIEnv, with_signals: bool) {
    static PREPARED: std::sync::Once = std::sync::Once::new();
    PREPARED.call_once(|| {
        if with_signals && !jni.is_null() {
            let learnt = crate::vm_structs::learn(context.jvmti, jni);
            if let (Err(why), true) = (learnt, context.options.verbose) {
                eprintln!("openprof: samples in VM code are not walked: {why}");
            }
            if crate::vm_walker::wanted() {
                if let Err(why) = crate::vm_walker::learn() {
                    eprintln!(
                        "openprof: walker={} is off, AsyncGetCallTrace walks: {why}",
                        context.options.walker
                    );
                }
            }
        }
        if context.phase == Phase::Live || crate::vm_walker::wanted() {
            // The methods compiled before the attach (or before our walker could read their
            // frames): where their code is.
            let _ = context
                .jvmti
                .generate_events(jvmti_bindings::sys::jvmti::JVMTI_EVENT_COMPILED_METHOD_LOAD);
        }
        // Where the interpreter is: generated before the agent's events may have been on.
        let _ = context
            .jvmti
            .generate_events(jvmti_bindings::sys::jvmti::JVMTI_EVENT_DYNAMIC_CODE_GENERATED);
    });
}

/// Installs the signal handler and its ring, once, for whichever sampling engine comes first.
pub(crate) fn install_signal_sampler(
    vm: *mut JavaVM,
    options: &Options,
) -> Result<(), InstallError> {
    if signals::installed() {
        return Ok(());
    }
    // Up to 4096 samples (two seconds of two cores sampled every millisecond, a hundred drains'
    // worth), fewer for deep stacks so that the ring stays within 16 MiB.
    // A slot holds `depth` Java frames and the native frames above them.
    let depth = options.depth.clamp(1, MAX_DEPTH) as usize;
    let native = match options.cstack {
        CStack::FramePointers | CStack::Dwarf => crate::native_stack::MAX_NATIVE_FRAMES,
        CStack::No => 0,
    };
    let frame_bytes = std::mem::size_of::<crate::ring::CallFrame>();
    let slots = (16 << 20) / ((depth + native) * frame_bytes);
    let ring = SampleRing::new(slots.clamp(64, 4096), depth + native);
    signals::install(vm, ring, depth)
}

fn choose_sampler(vm: *mut JavaVM, options: &Options, phase: Phase) -> AgentResult<SamplerKind> {
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
    match install_signal_sampler(vm, options) {
        Ok(()) => Ok(SamplerKind::Signals),
        Err(InstallError::NoAsyncGetCallTrace) => Ok(SamplerKind::Jvmti {
            note: "AsyncGetCallTrace not found in this JVM; samples are biased towards safepoints"
                .into(),
        }),
        Err(InstallError::Sigaction(error)) => Err(AgentError::Refused(format!(
            "can't install the SIGPROF handler: {error}"
        ))),
    }
}
