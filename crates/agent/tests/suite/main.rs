//! The agent's integration tests, as one test binary: real JVMs run with the agent library
//! built in target/, one module per feature, their common checks in `helpers`.

mod cpu_samples;
mod cpu_times;
mod delay;
mod heap_dump;
mod heap_sites;
mod helpers;
mod hprof_reader;
mod locks;
mod mpt;
mod native_frames;
mod options;
mod private_files;
mod stress;
mod threads;
mod trace;
mod vm_threads;
mod walker;
mod wall_samples;
