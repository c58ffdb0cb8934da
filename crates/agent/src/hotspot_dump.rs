//! The JVM's own heap dumper, reached in-process: `HotSpotDiagnosticMXBean.dumpHeap` called
//! through JNI (live objects only, after a full GC, as `jcmd GC.heap_dump` does), into a file
//! of a private directory; and the splicing of such a file's records into the agent's HPROF
//! binary output. HotSpot walks its heap linearly inside a VM operation (in parallel where the
//! JDK has it), which no JVMTI walk can match.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use openprof_format::hprof_binary::tag;

use crate::jni::Jni;
use crate::jvmti::{jmethodID, jobject, jvalue};
use crate::net::Sink;

/// HotSpot's diagnostic bean and its `dumpHeap` method, found once (global references).
pub struct Dumper {
    bean: usize,
    dump: usize,
}

// SAFETY: a global reference and a method id are valid on every thread.
unsafe impl Send for Dumper {}
// SAFETY: as above; the dumper holds nothing mutable.
unsafe impl Sync for Dumper {}

impl Dumper {
    /// The platform's `HotSpotDiagnosticMXBean` (no MBean server is started for it). Found
    /// when the agent starts, so that the objects its first use makes are in every dump, not
    /// only in those made after it.
    pub fn new(jni: Jni) -> Result<Dumper, String> {
        let failed = |what: &str| format!("the JVM's heap dumper: can't {what}");
        let factory = jni
            .find_class("java/lang/management/ManagementFactory")
            .map_err(|_| failed("find ManagementFactory (no java.management module?)"))?;
        let diagnostic = jni
            .find_class("com/sun/management/HotSpotDiagnosticMXBean")
            .map_err(|_| failed("find HotSpotDiagnosticMXBean (no jdk.management module?)"));
        let result = diagnostic.and_then(|diagnostic| {
            let found = (|| {
                let get_bean = jni
                    .static_method_id(
                        factory,
                        "getPlatformMXBean",
                        "(Ljava/lang/Class;)Ljava/lang/management/PlatformManagedObject;",
                    )
                    .map_err(|_| failed("find ManagementFactory.getPlatformMXBean"))?;
                let dump = jni
                    .method_id(diagnostic, "dumpHeap", "(Ljava/lang/String;Z)V")
                    .map_err(|_| failed("find dumpHeap"))?;
                let bean = jni
                    .call_static(factory, get_bean, b'L', &[jvalue { l: diagnostic }])
                    .map_err(|_| failed("get the diagnostic bean"))?
                    .reference();
                if bean.is_null() {
                    return Err(failed("get the diagnostic bean"));
                }
                let global = jni.new_global_ref(bean) as usize;
                jni.delete_local_ref(bean);
                Ok(Dumper {
                    bean: global,
                    dump: dump as usize,
                })
            })();
            jni.delete_local_ref(diagnostic);
            found
        });
        jni.delete_local_ref(factory);
        result
    }

    /// Asks HotSpot to dump the live heap to `path` (which must not exist, and end in
    /// `.hprof`), on the calling thread, which must be one the VM knows.
    pub fn dump_to(&self, jni: Jni, path: &Path) -> Result<(), String> {
        let failed = |what: &str| format!("the JVM's heap dumper: can't {what}");
        let path = path
            .to_str()
            .ok_or_else(|| failed("name a path that is not UTF-8"))?;
        let name = jni.new_string(path).map_err(|_| failed("make a string"))?;
        let called = jni
            .call(
                self.bean as jobject,
                self.dump as jmethodID,
                b'V',
                &[jvalue { l: name }, jvalue { z: 1 }],
            )
            .map_err(|_| failed("dump (dumpHeap threw)"));
        jni.delete_local_ref(name);
        called.map(|_| ())
    }
}

/// Reads an HPROF binary file's header: its identifier size, and the header's length (the
/// format name and its NUL, the identifier size, the time).
fn read_header(input: &mut impl Read) -> io::Result<(u32, usize)> {
    let mut format = Vec::new();
    let mut byte = [0u8];
    loop {
        input.read_exact(&mut byte)?;
        if byte[0] == 0 {
            break;
        }
        format.push(byte[0]);
        if format.len() > 64 {
            return Err(io::Error::other(
                "not an HPROF file: no end to its format name",
            ));
        }
    }
    let mut rest = [0u8; 12];
    input.read_exact(&mut rest)?;
    let id_size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
    Ok((id_size, format.len() + 1 + 12))
}

/// Where the class serial is in a record's body, for the records that carry one.
fn class_serial_at(tag: u8, id_size: usize) -> Option<usize> {
    match tag {
        tag::LOAD_CLASS => Some(0),
        tag::STACK_FRAME => Some(4 * id_size),
        _ => None,
    }
}

/// Copies the records of the HPROF file at `from` (after its header) to the end of `out`, the
/// class serial numbers of its LOAD CLASS and STACK FRAME records moved up by `serial_base`
/// so that they don't meet the output's own. HotSpot writes all of those before its heap
/// dump: from the first heap dump record on, the file is copied as it is, by the kernel where
/// `out` is a file (no pass of the heap through this process).
pub fn splice(from: &Path, serial_base: u32, out: &mut BufWriter<Sink>) -> io::Result<()> {
    let mut input = BufReader::with_capacity(1 << 20, File::open(from)?);
    let (id_size, header) = read_header(&mut input)?;
    let mut at = header as u64;
    let mut head = [0u8; 9];
    let mut body = Vec::new();
    loop {
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        if matches!(head[0], tag::HEAP_DUMP | tag::HEAP_DUMP_SEGMENT) {
            break;
        }
        let length = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
        body.resize(length, 0);
        input.read_exact(&mut body)?;
        if let Some(at) = class_serial_at(head[0], id_size as usize).filter(|at| at + 4 <= length) {
            let serial = u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
            body[at..at + 4].copy_from_slice(&serial.saturating_add(serial_base).to_be_bytes());
        }
        out.write_all(&head)?;
        out.write_all(&body)?;
        at += 9 + length as u64;
    }
    out.flush()?;
    let mut rest = input.into_inner();
    rest.seek(SeekFrom::Start(at))?;
    match out.get_mut() {
        Sink::File(file) => io::copy(&mut rest, file)?,
        other => io::copy(&mut rest, other)?,
    };
    Ok(())
}

/// Moves the class serial numbers of an HPROF file's LOAD CLASS and STACK FRAME records up by
/// `base`, in place (HotSpot writes them all before its heap dump, so only the file's first
/// part is read, and only the serials are written).
pub fn move_serials_in_place(path: &Path, base: u32) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let mut input = BufReader::with_capacity(1 << 20, &file);
    let (id_size, header) = read_header(&mut input)?;
    let mut at = header as u64;
    let mut serials = Vec::new();
    let mut head = [0u8; 9];
    loop {
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(error) => return Err(error),
        }
        if matches!(head[0], tag::HEAP_DUMP | tag::HEAP_DUMP_SEGMENT) {
            break;
        }
        let length = u64::from(u32::from_be_bytes([head[5], head[6], head[7], head[8]]));
        let mut skip = length as i64;
        if let Some(offset) =
            class_serial_at(head[0], id_size as usize).filter(|offset| *offset as u64 + 4 <= length)
        {
            let mut serial = [0u8; 4];
            input.seek_relative(offset as i64)?;
            input.read_exact(&mut serial)?;
            serials.push((at + 9 + offset as u64, u32::from_be_bytes(serial)));
            skip -= offset as i64 + 4;
        }
        input.seek_relative(skip)?;
        at += 9 + length;
    }
    drop(input);
    for (offset, serial) in serials {
        file.write_all_at(&serial.saturating_add(base).to_be_bytes(), offset)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_binary::reader::HprofReader;
    use openprof_format::hprof_binary::{HprofWriter, Item, Record, SubRecord};

    /// A dump as HotSpot lays one out: class and frame records, then the heap dump.
    fn hotspot_like(path: &Path) {
        let mut writer = HprofWriter::new(File::create(path).unwrap(), 8, 0).unwrap();
        for serial in [1, 2] {
            writer
                .record(&Record::LoadClass {
                    class_serial: serial,
                    class_id: 0x7000 + u64::from(serial),
                    stack_serial: 0,
                    name_id: 9,
                })
                .unwrap();
        }
        writer
            .record(&Record::StackFrame {
                frame_id: 5,
                method_name_id: 1,
                signature_id: 2,
                source_id: 3,
                class_serial: 2,
                line: 7,
            })
            .unwrap();
        writer
            .sub_record(&SubRecord::RootStickyClass { id: 0x7001 })
            .unwrap();
        writer.end_heap_dump().unwrap();
        writer.finish().unwrap();
    }

    fn items(bytes: &[u8]) -> Vec<Item> {
        HprofReader::new(bytes)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_spliced_dump_keeps_its_records_with_class_serials_moved_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.hprof");
        hotspot_like(&path);
        let original = items(&std::fs::read(&path).unwrap());

        // Behind a header of our own, in a file (the heap dump copied by the kernel).
        let output = dir.path().join("output.hprof");
        let mut file = Vec::new();
        HprofWriter::new(&mut file, 8, 0).unwrap().finish().unwrap();
        std::fs::write(&output, &file).unwrap();
        let appending = std::fs::OpenOptions::new()
            .append(true)
            .open(&output)
            .unwrap();
        let mut out = BufWriter::new(Sink::File(appending));
        splice(&path, 100, &mut out).unwrap();
        drop(out);
        let spliced = items(&std::fs::read(&output).unwrap());
        let text = format!("{spliced:?}");
        assert!(text.contains("class_serial: 101"), "{text}");
        assert!(text.contains("class_serial: 102"), "{text}");
        assert!(!text.contains("class_serial: 1,"), "{text}");
        // The rest as it was: the heap dump and its end.
        assert_eq!(spliced.len(), original.len());
        assert_eq!(spliced[3..], original[3..]);
        assert!(spliced.contains(&Item::HeapDumpEnd));

        // Moved in place the same way.
        move_serials_in_place(&path, 100).unwrap();
        let moved = items(&std::fs::read(&path).unwrap());
        assert_eq!(moved, spliced);
    }
}
