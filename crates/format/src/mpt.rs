//! Method parameter tracing specifications (seed 003): which parameter of which method to
//! trace, through which chain of modifiers, matched by which variant, reporting which events.
//! The text syntax is docs/mpt.md's; this is its one parser and printer.

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

/// One step of a modifier chain (seed 003); each takes the previous step's value.
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

/// Which calls of the named method are traced (seed 003, Tables 1 and 2).
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

/// What the variant rules need to know of a loaded class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassShape {
    /// The binary name, `example.Arrays`.
    pub name: String,
    pub superclass: Option<String>,
    pub methods: Vec<MethodShape>,
}

/// A method as the JVM declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodShape {
    pub name: String,
    pub descriptor: String,
    /// ACC_BRIDGE: a method the compiler added to forward to a covariant override.
    pub bridge: bool,
}

impl MptSpec {
    /// Whether a method counts as the named one: it matches the pattern, and, when the
    /// return type is left out, it is no bridge (so each call is traced once, in the method
    /// that implements it).
    pub fn counts(&self, method: &MethodShape) -> bool {
        self.method.matches_method(&method.name, &method.descriptor)
            && !(self.method.returns.is_none() && method.bridge)
    }

    /// The method a call on a receiver of `class` runs: the first counting method found from
    /// the class up its superclasses, with the class declaring it.
    fn implementation<'a>(
        &self,
        classes: &impl Fn(&str) -> Option<&'a ClassShape>,
        class: &str,
    ) -> Option<(&'a str, &'a MethodShape)> {
        let mut current = classes(class);
        while let Some(shape) = current {
            if let Some(method) = shape.methods.iter().find(|m| self.counts(m)) {
                return Some((shape.name.as_str(), method));
            }
            current = shape.superclass.as_deref().and_then(classes);
        }
        None
    }

    /// Whether a call is traced (seed 003, Tables 1 to 4): it runs `method` of class
    /// `declaring` on a receiver of class `receiver` (`None` for a static method). `classes`
    /// finds a loaded class by binary name.
    pub fn traces_call<'a>(
        &self,
        classes: impl Fn(&str) -> Option<&'a ClassShape>,
        receiver: Option<&str>,
        declaring: &str,
        method: &MethodShape,
    ) -> bool {
        if !self.counts(method) {
            return false;
        }
        let Some(receiver) = receiver else {
            return self.method.names_class(declaring);
        };
        // The call must be the receiver's own (not a super.method() call from an override).
        let Some(implementation) = self.implementation(&classes, receiver) else {
            return false;
        };
        if implementation != (declaring, method) {
            return false;
        }
        let mut ancestors = Vec::new();
        let mut current = classes(receiver);
        while let Some(shape) = current {
            ancestors.push(shape.name.as_str());
            current = shape.superclass.as_deref().and_then(&classes);
        }
        let mut named = ancestors
            .iter()
            .copied()
            .filter(|class| self.method.names_class(class));
        match self.variant {
            Variant::ReceiverClass => self.method.names_class(receiver),
            Variant::InheritedBy => {
                named.any(|class| self.implementation(&classes, class) == Some(implementation))
            }
            Variant::AllSubclasses => named.next().is_some(),
        }
    }
}

/// The whitespace-separated tokens of a line with their 1-based columns; a comment (`#`)
/// ends the line. Whitespace inside parentheses does not split (`run(Value, int)`).
fn tokens(line: &str) -> Result<Vec<(usize, String)>, (usize, String)> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let mut depth = 0usize;
    let mut opened_at = 0;
    for (column, c) in line.chars().enumerate() {
        match c {
            '#' if depth == 0 => break,
            c if c.is_whitespace() && depth == 0 => {
                if !current.is_empty() {
                    tokens.push((start + 1, std::mem::take(&mut current)));
                }
                continue;
            }
            '(' => {
                if depth == 0 {
                    opened_at = column;
                }
                depth += 1
            }
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or((column + 1, "')' without '('".to_string()))?
            }
            _ => {}
        }
        if current.is_empty() {
            start = column;
        }
        current.push(c);
    }
    if depth > 0 {
        return Err((opened_at + 1, "'(' is not closed".into()));
    }
    if !current.is_empty() {
        tokens.push((start + 1, current));
    }
    Ok(tokens)
}

/// Parses one specification: `METHOD PARAMETER [MODIFIER]... [variant=N] [events=LIST]`.
/// Returns `None` for a blank or comment line.
pub fn parse_line(line: &str, line_number: usize) -> Result<Option<MptSpec>, SpecError> {
    let fail = |column: usize, message: String| SpecError {
        line: line_number,
        column,
        message,
    };
    let tokens = tokens(line).map_err(|(column, message)| fail(column, message))?;
    let Some(((method_column, method), rest)) = tokens.split_first() else {
        return Ok(None);
    };
    let method = MethodPattern::parse(method).map_err(|problem| fail(*method_column, problem))?;
    if method.name == "<init>" {
        return Err(fail(
            *method_column,
            "constructors (<init>) are not traced yet: an exception leaving one before super() \
             returns can't be caught by added code; trace a method the constructor calls"
                .into(),
        ));
    }
    let Some(((parameter_column, parameter), rest)) = rest.split_first() else {
        return Err(fail(
            line.chars().count() + 1,
            "the parameter to trace is missing: 0 for this, 1 to n for the parameters".into(),
        ));
    };
    let parameter: u8 = parameter
        .parse()
        .ok()
        .filter(|&index| usize::from(index) <= method.parameters.len())
        .ok_or_else(|| {
            fail(
                *parameter_column,
                format!(
                    "'{parameter}' is not a parameter of {method}: use 0 for this or 1 to {}",
                    method.parameters.len()
                ),
            )
        })?;
    let mut spec = MptSpec {
        method,
        parameter,
        modifiers: Vec::new(),
        variant: Variant::default(),
        events: Events::default(),
    };
    let (mut variant_seen, mut events_seen) = (false, false);
    for (column, token) in rest {
        let column = *column;
        if let Some(value) = token.strip_prefix("variant=") {
            if std::mem::replace(&mut variant_seen, true) {
                return Err(fail(column, "variant= is given twice".into()));
            }
            spec.variant = match value {
                "1" => Variant::ReceiverClass,
                "2" => Variant::InheritedBy,
                "3" => Variant::AllSubclasses,
                _ => {
                    return Err(fail(
                        column,
                        format!("variant '{value}': use 1 (the receiver's class only), 2 (and subclasses that don't override it) or 3 (and all subclasses)"),
                    ))
                }
            };
        } else if let Some(value) = token.strip_prefix("events=") {
            if std::mem::replace(&mut events_seen, true) {
                return Err(fail(column, "events= is given twice".into()));
            }
            spec.events = Events {
                entry: false,
                exit: false,
                stack: false,
            };
            for event in value.split(',') {
                let flag = match event {
                    "entry" => &mut spec.events.entry,
                    "exit" => &mut spec.events.exit,
                    "stack" => &mut spec.events.stack,
                    _ => {
                        return Err(fail(
                            column,
                            format!("event '{event}': use entry, exit and stack"),
                        ))
                    }
                };
                *flag = true;
            }
            if spec.events.stack && !spec.events.entry {
                return Err(fail(
                    column,
                    "events=stack needs entry: the stack trace goes with the entry event".into(),
                ));
            }
            if !spec.events.entry && !spec.events.exit {
                return Err(fail(column, "events= needs entry, exit or both".into()));
            }
        } else if variant_seen || events_seen {
            return Err(fail(
                column,
                format!("'{token}': modifiers come before variant= and events="),
            ));
        } else {
            let modifier = Modifier::parse(token).map_err(|problem| fail(column, problem))?;
            if spec.modifiers.is_empty() {
                if let Some(declared) = spec.parameter_type().filter(|t| t.is_primitive()) {
                    return Err(fail(
                        column,
                        format!(
                            "parameter {} is a {declared}: modifiers apply to references only",
                            spec.parameter
                        ),
                    ));
                }
            }
            spec.modifiers.push(modifier);
        }
    }
    Ok(Some(spec))
}

/// Parses a specification file: one specification a line, `#` comments, blank lines.
pub fn parse_specs(text: &str) -> Result<Vec<MptSpec>, SpecError> {
    let mut specs = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(spec) = parse_line(line, index + 1)? {
            specs.push(spec);
        }
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(line: &str) -> MptSpec {
        parse_line(line, 1).unwrap().unwrap()
    }

    fn fault(line: &str) -> SpecError {
        parse_line(line, 3).unwrap_err()
    }

    #[test]
    fn the_seeds_examples_parse() {
        let get = spec("java.util.HashMap.get(java.lang.Object)java.lang.Object 1 instance_method:toString()java.lang.String");
        assert_eq!(get.method.class.name, "java.util.HashMap");
        assert_eq!(get.method.name, "get");
        assert_eq!(get.parameter, 1);
        assert_eq!(
            get.modifiers,
            [Modifier::InstanceMethod {
                name: "toString".into(),
                returns: Some(TypeName::parse("java.lang.String").unwrap()),
            }]
        );
        assert_eq!(get.variant, Variant::InheritedBy);
        assert_eq!(get.events, Events::default());

        let run = spec("example.Arrays.run(Value[]) 1 length variant=3 events=entry,exit,stack");
        assert_eq!(run.method.returns, None);
        assert_eq!(run.method.parameters[0].dimensions, 1);
        assert_eq!(run.modifiers, [Modifier::Length]);
        assert_eq!(run.variant, Variant::AllSubclasses);
        assert!(run.events.stack);

        let special =
            spec("HashMap.get(Object) 1 cast:example.Special field:detail:String  # fallback");
        assert_eq!(
            special.modifiers,
            [
                Modifier::Cast(TypeName::parse("example.Special").unwrap()),
                Modifier::Field {
                    name: "detail".into(),
                    field_type: Some(TypeName::parse("String").unwrap()),
                },
            ]
        );
        let chain = spec("a.B.c(java.lang.Object[][], int) 1 array_element:-1 class static_method:a.Util.describe(Object)String id");
        assert_eq!(chain.modifiers.len(), 4);
        assert_eq!(chain.modifiers[0], Modifier::ArrayElement(-1));
    }

    #[test]
    fn specifications_print_as_they_parse() {
        for line in [
            "java.util.HashMap.get(java.lang.Object)java.lang.Object 1 instance_method:toString()String variant=1 events=entry",
            "example.Arrays.run(Value[]) 0",
            "a.B.make(int,long[][]) 2 length variant=3 events=entry,exit,stack",
            "a.B.make(int) 1 variant=1",
            "B.c(Object) 1 cast:x.Special field:detail:String static_method:x.U.f(Object)long field:n array_element:-2 id class events=exit",
        ] {
            let parsed = spec(line);
            assert_eq!(parsed.to_string(), line);
            assert_eq!(spec(&parsed.to_string()), parsed);
        }
        assert_eq!(parse_line("   # only a comment", 1), Ok(None));
        assert_eq!(
            parse_specs("\n# x\nA.b() 0\n\nA.c(int) 1\n").unwrap().len(),
            2
        );
    }

    #[test]
    fn each_fault_is_named_with_its_place() {
        for (line, column, expected) in [
            ("HashMap.get", 1, "has no parameter list"),
            ("get(Object) 1", 1, "names no class"),
            ("A.b(Object 1", 4, "'(' is not closed"),
            ("A.b(Obj ect) 1", 1, "not a Java type name"),
            ("A.9b() 0", 1, "'9b' is not a method name"),
            ("A.b(void) 1", 1, "can't be void"),
            ("int.b() 0", 1, "not a class that declares methods"),
            ("A.b(int)", 9, "the parameter to trace is missing"),
            (
                "A.b(int) 2",
                10,
                "'2' is not a parameter of A.b(int): use 0 for this or 1 to 1",
            ),
            ("A.b(int) x", 10, "'x' is not a parameter"),
            (
                "A.<init>(int) 1",
                1,
                "constructors (<init>) are not traced yet",
            ),
            (
                "A.b(int) 1 length",
                12,
                "parameter 1 is a int: modifiers apply to references only",
            ),
            (
                "A.b(Object) 1 size",
                15,
                "unknown modifier 'size'; the modifiers are length,",
            ),
            ("A.b(Object) 1 length:3", 15, "length takes no argument"),
            ("A.b(Object) 1 array_element", 15, "needs an index"),
            (
                "A.b(Object) 1 array_element:last",
                15,
                "'last' is not an index",
            ),
            (
                "A.b(Object) 1 instance_method:toString",
                15,
                "not a method without parameters",
            ),
            (
                "A.b(Object) 1 static_method:U.f(Object,int)",
                15,
                "exactly one parameter",
            ),
            ("A.b(Object) 1 field:9x", 15, "'9x' is not a field name"),
            ("A.b(Object) 1 cast:int", 15, "is a primitive"),
            ("A.b(Object) 1 variant=4", 15, "variant '4': use 1"),
            (
                "A.b(Object) 1 variant=1 variant=2",
                25,
                "variant= is given twice",
            ),
            ("A.b(Object) 1 events=entry,leave", 15, "event 'leave'"),
            (
                "A.b(Object) 1 events=exit,stack",
                15,
                "events=stack needs entry",
            ),
            (
                "A.b(Object) 1 variant=1 length",
                25,
                "modifiers come before variant=",
            ),
            ("A.b(Object)) 1", 12, "')' without '('"),
        ] {
            let error = fault(line);
            assert!(
                error.message.contains(expected) && error.column == column && error.line == 3,
                "{line}: {error:?}"
            );
        }
        let error = parse_specs("A.b() 0\nA.c(Object) 1 bogus\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "line 2, column 15: unknown modifier 'bogus'; the modifiers are length, array_element, class, instance_method, static_method, field, cast, id"
        );
    }

    #[test]
    fn patterns_match_jvm_descriptors_complete_or_partial() {
        let partial = MethodPattern::parse("Arrays.run(Value[])").unwrap();
        assert!(partial.names_class("example.Arrays"));
        assert!(partial.names_class("Arrays"));
        assert!(!partial.names_class("example.Arrays2"));
        assert!(partial.matches_method("run", "([Lexample/Value;)Lexample/Result;"));
        assert!(partial.matches_method("run", "([Lother/Value;)V"));
        assert!(!partial.matches_method("run", "(Lexample/Value;)V"));
        assert!(!partial.matches_method("run", "([[Lexample/Value;)V"));
        assert!(!partial.matches_method("walk", "([Lexample/Value;)V"));

        let complete = MethodPattern::parse("example.B.exampleMethod()example.Arrays3").unwrap();
        assert!(complete.matches_method("exampleMethod", "()Lexample/Arrays3;"));
        assert!(!complete.matches_method("exampleMethod", "()Lexample/Arrays2;"));
        assert!(!complete.names_class("other.B"));

        let primitives = MethodPattern::parse("A.f(int,long[],boolean,double)void").unwrap();
        assert!(primitives.matches_method("f", "(I[JZD)V"));
        assert!(!primitives.matches_method("f", "(I[JZF)V"));
        assert!(!primitives.matches_method("f", "(I[JZD)I"));
        let nested = MethodPattern::parse("Outer$Inner.f(java.util.Map$Entry)").unwrap();
        assert!(nested.names_class("a.Outer$Inner"));
        assert!(nested.matches_method("f", "(Ljava/util/Map$Entry;)V"));
        let simple = MethodPattern::parse("Inner.f(Entry)").unwrap();
        assert!(simple.names_class("a.Outer$Inner"));
        assert!(simple.matches_method("f", "(Ljava/util/Map$Entry;)V"));
        assert!(!simple.matches_method("f", "(Ljava/util/Map$EntryX;)V"));
        let enclosed = MethodPattern::parse("A.f(Map$Entry)").unwrap();
        assert!(!enclosed.matches_method("f", "(Ljava/util/Other$Entry;)V"));
        assert_eq!(
            split_descriptor("(I[[Ljava/lang/String;J)V"),
            Some((vec!["I", "[[Ljava/lang/String;", "J"], "V"))
        );
        assert_eq!(split_descriptor("(Lbroken)V"), None);
    }
    /// Seed 003's Table 1 (and Table 3's classes), as the JVM loads them.
    fn seed_classes() -> Vec<ClassShape> {
        let method = |name: &str, descriptor: &str, bridge: bool| MethodShape {
            name: name.into(),
            descriptor: descriptor.into(),
            bridge,
        };
        let class = |name: &str, superclass: Option<&str>, methods: Vec<MethodShape>| ClassShape {
            name: name.into(),
            superclass: superclass.map(Into::into),
            methods,
        };
        let run = "(Lexample/Value;)Lexample/Result;";
        vec![
            class("java.lang.Object", None, vec![]),
            class(
                "example.Arrays",
                Some("java.lang.Object"),
                vec![method("run", run, false)],
            ),
            class("example.Arrays2", Some("example.Arrays"), vec![]),
            class(
                "example.Arrays3",
                Some("example.Arrays2"),
                vec![method("run", run, false)],
            ),
            class(
                "example.A",
                Some("java.lang.Object"),
                vec![method("exampleMethod", "()Lexample/Arrays2;", false)],
            ),
            class(
                "example.B",
                Some("example.A"),
                vec![
                    method("exampleMethod", "()Lexample/Arrays3;", false),
                    method("exampleMethod", "()Lexample/Arrays2;", true),
                ],
            ),
        ]
    }

    /// Which of the calls (receiver, the class whose method runs, its descriptor) are traced.
    fn traced(line: &str, calls: &[(&str, &str, &str)]) -> Vec<usize> {
        let classes = seed_classes();
        let find = |name: &str| classes.iter().find(|c| c.name == name);
        let spec = spec(line);
        calls
            .iter()
            .enumerate()
            .filter(|(_, (receiver, declaring, descriptor))| {
                let method = find(declaring)
                    .unwrap()
                    .methods
                    .iter()
                    .find(|m| m.descriptor == *descriptor)
                    .unwrap();
                spec.traces_call(find, Some(receiver), declaring, method)
            })
            .map(|(index, _)| index + 1)
            .collect()
    }

    #[test]
    fn variants_trace_the_calls_of_seed_003s_table_2() {
        let run = "(Lexample/Value;)Lexample/Result;";
        // Call 1: new Arrays().run(..), Call 2: new Arrays2().run(..) (runs Arrays.run),
        // Call 3: new Arrays3().run(..) (runs its override).
        let calls = [
            ("example.Arrays", "example.Arrays", run),
            ("example.Arrays2", "example.Arrays", run),
            ("example.Arrays3", "example.Arrays3", run),
        ];
        for (spec, expected) in [
            ("Arrays.run(Value) 1 variant=1", vec![1]),
            ("Arrays.run(Value) 1 variant=2", vec![1, 2]),
            ("Arrays.run(Value) 1 variant=3", vec![1, 2, 3]),
            ("example.Arrays2.run(example.Value) 1 variant=1", vec![2]),
            ("Arrays2.run(Value) 1 variant=2", vec![2]),
            ("Arrays2.run(Value) 1 variant=3", vec![2, 3]),
            ("Arrays3.run(Value)Result 1 variant=1", vec![3]),
            ("Arrays.run(Value)Other 1 variant=3", vec![]),
        ] {
            assert_eq!(traced(spec, &calls), expected, "{spec}");
        }
        // A super.run() from the override is not another call of the receiver's.
        assert_eq!(
            traced(
                "Arrays.run(Value) 1 variant=3",
                &[("example.Arrays3", "example.Arrays", run)]
            ),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn covariant_returns_are_traced_once_per_call_as_in_tables_3_and_4() {
        let (original, covariant) = ("()Lexample/Arrays2;", "()Lexample/Arrays3;");
        // Call 1: an A. Call 2: a B through A's descriptor: the bridge, then B's method.
        // Call 3: a B through B's descriptor.
        let calls = [
            ("example.A", "example.A", original),
            ("example.B", "example.B", original),
            ("example.B", "example.B", covariant),
            ("example.B", "example.B", covariant),
        ];
        let call = |steps: &[usize]| -> Vec<usize> { steps.to_vec() };
        // Steps 2 and 3 are Call 2 (bridge, then implementation); step 4 is Call 3.
        for (spec, expected) in [
            // Return type left out: each call once, in the implementation.
            ("A.exampleMethod() 0 variant=3", call(&[1, 3, 4])),
            // Arrays3: Call 1 is not traced.
            ("A.exampleMethod()Arrays3 0 variant=3", call(&[3, 4])),
            // Arrays2: Call 3 is not traced; Call 2 is, in the bridge.
            ("A.exampleMethod()Arrays2 0 variant=3", call(&[1, 2])),
            ("B.exampleMethod() 0 variant=1", call(&[3, 4])),
            ("A.exampleMethod() 0 variant=1", call(&[1])),
        ] {
            assert_eq!(traced(spec, &calls), expected, "{spec}");
        }
    }
}
