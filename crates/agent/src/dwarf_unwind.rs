//! Unwind rules for `cstack=dwarf`: each loaded ELF object's call frame information
//! (`.eh_frame`) reduced, outside the signal handler, to a sorted table of rows the handler can
//! binary-search: from which pc on, how the caller's stack pointer (the CFA) follows from the
//! stack or frame pointer, and where the caller's frame pointer was saved. Code built without
//! frame pointers (Debian's zlib and glibc) is walked through this way. Tables are built once
//! per object and never freed; the handler reads a snapshot published by an atomic pointer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use gimli::{CfaRule, RegisterRule, UnwindSection, X86_64};
use object::{Object, ObjectSection, ObjectSegment};

/// How the CFA follows from the registers at a row's pcs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum CfaBase {
    /// The rule is not one the handler follows (an expression, another register, too large an
    /// offset): the frame-pointer step is taken instead.
    Unknown = 0,
    StackPointer = 1,
    FramePointer = 2,
}

/// One row: from `pc` (the object's own address, as its ELF file counts) until the next row's.
/// Eight bytes, so that libjvm.so's hundreds of thousands of rows stay a few MiB.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Row {
    pub pc: u32,
    /// CFA = base register + this.
    pub cfa_offset: u16,
    /// 0: the caller's frame pointer is still in rbp; n: it was saved at CFA - 8n.
    pub saved_fp_slot: u8,
    pub cfa_base: CfaBase,
}

const UNKNOWN_ROW: Row = Row {
    pc: 0,
    cfa_offset: 0,
    saved_fp_slot: 0,
    cfa_base: CfaBase::Unknown,
};

/// What the handler does for one frame: the CFA from a register, and where the caller's frame
/// pointer is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FrameRule {
    pub cfa_from_frame_pointer: bool,
    pub cfa_offset: usize,
    pub saved_fp_slot: u8,
}

/// One executable mapping of an object, with the rows of its object.
struct MappedRows {
    start: usize,
    end: usize,
    /// Runtime address minus the object's own address.
    bias: usize,
    rows: &'static [Row],
}

/// The mappings with rules, sorted by start.
pub struct UnwindTables {
    mappings: Box<[MappedRows]>,
}

impl UnwindTables {
    /// The rule for the code at `pc`, if its object has a row for it that the handler can
    /// follow. Binary searches over plain data, no indexing that can panic: async-signal-safe.
    pub fn rule_for(&self, pc: usize) -> Option<FrameRule> {
        let after = self.mappings.partition_point(|mapping| mapping.start <= pc);
        let mapping = self.mappings.get(after.checked_sub(1)?)?;
        if pc >= mapping.end {
            return None;
        }
        let own_pc = u32::try_from(pc.wrapping_sub(mapping.bias)).ok()?;
        let after = mapping.rows.partition_point(|row| row.pc <= own_pc);
        let row = mapping.rows.get(after.checked_sub(1)?)?;
        let cfa_from_frame_pointer = match row.cfa_base {
            CfaBase::Unknown => return None,
            CfaBase::StackPointer => false,
            CfaBase::FramePointer => true,
        };
        Some(FrameRule {
            cfa_from_frame_pointer,
            cfa_offset: usize::from(row.cfa_offset),
            saved_fp_slot: row.saved_fp_slot,
        })
    }
}

/// The newest snapshot; older ones are leaked, since a handler may still read one.
static TABLES: AtomicPtr<UnwindTables> = AtomicPtr::new(std::ptr::null_mut());

/// The snapshot the handler reads, if one was built.
pub fn current() -> Option<&'static UnwindTables> {
    let tables = TABLES.load(Ordering::Acquire);
    // SAFETY: published snapshots are never freed.
    (!tables.is_null()).then(|| unsafe { &*tables })
}

/// Each executable mapping's (bias, rows), so that a refresh after a library came or went
/// opens only the new ones.
static BUILT: Mutex<Option<BuiltRows>> = Mutex::new(None);

/// (bias, rows) by (object's path, mapping's start, its file offset).
type BuiltRows = HashMap<(String, usize, usize), (usize, &'static [Row])>;

/// Builds rows for the objects now loaded that have none yet and publishes a new snapshot.
/// Never called from the handler. Returns the snapshot's mappings and rows.
///
/// The JVM's own library is by far the largest (a second and more of parsing in a debug build):
/// the others' rows are published first, so that a library the program loads (zlib under
/// java.util.zip, a JNI library of its own) is walked by its rules while the JVM's are built.
pub fn refresh() -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    let mappings: Vec<crate::native_symbols::Mapping> = maps
        .lines()
        .filter_map(crate::native_symbols::Mapping::parse)
        .filter(|mapping| mapping.executable && mapping.path.starts_with('/'))
        .collect();
    let is_jvm = |mapping: &crate::native_symbols::Mapping| mapping.path.ends_with("/libjvm.so");
    let jvm_is_new = mappings
        .iter()
        .any(|mapping| is_jvm(mapping) && !built.contains_key(&key_of(mapping)));
    if jvm_is_new {
        build_and_publish(built, mappings.iter().filter(|mapping| !is_jvm(mapping)));
    }
    Some(build_and_publish(built, mappings.iter()))
}

/// Where a mapping's rows are kept in [`BUILT`].
fn key_of(mapping: &crate::native_symbols::Mapping) -> (String, usize, usize) {
    (mapping.path.clone(), mapping.start, mapping.offset)
}

/// Builds the rows `mappings` have none of yet, and publishes a snapshot of `mappings`' rows:
/// its mappings and rows.
fn build_and_publish<'a>(
    built: &mut BuiltRows,
    mappings: impl Iterator<Item = &'a crate::native_symbols::Mapping>,
) -> (usize, usize) {
    let mut published = Vec::new();
    for mapping in mappings {
        let (bias, rows) = *built
            .entry(key_of(mapping))
            .or_insert_with(|| rows_of_mapping(mapping).unwrap_or((0, &[])));
        if rows.is_empty() {
            continue;
        }
        published.push(MappedRows {
            start: mapping.start,
            end: mapping.end,
            bias,
            rows,
        });
    }
    published.sort_unstable_by_key(|mapping| mapping.start);
    let counts = (
        published.len(),
        published.iter().map(|m| m.rows.len()).sum::<usize>(),
    );
    let snapshot = Box::into_raw(Box::new(UnwindTables {
        mappings: published.into_boxed_slice(),
    }));
    TABLES.store(snapshot, Ordering::Release);
    counts
}

/// The load bias of a mapping and its object's rows (never freed).
fn rows_of_mapping(mapping: &crate::native_symbols::Mapping) -> Option<(usize, &'static [Row])> {
    let file = crate::native_symbols::MappedFile::open(&mapping.path)?;
    let object = object::File::parse(file.bytes()).ok()?;
    let own_address = own_address_of(&object, mapping.offset as u64)?;
    let bias = mapping.start.wrapping_sub(own_address as usize);
    Some((bias, Box::leak(rows_of(&object).into_boxed_slice())))
}

/// The object's own address of a mapping's file offset (page-aligned). Linkers such as lld
/// start a segment mid-page, so the page before it in the file can belong to the previous
/// segment too: the last segment whose page holds the offset is the one mapped there.
fn own_address_of(object: &object::File, file_offset: u64) -> Option<u64> {
    const PAGE: u64 = 4096;
    object
        .segments()
        .filter_map(|segment| {
            let (offset, size) = segment.file_range();
            (offset & !(PAGE - 1) <= file_offset && file_offset < offset + size).then(|| {
                segment
                    .address()
                    .wrapping_sub(offset.wrapping_sub(file_offset))
            })
        })
        .last()
}

/// The rows of an object's `.eh_frame`, sorted by pc, gaps between functions marked unknown,
/// neighbours with the same rule merged. Empty when it has none (or not in 32-bit addresses).
pub fn rows_of(object: &object::File) -> Vec<Row> {
    let Some(section) = object.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let eh_frame = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = object.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut context = Box::new(gimli::UnwindContext::new());
    // (pc, 0 for a row, 1 for the end of a function): where a function ends and the next one
    // starts, the start wins.
    let mut marks: Vec<(u64, u8, Row)> = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else {
            continue;
        };
        let Ok(mut table) = fde.rows(&eh_frame, &bases, &mut context) else {
            continue;
        };
        let mut end = fde.end_address();
        while let Ok(Some(row)) = table.next_row() {
            marks.push((row.start_address(), 0, row_of(row)));
            end = end.max(row.end_address());
        }
        marks.push((end, 1, UNKNOWN_ROW));
    }
    marks.sort_unstable_by_key(|&(pc, end, _)| (pc, end));
    let mut rows: Vec<Row> = Vec::with_capacity(marks.len() / 2);
    let mut last_pc = None;
    for (pc, _, row) in marks {
        let Ok(pc) = u32::try_from(pc) else {
            break;
        };
        if last_pc == Some(pc) {
            continue;
        }
        last_pc = Some(pc);
        let same_rule = rows.last().is_some_and(|last| {
            (last.cfa_offset, last.saved_fp_slot, last.cfa_base)
                == (row.cfa_offset, row.saved_fp_slot, row.cfa_base)
        });
        if !same_rule {
            rows.push(Row { pc, ..row });
        }
    }
    rows.shrink_to_fit();
    rows
}

/// A row of gimli's table reduced to what the handler follows: CFA = rsp or rbp + offset, the
/// return address at CFA - 8, the caller's rbp unchanged or saved on the stack below the CFA.
fn row_of<R: gimli::ReaderOffset>(row: &gimli::UnwindTableRow<R>) -> Row {
    let (cfa_base, offset) = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
            (CfaBase::StackPointer, *offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RBP => {
            (CfaBase::FramePointer, *offset)
        }
        _ => return UNKNOWN_ROW,
    };
    let Ok(cfa_offset) = u16::try_from(offset) else {
        return UNKNOWN_ROW;
    };
    if !matches!(row.register(X86_64::RA), RegisterRule::Offset(-8)) {
        return UNKNOWN_ROW;
    }
    let saved_fp_slot = match row.register(X86_64::RBP) {
        RegisterRule::Undefined | RegisterRule::SameValue => 0,
        RegisterRule::Offset(at) if at < 0 && at % 8 == 0 => match u8::try_from(-at / 8) {
            Ok(slot) => slot,
            Err(_) => return UNKNOWN_ROW,
        },
        _ => return UNKNOWN_ROW,
    };
    Row {
        pc: 0,
        cfa_offset,
        saved_fp_slot,
        cfa_base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path of the loaded libc, from /proc/self/maps.
    fn loaded_libc() -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(crate::native_symbols::Mapping::parse)
            .find(|mapping| mapping.path.contains("/libc.so") && mapping.executable)
            .expect("libc mapped")
            .path
    }

    #[test]
    fn libc_rows_are_sorted_and_its_functions_have_sane_rules() {
        let file = crate::native_symbols::MappedFile::open(&loaded_libc()).unwrap();
        let object = object::File::parse(file.bytes()).unwrap();
        let rows = rows_of(&object);
        assert!(rows.len() > 1000, "{} rows", rows.len());
        assert!(rows.windows(2).all(|pair| pair[0].pc < pair[1].pc));
        // At a function's first instruction only the return address is on the stack: CFA =
        // rsp + 8, the caller's rbp untouched. glibc's getenv then pushes the registers it
        // keeps (rbp among them) and reserves room: larger offsets, rbp saved inside the frame.
        use object::ObjectSymbol;
        let entry = object
            .dynamic_symbols()
            .find(|symbol| symbol.name() == Ok("getenv"))
            .expect("getenv exported")
            .address() as u32;
        let first = rows.partition_point(|row| row.pc <= entry) - 1;
        let row = rows[first];
        assert_eq!(
            (row.pc, row.cfa_base, row.cfa_offset, row.saved_fp_slot),
            (entry, CfaBase::StackPointer, 8, 0),
            "{row:?} at {entry:x}"
        );
        let end = rows[first..]
            .iter()
            .position(|row| row.cfa_base == CfaBase::Unknown)
            .map_or(rows.len(), |at| first + at);
        let body = &rows[first..end];
        assert!(body.iter().any(|row| row.cfa_offset > 8), "{body:?}");
        assert!(body.iter().any(|row| row.saved_fp_slot != 0), "{body:?}");
        assert!(rows
            .iter()
            .filter(|row| row.cfa_base != CfaBase::Unknown)
            .all(|row| row.cfa_offset >= 8));
    }

    #[test]
    fn published_tables_find_this_test_binary_and_not_the_heap() {
        let (mappings, rows) = refresh().expect("maps readable");
        assert!(mappings > 0 && rows > 0);
        let tables = current().expect("published");
        let here = published_tables_find_this_test_binary_and_not_the_heap as *const () as usize;
        // Rust code has .eh_frame too: the pc just after this function's entry is covered.
        let rule = tables
            .rule_for(here)
            .expect("a rule for this function's entry");
        assert_eq!(rule.cfa_offset, 8);
        assert!(!rule.cfa_from_frame_pointer);
        let heap = Box::new(0u64);
        assert!(tables.rule_for(&*heap as *const u64 as usize).is_none());
    }
}
