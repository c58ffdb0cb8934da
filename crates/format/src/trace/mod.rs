//! The open trace format (Eclipse TPTP's XML trace elements and openprof's additions,
//! docs/trace-format.md): one Rust type per trace element, generated with its XML name,
//! attributes (exact names, required or implied, typed values) and content model from the
//! single table below. The writer, the reader and docs/trace.dtd all come from it.

pub mod attrs;
pub mod dtd;
pub mod filter;
pub mod reader;
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

use uuid::Uuid;

/// An element as read, before it is typed: name, attributes in order (borrowed from the input
/// unless they held escapes), children, text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawElement<'a> {
    pub name: Cow<'a, str>,
    pub attributes: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub children: Vec<RawElement<'a>>,
    pub text: String,
}

/// Children are dropped from a list of their own, not by recursion: a tree built by hand may be
/// deeper than the stack (the reader refuses one deeper than [`reader::MAX_DEPTH`]).
impl Drop for RawElement<'_> {
    fn drop(&mut self) {
        let mut pending = std::mem::take(&mut self.children);
        while let Some(mut child) = pending.pop() {
            pending.append(&mut child.children);
        }
    }
}

/// Appends `text` escaped for an attribute value (line breaks and tabs as character references,
/// so that they survive attribute-value normalisation).
pub(crate) fn escape_attribute(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if !is_xml_char(c) => push_unrepresentable(c, out),
            c => out.push(c),
        }
    }
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
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            c if !is_xml_char(c) => push_unrepresentable(c, out),
            c => out.push(c),
        }
    }
}

fn write_attribute<T: AttrValue>(out: &mut String, name: &str, value: &T) {
    out.push(' ');
    out.push_str(name);
    out.push_str("=\"");
    if T::NEEDS_ESCAPING {
        let mut text = String::new();
        value.write_value(&mut text);
        escape_attribute(&text, out);
    } else {
        value.write_value(out);
    }
    out.push('"');
}

fn parse_attribute<T: AttrValue>(element: &str, name: &str, text: &str) -> Result<T, String> {
    T::parse_value(text).map_err(|problem| format!("<{element}> {name}: {problem}"))
}

fn require<T>(value: Option<T>, element: &str, name: &str) -> Result<T, String> {
    value.ok_or_else(|| format!("<{element}> lacks its required attribute {name}"))
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
    fn from_raw(raw: &RawElement) -> Result<Self, String>;
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
    fn from_raw(raw: &RawElement) -> Result<Self, String> {
        match (raw.children.first(), raw.text.trim().is_empty()) {
            (Some(child), _) => Err(format!(
                "<{}> must be empty, has <{}>",
                raw.name, child.name
            )),
            (None, false) => Err(format!("<{}> must be empty, has text", raw.name)),
            (None, true) => Ok(NoContent),
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
    fn from_raw(raw: &RawElement) -> Result<Self, String> {
        raw.children
            .iter()
            .map(|child| match child.name.as_ref() {
                "value" => Value::from_raw(child),
                other => Err(format!(
                    "<{}> may hold only <value>, has <{other}>",
                    raw.name
                )),
            })
            .collect::<Result<_, _>>()
            .map(Values)
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
    fn from_raw(raw: &RawElement) -> Result<Self, String> {
        let mut signature = Signature::default();
        // The order is the DTD's: return, then parameters, then exceptions.
        let mut stage = 0;
        for child in &raw.children {
            let order = match child.name.as_ref() {
                "return" if signature.returns.is_none() => 0,
                "parameter" => 1,
                "exception" => 2,
                other => {
                    return Err(format!(
                        "<{}> may hold return?, parameter*, exception*; has <{other}> there",
                        raw.name
                    ))
                }
            };
            if order < stage {
                return Err(format!("<{}>: <{}> out of order", raw.name, child.name));
            }
            stage = order;
            match order {
                0 => signature.returns = Some(Return::from_raw(child)?),
                1 => signature.parameters.push(Parameter::from_raw(child)?),
                _ => signature.exceptions.push(Exception::from_raw(child)?),
            }
        }
        Ok(signature)
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
    fn from_raw(raw: &RawElement) -> Result<Self, String> {
        match raw.children.first() {
            Some(child) => Err(format!(
                "<{}> holds text only, has <{}>",
                raw.name, child.name
            )),
            None => Ok(Text(raw.text.clone())),
        }
    }
}

macro_rules! field_type {
    (req $ty:ty) => { $ty };
    (opt $ty:ty) => { Option<$ty> };
}

macro_rules! field_write {
    (req, $out:expr, $name:literal, $value:expr) => {
        write_attribute($out, $name, $value)
    };
    (opt, $out:expr, $name:literal, $value:expr) => {
        if let Some(value) = $value {
            write_attribute($out, $name, value)
        }
    };
}

macro_rules! field_finish {
    (req, $value:expr, $raw:expr, $name:literal) => {
        require($value, &$raw.name, $name)?
    };
    (opt, $value:expr, $raw:expr, $name:literal) => {
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
                    out.push('<');
                    out.push_str($tag);
                    $( field_write!($kind, out, $attr, &self.$field); )*
                    if self.content.is_empty() {
                        out.push_str("/>");
                    } else {
                        out.push('>');
                        self.content.write(out);
                        out.push_str("</");
                        out.push_str($tag);
                        out.push('>');
                    }
                }

                /// Types an element read from XML, in one pass over its attributes. Unknown
                /// attributes are ignored.
                pub fn from_raw(raw: &RawElement) -> Result<Self, String> {
                    $( let mut $field: Option<$fty> = None; )*
                    for (key, value) in &raw.attributes {
                        match key.as_ref() {
                            $( $attr => $field = Some(parse_attribute(&raw.name, $attr, value)?), )*
                            _ => {}
                        }
                    }
                    Ok($ty {
                        $( $field: field_finish!($kind, $field, raw, $attr), )*
                        content: <$content as Content>::from_raw(raw)?,
                    })
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

            /// Types a raw top-level element, or says why it can't be.
            pub fn from_raw(raw: &RawElement) -> Result<TraceElement, String> {
                match raw.name.as_ref() {
                    $(tag if tag == $variant::TAG => $variant::from_raw(raw).map(TraceElement::$variant),)*
                    other => Err(format!("<{other}> is not a trace element")),
                }
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
