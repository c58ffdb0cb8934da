//! Readers of every input a profile comes from, into the one profile model.

pub mod hprof;
pub mod jfr;
pub mod trace;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use openprof_format::{hprof_binary, hprof_text};

use crate::profile::Profile;

/// Why an input could not be read: the file and what was wrong, where possible at which
/// offset.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("can't read {file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file} is not a readable {format}: {message}")]
    Malformed {
        file: String,
        format: &'static str,
        message: String,
    },
    #[error(
        "{file}: unknown input format (openprof reads HPROF text and binary profiles, traces \
         (format=x) and JFR recordings)"
    )]
    Unknown { file: String },
}

/// What kind of input a file is, told by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    HprofText,
    HprofBinary,
    /// Our XML trace (format=x).
    Trace,
    Jfr,
}

/// Tells an input's kind from its first bytes.
pub fn sniff(start: &[u8]) -> Option<InputKind> {
    if start.starts_with(b"FLR\0") {
        Some(InputKind::Jfr)
    } else if start.starts_with(b"JAVA PROFILE ") {
        if start.iter().take(64).any(|&byte| byte == 0) {
            Some(InputKind::HprofBinary)
        } else {
            Some(InputKind::HprofText)
        }
    } else if xml_start(start) {
        Some(InputKind::Trace)
    } else {
        None
    }
}

/// Whether the bytes start with `<` after an optional byte order mark and white space, as an
/// XML trace does.
fn xml_start(start: &[u8]) -> bool {
    let start = start.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(start);
    start
        .iter()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|&byte| byte == b'<')
}

/// Reads any input openprof knows into the profile model, reporting progress in bytes read.
pub fn read_file(path: &Path, progress: &mut dyn FnMut(u64)) -> Result<Profile, InputError> {
    let file = path.display().to_string();
    let io_error = |source| InputError::Io {
        file: file.clone(),
        source,
    };
    let input = fs::File::open(path).map_err(io_error)?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let kind = sniff(input.fill_buf().map_err(io_error)?);
    match kind {
        Some(InputKind::HprofText) => {
            let mut ingest = hprof::HprofIngest::new(&file);
            let hprof = hprof_text::read_passing_traces(
                input,
                progress,
                Some(&mut |trace| ingest.trace(trace)),
            )
            .map_err(|error| InputError::Malformed {
                file: file.clone(),
                format: "HPROF text profile",
                message: error.to_string(),
            })?;
            Ok(ingest.finish(&hprof))
        }
        Some(InputKind::HprofBinary) => {
            let hprof = hprof_binary::read_profile(input, progress).map_err(|error| {
                InputError::Malformed {
                    file: file.clone(),
                    format: "HPROF binary profile",
                    message: error.to_string(),
                }
            })?;
            Ok(hprof::from_hprof(&hprof, &file))
        }
        Some(InputKind::Trace) => trace::from_trace(input, &file, progress),
        Some(InputKind::Jfr) => {
            let length = fs::metadata(path).map_err(io_error)?.len();
            jfr::from_jfr_reader(input, length, &file, progress).map_err(|error| {
                InputError::Malformed {
                    file: file.clone(),
                    format: "JFR recording",
                    message: error.to_string(),
                }
            })
        }
        None => Err(InputError::Unknown { file }),
    }
}
