//! The profiled JVM must never crash or hang because of the agent: this test tries hard, with
//! CPU and wall-clock samples (every thread signalled every millisecond) at once, while the
//! workload recurses deep, allocates at changing rates, unloads classes, redefines the class of
//! its deepest frames again and again (a deoptimisation storm) and starts 10,000 threads.

use std::time::Duration;

use openprof_format::hprof_text::CpuTableKind;

use openprof_testkit::{
    java_command, java_command_with, poll, send_signal, stuck_report,
    wait_until_ready_keeping_output, wait_with_limit, PipeText,
};

/// What the agent says on stderr once a dump's CPU samples are written.
const DUMPED: &str = "Dumping CPU usage by sampling running threads ... done.";

#[test]
fn deep_stacks_gc_class_unloading_and_repeated_dumps_do_not_hurt_the_jvm() {
    stress("");
}

/// The same with both walkers on every sample: ours (reading frames of methods being compiled,
/// deoptimised and unloaded meanwhile) and AsyncGetCallTrace.
#[test]
fn our_walker_beside_asyncgetcalltrace_does_not_hurt_the_jvm() {
    stress(",walker=check");
}

fn stress(more_options: &str) {
    let (mut command, dir) = java_command_with(
        // The workload attaches a Java agent to itself to redefine classes.
        &["-Djdk.attach.allowAttachSelf=true"],
        Some(&format!(
            "cpu=samples,interval=1,wall=1,depth=2048,thread=y,cutoff=0,vmthreads=y,file=stress.txt{more_options}"
        )),
        "Stress",
        &["8", "redefine=5", "starts=10000"],
    );
    let mut child = command.spawn().expect("start java");
    let pid = child.id();
    // Dumps are asked for once the JVM runs the workload: on a loaded machine a start-up can
    // take longer than the first pause.
    let stdout = wait_until_ready_keeping_output(&mut child);
    let stderr = PipeText::read(child.stderr.take().expect("piped stderr"));
    for dumps in 1..=5 {
        send_signal(pid, libc::SIGQUIT); // a data dump while sampling runs
                                         // The next signal once this dump is written: two signals at once may make one dump.
        let written = poll(Duration::from_secs(120), || {
            (stderr.text().matches(DUMPED).count() >= dumps).then_some(())
        });
        if written.is_none() {
            // Stuck or starved: what each thread does says which, before the JVM is killed.
            let report = stuck_report(pid);
            let _ = child.kill();
            panic!(
                "dump {dumps} was not written within 120 s; the output so far:\n{}\n{report}",
                stderr.text()
            );
        }
    }
    let output = wait_with_limit(child, Duration::from_secs(180));
    let stdout = stdout.join().expect("the workload's output");
    let stderr = stderr.whole(Duration::from_secs(60));
    assert!(
        output.status.success(),
        "the JVM failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("stress done"), "{stdout}");
    let count = |label: &str| -> u64 {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(label))
            .and_then(|count| count.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{label}' in the workload's output:\n{stdout}"))
    };
    assert!(count("threads started:") >= 10_000, "{stdout}");
    assert!(count("redefinitions:") >= 5, "{stdout}");
    let crash_logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("hs_err"))
        .collect();
    assert!(crash_logs.is_empty(), "crash logs: {crash_logs:?}");

    let text = std::fs::read(dir.join("stress.txt")).unwrap();
    let profile = openprof_format::hprof_text::read(text.as_slice()).unwrap();
    // Five dumps on SIGQUIT and one at exit, each with its CPU and its wall samples.
    for kind in [CpuTableKind::Samples, CpuTableKind::Wall] {
        let tables = profile.cpu_tables.iter().filter(|table| table.kind == kind);
        assert_eq!(tables.count(), 6, "{kind:?} tables");
    }
    let deepest = profile
        .traces
        .values()
        .map(|trace| trace.frames.len())
        .max()
        .unwrap();
    assert!(
        deepest > 1000,
        "deep stacks are walked (deepest {deepest} frames)"
    );
    // The recursion is in Stress$Deep, the class the workload redefines.
    let recurse_on_top = profile.traces.values().any(|trace| {
        trace
            .frames
            .first()
            .is_some_and(|f| f.qualified_method() == "Stress$Deep.recurse")
    });
    assert!(recurse_on_top);
}

/// What a stress test prints when a JVM seems stuck: every thread with its state and CPU, and
/// the JVM's own thread dump, taken from a running JVM.
#[test]
fn a_stuck_report_names_each_thread_and_the_jvms_stacks() {
    // Long enough to outlast the report; ended once it is taken.
    let (mut command, _dir) = java_command(Some("cpu=samples,interval=1"), "Stress", &["300"]);
    let mut child = command.spawn().expect("start java");
    let stdout = wait_until_ready_keeping_output(&mut child);
    let report = stuck_report(child.id());
    child.kill().expect("end java");
    child.wait().expect("wait for java");
    drop(stdout.join());
    // The threads are there (the launcher's and Java's main are named java), and the
    // workload's used CPU in the last 2 s.
    let threads: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("  "))
        .collect();
    assert!(
        threads
            .iter()
            .any(|line| line.split_whitespace().nth(1) == Some("java:")),
        "{report}"
    );
    assert!(
        threads.iter().any(|line| !line.ends_with("+0ns")),
        "{report}"
    );
    // The JVM's own dump, or why not: on a loaded machine its attach may take longer.
    assert!(
        report.contains("Full thread dump") && report.contains("Stress.")
            || report.contains("jcmd Thread.print gave no answer in 20 s"),
        "{report}"
    );
}
