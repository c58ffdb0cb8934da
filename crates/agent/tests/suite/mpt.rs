//! Method parameter tracing against ground truth: the examples of docs/mpt.md (variants, covariant
//! returns), every modifier and every error value, each provoked by a workload call made a
//! known number of times; the trace read back and checked by xmllint against docs/trace.dtd.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use openprof_format::trace::attrs::ValueType;
use openprof_format::trace::validate::validate;
use openprof_format::trace::TraceElement;
use openprof_testkit::{kept_temp_dir, read_trace, run_java, Run};

use crate::helpers::xmllint;

/// Writes the specifications to a file of their own and returns its path.
fn spec_file(name: &str, specs: &[&str]) -> PathBuf {
    let dir = kept_temp_dir("openprof-mpt-");
    let path = dir.join(name);
    std::fs::write(&path, specs.join("\n") + "\n").expect("spec file");
    path
}

fn traced(main_class: &str, specs: &[&str]) -> (Run, Vec<TraceElement>) {
    let path = spec_file("specs.mpt", specs);
    let options = format!("format=x,file=trace.xml,mpt=@{}", path.display());
    let run = run_java(Some(&options), main_class, &[], Duration::from_secs(180));
    assert!(run.success(), "{}\n{}", run.stdout(), run.stderr());
    assert!(run.stdout().contains("done"), "{}", run.stdout());
    let elements = read_trace(&run.dir.join("trace.xml"));
    (run, elements)
}

/// methodId → `Class.method descriptor`.
fn method_names(elements: &[TraceElement]) -> HashMap<u32, String> {
    let mut classes = HashMap::new();
    let mut methods = HashMap::new();
    for element in elements {
        match element {
            TraceElement::ClassDef(class) => {
                classes.insert(class.class_id.unwrap(), class.name.clone().unwrap());
            }
            TraceElement::MethodDef(method) => {
                let class = &classes[&method.class_id_ref.unwrap()];
                methods.insert(
                    method.method_id.unwrap(),
                    format!(
                        "{class}.{} {}",
                        method.name.as_deref().unwrap(),
                        method.signature.as_deref().unwrap()
                    ),
                );
            }
            _ => {}
        }
    }
    methods
}

/// A value as a test compares it: its type and text, loader indexes left out of class names.
type Seen = (ValueType, String);

/// For each specification (the value's referenceName): how often each (method, value) was
/// traced.
fn values_by_spec(elements: &[TraceElement]) -> BTreeMap<String, BTreeMap<(String, Seen), u32>> {
    let names = method_names(elements);
    let mut by_spec: BTreeMap<String, BTreeMap<(String, Seen), u32>> = BTreeMap::new();
    for element in elements {
        let TraceElement::MethodEntry(entry) = element else {
            continue;
        };
        let method = names[&entry.method_id_ref.unwrap()].clone();
        for value in &entry.content.0 {
            let mut text = value.value.clone().unwrap_or_default();
            if let Some(at) = text.find(" (loader ") {
                text.truncate(at);
            }
            *by_spec
                .entry(value.reference_name.clone().unwrap())
                .or_default()
                .entry((method.clone(), (value.value_type.unwrap(), text)))
                .or_default() += 1;
        }
    }
    by_spec
}

/// The values traced for a spec, whatever the method: value text → count.
fn counts(
    by_spec: &BTreeMap<String, BTreeMap<(String, Seen), u32>>,
    spec: &str,
) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for ((_, (_, text)), count) in by_spec.get(spec).into_iter().flatten() {
        *counts.entry(text.clone()).or_default() += count;
    }
    counts
}

fn expect(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Every traced entry has its exit (same thread, same ticket), in order.
fn entries_are_exited(elements: &[TraceElement]) {
    let mut open: HashMap<u32, Vec<u128>> = HashMap::new();
    for element in elements {
        match element {
            TraceElement::MethodEntry(entry) if !entry.content.0.is_empty() => open
                .entry(entry.thread_id_ref.unwrap())
                .or_default()
                .push(entry.ticket.unwrap().0),
            TraceElement::MethodExit(exit) => {
                let stack = open.get_mut(&exit.thread_id_ref.unwrap()).unwrap();
                assert_eq!(stack.pop(), Some(exit.ticket.unwrap().0));
            }
            _ => {}
        }
    }
    assert!(
        open.values().all(Vec::is_empty),
        "entries never exited: {open:?}"
    );
}

#[test]
fn variants_trace_exactly_the_calls_the_variant_rules_say() {
    // The variant rules of docs/mpt.md: Call N passes a VariantValue numbered N and is made N
    // times.
    let table_2 = [
        (
            "VariantArrays.run(VariantValue) 1 field:call variant=1",
            vec![("1", 1)],
        ),
        (
            "VariantArrays.run(VariantValue) 1 field:call",
            vec![("1", 1), ("2", 2)],
        ),
        (
            "VariantArrays.run(VariantValue) 1 field:call variant=3",
            vec![("1", 1), ("2", 2), ("3", 3)],
        ),
        (
            "VariantArrays2.run(VariantValue) 1 field:call variant=1",
            vec![("2", 2)],
        ),
        (
            "VariantArrays2.run(VariantValue) 1 field:call",
            vec![("2", 2)],
        ),
        (
            "VariantArrays2.run(VariantValue) 1 field:call variant=3",
            vec![("2", 2), ("3", 3)],
        ),
        (
            "VariantArrays3.run(VariantValue) 1 field:call variant=1",
            vec![("3", 3)],
        ),
    ];
    // Patterns without a return type, with a covariant override and its bridge: (method as the
    // trace names it, receiver class) → calls.
    let bridge = "VariantB.exampleMethod ()LVariantArrays2;";
    let override_ = "VariantB.exampleMethod ()LVariantArrays3;";
    let original = "VariantA.exampleMethod ()LVariantArrays2;";
    let table_4 = [
        // Return type left out: each call once, in the method implementing it.
        (
            "VariantA.exampleMethod() 0 class variant=3",
            vec![(original, "VariantA", 1), (override_, "VariantB", 6)],
        ),
        (
            "VariantA.exampleMethod()VariantArrays3 0 class variant=3",
            vec![(override_, "VariantB", 6)],
        ),
        // The original return type: Call 2 is traced in the bridge; Call 3 is not traced.
        (
            "VariantA.exampleMethod()VariantArrays2 0 class variant=3",
            vec![(original, "VariantA", 1), (bridge, "VariantB", 2)],
        ),
        (
            "VariantB.exampleMethod() 0 class variant=1",
            vec![(override_, "VariantB", 6)],
        ),
        (
            "VariantA.exampleMethod() 0 class variant=1",
            vec![(original, "VariantA", 1)],
        ),
    ];
    let specs: Vec<&str> = table_2
        .iter()
        .map(|(spec, _)| *spec)
        .chain(table_4.iter().map(|(spec, _)| *spec))
        .collect();
    let (run, elements) = traced("MptVariants", &specs);
    xmllint(&run);
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
    entries_are_exited(&elements);
    let by_spec = values_by_spec(&elements);
    for (spec, expected) in &table_2 {
        assert_eq!(counts(&by_spec, spec), expect(expected), "{spec}");
    }
    for (spec, expected) in &table_4 {
        let seen: BTreeMap<(String, String), u32> = by_spec
            .get(*spec)
            .into_iter()
            .flatten()
            .map(|((method, (kind, class)), count)| {
                assert_eq!(*kind, ValueType::Class);
                ((method.clone(), class.clone()), *count)
            })
            .collect();
        let expected: BTreeMap<(String, String), u32> = expected
            .iter()
            .map(|(method, class, count)| ((method.to_string(), class.to_string()), *count))
            .collect();
        assert_eq!(seen, expected, "{spec}");
    }
}

#[test]
fn first_calls_on_many_threads_at_once_all_get_their_value() {
    // A primitive value's chain is checked without Java code, so calls made while another
    // thread checks it wait rather than record Unknown.
    let specs: Vec<String> = (0..16)
        .map(|n| format!("MptFirstCalls.work{n}(int) 1"))
        .collect();
    let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
    let (_run, elements) = traced("MptFirstCalls", &specs);
    let by_spec = values_by_spec(&elements);
    for spec in &specs {
        assert_eq!(
            counts(&by_spec, spec),
            expect(&[("0", 1), ("1", 1), ("2", 1), ("3", 1)]),
            "{spec}"
        );
    }
}

#[test]
fn a_modifier_that_calls_the_traced_method_traces_the_programs_calls_only() {
    // The modifier's toString() is the traced method: the agent's own call of it, made to read
    // the value, is its work, not the program's, and never re-enters the hooks.
    let spec = "MptSelf.toString()String 0 instance_method:toString()String";
    let (run, elements) = traced("MptSelf", &[spec]);
    assert!(run.stdout().contains("total=2000"), "{}", run.stdout());
    let by_spec = values_by_spec(&elements);
    assert_eq!(
        counts(&by_spec, spec),
        expect(&[("k0", 250), ("k1", 250), ("k2", 250), ("k3", 250)])
    );
    entries_are_exited(&elements);
}

#[test]
fn values_modifiers_and_every_error_value_come_out_as_the_workload_made_them() {
    let specs = [
        "java.util.HashMap.get(java.lang.Object) 1 instance_method:toString()",
        "HashMap.get(Object) 1 cast:Special field:detail",
        "Probe.lengthOf(int[]) 1 length",
        "Probe.describe(Object) 1 instance_method:toString()String",
        "Probe.describe(Object) 1",
        "Probe.first(String[]) 1 array_element:5",
        "Probe.first(String[]) 1 array_element:-1",
        "Probe.keep(Object) 1",
        "Probe.keep(Object) 1 id",
        "Probe.keep(Object) 1 class",
        "Probe.keep(Object) 1 static_method:java.lang.String.valueOf(Object)",
        "Probe.name(String) 1 length",
        "Probe.fail(int) 1",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 1",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 2",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 3",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 4",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 5",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 6",
        "Probe.scaled(double,char,boolean,byte,short,long,float) 7",
        "Probe.name(String) 1",
        "java.util.Map.get(Object) 1",
    ];
    let (run, elements) = traced("MptValues", &specs);
    xmllint(&run);
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
    entries_are_exited(&elements);
    let by_spec = values_by_spec(&elements);
    let of = |spec: &str| counts(&by_spec, spec);

    // HashMap.get: the JDK calls it too; the workload's own keys come out exactly.
    let keys = of(specs[0]);
    for (key, calls) in [("alpha", 3), ("Special", 2), ("missing", 1)] {
        assert_eq!(keys.get(key), Some(&calls), "{key}: {keys:?}");
    }
    // docs/mpt.md's "Special" example: the field through a cast, CastFailed for other keys.
    let special = of(specs[1]);
    assert_eq!(special.get("the detail"), Some(&2), "{special:?}");
    assert!(
        special.get("CastFailed").copied().unwrap_or(0) >= 4,
        "{special:?}"
    );

    assert_eq!(of(specs[2]), expect(&[("7", 1), ("NullValue", 1)]));
    assert_eq!(
        of(specs[3]),
        expect(&[
            ("NullInCall", 1),
            ("ExceptionInCall", 1),
            ("built", 1),
            ("recursive", 1)
        ])
    );
    // Without modifiers: a StringBuilder is its contents; other objects are Unknown. The
    // recursive toString()'s own call of describe("inner") ran inside a modifier: not traced.
    assert_eq!(
        of(specs[4]),
        expect(&[("NullValue", 1), ("Unknown", 2), ("built", 1)])
    );
    assert_eq!(of(specs[5]), expect(&[("InvalidIndex", 1)]));
    assert_eq!(of(specs[6]), expect(&[("b", 1)]));
    assert_eq!(of(specs[7]), expect(&[("Unknown", 2), ("text", 1)]));
    let ids = of(specs[8]);
    assert_eq!(
        ids.len(),
        2,
        "the boxed 42 twice (one id), the string once: {ids:?}"
    );
    assert_eq!(
        ids.values()
            .copied()
            .collect::<Vec<_>>()
            .iter()
            .sum::<u32>(),
        3
    );
    assert!(ids.values().any(|&count| count == 2));
    assert_eq!(
        of(specs[9]),
        expect(&[("java.lang.Integer", 2), ("java.lang.String", 1)])
    );
    assert_eq!(of(specs[10]), expect(&[("42", 2), ("text", 1)]));
    // length can't apply to a String: an MPT Apply Error, and the call is still traced.
    assert_eq!(of(specs[11]), expect(&[("EnableFailed", 3)]));
    // Strings come through as UTF-16 (a NUL, which XML can't carry, written as an escape; a
    // character beyond the BMP whole), and long ones are cut.
    let names = of("Probe.name(String) 1");
    assert_eq!(names.get("a name"), Some(&1), "{names:?}");
    assert_eq!(names.get("nul\\u{0} and \u{1F600}"), Some(&1), "{names:?}");
    let long = format!("{}...(5000 chars)", "x".repeat(1024));
    assert_eq!(names.get(&long), Some(&1), "{names:?}");
    assert!(
        run.stderr().contains("MPT Apply Error") && run.stderr().contains("Probe.name"),
        "{}",
        run.stderr()
    );
    assert!(elements.iter().any(|element| matches!(
        element,
        TraceElement::Tag(tag) if tag.name.as_deref() == Some("MPT Apply Error")
            && tag.value.as_deref().is_some_and(|text| text.contains("needs an array"))
    )));
    // A method named by its interface is refused, not silently left untraced.
    assert!(
        run.stderr().contains(
            "MPT Apply Error: java.util.Map.get(Object) 1 on java.util.Map: names an interface"
        ),
        "{}",
        run.stderr()
    );
    assert!(!by_spec.contains_key("java.util.Map.get(Object) 1"));
    // Left by an exception: entered and exited once.
    assert_eq!(of(specs[12]), expect(&[("3", 1)]));
    for (spec, kind, text) in [
        (specs[13], ValueType::Double, "2.5"),
        (specs[14], ValueType::Char, "x"),
        (specs[15], ValueType::Boolean, "true"),
        (specs[16], ValueType::Byte, "7"),
        (specs[17], ValueType::Short, "-3"),
        (specs[18], ValueType::Long, "1099511627776"),
        (specs[19], ValueType::Float, "1.5"),
    ] {
        let seen: Vec<&(String, Seen)> = by_spec[spec].keys().collect();
        assert_eq!(seen.len(), 1, "{spec}");
        assert_eq!(seen[0].1, (kind, text.to_string()), "{spec}");
    }
    // No value anywhere from the call made inside a modifier.
    assert!(by_spec
        .values()
        .all(|values| values.keys().all(|(_, (_, text))| text != "inner")));
}

#[test]
fn tracing_the_jdks_hottest_methods_under_stress_leaves_the_jvm_running_and_the_trace_valid() {
    // String.length() runs everywhere (and sees strings holding control characters);
    // Object.toString() in every subclass, with a modifier that calls toString() itself;
    // HashMap.put from every thread. Stress adds recursion, exceptions, throw-away class
    // loaders (whose proxies' modules can't be instrumented: Apply Errors, not crashes) and
    // threads coming and going.
    let specs = [
        "java.lang.String.length() 0",
        "java.lang.Object.toString() 0 instance_method:toString() variant=3",
        "java.util.HashMap.put(Object,Object) 2 id",
        "java.lang.StringBuilder.append(String) 1 instance_method:length()",
        // Every receiver is a StringBuilder or StringBuffer, which override append(String):
        // variant 2 traces none of their calls (their super.append runs inside them).
        "java.lang.AbstractStringBuilder.append(String) 1",
    ];
    let path = spec_file("hot.mpt", &specs);
    let options = format!("format=x,file=trace.xml,mpt=@{}", path.display());
    let run = run_java(Some(&options), "Stress", &["3"], Duration::from_secs(180));
    assert!(run.success(), "{}\n{}", run.stdout(), run.stderr());
    assert!(run.stdout().contains("stress done"), "{}", run.stdout());
    assert!(!run.stderr().contains("panicked"), "{}", run.stderr());
    xmllint(&run);
    let elements = read_trace(&run.dir.join("trace.xml"));
    let problems = validate(elements.iter().cloned().map(Ok));
    assert!(problems.is_empty(), "{problems:#?}");
    let by_spec = values_by_spec(&elements);
    let calls = |spec: &str| -> u32 {
        by_spec
            .get(spec)
            .into_iter()
            .flatten()
            .map(|(_, n)| n)
            .sum()
    };
    for spec in &specs[..4] {
        assert!(calls(spec) > 0, "{spec} traced no call");
    }
    assert_eq!(calls(specs[4]), 0);
}
