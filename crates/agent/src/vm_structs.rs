//! The few HotSpot internals the signal handler reads to walk samples taken in VM code: field
//! offsets from the VMStructs tables libjvm exports for its serviceability agent, read once at
//! start-up and checked against the running thread before the handler may use them. A JVM whose
//! tables lack a field, or whose values fail a check, gets no layout, and its samples in VM code
//! stay failed walks as before.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use crate::jni::Jni;
use crate::jvmti::{JNIEnv, Jvmti};

/// Where a JavaThread keeps what the handler needs, relative to the thread's JNIEnv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadLayout {
    /// The JNIEnv's distance from the JavaThread that embeds it.
    pub env_offset: usize,
    /// `JavaThread::_thread_state` (a 32-bit enum).
    pub state: usize,
    /// `JavaThread::_anchor` plus `JavaFrameAnchor::_last_Java_sp`.
    pub last_java_sp: usize,
    /// `JavaThread::_anchor` plus `JavaFrameAnchor::_last_Java_pc`.
    pub last_java_pc: usize,
    /// `JavaThread::_anchor` plus `JavaFrameAnchor::_last_Java_fp`, where the platform keeps
    /// one (x86): the frame pointer of the stub that called the VM.
    pub last_java_fp: Option<usize>,
    /// `JavaThread::_stack_base`: the highest address of the thread's stack, which bounds what
    /// the handler may read above a stack pointer.
    pub stack_base: usize,
    /// `JavaThread::_stack_size`: the size of the thread's stack below its base.
    pub stack_size: usize,
    /// The value of `_thread_in_vm`: the thread runs the VM's own code for Java.
    pub in_vm: i32,
    /// The value of `_thread_in_Java`: the thread runs Java code, or VM code that Java code
    /// called without leaving that state (HotSpot's leaf runtime calls).
    pub in_java: i32,
}

impl ThreadLayout {
    /// The JavaThread of a JNIEnv.
    pub fn thread_of(&self, env: *mut JNIEnv) -> Option<usize> {
        (env as usize).checked_sub(self.env_offset)
    }

    /// A JavaThread's stack as (lowest, highest) address, if its fields hold one.
    ///
    /// # Safety
    /// `thread` must be a live JavaThread (e.g. the calling thread's, from its JNIEnv).
    pub unsafe fn stack_of(&self, thread: usize) -> Option<(usize, usize)> {
        // SAFETY: the caller's promise; the offsets were checked at start-up.
        let (top, size) = unsafe {
            (
                self.stack_top(thread),
                ((thread + self.stack_size) as *const usize).read_volatile(),
            )
        };
        (top != 0 && size != 0 && size <= MAX_STACK).then(|| (top.saturating_sub(size), top))
    }

    /// The top of a JavaThread's stack.
    ///
    /// # Safety
    /// `thread` must be a live JavaThread (e.g. the calling thread's, from its JNIEnv).
    pub unsafe fn stack_top(&self, thread: usize) -> usize {
        // SAFETY: the caller's promise; the offset was checked at start-up.
        unsafe { ((thread + self.stack_base) as *const usize).read_volatile() }
    }
}

static LAYOUT: OnceLock<Option<ThreadLayout>> = OnceLock::new();

/// The layout, once learnt and checked; `None` before, or on a JVM where it could not be.
pub fn thread_layout() -> Option<&'static ThreadLayout> {
    LAYOUT.get().and_then(Option::as_ref)
}

/// Learns the layout on the calling Java thread, which must be running native code (a JVMTI
/// callback or Agent_OnAttach). Returns why not, for the agent's verbose output.
pub fn learn(jvmti: Jvmti, jni: *mut JNIEnv) -> Result<ThreadLayout, String> {
    let learnt = read_layout(jvmti, jni);
    let _ = LAYOUT.set(learnt.as_ref().ok().copied());
    learnt
}

fn read_layout(jvmti: Jvmti, jni: *mut JNIEnv) -> Result<ThreadLayout, String> {
    let tables = Tables::find().ok_or("libjvm exports no VMStructs tables")?;
    let field = |type_name: &str, field_name: &str| {
        tables
            .field_offset(type_name, field_name)
            .ok_or_else(|| format!("no {type_name}::{field_name} in VMStructs"))
    };
    let constant = |name: &str| {
        tables
            .int_constant(name)
            .ok_or_else(|| format!("no {name} in VMStructs"))
    };
    let anchor = field("JavaThread", "_anchor")?;
    let state = field("JavaThread", "_thread_state")?;
    let last_java_sp = anchor + field("JavaFrameAnchor", "_last_Java_sp")?;
    let last_java_pc = anchor + field("JavaFrameAnchor", "_last_Java_pc")?;
    let last_java_fp = tables
        .field_offset("JavaFrameAnchor", "_last_Java_fp")
        .map(|offset| anchor + offset)
        .filter(|offset| *offset <= MAX_FIELD_OFFSET && offset % 8 == 0);
    let stack_base = field("JavaThread", "_stack_base")?;
    let stack_size = field("JavaThread", "_stack_size")?;
    let in_vm = constant("_thread_in_vm")?;
    let in_java = constant("_thread_in_Java")?;
    let in_native = constant("_thread_in_native")?;
    if [state, last_java_sp, last_java_pc, stack_base, stack_size]
        .iter()
        .any(|offset| *offset > MAX_FIELD_OFFSET || offset % 4 != 0)
        || last_java_sp % 8 != 0
        || last_java_pc % 8 != 0
        || stack_base % 8 != 0
        || stack_size % 8 != 0
    {
        return Err("VMStructs offsets out of the expected range".into());
    }
    let thread = current_java_thread(jvmti, jni)?;
    let env_offset = (jni as usize)
        .checked_sub(thread)
        .filter(|offset| *offset < MAX_FIELD_OFFSET && offset % 8 == 0)
        .ok_or("the JNIEnv is not inside its JavaThread")?;
    // SAFETY: `thread` is the calling thread's live JavaThread (Thread.eetop) and `state` an
    // offset VMStructs gives inside it, checked to be small and aligned.
    let current_state = unsafe { ((thread + state) as *const i32).read_volatile() };
    if current_state != in_native {
        return Err(format!(
            "VMStructs' thread state reads {current_state}, not _thread_in_native ({in_native})"
        ));
    }
    // SAFETY: as above.
    let top = unsafe { ((thread + stack_base) as *const usize).read_volatile() };
    // SAFETY: as above.
    let size = unsafe { ((thread + stack_size) as *const usize).read_volatile() };
    let here = &top as *const usize as usize;
    if !(here < top && top - here < MAX_STACK && size <= MAX_STACK && top - size < here) {
        return Err(format!(
            "VMStructs' stack ({:#x}, {top:#x}) does not hold this thread's stack ({here:#x})",
            top.wrapping_sub(size)
        ));
    }
    Ok(ThreadLayout {
        env_offset,
        state,
        last_java_sp,
        last_java_pc,
        last_java_fp,
        stack_base,
        stack_size,
        in_vm,
        in_java,
    })
}

/// The largest thread stack believed (-Xss is at most 1 GiB).
const MAX_STACK: usize = 1 << 30;

/// Offsets inside a JavaThread are a few KiB at most: a larger one is a misread table.
const MAX_FIELD_OFFSET: usize = 1 << 16;

/// The calling thread's JavaThread, from java.lang.Thread's `eetop`, where HotSpot keeps it.
fn current_java_thread(jvmti: Jvmti, jni: *mut JNIEnv) -> Result<usize, String> {
    let jni = Jni(jni);
    let thread = jvmti
        .current_thread()
        .map_err(|error| format!("no current thread: {error:?}"))?;
    let class = jni
        .find_class("java/lang/Thread")
        .map_err(|_| "no java.lang.Thread")?;
    let eetop = jni
        .field_id(class, "eetop", "J")
        .map_err(|_| "java.lang.Thread has no eetop")?;
    // SAFETY: reading a long field is a plain JNI call.
    let value = unsafe { jni.field(thread, eetop, b'J').value.j };
    jni.delete_local_ref(class);
    jni.delete_local_ref(thread);
    usize::try_from(value)
        .ok()
        .filter(|address| *address != 0 && address % 8 == 0)
        .ok_or_else(|| "Thread.eetop holds no JavaThread".into())
}

/// HotSpot's exported VMStructs tables: arrays of entries whose field positions the JVM exports
/// too, each ending with an entry whose name is null.
pub(crate) struct Tables {
    structs: *const u8,
    struct_type_name: usize,
    struct_field_name: usize,
    struct_type_string: usize,
    struct_is_static: usize,
    struct_offset: usize,
    struct_address: usize,
    struct_stride: usize,
    types: *const u8,
    type_name: usize,
    type_size: usize,
    type_stride: usize,
    constants: *const u8,
    constant_name: usize,
    constant_value: usize,
    constant_stride: usize,
}

/// Whether this JVM is HotSpot (it exports the VMStructs tables).
pub fn is_hotspot() -> bool {
    exported(c"gHotSpotVMStructs").is_some()
}

/// An exported variable of libjvm, by name.
fn exported(name: &CStr) -> Option<*const c_void> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!symbol.is_null()).then_some(symbol.cast_const())
}

fn exported_u64(name: &CStr) -> Option<usize> {
    // SAFETY: HotSpot exports these names as `uint64_t` variables.
    exported(name).map(|at| unsafe { (at as *const u64).read() } as usize)
}

fn exported_pointer(name: &CStr) -> Option<*const u8> {
    // SAFETY: HotSpot exports these names as pointer variables to its tables.
    exported(name)
        .map(|at| unsafe { (at as *const *const u8).read() })
        .filter(|table| !table.is_null())
}

/// Entries read at most from a table: HotSpot's have a few thousand.
const MAX_ENTRIES: usize = 1 << 15;

impl Tables {
    pub(crate) fn find() -> Option<Tables> {
        Some(Tables {
            structs: exported_pointer(c"gHotSpotVMStructs")?,
            struct_type_name: exported_u64(c"gHotSpotVMStructEntryTypeNameOffset")?,
            struct_field_name: exported_u64(c"gHotSpotVMStructEntryFieldNameOffset")?,
            struct_type_string: exported_u64(c"gHotSpotVMStructEntryTypeStringOffset")?,
            struct_is_static: exported_u64(c"gHotSpotVMStructEntryIsStaticOffset")?,
            struct_offset: exported_u64(c"gHotSpotVMStructEntryOffsetOffset")?,
            struct_address: exported_u64(c"gHotSpotVMStructEntryAddressOffset")?,
            struct_stride: exported_u64(c"gHotSpotVMStructEntryArrayStride")?,
            types: exported_pointer(c"gHotSpotVMTypes")?,
            type_name: exported_u64(c"gHotSpotVMTypeEntryTypeNameOffset")?,
            type_size: exported_u64(c"gHotSpotVMTypeEntrySizeOffset")?,
            type_stride: exported_u64(c"gHotSpotVMTypeEntryArrayStride")?,
            constants: exported_pointer(c"gHotSpotVMIntConstants")?,
            constant_name: exported_u64(c"gHotSpotVMIntConstantEntryNameOffset")?,
            constant_value: exported_u64(c"gHotSpotVMIntConstantEntryValueOffset")?,
            constant_stride: exported_u64(c"gHotSpotVMIntConstantEntryArrayStride")?,
        })
    }

    /// The text a table entry's pointer field at `at` points to, or `None` at the table's end.
    fn name_at(entry: *const u8, at: usize) -> Option<&'static CStr> {
        // SAFETY: `entry` is inside an exported table whose layout the JVM exports; a name field
        // holds null or a NUL-terminated string in libjvm's read-only data.
        unsafe {
            let name = entry.add(at).cast::<*const c_char>().read_unaligned();
            (!name.is_null()).then(|| CStr::from_ptr(name))
        }
    }

    /// The entry of `type_name::field_name` in the structs table.
    fn struct_entry(&self, type_name: &str, field_name: &str) -> Option<*const u8> {
        for index in 0..MAX_ENTRIES {
            // SAFETY: the table goes on until its null-named entry, which ends the loop.
            let entry = unsafe { self.structs.add(index * self.struct_stride) };
            let this_type = Self::name_at(entry, self.struct_type_name)?;
            let Some(this_field) = Self::name_at(entry, self.struct_field_name) else {
                continue;
            };
            if this_type.to_bytes() == type_name.as_bytes()
                && this_field.to_bytes() == field_name.as_bytes()
            {
                return Some(entry);
            }
        }
        None
    }

    /// Whether an entry is of a static field.
    fn is_static(&self, entry: *const u8) -> bool {
        // SAFETY: the entry's `isStatic` (int32) is where the exported position says.
        unsafe {
            entry
                .add(self.struct_is_static)
                .cast::<i32>()
                .read_unaligned()
                != 0
        }
    }

    /// The offset of an instance field inside its type.
    pub(crate) fn field_offset(&self, type_name: &str, field_name: &str) -> Option<usize> {
        let entry = self.struct_entry(type_name, field_name)?;
        if self.is_static(entry) {
            return None;
        }
        // SAFETY: the entry's `offset` (uint64) is where the exported position says.
        let offset = unsafe { entry.add(self.struct_offset).cast::<u64>().read_unaligned() };
        Some(offset as usize)
    }

    /// The C++ type of a field as VMStructs names it (`int`, `int16_t`, `address`).
    pub(crate) fn field_type(&self, type_name: &str, field_name: &str) -> Option<&'static CStr> {
        let entry = self.struct_entry(type_name, field_name)?;
        Self::name_at(entry, self.struct_type_string)
    }

    /// The address of a static field.
    pub(crate) fn static_address(&self, type_name: &str, field_name: &str) -> Option<usize> {
        let entry = self.struct_entry(type_name, field_name)?;
        if !self.is_static(entry) {
            return None;
        }
        // SAFETY: the entry's `address` (a pointer) is where the exported position says.
        let address = unsafe {
            entry
                .add(self.struct_address)
                .cast::<usize>()
                .read_unaligned()
        };
        (address != 0).then_some(address)
    }

    /// The size of a type, in bytes.
    pub(crate) fn type_size(&self, type_name: &str) -> Option<usize> {
        for index in 0..MAX_ENTRIES {
            // SAFETY: the table goes on until its null-named entry, which ends the loop.
            let entry = unsafe { self.types.add(index * self.type_stride) };
            let this_type = Self::name_at(entry, self.type_name)?;
            if this_type.to_bytes() == type_name.as_bytes() {
                // SAFETY: the entry's `size` (uint64) is where the exported position says.
                let size = unsafe { entry.add(self.type_size).cast::<u64>().read_unaligned() };
                return Some(size as usize);
            }
        }
        None
    }

    pub(crate) fn int_constant(&self, name: &str) -> Option<i32> {
        for index in 0..MAX_ENTRIES {
            // SAFETY: as in `field_offset`.
            let entry = unsafe { self.constants.add(index * self.constant_stride) };
            let this_name = Self::name_at(entry, self.constant_name)?;
            if this_name.to_bytes() == name.as_bytes() {
                // SAFETY: the entry's `value` (int32) is where the exported position says.
                return Some(unsafe {
                    entry
                        .add(self.constant_value)
                        .cast::<i32>()
                        .read_unaligned()
                });
            }
        }
        None
    }
}
