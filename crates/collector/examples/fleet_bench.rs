//! The fleet store benchmark: a day of simulated JVMs' profile windows loaded into ClickHouse
//! and into the collector's own SQLite store side by side, then the same flame-graph queries
//! asked of both, and the bytes each keeps on disk (BENCHMARKS.md, "The fleet's store").
//!
//! The windows are a real JVM's: an HPROF binary stream recorded in continuous mode and
//! exported (`openprof export ID --agent`), decoded as the forwarder decodes it, then replayed
//! cyclically as `--agents` agents of `--services` services, one window every `--period`
//! seconds through one UTC day. bench/fleet_store_bench.py records the stream, starts
//! ClickHouse and runs this; its figures come out as `name=value` lines.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use openprof_collector::clickhouse::{ClickHouse, WindowFilter};
use openprof_collector::store::sqlite::SqliteStore;
use openprof_collector::store::{AgentEntry, AgentInfo, Received, Store, StoreError};
use openprof_collector::windows::{Window, WindowDecoder};
use openprof_format::hprof_binary::{HprofWriter, Record};
use openprof_format::wire::FrameKind;
use uuid::Uuid;

const USAGE: &str = "\
fleet_bench: ClickHouse against the collector's SQLite store, on one day of simulated JVMs.

usage: cargo run --release -p openprof-collector --example fleet_bench -- \\
           --recording FILE --clickhouse URL --store DIR [options]

  --recording FILE   an agent's HPROF binary stream in continuous mode, as
                     `openprof export ID --agent --store DIR -o FILE` writes it
  --clickhouse URL   ClickHouse's HTTP interface (http://HOST:PORT)
  --database NAME    the database to fill; dropped first (default fleet_bench)
  --store DIR        a new directory for the SQLite store
  --agents N         simulated JVMs (default 100)
  --services N       services they belong to, round robin (default 10)
  --windows N        windows per agent (default 8640: a day at 10 s)
  --period S         seconds between an agent's windows (default 10)
  --start SECONDS    the day's first second, UTC (default 1795564800: 2026-11-25)
  --batch N          windows of one agent per call while loading the day, as the forwarder
                     sends them when catching up (default 60)
  --live-steps N     but each agent's last N windows go one per call, as the forwarder sends
                     windows as they come (default 3)
  --rounds N         rounds of the queries; the median is reported (default 5)
  --shared-stacks    services share their stacks (default: each service's stacks are its
                     own, their outermost frame prefixed with the service's name)
  --server-pid PID   ClickHouse's server process: its CPU time while loading is reported

Loads the day into both stores, timing only the inserts (ClickHouse::insert_windows) and the
appends (Store::append) of the same windows; asks both for the flame graph of a service over
the day's last hour and over the day, and of one agent over the day (ClickHouse sums in
ClickHouse; the store's frames are read and decoded and the windows in range summed, as a
collector without ClickHouse has to), checks the two agree, and measures the bytes on disk.
";

/// What the command line asks for.
struct Args {
    recording: PathBuf,
    clickhouse: String,
    database: String,
    store: PathBuf,
    agents: usize,
    services: usize,
    windows: usize,
    period: u64,
    start: u64,
    live_steps: usize,
    batch: usize,
    rounds: usize,
    shared_stacks: bool,
    /// ClickHouse's server process, whose CPU time the load is charged.
    server_pid: Option<u32>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut recording = None;
    let mut clickhouse = None;
    let mut store = None;
    let mut args = Args {
        recording: PathBuf::new(),
        clickhouse: String::new(),
        database: "fleet_bench".into(),
        store: PathBuf::new(),
        agents: 100,
        services: 10,
        windows: 8640,
        period: 10,
        start: 1_795_564_800,
        live_steps: 3,
        batch: 60,
        rounds: 5,
        shared_stacks: false,
        server_pid: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(name) = given.next() {
        if name == "--help" || name == "-h" {
            return Ok(None);
        }
        if name == "--shared-stacks" {
            args.shared_stacks = true;
            continue;
        }
        let value = given.next().ok_or(format!("{name} needs a value"))?;
        let number = |value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("{name} {value}: not a number"))
        };
        match name.as_str() {
            "--recording" => recording = Some(PathBuf::from(value)),
            "--clickhouse" => clickhouse = Some(value),
            "--database" => args.database = value,
            "--store" => store = Some(PathBuf::from(value)),
            "--agents" => args.agents = number(&value)? as usize,
            "--services" => args.services = number(&value)? as usize,
            "--windows" => args.windows = number(&value)? as usize,
            "--period" => args.period = number(&value)?,
            "--start" => args.start = number(&value)?,
            "--live-steps" => args.live_steps = number(&value)? as usize,
            "--batch" => args.batch = number(&value)? as usize,
            "--rounds" => args.rounds = number(&value)? as usize,
            "--server-pid" => args.server_pid = Some(number(&value)? as u32),
            _ => return Err(format!("unknown option {name}")),
        }
    }
    args.recording = recording.ok_or("--recording is missing")?;
    args.clickhouse = clickhouse.ok_or("--clickhouse is missing")?;
    args.store = store.ok_or("--store is missing")?;
    if args.agents == 0 || args.services == 0 || args.services > args.agents {
        return Err("give at least one agent per service".into());
    }
    if args.windows == 0 || args.batch == 0 || args.rounds == 0 || args.period == 0 {
        return Err("--windows, --batch, --rounds and --period must be above 0".into());
    }
    args.live_steps = args.live_steps.min(args.windows);
    Ok(Some(args))
}

fn main() -> ExitCode {
    match parse_args() {
        Ok(Some(args)) => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("fleet_bench: {why}");
                ExitCode::FAILURE
            }
        },
        Ok(None) => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("fleet_bench: {why}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// One figure for the driver script.
fn figure(name: &str, value: impl std::fmt::Display) {
    println!("{name}={value}");
}

fn progress(text: &str) {
    eprintln!("fleet_bench: {text}");
}

/// One service's recorded windows, unrolled so that any `length` consecutive windows of the
/// cycle, from any place in it, lie side by side: a batch is a slice of it, re-timed in place,
/// and no window is copied while the clock runs.
struct Service {
    name: String,
    /// The cycle's windows, then its first `length - 1` again.
    unrolled: Vec<Window>,
}

/// One simulated JVM.
struct Agent {
    id: Uuid,
    service: usize,
    /// Where in the recorded cycle its first window is, so that agents of a service are not
    /// in step (their windows then differ at any moment, as real JVMs' do).
    phase: usize,
    /// Its first cycle of frames as its agent would send them (each window's new stacks
    /// defined before its CPU SAMPLES, the stream's header in the first), then the body of
    /// each window of the cycle once every stack is known: its CPU SAMPLES record alone.
    first: Bodies,
    steady: Bodies,
}

impl Agent {
    /// The body of its frame `k` (0-based).
    fn body(&self, k: usize) -> &[u8] {
        let cycle = self.steady.len();
        if k < cycle {
            &self.first[k]
        } else {
            &self.steady[(k + self.phase) % cycle]
        }
    }
}

/// When agent `index` received its window `k`, ns since the epoch: every `period` seconds
/// from the day's start, agents spread over the period.
fn received_ns(args: &Args, index: usize, k: usize) -> u64 {
    let period_ns = args.period * 1_000_000_000;
    (args.start + k as u64 * args.period) * 1_000_000_000
        + index as u64 * period_ns / args.agents as u64
}

fn samples(window: &Window) -> u64 {
    window.stacks.iter().map(|(_, count)| count).sum()
}

fn run(args: &Args) -> Result<(), String> {
    let recorded = read_recording(&args.recording)?;
    let cycle = recorded.len();
    let recorded_bytes = std::fs::metadata(&args.recording)
        .map_err(|error| format!("{}: {error}", args.recording.display()))?
        .len();
    let mut distinct = std::collections::HashSet::new();
    for window in &recorded {
        distinct.extend(window.stacks.iter().map(|(stack, _)| &stack.frames));
    }
    let recorded_samples: u64 = recorded.iter().map(samples).sum();
    let recorded_rows: usize = recorded.iter().map(|window| window.stacks.len()).sum();
    figure("recorded.windows", cycle);
    figure("recorded.stacks", distinct.len());
    figure(
        "recorded.samples_per_window",
        recorded_samples as f64 / cycle as f64,
    );
    figure(
        "recorded.stacks_per_window",
        recorded_rows as f64 / cycle as f64,
    );
    figure(
        "recorded.bytes_per_window",
        recorded_bytes as f64 / cycle as f64,
    );

    let length = args.batch.max(1);
    let mut services: Vec<Service> = (0..args.services)
        .map(|index| {
            let name = format!("service-{index:02}");
            let own = renamed(&recorded, (!args.shared_stacks).then_some(name.as_str()));
            let unrolled = (0..cycle + length.max(cycle) - 1)
                .map(|at| own[at % cycle].clone())
                .collect();
            Service { name, unrolled }
        })
        .collect();
    drop(recorded);
    progress("encoding the agents' streams");
    let agents: Vec<Agent> = (0..args.agents)
        .map(|index| {
            let service = index % args.services;
            let phase = index % cycle;
            let windows = &services[service].unrolled[phase..phase + cycle];
            let (first, steady) = encode_stream(windows, args.start * 1000)?;
            // `steady` is in the order of the agent's first cycle: put it in the cycle's.
            let mut by_place = vec![Vec::new(); cycle];
            for (at, body) in steady.into_iter().enumerate() {
                by_place[(at + phase) % cycle] = body;
            }
            Ok(Agent {
                id: Uuid::from_u128(0x0f1e_e700_0000_4000_8000_0000_0000_0000 + index as u128),
                service,
                phase,
                first,
                steady: by_place,
            })
        })
        .collect::<Result<_, String>>()?;
    check_stream(&agents[0], &services[0], args)?;
    let replayed_bytes: usize = agents[0].first.iter().map(Vec::len).sum();
    figure(
        "replayed.bytes_per_window",
        replayed_bytes as f64 / cycle as f64,
    );
    let steady_bytes: usize = agents[0].steady.iter().map(Vec::len).sum();
    figure(
        "replayed.steady_bytes_per_window",
        steady_bytes as f64 / cycle as f64,
    );

    // Both stores empty, the agents known to both.
    let clickhouse = ClickHouse::new(&args.clickhouse, &args.database)?;
    http(
        &args.clickhouse,
        &format!("DROP DATABASE IF EXISTS {}", args.database),
    )?;
    clickhouse.create_schema()?;
    let stack_key = clickhouse.stack_key()?;
    if args.store.exists() {
        return Err(format!(
            "--store {}: give a directory that does not exist yet",
            args.store.display()
        ));
    }
    let store = SqliteStore::open(&args.store).map_err(|error| error.to_string())?;
    for (index, agent) in agents.iter().enumerate() {
        store
            .open_agent(&AgentInfo {
                agent: agent.id,
                hostname: format!("host-{index:03}"),
                pid: 1000 + index as u32,
                format: "b".into(),
                options: format!(
                    "cpu=samples,format=b,continuous={}s,label=service:{}",
                    args.period, services[agent.service].name
                ),
            })
            .map_err(|error| error.to_string())?;
    }
    // The forwarder records an agent as the store's catalog describes it.
    let entries: HashMap<Uuid, AgentEntry> = store
        .catalog()
        .map_err(|error| error.to_string())?
        .agents
        .into_iter()
        .map(|entry| (entry.agent, entry))
        .collect();
    for agent in &agents {
        clickhouse.insert_agent(&entries[&agent.id])?;
    }

    let fleet_windows = args.agents * args.windows;
    let mut fleet_samples = 0u64;
    let mut fleet_rows = 0u64;
    let mut known = std::collections::HashSet::new();
    let mut totals = [LoadTotals::default(), LoadTotals::default()];
    let loading = Instant::now();
    let mut last_report = Instant::now();
    // The day in batches, but for its last windows, which go one per call: by then every
    // stack is known and ClickHouse holds many parts, as for a fleet that has run for a while.
    let live_from = args.windows - args.live_steps;
    let mut server_cpu = [0.0f64; 2];
    let mut store_before_live = 0;
    let mut k = 0;
    while k < args.windows {
        let (shape, count) = if k >= live_from {
            (0, 1)
        } else {
            (1, args.batch.min(live_from - k))
        };
        if k == live_from {
            store_before_live = directory_bytes(&args.store.join("segments"));
        }
        let cpu_before = cpu_seconds(args.server_pid);
        for (index, agent) in agents.iter().enumerate() {
            let service = &mut services[agent.service];
            let at = (k + agent.phase) % cycle;
            let batch = &mut service.unrolled[at..at + count];
            let mut frames = Vec::with_capacity(count);
            for (offset, window) in batch.iter_mut().enumerate() {
                window.sequence = (k + offset + 1) as u64;
                window.ordinal = 0;
                window.received_ns = received_ns(args, index, k + offset);
                frames.push(Received {
                    agent: agent.id,
                    kind: FrameKind::Hprof,
                    sequence: window.sequence,
                    body: agent.body(k + offset).to_vec(),
                    summary: None,
                    loss: None,
                    received_ns: window.received_ns,
                });
            }
            let batch = &service.unrolled[at..at + count];
            let batch_samples: u64 = batch.iter().map(samples).sum();
            fleet_samples += batch_samples;
            fleet_rows += batch.iter().map(|w| w.stacks.len() as u64).sum::<u64>();
            let totals = &mut totals[shape];
            totals.windows += count as u64;
            totals.samples += batch_samples;
            totals.calls += 1;
            let (began, cpu) = (Instant::now(), thread_cpu_ns());
            clickhouse.insert_windows(&[(agent.id, batch)], &stack_key, &mut known)?;
            totals.clickhouse += began.elapsed();
            totals.clickhouse_cpu_ns += thread_cpu_ns() - cpu;
            let (began, cpu) = (Instant::now(), thread_cpu_ns());
            store.append(&frames).map_err(|error| error.to_string())?;
            totals.sqlite += began.elapsed();
            totals.sqlite_cpu_ns += thread_cpu_ns() - cpu;
        }
        server_cpu[shape] += cpu_seconds(args.server_pid) - cpu_before;
        k += count;
        if k == args.windows && args.live_steps > 0 {
            // What one window per commit costs the store's segments: nothing shares a zstd
            // block. (The catalog's part is its row per frame, the same either way.)
            let grown = directory_bytes(&args.store.join("segments")) - store_before_live;
            figure(
                "disk.sqlite.live_segment_bytes_per_window",
                grown as f64 / (args.live_steps * args.agents) as f64,
            );
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            progress(&format!(
                "loaded {k} of {} windows per agent in {:.0} s (ClickHouse {:.0} s, SQLite {:.0} s)",
                args.windows,
                loading.elapsed().as_secs_f64(),
                (totals[0].clickhouse + totals[1].clickhouse).as_secs_f64(),
                (totals[0].sqlite + totals[1].sqlite).as_secs_f64(),
            ));
        }
    }
    figure("fleet.windows", fleet_windows);
    figure("fleet.samples", fleet_samples);
    figure("fleet.rows", fleet_rows);
    figure("load.seconds", loading.elapsed().as_secs_f64());
    for (shape, totals) in ["live", "bulk"].iter().zip(&totals) {
        if totals.calls == 0 {
            continue;
        }
        for (sink, time, cpu_ns) in [
            ("clickhouse", totals.clickhouse, totals.clickhouse_cpu_ns),
            ("sqlite", totals.sqlite, totals.sqlite_cpu_ns),
        ] {
            let seconds = time.as_secs_f64();
            let name = format!("ingest.{shape}.{sink}");
            figure(&format!("{name}.seconds"), seconds);
            figure(&format!("{name}.collector_cpu_s"), cpu_ns as f64 / 1e9);
            figure(
                &format!("{name}.windows_per_s"),
                totals.windows as f64 / seconds,
            );
            figure(
                &format!("{name}.samples_per_s"),
                totals.samples as f64 / seconds,
            );
            figure(
                &format!("{name}.ms_per_call"),
                seconds * 1000.0 / totals.calls as f64,
            );
        }
        if args.server_pid.is_some() {
            figure(
                &format!("ingest.{shape}.clickhouse.server_cpu_s"),
                server_cpu[if *shape == "live" { 0 } else { 1 }],
            );
        }
    }

    // ClickHouse merges the inserted parts in the background: measure once it is done.
    let waited = Instant::now();
    let cpu_before_wait = cpu_seconds(args.server_pid);
    while http(&args.clickhouse, "SELECT count() FROM system.merges")?.trim() != "0"
        && waited.elapsed() < Duration::from_secs(600)
    {
        std::thread::sleep(Duration::from_secs(1));
    }
    figure(
        "disk.clickhouse.merge_wait_s",
        waited.elapsed().as_secs_f64(),
    );
    if args.server_pid.is_some() {
        figure(
            "ingest.merge.clickhouse.server_cpu_s",
            cpu_seconds(args.server_pid) - cpu_before_wait,
        );
    }
    disk_figures(args)?;

    progress("querying");
    queries(args, &clickhouse, &store, &agents, &services)
}

/// The time the inserts and appends of one shape of batch took, and what they carried.
#[derive(Default)]
struct LoadTotals {
    windows: u64,
    samples: u64,
    calls: u64,
    clickhouse: Duration,
    sqlite: Duration,
    /// This thread's CPU time in the calls: the collector's part of the cost.
    clickhouse_cpu_ns: u64,
    sqlite_cpu_ns: u64,
}

/// The CPU time of the calling thread so far, ns (the scheduler's own count, in
/// /proc/thread-self/schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The recorded stream's windows, as the forwarder decodes them, the empty ones left out.
fn read_recording(path: &Path) -> Result<Vec<Window>, String> {
    let bytes = std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
    let windows: Vec<Window> = WindowDecoder::default()
        .feed(&bytes, 1, 0)
        .map_err(|why| format!("{}: {why}", path.display()))?
        .into_iter()
        .filter(|window| window.event == "cpu" && !window.stacks.is_empty())
        .collect();
    if windows.is_empty() {
        return Err(format!(
            "{}: no CPU window; record with cpu=samples,format=b,continuous=10s",
            path.display()
        ));
    }
    Ok(windows)
}

/// The windows with their outermost frames prefixed by `service` (`None`: as they are), so
/// that each service has stacks of its own, as services running different code do.
fn renamed(windows: &[Window], service: Option<&str>) -> Vec<Window> {
    let mut windows = windows.to_vec();
    if let Some(service) = service {
        for window in &mut windows {
            for (stack, _) in &mut window.stacks {
                if let Some(root) = stack.frames.first_mut() {
                    *root = format!("{service}:{root}");
                }
            }
        }
    }
    windows
}

/// Names in one simulated agent's stream: ids given in the order first written, as the agent
/// gives them.
#[derive(Default)]
struct StreamNames {
    strings: HashMap<String, u64>,
    classes: HashMap<String, u32>,
    frames: HashMap<String, u64>,
    traces: HashMap<Vec<String>, u32>,
}

impl StreamNames {
    fn string(&mut self, text: &str, records: &mut Vec<Record>) -> u64 {
        if let Some(&id) = self.strings.get(text) {
            return id;
        }
        let id = self.strings.len() as u64 + 1;
        self.strings.insert(text.to_string(), id);
        records.push(Record::Utf8 {
            id,
            text: text.as_bytes().to_vec(),
        });
        id
    }

    /// A frame `package.Class.method` as a class and a method (what has no class, as a
    /// method alone: the decoder gives it back unchanged).
    fn frame(&mut self, frame: &str, records: &mut Vec<Record>) -> u64 {
        if let Some(&id) = self.frames.get(frame) {
            return id;
        }
        let (class, method) = match frame.rsplit_once('.') {
            Some((class, method)) if !class.is_empty() => (Some(class), method),
            _ => (None, frame),
        };
        let class_serial = match class {
            None => 0,
            Some(class) => match self.classes.get(class) {
                Some(&serial) => serial,
                None => {
                    let name_id = self.string(class, records);
                    let serial = self.classes.len() as u32 + 1;
                    self.classes.insert(class.to_string(), serial);
                    records.push(Record::LoadClass {
                        class_serial: serial,
                        class_id: 0x1000 + u64::from(serial),
                        stack_serial: 0,
                        name_id,
                    });
                    serial
                }
            },
        };
        let method_name_id = self.string(method, records);
        let id = self.frames.len() as u64 + 1;
        self.frames.insert(frame.to_string(), id);
        records.push(Record::StackFrame {
            frame_id: id,
            method_name_id,
            signature_id: 0,
            source_id: 0,
            class_serial,
            line: -1,
        });
        id
    }

    fn trace(&mut self, frames: &[String], records: &mut Vec<Record>) -> u32 {
        if let Some(&serial) = self.traces.get(frames) {
            return serial;
        }
        // Traces list their frames innermost first.
        let ids = frames
            .iter()
            .rev()
            .map(|frame| self.frame(frame, records))
            .collect();
        let serial = self.traces.len() as u32 + 1;
        self.traces.insert(frames.to_vec(), serial);
        records.push(Record::StackTrace {
            stack_serial: serial,
            thread_serial: 1,
            frames: ids,
        });
        serial
    }
}

/// Frame bodies, one per window of a cycle.
type Bodies = Vec<Vec<u8>>;

/// One agent's stream over one cycle of `windows`: each window's frame as the agent sends it
/// (the header first; the stacks not sent before, then the CPU SAMPLES record), and each
/// window's CPU SAMPLES record alone, what its frame is once every stack has been sent.
fn encode_stream(windows: &[Window], millis: u64) -> Result<(Bodies, Bodies), String> {
    let mut names = StreamNames::default();
    let mut first = Vec::with_capacity(windows.len());
    let mut steady = Vec::with_capacity(windows.len());
    for (at, window) in windows.iter().enumerate() {
        let mut records = Vec::new();
        let traces = window
            .stacks
            .iter()
            .map(|(stack, count)| (*count as u32, names.trace(&stack.frames, &mut records)))
            .collect();
        let samples = Record::CpuSamples {
            total: samples(window) as u32,
            traces,
        };
        let mut writer = if at == 0 {
            HprofWriter::new(Vec::new(), 8, millis)
        } else {
            Ok(HprofWriter::continuing(Vec::new(), 8))
        }
        .map_err(|error| error.to_string())?;
        for record in records.iter().chain([&samples]) {
            writer.record(record).map_err(|error| error.to_string())?;
        }
        first.push(writer.finish().map_err(|error| error.to_string())?);
        let mut writer = HprofWriter::continuing(Vec::new(), 8);
        writer.record(&samples).map_err(|error| error.to_string())?;
        steady.push(writer.finish().map_err(|error| error.to_string())?);
    }
    Ok((first, steady))
}

/// The stacks of a window by their frames, labels aside (the ClickHouse query sums them so).
fn by_frames(windows: &[&Window]) -> HashMap<Vec<String>, u64> {
    let mut sums = HashMap::new();
    for window in windows {
        for (stack, count) in &window.stacks {
            *sums.entry(stack.frames.clone()).or_default() += count;
        }
    }
    sums
}

/// Checks that an agent's stream decodes, over more than a cycle, to its service's windows.
fn check_stream(agent: &Agent, service: &Service, args: &Args) -> Result<(), String> {
    let cycle = agent.steady.len();
    let mut decoder = WindowDecoder::default();
    for k in 0..(2 * cycle).min(args.windows) {
        let decoded = decoder.feed(agent.body(k), k as u64 + 1, 0)?;
        let expected = &service.unrolled[(k + agent.phase) % cycle];
        if decoded.len() != 1 || by_frames(&[&decoded[0]]) != by_frames(&[expected]) {
            return Err(format!(
                "the replayed stream's window {k} decodes to other stacks than recorded"
            ));
        }
    }
    Ok(())
}

/// Runs a statement over ClickHouse's HTTP interface; its answer (what the client of the
/// collector leaves out: system tables, dropping the database).
fn http(url: &str, statement: &str) -> Result<String, String> {
    ureq::post(&format!("{}/", url.trim_end_matches('/')))
        .send_string(statement)
        .map_err(|error| format!("ClickHouse: {statement}: {error}"))?
        .into_string()
        .map_err(|error| format!("ClickHouse: {error}"))
}

/// A process's CPU time (user and system) in seconds from /proc; 0 without a process.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let Some(stat) = pid.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
    else {
        return 0.0;
    };
    // The fields after the command's closing parenthesis; utime and stime are the 14th and
    // 15th of the line, in clock ticks (100 a second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |at: usize| fields.get(at).and_then(|text| text.parse::<f64>().ok());
    ticks(11).unwrap_or(0.0) / 100.0 + ticks(12).unwrap_or(0.0) / 100.0
}

/// The bytes of the files under a directory.
fn directory_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => total += directory_bytes(&entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn disk_figures(args: &Args) -> Result<(), String> {
    let answer = http(
        &args.clickhouse,
        &format!(
            "SELECT table, count(), sum(rows), sum(data_compressed_bytes), \
             sum(data_uncompressed_bytes), sum(bytes_on_disk) FROM system.parts \
             WHERE database = '{}' AND active GROUP BY table ORDER BY table FORMAT TSV",
            args.database
        ),
    )?;
    let mut compressed = 0u64;
    let mut uncompressed = 0u64;
    let mut on_disk = 0u64;
    for line in answer.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [table, parts, rows, packed, unpacked, disk] = fields[..] else {
            return Err(format!("system.parts answered {line:?}"));
        };
        let number = |text: &str| text.parse::<u64>().unwrap_or(0);
        figure(&format!("disk.clickhouse.{table}.parts"), parts);
        figure(&format!("disk.clickhouse.{table}.rows"), rows);
        figure(&format!("disk.clickhouse.{table}.compressed_bytes"), packed);
        figure(
            &format!("disk.clickhouse.{table}.uncompressed_bytes"),
            unpacked,
        );
        compressed += number(packed);
        uncompressed += number(unpacked);
        on_disk += number(disk);
    }
    // Which columns the bytes go to: what a schema change would save.
    let answer = http(
        &args.clickhouse,
        &format!(
            "SELECT table, name, data_compressed_bytes, data_uncompressed_bytes \
             FROM system.columns WHERE database = '{}' ORDER BY table, name FORMAT TSV",
            args.database
        ),
    )?;
    for line in answer.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [table, column, packed, unpacked] = fields[..] else {
            return Err(format!("system.columns answered {line:?}"));
        };
        let name = format!("disk.clickhouse.column.{table}.{column}");
        figure(&format!("{name}.compressed_bytes"), packed);
        figure(&format!("{name}.uncompressed_bytes"), unpacked);
    }
    figure("disk.clickhouse.compressed_bytes", compressed);
    figure("disk.clickhouse.uncompressed_bytes", uncompressed);
    figure("disk.clickhouse.bytes_on_disk", on_disk);
    // Everything in the directory: segments, the catalog and its write-ahead log.
    figure("disk.sqlite.bytes", directory_bytes(&args.store));
    figure(
        "disk.sqlite.segments_bytes",
        directory_bytes(&args.store.join("segments")),
    );
    Ok(())
}

/// A flame graph's input from the SQLite store: every frame of the agents read and decoded
/// (a window's stacks are named by what the stream sent before, so from the start), the
/// windows received in `[since, until)` summed per stack.
fn store_stacks(
    store: &SqliteStore,
    service: Option<&str>,
    agent: Option<Uuid>,
    since: u64,
    until: u64,
) -> Result<HashMap<Vec<String>, u64>, String> {
    let catalog = store.catalog().map_err(|error| error.to_string())?;
    let mut sums: HashMap<Vec<String>, u64> = HashMap::new();
    for entry in catalog.agents.iter().filter(|entry| {
        agent.is_none_or(|agent| agent == entry.agent)
            && service.is_none_or(|service| {
                entry
                    .labels
                    .iter()
                    .any(|(name, value)| name == "service" && value == service)
            })
    }) {
        let mut decoder = WindowDecoder::default();
        store
            .frames_after(entry.agent, 0, &mut |frame| {
                if frame.kind != FrameKind::Hprof {
                    return Ok(());
                }
                let windows = decoder
                    .feed(frame.body, frame.sequence, frame.received_ns)
                    .map_err(StoreError::Other)?;
                for window in windows {
                    let seconds = window.received_ns / 1_000_000_000;
                    if window.event != "cpu" || seconds < since || seconds >= until {
                        continue;
                    }
                    for (stack, count) in window.stacks {
                        *sums.entry(stack.frames).or_default() += count;
                    }
                }
                Ok(())
            })
            .map_err(|error| error.to_string())?;
    }
    Ok(sums)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

fn queries(
    args: &Args,
    clickhouse: &ClickHouse,
    store: &SqliteStore,
    agents: &[Agent],
    services: &[Service],
) -> Result<(), String> {
    let end = args.start + args.windows as u64 * args.period;
    let hour_start = end.saturating_sub(3600).max(args.start);
    let service = &services[0].name;
    let agent = agents[0].id;
    let asked = [
        ("service_hour", Some(service.as_str()), None, hour_start),
        ("service_day", Some(service.as_str()), None, args.start),
        ("agent_day", None, Some(agent), args.start),
    ];
    for (name, service, agent, since) in asked {
        let filter = WindowFilter {
            labels: service
                .map(|service| vec![format!("service:{service}")])
                .unwrap_or_default(),
            agent,
            since: Some(since),
            until: Some(end),
            ..WindowFilter::default()
        };
        let mut clickhouse_ms = Vec::new();
        let mut sqlite_ms = Vec::new();
        let mut answers = None;
        for _ in 0..args.rounds {
            let began = Instant::now();
            let from_clickhouse = clickhouse.stacks(&filter)?;
            clickhouse_ms.push(began.elapsed().as_secs_f64() * 1000.0);
            let began = Instant::now();
            let from_store = store_stacks(store, service, agent, since, end)?;
            sqlite_ms.push(began.elapsed().as_secs_f64() * 1000.0);
            answers = Some((from_clickhouse, from_store));
        }
        let (from_clickhouse, from_store) = answers.expect("at least one round");
        let from_clickhouse: HashMap<Vec<String>, u64> = from_clickhouse.into_iter().collect();
        let total = |sums: &HashMap<Vec<String>, u64>| sums.values().sum::<u64>();
        figure(
            &format!("query.{name}.clickhouse.ms"),
            median(clickhouse_ms),
        );
        figure(&format!("query.{name}.sqlite.ms"), median(sqlite_ms));
        figure(
            &format!("query.{name}.clickhouse.samples"),
            total(&from_clickhouse),
        );
        figure(&format!("query.{name}.sqlite.samples"), total(&from_store));
        figure(&format!("query.{name}.samples"), total(&from_store));
        figure(&format!("query.{name}.stacks"), from_store.len());
        figure(
            &format!("query.{name}.same"),
            if from_clickhouse == from_store {
                "yes"
            } else {
                "NO"
            },
        );
    }
    Ok(())
}
