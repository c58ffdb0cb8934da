//! The parser of method parameter tracing specifications: a line at a time, each fault named
//! with its line and column.

use super::{Events, MethodPattern, Modifier, MptSpec, SpecError, Variant};

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
    use crate::mpt::TypeName;

    fn spec(line: &str) -> MptSpec {
        parse_line(line, 1).unwrap().unwrap()
    }

    fn fault(line: &str) -> SpecError {
        parse_line(line, 3).unwrap_err()
    }

    #[test]
    fn example_specifications_parse() {
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
}
