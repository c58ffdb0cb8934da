//! The heap walk behind heap=dump: every live object, found by JVMTI's FollowReferences at a
//! safepoint, handed to a [`HeapSink`] that writes HPROF's binary heap dump records or its
//! ASCII dump. (One walk from the roots to the records; at about 1,000 lines it is kept in one
//! file so that the tagging, the callbacks and the record layout read together.)
//!
//! The dump runs in a JVMTI environment of its own, so its tags (object ids) never mix with
//! the allocation sampler's and all go away with it. Classes are tagged first, with their
//! field layouts, so that each object's field values can be placed as HPROF lays them out:
//! the class's own fields, then its super classes'.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

use jvmti_bindings::sys::jni::jvalue;
use jvmti_bindings::sys::jvmti::{
    jvmtiHeapReferenceKind, jvmtiPrimitiveType, JVMTI_CLASS_STATUS_ARRAY,
    JVMTI_CLASS_STATUS_PREPARED, JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT, JVMTI_HEAP_REFERENCE_FIELD,
    JVMTI_HEAP_REFERENCE_JNI_GLOBAL, JVMTI_HEAP_REFERENCE_JNI_LOCAL, JVMTI_HEAP_REFERENCE_MONITOR,
    JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN, JVMTI_HEAP_REFERENCE_SIGNERS,
    JVMTI_HEAP_REFERENCE_STACK_LOCAL, JVMTI_HEAP_REFERENCE_STATIC_FIELD,
    JVMTI_HEAP_REFERENCE_SYSTEM_CLASS, JVMTI_HEAP_REFERENCE_THREAD, JVMTI_VISIT_ABORT,
    JVMTI_VISIT_OBJECTS,
};
use openprof_format::hprof_binary::BasicType;
use openprof_format::java_names::class_name_from_signature;

use crate::error::{AgentResult, JvmtiContext};
use crate::jni::delete_local_ref;
use crate::jvmti::{
    jclass, jvmtiCapabilities, jvmtiHeapCallbacks, jvmtiHeapReferenceInfo, JNIEnv, JavaVM, Jvmti,
};

/// Object ids count from here; class ids (from the sink) stay below.
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
        signers_id: u64,
        domain_id: u64,
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
}

#[derive(Clone, Copy, Default)]
struct ObjectInfo {
    /// Index into the class list, plus one (0: not seen yet).
    class: u32,
    size: u32,
    length: i32,
    done: bool,
}

enum Current {
    None,
    Instance { id: u64, class: usize },
    ObjectArray { id: u64, class: usize },
    Class { class: usize },
}

struct Walk<'a> {
    sink: &'a mut dyn HeapSink,
    classes: Vec<DumpClass>,
    class_by_id: HashMap<u64, usize>,
    thread_serial_by_tag: HashMap<i64, u32>,
    objects: Vec<ObjectInfo>,
    current: Current,
    values: Vec<u8>,
    elements: Vec<u64>,
    statics: Vec<(u16, StaticValue)>,
    signers: u64,
    domain: u64,
    classes_done: Vec<bool>,
    /// The index of java.lang.Class in `classes`.
    class_class: Option<usize>,
    summary: DumpSummary,
    error: Option<io::Error>,
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
    let result = dump_with(env, jni, sink, thread_serial);
    let _ = env.dispose();
    result
}

fn dump_with(
    env: Jvmti,
    jni: *mut JNIEnv,
    sink: &mut dyn HeapSink,
    thread_serial: impl Fn(crate::jvmti::jthread) -> u32,
) -> AgentResult<DumpSummary> {
    env.force_garbage_collection()
        .doing("can't collect garbage before the heap dump")?;
    let mut next_object_id = FIRST_OBJECT_ID;
    let classes = list_classes(env, jni, sink, &mut next_object_id)?;
    let class_by_id = classes
        .iter()
        .enumerate()
        .map(|(index, class)| (class.id, index))
        .collect();
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
    let preassigned = (next_object_id - FIRST_OBJECT_ID) as usize;
    let count = classes.len();
    let mut walk = Walk {
        sink,
        classes,
        class_by_id,
        thread_serial_by_tag,
        objects: vec![ObjectInfo::default(); preassigned],
        current: Current::None,
        values: Vec::new(),
        elements: Vec::new(),
        statics: Vec::new(),
        signers: 0,
        domain: 0,
        classes_done: vec![false; count],
        class_class: None,
        summary: DumpSummary::default(),
        error: None,
    };
    walk.class_class = walk
        .classes
        .iter()
        .position(|class| class.name == "java.lang.Class");
    walk.sink
        .begin(&walk.classes)
        .map_err(|error| format!("can't write the heap dump: {error}"))?;
    let callbacks = jvmtiHeapCallbacks {
        heap_reference_callback: Some(on_reference),
        primitive_field_callback: Some(on_primitive_field),
        array_primitive_value_callback: Some(on_primitive_array),
        ..Default::default()
    };
    env.follow_references(&callbacks, (&mut walk as *mut Walk).cast())
        .map_err(|error| error.to_string())?;
    if walk.error.is_none() {
        walk.finish_current();
        walk.finish_unvisited();
    }
    if let Some(error) = walk.error.take() {
        return Err(format!("can't write the heap dump: {error}").into());
    }
    walk.summary.classes = walk.classes.len() as u64;
    let summary = walk.summary.clone();
    walk.sink
        .end(&summary)
        .map_err(|error| format!("can't write the heap dump: {error}"))?;
    Ok(summary)
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

impl Walk<'_> {
    fn write(&mut self, result: io::Result<()>) {
        if let Err(error) = result {
            self.error.get_or_insert(error);
        }
    }

    fn info(&mut self, id: u64) -> Option<&mut ObjectInfo> {
        let at = id.checked_sub(FIRST_OBJECT_ID)? as usize;
        self.objects.get_mut(at)
    }

    /// The id of a referenced object, numbering it (and noting its class) on first sight.
    fn object_id(&mut self, tag_ptr: *mut i64, class_tag: i64, size: i64, length: i32) -> u64 {
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
        let class = self.class_by_id.get(&(class_tag as u64)).copied();
        let unlisted_mirror = class.is_some() && class == self.class_class;
        if let Some(info) = self.info(id) {
            if info.class == 0 {
                match class {
                    // A java.lang.Class object not tagged as a class: the mirror of a class
                    // the JVM has not loaded (CDS archives them) or of a primitive type. Like
                    // HotSpot's own dumper, only loaded classes are written, as CLASS DUMPs.
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

    /// Makes `id` the object whose fields are being reported, finishing the previous one.
    fn enter(&mut self, id: u64) -> bool {
        let same = match self.current {
            Current::Instance { id: current, .. } | Current::ObjectArray { id: current, .. } => {
                current == id
            }
            Current::Class { class } => self.classes[class].id == id,
            Current::None => false,
        };
        if same {
            return true;
        }
        self.finish_current();
        if let Some(&class) = self.class_by_id.get(&id) {
            self.current = Current::Class { class };
            self.statics.clear();
            self.signers = 0;
            self.domain = 0;
            return true;
        }
        let Some(info) = self.info(id).copied() else {
            return false;
        };
        if info.class == 0 || info.done {
            return false;
        }
        let class = info.class as usize - 1;
        match self.classes[class].kind {
            ClassKind::Instance => {
                self.values.clear();
                self.values
                    .resize(self.classes[class].instance_bytes as usize, 0);
                self.current = Current::Instance { id, class };
            }
            ClassKind::ObjectArray => {
                self.elements.clear();
                self.elements.resize(info.length.max(0) as usize, 0);
                self.current = Current::ObjectArray { id, class };
            }
            ClassKind::PrimitiveArray(_) => return false,
        }
        true
    }

    fn finish_current(&mut self) {
        match std::mem::replace(&mut self.current, Current::None) {
            Current::None => {}
            Current::Instance { id, class } => {
                let size = self.mark_done(id);
                let result = self
                    .sink
                    .instance(id, size, &self.classes[class], &self.values);
                self.write(result);
            }
            Current::ObjectArray { id, class } => {
                let size = self.mark_done(id);
                let result = self
                    .sink
                    .object_array(id, size, &self.classes[class], &self.elements);
                self.write(result);
            }
            Current::Class { class } => {
                self.classes_done[class] = true;
                let statics = std::mem::take(&mut self.statics);
                let result =
                    self.sink
                        .class_dump(&self.classes[class], &statics, self.signers, self.domain);
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

    fn mark_done(&mut self, id: u64) -> u64 {
        let mut size = 0;
        if let Some(info) = self.info(id) {
            info.done = true;
            size = info.size as u64;
        }
        self.summary.objects += 1;
        self.summary.bytes += size;
        size
    }

    /// Objects reported only as referees (no field set, e.g. all null), and classes never
    /// visited: written with default values.
    fn finish_unvisited(&mut self) {
        for at in 0..self.objects.len() {
            let info = self.objects[at];
            if info.done || info.class == 0 || info.class == u32::MAX {
                continue;
            }
            let id = FIRST_OBJECT_ID + at as u64;
            let class = info.class as usize - 1;
            let length = info.length.max(0) as u32;
            let size = self.mark_done(id);
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
        for class in 0..self.classes.len() {
            if !self.classes_done[class] {
                self.classes_done[class] = true;
                let result = self.sink.class_dump(&self.classes[class], &[], 0, 0);
                self.write(result);
            }
        }
    }

    fn root(&mut self, kind: jvmtiHeapReferenceKind, info: *const jvmtiHeapReferenceInfo, id: u64) {
        let thread_of =
            |walk: &Self, tag: i64| walk.thread_serial_by_tag.get(&tag).copied().unwrap_or(0);
        let root = match kind {
            JVMTI_HEAP_REFERENCE_JNI_GLOBAL => Root::JniGlobal { id },
            JVMTI_HEAP_REFERENCE_SYSTEM_CLASS => Root::StickyClass { id },
            JVMTI_HEAP_REFERENCE_MONITOR => Root::MonitorUsed { id },
            JVMTI_HEAP_REFERENCE_THREAD => {
                // The thread object's own tag was set before the walk.
                let thread = self
                    .thread_serial_by_tag
                    .get(&(id as i64))
                    .copied()
                    .unwrap_or(0);
                Root::ThreadObject { id, thread }
            }
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
        size: i64,
        tag_ptr: *mut i64,
        referrer_tag_ptr: *mut i64,
        length: i32,
    ) {
        let id = self.object_id(tag_ptr, class_tag, size, length);
        if referrer_tag_ptr.is_null() {
            self.root(kind, info, id);
            return;
        }
        // SAFETY: JVMTI passes the referrer's tag pointer for the callback's duration.
        let referrer = unsafe { *referrer_tag_ptr } as u64;
        let index = if info.is_null() {
            -1
        } else {
            // SAFETY: for FIELD, STATIC_FIELD and ARRAY_ELEMENT JVMTI fills an index member;
            // `field` and `array` share its layout.
            unsafe { (*info).field.index }
        };
        match kind {
            JVMTI_HEAP_REFERENCE_FIELD
            | JVMTI_HEAP_REFERENCE_ARRAY_ELEMENT
            | JVMTI_HEAP_REFERENCE_STATIC_FIELD
            | JVMTI_HEAP_REFERENCE_SIGNERS
            | JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN => {}
            _ => return,
        }
        if !self.enter(referrer) {
            return;
        }
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
            (Current::Class { .. }, JVMTI_HEAP_REFERENCE_SIGNERS) => self.signers = id,
            (Current::Class { .. }, JVMTI_HEAP_REFERENCE_PROTECTION_DOMAIN) => self.domain = id,
            _ => {}
        }
    }

    fn primitive_field(
        &mut self,
        kind: jvmtiHeapReferenceKind,
        info: *const jvmtiHeapReferenceInfo,
        object_tag_ptr: *mut i64,
        value: jvalue,
        value_type: jvmtiPrimitiveType,
    ) {
        // SAFETY: JVMTI passes the object's tag pointer for the callback's duration.
        let id = unsafe { *object_tag_ptr } as u64;
        if id == 0 || info.is_null() || !self.enter(id) {
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
        tag_ptr: *mut i64,
        count: i32,
        element_type: jvmtiPrimitiveType,
        elements: *const c_void,
    ) {
        // SAFETY: JVMTI passes the array's tag pointer for the callback's duration.
        let id = unsafe { *tag_ptr } as u64;
        let Some(info) = self.info(id).copied() else {
            return;
        };
        if info.done || info.class == 0 {
            return;
        }
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
        let size = self.mark_done(id);
        let class = info.class as usize - 1;
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
    _referrer_class_tag: i64,
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
    _object_class_tag: i64,
    object_tag_ptr: *mut i64,
    value: jvalue,
    value_type: jvmtiPrimitiveType,
    user_data: *mut c_void,
) -> i32 {
    in_walk(user_data, |walk| {
        walk.primitive_field(kind, info, object_tag_ptr, value, value_type)
    })
}

unsafe extern "system" fn on_primitive_array(
    _class_tag: i64,
    _size: i64,
    tag_ptr: *mut i64,
    count: i32,
    element_type: jvmtiPrimitiveType,
    elements: *const c_void,
    user_data: *mut c_void,
) -> i32 {
    in_walk(user_data, |walk| {
        walk.primitive_array(tag_ptr, count, element_type, elements)
    })
}
