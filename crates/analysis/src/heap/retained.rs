//! Retained sizes: of each object (the shallow bytes of its dominator subtree), of each class
//! (MAT's definition: what would be freed if every instance of the class were, found exactly by
//! marking what the roots still reach without them), and the dominator tree's children lists
//! that the report and the leak suspects walk.

use super::dominators::{dominators, Dominators};
use super::graph::{GraphError, HeapGraph, Progress, NONE};

/// A heap dump's graph with its dominator tree and retained sizes.
pub struct HeapAnalysis {
    pub graph: HeapGraph,
    pub dominators: Dominators,
    /// Per preorder number, the retained bytes (number 0: every reachable object's).
    retained: Vec<u64>,
    /// Per preorder number, where its dominator-tree children start in `children`.
    child_start: Vec<u32>,
    /// Children by preorder number, each list most retained first.
    children: Vec<u32>,
}

impl HeapAnalysis {
    /// Computes the dominator tree from a super-root over every GC root, then retained sizes.
    /// Under a memory limit ([`super::GraphOptions::memory_limit`]), the graph's columns wait
    /// in a temporary file while the dominator computation runs.
    pub fn new(
        mut graph: HeapGraph,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<HeapAnalysis, GraphError> {
        progress(Progress::Step("dominator tree"));
        let mut roots: Vec<u32> = graph.roots.iter().map(|root| root.node).collect();
        // One successor per root object, in the order the dump first names them.
        let mut seen = vec![false; graph.node_count()];
        roots.retain(|&node| !std::mem::replace(&mut seen[node as usize], true));
        drop(seen);
        let mut parked = Ok(());
        let dominators = dominators(&mut graph, &roots, |graph| {
            if graph.options.memory_limit.is_some() {
                parked = graph.park();
            }
        });
        parked?;
        graph.unpark()?;
        progress(Progress::Step("retained sizes"));
        let reached = dominators.reached();
        let mut retained = vec![0u64; reached];
        // A dominator's number is below those it dominates: one pass from the last number up.
        for v in (1..reached).rev() {
            retained[v] += graph.shallow(dominators.vertex[v]);
            let idom = dominators.idom[v] as usize;
            retained[idom] += retained[v];
        }
        let mut child_start = vec![0u32; reached + 1];
        for v in 1..reached {
            child_start[dominators.idom[v] as usize + 1] += 1;
        }
        for i in 1..=reached {
            child_start[i] += child_start[i - 1];
        }
        let mut fill = child_start.clone();
        let mut children = vec![0u32; reached.saturating_sub(1)];
        for v in 1..reached {
            let idom = dominators.idom[v] as usize;
            children[fill[idom] as usize] = v as u32;
            fill[idom] += 1;
        }
        drop(fill);
        for v in 0..reached {
            let (start, end) = (child_start[v] as usize, child_start[v + 1] as usize);
            children[start..end]
                .sort_unstable_by_key(|&c| (std::cmp::Reverse(retained[c as usize]), c));
        }
        Ok(HeapAnalysis {
            graph,
            dominators,
            retained,
            child_start,
            children,
        })
    }

    /// The retained bytes of every reachable object together.
    pub fn reachable_bytes(&self) -> u64 {
        self.retained[0]
    }

    /// Reachable objects.
    pub fn reachable_objects(&self) -> u64 {
        self.dominators.reached() as u64 - 1
    }

    /// An object's retained bytes; `None` when no root reaches it.
    pub fn retained(&self, node: u32) -> Option<u64> {
        match self.dominators.number[node as usize] {
            NONE => None,
            number => Some(self.retained[number as usize]),
        }
    }

    /// Retained bytes by preorder number.
    pub fn retained_by_number(&self, number: u32) -> u64 {
        self.retained[number as usize]
    }

    /// An object's immediate dominator: `Some(None)` when only the super-root dominates it.
    pub fn idom(&self, node: u32) -> Option<Option<u32>> {
        self.dominators.idom_of(node)
    }

    /// The dominator-tree children of a preorder number, most retained first.
    pub fn children_by_number(&self, number: u32) -> &[u32] {
        let (start, end) = (
            self.child_start[number as usize] as usize,
            self.child_start[number as usize + 1] as usize,
        );
        &self.children[start..end]
    }

    /// The objects an object immediately dominates, most retained first (the super-root's with
    /// `None`).
    pub fn dominated(&self, node: Option<u32>) -> Vec<u32> {
        let number = match node {
            None => 0,
            Some(node) => match self.dominators.number[node as usize] {
                NONE => return Vec::new(),
                number => number,
            },
        };
        self.children_by_number(number)
            .iter()
            .map(|&c| self.dominators.vertex[c as usize])
            .collect()
    }

    pub fn node_of_number(&self, number: u32) -> u32 {
        self.dominators.vertex[number as usize]
    }

    pub fn number_of(&self, node: u32) -> Option<u32> {
        match self.dominators.number[node as usize] {
            NONE => None,
            number => Some(number),
        }
    }

    /// MAT's retained size of a set of objects: the bytes of what no root reaches once the set
    /// is gone, the set included. Exact: every object is marked from the roots without passing
    /// through the set. Returns 0 for a set of unreachable objects.
    pub fn retained_by_set(&self, in_set: &dyn Fn(u32) -> bool) -> u64 {
        let graph = &self.graph;
        let mut marked = vec![0u64; graph.node_count().div_ceil(64)];
        let mut stack: Vec<u32> = Vec::new();
        let mut reached_bytes = 0u64;
        let mark = |node: u32, marked: &mut [u64], stack: &mut Vec<u32>| {
            let (word, bit) = (node as usize / 64, node % 64);
            if marked[word] & (1 << bit) == 0 && !in_set(node) {
                marked[word] |= 1 << bit;
                stack.push(node);
                true
            } else {
                false
            }
        };
        for root in &graph.roots {
            if mark(root.node, &mut marked, &mut stack) {
                reached_bytes += graph.shallow(root.node);
            }
        }
        while let Some(node) = stack.pop() {
            for &next in graph.successors(node) {
                if mark(next, &mut marked, &mut stack) {
                    reached_bytes += graph.shallow(next);
                }
            }
        }
        self.reachable_bytes() - reached_bytes
    }

    /// The retained bytes of every instance of a class name together (MAT's definition; class
    /// objects are not instances).
    pub fn retained_by_class(&self, class_name: &str) -> u64 {
        let graph = &self.graph;
        let classes: Vec<bool> = graph
            .classes
            .iter()
            .map(|class| class.name == class_name)
            .collect();
        self.retained_by_set(&|node| {
            !graph.is_class_object(node) && classes[graph.class(node) as usize]
        })
    }

    /// Per class index, the retained bytes of its instances that no other instance of the same
    /// class name dominates (MAT's quick lower bound of a class's retained size): one walk of
    /// the dominator tree.
    pub fn dominated_by_class(&self, row_of_class: &[u32], rows: usize) -> Vec<u64> {
        let graph = &self.graph;
        let mut sums = vec![0u64; rows];
        let mut active = vec![0u32; rows];
        const EXIT: u32 = 1 << 31;
        let row = |number: u32| -> u32 {
            let node = self.dominators.vertex[number as usize];
            if graph.is_class_object(node) {
                NONE
            } else {
                row_of_class[graph.class(node) as usize]
            }
        };
        let mut stack: Vec<u32> = self.children_by_number(0).to_vec();
        while let Some(entry) = stack.pop() {
            if entry & EXIT != 0 {
                let r = row(entry & !EXIT);
                if r != NONE {
                    active[r as usize] -= 1;
                }
                continue;
            }
            let r = row(entry);
            if r != NONE {
                if active[r as usize] == 0 {
                    sums[r as usize] += self.retained[entry as usize];
                }
                active[r as usize] += 1;
            }
            stack.push(entry | EXIT);
            stack.extend_from_slice(self.children_by_number(entry));
        }
        sums
    }
}
