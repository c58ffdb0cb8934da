//! Tests of the reader as it lexes straight from the input, and of the writer's exact text: the
//! same elements and errors whatever the pieces, the same elements however a start tag spells
//! its attributes, the rules of XML it keeps, numbers and escapes as before.

use proptest::prelude::*;

use super::attrs::{AttrValue, MultiPart, Seconds};
use super::reader::{read_all, FragmentDecoder, TraceReadError};
use super::sample::Rng;
use super::*;

/// What a decoder gives for `bytes` pushed in pieces cut at `cuts` (sorted): the elements up to
/// the first error, and that error.
fn outcome(bytes: &[u8], cuts: &[usize]) -> (Vec<TraceElement>, Option<TraceReadError>) {
    let mut decoder = FragmentDecoder::new();
    let mut elements = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        let cut = cut.clamp(from, bytes.len());
        decoder.push(&bytes[from..cut]);
        from = cut;
        if from == bytes.len() {
            decoder.end();
        }
        while let Some(element) = decoder.next_element() {
            match element {
                Ok(element) => elements.push(element),
                Err(error) => return (elements, Some(error)),
            }
        }
    }
    (elements, None)
}

/// `count` random elements written one per line, as fragments or as a document.
fn written(seed: u64, count: usize, document: bool) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = String::new();
    if document {
        out.push_str(writer::DOCUMENT_HEAD);
    }
    for _ in 0..count {
        TraceElement::sample(&mut rng).write(&mut out);
        out.push('\n');
    }
    if document {
        out.push_str(writer::DOCUMENT_TAIL);
    }
    out.into_bytes()
}

/// Pieces of markup that make input malformed or unusual in the ways the lexer tells apart.
const SNIPPETS: &[&[u8]] = &[
    b"<",
    b">",
    b"&",
    b"\"",
    b"'",
    b"/>",
    b"</value>",
    b"<value>",
    b"<value/>",
    b"&amp;",
    b"&#1;",
    b"&#x41;",
    b"&#+65;",
    b"&bogus;",
    b"]]>",
    b"<!--c-->",
    b"<?pi x?>",
    b"<?xml version=\"1.0\"?>",
    b"<!DOCTYPE TRACE>",
    b"<!DOCTYPE TRACE [<!ENTITY a \"b>\">]>",
    b"<![CDATA[<&]]>",
    b" ",
    b"\n",
    b"\xc2\xa0",
    b"\xef\xbb\xbf",
    b"\xef\xbf\xbe",
    b"\x00",
    b"\xff",
    b"=",
    b" x=\"y\"",
    b" time = '1.5'",
    b" collationValue=\"1\"",
    b"<TRACE>",
    b"</TRACE>",
    b"<gcStart/>",
    b"<frob/>",
    b"<return/>",
    b"<!DOCT",
];

/// `bytes` with each edit applied: at a position, a snippet inserted or a few bytes removed.
fn mutated(bytes: &[u8], edits: &[(usize, usize, bool)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, what, insert) in edits {
        let at = at % (out.len() + 1);
        if insert {
            let snippet = SNIPPETS[what % SNIPPETS.len()];
            out.splice(at..at, snippet.iter().copied());
        } else {
            let end = (at + 1 + what % 8).min(out.len());
            out.drain(at..end);
        }
    }
    out
}

fn edits() -> impl Strategy<Value = Vec<(usize, usize, bool)>> {
    proptest::collection::vec((any::<usize>(), any::<usize>(), any::<bool>()), 0..4)
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0usize..4000, 0..12).prop_map(|mut cuts| {
        cuts.sort_unstable();
        cuts
    })
}

/// A start tag as the writer writes it, taken apart: its name, its attributes (values as
/// written, escaped), and the text after it.
fn start_tag(text: &str) -> (&str, Vec<(&str, &str)>, &str) {
    let name_end = text.find([' ', '/', '>']).unwrap();
    let mut rest = &text[name_end..];
    let mut attributes = Vec::new();
    while let Some(after_space) = rest.strip_prefix(' ') {
        let (name, after_name) = after_space.split_once("=\"").unwrap();
        // The writer escapes every '"' in a value.
        let (value, after_value) = after_name.split_once('"').unwrap();
        attributes.push((name, value));
        rest = after_value;
    }
    (&text[1..name_end], attributes, rest)
}

proptest! {
    #[test]
    fn input_cut_anywhere_gives_the_same_elements_and_error(
        seed in any::<u64>(),
        count in 0usize..8,
        document in any::<bool>(),
        edits in edits(),
        cuts in cuts(),
    ) {
        let bytes = mutated(&written(seed, count, document), &edits);
        prop_assert_eq!(outcome(&bytes, &cuts), outcome(&bytes, &[]));
    }

    #[test]
    fn any_bytes_cut_anywhere_give_the_same_elements_and_error(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        cuts in cuts(),
    ) {
        prop_assert_eq!(outcome(&bytes, &cuts), outcome(&bytes, &[]));
    }

    #[test]
    fn what_is_read_writes_and_reads_back_unchanged(
        seed in any::<u64>(),
        count in 0usize..8,
        document in any::<bool>(),
        edits in edits(),
    ) {
        let bytes = mutated(&written(seed, count, document), &edits);
        for element in outcome(&bytes, &[]).0 {
            let mut text = String::new();
            element.write(&mut text);
            let again: Vec<_> = read_all(text.as_bytes()).collect();
            prop_assert_eq!(again.len(), 1, "{}", text);
            prop_assert_eq!(again[0].as_ref().ok(), Some(&element), "{}", text);
        }
    }

    #[test]
    fn attributes_in_any_order_spacing_and_quotes_read_the_same(
        seed in any::<u64>(),
        spelling in any::<u64>(),
    ) {
        let mut rng = Rng::new(seed);
        let element = TraceElement::sample(&mut rng);
        let mut text = String::new();
        element.write(&mut text);
        let (name, mut attributes, rest) = start_tag(&text);
        let mut rng = Rng::new(spelling);
        for at in (1..attributes.len()).rev() {
            attributes.swap(at, rng.below(at as u64 + 1) as usize);
        }
        let mut respelled = format!("<{name}");
        for (attribute, value) in attributes {
            respelled.push_str([" ", "\n\t", "  "][rng.below(3) as usize]);
            respelled.push_str(attribute);
            respelled.push_str([ "=", " = ", "\n="][rng.below(3) as usize]);
            if value.contains('\'') || rng.below(2) == 0 {
                respelled.push_str(&format!("\"{value}\""));
            } else {
                respelled.push_str(&format!("'{value}'"));
            }
        }
        respelled.push_str(rest);
        let read: Vec<_> = read_all(respelled.as_bytes()).collect();
        prop_assert_eq!(read.len(), 1, "{}", respelled);
        prop_assert_eq!(read[0].as_ref().ok(), Some(&element), "{}", respelled);
    }

    #[test]
    fn numbers_are_read_from_bytes_as_str_parse_reads_them(
        text in "[+-]{0,2}[0-9]{0,24}|[0-9+-.,a ]{0,12}",
    ) {
        let bytes = text.as_bytes();
        prop_assert_eq!(u32::parse_bytes(bytes).ok(), text.parse::<u32>().ok());
        prop_assert_eq!(u64::parse_bytes(bytes).ok(), text.parse::<u64>().ok());
        prop_assert_eq!(i32::parse_bytes(bytes).ok(), text.parse::<i32>().ok());
        prop_assert_eq!(i64::parse_bytes(bytes).ok(), text.parse::<i64>().ok());
        prop_assert_eq!(Seconds::parse_bytes(bytes).ok(), seconds_as_before(&text));
        prop_assert_eq!(MultiPart::parse_bytes(bytes).ok(), multi_part_as_before(&text));
    }

    #[test]
    fn numbers_are_written_as_core_fmt_writes_them(
        secs in any::<u64>(),
        nanos in 0u32..1_000_000_000,
        parts in any::<u128>(),
        shift in 0u32..128,
        number in any::<i64>(),
        id in any::<u128>(),
    ) {
        let text_of = |value: &dyn Fn(&mut String)| {
            let mut out = String::new();
            value(&mut out);
            out
        };
        prop_assert_eq!(
            text_of(&|out| Seconds { secs, nanos }.write_value(out)),
            format!("{secs}.{nanos:09}")
        );
        let multi = MultiPart(parts >> shift);
        let mut expected = Vec::new();
        let mut rest = multi.0;
        loop {
            expected.push((rest as u32).to_string());
            rest >>= 32;
            if rest == 0 {
                break;
            }
        }
        prop_assert_eq!(text_of(&|out| multi.write_value(out)), expected.join(","));
        prop_assert_eq!(text_of(&|out| number.write_value(out)), number.to_string());
        prop_assert_eq!(text_of(&|out| (number as u32).write_value(out)), (number as u32).to_string());
        let id = uuid::Uuid::from_u128(id);
        prop_assert_eq!(text_of(&|out| id.write_value(out)), id.hyphenated().to_string());
    }

    #[test]
    fn escaping_is_what_it_was_character_by_character(text in any::<String>()) {
        let mut out = String::new();
        escape_attribute(&text, &mut out);
        prop_assert_eq!(out, escaped_as_before(&text, true));
        let mut out = String::new();
        escape_text(&text, &mut out);
        prop_assert_eq!(out, escaped_as_before(&text, false));
    }
}

/// Seconds read as `str` splitting and parsing did.
fn seconds_as_before(text: &str) -> Option<Seconds> {
    let (secs, fraction) = text.split_once('.').unwrap_or((text, ""));
    if secs.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = if fraction.is_empty() {
        0
    } else {
        fraction.parse::<u32>().ok()? * 10u32.pow(9 - fraction.len() as u32)
    };
    Some(Seconds {
        secs: secs.parse().ok()?,
        nanos,
    })
}

/// A multi-part counter read as `str` splitting and parsing did.
fn multi_part_as_before(text: &str) -> Option<MultiPart> {
    let mut value = 0u128;
    for (index, part) in text.split(',').enumerate() {
        if index >= 4 {
            return None;
        }
        value |= u128::from(part.parse::<u32>().ok()?) << (32 * index);
    }
    Some(MultiPart(value))
}

/// Escaping one character at a time.
fn escaped_as_before(text: &str, attribute: bool) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            c if !is_xml_char(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

fn read(input: &[u8]) -> (Vec<TraceElement>, Option<TraceReadError>) {
    outcome(input, &[])
}

fn refused(input: &[u8], expected: &str) -> TraceReadError {
    let (_, error) = read(input);
    let error = error.unwrap_or_else(|| panic!("accepted: {:?}", String::from_utf8_lossy(input)));
    assert!(
        error.message.contains(expected),
        "{:?}: {error}",
        String::from_utf8_lossy(input)
    );
    error
}

#[test]
fn what_xml_forbids_is_refused() {
    refused(b"<option key=\"a<b\"/>", "holds '<'");
    refused(
        b"<gcStart time=\"1.5\"threadIdRef=\"2\"/>",
        "separated by white space",
    );
    refused(b"<gcStart ti$me=\"1.5\"/>", "has no value");
    refused(b"<gcStart time=1.5/>", "not quoted");
    refused(b"<gcStart time=\"1.5\" / >", "'/' not followed by '>'");
    refused(
        b"<gcStart \xff=\"1\"/>",
        "attribute name \u{fffd} is not UTF-8",
    );
    refused(b"<option value=\"\xff\"/>", "not UTF-8");
    refused(
        b"<methodEntry><value>a]]>b</value></methodEntry>",
        "']]>' in character data",
    );
    refused(b"\xc2\xa0<gcStart/>", "text outside any element");
    refused(b"\xef\xbb\xbf<gcStart/>", "text outside any element");
    refused(b"<? x?><gcStart/>", "does not start a name");
    refused(b"<!DOCTYPE TRACE<x>><gcStart/>", "'<' in a DOCTYPE");
    refused(b"<gcStart/><!DOCTYPE TRACE>", "DOCTYPE after");
    refused(
        b"<methodEntry><!DOCTYPE TRACE></methodEntry>",
        "DOCTYPE inside an element",
    );
    refused(b"<option value=\"&#+65;\"/>", "not a character reference");
    refused(b"<option value=\"&#xD800;\"/>", "not a character reference");
    refused(b"<option value=\"&bogus;\"/>", "&bogus; is not read");
    refused(b"<option value=\"&amp\"/>", "without the ';'");
    refused(b"<gcStart time=\"1.5\" time=\"2.5\"/>", "time given twice");
    refused(b"<gcStart a=\"1\" b=\"2\" a=\"3\"/>", "a given twice");
    refused(
        b"<methodEntry></methodExit>",
        "</methodExit> closes <methodEntry>",
    );
}

#[test]
fn references_and_the_doctype_subset_are_read_as_xml_says() {
    let input = b"<?xml version=\"1.0\"?>\n<!-- a trace -->\n<!DOCTYPE TRACE SYSTEM \"x>y\" [\n\
        <!ENTITY a \"x>y]\"><!-- ]> --><?pi ]>?>\n]>\n<TRACE>\
        <option key=\"&lt;&gt;&amp;&apos;&quot;\" value='&#65;&#x42;&#x1F600;\"'/>\
        <methodEntry><value>&lt;<![CDATA[<&>]]><!-- c --><?pi x?>\xc3\xa9</value></methodEntry>\
        </TRACE>";
    let (elements, error) = read(input);
    assert_eq!(error, None);
    let [TraceElement::OptionElement(option), TraceElement::MethodEntry(entry)] = &elements[..]
    else {
        panic!("{elements:?}")
    };
    assert_eq!(option.key.as_deref(), Some("<>&'\""));
    assert_eq!(option.value.as_deref(), Some("AB\u{1F600}\""));
    assert_eq!(entry.content.0[0].content.0, "<<&>é");
}

#[test]
fn unknown_and_out_of_order_attributes_are_read_by_name() {
    let (elements, error) = read(
        b"<methodExit future='x' collationValue=\"7\" ticket=\"3\" threadIdRef = \"2\" \
          other=\"y\"/>",
    );
    assert_eq!(error, None);
    let [TraceElement::MethodExit(exit)] = &elements[..] else {
        panic!("{elements:?}")
    };
    assert_eq!(exit.collation_value, Some(MultiPart(7)));
    assert_eq!(exit.ticket, Some(MultiPart(3)));
    assert_eq!(exit.thread_id_ref, Some(2));
}

#[test]
fn syntax_errors_are_reported_before_typing_errors_in_the_same_element() {
    // A bad value first, a malformed tag later in the same element: the second is what is
    // wrong with the bytes, and is reported with its offset.
    let error = refused(
        b"<methodEntry ticket=\"x\"><value a=\"1\"b=\"2\"/></methodEntry>",
        "separated by white space",
    );
    assert_eq!(error.offset, 24);
    // Well-formed but untypable: reported at the element's start.
    let error = refused(b"<gcStart/>\n<methodEntry ticket=\"x\"/>", "ticket: 'x'");
    assert_eq!(error.offset, 11);
}
