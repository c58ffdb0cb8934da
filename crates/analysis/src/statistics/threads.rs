//! Thread statistics: per thread, CPU samples and time, wall-clock samples by state, lock waits
//! (from lock events, and from a trace's monitor spans), allocations and calls; and per thread
//! over time, in buckets, where samples have times.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::index::{thread_name, Attr, EventWeights, StatisticsIndex, NONE};
use super::methods::Durations;
use super::{event_names, percent, ResourceKind, StatsError};
use crate::profile::{Event, Profile, Unit, STATE_LABEL};
use crate::views::{SampleFilter, ViewOptions};

/// One thread's figures; values in their events' units, zero where the profile has none.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadRow {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
    pub cpu_samples: u64,
    /// Of all CPU samples kept.
    pub cpu_percent: f64,
    /// Instrumented CPU time (cpu=times), nanoseconds.
    pub cpu_time_ns: u64,
    pub wall_samples: u64,
    /// Of all wall-clock samples kept.
    pub wall_percent: f64,
    /// Wall-clock samples by the thread's state (running, native, blocked, waiting, parked,
    /// sleeping), where the samples say it.
    pub wall_states: BTreeMap<String, u64>,
    /// Waits for locks (the `lock` event): how many, how long, and how long blocked entering a
    /// monitor and parked.
    pub lock_waits: u64,
    pub lock_ns: u64,
    pub blocked_ns: u64,
    pub parked_ns: u64,
    /// How long other threads waited for locks this one held (`lock_owner`).
    pub lock_owner_ns: u64,
    /// A trace's monitor spans (monitor=y): contended enters and `Object.wait`s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor_blocked: Option<Durations>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitor_waited: Option<Durations>,
    pub alloc_bytes: u64,
    pub calls: u64,
    /// Every event's weights on the thread.
    pub events: Vec<EventWeights>,
}

/// A profile's threads.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadStats {
    pub source: String,
    /// The event the threads are sorted by (most first).
    pub sorted_by: Event,
    pub threads: Vec<ThreadRow>,
}

impl StatisticsIndex {
    /// Every thread with samples or spans, sorted by `sort` (default: the first event kept,
    /// CPU first), most first.
    pub fn threads(&self, sort: Option<Event>) -> Result<ThreadStats, StatsError> {
        let (sorted_by, sort_slot) = self.event_and_slot(sort)?;
        let value_of = |thread: u32, event: Event| {
            self.slot_of(event)
                .map_or(0, |slot| self.weights(thread, slot).total_value)
        };
        let mut rows: Vec<(u64, ThreadRow)> = Vec::new();
        for thread in self.of_kind(ResourceKind::Thread) {
            let waits = self.thread_waits.get(&thread).copied().unwrap_or_default();
            let events = self.event_weights(thread);
            if events.is_empty() && waits.blocked.calls == 0 && waits.waited.calls == 0 {
                continue;
            }
            let reference = self.reference(thread);
            let mut row = ThreadRow {
                name: reference.name,
                thread_id: reference.thread_id,
                cpu_samples: value_of(thread, Event::Cpu),
                cpu_percent: percent(value_of(thread, Event::Cpu), self.event_total(Event::Cpu).0),
                cpu_time_ns: value_of(thread, Event::CpuTime),
                wall_samples: value_of(thread, Event::Wall),
                wall_percent: percent(
                    value_of(thread, Event::Wall),
                    self.event_total(Event::Wall).0,
                ),
                wall_states: BTreeMap::new(),
                lock_waits: self
                    .slot(Event::Lock)
                    .map_or(0, |slot| self.weights(thread, slot).total_count),
                lock_ns: value_of(thread, Event::Lock),
                blocked_ns: 0,
                parked_ns: 0,
                lock_owner_ns: value_of(thread, Event::LockOwner),
                monitor_blocked: Durations::of(&waits.blocked),
                monitor_waited: Durations::of(&waits.waited),
                alloc_bytes: value_of(thread, Event::AllocBytes),
                calls: value_of(thread, Event::Calls),
                events,
            };
            let wall = self.slot_of(Event::Wall);
            let lock = self.slot_of(Event::Lock);
            for cross in self.cross_of(thread) {
                let slot = Some(cross.event as usize);
                match self.attrs[cross.other as usize] {
                    Attr::State(state) if slot == wall => {
                        *row.wall_states
                            .entry(self.states[state as usize].clone())
                            .or_default() += cross.weights.total_value;
                    }
                    Attr::Lock { state, .. } if slot == lock && state != NONE => {
                        match self.states[state as usize].as_str() {
                            "blocked" => row.blocked_ns += cross.weights.total_value,
                            "parked" => row.parked_ns += cross.weights.total_value,
                            _ => {}
                        }
                    }
                    _ => {}
                }
            }
            rows.push((self.weights(thread, sort_slot).total_value, row));
        }
        rows.sort_by(|(a_value, a), (b_value, b)| {
            b_value
                .cmp(a_value)
                .then_with(|| (&a.name, a.thread_id).cmp(&(&b.name, b.thread_id)))
        });
        Ok(ThreadStats {
            source: self.source.clone(),
            sorted_by,
            threads: rows.into_iter().map(|(_, row)| row).collect(),
        })
    }
}

/// An event per thread over time: its value in each bucket of `bucket_ns` from `start_ns`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadTimeline {
    pub source: String,
    pub event: Event,
    pub unit: Unit,
    /// Nanoseconds since the recording's start.
    pub start_ns: u64,
    pub bucket_ns: u64,
    pub buckets: usize,
    /// Most first.
    pub threads: Vec<TimelineThread>,
}

/// One thread's values, bucket by bucket, and (where samples say) split by thread state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineThread {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
    pub total: u64,
    pub values: Vec<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<String, Vec<u64>>,
}

/// At most this many buckets.
const MAX_BUCKETS: u64 = 100_000;

/// The samples of `event` (default: cpu, else wall, else the profile's first) the view keeps,
/// per thread over time in buckets of `bucket_ns` (default: the 1, 2 or 5 times a power of ten
/// nanoseconds that makes at most 20). Samples without a time are left out; a profile without
/// any is an error.
pub fn thread_timeline(
    profile: &Profile,
    options: &ViewOptions,
    event: Option<Event>,
    bucket_ns: Option<u64>,
) -> Result<ThreadTimeline, StatsError> {
    let events = profile.events();
    let event = match event {
        Some(event) if !events.contains(&event) => {
            return Err(StatsError::MissingEvent {
                profile: profile.source.clone(),
                event,
                present: event_names(&events),
            })
        }
        Some(event) => event,
        None => [Event::Cpu, Event::Wall]
            .into_iter()
            .find(|event| events.contains(event))
            .or_else(|| events.first().copied())
            .ok_or_else(|| StatsError::NoSamples {
                profile: profile.source.clone(),
                what: String::new(),
            })?,
    };
    let filter = SampleFilter::new(profile, options);
    let timed: Vec<_> = profile
        .samples
        .iter()
        .filter(|sample| sample.event == event && sample.time_ns.is_some())
        .filter(|sample| filter.keeps(profile, sample))
        .collect();
    let Some(last) = timed.iter().filter_map(|sample| sample.time_ns).max() else {
        return Err(StatsError::NoTimes {
            profile: profile.source.clone(),
            event,
        });
    };
    let start_ns = options.from_ns.unwrap_or(0).min(last);
    let span = last - start_ns + 1;
    let bucket_ns = match bucket_ns {
        Some(bucket) => bucket,
        None => nice_bucket(span.div_ceil(20)),
    };
    if bucket_ns == 0 || span.div_ceil(bucket_ns) > MAX_BUCKETS {
        return Err(StatsError::BadBucket { bucket_ns });
    }
    let buckets = span.div_ceil(bucket_ns) as usize;
    let mut threads: HashMap<Option<u32>, TimelineThread> = HashMap::new();
    for sample in timed {
        let bucket = ((sample.time_ns.unwrap_or(0) - start_ns) / bucket_ns) as usize;
        let thread = threads.entry(sample.thread).or_insert_with(|| {
            let (name, thread_id) = thread_name(profile, sample.thread);
            TimelineThread {
                name,
                thread_id,
                total: 0,
                values: vec![0; buckets],
                states: BTreeMap::new(),
            }
        });
        thread.total += sample.value;
        thread.values[bucket] += sample.value;
        if let Some((_, state)) = sample.labels.iter().find(|(name, _)| name == STATE_LABEL) {
            thread
                .states
                .entry(state.clone())
                .or_insert_with(|| vec![0; buckets])[bucket] += sample.value;
        }
    }
    let mut threads: Vec<TimelineThread> = threads.into_values().collect();
    threads.sort_by(|a, b| {
        b.total
            .cmp(&a.total)
            .then_with(|| (&a.name, a.thread_id).cmp(&(&b.name, b.thread_id)))
    });
    Ok(ThreadTimeline {
        source: profile.source.clone(),
        event,
        unit: event.unit(),
        start_ns,
        bucket_ns,
        buckets,
        threads,
    })
}

/// The least of 1, 2 and 5 times a power of ten that is at least `least` (and 1 ns at least).
fn nice_bucket(least: u64) -> u64 {
    let mut power = 1u64;
    loop {
        for step in [1, 2, 5] {
            let width = power.saturating_mul(step);
            if width >= least || width == u64::MAX {
                return width;
            }
        }
        power = power.saturating_mul(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_bucket(0), 1);
        assert_eq!(nice_bucket(3), 5);
        assert_eq!(nice_bucket(6), 10);
        assert_eq!(nice_bucket(150_000_000), 200_000_000);
        assert_eq!(nice_bucket(2_000_000_000), 2_000_000_000);
    }
}
