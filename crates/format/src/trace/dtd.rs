//! docs/trace.dtd, generated from the element table so that the DTD and the code cannot drift.

use super::{all_declarations, TraceElement};

/// One element's `<!ELEMENT>` and `<!ATTLIST>` declarations.
pub fn declarations(tag: &str, model: &str, attributes: &[(&str, bool)]) -> String {
    let mut out = format!("<!ELEMENT {tag} {model}>\n");
    if !attributes.is_empty() {
        out.push_str(&format!("<!ATTLIST {tag}\n"));
        for (name, required) in attributes {
            let default = if *required { "#REQUIRED" } else { "#IMPLIED" };
            out.push_str(&format!("  {name} CDATA {default}\n"));
        }
        out.push_str(">\n");
    }
    out
}

/// The whole DTD: the TRACE root, then every element.
pub fn trace_dtd() -> String {
    let mut out = String::from(
        "<!-- The open trace format (Eclipse TPTP's trace elements and openprof's additions,\n\
         \x20    docs/trace-format.md), as openprof writes and reads it.\n\
         \x20    Generated from crates/format/src/trace/mod.rs; a test keeps docs/trace.dtd equal to it.\n\
         \x20    TRACE is the root of a document; TPTP called the same root traceRoot. -->\n\n",
    );
    out.push_str("<!ELEMENT TRACE (");
    out.push_str(&TraceElement::TAGS.join(" | "));
    out.push_str(")*>\n\n");
    for (_, declaration) in all_declarations() {
        out.push_str(&declaration);
        out.push('\n');
    }
    out
}
