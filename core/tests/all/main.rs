//! The core's integration tests, one binary (one link, one copy of the
//! shared generic code and of proptest's): a module per topic. Run one
//! with `cargo test -p rate_limit_window_core --test all -- model::`.
mod calendar;
mod capacity;
mod cost;
#[cfg(unix)]
mod cross_process;
mod dst;
mod eviction;
mod fuzz_regressions;
mod long_windows;
mod model;
mod parse;
mod slots_used;
mod strict;
mod strict_table;
