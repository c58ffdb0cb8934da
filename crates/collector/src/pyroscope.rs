//! Pyroscope as a sink of profile windows (`openprof serve --pyroscope URL`, docs/clickhouse.md,
//! "Pyroscope"): each CPU window of each agent pushed to Pyroscope's HTTP ingest API as pprof,
//! one push per set of sample labels, and a cursor file in the store saying how far the pushes
//! got.
//!
//! Pyroscope cannot be asked which windows it holds, so the cursor is ours: written durably
//! after every push Pyroscope acknowledged, read when the forwarder starts over (after a
//! restart or an outage), so that no acknowledged window is lost and none is pushed twice.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use openprof_analysis::profile::{Event, Profile};
use openprof_analysis::views::{self, OutputFormat, ViewOptions};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::forward::{AgentBatch, WindowSink};
use crate::store::AgentEntry;
use crate::windows::Window;

/// How long a push may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The cursor file, in the store's directory.
pub const CURSOR_FILE: &str = "pyroscope-cursor.json";
/// The application name of agents without a `service` label.
const DEFAULT_APPLICATION: &str = "java";
/// What Pyroscope is told took the samples (`spyName`).
const SPY_NAME: &str = "openprof";
/// The windows pushed: Pyroscope tells a profile's type from its pprof sample types, and takes
/// ours for CPU samples (`cpu_samples`, which it files as `process_cpu`); those of wall-clock
/// and lock windows (`wall_samples`, `lock`) are not among the types it knows.
const PUSHED_EVENT: &str = "cpu";

/// How far an agent's pushes got: the last push Pyroscope acknowledged was the `pushes`-th
/// (from 1) label set of the window `(sequence, ordinal)`. Ordered as the pushes are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct PushedUpTo {
    sequence: u64,
    ordinal: u32,
    pushes: u32,
}

/// The cursor file's content: per Pyroscope URL, per agent id, how far the pushes got. Keyed by
/// URL because what one Pyroscope holds says nothing about another.
type Cursors = BTreeMap<String, BTreeMap<String, PushedUpTo>>;

/// A Pyroscope server reached over its HTTP ingest API, and where its cursor is kept.
pub struct Pyroscope {
    url: String,
    http: ureq::Agent,
    cursor_path: PathBuf,
    /// The whole cursor file as last read or written (other URLs' entries are kept as found).
    cursors: Cursors,
    /// When each agent's last window seen was received (ns since the epoch): where the next
    /// window's time range starts.
    last_received: HashMap<Uuid, u64>,
}

impl Pyroscope {
    /// `url`: Pyroscope's HTTP address, e.g. `http://127.0.0.1:4040` (pushes go to `/ingest`
    /// under it); `store_dir`: the collector's store, which keeps the cursor file.
    pub fn new(url: &str, store_dir: &Path) -> Result<Pyroscope, String> {
        let refused = || {
            format!(
                "--pyroscope {url}: give Pyroscope's HTTP address as http://HOST:PORT \
                 (optionally with a path, without a query)"
            )
        };
        let rest = url.strip_prefix("http://").ok_or_else(refused)?;
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty() || rest.contains(['?', '#']) || rest.contains(char::is_whitespace) {
            return Err(refused());
        }
        let http = ureq::AgentBuilder::new().timeout(TIMEOUT).build();
        let url = url.trim_end_matches('/').to_string();
        http.post(&format!("{url}/ingest"))
            .request_url()
            .map_err(|_| refused())?;
        Ok(Pyroscope {
            url,
            http,
            cursor_path: store_dir.join(CURSOR_FILE),
            cursors: Cursors::new(),
            last_received: HashMap::new(),
        })
    }

    fn pushed_up_to(&self, agent: Uuid) -> PushedUpTo {
        self.cursors
            .get(&self.url)
            .and_then(|agents| agents.get(&agent.to_string()))
            .copied()
            .unwrap_or_default()
    }

    /// Reads the cursor file; a missing one is an empty cursor (nothing pushed yet).
    fn load(&mut self) -> Result<(), String> {
        let path = &self.cursor_path;
        self.cursors = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                format!(
                    "Pyroscope's cursor {} can't be read ({error}); without it windows could \
                     be pushed twice: mend or remove it",
                    path.display()
                )
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Cursors::new(),
            Err(error) => {
                return Err(format!(
                    "Pyroscope's cursor {} can't be read: {error}",
                    path.display()
                ))
            }
        };
        Ok(())
    }

    /// Writes the cursor file durably (0600): a new file synced, renamed over the old one, the
    /// directory synced, so that a crash leaves the old cursor or the new one, whole.
    fn save(&self) -> Result<(), String> {
        let path = &self.cursor_path;
        let failed = |error: std::io::Error| {
            format!(
                "Pyroscope's cursor {} can't be written: {error}",
                path.display()
            )
        };
        let bytes = serde_json::to_vec_pretty(&self.cursors).map_err(|error| error.to_string())?;
        let fresh = path.with_extension("json.new");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&fresh)
            .map_err(failed)?;
        // A file left by an earlier run keeps its mode through open: make it private too.
        file.set_permissions(Permissions::from_mode(0o600))
            .map_err(failed)?;
        file.write_all(&bytes).map_err(failed)?;
        file.sync_all().map_err(failed)?;
        std::fs::rename(&fresh, path).map_err(failed)?;
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|dir| dir.sync_all())
                .map_err(failed)?;
        }
        Ok(())
    }

    /// One push: `body` (gzipped pprof) under the series `name`, for the seconds `from` to
    /// `until`.
    fn push(&self, name: &str, from: u64, until: u64, body: &[u8]) -> Result<(), String> {
        let response = self
            .http
            .post(&format!("{}/ingest", self.url))
            .query("name", name)
            .query("from", &from.to_string())
            .query("until", &until.to_string())
            .query("format", "pprof")
            .query("spyName", SPY_NAME)
            .set("Content-Type", "application/octet-stream")
            .send_bytes(body);
        match response {
            Ok(response) => {
                // Read to the end so that the connection is kept for the next push; the push
                // was taken whatever the body says.
                let _ = response.into_string();
                Ok(())
            }
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                Err(format!(
                    "Pyroscope at {} answered {status}: {}",
                    self.url,
                    text.lines().next().unwrap_or("")
                ))
            }
            Err(error) => Err(format!("Pyroscope at {}: {error}", self.url)),
        }
    }
}

impl WindowSink for Pyroscope {
    fn name(&self) -> &str {
        "Pyroscope"
    }

    fn prepare(&mut self) -> Result<(), String> {
        self.last_received.clear();
        self.load()
    }

    fn resume_point(&mut self, agent: Uuid) -> Result<u64, String> {
        // The last frame may hold pushes not made yet (further label sets, further windows
        // ending in it): it is handed over again, and what was pushed of it is skipped.
        Ok(self.pushed_up_to(agent).sequence.saturating_sub(1))
    }

    fn insert(&mut self, batch: &[AgentBatch]) -> Result<(), String> {
        for taken in batch {
            self.push_windows(taken.agent, &taken.windows)?;
        }
        Ok(())
    }
}

impl Pyroscope {
    /// Pushes the cpu windows of one agent, each label set of each window a series of its own,
    /// skipping what the cursor says was pushed.
    fn push_windows(&mut self, agent: &AgentEntry, windows: &[Window]) -> Result<(), String> {
        let pushed = self.pushed_up_to(agent.agent);
        let application = application_name(agent);
        let agent_labels = agent_labels(agent);
        for window in windows.iter().filter(|window| window.event == PUSHED_EVENT) {
            let until_ns = window.received_ns;
            let from_ns = self
                .last_received
                .insert(agent.agent, until_ns)
                .filter(|&from| from <= until_ns)
                .unwrap_or(until_ns);
            for (index, (sample_labels, stacks)) in label_sets(window).into_iter().enumerate() {
                let position = PushedUpTo {
                    sequence: window.sequence,
                    ordinal: window.ordinal,
                    pushes: u32::try_from(index + 1).unwrap_or(u32::MAX),
                };
                if position <= pushed {
                    continue;
                }
                let mut labels = agent_labels.clone();
                for label in sample_labels {
                    let (name, value) = label.split_once('=').unwrap_or((label.as_str(), ""));
                    labels.insert(label_name(name), label_value(value));
                }
                let body = pprof(window.event, stacks, from_ns, until_ns)?;
                self.push(
                    &series_name(&application, &labels),
                    from_ns / 1_000_000_000,
                    until_ns / 1_000_000_000,
                    &body,
                )?;
                self.cursors
                    .entry(self.url.clone())
                    .or_default()
                    .insert(agent.agent.to_string(), position);
                self.save()?;
            }
        }
        Ok(())
    }
}

/// A window's stacks by their sample labels, label sets in order: one push each.
fn label_sets(window: &Window) -> BTreeMap<&[String], Vec<(Vec<String>, u64)>> {
    let mut sets: BTreeMap<&[String], Vec<(Vec<String>, u64)>> = BTreeMap::new();
    for (stack, count) in &window.stacks {
        if *count > 0 {
            sets.entry(stack.labels.as_slice())
                .or_default()
                .push((stack.frames.clone(), *count));
        }
    }
    sets
}

/// One push's body: the stacks as gzipped pprof, written by the views' pprof writer.
fn pprof(
    event: &str,
    stacks: Vec<(Vec<String>, u64)>,
    from_ns: u64,
    until_ns: u64,
) -> Result<Vec<u8>, String> {
    let event = Event::from_name(event)
        .ok_or_else(|| format!("windows of the event {event} can't be written as pprof"))?;
    let mut profile = Profile::of_stacks("a window", event, stacks);
    profile.start_epoch_ns = Some(from_ns);
    profile.duration_ns = Some(until_ns - from_ns);
    let mut body = Vec::new();
    views::write(
        &profile,
        OutputFormat::Pprof,
        &ViewOptions::default(),
        &mut body,
    )
    .map_err(|error| format!("a window as pprof: {error}"))?;
    Ok(body)
}

/// The application Pyroscope files an agent's profiles under: its `service` label, else
/// `java`, in the characters Pyroscope takes in a name (letters, digits, `_ . - /`; others
/// become `_`).
fn application_name(agent: &AgentEntry) -> String {
    let service = agent
        .labels
        .iter()
        .find(|(name, _)| name == "service")
        .map_or("", |(_, value)| value.as_str());
    if service.is_empty() {
        return DEFAULT_APPLICATION.to_string();
    }
    service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The labels every push of an agent carries: its labels but `service` (the application
/// name), then `host` and `pid`, which win over labels of those names.
fn agent_labels(agent: &AgentEntry) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = agent
        .labels
        .iter()
        .filter(|(name, _)| name != "service")
        .map(|(name, value)| (label_name(name), label_value(value)))
        .collect();
    labels.insert("host".into(), label_value(&agent.hostname));
    labels.insert("pid".into(), agent.pid.to_string());
    labels
}

/// A label name as Pyroscope takes it: ASCII letters, digits, `_` and `.`, any other character
/// becoming `_`. Names starting with `__` are Pyroscope's own (it drops them from pushes), so
/// they get `label` in front; an empty name is `label`.
fn label_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if mapped.is_empty() || mapped.starts_with("__") {
        format!("label{mapped}")
    } else {
        mapped
    }
}

/// A label value as Pyroscope's name syntax carries it: `,` and `}` end a value there (there is
/// no escape), so they become `_`.
fn label_value(value: &str) -> String {
    value.replace([',', '}'], "_")
}

/// `application{name=value,...}`, names in order.
fn series_name(application: &str, labels: &BTreeMap<String, String>) -> String {
    let labels: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    format!("{application}{{{}}}", labels.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::LabelledStack;

    fn agent(labels: &[(&str, &str)]) -> AgentEntry {
        AgentEntry {
            agent: Uuid::nil(),
            process: None,
            hostname: "box-1".into(),
            pid: 42,
            format: "b".into(),
            last_sequence: 0,
            frames: 0,
            bytes: 0,
            clock: None,
            lost_frames: 0,
            lost_bytes: 0,
            finished: false,
            labels: labels
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            identity: None,
        }
    }

    #[test]
    fn names_carry_the_service_and_the_agents_labels_in_pyroscopes_characters() {
        let agent = agent(&[
            ("service", "check out"),
            ("team-name", "pay,ments}"),
            ("__name__", "x"),
        ]);
        assert_eq!(application_name(&agent), "check_out");
        assert_eq!(
            series_name(&application_name(&agent), &agent_labels(&agent)),
            "check_out{host=box-1,label__name__=x,pid=42,team_name=pay_ments_}"
        );
        assert_eq!(application_name(&super::tests::agent(&[])), "java");
        assert_eq!(label_name(""), "label");
        assert_eq!(label_name("mpt.value"), "mpt.value");
    }

    #[test]
    fn a_windows_stacks_go_as_one_push_per_label_set_in_a_stable_order() {
        let stack = |labels: &[&str], frame: &str, count| {
            (
                LabelledStack {
                    labels: labels.iter().map(|label| label.to_string()).collect(),
                    frames: vec![frame.to_string()],
                },
                count,
            )
        };
        let window = Window {
            sequence: 3,
            ordinal: 0,
            received_ns: 0,
            event: "cpu",
            stacks: vec![
                stack(&["user=bob"], "B.b", 2),
                stack(&[], "A.a", 5),
                stack(&["user=alice"], "C.c", 1),
                stack(&["user=bob"], "D.d", 0),
            ],
            values: Vec::new(),
        };
        let sets: Vec<(Vec<String>, usize)> = label_sets(&window)
            .into_iter()
            .map(|(labels, stacks)| (labels.to_vec(), stacks.len()))
            .collect();
        assert_eq!(
            sets,
            [
                (vec![], 1),
                (vec!["user=alice".to_string()], 1),
                (vec!["user=bob".to_string()], 1),
            ]
        );
    }

    #[test]
    fn the_cursor_orders_pushes_as_they_are_made_and_survives_a_new_sink() {
        let store = tempfile::tempdir().unwrap();
        let mut sink = Pyroscope::new("http://127.0.0.1:4040/", store.path()).unwrap();
        sink.prepare().unwrap();
        assert_eq!(sink.resume_point(Uuid::nil()).unwrap(), 0);
        let at = |sequence, ordinal, pushes| PushedUpTo {
            sequence,
            ordinal,
            pushes,
        };
        assert!(at(4, 0, 2) < at(4, 1, 1));
        assert!(at(4, 1, 1) < at(5, 0, 1));
        sink.cursors
            .entry(sink.url.clone())
            .or_default()
            .insert(Uuid::nil().to_string(), at(7, 1, 2));
        sink.save().unwrap();
        let file = store.path().join(CURSOR_FILE);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut again = Pyroscope::new("http://127.0.0.1:4040", store.path()).unwrap();
        again.prepare().unwrap();
        assert_eq!(again.pushed_up_to(Uuid::nil()), at(7, 1, 2));
        assert_eq!(again.resume_point(Uuid::nil()).unwrap(), 6);
        // Another Pyroscope holds nothing of it.
        let mut other = Pyroscope::new("http://10.0.0.9:4040", store.path()).unwrap();
        other.prepare().unwrap();
        assert_eq!(other.resume_point(Uuid::nil()).unwrap(), 0);
        // A cursor that can't be read stops the pushes rather than repeat them.
        std::fs::write(&file, "{").unwrap();
        assert!(again.prepare().unwrap_err().contains("mend or remove it"));
    }

    #[test]
    fn bad_urls_are_refused_naming_the_option() {
        for url in [
            "127.0.0.1:4040",
            "https://pyroscope:4040",
            "http://",
            "http:///ingest",
            "http://host:4040/?x=1",
            "http://ho st",
        ] {
            let refusal = Pyroscope::new(url, Path::new("/nonexistent"))
                .err()
                .unwrap_or_else(|| panic!("{url} was taken"));
            assert!(refusal.starts_with("--pyroscope "), "{refusal}");
        }
        assert!(Pyroscope::new("http://pyroscope:4040/base", Path::new("/x")).is_ok());
    }
}
