//! openprof's web UI and its JSON API, served by `openprof serve --http ADDR` beside the
//! collector (or by `openprof ui --store DIR` over a store alone): the fleet of agents, their
//! profiles as flame graphs and call trees (the views' one HTML component, in a frame),
//! statistics, snapshots and their differences, method parameter tracing's values, and the
//! controls of live agents.
//!
//! - [`auth`]: who may see anything: the control credential, by a login page (a session
//!   cookie) or a bearer token; nothing is open by default.
//! - [`profiles`]: profiles read from the store (an agent's HPROF output, a trace, a
//!   snapshot's period), cached while the store has nothing newer.
//! - [`api`]: the JSON API and the pages; [`fleet`]: the fleet's filter; [`fleet_profile`]:
//!   the fleet's profile summed in ClickHouse (pprof, the flame graph page, top methods over
//!   time, traced values, calls from traces), asking the question [`fleet_query`] holds, which
//!   `openprof fleet` asks too.
//! - [`control`]: commands to live agents through the collector, as `openprof control`
//!   sends them, each logged with who asked ([`audit`]).
//! - [`snapshots`]: named snapshots of an agent's data, kept in the store's directory.
//! - [`connections`]: the bounds of the UI's connections (how many, from one address, how
//!   long idle or slow), so no client without a credential can take the port or descriptors.
//! - [`https`]: HTTPS with the collector's certificate, when the collector has TLS.

pub mod api;
pub mod audit;
pub mod auth;
pub mod connections;
pub mod control;
pub mod fleet;
pub mod fleet_profile;
pub mod fleet_query;
pub mod https;
pub mod profiles;
pub mod snapshots;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use openprof_collector::client::Endpoint;
use openprof_collector::store::Store;
use uuid::Uuid;

/// The agents a running collector has connected now (none without a collector).
pub type ConnectedAgents = Arc<dyn Fn() -> Vec<Uuid> + Send + Sync>;

/// How the web UI is served.
pub struct WebConfig {
    /// Where to listen (loopback unless given otherwise on purpose).
    pub listen: SocketAddr,
    /// The credential a browser or an API client must prove: the collector's control token.
    pub credential: String,
    /// The store's directory (snapshots and the action log are kept beside its catalog).
    pub store_dir: PathBuf,
    /// The collector to send commands through, when one runs (over TLS when it has TLS).
    pub collector: Option<Endpoint>,
    /// Serve HTTPS with this configuration (the collector's certificate and key) instead of
    /// plain HTTP; the session cookie is then `Secure`.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// The ClickHouse database the collector forwards windows into, for the fleet's routes on
    /// ClickHouse (`openprof serve --clickhouse`).
    pub clickhouse: Option<openprof_collector::clickhouse::ClickHouse>,
    /// How many connections, from how many places, for how long ([`connections`]).
    pub limits: connections::Limits,
}

/// What every request handler shares.
pub struct Web {
    pub config: WebConfig,
    pub store: Arc<dyn Store>,
    pub connected: Option<ConnectedAgents>,
    pub sessions: auth::Sessions,
    pub profiles: profiles::ProfileCache,
    pub views: profiles::Kept<Vec<u8>>,
    pub indexes: profiles::Kept<openprof_analysis::statistics::StatisticsIndex>,
    pub snapshots: snapshots::Snapshots,
    pub audit: audit::AuditLog,
    pub live: control::LiveDumps,
    pub guesses: auth::Guesses,
}

/// A web server running until its future is dropped or [`serve`]'s shutdown signal comes.
pub struct Running {
    pub local_addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
}

/// Binds and serves the UI; returns once it listens.
pub async fn serve(
    config: WebConfig,
    store: Arc<dyn Store>,
    connected: Option<ConnectedAgents>,
) -> anyhow::Result<Running> {
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let local_addr = listener.local_addr()?;
    let snapshots = snapshots::Snapshots::open(&config.store_dir)?;
    let audit = audit::AuditLog::open(&config.store_dir)?;
    let web = Arc::new(Web {
        config,
        store,
        connected,
        sessions: auth::Sessions::default(),
        profiles: profiles::ProfileCache::default(),
        views: profiles::Kept::new(profiles::VIEWS_KEPT),
        indexes: profiles::Kept::new(profiles::INDEXES_KEPT),
        snapshots,
        audit,
        live: control::LiveDumps::default(),
        guesses: auth::Guesses::default(),
    });
    let tls = web
        .config
        .tls
        .as_ref()
        .map(|tls| tokio_rustls::TlsAcceptor::from(https::ui_config(tls)));
    let limits = web.config.limits.clone();
    // The counts of wrong credentials are logged every few seconds while the UI lives.
    let guesses = Arc::downgrade(&web);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(
            openprof_collector::repeated_warnings::RepeatedWarnings::INTERVAL,
        );
        loop {
            every.tick().await;
            match guesses.upgrade() {
                Some(web) => web.guesses.flush(),
                None => return,
            }
        }
    });
    let task = tokio::spawn(connections::serve(listener, api::router(web), tls, limits));
    Ok(Running { local_addr, task })
}
