//! HPROF's text output (`format=a`): the records, one writer and one reader.
//!
//! The layouts follow the JDK's HPROF agent to the character, so that eyes and tools that read
//! HPROF read ours. openprof adds records of its own: `CPU SAMPLER BEGIN … END`, documented in
//! docs/hprof-text.md, how the samples were taken and how many walks failed; and `MPT BEGIN …
//! END`, method parameter tracing's figures, documented in docs/mpt.md and written and read in
//! [`mpt`], with `MPT SAMPLES BEGIN … END`, the samples taken inside traced calls, in
//! [`mpt_samples`]. The heap records are in `sites` (`SITES`) and `heap_dump` (`HEAP DUMP`), re-exported
//! here. A TRACE of CPU samples may also hold frames of native code, `symbol(library:native)`,
//! and end in a failed walk's mark, `[reason](failed walk)` (docs/hprof-text.md).
//!
//! - [`model`]: the records as Rust types, and the profile a file reads into.
//! - [`writer`]: [`TextWriter`], the header and the thread, trace and CPU records.
//! - [`reader`]: [`read`], line by line, heap dumps summed as they are read.

mod heap_dump;
pub mod model;
pub mod mpt;
pub mod mpt_samples;
pub mod reader;
mod sites;
pub mod writer;

pub use self::heap_dump::{TextClass, TextInstance, TextObjectArray, TextPrimitiveArray, TextRoot};
pub use self::model::*;
use self::reader::{cut, malformed, parse_number};
pub use self::reader::{read, read_passing_traces, read_with_progress, TextReadError};
pub use self::sites::{SiteEntry, SiteRow, SiteTotals, SitesOrder, SitesTable};
pub use self::writer::TextWriter;
