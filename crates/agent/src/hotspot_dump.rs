//! The JVM's own heap dumper, reached in-process: `HotSpotDiagnosticMXBean.dumpHeap` called
//! through JNI (live objects only, after a full GC, as `jcmd GC.heap_dump` does), into a file
//! of a private directory; and the splicing of such a file's records into the agent's HPROF
//! binary output. HotSpot walks its heap linearly inside a VM operation (in parallel where the
//! JDK has it), which no JVMTI walk can match.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use openprof_format::hprof_binary::tag;

use crate::jni::Jni;
use crate::jvmti::{jmethodID, jobject, jvalue};

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

/// The length of an HPROF file's header: the format name and its NUL, the identifier size,
/// the time.
fn header_length(format: &[u8]) -> usize {
    format.len() + 1 + 4 + 8
}

/// Reads an HPROF binary file's header: its identifier size.
fn read_header(input: &mut impl Read) -> io::Result<u32> {
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
    debug_assert_eq!(header_length(&format), format.len() + 13);
    Ok(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]))
}

/// Copies the records of the HPROF file at `from` (after its header) to `out`, the class
/// serial numbers of its LOAD CLASS and STACK FRAME records moved up by `serial_base` so that
/// they don't meet the output's own; returns the largest class serial written.
pub fn splice(from: &Path, serial_base: u32, out: &mut impl Write) -> io::Result<u32> {
    let mut input = BufReader::with_capacity(1 << 20, File::open(from)?);
    let id_size = read_header(&mut input)? as usize;
    let mut largest = serial_base;
    let mut head = [0u8; 9];
    let mut body = Vec::new();
    let mut copy = vec![0u8; 1 << 20];
    loop {
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(error) => return Err(error),
        }
        let length = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
        // Where the class serial is in the records that carry one.
        let serial_at = match head[0] {
            tag::LOAD_CLASS => Some(0),
            tag::STACK_FRAME => Some(4 * id_size),
            _ => None,
        };
        out.write_all(&head)?;
        match serial_at {
            Some(at) if at + 4 <= length => {
                body.resize(length, 0);
                input.read_exact(&mut body)?;
                let serial =
                    u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
                let moved = serial.saturating_add(serial_base);
                largest = largest.max(moved);
                body[at..at + 4].copy_from_slice(&moved.to_be_bytes());
                out.write_all(&body)?;
            }
            _ => {
                let mut left = length;
                while left > 0 {
                    let chunk = left.min(copy.len());
                    input.read_exact(&mut copy[..chunk])?;
                    out.write_all(&copy[..chunk])?;
                    left -= chunk;
                }
            }
        }
    }
    Ok(largest)
}

/// Moves the class serial numbers of an HPROF file's LOAD CLASS and STACK FRAME records up by
/// `base`, in place (HotSpot writes them all before its heap dump, so only the file's first
/// part is read and rewritten).
pub fn move_serials_in_place(path: &Path, base: u32) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let id_size = read_header(&mut BufReader::new(&mut file))? as u64;
    // The header again, unbuffered: where the records start.
    file.seek(SeekFrom::Start(0))?;
    let mut at = {
        let mut input = BufReader::new(&mut file);
        let mut format = Vec::new();
        let mut byte = [0u8];
        loop {
            input.read_exact(&mut byte)?;
            if byte[0] == 0 {
                break;
            }
            format.push(byte[0]);
        }
        header_length(&format) as u64
    };
    let mut head = [0u8; 9];
    loop {
        file.seek(SeekFrom::Start(at))?;
        match file.read_exact(&mut head) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(error) => return Err(error),
        }
        let length = u64::from(u32::from_be_bytes([head[5], head[6], head[7], head[8]]));
        let serial_at = match head[0] {
            tag::HEAP_DUMP | tag::HEAP_DUMP_SEGMENT => break,
            tag::LOAD_CLASS => Some(0),
            tag::STACK_FRAME => Some(4 * id_size),
            _ => None,
        };
        if let Some(offset) = serial_at.filter(|offset| offset + 4 <= length) {
            let where_ = at + 9 + offset;
            let mut serial = [0u8; 4];
            file.seek(SeekFrom::Start(where_))?;
            file.read_exact(&mut serial)?;
            let moved = u32::from_be_bytes(serial).saturating_add(base);
            file.seek(SeekFrom::Start(where_))?;
            file.write_all(&moved.to_be_bytes())?;
        }
        at += 9 + length;
    }
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_binary::{HprofWriter, Record};

    #[test]
    fn a_spliced_dump_keeps_its_records_with_class_serials_moved_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.hprof");
        let mut writer = HprofWriter::new(File::create(&path).unwrap(), 8, 0).unwrap();
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
        writer.finish().unwrap();

        let mut out = Vec::new();
        assert_eq!(splice(&path, 100, &mut out).unwrap(), 102);
        // Read back behind a header of our own.
        let mut file = Vec::new();
        HprofWriter::new(&mut file, 8, 0).unwrap().finish().unwrap();
        file.extend_from_slice(&out);
        let items: Vec<_> = openprof_format::hprof_binary::reader::HprofReader::new(&file[..])
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let text = format!("{items:?}");
        assert!(text.contains("class_serial: 101"), "{text}");
        assert!(text.contains("class_serial: 102"), "{text}");
        assert!(!text.contains("class_serial: 1,"), "{text}");

        // Moved in place the same way.
        move_serials_in_place(&path, 100).unwrap();
        let items: Vec<_> = openprof_format::hprof_binary::reader::HprofReader::new(
            std::fs::read(&path).unwrap().as_slice(),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
        let text = format!("{items:?}");
        assert!(text.contains("class_serial: 101") && text.contains("class_serial: 102"));
    }
}
