//! Differences of statistics between two profiles (a base and a new snapshot): per method,
//! allocated class, thread or component, the change of value and of share, largest change of
//! share first.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{ComponentMap, MethodSort, StatisticsIndex, StatsError, Weights};
use crate::profile::{Event, Unit};

/// What a difference is taken of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// Methods, self and total.
    Methods,
    /// Allocated classes, by the allocation event (self and total alike).
    Allocations,
    /// Threads, matched by name (threads of one name taken together).
    Threads,
    /// Components of a map, self and total; packages without one.
    Components,
}

/// One name's weights in both profiles and their change: values in the event's unit, shares in
/// percent of each profile's total, changes new less base (in points for shares).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffRow {
    pub name: String,
    pub base: Weights,
    pub new: Weights,
    pub base_self_percent: f64,
    pub new_self_percent: f64,
    pub base_total_percent: f64,
    pub new_total_percent: f64,
    pub self_change: i64,
    pub total_change: i64,
    pub self_percent_change: f64,
    pub total_percent_change: f64,
}

/// Two profiles' statistics side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsDiff {
    pub kind: DiffKind,
    pub event: Event,
    pub unit: Unit,
    pub base_source: String,
    pub new_source: String,
    pub base_total: u64,
    pub new_total: u64,
    /// Largest change of self share first (then of total share, then by name).
    pub rows: Vec<DiffRow>,
}

impl StatsDiff {
    /// The statistics of `kind` in one event (default: the new profile's first kept; for
    /// allocations, its first allocation event) of both profiles, paired by name.
    pub fn of(
        kind: DiffKind,
        base: &StatisticsIndex,
        new: &StatisticsIndex,
        event: Option<Event>,
        map: Option<&ComponentMap>,
    ) -> Result<StatsDiff, StatsError> {
        let event = match (event, kind) {
            (Some(event), _) => event,
            (None, DiffKind::Allocations) => new.allocations(None, false)?.sorted_by,
            (None, _) => new.event_and_slot(None)?.0,
        };
        let (base_rows, base_total) = named_weights(kind, base, event, map)?;
        let (new_rows, new_total) = named_weights(kind, new, event, map)?;
        let mut paired: BTreeMap<String, (Weights, Weights)> = BTreeMap::new();
        for (name, weights) in base_rows {
            paired.entry(name).or_default().0.merge(&weights);
        }
        for (name, weights) in new_rows {
            paired.entry(name).or_default().1.merge(&weights);
        }
        let share = |value: u64, total: u64| super::percent(value, total);
        let change = |new: u64, base: u64| {
            i64::try_from(i128::from(new) - i128::from(base)).unwrap_or(if new > base {
                i64::MAX
            } else {
                i64::MIN
            })
        };
        let mut rows: Vec<DiffRow> = paired
            .into_iter()
            .map(|(name, (base, new))| {
                let base_self_percent = share(base.self_value, base_total);
                let new_self_percent = share(new.self_value, new_total);
                let base_total_percent = share(base.total_value, base_total);
                let new_total_percent = share(new.total_value, new_total);
                DiffRow {
                    name,
                    base,
                    new,
                    base_self_percent,
                    new_self_percent,
                    base_total_percent,
                    new_total_percent,
                    self_change: change(new.self_value, base.self_value),
                    total_change: change(new.total_value, base.total_value),
                    self_percent_change: new_self_percent - base_self_percent,
                    total_percent_change: new_total_percent - base_total_percent,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.self_percent_change
                .abs()
                .total_cmp(&a.self_percent_change.abs())
                .then(
                    b.total_percent_change
                        .abs()
                        .total_cmp(&a.total_percent_change.abs()),
                )
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(StatsDiff {
            kind,
            event,
            unit: event.unit(),
            base_source: base.source().to_string(),
            new_source: new.source().to_string(),
            base_total,
            new_total,
            rows,
        })
    }
}

/// A profile's rows of one kind in one event, by name, and the event's total.
fn named_weights(
    kind: DiffKind,
    index: &StatisticsIndex,
    event: Event,
    map: Option<&ComponentMap>,
) -> Result<(Vec<(String, Weights)>, u64), StatsError> {
    let both = |value: u64, count: u64| Weights {
        self_value: value,
        self_count: count,
        total_value: value,
        total_count: count,
    };
    Ok(match kind {
        DiffKind::Methods => {
            let stats = index.methods(Some(event), MethodSort::Name, false)?;
            let rows = stats
                .methods
                .into_iter()
                .map(|method| (method.row.name, method.row.weights))
                .collect();
            (rows, stats.total_value)
        }
        DiffKind::Allocations => {
            let stats = index.allocations(Some(event), false)?;
            let column = super::ALLOCATION_EVENTS
                .iter()
                .position(|known| *known == event)
                .expect("an allocation event");
            let rows = stats
                .by_class
                .into_iter()
                .map(|row| {
                    let values = [
                        row.alloc_bytes,
                        row.alloc_objects,
                        row.live_bytes,
                        row.live_objects,
                    ];
                    (
                        row.class.unwrap_or_default(),
                        both(values[column], values[column]),
                    )
                })
                .collect();
            (rows, stats.totals[column])
        }
        DiffKind::Threads => {
            let slot = index.slot(event)?;
            let rows = index
                .of_kind(super::ResourceKind::Thread)
                .map(|thread| {
                    let weights = index.weights(thread, slot);
                    (
                        index.name(thread).to_string(),
                        both(weights.total_value, weights.total_count),
                    )
                })
                .filter(|(_, weights)| !weights.is_zero())
                .collect();
            (rows, index.event_totals[slot].0)
        }
        DiffKind::Components => {
            let stats = index.components(Some(event), map, false)?;
            let rows = stats
                .components
                .unwrap_or(stats.packages)
                .into_iter()
                .map(|row| (row.name, row.weights))
                .collect();
            (rows, stats.total_value)
        }
    })
}
