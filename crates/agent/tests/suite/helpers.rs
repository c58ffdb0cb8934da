//! What several of the agent's test modules need beyond the testkit.

use openprof_testkit::{xmllint_trace, Run};

/// Checks the `trace.xml` a run wrote against docs/trace.dtd.
pub fn xmllint(run: &Run) {
    xmllint_trace(&run.dir.join("trace.xml"));
}
