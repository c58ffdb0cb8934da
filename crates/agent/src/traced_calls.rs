//! Which traced call (method parameter tracing) each thread is inside, published so that the
//! sampling signal handlers can tag a sample with it, and what each tag stands for: the call's
//! method and the values its specifications recorded.
//!
//! A thread entering a traced call publishes the call's number in a slot of its own, found by
//! its kernel id in a fixed table; the handler, on the interrupted thread, looks its kernel id
//! up there. The table is fixed, so the handler neither allocates nor locks (a thread-local
//! would not do: in a library the JVM loaded with dlopen, a thread's first use of one may
//! allocate). A thread takes a slot only while it is inside a traced call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use std::hash::{Hash, Hasher};

use openprof_format::mpt_stats::{ValueKey, ValueType};

use crate::sync::lock;

/// Threads inside traced calls at once that can be told apart; a thread beyond them has its
/// samples counted untagged (docs/mpt.md says so).
const SLOTS: usize = 512;

/// The numbers a sample's tag has room for (23 bits: see `signals::CALL_SHIFT`).
pub const MAX_CALL: u32 = (1 << 23) - 1;

/// Distinct (method, values) combinations numbered at most: each is kept for the run (a few
/// hundred bytes), so a parameter of unbounded values (a request id, say) must not grow the
/// JVM's memory without end. Calls with values beyond them go untagged.
const MAX_NUMBERED: usize = 100_000;

/// What a traced call recorded: its method (as the MPT record names it) and, per
/// specification in force, its value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallValues {
    pub method: String,
    pub values: Vec<(String, ValueKey)>,
    /// The traced call this one was made in (0: none): a sample's labels are its calls' values,
    /// outermost first.
    pub outer: u32,
}

struct Slot {
    kernel_id: AtomicI32,
    call: AtomicU32,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    kernel_id: AtomicI32::new(0),
    call: AtomicU32::new(0),
};

static SLOTS_IN_USE: [Slot; SLOTS] = [FREE; SLOTS];
/// One past the highest slot ever taken: the handler looks no further.
static HIGHEST: AtomicUsize = AtomicUsize::new(0);

/// A call's values as the tracer holds them: its site (instrumented method), the traced call
/// it was made in (0: none), and per specification in force (by its number) the value's type
/// and text.
pub type CallKey<'a> = (u32, u32, &'a [(u32, ValueType, &'a str)]);

/// A call's key as kept: site, outer call, values, and the number given to them.
type KeptKey = (u32, u32, Vec<(u32, ValueType, String)>, u32);

#[derive(Default)]
struct Numbers {
    /// By the hash of a call's key: the keys seen with that hash and their numbers. Looked up
    /// with the tracer's borrowed values, so a call whose values were seen allocates nothing.
    by_key: HashMap<u64, Vec<KeptKey>>,
    /// Number n's values at n - 1.
    values: Vec<CallValues>,
}

fn hash_of((site, outer, values): CallKey<'_>) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    site.hash(&mut hasher);
    outer.hash(&mut hasher);
    for value in values {
        value.hash(&mut hasher);
    }
    hasher.finish()
}

static NUMBERS: Mutex<Option<Numbers>> = Mutex::new(None);

/// The number of a call with these values (the same values, the same number), `describe`
/// saying what they are the first time; `None` when every number is taken.
pub fn number_of(key: CallKey<'_>, describe: impl FnOnce() -> CallValues) -> Option<u32> {
    let hash = hash_of(key);
    let mut numbers = lock(&NUMBERS);
    let numbers = numbers.get_or_insert_with(Numbers::default);
    let (site, outer, values) = key;
    let same = |(known_site, known_outer, known, _): &&KeptKey| {
        *known_site == site
            && *known_outer == outer
            && known.len() == values.len()
            && known
                .iter()
                .zip(values)
                .all(|(a, b)| a.0 == b.0 && a.1 == b.1 && a.2 == b.2)
    };
    if let Some((_, _, _, number)) = numbers
        .by_key
        .get(&hash)
        .and_then(|seen| seen.iter().find(same))
    {
        return Some(*number);
    }
    if numbers.values.len() >= MAX_NUMBERED.min(MAX_CALL as usize) {
        return None;
    }
    numbers.values.push(describe());
    let number = numbers.values.len() as u32;
    let owned = values
        .iter()
        .map(|(spec, kind, text)| (*spec, *kind, text.to_string()))
        .collect();
    numbers
        .by_key
        .entry(hash)
        .or_default()
        .push((site, outer, owned, number));
    Some(number)
}

/// What a call number stands for.
pub fn values_of(number: u32) -> Option<CallValues> {
    let numbers = lock(&NUMBERS);
    numbers
        .as_ref()?
        .values
        .get(number.checked_sub(1)? as usize)
        .cloned()
}

/// Publishes `call` (0: none) as the traced call the thread `kernel_id` (the caller) is in now;
/// returns the one it was in before, to be put back when this one ends.
pub fn enter(kernel_id: i32, call: u32) -> u32 {
    if let Some(slot) = slot_of(kernel_id) {
        return slot.call.swap(call, Ordering::AcqRel);
    }
    if call == 0 {
        return 0;
    }
    for (index, slot) in SLOTS_IN_USE.iter().enumerate() {
        if slot
            .kernel_id
            .compare_exchange(0, kernel_id, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            slot.call.store(call, Ordering::Release);
            HIGHEST.fetch_max(index + 1, Ordering::AcqRel);
            return 0;
        }
    }
    0
}

/// The thread `kernel_id` (the caller) left its traced call and is back in `previous` (0:
/// in none, and its slot is given up).
pub fn leave(kernel_id: i32, previous: u32) {
    let Some(slot) = slot_of(kernel_id) else {
        return;
    };
    slot.call.store(previous, Ordering::Release);
    if previous == 0 {
        slot.kernel_id.store(0, Ordering::Release);
    }
}

fn slot_of(kernel_id: i32) -> Option<&'static Slot> {
    let highest = HIGHEST.load(Ordering::Acquire);
    SLOTS_IN_USE[..highest]
        .iter()
        .find(|slot| slot.kernel_id.load(Ordering::Acquire) == kernel_id)
}

/// The traced call the thread `kernel_id` is in (0: none). Async-signal-safe: atomic loads of
/// a fixed table.
pub fn current(kernel_id: i32) -> u32 {
    slot_of(kernel_id).map_or(0, |slot| slot.call.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(value: &str) -> CallValues {
        CallValues {
            method: "example.Slow.work(int)".into(),
            values: vec![(
                "Slow.work(int) 1".into(),
                ValueKey::new(ValueType::Int, value),
            )],
            outer: 0,
        }
    }

    fn number(site: u32, value: &str) -> Option<u32> {
        number_of((site, 0, &[(1, ValueType::Int, value)]), || values(value))
    }

    #[test]
    fn the_same_values_get_the_same_number() {
        let slow = number(1, "100").unwrap();
        let fast = number(1, "1").unwrap();
        assert_ne!(slow, fast);
        assert_eq!(number(1, "100"), Some(slow));
        assert_ne!(number(2, "100"), Some(slow), "another site, another number");
        let inside = number_of((1, slow, &[(1, ValueType::Int, "100")]), || values("100"));
        assert!(
            inside.is_some_and(|inside| inside != slow),
            "another outer call, another number"
        );
        assert_eq!(values_of(slow), Some(values("100")));
        assert_eq!(values_of(0), None);
    }

    #[test]
    fn nested_calls_are_published_innermost_and_put_back() {
        let thread = 7_000_001;
        assert_eq!(current(thread), 0);
        let outer = enter(thread, 3);
        assert_eq!((outer, current(thread)), (0, 3));
        let inner = enter(thread, 5);
        assert_eq!((inner, current(thread)), (3, 5));
        leave(thread, inner);
        assert_eq!(current(thread), 3);
        leave(thread, outer);
        assert_eq!(current(thread), 0);
        assert!(!SLOTS_IN_USE
            .iter()
            .any(|slot| slot.kernel_id.load(Ordering::Acquire) == thread));
    }

    #[test]
    fn threads_are_told_apart() {
        let (a, b) = (7_000_011, 7_000_012);
        let before_a = enter(a, 1);
        let before_b = enter(b, 2);
        assert_eq!((current(a), current(b)), (1, 2));
        leave(a, before_a);
        assert_eq!((current(a), current(b)), (0, 2));
        leave(b, before_b);
    }
}
