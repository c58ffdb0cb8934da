//! pprof's profile format (`profile.proto` of github.com/google/pprof, gzipped): the stacks of
//! every event shown as sample types of one profile, for `go tool pprof` and the tools that
//! read it.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use flate2::Compression;
use prost::Message;

use super::{
    fold, shown_events, source_files, thread_frame_name, Labels, ViewFrame, ViewFrameKind,
    ViewOptions,
};
use crate::profile::{Event, Profile, Thread, Unit};

/// profile.proto's messages, their fields numbered as there.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Writes the profile as gzipped profile.proto.
pub fn write(profile: &Profile, options: &ViewOptions, out: &mut impl Write) -> io::Result<()> {
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&to_proto(profile, options).encode_to_vec())?;
    gzip.finish()?;
    Ok(())
}

/// One sample type: an event's stacks weighed by count or by value, scaled (samples to
/// nanoseconds by the sampling period).
struct Column {
    event: Event,
    by_value: bool,
    scale: u64,
    type_name: String,
    unit: &'static str,
}

/// The sample types of an event. Sampled events: the samples, and their time when the period
/// is known. Events measured in bytes or nanoseconds: the value, and the count beside it.
/// Counted events: the count. The second return is the column `--total` (or not) shows first.
fn columns_of(event: Event, period_ns: Option<u64>, total: bool) -> (Vec<Column>, usize) {
    let name = event.name();
    let column = |by_value, scale, type_name: String, unit| Column {
        event,
        by_value,
        scale,
        type_name,
        unit,
    };
    match event.unit() {
        Unit::Samples => {
            let mut columns = vec![column(false, 1, format!("{name}_samples"), "count")];
            if let Some(period) = period_ns.filter(|period| *period > 0) {
                columns.push(column(false, period, name.into(), "nanoseconds"));
            }
            let shown = if total { columns.len() - 1 } else { 0 };
            (columns, shown)
        }
        Unit::Count => (vec![column(false, 1, name.into(), "count")], 0),
        unit @ (Unit::Bytes | Unit::Nanoseconds) => (
            vec![
                column(true, 1, name.into(), unit.name()),
                column(false, 1, format!("{name}_count"), "count"),
            ],
            usize::from(!total),
        ),
    }
}

/// profile.proto's string table: index 0 is the empty string, each string once.
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            ids: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, text: &str) -> i64 {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let id = self.table.len() as i64;
        self.table.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

/// The profile as profile.proto's messages. Every event shown is folded by itself (per thread
/// and with labels, for pprof's labels) and its stacks merged with the other events' by frames,
/// thread and labels.
pub fn to_proto(profile: &Profile, options: &ViewOptions) -> proto::Profile {
    let mut strings = Strings::new();
    let mut columns: Vec<Column> = Vec::new();
    let mut shown_column = 0;
    let shown_event = options.event.or_else(|| profile.default_event());
    for event in shown_events(profile, options) {
        let (event_columns, shown) = columns_of(event, profile.period_ns, options.total);
        if Some(event) == shown_event {
            shown_column = columns.len() + shown;
        }
        columns.extend(event_columns);
    }

    // pprof shows lines: a location is a method at a line, a function the method.
    let options = &ViewOptions {
        with_lines: true,
        ..options.clone()
    };
    let files = source_files(profile, options);
    let mut function_ids: HashMap<ViewFrame, u64> = HashMap::new();
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut location_ids: HashMap<ViewFrame, u64> = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    // (locations leaf first, thread root, labels) -> a value per column.
    type Key = (Vec<u64>, ViewFrame, Labels);
    let mut samples: HashMap<Key, Vec<i64>> = HashMap::new();
    let mut order: Vec<Key> = Vec::new();
    for (index, column) in columns.iter().enumerate() {
        let folded = fold(
            profile,
            &ViewOptions {
                event: Some(column.event),
                total: column.by_value,
                by_thread: true,
                with_labels: true,
                ..options.clone()
            },
        );
        for ((stack, weight), labels) in folded.stacks.iter().zip(&folded.labels) {
            // fold puts the thread first; it stays a frame only when the view asks for threads.
            let Some((root, rest)) = stack.split_first() else {
                continue;
            };
            let thread = folded.frame(*root).clone();
            let frames = if options.by_thread { &stack[..] } else { rest };
            let stack_locations: Vec<u64> = frames
                .iter()
                .rev()
                .map(|id| {
                    let frame = folded.frame(*id);
                    if let Some(id) = location_ids.get(frame) {
                        return *id;
                    }
                    let method = ViewFrame {
                        line: None,
                        ..frame.clone()
                    };
                    let function_id = match function_ids.get(&method) {
                        Some(id) => *id,
                        None => {
                            let id = functions.len() as u64 + 1;
                            let name = strings.id(&method.name);
                            let filename = files.get(frame).map_or(0, |file| strings.id(file));
                            functions.push(proto::Function {
                                id,
                                name,
                                system_name: name,
                                filename,
                                start_line: 0,
                            });
                            function_ids.insert(method, id);
                            id
                        }
                    };
                    // A frame is a method's line at an unknown address.
                    let id = locations.len() as u64 + 1;
                    locations.push(proto::Location {
                        id,
                        mapping_id: 1,
                        line: vec![proto::Line {
                            function_id,
                            line: frame.line.map_or(0, i64::from),
                            column: 0,
                        }],
                        ..proto::Location::default()
                    });
                    location_ids.insert(frame.clone(), id);
                    id
                })
                .collect();
            let key = (stack_locations, thread, labels.clone());
            let values = samples.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                vec![0; columns.len()]
            });
            let value = weight.saturating_mul(column.scale);
            values[index] = values[index].saturating_add(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    // The threads by the root frames the per-thread folds gave them.
    let threads: HashMap<String, &Thread> = profile
        .threads
        .iter()
        .map(|thread| (thread_frame_name(thread), thread))
        .collect();
    let thread_key = strings.id("thread");
    let thread_id_key = strings.id("thread_id");
    let sample = order
        .into_iter()
        .map(|key| {
            let value = samples.remove(&key).unwrap_or_default();
            let (location_id, thread, labels) = key;
            let mut label = Vec::new();
            let thread = (thread.kind == ViewFrameKind::Thread)
                .then(|| threads.get(&thread.name))
                .flatten();
            if let Some(thread) = thread {
                if !thread.name.is_empty() {
                    label.push(proto::Label {
                        key: thread_key,
                        str: strings.id(&thread.name),
                        ..proto::Label::default()
                    });
                }
                label.push(proto::Label {
                    key: thread_id_key,
                    num: i64::try_from(thread.id).unwrap_or(i64::MAX),
                    ..proto::Label::default()
                });
            }
            label.extend(labels.iter().map(|(key, value)| proto::Label {
                key: strings.id(key),
                str: strings.id(value),
                ..proto::Label::default()
            }));
            proto::Sample {
                location_id,
                value,
                label,
            }
        })
        .collect();
    // The mapping says the functions are known, so that pprof does not try to symbolize.
    let mapping = vec![proto::Mapping {
        id: 1,
        filename: strings.id("[jvm]"),
        has_functions: true,
        has_filenames: !files.is_empty(),
        has_line_numbers: locations.iter().any(|location| location.line[0].line > 0),
        ..proto::Mapping::default()
    }];
    let sample_type = columns
        .iter()
        .map(|column| proto::ValueType {
            r#type: strings.id(&column.type_name),
            unit: strings.id(column.unit),
        })
        .collect();
    let sampled_period = columns
        .iter()
        .find(|column| column.scale > 1)
        .map(|column| (column.type_name.clone(), column.scale));
    let (period_type, period) = match sampled_period {
        Some((type_name, period)) => (
            Some(proto::ValueType {
                r#type: strings.id(&type_name),
                unit: strings.id("nanoseconds"),
            }),
            i64::try_from(period).unwrap_or(i64::MAX),
        ),
        None => (None, 0),
    };
    let default_sample_type = columns
        .get(shown_column)
        .map_or(0, |column| strings.id(&column.type_name));
    let comment = vec![strings.id(&format!("openprof: {}", profile.source))];
    proto::Profile {
        sample_type,
        sample,
        mapping,
        location: locations,
        function: functions,
        time_nanos: profile
            .start_epoch_ns
            .map_or(0, |ns| i64::try_from(ns).unwrap_or(i64::MAX)),
        duration_nanos: profile
            .duration_ns
            .map_or(0, |ns| i64::try_from(ns).unwrap_or(i64::MAX)),
        period_type,
        period,
        comment,
        default_sample_type,
        string_table: strings.table,
        ..proto::Profile::default()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;
    use crate::profile::{Frame, Sample};

    fn profile() -> Profile {
        let mut profile = Profile::new("test.txt");
        let hot = profile.stack_of_frames_leaf_first([
            Frame {
                name: "Hot.spin".into(),
                file: Some("Hot.java".into()),
                line: Some(7),
                kind: crate::profile::FrameKind::Java,
            },
            Frame::java("java.lang.Thread.run"),
        ]);
        let cold = profile.stack_of_frames_leaf_first([Frame::java("Hot.rest")]);
        let main = profile.thread_id(1, "main");
        let worker = profile.thread_id(2, "worker");
        for (stack, event, value, count, thread) in [
            (hot, Event::Cpu, 3, 3, Some(main)),
            (cold, Event::Cpu, 1, 1, Some(worker)),
            (hot, Event::AllocBytes, 4096, 2, Some(main)),
            (cold, Event::AllocBytes, 1024, 1, None),
        ] {
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
        profile.add_sample(Sample {
            stack: cold,
            event: Event::Cpu,
            value: 2,
            count: 2,
            thread: Some(worker),
            time_ns: None,
            labels: vec![("state".into(), "blocked".into())],
        });
        profile.period_ns = Some(10_000_000);
        profile.start_epoch_ns = Some(1_700_000_000_000_000_000);
        profile.duration_ns = Some(2_000_000_000);
        profile
    }

    /// Our bytes, gunzipped and decoded again by prost.
    fn written(profile: &Profile, options: &ViewOptions) -> proto::Profile {
        let mut bytes = Vec::new();
        write(profile, options, &mut bytes).unwrap();
        let mut raw = Vec::new();
        GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        proto::Profile::decode(raw.as_slice()).unwrap()
    }

    fn string(profile: &proto::Profile, id: i64) -> &str {
        &profile.string_table[usize::try_from(id).unwrap()]
    }

    fn types(profile: &proto::Profile) -> Vec<(String, String)> {
        profile
            .sample_type
            .iter()
            .map(|t| {
                (
                    string(profile, t.r#type).into(),
                    string(profile, t.unit).into(),
                )
            })
            .collect()
    }

    /// The function names of a sample, leaf first.
    fn names(profile: &proto::Profile, sample: &proto::Sample) -> Vec<String> {
        sample
            .location_id
            .iter()
            .map(|id| {
                let location = profile.location.iter().find(|l| l.id == *id).unwrap();
                let function_id = location.line[0].function_id;
                let function = profile
                    .function
                    .iter()
                    .find(|f| f.id == function_id)
                    .unwrap();
                string(profile, function.name).to_string()
            })
            .collect()
    }

    #[test]
    fn decodes_with_a_sound_structure() {
        let decoded = written(&profile(), &ViewOptions::default());
        assert_eq!(decoded.string_table[0], "");
        assert!(decoded.mapping.iter().all(|m| m.id != 0));
        assert!(decoded.function.iter().all(|f| f.id != 0));
        for location in &decoded.location {
            assert_ne!(location.id, 0);
            assert!(decoded.mapping.iter().any(|m| m.id == location.mapping_id));
            assert!(location
                .line
                .iter()
                .all(|line| decoded.function.iter().any(|f| f.id == line.function_id)));
        }
        let strings = decoded.string_table.len() as i64;
        for function in &decoded.function {
            assert!((1..strings).contains(&function.name));
            assert!((0..strings).contains(&function.filename));
        }
        for sample in &decoded.sample {
            assert_eq!(sample.value.len(), decoded.sample_type.len());
            assert!(sample
                .location_id
                .iter()
                .all(|id| decoded.location.iter().any(|l| l.id == *id)));
        }
        assert_eq!(decoded.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(decoded.duration_nanos, 2_000_000_000);
        assert_eq!(decoded.period, 10_000_000);
        let period_type = decoded.period_type.clone().unwrap();
        assert_eq!(string(&decoded, period_type.r#type), "cpu");
        assert_eq!(string(&decoded, period_type.unit), "nanoseconds");
    }

    #[test]
    fn every_event_is_a_sample_type_merged_by_stack() {
        let decoded = written(&profile(), &ViewOptions::default());
        assert_eq!(
            types(&decoded),
            [
                ("cpu_samples".into(), "count".into()),
                ("cpu".into(), "nanoseconds".into()),
                ("alloc_bytes".into(), "bytes".into()),
                ("alloc_bytes_count".into(), "count".into()),
            ]
        );
        assert_eq!(string(&decoded, decoded.default_sample_type), "cpu_samples");
        let hot = decoded
            .sample
            .iter()
            .find(|sample| names(&decoded, sample)[0] == "Hot.spin")
            .unwrap();
        assert_eq!(names(&decoded, hot), ["Hot.spin", "java.lang.Thread.run"]);
        assert_eq!(hot.value, [3, 30_000_000, 4096, 2]);
        let thread = &hot.label[0];
        assert_eq!(string(&decoded, thread.key), "thread");
        assert_eq!(string(&decoded, thread.str), "main");
        assert_eq!(hot.label[1].num, 1);
        // The cold stack once per thread and labels: on the worker (CPU) without and with the
        // state label, and on no thread (bytes).
        let cold: Vec<&proto::Sample> = decoded
            .sample
            .iter()
            .filter(|sample| names(&decoded, sample) == ["Hot.rest"])
            .collect();
        assert_eq!(cold.len(), 3);
        let values: i64 = cold.iter().map(|sample| sample.value[0]).sum();
        assert_eq!(values, 3);
        let labels = |sample: &proto::Sample| -> Vec<(String, String)> {
            sample
                .label
                .iter()
                .filter(|label| label.str != 0)
                .map(|label| {
                    (
                        string(&decoded, label.key).to_string(),
                        string(&decoded, label.str).to_string(),
                    )
                })
                .collect()
        };
        let blocked = cold
            .iter()
            .find(|sample| labels(sample).len() == 2)
            .unwrap();
        assert_eq!(
            labels(blocked),
            [
                ("thread".into(), "worker".into()),
                ("state".into(), "blocked".into())
            ]
        );
        assert_eq!(blocked.value[0], 2);
        let unlabelled = cold.iter().find(|sample| sample.label.is_empty()).unwrap();
        assert_eq!(unlabelled.value, [0, 0, 1024, 1]);
        let function = decoded
            .function
            .iter()
            .find(|f| string(&decoded, f.name) == "Hot.spin")
            .unwrap();
        assert_eq!(string(&decoded, function.filename), "Hot.java");
    }

    #[test]
    fn one_event_when_asked_with_threads_as_frames() {
        let options = ViewOptions {
            event: Some(Event::AllocBytes),
            total: true,
            by_thread: true,
            ..ViewOptions::default()
        };
        let decoded = written(&profile(), &options);
        assert_eq!(
            types(&decoded),
            [
                ("alloc_bytes".into(), "bytes".into()),
                ("alloc_bytes_count".into(), "count".into()),
            ]
        );
        assert_eq!(string(&decoded, decoded.default_sample_type), "alloc_bytes");
        assert!(decoded.period_type.is_none());
        let roots: Vec<String> = decoded
            .sample
            .iter()
            .map(|sample| names(&decoded, sample).last().unwrap().clone())
            .collect();
        assert!(roots.contains(&"[main tid=1]".to_string()), "{roots:?}");
        assert!(roots.contains(&"[unknown thread]".to_string()), "{roots:?}");
        let total: i64 = decoded.sample.iter().map(|sample| sample.value[0]).sum();
        assert_eq!(total, 5120);
    }
}
