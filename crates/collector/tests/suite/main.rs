//! The collector's integration tests, as one test binary: the store on disk, driven through
//! its public interface.

mod store;
