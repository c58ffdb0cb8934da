//! The shortest path from a GC root to an object: one breadth-first search from every root at
//! once over the references (optionally not through java.lang.ref.Reference's `referent`),
//! stopped when the object is reached; each step named by the field or element it goes
//! through, the root by its kinds. A long chain keeps its first and last links and counts the
//! links between, so that a list of millions prints as a few dozen lines.

use openprof_format::heap::RootKind;
use serde::Serialize;

use super::graph::{GraphError, HeapGraph, NONE};

/// One object on a path, with the reference that leads from it to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub node: u32,
    /// The field, element or class reference from this object to the next step; `None` on
    /// the last step.
    pub via: Option<String>,
}

/// Links a long chain (a path from a root, a dominator path) keeps at each end.
pub const CHAIN_END_LINKS: usize = 20;

/// Where a chain's middle was left out: after its first `after` links, `links` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Elision {
    pub after: usize,
    pub links: u64,
}

impl Elision {
    /// The elision of a chain of `length` links keeping `CHAIN_END_LINKS` at each end; `None`
    /// when the chain is short enough to list whole.
    pub fn of(length: usize) -> Option<Elision> {
        (length > 2 * CHAIN_END_LINKS + 1).then(|| Elision {
            after: CHAIN_END_LINKS,
            links: (length - 2 * CHAIN_END_LINKS) as u64,
        })
    }

    /// Whether the link at `index` of the whole chain is listed.
    pub fn keeps(elision: Option<Elision>, index: usize) -> bool {
        match elision {
            Some(Elision { after, links }) => index < after || index >= after + links as usize,
            None => true,
        }
    }

    /// The links of `chain` that are listed, and the elision.
    pub fn apply<T: Copy>(chain: &[T]) -> (Vec<T>, Option<Elision>) {
        let elision = Elision::of(chain.len());
        let kept = chain
            .iter()
            .enumerate()
            .filter(|(index, _)| Elision::keeps(elision, *index))
            .map(|(_, &link)| link)
            .collect();
        (kept, elision)
    }
}

/// A path from a root to an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootPath {
    /// The root's kinds (an object may be a root several times), as the dump names them.
    pub root_kinds: Vec<RootKind>,
    /// The root first, the object last; the middle of a long path left out (`elided`).
    pub steps: Vec<Step>,
    pub elided: Option<Elision>,
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
        let elided = Elision::of(chain.len());
        let mut steps = Vec::new();
        for (index, &node) in chain.iter().enumerate() {
            if !Elision::keeps(elided, index) {
                continue;
            }
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
        Ok(Some(RootPath {
            root_kinds,
            steps,
            elided,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_chain_keeps_its_ends_and_counts_its_middle() {
        let short: Vec<u32> = (0..(2 * CHAIN_END_LINKS + 1) as u32).collect();
        assert_eq!(Elision::apply(&short), (short.clone(), None));
        let long: Vec<u32> = (0..1_000_000).collect();
        let (kept, elided) = Elision::apply(&long);
        let elided = elided.expect("a million links are elided");
        assert_eq!(elided.after, CHAIN_END_LINKS);
        assert_eq!(elided.links, 1_000_000 - 2 * CHAIN_END_LINKS as u64);
        assert_eq!(kept.len(), 2 * CHAIN_END_LINKS);
        assert_eq!(kept[..CHAIN_END_LINKS], long[..CHAIN_END_LINKS]);
        assert_eq!(
            kept[CHAIN_END_LINKS..],
            long[long.len() - CHAIN_END_LINKS..]
        );
    }
}
