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

#[cfg(test)]
mod tests {
    use super::class_name_from_signature as name;

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
