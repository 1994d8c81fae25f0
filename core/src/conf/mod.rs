//! The directives' words, parsed and checked in pure Rust: the value
//! syntax ([`parse`], over [`crate::units`]), `rate_limit_window`'s words
//! ([`limit_opts`]), `rate_limit_window_zone`'s ([`zone_opts`], with
//! [`override_opts`] and [`redis_url`]), client addresses ([`addr`]), and
//! the errors that say what to do ([`error`], [`value_error`]).

pub mod addr;
pub mod error;
pub mod limit_opts;
pub mod override_opts;
pub mod parse;
pub mod redis_url;
pub mod shed_opts;
pub mod value_error;
pub mod zone_opts;
