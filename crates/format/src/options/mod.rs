//! The agent's option string: HPROF's syntax (`name=value,...`), names and defaults, plus
//! openprof's own extensions. The one parser used by the agent and the CLI alike.
//!
//! - this module: the options as Rust types, what they imply, and their text form;
//! - [`parser`]: the option string read and checked, every problem named;
//! - [`help`]: the table of options and the usage text `help` prints.

mod help;
mod parser;

pub use parser::{is_label_name_char, is_label_value_char, labels_in};

use std::fmt;

/// `threads=`'s thread name patterns: `*` any run of characters, `?` one, alternatives apart
/// by `|`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadNames(pub Vec<String>);

impl ThreadNames {
    /// Whether a thread of this name is one of those asked for.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.0.iter().any(|pattern| {
            let pattern: Vec<char> = pattern.chars().collect();
            glob_matches(&pattern, &name)
        })
    }
}

/// `*` and `?` matching, iteratively (the last `*` absorbs what the rest did not match).
fn glob_matches(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((star_p, star_n)) = star {
            p = star_p + 1;
            n = star_n + 1;
            star = Some((star_p, star_n + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// What `heap=` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapMode {
    Dump,
    Sites,
    All,
}

/// What `cpu=` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuMode {
    Samples,
    Times,
    Old,
}

/// `format=a` (text), `format=b` (binary), or openprof's `format=x` (the open trace format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Ascii,
    Binary,
    /// Trace elements (the open trace format, docs/trace.dtd) as an XML document.
    Xml,
}

/// How `cpu=samples` walks stacks (an openprof extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampler {
    /// AsyncGetCallTrace from a SIGPROF handler driven by per-thread CPU timers: no safepoint bias.
    AsyncGetCallTrace,
    /// JVMTI GetAllStackTraces from an agent thread: HPROF's own way, biased towards safepoints.
    GetAllStackTraces,
}

/// Which walker the signal handler of `sampler=asgct` walks Java stacks with (an openprof
/// extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walker {
    /// HotSpot's AsyncGetCallTrace alone.
    AsyncGetCallTrace,
    /// openprof's own walker over HotSpot's frames, AsyncGetCallTrace where it cannot walk
    /// (the default).
    Vm,
    /// AsyncGetCallTrace's walks are recorded; openprof's runs beside each and the
    /// disagreements are counted in the CPU SAMPLER record.
    Check,
}

impl fmt::Display for Walker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Walker::AsyncGetCallTrace => "asgct",
            Walker::Vm => "vm",
            Walker::Check => "check",
        })
    }
}

/// Which per-thread CPU clock drives `sampler=asgct` (an openprof extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuTimer {
    /// perf_events `task-clock` counters (hrtimers): any interval is honoured. Falls back to
    /// `Posix` when the kernel refuses perf events.
    Perf,
    /// POSIX thread CPU timers: checked at scheduler ticks.
    Posix,
}

/// Whether `cpu=samples` records the native (C, C++) frames above the Java ones (an openprof
/// extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CStack {
    /// Walked by frame pointers from the signal's registers (x86-64 Linux; elsewhere none).
    FramePointers,
    /// Walked by the libraries' call frame information (`.eh_frame`) where it has a rule the
    /// handler follows, by frame pointers elsewhere (x86-64 Linux; elsewhere none).
    Dwarf,
    /// Java frames only.
    No,
}

/// `action=`: what an agent already loaded in a running JVM is asked to do by a further attach
/// (`openprof profile`), an openprof extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start a profiling session: the sampling the other options name, into `file=`.
    Start,
    /// End the session: its last dump is written and sampling stops.
    Stop,
    /// Write a dump of the session so far; sampling goes on.
    Dump,
    /// Say whether a session runs, since when, and what it has taken.
    Status,
}

impl Action {
    pub fn word(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Dump => "dump",
            Action::Status => "status",
        }
    }
}

/// The options a profiling session sets (`action=start`); an agent already loaded keeps every
/// other option as it was loaded with.
pub const SESSION_OPTIONS: [&str; 8] = [
    "action",
    "file",
    "cpu",
    "wall",
    "lock",
    "heap",
    "interval",
    "alloc_interval",
];

/// A `net=host:port` destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetAddress {
    pub host: String,
    pub port: u16,
}

/// The class whose calls label the samples taken inside them in continuous mode (name and
/// value: its first two parameters).
pub const CONTEXT_CLASS: &str = "dev.openprof.Context";

/// The parameter tracing specifications of the Context API's calls.
const CONTEXT_SPECS: &str = "\
dev.openprof.Context.run(java.lang.String,java.lang.String,java.lang.Runnable) 1
dev.openprof.Context.run(java.lang.String,java.lang.String,java.lang.Runnable) 2
dev.openprof.Context.call(java.lang.String,java.lang.String,java.util.concurrent.Callable) 1
dev.openprof.Context.call(java.lang.String,java.lang.String,java.util.concurrent.Callable) 2
";

/// Every option the agent understands, after parsing and checking.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub help: bool,
    /// `heap=` as given; [`Options::heap_profile`] applies HPROF's default.
    pub heap: Option<HeapMode>,
    pub cpu: Option<CpuMode>,
    pub monitor: bool,
    pub format: OutputFormat,
    /// `file=` as given; [`Options::output_file`] applies HPROF's default name.
    pub file: Option<String>,
    pub net: Option<NetAddress>,
    pub depth: u32,
    pub interval_ms: u32,
    pub cutoff: f64,
    pub lineno: bool,
    pub thread: bool,
    pub doe: bool,
    pub msa: bool,
    pub force: bool,
    /// Whether `force=` was given (not HPROF's default): only then is a file that is not a
    /// profile or trace replaced.
    pub force_given: Given,
    pub verbose: bool,
    pub sampler: Sampler,
    pub cputimer: CpuTimer,
    pub cstack: CStack,
    pub walker: Walker,
    /// `vmthreads=y`: the JVM's own threads (JIT compilers, GC workers) are sampled too.
    pub vmthreads: bool,
    /// `wall=MS`: every Java thread, running or not, sampled every MS milliseconds of wall
    /// time with its state (an openprof extension).
    pub wall_ms: Option<u32>,
    /// `lock=DURATION`: contended monitor enters and parks that waited at least this many
    /// nanoseconds, by stack and lock class, in MONITOR TIME and PARK TIME tables (`monitor=y`
    /// is `lock=0`).
    pub lock_ns: Option<u64>,
    /// `lockowner=y`: the lock profile also takes the stack of the thread holding the lock
    /// when a wait begins, for LOCK OWNERS tables (an openprof extension).
    pub lock_owners: bool,
    /// `coverage=y`: the filtered classes count their basic blocks; the trace gets lineTable
    /// and line elements.
    pub coverage: bool,
    /// `callsites=y`: the calls traced methods make into classes the filters leave out are
    /// methodCall and methodReturn elements.
    pub call_sites: bool,
    /// `threads=GLOB|GLOB`: only the Java threads whose names match are sampled (an openprof
    /// extension).
    pub threads: Option<ThreadNames>,
    /// `delay=CLASS.METHOD:DURATION[:blocks]`: a busy delay of known cost put into one method,
    /// to check a profile against (an openprof extension).
    pub delay: Option<Delay>,
    /// `filter=` as given: `+PATTERN;-PATTERN;...` or `@FILE` (read by [`Options::filter_block`]).
    pub filter: Option<String>,
    /// Mean bytes between sampled allocations for `heap=sites` (0: every allocation).
    pub alloc_interval: u64,
    /// `token=` as given: the collector's shared secret, or `@FILE` holding it (read by
    /// [`Options::token_value`]). Never echoed: [`Options`]' text form leaves it out.
    pub token: Option<String>,
    /// `tlsca=FILE`: talk TLS to the collector and trust the certificates in this PEM file.
    pub tls_ca: Option<String>,
    /// `netbuffer=`: bytes of unacknowledged data kept for the collector; beyond them the
    /// oldest is dropped (and the loss reported).
    pub net_buffer: u64,
    /// `continuous=DURATION`: every this many milliseconds the agent ships a profile window to
    /// the collector: what every engine recorded since the last window (as the collector's
    /// DUMP PROFILE asks for), without a heap dump.
    pub continuous_ms: Option<u64>,
    /// `mpt=@FILE`: method parameter tracing specifications (docs/mpt.md).
    pub mpt: Option<String>,
    /// `commands=`: which commands from the collector beyond steering the profile are carried
    /// out (heap dumps, exit, parameter tracing); none by default.
    pub commands: Vec<crate::wire::CommandClass>,
    /// `action=`: for an agent already loaded, attached again (`openprof profile`).
    pub action: Option<Action>,
    /// `label=NAME:VALUE`, as many as given, in order: names for the agent that a collector's
    /// catalog and the web UI's fleet show and filter by; the agent itself does nothing with
    /// them.
    pub labels: Vec<(String, String)>,
}

/// `delay=`: the methods of one name in one class spin for `ns` nanoseconds of CPU at every
/// entry, or with `blocks`, at the start of each of their basic blocks. The agent counts the
/// delays and the time they took, which is what a profile of the run must show in that method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delay {
    /// The class's binary name (`org.h2.command.query.Select`, `a.Outer$Inner`).
    pub class: String,
    /// The methods' name (every overload is delayed).
    pub method: String,
    pub ns: u64,
    /// At the start of every basic block instead of at entry only.
    pub blocks: bool,
    /// Only one call (or block) in this many spins (`every=N`; 1: all): long delays, whose
    /// clock reads cost little beside them, in a method called too often for one a call.
    pub every: u32,
}

impl fmt::Display for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}:{}ns", self.class, self.method, self.ns)?;
        if self.blocks {
            f.write_str(":blocks")?;
        }
        if self.every > 1 {
            write!(f, ":every={}", self.every)?;
        }
        Ok(())
    }
}

/// Whether an option was given rather than left to its default. Two sets of options are equal
/// whatever it says: their text names every value, given or not, so reading it back gives the
/// same values, and equality is that of the values.
#[derive(Clone, Copy, Debug, Default)]
pub struct Given(pub bool);

impl PartialEq for Given {
    fn eq(&self, _: &Given) -> bool {
        true
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            help: false,
            heap: None,
            cpu: None,
            monitor: false,
            format: OutputFormat::Ascii,
            file: None,
            net: None,
            depth: 4,
            interval_ms: 10,
            cutoff: 0.0001,
            lineno: true,
            thread: false,
            doe: true,
            msa: false,
            force: true,
            force_given: Given(false),
            verbose: true,
            sampler: Sampler::AsyncGetCallTrace,
            cputimer: CpuTimer::Perf,
            cstack: CStack::Dwarf,
            walker: Walker::Vm,
            vmthreads: false,
            wall_ms: None,
            lock_ns: None,
            lock_owners: false,
            coverage: false,
            call_sites: false,
            threads: None,
            delay: None,
            filter: None,
            alloc_interval: DEFAULT_ALLOC_INTERVAL,
            token: None,
            tls_ca: None,
            net_buffer: DEFAULT_NET_BUFFER,
            continuous_ms: None,
            commands: Vec::new(),
            mpt: None,
            action: None,
            labels: Vec::new(),
        }
    }
}

/// The agent attached to a running JVM leaves what it did (or why it refused) in
/// `/tmp/<this><pid>`, the JVM's /tmp and pid, for `openprof attach` to print: HotSpot's attach
/// protocol carries only Agent_OnAttach's return code back.
pub const ATTACH_REPORT_FILE_PREFIX: &str = ".openprof_attach";

/// The largest `depth=` we accept: deeper stacks cost memory in every sample slot.
pub const MAX_DEPTH: u32 = 2048;
/// The largest `interval=` we accept, in milliseconds.
pub const MAX_INTERVAL_MS: u32 = 60_000;
/// `alloc_interval=`'s default: JFR's and the JVM's own default for heap sampling, 512 KiB.
pub const DEFAULT_ALLOC_INTERVAL: u64 = 512 * 1024;
/// `netbuffer=`'s default and bounds.
pub const DEFAULT_NET_BUFFER: u64 = 64 << 20;
const NET_BUFFER_RANGE: (u64, u64) = (64 << 10, 4 << 30);
/// The largest `alloc_interval=` we accept (JVMTI takes a jint).
pub const MAX_ALLOC_INTERVAL: u64 = i32::MAX as u64;
/// The longest name and value of a `label=` we accept, in characters.
pub const MAX_LABEL_NAME: usize = 64;
pub const MAX_LABEL_VALUE: usize = 256;
/// The most labels we accept, and the most characters of their names and values together:
/// they travel in the agent's hello, which a collector takes only up to
/// [`crate::wire::MAX_HELLO`] bytes.
pub const MAX_LABELS: usize = 32;
pub const MAX_LABELS_TEXT: usize = 1024;

/// A bad option string: names the option and says what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("option {option}: {problem}")]
pub struct OptionError {
    /// The option's name (or the offending text when no name could be read).
    pub option: String,
    pub problem: String,
}

/// The option string as the JVM passes it (bytes) as text. An option that is not UTF-8 is
/// refused by name: read with replacement characters, a `file=` would name another file.
pub fn options_text(bytes: &[u8]) -> Result<&str, OptionError> {
    std::str::from_utf8(bytes).map_err(|_| {
        // No byte of a multi-byte UTF-8 character is a comma: the items split cleanly.
        let item = bytes
            .split(|&byte| byte == b',')
            .find(|item| std::str::from_utf8(item).is_err())
            .unwrap_or(bytes);
        let name = item.split(|&byte| byte == b'=').next().unwrap_or(item);
        match std::str::from_utf8(name) {
            Ok(name) if name.len() < item.len() => {
                bad(name, "is not UTF-8; give its value as UTF-8 text")
            }
            _ => bad(
                &String::from_utf8_lossy(item),
                "is not UTF-8; options are UTF-8 text",
            ),
        }
    })
}

fn bad(option: &str, problem: impl Into<String>) -> OptionError {
    OptionError {
        option: option.to_string(),
        problem: problem.into(),
    }
}

impl Options {
    /// The heap profile in force: HPROF turns on heap=all when no profile at all was chosen
    /// (with format=x the trace itself is the profile, so no heap profile is implied).
    /// The lock profile's threshold in nanoseconds, when there is one: `lock=`, or `monitor=y`
    /// with HPROF output (every contended enter).
    pub fn lock_threshold_ns(&self) -> Option<u64> {
        match (self.lock_ns, self.monitor, self.format) {
            (Some(threshold), ..) => Some(threshold),
            (None, true, OutputFormat::Ascii) => Some(0),
            _ => None,
        }
    }

    pub fn heap_profile(&self) -> Option<HeapMode> {
        match (self.heap, self.cpu, self.monitor, self.format) {
            (Some(mode), ..) => Some(mode),
            // HPROF's default profile, unless parameter tracing, wall-clock samples, a lock
            // profile or a delay were asked for (alone: a delay alone leaves the profiling to
            // another profiler).
            (None, None, false, OutputFormat::Ascii | OutputFormat::Binary)
                if self.mpt.is_none()
                    && self.wall_ms.is_none()
                    && self.lock_ns.is_none()
                    && self.delay.is_none() =>
            {
                Some(HeapMode::All)
            }
            _ => None,
        }
    }

    /// The class filter block: `filter=` inline, or read from `@FILE`; none means all classes.
    pub fn filter_block(&self) -> Result<crate::trace::filter::FilterBlock, OptionError> {
        use crate::trace::filter::FilterBlock;
        match self.filter.as_deref() {
            None => Ok(FilterBlock::default()),
            Some(value) => match value.strip_prefix('@') {
                Some(path) => {
                    let file = crate::secret::read_option_file(
                        std::path::Path::new(path),
                        crate::secret::SPEC_FILE_MAX_BYTES,
                        "a filter file",
                    )
                    .map_err(|error| bad("filter", error.to_string()))?;
                    FilterBlock::parse_file(&file.text)
                        .map_err(|problem| bad("filter", format!("{path}: {problem}")))
                }
                None => FilterBlock::parse_inline(value).map_err(|problem| bad("filter", problem)),
            },
        }
    }

    /// The method parameter tracing specifications of `mpt=@FILE`, or none; a fault is named
    /// with the file, line and column.
    pub fn mpt_specs(&self) -> Result<Vec<crate::mpt::MptSpec>, OptionError> {
        // In continuous mode the application's context labels come from tracing its calls of
        // the Context API (java/api/dev/openprof/Context.java).
        let mut specs = if self.continuous_ms.is_some() {
            crate::mpt::parse_specs(CONTEXT_SPECS)
                .map_err(|error| bad("continuous", error.to_string()))?
        } else {
            Vec::new()
        };
        let Some(path) = self
            .mpt
            .as_deref()
            .and_then(|value| value.strip_prefix('@'))
        else {
            return Ok(specs);
        };
        let file = crate::secret::read_option_file(
            std::path::Path::new(path),
            crate::secret::SPEC_FILE_MAX_BYTES,
            "a file of parameter tracing specifications",
        )
        .map_err(|error| bad("mpt", error.to_string()))?;
        specs.extend(
            crate::mpt::parse_specs(&file.text)
                .map_err(|error| bad("mpt", format!("{path}: {error}")))?,
        );
        Ok(specs)
    }

    /// The collector's token: `token=` itself, or the first line of its `@FILE` (so that the
    /// secret need not show in the process list), read by [`crate::secret::read_token_file`];
    /// a file others may read is used, with a warning on standard error. Empty when none was
    /// given.
    pub fn token_value(&self) -> Result<String, OptionError> {
        match self.token.as_deref() {
            None => Ok(String::new()),
            Some(value) => match value.strip_prefix('@') {
                Some(path) => {
                    let read = crate::secret::read_token_file(std::path::Path::new(path))
                        .map_err(|error| bad("token", error.to_string()))?;
                    if let Some(warning) = read.readable_by_others {
                        eprintln!("openprof WARNING: {warning}");
                    }
                    Ok(read.token)
                }
                None => Ok(value.to_string()),
            },
        }
    }

    /// The value of option `name` as the text form spells it (`depth` → `"4"`), or `None` when
    /// that form leaves it out (an option not given that has no default). An option given
    /// several times (`label=`) has its values joined by commas, in order.
    pub fn setting(&self, name: &str) -> Option<String> {
        let values: Vec<String> = self
            .to_string()
            .split(',')
            .filter_map(|part| {
                let (part_name, value) = part.split_once('=')?;
                (part_name == name).then(|| value.to_string())
            })
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    /// The output file: `file=` as given, else HPROF's default for the format.
    pub fn output_file(&self) -> &str {
        match (&self.file, self.format) {
            (Some(file), _) => file,
            (None, OutputFormat::Ascii) => "java.hprof.txt",
            (None, OutputFormat::Binary) => "java.hprof",
            (None, OutputFormat::Xml) => "java.trace.xml",
        }
    }

    /// The file to write when `force=n` and the output file exists: HPROF's
    /// `<prefix>.<pid><suffix>`, e.g. `java.hprof.txt` becomes `java.hprof.<pid>.txt`.
    pub fn unique_output_file(&self, pid: u32) -> String {
        let file = self.output_file();
        let suffix = match self.format {
            OutputFormat::Binary => "",
            OutputFormat::Ascii => ".txt",
            OutputFormat::Xml => ".xml",
        };
        match file.rfind('.') {
            Some(dot) if !suffix.is_empty() && file[dot..].eq_ignore_ascii_case(suffix) => {
                format!("{}.{pid}{}", &file[..dot], &file[dot..])
            }
            _ => format!("{file}.{pid}{suffix}"),
        }
    }
}

impl fmt::Display for Options {
    /// Writes the options back in the agent's syntax, every option spelled out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes_no = |b: bool| if b { "y" } else { "n" };
        let mut parts: Vec<String> = Vec::new();
        if let Some(heap) = self.heap {
            let heap = match heap {
                HeapMode::Dump => "dump",
                HeapMode::Sites => "sites",
                HeapMode::All => "all",
            };
            parts.push(format!("heap={heap}"));
        }
        if let Some(cpu) = self.cpu {
            let cpu = match cpu {
                CpuMode::Samples => "samples",
                CpuMode::Times => "times",
                CpuMode::Old => "old",
            };
            parts.push(format!("cpu={cpu}"));
        }
        parts.push(format!("monitor={}", yes_no(self.monitor)));
        let format = match self.format {
            OutputFormat::Ascii => "a",
            OutputFormat::Binary => "b",
            OutputFormat::Xml => "x",
        };
        parts.push(format!("format={format}"));
        if let Some(file) = &self.file {
            parts.push(format!("file={file}"));
        }
        if let Some(net) = &self.net {
            parts.push(format!("net={}:{}", net.host, net.port));
        }
        // token= is left out on purpose: this text is echoed into traces and logs.
        if let Some(ca) = &self.tls_ca {
            parts.push(format!("tlsca={ca}"));
        }
        if self.net.is_some() {
            parts.push(format!("netbuffer={}", self.net_buffer));
            if let Some(window) = self.continuous_ms {
                parts.push(format!("continuous={window}ms"));
            }
            if !self.commands.is_empty() {
                let words: Vec<&str> = self.commands.iter().map(|c| c.option_word()).collect();
                parts.push(format!("commands={}", words.join("+")));
            }
        }
        if let Some(mpt) = &self.mpt {
            parts.push(format!("mpt={mpt}"));
        }
        parts.push(format!("depth={}", self.depth));
        parts.push(format!("interval={}", self.interval_ms));
        parts.push(format!("cutoff={}", self.cutoff));
        parts.push(format!("lineno={}", yes_no(self.lineno)));
        parts.push(format!("thread={}", yes_no(self.thread)));
        parts.push(format!("doe={}", yes_no(self.doe)));
        parts.push(format!("msa={}", yes_no(self.msa)));
        parts.push(format!("force={}", yes_no(self.force)));
        parts.push(format!("verbose={}", yes_no(self.verbose)));
        let sampler = match self.sampler {
            Sampler::AsyncGetCallTrace => "asgct",
            Sampler::GetAllStackTraces => "jvmti",
        };
        parts.push(format!("sampler={sampler}"));
        parts.push(format!("alloc_interval={}", self.alloc_interval));
        let cputimer = match self.cputimer {
            CpuTimer::Perf => "perf",
            CpuTimer::Posix => "posix",
        };
        parts.push(format!("cputimer={cputimer}"));
        let cstack = match self.cstack {
            CStack::FramePointers => "fp",
            CStack::Dwarf => "dwarf",
            CStack::No => "no",
        };
        parts.push(format!("cstack={cstack}"));
        parts.push(format!("walker={}", self.walker));
        parts.push(format!("vmthreads={}", yes_no(self.vmthreads)));
        if let Some(wall) = self.wall_ms {
            parts.push(format!("wall={wall}"));
        }
        if let Some(lock) = self.lock_ns {
            parts.push(format!("lock={lock}ns"));
        }
        if self.lock_owners {
            parts.push("lockowner=y".to_string());
        }
        if self.coverage {
            parts.push("coverage=y".to_string());
        }
        if self.call_sites {
            parts.push("callsites=y".to_string());
        }
        if let Some(threads) = &self.threads {
            parts.push(format!("threads={}", threads.0.join("|")));
        }
        if let Some(delay) = &self.delay {
            parts.push(format!("delay={delay}"));
        }
        if let Some(filter) = &self.filter {
            parts.push(format!("filter={filter}"));
        }
        for (name, value) in &self.labels {
            parts.push(format!("label={name}:{value}"));
        }
        if let Some(action) = self.action {
            parts.push(format!("action={}", action.word()));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_are_not_utf8_are_named() {
        assert_eq!(
            options_text(b"cpu=samples,file=a.txt"),
            Ok("cpu=samples,file=a.txt")
        );
        let error = options_text(b"cpu=samples,file=a\xff.txt,depth=3").unwrap_err();
        assert_eq!(error.option, "file");
        assert_eq!(
            error.to_string(),
            "option file: is not UTF-8; give its value as UTF-8 text"
        );
        let error = options_text(b"cpu=samples,\xfe\xff").unwrap_err();
        assert!(
            error.to_string().ends_with("options are UTF-8 text"),
            "{error}"
        );
        // Characters of more than one byte are fine.
        assert_eq!(options_text("file=é.txt".as_bytes()), Ok("file=é.txt"));
    }

    fn error_of(text: &str) -> OptionError {
        Options::parse(text).expect_err(text)
    }

    #[test]
    fn defaults_are_hprofs() {
        let options = Options::parse("").unwrap();
        assert_eq!(options.depth, 4);
        assert_eq!(options.interval_ms, 10);
        assert_eq!(options.cutoff, 0.0001);
        assert!(options.lineno && !options.thread && options.doe && options.force);
        assert_eq!(options.heap_profile(), Some(HeapMode::All));
        assert_eq!(options.output_file(), "java.hprof.txt");
        let binary = Options::parse("format=b,heap=dump").unwrap();
        assert_eq!(binary.output_file(), "java.hprof");
    }

    #[test]
    fn choosing_cpu_turns_off_the_default_heap_profile() {
        let options = Options::parse("cpu=samples").unwrap();
        assert_eq!(options.heap_profile(), None);
        assert_eq!(Options::parse("cpu=y,").unwrap(), options);
        assert_eq!(options.refuse_unbuilt(), Ok(()));
    }

    #[test]
    fn parses_every_option() {
        let options = Options::parse(
            "cpu=samples,interval=20,depth=3,cutoff=0.5,lineno=n,thread=y,doe=n,force=n,verbose=n,file=x.txt,sampler=jvmti,cputimer=posix,cstack=no",
        )
        .unwrap();
        assert_eq!(options.interval_ms, 20);
        assert_eq!(options.depth, 3);
        assert_eq!(options.cutoff, 0.5);
        assert!(!options.lineno && options.thread && !options.doe && !options.force);
        assert!(!options.verbose);
        assert_eq!(options.output_file(), "x.txt");
        assert_eq!(options.sampler, Sampler::GetAllStackTraces);
        assert_eq!(options.cputimer, CpuTimer::Posix);
        assert_eq!(options.cstack, CStack::No);
        let checked = Options::parse("cpu=samples,walker=check").unwrap();
        assert_eq!(checked.walker, Walker::Check);
        assert!(checked.to_string().contains("walker=check"));
        assert_eq!(Options::parse("cpu=samples").unwrap().walker, Walker::Vm);
        assert_eq!(
            Options::parse("cpu=samples,walker=asgct").unwrap().walker,
            Walker::AsyncGetCallTrace
        );
        let dwarf = Options::parse("cpu=samples,cstack=dwarf").unwrap();
        assert_eq!(dwarf.cstack, CStack::Dwarf);
        assert!(dwarf.to_string().contains("cstack=dwarf"));
        assert_eq!(Options::parse(&dwarf.to_string()).unwrap(), dwarf);
        let threads = Options::parse("cpu=samples,threads=worker-*|main").unwrap();
        let names = threads.threads.clone().unwrap();
        for (name, matched) in [
            ("worker-1", true),
            ("worker-", true),
            ("main", true),
            ("mainly", false),
            ("holder-1", false),
        ] {
            assert_eq!(names.matches(name), matched, "{name}");
        }
        assert_eq!(Options::parse(&threads.to_string()).unwrap(), threads);
        assert!(ThreadNames(vec!["a?c*".into()]).matches("abcdef"));
        assert!(!ThreadNames(vec!["a?c*".into()]).matches("ac"));
        let vmthreads = Options::parse("cpu=samples,vmthreads=y").unwrap();
        assert!(vmthreads.vmthreads);
        assert_eq!(Options::parse(&vmthreads.to_string()).unwrap(), vmthreads);
        assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        let defaults = Options::parse("cpu=samples").unwrap();
        assert_eq!(defaults.cstack, CStack::Dwarf);
        let fp = Options::parse("cpu=samples,cstack=fp").unwrap();
        assert_eq!(fp.cstack, CStack::FramePointers);
        assert_eq!(Options::parse(&fp.to_string()).unwrap(), fp);
        assert!(!defaults.vmthreads);
        assert_eq!(Options::parse(&defaults.to_string()).unwrap(), defaults);
    }

    #[test]
    fn bad_options_name_the_option() {
        let cases = [
            ("bogus=1", "bogus", "is not an option"),
            (
                "cpu=fast",
                "cpu",
                "'fast' is not allowed; use samples, times or old",
            ),
            ("depth=abc", "depth", "'abc' is not a number"),
            ("depth=-1", "depth", "'-1' is not a number"),
            ("depth=99999", "depth", "out of range"),
            ("interval=0", "interval", "out of range"),
            ("cutoff=2", "cutoff", "out of range"),
            ("cutoff=x", "cutoff", "not a number"),
            ("lineno=yes", "lineno", "use y or n"),
            ("cputimer=hpet", "cputimer", "use perf or posix"),
            (
                "cstack=lbr",
                "cstack",
                "'lbr' is not allowed; use fp, dwarf or no",
            ),
            (
                "walker=jfr",
                "walker",
                "'jfr' is not allowed; use vm, asgct or check",
            ),
            ("net=host", "net", "has no port"),
            ("net=host:0", "net", "is not a port"),
            ("depth", "depth", "has no value"),
            ("cpu=samples,,depth=2", "(empty)", "empty option"),
            (",", "(empty)", "empty option"),
            ("depth=2,depth=3", "depth", "given twice"),
            ("gc_okay=y", "gc_okay", "obsolete"),
            (
                "format=b,monitor=y",
                "format",
                "format=b cannot be used with monitor=y",
            ),
            (
                "format=b,cpu=times",
                "format",
                "format=b cannot be used with cpu=old|times",
            ),
            (
                "cpu=old,format=b",
                "format",
                "format=b cannot be used with cpu=old|times",
            ),
            (
                "cpu=samples,vmthreads=y,sampler=jvmti",
                "vmthreads",
                "needs sampler=asgct",
            ),
            (
                "cpu=samples,sampler=jvmti,walker=asgct",
                "walker",
                "GetAllStackTraces walks in the VM",
            ),
            ("vmthreads=all", "vmthreads", "y or n"),
        ];
        for (text, option, problem) in cases {
            let error = error_of(text);
            assert_eq!(error.option, option, "{text}");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn continuous_mode_traces_the_context_api_and_takes_mpt_with_format_b() {
        let options = Options::parse("cpu=samples,net=h:1,continuous=10s,format=b").unwrap();
        let specs = options.mpt_specs().unwrap();
        assert_eq!(specs.len(), 4);
        assert!(specs
            .iter()
            .all(|spec| spec.to_string().contains("Context.")));
        assert!(Options::parse("cpu=samples,net=h:1,format=b")
            .unwrap()
            .mpt_specs()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn continuous_takes_a_window_of_100ms_or_more_for_a_collector() {
        let options = Options::parse("cpu=samples,net=h:1,continuous=10s").unwrap();
        assert_eq!(options.continuous_ms, Some(10_000));
        assert!(options.to_string().contains("continuous=10000ms"));
        let again = Options::parse(&options.to_string()).unwrap();
        assert_eq!(again.continuous_ms, Some(10_000));
        let problem = |text: &str| Options::parse(text).unwrap_err().problem;
        assert!(problem("net=h:1,continuous=50ms").contains("100ms or more"));
        assert!(problem("net=h:1,continuous=soon").contains("is not a duration"));
        assert!(problem("cpu=samples,continuous=1s").contains("give net= too"));
        assert!(problem("net=h:1,format=x,continuous=1s").contains("format=x cannot"));
    }

    #[test]
    fn labels_are_repeatable_and_checked() {
        let options =
            Options::parse("cpu=samples,label=team:pay,label=env:test,label=url:http://a:1/b+c@d")
                .unwrap();
        assert_eq!(
            options.labels,
            vec![
                ("team".to_string(), "pay".to_string()),
                ("env".to_string(), "test".to_string()),
                ("url".to_string(), "http://a:1/b+c@d".to_string()),
            ]
        );
        assert_eq!(options.refuse_unbuilt(), Ok(()));
        let text = options.to_string();
        assert!(
            text.contains("label=team:pay,label=env:test,label=url:http://a:1/b+c@d"),
            "{text}"
        );
        assert_eq!(Options::parse(&text).unwrap(), options);
        assert_eq!(
            options.setting("label").as_deref(),
            Some("team:pay,env:test,url:http://a:1/b+c@d")
        );
        assert_eq!(labels_in(&text), options.labels);
        assert!(Options::parse("cpu=samples").unwrap().labels.is_empty());
        // Names and values at their longest.
        let longest = format!("label={}:{}", "n".repeat(64), "v".repeat(256));
        assert_eq!(Options::parse(&longest).unwrap().labels.len(), 1);
        // 32 labels, 1024 characters of names and values at most.
        let many = |count: usize, value: &str| {
            (0..count)
                .map(|n| format!("label=n{n:02}:{value}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(Options::parse(&many(32, "v")).unwrap().labels.len(), 32);
        assert_eq!(
            Options::parse(&many(8, &"v".repeat(125)))
                .unwrap()
                .labels
                .len(),
            8
        );
        let error = error_of(&many(33, "v"));
        assert_eq!(error.problem, "more than 32 labels; give at most 32");
        let error = error_of(&many(8, &"v".repeat(126)));
        assert!(
            error.problem.contains("more than 1024 characters"),
            "{error}"
        );
        // The catalog's reading keeps the well-formed labels of any option string.
        assert_eq!(
            labels_in("net=h:1,label=a:1,label=bad,label=a:2,futureoption=y,label=b.c-d_e:x"),
            vec![
                ("a".to_string(), "1".to_string()),
                ("b.c-d_e".to_string(), "x".to_string())
            ]
        );
        for (text, problem) in [
            (
                "label=teampay",
                "'teampay' has no ':'; use label=NAME:VALUE",
            ),
            ("label=", "'' has no ':'"),
            ("label=:pay", "':pay' has an empty name"),
            ("label=team:", "'team:' has an empty value"),
            (
                "label=te am:pay",
                "' ' is not allowed in a label's name; a name is letters, digits, '_', '.' and '-'",
            ),
            ("label=a/b:c", "'/' is not allowed in a label's name"),
            ("label=é:c", "'é' is not allowed in a label's name"),
            (
                "label=team:p\"y",
                "'\"' is not allowed in a label's value; a value is letters, digits",
            ),
            ("label=team:a b", "' ' is not allowed in a label's value"),
            (
                &format!("label={}:v", "n".repeat(65)),
                "the name is longer than 64 characters",
            ),
            (
                &format!("label=n:{}", "v".repeat(257)),
                "the value is longer than 256 characters",
            ),
            (
                "label=team:pay,label=team:other",
                "label team is given twice; give each label once",
            ),
        ] {
            let error = error_of(text);
            assert_eq!(error.option, "label", "{text}");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
        // The one option that repeats does not let others repeat.
        assert_eq!(
            error_of("label=a:1,depth=2,label=b:2,depth=3").option,
            "depth"
        );
        // A session action takes no other option, labels included.
        assert_eq!(error_of("action=stop,label=a:1").option, "label");
    }

    #[test]
    fn unbuilt_features_are_refused() {
        for (text, option) in [
            ("cpu=times,format=x,heap=dump", "heap"),
            ("format=x,heap=all", "heap"),
            ("cpu=samples,filter=+java*", "filter"),
            ("cpu=old", "cpu"),
            ("cpu=samples,lock=1ms,format=b", "lock"),
            ("cpu=samples,lockowner=y", "lockowner"),
            ("format=x,monitor=y,lockowner=y", "lockowner"),
            ("cpu=samples,msa=y", "msa"),
        ] {
            let error = Options::parse(text)
                .unwrap()
                .refuse_unbuilt()
                .expect_err(text);
            assert_eq!(error.option, option, "{text}");
        }
    }

    #[test]
    fn mpt_specifications_are_checked_then_refused_until_built() {
        let dir = std::env::temp_dir().join(format!("openprof-mpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.mpt");
        std::fs::write(
            &good,
            "# slow keys\nHashMap.get(Object) 1 instance_method:toString()\n",
        )
        .unwrap();
        let bad_spec = dir.join("bad.mpt");
        std::fs::write(&bad_spec, "A.b(int) 1\nA.c(int) 1 length\n").unwrap();
        let options = Options::parse(&format!("cpu=samples,mpt=@{}", good.display())).unwrap();
        assert_eq!(options.mpt_specs().unwrap().len(), 1);
        assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        options.refuse_unbuilt().unwrap();
        let error = Options::parse(&format!("mpt=@{}", bad_spec.display()))
            .unwrap()
            .refuse_unbuilt()
            .unwrap_err();
        assert_eq!(error.option, "mpt");
        assert!(
            error.problem.ends_with(
                "bad.mpt: line 2, column 12: parameter 1 is a int: modifiers apply to references only"
            ),
            "{error}"
        );
        let error = Options::parse("mpt=@/nonexistent/specs")
            .unwrap()
            .refuse_unbuilt()
            .unwrap_err();
        assert!(
            error.problem.contains("can't read /nonexistent/specs"),
            "{error}"
        );
        assert!(error_of("mpt=specs").problem.contains("use mpt=@<file>"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn heap_profiles_and_binary_output_are_built() {
        for text in [
            "",
            "heap=sites",
            "heap=dump",
            "heap=all,format=b",
            "cpu=samples,format=b",
        ] {
            assert_eq!(
                Options::parse(text).unwrap().refuse_unbuilt(),
                Ok(()),
                "{text}"
            );
        }
    }

    #[test]
    fn lock_owners_go_with_a_lock_profile() {
        for text in [
            "lock=1ms,lockowner=y",
            "monitor=y,lockowner=y",
            "lock=0,lockowner=n",
        ] {
            let options = Options::parse(text).unwrap();
            assert_eq!(options.refuse_unbuilt(), Ok(()), "{text}");
            assert_eq!(options.lock_owners, text.ends_with("=y"), "{text}");
            assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        }
        assert!(error_of("lock=1ms,lockowner=yes")
            .problem
            .contains("y or n"));
    }

    #[test]
    fn alloc_interval_takes_bytes_with_units() {
        assert_eq!(Options::parse("").unwrap().alloc_interval, 512 * 1024);
        for (text, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("512k", 512 * 1024),
            ("2m", 2 << 20),
        ] {
            let options = Options::parse(&format!("heap=sites,alloc_interval={text}")).unwrap();
            assert_eq!(options.alloc_interval, bytes, "{text}");
            assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        }
        for (text, problem) in [
            ("x", "not a number"),
            ("-1", "not a number"),
            ("k", "not a number"),
            ("4096m", "out of range"),
            ("99999999999999999999", "not a number"),
        ] {
            let error = error_of(&format!("alloc_interval={text}"));
            assert_eq!(error.option, "alloc_interval");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn netbuffer_takes_bytes_with_units_and_needs_net() {
        let net = |text: &str| Options::parse(&format!("net=localhost:7911,netbuffer={text}"));
        assert_eq!(
            Options::parse("net=localhost:7911").unwrap().net_buffer,
            64 << 20
        );
        for (text, bytes) in [("64k", 64 << 10), ("1g", 1 << 30), ("100000", 100_000)] {
            let options = net(text).unwrap();
            assert_eq!(options.net_buffer, bytes, "{text}");
            assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        }
        for (text, problem) in [
            ("1k", "out of range"),
            ("5g", "out of range"),
            ("x", "not a number"),
        ] {
            let error = net(text).unwrap_err();
            assert_eq!(error.option, "netbuffer");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
        let error = error_of("cpu=samples,netbuffer=1m");
        assert!(error.problem.contains("netbuffer= is for net="), "{error}");
    }

    #[test]
    fn commands_name_the_classes_allowed_beyond_profiling() {
        use crate::wire::CommandClass::*;
        let net = |text: &str| Options::parse(&format!("net=localhost:7911,commands={text}"));
        assert!(Options::parse("net=localhost:7911")
            .unwrap()
            .commands
            .is_empty());
        assert_eq!(net("heap+mpt").unwrap().commands, vec![Heap, Mpt]);
        assert_eq!(net("all").unwrap().commands, vec![Heap, Exit, Mpt]);
        assert!(net("none").unwrap().commands.is_empty());
        let options = net("exit+heap").unwrap();
        assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        let error = net("heap+everything").unwrap_err();
        assert_eq!(error.option, "commands");
        assert!(error.problem.contains("'everything'"), "{error}");
        let error = error_of("cpu=samples,commands=heap");
        assert!(error.problem.contains("commands= is for net="), "{error}");
    }

    #[test]
    fn force_n_names_files_as_hprof_did() {
        let text = Options::parse("cpu=samples").unwrap();
        assert_eq!(text.unique_output_file(42), "java.hprof.42.txt");
        let log = Options::parse("cpu=samples,file=foo.log").unwrap();
        assert_eq!(log.unique_output_file(42), "foo.log.42.txt");
        let binary = Options::parse("heap=dump,format=b").unwrap();
        assert_eq!(binary.unique_output_file(42), "java.hprof.42");
    }

    #[test]
    fn format_x_is_the_trace() {
        let options = Options::parse("format=x").unwrap();
        assert_eq!(
            options.heap_profile(),
            None,
            "no implied heap=all for the trace"
        );
        assert_eq!(options.output_file(), "java.trace.xml");
        assert_eq!(options.refuse_unbuilt(), Ok(()));
        let traced =
            Options::parse("format=x,cpu=times,monitor=y,filter=+com.acme*;-java*").unwrap();
        assert_eq!(traced.refuse_unbuilt(), Ok(()));
        assert!(traced.filter_block().unwrap().includes("com.acme.Main"));
        assert!(!traced.filter_block().unwrap().includes("java.lang.String"));
        let error = Options::parse("format=x,cpu=samples").unwrap_err();
        assert!(error.problem.contains("no element for samples"), "{error}");
        let error = Options::parse("format=x,filter=java*").unwrap_err();
        assert_eq!(error.option, "filter");
        let missing = Options::parse("format=x,filter=@/nonexistent/filters").unwrap();
        assert!(missing
            .filter_block()
            .unwrap_err()
            .problem
            .contains("can't read /nonexistent/filters"));
        assert_eq!(Options::parse(&traced.to_string()).unwrap(), traced);
    }

    #[test]
    fn actions_act_on_a_loaded_agent() {
        let start = Options::parse("action=start,cpu=samples,wall=5,file=/tmp/s.txt").unwrap();
        assert_eq!(start.action, Some(Action::Start));
        assert_eq!(Options::parse(&start.to_string()).unwrap(), start);
        assert_eq!(start.setting("wall").as_deref(), Some("5"));
        assert_eq!(start.setting("depth").as_deref(), Some("4"));
        assert_eq!(start.setting("nonsense"), None);
        for action in [Action::Stop, Action::Dump, Action::Status] {
            let text = format!("action={}", action.word());
            assert_eq!(Options::parse(&text).unwrap().action, Some(action));
            let error = Options::parse(&format!("{text},depth=8")).unwrap_err();
            assert_eq!(error.option, "depth");
            assert!(error.problem.contains("takes no other option"), "{error}");
        }
        let error = Options::parse("action=pause").unwrap_err();
        assert!(
            error.problem.contains("start, stop, dump or status"),
            "{error}"
        );
        assert!(Options::help_text().contains("action=start|stop|dump|status"));
    }

    #[test]
    fn a_delay_names_a_method_a_duration_and_where() {
        let options = Options::parse("cpu=samples,delay=org.h2.Select.run:20us").unwrap();
        assert_eq!(
            options.delay,
            Some(Delay {
                class: "org.h2.Select".into(),
                method: "run".into(),
                ns: 20_000,
                blocks: false,
                every: 1,
            })
        );
        assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
        let spread = Options::parse("delay=a.Outer$Inner.<init>:500ns:blocks").unwrap();
        let delay = spread.delay.clone().unwrap();
        assert_eq!(
            (
                delay.class.as_str(),
                delay.method.as_str(),
                delay.ns,
                delay.blocks
            ),
            ("a.Outer$Inner", "<init>", 500, true)
        );
        assert_eq!(Options::parse(&spread.to_string()).unwrap(), spread);
        let sparse = Options::parse("delay=a.B.c:200us:every=50:blocks").unwrap();
        let delay = sparse.delay.clone().unwrap();
        assert_eq!((delay.ns, delay.blocks, delay.every), (200_000, true, 50));
        assert_eq!(Options::parse(&sparse.to_string()).unwrap(), sparse);
        for (text, complaint) in [
            ("delay=a.B.c", "has no duration"),
            ("delay=Main:1us", "names no method"),
            ("delay=a.B.c:1us:everywhere", "neither blocks nor every"),
            ("delay=a.B.c:1us:blocks:x", "neither blocks nor every"),
            ("delay=a.B.c:1us:blocks:blocks", "given twice"),
            ("delay=a.B.c:1us:every=0", "not a count"),
            ("delay=a.B.c:1us:every=2:every=3", "given twice"),
            ("delay=a..c:1us", "binary name"),
            ("delay=a/B.c:1us", "binary name"),
            ("delay=a.B.<clinit>:1us", "binary name"),
            ("delay=a.B.c:0", "out of range"),
            ("delay=a.B.c:11ms", "out of range"),
            ("delay=a.B.c:soon", "is not a duration"),
        ] {
            let error = Options::parse(text).unwrap_err();
            assert_eq!(error.option, "delay", "{text}");
            assert!(error.problem.contains(complaint), "{text}: {error}");
        }
    }
}
