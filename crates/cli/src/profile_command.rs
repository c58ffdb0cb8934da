//! `openprof profile [ACTION] PID`: profiles a running JVM for a while and writes the result,
//! as asprof does: the agent is loaded (or found loaded) and a profiling session is started,
//! stopped, dumped or asked about through further attaches (the agent's `action=` option).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use openprof_attach::Target;
use openprof_format::options::Options;

use crate::attach_command::{load_agent, process_exists, profile_path};
use crate::convert_command::ViewArgs;

/// The agent library's file name, as /proc/PID/maps shows it once loaded.
const AGENT_FILE: &str = "libopenprof_agent.so";
/// A session's file is named with this prefix in the JVM's /tmp; files of that name are the
/// command's own, removed once read.
const SESSION_FILE_PREFIX: &str = "openprof-session-";

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    openprof profile 4242 -d 30 -f profile.html             # CPU for 30 s, then a flame graph\n  \
    openprof profile 4242 -d 10 -e cpu,wall,lock -f out.html\n  \
    openprof profile start 4242 -e wall -i 20ms\n  \
    openprof profile dump 4242 -f so-far.pb.gz               # the session so far; it goes on\n  \
    openprof profile stop 4242 -f profile.collapsed\n  \
    openprof profile status 4242\n  \
    openprof profile 4242 --loop 10m -f '/var/log/app/profile-%p-%t.html'   # until Ctrl-C\n\n\
    ACTION is collect (the default: start, wait -d seconds or for Ctrl-C, stop and write),\n\
    start, stop, dump or status. The JVM needs no agent at its start: the first session loads\n\
    it (HotSpot's attach mechanism, as `openprof attach`); it stays loaded, idle between\n\
    sessions. -f FILE's extension chooses the format (.html, .collapsed, .pb.gz, .json,\n\
    .trace.json); %p in FILE is the pid, %t the time (YYYYMMDD-HHMMSS), %n the loop's count.\n\
    Without -f the top methods are printed. See docs/profile.md.")]
pub struct ProfileArgs {
    /// `[ACTION] PID`: ACTION is collect (default), start, stop, dump or status.
    #[arg(value_name = "[ACTION] PID", num_args = 1..=2, required = true)]
    target: Vec<String>,
    /// Seconds to profile (collect; with --loop all the periods together, else until Ctrl-C).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    duration: Option<f64>,
    /// What to profile, several apart by commas: cpu, wall, alloc, lock.
    #[arg(
        short = 'e',
        long = "events",
        value_name = "EVENT",
        value_delimiter = ',',
        default_value = "cpu"
    )]
    events: Vec<String>,
    /// The sampling interval of cpu and wall: 10ms, 1ms, 2s (a bare number is milliseconds).
    #[arg(
        short = 'i',
        long = "interval",
        value_name = "DURATION",
        default_value = "10ms"
    )]
    interval: String,
    /// lock: the shortest wait counted (500ns, 10us, 1ms; a bare number is nanoseconds).
    #[arg(long = "lock", value_name = "DURATION", default_value = "10us")]
    lock_threshold: String,
    /// alloc: mean bytes between sampled allocations (512k, 1m).
    #[arg(long = "alloc", value_name = "BYTES", default_value = "512k")]
    alloc_interval: String,
    /// Write the profile here (the format by the extension, or --format); %p, %t and %n are
    /// replaced. Without it, the top methods are printed.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    output: Option<String>,
    /// Continuous profiling: a new file every DURATION (10s, 5m, 1h), each a profile of its
    /// own period.
    #[arg(long = "loop", value_name = "DURATION")]
    loop_every: Option<String>,
    /// How many methods to print without -f.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// The agent library to load, when the JVM has none loaded.
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Seconds to wait for the JVM to start its attach listener.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProfileAction {
    Collect,
    Start,
    Stop,
    Dump,
    Status,
}

/// A JVM to profile.
struct Jvm {
    target: Target,
    timeout: Duration,
}

impl Jvm {
    fn find(pid: u32, timeout: Duration) -> Result<Jvm> {
        Ok(Jvm {
            target: Target::locate(pid)?,
            timeout,
        })
    }

    /// The agent library loaded in the JVM, if one is (a session loads it).
    fn loaded_agent(&self) -> Result<Option<PathBuf>> {
        loaded_agent(self.pid())
    }

    fn pid(&self) -> u32 {
        self.target.pid
    }

    /// Attaches with `options` (which carry `action=`) and returns the agent's report.
    fn ask(&self, agent: &Path, options: &str) -> Result<String> {
        Ok(load_agent(&self.target, agent, options, self.timeout)?
            .unwrap_or_else(|| "(the agent left no report)".into()))
    }

    /// Asks the agent loaded in the JVM; an error when there is none.
    fn ask_loaded(&self, options: &str) -> Result<String> {
        let agent = self.loaded_agent()?.with_context(|| {
            format!(
                "JVM {} has no openprof agent loaded (no profiling session was started); \
                 `openprof profile start {}` starts one",
                self.pid(),
                self.pid()
            )
        })?;
        self.ask(&agent, options)
    }

    /// A path the agent named (in the JVM's own file system), as this process reaches it.
    fn reach(&self, path: &Path) -> PathBuf {
        let via_root = Path::new("/proc")
            .join(self.pid().to_string())
            .join("root")
            .join(path.strip_prefix("/").unwrap_or(path));
        if fs::metadata(&via_root).is_ok() {
            via_root
        } else {
            path.to_path_buf()
        }
    }

    /// A new session file: its name for the JVM, and where this process reads it.
    fn new_session_file(&self) -> (String, PathBuf) {
        let name = format!(
            "{SESSION_FILE_PREFIX}{}-{}.txt",
            self.target.ns_pid,
            uuid::Uuid::new_v4().simple()
        );
        (format!("/tmp/{name}"), self.target.tmp_dir.join(name))
    }
}

/// The agent library loaded in process `pid`, from its memory map.
fn loaded_agent(pid: u32) -> Result<Option<PathBuf>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("can't read the memory map of process {pid}"))?;
    Ok(maps.lines().find_map(|line| {
        let path = line.split_whitespace().nth(5)?;
        (Path::new(path).file_name()? == AGENT_FILE).then(|| PathBuf::from(path))
    }))
}

/// A duration in the units the options use: `ms`, `s`, `m`, `h`; a bare number is in
/// `bare_unit` seconds.
fn parse_duration(what: &str, text: &str, bare_unit: f64) -> Result<Duration> {
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" => bare_unit,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => bail!("{what}: '{text}' has an unknown unit '{unit}'; use ms, s, m or h"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|value: &f64| value.is_finite() && *value > 0.0)
        .with_context(|| format!("{what}: '{text}' is not a positive duration (e.g. 10ms, 2s)"))?;
    Ok(Duration::from_secs_f64(value * scale))
}

/// The agent options of a session: the events asked for, their intervals, and the file.
fn session_options(args: &ProfileArgs, file: &str, first_load: bool) -> Result<String> {
    let interval = parse_duration("-i", &args.interval, 1e-3)?;
    let interval_ms = interval.as_millis();
    if interval_ms == 0 || interval.as_nanos() % 1_000_000 != 0 {
        bail!(
            "-i: '{}' is not a whole number of milliseconds (the agent samples every 1 to 60000 ms)",
            args.interval
        );
    }
    let mut options = vec!["action=start".to_string()];
    let mut seen = Vec::new();
    for event in &args.events {
        if seen.contains(&event.as_str()) {
            bail!("-e: {event} is given twice");
        }
        seen.push(event.as_str());
        match event.as_str() {
            "cpu" => options.push(format!("cpu=samples,interval={interval_ms}")),
            "wall" => options.push(format!("wall={interval_ms}")),
            "alloc" => options.push(format!("heap=sites,alloc_interval={}", args.alloc_interval)),
            "lock" => options.push(format!("lock={}", args.lock_threshold)),
            other => bail!("-e: '{other}' is not an event; use cpu, wall, alloc or lock"),
        }
    }
    if !seen.contains(&"cpu") && seen.contains(&"wall") {
        options.push(format!("interval={interval_ms}"));
    }
    if first_load {
        // Stacks deep enough for a flame graph, and the thread of every sample (views group
        // by it with -t).
        // Every row kept (flame graphs cut by their own --minwidth), and nothing on the JVM's
        // standard error at each dump.
        options.push(format!(
            "depth={},thread=y,cutoff=0,verbose=n",
            crate::run_command::VIEW_DEPTH
        ));
    }
    options.push(format!("file={file}"));
    let options = options.join(",");
    // Told here, in the command's words, rather than by the agent in the JVM.
    Options::parse(&options).map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(options)
}

/// `%p`, `%t` and `%n` in a file name template: the pid, the time the profile's period began
/// and the loop's count.
fn file_name(
    template: &str,
    pid: u32,
    began: chrono::DateTime<chrono::Local>,
    count: u32,
) -> String {
    let time = began.format("%Y%m%d-%H%M%S").to_string();
    let mut name = String::new();
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            name.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => name.push_str(&pid.to_string()),
            Some('t') => name.push_str(&time),
            Some('n') => name.push_str(&count.to_string()),
            Some(other) => {
                name.push('%');
                name.push(other);
            }
            None => name.push('%'),
        }
    }
    name
}

pub fn profile(args: ProfileArgs) -> Result<ExitCode> {
    let (action, pid) = match args.target.as_slice() {
        [pid] => (ProfileAction::Collect, pid),
        [action, pid] => (
            match action.as_str() {
                "collect" => ProfileAction::Collect,
                "start" => ProfileAction::Start,
                "stop" => ProfileAction::Stop,
                "dump" => ProfileAction::Dump,
                "status" => ProfileAction::Status,
                other => {
                    bail!("'{other}' is not an action; use collect, start, stop, dump or status")
                }
            },
            pid,
        ),
        _ => bail!("give [ACTION] PID"),
    };
    let pid: u32 = pid
        .parse()
        .ok()
        .filter(|pid| *pid > 0)
        .with_context(|| format!("'{pid}' is not a process id"))?;
    if args.loop_every.is_some() && action != ProfileAction::Collect {
        bail!("--loop is for collect (openprof profile PID --loop ...), not for {action:?}");
    }
    if args.loop_every.is_some() && args.output.is_none() {
        bail!("--loop writes a file each period: give -f FILE (with %t or %n to keep them apart)");
    }
    // Bad view options are told before anything is done to the JVM.
    if let Some(output) = &args.output {
        crate::convert_command::output_format(Path::new(output), &args.view)?;
    }
    crate::convert_command::view_options(&args.view)?;
    let jvm = Jvm::find(pid, Duration::from_secs(args.timeout))?;
    match action {
        ProfileAction::Status => {
            match jvm.loaded_agent()? {
                Some(_) => println!("{}", jvm.ask_loaded("action=status")?),
                None => println!("JVM {pid} has no openprof agent loaded"),
            }
            Ok(ExitCode::SUCCESS)
        }
        ProfileAction::Start => {
            let said = start(&jvm, &args)?;
            println!("{said}");
            Ok(ExitCode::SUCCESS)
        }
        ProfileAction::Stop => {
            let said = jvm.ask_loaded("action=stop")?;
            eprintln!("{}", said.lines().next().unwrap_or_default());
            write_session(&jvm, &said, (chrono::Local::now(), 0), &args, true)?;
            Ok(ExitCode::SUCCESS)
        }
        ProfileAction::Dump => {
            let said = jvm.ask_loaded("action=dump")?;
            write_session(&jvm, &said, (chrono::Local::now(), 0), &args, false)?;
            Ok(ExitCode::SUCCESS)
        }
        ProfileAction::Collect => collect(&jvm, &args),
    }
}

/// Starts a session; returns the agent's words, and the file the session writes its profile
/// to (in the JVM's file system), where the words do not name one.
fn start(jvm: &Jvm, args: &ProfileArgs) -> Result<String> {
    let (file, _) = jvm.new_session_file();
    let loaded = jvm.loaded_agent()?;
    let options = session_options(args, &file, loaded.is_none())?;
    let said = match loaded {
        Some(agent) => jvm.ask(&agent, &options)?,
        None => {
            let agent = crate::agent_library::find_agent(args.agent.clone())?;
            let agent = agent
                .canonicalize()
                .with_context(|| format!("can't resolve {}", agent.display()))?;
            jvm.ask(&agent, &options)?
        }
    };
    // A JVM too busy to leave its report in time still writes to the file it was given: the
    // session's last dump at its exit is found there.
    Ok(match profile_path(&said) {
        Some(_) => said,
        None => format!("profile: {file}\n{said}"),
    })
}

/// Writes the session's profile (as the agent named it in `said`) to `output` (templated), or
/// prints its top methods; removes the session's file once read when `finished`.
fn write_session(
    jvm: &Jvm,
    said: &str,
    (began, count): (chrono::DateTime<chrono::Local>, u32),
    args: &ProfileArgs,
    finished: bool,
) -> Result<()> {
    let profile = profile_path(said).context("the agent did not say where its profile is")?;
    let file = jvm.reach(&profile);
    let written = match &args.output {
        Some(template) => {
            let output = PathBuf::from(file_name(template, jvm.pid(), began, count));
            crate::run_command::write_requested_view(&file, &output, &args.view)
        }
        None => crate::report::report_view(&file, &args.view, args.top, None).map(|_| ()),
    };
    let ours = profile
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(SESSION_FILE_PREFIX));
    if finished && ours {
        let _ = fs::remove_file(&file);
    }
    written
}

/// Start, wait, stop and write; with --loop, again each period.
///
/// Time is counted from each session's start: attaching (the first one loads the agent, which
/// may take seconds in a busy JVM) and writing each file come between periods, so every file
/// holds a whole period of profiling and `-d` is the time profiled, whatever they took.
fn collect(jvm: &Jvm, args: &ProfileArgs) -> Result<ExitCode> {
    let period = args
        .loop_every
        .as_deref()
        .map(|text| parse_duration("--loop", text, 1.0))
        .transpose()?;
    if period.is_some_and(|period| period < Duration::from_secs(1)) {
        bail!("--loop: a period is at least 1 s");
    }
    let total = match (args.duration, period) {
        (Some(seconds), _) if seconds.is_finite() && seconds > 0.0 => {
            Some(Duration::from_secs_f64(seconds))
        }
        (Some(seconds), _) => bail!("-d: {seconds} is not a positive number of seconds"),
        // Looping goes on until Ctrl-C; one profile lasts a minute unless told, as asprof's.
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(60)),
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = Arc::clone(&interrupted);
        ctrlc::set_handler(move || interrupted.store(true, Ordering::SeqCst))
            .context("can't handle Ctrl-C")?;
    }
    // The sessions' time so far.
    let mut profiled = Duration::ZERO;
    let mut count = 0;
    loop {
        let said = start(jvm, args)?;
        let period_began = (Instant::now(), chrono::Local::now());
        if count == 0 {
            eprintln!(
                "openprof: profiling JVM {} ({}){}",
                jvm.pid(),
                args.events.join(", "),
                match (total, period) {
                    (Some(total), _) => format!(" for {:.0} s", total.as_secs_f64()),
                    (None, _) => " until Ctrl-C".into(),
                }
            );
        }
        // The period ends at the loop's period, the whole duration, Ctrl-C or the JVM's exit.
        let ended = loop {
            std::thread::sleep(Duration::from_millis(50));
            let elapsed = period_began.0.elapsed();
            if interrupted.load(Ordering::SeqCst)
                || total.is_some_and(|total| profiled + elapsed >= total)
            {
                break true;
            }
            if !process_exists(jvm.pid()) {
                // The agent wrote the session's last dump as the JVM exited.
                eprintln!("openprof: JVM {} exited during the session", jvm.pid());
                write_session(jvm, &said, (period_began.1, count), args, true)?;
                return Ok(ExitCode::SUCCESS);
            }
            if period.is_some_and(|period| elapsed >= period) {
                break false;
            }
        };
        let stopped = jvm.ask_loaded("action=stop")?;
        profiled += period_began.0.elapsed();
        write_session(jvm, &stopped, (period_began.1, count), args, true)?;
        count += 1;
        if ended {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_a_bare_unit() {
        assert_eq!(
            parse_duration("-i", "10ms", 1e-3).unwrap(),
            Duration::from_millis(10)
        );
        assert_eq!(
            parse_duration("-i", "7", 1e-3).unwrap(),
            Duration::from_millis(7)
        );
        assert_eq!(
            parse_duration("--loop", "2", 1.0).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            parse_duration("--loop", "1m", 1.0).unwrap(),
            Duration::from_secs(60)
        );
        let error = parse_duration("-i", "10x", 1e-3).unwrap_err().to_string();
        assert!(error.contains("unknown unit 'x'"), "{error}");
        let error = parse_duration("-i", "-3ms", 1e-3).unwrap_err().to_string();
        assert!(error.contains("not a positive duration"), "{error}");
    }

    #[test]
    fn file_names_are_templated() {
        let began = chrono::Local::now();
        let name = file_name("/var/p-%p-%n-%t.html", 42, began, 3);
        let stamp = name
            .strip_prefix("/var/p-42-3-")
            .and_then(|rest| rest.strip_suffix(".html"))
            .expect(&name);
        assert_eq!(stamp, began.format("%Y%m%d-%H%M%S").to_string());
        assert_eq!(file_name("100%", 1, began, 0), "100%");
        assert_eq!(file_name("%x", 1, began, 0), "%x");
    }
}
