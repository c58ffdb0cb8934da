//! The agent's profile file, HPROF text (`format=a`) or binary (`format=b`): opened at start-up
//! with HPROF's `force` rule, written by the agent's thread and at dumps, never by application
//! threads.

use std::fs::File;
use std::io::{self, BufWriter, Seek};
use std::path::{Path, PathBuf};

use openprof_format::hprof_text::{
    LockTable, SamplerReport, SitesTable, TextClass, TextInstance, TextObjectArray,
    TextPrimitiveArray, TextRoot, TextWriter, Trace, WallSampler, TRACE_SERIAL_START,
};
use openprof_format::options::{Options, OutputFormat};
use openprof_format::private_file::{create_private, AtALink, PrivateFileError};

use crate::binary_output::BinaryOutput;
use crate::error::AgentResult;
use crate::heap_walk::{ClassIds, ClassKind, DumpClass, DumpSummary, HeapSink, Root, StaticValue};
use crate::net::{NetSink, Sink, SINK_BUFFER};
use crate::profile::CpuDump;
use crate::threads::ThreadEvent;
use std::sync::Arc;

pub enum Output {
    Text(TextOutput),
    Binary(Box<BinaryOutput>),
}

pub struct TextOutput {
    writer: TextWriter<BufWriter<Sink>>,
    path: PathBuf,
}

impl TextOutput {
    /// A sampled table (CPU or wall clock): the TRACEs not printed before, the sampler's
    /// record, the table.
    fn sampled_dump(
        &mut self,
        dump: &CpuDump,
        sampler: impl FnOnce(&mut TextWriter<BufWriter<Sink>>) -> io::Result<()>,
    ) -> io::Result<()> {
        for trace in &dump.new_traces {
            self.writer.trace(trace)?;
        }
        sampler(&mut self.writer)?;
        self.writer.cpu_table(&dump.table)?;
        if let Some(record) = &dump.mpt_samples {
            self.writer.mpt_samples(record)?;
        }
        self.writer.flush()
    }
}

/// The date as HPROF prints it (C's `ctime`, without its newline).
pub fn hprof_date() -> String {
    chrono::Local::now()
        .format("%a %b %e %H:%M:%S %Y")
        .to_string()
}

/// Creates the output file of `file=` (profile or trace) with HPROF's `force` rule, private to
/// the JVM's user: with `force=y` a file there is replaced; with `force=n` HPROF's
/// `<name>.<pid>[.txt]` is used instead. A link at `file=` is never written through: `force=n`
/// refuses it, `force=y` replaces the link itself.
pub fn create_output_file(options: &Options) -> AgentResult<(File, PathBuf)> {
    let mut path = PathBuf::from(options.output_file());
    let at_a_link = if options.force {
        AtALink::Replace
    } else {
        AtALink::Refuse
    };
    if !options.force {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "file={} {}; remove it, or force=y replaces the link itself",
                    path.display(),
                    PrivateFileError::Link
                )
                .into())
            }
            Ok(_) => path = PathBuf::from(options.unique_output_file(std::process::id())),
            Err(_) => {}
        }
    }
    if options.force && !options.force_given.0 {
        refuse_to_replace_what_is_not_ours(&path)?;
    }
    match create_private(&path, at_a_link) {
        Ok(file) => Ok((file, path)),
        Err(PrivateFileError::Create(error)) => {
            Err(format!("can't write file={}: {error}", path.display()).into())
        }
        Err(error) => Err(format!("file={} {error}", path.display()).into()),
    }
}

/// With HPROF's default `force=y` (not given), a file already at `path` is replaced only when
/// it is empty or is a profile or trace (HPROF text or binary, a trace document): a mistyped
/// `file=` run as root must not replace /etc/passwd. `force=y` given replaces anything.
fn refuse_to_replace_what_is_not_ours(path: &std::path::Path) -> AgentResult<()> {
    use std::io::Read;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.is_file() || meta.len() == 0 {
        // Links and others are create_private's to judge; an empty file holds nothing.
        return Ok(());
    }
    let mut start = [0u8; 64];
    let read = File::open(path)
        .and_then(|mut file| file.read(&mut start))
        .unwrap_or(0);
    let start = &start[..read];
    let ours = start.starts_with(b"JAVA PROFILE ")
        || start.starts_with(openprof_format::trace::writer::DOCUMENT_HEAD.as_bytes());
    if ours {
        return Ok(());
    }
    Err(format!(
        "file={} exists and is not a profile or a trace; refusing to replace it (give \
         force=y to replace it anyway, or another file=)",
        path.display()
    )
    .into())
}

impl Output {
    /// Creates the output file and writes its header. With `force=y` an existing file is
    /// replaced; with `force=n` HPROF's `<name>.<pid>[.txt]` is used instead.
    /// With `net=`, the output goes to the collector as HPROF frames instead.
    pub fn create(options: &Options, net: Option<Arc<NetSink>>) -> AgentResult<Output> {
        let (file, path) = match net {
            Some(net) => {
                let address = options
                    .net
                    .as_ref()
                    .map(|net| format!("{}:{}", net.host, net.port));
                (
                    Sink::net(net),
                    PathBuf::from(format!("net={}", address.unwrap_or_default())),
                )
            }
            None => {
                let (file, path) = create_output_file(options)?;
                (Sink::File(file), path)
            }
        };
        let cannot = |error: io::Error| format!("can't write {}: {error}", path.display());
        if options.format == OutputFormat::Binary {
            let sites = options
                .heap_profile()
                .is_some_and(|mode| mode != openprof_format::options::HeapMode::Dump);
            let sampling = options.cpu == Some(openprof_format::options::CpuMode::Samples);
            let binary = BinaryOutput::new(file, path.clone(), sites, sampling, options.depth)
                .map_err(cannot)?;
            return Ok(Output::Binary(Box::new(binary)));
        }
        let mut writer = TextWriter::new(BufWriter::with_capacity(SINK_BUFFER, file));
        writer.header(&hprof_date()).map_err(cannot)?;
        Ok(Output::Text(TextOutput { writer, path }))
    }

    /// Output that goes nowhere, for the time between two profiling sessions (what is
    /// recorded then is nobody's).
    pub fn discarding() -> Output {
        Output::Text(TextOutput {
            writer: TextWriter::new(BufWriter::new(Sink::Discard)),
            path: PathBuf::from("(no profiling session)"),
        })
    }

    /// The file written, when there is one (not a collector, not between sessions).
    pub fn file_path(&self) -> Option<&Path> {
        match self {
            Output::Text(text) => {
                matches!(text.writer.get_ref().get_ref(), Sink::File(_)).then_some(&*text.path)
            }
            Output::Binary(binary) => Some(binary.path()),
        }
    }

    /// Whether this output is a file's, HPROF text (what a profiling session writes).
    pub fn is_text_file(&self) -> bool {
        matches!(self, Output::Text(text) if matches!(text.writer.get_ref().get_ref(), Sink::File(_) | Sink::Discard))
    }

    pub fn path(&self) -> &Path {
        match self {
            Output::Text(text) => &text.path,
            Output::Binary(binary) => binary.path(),
        }
    }

    pub fn thread_events(&mut self, events: &[ThreadEvent]) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                for event in events {
                    match event {
                        ThreadEvent::Start(start) => text.writer.thread_start(start)?,
                        ThreadEvent::End(serial) => text.writer.thread_end(*serial)?,
                    }
                }
                Ok(())
            }
            Output::Binary(binary) => binary.thread_events(events),
        }
    }

    /// One CPU dump: the new TRACEs, (in text) openprof's CPU SAMPLER record, the table.
    pub fn cpu_dump(&mut self, dump: &CpuDump, sampler: &SamplerReport) -> io::Result<()> {
        match self {
            Output::Text(text) => text.sampled_dump(dump, |writer| writer.sampler(sampler)),
            Output::Binary(binary) => binary.cpu_samples(&dump.new_traces, &dump.table),
        }
    }

    /// A wall-clock dump (text only: format=b refuses wall=).
    pub fn wall_dump(&mut self, dump: &CpuDump, sampler: &WallSampler) -> io::Result<()> {
        match self {
            Output::Text(text) => text.sampled_dump(dump, |writer| writer.wall_sampler(sampler)),
            Output::Binary(_) => Ok(()),
        }
    }

    /// A lock profile's dump: MONITOR TIME, PARK TIME, LOCK OWNERS (text only: format=b
    /// refuses lock= and monitor=y).
    pub fn lock_dump(&mut self, traces: &[Trace], tables: &[LockTable]) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                for trace in traces {
                    text.writer.trace(trace)?;
                }
                for table in tables {
                    text.writer.lock_table(table)?;
                }
                text.writer.flush()
            }
            Output::Binary(_) => Ok(()),
        }
    }

    /// A CPU TIME dump (text only: format=b refuses cpu=times, as HPROF's did).
    pub fn cpu_times(&mut self, dump: &CpuDump) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                for trace in &dump.new_traces {
                    text.writer.trace(trace)?;
                }
                text.writer.cpu_table(&dump.table)?;
                text.writer.flush()
            }
            Output::Binary(_) => Ok(()),
        }
    }

    /// The method parameter tracing tables (text only: format=b refuses mpt=).
    pub fn mpt(&mut self, tables: &[openprof_format::mpt_stats::MptTable]) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                text.writer.mpt(tables, Some(&hprof_date()))?;
                text.writer.flush()
            }
            Output::Binary(_) => Ok(()),
        }
    }

    /// TRACE records on their own (the DUMP TRACES command).
    pub fn traces(&mut self, traces: &[Trace]) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                for trace in traces {
                    text.writer.trace(trace)?;
                }
                text.writer.flush()
            }
            Output::Binary(binary) => binary.traces(traces),
        }
    }

    /// The allocation sites: SITES in text, HEAP SUMMARY and ALLOC SITES in binary.
    pub fn sites(
        &mut self,
        new_traces: &[Trace],
        table: &SitesTable,
        cutoff: f64,
    ) -> io::Result<()> {
        match self {
            Output::Text(text) => {
                for trace in new_traces {
                    text.writer.trace(trace)?;
                }
                text.writer.sites(table)?;
                text.writer.flush()
            }
            Output::Binary(binary) => binary.alloc_sites(new_traces, table, cutoff),
        }
    }

    /// A heap dump by the JVM's own dumper, where the output can take one (HPROF binary to a
    /// file): the bytes written, or why not (None: text output, which needs the walk).
    pub fn hotspot_heap_dump(
        &mut self,
        jni: crate::jni::Jni,
        dumper: &crate::hotspot_dump::Dumper,
    ) -> Option<Result<u64, String>> {
        match self {
            Output::Text(_) => None,
            Output::Binary(binary) => Some(binary.hotspot_heap_dump(jni, dumper)),
        }
    }

    /// Where a heap dump goes. The text form needs its totals in its first line, so its body
    /// is written aside first. To a collector, the dump is sent whole or not at all (see
    /// `Sink::begin_whole`): an error says why it was abandoned.
    pub fn with_heap_sink<R>(
        &mut self,
        dump: impl FnOnce(&mut dyn HeapSink) -> R,
    ) -> io::Result<R> {
        match self {
            Output::Text(text) => {
                text.writer.get_mut().get_mut().begin_whole();
                let result = TextHeap::new(&mut text.writer).map(|mut heap| dump(&mut heap));
                let flushed = text.writer.flush();
                match text.writer.get_mut().get_mut().end_whole() {
                    Some(why) => Err(crate::net::abandoned_dump(why)),
                    None => flushed.and(result),
                }
            }
            Output::Binary(binary) => binary.with_heap_sink(dump),
        }
    }

    /// The profile forgot stacks: a binary output forgets the names it wrote for them; both
    /// say so in the stream (CONTROL SETTINGS, FORGOTTEN TRACES), so that a reader keeping up
    /// forgets them too. The stacks still used are written again when next referred to.
    pub fn forget_names(&mut self) -> io::Result<()> {
        match self {
            Output::Text(text) => text.writer.forgotten_traces(&hprof_date()),
            Output::Binary(binary) => binary.forget_names(),
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Text(text) => text.writer.flush(),
            Output::Binary(binary) => binary.flush(),
        }
    }
}

/// HPROF's ASCII heap dump: the body goes to an anonymous temporary file while the objects are
/// counted, then the header and the body to the profile.
struct TextHeap<'a> {
    output: &'a mut TextWriter<BufWriter<Sink>>,
    /// Taken when the dump ends.
    body: Option<TextWriter<BufWriter<File>>>,
    last_class_id: u64,
    /// Class id → name, for the `ROOT … (kind=<system class>, name=…)` lines.
    names: std::collections::HashMap<u64, String>,
}

impl<'a> TextHeap<'a> {
    fn new(output: &'a mut TextWriter<BufWriter<Sink>>) -> io::Result<Self> {
        Ok(TextHeap {
            output,
            body: Some(TextWriter::new(BufWriter::new(tempfile::tempfile()?))),
            last_class_id: 0,
            names: Default::default(),
        })
    }
}

impl TextHeap<'_> {
    fn body(&mut self) -> io::Result<&mut TextWriter<BufWriter<File>>> {
        self.body
            .as_mut()
            .ok_or_else(|| io::Error::other("the heap dump has ended"))
    }
}

/// Traces of heap objects: the allocation site is not known for a dumped object.
const UNKNOWN_TRACE: u32 = TRACE_SERIAL_START;

impl HeapSink for TextHeap<'_> {
    fn class_id(&mut self, _name: &str) -> u64 {
        self.last_class_id += 1;
        self.last_class_id
    }

    fn begin(&mut self, classes: &[DumpClass]) -> io::Result<()> {
        self.names = classes
            .iter()
            .map(|class| (class.id, class.name.clone()))
            .collect();
        Ok(())
    }

    fn root(&mut self, root: Root) -> io::Result<()> {
        let name;
        let text = match root {
            Root::JniGlobal { id } => TextRoot::JniGlobal {
                id,
                global_ref_id: 0,
                trace: UNKNOWN_TRACE,
            },
            Root::JniLocal { id, thread, depth } => TextRoot::JniLocal {
                id,
                thread,
                frame: depth as i32,
            },
            Root::JavaFrame { id, thread, depth } => TextRoot::JavaFrame {
                id,
                thread,
                frame: depth as i32,
            },
            Root::StickyClass { id } => {
                name = self.names.get(&id).cloned().unwrap_or_default();
                TextRoot::SystemClass { id, name: &name }
            }
            Root::MonitorUsed { id } => TextRoot::MonitorUsed { id },
            Root::ThreadObject { id, thread } => TextRoot::ThreadObject {
                id,
                thread,
                trace: UNKNOWN_TRACE,
            },
            Root::Unknown { id } => TextRoot::Unknown { id },
        };
        self.body()?.root(&text)
    }

    fn class_dump(
        &mut self,
        class: &DumpClass,
        statics: &[(u16, StaticValue)],
        ids: ClassIds,
    ) -> io::Result<()> {
        let statics: Vec<(&str, u64)> = statics
            .iter()
            .filter_map(|(position, value)| match value {
                StaticValue::Object(id) if *id != 0 => class
                    .static_fields
                    .get(*position as usize)
                    .map(|field| (field.name.as_str(), *id)),
                _ => None,
            })
            .collect();
        self.body()?.class_dump(&TextClass {
            id: class.id,
            name: &class.name,
            trace: UNKNOWN_TRACE,
            super_id: class.super_id,
            loader_id: ids.loader,
            signers_id: ids.signers,
            domain_id: ids.protection_domain,
            statics: &statics,
            constant_pool: &[],
        })
    }

    fn instance(&mut self, id: u64, size: u64, class: &DumpClass, values: &[u8]) -> io::Result<()> {
        let fields: Vec<(&str, u64)> = class
            .reference_slots
            .iter()
            .filter_map(|(offset, name)| {
                let at = *offset as usize;
                let bytes: [u8; 8] = values.get(at..at + 8)?.try_into().ok()?;
                let referee = u64::from_be_bytes(bytes);
                (referee != 0).then_some((name.as_str(), referee))
            })
            .collect();
        self.body()?.instance(&TextInstance {
            id,
            size,
            trace: UNKNOWN_TRACE,
            class_name: &class.name,
            class_id: class.id,
            fields: &fields,
        })
    }

    fn object_array(
        &mut self,
        id: u64,
        size: u64,
        class: &DumpClass,
        elements: &[u64],
    ) -> io::Result<()> {
        let present: Vec<(u32, u64)> = elements
            .iter()
            .enumerate()
            .filter(|(_, element)| **element != 0)
            .map(|(index, element)| (index as u32, *element))
            .collect();
        self.body()?.object_array(&TextObjectArray {
            id,
            size,
            trace: UNKNOWN_TRACE,
            length: elements.len() as u32,
            class_name: &class.name,
            class_id: class.id,
            elements: &present,
        })
    }

    fn primitive_array(
        &mut self,
        id: u64,
        size: u64,
        class: &DumpClass,
        _element_type: openprof_format::hprof_binary::BasicType,
        length: u32,
        _native: &[u8],
    ) -> io::Result<()> {
        debug_assert!(matches!(class.kind, ClassKind::PrimitiveArray(_)));
        self.body()?.primitive_array(&TextPrimitiveArray {
            id,
            size,
            trace: UNKNOWN_TRACE,
            length,
            type_name: &class.name,
        })
    }

    fn end(&mut self, summary: &DumpSummary) -> io::Result<()> {
        self.body()?.flush()?;
        let Some(body) = self.body.take() else {
            return Ok(());
        };
        let mut file = body
            .into_inner()
            .into_inner()
            .map_err(|error| error.into_error())?;
        file.rewind()?;
        self.output
            .heap_dump_begin(summary.objects, summary.bytes, &hprof_date())?;
        self.output.flush()?;
        io::copy(&mut file, self.output.get_mut())?;
        self.output.heap_dump_end()?;
        self.output.flush()
    }
}
