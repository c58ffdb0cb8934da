//! The object graph of an HPROF binary heap dump, built in one pass over the file into compact
//! columns: objects numbered densely in file order, each with its class, shallow size and
//! outgoing references (CSR: one offset per object into one list of targets), the GC roots with
//! their kinds, and the classes with their field layouts. The last heap dump of a file is the
//! one kept.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use openprof_format::heap::{estimate, RootKind};
use openprof_format::hprof_binary::{
    binary_class_name, BasicType, ClassDump, Header, HprofError, HprofReader, Item, Record,
    SubRecord,
};

use super::spill::{DiskColumn, SpillList};

/// No node, no class.
pub const NONE: u32 = u32::MAX;
/// The class column marks class objects (CLASS DUMPs) with this bit; the rest is their class.
pub const CLASS_OBJECT: u32 = 1 << 31;

/// What went wrong reading a dump into a graph.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error(transparent)]
    Hprof(#[from] HprofError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Limit(String),
}

/// How the graph is built.
#[derive(Clone, Debug, Default)]
pub struct GraphOptions {
    /// Bytes the list of references read may take in memory before it goes to a temporary
    /// file; `None` keeps it in memory.
    pub memory_limit: Option<u64>,
    /// Where temporary files go (the system's temporary directory when `None`).
    pub spill_dir: Option<PathBuf>,
}

/// Where a long step of building the graph is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Bytes of the file read so far.
    Reading(u64),
    /// A step after reading starts (its name).
    Step(&'static str),
}

/// A class: its name, where its CLASS DUMP put it, and the layout its instances have.
#[derive(Clone, Debug)]
pub struct ClassInfo {
    pub id: u64,
    /// Java source form (`java.lang.String`, `int[]`, `Keep$Node[]`).
    pub name: String,
    pub super_id: u64,
    pub loader_id: u64,
    /// The CLASS DUMP's instance size: field bytes with references at the identifier size.
    pub dumped_instance_size: u32,
    /// The class object's node, [`NONE`] when the dump has no CLASS DUMP for it.
    pub node: u32,
    own_fields: Vec<(u64, BasicType)>,
    static_references: Vec<(u64, u64)>,
    layout: Option<Layout>,
}

/// An instance's fields over its class and super classes, in the INSTANCE DUMP's order.
#[derive(Clone, Debug, Default)]
struct Layout {
    /// (byte offset in the values, field name id) of each reference field.
    references: Vec<(u32, u64)>,
    value_bytes: u64,
    shallow: u64,
    /// The offset of `java.lang.ref.Reference.referent`, for Reference's subclasses.
    referent: Option<u32>,
}

/// A GC root: the object, its kind, and the thread it belongs to (0 when none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    pub node: u32,
    pub kind: RootKind,
    pub thread_serial: u32,
}

/// Object ids to node numbers: the ids sorted (with the node of each when file order is not
/// id order) and a directory of where each range of ids starts, so a lookup searches a few
/// entries.
struct IdIndex {
    /// None when the nodes' ids ascend in file order: the `ids` column is then the sorted list.
    sorted: Option<(Vec<u64>, Vec<u32>)>,
    min: u64,
    shift: u32,
    directory: Vec<u32>,
}

impl IdIndex {
    fn new(ids: &[u64]) -> IdIndex {
        let ascending = ids.windows(2).all(|pair| pair[0] < pair[1]);
        let sorted: Option<(Vec<u64>, Vec<u32>)> = if ascending {
            None
        } else {
            let mut order: Vec<u32> = (0..ids.len() as u32).collect();
            order.sort_unstable_by_key(|&node| ids[node as usize]);
            let sorted_ids: Vec<u64> = order.iter().map(|&node| ids[node as usize]).collect();
            Some((sorted_ids, order))
        };
        let keys: &[u64] = sorted.as_ref().map_or(ids, |(keys, _)| keys);
        let (min, max) = match (keys.first(), keys.last()) {
            (Some(&min), Some(&max)) => (min, max),
            _ => (0, 0),
        };
        // About 8 objects a bucket.
        let buckets = (keys.len() / 8).max(1).next_power_of_two() as u64;
        let span = (max - min).saturating_add(1);
        let mut shift = 0;
        while (span >> shift) > buckets {
            shift += 1;
        }
        let count = ((span - 1) >> shift) as usize + 2;
        let mut directory = vec![0u32; count];
        let mut position = 0usize;
        for (bucket, slot) in directory.iter_mut().enumerate() {
            while position < keys.len() && (((keys[position] - min) >> shift) as usize) < bucket {
                position += 1;
            }
            *slot = position as u32;
        }
        IdIndex {
            sorted,
            min,
            shift,
            directory,
        }
    }

    fn find(&self, ids: &[u64], id: u64) -> u32 {
        let keys: &[u64] = self.sorted.as_ref().map_or(ids, |(keys, _)| keys);
        if id < self.min || keys.is_empty() {
            return NONE;
        }
        let bucket = ((id - self.min) >> self.shift) as usize;
        if bucket + 1 >= self.directory.len() {
            return NONE;
        }
        let (start, end) = (
            self.directory[bucket] as usize,
            self.directory[bucket + 1] as usize,
        );
        match keys[start..end].binary_search(&id) {
            Ok(found) => {
                let position = start + found;
                match &self.sorted {
                    Some((_, order)) => order[position],
                    None => position as u32,
                }
            }
            Err(_) => NONE,
        }
    }

    fn bytes(&self) -> u64 {
        let sorted = self
            .sorted
            .as_ref()
            .map_or(0, |(keys, order)| keys.len() * 8 + order.len() * 4);
        (sorted + self.directory.len() * 4) as u64
    }
}

/// One heap dump's objects and references.
pub struct HeapGraph {
    pub path: PathBuf,
    pub header: Header,
    pub classes: Vec<ClassInfo>,
    class_by_id: HashMap<u64, u32>,
    strings: HashMap<u64, Box<str>>,
    ids: Vec<u64>,
    class_of: Vec<u32>,
    /// Shallow bytes over 8 (every size is a multiple of 8).
    size8: Vec<u32>,
    edge_start: Vec<u64>,
    edges: Vec<u32>,
    pub roots: Vec<Root>,
    index: IdIndex,
    /// Each node's sub-record offset in the file, to read it again.
    offsets: DiskColumn,
    /// (java.lang.ref.Reference instance, its referent), sorted.
    referents: Vec<(u32, u32)>,
    /// References to ids the dump has no object for (dropped).
    pub dangling_references: u64,
    /// Roots naming ids the dump has no object for.
    pub dangling_roots: u64,
    /// Whether the references read went through a temporary file.
    pub spilled: bool,
    pub options: GraphOptions,
    parked: Option<super::spill::Parked>,
}

/// An identifier's value from its big-endian bytes.
fn id_value(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |value, &byte| (value << 8) | u64::from(byte))
}

/// The non-null references among an instance's field values.
fn instance_references<'a>(
    layout: &'a Layout,
    values: &'a [u8],
    id_size: usize,
) -> impl Iterator<Item = u64> + 'a {
    layout.references.iter().filter_map(move |&(offset, _)| {
        let start = offset as usize;
        values
            .get(start..start + id_size)
            .map(id_value)
            .filter(|&target| target != 0)
    })
}

/// A Reference instance's referent, when not null.
fn referent(layout: &Layout, values: &[u8], id_size: usize) -> Option<u64> {
    let start = layout.referent? as usize;
    values
        .get(start..start + id_size)
        .map(id_value)
        .filter(|&target| target != 0)
}

/// Names synthetic classes get for primitive arrays (HPROF names no class in their records).
fn primitive_array_class_name(element: BasicType) -> &'static str {
    element.array_name()
}

struct Builder {
    options: GraphOptions,
    header: Header,
    strings: HashMap<u64, Box<str>>,
    class_names: HashMap<u64, u64>,
    classes: Vec<ClassInfo>,
    class_by_id: HashMap<u64, u32>,
    primitive_classes: HashMap<BasicType, u32>,
    reference_class: Option<u64>,
    ids: Vec<u64>,
    class_of: Vec<u32>,
    size8: Vec<u32>,
    /// Per node, the end of its references in `raw`.
    raw_end: Vec<u64>,
    raw: SpillList,
    /// Instances read before their class's layout was known: (node, class, field values).
    deferred: Vec<(u32, u32, Vec<u8>)>,
    roots: Vec<(u64, RootKind, u32)>,
    referents: Vec<(u32, u64)>,
    offsets: DiskColumn,
    /// A heap dump was closed: the next one replaces its objects.
    dump_closed: bool,
    /// Inside a HEAP DUMP record (not segmented), which the next record ends.
    whole_dump_open: bool,
}

impl Builder {
    fn new(options: GraphOptions, header: Header) -> Result<Builder, GraphError> {
        let offsets = DiskColumn::new(options.spill_dir.as_deref())?;
        let raw = SpillList::new(
            options.memory_limit.map(|limit| limit / 4),
            options.spill_dir.as_deref(),
        );
        Ok(Builder {
            options,
            header,
            strings: HashMap::new(),
            class_names: HashMap::new(),
            classes: Vec::new(),
            class_by_id: HashMap::new(),
            primitive_classes: HashMap::new(),
            reference_class: None,
            ids: Vec::new(),
            class_of: Vec::new(),
            size8: Vec::new(),
            raw_end: Vec::new(),
            raw,
            deferred: Vec::new(),
            roots: Vec::new(),
            referents: Vec::new(),
            offsets,
            dump_closed: false,
            whole_dump_open: false,
        })
    }

    fn id_value(&self, bytes: &[u8]) -> u64 {
        id_value(bytes)
    }

    fn class_index(&mut self, class_id: u64) -> u32 {
        if let Some(&index) = self.class_by_id.get(&class_id) {
            return index;
        }
        let index = self.classes.len() as u32;
        self.classes.push(ClassInfo {
            id: class_id,
            name: String::new(),
            super_id: 0,
            loader_id: 0,
            dumped_instance_size: 0,
            node: NONE,
            own_fields: Vec::new(),
            static_references: Vec::new(),
            layout: None,
        });
        self.class_by_id.insert(class_id, index);
        index
    }

    fn primitive_class(&mut self, element: BasicType) -> u32 {
        if let Some(&index) = self.primitive_classes.get(&element) {
            return index;
        }
        let index = self.classes.len() as u32;
        self.classes.push(ClassInfo {
            id: 0,
            name: primitive_array_class_name(element).to_string(),
            super_id: 0,
            loader_id: 0,
            dumped_instance_size: 0,
            node: NONE,
            own_fields: Vec::new(),
            static_references: Vec::new(),
            layout: None,
        });
        self.primitive_classes.insert(element, index);
        index
    }

    /// Drops the objects of a finished heap dump when another begins.
    fn begin_dump(&mut self) -> Result<(), GraphError> {
        if !self.dump_closed {
            return Ok(());
        }
        self.dump_closed = false;
        self.ids.clear();
        self.class_of.clear();
        self.size8.clear();
        self.raw_end.clear();
        self.raw = SpillList::new(
            self.options.memory_limit.map(|limit| limit / 4),
            self.options.spill_dir.as_deref(),
        );
        self.deferred.clear();
        self.roots.clear();
        self.referents.clear();
        self.offsets.truncate(0)?;
        for class in &mut self.classes {
            class.node = NONE;
        }
        Ok(())
    }

    fn new_node(&mut self, id: u64, class: u32, size: u64, offset: u64) -> Result<u32, GraphError> {
        let node = self.ids.len();
        if node >= (CLASS_OBJECT - 1) as usize {
            return Err(GraphError::Limit(format!(
                "byte {offset}: more than {} objects",
                CLASS_OBJECT - 1
            )));
        }
        self.ids.push(id);
        self.class_of.push(class);
        self.size8.push(u32::try_from(size / 8).unwrap_or(u32::MAX));
        self.offsets.push(offset)?;
        Ok(node as u32)
    }

    fn end_node(&mut self) {
        self.raw_end.push(self.raw.len());
    }

    fn edge(&mut self, target: u64) -> Result<(), GraphError> {
        if target != 0 {
            self.raw.push(target)?;
        }
        Ok(())
    }

    /// The layout of `class`'s instances, if its class and every super class are dumped.
    fn layout(&mut self, class: u32) -> Option<&Layout> {
        if self.classes[class as usize].layout.is_none() {
            let id_size = self.header.id_size;
            let mut layout = Layout::default();
            let (mut primitive_bytes, mut references) = (0u64, 0u64);
            let mut current = class;
            let mut steps = 0;
            loop {
                let info = &self.classes[current as usize];
                if info.node == NONE {
                    return None;
                }
                let is_reference = Some(info.id) == self.reference_class;
                for &(name, field_type) in &info.own_fields {
                    let offset = layout.value_bytes as u32;
                    let size = u64::from(field_type.size(id_size));
                    if field_type == BasicType::Object {
                        layout.references.push((offset, name));
                        references += 1;
                        if is_reference
                            && self.strings.get(&name).is_some_and(|n| &**n == "referent")
                        {
                            layout.referent = Some(offset);
                        }
                    } else {
                        primitive_bytes += size;
                    }
                    layout.value_bytes += size;
                }
                if info.super_id == 0 {
                    break;
                }
                steps += 1;
                // A corrupt file could make the super chain loop.
                match self.class_by_id.get(&info.super_id) {
                    Some(&next) if steps < 1000 => current = next,
                    _ => return None,
                }
            }
            layout.shallow = estimate::instance(primitive_bytes, references);
            self.classes[class as usize].layout = Some(layout);
        }
        self.classes[class as usize].layout.as_ref()
    }

    fn record(&mut self, record: Record) {
        match record {
            Record::Utf8 { id, text } => {
                self.strings
                    .insert(id, String::from_utf8_lossy(&text).into());
            }
            Record::LoadClass {
                class_id, name_id, ..
            } => {
                self.class_names.insert(class_id, name_id);
                if let Some(&index) = self.class_by_id.get(&class_id) {
                    if let Some(name) = self.strings.get(&name_id) {
                        self.classes[index as usize].name = binary_class_name(name);
                    }
                }
                // HotSpot names classes as the JVM does (java/lang/ref/Reference), HPROF's
                // agent as Java source does.
                if self
                    .strings
                    .get(&name_id)
                    .is_some_and(|name| binary_class_name(name) == "java.lang.ref.Reference")
                {
                    self.reference_class = Some(class_id);
                }
            }
            _ => {}
        }
    }

    fn sub_record(&mut self, sub: SubRecord, offset: u64) -> Result<(), GraphError> {
        let root = |kind, thread| Some((kind, thread));
        let (id, root_kind) = match &sub {
            SubRecord::RootUnknown { id } => (*id, root(RootKind::Unknown, 0)),
            SubRecord::RootJniGlobal { id, .. } => (*id, root(RootKind::JniGlobal, 0)),
            SubRecord::RootJniLocal {
                id, thread_serial, ..
            } => (*id, root(RootKind::JniLocal, *thread_serial)),
            SubRecord::RootJavaFrame {
                id, thread_serial, ..
            } => (*id, root(RootKind::JavaFrame, *thread_serial)),
            SubRecord::RootNativeStack { id, thread_serial } => {
                (*id, root(RootKind::NativeStack, *thread_serial))
            }
            SubRecord::RootStickyClass { id } => (*id, root(RootKind::SystemClass, 0)),
            SubRecord::RootThreadBlock { id, thread_serial } => {
                (*id, root(RootKind::ThreadBlock, *thread_serial))
            }
            SubRecord::RootMonitorUsed { id } => (*id, root(RootKind::MonitorUsed, 0)),
            SubRecord::RootThreadObject {
                id, thread_serial, ..
            } => (*id, root(RootKind::ThreadObject, *thread_serial)),
            _ => (0, None),
        };
        if let Some((kind, thread)) = root_kind {
            if id != 0 {
                self.roots.push((id, kind, thread));
            }
            return Ok(());
        }
        match sub {
            SubRecord::ClassDump(class) => self.class_dump(*class, offset)?,
            SubRecord::InstanceDump {
                id,
                class_id,
                values,
                ..
            } => {
                let class = self.class_index(class_id);
                let node = self.new_node(id, class, 0, offset)?;
                if self.layout(class).is_some() {
                    let layout = self.classes[class as usize]
                        .layout
                        .as_ref()
                        .expect("just laid out");
                    self.size8[node as usize] = (layout.shallow / 8) as u32;
                    let id_size = self.header.id_size as usize;
                    for target in instance_references(layout, &values, id_size) {
                        self.raw.push(target)?;
                    }
                    if let Some(target) = referent(layout, &values, id_size) {
                        self.referents.push((node, target));
                    }
                } else {
                    self.size8[node as usize] =
                        (estimate::instance(values.len() as u64, 0) / 8) as u32;
                    self.deferred.push((node, class, values));
                }
                self.edge(class_id)?;
                self.end_node();
            }
            SubRecord::ObjectArrayDump {
                id,
                class_id,
                elements,
                ..
            } => {
                let class = self.class_index(class_id);
                let size = estimate::array(elements.len() as u64, estimate::REFERENCE);
                self.new_node(id, class, size, offset)?;
                for element in elements {
                    self.edge(element)?;
                }
                self.edge(class_id)?;
                self.end_node();
            }
            SubRecord::PrimitiveArrayDump {
                id,
                element_type,
                length,
                ..
            } => {
                let class = self.primitive_class(element_type);
                let element_bytes = u64::from(element_type.size(self.header.id_size));
                let size = estimate::array(u64::from(length), element_bytes);
                self.new_node(id, class, size, offset)?;
                self.end_node();
            }
            _ => {}
        }
        Ok(())
    }

    fn class_dump(&mut self, class: ClassDump, offset: u64) -> Result<(), GraphError> {
        let index = self.class_index(class.class_id);
        let name = self
            .class_names
            .get(&class.class_id)
            .and_then(|name_id| self.strings.get(name_id))
            .map(|name| binary_class_name(name))
            .unwrap_or_else(|| format!("<class {:x}>", class.class_id));
        let id_size = self.header.id_size;
        // A class object's own bytes: its static fields' values, references counted as
        // compressed ones.
        let static_bytes: u64 = class
            .static_fields
            .iter()
            .map(|(_, value)| match value.basic_type {
                BasicType::Object => estimate::REFERENCE,
                primitive => u64::from(primitive.size(id_size)),
            })
            .sum();
        let size = static_bytes.div_ceil(estimate::ALIGNMENT) * estimate::ALIGNMENT;
        let node = self.new_node(class.class_id, CLASS_OBJECT | index, size, offset)?;
        {
            let info = &mut self.classes[index as usize];
            info.name = name;
            info.super_id = class.super_id;
            info.loader_id = class.loader_id;
            info.dumped_instance_size = class.instance_size;
            info.node = node;
            info.own_fields = class.instance_fields.clone();
            info.layout = None;
        }
        for target in [
            class.super_id,
            class.loader_id,
            class.signers_id,
            class.protection_domain_id,
        ] {
            self.edge(target)?;
        }
        let mut static_references = Vec::new();
        for (name, value) in &class.static_fields {
            if value.basic_type == BasicType::Object {
                let target = self.id_value(&value.bytes);
                if target != 0 {
                    static_references.push((*name, target));
                }
                self.edge(target)?;
            }
        }
        for (_, value) in &class.constant_pool {
            if value.basic_type == BasicType::Object {
                let target = self.id_value(&value.bytes);
                self.edge(target)?;
            }
        }
        self.classes[index as usize].static_references = static_references;
        self.end_node();
        Ok(())
    }

    /// Resolves ids to nodes: the references (those of deferred instances put back in their
    /// node's place), the roots, the referents.
    fn finish(
        mut self,
        path: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HeapGraph, GraphError> {
        progress(Progress::Step("resolving references"));
        // Instances whose class was dumped after them.
        let mut deferred_edges: Vec<(u32, u64)> = Vec::new();
        let deferred = std::mem::take(&mut self.deferred);
        for (node, class, values) in deferred {
            if self.layout(class).is_some() {
                let layout = self.classes[class as usize]
                    .layout
                    .as_ref()
                    .expect("just laid out");
                self.size8[node as usize] = (layout.shallow / 8) as u32;
                let id_size = self.header.id_size as usize;
                for target in instance_references(layout, &values, id_size) {
                    deferred_edges.push((node, target));
                }
                if let Some(target) = referent(layout, &values, id_size) {
                    self.referents.push((node, target));
                }
            }
        }
        // The columns grew by doubling: what they did not fill would stay allocated to the end.
        self.ids.shrink_to_fit();
        self.class_of.shrink_to_fit();
        self.size8.shrink_to_fit();
        self.raw_end.shrink_to_fit();
        let index = IdIndex::new(&self.ids);
        let nodes = self.ids.len();
        let mut edges: Vec<u32> =
            Vec::with_capacity((self.raw.len() as usize).saturating_add(deferred_edges.len()));
        let mut edge_start: Vec<u64> = Vec::with_capacity(nodes + 1);
        let spilled = self.raw.spilled();
        let mut raw = std::mem::replace(&mut self.raw, SpillList::new(None, None)).into_reader()?;
        let mut dangling = 0u64;
        let mut position = 0u64;
        let mut next_deferred = 0usize;
        for node in 0..nodes {
            edge_start.push(edges.len() as u64);
            while position < self.raw_end[node] {
                let target = raw.next_value()?.ok_or_else(|| {
                    GraphError::Io(std::io::Error::other("references ended early"))
                })?;
                position += 1;
                match index.find(&self.ids, target) {
                    NONE => dangling += 1,
                    found => edges.push(found),
                }
            }
            while next_deferred < deferred_edges.len()
                && deferred_edges[next_deferred].0 as usize == node
            {
                match index.find(&self.ids, deferred_edges[next_deferred].1) {
                    NONE => dangling += 1,
                    found => edges.push(found),
                }
                next_deferred += 1;
            }
        }
        edge_start.push(edges.len() as u64);
        edges.shrink_to_fit();
        self.raw_end = Vec::new();
        let mut dangling_roots = 0;
        let mut roots = Vec::with_capacity(self.roots.len());
        for &(id, kind, thread_serial) in &self.roots {
            match index.find(&self.ids, id) {
                NONE => dangling_roots += 1,
                node => roots.push(Root {
                    node,
                    kind,
                    thread_serial,
                }),
            }
        }
        let mut referents: Vec<(u32, u32)> = self
            .referents
            .iter()
            .filter_map(|&(node, target)| match index.find(&self.ids, target) {
                NONE => None,
                found => Some((node, found)),
            })
            .collect();
        referents.sort_unstable();
        self.offsets.finish()?;
        // Classes never dumped keep the name their LOAD CLASS gave, if any.
        for class in &mut self.classes {
            if class.name.is_empty() {
                class.name = self
                    .class_names
                    .get(&class.id)
                    .and_then(|name_id| self.strings.get(name_id))
                    .map(|name| binary_class_name(name))
                    .unwrap_or_else(|| format!("<class {:x}>", class.id));
            }
        }
        Ok(HeapGraph {
            path: path.to_path_buf(),
            header: self.header,
            classes: self.classes,
            class_by_id: self.class_by_id,
            strings: self.strings,
            ids: self.ids,
            class_of: self.class_of,
            size8: self.size8,
            edge_start,
            edges,
            roots,
            index,
            offsets: self.offsets,
            referents,
            dangling_references: dangling,
            dangling_roots,
            spilled,
            options: self.options,
            parked: None,
        })
    }
}

/// How often, in bytes read, progress is reported.
const PROGRESS_STEP: u64 = 4 << 20;

impl HeapGraph {
    /// Reads the last heap dump of an HPROF binary file into a graph, in one pass.
    pub fn read(
        path: &Path,
        options: &GraphOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HeapGraph, GraphError> {
        let file = File::open(path)?;
        Self::read_from(
            BufReader::with_capacity(1 << 20, file),
            path,
            options,
            progress,
        )
    }

    /// [`HeapGraph::read`] from any input (`path` is where objects are read again from).
    pub fn read_from(
        input: impl Read,
        path: &Path,
        options: &GraphOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HeapGraph, GraphError> {
        let mut reader = HprofReader::new(input)?.without_primitive_values();
        let mut builder = Builder::new(options.clone(), reader.header().clone())?;
        let mut reported = 0;
        let mut in_segmented = false;
        let mut saw_dump = false;
        loop {
            let offset = reader.offset();
            let Some(item) = reader.next_item() else {
                break;
            };
            match item? {
                Item::Record(record) => {
                    if builder.whole_dump_open {
                        builder.whole_dump_open = false;
                        builder.dump_closed = true;
                    }
                    builder.record(record);
                }
                Item::HeapDumpStart { segment } => {
                    saw_dump = true;
                    if !(segment && in_segmented) {
                        if builder.whole_dump_open {
                            builder.dump_closed = true;
                        }
                        builder.begin_dump()?;
                    }
                    in_segmented = segment;
                    builder.whole_dump_open = !segment;
                }
                Item::HeapDumpEnd => {
                    in_segmented = false;
                    builder.dump_closed = true;
                }
                Item::Sub(sub) => builder.sub_record(sub, offset)?,
            }
            if reader.offset() - reported >= PROGRESS_STEP {
                reported = reader.offset();
                progress(Progress::Reading(reported));
            }
        }
        if in_segmented {
            return Err(HprofError::Malformed {
                offset: reader.offset(),
                message: "the file ends inside a heap dump (no HEAP DUMP END)".into(),
            }
            .into());
        }
        if !saw_dump {
            return Err(HprofError::Malformed {
                offset: reader.offset(),
                message: "the file has no heap dump".into(),
            }
            .into());
        }
        progress(Progress::Reading(reader.offset()));
        builder.finish(path, progress)
    }

    pub fn node_count(&self) -> usize {
        self.ids.len()
    }

    /// Moves the columns to a temporary file until [`HeapGraph::unpark`]; nothing may read the
    /// graph in between.
    pub fn park(&mut self) -> Result<(), GraphError> {
        let mut writer = super::spill::ParkWriter::new(self.options.spill_dir.as_deref())?;
        writer.column(&mut self.ids)?;
        writer.column(&mut self.class_of)?;
        writer.column(&mut self.size8)?;
        writer.column(&mut self.edge_start)?;
        writer.column(&mut self.edges)?;
        self.parked = Some(writer.finish()?);
        Ok(())
    }

    /// Reads back what [`HeapGraph::park`] moved out.
    pub fn unpark(&mut self) -> Result<(), GraphError> {
        if let Some(parked) = self.parked.take() {
            let mut reader = parked.reader();
            self.ids = reader.column()?;
            self.class_of = reader.column()?;
            self.size8 = reader.column()?;
            self.edge_start = reader.column()?;
            self.edges = reader.column()?;
        }
        Ok(())
    }

    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    pub fn id(&self, node: u32) -> u64 {
        self.ids[node as usize]
    }

    /// The node of an object id, if the dump has that object.
    pub fn node(&self, id: u64) -> Option<u32> {
        match self.index.find(&self.ids, id) {
            NONE => None,
            node => Some(node),
        }
    }

    pub fn successors(&self, node: u32) -> &[u32] {
        let (start, end) = (
            self.edge_start[node as usize] as usize,
            self.edge_start[node as usize + 1] as usize,
        );
        &self.edges[start..end]
    }

    pub fn shallow(&self, node: u32) -> u64 {
        u64::from(self.size8[node as usize]) * 8
    }

    /// The class of an object (for a class object: the class it is).
    pub fn class(&self, node: u32) -> u32 {
        self.class_of[node as usize] & !CLASS_OBJECT
    }

    pub fn is_class_object(&self, node: u32) -> bool {
        self.class_of[node as usize] & CLASS_OBJECT != 0
    }

    /// The histogram's name for what an object is: its class, `java.lang.Class` for a class
    /// object.
    pub fn kind_name(&self, node: u32) -> &str {
        if self.is_class_object(node) {
            "java.lang.Class"
        } else {
            &self.classes[self.class(node) as usize].name
        }
    }

    /// How an object is shown: `Keep$Node@7f3a10` or `class Keep$Node@7f3a00`.
    pub fn describe(&self, node: u32) -> String {
        let class = &self.classes[self.class(node) as usize].name;
        if self.is_class_object(node) {
            format!("class {class}@{:x}", self.id(node))
        } else {
            format!("{class}@{:x}", self.id(node))
        }
    }

    pub fn class_named(&self, name: &str) -> Option<u32> {
        self.classes
            .iter()
            .position(|class| class.name == name)
            .map(|index| index as u32)
    }

    pub fn string(&self, id: u64) -> Option<&str> {
        self.strings.get(&id).map(|text| &**text)
    }

    /// The referent of a java.lang.ref.Reference instance, if it has one.
    pub fn referent(&self, node: u32) -> Option<u32> {
        self.referents
            .binary_search_by_key(&node, |&(reference, _)| reference)
            .ok()
            .map(|position| self.referents[position].1)
    }

    /// Whether the step from `from` to `to` is a Reference's referent.
    pub fn is_referent_edge(&self, from: u32, to: u32) -> bool {
        self.referent(from) == Some(to)
    }

    /// Bytes the graph's columns take in memory.
    pub fn memory_bytes(&self) -> u64 {
        (self.ids.capacity() * 8
            + self.class_of.capacity() * 4
            + self.size8.capacity() * 4
            + self.edge_start.capacity() * 8
            + self.edges.capacity() * 4
            + self.referents.capacity() * 8) as u64
            + self.index.bytes()
    }

    /// Names the reference from `from` to `to`: a field (`next`, `static INSTANCE`), an array
    /// element (`[3]`), or what a class refers to (`<super>`, `<class loader>`, ...), by
    /// reading `from` again from the file.
    pub fn reference_name(&self, from: u32, to: u32) -> Result<String, GraphError> {
        let target = self.id(to);
        let offset = self.offsets.get(u64::from(from))?;
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut reader =
            HprofReader::at_sub_record(BufReader::new(file), self.header.clone(), offset);
        let sub = match reader.next_item() {
            Some(Ok(Item::Sub(sub))) => sub,
            Some(Err(error)) => return Err(error.into()),
            _ => {
                return Err(GraphError::Io(std::io::Error::other(format!(
                    "byte {offset}: no object to read again"
                ))))
            }
        };
        let unknown = || "<reference>".to_string();
        Ok(match sub {
            SubRecord::InstanceDump {
                class_id, values, ..
            } => {
                let class = self.class(from);
                let id_size = self.header.id_size as usize;
                let layout = self.classes[class as usize].layout.as_ref();
                let field = layout.and_then(|layout| {
                    layout.references.iter().find(|(field_offset, _)| {
                        let start = *field_offset as usize;
                        values
                            .get(start..start + id_size)
                            .is_some_and(|bytes| id_value(bytes) == target)
                    })
                });
                match field {
                    Some((_, name)) => self.string(*name).unwrap_or("<field>").to_string(),
                    None if class_id == target => "<class>".to_string(),
                    None => unknown(),
                }
            }
            SubRecord::ObjectArrayDump {
                class_id, elements, ..
            } => match elements.iter().position(|&element| element == target) {
                Some(index) => format!("[{index}]"),
                None if class_id == target => "<class>".to_string(),
                None => unknown(),
            },
            SubRecord::ClassDump(class) => {
                let id_size = self.header.id_size;
                let statics = class.static_fields.iter().find(|(_, value)| {
                    value.basic_type == BasicType::Object
                        && value.bytes.len() == id_size as usize
                        && id_value(&value.bytes) == target
                });
                if let Some((name, _)) = statics {
                    format!("static {}", self.string(*name).unwrap_or("<field>"))
                } else if class.super_id == target {
                    "<super>".to_string()
                } else if class.loader_id == target {
                    "<class loader>".to_string()
                } else if class.signers_id == target {
                    "<signers>".to_string()
                } else if class.protection_domain_id == target {
                    "<protection domain>".to_string()
                } else {
                    "<constant pool>".to_string()
                }
            }
            _ => unknown(),
        })
    }

    /// The class index of an id given in a class dump (used by tests and the report).
    pub fn class_by_id(&self, class_id: u64) -> Option<u32> {
        self.class_by_id.get(&class_id).copied()
    }
}
