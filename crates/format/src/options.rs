//! The agent's option string: HPROF's syntax (`name=value,...`), names and defaults (seed 002),
//! plus openprof's own extensions. The one parser used by the agent and the CLI alike.

use std::fmt;

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
    /// Trace elements (seeds 000/001) as an XML document.
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

/// Which per-thread CPU clock drives `sampler=asgct` (an openprof extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuTimer {
    /// perf_events `task-clock` counters (hrtimers): any interval is honoured. Falls back to
    /// `Posix` when the kernel refuses perf events.
    Perf,
    /// POSIX thread CPU timers: checked at scheduler ticks.
    Posix,
}

/// A `net=host:port` destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetAddress {
    pub host: String,
    pub port: u16,
}

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
    pub verbose: bool,
    pub sampler: Sampler,
    pub cputimer: CpuTimer,
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
    /// `mpt=@FILE`: method parameter tracing specifications (docs/mpt.md).
    pub mpt: Option<String>,
    /// `commands=`: which commands from the collector beyond steering the profile are carried
    /// out (heap dumps, exit, parameter tracing); none by default.
    pub commands: Vec<crate::wire::CommandClass>,
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
            verbose: true,
            sampler: Sampler::AsyncGetCallTrace,
            cputimer: CpuTimer::Perf,
            filter: None,
            alloc_interval: DEFAULT_ALLOC_INTERVAL,
            token: None,
            tls_ca: None,
            net_buffer: DEFAULT_NET_BUFFER,
            commands: Vec::new(),
            mpt: None,
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

/// The options we know, with the values they take, the way HPROF's help lists them.
const OPTION_TABLE: &[(&str, &str, &str, &str)] = &[
    ("heap", "dump|sites|all", "heap profiling", "all"),
    ("cpu", "samples|times|old", "CPU usage", "off"),
    ("monitor", "y|n", "monitor contention", "n"),
    ("format", "a|b|x", "text, binary or trace XML output", "a"),
    ("file", "<file>", "write data to file", "java.hprof[{.txt}]"),
    ("net", "<host>:<port>", "send data over a socket", "off"),
    (
        "token",
        "<secret>|@<file>",
        "collector's shared token (net=)",
        "none",
    ),
    ("tlsca", "<pem file>", "TLS to the collector (net=)", "off"),
    (
        "commands",
        "heap+exit+mpt|all",
        "collector commands allowed beyond profiling (net=)",
        "none",
    ),
    (
        "netbuffer",
        "<size>",
        "unacknowledged bytes kept (net=)",
        "64m",
    ),
    ("depth", "<size>", "stack trace depth", "4"),
    ("interval", "<ms>", "sample interval in ms", "10"),
    ("cutoff", "<value>", "output cutoff point", "0.0001"),
    ("lineno", "y|n", "line number in traces?", "y"),
    ("thread", "y|n", "thread in traces?", "n"),
    ("doe", "y|n", "dump on exit?", "y"),
    ("msa", "y|n", "Solaris micro state accounting", "n"),
    ("force", "y|n", "force output to <file>", "y"),
    ("verbose", "y|n", "print messages about dumps", "y"),
    (
        "sampler",
        "asgct|jvmti",
        "how cpu=samples walks stacks",
        "asgct",
    ),
    ("cputimer", "perf|posix", "clock of sampler=asgct", "perf"),
    ("mpt", "@<file>", "method parameter tracing specs", "off"),
    (
        "filter",
        "<+P;-P>|@<file>",
        "classes traced (format=x)",
        "all",
    ),
    (
        "alloc_interval",
        "<bytes>[k|m]",
        "heap=sites sampling interval",
        "512k",
    ),
];

fn known_names() -> String {
    let mut names: Vec<&str> = OPTION_TABLE.iter().map(|row| row.0).collect();
    names.insert(0, "help");
    names.join(", ")
}

fn parse_yes_no(name: &str, value: &str) -> Result<bool, OptionError> {
    match value {
        "y" => Ok(true),
        "n" => Ok(false),
        _ => Err(bad(name, format!("'{value}' is not allowed; use y or n"))),
    }
}

fn parse_whole(name: &str, value: &str, min: u32, max: u32) -> Result<u32, OptionError> {
    let allowed = format!("a whole number from {min} to {max}");
    let number: u64 = value
        .parse()
        .map_err(|_| bad(name, format!("'{value}' is not a number; use {allowed}")))?;
    if number < u64::from(min) || number > u64::from(max) {
        return Err(bad(name, format!("{value} is out of range; use {allowed}")));
    }
    Ok(number as u32)
}

/// A byte count with an optional binary suffix (`4096`, `512k`, `1m`, `1g`) from min to max.
fn parse_bytes(name: &str, value: &str, (min, max): (u64, u64)) -> Result<u64, OptionError> {
    let allowed =
        format!("a number of bytes from {min} to {max}, optionally with k, m or g (KiB, MiB, GiB)");
    let (digits, unit) = match value.char_indices().last() {
        Some((at, 'k' | 'K')) => (&value[..at], 1 << 10),
        Some((at, 'm' | 'M')) => (&value[..at], 1 << 20),
        Some((at, 'g' | 'G')) => (&value[..at], 1 << 30),
        _ => (value, 1),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| bad(name, format!("'{value}' is not a number; use {allowed}")))?;
    match number.checked_mul(unit) {
        Some(bytes) if (min..=max).contains(&bytes) => Ok(bytes),
        _ => Err(bad(name, format!("{value} is out of range; use {allowed}"))),
    }
}

fn parse_net(value: &str) -> Result<NetAddress, OptionError> {
    let usage = "use <host>:<port> with a port from 1 to 65535";
    let (host, port) = value
        .rsplit_once(':')
        .ok_or_else(|| bad("net", format!("'{value}' has no port; {usage}")))?;
    if host.is_empty() {
        return Err(bad("net", format!("'{value}' has no host; {usage}")));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| bad("net", format!("'{port}' is not a port; {usage}")))?;
    Ok(NetAddress {
        host: host.to_string(),
        port,
    })
}

impl Options {
    /// Parses an option string such as `cpu=samples,interval=20,depth=3`.
    ///
    /// Every problem is an error: an unknown name, a bad or out-of-range value, an option given
    /// twice (HPROF let the last one win; we refuse the ambiguity), or one of HPROF's
    /// incompatible pairs. What is not built yet is refused separately by
    /// [`Options::refuse_unbuilt`], so that `help` and the syntax checks work for every option.
    pub fn parse(text: &str) -> Result<Options, OptionError> {
        let mut options = Options::default();
        let mut seen: Vec<&str> = Vec::new();
        if text.is_empty() {
            return Ok(options);
        }
        // HPROF ignores one trailing comma.
        let text = text.strip_suffix(',').unwrap_or(text);
        for item in text.split(',') {
            if item == "help" {
                options.help = true;
                continue;
            }
            let (name, value) = item.split_once('=').ok_or_else(|| {
                if item.is_empty() {
                    bad(
                        "(empty)",
                        "an empty option between commas; use name=value,...",
                    )
                } else {
                    bad(item, "has no value; use name=value")
                }
            })?;
            if seen.contains(&name) {
                return Err(bad(name, "is given twice; give it once"));
            }
            seen.push(name);
            let one_of =
                |allowed: &str| bad(name, format!("'{value}' is not allowed; use {allowed}"));
            match name {
                "heap" => {
                    options.heap = Some(match value {
                        "dump" => HeapMode::Dump,
                        "sites" => HeapMode::Sites,
                        "all" => HeapMode::All,
                        _ => return Err(one_of("dump, sites or all")),
                    })
                }
                "cpu" => {
                    options.cpu = Some(match value {
                        // `y` is HPROF's undocumented alias for samples.
                        "samples" | "y" => CpuMode::Samples,
                        "times" => CpuMode::Times,
                        "old" => CpuMode::Old,
                        _ => return Err(one_of("samples, times or old")),
                    })
                }
                "format" => {
                    options.format = match value {
                        "a" => OutputFormat::Ascii,
                        "b" => OutputFormat::Binary,
                        "x" => OutputFormat::Xml,
                        _ => return Err(one_of("a (text), b (binary) or x (trace XML)")),
                    }
                }
                "sampler" => {
                    options.sampler = match value {
                        "asgct" => Sampler::AsyncGetCallTrace,
                        "jvmti" => Sampler::GetAllStackTraces,
                        _ => return Err(one_of("asgct or jvmti")),
                    }
                }
                "filter" => {
                    if let Some(inline) = value.strip_prefix('@').is_none().then_some(value) {
                        crate::trace::filter::FilterBlock::parse_inline(inline)
                            .map_err(|problem| bad(name, problem))?;
                    } else if value.len() == 1 {
                        return Err(bad(name, "'@' needs a file name: filter=@FILE"));
                    }
                    options.filter = Some(value.to_string());
                }
                "cputimer" => {
                    options.cputimer = match value {
                        "perf" => CpuTimer::Perf,
                        "posix" => CpuTimer::Posix,
                        _ => return Err(one_of("perf or posix")),
                    }
                }
                "file" => {
                    if value.is_empty() {
                        return Err(bad(name, "is empty; use file=<file>"));
                    }
                    options.file = Some(value.to_string());
                }
                "net" => options.net = Some(parse_net(value)?),
                "token" => {
                    if value.is_empty() || value == "@" {
                        return Err(bad(name, "is empty; use token=<secret> or token=@<file>"));
                    }
                    options.token = Some(value.to_string());
                }
                "tlsca" => {
                    if value.is_empty() {
                        return Err(bad(
                            name,
                            "is empty; use tlsca=<PEM file of the collector's CA>",
                        ));
                    }
                    options.tls_ca = Some(value.to_string());
                }
                "alloc_interval" => {
                    options.alloc_interval = parse_bytes(name, value, (0, MAX_ALLOC_INTERVAL))?
                }
                "netbuffer" => options.net_buffer = parse_bytes(name, value, NET_BUFFER_RANGE)?,
                "commands" => options.commands = parse_command_classes(name, value)?,
                "mpt" => {
                    if value.len() < 2 || !value.starts_with('@') {
                        return Err(bad(
                            name,
                            "use mpt=@<file> with one specification a line (docs/mpt.md)",
                        ));
                    }
                    options.mpt = Some(value.to_string());
                }
                "depth" => options.depth = parse_whole(name, value, 0, MAX_DEPTH)?,
                "interval" => options.interval_ms = parse_whole(name, value, 1, MAX_INTERVAL_MS)?,
                "cutoff" => {
                    let allowed = "a number from 0.0 to 1.0";
                    let cutoff: f64 = value.parse().map_err(|_| {
                        bad(name, format!("'{value}' is not a number; use {allowed}"))
                    })?;
                    if !(0.0..=1.0).contains(&cutoff) {
                        return Err(bad(name, format!("{value} is out of range; use {allowed}")));
                    }
                    options.cutoff = cutoff;
                }
                "monitor" => options.monitor = parse_yes_no(name, value)?,
                "lineno" => options.lineno = parse_yes_no(name, value)?,
                "thread" => options.thread = parse_yes_no(name, value)?,
                "doe" => options.doe = parse_yes_no(name, value)?,
                "msa" => options.msa = parse_yes_no(name, value)?,
                "force" => options.force = parse_yes_no(name, value)?,
                "verbose" => options.verbose = parse_yes_no(name, value)?,
                "gc_okay" => {
                    return Err(bad(
                        name,
                        "is obsolete (HPROF no longer supports it); leave it out",
                    ))
                }
                _ => {
                    return Err(bad(
                        name,
                        format!("is not an option; the options are {}", known_names()),
                    ))
                }
            }
        }
        options.check_compatible()?;
        Ok(options)
    }

    /// HPROF's documented incompatible pairs, and ours.
    fn check_compatible(&self) -> Result<(), OptionError> {
        if self.format == OutputFormat::Binary && self.monitor {
            return Err(bad("format", "format=b cannot be used with monitor=y"));
        }
        if self.format == OutputFormat::Binary
            && matches!(self.cpu, Some(CpuMode::Old | CpuMode::Times))
        {
            return Err(bad("format", "format=b cannot be used with cpu=old|times"));
        }
        if self.format == OutputFormat::Xml
            && matches!(self.cpu, Some(CpuMode::Samples | CpuMode::Old))
        {
            return Err(bad(
                "format",
                "format=x cannot be used with cpu=samples|old: the trace format has no element for samples; use cpu=times, or format=a",
            ));
        }
        if self.net.is_none() {
            if self.token.is_some() {
                return Err(bad(
                    "token",
                    "token= is for net=; there is no collector to give it to",
                ));
            }
            if self.tls_ca.is_some() {
                return Err(bad(
                    "tlsca",
                    "tlsca= is for net=; there is no collector to talk TLS to",
                ));
            }
            if !self.commands.is_empty() {
                return Err(bad(
                    "commands",
                    "commands= is for net=; there is no collector to send commands",
                ));
            }
            if self.net_buffer != DEFAULT_NET_BUFFER {
                return Err(bad(
                    "netbuffer",
                    "netbuffer= is for net=; there is no collector to buffer for",
                ));
            }
        }
        if self.file.is_some() && self.net.is_some() {
            return Err(bad(
                "net",
                "net= and file= cannot be used together; choose one",
            ));
        }
        Ok(())
    }

    /// The heap profile in force: HPROF turns on heap=all when no profile at all was chosen
    /// (with format=x the trace itself is the profile, so no heap profile is implied).
    pub fn heap_profile(&self) -> Option<HeapMode> {
        match (self.heap, self.cpu, self.monitor, self.format) {
            (Some(mode), ..) => Some(mode),
            // HPROF's default profile, unless parameter tracing was asked for (alone).
            (None, None, false, OutputFormat::Ascii | OutputFormat::Binary)
                if self.mpt.is_none() =>
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
                    let text = std::fs::read_to_string(path)
                        .map_err(|error| bad("filter", format!("can't read {path}: {error}")))?;
                    FilterBlock::parse_file(&text)
                        .map_err(|problem| bad("filter", format!("{path}: {problem}")))
                }
                None => FilterBlock::parse_inline(value).map_err(|problem| bad("filter", problem)),
            },
        }
    }

    /// The method parameter tracing specifications of `mpt=@FILE`, or none; a fault is named
    /// with the file, line and column.
    pub fn mpt_specs(&self) -> Result<Vec<crate::mpt::MptSpec>, OptionError> {
        let Some(path) = self
            .mpt
            .as_deref()
            .and_then(|value| value.strip_prefix('@'))
        else {
            return Ok(Vec::new());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|error| bad("mpt", format!("can't read {path}: {error}")))?;
        crate::mpt::parse_specs(&text).map_err(|error| bad("mpt", format!("{path}: {error}")))
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

    /// Refuses, with a clear message, every option whose feature is not built yet, so that no
    /// option is ever silently ignored.
    pub fn refuse_unbuilt(&self) -> Result<(), OptionError> {
        let not_yet = |name: &str, what: &str| {
            Err(bad(
                name,
                format!("{what} is not implemented yet; use cpu=samples"),
            ))
        };
        if self.heap.is_some() && self.format == OutputFormat::Xml {
            return Err(bad(
                "heap",
                "heap= with format=x (objAlloc/objFree elements) is not implemented yet; use format=a or format=b",
            ));
        }
        let text = self.format != OutputFormat::Xml;
        let in_text = |name: &str, what: &str| {
            Err(bad(
                name,
                format!("{what} in HPROF text output is not implemented yet; use format=x"),
            ))
        };
        if self.cpu == Some(CpuMode::Old) {
            return not_yet("cpu", "cpu=old");
        }
        if self.mpt.is_some() {
            // Faults in the specifications are named before the JVM starts running.
            self.mpt_specs()?;
            if self.format == OutputFormat::Binary {
                return Err(bad(
                    "mpt",
                    "HPROF's binary format has no record for parameter values; use format=a (an MPT section) or format=x",
                ));
            }
        }
        if self.monitor && text {
            return in_text("monitor", "monitor=y");
        }
        if self.filter.is_some() && text && self.cpu != Some(CpuMode::Times) {
            return Err(bad(
                "filter",
                "filter= limits format=x and cpu=times; with cpu=samples it has no effect, so it is refused",
            ));
        }
        if self.msa {
            return Err(bad(
                "msa",
                "msa=y is Solaris micro state accounting, which Linux does not have; use msa=n",
            ));
        }
        Ok(())
    }

    /// The usage table `help` prints, in HPROF's layout.
    pub fn help_text() -> String {
        let mut text = String::new();
        text.push_str("\n     openprof: Heap and CPU Profiling Agent (HPROF options, JVMTI)\n\n");
        text.push_str(
            "openprof usage: java -agentpath:libopenprof_agent.so=[help]|[<option>=<value>, ...]\n\n",
        );
        text.push_str("Option Name and Value  Description                    Default\n");
        text.push_str("---------------------  -----------                    -------\n");
        for (name, values, description, default) in OPTION_TABLE {
            let name_value = format!("{name}={values}");
            text.push_str(&format!("{name_value:<22} {description:<30} {default}\n"));
        }
        text.push_str(concat!(
            "\nObsolete Options\n",
            "----------------\n",
            "gc_okay=y|n\n",
            "\nExamples\n",
            "--------\n",
            "  - Get sample cpu information every 20 millisec, with a stack depth of 3:\n",
            "      java -agentpath:libopenprof_agent.so=cpu=samples,interval=20,depth=3 classname\n",
            "  - Get sample cpu information with the thread of each trace, into cpu.txt:\n",
            "      java -agentpath:libopenprof_agent.so=cpu=samples,thread=y,file=cpu.txt classname\n",
            "\nNotes\n",
            "-----\n",
            "  - The option format=b cannot be used with monitor=y.\n",
            "  - The option format=b cannot be used with cpu=old|times.\n",
            "  - sampler= is an openprof extension: asgct samples with AsyncGetCallTrace on\n",
            "    per-thread CPU timers (no safepoint bias); jvmti samples runnable threads with\n",
            "    GetAllStackTraces, as HPROF did (biased towards safepoints).\n",
            "  - cputimer= is an openprof extension: perf times samples with perf_events\n",
            "    task-clock counters (any interval; falls back to posix when the kernel refuses\n",
            "    them); posix uses POSIX thread CPU timers, checked at each scheduler tick.\n",
            "  - format=x writes the open trace format (docs/trace.dtd) to java.trace.xml:\n",
            "    threads, classes, GC, exceptions; with cpu=times method entries and exits and\n",
            "    method counts; with monitor=y monitor contention and waits; filter= limits\n",
            "    the classes traced (+include;-exclude patterns, or @file).\n",
            "  - heap=sites samples allocations with JVMTI (SampledObjectAlloc): on average one\n",
            "    sample per alloc_interval bytes (an openprof extension; 0 samples every\n",
            "    allocation); figures are estimates scaled from the samples.\n",
            "  - heap=dump writes every live object at exit and on SIGQUIT (kill -QUIT <pid>);\n",
            "    format=b writes HPROF binary (JAVA PROFILE 1.0.2) to java.hprof.\n",
            "  - net=<host>:<port> streams to `openprof serve` (docs/protocol.md); the collector\n",
            "    needs token=<secret> or token=@<file>; tlsca=<pem> turns on TLS. Commands\n",
            "    that read the heap, end the JVM or trace parameter values are refused unless\n",
            "    commands= names them (heap, exit, mpt, joined by +; or all).\n",
            "  - Not implemented yet, and refused: cpu=old; monitor=y in text output\n",
            "    (use format=x); heap= with format=x. msa=y is refused on Linux.\n",
        ));
        text
    }
}

/// `commands=`: words joined by `+` (`heap+mpt`), or `all`, or `none`.
fn parse_command_classes(
    name: &str,
    value: &str,
) -> Result<Vec<crate::wire::CommandClass>, OptionError> {
    use crate::wire::CommandClass;
    let optional = [CommandClass::Heap, CommandClass::Exit, CommandClass::Mpt];
    match value {
        "all" => return Ok(optional.to_vec()),
        "none" => return Ok(Vec::new()),
        _ => {}
    }
    let mut classes = Vec::new();
    for word in value.split('+') {
        let class = optional
            .iter()
            .find(|class| class.option_word() == word)
            .ok_or_else(|| {
                bad(
                    name,
                    format!("'{word}' is not a command class; use heap, exit, mpt (joined by +), all or none"),
                )
            })?;
        if !classes.contains(class) {
            classes.push(*class);
        }
    }
    Ok(classes)
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
        if let Some(filter) = &self.filter {
            parts.push(format!("filter={filter}"));
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
            "cpu=samples,interval=20,depth=3,cutoff=0.5,lineno=n,thread=y,doe=n,force=n,verbose=n,file=x.txt,sampler=jvmti,cputimer=posix",
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
        assert_eq!(Options::parse(&options.to_string()).unwrap(), options);
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
        ];
        for (text, option, problem) in cases {
            let error = error_of(text);
            assert_eq!(error.option, option, "{text}");
            assert!(error.problem.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn unbuilt_features_are_refused() {
        for (text, option) in [
            ("cpu=times,format=x,heap=sites", "heap"),
            ("cpu=samples,filter=+java*", "filter"),
            ("cpu=old", "cpu"),
            ("cpu=samples,monitor=y", "monitor"),
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
    fn help_lists_every_option() {
        let help = Options::help_text();
        for (name, ..) in OPTION_TABLE {
            assert!(help.contains(&format!("\n{name}=")), "{name}");
        }
        assert!(help.contains("Option Name and Value  Description                    Default"));
    }
}
