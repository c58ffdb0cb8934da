//! Heap dump analysis past a histogram: the object graph of an HPROF binary dump
//! ([`graph`]), its exact dominator tree ([`dominators`]), retained sizes of objects and
//! classes ([`retained`]), leak suspects with their accumulation points ([`suspects`]), the
//! shortest paths from GC roots ([`paths`]), unreachable objects and the difference of two
//! dumps ([`histogram`]), gathered into one report ([`HeapReport`]) that `openprof heap`
//! prints, writes as JSON or as an HTML page ([`html`]). docs/heap.md defines each figure.

pub mod dominators;
pub mod graph;
pub mod histogram;
pub mod html;
pub mod paths;
pub mod retained;
pub mod spill;
pub mod suspects;

use std::collections::BTreeMap;

use serde::Serialize;

pub use graph::{GraphError, GraphOptions, HeapGraph, Progress, Root};
pub use histogram::{ClassRow, DiffRow, Totals};
pub use paths::{Elision, RootPath, Step, CHAIN_END_LINKS};
pub use retained::HeapAnalysis;
pub use suspects::{Suspect, SuspectKind};

/// MAT's default: a suspect retains at least a tenth of the heap.
pub const DEFAULT_THRESHOLD: f64 = 0.10;
/// Descend the dominator tree while one child holds at least this share of its parent.
pub const DEFAULT_CONCENTRATION: f64 = 0.80;

/// What `--path-to-roots` names: an object by id, or a class (its instance retaining most).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Object(u64),
    Class(String),
}

impl Target {
    /// `0x7f3a10` or a decimal number is an object id; anything else a class name.
    pub fn parse(text: &str) -> Target {
        let hex = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .and_then(|digits| u64::from_str_radix(digits, 16).ok());
        match hex.or_else(|| text.parse::<u64>().ok()) {
            Some(id) => Target::Object(id),
            None => Target::Class(text.to_string()),
        }
    }
}

/// What the report holds.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Classes in the retained histogram.
    pub top: usize,
    /// Top-level dominators listed.
    pub dominators: usize,
    pub threshold: f64,
    pub concentration: f64,
    pub path: Option<Target>,
    pub exclude_weak: bool,
    /// Nodes of the dominator tree kept for the HTML page (0: none).
    pub tree_nodes: usize,
    /// Every reachable class's row too (the HTML page's sortable histogram).
    pub all_classes: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            top: 20,
            dominators: 20,
            threshold: DEFAULT_THRESHOLD,
            concentration: DEFAULT_CONCENTRATION,
            path: None,
            exclude_weak: false,
            tree_nodes: 0,
            all_classes: false,
        }
    }
}

/// An object as the report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    /// The object id, hexadecimal as `0x7f3a10`.
    pub id: String,
    /// `Keep$Node`, or `class Keep$Node` for a class object.
    pub class: String,
    pub shallow: u64,
    /// `None` when no root reaches it.
    pub retained: Option<u64>,
}

/// One node of the dominator tree kept for the HTML page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeEntry {
    #[serde(flatten)]
    pub object: ObjectRef,
    /// The entry of its immediate dominator; -1 for the super-root's children.
    pub parent: i64,
    /// Its immediate dominator's children left out (too small, or past the page's budget).
    pub children: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SuspectReport {
    /// `object` or `class`.
    pub kind: &'static str,
    /// The object (kind object) or the largest instance (kind class).
    pub object: ObjectRef,
    pub class: String,
    pub instances: u64,
    pub retained: u64,
    pub share: f64,
    /// From the suspect down to its accumulation point, both included; the middle of a long
    /// path left out (`accumulation_elided`).
    pub accumulation: Vec<ObjectRef>,
    pub accumulation_elided: Option<Elision>,
    /// The shortest path from a GC root to the accumulation point.
    pub path: Option<PathReport>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathStep {
    #[serde(flatten)]
    pub object: ObjectRef,
    /// The field or element leading to the next step.
    pub via: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathReport {
    pub target: ObjectRef,
    pub exclude_weak: bool,
    /// The root's kinds, as HPROF's text names them (`<system class>`, `<Java stack>`...).
    pub root_kinds: Vec<String>,
    /// The root first, the target last; empty when no root reaches it. A long path keeps its
    /// first and last links; `elided` says how many between are left out.
    pub steps: Vec<PathStep>,
    pub elided: Option<Elision>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffReport {
    pub other: String,
    pub rows: Vec<DiffRow>,
}

/// Everything `openprof heap` shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HeapReport {
    pub file: String,
    pub format: String,
    pub id_size: u32,
    /// How shallow sizes are counted (docs/heap.md).
    pub sizes: &'static str,
    /// Every object of the dump, class objects included.
    pub objects: Totals,
    pub class_objects: Totals,
    pub reachable: Totals,
    pub unreachable: Totals,
    /// Unreachable instances by class, most bytes first.
    pub unreachable_classes: Vec<ClassRow>,
    /// GC roots by kind (records, not distinct objects).
    pub roots: BTreeMap<String, u64>,
    pub references: u64,
    pub dangling_references: u64,
    pub dangling_roots: u64,
    /// The top classes by retained size, exact.
    pub histogram: Vec<ClassRow>,
    /// Every reachable class, with the dominator lower bound (when asked).
    pub classes: Vec<ClassRow>,
    /// The largest top-level dominators.
    pub dominators: Vec<ObjectRef>,
    pub suspects: Vec<SuspectReport>,
    pub threshold: f64,
    pub concentration: f64,
    pub path: Option<PathReport>,
    pub diff: Option<DiffReport>,
    /// The dominator tree's largest nodes, parents before children (for the HTML page).
    pub tree: Vec<TreeEntry>,
    /// The super-root's children left out of `tree`.
    pub tree_top_hidden: u64,
}

/// The words the report uses for its size model.
pub const SIZES: &str = "64-bit HotSpot with compressed oops: instances 12-byte header + fields \
     (references 4 bytes), arrays 16-byte header + elements, aligned to 8; class objects their \
     static fields";

impl HeapAnalysis {
    pub fn object_ref(&self, node: u32) -> ObjectRef {
        let graph = &self.graph;
        let class = &graph.classes[graph.class(node) as usize].name;
        ObjectRef {
            id: format!("0x{:x}", graph.id(node)),
            class: if graph.is_class_object(node) {
                format!("class {class}")
            } else {
                class.clone()
            },
            shallow: graph.shallow(node),
            retained: self.retained(node),
        }
    }

    /// The object a target names: the object of that id, or the instance of that class
    /// retaining most.
    pub fn resolve(&self, target: &Target) -> Result<u32, String> {
        let graph = &self.graph;
        match target {
            Target::Object(id) => graph
                .node(*id)
                .ok_or_else(|| format!("the dump has no object 0x{id:x}")),
            Target::Class(name) => {
                let named: Vec<bool> = graph
                    .classes
                    .iter()
                    .map(|class| class.name == *name)
                    .collect();
                let mut best: Option<(u64, u32)> = None;
                let mut known = false;
                for node in 0..graph.node_count() as u32 {
                    if graph.is_class_object(node) || !named[graph.class(node) as usize] {
                        continue;
                    }
                    known = true;
                    let retained = self.retained(node).unwrap_or(0);
                    if best.is_none_or(|(bytes, _)| retained > bytes) {
                        best = Some((retained, node));
                    }
                }
                match best {
                    Some((_, node)) => Ok(node),
                    None if known => Err(format!("no instance of {name}")),
                    None => Err(format!("the dump has no instance of a class named {name}")),
                }
            }
        }
    }

    pub fn path_report(&self, node: u32, exclude_weak: bool) -> Result<PathReport, GraphError> {
        let path = self.graph.path_to_roots(node, exclude_weak)?;
        let elided = path.as_ref().and_then(|path| path.elided);
        Ok(PathReport {
            target: self.object_ref(node),
            exclude_weak,
            root_kinds: path
                .as_ref()
                .map(|path| {
                    path.root_kinds
                        .iter()
                        .map(|kind| kind.hprof_text().to_string())
                        .collect()
                })
                .unwrap_or_default(),
            steps: path
                .map(|path| {
                    path.steps
                        .into_iter()
                        .map(|step| PathStep {
                            object: self.object_ref(step.node),
                            via: step.via,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            elided,
        })
    }

    /// The dominator tree's largest nodes, breadth first from the super-root, at most `limit`
    /// of them, leaving out children under a thousandth of the reachable bytes.
    /// Also returns how many of the super-root's children are left out.
    pub fn tree(&self, limit: usize) -> (Vec<TreeEntry>, u64) {
        let mut entries: Vec<TreeEntry> = Vec::new();
        if limit == 0 {
            return (entries, 0);
        }
        let mut top_hidden = 0;
        let floor = self.reachable_bytes() / 1000;
        let mut queue: std::collections::VecDeque<(u32, i64)> = std::collections::VecDeque::new();
        queue.push_back((0, -1));
        while let Some((number, parent)) = queue.pop_front() {
            let children = self.children_by_number(number);
            let mut kept = 0u64;
            for &child in children {
                if entries.len() >= limit || self.retained_by_number(child) < floor.max(1) {
                    break;
                }
                entries.push(TreeEntry {
                    object: self.object_ref(self.node_of_number(child)),
                    parent,
                    children: 0,
                });
                queue.push_back((child, entries.len() as i64 - 1));
                kept += 1;
            }
            if parent >= 0 {
                entries[parent as usize].children = children.len() as u64 - kept;
            } else {
                top_hidden = children.len() as u64 - kept;
            }
        }
        (entries, top_hidden)
    }

    /// Builds the report.
    pub fn report(
        &self,
        options: &ReportOptions,
        other: Option<(&str, &openprof_format::heap::HeapHistogram)>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HeapReport, GraphError> {
        let graph = &self.graph;
        progress(Progress::Step("retained sizes by class"));
        let histogram = self.retained_histogram(options.top);
        let unreachable_classes = self.class_rows(false);
        let reachable_rows = if options.all_classes || other.is_some() {
            self.class_rows(true)
        } else {
            Vec::new()
        };
        let mut roots: BTreeMap<String, u64> = BTreeMap::new();
        for root in &graph.roots {
            *roots.entry(root.kind.hprof_text().to_string()).or_default() += 1;
        }
        progress(Progress::Step("leak suspects"));
        let suspects = self
            .suspects(options.threshold, options.concentration)
            .into_iter()
            .map(|suspect| {
                let (kind, object, class, instances) = match &suspect.what {
                    SuspectKind::Object(node) => ("object", *node, self.object_ref(*node).class, 1),
                    SuspectKind::Class { name, instances } => {
                        let biggest = suspect
                            .accumulation
                            .first()
                            .copied()
                            .unwrap_or(instances[0]);
                        ("class", biggest, name.clone(), instances.len() as u64)
                    }
                };
                let path = match suspect.accumulation_point() {
                    Some(point) => Some(self.path_report(point, options.exclude_weak)?),
                    None => None,
                };
                let (accumulation, accumulation_elided) = Elision::apply(&suspect.accumulation);
                Ok(SuspectReport {
                    kind,
                    object: self.object_ref(object),
                    class,
                    instances,
                    retained: suspect.retained,
                    share: suspect.share,
                    accumulation: accumulation
                        .into_iter()
                        .map(|node| self.object_ref(node))
                        .collect(),
                    accumulation_elided,
                    path,
                })
            })
            .collect::<Result<Vec<_>, GraphError>>()?;
        let path = match &options.path {
            Some(target) => {
                progress(Progress::Step("path to GC roots"));
                let node = self.resolve(target).map_err(GraphError::Limit)?;
                Some(self.path_report(node, options.exclude_weak)?)
            }
            None => None,
        };
        let diff = other.map(|(name, histogram)| DiffReport {
            other: name.to_string(),
            rows: histogram::diff(
                &reachable_and_not(&reachable_rows, &unreachable_classes),
                histogram,
            ),
        });
        let (tree, tree_top_hidden) = self.tree(options.tree_nodes);
        let classes = if options.all_classes {
            // The exact figures computed for the top rows go with them.
            let exact: BTreeMap<&str, Option<u64>> = histogram
                .iter()
                .map(|row| (row.class.as_str(), row.retained))
                .collect();
            reachable_rows
                .into_iter()
                .map(|mut row| {
                    row.retained = exact.get(row.class.as_str()).copied().flatten();
                    row
                })
                .collect()
        } else {
            Vec::new()
        };

        let unreachable = unreachable_classes
            .iter()
            .fold(Totals::default(), |totals, row| Totals {
                objects: totals.objects + row.objects,
                bytes: totals.bytes + row.shallow,
            });
        Ok(HeapReport {
            file: graph.path.display().to_string(),
            format: graph.header.format.clone(),
            id_size: graph.header.id_size,
            sizes: SIZES,
            objects: self.totals(),
            class_objects: self.class_objects(),
            reachable: Totals {
                objects: self.reachable_objects(),
                bytes: self.reachable_bytes(),
            },
            unreachable,
            unreachable_classes,
            roots,
            references: graph.edge_count() as u64,
            dangling_references: graph.dangling_references,
            dangling_roots: graph.dangling_roots,
            histogram,
            classes,
            dominators: self
                .dominated(None)
                .into_iter()
                .take(options.dominators)
                .map(|node| self.object_ref(node))
                .collect(),
            suspects,
            threshold: options.threshold,
            concentration: options.concentration,
            path,
            diff,
            tree,
            tree_top_hidden,
        })
    }
}

/// Every instance by class, reachable or not (a dump's whole histogram, as other readers count
/// it).
fn reachable_and_not(reachable: &[ClassRow], unreachable: &[ClassRow]) -> Vec<ClassRow> {
    let mut all: Vec<ClassRow> = reachable.to_vec();
    all.extend_from_slice(unreachable);
    all
}

#[cfg(test)]
mod tests;
