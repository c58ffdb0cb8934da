//! Commands from the collector (HPROF's socket commands and openprof's extensions), carried
//! out on the agent's own thread, where JNI is at hand, and answered with a reply.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use openprof_format::wire::{Command, CommandClass, Reply};

use super::{collect, Agent};
use crate::context::{Context, Report};
use crate::engine::{running, Dump};
use crate::engines::cpu_samples::CpuSamples;
use crate::engines::heap_dump::HeapDump;
use crate::engines::heap_sites::HeapSites;
use crate::engines::mpt::Mpt;
use crate::engines::trace::Tracer;
use crate::jni::heap_figures;
use crate::jvmti::{JNIEnv, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC};
use crate::sync::lock;

/// Carries out the queued commands and replies to each.
pub(super) fn run(agent: &Agent, context: &Context, jni: *mut JNIEnv) {
    loop {
        let Some((serial, command)) = lock(&agent.commands).pop_front() else {
            return;
        };
        let outcome = match refusal(context, &command) {
            Some(refused) => Err(refused),
            None => catch_unwind(AssertUnwindSafe(|| execute(context, jni, &command)))
                .unwrap_or_else(|_| Err("internal error while carrying out the command".into())),
        };
        if let Some(report) = &context.report {
            let _ = lock(report).output.flush();
        }
        if let Some(tracer) = running::<Tracer>() {
            tracer.flush();
        }
        let (ok, message) = match outcome {
            Ok(message) => (true, message),
            Err(message) => (false, message),
        };
        if let Some(net) = &context.net {
            net.reply(&Reply {
                serial,
                ok,
                message,
            });
        }
        if ok && command == Command::ExitVm {
            exit_vm(context.vm);
        }
    }
}

/// Why this agent does not carry out a command its options do not allow, if it doesn't.
fn refusal(context: &Context, command: &Command) -> Option<String> {
    let class = command.class();
    if class == CommandClass::Profile || context.options.commands.contains(&class) {
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

fn execute(context: &Context, jni: *mut JNIEnv, command: &Command) -> Result<String, String> {
    let hprof = || {
        context
            .report
            .as_ref()
            .ok_or_else(|| format!("{command:?} needs HPROF output (format=a or format=b)"))
    };
    // The CPU samples engine runs exactly when the options say cpu=samples.
    let sampling =
        || running::<CpuSamples>().ok_or_else(|| format!("{command:?} needs cpu=samples"));
    let tracing =
        || running::<Tracer>().ok_or_else(|| format!("{command:?} needs trace output (format=x)"));
    let collect = |report: &mut Report| collect(context, report);
    let dump = |report| Dump {
        jni,
        report,
        collect: &collect,
    };
    match command {
        Command::ForceGc => context
            .jvmti
            .force_garbage_collection()
            .map(|()| "garbage collected".to_string())
            .map_err(|error| error.to_string()),
        Command::DumpHeap => {
            let report = hprof()?;
            let heap = running::<HeapDump>().ok_or("heap dumps need heap=dump or heap=all")?;
            heap.dump_heap(context, &dump(report));
            Ok("heap dumped".into())
        }
        Command::AllocSites { cutoff, .. } => {
            let report = hprof()?;
            let sites =
                running::<HeapSites>().ok_or("allocation sites need heap=sites or heap=all")?;
            sites.dump_sites(context, &dump(report), f64::from(*cutoff));
            Ok("allocation sites written".into())
        }
        Command::HeapSummary => {
            let (total, used) = heap_figures(jni).ok_or("the heap's size is not available")?;
            Ok(format!("heap: {used} bytes used of {total}"))
        }
        Command::ExitVm => Ok("the VM exits".into()),
        Command::DumpTraces => {
            let mut report = lock(hprof()?);
            collect(&mut report);
            let traces = report.profile.all_unprinted_traces();
            report
                .output
                .traces(&traces)
                .map_err(|error| error.to_string())?;
            Ok(format!("{} traces written", traces.len()))
        }
        Command::CpuSamples { .. } => {
            let report = hprof()?;
            sampling()?.dump_samples(context, &dump(report));
            Ok("CPU samples written".into())
        }
        Command::AllocTraces { on } => {
            if running::<HeapSites>().is_none() {
                return Err("allocation traces need heap=sites or heap=all".into());
            }
            context
                .jvmti
                .set_event(JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, *on)
                .map_err(|error| error.to_string())?;
            Ok(format!(
                "allocation traces {}",
                if *on { "on" } else { "off" }
            ))
        }
        Command::CpuSampling { on, thread } => {
            let control = &sampling()?.control;
            let switch = if *on { "on" } else { "off" };
            if *thread == 0 {
                control.all_off.store(!*on, Ordering::Relaxed);
                if *on {
                    lock(&control.threads_off).clear();
                }
                return Ok(format!("CPU sampling {switch} for all threads"));
            }
            let serial = u32::try_from(*thread)
                .ok()
                .filter(|serial| lock(&context.threads).is_known(*serial))
                .ok_or_else(|| format!("there is no thread {thread}"))?;
            let mut off = lock(&control.threads_off);
            if *on {
                off.remove(&serial);
            } else {
                off.insert(serial);
            }
            Ok(format!("CPU sampling {switch} for thread {serial}"))
        }
        Command::ClearCpuSamples => {
            let report = hprof()?;
            sampling()?;
            let mut report = lock(report);
            collect(&mut report);
            report.profile.clear_counts();
            Ok("CPU samples cleared".into())
        }
        Command::SetMaxDepth { depth } => {
            let control = &sampling()?.control;
            let depth = u32::from(*depth);
            if depth > context.options.depth {
                return Err(format!(
                    "depth {depth} is deeper than the depth={} the agent started with, which sizes its buffers",
                    context.options.depth
                ));
            }
            control.max_depth.store(depth, Ordering::Relaxed);
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
            Ok(parameter_tracing()?.add_specs(jni, specs))
        }
        Command::MptRemove { specs } => {
            let specs = parse_specs(specs)?;
            parameter_tracing()?.remove_specs(jni, &specs)
        }
        Command::SetInterval { ms } => {
            sampling()?.set_interval(context, *ms);
            Ok(format!(
                "CPU samples every {ms} ms of each thread's CPU time"
            ))
        }
        Command::DumpProfile => {
            super::dump_profile(context, jni)?;
            Ok("profile dumped".into())
        }
        Command::MptList => {
            let specs = parameter_tracing()?.specs_in_force();
            Ok(if specs.is_empty() {
                "no method parameter tracing specifications are in force".into()
            } else {
                specs.join("\n")
            })
        }
    }
}

fn parameter_tracing() -> Result<&'static Mpt, String> {
    running::<Mpt>().ok_or_else(|| "method parameter tracing is off in this agent".to_string())
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
            let Some(jni) = crate::jni::attach_current_thread(vm) else {
                return;
            };
            crate::jni::call_system_exit(jni, 0);
        });
    if let Err(error) = spawned {
        eprintln!("openprof: can't exit the VM: {error}");
    }
}
