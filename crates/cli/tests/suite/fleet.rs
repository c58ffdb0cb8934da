//! The fleet on ClickHouse: JVMs in continuous mode streaming to two collectors that forward
//! into one real ClickHouse server (Debian's clickhouse-server, started here on loopback ports
//! with a data directory of its own), restarted mid-run; `openprof fleet` answers from it.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use openprof_testkit::{java_command, poll, wait_for, wait_with_limit};

use crate::collector::{
    agent_options, export_agent, raw_agent_of, Collector, CONTROL_TOKEN, TOKEN,
};
use crate::helpers::{openprof, text};
use crate::views_pprof::{go_pprof, parse_top};
use openprof_format::hprof_binary::sample::one_cpu_window;

/// Where Debian's package puts the server.
const SERVER: &str = "/usr/sbin/clickhouse-server";
/// How long a step of these tests may take: a JVM's run, the forwarders catching up.
const LIMIT: Duration = Duration::from_secs(120);

/// A ClickHouse server of the test's own: its config, data and logs in `dir`.
pub(crate) struct ClickHouseServer {
    child: Option<Child>,
    dir: PathBuf,
    http_port: u16,
}

impl ClickHouseServer {
    /// None (and why, on stderr) where the server is not installed.
    pub(crate) fn start(dir: &Path) -> Option<ClickHouseServer> {
        if !Path::new(SERVER).exists() {
            eprintln!(
                "skipped: {SERVER} is missing; scripts/test installs Debian's clickhouse-server \
                 when run as root"
            );
            return None;
        }
        let free_port = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (http_port, tcp_port) = (free_port(), free_port());
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        // The one config the tests and the benchmarks fill in (scripts/clickhouse-server.xml).
        let config = include_str!("../../../../scripts/clickhouse-server.xml")
            .replace("@DIR@", &dir.display().to_string())
            .replace("@DATA@", &data.display().to_string())
            .replace("@HTTP_PORT@", &http_port.to_string())
            .replace("@TCP_PORT@", &tcp_port.to_string());
        std::fs::write(dir.join("config.xml"), config).unwrap();
        let mut server = ClickHouseServer {
            child: None,
            dir: dir.to_path_buf(),
            http_port,
        };
        server.run();
        Some(server)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Starts the server and waits until it takes connections.
    fn run(&mut self) {
        let child = Command::new(SERVER)
            .arg(format!(
                "--config-file={}",
                self.dir.join("config.xml").display()
            ))
            .current_dir(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start clickhouse-server");
        self.child = Some(child);
        poll(Duration::from_secs(60), || {
            TcpStream::connect(("127.0.0.1", self.http_port)).ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "clickhouse-server did not listen: {}",
                std::fs::read_to_string(self.dir.join("server.err.log")).unwrap_or_default()
            )
        });
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// GET `path` from the web UI at `web` (with a bearer token): the status and the body's bytes.
fn http_get(web: &str, path: &str, bearer: Option<&str>) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(web).expect("connect to the web UI");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let authorization = bearer
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {web}\r\n{authorization}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let end = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&response[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    (status, response[end + 4..].to_vec())
}

/// The agents a store holds, by id.
pub(crate) fn agents_in(store: &Path) -> Vec<String> {
    agents_listed(store, "")
}

/// The agents a store holds whose `ls` line has `with` (`format=a`), by id.
fn agents_listed(store: &Path, with: &str) -> Vec<String> {
    let listed = openprof(&["ls", "--store", store.to_str().unwrap()]);
    text(&listed.stdout)
        .lines()
        .filter(|line| line.contains(with))
        .filter_map(|line| line.trim().strip_prefix("agent "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Waits until ClickHouse holds every window of `event` of the store's HPROF agents: for each,
/// what `openprof fleet --agent A --event E` sums is the weight of its whole stored output,
/// read back by `openprof convert` with `view` options ([`stored_weight`]). Returns the
/// agents' stored weight.
pub(crate) fn wait_for_every_window(
    url: &str,
    database: &str,
    store: &Path,
    collector: &Collector,
    event: &str,
    view: &[&str],
    dir: &Path,
) -> u64 {
    let agents: Vec<String> = ["format=a", "format=b"]
        .iter()
        .flat_map(|format| agents_listed(store, format))
        .collect();
    assert!(!agents.is_empty(), "no HPROF agent in {}", store.display());
    let mut all = 0;
    for agent in agents {
        let stored = stored_weight(store, &agent, view);
        let mut held = 0;
        poll(LIMIT, || {
            let selection = ["--agent", agent.as_str(), "--event", event];
            held = try_fleet_folded(url, database, &selection, dir)
                .unwrap_or_default()
                .iter()
                .map(|(_, count)| count)
                .sum();
            assert!(
                held <= stored,
                "agent {agent}: {held} in ClickHouse, {stored} stored"
            );
            (held == stored).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "agent {agent}: ClickHouse holds {held} of the {stored} ({event}) stored\n{}",
                collector.log()
            )
        });
        all += stored;
    }
    all
}

/// The weight of an agent's whole output as its collector stored it, read back by `openprof
/// convert` with `view` options (`--event wall`): what ClickHouse holds of the agent once the
/// forwarder has every window.
pub(crate) fn stored_weight(store: &Path, agent: &str, view: &[&str]) -> u64 {
    let file = export_agent(store, agent, &format!("{agent}.hprof"));
    let folded = store.join(format!("{agent}.collapsed"));
    let mut args = vec!["convert", file.to_str().unwrap()];
    args.extend_from_slice(view);
    args.extend_from_slice(&["-o", folded.to_str().unwrap()]);
    let converted = openprof(&args);
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    std::fs::read_to_string(&folded)
        .unwrap()
        .lines()
        .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

/// CpuSplit's samples in heavy() and light(), and all of them, in an agent's stored output.
pub(crate) fn stored_samples(store: &Path, agent: &str) -> (u64, u64, u64) {
    let file = export_agent(store, agent, &format!("{agent}.hprof"));
    let bytes = std::fs::read(&file).unwrap();
    let profile =
        openprof_format::hprof_binary::read_profile(bytes.as_slice(), &mut |_| {}).unwrap();
    let (mut heavy, mut light, mut all) = (0, 0, 0);
    for row in profile.cpu_tables.iter().flat_map(|table| &table.rows) {
        match row.method.as_deref() {
            Some("CpuSplit.heavy") => heavy += row.count,
            Some("CpuSplit.light") => light += row.count,
            _ => {}
        }
        all += row.count;
    }
    (heavy, light, all)
}

/// `openprof fleet` as folded stacks: each stack (frames joined by `;`) with its samples, or
/// what it said on stderr when it found nothing or failed.
fn try_fleet_folded(
    url: &str,
    database: &str,
    selection: &[&str],
    dir: &Path,
) -> Result<Vec<(String, u64)>, String> {
    let output = dir.join("fleet.collapsed");
    let mut args = vec![
        "fleet",
        "--clickhouse",
        url,
        "--database",
        database,
        "--since",
        "1h",
        "-o",
        output.to_str().unwrap(),
    ];
    args.extend_from_slice(selection);
    let run = openprof(&args);
    if !run.status.success() {
        return Err(text(&run.stderr));
    }
    Ok(std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|line| {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            (stack.to_string(), count.parse().unwrap())
        })
        .collect())
}

/// [`try_fleet_folded`], which must succeed.
fn fleet_folded(url: &str, database: &str, selection: &[&str], dir: &Path) -> Vec<(String, u64)> {
    try_fleet_folded(url, database, selection, dir).unwrap_or_else(|stderr| panic!("{stderr}"))
}

/// `openprof fleet`'s samples by the stack's leaf method; `None` when it found nothing.
fn fleet_by_leaf(
    url: &str,
    database: &str,
    selection: &[&str],
    dir: &Path,
) -> Option<HashMap<String, u64>> {
    let mut by_leaf = HashMap::new();
    for (stack, count) in try_fleet_folded(url, database, selection, dir).ok()? {
        let leaf = stack.rsplit(';').next().unwrap().to_string();
        *by_leaf.entry(leaf).or_default() += count;
    }
    Some(by_leaf)
}

#[test]
fn two_collectors_forward_every_window_once_into_one_clickhouse_restarted_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "fleet_test";
    let stores = [dir.path().join("store-a"), dir.path().join("store-b")];
    let collectors: Vec<Collector> = stores
        .iter()
        .map(|store| {
            Collector::start_with(
                store,
                "127.0.0.1:0",
                &[
                    "--clickhouse",
                    &url,
                    "--database",
                    database,
                    "--http",
                    "127.0.0.1:0",
                ],
            )
        })
        .collect();
    // Two services of two JVMs each, one JVM of each service on each collector.
    let mut jvms = Vec::new();
    for (index, service) in ["split-a", "split-a", "split-b", "split-b"]
        .iter()
        .enumerate()
    {
        let collector = &collectors[index % 2];
        let options = agent_options(
            &collector.address,
            &format!("cpu=samples,interval=2,format=b,doe=n,continuous=1s,label=service:{service}"),
        );
        let (mut command, _dir) = java_command(Some(&options), "CpuSplit", &["3"]);
        jvms.push(command.spawn().expect("start java"));
    }
    // ClickHouse goes away while the JVMs run, once it holds windows: the windows wait in the
    // collectors' stores, as they say.
    wait_for("ClickHouse held samples of both services", LIMIT, || {
        ["split-a", "split-b"].iter().all(|service| {
            fleet_by_leaf(&url, database, &["--service", service], dir.path())
                .is_some_and(|by_leaf| by_leaf.values().sum::<u64>() > 0)
        })
    });
    clickhouse.kill();
    wait_for("the collectors kept windows in their stores", LIMIT, || {
        collectors
            .iter()
            .all(|collector| collector.log().contains("windows wait in the store"))
    });
    clickhouse.run();
    for jvm in jvms {
        let output = wait_with_limit(jvm, Duration::from_secs(180));
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    // Every agent's samples, as its collector stored them.
    let mut stored: Vec<(String, (u64, u64, u64))> = Vec::new();
    for store in &stores {
        for agent in agents_in(store) {
            let samples = stored_samples(store, &agent);
            stored.push((agent, samples));
        }
    }
    assert_eq!(stored.len(), 4, "{stored:?}");
    // The forwarders catch up: ClickHouse then holds each agent's samples exactly once.
    for (agent, (heavy, light, all)) in &stored {
        let mut total = 0;
        let by_leaf = poll(LIMIT, || {
            let by_leaf = fleet_by_leaf(&url, database, &["--agent", agent], dir.path());
            total = by_leaf.iter().flat_map(|by| by.values()).sum();
            assert!(
                total <= *all,
                "agent {agent}: ClickHouse holds {total} samples, its collector stored {all}"
            );
            by_leaf.filter(|_| total == *all)
        })
        .unwrap_or_else(|| {
            panic!(
                "agent {agent}: ClickHouse holds {total} of its {all} samples\n{}\n{}",
                collectors[0].log(),
                collectors[1].log()
            )
        });
        assert_eq!(by_leaf.get("CpuSplit.heavy").copied().unwrap_or(0), *heavy);
        assert_eq!(by_leaf.get("CpuSplit.light").copied().unwrap_or(0), *light);
    }
    // The outage was felt: windows waited in the collectors' stores meanwhile.
    let logs = format!("{}{}", collectors[0].log(), collectors[1].log());
    assert!(logs.contains("windows wait in the store"), "{logs}");
    assert!(logs.contains("ClickHouse takes windows again"), "{logs}");
    // A service's flame graph, summed in ClickHouse over its two JVMs, shows CpuSplit's split.
    for service in ["split-a", "split-b"] {
        let by_leaf = fleet_by_leaf(&url, database, &["--service", service], dir.path())
            .expect("openprof fleet answers");
        let heavy = by_leaf.get("CpuSplit.heavy").copied().unwrap_or(0) as f64;
        let light = by_leaf.get("CpuSplit.light").copied().unwrap_or(0) as f64;
        assert!(heavy + light >= 1_000.0, "{service}: {by_leaf:?}");
        let share = heavy / (heavy + light);
        assert!(
            (share - 0.75).abs() <= 0.05,
            "{service}: heavy share {share:.3}: {by_leaf:?}"
        );
    }
    // The same as pprof over HTTP, for scrapers and go tool pprof, from either collector: the
    // control credential opens it, nothing else does.
    let web = collectors[1].web.clone().expect("the web UI's address");
    let path = "/api/fleet/pprof?service=split-b&seconds=3600";
    let (status, _) = http_get(&web, path, None);
    assert_eq!(status, 401);
    let (status, _) = http_get(&web, path, Some("not-the-credential"));
    assert_eq!(status, 401);
    let (status, body) = http_get(&web, path, Some(CONTROL_TOKEN));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let pprof = dir.path().join("split-b.pb.gz");
    std::fs::write(&pprof, body).unwrap();
    let (rows, total) = parse_top(&go_pprof(dir.path(), &["-top", pprof.to_str().unwrap()]));
    let flat = |name: &str| {
        rows.iter()
            .find(|row| row.name == name)
            .map_or(0.0, |row| row.flat_percent)
    };
    let (heavy, light) = (flat("CpuSplit.heavy"), flat("CpuSplit.light"));
    assert!(total >= 1_000, "{total} samples");
    let share = heavy / (heavy + light);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "pprof: heavy {heavy} % light {light} %"
    );
    let (status, _) = http_get(&web, "/api/fleet/pprof?seconds=0", Some(CONTROL_TOKEN));
    assert_eq!(status, 400);
    // A service no agent has is told, not shown empty.
    let missing = openprof(&[
        "fleet",
        "--clickhouse",
        &url,
        "--database",
        database,
        "--service",
        "nobody",
        "-o",
        dir.path().join("none.html").to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("no windows"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn samples_carry_parameter_values_and_the_applications_context_as_labels_queried_in_clickhouse() {
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "joined_test";
    let store = dir.path().join("store");
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &[
            "--clickhouse",
            &url,
            "--database",
            database,
            "--http",
            "127.0.0.1:0",
        ],
    );
    let specs = dir.path().join("lookup.mpt");
    std::fs::write(&specs, "MptJoined.lookup(java.lang.String) 1\n").unwrap();
    let options = agent_options(
        &collector.address,
        &format!(
            "cpu=samples,interval=1,format=b,doe=n,continuous=1s,label=service:joined,mpt=@{}",
            specs.display()
        ),
    );
    let (mut command, _dir) = java_command(Some(&options), "MptJoined", &["6"]);
    let output = wait_with_limit(
        command.spawn().expect("start java"),
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    // Until the forwarder has every window: ClickHouse holds every sample the store has.
    let in_lookup = |selection: &[&str]| -> u64 {
        fleet_folded(&url, database, selection, dir.path())
            .iter()
            .filter(|(stack, _)| stack.contains("MptJoined.lookup"))
            .map(|(_, count)| count)
            .sum()
    };
    wait_for_every_window(&url, database, &store, &collector, "cpu", &[], dir.path());
    // The calls whose key was "slow" hold the slow branch's frames only.
    let slow = fleet_folded(
        &url,
        database,
        &["--label", "MptJoined.lookup(java.lang.String) 1=slow"],
        dir.path(),
    );
    let slow_samples: u64 = slow.iter().map(|(_, count)| count).sum();
    assert!(slow_samples >= 1_000, "{slow:?}");
    assert!(
        slow.iter().all(|(stack, _)| !stack.contains("fastBranch")),
        "{slow:?}"
    );
    let in_slow_branch: u64 = slow
        .iter()
        .filter(|(stack, _)| stack.contains("MptJoined.slowBranch"))
        .map(|(_, count)| count)
        .sum();
    assert!(
        in_slow_branch as f64 >= 0.9 * slow_samples as f64,
        "{slow:?}"
    );
    let fast = in_lookup(&["--label", "MptJoined.lookup(java.lang.String) 1=fast"]);
    let share = slow_samples as f64 / (slow_samples + fast) as f64;
    assert!((share - 0.8).abs() <= 0.05, "slow share {share:.3}");
    // CPU of alice's requests: three of every four, both keys alike.
    let alice = in_lookup(&["--label", "user=alice"]);
    let bob = in_lookup(&["--label", "user=bob"]);
    let share = alice as f64 / (alice + bob) as f64;
    assert!((share - 0.75).abs() <= 0.05, "alice {alice} bob {bob}");
    // Labels combine: bob's slow calls are a part of both.
    let bob_slow = in_lookup(&[
        "--label",
        "user=bob",
        "--label",
        "MptJoined.lookup(java.lang.String) 1=slow",
    ]);
    assert!(bob_slow > 0 && bob_slow < bob && bob_slow < slow_samples);
    // The same selection as pprof over HTTP, read by go tool pprof.
    let web = collector.web.clone().expect("the web UI's address");
    let (status, body) = http_get(
        &web,
        "/api/fleet/pprof?service=joined&sample_label=user%3Dbob&seconds=3600",
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let pprof = dir.path().join("bob.pb.gz");
    std::fs::write(&pprof, body).unwrap();
    let (rows, _total) = parse_top(&go_pprof(dir.path(), &["-top", pprof.to_str().unwrap()]));
    assert!(
        rows.iter().any(|row| row.name == "MptJoined.spin"),
        "{rows:?}"
    );
    let (status, _) = http_get(
        &web,
        "/api/fleet/pprof?sample_label=nolabel",
        Some(CONTROL_TOKEN),
    );
    assert_eq!(status, 400);
    let bad = openprof(&[
        "fleet",
        "--clickhouse",
        &url,
        "--label",
        "user",
        "-o",
        dir.path().join("bad.html").to_str().unwrap(),
    ]);
    assert!(
        text(&bad.stderr).contains("--label user: give NAME=VALUE"),
        "{}",
        text(&bad.stderr)
    );
    // Top methods over time, summed in ClickHouse by the second: MptJoined.spin is where the
    // CPU goes in every well-filled bucket.
    let top = openprof(&[
        "fleet",
        "--clickhouse",
        &url,
        "--database",
        database,
        "--service",
        "joined",
        "--since",
        "1h",
        "--top-over-time",
        "1s",
        "--top",
        "2",
    ]);
    assert!(top.status.success(), "{}", text(&top.stderr));
    let mut buckets: Vec<(String, u64, String)> = Vec::new();
    for line in text(&top.stdout).lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let bucket = format!("{} {}", fields[0], fields[1]);
        if buckets.last().is_none_or(|(last, ..)| *last != bucket) {
            buckets.push((bucket, fields[2].parse().unwrap(), fields[3].to_string()));
        }
    }
    let full: Vec<_> = buckets
        .iter()
        .filter(|(_, samples, _)| *samples >= 100)
        .collect();
    assert!(full.len() >= 3, "{}", text(&top.stdout));
    assert!(
        full.iter().all(|(_, _, method)| method == "MptJoined.spin"),
        "{}",
        text(&top.stdout)
    );
    // A differential view of the run's second half against its first, from two queries: the
    // last `half` seconds begin at the middle of the windows' times, and the `half` before
    // them reach back past the first window, however long the JVM took to start, the run
    // and the wait for ClickHouse.
    let span = clickhouse_answer(
        &url,
        &format!("SELECT toUInt32(min(time)), toUInt32(max(time)) FROM {database}.samples"),
    );
    let (first, last) = span
        .split_once('\t')
        .and_then(|(first, last)| Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?)))
        .unwrap_or_else(|| panic!("the windows' times: {span}"));
    assert!(last >= first + 4, "the windows span {first} to {last}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let half = (now + 1 - (first + last) / 2).to_string();
    let diff = dir.path().join("halves.collapsed");
    let compared = openprof(&[
        "fleet",
        "--clickhouse",
        &url,
        "--database",
        database,
        "--service",
        "joined",
        "--since",
        &format!("{half}s"),
        "--compare",
        &format!("{half}s"),
        "-o",
        diff.to_str().unwrap(),
    ]);
    assert!(
        compared.status.success(),
        "{}; windows from {first} to {last}, now {now}",
        text(&compared.stderr)
    );
    let both = std::fs::read_to_string(&diff).unwrap();
    assert!(
        both.lines().any(|line| {
            let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
            line.contains("MptJoined.spin") && fields[0] != "0" && fields[1] != "0"
        }),
        "{both}"
    );
    let nothing_then = openprof(&[
        "fleet",
        "--clickhouse",
        &url,
        "--database",
        database,
        "--service",
        "joined",
        "--compare",
        "1d",
        "-o",
        diff.to_str().unwrap(),
    ]);
    assert!(
        text(&nothing_then.stderr).contains("--compare 1d: no windows"),
        "{}",
        text(&nothing_then.stderr)
    );
}

#[test]
fn hprof_text_windows_bring_wall_clock_states_into_clickhouse() {
    // WallStates' workers spend known shares of their wall time sleeping, blocked, parked and
    // computing, and print the shares they measured. An agent writing HPROF text (the format
    // of wall= windows) streams a window a second; the collector forwards its WALL SAMPLES
    // with each stack's state as a label, and `openprof fleet --event wall --label state=S`
    // sums each state in ClickHouse.
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "wall_test";
    let collector = Collector::start_with(
        &dir.path().join("store"),
        "127.0.0.1:0",
        &["--clickhouse", &url, "--database", database],
    );
    let options = agent_options(
        &collector.address,
        "cpu=samples,interval=2,wall=10,threads=worker-*,depth=16,cutoff=0,format=a,doe=n,\
         continuous=1s,label=service:wall",
    );
    let (mut command, _dir) = java_command(Some(&options), "WallStates", &["4", "40"]);
    let store = dir.path().join("store");
    let output = wait_with_limit(
        command.spawn().expect("start java"),
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let measured: Vec<(String, f64)> = stdout
        .lines()
        .find(|line| line.starts_with("sleeping="))
        .unwrap_or_else(|| panic!("no shares in the workload's output: {stdout}"))
        .split_whitespace()
        .map(|pair| {
            let (state, share) = pair.split_once('=').unwrap();
            (state.to_string(), share.parse().unwrap())
        })
        .collect();
    let total = |selection: &[&str]| -> u64 {
        let mut args = vec!["--service", "wall", "--event", "wall"];
        args.extend_from_slice(selection);
        fleet_folded(&url, database, &args, dir.path())
            .iter()
            .map(|(_, count)| count)
            .sum()
    };
    // Until the forwarder has every window.
    wait_for_every_window(
        &url,
        database,
        &store,
        &collector,
        "wall",
        &["--event", "wall"],
        dir.path(),
    );
    let all = total(&[]);
    assert!(all > 1_000, "{all} wall samples");
    for (state, share) in measured {
        let sampled = total(&["--label", &format!("state={state}")]) as f64 / all as f64;
        assert!(
            (sampled - share).abs() <= 0.05,
            "{state}: {sampled:.3} of the wall samples in ClickHouse, {share:.3} measured"
        );
    }
    // The CPU windows of the same text stream are there too.
    let cpu = fleet_folded(&url, database, &["--service", "wall"], dir.path());
    assert!(
        cpu.iter().any(|(stack, _)| stack.contains("WallStates")),
        "{cpu:?}"
    );
}

#[test]
fn allocation_windows_carry_each_windows_allocations_into_clickhouse() {
    // AllocSplit allocates, every round, a byte[1400] in big() and a byte[600] in small():
    // 69.7 % of the bytes and half the objects are big()'s, in every window alike. A continuous
    // agent with heap=sites writes each window's allocations as an incremental SITES table (in
    // HPROF binary and in text); the collector forwards them as alloc_bytes and alloc_objects
    // windows with the allocated class on top of each stack.
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "alloc_test";
    let store = dir.path().join("store");
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &["--clickhouse", &url, "--database", database],
    );
    for format in ["b", "a"] {
        let service = format!("alloc-{format}");
        let options = agent_options(
            &collector.address,
            &format!("heap=sites,format={format},doe=n,continuous=1s,label=service:{service}"),
        );
        let (mut command, _dir) = java_command(Some(&options), "AllocSplit", &["5"]);
        let output = wait_with_limit(
            command.spawn().expect("start java"),
            Duration::from_secs(120),
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        let by_method = |event: &str| -> HashMap<String, u64> {
            let mut by_method = HashMap::new();
            let selection = ["--service", service.as_str(), "--event", event];
            let folded = try_fleet_folded(&url, database, &selection, dir.path());
            for (stack, count) in folded.unwrap_or_default() {
                let frames: Vec<&str> = stack.split(';').collect();
                // The allocated class is the leaf; the allocating method is under it.
                let (class, method) = (frames[frames.len() - 1], frames[frames.len() - 2]);
                *by_method.entry(format!("{method} {class}")).or_default() += count;
            }
            by_method
        };
        // Until the forwarder has every window of this run's agent (the last one).
        let agent = agents_in(&store).last().unwrap().clone();
        let stored = stored_weight(&store, &agent, &["--event", "alloc_bytes", "--total"]);
        let mut held = 0;
        let bytes = poll(LIMIT, || {
            let bytes = by_method("alloc_bytes");
            held = bytes.values().sum();
            assert!(
                held <= stored,
                "format={format}: {held} bytes in ClickHouse, {stored} stored"
            );
            (held == stored).then_some(bytes)
        })
        .unwrap_or_else(|| {
            panic!(
                "format={format}: ClickHouse holds {held} of {stored} bytes\n{}",
                collector.log()
            )
        });
        let share = |figures: &HashMap<String, u64>| {
            let big = figures.get("AllocSplit.big byte[]").copied().unwrap_or(0) as f64;
            let small = figures.get("AllocSplit.small byte[]").copied().unwrap_or(0) as f64;
            assert!(big > 0.0 && small > 0.0, "format={format}: {figures:?}");
            big / (big + small)
        };
        let byte_share = share(&bytes);
        assert!(
            (byte_share - 0.697).abs() <= 0.05,
            "format={format}: big() has {byte_share:.3} of the bytes: {bytes:?}"
        );
        let objects = by_method("alloc_objects");
        let object_share = share(&objects);
        assert!(
            (object_share - 0.5).abs() <= 0.05,
            "format={format}: big() has {object_share:.3} of the objects: {objects:?}"
        );
        // Each window counts its own allocations: about 5 windows, none empty of big().
        let windows = clickhouse_windows(&url, database, &service);
        assert!(
            (4..=8).contains(&windows),
            "format={format}: {windows} allocation windows"
        );
        // The whole stream, read back by `openprof convert`, sums the same windows.
        let agents = agents_in(&store);
        let agent = agents.last().unwrap();
        let file = export_agent(&store, agent, &format!("{agent}.hprof"));
        let folded = dir.path().join("alloc.collapsed");
        let converted = openprof(&[
            "convert",
            file.to_str().unwrap(),
            "--event",
            "alloc_bytes",
            "--total",
            "-o",
            folded.to_str().unwrap(),
        ]);
        assert!(converted.status.success(), "{}", text(&converted.stderr));
        let whole: u64 = std::fs::read_to_string(&folded)
            .unwrap()
            .lines()
            .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(whole, bytes.values().sum::<u64>(), "format={format}");
    }
}

/// How many windows of allocations ClickHouse holds for a service's agents.
fn clickhouse_windows(url: &str, database: &str, service: &str) -> u64 {
    let query = format!(
        "SELECT uniqExact(agent, sequence, window) FROM {database}.samples WHERE \
         event = 'alloc_bytes' AND agent IN (SELECT agent FROM {database}.agents WHERE \
         service = '{service}')"
    );
    clickhouse_answer(url, &query).parse().unwrap()
}

/// `openprof fleet` on a database with more arguments, as it ended.
fn fleet_run(url: &str, database: &str, more: &[&str]) -> std::process::Output {
    let mut args = vec!["fleet", "--clickhouse", url, "--database", database];
    args.extend_from_slice(more);
    openprof(&args)
}

/// `openprof fleet` printing (`--values`, `--calls`): its stdout, which must be a success.
fn fleet_printed(url: &str, database: &str, selection: &[&str]) -> String {
    let run = fleet_run(url, database, selection);
    assert!(run.status.success(), "{}", text(&run.stderr));
    text(&run.stdout)
}

/// One ClickHouse answer as text (HTTP/1.0: ClickHouse answers it whole, not in chunks).
fn clickhouse_answer(url: &str, query: &str) -> String {
    use std::io::{Read, Write};
    let encoded: String = query
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect();
    let mut stream = TcpStream::connect(url.strip_prefix("http://").unwrap()).unwrap();
    // POST: ClickHouse takes only reads over GET.
    write!(
        stream,
        "POST /?query={encoded} HTTP/1.0\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(" 200 "), "{query}: {response}");
    body.trim().to_string()
}

#[test]
fn traced_values_trace_elements_and_the_hierarchy_are_stored_in_clickhouse_and_queried_there() {
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "traced_test";
    let store = dir.path().join("store");
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &["--clickhouse", &url, "--database", database],
    );

    // Traced values: MptJoined calls lookup(key) with "slow" and "fast" alternately, every
    // four requests, under Context.run("user", ...) three of alice's to one of bob's; slow
    // lookups take four times the CPU of fast ones. An HPROF text agent writes its MPT record
    // (figures from the start) every window; the collector stores each window's difference.
    let specs = dir.path().join("lookup.mpt");
    std::fs::write(&specs, "MptJoined.lookup(java.lang.String) 1\n").unwrap();
    let options = agent_options(
        &collector.address,
        &format!(
            "cpu=samples,interval=10,format=a,doe=y,continuous=1s,label=service:values,mpt=@{}",
            specs.display()
        ),
    );
    let (mut command, _dir) = java_command(Some(&options), "MptJoined", &["5"]);
    let output = wait_with_limit(
        command.spawn().expect("start java"),
        Duration::from_secs(120),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let requests: u64 = stdout
        .trim()
        .strip_prefix("requests=")
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    // Rows: calls, wall mean, wall max, CPU mean (ms), then the spec, the value's type and
    // the value.
    let values = |selection: &[&str]| -> HashMap<String, (u64, f64)> {
        let mut args = vec!["--values", "--service", "values"];
        args.extend_from_slice(selection);
        let printed = fleet_printed(&url, database, &args);
        printed
            .lines()
            .skip(1)
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let calls: u64 = fields[0].parse().unwrap();
                let cpu_mean: f64 = fields[3].parse().unwrap();
                let value = fields[fields.len() - 1].to_string();
                (value, (calls, cpu_mean))
            })
            .collect()
    };
    let mut calls = 0;
    let lookups = poll(LIMIT, || {
        let lookups = values(&["--method", "MptJoined.lookup(java.lang.String)"]);
        calls = lookups.values().map(|(calls, _)| calls).sum();
        assert!(
            calls <= requests,
            "{calls} lookups stored, {requests} made: {lookups:?}"
        );
        (calls == requests).then_some(lookups)
    })
    .unwrap_or_else(|| {
        panic!(
            "{calls} lookups stored, {requests} made\n{}\n{}",
            fleet_printed(&url, database, &["--values"]),
            collector.log()
        )
    });
    let (slow, fast) = (lookups["slow"], lookups["fast"]);
    assert!(slow.0.abs_diff(fast.0) <= 4, "{lookups:?}");
    let ratio = slow.1 / fast.1;
    assert!(
        (3.0..=5.0).contains(&ratio),
        "slow/fast CPU {ratio:.2}: {lookups:?}"
    );
    // The application's context is traced too: alice's requests are three of four.
    let all = values(&[]);
    let (alice, bob) = (all["alice"].0, all["bob"].0);
    assert_eq!(alice + bob, requests, "{all:?}");
    assert!(
        (alice as f64 / requests as f64 - 0.75).abs() <= 0.01,
        "{all:?}"
    );
    // Each window holds its own calls: several windows, whose calls add up to the run's.
    let windows = clickhouse_answer(
        &url,
        &format!(
            "SELECT uniqExact(agent, sequence, window) FROM {database}.traced_values FINAL \
             WHERE method LIKE 'MptJoined.lookup(%'"
        ),
    );
    let windows: u64 = windows.parse().unwrap();
    assert!(windows >= 3, "{windows} windows of traced values");

    // Trace elements: Calls calls work() exactly 5,000 times; an agent writing a trace
    // (format=x) streams its elements, and ClickHouse counts the methodEntry elements by
    // method, named through the trace's methodDef and classDef.
    let options = agent_options(&collector.address, "format=x,cpu=times,filter=+Calls");
    let (mut command, _dir) = java_command(Some(&options), "Calls", &["5000", "3"]);
    let child = command.spawn().expect("start java");
    let pid = child.id();
    let output = wait_with_limit(child, Duration::from_secs(120));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let listing = text(&openprof(&["ls", "--store", store.to_str().unwrap()]).stdout);
    let (trace, elements) = listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("trace "))
        .find_map(|rest| {
            let (trace, rest) = rest.split_once(':')?;
            let elements = rest
                .split_whitespace()
                .find_map(|word| word.parse::<u64>().ok())?;
            Some((trace.to_string(), elements))
        })
        .unwrap_or_else(|| panic!("no trace in {listing}"));
    let (mut stored, mut ended) = (String::new(), String::new());
    poll(LIMIT, || {
        stored = clickhouse_answer(
            &url,
            &format!(
                "SELECT count() FROM {database}.trace_elements FINAL WHERE trace = '{trace}' \
                 AND collation > 0"
            ),
        );
        ended = clickhouse_answer(
            &url,
            &format!("SELECT max(ended) FROM {database}.traces FINAL WHERE trace = '{trace}'"),
        );
        (stored.parse::<u64>().unwrap() == elements && ended == "1").then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{stored} of {elements} elements in ClickHouse, ended {ended}\n{}",
            collector.log()
        )
    });
    let calls = fleet_printed(&url, database, &["--calls", "--top", "50"]);
    let work = calls
        .lines()
        .find(|line| line.trim_end().ends_with(" Calls.work"))
        .unwrap_or_else(|| panic!("no Calls.work in {calls}"));
    assert_eq!(work.split_whitespace().next(), Some("5000"), "{calls}");
    // The trace written back from ClickHouse is the document the collector's store exports,
    // byte for byte, and valid against docs/trace.dtd (xmllint).
    let from_clickhouse = dir.path().join("clickhouse.trace.xml");
    let to = from_clickhouse.to_str().unwrap();
    let wrote = fleet_run(&url, database, &["--export-trace", &trace, "-o", to]);
    assert!(wrote.status.success(), "{}", text(&wrote.stderr));
    openprof_testkit::xmllint_trace(&from_clickhouse);
    let from_store = dir.path().join("store.trace.xml");
    let exported = openprof(&[
        "export",
        &trace,
        "--store",
        store.to_str().unwrap(),
        "-o",
        from_store.to_str().unwrap(),
    ]);
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let (ours, theirs) = (
        std::fs::read_to_string(&from_clickhouse).unwrap(),
        std::fs::read_to_string(&from_store).unwrap(),
    );
    assert!(
        ours == theirs,
        "ClickHouse's document differs from the store's:\n{}",
        {
            let differing = ours.lines().zip(theirs.lines()).find(|(a, b)| a != b);
            format!(
                "{differing:?} ({} and {} lines)",
                ours.lines().count(),
                theirs.lines().count()
            )
        }
    );
    let nowhere = "00000000-0000-0000-0000-000000000001";
    let unknown = fleet_run(&url, database, &["--export-trace", nowhere, "-o", to]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown.stderr).contains("no trace"),
        "{}",
        text(&unknown.stderr)
    );
    // The failed export left the file of that name as it was.
    assert_eq!(std::fs::read_to_string(&from_clickhouse).unwrap(), ours);
    // The hierarchy above the trace: its agent, process (the JVM's pid) and node.
    let process = clickhouse_answer(
        &url,
        &format!(
            "SELECT pid, node FROM {database}.processes FINAL WHERE process IN \
             (SELECT process FROM {database}.agents FINAL WHERE agent IN \
             (SELECT agent FROM {database}.traces FINAL WHERE trace = '{trace}')) FORMAT TSV"
        ),
    );
    let (stored_pid, node) = process
        .split_once('\t')
        .unwrap_or_else(|| panic!("no process: {process:?}"));
    assert_eq!(stored_pid, pid.to_string());
    let nodes = clickhouse_answer(
        &url,
        &format!("SELECT count() FROM {database}.nodes FINAL WHERE node = '{node}'"),
    );
    assert_eq!(nodes, "1");
    // Options that do not go together are refused by name.
    for (args, named) in [
        (&["--method", "A.b()", "-o", "x.html"][..], "--values"),
        (&["--values", "--compare", "1d"][..], "--compare"),
        (&["--calls", "--top-over-time", "1m"][..], "--top-over-time"),
        (&["--top", "3", "-o", "x.html"][..], "--top"),
    ] {
        let refused = fleet_run(&url, database, args);
        assert!(!refused.status.success(), "{args:?}");
        let said = text(&refused.stderr);
        assert!(said.contains(named), "{args:?}: {said}");
    }
}

#[test]
fn retention_drops_the_days_past_it_from_clickhouse() {
    // ClickHouse 18.16 has no TTL: `--retention-days` drops whole days' partitions.
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "retention_test";
    let store = dir.path().join("store");
    let schema_made = |collector: &Collector| {
        let exists = format!("EXISTS TABLE {database}.trace_elements");
        poll(LIMIT, || {
            (clickhouse_answer(&url, &exists) == "1").then_some(())
        })
        .unwrap_or_else(|| panic!("no schema made\n{}", collector.log()));
    };
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &["--clickhouse", &url, "--database", database],
    );
    schema_made(&collector);
    drop(collector);
    // Rows of an old day and of today, in each table partitioned by day.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (date, time) in [
        ("2020-01-01".to_string(), 1_577_880_000),
        (String::new(), now),
    ] {
        let date = if date.is_empty() {
            format!("toDate({time})")
        } else {
            format!("toDate('{date}')")
        };
        for (table, columns) in [
            ("samples", "agent, event, count"),
            ("traced_values", "agent, method, calls"),
            ("trace_elements", "agent, element, collation"),
        ] {
            clickhouse_answer(
                &url,
                &format!(
                    "INSERT INTO {database}.{table} (date, time, {columns}) \
                     SELECT {date}, toDateTime({time}), 'a', 'x', 1"
                ),
            );
        }
    }
    let days = |table: &str| {
        clickhouse_answer(
            &url,
            &format!(
                "SELECT groupArray(toString(day)) FROM (SELECT DISTINCT date AS day FROM \
                 {database}.{table} ORDER BY day)"
            ),
        )
    };
    assert!(
        days("samples").contains("2020-01-01"),
        "{}",
        days("samples")
    );
    // A bad number of days is refused by name.
    let refused = openprof(&["serve", "--clickhouse", &url, "--retention-days", "0"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("--retention-days"),
        "{}",
        text(&refused.stderr)
    );
    let collector = Collector::start_with(
        &store,
        "127.0.0.1:0",
        &[
            "--clickhouse",
            &url,
            "--database",
            database,
            "--retention-days",
            "30",
        ],
    );
    let log = collector.log_with("--retention-days");
    assert!(log.contains("samples 2020-01-01"), "{log}");
    for table in ["samples", "traced_values", "trace_elements"] {
        let kept = days(table);
        assert!(!kept.contains("2020-01-01"), "{table}: {kept}");
        assert!(
            kept.contains(&clickhouse_answer(&url, "SELECT toString(today())")),
            "{table}: {kept}"
        );
    }
}

/// Sends one frame of HPROF bytes as a raw agent and waits until the collector stored it.
fn send_window(
    socket: &mut Box<dyn openprof_collector::client::Transport>,
    sequence: u64,
    bytes: &[u8],
) {
    use openprof_format::wire::{self, FrameKind};
    wire::write_frame(
        socket,
        FrameKind::Hprof,
        &wire::with_sequence(sequence, bytes),
    )
    .unwrap();
    loop {
        let frame = wire::read_frame(socket).unwrap().expect("an ack");
        if frame.kind == FrameKind::Ack {
            break;
        }
    }
}

/// Two collectors forward to one ClickHouse. An agent id bound to one agent's identity key
/// through collector A, claimed with another key through collector B (someone holding the
/// agent credential): B keeps the impostor's windows in its own store and forwards none, so
/// ClickHouse sums only the first agent's samples, while B's honest agents go on. Stack rows
/// are keyed by HMAC-SHA256 under the one secret both collectors share in ClickHouse, so
/// crafted frames can't replace another stack's row.
#[test]
fn an_agent_id_is_bound_where_collectors_meet_and_stack_keys_are_keyed() {
    use ring::hmac;
    let dir = tempfile::tempdir().unwrap();
    let Some(clickhouse) = ClickHouseServer::start(&dir.path().join("clickhouse")) else {
        return;
    };
    let url = clickhouse.url();
    let database = "identity_test";
    let start = |name: &str| {
        Collector::start_with(
            &dir.path().join(name),
            "127.0.0.1:0",
            &["--clickhouse", &url, "--database", database],
        )
    };
    let (a, b) = (start("store-a"), start("store-b"));
    let agent = uuid::Uuid::new_v4();
    let sum_of = |agent: uuid::Uuid| -> u64 {
        clickhouse_answer(
            &url,
            &format!("SELECT sum(count) FROM {database}.samples WHERE agent = '{agent}'"),
        )
        .parse()
        .unwrap_or(0)
    };

    wait_for(
        "the collectors made the schema",
        Duration::from_secs(120),
        || {
            clickhouse_answer(
                &url,
                &format!(
                    "SELECT count() FROM system.tables WHERE database = '{database}' AND \
                     name = 'samples'"
                ),
            ) == "1"
        },
    );
    let (mut first, identity) =
        raw_agent_of(&a.address, TOKEN, agent, "first", "b", None).expect("the first agent");
    send_window(&mut first, 1, &one_cpu_window("Real", "work", 7));
    if poll(Duration::from_secs(60), || {
        (sum_of(agent) == 7).then_some(())
    })
    .is_none()
    {
        panic!(
            "collector A did not forward the first agent's window: {}",
            a.log()
        );
    }
    let (mut thief, _) =
        raw_agent_of(&b.address, TOKEN, agent, "thief", "b", None).expect("B knows no binding");
    send_window(&mut thief, 1, &one_cpu_window("Forged", "work", 1000));
    let honest = uuid::Uuid::new_v4();
    let (mut other, _) =
        raw_agent_of(&b.address, TOKEN, honest, "honest", "b", None).expect("an honest agent");
    send_window(&mut other, 1, &one_cpu_window("Honest", "work", 5));
    wait_for(
        "collector B forwarded its honest agent's window",
        Duration::from_secs(120),
        || sum_of(honest) == 5,
    );
    let log = b.log_with("another collector's agent holds that id");
    assert!(log.contains(&agent.to_string()), "{log}");
    assert_eq!(sum_of(agent), 7, "only the first agent's samples");
    let forged = clickhouse_answer(
        &url,
        &format!("SELECT count() FROM {database}.stacks WHERE has(frames, 'Forged.work')"),
    );
    assert_eq!(forged, "0");
    let hosts = clickhouse_answer(
        &url,
        &format!("SELECT DISTINCT host FROM {database}.agents WHERE agent = '{agent}'"),
    );
    assert_eq!(hosts, "first");
    let bound = clickhouse_answer(
        &url,
        &format!("SELECT identity FROM {database}.identities WHERE agent = '{agent}'"),
    );
    assert_eq!(bound, identity.public_hex(), "one binding: the first key's");
    // The first agent, moved to a third collector with its own key, goes on being forwarded
    // (its stream numbered on from where it was).
    let c = start("store-c");
    let (mut moved, _) = raw_agent_of(&c.address, TOKEN, agent, "first", "b", Some(identity))
        .expect("C knows no binding");
    send_window(&mut moved, 2, &one_cpu_window("Real", "work", 3));
    wait_for(
        "collector C forwarded the moved agent's window",
        Duration::from_secs(120),
        || sum_of(agent) == 10,
    );

    // Every stack row's key is HMAC-SHA256 of its frames under the shared secret, computed
    // here with ring: every collector's stacks, one secret (Real.work from A and C: one row).
    // Collectors starting together may each have made one; the earliest is everyone's.
    let secret = clickhouse_answer(
        &url,
        &format!(
            "SELECT value FROM {database}.secrets WHERE name = 'stack key' \
             ORDER BY made, value LIMIT 1"
        ),
    );
    assert_eq!(secret.len(), 64, "a 256-bit secret: {secret}");
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let rows = clickhouse_answer(
        &url,
        &format!("SELECT DISTINCT stack, frames FROM {database}.stacks FORMAT JSONEachRow"),
    );
    let mut leaves = Vec::new();
    for row in rows.lines() {
        let row: serde_json::Value = serde_json::from_str(row).unwrap();
        let frames: Vec<String> = serde_json::from_value(row["frames"].clone()).unwrap();
        let mut context = hmac::Context::with_key(&key);
        for frame in &frames {
            context.update(&(frame.len() as u64).to_le_bytes());
            context.update(frame.as_bytes());
        }
        let tag = context.sign();
        let expected = u64::from_le_bytes(tag.as_ref()[..8].try_into().unwrap());
        let stack: u64 = match &row["stack"] {
            serde_json::Value::String(text) => text.parse().unwrap(),
            number => number.as_u64().unwrap(),
        };
        assert_eq!(stack, expected, "{row}");
        leaves.push(frames.last().unwrap().clone());
    }
    leaves.sort();
    assert_eq!(leaves, ["Honest.work", "Real.work"], "{rows}");
    drop((first, thief, other, moved));
}
