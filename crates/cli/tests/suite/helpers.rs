//! What the command's test modules share: the `openprof` binary built with them, run to its end
//! under a time limit so that a hang fails the test instead of stalling the suite.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use openprof_testkit::wait_with_limit;

/// How long one `openprof` command (and a JVM it runs) may take.
pub const LIMIT: Duration = Duration::from_secs(120);

/// `openprof ARGS` with its standard output and error piped, not yet started.
pub fn openprof_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_openprof"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `openprof ARGS` in the test's own working directory.
pub fn openprof(args: &[&str]) -> Output {
    finish(openprof_command(args), LIMIT)
}

/// Runs `openprof ARGS` in `dir`, where the commands that take or write relative paths work.
pub fn openprof_in(dir: &Path, args: &[&str]) -> Output {
    let mut command = openprof_command(args);
    command.current_dir(dir);
    finish(command, LIMIT)
}

/// Starts a command and waits for its end, failing the test if it outlives `limit`.
pub fn finish(mut command: Command, limit: Duration) -> Output {
    wait_with_limit(command.spawn().expect("start openprof"), limit)
}

/// Output bytes as text, any bad UTF-8 replaced.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `openprof convert ARGS` in `dir`, which must succeed.
pub fn convert_in(dir: &Path, args: &[&str]) {
    let mut all = vec!["convert"];
    all.extend_from_slice(args);
    let output = openprof_in(dir, &all);
    assert!(
        output.status.success(),
        "openprof {all:?}: {}",
        text(&output.stderr)
    );
}

/// Each method's weight in folded stacks (`frame;frame;leaf count` lines), summed at the
/// stack's leaf.
pub fn leaf_samples(collapsed: &str) -> std::collections::BTreeMap<String, u64> {
    let mut samples = std::collections::BTreeMap::new();
    for line in collapsed.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("stack and count");
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *samples.entry(leaf).or_insert(0) += count.parse::<u64>().expect("count");
    }
    samples
}

/// A run refused a file cut at byte `cut`: exit code 2, `refusal` on stderr followed by the
/// byte offset where reading failed (at most `cut`), no panic and nothing on stdout.
pub fn assert_refused_at_a_byte(output: &Output, refusal: &str, cut: usize) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("{refusal}: byte ")), "{stderr}");
    let offset: u64 = stderr
        .split("byte ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no byte offset: {stderr}"));
    assert!(offset <= cut as u64, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.stdout.is_empty(), "no partial report");
}
