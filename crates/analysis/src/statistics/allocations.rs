//! Allocation statistics: bytes and objects allocated and still live, side by side, by the
//! class allocated (the allocated-class frame atop the stack), by the allocating method (the
//! frame below it) and by both (the allocation site).

use std::collections::HashMap;

use serde::Serialize;

use super::index::{thread_order, Leaf, ResourceRef, StatisticsIndex, NONE};
use super::{percent, StatsError};
use crate::profile::Event;

/// The events allocation statistics show, in their columns' order.
pub const ALLOCATION_EVENTS: [Event; 4] = [
    Event::AllocBytes,
    Event::AllocObjects,
    Event::LiveBytes,
    Event::LiveObjects,
];

/// The name of the class of an allocation whose stack names none.
pub const UNKNOWN_CLASS: &str = "[unknown class]";

/// Bytes and objects allocated and live of a class, a method or a site (on one thread, when
/// split by thread); each share is of its event's total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllocationRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<ResourceRef>,
    pub alloc_bytes: u64,
    pub alloc_objects: u64,
    pub live_bytes: u64,
    pub live_objects: u64,
    pub alloc_bytes_percent: f64,
    pub alloc_objects_percent: f64,
    pub live_bytes_percent: f64,
    pub live_objects_percent: f64,
}

/// A profile's allocations.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllocationStats {
    pub source: String,
    /// The event the rows are sorted by (most first).
    pub sorted_by: Event,
    /// The events the profile has of the four (HPROF's SITES has all; JFR only allocated bytes).
    pub events: Vec<Event>,
    pub by_thread: bool,
    /// Over every allocation kept: alloc_bytes, alloc_objects, live_bytes, live_objects.
    pub totals: [u64; 4],
    pub by_class: Vec<AllocationRow>,
    pub by_method: Vec<AllocationRow>,
    /// By class and method together: the allocation sites.
    pub by_site: Vec<AllocationRow>,
}

impl StatisticsIndex {
    /// The allocations, sorted by `sort` (default: the first of alloc_bytes, alloc_objects,
    /// live_bytes, live_objects the profile has); with `by_thread`, split by thread.
    pub fn allocations(
        &self,
        sort: Option<Event>,
        by_thread: bool,
    ) -> Result<AllocationStats, StatsError> {
        let slots: Vec<Option<usize>> = ALLOCATION_EVENTS
            .iter()
            .map(|event| self.slot_of(*event))
            .collect();
        let events: Vec<Event> = ALLOCATION_EVENTS
            .iter()
            .zip(&slots)
            .filter(|(_, slot)| slot.is_some())
            .map(|(event, _)| *event)
            .collect();
        let sorted_by = match sort {
            Some(event) if !ALLOCATION_EVENTS.contains(&event) => {
                return Err(StatsError::NotAllocationEvent { event })
            }
            Some(event) => {
                self.slot(event)?;
                event
            }
            None => *events.first().ok_or_else(|| StatsError::NoSamples {
                profile: self.source.clone(),
                what: " of allocations (alloc_bytes, alloc_objects, live_bytes, live_objects: \
                       heap=sites, JFR allocation events)"
                    .to_string(),
            })?,
        };
        let column_of_slot = |slot: usize| slots.iter().position(|s| *s == Some(slot));
        // (class, method, thread) → the four values.
        let mut sites: HashMap<(u32, u32, u32), [u64; 4]> = HashMap::new();
        let mut totals = [0u64; 4];
        for cell in &self.cells {
            let Some(column) = column_of_slot(cell.event as usize) else {
                continue;
            };
            let class = match self.stack_leaf[cell.stack as usize] {
                Leaf::Allocated(class) => class,
                _ => NONE,
            };
            let method = self.stack_self[cell.stack as usize];
            let thread = if by_thread { cell.thread } else { NONE };
            sites.entry((class, method, thread)).or_default()[column] += cell.value;
            totals[column] += cell.value;
        }
        let mut by_class: HashMap<(u32, u32), [u64; 4]> = HashMap::new();
        let mut by_method: HashMap<(u32, u32), [u64; 4]> = HashMap::new();
        for (&(class, method, thread), values) in &sites {
            for (map, key) in [
                (&mut by_class, (class, thread)),
                (&mut by_method, (method, thread)),
            ] {
                let sum = map.entry(key).or_default();
                for column in 0..4 {
                    sum[column] += values[column];
                }
            }
        }
        let class_name = |class: u32| {
            if class == NONE {
                UNKNOWN_CLASS.to_string()
            } else {
                self.name(class).to_string()
            }
        };
        let row = |class: Option<String>, method: Option<String>, thread: u32, values: [u64; 4]| {
            AllocationRow {
                class,
                method,
                thread: (thread != NONE).then(|| self.reference(thread)),
                alloc_bytes: values[0],
                alloc_objects: values[1],
                live_bytes: values[2],
                live_objects: values[3],
                alloc_bytes_percent: percent(values[0], totals[0]),
                alloc_objects_percent: percent(values[1], totals[1]),
                live_bytes_percent: percent(values[2], totals[2]),
                live_objects_percent: percent(values[3], totals[3]),
            }
        };
        let column = ALLOCATION_EVENTS
            .iter()
            .position(|event| *event == sorted_by)
            .expect("an allocation event");
        let sorted = |mut rows: Vec<AllocationRow>| {
            let value = |row: &AllocationRow| {
                [
                    row.alloc_bytes,
                    row.alloc_objects,
                    row.live_bytes,
                    row.live_objects,
                ][column]
            };
            rows.sort_by(|a, b| {
                value(b)
                    .cmp(&value(a))
                    .then_with(|| (&a.class, &a.method).cmp(&(&b.class, &b.method)))
                    .then_with(|| thread_order(&a.thread).cmp(&thread_order(&b.thread)))
            });
            rows
        };
        Ok(AllocationStats {
            source: self.source.clone(),
            sorted_by,
            events,
            by_thread,
            totals,
            by_class: sorted(
                by_class
                    .into_iter()
                    .map(|((class, thread), values)| {
                        row(Some(class_name(class)), None, thread, values)
                    })
                    .collect(),
            ),
            by_method: sorted(
                by_method
                    .into_iter()
                    .map(|((method, thread), values)| {
                        row(None, Some(self.name(method).to_string()), thread, values)
                    })
                    .collect(),
            ),
            by_site: sorted(
                sites
                    .into_iter()
                    .map(|((class, method, thread), values)| {
                        row(
                            Some(class_name(class)),
                            Some(self.name(method).to_string()),
                            thread,
                            values,
                        )
                    })
                    .collect(),
            ),
        })
    }
}
