//! The header filter: adds Retry-After and the RateLimit headers to every
//! response a limit applied to, whether proxied, static or an error page
//! (including an operator's `error_page 429`), because the decision is
//! found again through the main request even after a redirect.

use core::fmt::Write as _;

use nginx_sys::{
    ngx_http_output_header_filter_pt, ngx_http_top_header_filter, ngx_int_t, ngx_str_t,
};
use ngx::http::{HttpModuleLocationConf, Request};

use crate::conf::{HEADERS_IETF, HEADERS_ON};
use crate::ffi::headers::{add_header, add_pooled_header, add_pooled_headers};
use crate::ffi::pool::pool_copy;
use crate::ffi::req::request_handler;
use crate::request::record::{self, Report, RequestStatus};
use crate::Module;
use rate_limit_window_core::shm::Place;

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

request_handler!(header_filter, filter);

/// Adds our headers, then calls the next header filter. The common visit,
/// a decision that gives no header, is a few tests and the tail call (no
/// frame); everything else goes out of line.
fn filter(r: &mut Request) -> ngx_int_t {
    // Only the main request answers the client.
    if r.is_main() {
        let d = record::find_keeping(r);
        let work = match d {
            Some((d, keeps)) => d.gives_headers | keeps,
            // No decision: only a location with limits has something to
            // check (early_answer.rs).
            None => Module::location_conf(r.as_ref())
                .is_some_and(|l| l.limits.as_ref().is_some_and(|l| !l.is_empty())),
        };
        if work {
            return add_headers_then_next(r, d);
        }
    }
    next(r)
}

/// Calls the next header filter.
#[inline(always)]
fn next(r: &mut Request) -> ngx_int_t {
    // SAFETY: NEXT_HEADER_FILTER was set in postconfiguration, before any
    // request; the next filter is called with the same valid request.
    unsafe {
        match NEXT_HEADER_FILTER {
            Some(next) => next(r.into()),
            None => 0,
        }
    }
}

/// The main request's headers of its decision `d`, or the check of a
/// limited location that answered before deciding (no decision); the
/// places it keeps back if its answer is all header (done.rs); then the
/// next header filter.
#[inline(never)]
fn add_headers_then_next(r: &mut Request, d: Option<(&Report, bool)>) -> ngx_int_t {
    match d {
        None => crate::conf::early_answer::check_request(r),
        Some((d, keeps)) => {
            if d.gives_headers {
                add_headers(r, d);
            }
            if keeps {
                return crate::request::done::pass_header(r, next);
            }
        }
    }
    next(r)
}

/// Adds the headers of the decision made for the request.
fn add_headers(r: &mut Request, d: &Report) {
    if d.status == RequestStatus::Exempt {
        return;
    }
    if d.status.refused() || d.headers == HEADERS_ON {
        add_numbers(r, d);
    }
    if d.headers == HEADERS_IETF {
        add_ietf(r, d);
    }
}

/// draft-ietf-httpapi-ratelimit-headers-10/-11: one list member per
/// applied limit, the policy name being the zone name. `t` of an
/// admission is when `r` next grows (judging.rs); of a refusal, a limit
/// with nothing left says the refusal's Retry-After. Out of line: it
/// allocates and formats, and `rate_limit_window_headers ietf` is the
/// rarer setting.
#[inline(never)]
fn add_ietf(r: &mut Request, d: &Report) {
    let mut policy = String::with_capacity(64);
    let mut buf = String::with_capacity(64);
    for (i, a) in d.applied().iter().enumerate() {
        let zone = a.zone;
        let sep = if i == 0 { "" } else { ", " };
        let name = zone.name;
        let _ = write!(
            policy,
            "{sep}\"{name}\";q={};w={}",
            a.limit,
            zone.window.secs()
        );
        if zone.charge_at.is_some() {
            // Its quota counts what `charge=` says (tokens, bytes), not
            // requests: no registered `qu` names it, so a vendor parameter.
            policy.push_str(";rlw-unit=\"charge\"");
        }
        let t = d.reset_of(a);
        let _ = write!(buf, "{sep}\"{name}\";r={};t={t}", a.remaining);
    }
    in_flight_members(r, d, &mut policy, &mut buf);
    if !policy.is_empty() {
        add_header(r, "RateLimit-Policy", policy.as_bytes());
        add_header(r, "RateLimit", buf.as_bytes());
    }
}

/// The `ietf` members of the request's `in_flight=` lines, named
/// `"ZONE-in-flight"`: the policy's quota counts requests at once
/// (`qu="concurrent-requests"`, no window), `r` the places its client has
/// left now (this request's own taken); a refusal by the line says `r=0`
/// and `t` its Retry-After (a place frees when a request ends, which no
/// clock tells, so an admission says no `t`).
fn in_flight_members(r: &Request, d: &Report, policy: &mut String, buf: &mut String) {
    let Some(rec) = record::record(r) else {
        return;
    };
    for t in rec.kept_places() {
        let Some((zone, q)) = t.line else {
            continue;
        };
        let sep = if policy.is_empty() { "" } else { ", " };
        let name = zone.name;
        let _ = write!(
            policy,
            "{sep}\"{name}-in-flight\";q={q};qu=\"concurrent-requests\""
        );
        if t.place == Place::NONE {
            let _ = write!(buf, "{sep}\"{name}-in-flight\";r=0;t={}", d.retry_after_s);
        } else {
            let left = q.saturating_sub(t.places.held_at(t.place));
            let _ = write!(buf, "{sep}\"{name}-in-flight\";r={left}");
        }
    }
}

/// Retry-After on a rejection, and the RateLimit-* numbers of the tightest
/// limit with `rate_limit_window_headers on`. Every number is formatted
/// straight into one pool buffer, which the headers then point at.
fn add_numbers(r: &mut Request, d: &Report) {
    // Pool memory of the request: the headers point into it.
    let mut pool = r.pool();
    let Some(buf) = pool_copy(&mut pool, &[0; NUMBERS * 10]) else {
        return;
    };
    let ([retry, limit, remaining, reset], _) = buf.as_chunks_mut::<10>() else {
        return;
    };
    if d.status.refused() {
        add_number(r, retry, "Retry-After", d.retry_after_s);
    }
    if d.headers == HEADERS_ON {
        if let Some(t) = d.tightest() {
            // Three elements of the header list taken at once.
            let _ = add_pooled_headers(
                r,
                [
                    ("RateLimit-Limit", pooled(decimal(t.limit, limit))),
                    (
                        "RateLimit-Remaining",
                        pooled(decimal(t.remaining, remaining)),
                    ),
                    ("RateLimit-Reset", pooled(decimal(d.reset_of(t), reset))),
                ],
            );
        }
    }
}

/// Digits formatted in pool memory of the request, as an nginx string.
fn pooled(digits: &[u8]) -> ngx_str_t {
    ngx_str_t {
        len: digits.len(),
        data: digits.as_ptr().cast_mut(),
    }
}

/// Adds the header `name: n`, its digits formatted into `slot` (pool
/// memory of the request). One copy of this code serves every number (out
/// of line: fewer cache lines on the request path than four inlined copies).
#[inline(never)]
fn add_number(r: &mut Request, slot: &mut [u8; 10], name: &'static str, n: u32) {
    add_pooled_header(r, name, pooled(decimal(n, slot)));
}

/// Numbers a response can carry: Retry-After and three RateLimit-* values.
const NUMBERS: usize = 4;

/// "00" to "99", for formatting two digits per division.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Formats `n` in decimal at the end of `buf` without allocating, two digits
/// per step; returns the digits.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    &buf[i..]
}
