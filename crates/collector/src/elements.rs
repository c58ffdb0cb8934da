//! Trace elements of a format=x agent's stored fragments, as the rows ClickHouse keeps: each
//! top-level element with its trace, collationValue, name, attributes and its own XML, so that
//! SQL can select by any attribute and a trace can be written back byte for byte.

use quick_xml::events::Event;
use quick_xml::Reader;
use uuid::Uuid;

use crate::scan::scan_fragment;

/// One top-level trace element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementRow {
    /// The frame that brought it.
    pub sequence: u64,
    /// When the collector received that frame, ns since the epoch.
    pub received_ns: u64,
    /// Its trace (`None` above the trace: node, processCreate, agentCreate, agentDestroy).
    pub trace: Option<Uuid>,
    pub collation: Option<u128>,
    /// Its tag: `methodEntry`, `classDef`, ...
    pub element: String,
    /// Its attributes in document order, unescaped.
    pub attributes: Vec<(String, String)>,
    /// The element as received, children and all.
    pub xml: String,
}

/// The elements of one stored fragment. The collector checked the fragment before it stored
/// it, so an error here means the store was changed under it.
pub fn element_rows(
    body: &[u8],
    sequence: u64,
    received_ns: u64,
) -> Result<Vec<ElementRow>, String> {
    let summary = scan_fragment(body)?;
    let mut rows = Vec::with_capacity(summary.elements.len());
    for scanned in summary.elements {
        let xml = std::str::from_utf8(&body[scanned.range.clone()])
            .map_err(|_| "a stored fragment is not UTF-8".to_string())?;
        let (element, attributes) = start_tag(xml)?;
        rows.push(ElementRow {
            sequence,
            received_ns,
            trace: scanned.trace,
            collation: scanned.collation,
            element,
            attributes,
            xml: xml.to_string(),
        });
    }
    Ok(rows)
}

/// The name and attributes of an element's start tag.
fn start_tag(xml: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut reader = Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Start(tag)) | Ok(Event::Empty(tag)) => {
                let name = String::from_utf8_lossy(tag.name().into_inner()).into_owned();
                let mut attributes = Vec::new();
                for attribute in tag.attributes() {
                    let attribute = attribute.map_err(|error| format!("<{name}>: {error}"))?;
                    let value = attribute
                        .unescape_value()
                        .map_err(|error| format!("<{name}>: {error}"))?;
                    attributes.push((
                        String::from_utf8_lossy(attribute.key.into_inner()).into_owned(),
                        value.into_owned(),
                    ));
                }
                return Ok((name, attributes));
            }
            Ok(Event::Eof) => return Err("an element without a start tag".into()),
            Ok(_) => {}
            Err(error) => return Err(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_top_level_element_comes_with_its_attributes_and_its_bytes() {
        let trace = "6a1a3c6e-7f29-4b6a-9d8e-0c1d2e3f4a5b";
        let fragment = format!(
            "<methodDef name=\"work\" signature=\"(I)V\" methodId=\"7\" classIdRef=\"3\" \
             traceIdRef=\"{trace}\" collationValue=\"5\"/>\
             <methodEntry threadIdRef=\"200001\" time=\"1.5\" methodIdRef=\"7\" ticket=\"1\" \
             stackDepth=\"2\" traceIdRef=\"{trace}\" collationValue=\"6\"><value \
             type=\"string\" value=\"a &amp; b\"/></methodEntry>"
        );
        let rows = element_rows(fragment.as_bytes(), 9, 1_000).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].element, "methodDef");
        assert_eq!(rows[0].collation, Some(5));
        assert_eq!(rows[0].trace, Some(trace.parse().unwrap()));
        assert_eq!(rows[0].attributes[0], ("name".into(), "work".into()));
        assert_eq!(rows[1].element, "methodEntry");
        assert!(rows[1].xml.ends_with("</methodEntry>"), "{}", rows[1].xml);
        assert!(rows[1].xml.contains("a &amp; b"));
        assert_eq!(rows[1].sequence, 9);
        assert!(element_rows(b"<methodEntry", 1, 0).is_err());
    }
}
