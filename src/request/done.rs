//! The body filter that gives a request's in-flight places back when its
//! response is complete: the main request's last buffer is being passed
//! on, and no subrequest's output is waiting to be sent (`r->postponed`
//! is empty) nor may be started by a filter below (SSI, addition, slice:
//! then only after the buffer went through them, if they started none). That is before nginx
//! frees the request, which a lingering close (`lingering_close always`,
//! a client that keeps sending, an unread body being discarded) delays
//! by up to `lingering_time`, and before the last bytes reach the client,
//! which then may open a new connection and meet its previous request's
//! place still held.
//!
//! A header-only answer (HEAD, 204, 304) has no last buffer: its places
//! go back as its header is passed on ([`at_header`], from the header
//! filter), unless its upstream goes on reading the body into a cache.
//! A location whose request nginx works on after the answer (`mirror`
//! subrequests, a `post_action`) keeps its places until nginx frees the
//! request: that work still reaches upstreams for the client's request,
//! and nginx (like `limit_conn`) counts the request until it ends.
//!
//! Every path that never gets here (a client gone, an error, a
//! subrequest still running, an HTTP/2 reset, a worker that exits, the
//! work above) keeps the fallback: the places are given back when the
//! main request's pool is destroyed (record.rs). The record's list is
//! taken out before its places are given back, so each is given back
//! once.

use core::sync::atomic::Ordering;

use nginx_sys::{
    ngx_chain_t, ngx_http_output_body_filter_pt, ngx_http_top_body_filter, ngx_int_t, ngx_uint_t,
    NGX_HTTP_HEAD, NGX_HTTP_NOT_MODIFIED, NGX_HTTP_NO_CONTENT,
};
use ngx::http::Request;

use crate::conf::{SIDE_WORK_NONE, SIDE_WORK_SOME};
use crate::ffi::req::body_filter;
use crate::ffi::request_bits::{self, SubrequestFilters};
use crate::request::record::{self, Record};
use crate::Module;
use ngx::http::HttpModuleLocationConf;

/// The next body filter in the chain.
static mut NEXT_BODY_FILTER: ngx_http_output_body_filter_pt = None;

/// The filters of this nginx that may start subrequests after the main
/// request's last buffer (read at postconfiguration).
static mut SUBREQUEST_FILTERS: SubrequestFilters = SubrequestFilters::NONE;

/// Inserts the filter at the top of the body filter chain, if some
/// location of this configuration may take places.
pub fn register() {
    if !crate::conf::PLACES_USED.swap(false, Ordering::Relaxed) {
        return;
    }
    // SAFETY: postconfiguration runs single-threaded in the master; this
    // is the documented way to join the filter chain.
    unsafe {
        SUBREQUEST_FILTERS = SubrequestFilters::read();
        NEXT_BODY_FILTER = ngx_http_top_body_filter;
        ngx_http_top_body_filter = Some(body_filter);
    }
}

/// Passes `chain` on to the next body filter.
#[inline(always)]
fn next(r: &mut Request, chain: *mut ngx_chain_t) -> ngx_int_t {
    // SAFETY: NEXT_BODY_FILTER was set in postconfiguration, before any
    // request; the next filter is called with what this one was given.
    unsafe {
        match NEXT_BODY_FILTER {
            Some(next) => next(r.into(), chain),
            None => 0,
        }
    }
}

/// Gives the request's places back when `chain` ends the main request's
/// response and no subrequest's output waits: before passing it on (the
/// client cannot see the end of the response while its place is held),
/// unless a filter below may still start subrequests, then after, if it
/// started none. Any other buffer goes straight on.
fn filter(r: &mut Request, chain: *mut ngx_chain_t) -> ngx_int_t {
    if r.is_main() && ends(chain) {
        if let Some(rec) = record::record(r).filter(|rec| holds_places(rec)) {
            return last_buffer(r, rec, chain);
        }
    }
    next(r, chain)
}

body_filter!(body_filter, filter);

/// The main request `r`'s last buffer, `chain`, while its record `rec`
/// keeps places: they are given back now, unless nginx works on for its
/// location after the answer (the pool's cleanup will), a filter below
/// may still start subrequests (then after them, if they started none) or
/// a subrequest's output waits (the pool's cleanup will).
fn last_buffer(r: &mut Request, rec: &Record, chain: *mut ngx_chain_t) -> ngx_int_t {
    if side_work(r) {
        return next(r, chain);
    }
    // SAFETY: read-only after postconfiguration.
    let filters = unsafe { SUBREQUEST_FILTERS };
    if filters.work_on(r) {
        let rc = next(r, chain);
        // The filters below only write and start subrequests: the main
        // request is still alive.
        if no_output_waits(r) {
            give_back(rec);
        }
        return rc;
    }
    if no_output_waits(r) {
        give_back(rec);
    }
    next(r, chain)
}

/// Whether `rec` keeps places to give back.
#[inline(always)]
fn holds_places(rec: &Record) -> bool {
    rec.kept_places().next().is_some()
}

/// Passes the header of the main request `r`, which keeps places, on
/// with `next`, and gives the places back if the answer has no body
/// (HEAD, 204, 304), no upstream goes on for it and nothing runs after
/// it: before passing it on when the method or the status says so, else
/// after, for a conditional request that nginx's not_modified filter
/// (below this one) may answer 304. An unconditional answer with a body,
/// the common one, costs four tests.
#[inline(always)]
pub fn pass_header(r: &mut Request, next: fn(&mut Request) -> ngx_int_t) -> ngx_int_t {
    let raw = r.as_ref();
    if raw.method == NGX_HTTP_HEAD as ngx_uint_t
        || matches!(
            raw.headers_out.status as u32,
            NGX_HTTP_NO_CONTENT | NGX_HTTP_NOT_MODIFIED
        )
    {
        header_only_answer(r);
    } else if !raw.headers_in.if_modified_since.is_null() || !raw.headers_in.if_none_match.is_null()
    {
        return conditional(r, next);
    }
    next(r)
}

/// [`pass_header`] of a conditional request: after the filters below
/// made it a 304 or not.
#[inline(never)]
fn conditional(r: &mut Request, next: fn(&mut Request) -> ngx_int_t) -> ngx_int_t {
    let rc = next(r);
    if request_bits::header_only(r) {
        header_only_answer(r);
    }
    rc
}

/// [`pass_header`] of an answer without a body.
#[inline(never)]
fn header_only_answer(r: &Request) {
    if !request_bits::upstream_goes_on(r) && !side_work(r) {
        if let Some(rec) = record::record(r) {
            give_back(rec);
        }
    }
}

/// Whether nginx works on for `r`'s location after its answer (a
/// `post_action`, `mirror` subrequests): asked once per location in a
/// worker, then read from its configuration.
fn side_work(r: &Request) -> bool {
    let Some(lc) = Module::location_conf(r.as_ref()) else {
        return request_bits::side_work(r);
    };
    match lc.side_work.load(Ordering::Relaxed) {
        SIDE_WORK_NONE => false,
        SIDE_WORK_SOME => true,
        _ => {
            let some = request_bits::side_work(r);
            let v = if some { SIDE_WORK_SOME } else { SIDE_WORK_NONE };
            lc.side_work.store(v, Ordering::Relaxed);
            some
        }
    }
}

/// Whether no subrequest of the main request `r` has output waiting to be
/// sent (`r->postponed` is empty).
fn no_output_waits(r: &Request) -> bool {
    r.as_ref().postponed.is_null()
}

/// Whether `chain` holds the response's last buffer (read before the
/// filters below reuse its links).
#[inline(always)]
fn ends(mut chain: *mut ngx_chain_t) -> bool {
    // SAFETY: a filter's chain is a list of valid links, each with a
    // valid buffer, ending in null.
    unsafe {
        while let Some(cl) = chain.as_ref() {
            if cl.buf.as_ref().is_some_and(|b| b.last_buf() != 0) {
                return true;
            }
            chain = cl.next;
        }
    }
    false
}

/// Gives back every place the record `rec` of a main request still keeps
/// (once: the list is emptied first).
#[inline(always)]
fn give_back(rec: &Record) {
    for t in rec.take_places() {
        t.places.give_inline(t.place);
    }
}
