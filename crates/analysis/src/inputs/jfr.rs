//! Java Flight Recorder recordings (the JDK's own and async-profiler's) read into the profile
//! model: execution samples as `cpu`, native method samples as `wall`, allocation samples as
//! `alloc_bytes` with the allocated class as the leaf frame, contended monitors and parked
//! threads as `lock`. The layout of a recording is described in docs/views.md, "JFR recordings".

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::Read;

use crate::profile::{
    Event, Frame, FrameId, FrameKind, LockWait, Profile, Sample, Span, SpanKind, StackId, ThreadId,
    TRUNCATED,
};

/// Why a recording could not be read: what was wrong and at which byte of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JfrError {
    pub offset: u64,
    pub message: String,
}

impl fmt::Display for JfrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for JfrError {}

type Result<T> = std::result::Result<T, JfrError>;

const MAGIC: &[u8; 4] = b"FLR\0";
const HEADER_SIZE: usize = 68;
const METADATA_EVENT: u64 = 0;
const CONSTANT_POOL_EVENT: u64 = 1;
/// The header's feature bit saying integers are LEB128-compressed rather than big-endian.
const COMPRESSED_INTEGERS: u32 = 1;
/// Nesting deeper than this is taken for a cycle in a broken recording, not real data.
const MAX_DEPTH: usize = 64;

/// Reads a whole recording, every chunk, reporting progress in bytes read.
pub fn from_jfr(bytes: &[u8], source: &str, progress: &mut dyn FnMut(u64)) -> Result<Profile> {
    from_jfr_reader(bytes, bytes.len() as u64, source, progress)
}

/// Reads a recording of `length` bytes chunk by chunk: only one chunk (a few MiB, as the JDK
/// writes them) is held at a time, whatever the file's size. Errors give offsets in the file.
pub fn from_jfr_reader(
    mut input: impl Read,
    length: u64,
    source: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<Profile> {
    let mut reader = RecordingReader {
        profile: Profile::new(source),
        recording_start_ns: None,
        recording_end_ns: 0,
        tlab_samples: Vec::new(),
        saw_allocation_samples: false,
        frames_of_chunk: HashMap::new(),
    };
    if length == 0 {
        return Err(JfrError {
            offset: 0,
            message: "the file is empty".into(),
        });
    }
    let mut base = 0u64;
    let mut chunk_bytes = Vec::new();
    while base < length {
        let in_file = |error: JfrError| JfrError {
            offset: base + error.offset,
            message: error.message,
        };
        let io_error = |error: std::io::Error| JfrError {
            offset: base,
            message: format!("reading the file: {error}"),
        };
        // The header says how long the chunk is; the chunk is then read whole.
        let header_bytes = (length - base).min(HEADER_SIZE as u64) as usize;
        chunk_bytes.clear();
        chunk_bytes.resize(header_bytes, 0);
        input.read_exact(&mut chunk_bytes).map_err(io_error)?;
        let declared = if header_bytes == HEADER_SIZE && &chunk_bytes[..4] == MAGIC {
            u64::from_be_bytes(chunk_bytes[8..16].try_into().unwrap_or([0; 8]))
        } else {
            header_bytes as u64
        };
        // A size past the file's end is refused by the parse below (it sees the bytes that are
        // there); no more than those are read.
        let wanted = declared.clamp(header_bytes as u64, length - base) as usize;
        chunk_bytes.resize(wanted, 0);
        input
            .read_exact(&mut chunk_bytes[header_bytes..])
            .map_err(io_error)?;
        let chunk = Chunk::parse(&chunk_bytes, 0).map_err(in_file)?;
        let size = chunk.size as u64;
        reader.read_chunk(&chunk, &chunk_bytes).map_err(in_file)?;
        base += size;
        progress(base);
    }
    Ok(reader.finish())
}

/// Integers as the chunk writes them.
#[derive(Clone, Copy)]
struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
    end: usize,
    compressed: bool,
}

impl<'a> Cursor<'a> {
    fn error(&self, message: impl Into<String>) -> JfrError {
        JfrError {
            offset: self.position as u64,
            message: message.into(),
        }
    }

    fn remaining(&self) -> usize {
        self.end - self.position
    }

    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8]> {
        if count > self.remaining() {
            return Err(self.error(format!(
                "{what} of {count} bytes goes past the end of its event or chunk ({} bytes left)",
                self.remaining()
            )));
        }
        let taken = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1, "a byte")?[0])
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N, what)?);
        Ok(array)
    }

    /// A LEB128 integer of at most 9 bytes, the last of which carries 8 bits.
    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for index in 0..8 {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Ok(value | u64::from(self.byte()?) << 56)
    }

    fn long(&mut self) -> Result<i64> {
        if self.compressed {
            Ok(self.varint()? as i64)
        } else {
            Ok(i64::from_be_bytes(self.fixed("a long")?))
        }
    }

    fn int(&mut self) -> Result<i32> {
        if self.compressed {
            // Ints are written as their 32 bits, sign-extended or not: the low half is the value.
            Ok(self.varint()? as u32 as i32)
        } else {
            Ok(i32::from_be_bytes(self.fixed("an int")?))
        }
    }

    fn short(&mut self) -> Result<i16> {
        if self.compressed {
            Ok(self.varint()? as u16 as i16)
        } else {
            Ok(i16::from_be_bytes(self.fixed("a short")?))
        }
    }

    /// A count of things that follow, each at least one byte long: more than the bytes left
    /// is a broken recording (and would otherwise reserve memory for nothing).
    fn count(&mut self, what: &str) -> Result<usize> {
        let start = self.position;
        let count = self.int()?;
        if count < 0 || count as usize > self.remaining() {
            return Err(JfrError {
                offset: start as u64,
                message: format!(
                    "{what} count {count} does not fit in the {} bytes left",
                    self.remaining()
                ),
            });
        }
        Ok(count as usize)
    }

    /// A string in one of the six encodings: null, empty, a constant pool reference, UTF-8,
    /// UTF-16 code units, Latin-1.
    fn string(&mut self, string_class: u64) -> Result<Value> {
        let start = self.position;
        match self.byte()? {
            0 => Ok(Value::Null),
            1 => Ok(Value::Str(String::new().into())),
            2 => Ok(Value::Ref {
                class: string_class,
                key: self.long()?,
            }),
            3 => {
                let length = self.count("UTF-8 string")?;
                let bytes = self.take(length, "a UTF-8 string")?;
                Ok(Value::Str(String::from_utf8_lossy(bytes).into()))
            }
            4 => {
                let length = self.count("UTF-16 string")?;
                let mut units = Vec::with_capacity(length);
                for _ in 0..length {
                    units.push(self.short()? as u16);
                }
                Ok(Value::Str(String::from_utf16_lossy(&units).into()))
            }
            5 => {
                let length = self.count("Latin-1 string")?;
                let bytes = self.take(length, "a Latin-1 string")?;
                Ok(Value::Str(bytes.iter().map(|&b| char::from(b)).collect()))
            }
            encoding => Err(JfrError {
                offset: start as u64,
                message: format!("unknown string encoding {encoding}"),
            }),
        }
    }
}

/// A value read from an event or a constant pool, before references are followed.
#[derive(Clone, Debug)]
enum Value {
    Null,
    Int(i64),
    Float(f64),
    Str(Box<str>),
    /// A key into the constant pool of `class`.
    Ref {
        class: u64,
        key: i64,
    },
    Object(Box<[Value]>),
    Array(Box<[Value]>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Primitive {
    Boolean,
    Byte,
    Char,
    Short,
    Int,
    Long,
    Float,
    Double,
    String,
}

impl Primitive {
    fn from_class_name(name: &str) -> Option<Primitive> {
        Some(match name {
            "boolean" => Primitive::Boolean,
            "byte" => Primitive::Byte,
            "char" => Primitive::Char,
            "short" => Primitive::Short,
            "int" => Primitive::Int,
            "long" => Primitive::Long,
            "float" => Primitive::Float,
            "double" => Primitive::Double,
            "java.lang.String" => Primitive::String,
            _ => return None,
        })
    }
}

#[derive(Debug)]
struct Field {
    name: String,
    class: u64,
    constant_pool: bool,
    array: bool,
}

#[derive(Debug)]
struct Class {
    name: String,
    primitive: Option<Primitive>,
    fields: Vec<Field>,
}

impl Class {
    fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|field| field.name == name)
    }
}

/// The classes a chunk's metadata event describes: every event type and every type of value.
#[derive(Debug, Default)]
struct Metadata {
    classes: HashMap<u64, Class>,
    string_class: u64,
}

impl Metadata {
    fn class(&self, id: u64, cursor: &Cursor) -> Result<&Class> {
        self.classes
            .get(&id)
            .ok_or_else(|| cursor.error(format!("class id {id} is not in the metadata")))
    }

    fn id_of(&self, name: &str) -> Option<u64> {
        self.classes
            .iter()
            .find(|(_, class)| class.name == name)
            .map(|(id, _)| *id)
    }

    fn read_value(&self, cursor: &mut Cursor, class_id: u64, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(cursor.error("values nested too deeply (a class that contains itself?)"));
        }
        let class = self.class(class_id, cursor)?;
        let Some(primitive) = class.primitive else {
            let mut values = Vec::with_capacity(class.fields.len());
            for field in &class.fields {
                values.push(self.read_field(cursor, field, depth + 1)?);
            }
            return Ok(Value::Object(values.into()));
        };
        Ok(match primitive {
            Primitive::Boolean | Primitive::Byte => Value::Int(i64::from(cursor.byte()? as i8)),
            Primitive::Char => Value::Int(i64::from(cursor.short()? as u16)),
            Primitive::Short => Value::Int(i64::from(cursor.short()?)),
            Primitive::Int => Value::Int(i64::from(cursor.int()?)),
            Primitive::Long => Value::Int(cursor.long()?),
            Primitive::Float => {
                Value::Float(f64::from(f32::from_be_bytes(cursor.fixed("a float")?)))
            }
            Primitive::Double => Value::Float(f64::from_be_bytes(cursor.fixed("a double")?)),
            Primitive::String => cursor.string(self.string_class)?,
        })
    }

    fn read_field(&self, cursor: &mut Cursor, field: &Field, depth: usize) -> Result<Value> {
        if field.array {
            let count = cursor.count("array")?;
            let mut values = Vec::with_capacity(count);
            for _ in 0..count {
                values.push(self.read_single(cursor, field, depth)?);
            }
            Ok(Value::Array(values.into()))
        } else {
            self.read_single(cursor, field, depth)
        }
    }

    fn read_single(&self, cursor: &mut Cursor, field: &Field, depth: usize) -> Result<Value> {
        if field.constant_pool {
            Ok(Value::Ref {
                class: field.class,
                key: cursor.long()?,
            })
        } else {
            self.read_value(cursor, field.class, depth)
        }
    }
}

/// One element of the metadata event's tree: `class`, `field`, `annotation`, `region`...
struct Element {
    name: String,
    attributes: Vec<(String, String)>,
    children: Vec<Element>,
}

impl Element {
    fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn read(cursor: &mut Cursor, strings: &[String], depth: usize) -> Result<Element> {
        if depth > MAX_DEPTH {
            return Err(cursor.error("metadata elements nested too deeply"));
        }
        let name = Element::string(cursor, strings)?;
        let attribute_count = cursor.count("metadata attribute")?;
        let mut attributes = Vec::with_capacity(attribute_count);
        for _ in 0..attribute_count {
            let key = Element::string(cursor, strings)?;
            let value = Element::string(cursor, strings)?;
            attributes.push((key, value));
        }
        let child_count = cursor.count("metadata element")?;
        let mut children = Vec::with_capacity(child_count);
        for _ in 0..child_count {
            children.push(Element::read(cursor, strings, depth + 1)?);
        }
        Ok(Element {
            name,
            attributes,
            children,
        })
    }

    fn string(cursor: &mut Cursor, strings: &[String]) -> Result<String> {
        let start = cursor.position;
        let index = cursor.int()?;
        usize::try_from(index)
            .ok()
            .and_then(|index| strings.get(index))
            .cloned()
            .ok_or_else(|| JfrError {
                offset: start as u64,
                message: format!(
                    "metadata string index {index} is not among its {} strings",
                    strings.len()
                ),
            })
    }
}

/// A chunk's header: where its metadata and constant pools are and how its clock runs.
struct Chunk {
    start: usize,
    size: usize,
    constant_pool_offset: usize,
    metadata_offset: usize,
    start_ns: u64,
    duration_ns: u64,
    start_ticks: i64,
    ticks_per_second: i64,
    compressed: bool,
}

impl Chunk {
    fn parse(bytes: &[u8], start: usize) -> Result<Chunk> {
        let error = |at: usize, message: String| JfrError {
            offset: (start + at) as u64,
            message,
        };
        if bytes.len() - start < HEADER_SIZE {
            return Err(error(
                0,
                format!(
                    "the chunk header needs {HEADER_SIZE} bytes, the file has {} left",
                    bytes.len() - start
                ),
            ));
        }
        let header = &bytes[start..start + HEADER_SIZE];
        if &header[..4] != MAGIC {
            return Err(error(0, "no chunk starts here (no FLR magic)".into()));
        }
        let major = u16::from_be_bytes([header[4], header[5]]);
        let minor = u16::from_be_bytes([header[6], header[7]]);
        if !(1..=2).contains(&major) {
            return Err(error(
                4,
                format!("version {major}.{minor} is not one openprof reads (1.x or 2.x)"),
            ));
        }
        let long = |at: usize| i64::from_be_bytes(header[at..at + 8].try_into().unwrap_or([0; 8]));
        let size = long(8);
        let left = bytes.len() - start;
        if size == 0 {
            return Err(error(
                8,
                "the chunk is still being written (its size is 0)".into(),
            ));
        }
        if size < HEADER_SIZE as i64 || size as u64 > left as u64 {
            return Err(error(
                8,
                format!("the chunk's size {size} does not fit the {left} bytes left in the file"),
            ));
        }
        let size = size as usize;
        let offset_in_chunk = |at: usize, what: &str| {
            let value = long(at);
            if value < HEADER_SIZE as i64 || value >= size as i64 {
                Err(error(
                    at,
                    format!("the {what} offset {value} is outside the chunk's {size} bytes"),
                ))
            } else {
                Ok(value as usize)
            }
        };
        let constant_pool_offset = offset_in_chunk(16, "constant pool")?;
        let metadata_offset = offset_in_chunk(24, "metadata")?;
        let ticks_per_second = long(56);
        if ticks_per_second <= 0 {
            return Err(error(
                56,
                format!("the clock's ticks per second {ticks_per_second} is not positive"),
            ));
        }
        let features = u32::from_be_bytes([header[64], header[65], header[66], header[67]]);
        Ok(Chunk {
            start,
            size,
            constant_pool_offset,
            metadata_offset,
            start_ns: long(32).max(0) as u64,
            duration_ns: long(40).max(0) as u64,
            start_ticks: long(48),
            ticks_per_second,
            compressed: features & COMPRESSED_INTEGERS != 0,
        })
    }

    fn cursor<'a>(&self, bytes: &'a [u8], offset_in_chunk: usize) -> Cursor<'a> {
        Cursor {
            bytes,
            position: self.start + offset_in_chunk,
            end: self.start + self.size,
            compressed: self.compressed,
        }
    }

    fn ticks_to_ns(&self, ticks: i64) -> u64 {
        (i128::from(ticks.max(0)) * 1_000_000_000 / i128::from(self.ticks_per_second)) as u64
    }

    /// Nanoseconds since the chunk's start of an absolute tick count.
    fn ns_since_start(&self, ticks: i64) -> u64 {
        let delta = i128::from(ticks) - i128::from(self.start_ticks);
        (delta.max(0) * 1_000_000_000 / i128::from(self.ticks_per_second)) as u64
    }

    /// An event's or a pool's header: its size (checked against the chunk) and type, with a
    /// cursor on its body.
    fn event_at<'a>(&self, bytes: &'a [u8], offset_in_chunk: usize) -> Result<(u64, Cursor<'a>)> {
        let mut cursor = self.cursor(bytes, offset_in_chunk);
        let start = cursor.position;
        let size = cursor.int()?;
        if size <= 0 || size as usize > self.size - offset_in_chunk {
            return Err(JfrError {
                offset: start as u64,
                message: format!(
                    "an event's size {size} does not fit the {} bytes left in its chunk",
                    self.size - offset_in_chunk
                ),
            });
        }
        cursor.end = start + size as usize;
        let event_type = cursor.long()? as u64;
        Ok((event_type, cursor))
    }
}

/// The events openprof takes from a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    ExecutionSample,
    NativeMethodSample,
    WallClockSample,
    AllocationSample,
    AllocationInNewTlab,
    AllocationOutsideTlab,
    MonitorEnter,
    ThreadPark,
    ActiveSetting,
}

impl EventKind {
    fn from_name(name: &str) -> Option<EventKind> {
        Some(match name {
            "jdk.ExecutionSample" => EventKind::ExecutionSample,
            "jdk.NativeMethodSample" => EventKind::NativeMethodSample,
            "profiler.WallClockSample" => EventKind::WallClockSample,
            "jdk.ObjectAllocationSample" => EventKind::AllocationSample,
            "jdk.ObjectAllocationInNewTLAB" => EventKind::AllocationInNewTlab,
            "jdk.ObjectAllocationOutsideTLAB" => EventKind::AllocationOutsideTlab,
            "jdk.JavaMonitorEnter" => EventKind::MonitorEnter,
            "jdk.ThreadPark" => EventKind::ThreadPark,
            "jdk.ActiveSetting" => EventKind::ActiveSetting,
            _ => return None,
        })
    }
}

/// Where an event type's fields that openprof uses are.
struct EventLayout {
    kind: EventKind,
    class: u64,
    start_time: Option<usize>,
    duration: Option<usize>,
    thread: Option<usize>,
    stack_trace: Option<usize>,
    /// The allocated, monitor or blocker class.
    object_class: Option<usize>,
    /// Bytes allocated, or samples a wall-clock event stands for.
    amount: Option<usize>,
}

impl EventLayout {
    fn new(kind: EventKind, class_id: u64, class: &Class) -> EventLayout {
        let first = |names: &[&str]| names.iter().find_map(|name| class.field_index(name));
        EventLayout {
            kind,
            class: class_id,
            start_time: first(&["startTime"]),
            duration: first(&["duration"]),
            thread: first(&["sampledThread", "eventThread"]),
            stack_trace: first(&["stackTrace"]),
            object_class: first(&["objectClass", "monitorClass", "parkedClass"]),
            amount: match kind {
                EventKind::AllocationSample => first(&["weight"]),
                EventKind::AllocationInNewTlab => first(&["tlabSize", "allocationSize"]),
                EventKind::AllocationOutsideTlab => first(&["allocationSize"]),
                EventKind::WallClockSample => first(&["samples"]),
                _ => None,
            },
        }
    }
}

/// A resolved value with the class it is of, so that its fields can be found by name.
#[derive(Clone, Copy)]
struct Node<'v> {
    class: u64,
    value: &'v Value,
}

/// A chunk's metadata and constant pools, and what was already made of its pooled values.
struct ChunkContext<'c> {
    chunk: &'c Chunk,
    metadata: Metadata,
    pools: HashMap<u64, HashMap<i64, Value>>,
    /// The ids of the pooled classes events refer to.
    thread_class: Option<u64>,
    class_class: Option<u64>,
    stack_trace_class: Option<u64>,
    stacks: HashMap<i64, Vec<FrameId>>,
    threads: HashMap<i64, Option<ThreadId>>,
    class_names: HashMap<i64, String>,
}

impl<'c> ChunkContext<'c> {
    /// Follows references to the pooled value; `None` for null and for keys no pool has.
    fn resolve<'v>(&'v self, mut node: Node<'v>) -> Option<Node<'v>> {
        for _ in 0..MAX_DEPTH {
            match node.value {
                Value::Null => return None,
                Value::Ref { class, key } => {
                    node = Node {
                        class: *class,
                        value: self.pools.get(class)?.get(key)?,
                    };
                }
                _ => return Some(node),
            }
        }
        None
    }

    /// The value under `key` in the pool of `class`, references followed.
    fn pooled(&self, class: u64, key: i64) -> Option<Node<'_>> {
        self.resolve(Node {
            class,
            value: self.pools.get(&class)?.get(&key)?,
        })
    }

    fn field<'v>(&'v self, node: Node<'v>, name: &str) -> Option<Node<'v>> {
        let class = self.metadata.classes.get(&node.class)?;
        let index = class.field_index(name)?;
        let Value::Object(values) = node.value else {
            return None;
        };
        self.resolve(Node {
            class: class.fields[index].class,
            value: values.get(index)?,
        })
    }

    /// A string, or the string of a symbol (`jdk.types.Symbol`'s `string` field).
    fn string<'v>(&'v self, node: Option<Node<'v>>) -> Option<&'v str> {
        let node = node?;
        match node.value {
            Value::Str(text) => Some(text),
            Value::Object(_) => self.string(self.field(node, "string")),
            _ => None,
        }
    }

    fn int(&self, node: Option<Node>) -> Option<i64> {
        match node?.value {
            Value::Int(value) => Some(*value),
            Value::Float(value) => Some(*value as i64),
            _ => None,
        }
    }
}

struct RecordingReader {
    profile: Profile,
    recording_start_ns: Option<u64>,
    recording_end_ns: u64,
    /// TLAB allocation events, kept apart: a recording with allocation samples as well would
    /// count the same bytes twice.
    tlab_samples: Vec<Sample>,
    saw_allocation_samples: bool,
    /// The current chunk's stack frames already made, by their pool keys.
    frames_of_chunk: HashMap<FrameKey, FrameId>,
}

impl RecordingReader {
    fn read_chunk(&mut self, chunk: &Chunk, bytes: &[u8]) -> Result<()> {
        let start_ns = *self.recording_start_ns.get_or_insert(chunk.start_ns);
        self.recording_end_ns = self
            .recording_end_ns
            .max(chunk.start_ns.saturating_add(chunk.duration_ns));
        let metadata = read_metadata(chunk, bytes)?;
        self.frames_of_chunk.clear();
        let mut context = ChunkContext {
            chunk,
            pools: HashMap::new(),
            thread_class: metadata.id_of("java.lang.Thread"),
            class_class: metadata.id_of("java.lang.Class"),
            stack_trace_class: metadata.id_of("jdk.types.StackTrace"),
            metadata,
            stacks: HashMap::new(),
            threads: HashMap::new(),
            class_names: HashMap::new(),
        };
        read_constant_pools(&mut context, bytes)?;
        let layouts: HashMap<u64, EventLayout> = context
            .metadata
            .classes
            .iter()
            .filter_map(|(id, class)| {
                EventKind::from_name(&class.name)
                    .map(|kind| (*id, EventLayout::new(kind, *id, class)))
            })
            .collect();
        let chunk_offset_ns = chunk.start_ns.saturating_sub(start_ns);
        let mut offset = HEADER_SIZE;
        while offset < chunk.size {
            let (event_type, mut cursor) = chunk.event_at(bytes, offset)?;
            let event_start = chunk.start + offset;
            offset = cursor.end - chunk.start;
            let Some(layout) = layouts.get(&event_type) else {
                continue;
            };
            let value = context.metadata.read_value(&mut cursor, layout.class, 0)?;
            self.add_event(&mut context, layout, &value, event_start, chunk_offset_ns)?;
        }
        Ok(())
    }

    fn add_event(
        &mut self,
        context: &mut ChunkContext,
        layout: &EventLayout,
        value: &Value,
        event_start: usize,
        chunk_offset_ns: u64,
    ) -> Result<()> {
        let Value::Object(fields) = value else {
            return Ok(());
        };
        let field = |index: Option<usize>| index.and_then(|index| fields.get(index));
        let int = |index: Option<usize>| match field(index) {
            Some(Value::Int(value)) => Some(*value),
            _ => None,
        };
        if layout.kind == EventKind::ActiveSetting {
            self.note_setting(context, layout, value);
            return Ok(());
        }
        let chunk = context.chunk;
        let time_ns =
            int(layout.start_time).map(|ticks| chunk_offset_ns + chunk.ns_since_start(ticks));
        let thread = match field(layout.thread) {
            Some(Value::Ref { key, .. }) => self.thread(context, *key),
            _ => None,
        };
        let mut stack = match field(layout.stack_trace) {
            Some(Value::Ref { key, .. }) => self.stack(context, *key, event_start)?,
            _ => Vec::new(),
        };
        let object_class = match field(layout.object_class) {
            Some(Value::Ref { key, .. }) => Some(self.class_name(context, *key)),
            _ => None,
        };
        let (event, value) = match layout.kind {
            EventKind::ExecutionSample => (Event::Cpu, 1),
            EventKind::NativeMethodSample => (Event::Wall, 1),
            EventKind::WallClockSample => {
                (Event::Wall, int(layout.amount).unwrap_or(1).max(1) as u64)
            }
            EventKind::AllocationSample
            | EventKind::AllocationInNewTlab
            | EventKind::AllocationOutsideTlab => {
                let class = object_class
                    .clone()
                    .unwrap_or_else(|| "[unknown class]".into());
                stack.push(self.profile.frame_id(Frame {
                    name: class,
                    file: None,
                    line: None,
                    kind: FrameKind::AllocatedClass,
                }));
                (
                    Event::AllocBytes,
                    int(layout.amount).unwrap_or(0).max(0) as u64,
                )
            }
            EventKind::MonitorEnter | EventKind::ThreadPark => (
                Event::Lock,
                chunk.ticks_to_ns(int(layout.duration).unwrap_or(0)),
            ),
            EventKind::ActiveSetting => return Ok(()),
        };
        let count = if layout.kind == EventKind::WallClockSample {
            value
        } else {
            1
        };
        let wait = match layout.kind {
            EventKind::MonitorEnter => Some(LockWait::Blocked),
            EventKind::ThreadPark => Some(LockWait::Parked),
            _ => None,
        };
        if layout.kind == EventKind::MonitorEnter {
            if let Some(start_ns) = time_ns {
                // The blocked method, or the monitor's class when the event has no stack.
                let frame = match stack.last() {
                    Some(frame) => *frame,
                    None => self.profile.frame_id(Frame::marker(
                        object_class.clone().unwrap_or_else(|| "[monitor]".into()),
                    )),
                };
                self.profile.spans.push(Span {
                    thread,
                    frame,
                    kind: SpanKind::MonitorBlocked,
                    start_ns,
                    end_ns: start_ns.saturating_add(value),
                });
            }
        }
        let labels = match wait {
            Some(wait) => {
                if let Some(class) = &object_class {
                    stack.push(self.profile.frame_id(wait.class_frame(class)));
                }
                wait.labels(object_class.as_deref())
            }
            None => Vec::new(),
        };
        let stack: StackId = self.profile.stack_id(&stack);
        let sample = Sample {
            stack,
            event,
            value,
            count,
            thread,
            time_ns,
            labels,
        };
        match layout.kind {
            EventKind::AllocationInNewTlab | EventKind::AllocationOutsideTlab => {
                self.tlab_samples.push(sample)
            }
            EventKind::AllocationSample => {
                self.saw_allocation_samples = true;
                self.profile.add_sample(sample);
            }
            _ => self.profile.add_sample(sample),
        }
        Ok(())
    }

    /// The CPU sampling period, from the setting the recording ran with (`10 ms`, `20 ms`).
    fn note_setting(&mut self, context: &ChunkContext, layout: &EventLayout, value: &Value) {
        let node = Node {
            class: layout.class,
            value,
        };
        let Some(setting_name) = context.string(context.field(node, "name")) else {
            return;
        };
        let Some(event_id) = context.int(context.field(node, "id")) else {
            return;
        };
        let is_execution_sample = context
            .metadata
            .classes
            .get(&(event_id as u64))
            .is_some_and(|class| class.name == "jdk.ExecutionSample");
        if setting_name != "period" || !is_execution_sample {
            return;
        }
        if let Some(period) = context
            .string(context.field(node, "value"))
            .and_then(parse_period)
        {
            self.profile.period_ns = Some(period);
        }
    }

    fn thread(&mut self, context: &mut ChunkContext, key: i64) -> Option<ThreadId> {
        if let Some(thread) = context.threads.get(&key) {
            return *thread;
        }
        let thread = context.thread_class.and_then(|class| {
            let node = context.pooled(class, key)?;
            let name = context
                .string(context.field(node, "javaName"))
                .filter(|name| !name.is_empty())
                .or_else(|| context.string(context.field(node, "osName")))
                .unwrap_or("")
                .to_string();
            let id = context
                .int(context.field(node, "javaThreadId"))
                .filter(|id| *id > 0)
                .or_else(|| context.int(context.field(node, "osThreadId")))
                .unwrap_or(key);
            Some(self.profile.thread_id(id as u64, &name))
        });
        context.threads.insert(key, thread);
        thread
    }

    /// A class's readable name (`java.lang.String`, `byte[]`) from its pool key.
    fn class_name(&mut self, context: &mut ChunkContext, key: i64) -> String {
        if let Some(name) = context.class_names.get(&key) {
            return name.clone();
        }
        let name = context
            .class_class
            .and_then(|class| {
                let node = context.pooled(class, key)?;
                context.string(context.field(node, "name"))
            })
            .map(readable_class_name)
            .unwrap_or_else(|| "[unknown class]".into());
        context.class_names.insert(key, name.clone());
        name
    }

    /// A stack trace's frames, root first, with a mark at the root when the recorder cut it.
    fn stack(
        &mut self,
        context: &mut ChunkContext,
        key: i64,
        event_start: usize,
    ) -> Result<Vec<FrameId>> {
        if let Some(frames) = context.stacks.get(&key) {
            return Ok(frames.clone());
        }
        let node = context
            .stack_trace_class
            .and_then(|class| context.pooled(class, key));
        let Some(node) = node else {
            // Key 0 is how the recorder says an event has no stack.
            if key == 0 {
                return Ok(Vec::new());
            }
            return Err(JfrError {
                offset: event_start as u64,
                message: format!("stack trace {key} of this event is in no constant pool"),
            });
        };
        let mut frames = Vec::new();
        if let Some(Node {
            class: frame_class,
            value: Value::Array(stack_frames),
        }) = context.field(node, "frames")
        {
            for frame in stack_frames.iter() {
                let Some(frame) = context.resolve(Node {
                    class: frame_class,
                    value: frame,
                }) else {
                    continue;
                };
                // Deep stacks share most frames: each is made once per chunk.
                let key = frame_key(context, frame);
                if let Some(id) = key.and_then(|key| self.frames_of_chunk.get(&key)) {
                    frames.push(*id);
                    continue;
                }
                let made = stack_frame(context, frame);
                if matches!(made.kind, FrameKind::Java | FrameKind::Inlined) {
                    if let Some((class, loader)) = class_loader(context, frame) {
                        self.profile.add_class_loader(&class, &loader);
                    }
                }
                let id = self.profile.frame_id(made);
                if let Some(key) = key {
                    self.frames_of_chunk.insert(key, id);
                }
                frames.push(id);
            }
        }
        if context.int(context.field(node, "truncated")).unwrap_or(0) != 0 {
            frames.push(self.profile.frame_id(Frame::marker(TRUNCATED)));
        }
        frames.reverse();
        context.stacks.insert(key, frames.clone());
        Ok(frames)
    }

    fn finish(mut self) -> Profile {
        if !self.saw_allocation_samples {
            for sample in std::mem::take(&mut self.tlab_samples) {
                self.profile.add_sample(sample);
            }
        }
        if let Some(start) = self.recording_start_ns {
            self.profile.start_epoch_ns = Some(start);
            self.profile.duration_ns = Some(self.recording_end_ns.saturating_sub(start));
        }
        self.profile
    }
}

/// What makes a pooled stack frame one frame: the pool keys of its method and frame type, and
/// its line.
type FrameKey = (i64, i64, i64);

fn frame_key(context: &ChunkContext, frame: Node) -> Option<FrameKey> {
    let class = context.metadata.classes.get(&frame.class)?;
    let Value::Object(values) = frame.value else {
        return None;
    };
    let raw = |name: &str| values.get(class.field_index(name)?);
    let (Some(Value::Ref { key: method, .. }), Some(Value::Int(line))) =
        (raw("method"), raw("lineNumber"))
    else {
        return None;
    };
    let frame_type = match raw("type") {
        Some(Value::Ref { key, .. }) => *key,
        _ => -1,
    };
    Some((*method, *line, frame_type))
}

/// One `jdk.types.StackFrame` as a model frame.
fn stack_frame(context: &ChunkContext, frame: Node) -> Frame {
    let method = context.field(frame, "method");
    let method_name = context.string(method.and_then(|m| context.field(m, "name")));
    let class_name = context.string(
        method
            .and_then(|m| context.field(m, "type"))
            .and_then(|class| context.field(class, "name")),
    );
    let frame_type = context.string(
        context
            .field(frame, "type")
            .and_then(|frame_type| context.field(frame_type, "description")),
    );
    let line = context
        .int(context.field(frame, "lineNumber"))
        .filter(|line| *line > 0)
        .and_then(|line| u32::try_from(line).ok());
    let descriptor = context.string(method.and_then(|m| context.field(m, "descriptor")));
    let method_name = method_name.unwrap_or("[unknown method]");
    // A Java method declared native is still a Java method (as HPROF shows it). async-profiler
    // writes C, C++ and kernel code as methods of a class named after the library, with an
    // empty descriptor `()L;`: those are native code, named by their symbol alone.
    let native_code = matches!(frame_type, Some("C++" | "Kernel"))
        || descriptor == Some("()L;")
        || class_name.is_none_or(str::is_empty);
    let (name, kind) = if native_code {
        (method_name.to_string(), FrameKind::Native)
    } else {
        let class_name = class_name.map(readable_class_name).unwrap_or_default();
        let kind = if frame_type == Some("Inlined") {
            FrameKind::Inlined
        } else {
            FrameKind::Java
        };
        (format!("{class_name}.{method_name}"), kind)
    };
    Frame {
        name,
        file: None,
        line,
        kind,
    }
}

/// The class of a Java frame and its loader, as the recording names it: the loader's name and
/// class (`app (jdk.internal.loader.ClassLoaders$AppClassLoader)`), `bootstrap` for none; `None`
/// when the recording does not tell loaders.
fn class_loader(context: &ChunkContext, frame: Node) -> Option<(String, String)> {
    let class = context
        .field(frame, "method")
        .and_then(|method| context.field(method, "type"))?;
    let class_name = readable_class_name(context.string(context.field(class, "name"))?);
    context
        .metadata
        .classes
        .get(&class.class)?
        .field_index("classLoader")?;
    let loader = match context.field(class, "classLoader") {
        None => "bootstrap".to_string(),
        Some(loader) => {
            let name = context.string(context.field(loader, "name"));
            let loader_class = context
                .field(loader, "type")
                .and_then(|class| context.string(context.field(class, "name")))
                .map(readable_class_name);
            match (name, loader_class) {
                (Some(name), Some(class)) => format!("{name} ({class})"),
                (Some(name), None) => name.to_string(),
                (None, Some(class)) => class,
                (None, None) => "[unnamed loader]".to_string(),
            }
        }
    };
    Some((class_name, loader))
}

/// `java/lang/String` as `java.lang.String`, `[B` as `byte[]`, `[Ljava/lang/Object;` as
/// `java.lang.Object[]`.
pub fn readable_class_name(internal: &str) -> String {
    let dimensions = internal.bytes().take_while(|&b| b == b'[').count();
    if dimensions == 0 {
        return internal.replace('/', ".");
    }
    let element = &internal[dimensions..];
    let element = match element {
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "D" => "double".to_string(),
        "F" => "float".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "S" => "short".to_string(),
        "Z" => "boolean".to_string(),
        _ => element
            .strip_prefix('L')
            .and_then(|name| name.strip_suffix(';'))
            .unwrap_or(element)
            .replace('/', "."),
    };
    format!("{element}{}", "[]".repeat(dimensions))
}

/// `10 ms`, `20 ms`, `1 s`, `500 us` as nanoseconds.
fn parse_period(text: &str) -> Option<u64> {
    let (number, unit) = text.trim().split_once(' ')?;
    let number: u64 = number.parse().ok()?;
    let scale = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

fn read_metadata(chunk: &Chunk, bytes: &[u8]) -> Result<Metadata> {
    let (event_type, mut cursor) = chunk.event_at(bytes, chunk.metadata_offset)?;
    if event_type != METADATA_EVENT {
        return Err(JfrError {
            offset: (chunk.start + chunk.metadata_offset) as u64,
            message: format!(
                "the chunk's metadata offset points at an event of type {event_type}, not the metadata"
            ),
        });
    }
    cursor.long()?; // start time
    cursor.long()?; // duration
    cursor.long()?; // metadata id
    let string_count = cursor.count("metadata string")?;
    let mut strings = Vec::with_capacity(string_count);
    for _ in 0..string_count {
        let at = cursor.position;
        match cursor.string(u64::MAX)? {
            Value::Str(text) => strings.push(text.into()),
            Value::Null => strings.push(String::new()),
            _ => {
                return Err(JfrError {
                    offset: at as u64,
                    message: "a metadata string refers to a constant pool".into(),
                })
            }
        }
    }
    let root = Element::read(&mut cursor, &strings, 0)?;
    let mut metadata = Metadata {
        string_class: u64::MAX,
        ..Metadata::default()
    };
    let class_elements = root
        .children
        .iter()
        .filter(|element| element.name == "metadata")
        .flat_map(|element| element.children.iter())
        .filter(|element| element.name == "class");
    let bad = |what: String| JfrError {
        offset: (chunk.start + chunk.metadata_offset) as u64,
        message: format!("the metadata's {what}"),
    };
    for element in class_elements {
        let name = element
            .attribute("name")
            .ok_or_else(|| bad("class without a name".into()))?
            .to_string();
        let id = element
            .attribute("id")
            .and_then(|id| id.parse::<u64>().ok())
            .ok_or_else(|| bad(format!("class {name} has no numeric id")))?;
        let mut fields = Vec::new();
        for field in element
            .children
            .iter()
            .filter(|child| child.name == "field")
        {
            let field_name = field
                .attribute("name")
                .ok_or_else(|| bad(format!("class {name} has a field without a name")))?;
            let class = field
                .attribute("class")
                .and_then(|id| id.parse::<u64>().ok())
                .ok_or_else(|| bad(format!("field {name}.{field_name} has no numeric class")))?;
            fields.push(Field {
                name: field_name.to_string(),
                class,
                constant_pool: field.attribute("constantPool") == Some("true"),
                array: field.attribute("dimension") == Some("1"),
            });
        }
        let primitive = Primitive::from_class_name(&name);
        if primitive == Some(Primitive::String) {
            metadata.string_class = id;
        }
        metadata.classes.insert(
            id,
            Class {
                name,
                primitive,
                fields,
            },
        );
    }
    Ok(metadata)
}

/// Reads every constant pool event of the chunk: the header points at the last, each points
/// back at the one before by a relative offset, the first by 0.
fn read_constant_pools(context: &mut ChunkContext, bytes: &[u8]) -> Result<()> {
    let chunk = context.chunk;
    let mut offset = chunk.constant_pool_offset as i64;
    let mut seen = HashSet::new();
    loop {
        if offset < HEADER_SIZE as i64 || offset >= chunk.size as i64 || !seen.insert(offset) {
            return Err(JfrError {
                offset: (chunk.start as i64 + offset).max(0) as u64,
                message: format!(
                    "a constant pool offset {offset} is outside the chunk or loops back"
                ),
            });
        }
        let at = offset as usize;
        let (event_type, mut cursor) = chunk.event_at(bytes, at)?;
        if event_type != CONSTANT_POOL_EVENT {
            return Err(JfrError {
                offset: (chunk.start + at) as u64,
                message: format!("expected a constant pool event, found one of type {event_type}"),
            });
        }
        cursor.long()?; // start time
        cursor.long()?; // duration
        let delta = cursor.long()?;
        cursor.byte()?; // whether the recorder flushed
        let pool_count = cursor.count("constant pool")?;
        for _ in 0..pool_count {
            let class_at = cursor.position;
            let class = cursor.long()? as u64;
            if !context.metadata.classes.contains_key(&class) {
                return Err(JfrError {
                    offset: class_at as u64,
                    message: format!(
                        "constant pool of class id {class}, which the metadata does not describe"
                    ),
                });
            }
            let count = cursor.count("constant")?;
            let pool = context.pools.entry(class).or_default();
            for _ in 0..count {
                let key = cursor.long()?;
                let value = context.metadata.read_value(&mut cursor, class, 0)?;
                pool.insert(key, value);
            }
        }
        if delta == 0 {
            return Ok(());
        }
        offset = offset.saturating_add(delta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_read_as_java_writes_them() {
        assert_eq!(readable_class_name("java/lang/String"), "java.lang.String");
        assert_eq!(readable_class_name("[B"), "byte[]");
        assert_eq!(
            readable_class_name("[[Ljava/lang/Object;"),
            "java.lang.Object[][]"
        );
        assert_eq!(readable_class_name("Outer$Inner"), "Outer$Inner");
    }

    #[test]
    fn periods_read_in_their_units() {
        assert_eq!(parse_period("10 ms"), Some(10_000_000));
        assert_eq!(parse_period("1 s"), Some(1_000_000_000));
        assert_eq!(parse_period("everyChunk"), None);
    }

    #[test]
    fn varints_carry_seven_bits_a_byte_and_eight_in_the_ninth() {
        let bytes = [
            0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ];
        let mut cursor = Cursor {
            bytes: &bytes,
            position: 0,
            end: bytes.len(),
            compressed: true,
        };
        assert_eq!(cursor.long().unwrap(), 300);
        assert_eq!(cursor.long().unwrap(), -1);
        assert!(cursor.long().is_err());
    }

    /// A chunk header with the given size and offsets, compressed integers, a 1 GHz clock.
    fn header(size: i64, constant_pool: i64, metadata: i64) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&2u16.to_be_bytes());
        bytes.extend_from_slice(&1u16.to_be_bytes());
        for value in [size, constant_pool, metadata, 0, 0, 0, 1_000_000_000] {
            bytes.extend_from_slice(&value.to_be_bytes());
        }
        bytes.extend_from_slice(&COMPRESSED_INTEGERS.to_be_bytes());
        bytes
    }

    fn error_of(bytes: &[u8]) -> JfrError {
        from_jfr(bytes, "test.jfr", &mut |_| {}).expect_err("a broken recording was accepted")
    }

    #[test]
    fn broken_headers_are_told_where() {
        assert_eq!(error_of(&[]).offset, 0);
        assert!(error_of(b"FLR\0\0\x02").message.contains("needs 68 bytes"));
        let mut bad_magic = header(68, 68, 68);
        bad_magic[0] = b'X';
        assert!(error_of(&bad_magic).message.contains("FLR magic"));
        let too_long = header(1000, 70, 70);
        let error = error_of(&too_long);
        assert_eq!(
            (error.offset, error.message.contains("size 1000")),
            (8, true)
        );
        let mut metadata_outside = header(80, 70, 90);
        metadata_outside.resize(80, 0);
        assert_eq!(error_of(&metadata_outside).offset, 24);
    }

    #[test]
    fn an_event_size_past_the_chunk_is_an_error_not_a_read_past_it() {
        let mut bytes = header(72, 68, 68);
        // An event claiming 100 bytes where 4 are left.
        bytes.extend_from_slice(&[100, 0, 0, 0]);
        let error = error_of(&bytes);
        assert_eq!(error.offset, 68);
        assert!(error.message.contains("size 100"), "{error}");
    }
}
