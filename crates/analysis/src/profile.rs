//! The one profile model: samples (or counts, bytes, times) of events on stacks of frames, per
//! thread, with optional times and labels, and timed spans for timelines. Every input
//! (`inputs`) is read into it and every view (`views`) is written from it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use openprof_format::mpt_stats::MptTable;

/// What a frame is, for colouring and filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A Java method (interpreted or compiled, as far as the input tells).
    Java,
    /// A Java method inlined into its caller by the JIT, where the input tells so.
    Inlined,
    /// Native code: JNI libraries, the JVM's own functions, the C library, the kernel.
    Native,
    /// Not code: a failed walk's mark, a JVM thread's root, a truncated stack's mark.
    Marker,
    /// The class of the objects allocated, as the leaf of an allocation site's stack.
    AllocatedClass,
    /// The class of a monitor threads blocked on, as the leaf of a lock event's stack.
    MonitorClass,
    /// The class of the object threads parked on (their park blocker), as the leaf of a lock
    /// event's stack.
    ParkBlocker,
}

impl FrameKind {
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Java => "java",
            FrameKind::Inlined => "inlined",
            FrameKind::Native => "native",
            FrameKind::Marker => "marker",
            FrameKind::AllocatedClass => "allocated_class",
            FrameKind::MonitorClass => "monitor_class",
            FrameKind::ParkBlocker => "park_blocker",
        }
    }
}

/// One frame of a stack: a method (`package.Class.method`) or a native symbol, with where in
/// the source when the input says.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frame {
    pub name: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub kind: FrameKind,
}

impl Frame {
    pub fn java(name: impl Into<String>) -> Frame {
        Frame {
            name: name.into(),
            file: None,
            line: None,
            kind: FrameKind::Java,
        }
    }

    pub fn marker(name: impl Into<String>) -> Frame {
        Frame {
            name: name.into(),
            file: None,
            line: None,
            kind: FrameKind::Marker,
        }
    }

    /// Whether the frame is a method of the JDK's own classes (coloured apart from the
    /// program's).
    pub fn is_jdk(&self) -> bool {
        matches!(self.kind, FrameKind::Java | FrameKind::Inlined)
            && ["java.", "javax.", "jdk.", "sun.", "com.sun."]
                .iter()
                .any(|prefix| self.name.starts_with(prefix))
    }

    /// The name without the package: `HashMap.getNode` for `java.util.HashMap.getNode`.
    pub fn simple_name(&self) -> &str {
        if !matches!(self.kind, FrameKind::Java | FrameKind::Inlined) {
            return &self.name;
        }
        // The class is the second dot-separated part from the end; nested classes keep `$`.
        let Some(method_dot) = self.name.rfind('.') else {
            return &self.name;
        };
        match self.name[..method_dot].rfind('.') {
            Some(class_dot) => &self.name[class_dot + 1..],
            None => &self.name,
        }
    }
}

/// The name a truncated stack's root mark carries: the stack was deeper than recorded.
pub const TRUNCATED: &str = "[truncated]";

/// What a sample's value measures. Serialized by its name (`alloc_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// CPU time, sampled: one sample per interval of a thread's CPU time.
    Cpu,
    /// Wall-clock time, sampled: threads running or not.
    Wall,
    /// Bytes allocated.
    AllocBytes,
    /// Objects allocated.
    AllocObjects,
    /// Bytes still live (HPROF's SITES, a heap dump).
    LiveBytes,
    /// Objects still live.
    LiveObjects,
    /// Time threads waited for locks (blocked on a monitor, or parked), in nanoseconds, on the
    /// waiting threads' stacks.
    Lock,
    /// The same waits' time on the stacks of the threads that held the locks.
    LockOwner,
    /// CPU time measured by instrumentation (cpu=times), in nanoseconds.
    CpuTime,
    /// Calls counted by instrumentation.
    Calls,
    /// CPU samples taken inside method parameter tracing's calls, labelled with the call's
    /// method, specification and value (`MPT_*_LABEL`); a call traced by several
    /// specifications counts its samples under each value, so these are kept apart from `cpu`.
    MptCpu,
    /// Wall-clock samples taken inside traced calls, labelled the same way and by state.
    MptWall,
}

/// The unit of an event's values. Serialized by its name (`nanoseconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Samples,
    Nanoseconds,
    Bytes,
    Count,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Samples => "samples",
            Unit::Nanoseconds => "nanoseconds",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        }
    }
}

impl Event {
    pub const ALL: [Event; 12] = [
        Event::Cpu,
        Event::Wall,
        Event::AllocBytes,
        Event::AllocObjects,
        Event::LiveBytes,
        Event::LiveObjects,
        Event::Lock,
        Event::LockOwner,
        Event::CpuTime,
        Event::Calls,
        Event::MptCpu,
        Event::MptWall,
    ];

    /// The event's name in every output and option (`--event`).
    pub fn name(self) -> &'static str {
        match self {
            Event::Cpu => "cpu",
            Event::Wall => "wall",
            Event::AllocBytes => "alloc_bytes",
            Event::AllocObjects => "alloc_objects",
            Event::LiveBytes => "live_bytes",
            Event::LiveObjects => "live_objects",
            Event::Lock => "lock",
            Event::LockOwner => "lock_owner",
            Event::CpuTime => "cpu_time",
            Event::Calls => "calls",
            Event::MptCpu => "mpt_cpu",
            Event::MptWall => "mpt_wall",
        }
    }

    pub fn unit(self) -> Unit {
        match self {
            Event::Cpu | Event::Wall | Event::MptCpu | Event::MptWall => Unit::Samples,
            Event::AllocBytes | Event::LiveBytes => Unit::Bytes,
            Event::AllocObjects | Event::LiveObjects | Event::Calls => Unit::Count,
            Event::Lock | Event::LockOwner | Event::CpuTime => Unit::Nanoseconds,
        }
    }

    pub fn from_name(name: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|event| event.name() == name)
    }
}

/// The labels of a sample taken inside a traced call (`mpt_cpu`, `mpt_wall`): the traced
/// method, the specification and the value it recorded, as `openprof mpt` prints them.
pub const MPT_METHOD_LABEL: &str = "mpt.method";
pub const MPT_SPEC_LABEL: &str = "mpt.spec";
pub const MPT_VALUE_LABEL: &str = "mpt.value";

/// The label of a sample's thread state (wall samples) or of how a thread waited for a lock.
pub const STATE_LABEL: &str = "state";
/// The label of a lock sample's monitor or blocker class.
pub const LOCK_CLASS_LABEL: &str = "lock_class";

/// How a thread waited for a lock, as the lock events tell it: the `state` label, and the kind
/// of the frame naming the lock's class at the top of the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockWait {
    /// Entering a contended monitor (`synchronized`).
    Blocked,
    /// Parked (`LockSupport.park`: java.util.concurrent's locks, conditions, queues).
    Parked,
}

impl LockWait {
    pub fn name(self) -> &'static str {
        match self {
            LockWait::Blocked => "blocked",
            LockWait::Parked => "parked",
        }
    }

    pub fn from_name(name: &str) -> Option<LockWait> {
        [LockWait::Blocked, LockWait::Parked]
            .into_iter()
            .find(|wait| wait.name() == name)
    }

    /// The frame naming the lock's class, the leaf of a lock sample's stack.
    pub fn class_frame(self, class: &str) -> Frame {
        Frame {
            name: class.to_string(),
            file: None,
            line: None,
            kind: match self {
                LockWait::Blocked => FrameKind::MonitorClass,
                LockWait::Parked => FrameKind::ParkBlocker,
            },
        }
    }

    /// A lock sample's labels: how it waited, and the lock's class when known.
    pub fn labels(self, class: Option<&str>) -> Vec<(String, String)> {
        let mut labels = vec![(STATE_LABEL.to_string(), self.name().to_string())];
        if let Some(class) = class {
            labels.push((LOCK_CLASS_LABEL.to_string(), class.to_string()));
        }
        labels
    }
}

pub type FrameId = u32;
pub type StackId = u32;
pub type ThreadId = u32;

/// A thread of the profiled program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// The id the input gives it (a Java thread id, an HPROF thread serial, an OS thread id).
    pub id: u64,
    pub name: String,
}

/// One measurement: `value` of `event` on a stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub stack: StackId,
    pub event: Event,
    /// The measured amount, in the event's unit.
    pub value: u64,
    /// How many samples or events the value sums (1 for one JFR event, a row's count for an
    /// HPROF table): views weigh by it, or by `value` when asked for totals.
    pub count: u64,
    pub thread: Option<ThreadId>,
    /// Nanoseconds since the profile's start, where the input has times.
    pub time_ns: Option<u64>,
    /// Labels (name, value): an MPT value, a lock's class, a thread state.
    pub labels: Vec<(String, String)>,
}

impl Sample {
    /// `count` samples of `event` on a stack, each of value one (no thread, time or label).
    pub fn counted(stack: StackId, event: Event, count: u64) -> Sample {
        Sample {
            stack,
            event,
            value: count,
            count,
            thread: None,
            time_ns: None,
            labels: Vec::new(),
        }
    }
}

/// What a timed span on a thread's timeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// A method call, from entry to exit.
    Call,
    /// A garbage collection.
    Gc,
    /// Waiting to enter a contended monitor.
    MonitorBlocked,
    /// Waiting in `Object.wait`.
    MonitorWait,
    /// An exception thrown: an instant (start equals end).
    Exception,
}

/// A span of time on a thread's timeline, for the timeline views.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub thread: Option<ThreadId>,
    pub frame: FrameId,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A profile: interned frames and stacks, threads, samples and spans.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Where it was read from, for titles and errors.
    pub source: String,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, FrameId>,
    /// Each stack root first.
    stacks: Vec<Vec<FrameId>>,
    /// Stacks by the hash of their frames (each stack is kept once, in `stacks`).
    stack_ids: HashMap<u64, Vec<StackId>>,
    pub threads: Vec<Thread>,
    pub samples: Vec<Sample>,
    pub spans: Vec<Span>,
    /// The sampling interval in nanoseconds, for sampled events.
    pub period_ns: Option<u64>,
    /// Wall-clock start, nanoseconds since the Unix epoch, where the input has it.
    pub start_epoch_ns: Option<u64>,
    /// How long the recording ran, in nanoseconds, where the input has it.
    pub duration_ns: Option<u64>,
    /// Method parameter tracing's tables, where the input holds them (a trace's traced calls,
    /// an HPROF text profile's MPT record).
    pub mpt: Vec<MptTable>,
    /// Each class's loader (`1: jdk.internal.loader.ClassLoaders$AppClassLoader`, `0:
    /// bootstrap`), by class name, where the input tells it (traces do); a class of one name
    /// defined by several loaders has them all, joined by `, `.
    pub class_loaders: BTreeMap<String, String>,
    /// The sums of every sample's value and count so far: each stays within a u64, so that no
    /// sum a view makes of them can wrap.
    value_sum: u64,
    count_sum: u64,
    /// Whether a sample was cut down to keep those sums within a u64.
    saturated: bool,
}

impl Profile {
    pub fn new(source: impl Into<String>) -> Profile {
        Profile {
            source: source.into(),
            ..Profile::default()
        }
    }

    /// A profile of summed stacks (Java frames, outermost first), each `count` samples of
    /// `event`: what a store that aggregates per stack (ClickHouse's windows) gives back.
    pub fn of_stacks(
        source: impl Into<String>,
        event: Event,
        stacks: impl IntoIterator<Item = (Vec<String>, u64)>,
    ) -> Profile {
        let mut profile = Profile::new(source);
        for (frames, count) in stacks {
            let ids: Vec<FrameId> = frames
                .into_iter()
                .map(|frame| profile.frame_id(Frame::java(frame)))
                .collect();
            let stack = profile.stack_id(&ids);
            profile.add_sample(Sample::counted(stack, event, count));
        }
        profile
    }

    pub fn frame_id(&mut self, frame: Frame) -> FrameId {
        if let Some(id) = self.frame_ids.get(&frame) {
            return *id;
        }
        let id = self.frames.len() as FrameId;
        self.frames.push(frame.clone());
        self.frame_ids.insert(frame, id);
        id
    }

    /// The id of a stack given root first.
    pub fn stack_id(&mut self, frames_root_first: &[FrameId]) -> StackId {
        let hash = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            frames_root_first.hash(&mut hasher);
            hasher.finish()
        };
        let same_hash = self.stack_ids.entry(hash).or_default();
        if let Some(id) = same_hash
            .iter()
            .find(|id| self.stacks[**id as usize] == frames_root_first)
        {
            return *id;
        }
        let id = self.stacks.len() as StackId;
        self.stacks.push(frames_root_first.to_vec());
        same_hash.push(id);
        id
    }

    /// The id of a stack of frames given leaf first (as HPROF and JFR list them).
    pub fn stack_of_frames_leaf_first(
        &mut self,
        frames: impl IntoIterator<Item = Frame>,
    ) -> StackId {
        let mut ids: Vec<FrameId> = frames
            .into_iter()
            .map(|frame| self.frame_id(frame))
            .collect();
        ids.reverse();
        self.stack_id(&ids)
    }

    pub fn thread_id(&mut self, id: u64, name: &str) -> ThreadId {
        if let Some(index) = self.threads.iter().position(|thread| thread.id == id) {
            if self.threads[index].name.is_empty() && !name.is_empty() {
                self.threads[index].name = name.to_string();
            }
            return index as ThreadId;
        }
        self.threads.push(Thread {
            id,
            name: name.to_string(),
        });
        (self.threads.len() - 1) as ThreadId
    }

    /// Records the loader of a class (see `class_loaders`).
    pub fn add_class_loader(&mut self, class: &str, loader: &str) {
        match self.class_loaders.get_mut(class) {
            Some(known) => {
                if !known.split(", ").any(|one| one == loader) {
                    known.push_str(", ");
                    known.push_str(loader);
                }
            }
            None => {
                self.class_loaders
                    .insert(class.to_string(), loader.to_string());
            }
        }
    }

    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// A stack's frames, root first.
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        &self.stacks[id as usize]
    }

    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    pub fn thread(&self, id: ThreadId) -> &Thread {
        &self.threads[id as usize]
    }

    /// Adds a sample. Values and counts that would take the profile's sums past a u64 (only a
    /// crafted or corrupt input has them: 2^64 nanoseconds are 584 years) are held at what
    /// fits, and the profile says so ([`Profile::saturated`]).
    pub fn add_sample(&mut self, mut sample: Sample) {
        let value_room = u64::MAX - self.value_sum;
        let count_room = u64::MAX - self.count_sum;
        if sample.value > value_room || sample.count > count_room {
            sample.value = sample.value.min(value_room);
            sample.count = sample.count.min(count_room);
            self.saturated = true;
        }
        self.value_sum += sample.value;
        self.count_sum += sample.count;
        self.samples.push(sample);
    }

    /// Whether some sample's value or count was held back to keep the sums within a u64.
    pub fn saturated(&self) -> bool {
        self.saturated
    }

    /// The events the profile has samples of, in `Event::ALL`'s order.
    pub fn events(&self) -> Vec<Event> {
        let present: BTreeSet<Event> = self.samples.iter().map(|sample| sample.event).collect();
        present.into_iter().collect()
    }

    /// The sum of an event's values.
    pub fn total(&self, event: Event) -> u64 {
        self.samples
            .iter()
            .filter(|sample| sample.event == event)
            .map(|sample| sample.value)
            .sum()
    }

    /// The event a view shows when none is asked for: the first present, CPU first.
    pub fn default_event(&self) -> Option<Event> {
        self.events().into_iter().next()
    }

    /// What this profile has that `earlier` — the same source read at an earlier moment — did
    /// not: the samples and spans of the time between the two. Values and counts are
    /// subtracted per stack, event, thread and labels (a sample's time is not kept); a span is
    /// this one's when `earlier` has no span equal to it left over.
    pub fn since(&self, earlier: &Profile) -> Profile {
        type Key = (
            Vec<Frame>,
            Event,
            Option<(u64, String)>,
            Vec<(String, String)>,
        );
        let key_of = |profile: &Profile, sample: &Sample| -> Key {
            let frames = profile
                .stack(sample.stack)
                .iter()
                .map(|id| profile.frame(*id).clone())
                .collect();
            let thread = sample.thread.map(|id| {
                let thread = profile.thread(id);
                (thread.id, thread.name.clone())
            });
            (frames, sample.event, thread, sample.labels.clone())
        };
        let mut before: HashMap<Key, (u64, u64)> = HashMap::new();
        for sample in &earlier.samples {
            let sums = before.entry(key_of(earlier, sample)).or_default();
            sums.0 += sample.value;
            sums.1 += sample.count;
        }
        let mut now: Vec<(Key, (u64, u64))> = Vec::new();
        let mut index: HashMap<Key, usize> = HashMap::new();
        for sample in &self.samples {
            let key = key_of(self, sample);
            let at = *index.entry(key.clone()).or_insert_with(|| {
                now.push((key, (0, 0)));
                now.len() - 1
            });
            now[at].1 .0 += sample.value;
            now[at].1 .1 += sample.count;
        }
        let mut period = Profile {
            source: self.source.clone(),
            period_ns: self.period_ns,
            start_epoch_ns: self.start_epoch_ns,
            duration_ns: self.duration_ns,
            ..Profile::default()
        };
        for ((frames, event, thread, labels), (value, count)) in now {
            let (value_before, count_before) = before
                .get(&(frames.clone(), event, thread.clone(), labels.clone()))
                .copied()
                .unwrap_or_default();
            let (value, count) = (
                value.saturating_sub(value_before),
                count.saturating_sub(count_before),
            );
            if value == 0 && count == 0 {
                continue;
            }
            let ids: Vec<FrameId> = frames
                .into_iter()
                .map(|frame| period.frame_id(frame))
                .collect();
            let stack = period.stack_id(&ids);
            let thread = thread.map(|(id, name)| period.thread_id(id, &name));
            period.add_sample(Sample {
                stack,
                event,
                value,
                count,
                thread,
                time_ns: None,
                labels,
            });
        }
        type SpanKey = (Option<(u64, String)>, Frame, SpanKind, u64, u64);
        let span_key = |profile: &Profile, span: &Span| -> SpanKey {
            let thread = span.thread.map(|id| {
                let thread = profile.thread(id);
                (thread.id, thread.name.clone())
            });
            (
                thread,
                profile.frame(span.frame).clone(),
                span.kind,
                span.start_ns,
                span.end_ns,
            )
        };
        let mut spans_before: HashMap<SpanKey, usize> = HashMap::new();
        for span in &earlier.spans {
            *spans_before.entry(span_key(earlier, span)).or_default() += 1;
        }
        for span in &self.spans {
            let key = span_key(self, span);
            match spans_before.get_mut(&key) {
                Some(left) if *left > 0 => *left -= 1,
                _ => {
                    let (thread, frame, kind, start_ns, end_ns) = key;
                    let thread = thread.map(|(id, name)| period.thread_id(id, &name));
                    let frame = period.frame_id(frame);
                    period.spans.push(Span {
                        thread,
                        frame,
                        kind,
                        start_ns,
                        end_ns,
                    });
                }
            }
        }
        period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_that_would_wrap_a_u64_are_held_at_its_largest_and_said() {
        let mut profile = Profile::new("crafted");
        let first = sample(&mut profile, &["main", "a"], u64::MAX, "main");
        let second = sample(&mut profile, &["main", "b"], 5, "main");
        profile.add_sample(first);
        assert!(!profile.saturated());
        profile.add_sample(second);
        assert!(profile.saturated());
        assert_eq!(profile.total(Event::Cpu), u64::MAX);
        // Every view's sums stay within a u64 (a debug build would panic on a wrap).
        let mut folded = Vec::new();
        crate::views::write(
            &profile,
            crate::views::OutputFormat::Collapsed,
            &crate::views::ViewOptions::default(),
            &mut folded,
        )
        .unwrap();
        assert!(String::from_utf8(folded)
            .unwrap()
            .contains(&u64::MAX.to_string()));
    }

    fn sample(profile: &mut Profile, stack: &[&str], value: u64, thread: &str) -> Sample {
        let stack =
            profile.stack_of_frames_leaf_first(stack.iter().rev().map(|name| Frame::java(*name)));
        let thread = Some(profile.thread_id(thread.len() as u64, thread));
        Sample {
            stack,
            event: Event::Cpu,
            value,
            count: value,
            thread,
            time_ns: None,
            labels: Vec::new(),
        }
    }

    #[test]
    fn a_later_reading_less_an_earlier_one_is_the_time_between() {
        let mut earlier = Profile::new("x");
        for (stack, value) in [(&["main", "a"][..], 5), (&["main", "b"][..], 3)] {
            let sample = sample(&mut earlier, stack, value, "main");
            earlier.add_sample(sample);
        }
        let mut later = Profile::new("x");
        // Read again: the same rows, more of a, a new c; b unchanged.
        for (stack, value) in [
            (&["main", "b"][..], 3),
            (&["main", "a"][..], 5),
            (&["main", "a"][..], 4),
            (&["main", "c"][..], 2),
        ] {
            let sample = sample(&mut later, stack, value, "main");
            later.add_sample(sample);
        }
        let period = later.since(&earlier);
        let by_leaf: HashMap<String, u64> = period
            .samples
            .iter()
            .map(|sample| {
                let leaf = *period.stack(sample.stack).last().unwrap();
                (period.frame(leaf).name.clone(), sample.value)
            })
            .collect();
        assert_eq!(by_leaf.len(), 2, "{by_leaf:?}");
        assert_eq!(by_leaf["a"], 4);
        assert_eq!(by_leaf["c"], 2);
        assert_eq!(
            period.thread(period.samples[0].thread.unwrap()).name,
            "main"
        );
        assert!(later.since(&later).samples.is_empty());
    }
}
