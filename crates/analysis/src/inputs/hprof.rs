//! HPROF's profiles (text, or binary read into the same records) as the profile model: CPU
//! SAMPLES as `cpu`, CPU TIME as `cpu_time` and `calls`, MONITOR TIME and PARK TIME as `lock`,
//! LOCK OWNERS as `lock_owner`, SITES as live
//! and allocated bytes and objects with the allocated class as the leaf frame, the MPT record as
//! the profile's parameter tracing tables, MPT SAMPLES as `mpt_cpu` and `mpt_wall` labelled by
//! the traced call's method, specification and value. A trace as deep as the `depth` the
//! sampler reports is marked `[truncated]` at its root: it may have been cut there.
//!
//! Traces are interned as they are read ([`HprofIngest::trace`]), so a large text file is never
//! held twice: once as the reader's records and again as the model.

use std::collections::HashMap;

use openprof_format::hprof_text::{
    self, CpuTableKind, FrameLine, LockTableKind, SitesTable, TextProfile, Trace,
};

use crate::profile::{
    Event, Frame, FrameKind, LockWait, Profile, Sample, StackId, ThreadId, MPT_METHOD_LABEL,
    MPT_SPEC_LABEL, MPT_VALUE_LABEL, STATE_LABEL, TRUNCATED,
};
use openprof_format::hprof_text::mpt::format_value;

/// The mark of the samples a table does not list: rows below HPROF's `cutoff`.
pub const BELOW_CUTOFF: &str = "[below cutoff]";

/// Reads an HPROF profile whose traces it holds.
pub fn from_hprof(hprof: &TextProfile, source: &str) -> Profile {
    let mut ingest = HprofIngest::new(source);
    for trace in hprof.traces.values() {
        ingest.trace(trace.clone());
    }
    ingest.finish(hprof)
}

/// An HPROF profile being read into the model: traces first, as they come, then the tables
/// that refer to them.
pub struct HprofIngest {
    profile: Profile,
    /// Each trace's stack, its thread serial and how many Java frames it has.
    traces: HashMap<u32, (StackId, Option<u32>, usize)>,
    /// The labels of the traces that have a labels frame (continuous mode's windows): the
    /// frame is taken off the stack and its labels go on the samples.
    trace_labels: HashMap<u32, Vec<(String, String)>>,
}

impl HprofIngest {
    pub fn new(source: &str) -> HprofIngest {
        HprofIngest {
            profile: Profile::new(source),
            traces: HashMap::new(),
            trace_labels: HashMap::new(),
        }
    }

    /// Interns one trace's frames.
    pub fn trace(&mut self, trace: Trace) {
        let java_frames = trace.frames.iter().filter(|frame| frame.is_java()).count();
        let labels: Vec<(String, String)> = trace
            .frames
            .iter()
            .filter(|frame| frame.line == FrameLine::Labels)
            .flat_map(|frame| hprof_text::decode_labels(&frame.method_name))
            .collect();
        if !labels.is_empty() {
            self.trace_labels.insert(trace.serial, labels);
        }
        let stack = self.profile.stack_of_frames_leaf_first(
            trace
                .frames
                .iter()
                .filter(|frame| frame.line != FrameLine::Labels)
                .map(frame),
        );
        self.traces
            .insert(trace.serial, (stack, trace.thread, java_frames));
    }

    /// Adds the tables (traces already given) and returns the model. Every dump's table counts
    /// (HPROF starts each dump from zero); the samples of rows cut at `cutoff` are kept under one
    /// marked frame, so shares stay those of the whole profile.
    pub fn finish(mut self, hprof: &TextProfile) -> Profile {
        // The depth samples were kept at, where the profile says: a trace of that many Java
        // frames may have been cut, and is marked so rather than merged with shorter ones.
        let depth = hprof.samplers.iter().find_map(|sampler| sampler.depth);
        if let Some(sampler) = hprof.samplers.first() {
            self.profile.period_ns = Some(u64::from(sampler.interval_ms) * 1_000_000);
        }
        for table in &hprof.cpu_tables {
            let mut listed = 0u64;
            for row in &table.rows {
                let (stack, thread) = self.stack_of_trace(hprof, row.trace, None, depth);
                match table.kind {
                    CpuTableKind::Samples => {
                        listed = listed.saturating_add(row.count);
                        self.profile.add_sample(Sample {
                            stack,
                            event: Event::Cpu,
                            value: row.count,
                            count: row.count,
                            thread,
                            time_ns: None,
                            labels: self
                                .trace_labels
                                .get(&row.trace)
                                .cloned()
                                .unwrap_or_default(),
                        });
                    }
                    CpuTableKind::Time => {
                        // The table's total is milliseconds of CPU; a row's share of it is its
                        // own.
                        let nanoseconds =
                            (row.self_percent / 100.0 * table.total as f64 * 1e6).round() as u64;
                        self.add(stack, thread, Event::CpuTime, nanoseconds, row.count);
                        self.add(stack, thread, Event::Calls, row.count, row.count);
                    }
                    CpuTableKind::Wall => {
                        listed = listed.saturating_add(row.count);
                        self.profile.add_sample(Sample {
                            stack,
                            event: Event::Wall,
                            value: row.count,
                            count: row.count,
                            thread,
                            time_ns: None,
                            labels: row
                                .state
                                .iter()
                                .map(|state| (STATE_LABEL.to_string(), state.clone()))
                                .chain(
                                    self.trace_labels
                                        .get(&row.trace)
                                        .into_iter()
                                        .flatten()
                                        .cloned(),
                                )
                                .collect(),
                        });
                    }
                }
            }
            let sampled = match table.kind {
                CpuTableKind::Samples => Some(Event::Cpu),
                CpuTableKind::Wall => Some(Event::Wall),
                CpuTableKind::Time => None,
            };
            if let (Some(event), true) = (sampled, table.total > listed) {
                let rest = table.total - listed;
                let stack = self
                    .profile
                    .stack_of_frames_leaf_first([Frame::marker(BELOW_CUTOFF)]);
                self.add(stack, None, event, rest, rest);
            }
        }
        // Waits for locks: MONITOR TIME (HPROF's monitor=y; blocked) and PARK TIME (parked) as
        // `lock` on the waiting threads' stacks, LOCK OWNERS as `lock_owner` on the owners'; each
        // row's share of its table's milliseconds is its own; the lock's class is the leaf.
        for table in &hprof.lock_tables {
            let event = match table.kind {
                LockTableKind::Monitor | LockTableKind::Park => Event::Lock,
                LockTableKind::Owners => Event::LockOwner,
            };
            for row in &table.rows {
                let wait = match table.kind {
                    LockTableKind::Monitor => LockWait::Blocked,
                    LockTableKind::Park => LockWait::Parked,
                    LockTableKind::Owners => {
                        match row.state.as_deref().and_then(LockWait::from_name) {
                            Some(wait) => wait,
                            None => continue,
                        }
                    }
                };
                let class = row.method.as_deref();
                let leaf = class.map(|class| wait.class_frame(class));
                let (stack, thread) = self.stack_of_trace(hprof, row.trace, leaf, depth);
                let nanoseconds =
                    (row.self_percent / 100.0 * table.total_ms as f64 * 1e6).round() as u64;
                self.profile.add_sample(Sample {
                    stack,
                    event,
                    value: nanoseconds,
                    count: row.count,
                    thread,
                    time_ns: None,
                    labels: wait.labels(class),
                });
            }
        }
        self.profile.mpt = hprof.mpt.clone();
        // Samples inside traced calls: every dump's record counts, as the CPU tables do.
        for record in &hprof.mpt_samples {
            let event = match record.kind {
                CpuTableKind::Wall => Event::MptWall,
                _ => Event::MptCpu,
            };
            for value in &record.values {
                let call_labels = [
                    (MPT_METHOD_LABEL, value.method.clone()),
                    (MPT_SPEC_LABEL, value.spec.clone()),
                    (MPT_VALUE_LABEL, format_value(&value.key)),
                ];
                for row in &value.table.rows {
                    let (stack, thread) = self.stack_of_trace(hprof, row.trace, None, depth);
                    let mut labels: Vec<(String, String)> = call_labels
                        .iter()
                        .map(|(name, text)| (name.to_string(), text.clone()))
                        .collect();
                    if let Some(state) = &row.state {
                        labels.push((STATE_LABEL.to_string(), state.clone()));
                    }
                    self.profile.add_sample(Sample {
                        stack,
                        event,
                        value: row.count,
                        count: row.count,
                        thread,
                        time_ns: None,
                        labels,
                    });
                }
            }
        }
        // A complete SITES table counts from the start, so the last one holds the run; a
        // continuous profile's incremental tables each count their window, so allocations are
        // their sum, and live figures only a complete table has.
        let last_complete = hprof.sites.iter().rev().find(|table| !table.incremental);
        let has_windows = hprof.sites.iter().any(|table| table.incremental);
        if let Some(table) = last_complete {
            self.add_sites(hprof, table, !has_windows, depth);
        }
        for table in hprof.sites.iter().filter(|table| table.incremental) {
            self.add_sites(hprof, table, true, depth);
        }
        self.profile
    }

    /// A SITES table's live figures, and its allocations where `allocations`.
    fn add_sites(
        &mut self,
        hprof: &TextProfile,
        table: &SitesTable,
        allocations: bool,
        depth: Option<u32>,
    ) {
        for row in &table.rows {
            let site = &row.site;
            let class = Frame {
                name: site.class_name.clone(),
                file: None,
                line: None,
                kind: FrameKind::AllocatedClass,
            };
            let (stack, thread) = self.stack_of_trace(hprof, site.trace, Some(class), depth);
            if !table.incremental {
                self.add(
                    stack,
                    thread,
                    Event::LiveBytes,
                    site.live_bytes,
                    site.live_objects,
                );
                let objects = site.live_objects;
                self.add(stack, thread, Event::LiveObjects, objects, objects);
            }
            if allocations {
                let (bytes, objects) = (site.allocated_bytes, site.allocated_objects);
                self.add(stack, thread, Event::AllocBytes, bytes, objects);
                self.add(stack, thread, Event::AllocObjects, objects, objects);
            }
        }
    }

    fn add(
        &mut self,
        stack: StackId,
        thread: Option<ThreadId>,
        event: Event,
        value: u64,
        count: u64,
    ) {
        self.profile.add_sample(Sample {
            stack,
            event,
            value,
            count,
            thread,
            time_ns: None,
            labels: Vec::new(),
        });
    }

    /// A trace's stack (with a leaf put on top, such as an allocated class, and the mark of a
    /// cut stack at its root), with its thread when the trace names one.
    fn stack_of_trace(
        &mut self,
        hprof: &TextProfile,
        serial: u32,
        leaf: Option<Frame>,
        depth: Option<u32>,
    ) -> (StackId, Option<ThreadId>) {
        let Some(&(stack, thread_serial, java_frames)) = self.traces.get(&serial) else {
            let unknown = Frame::marker(format!("[trace {serial}]"));
            let stack = self
                .profile
                .stack_of_frames_leaf_first(leaf.into_iter().chain([unknown]));
            return (stack, None);
        };
        let cut = depth.is_some_and(|depth| depth > 0 && java_frames >= depth as usize);
        let stack = if cut || leaf.is_some() {
            let mut frames = Vec::with_capacity(self.profile.stack(stack).len() + 2);
            if cut {
                frames.push(self.profile.frame_id(Frame::marker(TRUNCATED)));
            }
            frames.extend_from_slice(self.profile.stack(stack));
            if let Some(leaf) = leaf {
                frames.push(self.profile.frame_id(leaf));
            }
            self.profile.stack_id(&frames)
        } else {
            stack
        };
        let thread = thread_serial.map(|serial| {
            let name = hprof
                .thread(serial)
                .map(|thread| thread.name.clone())
                .unwrap_or_default();
            self.profile.thread_id(u64::from(serial), &name)
        });
        (stack, thread)
    }
}

/// An HPROF frame as a model frame.
pub fn frame(frame: &hprof_text::Frame) -> Frame {
    let (kind, line) = match frame.line {
        FrameLine::Line(line) => (FrameKind::Java, Some(line)),
        FrameLine::Unknown | FrameLine::Compiled | FrameLine::Native => (FrameKind::Java, None),
        FrameLine::NativeCode => (FrameKind::Native, None),
        FrameLine::FailedWalk
        | FrameLine::VmThread
        | FrameLine::VirtualThread
        | FrameLine::Labels => (FrameKind::Marker, None),
    };
    Frame {
        name: frame.qualified_method(),
        file: frame.source_file.clone(),
        line,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames of a sample's stack, root first, as (name, kind).
    fn frames_of(profile: &Profile, sample: &Sample) -> Vec<(String, FrameKind)> {
        profile
            .stack(sample.stack)
            .iter()
            .map(|id| {
                let frame = profile.frame(*id);
                (frame.name.clone(), frame.kind)
            })
            .collect()
    }

    fn label<'a>(sample: &'a Sample, name: &str) -> Option<&'a str> {
        sample
            .labels
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    #[test]
    fn monitor_time_becomes_lock_time_by_monitor_class() {
        let text = "JAVA PROFILE 1.0.1\n--------\n\
            TRACE 300010:\n\tCalls.contend(Calls.java:40)\n\tCalls.main(Calls.java:10)\n\
            MONITOR TIME BEGIN (total = 250 ms) Mon Nov 23 10:00:00 2026\n\
            rank   self  accum   count trace monitor\n   \
            1 80.00% 80.00%       4 300010 java.lang.Object (Java)\n   \
            2 20.00% 100.00%       1 300010 Calls$Lock (Java)\n\
            MONITOR TIME END\n";
        let hprof = hprof_text::read(text.as_bytes()).unwrap();
        let profile = from_hprof(&hprof, "monitor.txt");
        assert_eq!(profile.events(), [Event::Lock]);
        assert_eq!(profile.total(Event::Lock), 250_000_000);
        let object = profile
            .samples
            .iter()
            .find(|sample| label(sample, "lock_class") == Some("java.lang.Object"))
            .unwrap();
        assert_eq!((object.value, object.count), (200_000_000, 4));
        assert_eq!(label(object, "state"), Some("blocked"));
        // The monitor's class on top of the blocked method.
        assert_eq!(
            frames_of(&profile, object),
            [
                ("Calls.main".to_string(), FrameKind::Java),
                ("Calls.contend".to_string(), FrameKind::Java),
                ("java.lang.Object".to_string(), FrameKind::MonitorClass),
            ]
        );
    }

    /// PARK TIME joins MONITOR TIME in `lock` (parked, the blocker's class on top; a park
    /// without a blocker ends at the parking method); LOCK OWNERS is `lock_owner` on the
    /// owners' stacks, blocked and parked apart.
    #[test]
    fn parks_are_lock_time_and_owners_their_own_event() {
        let text = "JAVA PROFILE 1.0.1\n--------\n\
            TRACE 300001:\n\tjdk.internal.misc.Unsafe.park(Unsafe.java:Native method)\n\tWork.run(Work.java:5)\n\
            TRACE 300002:\n\tWork.hold(Work.java:9)\n\
            MONITOR TIME BEGIN (total = 100 ms) Mon Nov 23 10:00:00 2026\n\
            rank   self  accum   count trace monitor\n   \
            1 100.00% 100.00%       2 300001 Work$Ledger (Java)\n\
            MONITOR TIME END\n\
            PARK TIME BEGIN (total = 400 ms) Mon Nov 23 10:00:00 2026\n\
            rank   self  accum   count trace blocker\n   \
            1 75.00% 75.00%       3 300001 java.util.concurrent.locks.ReentrantLock$NonfairSync\n   \
            2 25.00% 100.00%       1 300001 <none>\n\
            PARK TIME END\n\
            LOCK OWNERS BEGIN (total = 400 ms) Mon Nov 23 10:00:00 2026\n\
            rank   self  accum   count trace state lock\n   \
            1 75.00% 75.00%       3 300002 parked java.util.concurrent.locks.ReentrantLock$NonfairSync\n   \
            2 25.00% 100.00%       2 300002 blocked Work$Ledger\n\
            LOCK OWNERS END\n";
        let hprof = hprof_text::read(text.as_bytes()).unwrap();
        let profile = from_hprof(&hprof, "locks.txt");
        assert_eq!(profile.events(), [Event::Lock, Event::LockOwner]);
        assert_eq!(profile.total(Event::Lock), 500_000_000);
        assert_eq!(profile.total(Event::LockOwner), 400_000_000);
        let lock: Vec<&Sample> = profile
            .samples
            .iter()
            .filter(|sample| sample.event == Event::Lock)
            .collect();
        let parked: u64 = lock
            .iter()
            .filter(|sample| label(sample, "state") == Some("parked"))
            .map(|sample| sample.value)
            .sum();
        assert_eq!(parked, 400_000_000);
        let sync = lock
            .iter()
            .find(|sample| {
                label(sample, "lock_class").is_some_and(|class| class.ends_with("NonfairSync"))
            })
            .unwrap();
        assert_eq!(
            frames_of(&profile, sync).last().unwrap(),
            &(
                "java.util.concurrent.locks.ReentrantLock$NonfairSync".to_string(),
                FrameKind::ParkBlocker
            )
        );
        let unblocked = lock
            .iter()
            .find(|sample| {
                label(sample, "state") == Some("parked") && label(sample, "lock_class").is_none()
            })
            .unwrap();
        assert_eq!(unblocked.value, 100_000_000);
        assert_eq!(
            frames_of(&profile, unblocked).last().unwrap().0,
            "jdk.internal.misc.Unsafe.park"
        );
        let owners: Vec<&Sample> = profile
            .samples
            .iter()
            .filter(|sample| sample.event == Event::LockOwner)
            .collect();
        assert_eq!(owners.len(), 2);
        for sample in owners {
            let (state, value) = (label(sample, "state"), sample.value);
            let frames = frames_of(&profile, sample);
            assert_eq!(frames[0].0, "Work.hold");
            let (expected, kind) = match state {
                Some("parked") => (300_000_000, FrameKind::ParkBlocker),
                Some("blocked") => (100_000_000, FrameKind::MonitorClass),
                other => panic!("{other:?}"),
            };
            assert_eq!((value, frames[1].1), (expected, kind));
        }
    }
}
