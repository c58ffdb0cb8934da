//! vmthreads=y: the JVM's own threads sampled beside the Java ones. VmCalls allocates large
//! arrays without pause, so the GC's threads collect all the time, and its first second
//! compiles the loop: both kinds of the JVM's threads must show, each with its whole native
//! stack down to the thread's start, under a root naming the thread.

use std::time::Duration;

use openprof_format::hprof_text::{FrameLine, TextProfile, Trace};
use openprof_testkit::run_java;

const LIMIT: Duration = Duration::from_secs(120);

fn profile_of(options: &str) -> TextProfile {
    let run = run_java(
        Some(&format!(
            "cpu=samples,interval=1,depth=64,cutoff=0,{options},file=vm.txt"
        )),
        "VmCalls",
        // Four seconds: the JVM's threads get about 150 samples, so a few cut stacks (a thread
        // caught starting or ending) do not decide the share of whole ones.
        &["4"],
        LIMIT,
    );
    assert!(run.success(), "{options}: {}", run.stderr());
    run.profile("vm.txt")
}

/// (trace, samples) for every row of every CPU SAMPLES table.
fn sampled_traces(profile: &TextProfile) -> Vec<(&Trace, u64)> {
    profile
        .cpu_tables
        .iter()
        .flat_map(|table| table.rows.iter())
        .map(|row| (&profile.traces[&row.trace], row.count))
        .collect()
}

/// The `[thread name]` a trace is rooted at, if it was taken on a thread of the JVM's own.
fn vm_thread_of(trace: &Trace) -> Option<&str> {
    trace
        .frames
        .last()
        .filter(|frame| frame.line == FrameLine::VmThread)
        .map(|frame| frame.method_name.as_str())
}

#[test]
fn the_jvms_own_threads_are_sampled_with_their_native_stacks() {
    let profile = profile_of("vmthreads=y");
    let traces = sampled_traces(&profile);
    let vm: Vec<(&Trace, u64)> = traces
        .iter()
        .copied()
        .filter(|(trace, _)| vm_thread_of(trace).is_some())
        .collect();
    let vm_total: u64 = vm.iter().map(|(_, count)| count).sum();
    assert!(vm_total > 0, "no sample of the JVM's own threads");
    let on = |prefixes: &[&str]| -> Vec<(&Trace, u64)> {
        vm.iter()
            .copied()
            .filter(|(trace, _)| {
                let name = vm_thread_of(trace).unwrap_or_default();
                prefixes.iter().any(|prefix| name.starts_with(prefix))
            })
            .collect()
    };
    let names_in = |sampled: &[(&Trace, u64)], part: &str| {
        sampled
            .iter()
            .filter(|(trace, _)| {
                trace.frames.iter().any(|frame| {
                    frame.line == FrameLine::NativeCode && frame.method_name.contains(part)
                })
            })
            .map(|(_, count)| count)
            .sum::<u64>()
    };
    // The collector's threads, in the collector's code.
    let gc = on(&["[GC Thread", "[VM Thread", "[G1 "]);
    assert!(
        names_in(&gc, "G1") > 0 || names_in(&gc, "Collect") > 0,
        "no GC work on the GC's threads: {:?}",
        gc.iter()
            .map(|(trace, _)| &trace.frames)
            .take(3)
            .collect::<Vec<_>>()
    );
    // The JIT compilers' threads, compiling.
    let jit = on(&["[C1 CompilerThre", "[C2 CompilerThre"]);
    assert!(
        names_in(&jit, "Compil") > 0,
        "no compiling on the compilers' threads: {:?}",
        jit.iter()
            .map(|(trace, _)| &trace.frames)
            .take(3)
            .collect::<Vec<_>>()
    );
    // The agent's own thread is never among them. Its code runs on the JVM's threads too (the
    // Service Thread calls its CompiledMethodLoad callback), but only its own thread starts in
    // Rust's thread entry, and only it is named `openprof`.
    let agents: u64 = vm
        .iter()
        .filter(|(trace, _)| {
            vm_thread_of(trace) == Some("[openprof]")
                || trace.frames.iter().any(|frame| {
                    frame.line == FrameLine::NativeCode
                        && frame.class_name.contains("libopenprof_agent")
                        && frame.method_name.contains("std::sys::thread")
                })
        })
        .map(|(_, count)| count)
        .sum();
    assert_eq!(agents, 0, "samples of the agent's own thread");
    // The JVM's own functions are named as the VM's.
    let in_vm: Vec<&str> = vm
        .iter()
        .flat_map(|(trace, _)| &trace.frames)
        .filter(|frame| frame.line == FrameLine::NativeCode && frame.class_name == "libjvm.so")
        .map(|frame| frame.method_name.as_str())
        .collect();
    assert!(!in_vm.is_empty(), "no frame in libjvm.so");
    let unmarked: Vec<&&str> = in_vm
        .iter()
        .filter(|name| !name.starts_with("[vm] "))
        .collect();
    assert!(
        unmarked.is_empty(),
        "frames of libjvm.so not named [vm]: {unmarked:?}"
    );
    // Their native stacks are whole: down to the function that starts the JVM's threads.
    let whole = names_in(&vm, "thread_native_entry");
    assert!(
        whole * 10 >= vm_total * 8,
        "{whole} of {vm_total} samples of the JVM's threads reach thread_native_entry"
    );
    // The program's own thread is sampled beside them: its samples (in main, or failed walks
    // in the VM's allocation code) are not rooted at a thread mark.
    let java_total: u64 = traces
        .iter()
        .filter(|(trace, _)| vm_thread_of(trace).is_none())
        .map(|(_, count)| count)
        .sum();
    assert!(java_total >= 500, "{java_total} samples of Java threads");
}

#[test]
fn without_vmthreads_only_java_threads_are_sampled() {
    let profile = profile_of("vmthreads=n");
    let traces = sampled_traces(&profile);
    let vm: Vec<&str> = traces
        .iter()
        .filter_map(|(trace, _)| vm_thread_of(trace))
        .collect();
    assert!(vm.is_empty(), "samples of the JVM's threads: {vm:?}");
    assert!(traces.iter().map(|(_, count)| count).sum::<u64>() >= 500);
}
