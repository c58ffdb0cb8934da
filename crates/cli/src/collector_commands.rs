//! The collector's commands: `serve`, `control`, `ls`, `export`, `replay`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use openprof_collector::client::{parse_command, send_control, Endpoint, Trust};
use openprof_collector::forward::WindowSink;
use openprof_collector::replay::{replay, ReplayPlan};
use openprof_collector::server::{
    Server, ServerConfig, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_UNAUTHENTICATED, DEFAULT_QUEUE_BYTES,
};
use openprof_collector::store::sqlite::{SqliteOptions, SqliteStore};
use openprof_collector::store::{ExportOptions, Store};
use openprof_format::private_file::{create_private, AtALink};
use openprof_format::wire::printable;
use openprof_format::wire::ControlRequest;
use uuid::Uuid;

/// The agent credential, from the command line, a file or $OPENPROF_TOKEN.
#[derive(Args, Clone, Debug)]
pub struct TokenArgs {
    /// The agent credential, which agents give with token= (prefer --token-file or
    /// $OPENPROF_TOKEN: a command line is visible to every user of the machine).
    #[arg(long, env = "OPENPROF_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file whose first line is the agent credential.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    fn value(&self) -> Result<String> {
        credential(&self.token, &self.token_file, "--token", "OPENPROF_TOKEN")?.ok_or_else(|| {
            anyhow::anyhow!(
                "the agent credential is needed: --token-file, --token or $OPENPROF_TOKEN (agents give it with token=)"
            )
        })
    }
}

/// The control credential, which `openprof control` proves: from the command line, a file or
/// $OPENPROF_CONTROL_TOKEN.
#[derive(Args, Clone, Debug)]
pub struct ControlTokenArgs {
    /// The control credential (prefer --control-token-file or $OPENPROF_CONTROL_TOKEN).
    #[arg(long, env = "OPENPROF_CONTROL_TOKEN", hide_env_values = true)]
    control_token: Option<String>,
    /// A file whose first line is the control credential.
    #[arg(long, conflicts_with = "control_token")]
    control_token_file: Option<PathBuf>,
}

impl ControlTokenArgs {
    fn value(&self) -> Result<Option<String>> {
        credential(
            &self.control_token,
            &self.control_token_file,
            "--control-token",
            "OPENPROF_CONTROL_TOKEN",
        )
    }
}

/// A credential given inline or in a file (its first line).
fn credential(
    inline: &Option<String>,
    file: &Option<PathBuf>,
    flag: &str,
    variable: &str,
) -> Result<Option<String>> {
    match (inline, file) {
        (Some(token), _) if !token.is_empty() => Ok(Some(token.clone())),
        (Some(_), _) => bail!("{flag} (or ${variable}) is empty"),
        (_, Some(file)) => {
            let read = openprof_format::secret::read_token_file(file)
                .map_err(|error| anyhow::anyhow!("{flag}-file: {error}"))?;
            if let Some(warning) = read.readable_by_others {
                eprintln!("openprof WARNING: {warning}");
            }
            Ok(Some(read.token))
        }
        _ => Ok(None),
    }
}

/// How a command-line client reaches the collector.
#[derive(Args, Clone, Debug)]
pub struct CollectorArgs {
    /// The collector.
    #[arg(long, default_value = "127.0.0.1:7911")]
    collector: String,
    /// Talk TLS to the collector, trusting the CA certificates of this PEM file.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl CollectorArgs {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            address: self.collector.clone(),
            tls: self.tls_ca.clone().map(Trust::CaFile),
        }
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen. Loopback by default: give an outside address on purpose.
    #[arg(long, default_value = "127.0.0.1:7911")]
    listen: SocketAddr,
    /// The store's directory (created if missing).
    #[arg(long, default_value = "openprof-store")]
    store: PathBuf,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    control_token: ControlTokenArgs,
    /// TLS: the collector's certificate chain (PEM); agents then need tlsca=. The web UI
    /// (--http) is then served over HTTPS with it.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Milliseconds between heartbeats (clock samples) to each agent.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Seconds an agent has to answer a command.
    #[arg(long, default_value_t = 120)]
    command_timeout: u64,
    /// Connections that have not authenticated yet, at most; more are turned away.
    #[arg(long, default_value_t = DEFAULT_MAX_UNAUTHENTICATED as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_unauthenticated: u32,
    /// Connections at most (agents and control clients); more are turned away.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Bytes of received data waiting to be stored, at most (k, m, g suffixes); past it,
    /// agents are read no further until the store catches up.
    #[arg(long, default_value_t = DEFAULT_QUEUE_BYTES as u64, value_parser = parse_bytes)]
    queue_bytes: u64,
    /// Refuse data once the store's segments and catalog reach this many bytes (k, m, g
    /// suffixes); agents are told and keep their data.
    #[arg(long, value_parser = parse_bytes)]
    max_store_bytes: Option<u64>,
    /// Forward the agents' continuous= windows (HPROF binary or text) to ClickHouse's HTTP
    /// interface too, e.g. http://127.0.0.1:8123: stored here first, so nothing acknowledged is
    /// lost while ClickHouse is away (docs/clickhouse.md).
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// The ClickHouse database to forward into (made if missing).
    #[arg(long, default_value = "openprof", requires = "clickhouse")]
    pub database: String,
    /// Keep this many days of data in ClickHouse, today included: the collector drops older
    /// days' partitions of windows, traced values and trace elements, checking hourly (TTL
    /// where ClickHouse has none; docs/clickhouse.md, "Retention"). Off unless given.
    #[arg(long, value_name = "DAYS", requires = "clickhouse", value_parser = clap::value_parser!(u32).range(1..))]
    pub retention_days: Option<u32>,
    /// Push the agents' continuous= CPU windows to Pyroscope's HTTP ingest API too, as pprof,
    /// e.g. http://127.0.0.1:4040: stored here first, and how far the pushes got is kept in the
    /// store (pyroscope-cursor.json), so nothing acknowledged is lost or pushed twice while
    /// Pyroscope is away or the collector restarts (docs/clickhouse.md, "Pyroscope"). May be
    /// given with --clickhouse.
    #[arg(long, value_name = "URL")]
    pub pyroscope: Option<String>,
    /// Serve the web UI and its JSON API here too (e.g. 127.0.0.1:7912; port 0 picks one),
    /// opened by the control credential (docs/ui.md); over HTTPS with --tls-cert. Off unless
    /// given.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// The UI's connections at most (with --http); more are answered 503. With
    /// --max-connections it shares the process's descriptor limit (docs/security.md).
    #[arg(long, default_value_t = openprof_web::connections::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_http_connections: u32,
}

/// Descriptors kept for everything but connections: the store's files, SQLite's journal, the
/// forwarders' HTTP clients, the runtime's own.
const RESERVED_DESCRIPTORS: u64 = 128;

/// How many connections each port may hold within the process's descriptor limit `limit`,
/// asked `agents` for the agents' port and `ui` for the UI's (0: no UI): as asked when both fit
/// with [`RESERVED_DESCRIPTORS`] to spare, else both cut in proportion, the UI keeping at least
/// 4, so that neither port can take the descriptors the other needs.
fn share_descriptors(limit: u64, agents: usize, ui: usize) -> (usize, usize) {
    let budget = limit.saturating_sub(RESERVED_DESCRIPTORS).max(16) as usize;
    if agents + ui <= budget {
        return (agents, ui);
    }
    let ui_share = match (agents, ui) {
        (_, 0) => 0,
        (0, _) => budget,
        _ => (budget * ui / (agents + ui)).clamp(4, budget / 2),
    };
    (budget - ui_share, ui_share)
}

/// The UI's bounds with room for `connections`: one address may hold at most half of them.
fn web_limits(connections: usize) -> openprof_web::connections::Limits {
    openprof_web::connections::Limits {
        max_connections: connections,
        max_per_address: openprof_web::connections::DEFAULT_MAX_PER_ADDRESS
            .min((connections / 2).max(1)),
        ..Default::default()
    }
}

/// The process's descriptor limit, raised to its hard limit first (as servers do: the soft
/// limit is often 1024 where the hard one is far higher).
fn descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum) {
        if maximum > current {
            let raised = rustix::process::Rlimit {
                current: Some(maximum),
                maximum: Some(maximum),
            };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                return maximum;
            }
        }
    }
    // No limit at all: as good as the largest a server would ever want.
    limit.current.unwrap_or(1 << 20)
}

/// A byte count: a number, optionally followed by k, m or g (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.strip_suffix(['k', 'm', 'g']) {
        Some(digits) => (digits, &lower[digits.len()..]),
        None => (lower.as_str(), ""),
    };
    let shift = match unit {
        "k" => 10,
        "m" => 20,
        "g" => 30,
        _ => 0,
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|number| number.checked_mul(1 << shift))
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| {
            format!("'{text}' is not a byte count (a positive number, optionally with k, m or g)")
        })
}

/// glibc's malloc, told to map every block of 128 KiB or more on its own; see
/// [`with_fixed_mmap_threshold`].
const MMAP_THRESHOLD: &str = "131072";

/// Runs this same `serve` again, in this process, with glibc's mmap threshold fixed, unless the
/// user chose malloc's settings already. By default glibc raises the threshold to the largest
/// block freed so far (up to 32 MiB) and keeps up to twice that free in each thread's arena: a
/// collector that once read a burst (a heap dump's frames, a resend after an outage, a hostile
/// stream) kept hundreds of MB resident for the rest of its life while holding a few MB
/// (BENCHMARKS.md, the forwarder's memory). With a fixed threshold large blocks go back to the
/// system when freed. An environment variable is read once, when the process starts, which is
/// why this takes an exec; should the exec fail, serve goes on as it is.
fn with_fixed_mmap_threshold() {
    use std::os::unix::process::CommandExt;
    let chosen = std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|tunables| tunables.contains("malloc"));
    if chosen || !cfg!(target_env = "gnu") {
        return;
    }
    let Ok(program) = std::env::current_exe() else {
        return;
    };
    // exec returns only when it failed.
    let _ = std::process::Command::new(program)
        .args(std::env::args_os().skip(1))
        .env("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD)
        .exec();
}

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    use std::io::IsTerminal;
    with_fixed_mmap_threshold();
    // Colour only for a person at a terminal: logs in files and pipes stay plain text.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    let token = args.token.value()?;
    let control_token = args.control_token.value()?;
    if control_token.as_deref() == Some(token.as_str()) {
        bail!("the control credential must differ from the agent credential: whoever holds an agent's token would otherwise control every agent");
    }
    if args.http.is_some() && control_token.is_none() {
        bail!("--http needs the control credential (--control-token-file): the UI opens to it and to nothing else");
    }
    // SAFETY: setting a signal's disposition to "ignore" involves no handler code. A file size
    // limit then makes writes fail (EFBIG), which the store reports, instead of killing us.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // The forwarders' addresses are checked before the store is made for nothing.
    let clickhouse = args
        .clickhouse
        .as_deref()
        .map(|url| openprof_collector::clickhouse::ClickHouse::new(url, &args.database))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let pyroscope = args
        .pyroscope
        .as_deref()
        .map(|url| openprof_collector::pyroscope::Pyroscope::new(url, &args.store))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let options = SqliteOptions {
        max_bytes: args.max_store_bytes,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&args.store, options)
        .with_context(|| format!("can't open the store {}", args.store.display()))?;
    let store: Arc<dyn openprof_collector::store::Store> = Arc::new(store);
    let stop_forwarding = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let web_clickhouse = clickhouse.clone();
    let mut forwarders = Vec::new();
    if let Some(clickhouse) = clickhouse {
        let mut sink = openprof_collector::clickhouse::ClickHouseSink::new(clickhouse);
        if let Some(days) = args.retention_days {
            sink = sink.with_retention(days);
        }
        forwarders.push(spawn_forwarder(&store, sink, &stop_forwarding)?);
    }
    if let Some(pyroscope) = pyroscope {
        forwarders.push(spawn_forwarder(&store, pyroscope, &stop_forwarding)?);
    }
    let mut config = ServerConfig::new(token);
    config.control_token = control_token.clone();
    config.heartbeat = Duration::from_millis(args.heartbeat_ms.max(10));
    config.command_timeout = Duration::from_secs(args.command_timeout.max(1));
    let limit = descriptor_limit();
    let wanted_ui = args.http.map_or(0, |_| args.max_http_connections as usize);
    let (agents, ui) = share_descriptors(limit, args.max_connections as usize, wanted_ui);
    if agents < args.max_connections as usize || ui < wanted_ui {
        eprintln!(
            "openprof WARNING: {limit} descriptors (ulimit -n) leave room for {agents} agent and \
             {ui} UI connections (asked: {}, {wanted_ui}); raise the limit for more",
            args.max_connections
        );
    }
    config.max_connections = agents;
    config.max_unauthenticated = (args.max_unauthenticated as usize).min(agents);
    config.queue_bytes = usize::try_from(args.queue_bytes).unwrap_or(usize::MAX);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(openprof_collector::tls::load(cert, key)?),
        _ => None,
    };
    config.tls = tls.as_ref().map(|tls| tls.server.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("can't start the runtime")?;
    runtime.block_on(async move {
        let server = Server::start(args.listen, config, store)
            .await
            .with_context(|| format!("can't listen on {}", args.listen))?;
        // The address on stdout, so that scripts and tests can find an ephemeral port.
        println!("openprof collector listening on {}", server.local_addr);
        let _web = match (args.http, control_token) {
            (Some(http), Some(credential)) => {
                let address = match server.local_addr {
                    address if address.ip().is_unspecified() => {
                        format!("127.0.0.1:{}", address.port())
                    }
                    address => address.to_string(),
                };
                // The UI's commands go to the collector as a control client does: over TLS
                // when it has TLS, trusting its own certificate (whatever names it holds).
                let collector = Endpoint {
                    address,
                    tls: tls
                        .as_ref()
                        .map(|tls| Trust::Config(tls.own_client.clone())),
                };
                let config = openprof_web::WebConfig {
                    listen: http,
                    credential,
                    store_dir: args.store.clone(),
                    collector: Some(collector),
                    tls: tls.map(|tls| tls.server),
                    clickhouse: web_clickhouse,
                    limits: web_limits(ui),
                };
                let running = start_web(config, Some(server.connected_agents_watch())).await?;
                Some(running)
            }
            _ => None,
        };
        let terminate = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM can be watched");
            term.recv().await;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
        server.shutdown().await;
        anyhow::Ok(())
    })?;
    stop_forwarding.store(true, std::sync::atomic::Ordering::Relaxed);
    for forwarder in forwarders {
        let _ = forwarder.join();
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts a thread forwarding the store's windows to `sink` until `stop`.
fn spawn_forwarder(
    store: &Arc<dyn Store>,
    sink: impl WindowSink + Send + 'static,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let name = sink.name().to_string();
    let (store, stop) = (store.clone(), stop.clone());
    std::thread::Builder::new()
        .name(name.to_ascii_lowercase())
        .spawn(move || openprof_collector::forward::forward(store, sink, stop))
        .with_context(|| format!("can't start the {name} forwarder"))
}

#[derive(Args, Debug)]
pub struct ControlArgs {
    #[command(flatten)]
    collector: CollectorArgs,
    #[command(flatten)]
    token: ControlTokenArgs,
    /// The agent (its agentId, as `openprof ls` shows); all connected agents if left out.
    #[arg(long)]
    agent: Option<Uuid>,
    /// For cpu-sampling-on/off: the thread's serial number (as the output numbers threads);
    /// 0 for all threads.
    #[arg(long, default_value_t = 0)]
    thread: u64,
    /// For alloc-sites and cpu-samples: the output cutoff ratio.
    #[arg(long, default_value_t = 0.0)]
    cutoff: f32,
    /// gc, dump-heap, alloc-sites, heap-summary, exit, dump-traces, cpu-samples,
    /// alloc-traces-on, alloc-traces-off, cpu-sampling-on, cpu-sampling-off,
    /// clear-cpu-samples, depth N, interval MS, dump (every engine's dump but the heap's),
    /// trace-start, trace-end, filter BLOCK, snapshot NAME, mpt-add SPECS, mpt-remove SPECS,
    /// mpt-list (method parameter tracing, docs/mpt.md).
    /// Agents carry out dump-heap, exit and mpt-add/remove only when their commands= option
    /// allows them (docs/security.md).
    command: String,
    /// The command's argument (depth, filter block, snapshot name, specifications: one a
    /// line, or @FILE). It may start with `-` (an exclude filter, `-com.acme.*`).
    #[arg(allow_hyphen_values = true)]
    argument: Option<String>,
}

pub fn control(args: ControlArgs) -> Result<ExitCode> {
    let token = args.token.value()?.ok_or_else(|| {
        anyhow::anyhow!(
            "the control credential is needed: --control-token-file, --control-token or $OPENPROF_CONTROL_TOKEN (the collector's --control-token-file)"
        )
    })?;
    let argument = match args.argument.as_deref() {
        Some(path) if args.command.starts_with("mpt-") && path.starts_with('@') => Some(
            openprof_format::secret::read_option_file(
                Path::new(&path[1..]),
                openprof_format::secret::SPEC_FILE_MAX_BYTES,
                "a file of parameter tracing specifications",
            )?
            .text,
        ),
        other => other.map(str::to_string),
    };
    let command = parse_command(&args.command, argument.as_deref(), args.thread, args.cutoff)
        .map_err(anyhow::Error::msg)?;
    let request = ControlRequest {
        agent: args.agent,
        command,
    };
    let response =
        send_control(&args.collector.endpoint(), &token, &request).map_err(anyhow::Error::msg)?;
    if let Some(error) = response.error {
        bail!("{}", printable(&error));
    }
    let mut failed = false;
    for reply in &response.replies {
        let status = if reply.ok { "ok" } else { "FAILED" };
        println!("{} {status}: {}", reply.agent, printable(&reply.message));
        failed |= !reply.ok;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Starts the web UI over a store (read-only: the collector, if any, writes it), over HTTPS
/// when `config` has TLS, and says where on stdout.
async fn start_web(
    config: openprof_web::WebConfig,
    connected: Option<openprof_web::ConnectedAgents>,
) -> Result<openprof_web::Running> {
    let store: Arc<dyn Store> = Arc::new(open_store(&config.store_dir)?);
    let (listen, tls) = (config.listen, config.tls.is_some());
    let running = openprof_web::serve(config, store, connected)
        .await
        .with_context(|| format!("can't serve the web UI on {listen}"))?;
    let scheme = if tls { "https" } else { "http" };
    println!("openprof web UI on {scheme}://{}/", running.local_addr);
    Ok(running)
}

#[derive(Args, Debug)]
pub struct UiArgs {
    /// The store's directory.
    #[arg(long, default_value = "openprof-store")]
    store: PathBuf,
    /// Where to serve the UI (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:7912", value_name = "ADDR")]
    http: SocketAddr,
    #[command(flatten)]
    control_token: ControlTokenArgs,
    /// TLS: serve the UI over HTTPS with this certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The UI's connections at most; more are answered 503.
    #[arg(long, default_value_t = openprof_web::connections::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_http_connections: u32,
}

/// `openprof ui`: the web UI over a store alone (no collector: nothing is live, no command is
/// sent), until Ctrl-C.
pub fn ui(args: UiArgs) -> Result<ExitCode> {
    let credential = args.control_token.value()?.ok_or_else(|| {
        anyhow::anyhow!(
            "the UI opens to a credential only: give --control-token-file (or --control-token, $OPENPROF_CONTROL_TOKEN)"
        )
    })?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(openprof_collector::tls::load(cert, key)?.server),
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("can't start the runtime")?;
    runtime.block_on(async move {
        let (_, ui) = share_descriptors(descriptor_limit(), 0, args.max_http_connections as usize);
        let config = openprof_web::WebConfig {
            listen: args.http,
            credential,
            store_dir: args.store.clone(),
            collector: None,
            tls,
            clickhouse: None,
            limits: web_limits(ui),
        };
        let _web = start_web(config, None).await?;
        tokio::signal::ctrl_c().await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn open_store(dir: &Path) -> Result<SqliteStore> {
    if !dir.join("catalog.sqlite").exists() {
        bail!(
            "{} is not an openprof store (no catalog.sqlite)",
            dir.display()
        );
    }
    // Read-only: a collector may be writing it, and readers never take its lock.
    SqliteStore::open_read_only(dir)
        .with_context(|| format!("can't open the store {}", dir.display()))
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// The store's directory.
    #[arg(long, default_value = "openprof-store")]
    store: PathBuf,
}

pub fn ls(args: LsArgs) -> Result<ExitCode> {
    let store = open_store(&args.store)?;
    let catalog = store.catalog()?;
    for node in &catalog.nodes {
        println!("node {} {}", node.node, printable(&node.hostname));
        for process in catalog.processes.iter().filter(|p| p.node == node.node) {
            println!(
                "  process {} pid {} {}",
                process.process,
                process.pid,
                printable(process.name.as_deref().unwrap_or(""))
            );
            for agent in catalog
                .agents
                .iter()
                .filter(|a| a.process == Some(process.process))
            {
                print_agent(agent, &catalog, "    ");
            }
        }
    }
    let orphans: Vec<_> = catalog
        .agents
        .iter()
        .filter(|agent| {
            agent
                .process
                .is_none_or(|process| !catalog.processes.iter().any(|p| p.process == process))
        })
        .collect();
    if !orphans.is_empty() {
        println!("agents without a process element (HPROF output, or not yet arrived):");
        for agent in orphans {
            print_agent(agent, &catalog, "  ");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_agent(
    agent: &openprof_collector::store::AgentEntry,
    catalog: &openprof_collector::store::Catalog,
    indent: &str,
) {
    let clock = agent
        .clock
        .map(|clock| {
            format!(
                ", clock offset {:+.3} ms ± {:.3} ms ({} samples)",
                clock.offset_ns as f64 / 1e6,
                clock.error_ns as f64 / 1e6,
                clock.samples
            )
        })
        .unwrap_or_default();
    let lost = if agent.lost_frames > 0 {
        format!(
            ", LOST {} frames ({} bytes)",
            agent.lost_frames, agent.lost_bytes
        )
    } else {
        String::new()
    };
    let labels = if agent.labels.is_empty() {
        String::new()
    } else {
        let labels: Vec<String> = agent
            .labels
            .iter()
            .map(|(name, value)| format!("{}:{}", printable(name), printable(value)))
            .collect();
        format!(", labels {}", labels.join(","))
    };
    println!(
        "{indent}agent {} pid {} on {} format={}: {} frames, {} bytes{}{}{}{}",
        agent.agent,
        agent.pid,
        printable(&agent.hostname),
        printable(&agent.format),
        agent.frames,
        agent.bytes,
        clock,
        lost,
        labels,
        if agent.finished { ", finished" } else { "" }
    );
    for trace in catalog.traces.iter().filter(|t| t.agent == agent.agent) {
        let gaps = if trace.gaps.is_empty() {
            String::new()
        } else {
            let ranges: Vec<String> = trace
                .gaps
                .iter()
                .map(|(first, last)| format!("{first}-{last}"))
                .collect();
            format!(", GAPS {}", ranges.join(" "))
        };
        println!(
            "{indent}  trace {}: {} elements, {} duplicates dropped{}{}",
            trace.trace,
            trace.elements,
            trace.duplicates,
            gaps,
            if trace.ended { ", ended" } else { ", open" }
        );
    }
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The trace's id (as `openprof ls` shows), or with --agent an agent's id.
    id: Uuid,
    /// The store's directory.
    #[arg(long, default_value = "openprof-store")]
    store: PathBuf,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Shift every time onto the collector's clock (by the agent's measured offset).
    #[arg(long)]
    align_clock: bool,
    /// ID is an agent: write its HPROF output (format=a or b) exactly as received.
    #[arg(long)]
    agent: bool,
}

/// Writes what a store holds of a trace (a document, elements in collation order) or, with
/// `agent`, of an agent (its HPROF output as received) into a private temporary file, for the
/// readers of files.
pub fn stored_to_file(store_dir: &Path, id: Uuid, agent: bool) -> Result<tempfile::NamedTempFile> {
    let store = open_store(store_dir)?;
    // What the application did is private: the file is its owner's only (tempfile's 0600).
    let mut file = tempfile::Builder::new()
        .prefix("openprof-stored-")
        .tempfile()
        .context("can't create a temporary file")?;
    {
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        if agent {
            let mut any = false;
            store.replay_agent(id, &mut |kind, _sequence, body| {
                if kind == openprof_format::wire::FrameKind::Hprof {
                    any = true;
                    out.write_all(body)?;
                }
                Ok(())
            })?;
            if !any {
                bail!("agent {id} in {} sent no HPROF output", store_dir.display());
            }
        } else {
            store.export_trace(id, ExportOptions { align_clock: false }, &mut out)?;
        }
        out.flush()?;
    }
    Ok(file)
}

pub fn export(args: ExportArgs) -> Result<ExitCode> {
    let store = open_store(&args.store)?;
    let mut out: Box<dyn std::io::Write> = match &args.output {
        // The trace holds what the application did: private, and never through a link.
        Some(path) => Box::new(std::io::BufWriter::new(
            create_private(path, AtALink::Refuse)
                .map_err(|error| anyhow::anyhow!("-o {} {error}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    if args.agent {
        store.replay_agent(args.id, &mut |kind, _sequence, body| {
            if kind == openprof_format::wire::FrameKind::Hprof {
                out.write_all(body)?;
            }
            Ok(())
        })?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let summary = store.export_trace(
        args.id,
        ExportOptions {
            align_clock: args.align_clock,
        },
        &mut out,
    )?;
    out.flush()?;
    if !summary.gaps.is_empty() {
        eprintln!(
            "openprof: trace {} has {} gaps in its collation values; the document lacks those elements",
            args.id,
            summary.gaps.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct InvocationsArgs {
    /// The store's directory.
    #[arg(long, default_value = "openprof-store")]
    store: PathBuf,
    /// Print JSON (an array of the joined calls) instead of lines.
    #[arg(long)]
    json: bool,
}

pub fn invocations(args: InvocationsArgs) -> Result<ExitCode> {
    let store = open_store(&args.store)?;
    let joined = openprof_collector::invocations::join_calls(&store)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&joined)?);
        return Ok(ExitCode::SUCCESS);
    }
    if joined.is_empty() {
        println!("no call between agents in {}", args.store.display());
    }
    let millis = |ns: Option<u128>| {
        ns.map_or_else(|| "?".to_string(), |ns| format!("{:.3}", ns as f64 / 1e6))
    };
    for call in &joined {
        println!(
            "agent {} thread {} {} -> {} [{} .. {} ms]
  agent {} thread {} {} [{} .. {} ms]{}",
            call.caller_agent,
            call.caller_thread,
            printable(call.caller_method.as_deref().unwrap_or("?")),
            printable(&call.called),
            millis(call.call_ns),
            millis(call.return_ns),
            call.callee_agent,
            call.callee_thread,
            printable(&call.callee_method),
            millis(call.entry_ns),
            millis(call.exit_ns),
            call.clock_error_ns
                .map_or_else(String::new, |error| format!(
                    " (clocks within {:.3} ms)",
                    error as f64 / 1e6
                )),
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A recorded trace (format=x document or fragments).
    file: PathBuf,
    #[command(flatten)]
    collector: CollectorArgs,
    #[command(flatten)]
    token: TokenArgs,
    /// Elements per fragment frame.
    #[arg(long, default_value_t = 256)]
    elements_per_fragment: usize,
    /// Shuffle the elements with this seed.
    #[arg(long)]
    shuffle: Option<u64>,
    /// Send every N-th fragment twice.
    #[arg(long, default_value_t = 0)]
    duplicate_every: usize,
    /// Replace the recording's process, agent and trace ids with fresh ones (to replay one
    /// recording as many agents).
    #[arg(long)]
    fresh_ids: bool,
    /// The file is an HPROF profile (text or binary), sent as an HPROF-output agent sends its
    /// output.
    #[arg(long, conflicts_with_all = ["shuffle", "duplicate_every", "fresh_ids"])]
    hprof: bool,
}

pub fn replay_command(args: ReplayArgs) -> Result<ExitCode> {
    let token = args.token.value()?;
    let recording =
        std::fs::read(&args.file).with_context(|| format!("can't read {}", args.file.display()))?;
    let plan = ReplayPlan {
        elements_per_fragment: args.elements_per_fragment,
        shuffle: args.shuffle,
        duplicate_every: args.duplicate_every,
        fresh_ids: args.fresh_ids,
        hprof: args.hprof,
    };
    let report = replay(&args.collector.endpoint(), &token, &recording, &plan)
        .map_err(anyhow::Error::msg)?;
    let seconds = report.elapsed.as_secs_f64().max(1e-9);
    let percentile = |p: f64| {
        report
            .ack_delays
            .get(((report.ack_delays.len() as f64 - 1.0) * p) as usize)
            .map(|delay| delay.as_secs_f64() * 1000.0)
            .unwrap_or(0.0)
    };
    println!(
        "replayed as agent {}: {} elements in {} frames, {} bytes, {:.3} s: {:.0} elements/s, {:.1} MB/s; acknowledged after p50 {:.1} ms, p99 {:.1} ms",
        report.agent,
        report.elements,
        report.frames,
        report.bytes,
        seconds,
        report.elements as f64 / seconds,
        report.bytes as f64 / seconds / 1e6,
        percentile(0.5),
        percentile(0.99)
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{share_descriptors, web_limits};
    use openprof_format::wire::printable;

    #[test]
    fn the_two_ports_share_the_descriptors_and_neither_takes_them_all() {
        // Room for both: as asked.
        assert_eq!(share_descriptors(65536, 900, 100), (900, 100));
        assert_eq!(share_descriptors(1024, 800, 96), (800, 96));
        // Not enough: both cut in proportion within the limit less the reserve.
        assert_eq!(share_descriptors(1024, 900, 100), (807, 89));
        assert_eq!(share_descriptors(256, 900, 100), (116, 12));
        // A tiny limit still leaves the UI a few and the agents the rest.
        assert_eq!(share_descriptors(130, 900, 100), (12, 4));
        // One port alone takes what there is.
        assert_eq!(share_descriptors(256, 900, 0), (128, 0));
        assert_eq!(share_descriptors(256, 0, 1000), (0, 128));
        // One address holds at most half of the UI's connections, and 24.
        assert_eq!(web_limits(12).max_per_address, 6);
        assert_eq!(web_limits(100).max_per_address, 24);
        assert_eq!(web_limits(1).max_per_address, 1);
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("host-1"), "host-1");
        assert_eq!(
            printable("evil\u{1b}]0;owned\u{7}\n"),
            "evil\\u{1b}]0;owned\\u{7}\\n"
        );
    }
}
