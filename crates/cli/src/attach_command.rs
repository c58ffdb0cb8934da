//! `openprof attach PID [OPTIONS]`: loads the agent into a running JVM through HotSpot's attach
//! mechanism (crates/attach) and prints what the agent set up, or why it refused.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use openprof_attach::{AttachError, Target};
use openprof_format::options::{Options, ATTACH_REPORT_FILE_PREFIX};

/// A report longer than this is not the agent's.
const MAX_REPORT_BYTES: u64 = 64 << 10;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    openprof attach 4242\n  \
    openprof attach 4242 cpu=samples,interval=1,file=/tmp/app.hprof.txt\n  \
    openprof attach 4242 heap=sites,doe=y\n\n\
    The JVM must be a HotSpot JVM of the same user (or attach as root), not started with\n\
    -XX:+DisableAttachMechanism. Its attach listener is woken with SIGQUIT the first time.\n\
    The profile is written by the JVM, relative to ITS working directory, at exit (doe=y) and\n\
    on each `kill -QUIT PID`; the line `profile:` printed on success gives its full path.\n\
    Attached, cpu=samples, cpu=times (the loaded classes are rewritten), wall=, lock= and\n\
    heap= work; format=x needs events HotSpot grants only at start-up, and is refused (start\n\
    the JVM with -agentpath, or `openprof run`).\n\
    Threads running at attach are sampled too. The agent loads once per JVM. See docs/attach.md.\n\
    The agent is looked for as `openprof run` does: --agent, $OPENPROF_AGENT, next to this\n\
    binary, then target/release and target/debug.")]
pub struct AttachArgs {
    /// The JVM's process id.
    pid: u32,
    /// Agent options in HPROF's syntax, as after `-agentpath:libopenprof_agent.so=`
    /// (`openprof attach PID help` lists them without attaching).
    #[arg(default_value = "cpu=samples", value_name = "AGENT_OPTIONS")]
    options: String,
    /// The agent library to load.
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Seconds to wait for the JVM to start its attach listener.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Stay until the JVM exits, then write its profile to this file: a flame graph (.html),
    /// folded stacks (.collapsed), pprof (.pb.gz), speedscope (.json), a Chrome trace
    /// (.trace.json).
    #[arg(short = 'f', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    view: crate::convert_command::ViewArgs,
}

pub fn attach(args: AttachArgs) -> Result<ExitCode> {
    // The agent would have to end the JVM to print the table: print it here instead.
    if Options::parse(&args.options).is_ok_and(|options| options.help) {
        print!("{}", Options::help_text());
        return Ok(ExitCode::SUCCESS);
    }
    let (options_text, added) =
        crate::run_command::with_view_options(&args.options, args.output.is_some());
    let agent = crate::agent_library::find_agent(args.agent)?;
    // The JVM resolves the path in its own working directory: give it an absolute one.
    let agent = agent
        .canonicalize()
        .with_context(|| format!("can't resolve {}", agent.display()))?;
    let pid = args.pid;
    let target = Target::locate(pid)?;
    let said = load_agent(
        &target,
        &agent,
        &options_text,
        Duration::from_secs(args.timeout),
    )?;
    crate::run_command::say_view_options(&added);
    println!("openprof: attached to JVM {pid} ({})", agent.display());
    match &said {
        Some(said) => print!("{said}"),
        None => println!("(the agent left no report of what it set up)"),
    }
    if let Some(output) = &args.output {
        let profile = said
            .as_deref()
            .and_then(profile_path)
            .context("the agent did not say where it writes the profile")?;
        println!(
            "openprof: waiting for JVM {pid} to exit, then writing {}",
            output.display()
        );
        while process_exists(pid) {
            std::thread::sleep(Duration::from_millis(200));
        }
        crate::run_command::write_requested_view(&profile, output, &args.view)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads the agent library into the target with these options and returns what the agent
/// said it did (its report, when it left one); a refusal is an error carrying the agent's
/// reason.
pub fn load_agent(
    target: &Target,
    agent: &Path,
    options: &str,
    timeout: Duration,
) -> Result<Option<String>> {
    let pid = target.pid;
    let report = target
        .tmp_dir
        .join(format!("{ATTACH_REPORT_FILE_PREFIX}{}", target.ns_pid));
    // A report left by an earlier attach must not pass for this one's.
    if written_by_the_agent(&report, target.uid) {
        let _ = fs::remove_file(&report);
    }
    let outcome = target.load_agent(agent, options, timeout);
    let said = take_report(&report, target.uid);
    match outcome {
        Ok(_) => Ok(said),
        Err(error @ AttachError::AgentFailed { .. }) => {
            let why = said.unwrap_or_else(|| {
                format!("the reason is in JVM {pid}'s standard error (the agent left no report)\n")
            });
            bail!("{error}\n{}", why.trim_end())
        }
        Err(error) => Err(error.into()),
    }
}

/// The profile's path from the agent's report (its `profile: PATH` line).
pub fn profile_path(report: &str) -> Option<PathBuf> {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("profile:"))
        .map(|rest| {
            // `profile: PATH (written at exit and on SIGQUIT)`
            let path = rest.rsplit_once(" (written").map_or(rest, |(path, _)| path);
            PathBuf::from(path.trim())
        })
}

/// Whether process `pid` still exists (a zombie counts as gone: it wrote what it will write).
pub fn process_exists(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name's closing parenthesis.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// A plain file (not a link) of the JVM's user, as the agent creates it: another user's file
/// in the shared /tmp is not taken for the agent's words, even by root.
fn written_by_the_agent(path: &Path, jvm_uid: u32) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file() && meta.uid() == jvm_uid)
}

/// Reads and removes the agent's report.
fn take_report(path: &Path, jvm_uid: u32) -> Option<String> {
    if !written_by_the_agent(path, jvm_uid) {
        return None;
    }
    let text = fs::metadata(path)
        .ok()
        .filter(|meta| meta.len() <= MAX_REPORT_BYTES)
        .and_then(|_| fs::read_to_string(path).ok());
    let _ = fs::remove_file(path);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_of_another_user_is_not_the_agents() {
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join(format!("{ATTACH_REPORT_FILE_PREFIX}4242"));
        fs::write(&report, "openprof agent attached with cpu=samples\n").unwrap();
        let ours = fs::metadata(&report).unwrap().uid();
        assert!(written_by_the_agent(&report, ours));
        assert!(!written_by_the_agent(&report, ours + 1));
        assert_eq!(take_report(&report, ours + 1), None);
        assert!(report.exists(), "another user's file is left alone");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&report, &link).unwrap();
        assert!(!written_by_the_agent(&link, ours), "a link is not followed");
        assert_eq!(
            take_report(&report, ours).as_deref(),
            Some("openprof agent attached with cpu=samples\n")
        );
        assert!(!report.exists());
    }

    #[test]
    fn the_profile_path_is_read_from_the_report() {
        let report = "openprof agent attached with cpu=samples\nprofile: /tmp/my app/java.hprof.txt (written at exit)\n";
        assert_eq!(
            profile_path(report),
            Some(PathBuf::from("/tmp/my app/java.hprof.txt"))
        );
        assert_eq!(profile_path("nothing here\n"), None);
    }
}
