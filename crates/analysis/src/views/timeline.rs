//! Timelines of a profile's spans (method calls, monitor waits, GCs, exceptions), one track per
//! thread: Chrome's trace event JSON, which Perfetto and chrome://tracing open, and speedscope's
//! evented profiles. Both are written from the same tracks, nested properly whatever the input.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{SampleFilter, ViewOptions};
use crate::profile::{Profile, Span, SpanKind, ThreadId};

/// One thread's spans as a timeline shows them: sorted by start, each inside the one before it
/// that is still open (a span that outlasts its enclosing one is cut at that one's end, as
/// timeline readers drop or misplace overlapping slices).
struct Track {
    name: String,
    spans: Vec<TrackSpan>,
}

struct TrackSpan {
    name: String,
    kind: SpanKind,
    start_ns: u64,
    end_ns: u64,
}

/// What a span is called on a timeline.
fn span_name(profile: &Profile, span: &Span, simple: bool) -> String {
    let frame = profile.frame(span.frame);
    let name = if simple {
        frame.simple_name()
    } else {
        &frame.name
    };
    match span.kind {
        SpanKind::Call => name.to_string(),
        SpanKind::Gc => "GC".to_string(),
        SpanKind::MonitorBlocked => format!("blocked on {name}"),
        SpanKind::MonitorWait => format!("waiting on {name}"),
        SpanKind::Exception => format!("throw in {name}"),
    }
}

/// The spans the options keep (time window; include and exclude for calls and exceptions, which
/// are methods), by thread in the profile's order, spans of no thread (GCs) last.
fn tracks(profile: &Profile, options: &ViewOptions) -> Vec<Track> {
    let filter = SampleFilter::new(profile, options);
    let mut by_thread: HashMap<Option<ThreadId>, Vec<TrackSpan>> = HashMap::new();
    for span in profile.spans.iter().filter(|span| filter.keeps_span(span)) {
        by_thread.entry(span.thread).or_default().push(TrackSpan {
            name: span_name(profile, span, options.simple),
            kind: span.kind,
            start_ns: span.start_ns,
            end_ns: span.end_ns.max(span.start_ns),
        });
    }
    let mut keys: Vec<Option<ThreadId>> = by_thread.keys().copied().collect();
    // `None` sorts first; GCs belong after the threads.
    keys.sort_by_key(|key| (key.is_none(), *key));
    keys.into_iter()
        .map(|key| {
            let mut spans = by_thread.remove(&key).unwrap_or_default();
            spans.sort_by_key(|span| (span.start_ns, std::cmp::Reverse(span.end_ns)));
            let mut open: Vec<u64> = Vec::new();
            for span in &mut spans {
                while open.last().is_some_and(|&end| end <= span.start_ns) {
                    open.pop();
                }
                if let Some(&end) = open.last() {
                    span.end_ns = span.end_ns.min(end);
                }
                open.push(span.end_ns);
            }
            let name = match key {
                Some(thread) => {
                    let thread = profile.thread(thread);
                    if thread.name.is_empty() {
                        format!("[thread {}]", thread.id)
                    } else {
                        format!("{} (tid={})", thread.name, thread.id)
                    }
                }
                None => "GC".to_string(),
            };
            Track { name, spans }
        })
        .collect()
}

fn title(profile: &Profile, options: &ViewOptions) -> String {
    options
        .title
        .clone()
        .unwrap_or_else(|| profile.source.clone())
}

/// A JSON string literal.
fn json(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into())
}

/// Nanoseconds as microseconds with three decimals, exact: float microseconds could round a
/// child past its parent's end.
fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// Writes Chrome's trace event format: a complete event (`X`) per call, monitor wait,
/// contended enter and GC, an instant (`i`) per exception thrown, named threads (`M`), times
/// in microseconds from the profile's start.
pub fn write_chrome_trace(
    profile: &Profile,
    options: &ViewOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let tracks = tracks(profile, options);
    write!(
        out,
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"source\":{}",
        json(&profile.source)
    )?;
    if let Some(start) = profile.start_epoch_ns {
        write!(out, ",\"startEpochNs\":{start}")?;
    }
    write!(
        out,
        "}},\"traceEvents\":[\n{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\
         \"args\":{{\"name\":{}}}}}",
        json(&title(profile, options))
    )?;
    for (index, track) in tracks.iter().enumerate() {
        // Thread ids of the input may not fit the 32 bits some readers take: tracks are
        // numbered, their names carry the ids.
        let tid = index + 1;
        write!(
            out,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{tid},\
             \"args\":{{\"name\":{}}}}}",
            json(&track.name)
        )?;
        write!(
            out,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":{tid},\
             \"args\":{{\"sort_index\":{tid}}}}}"
        )?;
        for span in &track.spans {
            let category = match span.kind {
                SpanKind::Call => "call",
                SpanKind::Gc => "gc",
                SpanKind::MonitorBlocked | SpanKind::MonitorWait => "monitor",
                SpanKind::Exception => "exception",
            };
            if span.kind == SpanKind::Exception {
                write!(
                    out,
                    ",\n{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"{category}\",\"name\":{},\"ts\":{},\
                     \"pid\":1,\"tid\":{tid}}}",
                    json(&span.name),
                    micros(span.start_ns)
                )?;
            } else {
                write!(
                    out,
                    ",\n{{\"ph\":\"X\",\"cat\":\"{category}\",\"name\":{},\"ts\":{},\"dur\":{},\
                     \"pid\":1,\"tid\":{tid}}}",
                    json(&span.name),
                    micros(span.start_ns),
                    micros(span.end_ns - span.start_ns)
                )?;
            }
        }
    }
    writeln!(out, "\n]}}")
}

/// Writes speedscope's file format with one evented profile per thread: a frame opened (`O`)
/// and closed (`C`) per call, monitor wait, contended enter and GC, in nanoseconds from the
/// profile's start. Exceptions, instants, are left out: speedscope shows only spans of time.
pub fn write_speedscope_evented(
    profile: &Profile,
    options: &ViewOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let tracks = tracks(profile, options);
    let mut frames: Vec<&str> = Vec::new();
    let mut frame_ids: HashMap<&str, usize> = HashMap::new();
    let end_of_all = tracks
        .iter()
        .flat_map(|track| track.spans.iter().map(|span| span.end_ns))
        .max()
        .unwrap_or(0)
        .max(profile.duration_ns.unwrap_or(0));
    let mut profiles: Vec<String> = Vec::new();
    for track in &tracks {
        let mut events = String::new();
        let mut open: Vec<(usize, u64)> = Vec::new();
        let close = |events: &mut String, (frame, at): (usize, u64)| {
            if !events.is_empty() {
                events.push(',');
            }
            events.push_str(&format!("{{\"type\":\"C\",\"frame\":{frame},\"at\":{at}}}"));
        };
        for span in track
            .spans
            .iter()
            .filter(|span| span.kind != SpanKind::Exception)
        {
            while let Some(&(frame, end)) = open.last() {
                if end > span.start_ns {
                    break;
                }
                open.pop();
                close(&mut events, (frame, end));
            }
            let next = frames.len();
            let frame = *frame_ids.entry(span.name.as_str()).or_insert_with(|| {
                frames.push(span.name.as_str());
                next
            });
            if !events.is_empty() {
                events.push(',');
            }
            events.push_str(&format!(
                "{{\"type\":\"O\",\"frame\":{frame},\"at\":{}}}",
                span.start_ns
            ));
            open.push((frame, span.end_ns));
        }
        while let Some(last) = open.pop() {
            close(&mut events, last);
        }
        profiles.push(format!(
            "{{\"type\":\"evented\",\"name\":{},\"unit\":\"nanoseconds\",\"startValue\":0,\
             \"endValue\":{end_of_all},\"events\":[{events}]}}",
            json(&track.name)
        ));
    }
    let frames: Vec<String> = frames
        .iter()
        .map(|name| format!("{{\"name\":{}}}", json(name)))
        .collect();
    writeln!(
        out,
        "{{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\
         \"exporter\":\"openprof\",\"name\":{},\"activeProfileIndex\":0,\
         \"shared\":{{\"frames\":[{}]}},\"profiles\":[{}]}}",
        json(&title(profile, options)),
        frames.join(","),
        profiles.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Frame;
    use serde_json::Value;

    /// On one thread: `outer` 0..100 µs, `inner` 10..30, `inner` 20..130 (overlapping the first
    /// `inner` and outlasting `outer`: cut at the first's end), an exception at 50; a GC on no
    /// thread.
    fn profile() -> Profile {
        let mut profile = Profile::new("test.xml");
        let thread = Some(profile.thread_id(7, "main"));
        let outer = profile.frame_id(Frame::java("p.A.outer"));
        let inner = profile.frame_id(Frame::java("p.A.inner"));
        let gc = profile.frame_id(Frame::marker("GC"));
        for (frame, kind, start_ns, end_ns, thread) in [
            (outer, SpanKind::Call, 0, 100_000, thread),
            (inner, SpanKind::Call, 10_000, 30_000, thread),
            (inner, SpanKind::Call, 20_000, 130_000, thread),
            (outer, SpanKind::Exception, 50_000, 50_000, thread),
            (gc, SpanKind::Gc, 60_000, 70_500, None),
        ] {
            profile.spans.push(Span {
                thread,
                frame,
                kind,
                start_ns,
                end_ns,
            });
        }
        profile
    }

    fn written(write: fn(&Profile, &ViewOptions, &mut Vec<u8>) -> io::Result<()>) -> Value {
        let mut out = Vec::new();
        write(&profile(), &ViewOptions::default(), &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn chrome_trace_nests_slices_and_names_threads() {
        let trace = written(write_chrome_trace);
        let events = trace["traceEvents"].as_array().unwrap();
        let slices: Vec<(&str, f64, f64, u64)> = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                (
                    e["name"].as_str().unwrap(),
                    ts,
                    dur,
                    e["tid"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            slices,
            [
                ("p.A.outer", 0.0, 100.0, 1),
                ("p.A.inner", 10.0, 20.0, 1),
                ("p.A.inner", 20.0, 10.0, 1),
                ("GC", 60.0, 10.5, 2),
            ]
        );
        let instant = events.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(instant["name"], "throw in p.A.outer");
        assert_eq!(instant["ts"].as_f64(), Some(50.0));
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["main (tid=7)", "GC"]);
    }

    #[test]
    fn speedscope_opens_and_closes_each_span_in_order() {
        let file = written(write_speedscope_evented);
        let frames = file["shared"]["frames"].as_array().unwrap();
        let profiles = file["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        let events: Vec<(String, String, u64)> = profiles[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let frame = e["frame"].as_u64().unwrap() as usize;
                (
                    e["type"].as_str().unwrap().to_string(),
                    frames[frame]["name"].as_str().unwrap().to_string(),
                    e["at"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected = [
            ("O", "p.A.outer", 0),
            ("O", "p.A.inner", 10_000),
            ("O", "p.A.inner", 20_000),
            ("C", "p.A.inner", 30_000),
            ("C", "p.A.inner", 30_000),
            ("C", "p.A.outer", 100_000),
        ]
        .map(|(kind, name, at)| (kind.to_string(), name.to_string(), at));
        assert_eq!(events, expected);
    }
}
