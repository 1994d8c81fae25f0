//! The boundary with nginx's C structures, so that the rest of the module
//! is safe code over typed values: the request's entries and helpers
//! ([`req`]), the configuration's ([`conf_ext`]), output headers
//! ([`headers`]), a key's request header ([`header_in`]), variable values
//! ([`vars`]), the hidden variables that
//! survive internal redirects ([`hidden`]) and the two things kept in them
//! (the [`access`] mark, the record's place in [`pool`] memory), and the
//! process: clock, cycle, timers ([`process`]); the request's bit-fields,
//! read and written by C compiled against the nginx tree ([`request_bits`]).

pub mod access;
pub mod conf_ext;
pub mod header_in;
pub mod headers;
pub mod hidden;
pub mod pool;
pub mod process;
pub mod req;
pub mod request_bits;
pub mod session;
pub mod stream_conf;
pub mod stream_weak;
pub mod vars;
