//! HPROF's binary format ("JAVA PROFILE 1.0.2", `format=b`, and the JDK's `jcmd GC.heap_dump`).
//!
//! - [`records`]: tags, basic types, and one type per record and heap-dump sub-record.
//! - [`writer`]: [`HprofWriter`], heap dumps cut into segments.
//! - [`reader`]: [`HprofReader`], a streaming reader that reports bad input by byte offset.
//! - [`profile`]: [`read_profile`], a whole file read into the text reader's model.

pub mod profile;
pub mod reader;
pub mod records;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
pub mod writer;

pub use profile::{binary_class_name, read_profile, SITES_INCREMENTAL, SITES_SORTED_BY_ALLOCATION};
pub use reader::{Header, HprofError, HprofReader};
pub use records::*;
pub use writer::HprofWriter;
