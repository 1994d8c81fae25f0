//! The header filter: adds Retry-After and the RateLimit headers to every
//! response a limit applied to, whether proxied, static or an error page
//! (including an operator's `error_page 429`), because the decision is
//! found again through the main request even after a redirect.

use core::fmt::Write as _;

use nginx_sys::{
    ngx_http_output_header_filter_pt, ngx_http_request_t, ngx_http_top_header_filter, ngx_int_t,
};

use crate::conf::{HEADERS_IETF, HEADERS_ON};
use crate::decision::{self, Verdict};
use crate::util::add_header;

/// The next header filter in the chain.
static mut NEXT_HEADER_FILTER: ngx_http_output_header_filter_pt = None;

/// Inserts our filter at the top of the header filter chain.
pub fn register() {
    // SAFETY: postconfiguration runs single-threaded in the master; this
    // is the documented way to join the filter chain.
    unsafe {
        NEXT_HEADER_FILTER = ngx_http_top_header_filter;
        ngx_http_top_header_filter = Some(header_filter);
    }
}

extern "C" fn header_filter(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls header filters with a valid request.
    unsafe { add_headers(r) };
    // SAFETY: NEXT_HEADER_FILTER was set in postconfiguration, before any request.
    match unsafe { NEXT_HEADER_FILTER } {
        // SAFETY: calling the next filter with the same valid request.
        Some(next) => unsafe { next(r) },
        None => 0,
    }
}

/// # Safety
/// `r` must be a valid request whose headers are being sent.
unsafe fn add_headers(r: *mut ngx_http_request_t) {
    // Only the main request answers the client.
    // SAFETY: r is valid.
    if unsafe { (*r).main } != r {
        return;
    }
    // SAFETY: r is valid.
    let Some(d) = (unsafe { decision::find(r) }) else {
        return;
    };
    if d.verdict == Verdict::Exempt {
        return;
    }
    let mut num = [0u8; 10];
    if d.verdict == Verdict::Rejected {
        // SAFETY: r is valid; headers are not sent yet.
        unsafe { add_header(r, "Retry-After", decimal(d.retry_after_s, &mut num)) };
    }
    match d.headers {
        HEADERS_ON => {
            let Some(t) = d.tightest() else { return };
            for (name, v) in [
                ("RateLimit-Limit", t.limit),
                ("RateLimit-Remaining", t.remaining),
                ("RateLimit-Reset", t.reset_s),
            ] {
                // SAFETY: as above.
                unsafe { add_header(r, name, decimal(v, &mut num)) };
            }
        }
        HEADERS_IETF => {
            // draft-ietf-httpapi-ratelimit-headers-10: one list member per
            // applied limit, the policy name being the zone name.
            let mut policy = String::with_capacity(64);
            let mut buf = String::with_capacity(64);
            for (i, a) in d.applied().iter().enumerate() {
                // SAFETY: zones live as long as the cycle.
                let zone = unsafe { &*a.zone };
                let sep = if i == 0 { "" } else { ", " };
                let name = zone.name_str();
                let _ = write!(
                    policy,
                    "{sep}\"{name}\";q={};w={}",
                    a.limit,
                    zone.window.ms() / 1000
                );
                let _ = write!(buf, "{sep}\"{name}\";r={};t={}", a.remaining, a.reset_s);
            }
            if !policy.is_empty() {
                // SAFETY: as above.
                unsafe {
                    add_header(r, "RateLimit-Policy", policy.as_bytes());
                    add_header(r, "RateLimit", buf.as_bytes());
                }
            }
        }
        _ => {}
    }
}

/// Formats `n` in decimal into `buf` without allocating.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}
