//! Profile windows read back from an agent's HPROF binary stream as it arrives: each CPU
//! SAMPLES record (one `continuous=` window, or one dump) becomes the samples per stack it
//! counts, its frames named, timed by the frame that brought it.
//!
//! The stream is fed frame by frame; a record cut between frames waits for the rest. Only what
//! names stacks is kept (strings, classes, frames, traces: as many as the agent's distinct
//! stacks), so a decoder that keeps up with an agent for hours holds what its stacks need, not
//! what its windows held.

use std::collections::HashMap;
use std::io::Cursor;

use openprof_format::hprof_binary::{HprofReader, Item, Record};

/// HPROF's binary header: its format name with a NUL, the identifier size, the time.
const HEADER_TAIL: usize = 4 + 8;
/// A record's tag, time and length.
const RECORD_HEAD: usize = 9;
const TAG_HEAP_DUMP: u8 = 0x0c;
const TAG_HEAP_DUMP_SEGMENT: u8 = 0x1c;

/// One window: CPU samples by stack.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// The sequence number of the frame its record ended in, and its place among the windows
    /// ending in that frame: together, the window's identity in the agent's stream.
    pub sequence: u64,
    pub ordinal: u32,
    /// When the collector received that frame, ns since the epoch.
    pub received_ns: u64,
    /// Each stack (frames outermost first, as `package.Class.method`) with its samples.
    pub stacks: Vec<(Vec<String>, u64)>,
}

/// Reads an agent's HPROF binary stream into windows, frame by frame.
#[derive(Default)]
pub struct WindowDecoder {
    /// The stream's header, once whole: prefixed to each record so the format's reader reads it.
    header: Option<Vec<u8>>,
    /// Bytes not decoded yet (the start of a record cut between frames).
    pending: Vec<u8>,
    strings: HashMap<u64, String>,
    /// Class serial → the class's name (string id).
    classes: HashMap<u32, u64>,
    /// Frame id → (method name id, class serial).
    frames: HashMap<u64, (u64, u32)>,
    /// Trace serial → frame ids, innermost first.
    traces: HashMap<u32, Vec<u64>>,
}

impl WindowDecoder {
    /// Takes the body of one Hprof frame; returns the windows whose records it completed.
    pub fn feed(
        &mut self,
        body: &[u8],
        sequence: u64,
        received_ns: u64,
    ) -> Result<Vec<Window>, String> {
        self.pending.extend_from_slice(body);
        if self.header.is_none() {
            let Some(nul) = self.pending.iter().position(|&byte| byte == 0) else {
                return Ok(Vec::new());
            };
            if !self.pending.starts_with(b"JAVA PROFILE ") {
                return Err("the agent's stream is not HPROF binary".into());
            }
            if self.pending.len() < nul + 1 + HEADER_TAIL {
                return Ok(Vec::new());
            }
            let header: Vec<u8> = self.pending.drain(..nul + 1 + HEADER_TAIL).collect();
            self.header = Some(header);
        }
        let mut windows = Vec::new();
        let mut at = 0;
        while self.pending.len() - at >= RECORD_HEAD {
            let head = &self.pending[at..at + RECORD_HEAD];
            let length = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
            let end = at + RECORD_HEAD + length;
            if self.pending.len() < end {
                break;
            }
            let tag = head[0];
            if tag != TAG_HEAP_DUMP && tag != TAG_HEAP_DUMP_SEGMENT {
                let record = self.read_record(at, end)?;
                if let Some(stacks) = self.take(record) {
                    windows.push(Window {
                        sequence,
                        ordinal: windows.len() as u32,
                        received_ns,
                        stacks,
                    });
                }
            }
            at = end;
        }
        self.pending.drain(..at);
        Ok(windows)
    }

    fn read_record(&self, start: usize, end: usize) -> Result<Option<Record>, String> {
        let header = self.header.as_deref().unwrap_or_default();
        let mut bytes = Vec::with_capacity(header.len() + end - start);
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&self.pending[start..end]);
        let mut reader = HprofReader::new(Cursor::new(bytes)).map_err(|error| error.to_string())?;
        match reader.next_item() {
            Some(Ok(Item::Record(record))) => Ok(Some(record)),
            Some(Ok(_)) | None => Ok(None),
            Some(Err(error)) => Err(error.to_string()),
        }
    }

    /// Keeps what names stacks; a CPU SAMPLES record comes back as its stacks.
    fn take(&mut self, record: Option<Record>) -> Option<Vec<(Vec<String>, u64)>> {
        match record? {
            Record::Utf8 { id, text } => {
                self.strings
                    .insert(id, String::from_utf8_lossy(&text).into_owned());
            }
            Record::LoadClass {
                class_serial,
                name_id,
                ..
            } => {
                self.classes.insert(class_serial, name_id);
            }
            Record::StackFrame {
                frame_id,
                method_name_id,
                class_serial,
                ..
            } => {
                self.frames.insert(frame_id, (method_name_id, class_serial));
            }
            Record::StackTrace {
                stack_serial,
                frames,
                ..
            } => {
                self.traces.insert(stack_serial, frames);
            }
            Record::CpuSamples { traces, .. } => {
                let mut counts: HashMap<Vec<String>, u64> = HashMap::new();
                for (count, trace) in traces {
                    *counts.entry(self.stack(trace)).or_default() += u64::from(count);
                }
                let mut stacks: Vec<(Vec<String>, u64)> = counts.into_iter().collect();
                stacks.sort();
                return Some(stacks);
            }
            _ => {}
        }
        None
    }

    /// A trace's frames, outermost first, as `package.Class.method`.
    fn stack(&self, trace: u32) -> Vec<String> {
        let Some(frames) = self.traces.get(&trace) else {
            return vec![format!("<unknown trace {trace}>")];
        };
        frames
            .iter()
            .rev()
            .map(|frame| {
                let Some(&(method, class)) = self.frames.get(frame) else {
                    return "<unknown frame>".to_string();
                };
                let method = self.strings.get(&method).map_or("?", String::as_str);
                let class = self
                    .classes
                    .get(&class)
                    .and_then(|name| self.strings.get(name))
                    .map(|name| name.replace('/', "."));
                match class {
                    Some(class) if !class.is_empty() => format!("{class}.{method}"),
                    _ => method.to_string(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openprof_format::hprof_binary::HprofWriter;

    /// A stream with two windows of two stacks, as the agent writes them.
    fn stream() -> Vec<u8> {
        let mut writer = HprofWriter::new(Vec::new(), 8, 0).unwrap();
        for record in [
            Record::Utf8 {
                id: 1,
                text: b"Split".to_vec(),
            },
            Record::Utf8 {
                id: 2,
                text: b"heavy".to_vec(),
            },
            Record::Utf8 {
                id: 3,
                text: b"main".to_vec(),
            },
            Record::LoadClass {
                class_serial: 1,
                class_id: 100,
                stack_serial: 0,
                name_id: 1,
            },
            Record::StackFrame {
                frame_id: 10,
                method_name_id: 2,
                signature_id: 0,
                source_id: 0,
                class_serial: 1,
                line: 1,
            },
            Record::StackFrame {
                frame_id: 11,
                method_name_id: 3,
                signature_id: 0,
                source_id: 0,
                class_serial: 1,
                line: 2,
            },
            Record::StackTrace {
                stack_serial: 1,
                thread_serial: 1,
                frames: vec![10, 11],
            },
            Record::StackTrace {
                stack_serial: 2,
                thread_serial: 1,
                frames: vec![11],
            },
            Record::CpuSamples {
                total: 4,
                traces: vec![(3, 1), (1, 2)],
            },
            Record::CpuSamples {
                total: 2,
                traces: vec![(2, 1)],
            },
        ] {
            writer.record(&record).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn windows_come_out_whole_however_the_stream_is_cut() {
        let bytes = stream();
        for frame_size in [1, 7, 64, bytes.len()] {
            let mut decoder = WindowDecoder::default();
            let mut windows = Vec::new();
            for (sequence, body) in bytes.chunks(frame_size).enumerate() {
                windows.extend(decoder.feed(body, sequence as u64 + 1, 0).unwrap());
            }
            let stacks: Vec<_> = windows.iter().map(|window| window.stacks.clone()).collect();
            let heavy = vec!["Split.main".to_string(), "Split.heavy".to_string()];
            let main = vec!["Split.main".to_string()];
            assert_eq!(
                stacks,
                vec![vec![(main, 1), (heavy.clone(), 3)], vec![(heavy, 2)]],
                "frames of {frame_size} bytes"
            );
        }
    }

    #[test]
    fn a_stream_that_is_not_hprof_binary_is_refused() {
        let mut decoder = WindowDecoder::default();
        let error = decoder.feed(b"<trace>\0 and more", 1, 0).unwrap_err();
        assert!(error.contains("not HPROF binary"), "{error}");
    }
}
