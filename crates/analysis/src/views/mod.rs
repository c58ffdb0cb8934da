//! The views of a profile: what the user asked to see (event, filters, per thread, reversed,
//! time window, short names) applied once, here, into folded stacks that every output writes.

pub mod collapsed;
pub mod diff;
pub mod html;
pub mod pprof;
pub mod speedscope;
pub mod timeline;
pub mod tree;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use regex::Regex;

use crate::profile::{Event, Frame, FrameId, FrameKind, Profile, Sample, Span, SpanKind, Thread};

/// The formats a profile is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// Folded stacks (`.collapsed`, `.txt`).
    Collapsed,
    /// A self-contained flame graph and call tree (`.html`).
    Html,
    /// pprof's profile.proto, gzipped (`.pb.gz`).
    Pprof,
    /// speedscope's JSON (`.json`).
    Speedscope,
    /// Chrome's trace event JSON (`.trace.json`), which Perfetto opens.
    ChromeTrace,
}

impl OutputFormat {
    pub const ALL: [OutputFormat; 5] = [
        OutputFormat::Collapsed,
        OutputFormat::Html,
        OutputFormat::Pprof,
        OutputFormat::Speedscope,
        OutputFormat::ChromeTrace,
    ];

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Collapsed => "collapsed",
            OutputFormat::Html => "html",
            OutputFormat::Pprof => "pprof",
            OutputFormat::Speedscope => "speedscope",
            OutputFormat::ChromeTrace => "chrome",
        }
    }

    pub fn from_name(name: &str) -> Option<OutputFormat> {
        OutputFormat::ALL
            .into_iter()
            .find(|format| format.name() == name)
    }

    /// The format a file name's extension asks for.
    pub fn from_path(path: &Path) -> Option<OutputFormat> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let by_ending = [
            (".trace.json", OutputFormat::ChromeTrace),
            (".pb.gz", OutputFormat::Pprof),
            (".collapsed", OutputFormat::Collapsed),
            (".txt", OutputFormat::Collapsed),
            (".html", OutputFormat::Html),
            (".json", OutputFormat::Speedscope),
        ];
        by_ending
            .into_iter()
            .find(|(ending, _)| name.ends_with(ending))
            .map(|(_, format)| format)
    }
}

/// How a profile is to be shown; the same for every output format.
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    /// The event shown; `None`: the profile's first (CPU first).
    pub event: Option<Event>,
    /// Only stacks with a frame matching one of these.
    pub include: Vec<Regex>,
    /// No stack with a frame matching one of these.
    pub exclude: Vec<Regex>,
    /// One tree per thread: the thread is the stack's root.
    pub by_thread: bool,
    /// Stacks leaf first: who calls the hot methods.
    pub reverse: bool,
    /// Weigh stacks by the event's value (bytes, nanoseconds) rather than by how many samples.
    pub total: bool,
    /// Only samples at or after this time (nanoseconds since the profile's start).
    pub from_ns: Option<u64>,
    /// Only samples before this time.
    pub to_ns: Option<u64>,
    /// Class names without their packages.
    pub simple: bool,
    /// Frames narrower than this percentage of the total are left out of flame graphs.
    pub min_width_percent: f64,
    /// The title shown; `None`: made from the source and the event.
    pub title: Option<String>,
    /// Only samples that carry every one of these labels (name, value).
    pub labels: Vec<(String, String)>,
    /// Samples with different labels kept apart, each stack with its labels
    /// (`Folded::labels`): for the outputs that show labels.
    pub with_labels: bool,
    /// A method's lines kept apart (`ViewFrame::line`): for the outputs that show lines.
    pub with_lines: bool,
}

/// Whether a profile can be shown as asked: an event it has samples of; a timeline only of a
/// profile that has one. The problem in words when not.
pub fn check(profile: &Profile, format: OutputFormat, options: &ViewOptions) -> Result<(), String> {
    if let Some(event) = options.event {
        if !profile.events().contains(&event) {
            let names: Vec<&str> = profile.events().into_iter().map(Event::name).collect();
            return Err(format!(
                "{} has no {} samples; it has: {}",
                profile.source,
                event.name(),
                if names.is_empty() {
                    "no samples at all".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
    }
    if options.by_thread {
        let shown = shown_events(profile, options);
        let threaded = profile
            .samples
            .iter()
            .any(|sample| shown.contains(&sample.event) && sample.thread.is_some());
        if !threaded && profile.samples.iter().any(|s| shown.contains(&s.event)) {
            return Err(format!(
                "{} records no thread for its samples, so --threads can't split them by \
                 thread: record the profile with thread=y (HPROF's files name a sample's \
                 thread only then)",
                profile.source
            ));
        }
    }
    if format == OutputFormat::ChromeTrace && profile.spans.is_empty() {
        return Err(format!(
            "{} has no timeline (method calls, waits, GCs) for a Chrome trace: traces \
             (format=x) with cpu=times or monitor=y have one",
            profile.source
        ));
    }
    Ok(())
}

/// Writes a profile in an output format ([`check`] it first): the one dispatch every front end
/// uses.
pub fn write(
    profile: &Profile,
    format: OutputFormat,
    options: &ViewOptions,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    match format {
        OutputFormat::Collapsed => collapsed::write(&fold(profile, options), out),
        OutputFormat::Pprof => pprof::write(profile, options, out),
        // A profile with a timeline (a trace) opens in speedscope as one, unless an event's
        // samples are asked for; anything else as sampled stacks.
        OutputFormat::Speedscope if !profile.spans.is_empty() && options.event.is_none() => {
            timeline::write_speedscope_evented(profile, options, out)
        }
        OutputFormat::Speedscope => speedscope::write(profile, options, out),
        OutputFormat::Html => html::write(profile, options, out),
        OutputFormat::ChromeTrace => timeline::write_chrome_trace(profile, options, out),
    }
}

/// The view options as people give them — the command line's flags, the web API's query —
/// before they are checked: one place turns them into [`ViewOptions`] for every front end.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ViewRequest {
    pub event: Option<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub threads: bool,
    pub reverse: bool,
    pub total: bool,
    /// Seconds from the recording's start.
    pub from: Option<f64>,
    pub to: Option<f64>,
    pub simple: bool,
    pub lines: bool,
    pub minwidth: f64,
    pub title: Option<String>,
    /// `NAME=VALUE`: only samples with that label.
    pub labels: Vec<String>,
}

impl ViewRequest {
    /// The options, checked; a problem names the option as `flag` spells it (`--` on the
    /// command line, nothing in a query).
    pub fn options(&self, flag: &str) -> Result<ViewOptions, String> {
        let regexes = |patterns: &[String], option: &str| -> Result<Vec<Regex>, String> {
            patterns
                .iter()
                .map(|pattern| {
                    Regex::new(pattern)
                        .map_err(|error| format!("bad {flag}{option} {pattern:?}: {error}"))
                })
                .collect()
        };
        let event = match &self.event {
            Some(name) => Some(Event::from_name(name).ok_or_else(|| {
                format!(
                    "bad {flag}event {name:?}: one of {}",
                    Event::ALL.map(Event::name).join(", ")
                )
            })?),
            None => None,
        };
        let seconds = |value: Option<f64>, option: &str| -> Result<Option<u64>, String> {
            match value {
                Some(seconds) if !(seconds.is_finite() && seconds >= 0.0) => Err(format!(
                    "bad {flag}{option} {seconds}: seconds from the recording's start, 0 or more"
                )),
                Some(seconds) => Ok(Some((seconds * 1e9) as u64)),
                None => Ok(None),
            }
        };
        if !(self.minwidth.is_finite() && (0.0..=100.0).contains(&self.minwidth)) {
            return Err(format!(
                "bad {flag}minwidth {}: a percentage, 0 to 100",
                self.minwidth
            ));
        }
        let labels = self
            .labels
            .iter()
            .map(|label| match label.split_once('=') {
                Some((name, value)) if !name.is_empty() => {
                    Ok((name.to_string(), value.to_string()))
                }
                _ => Err(format!(
                    "bad {flag}label {label:?}: NAME=VALUE, e.g. state=blocked or mpt.value=7"
                )),
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(ViewOptions {
            labels,
            event,
            include: regexes(&self.include, "include")?,
            exclude: regexes(&self.exclude, "exclude")?,
            by_thread: self.threads,
            reverse: self.reverse,
            total: self.total,
            from_ns: seconds(self.from, "from")?,
            to_ns: seconds(self.to, "to")?,
            simple: self.simple,
            min_width_percent: self.minwidth,
            title: self.title.clone(),
            with_labels: false,
            with_lines: self.lines,
        })
    }
}

/// A frame as a view shows it: merged by name and kind, and by line too unless the view keeps
/// lines apart (`ViewOptions::with_lines`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ViewFrame {
    pub name: String,
    pub kind: ViewFrameKind,
    /// The source line, with `ViewOptions::with_lines` and where the profile knows it.
    pub line: Option<u32>,
}

/// A view frame's kind: the profile's kinds, with JDK methods told apart from the program's and
/// thread roots of per-thread views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViewFrameKind {
    Java,
    Jdk,
    Inlined,
    Native,
    Marker,
    AllocatedClass,
    MonitorClass,
    ParkBlocker,
    Thread,
}

impl ViewFrameKind {
    pub fn name(self) -> &'static str {
        match self {
            ViewFrameKind::Java => "java",
            ViewFrameKind::Jdk => "jdk",
            ViewFrameKind::Inlined => "inlined",
            ViewFrameKind::Native => "native",
            ViewFrameKind::Marker => "marker",
            ViewFrameKind::AllocatedClass => "allocated_class",
            ViewFrameKind::MonitorClass => "monitor_class",
            ViewFrameKind::ParkBlocker => "park_blocker",
            ViewFrameKind::Thread => "thread",
        }
    }
}

/// Stacks of one event after the view's options, each with its weight, aggregated: what every
/// output (collapsed, flame graph, tree, pprof) is written from.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    pub event: Option<Event>,
    pub title: String,
    pub frames: Vec<ViewFrame>,
    /// Root first (leaf first when reversed), with their weight; heaviest first.
    pub stacks: Vec<(Vec<u32>, u64)>,
    pub total: u64,
    /// With `ViewOptions::with_labels`, each stack's labels, at its index in `stacks`; else
    /// empty.
    pub labels: Vec<Labels>,
}

/// A sample's labels: (name, value).
pub type Labels = Vec<(String, String)>;

impl ViewFrame {
    /// The frame as outputs name it: the method, and `:LINE` when lines are kept apart.
    pub fn label(&self) -> Cow<'_, str> {
        match self.line {
            Some(line) => Cow::Owned(format!("{}:{line}", self.name)),
            None => Cow::Borrowed(&self.name),
        }
    }
}

impl Folded {
    pub fn frame(&self, id: u32) -> &ViewFrame {
        &self.frames[id as usize]
    }
}

/// Applies the options to a profile.
pub fn fold(profile: &Profile, options: &ViewOptions) -> Folded {
    let event = options.event.or_else(|| profile.default_event());
    let title = options.title.clone().unwrap_or_else(|| match event {
        Some(event) => format!("{} ({})", profile.source, event.name()),
        None => profile.source.clone(),
    });
    let mut folded = Folded {
        event,
        title,
        ..Folded::default()
    };
    let Some(event) = event else {
        return folded;
    };
    let filter = SampleFilter::new(profile, options);
    // Each profile frame once: its view frame.
    let mut view_ids: HashMap<ViewFrame, u32> = HashMap::new();
    let mut frame_view: Vec<u32> = Vec::with_capacity(profile.frames().len());
    for frame in profile.frames() {
        let view = view_frame(frame, options);
        let next = view_ids.len() as u32;
        let id = *view_ids.entry(view.clone()).or_insert_with(|| {
            folded.frames.push(view);
            next
        });
        frame_view.push(id);
    }
    let mut thread_frames: HashMap<u32, u32> = HashMap::new();
    let mut weights: HashMap<(Vec<u32>, Labels), u64> = HashMap::new();
    for sample in profile
        .samples
        .iter()
        .filter(|sample| sample.event == event && filter.keeps(profile, sample))
    {
        let stack = profile.stack(sample.stack);
        let mut frames: Vec<u32> = Vec::with_capacity(stack.len() + 1);
        if options.by_thread {
            let root = match sample.thread {
                Some(thread) => *thread_frames.entry(thread).or_insert_with(|| {
                    intern(
                        &mut folded.frames,
                        &mut view_ids,
                        thread_frame_name(profile.thread(thread)),
                        ViewFrameKind::Thread,
                    )
                }),
                None => intern(
                    &mut folded.frames,
                    &mut view_ids,
                    UNKNOWN_THREAD.into(),
                    ViewFrameKind::Thread,
                ),
            };
            frames.push(root);
        }
        frames.extend(stack.iter().map(|id| frame_view[*id as usize]));
        if options.reverse {
            let start = usize::from(options.by_thread);
            frames[start..].reverse();
        }
        let weight = if options.total {
            sample.value
        } else {
            sample.count
        };
        if weight == 0 {
            continue;
        }
        folded.total += weight;
        let labels = if options.with_labels {
            sample.labels.clone()
        } else {
            Vec::new()
        };
        *weights.entry((frames, labels)).or_insert(0) += weight;
    }
    let mut stacks: Vec<_> = weights.into_iter().collect();
    stacks.sort_by(|(a_key, a), (b_key, b)| b.cmp(a).then_with(|| a_key.cmp(b_key)));
    for ((frames, labels), weight) in stacks {
        folded.stacks.push((frames, weight));
        if options.with_labels {
            folded.labels.push(labels);
        }
    }
    folded
}

/// Which samples a view keeps, whatever their event: those in the time window (`from_ns`,
/// `to_ns`; none without a time when a window is given) that carry every label asked for,
/// whose stack has a frame `include` matches (when any is given) and none `exclude` matches.
/// Every frame is matched once, when the filter is made, not once per sample.
pub struct SampleFilter {
    labels: Vec<(String, String)>,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
    any_include: bool,
    any_exclude: bool,
    included: Vec<bool>,
    excluded: Vec<bool>,
}

impl SampleFilter {
    pub fn new(profile: &Profile, options: &ViewOptions) -> SampleFilter {
        let matches = |regexes: &[Regex]| -> Vec<bool> {
            profile
                .frames()
                .iter()
                .map(|frame| regexes.iter().any(|regex| regex.is_match(&frame.name)))
                .collect()
        };
        SampleFilter {
            labels: options.labels.clone(),
            from_ns: options.from_ns,
            to_ns: options.to_ns,
            any_include: !options.include.is_empty(),
            any_exclude: !options.exclude.is_empty(),
            included: matches(&options.include),
            excluded: matches(&options.exclude),
        }
    }

    /// Whether the view keeps the sample.
    pub fn keeps(&self, profile: &Profile, sample: &Sample) -> bool {
        if !self.in_window(sample.time_ns)
            || !self
                .labels
                .iter()
                .all(|label| sample.labels.contains(label))
        {
            return false;
        }
        let stack = profile.stack(sample.stack);
        if self.any_include && !stack.iter().any(|id| self.included[*id as usize]) {
            return false;
        }
        !(self.any_exclude && stack.iter().any(|id| self.excluded[*id as usize]))
    }

    /// Whether the view keeps a span: it overlaps the window, and a call or exception (which
    /// has no stack) is of a method whose own name `include` matches (when any is given) and
    /// `exclude` does not; waits and collections are kept whatever their name.
    pub fn keeps_span(&self, span: &Span) -> bool {
        // Spans carry no labels: a view of labelled samples has none.
        if !self.labels.is_empty() {
            return false;
        }
        if self.from_ns.is_some_and(|from| span.end_ns < from)
            || self.to_ns.is_some_and(|to| span.start_ns >= to)
        {
            return false;
        }
        !matches!(span.kind, SpanKind::Call | SpanKind::Exception) || self.keeps_method(span.frame)
    }

    /// Whether a frame's own name passes `include` (when any is given) and `exclude`.
    pub fn keeps_method(&self, frame: FrameId) -> bool {
        let frame = frame as usize;
        (!self.any_include || self.included[frame]) && !self.excluded[frame]
    }

    /// Whether a time (nanoseconds since the profile's start) is in the window; without a time,
    /// only when no window is given.
    pub fn in_window(&self, time_ns: Option<u64>) -> bool {
        match time_ns {
            Some(time) => {
                !(self.from_ns.is_some_and(|from| time < from)
                    || self.to_ns.is_some_and(|to| time >= to))
            }
            None => self.from_ns.is_none() && self.to_ns.is_none(),
        }
    }
}

/// The view frame a profile frame is shown as.
fn view_frame(frame: &Frame, options: &ViewOptions) -> ViewFrame {
    let kind = match frame.kind {
        FrameKind::Java if frame.is_jdk() => ViewFrameKind::Jdk,
        FrameKind::Java => ViewFrameKind::Java,
        FrameKind::Inlined => ViewFrameKind::Inlined,
        FrameKind::Native => ViewFrameKind::Native,
        FrameKind::Marker => ViewFrameKind::Marker,
        FrameKind::AllocatedClass => ViewFrameKind::AllocatedClass,
        FrameKind::MonitorClass => ViewFrameKind::MonitorClass,
        FrameKind::ParkBlocker => ViewFrameKind::ParkBlocker,
    };
    let name = if options.simple {
        frame.simple_name().to_string()
    } else {
        frame.name.clone()
    };
    let line = frame.line.filter(|_| options.with_lines);
    ViewFrame { name, kind, line }
}

/// The name of a thread's root frame in per-thread views.
pub fn thread_frame_name(thread: &Thread) -> String {
    if thread.name.is_empty() {
        format!("[thread {}]", thread.id)
    } else {
        format!("[{} tid={}]", thread.name, thread.id)
    }
}

/// The root of per-thread stacks whose samples have no thread.
pub const UNKNOWN_THREAD: &str = "[unknown thread]";

/// The source file of each view frame, where a profile frame shown as it names one (the first
/// that does): `Folded` merges a method's lines, so outputs that show files look them up here.
pub fn source_files(profile: &Profile, options: &ViewOptions) -> HashMap<ViewFrame, String> {
    let mut files = HashMap::new();
    for frame in profile.frames() {
        if let Some(file) = &frame.file {
            files
                .entry(view_frame(frame, options))
                .or_insert_with(|| file.clone());
        }
    }
    files
}

/// The events an output of several events shows: the one asked for, else every event the
/// profile has samples of.
pub fn shown_events(profile: &Profile, options: &ViewOptions) -> Vec<Event> {
    match options.event {
        Some(event) => vec![event],
        None => profile.events(),
    }
}

fn intern(
    frames: &mut Vec<ViewFrame>,
    ids: &mut HashMap<ViewFrame, u32>,
    name: String,
    kind: ViewFrameKind,
) -> u32 {
    let view = ViewFrame {
        name,
        kind,
        line: None,
    };
    if let Some(id) = ids.get(&view) {
        return *id;
    }
    let id = frames.len() as u32;
    frames.push(view.clone());
    ids.insert(view, id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Sample};

    fn profile() -> Profile {
        let mut profile = Profile::new("test");
        let hot = profile.stack_of_frames_leaf_first([
            Frame::java("Hot.spin"),
            Frame::java("java.lang.Thread.run"),
        ]);
        let cold = profile.stack_of_frames_leaf_first([Frame::java("Hot.rest")]);
        let thread = profile.thread_id(1, "main");
        for (stack, count) in [(hot, 3), (cold, 1)] {
            profile.add_sample(Sample {
                stack,
                event: Event::Cpu,
                value: count,
                count,
                thread: Some(thread),
                time_ns: None,
                labels: Vec::new(),
            });
        }
        profile
    }

    fn names(folded: &Folded, stack: &[u32]) -> Vec<String> {
        stack
            .iter()
            .map(|id| folded.frame(*id).name.clone())
            .collect()
    }

    #[test]
    fn folds_root_first_heaviest_first() {
        let folded = fold(&profile(), &ViewOptions::default());
        assert_eq!(folded.total, 4);
        assert_eq!(
            names(&folded, &folded.stacks[0].0),
            ["java.lang.Thread.run", "Hot.spin"]
        );
        assert_eq!(folded.stacks[0].1, 3);
        assert_eq!(folded.frame(folded.stacks[0].0[0]).kind, ViewFrameKind::Jdk);
    }

    #[test]
    fn filters_reverses_and_roots_at_threads() {
        let options = ViewOptions {
            include: vec![Regex::new("spin").unwrap()],
            reverse: true,
            by_thread: true,
            simple: true,
            ..ViewOptions::default()
        };
        let folded = fold(&profile(), &options);
        assert_eq!(folded.total, 3);
        assert_eq!(
            names(&folded, &folded.stacks[0].0),
            ["[main tid=1]", "Hot.spin", "Thread.run"]
        );
        let excluded = fold(
            &profile(),
            &ViewOptions {
                exclude: vec![Regex::new("^Hot\\.").unwrap()],
                ..ViewOptions::default()
            },
        );
        assert_eq!(excluded.total, 0);
    }
}
