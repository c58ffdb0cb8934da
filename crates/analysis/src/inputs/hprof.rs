//! HPROF's profiles (text, or binary read into the same records) as the profile model: CPU
//! SAMPLES as `cpu`, CPU TIME as `cpu_time` and `calls`, SITES as live and allocated bytes and
//! objects with the allocated class as the leaf frame. A trace as deep as the `depth` the
//! sampler reports is marked `[truncated]` at its root: it may have been cut there.

use openprof_format::hprof_text::{self, CpuTableKind, FrameLine, TextProfile};

use crate::profile::{Event, Frame, FrameKind, Profile, Sample, StackId, ThreadId, TRUNCATED};

/// The mark of the samples a table does not list: rows below HPROF's `cutoff`.
pub const BELOW_CUTOFF: &str = "[below cutoff]";

/// Reads an HPROF profile's tables. Every dump's table counts (HPROF starts each dump from
/// zero); the samples of rows cut at `cutoff` are kept under one marked frame, so shares stay
/// those of the whole profile.
pub fn from_hprof(hprof: &TextProfile, source: &str) -> Profile {
    let mut profile = Profile::new(source);
    // The depth samples were kept at, where the profile says: a trace of that many Java frames
    // may have been cut, and is marked so rather than merged with shorter ones.
    let depth = hprof.samplers.iter().find_map(|sampler| sampler.depth);
    if let Some(sampler) = hprof.samplers.first() {
        profile.period_ns = Some(u64::from(sampler.interval_ms) * 1_000_000);
    }
    for table in &hprof.cpu_tables {
        let mut listed = 0u64;
        for row in &table.rows {
            let (stack, thread) = stack_of_trace(&mut profile, hprof, row.trace, None, depth);
            match table.kind {
                CpuTableKind::Samples => {
                    listed += row.count;
                    add(
                        &mut profile,
                        stack,
                        thread,
                        Event::Cpu,
                        row.count,
                        row.count,
                    );
                }
                CpuTableKind::Time => {
                    // The table's total is milliseconds of CPU; a row's share of it is its own.
                    let nanoseconds =
                        (row.self_percent / 100.0 * table.total as f64 * 1e6).round() as u64;
                    add(
                        &mut profile,
                        stack,
                        thread,
                        Event::CpuTime,
                        nanoseconds,
                        row.count,
                    );
                    add(
                        &mut profile,
                        stack,
                        thread,
                        Event::Calls,
                        row.count,
                        row.count,
                    );
                }
            }
        }
        if table.kind == CpuTableKind::Samples && table.total > listed {
            let rest = table.total - listed;
            let stack = profile.stack_of_frames_leaf_first([Frame::marker(BELOW_CUTOFF)]);
            add(&mut profile, stack, None, Event::Cpu, rest, rest);
        }
    }
    for table in &hprof.sites {
        for row in &table.rows {
            let site = &row.site;
            let class = Frame {
                name: site.class_name.clone(),
                file: None,
                line: None,
                kind: FrameKind::AllocatedClass,
            };
            let (stack, thread) =
                stack_of_trace(&mut profile, hprof, site.trace, Some(class), depth);
            for (event, value, count) in [
                (Event::LiveBytes, site.live_bytes, site.live_objects),
                (Event::LiveObjects, site.live_objects, site.live_objects),
                (
                    Event::AllocBytes,
                    site.allocated_bytes,
                    site.allocated_objects,
                ),
                (
                    Event::AllocObjects,
                    site.allocated_objects,
                    site.allocated_objects,
                ),
            ] {
                add(&mut profile, stack, thread, event, value, count);
            }
        }
    }
    profile
}

fn add(
    profile: &mut Profile,
    stack: StackId,
    thread: Option<ThreadId>,
    event: Event,
    value: u64,
    count: u64,
) {
    profile.add_sample(Sample {
        stack,
        event,
        value,
        count,
        thread,
        time_ns: None,
        labels: Vec::new(),
    });
}

/// A trace's frames (and a leaf put on top, such as an allocated class) as a stack, with its
/// thread when the trace names one.
fn stack_of_trace(
    profile: &mut Profile,
    hprof: &TextProfile,
    serial: u32,
    leaf: Option<Frame>,
    depth: Option<u32>,
) -> (StackId, Option<ThreadId>) {
    let trace = hprof.traces.get(&serial);
    let mut frames = trace
        .map(|trace| trace.frames.iter().map(frame).collect::<Vec<_>>())
        .unwrap_or_else(|| vec![Frame::marker(format!("[trace {serial}]"))]);
    let java_frames = trace.map_or(0, |trace| {
        trace.frames.iter().filter(|frame| frame.is_java()).count()
    });
    if depth.is_some_and(|depth| depth > 0 && java_frames >= depth as usize) {
        frames.push(Frame::marker(TRUNCATED));
    }
    let stack = profile.stack_of_frames_leaf_first(leaf.into_iter().chain(frames));
    let thread = trace.and_then(|trace| trace.thread).map(|serial| {
        let name = hprof
            .thread(serial)
            .map(|thread| thread.name.clone())
            .unwrap_or_default();
        profile.thread_id(u64::from(serial), &name)
    });
    (stack, thread)
}

/// An HPROF frame as a model frame.
pub fn frame(frame: &hprof_text::Frame) -> Frame {
    let (kind, line) = match frame.line {
        FrameLine::Line(line) => (FrameKind::Java, Some(line)),
        FrameLine::Unknown | FrameLine::Compiled | FrameLine::Native => (FrameKind::Java, None),
        FrameLine::NativeCode => (FrameKind::Native, None),
        FrameLine::FailedWalk | FrameLine::VmThread => (FrameKind::Marker, None),
    };
    Frame {
        name: frame.qualified_method(),
        file: frame.source_file.clone(),
        line,
        kind,
    }
}
