//! The classes the agent defines itself, as class-file bytes, so that it needs no compiled Java
//! shipped beside it: `openprof/MptHook` and `openprof/CallHook`, which instrumented methods
//! call (static natives only, bound with RegisterNatives), and `openprof/ParkHook`, whose one Java method calls its native
//! (the lock profile's rebinding of `Unsafe.park` must be done from a Java frame of a class the
//! bootstrap loader defined, or HotSpot warns about it on the program's output).

use crate::access::{FINAL, NATIVE, PUBLIC, STATIC, SUPER};
use crate::{CALL_HOOK_METHODS, HOOK_METHODS};

/// The parameter tracing hook class's internal name.
pub const HOOK_CLASS: &str = "openprof/MptHook";

/// The call hook class's internal name.
pub const CALL_HOOK_CLASS: &str = "openprof/CallHook";

/// The park hook class's internal name.
pub const PARK_HOOK_CLASS: &str = "openprof/ParkHook";
/// The park hook's native method (`()V`), which the agent binds and which does the rebinding.
pub const PARK_HOOK_NATIVE: &str = "bind0";
/// The park hook's Java method (`()V`), which calls the native: what the agent calls.
pub const PARK_HOOK_METHOD: &str = "bind";

/// A static method of a class the agent defines.
enum StaticMethod<'a> {
    /// `public static native NAME DESCRIPTOR`.
    Native { name: &'a str, descriptor: &'a str },
    /// `public static void NAME() { CALLEE(); }`, CALLEE a `()V` method of the same class.
    Calls { name: &'a str, callee: &'a str },
    /// COVERAGE_COUNT: `unsafe.getAndAddLong(counters, longBase + ((long) block << 3), 1L)`.
    CountsBlock,
}

/// The class file of MptHook: `public final class openprof.MptHook` with a `public static
/// native` method for each of HOOK_METHODS.
pub fn hook_class_file() -> Vec<u8> {
    let methods: Vec<StaticMethod> = HOOK_METHODS
        .iter()
        .map(|(name, descriptor)| StaticMethod::Native { name, descriptor })
        .collect();
    static_class_file(HOOK_CLASS, &methods)
}

/// The call hook class's field holding the coverage counters: one `long[]` of counters per
/// class, by the class's coverage slot.
pub const COVERAGE_FIELD: (&str, &str) = ("blocks", "[[J");
/// The call hook's method that counts one run of a block: `count(long[] counters, int block)`
/// adds one to `counters[block]` atomically.
pub const COVERAGE_COUNT: (&str, &str) = ("count", "([JI)V");
/// The call hook's fields `count` works with, which the agent sets before any class counts:
/// the JDK's internal `Unsafe` and the offset of a `long[]`'s first element.
pub const COVERAGE_UNSAFE_FIELD: (&str, &str) = ("unsafe", "Ljdk/internal/misc/Unsafe;");
pub const COVERAGE_BASE_FIELD: (&str, &str) = ("longBase", "J");
/// The class `count` calls: its `getAndAddLong(Object, long, long)` is one atomic add, with no
/// call into any other class and nothing to link (a VarHandle's first use runs JDK code that
/// the filters may have let the rewriter count, which would count again, forever).
pub const UNSAFE_CLASS: &str = "jdk/internal/misc/Unsafe";

/// The class file of CallHook: `public final class openprof.CallHook` with a `public static
/// native` method for each of CALL_HOOK_METHODS, the coverage counters' fields and COVERAGE_COUNT.
pub fn call_hook_class_file() -> Vec<u8> {
    let mut methods: Vec<StaticMethod> = CALL_HOOK_METHODS
        .iter()
        .map(|(name, descriptor)| StaticMethod::Native { name, descriptor })
        .collect();
    methods.push(StaticMethod::CountsBlock);
    static_class_file_with(
        CALL_HOOK_CLASS,
        &[COVERAGE_FIELD, COVERAGE_UNSAFE_FIELD, COVERAGE_BASE_FIELD],
        &methods,
    )
}

/// The class file of ParkHook: `static native void bind0()` and `static void bind() {
/// bind0(); }`.
pub fn park_hook_class_file() -> Vec<u8> {
    static_class_file(
        PARK_HOOK_CLASS,
        &[
            StaticMethod::Native {
                name: PARK_HOOK_NATIVE,
                descriptor: "()V",
            },
            StaticMethod::Calls {
                name: PARK_HOOK_METHOD,
                callee: PARK_HOOK_NATIVE,
            },
        ],
    )
}

/// The constant pool being built: entries in order, each as its bytes.
#[derive(Default)]
struct Pool {
    entries: Vec<Vec<u8>>,
}

impl Pool {
    /// The index of an entry, added if it is not there yet.
    fn add(&mut self, entry: Vec<u8>) -> u16 {
        if let Some(index) = self.entries.iter().position(|existing| *existing == entry) {
            return index as u16 + 1;
        }
        self.entries.push(entry);
        self.entries.len() as u16
    }

    fn utf8(&mut self, text: &str) -> u16 {
        let mut entry = vec![1];
        entry.extend((text.len() as u16).to_be_bytes());
        entry.extend(text.as_bytes());
        self.add(entry)
    }

    fn class(&mut self, internal_name: &str) -> u16 {
        let name = self.utf8(internal_name);
        let mut entry = vec![7];
        entry.extend(name.to_be_bytes());
        self.add(entry)
    }

    fn method_ref(&mut self, class: u16, name: &str, descriptor: &str) -> u16 {
        self.member_ref(10, class, name, descriptor)
    }

    fn field_ref(&mut self, class: u16, (name, descriptor): (&str, &str)) -> u16 {
        self.member_ref(9, class, name, descriptor)
    }

    fn member_ref(&mut self, tag: u8, class: u16, name: &str, descriptor: &str) -> u16 {
        let name = self.utf8(name);
        let descriptor = self.utf8(descriptor);
        let mut name_and_type = vec![12];
        name_and_type.extend(name.to_be_bytes());
        name_and_type.extend(descriptor.to_be_bytes());
        let name_and_type = self.add(name_and_type);
        let mut entry = vec![tag];
        entry.extend(class.to_be_bytes());
        entry.extend(name_and_type.to_be_bytes());
        self.add(entry)
    }
}

/// A Code attribute: straight-line `bytecode` with no handlers and no attributes.
fn code_attribute(pool: &mut Pool, max_stack: u16, max_locals: u16, bytecode: &[u8]) -> Vec<u8> {
    let code_name = pool.utf8("Code");
    let mut code = Vec::new();
    code.extend(code_name.to_be_bytes());
    code.extend((12 + bytecode.len() as u32).to_be_bytes());
    code.extend(max_stack.to_be_bytes());
    code.extend(max_locals.to_be_bytes());
    code.extend((bytecode.len() as u32).to_be_bytes());
    code.extend(bytecode);
    code.extend(0_u16.to_be_bytes()); // exception table
    code.extend(0_u16.to_be_bytes()); // attributes
    code
}

/// `public final class NAME extends Object` with these static methods, version 52 (Java 8) so
/// that any JVM we run in takes it. The methods' code is straight-line (no stack map needed).
fn static_class_file(name: &str, methods: &[StaticMethod]) -> Vec<u8> {
    static_class_file_with(name, &[], methods)
}

/// The same, with `public static` fields (name, descriptor).
fn static_class_file_with(
    name: &str,
    fields: &[(&str, &str)],
    methods: &[StaticMethod],
) -> Vec<u8> {
    let mut pool = Pool::default();
    let this_class = pool.class(name);
    let super_class = pool.class("java/lang/Object");
    // Each method as (access, name, descriptor, Code attribute's bytes if it has code).
    let mut tables: Vec<(u16, u16, u16, Option<Vec<u8>>)> = Vec::new();
    for method in methods {
        tables.push(match method {
            StaticMethod::Native { name, descriptor } => (
                PUBLIC | STATIC | NATIVE,
                pool.utf8(name),
                pool.utf8(descriptor),
                None,
            ),
            StaticMethod::Calls { name, callee } => {
                let callee = pool.method_ref(this_class, callee, "()V");
                // invokestatic callee; return
                let bytecode = [0xB8, (callee >> 8) as u8, callee as u8, 0xB1];
                let code = code_attribute(&mut pool, 0, 0, &bytecode);
                (
                    PUBLIC | STATIC,
                    pool.utf8(name),
                    pool.utf8("()V"),
                    Some(code),
                )
            }
            StaticMethod::CountsBlock => {
                let unsafe_field = pool.field_ref(this_class, COVERAGE_UNSAFE_FIELD);
                let base_field = pool.field_ref(this_class, COVERAGE_BASE_FIELD);
                let unsafe_class = pool.class(UNSAFE_CLASS);
                let add = pool.method_ref(unsafe_class, "getAndAddLong", "(Ljava/lang/Object;JJ)J");
                let [unsafe_high, unsafe_low] = unsafe_field.to_be_bytes();
                let [base_high, base_low] = base_field.to_be_bytes();
                let [add_high, add_low] = add.to_be_bytes();
                let bytecode = [
                    0xB2,
                    unsafe_high,
                    unsafe_low, // getstatic unsafe
                    0x2A,       // aload_0: counters
                    0xB2,
                    base_high,
                    base_low, // getstatic longBase
                    0x1B,     // iload_1: block
                    0x85,     // i2l
                    0x06,     // iconst_3
                    0x79,     // lshl
                    0x61,     // ladd
                    0x0A,     // lconst_1
                    0xB6,
                    add_high,
                    add_low, // invokevirtual getAndAddLong
                    0x58,    // pop2
                    0xB1,    // return
                ];
                let code = code_attribute(&mut pool, 7, 2, &bytecode);
                let (name, descriptor) = COVERAGE_COUNT;
                (
                    PUBLIC | STATIC,
                    pool.utf8(name),
                    pool.utf8(descriptor),
                    Some(code),
                )
            }
        });
    }

    let field_names: Vec<(u16, u16)> = fields
        .iter()
        .map(|(name, descriptor)| (pool.utf8(name), pool.utf8(descriptor)))
        .collect();
    let mut out = Vec::new();
    out.extend(0xCAFE_BABE_u32.to_be_bytes());
    out.extend(0_u16.to_be_bytes());
    out.extend(52_u16.to_be_bytes());
    out.extend((pool.entries.len() as u16 + 1).to_be_bytes());
    for entry in &pool.entries {
        out.extend(entry);
    }
    out.extend((PUBLIC | FINAL | SUPER).to_be_bytes());
    out.extend(this_class.to_be_bytes());
    out.extend(super_class.to_be_bytes());
    out.extend(0_u16.to_be_bytes()); // interfaces
    out.extend((fields.len() as u16).to_be_bytes());
    for (index, _) in fields.iter().enumerate() {
        out.extend((PUBLIC | STATIC).to_be_bytes());
        out.extend(field_names[index].0.to_be_bytes());
        out.extend(field_names[index].1.to_be_bytes());
        out.extend(0_u16.to_be_bytes()); // attributes
    }
    out.extend((tables.len() as u16).to_be_bytes());
    for (access, name, descriptor, code) in tables {
        out.extend(access.to_be_bytes());
        out.extend(name.to_be_bytes());
        out.extend(descriptor.to_be_bytes());
        match code {
            Some(code) => {
                out.extend(1_u16.to_be_bytes());
                out.extend(code);
            }
            None => out.extend(0_u16.to_be_bytes()),
        }
    }
    out.extend(0_u16.to_be_bytes()); // class attributes
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::ClassFile;

    #[test]
    fn the_hook_class_file_is_well_formed() {
        let bytes = hook_class_file();
        assert_eq!(&bytes[..4], &[0xCA, 0xFE, 0xBA, 0xBE]);
        // Each hook method's name and descriptor is in the constant pool.
        let text = String::from_utf8_lossy(&bytes);
        for (name, descriptor) in HOOK_METHODS {
            assert!(text.contains(name) && text.contains(descriptor));
        }
        // Ends with the method table and no class attributes.
        assert_eq!(&bytes[bytes.len() - 2..], &[0, 0]);
    }

    #[test]
    fn the_park_hook_calls_its_native_from_java() {
        let bytes = park_hook_class_file();
        let class = ClassFile::parse(&bytes).expect("a class file our own reader reads");
        // (name, descriptor, access, the contents of its Code attribute if it has one)
        let methods: Vec<(&str, &str, u16, Option<&[u8]>)> = class
            .methods
            .iter()
            .map(|method| {
                let code = method
                    .attributes
                    .iter()
                    .find(|attribute| class.utf8(attribute.name) == Some("Code"))
                    .map(|attribute| &bytes[attribute.start..attribute.end]);
                (
                    class.utf8(method.name).unwrap(),
                    class.utf8(method.descriptor).unwrap(),
                    method.access,
                    code,
                )
            })
            .collect();
        assert_eq!(methods.len(), 2);
        assert_eq!(
            methods[0],
            (PARK_HOOK_NATIVE, "()V", PUBLIC | STATIC | NATIVE, None)
        );
        let (name, descriptor, access, code) = methods[1];
        assert_eq!(
            (name, descriptor, access),
            (PARK_HOOK_METHOD, "()V", PUBLIC | STATIC)
        );
        // max_stack, max_locals, code_length 4, then `invokestatic bind0; return`.
        let code = code.expect("bind has code");
        assert_eq!(&code[..8], &[0, 0, 0, 0, 0, 0, 0, 4]);
        assert_eq!((code[8], code[11]), (0xB8, 0xB1));
        let callee = u16::from_be_bytes([code[9], code[10]]);
        assert!(callee > 0 && callee < class.pool_count);
    }
}
