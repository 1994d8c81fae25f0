//! Variables: `$rate_limit_window_status` (PASSED, DELAYED, REJECTED,
//! REJECTED_IN_FLIGHT, SHED, REJECTED_DRY_RUN, DELAYED_DRY_RUN, EXEMPT;
//! empty when no limit applied),
//! `$rate_limit_window_remaining` (requests left under the tightest limit),
//! `$rate_limit_window_limit` (that limit, requests per window),
//! `$rate_limit_window_reset` (seconds to its window boundary) and
//! `$rate_limit_window_retry_after` (seconds, on rejected requests only):
//! the numbers of the RateLimit headers, for an `error_page` body.
//! `$rate_limit_window_delay` and `$rate_limit_window_charge` are read in
//! hold.rs and charge_read.rs; every variable is registered here, once.

use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_get_variable_pt, ngx_http_variable_value_t,
    ngx_int_t, ngx_str_t, ngx_uint_t, NGX_HTTP_VAR_NOCACHEABLE, NGX_HTTP_VAR_NOHASH,
};
use ngx::core::Status;
use ngx::http::Request;
use ngx::ngx_string;

use crate::ffi::hidden;
use crate::ffi::req::variable_get;
use crate::ffi::vars::set;
use crate::request::record::{self, RequestStatus};
use crate::request::{charge_read, hold};

/// Adds every variable of the module (preconfiguration), in one table:
/// the five above, the hidden ones (`ffi::hidden`: never hashed, so no
/// configuration can name them), `$rate_limit_window_charge`
/// (charge_read.rs) and `$rate_limit_window_delay` (hold.rs). NGX_OK, or
/// NGX_ERROR on an nginx error.
///
/// # Safety
/// `cf` must be the configuration passed to preconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    let nocache = NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t;
    let nohash = NGX_HTTP_VAR_NOHASH as ngx_uint_t;
    let vars: [(ngx_str_t, ngx_uint_t, ngx_http_get_variable_pt); 9] = [
        (
            ngx_string!("rate_limit_window_status"),
            nocache,
            Some(get_status),
        ),
        (
            ngx_string!("rate_limit_window_remaining"),
            nocache,
            Some(get_remaining),
        ),
        (
            ngx_string!("rate_limit_window_limit"),
            nocache,
            Some(get_limit),
        ),
        (
            ngx_string!("rate_limit_window_reset"),
            nocache,
            Some(get_reset),
        ),
        (
            ngx_string!("rate_limit_window_retry_after"),
            nocache,
            Some(get_retry_after),
        ),
        (
            hidden::text(hidden::ACCESS),
            nohash,
            Some(hidden::not_found),
        ),
        (
            hidden::text(hidden::RECORD),
            nohash,
            Some(hidden::not_found),
        ),
        (
            ngx_string!("rate_limit_window_charge"),
            nocache,
            Some(charge_read::get_charge),
        ),
        (
            ngx_string!("rate_limit_window_delay"),
            nocache,
            Some(hold::get_delay),
        ),
    ];
    for (mut name, flags, get) in vars {
        // SAFETY: cf is valid; nginx copies the name; a non-null v is the
        // variable nginx just created, ours to set up.
        let added = unsafe {
            let v = ngx_http_add_variable(cf, &mut name, flags);
            if let Some(v) = v.as_mut() {
                v.get_handler = get;
                v.data = 0;
            }
            !v.is_null()
        };
        if !added {
            return Status::NGX_ERROR.into();
        }
    }
    Status::NGX_OK.into()
}

variable_get!(get_status, status);
variable_get!(get_remaining, remaining);
variable_get!(get_limit, limit);
variable_get!(get_reset, reset);
variable_get!(get_retry_after, retry_after);

/// `$rate_limit_window_status`: the verdict.
fn status(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let d = record::find(r);
    set(r, v, d.map_or(b"", |d| d.status.as_str().as_bytes()))
}

/// Sets `v` to the decimal `n`, or to the empty string for None.
fn set_number(r: &Request, v: &mut ngx_http_variable_value_t, n: Option<u32>) -> ngx_int_t {
    let text = n.map(|n| n.to_string()).unwrap_or_default();
    set(r, v, text.as_bytes())
}

/// `$rate_limit_window_remaining`: requests left under the tightest limit.
fn remaining(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let n = record::find(r).and_then(|d| d.tightest().map(|a| a.remaining));
    set_number(r, v, n)
}

/// `$rate_limit_window_limit`: the tightest limit's requests per window
/// (the `RateLimit-Limit` value).
fn limit(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let n = record::find(r).and_then(|d| d.tightest().map(|a| a.limit));
    set_number(r, v, n)
}

/// `$rate_limit_window_reset`: seconds to the tightest limit's next window
/// boundary (the `RateLimit-Reset` value).
fn reset(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let n = record::find(r).and_then(|d| d.tightest().map(|a| d.reset_of(a)));
    set_number(r, v, n)
}

/// `$rate_limit_window_retry_after`: the Retry-After seconds of a rejected
/// (or dry-run rejected) request; empty otherwise.
fn retry_after(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let n = record::find(r)
        .filter(|d| {
            matches!(
                d.status,
                RequestStatus::Rejected
                    | RequestStatus::RejectedDryRun
                    | RequestStatus::RejectedInFlight
                    | RequestStatus::Shed
            )
        })
        .map(|d| d.retry_after_s);
    set_number(r, v, n)
}
