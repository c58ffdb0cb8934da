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
    Attached, cpu=samples and heap= work; cpu=times and format=x need events HotSpot grants\n\
    only at start-up, and are refused (start the JVM with -agentpath, or `openprof run`).\n\
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
}

pub fn attach(args: AttachArgs) -> Result<ExitCode> {
    // The agent would have to end the JVM to print the table: print it here instead.
    if Options::parse(&args.options).is_ok_and(|options| options.help) {
        print!("{}", Options::help_text());
        return Ok(ExitCode::SUCCESS);
    }
    let agent = super::find_agent(args.agent)?;
    // The JVM resolves the path in its own working directory: give it an absolute one.
    let agent = agent
        .canonicalize()
        .with_context(|| format!("can't resolve {}", agent.display()))?;
    let pid = args.pid;
    let target = Target::locate(pid)?;
    let report = target
        .tmp_dir
        .join(format!("{ATTACH_REPORT_FILE_PREFIX}{}", target.ns_pid));
    // A report left by an earlier attach must not pass for this one's.
    if owned_by_us(&report) {
        let _ = fs::remove_file(&report);
    }
    let outcome = target.load_agent(&agent, &args.options, Duration::from_secs(args.timeout));
    let said = take_report(&report);
    match outcome {
        Ok(_) => {
            println!("openprof: attached to JVM {pid} ({})", agent.display());
            match said {
                Some(said) => print!("{said}"),
                None => println!("(the agent left no report of what it set up)"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error @ AttachError::AgentFailed { .. }) => {
            let why = said.unwrap_or_else(|| {
                format!("the reason is in JVM {pid}'s standard error (the agent left no report)\n")
            });
            bail!("{error}\n{}", why.trim_end())
        }
        Err(error) => Err(error.into()),
    }
}

/// A plain file (not a link) of ours, or any when we are root (attached to another user's JVM,
/// whose agent wrote it as that user).
fn owned_by_us(path: &Path) -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file() && (meta.uid() == euid || euid == 0))
}

/// Reads and removes the agent's report.
fn take_report(path: &Path) -> Option<String> {
    if !owned_by_us(path) {
        return None;
    }
    let text = fs::metadata(path)
        .ok()
        .filter(|meta| meta.len() <= MAX_REPORT_BYTES)
        .and_then(|_| fs::read_to_string(path).ok());
    let _ = fs::remove_file(path);
    text
}
