//! The option string read and checked: unknown names, bad values, options given twice,
//! incompatible pairs and features not built yet are each refused by name.

use super::help::known_names;
use super::{
    bad, Action, CStack, CpuMode, CpuTimer, HeapMode, NetAddress, OptionError, Options,
    OutputFormat, Sampler, ThreadNames, Walker, DEFAULT_NET_BUFFER, MAX_ALLOC_INTERVAL, MAX_DEPTH,
    MAX_INTERVAL_MS, MAX_LABELS, MAX_LABELS_TEXT, MAX_LABEL_NAME, MAX_LABEL_VALUE,
    NET_BUFFER_RANGE,
};

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

/// A duration with a unit (`ns`, `us`, `ms`, `s`), nanoseconds without one (as async-profiler's
/// `--lock`), from 0 to an hour.
/// The shortest `continuous=` window: shorter ones would cost the collector more than they show.
const MIN_WINDOW_NS: u64 = 100_000_000;

fn parse_duration_ns(name: &str, value: &str) -> Result<u64, OptionError> {
    let allowed = "a duration such as 0, 500ns, 10us, 1ms or 2s (a bare number is nanoseconds), at most 1 hour";
    let (digits, unit) = [
        ("ns", 1),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ]
    .into_iter()
    .find_map(|(suffix, unit)| value.strip_suffix(suffix).map(|digits| (digits, unit)))
    .unwrap_or((value, 1));
    let number: u64 = digits
        .parse()
        .map_err(|_| bad(name, format!("'{value}' is not {allowed}")))?;
    match number.checked_mul(unit) {
        Some(ns) if ns <= 3_600_000_000_000 => Ok(ns),
        _ => Err(bad(name, format!("{value} is out of range; use {allowed}"))),
    }
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

/// Whether a character may be in a label's name: letters, digits, `_`, `.` and `-`.
pub fn is_label_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// Whether a character may be in a label's value: those of a name, and `:`, `/`, `@` and `+`.
pub fn is_label_value_char(c: char) -> bool {
    is_label_name_char(c) || matches!(c, ':' | '/' | '@' | '+')
}

/// `label=NAME:VALUE`: the name up to the first colon, the value after it, each checked.
fn parse_label(text: &str) -> Result<(String, String), OptionError> {
    let usage = "use label=NAME:VALUE";
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| bad("label", format!("'{text}' has no ':'; {usage}")))?;
    let check = |part: &str, what: &str, max: usize, allowed: fn(char) -> bool, set: &str| {
        if part.is_empty() {
            return Err(bad(
                "label",
                format!("'{text}' has an empty {what}; {usage}"),
            ));
        }
        if let Some(c) = part.chars().find(|c| !allowed(*c)) {
            return Err(bad(
                "label",
                format!("'{text}': {c:?} is not allowed in a label's {what}; {set}"),
            ));
        }
        if part.len() > max {
            return Err(bad(
                "label",
                format!("'{text}': the {what} is longer than {max} characters"),
            ));
        }
        Ok(part.to_string())
    };
    Ok((
        check(
            name,
            "name",
            MAX_LABEL_NAME,
            is_label_name_char,
            "a name is letters, digits, '_', '.' and '-'",
        )?,
        check(
            value,
            "value",
            MAX_LABEL_VALUE,
            is_label_value_char,
            "a value is letters, digits, '_', '.', '-', ':', '/', '@' and '+'",
        )?,
    ))
}

impl Options {
    /// Adds a label checked as `label=NAME:VALUE` is (`name:value` as one text), refused when
    /// its name is given already or the labels would be too many or too long.
    pub fn add_checked_label(&mut self, text: &str) -> Result<(), OptionError> {
        let (label, value) = parse_label(text)?;
        self.add_label(label, value)
    }

    fn add_label(&mut self, label: String, value: String) -> Result<(), OptionError> {
        if self.labels.iter().any(|(known, _)| *known == label) {
            return Err(bad(
                "label",
                format!("label {label} is given twice; give each label once"),
            ));
        }
        self.labels.push((label, value));
        // They travel in the agent's hello to a collector, which is kept short.
        if self.labels.len() > MAX_LABELS {
            return Err(bad(
                "label",
                format!("more than {MAX_LABELS} labels; give at most {MAX_LABELS}"),
            ));
        }
        let text: usize = self
            .labels
            .iter()
            .map(|(label, value)| label.len() + value.len())
            .sum();
        if text > MAX_LABELS_TEXT {
            return Err(bad(
                "label",
                format!(
                    "the labels' names and values come to more than {MAX_LABELS_TEXT} characters; shorten them"
                ),
            ));
        }
        Ok(())
    }
}

/// The labels of an option string (`label=NAME:VALUE` items), in order, read as
/// [`Options::parse`] reads them; the other options are not looked at, so an option string of
/// another version of the agent still gives its labels. A malformed label, or a second one of
/// a name, is left out.
pub fn labels_in(text: &str) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = Vec::new();
    for value in text
        .split(',')
        .filter_map(|item| item.strip_prefix("label="))
    {
        if let Ok((name, value)) = parse_label(value) {
            if !labels.iter().any(|(known, _)| *known == name) {
                labels.push((name, value));
            }
        }
    }
    labels
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
            // label= is the one option given as many times as there are labels.
            if name != "label" && seen.contains(&name) {
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
                "cstack" => {
                    options.cstack = match value {
                        "fp" => CStack::FramePointers,
                        "dwarf" => CStack::Dwarf,
                        "no" => CStack::No,
                        _ => return Err(one_of("fp, dwarf or no")),
                    }
                }
                "walker" => {
                    options.walker = match value {
                        "asgct" => Walker::AsyncGetCallTrace,
                        "vm" => Walker::Vm,
                        "check" => Walker::Check,
                        _ => return Err(one_of("vm, asgct or check")),
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
                "continuous" => {
                    let ns = parse_duration_ns(name, value)?;
                    if ns < MIN_WINDOW_NS {
                        return Err(bad(
                            name,
                            format!("{value} is shorter than a window may be; use 100ms or more (e.g. continuous=10s)"),
                        ));
                    }
                    options.continuous_ms = Some(ns / 1_000_000);
                }
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
                "force" => {
                    options.force = parse_yes_no(name, value)?;
                    options.force_given = super::Given(true);
                }
                "verbose" => options.verbose = parse_yes_no(name, value)?,
                "vmthreads" => options.vmthreads = parse_yes_no(name, value)?,
                "lock" => options.lock_ns = Some(parse_duration_ns(name, value)?),
                "lockowner" => options.lock_owners = parse_yes_no(name, value)?,
                "coverage" => options.coverage = parse_yes_no(name, value)?,
                "callsites" => options.call_sites = parse_yes_no(name, value)?,
                "delay" => options.delay = Some(parse_delay(name, value)?),
                "threads" => {
                    let patterns: Vec<String> = value.split('|').map(str::to_string).collect();
                    if value.is_empty() || patterns.iter().any(String::is_empty) {
                        return Err(bad(
                            name,
                            format!("'{value}' has an empty pattern; use thread name patterns with * and ?, apart by |"),
                        ));
                    }
                    options.threads = Some(ThreadNames(patterns));
                }
                "wall" => {
                    let millis = value.strip_suffix("ms").unwrap_or(value);
                    options.wall_ms = Some(parse_whole(name, millis, 1, MAX_INTERVAL_MS)?)
                }
                "label" => {
                    let (label, label_value) = parse_label(value)?;
                    options.add_label(label, label_value)?;
                }
                "action" => {
                    options.action = Some(match value {
                        "start" => Action::Start,
                        "stop" => Action::Stop,
                        "dump" => Action::Dump,
                        "status" => Action::Status,
                        _ => return Err(one_of("start, stop, dump or status")),
                    })
                }
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
        if let (Some(action @ (Action::Stop | Action::Dump | Action::Status)), true) =
            (options.action, seen.len() > 1)
        {
            let other = seen.iter().find(|name| **name != "action").unwrap_or(&"");
            return Err(bad(
                other,
                format!(
                    "action={} takes no other option; the session keeps the options it was started with",
                    action.word()
                ),
            ));
        }
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
        if self.wall_ms.is_some() && self.format == OutputFormat::Xml {
            return Err(bad(
                "wall",
                "format=x cannot be used with wall=: the trace format has no element for samples; use format=a",
            ));
        }
        if self.wall_ms.is_some() && self.format == OutputFormat::Binary {
            return Err(bad(
                "wall",
                "format=b cannot be used with wall=: HPROF's binary format has no record for wall-clock samples; use format=a",
            ));
        }
        if self.wall_ms.is_some() && self.sampler == Sampler::GetAllStackTraces {
            return Err(bad(
                "wall",
                "wall= needs sampler=asgct: it interrupts each thread where it is",
            ));
        }
        if self.threads.is_some() && self.cpu != Some(CpuMode::Samples) && self.wall_ms.is_none() {
            return Err(bad(
                "threads",
                "threads= chooses the threads cpu=samples and wall= sample; give one of them",
            ));
        }
        if self.walker != Walker::Vm && self.sampler == Sampler::GetAllStackTraces {
            return Err(bad(
                "walker",
                "walker= chooses how sampler=asgct's signal handler walks; GetAllStackTraces walks in the VM",
            ));
        }
        if self.vmthreads && self.sampler == Sampler::GetAllStackTraces {
            return Err(bad(
                "vmthreads",
                "vmthreads=y needs sampler=asgct: GetAllStackTraces sees Java threads only",
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
            if self.continuous_ms.is_some() {
                return Err(bad(
                    "continuous",
                    "continuous= ships profile windows to a collector; give net= too",
                ));
            }
            if self.net_buffer != DEFAULT_NET_BUFFER {
                return Err(bad(
                    "netbuffer",
                    "netbuffer= is for net=; there is no collector to buffer for",
                ));
            }
        }
        if self.continuous_ms.is_some() && self.format == OutputFormat::Xml {
            return Err(bad(
                "continuous",
                "format=x cannot be used with continuous=: a trace is one stream, not windows; use format=a or format=b",
            ));
        }
        if self.file.is_some() && self.net.is_some() {
            return Err(bad(
                "net",
                "net= and file= cannot be used together; choose one",
            ));
        }
        Ok(())
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
        if matches!(self.heap, Some(HeapMode::Dump | HeapMode::All))
            && self.format == OutputFormat::Xml
        {
            return Err(bad(
                "heap",
                "heap=dump with format=x is not implemented: a trace has no element for a heap \
                 dump; use heap=sites (objAlloc/objFree elements), or format=a or format=b",
            ));
        }
        let text = self.format != OutputFormat::Xml;
        if self.cpu == Some(CpuMode::Old) {
            return not_yet("cpu", "cpu=old");
        }
        if self.mpt.is_some() {
            // Faults in the specifications are named before the JVM starts running.
            self.mpt_specs()?;
            if self.format == OutputFormat::Binary && self.continuous_ms.is_none() {
                return Err(bad(
                    "mpt",
                    "HPROF's binary format has no record for parameter values; use format=a (an MPT section) or format=x, or continuous= (the values label the windows' samples)",
                ));
            }
        }
        if self.lock_ns.is_some() && self.format != OutputFormat::Ascii {
            return Err(bad(
                "lock",
                "lock= writes HPROF's MONITOR TIME tables, in format=a only; with format=x use monitor=y",
            ));
        }
        if self.coverage && self.format != OutputFormat::Xml {
            return Err(bad(
                "coverage",
                "coverage=y writes lineTable and line elements, in format=x only",
            ));
        }
        if self.call_sites && (self.format != OutputFormat::Xml || self.cpu != Some(CpuMode::Times))
        {
            return Err(bad(
                "callsites",
                "callsites=y writes methodCall and methodReturn elements beside the traced methods' \
                 entries: give format=x,cpu=times",
            ));
        }
        if self.lock_owners && self.lock_threshold_ns().is_none() {
            return Err(bad(
                "lockowner",
                "lockowner=y adds the lock owners' stacks to a lock profile; give lock=<duration> too",
            ));
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
}

/// The longest `delay=`: a delay that long in a method called often would stop the program.
const MAX_DELAY_NS: u64 = 10_000_000;

/// `delay=CLASS.METHOD:DURATION[:blocks]`.
fn parse_delay(name: &str, value: &str) -> Result<super::Delay, OptionError> {
    let usage = "use delay=<class>.<method>:<duration>[:blocks][:every=<n>], e.g. delay=com.acme.Cart.total:20us";
    let mut parts = value.split(':');
    let target = parts.next().unwrap_or_default();
    let Some(duration) = parts.next() else {
        return Err(bad(name, format!("'{value}' has no duration; {usage}")));
    };
    let (mut blocks, mut every) = (false, None);
    for part in parts {
        match part.split_once('=') {
            None if part == "blocks" && !blocks => blocks = true,
            Some(("every", count)) if every.is_none() => {
                every = Some(count.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    bad(name, format!("every={count} is not a count of calls from 1 on; {usage}"))
                })?);
            }
            _ if part == "blocks" || part.starts_with("every=") => {
                return Err(bad(name, format!("'{part}' is given twice; {usage}")));
            }
            _ => {
                return Err(bad(
                    name,
                    format!("'{part}' is neither blocks nor every=<n>; leave it out (at entry, every call) or say one of them; {usage}"),
                ))
            }
        }
    }
    let Some((class, method)) = target.rsplit_once('.') else {
        return Err(bad(
            name,
            format!("'{target}' names no method of a class; {usage}"),
        ));
    };
    let identifier = |text: &str| {
        !text.is_empty()
            && !text
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '/' | ';' | '[' | '(' | ')'))
    };
    let method_ok = identifier(method) && (!method.contains(['<', '>']) || method == "<init>");
    if !method_ok || !class.split('.').all(identifier) {
        return Err(bad(
            name,
            format!("'{target}' is not a class's binary name and a method name; {usage}"),
        ));
    }
    let ns = parse_duration_ns(name, duration)?;
    if ns == 0 || ns > MAX_DELAY_NS {
        return Err(bad(
            name,
            format!("{duration} is out of range; use a delay from 1ns to 10ms"),
        ));
    }
    Ok(super::Delay {
        class: class.to_string(),
        method: method.to_string(),
        ns,
        blocks,
        every: every.unwrap_or(1),
    })
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
