//! The one trace reader: pulls elements out of a byte stream in which an element may be split
//! across reads, as fragments or inside a TRACE document. Each element is typed as it is lexed
//! ([`super::lexer`]), straight from the input bytes. Strict: malformed input is an error that
//! gives its byte offset. Safe on hostile input: no entity but XML's five predefined ones and
//! character references is expanded, a DOCTYPE's internal subset is never processed, nothing
//! is fetched, and one element may not exceed [`MAX_ELEMENT_BYTES`], nest deeper than
//! [`MAX_DEPTH`] or carry more than [`MAX_ATTRIBUTES`] attributes.

use std::io::Read;

use super::lexer::{Lexer, Markup, Scratch, Stop};
use super::TraceElement;

/// The largest element accepted: a stream that never closes an element is an error, not a
/// memory leak.
pub const MAX_ELEMENT_BYTES: usize = 16 << 20;

/// How deep elements may nest, a top-level element being level 1 (the TRACE root is not
/// counted). The format needs two (a methodEntry holding values, a methodDef holding its return);
/// the rest is margin.
/// Deeper input is refused as it is read, at the start tag one level too deep: this is the one
/// limit, and the collector's fragment scanner applies it too.
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
    /// The bytes pushed, up to `filled`; the rest is room for more, kept initialised so that
    /// reads can go straight into it.
    buffer: Vec<u8>,
    filled: usize,
    /// Where the unparsed bytes start in `buffer`.
    start: usize,
    /// Stream offset of `buffer[0]`.
    base: u64,
    ended: bool,
    failed: bool,
    /// Inside `<TRACE>` … `</TRACE>`, and whether the root has closed.
    in_root: bool,
    root_closed: bool,
    /// Whether an element or the root has been read: a DOCTYPE may only come before.
    started: bool,
    scratch: Scratch,
}

/// What the markup at the start of the unparsed bytes is, and how many bytes it takes.
enum Step {
    /// A top-level element: typed (in the slot given), or the reason it can't be.
    Element(Option<String>, usize),
    RootStart(usize),
    RootEnd(usize),
    /// Markup that is not an element (declaration, comment), skipped.
    Skip(usize),
    Doctype(usize),
    NeedMore,
}

impl FragmentDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.room(bytes.len());
        room.copy_from_slice(bytes);
        self.filled += bytes.len();
    }

    /// Makes room for `size` more bytes after those pushed (moving the unparsed ones to the
    /// front once the parsed ones are the larger part) and lends it.
    fn room(&mut self, size: usize) -> &mut [u8] {
        if self.start > 0 && self.start * 2 >= self.filled {
            self.buffer.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.base += self.start as u64;
            self.start = 0;
        }
        let end = self.filled + size;
        if self.buffer.len() < end {
            self.buffer.resize(end, 0);
        }
        &mut self.buffer[self.filled..end]
    }

    /// Reads up to `size` bytes from `input` straight into the buffer: what `push` does
    /// without copying them twice.
    fn read_from(&mut self, input: &mut impl Read, size: usize) -> std::io::Result<usize> {
        let read = input.read(self.room(size))?;
        self.filled += read;
        Ok(read)
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
            // The white space between elements, skipped here rather than as a step of its own:
            // each element's offset is where its markup starts.
            self.start += self.buffer[self.start..self.filled]
                .iter()
                .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .count();
            let offset = self.base + self.start as u64;
            let fail = |decoder: &mut Self, message: &str| {
                decoder.failed = true;
                Some(Err(TraceReadError {
                    offset,
                    message: message.into(),
                }))
            };
            let mut element = None;
            match self.parse_one(&mut element) {
                Ok(Step::Skip(used)) => self.start += used,
                Ok(Step::Doctype(_)) if self.started => {
                    return fail(self, "a DOCTYPE after the document's first element");
                }
                Ok(Step::Doctype(used)) => self.start += used,
                Ok(Step::RootStart(used)) => {
                    if self.in_root || self.root_closed {
                        return fail(self, "a second <TRACE> root");
                    }
                    (self.in_root, self.started) = (true, true);
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
                Ok(Step::Element(problem, used)) => {
                    self.start += used;
                    self.started = true;
                    return match (element, problem) {
                        (Some(element), None) => Some(Ok(element)),
                        (_, problem) => {
                            let message =
                                problem.unwrap_or_else(|| "an element that can't be read".into());
                            fail(self, &message)
                        }
                    };
                }
                Ok(Step::NeedMore) => {
                    let pending = self.filled - self.start;
                    if self.ended && pending > 0 {
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
                        offset: offset + at as u64,
                        message,
                    }));
                }
            }
        }
    }

    /// Lexes the markup at the start of the unparsed bytes, up to the end of one top-level
    /// element; a problem is given with its offset from there.
    fn parse_one(&mut self, element: &mut Option<TraceElement>) -> Result<Step, (usize, String)> {
        let bytes = &self.buffer[self.start..self.filled];
        let mut lexer = Lexer::new(bytes, self.ended, std::mem::take(&mut self.scratch));
        let lexed = top_level(&mut lexer, element);
        let used = lexer.position();
        let typing = lexer.typing.take();
        self.scratch = lexer.into_scratch();
        match lexed {
            Ok(Unit::Element) => Ok(Step::Element(typing, used)),
            Ok(Unit::RootStart) => Ok(Step::RootStart(used)),
            Ok(Unit::RootEnd) => Ok(Step::RootEnd(used)),
            Ok(Unit::Skip) => Ok(Step::Skip(used)),
            Ok(Unit::Doctype) => Ok(Step::Doctype(used)),
            Err(Stop::More) if self.ended && !bytes.is_empty() => {
                Err((0, "the stream ends inside an element".into()))
            }
            Err(Stop::More) => Ok(Step::NeedMore),
            Err(Stop::Malformed(at, message)) => Err((at, message)),
        }
    }
}

/// A unit of the stream's top level (white space is skipped before).
enum Unit {
    /// An element, typed into the slot given unless the lexer says why it can't be.
    Element,
    RootStart,
    RootEnd,
    /// Markup that is not an element.
    Skip,
    Doctype,
}

/// How a top-level text reads in an error: trimmed, and not too long.
fn shown_text(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let text = text.trim_matches([' ', '\t', '\n', '\r']);
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// Lexes one unit of the top level, an element into `element`.
fn top_level(lexer: &mut Lexer, element: &mut Option<TraceElement>) -> Result<Unit, Stop> {
    match lexer.peek() {
        None => return Err(Stop::More),
        Some(b'<') => {}
        Some(_) => {
            // Text is an error whatever follows; it is shown up to the next markup.
            return match lexer.rest().iter().position(|&b| b == b'<') {
                Some(end) => Err(Stop::Malformed(
                    0,
                    format!(
                        "text outside any element: '{}'",
                        shown_text(&lexer.rest()[..end])
                    ),
                )),
                None if lexer.at_stream_end() => Err(Stop::Malformed(
                    0,
                    format!("text outside any element: '{}'", shown_text(lexer.rest())),
                )),
                None => Err(Stop::More),
            };
        }
    }
    match lexer.markup()? {
        Markup::Skipped => Ok(Unit::Skip),
        Markup::Doctype => Ok(Unit::Doctype),
        Markup::CData(_) => Err(Stop::Malformed(0, "CDATA outside any element".into())),
        Markup::End(b"TRACE") => Ok(Unit::RootEnd),
        Markup::End(_) => Err(Stop::Malformed(0, "an end tag without its start".into())),
        Markup::Start(b"TRACE") => {
            lexer.skip_attributes()?;
            if lexer.empty() {
                lexer.refuse("<TRACE> is not a trace element".into());
                return Ok(Unit::Element);
            }
            lexer.close_root();
            Ok(Unit::RootStart)
        }
        Markup::Start(name) => TraceElement::read(name, lexer, element).map(|()| Unit::Element),
    }
}

/// Reads every element of a stream (fragments or a document), in reads of up to 64 KiB.
pub fn read_all(
    mut input: impl Read,
) -> impl Iterator<Item = Result<TraceElement, TraceReadError>> {
    let mut decoder = FragmentDecoder::new();
    let mut done = false;
    std::iter::from_fn(move || loop {
        if let Some(item) = decoder.next_element() {
            return Some(item);
        }
        if done || decoder.failed {
            return None;
        }
        match decoder.read_from(&mut input, 64 * 1024) {
            Ok(0) => {
                decoder.end();
                done = true;
            }
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                done = true;
                decoder.failed = true;
                return Some(Err(TraceReadError {
                    offset: decoder.base + decoder.filled as u64,
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

    fn first(text: &str) -> Option<Result<TraceElement, TraceReadError>> {
        let mut decoder = FragmentDecoder::new();
        decoder.push(text.as_bytes());
        decoder.end();
        decoder.next_element()
    }

    #[test]
    fn a_tree_exactly_as_deep_as_the_limit_is_lexed_whole() {
        // At the limit the syntax is good: what is refused is a value holding a value, once
        // the outermost end tag is read.
        let error = first(&chain(MAX_DEPTH)).unwrap().unwrap_err();
        assert_eq!(error.offset, 0);
        assert!(
            error
                .message
                .contains("<value> holds text only, has <value>"),
            "{error}"
        );
        let error = first(&chain(MAX_DEPTH + 1)).unwrap().unwrap_err();
        assert_eq!(error.offset as usize, MAX_DEPTH * "<value>".len());
        assert!(error.message.contains(&MAX_DEPTH.to_string()), "{error}");
    }
}
