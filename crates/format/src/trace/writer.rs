//! The one trace writer: elements as XML fragments on a stream, or as a TRACE document.

use std::io::{self, Write};

use super::TraceElement;

/// The XML declaration and root that open a TRACE document.
pub const DOCUMENT_HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<TRACE>\n";
/// What closes a TRACE document.
pub const DOCUMENT_TAIL: &str = "</TRACE>\n";

/// Writes trace elements, one per line, buffering up to 64 KiB between writes to the sink.
pub struct TraceWriter<W: Write> {
    out: W,
    buffer: String,
    document: bool,
}

const FLUSH_AT: usize = 64 * 1024;

impl<W: Write> TraceWriter<W> {
    /// A writer of bare fragments, for streams.
    pub fn fragments(out: W) -> Self {
        TraceWriter {
            out,
            buffer: String::with_capacity(FLUSH_AT + 4096),
            document: false,
        }
    }

    /// A writer of one TRACE document; [`TraceWriter::finish`] closes it.
    pub fn document(out: W) -> Self {
        let mut writer = Self::fragments(out);
        writer.document = true;
        writer.buffer.push_str(DOCUMENT_HEAD);
        writer
    }

    pub fn write(&mut self, element: &TraceElement) -> io::Result<()> {
        element.write(&mut self.buffer);
        self.buffer.push('\n');
        if self.buffer.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(self.buffer.as_bytes())?;
        self.buffer.clear();
        self.out.flush()
    }

    /// Closes the document (if this is one), flushes, and hands the sink back.
    pub fn finish(mut self) -> io::Result<W> {
        if self.document {
            self.buffer.push_str(DOCUMENT_TAIL);
        }
        self.flush()?;
        Ok(self.out)
    }
}
