//! The sample buffer between the SIGPROF handler and the agent's thread: bounded, lock-free and
//! allocated up front, so that the handler neither allocates nor locks (Vyukov's bounded queue,
//! many producers, one consumer). When it is full a sample is dropped and counted.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::jvmti::jmethodID;

/// One frame as AsyncGetCallTrace writes it (HotSpot's `ASGCT_CallFrame`): for a Java frame
/// `lineno` is the bytecode index, for a native method it is -3. Two `lineno` values it never
/// writes mark the handler's own frames: [`NATIVE_PC_LINENO`], [`FAILED_WALK_LINENO`] and
/// [`VIRTUAL_THREAD_LINENO`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallFrame {
    pub lineno: i32,
    pub method_id: jmethodID,
}

/// A frame of native code: `method_id` holds its pc.
pub const NATIVE_PC_LINENO: i32 = i32::MIN;
/// The mark of a failed walk: `method_id` holds AsyncGetCallTrace's failure code.
pub const FAILED_WALK_LINENO: i32 = i32::MIN + 1;
/// The end of a virtual thread's frames on its carrier's stack, where our walk stopped (the
/// rest of its frames are in the heap).
pub const VIRTUAL_THREAD_LINENO: i32 = i32::MIN + 2;

impl CallFrame {
    pub fn native_pc(pc: usize) -> CallFrame {
        CallFrame {
            lineno: NATIVE_PC_LINENO,
            method_id: pc as jmethodID,
        }
    }

    pub fn failed_walk(code: i32) -> CallFrame {
        CallFrame {
            lineno: FAILED_WALK_LINENO,
            method_id: code as isize as jmethodID,
        }
    }

    pub fn virtual_thread() -> CallFrame {
        CallFrame {
            lineno: VIRTUAL_THREAD_LINENO,
            method_id: std::ptr::null_mut(),
        }
    }

    /// The failure code of a failed walk's mark.
    pub fn failure_code(&self) -> Option<i32> {
        (self.lineno == FAILED_WALK_LINENO).then_some(self.method_id as isize as i32)
    }
}

struct Slot {
    sequence: AtomicUsize,
    /// What the sample is: CPU or wall, the thread's state, the traced call it fell in (the
    /// tag's layout: `signals::WALL_SAMPLE` and `signals::CALL_SHIFT`).
    tag: UnsafeCell<u32>,
    thread_id: UnsafeCell<i32>,
    /// Frames written, or AsyncGetCallTrace's error code (zero or negative).
    num_frames: UnsafeCell<i32>,
}

pub struct SampleRing {
    slots: Box<[Slot]>,
    frames: Box<[UnsafeCell<CallFrame>]>,
    depth: usize,
    mask: usize,
    tail: AtomicUsize,
    head: AtomicUsize,
    draining: AtomicBool,
    dropped: AtomicU64,
}

// SAFETY: a slot's cells are written only by the producer that claimed it (by CAS on `tail`) and
// read only by the single consumer after the producer's Release store of `sequence`.
unsafe impl Sync for SampleRing {}
// SAFETY: the ring owns its buffers; jmethodIDs are plain handles.
unsafe impl Send for SampleRing {}

impl SampleRing {
    /// A ring of at least `slots` samples (rounded up to a power of two) of `depth` frames each.
    pub fn new(slots: usize, depth: usize) -> SampleRing {
        let capacity = slots.max(2).next_power_of_two();
        let depth = depth.max(1);
        let empty = CallFrame {
            lineno: 0,
            method_id: std::ptr::null_mut(),
        };
        SampleRing {
            slots: (0..capacity)
                .map(|index| Slot {
                    sequence: AtomicUsize::new(index),
                    tag: UnsafeCell::new(0),
                    thread_id: UnsafeCell::new(0),
                    num_frames: UnsafeCell::new(0),
                })
                .collect(),
            frames: (0..capacity * depth)
                .map(|_| UnsafeCell::new(empty))
                .collect(),
            depth,
            mask: capacity - 1,
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        }
    }

    /// Samples lost to a full ring since the last call.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }

    /// Claims a slot, lets `fill` write up to `depth` frames into it and say (thread id, frames
    /// or error code), and publishes it with `tag`. Async-signal-safe: no allocation, no lock,
    /// no wait. Returns false, counting a drop, when the ring is full.
    pub fn record(&self, tag: u32, fill: impl FnOnce(*mut CallFrame, usize) -> (i32, i32)) -> bool {
        let mut position = self.tail.load(Ordering::Relaxed);
        let slot = loop {
            let slot = &self.slots[position & self.mask];
            let sequence = slot.sequence.load(Ordering::Acquire);
            let lag = sequence as isize - position as isize;
            if lag == 0 {
                match self.tail.compare_exchange_weak(
                    position,
                    position + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break slot,
                    Err(current) => position = current,
                }
            } else if lag < 0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                position = self.tail.load(Ordering::Relaxed);
            }
        };
        let index = position & self.mask;
        let frames = self.frames[index * self.depth].get();
        let (thread_id, num_frames) = fill(frames, self.depth);
        // SAFETY: this producer owns the slot until the Release store below publishes it.
        unsafe {
            *slot.tag.get() = tag;
            *slot.thread_id.get() = thread_id;
            *slot.num_frames.get() = num_frames;
        }
        slot.sequence.store(position + 1, Ordering::Release);
        true
    }

    /// Hands every published sample to `visit` as (tag, thread id, frames or error code, frames)
    /// and frees its slot. One consumer at a time: a second concurrent caller returns at once.
    pub fn drain(&self, mut visit: impl FnMut(u32, i32, i32, &[CallFrame])) -> usize {
        if self.draining.swap(true, Ordering::Acquire) {
            return 0;
        }
        let mut taken = 0;
        let mut position = self.head.load(Ordering::Relaxed);
        loop {
            let index = position & self.mask;
            let slot = &self.slots[index];
            if slot.sequence.load(Ordering::Acquire) != position + 1 {
                break;
            }
            // SAFETY: the Acquire load above saw the producer's Release publish of this slot, and
            // no producer touches it again until we hand it back below.
            let (tag, thread_id, num_frames) = unsafe {
                (
                    *slot.tag.get(),
                    *slot.thread_id.get(),
                    *slot.num_frames.get(),
                )
            };
            let count = (num_frames.max(0) as usize).min(self.depth);
            // SAFETY: as above; the slot's frames are the `depth` cells starting at index*depth.
            let frames = unsafe {
                std::slice::from_raw_parts(
                    self.frames[index * self.depth].get().cast_const(),
                    count,
                )
            };
            visit(tag, thread_id, num_frames, frames);
            slot.sequence
                .store(position + self.mask + 1, Ordering::Release);
            position += 1;
            taken += 1;
        }
        self.head.store(position, Ordering::Relaxed);
        self.draining.store(false, Ordering::Release);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn fill_with(thread_id: i32, frames: i32) -> impl FnOnce(*mut CallFrame, usize) -> (i32, i32) {
        move |buffer, depth| {
            for index in 0..(frames as usize).min(depth) {
                // SAFETY: the ring gave us `depth` writable frames.
                unsafe {
                    *buffer.add(index) = CallFrame {
                        lineno: index as i32,
                        method_id: (thread_id as usize + 1) as jmethodID,
                    }
                };
            }
            (thread_id, frames)
        }
    }

    #[test]
    fn full_ring_drops_and_counts() {
        let ring = SampleRing::new(4, 2);
        for _ in 0..4 {
            assert!(ring.record(0, fill_with(1, 2)));
        }
        assert!(!ring.record(0, fill_with(1, 2)));
        assert_eq!(ring.take_dropped(), 1);
        let mut seen = 0;
        ring.drain(|_, thread, frames, slice| {
            assert_eq!((thread, frames, slice.len()), (1, 2, 2));
            seen += 1;
        });
        assert_eq!(seen, 4);
        assert!(ring.record(0, fill_with(2, -2)));
        ring.drain(|_, _, frames, slice| assert_eq!((frames, slice.len()), (-2, 0)));
    }

    #[test]
    fn many_producers_one_consumer_lose_nothing_that_was_recorded() {
        let ring = Arc::new(SampleRing::new(64, 3));
        let producers: Vec<_> = (0..4)
            .map(|thread| {
                let ring = Arc::clone(&ring);
                std::thread::spawn(move || {
                    (0..20_000)
                        .filter(|_| ring.record(0, fill_with(thread, 3)))
                        .count()
                })
            })
            .collect();
        let mut per_thread = [0usize; 4];
        let mut consumed = 0;
        while producers.iter().any(|p| !p.is_finished()) {
            consumed += ring.drain(|_, thread, frames, slice| {
                assert_eq!(frames, 3);
                assert!(slice
                    .iter()
                    .all(|f| f.method_id as usize == thread as usize + 1));
                per_thread[thread as usize] += 1;
            });
        }
        let recorded: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
        consumed += ring.drain(|_, thread, _, _| per_thread[thread as usize] += 1);
        assert_eq!(consumed, recorded);
        assert_eq!(recorded as u64 + ring.take_dropped(), 80_000);
    }
}
