//! The embedded store: one directory with an SQLite catalog and zstd-compressed segments of
//! the frames exactly as received.
