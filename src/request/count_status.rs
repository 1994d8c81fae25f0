//! `count_status=401,403,4xx`: a request is checked against the limit
//! before it runs, as always, but stays counted only if its final status is
//! in the list.
//!
//! Exact across workers: the admission is reserved (counted) at once, so
//! concurrent requests can never get past the limit, and given back with
//! [`Table::undo`](rate_limit_window_core::Table::undo) when the request
//! ends with a status that is not counted. The give-back runs when the main
//! request's pool is destroyed (the record's part, record.rs), which nginx
//! does exactly once however the request ends: a response sent, a client that went away (499), an
//! upstream timeout (504), an internal redirect or `error_page` that
//! changed the status. The final status is the one nginx logs as `$status`.
//!
//! A request that takes longer than a window keeps its reservation in the
//! previous window (undo reaches one window back), and one still running
//! two windows later has nothing left to give back.
//!
//! The same record settles `charge=` (charge_read.rs): its log-phase handler
//! writes each limit's charge into the entries here, and [`settle`] makes
//! the admission count it ([`Table::settle`](rate_limit_window_core::Table::settle)).

use core::cell::{Cell, OnceCell};

use nginx_sys::NGX_HTTP_VERSION_9;
use ngx::http::Request;
use ngx::ngx_log_debug_mask;
use rate_limit_window_core::rule::charge::final_count;

use crate::conf::Limit;
pub use crate::request::record::Settle;
use crate::request::record::{self, Applied};

/// After a request passed every limit: keeps the admissions of the limits
/// with `count_status=` or `charge=` in the request's record, to be
/// settled when the request ends. Nothing to do (one scan of `limits`)
/// when no limit has `count_status=` nor `charge=`. If the pool is out of
/// memory the admissions simply stay counted.
/// `applied` is `r`'s decision's applied limits, made from `limits`.
pub fn reserve(r: &Request, limits: &[Limit], applied: &[Applied]) {
    if limits
        .iter()
        .all(|l| l.count_status.is_none() && l.charge.is_none())
    {
        return;
    }
    reserve_slow(r, limits, applied);
}

#[cold]
#[inline(never)]
fn reserve_slow(r: &Request, limits: &[Limit], applied: &[Applied]) {
    // A zone appears at most once among a location's limits.
    let held: Box<[Cell<Settle>]> = applied
        .iter()
        .filter_map(|a| {
            let l = limits.iter().find(|l| l.zone.cast_const() == a.zone)?;
            if l.count_status.is_none() && l.charge.is_none() {
                return None;
            }
            Some(Cell::new(Settle {
                zone: a.zone,
                admission: a.admission?,
                statuses: l.count_status,
                charge: l.charge.unwrap_or(core::ptr::null_mut()),
                charged: None,
                read: false,
            }))
        })
        .collect();
    if held.is_empty() {
        return;
    }
    let Some(rec) = record::record(r) else {
        return;
    };
    if !rec.settle_at_end() {
        return;
    }
    if rec.reservations.data.set(held).is_ok() {
        rec.reservations.on_free(settle);
    }
}

/// The admissions kept for `r`'s main request, if any (the charges are
/// written into them before they are settled).
pub fn held(r: &Request) -> Option<&'static [Cell<Settle>]> {
    record::record(r)?.reservations.data.get().map(|h| &h[..])
}

/// The status nginx logs as `$status`: an error status kept through an
/// `error_page` redirect first, then the response's, 9 for HTTP/0.9.
pub fn final_status(r: &Request) -> usize {
    let r = r.as_ref();
    if r.err_status != 0 {
        r.err_status
    } else if r.headers_out.status != 0 {
        r.headers_out.status
    } else if r.http_version == NGX_HTTP_VERSION_9 as usize {
        9
    } else {
        0
    }
}

/// The main request's pool is being destroyed: gives back each admission
/// whose limit does not count the final status, and makes each other one
/// count its charge (when it has a valid one). nginx has set the status
/// of a request that ended without a response (499, 504, 408...) by then,
/// and the request structure, allocated from this pool, is still intact
/// while cleanups run.
fn settle(main: &Request, held: &OnceCell<Box<[Cell<Settle>]>>) {
    let status = final_status(main);
    let log = crate::ffi::process::cycle_log();
    for h in held.get().into_iter().flatten().map(Cell::get) {
        let cost = h.admission.cost();
        let count = final_count(cost, h.counts(status), h.charged);
        if count == cost {
            continue;
        }
        let Some(table) = h.zone.table.as_ref() else {
            continue;
        };
        let done = table.settle(&h.admission, count);
        ngx_log_debug_mask!(
            DebugMask::Http,
            log,
            "rate_limit_window: status {}, cost {}, counted {}: {:?}",
            status,
            cost,
            count,
            done
        );
    }
}
