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

use nginx_sys::{ngx_http_complex_value, ngx_http_complex_value_t, ngx_http_request_t, ngx_str_t};
use ngx::core::Status;
use ngx::ngx_log_error;
use rate_limit_window_core::limit_opts::parse_cost;
use rate_limit_window_core::parse::escape;
use rate_limit_window_core::FailPolicy;

pub use crate::conf_value::ConfValue as CostValue;
use crate::zone::ZoneConf;

/// What a request's cost came to.
pub enum Cost {
    /// Count this many requests (1 or more, at most the limit).
    Count(u32),
    /// Invalid under `fail=open`: the limit does not apply.
    Skip,
    /// Invalid under `fail=closed`: reject the request.
    Reject,
}

/// The request's cost under `limit` (requests per window). Err(()) is an
/// nginx error while evaluating the variable.
///
/// # Safety
/// `r` must be a valid request.
#[inline]
pub unsafe fn eval(
    r: *mut ngx_http_request_t,
    zone: &ZoneConf,
    value: CostValue,
    limit: u32,
) -> Result<Cost, ()> {
    // A cost of 1 is the single request, whatever the limit (even 0).
    let fits = |n: u32| n <= limit.max(1);
    let bytes = match value {
        CostValue::Fixed(n) if fits(n) => return Ok(Cost::Count(n)),
        CostValue::Fixed(n) => n.to_string().into_bytes(),
        CostValue::Variable(cv) => {
            // SAFETY: r is valid.
            let s = unsafe { text(r, cv) }?;
            match parse_cost(s) {
                Ok(n) if fits(n) => return Ok(Cost::Count(n)),
                _ => s.iter().copied().take(64).collect(),
            }
        }
    };
    // SAFETY: r is valid.
    unsafe { invalid_cost(r, zone, &bytes, limit) };
    Ok(match zone.fail {
        FailPolicy::Open => Cost::Skip,
        FailPolicy::Closed => Cost::Reject,
    })
}

/// The value of `cv` for the request (request pool memory).
///
/// # Safety
/// `r` must be a valid request, `cv` compiled at configuration time.
unsafe fn text<'r>(
    r: *mut ngx_http_request_t,
    cv: *mut ngx_http_complex_value_t,
) -> Result<&'r [u8], ()> {
    let mut s = ngx_str_t::empty();
    // SAFETY: as the caller guarantees.
    if unsafe { ngx_http_complex_value(r, cv, &mut s) } != Status::NGX_OK.into() {
        return Err(());
    }
    if s.len == 0 {
        return Ok(&[]);
    }
    // SAFETY: the value lives in the request pool.
    Ok(unsafe { core::slice::from_raw_parts(s.data, s.len) })
}

/// What the table is asked for one limit of the request: `(limit, cost,
/// invalid)`, or None when the limit is skipped (an invalid cost under
/// `fail=open`). A limit already invalid (`fail=closed`, judged against 0)
/// costs 1; an invalid cost under `fail=closed` is judged the same way.
/// Err(()) is an nginx error.
///
/// # Safety
/// `r` must be a valid request.
#[inline]
pub unsafe fn apply(
    r: *mut ngx_http_request_t,
    zone: &ZoneConf,
    value: CostValue,
    limit: u32,
    invalid: bool,
) -> Result<Option<(u32, u32, bool)>, ()> {
    if invalid {
        return Ok(Some((limit, 1, true)));
    }
    // SAFETY: r is valid.
    Ok(match unsafe { eval(r, zone, value, limit) }? {
        Cost::Count(n) => Some((limit, n, false)),
        Cost::Skip => None,
        Cost::Reject => Some((0, 1, true)),
    })
}

/// The request's cost if valid, else 1, without logging or counting (for
/// the Retry-After of limits not judged after a rejection).
///
/// # Safety
/// `r` must be a valid request.
pub unsafe fn quiet(r: *mut ngx_http_request_t, value: CostValue, limit: u32) -> u32 {
    let n = match value {
        CostValue::Fixed(n) => n,
        // SAFETY: r is valid.
        CostValue::Variable(cv) => match unsafe { text(r, cv) } {
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
///
/// # Safety
/// `r` must be a valid request.
#[cold]
#[inline(never)]
unsafe fn invalid_cost(r: *mut ngx_http_request_t, zone: &ZoneConf, bad: &[u8], limit: u32) {
    // SAFETY: r is valid.
    let log = unsafe { (*(*r).connection).log };
    ngx_log_error!(
        nginx_sys::NGX_LOG_ERR,
        log,
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
    if !zone.header.is_null() {
        // SAFETY: the header lives in the zone for the cycle.
        unsafe {
            (*zone.header)
                .invalid_limits
                .fetch_add(1, Ordering::Relaxed)
        };
    }
}
