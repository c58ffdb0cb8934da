//! wall=: every Java thread, running or not, sampled every interval of wall time with what it
//! was doing. Each interval the agent's thread sends the wall-clock signal to a bounded number
//! of Java threads; the signal handler walks the interrupted thread's stack as a CPU sample's
//! (no safepoint: a running thread is caught where it is) and tags it with the thread's VM
//! state, which the collect turns into running, native, blocked, waiting, parked or sleeping.
//!
//! With more threads than the bound, the threads last seen running (or in native code) are
//! sampled every interval, up to half the bound, and the others take turns, round robin, in
//! the rest. A sample counts for the wall time (in intervals) since its thread's previous one,
//! so the shares stay those of wall time whichever threads were picked, while the busy threads,
//! whose stacks change, get the samples. Owns the WALL SAMPLER record and the WALL SAMPLES table of a dump.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use openprof_format::hprof_text::{CpuTableKind, WallSampler};
use openprof_format::options::Options;

use crate::context::{Context, Report};
use crate::engine::{Dump, Engine, Need};
use crate::engines::cpu_samples::{install_signal_sampler, prepare_walks};
use crate::engines::virtual_parks;
use crate::error::{AgentError, AgentResult};
use crate::jvmti::{JNIEnv, JavaVM};
use crate::output::hprof_date;
use crate::profile::SampledFrame;
use crate::sampled::{self, Kind};
use crate::signals::{self, InstallError, WallSignal};
use crate::sync::lock;

/// At most this many threads are signalled per interval: the cost stays bounded with thousands
/// of threads (mostly idle ones), each of which is then sampled less often.
pub const THREADS_PER_TICK: usize = 16;

/// How long a signal sent to a thread may stay unhandled before the agent's thread takes it
/// for lost and sends another: a runnable thread waits for a CPU far less, even on a busy
/// machine.
const PENDING_PATIENCE: Duration = Duration::from_secs(2);

/// Which threads were sampled when, and what each was last seen doing.
#[derive(Default)]
struct Turns {
    /// Intervals so far.
    tick: u64,
    /// Where the next round robin of the other threads starts.
    next: usize,
    /// When each thread was last signalled (nanoseconds of a monotonic clock), and the wall
    /// time since then not yet counted in whole intervals, by kernel id.
    last_signalled: HashMap<i32, (u64, u64)>,
    /// The intervals each signalled sample stands for, oldest first, by kernel id: the collect
    /// takes them in the order the samples arrive.
    weights: HashMap<i32, VecDeque<u64>>,
    /// Threads whose last sample found them running or in native code.
    busy: HashSet<i32>,
    /// The interval each thread was last sent a signal in, by kernel id.
    sent_at: HashMap<i32, u64>,
}

impl Turns {
    /// The threads of this interval (it is `now` by a monotonic clock, in nanoseconds), each
    /// with the intervals of `interval_ns` its sample will stand for: the wall time since the
    /// thread was last signalled, not the ticks. On a busy machine the agent's thread ticks
    /// less often while the application's threads run than while they sleep, and counting
    /// ticks gave sleep more weight than it had.
    fn choose(
        &mut self,
        threads: &[i32],
        bound: usize,
        now: u64,
        interval_ns: u64,
    ) -> Vec<(i32, u64)> {
        self.tick += 1;
        let busy: Vec<i32> = threads
            .iter()
            .copied()
            .filter(|id| self.busy.contains(id))
            .collect();
        let idle: Vec<i32> = threads
            .iter()
            .copied()
            .filter(|id| !self.busy.contains(id))
            .collect();
        // Busy threads first, up to half the bound (in turns too when there are more).
        let busy_share = if idle.is_empty() { bound } else { bound / 2 };
        let mut chosen = round_robin(&busy, self.tick as usize * busy_share, busy_share);
        let rest = bound - chosen.len();
        let turn = round_robin(&idle, self.next, rest);
        self.next = (self.next + turn.len()) % idle.len().max(1);
        chosen.extend(turn);
        let interval_ns = interval_ns.max(1);
        chosen
            .into_iter()
            .map(|id| {
                let intervals = match self.last_signalled.get(&id) {
                    None => {
                        self.last_signalled.insert(id, (now, 0));
                        1
                    }
                    Some(&(last, carried)) => {
                        let elapsed = now.saturating_sub(last) + carried;
                        self.last_signalled.insert(id, (now, elapsed % interval_ns));
                        elapsed / interval_ns
                    }
                };
                (id, intervals)
            })
            .filter(|(_, intervals)| *intervals > 0)
            .collect()
    }

    /// Forgets threads that are gone.
    fn keep_only(&mut self, threads: &[i32]) {
        let alive: HashSet<i32> = threads.iter().copied().collect();
        for gone in self.sent_at.keys().filter(|id| !alive.contains(id)) {
            signals::forget_wall_signal(*gone);
        }
        self.sent_at.retain(|id, _| alive.contains(id));
        self.last_signalled.retain(|id, _| alive.contains(id));
        self.weights.retain(|id, _| alive.contains(id));
        self.busy.retain(|id| alive.contains(id));
    }
}

pub struct WallSamples {
    /// `wall=`: milliseconds between intervals (a profiling session may change it).
    interval_ms: AtomicU32,
    /// Whether the agent's thread signals threads: off between profiling sessions.
    recording: AtomicBool,
    turns: Mutex<Turns>,
    /// Intervals since the last dump.
    intervals: AtomicU64,
    /// Threads signalled since the last dump.
    sampled: AtomicU64,
    /// Thread-intervals not sampled because of the bound, since the last dump.
    skipped: AtomicU64,
    /// Signals the kernel refused (the thread had ended), since the last dump.
    lost: AtomicU64,
}

impl WallSamples {
    pub fn new(vm: *mut JavaVM, options: &Options) -> AgentResult<WallSamples> {
        let interval_ms = options.wall_ms.unwrap_or(10);
        match install_signal_sampler(vm, options) {
            Ok(()) => {}
            Err(InstallError::NoAsyncGetCallTrace) => {
                return Err(AgentError::Refused(
                    "wall= needs AsyncGetCallTrace, which this JVM does not have".into(),
                ))
            }
            Err(InstallError::Sigaction(error)) => {
                return Err(AgentError::Refused(format!(
                    "can't install the SIGPROF handler: {error}"
                )))
            }
        }
        if signals::wall_signal_taken() {
            return Err(AgentError::Refused(
                "wall= needs SIGVTALRM, which already has a handler in this JVM (another profiler?)"
                    .into(),
            ));
        }
        signals::install_wall_signal().map_err(|error| {
            AgentError::Refused(format!("can't install the SIGVTALRM handler: {error}"))
        })?;
        Ok(WallSamples {
            interval_ms: AtomicU32::new(interval_ms),
            recording: AtomicBool::new(true),
            turns: Mutex::new(Turns::default()),
            intervals: AtomicU64::new(0),
            sampled: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        })
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.load(Ordering::Relaxed).into())
    }

    /// Starts counting the time of virtual threads off their carriers (JDK 21 and later): what
    /// the start line says of them.
    fn count_virtual_threads(&self, context: &Context, jni: *mut JNIEnv) -> &'static str {
        let interval = self.interval().as_nanos() as u64;
        let started = virtual_parks::start(context.jvmti, jni, interval, context.options.depth);
        match started {
            Ok(true) => ", and virtual threads' time off their carriers",
            Ok(false) => "",
            Err(why) => {
                eprintln!("openprof: wall= does not count parked virtual threads: {why}");
                ""
            }
        }
    }

    fn sampler_record(&self) -> WallSampler {
        WallSampler {
            interval_ms: self.interval_ms.load(Ordering::Relaxed),
            threads_per_tick: THREADS_PER_TICK as u32,
            intervals: self.intervals.swap(0, Ordering::Relaxed),
            sampled: self.sampled.swap(0, Ordering::Relaxed),
            skipped: self.skipped.swap(0, Ordering::Relaxed),
            lost: self.lost.swap(0, Ordering::Relaxed),
        }
    }
}

/// The threads of one interval: up to `bound` of `threads`, starting at `start` and wrapping.
fn round_robin(threads: &[i32], start: usize, bound: usize) -> Vec<i32> {
    if threads.is_empty() {
        return Vec::new();
    }
    (0..bound.min(threads.len()))
        .map(|offset| threads[(start + offset) % threads.len()])
        .collect()
}

impl Engine for WallSamples {
    fn needs(_options: &Options) -> Vec<Need> {
        // The walk's needs are the agent's core needs, as for cpu=samples.
        Vec::new()
    }

    fn start(&self, context: &Context, jni: *mut JNIEnv) -> Option<String> {
        prepare_walks(context, jni, true);
        signals::set_enabled(signals::SampleKind::Wall, true);
        let virtual_threads = self.count_virtual_threads(context, jni);
        Some(format!(
            "sampling every Java thread's stack and state every {} ms of wall time, at most {THREADS_PER_TICK} threads per interval{virtual_threads}",
            self.interval().as_millis()
        ))
    }

    fn period(&self, _context: &Context) -> Option<Duration> {
        self.recording
            .load(Ordering::Acquire)
            .then(|| self.interval())
    }

    fn tick(&self, context: &Context, _jni: *mut JNIEnv) {
        if !self.recording.load(Ordering::Acquire) {
            return;
        }
        let threads: Vec<i32> = lock(&context.threads)
            .live_kernel_ids()
            .into_iter()
            .filter(|kernel_id| !crate::guard::is_agent_kernel_id(*kernel_id))
            .collect();
        let mut turns = lock(&self.turns);
        if turns.tick % 100 == 0 {
            turns.keep_only(&threads);
        }
        let interval_ns = u64::from(self.interval_ms.load(Ordering::Relaxed)) * 1_000_000;
        let chosen = turns.choose(
            &threads,
            THREADS_PER_TICK,
            signals::monotonic_nanos(),
            interval_ns,
        );
        self.intervals.fetch_add(1, Ordering::Relaxed);
        self.skipped
            .fetch_add((threads.len() - chosen.len()) as u64, Ordering::Relaxed);
        let stale_after = (PENDING_PATIENCE.as_millis() as u64
            / u64::from(self.interval_ms.load(Ordering::Relaxed)).max(1))
        .max(1);
        for (kernel_id, intervals) in chosen {
            let tick = turns.tick;
            let sent_at = turns.sent_at.get(&kernel_id).copied().unwrap_or(tick);
            if tick - sent_at > stale_after {
                signals::forget_wall_signal(kernel_id);
            }
            match signals::signal_for_wall_sample(kernel_id) {
                WallSignal::Sent => {
                    self.sampled.fetch_add(1, Ordering::Relaxed);
                    turns.sent_at.insert(kernel_id, tick);
                    turns
                        .weights
                        .entry(kernel_id)
                        .or_default()
                        .push_back(intervals);
                }
                WallSignal::StillPending => {
                    // A signal marked pending that this session never sent (sent before a
                    // pause, its mark left when it was lost) is timed from now, so that it is
                    // forgotten once stale like any other: without a time it never was, and
                    // the thread got no wall sample for the whole session.
                    turns.sent_at.entry(kernel_id).or_insert(tick);
                    // The sample still to come stands for these intervals too.
                    let weights = turns.weights.entry(kernel_id).or_default();
                    match weights.back_mut() {
                        Some(last) => *last += intervals,
                        None => weights.push_back(intervals),
                    }
                }
                WallSignal::Gone => {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn collect(&self, context: &Context, report: &mut Report) {
        for parked in virtual_parks::take() {
            report.profile.add_virtual_thread_off_carrier(
                context.jvmti,
                parked.frames.into_iter(),
                parked.intervals,
            );
        }
        let samples = sampled::take(Kind::Wall);
        if samples.is_empty() {
            return;
        }
        let serials: Vec<Option<u32>> = {
            let threads = lock(&context.threads);
            samples
                .iter()
                .map(|sample| threads.serial_of_kernel_id(sample.kernel_id))
                .collect()
        };
        let mut turns = lock(&self.turns);
        for (sample, serial) in samples.into_iter().zip(serials) {
            let intervals = turns
                .weights
                .get_mut(&sample.kernel_id)
                .and_then(VecDeque::pop_front)
                .unwrap_or(1);
            // Only Java threads are signalled; a sample of another thread is a reused id.
            let Some(serial) = serial else { continue };
            let thread = context.options.thread.then_some(serial);
            let frames: Vec<SampledFrame> = match sample.failure {
                Some(code) => sample
                    .frames
                    .into_iter()
                    .filter(|frame| matches!(frame, SampledFrame::NativeCode(_)))
                    .chain([SampledFrame::FailedWalk(code)])
                    .collect(),
                None => sample.frames,
            };
            let state = report.profile.add_wall_sampled(
                context.jvmti,
                thread,
                frames.into_iter(),
                sample.vm_state,
                intervals,
                sample.call,
            );
            if matches!(state, "running" | "native") {
                turns.busy.insert(sample.kernel_id);
            } else {
                turns.busy.remove(&sample.kernel_id);
            }
        }
    }

    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let wall =
            report
                .profile
                .take_dump(CpuTableKind::Wall, hprof_date(), context.options.cutoff);
        let sampler = self.sampler_record();
        if let Err(error) = report.output.wall_dump(&wall, &sampler) {
            report.complain(error);
        }
    }

    fn describe(&self, _context: &Context) -> Option<String> {
        Some(format!(
            "wall-clock samples every {} ms, at most {THREADS_PER_TICK} threads per interval",
            self.interval().as_millis()
        ))
    }

    fn in_sessions(&self) -> bool {
        true
    }

    fn pause(&self, _context: &Context) {
        // The agent's thread sends no more signals; one already sent is ignored.
        self.recording.store(false, Ordering::Release);
        signals::set_enabled(signals::SampleKind::Wall, false);
        virtual_parks::pause();
    }

    fn resume(
        &self,
        context: &Context,
        jni: *mut JNIEnv,
        options: &Options,
    ) -> AgentResult<Option<String>> {
        self.interval_ms
            .store(options.wall_ms.unwrap_or(10), Ordering::Relaxed);
        *lock(&self.turns) = Turns::default();
        self.sampler_record();
        self.recording.store(true, Ordering::Release);
        signals::set_enabled(signals::SampleKind::Wall, true);
        self.count_virtual_threads(context, jni);
        Ok(self.describe(context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_covers_every_thread_in_turn() {
        let threads: Vec<i32> = (100..140).collect();
        let first = round_robin(&threads, 0, 16);
        let second = round_robin(&threads, 16, 16);
        let third = round_robin(&threads, 32, 16);
        assert_eq!(first.len(), 16);
        assert_eq!(third.len(), 16);
        assert_eq!(third[..8], threads[32..40]);
        assert_eq!(third[8..], threads[..8]);
        let mut seen: Vec<i32> = first.into_iter().chain(second).chain(third).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 40);
        assert_eq!(round_robin(&threads[..3], 2, 16), vec![102, 100, 101]);
        assert!(round_robin(&[], 0, 16).is_empty());
    }

    #[test]
    fn busy_threads_come_every_interval_and_samples_stand_for_the_intervals_between() {
        let threads: Vec<i32> = (1..=100).collect();
        let mut turns = Turns::default();
        turns.busy.extend([7, 8]);
        let mut intervals_of: HashMap<i32, u64> = HashMap::new();
        for _ in 0..1000 {
            let chosen = turns.choose(&threads, 16, turns.tick * 1000 + 1000, 1000);
            assert_eq!(chosen.len(), 16);
            assert!(chosen.iter().any(|(id, _)| *id == 7) && chosen.iter().any(|(id, _)| *id == 8));
            for (id, intervals) in chosen {
                *intervals_of.entry(id).or_default() += intervals;
            }
        }
        // Every thread's samples add up to (about) the 1000 intervals, busy or not.
        for id in &threads {
            let seen = intervals_of[id];
            assert!((950..=1000).contains(&seen), "thread {id}: {seen}");
        }
    }
}
