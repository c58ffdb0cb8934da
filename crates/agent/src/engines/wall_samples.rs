//! wall=: every Java thread, running or not, sampled every interval of wall time with what it
//! was doing. Each interval the agent's thread sends the wall-clock signal to a bounded number
//! of Java threads, round robin; the signal handler walks the interrupted thread's stack as a
//! CPU sample's (no safepoint: a running thread is caught where it is) and tags it with the
//! thread's VM state, which the collect turns into running, native, blocked, waiting, parked or
//! sleeping. Owns the WALL SAMPLER record and the WALL SAMPLES table of each dump.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use openprof_format::hprof_text::{CpuTableKind, WallSampler};
use openprof_format::options::Options;

use crate::context::{Context, Report};
use crate::engine::{Dump, Engine, Need};
use crate::engines::cpu_samples::{install_signal_sampler, prepare_walks};
use crate::error::{AgentError, AgentResult};
use crate::jvmti::{JNIEnv, JavaVM};
use crate::output::hprof_date;
use crate::profile::SampledFrame;
use crate::sampled::{self, Kind};
use crate::signals::{self, InstallError};
use crate::sync::lock;

/// At most this many threads are signalled per interval: the cost stays bounded with thousands
/// of threads (mostly idle ones), each of which is then sampled less often.
pub const THREADS_PER_TICK: usize = 16;

pub struct WallSamples {
    interval: Duration,
    /// Where the next round robin starts, as an index into the sorted kernel ids.
    next: AtomicUsize,
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
            interval: Duration::from_millis(interval_ms.into()),
            next: AtomicUsize::new(0),
            skipped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        })
    }

    fn sampler_record(&self) -> WallSampler {
        WallSampler {
            interval_ms: self.interval.as_millis() as u32,
            threads_per_tick: THREADS_PER_TICK as u32,
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
        signals::set_enabled(true);
        Some(format!(
            "sampling every Java thread's stack and state every {} ms of wall time, at most {THREADS_PER_TICK} threads per interval",
            self.interval.as_millis()
        ))
    }

    fn period(&self, _context: &Context) -> Option<Duration> {
        Some(self.interval)
    }

    fn tick(&self, context: &Context, _jni: *mut JNIEnv) {
        let threads: Vec<i32> = lock(&context.threads)
            .live_kernel_ids()
            .into_iter()
            .filter(|kernel_id| !crate::guard::is_agent_kernel_id(*kernel_id))
            .collect();
        let start = self.next.load(Ordering::Relaxed);
        let chosen = round_robin(&threads, start, THREADS_PER_TICK);
        self.next.store(
            (start + chosen.len()) % threads.len().max(1),
            Ordering::Relaxed,
        );
        self.skipped
            .fetch_add((threads.len() - chosen.len()) as u64, Ordering::Relaxed);
        for kernel_id in chosen {
            if !signals::signal_for_wall_sample(kernel_id) {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn collect(&self, context: &Context, report: &mut Report) {
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
        for (sample, serial) in samples.into_iter().zip(serials) {
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
            report.profile.add_wall_sampled(
                context.jvmti,
                thread,
                frames.into_iter(),
                sample.vm_state,
            );
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
            self.interval.as_millis()
        ))
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
}
