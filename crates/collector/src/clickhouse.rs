//! ClickHouse as the fleet's store of profile windows (docs/clickhouse.md): the schema, the
//! sink the forwarder ([`crate::forward`]) inserts windows with, and the queries that answer
//! from ClickHouse.
//!
//! The forwarder carries on from what ClickHouse holds (its highest frame sequence per agent)
//! when it is back after an outage. Several collectors may forward into one database: each
//! forwards the agents connected to it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use ring::hmac;

use serde::Deserialize;
use uuid::Uuid;

use openprof_format::mpt_stats::ValueType;
use openprof_format::trace::attrs::AttrValue;
use openprof_format::trace::writer::{DOCUMENT_HEAD, DOCUMENT_TAIL};

use crate::elements::ElementRow;
use crate::forward::{AgentBatch, WindowSink};
use crate::store::{AgentEntry, Catalog, TraceEntry};
use crate::windows::{ValueCalls, Window};

/// How often retention drops the days past it.
const RETENTION_PERIOD: Duration = Duration::from_secs(3600);
/// The tables partitioned by day, which retention drops day by day.
const DAILY_TABLES: [&str; 3] = ["samples", "traced_values", "trace_elements"];
/// Seconds after which no claim on an agent id or a secret can come before one already made
/// (ClickHouse's clock counts seconds).
const CLAIM_SETTLES: u32 = 2;
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

/// The start of the `bucket_seconds`-long bucket a sample's window falls in (seconds since the
/// epoch), as a ClickHouse expression over the samples table's `time`.
fn bucket_start(bucket_seconds: u64) -> String {
    let bucket = bucket_seconds.max(1);
    format!("intDiv(toUInt32(time), {bucket}) * {bucket}")
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
        self.answered(response)?
            .into_string()
            .map_err(|error| format!("ClickHouse at {}: {error}", self.url))
    }

    /// ClickHouse's answer, or its refusal (its status and first line) or failure as an error.
    fn answered(
        &self,
        response: Result<ureq::Response, ureq::Error>,
    ) -> Result<ureq::Response, String> {
        match response {
            Ok(response) => Ok(response),
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

    /// Runs one query and hands `row` each line of its answer as it arrives (an answer may be
    /// larger than memory should hold: a long trace's elements).
    fn execute_lines(
        &self,
        statement: &str,
        row: &mut dyn FnMut(&str) -> Result<(), String>,
    ) -> Result<(), String> {
        use std::io::BufRead;
        let response = self.answered(
            self.http
                .post(&format!("{}/", self.url))
                .send_string(statement),
        )?;
        let reader = std::io::BufReader::new(response.into_reader());
        for line in reader.lines() {
            let line = line.map_err(|error| format!("ClickHouse at {}: {error}", self.url))?;
            if !line.is_empty() {
                row(&line)?;
            }
        }
        Ok(())
    }

    /// Makes the database and its tables where they are missing (docs/clickhouse.md).
    pub fn create_schema(&self) -> Result<(), String> {
        let db = &self.database;
        for statement in [
            format!("CREATE DATABASE IF NOT EXISTS {db}"),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.nodes (node String, host String, seen DateTime) \
                 ENGINE = ReplacingMergeTree(seen) ORDER BY node"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.processes (process String, node String, \
                 pid UInt32, name String, seen DateTime) \
                 ENGINE = ReplacingMergeTree(seen) ORDER BY process"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.agents (agent String, process String, \
                 host String, pid UInt32, format String, service String, labels Array(String), \
                 seen DateTime) ENGINE = ReplacingMergeTree(seen) ORDER BY agent"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.traces (trace String, agent String, \
                 elements UInt64, ended UInt8, seen DateTime) \
                 ENGINE = ReplacingMergeTree(seen) ORDER BY trace"
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
            // Inserted before a batch's samples, and so again when the samples failed: the
            // key makes a row inserted twice one, and queries read it FINAL.
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.traced_values (date Date, time DateTime, \
                 agent String, sequence UInt64, window UInt32, method String, spec String, \
                 value_type String, value String, calls UInt64, wall_total_ns UInt64, \
                 cpu_total_ns UInt64, wall_max_ns UInt64, cpu_max_ns UInt64) \
                 ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (agent, sequence, window, method, spec, value_type, value)"
            ),
            // The first key that claims an agent id keeps it (the earliest row, by ClickHouse's
            // own clock): collectors bind identities where their data meets.
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.identities (agent String, identity String, \
                 bound DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY agent"
            ),
            // Secrets the collectors share, the earliest of a name winning: the stack key.
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.secrets (name String, value String, \
                 made DateTime DEFAULT now()) ENGINE = MergeTree ORDER BY name"
            ),
            // An element received twice (the same collationValue) is one, as on export.
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.trace_elements (date Date, time DateTime, \
                 agent String, trace String, sequence UInt64, collation UInt64, element String, \
                 attribute_names Array(String), attribute_values Array(String), xml String) \
                 ENGINE = ReplacingMergeTree PARTITION BY date \
                 ORDER BY (agent, trace, collation, element)"
            ),
        ] {
            self.execute(&statement, "")?;
        }
        Ok(())
    }

    /// The earliest claim on `name` in `table` (identities by agent, secrets by name), and
    /// whether it is settled: made more than [`CLAIM_SETTLES`] seconds ago by ClickHouse's
    /// clock, so that every claim that could come before it (made in the same second) is in.
    /// The first writer wins, also when two collectors write at once: ties in a second go to
    /// the smaller value, and a claim is trusted only once settled.
    fn first_claim(&self, table: &str, name: &str) -> Result<Option<(String, bool)>, String> {
        let (key, value, made) = match table {
            "identities" => ("agent", "identity", "bound"),
            _ => ("name", "value", "made"),
        };
        let answer = self.execute(
            &format!(
                "SELECT {value}, toUInt8(now() - {made} > {CLAIM_SETTLES}) FROM {}.{table} \
                 WHERE {key} = {} ORDER BY {made}, {value} LIMIT 1 FORMAT TSVRaw",
                self.database,
                quoted(name),
            ),
            "",
        )?;
        let answer = answer.trim_end_matches('\n');
        if answer.is_empty() {
            return Ok(None);
        }
        match answer.split_once('\t') {
            Some((value, settled)) => Ok(Some((value.to_string(), settled == "1"))),
            None => Err(format!("ClickHouse answered {answer:?} for a claim")),
        }
    }

    /// Inserts a claim on `name` in `table`, made now by ClickHouse's clock.
    fn claim(&self, table: &str, name: &str, value: &str) -> Result<(), String> {
        let row = match table {
            "identities" => serde_json::json!({ "agent": name, "identity": value }),
            _ => serde_json::json!({ "name": name, "value": value }),
        };
        self.execute(
            &format!("INSERT INTO {}.{table} FORMAT JSONEachRow", self.database),
            &format!("{row}\n"),
        )
        .map(drop)
    }

    /// Claims `agent`'s id for `identity` (its public key, `None` for an agent that proved
    /// none). The id is that key's when the key claimed it first, or when nobody claimed it
    /// and it has no key; a claim just made is [`Claim::Unsettled`] until no earlier one can
    /// turn up.
    pub fn claim_identity(&self, agent: Uuid, identity: Option<&[u8]>) -> Result<Claim, String> {
        let id = agent.to_string();
        let mine = identity.map(hex);
        match (self.first_claim("identities", &id)?, mine) {
            (Some((_, false)), _) => Ok(Claim::Unsettled),
            (Some((holder, true)), mine) if Some(&holder) == mine.as_ref() => Ok(Claim::Granted),
            (Some(_), _) => Ok(Claim::Refused),
            (None, None) => Ok(Claim::Granted),
            (None, Some(mine)) => {
                self.claim("identities", &id, &mine)?;
                Ok(Claim::Unsettled)
            }
        }
    }

    /// The key stacks are hashed under, shared by every collector forwarding here: made at
    /// random by the first that asks (which then waits for its claim to settle).
    pub fn stack_key(&self) -> Result<StackKey, String> {
        const NAME: &str = "stack key";
        loop {
            match self.first_claim("secrets", NAME)? {
                Some((key, true)) => {
                    return Ok(StackKey(hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes())))
                }
                Some((_, false)) => {}
                None => {
                    let mut bytes = [0u8; 32];
                    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
                        .map_err(|_| "the system gave no random bytes for the stack key")?;
                    self.claim("secrets", NAME, &hex(&bytes))?;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The highest frame sequence of `agent` whose windows (or trace elements) ClickHouse
    /// holds (0: none). Traced values are not asked: they go in before their batch's samples.
    pub fn forwarded(&self, agent: Uuid) -> Result<u64, String> {
        let mut highest = 0;
        for table in ["samples", "trace_elements"] {
            let answer = self.execute(
                &format!(
                    "SELECT max(sequence) FROM {}.{table} WHERE agent = '{agent}' FORMAT TSV",
                    self.database
                ),
                "",
            )?;
            let sequence: u64 = answer.trim().parse().map_err(|_| {
                format!("ClickHouse answered {answer:?} for an agent's last window")
            })?;
            highest = highest.max(sequence);
        }
        Ok(highest)
    }

    /// Records an agent's node and process (where `catalog` has them: an agent writing a trace
    /// names them) and the agent: its host, pid, format, labels, and its `service` label.
    pub fn insert_hierarchy(&self, agent: &AgentEntry, catalog: &Catalog) -> Result<(), String> {
        let db = &self.database;
        let process = agent
            .process
            .and_then(|process| (catalog.processes.iter()).find(|entry| entry.process == process));
        if let Some(process) = process {
            if let Some(node) = (catalog.nodes.iter()).find(|node| node.node == process.node) {
                let row = serde_json::json!({
                    "node": node.node.to_string(),
                    "host": node.hostname,
                    "seen": now_seconds(),
                });
                self.execute(
                    &format!("INSERT INTO {db}.nodes FORMAT JSONEachRow"),
                    &format!("{row}\n"),
                )?;
            }
            let row = serde_json::json!({
                "process": process.process.to_string(),
                "node": process.node.to_string(),
                "pid": process.pid,
                "name": process.name.clone().unwrap_or_default(),
                "seen": now_seconds(),
            });
            self.execute(
                &format!("INSERT INTO {db}.processes FORMAT JSONEachRow"),
                &format!("{row}\n"),
            )?;
        }
        self.insert_agent(agent)
    }

    /// Records an agent: its host, pid, format, labels, and its `service` label.
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
            "process": agent.process.map(|process| process.to_string()).unwrap_or_default(),
            "host": agent.hostname,
            "pid": agent.pid,
            "format": agent.format,
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

    /// Inserts windows of agents: their stacks first (`known`: stacks inserted already, by
    /// hash), their traced values, then their samples in one insert, which ClickHouse takes
    /// whole or not at all.
    pub fn insert_windows(
        &self,
        batch: &[(Uuid, &[Window])],
        key: &StackKey,
        known: &mut HashSet<u64>,
    ) -> Result<(), String> {
        let mut stacks = String::new();
        let mut samples = String::new();
        let mut values = String::new();
        let mut new_stacks = Vec::new();
        let windows = (batch.iter())
            .flat_map(|(agent, windows)| windows.iter().map(move |window| (agent, window)));
        for (agent, window) in windows {
            let seconds = window.received_ns / 1_000_000_000;
            for value in &window.values {
                values.push_str(
                    &serde_json::json!({
                        "date": date_of(seconds),
                        "time": seconds,
                        "agent": agent.to_string(),
                        "sequence": window.sequence,
                        "window": window.ordinal,
                        "method": value.method,
                        "spec": value.spec,
                        "value_type": value.value_type,
                        "value": value.value,
                        "calls": value.calls,
                        "wall_total_ns": value.wall_total_ns,
                        "cpu_total_ns": value.cpu_total_ns,
                        "wall_max_ns": value.wall_max_ns,
                        "cpu_max_ns": value.cpu_max_ns,
                    })
                    .to_string(),
                );
                values.push('\n');
            }
            for (labelled, count) in &window.stacks {
                let frames = &labelled.frames;
                let stack = key.stack(frames);
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
        if !values.is_empty() {
            self.execute(
                &format!(
                    "INSERT INTO {}.traced_values FORMAT JSONEachRow",
                    self.database
                ),
                &values,
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

    /// Inserts trace elements of agents in one insert, which ClickHouse takes whole or not at
    /// all.
    pub fn insert_elements(&self, batch: &[(Uuid, &[ElementRow])]) -> Result<(), String> {
        let mut rows = String::new();
        let elements = (batch.iter())
            .flat_map(|(agent, elements)| elements.iter().map(move |element| (agent, element)));
        for (agent, element) in elements {
            let seconds = element.received_ns / 1_000_000_000;
            let (names, values): (Vec<&str>, Vec<&str>) = (element.attributes.iter())
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .unzip();
            rows.push_str(
                &serde_json::json!({
                    "date": date_of(seconds),
                    "time": seconds,
                    "agent": agent.to_string(),
                    "trace": element.trace.map(|trace| trace.to_string()).unwrap_or_default(),
                    "sequence": element.sequence,
                    "collation": element.collation.map_or(0, |value| value.min(u128::from(u64::MAX)) as u64),
                    "element": element.element,
                    "attribute_names": names,
                    "attribute_values": values,
                    "xml": element.xml,
                })
                .to_string(),
            );
            rows.push('\n');
        }
        self.execute(
            &format!(
                "INSERT INTO {}.trace_elements FORMAT JSONEachRow",
                self.database
            ),
            &rows,
        )
        .map(|_| ())
    }

    /// Writes a trace as a document (docs/trace.dtd) from the elements ClickHouse holds: its
    /// agent's node, processCreate and agentCreate, its elements in collationValue order (each
    /// once), the agent's agentDestroy. Returns how many elements of the trace it wrote.
    pub fn export_trace(&self, trace: Uuid, out: &mut dyn std::io::Write) -> Result<u64, String> {
        let db = &self.database;
        let agent = self.execute(
            &format!("SELECT any(agent) FROM {db}.traces FINAL WHERE trace = '{trace}' FORMAT TSV"),
            "",
        )?;
        let agent: Uuid = agent
            .trim()
            .parse()
            .map_err(|_| format!("no trace {trace} in ClickHouse's {db}"))?;
        #[derive(Deserialize)]
        struct Above {
            element: String,
            xml: String,
        }
        let above = self.execute(
            &format!(
                "SELECT element, xml FROM {db}.trace_elements FINAL WHERE agent = '{agent}' AND \
                 trace = '' FORMAT JSONEachRow"
            ),
            "",
        )?;
        let above: Vec<Above> = rows(&above, Ok)?;
        let written = |what: std::io::Result<()>| {
            what.map_err(|error| format!("the document of trace {trace}: {error}"))
        };
        let write_above = |name: &str, out: &mut dyn std::io::Write| -> Result<(), String> {
            for element in above.iter().filter(|element| element.element == name) {
                written(writeln!(out, "{}", element.xml))?;
            }
            Ok(())
        };
        written(out.write_all(DOCUMENT_HEAD.as_bytes()))?;
        for name in ["node", "processCreate", "agentCreate"] {
            write_above(name, out)?;
        }
        #[derive(Deserialize)]
        struct Element {
            xml: String,
        }
        let mut elements = 0;
        self.execute_lines(
            &format!(
                "SELECT xml FROM {db}.trace_elements FINAL WHERE agent = '{agent}' AND \
                 trace = '{trace}' AND collation > 0 ORDER BY collation FORMAT JSONEachRow"
            ),
            &mut |line| {
                let element: Element = serde_json::from_str(line)
                    .map_err(|error| format!("ClickHouse answered {line:?}: {error}"))?;
                elements += 1;
                written(writeln!(out, "{}", element.xml))
            },
        )?;
        write_above("agentDestroy", out)?;
        written(out.write_all(DOCUMENT_TAIL.as_bytes()))?;
        Ok(elements)
    }

    /// Records traces: their agent, elements stored and whether they ended.
    pub fn insert_traces(&self, traces: &[TraceEntry]) -> Result<(), String> {
        let mut rows = String::new();
        for trace in traces {
            rows.push_str(
                &serde_json::json!({
                    "trace": trace.trace.to_string(),
                    "agent": trace.agent.to_string(),
                    "elements": trace.elements,
                    "ended": u8::from(trace.ended),
                    "seen": now_seconds(),
                })
                .to_string(),
            );
            rows.push('\n');
        }
        self.execute(
            &format!("INSERT INTO {}.traces FORMAT JSONEachRow", self.database),
            &rows,
        )
        .map(|_| ())
    }

    /// Drops the days before `first_kept` (`YYYY-MM-DD`) from the tables partitioned by day:
    /// retention on a ClickHouse without TTL (18.16). Returns what it dropped, `table day`.
    pub fn drop_days_before(&self, first_kept: &str) -> Result<Vec<String>, String> {
        let db = &self.database;
        let tables: Vec<String> = DAILY_TABLES.iter().map(|table| quoted(table)).collect();
        let answer = self.execute(
            &format!(
                "SELECT DISTINCT table, partition FROM system.parts WHERE database = {} AND \
                 active AND table IN ({}) AND partition < {} ORDER BY table, partition \
                 FORMAT TSV",
                quoted(db),
                tables.join(", "),
                quoted(first_kept)
            ),
            "",
        )?;
        let mut dropped = Vec::new();
        for line in answer.lines().filter(|line| !line.is_empty()) {
            let Some((table, day)) = line.split_once('\t') else {
                return Err(format!("ClickHouse answered {line:?} for a partition"));
            };
            // A partition of a Date column reads back as the day, e.g. 2026-11-26.
            let is_day = day.len() == 10 && day.bytes().all(|b| b.is_ascii_digit() || b == b'-');
            if !is_day || !DAILY_TABLES.contains(&table) {
                return Err(format!("ClickHouse answered {line:?} for a partition"));
            }
            self.execute(
                &format!("ALTER TABLE {db}.{table} DROP PARTITION {}", quoted(day)),
                "",
            )?;
            dropped.push(format!("{table} {day}"));
        }
        Ok(dropped)
    }

    /// The traced values of the agents and time `filter` takes (`method`: of that method only,
    /// `package.Class.method(types)`, whatever its class's loader), summed over windows in
    /// ClickHouse, the slowest in all first.
    pub fn traced_values(
        &self,
        filter: &WindowFilter,
        method: Option<&str>,
    ) -> Result<Vec<ValueCalls>, String> {
        let db = &self.database;
        let mut conditions = self.agent_conditions(filter);
        if let Some(method) = method {
            // A method of a class loaded by several loaders is named with its loader.
            let with_loader = format!("{method} [loader ");
            conditions.push(format!(
                "(method = {} OR substring(method, 1, {}) = {})",
                quoted(method),
                with_loader.len(),
                quoted(&with_loader)
            ));
        }
        let answer = self.execute(
            &format!(
                "SELECT method, spec, value_type, value, sum(calls) AS calls, \
                 sum(wall_total_ns) AS wall_total_ns, sum(cpu_total_ns) AS cpu_total_ns, \
                 max(wall_max_ns) AS wall_max_ns, max(cpu_max_ns) AS cpu_max_ns \
                 FROM {db}.traced_values FINAL WHERE {} \
                 GROUP BY method, spec, value_type, value \
                 ORDER BY wall_total_ns DESC, method, spec, value FORMAT JSONEachRow",
                conditions.join(" AND ")
            ),
            "",
        )?;
        #[derive(Deserialize)]
        struct Row {
            method: String,
            spec: String,
            value_type: String,
            value: String,
            calls: NumberOrText,
            wall_total_ns: NumberOrText,
            cpu_total_ns: NumberOrText,
            wall_max_ns: NumberOrText,
            cpu_max_ns: NumberOrText,
        }
        rows(&answer, |row: Row| {
            // Back to the one spelling the format has (the field is &'static).
            let value_type = ValueType::parse_value(&row.value_type)
                .map(ValueType::as_str)
                .map_err(|why| format!("ClickHouse's traced_values: {why}"))?;
            Ok(ValueCalls {
                method: row.method,
                spec: row.spec,
                value_type,
                value: row.value,
                calls: row.calls.value()?,
                wall_total_ns: row.wall_total_ns.value()?,
                cpu_total_ns: row.cpu_total_ns.value()?,
                wall_max_ns: row.wall_max_ns.value()?,
                cpu_max_ns: row.cpu_max_ns.value()?,
            })
        })
    }

    /// Calls per method in the traces of the agents and time `filter` takes: the methodEntry
    /// elements, named by their trace's methodDef and classDef, counted in ClickHouse; the
    /// `top` most called, as (`package.Class.method`, calls).
    pub fn method_calls(
        &self,
        filter: &WindowFilter,
        top: u32,
    ) -> Result<Vec<(String, u64)>, String> {
        let db = &self.database;
        let attribute =
            |name: &str| format!("attribute_values[indexOf(attribute_names, '{name}')]");
        let answer = self.execute(
            &format!(
                "SELECT concat(class, '.', method) AS name, sum(calls) AS total FROM \
                 (SELECT trace, class_id, method, calls FROM \
                 (SELECT trace, {method_ref} AS method_id, count() AS calls \
                 FROM {db}.trace_elements FINAL WHERE element = 'methodEntry' AND {conditions} \
                 GROUP BY trace, method_id) ANY LEFT JOIN \
                 (SELECT trace, {method_id} AS method_id, {name} AS method, \
                 {class_ref} AS class_id FROM {db}.trace_elements FINAL \
                 WHERE element = 'methodDef') USING (trace, method_id)) ANY LEFT JOIN \
                 (SELECT trace, {class_id} AS class_id, {name} AS class \
                 FROM {db}.trace_elements FINAL WHERE element = 'classDef') \
                 USING (trace, class_id) GROUP BY name ORDER BY total DESC, name LIMIT {top} \
                 FORMAT JSONEachRow",
                method_ref = attribute("methodIdRef"),
                method_id = attribute("methodId"),
                class_ref = attribute("classIdRef"),
                class_id = attribute("classId"),
                name = attribute("name"),
                conditions = self.agent_conditions(filter).join(" AND "),
            ),
            "",
        )?;
        #[derive(Deserialize)]
        struct Row {
            name: String,
            total: NumberOrText,
        }
        rows(&answer, |row: Row| Ok((row.name, row.total.value()?)))
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

    /// The samples of each `bucket_seconds` of the windows `filter` takes, every method's:
    /// (bucket's start in seconds since the epoch, samples), in time order. What a bucket's top
    /// methods leave out is its total less theirs. Summed in ClickHouse.
    pub fn samples_over_time(
        &self,
        filter: &WindowFilter,
        bucket_seconds: u64,
    ) -> Result<Vec<(u64, u64)>, String> {
        let db = &self.database;
        let bucket = bucket_start(bucket_seconds);
        let answer = self.execute(
            &format!(
                "SELECT {bucket} AS bucket, sum(count) AS total FROM {db}.samples WHERE {} \
                 GROUP BY bucket ORDER BY bucket FORMAT JSONEachRow",
                self.conditions(filter)
            ),
            "",
        )?;
        #[derive(Deserialize)]
        struct Row {
            bucket: NumberOrText,
            total: NumberOrText,
        }
        rows(&answer, |row: Row| {
            Ok((row.bucket.value()?, row.total.value()?))
        })
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
        let bucket = bucket_start(bucket_seconds);
        let answer = self.execute(
            &format!(
                "SELECT bucket, leaf, total FROM (SELECT bucket, leaf, sum(samples) AS total FROM \
                 (SELECT {bucket} AS bucket, stack, \
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
        let event = filter.event.as_deref().unwrap_or("cpu");
        let mut conditions = vec![format!("event = {}", quoted(event))];
        conditions.extend(self.agent_conditions(filter));
        for label in &filter.sample_labels {
            conditions.push(format!("has(labels, {})", quoted(label)));
        }
        conditions.join(" AND ")
    }

    /// The conditions on agents and time of `filter` (true where it has none), for any table
    /// with `agent` and `time`.
    fn agent_conditions(&self, filter: &WindowFilter) -> Vec<String> {
        let db = &self.database;
        let mut conditions = vec!["1".to_string()];
        if let Some(agent) = filter.agent {
            conditions.push(format!("agent = '{agent}'"));
        }
        for label in &filter.labels {
            conditions.push(format!(
                "agent IN (SELECT agent FROM {db}.agents WHERE has(labels, {}))",
                quoted(label)
            ));
        }
        if let Some(since) = filter.since {
            conditions.push(format!("time >= toDateTime({since})"));
        }
        if let Some(until) = filter.until {
            conditions.push(format!("time < toDateTime({until})"));
        }
        conditions
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

/// What ClickHouse says of an agent's claim on its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The id is this agent's: its windows go in.
    Granted,
    /// Another identity key holds the id: its windows stay in this collector's store.
    Refused,
    /// A claim too recent to trust: ask again later.
    Unsettled,
}

/// The key of the stacks table's rows: HMAC-SHA256 of a stack's frames, each frame's length
/// first so that no two stacks meet, cut to 64 bits. Under a key agents never see, an agent
/// can't craft frames whose row would replace another stack's.
pub struct StackKey(hmac::Key);

impl StackKey {
    pub fn stack(&self, frames: &[String]) -> u64 {
        let mut context = hmac::Context::with_key(&self.0);
        for frame in frames {
            context.update(&(frame.len() as u64).to_le_bytes());
            context.update(frame.as_bytes());
        }
        let tag = context.sign();
        let mut first = [0u8; 8];
        first.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_le_bytes(first)
    }
}

/// Bytes as lowercase hexadecimal.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
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
    /// The stack key, read when the schema is made.
    stack_key: Option<StackKey>,
    /// Stacks inserted since the last failure, by hash.
    known: HashSet<u64>,
    /// Each trace's elements and whether it ended, as last recorded.
    traces: HashMap<Uuid, (u64, bool)>,
    /// Days of data kept (the rest is dropped by day), and when it was last enforced.
    retention_days: Option<u32>,
    retention_checked: Option<std::time::Instant>,
}

impl ClickHouseSink {
    pub fn new(clickhouse: ClickHouse) -> ClickHouseSink {
        ClickHouseSink {
            clickhouse,
            stack_key: None,
            known: HashSet::new(),
            traces: HashMap::new(),
            retention_days: None,
            retention_checked: None,
        }
    }

    /// Keeps `days` days of windows, values and elements (today included): older days are
    /// dropped within an hour of their turn.
    pub fn with_retention(mut self, days: u32) -> ClickHouseSink {
        self.retention_days = Some(days);
        self
    }
}

impl WindowSink for ClickHouseSink {
    fn name(&self) -> &str {
        "ClickHouse"
    }

    fn prepare(&mut self) -> Result<(), String> {
        // After a failure ClickHouse may have been emptied: insert every stack again.
        self.known.clear();
        self.traces.clear();
        self.clickhouse.create_schema()?;
        self.stack_key = Some(self.clickhouse.stack_key()?);
        Ok(())
    }

    fn claim_agent(&mut self, agent: &AgentEntry) -> Result<Option<bool>, String> {
        Ok(
            match (self.clickhouse).claim_identity(agent.agent, agent.identity.as_deref())? {
                Claim::Granted => Some(true),
                Claim::Refused => Some(false),
                Claim::Unsettled => None,
            },
        )
    }

    fn resume_point(&mut self, agent: Uuid) -> Result<u64, String> {
        self.clickhouse.forwarded(agent)
    }

    fn record_agent(&mut self, agent: &AgentEntry, catalog: &Catalog) -> Result<(), String> {
        self.clickhouse.insert_hierarchy(agent, catalog)
    }

    fn takes_traces(&self) -> bool {
        true
    }

    fn maintain(&mut self) -> Result<(), String> {
        let Some(days) = self.retention_days else {
            return Ok(());
        };
        let due =
            (self.retention_checked).is_none_or(|checked| checked.elapsed() >= RETENTION_PERIOD);
        if !due {
            return Ok(());
        }
        self.retention_checked = Some(std::time::Instant::now());
        let dropped = self.clickhouse.drop_days_before(&date_of(
            now_seconds().saturating_sub(u64::from(days.saturating_sub(1)) * 86_400),
        ))?;
        if !dropped.is_empty() {
            tracing::info!(
                "ClickHouse: dropped the days before the last {days} (--retention-days): {}",
                dropped.join(", ")
            );
        }
        Ok(())
    }

    fn record_traces(&mut self, traces: &[TraceEntry]) -> Result<(), String> {
        let changed: Vec<TraceEntry> = (traces.iter())
            .filter(|trace| self.traces.get(&trace.trace) != Some(&(trace.elements, trace.ended)))
            .cloned()
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        self.clickhouse.insert_traces(&changed)?;
        for trace in changed {
            self.traces
                .insert(trace.trace, (trace.elements, trace.ended));
        }
        Ok(())
    }

    fn insert(&mut self, batch: &[AgentBatch]) -> Result<(), String> {
        let windows: Vec<(Uuid, &[Window])> = (batch.iter())
            .filter(|taken| !taken.windows.is_empty())
            .map(|taken| (taken.agent.agent, taken.windows.as_slice()))
            .collect();
        if !windows.is_empty() {
            let key = (self.stack_key.as_ref()).ok_or("ClickHouse: no stack key yet")?;
            self.clickhouse
                .insert_windows(&windows, key, &mut self.known)?;
        }
        let elements: Vec<(Uuid, &[ElementRow])> = (batch.iter())
            .filter(|taken| !taken.elements.is_empty())
            .map(|taken| (taken.agent.agent, taken.elements.as_slice()))
            .collect();
        if !elements.is_empty() {
            self.clickhouse.insert_elements(&elements)?;
        }
        Ok(())
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
    fn stack_keys_tell_frames_apart_stay_put_and_depend_on_the_key() {
        let key = |secret: &[u8]| StackKey(hmac::Key::new(hmac::HMAC_SHA256, secret));
        let (one, other) = (key(b"one"), key(b"other"));
        let stack = |key: &StackKey, frames: &[&str]| {
            key.stack(&frames.iter().map(|f| f.to_string()).collect::<Vec<_>>())
        };
        assert_ne!(stack(&one, &["a.b", "c"]), stack(&one, &["a", "b.c"]));
        assert_ne!(stack(&one, &["ab"]), stack(&one, &["a", "b"]));
        assert_eq!(stack(&one, &["Split.main"]), stack(&one, &["Split.main"]));
        assert_ne!(stack(&one, &["Split.main"]), stack(&other, &["Split.main"]));
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
