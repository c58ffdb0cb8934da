//! The `openprof` command's integration tests, as one test binary: the binary run on real JVMs,
//! on files the format crate writes and on bad input, one module per command or feature, the
//! runner of the binary itself in `helpers`.

mod attach;
mod collector;
mod commands;
mod fleet;
mod heap_analysis;
mod heap_dump;
mod helpers;
mod mpt_jvm;
mod mpt_report;
mod profile;
mod pyroscope;
mod real_apps;
mod statistics;
mod token_files;
mod ui;
mod ui_fleet;
mod ui_limits;
mod views;
mod views_html;
mod views_jfr;
mod views_pprof;
mod views_trace;
