//! Leak suspects, as Eclipse MAT finds them: the objects at the top of the dominator tree that
//! retain at least a share of the heap, and the classes whose top-level instances do together,
//! each with its accumulation point.

use std::collections::BTreeMap;

use super::retained::HeapAnalysis;

/// A suspect and where its bytes accumulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspect {
    pub what: SuspectKind,
    pub retained: u64,
    /// Of every reachable object's bytes.
    pub share: f64,
    /// The dominator path from the suspect down to its accumulation point (both included;
    /// one object for a class's instances, whose paths diverge).
    pub accumulation: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SuspectKind {
    /// One object.
    Object(u32),
    /// Several top-level instances of one class name, none a suspect alone.
    Class { name: String, instances: Vec<u32> },
}

impl Suspect {
    pub fn accumulation_point(&self) -> Option<u32> {
        self.accumulation.last().copied()
    }
}

impl HeapAnalysis {
    /// Where an object's retained bytes accumulate: from it, down the dominator tree into the
    /// child retaining the most while that child holds at least `concentration` of its parent's
    /// retained bytes. Returns the path, the object first and the accumulation point last.
    pub fn accumulation_path(&self, node: u32, concentration: f64) -> Vec<u32> {
        let Some(mut number) = self.number_of(node) else {
            return Vec::new();
        };
        let mut path = vec![node];
        while let Some(&child) = self.children_by_number(number).first() {
            let (parent_bytes, child_bytes) = (
                self.retained_by_number(number),
                self.retained_by_number(child),
            );
            if (child_bytes as f64) < concentration * parent_bytes as f64 || child_bytes == 0 {
                break;
            }
            number = child;
            path.push(self.node_of_number(number));
        }
        path
    }

    /// Top-level dominators retaining at least `threshold` of the reachable bytes, most first;
    /// then classes whose other top-level instances retain that much together.
    pub fn suspects(&self, threshold: f64, concentration: f64) -> Vec<Suspect> {
        let total = self.reachable_bytes();
        let limit = threshold * total as f64;
        let share = |bytes: u64| {
            if total == 0 {
                0.0
            } else {
                bytes as f64 / total as f64
            }
        };
        let mut suspects = Vec::new();
        let mut groups: BTreeMap<&str, (u64, Vec<u32>)> = BTreeMap::new();
        for &number in self.children_by_number(0) {
            let node = self.node_of_number(number);
            let retained = self.retained_by_number(number);
            if retained as f64 >= limit && retained > 0 {
                suspects.push(Suspect {
                    what: SuspectKind::Object(node),
                    retained,
                    share: share(retained),
                    accumulation: self.accumulation_path(node, concentration),
                });
            } else {
                let group = groups.entry(self.graph.kind_name(node)).or_default();
                group.0 += retained;
                group.1.push(node);
            }
        }
        let mut classes: Vec<Suspect> = groups
            .into_iter()
            .filter(|(_, (retained, instances))| {
                instances.len() > 1 && *retained as f64 >= limit && *retained > 0
            })
            .map(|(name, (retained, instances))| {
                // The largest instance stands for where the class's bytes go.
                let biggest = instances
                    .iter()
                    .copied()
                    .max_by_key(|&node| self.retained(node).unwrap_or(0));
                Suspect {
                    what: SuspectKind::Class {
                        name: name.to_string(),
                        instances,
                    },
                    retained,
                    share: share(retained),
                    accumulation: biggest
                        .map(|node| self.accumulation_path(node, concentration))
                        .unwrap_or_default(),
                }
            })
            .collect();
        suspects.sort_by_key(|suspect| std::cmp::Reverse(suspect.retained));
        classes.sort_by_key(|suspect| std::cmp::Reverse(suspect.retained));
        suspects.extend(classes);
        suspects
    }
}
