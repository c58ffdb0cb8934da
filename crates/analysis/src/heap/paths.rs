//! The shortest path from a GC root to an object: one breadth-first search from every root at
//! once over the references (optionally not through java.lang.ref.Reference's `referent`),
//! stopped when the object is reached; each step named by the field or element it goes
//! through, the root by its kinds.

use openprof_format::heap::RootKind;

use super::graph::{GraphError, HeapGraph, NONE};

/// One object on a path, with the reference that leads from it to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub node: u32,
    /// The field, element or class reference from this object to the next step; `None` on
    /// the last step.
    pub via: Option<String>,
}

/// A path from a root to an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPath {
    /// The root's kinds (an object may be a root several times), as the dump names them.
    pub root_kinds: Vec<RootKind>,
    /// The root first, the object last.
    pub steps: Vec<Step>,
}

impl HeapGraph {
    /// The shortest path from any GC root to `target`; with `exclude_weak`, no step goes from
    /// a Reference to its referent. `None` when no root reaches it so.
    pub fn path_to_roots(
        &self,
        target: u32,
        exclude_weak: bool,
    ) -> Result<Option<RootPath>, GraphError> {
        const ROOT: u32 = NONE - 1;
        let mut parent = vec![NONE; self.node_count()];
        let mut queue: std::collections::VecDeque<u32> = std::collections::VecDeque::new();
        for root in &self.roots {
            if parent[root.node as usize] == NONE {
                parent[root.node as usize] = ROOT;
                queue.push_back(root.node);
            }
        }
        let mut found = parent[target as usize] != NONE;
        while !found {
            let Some(node) = queue.pop_front() else {
                break;
            };
            let referent = if exclude_weak {
                self.referent(node)
            } else {
                None
            };
            for &next in self.successors(node) {
                if parent[next as usize] != NONE || referent == Some(next) {
                    continue;
                }
                parent[next as usize] = node;
                if next == target {
                    found = true;
                    break;
                }
                queue.push_back(next);
            }
        }
        if !found {
            return Ok(None);
        }
        let mut chain = vec![target];
        let mut at = target;
        while parent[at as usize] != ROOT {
            at = parent[at as usize];
            chain.push(at);
        }
        chain.reverse();
        let mut steps = Vec::with_capacity(chain.len());
        for (index, &node) in chain.iter().enumerate() {
            let via = match chain.get(index + 1) {
                Some(&next) => Some(self.reference_name(node, next)?),
                None => None,
            };
            steps.push(Step { node, via });
        }
        let mut root_kinds: Vec<RootKind> = self
            .roots
            .iter()
            .filter(|root| root.node == chain[0])
            .map(|root| root.kind)
            .collect();
        root_kinds.sort();
        root_kinds.dedup();
        Ok(Some(RootPath { root_kinds, steps }))
    }
}
