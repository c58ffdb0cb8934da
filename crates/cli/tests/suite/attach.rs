//! `openprof attach` on real JVMs started without the agent: the profile of a JVM attached to
//! while it runs matches the workload's built-in CPU split; refusals leave the JVM running.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::thread::JoinHandle;

use openprof_format::hprof_text::{LockTableKind, TextProfile};
use openprof_testkit::{
    agent_library, java_command, jcmd, printed_figure, read_profile, samples_by_method, wait_for,
    wait_until_ready_keeping_output, wait_with_limit, PipeText,
};

use crate::helpers::{openprof, text, LIMIT};

/// A JVM running a workload without any agent, waiting for "go" after printing "ready"
/// (AttachTarget, or ParkTimes with `attach`).
struct Target {
    child: Child,
    dir: PathBuf,
    /// The rest of its standard output, once it exits.
    stdout: JoinHandle<String>,
}

impl Target {
    /// AttachTarget burning CPU_SECONDS once it may go.
    fn start(cpu_seconds: &str) -> Target {
        Target::start_workload("AttachTarget", &[cpu_seconds])
    }

    fn start_workload(workload: &str, args: &[&str]) -> Target {
        let (mut command, dir) = java_command(None, workload, args);
        let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
        let stdout = wait_until_ready_keeping_output(&mut child);
        Target { child, dir, stdout }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Lets it go and waits for it to exit: (exit status and stderr, stdout).
    fn go(mut self) -> (Output, String) {
        let mut stdin = self.child.stdin.take().expect("piped stdin");
        stdin.write_all(b"go\n").expect("write go");
        drop(stdin);
        let output = wait_with_limit(self.child, LIMIT);
        (output, self.stdout.join().expect("stdout reader"))
    }
}

/// The thread name behind each CPU row's trace, summed per (method, thread name).
fn samples_by_method_and_thread(profile: &TextProfile) -> Vec<(String, String, u64)> {
    let mut rows = Vec::new();
    for table in &profile.cpu_tables {
        for row in &table.rows {
            let thread = profile
                .traces
                .get(&row.trace)
                .and_then(|trace| trace.thread)
                .and_then(|serial| profile.thread(serial))
                .map_or_else(|| "?".to_string(), |thread| thread.name.clone());
            let method = row.method.clone().unwrap_or_default();
            rows.push((method, thread, row.count));
        }
    }
    rows
}

#[test]
fn attached_agent_samples_running_and_new_threads_with_the_known_split() {
    let target = Target::start("4");
    let pid = target.pid();
    // The agent is found as `openprof run` finds it (next to the binary here).
    let attached = openprof(&[
        "attach",
        &pid,
        "cpu=samples,interval=1,thread=y,file=attached.txt",
    ]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let said = text(&attached.stdout);
    assert!(said.contains(&format!("attached to JVM {pid}")), "{said}");
    let file = target.dir.join("attached.txt");
    assert!(
        said.contains(&format!("profile: {}", file.display())),
        "the JVM's own path for the file: {said}"
    );
    assert!(said.contains("AsyncGetCallTrace"), "{said}");

    let (exited, stdout) = target.go();
    let stderr = text(&exited.stderr);
    assert!(exited.status.success(), "{stderr}");
    assert!(!stderr.contains("openprof ERROR"), "{stderr}");
    let measured: f64 = stdout
        .split("heavy_cpu_share=")
        .nth(1)
        .and_then(|share| share.trim().parse().ok())
        .expect("the workload prints its measured split");

    // heavy() ran on main, running before the attach; light() on a thread started after it.
    let profile = read_profile(&file);
    let by_method = samples_by_method(&profile);
    let heavy = by_method.get("AttachTarget.heavy").copied().unwrap_or(0) as f64;
    let light = by_method.get("AttachTarget.light").copied().unwrap_or(0) as f64;
    let share = heavy / (heavy + light);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "heavy share {share:.3}, built-in 0.75: {by_method:?}"
    );
    assert!(
        (share - measured).abs() <= 0.05,
        "heavy share {share:.3}, measured {measured:.3}"
    );
    // 4 s of CPU in the two methods at one sample per millisecond of each thread's CPU time.
    assert!(
        (3200.0..=4800.0).contains(&(heavy + light)),
        "{heavy}+{light} samples for 4000 ms of CPU"
    );
    let sampler = &profile.samplers[0];
    assert_eq!(sampler.sampler, "AsyncGetCallTrace");
    let total: u64 = profile.cpu_tables.iter().map(|table| table.total).sum();
    assert!(
        sampler.failed_total() * 10 < total,
        "too many failed walks: {sampler:?}"
    );
    // Samples are attributed to their threads: main was matched to its kernel thread at attach.
    for (method, thread, count) in samples_by_method_and_thread(&profile) {
        match method.as_str() {
            "AttachTarget.heavy" => assert_eq!(thread, "main", "{count} samples"),
            "AttachTarget.light" => assert_eq!(thread, "light", "{count} samples"),
            _ => {}
        }
    }
}

/// The parks of ParkTimes' `parkLoop`, which the JIT compiled before the agent came (so that
/// compiled code calls Unsafe.park): every one is caught once the agent has rebound the native,
/// by the blocker's class, with the time the workload measured.
#[test]
fn attached_agent_times_the_parks_of_compiled_code() {
    let target = Target::start_workload("ParkTimes", &["20", "1", "50", "attach"]);
    let pid = target.pid();
    // The premise: parkLoop runs as code of the JIT's last tier (level 4, in use) before the
    // attach. Compilation is in the background: wait for it.
    let compiled = |codelist: &str| {
        codelist.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[1] == "4"
                && fields[2] == "0"
                && fields[3].starts_with("ParkTimes.parkLoop(")
        })
    };
    wait_for("ParkTimes.parkLoop was compiled at tier 4", LIMIT, || {
        compiled(&jcmd(target.child.id(), &["Compiler.codelist"]))
    });
    let attached = openprof(&["attach", &pid, "lock=0,depth=8,file=attached.txt"]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let said = text(&attached.stdout);
    assert!(
        said.contains("contended monitor enters and parks"),
        "{said}"
    );
    let file = target.dir.join("attached.txt");

    let (exited, stdout) = target.go();
    let stderr = text(&exited.stderr);
    assert!(exited.status.success(), "{stderr}");
    assert!(
        !stderr.contains("openprof ERROR") && !stderr.contains("openprof WARNING"),
        "{stderr}"
    );
    // HotSpot warns on the program's output when a JDK native is rebound from outside the JDK.
    assert!(!stdout.contains("Re-registering"), "{stdout}");
    let measured = |name: &str| printed_figure(&stdout, name);
    let profile = read_profile(&file);
    for (class, parks, ms) in [
        ("ParkTimes$Brief", "brief_parks", "brief_ms"),
        ("ParkTimes$Long", "long_parks", "long_ms"),
    ] {
        let (count, profiled_ms) = profile
            .lock_tables_of(LockTableKind::Park)
            .flat_map(|table| {
                table
                    .rows
                    .iter()
                    .filter(|row| row.method.as_deref() == Some(class))
                    .map(|row| (row.count, row.self_percent / 100.0 * table.total_ms as f64))
            })
            .fold((0, 0.0), |(count, ms), row| (count + row.0, ms + row.1));
        assert_eq!(count, measured(parks) as u64, "{class}");
        let measured_ms = measured(ms);
        assert!(
            (profiled_ms - measured_ms).abs() <= 0.1 * measured_ms + 1.0,
            "{class}: {profiled_ms:.1} ms parked in the profile, {measured_ms} ms measured"
        );
    }
    // The warm-up's parks came before the agent.
    assert!(
        !profile
            .lock_tables
            .iter()
            .flat_map(|table| &table.rows)
            .any(|row| row.method.as_deref() == Some("ParkTimes$Warmup")),
        "a warm-up park was recorded"
    );
}

#[test]
fn refusals_leave_the_jvm_running_and_the_agent_loads_once() {
    let target = Target::start("1");
    let pid = target.pid();
    let dir = target.dir.clone();
    let agent = agent_library();
    let agent = agent.to_str().unwrap();

    let bad = openprof(&["attach", "--agent", agent, &pid, "cpu=bogus"]);
    assert_eq!(bad.status.code(), Some(2));
    let said = text(&bad.stderr);
    assert!(
        said.contains(&format!(
            "the agent refused to start in JVM {pid}: its Agent_OnAttach returned -1"
        )),
        "{said}"
    );
    assert!(
        said.contains("option cpu: 'bogus'"),
        "the agent's own reason: {said}"
    );

    // Exception events (the trace's throw elements) are granted only at start-up.
    let trace = openprof(&["attach", "--agent", agent, &pid, "format=x"]);
    assert_eq!(trace.status.code(), Some(2));
    let said = text(&trace.stderr);
    assert!(
        said.contains("format=x (exception elements) needs JVMTI's can_generate_exception_events"),
        "{said}"
    );

    // After the refusals, a good attach works.
    let good = openprof(&[
        "attach",
        "--agent",
        agent,
        &pid,
        "cpu=samples,interval=1,file=late.txt",
    ]);
    assert!(good.status.success(), "{}", text(&good.stderr));

    let again = openprof(&["attach", "--agent", agent, &pid, "cpu=samples,file=b.txt"]);
    assert_eq!(again.status.code(), Some(2));
    let said = text(&again.stderr);
    assert!(
        said.contains("openprof is already loaded in this JVM"),
        "{said}"
    );

    let (exited, stdout) = target.go();
    let stderr = text(&exited.stderr);
    assert!(exited.status.success(), "{stderr}");
    assert!(
        stdout.contains("heavy_cpu_share="),
        "the program ran to its end"
    );
    assert!(
        !stderr.contains("hs_err") && !stderr.contains("SIGSEGV"),
        "{stderr}"
    );
    // The refusals are in the JVM's standard error too.
    assert!(stderr.contains("openprof ERROR: option cpu"), "{stderr}");
    let profile = read_profile(&dir.join("late.txt"));
    let by_method = samples_by_method(&profile);
    assert!(
        by_method.contains_key("AttachTarget.heavy")
            && by_method.contains_key("AttachTarget.light"),
        "{by_method:?}"
    );
    assert!(
        !dir.join("b.txt").exists(),
        "the refused second agent wrote nothing"
    );
}

#[test]
fn attached_cpu_times_counts_the_calls_of_classes_loaded_before_and_after_exactly() {
    // CallTree's class is loaded (and its main running) when the agent comes; Sub and Base
    // are loaded after. Calls made once "go" is given are all counted, each exactly.
    let target = Target::start_workload("CallTree", &["2000", "wait"]);
    let pid = target.pid();
    let dir = target.dir.clone();
    let agent = agent_library();
    let attached = openprof(&[
        "attach",
        "--agent",
        agent.to_str().unwrap(),
        &pid,
        "cpu=times,cutoff=0,filter=+CallTree*;-*,file=times.txt",
    ]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let (exited, stdout) = target.go();
    assert!(exited.status.success(), "{}", text(&exited.stderr));
    assert!(
        stdout.contains("calls=2000 thrown=200 failed_subs=5"),
        "{stdout}"
    );
    let profile = read_profile(&dir.join("times.txt"));
    let table = profile
        .cpu_tables
        .iter()
        .find(|table| table.kind == openprof_format::hprof_text::CpuTableKind::Time)
        .expect("a CPU TIME (ms) table");
    let mut calls: std::collections::BTreeMap<String, u64> = Default::default();
    for row in &table.rows {
        *calls
            .entry(row.method.clone().unwrap_or_default())
            .or_default() += row.count;
    }
    // main was running the code from before the agent: its call is not one of the rewritten
    // code's (it neither entered nor leaves through the hooks).
    let expected: std::collections::BTreeMap<String, u64> = [
        ("CallTree.<init>", 2000),
        ("CallTree.outer", 2000),
        ("CallTree.middle", 2000),
        ("CallTree.leaf", 6000),
        ("CallTree.fails", 2000),
        ("CallTree$Sub.<init>", 10),
        ("CallTree$Base.<init>", 10),
    ]
    .into_iter()
    .map(|(method, count)| (method.to_string(), count))
    .collect();
    assert_eq!(calls, expected);
}

#[test]
fn a_pid_that_does_not_exist_is_named() {
    let pid = (i32::MAX - 7).to_string();
    let output = openprof(&["attach", &pid]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr).trim(),
        format!("openprof: no process {pid}")
    );
}

#[test]
fn help_lists_the_options_without_attaching() {
    // Pid 1 is never a JVM we may attach to: help must not try.
    let output = openprof(&["attach", "1", "help"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("interval=<ms>"));
}

/// `openprof attach PID -f FILE` stays until the JVM exits, then writes the profile the agent
/// named as FILE: here folded stacks with the workload's split, 256 frames deep unless asked.
#[test]
fn attach_with_an_output_file_waits_for_the_exit_and_converts() {
    let target = Target::start("3");
    let pid = target.pid();
    let folded = target.dir.join("attached.collapsed");
    let mut command = crate::helpers::openprof_command(&[
        "attach",
        &pid,
        "cpu=samples,interval=1,file=attached.txt",
        "-f",
        folded.to_str().unwrap(),
    ]);
    let mut attach = command.spawn().expect("start openprof attach");
    // The command stays while the JVM runs: it is still there, waiting, when the JVM is let go.
    let stdout = PipeText::read(attach.stdout.take().expect("piped stdout"));
    stdout.wait_for("waiting for JVM", LIMIT);
    assert!(
        attach.try_wait().unwrap().is_none(),
        "the command ended before the JVM"
    );
    let (exited, _) = target.go();
    assert!(exited.status.success(), "{}", text(&exited.stderr));
    let attached = wait_with_limit(attach, LIMIT);
    let said = stdout.whole(LIMIT);
    assert!(
        attached.status.success(),
        "{said}{}",
        text(&attached.stderr)
    );
    assert!(said.contains("waiting for JVM"), "{said}");
    assert!(
        text(&attached.stderr).contains("depth=256"),
        "{}",
        text(&attached.stderr)
    );
    let collapsed = std::fs::read_to_string(&folded).expect("the folded stacks");
    let leaves = crate::helpers::leaf_samples(&collapsed);
    let leaf = |method: &str| leaves.get(method).copied().unwrap_or(0) as f64;
    let (heavy, light) = (leaf("AttachTarget.heavy"), leaf("AttachTarget.light"));
    let share = heavy / (heavy + light);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "heavy share {share:.3}, built-in 0.75: {collapsed}"
    );
}
