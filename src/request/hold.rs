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
//! The hold is a part of the request's record (record.rs), on the main
//! request's pool: a client that goes away while held has its request freed
//! by nginx, and [`release`] gives back its place under `delay_max_held`,
//! deletes the timer and counts it as abandoned; it is never counted by the
//! limits.
//!
//! `delay_max_held` is counted **per worker** (a `Cell` in the location's
//! configuration, which each worker has its own copy of): what a held
//! request costs, a connection and a timer, is a worker's resource, bounded
//! per worker by `worker_connections`.

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_add_timer, ngx_del_timer, ngx_handle_read_event, ngx_handle_write_event,
    ngx_http_block_reading, ngx_http_core_run_phases, ngx_http_finalize_request,
    ngx_http_test_reading, ngx_http_variable_value_t, ngx_int_t, ngx_log_t, ngx_msec_t,
    ngx_post_event, ngx_posted_events, ngx_uint_t, NGX_HTTP_CLIENT_CLOSED_REQUEST,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_LOG_DEBUG,
};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, Request};
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::engine;

use crate::conf::{Limit, LocConf};
use crate::ffi::req::{event_handler, variable_get};
use crate::request::record::{self, Held, Part, RequestStatus};
use crate::zone::ZoneConf;
use crate::Module;
use rate_limit_window_core::shm::{DelayStats, Owner};

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
    find(r)?.get().map(|h| h.since_ms)
}

/// Holds `r` as the engine planned (`h`): a place under `delay_max_held`,
/// the timer, the log line. False: it could not be held.
pub fn hold(r: &mut Request, h: &Holding) -> bool {
    match hold_for(r, h) {
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

/// Holds `r` (a main request, being decided: its record is reserved) for
/// the planned wait: takes a place under `delay_max_held` (the first time),
/// then arms the timer. Err: the cap is reached, or nginx could not watch
/// the connection.
fn hold_for(r: &mut Request, rej: &Holding) -> Result<(), ()> {
    let rec = record::record(r).ok_or(())?;
    let part = &rec.hold.data;
    let cap = &rej.lcf.delay;
    if part.get().is_none() {
        if cap.held.get() >= cap.max_held {
            ngx_log_error!(
                rej.lcf.log_level,
                r.log(),
                "rate_limit_window: {} requests held in this location (delay_max_held), rejecting",
                cap.held.get()
            );
            return Err(());
        }
        if !rec.settle_at_end() {
            return Err(());
        }
        new_hold(r, &rec.hold, rej)?;
    }
    let armed = arm(r, rej.hold.wait_ms);
    if armed.is_err() {
        // Rejected after all: give the place back (the engine gives its
        // turn back itself when the hold fails).
        if let Some(mut h) = part.get() {
            if rej.hold.turn.is_some() {
                h.turns = None;
            }
            unhold(&mut h);
            part.set(Some(h));
        }
    }
    armed
}

/// Fills the hold's part of `r`'s record and takes a place under the cap.
fn new_hold(r: &Request, part: &Part<Cell<Option<Held>>>, rej: &Holding) -> Result<(), ()> {
    // The location's configuration, for the cycle: the one `rej.lcf` is.
    let lcf = Module::location_conf(r.as_ref()).ok_or(())?;
    // The turn the engine took in the rejecting zone's queue (seen by
    // every worker), given back when the request is decided or gone.
    let turn = rej.hold.turn.and_then(|t| {
        let turns = rej.limits[rej.hold.index].zone().turns.as_ref()?;
        Some((turns, t.parts()))
    });
    let worker = crate::zone::this_owner().map_or(0, |o| o.pid());
    part.data.set(Some(Held {
        lcf,
        since_ms: rej.now,
        waited_ms: 0,
        held: true,
        turns: turn.map(|(t, _)| t),
        turn_at: turn.map_or(0, |(_, (at, _))| at),
        turn_word: turn.map_or(0, |(_, (_, word))| word),
        worker,
    }));
    part.on_free(release);
    lcf.delay.held.set(lcf.delay.held.get() + 1);
    gauge(rej.limits, worker, true);
    Ok(())
}

/// Arms the timer as `limit_req` does: the read event watches for the
/// client going away, the write event waits `wait_ms` with `delayed` set.
fn arm(r: &mut Request, wait_ms: u64) -> Result<(), ()> {
    let c = r.connection();
    // SAFETY: the request's connection and its events are valid while the
    // request runs; the events are the connection's own.
    unsafe {
        let rev = (*c).read;
        if (*rev).ready() != 0 {
            ngx_post_event(rev, ptr::addr_of_mut!(ngx_posted_events));
        } else if ngx_handle_read_event(rev, 0) != Status::NGX_OK.into() {
            return Err(());
        }
        let wev = (*c).write;
        (*wev).set_delayed(1);
        ngx_add_timer(wev, wait_ms as ngx_msec_t);
    }
    let raw = r.as_mut();
    raw.read_event_handler = Some(ngx_http_test_reading);
    raw.write_event_handler = Some(wake);
    Ok(())
}

event_handler!(wake, woken);

/// The write event handler of a held request: on the timer, run the
/// phases again from this module's handler, which decides afresh.
fn woken(r: &mut Request) {
    let c = r.connection();
    let error = NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    // SAFETY: the request's connection and its events are valid while the
    // request runs; the request is finalized at most once, then not used.
    unsafe {
        let wev = (*c).write;
        if (*wev).delayed() != 0 {
            // Writable before the timer: keep waiting.
            if ngx_handle_write_event(wev, 0) != Status::NGX_OK.into() {
                ngx_http_finalize_request(r.into(), error);
            }
            return;
        }
        if (*c).error() != 0 {
            // The client went away: never counted (the record releases).
            let closed = NGX_HTTP_CLIENT_CLOSED_REQUEST as ngx_int_t;
            ngx_http_finalize_request(r.into(), closed);
            return;
        }
        if ngx_handle_read_event((*c).read, 0) != Status::NGX_OK.into() {
            ngx_http_finalize_request(r.into(), error);
            return;
        }
    }
    ngx_log_debug_http!(r, "rate_limit_window: held request woken");
    let raw = r.as_mut();
    raw.read_event_handler = Some(ngx_http_block_reading);
    raw.write_event_handler = Some(ngx_http_core_run_phases);
    // SAFETY: the request is valid; nginx's own write event handler now.
    unsafe { ngx_http_core_run_phases(r.into()) };
}

/// The verdict of an admitted request: DELAYED if it was held (its hold
/// ended: [`ended`]), else PASSED.
pub fn admitted(r: &Request, limits: &[Limit]) -> RequestStatus {
    if !delays(limits) {
        return RequestStatus::Passed;
    }
    match find(r).and_then(Cell::get) {
        Some(_) => RequestStatus::Delayed,
        None => RequestStatus::Passed,
    }
}

/// A held request decided for good at `now` (epoch ms), as the engine
/// says (`how`): its place under the cap, its turn and the `delay_held`
/// gauge given back (once), its wait kept for `$rate_limit_window_delay`,
/// counted (admitted or exempt: `admitted`, with its wait; rejected or
/// shed: `rejected`) and, unless admitted or rejected (which log their
/// own lines), logged.
pub fn ended(r: &Request, limits: &[Limit], now: u64, how: engine::Woken) {
    let Some(part) = find(r) else {
        return;
    };
    let Some(mut h) = part.get().filter(|h| h.held) else {
        return;
    };
    h.waited_ms = u32::try_from(now.saturating_sub(h.since_ms)).unwrap_or(u32::MAX);
    unhold(&mut h);
    part.set(Some(h));
    let (what, gone_on) = match how {
        engine::Woken::Admitted => ("admitted", true),
        engine::Woken::Exempt => ("exempt", true),
        engine::Woken::Rejected => ("rejected", false),
        engine::Woken::Shed => ("shed", false),
    };
    if gone_on {
        count(limits, |s| &s.admitted, 1);
        count(limits, |s| &s.wait_ms, u64::from(h.waited_ms));
    } else {
        count(limits, |s| &s.rejected, 1);
    }
    if matches!(how, engine::Woken::Exempt | engine::Woken::Shed) {
        let level = (h.lcf.log_level + 1).min(NGX_LOG_DEBUG as ngx_uint_t);
        ngx_log_error!(
            level,
            r.log(),
            "delayed request {} when it woke, after {} ms",
            what,
            h.waited_ms
        );
    } else {
        ngx_log_debug_http!(
            r,
            "rate_limit_window: held request {} after {} ms",
            what,
            h.waited_ms
        );
    }
}

/// Gives back the hold's place under the cap (once).
fn unhold(h: &mut Held) {
    if h.held {
        h.held = false;
        let cap = &h.lcf.delay;
        cap.held.set(cap.held.get().saturating_sub(1));
        if let Some((turns, t)) = h.turn() {
            turns.give(t);
            h.turns = None;
        }
        if let Some(limits) = h.lcf.limits.as_deref() {
            gauge(limits, h.worker, false);
        }
    }
}

/// The hold's part when the main request's pool is destroyed: a request
/// freed while still held (the client went away, or an error) gives back
/// its place, its timer is deleted, and it is counted as abandoned.
fn release(main: &Request, part: &Cell<Option<Held>>) {
    let Some(mut h) = part.get().filter(|h| h.held) else {
        return;
    };
    // SAFETY: the pool is destroyed before the connection is freed, so the
    // request's connection and its write event are still valid.
    unsafe {
        let wev = (*main.connection()).write;
        if (*wev).timer_set() != 0 {
            ngx_del_timer(wev);
        }
        (*wev).set_delayed(0);
    }
    unhold(&mut h);
    part.set(Some(h));
    if let Some(limits) = h.lcf.limits.as_deref() {
        count(limits, |s| &s.abandoned, 1);
    }
}

/// The hold's part of `r`'s main request's record (None before the
/// record is reserved).
fn find(r: &Request) -> Option<&'static Cell<Option<Held>>> {
    record::record(r).map(|rec| &rec.hold.data)
}

/// Adds `n` (wrapping: `u64::MAX` takes one away) to one of the counters
/// of every zone with a `delay`.
fn count(limits: &[Limit], field: impl Fn(&DelayStats) -> &AtomicU64, n: u64) {
    for l in limits.iter().filter(|l| l.delay_ms > 0) {
        if let Some(header) = l.zone().header() {
            field(&header.delay).fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Counts a request held (`up`) or no longer held, by process `pid`, in
/// the gauge of every zone with a `delay` (its turns: reclaimed with the
/// process, carried by a resize).
fn gauge(limits: &[Limit], pid: u32, up: bool) {
    let Some(o) = Owner::of(pid) else {
        return;
    };
    for l in limits.iter().filter(|l| l.delay_ms > 0) {
        if let Some(t) = l.zone().turns.as_ref() {
            t.hold_gauge(o, up);
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

variable_get!(pub(crate) get_delay, delay_value);

/// `$rate_limit_window_delay`: the ms a request was held (0 if it was
/// not; empty before any decision).
fn delay_value(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let hold = find(r).and_then(Cell::get).map(|h| h.waited_ms);
    let text = match (record::find(r), hold) {
        (None, _) => String::new(),
        (Some(_), None) => "0".into(),
        (Some(_), Some(ms)) => ms.to_string(),
    };
    crate::ffi::vars::set(r, v, text.as_bytes())
}
