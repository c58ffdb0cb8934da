//! openprof's data formats: pure data, no JVM and no sockets.
//!
//! - [`options`]: the agent's option string, in HPROF's syntax, names and defaults.
//! - [`private_file`]: output files created private to their owner, never through a link.
//! - [`secret`]: the collector's token read from a file, bounded.
//! - [`hprof_binary`]: HPROF's binary format (`format=b`): records, writer, streaming reader,
//!   and a whole file read into the text reader's model (heap histograms, allocation sites, CPU
//!   samples, traces).
//! - [`hprof_text`]: HPROF's text output (`format=a`): model, writer and reader, heap records
//!   (SITES, HEAP DUMP) included.
//! - [`heap`]: heap histograms (objects and bytes per class, roots by kind) and the shallow-size
//!   estimate for dumps without sizes.
//! - [`java_names`]: class and method names from JVM signatures to Java source form.
//! - [`mpt`]: method parameter tracing specifications (docs/mpt.md): parser, printer, matching
//!   of method patterns against JVM descriptors.
//! - [`mpt_stats`]: method parameter tracing's figures: calls and times per traced value,
//!   ranked slowest first.
//! - [`trace`]: the open trace format: elements, writer, streaming reader, DTD, filters, validation.
//! - [`wire`]: the agent-collector protocol: frames, messages, HPROF's socket commands.
//! - [`tls_client`]: TLS to the collector for agents and clients (rustls).
//! - [`handshake`]: the wire's challenge–response authentication and command signatures.

pub mod handshake;
pub mod heap;
pub mod hprof_binary;
pub mod hprof_text;
pub mod invocation;
pub mod java_names;
pub mod mpt;
pub mod mpt_stats;
pub mod options;
pub mod private_file;
pub mod secret;
pub mod tls_client;
pub mod trace;
pub mod wire;
