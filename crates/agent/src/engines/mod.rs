//! The profiling engines, one module each, every one behind the `Engine` trait (engine.rs).

pub mod cpu_samples;
pub mod cpu_times;
pub mod delay;
pub mod heap_dump;
pub mod heap_sites;
pub mod locks;
pub mod monitors;
pub mod mpt;
pub mod trace;
pub mod virtual_parks;
pub mod wall_samples;
