//! Which calls a specification traces: its method pattern against JVM descriptors, and its
//! variant's rules over the classes the JVM has loaded.

use super::{MptSpec, Variant};

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

    /// Whether a call is traced, by the variant rules of docs/mpt.md: it runs `method` of class
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpt::{parse_line, split_descriptor, MethodPattern};

    fn spec(line: &str) -> MptSpec {
        parse_line(line, 1).unwrap().unwrap()
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
    /// Classes with overrides, covariant returns and bridge methods, as the JVM loads them.
    fn example_classes() -> Vec<ClassShape> {
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
        let classes = example_classes();
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
    fn variants_trace_the_calls_their_rules_name() {
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
