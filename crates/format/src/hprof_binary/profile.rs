//! An HPROF binary file (the JDK's `jcmd GC.heap_dump`, HPROF's `format=b`) read in one pass
//! into the model the text reader fills: heap dumps summed by class, ALLOC SITES as SITES tables,
//! CPU SAMPLES as CPU tables, stack traces with their frames, threads.
//!
//! Binary dumps record no object sizes, so shallow sizes are estimated
//! ([`crate::heap::estimate`]): instances from their class's fields (CLASS DUMP, over the class
//! and its super classes), arrays from their length.

use std::collections::{HashMap, HashSet};
use std::io::Read;

use crate::heap::{estimate, HeapHistogram, RootKind, ShallowSizes};
use crate::hprof_binary::{
    AllocSite, BasicType, ClassDump, HprofError, HprofReader, Item, Record, SubRecord,
};
use crate::hprof_text::{
    CpuEntry, CpuTable, CpuTableKind, Frame, FrameLine, SiteEntry, SiteRow, SiteTotals, SitesOrder,
    SitesTable, TextProfile, ThreadStart, Trace,
};
use crate::java_names::class_name_from_signature;

/// How often, in bytes read, [`read_profile`] reports.
const PROGRESS_STEP: u64 = 1 << 20;

/// ALLOC SITES flag: sites sorted by allocated bytes rather than live bytes.
pub const SITES_SORTED_BY_ALLOCATION: u16 = 0x2;
/// ALLOC SITES' flag: the allocations since the previous incremental record, not since the
/// start (HPROF's "incremental vs. complete").
pub const SITES_INCREMENTAL: u16 = 0x1;

/// A class name as an HPROF binary file writes it, in Java source form. HotSpot writes JVM
/// internal names (`java/lang/String`, `[I`, `[LKeep$Node;`), HPROF wrote source names
/// (`java.lang.String`, `int[]`); both come out as source names (`Keep$Node[]`, `int[]`).
pub fn binary_class_name(name: &str) -> String {
    if name.starts_with('[') {
        class_name_from_signature(name)
    } else {
        // Not through class_name_from_signature: a class may be called `I`.
        name.replace('/', ".")
    }
}

/// Reads an HPROF binary profile, calling `progress` with the bytes consumed every megabyte and
/// at the end. Heap dumps are summed by class as they are read; no object is kept. A file that
/// ends inside a record, or inside a segmented heap dump (no HEAP DUMP END), is an error at
/// the byte offset where it ends.
pub fn read_profile(
    input: impl Read,
    progress: &mut dyn FnMut(u64),
) -> Result<TextProfile, HprofError> {
    let mut reader = HprofReader::new(input)?;
    let id_size = reader.header().id_size;
    let mut state = State::default();
    state.profile.header = reader.header().format.clone();
    let mut reported = 0;
    while let Some(item) = reader.next_item() {
        state.item(item?, id_size);
        if reader.offset() - reported >= PROGRESS_STEP {
            reported = reader.offset();
            progress(reported);
        }
    }
    if state.dump.as_ref().is_some_and(|dump| dump.segmented) {
        return Err(HprofError::Malformed {
            offset: reader.offset(),
            message: "the file ends inside a heap dump (no HEAP DUMP END)".into(),
        });
    }
    state.close_dump();
    progress(reader.offset());
    Ok(state.finish())
}

/// A class's own instance fields, as its CLASS DUMP lists them.
struct ClassLayout {
    super_id: u64,
    primitive_bytes: u64,
    references: u64,
}

/// A heap dump being read: objects counted by class id, named and sized at the end (a CLASS
/// DUMP may come after instances of its class).
#[derive(Default)]
struct OpenDump {
    segmented: bool,
    /// Primitive arrays and roots, which need nothing resolved.
    histogram: HeapHistogram,
    /// Per class id: instances, and the field bytes of one of them (for a class never dumped).
    instances: HashMap<u64, (u64, u64)>,
    /// Per array class id: arrays and their estimated bytes.
    object_arrays: HashMap<u64, (u64, u64)>,
}

#[derive(Default)]
struct State {
    profile: TextProfile,
    strings: HashMap<u64, String>,
    /// LOAD CLASS: class id to name string id, class serial to class id.
    class_name_ids: HashMap<u64, u64>,
    class_ids: HashMap<u32, u64>,
    layouts: HashMap<u64, ClassLayout>,
    frames: HashMap<u64, Record>,
    traces: Vec<(u32, u32, Vec<u64>)>,
    threads: Vec<Record>,
    alloc_sites: Vec<Record>,
    cpu_samples: Vec<(u32, Vec<(u32, u32)>)>,
    dump: Option<OpenDump>,
    /// Finished dumps, resolved when the whole file is read.
    dumps: Vec<OpenDump>,
}

impl State {
    fn item(&mut self, item: Item, id_size: u32) {
        match item {
            Item::Record(record) => {
                // A HEAP DUMP record (not segmented) is a whole dump: the next record ends it.
                if self.dump.as_ref().is_some_and(|dump| !dump.segmented) {
                    self.close_dump();
                }
                self.record(record);
            }
            Item::HeapDumpStart { segment } => {
                if !(segment && self.dump.as_ref().is_some_and(|dump| dump.segmented)) {
                    self.close_dump();
                    self.dump = Some(OpenDump {
                        segmented: segment,
                        histogram: HeapHistogram::new(ShallowSizes::Estimated),
                        ..OpenDump::default()
                    });
                }
            }
            Item::HeapDumpEnd => self.close_dump(),
            Item::Sub(sub) => self.sub_record(sub, id_size),
        }
    }

    fn close_dump(&mut self) {
        if let Some(dump) = self.dump.take() {
            self.dumps.push(dump);
        }
    }

    fn record(&mut self, record: Record) {
        match record {
            Record::Utf8 { id, text } => {
                self.strings
                    .insert(id, String::from_utf8_lossy(&text).into_owned());
            }
            Record::LoadClass {
                class_serial,
                class_id,
                name_id,
                ..
            } => {
                self.class_name_ids.insert(class_id, name_id);
                self.class_ids.insert(class_serial, class_id);
            }
            Record::StackFrame { frame_id, .. } => {
                self.frames.insert(frame_id, record);
            }
            Record::StackTrace {
                stack_serial,
                thread_serial,
                frames,
            } => self.traces.push((stack_serial, thread_serial, frames)),
            Record::AllocSites { .. } => self.alloc_sites.push(record),
            Record::CpuSamples { total, traces } => self.cpu_samples.push((total, traces)),
            Record::StartThread { .. } => self.threads.push(record),
            Record::EndThread { thread_serial } => {
                self.profile.threads_ended.push(thread_serial);
            }
            Record::Unknown { tag, .. } => {
                self.profile
                    .skipped_sections
                    .push(format!("record tag 0x{tag:02X}"));
            }
            Record::UnloadClass { .. }
            | Record::HeapSummary { .. }
            | Record::ControlSettings { .. } => {}
        }
    }

    fn sub_record(&mut self, sub: SubRecord, id_size: u32) {
        let Some(dump) = self.dump.as_mut() else {
            // The reader yields sub-records only inside a heap dump record.
            return;
        };
        let root = |kind| Some(kind);
        let kind = match &sub {
            SubRecord::RootUnknown { .. } => root(RootKind::Unknown),
            SubRecord::RootJniGlobal { .. } => root(RootKind::JniGlobal),
            SubRecord::RootJniLocal { .. } => root(RootKind::JniLocal),
            SubRecord::RootJavaFrame { .. } => root(RootKind::JavaFrame),
            SubRecord::RootNativeStack { .. } => root(RootKind::NativeStack),
            SubRecord::RootStickyClass { .. } => root(RootKind::SystemClass),
            SubRecord::RootThreadBlock { .. } => root(RootKind::ThreadBlock),
            SubRecord::RootMonitorUsed { .. } => root(RootKind::MonitorUsed),
            SubRecord::RootThreadObject { .. } => root(RootKind::ThreadObject),
            _ => None,
        };
        if let Some(kind) = kind {
            dump.histogram.add_root(kind);
            return;
        }
        match sub {
            SubRecord::ClassDump(class) => {
                dump.histogram.class_dumps += 1;
                let ClassDump {
                    class_id,
                    super_id,
                    instance_fields,
                    ..
                } = *class;
                let mut layout = ClassLayout {
                    super_id,
                    primitive_bytes: 0,
                    references: 0,
                };
                for (_, field_type) in instance_fields {
                    match field_type {
                        BasicType::Object => layout.references += 1,
                        primitive => layout.primitive_bytes += u64::from(primitive.size(id_size)),
                    }
                }
                self.layouts.insert(class_id, layout);
            }
            SubRecord::InstanceDump {
                class_id, values, ..
            } => {
                let entry = dump
                    .instances
                    .entry(class_id)
                    .or_insert((0, values.len() as u64));
                entry.0 += 1;
            }
            SubRecord::ObjectArrayDump {
                class_id, elements, ..
            } => {
                let entry = dump.object_arrays.entry(class_id).or_default();
                entry.0 += 1;
                entry.1 += estimate::array(elements.len() as u64, estimate::REFERENCE);
            }
            SubRecord::PrimitiveArrayDump {
                element_type,
                length,
                ..
            } => {
                let element_bytes = match element_type {
                    BasicType::Object => estimate::REFERENCE,
                    primitive => u64::from(primitive.size(id_size)),
                };
                dump.histogram.add_object(
                    element_type.array_name(),
                    estimate::array(u64::from(length), element_bytes),
                );
            }
            _ => {}
        }
    }

    fn string(&self, id: u64) -> Option<&str> {
        self.strings.get(&id).map(String::as_str)
    }

    fn class_name(&self, class_id: u64) -> String {
        self.class_name_ids
            .get(&class_id)
            .and_then(|name_id| self.string(*name_id))
            .map(binary_class_name)
            .unwrap_or_else(|| format!("<class {class_id:x}>"))
    }

    fn class_name_by_serial(&self, serial: u32) -> Option<String> {
        self.class_ids.get(&serial).map(|id| self.class_name(*id))
    }

    /// The estimated size of an instance, from the fields of its class and super classes; for
    /// a class without CLASS DUMP, from the bytes of one instance's fields.
    fn instance_size(&self, class_id: u64, field_bytes: u64) -> u64 {
        let Some(mut layout) = self.layouts.get(&class_id) else {
            return estimate::instance(field_bytes, 0);
        };
        let (mut primitive_bytes, mut references) = (0u64, 0u64);
        // A corrupt file could make the super chain loop.
        let mut seen = HashSet::new();
        loop {
            primitive_bytes += layout.primitive_bytes;
            references += layout.references;
            if !seen.insert(layout.super_id) {
                break;
            }
            match self.layouts.get(&layout.super_id) {
                Some(next) => layout = next,
                None => break,
            }
        }
        estimate::instance(primitive_bytes, references)
    }

    fn frame(&self, id: u64) -> Frame {
        let Some(Record::StackFrame {
            method_name_id,
            source_id,
            class_serial,
            line,
            ..
        }) = self.frames.get(&id)
        else {
            return Frame {
                class_name: "<unknown frame>".into(),
                method_name: format!("{id:x}"),
                source_file: None,
                line: FrameLine::Unknown,
            };
        };
        let source_file = self.string(*source_id);
        match source_file {
            Some(crate::hprof_text::NATIVE_CODE_SOURCE) => {
                return Frame::native_code(
                    &self
                        .class_name_by_serial(*class_serial)
                        .unwrap_or_else(|| "<unknown library>".into()),
                    self.string(*method_name_id).unwrap_or("<unknown symbol>"),
                )
            }
            Some(crate::hprof_text::FAILED_WALK_SOURCE) => {
                return Frame::failed_walk(self.string(*method_name_id).unwrap_or("[failed walk]"))
            }
            Some(crate::hprof_text::VM_THREAD_SOURCE) => {
                return Frame::vm_thread(self.string(*method_name_id).unwrap_or("[vm thread]"))
            }
            Some(crate::hprof_text::VIRTUAL_THREAD_SOURCE) => return Frame::virtual_thread(),
            Some(crate::hprof_text::LABELS_SOURCE) => {
                return Frame::labels(self.string(*method_name_id).unwrap_or(""))
            }
            _ => {}
        }
        Frame {
            class_name: self
                .class_name_by_serial(*class_serial)
                .unwrap_or_else(|| "<unknown class>".into()),
            method_name: self
                .string(*method_name_id)
                .unwrap_or("<unknown method>")
                .to_string(),
            source_file: source_file.map(str::to_string),
            line: match *line {
                -2 => FrameLine::Compiled,
                -3 => FrameLine::Native,
                line if line >= 0 => FrameLine::Line(line as u32),
                _ => FrameLine::Unknown,
            },
        }
    }

    fn sites_table(&self, record: &Record) -> Option<SitesTable> {
        let Record::AllocSites {
            flags,
            total_live_bytes,
            total_live_instances,
            total_allocated_bytes,
            total_allocated_instances,
            sites,
            ..
        } = record
        else {
            return None;
        };
        let mut accum = 0.0;
        let rows = sites
            .iter()
            .enumerate()
            .map(|(index, site)| {
                let AllocSite {
                    array_type,
                    class_serial,
                    stack_serial,
                    ..
                } = *site;
                let ratio = if *total_live_bytes == 0 {
                    0.0
                } else {
                    f64::from(site.live_bytes) / f64::from(*total_live_bytes)
                };
                accum += ratio;
                let class_name = self.class_name_by_serial(class_serial).unwrap_or_else(|| {
                    match BasicType::from_code(array_type) {
                        Some(element) if element != BasicType::Object => {
                            element.array_name().to_string()
                        }
                        _ => format!("<class serial {class_serial}>"),
                    }
                });
                SiteRow {
                    rank: index as u32 + 1,
                    self_percent: ratio * 100.0,
                    accum_percent: accum * 100.0,
                    site: SiteEntry {
                        trace: stack_serial,
                        class_name,
                        live_bytes: site.live_bytes.into(),
                        live_objects: site.live_instances.into(),
                        allocated_bytes: site.allocated_bytes.into(),
                        allocated_objects: site.allocated_instances.into(),
                    },
                }
            })
            .collect();
        Some(SitesTable {
            date: String::new(),
            ordered_by: if flags & SITES_SORTED_BY_ALLOCATION != 0 {
                SitesOrder::AllocatedBytes
            } else {
                SitesOrder::LiveBytes
            },
            incremental: flags & SITES_INCREMENTAL != 0,
            totals: Some(SiteTotals {
                live_bytes: (*total_live_bytes).into(),
                live_objects: (*total_live_instances).into(),
                allocated_bytes: *total_allocated_bytes,
                allocated_objects: *total_allocated_instances,
            }),
            rows,
        })
    }

    fn finish(mut self) -> TextProfile {
        let mut profile = std::mem::take(&mut self.profile);
        for (serial, thread, frames) in &self.traces {
            let trace = Trace {
                serial: *serial,
                thread: (*thread != 0).then_some(*thread),
                frames: frames.iter().map(|id| self.frame(*id)).collect(),
            };
            profile.traces.insert(*serial, trace);
        }
        for record in &self.threads {
            if let Record::StartThread {
                thread_serial,
                object_id,
                name_id,
                group_name_id,
                ..
            } = record
            {
                profile.threads_started.push(ThreadStart {
                    object_id: *object_id,
                    serial: *thread_serial,
                    name: self.string(*name_id).unwrap_or_default().to_string(),
                    group: self.string(*group_name_id).unwrap_or_default().to_string(),
                });
            }
        }
        profile.sites = self
            .alloc_sites
            .iter()
            .filter_map(|record| self.sites_table(record))
            .collect();
        for (total, traces) in &self.cpu_samples {
            let entries = traces
                .iter()
                .map(|&(count, serial)| CpuEntry {
                    trace: serial,
                    cost: count.into(),
                    hits: count.into(),
                    state: None,
                    method: profile
                        .traces
                        .get(&serial)
                        .and_then(|trace| trace.frames.first())
                        .map(Frame::qualified_method),
                })
                .collect();
            profile.cpu_tables.push(CpuTable::rank_by_cost(
                CpuTableKind::Samples,
                String::new(),
                entries,
                0.0,
                (*total).into(),
            ));
        }
        for dump in std::mem::take(&mut self.dumps) {
            let mut histogram = dump.histogram;
            for (class_id, (instances, field_bytes)) in dump.instances {
                let size = self.instance_size(class_id, field_bytes);
                histogram.add_objects(
                    &self.class_name(class_id),
                    instances,
                    instances.saturating_mul(size),
                );
            }
            for (class_id, (arrays, bytes)) in dump.object_arrays {
                histogram.add_objects(&self.class_name(class_id), arrays, bytes);
            }
            profile.heap_dumps.push(histogram);
        }
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hprof_binary::{HprofWriter, Value};

    fn utf8(id: u64, text: &str) -> Record {
        Record::Utf8 {
            id,
            text: text.as_bytes().to_vec(),
        }
    }

    fn class_dump(class_id: u64, super_id: u64, fields: &[BasicType]) -> SubRecord {
        SubRecord::ClassDump(Box::new(ClassDump {
            class_id,
            stack_serial: 0,
            super_id,
            loader_id: 0,
            signers_id: 0,
            protection_domain_id: 0,
            instance_size: 0,
            constant_pool: Vec::new(),
            static_fields: vec![(
                1,
                Value {
                    basic_type: BasicType::Int,
                    bytes: vec![0; 4],
                },
            )],
            instance_fields: fields.iter().map(|t| (1, *t)).collect(),
        }))
    }

    const OBJECT: u64 = 0x10;
    const BASE: u64 = 0x20;
    const LEAF: u64 = 0x30;
    const LEAF_ARRAY: u64 = 0x40;

    /// A profile with every record the reader models; heap dump segments of at most 64 bytes.
    fn sample_file() -> Vec<u8> {
        let mut writer = HprofWriter::new(Vec::new(), 8, 1_700_000_000_000)
            .unwrap()
            .with_segment_limit(64);
        let names = [
            (1, "java/lang/Object"),
            (2, "Base"),
            (3, "Leaf"),
            (4, "[LLeaf;"),
            (5, "run"),
            (6, "()V"),
            (7, "Leaf.java"),
            (8, "main"),
            (9, "system"),
        ];
        for (id, name) in names {
            writer.record(&utf8(id, name)).unwrap();
        }
        for (serial, class_id, name_id) in [
            (1, OBJECT, 1),
            (2, BASE, 2),
            (3, LEAF, 3),
            (4, LEAF_ARRAY, 4),
        ] {
            writer
                .record(&Record::LoadClass {
                    class_serial: serial,
                    class_id,
                    stack_serial: 0,
                    name_id,
                })
                .unwrap();
        }
        writer
            .record(&Record::StackFrame {
                frame_id: 0x77,
                method_name_id: 5,
                signature_id: 6,
                source_id: 7,
                class_serial: 3,
                line: 42,
            })
            .unwrap();
        writer
            .record(&Record::StackTrace {
                stack_serial: 300001,
                thread_serial: 200001,
                frames: vec![0x77],
            })
            .unwrap();
        writer
            .record(&Record::StartThread {
                thread_serial: 200001,
                object_id: 0x500,
                stack_serial: 300001,
                name_id: 8,
                group_name_id: 9,
                parent_group_name_id: 0,
            })
            .unwrap();
        writer
            .record(&Record::AllocSites {
                flags: 0,
                cutoff: 0.0,
                total_live_bytes: 200,
                total_live_instances: 5,
                total_allocated_bytes: 1000,
                total_allocated_instances: 50,
                sites: vec![
                    AllocSite {
                        array_type: 0,
                        class_serial: 3,
                        stack_serial: 300001,
                        live_bytes: 150,
                        live_instances: 3,
                        allocated_bytes: 600,
                        allocated_instances: 30,
                    },
                    AllocSite {
                        array_type: BasicType::Char as u8,
                        class_serial: 99,
                        stack_serial: 300001,
                        live_bytes: 50,
                        live_instances: 2,
                        allocated_bytes: 400,
                        allocated_instances: 20,
                    },
                ],
            })
            .unwrap();
        writer
            .record(&Record::CpuSamples {
                total: 10,
                traces: vec![(7, 300001)],
            })
            .unwrap();
        let instance = |id: u64, class_id: u64, field_bytes: usize| SubRecord::InstanceDump {
            id,
            stack_serial: 0,
            class_id,
            values: vec![0; field_bytes],
        };
        // An instance before its class's CLASS DUMP: sizes are resolved at the end.
        writer.sub_record(&instance(0x1001, LEAF, 20)).unwrap();
        writer
            .sub_record(&SubRecord::RootJavaFrame {
                id: 0x1001,
                thread_serial: 200001,
                frame: 0,
            })
            .unwrap();
        writer
            .sub_record(&SubRecord::RootJavaFrame {
                id: 0x1002,
                thread_serial: 200001,
                frame: 1,
            })
            .unwrap();
        writer
            .sub_record(&SubRecord::RootStickyClass { id: OBJECT })
            .unwrap();
        writer.sub_record(&class_dump(OBJECT, 0, &[])).unwrap();
        writer
            .sub_record(&class_dump(
                BASE,
                OBJECT,
                &[BasicType::Int, BasicType::Object],
            ))
            .unwrap();
        writer
            .sub_record(&class_dump(LEAF, BASE, &[BasicType::Long]))
            .unwrap();
        writer.sub_record(&instance(0x1002, LEAF, 20)).unwrap();
        writer.sub_record(&instance(0x1003, LEAF, 20)).unwrap();
        writer.sub_record(&instance(0x1004, BASE, 12)).unwrap();
        writer.sub_record(&instance(0x1005, 0x99, 6)).unwrap();
        writer
            .sub_record(&SubRecord::ObjectArrayDump {
                id: 0x1006,
                stack_serial: 0,
                class_id: LEAF_ARRAY,
                elements: vec![0x1001, 0x1002, 0x1003, 0, 0],
            })
            .unwrap();
        for (id, element_type, length) in [
            (0x1007, BasicType::Int, 10),
            (0x1008, BasicType::Char, 3),
            (0x1009, BasicType::Char, 3),
        ] {
            let bytes = vec![0; (length * element_type.size(8)) as usize];
            writer
                .sub_record(&SubRecord::PrimitiveArrayDump {
                    id,
                    stack_serial: 0,
                    element_type,
                    length,
                    bytes,
                })
                .unwrap();
        }
        writer.end_heap_dump().unwrap();
        writer.finish().unwrap()
    }

    fn count(instances: u64, bytes: u64) -> Option<crate::heap::ClassCount> {
        Some(crate::heap::ClassCount { instances, bytes })
    }

    #[test]
    fn a_binary_profile_reads_into_histogram_sites_samples_and_traces() {
        let file = sample_file();
        let mut reports = Vec::new();
        let profile = read_profile(file.as_slice(), &mut |bytes| reports.push(bytes)).unwrap();
        assert_eq!(reports.last(), Some(&(file.len() as u64)));
        assert_eq!(profile.heap_dumps.len(), 1, "segments make one dump");
        let heap = &profile.heap_dumps[0];
        assert_eq!(heap.sizes, ShallowSizes::Estimated);
        // Leaf: 12 header + int 4 + reference 4 (Base) + long 8 = 28, aligned to 32.
        assert_eq!(heap.get("Leaf"), count(3, 96));
        assert_eq!(heap.get("Base"), count(1, 24));
        // No CLASS DUMP: 12 + 6 bytes of fields, aligned.
        assert_eq!(heap.get("<class 99>"), count(1, 24));
        assert_eq!(heap.get("Leaf[]"), count(1, 40));
        assert_eq!(heap.get("int[]"), count(1, 56));
        assert_eq!(heap.get("char[]"), count(2, 48));
        assert_eq!(
            heap.total(),
            crate::heap::ClassCount {
                instances: 9,
                bytes: 288
            }
        );
        assert_eq!(heap.class_dumps, 3);
        assert_eq!(heap.roots()[&RootKind::JavaFrame], 2);
        assert_eq!(heap.roots()[&RootKind::SystemClass], 1);

        let trace = &profile.traces[&300001];
        assert_eq!(trace.thread, Some(200001));
        assert_eq!(trace.frames[0].to_string(), "Leaf.run(Leaf.java:42)");
        let sites = &profile.sites[0];
        assert_eq!(sites.totals.unwrap().live_bytes, 200);
        assert_eq!(sites.rows[0].site.class_name, "Leaf");
        assert_eq!(sites.rows[1].site.class_name, "char[]", "by its array type");
        assert_eq!(
            (sites.rows[0].self_percent, sites.rows[1].accum_percent),
            (75.0, 100.0)
        );
        let cpu = &profile.cpu_tables[0];
        assert_eq!((cpu.total, cpu.rows[0].count), (10, 7));
        assert_eq!(cpu.rows[0].method.as_deref(), Some("Leaf.run"));
        assert_eq!(profile.threads_started[0].name, "main");
        assert_eq!(profile.header, "JAVA PROFILE 1.0.2");
    }

    #[test]
    fn a_cut_file_is_an_error_at_its_end_never_a_panic() {
        let file = sample_file();
        // HEAP DUMP END is the last record: 9 bytes.
        let without_end = &file[..file.len() - 9];
        let error = read_profile(without_end, &mut |_| {}).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "byte {}: the file ends inside a heap dump (no HEAP DUMP END)",
                without_end.len()
            )
        );
        // Where the first heap dump segment's record begins (its header is 9 bytes).
        let mut reader = HprofReader::new(file.as_slice()).unwrap();
        let mut dump_start = 0;
        while let Some(item) = reader.next_item() {
            if let Item::HeapDumpStart { .. } = item.unwrap() {
                dump_start = reader.offset() as usize - 9;
                break;
            }
        }
        assert!(dump_start > 0);
        for cut in 0..file.len() {
            match read_profile(&file[..cut], &mut |_| {}) {
                // Cut between records before the dump: nothing says more should follow.
                Ok(_) => assert!(cut <= dump_start, "a cut at {cut} read as whole"),
                Err(HprofError::Malformed { offset, .. }) => {
                    assert!(offset <= cut as u64, "offset {offset} past the cut {cut}")
                }
                Err(error) => panic!("{error}"),
            }
        }
    }

    #[test]
    fn binary_names_become_source_names() {
        assert_eq!(binary_class_name("java/lang/String"), "java.lang.String");
        assert_eq!(binary_class_name("[LKeep$Node;"), "Keep$Node[]");
        assert_eq!(binary_class_name("[[I"), "int[][]");
        assert_eq!(binary_class_name("I"), "I");
        assert_eq!(
            binary_class_name("java.lang.String[]"),
            "java.lang.String[]"
        );
    }
}
