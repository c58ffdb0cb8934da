//! Bad options stop the JVM before the program runs, with one line naming the option; `help`
//! prints the usage table and exits 0. Each case runs a real JVM.

use std::time::Duration;

use openprof_testkit::{run_java, Run};

const LIMIT: Duration = Duration::from_secs(60);

fn run_with(options: &str) -> Run {
    run_java(Some(options), "CpuSplit", &["0.1"], LIMIT)
}

/// The JVM did not start the program, said why in one agent line, and left no file behind.
fn assert_refused(options: &str, expected: &str) {
    let run = run_with(options);
    assert!(!run.success(), "{options}: the JVM started");
    assert!(
        !run.stdout().contains("calls="),
        "{options}: the program ran"
    );
    let stderr = run.stderr();
    let agent_lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("openprof"))
        .collect();
    assert_eq!(agent_lines.len(), 1, "{options}: {stderr}");
    assert!(
        agent_lines[0].starts_with("openprof ERROR: "),
        "{options}: {stderr}"
    );
    assert!(
        agent_lines[0].contains(expected),
        "{options}: expected '{expected}' in {stderr}"
    );
    assert!(
        !stderr.contains("hs_err") && !stderr.contains("SIGSEGV"),
        "{options}: {stderr}"
    );
    assert!(
        run.files().is_empty(),
        "{options}: left files {:?}",
        run.files()
    );
}

#[test]
fn unknown_option_is_refused() {
    assert_refused(
        "cpu=samples,speed=fast",
        "option speed: is not an option; the options are help, heap, cpu",
    );
}

#[test]
fn bad_values_are_refused() {
    assert_refused(
        "cpu=fast",
        "option cpu: 'fast' is not allowed; use samples, times or old",
    );
    assert_refused(
        "cpu=samples,lineno=maybe",
        "option lineno: 'maybe' is not allowed; use y or n",
    );
    assert_refused(
        "cpu=samples,format=z",
        "option format: 'z' is not allowed; use a (text), b (binary) or x (trace XML)",
    );
    assert_refused("cpu=samples,depth", "option depth: has no value");
    assert_refused("cpu=samples,file=", "option file: is empty");
    assert_refused("cpu=samples,net=nohost", "option net: 'nohost' has no port");
    assert_refused(
        "cpu=samples,cstack=lbr",
        "option cstack: 'lbr' is not allowed; use fp, dwarf or no",
    );
}

#[test]
fn bad_numbers_are_refused() {
    assert_refused(
        "cpu=samples,depth=deep",
        "option depth: 'deep' is not a number; use a whole number from 0 to 2048",
    );
    assert_refused(
        "cpu=samples,interval=1.5",
        "option interval: '1.5' is not a number",
    );
    assert_refused(
        "cpu=samples,cutoff=lots",
        "option cutoff: 'lots' is not a number; use a number from 0.0 to 1.0",
    );
}

#[test]
fn out_of_range_numbers_are_refused() {
    assert_refused(
        "cpu=samples,depth=5000",
        "option depth: 5000 is out of range; use a whole number from 0 to 2048",
    );
    assert_refused(
        "cpu=samples,interval=0",
        "option interval: 0 is out of range; use a whole number from 1 to 60000",
    );
    assert_refused(
        "cpu=samples,cutoff=1.5",
        "option cutoff: 1.5 is out of range",
    );
}

#[test]
fn incompatible_pairs_are_refused() {
    assert_refused(
        "format=b,monitor=y",
        "option format: format=b cannot be used with monitor=y",
    );
    assert_refused(
        "format=b,cpu=times",
        "option format: format=b cannot be used with cpu=old|times",
    );
    assert_refused(
        "cpu=old,format=b",
        "option format: format=b cannot be used with cpu=old|times",
    );
    assert_refused(
        "cpu=samples,file=a.txt,net=localhost:9000",
        "option net: net= and file= cannot be used together",
    );
}

#[test]
fn unbuilt_features_are_refused_not_ignored() {
    assert_refused(
        "cpu=samples,filter=+Calls",
        "option filter: filter= limits format=x and cpu=times",
    );
    assert_refused(
        "format=x,heap=dump",
        "option heap: heap=dump with format=x is not implemented: a trace has no element for a \
         heap dump",
    );
    assert_refused(
        "heap=sites,alloc_interval=lots",
        "option alloc_interval: 'lots' is not a number",
    );
    assert_refused(
        "format=x,cpu=samples",
        "option format: format=x cannot be used with cpu=samples|old",
    );
    assert_refused(
        "format=x,filter=Calls",
        "option filter: filter 'Calls' must start with + (include) or - (exclude)",
    );
    assert_refused(
        "format=x,filter=@/nonexistent/filters",
        "option filter: can't read /nonexistent/filters",
    );
    assert_refused(
        "format=x,cpu=times,lock=1ms",
        "option lock: lock= writes HPROF's MONITOR TIME tables, in format=a only",
    );
    assert_refused(
        "cpu=samples,lock=10qs",
        "option lock: '10qs' is not a duration such as 0, 500ns, 10us",
    );
    assert_refused("cpu=samples,token=abc", "option token: token= is for net=");
    assert_refused(
        "cpu=samples,mpt=@/nonexistent/specs",
        "option mpt: can't read /nonexistent/specs",
    );
    assert_refused(
        "cpu=samples,net=localhost:9000,token=@/nonexistent/token",
        "option token: can't read /nonexistent/token",
    );
    assert_refused(
        "cpu=samples,net=localhost:9000,tlsca=/nonexistent/ca.pem",
        "tlsca=/nonexistent/ca.pem",
    );
    assert_refused(
        "cpu=samples,msa=y",
        "option msa: msa=y is Solaris micro state accounting",
    );
}

#[test]
fn an_unwritable_file_stops_the_jvm() {
    let run = run_with("cpu=samples,file=/nonexistent-dir/out.txt");
    assert!(!run.success());
    assert!(!run.stdout().contains("calls="));
    assert!(
        run.stderr()
            .contains("openprof ERROR: can't write file=/nonexistent-dir/out.txt"),
        "{}",
        run.stderr()
    );
}

#[test]
fn help_prints_the_usage_table_and_exits_0() {
    let run = run_with("help");
    assert!(run.success(), "{}", run.stderr());
    let stdout = run.stdout();
    assert!(!stdout.contains("calls="), "the program ran");
    assert!(stdout.contains("Option Name and Value  Description                    Default"));
    assert!(stdout.contains("interval=<ms>          sample interval in ms          10"));
    assert!(stdout.contains("depth=<size>           stack trace depth              4"));
    assert!(run.files().is_empty(), "{:?}", run.files());
}

#[test]
fn options_that_are_not_utf8_are_refused_naming_the_option() {
    use std::os::unix::ffi::OsStringExt;
    let (without_agent, dir) = openprof_testkit::java_command(None, "CpuSplit", &["0.1"]);
    let mut argument = format!(
        "-agentpath:{}=cpu=samples,file=",
        openprof_testkit::agent_library().display()
    )
    .into_bytes();
    argument.extend_from_slice(b"out\xff\xfe.txt,depth=3");
    // The agent goes before the class path and the main class.
    let mut java = std::process::Command::new(without_agent.get_program());
    java.current_dir(&dir)
        .arg(std::ffi::OsString::from_vec(argument))
        .args(without_agent.get_args())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let run = Run {
        output: openprof_testkit::wait_with_limit(java.spawn().expect("start java"), LIMIT),
        dir,
    };
    assert!(!run.success(), "the JVM started");
    assert!(!run.stdout().contains("calls="), "the program ran");
    let stderr = run.stderr();
    assert!(
        stderr.contains("openprof ERROR: option file: is not UTF-8"),
        "{stderr}"
    );
    assert!(run.files().is_empty(), "left files {:?}", run.files());
}

/// A private file holding `contents`, in a directory of its own.
fn token_file(contents: &[u8], mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = openprof_testkit::kept_temp_dir("openprof-token-");
    let file = dir.join("token");
    std::fs::write(&file, contents).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    file
}

#[test]
fn a_token_file_too_long_or_endless_is_refused_naming_it() {
    // One line of a mebibyte: no token is that long.
    let long = token_file(&vec![b'k'; 1 << 20], 0o600);
    assert_refused(
        &format!("cpu=samples,net=127.0.0.1:9,token=@{}", long.display()),
        &format!("option token: {} is longer than 4096 bytes", long.display()),
    );
    // A file that never ends must not be read into memory to its end.
    assert_refused(
        "cpu=samples,net=127.0.0.1:9,token=@/dev/zero",
        "option token: /dev/zero is longer than 4096 bytes",
    );
}

#[test]
fn every_file_an_option_names_is_read_bounded_and_never_waited_on() {
    // A file that never ends (a wrong path) stops the JVM at once, naming it, instead of
    // holding its start-up while memory grows.
    assert_refused(
        "mpt=@/dev/zero",
        "option mpt: /dev/zero is longer than 1048576 bytes: not a file of parameter tracing specifications",
    );
    assert_refused(
        "format=x,cpu=times,filter=@/dev/zero",
        "option filter: /dev/zero is longer than 1048576 bytes: not a filter file",
    );
    // A FIFO: opening it would wait for a writer forever.
    let dir = openprof_testkit::kept_temp_dir("openprof-fifo-");
    let fifo = dir.join("specs");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    assert_refused(
        &format!("mpt=@{}", fifo.display()),
        &format!("option mpt: {} is a FIFO or a socket", fifo.display()),
    );
}

#[test]
fn hprofs_default_force_replaces_only_profiles_and_traces() {
    let dir = openprof_testkit::kept_temp_dir("openprof-force-");
    // A file that is not a profile: HPROF's default force=y would have replaced it (as root,
    // file=/etc/passwd replaced the system's password file).
    let precious = dir.join("passwd");
    std::fs::write(&precious, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    assert_refused(
        &format!("cpu=samples,file={}", precious.display()),
        &format!(
            "file={} exists and is not a profile or a trace; refusing to replace it",
            precious.display()
        ),
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "root:x:0:0:root:/root:/bin/bash\n"
    );
    // A profile of an earlier run is replaced, as HPROF did.
    let earlier = dir.join("earlier.txt");
    std::fs::write(&earlier, "JAVA PROFILE 1.0.1, created then\n").unwrap();
    let run = run_with(&format!("cpu=samples,file={}", earlier.display()));
    assert!(run.success(), "{}", run.stderr());
    assert!(std::fs::read_to_string(&earlier)
        .unwrap()
        .contains("CPU SAMPLES BEGIN"));
    // force=y, said, replaces anything.
    let run = run_with(&format!("cpu=samples,force=y,file={}", precious.display()));
    assert!(run.success(), "{}", run.stderr());
    assert!(std::fs::read_to_string(&precious)
        .unwrap()
        .starts_with("JAVA PROFILE 1.0.1"));
}

#[test]
fn a_token_file_others_may_read_is_used_with_a_warning() {
    let file = token_file(b"s3cret-token\n", 0o644);
    let run = run_with(&format!(
        "cpu=samples,net=127.0.0.1:9,token=@{}",
        file.display()
    ));
    assert!(run.success(), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!(
            "openprof WARNING: the token file {} may be read by other users (mode 644)",
            file.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-token"), "{stderr}");
}
