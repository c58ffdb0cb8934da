//! The HPROF text writer: the file header, and the thread, trace, sampler and CPU records (the
//! heap and MPT records are written by their own modules).

use std::io::{self, Write};

use super::{
    CpuTable, CpuTableKind, LockTable, LockTableKind, SamplerReport, ThreadStart, Trace,
    WallSampler, FORGOTTEN_TRACES, NO_LOCK_CLASS,
};

/// Writes HPROF text records to any byte sink.
pub struct TextWriter<W: Write> {
    /// Written by the heap and MPT records' modules too.
    pub(super) out: W,
}

impl<W: Write> TextWriter<W> {
    pub fn new(out: W) -> Self {
        TextWriter { out }
    }

    /// The underlying writer, e.g. to copy a heap dump body written aside.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// What it writes to.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The file header: format name and date, the description of the records, the separator.
    pub fn header(&mut self, date: &str) -> io::Result<()> {
        writeln!(self.out, "JAVA PROFILE 1.0.1, created {date}\n")?;
        self.out.write_all(PRELUDE.as_bytes())?;
        write!(self.out, "\n--------\n\n")
    }

    pub fn thread_start(&mut self, thread: &ThreadStart) -> io::Result<()> {
        writeln!(
            self.out,
            "THREAD START (obj={:x}, id = {}, name=\"{}\", group=\"{}\")",
            thread.object_id, thread.serial, thread.name, thread.group
        )
    }

    pub fn thread_end(&mut self, serial: u32) -> io::Result<()> {
        writeln!(self.out, "THREAD END (id = {serial})")
    }

    /// A record of our own: the writer forgot the TRACEs printed so far, and prints again
    /// (under its serial) any that a later record refers to. A reader that keeps up with the
    /// stream forgets them too; HPROF readers skip it as a section they do not know.
    pub fn forgotten_traces(&mut self, date: &str) -> io::Result<()> {
        writeln!(self.out, "{FORGOTTEN_TRACES} BEGIN {date}")?;
        writeln!(self.out, "{FORGOTTEN_TRACES} END")
    }

    pub fn trace(&mut self, trace: &Trace) -> io::Result<()> {
        write!(self.out, "TRACE {}:", trace.serial)?;
        if let Some(thread) = trace.thread {
            write!(self.out, " (thread={thread})")?;
        }
        writeln!(self.out)?;
        if trace.frames.is_empty() {
            writeln!(self.out, "\t<empty>")?;
        }
        for frame in &trace.frames {
            writeln!(self.out, "\t{frame}")?;
        }
        Ok(())
    }

    pub fn sampler(&mut self, report: &SamplerReport) -> io::Result<()> {
        writeln!(self.out, "CPU SAMPLER BEGIN")?;
        writeln!(self.out, "sampler {}", report.sampler)?;
        if let Some(note) = &report.note {
            writeln!(self.out, "note {note}")?;
        }
        if let Some(clock) = &report.clock {
            writeln!(self.out, "clock {clock}")?;
        }
        writeln!(self.out, "interval {} ms", report.interval_ms)?;
        if let Some(depth) = report.depth {
            writeln!(self.out, "depth {depth}")?;
        }
        writeln!(self.out, "failed {}", report.failed_total())?;
        for (reason, count) in &report.failed {
            writeln!(self.out, "failed.{reason} {count}")?;
        }
        if !report.recovered.is_empty() {
            writeln!(
                self.out,
                "recovered {}",
                report.recovered.values().sum::<u64>()
            )?;
            for (how, count) in &report.recovered {
                writeln!(self.out, "recovered.{how} {count}")?;
            }
        }
        if let Some(walker) = &report.walker {
            writeln!(self.out, "walker {walker}")?;
            for (what, count) in &report.walker_counts {
                writeln!(self.out, "walker.{what} {count}")?;
            }
            for example in &report.walker_examples {
                writeln!(self.out, "walker.example {}", example.to_line())?;
            }
        }
        writeln!(self.out, "dropped {}", report.dropped)?;
        if report.in_agent > 0 {
            writeln!(self.out, "in_agent {}", report.in_agent)?;
        }
        for (part, micros) in &report.cost_us {
            writeln!(self.out, "cost.{part}_us {micros}")?;
        }
        writeln!(self.out, "CPU SAMPLER END")
    }

    pub fn wall_sampler(&mut self, sampler: &WallSampler) -> io::Result<()> {
        writeln!(self.out, "WALL SAMPLER BEGIN")?;
        writeln!(self.out, "interval {} ms", sampler.interval_ms)?;
        writeln!(self.out, "threads_per_tick {}", sampler.threads_per_tick)?;
        writeln!(self.out, "intervals {}", sampler.intervals)?;
        writeln!(self.out, "sampled {}", sampler.sampled)?;
        writeln!(self.out, "skipped {}", sampler.skipped)?;
        writeln!(self.out, "lost {}", sampler.lost)?;
        writeln!(self.out, "WALL SAMPLER END")
    }

    /// A lock table: HPROF's MONITOR TIME, or openprof's PARK TIME and LOCK OWNERS in the same
    /// layout (LOCK OWNERS rows say how the waiters waited before the class).
    pub fn lock_table(&mut self, table: &LockTable) -> io::Result<()> {
        let name = table.kind.record_name();
        writeln!(
            self.out,
            "{name} BEGIN (total = {} ms) {}",
            table.total_ms, table.date
        )?;
        let owners = table.kind == LockTableKind::Owners;
        if !table.rows.is_empty() {
            let state = if owners { " state" } else { "" };
            writeln!(
                self.out,
                "rank   self  accum   count trace{state} {}",
                table.kind.class_column()
            )?;
        }
        for row in &table.rows {
            write!(
                self.out,
                "{:4} {:5.2}% {:5.2}% {:7} {:5}",
                row.rank, row.self_percent, row.accum_percent, row.count, row.trace
            )?;
            if owners {
                write!(self.out, " {}", row.state.as_deref().unwrap_or("unknown"))?;
            }
            let class = row.method.as_deref().unwrap_or(NO_LOCK_CLASS);
            // HPROF's rows say what kind of monitor it is; every monitor here is a Java object's.
            match table.kind {
                LockTableKind::Monitor => writeln!(self.out, " {class} (Java)")?,
                LockTableKind::Park | LockTableKind::Owners => writeln!(self.out, " {class}")?,
            }
        }
        writeln!(self.out, "{name} END")
    }

    pub fn cpu_table(&mut self, table: &CpuTable) -> io::Result<()> {
        let name = table.kind.record_name();
        writeln!(
            self.out,
            "{name} BEGIN (total = {}) {}",
            table.total, table.date
        )?;
        self.cpu_rows(table)?;
        writeln!(self.out, "{name} END")
    }

    /// A CPU table's column line and rows (also each value's rows in MPT SAMPLES).
    pub(super) fn cpu_rows(&mut self, table: &CpuTable) -> io::Result<()> {
        let wall = table.kind == CpuTableKind::Wall;
        if !table.rows.is_empty() {
            let state = if wall { " state" } else { "" };
            writeln!(self.out, "rank   self  accum   count trace{state} method")?;
        }
        for row in &table.rows {
            write!(
                self.out,
                "{:4} {:5.2}% {:5.2}% {:7} {:5}",
                row.rank, row.self_percent, row.accum_percent, row.count, row.trace
            )?;
            if wall {
                write!(self.out, " {}", row.state.as_deref().unwrap_or("unknown"))?;
            }
            match &row.method {
                Some(method) => writeln!(self.out, " {method}")?,
                None => writeln!(self.out, " <empty trace>")?,
            }
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// What the header says the records are, in HPROF's manner and our words.
const PRELUDE: &str = "\
Header for openprof's HPROF-compatible ASCII output (format=a)

This file contains the following types of records:

THREAD START
THREAD END      mark the lifetime of Java threads

TRACE           represents a Java stack trace.  Each trace consists
                of a series of stack frames.  Other records refer to
                TRACEs to identify where the program was when it was
                sampled.

CPU SAMPLER     (openprof) says how the CPU samples were taken and
                counts the samples whose stack could not be walked.

CPU SAMPLES     is a statistical profile of program execution.  Each
                thread is sampled after every interval of its own CPU
                time, and the sample is assigned to the TRACE it was
                running.  Entries in this record are TRACEs ranked by
                the percentage of samples they received; top-ranked
                TRACEs are the hot spots of the program.

SITES           lists the allocation sites, a class allocated at a TRACE,
                by live bytes: the objects still alive, and the objects
                allocated there since the program started.

HEAP DUMP       is a snapshot of the live objects of the Java heap: the
                garbage collection roots (ROOT), classes (CLS), instances
                (OBJ) and arrays (ARR), each followed by the references
                it holds; object ids are in hex.

MONITOR TIME    is a profile of monitor contention (lock=, monitor=y): the
                time threads spent blocked entering a monitor another
                thread held, by TRACE and the monitor's class.

PARK TIME       (openprof) the time threads spent parked (lock=): in
                java.util.concurrent's locks, conditions and queues, by
                TRACE and the class of the object they parked on.

LOCK OWNERS     (openprof) the same waits' time by the TRACE of the
                thread that held the lock when the wait began (lock=
                with lockowner=y), and whether its waiters were blocked
                or parked.

MPT             (openprof) method parameter tracing (mpt=): per traced
                method and specification, the calls of each value the
                specification recorded, with their wall clock and CPU
                times in ms, ranked by mean wall time, slowest first.

CPU SAMPLER and CPU SAMPLES records are written at program exit (doe=y)
and whenever the JVM is sent SIGQUIT (kill -QUIT <pid>).
";
