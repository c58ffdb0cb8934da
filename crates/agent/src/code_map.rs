//! Where compiled Java methods are in memory, as JVMTI's CompiledMethodLoad and
//! CompiledMethodUnload report them, in a table the SIGPROF handler can read: it says which
//! method a pc is in when AsyncGetCallTrace cannot walk from it (a method's entry before its
//! frame is complete). Entries are appended under a lock by the JVM's threads and read without
//! one: a reader sees an entry only once its count is published, and an unloaded entry is
//! marked dead, never removed, so nothing a reader holds is ever freed or reused. A lookup
//! binary-searches an index of the entries sorted by address, rebuilt every few hundred new
//! entries, and scans only the entries appended since. Beside them: where the interpreter's
//! code is, and which jmethodID each of the VM's Method structures is, so that a sample taken
//! in the interpreter's entry of a method can name that method.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::jvmti::jmethodID;
use crate::sync::lock;

/// Compiled methods remembered at most (a few MiB); beyond, new code is not mapped (its failed
/// walks stay failures).
const CAPACITY: usize = 1 << 18;
/// How many of the newest entries a lookup scans: the bound on the handler's time.
const SCAN_LIMIT: usize = 1 << 16;
/// New entries after which the sorted index is rebuilt: a lookup scans at most these (the
/// stack walker of our own looks up every frame of every sample). A rebuild merges them into
/// the sorted entries, in about linear time, so it may come often.
const REBUILD_EVERY: usize = 16;

struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    method: AtomicUsize,
    live: AtomicBool,
    /// The code's frames as the stack walker of our own reads them (null: not known).
    frames: AtomicPtr<CompiledFrames>,
}

/// What the stack walker of our own (`vm_walker.rs`) knows of one compiled method's code:
/// its frame's size and the inlined Java frames at each pc that has debug information, from
/// JVMTI's CompiledMethodLoad record. Built outside the handler and never freed.
#[derive(Debug)]
pub struct CompiledFrames {
    /// The method compiled (for a native method's wrapper, the native method).
    pub method: jmethodID,
    /// Whether that method is native (the code is its wrapper).
    pub native: bool,
    /// The size of the method's instructions; after them, up to `code_size`, are its stubs
    /// (the deoptimisation handler, whose address replaces a return address into a method
    /// being deoptimised, among them).
    pub instructions_size: u32,
    pub code_size: u32,
    /// The frame's size in words, the return address included.
    pub frame_words: usize,
    /// From this offset on the frame is built; before it the return address is on top.
    pub frame_complete: Option<u32>,
    /// Offsets from the code's start of the pcs with debug information, ascending.
    pub pc_offsets: Box<[u32]>,
    /// Where each pc's frames start in `scopes` (one more entry than `pc_offsets`).
    pub scope_starts: Box<[u32]>,
    /// The inlined frames of each pc, innermost first: (method, bytecode index).
    pub scopes: Box<[(jmethodID, i32)]>,
}

impl CompiledFrames {
    /// The inlined frames (innermost first) at `offset` in the code. HotSpot writes a debug
    /// record at the end of each run of instructions of one inlined scope, and leaves out the
    /// instructions the compiler made up (spills, jumps, the unrolled copies of a loop's body),
    /// which then fall to whichever record follows them, often another inlined method's: the
    /// accuracy referee found a delay's loop inlined into Rhino's `ScriptRuntime.add` credited
    /// to the `wrapNumber` after it. So an interrupted pc belongs to the code that follows the
    /// last record at or before it, which the referee showed right (docs/decisions.md, "The
    /// inlined scope of a pc"); after the method's entry record, to the body's next record;
    /// before the first record, to the first. A call is never made up: a return address
    /// (`returned_to`) has its own record, or (a call into the VM without one, as for
    /// `System.nanoTime`) the next record, which holds the call's scope.
    pub fn scopes_at(&self, offset: u32, returned_to: bool) -> &[(jmethodID, i32)] {
        let after = self.pc_offsets.partition_point(|&pc| pc <= offset);
        let next = || self.scopes_of(after.min(self.pc_offsets.len().saturating_sub(1)));
        let Some(before) = after.checked_sub(1) else {
            return next();
        };
        if returned_to {
            return if self.pc_offsets[before] == offset {
                self.scopes_of(before)
            } else {
                next()
            };
        }
        let last = self.scopes_of(before);
        // The method's entry record (its bytecode index -1: before any bytecode ran) describes
        // the entry alone, which ends at its pc; the code from there is the body's.
        match last.first() {
            Some(&(_, ENTRY_BCI)) if after < self.pc_offsets.len() => next(),
            _ => last,
        }
    }

    fn scopes_of(&self, index: usize) -> &[(jmethodID, i32)] {
        let (Some(&start), Some(&end)) = (
            self.scope_starts.get(index),
            self.scope_starts.get(index + 1),
        ) else {
            return &[];
        };
        self.scopes.get(start as usize..end as usize).unwrap_or(&[])
    }

    /// The memory this holds, counted against [`MAX_FRAMES_BYTES`].
    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.pc_offsets.len() * 4
            + self.scope_starts.len() * 4
            + self.scopes.len() * std::mem::size_of::<(jmethodID, i32)>()
    }
}

/// The bytecode index of a compiled method's entry record (HotSpot's `InvocationEntryBci`).
const ENTRY_BCI: i32 = -1;

/// The most memory kept for compiled methods' frames (never freed, since a handler may still
/// read them); past it new code is walked by AsyncGetCallTrace alone.
const MAX_FRAMES_BYTES: usize = 256 << 20;
static FRAMES_BYTES: AtomicUsize = AtomicUsize::new(0);

struct CodeMap {
    entries: Box<[Entry]>,
    count: AtomicUsize,
    /// The lowest start and highest end of all code mapped: a pc outside is in no method, which
    /// a lookup tells without a scan (stack scans look up many words that are no code).
    lowest: AtomicUsize,
    highest: AtomicUsize,
    index: SortedIndex,
    append: Mutex<()>,
}

/// The live entries' numbers sorted by start address, in two buffers: readers use the active
/// one while the writer rebuilds the other. A reader announces itself in `readers` before it
/// uses a buffer and checks the buffer is still active after; the writer rebuilds a buffer only
/// once no reader is announced on it. Readers are signal handlers, done in microseconds.
struct SortedIndex {
    buffers: [Box<[AtomicU32]>; 2],
    lengths: [AtomicUsize; 2],
    /// Entries below this number are in the buffer (when live at its build).
    covers: [AtomicUsize; 2],
    readers: [AtomicUsize; 2],
    active: AtomicUsize,
}

impl SortedIndex {
    fn new() -> SortedIndex {
        let buffer = || (0..CAPACITY).map(|_| AtomicU32::new(0)).collect();
        SortedIndex {
            buffers: [buffer(), buffer()],
            lengths: [AtomicUsize::new(0), AtomicUsize::new(0)],
            covers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            active: AtomicUsize::new(0),
        }
    }

    /// Runs `read` on the active buffer (its sorted entry numbers, and how many entries it
    /// covers). Async-signal-safe.
    fn read<R>(&self, read: impl FnOnce(&[AtomicU32], usize) -> R) -> R {
        loop {
            let buffer = self.active.load(Ordering::SeqCst) & 1;
            self.readers[buffer].fetch_add(1, Ordering::SeqCst);
            if self.active.load(Ordering::SeqCst) & 1 == buffer {
                let length = self.lengths[buffer].load(Ordering::Acquire);
                let covers = self.covers[buffer].load(Ordering::Acquire);
                let sorted = self.buffers[buffer].get(..length).unwrap_or(&[]);
                let result = read(sorted, covers);
                self.readers[buffer].fetch_sub(1, Ordering::SeqCst);
                return result;
            }
            // The writer switched buffers meanwhile: the announcement was on the wrong one.
            self.readers[buffer].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Rebuilds the inactive buffer from the first `count` entries and makes it the active one.
    /// Called with the map's append lock held.
    fn rebuild(&self, entries: &[Entry], count: usize) {
        let buffer = 1 - (self.active.load(Ordering::SeqCst) & 1);
        while self.readers[buffer].load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        // The active buffer's entries (sorted), then those appended since: a stable sort
        // finds the sorted run and merges the few others into it.
        let active = 1 - buffer;
        let sorted_before = self.lengths[active].load(Ordering::Acquire);
        let covered = self.covers[active].load(Ordering::Acquire).min(count);
        let live_entry = |number: usize| {
            entries
                .get(number)
                .filter(|entry| entry.live.load(Ordering::Relaxed))
                .map(|entry| (entry.start.load(Ordering::Relaxed), number as u32))
        };
        let mut live: Vec<(usize, u32)> = self.buffers[active][..sorted_before]
            .iter()
            .filter_map(|slot| live_entry(slot.load(Ordering::Relaxed) as usize))
            .chain((covered..count).filter_map(live_entry))
            .collect();
        live.sort();
        for (slot, (_, number)) in self.buffers[buffer].iter().zip(&live) {
            slot.store(*number, Ordering::Relaxed);
        }
        self.lengths[buffer].store(live.len(), Ordering::Release);
        self.covers[buffer].store(count, Ordering::Release);
        self.active.store(buffer, Ordering::SeqCst);
    }
}

impl Entry {
    /// Whether the entry is live and its code holds `pc`.
    fn holds(&self, pc: usize) -> bool {
        let live = self.live.load(Ordering::Acquire);
        let start = self.start.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        live && start <= pc && pc < end
    }
}

static MAP: OnceLock<CodeMap> = OnceLock::new();

/// Allocates the tables (at start-up, before any code is reported).
pub fn init() {
    METHODS.get_or_init(|| MethodIndex {
        keys: (0..METHOD_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
        values: (0..METHOD_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
        bytecodes: (0..METHOD_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
        bytecodes_size: (0..METHOD_SLOTS).map(|_| AtomicU32::new(0)).collect(),
    });
    MAP.get_or_init(|| CodeMap {
        entries: (0..CAPACITY)
            .map(|_| Entry {
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                method: AtomicUsize::new(0),
                live: AtomicBool::new(false),
                frames: AtomicPtr::new(std::ptr::null_mut()),
            })
            .collect(),
        count: AtomicUsize::new(0),
        lowest: AtomicUsize::new(usize::MAX),
        highest: AtomicUsize::new(0),
        index: SortedIndex::new(),
        append: Mutex::new(()),
    });
}

/// A method was compiled to `size` bytes at `start`; `frames`, when known, describe its frames.
pub fn loaded(method: jmethodID, start: usize, size: usize, frames: Option<CompiledFrames>) {
    let Some(map) = MAP.get() else { return };
    let frames = frames
        .filter(|frames| {
            let bytes = frames.bytes();
            FRAMES_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes <= MAX_FRAMES_BYTES
        })
        .map_or(std::ptr::null_mut(), |frames| {
            Box::into_raw(Box::new(frames))
        });
    let _append = lock(&map.append);
    let index = map.count.load(Ordering::Relaxed);
    let Some(entry) = map.entries.get(index) else {
        return;
    };
    // Live code never overlaps: whatever the map still holds here was freed, its unload
    // unreported or reported under another id (a method made obsolete by a redefinition is
    // unloaded under a jmethodID of its own, not the one it was loaded under).
    retire_overlapping(map, index, start, start.saturating_add(size));
    entry.start.store(start, Ordering::Relaxed);
    entry
        .end
        .store(start.saturating_add(size), Ordering::Relaxed);
    entry.method.store(method as usize, Ordering::Relaxed);
    entry.live.store(true, Ordering::Relaxed);
    // Never freed: an entry is written once, and readers may hold what it points to.
    entry.frames.store(frames, Ordering::Relaxed);
    map.lowest.fetch_min(start, Ordering::Relaxed);
    map.highest
        .fetch_max(start.saturating_add(size), Ordering::Relaxed);
    map.count.store(index + 1, Ordering::Release);
    let indexed = map.index.read(|_, covers| covers);
    if index + 1 >= indexed + REBUILD_EVERY {
        map.index.rebuild(&map.entries, index + 1);
    }
}

/// Marks dead the live entries of the first `count` whose code overlaps `start..end`. Called
/// with the map's append lock held; looks only where such entries can be: among those appended
/// since the index was built, and in the index just before `end`.
fn retire_overlapping(map: &CodeMap, count: usize, start: usize, end: usize) {
    let overlaps = |entry: &Entry| {
        entry.live.load(Ordering::Relaxed)
            && entry.start.load(Ordering::Relaxed) < end
            && start < entry.end.load(Ordering::Relaxed)
    };
    let retire = |entry: &Entry| entry.live.store(false, Ordering::Release);
    map.index.read(|sorted, covers| {
        for entry in map.entries.get(covers.min(count)..count).unwrap_or(&[]) {
            if overlaps(entry) {
                retire(entry);
            }
        }
        let entry_of_slot =
            |slot: &AtomicU32| map.entries.get(slot.load(Ordering::Relaxed) as usize);
        let below_end = sorted.partition_point(|slot| {
            entry_of_slot(slot).is_some_and(|entry| entry.start.load(Ordering::Relaxed) < end)
        });
        // Backwards from the last entry starting before `end`: those starting at or after
        // `start` overlap; of those starting before it, only the first live one can (live
        // entries do not overlap one another), so the walk stops there.
        for slot in sorted[..below_end].iter().rev() {
            let Some(entry) = entry_of_slot(slot) else {
                continue;
            };
            let before = entry.start.load(Ordering::Relaxed) < start;
            let live = entry.live.load(Ordering::Relaxed);
            if overlaps(entry) {
                retire(entry);
            }
            if before && live {
                break;
            }
        }
    });
}

/// The compiled code of `method` at `start` was freed. The entry loaded under that id is
/// marked dead; failing it (a redefinition made the method obsolete, and the JVM names it by a
/// new id), the live entry at `start`: the JVM reports a code's unload before any new code can
/// be loaded at its address.
pub fn unloaded(method: jmethodID, start: usize) {
    let Some(map) = MAP.get() else { return };
    let _append = lock(&map.append);
    let count = map.count.load(Ordering::Relaxed);
    let live_at_start = |entry: &&Entry| {
        entry.start.load(Ordering::Relaxed) == start && entry.live.load(Ordering::Relaxed)
    };
    let entries = &map.entries[..count];
    let loaded_as = entries
        .iter()
        .rev()
        .filter(live_at_start)
        .find(|entry| entry.method.load(Ordering::Relaxed) == method as usize);
    if let Some(entry) = loaded_as.or_else(|| entries.iter().rev().find(live_at_start)) {
        entry.live.store(false, Ordering::Release);
    }
}

/// The frames of the compiled method whose code holds `pc`, newest first, with where its code
/// starts, if they are known. Async-signal-safe: atomic loads only, a binary search and a
/// bounded scan.
pub fn frames_at(pc: usize) -> Option<(usize, &'static CompiledFrames)> {
    let entry = entry_at(pc)?;
    let frames = entry.frames.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here came from Box::into_raw and is never freed.
    (!frames.is_null()).then(|| (entry.start.load(Ordering::Relaxed), unsafe { &*frames }))
}

fn entry_at(pc: usize) -> Option<&'static Entry> {
    let map = MAP.get()?;
    let count = map.count.load(Ordering::Acquire);
    if pc < map.lowest.load(Ordering::Relaxed) || pc >= map.highest.load(Ordering::Relaxed) {
        return None;
    }
    map.index.read(|sorted, covers| {
        // The entries appended since the index was built, newest first: code that replaced
        // code at the same address is newer.
        let newest = covers.max(count.saturating_sub(SCAN_LIMIT));
        let appended = map.entries.get(newest..count).unwrap_or(&[]);
        if let Some(entry) = appended.iter().rev().find(|entry| entry.holds(pc)) {
            return Some(entry);
        }
        // The indexed entry starting last at or before `pc`: live code does not overlap, so
        // only it can hold `pc`.
        let entry_of_slot =
            |slot: &AtomicU32| map.entries.get(slot.load(Ordering::Relaxed) as usize);
        let after = sorted.partition_point(|slot| {
            entry_of_slot(slot).is_some_and(|entry| entry.start.load(Ordering::Relaxed) <= pc)
        });
        let candidate = sorted.get(after.checked_sub(1)?)?;
        entry_of_slot(candidate).filter(|entry| entry.holds(pc))
    })
}

/// The interpreter's code, as DynamicCodeGenerated reports it (`Interpreter`).
static INTERPRETER: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// The JVM generated `length` bytes of code named `name` at `start` (a stub, the interpreter);
/// `frame_words`, when known, is the size of the stub's frame.
pub fn generated(name: &str, start: usize, length: usize, frame_words: Option<usize>) {
    if name == "Interpreter" {
        INTERPRETER[0].store(start, Ordering::Relaxed);
        INTERPRETER[1].store(start.saturating_add(length), Ordering::Release);
        return;
    }
    if name.starts_with("cont_returnBarrier") {
        // Adjacent stubs: one range holds both.
        CONTINUATION_RETURN[0].fetch_min(start, Ordering::Relaxed);
        CONTINUATION_RETURN[1].fetch_max(start.saturating_add(length), Ordering::Release);
    }
    STUBS.add(name, start, length, frame_words);
}

/// The stubs a virtual thread's bottom frame on its carrier's stack returns to (HotSpot's
/// continuation return barrier): the frames below them are still in the heap.
static CONTINUATION_RETURN: [AtomicUsize; 2] = [AtomicUsize::new(usize::MAX), AtomicUsize::new(0)];

/// Whether `pc` is the continuation return barrier: the end of a mounted virtual thread's
/// frames on its carrier's stack. Async-signal-safe.
pub fn is_continuation_return(pc: usize) -> bool {
    let end = CONTINUATION_RETURN[1].load(Ordering::Acquire);
    CONTINUATION_RETURN[0].load(Ordering::Relaxed) <= pc && pc < end
}

/// The most stubs remembered; HotSpot generates a few hundred, and dispatch stubs as calls
/// need them. Past this, a sample in a new stub counts to its caller without a stub frame.
const STUB_SLOTS: usize = 4096;

/// The stubs the JVM generated (arraycopy, dispatch, adapters): their code ranges, read by
/// the signal handler without a lock (a slot is published by the count after its range), and
/// their names, read when samples are resolved.
struct Stubs {
    ranges: [[AtomicUsize; 2]; STUB_SLOTS],
    /// Each stub's frame size in words, plus one (0: not known).
    frame_words: [AtomicUsize; STUB_SLOTS],
    count: AtomicUsize,
    /// Where the lowest stub starts and the highest ends: HotSpot keeps stubs in a code heap
    /// of their own, apart from compiled methods, so most pcs are answered without a search.
    bounds: [AtomicUsize; 2],
    names: Mutex<Vec<String>>,
}

static STUBS: Stubs = Stubs {
    ranges: [const { [AtomicUsize::new(0), AtomicUsize::new(0)] }; STUB_SLOTS],
    frame_words: [const { AtomicUsize::new(0) }; STUB_SLOTS],
    count: AtomicUsize::new(0),
    bounds: [AtomicUsize::new(usize::MAX), AtomicUsize::new(0)],
    names: Mutex::new(Vec::new()),
};

impl Stubs {
    fn add(&self, name: &str, start: usize, length: usize, frame_words: Option<usize>) {
        if length == 0 {
            return;
        }
        let mut names = lock(&self.names);
        let slot = self.count.load(Ordering::Relaxed);
        if slot >= STUB_SLOTS {
            return;
        }
        let end = start.saturating_add(length);
        self.ranges[slot][0].store(start, Ordering::Relaxed);
        self.ranges[slot][1].store(end, Ordering::Relaxed);
        self.frame_words[slot].store(frame_words.map_or(0, |words| words + 1), Ordering::Relaxed);
        self.bounds[0].fetch_min(start, Ordering::Relaxed);
        self.bounds[1].fetch_max(end, Ordering::Relaxed);
        names.push(name.to_string());
        self.count.store(slot + 1, Ordering::Release);
    }

    /// The slot of the stub holding `pc`, the latest generated first (code is reused).
    fn slot_of(&self, pc: usize) -> Option<usize> {
        let count = self.count.load(Ordering::Acquire).min(STUB_SLOTS);
        if pc < self.bounds[0].load(Ordering::Relaxed)
            || pc >= self.bounds[1].load(Ordering::Relaxed)
        {
            return None;
        }
        (0..count).rev().find(|&slot| {
            let [start, end] = &self.ranges[slot];
            start.load(Ordering::Relaxed) <= pc && pc < end.load(Ordering::Relaxed)
        })
    }
}

/// Whether `pc` is in a stub the JVM generated (not the interpreter). Async-signal-safe.
pub fn in_stub(pc: usize) -> bool {
    STUBS.slot_of(pc).is_some()
}

/// The frame size in words of the stub holding `pc`, when its code blob said.
/// Async-signal-safe.
pub fn stub_frame_words(pc: usize) -> Option<usize> {
    let slot = STUBS.slot_of(pc)?;
    STUBS.frame_words[slot]
        .load(Ordering::Relaxed)
        .checked_sub(1)
}

/// The name of the stub holding `pc`, as the JVM reported it (`jlong_disjoint_arraycopy`).
pub fn stub_name(pc: usize) -> Option<String> {
    let slot = STUBS.slot_of(pc)?;
    lock(&STUBS.names).get(slot).cloned()
}

/// Whether `pc` is in the interpreter's code. Async-signal-safe.
pub fn in_interpreter(pc: usize) -> bool {
    let end = INTERPRETER[1].load(Ordering::Acquire);
    INTERPRETER[0].load(Ordering::Relaxed) <= pc && pc < end
}

/// Methods remembered by their Method structure at most; beyond, new ones are not (a sample in
/// their interpreter entry counts to the caller, as without the index).
const METHOD_SLOTS: usize = 1 << 18;

/// jmethodIDs by the address of the VM's Method structure they stand for: open addressing,
/// filled under the map's lock, read without one (a key is published after its value).
struct MethodIndex {
    keys: Box<[AtomicUsize]>,
    values: Box<[AtomicUsize]>,
    /// Where each Method's bytecodes start (0: not known yet), and their size, with
    /// [`NATIVE_BIT`] for a native method: remembered by the stack walker the first time it
    /// reads them, so that later samples need not read the VM's memory again.
    bytecodes: Box<[AtomicUsize]>,
    bytecodes_size: Box<[AtomicU32]>,
}

/// Marks a native method in [`MethodIndex::bytecodes_size`].
const NATIVE_BIT: u32 = 1 << 31;

static METHODS: OnceLock<MethodIndex> = OnceLock::new();

fn method_slot(key: usize, probe: usize) -> usize {
    ((key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40).wrapping_add(probe) % METHOD_SLOTS
}

/// Remembers which Method structure each of `methods` stands for. HotSpot's jmethodID points at
/// a slot that holds its Method's address (the slot lives as long as the class).
pub fn index_methods(methods: &[jmethodID]) {
    let (Some(index), Some(map)) = (METHODS.get(), MAP.get()) else {
        return;
    };
    let _append = lock(&map.append);
    for method in methods {
        if method.is_null() {
            continue;
        }
        // SAFETY: a live jmethodID is a pointer to the slot holding its Method's address.
        let key = unsafe { (*method as *const usize).read() };
        if key == 0 || key % 8 != 0 {
            continue;
        }
        for probe in 0..64 {
            let slot = method_slot(key, probe);
            match index.keys[slot].load(Ordering::Relaxed) {
                0 => {
                    index.values[slot].store(*method as usize, Ordering::Relaxed);
                    index.keys[slot].store(key, Ordering::Release);
                    break;
                }
                same if same == key => {
                    index.values[slot].store(*method as usize, Ordering::Release);
                    break;
                }
                _ => {}
            }
        }
    }
}

/// The jmethodID of the Method structure at `address`, if the agent knows it.
/// Async-signal-safe: atomic loads only, a bounded probe.
pub fn method_of_structure(address: usize) -> Option<jmethodID> {
    let (index, slot) = method_index_slot(address)?;
    Some(index.values.get(slot)?.load(Ordering::Relaxed) as jmethodID)
}

/// The index and slot of the Method structure at `address`, if the agent knows it.
fn method_index_slot(address: usize) -> Option<(&'static MethodIndex, usize)> {
    let index = METHODS.get()?;
    if address == 0 || address % 8 != 0 {
        return None;
    }
    (0..64).find_map(|probe| {
        let slot = method_slot(address, probe);
        match index.keys.get(slot)?.load(Ordering::Acquire) {
            0 => Some(None),
            key if key == address => Some(Some((index, slot))),
            _ => None,
        }
    })?
}

/// Where the bytecodes of the Method at `address` start, how many there are, and whether it
/// is native, as [`remember_bytecodes`] kept them. Async-signal-safe.
pub fn bytecodes_of(address: usize) -> Option<(usize, u32, bool)> {
    let (index, slot) = method_index_slot(address)?;
    let start = index.bytecodes.get(slot)?.load(Ordering::Acquire);
    let size = index.bytecodes_size.get(slot)?.load(Ordering::Relaxed);
    (start != 0).then_some((start, size & !NATIVE_BIT, size & NATIVE_BIT != 0))
}

/// Keeps where the bytecodes of the Method at `address` are (read by the walker from the VM's
/// memory once). Async-signal-safe: atomic stores into a slot the Method already has.
pub fn remember_bytecodes(address: usize, start: usize, size: u32, native: bool) {
    let Some((index, slot)) = method_index_slot(address) else {
        return;
    };
    let size = if native { size | NATIVE_BIT } else { size };
    if let (Some(start_slot), Some(size_slot)) =
        (index.bytecodes.get(slot), index.bytecodes_size.get(slot))
    {
        size_slot.store(size, Ordering::Relaxed);
        start_slot.store(start, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compiled method whose code holds `pc`, newest first.
    fn method_at(pc: usize) -> Option<jmethodID> {
        entry_at(pc).map(|entry| entry.method.load(Ordering::Relaxed) as jmethodID)
    }

    #[test]
    fn a_pc_maps_to_the_newest_live_code_holding_it() {
        init();
        let first = 0x1000 as jmethodID;
        let second = 0x2000 as jmethodID;
        loaded(first, 0x7000_0000, 0x100, None);
        assert_eq!(method_at(0x7000_0080), Some(first));
        assert_eq!(method_at(0x7000_0100), None);
        // The code is freed and its memory reused by another method.
        unloaded(first, 0x7000_0000);
        assert_eq!(method_at(0x7000_0080), None);
        loaded(second, 0x7000_0000, 0x80, None);
        assert_eq!(method_at(0x7000_0010), Some(second));
    }

    #[test]
    fn code_whose_unload_was_missed_or_renamed_gives_way_to_code_loaded_over_it() {
        init();
        let base = 0x7800_0000usize;
        // Enough methods for the sorted index to be rebuilt around them.
        for n in 0..100 {
            loaded((0x3000 + n) as jmethodID, base + n * 0x1000, 0x800, None);
        }
        // A method made obsolete by a redefinition is unloaded under a new id.
        unloaded(0x9999 as jmethodID, base);
        assert_eq!(method_at(base + 0x10), None);
        // An unload never reported: new code over part of the old, then more code.
        let newer = 0x4000 as jmethodID;
        loaded(newer, base + 0x1400, 0x800, None);
        for n in 100..140 {
            loaded((0x3000 + n) as jmethodID, base + n * 0x1000, 0x800, None);
        }
        assert_eq!(method_at(base + 0x1100), None, "the freed code's start");
        assert_eq!(method_at(base + 0x1500), Some(newer));
        assert_eq!(method_at(base + 0x1a00), Some(newer));
        assert_eq!(method_at(base + 0x2100), Some((0x3000 + 2) as jmethodID));
    }

    #[test]
    fn lookups_through_the_sorted_index_agree_with_a_scan() {
        init();
        // Thousands of methods, compiled in an order unlike their addresses, some freed and
        // their memory reused: several index rebuilds and a tail.
        let base = 0x9000_0000usize;
        let slot = |n: usize| base + ((n * 7919) % 5000) * 0x100;
        let mut expected = std::collections::HashMap::new();
        for n in 0..5000 {
            loaded((n + 1) as jmethodID, slot(n), 0x80, None);
            expected.insert(slot(n), n + 1);
            if n % 10 == 3 {
                unloaded((n + 1) as jmethodID, slot(n));
                expected.remove(&slot(n));
            }
        }
        for n in (0..5000).step_by(20) {
            unloaded((n + 1) as jmethodID, slot(n));
            loaded((n + 100_000) as jmethodID, slot(n), 0x40, None);
            expected.insert(slot(n), n + 100_000);
        }
        for n in 0..5000 {
            let start = slot(n);
            let want = expected.get(&start).map(|method| *method as jmethodID);
            assert_eq!(method_at(start + 0x10), want, "method {n} at {start:#x}");
            assert_eq!(method_at(start + 0xc0), None, "past method {n}'s code");
        }
    }

    #[test]
    fn a_method_structure_names_its_jmethod_id_and_the_interpreter_is_known() {
        init();
        // HotSpot's jmethodID points at a slot holding the Method's address: slots of our own.
        let slots: Vec<Box<usize>> = (0..1000)
            .map(|n| Box::new(0x5000_0000 + n * 0x58))
            .collect();
        let ids: Vec<jmethodID> = slots
            .iter()
            .map(|slot| &**slot as *const usize as jmethodID)
            .collect();
        index_methods(&ids);
        for (slot, id) in slots.iter().zip(&ids) {
            assert_eq!(method_of_structure(**slot), Some(*id));
        }
        assert_eq!(method_of_structure(0x5000_0000 + 0x58 * 1000), None);
        assert_eq!(method_of_structure(0), None);
        assert_eq!(method_of_structure(0x5000_0001), None);
        generated("StubRoutines (1)", 0x6000_0000, 0x100, None);
        assert!(!in_interpreter(0x6000_0010));
        generated("Interpreter", 0x6100_0000, 0x1000, None);
        assert!(in_interpreter(0x6100_0000) && in_interpreter(0x6100_0fff));
        assert!(!in_interpreter(0x6100_1000) && !in_interpreter(0x60ff_ffff));
    }
}
