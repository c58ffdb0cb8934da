//! Named snapshots of an agent's data: a snapshot marks how far the agent's stored output went
//! when it was taken, and stands for the period since the agent's previous snapshot (or its
//! start), so that two snapshots compare two phases of a program. They are kept in
//! `ui/snapshots.json` in the store's directory, private to its owner.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use openprof_format::private_file::{create_private, AtALink};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: Uuid,
    pub name: String,
    pub agent: Uuid,
    /// The agent's stored output it starts after (0: the agent's start).
    pub from_sequence: u64,
    /// The agent's stored output it ends with.
    pub to_sequence: u64,
    /// When it was taken (RFC 3339, the collector's clock).
    pub taken_at: String,
    /// Who took it, as the action log names callers.
    pub taken_by: String,
}

/// The snapshots of a store.
pub struct Snapshots {
    path: PathBuf,
    all: Mutex<Vec<Snapshot>>,
}

impl Snapshots {
    /// Reads the store's snapshots (none when the file is not there yet).
    pub fn open(store_dir: &Path) -> anyhow::Result<Snapshots> {
        let path = store_dir.join("ui").join("snapshots.json");
        let all = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                anyhow::anyhow!("{} is not a snapshot list: {error}", path.display())
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => anyhow::bail!("can't read {}: {error}", path.display()),
        };
        Ok(Snapshots {
            path,
            all: Mutex::new(all),
        })
    }

    pub fn list(&self) -> Vec<Snapshot> {
        crate::api::lock(&self.all).clone()
    }

    pub fn get(&self, id: Uuid) -> Option<Snapshot> {
        crate::api::lock(&self.all)
            .iter()
            .find(|snapshot| snapshot.id == id)
            .cloned()
    }

    /// Records a snapshot of `agent` up to `to_sequence`; it starts where the agent's last
    /// snapshot ended.
    pub fn take(
        &self,
        name: &str,
        agent: Uuid,
        to_sequence: u64,
        taken_by: &str,
    ) -> anyhow::Result<Snapshot> {
        let mut all = crate::api::lock(&self.all);
        let from_sequence = all
            .iter()
            .filter(|snapshot| snapshot.agent == agent)
            .map(|snapshot| snapshot.to_sequence)
            .max()
            .unwrap_or(0);
        if to_sequence <= from_sequence {
            anyhow::bail!(
                "agent {agent} has sent nothing since its last snapshot; let it run (or take a \
                 dump) first"
            );
        }
        let snapshot = Snapshot {
            id: Uuid::new_v4(),
            name: name.to_string(),
            agent,
            from_sequence,
            to_sequence,
            taken_at: chrono::Utc::now().to_rfc3339(),
            taken_by: taken_by.to_string(),
        };
        all.push(snapshot.clone());
        self.save(&all)?;
        Ok(snapshot)
    }

    fn save(&self, all: &[Snapshot]) -> anyhow::Result<()> {
        save_private_json(&self.path, all)
    }
}

/// Writes JSON to a file private to its owner, replacing it whole (written aside, then
/// renamed).
pub fn save_private_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::api::private_dir(dir)?;
    let aside = path.with_extension("json.new");
    let mut file = create_private(&aside, AtALink::Replace)
        .map_err(|error| anyhow::anyhow!("{} {error}", aside.display()))?;
    file.write_all(&serde_json::to_vec_pretty(value)?)?;
    file.sync_all()?;
    std::fs::rename(&aside, path)?;
    Ok(())
}
