//! `openprof run`: a Java program started with the agent, then its profile reported.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};
use openprof_format::options::{Options, OutputFormat};
use openprof_jdk::Jdk;

use crate::agent_library::find_agent;
use crate::convert_command::{read_input, write_view, ViewArgs};
use crate::report::{read_profile, render, Shown};

/// The stack depth `run` and `attach` ask for when the options give none: deep enough for a
/// flame graph of real code (HPROF's own default, 4, stays the agent's for `-agentpath`).
pub const VIEW_DEPTH: u32 = 256;

/// The agent options with what a view of the profile needs added when they don't say: `depth=`
/// deep enough for a flame graph and, when a view will be written (`-f`), `thread=y`, so that
/// `--threads` has threads to split by. Returns the options and the options added.
pub fn with_view_options(options_text: &str, view_written: bool) -> (String, Vec<String>) {
    let given = |name: &str| {
        options_text
            .split(',')
            .any(|option| option.split('=').next() == Some(name))
    };
    let asks_help = options_text.split(',').any(|option| option == "help");
    if asks_help {
        return (options_text.to_string(), Vec::new());
    }
    let mut added = Vec::new();
    if !given("depth") {
        added.push(format!("depth={VIEW_DEPTH}"));
    }
    if view_written && !given("thread") {
        added.push("thread=y".to_string());
    }
    let mut options: Vec<&str> = options_text.split(',').filter(|o| !o.is_empty()).collect();
    options.extend(added.iter().map(String::as_str));
    (options.join(","), added)
}

/// Says which options were chosen for the user.
pub fn say_view_options(added: &[String]) {
    for option in added {
        let why = if option.starts_with("depth=") {
            "stacks deep enough for a flame graph; give depth=N to change"
        } else {
            "threads recorded, for --threads; give thread=n to leave them out"
        };
        eprintln!("openprof: {option} ({why})");
    }
}

/// Writes the profile the JVM left in `file` as the view asked for, and says where.
pub fn write_requested_view(
    file: &std::path::Path,
    output: &std::path::Path,
    view: &ViewArgs,
) -> Result<()> {
    let profile = read_input(file)?;
    write_view(&profile, output, view)?;
    eprintln!(
        "openprof: {} written from {}",
        output.display(),
        file.display()
    );
    Ok(())
}

/// Runs `java` with the agent loaded with `options_text`; prints the profile on exit, as `report`
/// does with `top` methods, and exits with the JVM's code.
pub fn run(
    options_text: &str,
    agent: Option<PathBuf>,
    top: usize,
    java: &[String],
    output: Option<PathBuf>,
    view: &ViewArgs,
) -> Result<ExitCode> {
    let (options_text, added) = with_view_options(options_text, output.is_some());
    let options_text = options_text.as_str();
    let options =
        Options::parse(options_text).map_err(|error| anyhow::anyhow!("bad -o: {error}"))?;
    let agent = find_agent(agent)?;
    say_view_options(&added);
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
        if let Some(output) = &output {
            write_requested_view(&file, output, view)?;
        }
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
    if let Some(output) = &output {
        write_requested_view(&file, output, view)?;
    }
    let profile = read_profile(&file)?;
    let shown = Shown {
        sites_by: None,
        top,
        traces: 1,
        frames: 2,
    };
    eprint!("{}", render(&file, &profile, &shown));
    Ok(code)
}
