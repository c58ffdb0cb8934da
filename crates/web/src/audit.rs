//! The log of what was done to live agents from the UI: each action, who asked (the name given
//! at login and the address), when, and how it ended. Appended to `ui/actions.log` in the
//! store's directory (one JSON object a line, private to its owner) and kept in memory for
//! the UI's own list.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// RFC 3339, the collector's clock.
    pub time: String,
    pub who: String,
    /// What was asked: the command and its argument, as `openprof control` names them.
    pub action: String,
    /// The agent it went to.
    pub agent: String,
    pub ok: bool,
    /// The agent's reply, or why it was refused.
    pub outcome: String,
}

/// Actions at most kept in memory; the file keeps them all.
const KEPT: usize = 1000;

pub struct AuditLog {
    file: Mutex<File>,
    recent: Mutex<Vec<Action>>,
}

impl AuditLog {
    pub fn open(store_dir: &Path) -> anyhow::Result<AuditLog> {
        let dir = store_dir.join("ui");
        crate::api::private_dir(&dir)?;
        let path = dir.join("actions.log");
        let recent: Vec<Action> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(&path)
                .map_err(|error| anyhow::anyhow!("can't open {}: {error}", path.display()))?
        };
        let skip = recent.len().saturating_sub(KEPT);
        Ok(AuditLog {
            file: Mutex::new(file),
            recent: Mutex::new(recent.into_iter().skip(skip).collect()),
        })
    }

    pub fn record(&self, action: Action) {
        if let Ok(line) = serde_json::to_string(&action) {
            let mut file = crate::api::lock(&self.file);
            if let Err(error) = writeln!(file, "{line}").and_then(|()| file.flush()) {
                tracing::warn!("web UI: can't write the action log: {error}");
            }
        }
        tracing::info!(
            "web UI: {} asked {} of agent {}: {}",
            action.who,
            action.action,
            action.agent,
            if action.ok { "done" } else { "refused" }
        );
        let mut recent = crate::api::lock(&self.recent);
        recent.push(action);
        let excess = recent.len().saturating_sub(KEPT);
        recent.drain(..excess);
    }

    /// The latest actions, newest first.
    pub fn recent(&self) -> Vec<Action> {
        let mut recent = crate::api::lock(&self.recent).clone();
        recent.reverse();
        recent
    }
}
