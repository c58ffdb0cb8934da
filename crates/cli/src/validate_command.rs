//! `openprof validate`: a trace checked, its problems listed.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// Prints up to `max` problems of the trace in `file`; exit code 1 if it has any.
pub fn validate(file: &Path, max: usize) -> Result<ExitCode> {
    let input = fs::File::open(file).with_context(|| format!("can't read {}", file.display()))?;
    let mut elements = 0usize;
    let counted = openprof_format::trace::reader::read_all(std::io::BufReader::new(input))
        .inspect(|element| elements += usize::from(element.is_ok()));
    let problems = openprof_format::trace::validate::validate(counted);
    for problem in problems.iter().take(max) {
        println!("{}: {problem}", file.display());
    }
    if problems.len() > max {
        println!("... and {} more problems", problems.len() - max);
    }
    if problems.is_empty() {
        println!("{}: valid, {elements} elements", file.display());
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{}: {} problems in {elements} elements",
            file.display(),
            problems.len()
        );
        Ok(ExitCode::from(1))
    }
}
