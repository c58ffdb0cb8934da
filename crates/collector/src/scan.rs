//! A fast check of the trace fragments agents send, before anything is stored: the XML is
//! well-formed, every top-level element is a trace element, and for each we learn its byte
//! range, trace and collationValue; the hierarchy elements (node, processCreate, agentCreate,
//! agentDestroy, traceStart, traceEnd) are typed in full for the catalog.

use std::ops::Range;

use openprof_format::trace::attrs::{AttrValue, MultiPart};
use openprof_format::trace::reader::read_all;
use openprof_format::trace::TraceElement;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;
use uuid::Uuid;

/// One top-level element of a fragment.
#[derive(Clone, Debug, PartialEq)]
pub struct ScannedElement {
    /// Its bytes within the fragment, from `<` to the end of its closing tag.
    pub range: Range<usize>,
    /// traceId (traceStart) or traceIdRef; `None` above the trace.
    pub trace: Option<Uuid>,
    pub collation: Option<u128>,
    /// The element typed, for node, processCreate, agentCreate, agentDestroy, traceStart and
    /// traceEnd only.
    pub hierarchy: Option<TraceElement>,
}

/// What a fragment holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FragmentSummary {
    pub elements: Vec<ScannedElement>,
}

const HIERARCHY: &[&str] = &[
    "node",
    "processCreate",
    "agentCreate",
    "agentDestroy",
    "traceStart",
    "traceEnd",
];

/// What the start tag of a top-level element says.
struct TopLevel {
    start: usize,
    trace: Option<Uuid>,
    collation: Option<u128>,
    hierarchy: bool,
}

fn top_level(tag: &BytesStart, start: usize) -> Result<TopLevel, String> {
    let name = std::str::from_utf8(tag.name().as_ref())
        .map_err(|_| format!("at byte {start}: an element name is not UTF-8"))?
        .to_string();
    if !TraceElement::TAGS.contains(&name.as_str()) {
        return Err(format!("at byte {start}: <{name}> is not a trace element"));
    }
    let mut found = TopLevel {
        start,
        trace: None,
        collation: None,
        hierarchy: HIERARCHY.contains(&name.as_str()),
    };
    let trace_attribute: &[u8] = if name == "traceStart" {
        b"traceId"
    } else {
        b"traceIdRef"
    };
    for attribute in tag.attributes() {
        let attribute = attribute.map_err(|error| format!("at byte {start}: <{name}>: {error}"))?;
        let key = attribute.key.as_ref();
        if key == trace_attribute || key == b"collationValue" {
            let value = std::str::from_utf8(&attribute.value)
                .map_err(|_| format!("at byte {start}: <{name}>: an attribute is not UTF-8"))?;
            if key == b"collationValue" {
                let parsed = MultiPart::parse_value(value).map_err(|problem| {
                    format!("at byte {start}: <{name}> collationValue: {problem}")
                })?;
                found.collation = Some(parsed.0);
            } else {
                found.trace = Some(Uuid::parse_str(value).map_err(|_| {
                    format!("at byte {start}: <{name}>: '{value}' is not a trace id")
                })?);
            }
        }
    }
    Ok(found)
}

fn finish(body: &[u8], top: TopLevel, end: usize) -> Result<ScannedElement, String> {
    let hierarchy = if top.hierarchy {
        let element = read_all(&body[top.start..end])
            .next()
            .ok_or_else(|| format!("at byte {}: an empty element", top.start))?
            .map_err(|error| format!("at byte {}: {}", top.start, error.message))?;
        Some(element)
    } else {
        None
    };
    Ok(ScannedElement {
        range: top.start..end,
        trace: top.trace,
        collation: top.collation,
        hierarchy,
    })
}

/// Checks a fragment and finds its elements, or says what is wrong with it and where.
pub fn scan_fragment(body: &[u8]) -> Result<FragmentSummary, String> {
    if let Err(error) = std::str::from_utf8(body) {
        return Err(format!("not UTF-8 at byte {}", error.valid_up_to()));
    }
    let mut reader = Reader::from_reader(body);
    reader.config_mut().check_end_names = true;
    let mut summary = FragmentSummary::default();
    let mut depth = 0usize;
    let mut open: Option<TopLevel> = None;
    loop {
        let before = reader.buffer_position() as usize;
        let event = reader
            .read_event()
            .map_err(|error| format!("at byte {}: {error}", reader.error_position()))?;
        let after = reader.buffer_position() as usize;
        match event {
            Event::Start(tag) => {
                if depth == 0 {
                    open = Some(top_level(&tag, before)?);
                }
                depth += 1;
            }
            Event::Empty(tag) => {
                if depth == 0 {
                    let top = top_level(&tag, before)?;
                    summary.elements.push(finish(body, top, after)?);
                }
            }
            Event::End(_) => {
                // quick-xml has checked that the name matches the open element.
                depth -= 1;
                if depth == 0 {
                    let top = open.take().expect("an open top-level element");
                    summary.elements.push(finish(body, top, after)?);
                }
            }
            Event::Text(text) => {
                if depth == 0 && !text.iter().all(u8::is_ascii_whitespace) {
                    return Err(format!("at byte {before}: text outside any element"));
                }
            }
            Event::Eof => {
                if depth > 0 {
                    return Err(format!(
                        "at byte {}: the fragment ends inside an element",
                        body.len()
                    ));
                }
                break;
            }
            Event::CData(_) if depth > 0 => {}
            Event::Comment(_) => {}
            Event::Decl(_) | Event::PI(_) | Event::DocType(_) | Event::CData(_) => {
                return Err(format!(
                    "at byte {before}: a fragment holds elements only (no declaration, doctype, \
                     processing instruction or top-level CDATA)"
                ))
            }
        }
    }
    if summary.elements.is_empty() {
        return Err("the fragment holds no element".into());
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::trace::sample::Rng;

    #[test]
    fn random_elements_are_found_with_their_ranges_and_collation() {
        let mut rng = Rng::new(11);
        for _ in 0..200 {
            let elements: Vec<TraceElement> =
                (0..20).map(|_| TraceElement::sample(&mut rng)).collect();
            let mut body = String::new();
            let mut ranges = Vec::new();
            for element in &elements {
                let start = body.len();
                element.write(&mut body);
                ranges.push(start..body.len());
                body.push('\n');
            }
            let summary = scan_fragment(body.as_bytes()).unwrap();
            assert_eq!(summary.elements.len(), elements.len());
            for ((scanned, element), range) in summary.elements.iter().zip(&elements).zip(ranges) {
                assert_eq!(scanned.range, range);
                assert_eq!(scanned.collation, element.collation_value().map(|cv| cv.0));
                if HIERARCHY.contains(&element.tag()) {
                    assert_eq!(scanned.hierarchy.as_ref(), Some(element));
                }
            }
        }
    }

    #[test]
    fn faults_are_named_with_their_place() {
        let cases: &[(&[u8], &str)] = &[
            (b"<gcStart", "not closed"),
            (b"<threadStart>", "ends inside"),
            (b"<nope/>", "<nope> is not a trace element"),
            (b"<gcStart collationValue=\"x\"/>", "collationValue"),
            (b"<threadStart><oops></threadStart>", "at byte"),
            (b"hello <gcStart/>", "text outside any element"),
            (b"<?xml version=\"1.0\"?><gcStart/>", "elements only"),
            (b"", "no element"),
            (b"<gcStart traceIdRef=\"nope\"/>", "not a trace id"),
            (b"<gcStart/>\xff", "not UTF-8"),
        ];
        for (body, expected) in cases {
            let error = scan_fragment(body).unwrap_err();
            assert!(
                error.contains(expected),
                "{:?}: {error}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
