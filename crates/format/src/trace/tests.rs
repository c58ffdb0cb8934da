//! Tests of the trace format: round trips, the DTD, hostile input, validation.

use proptest::prelude::*;

use super::attrs::{MultiPart, ObjRef, Seconds};
use super::reader::{read_all, FragmentDecoder, MAX_ATTRIBUTES, MAX_DEPTH, MAX_ELEMENT_BYTES};
use super::sample::Rng;
use super::validate::validate;
use super::writer::TraceWriter;
use super::*;

/// xmllint (a reader the project did not write) with `args` on a file holding `bytes`.
fn xmllint(bytes: &[u8], args: &[&str]) -> std::process::Output {
    static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let number = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!(
        "openprof-xmllint-{}-{number}.xml",
        std::process::id()
    ));
    std::fs::write(&file, bytes).unwrap();
    let output = std::process::Command::new("xmllint")
        .args(args)
        .arg(&file)
        .output()
        .expect("xmllint (libxml2-utils) is a prerequisite of the tests");
    let _ = std::fs::remove_file(&file);
    output
}

fn write_all(elements: &[TraceElement], document: bool) -> Vec<u8> {
    let mut writer = if document {
        TraceWriter::document(Vec::new())
    } else {
        TraceWriter::fragments(Vec::new())
    };
    for element in elements {
        writer.write(element).unwrap();
    }
    writer.finish().unwrap()
}

/// Feeds `bytes` to a decoder in pieces cut at `cuts`, collecting what comes out.
fn decode_in_pieces(
    bytes: &[u8],
    cuts: &[usize],
) -> Result<Vec<TraceElement>, reader::TraceReadError> {
    let mut decoder = FragmentDecoder::new();
    let mut elements = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        let cut = cut.clamp(from, bytes.len());
        decoder.push(&bytes[from..cut]);
        from = cut;
        while let Some(element) = decoder.next_element() {
            elements.push(element?);
        }
    }
    decoder.end();
    while let Some(element) = decoder.next_element() {
        elements.push(element?);
    }
    Ok(elements)
}

proptest! {
    #[test]
    fn any_element_sequence_reads_back_unchanged(
        seed in any::<u64>(),
        count in 0usize..40,
        document in any::<bool>(),
        mut cuts in proptest::collection::vec(0usize..20_000, 0..8),
    ) {
        let mut rng = Rng::new(seed);
        let elements: Vec<TraceElement> = (0..count).map(|_| TraceElement::sample(&mut rng)).collect();
        let bytes = write_all(&elements, document);
        cuts.sort_unstable();
        let read = decode_in_pieces(&bytes, &cuts).unwrap();
        prop_assert_eq!(read, elements);
    }
}

#[test]
fn every_element_kind_round_trips() {
    let mut rng = Rng::new(7);
    for _ in 0..50 {
        for sample in sample_of_each(&mut rng) {
            let read: Vec<_> = read_all(sample.text.as_bytes()).collect();
            if matches!(sample.tag, "return" | "parameter" | "exception") {
                assert!(read[0]
                    .as_ref()
                    .unwrap_err()
                    .message
                    .contains("is not a trace element"));
                continue;
            }
            let element = read[0]
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", sample.text));
            let mut again = String::new();
            element.write(&mut again);
            assert_eq!(again, sample.text);
        }
    }
}

#[test]
fn docs_trace_dtd_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/trace.dtd");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    if std::env::var_os("OPENPROF_WRITE_DTD").is_some() {
        std::fs::write(path, dtd::trace_dtd()).unwrap();
        return;
    }
    assert!(
        on_disk == dtd::trace_dtd(),
        "docs/trace.dtd is out of date: regenerate it with OPENPROF_WRITE_DTD=1 cargo test -p openprof-format docs_trace_dtd"
    );
}

#[test]
fn xmllint_validates_a_document_of_every_element_against_the_dtd() {
    let dtd = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/trace.dtd");
    let mut rng = Rng::new(11);
    let mut document = String::from(writer::DOCUMENT_HEAD);
    for _ in 0..5 {
        for sample in sample_of_each(&mut rng) {
            if !matches!(sample.tag, "return" | "parameter" | "exception") {
                document.push_str(&sample.text);
                document.push('\n');
            }
        }
    }
    document.push_str(writer::DOCUMENT_TAIL);
    let output = xmllint(document.as_bytes(), &["--noout", "--dtdvalid", dtd]);
    assert!(
        output.status.success(),
        "xmllint: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // And xmllint refuses what the DTD forbids: a missing required attribute.
    let bad = format!(
        "{}<node hostname=\"h\"/>\n{}",
        writer::DOCUMENT_HEAD,
        writer::DOCUMENT_TAIL
    );
    let output = xmllint(bad.as_bytes(), &["--noout", "--dtdvalid", dtd]);
    assert!(!output.status.success());
}

fn first_error(input: &str) -> reader::TraceReadError {
    read_all(input.as_bytes())
        .find_map(Result::err)
        .unwrap_or_else(|| panic!("accepted: {input}"))
}

#[test]
fn hostile_input_is_refused_without_expanding_anything() {
    let bomb = r#"<?xml version="1.0"?>
<!DOCTYPE TRACE [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>
<TRACE><tag name="&c;"/></TRACE>"#;
    let error = first_error(bomb);
    assert!(error.message.contains("c"), "{error}");
    assert!(
        error.offset > 100,
        "the offset points into the tag: {error}"
    );
    let xxe = r#"<!DOCTYPE TRACE [<!ENTITY x SYSTEM "file:///etc/passwd">]><TRACE><tag value="&x;"/></TRACE>"#;
    assert!(first_error(xxe).to_string().contains("byte"), "XXE refused");
    let text_entity = "<value>&x;</value>";
    first_error(text_entity);
}

#[test]
fn malformed_input_gives_the_byte_offset() {
    let truncated = "<node nodeId=\"60646da0-3298-11d5-a73d-a0c48e000000\" hostname=\"h\"/>\n<threadStart threadId=\"1\"";
    let error = first_error(truncated);
    assert_eq!(error.offset, 67, "{error}");
    assert!(error.message.contains("ends inside an element"), "{error}");
    let garbage = "<gcStart/>garbage<gcStart/>";
    assert!(first_error(garbage)
        .message
        .contains("text outside any element"));
    let mismatched = "<methodEntry><value></methodEntry>";
    first_error(mismatched);
    let unknown = "<gcStart/><frobnicate/>";
    let error = first_error(unknown);
    assert_eq!(error.offset, 10);
    assert!(error
        .message
        .contains("<frobnicate> is not a trace element"));
    let missing = "<node hostname=\"h\"/>";
    assert!(first_error(missing)
        .message
        .contains("<node> lacks its required attribute nodeId"));
    let bad_value = "<methodEntry ticket=\"1,x\"/>";
    assert!(first_error(bad_value)
        .message
        .contains("<methodEntry> ticket: '1,x' is not n[,n]*"));
    let bad_array = "<objAlloc isArray=\"3\"/>";
    assert!(first_error(bad_array).message.contains("isArray"));
    let not_empty = "<gcStart>text</gcStart>";
    assert!(first_error(not_empty).message.contains("must be empty"));
}

#[test]
fn a_read_that_ends_inside_a_doctype_waits_for_more() {
    // Found by the fuzzer: `<!DOCT` at the end of a read is unfinished, not invalid.
    let input = b"<?xml version=\"1.0\"?>\n<!DOCTYPE TRACE>\n<TRACE><gcStart/></TRACE>\n";
    for cut in 0..input.len() {
        let read = decode_in_pieces(input, &[cut]).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        assert_eq!(read.len(), 1, "cut at {cut}");
    }
}

#[test]
fn unknown_attributes_are_ignored() {
    let read: Vec<_> = read_all("<gcStart future=\"1\" time=\"5.5\"/>".as_bytes()).collect();
    match &read[0] {
        Ok(TraceElement::GcStart(gc)) => assert_eq!(
            gc.time,
            Some(Seconds {
                secs: 5,
                nanos: 500_000_000
            })
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_never_ending_element_is_an_error_not_a_leak() {
    let mut decoder = FragmentDecoder::new();
    decoder.push(b"<methodEntry>");
    let chunk = vec![b'x'; 1 << 20];
    let mut error = None;
    for _ in 0..(MAX_ELEMENT_BYTES >> 20) + 2 {
        decoder.push(&chunk);
        if let Some(Err(e)) = decoder.next_element() {
            error = Some(e);
            break;
        }
    }
    assert!(error.expect("refused").message.contains("longer than"));
}

/// A methodEntry holding values in values, `levels` deep in all; the innermost one written as
/// an empty-element tag when `empty_innermost`.
fn nested(levels: usize, empty_innermost: bool) -> String {
    let mut out = String::from("<methodEntry>");
    let inner = levels.saturating_sub(1);
    for level in 0..inner {
        out.push_str(if empty_innermost && level + 1 == inner {
            "<value/>"
        } else {
            "<value>"
        });
    }
    for _ in 0..inner - usize::from(empty_innermost && inner > 0) {
        out.push_str("</value>");
    }
    out.push_str("</methodEntry>");
    out
}

#[test]
fn nesting_deeper_than_the_limit_is_refused_with_its_depth_and_offset() {
    for empty_innermost in [false, true] {
        // At the limit the tree is read; typing then refuses a value holding values.
        let error = first_error(&nested(MAX_DEPTH, empty_innermost));
        assert!(error.message.contains("holds text only"), "{error}");
        // One level more: refused where the level too many starts.
        let lead = "<gcStart/>\n";
        let error = first_error(&format!("{lead}{}", nested(MAX_DEPTH + 1, empty_innermost)));
        let offset = lead.len() + "<methodEntry>".len() + (MAX_DEPTH - 1) * "<value>".len();
        assert_eq!(error.offset, offset as u64, "{error}");
        assert!(
            error
                .message
                .contains(&format!("nested more than {MAX_DEPTH} deep")),
            "{error}"
        );
    }
    // 200,000 levels in a TRACE document, whole and in pieces: an error, not a stack overflow.
    let deep = format!("<TRACE>\n{}\n</TRACE>\n", nested(200_000, false));
    let offset = "<TRACE>\n<methodEntry>".len() + (MAX_DEPTH - 1) * "<value>".len();
    let error = first_error(&deep);
    assert_eq!(error.offset, offset as u64, "{error}");
    let pieces = decode_in_pieces(deep.as_bytes(), &[3, 500, 70_000, 1_000_000]);
    assert_eq!(pieces.unwrap_err(), error);
}

#[test]
fn characters_xml_cannot_carry_are_refused_raw_or_as_references() {
    // Found by the fuzzer: a raw NUL in a value was read, then written back as \u{0}.
    for input in [
        "<option key=\"k\" value=\"y\n\0\"/>",
        "<option key=\"k\" value=\"&#1;\"/>",
        "<methodEntry><value>a\u{1}b</value></methodEntry>",
        "<methodEntry><value><![CDATA[\u{b}]]></value></methodEntry>",
    ] {
        let error = first_error(input);
        assert!(
            error.message.contains("is not a character XML can carry"),
            "{input:?}: {error}"
        );
    }
}

use super::sample::with_attributes;

#[test]
fn more_attributes_than_the_limit_are_refused_quickly() {
    let read: Vec<_> = read_all(with_attributes(MAX_ATTRIBUTES).as_bytes()).collect();
    assert!(
        matches!(&read[..], [Ok(TraceElement::GcStart(gc))] if gc.time.is_some()),
        "{read:?}"
    );
    let error = first_error(&format!(
        "<gcStart/>{}",
        with_attributes(MAX_ATTRIBUTES + 1)
    ));
    assert_eq!(error.offset, 10, "{error}");
    assert!(
        error
            .message
            .contains(&format!("more than {MAX_ATTRIBUTES} attributes")),
        "{error}"
    );
    // A flood of attributes costs no more than the bytes it takes to read.
    let flood = with_attributes(200_000);
    let started = std::time::Instant::now();
    let error = first_error(&flood);
    assert!(error.message.contains("attributes"), "{error}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?} to refuse {} bytes",
        started.elapsed(),
        flood.len()
    );
    // The uniqueness check still finds a name given twice, anywhere within the limit.
    let twice = with_attributes(MAX_ATTRIBUTES - 1).replace("/>", " a7=\"x\"/>");
    let error = first_error(&twice);
    assert!(error.message.contains("a7"), "{error}");
}

fn uuid(n: u8) -> uuid::Uuid {
    uuid::Uuid::from_bytes([n; 16])
}

/// A small valid trace: hierarchy, a thread, a class with a method entered and exited.
fn valid_trace() -> Vec<TraceElement> {
    let trace = uuid(4);
    let cv = |n: u128| Some(MultiPart(n));
    let mut elements: Vec<TraceElement> = vec![
        Node {
            node_id: uuid(1),
            hostname: "h".into(),
            content: NoContent,
        }
        .into(),
        ProcessCreate {
            process_id: uuid(2),
            name: None,
            pid: 7,
            node_id_ref: uuid(1),
            time: Seconds::default(),
            environment: None,
            application_executable: None,
            content: NoContent,
        }
        .into(),
        AgentCreate {
            agent_id: uuid(3),
            process_id_ref: uuid(2),
            agent_name: "openprof".into(),
            time: Seconds::default(),
            agent_parameters: None,
            version: None,
            content: NoContent,
        }
        .into(),
        TraceStart {
            trace_id: trace,
            agent_id_ref: uuid(3),
            time: Seconds::default(),
            collation_value: cv(1),
            content: NoContent,
        }
        .into(),
    ];
    let mut rng = Rng::new(1);
    let mut thread = <ThreadStart as sample::Sample>::sample(&mut rng);
    thread.thread_id = Some(1);
    thread.transient_thread_id = None;
    thread.obj_id_ref = None;
    thread.trace_id_ref = Some(trace);
    thread.collation_value = cv(2);
    elements.push(thread.into());
    let mut class = <ClassDef as sample::Sample>::sample(&mut rng);
    (
        class.class_id,
        class.thread_id_ref,
        class.trace_id_ref,
        class.collation_value,
    ) = (Some(10), Some(1), Some(trace), cv(3));
    elements.push(class.into());
    let mut method = <MethodDef as sample::Sample>::sample(&mut rng);
    (
        method.method_id,
        method.class_id_ref,
        method.trace_id_ref,
        method.collation_value,
    ) = (Some(20), Some(10), Some(trace), cv(4));
    method.content = Signature::default();
    elements.push(method.into());
    for (n, depth) in [(1u128, 1u32), (2, 2)] {
        let mut entry = <MethodEntry as sample::Sample>::sample(&mut rng);
        (
            entry.thread_id_ref,
            entry.method_id_ref,
            entry.ticket,
            entry.stack_depth,
        ) = (Some(1), Some(20), Some(MultiPart(n)), Some(depth));
        (
            entry.obj_id_ref,
            entry.class_id_ref,
            entry.trace_id_ref,
            entry.collation_value,
        ) = (Some(0), Some(10), Some(trace), cv(4 + n));
        elements.push(entry.into());
    }
    for (n, cv_n) in [(2u128, 7u128), (1, 8)] {
        let mut exit = <MethodExit as sample::Sample>::sample(&mut rng);
        (exit.thread_id_ref, exit.method_id_ref, exit.ticket) =
            (Some(1), Some(20), Some(MultiPart(n)));
        (exit.trace_id_ref, exit.collation_value) = (Some(trace), cv(cv_n));
        elements.push(exit.into());
    }
    elements.push(
        Throw {
            transient_thread_id_ref: None,
            thread_id_ref: Some(1),
            time: None,
            obj_id_ref: Some(ObjRef::Unavailable),
            transient_obj_id_ref: None,
            obj_handle: None,
            method_id_ref: Some(20),
            transient_method_id_ref: None,
            ticket: None,
            collation_value: cv(9),
            trace_id_ref: Some(trace),
            content: NoContent,
        }
        .into(),
    );
    elements.push(
        ThreadEnd {
            transient_thread_id_ref: None,
            thread_id_ref: Some(1),
            time: None,
            collation_value: cv(10),
            trace_id_ref: Some(trace),
            content: NoContent,
        }
        .into(),
    );
    elements.push(
        TraceEnd {
            trace_id_ref: trace,
            time: Seconds::default(),
            collation_value: cv(11),
            content: NoContent,
        }
        .into(),
    );
    elements.push(
        AgentDestroy {
            agent_id_ref: uuid(3),
            time: Seconds::default(),
            content: NoContent,
        }
        .into(),
    );
    elements
}

#[test]
fn a_valid_trace_has_no_problems() {
    let problems = validate(valid_trace().into_iter().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn validation_finds_each_kind_of_problem() {
    let check = |mutate: &dyn Fn(&mut Vec<TraceElement>), expected: &str| {
        let mut elements = valid_trace();
        mutate(&mut elements);
        let problems = validate(elements.into_iter().map(Ok));
        assert!(
            problems.iter().any(|p| p.to_string().contains(expected)),
            "expected '{expected}' in {problems:#?}"
        );
    };
    // An idref used before its defining element.
    check(&|e| e.swap(5, 6), "classIdRef 10 is not defined");
    // A collationValue gap.
    check(
        &|e| {
            e.remove(8);
        },
        "collationValue",
    );
    // Tickets that do not pair.
    check(
        &|e| e.swap(9, 10),
        "innermost open entry on thread 1 is ticket 2",
    );
    // A stackDepth that is not deeper than its caller.
    check(
        &|e| {
            if let TraceElement::MethodEntry(entry) = &mut e[8] {
                entry.stack_depth = Some(1)
            }
        },
        "stackDepth 1 is not deeper",
    );
    // An id defined again while it is defined.
    check(
        &|e| {
            let again = e[5].clone();
            e.insert(6, again);
        },
        "classId 10 is defined again while still defined",
    );
    // A stable id defined again after it was undefined.
    check(
        &|e| {
            let trace = uuid(4);
            let unload = ClassUnload {
                transient_thread_id_ref: None,
                thread_id_ref: None,
                time: None,
                transient_class_id_ref: None,
                class_id_ref: Some(10),
                collation_value: None,
                trace_id_ref: Some(trace),
                content: NoContent,
            };
            let again = e[5].clone();
            e.insert(12, unload.into());
            e.insert(13, again);
        },
        "classId 10 is a stable id defined a second time",
    );
    // A thread ending with open entries.
    check(
        &|e| {
            e.remove(10);
        },
        "ends with 1 methodEntry not exited",
    );
    // Not well-formed: reported with the byte offset.
    let problems = validate(read_all("<gcStart/><bad".as_bytes()));
    assert!(
        problems[0].message.contains("not well-formed at byte 10"),
        "{problems:?}"
    );
}

#[test]
fn ids_are_scoped_by_their_trace() {
    // The agent's second trace: the same elements with another trace id, defining the same
    // thread, class and method ids again.
    let mut elements = valid_trace();
    let agent_destroy = elements.pop().unwrap();
    let second: Vec<TraceElement> = elements[3..]
        .iter()
        .map(|element| {
            let mut element = element.clone();
            let collation = element.collation_value().unwrap();
            if let TraceElement::TraceStart(start) = &mut element {
                start.trace_id = uuid(5);
            }
            element.set_context(uuid(5), collation);
            element
        })
        .collect();
    elements.extend(second.iter().cloned());
    elements.push(agent_destroy.clone());
    let problems = validate(elements.into_iter().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");

    // Without its own definitions, the second trace uses ids it does not have.
    let mut elements = valid_trace();
    elements.pop();
    let mut undefined: Vec<TraceElement> = second
        .into_iter()
        .filter(|element| {
            !matches!(
                element,
                TraceElement::ClassDef(_) | TraceElement::MethodDef(_)
            )
        })
        .collect();
    for (n, element) in undefined.iter_mut().enumerate() {
        element.set_context(uuid(5), MultiPart(n as u128 + 1));
    }
    elements.extend(undefined);
    elements.push(agent_destroy);
    let problems = validate(elements.into_iter().map(Ok));
    assert!(
        problems
            .iter()
            .any(|p| p.message.contains("methodIdRef 20 is not defined")),
        "{problems:#?}"
    );
}

#[test]
fn characters_xml_cannot_carry_are_written_as_escapes_and_the_document_stays_well_formed() {
    // A traced String may hold any char; XML 1.0 has no way to write most control characters.
    let awkward = "a\u{1}b\u{1f}c\td\u{ffff}e\u{0}";
    let elements = [TraceElement::Tag(Tag {
        name: Some("MPT Apply Error".into()),
        value: Some(awkward.into()),
        content: NoContent,
    })];
    let bytes = write_all(&elements, true);
    let output = xmllint(&bytes, &["--noout"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read: Vec<TraceElement> = read_all(bytes.as_slice()).map(Result::unwrap).collect();
    let TraceElement::Tag(tag) = &read[0] else {
        panic!("{read:?}")
    };
    assert_eq!(
        tag.value.as_deref(),
        Some("a\\u{1}b\\u{1f}c\td\\u{ffff}e\\u{0}")
    );
}
