//! Commands from the collector (HPROF's socket commands of seed 002 and openprof's extensions),
//! carried out on the agent's own thread, where JNI is at hand, and answered with a reply.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use openprof_format::options::CpuMode;
use openprof_format::wire::{Command, CommandClass, Reply};

use super::{heap_figures, lock, Agent};
use crate::jvmti::{JNIEnv, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC};

/// What CONTROL commands changed in CPU sampling.
pub struct SamplingControl {
    /// Frames kept per sample; at most the `depth=` the agent started with.
    pub max_depth: AtomicU32,
    /// CPU sampling off for every thread.
    pub all_off: AtomicBool,
    /// CPU sampling off for these threads (by serial number).
    pub threads_off: Mutex<HashSet<u32>>,
}

impl SamplingControl {
    pub fn new(depth: u32) -> SamplingControl {
        SamplingControl {
            max_depth: AtomicU32::new(depth),
            all_off: AtomicBool::new(false),
            threads_off: Mutex::new(HashSet::new()),
        }
    }

    /// Whether a sample of this thread counts.
    pub fn samples(&self, thread: Option<u32>) -> bool {
        !self.all_off.load(Ordering::Relaxed)
            && thread.is_none_or(|serial| !lock(&self.threads_off).contains(&serial))
    }
}

impl Agent {
    /// Called from the network thread: the command waits for the agent's thread.
    pub(super) fn queue_command(&self, serial: u32, command: Command) {
        lock(&self.commands).push_back((serial, command));
    }

    /// Carries out the queued commands and replies to each.
    pub(super) fn run_commands(&self, jni: *mut JNIEnv) {
        loop {
            let Some((serial, command)) = lock(&self.commands).pop_front() else {
                return;
            };
            let outcome = match self.refusal(&command) {
                Some(refused) => Err(refused),
                None => catch_unwind(AssertUnwindSafe(|| self.execute(jni, &command)))
                    .unwrap_or_else(
                        |_| Err("internal error while carrying out the command".into()),
                    ),
            };
            if let Some(state) = &self.state {
                let _ = lock(state).output.flush();
            }
            if let Some(tracer) = &self.tracer {
                tracer.flush();
            }
            let (ok, message) = match outcome {
                Ok(message) => (true, message),
                Err(message) => (false, message),
            };
            if let Some(net) = &self.net {
                net.reply(&Reply {
                    serial,
                    ok,
                    message,
                });
            }
            if ok && command == Command::ExitVm {
                exit_vm(self.vm);
            }
        }
    }

    /// Why this agent does not carry out a command its options do not allow, if it doesn't.
    fn refusal(&self, command: &Command) -> Option<String> {
        let class = command.class();
        if class == CommandClass::Profile || self.options.commands.contains(&class) {
            return None;
        }
        let name = match command {
            Command::DumpHeap => "dump-heap",
            Command::ExitVm => "exit",
            Command::MptAdd { .. } => "mpt-add",
            _ => "mpt-remove",
        };
        Some(format!(
            "this agent does not allow {name}: it was started without commands={} (an agent obeys commands that read or end the JVM only when its options say so)",
            class.option_word()
        ))
    }

    fn execute(&self, jni: *mut JNIEnv, command: &Command) -> Result<String, String> {
        let hprof = || {
            self.state
                .as_ref()
                .ok_or_else(|| format!("{command:?} needs HPROF output (format=a or format=b)"))
        };
        let sampling = || {
            if self.options.cpu == Some(CpuMode::Samples) {
                Ok(())
            } else {
                Err(format!("{command:?} needs cpu=samples"))
            }
        };
        let tracing = || {
            self.tracer
                .as_ref()
                .ok_or_else(|| format!("{command:?} needs trace output (format=x)"))
        };
        match command {
            Command::ForceGc => self
                .jvmti
                .force_garbage_collection()
                .map(|()| "garbage collected".to_string())
                .map_err(|error| error.to_string()),
            Command::DumpHeap => {
                let state = hprof()?;
                if !self.heap_dumps {
                    return Err("heap dumps need heap=dump or heap=all".into());
                }
                self.dump_heap(state, jni);
                Ok("heap dumped".into())
            }
            Command::AllocSites { cutoff, .. } => {
                let state = hprof()?;
                let allocations = self
                    .allocations
                    .as_ref()
                    .ok_or("allocation sites need heap=sites or heap=all")?;
                self.dump_sites_cut(state, allocations, f64::from(*cutoff));
                Ok("allocation sites written".into())
            }
            Command::HeapSummary => {
                let (total, used) = heap_figures(jni).ok_or("the heap's size is not available")?;
                Ok(format!("heap: {used} bytes used of {total}"))
            }
            Command::ExitVm => Ok("the VM exits".into()),
            Command::DumpTraces => {
                let state = hprof()?;
                let mut state = lock(state);
                self.collect(&mut state);
                let traces = state.profile.all_unprinted_traces();
                state
                    .output
                    .traces(&traces)
                    .map_err(|error| error.to_string())?;
                Ok(format!("{} traces written", traces.len()))
            }
            Command::CpuSamples { .. } => {
                let state = hprof()?;
                sampling()?;
                self.dump_samples(state);
                Ok("CPU samples written".into())
            }
            Command::AllocTraces { on } => {
                if self.allocations.is_none() {
                    return Err("allocation traces need heap=sites or heap=all".into());
                }
                self.jvmti
                    .set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, *on)
                    .map_err(|error| error.to_string())?;
                Ok(format!(
                    "allocation traces {}",
                    if *on { "on" } else { "off" }
                ))
            }
            Command::CpuSampling { on, thread } => {
                sampling()?;
                let switch = if *on { "on" } else { "off" };
                if *thread == 0 {
                    self.sampling.all_off.store(!*on, Ordering::Relaxed);
                    if *on {
                        lock(&self.sampling.threads_off).clear();
                    }
                    return Ok(format!("CPU sampling {switch} for all threads"));
                }
                let serial = u32::try_from(*thread)
                    .ok()
                    .filter(|serial| lock(&self.threads).is_known(*serial))
                    .ok_or_else(|| format!("there is no thread {thread}"))?;
                let mut off = lock(&self.sampling.threads_off);
                if *on {
                    off.remove(&serial);
                } else {
                    off.insert(serial);
                }
                Ok(format!("CPU sampling {switch} for thread {serial}"))
            }
            Command::ClearCpuSamples => {
                let state = hprof()?;
                sampling()?;
                let mut state = lock(state);
                self.collect(&mut state);
                state.profile.clear_counts();
                Ok("CPU samples cleared".into())
            }
            Command::SetMaxDepth { depth } => {
                sampling()?;
                let depth = u32::from(*depth);
                if depth > self.options.depth {
                    return Err(format!(
                        "depth {depth} is deeper than the depth={} the agent started with, which sizes its buffers",
                        self.options.depth
                    ));
                }
                self.sampling.max_depth.store(depth, Ordering::Relaxed);
                Ok(format!("stack depth {depth}"))
            }
            Command::TraceStart => tracing()?.start_trace(),
            Command::TraceEnd => tracing()?.end_trace(jni),
            Command::Filter { block } => tracing()?.set_filters(block),
            Command::Snapshot { name } => {
                tracing()?.snapshot(name);
                Ok(format!("snapshot marker '{name}' written"))
            }
            Command::MptAdd { specs } => {
                let specs = parse_specs(specs)?;
                Ok(parameter_tracing(self)?.add_specs(jni, specs))
            }
            Command::MptRemove { specs } => {
                let specs = parse_specs(specs)?;
                parameter_tracing(self)?.remove_specs(jni, &specs)
            }
            Command::MptList => {
                let specs = parameter_tracing(self)?.specs_in_force();
                Ok(if specs.is_empty() {
                    "no method parameter tracing specifications are in force".into()
                } else {
                    specs.join("\n")
                })
            }
        }
    }
}

fn parameter_tracing(agent: &Agent) -> Result<&crate::mpt::Mpt, String> {
    agent
        .mpt
        .as_ref()
        .ok_or_else(|| "method parameter tracing is off in this agent".to_string())
}

/// Specifications sent by the collector, faults named by line and column.
fn parse_specs(text: &str) -> Result<Vec<openprof_format::mpt::MptSpec>, String> {
    let specs = openprof_format::mpt::parse_specs(text)
        .map_err(|error| format!("bad specification: {error}"))?;
    if specs.is_empty() {
        return Err("no specification given (one a line, docs/mpt.md)".into());
    }
    Ok(specs)
}

/// EXIT THE VM: System.exit(0) from a thread of its own, so that the agent's thread is free to
/// finish its work while the VM shuts down (VMDeath waits for it).
fn exit_vm(vm: *mut crate::jvmti::JavaVM) {
    let vm = vm as usize;
    let spawned = std::thread::Builder::new()
        .name("openprof-exit".into())
        .spawn(move || {
            let vm = vm as *mut crate::jvmti::JavaVM;
            let Some(jni) = super::attach_current_thread(vm) else {
                return;
            };
            // SAFETY: `jni` belongs to this attached thread; the class and method ids are
            // checked before the call.
            unsafe {
                let functions = &**jni;
                let system = (functions.FindClass)(jni, c"java/lang/System".as_ptr());
                if system.is_null() {
                    (functions.ExceptionClear)(jni);
                    return;
                }
                let exit =
                    (functions.GetStaticMethodID)(jni, system, c"exit".as_ptr(), c"(I)V".as_ptr());
                if exit.is_null() {
                    (functions.ExceptionClear)(jni);
                    return;
                }
                let arguments = [crate::jvmti::jvalue { i: 0 }];
                (functions.CallStaticVoidMethodA)(jni, system, exit, arguments.as_ptr());
            }
        });
    if let Err(error) = spawned {
        eprintln!("openprof: can't exit the VM: {error}");
    }
}
