//! What the tests and benchmarks share, behind the `testing` feature (and
//! in this crate's own unit tests): the exact reference models
//! ([`reference`]).

pub mod reference;
