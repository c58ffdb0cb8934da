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
    /// DELAY_SPIN: a busy loop of `nanos` nanoseconds, then `spun(elapsed)`.
    Spins,
}

/// The delay class's internal name: what `delay=` puts into the chosen method.
pub const DELAY_CLASS: &str = "openprof/Delay";
/// The delay's length in nanoseconds, which the agent sets before any delayed code runs.
pub const DELAY_NANOS_FIELD: (&str, &str) = ("nanos", "J");
/// Where the busy loop leaves its result, so that the JIT cannot drop the loop.
const DELAY_SINK_FIELD: (&str, &str) = ("sink", "J");
/// One call in this many spins (at least 1), which the agent sets with the length.
pub const DELAY_EVERY_FIELD: (&str, &str) = ("every", "J");
/// The calls left until the next spin, counted down (racy between threads: which calls spin
/// need not be exact, the count of delays is the agent's). A count down, not a count modulo
/// `every`: a 64-bit division on every call cost Clojure's `Numbers.ops` (120 million calls)
/// seconds of its own time, which the referee then had to tell from the method's.
const DELAY_CALLS_FIELD: (&str, &str) = ("calls", "J");
/// The delay itself:
///
/// ```java
/// static void spin() {
///     if (--calls > 0) return;
///     calls = every;
///     long cpu = clock();
///     long start = System.nanoTime(), end = start + nanos, x = sink, now;
///     do {
///         for (int i = 0; i < 256; i++) x = x * 6364136223846793005L + 1442695040888963407L;
///         now = System.nanoTime();
///     } while (now < end);
///     sink = x;
///     spun(cpu);
/// }
/// ```
///
/// Most of its time is Java arithmetic, compiled (and inlined into the delayed method) like
/// the program's own code; the clock is read once every 256 rounds. It spins for `nanos` of
/// elapsed time; what it cost is the thread's CPU time from `clock()` to `spun`, which a
/// thread that was made to wait meanwhile did not spend.
pub const DELAY_SPIN: (&str, &str) = ("spin", "()V");
/// The agent's native that counts one delay and the CPU time it took since `clock()` said
/// `cpu`.
pub const DELAY_SPUN: (&str, &str) = ("spun", "(J)V");
/// The agent's native that reads the calling thread's CPU time, in nanoseconds.
pub const DELAY_CLOCK: (&str, &str) = ("clock", "()J");

/// The class file of Delay: its fields, DELAY_SPIN and the native DELAY_SPUN.
pub fn delay_class_file() -> Vec<u8> {
    let (spun, spun_descriptor) = DELAY_SPUN;
    let (clock, clock_descriptor) = DELAY_CLOCK;
    static_class_file_with(
        DELAY_CLASS,
        &[
            DELAY_NANOS_FIELD,
            DELAY_SINK_FIELD,
            DELAY_EVERY_FIELD,
            DELAY_CALLS_FIELD,
        ],
        &[
            StaticMethod::Native {
                name: spun,
                descriptor: spun_descriptor,
            },
            StaticMethod::Native {
                name: clock,
                descriptor: clock_descriptor,
            },
            StaticMethod::Spins,
        ],
    )
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
    code_attribute_with_frames(pool, max_stack, max_locals, bytecode, None)
}

/// The same, with a StackMapTable of `frames` (its entries, already encoded, and their count)
/// for code that branches.
fn code_attribute_with_frames(
    pool: &mut Pool,
    max_stack: u16,
    max_locals: u16,
    bytecode: &[u8],
    frames: Option<(u16, &[u8])>,
) -> Vec<u8> {
    let code_name = pool.utf8("Code");
    let stack_map = frames.map(|(count, entries)| {
        let mut attribute = Vec::new();
        attribute.extend(pool.utf8("StackMapTable").to_be_bytes());
        attribute.extend((2 + entries.len() as u32).to_be_bytes());
        attribute.extend(count.to_be_bytes());
        attribute.extend(entries);
        attribute
    });
    let attributes_length = stack_map.as_ref().map_or(0, Vec::len) as u32;
    let mut code = Vec::new();
    code.extend(code_name.to_be_bytes());
    code.extend((12 + bytecode.len() as u32 + attributes_length).to_be_bytes());
    code.extend(max_stack.to_be_bytes());
    code.extend(max_locals.to_be_bytes());
    code.extend((bytecode.len() as u32).to_be_bytes());
    code.extend(bytecode);
    code.extend(0_u16.to_be_bytes()); // exception table
    match stack_map {
        Some(stack_map) => {
            code.extend(1_u16.to_be_bytes());
            code.extend(stack_map);
        }
        None => code.extend(0_u16.to_be_bytes()),
    }
    code
}

/// DELAY_SPIN's Code attribute (see its documentation for the Java it is).
fn spin_code(pool: &mut Pool, this_class: u16) -> Vec<u8> {
    let system = pool.class("java/lang/System");
    let [clock_high, clock_low] = pool.method_ref(system, "nanoTime", "()J").to_be_bytes();
    let [nanos_high, nanos_low] = pool.field_ref(this_class, DELAY_NANOS_FIELD).to_be_bytes();
    let [sink_high, sink_low] = pool.field_ref(this_class, DELAY_SINK_FIELD).to_be_bytes();
    let (spun, spun_descriptor) = DELAY_SPUN;
    let [spun_high, spun_low] = pool
        .method_ref(this_class, spun, spun_descriptor)
        .to_be_bytes();
    let mut long_constant = |value: u64| {
        let mut entry = vec![5]; // CONSTANT_Long, which takes two pool slots
        entry.extend(value.to_be_bytes());
        let known = pool.entries.len();
        let index = pool.add(entry);
        if pool.entries.len() > known {
            pool.entries.push(Vec::new()); // the unusable second slot, written as nothing
        }
        index.to_be_bytes()
    };
    let [multiplier_high, multiplier_low] = long_constant(6364136223846793005);
    let [increment_high, increment_low] = long_constant(1442695040888963407);
    let (clock, clock_descriptor) = DELAY_CLOCK;
    let [cpu_high, cpu_low] = pool
        .method_ref(this_class, clock, clock_descriptor)
        .to_be_bytes();
    let [every_high, every_low] = pool.field_ref(this_class, DELAY_EVERY_FIELD).to_be_bytes();
    let [calls_high, calls_low] = pool.field_ref(this_class, DELAY_CALLS_FIELD).to_be_bytes();
    // Which calls spin: the offsets in the comments below start after these 21 bytes.
    #[rustfmt::skip]
    let prefix = [
        0xB2, calls_high, calls_low,   //  0 getstatic calls
        0x0A,                          //  3 lconst_1
        0x65,                          //  4 lsub
        0x5C,                          //  5 dup2
        0xB3, calls_high, calls_low,   //  6 putstatic calls
        0x09,                          //  9 lconst_0
        0x94,                          // 10 lcmp
        0x9E, 0, 4,                    // 11 ifle DUE (15)
        0xB1,                          // 14 return
        0xB2, every_high, every_low,   // 15 DUE: getstatic every
        0xB3, calls_high, calls_low,   // 18 putstatic calls
    ];
    // Locals: 0-1 start, 2-3 end, 4-5 x, 6-7 now, 8 i, 9-10 cpu.
    #[rustfmt::skip]
    let spin = [
        0xB8, cpu_high, cpu_low,       //  0 RUN: invokestatic clock
        0x37, 9,                       //  3 lstore 9 (cpu)
        0xB8, clock_high, clock_low,   //  5 invokestatic System.nanoTime
        0x3F,                          //  8 lstore_0 (start)
        0x1E,                          //  9 lload_0
        0xB2, nanos_high, nanos_low,   // 10 getstatic nanos
        0x61,                          // 13 ladd
        0x41,                          // 14 lstore_2 (end)
        0xB2, sink_high, sink_low,     // 15 getstatic sink
        0x37, 4,                       // 18 lstore 4 (x)
        0x03,                          // 20 OUTER: iconst_0
        0x36, 8,                       // 21 istore 8 (i)
        0x15, 8,                       // 23 INNER: iload 8
        0x11, 1, 0,                    // 25 sipush 256
        0xA2, 0, 21,                   // 28 if_icmpge EXIT (49)
        0x16, 4,                       // 31 lload 4
        0x14, multiplier_high, multiplier_low, // 33 ldc2_w
        0x69,                          // 36 lmul
        0x14, increment_high, increment_low,   // 37 ldc2_w
        0x61,                          // 40 ladd
        0x37, 4,                       // 41 lstore 4
        0x84, 8, 1,                    // 43 iinc 8 1
        0xA7, 0xFF, 0xE9,              // 46 goto INNER (-23)
        0xB8, clock_high, clock_low,   // 49 EXIT: invokestatic System.nanoTime
        0x37, 6,                       // 52 lstore 6 (now)
        0x16, 6,                       // 54 lload 6
        0x20,                          // 56 lload_2
        0x94,                          // 57 lcmp
        0x9B, 0xFF, 0xDA,              // 58 iflt OUTER (-38)
        0x16, 4,                       // 61 lload 4
        0xB3, sink_high, sink_low,     // 63 putstatic sink
        0x16, 9,                       // 66 lload 9
        0xB8, spun_high, spun_low,     // 68 invokestatic spun
        0xB1,                          // 71 return
    ];
    let bytecode: Vec<u8> = prefix.iter().chain(&spin).copied().collect();
    const LONG: u8 = 4;
    const INT: u8 = 1;
    const TOP: u8 = 0;
    #[rustfmt::skip]
    let frames = [
        // DUE (15): no locals (a same_frame, its type its offset)
        15,
        // OUTER (21 + 20): start, end, x, -, cpu
        255, 0, 25, 0, 7, LONG, LONG, LONG, TOP, TOP, TOP, LONG, 0, 0,
        // INNER (23): start, end, x, -, i, cpu
        255, 0, 2, 0, 7, LONG, LONG, LONG, TOP, TOP, INT, LONG, 0, 0,
        25, // EXIT (49): as INNER
    ];
    code_attribute_with_frames(pool, 4, 11, &bytecode, Some((4, &frames)))
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
            StaticMethod::Spins => {
                let code = spin_code(&mut pool, this_class);
                let (name, descriptor) = DELAY_SPIN;
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
