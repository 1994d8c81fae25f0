//! The phase handler: evaluates every limit of the location, counts the
//! request once per main request, and rejects it when any limit is
//! exceeded.
//!
//! The same handler runs in two of nginx's phases, and each location
//! decides in the one its `rate_limit_window_phase` names: PREACCESS, before
//! the access checks and after every other PREACCESS handler (realip's
//! location-level one included: the handler is put first in the array, and
//! nginx runs a phase's handlers in reverse order), or PRECONTENT
//! ("postaccess"), after every access check has passed and before
//! `try_files` and `mirror` (put last, so run first): see phases.rs and
//! docs/phases.md.
//!
//! Order of work. Nothing shared is ever held: the table is lock-free, so
//! once `acquire` returns, logging and the request pool are safe to use.
//! 1. reserve the decision's record in the main request's pool (the only
//!    allocation), before anything is counted;
//! 2. per limit: evaluate its key and limit, one `acquire`, record it;
//! 3. on a rejection, `undo` the admissions already made so that a
//!    rejected request is counted by none;
//! 4. bump the zone counters, log, and commit the decision.
//!
//! The engine's host, which evaluates each limit's key, limit and cost, is
//! `Judging` (judging.rs); the log lines and debug output are in
//! logging.rs.

use nginx_sys::{ngx_int_t, ngx_uint_t, NGX_HTTP_INTERNAL_SERVER_ERROR};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, Request};
use ngx::ngx_log_debug_http;

use rate_limit_window_core::engine::{self, Ask, HostError, Verdict};

use crate::conf::{self, LocConf, HEADERS_IETF, PHASE_POSTACCESS, PHASE_PREACCESS};
use crate::ffi::pool::main_of;
use crate::ffi::process;
use crate::ffi::req::request_handler;
use crate::request::ban;
use crate::request::hold;
use crate::request::judging::Judging;
use crate::request::logging::{log_rejection, warn_on_late_keys};
use crate::request::record::{self, Applied, RequestStatus};
use crate::request::{count_status, near_limit};
use crate::Module;

/// The nginx phase an invocation of the handler runs in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// NGX_HTTP_PREACCESS_PHASE: `rate_limit_window_phase preaccess`.
    Preaccess,
    /// NGX_HTTP_PRECONTENT_PHASE: `rate_limit_window_phase postaccess`.
    Postaccess,
}

impl Phase {
    /// The `rate_limit_window_phase` value that decides in this phase.
    fn conf_value(self) -> ngx_uint_t {
        match self {
            Phase::Preaccess => PHASE_PREACCESS,
            Phase::Postaccess => PHASE_POSTACCESS,
        }
    }
}

request_handler!(pub(crate) preaccess_handler, preaccess);
request_handler!(pub(crate) precontent_handler, |r| handle(r, Phase::Postaccess));

/// The PREACCESS entry (see phases.rs).
fn preaccess(r: &mut Request) -> ngx_int_t {
    crate::ffi::access::preaccess_enter(r);
    let rc = handle(r, Phase::Preaccess);
    if rc == Status::NGX_DECLINED.into() {
        // On to the access checks (this handler runs last in PREACCESS).
        crate::ffi::access::preaccess_leave(r);
    }
    rc
}

/// Decides the request if its location decides in `phase` and nothing has
/// decided it yet. Inlined into each phase's handler: the common visit
/// that does not decide (the other phase) costs a few tests, without the
/// frame of [`handle_limits`].
#[inline(always)]
fn handle(r: &mut Request, phase: Phase) -> ngx_int_t {
    let declined: ngx_int_t = Status::NGX_DECLINED.into();
    // PRECONTENT follows the access checks: note that they passed.
    let access_failed = phase == Phase::Postaccess && crate::ffi::access::precontent_failed(r);
    let Some(lcf) = Module::location_conf(r.as_ref()) else {
        return declined;
    };
    // One test: the phase the location decides in, if it has a limit or
    // a shed group (a location with `rate_limit_window_shed` alone decides
    // too).
    if lcf.decides != phase.conf_value() {
        if phase == Phase::Postaccess {
            warn_on_late_keys(r, lcf);
        }
        return declined;
    }
    let limits = lcf.limits.as_deref().unwrap_or(&[]);
    // A location with places (`in_flight=`, a shed group) has its own copy
    // of the decision: the common one has no code for them. Either way a
    // request's walk enters this file three times: the phase handler that
    // decides, this copy, and the other phase's handler.
    // A location with one limit (the common one, with places or without)
    // has its own copy too: straight-line code, without the loop over the
    // limits.
    match (lcf.places, limits.len() == 1) {
        (true, true) => handle_limits::<true, true>(r, phase, lcf, limits, access_failed),
        (true, false) => handle_limits::<true, false>(r, phase, lcf, limits, access_failed),
        (false, true) => handle_limits::<false, true>(r, phase, lcf, limits, access_failed),
        (false, false) => handle_limits::<false, false>(r, phase, lcf, limits, access_failed),
    }
}

/// [`handle`] in the phase where the location decides: decides the request
/// unless it is decided already, decided later, or failed an access check.
/// `PLACES`: the location takes places; `ONE`: it has one limit.
#[inline(never)]
fn handle_limits<const PLACES: bool, const ONE: bool>(
    r: &mut Request,
    phase: Phase,
    lcf: &LocConf,
    limits: &[conf::Limit],
    access_failed: bool,
) -> ngx_int_t {
    let declined: ngx_int_t = Status::NGX_DECLINED.into();
    // Counted once per main request: an internal redirect, error_page or
    // subrequest finds the decision already made. The record found (a held
    // request's) is the one the decision reuses: looked up once.
    let Some(at) = record::place(r) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    if at.rec.is_some_and(record::Record::decided) || main_decides_later(r) {
        return declined;
    }
    // In postaccess, a request that failed an access check (401, 403) is
    // never counted, whatever page answers it (`error_page` redirects of
    // other errors are: see access.rs).
    if phase == Phase::Postaccess && access_failed {
        ngx_log_debug_http!(r, "rate_limit_window: not counted, an access check failed");
        return declined;
    }
    ngx_log_debug_http!(
        r,
        "rate_limit_window: deciding in the {} phase, {} limit(s)",
        if phase == Phase::Postaccess {
            "postaccess (precontent)"
        } else {
            "preaccess"
        },
        limits.len()
    );
    decide::<PLACES, ONE>(r, lcf, limits, at)
}

/// A subrequest started before its main request has decided, while the
/// main request's location decides in postaccess (an `auth_request`
/// subrequest, made in the access phase): the main request decides later,
/// so the subrequest must neither decide for it nor be counted.
fn main_decides_later(r: &Request) -> bool {
    if r.is_main() {
        return false;
    }
    let Some(mcf) = Module::location_conf(main_of(r).as_ref()) else {
        return false;
    };
    mcf.decides == PHASE_POSTACCESS
}

/// Makes and commits the decision for `r`: the location's shed group and
/// limits, in order, decided by the core's engine. `at`: where the main
/// request's record goes, and the record if it has one already (a held
/// request's); the record is reserved (allocated) before anything is
/// counted. Only a main request is held: a subrequest's phases are run by
/// its parent, not by its connection's events.
#[inline(always)]
fn decide<const PLACES: bool, const ONE: bool>(
    r: &mut Request,
    lcf: &LocConf,
    limits: &[conf::Limit],
    at: record::Place,
) -> ngx_int_t {
    // A record before the decision is a held request's (a decided one
    // returned above): woken, decided again.
    let woken = at.rec.is_some();
    let Some(pending) = record::reserve(r, at, limits.len()) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    let ask = Ask {
        now_ms: process::now_ms(),
        shard: process::shard(),
        dry_run: lcf.dry_run != 0,
        holdable: r.is_main(),
        woken,
    };
    let mut j = Judging::<PLACES, ONE> {
        r,
        lcf,
        limits,
        pending,
    };
    // Err: an nginx error; the engine gave back what the request took.
    let out = engine::decide(&mut j, &ask);
    // The admission first: one test, with every other verdict (and the
    // rejection's payload) out of line.
    let (verdict, retry_after) = if let Ok(Verdict::Admit) = out {
        (admitted(&mut j), 0)
    } else {
        core::hint::cold_path();
        match not_admitted(&mut j, &out, &ask) {
            Ok(v) => v,
            Err(rc) => return rc,
        }
    };
    let (r, pending) = (&mut *j.r, &j.pending);
    ngx_log_debug_http!(
        r,
        "rate_limit_window: verdict {}, {} limit(s) applied, Retry-After {}s",
        verdict.as_str(),
        pending.applied().len(),
        retry_after
    );
    if record::commit(pending, verdict, lcf.headers, retry_after) {
        crate::request::tally::decided(r, lcf, verdict);
    }
    if verdict.refused() {
        if verdict == RequestStatus::Shed {
            return lcf.shed.as_ref().map_or(503, |s| s.status);
        }
        // A gRPC call gets a gRPC answer (grpc_reject.rs), any other the status.
        return crate::request::grpc_reject::reject(r, lcf, retry_after);
    }
    Status::NGX_DECLINED.into()
}

/// An admitted request (decided as `ask`; the engine counted it
/// `passed`): each limit's near-limit count (when one is near), then what `count_status=` and
/// `delay=` keep.
#[inline(always)]
fn admitted<const P: bool, const O: bool>(j: &mut Judging<'_, P, O>) -> RequestStatus {
    // The loop only when a limit was noted near (judging.rs's `record`).
    if j.pending.any_near() {
        core::hint::cold_path();
        near_limit::note_all(j.pending.applied());
    }
    // One flag skips both when neither `count_status=` nor `delay=` is
    // configured.
    if j.lcf.extras {
        core::hint::cold_path();
        if j.lcf.headers == HEADERS_IETF {
            crate::request::judging::ietf_t(j.r, j.limits, &mut j.pending, process::now_ms());
        }
        return admitted_extras(j.r, j.limits, j.pending.applied());
    }
    RequestStatus::Passed
}

/// Every verdict but an admission (`out`, for the question `ask`): the
/// verdict and Retry-After to commit, or the handler's return code (a held
/// request, an nginx error).
#[inline(never)]
fn not_admitted<const P: bool, const O: bool>(
    j: &mut Judging<'_, P, O>,
    out: &Result<Verdict, HostError>,
    ask: &Ask,
) -> Result<(RequestStatus, u32), ngx_int_t> {
    let Ok(v) = out else {
        return Err(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t);
    };
    let (r, lcf, limits, now) = (&mut *j.r, j.lcf, j.limits, ask.now_ms);
    Ok(match v {
        Verdict::Admit => (admitted(j), 0),
        Verdict::Exempt => (RequestStatus::Exempt, 0),
        Verdict::Shed(s) => {
            if let Some(shed) = lcf.shed.as_ref() {
                crate::request::shed::log_shed(r, lcf, shed, s.in_flight);
            }
            (RequestStatus::Shed, s.retry_after_s)
        }
        Verdict::Hold(_) => {
            ngx_log_debug_http!(r, "rate_limit_window: held by delay=");
            return Err(Status::NGX_AGAIN.into());
        }
        Verdict::WouldHold(h) => {
            let holding = hold::Holding {
                lcf,
                limits,
                hold: h,
                now,
            };
            hold::would_hold(r, &holding);
            (RequestStatus::DelayedDryRun, 0)
        }
        Verdict::Reject(rej) => {
            if lcf.headers == HEADERS_IETF {
                crate::request::judging::ietf_t_after_undo(r, limits, &mut j.pending, now);
                if rej.in_flight {
                    let zone = limits[rej.index].zone();
                    crate::request::in_flight::note_refused(&j.pending, zone, rej.limit);
                }
            }
            (reject(r, lcf, limits, rej), rej.retry_after_s)
        }
    })
}

/// An admitted request of a location with `count_status=` or `delay=`:
/// keeps its admissions for the final status and settles a held request.
#[inline(never)]
fn admitted_extras(r: &mut Request, limits: &[conf::Limit], applied: &[Applied]) -> RequestStatus {
    count_status::reserve(r, limits, applied);
    hold::admitted(r, limits)
}

/// The glue's side of a rejection the engine made (it has given back the
/// other limits' admissions and a held request's hold, and counted the
/// rejection): a client over its share, a ban, the log line. Out of line,
/// so that the admitting path's code stays together.
#[inline(never)]
fn reject(
    r: &Request,
    lcf: &LocConf,
    limits: &[conf::Limit],
    rej: &engine::Rejection,
) -> RequestStatus {
    if let Some(ahead) = rej.share_full {
        hold::share_full(r, lcf, limits, ahead);
    }
    if let Some(secs) = rej.banned {
        ban::banned(&limits[rej.index], rej.hash, secs, r.log());
    }
    log_rejection(r.log(), lcf.log_level, limits[rej.index].zone(), rej);
    if rej.dry_run {
        RequestStatus::RejectedDryRun
    } else if rej.in_flight {
        RequestStatus::RejectedInFlight
    } else {
        RequestStatus::Rejected
    }
}
