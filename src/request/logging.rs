//! The request path's log lines: the rejection line, invalid values, one
//! warning per degradation episode (a full zone, the clock going back, no
//! room for in-flight places, keys set only after the access checks), and
//! the debug lines of a limit that did not apply and of the slot path.

use core::sync::atomic::Ordering;
use nginx_sys::{ngx_uint_t, NGX_LOG_ERR, NGX_LOG_WARN};
use ngx::http::Request;
use ngx::{ngx_log_debug_http, ngx_log_error};

use rate_limit_window_core::conf::parse::escape;
use rate_limit_window_core::engine::{self, Invalid, Skip};
use rate_limit_window_core::{Answer, Counter, Events, FailPolicy, Outcome};

use crate::conf::{self, LocConf};
use crate::ffi::{process, request_bits, vars};
use crate::request::key::eval_key;
use crate::request::record;
use crate::zone::ZoneConf;

/// How long a kind of degradation must stay quiet before its next
/// occurrence is logged again as a new episode (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

/// Logs a limit or cost value the engine found invalid (out of line: the
/// request path is the valid value). The value is read again for the line;
/// the engine counts it.
#[cold]
#[inline(never)]
pub(super) fn log_invalid(r: &mut Request, l: &conf::Limit, what: Invalid) {
    let bad = match what {
        Invalid::Limit => variable_text(r, l.value.variable()),
        Invalid::Cost(_) => variable_text(r, l.cost.variable()),
        Invalid::InFlight => variable_text(r, l.in_flight.and_then(|v| v.variable())),
    };
    log_invalid_value(r.log(), l.zone(), what, &bad);
}

/// The log line of a value the engine found invalid, `bad` (as read: the
/// first bytes of a variable's value), for `zone`; http's and the stream's.
#[cold]
#[inline(never)]
pub(crate) fn log_invalid_value(
    log: *mut nginx_sys::ngx_log_t,
    zone: &ZoneConf,
    what: Invalid,
    bad: &[u8],
) {
    let fail = if zone.fail == FailPolicy::Closed {
        "closed"
    } else {
        "open"
    };
    let bad = &bad[..bad.len().min(64)];
    // One format string each: the texts stay greppable (and in the .so).
    match what {
        Invalid::Limit => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window: invalid limit \"{}\" for zone \"{}\", applying fail={}; \
                 further invalid values are counted in rate_limit_window_invalid_limit_total",
                escape(bad),
                zone.name,
                fail
            );
        }
        Invalid::Cost(limit) if zone.fail != FailPolicy::Closed => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window: invalid cost \"{}\" for zone \"{}\" (an integer from 1), \
                 charging the whole limit ({}) under fail=open; further invalid values are \
                 counted in rate_limit_window_invalid_limit_total",
                escape(bad),
                zone.name,
                limit
            );
        }
        Invalid::Cost(_) => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window: invalid cost \"{}\" for zone \"{}\" (an integer from 1), \
                 applying fail={}; further invalid values are counted in \
                 rate_limit_window_invalid_limit_total",
                escape(bad),
                zone.name,
                fail
            );
        }
        Invalid::InFlight => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window: invalid in_flight \"{}\" for zone \"{}\" (an integer from 0 \
                 to 65535), applying fail={}; further invalid values are counted in \
                 rate_limit_window_invalid_limit_total",
                escape(bad),
                zone.name,
                fail
            );
        }
    }
}

/// The first 64 bytes of a limit or cost variable's value for a log line
/// (empty when it is not a variable or cannot be evaluated).
fn variable_text(r: &mut Request, cv: Option<*mut nginx_sys::ngx_http_complex_value_t>) -> Vec<u8> {
    let Some(cv) = cv else {
        return Vec::new();
    };
    // SAFETY: cv was compiled into the configuration pool, which outlives
    // every request of the cycle.
    match r.get_complex_value(unsafe { &*cv }) {
        Some(v) => v.as_bytes().iter().copied().take(64).collect(),
        None => Vec::new(),
    }
}

/// How the table found the client's slot, for the debug log.
pub(super) fn slot_path(d: &Answer) -> &'static str {
    match d.outcome {
        Outcome::FailClosed => "none, the zone is full (fail=closed)",
        _ if d.events.evicted_live => "a live client's, evicted (the zone is full)",
        _ if d.events.evicted_idle => "an idle client's, reused",
        _ if d.events.clock_backwards => "its own, from a later window (clock went back)",
        _ => "its own or a free one",
    }
}

/// A limit that did not apply, or an override's answer, at debug level.
#[cold]
#[inline(never)]
pub(super) fn skipped(r: &Request, zone: &ZoneConf, why: Skip) {
    let text = match why {
        Skip::EmptyKey => "does not apply: the key is empty",
        Skip::EmptyLimit => "does not apply: the limit variable is empty",
        Skip::InvalidLimit => "does not apply: the limit value is invalid (fail=open)",
        Skip::OverrideExempt => "exempt by an override",
        Skip::OverrideReject => "rejected by an override",
        Skip::EmptyInFlight => "takes no in-flight place: the in_flight variable is empty",
        Skip::InvalidInFlight => {
            "takes no in-flight place: the in_flight value is invalid (fail=open)"
        }
        Skip::InFlightNoRoom => "takes no in-flight place: no room to count it (fail=open)",
    };
    if why == Skip::InFlightNoRoom {
        log_no_room(r, zone);
    }
    ngx_log_debug_http!(r, "rate_limit_window: zone \"{}\" {}", zone.name, text);
}

/// The rejection log line. Never the raw key: it may be an API key.
/// `level`: `rate_limit_window_log_level`'s.
pub(crate) fn log_rejection(
    log: *mut nginx_sys::ngx_log_t,
    level: ngx_uint_t,
    zone: &ZoneConf,
    rej: &engine::Rejection,
) {
    let d = &rej.decision;
    if rej.in_flight {
        log_in_flight(log, level, zone, rej);
        return;
    }
    let what = match d.outcome {
        Outcome::FailClosed => "zone is full, rejecting a new client (fail=closed)",
        _ if rej.invalid => "invalid limit or cost value, rejecting (fail=closed)",
        _ if rej.overridden => "client blocked by an override",
        _ if rej.cost > rej.limit.max(1) => "cost above the limit in force, rejecting",
        _ => "limiting requests",
    };
    ngx_log_error!(
        level,
        log,
        "{}{} by zone \"{}\", estimate: {}, limit: {}, window: {}s",
        if rej.dry_run { "dry run, " } else { "" },
        what,
        zone.name,
        d.estimate,
        rej.limit,
        zone.window.secs()
    );
}

/// The log line of a request `in_flight=` refused (out of line).
#[cold]
#[inline(never)]
fn log_in_flight(
    log: *mut nginx_sys::ngx_log_t,
    level: ngx_uint_t,
    zone: &ZoneConf,
    rej: &engine::Rejection,
) {
    let what = match rej.decision.outcome {
        Outcome::FailClosed => "no room to count requests in flight, rejecting (fail=closed)",
        _ if rej.invalid => "invalid in_flight value, rejecting (fail=closed)",
        _ => "limiting requests in flight",
    };
    ngx_log_error!(
        level,
        log,
        "{}{} by zone \"{}\", in flight: {}, in_flight: {}",
        if rej.dry_run { "dry run, " } else { "" },
        what,
        zone.name,
        rej.decision.estimate,
        rej.limit
    );
}

/// A request `in_flight=` could not count (fail=open): one warning a
/// minute at most per worker (the metrics count each).
#[cold]
#[inline(never)]
fn log_no_room(r: &Request, zone: &ZoneConf) {
    /// When this worker last logged it (epoch ms + 1; 0: never).
    static LOGGED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let now = process::now_ms();
    let last = LOGGED.load(Ordering::Relaxed);
    if last == 0 || now.saturating_sub(last - 1) > EPISODE_QUIET_MS {
        LOGGED.store(now + 1, Ordering::Relaxed);
        ngx_log_error!(
            NGX_LOG_WARN,
            r.log(),
            "rate_limit_window_zone \"{}\": no room to count requests in flight: admitting \
             them without a place (fail=open); increase the zone size; further ones are \
             counted in metrics",
            zone.name
        );
    }
}

/// One warning per degradation episode, not one per request. The common
/// case, nothing to report, is one test here; the logging is out of line so
/// that its code does not sit between the request path's instructions.
#[inline]
pub(crate) fn log_episodes(log: *mut nginx_sys::ngx_log_t, zone: &ZoneConf, d: &Answer, now: u64) {
    let e = &d.events;
    // `|`, not `||`: one test of the four, without a branch each.
    let fail_closed = d.outcome == Outcome::FailClosed;
    if e.evicted_live | e.clock_backwards | fail_closed | zone.redis.is_some() {
        core::hint::cold_path();
        // By value: the decision's address never escapes the request path,
        // so that it can stay in registers there.
        log_episodes_slow(log, zone, *e, fail_closed, now);
    }
}

/// [`log_episodes`] when there is something to look at: `events` and
/// `fail_closed` are the table decision's.
#[cold]
#[inline(never)]
fn log_episodes_slow(
    log: *mut nginx_sys::ngx_log_t,
    zone: &ZoneConf,
    events: Events,
    fail_closed: bool,
    now: u64,
) {
    let Some(table) = zone.table.as_ref() else {
        return;
    };
    if let Some(header) = zone.header().filter(|_| zone.redis.is_some()) {
        if let Some(since) = header.outage_to_log() {
            crate::sync::log_outage(log, zone, header, now.saturating_sub(since));
        }
    }
    if events.evicted_over_limit {
        if let Some(header) = zone.header() {
            header.evict_over_limit.fetch_add(1, Ordering::Relaxed);
        }
    }
    let episode = |c: Counter| table.note_episode(c, now, EPISODE_QUIET_MS);
    if events.evicted_live && episode(Counter::EvictLive) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\" is full: evicting live clients to track new ones (fail=open); \
             increase the zone size; further evictions are counted in metrics",
            zone.name
        );
    }
    if fail_closed && episode(Counter::FailClosed) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\" is full: rejecting new clients (fail=closed); \
             increase the zone size; further rejections are counted in metrics",
            zone.name
        );
    }
    if events.clock_backwards && episode(Counter::ClockBackwards) {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\": the clock went backwards (request time is older than a \
             client's window); counts are kept and the newest window wins",
            zone.name
        );
    }
}

/// Never silent about a limit that is off: in a location that decides in
/// preaccess, a key that was empty then (so the limit did not apply) but is
/// set now, after the access checks, comes from authentication
/// (`auth_request_set`, `$remote_user` from a later module...). One `warn`
/// per zone and episode names the zone and the phase to use; the requests
/// are counted as `exempt` in the metrics either way. `r` is in the
/// PRECONTENT phase; `lcf` is its location's configuration.
#[inline]
pub(super) fn warn_on_late_keys(r: &mut Request, lcf: &LocConf) {
    // The common case, no decision of this worker recorded an empty key:
    // one test, with the rest out of line.
    if record::late_keys_pending() {
        if let Some(limits) = lcf.limits.as_deref() {
            warn_on_late_keys_check(r, limits);
        }
    }
}

/// [`warn_on_late_keys`] once some decision recorded an empty key.
#[cold]
#[inline(never)]
fn warn_on_late_keys_check(r: &mut Request, limits: &[conf::Limit]) {
    // Only the request decided in this very location: after an internal
    // redirect the recorded keys belong to another location's limits.
    if !r.is_main() || request_bits::internal(r) {
        return;
    }
    let Some(d) = record::find(r) else {
        return;
    };
    if d.empty_keys == 0 {
        return;
    }
    warn_on_late_keys_slow(r, limits, d.empty_keys);
}

#[cold]
#[inline(never)]
fn warn_on_late_keys_slow(r: &mut Request, limits: &[conf::Limit], empty: u64) {
    let now = process::now_ms();
    for (n, l) in limits.iter().enumerate().take(64) {
        if empty & (1 << n) == 0 {
            continue;
        }
        let zone = l.zone();
        let Some(table) = zone.table.as_ref() else {
            continue;
        };
        if !key_set_now(r, zone) {
            continue;
        }
        if table.note_episode(Counter::Exempt, now, EPISODE_QUIET_MS) {
            ngx_log_error!(
                NGX_LOG_WARN,
                r.log(),
                "rate_limit_window_zone \"{}\": the key is empty in the preaccess phase, where \
                 this location decides, and set only after the access checks (auth_request, \
                 auth_basic...): these requests are not limited (counted as exempt); use \
                 \"rate_limit_window_phase postaccess;\"",
                zone.name
            );
        }
    }
}

/// Whether the zone's key evaluates to something now. A one-variable key
/// is read as cached first (`auth_request_set` writes the request's value
/// directly), then evaluated afresh (a `map` of it, cached empty in
/// preaccess, would hide the authenticated value), and the request's cached
/// value is put back.
fn key_set_now(r: &mut Request, zone: &ZoneConf) -> bool {
    if eval_key(r, zone).is_ok_and(|k| !k.is_empty()) {
        return true;
    }
    let Some(index) = zone.key_index else {
        return false;
    };
    // SAFETY: the index was obtained at configuration time; the request
    // is valid.
    unsafe { vars::set_afresh(r, index) }
}
