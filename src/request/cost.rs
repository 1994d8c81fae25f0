//! `cost=N|$variable`: how many requests one request counts (default 1).
//!
//! A request is admitted only if its whole cost fits under the limit in
//! force (as that many single requests sent back to back would), and then
//! counts its cost (see
//! [`Table::acquire_cost`](rate_limit_window_core::Table::acquire_cost)).
//! This file only reads the value: what a bad one means (`fail=`) and what
//! a cost above the limit in force means (it never fits: rejected) are the
//! core engine's.

use nginx_sys::ngx_http_complex_value_t;
use ngx::http::Request;
use rate_limit_window_core::conf::limit_opts::parse_cost;
use rate_limit_window_core::engine::Cost;

pub use crate::conf::value::ConfValue as CostValue;

/// The request's cost, as read: a count of 1 or more, or invalid (empty,
/// not an integer, 0, too large). Err(()) is an nginx error while
/// evaluating the variable. Logs nothing: the engine asks again for the
/// waits of other limits.
#[inline]
pub fn eval(r: &mut Request, value: CostValue) -> Result<Cost, ()> {
    match value {
        CostValue::Fixed(n) => Ok(Cost::Count(n)),
        CostValue::Variable(cv) => Ok(parse_cost(text(r, cv)?).map_or(Cost::Invalid, Cost::Count)),
    }
}

/// The value of `cv` for the request (request pool memory).
fn text<'r>(r: &mut Request, cv: *mut ngx_http_complex_value_t) -> Result<&'r [u8], ()> {
    // SAFETY: cv was compiled into the configuration pool, which outlives
    // every request of the cycle.
    let b = r.get_complex_value(unsafe { &*cv }).ok_or(())?.as_bytes();
    // SAFETY: the value lives in the request's pool, as long as the
    // request; only the borrow of `r` is shortened away.
    Ok(unsafe { core::slice::from_raw_parts(b.as_ptr(), b.len()) })
}
