//! Heap histograms: objects and shallow bytes per class, and GC roots by kind, for any heap dump
//! (HPROF text or binary) and the shallow-size estimate used where a dump records no sizes.
//!
//! In format, not analysis: both heap dump readers sum each object into a histogram as they read
//! it (keeping the objects would take memory in proportion to the dump), and the binary reader
//! sizes objects with [`estimate`] as it goes.

use std::collections::{BTreeMap, HashMap};

/// A kind of GC root, as HPROF's heap dumps distinguish them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RootKind {
    Unknown,
    JniGlobal,
    JniLocal,
    JavaFrame,
    NativeStack,
    /// A class the VM keeps alive (HPROF binary's ROOT STICKY CLASS).
    SystemClass,
    ThreadBlock,
    MonitorUsed,
    ThreadObject,
}

impl RootKind {
    pub const ALL: [RootKind; 9] = [
        RootKind::Unknown,
        RootKind::JniGlobal,
        RootKind::JniLocal,
        RootKind::JavaFrame,
        RootKind::NativeStack,
        RootKind::SystemClass,
        RootKind::ThreadBlock,
        RootKind::MonitorUsed,
        RootKind::ThreadObject,
    ];

    /// HPROF's name for the kind in ASCII dumps, as in `ROOT 5a (kind=<busy monitor>)`.
    pub fn hprof_text(self) -> &'static str {
        match self {
            RootKind::Unknown => "<unknown>",
            RootKind::JniGlobal => "<JNI global ref>",
            RootKind::JniLocal => "<JNI local ref>",
            RootKind::JavaFrame => "<Java stack>",
            RootKind::NativeStack => "<native stack>",
            RootKind::SystemClass => "<system class>",
            RootKind::ThreadBlock => "<thread block>",
            RootKind::MonitorUsed => "<busy monitor>",
            RootKind::ThreadObject => "<thread>",
        }
    }

    pub fn from_hprof_text(text: &str) -> Option<RootKind> {
        RootKind::ALL
            .into_iter()
            .find(|kind| kind.hprof_text() == text)
    }
}

/// Objects and their shallow bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCount {
    pub instances: u64,
    pub bytes: u64,
}

/// Where a histogram's bytes come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShallowSizes {
    /// Written in the dump for each object (HPROF text's `sz=`).
    #[default]
    Recorded,
    /// Estimated by [`estimate`], because the dump has no sizes (HPROF binary).
    Estimated,
}

/// One heap dump summed by class: instances and shallow bytes per class name (Java source form:
/// `java.lang.String`, `int[]`, `Keep$Node[]`), GC roots by kind. Objects are added one at a
/// time and not kept, so a dump of any size takes memory in proportion to its classes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeapHistogram {
    /// When the dump was taken, as the file writes it; empty when the file does not say.
    pub date: String,
    /// What the dump's header announces (`HEAP DUMP BEGIN (N objects, M bytes)`), if it does.
    pub announced: Option<ClassCount>,
    pub sizes: ShallowSizes,
    /// Class objects dumped (CLS lines, CLASS DUMP sub-records); not counted as instances.
    pub class_dumps: u64,
    classes: HashMap<String, ClassCount>,
    roots: BTreeMap<RootKind, u64>,
    total: ClassCount,
}

impl HeapHistogram {
    pub fn new(sizes: ShallowSizes) -> HeapHistogram {
        HeapHistogram {
            sizes,
            ..HeapHistogram::default()
        }
    }

    /// Counts one object of `class_name` taking `bytes`.
    pub fn add_object(&mut self, class_name: &str, bytes: u64) {
        self.add_objects(class_name, 1, bytes);
    }

    /// Counts `instances` objects of `class_name` taking `bytes` together.
    pub fn add_objects(&mut self, class_name: &str, instances: u64, bytes: u64) {
        // Looked up by &str first: one String per class, not per object.
        let count = match self.classes.get_mut(class_name) {
            Some(count) => count,
            None => self.classes.entry(class_name.to_string()).or_default(),
        };
        count.instances += instances;
        count.bytes += bytes;
        self.total.instances += instances;
        self.total.bytes += bytes;
    }

    pub fn add_root(&mut self, kind: RootKind) {
        *self.roots.entry(kind).or_default() += 1;
    }

    pub fn get(&self, class_name: &str) -> Option<ClassCount> {
        self.classes.get(class_name).copied()
    }

    /// Every object counted, over all classes.
    pub fn total(&self) -> ClassCount {
        self.total
    }

    /// Classes with at least one object.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    pub fn roots(&self) -> &BTreeMap<RootKind, u64> {
        &self.roots
    }

    pub fn root_total(&self) -> u64 {
        self.roots.values().sum()
    }

    /// Classes by shallow bytes, most first (then instances, most first; then name).
    pub fn sorted(&self) -> Vec<(&str, ClassCount)> {
        let mut rows: Vec<(&str, ClassCount)> = self
            .classes
            .iter()
            .map(|(name, count)| (name.as_str(), *count))
            .collect();
        rows.sort_by(|a, b| {
            b.1.bytes
                .cmp(&a.1.bytes)
                .then(b.1.instances.cmp(&a.1.instances))
                .then(a.0.cmp(b.0))
        });
        rows
    }
}

/// Shallow sizes of objects on a 64-bit HotSpot VM with compressed oops and compressed class
/// pointers (its default below 32 GiB of heap), for dumps that record no sizes. An estimate: it
/// ignores the gaps field layout may leave, which alignment to 8 bytes mostly absorbs.
pub mod estimate {
    /// Mark word (8) and compressed class pointer (4).
    pub const INSTANCE_HEADER: u64 = 12;
    /// The instance header and the array's length (4).
    pub const ARRAY_HEADER: u64 = 16;
    /// A compressed reference, whatever the dump's identifier size.
    pub const REFERENCE: u64 = 4;
    /// Objects start at multiples of this.
    pub const ALIGNMENT: u64 = 8;

    fn align(bytes: u64) -> u64 {
        bytes.div_ceil(ALIGNMENT).saturating_mul(ALIGNMENT)
    }

    /// An instance whose class and super classes declare `primitive_bytes` of primitive fields
    /// and `references` reference fields.
    pub fn instance(primitive_bytes: u64, references: u64) -> u64 {
        align(
            INSTANCE_HEADER
                .saturating_add(primitive_bytes)
                .saturating_add(references.saturating_mul(REFERENCE)),
        )
    }

    /// An array of `length` elements of `element_bytes` each ([`REFERENCE`] for objects).
    pub fn array(length: u64, element_bytes: u64) -> u64 {
        align(ARRAY_HEADER.saturating_add(length.saturating_mul(element_bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_follow_the_objects_and_sorting_is_by_bytes() {
        let mut histogram = HeapHistogram::new(ShallowSizes::Recorded);
        histogram.add_object("int[]", 56);
        histogram.add_object("int[]", 56);
        histogram.add_object("Keep$Node", 24);
        histogram.add_objects("java.lang.String", 3, 72);
        histogram.add_root(RootKind::JavaFrame);
        histogram.add_root(RootKind::JavaFrame);
        histogram.add_root(RootKind::SystemClass);
        assert_eq!(
            histogram.total(),
            ClassCount {
                instances: 6,
                bytes: 208
            }
        );
        let names: Vec<&str> = histogram.sorted().iter().map(|row| row.0).collect();
        assert_eq!(names, ["int[]", "java.lang.String", "Keep$Node"]);
        assert_eq!(histogram.root_total(), 3);
        assert_eq!(histogram.roots()[&RootKind::JavaFrame], 2);
    }

    #[test]
    fn root_kinds_read_back_from_their_text() {
        for kind in RootKind::ALL {
            assert_eq!(RootKind::from_hprof_text(kind.hprof_text()), Some(kind));
        }
        assert_eq!(RootKind::from_hprof_text("<other>"), None);
    }

    #[test]
    fn estimates_match_hotspots_layout() {
        // java.lang.Object, Integer, a class with an int and a reference, Long.
        assert_eq!(estimate::instance(0, 0), 16);
        assert_eq!(estimate::instance(4, 0), 16);
        assert_eq!(estimate::instance(4, 1), 24);
        assert_eq!(estimate::instance(8, 0), 24);
        // new int[10], new Object[5000], new byte[0].
        assert_eq!(estimate::array(10, 4), 56);
        assert_eq!(estimate::array(5000, estimate::REFERENCE), 20016);
        assert_eq!(estimate::array(0, 1), 16);
        assert_eq!(
            estimate::array(u64::MAX, 8),
            u64::MAX,
            "saturates, never overflows"
        );
    }
}
