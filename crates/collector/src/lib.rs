//! openprof's collector: agents stream to it over the wire of docs/protocol.md; it checks and
//! collates what they send, estimates their clocks, stores everything durably and forwards
//! commands to live agents.
//!
//! - [`scan`]: a fast check of trace fragments: well-formed, which trace and collationValue each
//!   element has, and the hierarchy elements typed.
//! - [`client`]: the blocking clients' connection and handshake, and control requests (commands
//!   parsed from their command-line names, sent, answered).
//! - [`server`]: the listener, agent and control connections, the store writer thread.
//! - [`replay`]: a client that replays a recorded trace as an agent (tests, benchmarks).
//! - [`clock`]: clock offsets from heartbeat round trips.
//! - [`invocations`]: calls between agents joined (a caller's methodCall, the callee's entry).
//! - [`store`]: the [`store::Store`] trait and its embedded backend (SQLite catalog + zstd
//!   segments).
//! - [`windows`]: `continuous=` profile windows read back from an agent's HPROF stream.
//! - [`elements`]: format=x agents' trace elements as rows (tag, attributes, XML).
//! - [`forward`]: the forwarder thread: windows and elements followed in the store, handed to
//!   a sink.
//! - [`clickhouse`]: the fleet's windows, traced values, trace elements and hierarchy forwarded
//!   to ClickHouse, and queried there.
//! - [`pyroscope`]: the fleet's windows pushed to Pyroscope as pprof.
//! - [`repeated_warnings`]: warnings that come in floods, logged once a while with a count.

pub mod clickhouse;
pub mod client;
pub mod clock;
pub mod elements;
pub mod forward;
pub mod invocations;
pub mod pyroscope;
pub mod repeated_warnings;
pub mod replay;
pub mod scan;
pub mod server;
pub mod store;
pub mod tls;
pub mod windows;
