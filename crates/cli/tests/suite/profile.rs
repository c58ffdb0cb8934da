//! `openprof profile` on real JVMs started without the agent: a session of a few seconds gives
//! the Service workload's CPU split and its worker's wall-clock states; between sessions no
//! timer runs and no signal comes; start, dump, stop and the loop's rotated files; refusals
//! name what was wrong and leave the JVM running.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use openprof_testkit::{
    cpu_time, java_command, thread_cpu_time, wait_for, wait_until, wait_with_limit, PipeText,
};

use crate::helpers::{openprof_in, text, LIMIT};
use crate::views_html::drive;

/// A JVM running Service without any agent.
struct Service {
    child: Child,
    dir: PathBuf,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Service {
    fn start() -> Service {
        let (mut command, dir) = java_command(None, "Service", &[]);
        let mut child = command.stdin(Stdio::piped()).spawn().expect("start java");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read Service's stdout");
        assert_eq!(line.trim(), "ready", "Service did not get ready");
        Service {
            child,
            dir,
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// The worker's measured shares of wall time so far, running and sleeping (in %): asking
    /// also shows that the JVM still runs and answers.
    fn measured(&mut self) -> (f64, f64) {
        let said = self.said();
        (said("running="), said("sleeping="))
    }

    /// The time the worker spent in heavy() and light() so far, in ns.
    fn heavy_and_light_ns(&mut self) -> (f64, f64) {
        let said = self.said();
        (said("heavy_ns="), said("light_ns="))
    }

    /// Asks Service for its figures: a lookup of them by key.
    fn said(&mut self) -> impl Fn(&str) -> f64 {
        writeln!(self.stdin, "shares").expect("ask Service");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read Service");
        move |key: &str| -> f64 {
            line.split_whitespace()
                .find_map(|part| part.strip_prefix(key))
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("Service said {line:?}"))
        }
    }

    /// `openprof profile ARGS` in the JVM's directory; must succeed; returns its stdout.
    fn profile(&self, args: &[&str]) -> String {
        let output = self.profile_output(args);
        assert!(
            output.status.success(),
            "openprof profile {args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    fn profile_output(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["profile"];
        all.extend_from_slice(args);
        openprof_in(&self.dir, &all)
    }

    /// Closes its stdin: it exits; its exit status must be 0.
    fn finish(self) {
        drop(self.stdin);
        let output = wait_with_limit(self.child, LIMIT);
        assert!(
            output.status.success(),
            "Service failed: {}",
            text(&output.stderr)
        );
    }
}

/// The number on the status line that starts with `key`, e.g. `signals received: 12 cpu, 3 wall`.
fn status_line<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .unwrap_or_else(|| panic!("no `{key}` in the status:\n{status}"))
        .trim()
}

/// The status's `signals received: 12 cpu, 3 wall` as (12, 3).
fn signals_received(status: &str) -> (u64, u64) {
    let line = status_line(status, "signals received:");
    let count = |kind: &str| -> u64 {
        line.split(',')
            .find_map(|part| part.trim().strip_suffix(kind)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {kind} signals in `{line}`"))
    };
    (count("cpu"), count("wall"))
}

/// The CPU timers the process has: POSIX timers delivering SIGPROF (/proc/PID/timers) and
/// perf events (open perf_event descriptors).
fn timers_of(pid: &str) -> usize {
    let posix = std::fs::read_to_string(format!("/proc/{pid}/timers"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("signal:") && line.contains(&format!("{}/", libc::SIGPROF)))
        .count();
    let perf = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                .filter(|target| target.to_string_lossy().contains("perf_event"))
                .count()
        })
        .unwrap_or(0);
    posix + perf
}

/// Each folded stack's weight, summed by whether it holds `with` (and under `root`, the first
/// frame's prefix).
fn weight_with(collapsed: &str, root: &str, with: &str) -> u64 {
    collapsed
        .lines()
        .filter(|line| line.starts_with(root) && line.contains(with))
        .map(|line| {
            line.rsplit_once(' ')
                .and_then(|(_, count)| count.parse::<u64>().ok())
                .expect("a count")
        })
        .sum()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn a_running_jvm_is_profiled_for_a_while_then_left_idle_and_profiled_again() {
    let mut service = Service::start();
    let pid = service.pid();

    // A profile of 5 s, CPU and wall clock, as a flame graph: the command returns once the 5 s
    // are over, with the file written and the JVM running on.
    let (heavy_before, light_before) = service.heavy_and_light_ns();
    let began = Instant::now();
    service.profile(&[
        &pid, "-d", "5", "-e", "cpu,wall", "-i", "2ms", "-f", "out.html",
    ]);
    assert!(
        began.elapsed() >= Duration::from_secs(5),
        "the command returned after {:?}, before its 5 s",
        began.elapsed()
    );
    let (heavy_after, light_after) = service.heavy_and_light_ns();
    // The split the worker measured over the profile (3:1 once the JIT has compiled both alike).
    let truth = 100.0 * (heavy_after - heavy_before)
        / ((heavy_after - heavy_before) + (light_after - light_before));
    let seen = drive(
        &service.dir.join("out.html"),
        &["--search", "Service\\.heavy", "--search", "Service\\.light"],
        None,
    );
    assert_eq!(
        seen["events"],
        serde_json::json!(["cpu", "wall"]),
        "{seen:#}"
    );
    let share = |query: &str| seen["searches"][query]["share"].as_f64().unwrap();
    let (heavy, light) = (share("Service\\.heavy"), share("Service\\.light"));
    let heavy_of_both = 100.0 * heavy / (heavy + light);
    assert!(
        (heavy_of_both - truth).abs() <= 5.0 && heavy + light > 90.0,
        "heavy {heavy:.1} %, light {light:.1} % of the CPU samples: heavy {heavy_of_both:.1} % of the two, the worker measured {truth:.1} %"
    );
    // No session file is left behind in the JVM's /tmp.
    let left: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/root/tmp"))
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("openprof-session-{pid}-"))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // Stopped: no timer, and no signal at all while the JVM uses a second of CPU time (500
    // signals of a 2 ms timer); the JVM runs on.
    let status = service.profile(&["status", &pid]);
    assert!(
        status_line(&status, "session:").starts_with("none running; the last one stopped"),
        "{status}"
    );
    let signals = status_line(&status, "signals received:").to_string();
    assert_eq!(status_line(&status, "cpu timers:"), "0", "{status}");
    assert_eq!(timers_of(&pid), 0, "timers left in JVM {pid}");
    let stopped_at = cpu_time(service.child.id());
    wait_for(
        "the JVM used a second of CPU time without a session",
        LIMIT,
        || cpu_time(service.child.id()) >= stopped_at + Duration::from_secs(1),
    );
    let status = service.profile(&["status", &pid]);
    assert_eq!(
        status_line(&status, "signals received:"),
        signals,
        "signals came while no session ran:\n{status}"
    );
    let (running, sleeping) = service.measured();
    let stopped = service.profile_output(&["stop", &pid]);
    assert!(!stopped.status.success());
    assert!(
        text(&stopped.stderr).contains("no profiling session runs"),
        "{}",
        text(&stopped.stderr)
    );
    assert!((running - 50.0).abs() < 10.0 && (sleeping - 50.0).abs() < 10.0);

    // Started again: samples come; a dump of the wall clock by thread shows the worker running
    // and sleeping as it measured it; stop writes the whole session.
    // A thousand CPU samples (about as many in heavy and light) are enough for the split to
    // be within its 5 points by 4 standard deviations; the session runs until it has them.
    let said = service.profile(&["start", &pid, "-e", "wall,cpu", "-i", "2ms"]);
    assert!(said.contains("profile: /tmp/openprof-session-"), "{said}");
    assert!(timers_of(&pid) > 0, "no CPU timer after start");
    let (cpu_before, _) = signals_received(&status);
    // The worker's CPU time is read from /proc: asking the agent's status in a loop would
    // start a process and an attach every few milliseconds, load that skewed the worker's wall
    // share by 5 points in a full run. Not the whole JVM's: on a busy machine the wall-clock
    // handler's work on the idle threads was most of it. Two and a half seconds of the
    // worker's CPU give many of its cycles, and 1,250 CPU samples at 2 ms.
    let worker_cpu = || thread_cpu_time(service.child.id(), "worker").expect("the worker thread");
    let session_from = worker_cpu();
    wait_for(
        "the worker used 2.5 s of CPU time in the session",
        LIMIT,
        || worker_cpu() >= session_from + Duration::from_millis(2500),
    );
    let status = service.profile(&["status", &pid]);
    assert!(
        status_line(&status, "session:").starts_with("running since"),
        "{status}"
    );
    assert!(
        signals_received(&status).0 >= cpu_before + 1_000,
        "fewer than a thousand CPU samples in the worker's 2.5 s of CPU: {status}"
    );
    service.profile(&[
        "dump",
        &pid,
        "-t",
        "--event",
        "wall",
        "-f",
        "wall.collapsed",
    ]);
    let (running, sleeping) = service.measured();
    let wall = read(&service.dir.join("wall.collapsed"));
    let worker_running = weight_with(&wall, "[worker", "Service.work") as f64;
    let worker_sleeping = weight_with(&wall, "[worker", "Service.rest") as f64;
    let sampled = worker_running + worker_sleeping;
    assert!(
        sampled > 300.0,
        "{sampled} wall samples of the worker:\n{wall}"
    );
    let sampled_running = 100.0 * worker_running / sampled;
    assert!(
        (sampled_running - running).abs() <= 5.0,
        "the worker ran {sampled_running:.1} % of its wall samples, {running:.1} % measured ({sleeping:.1} % asleep)"
    );
    service.profile(&["stop", &pid, "--event", "cpu", "-f", "stop.collapsed"]);
    assert_eq!(timers_of(&pid), 0, "timers left after stop");
    let cpu = read(&service.dir.join("stop.collapsed"));
    let heavy = weight_with(&cpu, "", "Service.heavy") as f64;
    let light = weight_with(&cpu, "", "Service.light") as f64;
    let heavy_of_both = 100.0 * heavy / (heavy + light);
    assert!(
        (heavy_of_both - 75.0).abs() <= 5.0,
        "heavy {heavy_of_both:.1} % of heavy and light (the whole session, {heavy} + {light} samples)"
    );
    service.measured();
    service.finish();
}

#[test]
fn the_loop_writes_one_profile_a_period_under_templated_names() {
    let service = Service::start();
    let pid = service.pid();
    let jvm = service.child.id();
    let mut command = crate::helpers::openprof_command(&[
        "profile",
        &pid,
        "--loop",
        "2s",
        "-d",
        "5",
        "-f",
        "loop-%p-%n-%t.collapsed",
    ]);
    command.current_dir(&service.dir);
    let mut looping = command.spawn().expect("start openprof");
    let stderr = PipeText::read(looping.stderr.take().expect("piped stderr"));
    let loop_files = || -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(&service.dir)
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("loop-"))
            .collect();
        files.sort();
        files
    };
    // The CPU time the JVM had used when the first period began and as each file came: a
    // file's CPU samples are the CPU time its period got, which a busy machine hands out
    // unevenly (a 1 s period may get more than a 2 s one).
    stderr.wait_for("openprof: profiling JVM", LIMIT);
    let mut cpu = vec![cpu_time(jvm)];
    for count in 1..=3 {
        wait_for(&format!("{count} files were written"), LIMIT, || {
            loop_files().len() >= count
        });
        cpu.push(cpu_time(jvm));
    }
    let output = wait_with_limit(looping, LIMIT);
    assert!(output.status.success(), "{}", stderr.text());
    let files = loop_files();
    // 2 + 2 + 1 s.
    assert_eq!(files.len(), 3, "{files:?}");
    for (count, name) in files.iter().enumerate() {
        let stamp = name
            .strip_prefix(&format!("loop-{pid}-{count}-"))
            .and_then(|rest| rest.strip_suffix(".collapsed"))
            .unwrap_or_else(|| panic!("{name} is not loop-{pid}-{count}-TIME.collapsed"));
        assert!(
            stamp.len() == 15 && stamp.chars().all(|c| c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        let profile = read(&service.dir.join(name));
        assert!(
            weight_with(&profile, "", "Service.heavy") > 0,
            "{name} has no sample of heavy:\n{profile}"
        );
    }
    // Each file has its own period's samples, not all since the start: the last one's
    // samples per CPU second are those of the first two (with files counting from the start
    // they would be about five times as many: all the run's samples over its last second's
    // CPU time).
    let samples: Vec<f64> = files
        .iter()
        .map(|name| weight_with(&read(&service.dir.join(name)), "", "") as f64)
        .collect();
    let seconds: Vec<f64> = cpu
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).as_secs_f64())
        .collect();
    let first_two = (samples[0] + samples[1]) / (seconds[0] + seconds[1]);
    let last = samples[2] / seconds[2];
    assert!(
        last < 2.5 * first_two,
        "samples per file {samples:?} in CPU seconds {seconds:?}: the last period's rate \
         {last:.0} a CPU second against {first_two:.0} before"
    );
    service.finish();
}

#[test]
fn a_jvm_that_exits_during_the_session_leaves_its_profile() {
    let service = Service::start();
    let pid = service.pid();
    let dir = service.dir.clone();
    let mut command = {
        let mut command = crate::helpers::openprof_command(&[
            "profile",
            &pid,
            "-d",
            "60",
            "-f",
            "exit.collapsed",
        ]);
        command.current_dir(&dir);
        command
    };
    let profiling = command.spawn().expect("start openprof");
    // The session runs and has samples (the status says no agent until it is loaded).
    wait_until("the session had CPU samples", LIMIT, || {
        let status = service.profile(&["status", &pid]);
        let running = status
            .lines()
            .any(|line| line.starts_with("session: running since"));
        (running && signals_received(&status).0 >= 100).then_some(())
    });
    // The service ends; the agent writes the session's last dump at the JVM's exit.
    service.finish();
    let output = wait_with_limit(profiling, LIMIT);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("exited during the session"), "{stderr}");
    let profile = read(&dir.join("exit.collapsed"));
    assert!(
        weight_with(&profile, "", "Service.heavy") > 0,
        "no sample of heavy:\n{profile}"
    );
    let left = std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|entry| entry.ok())
        .any(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("openprof-session-{pid}-"))
        });
    assert!(!left, "the session's file is left in /tmp");
}

#[test]
fn a_later_session_adds_the_engines_it_asks_for() {
    let mut service = Service::start();
    let pid = service.pid();
    // Loaded for CPU samples only; a later session asks for allocation sites.
    service.profile(&[&pid, "-d", "1", "-e", "cpu", "-f", "cpu.collapsed"]);
    let said = service.profile(&["start", &pid, "-e", "alloc", "--alloc", "16k"]);
    assert!(said.contains("allocation sites"), "{said}");
    // Until the session has sampled 16 of Service.buffer's allocations (folded stacks count
    // the sampled objects).
    wait_until("the session sampled 16 buffers", LIMIT, || {
        let dumped = service.profile_output(&[
            "dump",
            &pid,
            "--event",
            "alloc_bytes",
            "-f",
            "alloc-so-far.collapsed",
        ]);
        // Refused while the session has no allocation yet.
        let so_far = std::fs::read_to_string(service.dir.join("alloc-so-far.collapsed"));
        (dumped.status.success() && weight_with(&so_far.ok()?, "", "Service.buffer") >= 16)
            .then_some(())
    });
    service.profile(&[
        "stop",
        &pid,
        "--event",
        "alloc_bytes",
        "-f",
        "alloc.collapsed",
    ]);
    let alloc = read(&service.dir.join("alloc.collapsed"));
    // Of what Service's own methods allocate (the frame under the allocated class is
    // Service's), buffer's 64 KiB arrays are most. What the JDK allocates inside the calls
    // Service makes is not the workload's ground truth: JDK 25's Thread.sleep makes a
    // ThreadSleepEvent when that event is on, seen once in a full run.
    let by_service: u64 = alloc
        .lines()
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            let frames: Vec<&str> = stack.split(';').collect();
            let allocating = frames.len().checked_sub(2).map(|at| frames[at])?;
            allocating
                .starts_with("Service.")
                .then(|| count.parse::<u64>().ok())?
        })
        .sum();
    let total = by_service as f64;
    let in_buffer = weight_with(&alloc, "", "Service.buffer") as f64;
    assert!(
        total > 0.0 && in_buffer / total > 0.5,
        "Service.buffer allocates most of Service's bytes, but has {in_buffer} of {total}:\n{alloc}"
    );
    // No CPU samples came in the allocation session.
    assert!(!alloc.contains("Service.heavy"), "{alloc}");
    service.measured();
    service.finish();
}

#[test]
fn a_lock_session_shows_where_threads_block() {
    // WallStates' workers block on a monitor 20 % of their time; it runs for about 6 s.
    let (mut command, dir) = java_command(None, "WallStates", &["2", "60"]);
    let mut child = command.spawn().expect("start java");
    let pid = child.id().to_string();
    // Attached before the JVM is up, the agent would find no JVMTI environment yet.
    let _rest = openprof_testkit::wait_until_ready_keeping_output(&mut child);
    let output = openprof_in(
        &dir,
        &[
            "profile",
            &pid,
            "-d",
            "3",
            "-e",
            "lock",
            "--lock",
            "1ms",
            "--event",
            "lock",
            "-f",
            "lock.collapsed",
        ],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let locks = read(&dir.join("lock.collapsed"));
    assert!(
        weight_with(&locks, "", "WallStates.work") > 0,
        "no blocked time in WallStates.work:\n{locks}"
    );
    let exited = wait_with_limit(child, LIMIT);
    assert!(exited.status.success(), "{}", text(&exited.stderr));
}

#[test]
fn bad_requests_are_refused_by_name_and_the_jvm_runs_on() {
    let mut service = Service::start();
    let pid = service.pid();
    let refused = |args: &[&str], expected: &str| {
        let output = service.profile_output(args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    // Nothing loaded yet: stop and dump say so; status says so without failing.
    refused(&["stop", &pid], "has no openprof agent loaded");
    refused(
        &["dump", &pid, "-f", "x.html"],
        "has no openprof agent loaded",
    );
    let status = service.profile(&["status", &pid]);
    assert!(status.contains("has no openprof agent loaded"), "{status}");
    refused(&[&pid, "-e", "cpu,heat"], "'heat' is not an event");
    refused(&[&pid, "-i", "1.5ms"], "not a whole number of milliseconds");
    refused(&[&pid, "--loop", "2s"], "give -f FILE");
    refused(
        &["start", &pid, "--lock", "soon", "-e", "lock"],
        "option lock",
    );
    refused(&["pause", &pid], "'pause' is not an action");
    refused(&[&pid, "-f", "x.unknown"], "can't tell the format");
    refused(&["999999999"], "no process");
    // A session runs: a second start is refused, naming it.
    service.profile(&["start", &pid, "-e", "cpu"]);
    refused(
        &["start", &pid, "-e", "wall"],
        "a profiling session runs since",
    );
    // A bad view option stops nothing: the session goes on until a good stop.
    refused(
        &["stop", &pid, "-f", "x.html", "--event", "nothing"],
        "nothing",
    );
    service.profile(&["stop", &pid, "-f", "stopped.collapsed"]);
    assert!(service.dir.join("stopped.collapsed").is_file());
    // The agent keeps what it was loaded with: a session cannot change the depth.
    let attach = openprof_in(
        &service.dir,
        &[
            "attach",
            &pid,
            "action=start,cpu=samples,depth=8,file=/tmp/x.txt",
        ],
    );
    let stderr = text(&attach.stderr);
    assert!(
        !attach.status.success()
            && stderr.contains("option depth: this agent was loaded with depth=256"),
        "{stderr}"
    );
    service.measured();
    service.finish();
}
