//! Names for the native pcs of CPU samples, found outside the signal handler: the pc's library
//! from /proc/self/maps, its function from that library's ELF symbol table (.symtab, else
//! .dynsym), C++ names demangled. Each library is read once; each pc is resolved once.

use std::collections::HashMap;
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use openprof_format::hprof_text::Frame;

/// What a pc outside every known library is called.
pub const UNKNOWN_NATIVE: &str = "[unknown native]";
/// What a stub the JVM generated is named by, before its own name (`[stub] jlong_disjoint_arraycopy`).
pub const STUB_PREFIX: &str = "[stub] ";
/// What a function of the JVM itself (libjvm.so: its runtime, collectors, compilers) is named
/// by, before its own name (`[vm] SharedRuntime::drem`), so that the VM's time is told apart
/// from other native code's in every view.
pub const VM_PREFIX: &str = "[vm] ";
/// The JVM's own library.
const VM_LIBRARY: &str = "libjvm.so";

/// One line of /proc/self/maps.
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    /// Where in the file the mapping starts.
    pub offset: usize,
    pub executable: bool,
    /// The file, `[vdso]` and the like, or empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    /// `start-end perms offset dev inode path`.
    pub fn parse(line: &str) -> Option<Mapping> {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let permissions = fields.next()?;
        let offset = fields.next()?;
        let _device = fields.next()?;
        let _inode = fields.next()?;
        // The path is the rest of the line (it may hold spaces).
        let path = line
            .splitn(6, char::is_whitespace)
            .nth(5)
            .unwrap_or("")
            .trim()
            .to_string();
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            offset: usize::from_str_radix(offset, 16).ok()?,
            executable: permissions.as_bytes().get(2) == Some(&b'x'),
            path,
        })
    }
}

/// A library's functions, by address as its ELF file gives them.
struct Library {
    /// Its file name, as frames name it (e.g. `libz.so.1.2.13`).
    name: String,
    /// (file offset, file size, virtual address) of each loaded segment.
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, name as the table gives it), sorted by address.
    functions: Vec<(u64, u64, Arc<str>)>,
}

impl Library {
    fn read(path: &str) -> Option<Library> {
        let name = path.rsplit('/').next().unwrap_or(path).to_string();
        let mapped = MappedFile::open(path)?;
        let file = object::File::parse(mapped.bytes()).ok()?;
        let segments = file
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        let mut functions = functions_of(file.symbols());
        if functions.is_empty() {
            functions = functions_of(file.dynamic_symbols());
        }
        functions.sort_by_key(|function| function.0);
        Some(Library {
            name,
            segments,
            functions,
        })
    }

    /// The virtual address (as the symbol table counts) of a file offset.
    fn address_of(&self, file_offset: u64) -> Option<u64> {
        self.segments.iter().find_map(|&(offset, size, address)| {
            (offset <= file_offset && file_offset < offset + size)
                .then(|| address + (file_offset - offset))
        })
    }

    /// The function holding `address`: the last one starting at or before it, if its size
    /// (when the table gives one) reaches it.
    fn function_at(&self, address: u64) -> Option<&Arc<str>> {
        let after = self.functions.partition_point(|f| f.0 <= address);
        let (start, size, name) = self.functions.get(after.checked_sub(1)?)?;
        (*size == 0 || address < start + size).then_some(name)
    }
}

/// A library's file mapped read-only: parsing it touches only the pages of its headers and
/// symbol tables (a few of libjvm.so's 24 MB), where reading it whole would copy all of it.
pub(crate) struct MappedFile {
    start: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    pub(crate) fn open(path: &str) -> Option<MappedFile> {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).ok()?;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh private read-only mapping of a file we opened; the descriptor may
        // close once mapped. Loaded libraries are not rewritten in place (the process itself
        // runs their code), so the bytes stay valid while mapped.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        (start != libc::MAP_FAILED).then_some(MappedFile { start, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes are mapped at `start` until drop.
        unsafe { std::slice::from_raw_parts(self.start.cast::<u8>(), self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `open`, once.
        unsafe { libc::munmap(self.start, self.len) };
    }
}

/// The defined functions among `symbols`: (address, size, name as the table gives it).
fn functions_of<'data: 'file, 'file, R: object::ReadRef<'data> + 'file>(
    symbols: impl Iterator<Item = object::Symbol<'data, 'file, R>>,
) -> Vec<(u64, u64, Arc<str>)> {
    symbols
        .filter(|symbol| symbol.kind() == SymbolKind::Text && symbol.is_definition())
        .filter_map(|symbol| {
            let raw = symbol.name().ok()?;
            Some((symbol.address(), symbol.size(), Arc::<str>::from(raw)))
        })
        .collect()
}

/// Rust names demangled without their hash; C++ (Itanium ABI) names without their parameter
/// lists, which HPROF's frame layout would confuse with its own parentheses; other names as
/// they are.
fn demangle(raw: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(raw) {
        return format!("{rust:#}");
    }
    if raw.starts_with("_Z") {
        let options = cpp_demangle::DemangleOptions::new().no_params();
        if let Some(demangled) = cpp_demangle::Symbol::new(raw)
            .ok()
            .and_then(|symbol| symbol.demangle_with_options(&options).ok())
        {
            return demangled;
        }
    }
    raw.to_string()
}

#[derive(Default)]
pub struct NativeSymbols {
    /// Each pc's frame, as a number into `frames`: the pcs of one function share one, so a
    /// sample's native frames are told apart and compared as numbers.
    by_pc: HashMap<usize, u32>,
    frames: Vec<Frame>,
    numbers: HashMap<Frame, u32>,
    mappings: Vec<Mapping>,
    /// By path; `None` when the file could not be read as ELF.
    libraries: HashMap<String, Option<Library>>,
}

impl NativeSymbols {
    /// The frame of a native pc: `function` in `library`, `library+0xoffset` when the library
    /// has no symbol there, [`UNKNOWN_NATIVE`] outside every library.
    #[cfg(test)]
    pub fn frame(&mut self, pc: usize) -> Frame {
        let number = self.frame_number(pc);
        self.numbered(number).clone()
    }

    /// The number of a native pc's frame: equal numbers, equal frames.
    pub fn frame_number(&mut self, pc: usize) -> u32 {
        if let Some(number) = self.by_pc.get(&pc) {
            return *number;
        }
        let frame = self.resolve(pc);
        let number = match self.numbers.get(&frame) {
            Some(number) => *number,
            None => {
                let number = self.frames.len() as u32;
                self.numbers.insert(frame.clone(), number);
                self.frames.push(frame);
                number
            }
        };
        self.by_pc.insert(pc, number);
        number
    }

    /// The frame numbered `number` by [`NativeSymbols::frame_number`].
    pub fn numbered(&self, number: u32) -> &Frame {
        &self.frames[number as usize]
    }

    fn mapping_index(&self, pc: usize) -> Option<usize> {
        self.mappings
            .iter()
            .position(|mapping| mapping.start <= pc && pc < mapping.end)
    }

    fn resolve(&mut self, pc: usize) -> Frame {
        let index = match self.mapping_index(pc) {
            Some(index) => Some(index),
            None => {
                // A library loaded since the maps were last read.
                self.mappings = std::fs::read_to_string("/proc/self/maps")
                    .map(|maps| maps.lines().filter_map(Mapping::parse).collect())
                    .unwrap_or_default();
                self.mapping_index(pc)
            }
        };
        let in_file = index
            .map(|index| &self.mappings[index])
            .filter(|mapping| !mapping.path.is_empty());
        let Some(mapping) = in_file else {
            // Anonymous memory: the JVM's code cache holds the stubs it generated.
            return match crate::code_map::stub_name(pc) {
                Some(name) => Frame::native_code("", &format!("{STUB_PREFIX}{name}")),
                None => Frame::native_code("", UNKNOWN_NATIVE),
            };
        };
        let file_offset = (pc - mapping.start + mapping.offset) as u64;
        let path = mapping.path.clone();
        let library = self
            .libraries
            .entry(path.clone())
            .or_insert_with(|| Library::read(&path));
        if let Some(library) = library {
            if let Some(function) = library
                .address_of(file_offset)
                .and_then(|address| library.function_at(address))
            {
                // Demangled only when met: libjvm.so has some 100,000 symbols.
                let name = demangle(function);
                return if library.name == VM_LIBRARY {
                    Frame::native_code(&library.name, &format!("{VM_PREFIX}{name}"))
                } else {
                    Frame::native_code(&library.name, &name)
                };
            }
        }
        let name = path.rsplit('/').next().unwrap_or(&path);
        Frame::native_code(name, &format!("{name}+0x{file_offset:x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn openprof_native_symbols_probe() -> usize {
        openprof_native_symbols_probe as *const () as usize
    }

    #[test]
    fn maps_lines_are_read() {
        let mapping = Mapping::parse(
            "7f1c2a000000-7f1c2a020000 r-xp 00002000 08:01 1234   /usr/lib/x86_64-linux-gnu/libz.so.1.2.13",
        )
        .unwrap();
        assert_eq!(
            (mapping.start, mapping.end, mapping.offset),
            (0x7f1c2a000000, 0x7f1c2a020000, 0x2000)
        );
        assert!(mapping.executable);
        assert_eq!(mapping.path, "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13");
        let anonymous = Mapping::parse("7f1c2a000000-7f1c2a020000 rw-p 00000000 00:00 0").unwrap();
        assert!(!anonymous.executable && anonymous.path.is_empty());
    }

    #[test]
    fn a_pc_of_this_binary_is_named_by_its_symbol() {
        let mut symbols = NativeSymbols::default();
        let frame = symbols.frame(openprof_native_symbols_probe() + 1);
        assert_eq!(frame.method_name, "openprof_native_symbols_probe");
        assert!(frame.class_name.starts_with("openprof_agent"), "{frame:?}");
        let heap = Box::new(0u64);
        assert_eq!(
            symbols.frame(&*heap as *const u64 as usize).method_name,
            UNKNOWN_NATIVE
        );
    }

    #[test]
    fn cpp_names_lose_their_parameters() {
        assert_eq!(
            demangle("_ZN10JavaThread17thread_main_innerEv"),
            "JavaThread::thread_main_inner"
        );
        assert_eq!(demangle("deflate_slow"), "deflate_slow");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h2f6ad95b5a3e1b1bE"),
            "core::fmt::write"
        );
    }
}
