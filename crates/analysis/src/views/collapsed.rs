//! Folded stacks (Brendan Gregg's collapsed format): one line per stack, frames root first
//! separated by `;`, then a space and the weight. flamegraph.pl, inferno and speedscope read it.

use std::io::{self, Write};

use super::Folded;

/// Writes folded stacks. A frame's own `;` (none in Java names; possible in native symbols)
/// becomes `:` so that it cannot split the frame.
pub fn write(folded: &Folded, out: &mut impl Write) -> io::Result<()> {
    for (stack, weight) in &folded.stacks {
        let mut first = true;
        for id in stack {
            if !first {
                out.write_all(b";")?;
            }
            first = false;
            let name = &folded.frame(*id).name;
            if name.contains([';', '\n']) {
                out.write_all(name.replace([';', '\n'], ":").as_bytes())?;
            } else {
                out.write_all(name.as_bytes())?;
            }
        }
        writeln!(out, " {weight}")?;
    }
    Ok(())
}
