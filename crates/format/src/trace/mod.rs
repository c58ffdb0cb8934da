//! The open trace format (Eclipse TPTP's XML trace elements and openprof's additions,
//! docs/trace-format.md): one Rust type per trace element, generated with its XML name,
//! attributes (exact names, required or implied, typed values) and content model from the
//! single table below. The writer, the reader and docs/trace.dtd all come from it.

pub mod attrs;
pub mod dtd;
pub mod filter;
mod lexer;
pub mod reader;
#[cfg(test)]
mod reading_tests;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
#[cfg(test)]
mod tests;
pub mod validate;
pub mod writer;

use attrs::{
    AttrValue, CodeType, FilterMode, GenericPattern, IsArray, MultiPart, ObjRef, Seconds,
    SigNotation, SourceCoordinateType, ValueType,
};
use std::borrow::Cow;

use lexer::{Item, Lexed, Lexer};
use uuid::Uuid;

/// Bytes that may need escaping: in attribute values (`&`, `<`, `>`, `"`, every control
/// character) and in text (the same but `"`, tab and line feed), and, in both, 0xEF, which
/// starts U+FFFE and U+FFFF.
const ATTRIBUTE_SPECIAL: u8 = 1;
const TEXT_SPECIAL: u8 = 2;
const SPECIAL: [u8; 256] = {
    let mut special = [0u8; 256];
    let mut index = 0;
    while index < 256 {
        let byte = index as u8;
        if byte < 0x20 || matches!(byte, b'&' | b'<' | b'>' | b'"' | 0xEF) {
            special[index] |= ATTRIBUTE_SPECIAL;
        }
        if (byte < 0x20 && !matches!(byte, b'\t' | b'\n'))
            || matches!(byte, b'&' | b'<' | b'>' | 0xEF)
        {
            special[index] |= TEXT_SPECIAL;
        }
        index += 1;
    }
    special
};

/// Appends `text` escaped: the runs that need nothing are copied whole.
fn escape(text: &str, out: &mut String, class: u8, reference: fn(u8) -> Option<&'static str>) {
    let bytes = text.as_bytes();
    let (mut run, mut at) = (0, 0);
    while at < bytes.len() {
        let byte = bytes[at];
        if SPECIAL[usize::from(byte)] & class == 0 {
            at += 1;
            continue;
        }
        // A special byte is ASCII or starts a character: `at` is a character boundary.
        if let Some(reference) = reference(byte) {
            out.push_str(&text[run..at]);
            out.push_str(reference);
            at += 1;
            run = at;
            continue;
        }
        let c = text[at..].chars().next().unwrap_or_default();
        if is_xml_char(c) {
            at += c.len_utf8();
        } else {
            out.push_str(&text[run..at]);
            push_unrepresentable(c, out);
            at += c.len_utf8();
            run = at;
        }
    }
    out.push_str(&text[run..]);
}

/// Appends `text` escaped for an attribute value (line breaks and tabs as character references,
/// so that they survive attribute-value normalisation).
pub(crate) fn escape_attribute(text: &str, out: &mut String) {
    escape(text, out, ATTRIBUTE_SPECIAL, |byte| match byte {
        b'&' => Some("&amp;"),
        b'<' => Some("&lt;"),
        b'>' => Some("&gt;"),
        b'"' => Some("&quot;"),
        b'\n' => Some("&#10;"),
        b'\r' => Some("&#13;"),
        b'\t' => Some("&#9;"),
        _ => None,
    });
}

/// Whether XML 1.0 can carry the character at all (even a character reference can't carry the
/// other control characters, U+FFFE or U+FFFF).
fn is_xml_char(c: char) -> bool {
    !matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}')
}

/// A character XML can't carry, written as `\u{HEX}` (a traced String may hold any char).
fn push_unrepresentable(c: char, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
}

/// Appends `text` escaped for character data.
pub(crate) fn escape_text(text: &str, out: &mut String) {
    escape(text, out, TEXT_SPECIAL, |byte| match byte {
        b'&' => Some("&amp;"),
        b'<' => Some("&lt;"),
        b'>' => Some("&gt;"),
        b'\r' => Some("&#13;"),
        _ => None,
    });
}

fn parse_attribute<T: AttrValue>(element: &str, name: &str, value: &[u8]) -> Result<T, String> {
    T::parse_bytes(value).map_err(|problem| format!("<{element}> {name}: {problem}"))
}

/// Reads one attribute's value into its element's field.
type Setter<'a> = &'a mut dyn FnMut(&[u8]) -> Result<(), String>;

/// Reads a start tag's attributes into their elements' fields: `setters[i]` takes the value
/// of `names[i]`. Returns the first value that can't be typed; syntax errors (a name given
/// twice among them) stop the lexer.
fn read_attributes(
    lexer: &mut Lexer<'_>,
    names: &lexer::Names,
    setters: &mut [Setter],
) -> Lexed<Option<String>> {
    debug_assert!(names.len() <= 64);
    let mut problem = None;
    let mut seen = 0u64;
    let mut next = 0;
    while let Some(attribute) = lexer.attribute(names, next)? {
        let Some(index) = attribute.known else {
            continue;
        };
        if seen & (1 << index) != 0 {
            lexer.twice(attribute.at);
        }
        seen |= 1 << index;
        next = index + 1;
        if problem.is_none() {
            if let Err(error) = setters[index](&attribute.value) {
                problem = Some(error);
            }
        }
    }
    Ok(problem)
}

/// Refuses an element's content at a child whose start tag's name was just read: notes why,
/// then reads on through the element's end tag.
fn refuse_child<T>(lexer: &mut Lexer<'_>, problem: String) -> Lexed<Option<T>> {
    lexer.refuse(problem);
    lexer.skip_element()?;
    lexer.skip_content()?;
    Ok(None)
}

fn shown(name: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(name)
}

/// One element of each kind written out, from [`sample_of_each`].
#[cfg(any(test, feature = "sample"))]
pub struct RawElementSample {
    pub tag: &'static str,
    pub text: String,
}

/// What an element may contain.
pub trait Content: Sized + Default {
    /// The content model as the DTD writes it.
    const MODEL: &'static str;
    fn is_empty(&self) -> bool;
    fn write(&self, out: &mut String);
}

/// Reading content from the lexer, after its element's start tag.
pub(crate) trait ReadContent: Sized {
    /// The content through the end tag of `parent`; `None` when it can't be typed (the lexer
    /// notes why, and has read on through the end tag).
    fn read(lexer: &mut Lexer<'_>, parent: &'static str) -> Lexed<Option<Self>>;
}

/// No content (`EMPTY`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoContent;

impl Content for NoContent {
    const MODEL: &'static str = "EMPTY";
    fn is_empty(&self) -> bool {
        true
    }
    fn write(&self, _out: &mut String) {}
}

impl ReadContent for NoContent {
    fn read(lexer: &mut Lexer<'_>, parent: &'static str) -> Lexed<Option<Self>> {
        let mut text = false;
        loop {
            match lexer.item()? {
                Item::Text(chunk) => text |= !chunk.trim().is_empty(),
                Item::Start(name) => {
                    let problem = format!("<{parent}> must be empty, has <{}>", shown(name));
                    return refuse_child(lexer, problem);
                }
                Item::End if text => {
                    lexer.refuse(format!("<{parent}> must be empty, has text"));
                    return Ok(None);
                }
                Item::End => return Ok(Some(NoContent)),
            }
        }
    }
}

/// Parameter and return values (`(value*)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Values(pub Vec<Value>);

impl Content for Values {
    const MODEL: &'static str = "(value*)";
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn write(&self, out: &mut String) {
        for value in &self.0 {
            value.write(out);
        }
    }
}

impl ReadContent for Values {
    fn read(lexer: &mut Lexer<'_>, parent: &'static str) -> Lexed<Option<Self>> {
        let mut values = Vec::new();
        loop {
            match lexer.item()? {
                // Text between the values is not kept.
                Item::Text(_) => {}
                Item::Start(b"value") => {
                    let mut value = None;
                    Value::read_into(lexer, &mut value, |value| value)?;
                    match value {
                        Some(value) => values.push(value),
                        None => {
                            lexer.skip_content()?;
                            return Ok(None);
                        }
                    }
                }
                Item::Start(name) => {
                    let problem =
                        format!("<{parent}> may hold only <value>, has <{}>", shown(name));
                    return refuse_child(lexer, problem);
                }
                Item::End => return Ok(Some(Values(values))),
            }
        }
    }
}

/// A method's signature by child elements (`(return?, parameter*, exception*)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Signature {
    pub returns: Option<Return>,
    pub parameters: Vec<Parameter>,
    pub exceptions: Vec<Exception>,
}

impl Content for Signature {
    const MODEL: &'static str = "(return?, parameter*, exception*)";
    fn is_empty(&self) -> bool {
        self.returns.is_none() && self.parameters.is_empty() && self.exceptions.is_empty()
    }
    fn write(&self, out: &mut String) {
        if let Some(returns) = &self.returns {
            returns.write(out);
        }
        for parameter in &self.parameters {
            parameter.write(out);
        }
        for exception in &self.exceptions {
            exception.write(out);
        }
    }
}

impl ReadContent for Signature {
    fn read(lexer: &mut Lexer<'_>, parent: &'static str) -> Lexed<Option<Self>> {
        let mut signature = Signature::default();
        // The order is the DTD's: return, then parameters, then exceptions.
        let mut stage = 0;
        loop {
            let name = match lexer.item()? {
                Item::Text(_) => continue,
                Item::End => return Ok(Some(signature)),
                Item::Start(name) => name,
            };
            let order = match name {
                b"return" if signature.returns.is_none() => 0,
                b"parameter" => 1,
                b"exception" => 2,
                other => {
                    let problem = format!(
                        "<{parent}> may hold return?, parameter*, exception*; has <{}> there",
                        shown(other)
                    );
                    return refuse_child(lexer, problem);
                }
            };
            if order < stage {
                let problem = format!("<{parent}>: <{}> out of order", shown(name));
                return refuse_child(lexer, problem);
            }
            stage = order;
            let mut read = None;
            match order {
                0 => Return::read_into(lexer, &mut read, |returns| {
                    signature.returns = Some(returns)
                })?,
                1 => Parameter::read_into(lexer, &mut read, |parameter| {
                    signature.parameters.push(parameter)
                })?,
                _ => Exception::read_into(lexer, &mut read, |exception| {
                    signature.exceptions.push(exception)
                })?,
            }
            if read.is_none() {
                lexer.skip_content()?;
                return Ok(None);
            }
        }
    }
}

/// Character data (`(#PCDATA)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Text(pub String);

impl Content for Text {
    const MODEL: &'static str = "(#PCDATA)";
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn write(&self, out: &mut String) {
        escape_text(&self.0, out);
    }
}

impl ReadContent for Text {
    fn read(lexer: &mut Lexer<'_>, parent: &'static str) -> Lexed<Option<Self>> {
        let mut text = String::new();
        loop {
            match lexer.item()? {
                Item::Text(chunk) => text.push_str(&chunk),
                Item::Start(name) => {
                    let problem = format!("<{parent}> holds text only, has <{}>", shown(name));
                    return refuse_child(lexer, problem);
                }
                Item::End => return Ok(Some(Text(text))),
            }
        }
    }
}

macro_rules! field_type {
    (req $ty:ty) => { $ty };
    (opt $ty:ty) => { Option<$ty> };
}

macro_rules! field_write {
    (req, $out:expr, $name:literal, $value:expr) => {{
        $out.push_str(concat!(" ", $name, "=\""));
        AttrValue::write_attribute_value($value, $out);
        $out.push('"');
    }};
    (opt, $out:expr, $name:literal, $value:expr) => {
        if let Some(value) = $value {
            field_write!(req, $out, $name, value)
        }
    };
}

/// A field's value once every attribute is read: a required one that is missing refuses the
/// element (from inside its `read`).
macro_rules! field_finish {
    (req, $value:expr, $lexer:ident, $tag:literal, $name:literal) => {
        match $value {
            Some(value) => value,
            None => {
                $lexer.refuse(format!("<{}> lacks its required attribute {}", $tag, $name));
                return $lexer.skip_rest();
            }
        }
    };
    (opt, $value:expr, $lexer:ident, $tag:literal, $name:literal) => {
        $value
    };
}

macro_rules! field_required {
    (req) => {
        true
    };
    (opt) => {
        false
    };
}

/// Declares the elements: struct, XML name, attributes and content.
macro_rules! elements {
    ($(
        $(#[$doc:meta])*
        $ty:ident = $tag:literal [$content:ty] {
            $( $field:ident : $kind:ident $fty:ty = $attr:literal ),* $(,)?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, PartialEq)]
            pub struct $ty {
                $( pub $field: field_type!($kind $fty), )*
                pub content: $content,
            }

            impl $ty {
                /// The element's XML name.
                pub const TAG: &'static str = $tag;
                /// (attribute, required) pairs, in the DTD's order.
                pub const ATTRIBUTES: &'static [(&'static str, bool)] =
                    &[$( ($attr, field_required!($kind)) ),*];

                /// Appends the element as XML.
                pub fn write(&self, out: &mut String) {
                    out.push_str(concat!("<", $tag));
                    $( field_write!($kind, out, $attr, &self.$field); )*
                    if self.content.is_empty() {
                        out.push_str("/>");
                    } else {
                        out.push('>');
                        self.content.write(out);
                        out.push_str(concat!("</", $tag, ">"));
                    }
                }

                /// Reads the element whose start tag's name the lexer just read: its
                /// attributes (unknown ones ignored), then its content through its end tag,
                /// into `out` as what `wrap` makes of it (built where it will stay, not copied
                /// there). `out` stays `None` when it can't be typed: the lexer notes why, and
                /// has read on through the element's end.
                #[inline]
                pub(crate) fn read_into<T>(
                    lexer: &mut Lexer<'_>,
                    out: &mut Option<T>,
                    wrap: impl FnOnce(Self) -> T,
                ) -> Lexed<()> {
                    $( let mut $field: Option<$fty> = None; )*
                    let problem = read_attributes(lexer, Self::ATTRIBUTES, &mut [$(
                        &mut |value: &[u8]| {
                            $field = Some(parse_attribute($tag, $attr, value)?);
                            Ok(())
                        }
                    ),*])?;
                    if let Some(problem) = problem {
                        lexer.refuse(problem);
                        return lexer.skip_rest();
                    }
                    $( let $field = field_finish!($kind, $field, lexer, $tag, $attr); )*
                    let content = if lexer.empty() {
                        <$content>::default()
                    } else {
                        match <$content as ReadContent>::read(lexer, $tag)? {
                            Some(content) => content,
                            None => return Ok(()),
                        }
                    };
                    *out = Some(wrap($ty { $( $field, )* content }));
                    Ok(())
                }

                /// Its declarations in the DTD.
                pub fn dtd_declarations() -> String {
                    dtd::declarations($tag, <$content as Content>::MODEL, Self::ATTRIBUTES)
                }
            }

            #[cfg(any(test, feature = "sample"))]
            impl sample::Sample for $ty {
                fn sample(rng: &mut sample::Rng) -> Self {
                    $ty {
                        $( $field: sample::Sample::sample(rng), )*
                        content: sample::Sample::sample(rng),
                    }
                }
            }
        )*

        /// A random element of every kind, for property tests and the fuzzers' starting inputs.
        #[cfg(any(test, feature = "sample"))]
        pub fn sample_of_each(rng: &mut sample::Rng) -> Vec<RawElementSample> {
            vec![$( RawElementSample { tag: $tag, text: { let mut out = String::new(); <$ty as sample::Sample>::sample(rng).write(&mut out); out } } ),*]
        }

        /// Every element name, nested ones included.
        pub const ALL_TAGS: &[&str] = &[$($tag),*];

        /// The declarations of every element, in table order.
        pub fn all_declarations() -> Vec<(&'static str, String)> {
            vec![$( ($tag, $ty::dtd_declarations()) ),*]
        }
    };
}

elements! {
    /// Associates a name with an object id.
    ObjRefName = "objRef" [NoContent] {
        name: opt String = "name",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
    }
    /// Lines of code kept verbatim.
    Code = "code" [NoContent] {
        code_type: opt CodeType = "type",
        value: opt String = "value",
    }
    /// A name/value pair.
    Tag = "tag" [NoContent] {
        name: opt String = "name",
        value: opt String = "value",
    }
    /// The machine the JVM runs on.
    Node = "node" [NoContent] {
        node_id: req Uuid = "nodeId",
        hostname: req String = "hostname",
    }
    /// The JVM's process.
    ProcessCreate = "processCreate" [NoContent] {
        process_id: req Uuid = "processId",
        name: opt String = "name",
        pid: req u32 = "pid",
        node_id_ref: req Uuid = "nodeIdRef",
        time: req Seconds = "time",
        environment: opt String = "environment",
        application_executable: opt String = "applicationExecutable",
    }
    /// The agent in the process.
    AgentCreate = "agentCreate" [NoContent] {
        agent_id: req Uuid = "agentId",
        process_id_ref: req Uuid = "processIdRef",
        agent_name: req String = "agentName",
        time: req Seconds = "time",
        agent_parameters: opt String = "agentParameters",
        version: opt String = "version",
    }
    AgentDestroy = "agentDestroy" [NoContent] {
        agent_id_ref: req Uuid = "agentIdRef",
        time: req Seconds = "time",
    }
    /// The start of a trace: collationValue 1.
    TraceStart = "traceStart" [NoContent] {
        trace_id: req Uuid = "traceId",
        agent_id_ref: req Uuid = "agentIdRef",
        time: req Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
    }
    TraceEnd = "traceEnd" [NoContent] {
        trace_id_ref: req Uuid = "traceIdRef",
        time: req Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
    }
    ProcessSuspend = "processSuspend" [NoContent] {
        time: opt Seconds = "time",
        trace_id_ref: opt Uuid = "traceIdRef",
        collation_value: opt MultiPart = "collationValue",
    }
    ProcessResume = "processResume" [NoContent] {
        time: opt Seconds = "time",
        trace_id_ref: opt Uuid = "traceIdRef",
        collation_value: opt MultiPart = "collationValue",
    }
    /// An agent option, echoed.
    OptionElement = "option" [NoContent] {
        key: opt String = "key",
        value: opt String = "value",
        trace_id_ref: opt Uuid = "traceIdRef",
        collation_value: opt MultiPart = "collationValue",
    }
    /// One pattern of a filter block.
    Filter = "filter" [NoContent] {
        pattern: req String = "pattern",
        generic_pattern: req GenericPattern = "genericPattern",
        mode: req FilterMode = "mode",
        trace_id_ref: opt Uuid = "traceIdRef",
        collation_value: opt MultiPart = "collationValue",
    }
    ThreadStart = "threadStart" [NoContent] {
        transient_thread_id: opt u32 = "transientThreadId",
        thread_id: opt u32 = "threadId",
        time: opt Seconds = "time",
        group_name: opt String = "groupName",
        parent_name: opt String = "parentName",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        thread_name: opt String = "threadName",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    ThreadEnd = "threadEnd" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    ClassDef = "classDef" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        num_interfaces: opt u32 = "numInterfaces",
        transient_class_id: opt u32 = "transientClassId",
        class_id: opt u32 = "classId",
        source_name: opt String = "sourceName",
        name: opt String = "name",
        access: opt u32 = "access",
        num_static_fields: opt u32 = "numStaticFields",
        num_methods: opt u32 = "numMethods",
        num_instance_fields: opt u32 = "numInstanceFields",
        // Classes of one name from different loaders are told apart by the loader's index (0:
        // the bootstrap loader), reported with the loader's class name.
        class_loader: opt u32 = "classLoader",
        class_loader_name: opt String = "classLoaderName",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    MethodDef = "methodDef" [Signature] {
        name: opt String = "name",
        signature: opt String = "signature",
        access: opt u32 = "access",
        start_line_number: opt u32 = "startLineNumber",
        end_line_number: opt u32 = "endLineNumber",
        sig_notation: opt SigNotation = "sigNotation",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        method_id: opt u32 = "methodId",
        transient_method_id: opt u32 = "transientMethodId",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// methodDef's return type.
    Return = "return" [NoContent] {
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
    }
    /// One of methodDef's parameters.
    Parameter = "parameter" [NoContent] {
        name: opt String = "name",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
    }
    /// An exception methodDef declares.
    Exception = "exception" [NoContent] {
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
    }
    /// An allocation. classIdRef/transientClassIdRef are openprof's addition: the class allocated.
    ObjAlloc = "objAlloc" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        is_array: opt IsArray = "isArray",
        transient_obj_id: opt u32 = "transientObjId",
        obj_id: opt u32 = "objId",
        size: opt u64 = "size",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    MethodEntry = "methodEntry" [Values] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        ticket: opt MultiPart = "ticket",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        sequence_counter: opt u64 = "sequenceCounter",
        context_data: opt String = "contextData",
        stack_depth: opt u32 = "stackDepth",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    MethodExit = "methodExit" [Values] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        ticket: opt MultiPart = "ticket",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        sequence_counter: opt u64 = "sequenceCounter",
        context_data: opt String = "contextData",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    MethodCall = "methodCall" [Values] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        ticket: opt MultiPart = "ticket",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        sequence_counter: opt u64 = "sequenceCounter",
        context_data: opt String = "contextData",
        stack_depth: opt u32 = "stackDepth",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    MethodReturn = "methodReturn" [Values] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        ticket: opt MultiPart = "ticket",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        sequence_counter: opt u64 = "sequenceCounter",
        context_data: opt String = "contextData",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// An object's identity. classIdRef is openprof's addition.
    ObjDef = "objDef" [NoContent] {
        obj_id: req u32 = "objId",
        is_array: opt IsArray = "isArray",
        size: opt u64 = "size",
        class_id_ref: opt u32 = "classIdRef",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// A data value, its kind in `type` (`ValueType`); serializedObjValueInline keeps the object
    /// in the text.
    Value = "value" [Text] {
        parameter_name: opt String = "parameterName",
        reference_name: opt String = "referenceName",
        value_type: opt ValueType = "type",
        value: opt String = "value",
        obj_id_ref: opt u32 = "objIdRef",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// How often a method was entered, produced for every method before agentDestroy.
    MethodCount = "methodCount" [NoContent] {
        count: opt u64 = "count",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    LineTable = "lineTable" [NoContent] {
        line_table_id: req u32 = "lineTableId",
        method_id_ref: req u32 = "methodIdRef",
        source_name: opt String = "sourceName",
        start_line: opt u32 = "startLine",
        end_line: opt u32 = "endLine",
        source_coordinate_type: opt SourceCoordinateType = "sourceCoordinateType",
        source_coordinate_table: opt String = "sourceCoordinateTable",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// A coverage block that ran; `count` is openprof's addition: how many times it ran, for a
    /// line written once at the trace's end rather than once per run.
    Line = "line" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        line_table_id_ref: opt u32 = "lineTableIdRef",
        time: opt Seconds = "time",
        block_index: opt u32 = "blockIndex",
        count: opt u64 = "count",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    GcStart = "gcStart" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    ObjFree = "objFree" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        sequence_counter: opt u64 = "sequenceCounter",
        context_data: opt String = "contextData",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    ClassUnload = "classUnload" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        transient_class_id_ref: opt u32 = "transientClassIdRef",
        class_id_ref: opt u32 = "classIdRef",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    ObjMove = "objMove" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        transient_obj_id_ref: opt u32 = "transientObjIdRef",
        obj_id_ref: opt u32 = "objIdRef",
        new_obj_id: opt u32 = "newObjId",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    GcFinish = "gcFinish" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        total_obj_space: opt u64 = "totalObjSpace",
        used_obj_space: opt u64 = "usedObjSpace",
        used_objects: opt u64 = "usedObjects",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// An exception passing through an unfiltered frame.
    Throw = "throw" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt ObjRef = "objIdRef",
        transient_obj_id_ref: opt ObjRef = "transientObjIdRef",
        obj_handle: opt String = "objHandle",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        ticket: opt MultiPart = "ticket",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// An exception caught in an unfiltered frame.
    Catch = "catch" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt ObjRef = "objIdRef",
        transient_obj_id_ref: opt ObjRef = "transientObjIdRef",
        obj_handle: opt String = "objHandle",
        method_id_ref: opt u32 = "methodIdRef",
        transient_method_id_ref: opt u32 = "transientMethodIdRef",
        ticket: opt MultiPart = "ticket",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    RuntimeInitDone = "runtimeInitDone" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    RuntimeShutdown = "runtimeShutdown" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) who invoked a method, possibly in another agent: the
    /// methodCall or methodEntry identified by agent, thread and ticket.
    /// Who invoked a method from another agent: the remote methodCall's node, process, agent,
    /// thread and ticket. entryThreadIdRef and entryTicket are openprof's addition: the local
    /// methodEntry it belongs to.
    InvocationContext = "invocationContext" [NoContent] {
        node_id_ref: opt Uuid = "nodeIdRef",
        process_id_ref: opt Uuid = "processIdRef",
        agent_id_ref: opt Uuid = "agentIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        ticket: opt MultiPart = "ticket",
        sequence_counter: opt u64 = "sequenceCounter",
        entry_thread_id_ref: opt u32 = "entryThreadIdRef",
        entry_ticket: opt MultiPart = "entryTicket",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) a thread starts waiting to enter a monitor another holds.
    MonitorContendedEnter = "monitorContendedEnter" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt u32 = "objIdRef",
        class_id_ref: opt u32 = "classIdRef",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) the thread entered the monitor it waited for.
    MonitorContendedEntered = "monitorContendedEntered" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt u32 = "objIdRef",
        class_id_ref: opt u32 = "classIdRef",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) Object.wait begins; timeout in milliseconds, 0 for none.
    MonitorWait = "monitorWait" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt u32 = "objIdRef",
        class_id_ref: opt u32 = "classIdRef",
        timeout: opt i64 = "timeout",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) a snapshot marker the collector asked for: the elements after it,
    /// up to the next marker, form the snapshot of that name.
    Snapshot = "snapshot" [NoContent] {
        name: opt String = "name",
        time: opt Seconds = "time",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
    /// (openprof) Object.wait ends; timedOut is "true" when the timeout ran out.
    MonitorWaited = "monitorWaited" [NoContent] {
        transient_thread_id_ref: opt u32 = "transientThreadIdRef",
        thread_id_ref: opt u32 = "threadIdRef",
        time: opt Seconds = "time",
        obj_id_ref: opt u32 = "objIdRef",
        class_id_ref: opt u32 = "classIdRef",
        timed_out: opt bool = "timedOut",
        thread_cpu_time: opt Seconds = "threadCpuTime",
        collation_value: opt MultiPart = "collationValue",
        trace_id_ref: opt Uuid = "traceIdRef",
    }
}

impl AttrValue for bool {
    fn write_value(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        match text {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("'{text}' is not true or false")),
        }
    }
}

/// Declares the elements a trace stream or a TRACE document holds at top level.
macro_rules! top_level {
    ($($variant:ident),* $(,)?) => {
        /// Any element that may stand at the top level of a trace.
        #[derive(Clone, Debug, PartialEq)]
        pub enum TraceElement {
            $($variant($variant)),*
        }

        impl TraceElement {
            pub fn tag(&self) -> &'static str {
                match self { $(TraceElement::$variant(_) => $variant::TAG),* }
            }

            pub fn write(&self, out: &mut String) {
                match self { $(TraceElement::$variant(element) => element.write(out)),* }
            }

            /// Reads the top-level element whose start tag's name the lexer just read into
            /// `out`, which stays `None` when it can't be typed (the lexer notes why, and has
            /// read on through its end). The element is built where it will stay: it is large.
            pub(crate) fn read(
                name: &[u8],
                lexer: &mut Lexer<'_>,
                out: &mut Option<TraceElement>,
            ) -> Lexed<()> {
                // The elements most traces are made of first.
                if lexer::same(name, MethodEntry::TAG.as_bytes()) {
                    return MethodEntry::read_into(lexer, out, TraceElement::MethodEntry);
                }
                if lexer::same(name, MethodExit::TAG.as_bytes()) {
                    return MethodExit::read_into(lexer, out, TraceElement::MethodExit);
                }
                $(if lexer::same(name, $variant::TAG.as_bytes()) {
                    return $variant::read_into(lexer, out, TraceElement::$variant);
                })*
                lexer.refuse(format!("<{}> is not a trace element", shown(name)));
                lexer.skip_element()
            }

            /// The names of the top-level elements, for the DTD's root.
            pub const TAGS: &'static [&'static str] = &[$($variant::TAG),*];

            /// A random top-level element.
            #[cfg(any(test, feature = "sample"))]
            pub fn sample(rng: &mut sample::Rng) -> TraceElement {
                let choices: &[fn(&mut sample::Rng) -> TraceElement] =
                    &[$(|rng| TraceElement::$variant(<$variant as sample::Sample>::sample(rng))),*];
                choices[rng.below(choices.len() as u64) as usize](rng)
            }
        }

        $(impl From<$variant> for TraceElement {
            fn from(element: $variant) -> TraceElement { TraceElement::$variant(element) }
        })*
    };
}

top_level!(
    Node,
    ProcessCreate,
    AgentCreate,
    AgentDestroy,
    TraceStart,
    TraceEnd,
    ProcessSuspend,
    ProcessResume,
    OptionElement,
    Filter,
    ThreadStart,
    ThreadEnd,
    ClassDef,
    ClassUnload,
    MethodDef,
    ObjAlloc,
    ObjFree,
    ObjMove,
    ObjDef,
    ObjRefName,
    MethodEntry,
    MethodExit,
    MethodCall,
    MethodReturn,
    Value,
    MethodCount,
    LineTable,
    Line,
    GcStart,
    GcFinish,
    Throw,
    Catch,
    RuntimeInitDone,
    RuntimeShutdown,
    Tag,
    Code,
    InvocationContext,
    MonitorContendedEnter,
    MonitorContendedEntered,
    MonitorWait,
    MonitorWaited,
    Snapshot,
);

/// Calls `$then!` with the elements that stand inside a trace and carry traceIdRef and
/// collationValue (all but the hierarchy above the trace, traceStart/traceEnd, tag and code).
macro_rules! in_trace {
    ($then:ident) => {
        $then!(
            ProcessSuspend,
            ProcessResume,
            OptionElement,
            Filter,
            ThreadStart,
            ThreadEnd,
            ClassDef,
            ClassUnload,
            MethodDef,
            ObjAlloc,
            ObjFree,
            ObjMove,
            ObjDef,
            MethodEntry,
            MethodExit,
            MethodCall,
            MethodReturn,
            Value,
            MethodCount,
            LineTable,
            Line,
            GcStart,
            GcFinish,
            Throw,
            Catch,
            RuntimeInitDone,
            RuntimeShutdown,
            InvocationContext,
            MonitorContendedEnter,
            MonitorContendedEntered,
            MonitorWait,
            MonitorWaited,
            Snapshot
        )
    };
}

impl TraceElement {
    /// Stamps the element with its trace and place in it, where it has those attributes
    /// (traceStart carries its own traceId; node, processCreate and agentCreate stand above
    /// the trace and have neither).
    pub fn set_context(&mut self, trace: Uuid, collation: MultiPart) {
        macro_rules! stamp {
            ($($variant:ident),*) => {
                match self {
                    TraceElement::TraceStart(element) => element.collation_value = Some(collation),
                    TraceElement::TraceEnd(element) => {
                        element.trace_id_ref = trace;
                        element.collation_value = Some(collation);
                    }
                    $(TraceElement::$variant(element) => {
                        element.trace_id_ref = Some(trace);
                        element.collation_value = Some(collation);
                    })*
                    _ => {}
                }
            };
        }
        in_trace!(stamp)
    }

    /// The element's collationValue, where it has one.
    pub fn collation_value(&self) -> Option<MultiPart> {
        macro_rules! collation {
            ($($variant:ident),*) => {
                match self {
                    TraceElement::TraceStart(element) => element.collation_value,
                    TraceElement::TraceEnd(element) => element.collation_value,
                    $(TraceElement::$variant(element) => element.collation_value,)*
                    _ => None,
                }
            };
        }
        in_trace!(collation)
    }
}
