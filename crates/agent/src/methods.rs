//! What the agent knows of each method it met in a stack: names, source file and line table,
//! looked up through JVMTI once per jmethodID and kept.

use std::collections::HashMap;
use std::sync::Arc;

use openprof_format::hprof_text::{Frame, FrameLine};
use openprof_format::java_names::class_name_from_signature;

use crate::jvmti::{jmethodID, Jvmti};

/// Where in a method a raw frame was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// A bytecode index.
    Bytecode(i64),
    Native,
    Unknown,
}

impl Location {
    /// A location as JVMTI's stack traces give it: a bytecode index, or -1 in a native method.
    pub fn of_jvmti(location: i64) -> Location {
        if location >= 0 {
            Location::Bytecode(location)
        } else {
            Location::Native
        }
    }
}

#[derive(Debug)]
pub struct MethodInfo {
    pub class_name: String,
    pub method_name: String,
    pub source_file: Option<String>,
    /// (first bytecode index, line), sorted; `None` for native and line-less methods.
    lines: Option<Vec<(i64, u32)>>,
    /// Whether this is a carrier thread's frame of running a virtual thread's continuation
    /// (JDK 21 and later): the frames above the first such are the virtual thread's.
    pub continuation_entry: bool,
}

impl MethodInfo {
    fn unknown() -> MethodInfo {
        MethodInfo {
            class_name: "<Unknown Class>".into(),
            method_name: "<Unknown Method>".into(),
            source_file: None,
            lines: None,
            continuation_entry: false,
        }
    }

    /// The source line of a location, as HPROF prints it.
    pub fn line_of(&self, location: Location) -> FrameLine {
        match (location, &self.lines) {
            (Location::Native, _) => FrameLine::Native,
            (Location::Bytecode(index), Some(lines)) => {
                let at = lines.partition_point(|&(start, _)| start <= index);
                match at.checked_sub(1).map(|at| lines[at].1) {
                    Some(line) if line > 0 => FrameLine::Line(line),
                    _ => FrameLine::Unknown,
                }
            }
            _ => FrameLine::Unknown,
        }
    }

    pub fn frame(&self, line: FrameLine) -> Frame {
        Frame {
            class_name: self.class_name.clone(),
            method_name: self.method_name.clone(),
            source_file: self.source_file.clone(),
            line,
        }
    }
}

/// Methods whose names are kept at most. Past them the cache starts empty again: a JVM that
/// loads classes without end (generated code, class loaders thrown away) must not grow the
/// agent's memory without end, and a method still sampled is looked up again.
const METHODS_KEPT: usize = 20_000;

#[derive(Default)]
pub struct Methods {
    by_id: HashMap<usize, Arc<MethodInfo>>,
}

impl Methods {
    /// The method behind a jmethodID, looked up on first use. A method whose class is gone is
    /// named `<Unknown Class>.<Unknown Method>` rather than failing the sample.
    pub fn get(&mut self, jvmti: Jvmti, method: jmethodID) -> Arc<MethodInfo> {
        if self.by_id.len() >= METHODS_KEPT && !self.by_id.contains_key(&(method as usize)) {
            self.by_id = HashMap::new();
        }
        self.by_id
            .entry(method as usize)
            .or_insert_with(|| Arc::new(look_up(jvmti, method)))
            .clone()
    }
}

/// The carrier's methods that run a virtual thread's continuation, innermost first: where it is
/// entered, and its callers. A walk that comes back from a stack thawed in part may skip the
/// entry and go on at a caller (AsyncGetCallTrace does), so each marks the boundary.
const CARRIER_METHODS: [(&str, &str); 3] = [
    ("jdk.internal.vm.Continuation", "enterSpecial"),
    ("jdk.internal.vm.Continuation", "run"),
    ("java.lang.VirtualThread", "runContinuation"),
];

fn look_up(jvmti: Jvmti, method: jmethodID) -> MethodInfo {
    if method.is_null() || !crate::vm_walker::plausible_method_id(method) {
        return MethodInfo::unknown();
    }
    let Ok((method_name, _signature)) = jvmti.method_name(method) else {
        return MethodInfo::unknown();
    };
    let class = jvmti.method_declaring_class(method).ok();
    let class_name = class
        .and_then(|class| jvmti.class_signature(class).ok())
        .map(|signature| class_name_from_signature(&signature))
        .unwrap_or_else(|| "<Unknown Class>".into());
    MethodInfo {
        continuation_entry: CARRIER_METHODS
            .iter()
            .any(|(class, method)| class_name == *class && method_name == *method),
        class_name,
        method_name,
        source_file: class.and_then(|class| jvmti.source_file_name(class)),
        lines: jvmti.line_number_table(method),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytecode_indexes_map_to_the_line_that_covers_them() {
        let info = MethodInfo {
            lines: Some(vec![(0, 10), (5, 11), (12, 14)]),
            ..MethodInfo::unknown()
        };
        assert_eq!(info.line_of(Location::Bytecode(0)), FrameLine::Line(10));
        assert_eq!(info.line_of(Location::Bytecode(6)), FrameLine::Line(11));
        assert_eq!(info.line_of(Location::Bytecode(99)), FrameLine::Line(14));
        assert_eq!(info.line_of(Location::Native), FrameLine::Native);
        assert_eq!(info.line_of(Location::Unknown), FrameLine::Unknown);
        assert_eq!(
            MethodInfo::unknown().line_of(Location::Bytecode(3)),
            FrameLine::Unknown
        );
    }
}
