//! The Java threads the agent has seen: serial numbers in HPROF's numbering, names and groups,
//! kernel thread ids (to attribute signal samples) and each thread's CPU timer.

use std::collections::HashMap;

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
    timers: HashMap<u32, ThreadTimer>,
    pending: Vec<ThreadEvent>,
    /// Once the VM is dying no new timers are started.
    closed: bool,
    /// Whether THREAD START/END records are queued (HPROF text output).
    records: bool,
    ended: std::collections::HashSet<u32>,
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

    /// Numbers a newly seen thread and queues its THREAD START record.
    pub fn start(&mut self, name: String, group: String, kernel_id: Option<i32>) -> u32 {
        self.last_serial += 1;
        let serial = self.last_serial;
        if let Some(kernel_id) = kernel_id {
            self.serial_by_kernel_id.insert(kernel_id, serial);
        }
        if !self.records {
            return serial;
        }
        self.pending.push(ThreadEvent::Start(ThreadStart {
            object_id: OBJECT_ID_BASE + u64::from(serial - THREAD_SERIAL_START),
            serial,
            name,
            group,
        }));
        serial
    }

    /// Keeps a thread's CPU timer; returns false (dropping the timer) once the VM is dying.
    pub fn attach_timer(&mut self, serial: u32, timer: ThreadTimer) -> bool {
        if self.closed {
            return false;
        }
        self.timers.insert(serial, timer);
        true
    }

    /// Stops the thread's timer and queues its THREAD END record. Its kernel id keeps naming it
    /// until another thread takes the id, so samples still in the ring are attributed.
    pub fn end(&mut self, serial: u32) {
        self.timers.remove(&serial);
        self.ended.insert(serial);
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

    pub fn take_pending(&mut self) -> Vec<ThreadEvent> {
        std::mem::take(&mut self.pending)
    }

    /// Stops every timer and refuses new ones: the VM is dying.
    pub fn close(&mut self) {
        self.closed = true;
        self.timers.clear();
    }
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
        threads.end(main);
        let events = threads.take_pending();
        assert_eq!(events.len(), 3);
        assert_eq!(events[2], ThreadEvent::End(200001));
        match &events[0] {
            ThreadEvent::Start(start) => assert_eq!(start.object_id, 0x5000_0001),
            other => panic!("{other:?}"),
        }
        assert!(threads.take_pending().is_empty());
    }
}
