//! Where the agent library is found, for the commands that load it (`run`, `attach`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

const AGENT_FILE: &str = "libopenprof_agent.so";

/// The agent library: --agent, $OPENPROF_AGENT, next to this binary, then target/{release,debug}.
pub fn find_agent(explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = explicit.or_else(|| std::env::var_os("OPENPROF_AGENT").map(PathBuf::from)) {
        if !path.is_file() {
            bail!("the agent library {} does not exist", path.display());
        }
        return Ok(path);
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(AGENT_FILE));
    }
    candidates.push(PathBuf::from("target/release").join(AGENT_FILE));
    candidates.push(PathBuf::from("target/debug").join(AGENT_FILE));
    candidates
        .iter()
        .find(|path| path.is_file())
        .map(|path| path.canonicalize().unwrap_or_else(|_| path.clone()))
        .with_context(|| {
            format!(
                "can't find {AGENT_FILE} (looked in {}); build it with `cargo build --release` or pass --agent",
                candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            )
        })
}
