//! Queue or drop: `rate_limit_window ... delay=TIME delay_max_held=N`
//! holds a request that will soon fit on an nginx event timer, instead of
//! rejecting it (as `limit_req` does with `burst`/`delay`).
//!
//! A request that a limit rejects, whose exact wait (see the core's
//! `delay::plan`) fits in `delay`, is held: its connection's write event
//! gets a timer (`delayed` set, as `limit_req` does), the phase handler
//! returns NGX_AGAIN, and the worker goes on serving other requests. When
//! the timer fires, [`wake`] runs the phases again from this module's
//! handler, which decides afresh: admitted and counted then, held again if
//! another request took the room and the total wait still fits, rejected
//! (usual status and Retry-After) otherwise. Nothing is counted while a
//! request waits.
//!
//! The hold's record is a cleanup entry on the main request's pool
//! ([`release`], read from `HOLD_TAG`, is its handler and its tag): a client that goes away
//! while held has its request freed by nginx, and the cleanup gives back its
//! place under `delay_max_held`, deletes the timer and counts it as
//! abandoned; it is never counted by the limits.
//!
//! `delay_max_held` is counted **per worker** (a `Cell` in the location's
//! configuration, which each worker has its own copy of): what a held
//! request costs, a connection and a timer, is a worker's resource, bounded
//! per worker by `worker_connections`.

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_add_timer, ngx_conf_t, ngx_del_timer, ngx_handle_read_event, ngx_handle_write_event,
    ngx_http_add_variable, ngx_http_block_reading, ngx_http_core_run_phases,
    ngx_http_finalize_request, ngx_http_request_t, ngx_http_test_reading,
    ngx_http_variable_value_t, ngx_int_t, ngx_log_t, ngx_msec_t, ngx_pool_cleanup_add,
    ngx_post_event, ngx_posted_events, ngx_uint_t, NGX_HTTP_CLIENT_CLOSED_REQUEST,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_VAR_NOCACHEABLE, NGX_LOG_DEBUG,
};
use ngx::core::Status;
use ngx::http::Request;
use ngx::{ngx_log_debug_mask, ngx_log_error, ngx_string};
use rate_limit_window_core::engine;

use crate::conf::{Limit, LocConf};
use crate::decision::{self, Verdict};
use crate::util::{self, CleanupTag};
use crate::zone::ZoneConf;
use crate::zone_stats::DelayStats;

/// The hold of one main request: the data of a cleanup entry on its pool.
struct Hold {
    r: *mut ngx_http_request_t,
    lcf: *const LocConf,
    /// Epoch ms when the request was first held.
    since_ms: u64,
    /// Time waited (ms), set when the request is finally decided.
    waited_ms: u64,
    /// True while it has a place under `delay_max_held`.
    held: bool,
    /// The client (the rejecting limit's key hash) whose share it takes.
    client: u64,
}

/// Whether any limit of the location has a `delay`.
fn delays(limits: &[Limit]) -> bool {
    limits.iter().any(|l| l.delay_ms > 0)
}

/// The request the engine holds, as the hold's record needs it.
pub struct Holding<'a> {
    pub lcf: &'a LocConf,
    pub limits: &'a [Limit],
    /// The engine's plan: the rejecting limit, the wait, the client.
    pub hold: &'a engine::Hold,
    /// Epoch ms.
    pub now: u64,
}

/// When `r`'s main request was first held (epoch ms), if it is held.
pub fn held_since(r: &Request) -> Option<u64> {
    find(r).map(|h| h.since_ms)
}

/// Requests of `client` held now in this location, by this worker.
pub fn held_by(lcf: &LocConf, client: u64) -> u32 {
    lcf.delay.held_by(client)
}

/// Holds `r` as the engine planned (`h`): a place under `delay_max_held`,
/// the timer, the log line. False: it could not be held.
pub fn hold(r: &mut Request, h: &Holding) -> bool {
    let found = find(r);
    // SAFETY: the engine holds only a main request, being decided.
    match unsafe { hold_for(r.into(), h, found) } {
        Ok(()) => {
            log_hold(r.log(), h, "delaying");
            true
        }
        Err(()) => false,
    }
}

/// Dry run: the request would have been held; logged and counted.
pub fn would_hold(r: &Request, h: &Holding) {
    log_hold(r.log(), h, "dry run, would delay");
    count(h.limits, |s| &s.dry_run, 1);
}

/// A held request the engine rejected after all: its place is given back,
/// counted as rejected.
pub fn unheld(r: &Request, limits: &[Limit], now: u64) {
    if let Some(h) = find(r) {
        h.waited_ms = now.saturating_sub(h.since_ms);
        // SAFETY: h is this request's hold.
        unsafe { unhold(h) };
        count(limits, |s| &s.rejected, 1);
    }
}

/// Refused at once: its client's share of the queue is full (`ahead` of
/// its requests held already). Counted and logged.
pub fn share_full(r: &Request, lcf: &LocConf, limits: &[Limit], ahead: u32) {
    count(limits, |s| &s.share_full, 1);
    ngx_log_error!(
        lcf.log_level,
        r.log(),
        "rate_limit_window: the client holds {} requests, its share of delay, rejecting",
        ahead
    );
}

/// Holds `r` for `wait_ms`: takes a place under `delay_max_held` (the
/// first time), then arms the timer. Err: the cap is reached, or nginx
/// could not watch the connection.
///
/// # Safety
/// `r` must be a valid main request.
unsafe fn hold_for(
    r: *mut ngx_http_request_t,
    rej: &Holding,
    hold: Option<&mut Hold>,
) -> Result<(), ()> {
    let (client, wait_ms) = (rej.hold.client, rej.hold.wait_ms);
    let cap = &rej.lcf.delay;
    if hold.is_none() && cap.held.get() >= cap.max_held {
        // SAFETY: r is valid.
        let log = unsafe { (*(*r).connection).log };
        ngx_log_error!(
            rej.lcf.log_level,
            log,
            "rate_limit_window: {} requests held in this location (delay_max_held), rejecting",
            cap.held.get()
        );
        return Err(());
    }
    if hold.is_none() {
        // SAFETY: r is valid; the record is made before the timer.
        unsafe { new_hold(r, rej, client) }?;
    }
    // SAFETY: r is valid.
    let armed = unsafe { arm(r, wait_ms) };
    if armed.is_err() {
        // Rejected after all: give the place back.
        // SAFETY: r is valid and shares the representation of `Request`.
        if let Some(h) = find(unsafe { Request::from_ngx_http_request(r) }) {
            // SAFETY: h is this request's hold.
            unsafe { unhold(h) };
        }
    }
    armed
}

/// Makes the hold's record on the main request's pool and takes a place
/// under the cap.
///
/// # Safety
/// `r` must be a valid main request without a hold.
unsafe fn new_hold(r: *mut ngx_http_request_t, rej: &Holding, client: u64) -> Result<(), ()> {
    // SAFETY: r is valid; the pool lives as long as the request.
    let cln = unsafe { ngx_pool_cleanup_add((*r).pool, size_of::<Hold>()) };
    if cln.is_null() {
        return Err(());
    }
    // SAFETY: the entry's data has room for a Hold (pool alignment suits it).
    unsafe {
        (*cln).data.cast::<Hold>().write(Hold {
            r,
            lcf: rej.lcf,
            since_ms: rej.now,
            waited_ms: 0,
            held: true,
            client,
        });
        (*cln).handler = Some(HOLD_TAG);
    }
    rej.lcf.delay.held.set(rej.lcf.delay.held.get() + 1);
    rej.lcf.delay.track(client, true);
    count(rej.limits, |s| &s.held, 1);
    Ok(())
}

/// Arms the timer as `limit_req` does: the read event watches for the
/// client going away, the write event waits `wait_ms` with `delayed` set.
///
/// # Safety
/// `r` must be a valid main request.
unsafe fn arm(r: *mut ngx_http_request_t, wait_ms: u64) -> Result<(), ()> {
    // SAFETY: r and its connection are valid; the events are the
    // connection's own.
    unsafe {
        let c = (*r).connection;
        let rev = (*c).read;
        if (*rev).ready() != 0 {
            ngx_post_event(rev, ptr::addr_of_mut!(ngx_posted_events));
        } else if ngx_handle_read_event(rev, 0) != Status::NGX_OK.into() {
            return Err(());
        }
        (*r).read_event_handler = Some(ngx_http_test_reading);
        (*r).write_event_handler = Some(wake);
        let wev = (*c).write;
        (*wev).set_delayed(1);
        ngx_add_timer(wev, wait_ms as ngx_msec_t);
    }
    Ok(())
}

/// The write event handler of a held request: on the timer, run the
/// phases again from this module's handler, which decides afresh.
extern "C" fn wake(r: *mut ngx_http_request_t) {
    // SAFETY: nginx calls it with the valid request whose handler it is.
    unsafe {
        let c = (*r).connection;
        let wev = (*c).write;
        if (*wev).delayed() != 0 {
            // Writable before the timer: keep waiting.
            if ngx_handle_write_event(wev, 0) != Status::NGX_OK.into() {
                ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t);
            }
            return;
        }
        if (*c).error() != 0 {
            // The client went away: never counted (the cleanup releases).
            ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST as ngx_int_t);
            return;
        }
        if ngx_handle_read_event((*c).read, 0) != Status::NGX_OK.into() {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t);
            return;
        }
        ngx_log_debug_mask!(
            DebugMask::Http,
            (*c).log,
            "rate_limit_window: held request woken"
        );
        (*r).read_event_handler = Some(ngx_http_block_reading);
        (*r).write_event_handler = Some(ngx_http_core_run_phases);
        ngx_http_core_run_phases(r);
    }
}

/// The verdict of an admitted request: DELAYED if it was held (its place
/// under the cap is given back and its wait counted), else PASSED.
/// `r` was just admitted by `limits`.
pub fn admitted(r: &Request, limits: &[Limit], now: u64) -> Verdict {
    if !delays(limits) {
        return Verdict::Passed;
    }
    let Some(h) = find(r) else {
        return Verdict::Passed;
    };
    if !h.held {
        return Verdict::Passed;
    }
    h.waited_ms = now.saturating_sub(h.since_ms);
    // SAFETY: h is this request's hold.
    unsafe { unhold(h) };
    count(limits, |s| &s.admitted, 1);
    count(limits, |s| &s.wait_ms, h.waited_ms);
    Verdict::Delayed
}

/// Gives back the hold's place under the cap (once).
///
/// # Safety
/// `h` must be a live hold whose `lcf` is the configuration of its cycle.
unsafe fn unhold(h: &mut Hold) {
    if h.held {
        h.held = false;
        // SAFETY: the location configuration lives for the cycle.
        let lcf = unsafe { &*h.lcf };
        let cap = &lcf.delay;
        cap.held.set(cap.held.get().saturating_sub(1));
        cap.track(h.client, false);
        if let Some(limits) = lcf.limits.as_ref() {
            for l in limits.iter().filter(|l| l.delay_ms > 0) {
                // SAFETY: zones live in the configuration pool for the cycle.
                let zone = unsafe { &*l.zone };
                if !zone.header.is_null() {
                    // SAFETY: the header lives in the zone for the cycle.
                    unsafe { &(*zone.header).delay }
                        .held
                        .fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// [`release`]'s one address, the handler that tags a hold's cleanup entry
/// (see [`util::CleanupTag`]).
static HOLD_TAG: CleanupTag = release;

/// The hold's cleanup: a request freed while still held (the
/// client went away, or an error) gives back its place, its timer is
/// deleted, and it is counted as abandoned.
unsafe extern "C" fn release(data: *mut c_void) {
    // SAFETY: data is the Hold written by `new_hold`.
    let h = unsafe { &mut *data.cast::<Hold>() };
    if !h.held {
        return;
    }
    // SAFETY: the pool is destroyed before the connection is freed, so the
    // request's connection and its write event are still valid.
    unsafe {
        let wev = (*(*h.r).connection).write;
        if (*wev).timer_set() != 0 {
            ngx_del_timer(wev);
        }
        (*wev).set_delayed(0);
        unhold(h);
        if let Some(limits) = (*h.lcf).limits.as_ref() {
            count(limits, |s| &s.abandoned, 1);
        }
    }
}

/// The hold of `r`'s main request, if it was ever held.
fn find<'a>(r: &Request) -> Option<&'a mut Hold> {
    // SAFETY: a request's main request outlives it; its pool is valid.
    let data = unsafe { util::tagged_cleanup((*r.as_ref().main).pool, HOLD_TAG) }?;
    // SAFETY: entries tagged HOLD_TAG hold a Hold (new_hold).
    Some(unsafe { &mut *data.cast::<Hold>() })
}

/// Adds `n` to one of the counters of every zone with a `delay`.
fn count(limits: &[Limit], field: impl Fn(&DelayStats) -> &AtomicU64, n: u64) {
    for l in limits.iter().filter(|l| l.delay_ms > 0) {
        // SAFETY: zones live in the configuration pool for the cycle.
        let zone = unsafe { &*l.zone };
        if !zone.header.is_null() {
            // SAFETY: the header lives in the zone for the cycle.
            field(unsafe { &(*zone.header).delay }).fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The hold's log line, one level below the rejections' (as `limit_req`).
fn log_hold(log: *mut ngx_log_t, rej: &Holding, what: &str) {
    let level = (rej.lcf.log_level + 1).min(NGX_LOG_DEBUG as ngx_uint_t);
    let wait_ms = rej.hold.wait_ms;
    let zone: &ZoneConf = rej.limits[rej.hold.index].zone();
    ngx_log_error!(
        level,
        log,
        "{} request by {} ms, by zone \"{}\"",
        what,
        wait_ms,
        zone.name_str()
    );
}

/// Adds `$rate_limit_window_delay`: the ms a request was held (0 if it was
/// not; empty before any decision).
///
/// # Safety
/// `cf` must be the configuration passed to preconfiguration.
pub unsafe fn register_variable(cf: *mut ngx_conf_t) -> ngx_int_t {
    let mut name = ngx_string!("rate_limit_window_delay");
    // SAFETY: cf is valid; nginx copies the name.
    let v = unsafe { ngx_http_add_variable(cf, &mut name, NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t) };
    if v.is_null() {
        return Status::NGX_ERROR.into();
    }
    // SAFETY: v is the variable nginx just created.
    unsafe {
        (*v).get_handler = Some(get_delay);
        (*v).data = 0;
    }
    Status::NGX_OK.into()
}

unsafe extern "C" fn get_delay(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _: usize,
) -> ngx_int_t {
    // SAFETY: called by nginx as a get handler.
    let (r, v) = unsafe { crate::variables::args(r, v) };
    let hold = find(r).map(|h| h.waited_ms);
    let text = match (decision::find(r), hold) {
        (None, _) => String::new(),
        (Some(_), None) => "0".into(),
        (Some(_), Some(ms)) => ms.to_string(),
    };
    crate::variables::set(r, v, text.as_bytes())
}
