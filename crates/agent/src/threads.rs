//! The Java threads the agent has seen: serial numbers in HPROF's numbering, names and groups,
//! kernel thread ids (to attribute signal samples) and the CPU timers, by kernel thread id.
//!
//! Started with the JVM, the agent times only Java threads, each from its ThreadStart. Attached
//! to a running JVM, it also times every thread that was running then, before knowing which
//! are Java threads: timers of threads that turn out not to be the VM's are stopped
//! ([`Threads::stop_stranger_timer`]).

use std::collections::HashMap;

use openprof_format::options::ThreadNames;

use openprof_format::hprof_text::{ThreadStart, THREAD_SERIAL_START};

use crate::signals::ThreadTimer;

/// HPROF tags object ids of its text output with this base.
const OBJECT_ID_BASE: u64 = 0x5000_0000;

/// A THREAD START or THREAD END record waiting to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadEvent {
    Start(ThreadStart),
    End(u32),
}

#[derive(Default)]
pub struct Threads {
    last_serial: u32,
    serial_by_kernel_id: HashMap<i32, u32>,
    /// CPU timers by the kernel id of the thread they sample.
    timers: HashMap<i32, ThreadTimer>,
    pending: Vec<ThreadEvent>,
    /// Once the VM is dying no new timers are started.
    closed: bool,
    /// Whether THREAD START/END records are queued (HPROF text output).
    records: bool,
    /// `threads=`: the names of the threads sampled; `None`, all.
    sampled_names: Option<ThreadNames>,
    /// Threads whose names `threads=` leaves out, by serial.
    not_sampled: std::collections::HashSet<u32>,
    ended: std::collections::HashSet<u32>,
    /// The THREAD START records of the threads alive, by serial: a new output file (a
    /// profiling session's) starts with them.
    alive: std::collections::BTreeMap<u32, ThreadStart>,
}

impl Threads {
    /// `records`: queue THREAD START/END records for HPROF text output.
    pub fn new(records: bool) -> Self {
        Threads {
            last_serial: THREAD_SERIAL_START,
            records,
            ..Default::default()
        }
    }

    /// Samples only the threads of these names from now on (`threads=`).
    pub fn sample_only(&mut self, names: Option<ThreadNames>) {
        self.sampled_names = names;
    }

    /// Whether `threads=` lets this thread be sampled.
    pub fn is_sampled(&self, serial: u32) -> bool {
        !self.not_sampled.contains(&serial)
    }

    /// Numbers a newly seen thread and queues its THREAD START record.
    pub fn start(&mut self, name: String, group: String, kernel_id: Option<i32>) -> u32 {
        self.last_serial += 1;
        let serial = self.last_serial;
        if let Some(names) = &self.sampled_names {
            if !names.matches(&name) {
                self.not_sampled.insert(serial);
            }
        }
        if let Some(kernel_id) = kernel_id {
            self.serial_by_kernel_id.insert(kernel_id, serial);
        }
        if !self.records {
            return serial;
        }
        let start = ThreadStart {
            object_id: OBJECT_ID_BASE + u64::from(serial - THREAD_SERIAL_START),
            serial,
            name,
            group,
        };
        self.alive.insert(serial, start.clone());
        self.pending.push(ThreadEvent::Start(start));
        serial
    }

    /// Queues the THREAD START records of every thread alive again, for a new output file
    /// (what was pending goes to the old one first: take it before).
    pub fn restart_records(&mut self) {
        self.pending
            .extend(self.alive.values().cloned().map(ThreadEvent::Start));
    }

    /// Whether a timer may be started for this kernel thread: none runs for it yet and the VM
    /// is not dying. Asked and answered under the same lock as [`Threads::attach_timer`], so a
    /// thread never gets two timers (at attach, its own ThreadStart and the attaching thread may
    /// both try).
    pub fn wants_timer(&self, kernel_id: i32) -> bool {
        !self.closed && !self.timers.contains_key(&kernel_id)
    }

    /// Keeps a thread's CPU timer; returns false (dropping the timer) once the VM is dying.
    pub fn attach_timer(&mut self, kernel_id: i32, timer: ThreadTimer) -> bool {
        if self.closed {
            return false;
        }
        self.timers.insert(kernel_id, timer);
        true
    }

    /// Gives a kernel id to a thread numbered without one (a thread running before the agent
    /// was attached, matched afterwards).
    pub fn set_kernel_id(&mut self, serial: u32, kernel_id: i32) {
        self.serial_by_kernel_id.insert(kernel_id, serial);
    }

    /// Stops the timer of a thread that is no Java thread the agent knows (its samples are not
    /// the VM's); returns whether one was stopped.
    pub fn stop_stranger_timer(&mut self, kernel_id: i32) -> bool {
        !self.serial_by_kernel_id.contains_key(&kernel_id)
            && self.timers.remove(&kernel_id).is_some()
    }

    /// Stops the timers of threads that are no Java thread the agent knows and have ended (a
    /// native thread timed at attach ends without ThreadEnd): their kernel ids may be given to
    /// new threads, which must then get timers of their own.
    pub fn stop_gone_stranger_timers(&mut self, alive: impl Fn(i32) -> bool) {
        let known = &self.serial_by_kernel_id;
        self.timers
            .retain(|kernel_id, _| known.contains_key(kernel_id) || alive(*kernel_id));
    }

    /// How many threads have a CPU timer.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// A thread ends, on itself (`kernel_id` is its own): stops its timer and queues its THREAD
    /// END record. Its kernel id keeps naming it until another thread takes the id, so samples
    /// still in the ring are attributed.
    pub fn end(&mut self, serial: u32, kernel_id: i32) {
        self.timers.remove(&kernel_id);
        self.ended.insert(serial);
        self.alive.remove(&serial);
        if self.records {
            self.pending.push(ThreadEvent::End(serial));
        }
    }

    /// Whether a thread of this serial was started (and has not ended).
    pub fn is_known(&self, serial: u32) -> bool {
        serial > THREAD_SERIAL_START && serial <= self.last_serial && !self.ended.contains(&serial)
    }

    pub fn serial_of_kernel_id(&self, kernel_id: i32) -> Option<u32> {
        self.serial_by_kernel_id.get(&kernel_id).copied()
    }

    /// The serial of a kernel thread whose Java thread has not ended.
    pub fn live_serial_of_kernel_id(&self, kernel_id: i32) -> Option<u32> {
        self.serial_of_kernel_id(kernel_id)
            .filter(|serial| !self.ended.contains(serial))
    }

    /// The kernel ids of the Java threads known, not ended and sampled (`threads=`), in order.
    pub fn live_kernel_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .serial_by_kernel_id
            .iter()
            .filter(|(_, serial)| !self.ended.contains(serial) && self.is_sampled(**serial))
            .map(|(kernel_id, _)| *kernel_id)
            .collect();
        ids.sort_unstable();
        ids
    }

    pub fn take_pending(&mut self) -> Vec<ThreadEvent> {
        std::mem::take(&mut self.pending)
    }

    /// Stops every CPU timer (a profiling session's stop); new ones may start later.
    pub fn stop_timers(&mut self) {
        self.timers.clear();
    }

    /// Stops every timer and refuses new ones: the VM is dying.
    pub fn close(&mut self) {
        self.closed = true;
        self.timers.clear();
    }
}

/// Which kernel thread each Java thread is, from CPU times on one clock: `java[i]` is the CPU
/// time JVMTI gave for Java thread `i`, read between `before` and `after` of each kernel thread
/// `(id, before, after)`. A Java thread is matched when exactly one kernel thread's bracket
/// holds its time and that bracket holds no other Java thread's time; anything ambiguous stays
/// unmatched rather than guessed.
pub fn match_by_cpu_time(java: &[Option<u64>], tasks: &[(i32, u64, u64)]) -> Vec<Option<i32>> {
    let holds = |task: &(i32, u64, u64), time: u64| task.1 <= time && time <= task.2;
    java.iter()
        .map(|time| {
            let time = (*time)?;
            let mut candidates = tasks.iter().filter(|task| holds(task, time));
            let task = candidates.next()?;
            if candidates.next().is_some() {
                return None;
            }
            let claimed = java
                .iter()
                .flatten()
                .filter(|other| holds(task, **other))
                .count();
            (claimed == 1).then_some(task.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_count_from_hprofs_start() {
        let mut threads = Threads::new(true);
        let main = threads.start("main".into(), "main".into(), Some(7));
        let worker = threads.start("worker".into(), "main".into(), None);
        assert_eq!((main, worker), (200001, 200002));
        assert_eq!(threads.serial_of_kernel_id(7), Some(200001));
        threads.end(main, 7);
        let events = threads.take_pending();
        assert_eq!(events.len(), 3);
        assert_eq!(events[2], ThreadEvent::End(200001));
        match &events[0] {
            ThreadEvent::Start(start) => assert_eq!(start.object_id, 0x5000_0001),
            other => panic!("{other:?}"),
        }
        assert!(threads.take_pending().is_empty());
    }

    #[test]
    fn java_threads_match_the_kernel_thread_whose_cpu_time_brackets_theirs() {
        let tasks = [
            (100, 5_000, 5_000),         // idle: its time stands still
            (101, 90_000, 91_000),       // busy
            (102, 7_000, 7_000),         // idle
            (103, 90_500, 92_000),       // busy, overlapping 101
            (104, 1_000_000, 1_000_000), // not a Java thread
        ];
        let java = [Some(7_000), Some(5_000), Some(90_700), None, Some(6_000)];
        assert_eq!(
            match_by_cpu_time(&java, &tasks),
            // 90_700 is in both busy brackets: left unmatched, as are unknown times.
            vec![Some(102), Some(100), None, None, None]
        );
        // Two Java threads in one bracket: neither is matched.
        let java = [Some(90_100), Some(90_200)];
        assert_eq!(match_by_cpu_time(&java, &tasks[1..2]), vec![None, None]);
    }

    #[test]
    fn threads_timed_at_attach_are_matched_or_stopped() {
        let mut threads = Threads::new(false);
        let main = threads.start("main".into(), "main".into(), None);
        assert!(threads.wants_timer(11));
        // A POSIX timer on our own clock stands in for any timer: only its bookkeeping matters.
        let timer = crate::signals::ThreadTimer::start(
            crate::signals::CpuClock::PosixCpuTimer,
            1000,
            crate::signals::current_thread_id(),
        )
        .unwrap();
        assert!(threads.attach_timer(11, timer));
        assert!(!threads.wants_timer(11), "one timer per thread");
        threads.set_kernel_id(main, 11);
        assert_eq!(threads.serial_of_kernel_id(11), Some(main));
        assert!(
            !threads.stop_stranger_timer(11),
            "a Java thread keeps its timer"
        );
        assert_eq!(threads.timer_count(), 1);
        let stranger = crate::signals::ThreadTimer::start(
            crate::signals::CpuClock::PosixCpuTimer,
            1000,
            crate::signals::current_thread_id(),
        )
        .unwrap();
        assert!(threads.attach_timer(12, stranger));
        assert!(
            threads.stop_stranger_timer(12),
            "a thread no Java thread matched"
        );
        for kernel_id in [13, 14] {
            let timer = crate::signals::ThreadTimer::start(
                crate::signals::CpuClock::PosixCpuTimer,
                1000,
                crate::signals::current_thread_id(),
            )
            .unwrap();
            threads.attach_timer(kernel_id, timer);
        }
        // 11 is a Java thread's: kept whatever `alive` says; 13 lives on, 14 is gone.
        threads.stop_gone_stranger_timers(|kernel_id| kernel_id == 13);
        assert!(!threads.wants_timer(11) && !threads.wants_timer(13));
        assert!(threads.wants_timer(14));
        assert!(threads.stop_stranger_timer(13));
        threads.end(main, 11);
        assert_eq!(threads.timer_count(), 0);
        assert!(threads.wants_timer(11));
        threads.close();
        assert!(!threads.wants_timer(12), "none once the VM is dying");
    }
}
