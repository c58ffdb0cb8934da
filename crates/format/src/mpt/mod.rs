//! Method parameter tracing specifications: which parameter of which method to trace, through
//! which chain of modifiers, matched by which variant, reporting which events. The text syntax
//! is docs/mpt.md's.
//!
//! - this module: the specification's parts as Rust types, each printed as it is written;
//! - [`parser`]: the one parser of specification lines and files;
//! - [`matching`]: which calls of which loaded classes a specification traces.

mod matching;
mod parser;

pub use self::matching::{ClassShape, MethodShape};
pub use self::parser::{parse_line, parse_specs};

use std::fmt;

/// A fault in a specification, with where it is (1-based line and column of the token).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct SpecError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// A Java type as a specification names it: a primitive, or a class name that is complete
/// (`java.lang.String`) or partial (`String`, any package), with array dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeName {
    pub name: String,
    pub dimensions: u8,
}

const PRIMITIVES: [(&str, char); 9] = [
    ("boolean", 'Z'),
    ("byte", 'B'),
    ("char", 'C'),
    ("short", 'S'),
    ("int", 'I'),
    ("long", 'J'),
    ("float", 'F'),
    ("double", 'D'),
    ("void", 'V'),
];

impl TypeName {
    fn parse(text: &str) -> Result<TypeName, String> {
        let mut name = text.trim();
        let mut dimensions = 0u8;
        while let Some(element) = name.strip_suffix("[]") {
            name = element.trim_end();
            dimensions = dimensions
                .checked_add(1)
                .ok_or_else(|| format!("'{text}' has too many array dimensions"))?;
        }
        if name.is_empty() {
            return Err(format!("'{text}' names no type"));
        }
        if name == "void" && dimensions > 0 {
            return Err(format!("'{text}': there are no arrays of void"));
        }
        if !is_class_name(name) {
            return Err(format!("'{text}' is not a Java type name"));
        }
        Ok(TypeName {
            name: name.to_string(),
            dimensions,
        })
    }

    /// Whether this is a primitive (not an array of one).
    pub fn is_primitive(&self) -> bool {
        self.dimensions == 0 && PRIMITIVES.iter().any(|(name, _)| *name == self.name)
    }

    pub fn is_array(&self) -> bool {
        self.dimensions > 0
    }

    /// Whether a field descriptor (`I`, `[Lexample/Value;`) is this type. A name without a
    /// package matches a class of that simple name in any package; a nested class by its own
    /// name or with its enclosing classes (`Entry`, `Map$Entry`).
    pub fn matches_descriptor(&self, descriptor: &str) -> bool {
        let element = descriptor.trim_start_matches('[');
        if descriptor.len() - element.len() != usize::from(self.dimensions) {
            return false;
        }
        if let Some(class) = element
            .strip_prefix('L')
            .and_then(|rest| rest.strip_suffix(';'))
        {
            let dotted = class.replace('/', ".");
            if self.name.contains('.') {
                return dotted == self.name;
            }
            let in_package = dotted.rsplit('.').next().unwrap_or_default();
            // A nested class goes by its own simple name too (`Entry` for `Map$Entry`).
            return in_package == self.name
                || (!self.name.contains('$')
                    && in_package.rsplit('$').next() == Some(self.name.as_str()));
        }
        PRIMITIVES.iter().any(|(name, code)| {
            *name == self.name && element.len() == 1 && element.starts_with(*code)
        })
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)?;
        for _ in 0..self.dimensions {
            write!(f, "[]")?;
        }
        Ok(())
    }
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first.is_alphabetic() || first == '_' || first == '$')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

fn is_class_name(text: &str) -> bool {
    text.split('.').all(is_identifier)
}

/// A method as a specification names it: `[package.]Class.method(Type,...)[ReturnType]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodPattern {
    pub class: TypeName,
    pub name: String,
    pub parameters: Vec<TypeName>,
    /// Left out, the method matches whatever it returns (and bridge methods are skipped).
    pub returns: Option<TypeName>,
}

impl MethodPattern {
    pub fn parse(text: &str) -> Result<MethodPattern, String> {
        let open = text.find('(').ok_or_else(|| {
            format!("'{text}' has no parameter list: write Class.method(Type,...)")
        })?;
        let close = text[open..]
            .find(')')
            .map(|at| open + at)
            .ok_or_else(|| format!("'{text}': the parameter list is not closed"))?;
        let (qualified, list, after) = (&text[..open], &text[open + 1..close], &text[close + 1..]);
        let (class, name) = qualified
            .rsplit_once('.')
            .ok_or_else(|| format!("'{qualified}' names no class: write Class.method"))?;
        if !(is_identifier(name) || name == "<init>") {
            return Err(format!("'{name}' is not a method name"));
        }
        let class = TypeName::parse(class).map_err(|problem| format!("class {problem}"))?;
        if class.is_primitive() || class.is_array() {
            return Err(format!("'{class}' is not a class that declares methods"));
        }
        let parameters = if list.trim().is_empty() {
            Vec::new()
        } else {
            list.split(',')
                .map(TypeName::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|problem| format!("parameter {problem}"))?
        };
        if parameters.iter().any(|p| p.name == "void") {
            return Err("a parameter can't be void".into());
        }
        let returns = if after.trim().is_empty() {
            None
        } else {
            Some(TypeName::parse(after).map_err(|problem| format!("return type {problem}"))?)
        };
        if name == "<init>" && returns.as_ref().is_some_and(|r| r.name != "void") {
            return Err("a constructor returns void".into());
        }
        Ok(MethodPattern {
            class,
            name: name.to_string(),
            parameters,
            returns,
        })
    }

    /// Whether a method of the JVM (its name and descriptor, `(I[Lexample/Value;)V`) is one
    /// this pattern names; the class is checked by the variant's rules, not here.
    pub fn matches_method(&self, name: &str, descriptor: &str) -> bool {
        if name != self.name {
            return false;
        }
        let Some((parameters, returns)) = split_descriptor(descriptor) else {
            return false;
        };
        parameters.len() == self.parameters.len()
            && parameters
                .iter()
                .zip(&self.parameters)
                .all(|(descriptor, pattern)| pattern.matches_descriptor(descriptor))
            && self
                .returns
                .as_ref()
                .is_none_or(|pattern| pattern.matches_descriptor(returns))
    }

    /// Whether a class (its binary name, `example.Arrays`) is the one the pattern names.
    pub fn names_class(&self, class_name: &str) -> bool {
        self.class
            .matches_descriptor(&format!("L{};", class_name.replace('.', "/")))
    }
}

impl fmt::Display for MethodPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}(", self.class, self.name)?;
        for (index, parameter) in self.parameters.iter().enumerate() {
            if index > 0 {
                write!(f, ",")?;
            }
            write!(f, "{parameter}")?;
        }
        write!(f, ")")?;
        if let Some(returns) = &self.returns {
            write!(f, "{returns}")?;
        }
        Ok(())
    }
}

/// A method descriptor's parameter descriptors and return descriptor.
pub fn split_descriptor(descriptor: &str) -> Option<(Vec<&str>, &str)> {
    let inner = descriptor.strip_prefix('(')?;
    let close = inner.find(')')?;
    let (mut list, returns) = (&inner[..close], &inner[close + 1..]);
    let mut parameters = Vec::new();
    while !list.is_empty() {
        let element = list.trim_start_matches('[');
        let length = list.len() - element.len()
            + match element.as_bytes().first()? {
                b'L' => element.find(';')? + 1,
                _ => 1,
            };
        parameters.push(&list[..length]);
        list = &list[length..];
    }
    Some((parameters, returns))
}

/// One step of a modifier chain; each takes the previous step's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Modifier {
    /// An array's length.
    Length,
    /// An array's element; a negative index counts from the end (-1 is the last).
    ArrayElement(i32),
    /// The object's class.
    Class,
    /// A method without parameters called on the object: `name()` and, optionally, its
    /// return type.
    InstanceMethod {
        name: String,
        returns: Option<TypeName>,
    },
    /// A static method called with the object: `Class.name(Type)` and, optionally, its
    /// return type.
    StaticMethod {
        class: TypeName,
        name: String,
        parameter: TypeName,
        returns: Option<TypeName>,
    },
    /// A field of the object, by name and, optionally, type.
    Field {
        name: String,
        field_type: Option<TypeName>,
    },
    /// The object seen as an instance of a class (CastFailed when it is not one).
    Cast(TypeName),
    /// A number unique to the object and stable for its life.
    Id,
}

impl Modifier {
    pub const NAMES: [&'static str; 8] = [
        "length",
        "array_element",
        "class",
        "instance_method",
        "static_method",
        "field",
        "cast",
        "id",
    ];

    fn parse(text: &str) -> Result<Modifier, String> {
        let (name, argument) = match text.split_once(':') {
            Some((name, argument)) => (name, Some(argument)),
            None => (text, None),
        };
        let needs = |what: &str| format!("modifier {name} needs {what}");
        let none = |modifier: Modifier| match argument {
            None => Ok(modifier),
            Some(_) => Err(format!("modifier {name} takes no argument")),
        };
        match name {
            "length" => none(Modifier::Length),
            "class" => none(Modifier::Class),
            "id" => none(Modifier::Id),
            "array_element" => {
                let argument = argument.ok_or_else(|| needs("an index, e.g. array_element:-1"))?;
                argument
                    .parse()
                    .map(Modifier::ArrayElement)
                    .map_err(|_| format!("array_element: '{argument}' is not an index"))
            }
            "instance_method" => {
                let argument =
                    argument.ok_or_else(|| needs("a method, e.g. instance_method:toString()"))?;
                let (method, returns) = argument.split_once("()").ok_or_else(|| {
                    format!("instance_method: '{argument}' is not a method without parameters, name()[ReturnType]")
                })?;
                if !is_identifier(method) {
                    return Err(format!("instance_method: '{method}' is not a method name"));
                }
                Ok(Modifier::InstanceMethod {
                    name: method.to_string(),
                    returns: optional_type(returns)
                        .map_err(|problem| format!("instance_method: return type {problem}"))?,
                })
            }
            "static_method" => {
                let argument = argument.ok_or_else(|| {
                    needs("a method, e.g. static_method:java.util.Arrays.toString(int[])")
                })?;
                let pattern = MethodPattern::parse(argument)
                    .map_err(|problem| format!("static_method: {problem}"))?;
                let [parameter] = &pattern.parameters[..] else {
                    return Err(format!(
                        "static_method: '{argument}' must take exactly one parameter, the value"
                    ));
                };
                Ok(Modifier::StaticMethod {
                    parameter: parameter.clone(),
                    class: pattern.class,
                    name: pattern.name,
                    returns: pattern.returns,
                })
            }
            "field" => {
                let argument = argument.ok_or_else(|| needs("a field, e.g. field:name:String"))?;
                let (field, field_type) = match argument.split_once(':') {
                    Some((field, field_type)) => (field, Some(field_type)),
                    None => (argument, None),
                };
                if !is_identifier(field) {
                    return Err(format!("field: '{field}' is not a field name"));
                }
                Ok(Modifier::Field {
                    name: field.to_string(),
                    field_type: field_type
                        .map(TypeName::parse)
                        .transpose()
                        .map_err(|problem| format!("field: type {problem}"))?,
                })
            }
            "cast" => {
                let argument =
                    argument.ok_or_else(|| needs("a class, e.g. cast:example.Special"))?;
                let class =
                    TypeName::parse(argument).map_err(|problem| format!("cast: {problem}"))?;
                if class.is_primitive() {
                    return Err(format!("cast: '{class}' is a primitive; cast to a class"));
                }
                Ok(Modifier::Cast(class))
            }
            _ => Err(format!(
                "unknown modifier '{name}'; the modifiers are {}",
                Modifier::NAMES.join(", ")
            )),
        }
    }
}

fn optional_type(text: &str) -> Result<Option<TypeName>, String> {
    if text.is_empty() {
        Ok(None)
    } else {
        TypeName::parse(text).map(Some)
    }
}

impl fmt::Display for Modifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let returns = |returns: &Option<TypeName>| {
            returns
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        match self {
            Modifier::Length => write!(f, "length"),
            Modifier::ArrayElement(index) => write!(f, "array_element:{index}"),
            Modifier::Class => write!(f, "class"),
            Modifier::InstanceMethod { name, returns: r } => {
                write!(f, "instance_method:{name}(){}", returns(r))
            }
            Modifier::StaticMethod {
                class,
                name,
                parameter,
                returns: r,
            } => write!(f, "static_method:{class}.{name}({parameter}){}", returns(r)),
            Modifier::Field { name, field_type } => match field_type {
                Some(field_type) => write!(f, "field:{name}:{field_type}"),
                None => write!(f, "field:{name}"),
            },
            Modifier::Cast(class) => write!(f, "cast:{class}"),
            Modifier::Id => write!(f, "id"),
        }
    }
}

/// Which calls of the named method are traced (docs/mpt.md, `variant=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Variant {
    /// 1: calls whose receiver's class is exactly the named class.
    ReceiverClass,
    /// 2 (the default): also receivers of subclasses that do not override the method.
    #[default]
    InheritedBy,
    /// 3: also receivers of every subclass, overriding or not.
    AllSubclasses,
}

impl Variant {
    fn number(self) -> u8 {
        match self {
            Variant::ReceiverClass => 1,
            Variant::InheritedBy => 2,
            Variant::AllSubclasses => 3,
        }
    }
}

/// What each traced call reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Events {
    pub entry: bool,
    pub exit: bool,
    /// The stack trace with the entry event.
    pub stack: bool,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            entry: true,
            exit: true,
            stack: false,
        }
    }
}

/// One specification: a parameter of a method, its modifier chain, the variant and events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MptSpec {
    pub method: MethodPattern,
    /// 0 is `this`, 1..n the parameters.
    pub parameter: u8,
    pub modifiers: Vec<Modifier>,
    pub variant: Variant,
    pub events: Events,
}

impl MptSpec {
    /// The declared type of the traced parameter, where the pattern gives it (`this` is the
    /// named class).
    pub fn parameter_type(&self) -> Option<&TypeName> {
        match self.parameter {
            0 => Some(&self.method.class),
            n => self.method.parameters.get(usize::from(n) - 1),
        }
    }
}

impl fmt::Display for MptSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.parameter)?;
        for modifier in &self.modifiers {
            write!(f, " {modifier}")?;
        }
        // Defaults are left out, so the text is the shortest that parses back the same.
        if self.variant != Variant::default() {
            write!(f, " variant={}", self.variant.number())?;
        }
        if self.events == Events::default() {
            return Ok(());
        }
        let mut events = Vec::new();
        for (on, name) in [
            (self.events.entry, "entry"),
            (self.events.exit, "exit"),
            (self.events.stack, "stack"),
        ] {
            if on {
                events.push(name);
            }
        }
        write!(f, " events={}", events.join(","))
    }
}
