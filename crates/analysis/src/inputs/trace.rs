//! Our traces (format=x) as the profile model: method entries and exits paired into calls
//! (`Call` spans on their thread's timeline, and `calls` and `cpu_time` on the stack of traced
//! methods open at the entry), monitor waits and contended enters, exceptions thrown and garbage
//! collections as spans, the threads' names, the classes' loaders, and method parameter
//! tracing's tables (`crate::mpt`). Times count from the trace's start.

use std::collections::HashMap;
use std::io::{BufRead, Read};

use openprof_format::trace::reader::read_all;
use openprof_format::trace::TraceElement;

use super::InputError;
use crate::mpt::{id_of, Id, MptCollector};
use crate::profile::{
    Event, Frame, FrameId, FrameKind, Profile, Sample, Span, SpanKind, StackId, ThreadId,
};

/// The name errors give the format.
const FORMAT: &str = "trace (format=x)";

/// The UTF-8 byte order mark some editors put first, which the trace reader does not take.
const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

/// Reads a trace, reporting progress in bytes read.
pub fn from_trace(
    mut input: impl BufRead,
    file: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<Profile, InputError> {
    let io_error = |source| InputError::Io {
        file: file.to_string(),
        source,
    };
    let skipped = if input
        .fill_buf()
        .map_err(io_error)?
        .starts_with(BYTE_ORDER_MARK)
    {
        input.consume(BYTE_ORDER_MARK.len());
        BYTE_ORDER_MARK.len() as u64
    } else {
        0
    };
    let counted = CountingReader {
        input,
        read: skipped,
        progress,
    };
    let mut builder = Builder::default();
    // Parameter tracing's calls are paired and timed as `openprof mpt` does, in the same pass.
    let mut mpt = MptCollector::new();
    let malformed = |message: String| InputError::Malformed {
        file: file.to_string(),
        format: FORMAT,
        message,
    };
    for (index, element) in read_all(counted).enumerate() {
        let element = element.map_err(|error| {
            malformed(format!(
                "element {}: byte {}: {}",
                index + 1,
                error.offset + skipped,
                error.message
            ))
        })?;
        mpt.add(&element)
            .map_err(|error| malformed(error.to_string()))?;
        builder.add(&element);
    }
    let mut profile = builder.finish(file);
    profile.mpt = mpt.finish();
    Ok(profile)
}

struct CountingReader<'a, R> {
    input: R,
    read: u64,
    progress: &'a mut dyn FnMut(u64),
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.input.read(buf)?;
        self.read += read as u64;
        (self.progress)(self.read);
        Ok(read)
    }
}

/// A thread as the trace names it; `None` for elements that name none.
type ThreadKey = Option<Id>;

/// An entry still waiting for its exit.
struct Open {
    ticket: Option<u128>,
    method: Option<Id>,
    /// Where the call is in `Builder::calls`.
    call: usize,
    cpu_start: Option<u128>,
    /// The CPU time of the calls made from this one that have ended: not its own.
    children_cpu: u128,
}

/// A call, ended or not: its thread, its method and the call it was made from (an earlier one,
/// so that a stack costs one index per call), its times (nanoseconds since the epoch) and its
/// own CPU time once it has ended.
struct Call {
    thread: ThreadKey,
    method: Option<Id>,
    caller: Option<usize>,
    start: Option<u128>,
    end: Option<u128>,
    self_cpu: Option<u128>,
}

/// A monitor wait, contended enter or collection, from its start to its end if seen.
struct Interval {
    thread: ThreadKey,
    kind: SpanKind,
    class: Option<Id>,
    start: u128,
    end: Option<u128>,
}

/// Collects what a profile needs from the elements, in the order the trace gives them: method
/// and class definitions may come after the calls that use them, so names are resolved at the
/// end.
#[derive(Default)]
struct Builder {
    classes: HashMap<Id, (String, Option<String>)>,
    methods: HashMap<Id, (Option<Id>, String)>,
    /// Threads in the order first met, with their names once known.
    threads: Vec<(Id, String)>,
    thread_index: HashMap<Id, usize>,
    open: HashMap<ThreadKey, Vec<Open>>,
    calls: Vec<Call>,
    intervals: Vec<Interval>,
    /// Where each thread's open wait and contended enter are in `intervals`.
    waiting: HashMap<(ThreadKey, bool), usize>,
    gc: Option<usize>,
    /// Exceptions thrown: thread, method, time.
    throws: Vec<(ThreadKey, Option<Id>, u128)>,
    /// The time of each thread's latest throw.
    last_throw: HashMap<ThreadKey, u128>,
    /// Each class's loader, as the class definitions give it: (class, `INDEX: LOADER`).
    loaders: Vec<(String, String)>,
    trace_start: Option<u128>,
    trace_end: Option<u128>,
    earliest: Option<u128>,
    latest: Option<u128>,
}

impl Builder {
    fn saw(&mut self, time: Option<u128>) -> Option<u128> {
        if let Some(time) = time {
            self.earliest = Some(self.earliest.map_or(time, |t| t.min(time)));
            self.latest = Some(self.latest.map_or(time, |t| t.max(time)));
        }
        time
    }

    fn thread(&mut self, id: ThreadKey) -> ThreadKey {
        if let Some(id) = id {
            if let std::collections::hash_map::Entry::Vacant(entry) = self.thread_index.entry(id) {
                entry.insert(self.threads.len());
                self.threads.push((id, String::new()));
            }
        }
        id
    }

    fn add(&mut self, element: &TraceElement) {
        match element {
            TraceElement::TraceStart(start) => {
                self.trace_start = self.saw(Some(start.time.as_nanos()));
            }
            TraceElement::TraceEnd(end) => {
                self.trace_end = self.saw(Some(end.time.as_nanos()));
            }
            TraceElement::ThreadStart(start) => {
                if let Some(id) = self.thread(id_of(start.thread_id, start.transient_thread_id)) {
                    let name = start.thread_name.clone().unwrap_or_default();
                    self.threads[self.thread_index[&id]].1 = name;
                }
                self.saw(start.time.map(|t| t.as_nanos()));
            }
            TraceElement::ClassDef(class) => {
                if let (Some(id), Some(name)) =
                    (id_of(class.class_id, class.transient_class_id), &class.name)
                {
                    self.classes
                        .insert(id, (name.clone(), class.source_name.clone()));
                    if let Some(index) = class.class_loader {
                        let loader = class.class_loader_name.as_deref().unwrap_or("bootstrap");
                        self.loaders
                            .push((name.clone(), format!("{index}: {loader}")));
                    }
                }
            }
            TraceElement::MethodDef(method) => {
                if let Some(id) = id_of(method.method_id, method.transient_method_id) {
                    let class = id_of(method.class_id_ref, method.transient_class_id_ref);
                    let name = method.name.clone().unwrap_or_else(|| "<unnamed>".into());
                    self.methods.insert(id, (class, name));
                }
            }
            TraceElement::MethodEntry(entry) => {
                let thread = self.thread(id_of(entry.thread_id_ref, entry.transient_thread_id_ref));
                let method = id_of(entry.method_id_ref, entry.transient_method_id_ref);
                let start = self.saw(entry.time.map(|t| t.as_nanos()));
                let open = self.open.entry(thread).or_default();
                let caller = open.last().map(|open| open.call);
                open.push(Open {
                    ticket: entry.ticket.map(|ticket| ticket.0),
                    method,
                    call: self.calls.len(),
                    cpu_start: entry.thread_cpu_time.map(|t| t.as_nanos()),
                    children_cpu: 0,
                });
                self.calls.push(Call {
                    thread,
                    method,
                    caller,
                    start,
                    end: None,
                    self_cpu: None,
                });
            }
            TraceElement::MethodExit(exit) => {
                let thread = id_of(exit.thread_id_ref, exit.transient_thread_id_ref);
                let method = id_of(exit.method_id_ref, exit.transient_method_id_ref);
                let ticket = exit.ticket.map(|ticket| ticket.0);
                let end = self.saw(exit.time.map(|t| t.as_nanos()));
                let Some(open) = self.open.get_mut(&thread) else {
                    // The trace began inside the call: nothing to pair it with.
                    return;
                };
                // By ticket when the exit has one; else the innermost entry without a ticket
                // (of the same method, when both name theirs).
                let found = open.iter().rposition(|open| match ticket {
                    Some(ticket) => open.ticket == Some(ticket),
                    None => {
                        open.ticket.is_none()
                            && (method.is_none() || open.method.is_none() || open.method == method)
                    }
                });
                let Some(index) = found else {
                    return;
                };
                let ended = open.remove(index);
                let cpu = match (ended.cpu_start, exit.thread_cpu_time) {
                    (Some(start), Some(end)) => Some(end.as_nanos().saturating_sub(start)),
                    _ => None,
                };
                if let (Some(cpu), Some(caller)) = (cpu, index.checked_sub(1)) {
                    open[caller].children_cpu += cpu;
                }
                let call = &mut self.calls[ended.call];
                call.end = end;
                call.self_cpu = cpu.map(|cpu| cpu.saturating_sub(ended.children_cpu));
            }
            TraceElement::MonitorContendedEnter(enter) => {
                let thread = self.thread(id_of(enter.thread_id_ref, enter.transient_thread_id_ref));
                let time = self.saw(enter.time.map(|t| t.as_nanos()));
                self.begin(thread, SpanKind::MonitorBlocked, enter.class_id_ref, time);
            }
            TraceElement::MonitorContendedEntered(entered) => {
                let thread = id_of(entered.thread_id_ref, entered.transient_thread_id_ref);
                let time = self.saw(entered.time.map(|t| t.as_nanos()));
                self.end(thread, false, time);
            }
            TraceElement::MonitorWait(wait) => {
                let thread = self.thread(id_of(wait.thread_id_ref, wait.transient_thread_id_ref));
                let time = self.saw(wait.time.map(|t| t.as_nanos()));
                self.begin(thread, SpanKind::MonitorWait, wait.class_id_ref, time);
            }
            TraceElement::MonitorWaited(waited) => {
                let thread = id_of(waited.thread_id_ref, waited.transient_thread_id_ref);
                let time = self.saw(waited.time.map(|t| t.as_nanos()));
                self.end(thread, true, time);
            }
            TraceElement::GcStart(start) => {
                if let Some(start) = self.saw(start.time.map(|t| t.as_nanos())) {
                    self.gc = Some(self.intervals.len());
                    self.intervals.push(Interval {
                        thread: None,
                        kind: SpanKind::Gc,
                        class: None,
                        start,
                        end: None,
                    });
                }
            }
            TraceElement::GcFinish(finish) => {
                let time = self.saw(finish.time.map(|t| t.as_nanos()));
                if let (Some(index), Some(time)) = (self.gc.take(), time) {
                    self.intervals[index].end = Some(time);
                }
            }
            TraceElement::Throw(throw) => {
                let thread = self.thread(id_of(throw.thread_id_ref, throw.transient_thread_id_ref));
                let method = id_of(throw.method_id_ref, throw.transient_method_id_ref);
                let Some(time) = self.saw(throw.time.map(|t| t.as_nanos())) else {
                    return;
                };
                // An exception gives a throw for each frame it unwinds, all at the time it
                // was thrown: one instant, at the method that threw it.
                if self.last_throw.insert(thread, time) != Some(time) {
                    self.throws.push((thread, method, time));
                }
            }
            TraceElement::ThreadEnd(end) => {
                self.saw(end.time.map(|t| t.as_nanos()));
            }
            _ => {}
        }
    }

    fn begin(&mut self, thread: ThreadKey, kind: SpanKind, class: Option<u32>, time: Option<u128>) {
        let Some(start) = time else {
            return;
        };
        let waiting = kind == SpanKind::MonitorWait;
        self.waiting.insert((thread, waiting), self.intervals.len());
        self.intervals.push(Interval {
            thread,
            kind,
            class: class.map(Id::Stable),
            start,
            end: None,
        });
    }

    fn end(&mut self, thread: ThreadKey, waiting: bool, time: Option<u128>) {
        if let (Some(index), Some(time)) = (self.waiting.remove(&(thread, waiting)), time) {
            self.intervals[index].end = Some(time);
        }
    }

    fn method_frame(&self, method: Option<Id>) -> Frame {
        let Some(id) = method else {
            return Frame::marker("[no method id]");
        };
        let Some((class, name)) = self.methods.get(&id) else {
            return Frame::marker(match id {
                Id::Stable(id) => format!("[method {id}]"),
                Id::Transient(id) => format!("[transient method {id}]"),
            });
        };
        match class.and_then(|class| self.classes.get(&class)) {
            Some((class, source)) => Frame {
                name: format!("{class}.{name}"),
                file: source.clone(),
                line: None,
                kind: FrameKind::Java,
            },
            None => Frame::java(format!("<unknown class>.{name}")),
        }
    }

    fn finish(self, file: &str) -> Profile {
        let mut profile = Profile::new(file);
        let base = self.trace_start.or(self.earliest).unwrap_or(0);
        // Calls and waits still open when the trace ended last until its end.
        let last = self.trace_end.or(self.latest).unwrap_or(base).max(base);
        let since = |time: u128| u64::try_from(time.saturating_sub(base)).unwrap_or(u64::MAX);
        profile.start_epoch_ns = self
            .trace_start
            .or(self.earliest)
            .and_then(|start| u64::try_from(start).ok());
        profile.duration_ns = Some(since(last));
        for (class, loader) in &self.loaders {
            profile.add_class_loader(class, loader);
        }

        let thread_number = |id: Id| match id {
            Id::Stable(id) => u64::from(id),
            Id::Transient(id) => 1 << 32 | u64::from(id),
        };
        // Registered in the order met, so that a thread's index here is its id in the profile.
        for (id, name) in &self.threads {
            profile.thread_id(thread_number(*id), name);
        }
        let threads = |profile: &mut Profile, key: ThreadKey| {
            key.map(|id| match self.thread_index.get(&id) {
                Some(index) => *index as ThreadId,
                None => profile.thread_id(thread_number(id), ""),
            })
        };

        let mut frames: HashMap<Option<Id>, FrameId> = HashMap::new();
        let mut frame_of = |profile: &mut Profile, method: Option<Id>| {
            *frames
                .entry(method)
                .or_insert_with(|| profile.frame_id(self.method_frame(method)))
        };
        // Each call's stack is its caller's (an earlier call's) and its own method.
        let mut stacks: Vec<StackId> = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            let thread = threads(&mut profile, call.thread);
            let frame = frame_of(&mut profile, call.method);
            let mut ids: Vec<FrameId> = match call.caller {
                Some(caller) => profile.stack(stacks[caller]).to_vec(),
                None => Vec::new(),
            };
            ids.push(frame);
            let stack = profile.stack_id(&ids);
            stacks.push(stack);
            let time_ns = call.start.map(since);
            profile.add_sample(Sample {
                stack,
                event: Event::Calls,
                value: 1,
                count: 1,
                thread,
                time_ns,
                labels: Vec::new(),
            });
            if let Some(cpu) = call.self_cpu {
                profile.add_sample(Sample {
                    stack,
                    event: Event::CpuTime,
                    value: u64::try_from(cpu).unwrap_or(u64::MAX),
                    count: 1,
                    thread,
                    time_ns,
                    labels: Vec::new(),
                });
            }
            if let Some(start) = call.start {
                let end = call.end.unwrap_or(last).max(start);
                profile.spans.push(Span {
                    thread,
                    frame,
                    kind: SpanKind::Call,
                    start_ns: since(start),
                    end_ns: since(end),
                });
            }
        }
        for interval in &self.intervals {
            let thread = threads(&mut profile, interval.thread);
            let name = match interval.kind {
                SpanKind::Gc => "GC".to_string(),
                _ => match interval.class.and_then(|class| self.classes.get(&class)) {
                    Some((class, _)) => class.clone(),
                    None => "a monitor".to_string(),
                },
            };
            let frame = profile.frame_id(Frame::marker(name));
            let end = interval.end.unwrap_or(last).max(interval.start);
            profile.spans.push(Span {
                thread,
                frame,
                kind: interval.kind,
                start_ns: since(interval.start),
                end_ns: since(end),
            });
        }
        for (thread, method, time) in &self.throws {
            let thread = threads(&mut profile, *thread);
            let frame = frame_of(&mut profile, *method);
            profile.spans.push(Span {
                thread,
                frame,
                kind: SpanKind::Exception,
                start_ns: since(*time),
                end_ns: since(*time),
            });
        }
        profile
            .spans
            .sort_by_key(|span| (span.thread, span.start_ns, std::cmp::Reverse(span.end_ns)));
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{sniff, InputKind};

    fn read(trace: &str) -> Result<Profile, InputError> {
        from_trace(trace.as_bytes(), "test.xml", &mut |_| {})
    }

    const DEFS: &str = r#"<traceStart traceId="c3f832e9-07c2-4593-9e18-28dbe06bd16b" agentIdRef="865ad9f8-61fa-48a5-9d88-50cdf359f995" time="100.000000000"/>
<threadStart threadId="1" time="100.000000000" threadName="main"/>
<classDef classId="1" name="A" sourceName="A.java"/>
<classDef classId="2" name="java.lang.Object"/>
<methodDef name="outer" classIdRef="1" methodId="1"/>
<methodDef name="inner" classIdRef="1" methodId="2"/>
"#;

    fn entry(method: u32, ticket: u32, ms: u64, cpu_ms: u64) -> String {
        format!(
            r#"<methodEntry threadIdRef="1" time="100.{:09}" methodIdRef="{method}" ticket="{ticket}" threadCpuTime="0.{:09}"/>"#,
            ms * 1_000_000,
            cpu_ms * 1_000_000
        )
    }

    fn exit(method: u32, ticket: u32, ms: u64, cpu_ms: u64) -> String {
        format!(
            r#"<methodExit threadIdRef="1" time="100.{:09}" ticket="{ticket}" threadCpuTime="0.{:09}" methodIdRef="{method}"/>"#,
            ms * 1_000_000,
            cpu_ms * 1_000_000
        )
    }

    #[test]
    fn calls_become_spans_calls_and_own_cpu_time() {
        // outer 0..100 ms (CPU 0..60), inner twice inside it, 10..30 (CPU 10..30) and 40..50
        // (CPU 40..45); a wait, a GC and an exception.
        let trace = format!(
            "<TRACE>\n{DEFS}{}{}{}{}{}\n{}\n{}\n{}\n{}\n{}{}\n</TRACE>\n",
            entry(1, 1, 0, 0),
            entry(2, 2, 10, 10),
            exit(2, 2, 30, 30),
            entry(2, 3, 40, 40),
            exit(2, 3, 50, 45),
            r#"<monitorWait threadIdRef="1" time="100.060000000" classIdRef="2" timeout="0"/>"#,
            r#"<monitorWaited threadIdRef="1" time="100.070000000" classIdRef="2"/>"#,
            r#"<gcStart time="100.080000000"/><gcFinish time="100.085000000"/>"#,
            r#"<throw threadIdRef="1" time="100.090000000" objIdRef="-Unavailable-" methodIdRef="1" ticket="1"/>"#,
            exit(1, 1, 100, 60),
            r#"<traceEnd traceIdRef="c3f832e9-07c2-4593-9e18-28dbe06bd16b" time="100.200000000"/>"#,
        );
        let profile = read(&trace).unwrap();
        assert_eq!(profile.total(Event::Calls), 3);
        // Own CPU: outer 60 - 20 - 5 = 35 ms, inner 20 + 5 ms.
        assert_eq!(profile.total(Event::CpuTime), 60_000_000);
        let outer_own: u64 = profile
            .samples
            .iter()
            .filter(|s| s.event == Event::CpuTime && profile.stack(s.stack).len() == 1)
            .map(|s| s.value)
            .sum();
        assert_eq!(outer_own, 35_000_000);
        let inner = profile
            .samples
            .iter()
            .find(|s| s.event == Event::Calls && profile.stack(s.stack).len() == 2)
            .unwrap();
        let names: Vec<&str> = profile
            .stack(inner.stack)
            .iter()
            .map(|id| profile.frame(*id).name.as_str())
            .collect();
        assert_eq!(names, ["A.outer", "A.inner"]);
        assert_eq!(profile.thread(inner.thread.unwrap()).name, "main");

        let spans: Vec<(SpanKind, u64, u64)> = profile
            .spans
            .iter()
            .map(|s| (s.kind, s.start_ns / 1_000_000, s.end_ns / 1_000_000))
            .collect();
        assert!(spans.contains(&(SpanKind::Call, 0, 100)), "{spans:?}");
        assert!(spans.contains(&(SpanKind::Call, 10, 30)));
        assert!(spans.contains(&(SpanKind::Call, 40, 50)));
        assert!(spans.contains(&(SpanKind::MonitorWait, 60, 70)));
        assert!(spans.contains(&(SpanKind::Gc, 80, 85)));
        assert!(spans.contains(&(SpanKind::Exception, 90, 90)));
        assert_eq!(profile.duration_ns, Some(200_000_000));
        assert_eq!(profile.start_epoch_ns, Some(100_000_000_000));
    }

    #[test]
    fn exits_without_tickets_pair_by_stack_and_open_calls_last_to_the_end() {
        let trace = format!(
            "{DEFS}{}{}{}",
            entry(1, 1, 0, 0).replace(r#" ticket="1""#, ""),
            entry(2, 1, 10, 0).replace(r#" ticket="1""#, ""),
            exit(2, 1, 20, 0).replace(r#" ticket="1""#, ""),
        );
        let profile = read(&trace).unwrap();
        assert_eq!(profile.total(Event::Calls), 2);
        // The outer call never ended: it lasts to the last time the trace gives.
        let outer = profile.spans.iter().find(|s| s.start_ns == 0).unwrap();
        assert_eq!(outer.end_ns, 20_000_000);
        let inner = profile.spans.iter().find(|s| s.start_ns > 0).unwrap();
        assert_eq!(inner.end_ns, 20_000_000);
    }

    #[test]
    fn class_loaders_and_parameter_values_come_with_the_profile() {
        let trace = format!(
            "<TRACE>\n{}{}{}{}\n</TRACE>\n",
            r#"<classDef classId="1" name="A" classLoader="1" classLoaderName="java.net.URLClassLoader"/>
<classDef classId="2" name="java.lang.String" classLoader="0" classLoaderName="bootstrap"/>
<methodDef name="outer" signature="(I)V" classIdRef="1" methodId="1"/>
"#,
            r#"<methodEntry threadIdRef="1" time="1.000000000" methodIdRef="1" ticket="1"><value parameterName="1" referenceName="A.outer(int) 1" type="int" value="7"/></methodEntry>"#,
            r#"<methodExit threadIdRef="1" time="1.000000250" ticket="1" methodIdRef="1"/>"#,
            r#"<methodEntry threadIdRef="1" time="1.5" methodIdRef="1" ticket="2"><value parameterName="1" type="int" value="8"/></methodEntry>"#,
        );
        let error = read(&trace).unwrap_err().to_string();
        assert!(
            error.contains("element 6 <methodEntry>: <value> 1 lacks referenceName"),
            "{error}"
        );
        let trace = trace.replace(r#"<value parameterName="1" type="int" value="8"/>"#, "");
        let profile = read(&trace).unwrap();
        assert_eq!(profile.class_loaders["A"], "1: java.net.URLClassLoader");
        assert_eq!(profile.class_loaders["java.lang.String"], "0: bootstrap");
        assert_eq!(profile.mpt.len(), 1);
        let table = &profile.mpt[0];
        assert_eq!(
            table.method,
            "A.outer(int) [loader 1: java.net.URLClassLoader]"
        );
        assert_eq!((table.rows[0].calls, table.rows[0].wall_total_ns), (1, 250));
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_counted_in_offsets() {
        let trace = format!("\u{feff}<TRACE>\n{DEFS}</TRACE>\n");
        assert_eq!(sniff(trace.as_bytes()), Some(InputKind::Trace));
        assert_eq!(sniff(b" \n<methodEntry/>"), Some(InputKind::Trace));
        assert_eq!(sniff(b"\xEF\xBB\xBF x<"), None);
        assert_eq!(read(&trace).unwrap().thread(0).name, "main");
        let error = read("\u{feff}<bogus/>").unwrap_err().to_string();
        assert!(error.contains("element 1: byte 3: <bogus>"), "{error}");
    }

    #[test]
    fn a_bad_element_is_an_error_naming_the_file_and_where() {
        let error = read(&format!("<TRACE>\n{DEFS}<bogus/>\n</TRACE>\n"))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("test.xml is not a readable trace"),
            "{error}"
        );
        assert!(error.contains("<bogus> is not a trace element"), "{error}");
        assert!(error.contains("element 7: byte "), "{error}");
        let cut = format!("<TRACE>\n{DEFS}");
        let error = read(&cut[..cut.len() - 20]).unwrap_err().to_string();
        assert!(error.contains("ends inside an element"), "{error}");
    }
}
