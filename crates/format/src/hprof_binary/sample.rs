//! Small HPROF binary streams as an agent writes them, for other crates' tests and tools.

use super::{HprofWriter, Record};

/// A stream with one profile window: `samples` CPU samples of the stack `class.method` called
/// from `class.main` (one CPU SAMPLES record, its names, class, frames and trace before it).
pub fn one_cpu_window(class: &str, method: &str, samples: u32) -> Vec<u8> {
    let mut writer = HprofWriter::new(Vec::new(), 8, 0).expect("writing to memory");
    let utf8 = |id, text: &str| Record::Utf8 {
        id,
        text: text.as_bytes().to_vec(),
    };
    let frame = |frame_id, method_name_id| Record::StackFrame {
        frame_id,
        method_name_id,
        signature_id: 0,
        source_id: 0,
        class_serial: 1,
        line: 1,
    };
    for record in [
        utf8(1, class),
        utf8(2, method),
        utf8(3, "main"),
        Record::LoadClass {
            class_serial: 1,
            class_id: 100,
            stack_serial: 0,
            name_id: 1,
        },
        frame(10, 2),
        frame(11, 3),
        Record::StackTrace {
            stack_serial: 1,
            thread_serial: 1,
            frames: vec![10, 11],
        },
        Record::CpuSamples {
            total: samples,
            traces: vec![(samples, 1)],
        },
    ] {
        writer.record(&record).expect("writing to memory");
    }
    writer.finish().expect("writing to memory")
}
