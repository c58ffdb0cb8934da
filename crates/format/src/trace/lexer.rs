//! The XML syntax the trace reader accepts, taken apart straight from the input bytes: start
//! and end tags with their attributes, character data and CDATA, and the markup that is
//! skipped (XML declarations, processing instructions, comments, a DOCTYPE). Names and values
//! are borrowed from the input; only a value or text holding references is copied, and the
//! only references read are XML's five entities and character references.
//!
//! Each decision takes only the bytes up to it, and a lexer that runs out of bytes says so
//! ([`Stop::More`]) rather than guessing, so input split anywhere lexes the same.

use std::borrow::Cow;
use std::ops::Range;

use super::reader::{MAX_ATTRIBUTES, MAX_DEPTH};

/// Why lexing stopped before a result.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The bytes end inside markup: more are needed (at the end of the stream, it was cut).
    More,
    /// Malformed input, at this offset in the lexed bytes.
    Malformed(usize, String),
}

pub(crate) type Lexed<T> = Result<T, Stop>;

/// What a `<` opened.
pub(crate) enum Markup<'a> {
    /// A processing instruction (the XML declaration too) or a comment.
    Skipped,
    /// A DOCTYPE, its internal subset skipped unread.
    Doctype,
    /// CDATA: its text, checked.
    CData(&'a str),
    /// A start tag's name; its attributes are read next ([`Lexer::attribute`]).
    Start(&'a [u8]),
    /// An end tag's name.
    End(&'a [u8]),
}

/// What comes next inside an element.
pub(crate) enum Item<'a> {
    /// A child's start tag; its attributes are read next.
    Start(&'a [u8]),
    /// Character data (references replaced) or CDATA.
    Text(Cow<'a, str>),
    /// The element's end tag (or the end of an empty-element tag).
    End,
}

/// One attribute of a start tag.
pub(crate) struct Attribute<'a> {
    /// The name's index among those its element knows; `None` for another name.
    pub known: Option<usize>,
    /// Where the name is in the lexed bytes.
    pub at: Range<usize>,
    /// The value with its references replaced: UTF-8, free of characters XML can't carry.
    pub value: Cow<'a, [u8]>,
}

/// The attribute names an element knows, in its table's order, with whether each is required.
pub(crate) type Names = [(&'static str, bool)];

/// Whether two short byte strings are equal, compared eight bytes at a time in registers (names
/// are too short for a call to memcmp to pay).
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default())
    };
    let length = a.len();
    if length < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    let mut at = 0;
    while at + 8 < length {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping those compared already.
    word(a, length - 8) == word(b, length - 8)
}

/// Byte classes, one table lookup per byte.
const SPACE: u8 = 1;
/// May stand in a name (every byte of a multi-byte character included).
const NAME: u8 = 2;
/// May start a name.
const NAME_START: u8 = 4;
/// Needs no second look in an attribute value: not a quote, `<`, `&`, a control character or
/// part of a multi-byte character.
const VALUE_PLAIN: u8 = 8;
/// Needs no second look in character data: not `<`, `&`, `]`, a control character or part of
/// a multi-byte character.
const TEXT_PLAIN: u8 = 16;

const CLASSES: [u8; 256] = {
    let mut classes = [0u8; 256];
    let mut index = 0;
    while index < 256 {
        let byte = index as u8;
        let mut class = 0;
        if matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            class |= SPACE;
        }
        if byte.is_ascii_alphabetic() || byte == b'_' || byte == b':' || byte >= 0x80 {
            class |= NAME | NAME_START;
        }
        if byte.is_ascii_digit() || byte == b'-' || byte == b'.' {
            class |= NAME;
        }
        let printable = (byte >= 0x20 && byte < 0x80) || matches!(byte, b'\t' | b'\n' | b'\r');
        if printable && !matches!(byte, b'"' | b'\'' | b'<' | b'&') {
            class |= VALUE_PLAIN;
        }
        if printable && !matches!(byte, b'<' | b'&' | b']') {
            class |= TEXT_PLAIN;
        }
        classes[index] = class;
        index += 1;
    }
    classes
};

fn is(byte: u8, class: u8) -> bool {
    CLASSES[usize::from(byte)] & class != 0
}

/// Why a character (raw or as a reference) is refused.
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

/// Working memory kept from one element to the next, so that lexing allocates nothing.
#[derive(Default)]
pub(crate) struct Scratch {
    open: Vec<Range<usize>>,
    unknown: Vec<Range<usize>>,
}

pub(crate) struct Lexer<'a> {
    bytes: &'a [u8],
    /// Whether the stream ends with these bytes.
    ended: bool,
    at: usize,
    /// The names of the open elements.
    open: Vec<Range<usize>>,
    /// The start tag being read: where its `<` is, its name, how many attributes so far.
    tag: usize,
    tag_name: Range<usize>,
    attributes: usize,
    /// Whether the last start tag read was an empty-element tag.
    empty: bool,
    /// The tag's attributes that its element does not know (checked for repeats at its end),
    /// and a known one given twice.
    unknown: Vec<Range<usize>>,
    twice: Option<Range<usize>>,
    /// The first reason the element can't be typed: reported once its syntax is known good.
    pub typing: Option<String>,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(bytes: &'a [u8], ended: bool, scratch: Scratch) -> Self {
        let Scratch {
            mut open,
            mut unknown,
        } = scratch;
        open.clear();
        unknown.clear();
        Lexer {
            bytes,
            ended,
            at: 0,
            open,
            tag: 0,
            tag_name: 0..0,
            attributes: 0,
            empty: false,
            unknown,
            twice: None,
            typing: None,
        }
    }

    /// Hands the working memory back.
    pub(crate) fn into_scratch(self) -> Scratch {
        Scratch {
            open: self.open,
            unknown: self.unknown,
        }
    }

    /// Bytes lexed so far.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// The bytes not lexed yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at..]
    }

    /// Whether the stream ends with the bytes being lexed.
    pub(crate) fn at_stream_end(&self) -> bool {
        self.ended
    }

    /// Forgets the TRACE root just opened: elements in it are top-level elements.
    pub(crate) fn close_root(&mut self) {
        self.open.pop();
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// Whether the last start tag was an empty-element tag (`/>`).
    pub(crate) fn empty(&self) -> bool {
        self.empty
    }

    /// Notes why the element can't be typed, if nothing was noted before.
    pub(crate) fn refuse(&mut self, problem: String) {
        self.typing.get_or_insert(problem);
    }

    /// Skips XML white space, saying how much.
    fn space(&mut self) -> usize {
        let start = self.at;
        while self.at < self.bytes.len() && is(self.bytes[self.at], SPACE) {
            self.at += 1;
        }
        self.at - start
    }

    /// The end of the first `pattern` at or after `from`.
    fn find(&self, from: usize, pattern: &[u8]) -> Lexed<usize> {
        self.bytes[from.min(self.bytes.len())..]
            .windows(pattern.len())
            .position(|window| window == pattern)
            .map(|found| from + found + pattern.len())
            .ok_or(Stop::More)
    }

    /// A name starting at `from`, up to the first byte that can't be in one (which must be
    /// there: a name running to the end of the bytes may go on).
    fn name(&self, from: usize, lt: usize) -> Lexed<Range<usize>> {
        let Some(&first) = self.bytes.get(from) else {
            return Err(Stop::More);
        };
        if !is(first, NAME_START) {
            return Err(Stop::Malformed(
                lt,
                format!(
                    "'{}' after '<' does not start a name",
                    char::from(first).escape_default()
                ),
            ));
        }
        let mut end = from + 1;
        while end < self.bytes.len() && is(self.bytes[end], NAME) {
            end += 1;
        }
        if end == self.bytes.len() {
            return Err(Stop::More);
        }
        Ok(from..end)
    }

    /// Markup at a `<`.
    pub(crate) fn markup(&mut self) -> Lexed<Markup<'a>> {
        let lt = self.at;
        let rest = &self.bytes[lt..];
        match rest.get(1) {
            None => Err(Stop::More),
            Some(b'?') => {
                // A processing instruction starts with its target's name.
                self.name(lt + 2, lt)?;
                self.at = self.find(lt + 2, b"?>")?;
                Ok(Markup::Skipped)
            }
            Some(b'!') => self.bang(lt),
            Some(b'/') => {
                let name = self.name(lt + 2, lt)?;
                self.at = name.end;
                self.space();
                match self.peek() {
                    None => Err(Stop::More),
                    Some(b'>') => {
                        self.at += 1;
                        Ok(Markup::End(&self.bytes[name]))
                    }
                    Some(_) => Err(Stop::Malformed(
                        lt,
                        format!(
                            "</{}> is not closed by '>'",
                            String::from_utf8_lossy(&self.bytes[name])
                        ),
                    )),
                }
            }
            Some(_) => {
                let name = self.name(lt + 1, lt)?;
                let after = self.bytes[name.end];
                if !(is(after, SPACE) || after == b'>' || after == b'/') {
                    return Err(Stop::Malformed(
                        lt,
                        format!(
                            "<{}> has '{}' after its name",
                            String::from_utf8_lossy(&self.bytes[name.clone()]),
                            char::from(after).escape_default()
                        ),
                    ));
                }
                // Refused where its start tag begins, before anything deeper is read.
                if self.open.len() == MAX_DEPTH {
                    return Err(Stop::Malformed(lt, too_deep(&self.bytes[name])));
                }
                self.at = name.end;
                self.tag = lt;
                self.tag_name = name.clone();
                self.attributes = 0;
                self.unknown.clear();
                self.twice = None;
                self.open.push(name.clone());
                Ok(Markup::Start(&self.bytes[name]))
            }
        }
    }

    /// Markup at `<!`: a comment, CDATA or a DOCTYPE.
    fn bang(&mut self, lt: usize) -> Lexed<Markup<'a>> {
        const COMMENT: &[u8] = b"<!--";
        const CDATA: &[u8] = b"<![CDATA[";
        const DOCTYPE: &[u8] = b"<!DOCTYPE";
        let rest = &self.bytes[lt..];
        if rest.starts_with(COMMENT) {
            self.at = self.find(lt + COMMENT.len(), b"-->")?;
            Ok(Markup::Skipped)
        } else if rest.starts_with(CDATA) {
            let end = self.find(lt + CDATA.len(), b"]]>")?;
            let data = &self.bytes[lt + CDATA.len()..end - 3];
            let text = std::str::from_utf8(data)
                .map_err(|_| Stop::Malformed(lt, "CDATA that is not UTF-8".into()))?;
            if let Some(c) = text.chars().find(|&c| !super::is_xml_char(c)) {
                return Err(Stop::Malformed(lt, not_xml(c)));
            }
            self.at = end;
            Ok(Markup::CData(text))
        } else if rest.starts_with(DOCTYPE) {
            self.at = self.doctype(lt + DOCTYPE.len(), lt)?;
            Ok(Markup::Doctype)
        } else if [COMMENT, CDATA, DOCTYPE]
            .iter()
            .any(|markup| rest.len() < markup.len() && markup.starts_with(rest))
        {
            Err(Stop::More)
        } else {
            Err(Stop::Malformed(
                lt,
                "'<!' opens neither a comment, CDATA nor a DOCTYPE".into(),
            ))
        }
    }

    /// The end of a DOCTYPE whose name starts at `from`. Its internal subset is skipped, not
    /// read: quoted literals, comments and processing instructions are stepped over so that a
    /// `]` or `>` inside them does not end it early.
    fn doctype(&self, from: usize, lt: usize) -> Lexed<usize> {
        let mut at = from;
        while at < self.bytes.len() && is(self.bytes[at], SPACE) {
            at += 1;
        }
        match self.bytes.get(at) {
            None => return Err(Stop::More),
            Some(&b) if at > from && is(b, NAME_START) => {}
            Some(_) => {
                return Err(Stop::Malformed(
                    lt,
                    "<!DOCTYPE is not followed by white space and the root's name".into(),
                ))
            }
        }
        let mut subset = false;
        loop {
            let Some(&byte) = self.bytes.get(at) else {
                return Err(Stop::More);
            };
            at = match byte {
                b'"' | b'\'' => self.find(at + 1, &[byte])?,
                b'[' if !subset => {
                    subset = true;
                    at + 1
                }
                b']' if subset => {
                    subset = false;
                    at + 1
                }
                b'<' if subset => {
                    let rest = &self.bytes[at..];
                    if rest.starts_with(b"<!--") {
                        self.find(at + 4, b"-->")?
                    } else if rest.starts_with(b"<?") {
                        self.find(at + 2, b"?>")?
                    } else if rest.len() < 4 && b"<!--".starts_with(rest) {
                        return Err(Stop::More);
                    } else {
                        at + 1
                    }
                }
                b'>' if !subset => return Ok(at + 1),
                b'<' => {
                    return Err(Stop::Malformed(
                        lt,
                        "'<' in a DOCTYPE outside its internal subset".into(),
                    ))
                }
                _ => at + 1,
            };
        }
    }

    /// The next attribute of the start tag being read, or `None` at its end (`>` or `/>`),
    /// once its names are known to be unique. Its name is looked up among `names`, those from
    /// `next` on first: writers keep the table's order, so `name="` is most often found there
    /// without scanning the name, with the same result.
    #[inline]
    pub(crate) fn attribute(&mut self, names: &Names, next: usize) -> Lexed<Option<Attribute<'a>>> {
        let spaces = self.space();
        let rest = &self.bytes[self.at..];
        if spaces > 0 && self.attributes < MAX_ATTRIBUTES {
            for (index, (name, _)) in names.iter().enumerate().skip(next) {
                let length = name.len();
                // The byte after the name rules out nearly every other name at once.
                if rest.len() > length + 1
                    && rest[length] == b'='
                    && matches!(rest[length + 1], b'"' | b'\'')
                    && same(&rest[..length], name.as_bytes())
                {
                    self.attributes += 1;
                    let at = self.at..self.at + length;
                    self.at += length + 1;
                    let value = self.value(rest[length + 1], &at)?;
                    return Ok(Some(Attribute {
                        known: Some(index),
                        at,
                        value,
                    }));
                }
            }
        }
        let Some(mut attribute) = self.any_attribute(spaces)? else {
            return Ok(None);
        };
        let name = &self.bytes[attribute.at.clone()];
        attribute.known = names
            .iter()
            .position(|(known, _)| same(known.as_bytes(), name));
        if attribute.known.is_none() {
            self.unknown.push(attribute.at.clone());
        }
        Ok(Some(attribute))
    }

    /// The next attribute, whatever its name, after `spaces` bytes of white space.
    fn any_attribute(&mut self, spaces: usize) -> Lexed<Option<Attribute<'a>>> {
        let Some(byte) = self.peek() else {
            return Err(Stop::More);
        };
        match byte {
            b'>' => {
                self.end_of_tag()?;
                self.at += 1;
                self.empty = false;
                Ok(None)
            }
            b'/' => match self.bytes.get(self.at + 1) {
                None => Err(Stop::More),
                Some(b'>') => {
                    self.end_of_tag()?;
                    self.at += 2;
                    self.empty = true;
                    self.open.pop();
                    Ok(None)
                }
                Some(_) => Err(self.malformed("'/' not followed by '>'".into())),
            },
            _ if is(byte, NAME_START) => {
                if spaces == 0 {
                    return Err(
                        self.malformed("attributes must be separated by white space".into())
                    );
                }
                if self.attributes == MAX_ATTRIBUTES {
                    return Err(Stop::Malformed(
                        self.tag,
                        format!(
                            "<{}> has more than {MAX_ATTRIBUTES} attributes (the most allowed)",
                            self.tag_name()
                        ),
                    ));
                }
                self.attributes += 1;
                let name = self.at..self.name(self.at, self.tag)?.end;
                self.at = name.end;
                self.space();
                match self.peek() {
                    None => return Err(Stop::More),
                    Some(b'=') => self.at += 1,
                    Some(_) => {
                        let problem = format!("attribute {} has no value", self.shown(&name));
                        return Err(self.malformed(problem));
                    }
                }
                self.space();
                let quote = match self.peek() {
                    None => return Err(Stop::More),
                    Some(quote @ (b'"' | b'\'')) => quote,
                    Some(_) => {
                        let problem =
                            format!("attribute {}'s value is not quoted", self.shown(&name));
                        return Err(self.malformed(problem));
                    }
                };
                let value = self.value(quote, &name)?;
                Ok(Some(Attribute {
                    known: None,
                    at: name,
                    value,
                }))
            }
            _ => {
                let problem = format!(
                    "'{}' can't start an attribute name",
                    char::from(byte).escape_default()
                );
                Err(self.malformed(problem))
            }
        }
    }

    /// A quoted value at the lexer's position, its references replaced.
    #[inline]
    fn value(&mut self, quote: u8, name: &Range<usize>) -> Lexed<Cow<'a, [u8]>> {
        let start = self.at + 1;
        let mut end = start;
        let (mut references, mut wide) = (false, false);
        loop {
            end = plain_value_run(self.bytes, end);
            let Some(&byte) = self.bytes.get(end) else {
                return Err(Stop::More);
            };
            match byte {
                _ if byte == quote => break,
                b'"' | b'\'' | b'\t' | b'\n' | b'\r' => {}
                b'<' => {
                    let problem = format!("attribute {} holds '<'", self.shown(name));
                    return Err(self.malformed(problem));
                }
                b'&' => references = true,
                0x80.. => wide = true,
                _ => {
                    let problem = format!("{}: {}", self.shown(name), not_xml(char::from(byte)));
                    return Err(Stop::Malformed(
                        self.tag,
                        format!("<{}> {problem}", self.tag_name()),
                    ));
                }
            }
            end += 1;
        }
        self.at = end + 1;
        let raw = &self.bytes[start..end];
        if !(references || wide) {
            return Ok(Cow::Borrowed(raw));
        }
        let problem = |problem: String| {
            Stop::Malformed(
                self.tag,
                format!("<{}> {}: {problem}", self.tag_name(), self.shown(name)),
            )
        };
        let text = std::str::from_utf8(raw).map_err(|_| problem("not UTF-8".into()))?;
        if let Some(c) = wide_non_xml(text) {
            return Err(problem(not_xml(c)));
        }
        if !references {
            return Ok(Cow::Borrowed(raw));
        }
        unescape(text)
            .map(|text| Cow::Owned(text.into_bytes()))
            .map_err(|(_, message)| problem(message))
    }

    /// At the end of a start tag: no attribute given twice. Known attributes were checked as
    /// they came ([`Lexer::twice`]); the others are sorted, n log n whatever their names.
    /// Known names are ASCII; the others must be UTF-8.
    fn end_of_tag(&mut self) -> Lexed<()> {
        if let Some(name) = self
            .unknown
            .iter()
            .find(|name| std::str::from_utf8(&self.bytes[(*name).clone()]).is_err())
        {
            let problem = format!("attribute name {} is not UTF-8", self.shown(name));
            return Err(self.malformed(problem));
        }
        let mut twice = self.twice.clone();
        if twice.is_none() && self.unknown.len() > 1 {
            let bytes = self.bytes;
            // Names of different lengths never compare their bytes.
            let key = |range: &Range<usize>| (range.len(), &bytes[range.clone()]);
            self.unknown.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
            twice = self
                .unknown
                .windows(2)
                .find(|pair| key(&pair[0]) == key(&pair[1]))
                .map(|pair| pair[0].clone());
        }
        match twice {
            None => Ok(()),
            Some(name) => {
                let problem = format!("attribute {} given twice", self.shown(&name));
                Err(self.malformed(problem))
            }
        }
    }

    /// Notes a known attribute given a second time.
    pub(crate) fn twice(&mut self, name: Range<usize>) {
        self.twice.get_or_insert(name);
    }

    fn shown(&self, range: &Range<usize>) -> Cow<'a, str> {
        String::from_utf8_lossy(&self.bytes[range.clone()])
    }

    fn tag_name(&self) -> Cow<'a, str> {
        self.shown(&self.tag_name)
    }

    /// A problem with the start tag being read, at its `<`.
    fn malformed(&self, problem: String) -> Stop {
        Stop::Malformed(self.tag, format!("<{}>: {problem}", self.tag_name()))
    }

    /// Character data up to the next `<`, its references replaced.
    fn text(&mut self) -> Lexed<Cow<'a, str>> {
        let start = self.at;
        let mut end = start;
        let (mut references, mut wide) = (false, false);
        loop {
            while end < self.bytes.len() && is(self.bytes[end], TEXT_PLAIN) {
                end += 1;
            }
            let Some(&byte) = self.bytes.get(end) else {
                return Err(Stop::More);
            };
            match byte {
                b'<' => break,
                b'&' => references = true,
                b']' => {
                    if self.bytes[end..].starts_with(b"]]>") {
                        return Err(Stop::Malformed(end, "']]>' in character data".into()));
                    }
                }
                0x80.. => wide = true,
                _ => return Err(Stop::Malformed(end, not_xml(char::from(byte)))),
            }
            end += 1;
        }
        self.at = end;
        let raw = &self.bytes[start..end];
        let text = std::str::from_utf8(raw).map_err(|error| {
            Stop::Malformed(start + error.valid_up_to(), "text that is not UTF-8".into())
        })?;
        if wide {
            if let Some(c) = wide_non_xml(text) {
                return Err(Stop::Malformed(start, not_xml(c)));
            }
        }
        if !references {
            return Ok(Cow::Borrowed(text));
        }
        unescape(text)
            .map(Cow::Owned)
            .map_err(|(at, message)| Stop::Malformed(start + at, message))
    }

    /// What comes next inside the innermost open element.
    pub(crate) fn item(&mut self) -> Lexed<Item<'a>> {
        loop {
            let Some(byte) = self.peek() else {
                return Err(Stop::More);
            };
            if byte != b'<' {
                return self.text().map(Item::Text);
            }
            let lt = self.at;
            match self.markup()? {
                Markup::Skipped => {}
                Markup::CData(text) => return Ok(Item::Text(Cow::Borrowed(text))),
                Markup::Doctype => {
                    return Err(Stop::Malformed(lt, "a DOCTYPE inside an element".into()))
                }
                Markup::Start(name) => return Ok(Item::Start(name)),
                Markup::End(name) => {
                    let Some(open) = self.open.pop() else {
                        return Err(Stop::Malformed(lt, "an end tag without its start".into()));
                    };
                    if name != &self.bytes[open.clone()] {
                        return Err(Stop::Malformed(
                            lt,
                            format!(
                                "</{}> closes <{}>",
                                String::from_utf8_lossy(name),
                                self.shown(&open)
                            ),
                        ));
                    }
                    return Ok(Item::End);
                }
            }
        }
    }

    /// The rest of a start tag whose element is not typed: its syntax only.
    pub(crate) fn skip_attributes(&mut self) -> Lexed<()> {
        while self.attribute(&[], 0)?.is_some() {}
        Ok(())
    }

    /// The rest of the innermost open element, its syntax only, through its end tag.
    pub(crate) fn skip_content(&mut self) -> Lexed<()> {
        let depth = self.open.len();
        while self.open.len() >= depth {
            if let Item::Start(_) = self.item()? {
                self.skip_attributes()?;
            }
        }
        Ok(())
    }

    /// The rest of an element whose start tag's name was just read, its syntax only.
    pub(crate) fn skip_element(&mut self) -> Lexed<()> {
        self.skip_attributes()?;
        if !self.empty {
            self.skip_content()?;
        }
        Ok(())
    }

    /// After an element's start tag, the rest of it, if it was not an empty-element tag.
    pub(crate) fn skip_rest(&mut self) -> Lexed<()> {
        if !self.empty {
            self.skip_content()?;
        }
        Ok(())
    }
}

/// Where the run of value bytes that need no second look, from `from`, ends: at the first
/// byte that is not [`VALUE_PLAIN`] or is a tab or line break (the caller takes those), or at
/// the end. Eight bytes at a time: a value's closing quote is found without a loop over its
/// bytes.
#[inline]
fn plain_value_run(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte that is zero, exact up to the first such byte (borrows only
    // carry upwards from it).
    let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let special = zero(word ^ (ONES * u64::from(b'"')))
            | zero(word ^ (ONES * u64::from(b'\'')))
            | zero(word ^ (ONES * u64::from(b'<')))
            | zero(word ^ (ONES * u64::from(b'&')))
            // Below 0x20, and from 0x80 on.
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
            | (word & HIGHS);
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while at < bytes.len() && is(bytes[at], VALUE_PLAIN) {
        at += 1;
    }
    at
}

/// The first character of non-ASCII text that XML can't carry (U+FFFE, U+FFFF; the control
/// characters are ASCII and found byte by byte).
fn wide_non_xml(text: &str) -> Option<char> {
    // Both are EF BF BE/BF in UTF-8.
    if !text.as_bytes().contains(&0xEF) {
        return None;
    }
    text.chars().find(|&c| !super::is_xml_char(c))
}

/// `text` with its references replaced: XML's five entities and character references only;
/// any other is an error naming it, at its offset in `text`.
fn unescape(text: &str) -> Result<String, (usize, String)> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut at = 0;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let Some(semicolon) = after.find(';') else {
            return Err((at + amp, "'&' without the ';' that ends a reference".into()));
        };
        let name = &after[..semicolon];
        let replacement = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "apos" => '\'',
            "quot" => '"',
            _ => match name.strip_prefix('#') {
                Some(number) => {
                    character_reference(number).map_err(|problem| (at + amp, problem))?
                }
                None => {
                    let shown: String = name.chars().take(64).collect();
                    return Err((
                        at + amp,
                        format!(
                            "&{shown}; is not read (only XML's five entities and character \
                             references are)"
                        ),
                    ));
                }
            },
        };
        out.push(replacement);
        at += amp + 1 + semicolon + 1;
        rest = &after[semicolon + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The character of `&#number;` (decimal) or `&#xnumber;` (hexadecimal).
fn character_reference(number: &str) -> Result<char, String> {
    let (digits, radix) = match number.strip_prefix('x') {
        Some(hex) => (hex, 16),
        None => (number, 10),
    };
    let bad = || {
        let shown: String = number.chars().take(64).collect();
        format!("&#{shown}; is not a character reference")
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad());
    }
    let code = u32::from_str_radix(digits, radix).map_err(|_| bad())?;
    let c = char::from_u32(code).ok_or_else(bad)?;
    if !super::is_xml_char(c) {
        return Err(not_xml(c));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_plain_run_ends_where_a_byte_needs_a_second_look(
            bytes in proptest::collection::vec(
                prop_oneof![0x20u8..0x7f, any::<u8>(), Just(b'"'), Just(b'\n')],
                0..64,
            ),
            from in 0usize..64,
        ) {
            let from = from.min(bytes.len());
            let end = plain_value_run(&bytes, from);
            prop_assert!(end >= from && end <= bytes.len());
            prop_assert!(bytes[from..end].iter().all(|&b| is(b, VALUE_PLAIN)));
            if let Some(&stop) = bytes.get(end) {
                prop_assert!(!is(stop, VALUE_PLAIN) || matches!(stop, b'\t' | b'\n' | b'\r'));
            }
        }
    }
}
