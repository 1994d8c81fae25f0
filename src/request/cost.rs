//! `cost=N|$variable`: how many requests one request counts (default 1).
//!
//! A request is admitted only if its cost fits under the limit (as that
//! many single requests sent back to back would), and then counts its cost
//! (see [`Table::acquire_cost`](rate_limit_window_core::Table::acquire_cost)).
//! A cost from a variable that is empty, not an integer, or above the
//! request's limit is handled like a bad `limit=$variable`: logged at
//! `error`, counted in `invalid_limit_total`, and the zone's `fail=` policy
//! applies (open: the limit is skipped; closed: the request is rejected).

use core::sync::atomic::Ordering;

use nginx_sys::ngx_http_complex_value_t;
use ngx::http::Request;
use ngx::ngx_log_error;
use rate_limit_window_core::conf::limit_opts::parse_cost;
use rate_limit_window_core::conf::parse::escape;
use rate_limit_window_core::engine::Cost;
use rate_limit_window_core::FailPolicy;

pub use crate::conf::value::ConfValue as CostValue;
use crate::zone::ZoneConf;

/// The request's cost under `limit` (requests per window), for the engine.
/// Err(()) is an nginx error while evaluating the variable.
#[inline]
pub fn eval(r: &mut Request, zone: &ZoneConf, value: CostValue, limit: u32) -> Result<Cost, ()> {
    // A cost of 1 is the single request, whatever the limit (even 0).
    let fits = |n: u32| n <= limit.max(1);
    let bytes = match value {
        CostValue::Fixed(n) if fits(n) => return Ok(Cost::Count(n)),
        CostValue::Fixed(n) => n.to_string().into_bytes(),
        CostValue::Variable(cv) => {
            let s = text(r, cv)?;
            match parse_cost(s) {
                Ok(n) if fits(n) => return Ok(Cost::Count(n)),
                _ => s.iter().copied().take(64).collect(),
            }
        }
    };
    invalid_cost(r, zone, &bytes, limit);
    Ok(match zone.fail {
        FailPolicy::Open => Cost::Skip,
        FailPolicy::Closed => Cost::Reject,
    })
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

/// The request's cost if valid, else 1, without logging or counting (for
/// the waits and Retry-After of the other limits after a rejection).
pub fn quiet(r: &mut Request, value: CostValue, limit: u32) -> u32 {
    let n = match value {
        CostValue::Fixed(n) => n,
        CostValue::Variable(cv) => match text(r, cv) {
            Ok(s) => parse_cost(s).unwrap_or(1),
            Err(()) => 1,
        },
    };
    if n <= limit.max(1) {
        n
    } else {
        1
    }
}

/// Logs and counts a cost that is not an integer from 1 to the limit.
#[cold]
#[inline(never)]
fn invalid_cost(r: &Request, zone: &ZoneConf, bad: &[u8], limit: u32) {
    ngx_log_error!(
        nginx_sys::NGX_LOG_ERR,
        r.log(),
        "rate_limit_window: invalid cost \"{}\" for zone \"{}\" (an integer from 1 to the limit, {}), \
         applying fail={}",
        escape(bad),
        zone.name_str(),
        limit,
        if zone.fail == FailPolicy::Closed {
            "closed"
        } else {
            "open"
        }
    );
    if let Some(header) = zone.header() {
        header.invalid_limits.fetch_add(1, Ordering::Relaxed);
    }
}
