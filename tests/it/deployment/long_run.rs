//! The long-running deployment test (see mod.rs).
