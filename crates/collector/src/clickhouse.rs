//! ClickHouse as the fleet's store of profile windows (docs/clickhouse.md): the schema, the
//! sink the forwarder ([`crate::forward`]) inserts windows with, and the queries that answer
//! from ClickHouse.
//!
//! The forwarder carries on from what ClickHouse holds (its highest frame sequence per agent)
//! when it is back after an outage. Several collectors may forward into one database: each
//! forwards the agents connected to it.

use std::collections::HashSet;
use std::hash::Hasher;
use std::time::Duration;

use serde::Deserialize;
use uuid::Uuid;

use crate::forward::WindowSink;
use crate::store::AgentEntry;
use crate::windows::Window;

/// How long a query or an insert may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A ClickHouse database reached over its HTTP interface.
#[derive(Clone)]
pub struct ClickHouse {
    url: String,
    database: String,
    http: ureq::Agent,
}

/// Which windows a query takes.
#[derive(Clone, Debug, Default)]
pub struct WindowFilter {
    /// Agents with all these labels (`name:value`, as `label=` gives them).
    pub labels: Vec<String>,
    /// Samples with all these labels (`name=value`: a traced call's value, the application's
    /// context).
    pub sample_labels: Vec<String>,
    /// The event summed: `cpu` (when `None`), or another of [`crate::windows::WINDOW_EVENTS`].
    pub event: Option<String>,
    pub agent: Option<Uuid>,
    /// Windows received at or after this time (seconds since the epoch).
    pub since: Option<u64>,
    /// Windows received before this time (seconds since the epoch).
    pub until: Option<u64>,
}

impl ClickHouse {
    /// `url`: the HTTP interface, e.g. `http://127.0.0.1:8123`; `database`: letters, digits and
    /// `_` (it is written into the statements).
    pub fn new(url: &str, database: &str) -> Result<ClickHouse, String> {
        if !url.starts_with("http://") {
            return Err(format!(
                "--clickhouse {url}: give ClickHouse's HTTP interface as http://HOST:PORT"
            ));
        }
        if database.is_empty()
            || !database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "--database {database}: a ClickHouse database name here is letters, digits and _"
            ));
        }
        Ok(ClickHouse {
            url: url.trim_end_matches('/').to_string(),
            database: database.to_string(),
            http: ureq::AgentBuilder::new().timeout(TIMEOUT).build(),
        })
    }

    /// Runs one statement (`body`: the data of an INSERT); returns what ClickHouse answered.
    fn execute(&self, statement: &str, body: &str) -> Result<String, String> {
        let request = self.http.post(&format!("{}/", self.url));
        let response = if body.is_empty() {
            request.send_string(statement)
        } else {
            request.query("query", statement).send_string(body)
        };
        match response {
            Ok(response) => response
                .into_string()
                .map_err(|error| format!("ClickHouse at {}: {error}", self.url)),
            Err(ureq::Error::Status(status, response)) => {
                let text = response.into_string().unwrap_or_default();
                Err(format!(
                    "ClickHouse at {} answered {status}: {}",
                    self.url,
                    text.lines().next().unwrap_or("")
                ))
            }
            Err(error) => Err(format!("ClickHouse at {}: {error}", self.url)),
        }
    }

    /// Makes the database and its tables where they are missing (docs/clickhouse.md).
    pub fn create_schema(&self) -> Result<(), String> {
        let db = &self.database;
        for statement in [
            format!("CREATE DATABASE IF NOT EXISTS {db}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.agents (agent String, host String, pid UInt32, \
                 service String, labels Array(String), seen DateTime) \
                 ENGINE = ReplacingMergeTree(seen) ORDER BY agent"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.stacks (stack UInt64, frames Array(String)) \
                 ENGINE = ReplacingMergeTree ORDER BY stack"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.samples (date Date, time DateTime, \
                 agent String, sequence UInt64, window UInt32, event String, stack UInt64, \
                 labels Array(String), count UInt64) ENGINE = MergeTree PARTITION BY date \
                 ORDER BY (agent, time, event, stack)"
            ),
        ] {
            self.execute(&statement, "")?;
        }
        Ok(())
    }

    /// The highest frame sequence of `agent` whose windows ClickHouse holds (0: none).
    pub fn forwarded(&self, agent: Uuid) -> Result<u64, String> {
        let answer = self.execute(
            &format!(
                "SELECT max(sequence) FROM {}.samples WHERE agent = '{agent}' FORMAT TSV",
                self.database
            ),
            "",
        )?;
        answer
            .trim()
            .parse()
            .map_err(|_| format!("ClickHouse answered {answer:?} for an agent's last window"))
    }

    /// Records an agent: its host, pid, labels, and its `service` label.
    pub fn insert_agent(&self, agent: &AgentEntry) -> Result<(), String> {
        let labels: Vec<String> = agent
            .labels
            .iter()
            .map(|(name, value)| format!("{name}:{value}"))
            .collect();
        let service = agent
            .labels
            .iter()
            .find(|(name, _)| name == "service")
            .map_or("", |(_, value)| value.as_str());
        let row = serde_json::json!({
            "agent": agent.agent.to_string(),
            "host": agent.hostname,
            "pid": agent.pid,
            "service": service,
            "labels": labels,
            "seen": now_seconds(),
        });
        self.execute(
            &format!("INSERT INTO {}.agents FORMAT JSONEachRow", self.database),
            &format!("{row}\n"),
        )
        .map(|_| ())
    }

    /// Inserts windows of one agent: their stacks first (`known`: stacks inserted already, by
    /// hash), then their samples in one insert, which ClickHouse takes whole or not at all.
    pub fn insert_windows(
        &self,
        agent: Uuid,
        windows: &[Window],
        known: &mut HashSet<u64>,
    ) -> Result<(), String> {
        let mut stacks = String::new();
        let mut samples = String::new();
        let mut new_stacks = Vec::new();
        for window in windows {
            let seconds = window.received_ns / 1_000_000_000;
            for (labelled, count) in &window.stacks {
                let frames = &labelled.frames;
                let stack = stack_hash(frames);
                if !known.contains(&stack) && !new_stacks.contains(&stack) {
                    new_stacks.push(stack);
                    stacks.push_str(
                        &serde_json::json!({ "stack": stack, "frames": frames }).to_string(),
                    );
                    stacks.push('\n');
                }
                samples.push_str(
                    &serde_json::json!({
                        "date": date_of(seconds),
                        "time": seconds,
                        "agent": agent.to_string(),
                        "sequence": window.sequence,
                        "window": window.ordinal,
                        "event": window.event,
                        "stack": stack,
                        "labels": labelled.labels,
                        "count": count,
                    })
                    .to_string(),
                );
                samples.push('\n');
            }
        }
        if !stacks.is_empty() {
            self.execute(
                &format!("INSERT INTO {}.stacks FORMAT JSONEachRow", self.database),
                &stacks,
            )?;
        }
        if !samples.is_empty() {
            self.execute(
                &format!("INSERT INTO {}.samples FORMAT JSONEachRow", self.database),
                &samples,
            )?;
        }
        known.extend(new_stacks);
        Ok(())
    }

    /// The samples per stack of the windows `filter` takes, summed in ClickHouse: a flame
    /// graph's input. Stacks most samples first.
    pub fn stacks(&self, filter: &WindowFilter) -> Result<Vec<(Vec<String>, u64)>, String> {
        let db = &self.database;
        let answer = self.execute(
            &format!(
                "SELECT frames, total FROM (SELECT stack, sum(count) AS total FROM {db}.samples \
                 WHERE {} GROUP BY stack) ANY INNER JOIN (SELECT stack, frames FROM {db}.stacks) \
                 USING stack ORDER BY total DESC FORMAT JSONEachRow",
                self.conditions(filter)
            ),
            "",
        )?;
        #[derive(Deserialize)]
        struct Row {
            frames: Vec<String>,
            total: NumberOrText,
        }
        rows(&answer, |row: Row| Ok((row.frames, row.total.value()?)))
    }

    /// The top methods (by self samples: a stack's leaf) of each `bucket_seconds` of the
    /// windows `filter` takes, at most `top` a bucket: (bucket's start in seconds since the
    /// epoch, method, samples), buckets in time order, methods most first. Summed in ClickHouse.
    pub fn top_methods_over_time(
        &self,
        filter: &WindowFilter,
        bucket_seconds: u64,
        top: u32,
    ) -> Result<Vec<(u64, String, u64)>, String> {
        let db = &self.database;
        let bucket = bucket_seconds.max(1);
        let answer = self.execute(
            &format!(
                "SELECT bucket, leaf, total FROM (SELECT bucket, leaf, sum(samples) AS total FROM \
                 (SELECT intDiv(toUInt32(time), {bucket}) * {bucket} AS bucket, stack, \
                 sum(count) AS samples FROM {db}.samples WHERE {} GROUP BY bucket, stack) \
                 ANY INNER JOIN (SELECT stack, frames[-1] AS leaf FROM {db}.stacks) USING stack \
                 GROUP BY bucket, leaf) ORDER BY bucket, total DESC, leaf LIMIT {top} BY bucket \
                 FORMAT JSONEachRow",
                self.conditions(filter)
            ),
            "",
        )?;
        #[derive(Deserialize)]
        struct Row {
            bucket: NumberOrText,
            leaf: String,
            total: NumberOrText,
        }
        rows(&answer, |row: Row| {
            Ok((row.bucket.value()?, row.leaf, row.total.value()?))
        })
    }

    /// The WHERE clause of the windows `filter` takes.
    fn conditions(&self, filter: &WindowFilter) -> String {
        let db = &self.database;
        let event = filter.event.as_deref().unwrap_or("cpu");
        let mut conditions = vec![format!("event = {}", quoted(event))];
        if let Some(agent) = filter.agent {
            conditions.push(format!("agent = '{agent}'"));
        }
        for label in &filter.labels {
            conditions.push(format!(
                "agent IN (SELECT agent FROM {db}.agents WHERE has(labels, {}))",
                quoted(label)
            ));
        }
        for label in &filter.sample_labels {
            conditions.push(format!("has(labels, {})", quoted(label)));
        }
        if let Some(since) = filter.since {
            conditions.push(format!("time >= toDateTime({since})"));
        }
        if let Some(until) = filter.until {
            conditions.push(format!("time < toDateTime({until})"));
        }
        conditions.join(" AND ")
    }
}

/// The rows of a JSONEachRow answer, each made into what `row` makes of it.
fn rows<Row: serde::de::DeserializeOwned, T>(
    answer: &str,
    row: impl Fn(Row) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    answer
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let parsed: Row = serde_json::from_str(line)
                .map_err(|error| format!("ClickHouse answered {line:?}: {error}"))?;
            row(parsed)
        })
        .collect()
}

/// ClickHouse writes UInt64 in JSON as text (JavaScript's numbers lose its precision).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(u64),
    Text(String),
}

impl NumberOrText {
    fn value(&self) -> Result<u64, String> {
        match self {
            NumberOrText::Number(number) => Ok(*number),
            NumberOrText::Text(text) => text
                .parse()
                .map_err(|_| format!("ClickHouse answered {text:?} for a count")),
        }
    }
}

/// A string as a ClickHouse literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A stack's key in the stacks table: FNV-1a over its frames (stable across runs and
/// collectors, unlike std's hasher), each frame's length first so that no two stacks meet.
pub fn stack_hash(frames: &[String]) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    for frame in frames {
        hasher.write_u64(frame.len() as u64);
        hasher.write(frame.as_bytes());
    }
    hasher.finish()
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A time (seconds since the epoch) as `YYYY-MM-DD HH:MM:SS`, UTC.
pub fn utc_text(seconds: u64) -> String {
    let of_day = seconds % 86_400;
    format!(
        "{} {:02}:{:02}:{:02}",
        date_of(seconds),
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60
    )
}

/// The UTC date of a time, as ClickHouse's Date reads it.
fn date_of(seconds: u64) -> String {
    // Days since the epoch to a civil date (Howard Hinnant's algorithm).
    let days = (seconds / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// ClickHouse as the forwarder's sink ([`crate::forward`]): the stacks it inserted already are
/// kept, so that each goes in once while ClickHouse stays up.
pub struct ClickHouseSink {
    clickhouse: ClickHouse,
    /// Stacks inserted since the last failure, by hash.
    known: HashSet<u64>,
}

impl ClickHouseSink {
    pub fn new(clickhouse: ClickHouse) -> ClickHouseSink {
        ClickHouseSink {
            clickhouse,
            known: HashSet::new(),
        }
    }
}

impl WindowSink for ClickHouseSink {
    fn name(&self) -> &str {
        "ClickHouse"
    }

    fn prepare(&mut self) -> Result<(), String> {
        // After a failure ClickHouse may have been emptied: insert every stack again.
        self.known.clear();
        self.clickhouse.create_schema()
    }

    fn resume_point(&mut self, agent: Uuid) -> Result<u64, String> {
        self.clickhouse.forwarded(agent)
    }

    fn record_agent(&mut self, agent: &AgentEntry) -> Result<(), String> {
        self.clickhouse.insert_agent(agent)
    }

    fn insert_windows(&mut self, agent: &AgentEntry, windows: &[Window]) -> Result<(), String> {
        self.clickhouse
            .insert_windows(agent.agent, windows, &mut self.known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00");
        assert_eq!(utc_text(1_795_693_323), "2026-11-26 11:42:03");
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(951_782_400), "2000-02-29");
        assert_eq!(date_of(1_795_651_200), "2026-11-26");
    }

    #[test]
    fn stack_hashes_tell_frames_apart_and_stay_put() {
        let stack =
            |frames: &[&str]| stack_hash(&frames.iter().map(|f| f.to_string()).collect::<Vec<_>>());
        assert_ne!(stack(&["a.b", "c"]), stack(&["a", "b.c"]));
        assert_ne!(stack(&["ab"]), stack(&["a", "b"]));
        assert_eq!(stack(&["Split.main"]), stack(&["Split.main"]));
    }

    #[test]
    fn bad_urls_and_names_are_refused_by_name() {
        assert!(ClickHouse::new("127.0.0.1:8123", "openprof")
            .err()
            .unwrap()
            .contains("http://HOST:PORT"));
        assert!(ClickHouse::new("http://127.0.0.1:8123", "a;b")
            .err()
            .unwrap()
            .contains("letters, digits and _"));
        assert_eq!(quoted("it's"), "'it\\'s'");
    }
}
