//! The agent's HPROF text file (`format=a`): opened at start-up with HPROF's `force` rule,
//! written by the agent's thread and at dumps, never by application threads.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use openprof_format::hprof_text::{SamplerReport, TextWriter};
use openprof_format::options::Options;

use crate::profile::CpuDump;
use crate::threads::ThreadEvent;

pub struct TextOutput {
    writer: TextWriter<BufWriter<File>>,
    path: PathBuf,
}

/// The date as HPROF prints it (C's `ctime`, without its newline).
pub fn hprof_date() -> String {
    chrono::Local::now()
        .format("%a %b %e %H:%M:%S %Y")
        .to_string()
}

impl TextOutput {
    /// Creates the output file and writes its header. With `force=y` an existing file is
    /// replaced; with `force=n` HPROF's `<name>.<pid>.txt` is used instead.
    pub fn create(options: &Options) -> Result<TextOutput, String> {
        let mut path = PathBuf::from(options.output_file());
        if !options.force && path.exists() {
            path = PathBuf::from(options.unique_output_file(std::process::id()));
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|error| format!("can't write file={}: {error}", path.display()))?;
        let mut writer = TextWriter::new(BufWriter::new(file));
        writer
            .header(&hprof_date())
            .map_err(|error| format!("can't write file={}: {error}", path.display()))?;
        Ok(TextOutput { writer, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn thread_events(&mut self, events: &[ThreadEvent]) -> std::io::Result<()> {
        for event in events {
            match event {
                ThreadEvent::Start(start) => self.writer.thread_start(start)?,
                ThreadEvent::End(serial) => self.writer.thread_end(*serial)?,
            }
        }
        Ok(())
    }

    /// One dump: the new TRACEs, openprof's CPU SAMPLER record, the CPU SAMPLES table.
    pub fn cpu_dump(&mut self, dump: &CpuDump, sampler: &SamplerReport) -> std::io::Result<()> {
        for trace in &dump.new_traces {
            self.writer.trace(trace)?;
        }
        self.writer.sampler(sampler)?;
        self.writer.cpu_table(&dump.table)?;
        self.writer.flush()
    }

    /// A CPU TIME dump: the new TRACEs and the table (no sampler record: nothing was sampled).
    pub fn cpu_times(&mut self, dump: &CpuDump) -> std::io::Result<()> {
        for trace in &dump.new_traces {
            self.writer.trace(trace)?;
        }
        self.writer.cpu_table(&dump.table)?;
        self.writer.flush()
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush()
    }
}
