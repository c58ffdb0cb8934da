//! HPROF's binary format (seed 002, "JAVA PROFILE 1.0.2"): every record and heap-dump
//! sub-record, one writer (heap dumps cut into HEAP DUMP SEGMENTs closed by HEAP DUMP END) and
//! one streaming reader (4- and 8-byte identifiers, segmented or whole dumps). The reader never
//! panics on bad input: a truncated or corrupt file is an error that gives the byte offset.

use std::io::{self, Read, Write};

/// The header of files with heap dump segments.
pub const FORMAT_1_0_2: &str = "JAVA PROFILE 1.0.2";
/// The header of files without them.
pub const FORMAT_1_0_1: &str = "JAVA PROFILE 1.0.1";

/// Record tags.
pub mod tag {
    pub const UTF8: u8 = 0x01;
    pub const LOAD_CLASS: u8 = 0x02;
    pub const UNLOAD_CLASS: u8 = 0x03;
    pub const STACK_FRAME: u8 = 0x04;
    pub const STACK_TRACE: u8 = 0x05;
    pub const ALLOC_SITES: u8 = 0x06;
    pub const HEAP_SUMMARY: u8 = 0x07;
    pub const START_THREAD: u8 = 0x0A;
    pub const END_THREAD: u8 = 0x0B;
    pub const HEAP_DUMP: u8 = 0x0C;
    pub const CPU_SAMPLES: u8 = 0x0D;
    pub const CONTROL_SETTINGS: u8 = 0x0E;
    pub const HEAP_DUMP_SEGMENT: u8 = 0x1C;
    pub const HEAP_DUMP_END: u8 = 0x2C;
}

/// Heap-dump sub-record tags.
pub mod sub {
    pub const ROOT_UNKNOWN: u8 = 0xFF;
    pub const ROOT_JNI_GLOBAL: u8 = 0x01;
    pub const ROOT_JNI_LOCAL: u8 = 0x02;
    pub const ROOT_JAVA_FRAME: u8 = 0x03;
    pub const ROOT_NATIVE_STACK: u8 = 0x04;
    pub const ROOT_STICKY_CLASS: u8 = 0x05;
    pub const ROOT_THREAD_BLOCK: u8 = 0x06;
    pub const ROOT_MONITOR_USED: u8 = 0x07;
    pub const ROOT_THREAD_OBJECT: u8 = 0x08;
    pub const CLASS_DUMP: u8 = 0x20;
    pub const INSTANCE_DUMP: u8 = 0x21;
    pub const OBJECT_ARRAY_DUMP: u8 = 0x22;
    pub const PRIMITIVE_ARRAY_DUMP: u8 = 0x23;
}

/// HPROF's basic types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BasicType {
    Object = 2,
    Boolean = 4,
    Char = 5,
    Float = 6,
    Double = 7,
    Byte = 8,
    Short = 9,
    Int = 10,
    Long = 11,
}

impl BasicType {
    pub fn from_code(code: u8) -> Option<BasicType> {
        Some(match code {
            2 => BasicType::Object,
            4 => BasicType::Boolean,
            5 => BasicType::Char,
            6 => BasicType::Float,
            7 => BasicType::Double,
            8 => BasicType::Byte,
            9 => BasicType::Short,
            10 => BasicType::Int,
            11 => BasicType::Long,
            _ => return None,
        })
    }

    /// The type of a JVM field descriptor's first character (`I`, `Ljava/lang/String;`, `[B`);
    /// JVMTI's primitive type codes are these characters too.
    pub fn from_descriptor(first: u8) -> Option<BasicType> {
        Some(match first {
            b'L' | b'[' => BasicType::Object,
            b'Z' => BasicType::Boolean,
            b'C' => BasicType::Char,
            b'F' => BasicType::Float,
            b'D' => BasicType::Double,
            b'B' => BasicType::Byte,
            b'S' => BasicType::Short,
            b'I' => BasicType::Int,
            b'J' => BasicType::Long,
            _ => return None,
        })
    }

    /// Bytes a value takes; objects take the identifier size.
    pub fn size(self, id_size: u32) -> u32 {
        match self {
            BasicType::Object => id_size,
            BasicType::Boolean | BasicType::Byte => 1,
            BasicType::Char | BasicType::Short => 2,
            BasicType::Float | BasicType::Int => 4,
            BasicType::Double | BasicType::Long => 8,
        }
    }

    /// The Java source name of an array of this type's elements ("int[]"), for primitives.
    pub fn array_name(self) -> &'static str {
        match self {
            BasicType::Object => "java.lang.Object[]",
            BasicType::Boolean => "boolean[]",
            BasicType::Char => "char[]",
            BasicType::Float => "float[]",
            BasicType::Double => "double[]",
            BasicType::Byte => "byte[]",
            BasicType::Short => "short[]",
            BasicType::Int => "int[]",
            BasicType::Long => "long[]",
        }
    }
}

/// A typed value (a static field, a constant pool entry): the raw bytes, big-endian.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub basic_type: BasicType,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocSite {
    pub array_type: u8,
    pub class_serial: u32,
    pub stack_serial: u32,
    pub live_bytes: u32,
    pub live_instances: u32,
    pub allocated_bytes: u32,
    pub allocated_instances: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassDump {
    pub class_id: u64,
    pub stack_serial: u32,
    pub super_id: u64,
    pub loader_id: u64,
    pub signers_id: u64,
    pub protection_domain_id: u64,
    pub instance_size: u32,
    pub constant_pool: Vec<(u16, Value)>,
    pub static_fields: Vec<(u64, Value)>,
    /// (name string id, type) of the class's own instance fields, not its super classes'.
    pub instance_fields: Vec<(u64, BasicType)>,
}

/// One heap-dump sub-record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubRecord {
    RootUnknown {
        id: u64,
    },
    RootJniGlobal {
        id: u64,
        global_ref_id: u64,
    },
    RootJniLocal {
        id: u64,
        thread_serial: u32,
        frame: u32,
    },
    RootJavaFrame {
        id: u64,
        thread_serial: u32,
        frame: u32,
    },
    RootNativeStack {
        id: u64,
        thread_serial: u32,
    },
    RootStickyClass {
        id: u64,
    },
    RootThreadBlock {
        id: u64,
        thread_serial: u32,
    },
    RootMonitorUsed {
        id: u64,
    },
    RootThreadObject {
        id: u64,
        thread_serial: u32,
        stack_serial: u32,
    },
    ClassDump(Box<ClassDump>),
    /// Field values of the class, then of its super classes, as raw bytes.
    InstanceDump {
        id: u64,
        stack_serial: u32,
        class_id: u64,
        values: Vec<u8>,
    },
    ObjectArrayDump {
        id: u64,
        stack_serial: u32,
        class_id: u64,
        elements: Vec<u64>,
    },
    PrimitiveArrayDump {
        id: u64,
        stack_serial: u32,
        element_type: BasicType,
        length: u32,
        bytes: Vec<u8>,
    },
}

/// One top-level record (heap dumps are read and written sub-record by sub-record).
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Utf8 {
        id: u64,
        text: Vec<u8>,
    },
    LoadClass {
        class_serial: u32,
        class_id: u64,
        stack_serial: u32,
        name_id: u64,
    },
    UnloadClass {
        class_serial: u32,
    },
    StackFrame {
        frame_id: u64,
        method_name_id: u64,
        signature_id: u64,
        source_id: u64,
        class_serial: u32,
        line: i32,
    },
    StackTrace {
        stack_serial: u32,
        thread_serial: u32,
        frames: Vec<u64>,
    },
    AllocSites {
        flags: u16,
        cutoff: f32,
        total_live_bytes: u32,
        total_live_instances: u32,
        total_allocated_bytes: u64,
        total_allocated_instances: u64,
        sites: Vec<AllocSite>,
    },
    HeapSummary {
        live_bytes: u32,
        live_instances: u32,
        allocated_bytes: u64,
        allocated_instances: u64,
    },
    StartThread {
        thread_serial: u32,
        object_id: u64,
        stack_serial: u32,
        name_id: u64,
        group_name_id: u64,
        parent_group_name_id: u64,
    },
    EndThread {
        thread_serial: u32,
    },
    CpuSamples {
        total: u32,
        traces: Vec<(u32, u32)>,
    },
    ControlSettings {
        flags: u32,
        depth: u16,
    },
    /// A record of a tag this reader does not know, kept whole.
    Unknown {
        tag: u8,
        body: Vec<u8>,
    },
}

/// What the reader yields, in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Record(Record),
    /// A HEAP DUMP (whole) or HEAP DUMP SEGMENT record begins; its sub-records follow.
    HeapDumpStart {
        segment: bool,
    },
    Sub(SubRecord),
    /// HEAP DUMP END.
    HeapDumpEnd,
}

/// Writes HPROF binary.
pub struct HprofWriter<W: Write> {
    out: W,
    id_size: u32,
    /// The heap dump segment being built (its length must precede it).
    segment: Vec<u8>,
    in_dump: bool,
    segment_limit: usize,
}

impl<W: Write> HprofWriter<W> {
    /// Writes the header: format name, identifier size, time in milliseconds since the epoch.
    pub fn new(mut out: W, id_size: u32, millis: u64) -> io::Result<Self> {
        assert!(id_size == 4 || id_size == 8, "identifiers are 4 or 8 bytes");
        out.write_all(FORMAT_1_0_2.as_bytes())?;
        out.write_all(&[0])?;
        out.write_all(&id_size.to_be_bytes())?;
        out.write_all(&((millis >> 32) as u32).to_be_bytes())?;
        out.write_all(&(millis as u32).to_be_bytes())?;
        Ok(HprofWriter {
            out,
            id_size,
            segment: Vec::new(),
            in_dump: false,
            segment_limit: 64 << 20,
        })
    }

    /// Cuts heap dump segments at `bytes` (default 64 MiB).
    pub fn with_segment_limit(mut self, bytes: usize) -> Self {
        self.segment_limit = bytes.max(1);
        self
    }

    fn id(&self, body: &mut Vec<u8>, id: u64) {
        if self.id_size == 8 {
            body.extend_from_slice(&id.to_be_bytes());
        } else {
            body.extend_from_slice(&(id as u32).to_be_bytes());
        }
    }

    fn frame(&mut self, tag: u8, body: &[u8]) -> io::Result<()> {
        self.out.write_all(&[tag])?;
        self.out.write_all(&0u32.to_be_bytes())?; // microseconds since the header's time
        self.out.write_all(&(body.len() as u32).to_be_bytes())?;
        self.out.write_all(body)
    }

    pub fn record(&mut self, record: &Record) -> io::Result<()> {
        self.flush_segment()?;
        let mut b = Vec::new();
        let tag = match record {
            Record::Utf8 { id, text } => {
                self.id(&mut b, *id);
                b.extend_from_slice(text);
                tag::UTF8
            }
            Record::LoadClass {
                class_serial,
                class_id,
                stack_serial,
                name_id,
            } => {
                b.extend_from_slice(&class_serial.to_be_bytes());
                self.id(&mut b, *class_id);
                b.extend_from_slice(&stack_serial.to_be_bytes());
                self.id(&mut b, *name_id);
                tag::LOAD_CLASS
            }
            Record::UnloadClass { class_serial } => {
                b.extend_from_slice(&class_serial.to_be_bytes());
                tag::UNLOAD_CLASS
            }
            Record::StackFrame {
                frame_id,
                method_name_id,
                signature_id,
                source_id,
                class_serial,
                line,
            } => {
                for id in [frame_id, method_name_id, signature_id, source_id] {
                    self.id(&mut b, *id);
                }
                b.extend_from_slice(&class_serial.to_be_bytes());
                b.extend_from_slice(&line.to_be_bytes());
                tag::STACK_FRAME
            }
            Record::StackTrace {
                stack_serial,
                thread_serial,
                frames,
            } => {
                b.extend_from_slice(&stack_serial.to_be_bytes());
                b.extend_from_slice(&thread_serial.to_be_bytes());
                b.extend_from_slice(&(frames.len() as u32).to_be_bytes());
                for frame in frames {
                    self.id(&mut b, *frame);
                }
                tag::STACK_TRACE
            }
            Record::AllocSites {
                flags,
                cutoff,
                total_live_bytes,
                total_live_instances,
                total_allocated_bytes,
                total_allocated_instances,
                sites,
            } => {
                b.extend_from_slice(&flags.to_be_bytes());
                b.extend_from_slice(&cutoff.to_bits().to_be_bytes());
                b.extend_from_slice(&total_live_bytes.to_be_bytes());
                b.extend_from_slice(&total_live_instances.to_be_bytes());
                b.extend_from_slice(&total_allocated_bytes.to_be_bytes());
                b.extend_from_slice(&total_allocated_instances.to_be_bytes());
                b.extend_from_slice(&(sites.len() as u32).to_be_bytes());
                for site in sites {
                    b.push(site.array_type);
                    for n in [
                        site.class_serial,
                        site.stack_serial,
                        site.live_bytes,
                        site.live_instances,
                        site.allocated_bytes,
                        site.allocated_instances,
                    ] {
                        b.extend_from_slice(&n.to_be_bytes());
                    }
                }
                tag::ALLOC_SITES
            }
            Record::HeapSummary {
                live_bytes,
                live_instances,
                allocated_bytes,
                allocated_instances,
            } => {
                b.extend_from_slice(&live_bytes.to_be_bytes());
                b.extend_from_slice(&live_instances.to_be_bytes());
                b.extend_from_slice(&allocated_bytes.to_be_bytes());
                b.extend_from_slice(&allocated_instances.to_be_bytes());
                tag::HEAP_SUMMARY
            }
            Record::StartThread {
                thread_serial,
                object_id,
                stack_serial,
                name_id,
                group_name_id,
                parent_group_name_id,
            } => {
                b.extend_from_slice(&thread_serial.to_be_bytes());
                self.id(&mut b, *object_id);
                b.extend_from_slice(&stack_serial.to_be_bytes());
                for id in [name_id, group_name_id, parent_group_name_id] {
                    self.id(&mut b, *id);
                }
                tag::START_THREAD
            }
            Record::EndThread { thread_serial } => {
                b.extend_from_slice(&thread_serial.to_be_bytes());
                tag::END_THREAD
            }
            Record::CpuSamples { total, traces } => {
                b.extend_from_slice(&total.to_be_bytes());
                b.extend_from_slice(&(traces.len() as u32).to_be_bytes());
                for (count, stack) in traces {
                    b.extend_from_slice(&count.to_be_bytes());
                    b.extend_from_slice(&stack.to_be_bytes());
                }
                tag::CPU_SAMPLES
            }
            Record::ControlSettings { flags, depth } => {
                b.extend_from_slice(&flags.to_be_bytes());
                b.extend_from_slice(&depth.to_be_bytes());
                tag::CONTROL_SETTINGS
            }
            Record::Unknown { tag, body } => {
                b.extend_from_slice(body);
                *tag
            }
        };
        self.frame(tag, &b)
    }

    /// Adds a heap-dump sub-record; segments are cut and written as they fill.
    pub fn sub_record(&mut self, record: &SubRecord) -> io::Result<()> {
        self.in_dump = true;
        let mut b = std::mem::take(&mut self.segment);
        let ids = |writer: &Self, b: &mut Vec<u8>, ids: &[u64]| {
            for id in ids {
                writer.id(b, *id);
            }
        };
        match record {
            SubRecord::RootUnknown { id } => {
                b.push(sub::ROOT_UNKNOWN);
                ids(self, &mut b, &[*id]);
            }
            SubRecord::RootJniGlobal { id, global_ref_id } => {
                b.push(sub::ROOT_JNI_GLOBAL);
                ids(self, &mut b, &[*id, *global_ref_id]);
            }
            SubRecord::RootJniLocal {
                id,
                thread_serial,
                frame,
            }
            | SubRecord::RootJavaFrame {
                id,
                thread_serial,
                frame,
            } => {
                b.push(if matches!(record, SubRecord::RootJniLocal { .. }) {
                    sub::ROOT_JNI_LOCAL
                } else {
                    sub::ROOT_JAVA_FRAME
                });
                ids(self, &mut b, &[*id]);
                b.extend_from_slice(&thread_serial.to_be_bytes());
                b.extend_from_slice(&frame.to_be_bytes());
            }
            SubRecord::RootNativeStack { id, thread_serial }
            | SubRecord::RootThreadBlock { id, thread_serial } => {
                b.push(if matches!(record, SubRecord::RootNativeStack { .. }) {
                    sub::ROOT_NATIVE_STACK
                } else {
                    sub::ROOT_THREAD_BLOCK
                });
                ids(self, &mut b, &[*id]);
                b.extend_from_slice(&thread_serial.to_be_bytes());
            }
            SubRecord::RootStickyClass { id } | SubRecord::RootMonitorUsed { id } => {
                b.push(if matches!(record, SubRecord::RootStickyClass { .. }) {
                    sub::ROOT_STICKY_CLASS
                } else {
                    sub::ROOT_MONITOR_USED
                });
                ids(self, &mut b, &[*id]);
            }
            SubRecord::RootThreadObject {
                id,
                thread_serial,
                stack_serial,
            } => {
                b.push(sub::ROOT_THREAD_OBJECT);
                ids(self, &mut b, &[*id]);
                b.extend_from_slice(&thread_serial.to_be_bytes());
                b.extend_from_slice(&stack_serial.to_be_bytes());
            }
            SubRecord::ClassDump(class) => {
                b.push(sub::CLASS_DUMP);
                ids(self, &mut b, &[class.class_id]);
                b.extend_from_slice(&class.stack_serial.to_be_bytes());
                ids(
                    self,
                    &mut b,
                    &[
                        class.super_id,
                        class.loader_id,
                        class.signers_id,
                        class.protection_domain_id,
                        0,
                        0,
                    ],
                );
                b.extend_from_slice(&class.instance_size.to_be_bytes());
                b.extend_from_slice(&(class.constant_pool.len() as u16).to_be_bytes());
                for (index, value) in &class.constant_pool {
                    b.extend_from_slice(&index.to_be_bytes());
                    b.push(value.basic_type as u8);
                    b.extend_from_slice(&value.bytes);
                }
                b.extend_from_slice(&(class.static_fields.len() as u16).to_be_bytes());
                for (name, value) in &class.static_fields {
                    ids(self, &mut b, &[*name]);
                    b.push(value.basic_type as u8);
                    b.extend_from_slice(&value.bytes);
                }
                b.extend_from_slice(&(class.instance_fields.len() as u16).to_be_bytes());
                for (name, basic_type) in &class.instance_fields {
                    ids(self, &mut b, &[*name]);
                    b.push(*basic_type as u8);
                }
            }
            SubRecord::InstanceDump {
                id,
                stack_serial,
                class_id,
                values,
            } => {
                self.segment = b;
                return self.instance_dump(*id, *stack_serial, *class_id, values);
            }
            SubRecord::ObjectArrayDump {
                id,
                stack_serial,
                class_id,
                elements,
            } => {
                self.segment = b;
                return self.object_array_dump(*id, *stack_serial, *class_id, elements);
            }
            SubRecord::PrimitiveArrayDump {
                id,
                stack_serial,
                element_type,
                length,
                bytes,
            } => {
                self.segment = b;
                return self.primitive_array_dump(
                    *id,
                    *stack_serial,
                    *element_type,
                    *length,
                    bytes,
                );
            }
        }
        self.segment = b;
        self.end_sub_record()
    }

    fn end_sub_record(&mut self) -> io::Result<()> {
        if self.segment.len() >= self.segment_limit {
            self.flush_segment()?;
        }
        Ok(())
    }

    /// INSTANCE DUMP from borrowed field values (class then super classes, big-endian): the
    /// agent writes millions of these and should not allocate for each.
    pub fn instance_dump(
        &mut self,
        id: u64,
        stack_serial: u32,
        class_id: u64,
        values: &[u8],
    ) -> io::Result<()> {
        self.in_dump = true;
        let mut b = std::mem::take(&mut self.segment);
        b.push(sub::INSTANCE_DUMP);
        self.id(&mut b, id);
        b.extend_from_slice(&stack_serial.to_be_bytes());
        self.id(&mut b, class_id);
        b.extend_from_slice(&(values.len() as u32).to_be_bytes());
        b.extend_from_slice(values);
        self.segment = b;
        self.end_sub_record()
    }

    /// OBJECT ARRAY DUMP from borrowed element ids.
    pub fn object_array_dump(
        &mut self,
        id: u64,
        stack_serial: u32,
        class_id: u64,
        elements: &[u64],
    ) -> io::Result<()> {
        self.in_dump = true;
        let mut b = std::mem::take(&mut self.segment);
        b.push(sub::OBJECT_ARRAY_DUMP);
        self.id(&mut b, id);
        b.extend_from_slice(&stack_serial.to_be_bytes());
        b.extend_from_slice(&(elements.len() as u32).to_be_bytes());
        self.id(&mut b, class_id);
        for element in elements {
            self.id(&mut b, *element);
        }
        self.segment = b;
        self.end_sub_record()
    }

    /// PRIMITIVE ARRAY DUMP from elements already big-endian.
    pub fn primitive_array_dump(
        &mut self,
        id: u64,
        stack_serial: u32,
        element_type: BasicType,
        length: u32,
        big_endian: &[u8],
    ) -> io::Result<()> {
        self.primitive_array_with(id, stack_serial, element_type, length, |b| {
            b.extend_from_slice(big_endian)
        })
    }

    /// PRIMITIVE ARRAY DUMP from elements in this machine's byte order, as the JVM holds them.
    pub fn primitive_array_dump_native(
        &mut self,
        id: u64,
        stack_serial: u32,
        element_type: BasicType,
        length: u32,
        native: &[u8],
    ) -> io::Result<()> {
        let width = element_type.size(self.id_size) as usize;
        self.primitive_array_with(id, stack_serial, element_type, length, |b| {
            if width <= 1 || cfg!(target_endian = "big") {
                b.extend_from_slice(native);
            } else {
                for element in native.chunks_exact(width) {
                    b.extend(element.iter().rev());
                }
            }
        })
    }

    fn primitive_array_with(
        &mut self,
        id: u64,
        stack_serial: u32,
        element_type: BasicType,
        length: u32,
        elements: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        self.in_dump = true;
        let mut b = std::mem::take(&mut self.segment);
        b.push(sub::PRIMITIVE_ARRAY_DUMP);
        self.id(&mut b, id);
        b.extend_from_slice(&stack_serial.to_be_bytes());
        b.extend_from_slice(&length.to_be_bytes());
        b.push(element_type as u8);
        elements(&mut b);
        self.segment = b;
        self.end_sub_record()
    }

    /// The identifier size this writer was created with.
    pub fn id_size(&self) -> u32 {
        self.id_size
    }

    fn flush_segment(&mut self) -> io::Result<()> {
        if !self.segment.is_empty() {
            let segment = std::mem::take(&mut self.segment);
            self.frame(tag::HEAP_DUMP_SEGMENT, &segment)?;
            self.segment = segment;
            self.segment.clear();
        }
        Ok(())
    }

    /// Writes out everything so far (an open heap dump segment is closed; the dump goes on in
    /// the next one).
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_segment()?;
        self.out.flush()
    }

    /// Ends the heap dump: the last segment, then HEAP DUMP END.
    pub fn end_heap_dump(&mut self) -> io::Result<()> {
        self.flush_segment()?;
        if std::mem::take(&mut self.in_dump) {
            self.frame(tag::HEAP_DUMP_END, &[])?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.end_heap_dump()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A malformed HPROF file: where and what.
#[derive(Debug, thiserror::Error)]
pub enum HprofError {
    #[error("byte {offset}: {message}")]
    Malformed { offset: u64, message: String },
    #[error("reading HPROF: {0}")]
    Io(#[from] io::Error),
}

/// The file's header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub format: String,
    pub id_size: u32,
    pub millis: u64,
}

/// Reads HPROF binary as a stream of [`Item`]s.
pub struct HprofReader<R: Read> {
    input: R,
    offset: u64,
    header: Header,
    /// Bytes left in the heap dump (segment) record being read.
    in_dump: u64,
    done: bool,
}

/// The most one record may claim, so a corrupt length cannot make the reader allocate wildly.
const MAX_RECORD_BYTES: u64 = 4 << 30;

impl<R: Read> HprofReader<R> {
    pub fn new(mut input: R) -> Result<Self, HprofError> {
        let mut format = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            if input.read(&mut byte)? == 0 {
                return Err(HprofError::Malformed {
                    offset: format.len() as u64,
                    message: "the file ends inside its header".into(),
                });
            }
            if byte[0] == 0 {
                break;
            }
            format.push(byte[0]);
            if format.len() > 64 {
                return Err(HprofError::Malformed {
                    offset: 0,
                    message: "no HPROF header (no NUL within 64 bytes)".into(),
                });
            }
        }
        // Offsets count raw bytes, not the (lossy) text.
        let header_bytes = format.len() as u64 + 1;
        let format = String::from_utf8_lossy(&format).into_owned();
        if !format.starts_with("JAVA PROFILE ") {
            return Err(HprofError::Malformed {
                offset: 0,
                message: format!("not HPROF: the header is '{format}'"),
            });
        }
        let mut reader = HprofReader {
            input,
            offset: header_bytes,
            header: Header {
                format,
                id_size: 0,
                millis: 0,
            },
            in_dump: 0,
            done: false,
        };
        let id_size = reader.u4()?;
        if id_size != 4 && id_size != 8 {
            return Err(
                reader.malformed(4, format!("identifier size {id_size}; HPROF uses 4 or 8"))
            );
        }
        let high = reader.u4()?;
        let low = reader.u4()?;
        reader.header.id_size = id_size;
        reader.header.millis = (u64::from(high) << 32) | u64::from(low);
        Ok(reader)
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn malformed(&self, back: u64, message: String) -> HprofError {
        HprofError::Malformed {
            offset: self.offset.saturating_sub(back),
            message,
        }
    }

    fn bytes(&mut self, count: u64) -> Result<Vec<u8>, HprofError> {
        let mut buffer = Vec::new();
        let read = (&mut self.input).take(count).read_to_end(&mut buffer)? as u64;
        self.offset += read;
        if read < count {
            return Err(HprofError::Malformed {
                offset: self.offset,
                message: format!("truncated: {count} bytes needed, the file ends after {read}"),
            });
        }
        if self.in_dump > 0 {
            self.in_dump = self.in_dump.saturating_sub(count);
        }
        Ok(buffer)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], HprofError> {
        let bytes = self.bytes(N as u64)?;
        let mut array = [0u8; N];
        array.copy_from_slice(&bytes);
        Ok(array)
    }

    fn u1(&mut self) -> Result<u8, HprofError> {
        Ok(self.array::<1>()?[0])
    }
    fn u2(&mut self) -> Result<u16, HprofError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u4(&mut self) -> Result<u32, HprofError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u8(&mut self) -> Result<u64, HprofError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn id(&mut self) -> Result<u64, HprofError> {
        if self.header.id_size == 8 {
            self.u8()
        } else {
            Ok(u64::from(self.u4()?))
        }
    }

    fn basic_type(&mut self) -> Result<BasicType, HprofError> {
        let code = self.u1()?;
        BasicType::from_code(code)
            .ok_or_else(|| self.malformed(1, format!("{code} is not an HPROF basic type")))
    }

    fn value(&mut self) -> Result<Value, HprofError> {
        let basic_type = self.basic_type()?;
        let bytes = self.bytes(u64::from(basic_type.size(self.header.id_size)))?;
        Ok(Value { basic_type, bytes })
    }

    /// The next item, `None` at the end of the file.
    pub fn next_item(&mut self) -> Option<Result<Item, HprofError>> {
        if self.done {
            return None;
        }
        let item = if self.in_dump > 0 {
            self.sub_record().map(|sub| sub.map(Item::Sub))
        } else {
            self.record()
        };
        match item {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }

    fn record(&mut self) -> Result<Option<Item>, HprofError> {
        let mut tag_byte = [0u8; 1];
        if self.input.read(&mut tag_byte)? == 0 {
            return Ok(None);
        }
        self.offset += 1;
        let tag = tag_byte[0];
        let _micros = self.u4()?;
        let length = u64::from(self.u4()?);
        if length > MAX_RECORD_BYTES {
            return Err(self.malformed(4, format!("a record of {length} bytes")));
        }
        let start = self.offset;
        let record = match tag {
            tag::HEAP_DUMP | tag::HEAP_DUMP_SEGMENT => {
                self.in_dump = length;
                return Ok(Some(Item::HeapDumpStart {
                    segment: tag == tag::HEAP_DUMP_SEGMENT,
                }));
            }
            tag::HEAP_DUMP_END => {
                self.bytes(length)?;
                return Ok(Some(Item::HeapDumpEnd));
            }
            tag::UTF8 => {
                let id = self.id()?;
                let text_length = length
                    .checked_sub(u64::from(self.header.id_size))
                    .ok_or_else(|| {
                        self.malformed(0, "a STRING IN UTF8 shorter than its id".into())
                    })?;
                Record::Utf8 {
                    id,
                    text: self.bytes(text_length)?,
                }
            }
            tag::LOAD_CLASS => Record::LoadClass {
                class_serial: self.u4()?,
                class_id: self.id()?,
                stack_serial: self.u4()?,
                name_id: self.id()?,
            },
            tag::UNLOAD_CLASS => Record::UnloadClass {
                class_serial: self.u4()?,
            },
            tag::STACK_FRAME => Record::StackFrame {
                frame_id: self.id()?,
                method_name_id: self.id()?,
                signature_id: self.id()?,
                source_id: self.id()?,
                class_serial: self.u4()?,
                line: self.u4()? as i32,
            },
            tag::STACK_TRACE => {
                let stack_serial = self.u4()?;
                let thread_serial = self.u4()?;
                let count = self.u4()?;
                if u64::from(count) * u64::from(self.header.id_size) > length {
                    return Err(self.malformed(
                        4,
                        format!("a STACK TRACE of {count} frames in {length} bytes"),
                    ));
                }
                let frames = (0..count).map(|_| self.id()).collect::<Result<_, _>>()?;
                Record::StackTrace {
                    stack_serial,
                    thread_serial,
                    frames,
                }
            }
            tag::ALLOC_SITES => {
                let flags = self.u2()?;
                let cutoff = f32::from_bits(self.u4()?);
                let (total_live_bytes, total_live_instances) = (self.u4()?, self.u4()?);
                let (total_allocated_bytes, total_allocated_instances) = (self.u8()?, self.u8()?);
                let count = self.u4()?;
                if u64::from(count) * 25 > length {
                    return Err(self.malformed(
                        4,
                        format!("ALLOC SITES claims {count} sites in {length} bytes"),
                    ));
                }
                let mut sites = Vec::new();
                for _ in 0..count {
                    sites.push(AllocSite {
                        array_type: self.u1()?,
                        class_serial: self.u4()?,
                        stack_serial: self.u4()?,
                        live_bytes: self.u4()?,
                        live_instances: self.u4()?,
                        allocated_bytes: self.u4()?,
                        allocated_instances: self.u4()?,
                    });
                }
                Record::AllocSites {
                    flags,
                    cutoff,
                    total_live_bytes,
                    total_live_instances,
                    total_allocated_bytes,
                    total_allocated_instances,
                    sites,
                }
            }
            tag::HEAP_SUMMARY => Record::HeapSummary {
                live_bytes: self.u4()?,
                live_instances: self.u4()?,
                allocated_bytes: self.u8()?,
                allocated_instances: self.u8()?,
            },
            tag::START_THREAD => Record::StartThread {
                thread_serial: self.u4()?,
                object_id: self.id()?,
                stack_serial: self.u4()?,
                name_id: self.id()?,
                group_name_id: self.id()?,
                parent_group_name_id: self.id()?,
            },
            tag::END_THREAD => Record::EndThread {
                thread_serial: self.u4()?,
            },
            tag::CPU_SAMPLES => {
                let total = self.u4()?;
                let count = self.u4()?;
                if u64::from(count) * 8 > length {
                    return Err(self.malformed(
                        4,
                        format!("CPU SAMPLES claims {count} traces in {length} bytes"),
                    ));
                }
                let traces = (0..count)
                    .map(|_| Ok((self.u4()?, self.u4()?)))
                    .collect::<Result<_, HprofError>>()?;
                Record::CpuSamples { total, traces }
            }
            tag::CONTROL_SETTINGS => Record::ControlSettings {
                flags: self.u4()?,
                depth: self.u2()?,
            },
            other => Record::Unknown {
                tag: other,
                body: self.bytes(length)?,
            },
        };
        let used = self.offset - start;
        if used != length {
            return Err(HprofError::Malformed {
                offset: start,
                message: format!("record 0x{tag:02X} says {length} bytes but holds {used}"),
            });
        }
        Ok(Some(Item::Record(record)))
    }

    fn sub_record(&mut self) -> Result<Option<SubRecord>, HprofError> {
        let sub_tag = self.u1()?;
        let record = match sub_tag {
            sub::ROOT_UNKNOWN => SubRecord::RootUnknown { id: self.id()? },
            sub::ROOT_JNI_GLOBAL => SubRecord::RootJniGlobal {
                id: self.id()?,
                global_ref_id: self.id()?,
            },
            sub::ROOT_JNI_LOCAL => SubRecord::RootJniLocal {
                id: self.id()?,
                thread_serial: self.u4()?,
                frame: self.u4()?,
            },
            sub::ROOT_JAVA_FRAME => SubRecord::RootJavaFrame {
                id: self.id()?,
                thread_serial: self.u4()?,
                frame: self.u4()?,
            },
            sub::ROOT_NATIVE_STACK => SubRecord::RootNativeStack {
                id: self.id()?,
                thread_serial: self.u4()?,
            },
            sub::ROOT_STICKY_CLASS => SubRecord::RootStickyClass { id: self.id()? },
            sub::ROOT_THREAD_BLOCK => SubRecord::RootThreadBlock {
                id: self.id()?,
                thread_serial: self.u4()?,
            },
            sub::ROOT_MONITOR_USED => SubRecord::RootMonitorUsed { id: self.id()? },
            sub::ROOT_THREAD_OBJECT => SubRecord::RootThreadObject {
                id: self.id()?,
                thread_serial: self.u4()?,
                stack_serial: self.u4()?,
            },
            sub::CLASS_DUMP => {
                let class_id = self.id()?;
                let stack_serial = self.u4()?;
                let (super_id, loader_id, signers_id, protection_domain_id) =
                    (self.id()?, self.id()?, self.id()?, self.id()?);
                let (_reserved1, _reserved2) = (self.id()?, self.id()?);
                let instance_size = self.u4()?;
                let mut constant_pool = Vec::new();
                for _ in 0..self.u2()? {
                    let index = self.u2()?;
                    constant_pool.push((index, self.value()?));
                }
                let mut static_fields = Vec::new();
                for _ in 0..self.u2()? {
                    let name = self.id()?;
                    static_fields.push((name, self.value()?));
                }
                let mut instance_fields = Vec::new();
                for _ in 0..self.u2()? {
                    let name = self.id()?;
                    instance_fields.push((name, self.basic_type()?));
                }
                SubRecord::ClassDump(Box::new(ClassDump {
                    class_id,
                    stack_serial,
                    super_id,
                    loader_id,
                    signers_id,
                    protection_domain_id,
                    instance_size,
                    constant_pool,
                    static_fields,
                    instance_fields,
                }))
            }
            sub::INSTANCE_DUMP => {
                let (id, stack_serial, class_id) = (self.id()?, self.u4()?, self.id()?);
                let length = u64::from(self.u4()?);
                self.check_fits(length)?;
                SubRecord::InstanceDump {
                    id,
                    stack_serial,
                    class_id,
                    values: self.bytes(length)?,
                }
            }
            sub::OBJECT_ARRAY_DUMP => {
                let (id, stack_serial, count) = (self.id()?, self.u4()?, self.u4()?);
                let class_id = self.id()?;
                self.check_fits(u64::from(count) * u64::from(self.header.id_size))?;
                let elements = (0..count).map(|_| self.id()).collect::<Result<_, _>>()?;
                SubRecord::ObjectArrayDump {
                    id,
                    stack_serial,
                    class_id,
                    elements,
                }
            }
            sub::PRIMITIVE_ARRAY_DUMP => {
                let (id, stack_serial, length) = (self.id()?, self.u4()?, self.u4()?);
                let element_type = self.basic_type()?;
                if element_type == BasicType::Object {
                    return Err(self.malformed(1, "a PRIMITIVE ARRAY DUMP of objects".into()));
                }
                let size = u64::from(length) * u64::from(element_type.size(self.header.id_size));
                self.check_fits(size)?;
                SubRecord::PrimitiveArrayDump {
                    id,
                    stack_serial,
                    element_type,
                    length,
                    bytes: self.bytes(size)?,
                }
            }
            other => {
                return Err(
                    self.malformed(1, format!("0x{other:02X} is not a heap dump sub-record"))
                )
            }
        };
        Ok(Some(record))
    }

    /// A sub-record's claimed size must fit in what is left of its heap dump record.
    fn check_fits(&self, size: u64) -> Result<(), HprofError> {
        if size > self.in_dump {
            return Err(self.malformed(
                0,
                format!(
                    "a sub-record of {size} bytes where its heap dump has {} left",
                    self.in_dump
                ),
            ));
        }
        Ok(())
    }
}

impl<R: Read> Iterator for HprofReader<R> {
    type Item = Result<Item, HprofError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item()
    }
}
