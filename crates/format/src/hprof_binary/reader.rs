//! The HPROF binary streaming reader: 4- and 8-byte identifiers, segmented or whole heap dumps,
//! yielded record by record and sub-record by sub-record. It never panics on bad input: a
//! truncated or corrupt file is an error that gives the byte offset.

use std::io::{self, Read};

use super::records::*;

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
    /// Whether PRIMITIVE ARRAY DUMPs keep their elements (readers of the object graph only need
    /// their lengths, and the elements are most of a dump's bytes).
    primitive_values: bool,
}

/// The most one record may claim, so a corrupt length cannot make the reader allocate wildly.
const MAX_RECORD_BYTES: u64 = 4 << 30;

/// Reads up to this size are allocated whole before reading; larger ones grow as bytes come,
/// so that a corrupt length cannot make the reader allocate what the file does not hold.
const SMALL_READ: u64 = 64 << 10;

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
            primitive_values: true,
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

    /// Skips the elements of primitive arrays: their sub-records come with empty `bytes` (the
    /// file is still read through, so truncation is found at the same offsets).
    pub fn without_primitive_values(mut self) -> Self {
        self.primitive_values = false;
        self
    }

    /// A reader of the heap dump sub-records of a file whose header is `header`, with `input`
    /// positioned at byte `offset`, where a sub-record starts: to read again an object found in
    /// an earlier pass.
    pub fn at_sub_record(input: R, header: Header, offset: u64) -> Self {
        HprofReader {
            input,
            offset,
            header,
            in_dump: MAX_RECORD_BYTES,
            done: false,
            primitive_values: true,
        }
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
        let read = if count <= SMALL_READ {
            // Most reads are a few bytes: one allocation of the right size, filled in place.
            buffer.resize(count as usize, 0);
            let filled = self.fill(&mut buffer)?;
            buffer.truncate(filled);
            filled as u64
        } else {
            (&mut self.input).take(count).read_to_end(&mut buffer)? as u64
        };
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

    /// Reads into `buffer` until it is full or the input ends; returns the bytes read.
    fn fill(&mut self, buffer: &mut [u8]) -> Result<usize, HprofError> {
        let mut filled = 0;
        while filled < buffer.len() {
            match self.input.read(&mut buffer[filled..]) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(filled)
    }

    /// Reads and drops `count` bytes.
    fn skip(&mut self, count: u64) -> Result<(), HprofError> {
        let read = io::copy(&mut (&mut self.input).take(count), &mut io::sink())?;
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
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], HprofError> {
        let mut array = [0u8; N];
        let read = self.fill(&mut array)?;
        self.offset += read as u64;
        if read < N {
            return Err(HprofError::Malformed {
                offset: self.offset,
                message: format!("truncated: {N} bytes needed, the file ends after {read}"),
            });
        }
        if self.in_dump > 0 {
            self.in_dump = self.in_dump.saturating_sub(N as u64);
        }
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
                let bytes = if self.primitive_values {
                    self.bytes(size)?
                } else {
                    self.skip(size)?;
                    Vec::new()
                };
                SubRecord::PrimitiveArrayDump {
                    id,
                    stack_serial,
                    element_type,
                    length,
                    bytes,
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

/// Round trips through the writer, a parser written elsewhere, and bad input.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::hprof_binary::HprofWriter;

    fn sample_records(id_size: u32, constant_pool: bool) -> (Vec<Item>, Vec<u8>) {
        let big = if id_size == 8 {
            0x1234_5678_9abc_def0
        } else {
            0x9abc_def0
        };
        let records = vec![
            Record::Utf8 {
                id: big,
                text: b"Keep$Node".to_vec(),
            },
            Record::LoadClass {
                class_serial: 1,
                class_id: 0x100,
                stack_serial: 300000,
                name_id: big,
            },
            Record::StackFrame {
                frame_id: 7,
                method_name_id: big,
                signature_id: big,
                source_id: big,
                class_serial: 1,
                line: -3,
            },
            Record::StackTrace {
                stack_serial: 300001,
                thread_serial: 200001,
                frames: vec![7, 7],
            },
            Record::AllocSites {
                flags: 3,
                cutoff: 0.0001,
                total_live_bytes: 10,
                total_live_instances: 1,
                total_allocated_bytes: 1 << 40,
                total_allocated_instances: 9,
                sites: vec![AllocSite {
                    array_type: 10,
                    class_serial: 1,
                    stack_serial: 300001,
                    live_bytes: 56,
                    live_instances: 1,
                    allocated_bytes: 560,
                    allocated_instances: 10,
                }],
            },
            Record::HeapSummary {
                live_bytes: 1,
                live_instances: 2,
                allocated_bytes: 3,
                allocated_instances: 4,
            },
            Record::StartThread {
                thread_serial: 200001,
                object_id: 0x200,
                stack_serial: 300000,
                name_id: big,
                group_name_id: big,
                parent_group_name_id: 0,
            },
            Record::CpuSamples {
                total: 9,
                traces: vec![(9, 300001)],
            },
            Record::ControlSettings { flags: 2, depth: 4 },
            Record::UnloadClass { class_serial: 1 },
            Record::EndThread {
                thread_serial: 200001,
            },
        ];
        let subs = vec![
            SubRecord::RootUnknown { id: 1 },
            SubRecord::RootJniGlobal {
                id: 2,
                global_ref_id: 3,
            },
            SubRecord::RootJniLocal {
                id: 4,
                thread_serial: 200001,
                frame: 0,
            },
            SubRecord::RootJavaFrame {
                id: 5,
                thread_serial: 200001,
                frame: u32::MAX,
            },
            SubRecord::RootNativeStack {
                id: 6,
                thread_serial: 200001,
            },
            SubRecord::RootStickyClass { id: 0x100 },
            SubRecord::RootThreadBlock {
                id: 8,
                thread_serial: 200001,
            },
            SubRecord::RootMonitorUsed { id: 9 },
            SubRecord::RootThreadObject {
                id: 0x200,
                thread_serial: 200001,
                stack_serial: 300000,
            },
            SubRecord::ClassDump(Box::new(ClassDump {
                class_id: 0x100,
                stack_serial: 300000,
                super_id: 0x101,
                loader_id: 0,
                signers_id: 0,
                protection_domain_id: 0,
                instance_size: 16,
                // HotSpot writes no constant pool (and jvm-hprof refuses one); ours round-trips it.
                constant_pool: if constant_pool {
                    vec![(
                        1,
                        Value {
                            basic_type: BasicType::Int,
                            bytes: vec![0, 0, 0, 7],
                        },
                    )]
                } else {
                    Vec::new()
                },
                static_fields: vec![
                    (
                        big,
                        Value {
                            basic_type: BasicType::Object,
                            bytes: vec![0; id_size as usize],
                        },
                    ),
                    (
                        big,
                        Value {
                            basic_type: BasicType::Long,
                            bytes: vec![1; 8],
                        },
                    ),
                ],
                instance_fields: vec![(big, BasicType::Int), (big, BasicType::Object)],
            })),
            SubRecord::InstanceDump {
                id: 0x300,
                stack_serial: 300001,
                class_id: 0x100,
                values: vec![0; 4 + id_size as usize],
            },
            SubRecord::ObjectArrayDump {
                id: 0x301,
                stack_serial: 300001,
                class_id: 0x102,
                elements: vec![0x300, 0, big],
            },
            SubRecord::PrimitiveArrayDump {
                id: 0x302,
                stack_serial: 300001,
                element_type: BasicType::Char,
                length: 3,
                bytes: b"\0a\0b\0c".to_vec(),
            },
        ];
        let mut writer = HprofWriter::new(Vec::new(), id_size, 1_795_318_001_000)
            .unwrap()
            .with_segment_limit(40);
        let mut expected = Vec::new();
        for record in &records {
            writer.record(record).unwrap();
            expected.push(Item::Record(record.clone()));
        }
        for sub in &subs {
            writer.sub_record(sub).unwrap();
        }
        let bytes = writer.finish().unwrap();
        // Reading gives back the records, then segments of the sub-records in order, then the end.
        let read: Vec<Item> = HprofReader::new(bytes.as_slice())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let subs_read: Vec<SubRecord> = read
            .iter()
            .filter_map(|item| match item {
                Item::Sub(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(subs_read, subs);
        assert!(
            read.iter()
                .filter(|i| matches!(i, Item::HeapDumpStart { segment: true }))
                .count()
                > 1,
            "cut into segments"
        );
        assert_eq!(read.last(), Some(&Item::HeapDumpEnd));
        (expected, bytes)
    }

    #[test]
    fn every_record_round_trips_with_both_identifier_sizes() {
        for id_size in [4, 8] {
            let (expected, bytes) = sample_records(id_size, true);
            let reader = HprofReader::new(bytes.as_slice()).unwrap();
            assert_eq!(reader.header().format, FORMAT_1_0_2);
            assert_eq!(reader.header().id_size, id_size);
            assert_eq!(reader.header().millis, 1_795_318_001_000);
            let records: Vec<Item> = reader
                .filter_map(Result::ok)
                .filter(|i| matches!(i, Item::Record(_)))
                .collect();
            assert_eq!(records, expected);
        }
    }

    #[test]
    fn a_parser_not_written_here_reads_what_we_write() {
        let (_, bytes) = sample_records(8, false);
        let hprof = jvm_hprof::parse_hprof(&bytes).expect("jvm-hprof parses the header");
        let mut tags = Vec::new();
        let mut instances = 0;
        let mut primitive_arrays = 0;
        for record in hprof.records_iter() {
            let record = record.expect("jvm-hprof parses every record");
            tags.push(format!("{:?}", record.tag()));
            if let Some(segment) = record.as_heap_dump_segment() {
                for sub in segment.expect("a segment").sub_records() {
                    match sub.expect("a sub-record") {
                        jvm_hprof::heap_dump::SubRecord::Instance(_) => instances += 1,
                        jvm_hprof::heap_dump::SubRecord::PrimitiveArray(_) => primitive_arrays += 1,
                        _ => {}
                    }
                }
            }
            if let Some(utf8) = record.as_utf_8() {
                assert_eq!(utf8.unwrap().text(), b"Keep$Node");
            }
        }
        assert_eq!((instances, primitive_arrays), (1, 1));
        assert!(tags.iter().any(|t| t.contains("HeapDumpEnd")), "{tags:?}");
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors_with_offsets_never_panics() {
        let (_, bytes) = sample_records(8, true);
        let all: Vec<Item> = HprofReader::new(bytes.as_slice())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for cut in 0..bytes.len() {
            let result: Result<Vec<Item>, HprofError> =
                HprofReader::new(&bytes[..cut]).and_then(|reader| reader.collect());
            match result {
                Err(HprofError::Malformed { offset, .. }) => {
                    assert!(offset <= cut as u64, "cut {cut}: offset {offset}")
                }
                Err(other) => panic!("cut {cut}: {other}"),
                // A cut exactly between two records is a shorter, whole file.
                Ok(items) => assert_eq!(items[..], all[..items.len()], "cut {cut}"),
            }
        }
        let mut corrupt = bytes.clone();
        corrupt[36] = 0xFF; // the high byte of the first record's length
        let error = HprofReader::new(corrupt.as_slice())
            .unwrap()
            .find_map(Result::err)
            .expect("refused");
        assert!(error.to_string().starts_with("byte "), "{error}");
        assert!(HprofReader::new(&b"JAVA PROFILE 1.0.2\0\0\0\0\x05"[..]).is_err());
        assert!(HprofReader::new(&b"GIF89a"[..]).is_err());
    }

    #[test]
    fn error_offsets_stay_inside_the_input() {
        // Found by the fuzzer: a heap dump segment whose sub-record claims more than the file holds.
        let data: &[u8] = &[
            74, 65, 86, 65, 32, 80, 82, 79, 70, 73, 76, 69, 32, 49, 46, 210, 48, 46, 50, 0, 0, 0,
            0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 64, 0, 17, 0, 0, 0, 0, 2, 10, 0, 0, 0,
            0, 0, 0, 1, 75, 101, 101, 112, 36, 78, 111, 100, 101, 2, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0,
            0, 1, 0, 0, 0, 0, 7, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 28, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 194, 0, 0, 55, 33, 0, 64, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 101, 0,
            0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let error = HprofReader::new(data)
            .unwrap()
            .find_map(Result::err)
            .expect("refused");
        match error {
            HprofError::Malformed {
                offset,
                ref message,
            } => {
                assert!(
                    offset <= data.len() as u64,
                    "offset {offset} past {} bytes: {message}",
                    data.len()
                )
            }
            other => panic!("{other}"),
        }
    }
}
