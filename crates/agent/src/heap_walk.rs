//! The heap walk behind heap=dump: every live object, found by JVMTI's FollowReferences at a
//! safepoint, handed to a [`HeapSink`] that writes HPROF's binary heap dump records or its
//! ASCII dump. (One walk from the roots to the records; at about 1,500 lines it is kept in one
//! file so that the identities, the callbacks and the record layout read together.)
//!
//! The dump runs in a JVMTI environment of its own, so its tags never mix with the allocation
//! sampler's and all go away with it. Classes are tagged first, with their field layouts, so
//! that each object's field values can be placed as HPROF lays them out: the class's own
//! fields, then its super classes'.
//!
//! Objects must be told apart: a reference names its referee, a field value its object. JVMTI's
//! way is a tag on every object, but its tag map costs about a microsecond an object to fill
//! (a hashtable entry and a weak handle each, found again at every reference) and as long
//! again to empty: five times `jcmd GC.heap_dump`'s whole time. So where the JVM is HotSpot the
//! walk tells objects apart by address instead, as HotSpot's own dumper does: HotSpot hands each
//! callback the tag in a `CallbackWrapper` on the VM thread's stack, the object's address two
//! words before it, its size one word before (equal to the callback's `size`), its class's tag
//! one word after (equal to the callback's `class_tag`). Objects do not move during the walk
//! (one safepoint), and the addresses are only compared and written, never followed. A probe
//! walk over objects made for it checks that layout before each dump, and every callback checks
//! the words it reads against what JVMTI passed; where the probe fails the walk tags every
//! object, as JVMTI intends (see [`Identity`]).

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use jvmti_bindings::sys::jni::jvalue;
use jvmti_bindings::sys::jvmti::{
    jvmtiHeapReferenceKind, jvmtiPrimitiveType, JVMTI_CLASS_STATUS_ARRAY,
    JVMTI_CLASS_STATUS_PREPARED, JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT, JVMTI_HEAP_REFERENCE_CLASS,
    JVMTI_HEAP_REFERENCE_CLASS_LOADER, JVMTI_HEAP_REFERENCE_FIELD, JVMTI_HEAP_REFERENCE_JNI_GLOBAL,
    JVMTI_HEAP_REFERENCE_JNI_LOCAL, JVMTI_HEAP_REFERENCE_MONITOR,
    JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN, JVMTI_HEAP_REFERENCE_SIGNERS,
    JVMTI_HEAP_REFERENCE_STACK_LOCAL, JVMTI_HEAP_REFERENCE_STATIC_FIELD,
    JVMTI_HEAP_REFERENCE_SYSTEM_CLASS, JVMTI_HEAP_REFERENCE_THREAD, JVMTI_VISIT_ABORT,
    JVMTI_VISIT_OBJECTS,
};
use openprof_format::hprof_binary::BasicType;
use openprof_format::java_names::class_name_from_signature;

use crate::error::{AgentResult, JvmtiContext};
use crate::jni::{delete_local_ref, Jni};
use crate::jvmti::{
    jclass, jobject, jvmtiCapabilities, jvmtiHeapCallbacks, jvmtiHeapReferenceInfo, JNIEnv, JavaVM,
    Jvmti,
};

/// Tags of threads (and, when objects are tagged, object ids) count from here; class ids (from
/// the sink) stay below.
const FIRST_OBJECT_ID: u64 = 1 << 32;
const ACC_STATIC: u32 = 0x0008;

/// What kind of objects a class has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKind {
    Instance,
    ObjectArray,
    PrimitiveArray(BasicType),
}

/// A field of a class: name and type.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    pub basic_type: BasicType,
}

/// A loaded class as the dump writes it.
#[derive(Clone, Debug)]
pub struct DumpClass {
    pub id: u64,
    /// Java source form: `java.lang.String`, `int[]`, `Keep$Node[]`.
    pub name: String,
    pub kind: ClassKind,
    /// False when the JVM would not list the class's fields (it is not prepared).
    pub fields_known: bool,
    pub super_id: u64,
    /// The loader's id as tagged before the walk (objects told apart by address take it from
    /// the class's CLASS_LOADER reference instead).
    pub loader_id: u64,
    /// The class's own instance fields, in JVMTI's (declaration) order.
    pub instance_fields: Vec<Field>,
    /// The class's own static fields.
    pub static_fields: Vec<Field>,
    /// Bytes of an instance's field values: this class's and its super classes'.
    pub instance_bytes: u32,
    /// Non-null-able slots of an instance: (offset in the values, field name), for reference
    /// fields (the ASCII dump lists them).
    pub reference_slots: Vec<(u32, String)>,
    /// JVMTI field index → (offset in the values, type) for instance fields.
    slots: Vec<Option<(u32, BasicType)>>,
    /// JVMTI field index → position in `static_fields`.
    static_slots: Vec<Option<u16>>,
}

/// A heap root, as HPROF's root sub-records have them.
#[derive(Clone, Copy, Debug)]
pub enum Root {
    JniGlobal { id: u64 },
    JniLocal { id: u64, thread: u32, depth: u32 },
    JavaFrame { id: u64, thread: u32, depth: u32 },
    StickyClass { id: u64 },
    MonitorUsed { id: u64 },
    ThreadObject { id: u64, thread: u32 },
    Unknown { id: u64 },
}

/// Where the dump goes: HPROF binary or ASCII.
pub trait HeapSink {
    /// An id for a class named `name` (the binary output reuses the ids its LOAD CLASS records
    /// already gave), unique within this dump.
    fn class_id(&mut self, name: &str) -> u64;
    /// Before any object: every class of the dump.
    fn begin(&mut self, classes: &[DumpClass]) -> io::Result<()>;
    fn root(&mut self, root: Root) -> io::Result<()>;
    fn class_dump(
        &mut self,
        class: &DumpClass,
        statics: &[(u16, StaticValue)],
        ids: ClassIds,
    ) -> io::Result<()>;
    /// `values`: field values, big-endian, the class's own first, then its super classes'.
    fn instance(&mut self, id: u64, size: u64, class: &DumpClass, values: &[u8]) -> io::Result<()>;
    fn object_array(
        &mut self,
        id: u64,
        size: u64,
        class: &DumpClass,
        elements: &[u64],
    ) -> io::Result<()>;
    /// `native`: the elements in this machine's byte order.
    fn primitive_array(
        &mut self,
        id: u64,
        size: u64,
        class: &DumpClass,
        element_type: BasicType,
        length: u32,
        native: &[u8],
    ) -> io::Result<()>;
    fn end(&mut self, summary: &DumpSummary) -> io::Result<()>;
}

/// The objects a CLASS DUMP names besides its class and super class (0: none).
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassIds {
    pub loader: u64,
    pub signers: u64,
    pub protection_domain: u64,
}

/// A static field's value: an object id or primitive bytes (big-endian).
#[derive(Clone, Debug)]
pub enum StaticValue {
    Object(u64),
    Primitive(BasicType, [u8; 8]),
}

/// What a dump found.
#[derive(Clone, Debug, Default)]
pub struct DumpSummary {
    pub objects: u64,
    pub bytes: u64,
    pub classes: u64,
    pub roots: u64,
    /// References to objects whose class was loaded after the dump listed the classes.
    pub unknown_class_objects: u64,
    /// Field indexes that did not fit the class layout (a JVM laying out fields otherwise).
    pub layout_mismatches: u64,
    /// Field values of objects whose class is not prepared (left out: see `field_mismatch`).
    pub unprepared_field_values: u64,
    /// java.lang.Class objects of classes not loaded (left out).
    pub unloaded_mirrors: u64,
    /// How objects were told apart: "addresses" or "tags" (and why).
    pub identity: String,
    /// Where the time went: (phase, time), in order.
    pub phases: Vec<(&'static str, Duration)>,
}

/// How the walk tells objects apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    /// By the tag the walk sets on each object on first sight (JVMTI's own way; slow: see the
    /// module's comment).
    Tags,
    /// By address, read next to the tags HotSpot hands the callbacks. `referrer_distance`:
    /// where the referrer's tag is from the referee's in a reference callback (HotSpot's
    /// `TwoOopCallbackWrapper`, whose `_referrer` field comes one word before that tag).
    Addresses { referrer_distance: isize },
}

fn new_env(vm: *mut JavaVM) -> AgentResult<Jvmti> {
    let env = Jvmti::from_vm(vm).ok_or("no JVMTI environment for the heap dump")?;
    let mut capabilities = jvmtiCapabilities::default();
    capabilities.set_can_tag_objects(true);
    env.add_capabilities(&capabilities)
        .map_err(|error| format!("can't tag objects for the heap dump: {error}"))?;
    Ok(env)
}

/// Dumps the heap into `sink`: a full GC first (as `jcmd GC.heap_dump` does), then every
/// object reachable from the roots. `threads` maps thread objects to their serial numbers.
pub fn dump_heap(
    vm: *mut JavaVM,
    jni: *mut JNIEnv,
    sink: &mut dyn HeapSink,
    thread_serial: impl Fn(crate::jvmti::jthread) -> u32,
) -> AgentResult<DumpSummary> {
    let env = new_env(vm)?;
    let mut result = dump_with(env, jni, sink, thread_serial);
    // With tags, the JVM frees one map entry and weak handle per object here.
    let disposing = Instant::now();
    let _ = env.dispose();
    if let Ok(summary) = &mut result {
        summary.phases.push(("dispose", disposing.elapsed()));
    }
    result
}

/// Times each phase of a dump into its summary.
struct Phases {
    phases: Vec<(&'static str, Duration)>,
    since: Instant,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            phases: Vec::new(),
            since: Instant::now(),
        }
    }

    fn done(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.phases.push((phase, now - self.since));
        self.since = now;
    }
}

fn dump_with(
    env: Jvmti,
    jni: *mut JNIEnv,
    sink: &mut dyn HeapSink,
    thread_serial: impl Fn(crate::jvmti::jthread) -> u32,
) -> AgentResult<DumpSummary> {
    let mut phases = Phases::new();
    env.force_garbage_collection()
        .doing("can't collect garbage before the heap dump")?;
    phases.done("gc");
    let mut next_object_id = FIRST_OBJECT_ID;
    load_classes_the_dump_uses(jni);
    let classes = list_classes(env, jni, sink, &mut next_object_id)?;
    phases.done("classes");
    // After the classes: their tags are what the probe's callbacks are checked against.
    let (identity, identity_note) = match probe_addresses(env, jni) {
        Ok(distance) => (
            Identity::Addresses {
                referrer_distance: distance,
            },
            "addresses".to_string(),
        ),
        Err(why) => (Identity::Tags, format!("tags ({why})")),
    };
    phases.done("probe");
    let mut thread_serial_by_tag = HashMap::new();
    if let Ok(threads) = env.all_threads() {
        for thread in threads {
            let serial = thread_serial(thread);
            let tag = next_object_id as i64;
            next_object_id += 1;
            if env.set_tag(thread, tag).is_ok() {
                thread_serial_by_tag.insert(tag, serial);
            }
            delete_local_ref(jni, thread);
        }
    }
    let primitive_mirror_tags = tag_primitive_mirrors(env, jni, &mut next_object_id);
    let preassigned = (next_object_id - FIRST_OBJECT_ID) as usize;
    let count = classes.len();
    let class_index = ClassIndex::new(&classes);
    let class_class = classes
        .iter()
        .position(|class| class.name == "java.lang.Class");
    // Addresses must not meet class ids, which share HPROF's id space.
    let lowest_address = classes.iter().map(|class| class.id).max().unwrap_or(0) + 1;
    let mut walk = Walk {
        sink,
        identity,
        instance_sizes: vec![0; count],
        classes,
        class_index,
        class_class,
        thread_serial_by_tag,
        objects: match identity {
            Identity::Tags => vec![ObjectInfo::default(); preassigned],
            Identity::Addresses { .. } => Vec::new(),
        },
        object_arrays: AddressMap::default(),
        primitive_mirror_tags,
        primitive_mirrors: AddressMap::default(),
        lowest_address,
        current: Current::None,
        values: Vec::new(),
        elements: Vec::new(),
        statics: Vec::new(),
        ids: ClassIds::default(),
        classes_done: vec![false; count],
        summary: DumpSummary {
            identity: identity_note,
            ..DumpSummary::default()
        },
        error: None,
    };
    walk.sink
        .begin(&walk.classes)
        .map_err(|error| format!("can't write the heap dump: {error}"))?;
    let callbacks = jvmtiHeapCallbacks {
        heap_reference_callback: Some(on_reference),
        primitive_field_callback: Some(on_primitive_field),
        array_primitive_value_callback: Some(on_primitive_array),
        ..Default::default()
    };
    env.follow_references(
        std::ptr::null_mut(),
        &callbacks,
        (&mut walk as *mut Walk).cast(),
    )
    .map_err(|error| error.to_string())?;
    if walk.error.is_none() {
        walk.finish_current();
        walk.finish_unvisited();
    }
    if let Some(error) = walk.error.take() {
        return Err(format!("can't write the heap dump: {error}").into());
    }
    phases.done("walk");
    walk.summary.classes = walk.classes.len() as u64;
    let summary = walk.summary.clone();
    walk.sink
        .end(&summary)
        .map_err(|error| format!("can't write the heap dump: {error}"))?;
    phases.done("end");
    Ok(DumpSummary {
        phases: phases.phases,
        ..summary
    })
}

/// Class ids (small numbers, from the sink) → places in the class list, looked up at every
/// reference.
struct ClassIndex {
    /// By id: place + 1, 0 for none.
    dense: Vec<u32>,
    /// Ids too large for `dense` (a sink numbering otherwise).
    sparse: HashMap<u64, usize>,
}

impl ClassIndex {
    const DENSE_LIMIT: u64 = 1 << 24;

    fn new(classes: &[DumpClass]) -> ClassIndex {
        let dense_len = classes
            .iter()
            .map(|class| class.id)
            .filter(|id| *id < Self::DENSE_LIMIT)
            .max()
            .map_or(0, |id| id as usize + 1);
        let mut index = ClassIndex {
            dense: vec![0; dense_len],
            sparse: HashMap::new(),
        };
        for (at, class) in classes.iter().enumerate() {
            if class.id < Self::DENSE_LIMIT {
                index.dense[class.id as usize] = at as u32 + 1;
            } else {
                index.sparse.insert(class.id, at);
            }
        }
        index
    }

    fn get(&self, id: u64) -> Option<usize> {
        if id < Self::DENSE_LIMIT {
            match self.dense.get(id as usize) {
                Some(&at) if at > 0 => Some(at as usize - 1),
                _ => None,
            }
        } else {
            self.sparse.get(&id).copied()
        }
    }
}

/// What HotSpot keeps around the tag it hands a heap callback (see the module's comment).
#[derive(Clone, Copy, Debug)]
struct Wrapped {
    object: u64,
    size: i64,
    class_tag: i64,
}

/// The words around a tag pointer from a heap callback, as HotSpot's `CallbackWrapper` has
/// them. Only for a HotSpot walk: there the pointer is into a stack object with fields on both
/// sides, so the reads stay within it; what they hold is checked by the caller.
fn wrapped(tag_ptr: *const i64) -> Wrapped {
    // SAFETY: (see above) `tag_ptr` is `&CallbackWrapper::_obj_tag`, a field between `_o` and
    // `_obj_size` before it and `_klass_tag` after it, valid for the callback's duration.
    unsafe {
        Wrapped {
            object: tag_ptr.sub(2).read() as u64,
            size: tag_ptr.sub(1).read(),
            class_tag: tag_ptr.add(1).read(),
        }
    }
}

/// The referrer of a reference callback, as HotSpot's `TwoOopCallbackWrapper` keeps it
/// around the referrer's tag: `_referrer` before it, `_referrer_klass_tag` after it, then
/// `_referrer_tag_p`, the pointer to that tag. `None` when those fields are not there.
fn wrapped_referrer(referrer_tag_ptr: *const i64, class_tag: i64) -> Option<u64> {
    // SAFETY: as for `wrapped`: `referrer_tag_ptr` is `&_referrer_obj_tag` inside a
    // TwoOopCallbackWrapper on the VM thread's stack, with fields before and after it.
    let (object, klass, itself) = unsafe {
        (
            referrer_tag_ptr.sub(1).read() as u64,
            referrer_tag_ptr.add(1).read(),
            referrer_tag_ptr.add(2).read() as usize,
        )
    };
    (klass == class_tag && itself == referrer_tag_ptr as usize).then_some(object)
}

/// Whether `address` can be an object's: not null, aligned as HotSpot aligns objects.
fn plausible_address(address: u64) -> bool {
    address != 0 && address % 8 == 0
}

/// The classes the probe and `tag_primitive_mirrors` use, loaded before the classes are listed:
/// a class loaded after that is left out of the dump, and its mirror, a root, would dangle.
fn load_classes_the_dump_uses(jni: *mut JNIEnv) {
    let jni = Jni(jni);
    for name in PRIMITIVE_WRAPPERS.iter().chain(&[PROBE_CLASS]) {
        if let Ok(class) = jni.find_class(name) {
            jni.delete_local_ref(class);
        }
    }
}

/// The classes whose `TYPE` is a primitive type's java.lang.Class object.
const PRIMITIVE_WRAPPERS: [&str; 9] = [
    "java/lang/Boolean",
    "java/lang/Byte",
    "java/lang/Character",
    "java/lang/Short",
    "java/lang/Integer",
    "java/lang/Long",
    "java/lang/Float",
    "java/lang/Double",
    "java/lang/Void",
];

/// Tags the primitive types' java.lang.Class objects (`Integer.TYPE`, ...; JVMTI lists no class
/// for them), so that the walk writes them as instances of java.lang.Class, as HotSpot's dumper
/// does: arrays and fields refer to them (`Class[]` parameter lists, the wrappers' `TYPE`).
fn tag_primitive_mirrors(env: Jvmti, jni: *mut JNIEnv, next_object_id: &mut u64) -> HashSet<i64> {
    let jni = Jni(jni);
    let mut tags = HashSet::new();
    for wrapper in PRIMITIVE_WRAPPERS {
        let Ok(class) = jni.find_class(wrapper) else {
            continue;
        };
        if let Ok(field) = jni.static_field_id(class, "TYPE", "Ljava/lang/Class;") {
            let mirror = jni.static_object_field(class, field);
            if !mirror.is_null() {
                let tag = *next_object_id as i64;
                *next_object_id += 1;
                if env.set_tag(mirror, tag).is_ok() {
                    tags.insert(tag);
                }
                jni.delete_local_ref(mirror);
            }
        }
        jni.delete_local_ref(class);
    }
    tags
}

/// Checks, with a small walk over objects made for it, that this JVM's heap callbacks can tell
/// objects apart by address (see the module's comment): returns the distance between the
/// referrer's tag and the referee's in a reference callback, or why not.
fn probe_addresses(env: Jvmti, jni: *mut JNIEnv) -> Result<isize, String> {
    // A diagnostic switch (docs/options.md): the slow, JVMTI-only way, to compare with.
    match std::env::var("OPENPROF_HEAP_WALK") {
        Ok(value) if value == "tags" => return Err("OPENPROF_HEAP_WALK=tags".into()),
        Ok(value) => eprintln!(
            "openprof: OPENPROF_HEAP_WALK={value} is not understood (only tags is); ignored"
        ),
        Err(_) => {}
    }
    if !crate::vm_structs::is_hotspot() {
        return Err("not HotSpot".into());
    }
    let jni = Jni(jni);
    if !jni.push_local_frame(8) {
        return Err("no room for the probe's objects".into());
    }
    let result = probe_with(env, jni);
    jni.pop_local_frame();
    result
}

/// The probe's objects: `[x, y, x]`, x an AtomicLong tagged beforehand, y a `long[1]`.
const PROBE_TAG: i64 = 0x0bad_cafe;
const PROBE_CLASS: &str = "java/util/concurrent/atomic/AtomicLong";
const PROBE_VALUE: i64 = 0x1234_5678_9abc;

/// What the probe saw, in order: (what, address).
#[derive(Default)]
struct Probe {
    /// Reference callbacks from the array: (kind, index, referee, referrer).
    references: Vec<(jvmtiHeapReferenceKind, i32, u64, u64)>,
    /// The objects whose CLASS reference came: the objects visited.
    visits: Vec<u64>,
    /// (object, value) of long primitive fields; (array, length) of primitive arrays.
    fields: Vec<(u64, i64)>,
    arrays: Vec<(u64, i32)>,
    /// The distance between the referrer's and the referee's tags.
    distance: Option<isize>,
    /// Whether a tagged object's callbacks saw its tag.
    tag_seen: bool,
    fault: Option<String>,
}

fn probe_with(env: Jvmti, jni: Jni) -> Result<isize, String> {
    let made = |what: &str| format!("can't make the probe's {what}");
    let object_class = jni
        .find_class("java/lang/Object")
        .map_err(|_| made("array"))?;
    let array = jni
        .new_object_array(3, object_class)
        .map_err(|_| made("array"))?;
    let atomic_class = jni
        .find_class(PROBE_CLASS)
        .map_err(|_| made("AtomicLong"))?;
    let constructor = jni
        .method_id(atomic_class, "<init>", "(J)V")
        .map_err(|_| made("AtomicLong"))?;
    let x = jni
        .new_object(atomic_class, constructor, &[jvalue { j: PROBE_VALUE }])
        .map_err(|_| made("AtomicLong"))?;
    let y = jni.new_long_array(1).map_err(|_| made("long[]"))?;
    for (index, element) in [x, y, x].into_iter().enumerate() {
        jni.set_object_array_element(array, index as i32, element)
            .map_err(|_| made("array"))?;
    }
    env.set_tag(x, PROBE_TAG)
        .map_err(|error| format!("can't tag the probe's object: {error}"))?;
    let mut probe = Probe::default();
    let callbacks = jvmtiHeapCallbacks {
        heap_reference_callback: Some(probe_on_reference),
        primitive_field_callback: Some(probe_on_primitive_field),
        array_primitive_value_callback: Some(probe_on_primitive_array),
        ..Default::default()
    };
    env.follow_references(
        array as jobject,
        &callbacks,
        (&mut probe as *mut Probe).cast(),
    )
    .map_err(|error| format!("the probe's walk failed: {error}"))?;
    let _ = env.set_tag(x, 0);
    if let Some(fault) = probe.fault {
        return Err(fault);
    }
    probe.judge()
}

impl Probe {
    /// Whether what the probe saw is what `[x, y, x]` has, told apart by address.
    fn judge(&self) -> Result<isize, String> {
        let unexpected = |what: &str| Err(format!("the probe saw {what}"));
        let elements: Vec<(i32, u64, u64)> = self
            .references
            .iter()
            .filter(|(kind, ..)| *kind == JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT)
            .map(|&(_, index, referee, referrer)| (index, referee, referrer))
            .collect();
        let [(0, x, array), (1, y, array_again), (2, x_again, array_last)] = elements[..] else {
            return unexpected("other array elements than [x, y, x]");
        };
        if x != x_again || x == y || array != array_again || array != array_last {
            return unexpected("objects whose addresses do not tell them apart");
        }
        if [x, y, array]
            .iter()
            .any(|address| !plausible_address(*address))
        {
            return unexpected("an address no object can have");
        }
        let mut visited = self.visits.clone();
        visited.sort_unstable();
        let mut expected = vec![array, x, y];
        expected.sort_unstable();
        if visited != expected {
            return unexpected("visits of other objects than the array, x and y");
        }
        if self.fields != [(x, PROBE_VALUE)] {
            return unexpected("x's field in another object or with another value");
        }
        if self.arrays != [(y, 1)] {
            return unexpected("y's elements in another object");
        }
        if !self.tag_seen {
            return unexpected("x without its tag");
        }
        self.distance
            .ok_or_else(|| "the probe saw no referrer".into())
    }
}

/// Runs a probe callback body (which says whether to visit the referee); a panic becomes the
/// probe's fault.
fn in_probe(user_data: *mut c_void, body: impl FnOnce(&mut Probe) -> Result<i32, String>) -> i32 {
    // SAFETY: `user_data` is the `Probe` that `probe_with` passed to FollowReferences; it
    // lives until FollowReferences returns and only these callbacks touch it meanwhile.
    let probe = unsafe { &mut *user_data.cast::<Probe>() };
    if probe.fault.is_some() {
        return JVMTI_VISIT_ABORT;
    }
    match catch_unwind(AssertUnwindSafe(|| body(&mut *probe))) {
        Ok(Ok(visit)) => visit,
        Ok(Err(fault)) => {
            probe.fault = Some(fault);
            JVMTI_VISIT_ABORT
        }
        Err(_) => {
            probe.fault = Some("the probe panicked".into());
            JVMTI_VISIT_ABORT
        }
    }
}

/// The object a callback's tag pointer is wrapped with, if the words around it are as HotSpot
/// lays them out: `size` and `class_tag` are the callback's own arguments (`size` unknown for
/// primitive fields).
fn checked_object(tag_ptr: *const i64, size: Option<i64>, class_tag: i64) -> Option<u64> {
    if tag_ptr.is_null() {
        return None;
    }
    let around = wrapped(tag_ptr);
    (around.class_tag == class_tag
        && size.is_none_or(|size| around.size == size)
        && plausible_address(around.object))
    .then_some(around.object)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn probe_on_reference(
    kind: jvmtiHeapReferenceKind,
    info: *const jvmtiHeapReferenceInfo,
    class_tag: i64,
    referrer_class_tag: i64,
    size: i64,
    tag_ptr: *mut i64,
    referrer_tag_ptr: *mut i64,
    _length: i32,
    user_data: *mut c_void,
) -> i32 {
    in_probe(user_data, |probe| {
        let referee = checked_object(tag_ptr, Some(size), class_tag)
            .ok_or("the probe's callbacks hold their objects otherwise")?;
        if referrer_tag_ptr.is_null() || referrer_tag_ptr == tag_ptr {
            return Err("the probe saw a root or an object referring to itself".into());
        }
        // SAFETY: JVMTI passes both tag pointers for the callback's duration.
        let tag = unsafe { *tag_ptr };
        if referee != 0 && tag == PROBE_TAG {
            probe.tag_seen = true;
        }
        let distance = (referrer_tag_ptr as isize) - (tag_ptr as isize);
        if *probe.distance.get_or_insert(distance) != distance {
            return Err("the referrer's tag moves between callbacks".into());
        }
        let referrer = wrapped_referrer(referrer_tag_ptr, referrer_class_tag)
            .ok_or("the probe's callbacks hold their referrers otherwise")?;
        let index = if info.is_null() {
            -1
        } else {
            // SAFETY: for ARRAY_ELEMENT (the only kind with an index used here) JVMTI fills
            // the `array` member; the others share its layout.
            unsafe { (*info).array.index }
        };
        if kind == JVMTI_HEAP_REFERENCE_CLASS {
            probe.visits.push(referrer);
            // Not into the class: from there the whole heap is reachable.
            return Ok(0);
        }
        probe.references.push((kind, index, referee, referrer));
        Ok(JVMTI_VISIT_OBJECTS)
    })
}

unsafe extern "system" fn probe_on_primitive_field(
    kind: jvmtiHeapReferenceKind,
    _info: *const jvmtiHeapReferenceInfo,
    object_class_tag: i64,
    object_tag_ptr: *mut i64,
    value: jvalue,
    value_type: jvmtiPrimitiveType,
    user_data: *mut c_void,
) -> i32 {
    in_probe(user_data, |probe| {
        if kind != JVMTI_HEAP_REFERENCE_FIELD || value_type as u8 != b'J' {
            return Ok(JVMTI_VISIT_OBJECTS);
        }
        let object = checked_object(object_tag_ptr, None, object_class_tag)
            .ok_or("the probe's field callbacks hold their objects otherwise")?;
        // SAFETY: JVMTI sets the union member its type names: a long.
        probe.fields.push((object, unsafe { value.j }));
        Ok(JVMTI_VISIT_OBJECTS)
    })
}

unsafe extern "system" fn probe_on_primitive_array(
    class_tag: i64,
    size: i64,
    tag_ptr: *mut i64,
    count: i32,
    _element_type: jvmtiPrimitiveType,
    _elements: *const c_void,
    user_data: *mut c_void,
) -> i32 {
    in_probe(user_data, |probe| {
        let array = checked_object(tag_ptr, Some(size), class_tag)
            .ok_or("the probe's array callbacks hold their arrays otherwise")?;
        probe.arrays.push((array, count));
        Ok(JVMTI_VISIT_OBJECTS)
    })
}

/// A class seen by the class pass, before its layout is computed.
struct Listed {
    class: jclass,
    id: u64,
    name: String,
    kind: ClassKind,
    /// (name, descriptor, static) of the class's own fields, in JVMTI order.
    fields: Vec<(String, String, bool)>,
    fields_known: bool,
    super_index: Option<usize>,
    interfaces: Vec<usize>,
    loader_id: u64,
}

/// Tags every loaded class with its id and works out each class's field layout.
fn list_classes(
    env: Jvmti,
    jni: *mut JNIEnv,
    sink: &mut dyn HeapSink,
    next_object_id: &mut u64,
) -> Result<Vec<DumpClass>, String> {
    let loaded = env.loaded_classes().map_err(|error| error.to_string())?;
    let mut listed: Vec<Listed> = Vec::with_capacity(loaded.len());
    let mut index_of_id: HashMap<u64, usize> = HashMap::new();
    for class in loaded {
        let Ok(signature) = env.class_signature(class) else {
            delete_local_ref(jni, class);
            continue;
        };
        let status = env.class_status(class).unwrap_or(0);
        let name = class_name_from_signature(&signature);
        let kind = if status & JVMTI_CLASS_STATUS_ARRAY != 0 {
            match signature.as_bytes().get(1).copied() {
                Some(b'L') | Some(b'[') => ClassKind::ObjectArray,
                Some(element) => BasicType::from_descriptor(element)
                    .map(ClassKind::PrimitiveArray)
                    .unwrap_or(ClassKind::ObjectArray),
                None => ClassKind::ObjectArray,
            }
        } else {
            ClassKind::Instance
        };
        let id = sink.class_id(&name);
        if env.set_tag(class, id as i64).is_err() {
            delete_local_ref(jni, class);
            continue;
        }
        let mut fields = Vec::new();
        let fields_known = kind != ClassKind::Instance || status & JVMTI_CLASS_STATUS_PREPARED != 0;
        if kind == ClassKind::Instance && fields_known {
            for field in env.class_fields(class).unwrap_or_default() {
                let (field_name, descriptor) = env.field_name(class, field).unwrap_or_default();
                let modifiers = env.field_modifiers(class, field).unwrap_or(0);
                fields.push((field_name, descriptor, modifiers & ACC_STATIC != 0));
            }
        }
        let loader_id = match env.class_loader(class) {
            Ok(loader) if !loader.is_null() => {
                let tag = match env.tag(loader) {
                    Ok(0) | Err(_) => {
                        let tag = *next_object_id as i64;
                        *next_object_id += 1;
                        let _ = env.set_tag(loader, tag);
                        tag
                    }
                    Ok(tag) => tag,
                };
                delete_local_ref(jni, loader);
                tag as u64
            }
            _ => 0,
        };
        index_of_id.insert(id, listed.len());
        listed.push(Listed {
            class,
            id,
            name,
            kind,
            fields,
            fields_known,
            super_index: None,
            interfaces: Vec::new(),
            loader_id,
        });
    }
    // Second pass: super classes and interfaces, now that every class has its tag.
    for entry in listed.iter_mut() {
        let class = entry.class;
        let super_class = crate::jni::Jni(jni).superclass(class);
        if !super_class.is_null() {
            if let Ok(tag) = env.tag(super_class) {
                entry.super_index = index_of_id.get(&(tag as u64)).copied();
            }
            delete_local_ref(jni, super_class);
        }
        if entry.kind == ClassKind::Instance {
            for interface in env.implemented_interfaces(class).unwrap_or_default() {
                if let Ok(tag) = env.tag(interface) {
                    if let Some(at) = index_of_id.get(&(tag as u64)) {
                        entry.interfaces.push(*at);
                    }
                }
                delete_local_ref(jni, interface);
            }
        }
    }
    let classes = (0..listed.len())
        .map(|index| layout(&listed, index))
        .collect();
    for entry in &listed {
        delete_local_ref(jni, entry.class);
    }
    Ok(classes)
}

/// Every interface a class implements, directly or through its super classes and
/// super-interfaces, each once.
fn transitive_interfaces(listed: &[Listed], index: usize, into: &mut Vec<usize>) {
    let mut seen: HashSet<usize> = into.iter().copied().collect();
    let mut stack: Vec<usize> = Vec::new();
    let mut class = Some(index);
    while let Some(at) = class {
        stack.extend(listed[at].interfaces.iter().rev());
        class = listed[at].super_index;
    }
    while let Some(interface) = stack.pop() {
        if seen.insert(interface) {
            into.push(interface);
            stack.extend(listed[interface].interfaces.iter().rev());
        }
    }
}

/// The layout of one class. JVMTI numbers the fields an object can have as: the fields of
/// every interface the class implements, then the fields of each super class from the top
/// down, then the class's own, each class's in GetClassFields order, statics included.
fn layout(listed: &[Listed], index: usize) -> DumpClass {
    let entry = &listed[index];
    let mut chain = vec![index];
    while let Some(up) = listed[*chain.last().unwrap()].super_index {
        if chain.contains(&up) {
            break;
        }
        chain.push(up);
    }
    let field_type = |descriptor: &str| {
        BasicType::from_descriptor(descriptor.as_bytes().first().copied().unwrap_or(b'L'))
            .unwrap_or(BasicType::Object)
    };
    // Offsets: HPROF puts the class's own fields first, then its super classes'.
    let mut offsets: HashMap<usize, u32> = HashMap::new();
    let mut offset = 0u32;
    let mut reference_slots = Vec::new();
    for &class in &chain {
        offsets.insert(class, offset);
        for (name, descriptor, is_static) in &listed[class].fields {
            if !is_static {
                let basic_type = field_type(descriptor);
                if basic_type == BasicType::Object {
                    reference_slots.push((offset, name.clone()));
                }
                offset += basic_type.size(8);
            }
        }
    }
    let mut slots: Vec<Option<(u32, BasicType)>> = Vec::new();
    let mut interfaces = Vec::new();
    transitive_interfaces(listed, index, &mut interfaces);
    // An interface's own fields come last, as every class's do, not among its interfaces'.
    interfaces.retain(|&interface| interface != index);
    for interface in interfaces {
        slots.extend(listed[interface].fields.iter().map(|_| None));
    }
    let mut static_slots = vec![None; slots.len()];
    let mut static_fields = Vec::new();
    for &class in chain.iter().rev() {
        let mut at = offsets[&class];
        for (name, descriptor, is_static) in &listed[class].fields {
            let basic_type = field_type(descriptor);
            if *is_static {
                slots.push(None);
                if class == index {
                    static_slots.push(Some(static_fields.len() as u16));
                    static_fields.push(Field {
                        name: name.clone(),
                        basic_type,
                    });
                } else {
                    static_slots.push(None);
                }
            } else {
                slots.push(Some((at, basic_type)));
                static_slots.push(None);
                at += basic_type.size(8);
            }
        }
    }
    let instance_fields = entry
        .fields
        .iter()
        .filter(|(_, _, is_static)| !is_static)
        .map(|(name, descriptor, _)| Field {
            name: name.clone(),
            basic_type: field_type(descriptor),
        })
        .collect();
    DumpClass {
        id: entry.id,
        name: entry.name.clone(),
        kind: entry.kind,
        fields_known: chain.iter().all(|&class| listed[class].fields_known),
        super_id: entry.super_index.map_or(0, |at| listed[at].id),
        loader_id: entry.loader_id,
        instance_fields,
        static_fields,
        instance_bytes: offset,
        reference_slots,
        slots,
        static_slots,
    }
}

fn primitive_bytes(
    value_type: jvmtiPrimitiveType,
    value: jvalue,
) -> Option<(BasicType, [u8; 8], usize)> {
    let basic_type = BasicType::from_descriptor(value_type as u8)?;
    let mut bytes = [0u8; 8];
    // SAFETY: JVMTI sets the union member that `value_type` names.
    let width = unsafe {
        match basic_type {
            BasicType::Boolean => {
                bytes[0] = value.z;
                1
            }
            BasicType::Byte => {
                bytes[0] = value.b as u8;
                1
            }
            BasicType::Char => {
                bytes[..2].copy_from_slice(&value.c.to_be_bytes());
                2
            }
            BasicType::Short => {
                bytes[..2].copy_from_slice(&value.s.to_be_bytes());
                2
            }
            BasicType::Int => {
                bytes[..4].copy_from_slice(&value.i.to_be_bytes());
                4
            }
            BasicType::Float => {
                bytes[..4].copy_from_slice(&value.f.to_bits().to_be_bytes());
                4
            }
            BasicType::Long => {
                bytes.copy_from_slice(&value.j.to_be_bytes());
                8
            }
            BasicType::Double => {
                bytes.copy_from_slice(&value.d.to_bits().to_be_bytes());
                8
            }
            BasicType::Object => return None,
        }
    };
    Some((basic_type, bytes, width))
}

/// An object seen by a walk with tags.
#[derive(Clone, Copy, Default)]
struct ObjectInfo {
    /// Index into the class list, plus one (0: not seen yet).
    class: u32,
    size: u32,
    length: i32,
    done: bool,
}

/// Hashes addresses (multiples of 8) for the few maps keyed by them.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, value: u64) {
        let product = value.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = product ^ (product >> 32);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Object arrays seen as referees, by address: (size, length) until they are visited (a visit
/// reports neither).
type AddressMap = HashMap<u64, (u32, i32), BuildHasherDefault<AddressHasher>>;

/// The object whose fields, elements or statics the callbacks are reporting.
enum Current {
    None,
    Instance {
        id: u64,
        class: usize,
        size: u64,
    },
    ObjectArray {
        id: u64,
        class: usize,
        size: u64,
    },
    /// (By address) a primitive array, written when its elements come.
    PrimitiveArray {
        id: u64,
        written: bool,
    },
    Class {
        class: usize,
    },
    /// (By address) an object left out (see `enter_address`).
    Skipped {
        id: u64,
    },
}

struct Walk<'a> {
    sink: &'a mut dyn HeapSink,
    identity: Identity,
    classes: Vec<DumpClass>,
    class_index: ClassIndex,
    /// The index of java.lang.Class in `classes`.
    class_class: Option<usize>,
    thread_serial_by_tag: HashMap<i64, u32>,
    /// (Tags) every object seen, by tag − FIRST_OBJECT_ID.
    objects: Vec<ObjectInfo>,
    /// (Addresses) an instance's size, by class: learned when one is a referee.
    instance_sizes: Vec<u32>,
    /// (Addresses) see [`AddressMap`].
    object_arrays: AddressMap,
    /// The tags of the primitive types' java.lang.Class objects (int.class, ...).
    primitive_mirror_tags: HashSet<i64>,
    /// (Addresses) those objects by address: (size, 1 once visited). HotSpot's walk reports
    /// neither their fields nor their class, so they are written at the end (as unvisited
    /// objects with tags are).
    primitive_mirrors: AddressMap,
    /// (Addresses) the lowest address an object may have (above every class id).
    lowest_address: u64,
    current: Current,
    values: Vec<u8>,
    elements: Vec<u64>,
    statics: Vec<(u16, StaticValue)>,
    ids: ClassIds,
    classes_done: Vec<bool>,
    summary: DumpSummary,
    error: Option<io::Error>,
}

/// Why a walk by address stops: HotSpot's callbacks no longer look as the probe found them.
fn changed(what: &str) -> io::Error {
    io::Error::other(format!(
        "the JVM's heap walk reported {what} otherwise than its probe did; the dump is incomplete"
    ))
}

impl Walk<'_> {
    fn write(&mut self, result: io::Result<()>) {
        if let Err(error) = result {
            self.error.get_or_insert(error);
        }
    }

    fn fail(&mut self, error: io::Error) {
        self.error.get_or_insert(error);
    }

    fn info(&mut self, id: u64) -> Option<&mut ObjectInfo> {
        let at = id.checked_sub(FIRST_OBJECT_ID)? as usize;
        self.objects.get_mut(at)
    }

    /// (Tags) The id of a referenced object, numbering it (and noting its class) on first
    /// sight.
    fn object_id_by_tag(
        &mut self,
        tag_ptr: *mut i64,
        class_tag: i64,
        size: i64,
        length: i32,
    ) -> u64 {
        // SAFETY: JVMTI passes a valid pointer to the referee's tag for the callback's duration.
        let tag = unsafe { *tag_ptr };
        let id = if tag == 0 {
            let id = FIRST_OBJECT_ID + self.objects.len() as u64;
            self.objects.push(ObjectInfo::default());
            // SAFETY: as above; setting the tag through the pointer is how JVMTI tags here.
            unsafe { *tag_ptr = id as i64 };
            id
        } else {
            tag as u64
        };
        let class = self.class_index.get(class_tag as u64);
        let unlisted_mirror = class.is_some()
            && class == self.class_class
            && !self.primitive_mirror_tags.contains(&(id as i64));
        if let Some(info) = self.info(id) {
            if info.class == 0 {
                match class {
                    // A java.lang.Class object not tagged as a class nor a primitive type's:
                    // the mirror of a class the JVM has not loaded (CDS archives them). Like
                    // HotSpot's own dumper, only loaded classes are written, as CLASS DUMPs, and
                    // the primitive types' mirrors as instances of java.lang.Class.
                    Some(_) if unlisted_mirror => {
                        info.class = u32::MAX;
                        info.done = true;
                        self.summary.unloaded_mirrors += 1;
                    }
                    Some(class) => {
                        info.class = class as u32 + 1;
                        info.size = size.clamp(0, u32::MAX as i64) as u32;
                        info.length = length;
                    }
                    None => self.summary.unknown_class_objects += 1,
                }
            }
        }
        id
    }

    /// (Addresses) The id of a referenced object: its class's id for a class, else its
    /// address; `None` (and the walk stopped) when the callback's words are not HotSpot's.
    fn object_id_by_address(
        &mut self,
        tag_ptr: *mut i64,
        class_tag: i64,
        size: i64,
        length: i32,
    ) -> Option<u64> {
        let around = wrapped(tag_ptr);
        if around.size != size
            || around.class_tag != class_tag
            || !plausible_address(around.object)
            || around.object < self.lowest_address
        {
            self.fail(changed("an object"));
            return None;
        }
        // SAFETY: JVMTI passes a valid pointer to the referee's tag for the callback's duration.
        let tag = unsafe { *tag_ptr };
        if let Some(class) = self.class_of_tag(tag) {
            return Some(self.classes[class].id);
        }
        if self.primitive_mirror_tags.contains(&tag) {
            self.primitive_mirrors
                .insert(around.object, (size.clamp(0, u32::MAX as i64) as u32, 0));
            return Some(around.object);
        }
        if let Some(class) = self.class_index.get(class_tag as u64) {
            match self.classes[class].kind {
                ClassKind::Instance => {
                    if self.instance_sizes[class] == 0 {
                        self.instance_sizes[class] = size.clamp(0, u32::MAX as i64) as u32;
                    }
                }
                ClassKind::ObjectArray => {
                    self.object_arrays.insert(
                        around.object,
                        (size.clamp(0, u32::MAX as i64) as u32, length),
                    );
                }
                ClassKind::PrimitiveArray(_) => {}
            }
        }
        Some(around.object)
    }

    /// (Addresses) The class whose mirror has this tag: class ids are below every address.
    fn class_of_tag(&self, tag: i64) -> Option<usize> {
        if tag > 0 && (tag as u64) < self.lowest_address {
            self.class_index.get(tag as u64)
        } else {
            None
        }
    }

    /// (Tags) Makes `id` the object whose fields are being reported, finishing the previous
    /// one.
    fn enter(&mut self, id: u64) -> bool {
        let same = match self.current {
            Current::Instance { id: current, .. } | Current::ObjectArray { id: current, .. } => {
                current == id
            }
            Current::Class { class } => self.classes[class].id == id,
            _ => false,
        };
        if same {
            return true;
        }
        self.finish_current();
        if let Some(class) = self.class_index.get(id) {
            self.enter_class(class);
            return true;
        }
        let Some(info) = self.info(id).copied() else {
            return false;
        };
        if info.class == 0 || info.done {
            return false;
        }
        let class = info.class as usize - 1;
        let entered = self.enter_object(id, class, u64::from(info.size), info.length);
        if let Some(info) = self.info(id).filter(|_| entered) {
            info.done = true;
        }
        entered
    }

    fn enter_class(&mut self, class: usize) {
        self.current = Current::Class { class };
        self.statics.clear();
        self.ids = ClassIds {
            loader: match self.identity {
                Identity::Tags => self.classes[class].loader_id,
                // The CLASS_LOADER reference says which; none for the boot loader.
                Identity::Addresses { .. } => 0,
            },
            ..ClassIds::default()
        };
    }

    /// Starts an instance or object array (false for other objects).
    fn enter_object(&mut self, id: u64, class: usize, size: u64, length: i32) -> bool {
        match self.classes[class].kind {
            ClassKind::Instance => {
                self.values.clear();
                self.values
                    .resize(self.classes[class].instance_bytes as usize, 0);
                self.current = Current::Instance { id, class, size };
            }
            ClassKind::ObjectArray => {
                self.elements.clear();
                self.elements.resize(length.max(0) as usize, 0);
                self.current = Current::ObjectArray { id, class, size };
            }
            ClassKind::PrimitiveArray(_) => return false,
        }
        true
    }

    /// (Addresses) Makes the referrer of a reference (its id: a class's, or an address) the
    /// object being reported, finishing the previous one. Objects of classes loaded after the
    /// dump listed the classes, and mirrors of classes never loaded, are left out (as with
    /// tags).
    fn enter_address(&mut self, referrer: u64, class_tag: i64) -> bool {
        let current = match self.current {
            Current::Instance { id, .. }
            | Current::ObjectArray { id, .. }
            | Current::PrimitiveArray { id, .. }
            | Current::Skipped { id } => Some(id),
            Current::Class { class } => Some(self.classes[class].id),
            Current::None => None,
        };
        if current == Some(referrer) {
            return !matches!(self.current, Current::Skipped { .. });
        }
        self.finish_current();
        if let Some(class) = self.class_of_tag(referrer as i64) {
            self.enter_class(class);
            return true;
        }
        let Some(class) = self.class_index.get(class_tag as u64) else {
            self.summary.unknown_class_objects += 1;
            self.current = Current::Skipped { id: referrer };
            return false;
        };
        if Some(class) == self.class_class {
            if let Some(mirror) = self.primitive_mirrors.get_mut(&referrer) {
                mirror.1 = 1;
                let size = u64::from(mirror.0);
                return self.enter_object(referrer, class, size, -1);
            }
            self.summary.unloaded_mirrors += 1;
            self.current = Current::Skipped { id: referrer };
            return false;
        }
        match self.classes[class].kind {
            ClassKind::Instance => {
                let size = u64::from(self.instance_sizes[class]);
                self.enter_object(referrer, class, size, -1)
            }
            ClassKind::ObjectArray => {
                let (size, length) = self.object_arrays.remove(&referrer).unwrap_or((0, 0));
                self.enter_object(referrer, class, u64::from(size), length)
            }
            ClassKind::PrimitiveArray(_) => {
                self.current = Current::PrimitiveArray {
                    id: referrer,
                    written: false,
                };
                true
            }
        }
    }

    fn finish_current(&mut self) {
        match std::mem::replace(&mut self.current, Current::None) {
            Current::None | Current::Skipped { .. } => {}
            Current::Instance { id, class, size } => {
                self.count(size);
                let result = self
                    .sink
                    .instance(id, size, &self.classes[class], &self.values);
                self.write(result);
            }
            Current::ObjectArray { id, class, size } => {
                self.count(size);
                let result = self
                    .sink
                    .object_array(id, size, &self.classes[class], &self.elements);
                self.write(result);
            }
            Current::PrimitiveArray { written, .. } => {
                if !written {
                    self.fail(changed("a primitive array without its elements"));
                }
            }
            Current::Class { class } => {
                self.classes_done[class] = true;
                let statics = std::mem::take(&mut self.statics);
                let result = self
                    .sink
                    .class_dump(&self.classes[class], &statics, self.ids);
                self.statics = statics;
                self.write(result);
            }
        }
    }

    /// A field value that has no place in its class's layout. Classes the JVM has not prepared
    /// (objects archived by CDS whose class is not loaded yet) have no field list to place them
    /// in; those values are left out and counted apart.
    fn field_mismatch(&mut self, class: usize) {
        if self.classes[class].fields_known {
            self.summary.layout_mismatches += 1;
        } else {
            self.summary.unprepared_field_values += 1;
        }
    }

    fn count(&mut self, size: u64) {
        self.summary.objects += 1;
        self.summary.bytes += size;
    }

    /// Objects reported only as referees (with tags: no field set, e.g. all null; with
    /// addresses every object is visited), and classes never visited: written with default
    /// values.
    fn finish_unvisited(&mut self) {
        for at in 0..self.objects.len() {
            let info = self.objects[at];
            if info.done || info.class == 0 || info.class == u32::MAX {
                continue;
            }
            let id = FIRST_OBJECT_ID + at as u64;
            let class = info.class as usize - 1;
            let length = info.length.max(0) as u32;
            let size = u64::from(info.size);
            self.count(size);
            let result = match self.classes[class].kind {
                ClassKind::Instance => {
                    let values = vec![0u8; self.classes[class].instance_bytes as usize];
                    self.sink.instance(id, size, &self.classes[class], &values)
                }
                ClassKind::ObjectArray => {
                    let elements = vec![0u64; length as usize];
                    self.sink
                        .object_array(id, size, &self.classes[class], &elements)
                }
                ClassKind::PrimitiveArray(element_type) => {
                    let bytes = vec![0u8; length as usize * element_type.size(8) as usize];
                    self.sink.primitive_array(
                        id,
                        size,
                        &self.classes[class],
                        element_type,
                        length,
                        &bytes,
                    )
                }
            };
            self.write(result);
        }
        if let Some(class_class) = self.class_class {
            let mirrors: Vec<(u64, u32)> = self
                .primitive_mirrors
                .iter()
                .filter(|(_, (_, visited))| *visited == 0)
                .map(|(&id, &(size, _))| (id, size))
                .collect();
            let values = vec![0u8; self.classes[class_class].instance_bytes as usize];
            for (id, size) in mirrors {
                self.count(u64::from(size));
                let result =
                    self.sink
                        .instance(id, u64::from(size), &self.classes[class_class], &values);
                self.write(result);
            }
        }
        for class in 0..self.classes.len() {
            if !self.classes_done[class] {
                self.classes_done[class] = true;
                let ids = ClassIds {
                    loader: match self.identity {
                        Identity::Tags => self.classes[class].loader_id,
                        Identity::Addresses { .. } => 0,
                    },
                    ..ClassIds::default()
                };
                let result = self.sink.class_dump(&self.classes[class], &[], ids);
                self.write(result);
            }
        }
    }

    /// A root: `tag` is the object's tag (threads are tagged with their serial's key).
    fn root(
        &mut self,
        kind: jvmtiHeapReferenceKind,
        info: *const jvmtiHeapReferenceInfo,
        id: u64,
        tag: i64,
    ) {
        let thread_of =
            |walk: &Self, tag: i64| walk.thread_serial_by_tag.get(&tag).copied().unwrap_or(0);
        let root = match kind {
            JVMTI_HEAP_REFERENCE_JNI_GLOBAL => Root::JniGlobal { id },
            JVMTI_HEAP_REFERENCE_SYSTEM_CLASS => Root::StickyClass { id },
            JVMTI_HEAP_REFERENCE_MONITOR => Root::MonitorUsed { id },
            JVMTI_HEAP_REFERENCE_THREAD => Root::ThreadObject {
                id,
                thread: thread_of(self, tag),
            },
            JVMTI_HEAP_REFERENCE_STACK_LOCAL if !info.is_null() => {
                // SAFETY: for STACK_LOCAL, JVMTI fills the `stack_local` member.
                let local = unsafe { (*info).stack_local };
                Root::JavaFrame {
                    id,
                    thread: thread_of(self, local.thread_tag),
                    depth: local.depth.max(0) as u32,
                }
            }
            JVMTI_HEAP_REFERENCE_JNI_LOCAL if !info.is_null() => {
                // SAFETY: for JNI_LOCAL, JVMTI fills the `jni_local` member.
                let local = unsafe { (*info).jni_local };
                Root::JniLocal {
                    id,
                    thread: thread_of(self, local.thread_tag),
                    depth: local.depth.max(0) as u32,
                }
            }
            _ => Root::Unknown { id },
        };
        self.summary.roots += 1;
        let result = self.sink.root(root);
        self.write(result);
    }

    #[allow(clippy::too_many_arguments)]
    fn reference(
        &mut self,
        kind: jvmtiHeapReferenceKind,
        info: *const jvmtiHeapReferenceInfo,
        class_tag: i64,
        referrer_class_tag: i64,
        size: i64,
        tag_ptr: *mut i64,
        referrer_tag_ptr: *mut i64,
        length: i32,
    ) {
        let id = match self.identity {
            Identity::Tags => self.object_id_by_tag(tag_ptr, class_tag, size, length),
            Identity::Addresses { .. } => {
                match self.object_id_by_address(tag_ptr, class_tag, size, length) {
                    Some(id) => id,
                    None => return,
                }
            }
        };
        if referrer_tag_ptr.is_null() {
            // SAFETY: JVMTI passes the referee's tag pointer for the callback's duration.
            let tag = unsafe { *tag_ptr };
            self.root(kind, info, id, tag);
            return;
        }
        let entered = match self.identity {
            Identity::Tags => {
                match kind {
                    JVMTI_HEAP_REFERENCE_FIELD
                    | JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT
                    | JVMTI_HEAP_REFERENCE_STATIC_FIELD
                    | JVMTI_HEAP_REFERENCE_SIGNERS
                    | JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN
                    | JVMTI_HEAP_REFERENCE_CLASS_LOADER => {}
                    _ => return,
                }
                // SAFETY: JVMTI passes the referrer's tag pointer for the callback's duration.
                let referrer = unsafe { *referrer_tag_ptr } as u64;
                self.enter(referrer)
            }
            Identity::Addresses { referrer_distance } => {
                // SAFETY: JVMTI passes the referrer's tag pointer for the callback's duration.
                let referrer_tag = unsafe { *referrer_tag_ptr };
                let address = if referrer_tag_ptr == tag_ptr {
                    Some(id)
                } else if (referrer_tag_ptr as isize) - (tag_ptr as isize) != referrer_distance {
                    None
                } else {
                    wrapped_referrer(referrer_tag_ptr, referrer_class_tag)
                };
                let Some(address) = address else {
                    self.fail(changed("a referrer"));
                    return;
                };
                let referrer = match self.class_of_tag(referrer_tag) {
                    Some(class) => self.classes[class].id,
                    None => address,
                };
                self.enter_address(referrer, referrer_class_tag)
            }
        };
        if !entered {
            return;
        }
        let index = if info.is_null() {
            -1
        } else {
            // SAFETY: for FIELD, STATIC_FIELD and ARRAY_ELEMENT JVMTI fills an index member;
            // `field` and `array` share its layout.
            unsafe { (*info).field.index }
        };
        let index = index.max(0) as usize;
        match (&self.current, kind) {
            (Current::Instance { class, .. }, JVMTI_HEAP_REFERENCE_FIELD) => {
                match self.classes[*class].slots.get(index).copied().flatten() {
                    Some((offset, BasicType::Object)) => {
                        let at = offset as usize;
                        self.values[at..at + 8].copy_from_slice(&id.to_be_bytes());
                    }
                    _ => self.field_mismatch(*class),
                }
            }
            (Current::ObjectArray { .. }, JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT) => {
                if let Some(element) = self.elements.get_mut(index) {
                    *element = id;
                }
            }
            (Current::Class { class }, JVMTI_HEAP_REFERENCE_STATIC_FIELD) => {
                match self.classes[*class]
                    .static_slots
                    .get(index)
                    .copied()
                    .flatten()
                {
                    Some(position) => self.statics.push((position, StaticValue::Object(id))),
                    None => self.field_mismatch(*class),
                }
            }
            (Current::Class { .. }, JVMTI_HEAP_REFERENCE_SIGNERS) => self.ids.signers = id,
            (Current::Class { .. }, JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN) => {
                self.ids.protection_domain = id
            }
            (Current::Class { .. }, JVMTI_HEAP_REFERENCE_CLASS_LOADER) => self.ids.loader = id,
            _ => {}
        }
    }

    /// The object a primitive value callback is about: its id, if it is the current one.
    fn value_owner(&mut self, tag_ptr: *mut i64, class_tag: i64, size: Option<i64>) -> Option<u64> {
        // SAFETY: JVMTI passes the object's tag pointer for the callback's duration.
        let tag = unsafe { *tag_ptr };
        match self.identity {
            Identity::Tags => {
                let id = tag as u64;
                (id != 0 && self.enter(id)).then_some(id)
            }
            Identity::Addresses { .. } => {
                // A class's static values may come before any reference of its own.
                if let Some(class) = self.class_of_tag(tag) {
                    let id = self.classes[class].id;
                    if !self.enter_address(id, 0) {
                        return None;
                    }
                    return Some(id);
                }
                // Any other object's values come in its visit, after its CLASS reference.
                let current = match self.current {
                    Current::Instance { id, .. } | Current::PrimitiveArray { id, .. } => Some(id),
                    Current::Skipped { .. } => return None,
                    _ => None,
                };
                match checked_object(tag_ptr, size, class_tag) {
                    Some(object) if Some(object) == current => Some(object),
                    _ => {
                        self.fail(changed("a primitive value's object"));
                        None
                    }
                }
            }
        }
    }

    fn primitive_field(
        &mut self,
        kind: jvmtiHeapReferenceKind,
        info: *const jvmtiHeapReferenceInfo,
        object_class_tag: i64,
        object_tag_ptr: *mut i64,
        value: jvalue,
        value_type: jvmtiPrimitiveType,
    ) {
        if info.is_null()
            || self
                .value_owner(object_tag_ptr, object_class_tag, None)
                .is_none()
        {
            return;
        }
        // SAFETY: for FIELD and STATIC_FIELD JVMTI fills the `field` member.
        let index = unsafe { (*info).field.index }.max(0) as usize;
        let Some((basic_type, bytes, width)) = primitive_bytes(value_type, value) else {
            return;
        };
        match (&self.current, kind) {
            (Current::Instance { class, .. }, JVMTI_HEAP_REFERENCE_FIELD) => {
                match self.classes[*class].slots.get(index).copied().flatten() {
                    Some((offset, slot_type)) if slot_type == basic_type => {
                        let at = offset as usize;
                        self.values[at..at + width].copy_from_slice(&bytes[..width]);
                    }
                    _ => self.field_mismatch(*class),
                }
            }
            (Current::Class { class }, JVMTI_HEAP_REFERENCE_STATIC_FIELD) => {
                match self.classes[*class]
                    .static_slots
                    .get(index)
                    .copied()
                    .flatten()
                {
                    Some(position) => self
                        .statics
                        .push((position, StaticValue::Primitive(basic_type, bytes))),
                    None => self.field_mismatch(*class),
                }
            }
            _ => {}
        }
    }

    fn primitive_array(
        &mut self,
        class_tag: i64,
        size: i64,
        tag_ptr: *mut i64,
        count: i32,
        element_type: jvmtiPrimitiveType,
        elements: *const c_void,
    ) {
        let (id, class, size) = match self.identity {
            Identity::Tags => {
                // SAFETY: JVMTI passes the array's tag pointer for the callback's duration.
                let id = unsafe { *tag_ptr } as u64;
                let Some(info) = self.info(id).copied() else {
                    return;
                };
                if info.done || info.class == 0 {
                    return;
                }
                if let Some(info) = self.info(id) {
                    info.done = true;
                }
                (id, info.class as usize - 1, u64::from(info.size))
            }
            Identity::Addresses { .. } => {
                let Some(id) = self.value_owner(tag_ptr, class_tag, Some(size)) else {
                    return;
                };
                let Some(class) = self.class_index.get(class_tag as u64) else {
                    return;
                };
                match &mut self.current {
                    Current::PrimitiveArray { written, .. } if !*written => *written = true,
                    _ => {
                        self.fail(changed("a primitive array"));
                        return;
                    }
                }
                (id, class, size.max(0) as u64)
            }
        };
        let Some(basic_type) = BasicType::from_descriptor(element_type as u8) else {
            return;
        };
        let length = count.max(0) as u32;
        let bytes = length as usize * basic_type.size(8) as usize;
        let native: &[u8] = if bytes == 0 || elements.is_null() {
            &[]
        } else {
            // SAFETY: JVMTI passes `count` elements of `element_type` at `elements`.
            unsafe { std::slice::from_raw_parts(elements.cast::<u8>(), bytes) }
        };
        self.count(size);
        let result =
            self.sink
                .primitive_array(id, size, &self.classes[class], basic_type, length, native);
        self.write(result);
    }
}

/// Runs a heap callback body; a panic or a write error stops the walk instead of crossing FFI.
fn in_walk(user_data: *mut c_void, body: impl FnOnce(&mut Walk)) -> i32 {
    // SAFETY: `user_data` is the `Walk` that `dump_with` passed to FollowReferences; it lives
    // until FollowReferences returns and only this callback touches it meanwhile.
    let walk = unsafe { &mut *user_data.cast::<Walk>() };
    if walk.error.is_some() {
        return JVMTI_VISIT_ABORT;
    }
    if catch_unwind(AssertUnwindSafe(|| body(&mut *walk))).is_err() {
        walk.error = Some(io::Error::other("internal error while walking the heap"));
    }
    if walk.error.is_some() {
        JVMTI_VISIT_ABORT
    } else {
        JVMTI_VISIT_OBJECTS
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn on_reference(
    kind: jvmtiHeapReferenceKind,
    info: *const jvmtiHeapReferenceInfo,
    class_tag: i64,
    referrer_class_tag: i64,
    size: i64,
    tag_ptr: *mut i64,
    referrer_tag_ptr: *mut i64,
    length: i32,
    user_data: *mut c_void,
) -> i32 {
    in_walk(user_data, |walk| {
        walk.reference(
            kind,
            info,
            class_tag,
            referrer_class_tag,
            size,
            tag_ptr,
            referrer_tag_ptr,
            length,
        )
    })
}

unsafe extern "system" fn on_primitive_field(
    kind: jvmtiHeapReferenceKind,
    info: *const jvmtiHeapReferenceInfo,
    object_class_tag: i64,
    object_tag_ptr: *mut i64,
    value: jvalue,
    value_type: jvmtiPrimitiveType,
    user_data: *mut c_void,
) -> i32 {
    in_walk(user_data, |walk| {
        walk.primitive_field(
            kind,
            info,
            object_class_tag,
            object_tag_ptr,
            value,
            value_type,
        )
    })
}

unsafe extern "system" fn on_primitive_array(
    class_tag: i64,
    size: i64,
    tag_ptr: *mut i64,
    count: i32,
    element_type: jvmtiPrimitiveType,
    elements: *const c_void,
    user_data: *mut c_void,
) -> i32 {
    in_walk(user_data, |walk| {
        walk.primitive_array(class_tag, size, tag_ptr, count, element_type, elements)
    })
}
