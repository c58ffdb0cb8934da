//! The attach client's integration tests, as one test binary: the protocol against real JVMs
//! and processes, one module per side of it.

mod listeners;
mod protocol;
