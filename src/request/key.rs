//! A zone's key for the request, as its zone reads it: one variable (a
//! header read as nginx's variable reads it, or the variable's value) or
//! a complex value.

use ngx::http::Request;

use crate::ffi::{header_in, vars};
use crate::zone::ZoneConf;

/// The zone's key for the request (empty: the limit does not apply).
/// Err(()) is an nginx error while evaluating it. The bytes live in the
/// request's pool or its headers, as long as the request (`'p`).
#[inline(always)]
pub(super) fn eval_key<'p>(r: &mut Request, zone: &ZoneConf) -> Result<&'p [u8], ()> {
    if let Some(index) = zone.key_index {
        // A key that is one variable: the same value the script engine
        // would copy out (a cacheable variable is evaluated once per
        // request, a non-cacheable one again), without the copy.
        if let Some(name) = zone.key_header.as_ref() {
            // SAFETY: the index was obtained at configuration time and the
            // header's name for it at init; the request is valid.
            return unsafe { header_in::header_key(r, index, name) }.ok_or(());
        }
        // SAFETY: the index was obtained at configuration time; the
        // request is valid.
        let v = unsafe { vars::flushed_variable(r, index) };
        // SAFETY: a non-null result is the request's variable value, whose
        // data lives as long as the request.
        return match unsafe { v.as_ref() } {
            None => Err(()),
            // SAFETY: as above.
            Some(v) => Ok(unsafe { vars::variable_bytes(v) }),
        };
    }
    eval_complex_key(r, zone)
}

/// [`eval_key`] of a key that is not one variable (the script engine), out
/// of line.
#[inline(never)]
fn eval_complex_key<'p>(r: &mut Request, zone: &ZoneConf) -> Result<&'p [u8], ()> {
    let key = r.get_complex_value(&zone.key).ok_or(())?.as_bytes();
    // SAFETY: the value lives in the request's pool, as long as the
    // request; only the borrow of `r` is shortened away.
    Ok(unsafe { core::slice::from_raw_parts(key.as_ptr(), key.len()) })
}
