//! The Java stack walker of our own (`walker=vm`, `walker=check`): it steps over HotSpot's
//! compiled, interpreted and entry frames as the VM lays them out on x86-64, knowing each
//! compiled method's frame size (from its CodeBlob, found through VMStructs when the method is
//! reported) and the inlined Java frames at each of its pcs (from JVMTI's CompiledMethodLoad
//! record), so that the signal handler itself reads only the thread's own stack, our own
//! tables, and VM memory through the kernel (a stale pointer reads as an error, never a fault).
//! Where it cannot walk (a stub on top, unknown code) it says why and AsyncGetCallTrace walks.
//! With `walker=check` both walk every sample and the disagreements are counted by kind.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use openprof_format::options::Walker;

use crate::code_map::{self, CompiledFrames};
use crate::jvmti::{jmethodID, Jvmti};
use crate::ring::CallFrame;
use crate::vm_structs::{Tables, ThreadLayout};

/// The walker asked for (`walker=`), as its number in [`WALKERS`].
static MODE: AtomicU8 = AtomicU8::new(0);
const WALKERS: [Walker; 3] = [Walker::AsyncGetCallTrace, Walker::Vm, Walker::Check];

/// The walker asked for; ours is used only once its layout is learnt.
pub fn set_mode(walker: Walker) {
    let number = WALKERS
        .iter()
        .position(|known| *known == walker)
        .unwrap_or(0);
    MODE.store(number as u8, Ordering::Release);
}

/// The walker in use: AsyncGetCallTrace until ours has what it needs.
pub fn mode() -> Walker {
    if layout().is_none() {
        return Walker::AsyncGetCallTrace;
    }
    WALKERS[usize::from(MODE.load(Ordering::Acquire)) % WALKERS.len()]
}

/// Whether ours was asked for (its tables are then built as code is compiled).
pub fn wanted() -> bool {
    MODE.load(Ordering::Acquire) != 0
}

/// Where a field's value starts a compiled method's code.
#[derive(Clone, Copy, Debug)]
enum CodeStart {
    /// `CodeBlob::_code_offset` (an int from the blob's start), JDK 23 and later.
    Offset(usize),
    /// `CodeBlob::_code_begin` (a pointer), before.
    Pointer(usize),
}

/// What the walker reads of HotSpot, from VMStructs.
#[derive(Debug)]
struct WalkerLayout {
    /// Each code heap's (`CodeCache::_heaps`, at most four) reserved memory and segment map, which do not move:
    /// (`_memory._low`, `_memory._high_boundary`, `_segmap._low`).
    heap_bounds: Vec<(usize, usize, usize)>,
    /// `CodeBlob::_name`, and `nmethod::_method` (`CompiledMethod::_method` before JDK 23).
    blob_name: usize,
    nmethod_method: usize,
    /// `CodeHeap::_log2_segment_size` of the first heap (all have the same).
    segment_shift: u32,
    /// `HeapBlock::_header` + `HeapBlock::Header::_used`, and `sizeof(HeapBlock)`.
    block_used: usize,
    block_size: usize,
    /// `CodeBlob::_frame_size` (an int, in words).
    frame_size: usize,
    /// `CodeBlob::_data_offset` (an int): where the blob's code ends.
    data_offset: usize,
    /// `CodeBlob::_frame_complete_offset` and whether it is a 16-bit field.
    frame_complete: usize,
    frame_complete_short: bool,
    code_start: CodeStart,
    /// `Method::_constMethod`, `sizeof(ConstMethod)` (its bytecodes follow it) and
    /// `ConstMethod::_code_size` (a u16).
    const_method: usize,
    const_method_size: usize,
    code_size: usize,
    /// `Method::_access_flags`, whose low bits are the class file's.
    access_flags: usize,
    /// How a Method no jmethodID points at (an old version of a redefined method) is named:
    /// `ConstMethod::_constants`, `ConstMethod::_method_idnum` (a u16),
    /// `ConstantPool::_pool_holder` and `InstanceKlass::_methods_jmethod_ids` (the class's
    /// jmethodIDs by method number, after their count). None where VMStructs lacks one.
    method_by_number: Option<MethodByNumber>,
    /// The return address of the stub that calls Java from the VM (`StubRoutines::
    /// _call_stub_return_address`): above it is an entry frame.
    call_stub_return: usize,
    /// `JavaCallWrapper::_anchor` and the anchor's `_last_Java_sp`, `_last_Java_pc`,
    /// `_last_Java_fp`: the Java frames below an entry frame.
    wrapper_anchor: usize,
    anchor_sp: usize,
    anchor_pc: usize,
    anchor_fp: usize,
}

static LAYOUT: OnceLock<Option<WalkerLayout>> = OnceLock::new();

fn layout() -> Option<&'static WalkerLayout> {
    LAYOUT.get().and_then(Option::as_ref)
}

/// Learns what the walker reads of this JVM, once, on a thread in native code, after the
/// thread layout. Returns why not, for the verbose output.
pub fn learn() -> Result<(), String> {
    let learnt = read_layout();
    let result = learnt.as_ref().map(|_| ()).map_err(Clone::clone);
    let _ = LAYOUT.set(learnt.ok());
    result
}

fn read_layout() -> Result<WalkerLayout, String> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Err("the walker knows x86-64 Linux frames only".into());
    }
    crate::vm_structs::thread_layout().ok_or("no thread layout")?;
    let tables = Tables::find().ok_or("libjvm exports no VMStructs tables")?;
    let field = |type_name: &str, field_name: &str| {
        tables
            .field_offset(type_name, field_name)
            .filter(|offset| *offset < 1 << 12)
            .ok_or_else(|| format!("no {type_name}::{field_name} in VMStructs"))
    };
    let size_of = |type_name: &str| {
        tables
            .type_size(type_name)
            .filter(|size| *size > 0 && *size < 1 << 12)
            .ok_or_else(|| format!("no size of {type_name} in VMStructs"))
    };
    let static_at = |type_name: &str, field_name: &str| {
        tables
            .static_address(type_name, field_name)
            .ok_or_else(|| format!("no static {type_name}::{field_name} in VMStructs"))
    };
    let memory = field("CodeHeap", "_memory")?;
    let high_boundary = field("VirtualSpace", "_high_boundary")?;
    let segmap = field("CodeHeap", "_segmap")?;
    let low = field("VirtualSpace", "_low")?;
    let shift_at = field("CodeHeap", "_log2_segment_size")?;
    let array_length =
        field("GrowableArrayBase", "_len").or_else(|_| field("GenericGrowableArray", "_len"))?;
    let array_data = field("GrowableArray<int>", "_data")?;
    let heaps_at = static_at("CodeCache", "_heaps")?;
    // SAFETY: VMStructs gives the address of CodeCache::_heaps, a GrowableArray<CodeHeap*>*
    // set up before any agent runs; the array's fields are at the offsets VMStructs gives.
    let heaps = unsafe {
        let array = (heaps_at as *const usize).read();
        if array == 0 {
            return Err("CodeCache::_heaps is empty".into());
        }
        let count = ((array + array_length) as *const i32).read();
        let data = ((array + array_data) as *const usize).read();
        if !(1..=4).contains(&count) || data == 0 {
            return Err(format!("CodeCache::_heaps holds {count} heaps"));
        }
        (0..count as usize)
            .map(|index| ((data + index * 8) as *const usize).read())
            .collect::<Vec<usize>>()
    };
    // SAFETY: the first heap is a live CodeHeap; the field is at the offset VMStructs gives.
    let segment_shift = unsafe { ((heaps[0] + shift_at) as *const i32).read() };
    if !(4..=16).contains(&segment_shift) {
        return Err(format!("a code segment of 2^{segment_shift} bytes"));
    }
    let code_start = match tables.field_offset("CodeBlob", "_code_offset") {
        Some(offset) => CodeStart::Offset(offset),
        None => CodeStart::Pointer(field("CodeBlob", "_code_begin")?),
    };
    let frame_complete_short = tables
        .field_type("CodeBlob", "_frame_complete_offset")
        .is_some_and(|name| name.to_bytes().ends_with(b"16_t"));
    let call_stub_return_at = static_at("StubRoutines", "_call_stub_return_address")?;
    // SAFETY: a static pointer of libjvm, set when the stubs were generated (before agents).
    let call_stub_return = unsafe { (call_stub_return_at as *const usize).read() };
    if call_stub_return == 0 {
        return Err("no call stub yet".into());
    }
    // SAFETY: the heaps are live CodeHeaps; their VirtualSpaces' fields are at VMStructs'
    // offsets, and the reserved bounds and the segment map's start never change.
    let heap_bounds = heaps
        .iter()
        .map(|&heap| unsafe {
            (
                ((heap + memory + low) as *const usize).read(),
                ((heap + memory + high_boundary) as *const usize).read(),
                ((heap + segmap + low) as *const usize).read(),
            )
        })
        .collect();
    let nmethod_method =
        field("nmethod", "_method").or_else(|_| field("CompiledMethod", "_method"))?;
    Ok(WalkerLayout {
        heap_bounds,
        blob_name: field("CodeBlob", "_name")?,
        nmethod_method,
        segment_shift: segment_shift as u32,
        block_used: field("HeapBlock", "_header")? + field("HeapBlock::Header", "_used")?,
        block_size: size_of("HeapBlock")?,
        frame_size: field("CodeBlob", "_frame_size")?,
        data_offset: field("CodeBlob", "_data_offset")?,
        frame_complete: field("CodeBlob", "_frame_complete_offset")?,
        frame_complete_short,
        code_start,
        const_method: field("Method", "_constMethod")?,
        const_method_size: size_of("ConstMethod")?,
        code_size: field("ConstMethod", "_code_size")?,
        access_flags: field("Method", "_access_flags")?,
        method_by_number: (|| {
            Some(MethodByNumber {
                constants: field("ConstMethod", "_constants").ok()?,
                number: field("ConstMethod", "_method_idnum").ok()?,
                holder: field("ConstantPool", "_pool_holder").ok()?,
                method_ids: field("InstanceKlass", "_methods_jmethod_ids").ok()?,
            })
        })(),
        call_stub_return,
        wrapper_anchor: field("JavaCallWrapper", "_anchor")?,
        anchor_sp: field("JavaFrameAnchor", "_last_Java_sp")?,
        anchor_pc: field("JavaFrameAnchor", "_last_Java_pc")?,
        anchor_fp: field("JavaFrameAnchor", "_last_Java_fp")?,
    })
}

/// HotSpot's mark in a jmethodID's slot once its method is gone (`JNIMethodBlock::_free_method`).
const FREED_METHOD: usize = 55;
/// jmethodIDs of samples refused before JVMTI was asked about them, since the last count.
static REFUSED_METHOD_IDS: AtomicU64 = AtomicU64::new(0);

/// Whether `id` may be handed to JVMTI: a jmethodID points at a word holding its Method (or
/// HotSpot's mark of a method gone, which JVMTI answers with an error), and that Method's
/// constant part can be read. JVMTI resolves a jmethodID by reading through it without a check,
/// so a walk that produced a garbage id (a stack word, memory freed by a redefinition) would
/// crash the JVM at the first name lookup; here every read goes through the kernel, and a
/// refused id is counted (`walker.refused_method_ids`) and named unknown.
pub fn plausible_method_id(id: jmethodID) -> bool {
    let id = id as usize;
    let plausible = id >= 1 << 16
        && id % 8 == 0
        && vm_word(id).is_some_and(|method| {
            method == FREED_METHOD
                || (method >= 1 << 16
                    && method % 8 == 0
                    && match layout() {
                        Some(layout) => vm_word(method + layout.const_method)
                            .is_some_and(|constant| constant >= 1 << 16 && constant % 8 == 0),
                        None => true,
                    })
        });
    if !plausible {
        REFUSED_METHOD_IDS.fetch_add(1, Ordering::Relaxed);
    }
    plausible
}

/// The fields that lead from a Method to its class's jmethodID for the same method number.
#[derive(Debug, Clone, Copy)]
struct MethodByNumber {
    constants: usize,
    number: usize,
    holder: usize,
    method_ids: usize,
}

/// The jmethodID of the Method at `method`: the index's, else the one its class keeps for its
/// method number. A class redefined while its methods ran leaves frames of the old Methods,
/// which no jmethodID points at; HotSpot names them by the current method of the same number,
/// and so do we (their bytecode indexes are the old method's, the same where the body did not
/// change). Every read is through the kernel: the Method may be freed meanwhile.
fn method_id(layout: &WalkerLayout, method: usize) -> Option<jmethodID> {
    // The index is by address: when a class is redefined or retransformed, its old Methods are
    // freed and new ones may take their addresses, which the index still names by the old
    // ids. An id is taken only while it points at this Method.
    if let Some(id) = code_map::method_of_structure(method) {
        if vm_word(id as usize) == Some(method) {
            return Some(id);
        }
    }
    let by = layout.method_by_number?;
    let const_method = vm_word(method + layout.const_method)?;
    let constants = vm_word(const_method + by.constants)?;
    let number = vm_text8(const_method + by.number)?;
    let number = usize::from(u16::from_le_bytes([number[0], number[1]]));
    let holder = vm_word(constants + by.holder)?;
    let ids = vm_word(holder + by.method_ids)?;
    if ids == 0 || ids % 8 != 0 {
        return None;
    }
    // The array's first word is its length.
    if number >= vm_word(ids)? {
        return None;
    }
    let id = vm_word(ids + (number + 1) * 8)?;
    if id == 0 || id % 8 != 0 {
        return None;
    }
    // A jmethodID points at a word holding its current Method: trusted only if that Method
    // is of the same class and number (the agent thread will ask JVMTI about the id).
    let current = vm_word(id)?;
    if current == method || code_map::method_of_structure(current) == Some(id as jmethodID) {
        return Some(id as jmethodID);
    }
    let current_const = vm_word(current + layout.const_method)?;
    let current_number = vm_text8(current_const + by.number)?;
    let same_number =
        usize::from(u16::from_le_bytes([current_number[0], current_number[1]])) == number;
    let same_class = vm_word(vm_word(current_const + by.constants)? + by.holder)? == holder;
    (same_number && same_class).then_some(id as jmethodID)
}

/// What JVMTI's `jvmtiCompiledMethodLoadRecordHeader` holds: its kind and the next record.
#[repr(C)]
struct RecordHeader {
    kind: i32,
    major: i32,
    minor: i32,
    next: *const RecordHeader,
}

/// `jvmtiCompiledMethodLoadInlineRecord` (kind 2, `JVMTI_CMLR_INLINE_INFO`).
#[repr(C)]
struct InlineRecord {
    header: RecordHeader,
    pc_count: i32,
    pcs: *const PcStackInfo,
}

/// `PCStackInfo`: the frames at one pc, innermost first.
#[repr(C)]
struct PcStackInfo {
    pc: usize,
    frame_count: i32,
    methods: *const jmethodID,
    bcis: *const i32,
}

const JVMTI_CMLR_INLINE_INFO: i32 = 2;
/// `JVM_ACC_NATIVE`.
const ACC_NATIVE: u32 = 0x0100;

/// The frames of a method compiled to `size` bytes at `code`, from its CompiledMethodLoad
/// event (`compile_info` is the event's record chain). Called in the event, where the code is
/// alive; `None` when the walker is not wanted or the code's blob is not found.
pub fn frames_of(
    jvmti: Jvmti,
    method: jmethodID,
    code: usize,
    size: usize,
    compile_info: *const c_void,
) -> Option<CompiledFrames> {
    if !wanted() {
        return None;
    }
    let layout = layout()?;
    let blob = blob_at(layout, VmRead::Direct, code).filter(|blob| blob.code == code)?;
    // The method's code with its stubs, which end where the blob's data begins.
    let code_size = (blob.code_end - code).max(size).min(1 << 30);
    let native = jvmti
        .method_modifiers(method)
        .is_ok_and(|modifiers| modifiers & ACC_NATIVE != 0);
    if !native {
        // A compiled Java method's blob is an nmethod, named by the same string as the
        // others (a native method's wrapper is named otherwise).
        if let Some(name) = VmRead::Direct.word(blob.address + layout.blob_name) {
            let _ = NMETHOD_NAME.compare_exchange(0, name, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
    let mut pcs: Vec<(u32, Vec<(jmethodID, i32)>)> = Vec::new();
    let mut record = compile_info.cast::<RecordHeader>();
    let mut records = 0;
    while !record.is_null() && records < 16 {
        records += 1;
        // SAFETY: JVMTI's record chain, valid during the event; each record starts with the
        // header, and a record of kind 2 is an inline record.
        let header = unsafe { &*record };
        if header.kind == JVMTI_CMLR_INLINE_INFO {
            // SAFETY: as above.
            let inline = unsafe { &*record.cast::<InlineRecord>() };
            for index in 0..inline.pc_count.max(0) as usize {
                // SAFETY: `pcs` holds `pc_count` entries, each with `frame_count` methods and
                // bytecode indices.
                let info = unsafe { &*inline.pcs.add(index) };
                let Some(offset) = info.pc.checked_sub(code).filter(|offset| *offset <= size)
                else {
                    continue;
                };
                let frames = (0..info.frame_count.max(0) as usize)
                    // SAFETY: as above.
                    .map(|frame| unsafe { (*info.methods.add(frame), *info.bcis.add(frame)) })
                    .collect();
                pcs.push((offset as u32, frames));
            }
        }
        record = header.next;
    }
    pcs.sort_by_key(|(offset, _)| *offset);
    let mut scope_starts = Vec::with_capacity(pcs.len() + 1);
    let mut scopes = Vec::new();
    for (_, frames) in &pcs {
        scope_starts.push(scopes.len() as u32);
        scopes.extend_from_slice(frames);
    }
    scope_starts.push(scopes.len() as u32);
    Some(CompiledFrames {
        method,
        native,
        instructions_size: size as u32,
        code_size: code_size as u32,
        frame_words: blob.frame_words,
        frame_complete: blob.frame_complete,
        pc_offsets: pcs.iter().map(|(offset, _)| *offset).collect(),
        scope_starts: scope_starts.into(),
        scopes: scopes.into(),
    })
}

/// The address of the name HotSpot gives every nmethod (`"nmethod"`), as its blobs hold it.
static NMETHOD_NAME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What the walker needs of a compiled method's frame, from its reported frames or from its
/// blob.
#[derive(Clone, Copy, Debug)]
struct FrameShape {
    method: jmethodID,
    native: bool,
    instructions_size: u32,
    frame_words: usize,
    frame_complete: Option<u32>,
}

fn shape_of(frames: &CompiledFrames) -> FrameShape {
    FrameShape {
        method: frames.method,
        native: frames.native,
        instructions_size: frames.instructions_size,
        frame_words: frames.frame_words,
        frame_complete: frames.frame_complete,
    }
}

/// How the walker reads the code heap: directly, in a JVMTI event, where the code asked about
/// is alive and so are its blob and its segments' map; or through the kernel, in the signal
/// handler, where a stale address must give `None` rather than a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VmRead {
    Direct,
    ThroughKernel,
}

impl VmRead {
    /// An aligned word.
    fn word(self, address: usize) -> Option<usize> {
        if address % 8 != 0 {
            return None;
        }
        match self {
            // SAFETY: `Direct` is used only in JVMTI events, on the live blob of the event's
            // code and its heap's segment map (see the type's documentation).
            VmRead::Direct => Some(unsafe { (address as *const usize).read() }),
            VmRead::ThroughKernel => {
                KERNEL_READS.fetch_add(1, Ordering::Relaxed);
                let mut word = [0usize; 1];
                crate::native_stack::read_through_kernel(address, &mut word).then_some(word[0])
            }
        }
    }

    /// A byte.
    fn byte(self, address: usize) -> Option<u8> {
        self.word(address & !7)
            .map(|word| word.to_le_bytes()[address & 7])
    }

    /// An aligned 32-bit field (VMStructs' fields are aligned to their size).
    fn int(self, address: usize) -> Option<i32> {
        let at = address & 7;
        let bytes = self.word(address & !7)?.to_le_bytes();
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    }
}

/// Reads of VM memory through the kernel since the last count: what our walk costs beyond its
/// own tables (`walker.kernel_reads`).
static KERNEL_READS: AtomicU64 = AtomicU64::new(0);

/// A word of VM memory, read through the kernel (async-signal-safe; a bad address gives None).
fn vm_word(address: usize) -> Option<usize> {
    VmRead::ThroughKernel.word(address)
}

/// Eight bytes of VM memory at any address, read through the kernel.
fn vm_text8(address: usize) -> Option<[u8; 8]> {
    KERNEL_READS.fetch_add(1, Ordering::Relaxed);
    let mut words = [0usize; 2];
    if !crate::native_stack::read_through_kernel(address & !7, &mut words) {
        return None;
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_le_bytes());
    bytes[8..].copy_from_slice(&words[1].to_le_bytes());
    let at = address & 7;
    bytes[at..at + 8].try_into().ok()
}

/// A compiled method whose code holds `pc` but that JVMTI has not reported yet (HotSpot posts
/// CompiledMethodLoad later, from another thread, so new code runs before we hear of it):
/// found in the handler as HotSpot finds it, through the code heap's segment map, every read
/// through the kernel. Its frame is known (its size from the blob) but not its inlined
/// methods. Returns where its code starts and its frame's shape.
fn unreported_compiled(layout: &WalkerLayout, pc: usize) -> Option<(usize, FrameShape)> {
    let nmethod_name = NMETHOD_NAME.load(Ordering::Relaxed);
    if nmethod_name == 0 {
        return None;
    }
    let blob = blob_at(layout, VmRead::ThroughKernel, pc)?;
    let name = vm_word(blob.address + layout.blob_name)?;
    // The name's text: a blob named at the same address as a known nmethod, or "nmethod".
    let native = name != nmethod_name
        && match vm_text8(name)? {
            text if text == *b"nmethod\0" => false,
            // A native method's wrapper ("native nmethod").
            text if text == *b"native n" => true,
            _ => return None,
        };
    let method = method_id(layout, vm_word(blob.address + layout.nmethod_method)?)?;
    Some((
        blob.code,
        FrameShape {
            method,
            native,
            instructions_size: (blob.code_end - blob.code) as u32,
            frame_words: blob.frame_words,
            frame_complete: blob.frame_complete,
        },
    ))
}

/// The frame size in words of a stub the JVM reported at `code`, when the stub is a code blob
/// of its own (runtime stubs; the routines inside one blob are not). Called in the event.
pub fn stub_frame_words(code: usize) -> Option<usize> {
    if !wanted() {
        return None;
    }
    let layout = layout()?;
    blob_at(layout, VmRead::Direct, code)
        .filter(|blob| blob.code == code)
        .map(|blob| blob.frame_words)
}

/// What the walker reads of a CodeBlob.
#[derive(Clone, Copy, Debug)]
struct Blob {
    address: usize,
    /// Where its code starts and ends (the data after it).
    code: usize,
    code_end: usize,
    /// Its frame's size in words, and from which offset of its code the frame is complete.
    frame_words: usize,
    frame_complete: Option<u32>,
}

/// Segments the lookup steps back at most to find a blob's start (each step is a read, through
/// the kernel in the handler): blobs of up to about 4 MiB.
const MAX_SEGMENT_HOPS: usize = 256;

/// The CodeBlob whose code holds `pc`, found through its code heap's segment map as HotSpot's
/// own lookup does: each byte says how many segments back the block starts (0: here; 0xff:
/// free).
fn blob_at(layout: &WalkerLayout, read: VmRead, pc: usize) -> Option<Blob> {
    let &(low, _, segmap) = layout
        .heap_bounds
        .iter()
        .find(|(low, high, _)| *low <= pc && pc < *high)?;
    let mut segment = (pc - low) >> layout.segment_shift;
    let mut hops = 0;
    loop {
        match read.byte(segmap + segment)? {
            0xff => return None,
            0 => break,
            back if hops < MAX_SEGMENT_HOPS => segment = segment.checked_sub(usize::from(back))?,
            _ => return None,
        }
        hops += 1;
    }
    let block = low + (segment << layout.segment_shift);
    if read.byte(block + layout.block_used)? == 0 {
        return None;
    }
    let address = block + layout.block_size;
    let code = match layout.code_start {
        CodeStart::Offset(at) => address + usize::try_from(read.int(address + at)?).ok()?,
        CodeStart::Pointer(at) => read.word(address + at)?,
    };
    let code_end = address + usize::try_from(read.int(address + layout.data_offset)?).ok()?;
    if !(code <= pc && pc < code_end) {
        return None;
    }
    let frame_words = usize::try_from(read.int(address + layout.frame_size)?)
        .ok()
        .filter(|words| *words < 1 << 16)?;
    let complete = read.int((address + layout.frame_complete) & !3)?;
    let frame_complete = if layout.frame_complete_short {
        // A 16-bit field: the half of the 32-bit word it is in.
        let shift = ((address + layout.frame_complete) & 2) * 8;
        i32::from((complete >> shift) as i16)
    } else {
        complete
    };
    Some(Blob {
        address,
        code,
        code_end,
        frame_words,
        frame_complete: u32::try_from(frame_complete).ok(),
    })
}

/// Why our walk gave up, by the names the check and the sampler record give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum WalkFailure {
    /// The top of the stack is in native code of a thread in the Java state (a leaf call of
    /// the VM's that no native frame walk crossed).
    NativeInJava = 0,
    /// Outside Java code with no Java frame recorded in the thread's anchor.
    NoJavaFrame,
    /// The top of the stack is in a stub the JVM generated.
    StubOnTop,
    /// A pc in code we do not know (no frames kept for it, or no code of the VM's).
    UnknownCode,
    /// A frame's words lie outside the thread's stack or go down instead of up.
    BadFrame,
    /// An interpreted frame's method is one we do not know.
    UnknownMethod,
}

impl WalkFailure {
    pub const ALL: [WalkFailure; 6] = [
        WalkFailure::NativeInJava,
        WalkFailure::NoJavaFrame,
        WalkFailure::StubOnTop,
        WalkFailure::UnknownCode,
        WalkFailure::BadFrame,
        WalkFailure::UnknownMethod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WalkFailure::NativeInJava => "native_in_java",
            WalkFailure::NoJavaFrame => "no_java_frame",
            WalkFailure::StubOnTop => "stub_on_top",
            WalkFailure::UnknownCode => "unknown_code",
            WalkFailure::BadFrame => "bad_frame",
            WalkFailure::UnknownMethod => "unknown_method",
        }
    }
}

/// The registers a walk starts from, and whether `pc` is where the thread was interrupted
/// (rather than a return address).
#[derive(Clone, Copy, Debug)]
pub struct StartFrame {
    pub pc: usize,
    pub sp: usize,
    pub fp: usize,
    /// The interpreter's bytecode pointer register (r13), for an interrupted top frame; in a
    /// method's entry, the caller's stack pointer.
    pub bcp: usize,
    /// rbx, where the interpreter's entry holds the Method it enters.
    pub method_register: usize,
    pub interrupted: bool,
}

impl StartFrame {
    /// The frame a return goes to: `pc` the return address, `sp` and `fp` the caller's.
    pub fn returned_to(pc: usize, sp: usize, fp: usize) -> StartFrame {
        StartFrame {
            pc,
            sp,
            fp,
            bcp: 0,
            method_register: 0,
            interrupted: false,
        }
    }
}

/// x86-64 interpreted frames, in words from the frame pointer (HotSpot's frame_x86.hpp).
const INTERPRETER_SENDER_SP: isize = -1;
const INTERPRETER_METHOD: isize = -3;
const INTERPRETER_BCP: isize = -8;
/// The entry frame's JavaCallWrapper, in words from its frame pointer.
const ENTRY_CALL_WRAPPER: isize = -6;
/// AsyncGetCallTrace's line number of a native method's frame.
const NATIVE_METHOD_BCI: i32 = -3;
/// The bytecode index of an interpreted frame whose bytecode pointer is not one of its method.
const UNKNOWN_BCI: i32 = -1;

/// The thread's stack and the lowest address a walk may read (the interrupted stack pointer).
#[derive(Clone, Copy)]
struct Stack {
    low: usize,
    high: usize,
}

impl Stack {
    /// A word of the stack at or above the walk's lowest address.
    fn word(&self, address: usize) -> Option<usize> {
        if address % 8 != 0 || address < self.low || address > self.high.checked_sub(8)? {
            return None;
        }
        // SAFETY: between the interrupted stack pointer and the top of the thread's own stack,
        // which is mapped and readable while the thread runs.
        Some(unsafe { std::ptr::read_volatile(address as *const usize) })
    }
}

/// A walk of ours: how many frames it wrote, and how many of them (the first) were the top
/// Java frame's, a compiled frame's inlined methods or one interpreted frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    pub frames: usize,
    /// The frames up to the top Java frame's last: its inlined methods, and the stub frames
    /// above it.
    pub leaf_frames: usize,
    /// Whether the top Java frame was interpreted.
    pub top_interpreted: bool,
    /// Whether a frame was of compiled code JVMTI had not reported yet: its method is known,
    /// not the methods inlined into it.
    pub unreported: bool,
    /// Whether the walk ended at a virtual thread's continuation (its carrier's frames below).
    pub virtual_thread: bool,
    /// Where the walk found its top Java frame, and how it reached it (for the check's examples).
    pub top: TopFrame,
    pub started: Start,
}

/// Where a walk found its top Java frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopFrame {
    /// In a compiled method's body, its frame built.
    Compiled,
    /// In a compiled method's entry, before its frame is complete.
    CompiledEntry,
    /// In a compiled method's return, its frame taken down.
    CompiledExit,
    /// At a compiled method's deoptimisation handler.
    Deoptimising,
    /// In compiled code JVMTI has not reported yet.
    Unreported,
    Interpreted,
    /// In the interpreter's entry of a method, before its frame is built.
    InterpreterEntry,
}

impl TopFrame {
    pub const ALL: [TopFrame; 7] = [
        TopFrame::Compiled,
        TopFrame::CompiledEntry,
        TopFrame::CompiledExit,
        TopFrame::Deoptimising,
        TopFrame::Unreported,
        TopFrame::Interpreted,
        TopFrame::InterpreterEntry,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TopFrame::Compiled => "compiled",
            TopFrame::CompiledEntry => "compiled_entry",
            TopFrame::CompiledExit => "compiled_exit",
            TopFrame::Deoptimising => "deoptimising",
            TopFrame::Unreported => "unreported",
            TopFrame::Interpreted => "interpreted",
            TopFrame::InterpreterEntry => "interpreter_entry",
        }
    }
}

/// How a walk reached its top Java frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The interrupted pc was in it.
    Interrupted,
    /// It stepped over a stub on top first.
    Stub,
    /// From native code on top: through the thread's anchor, or the return address into
    /// Java code that the native walk found.
    Native,
}

impl Start {
    pub const ALL: [Start; 3] = [Start::Interrupted, Start::Stub, Start::Native];

    pub fn name(self) -> &'static str {
        match self {
            Start::Interrupted => "interrupted",
            Start::Stub => "stub",
            Start::Native => "native",
        }
    }
}

/// Walks the Java frames from `start` into `out` (room for `room`), innermost first.
/// `thread` is the interrupted thread's JavaThread, `stack` its (low, high) bounds.
///
/// # Safety
/// Called from the signal handler on the interrupted thread, `thread` its live JavaThread and
/// `stack` its own mapped stack; `out` has room for `room` frames.
pub unsafe fn walk(
    thread: usize,
    thread_layout: &ThreadLayout,
    stack: (usize, usize),
    start: StartFrame,
    out: *mut CallFrame,
    room: usize,
) -> Result<Walk, WalkFailure> {
    let layout = layout().ok_or(WalkFailure::UnknownCode)?;
    let (stack_low, stack_high) = stack;
    if !(stack_low <= start.sp && start.sp < stack_high) {
        return Err(WalkFailure::BadFrame);
    }
    let mut stack = Stack {
        low: start.sp,
        high: stack_high,
    };
    let mut frame = start;
    let mut unextended_sp = start.sp;
    // Not interrupted: the native walk found the first return address into Java code.
    let mut started = if start.interrupted {
        Start::Interrupted
    } else {
        Start::Native
    };
    if frame.interrupted && code_map::in_stub(frame.pc) && !is_java_code(layout, frame.pc) {
        started = Start::Stub;
        // A stub the JVM generated (arraycopy, dispatch, adapters), whose frame the caller
        // records as a frame of its own: the walk starts at the Java code that called it.
        let (pc, sp, fp) =
            step_frameless(layout, &stack, frame, None).ok_or(WalkFailure::StubOnTop)?;
        frame = StartFrame::returned_to(pc, sp, fp);
        unextended_sp = sp;
        stack.low = sp;
    }
    if !is_java_code(layout, frame.pc) && !code_map::in_stub(frame.pc) {
        // In native code: the last Java frame is in the thread's anchor, if it left Java.
        // SAFETY: `thread` is this thread's live JavaThread; the offsets were checked.
        let state = unsafe { ((thread + thread_layout.state) as *const i32).read_volatile() };
        if state == thread_layout.in_java {
            return Err(WalkFailure::NativeInJava);
        }
        let anchor = |offset: usize| {
            // SAFETY: as above; the anchor is inside the JavaThread.
            unsafe { ((thread + offset) as *const usize).read_volatile() }
        };
        let last_sp = anchor(thread_layout.last_java_sp);
        if last_sp == 0 {
            return Err(WalkFailure::NoJavaFrame);
        }
        let fp = thread_layout.last_java_fp.map_or(0, anchor);
        let pc = match anchor(thread_layout.last_java_pc) {
            0 => last_sp
                .checked_sub(8)
                .and_then(|at| stack.word(at))
                .ok_or(WalkFailure::BadFrame)?,
            pc => pc,
        };
        if last_sp < stack.low {
            return Err(WalkFailure::BadFrame);
        }
        started = Start::Native;
        frame = StartFrame::returned_to(pc, last_sp, fp);
        unextended_sp = last_sp;
    }
    let mut count = 0;
    let mut leaf_frames = 0;
    let mut top_interpreted = false;
    let mut unreported = false;
    let mut top = TopFrame::Compiled;
    let done = |count: usize,
                leaf_frames: usize,
                top_interpreted: bool,
                unreported: bool,
                virtual_thread: bool,
                top: TopFrame| {
        if count == 0 {
            Err(WalkFailure::NoJavaFrame)
        } else {
            Ok(Walk {
                frames: count,
                leaf_frames: if leaf_frames == 0 { count } else { leaf_frames },
                top_interpreted,
                unreported,
                virtual_thread,
                top,
                started,
            })
        }
    };
    // Stub frames above the first Java frame, which the leaf frames are not.
    let mut stubs_on_top = 0;
    while count < room {
        if count > stubs_on_top && leaf_frames == 0 {
            leaf_frames = count;
        }
        // Compiled code JVMTI reported, else (neither the interpreter, the call stub nor a
        // stub) code it has not reported yet.
        let compiled = code_map::frames_at(frame.pc)
            .map(|(code, frames)| (code, shape_of(frames), Some(frames)))
            .or_else(|| {
                (!code_map::in_interpreter(frame.pc)
                    && frame.pc != layout.call_stub_return
                    && !code_map::in_stub(frame.pc))
                .then(|| unreported_compiled(layout, frame.pc))
                .flatten()
                .map(|(code, shape)| (code, shape, None))
            });
        if let Some((code, shape, frames)) = compiled {
            unreported |= frames.is_none();
            let offset = (frame.pc - code) as u32;
            let state = frame_state(frame, code, &shape);
            if count == stubs_on_top {
                top = match (state, frames) {
                    (_, None) => TopFrame::Unreported,
                    (FrameState::Built, _) if offset >= shape.instructions_size => {
                        TopFrame::Deoptimising
                    }
                    (FrameState::Built, _) => TopFrame::Compiled,
                    (FrameState::Prologue, _) => TopFrame::CompiledEntry,
                    (FrameState::BeforePop | FrameState::Returning, _) => TopFrame::CompiledExit,
                };
            }
            // In the entry no inlined method has begun, and at the return all have ended.
            let own = match state {
                // In the method's stubs: a deoptimisation handler's address that replaced the
                // return address of a method being deoptimised (its frame is as it was).
                FrameState::Built if offset >= shape.instructions_size => {
                    Some([(shape.method, UNKNOWN_BCI)])
                }
                FrameState::Built => None,
                FrameState::Prologue => Some([(shape.method, 0)]),
                FrameState::BeforePop | FrameState::Returning => {
                    Some([(shape.method, UNKNOWN_BCI)])
                }
            };
            let scopes = match (&own, frames) {
                (Some(own), _) => &own[..],
                (None, Some(frames)) => frames.scopes_at(offset, !frame.interrupted),
                (None, None) => &[],
            };
            if scopes.is_empty() {
                // Native code's frame, code without debug information, or code
                // whose inlined methods are not known yet.
                let bci = match (shape.native, frames) {
                    (true, _) => NATIVE_METHOD_BCI,
                    (false, Some(_)) => 0,
                    (false, None) => UNKNOWN_BCI,
                };
                // SAFETY: `count` < `room`.
                unsafe { *out.add(count) = java_frame(shape.method, bci) };
                count += 1;
            }
            for &(method, bci) in scopes {
                if count == room {
                    return done(count, leaf_frames, top_interpreted, unreported, false, top);
                }
                // SAFETY: `count` < `room`.
                unsafe { *out.add(count) = java_frame(method, bci) };
                count += 1;
            }
            let (return_address, sender_sp, caller_fp) =
                compiled_sender(layout, &stack, frame, state, unextended_sp, &shape)?;
            stack.low = sender_sp;
            frame = StartFrame::returned_to(return_address, sender_sp, caller_fp);
            unextended_sp = sender_sp;
        } else if code_map::in_interpreter(frame.pc) {
            let fp = frame.fp;
            if frame.interrupted && !interpreted_frame_at(layout, &stack, frame.sp, fp) {
                // The interpreter's entry of a method, before its frame is built: the method
                // is in rbx, the caller's stack pointer in r13, the return address on top of
                // the stack or just below that stack pointer.
                let method =
                    method_id(layout, frame.method_register).ok_or(WalkFailure::UnknownMethod)?;
                // SAFETY: `count` < `room`.
                unsafe { *out.add(count) = java_frame(method, 0) };
                top_interpreted = true;
                top = TopFrame::InterpreterEntry;
                count += 1;
                let on_top = stack.word(frame.sp).map(|pc| (pc, frame.sp + 8));
                let below_sender = (frame.bcp > frame.sp && frame.bcp % 8 == 0)
                    .then(|| stack.word(frame.bcp - 8).map(|pc| (pc, frame.bcp)))
                    .flatten();
                let (pc, sp) = [on_top, below_sender]
                    .into_iter()
                    .flatten()
                    .find(|&(pc, sp)| plausible_caller(layout, &stack, pc, sp, fp))
                    .ok_or(WalkFailure::BadFrame)?;
                stack.low = sp;
                frame = StartFrame::returned_to(pc, sp, fp);
                unextended_sp = sp;
                continue;
            }
            if fp < frame.sp || fp % 8 != 0 {
                return Err(WalkFailure::BadFrame);
            }
            let slot = |index: isize| {
                fp.checked_add_signed(index * 8)
                    .and_then(|at| stack.word(at))
                    .ok_or(WalkFailure::BadFrame)
            };
            let method = slot(INTERPRETER_METHOD)?;
            let id = method_id(layout, method).ok_or(WalkFailure::UnknownMethod)?;
            // The interpreter keeps its bytecode pointer in r13 and stores it in the frame at
            // calls: where the thread was interrupted, the register is the newer.
            let from_register = (frame.interrupted && frame.bcp != 0)
                .then(|| bytecode_index(layout, method, frame.bcp))
                .filter(|bci| *bci >= 0);
            let bci = match from_register {
                Some(bci) => bci,
                None => bytecode_index(layout, method, slot(INTERPRETER_BCP)?),
            };
            // SAFETY: `count` < `room`.
            unsafe { *out.add(count) = java_frame(id, bci) };
            top_interpreted |= count == 0;
            if count == stubs_on_top {
                top = TopFrame::Interpreted;
            }
            count += 1;
            let return_address = slot(1)?;
            let caller_fp = slot(0)?;
            let sender_unextended = slot(INTERPRETER_SENDER_SP)?;
            let sender_sp = fp + 16;
            if sender_unextended < frame.sp || sender_unextended > sender_sp + (1 << 20) {
                return Err(WalkFailure::BadFrame);
            }
            stack.low = sender_sp.min(sender_unextended);
            frame = StartFrame::returned_to(return_address, sender_sp, caller_fp);
            unextended_sp = sender_unextended;
        } else if frame.pc == layout.call_stub_return {
            // An entry frame: the VM called Java here. Below it, if anything, are the Java
            // frames that called the VM, as the call's wrapper anchored them.
            let wrapper = frame
                .fp
                .checked_add_signed(ENTRY_CALL_WRAPPER * 8)
                .and_then(|at| stack.word(at))
                .ok_or(WalkFailure::BadFrame)?;
            let anchor = wrapper + layout.wrapper_anchor;
            let last_sp = stack.word(anchor + layout.anchor_sp).unwrap_or(0);
            if last_sp == 0 {
                return done(count, leaf_frames, top_interpreted, unreported, false, top);
            }
            if last_sp <= frame.sp {
                return Err(WalkFailure::BadFrame);
            }
            let pc = match stack.word(anchor + layout.anchor_pc) {
                Some(0) | None => stack.word(last_sp - 8).ok_or(WalkFailure::BadFrame)?,
                Some(pc) => pc,
            };
            let fp = stack.word(anchor + layout.anchor_fp).unwrap_or(0);
            stack.low = last_sp;
            frame = StartFrame::returned_to(pc, last_sp, fp);
            unextended_sp = last_sp;
        } else if code_map::is_continuation_return(frame.pc) {
            // A virtual thread's frames end here: the rest of its stack is in the heap, and
            // below are its carrier's frames, which are not the virtual thread's.
            return done(count, leaf_frames, top_interpreted, unreported, true, top);
        } else if code_map::in_stub(frame.pc) {
            // A stub's frame between Java frames (a runtime stub that called the VM): a frame
            // of its own, named at dump, stepped over by its blob's frame size where known.
            // SAFETY: `count` < `room`.
            unsafe { *out.add(count) = CallFrame::native_pc(frame.pc) };
            if count == stubs_on_top {
                stubs_on_top += 1;
            }
            count += 1;
            let caller = match code_map::stub_frame_words(frame.pc).filter(|words| *words >= 2) {
                Some(words) => {
                    let sender_sp = unextended_sp + words * 8;
                    stack
                        .word(sender_sp - 8)
                        .zip(stack.word(sender_sp - 16))
                        .map(|(address, fp)| (address, sender_sp, fp))
                        .filter(|&(address, sp, fp)| {
                            plausible_caller(layout, &stack, address, sp, fp)
                        })
                }
                None => step_frameless(layout, &stack, frame, None),
            };
            let (pc, sp, fp) = caller.ok_or(WalkFailure::UnknownCode)?;
            stack.low = sp;
            frame = StartFrame::returned_to(pc, sp, fp);
            unextended_sp = sp;
        } else {
            return Err(WalkFailure::UnknownCode);
        }
    }
    done(count, leaf_frames, top_interpreted, unreported, false, top)
}

/// Whether `pc` is in code whose frames the walker steps over.
fn is_java_code(layout: &WalkerLayout, pc: usize) -> bool {
    code_map::frames_at(pc).is_some()
        || code_map::in_interpreter(pc)
        || pc == layout.call_stub_return
        || (!code_map::in_stub(pc) && unreported_compiled(layout, pc).is_some())
}

fn java_frame(method: jmethodID, bci: i32) -> CallFrame {
    CallFrame {
        lineno: bci,
        method_id: method,
    }
}

/// Where an interrupted compiled method is in building or taking down its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameState {
    /// The frame is complete (or the pc is a return address).
    Built,
    /// Its entry, before the frame is complete: no inlined method has begun.
    Prologue,
    /// Its frame is released and the frame pointer is yet to be popped.
    BeforePop,
    /// Its frame and frame pointer are gone (the return's safepoint poll, the `ret`).
    Returning,
}

/// x86-64's `ret`, `pop rbp`, and the start of `cmp rsp, [r15 + disp32]` (the return's
/// safepoint poll that follows `pop rbp` in HotSpot's compiled code).
const RET: u8 = 0xc3;
const POP_RBP: u8 = 0x5d;
const RETURN_POLL: [u8; 3] = [0x49, 0x3b, 0xa7];

fn frame_state(frame: StartFrame, code: usize, frames: &FrameShape) -> FrameState {
    if !frame.interrupted {
        return FrameState::Built;
    }
    let offset = (frame.pc - code) as u32;
    if frames
        .frame_complete
        .is_some_and(|complete| offset < complete)
    {
        return FrameState::Prologue;
    }
    match instruction_at(frame.pc) {
        Some([POP_RBP, ..]) => FrameState::BeforePop,
        Some([RET, ..]) => FrameState::Returning,
        Some([a, b, c, ..]) if [a, b, c] == RETURN_POLL => FrameState::Returning,
        _ => FrameState::Built,
    }
}

/// The caller of a compiled frame: (return address, its stack pointer, its frame pointer).
fn compiled_sender(
    layout: &WalkerLayout,
    stack: &Stack,
    frame: StartFrame,
    state: FrameState,
    unextended_sp: usize,
    frames: &FrameShape,
) -> Result<(usize, usize, usize), WalkFailure> {
    let frameless = || {
        step_frameless(layout, stack, frame, Some(frames.frame_words)).ok_or(WalkFailure::BadFrame)
    };
    match state {
        FrameState::Prologue | FrameState::Returning => return frameless(),
        FrameState::BeforePop => {
            let caller_fp = stack.word(frame.sp).ok_or(WalkFailure::BadFrame)?;
            let return_address = stack.word(frame.sp + 8).ok_or(WalkFailure::BadFrame)?;
            return Ok((return_address, frame.sp + 16, caller_fp));
        }
        FrameState::Built => {}
    }
    if frames.frame_words < 2 {
        return Err(WalkFailure::BadFrame);
    }
    let sender_sp = unextended_sp + frames.frame_words * 8;
    let return_address = stack.word(sender_sp - 8).ok_or(WalkFailure::BadFrame)?;
    let caller_fp = stack.word(sender_sp - 16).ok_or(WalkFailure::BadFrame)?;
    if plausible_caller(layout, stack, return_address, sender_sp, caller_fp) {
        return Ok((return_address, sender_sp, caller_fp));
    }
    // The frame was being built or taken down after all, in code we did not recognise.
    if frame.interrupted {
        return frameless().map_err(|_| WalkFailure::UnknownCode);
    }
    Err(WalkFailure::UnknownCode)
}

/// The caller of code interrupted before it built its frame (or after it took it down), or
/// that keeps only a frame pointer: the return address on top of the stack, else above a
/// pushed frame pointer, else (a compiled method of `frame_words` whose entry made room for its
/// frame before it saved the frame pointer there) at the frame's top, else above the frame
/// pointer's record; the first that is a plausible caller (see [`plausible_caller`]).
fn step_frameless(
    layout: &WalkerLayout,
    stack: &Stack,
    frame: StartFrame,
    frame_words: Option<usize>,
) -> Option<(usize, usize, usize)> {
    let on_top = stack
        .word(frame.sp)
        .map(|address| (address, frame.sp + 8, frame.fp));
    let above_pushed_fp = stack
        .word(frame.sp + 8)
        .zip(stack.word(frame.sp))
        .map(|(address, fp)| (address, frame.sp + 16, fp));
    let frame_made = frame_words.filter(|words| *words > 2).and_then(|words| {
        let caller_sp = frame.sp + words * 8;
        stack
            .word(caller_sp - 8)
            .map(|address| (address, caller_sp, frame.fp))
    });
    let above_record = (frame.fp >= frame.sp && frame.fp - frame.sp < 1 << 16)
        .then(|| stack.word(frame.fp + 8).zip(stack.word(frame.fp)))
        .flatten()
        .map(|(address, fp)| (address, frame.fp + 16, fp));
    [on_top, above_pushed_fp, frame_made, above_record]
        .into_iter()
        .flatten()
        .find(|&(address, sp, fp)| plausible_caller(layout, stack, address, sp, fp))
}

/// Whether `fp` holds an interpreted frame above `sp`: a frame pointer on the stack whose
/// frame names a method we know.
fn interpreted_frame_at(layout: &WalkerLayout, stack: &Stack, sp: usize, fp: usize) -> bool {
    fp % 8 == 0
        && fp >= sp
        && fp - sp < 1 << 20
        && fp
            .checked_add_signed(INTERPRETER_METHOD * 8)
            .and_then(|at| stack.word(at))
            .is_some_and(|method| {
                // The index answers without a read of the VM's memory for the Methods it
                // holds; those a redefinition made are asked of their class.
                code_map::method_of_structure(method).is_some()
                    || method_id(layout, method).is_some()
            })
}

/// Whether a return address, with the stack and frame pointers the caller would have after the
/// return, can be a Java caller: compiled code of a known method; or the interpreter or the
/// call stub, whose frame pointer must then hold a frame above the stack pointer (and, for the
/// interpreter, a method we know).
fn plausible_caller(
    layout: &WalkerLayout,
    stack: &Stack,
    address: usize,
    sp: usize,
    fp: usize,
) -> bool {
    if code_map::frames_at(address).is_some() {
        return true;
    }
    let frame_above = fp % 8 == 0 && fp >= sp && fp - sp < 1 << 20;
    if code_map::in_interpreter(address) {
        return interpreted_frame_at(layout, stack, sp, fp);
    }
    if address == layout.call_stub_return {
        return frame_above;
    }
    if code_map::is_continuation_return(address) {
        return true;
    }
    !code_map::in_stub(address) && unreported_compiled(layout, address).is_some()
}

/// The first bytes of the instruction at `pc`, where an interrupted thread was running: its
/// page is mapped and readable, so it is read directly, up to that page's end (zeros after).
fn instruction_at(pc: usize) -> Option<[u8; 8]> {
    let page_end = (pc | 4095) + 1;
    let mut bytes = [0u8; 8];
    for (at, byte) in (pc..page_end).zip(bytes.iter_mut()) {
        // SAFETY: `at` lies in the page of code the interrupted thread was executing.
        *byte = unsafe { std::ptr::read_volatile(at as *const u8) };
    }
    Some(bytes)
}

/// The bytecode index of `bcp` in the interpreted `method` (a Method structure), read through
/// the kernel; -1 when `bcp` is not in its bytecodes, -3 for a native method's (none).
fn bytecode_index(layout: &WalkerLayout, method: usize, bcp: usize) -> i32 {
    let Some((code, code_size, native)) =
        code_map::bytecodes_of(method).or_else(|| read_bytecodes(layout, method))
    else {
        return UNKNOWN_BCI;
    };
    match bcp.checked_sub(code) {
        Some(bci) if bci < code_size as usize => bci as i32,
        _ if native => NATIVE_METHOD_BCI,
        _ => UNKNOWN_BCI,
    }
}

/// Where a Method's bytecodes are, read from the VM's memory through the kernel and kept for
/// the next samples: (start, size, whether the method is native).
fn read_bytecodes(layout: &WalkerLayout, method: usize) -> Option<(usize, u32, bool)> {
    let const_method = vm_word(method + layout.const_method)?;
    let code_size = vm_text8(const_method + layout.code_size)?;
    let code_size = u32::from(u16::from_le_bytes([code_size[0], code_size[1]]));
    // Only a method without bytecodes can be native: the flags are read for those alone.
    let native = code_size == 0
        && vm_text8(method + layout.access_flags).is_some_and(|flags| {
            u32::from_le_bytes([flags[0], flags[1], flags[2], flags[3]]) & ACC_NATIVE != 0
        });
    let code = const_method + layout.const_method_size;
    code_map::remember_bytecodes(method, code, code_size, native);
    Some((code, code_size, native))
}

static FAILURES: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
/// Samples ours walked (`walker=vm`).
static WALKED: AtomicU64 = AtomicU64::new(0);

/// Counts a walk of ours: walked, or why not.
pub fn count_walk(result: Result<Walk, WalkFailure>) {
    match result {
        Ok(_) => WALKED.fetch_add(1, Ordering::Relaxed),
        Err(failure) => FAILURES[failure as usize].fetch_add(1, Ordering::Relaxed),
    };
}

/// The counts since the last call, by name: `walked`, `kernel_reads` and `failed.<why>` (the
/// check's own are `walker_check.rs`'s).
pub fn take_counts() -> Vec<(String, u64)> {
    let mut counts = Vec::new();
    let walked = WALKED.swap(0, Ordering::Relaxed);
    if walked > 0 {
        counts.push(("walked".to_string(), walked));
    }
    let refused = REFUSED_METHOD_IDS.swap(0, Ordering::Relaxed);
    if refused > 0 {
        counts.push(("refused_method_ids".to_string(), refused));
    }
    let kernel_reads = KERNEL_READS.swap(0, Ordering::Relaxed);
    if kernel_reads > 0 {
        counts.push(("kernel_reads".to_string(), kernel_reads));
    }
    for failure in WalkFailure::ALL {
        let count = FAILURES[failure as usize].swap(0, Ordering::Relaxed);
        if count > 0 {
            counts.push((format!("failed.{}", failure.name()), count));
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pc_between_debug_points_belongs_to_the_code_after_the_last() {
        let (root, caller, left, right) = (
            1 as jmethodID,
            2 as jmethodID,
            3 as jmethodID,
            4 as jmethodID,
        );
        // Records at 16: root@7 → caller@3 → left@5; at 32: root@7 → caller@3 → right@2;
        // at 48: root@12.
        let frames = CompiledFrames {
            method: root,
            native: false,
            instructions_size: 64,
            code_size: 80,
            frame_words: 4,
            frame_complete: Some(8),
            pc_offsets: vec![16, 32, 48].into(),
            scope_starts: vec![0, 3, 6, 7].into(),
            scopes: vec![
                (left, 5),
                (caller, 3),
                (root, 7),
                (right, 2),
                (caller, 3),
                (root, 7),
                (root, 12),
            ]
            .into(),
        };
        // Before the first record, the first record's frames.
        assert_eq!(
            frames.scopes_at(0, false),
            &[(left, 5), (caller, 3), (root, 7)]
        );
        // An interrupted pc: the last record at or before it.
        for pc in [16, 17, 31] {
            assert_eq!(frames.scopes_at(pc, false)[0], (left, 5));
        }
        assert_eq!(frames.scopes_at(40, false)[0], (right, 2));
        // After the last record, the last's.
        assert_eq!(frames.scopes_at(60, false), &[(root, 12)]);
        // A return address has its own record; without one (a call into the VM), the next.
        assert_eq!(frames.scopes_at(16, true)[0], (left, 5));
        assert_eq!(frames.scopes_at(32, true)[0], (right, 2));
        assert_eq!(frames.scopes_at(20, true)[0], (right, 2));
        assert_eq!(frames.scopes_at(40, true), &[(root, 12)]);
        // After the method's entry record (bytecode -1), the body's next record.
        let entered = CompiledFrames {
            pc_offsets: vec![4, 32].into(),
            scopes: vec![(root, -1), (left, 5), (root, 12)].into(),
            scope_starts: vec![0, 1, 3].into(),
            ..frames
        };
        assert_eq!(entered.scopes_at(4, false)[0], (left, 5));
        assert_eq!(entered.scopes_at(20, false)[0], (left, 5));
    }
}
