//! Line coverage's counters, in the JVM: each class the call hooks rewrite with coverage gets a
//! slot, a `long[]` with a counter for each of its basic blocks, in the hook class's `blocks`
//! array; its code counts a block's run with the hook class's `count`, one atomic add through
//! the JDK's internal `Unsafe`, with no call into the agent (so JIT-compiled code counts at the
//! cost of an atomic add) and into no class the rewriter may count. The counts are read when
//! the trace ends.

use std::collections::HashMap;
use std::sync::Mutex;

use openprof_classfile::{
    ClassFileError, Instrumented, COVERAGE_BASE_FIELD, COVERAGE_FIELD, COVERAGE_UNSAFE_FIELD,
    UNSAFE_CLASS,
};

use crate::jni::{Jni, Primitive};
use crate::jvmti::{jclass, jfieldID, jobject, Jvmti};
use crate::sync::lock;

/// Where a site's blocks are counted, and their source lines.
pub struct SiteBlocks {
    /// Each block's source lines, in block order.
    pub lines: Vec<Vec<u32>>,
    /// (slot, first block) of each rewrite of its class (a class retransformed again counts
    /// anew in a new slot; the counts add up).
    places: Vec<(usize, u32)>,
}

struct Slots {
    /// The hook class's `blocks` array now (a global reference) and its length.
    outer: usize,
    capacity: i32,
    /// Each slot's counters (global references).
    counters: Vec<usize>,
    sites: HashMap<u32, SiteBlocks>,
}

pub struct Coverage {
    /// The hook class, its `blocks` field, and the class `long[]`.
    hook_class: usize,
    field: usize,
    counters_class: usize,
    slots: Mutex<Slots>,
}

// SAFETY: the handles held (global references, a field id, as usize) are valid on every
// thread; the mutable state is behind a lock.
unsafe impl Send for Coverage {}
// SAFETY: as above.
unsafe impl Sync for Coverage {}

const FIRST_CAPACITY: i32 = 64;

impl Coverage {
    /// The counters' holder, once the hook class is defined: its `blocks` array made, and what
    /// its `count` works with set (the hook class's module let use `Unsafe`'s package).
    pub fn new(jvmti: Jvmti, jni: Jni, hook_class: jclass) -> Result<Coverage, String> {
        let failed = |what: &str| format!("line coverage: can't {what}");
        let (name, descriptor) = COVERAGE_FIELD;
        let field = jni
            .static_field_id(hook_class, name, descriptor)
            .map_err(|_| failed("find the hook class's counters"))?;
        let counters_class = jni
            .find_class("[J")
            .map_err(|_| failed("find the class long[]"))?;
        Self::set_the_atomic_add(jvmti, jni, hook_class, counters_class)?;
        let outer = jni
            .new_object_array(FIRST_CAPACITY, counters_class)
            .map_err(|_| failed("make the counters' array"))?;
        jni.set_static_object_field(hook_class, field, outer)
            .map_err(|_| failed("set the counters' array"))?;
        let coverage = Coverage {
            hook_class: jni.new_global_ref(hook_class) as usize,
            field: field as usize,
            counters_class: jni.new_global_ref(counters_class) as usize,
            slots: Mutex::new(Slots {
                outer: jni.new_global_ref(outer) as usize,
                capacity: FIRST_CAPACITY,
                counters: Vec::new(),
                sites: HashMap::new(),
            }),
        };
        jni.delete_local_ref(outer);
        jni.delete_local_ref(counters_class);
        Ok(coverage)
    }

    /// Sets the hook class's `unsafe` and `longBase`, and exports `Unsafe`'s package to the
    /// hook class's module, so that `count` links and runs without the agent.
    fn set_the_atomic_add(
        jvmti: Jvmti,
        jni: Jni,
        hook_class: jclass,
        long_array: jclass,
    ) -> Result<(), String> {
        let failed = |what: &str| format!("line coverage: can't {what}");
        let unsafe_class = jni
            .find_class(UNSAFE_CLASS)
            .map_err(|_| failed("find the JDK's Unsafe"))?;
        let java_base = jni
            .module_of(unsafe_class)
            .map_err(|_| failed("find java.base"))?;
        let hook_module = jni
            .module_of(hook_class)
            .map_err(|_| failed("find the hook class's module"))?;
        jvmti
            .add_module_exports(java_base, c"jdk.internal.misc", hook_module)
            .map_err(|error| failed(&format!("export Unsafe's package to the hook: {error}")))?;
        let get_unsafe = jni
            .static_method_id(unsafe_class, "getUnsafe", "()Ljdk/internal/misc/Unsafe;")
            .map_err(|_| failed("find Unsafe.getUnsafe"))?;
        // An int up to JDK 24, a long from JDK 25 on.
        let (base_offset, base_kind) = [
            (b'I', "(Ljava/lang/Class;)I"),
            (b'J', "(Ljava/lang/Class;)J"),
        ]
        .into_iter()
        .find_map(|(kind, descriptor)| {
            let found = jni.method_id(unsafe_class, "arrayBaseOffset", descriptor);
            found.ok().map(|method| (method, kind))
        })
        .ok_or_else(|| failed("find Unsafe.arrayBaseOffset"))?;
        let the_unsafe = jni
            .call_static(unsafe_class, get_unsafe, b'L', &[])
            .map_err(|_| failed("get Unsafe"))?
            .reference();
        let base = jni
            .call(
                the_unsafe,
                base_offset,
                base_kind,
                &[crate::jvmti::jvalue { l: long_array }],
            )
            .ok()
            .and_then(|value| value.primitive());
        let base = match base {
            Some(Primitive::Int(base)) => i64::from(base),
            Some(Primitive::Long(base)) => base,
            _ => return Err(failed("read a long[]'s base offset")),
        };
        let (name, descriptor) = COVERAGE_UNSAFE_FIELD;
        let unsafe_field = jni
            .static_field_id(hook_class, name, descriptor)
            .map_err(|_| failed("find the hook's unsafe field"))?;
        let (name, descriptor) = COVERAGE_BASE_FIELD;
        let base_field = jni
            .static_field_id(hook_class, name, descriptor)
            .map_err(|_| failed("find the hook's base field"))?;
        jni.set_static_object_field(hook_class, unsafe_field, the_unsafe)
            .and_then(|()| jni.set_static_long_field(hook_class, base_field, base))
            .map_err(|_| failed("set the hook's fields"))?;
        jni.delete_local_ref(the_unsafe);
        jni.delete_local_ref(hook_module);
        jni.delete_local_ref(java_base);
        jni.delete_local_ref(unsafe_class);
        Ok(())
    }

    /// Rewrites a class with the next slot (`rewrite` gets its number) and makes its counters;
    /// the slot is taken only when the class was rewritten with blocks to count.
    pub fn instrumented(
        &self,
        jni: Jni,
        rewrite: impl FnOnce(i32) -> Result<Instrumented, ClassFileError>,
    ) -> Result<Instrumented, ClassFileError> {
        let mut slots = lock(&self.slots);
        let slot = slots.counters.len();
        let instrumented = rewrite(slot as i32)?;
        let blocks: u32 = instrumented
            .blocks
            .iter()
            .map(|(_, _, lines)| lines.len() as u32)
            .sum();
        if instrumented.class_file.is_none() || blocks == 0 {
            return Ok(instrumented);
        }
        let counters = self
            .make_counters(jni, &mut slots, slot, blocks)
            .ok_or_else(|| ClassFileError::Malformed("can't make coverage counters".into()))?;
        slots.counters.push(counters);
        for (site, first, lines) in &instrumented.blocks {
            let entry = slots
                .sites
                .entry(*site as u32)
                .or_insert_with(|| SiteBlocks {
                    lines: lines.clone(),
                    places: Vec::new(),
                });
            if entry.lines.len() == lines.len() {
                entry.places.push((slot, *first));
            }
        }
        Ok(instrumented)
    }

    /// `new long[blocks]` in `blocks[slot]` of the hook class, the array grown
    /// first if needed (the old one's counters carried over, so no count is lost by code that
    /// read the old array).
    fn make_counters(
        &self,
        jni: Jni,
        slots: &mut Slots,
        slot: usize,
        blocks: u32,
    ) -> Option<usize> {
        let counters_class = self.counters_class as jclass;
        if slot as i32 >= slots.capacity {
            let capacity = slots.capacity.checked_mul(2)?;
            let outer = jni.new_object_array(capacity, counters_class).ok()?;
            for (index, &counters) in slots.counters.iter().enumerate() {
                jni.set_object_array_element(outer, index as i32, counters as jobject)
                    .ok()?;
            }
            jni.set_static_object_field(self.hook_class as jclass, self.field as jfieldID, outer)
                .ok()?;
            jni.delete_global_ref(slots.outer as jobject);
            slots.outer = jni.new_global_ref(outer) as usize;
            slots.capacity = capacity;
            jni.delete_local_ref(outer);
        }
        let counters = jni.new_long_array(blocks as i32).ok()?;
        jni.set_object_array_element(slots.outer as jobject, slot as i32, counters)
            .ok()?;
        let global = jni.new_global_ref(counters) as usize;
        jni.delete_local_ref(counters);
        Some(global)
    }

    /// The sites counted.
    pub fn sites(&self) -> Vec<u32> {
        let mut sites: Vec<u32> = lock(&self.slots).sites.keys().copied().collect();
        sites.sort_unstable();
        sites
    }

    /// A site's blocks' lines and how many times each ran since its class was rewritten.
    pub fn counts(&self, jni: Jni, site: u32) -> Option<(Vec<Vec<u32>>, Vec<u64>)> {
        let slots = lock(&self.slots);
        let blocks = slots.sites.get(&site)?;
        let mut counts = vec![0_u64; blocks.lines.len()];
        for &(slot, first) in &blocks.places {
            let counters = *slots.counters.get(slot)? as jobject;
            for (block, count) in counts.iter_mut().enumerate() {
                let index = (first + block as u32) as i32;
                let value = jni.array_element(counters, index, b'J').ok()?;
                if let Some(Primitive::Long(value)) = value.primitive() {
                    *count += value.max(0) as u64;
                }
            }
        }
        Some((blocks.lines.clone(), counts))
    }
}
