//! heap=dump: HPROF's HEAP DUMP at every dump (kill -QUIT, exit, the collector's command),
//! written by the heap walk into the report's output.

use openprof_format::options::Options;

use crate::context::Context;
use crate::engine::{Dump, Engine, Need};
use crate::sync::lock;

pub struct HeapDump;

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

    fn dump(&self, context: &Context, dump: &Dump<'_>) {
        self.dump_heap(context, dump);
    }
}
