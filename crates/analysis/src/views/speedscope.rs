//! speedscope's file format (https://www.speedscope.app/file-format-schema.json): sampled
//! profiles, one per event shown (and per thread in per-thread views), over one shared table of
//! frames.

use std::collections::HashMap;
use std::io::{self, Write};

use serde::Serialize;

use super::{fold, shown_events, source_files, ViewFrame, ViewFrameKind, ViewOptions};
use crate::profile::{Profile, Unit};

pub const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize)]
pub struct File {
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    pub shared: Shared,
    pub profiles: Vec<SampledProfile>,
    pub name: String,
    #[serde(rename = "activeProfileIndex")]
    pub active_profile_index: usize,
    pub exporter: String,
}

#[derive(Serialize)]
pub struct Shared {
    pub frames: Vec<FrameEntry>,
}

#[derive(Serialize)]
pub struct FrameEntry {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

#[derive(Serialize)]
pub struct SampledProfile {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: String,
    pub unit: &'static str,
    #[serde(rename = "startValue")]
    pub start_value: u64,
    #[serde(rename = "endValue")]
    pub end_value: u64,
    /// Each sample's frames (indexes into the shared frames), root first.
    pub samples: Vec<Vec<u32>>,
    pub weights: Vec<u64>,
}

/// Writes the profile as speedscope's JSON.
pub fn write(profile: &Profile, options: &ViewOptions, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &to_file(profile, options))?;
    out.write_all(b"\n")
}

/// The profile as speedscope's file.
pub fn to_file(profile: &Profile, options: &ViewOptions) -> File {
    let files = source_files(profile, options);
    let mut frame_ids: HashMap<ViewFrame, u32> = HashMap::new();
    let mut frames: Vec<FrameEntry> = Vec::new();
    let mut profiles: Vec<SampledProfile> = Vec::new();
    let mut active_profile_index = 0;
    let shown_event = options.event.or_else(|| profile.default_event());
    for event in shown_events(profile, options) {
        let folded = fold(
            profile,
            &ViewOptions {
                event: Some(event),
                ..options.clone()
            },
        );
        // Samples of a sampled event are shown as time when the sampling period is known.
        let (unit, scale) = match (event.unit(), profile.period_ns) {
            (Unit::Samples, Some(period)) if period > 0 => ("nanoseconds", period),
            (Unit::Bytes, _) if options.total => ("bytes", 1),
            (Unit::Nanoseconds, _) if options.total => ("nanoseconds", 1),
            _ => ("none", 1),
        };
        if Some(event) == shown_event {
            active_profile_index = profiles.len();
        }
        // Per-thread views: one profile per thread root, in the order the threads first come.
        let mut by_root: Vec<(Option<u32>, SampledProfile)> = Vec::new();
        for (stack, weight) in &folded.stacks {
            let (root, frames_of_stack) = match stack.split_first() {
                Some((root, rest))
                    if options.by_thread && folded.frame(*root).kind == ViewFrameKind::Thread =>
                {
                    (Some(*root), rest)
                }
                _ => (None, &stack[..]),
            };
            let index = match by_root.iter().position(|(r, _)| *r == root) {
                Some(index) => index,
                None => {
                    let name = match root {
                        Some(root) => format!("{} {}", event.name(), folded.frame(root).name),
                        None => event.name().to_string(),
                    };
                    by_root.push((
                        root,
                        SampledProfile {
                            kind: "sampled",
                            name,
                            unit,
                            start_value: 0,
                            end_value: 0,
                            samples: Vec::new(),
                            weights: Vec::new(),
                        },
                    ));
                    by_root.len() - 1
                }
            };
            let sampled = &mut by_root[index].1;
            let ids = frames_of_stack
                .iter()
                .map(|id| {
                    let frame = folded.frame(*id);
                    *frame_ids.entry(frame.clone()).or_insert_with(|| {
                        frames.push(FrameEntry {
                            name: frame.label().into_owned(),
                            file: files.get(frame).cloned(),
                        });
                        frames.len() as u32 - 1
                    })
                })
                .collect();
            let weight = weight.saturating_mul(scale);
            sampled.samples.push(ids);
            sampled.weights.push(weight);
            sampled.end_value = sampled.end_value.saturating_add(weight);
        }
        profiles.extend(by_root.into_iter().map(|(_, sampled)| sampled));
    }
    File {
        schema: SCHEMA,
        shared: Shared { frames },
        profiles,
        name: options
            .title
            .clone()
            .unwrap_or_else(|| profile.source.clone()),
        active_profile_index,
        exporter: format!("openprof {}", env!("CARGO_PKG_VERSION")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Event, Frame, Sample};

    fn profile() -> Profile {
        let mut profile = Profile::new("test.txt");
        let hot = profile.stack_of_frames_leaf_first([
            Frame::java("Hot.spin"),
            Frame::java("java.lang.Thread.run"),
        ]);
        let cold = profile.stack_of_frames_leaf_first([Frame::java("Hot.rest")]);
        let main = profile.thread_id(1, "main");
        let worker = profile.thread_id(2, "worker");
        for (stack, event, value, thread) in [
            (hot, Event::Cpu, 3, main),
            (cold, Event::Cpu, 1, worker),
            (hot, Event::AllocObjects, 5, main),
        ] {
            profile.add_sample(Sample {
                stack,
                event,
                value,
                count: value,
                thread: Some(thread),
                time_ns: None,
                labels: Vec::new(),
            });
        }
        profile
    }

    fn json(profile: &Profile, options: &ViewOptions) -> serde_json::Value {
        let mut bytes = Vec::new();
        write(profile, options, &mut bytes).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn a_profile_per_event_over_shared_frames() {
        let file = json(&profile(), &ViewOptions::default());
        assert_eq!(file["$schema"], SCHEMA);
        let frames = file["shared"]["frames"].as_array().unwrap();
        let profiles = file["profiles"].as_array().unwrap();
        assert_eq!(profiles.len(), 2);
        let cpu = &profiles[0];
        assert_eq!(cpu["type"], "sampled");
        assert_eq!(cpu["name"], "cpu");
        assert_eq!(cpu["unit"], "none");
        assert_eq!(cpu["endValue"], 4);
        assert_eq!(cpu["weights"], serde_json::json!([3, 1]));
        let hot: Vec<&str> = cpu["samples"][0]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| {
                frames[id.as_u64().unwrap() as usize]["name"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(hot, ["java.lang.Thread.run", "Hot.spin"]);
        assert_eq!(profiles[1]["name"], "alloc_objects");
        // The allocation profile's stack uses the CPU profile's frames.
        assert_eq!(profiles[1]["samples"][0], cpu["samples"][0]);
    }

    #[test]
    fn a_profile_per_thread_and_time_when_the_period_is_known() {
        let mut profile = profile();
        profile.period_ns = Some(1_000_000);
        let options = ViewOptions {
            event: Some(Event::Cpu),
            by_thread: true,
            ..ViewOptions::default()
        };
        let file = json(&profile, &options);
        let profiles = file["profiles"].as_array().unwrap();
        let names: Vec<&str> = profiles
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["cpu [main tid=1]", "cpu [worker tid=2]"]);
        assert_eq!(profiles[0]["unit"], "nanoseconds");
        assert_eq!(profiles[0]["endValue"], 3_000_000);
        assert_eq!(profiles[0]["samples"][0].as_array().unwrap().len(), 2);
    }
}
