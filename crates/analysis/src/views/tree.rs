//! The call tree of folded stacks (callers above callees, children heaviest first), which the
//! HTML page draws and `openprof report` prints, and the hottest methods of a view by self and
//! total weight.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use super::{Folded, ViewFrame};

/// The folded stacks merged into a tree of calls: node 0 is the root, each node's children
/// heaviest first.
pub struct CallTree {
    pub nodes: Vec<CallNode>,
}

pub struct CallNode {
    /// The frame (in the numbering `frame_ids` maps to); `None` for the root.
    pub frame: Option<u32>,
    pub total: u64,
    pub self_weight: u64,
    pub children: Vec<usize>,
}

impl CallTree {
    /// Merges the stacks, leaving out the frames (and what they call) narrower than
    /// `min_width_percent` of the total: they would not be drawn, and a page of 100,000 stacks
    /// loads faster without them.
    /// `frame_ids` maps the folded stacks' frames to the numbering the tree's nodes carry.
    pub fn of(folded: &Folded, frame_ids: &[u32], min_width_percent: f64) -> CallTree {
        let mut nodes = vec![CallNode {
            frame: None,
            total: 0,
            self_weight: 0,
            children: Vec::new(),
        }];
        let mut child_of: HashMap<(usize, u32), usize> = HashMap::new();
        for (stack, weight) in &folded.stacks {
            let mut at = 0;
            nodes[0].total += weight;
            for frame in stack {
                let frame = frame_ids[*frame as usize];
                let next = nodes.len();
                let child = *child_of.entry((at, frame)).or_insert(next);
                if child == next {
                    nodes.push(CallNode {
                        frame: Some(frame),
                        total: 0,
                        self_weight: 0,
                        children: Vec::new(),
                    });
                    nodes[at].children.push(child);
                }
                nodes[child].total += weight;
                at = child;
            }
            nodes[at].self_weight += weight;
        }
        let least = if min_width_percent > 0.0 {
            (nodes[0].total as f64 * min_width_percent / 100.0).ceil() as u64
        } else {
            0
        };
        let totals: Vec<u64> = nodes.iter().map(|node| node.total).collect();
        for node in &mut nodes {
            node.children.retain(|child| totals[*child] >= least);
            node.children
                .sort_by(|a, b| totals[*b].cmp(&totals[*a]).then(a.cmp(b)));
        }
        CallTree { nodes }
    }
}

/// One method's weight in a view: where it is the leaf (self) and anywhere on the stack (total,
/// counted once per stack).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodWeight {
    pub name: String,
    pub self_weight: u64,
    pub total: u64,
}

/// The methods of a view, most self weight first (then most total, then by name).
pub fn top_methods(folded: &Folded) -> Vec<MethodWeight> {
    let labels: Vec<Cow<'_, str>> = folded.frames.iter().map(ViewFrame::label).collect();
    let mut by_name: HashMap<&str, (u64, u64)> = HashMap::new();
    for (stack, weight) in &folded.stacks {
        let mut seen: Vec<&str> = Vec::with_capacity(stack.len());
        for (position, id) in stack.iter().enumerate() {
            let name = labels[*id as usize].as_ref();
            let entry = by_name.entry(name).or_insert((0, 0));
            if position + 1 == stack.len() {
                entry.0 += weight;
            }
            if !seen.contains(&name) {
                seen.push(name);
                entry.1 += weight;
            }
        }
    }
    let mut methods: Vec<MethodWeight> = by_name
        .into_iter()
        .map(|(name, (self_weight, total))| MethodWeight {
            name: name.to_string(),
            self_weight,
            total,
        })
        .collect();
    methods.sort_by(|a, b| {
        b.self_weight
            .cmp(&a.self_weight)
            .then(b.total.cmp(&a.total))
            .then_with(|| a.name.cmp(&b.name))
    });
    methods
}

/// Prints the call tree as indented text: total and self share, then the frame, down to
/// `max_depth` levels and leaving out nodes under `min_percent` of the total.
pub fn write_text(
    folded: &Folded,
    max_depth: usize,
    min_percent: f64,
    out: &mut impl Write,
) -> io::Result<()> {
    let identity: Vec<u32> = (0..folded.frames.len() as u32).collect();
    let tree = CallTree::of(folded, &identity, min_percent);
    let total = tree.nodes[0].total.max(1) as f64;
    writeln!(out, "  total    self  frame")?;
    // (node, depth), without recursion: stacks may be thousands of frames deep.
    let mut pending: Vec<(usize, usize)> = tree.nodes[0]
        .children
        .iter()
        .rev()
        .map(|child| (*child, 0))
        .collect();
    while let Some((index, depth)) = pending.pop() {
        let node = &tree.nodes[index];
        let name = node
            .frame
            .map_or(Cow::Borrowed(""), |frame| folded.frame(frame).label());
        writeln!(
            out,
            "{:6.2}% {:6.2}%  {}{name}",
            100.0 * node.total as f64 / total,
            100.0 * node.self_weight as f64 / total,
            "  ".repeat(depth)
        )?;
        if depth + 1 < max_depth {
            pending.extend(node.children.iter().rev().map(|child| (*child, depth + 1)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::ViewFrameKind;

    fn folded() -> Folded {
        let frame = |name: &str| ViewFrame {
            name: name.into(),
            kind: ViewFrameKind::Java,
            line: None,
        };
        Folded {
            frames: vec![frame("main"), frame("heavy"), frame("light"), frame("mix")],
            stacks: vec![(vec![0, 1], 6), (vec![0, 2], 2), (vec![0, 3, 1], 2)],
            total: 10,
            ..Folded::default()
        }
    }

    #[test]
    fn methods_by_self_and_total() {
        let top = top_methods(&folded());
        let rows: Vec<(&str, u64, u64)> = top
            .iter()
            .map(|method| (method.name.as_str(), method.self_weight, method.total))
            .collect();
        assert_eq!(
            rows,
            [
                ("heavy", 8, 8),
                ("light", 2, 2),
                ("main", 0, 10),
                ("mix", 0, 2)
            ]
        );
    }

    #[test]
    fn the_tree_prints_callers_above_callees_heaviest_first_ties_as_they_came() {
        let mut out = Vec::new();
        write_text(&folded(), 10, 0.0, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(
            lines,
            [
                "  total    self  frame",
                "100.00%   0.00%  main",
                " 60.00%  60.00%    heavy",
                " 20.00%  20.00%    light",
                " 20.00%   0.00%    mix",
                " 20.00%  20.00%      heavy",
            ]
        );
    }
}
