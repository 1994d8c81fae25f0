//! The phase handler: evaluates every limit of the location, counts the
//! request once per main request, and rejects it when any limit is
//! exceeded.
//!
//! The same handler runs in two of nginx's phases, and each location
//! decides in the one its `rate_limit_window_phase` names: PREACCESS, before
//! the access checks, or PRECONTENT ("postaccess"), after every access check
//! has passed and before `try_files` and `mirror` (this module's
//! postconfiguration runs after theirs, and nginx runs a phase's handlers in
//! the reverse order of registration).
//!
//! Order of work. Nothing shared is ever held: the table is lock-free, so
//! once `acquire` returns, logging and the request pool are safe to use.
//! 1. reserve the decision's record in the main request's pool (the only
//!    allocation), before anything is counted;
//! 2. per limit: evaluate its key and limit, one `acquire`, record it;
//! 3. on a rejection, `undo` the admissions already made so that a
//!    rejected request is counted by none;
//! 4. bump the zone counters, log, and commit the decision.

use core::sync::atomic::Ordering;
use nginx_sys::{
    ngx_array_push, ngx_conf_t, ngx_http_complex_value, ngx_http_core_main_conf_t,
    ngx_http_get_flushed_variable, ngx_http_handler_pt, ngx_http_phases,
    ngx_http_phases_NGX_HTTP_PREACCESS_PHASE, ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE,
    ngx_http_request_t, ngx_int_t, ngx_str_t, ngx_uint_t, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_LOG_ERR, NGX_LOG_WARN,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};
use ngx::{ngx_log_debug_mask, ngx_log_error};

use rate_limit_window_core::parse::{escape, parse_limit, LimitError};
use rate_limit_window_core::{
    Counter, Decision as CoreDecision, FailPolicy, KeyHash, Outcome, Table,
};

use crate::conf::{self, LimitValue, LocConf, PHASE_POSTACCESS, PHASE_PREACCESS};
use crate::decision::{self, Applied, Verdict};
use crate::delay;
use crate::util;
use crate::zone::ZoneConf;

/// How long a kind of degradation must stay quiet before its next
/// occurrence is logged again as a new episode (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

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

/// Pushes the handler onto the PREACCESS and the PRECONTENT phases.
///
/// # Safety
/// `cf` must be the configuration passed to postconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: cf is valid during postconfiguration.
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(unsafe { &*cf }) else {
        return Status::NGX_ERROR.into();
    };
    let phases: [(
        ngx_http_phases,
        extern "C" fn(*mut ngx_http_request_t) -> ngx_int_t,
    ); 2] = [
        (ngx_http_phases_NGX_HTTP_PREACCESS_PHASE, preaccess_handler),
        (
            ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE,
            precontent_handler,
        ),
    ];
    for (phase, handler) in phases {
        if push_handler(cmcf, phase, handler).is_err() {
            return Status::NGX_ERROR.into();
        }
    }
    Status::NGX_OK.into()
}

/// Appends `handler` to `phase`'s handler array.
fn push_handler(
    cmcf: &mut ngx_http_core_main_conf_t,
    phase: ngx_http_phases,
    handler: extern "C" fn(*mut ngx_http_request_t) -> ngx_int_t,
) -> Result<(), ()> {
    // SAFETY: the phase handler arrays are initialised by the core module
    // before any postconfiguration runs.
    let h = unsafe { ngx_array_push(&mut cmcf.phases[phase as usize].handlers) }
        .cast::<ngx_http_handler_pt>();
    if h.is_null() {
        return Err(());
    }
    // SAFETY: h is a fresh slot in the handler array.
    unsafe { *h = Some(handler) };
    Ok(())
}

/// A limit made ready for the table: key hashed, limit evaluated.
pub(crate) enum Judge {
    /// The key is empty: the limit does not apply.
    EmptyKey,
    /// The limit variable is empty: the limit does not apply.
    Exempt,
    /// Invalid limit value in a fail=open zone.
    Skipped,
    Limit {
        hash: KeyHash,
        limit: u32,
        invalid: bool,
    },
}

/// Evaluates one limit's key and value for the request. Err(()) means the
/// key could not be evaluated (an nginx error).
///
/// # Safety
/// `r` must be a valid request.
pub(crate) unsafe fn judge(
    r: *mut ngx_http_request_t,
    zone: &ZoneConf,
    table: &Table<'static>,
    value: LimitValue,
) -> Result<Judge, ()> {
    // SAFETY: r is valid.
    let key = unsafe { eval_key(r, zone) }?;
    if key.is_empty() {
        return Ok(Judge::EmptyKey);
    }
    // SAFETY: r is valid.
    let (limit, invalid) = match unsafe { eval_limit(r, value) }? {
        LimitRead::Limit(n) => (n, false),
        LimitRead::Empty => return Ok(Judge::Exempt),
        LimitRead::Invalid(bad) => {
            // SAFETY: r is valid.
            unsafe { invalid_limit(r, zone, &bad) };
            match zone.fail {
                FailPolicy::Open => return Ok(Judge::Skipped),
                // Fail closed: judge the request against a limit of 0.
                FailPolicy::Closed => (0, true),
            }
        }
    };
    Ok(Judge::Limit {
        hash: table.hash_key(key),
        limit,
        invalid,
    })
}

/// Logs and counts a limit variable that held garbage (out of line: the
/// request path is the valid limit).
///
/// # Safety
/// `r` must be a valid request.
#[cold]
#[inline(never)]
unsafe fn invalid_limit(r: *mut ngx_http_request_t, zone: &ZoneConf, bad: &LimitError) {
    // SAFETY: r is valid.
    let log = unsafe { (*(*r).connection).log };
    ngx_log_error!(
        NGX_LOG_ERR,
        log,
        "rate_limit_window: invalid limit \"{}\" for zone \"{}\", applying fail={}",
        escape(bad.input()),
        zone.name_str(),
        if zone.fail == FailPolicy::Closed {
            "closed"
        } else {
            "open"
        }
    );
    if !zone.header.is_null() {
        // SAFETY: the header lives in the zone for the cycle.
        unsafe {
            (*zone.header)
                .invalid_limits
                .fetch_add(1, Ordering::Relaxed)
        };
    }
}

/// The zone's key for the request (empty: the limit does not apply).
/// Err(()) is an nginx error while evaluating it.
///
/// # Safety
/// `r` must be a valid request; the bytes live in its pool or its headers.
unsafe fn eval_key<'r>(r: *mut ngx_http_request_t, zone: &ZoneConf) -> Result<&'r [u8], ()> {
    if let Some(index) = zone.key_index {
        // A key that is one variable: the same value the script engine
        // would copy out (a cacheable variable is evaluated once per
        // request, a non-cacheable one again), without the copy.
        // SAFETY: the index was obtained at configuration time; r is valid.
        let v = unsafe { ngx_http_get_flushed_variable(r, index) };
        // SAFETY: a non-null result is the request's variable value, whose
        // data lives as long as the request.
        return match unsafe { v.as_ref() } {
            None => Err(()),
            // SAFETY: as above.
            Some(v) => Ok(unsafe { util::variable_bytes(v) }),
        };
    }
    let mut key = ngx_str_t::empty();
    // SAFETY: the key was compiled at configuration time; r is valid.
    if unsafe { ngx_http_complex_value(r, &zone.key as *const _ as *mut _, &mut key) }
        != Status::NGX_OK.into()
    {
        return Err(());
    }
    if key.is_empty() {
        return Ok(&[]);
    }
    // SAFETY: the value lives in the request pool.
    Ok(unsafe { core::slice::from_raw_parts(key.data, key.len) })
}

/// The limit of one request, read from its `limit=` value.
enum LimitRead {
    Limit(u32),
    /// An empty variable: the request is exempt from this limit.
    Empty,
    /// Not an integer in range (the error keeps the start of the value).
    Invalid(LimitError),
}

/// Reads the limit for this request. Err(()) is an nginx error while
/// evaluating the variable.
///
/// # Safety
/// `r` must be a valid request.
unsafe fn eval_limit(r: *mut ngx_http_request_t, value: LimitValue) -> Result<LimitRead, ()> {
    match value {
        LimitValue::Fixed(n) => Ok(LimitRead::Limit(n)),
        LimitValue::Variable(cv) => {
            let mut s = ngx_str_t::empty();
            // SAFETY: cv was compiled at configuration time; r is valid.
            if unsafe { ngx_http_complex_value(r, cv, &mut s) } != Status::NGX_OK.into() {
                return Err(());
            }
            let b = s.as_bytes();
            if b.is_empty() {
                return Ok(LimitRead::Empty);
            }
            Ok(parse_limit(b).map_or_else(LimitRead::Invalid, LimitRead::Limit))
        }
    }
}

extern "C" fn preaccess_handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls phase handlers with a valid request.
    unsafe { handle(r, Phase::Preaccess) }
}

extern "C" fn precontent_handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls phase handlers with a valid request.
    unsafe { handle(r, Phase::Postaccess) }
}

/// Decides the request if its location decides in `phase` and nothing has
/// decided it yet.
///
/// # Safety
/// `r` must be a valid request in the phase `phase` names.
unsafe fn handle(r: *mut ngx_http_request_t, phase: Phase) -> ngx_int_t {
    let declined: ngx_int_t = Status::NGX_DECLINED.into();

    // SAFETY: r is valid; its loc_conf array holds our LocConf.
    let Some(lcf) = (unsafe { conf::loc_conf_raw(r) }) else {
        return declined;
    };
    let Some(limits) = lcf.limits.as_deref().filter(|l| !l.is_empty()) else {
        return declined;
    };
    if lcf.phase != phase.conf_value() {
        if phase == Phase::Postaccess {
            // SAFETY: r is valid and past its access checks.
            unsafe { warn_on_late_keys(r, limits) };
        }
        return declined;
    }
    // Counted once per main request: an internal redirect, error_page or
    // subrequest finds the decision already made.
    // SAFETY: r is valid.
    if unsafe { decision::find(r) }.is_some() {
        return declined;
    }
    // SAFETY: r is valid.
    if unsafe { main_decides_later(r) } {
        return declined;
    }
    // An error_page redirect of a request not decided yet: in postaccess,
    // a request that failed an access check (401, 403) is never counted,
    // whatever page answers it.
    // SAFETY: r is valid.
    if phase == Phase::Postaccess && unsafe { (*r).error_page() } != 0 {
        return declined;
    }
    // SAFETY: r is valid.
    let log = unsafe { (*(*r).connection).log };
    ngx_log_debug_mask!(
        DebugMask::Http,
        log,
        "rate_limit_window: deciding in the {} phase",
        if phase == Phase::Postaccess {
            "postaccess (precontent)"
        } else {
            "preaccess"
        }
    );
    // SAFETY: r is valid and in the phase its location decides in.
    unsafe { decide(r, lcf, limits) }
}

/// A subrequest started before its main request has decided, while the
/// main request's location decides in postaccess (an `auth_request`
/// subrequest, made in the access phase): the main request decides later,
/// so the subrequest must neither decide for it nor be counted.
///
/// # Safety
/// `r` must be a valid request.
unsafe fn main_decides_later(r: *mut ngx_http_request_t) -> bool {
    // SAFETY: r and its main request are valid.
    let main = unsafe { (*r).main };
    if main == r {
        return false;
    }
    // SAFETY: the main request is valid; its loc_conf holds our LocConf.
    let Some(mcf) = (unsafe { conf::loc_conf_raw(main) }) else {
        return false;
    };
    mcf.phase == PHASE_POSTACCESS && mcf.limits.as_ref().is_some_and(|l| !l.is_empty())
}

/// Makes and commits the decision for `r`: the location's limits, in order.
///
/// # Safety
/// `r` must be a valid request not decided yet; `limits` are its location's.
unsafe fn decide(r: *mut ngx_http_request_t, lcf: &LocConf, limits: &[conf::Limit]) -> ngx_int_t {
    let declined: ngx_int_t = Status::NGX_DECLINED.into();
    let server_error = NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;

    // The decision's record, allocated before anything is counted.
    // SAFETY: r is valid.
    let Some(mut pending) = (unsafe { decision::reserve(r, limits.len()) }) else {
        return server_error;
    };
    // SAFETY: r is valid.
    let log = unsafe { (*(*r).connection).log };
    let mut now = util::now_ms();
    let shard = util::shard();

    // The limit that rejected the request: its zone, limit, the table's
    // decision, and whether its limit variable held garbage.
    let mut rejection: Option<(&ZoneConf, u32, CoreDecision, bool)> = None;
    let mut rejected_at = 0;
    for (n, l) in limits.iter().enumerate() {
        // SAFETY: zones live in the configuration pool for the cycle.
        let zone = unsafe { &*l.zone };
        let Some(table) = zone.table.as_ref() else {
            continue;
        };
        // SAFETY: r is valid.
        let Ok(j) = (unsafe { judge(r, zone, table, l.value) }) else {
            undo_all(pending.applied());
            return server_error;
        };
        let (hash, limit, invalid) = match j {
            Judge::EmptyKey => {
                pending.key_empty(n);
                table.add(shard, Counter::Exempt, 1);
                continue;
            }
            Judge::Exempt => {
                table.add(shard, Counter::Exempt, 1);
                continue;
            }
            Judge::Skipped => continue,
            Judge::Limit {
                hash,
                limit,
                invalid,
            } => (hash, limit, invalid),
        };
        // Lock-free: nothing shared is held once it returns, so logging
        // and the pool are safe to use from here on.
        let mut d = crate::zone::acquire(zone, table, hash, &mut now, limit, shard);
        pending.push(Applied {
            zone,
            limit,
            remaining: d.remaining,
            reset_s: d.reset_s,
            admission: d.admission,
        });
        log_episodes(log, zone, &d, now);
        if d.outcome != Outcome::Admitted {
            // A retry must wait for every limit, so Retry-After is the
            // longest wait among the limits not judged yet, too.
            // SAFETY: r is valid.
            let rest = unsafe { longest_wait(r, &limits[n + 1..], now) };
            d.retry_after_s = d.retry_after_s.max(rest);
            rejection = Some((zone, limit, d, invalid));
            rejected_at = n;
            break;
        }
    }

    let mut retry_after = 0;
    let verdict = match rejection {
        Some((zone, limit, d, invalid)) => {
            // delay=: hold it on a timer instead (see delay.rs).
            let rej = delay::Rejection {
                lcf,
                limits,
                applied: pending.applied(),
                index: rejected_at,
                outcome: d.outcome,
                now,
            };
            // SAFETY: r is valid and being decided by `limits`.
            match unsafe { delay::on_reject(r, &rej) } {
                delay::OnReject::Hold => {
                    undo_all(pending.applied());
                    return Status::NGX_AGAIN.into();
                }
                delay::OnReject::WouldHold => {
                    undo_all(pending.applied());
                    Verdict::DelayedDryRun
                }
                delay::OnReject::Reject => {
                    retry_after = d.retry_after_s;
                    let rejected = Rejected {
                        zone,
                        limit,
                        d,
                        invalid,
                    };
                    reject(log, lcf, pending.applied(), &rejected, shard)
                }
            }
        }
        None if pending.applied().is_empty() => Verdict::Exempt,
        None => {
            for a in pending.applied() {
                // SAFETY: zones live in the configuration pool for the cycle.
                if let Some(table) = unsafe { &*a.zone }.table.as_ref() {
                    table.add(shard, Counter::Passed, 1);
                }
            }
            // SAFETY: r is valid and was just admitted by `limits`.
            unsafe { delay::admitted(r, limits, now) }
        }
    };

    // SAFETY: pending was reserved for r.
    unsafe { decision::commit(r, pending, verdict, lcf.headers, retry_after) };

    if verdict == Verdict::Rejected {
        return lcf.status;
    }
    declined
}

/// The limit that rejected a request.
struct Rejected<'a> {
    zone: &'a ZoneConf,
    /// Requests per window.
    limit: u32,
    d: CoreDecision,
    /// Its limit variable held garbage (fail=closed).
    invalid: bool,
}

/// A request rejected by one limit is counted by none: gives back the
/// admissions of the other limits, counts and logs the rejection. Out of
/// line, so that the admitting path's code stays together.
#[inline(never)]
fn reject(
    log: *mut nginx_sys::ngx_log_t,
    lcf: &LocConf,
    applied: &[Applied],
    rejected: &Rejected,
    shard: usize,
) -> Verdict {
    let dry_run = lcf.dry_run != 0;
    undo_all(applied);
    if let Some(table) = rejected.zone.table.as_ref() {
        let c = if dry_run {
            Counter::RejectedDryRun
        } else {
            Counter::Rejected
        };
        table.add(shard, c, 1);
        if rejected.invalid {
            table.add(shard, Counter::FailClosed, 1);
        }
    }
    log_rejection(log, lcf, rejected, dry_run);
    if dry_run {
        Verdict::RejectedDryRun
    } else {
        Verdict::Rejected
    }
}

/// The longest Retry-After (whole seconds) among `limits`, read without
/// counting anything: after a rejection, the limits not yet judged must
/// also admit the retry.
///
/// # Safety
/// `r` must be a valid request.
#[inline(never)]
unsafe fn longest_wait(r: *mut ngx_http_request_t, limits: &[conf::Limit], now: u64) -> u32 {
    let mut longest = 0;
    for l in limits {
        // SAFETY: zones live in the configuration pool for the cycle.
        let zone = unsafe { &*l.zone };
        let Some(table) = zone.table.as_ref() else {
            continue;
        };
        // SAFETY: r is valid.
        if let Ok(Judge::Limit { hash, limit, .. }) = unsafe { judge(r, zone, table, l.value) } {
            longest = longest.max(table.retry_after_secs(hash, now, limit));
        }
    }
    longest
}

/// Gives back the admissions recorded so far.
fn undo_all(applied: &[Applied]) {
    for a in applied {
        if let Some(adm) = a.admission.as_ref() {
            // SAFETY: zones live in the configuration pool for the cycle.
            if let Some(table) = unsafe { &*a.zone }.table.as_ref() {
                table.undo(adm);
            }
        }
    }
}

/// The rejection log line. Never the raw key: it may be an API key.
fn log_rejection(
    log: *mut nginx_sys::ngx_log_t,
    lcf: &LocConf,
    rejected: &Rejected,
    dry_run: bool,
) {
    let Rejected {
        zone,
        limit,
        d,
        invalid,
    } = rejected;
    let what = match d.outcome {
        Outcome::FailClosed => "zone is full, rejecting a new client (fail=closed)",
        _ if *invalid => "invalid limit value, rejecting (fail=closed)",
        _ => "limiting requests",
    };
    ngx_log_error!(
        lcf.log_level,
        log,
        "{}{} by zone \"{}\", estimate: {}, limit: {}, window: {}s",
        if dry_run { "dry run, " } else { "" },
        what,
        zone.name_str(),
        d.estimate,
        limit,
        zone.window.ms() / 1000
    );
}

/// One warning per degradation episode, not one per request. The common
/// case, nothing to report, is one test here; the logging is out of line so
/// that its code does not sit between the request path's instructions.
#[inline]
fn log_episodes(log: *mut nginx_sys::ngx_log_t, zone: &ZoneConf, d: &CoreDecision, now: u64) {
    let e = &d.events;
    if e.evicted_live
        || e.clock_backwards
        || d.outcome == Outcome::FailClosed
        || zone.redis.is_some()
    {
        log_episodes_slow(log, zone, d, now);
    }
}

#[cold]
#[inline(never)]
fn log_episodes_slow(log: *mut nginx_sys::ngx_log_t, zone: &ZoneConf, d: &CoreDecision, now: u64) {
    let Some(table) = zone.table.as_ref() else {
        return;
    };
    if zone.redis.is_some() && !zone.header.is_null() {
        // SAFETY: the header lives in the zone as long as the cycle.
        let header = unsafe { &*zone.header };
        if let Some(since) = header.outage_to_log() {
            ngx_log_error!(
                NGX_LOG_WARN,
                log,
                "rate_limit_window_zone \"{}\": redis sync failing for {} ms; deciding from this \
                 gateway's counts only (fail-open for the cluster part); errors are counted in metrics",
                zone.name_str(),
                now.saturating_sub(since)
            );
        }
    }
    let episode = |c: Counter| table.note_episode(c, now, EPISODE_QUIET_MS);
    if d.events.evicted_live && episode(Counter::EvictLive) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\" is full: evicting live clients to track new ones (fail=open); \
             increase the zone size; further evictions are counted in metrics",
            zone.name_str()
        );
    }
    if d.outcome == Outcome::FailClosed && episode(Counter::FailClosed) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\" is full: rejecting new clients (fail=closed); \
             increase the zone size; further rejections are counted in metrics",
            zone.name_str()
        );
    }
    if d.events.clock_backwards && episode(Counter::ClockBackwards) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\": the clock went backwards (request time is older than a \
             client's window); counts are kept and the newest window wins",
            zone.name_str()
        );
    }
}

/// Never silent about a limit that is off: in a location that decides in
/// preaccess, a key that was empty then (so the limit did not apply) but is
/// set now, after the access checks, comes from authentication
/// (`auth_request_set`, `$remote_user` from a later module...). One `warn`
/// per zone and episode names the zone and the phase to use; the requests
/// are counted as `exempt` in the metrics either way.
///
/// # Safety
/// `r` must be a valid request in the PRECONTENT phase; `limits` are its
/// location's.
unsafe fn warn_on_late_keys(r: *mut ngx_http_request_t, limits: &[conf::Limit]) {
    // Only the request decided in this very location: after an internal
    // redirect the recorded keys belong to another location's limits.
    // SAFETY: r is valid.
    if unsafe { (*r).main != r || (*r).internal() != 0 } {
        return;
    }
    // SAFETY: r is valid.
    let Some(d) = (unsafe { decision::find(r) }) else {
        return;
    };
    if d.empty_keys == 0 {
        return;
    }
    // SAFETY: r is valid.
    unsafe { warn_on_late_keys_slow(r, limits, d.empty_keys) };
}

#[cold]
#[inline(never)]
unsafe fn warn_on_late_keys_slow(r: *mut ngx_http_request_t, limits: &[conf::Limit], empty: u64) {
    let now = util::now_ms();
    for (n, l) in limits.iter().enumerate().take(64) {
        if empty & (1 << n) == 0 {
            continue;
        }
        // SAFETY: zones live in the configuration pool for the cycle.
        let zone = unsafe { &*l.zone };
        let Some(table) = zone.table.as_ref() else {
            continue;
        };
        // SAFETY: r is valid.
        if !unsafe { key_set_now(r, zone) } {
            continue;
        }
        if table.note_episode(Counter::Exempt, now, EPISODE_QUIET_MS) {
            // SAFETY: r is valid.
            let log = unsafe { (*(*r).connection).log };
            ngx_log_error!(
                NGX_LOG_WARN,
                log,
                "rate_limit_window_zone \"{}\": the key is empty in the preaccess phase, where \
                 this location decides, and set only after the access checks (auth_request, \
                 auth_basic...): these requests are not limited (counted as exempt); use \
                 \"rate_limit_window_phase postaccess;\"",
                zone.name_str()
            );
        }
    }
}

/// Whether the zone's key evaluates to something now. A one-variable key
/// is read as cached first (`auth_request_set` writes the request's value
/// directly), then evaluated afresh (a `map` of it, cached empty in
/// preaccess, would hide the authenticated value), and the request's cached
/// value is put back.
///
/// # Safety
/// `r` must be a valid request.
unsafe fn key_set_now(r: *mut ngx_http_request_t, zone: &ZoneConf) -> bool {
    // SAFETY: r is valid.
    if unsafe { eval_key(r, zone) }.is_ok_and(|k| !k.is_empty()) {
        return true;
    }
    let Some(index) = zone.key_index else {
        return false;
    };
    // SAFETY: the index was obtained at configuration time, so it is within
    // the request's variables array; the entry is restored before return.
    unsafe {
        let slot = (*r).variables.add(index);
        let saved = *slot;
        (*slot).set_valid(0);
        (*slot).set_not_found(0);
        let v = ngx_http_get_flushed_variable(r, index);
        let set = v
            .as_ref()
            .is_some_and(|v| !util::variable_bytes(v).is_empty());
        *slot = saved;
        set
    }
}
