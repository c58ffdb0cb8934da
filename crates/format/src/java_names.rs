//! Java's names for classes: from JVM signatures (`Ljava/lang/String;`, `[[I`) to the source
//! form profilers print (`java.lang.String`, `int[][]`), as HPROF's output and records use them.

/// The source-form name of a class from its JVM signature, or the input itself when it is not
/// a signature (so a name already in source form passes through).
pub fn class_name_from_signature(signature: &str) -> String {
    let dimensions = signature.bytes().take_while(|&b| b == b'[').count();
    let element = &signature[dimensions..];
    let base = match element {
        "Z" => "boolean".to_string(),
        "B" => "byte".to_string(),
        "C" => "char".to_string(),
        "S" => "short".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        "F" => "float".to_string(),
        "D" => "double".to_string(),
        "V" => "void".to_string(),
        _ => element
            .strip_prefix('L')
            .and_then(|name| name.strip_suffix(';'))
            .unwrap_or(element)
            .replace('/', "."),
    };
    base + &"[]".repeat(dimensions)
}

/// A method as Java source names it, `example.Slow.work(int,java.lang.String[])`, from its
/// class (a source name or a signature), name and JVM descriptor; `None` when the descriptor is
/// not one. Parameters are separated by `,` alone, as method parameter tracing specifications
/// print them.
pub fn method_name_from_descriptor(class: &str, method: &str, descriptor: &str) -> Option<String> {
    let (parameters, _) = crate::mpt::split_descriptor(descriptor)?;
    let parameters: Vec<String> = parameters
        .iter()
        .map(|parameter| class_name_from_signature(parameter))
        .collect();
    Some(format!(
        "{}.{method}({})",
        class_name_from_signature(class),
        parameters.join(",")
    ))
}

#[cfg(test)]
mod tests {
    use super::class_name_from_signature as name;
    use super::method_name_from_descriptor;

    #[test]
    fn descriptors_become_source_parameter_lists() {
        assert_eq!(
            method_name_from_descriptor("example.Slow", "work", "(I)V").as_deref(),
            Some("example.Slow.work(int)")
        );
        assert_eq!(
            method_name_from_descriptor("Lpkg/A$B;", "<init>", "([[Ljava/lang/String;JZ)V")
                .as_deref(),
            Some("pkg.A$B.<init>(java.lang.String[][],long,boolean)")
        );
        assert_eq!(
            method_name_from_descriptor("A", "f", "()Ljava/lang/Object;").as_deref(),
            Some("A.f()")
        );
        assert_eq!(method_name_from_descriptor("A", "f", "(Lbroken)V"), None);
        assert_eq!(method_name_from_descriptor("A", "f", "I"), None);
    }

    #[test]
    fn signatures_become_source_names() {
        assert_eq!(name("Ljava/lang/String;"), "java.lang.String");
        assert_eq!(name("[C"), "char[]");
        assert_eq!(name("[[[S"), "short[][][]");
        assert_eq!(name("[LMyType;"), "MyType[]");
        assert_eq!(name("Lpkg/Outer$Inner;"), "pkg.Outer$Inner");
        assert_eq!(name("java.lang.Object"), "java.lang.Object");
    }
}
