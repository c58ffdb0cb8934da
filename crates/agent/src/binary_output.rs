//! The agent's HPROF binary file (`format=b`, "JAVA PROFILE 1.0.2"): the names, classes, stack
//! frames and traces each record refers to are written once, before their first use.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::net::{Sink, SINK_BUFFER};

use openprof_format::hprof_binary::{
    AllocSite, BasicType, ClassDump, HprofWriter, Record, SubRecord, Value, SITES_INCREMENTAL,
    SITES_SORTED_BY_ALLOCATION,
};
use openprof_format::hprof_text::{
    CpuTable, FrameLine, SiteRow, SitesTable, Trace, FAILED_WALK_SOURCE, LABELS_SOURCE,
    NATIVE_CODE_SOURCE, VIRTUAL_THREAD_SOURCE, VM_THREAD_SOURCE,
};

use crate::heap_walk::{ClassIds, DumpClass, DumpSummary, HeapSink, Root, StaticValue};
use crate::threads::ThreadEvent;

/// CONTROL SETTINGS flags.
const ALLOC_TRACES_ON: u32 = 0x1;
const CPU_SAMPLING_ON: u32 = 0x2;
/// ALLOC SITES flags: a GC was forced before the sites were taken.
const SITES_AFTER_GC: u16 = 0x4;

pub struct BinaryOutput {
    writer: HprofWriter<BufWriter<Sink>>,
    path: PathBuf,
    strings: HashMap<String, u64>,
    /// Class name → (serial, id) of its LOAD CLASS records, in order.
    classes: HashMap<String, Vec<(u32, u64)>>,
    last_class_serial: u32,
    frames: HashMap<(String, String, Option<String>, FrameLine), u64>,
    /// The ids the next UTF8 and STACK FRAME records get: never one given before, also after
    /// the tables above were forgotten.
    next_string_id: u64,
    next_frame_id: u64,
    written_traces: HashSet<u32>,
    /// The CONTROL SETTINGS record's flags and depth, written again where the names start over.
    settings: (u32, u16),
    /// Class ids handed out in the heap dump being written.
    claimed: HashSet<u64>,
    /// Whether the output is a file (not the collector's connection).
    to_file: bool,
    /// Heap dumps of HotSpot's own dumper in the output so far: the n-th one's class serial
    /// numbers are moved up by n × 2^24, so that they meet neither ours nor an earlier one's.
    hotspot_dumps: u32,
}

/// How far each HotSpot dump's class serials are moved up (see `hotspot_dumps`).
const HOTSPOT_SERIALS: u32 = 1 << 24;

impl BinaryOutput {
    /// Writes the header and CONTROL SETTINGS to a file created as `crate::output` decides.
    pub fn new(
        file: Sink,
        path: PathBuf,
        alloc_traces: bool,
        cpu_sampling: bool,
        depth: u32,
    ) -> io::Result<Self> {
        let to_file = matches!(file, Sink::File(_));
        // To a collector a heap dump segment goes out as soon as it is about a frame: it does
        // not wait in memory, and the collector stores while the walk goes on.
        let segment_limit = match &file {
            Sink::Net(net, _) => Some(net.frame_limit()),
            _ => None,
        };
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        let mut writer = HprofWriter::new(BufWriter::with_capacity(SINK_BUFFER, file), 8, millis)?;
        if let Some(limit) = segment_limit {
            writer = writer.with_segment_limit(limit);
        }
        let mut flags = 0;
        if alloc_traces {
            flags |= ALLOC_TRACES_ON;
        }
        if cpu_sampling {
            flags |= CPU_SAMPLING_ON;
        }
        let settings = (flags, depth.min(u16::MAX as u32) as u16);
        writer.record(&Record::ControlSettings {
            flags: settings.0,
            depth: settings.1,
        })?;
        Ok(BinaryOutput {
            writer,
            path,
            strings: HashMap::new(),
            classes: HashMap::new(),
            last_class_serial: 0,
            frames: HashMap::new(),
            next_string_id: 1,
            next_frame_id: 1,
            written_traces: HashSet::new(),
            settings,
            claimed: HashSet::new(),
            to_file,
            hotspot_dumps: 0,
        })
    }

    /// A heap dump by HotSpot's own dumper, into a file output (the caller walks the heap
    /// itself where this fails: a collector's connection, a JVM without the management
    /// modules, more than 255 dumps). HotSpot writes into a directory only this user can
    /// enter; its file is made this user's only. The first time, that file becomes the output
    /// (its class serials moved up in place, what the output held so far appended): no copy
    /// of the heap. Later, its records are copied in. Returns the bytes it wrote.
    pub fn hotspot_heap_dump(
        &mut self,
        jni: crate::jni::Jni,
        dumper: &crate::hotspot_dump::Dumper,
    ) -> Result<u64, String> {
        if !self.to_file {
            return Err("the output is a collector's connection".into());
        }
        if self.hotspot_dumps >= 255 {
            return Err("the output holds 255 of the JVM's heap dumps already".into());
        }
        let failed = |error: io::Error| format!("the JVM's heap dump: {error}");
        let parent = self
            .path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = tempfile::Builder::new()
            .prefix(".openprof-heap-")
            .tempdir_in(parent)
            .map_err(failed)?;
        let dump = dir.path().join("heap.hprof");
        dumper.dump_to(jni, &dump)?;
        std::fs::set_permissions(&dump, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(failed)?;
        let base = (self.hotspot_dumps + 1) * HOTSPOT_SERIALS;
        let bytes = std::fs::metadata(&dump).map_err(failed)?.len();
        if self.hotspot_dumps == 0 {
            crate::hotspot_dump::move_serials_in_place(&dump, base).map_err(failed)?;
            // Close the output, put what it holds after the dump, and make that the output.
            let closed = std::mem::replace(
                &mut self.writer,
                HprofWriter::continuing(BufWriter::new(Sink::Discard), 8),
            );
            closed.finish().map_err(failed)?;
            {
                let appended = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&dump)
                    .map_err(failed)?;
                let mut appended = BufWriter::with_capacity(SINK_BUFFER, Sink::File(appended));
                crate::hotspot_dump::splice(&self.path, 0, &mut appended).map_err(failed)?;
                appended.flush().map_err(failed)?;
            }
            // Not renamed over the old output: ext4 then starts writing the whole dump back
            // before the rename returns (its safeguard for files replaced by rename), 0.2 s
            // for 700 MB. Its content is in `dump` already.
            std::fs::remove_file(&self.path).map_err(failed)?;
            std::fs::rename(&dump, &self.path).map_err(failed)?;
            let reopened = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(failed)?;
            self.writer = HprofWriter::continuing(
                BufWriter::with_capacity(SINK_BUFFER, Sink::File(reopened)),
                8,
            );
        } else {
            let out = self.writer.raw_records().map_err(failed)?;
            crate::hotspot_dump::splice(&dump, base, out).map_err(failed)?;
            self.writer.flush().map_err(failed)?;
        }
        self.hotspot_dumps += 1;
        Ok(bytes)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The id of a UTF8 string, writing its record the first time.
    fn string(&mut self, text: &str) -> io::Result<u64> {
        if let Some(id) = self.strings.get(text) {
            return Ok(*id);
        }
        let id = self.next_string_id;
        self.next_string_id += 1;
        self.writer.record(&Record::Utf8 {
            id,
            text: text.as_bytes().to_vec(),
        })?;
        self.strings.insert(text.to_string(), id);
        Ok(id)
    }

    /// A new LOAD CLASS record for `name`: (serial, id). Class ids are small numbers, object
    /// ids start above them (see heap_dump).
    fn load_class(&mut self, name: &str) -> io::Result<(u32, u64)> {
        let name_id = self.string(name)?;
        self.last_class_serial += 1;
        let serial = self.last_class_serial;
        let id = u64::from(serial);
        self.writer.record(&Record::LoadClass {
            class_serial: serial,
            class_id: id,
            stack_serial: 0,
            name_id,
        })?;
        self.classes
            .entry(name.to_string())
            .or_default()
            .push((serial, id));
        Ok((serial, id))
    }

    /// The serial of the (first) class named `name`.
    fn class_serial(&mut self, name: &str) -> io::Result<u32> {
        match self.classes.get(name).and_then(|loads| loads.first()) {
            Some((serial, _)) => Ok(*serial),
            None => Ok(self.load_class(name)?.0),
        }
    }

    pub fn thread_events(&mut self, events: &[ThreadEvent]) -> io::Result<()> {
        for event in events {
            match event {
                ThreadEvent::Start(start) => {
                    let name_id = self.string(&start.name)?;
                    let group_name_id = self.string(&start.group)?;
                    self.writer.record(&Record::StartThread {
                        thread_serial: start.serial,
                        object_id: start.object_id,
                        stack_serial: 0,
                        name_id,
                        group_name_id,
                        parent_group_name_id: 0,
                    })?;
                }
                ThreadEvent::End(serial) => self.writer.record(&Record::EndThread {
                    thread_serial: *serial,
                })?,
            }
        }
        Ok(())
    }

    /// Forgets every name, class, frame and trace written so far (the profile forgot the
    /// stacks that needed them), and says so with a second CONTROL SETTINGS record: no record
    /// after it refers to one before it, so a reader may forget them too. What is needed again
    /// is written again, under new ids.
    pub fn forget_names(&mut self) -> io::Result<()> {
        self.strings = HashMap::new();
        self.classes = HashMap::new();
        self.frames = HashMap::new();
        self.written_traces = HashSet::new();
        self.writer.record(&Record::ControlSettings {
            flags: self.settings.0,
            depth: self.settings.1,
        })
    }

    /// STACK FRAME and STACK TRACE records for traces not written before.
    pub fn traces(&mut self, traces: &[Trace]) -> io::Result<()> {
        for trace in traces {
            if !self.written_traces.insert(trace.serial) {
                continue;
            }
            let mut frame_ids = Vec::with_capacity(trace.frames.len());
            for frame in &trace.frames {
                let key = (
                    frame.class_name.clone(),
                    frame.method_name.clone(),
                    frame.source_file.clone(),
                    frame.line.clone(),
                );
                if let Some(id) = self.frames.get(&key) {
                    frame_ids.push(*id);
                    continue;
                }
                let frame_id = self.next_frame_id;
                self.next_frame_id += 1;
                let method_name_id = self.string(&frame.method_name)?;
                let signature_id = self.string("")?;
                // Native code is written as a native method of a class named after its
                // library, a failed walk's mark as a method of a class of its own: any HPROF
                // reader shows them, and the source file tells ours what they are.
                let (class_name, source) = match frame.line {
                    FrameLine::NativeCode => (frame.class_name.as_str(), NATIVE_CODE_SOURCE),
                    FrameLine::FailedWalk => (FAILED_WALK_SOURCE, FAILED_WALK_SOURCE),
                    FrameLine::VmThread => (VM_THREAD_SOURCE, VM_THREAD_SOURCE),
                    FrameLine::VirtualThread => (VIRTUAL_THREAD_SOURCE, VIRTUAL_THREAD_SOURCE),
                    FrameLine::Labels => (LABELS_SOURCE, LABELS_SOURCE),
                    _ => (
                        frame.class_name.as_str(),
                        frame.source_file.as_deref().unwrap_or("<Unknown Source>"),
                    ),
                };
                let source_id = self.string(source)?;
                let class_serial = self.class_serial(class_name)?;
                let line = match frame.line {
                    FrameLine::Line(line) => line as i32,
                    FrameLine::Unknown
                    | FrameLine::FailedWalk
                    | FrameLine::VmThread
                    | FrameLine::VirtualThread
                    | FrameLine::Labels => -1,
                    FrameLine::Compiled => -2,
                    FrameLine::Native | FrameLine::NativeCode => -3,
                };
                self.writer.record(&Record::StackFrame {
                    frame_id,
                    method_name_id,
                    signature_id,
                    source_id,
                    class_serial,
                    line,
                })?;
                self.frames.insert(key, frame_id);
                frame_ids.push(frame_id);
            }
            self.writer.record(&Record::StackTrace {
                stack_serial: trace.serial,
                thread_serial: trace.thread.unwrap_or(0),
                frames: frame_ids,
            })?;
        }
        Ok(())
    }

    /// A CPU SAMPLES record: (samples, trace) for each trace of the table.
    pub fn cpu_samples(&mut self, traces: &[Trace], table: &CpuTable) -> io::Result<()> {
        self.traces(traces)?;
        self.writer.record(&Record::CpuSamples {
            total: table.total.min(u32::MAX as u64) as u32,
            traces: table
                .rows
                .iter()
                .map(|row| (row.count.min(u32::MAX as u64) as u32, row.trace))
                .collect(),
        })?;
        self.writer.flush()
    }

    /// HEAP SUMMARY and ALLOC SITES: the sites of a table ranked with `cutoff`.
    pub fn alloc_sites(
        &mut self,
        traces: &[Trace],
        table: &SitesTable,
        cutoff: f64,
    ) -> io::Result<()> {
        self.traces(traces)?;
        let totals = table.totals.unwrap_or_default();
        let mut records = Vec::with_capacity(table.rows.len());
        for SiteRow { site, .. } in &table.rows {
            let array_type = array_type_of(&site.class_name);
            let class_serial = self.class_serial(&site.class_name)?;
            let pieces = if table.incremental {
                pieces32(site.allocated_bytes, site.allocated_objects)
            } else {
                vec![(
                    clamp32(site.allocated_bytes),
                    clamp32(site.allocated_objects),
                )]
            };
            for (index, (allocated_bytes, allocated_instances)) in pieces.into_iter().enumerate() {
                let live = index == 0;
                records.push(AllocSite {
                    array_type,
                    class_serial,
                    stack_serial: site.trace,
                    live_bytes: if live { clamp32(site.live_bytes) } else { 0 },
                    live_instances: if live { clamp32(site.live_objects) } else { 0 },
                    allocated_bytes,
                    allocated_instances,
                });
            }
        }
        self.writer.record(&Record::HeapSummary {
            live_bytes: clamp32(totals.live_bytes),
            live_instances: clamp32(totals.live_objects),
            allocated_bytes: totals.allocated_bytes,
            allocated_instances: totals.allocated_objects,
        })?;
        let flags = if table.incremental {
            SITES_INCREMENTAL | SITES_SORTED_BY_ALLOCATION
        } else {
            SITES_AFTER_GC
        };
        self.writer.record(&Record::AllocSites {
            flags,
            cutoff: cutoff as f32,
            total_live_bytes: clamp32(totals.live_bytes),
            total_live_instances: clamp32(totals.live_objects),
            total_allocated_bytes: totals.allocated_bytes,
            total_allocated_instances: totals.allocated_objects,
            sites: records,
        })?;
        self.writer.flush()
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// The heap dump `dump` writes through this output's [`HeapSink`], sent whole to a
    /// collector (see `Sink::begin_whole`). A dump that stopped half-way is closed where it
    /// stopped (its segments are whole records), so that what follows it reads.
    pub fn with_heap_sink<R>(
        &mut self,
        dump: impl FnOnce(&mut dyn HeapSink) -> R,
    ) -> io::Result<R> {
        self.sink().begin_whole();
        let result = dump(self);
        self.claimed.clear();
        let closed = self
            .writer
            .end_heap_dump()
            .and_then(|()| self.writer.flush());
        match self.sink().end_whole() {
            Some(why) => Err(crate::net::abandoned_dump(why)),
            None => closed.map(|()| result),
        }
    }

    fn sink(&mut self) -> &mut Sink {
        self.writer.get_mut().get_mut()
    }

    /// Stops a heap dump whose collector has been given up on (the sink takes what comes
    /// meanwhile, counted as lost).
    fn still_sending(&self) -> io::Result<()> {
        match self.writer.get_ref().get_ref().abandoned() {
            Some(why) => Err(io::Error::other(why.to_string())),
            None => Ok(()),
        }
    }
}

fn clamp32(value: u64) -> u32 {
    value.min(u32::MAX as u64) as u32
}

/// A window's allocations at one site as ALLOC SITES entries of at most 4 GiB and 2^32 objects
/// each (the record's fields are 32 bits; a hot site allocates more than that in seconds):
/// readers that sum a window's entries by site, as openprof's do, get the whole figure.
fn pieces32(bytes: u64, objects: u64) -> Vec<(u32, u32)> {
    let most = u64::from(u32::MAX);
    let count = bytes.div_ceil(most).max(objects.div_ceil(most)).max(1);
    (0..count)
        .map(|index| {
            // The remainder goes one by one to the first pieces, so none exceeds 32 bits.
            let share = |total: u64| (total / count + u64::from(index < total % count)) as u32;
            (share(bytes), share(objects))
        })
        .collect()
}

/// ALLOC SITES' array indicator: 0 for objects, else the basic type of a one-dimensional
/// array's elements.
fn array_type_of(class_name: &str) -> u8 {
    const PRIMITIVES: [BasicType; 8] = [
        BasicType::Boolean,
        BasicType::Char,
        BasicType::Float,
        BasicType::Double,
        BasicType::Byte,
        BasicType::Short,
        BasicType::Int,
        BasicType::Long,
    ];
    if !class_name.ends_with("[]") {
        return 0;
    }
    PRIMITIVES
        .into_iter()
        .find(|basic_type| basic_type.array_name() == class_name)
        .unwrap_or(BasicType::Object) as u8
}

impl HeapSink for BinaryOutput {
    fn class_id(&mut self, name: &str) -> u64 {
        let free = self.classes.get(name).and_then(|loads| {
            loads
                .iter()
                .map(|(_, id)| *id)
                .find(|id| !self.claimed.contains(id))
        });
        let id = match free {
            Some(id) => id,
            // An error here shows again, and is reported, when the dump writes its records.
            None => self.load_class(name).map_or(0, |(_, id)| id),
        };
        self.claimed.insert(id);
        id
    }

    fn begin(&mut self, classes: &[DumpClass]) -> io::Result<()> {
        for class in classes {
            for field in class.instance_fields.iter().chain(&class.static_fields) {
                self.string(&field.name)?;
            }
        }
        Ok(())
    }

    fn root(&mut self, root: Root) -> io::Result<()> {
        let record = match root {
            Root::JniGlobal { id } => SubRecord::RootJniGlobal {
                id,
                global_ref_id: 0,
            },
            Root::JniLocal { id, thread, depth } => SubRecord::RootJniLocal {
                id,
                thread_serial: thread,
                frame: depth,
            },
            Root::JavaFrame { id, thread, depth } => SubRecord::RootJavaFrame {
                id,
                thread_serial: thread,
                frame: depth,
            },
            Root::StickyClass { id } => SubRecord::RootStickyClass { id },
            Root::MonitorUsed { id } => SubRecord::RootMonitorUsed { id },
            Root::ThreadObject { id, thread } => SubRecord::RootThreadObject {
                id,
                thread_serial: thread,
                stack_serial: 0,
            },
            Root::Unknown { id } => SubRecord::RootUnknown { id },
        };
        self.writer.sub_record(&record)?;
        self.still_sending()
    }

    fn class_dump(
        &mut self,
        class: &DumpClass,
        statics: &[(u16, StaticValue)],
        ids: ClassIds,
    ) -> io::Result<()> {
        let mut static_fields = Vec::with_capacity(statics.len());
        for (position, value) in statics {
            let Some(field) = class.static_fields.get(*position as usize) else {
                continue;
            };
            let name = self.string(&field.name)?;
            let value = match value {
                StaticValue::Object(id) => Value {
                    basic_type: BasicType::Object,
                    bytes: id.to_be_bytes().to_vec(),
                },
                StaticValue::Primitive(basic_type, bytes) => Value {
                    basic_type: *basic_type,
                    bytes: bytes[..basic_type.size(8) as usize].to_vec(),
                },
            };
            static_fields.push((name, value));
        }
        let mut instance_fields = Vec::with_capacity(class.instance_fields.len());
        for field in &class.instance_fields {
            instance_fields.push((self.string(&field.name)?, field.basic_type));
        }
        self.writer
            .sub_record(&SubRecord::ClassDump(Box::new(ClassDump {
                class_id: class.id,
                stack_serial: 0,
                super_id: class.super_id,
                loader_id: ids.loader,
                signers_id: ids.signers,
                protection_domain_id: ids.protection_domain,
                instance_size: class.instance_bytes,
                constant_pool: Vec::new(),
                static_fields,
                instance_fields,
            })))?;
        self.still_sending()
    }

    fn instance(
        &mut self,
        id: u64,
        _size: u64,
        class: &DumpClass,
        values: &[u8],
    ) -> io::Result<()> {
        self.writer.instance_dump(id, 0, class.id, values)?;
        self.still_sending()
    }

    fn object_array(
        &mut self,
        id: u64,
        _size: u64,
        class: &DumpClass,
        elements: &[u64],
    ) -> io::Result<()> {
        self.writer.object_array_dump(id, 0, class.id, elements)?;
        self.still_sending()
    }

    fn primitive_array(
        &mut self,
        id: u64,
        _size: u64,
        _class: &DumpClass,
        element_type: BasicType,
        length: u32,
        native: &[u8],
    ) -> io::Result<()> {
        self.writer
            .primitive_array_dump_native(id, 0, element_type, length, native)?;
        self.still_sending()
    }

    fn end(&mut self, _summary: &DumpSummary) -> io::Result<()> {
        self.claimed.clear();
        self.writer.end_heap_dump()?;
        self.writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::pieces32;

    #[test]
    fn a_windows_figures_split_into_32_bit_pieces_that_sum_to_them() {
        let most = u64::from(u32::MAX);
        for (bytes, objects) in [
            (0, 0),
            (5, 1),
            (most, 3),
            (most + 1, 2),
            (3 * most - 1, most + 7),
            (21_474_836_475_000, 9_000_000_000),
        ] {
            let pieces = pieces32(bytes, objects);
            let summed = |pick: fn(&(u32, u32)) -> u32| -> u64 {
                pieces.iter().map(|piece| u64::from(pick(piece))).sum()
            };
            assert_eq!(summed(|piece| piece.0), bytes, "{bytes} bytes");
            assert_eq!(summed(|piece| piece.1), objects, "{objects} objects");
        }
    }
}
