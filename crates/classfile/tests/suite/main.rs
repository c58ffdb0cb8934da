//! The class-file rewriter's integration tests, as one test binary: rewritten classes run on
//! a real JVM.

mod rewrite;
