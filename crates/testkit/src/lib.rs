//! Test support shared by the test suites: the workspace's paths, the Java workloads compiled
//! once per test process with the JDK's javac, and real JVMs run with the agent, with a time
//! limit so that a hang fails the test instead of stalling the suite.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use openprof_format::hprof_text::{self, TextProfile};
use openprof_jdk::Jdk;

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The cargo profile directory these tests were built in (`target/release` or `target/debug`).
pub fn target_dir() -> PathBuf {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join(profile)
}

/// The agent library built alongside the tests.
pub fn agent_library() -> PathBuf {
    let path = target_dir().join("libopenprof_agent.so");
    assert!(
        path.is_file(),
        "{} is missing: build the workspace first (cargo build --release)",
        path.display()
    );
    path
}

/// The JDK that compiles the workloads (and runs them, unless `OPENPROF_TEST_JDK` names another).
pub fn jdk() -> &'static Jdk {
    static JDK: OnceLock<Jdk> = OnceLock::new();
    JDK.get_or_init(|| Jdk::find().expect("a JDK 11 or later is a prerequisite of the tests"))
}

/// The JDK whose `java` and `jcmd` run the workloads: `OPENPROF_TEST_JDK` (a JDK or runtime
/// home, which needs no javac: the workloads are compiled by [`jdk`]) when set, else [`jdk`].
/// scripts/test runs the agent's core tests a second time this way on JDK 25.
pub fn runtime() -> &'static Jdk {
    static RUNTIME: OnceLock<Jdk> = OnceLock::new();
    RUNTIME.get_or_init(|| match std::env::var_os("OPENPROF_TEST_JDK") {
        Some(home) if !home.is_empty() => {
            let runtime = Jdk {
                home: PathBuf::from(home),
            };
            assert!(
                runtime.java().is_ok(),
                "OPENPROF_TEST_JDK={} has no bin/java",
                runtime.home.display()
            );
            runtime
        }
        _ => jdk().clone(),
    })
}

/// A new directory under the system's temporary directory, named `PREFIX...`, which is kept
/// after the test: the files of a failed run stay there to be looked at.
pub fn kept_temp_dir(prefix: &str) -> PathBuf {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("temp dir")
        .keep()
}

/// The directory holding the compiled workloads of `java/workloads` and the API of `java/api`.
pub fn workload_classes() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let output = kept_temp_dir("openprof-classes-");
        // With the workloads, the Java API they may call (java/api).
        let mut sources: Vec<PathBuf> = fs::read_dir(workspace_root().join("java/workloads"))
            .expect("java/workloads")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "java"))
            .collect();
        sources.push(workspace_root().join("java/api/dev/openprof/Context.java"));
        let status = Command::new(jdk().javac().expect("javac"))
            .arg("-d")
            .arg(&output)
            .args(&sources)
            .status()
            .expect("run javac");
        assert!(status.success(), "javac failed on java/workloads");
        output
    })
}

/// A JVM run's outcome.
#[derive(Debug)]
pub struct Run {
    pub output: Output,
    /// The directory the JVM ran in (its output files land here).
    pub dir: PathBuf,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn success(&self) -> bool {
        self.output.status.success()
    }

    /// Reads an HPROF text file the run wrote, relative to its directory.
    pub fn profile(&self, file: &str) -> TextProfile {
        read_profile(&self.dir.join(file))
    }

    /// The files the run left in its directory.
    pub fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.dir)
            .expect("run dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }
}

/// Reads an HPROF text file, failing the test with the file's name if it cannot.
pub fn read_profile(path: &Path) -> TextProfile {
    let text = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    hprof_text::read(text.as_slice()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `java` command running a workload in a fresh directory, with the agent when `agent_options`
/// is given (`Some("")` loads it without options).
pub fn java_command(
    agent_options: Option<&str>,
    main_class: &str,
    args: &[&str],
) -> (Command, PathBuf) {
    java_command_with(&[], agent_options, main_class, args)
}

/// [`java_command`] with options for the JVM itself first (`-Xverify:all`).
pub fn java_command_with(
    jvm_options: &[&str],
    agent_options: Option<&str>,
    main_class: &str,
    args: &[&str],
) -> (Command, PathBuf) {
    let dir = kept_temp_dir("openprof-run-");
    let mut command = Command::new(runtime().java().expect("java"));
    command.current_dir(&dir);
    command.args(jvm_options);
    if let Some(options) = agent_options {
        let library = agent_library();
        let argument = if options.is_empty() {
            format!("-agentpath:{}", library.display())
        } else {
            format!("-agentpath:{}={options}", library.display())
        };
        command.arg(argument);
    }
    command
        .arg("-cp")
        .arg(workload_classes())
        .arg(main_class)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    (command, dir)
}

/// Runs a workload to the end, killing it (and failing) if it outlives `limit`.
pub fn run_java(
    agent_options: Option<&str>,
    main_class: &str,
    args: &[&str],
    limit: Duration,
) -> Run {
    run_java_with(&[], agent_options, main_class, args, limit)
}

/// [`run_java`] with options for the JVM itself first.
pub fn run_java_with(
    jvm_options: &[&str],
    agent_options: Option<&str>,
    main_class: &str,
    args: &[&str],
    limit: Duration,
) -> Run {
    let (mut command, dir) = java_command_with(jvm_options, agent_options, main_class, args);
    let child = command.spawn().expect("start java");
    Run {
        output: wait_with_limit(child, limit),
        dir,
    }
}

/// How often [`poll`] looks again.
pub const POLL_EVERY: Duration = Duration::from_millis(25);

/// Asks `probe` every [`POLL_EVERY`] until it finds what it looks for, for at most `limit`:
/// what it found, or `None` once the time is out (it is asked at least once). Tests wait this
/// way for what they need (a file, a line in a log, samples stored, an agent connected), never
/// for a fixed time: a busy machine makes them slower, not wrong. [`wait_until`] fails the
/// test instead of giving `None`.
pub fn poll<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// [`poll`], failing the test with `what` (what was awaited) and the limit when the time is
/// out.
pub fn wait_until<T>(what: &str, limit: Duration, probe: impl FnMut() -> Option<T>) -> T {
    poll(limit, probe).unwrap_or_else(|| panic!("waited {limit:?} in vain until {what}"))
}

/// [`wait_until`] for a condition.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    wait_until(what, limit, || done().then_some(()))
}

/// What a child wrote so far to one of its pipes (standard output or error), read on a thread
/// of its own while the child runs: a test can wait for a line in it, and the child never
/// blocks on a full pipe.
#[derive(Clone)]
pub struct PipeText {
    text: Arc<Mutex<String>>,
    /// Set once the pipe's end was read.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl PipeText {
    /// Starts reading `pipe` to its end.
    pub fn read(pipe: impl Read + Send + 'static) -> PipeText {
        let text = Arc::new(Mutex::new(String::new()));
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (sink, end) = (Arc::clone(&text), Arc::clone(&closed));
        std::thread::spawn(move || {
            let mut pipe = BufReader::new(pipe);
            let mut line = Vec::new();
            while pipe.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                let mut text = sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                text.push_str(&String::from_utf8_lossy(&line));
                line.clear();
            }
            end.store(true, std::sync::atomic::Ordering::Release);
        });
        PipeText { text, closed }
    }

    /// The whole text, once the pipe has closed (the child ended); fails the test if it does
    /// not close within `limit`.
    pub fn whole(&self, limit: Duration) -> String {
        wait_for("the pipe closed", limit, || {
            self.closed.load(std::sync::atomic::Ordering::Acquire)
        });
        self.text()
    }

    /// Everything read so far.
    pub fn text(&self) -> String {
        self.text
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Waits until `probe` finds what it looks for in the text; fails the test with `what`
    /// and the text when it does not within `limit`.
    pub fn wait_until<T>(
        &self,
        what: &str,
        limit: Duration,
        mut probe: impl FnMut(&str) -> Option<T>,
    ) -> T {
        poll(limit, || probe(&self.text())).unwrap_or_else(|| {
            panic!(
                "waited {limit:?} in vain until {what}; the output so far:\n{}",
                self.text()
            )
        })
    }

    /// The text once it holds `needle` (fails the test if it does not within `limit`).
    pub fn wait_for(&self, needle: &str, limit: Duration) -> String {
        self.wait_until(&format!("{needle:?} was written"), limit, |text| {
            text.contains(needle).then(|| text.to_string())
        })
    }
}

/// The CPU time a process has used so far (user and system, in the kernel's clock ticks).
/// Tests that check that nothing happens for a while (no signal, no sample) wait until the
/// process has run that long on a CPU: on a busy machine wall time says little about it.
pub fn cpu_time(pid: u32) -> Duration {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    cpu_time_in_stat(&path, &stat)
}

/// The CPU time used so far by the thread of process `pid` named `name` (as the kernel keeps
/// it: 15 bytes), or None while there is no such thread. A test that waits for one thread's
/// work reads this: the whole process's time also counts the profiler's own work on other
/// threads, which on a busy machine can be most of it.
pub fn thread_cpu_time(pid: u32, name: &str) -> Option<Duration> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .find_map(|task| {
            let task = task.ok()?.path();
            let comm = fs::read_to_string(task.join("comm")).ok()?;
            (comm.trim_end() == name).then_some(())?;
            let path = task.join("stat");
            let stat = fs::read_to_string(&path).ok()?;
            Some(cpu_time_in_stat(&path.display().to_string(), &stat))
        })
}

/// utime + stime of a /proc stat line.
fn cpu_time_in_stat(path: &str, stat: &str) -> Duration {
    // The fields after the command's name (which may hold spaces) in parentheses: utime and
    // stime are the 14th and 15th of the line, the 12th and 13th after the name.
    let after_name = &stat[stat.rfind(')').expect("/proc/PID/stat's name") + 2..];
    let field = |index: usize| -> u64 {
        after_name
            .split_whitespace()
            .nth(index)
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("{path}: {stat}"))
    };
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let ticks = field(11) + field(12);
    Duration::from_nanos(ticks * 1_000_000_000 / ticks_per_second)
}

/// Waits for a child, killing it and failing the test if it runs past `limit`. Its output is
/// read while it runs: a JVM writing a thread dump into a full pipe would otherwise block.
pub fn wait_with_limit(mut child: std::process::Child, limit: Duration) -> Output {
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let (status, stuck) = match poll(limit, || child.try_wait().expect("wait")) {
        Some(status) => (status, None),
        None => {
            // What its threads do says whether it is stuck or starved.
            let report = stuck_report(child.id());
            let _ = child.kill();
            (child.wait().expect("wait"), Some(report))
        }
    };
    let output = Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    if let Some(report) = stuck {
        panic!(
            "the JVM hung: killed after {limit:?}\nstdout (end):\n{}\nstderr:\n{}\n{report}",
            tail(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(4000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    text[start..].to_string()
}

/// What a process that seems stuck is doing, for a test's failure message: each thread's name,
/// state, kernel wait channel and CPU time, read twice two seconds apart (so a thread that
/// spins shows its CPU growing and one that waits does not), then the JVM's own thread dump
/// (`jcmd PID Thread.print`, given 20 s: a JVM stuck at a safepoint does not answer).
pub fn stuck_report(pid: u32) -> String {
    let threads = || -> std::collections::BTreeMap<String, (String, String, Duration)> {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return Default::default();
        };
        tasks
            .filter_map(|task| {
                let task = task.ok()?.path();
                let id = task.file_name()?.to_string_lossy().into_owned();
                let comm = fs::read_to_string(task.join("comm")).ok()?;
                let stat = fs::read_to_string(task.join("stat")).ok()?;
                let wchan = fs::read_to_string(task.join("wchan")).unwrap_or_default();
                let state = stat[stat.rfind(')')? + 2..]
                    .split_whitespace()
                    .next()?
                    .to_string();
                let cpu = cpu_time_in_stat(&task.display().to_string(), &stat);
                Some((format!("{id} {}", comm.trim_end()), (state, wchan, cpu)))
            })
            .collect()
    };
    let before = threads();
    std::thread::sleep(Duration::from_secs(2));
    let after = threads();
    let mut report = format!("threads of {pid} (state, wait channel, CPU, CPU in the last 2 s):\n");
    for (thread, (state, wchan, cpu)) in &after {
        let earlier = before
            .get(thread)
            .map_or(Duration::ZERO, |(_, _, cpu)| *cpu);
        report.push_str(&format!(
            "  {thread}: {state} {wchan} {cpu:?} +{:?}\n",
            cpu.saturating_sub(earlier)
        ));
    }
    let dump = runtime()
        .tool("jcmd")
        .ok()
        .map(|jcmd| {
            Command::new(jcmd)
                .args([&pid.to_string(), "Thread.print"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .and_then(Result::ok);
    match dump {
        Some(mut child) => {
            match poll(Duration::from_secs(20), || child.try_wait().ok().flatten()) {
                Some(_) => {
                    let mut text = String::new();
                    if let Some(mut out) = child.stdout.take() {
                        let _ = std::io::Read::read_to_string(&mut out, &mut text);
                    }
                    report.push_str(&text);
                }
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    report.push_str("jcmd Thread.print gave no answer in 20 s\n");
                }
            }
        }
        None => report.push_str("no jcmd to ask for a thread dump\n"),
    }
    report
}

/// Sends a signal to a process (SIGQUIT asks the JVM for a data dump).
pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill only sends a signal to the given process.
    let status = unsafe { libc::kill(pid as i32, signal) };
    assert_eq!(status, 0, "kill({pid}, {signal})");
}

/// A figure a workload printed as `NAME=VALUE` among whitespace-separated fields (its ground
/// truth); fails the test when there is none.
pub fn printed_figure(stdout: &str, name: &str) -> f64 {
    stdout
        .split_whitespace()
        .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in the workload's output: {stdout}"))
}

/// Whether a virtual-thread workload ran its virtual threads: on a JDK without them it prints
/// `virtual_threads=no` and its feature version, which must then be below 21.
pub fn ran_virtual_threads(stdout: &str) -> bool {
    if stdout.contains("virtual_threads=no") {
        let feature = printed_figure(stdout, "feature");
        assert!(feature < 21.0, "{stdout}");
        return false;
    }
    true
}

/// The agent's closing line for `delay=`, `openprof: delay=...: N delays took T ns in all (M
/// methods delayed)`: (N, T, M). Fails the test when there is none.
pub fn delays_reported(stderr: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|line| line.starts_with("openprof: delay="))
        .unwrap_or_else(|| panic!("no delay line: {stderr}"));
    let number_before = |word: &str| -> u64 {
        let at = line
            .find(word)
            .unwrap_or_else(|| panic!("{word} in {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|number| number.trim_start_matches('(').parse().ok())
            .unwrap_or_else(|| panic!("a number before {word} in {line}"))
    };
    (
        number_before(" delays"),
        number_before(" ns in all"),
        number_before(" methods delayed"),
    )
}

/// Samples per leaf Java method (`class.method`: the first Java frame of each trace, below
/// any native ones) over every CPU SAMPLES table of a profile.
pub fn samples_by_leaf_java_method(
    profile: &TextProfile,
) -> std::collections::BTreeMap<String, u64> {
    let mut by_method = std::collections::BTreeMap::new();
    for table in &profile.cpu_tables {
        for row in &table.rows {
            let method = profile
                .traces
                .get(&row.trace)
                .and_then(|trace| trace.frames.iter().find(|frame| frame.is_java()))
                .map_or_else(
                    || "<no Java frame>".into(),
                    |frame| frame.qualified_method(),
                );
            *by_method.entry(method).or_default() += row.count;
        }
    }
    by_method
}

/// Samples per top-frame method (`class.method`) over every CPU SAMPLES table of a profile.
pub fn samples_by_method(profile: &TextProfile) -> std::collections::BTreeMap<String, u64> {
    let mut by_method = std::collections::BTreeMap::new();
    for table in &profile.cpu_tables {
        for row in &table.rows {
            let method = row.method.clone().unwrap_or_else(|| "<empty trace>".into());
            *by_method.entry(method).or_default() += row.count;
        }
    }
    by_method
}

/// Waits for a workload that keeps objects (Keep, HeapShapes, ...) to print "ready". Its
/// stdout is taken; it exits once its stdin is closed.
pub fn wait_until_ready(child: &mut std::process::Child) {
    use std::io::BufRead;
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the workload's stdout");
    assert_eq!(line.trim(), "ready", "the workload did not get ready");
    // Read the rest in the background: the workload's last line must not meet a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
}

/// Waits for a workload's "ready" line like [`wait_until_ready`], and keeps the rest of its
/// standard output: the returned thread gives it back once the workload has closed it.
pub fn wait_until_ready_keeping_output(
    child: &mut std::process::Child,
) -> std::thread::JoinHandle<String> {
    use std::io::{BufRead, Read};
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .expect("read the workload's stdout");
    assert_eq!(line.trim(), "ready", "the workload did not get ready");
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        rest
    })
}

/// Runs `jcmd PID ARGS...` and returns its standard output; fails the test if jcmd fails.
pub fn jcmd(pid: u32, args: &[&str]) -> String {
    let output = Command::new(runtime().tool("jcmd").expect("jcmd"))
        .arg(pid.to_string())
        .args(args)
        .output()
        .expect("run jcmd");
    assert!(output.status.success(), "jcmd {args:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Checks a trace file against docs/trace.dtd with xmllint, a reader the project did not write.
pub fn xmllint_trace(file: &Path) {
    let output = Command::new("xmllint")
        .args(["--noout", "--dtdvalid"])
        .arg(workspace_root().join("docs/trace.dtd"))
        .arg(file)
        .output()
        .expect("xmllint (libxml2-utils) is a prerequisite of the tests");
    assert!(
        output.status.success(),
        "xmllint on {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every element of a trace file, failing the test on the first unreadable byte.
pub fn read_trace(file: &Path) -> Vec<openprof_format::trace::TraceElement> {
    let bytes = fs::read(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
    openprof_format::trace::reader::read_all(bytes.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|error| panic!("unreadable trace {}: {error}", file.display()))
}

/// Each source line's count in a coverage trace, for the line tables of one source file
/// (`Some("Covers.java")`) or of all: the most any block holding code of the line ran.
pub fn coverage_line_counts(
    elements: &[openprof_format::trace::TraceElement],
    source: Option<&str>,
) -> std::collections::BTreeMap<u32, u64> {
    use openprof_format::trace::TraceElement;
    let mut tables: std::collections::HashMap<u32, Vec<Vec<u32>>> = Default::default();
    let mut counts = std::collections::BTreeMap::new();
    for element in elements {
        match element {
            TraceElement::LineTable(table)
                if source.is_none() || table.source_name.as_deref() == source =>
            {
                let blocks = table
                    .source_coordinate_table
                    .as_deref()
                    .unwrap_or("")
                    .split(' ')
                    .map(|block| block.split('+').filter_map(|l| l.parse().ok()).collect())
                    .collect();
                tables.insert(table.line_table_id, blocks);
            }
            TraceElement::Line(line) => {
                let Some(blocks) = line.line_table_id_ref.and_then(|id| tables.get(&id)) else {
                    continue;
                };
                for source_line in &blocks[line.block_index.unwrap_or(0) as usize] {
                    let most: &mut u64 = counts.entry(*source_line).or_default();
                    *most = (*most).max(line.count.unwrap_or(0));
                }
            }
            _ => {}
        }
    }
    counts
}

/// How many HEAP DUMP ENDs an HPROF binary file holds, once it reads whole (0 while it is
/// being written, or moved into place).
pub fn complete_heap_dumps(path: &std::path::Path) -> usize {
    use openprof_format::hprof_binary::{HprofReader, Item};
    std::fs::read(path)
        .ok()
        .and_then(|bytes| {
            HprofReader::new(bytes.as_slice())
                .ok()?
                .collect::<Result<Vec<_>, _>>()
                .ok()
        })
        .map_or(0, |items| {
            items
                .iter()
                .filter(|item| **item == Item::HeapDumpEnd)
                .count()
        })
}
