//! The exact dominator tree of a graph from a virtual super-root whose successors are the GC
//! roots: Lengauer and Tarjan's algorithm (semidominators by path compression, buckets, then
//! the second pass that turns relative dominators into immediate ones), every step iterative
//! so that chains of millions of objects need no deep call stack.
//!
//! Vertices are numbered in depth-first preorder from the super-root (number 0); a dominator
//! always has a smaller number than what it dominates, which later passes (retained sizes)
//! rely on.

use super::graph::NONE;

/// What the dominator computation needs of a graph.
pub trait Successors {
    fn node_count(&self) -> usize;
    fn successors(&self, node: u32) -> &[u32];
}

impl Successors for super::graph::HeapGraph {
    fn node_count(&self) -> usize {
        super::graph::HeapGraph::node_count(self)
    }
    fn successors(&self, node: u32) -> &[u32] {
        super::graph::HeapGraph::successors(self, node)
    }
}

/// The dominator tree, by preorder number (0 is the super-root).
pub struct Dominators {
    /// Per node, its preorder number; [`NONE`] when no root reaches it.
    pub number: Vec<u32>,
    /// Per preorder number, its node ([`NONE`] for the super-root).
    pub vertex: Vec<u32>,
    /// Per preorder number, its immediate dominator's number (0 for the super-root itself).
    pub idom: Vec<u32>,
}

impl Dominators {
    /// Vertices reached, the super-root included.
    pub fn reached(&self) -> usize {
        self.vertex.len()
    }

    /// The immediate dominator of a node: `Some(None)` for the super-root, `None` when the
    /// node is unreachable.
    pub fn idom_of(&self, node: u32) -> Option<Option<u32>> {
        let number = self.number[node as usize];
        if number == NONE {
            return None;
        }
        let dominator = self.idom[number as usize];
        Some(match dominator {
            0 => None,
            other => Some(self.vertex[other as usize]),
        })
    }
}

/// Computes the dominator tree of `graph` from a super-root whose successors are `roots`.
/// `between` is called with the graph once its references have been read for the last time,
/// before the bulk of the computation (the graph may move its columns out of memory then).
pub fn dominators<G: Successors>(
    graph: &mut G,
    roots: &[u32],
    between: impl FnOnce(&mut G),
) -> Dominators {
    let nodes = graph.node_count();
    let mut number = vec![NONE; nodes];
    // At most every node and the super-root: sized once, not grown by doubling.
    let mut vertex: Vec<u32> = Vec::with_capacity(nodes + 1);
    vertex.push(NONE);
    let mut parent: Vec<u32> = Vec::with_capacity(nodes + 1);
    parent.push(0);
    // Per number, the next successor to visit: reused as the semidominators afterwards.
    let mut cursor: Vec<u32> = Vec::with_capacity(nodes + 1);
    cursor.push(0);
    fn successors<'a, G: Successors>(
        graph: &'a G,
        roots: &'a [u32],
        v: u32,
        vertex: &[u32],
    ) -> &'a [u32] {
        if v == 0 {
            roots
        } else {
            graph.successors(vertex[v as usize])
        }
    }
    let mut stack: Vec<u32> = vec![0];
    while let Some(&top) = stack.last() {
        let next = {
            let list = successors(&*graph, roots, top, &vertex);
            let at = cursor[top as usize] as usize;
            if at < list.len() {
                cursor[top as usize] += 1;
                Some(list[at])
            } else {
                None
            }
        };
        match next {
            Some(node) => {
                if number[node as usize] == NONE {
                    let n = vertex.len() as u32;
                    number[node as usize] = n;
                    vertex.push(node);
                    parent.push(top);
                    cursor.push(0);
                    stack.push(n);
                }
            }
            None => {
                stack.pop();
            }
        }
    }
    drop(stack);
    let reached = vertex.len();

    // Predecessors by number, counted then filled (the super-root precedes each root).
    let mut pred_start = vec![0u64; reached + 1];
    for v in 0..reached as u32 {
        for &w in successors(&*graph, roots, v, &vertex) {
            let n = number[w as usize];
            if n != NONE {
                pred_start[n as usize] += 1;
            }
        }
    }
    for i in 1..=reached {
        pred_start[i] += pred_start[i - 1];
    }
    // Each entry now holds its list's end; filled from the end down, it ends at its start.
    let mut preds = vec![0u32; pred_start[reached] as usize];
    for v in 0..reached as u32 {
        for &w in successors(&*graph, roots, v, &vertex) {
            let n = number[w as usize];
            if n != NONE {
                pred_start[n as usize] -= 1;
                preds[pred_start[n as usize] as usize] = v;
            }
        }
    }

    between(graph);

    let mut semi = cursor;
    for (v, slot) in semi.iter_mut().enumerate() {
        *slot = v as u32;
    }
    let mut label: Vec<u32> = (0..reached as u32).collect();
    let mut ancestor = vec![NONE; reached];
    let mut idom = vec![0u32; reached];
    let mut bucket_head = vec![NONE; reached];
    // A vertex's parent is read once, just before the vertex joins a bucket: its slot then
    // holds the bucket's next vertex.
    let mut bucket_next = parent;
    let mut path: Vec<u32> = Vec::new();

    // The vertex on the forest path above `v` with the least semidominator, compressing the
    // path on the way.
    let eval = |v: u32,
                ancestor: &mut [u32],
                label: &mut [u32],
                semi: &[u32],
                path: &mut Vec<u32>|
     -> u32 {
        if ancestor[v as usize] == NONE {
            return v;
        }
        path.clear();
        let mut x = v;
        while ancestor[ancestor[x as usize] as usize] != NONE {
            path.push(x);
            x = ancestor[x as usize];
        }
        for &y in path.iter().rev() {
            let a = ancestor[y as usize];
            if semi[label[a as usize] as usize] < semi[label[y as usize] as usize] {
                label[y as usize] = label[a as usize];
            }
            ancestor[y as usize] = ancestor[a as usize];
        }
        label[v as usize]
    };

    for w in (1..reached as u32).rev() {
        let (start, end) = (
            pred_start[w as usize] as usize,
            pred_start[w as usize + 1] as usize,
        );
        for &v in &preds[start..end] {
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            if semi[u as usize] < semi[w as usize] {
                semi[w as usize] = semi[u as usize];
            }
        }
        let p = bucket_next[w as usize];
        let s = semi[w as usize];
        bucket_next[w as usize] = bucket_head[s as usize];
        bucket_head[s as usize] = w;
        ancestor[w as usize] = p;
        let mut v = bucket_head[p as usize];
        bucket_head[p as usize] = NONE;
        while v != NONE {
            let next = bucket_next[v as usize];
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            idom[v as usize] = if semi[u as usize] < semi[v as usize] {
                u
            } else {
                p
            };
            v = next;
        }
    }
    for w in 1..reached {
        if idom[w] != semi[w] {
            idom[w] = idom[idom[w] as usize];
        }
    }
    idom[0] = 0;
    Dominators {
        number,
        vertex,
        idom,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Clone, Debug)]
    struct Lists(Vec<Vec<u32>>);

    impl Successors for Lists {
        fn node_count(&self) -> usize {
            self.0.len()
        }
        fn successors(&self, node: u32) -> &[u32] {
            &self.0[node as usize]
        }
    }

    /// Dominators by the textbook data-flow equations, iterated to their fixed point:
    /// Dom(root) = {root}, Dom(n) = {n} ∪ ⋂ Dom(p) over n's predecessors. Node `len` is the
    /// super-root. Returns each reachable node's immediate dominator (`len` for the super-root).
    fn naive(graph: &Lists, roots: &[u32]) -> Vec<Option<u32>> {
        let n = graph.0.len();
        let root = n as u32;
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n + 1];
        for (from, list) in graph.0.iter().enumerate() {
            for &to in list {
                preds[to as usize].push(from as u32);
            }
        }
        for &r in roots {
            preds[r as usize].push(root);
        }
        // Reachability from the super-root.
        let mut reachable = vec![false; n + 1];
        reachable[n] = true;
        let mut work = vec![root];
        while let Some(v) = work.pop() {
            let list: &[u32] = if v == root {
                roots
            } else {
                &graph.0[v as usize]
            };
            for &w in list {
                if !reachable[w as usize] {
                    reachable[w as usize] = true;
                    work.push(w);
                }
            }
        }
        let all: BTreeSet<u32> = (0..=n as u32).filter(|&v| reachable[v as usize]).collect();
        let mut dom: Vec<BTreeSet<u32>> = (0..=n)
            .map(|v| {
                if v == n {
                    BTreeSet::from([root])
                } else {
                    all.clone()
                }
            })
            .collect();
        let mut changed = true;
        while changed {
            changed = false;
            for v in 0..n {
                if !reachable[v] {
                    continue;
                }
                let mut new: Option<BTreeSet<u32>> = None;
                for &p in &preds[v] {
                    if !reachable[p as usize] {
                        continue;
                    }
                    new = Some(match new {
                        None => dom[p as usize].clone(),
                        Some(set) => set.intersection(&dom[p as usize]).copied().collect(),
                    });
                }
                let mut new = new.unwrap_or_default();
                new.insert(v as u32);
                if new != dom[v] {
                    dom[v] = new;
                    changed = true;
                }
            }
        }
        (0..n)
            .map(|v| {
                if !reachable[v] {
                    return None;
                }
                // The strict dominator that all other strict dominators dominate.
                let strict: Vec<u32> = dom[v].iter().copied().filter(|&d| d != v as u32).collect();
                strict
                    .iter()
                    .copied()
                    .find(|&d| dom[d as usize].len() == strict.len())
            })
            .collect()
    }

    fn ours(graph: &Lists, roots: &[u32]) -> Vec<Option<u32>> {
        let n = graph.0.len() as u32;
        let result = dominators(&mut graph.clone(), roots, |_| {});
        (0..n)
            .map(|v| result.idom_of(v).map(|idom| idom.unwrap_or(n)))
            .collect()
    }

    fn graphs() -> impl Strategy<Value = (Lists, Vec<u32>)> {
        (1usize..40).prop_flat_map(|n| {
            let edges = proptest::collection::vec((0..n as u32, 0..n as u32), 0..n * 3);
            let roots = proptest::collection::vec(0..n as u32, 1..4);
            (Just(n), edges, roots).prop_map(|(n, edges, roots)| {
                let mut lists = vec![Vec::new(); n];
                for (from, to) in edges {
                    lists[from as usize].push(to);
                }
                (Lists(lists), roots)
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn lengauer_tarjan_equals_the_data_flow_dominators((graph, roots) in graphs()) {
            prop_assert_eq!(ours(&graph, &roots), naive(&graph, &roots));
        }
    }

    #[test]
    fn a_long_chain_needs_no_deep_stack() {
        let n = 2_000_000u32;
        let lists = Lists(
            (0..n)
                .map(|v| if v + 1 < n { vec![v + 1] } else { Vec::new() })
                .collect(),
        );
        let result = dominators(&mut lists.clone(), &[0], |_| {});
        assert_eq!(result.reached(), n as usize + 1);
        assert_eq!(result.idom_of(n - 1), Some(Some(n - 2)));
        assert_eq!(result.idom_of(0), Some(None));
    }

    #[test]
    fn the_classic_example() {
        // Lengauer and Tarjan's figure: R=0 A=1 B=2 C=3 D=4 E=5 F=6 G=7 H=8 I=9 J=10 K=11 L=12.
        let edges: &[(u32, u32)] = &[
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 4),
            (2, 1),
            (2, 4),
            (2, 5),
            (3, 6),
            (3, 7),
            (4, 12),
            (5, 8),
            (6, 9),
            (7, 9),
            (7, 10),
            (8, 5),
            (8, 11),
            (9, 11),
            (10, 9),
            (11, 9),
            (11, 0),
            (12, 8),
        ];
        let mut lists = vec![Vec::new(); 13];
        for &(from, to) in edges {
            lists[from as usize].push(to);
        }
        let graph = Lists(lists);
        let idoms = ours(&graph, &[0]);
        let expected = [13, 0, 0, 0, 0, 0, 3, 3, 0, 0, 7, 0, 4];
        let got: Vec<u32> = idoms.iter().map(|idom| idom.unwrap()).collect();
        assert_eq!(got, expected);
        assert_eq!(idoms, naive(&graph, &[0]));
    }
}
