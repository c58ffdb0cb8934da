//! The one trace reader: pulls elements out of a byte stream in which an element may be split
//! across reads, as fragments or inside a TRACE document. Strict: malformed input is an error
//! that gives its byte offset. Safe on hostile input: no entity but XML's five predefined ones
//! and character references is expanded, a DOCTYPE's internal subset is never processed,
//! nothing is fetched, and one element may not exceed [`MAX_ELEMENT_BYTES`], nest deeper than
//! [`MAX_DEPTH`] or carry more than [`MAX_ATTRIBUTES`] attributes.

use std::borrow::Cow;
use std::io::Read;

use quick_xml::errors::{Error as XmlError, SyntaxError};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::{RawElement, TraceElement};

/// The largest element accepted: a stream that never closes an element is an error, not a
/// memory leak.
pub const MAX_ELEMENT_BYTES: usize = 16 << 20;

/// How deep elements may nest, a top-level element being level 1 (the TRACE root is not
/// counted). The format needs two (a methodEntry holding values, a methodDef holding its return);
/// the rest is margin.
/// Deeper input is refused as it is read, so that nothing recursive over an element tree
/// (dropping it, comparing it) can run out of stack: this is the one limit, and the collector's
/// fragment scanner applies it too.
pub const MAX_DEPTH: usize = 64;

/// The most attributes one element may carry. The format's largest elements have 16; unknown
/// attributes are ignored, so there is room for more, but not for a flood.
pub const MAX_ATTRIBUTES: usize = 128;

/// Malformed input: where (bytes from the start of the stream) and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset}: {message}")]
pub struct TraceReadError {
    pub offset: u64,
    pub message: String,
}

/// A push decoder: give it bytes as they arrive, take complete elements out.
#[derive(Default)]
pub struct FragmentDecoder {
    buffer: Vec<u8>,
    /// Where the unparsed bytes start in `buffer`.
    start: usize,
    /// Stream offset of `buffer[0]`.
    base: u64,
    ended: bool,
    failed: bool,
    /// Inside `<TRACE>` … `</TRACE>`, and whether the root has closed.
    in_root: bool,
    root_closed: bool,
}

/// Elements are owned (their attributes copied), so a step does not borrow the buffer.
enum Step {
    Element(RawElement<'static>, usize),
    RootStart(usize),
    RootEnd(usize),
    /// Markup that is not an element (declaration, comment, the TRACE root's tags), skipped.
    Skip(usize),
    NeedMore,
}

impl FragmentDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start * 2 >= self.buffer.len() {
            self.buffer.drain(..self.start);
            self.base += self.start as u64;
            self.start = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// Says the stream has ended: what is left must be whole.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// The next complete element, `None` when more bytes are needed (or, after [`end`], when the
    /// stream is done). After an error the decoder stays failed.
    ///
    /// [`end`]: FragmentDecoder::end
    pub fn next_element(&mut self) -> Option<Result<TraceElement, TraceReadError>> {
        if self.failed {
            return None;
        }
        loop {
            let offset = self.base + self.start as u64;
            let fail = |decoder: &mut Self, message: &str| {
                decoder.failed = true;
                Some(Err(TraceReadError {
                    offset,
                    message: message.into(),
                }))
            };
            match parse_one(&self.buffer[self.start..], self.ended) {
                Ok(Step::Skip(used)) => self.start += used,
                Ok(Step::RootStart(used)) => {
                    if self.in_root || self.root_closed {
                        return fail(self, "a second <TRACE> root");
                    }
                    self.in_root = true;
                    self.start += used;
                }
                Ok(Step::RootEnd(used)) => {
                    if !self.in_root {
                        return fail(self, "</TRACE> without <TRACE>");
                    }
                    (self.in_root, self.root_closed) = (false, true);
                    self.start += used;
                }
                Ok(Step::Element(_, _)) if self.root_closed => {
                    return fail(self, "an element after the end of the TRACE document");
                }
                Ok(Step::Element(raw, used)) => {
                    self.start += used;
                    return Some(TraceElement::from_raw(&raw).map_err(|message| {
                        self.failed = true;
                        TraceReadError { offset, message }
                    }));
                }
                Ok(Step::NeedMore) => {
                    let pending = self.buffer.len() - self.start;
                    if self.ended
                        && !self.buffer[self.start..]
                            .iter()
                            .all(u8::is_ascii_whitespace)
                    {
                        return fail(self, "the stream ends inside an element");
                    }
                    if self.ended && self.in_root {
                        return fail(self, "the stream ends before </TRACE>");
                    }
                    if pending > MAX_ELEMENT_BYTES {
                        let message = format!("an element longer than {MAX_ELEMENT_BYTES} bytes");
                        return fail(self, &message);
                    }
                    return None;
                }
                Err((at, message)) => {
                    self.failed = true;
                    return Some(Err(TraceReadError {
                        offset: offset + at,
                        message,
                    }));
                }
            }
        }
    }
}

/// Whether an error only means the bytes so far stop in the middle of something.
fn is_truncation(error: &XmlError) -> bool {
    matches!(
        error,
        XmlError::Syntax(
            SyntaxError::UnclosedTag
                | SyntaxError::UnclosedComment
                | SyntaxError::UnclosedCData
                | SyntaxError::UnclosedDoctype
                | SyntaxError::UnclosedPIOrXmlDecl
        )
    )
}

/// An element's start: its name (static when known) and its attributes, unescaped.
/// (quick-xml 0.37 lends attributes only for the life of the event, so they are copied.)
fn raw_start(start: BytesStart<'_>) -> Result<RawElement<'static>, String> {
    let mut attributes: Vec<(Cow<'static, str>, Cow<'static, str>)> = Vec::new();
    let name = String::from_utf8_lossy(start.name().into_inner()).into_owned();
    // quick-xml's own check for names given twice compares each name with all before it;
    // names are checked below, once the count is known to be bounded.
    for attribute in start.attributes().with_checks(false) {
        if attributes.len() == MAX_ATTRIBUTES {
            return Err(format!(
                "<{name}> has more than {MAX_ATTRIBUTES} attributes (the most allowed)"
            ));
        }
        let attribute = attribute.map_err(|error| format!("<{name}>: {error}"))?;
        let value = attribute
            .unescape_value()
            .map_err(|error| format!("<{name}>: {error}"))?
            .into_owned();
        let key = std::str::from_utf8(attribute.key.into_inner())
            .map_err(|_| format!("<{name}>: an attribute name is not UTF-8"))?
            .to_string();
        if let Some(c) = value.chars().find(|&c| !super::is_xml_char(c)) {
            return Err(format!("<{name}> {key}: {}", not_xml(c)));
        }
        attributes.push((Cow::Owned(key), Cow::Owned(value)));
    }
    if let Some(twice) = name_given_twice(attributes.iter().map(|(key, _)| key.as_ref())) {
        return Err(format!("<{name}>: attribute {twice} given twice"));
    }
    // Known names are static; only an unknown one (an error to come) is copied.
    let name = super::ALL_TAGS
        .iter()
        .find(|tag| **tag == name)
        .map_or(Cow::Owned(name), |tag| Cow::Borrowed(*tag));
    Ok(RawElement {
        name,
        attributes,
        children: Vec::new(),
        text: String::new(),
    })
}

/// A name that occurs more than once, found by sorting: n log n, whatever the names.
fn name_given_twice<'a>(names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut sorted: Vec<&str> = names.collect();
    sorted.sort_unstable();
    sorted
        .windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
}

/// Why a character (raw or as a reference) is refused: quick-xml lets through those XML 1.0
/// cannot carry, which the writer would write back differently.
fn not_xml(c: char) -> String {
    format!("U+{:04X} is not a character XML can carry", u32::from(c))
}

/// The error for an element that would stand one level deeper than [`MAX_DEPTH`].
fn too_deep(name: &[u8]) -> String {
    format!(
        "<{}> is nested more than {MAX_DEPTH} deep (the most allowed)",
        String::from_utf8_lossy(name)
    )
}

/// The length of a `</TRACE>` close tag (with optional white space) at the start of `bytes`,
/// after leading white space; quick-xml cannot see it, as each parse starts with nothing open.
fn root_end_tag(bytes: &[u8]) -> Option<usize> {
    let lead = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let rest = bytes[lead..].strip_prefix(b"</TRACE")?;
    let spaces = rest.iter().take_while(|b| b.is_ascii_whitespace()).count();
    (rest.get(spaces) == Some(&b'>')).then_some(lead + b"</TRACE".len() + spaces + 1)
}

/// Parses markup from the start of `bytes` up to the end of one top-level element.
fn parse_one(bytes: &[u8], ended: bool) -> Result<Step, (u64, String)> {
    if let Some(used) = root_end_tag(bytes) {
        return Ok(Step::RootEnd(used));
    }
    let mut reader = Reader::from_reader(bytes);
    // End tags are matched against our own stack: each call sees one element, not the root.
    reader.config_mut().check_end_names = false;
    let mut stack: Vec<RawElement<'static>> = Vec::new();
    loop {
        let before = reader.buffer_position();
        let event = match reader.read_event() {
            Ok(event) => event,
            Err(error) if is_truncation(&error) && !ended => return Ok(Step::NeedMore),
            // `<!DOCT` cut by a read looks like invalid markup: near the end it is unfinished.
            Err(XmlError::Syntax(SyntaxError::InvalidBangMarkup))
                if !ended && bytes.len().saturating_sub(reader.error_position() as usize) < 10 =>
            {
                return Ok(Step::NeedMore)
            }
            Err(error) if is_truncation(&error) => {
                return Err((0, format!("the stream ends inside an element ({error})")))
            }
            Err(error) => return Err((reader.error_position(), error.to_string())),
        };
        let position = reader.buffer_position() as usize;
        let fail = |message: String| Err((reader.buffer_position(), message));
        match event {
            Event::Eof => return Ok(Step::NeedMore),
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_)
                if stack.is_empty() =>
            {
                return Ok(Step::Skip(position))
            }
            Event::Start(start) if stack.is_empty() && start.name().as_ref() == b"TRACE" => {
                return Ok(Step::RootStart(position))
            }
            Event::End(end) if stack.is_empty() && end.name().as_ref() == b"TRACE" => {
                return Ok(Step::RootEnd(position))
            }
            // Refused where its start tag begins, before a tree too deep to drop can be built.
            Event::Start(start) | Event::Empty(start) if stack.len() == MAX_DEPTH => {
                return Err((before, too_deep(start.name().as_ref())))
            }
            Event::Start(start) => match raw_start(start) {
                Ok(raw) => stack.push(raw),
                Err(message) => return Err((before, message)),
            },
            Event::Empty(start) => {
                let raw = match raw_start(start) {
                    Ok(raw) => raw,
                    Err(message) => return Err((before, message)),
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(raw),
                    None => return Ok(Step::Element(raw, position)),
                }
            }
            Event::End(end) => {
                let Some(done) = stack.pop() else {
                    return fail("an end tag without its start".into());
                };
                if end.name().as_ref() != done.name.as_ref().as_bytes() {
                    let found = String::from_utf8_lossy(end.name().as_ref()).into_owned();
                    return fail(format!("</{found}> closes <{}>", done.name));
                }
                match stack.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => return Ok(Step::Element(done, position)),
                }
            }
            // Text running to the end of the bytes so far may stop inside an escape.
            Event::Text(_) if position == bytes.len() && !ended => return Ok(Step::NeedMore),
            Event::Text(text) => {
                let text = match text.unescape() {
                    Ok(text) => text,
                    Err(error) => return fail(error.to_string()),
                };
                if let Some(c) = text.chars().find(|&c| !super::is_xml_char(c)) {
                    return Err((before, not_xml(c)));
                }
                match stack.last_mut() {
                    Some(parent) => parent.text.push_str(&text),
                    None if text.trim().is_empty() => return Ok(Step::Skip(position)),
                    None => return fail(format!("text outside any element: '{}'", text.trim())),
                }
            }
            Event::CData(data)
                if String::from_utf8_lossy(&data)
                    .chars()
                    .any(|c| !super::is_xml_char(c)) =>
            {
                let c = String::from_utf8_lossy(&data)
                    .chars()
                    .find(|&c| !super::is_xml_char(c));
                return Err((before, not_xml(c.unwrap_or_default())));
            }
            Event::CData(data) => match stack.last_mut() {
                Some(parent) => parent.text.push_str(&String::from_utf8_lossy(&data)),
                None => return fail("CDATA outside any element".into()),
            },
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
}

/// Reads every element of a stream (fragments or a document), in 64 KiB reads.
pub fn read_all(
    mut input: impl Read,
) -> impl Iterator<Item = Result<TraceElement, TraceReadError>> {
    let mut decoder = FragmentDecoder::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut done = false;
    std::iter::from_fn(move || loop {
        if let Some(item) = decoder.next_element() {
            return Some(item);
        }
        if done || decoder.failed {
            return None;
        }
        match input.read(&mut chunk) {
            Ok(0) => {
                decoder.end();
                done = true;
            }
            Ok(read) => decoder.push(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                done = true;
                decoder.failed = true;
                return Some(Err(TraceReadError {
                    offset: decoder.base + decoder.buffer.len() as u64,
                    message: format!("reading the stream: {error}"),
                }));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `levels` elements, each the only child of the one before.
    fn chain(levels: usize) -> String {
        let mut out = String::new();
        for _ in 0..levels {
            out.push_str("<value>");
        }
        for _ in 0..levels {
            out.push_str("</value>");
        }
        out
    }

    #[test]
    fn a_tree_exactly_as_deep_as_the_limit_is_read_whole() {
        let text = chain(MAX_DEPTH);
        let Ok(Step::Element(raw, used)) = parse_one(text.as_bytes(), true) else {
            panic!("refused at the limit");
        };
        assert_eq!(used, text.len());
        let mut levels = 1;
        let mut element = &raw;
        while let Some(child) = element.children.first() {
            (levels, element) = (levels + 1, child);
        }
        assert_eq!(levels, MAX_DEPTH);
        match parse_one(chain(MAX_DEPTH + 1).as_bytes(), true) {
            Err((offset, message)) => {
                assert_eq!(offset as usize, MAX_DEPTH * "<value>".len());
                assert!(message.contains(&MAX_DEPTH.to_string()), "{message}");
            }
            _ => panic!("accepted one level over the limit"),
        }
    }

    #[test]
    fn a_deep_element_tree_is_dropped_without_recursion() {
        // Built by hand, deeper than the reader allows: dropping must not overflow the stack.
        let mut tree = RawElement::default();
        for _ in 0..1_000_000 {
            tree = RawElement {
                name: Cow::Borrowed("value"),
                attributes: Vec::new(),
                children: vec![tree],
                text: String::new(),
            };
        }
        drop(tree);
    }
}
