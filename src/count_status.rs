//! `count_status=401,403,4xx`: a request is checked against the limit
//! before it runs, as always, but stays counted only if its final status is
//! in the list.
//!
//! Exact across workers: the admission is reserved (counted) at once, so
//! concurrent requests can never get past the limit, and given back with
//! [`Table::undo`](rate_limit_window_core::Table::undo) when the request
//! ends with a status that is not counted. The give-back runs in a cleanup
//! of the main request's pool, which nginx runs exactly once however the
//! request ends: a response sent, a client that went away (499), an
//! upstream timeout (504), an internal redirect or `error_page` that
//! changed the status. The final status is the one nginx logs as `$status`.
//!
//! A request that takes longer than a window keeps its reservation in the
//! previous window (undo reaches one window back), and one still running
//! two windows later has nothing left to give back.
//!
//! The same record settles `charge=` (charge.rs): its log-phase handler
//! writes each limit's charge into the entries here, and [`settle`] makes
//! the admission count it ([`Table::settle`](rate_limit_window_core::Table::settle)).

use core::ffi::c_void;
use core::mem::{align_of, size_of};

use nginx_sys::{
    ngx_http_complex_value_t, ngx_http_request_t, ngx_pool_cleanup_add, NGX_HTTP_VERSION_9,
};
use ngx::http::Request;
use ngx::ngx_log_debug_mask;
use rate_limit_window_core::charge::final_count;
use rate_limit_window_core::limit_opts::StatusSet;
use rate_limit_window_core::Admission;

use crate::conf::Limit;
use crate::decision::Applied;
use crate::util::{self, CleanupTag};
use crate::zone::ZoneConf;

/// One admission to settle when the request ends: given back unless the
/// final status is counted, and made to count its charge.
#[derive(Clone, Copy)]
pub struct Held {
    pub zone: *const ZoneConf,
    pub admission: Admission,
    /// `count_status=` (None: every status counts).
    pub statuses: Option<StatusSet>,
    /// `charge=` (null: none), evaluated in the log phase (charge.rs).
    pub charge: *mut ngx_http_complex_value_t,
    /// The charge read in the log phase; None: none, or invalid (the
    /// admission keeps its cost).
    pub charged: Option<u32>,
    /// The log phase has read the charge (`$rate_limit_window_charge`).
    pub read: bool,
}

impl Held {
    /// Whether the final `status` keeps the request counted.
    pub fn counts(&self, status: usize) -> bool {
        self.statuses.is_none_or(|s| s.contains(status))
    }
}

/// The cleanup's data: the request, then `n` [`Held`] entries.
#[repr(C)]
struct Reservations {
    r: *mut ngx_http_request_t,
    n: usize,
}

const _: () = assert!(size_of::<Reservations>().is_multiple_of(align_of::<Held>()));

/// After a request passed every limit: keeps the admissions of the limits
/// with `count_status=` or `charge=` in a cleanup of the main request's pool, to be
/// settled when the request ends. Nothing to do (one scan of `limits`)
/// when no limit has `count_status=` nor `charge=`. If the pool is out of memory the
/// admissions simply stay counted.
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
    let held: Vec<Held> = applied
        .iter()
        .filter_map(|a| {
            let l = limits.iter().find(|l| l.zone.cast_const() == a.zone)?;
            if l.count_status.is_none() && l.charge.is_none() {
                return None;
            }
            Some(Held {
                zone: a.zone,
                admission: a.admission?,
                statuses: l.count_status,
                charge: l.charge.unwrap_or(core::ptr::null_mut()),
                charged: None,
                read: false,
            })
        })
        .collect();
    if held.is_empty() {
        return;
    }
    let size = size_of::<Reservations>() + held.len() * size_of::<Held>();
    let main = r.as_ref().main;
    // SAFETY: a request's main request outlives it.
    let pool = unsafe { (*main).pool };
    // SAFETY: pool is valid; the handler is set only once the data is written.
    let cln = unsafe { ngx_pool_cleanup_add(pool, size) };
    if cln.is_null() {
        return;
    }
    // SAFETY: the data has room for a Reservations followed by `held.len()`
    // entries, aligned (ngx_palloc's NGX_ALIGNMENT, and the size assert).
    unsafe {
        let data = (*cln).data.cast::<Reservations>();
        data.write(Reservations {
            r: main,
            n: held.len(),
        });
        let entries = data.add(1).cast::<Held>();
        for (i, h) in held.iter().enumerate() {
            entries.add(i).write(*h);
        }
        (*cln).handler = Some(RESERVATIONS_TAG);
    }
}

/// [`settle`]'s one address, which tags the record's cleanup entry (see
/// [`util::CleanupTag`]).
static RESERVATIONS_TAG: CleanupTag = settle;

/// The admissions kept for `r`'s main request, if any (to write their
/// charges before they are settled).
///
/// # Safety
/// `r` must be a valid main request; the entries are in its pool, and no
/// other reference to them may be alive.
pub unsafe fn held_mut<'a>(r: *mut ngx_http_request_t) -> Option<&'a mut [Held]> {
    // SAFETY: the caller guarantees r is valid; its pool is.
    let data = unsafe { util::tagged_cleanup((*r).pool, RESERVATIONS_TAG) }?;
    let res = data.cast::<Reservations>();
    // SAFETY: entries tagged RESERVATIONS_TAG hold a Reservations followed
    // by n entries (reserve_slow), in the pool, alive until it is destroyed.
    Some(unsafe { core::slice::from_raw_parts_mut(res.add(1).cast::<Held>(), (*res).n) })
}

/// The status nginx logs as `$status`: an error status kept through an
/// `error_page` redirect first, then the response's, 9 for HTTP/0.9.
///
/// # Safety
/// `r` must be a valid request.
pub unsafe fn final_status(r: *const ngx_http_request_t) -> usize {
    // SAFETY: the caller guarantees r is valid.
    let r = unsafe { &*r };
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
unsafe extern "C" fn settle(data: *mut c_void) {
    let res = data.cast::<Reservations>();
    // SAFETY: written by reserve_slow before the handler was set; the
    // request lives in the pool whose cleanups are running.
    let (r, n) = unsafe { ((*res).r, (*res).n) };
    // SAFETY: as above.
    let status = unsafe { final_status(r) };
    // SAFETY: n entries follow the header (reserve_slow).
    let held = unsafe { core::slice::from_raw_parts(res.add(1).cast::<Held>(), n) };
    // SAFETY: the cycle is valid while the worker runs (the connection
    // may be going away with this request).
    let log = unsafe { (*nginx_sys::ngx_cycle).log };
    for h in held {
        let cost = h.admission.cost();
        let count = final_count(cost, h.counts(status), h.charged);
        if count == cost {
            continue;
        }
        // SAFETY: zones live in the configuration pool for the cycle,
        // which outlives its requests.
        let Some(table) = unsafe { &*h.zone }.table.as_ref() else {
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
