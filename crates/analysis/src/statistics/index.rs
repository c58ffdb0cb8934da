//! The statistics index: a profile's samples read once, after the view's filters, into weights
//! per resource (method, class, package, thread), caller–callee edges and cross-tabulations
//! (threads, thread states, allocated classes, lock waits), so that everything about one
//! resource comes from a few slices of precomputed rows, without reading the samples again.

use std::collections::{BTreeMap, HashMap};

use foldhash::fast::FixedState;
use openprof_format::mpt_stats::MptTable;
use serde::Serialize;

use super::{class_of, event_names, package_of, percent, ResourceKind, StatsError, Weights};
use crate::profile::{Event, FrameKind, Profile, SpanKind, ThreadId, Unit, STATE_LABEL};
use crate::views::{SampleFilter, ViewOptions, UNKNOWN_THREAD};

/// Integer keys hash with foldhash: the build hashes tens of millions of them.
pub(crate) type FastMap<K, V> = HashMap<K, V, FixedState>;

pub(crate) const NONE: u32 = u32::MAX;
/// Marks one of a stack's resources or edges as its leaf's (self weight).
pub(crate) const SELF: u32 = 1 << 31;

/// The name of the method, class and package of a stack without any code frame (an
/// allocation or a wait the recorder gave no stack).
pub const NO_FRAMES: &str = "[no frames]";
/// The class and package of native code.
pub const NATIVE: &str = "[native]";

/// A resource's number in its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub(crate) u32);

/// A resource as results name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceRef {
    #[serde(skip)]
    pub id: ResourceId,
    pub kind: ResourceKind,
    pub name: String,
    /// A thread's id as the input gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
}

/// How rows split by thread order their threads: by name, then id.
pub(crate) fn thread_order(thread: &Option<ResourceRef>) -> Option<(&str, Option<u64>)> {
    thread
        .as_ref()
        .map(|thread| (thread.name.as_str(), thread.thread_id))
}

pub(crate) struct Resource {
    pub kind: ResourceKind,
    pub name: String,
    pub thread_id: Option<u64>,
}

/// What a sample says besides its stack, that statistics are split by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Attr {
    /// The thread (a resource).
    Thread(u32),
    /// The thread's state (a number in `states`).
    State(u32),
    /// The class allocated (a resource).
    Allocated(u32),
    /// A wait for a lock: how (a state, or `NONE`) and the lock's class (a resource, or `NONE`).
    Lock { state: u32, class: u32 },
}

/// What a profile frame is to statistics.
#[derive(Clone, Copy)]
enum Role {
    /// Code: a method, of a class, in a package.
    Code {
        method: u32,
        class: u32,
        package: u32,
    },
    /// The class allocated, atop an allocation's stack.
    Allocated(u32),
    /// The class of the lock waited for, atop a lock event's stack.
    Lock(u32),
}

/// What tops a stack above its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Leaf {
    None,
    Allocated(u32),
    Lock(u32),
}

/// The samples of one stack, thread, event and state, summed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cell {
    /// The stack's number among those the index kept.
    pub stack: u32,
    pub thread: u32,
    /// The event's slot in `StatisticsIndex::events`.
    pub event: u8,
    pub state: u32,
    pub value: u64,
    pub count: u64,
}

/// A resource's weights split by something else (a caller, a thread, ...), for one event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row {
    pub key: u32,
    pub other: u32,
    pub event: u8,
    pub weights: Weights,
}

/// Lists of numbers, one per index, in one allocation.
#[derive(Default)]
pub(crate) struct Csr {
    start: Vec<usize>,
    items: Vec<u32>,
}

impl Csr {
    fn new() -> Csr {
        Csr {
            start: vec![0],
            items: Vec::new(),
        }
    }

    fn push(&mut self, items: &[u32]) {
        self.items.extend_from_slice(items);
        self.start.push(self.items.len());
    }

    pub fn get(&self, index: u32) -> &[u32] {
        let index = index as usize;
        &self.items[self.start[index]..self.start[index + 1]]
    }

    fn heap_bytes(&self) -> usize {
        self.start.capacity() * 8 + self.items.capacity() * 4
    }
}

/// Which side of a table's rows lies together in memory: the lookups that read many rows want
/// theirs contiguous, the others go through a permutation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Contiguous {
    #[default]
    Keys,
    Others,
}

/// Rows found by their key and by their other number: one side's rows lie together, the
/// other's are found through a permutation.
#[derive(Default)]
pub(crate) struct Table {
    rows: Vec<Row>,
    contiguous: Contiguous,
    key_start: Vec<usize>,
    other_start: Vec<usize>,
    /// The rows' indices in the order of the side that is not contiguous.
    permutation: Vec<u32>,
}

/// A table's rows of one key or other number.
pub(crate) enum Rows<'t> {
    Together(std::slice::Iter<'t, Row>),
    Permuted(&'t [Row], std::slice::Iter<'t, u32>),
}

impl<'t> Iterator for Rows<'t> {
    type Item = &'t Row;

    fn next(&mut self) -> Option<&'t Row> {
        match self {
            Rows::Together(rows) => rows.next(),
            Rows::Permuted(rows, order) => order.next().map(|index| &rows[*index as usize]),
        }
    }
}

impl Table {
    /// Orders the rows by one side and, through the permutation, by the other: counting sorts,
    /// in time linear in the rows (the index holds millions of them).
    fn new(rows: Vec<Row>, keys: usize, others: usize, contiguous: Contiguous) -> Table {
        let starts = |number: &dyn Fn(&Row) -> u32, count: usize| {
            let mut start = vec![0usize; count + 1];
            for row in &rows {
                start[number(row) as usize + 1] += 1;
            }
            for index in 1..start.len() {
                start[index] += start[index - 1];
            }
            start
        };
        let key_start = starts(&|row| row.key, keys);
        let other_start = starts(&|row| row.other, others);
        let side = |row: &Row, contiguous_side: bool| match (contiguous, contiguous_side) {
            (Contiguous::Keys, true) | (Contiguous::Others, false) => row.key,
            _ => row.other,
        };
        let (together_start, permuted_start) = match contiguous {
            Contiguous::Keys => (&key_start, &other_start),
            Contiguous::Others => (&other_start, &key_start),
        };
        let order_by = |rows: &[Row], start: &[usize], contiguous_side: bool| {
            let mut next = start.to_vec();
            let mut order = vec![0u32; rows.len()];
            for (index, row) in rows.iter().enumerate() {
                let at = &mut next[side(row, contiguous_side) as usize];
                order[*at] = index as u32;
                *at += 1;
            }
            order
        };
        let order = order_by(&rows, together_start, true);
        let rows: Vec<Row> = order.iter().map(|index| rows[*index as usize]).collect();
        drop(order);
        let permutation = order_by(&rows, permuted_start, false);
        Table {
            rows,
            contiguous,
            key_start,
            other_start,
            permutation,
        }
    }

    fn rows_of(&self, number: u32, start: &[usize], together: bool) -> Rows<'_> {
        let number = number as usize;
        let range = if number + 1 < start.len() {
            start[number]..start[number + 1]
        } else {
            0..0
        };
        if together {
            Rows::Together(self.rows[range].iter())
        } else {
            Rows::Permuted(&self.rows, self.permutation[range].iter())
        }
    }

    pub fn of_key(&self, key: u32) -> Rows<'_> {
        self.rows_of(key, &self.key_start, self.contiguous == Contiguous::Keys)
    }

    pub fn of_other(&self, other: u32) -> Rows<'_> {
        self.rows_of(
            other,
            &self.other_start,
            self.contiguous == Contiguous::Others,
        )
    }

    fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Row>()
            + (self.key_start.capacity() + self.other_start.capacity()) * 8
            + self.permutation.capacity() * 4
    }
}

/// Wall-clock times of calls from their spans (entry to exit, what the method and its callees
/// took).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpanFigures {
    pub calls: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl SpanFigures {
    fn record(&mut self, nanoseconds: u64) {
        self.min_ns = if self.calls == 0 {
            nanoseconds
        } else {
            self.min_ns.min(nanoseconds)
        };
        self.max_ns = self.max_ns.max(nanoseconds);
        self.calls += 1;
        self.total_ns = self.total_ns.saturating_add(nanoseconds);
    }

    pub fn merge(&mut self, other: &SpanFigures) {
        if other.calls == 0 {
            return;
        }
        self.min_ns = if self.calls == 0 {
            other.min_ns
        } else {
            self.min_ns.min(other.min_ns)
        };
        self.max_ns = self.max_ns.max(other.max_ns);
        self.calls += other.calls;
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
    }
}

/// A method's own CPU time per call where each `cpu_time` sample is one call (a trace): the
/// least and the most; samples that sum several calls (HPROF's CPU TIME rows) are counted
/// apart, and make the extremes unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuSingles {
    pub single: SpanFigures,
    pub summed_samples: u64,
}

/// A thread's time blocked entering monitors and waiting in `Object.wait`, from a trace's
/// spans (monitor=y).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    pub blocked: SpanFigures,
    pub waited: SpanFigures,
}

/// A profile's samples read once into per-resource weights, edges and cross-tabulations: what
/// every statistic is computed from. Built with the view's filters (`from_ns`, `to_ns`,
/// `include`, `exclude`; the other options shape stacks, which statistics do not show).
pub struct StatisticsIndex {
    pub(crate) source: String,
    /// The profile's events; weights are kept per event's slot here.
    pub(crate) events: Vec<Event>,
    /// Each event's value and count over the samples kept.
    pub(crate) event_totals: Vec<(u64, u64)>,
    pub(crate) resources: Vec<Resource>,
    /// Each resource's kind, apart: lookups test kinds of thousands of rows.
    kinds: Vec<ResourceKind>,
    ids: [HashMap<String, u32>; 4],
    threads_by_name: HashMap<String, Vec<u32>>,
    /// A method's class, a class's package (`NONE` for packages and threads).
    pub(crate) parent: Vec<u32>,
    children: Csr,
    /// Per resource and event slot: `resource * events + slot`.
    totals: Vec<Weights>,
    /// Key: the caller, other: the callee.
    edges: Table,
    /// Key: the resource, other: an attribute.
    cross: Table,
    pub(crate) attrs: Vec<Attr>,
    attr_ids: FastMap<Attr, u32>,
    pub(crate) states: Vec<String>,
    /// Sorted by stack, event, thread, state.
    pub(crate) cells: Vec<Cell>,
    /// Per kept stack: the method of its leaf (the allocating, waiting, running one).
    pub(crate) stack_self: Vec<u32>,
    pub(crate) stack_leaf: Vec<Leaf>,
    /// Per kept stack: its classes, each once, the leaf's marked `SELF`.
    pub(crate) stack_classes: Csr,
    /// Calls' wall-clock times from their spans, by (method, thread).
    pub(crate) call_spans: BTreeMap<(u32, u32), SpanFigures>,
    /// Own CPU time per call, by (method, thread).
    pub(crate) cpu_calls: BTreeMap<(u32, u32), CpuSingles>,
    /// Monitor waits from spans, by thread.
    pub(crate) thread_waits: BTreeMap<u32, Waits>,
    mpt: FastMap<u32, Vec<MptTable>>,
    pub(crate) loaders: FastMap<u32, String>,
    /// Whether the input tells class loaders at all.
    pub(crate) has_loaders: bool,
}

impl StatisticsIndex {
    /// Reads the samples (and spans, and parameter tracing's tables) the options keep.
    pub fn build(profile: &Profile, options: &ViewOptions) -> StatisticsIndex {
        Builder::new(profile, options).build()
    }

    /// Where the profile was read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The events the view kept samples of, in `Event::ALL`'s order.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .iter()
            .zip(&self.event_totals)
            .filter(|(_, (value, count))| *value > 0 || *count > 0)
            .map(|(event, _)| *event)
            .collect()
    }

    /// An event's value and count over the samples kept.
    pub fn event_total(&self, event: Event) -> (u64, u64) {
        self.slot_of(event)
            .map_or((0, 0), |slot| self.event_totals[slot])
    }

    /// The event's slot, if the profile has the event.
    pub(crate) fn slot_of(&self, event: Event) -> Option<usize> {
        self.events.iter().position(|known| *known == event)
    }

    /// The event's slot, or the error naming the events the profile has.
    pub(crate) fn slot(&self, event: Event) -> Result<usize, StatsError> {
        self.slot_of(event).ok_or_else(|| StatsError::MissingEvent {
            profile: self.source.clone(),
            event,
            present: event_names(&self.events),
        })
    }

    /// The event asked for, or when none is the first the view kept (CPU first), with its
    /// slot.
    pub(crate) fn event_and_slot(
        &self,
        event: Option<Event>,
    ) -> Result<(Event, usize), StatsError> {
        let event = match event {
            Some(event) => event,
            None => self
                .events()
                .into_iter()
                .next()
                .ok_or_else(|| StatsError::NoSamples {
                    profile: self.source.clone(),
                    what: String::new(),
                })?,
        };
        Ok((event, self.slot(event)?))
    }

    pub(crate) fn weights(&self, resource: u32, slot: usize) -> Weights {
        self.totals[resource as usize * self.events.len() + slot]
    }

    pub(crate) fn reference(&self, resource: u32) -> ResourceRef {
        let entry = &self.resources[resource as usize];
        ResourceRef {
            id: ResourceId(resource),
            kind: entry.kind,
            name: entry.name.clone(),
            thread_id: entry.thread_id,
        }
    }

    pub(crate) fn kind(&self, resource: u32) -> ResourceKind {
        self.kinds[resource as usize]
    }

    pub(crate) fn name(&self, resource: u32) -> &str {
        &self.resources[resource as usize].name
    }

    /// The resources of a kind, in the order met.
    pub(crate) fn of_kind(&self, kind: ResourceKind) -> impl Iterator<Item = u32> + '_ {
        (0..self.resources.len() as u32).filter(move |id| self.kind(*id) == kind)
    }

    /// The rows of a resource split by attributes.
    pub(crate) fn cross_of(&self, resource: u32) -> Rows<'_> {
        self.cross.of_key(resource)
    }

    /// The rows of every resource with one attribute.
    pub(crate) fn cross_with(&self, attr: Attr) -> Rows<'_> {
        let id = self.attr_ids.get(&attr).copied().unwrap_or(NONE);
        self.cross.of_other(id)
    }

    /// Finds a resource by name: `KIND:NAME` (`method:`, `class:`, `package:`, `thread:`), or
    /// a bare name, looked for as a method, a class, a package, then a thread. A thread is named
    /// `NAME` when no other thread has that name, else `NAME tid=ID`.
    pub fn find(&self, name: &str) -> Result<ResourceRef, StatsError> {
        let (kinds, bare) = match name.split_once(':') {
            Some((prefix, rest)) => match ResourceKind::ALL.iter().find(|k| k.name() == prefix) {
                Some(kind) => (vec![*kind], rest),
                None => (ResourceKind::ALL.to_vec(), name),
            },
            None => (ResourceKind::ALL.to_vec(), name),
        };
        for kind in &kinds {
            if *kind == ResourceKind::Thread {
                if let Some(id) = self.ids[*kind as usize].get(bare) {
                    return Ok(self.reference(*id));
                }
                match self.threads_by_name.get(bare).map(Vec::as_slice) {
                    Some([one]) => return Ok(self.reference(*one)),
                    Some(several) if !several.is_empty() => {
                        return Err(StatsError::AmbiguousThread {
                            name: bare.to_string(),
                            candidates: several.iter().map(|id| self.thread_key(*id)).collect(),
                        })
                    }
                    _ => {}
                }
            } else if let Some(id) = self.ids[*kind as usize].get(bare) {
                return Ok(self.reference(*id));
            }
        }
        let needle = bare.to_lowercase();
        let mut suggestions: Vec<(usize, String)> = self
            .resources
            .iter()
            .enumerate()
            .filter(|(_, entry)| kinds.contains(&entry.kind))
            .filter(|(_, entry)| !needle.is_empty() && entry.name.to_lowercase().contains(&needle))
            .map(|(id, entry)| {
                let key = match entry.kind {
                    ResourceKind::Thread => self.thread_key(id as u32),
                    _ => entry.name.clone(),
                };
                (entry.name.len(), format!("{}:{key}", entry.kind.name()))
            })
            .collect();
        suggestions.sort();
        suggestions.dedup();
        Err(StatsError::UnknownResource {
            profile: self.source.clone(),
            kinds: match kinds.as_slice() {
                [one] => one.name().to_string(),
                _ => "method, class, package or thread".to_string(),
            },
            name: bare.to_string(),
            suggestions: suggestions.into_iter().take(5).map(|(_, s)| s).collect(),
        })
    }

    /// A thread as `find` takes it whatever other threads are named: `NAME tid=ID`.
    fn thread_key(&self, thread: u32) -> String {
        let entry = &self.resources[thread as usize];
        match entry.thread_id {
            Some(id) => format!("{} tid={id}", entry.name),
            None => entry.name.clone(),
        }
    }

    /// Everything about one resource (as this index's `find` gave it), each list cut to the
    /// `top` heaviest rows per event (0: all of them).
    pub fn resource(&self, resource: &ResourceRef, top: usize) -> ResourceStats {
        let id = resource.id.0;
        let kind = self.kind(id);
        let mut stats = ResourceStats {
            resource: self.reference(id),
            parent: (self.parent[id as usize] != NONE)
                .then(|| self.reference(self.parent[id as usize])),
            loader: self.loader_of(id),
            events: self.event_weights(id),
            ..ResourceStats::default()
        };
        if kind == ResourceKind::Method {
            stats.calls = self.call_figures(id, None);
            stats.mpt = self
                .mpt
                .get(&id)
                .map(|tables| tables.iter().map(MptStats::of).collect())
                .unwrap_or_default();
        }
        stats.callers = self.ranked(
            self.edges
                .of_other(id)
                .map(|row| (row.key, row.event, row.weights)),
            top,
        );
        stats.callees = self.ranked(
            self.edges
                .of_key(id)
                .map(|row| (row.other, row.event, row.weights)),
            top,
        );
        stats.contents = match kind {
            ResourceKind::Thread => self.ranked(
                self.cross_with(Attr::Thread(id))
                    .filter(|row| self.kind(row.key) == ResourceKind::Method)
                    .map(|row| (row.key, row.event, row.weights)),
                top,
            ),
            _ => self.ranked(
                self.children.get(id).iter().flat_map(|child| {
                    (0..self.events.len()).filter_map(move |slot| {
                        let weights = self.weights(*child, slot);
                        (!weights.is_zero()).then_some((*child, slot as u8, weights))
                    })
                }),
                top,
            ),
        };
        let mut threads = Vec::new();
        let mut allocations = Vec::new();
        for row in self.cross_of(id) {
            match self.attrs[row.other as usize] {
                Attr::Thread(thread) => threads.push((thread, row.event, row.weights)),
                Attr::State(state) => stats.states.push(StateRow {
                    state: self.states[state as usize].clone(),
                    event: self.events[row.event as usize],
                    weights: row.weights,
                }),
                Attr::Allocated(class) => allocations.push((class, row.event, row.weights)),
                Attr::Lock { state, class } => stats.lock_waits.push(LockRow {
                    state: (state != NONE).then(|| self.states[state as usize].clone()),
                    lock_class: (class != NONE).then(|| self.name(class).to_string()),
                    event: self.events[row.event as usize],
                    weights: row.weights,
                }),
            }
        }
        stats.threads = self.ranked(threads.into_iter(), top);
        stats.allocations = self.ranked(allocations.into_iter(), top);
        stats.states.sort_by(|a, b| {
            (a.event.cmp(&b.event))
                .then(b.weights.total_value.cmp(&a.weights.total_value))
                .then_with(|| a.state.cmp(&b.state))
        });
        stats.lock_waits.sort_by(|a, b| {
            (a.event.cmp(&b.event))
                .then(b.weights.total_value.cmp(&a.weights.total_value))
                .then_with(|| (&a.state, &a.lock_class).cmp(&(&b.state, &b.lock_class)))
        });
        if kind == ResourceKind::Class {
            let lock_attrs: Vec<Attr> = self
                .attrs
                .iter()
                .filter(|attr| matches!(attr, Attr::Lock { class, .. } if *class == id))
                .copied()
                .collect();
            // Every sample is on one thread: the threads' rows sum to the class's own weights.
            let summed = |attrs: &[Attr]| -> Vec<EventWeights> {
                let mut by_slot = vec![Weights::default(); self.events.len()];
                for attr in attrs {
                    for row in self
                        .cross_with(*attr)
                        .filter(|row| self.kind(row.key) == ResourceKind::Thread)
                    {
                        by_slot[row.event as usize].merge(&row.weights);
                    }
                }
                by_slot
                    .into_iter()
                    .enumerate()
                    .filter(|(_, weights)| !weights.is_zero())
                    .map(|(slot, weights)| self.event_weights_of(slot, weights))
                    .collect()
            };
            stats.allocated = summed(&[Attr::Allocated(id)]);
            stats.waited_on = summed(&lock_attrs);
            stats.allocated_by = self.ranked(
                self.cross_with(Attr::Allocated(id))
                    .filter(|row| self.kind(row.key) == ResourceKind::Method)
                    .map(|row| (row.key, row.event, row.weights)),
                top,
            );
            let mut waiters: FastMap<(u32, u8), Weights> = FastMap::default();
            for attr in lock_attrs {
                for row in self
                    .cross_with(attr)
                    .filter(|row| self.kind(row.key) == ResourceKind::Method)
                {
                    waiters
                        .entry((row.key, row.event))
                        .or_default()
                        .merge(&row.weights);
                }
            }
            stats.lock_waiters = self.ranked(
                waiters
                    .into_iter()
                    .map(|((method, event), weights)| (method, event, weights)),
                top,
            );
        }
        stats
    }

    /// `find`, then `resource`.
    pub fn lookup(&self, name: &str, top: usize) -> Result<ResourceStats, StatsError> {
        Ok(self.resource(&self.find(name)?, top))
    }

    fn loader_of(&self, resource: u32) -> Option<String> {
        let class = match self.kind(resource) {
            ResourceKind::Class => resource,
            ResourceKind::Method => self.parent[resource as usize],
            _ => return None,
        };
        self.loaders.get(&class).cloned()
    }

    /// A resource's weights in each event it has any, with shares of each event's total.
    pub(crate) fn event_weights(&self, resource: u32) -> Vec<EventWeights> {
        (0..self.events.len())
            .filter_map(|slot| {
                let weights = self.weights(resource, slot);
                (!weights.is_zero()).then(|| self.event_weights_of(slot, weights))
            })
            .collect()
    }

    pub(crate) fn event_weights_of(&self, slot: usize, weights: Weights) -> EventWeights {
        let event = self.events[slot];
        let total = self.event_totals[slot].0;
        EventWeights {
            event,
            unit: event.unit(),
            weights,
            self_percent: percent(weights.self_value, total),
            total_percent: percent(weights.total_value, total),
        }
    }

    /// Rows as related resources, per event (in the events' order) the `top` heaviest by total
    /// (then self, then name); all with `top` 0.
    pub(crate) fn ranked(
        &self,
        rows: impl Iterator<Item = (u32, u8, Weights)>,
        top: usize,
    ) -> Vec<Related> {
        let mut by_event: Vec<Vec<(u32, Weights)>> = vec![Vec::new(); self.events.len()];
        for (resource, event, weights) in rows {
            by_event[event as usize].push((resource, weights));
        }
        // Names decide ties, also at the cut, so that the same index always gives the same rows.
        let heavier = |a: &(u32, Weights), b: &(u32, Weights)| {
            b.1.total_value
                .cmp(&a.1.total_value)
                .then(b.1.self_value.cmp(&a.1.self_value))
                .then_with(|| self.name(a.0).cmp(self.name(b.0)))
                .then(a.0.cmp(&b.0))
        };
        let mut related = Vec::new();
        for (slot, mut rows) in by_event.into_iter().enumerate() {
            if top > 0 && rows.len() > top {
                rows.select_nth_unstable_by(top - 1, heavier);
                rows.truncate(top);
            }
            rows.sort_by(heavier);
            let total = self.event_totals[slot].0;
            related.extend(rows.into_iter().map(|(resource, weights)| Related {
                resource: self.reference(resource),
                event: self.events[slot],
                weights,
                self_percent: percent(weights.self_value, total),
                total_percent: percent(weights.total_value, total),
            }));
        }
        related
    }

    /// The figures of a method's calls (on one thread, or all), where the profile has calls.
    pub(crate) fn call_figures(
        &self,
        method: u32,
        thread: Option<u32>,
    ) -> Option<super::CallFigures> {
        let weights_of = |event: Event| -> Option<Weights> {
            let slot = self.slot_of(event)?;
            Some(match thread {
                None => self.weights(method, slot),
                Some(thread) => self
                    .cross_of(method)
                    .find(|row| {
                        row.event as usize == slot
                            && self.attrs[row.other as usize] == Attr::Thread(thread)
                    })
                    .map_or_else(Weights::default, |row| row.weights),
            })
        };
        let range = match thread {
            None => (method, 0)..=(method, u32::MAX),
            Some(thread) => (method, thread)..=(method, thread),
        };
        let mut spans = SpanFigures::default();
        for figures in self
            .call_spans
            .range(range.clone())
            .map(|(_, figures)| figures)
        {
            spans.merge(figures);
        }
        let mut cpu = CpuSingles::default();
        for singles in self.cpu_calls.range(range).map(|(_, singles)| singles) {
            cpu.single.merge(&singles.single);
            cpu.summed_samples += singles.summed_samples;
        }
        super::methods::call_figures(
            weights_of(Event::Calls),
            weights_of(Event::CpuTime),
            spans,
            cpu,
        )
    }

    /// An estimate of the memory the index holds, in bytes.
    pub fn heap_bytes(&self) -> usize {
        let strings: usize = self
            .resources
            .iter()
            .map(|entry| entry.name.capacity() + std::mem::size_of::<Resource>())
            .sum();
        let maps: usize = self
            .ids
            .iter()
            .map(|ids| ids.capacity() * (std::mem::size_of::<(String, u32)>() + 1))
            .sum::<usize>()
            + strings; // the maps' keys are copies of the names
        strings
            + maps
            + self.parent.capacity() * 4
            + self.kinds.capacity()
            + self.children.heap_bytes()
            + self.totals.capacity() * std::mem::size_of::<Weights>()
            + self.edges.heap_bytes()
            + self.cross.heap_bytes()
            + self.attrs.capacity() * std::mem::size_of::<Attr>()
            + self.attr_ids.capacity() * (std::mem::size_of::<(Attr, u32)>() + 1)
            + self.cells.capacity() * std::mem::size_of::<Cell>()
            + self.stack_self.capacity() * 4
            + self.stack_leaf.capacity() * std::mem::size_of::<Leaf>()
            + self.stack_classes.heap_bytes()
            + (self.call_spans.len() + self.cpu_calls.len()) * 64
    }

    /// How many resources, kept stacks and cells the index holds.
    pub fn sizes(&self) -> (usize, usize, usize) {
        (
            self.resources.len(),
            self.stack_self.len(),
            self.cells.len(),
        )
    }
}

/// An event's weights on a resource, with its shares of the event's total (percent).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventWeights {
    pub event: Event,
    pub unit: Unit,
    #[serde(flatten)]
    pub weights: Weights,
    pub self_percent: f64,
    pub total_percent: f64,
}

/// A resource related to another (a caller, a callee, a thread it runs on, a class it
/// allocates, ...), with the weights of one event they share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Related {
    #[serde(flatten)]
    pub resource: ResourceRef,
    pub event: Event,
    #[serde(flatten)]
    pub weights: Weights,
    pub self_percent: f64,
    pub total_percent: f64,
}

/// A resource's samples in one thread state (`state` label: wall-clock states, lock waits).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateRow {
    pub state: String,
    pub event: Event,
    #[serde(flatten)]
    pub weights: Weights,
}

/// A resource's waits for locks of one class, blocked or parked, where it is on the waiting
/// stack (total) or the method waiting (self).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockRow {
    pub state: Option<String>,
    pub lock_class: Option<String>,
    pub event: Event,
    #[serde(flatten)]
    pub weights: Weights,
}

/// One method parameter tracing table of a method: its specification and, per value, how many
/// calls and how long (slowest mean first).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MptStats {
    /// The method as the tracing names it, `example.Slow.work(int)`.
    pub method: String,
    pub spec: String,
    pub calls: u64,
    pub unfinished: u64,
    pub values: Vec<MptRow>,
}

/// A traced value's calls and times, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MptRow {
    pub value_type: String,
    pub value: String,
    pub calls: u64,
    pub wall_total_ns: u64,
    pub wall_mean_ns: u64,
    pub wall_max_ns: u64,
    pub cpu_total_ns: u64,
    pub cpu_mean_ns: u64,
    pub cpu_max_ns: u64,
}

impl MptStats {
    fn of(table: &MptTable) -> MptStats {
        MptStats {
            method: table.method.clone(),
            spec: table.spec.clone(),
            calls: table.calls(),
            unfinished: table.unfinished,
            values: table
                .ranked()
                .into_iter()
                .map(|row| MptRow {
                    value_type: row.key.value_type.as_str().to_string(),
                    value: row.key.value.clone(),
                    calls: row.calls,
                    wall_total_ns: row.wall_total_ns,
                    wall_mean_ns: row.wall_mean_ns(),
                    wall_max_ns: row.wall_max_ns,
                    cpu_total_ns: row.cpu_total_ns,
                    cpu_mean_ns: row.cpu_mean_ns(),
                    cpu_max_ns: row.cpu_max_ns,
                })
                .collect(),
        }
    }
}

/// Everything about one resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResourceStats {
    pub resource: ResourceRef,
    /// A method's class, a class's package.
    pub parent: Option<ResourceRef>,
    /// The class loader of a class (or of a method's class), where the input tells it.
    pub loader: Option<String>,
    /// Its weights in each event.
    pub events: Vec<EventWeights>,
    /// A method's calls: counts and times per call, where the profile has calls.
    pub calls: Option<super::CallFigures>,
    /// Who calls it (for classes and packages, other classes and packages).
    pub callers: Vec<Related>,
    /// What it calls; self weight is where the callee is the leaf.
    pub callees: Vec<Related>,
    /// A package's classes, a class's methods, the methods on a thread.
    pub contents: Vec<Related>,
    /// The threads it runs on.
    pub threads: Vec<Related>,
    /// Its samples by thread state.
    pub states: Vec<StateRow>,
    /// The classes it allocates (self: allocated by its own code).
    pub allocations: Vec<Related>,
    /// For a class: what was allocated of it, per allocation event (self and total alike).
    pub allocated: Vec<EventWeights>,
    /// For a class: the methods allocating it (self: directly).
    pub allocated_by: Vec<Related>,
    /// Its waits for locks, by how and the lock's class.
    pub lock_waits: Vec<LockRow>,
    /// For a class: the waits for locks of that class, per lock event.
    pub waited_on: Vec<EventWeights>,
    /// For a class: the methods waiting for locks of that class (self: the waiting method).
    pub lock_waiters: Vec<Related>,
    /// A method's parameter tracing tables.
    pub mpt: Vec<MptStats>,
}

impl Default for ResourceRef {
    fn default() -> ResourceRef {
        ResourceRef {
            id: ResourceId(NONE),
            kind: ResourceKind::Method,
            name: String::new(),
            thread_id: None,
        }
    }
}

/// A thread's name as statistics give it (`[thread ID]` for a thread without a name,
/// `[unknown thread]` for samples of none), and its id.
pub(crate) fn thread_name(profile: &Profile, thread: Option<ThreadId>) -> (String, Option<u64>) {
    match thread {
        Some(thread) => {
            let entry = profile.thread(thread);
            let name = if entry.name.is_empty() {
                format!("[thread {}]", entry.id)
            } else {
                entry.name.clone()
            };
            (name, Some(entry.id))
        }
        None => (UNKNOWN_THREAD.to_string(), None),
    }
}

/// The value and count of some cells.
fn sum(cells: &[Cell]) -> (u64, u64) {
    cells.iter().fold((0, 0), |(value, count), cell| {
        (value + cell.value, count + cell.count)
    })
}

/// A code frame's method (level 0), class (1) or package (2).
fn at_level(code: &(u32, u32, u32), level: usize) -> u32 {
    match level {
        0 => code.0,
        1 => code.1,
        _ => code.2,
    }
}

/// The index while it is built.
struct Builder<'p> {
    profile: &'p Profile,
    filter: SampleFilter,
    events: Vec<Event>,
    event_totals: Vec<(u64, u64)>,
    resources: Vec<Resource>,
    parent: Vec<u32>,
    ids: [HashMap<String, u32>; 4],
    threads_by_name: HashMap<String, Vec<u32>>,
    roles: Vec<Role>,
    no_frames: (u32, u32, u32),
    thread_ids: Vec<u32>,
    unknown_thread: u32,
    states: Vec<String>,
    state_ids: HashMap<String, u32>,
    /// Per profile stack: its number among the kept ones, or `NONE`.
    stack_numbers: Vec<u32>,
    stack_self: Vec<u32>,
    stack_leaf: Vec<Leaf>,
    /// Per kept stack: its methods, classes and packages, each once, the leaf's marked.
    contributions: Csr,
    stack_classes: Csr,
    /// Per kept stack: its edges, each once, the last marked.
    stack_edges: Csr,
    edges: Vec<(u32, u32)>,
    edge_ids: FastMap<(u32, u32), u32>,
    /// Per resource: the stack it was last seen in (`stamp`) and where in that stack's list.
    seen: Vec<(u32, u32)>,
    edge_seen: Vec<(u32, u32)>,
    stamp: u32,
    cells: FastMap<(u32, u32, u8, u32), (u64, u64)>,
    call_spans: BTreeMap<(u32, u32), SpanFigures>,
    cpu_calls: BTreeMap<(u32, u32), CpuSingles>,
    thread_waits: BTreeMap<u32, Waits>,
    mpt: FastMap<u32, Vec<MptTable>>,
}

impl<'p> Builder<'p> {
    fn new(profile: &'p Profile, options: &ViewOptions) -> Builder<'p> {
        let events = profile.events();
        let mut builder = Builder {
            profile,
            filter: SampleFilter::new(profile, options),
            event_totals: vec![(0, 0); events.len()],
            events,
            resources: Vec::new(),
            parent: Vec::new(),
            ids: Default::default(),
            threads_by_name: HashMap::new(),
            roles: Vec::with_capacity(profile.frames().len()),
            no_frames: (NONE, NONE, NONE),
            thread_ids: vec![NONE; profile.threads.len()],
            unknown_thread: NONE,
            states: Vec::new(),
            state_ids: HashMap::new(),
            stack_numbers: vec![NONE; profile.stack_count()],
            stack_self: Vec::new(),
            stack_leaf: Vec::new(),
            contributions: Csr::new(),
            stack_classes: Csr::new(),
            stack_edges: Csr::new(),
            edges: Vec::new(),
            edge_ids: FastMap::default(),
            seen: Vec::new(),
            edge_seen: Vec::new(),
            stamp: 0,
            cells: FastMap::default(),
            call_spans: BTreeMap::new(),
            cpu_calls: BTreeMap::new(),
            thread_waits: BTreeMap::new(),
            mpt: FastMap::default(),
        };
        builder.no_frames = builder.code(NO_FRAMES, NO_FRAMES, NO_FRAMES);
        for frame in profile.frames() {
            let role = match frame.kind {
                FrameKind::AllocatedClass => Role::Allocated(builder.class(&frame.name)),
                FrameKind::MonitorClass | FrameKind::ParkBlocker => {
                    Role::Lock(builder.class(&frame.name))
                }
                FrameKind::Java | FrameKind::Inlined => {
                    let class = class_of(&frame.name);
                    let (method, class, package) =
                        builder.code(&frame.name, class, package_of(class));
                    Role::Code {
                        method,
                        class,
                        package,
                    }
                }
                FrameKind::Native => {
                    let (method, class, package) = builder.code(&frame.name, NATIVE, NATIVE);
                    Role::Code {
                        method,
                        class,
                        package,
                    }
                }
                FrameKind::Marker => {
                    let (method, class, package) =
                        builder.code(&frame.name, &frame.name, &frame.name);
                    Role::Code {
                        method,
                        class,
                        package,
                    }
                }
            };
            builder.roles.push(role);
        }
        builder
    }

    fn resource(&mut self, kind: ResourceKind, name: &str, parent: u32) -> u32 {
        if let Some(id) = self.ids[kind as usize].get(name) {
            return *id;
        }
        let id = self.resources.len() as u32;
        assert!(id < SELF, "more resources than the index numbers");
        self.resources.push(Resource {
            kind,
            name: name.to_string(),
            thread_id: None,
        });
        self.parent.push(parent);
        self.ids[kind as usize].insert(name.to_string(), id);
        id
    }

    fn class(&mut self, name: &str) -> u32 {
        let package = self.resource(ResourceKind::Package, package_of(name), NONE);
        self.resource(ResourceKind::Class, name, package)
    }

    fn code(&mut self, method: &str, class: &str, package: &str) -> (u32, u32, u32) {
        let package = self.resource(ResourceKind::Package, package, NONE);
        let class = self.resource(ResourceKind::Class, class, package);
        (
            self.resource(ResourceKind::Method, method, class),
            class,
            package,
        )
    }

    fn thread(&mut self, thread: Option<ThreadId>) -> u32 {
        let known = match thread {
            Some(thread) => self.thread_ids[thread as usize],
            None => self.unknown_thread,
        };
        if known != NONE {
            return known;
        }
        let (name, thread_id) = thread_name(self.profile, thread);
        let key = match thread_id {
            Some(id) => format!("{name} tid={id}"),
            None => name.clone(),
        };
        let id = self.resources.len() as u32;
        self.resources.push(Resource {
            kind: ResourceKind::Thread,
            name: name.clone(),
            thread_id,
        });
        self.parent.push(NONE);
        self.ids[ResourceKind::Thread as usize].insert(key, id);
        self.threads_by_name.entry(name).or_default().push(id);
        match thread {
            Some(thread) => self.thread_ids[thread as usize] = id,
            None => self.unknown_thread = id,
        }
        id
    }

    fn state(&mut self, state: &str) -> u32 {
        if let Some(id) = self.state_ids.get(state) {
            return *id;
        }
        let id = self.states.len() as u32;
        self.states.push(state.to_string());
        self.state_ids.insert(state.to_string(), id);
        id
    }

    /// The kept stack's number, made on first sight: its leaf, its resources and edges.
    fn stack(&mut self, stack: u32) -> u32 {
        let known = self.stack_numbers[stack as usize];
        if known != NONE {
            return known;
        }
        let number = self.stack_self.len() as u32;
        self.stack_numbers[stack as usize] = number;
        let frames = self.profile.stack(stack);
        let leaf = match frames.last().map(|frame| self.roles[*frame as usize]) {
            Some(Role::Allocated(class)) => Leaf::Allocated(class),
            Some(Role::Lock(class)) => Leaf::Lock(class),
            _ => Leaf::None,
        };
        let mut code: Vec<(u32, u32, u32)> = frames
            .iter()
            .filter_map(|frame| match self.roles[*frame as usize] {
                Role::Code {
                    method,
                    class,
                    package,
                } => Some((method, class, package)),
                _ => None,
            })
            .collect();
        if code.is_empty() {
            code.push(self.no_frames);
        }
        let &(self_method, self_class, self_package) = code.last().expect("one frame at least");
        self.stamp += 1;
        let stamp = self.stamp;
        if self.seen.len() < self.resources.len() {
            self.seen.resize(self.resources.len(), (0, 0));
        }
        let mut list: Vec<u32> = Vec::with_capacity(code.len() * 2);
        for level in 0..3 {
            for item in &code {
                let resource = at_level(item, level);
                let seen = &mut self.seen[resource as usize];
                if seen.0 != stamp {
                    *seen = (stamp, list.len() as u32);
                    list.push(resource);
                }
            }
        }
        for resource in [self_method, self_class, self_package] {
            let position = self.seen[resource as usize].1 as usize;
            list[position] |= SELF;
        }
        self.contributions.push(&list);
        let classes: Vec<u32> = list
            .iter()
            .copied()
            .filter(|entry| self.resources[(entry & !SELF) as usize].kind == ResourceKind::Class)
            .collect();
        self.stack_classes.push(&classes);
        // Edges: between methods as called, between classes and packages where they change.
        list.clear();
        for level in 0..3 {
            let mut last: Option<u32> = None;
            let mut caller = at_level(&code[0], level);
            for item in &code[1..] {
                let callee = at_level(item, level);
                // A method calling itself is an edge; calls within a class or a package are not.
                if level > 0 && callee == caller {
                    continue;
                }
                let edge = self.edge(caller, callee);
                let seen = &mut self.edge_seen[edge as usize];
                if seen.0 != stamp {
                    *seen = (stamp, list.len() as u32);
                    list.push(edge);
                }
                last = Some(edge);
                caller = callee;
            }
            if let Some(edge) = last {
                let position = self.edge_seen[edge as usize].1 as usize;
                list[position] |= SELF;
            }
        }
        self.stack_edges.push(&list);
        self.stack_self.push(self_method);
        self.stack_leaf.push(leaf);
        number
    }

    fn edge(&mut self, caller: u32, callee: u32) -> u32 {
        let next = self.edges.len() as u32;
        let id = *self.edge_ids.entry((caller, callee)).or_insert(next);
        if id == next {
            self.edges.push((caller, callee));
            self.edge_seen.push((0, 0));
        }
        id
    }

    fn build(mut self) -> StatisticsIndex {
        let profile = self.profile;
        let mut slots = [u8::MAX; Event::ALL.len()];
        for (slot, event) in self.events.iter().enumerate() {
            slots[Event::ALL
                .iter()
                .position(|e| e == event)
                .expect("an event")] = slot as u8;
        }
        let slot_of = |event: Event| {
            slots[Event::ALL
                .iter()
                .position(|e| *e == event)
                .expect("an event")]
        };
        for sample in &profile.samples {
            if (sample.value == 0 && sample.count == 0) || !self.filter.keeps(profile, sample) {
                continue;
            }
            let slot = slot_of(sample.event);
            let stack = self.stack(sample.stack);
            let thread = self.thread(sample.thread);
            let state = match sample.labels.iter().find(|(name, _)| name == STATE_LABEL) {
                Some((_, state)) => self.state(state),
                None => NONE,
            };
            let cell = self
                .cells
                .entry((stack, thread, slot, state))
                .or_insert((0, 0));
            cell.0 += sample.value;
            cell.1 += sample.count;
            let total = &mut self.event_totals[slot as usize];
            total.0 += sample.value;
            total.1 += sample.count;
            if sample.event == Event::CpuTime {
                let singles = self
                    .cpu_calls
                    .entry((self.stack_self[stack as usize], thread))
                    .or_default();
                if sample.count == 1 {
                    singles.single.record(sample.value);
                } else {
                    singles.summed_samples += 1;
                }
            }
        }
        for span in &profile.spans {
            // Spans count where they start, as the calls' samples are timed.
            if !self.filter.in_window(Some(span.start_ns)) {
                continue;
            }
            let duration = span.end_ns.saturating_sub(span.start_ns);
            match span.kind {
                SpanKind::Call if self.filter.keeps_method(span.frame) => {
                    let Role::Code { method, .. } = self.roles[span.frame as usize] else {
                        continue;
                    };
                    let thread = self.thread(span.thread);
                    self.call_spans
                        .entry((method, thread))
                        .or_default()
                        .record(duration);
                }
                SpanKind::MonitorBlocked | SpanKind::MonitorWait => {
                    let thread = self.thread(span.thread);
                    let waits = self.thread_waits.entry(thread).or_default();
                    if span.kind == SpanKind::MonitorBlocked {
                        waits.blocked.record(duration);
                    } else {
                        waits.waited.record(duration);
                    }
                }
                _ => {}
            }
        }
        for table in &profile.mpt {
            // `example.Slow.work(int) [loader 1: ...]`: the frame's name is what precedes the
            // parameters.
            let method = table.method.split('(').next().unwrap_or_default();
            let (method, _, _) = self.code(method, class_of(method), package_of(class_of(method)));
            self.mpt.entry(method).or_default().push(table.clone());
        }
        let mut loaders = FastMap::default();
        for (class, loader) in &profile.class_loaders {
            if let Some(id) = self.ids[ResourceKind::Class as usize].get(class) {
                loaders.insert(*id, loader.clone());
            }
        }
        self.finish(loaders)
    }

    fn finish(self, loaders: FastMap<u32, String>) -> StatisticsIndex {
        let resources = self.resources.len();
        let events = self.events.len();
        let mut cells: Vec<Cell> = self
            .cells
            .iter()
            .map(|(&(stack, thread, event, state), &(value, count))| Cell {
                stack,
                thread,
                event,
                state,
                value,
                count,
            })
            .collect();
        cells.sort_unstable_by_key(|cell| (cell.stack, cell.event, cell.thread, cell.state));

        // A stack's resources and edges take each (stack, event)'s cells summed, once; threads
        // each cell.
        let mut totals = vec![Weights::default(); resources * events];
        let mut edge_weights = vec![Weights::default(); self.edges.len() * events];
        for run in cells.chunk_by(|a, b| (a.stack, a.event) == (b.stack, b.event)) {
            let (value, count) = sum(run);
            let slot = run[0].event as usize;
            for (weights, entries) in [
                (&mut totals, self.contributions.get(run[0].stack)),
                (&mut edge_weights, self.stack_edges.get(run[0].stack)),
            ] {
                for &entry in entries {
                    weights[(entry & !SELF) as usize * events + slot].add(
                        value,
                        count,
                        entry & SELF != 0,
                    );
                }
            }
            for cell in run {
                totals[cell.thread as usize * events + slot].add(cell.value, cell.count, true);
            }
        }
        let mut edge_rows = Vec::new();
        for (index, weights) in edge_weights.iter().enumerate() {
            if !weights.is_zero() {
                let (caller, callee) = self.edges[index / events];
                edge_rows.push(Row {
                    key: caller,
                    other: callee,
                    event: (index % events) as u8,
                    weights: *weights,
                });
            }
        }
        drop(edge_weights);
        // A caller's callees together (the root methods call thousands); callers through the
        // permutation.
        let edges = Table::new(edge_rows, resources, resources, Contiguous::Keys);

        let mut attrs: Vec<Attr> = Vec::new();
        let mut attr_ids: FastMap<Attr, u32> = FastMap::default();
        let mut intern = |attr: Attr| -> u32 {
            let next = attrs.len() as u32;
            *attr_ids.entry(attr).or_insert_with(|| {
                attrs.push(attr);
                next
            })
        };
        let lock_events: Vec<u8> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, event)| matches!(event, Event::Lock | Event::LockOwner))
            .map(|(slot, _)| slot as u8)
            .collect();
        let mut pairs: Vec<(u32, u32)> = Vec::with_capacity(cells.len() * 2);
        for (index, cell) in cells.iter().enumerate() {
            let index = index as u32;
            pairs.push((intern(Attr::Thread(cell.thread)), index));
            if cell.state != NONE {
                pairs.push((intern(Attr::State(cell.state)), index));
            }
            let leaf = self.stack_leaf[cell.stack as usize];
            if let Leaf::Allocated(class) = leaf {
                pairs.push((intern(Attr::Allocated(class)), index));
            }
            if lock_events.contains(&cell.event) {
                let class = match leaf {
                    Leaf::Lock(class) => class,
                    _ => NONE,
                };
                pairs.push((
                    intern(Attr::Lock {
                        state: cell.state,
                        class,
                    }),
                    index,
                ));
            }
        }
        pairs.sort_unstable();
        let mut accumulated = vec![Weights::default(); resources * events];
        let mut touched: Vec<u32> = Vec::new();
        let mut cross_rows: Vec<Row> = Vec::new();
        for group in pairs.chunk_by(|a, b| a.0 == b.0) {
            let attr = group[0].0;
            let by_thread = matches!(attrs[attr as usize], Attr::Thread(_));
            let mut add = |at: usize, value: u64, count: u64, is_self: bool| {
                if accumulated[at].is_zero() {
                    touched.push(at as u32);
                }
                accumulated[at].add(value, count, is_self);
            };
            // The group's cells of one stack and event (other threads or states) are
            // neighbours: their sum goes to the stack's resources once.
            for run in group.chunk_by(|a, b| {
                let (a, b) = (&cells[a.1 as usize], &cells[b.1 as usize]);
                (a.stack, a.event) == (b.stack, b.event)
            }) {
                let first = &cells[run[0].1 as usize];
                let slot = first.event as usize;
                let (mut value, mut count) = (0, 0);
                for &(_, index) in run {
                    let cell = &cells[index as usize];
                    value += cell.value;
                    count += cell.count;
                    if !by_thread {
                        add(
                            cell.thread as usize * events + slot,
                            cell.value,
                            cell.count,
                            true,
                        );
                    }
                }
                for &entry in self.contributions.get(first.stack) {
                    add(
                        (entry & !SELF) as usize * events + slot,
                        value,
                        count,
                        entry & SELF != 0,
                    );
                }
            }
            for at in touched.drain(..) {
                let at = at as usize;
                cross_rows.push(Row {
                    key: (at / events) as u32,
                    other: attr,
                    event: (at % events) as u8,
                    weights: std::mem::take(&mut accumulated[at]),
                });
            }
        }
        drop(accumulated);
        drop(pairs);
        // An attribute's rows together: a thread's methods are thousands of rows, a method's
        // threads and states a few.
        let cross = Table::new(cross_rows, resources, attrs.len(), Contiguous::Others);

        let mut children = Csr::new();
        let mut by_parent: Vec<Vec<u32>> = vec![Vec::new(); resources];
        for (child, parent) in self.parent.iter().enumerate() {
            if *parent != NONE {
                by_parent[*parent as usize].push(child as u32);
            }
        }
        for list in &by_parent {
            children.push(list);
        }

        StatisticsIndex {
            source: self.profile.source.clone(),
            events: self.events,
            event_totals: self.event_totals,
            kinds: self.resources.iter().map(|entry| entry.kind).collect(),
            resources: self.resources,
            ids: self.ids,
            threads_by_name: self.threads_by_name,
            parent: self.parent,
            children,
            totals,
            edges,
            cross,
            attrs,
            attr_ids,
            states: self.states,
            cells,
            stack_self: self.stack_self,
            stack_leaf: self.stack_leaf,
            stack_classes: self.stack_classes,
            call_spans: self.call_spans,
            cpu_calls: self.cpu_calls,
            thread_waits: self.thread_waits,
            mpt: self.mpt,
            has_loaders: !self.profile.class_loaders.is_empty(),
            loaders,
        }
    }
}
