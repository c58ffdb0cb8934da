//! Two profiles folded with the same options and set side by side, stack by stack: what a
//! differential flame graph colours by change of share, and the folded-stacks form flamegraph.pl's
//! `difffolded.pl` writes (`stack base new`).

use std::collections::HashMap;
use std::io::{self, Write};

use super::{fold, Folded, ViewFrame, ViewOptions};
use crate::profile::Profile;

/// Stacks of both profiles with their weight in each (0 where a stack is in one only).
#[derive(Clone, Debug, Default)]
pub struct FoldedDiff {
    pub title: String,
    pub frames: Vec<ViewFrame>,
    /// Root first, with (base weight, new weight); the largest change of share first.
    pub stacks: Vec<(Vec<u32>, u64, u64)>,
    pub base_total: u64,
    pub new_total: u64,
}

impl FoldedDiff {
    pub fn frame(&self, id: u32) -> &ViewFrame {
        &self.frames[id as usize]
    }
}

/// Folds both profiles with `options` and pairs their stacks.
pub fn fold_diff(base: &Profile, new: &Profile, options: &ViewOptions) -> FoldedDiff {
    let base_folded = fold(base, options);
    let new_folded = fold(new, options);
    let mut diff = FoldedDiff {
        title: options
            .title
            .clone()
            .unwrap_or_else(|| format!("{} against {}", new.source, base.source)),
        base_total: base_folded.total,
        new_total: new_folded.total,
        ..FoldedDiff::default()
    };
    let mut ids: HashMap<ViewFrame, u32> = HashMap::new();
    let mut weights: HashMap<Vec<u32>, (u64, u64)> = HashMap::new();
    for (folded, is_new) in [(&base_folded, false), (&new_folded, true)] {
        let local: Vec<u32> = folded
            .frames
            .iter()
            .map(|frame| {
                let next = ids.len() as u32;
                *ids.entry(frame.clone()).or_insert_with(|| {
                    diff.frames.push(frame.clone());
                    next
                })
            })
            .collect();
        for (stack, weight) in &folded.stacks {
            let stack: Vec<u32> = stack.iter().map(|id| local[*id as usize]).collect();
            let entry = weights.entry(stack).or_insert((0, 0));
            if is_new {
                entry.1 += weight;
            } else {
                entry.0 += weight;
            }
        }
    }
    let share = |weight: u64, total: u64| weight as f64 / total.max(1) as f64;
    let change =
        |(base, new): (u64, u64)| (share(new, diff.new_total) - share(base, diff.base_total)).abs();
    diff.stacks = weights
        .into_iter()
        .map(|(stack, (base, new))| (stack, base, new))
        .collect();
    diff.stacks.sort_by(|a, b| {
        change((b.1, b.2))
            .total_cmp(&change((a.1, a.2)))
            .then_with(|| a.0.cmp(&b.0))
    });
    diff
}

/// Writes `stack base new` lines, as flamegraph.pl's differential mode reads them.
pub fn write_collapsed(diff: &FoldedDiff, out: &mut impl Write) -> io::Result<()> {
    for (stack, base, new) in &diff.stacks {
        let names: Vec<String> = stack
            .iter()
            .map(|id| diff.frame(*id).label().replace([';', '\n'], ":"))
            .collect();
        writeln!(out, "{} {base} {new}", names.join(";"))?;
    }
    Ok(())
}

/// The view of one side, for outputs that show one profile (the new one, coloured by change).
pub fn new_side(diff: &FoldedDiff) -> Folded {
    Folded {
        event: None,
        title: diff.title.clone(),
        frames: diff.frames.clone(),
        stacks: diff
            .stacks
            .iter()
            .filter(|(_, _, new)| *new > 0)
            .map(|(stack, _, new)| (stack.clone(), *new))
            .collect(),
        total: diff.new_total,
        ..Folded::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Event, Frame, Sample};

    fn profile(source: &str, heavy: u64, light: u64) -> Profile {
        let mut profile = Profile::new(source);
        for (method, count) in [("Hot.heavy", heavy), ("Hot.light", light)] {
            let stack = profile.stack_of_frames_leaf_first([Frame::java(method)]);
            profile.add_sample(Sample::counted(stack, Event::Cpu, count));
        }
        profile
    }

    #[test]
    fn pairs_stacks_and_writes_both_weights() {
        let diff = fold_diff(
            &profile("base", 30, 10),
            &profile("new", 10, 30),
            &ViewOptions::default(),
        );
        assert_eq!((diff.base_total, diff.new_total), (40, 40));
        let mut out = Vec::new();
        write_collapsed(&diff, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Hot.heavy 30 10\n"), "{text}");
        assert!(text.contains("Hot.light 10 30\n"), "{text}");
    }
}
