//! openprof's collector: agents stream to it over the wire of docs/protocol.md; it checks and
//! collates what they send, estimates their clocks, stores everything durably and forwards
//! commands to live agents.
//!
//! - [`scan`]: a fast check of trace fragments: well-formed, which trace and collationValue each
//!   element has, and the hierarchy elements typed.
//! - [`store`]: the [`store::Store`] trait and its embedded backend (SQLite catalog + zstd
//!   segments).

pub mod scan;
pub mod store;
