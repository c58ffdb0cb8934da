//! Native (C, C++) frames for CPU samples (`cstack=fp`): the SIGPROF handler walks the
//! interrupted thread's frame-pointer chain from the signal's registers while the pc is inside a
//! loaded ELF object's executable code, and stops where it enters Java code (the JVM's code
//! cache is anonymous memory) or where the chain leaves the thread's stack. Everything the
//! handler reads here is built outside it and never freed: the executable ranges of the loaded
//! objects (a snapshot of /proc/self/maps, replaced when libraries come and go) and each timed
//! thread's stack bounds (recorded by the thread itself when its timer starts). With
//! `cstack=dwarf` a frame whose code has call frame information is stepped by its rule instead
//! (tables from `dwarf_unwind.rs`). x86-64 Linux only; elsewhere no native frame is recorded.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::ring::CallFrame;

/// Native frames recorded at most per sample.
pub const MAX_NATIVE_FRAMES: usize = 64;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// `cstack=dwarf`: frames with call frame information are walked by it.
static DWARF: AtomicBool = AtomicBool::new(false);

/// Turns the native walk on (`cstack=fp` or `dwarf`) or off; it is off until turned on.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(
        enabled && cfg!(all(target_arch = "x86_64", target_os = "linux")),
        Ordering::Release,
    );
}

/// Walks frames by the objects' call frame information where it has a rule for them
/// (`cstack=dwarf`), by frame pointers elsewhere; tables are built at the next refresh.
pub fn set_dwarf(dwarf: bool) {
    DWARF.store(dwarf, Ordering::Release);
}

/// The executable ranges of the loaded ELF objects, sorted by start, non-overlapping.
struct CodeRanges {
    ranges: Box<[(usize, usize)]>,
}

impl CodeRanges {
    /// Binary search over plain data: async-signal-safe.
    fn contains(&self, pc: usize) -> bool {
        let after = self.ranges.partition_point(|&(start, _)| start <= pc);
        after > 0 && pc < self.ranges[after - 1].1
    }
}

/// The newest snapshot; older ones are leaked, not freed, since a handler may still read one.
static CODE_RANGES: AtomicPtr<CodeRanges> = AtomicPtr::new(std::ptr::null_mut());

/// The executable mappings of ELF objects (files, and the kernel's vDSO) in /proc/self/maps.
fn read_code_ranges() -> std::io::Result<Vec<(usize, usize)>> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut ranges: Vec<(usize, usize)> = maps
        .lines()
        .filter_map(|line| {
            let mapping = crate::native_symbols::Mapping::parse(line)?;
            let object = mapping.path.starts_with('/') || mapping.path == "[vdso]";
            (mapping.executable && object).then_some((mapping.start, mapping.end))
        })
        .collect();
    ranges.sort_unstable();
    Ok(ranges)
}

/// Takes a new snapshot of the loaded objects' code for the handler, when it changed; false
/// when the maps could not be read. Never called from the handler.
fn refresh_code_ranges() -> bool {
    let Ok(ranges) = read_code_ranges() else {
        return false;
    };
    let current = CODE_RANGES.load(Ordering::Acquire);
    // SAFETY: a published snapshot is never freed.
    if !current.is_null() && unsafe { &*current }.ranges[..] == ranges[..] {
        return true;
    }
    let snapshot = Box::into_raw(Box::new(CodeRanges {
        ranges: ranges.into_boxed_slice(),
    }));
    CODE_RANGES.store(snapshot, Ordering::Release);
    true
}

/// The dynamic loader's count of objects loaded and unloaded when the code ranges were last
/// read (agent's thread only).
static LOADER_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX);

/// The dynamic loader's count of objects loaded plus unloaded so far: it changes exactly when
/// a library comes or goes. Cheap (no file read), so it can be asked often.
fn loader_generation() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        generation: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid entry; `generation` is the u64 given below.
        unsafe {
            *generation.cast::<u64>() = ((*info).dlpi_adds).wrapping_add((*info).dlpi_subs);
        }
        1
    }
    let mut generation = 0u64;
    // SAFETY: the callback only reads the entry it is given and writes `generation`, which
    // outlives the call; returning non-zero stops the iteration at the first object.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut generation as *mut u64).cast()) };
    generation
}

/// Time spent building unwind tables (`cstack=dwarf`) since it was last taken.
static UNWIND_BUILD_NANOS: AtomicU64 = AtomicU64::new(0);

/// The time spent building unwind tables since the last call, in nanoseconds.
pub fn take_unwind_build_nanos() -> u64 {
    UNWIND_BUILD_NANOS.swap(0, Ordering::Relaxed)
}

/// Reads the loaded objects' code for the handler: first, and again whenever a library was
/// loaded or unloaded since (System.loadLibrary, or the JDK's own libraries on first use).
/// Called before sampling starts, then by the agent's thread; never from the handler.
pub fn refresh_code_ranges_if_changed() {
    let generation = loader_generation();
    if LOADER_GENERATION.load(Ordering::Relaxed) != generation && refresh_code_ranges() {
        // The first unwind tables are built by `build_unwind_tables_if_missing`, on the agent's
        // thread; after that, each change of the libraries rebuilds them here.
        if crate::dwarf_unwind::current().is_some() {
            build_unwind_tables();
        }
        LOADER_GENERATION.store(generation, Ordering::Relaxed);
    }
}

/// Builds the unwind tables the first time, when DWARF walking is on. Called from the agent's
/// thread, so that the JVM's start-up does not wait the tens of milliseconds it takes; until
/// then the walk goes by frame pointers.
pub fn build_unwind_tables_if_missing() {
    if crate::dwarf_unwind::current().is_none() {
        build_unwind_tables();
    }
}

fn build_unwind_tables() {
    if DWARF.load(Ordering::Acquire) {
        let started = std::time::Instant::now();
        crate::dwarf_unwind::refresh();
        UNWIND_BUILD_NANOS.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// One thread's stack, by kernel id. `high` is published last and cleared first, so a reader
/// that sees it non-zero sees the matching `low`.
struct StackSlot {
    thread_id: AtomicI32,
    low: AtomicUsize,
    high: AtomicUsize,
}

const STACK_SLOTS: usize = 1 << 13;
/// A slot whose thread ended: lookups go past it, new threads may take it.
const FREED_SLOT: i32 = -1;

static STACKS: [StackSlot; STACK_SLOTS] = [const {
    StackSlot {
        thread_id: AtomicI32::new(0),
        low: AtomicUsize::new(0),
        high: AtomicUsize::new(0),
    }
}; STACK_SLOTS];

fn first_slot(thread_id: i32) -> usize {
    (thread_id as u32 as usize).wrapping_mul(0x9E37_79B9) % STACK_SLOTS
}

/// The slot of `thread_id`, if it has one. Async-signal-safe: atomic loads only.
fn slot_of(thread_id: i32) -> Option<&'static StackSlot> {
    let first = first_slot(thread_id);
    for probe in 0..STACK_SLOTS {
        let slot = &STACKS[(first + probe) % STACK_SLOTS];
        match slot.thread_id.load(Ordering::Acquire) {
            id if id == thread_id => return Some(slot),
            0 => return None,
            _ => {}
        }
    }
    None
}

/// Records the calling thread's stack (the thread's kernel id is `thread_id`), so that the
/// handler may read the frames on it.
pub fn remember_current_thread_stack(thread_id: i32) {
    let Some((low, high)) = current_thread_stack() else {
        return;
    };
    let slot = slot_of(thread_id).or_else(|| {
        let first = first_slot(thread_id);
        (0..STACK_SLOTS).find_map(|probe| {
            let slot = &STACKS[(first + probe) % STACK_SLOTS];
            [0, FREED_SLOT].into_iter().find_map(|free| {
                slot.thread_id
                    .compare_exchange(free, thread_id, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                    .then_some(slot)
            })
        })
    });
    if let Some(slot) = slot {
        slot.high.store(0, Ordering::Release);
        slot.low.store(low, Ordering::Release);
        slot.high.store(high, Ordering::Release);
    }
}

/// Forgets the calling thread's stack as it ends (its kernel id, `thread_id`, may go to
/// another thread).
pub fn forget_current_thread_stack(thread_id: i32) {
    if let Some(slot) = slot_of(thread_id) {
        slot.high.store(0, Ordering::Release);
        slot.thread_id.store(FREED_SLOT, Ordering::Release);
    }
}

/// The calling thread's stack as (lowest, highest) address, from its pthread attributes.
fn current_thread_stack() -> Option<(usize, usize)> {
    // SAFETY: pthread_getattr_np fills the attribute object we own, which is destroyed after
    // use; pthread_attr_getstack only reads it.
    unsafe {
        let mut attributes: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attributes) != 0 {
            return None;
        }
        let mut low: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let status = libc::pthread_attr_getstack(&attributes, &mut low, &mut size);
        libc::pthread_attr_destroy(&mut attributes);
        (status == 0 && !low.is_null() && size > 0)
            .then(|| (low as usize, (low as usize).saturating_add(size)))
    }
}

/// Writes the native frames of the interrupted code, innermost first, into `out` (room for
/// `room` frames) and returns how many. `known_stack` is the thread's stack as the JVM knows it,
/// for a thread that did not record its own. Where the walk stepped from native code into code
/// that no ELF object holds (Java code), `entered` gets that frame's (pc, sp, fp).
///
/// # Safety
/// Called from the SIGPROF handler only, on the thread `thread_id` the signal interrupted, with
/// the ucontext the kernel gave it (or null); `out` must have room for `room` frames;
/// `known_stack`, when given, must be that thread's mapped stack.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub unsafe fn walk(
    context: *mut libc::c_void,
    thread_id: i32,
    known_stack: Option<(usize, usize)>,
    out: *mut CallFrame,
    room: usize,
    entered: &mut Option<(usize, usize, usize)>,
) -> usize {
    if !ENABLED.load(Ordering::Acquire) || context.is_null() {
        return 0;
    }
    let ranges = CODE_RANGES.load(Ordering::Acquire);
    if ranges.is_null() {
        return 0;
    }
    // SAFETY: published snapshots are never freed.
    let ranges = unsafe { &*ranges };
    // SAFETY: the kernel hands the handler a valid ucontext_t; only its registers are read.
    let registers = unsafe { &(*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    let mut pc = registers[libc::REG_RIP as usize] as usize;
    let mut fp = registers[libc::REG_RBP as usize] as usize;
    let mut sp = registers[libc::REG_RSP as usize] as usize;
    let interrupted_sp = sp;
    // Without the thread's stack bounds (threads timed by another thread: at attach, or the
    // JVM's own with vmthreads=y) the words are read through the kernel, which reports an
    // unmapped address instead of faulting, within a bounded distance above the stack pointer.
    // So too when the interrupted code was not on the recorded stack (a signal handler of some
    // library on an alternate stack).
    let stack = slot_of(thread_id)
        .and_then(|slot| {
            let high = slot.high.load(Ordering::Acquire);
            (high != 0).then(|| (slot.low.load(Ordering::Acquire), high))
        })
        .or(known_stack)
        .filter(|&(low, high)| low <= sp && sp < high);
    let (low, high) = stack.unwrap_or((
        interrupted_sp,
        interrupted_sp.saturating_add(UNKNOWN_STACK_REACH),
    ));
    // A word of the walked stack: only between the interrupted stack pointer (everything
    // below it is free) and the top of the stack, aligned.
    let read_word = |address: usize| -> Option<usize> {
        if address % 8 != 0 || address < low.max(interrupted_sp) || address > high.checked_sub(8)? {
            return None;
        }
        if stack.is_some() {
            // SAFETY: the word lies between the interrupted stack pointer and the top of the
            // thread's own stack, which is mapped and readable while the thread runs.
            Some(unsafe { std::ptr::read(address as *const usize) })
        } else {
            let mut word = [0usize; 1];
            read_through_kernel(address, &mut word).then_some(word[0])
        }
    };
    let unwind_tables = if DWARF.load(Ordering::Acquire) {
        crate::dwarf_unwind::current()
    } else {
        None
    };
    let mut count = 0;
    while count < room.min(MAX_NATIVE_FRAMES) && ranges.contains(pc) {
        // A return address is the instruction after the call: one back is inside the call.
        let at = if count == 0 { pc } else { pc - 1 };
        // SAFETY: `count` < `room`, the frames `out` has room for.
        unsafe { *out.add(count) = CallFrame::native_pc(at) };
        count += 1;
        if let Some(rule) = unwind_tables.and_then(|tables| tables.rule_for(at)) {
            // The object's call frame information says where the caller's frame is: the
            // caller's stack pointer (CFA) above this frame, the return address just below it.
            let base = if rule.cfa_from_frame_pointer { fp } else { sp };
            let cfa = base.wrapping_add(rule.cfa_offset);
            if cfa <= sp {
                break;
            }
            let Some(return_address) = cfa.checked_sub(8).and_then(read_word) else {
                break;
            };
            if rule.saved_fp_slot != 0 {
                // Below the stack pointer the slot was popped already (compilers keep the rule
                // through the epilogue): rbp holds the caller's value again.
                match cfa.checked_sub(8 * usize::from(rule.saved_fp_slot)) {
                    Some(saved_at) if saved_at >= sp => match read_word(saved_at) {
                        Some(caller_fp) => fp = caller_fp,
                        None => break,
                    },
                    Some(_) => {}
                    None => break,
                }
            }
            sp = cfa;
            pc = return_address;
            continue;
        }
        // The next frame record must be on this thread's stack, above everything already
        // walked (the chain only goes up), aligned; else the code does not keep frame pointers
        // and the walk ends here.
        if fp % 8 != 0 || fp < sp || fp < low || fp > high.saturating_sub(16) {
            break;
        }
        let (caller_fp, return_address) = if stack.is_some() {
            // SAFETY: [fp, fp + 16) lies between the interrupted stack pointer and the top of
            // the thread's own stack, which is mapped and readable while the thread runs
            // (HotSpot's guard zones are below the stack pointer).
            unsafe {
                (
                    std::ptr::read(fp as *const usize),
                    std::ptr::read((fp + 8) as *const usize),
                )
            }
        } else {
            let mut record = [0usize; 2];
            if !read_through_kernel(fp, &mut record) {
                break;
            }
            (record[0], record[1])
        };
        sp = fp + 16;
        fp = caller_fp;
        pc = return_address;
    }
    // A walk that broke off stopped on a pc inside an object; one that left the objects' code
    // stands on the first frame outside it.
    if count > 0 && !ranges.contains(pc) {
        *entered = Some((pc, sp, fp));
    }
    count
}

/// How far above the interrupted stack pointer frame records are looked for on a stack whose
/// bounds are not known (thread stacks are at most a few MiB).
const UNKNOWN_STACK_REACH: usize = 16 << 20;

/// This process's id, asked of the kernel once: the C library does not keep it, and each
/// read through the kernel would otherwise cost a second system call.
#[cfg(target_os = "linux")]
fn own_pid() -> libc::pid_t {
    static OWN_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    match OWN_PID.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            // SAFETY: getpid has no preconditions and is async-signal-safe.
            let pid = unsafe { libc::getpid() };
            OWN_PID.store(pid, std::sync::atomic::Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// Words at `address`, read through the kernel: an address that is not mapped gives false
/// rather than a fault. Async-signal-safe (one raw system call); a process may always read its
/// own memory this way.
#[cfg(target_os = "linux")]
pub(crate) fn read_through_kernel(address: usize, words: &mut [usize]) -> bool {
    let len = std::mem::size_of_val(words);
    let local = libc::iovec {
        iov_base: words.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: address as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the kernel copies at most `len` bytes into `words`, which we borrow mutably, and
    // checks the remote range itself.
    let copied = unsafe { libc::process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) };
    copied == len as isize
}

/// # Safety
/// Nothing is read or written: no native frame is walked on this platform.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub unsafe fn walk(
    _context: *mut libc::c_void,
    _thread_id: i32,
    _known_stack: Option<(usize, usize)>,
    _out: *mut CallFrame,
    _room: usize,
    _entered: &mut Option<(usize, usize, usize)>,
) -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_ranges_hold_this_test_binary_and_not_the_heap() {
        assert!(refresh_code_ranges());
        // SAFETY: published snapshots are never freed.
        let ranges = unsafe { &*CODE_RANGES.load(Ordering::Acquire) };
        let function = code_ranges_hold_this_test_binary_and_not_the_heap as *const () as usize;
        assert!(ranges.contains(function));
        let heap = Box::new(0u64);
        assert!(!ranges.contains(&*heap as *const u64 as usize));
        // The same maps again: the snapshot is kept, not replaced. (Tests run in parallel
        // threads of one process: one may have loaded code meanwhile, and then the snapshot
        // must differ.)
        assert!(refresh_code_ranges());
        // SAFETY: as above.
        let again = unsafe { &*CODE_RANGES.load(Ordering::Acquire) };
        if !std::ptr::eq(again, ranges) {
            assert_ne!(
                again.ranges[..],
                ranges.ranges[..],
                "an equal snapshot replaced"
            );
        }
    }

    #[test]
    fn loading_a_library_changes_the_loaders_generation() {
        let before = loader_generation();
        assert_eq!(loader_generation(), before);
        // SAFETY: dlopen of a library every Linux has, with a NUL-terminated name; it is
        // closed at once.
        let handle = unsafe { libc::dlopen(c"libutil.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null());
        // SAFETY: the handle dlopen just gave.
        unsafe { libc::dlclose(handle) };
        assert_ne!(loader_generation(), before);
    }

    #[test]
    fn a_thread_stack_is_remembered_and_forgotten() {
        std::thread::spawn(|| {
            let local = 0u64;
            // SAFETY: gettid has no arguments and cannot fail.
            let thread_id = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
            remember_current_thread_stack(thread_id);
            let slot = slot_of(thread_id).expect("remembered");
            let (low, high) = (
                slot.low.load(Ordering::Relaxed),
                slot.high.load(Ordering::Relaxed),
            );
            let here = &local as *const u64 as usize;
            assert!(low <= here && here < high, "{low:x} {here:x} {high:x}");
            forget_current_thread_stack(thread_id);
            assert!(slot_of(thread_id).is_none());
        })
        .join()
        .unwrap();
    }
}
