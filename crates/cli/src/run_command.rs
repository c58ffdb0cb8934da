//! `openprof run`: a Java program started with the agent, then its profile reported.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};
use openprof_format::options::{Options, OutputFormat};
use openprof_jdk::Jdk;

use crate::agent_library::find_agent;
use crate::report::{read_profile, render, Shown};

/// Runs `java` with the agent loaded with `options_text`; prints the profile on exit, as `report`
/// does with `top` methods, and exits with the JVM's code.
pub fn run(
    options_text: &str,
    agent: Option<PathBuf>,
    top: usize,
    java: &[String],
) -> Result<ExitCode> {
    let options =
        Options::parse(options_text).map_err(|error| anyhow::anyhow!("bad -o: {error}"))?;
    let agent = find_agent(agent)?;
    let (program, arguments) = java
        .split_first()
        .context("give the Java command after --")?;
    let program = if program == "java" {
        Jdk::find()?.java()?
    } else {
        PathBuf::from(program)
    };
    let agent_argument = if options_text.is_empty() {
        format!("-agentpath:{}", agent.display())
    } else {
        format!("-agentpath:{}={options_text}", agent.display())
    };
    let mut child = Command::new(&program)
        .arg(agent_argument)
        .args(arguments)
        .spawn()
        .with_context(|| format!("can't run {}", program.display()))?;
    let pid = child.id();
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", program.display()))?;
    let code = ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8);
    if options.format == OutputFormat::Xml && !options.help {
        let file = PathBuf::from(options.output_file());
        if let Ok(input) = fs::File::open(&file) {
            let reader = std::io::BufReader::new(input);
            let elements = openprof_format::trace::reader::read_all(reader)
                .take_while(Result::is_ok)
                .count();
            eprintln!(
                "openprof: trace written to {} ({elements} elements); `openprof validate {}` checks it",
                file.display(),
                file.display()
            );
        }
        return Ok(code);
    }
    // What is left is HPROF text or binary, which read_profile tells apart.
    if options.help || !options.doe {
        return Ok(code);
    }
    let mut file = PathBuf::from(options.output_file());
    let unique = PathBuf::from(options.unique_output_file(pid));
    if !options.force && unique.is_file() {
        file = unique;
    }
    if !file.is_file() {
        if status.success() {
            eprintln!("openprof: the JVM wrote no profile to {}", file.display());
        }
        return Ok(code);
    }
    let profile = read_profile(&file)?;
    let shown = Shown {
        top,
        traces: 1,
        frames: 2,
    };
    eprint!("{}", render(&file, &profile, &shown));
    Ok(code)
}
