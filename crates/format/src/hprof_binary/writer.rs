//! The HPROF binary writer: a header, then records; heap dumps cut into HEAP DUMP SEGMENTs (each
//! preceded by its length, so a segment is built in memory) and closed by HEAP DUMP END.

use std::io::{self, Write};

use super::records::*;

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

    /// A writer going on with a file whose header (and records) are there already.
    pub fn continuing(out: W, id_size: u32) -> Self {
        assert!(id_size == 4 || id_size == 8, "identifiers are 4 or 8 bytes");
        HprofWriter {
            out,
            id_size,
            segment: Vec::new(),
            in_dump: false,
            segment_limit: 64 << 20,
        }
    }

    /// Where records made elsewhere (whole records, tag to body) go, as they are: the sink
    /// itself, any heap dump segment being built written out first.
    pub fn raw_records(&mut self) -> io::Result<&mut W> {
        self.flush_segment()?;
        Ok(&mut self.out)
    }

    /// The sink, for a look at its state; what it holds so far may lag behind the records.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The sink, to change its state; writing to it directly would cut into records.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
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
