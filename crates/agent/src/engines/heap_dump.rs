//! heap=dump: HPROF's HEAP DUMP at every dump (kill -QUIT, exit, the collector's command). In
//! HPROF binary to a file, HotSpot's own dumper writes it (`hotspot_dump`: as fast as `jcmd
//! GC.heap_dump`); in text, to a collector's connection (streamed as it is walked), or where
//! HotSpot's dumper can't be had, the agent's JVMTI heap walk does.

use openprof_format::options::Options;

use crate::context::Context;
use crate::engine::{Dump, Engine, Need};
use crate::sync::lock;

#[derive(Default)]
pub struct HeapDump {
    /// HotSpot's dumper, found at start for HPROF binary to a file.
    dumper: std::sync::OnceLock<Result<crate::hotspot_dump::Dumper, String>>,
    /// Whether the log said once why the agent's walk dumps instead of HotSpot's dumper.
    walk_noted: std::sync::atomic::AtomicBool,
}

impl HeapDump {
    /// Every live object, after a full GC (on a thread the VM knows).
    pub fn dump_heap(&self, context: &Context, dump: &Dump<'_>) {
        let jni = dump.jni;
        if jni.is_null() {
            return;
        }
        let verbose = context.options.verbose;
        if verbose {
            eprint!("Dumping Java heap ...");
        }
        let started = std::time::Instant::now();
        let mut report = lock(dump.report);
        (dump.collect)(&mut report);
        let hotspot = match self.dumper.get() {
            Some(Ok(dumper)) => report
                .output
                .hotspot_heap_dump(crate::jni::Jni(jni), dumper),
            Some(Err(why)) => Some(Err(why.clone())),
            None => None,
        };
        match hotspot {
            Some(Ok(bytes)) => {
                if verbose {
                    eprintln!(
                        " done (the JVM's dumper: {bytes} bytes in {} ms).",
                        started.elapsed().as_millis()
                    );
                }
                return;
            }
            Some(Err(why))
                if !self
                    .walk_noted
                    .swap(true, std::sync::atomic::Ordering::Relaxed) =>
            {
                eprintln!("openprof: heap dump by the agent's own walk ({why})");
            }
            _ => {}
        }
        let result = report
            .output
            .with_heap_sink(|sink| {
                crate::heap_walk::dump_heap(context.vm, jni, sink, |thread| {
                    context.thread_serial(thread)
                })
            })
            .unwrap_or_else(|error| Err(format!("can't write the heap dump: {error}").into()));
        match result {
            Ok(summary) => {
                if verbose {
                    eprintln!(
                        " done ({} objects, {} bytes, {} classes in {} ms).",
                        summary.objects,
                        summary.bytes,
                        summary.classes,
                        started.elapsed().as_millis()
                    );
                    let phases: Vec<String> = summary
                        .phases
                        .iter()
                        .map(|(phase, time)| format!("{phase} {} ms", time.as_millis()))
                        .collect();
                    eprintln!(
                        "openprof: heap walk, objects told apart by {}: {}",
                        summary.identity,
                        phases.join(", ")
                    );
                }
                if summary.layout_mismatches > 0 {
                    eprintln!(
                    "openprof: heap dump: {} field values did not fit their class's layout and were left out",
                    summary.layout_mismatches
                );
                }
                if summary.unknown_class_objects > 0 {
                    eprintln!(
                    "openprof: heap dump: {} objects of classes loaded during the dump were left out",
                    summary.unknown_class_objects
                );
                }
            }
            Err(error) => eprintln!("\nopenprof ERROR: heap dump failed: {error}"),
        }
    }
}

impl Engine for HeapDump {
    /// The heap walk runs in a JVMTI environment of its own, with its own capabilities.
    fn needs(_options: &Options) -> Vec<Need> {
        Vec::new()
    }

    /// HPROF binary to a file: HotSpot's dumper is looked for now (see `Dumper::new`).
    fn start(&self, context: &Context, jni: *mut crate::jvmti::JNIEnv) -> Option<String> {
        let options = &context.options;
        if options.format != openprof_format::options::OutputFormat::Binary
            || options.net.is_some()
            || jni.is_null()
        {
            return None;
        }
        let dumper = crate::hotspot_dump::Dumper::new(crate::jni::Jni(jni));
        let _ = self.dumper.set(dumper);
        None
    }

    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        self.dump_heap(context, dump);
    }
}
