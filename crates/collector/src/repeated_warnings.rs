//! Warnings that may come in floods (refused connections, accept errors, failing commits), on
//! the agents' port and the UI's alike: each logged once, then at most every few seconds with
//! how many times it came meanwhile.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::warn;

/// A warning that may come in floods (refused connections, accept errors, failing commits):
/// logged once, then at most every few seconds with how many times it came meanwhile.
#[derive(Default)]
pub struct RepeatedWarnings {
    seen: Mutex<HashMap<&'static str, Repeats>>,
}

struct Repeats {
    logged: Instant,
    /// Since `logged`: how many times, and the last message.
    more: u64,
    last: String,
}

impl RepeatedWarnings {
    pub const INTERVAL: Duration = Duration::from_secs(5);

    pub fn warn(&self, key: &'static str, message: impl Display) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match seen.get_mut(key) {
            Some(repeats) if repeats.logged.elapsed() < Self::INTERVAL => {
                repeats.more += 1;
                repeats.last = message.to_string();
            }
            previous => {
                match previous {
                    Some(repeats) if repeats.more > 0 => warn!(
                        "{message} (and {} more like it in the last {} s)",
                        repeats.more,
                        repeats.logged.elapsed().as_secs()
                    ),
                    _ => warn!("{message}"),
                }
                seen.insert(
                    key,
                    Repeats {
                        logged: Instant::now(),
                        more: 0,
                        last: String::new(),
                    },
                );
            }
        }
    }

    /// Logs the counts of warnings repeated since they were last logged.
    pub fn flush(&self) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for repeats in seen.values_mut() {
            if repeats.more > 0 && repeats.logged.elapsed() >= Self::INTERVAL {
                warn!(
                    "{} (and {} more like it in the last {} s)",
                    repeats.last,
                    repeats.more - 1,
                    repeats.logged.elapsed().as_secs()
                );
                repeats.more = 0;
                repeats.logged = Instant::now();
            }
        }
    }
}
