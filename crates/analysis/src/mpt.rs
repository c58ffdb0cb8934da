//! Method parameter tracing's figures from a trace (docs/mpt.md, "Reports"): each methodEntry that carries
//! `<value>`s is a traced call, paired with its methodExit (by ticket on its thread, else by
//! the thread's stack), and its duration, wall clock and CPU, is counted under each value it
//! recorded, in one table per method and specification.

use std::collections::HashMap;
use std::fmt;

use openprof_format::java_names::method_name_from_descriptor;
use openprof_format::mpt_stats::{MptAggregator, MptTable, ValueKey};
use openprof_format::trace::attrs::Seconds;
use openprof_format::trace::reader::TraceReadError;
use openprof_format::trace::{MethodEntry, MethodExit, TraceElement};

/// Why a trace's MPT figures could not be had: the trace is unreadable, or an element that MPT
/// needs lacks something (which element, counted from 1 in the stream, and what).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MptTraceError {
    Read(TraceReadError),
    Element {
        element: usize,
        tag: &'static str,
        message: String,
    },
}

impl fmt::Display for MptTraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MptTraceError::Read(error) => write!(f, "{error}"),
            MptTraceError::Element {
                element,
                tag,
                message,
            } => write!(f, "element {element} <{tag}>: {message}"),
        }
    }
}

impl std::error::Error for MptTraceError {}

/// A trace's ids come stable (`methodId`) or transient (`transientMethodId`): two namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Id {
    Stable(u32),
    Transient(u32),
}

pub(crate) fn id_of(stable: Option<u32>, transient: Option<u32>) -> Option<Id> {
    stable.map(Id::Stable).or(transient.map(Id::Transient))
}

struct MethodInfo {
    class: Option<Id>,
    name: String,
    signature: Option<String>,
}

/// A traced call waiting for its exit: its method, its values by specification, when it began.
struct Call {
    method: String,
    values: Vec<(String, ValueKey)>,
    time: Seconds,
    cpu: Option<Seconds>,
}

/// An entry still open on its thread. Entries without values (other profiles' calls, cpu=times)
/// are kept too: without tickets, exits pair by stack order, which counts them.
struct Open {
    ticket: Option<u128>,
    method: Option<Id>,
    call: Option<Call>,
}

/// Figures of the traced calls, fed one element at a time (a file, a collector's store).
#[derive(Default)]
pub struct MptCollector {
    elements: usize,
    /// Class id → (name, ` [loader N: LoaderClass]` when the trace says).
    classes: HashMap<Id, (String, Option<String>)>,
    methods: HashMap<Id, MethodInfo>,
    /// Open entries per thread (None: an entry that names no thread).
    open: HashMap<Option<Id>, Vec<Open>>,
    aggregator: MptAggregator,
    /// Exits that closed a traced call.
    pub calls: u64,
    /// Exits that matched no open entry (the trace began inside the call, or an element was
    /// lost): skipped.
    pub unmatched_exits: u64,
    /// With [`MptCollector::timing`]: the value whose calls are kept one by one, and them.
    selected: Option<SelectedValue>,
    pub timed_calls: Vec<TimedCall>,
}

/// A traced method's value under one specification, the value as `openprof mpt` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectedValue {
    pub method: String,
    pub spec: String,
    pub value: String,
}

/// One traced call as it ran: when it began (nanoseconds since the Unix epoch), how long it
/// took by the wall clock and by its thread's CPU clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedCall {
    pub start_ns: u64,
    pub wall_ns: u64,
    pub cpu_ns: u64,
}

impl MptCollector {
    pub fn new() -> MptCollector {
        MptCollector::default()
    }

    /// A collector that also keeps, one by one, the calls that recorded `selected`.
    pub fn timing(selected: SelectedValue) -> MptCollector {
        MptCollector {
            selected: Some(selected),
            ..MptCollector::default()
        }
    }

    /// Takes the next element of the stream.
    pub fn add(&mut self, element: &TraceElement) -> Result<(), MptTraceError> {
        self.elements += 1;
        let number = self.elements;
        let fail = |tag: &'static str, message: String| MptTraceError::Element {
            element: number,
            tag,
            message,
        };
        match element {
            TraceElement::ClassDef(class) => {
                if let (Some(id), Some(name)) =
                    (id_of(class.class_id, class.transient_class_id), &class.name)
                {
                    // As the agent names methods in its MPT record: with their loader.
                    let loader = class.class_loader.map(|index| {
                        let name = class.class_loader_name.as_deref().unwrap_or("bootstrap");
                        format!(" [loader {index}: {name}]")
                    });
                    self.classes.insert(id, (name.clone(), loader));
                }
            }
            TraceElement::MethodDef(method) => {
                if let Some(id) = id_of(method.method_id, method.transient_method_id) {
                    self.methods.insert(
                        id,
                        MethodInfo {
                            class: id_of(method.class_id_ref, method.transient_class_id_ref),
                            name: method.name.clone().unwrap_or_else(|| "<unnamed>".into()),
                            signature: method.signature.clone(),
                        },
                    );
                }
            }
            TraceElement::MethodEntry(entry) => {
                let open = self.entry(entry).map_err(|m| fail(MethodEntry::TAG, m))?;
                let thread = id_of(entry.thread_id_ref, entry.transient_thread_id_ref);
                self.open.entry(thread).or_default().push(open);
            }
            TraceElement::MethodExit(exit) => {
                self.exit(exit).map_err(|m| fail(MethodExit::TAG, m))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// `package.Class.method(types)` of a method id, or what is known of it.
    fn method_name(&self, id: Option<Id>) -> String {
        let Some(id) = id else {
            return "<no method id>".into();
        };
        let Some(method) = self.methods.get(&id) else {
            return match id {
                Id::Stable(id) => format!("<method {id}>"),
                Id::Transient(id) => format!("<transient method {id}>"),
            };
        };
        let (class, loader) = match method.class.and_then(|class| self.classes.get(&class)) {
            Some((name, loader)) => (name.clone(), loader.as_deref().unwrap_or_default()),
            None => ("<unknown class>".into(), ""),
        };
        let name = method
            .signature
            .as_deref()
            .and_then(|signature| method_name_from_descriptor(&class, &method.name, signature))
            .unwrap_or_else(|| format!("{class}.{}", method.name));
        format!("{name}{loader}")
    }

    fn entry(&self, entry: &MethodEntry) -> Result<Open, String> {
        let method = id_of(entry.method_id_ref, entry.transient_method_id_ref);
        let ticket = entry.ticket.map(|ticket| ticket.0);
        if entry.content.0.is_empty() {
            return Ok(Open {
                ticket,
                method,
                call: None,
            });
        }
        let mut values = Vec::with_capacity(entry.content.0.len());
        for (index, value) in entry.content.0.iter().enumerate() {
            let missing = |attribute: &str| {
                format!(
                    "<value> {} lacks {attribute}, which method parameter tracing needs",
                    index + 1
                )
            };
            let spec = value
                .reference_name
                .clone()
                .ok_or_else(|| missing("referenceName (the specification)"))?;
            let value_type = value.value_type.ok_or_else(|| missing("type"))?;
            let text = value.value.clone().ok_or_else(|| missing("value"))?;
            values.push((spec, ValueKey::new(value_type, text)));
        }
        let time = entry
            .time
            .ok_or("a traced call's entry lacks its time, which its duration needs")?;
        Ok(Open {
            ticket,
            method,
            call: Some(Call {
                method: self.method_name(method),
                values,
                time,
                cpu: entry.thread_cpu_time,
            }),
        })
    }

    fn exit(&mut self, exit: &MethodExit) -> Result<(), String> {
        let thread = id_of(exit.thread_id_ref, exit.transient_thread_id_ref);
        let method = id_of(exit.method_id_ref, exit.transient_method_id_ref);
        let ticket = exit.ticket.map(|ticket| ticket.0);
        let Some(stack) = self.open.get_mut(&thread) else {
            self.unmatched_exits += 1;
            return Ok(());
        };
        // By ticket when the exit has one; else the innermost entry without a ticket (of the
        // same method, when both name theirs).
        let found = stack.iter().rposition(|open| match ticket {
            Some(ticket) => open.ticket == Some(ticket),
            None => {
                open.ticket.is_none()
                    && (method.is_none() || open.method.is_none() || open.method == method)
            }
        });
        let Some(index) = found else {
            self.unmatched_exits += 1;
            return Ok(());
        };
        let Some(call) = stack.remove(index).call else {
            return Ok(());
        };
        let time = exit
            .time
            .ok_or("a traced call's exit lacks its time, which its duration needs")?;
        let wall = time.as_nanos().saturating_sub(call.time.as_nanos());
        // Without a CPU time at both ends (a JVM without thread CPU time), CPU counts as 0.
        let cpu = match (call.cpu, exit.thread_cpu_time) {
            (Some(start), Some(end)) => end.as_nanos().saturating_sub(start.as_nanos()),
            _ => 0,
        };
        let clamp = |nanos: u128| u64::try_from(nanos).unwrap_or(u64::MAX);
        if let Some(selected) = &self.selected {
            let chosen = call.method == selected.method
                && call.values.iter().any(|(spec, key)| {
                    *spec == selected.spec
                        && openprof_format::hprof_text::mpt::format_value(key) == selected.value
                });
            if chosen {
                self.timed_calls.push(TimedCall {
                    start_ns: clamp(call.time.as_nanos()),
                    wall_ns: clamp(wall),
                    cpu_ns: clamp(cpu),
                });
            }
        }
        for (spec, key) in call.values {
            self.aggregator
                .record(&call.method, &spec, key, clamp(wall), clamp(cpu));
        }
        self.calls += 1;
        Ok(())
    }

    /// The tables, by method then specification, rows ranked slowest first; the calls still
    /// open count as unfinished.
    pub fn finish(mut self) -> Vec<MptTable> {
        for stack in self.open.into_values() {
            for call in stack.into_iter().filter_map(|open| open.call) {
                for (spec, _) in &call.values {
                    self.aggregator.unfinished(&call.method, spec);
                }
            }
        }
        self.aggregator.finish()
    }
}

/// The MPT tables of a trace, as [`openprof_format::trace::reader::read_all`] gives it: a
/// TRACE document or a stream of fragments. Empty when no entry carries values.
pub fn mpt_from_trace(
    elements: impl IntoIterator<Item = Result<TraceElement, TraceReadError>>,
) -> Result<Vec<MptTable>, MptTraceError> {
    let mut collector = MptCollector::new();
    for element in elements {
        collector.add(&element.map_err(MptTraceError::Read)?)?;
    }
    Ok(collector.finish())
}

/// The calls of a trace that recorded `selected`, in the order they ended.
pub fn mpt_calls_from_trace(
    elements: impl IntoIterator<Item = Result<TraceElement, TraceReadError>>,
    selected: SelectedValue,
) -> Result<Vec<TimedCall>, MptTraceError> {
    let mut collector = MptCollector::timing(selected);
    for element in elements {
        collector.add(&element.map_err(MptTraceError::Read)?)?;
    }
    Ok(collector.timed_calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::mpt_stats::{ValueStats, ValueType};
    use openprof_format::trace::reader::read_all;

    const MS: u64 = 1_000_000;
    /// The epoch of the hand-built traces' times, in seconds.
    const START: u64 = 1_700_000_000;

    fn seconds(nanos: u64) -> String {
        format!(
            "{}.{:09}",
            START + nanos / 1_000_000_000,
            nanos % 1_000_000_000
        )
    }

    /// The definitions of two methods: 1 is `example.Slow.work(int)`, 2
    /// `example.Slow.name(java.lang.String[],long)`, 3 `example.Other.plain()`.
    const DEFS: &str = r#"<classDef classId="1" name="example.Slow"/>
<classDef classId="2" name="example.Other"/>
<methodDef name="work" signature="(I)V" classIdRef="1" methodId="1"/>
<methodDef name="name" signature="([Ljava/lang/String;J)Ljava/lang/String;" classIdRef="1" methodId="2"/>
<methodDef name="plain" signature="()V" classIdRef="2" methodId="3"/>
"#;

    /// A methodEntry at `at_ms` on `thread`, with CPU time `cpu_ms`; `ticket` 0 for none; values
    /// as (spec, type, value).
    fn entry(
        thread: u32,
        at_ms: u64,
        method: u32,
        ticket: u32,
        cpu_ms: u64,
        values: &[(&str, &str, &str)],
    ) -> String {
        let ticket = if ticket == 0 {
            String::new()
        } else {
            format!(r#" ticket="{ticket}""#)
        };
        let mut out = format!(
            r#"<methodEntry threadIdRef="{thread}" time="{}" methodIdRef="{method}"{ticket} threadCpuTime="{}""#,
            seconds(at_ms * MS),
            seconds(cpu_ms * MS)
        );
        if values.is_empty() {
            out.push_str("/>\n");
            return out;
        }
        out.push('>');
        for (index, (spec, value_type, value)) in values.iter().enumerate() {
            out.push_str(&format!(
                r#"<value parameterName="{}" referenceName="{spec}" type="{value_type}" value="{value}"/>"#,
                index + 1
            ));
        }
        out.push_str("</methodEntry>\n");
        out
    }

    fn exit(thread: u32, at_ms: u64, method: u32, ticket: u32, cpu_ms: u64) -> String {
        let ticket = if ticket == 0 {
            String::new()
        } else {
            format!(r#" ticket="{ticket}""#)
        };
        format!(
            r#"<methodExit threadIdRef="{thread}" time="{}"{ticket} threadCpuTime="{}" methodIdRef="{method}"/>
"#,
            seconds(at_ms * MS),
            seconds(cpu_ms * MS)
        )
    }

    fn tables_of(trace: &str) -> Vec<MptTable> {
        mpt_from_trace(read_all(trace.as_bytes())).unwrap()
    }

    const WORK: &str = "Slow.work(int) 1";

    fn row(table: &MptTable, value: &str) -> ValueStats {
        table
            .rows
            .iter()
            .find(|row| row.key.value == value)
            .unwrap_or_else(|| panic!("no row {value} in {table:?}"))
            .clone()
    }

    #[test]
    fn calls_pair_by_ticket_through_recursion_and_interleaved_threads() {
        let int = |value| [(WORK, "int", value)];
        // Thread 1: work(1) from 0 to 100 ms, calling work(2) recursively from 10 to 30 ms.
        // Thread 2: work(1) from 5 to 55 ms, under the same ticket as thread 1's outer call.
        let trace = [
            DEFS.to_string(),
            entry(1, 0, 1, 1, 0, &int("1")),
            entry(1, 10, 1, 2, 1, &int("2")),
            entry(2, 5, 1, 1, 0, &int("1")),
            exit(1, 30, 1, 2, 5),
            exit(2, 55, 1, 1, 50),
            exit(1, 100, 1, 1, 40),
        ]
        .concat();
        let tables = tables_of(&trace);
        assert_eq!(tables.len(), 1);
        let table = &tables[0];
        assert_eq!(
            (table.method.as_str(), table.spec.as_str()),
            ("example.Slow.work(int)", WORK)
        );
        assert_eq!(table.unfinished, 0);
        let one = row(table, "1");
        assert_eq!(one.key.value_type, ValueType::Int);
        assert_eq!(
            (one.calls, one.wall_total_ns, one.wall_max_ns),
            (2, 150 * MS, 100 * MS)
        );
        assert_eq!((one.cpu_total_ns, one.cpu_max_ns), (90 * MS, 50 * MS));
        let two = row(table, "2");
        assert_eq!(
            (two.calls, two.wall_total_ns, two.cpu_total_ns),
            (1, 20 * MS, 4 * MS)
        );
        // Ranked: value 1's mean (75 ms) before value 2's (20 ms).
        assert_eq!(table.rows[0].key.value, "1");
    }

    #[test]
    fn a_values_calls_are_kept_one_by_one_with_their_times() {
        let int = |value| [(WORK, "int", value)];
        let trace = [
            DEFS.to_string(),
            entry(1, 0, 1, 1, 0, &int("1")),
            exit(1, 100, 1, 1, 40),
            entry(1, 200, 1, 2, 40, &int("2")),
            exit(1, 210, 1, 2, 41),
            entry(1, 300, 1, 3, 41, &int("1")),
            exit(1, 330, 1, 3, 51),
        ]
        .concat();
        let selected = SelectedValue {
            method: "example.Slow.work(int)".into(),
            spec: WORK.into(),
            value: "1".into(),
        };
        let calls = mpt_calls_from_trace(read_all(trace.as_bytes()), selected).unwrap();
        let start = START * 1_000_000_000;
        assert_eq!(
            calls,
            vec![
                TimedCall {
                    start_ns: start,
                    wall_ns: 100 * MS,
                    cpu_ns: 40 * MS
                },
                TimedCall {
                    start_ns: start + 300 * MS,
                    wall_ns: 30 * MS,
                    cpu_ns: 10 * MS
                },
            ]
        );
    }

    #[test]
    fn entries_without_values_and_their_exits_are_not_calls() {
        let traced = [(WORK, "int", "7")];
        // With tickets: other profiles' entries and exits around and inside the traced call.
        let with_tickets = [
            DEFS.to_string(),
            entry(1, 0, 3, 10, 0, &[]),
            entry(1, 1, 1, 11, 0, &traced),
            entry(1, 2, 3, 12, 0, &[]),
            exit(1, 3, 3, 12, 0),
            exit(1, 9, 1, 11, 4),
            exit(1, 20, 3, 10, 0),
        ]
        .concat();
        // Without tickets: the same, paired by each thread's stack.
        let stacked = with_tickets.replace(r#" ticket="1"#, r#" x=""#);
        assert!(!stacked.contains("ticket"));
        for trace in [with_tickets, stacked] {
            let tables = tables_of(&trace);
            assert_eq!(tables.len(), 1, "{tables:?}");
            let seven = row(&tables[0], "7");
            assert_eq!(
                (seven.calls, seven.wall_total_ns, seven.cpu_total_ns),
                (1, 8 * MS, 4 * MS)
            );
        }
        let none = [
            DEFS.to_string(),
            entry(1, 0, 3, 1, 0, &[]),
            exit(1, 5, 3, 1, 0),
        ]
        .concat();
        assert!(tables_of(&none).is_empty());
    }

    #[test]
    fn calls_never_exited_are_unfinished() {
        let trace = [
            DEFS.to_string(),
            entry(1, 0, 1, 1, 0, &[(WORK, "int", "5")]),
            exit(1, 10, 1, 1, 0),
            entry(1, 20, 1, 2, 0, &[(WORK, "int", "5")]),
            entry(2, 20, 1, 3, 0, &[(WORK, "int", "6")]),
            // An exit whose entry came before the trace began.
            exit(3, 30, 1, 9, 0),
        ]
        .concat();
        let mut collector = MptCollector::new();
        for element in read_all(trace.as_bytes()) {
            collector.add(&element.unwrap()).unwrap();
        }
        assert_eq!((collector.calls, collector.unmatched_exits), (1, 1));
        let tables = collector.finish();
        assert_eq!(tables[0].unfinished, 2);
        assert_eq!(tables[0].rows.len(), 1, "unfinished calls are in no row");
        assert_eq!(row(&tables[0], "5").calls, 1);
    }

    #[test]
    fn each_value_of_a_call_counts_in_its_specifications_table() {
        let length = "Slow.name(String[],long) 1 length";
        let first = "Slow.name(String[],long) 1 array_element:0";
        let id = "Slow.name(String[],long) 1 id";
        let trace = [
            DEFS.to_string(),
            entry(
                1,
                0,
                2,
                1,
                0,
                &[
                    (length, "int", "2"),
                    (first, "string", "a b"),
                    (id, "objectId", "17"),
                ],
            ),
            exit(1, 30, 2, 1, 3),
            entry(
                1,
                40,
                2,
                2,
                3,
                &[
                    (length, "int", "0"),
                    (first, "error", "InvalidIndex"),
                    (id, "objectId", "18"),
                ],
            ),
            exit(1, 50, 2, 2, 4),
        ]
        .concat();
        let tables = tables_of(&trace);
        let specs: Vec<&str> = tables.iter().map(|table| table.spec.as_str()).collect();
        assert_eq!(specs, [first, id, length]);
        for table in &tables {
            assert_eq!(table.method, "example.Slow.name(java.lang.String[],long)");
            assert_eq!(table.calls(), 2);
            assert_eq!(table.rows.len(), 2);
            assert_eq!(table.rows[0].wall_total_ns, 30 * MS, "the slow call first");
        }
        assert_eq!(
            tables[0].rows[0].key,
            ValueKey::new(ValueType::String, "a b")
        );
        assert_eq!(
            tables[0].rows[1].key,
            ValueKey::new(ValueType::Error, "InvalidIndex")
        );
    }

    #[test]
    fn a_document_and_fragments_give_the_same_tables() {
        let body = [
            DEFS.to_string(),
            entry(1, 0, 1, 1, 0, &[(WORK, "int", "3")]),
            exit(1, 10, 1, 1, 0),
        ]
        .concat();
        let document =
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<TRACE>\n{body}</TRACE>\n");
        assert_eq!(tables_of(&document), tables_of(&body));
        assert_eq!(tables_of(&body)[0].rows[0].calls, 1);
    }

    #[test]
    fn undefined_methods_are_named_by_id() {
        let trace = [
            entry(1, 0, 42, 1, 0, &[("X.f(int) 1", "int", "1")]),
            exit(1, 1, 42, 1, 0),
        ]
        .concat();
        assert_eq!(tables_of(&trace)[0].method, "<method 42>");
    }

    #[test]
    fn faults_name_the_element() {
        let no_spec = format!(
            "{DEFS}{}",
            r#"<methodEntry threadIdRef="1" time="1.0" methodIdRef="1"><value type="int" value="1"/></methodEntry>"#
        );
        let error = mpt_from_trace(read_all(no_spec.as_bytes())).unwrap_err();
        assert_eq!(
            error.to_string(),
            "element 6 <methodEntry>: <value> 1 lacks referenceName (the specification), which method parameter tracing needs"
        );
        let no_time = format!(
            "{DEFS}{}",
            r#"<methodEntry threadIdRef="1" ticket="1"><value referenceName="A.f(int) 1" type="int" value="1"/></methodEntry>"#
        );
        let error = mpt_from_trace(read_all(no_time.as_bytes())).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("element 6 <methodEntry>: a traced call's entry lacks its time"),
            "{error}"
        );
        let broken = format!("{DEFS}<methodEntry time=\"x\"/>");
        let error = mpt_from_trace(read_all(broken.as_bytes())).unwrap_err();
        assert!(matches!(error, MptTraceError::Read(_)), "{error}");
        assert!(
            error.to_string().contains("'x' is not seconds.fraction"),
            "{error}"
        );
    }
}
