//! The signal samples taken out of the ring, decoded, and kept by kind (CPU or wall clock) until
//! the engine of that kind collects them: one ring serves both, and whichever engine drains it
//! first leaves the other's samples here.

use std::sync::Mutex;

use crate::methods::Location;
use crate::profile::SampledFrame;
use crate::ring::{FAILED_WALK_LINENO, NATIVE_PC_LINENO, VIRTUAL_THREAD_LINENO};
use crate::signals::{self, CALL_MASK, CALL_SHIFT, WALL_SAMPLE};
use crate::sync::lock;

/// A sample as it left the ring.
pub struct RawSample {
    pub kernel_id: i32,
    /// AsyncGetCallTrace's failure code when the Java stack could not be walked.
    pub failure: Option<i32>,
    pub frames: Vec<SampledFrame>,
    /// A wall sample's `JavaThread::_thread_state`, 0 when unknown; 0 for CPU samples.
    pub vm_state: i32,
    /// The traced call its thread was in (`traced_calls`), 0 for none.
    pub call: u32,
}

/// What a sample measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cpu,
    Wall,
}

/// Samples drained and not collected yet: CPU, then wall.
struct Pending(Vec<RawSample>, Vec<RawSample>);

// SAFETY: a sample's jmethodIDs and pcs are plain handles and addresses, valid on any thread.
unsafe impl Send for Pending {}

static PENDING: Mutex<Pending> = Mutex::new(Pending(Vec::new(), Vec::new()));

/// Drains the ring and returns the samples of one kind taken so far.
pub fn take(kind: Kind) -> Vec<RawSample> {
    let mut pending = lock(&PENDING);
    if let Some(ring) = signals::ring() {
        let Pending(cpu, wall) = &mut *pending;
        ring.drain(|tag, kernel_id, num_frames, frames| {
            let sample = decode(tag, kernel_id, num_frames, frames);
            if tag & WALL_SAMPLE != 0 {
                wall.push(sample);
            } else {
                cpu.push(sample);
            }
        });
    }
    match kind {
        Kind::Cpu => std::mem::take(&mut pending.0),
        Kind::Wall => std::mem::take(&mut pending.1),
    }
}

fn decode(
    tag: u32,
    kernel_id: i32,
    num_frames: i32,
    frames: &[crate::ring::CallFrame],
) -> RawSample {
    let mut failure = (num_frames <= 0).then_some(num_frames);
    let frames = frames
        .iter()
        .map(|frame| match frame.lineno {
            NATIVE_PC_LINENO => SampledFrame::NativeCode(frame.method_id as usize),
            VIRTUAL_THREAD_LINENO => SampledFrame::VirtualThread,
            FAILED_WALK_LINENO => {
                let code = frame.failure_code().unwrap_or(num_frames);
                failure = Some(code);
                SampledFrame::FailedWalk(code)
            }
            bci if bci >= 0 => SampledFrame::Java(frame.method_id, Location::Bytecode(bci.into())),
            -3 => SampledFrame::Java(frame.method_id, Location::Native),
            _ => SampledFrame::Java(frame.method_id, Location::Unknown),
        })
        .collect();
    RawSample {
        kernel_id,
        failure,
        frames,
        vm_state: match tag & WALL_SAMPLE {
            0 => 0,
            _ => (tag & 0xff) as i32,
        },
        call: (tag & CALL_MASK) >> CALL_SHIFT,
    }
}
