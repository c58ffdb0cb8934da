//! Folded stacks (Brendan Gregg's collapsed format): one line per stack, frames root first
//! separated by `;`, then a space and the weight. flamegraph.pl, inferno and speedscope read it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use super::Folded;

/// Writes folded stacks. A frame's own `;` (none in Java names; possible in native symbols)
/// becomes `:` so that it cannot split the frame. Stacks whose frames differ only in kind (a
/// method inlined in one, not in the other) read the same here and are written as one line.
pub fn write(folded: &Folded, out: &mut impl Write) -> io::Result<()> {
    // Frames by name alone, so that such stacks merge; kept as numbers, not text, until written.
    let mut by_name: HashMap<Cow<'_, str>, u32> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let canonical: Vec<u32> = folded
        .frames
        .iter()
        .map(|frame| {
            let next = names.len() as u32;
            let label = frame.label();
            *by_name.entry(label.clone()).or_insert_with(|| {
                names.push(label.replace([';', '\n'], ":"));
                next
            })
        })
        .collect();
    let mut weights: HashMap<Vec<u32>, u64> = HashMap::with_capacity(folded.stacks.len());
    let mut order: Vec<Vec<u32>> = Vec::with_capacity(folded.stacks.len());
    for (stack, weight) in &folded.stacks {
        let key: Vec<u32> = stack.iter().map(|id| canonical[*id as usize]).collect();
        match weights.get_mut(&key) {
            Some(sum) => *sum += weight,
            None => {
                weights.insert(key.clone(), *weight);
                order.push(key);
            }
        }
    }
    // Heaviest first; `folded.stacks` came so, and merging only makes some heavier.
    order.sort_by(|a, b| weights[b].cmp(&weights[a]));
    for stack in &order {
        for (position, id) in stack.iter().enumerate() {
            if position > 0 {
                out.write_all(b";")?;
            }
            out.write_all(names[*id as usize].as_bytes())?;
        }
        writeln!(out, " {}", weights[stack])?;
    }
    Ok(())
}
