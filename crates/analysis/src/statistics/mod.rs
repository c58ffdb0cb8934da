//! The statistics a Java performance engineer reads in JMC, VisualVM or the Eclipse profiling
//! tools, for any profile read into the model: methods (self, total, calls and their times),
//! allocations by class and by allocating method, threads (CPU, states, lock waits, over time),
//! components (packages, a map of them, class loaders), everything about one method, class,
//! package or thread, and the differences between two profiles (docs/statistics.md).
//!
//! A profile's samples are read once, into a [`StatisticsIndex`]; every statistic is computed
//! from it, and every result serializes (serde) as the JSON the web UI and `openprof report
//! --stats ... --json` give.

mod allocations;
mod components;
mod diff;
mod index;
mod methods;
#[cfg(test)]
mod tests;
mod threads;

pub use allocations::{AllocationRow, AllocationStats, ALLOCATION_EVENTS};
pub use components::{ComponentMap, ComponentMapError, ComponentRule, ComponentStats, OTHER};
pub use diff::{DiffKind, DiffRow, StatsDiff};
pub use index::{
    EventWeights, LockRow, MptRow, MptStats, Related, ResourceId, ResourceRef, ResourceStats,
    StateRow, StatisticsIndex,
};
pub use methods::{CallFigures, CpuPerCall, Durations, MethodRow, MethodSort, MethodStats};
pub use threads::{thread_timeline, ThreadRow, ThreadStats, ThreadTimeline, TimelineThread};

use serde::Serialize;

use crate::profile::Event;

/// What a statistic is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Method,
    Class,
    Package,
    Thread,
}

impl ResourceKind {
    pub const ALL: [ResourceKind; 4] = [
        ResourceKind::Method,
        ResourceKind::Class,
        ResourceKind::Package,
        ResourceKind::Thread,
    ];

    /// The name `--resource KIND:NAME` takes.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Method => "method",
            ResourceKind::Class => "class",
            ResourceKind::Package => "package",
            ResourceKind::Thread => "thread",
        }
    }
}

/// An event's weights on a resource: where it is the leaf (self: the method running, the code
/// allocating, the thread waiting) and anywhere on the stack (total, counted once per stack
/// however often the resource recurs in it); values in the event's unit, counts of samples or
/// events (objects, waits, calls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Weights {
    pub self_value: u64,
    pub self_count: u64,
    pub total_value: u64,
    pub total_count: u64,
}

impl Weights {
    /// Adds a sample's value and count, to self too when `is_self`.
    pub(crate) fn add(&mut self, value: u64, count: u64, is_self: bool) {
        self.total_value += value;
        self.total_count += count;
        if is_self {
            self.self_value += value;
            self.self_count += count;
        }
    }

    pub(crate) fn merge(&mut self, other: &Weights) {
        self.self_value += other.self_value;
        self.self_count += other.self_count;
        self.total_value += other.total_value;
        self.total_count += other.total_count;
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.total_value == 0 && self.total_count == 0
    }
}

/// An event's weights on something named (a method, a package, a component, a class loader),
/// on one thread when split by thread, with its shares of the event's total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightedRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ResourceRef>,
    #[serde(flatten)]
    pub weights: Weights,
    pub self_percent: f64,
    pub total_percent: f64,
}

impl WeightedRow {
    pub(crate) fn new(
        name: String,
        thread: Option<ResourceRef>,
        weights: Weights,
        event_total: u64,
    ) -> WeightedRow {
        WeightedRow {
            name,
            thread,
            weights,
            self_percent: percent(weights.self_value, event_total),
            total_percent: percent(weights.total_value, event_total),
        }
    }
}

/// `part` as a percentage of `whole` (0 when the whole is 0).
pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The class of a Java method's frame name: all before the last dot (`java.util.HashMap` of
/// `java.util.HashMap.getNode`); a name without a dot is its own class.
pub fn class_of(method: &str) -> &str {
    method.rfind('.').map_or(method, |dot| &method[..dot])
}

/// The name the default package goes by.
pub const DEFAULT_PACKAGE: &str = "(default package)";

/// The package of a class: all before the last dot of the class's name, [`DEFAULT_PACKAGE`]
/// without one; an array's is its element's, and a primitive's `java.lang` (as Java's
/// `Class.getPackageName` gives them).
pub fn package_of(class: &str) -> &str {
    let element = class.trim_end_matches("[]");
    const PRIMITIVES: [&str; 9] = [
        "boolean", "byte", "char", "short", "int", "long", "float", "double", "void",
    ];
    if PRIMITIVES.contains(&element) {
        return "java.lang";
    }
    match element.rfind('.') {
        Some(dot) => &element[..dot],
        None => DEFAULT_PACKAGE,
    }
}

/// Why a statistic could not be computed: what was asked for and what the profile holds.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StatsError {
    #[error("{profile} has no {event} samples; it has: {present}", event = event.name())]
    MissingEvent {
        profile: String,
        event: Event,
        present: String,
    },
    #[error("{profile} holds no samples{what}")]
    NoSamples { profile: String, what: String },
    #[error("{event} is not an allocation event: allocations are sorted by alloc_bytes, alloc_objects, live_bytes or live_objects", event = event.name())]
    NotAllocationEvent { event: Event },
    #[error(
        "no {kinds} is named {name:?} in {profile}{}",
        did_you_mean(suggestions)
    )]
    UnknownResource {
        profile: String,
        /// What was looked for: `method, class, package or thread`, or one kind.
        kinds: String,
        name: String,
        suggestions: Vec<String>,
    },
    #[error("{} threads are named {name:?}: name one as {}", candidates.len(), candidates.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(" or "))]
    AmbiguousThread {
        name: String,
        candidates: Vec<String>,
    },
    #[error("{profile} has no {event} samples with times: a timeline needs an input with times (JFR recordings, traces)", event = event.name())]
    NoTimes { profile: String, event: Event },
    #[error("bad bucket width {bucket_ns} ns: a timeline's buckets last 1 ns or more, at most 100,000 of them")]
    BadBucket { bucket_ns: u64 },
}

fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    }
}

/// The events of a profile as a list for messages.
pub(crate) fn event_names(events: &[Event]) -> String {
    if events.is_empty() {
        "no samples at all".into()
    } else {
        events
            .iter()
            .map(|event| event.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
