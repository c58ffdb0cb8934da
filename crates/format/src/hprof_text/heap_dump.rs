//! HPROF text's `HEAP DUMP` record (heap=dump): GC roots, classes, instances and arrays, written
//! as a stream in the layout of the JDK's HPROF agent (hprof_io.c) and read back into a class
//! histogram without keeping any object.

use std::io::{self, Write};

use super::{cut, malformed, parse_number, TextReadError, TextWriter};
use crate::heap::{ClassCount, HeapHistogram, RootKind, ShallowSizes};

/// A GC root of a heap dump, as [`TextWriter::root`] writes it. Ids are object ids; `thread`
/// is a thread serial number (200001…), `trace` a trace serial number, `frame` a frame depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextRoot<'a> {
    Unknown {
        id: u64,
    },
    JniGlobal {
        id: u64,
        global_ref_id: u64,
        trace: u32,
    },
    JniLocal {
        id: u64,
        thread: u32,
        frame: i32,
    },
    JavaFrame {
        id: u64,
        thread: u32,
        frame: i32,
    },
    NativeStack {
        id: u64,
        thread: u32,
    },
    /// `name` in Java source form.
    SystemClass {
        id: u64,
        name: &'a str,
    },
    ThreadBlock {
        id: u64,
        thread: u32,
    },
    MonitorUsed {
        id: u64,
    },
    ThreadObject {
        id: u64,
        thread: u32,
        trace: u32,
    },
}

impl TextRoot<'_> {
    pub fn kind(&self) -> RootKind {
        match self {
            TextRoot::Unknown { .. } => RootKind::Unknown,
            TextRoot::JniGlobal { .. } => RootKind::JniGlobal,
            TextRoot::JniLocal { .. } => RootKind::JniLocal,
            TextRoot::JavaFrame { .. } => RootKind::JavaFrame,
            TextRoot::NativeStack { .. } => RootKind::NativeStack,
            TextRoot::SystemClass { .. } => RootKind::SystemClass,
            TextRoot::ThreadBlock { .. } => RootKind::ThreadBlock,
            TextRoot::MonitorUsed { .. } => RootKind::MonitorUsed,
            TextRoot::ThreadObject { .. } => RootKind::ThreadObject,
        }
    }
}

/// A class object of a heap dump (`CLS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextClass<'a> {
    pub id: u64,
    /// Java source form: `java.lang.String`, `int[]`.
    pub name: &'a str,
    pub trace: u32,
    /// 0 when the class has none (then the line is left out, as HPROF does); likewise below.
    pub super_id: u64,
    pub loader_id: u64,
    pub signers_id: u64,
    pub domain_id: u64,
    /// The class's own static reference fields: (name, object id). Nulls (0) are left out.
    pub statics: &'a [(&'a str, u64)],
    /// Object constants of the constant pool: (index, object id). Nulls are left out.
    pub constant_pool: &'a [(u16, u64)],
}

/// An instance of a heap dump (`OBJ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextInstance<'a> {
    pub id: u64,
    /// Shallow size in bytes.
    pub size: u64,
    pub trace: u32,
    pub class_name: &'a str,
    pub class_id: u64,
    /// Reference fields of the class and its super classes: (name, object id). Nulls are
    /// left out.
    pub fields: &'a [(&'a str, u64)],
}

/// An array of objects (`ARR … elem type=…@…`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextObjectArray<'a> {
    pub id: u64,
    pub size: u64,
    pub trace: u32,
    pub length: u32,
    /// The array's class in Java source form (`java.lang.String[]`): HPROF prints the array
    /// class after `elem type=`, despite the label.
    pub class_name: &'a str,
    /// The array class's object id.
    pub class_id: u64,
    /// (index, object id) of the elements that are not null. Nulls given are left out.
    pub elements: &'a [(u32, u64)],
}

/// An array of primitives (`ARR … elem type=char[]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPrimitiveArray<'a> {
    pub id: u64,
    pub size: u64,
    pub trace: u32,
    pub length: u32,
    /// The array type in Java source form: `char[]`, `int[]`.
    pub type_name: &'a str,
}

/// A heap dump is written as a stream: `heap_dump_begin`, then any number of `root`,
/// `class_dump`, `instance`, `object_array` and `primitive_array` calls, then `heap_dump_end`;
/// nothing is kept between calls. Ids print in hex as HPROF's `%x` does, all 64 bits of them.
impl<W: Write> TextWriter<W> {
    /// `HEAP DUMP BEGIN (N objects, M bytes) date`: the live objects and bytes the dump holds.
    pub fn heap_dump_begin(&mut self, objects: u64, bytes: u64, date: &str) -> io::Result<()> {
        writeln!(
            self.out,
            "HEAP DUMP BEGIN ({objects} objects, {bytes} bytes) {date}"
        )
    }

    pub fn root(&mut self, root: &TextRoot<'_>) -> io::Result<()> {
        let kind = root.kind().hprof_text();
        match *root {
            TextRoot::Unknown { id } | TextRoot::MonitorUsed { id } => {
                writeln!(self.out, "ROOT {id:x} (kind={kind})")
            }
            TextRoot::JniGlobal {
                id,
                global_ref_id,
                trace,
            } => writeln!(
                self.out,
                "ROOT {id:x} (kind={kind}, id={global_ref_id:x}, trace={trace})"
            ),
            TextRoot::JniLocal { id, thread, frame }
            | TextRoot::JavaFrame { id, thread, frame } => {
                writeln!(
                    self.out,
                    "ROOT {id:x} (kind={kind}, thread={thread}, frame={frame})"
                )
            }
            TextRoot::NativeStack { id, thread } | TextRoot::ThreadBlock { id, thread } => {
                writeln!(self.out, "ROOT {id:x} (kind={kind}, thread={thread})")
            }
            TextRoot::SystemClass { id, name } => {
                writeln!(self.out, "ROOT {id:x} (kind={kind}, name={name})")
            }
            TextRoot::ThreadObject { id, thread, trace } => writeln!(
                self.out,
                "ROOT {id:x} (kind={kind}, id={thread}, trace={trace})"
            ),
        }
    }

    pub fn class_dump(&mut self, class: &TextClass<'_>) -> io::Result<()> {
        writeln!(
            self.out,
            "CLS {:x} (name={}, trace={})",
            class.id, class.name, class.trace
        )?;
        for (label, id) in [
            ("super", class.super_id),
            ("loader", class.loader_id),
            ("signers", class.signers_id),
            ("domain", class.domain_id),
        ] {
            if id != 0 {
                writeln!(self.out, "\t{label}\t\t{id:x}")?;
            }
        }
        for &(name, id) in class.statics.iter().filter(|(_, id)| *id != 0) {
            writeln!(self.out, "\tstatic {name}\t{id:x}")?;
        }
        for &(index, id) in class.constant_pool.iter().filter(|(_, id)| *id != 0) {
            writeln!(self.out, "\tconstant pool entry {index}\t{id:x}")?;
        }
        Ok(())
    }

    pub fn instance(&mut self, instance: &TextInstance<'_>) -> io::Result<()> {
        writeln!(
            self.out,
            "OBJ {:x} (sz={}, trace={}, class={}@{:x})",
            instance.id, instance.size, instance.trace, instance.class_name, instance.class_id
        )?;
        for &(name, id) in instance.fields.iter().filter(|(_, id)| *id != 0) {
            // HPROF lines short names up with a second tab.
            let separator = if name.len() < 8 { "\t" } else { "" };
            writeln!(self.out, "\t{name}\t{separator}{id:x}")?;
        }
        Ok(())
    }

    pub fn object_array(&mut self, array: &TextObjectArray<'_>) -> io::Result<()> {
        writeln!(
            self.out,
            "ARR {:x} (sz={}, trace={}, nelems={}, elem type={}@{:x})",
            array.id, array.size, array.trace, array.length, array.class_name, array.class_id
        )?;
        for &(index, id) in array.elements.iter().filter(|(_, id)| *id != 0) {
            writeln!(self.out, "\t[{index}]\t\t{id:x}")?;
        }
        Ok(())
    }

    pub fn primitive_array(&mut self, array: &TextPrimitiveArray<'_>) -> io::Result<()> {
        writeln!(
            self.out,
            "ARR {:x} (sz={}, trace={}, nelems={}, elem type={})",
            array.id, array.size, array.trace, array.length, array.type_name
        )
    }

    pub fn heap_dump_end(&mut self) -> io::Result<()> {
        writeln!(self.out, "HEAP DUMP END")
    }
}

fn parse_hex(text: &str, number: usize, what: &str) -> Result<u64, TextReadError> {
    u64::from_str_radix(text, 16)
        .map_err(|_| malformed(number, format!("{what}: '{text}' is not a hex id")))
}

/// Sums a HEAP DUMP section line by line into a [`HeapHistogram`], checking each line's layout
/// and keeping none of them.
pub(super) struct HeapDumpReader {
    histogram: HeapHistogram,
    /// Whether the previous record (CLS, OBJ, ARR) may be followed by tab-indented lines.
    in_record: bool,
}

impl HeapDumpReader {
    /// From the `HEAP DUMP BEGIN (N objects, M bytes) date` line.
    pub(super) fn begin(line: &str, number: usize) -> Result<HeapDumpReader, TextReadError> {
        const RECORD: &str = "HEAP DUMP BEGIN";
        let rest = line
            .strip_prefix("HEAP DUMP BEGIN (")
            .ok_or_else(|| malformed(number, format!("not a HEAP DUMP header: '{line}'")))?;
        let (objects, rest) = cut(rest, " objects, ", number, RECORD)?;
        let (bytes, date) = cut(rest, " bytes)", number, RECORD)?;
        let mut histogram = HeapHistogram::new(ShallowSizes::Recorded);
        histogram.announced = Some(ClassCount {
            instances: parse_number(objects, number, "HEAP DUMP objects")?,
            bytes: parse_number(bytes, number, "HEAP DUMP bytes")?,
        });
        histogram.date = date.trim().to_string();
        Ok(HeapDumpReader {
            histogram,
            in_record: false,
        })
    }

    /// One line of the section, before `HEAP DUMP END`.
    pub(super) fn line(&mut self, line: &str, number: usize) -> Result<(), TextReadError> {
        if let Some(body) = line.strip_prefix('\t') {
            if !self.in_record {
                return Err(malformed(
                    number,
                    "HEAP DUMP: an indented line outside a CLS, OBJ or ARR record",
                ));
            }
            // Every field line ends with the object id it refers to, after a tab.
            let (_, id) = body
                .rsplit_once('\t')
                .ok_or_else(|| malformed(number, format!("HEAP DUMP: no id in '{body}'")))?;
            parse_hex(id, number, "HEAP DUMP reference")?;
            return Ok(());
        }
        self.in_record = false;
        if let Some(rest) = line.strip_prefix("ROOT ") {
            let (id, rest) = cut(rest, " (kind=", number, "ROOT")?;
            parse_hex(id, number, "ROOT id")?;
            let end = rest
                .find('>')
                .ok_or_else(|| malformed(number, "ROOT: no '>' closing the kind"))?;
            let kind = RootKind::from_hprof_text(&rest[..=end]).ok_or_else(|| {
                malformed(number, format!("ROOT: unknown kind '{}'", &rest[..=end]))
            })?;
            if !rest.ends_with(')') {
                return Err(malformed(number, "ROOT: does not end with ')'"));
            }
            self.histogram.add_root(kind);
        } else if let Some(rest) = line.strip_prefix("CLS ") {
            let (id, rest) = cut(rest, " (name=", number, "CLS")?;
            parse_hex(id, number, "CLS id")?;
            let (_, trace) = rest
                .rsplit_once(", trace=")
                .ok_or_else(|| malformed(number, "CLS: no ', trace='"))?;
            let trace = trace
                .strip_suffix(')')
                .ok_or_else(|| malformed(number, "CLS: does not end with ')'"))?;
            parse_number::<u32>(trace, number, "CLS trace")?;
            self.histogram.class_dumps += 1;
            self.in_record = true;
        } else if let Some(rest) = line.strip_prefix("OBJ ") {
            let (id, rest) = cut(rest, " (sz=", number, "OBJ")?;
            parse_hex(id, number, "OBJ id")?;
            let (size, rest) = cut(rest, ", trace=", number, "OBJ")?;
            let (trace, class) = cut(rest, ", class=", number, "OBJ")?;
            let size = parse_number(size, number, "OBJ sz")?;
            parse_number::<u32>(trace, number, "OBJ trace")?;
            let class = class
                .strip_suffix(')')
                .ok_or_else(|| malformed(number, "OBJ: does not end with ')'"))?;
            let (name, class_id) = class
                .rsplit_once('@')
                .ok_or_else(|| malformed(number, "OBJ: no '@' before the class id"))?;
            parse_hex(class_id, number, "OBJ class id")?;
            self.histogram.add_object(name, size);
            self.in_record = true;
        } else if let Some(rest) = line.strip_prefix("ARR ") {
            let (id, rest) = cut(rest, " (sz=", number, "ARR")?;
            parse_hex(id, number, "ARR id")?;
            let (size, rest) = cut(rest, ", trace=", number, "ARR")?;
            let (trace, rest) = cut(rest, ", nelems=", number, "ARR")?;
            let (length, element) = cut(rest, ", elem type=", number, "ARR")?;
            let size = parse_number(size, number, "ARR sz")?;
            parse_number::<u32>(trace, number, "ARR trace")?;
            parse_number::<u64>(length, number, "ARR nelems")?;
            let element = element
                .strip_suffix(')')
                .ok_or_else(|| malformed(number, "ARR: does not end with ')'"))?;
            // Arrays of objects name their class object after '@'; primitive arrays do not.
            let name = match element.rsplit_once('@') {
                Some((name, class_id)) if u64::from_str_radix(class_id, 16).is_ok() => name,
                _ => element,
            };
            self.histogram.add_object(name, size);
            self.in_record = true;
        } else {
            return Err(malformed(
                number,
                format!("HEAP DUMP: unknown line '{line}'"),
            ));
        }
        Ok(())
    }

    pub(super) fn finish(self) -> HeapHistogram {
        self.histogram
    }
}

#[cfg(test)]
mod tests {
    use super::super::{read, read_with_progress};
    use super::*;

    fn text_of(write: impl FnOnce(&mut TextWriter<Vec<u8>>) -> io::Result<()>) -> String {
        let mut writer = TextWriter::new(Vec::new());
        write(&mut writer).unwrap();
        String::from_utf8(writer.into_inner()).unwrap()
    }

    fn profile_of(body: &str) -> Result<crate::hprof_text::TextProfile, TextReadError> {
        read(format!("JAVA PROFILE 1.0.1, created d\n\n--------\n\n{body}").as_bytes())
    }

    fn write_dump(writer: &mut TextWriter<Vec<u8>>) -> io::Result<()> {
        writer.heap_dump_begin(6, 248, "Fri Feb  6 13:13:42 2004")?;
        for root in [
            TextRoot::Unknown { id: 0x1 },
            TextRoot::JniGlobal {
                id: 0x2,
                global_ref_id: 0xab,
                trace: 300001,
            },
            TextRoot::JniLocal {
                id: 0x3,
                thread: 200001,
                frame: -1,
            },
            TextRoot::JavaFrame {
                id: 0x4,
                thread: 200001,
                frame: 2,
            },
            TextRoot::JavaFrame {
                id: 0x5,
                thread: 200002,
                frame: 0,
            },
            TextRoot::NativeStack {
                id: 0x6,
                thread: 200001,
            },
            TextRoot::SystemClass {
                id: 0x7,
                name: "java.lang.String",
            },
            TextRoot::ThreadBlock {
                id: 0x8,
                thread: 200001,
            },
            TextRoot::MonitorUsed { id: 0x9 },
            TextRoot::ThreadObject {
                id: 0xa,
                thread: 200001,
                trace: 300000,
            },
        ] {
            writer.root(&root)?;
        }
        writer.class_dump(&TextClass {
            id: 0x7,
            name: "java.lang.String",
            trace: 300000,
            super_id: 0x100,
            loader_id: 0,
            signers_id: 0,
            domain_id: 0x101,
            statics: &[("CASE_INSENSITIVE_ORDER", 0x102), ("nothing", 0)],
            constant_pool: &[(3, 0x103)],
        })?;
        for id in [0x10, 0x11] {
            writer.instance(&TextInstance {
                id,
                size: 24,
                trace: 300001,
                class_name: "java.lang.String",
                class_id: 0x7,
                fields: &[
                    ("value", 0x20),
                    ("serialPersistentFields", 0x21),
                    ("none", 0),
                ],
            })?;
        }
        writer.instance(&TextInstance {
            id: 0xffff_ffff_0000_0012,
            size: 16,
            trace: 300001,
            class_name: "Keep$Node",
            class_id: 0x8,
            fields: &[],
        })?;
        writer.object_array(&TextObjectArray {
            id: 0x30,
            size: 32,
            trace: 300002,
            length: 4,
            class_name: "java.lang.String[]",
            class_id: 0x31,
            elements: &[(0, 0x10), (2, 0x11), (3, 0)],
        })?;
        for id in [0x20, 0x21] {
            writer.primitive_array(&TextPrimitiveArray {
                id,
                size: 76,
                trace: 300001,
                length: 30,
                type_name: "char[]",
            })?;
        }
        writer.heap_dump_end()
    }

    #[test]
    fn heap_dump_lines_have_hprofs_layout() {
        let text = text_of(write_dump);
        let expected = [
            "HEAP DUMP BEGIN (6 objects, 248 bytes) Fri Feb  6 13:13:42 2004",
            "ROOT 1 (kind=<unknown>)",
            "ROOT 2 (kind=<JNI global ref>, id=ab, trace=300001)",
            "ROOT 3 (kind=<JNI local ref>, thread=200001, frame=-1)",
            "ROOT 4 (kind=<Java stack>, thread=200001, frame=2)",
            "ROOT 5 (kind=<Java stack>, thread=200002, frame=0)",
            "ROOT 6 (kind=<native stack>, thread=200001)",
            "ROOT 7 (kind=<system class>, name=java.lang.String)",
            "ROOT 8 (kind=<thread block>, thread=200001)",
            "ROOT 9 (kind=<busy monitor>)",
            "ROOT a (kind=<thread>, id=200001, trace=300000)",
            "CLS 7 (name=java.lang.String, trace=300000)",
            "\tsuper\t\t100",
            "\tdomain\t\t101",
            "\tstatic CASE_INSENSITIVE_ORDER\t102",
            "\tconstant pool entry 3\t103",
            "OBJ 10 (sz=24, trace=300001, class=java.lang.String@7)",
            "\tvalue\t\t20",
            "\tserialPersistentFields\t21",
        ];
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..expected.len()], expected);
        let tail = [
            "OBJ ffffffff00000012 (sz=16, trace=300001, class=Keep$Node@8)",
            "ARR 30 (sz=32, trace=300002, nelems=4, elem type=java.lang.String[]@31)",
            "\t[0]\t\t10",
            "\t[2]\t\t11",
            "ARR 20 (sz=76, trace=300001, nelems=30, elem type=char[])",
            "ARR 21 (sz=76, trace=300001, nelems=30, elem type=char[])",
            "HEAP DUMP END",
        ];
        assert_eq!(lines[lines.len() - tail.len()..], tail);
    }

    #[test]
    fn a_written_heap_dump_reads_back_as_its_histogram() {
        let text = text_of(|writer| {
            write_dump(writer)?;
            write_dump(writer)
        });
        let profile = profile_of(&text).unwrap();
        assert_eq!(profile.heap_dumps.len(), 2, "one histogram per dump");
        let heap = profile.last_heap_dump().unwrap();
        let count = |instances, bytes| Some(ClassCount { instances, bytes });
        assert_eq!(heap.get("java.lang.String"), count(2, 48));
        assert_eq!(heap.get("Keep$Node"), count(1, 16));
        assert_eq!(heap.get("java.lang.String[]"), count(1, 32));
        assert_eq!(heap.get("char[]"), count(2, 152));
        assert_eq!(heap.class_count(), 4);
        assert_eq!(
            heap.total(),
            ClassCount {
                instances: 6,
                bytes: 248
            }
        );
        assert_eq!(heap.announced, Some(heap.total()));
        assert_eq!(heap.date, "Fri Feb  6 13:13:42 2004");
        assert_eq!(heap.class_dumps, 1);
        assert_eq!(heap.sizes, ShallowSizes::Recorded);
        assert_eq!(heap.root_total(), 10);
        for kind in RootKind::ALL {
            let expected = if kind == RootKind::JavaFrame { 2 } else { 1 };
            assert_eq!(heap.roots().get(&kind), Some(&expected), "{kind:?}");
        }
    }

    #[test]
    fn malformed_heap_and_sites_lines_give_their_line_number() {
        let dump =
            |line: &str| format!("HEAP DUMP BEGIN (1 objects, 8 bytes) d\n{line}\nHEAP DUMP END\n");
        let sites =
            |line: &str| format!("SITES BEGIN (ordered by live bytes) d\n{line}\nSITES END\n");
        let cases = [
            (
                dump("OBJ 10 (sz=x, trace=1, class=A@7)"),
                "line 6: OBJ sz: 'x' is not a number",
            ),
            (
                dump("OBJ 10 (sz=8, trace=1, class=A)"),
                "line 6: OBJ: no '@' before the class id",
            ),
            (
                dump("OBJ zz (sz=8, trace=1, class=A@7)"),
                "line 6: OBJ id: 'zz' is not a hex id",
            ),
            (
                dump("ARR 10 (sz=8, trace=1, nelems=2)"),
                "line 6: ARR: no ', elem type=' in '2)'",
            ),
            (
                dump("ROOT 1 (kind=<lost>)"),
                "line 6: ROOT: unknown kind '<lost>'",
            ),
            (
                dump("ROOT 1 (kind=<unknown>)\n\tvalue\t\t20"),
                "line 7: HEAP DUMP: an indented line outside a CLS, OBJ or ARR record",
            ),
            (
                dump("OBJ 10 (sz=8, trace=1, class=A@7)\n\tvalue\t\tnothex"),
                "line 7: HEAP DUMP reference: 'nothex' is not a hex id",
            ),
            (dump("CLS 7 (name=A)"), "line 6: CLS: no ', trace='"),
            (dump("GARBAGE"), "line 6: HEAP DUMP: unknown line 'GARBAGE'"),
            (
                "HEAP DUMP BEGIN (x objects, 8 bytes) d\n".to_string(),
                "line 5: HEAP DUMP objects: 'x' is not a number",
            ),
            (
                "HEAP DUMP BEGIN (1 objects, 8 bytes) d\nROOT 1 (kind=<unknown>)\n".to_string(),
                "line 5: section not closed by 'HEAP DUMP END' (the file ends at line 6)",
            ),
            (
                sites("    1 44.13% 44.13%   1117360 13967   1117360"),
                "line 6: SITES row: no alloc'ed objs",
            ),
            (
                sites("    1 44.13 44.13%   1 1 1 1 301926 A"),
                "line 6: SITES row: self '44.13' has no '%'",
            ),
            (
                sites("    1 44.13% 44.13%   1 1 1 1 301926 A B"),
                "line 6: SITES row: 'B' after the class name",
            ),
            (
                "SITES BEGIN (ordered by luck) d\nSITES END\n".to_string(),
                "line 5: SITES BEGIN: unknown order 'luck'",
            ),
        ];
        for (body, expected) in cases {
            let error = profile_of(&body).unwrap_err();
            assert_eq!(error.to_string(), expected, "{body}");
        }
        let mut not_utf8 =
            b"JAVA PROFILE 1.0.1\n--------\nSITES BEGIN (ordered by live bytes) ".to_vec();
        not_utf8.extend_from_slice(&[0xff, 0xfe, b'\n']);
        let error = read(not_utf8.as_slice()).unwrap_err();
        assert!(
            error.to_string().starts_with("line 3: not UTF-8 text"),
            "{error}"
        );
    }

    #[test]
    fn progress_reports_the_bytes_read() {
        let mut text = String::from("JAVA PROFILE 1.0.1\n--------\n");
        text.push_str("HEAP DUMP BEGIN (100000 objects, 2400000 bytes) d\n");
        for id in 0..100_000 {
            text.push_str(&format!(
                "OBJ {id:x} (sz=24, trace=300001, class=java.lang.String@7)\n"
            ));
        }
        text.push_str("HEAP DUMP END\n");
        let mut reports = Vec::new();
        let profile =
            read_with_progress(text.as_bytes(), &mut |bytes| reports.push(bytes)).unwrap();
        assert_eq!(
            profile.heap_dumps[0]
                .get("java.lang.String")
                .unwrap()
                .instances,
            100_000
        );
        assert!(reports.len() > 3, "{reports:?}");
        assert!(
            reports.windows(2).all(|pair| pair[0] < pair[1]),
            "{reports:?}"
        );
        assert_eq!(reports.last(), Some(&(text.len() as u64)));
    }
}
