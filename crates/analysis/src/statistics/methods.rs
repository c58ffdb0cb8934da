//! Method statistics: per method (lines folded into their method), an event's self and total
//! weights and shares, and where the profile has calls (instrumented `calls` and `cpu_time`,
//! traced calls' spans) how many there were and what each took.

use serde::Serialize;

use super::index::{thread_order, Attr, CpuSingles, SpanFigures, StatisticsIndex};
use super::{ResourceKind, StatsError, WeightedRow, Weights};
use crate::profile::{Event, Unit};

/// A method's calls: how many, and their wall-clock and CPU times per call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallFigures {
    /// Calls: the `calls` event's count (each entry, counted by instrumentation), else the
    /// traced calls' spans.
    pub calls: u64,
    /// From the traced calls' spans, entry to exit (callees included).
    pub wall: Option<Durations>,
    /// From the `cpu_time` event.
    pub cpu: Option<CpuPerCall>,
}

/// How long things took (calls, waits), nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Durations {
    pub count: u64,
    pub total_ns: u64,
    pub mean_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl Durations {
    /// The figures of spans; `None` without any.
    pub(crate) fn of(spans: &SpanFigures) -> Option<Durations> {
        (spans.calls > 0).then(|| Durations {
            count: spans.calls,
            total_ns: spans.total_ns,
            mean_ns: mean(spans.total_ns, spans.calls),
            min_ns: spans.min_ns,
            max_ns: spans.max_ns,
        })
    }
}

/// CPU time per call, nanoseconds: own (less the traced calls it made, as HPROF's CPU TIME
/// counts it) and with its callees (each stack counted once).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuPerCall {
    pub self_total_ns: u64,
    pub self_mean_ns: u64,
    /// The least and the most own CPU time of one call, where every call was recorded apart
    /// (a trace); not where rows sum several calls (HPROF's CPU TIME).
    pub self_min_ns: Option<u64>,
    pub self_max_ns: Option<u64>,
    pub total_ns: u64,
    pub total_mean_ns: u64,
}

/// `total / calls`, rounded to the nearest nanosecond (0 without calls).
fn mean(total: u64, calls: u64) -> u64 {
    if calls == 0 {
        0
    } else {
        ((u128::from(total) + u128::from(calls) / 2) / u128::from(calls)) as u64
    }
}

/// A method's call figures from its `calls` and `cpu_time` weights, its calls' spans and its
/// calls' own CPU times one by one; `None` where the profile has no calls of it.
pub(crate) fn call_figures(
    calls: Option<Weights>,
    cpu: Option<Weights>,
    spans: SpanFigures,
    cpu_calls: CpuSingles,
) -> Option<CallFigures> {
    let counted = calls.map_or(0, |weights| weights.self_value);
    let calls = if counted > 0 { counted } else { spans.calls };
    if calls == 0 {
        return None;
    }
    let wall = Durations::of(&spans);
    let one_by_one = cpu_calls.summed_samples == 0 && cpu_calls.single.calls > 0;
    let cpu = cpu
        .filter(|weights| !weights.is_zero())
        .map(|weights| CpuPerCall {
            self_total_ns: weights.self_value,
            self_mean_ns: mean(weights.self_value, calls),
            self_min_ns: one_by_one.then_some(cpu_calls.single.min_ns),
            self_max_ns: one_by_one.then_some(cpu_calls.single.max_ns),
            total_ns: weights.total_value,
            total_mean_ns: mean(weights.total_value, calls),
        });
    Some(CallFigures { calls, wall, cpu })
}

/// What method rows are sorted by (heaviest, most, slowest first; names A to Z).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MethodSort {
    /// Self value (then total, then name).
    #[serde(rename = "self")]
    SelfValue,
    Total,
    /// Self count: samples, objects, waits, calls.
    SelfCount,
    TotalCount,
    Calls,
    /// Mean wall-clock time per call.
    WallMean,
    WallMax,
    /// Mean own CPU time per call.
    CpuMean,
    Name,
}

impl MethodSort {
    pub const ALL: [MethodSort; 9] = [
        MethodSort::SelfValue,
        MethodSort::Total,
        MethodSort::SelfCount,
        MethodSort::TotalCount,
        MethodSort::Calls,
        MethodSort::WallMean,
        MethodSort::WallMax,
        MethodSort::CpuMean,
        MethodSort::Name,
    ];

    /// The name `--sort` takes.
    pub fn name(self) -> &'static str {
        match self {
            MethodSort::SelfValue => "self",
            MethodSort::Total => "total",
            MethodSort::SelfCount => "self_count",
            MethodSort::TotalCount => "total_count",
            MethodSort::Calls => "calls",
            MethodSort::WallMean => "wall_mean",
            MethodSort::WallMax => "wall_max",
            MethodSort::CpuMean => "cpu_mean",
            MethodSort::Name => "name",
        }
    }

    pub fn from_name(name: &str) -> Option<MethodSort> {
        MethodSort::ALL.into_iter().find(|sort| sort.name() == name)
    }
}

/// One method's weights in the event (on one thread, when split by thread).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodRow {
    /// The method's name and weights.
    #[serde(flatten)]
    pub row: WeightedRow,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<CallFigures>,
}

/// The methods of a profile in one event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodStats {
    pub source: String,
    pub event: Event,
    pub unit: Unit,
    /// The event's value and count over the samples kept.
    pub total_value: u64,
    pub total_count: u64,
    pub by_thread: bool,
    pub sort: MethodSort,
    pub methods: Vec<MethodRow>,
}

impl StatisticsIndex {
    /// Every method with weight in `event` (default: the first event kept, CPU first) or with
    /// calls, sorted by `sort`; with `by_thread`, one row per method and thread.
    pub fn methods(
        &self,
        event: Option<Event>,
        sort: MethodSort,
        by_thread: bool,
    ) -> Result<MethodStats, StatsError> {
        let (event, slot) = self.event_and_slot(event)?;
        let (total_value, total_count) = self.event_totals[slot];
        let row = |method: u32, thread: Option<u32>, weights: Weights| MethodRow {
            row: WeightedRow::new(
                self.name(method).to_string(),
                thread.map(|thread| self.reference(thread)),
                weights,
                total_value,
            ),
            calls: self.call_figures(method, thread),
        };
        let mut methods: Vec<MethodRow> = Vec::new();
        for method in self.of_kind(ResourceKind::Method) {
            if by_thread {
                for cross in self.cross_of(method) {
                    if let (Attr::Thread(thread), true) = (
                        self.attrs[cross.other as usize],
                        cross.event as usize == slot,
                    ) {
                        methods.push(row(method, Some(thread), cross.weights));
                    }
                }
            } else {
                let weights = self.weights(method, slot);
                let method_row = row(method, None, weights);
                if !weights.is_zero() || method_row.calls.is_some() {
                    methods.push(method_row);
                }
            }
        }
        sort_methods(&mut methods, sort);
        Ok(MethodStats {
            source: self.source.clone(),
            event,
            unit: event.unit(),
            total_value,
            total_count,
            by_thread,
            sort,
            methods,
        })
    }
}

fn sort_methods(methods: &mut Vec<MethodRow>, sort: MethodSort) {
    let calls = |row: &MethodRow| row.calls.as_ref().map_or(0, |calls| calls.calls);
    let wall = |row: &MethodRow, pick: fn(&Durations) -> u64| {
        row.calls
            .as_ref()
            .and_then(|calls| calls.wall.as_ref())
            .map_or(0, pick)
    };
    let cpu_mean = |row: &MethodRow| {
        row.calls
            .as_ref()
            .and_then(|calls| calls.cpu.as_ref())
            .map_or(0, |cpu| cpu.self_mean_ns)
    };
    let key = |row: &MethodRow| -> u64 {
        match sort {
            MethodSort::SelfValue => row.row.weights.self_value,
            MethodSort::Total => row.row.weights.total_value,
            MethodSort::SelfCount => row.row.weights.self_count,
            MethodSort::TotalCount => row.row.weights.total_count,
            MethodSort::Calls => calls(row),
            MethodSort::WallMean => wall(row, |wall| wall.mean_ns),
            MethodSort::WallMax => wall(row, |wall| wall.max_ns),
            MethodSort::CpuMean => cpu_mean(row),
            MethodSort::Name => 0,
        }
    };
    // Indices sorted rather than the rows: a row is large, and there may be a million.
    let keys: Vec<u64> = methods.iter().map(key).collect();
    let mut order: Vec<usize> = (0..methods.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (row_a, row_b) = (&methods[a], &methods[b]);
        let by_name = if sort == MethodSort::Name {
            row_a.row.name.cmp(&row_b.row.name)
        } else {
            std::cmp::Ordering::Equal
        };
        by_name
            .then(keys[b].cmp(&keys[a]))
            .then(
                row_b
                    .row
                    .weights
                    .self_value
                    .cmp(&row_a.row.weights.self_value),
            )
            .then(
                row_b
                    .row
                    .weights
                    .total_value
                    .cmp(&row_a.row.weights.total_value),
            )
            .then_with(|| row_a.row.name.cmp(&row_b.row.name))
            .then_with(|| thread_order(&row_a.row.thread).cmp(&thread_order(&row_b.row.thread)))
    });
    let mut rows: Vec<Option<MethodRow>> = std::mem::take(methods).into_iter().map(Some).collect();
    *methods = order
        .into_iter()
        .map(|index| rows[index].take().expect("each row once"))
        .collect();
}
