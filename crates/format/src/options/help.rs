//! The options' table (name, values, meaning, default) and the usage text `help` prints, in
//! HPROF's layout.

use super::Options;

/// One line of the options' table.
struct OptionRow {
    name: &'static str,
    /// The values it takes, as help shows them: `y|n`, `<file>`.
    values: &'static str,
    meaning: &'static str,
    default: &'static str,
}

/// The options we know, with the values they take, the way HPROF's help lists them.
const OPTION_TABLE: &[OptionRow] = &[
    OptionRow {
        name: "heap",
        values: "dump|sites|all",
        meaning: "heap profiling",
        default: "all",
    },
    OptionRow {
        name: "cpu",
        values: "samples|times|old",
        meaning: "CPU usage",
        default: "off",
    },
    OptionRow {
        name: "monitor",
        values: "y|n",
        meaning: "monitor contention",
        default: "n",
    },
    OptionRow {
        name: "format",
        values: "a|b|x",
        meaning: "text, binary or trace XML output",
        default: "a",
    },
    OptionRow {
        name: "file",
        values: "<file>",
        meaning: "write data to file",
        default: "java.hprof[{.txt}]",
    },
    OptionRow {
        name: "net",
        values: "<host>:<port>",
        meaning: "send data over a socket",
        default: "off",
    },
    OptionRow {
        name: "token",
        values: "<secret>|@<file>",
        meaning: "collector's shared token (net=)",
        default: "none",
    },
    OptionRow {
        name: "tlsca",
        values: "<pem file>",
        meaning: "TLS to the collector (net=)",
        default: "off",
    },
    OptionRow {
        name: "commands",
        values: "heap+exit+mpt|all",
        meaning: "collector commands allowed beyond profiling (net=)",
        default: "none",
    },
    OptionRow {
        name: "netbuffer",
        values: "<size>",
        meaning: "unacknowledged bytes kept (net=)",
        default: "64m",
    },
    OptionRow {
        name: "continuous",
        values: "<duration>",
        meaning: "a profile window every duration (net=)",
        default: "off",
    },
    OptionRow {
        name: "depth",
        values: "<size>",
        meaning: "stack trace depth",
        default: "4",
    },
    OptionRow {
        name: "interval",
        values: "<ms>",
        meaning: "sample interval in ms",
        default: "10",
    },
    OptionRow {
        name: "cutoff",
        values: "<value>",
        meaning: "output cutoff point",
        default: "0.0001",
    },
    OptionRow {
        name: "lineno",
        values: "y|n",
        meaning: "line number in traces?",
        default: "y",
    },
    OptionRow {
        name: "thread",
        values: "y|n",
        meaning: "thread in traces?",
        default: "n",
    },
    OptionRow {
        name: "doe",
        values: "y|n",
        meaning: "dump on exit?",
        default: "y",
    },
    OptionRow {
        name: "msa",
        values: "y|n",
        meaning: "Solaris micro state accounting",
        default: "n",
    },
    OptionRow {
        name: "force",
        values: "y|n",
        meaning: "force output to <file>",
        default: "y",
    },
    OptionRow {
        name: "verbose",
        values: "y|n",
        meaning: "print messages about dumps",
        default: "y",
    },
    OptionRow {
        name: "sampler",
        values: "asgct|jvmti",
        meaning: "how cpu=samples walks stacks",
        default: "asgct",
    },
    OptionRow {
        name: "cputimer",
        values: "perf|posix",
        meaning: "clock of sampler=asgct",
        default: "perf",
    },
    OptionRow {
        name: "cstack",
        values: "fp|dwarf|no",
        meaning: "native frames in cpu=samples",
        default: "dwarf",
    },
    OptionRow {
        name: "walker",
        values: "vm|asgct|check",
        meaning: "Java stack walker of sampler=asgct",
        default: "vm",
    },
    OptionRow {
        name: "vmthreads",
        values: "y|n",
        meaning: "sample JIT and GC threads too",
        default: "n",
    },
    OptionRow {
        name: "wall",
        values: "<ms>",
        meaning: "wall-clock samples of every thread",
        default: "off",
    },
    OptionRow {
        name: "lock",
        values: "<duration>",
        meaning: "contended monitors and parks this long+",
        default: "off",
    },
    OptionRow {
        name: "lockowner",
        values: "y|n",
        meaning: "lock=: stacks of the lock owners too",
        default: "n",
    },
    OptionRow {
        name: "coverage",
        values: "y|n",
        meaning: "format=x: line coverage of filtered classes",
        default: "n",
    },
    OptionRow {
        name: "callsites",
        values: "y|n",
        meaning: "format=x,cpu=times: calls into untraced classes",
        default: "n",
    },
    OptionRow {
        name: "delay",
        values: "<C.m>:<time>[:blocks][:every=n]",
        meaning: "busy delay in method m of C",
        default: "off",
    },
    OptionRow {
        name: "threads",
        values: "<glob>[|<glob>]",
        meaning: "only threads of these names sampled",
        default: "all",
    },
    OptionRow {
        name: "mpt",
        values: "@<file>",
        meaning: "method parameter tracing specs",
        default: "off",
    },
    OptionRow {
        name: "filter",
        values: "<+P;-P>|@<file>",
        meaning: "classes traced (format=x)",
        default: "all",
    },
    OptionRow {
        name: "alloc_interval",
        values: "<bytes>[k|m]",
        meaning: "heap=sites sampling interval",
        default: "512k",
    },
    OptionRow {
        name: "label",
        values: "<name>:<value>",
        meaning: "agent label (repeatable)",
        default: "none",
    },
    OptionRow {
        name: "action",
        values: "start|stop|dump|status",
        meaning: "session of an agent already loaded",
        default: "",
    },
];

/// The options' names, for the error that names an unknown one.
pub(super) fn known_names() -> String {
    let mut names: Vec<&str> = OPTION_TABLE.iter().map(|row| row.name).collect();
    names.insert(0, "help");
    names.join(", ")
}

impl Options {
    /// The usage table `help` prints, in HPROF's layout.
    pub fn help_text() -> String {
        let mut text = String::new();
        text.push_str("\n     openprof: Heap and CPU Profiling Agent (HPROF options, JVMTI)\n\n");
        text.push_str(
            "openprof usage: java -agentpath:libopenprof_agent.so=[help]|[<option>=<value>, ...]\n\n",
        );
        text.push_str("Option Name and Value  Description                    Default\n");
        text.push_str("---------------------  -----------                    -------\n");
        for row in OPTION_TABLE {
            let name_value = format!("{}={}", row.name, row.values);
            text.push_str(&format!(
                "{name_value:<22} {:<30} {}\n",
                row.meaning, row.default
            ));
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
            "  - delay= is an openprof extension for checking a profile against a known\n",
            "    truth: every method m of class C (a binary name) spins for <time> of CPU at\n",
            "    each entry, or at each basic block with :blocks, in one of n with :every=n;\n",
            "    at exit the agent prints how many delays ran and the time they took\n",
            "    (docs/options.md).\n",
            "  - cputimer= is an openprof extension: perf times samples with perf_events\n",
            "    task-clock counters (any interval; falls back to posix when the kernel refuses\n",
            "    them); posix uses POSIX thread CPU timers, checked at each scheduler tick.\n",
            "  - cstack= is an openprof extension: dwarf records the native (C, C++) frames\n",
            "    above the Java ones in cpu=samples, walked by the libraries' call frame\n",
            "    information (.eh_frame) and by frame pointers where it has no rule (x86-64\n",
            "    Linux only); fp walks by frame pointers only (code built without them shows\n",
            "    its innermost frame only); no records Java frames only. Samples whose Java\n",
            "    stack cannot be walked show a [reason] frame.\n",
            "  - walker= is an openprof extension: asgct walks Java stacks with HotSpot's\n",
            "    AsyncGetCallTrace; vm with openprof's own walker over HotSpot's frames\n",
            "    (x86-64), AsyncGetCallTrace where it cannot walk; check records\n",
            "    AsyncGetCallTrace's walks and counts where the two disagree.\n",
            "  - vmthreads= is an openprof extension: y samples the JVM's own threads too (JIT\n",
            "    compilers, GC workers, the VM thread) with cpu=samples, each sample their\n",
            "    native frames under a [thread name] root frame.\n",
            "  - wall= is an openprof extension: every Java thread, running or not, is\n",
            "    interrupted every <ms> of wall time (at most 16 threads per interval, round\n",
            "    robin) and its stack and state (running, native, blocked, waiting, parked,\n",
            "    sleeping) recorded in WALL SAMPLES tables; it works with or without cpu=.\n",
            "  - lock= is an openprof extension: contended monitor enters that blocked and\n",
            "    parks (java.util.concurrent locks, queues) that lasted at least <duration>\n",
            "    (500ns, 10us, 1ms; bare numbers are ns), by stack and lock class, in\n",
            "    MONITOR TIME and PARK TIME tables; monitor=y (format=a) is lock=0.\n",
            "    lockowner=y adds LOCK OWNERS tables: the waits by the stack of the thread\n",
            "    holding the lock when they began (costs a stack walk of the owner per wait).\n",
            "  - action= is an openprof extension, for an agent already loaded in a running\n",
            "    JVM and attached again (openprof profile): start a session of cpu=samples,\n",
            "    wall=, lock= and heap=sites into file=, stop it (its last dump is written),\n",
            "    dump it so far, or tell its status.\n",
            "  - label= is an openprof extension, given once per label: names the agent in a\n",
            "    collector's fleet (label=team:pay,label=env:test). Names are letters, digits,\n",
            "    _ . -; values those and : / @ +.\n",
            "  - threads= is an openprof extension: only threads whose names match one of the\n",
            "    patterns (* and ?, apart by |) are sampled by cpu=samples and wall=.\n",
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
            "    (use format=x); heap=dump with format=x (heap=sites gives objAlloc and\n",
            "    objFree elements). msa=y is refused on Linux.\n",
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_every_option() {
        let help = Options::help_text();
        for row in OPTION_TABLE {
            let name = row.name;
            assert!(help.contains(&format!("\n{name}=")), "{name}");
        }
        assert!(help.contains("Option Name and Value  Description                    Default"));
    }
}
