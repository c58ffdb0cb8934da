//! Where compiled Java methods are in memory, as JVMTI's CompiledMethodLoad and
//! CompiledMethodUnload report them, in a table the SIGPROF handler can read: it says which
//! method a pc is in when AsyncGetCallTrace cannot walk from it (a method's entry before its
//! frame is complete). Entries are appended under a lock by the JVM's threads and read without
//! one: a reader sees an entry only once its count is published, and an unloaded entry is
//! marked dead, never removed, so nothing a reader holds is ever freed or reused.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::jvmti::jmethodID;
use crate::sync::lock;

/// Compiled methods remembered at most (a few MiB); beyond, new code is not mapped (its failed
/// walks stay failures).
const CAPACITY: usize = 1 << 18;
/// How many of the newest entries a lookup scans: the bound on the handler's time.
const SCAN_LIMIT: usize = 1 << 16;

struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    method: AtomicUsize,
    live: AtomicBool,
}

struct CodeMap {
    entries: Box<[Entry]>,
    count: AtomicUsize,
    /// The lowest start and highest end of all code mapped: a pc outside is in no method, which
    /// a lookup tells without a scan (stack scans look up many words that are no code).
    lowest: AtomicUsize,
    highest: AtomicUsize,
    append: Mutex<()>,
}

static MAP: OnceLock<CodeMap> = OnceLock::new();

/// Allocates the table (at start-up, before any code is reported).
pub fn init() {
    MAP.get_or_init(|| CodeMap {
        entries: (0..CAPACITY)
            .map(|_| Entry {
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                method: AtomicUsize::new(0),
                live: AtomicBool::new(false),
            })
            .collect(),
        count: AtomicUsize::new(0),
        lowest: AtomicUsize::new(usize::MAX),
        highest: AtomicUsize::new(0),
        append: Mutex::new(()),
    });
}

/// A method was compiled to `size` bytes at `start`.
pub fn loaded(method: jmethodID, start: usize, size: usize) {
    let Some(map) = MAP.get() else { return };
    let _append = lock(&map.append);
    let index = map.count.load(Ordering::Relaxed);
    let Some(entry) = map.entries.get(index) else {
        return;
    };
    entry.start.store(start, Ordering::Relaxed);
    entry
        .end
        .store(start.saturating_add(size), Ordering::Relaxed);
    entry.method.store(method as usize, Ordering::Relaxed);
    entry.live.store(true, Ordering::Relaxed);
    map.lowest.fetch_min(start, Ordering::Relaxed);
    map.highest
        .fetch_max(start.saturating_add(size), Ordering::Relaxed);
    map.count.store(index + 1, Ordering::Release);
}

/// The compiled code of `method` at `start` was freed.
pub fn unloaded(method: jmethodID, start: usize) {
    let Some(map) = MAP.get() else { return };
    let _append = lock(&map.append);
    let count = map.count.load(Ordering::Relaxed);
    for entry in map.entries[..count].iter().rev() {
        if entry.start.load(Ordering::Relaxed) == start
            && entry.method.load(Ordering::Relaxed) == method as usize
            && entry.live.load(Ordering::Relaxed)
        {
            entry.live.store(false, Ordering::Release);
            return;
        }
    }
}

/// The compiled method whose code holds `pc`, newest first. Async-signal-safe: atomic loads
/// only, a bounded scan.
pub fn method_at(pc: usize) -> Option<jmethodID> {
    let map = MAP.get()?;
    let count = map.count.load(Ordering::Acquire);
    if pc < map.lowest.load(Ordering::Relaxed) || pc >= map.highest.load(Ordering::Relaxed) {
        return None;
    }
    let first = count.saturating_sub(SCAN_LIMIT);
    map.entries[first..count].iter().rev().find_map(|entry| {
        let live = entry.live.load(Ordering::Acquire);
        let start = entry.start.load(Ordering::Relaxed);
        let end = entry.end.load(Ordering::Relaxed);
        (live && start <= pc && pc < end).then(|| entry.method.load(Ordering::Relaxed) as jmethodID)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pc_maps_to_the_newest_live_code_holding_it() {
        init();
        let first = 0x1000 as jmethodID;
        let second = 0x2000 as jmethodID;
        loaded(first, 0x7000_0000, 0x100);
        assert_eq!(method_at(0x7000_0080), Some(first));
        assert_eq!(method_at(0x7000_0100), None);
        // The code is freed and its memory reused by another method.
        unloaded(first, 0x7000_0000);
        assert_eq!(method_at(0x7000_0080), None);
        loaded(second, 0x7000_0000, 0x80);
        assert_eq!(method_at(0x7000_0010), Some(second));
    }
}
