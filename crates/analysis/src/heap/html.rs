//! The heap report as one self-contained HTML page (`assets/heap.html`, no network): the leak
//! suspects, the dominator tree expandable node by node, the class histogram sortable by any
//! column, the summary with the unreachable objects.

use std::io::{self, Write};

use super::HeapReport;

const TEMPLATE: &str = include_str!("../../assets/heap.html");
const DATA_MARK: &str = "/*OPENPROF_DATA*/";
const TITLE_MARK: &str = "<!--OPENPROF_TITLE-->";

/// Writes the page: the template with the report as JSON in its data element.
pub fn write(report: &HeapReport, out: &mut impl Write) -> io::Result<()> {
    let (head, tail) = TEMPLATE
        .split_once(DATA_MARK)
        .expect("the template has a data mark");
    let title = format!("Heap dump {}", report.file);
    out.write_all(head.replace(TITLE_MARK, &escape_html(&title)).as_bytes())?;
    let json = serde_json::to_string(report).map_err(io::Error::other)?;
    // No class name may close the script element.
    out.write_all(json.replace('<', "\\u003c").as_bytes())?;
    out.write_all(tail.as_bytes())
}

fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for char in text.chars() {
        match char {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            _ => escaped.push(char),
        }
    }
    escaped
}
