//! A fast check of the trace fragments agents send, before anything is stored: the XML is
//! well-formed, every top-level element is a trace element, and for each we learn its byte
//! range, trace and collationValue; the hierarchy elements (node, processCreate, agentCreate,
//! agentDestroy, traceStart, traceEnd) are typed in full for the catalog.
//!
//! This is the ingest hot path, so ordinary elements are never typed: quick-xml finds the
//! markup, and a small attribute walker checks what quick-xml leaves unchecked (`<` and
//! references in values, unique names) without allocating. What passes here is stored and
//! exported byte for byte, so anything that would make an exported document malformed is
//! refused here.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use openprof_format::trace::attrs::{AttrValue, MultiPart};
use openprof_format::trace::reader::{FragmentDecoder, MAX_ATTRIBUTES, MAX_DEPTH};
use openprof_format::trace::{TraceElement, ALL_TAGS};
use quick_xml::escape::unescape;
use quick_xml::events::{BytesStart, BytesText, Event};
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

/// What a top-level name is.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Ordinary,
    Hierarchy,
    /// Names its trace with traceId rather than traceIdRef.
    TraceStart,
}

/// Longest element name we look up; longer ones are unknown.
const LONGEST_NAME: usize = 32;

/// The top-level names by length, so that a lookup compares a name with two or three others.
fn top_level_names() -> &'static [Vec<(&'static str, Kind)>] {
    static NAMES: OnceLock<Vec<Vec<(&'static str, Kind)>>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut by_length = vec![Vec::new(); LONGEST_NAME + 1];
        for &tag in TraceElement::TAGS {
            let kind = match tag {
                "traceStart" => Kind::TraceStart,
                _ if HIERARCHY.contains(&tag) => Kind::Hierarchy,
                _ => Kind::Ordinary,
            };
            by_length[tag.len()].push((tag, kind));
        }
        by_length
    })
}

fn top_level_kind(name: &[u8]) -> Option<Kind> {
    top_level_names()
        .get(name.len())?
        .iter()
        .find(|(tag, _)| tag.as_bytes() == name)
        .map(|&(_, kind)| kind)
}

/// How an element's name reads in a message (lossy: it may be what is wrong).
fn shown(name: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(name)
}

/// Byte classes for the attribute walker, one table lookup per byte.
const SPACE: u8 = 1;
/// May stand in an attribute name (any byte of a multi-byte character included).
const NAME: u8 = 2;
/// May start an attribute name.
const NAME_START: u8 = 4;

const CLASSES: [u8; 256] = {
    let mut classes = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        classes[b] = if matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            SPACE
        } else if byte.is_ascii_alphabetic() || byte == b'_' || byte == b':' || byte >= 0x80 {
            NAME | NAME_START
        } else if byte.is_ascii_digit() || byte == b'-' || byte == b'.' {
            NAME
        } else {
            0
        };
        b += 1;
    }
    classes
};

fn count(bytes: &[u8], class: u8) -> usize {
    bytes
        .iter()
        .take_while(|&&b| CLASSES[b as usize] & class != 0)
        .count()
}

/// Checks a start tag's attributes, `name="value"` or `name='value'` separated by white space,
/// at most [`MAX_ATTRIBUTES`], with unique names and values free of `<` and of malformed
/// references, and hands each (name, raw value) to `each`. `names` is scratch space for the uniqueness check, reused from
/// tag to tag so that it costs no allocation.
fn walk_attributes<'a>(
    tag: &'a BytesStart<'a>,
    start: usize,
    names: &mut Vec<Range<usize>>,
    mut each: impl FnMut(&'a [u8], &'a [u8]) -> Result<(), String>,
) -> Result<(), String> {
    let raw = tag.attributes_raw();
    let fail = |problem: String| {
        Err(format!(
            "at byte {start}: <{}>: {problem}",
            shown(tag.name().into_inner())
        ))
    };
    names.clear();
    let mut at = 0;
    loop {
        let spaces = count(&raw[at..], SPACE);
        at += spaces;
        let Some(&first) = raw.get(at) else {
            return match name_given_twice(raw, names) {
                Some(twice) => fail(format!("attribute {} given twice", shown(twice))),
                None => Ok(()),
            };
        };
        if spaces == 0 {
            return fail("attributes must be separated by white space".into());
        }
        let name = at..at + count(&raw[at..], NAME);
        let name_bytes = &raw[name.clone()];
        if CLASSES[first as usize] & NAME_START == 0 {
            let end = raw[at..]
                .iter()
                .position(|&b| b == b'=' || CLASSES[b as usize] & SPACE != 0)
                .map_or(raw.len(), |length| at + length);
            return fail(format!(
                "'{}' is not an attribute name",
                shown(&raw[at..end])
            ));
        }
        if names.len() == MAX_ATTRIBUTES {
            return fail(format!(
                "more than {MAX_ATTRIBUTES} attributes (the most allowed)"
            ));
        }
        at = name.end + count(&raw[name.end..], SPACE);
        if raw.get(at) != Some(&b'=') {
            return fail(format!("attribute {} has no value", shown(name_bytes)));
        }
        at += 1;
        at += count(&raw[at..], SPACE);
        let quote = match raw.get(at) {
            Some(&quote @ (b'"' | b'\'')) => quote,
            _ => {
                return fail(format!(
                    "attribute {}'s value is not quoted",
                    shown(name_bytes)
                ))
            }
        };
        let value_start = at + 1;
        let mut references = false;
        let mut end = value_start;
        loop {
            match raw.get(end) {
                Some(&b) if b == quote => break,
                Some(b'<') => return fail(format!("attribute {} holds '<'", shown(name_bytes))),
                Some(b'&') => references = true,
                Some(_) => {}
                None => {
                    return fail(format!(
                        "attribute {}'s value is not closed",
                        shown(name_bytes)
                    ))
                }
            }
            end += 1;
        }
        let value = &raw[value_start..end];
        if references {
            if let Err(error) = unescape(&String::from_utf8_lossy(value)) {
                return fail(format!("attribute {}: {error}", shown(name_bytes)));
            }
        }
        at = end + 1;
        names.push(name);
        each(name_bytes, value)?;
    }
}

/// A name given more than once, found by sorting (`names` are ranges of `raw`): n log n, so
/// that no crafted tag costs more than its length allows.
fn name_given_twice<'a>(raw: &'a [u8], names: &mut [Range<usize>]) -> Option<&'a [u8]> {
    // Names of different lengths never compare their bytes.
    let key = |range: &Range<usize>| (range.len(), &raw[range.clone()]);
    names.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    names
        .windows(2)
        .find(|pair| key(&pair[0]) == key(&pair[1]))
        .map(|pair| &raw[pair[0].clone()])
}

/// A value's text with its references replaced (they were checked by [`walk_attributes`]).
fn value_text(value: &[u8]) -> Result<Cow<'_, str>, String> {
    // A slice between ASCII quotes of a UTF-8 fragment is UTF-8.
    let text = std::str::from_utf8(value).map_err(|_| "not UTF-8".to_string())?;
    if text.contains('&') {
        return unescape(text)
            .map(|unescaped| Cow::Owned(unescaped.into_owned()))
            .map_err(|error| error.to_string());
    }
    Ok(Cow::Borrowed(text))
}

/// A top-level element opened and not yet closed.
struct Open {
    start: usize,
    kind: Kind,
    trace: Option<Uuid>,
    collation: Option<u128>,
}

/// Checks a top-level start tag and reads its trace and collationValue.
fn top_level(
    tag: &BytesStart,
    start: usize,
    names: &mut Vec<Range<usize>>,
) -> Result<Open, String> {
    let name = tag.name().into_inner();
    let kind = top_level_kind(name)
        .ok_or_else(|| format!("at byte {start}: <{}> is not a trace element", shown(name)))?;
    let trace_attribute: &[u8] = if kind == Kind::TraceStart {
        b"traceId"
    } else {
        b"traceIdRef"
    };
    let mut open = Open {
        start,
        kind,
        trace: None,
        collation: None,
    };
    walk_attributes(tag, start, names, |key, value| {
        let fail = |attribute: &str, problem: String| {
            format!("at byte {start}: <{}> {attribute}: {problem}", shown(name))
        };
        if key == b"collationValue" {
            let text = value_text(value).map_err(|problem| fail("collationValue", problem))?;
            let parsed =
                MultiPart::parse_value(&text).map_err(|problem| fail("collationValue", problem))?;
            open.collation = Some(parsed.0);
        } else if key == trace_attribute {
            let attribute = if kind == Kind::TraceStart {
                "traceId"
            } else {
                "traceIdRef"
            };
            let text = value_text(value).map_err(|problem| fail(attribute, problem))?;
            let trace = Uuid::try_parse_ascii(text.as_bytes())
                .map_err(|_| fail(attribute, format!("'{text}' is not a trace id")))?;
            open.trace = Some(trace);
        }
        Ok(())
    })?;
    Ok(open)
}

/// Checks a start tag inside a top-level element: a name of the format, good attributes.
fn nested(tag: &BytesStart, start: usize, names: &mut Vec<Range<usize>>) -> Result<(), String> {
    let name = tag.name().into_inner();
    if !ALL_TAGS.iter().any(|known| known.as_bytes() == name) {
        return Err(format!(
            "at byte {start}: <{}> is not an element of the trace format",
            shown(name)
        ));
    }
    walk_attributes(tag, start, names, |_, _| Ok(()))
}

/// Checks character data inside an element: references well-formed, no `]]>`.
fn check_text(text: &BytesText, start: usize) -> Result<(), String> {
    let raw: &[u8] = text;
    if raw.contains(&b'&') {
        unescape(&String::from_utf8_lossy(raw))
            .map_err(|error| format!("at byte {start}: {error}"))?;
    }
    if raw.windows(3).any(|window| window == b"]]>") {
        return Err(format!("at byte {start}: ']]>' in character data"));
    }
    Ok(())
}

/// The finished top-level element, typed in full if it is one of the hierarchy.
fn finish(body: &[u8], open: Open, end: usize) -> Result<ScannedElement, String> {
    let hierarchy = if open.kind == Kind::Ordinary {
        None
    } else {
        let mut decoder = FragmentDecoder::new();
        decoder.push(&body[open.start..end]);
        decoder.end();
        match decoder.next_element() {
            Some(Ok(element)) => Some(element),
            Some(Err(error)) => {
                return Err(format!(
                    "at byte {}: {}",
                    open.start as u64 + error.offset,
                    error.message
                ))
            }
            None => return Err(format!("at byte {}: an empty element", open.start)),
        }
    };
    Ok(ScannedElement {
        range: open.start..end,
        trace: open.trace,
        collation: open.collation,
        hierarchy,
    })
}

/// Where the first control character is that XML 1.0 does not allow (all but tab, line feed
/// and carriage return).
fn control_character(body: &[u8]) -> Option<usize> {
    let allowed = |b: u8| b >= 0x20 || matches!(b, b'\t' | b'\n' | b'\r');
    // A fold without early exit over each chunk vectorises; a byte-by-byte search does not.
    body.chunks(64)
        .position(|chunk| !chunk.iter().fold(true, |all, &b| all & allowed(b)))
        .and_then(|index| {
            let chunk = &body[index * 64..];
            chunk
                .iter()
                .position(|&b| !allowed(b))
                .map(|at| index * 64 + at)
        })
}

/// Checks a fragment and finds its elements, or says what is wrong with it and where.
pub fn scan_fragment(body: &[u8]) -> Result<FragmentSummary, String> {
    if body.is_empty() {
        return Err("an empty fragment".into());
    }
    // quick-xml skips a byte order mark silently, which would put it inside the first
    // element's range, and so in the middle of an exported document.
    if body.starts_with(b"\xef\xbb\xbf") {
        return Err("at byte 0: a byte order mark (a fragment holds elements only)".into());
    }
    if let Err(error) = std::str::from_utf8(body) {
        return Err(format!("at byte {}: not UTF-8", error.valid_up_to()));
    }
    if let Some(at) = control_character(body) {
        return Err(format!(
            "at byte {at}: control character {:#04x} is not allowed in XML",
            body[at]
        ));
    }
    let mut reader = Reader::from_reader(body);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.check_comments = true;
    // The elements agents send average ~235 bytes.
    let mut elements = Vec::with_capacity(body.len() / 200 + 1);
    let mut names = Vec::with_capacity(32);
    let mut depth = 0usize;
    let mut open: Option<Open> = None;
    loop {
        let before = reader.buffer_position() as usize;
        let event = match reader.read_event() {
            Ok(event) => event,
            Err(error) => {
                let inside = open
                    .as_ref()
                    .map(|open| format!(" (in the element at byte {})", open.start))
                    .unwrap_or_default();
                return Err(format!(
                    "at byte {}{inside}: {error}",
                    reader.error_position()
                ));
            }
        };
        let after = reader.buffer_position() as usize;
        match event {
            // Refused before the elements the hierarchy holds are typed (a tree) or anything
            // stored that the trace reader would refuse on export.
            Event::Start(tag) | Event::Empty(tag) if depth == MAX_DEPTH => {
                return Err(format!(
                    "at byte {before}: <{}> is nested more than {MAX_DEPTH} deep (the most \
                     allowed)",
                    shown(tag.name().into_inner())
                ));
            }
            Event::Start(tag) => {
                if depth == 0 {
                    open = Some(top_level(&tag, before, &mut names)?);
                } else {
                    nested(&tag, before, &mut names)?;
                }
                depth += 1;
            }
            Event::Empty(tag) => {
                if depth == 0 {
                    let top = top_level(&tag, before, &mut names)?;
                    elements.push(finish(body, top, after)?);
                } else {
                    nested(&tag, before, &mut names)?;
                }
            }
            Event::End(_) => {
                // quick-xml has checked that the name matches the open element's.
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("at byte {before}: an end tag without its start"))?;
                if depth == 0 {
                    let top = open
                        .take()
                        .ok_or_else(|| format!("at byte {before}: an end tag without its start"))?;
                    elements.push(finish(body, top, after)?);
                }
            }
            Event::Text(text) => {
                if depth > 0 {
                    check_text(&text, before)?;
                } else if !text.iter().all(u8::is_ascii_whitespace) {
                    return Err(format!("at byte {before}: text outside any element"));
                }
            }
            Event::CData(_) | Event::Comment(_) if depth > 0 => {}
            Event::Eof => {
                if let Some(open) = open {
                    return Err(format!(
                        "at byte {}: the fragment ends inside the element opened at byte {}",
                        body.len(),
                        open.start
                    ));
                }
                break;
            }
            Event::Decl(_) => {
                return Err(format!(
                    "at byte {before}: an XML declaration (a fragment holds elements only)"
                ))
            }
            Event::DocType(_) => {
                return Err(format!(
                    "at byte {before}: a DOCTYPE (a fragment holds elements only)"
                ))
            }
            Event::PI(_) => {
                return Err(format!(
                    "at byte {before}: a processing instruction (a fragment holds elements only)"
                ))
            }
            Event::CData(_) | Event::Comment(_) => {
                return Err(format!(
                    "at byte {before}: CDATA or a comment outside any element (a fragment holds \
                     elements only)"
                ))
            }
        }
    }
    if elements.is_empty() {
        return Err("the fragment holds no element".into());
    }
    Ok(FragmentSummary { elements })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::trace::sample::Rng;

    /// Random elements of every kind, written one per line (or run together), are found with
    /// their exact ranges, traces and collation values, and the hierarchy typed.
    #[test]
    fn random_elements_are_found_with_their_ranges_and_collation() {
        let mut rng = Rng::new(11);
        for round in 0..300 {
            let elements: Vec<TraceElement> = (0..1 + rng.below(30))
                .map(|_| TraceElement::sample(&mut rng))
                .collect();
            let mut body = String::new();
            let mut ranges = Vec::new();
            for element in &elements {
                let start = body.len();
                element.write(&mut body);
                ranges.push(start..body.len());
                if round % 3 != 0 {
                    body.push_str(["\n", " ", "\r\n\t"][round % 3]);
                }
            }
            let summary =
                scan_fragment(body.as_bytes()).unwrap_or_else(|error| panic!("{error} in {body}"));
            assert_eq!(summary.elements.len(), elements.len());
            for ((scanned, element), range) in summary.elements.iter().zip(&elements).zip(ranges) {
                assert_eq!(scanned.range, range);
                assert_eq!(scanned.collation, element.collation_value().map(|cv| cv.0));
                let trace = match element {
                    TraceElement::TraceStart(start) => Some(start.trace_id),
                    TraceElement::TraceEnd(end) => Some(end.trace_id_ref),
                    _ => {
                        // The sample leaves traceIdRef out now and then.
                        let mut text = String::new();
                        element.write(&mut text);
                        let start_tag = &text[..text.find('>').unwrap()];
                        start_tag
                            .split("traceIdRef=\"")
                            .nth(1)
                            .map(|rest| Uuid::parse_str(&rest[..36]).unwrap())
                    }
                };
                assert_eq!(scanned.trace, trace);
                if HIERARCHY.contains(&element.tag()) {
                    assert_eq!(scanned.hierarchy.as_ref(), Some(element));
                } else {
                    assert_eq!(scanned.hierarchy, None);
                }
            }
        }
    }

    #[test]
    fn escapes_nested_elements_and_comments_inside_are_accepted() {
        let body = concat!(
            "<methodEntry threadIdRef='1' collationValue=\"7,1\">",
            "<value type=\"string\" value=\"a&amp;b&#10;&lt;&#x41;\">x &gt; y &quot;</value>",
            "<!-- a comment --><value/></methodEntry>\n",
            "<methodExit collationValue = \"8\" traceIdRef=\"67e55044-10b1-426f-9247-bb680e5fe0c8\" />"
        );
        let summary = scan_fragment(body.as_bytes()).unwrap();
        assert_eq!(summary.elements.len(), 2);
        assert_eq!(summary.elements[0].collation, Some((1 << 32) | 7));
        assert_eq!(summary.elements[0].trace, None);
        assert_eq!(summary.elements[1].collation, Some(8));
        assert_eq!(
            summary.elements[1].trace,
            Some(Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8").unwrap())
        );
        assert_eq!(
            &body[summary.elements[1].range.clone()],
            body.lines().nth(1).unwrap()
        );
    }

    #[test]
    fn faults_are_named_with_their_place() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty fragment"),
            (b"  \n", "no element"),
            (b"<gcStart", "at byte 0"),
            (
                b"<gcStart time=\"1.0\"/><threadStart>",
                "ends inside the element opened at byte 21",
            ),
            (
                b"<threadStart><value></threadStart>",
                "at byte 20 (in the element at byte 0)",
            ),
            (b"<threadStart></threadEnd>", "at byte 13"),
            (b"</threadStart>", "at byte 0"),
            (
                b"<gcStart/>\n<nope/>",
                "at byte 11: <nope> is not a trace element",
            ),
            (b"<return/>", "<return> is not a trace element"),
            (
                b"<methodEntry><nope/></methodEntry>",
                "at byte 13: <nope> is not an element",
            ),
            (
                b"<gcStart collationValue=\"x\"/>",
                "at byte 0: <gcStart> collationValue: 'x' is not",
            ),
            (b"<gcStart collationValue=\"1,2,3,4,5\"/>", "more than four"),
            (
                b"<gcStart collationValue=\"4294967296\"/>",
                "collationValue",
            ),
            (
                b"<gcStart traceIdRef=\"nope\"/>",
                "'nope' is not a trace id",
            ),
            (
                b"<traceStart traceId=\"nope\"/>",
                "traceId: 'nope' is not a trace id",
            ),
            (
                b"<gcStart/>hello <gcStart/>",
                "at byte 10: text outside any element",
            ),
            (
                b"<?xml version=\"1.0\"?><gcStart/>",
                "at byte 0: an XML declaration",
            ),
            (b"<!DOCTYPE TRACE><gcStart/>", "a DOCTYPE"),
            (
                b"<gcStart/><?pi x?>",
                "at byte 10: a processing instruction",
            ),
            (b"<!-- hi --><gcStart/>", "outside any element"),
            (b"<![CDATA[x]]><gcStart/>", "outside any element"),
            (b"<gcStart/>\xff", "at byte 10: not UTF-8"),
            (b"\xef\xbb\xbf<gcStart/>", "at byte 0: a byte order mark"),
            (b"<gcStart/>\x01", "at byte 10: control character 0x01"),
            (
                b"<gcStart time=\"1\" time=\"2\"/>",
                "attribute time given twice",
            ),
            (
                b"<gcStart time=\"1\"time=\"2\"/>",
                "separated by white space",
            ),
            (b"<gcStart time=1/>", "not quoted"),
            (b"<gcStart time/>", "time has no value"),
            (b"<gcStart time=\"a<b\"/>", "holds '<'"),
            (b"<gcStart time=\"a&b\"/>", "attribute time"),
            (b"<gcStart time=\"&bogus;\"/>", "attribute time"),
            (b"<gcStart time=\"&#0;\"/>", "attribute time"),
            (
                b"<methodEntry><value>a & b</value></methodEntry>",
                "at byte 20",
            ),
            (
                b"<methodEntry><value>a ]]> b</value></methodEntry>",
                "']]>'",
            ),
            (
                b"<methodEntry><value a=\"x\" a=\"y\"/></methodEntry>",
                "given twice",
            ),
            (
                b"<traceEnd traceIdRef=\"67e55044-10b1-426f-9247-bb680e5fe0c8\"/>",
                "time",
            ),
            (b"<node hostname=\"h\"/>", "nodeId"),
        ];
        for (body, expected) in cases {
            let error = scan_fragment(body).expect_err(&String::from_utf8_lossy(body));
            assert!(
                error.contains(expected),
                "{:?}: {error}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// `top` holding values in values, `levels` deep in all.
    fn nested(top: &str, attributes: &str, levels: usize) -> String {
        let mut out = format!("<{top}{attributes}>");
        out.push_str(&"<value>".repeat(levels - 1));
        out.push_str(&"</value>".repeat(levels - 1));
        out.push_str(&format!("</{top}>"));
        out
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused_with_its_depth_and_offset() {
        let at_limit = nested("methodEntry", "", MAX_DEPTH);
        assert_eq!(
            scan_fragment(at_limit.as_bytes()).unwrap().elements.len(),
            1
        );
        let lead = "<gcStart/>\n";
        let over = format!("{lead}{}", nested("methodEntry", "", MAX_DEPTH + 1));
        let offset = lead.len() + "<methodEntry>".len() + (MAX_DEPTH - 1) * "<value>".len();
        let error = scan_fragment(over.as_bytes()).unwrap_err();
        assert!(error.contains(&format!("at byte {offset}: ")), "{error}");
        assert!(
            error.contains(&format!("nested more than {MAX_DEPTH} deep")),
            "{error}"
        );
        let empty_over = over.replacen("<value></value>", "<value/>", 1);
        let error = scan_fragment(empty_over.as_bytes()).unwrap_err();
        assert!(error.contains(&format!("at byte {offset}: ")), "{error}");
        // A hierarchy element is typed in full: 100,000 levels must be refused before that.
        let node = nested(
            "node",
            " nodeId=\"67e55044-10b1-426f-9247-bb680e5fe0c8\" hostname=\"h\"",
            100_000,
        );
        let error = scan_fragment(node.as_bytes()).unwrap_err();
        assert!(
            error.contains(&format!("nested more than {MAX_DEPTH} deep")),
            "{error}"
        );
    }

    use openprof_format::trace::sample::with_attributes;

    #[test]
    fn more_attributes_than_the_limit_are_refused_quickly() {
        let at_limit = with_attributes(MAX_ATTRIBUTES);
        assert_eq!(
            scan_fragment(at_limit.as_bytes()).unwrap().elements.len(),
            1
        );
        let over = format!("<gcStart/>{}", with_attributes(MAX_ATTRIBUTES + 1));
        let error = scan_fragment(over.as_bytes()).unwrap_err();
        assert!(error.contains("at byte 10: "), "{error}");
        assert!(
            error.contains(&format!("more than {MAX_ATTRIBUTES} attributes")),
            "{error}"
        );
        let nested_over = format!(
            "<methodEntry>{}</methodEntry>",
            with_attributes(MAX_ATTRIBUTES + 1).replace("gcStart", "value")
        );
        let error = scan_fragment(nested_over.as_bytes()).unwrap_err();
        assert!(error.contains("at byte 13: "), "{error}");
        // A flood costs no more than reading its bytes.
        let flood = with_attributes(200_000);
        let started = std::time::Instant::now();
        let error = scan_fragment(flood.as_bytes()).unwrap_err();
        assert!(error.contains("attributes"), "{error}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?} to refuse {} bytes",
            started.elapsed(),
            flood.len()
        );
        // Names given twice are still found anywhere within the limit.
        let twice = with_attributes(MAX_ATTRIBUTES - 1).replace("/>", " a7=\"x\"/>");
        let error = scan_fragment(twice.as_bytes()).unwrap_err();
        assert!(error.contains("attribute a7 given twice"), "{error}");
    }

    /// Every prefix of a valid fragment that cuts an element is refused.
    #[test]
    fn truncated_fragments_are_refused() {
        let mut rng = Rng::new(5);
        let mut body = String::new();
        let mut ends = Vec::new();
        for _ in 0..20 {
            TraceElement::sample(&mut rng).write(&mut body);
            ends.push(body.len());
            body.push('\n');
        }
        for cut in 1..body.len() {
            if !body.is_char_boundary(cut) {
                continue;
            }
            let result = scan_fragment(&body.as_bytes()[..cut]);
            let whole = ends.iter().filter(|&&end| end <= cut).count();
            let at_boundary = ends.contains(&cut) || ends.contains(&(cut - 1));
            if at_boundary {
                assert_eq!(result.unwrap().elements.len(), whole, "cut at {cut}");
            } else {
                assert!(result.is_err(), "cut at {cut}: {:?}", &body[..cut]);
            }
        }
    }
}
