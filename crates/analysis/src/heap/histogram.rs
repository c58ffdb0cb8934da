//! Class histograms of a heap graph: every object by class name with its count, shallow bytes
//! and retained bytes; the objects no root reaches, apart; and the change between two dumps.

use std::collections::HashMap;

use serde::Serialize;

use openprof_format::heap::HeapHistogram;

use super::graph::NONE;
use super::retained::HeapAnalysis;

/// One class's objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClassRow {
    pub class: String,
    pub objects: u64,
    pub shallow: u64,
    /// The retained bytes of its instances not dominated by another of them (a lower bound
    /// of `retained`).
    pub dominated: u64,
    /// MAT's retained size of all its instances, when computed (the top rows).
    pub retained: Option<u64>,
}

/// Objects and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub objects: u64,
    pub bytes: u64,
}

/// Class names to row numbers, and each class index's row.
pub struct Rows {
    pub names: Vec<String>,
    pub of_class: Vec<u32>,
}

/// Rows by class name: classes of one name (from different loaders) share a row.
pub fn rows(analysis: &HeapAnalysis) -> Rows {
    let mut names: Vec<String> = Vec::new();
    let mut by_name: HashMap<&str, u32> = HashMap::new();
    let mut of_class = Vec::with_capacity(analysis.graph.classes.len());
    for class in &analysis.graph.classes {
        let row = *by_name.entry(class.name.as_str()).or_insert_with(|| {
            names.push(class.name.clone());
            names.len() as u32 - 1
        });
        of_class.push(row);
    }
    Rows { names, of_class }
}

impl HeapAnalysis {
    /// Instances by class name (class objects apart, as `java.lang.Class` rows are in the
    /// JVM's histograms only for the mirrors dumped as instances): reachable ones with
    /// `reachable`, else those no root reaches. Sorted by shallow bytes, most first.
    pub fn class_rows(&self, reachable: bool) -> Vec<ClassRow> {
        let graph = &self.graph;
        let rows = rows(self);
        let dominated = if reachable {
            self.dominated_by_class(&rows.of_class, rows.names.len())
        } else {
            vec![0; rows.names.len()]
        };
        let mut counts = vec![Totals::default(); rows.names.len()];
        for node in 0..graph.node_count() as u32 {
            if graph.is_class_object(node) {
                continue;
            }
            if (self.dominators.number[node as usize] != NONE) != reachable {
                continue;
            }
            let row = rows.of_class[graph.class(node) as usize] as usize;
            counts[row].objects += 1;
            counts[row].bytes += graph.shallow(node);
        }
        let mut result: Vec<ClassRow> = rows
            .names
            .into_iter()
            .zip(counts)
            .zip(dominated)
            .filter(|((_, count), _)| count.objects > 0)
            .map(|((class, count), dominated)| ClassRow {
                class,
                objects: count.objects,
                shallow: count.bytes,
                dominated,
                retained: None,
            })
            .collect();
        result.sort_by(|a, b| {
            b.shallow
                .cmp(&a.shallow)
                .then(b.objects.cmp(&a.objects))
                .then(a.class.cmp(&b.class))
        });
        result
    }

    /// The `top` classes by retained size: ranked by the dominator tree's lower bound, then
    /// each one's exact retained size computed and the rows sorted by it.
    pub fn retained_histogram(&self, top: usize) -> Vec<ClassRow> {
        let mut rows = self.class_rows(true);
        rows.sort_by(|a, b| b.dominated.cmp(&a.dominated).then(a.class.cmp(&b.class)));
        rows.truncate(top);
        for row in &mut rows {
            row.retained = Some(self.retained_by_class(&row.class));
        }
        rows.sort_by(|a, b| {
            b.retained
                .cmp(&a.retained)
                .then(b.dominated.cmp(&a.dominated))
                .then(a.class.cmp(&b.class))
        });
        rows
    }

    /// Class objects (CLASS DUMPs) and their bytes.
    pub fn class_objects(&self) -> Totals {
        let graph = &self.graph;
        let mut totals = Totals::default();
        for node in 0..graph.node_count() as u32 {
            if graph.is_class_object(node) {
                totals.objects += 1;
                totals.bytes += graph.shallow(node);
            }
        }
        totals
    }

    /// Every object of the dump, class objects included.
    pub fn totals(&self) -> Totals {
        let graph = &self.graph;
        Totals {
            objects: graph.node_count() as u64,
            bytes: (0..graph.node_count() as u32)
                .map(|node| graph.shallow(node))
                .sum(),
        }
    }
}

/// One class in two dumps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffRow {
    pub class: String,
    pub objects: u64,
    pub shallow: u64,
    pub other_objects: u64,
    pub other_shallow: u64,
    /// This dump's figure less the other's.
    pub objects_change: i64,
    pub shallow_change: i64,
}

/// Instance histograms compared by class name: every class in either, largest change in
/// bytes first (then in objects, then by name).
pub fn diff(ours: &[ClassRow], other: &HeapHistogram) -> Vec<DiffRow> {
    let mut rows: HashMap<&str, DiffRow> = HashMap::new();
    let blank = |class: &str| DiffRow {
        class: class.to_string(),
        objects: 0,
        shallow: 0,
        other_objects: 0,
        other_shallow: 0,
        objects_change: 0,
        shallow_change: 0,
    };
    for row in ours {
        let entry = rows.entry(&row.class).or_insert_with(|| blank(&row.class));
        entry.objects += row.objects;
        entry.shallow += row.shallow;
    }
    for (class, count) in other.sorted() {
        let entry = rows.entry(class).or_insert_with(|| blank(class));
        entry.other_objects += count.instances;
        entry.other_shallow += count.bytes;
    }
    let mut result: Vec<DiffRow> = rows
        .into_values()
        .map(|mut row| {
            row.objects_change = row.objects as i64 - row.other_objects as i64;
            row.shallow_change = row.shallow as i64 - row.other_shallow as i64;
            row
        })
        .collect();
    result.sort_by(|a, b| {
        b.shallow_change
            .unsigned_abs()
            .cmp(&a.shallow_change.unsigned_abs())
            .then(
                b.objects_change
                    .unsigned_abs()
                    .cmp(&a.objects_change.unsigned_abs()),
            )
            .then(a.class.cmp(&b.class))
    });
    result
}
