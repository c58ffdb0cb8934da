//! Folded stacks (Brendan Gregg's collapsed format): one line per stack, frames root first
//! separated by `;`, then a space and the weight. flamegraph.pl, inferno and speedscope read it.

use std::collections::HashMap;
use std::io::{self, Write};

use super::Folded;

/// Writes folded stacks. A frame's own `;` (none in Java names; possible in native symbols)
/// becomes `:` so that it cannot split the frame. Stacks whose frames differ only in kind (a
/// method inlined in one, not in the other) read the same here and are written as one line.
pub fn write(folded: &Folded, out: &mut impl Write) -> io::Result<()> {
    let mut lines: Vec<(String, u64)> = Vec::with_capacity(folded.stacks.len());
    let mut index: HashMap<String, usize> = HashMap::with_capacity(folded.stacks.len());
    for (stack, weight) in &folded.stacks {
        let mut line = String::new();
        for (position, id) in stack.iter().enumerate() {
            if position > 0 {
                line.push(';');
            }
            let name = &folded.frame(*id).name;
            if name.contains([';', '\n']) {
                line.push_str(&name.replace([';', '\n'], ":"));
            } else {
                line.push_str(name);
            }
        }
        match index.get(&line) {
            Some(at) => lines[*at].1 += weight,
            None => {
                index.insert(line.clone(), lines.len());
                lines.push((line, *weight));
            }
        }
    }
    lines.sort_by(|(a_line, a), (b_line, b)| b.cmp(a).then_with(|| a_line.cmp(b_line)));
    for (line, weight) in lines {
        writeln!(out, "{line} {weight}")?;
    }
    Ok(())
}
