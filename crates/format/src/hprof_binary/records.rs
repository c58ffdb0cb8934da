//! HPROF binary's vocabulary: the header names, record and sub-record tags, basic types, and
//! one Rust type per record and heap-dump sub-record, as both the writer and the reader use them.

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
