//! Variables: `$rate_limit_window_status` (PASSED, DELAYED, REJECTED,
//! REJECTED_DRY_RUN, DELAYED_DRY_RUN, EXEMPT; empty when no limit applied)
//! and `$rate_limit_window_remaining` (requests left under the tightest
//! limit). `$rate_limit_window_delay` is in delay.rs.

use core::ptr;

use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_request_t, ngx_http_variable_value_t, ngx_int_t,
    ngx_str_t, ngx_uint_t, NGX_HTTP_VAR_NOCACHEABLE,
};
use ngx::core::Status;
use ngx::ngx_string;

use crate::decision;
use crate::util::pool_str;

type Getter = unsafe extern "C" fn(
    *mut ngx_http_request_t,
    *mut ngx_http_variable_value_t,
    usize,
) -> ngx_int_t;

/// Adds the module's variables.
///
/// # Safety
/// `cf` must be the configuration passed to preconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    let vars: [(ngx_str_t, Getter); 2] = [
        (ngx_string!("rate_limit_window_status"), get_status),
        (ngx_string!("rate_limit_window_remaining"), get_remaining),
    ];
    for (mut name, get) in vars {
        // SAFETY: cf is valid; nginx copies the name.
        let v =
            unsafe { ngx_http_add_variable(cf, &mut name, NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t) };
        if v.is_null() {
            return Status::NGX_ERROR.into();
        }
        // SAFETY: v is the variable nginx just created.
        unsafe {
            (*v).get_handler = Some(get);
            (*v).data = 0;
        }
    }
    Status::NGX_OK.into()
}

/// Sets `v` to `bytes` copied into the request pool, or to "not found".
///
/// # Safety
/// `r` and `v` must be valid.
unsafe fn set(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    bytes: Option<&[u8]>,
) -> ngx_int_t {
    // SAFETY: v is valid.
    let v = unsafe { &mut *v };
    match bytes {
        None => {
            v.set_not_found(1);
            Status::NGX_OK.into()
        }
        Some(b) => {
            // SAFETY: r's pool is valid.
            let Some(s) = (unsafe { pool_str((*r).pool, b) }) else {
                return Status::NGX_ERROR.into();
            };
            v.data = if s.len == 0 { ptr::null_mut() } else { s.data };
            v.set_len(s.len as u32);
            v.set_valid(1);
            v.set_no_cacheable(1);
            v.set_not_found(0);
            Status::NGX_OK.into()
        }
    }
}

unsafe extern "C" fn get_status(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _: usize,
) -> ngx_int_t {
    // SAFETY: nginx passes a valid request and value.
    unsafe {
        let text = decision::find(r)
            .map(|d| d.verdict.as_str().as_bytes())
            .unwrap_or(b"");
        set(r, v, Some(text))
    }
}

unsafe extern "C" fn get_remaining(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _: usize,
) -> ngx_int_t {
    // SAFETY: nginx passes a valid request and value.
    unsafe {
        let remaining =
            decision::find(r).and_then(|d| d.tightest().map(|a| a.remaining.to_string()));
        match remaining {
            Some(s) => set(r, v, Some(s.as_bytes())),
            None => set(r, v, Some(b"")),
        }
    }
}
