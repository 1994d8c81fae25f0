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

use core::sync::atomic::Ordering;
use nginx_sys::{
    ngx_http_get_flushed_variable, ngx_http_request_t, ngx_int_t, ngx_uint_t,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_LOG_ERR, NGX_LOG_WARN,
};
use ngx::core::Status;
use ngx::http::{HttpModuleLocationConf, Request};
use ngx::{ngx_log_debug_http, ngx_log_error};

use rate_limit_window_core::conf::addr::{mask_ipv6, IPV6_PREFIX_MAX};
use rate_limit_window_core::conf::parse::{escape, parse_limit};
use rate_limit_window_core::engine::{
    self, Ask, Cost, Hold, HostError, Invalid, Key, LimitConf, Shared, Skip, Verdict,
};
use rate_limit_window_core::overrides::range::Addr;
use rate_limit_window_core::shm::{Owner, Place, Places};
use rate_limit_window_core::{Admission, Answer, Counter, Events, FailPolicy, Outcome, Table};

use crate::conf::{self, LimitValue, LocConf, PHASE_POSTACCESS, PHASE_PREACCESS};
use crate::ffi::pool::main_of;
use crate::ffi::req::request_handler;
use crate::ffi::{header_in, process, vars};
use crate::request::ban;
use crate::request::hold;
use crate::request::record::{self, Applied, RequestStatus, Taken};
use crate::request::{cost, count_status, in_flight, near_limit, shed};
use crate::zone::ZoneConf;
use crate::Module;

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

/// Evaluates one limit's key and limit value for the request, as read:
/// the engine decides what an empty or invalid value means, and applies
/// the client's override. Err(()) means the key or the limit could not be
/// evaluated (an nginx error).
#[inline(always)]
fn eval(
    r: &mut Request,
    zone: &ZoneConf,
    table: &Table<'static>,
    value: LimitValue,
) -> Result<Key, ()> {
    let key = eval_key(r, zone)?;
    if key.is_empty() {
        return Ok(Key::Empty);
    }
    let masked;
    let key = if zone.ipv6_prefix < IPV6_PREFIX_MAX {
        core::hint::cold_path();
        masked = mask_ipv6(key, zone.ipv6_prefix);
        masked.as_ref().map_or(key, |m| &m[..])
    } else {
        key
    };
    let limit = eval_limit(r, value)?;
    Ok(Key::Client {
        hash: table.hash_key(key),
        limit,
    })
}

/// Logs a limit or cost value the engine found invalid (out of line: the
/// request path is the valid value). The value is read again for the line;
/// the engine counts it.
#[cold]
#[inline(never)]
fn log_invalid(r: &mut Request, l: &conf::Limit, what: Invalid) {
    let zone = l.zone();
    let fail = if zone.fail == FailPolicy::Closed {
        "closed"
    } else {
        "open"
    };
    let bad = match what {
        Invalid::Limit => variable_text(r, l.value.variable()),
        Invalid::Cost(_) => variable_text(r, l.cost.variable()),
        Invalid::InFlight => variable_text(r, l.in_flight.and_then(|v| v.variable())),
    };
    // One format string each: the texts stay greppable (and in the .so).
    match what {
        Invalid::Limit => {
            ngx_log_error!(
                NGX_LOG_ERR,
                r.log(),
                "rate_limit_window: invalid limit \"{}\" for zone \"{}\", applying fail={}",
                escape(&bad),
                zone.name,
                fail
            );
        }
        Invalid::Cost(_) => {
            ngx_log_error!(
                NGX_LOG_ERR,
                r.log(),
                "rate_limit_window: invalid cost \"{}\" for zone \"{}\" (an integer from 1), \
                 applying fail={}",
                escape(&bad),
                zone.name,
                fail
            );
        }
        Invalid::InFlight => {
            ngx_log_error!(
                NGX_LOG_ERR,
                r.log(),
                "rate_limit_window: invalid in_flight \"{}\" for zone \"{}\" (an integer from 0 \
                 to 65535), applying fail={}",
                escape(&bad),
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

/// The zone's key for the request (empty: the limit does not apply).
/// Err(()) is an nginx error while evaluating it. The bytes live in the
/// request's pool or its headers, as long as the request (`'p`).
#[inline(always)]
fn eval_key<'p>(r: &mut Request, zone: &ZoneConf) -> Result<&'p [u8], ()> {
    if let Some(index) = zone.key_index {
        // A key that is one variable: the same value the script engine
        // would copy out (a cacheable variable is evaluated once per
        // request, a non-cacheable one again), without the copy.
        if let Some(name) = zone.key_header {
            // SAFETY: the index was obtained at configuration time and the
            // header's name for it at init; the request is valid.
            return unsafe { header_in::header_key(r.into(), index, name) }.ok_or(());
        }
        // SAFETY: the index was obtained at configuration time; the
        // request is valid.
        let v = unsafe { vars::flushed_variable(r.into(), index) };
        // SAFETY: a non-null result is the request's variable value, whose
        // data lives as long as the request.
        return match unsafe { v.as_ref() } {
            None => Err(()),
            // SAFETY: as above.
            Some(v) => Ok(unsafe { vars::variable_bytes(v) }),
        };
    }
    eval_complex_key(r, zone)
}

/// [`eval_key`] of a key that is not one variable (the script engine), out
/// of line.
#[inline(never)]
fn eval_complex_key<'p>(r: &mut Request, zone: &ZoneConf) -> Result<&'p [u8], ()> {
    let key = r.get_complex_value(&zone.key).ok_or(())?.as_bytes();
    // SAFETY: the value lives in the request's pool, as long as the
    // request; only the borrow of `r` is shortened away.
    Ok(unsafe { core::slice::from_raw_parts(key.as_ptr(), key.len()) })
}

/// Reads the limit value for this request, as it is: a number, empty,
/// or invalid (the engine's `fail=` decides). Err(()) is an nginx error
/// while evaluating the variable.
fn eval_limit(r: &Request, value: LimitValue) -> Result<engine::LimitRead, ()> {
    match value {
        LimitValue::Fixed(n) => Ok(engine::LimitRead::Set(n)),
        LimitValue::Variable(cv) => {
            // SAFETY: cv was compiled into the configuration pool, which
            // outlives every request of the cycle.
            let b = r.get_complex_value(unsafe { &*cv }).ok_or(())?.as_bytes();
            if b.is_empty() {
                return Ok(engine::LimitRead::Empty);
            }
            Ok(parse_limit(b).map_or(engine::LimitRead::Invalid, engine::LimitRead::Set))
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
    let limits = match lcf.limits.as_deref() {
        Some(l) if !l.is_empty() => l,
        // A location with `rate_limit_window_shed` alone decides too.
        _ if lcf.shed.is_some() => &[],
        _ => return declined,
    };
    if lcf.phase != phase.conf_value() {
        if phase == Phase::Postaccess {
            warn_on_late_keys(r, limits);
        }
        return declined;
    }
    handle_limits(r, phase, lcf, limits, access_failed)
}

/// [`handle`] in the phase where the location decides: decides the request
/// unless it is decided already, decided later, or failed an access check.
#[inline(never)]
fn handle_limits(
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
    // A location with places (`in_flight=`, a shed group) has its own copy
    // of the decision, out of line: the common one has no code for them.
    if lcf.places {
        decide_with_places(r, lcf, limits, at)
    } else {
        decide::<false>(r, lcf, limits, at)
    }
}

/// [`decide`] for a location with places.
#[cold]
#[inline(never)]
fn decide_with_places(
    r: &mut Request,
    lcf: &LocConf,
    limits: &[conf::Limit],
    at: record::Place,
) -> ngx_int_t {
    decide::<true>(r, lcf, limits, at)
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
    let decides = mcf.limits.as_ref().is_some_and(|l| !l.is_empty()) || mcf.shed.is_some();
    mcf.phase == PHASE_POSTACCESS && decides
}

/// The request being decided, as the engine sees it: each limit's key,
/// value and cost evaluated when the engine asks, and its record.
/// `PLACES`: the location takes in-flight places (`LocConf::places`).
struct Judging<'a, const PLACES: bool> {
    r: &'a mut Request,
    lcf: &'a LocConf,
    limits: &'a [conf::Limit],
    /// The record being filled (held here, not behind a pointer: one
    /// struct in memory for the engine's out-of-line paths).
    pending: record::Pending,
}

impl<const PLACES: bool> engine::Request<'static> for Judging<'_, PLACES> {
    const PLACES: bool = PLACES;

    #[inline(always)]
    fn limits(&self) -> usize {
        self.limits.len()
    }

    #[inline(always)]
    fn conf(&self, n: usize) -> Option<LimitConf<'static>> {
        let l = &self.limits[n];
        let zone = l.zone();
        Some(LimitConf {
            table: zone.table.as_ref()?,
            overrides: zone.overrides.as_ref(),
            fail: zone.fail,
            delay_ms: l.delay_ms,
            ban_ms: l.ban_ms,
            line: l.counts,
        })
    }

    #[inline(always)]
    fn key(&mut self, n: usize) -> Result<Key, HostError> {
        let l = &self.limits[n];
        let zone = l.zone();
        let table = zone.table.as_ref().ok_or(HostError)?;
        // A line with `in_flight=` alone has the fixed 0 the engine
        // ignores, and notes no limit to the sync's near-limit threshold.
        let k = eval(self.r, zone, table, l.value).map_err(|()| HostError)?;
        if let Key::Client {
            limit: engine::LimitRead::Set(n),
            ..
        } = k
        {
            if l.counts != engine::Line::InFlight {
                near_limit::note_limit(zone, n);
            }
        }
        Ok(k)
    }

    fn in_flight(&mut self, n: usize) -> Result<engine::LimitRead, HostError> {
        let v = self.limits[n].in_flight.ok_or(HostError)?;
        in_flight::eval(self.r, v).map_err(|()| HostError)
    }

    fn in_flight_places(&self, n: usize) -> Option<&'static Places<'static>> {
        self.limits[n].zone().places.as_ref()
    }

    fn owner(&mut self, n: usize) -> Option<Owner> {
        self.limits[n].zone().places_owner()
    }

    fn took(&mut self, n: usize, p: Place) {
        if let Some(places) = self.limits[n].zone().places.as_ref() {
            let shed = false;
            in_flight::keep(
                &self.pending,
                Taken {
                    places,
                    place: p,
                    shed,
                },
            );
        }
    }

    fn places(&self, mut f: impl FnMut(&'static Places<'static>, Place)) {
        for t in in_flight::given_back(&self.pending) {
            f(t.places, t.place);
        }
    }

    #[inline(always)]
    fn cost(&mut self, n: usize) -> Result<Cost, HostError> {
        let l = &self.limits[n];
        if l.cost_one {
            // The default cost: nothing to evaluate.
            return Ok(Cost::Count(1));
        }
        core::hint::cold_path();
        cost::eval(self.r, l.cost).map_err(|()| HostError)
    }

    /// Only asked when the zone holds range overrides (`cidr=`).
    fn key_addr(&mut self, n: usize) -> Option<Addr> {
        let zone = self.limits[n].zone();
        if zone.key_src.as_bytes() != crate::zone::BINARY_REMOTE_ADDR {
            return None;
        }
        let key = eval_key(self.r, zone).ok()?;
        match mask_ipv6(key, zone.ipv6_prefix) {
            Some(m) => Addr::of_key(&m),
            None => Addr::of_key(key),
        }
    }

    fn invalid(&mut self, n: usize, what: Invalid) {
        log_invalid(self.r, &self.limits[n], what);
    }

    #[inline(always)]
    fn record(&mut self, n: usize, limit: u32, d: &Answer, now: u64) {
        let zone = self.limits[n].zone();
        self.pending.push(Applied {
            zone,
            limit,
            remaining: d.remaining,
            reset_s: d.reset_s,
            admission: d.admission,
        });
        ngx_log_debug_http!(
            self.r,
            "rate_limit_window: zone \"{}\": estimate {}, limit {}, {:?}, remaining {}, slot: {}",
            zone.name,
            d.estimate,
            limit,
            d.outcome,
            d.remaining,
            slot_path(d)
        );
        log_episodes(self.r.log(), zone, d, now);
    }

    fn skipped(&mut self, n: usize, why: Skip) {
        if why == Skip::EmptyKey {
            self.pending.key_empty(n);
        }
        skipped(self.r, self.limits[n].zone(), why);
    }

    #[inline(always)]
    fn admissions(&self, mut f: impl FnMut(&'static Table<'static>, &Admission)) {
        for a in self.pending.applied() {
            if let (Some(adm), Some(table)) = (a.admission.as_ref(), a.zone.table.as_ref()) {
                f(table, adm);
            }
        }
    }

    fn shared(&self, n: usize) -> Shared<'static> {
        let zone = self.limits[n].zone();
        Shared {
            invalid_count: zone.header().map(|h| &h.invalid_limits),
            turns: zone.turns.as_ref(),
        }
    }

    fn fresh_now(&mut self) -> u64 {
        // SAFETY: refreshes this process's cached time (nginx's own call, made
        // from the event loop thread we run on).
        unsafe { nginx_sys::ngx_time_update() };
        process::now_ms()
    }

    fn held_since(&self) -> Option<u64> {
        hold::held_since(self.r)
    }

    fn hold(&mut self, h: &Hold, now: u64) -> bool {
        let (lcf, limits) = (self.lcf, self.limits);
        let holding = hold::Holding {
            lcf,
            limits,
            hold: h,
            now,
        };
        hold::hold(self.r, &holding)
    }
}

/// How the table found the client's slot, for the debug log.
fn slot_path(d: &Answer) -> &'static str {
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
fn skipped(r: &Request, zone: &ZoneConf, why: Skip) {
    let text = match why {
        Skip::EmptyKey => "does not apply: the key is empty",
        Skip::EmptyLimit => "does not apply: the limit variable is empty",
        Skip::InvalidLimit => "does not apply: the limit value is invalid (fail=open)",
        Skip::InvalidCost => "does not apply: the cost is invalid (fail=open)",
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

/// Makes and commits the decision for `r`: the location's limits, in order,
/// decided by the core's engine. `at`: where the main request's record
/// goes, and the record if it has one already (a held request's); the
/// record is reserved (allocated) before anything is counted. Only a main
/// request is held: a subrequest's phases are run by its parent, not by
/// its connection's events.
#[inline(always)]
fn decide<const PLACES: bool>(
    r: &mut Request,
    lcf: &LocConf,
    limits: &[conf::Limit],
    at: record::Place,
) -> ngx_int_t {
    let Some(pending) = record::reserve(r, at, limits.len()) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    // A place taken is given back however the request ends: the record
    // is dropped with the pool (one test where no place is configured).
    if PLACES {
        if let Err(rc) = before_limits(r, lcf, &pending) {
            return rc;
        }
    }
    let ask = Ask {
        now_ms: process::now_ms(),
        shard: process::shard(),
        dry_run: lcf.dry_run != 0,
        holdable: r.is_main(),
    };
    let mut j = Judging::<PLACES> {
        r,
        lcf,
        limits,
        pending,
    };
    // Err: an nginx error; the engine gave back what it counted.
    let out = engine::decide(&mut j, &ask);
    // The admission first: one test, with every other verdict (and the
    // rejection's payload) out of line.
    let (verdict, retry_after) = if let Ok(Verdict::Admit) = out {
        (admitted(&mut j, &ask), 0)
    } else {
        core::hint::cold_path();
        match not_admitted(&mut j, &out, &ask) {
            Ok(v) => v,
            Err(rc) => {
                if PLACES {
                    in_flight::give_back_shed(&j.pending);
                }
                return rc;
            }
        }
    };
    let verdict = if PLACES {
        after_limits(&j, verdict)
    } else {
        verdict
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
        // A gRPC call gets a gRPC answer (grpc_reject.rs), any other the status.
        return crate::request::grpc_reject::reject(r, lcf, retry_after);
    }
    Status::NGX_DECLINED.into()
}

/// Before the limits of a location with places: the record is set to be
/// dropped with the pool, then the location's shed group decides (a place
/// taken is kept in the record). Ok: go on to the limits. Err: the
/// handler's return code (the request shed, or out of memory).
#[cold]
#[inline(never)]
fn before_limits(
    r: &mut Request,
    lcf: &LocConf,
    pending: &record::Pending,
) -> Result<(), ngx_int_t> {
    if !pending.settle_at_end() {
        return Err(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t);
    }
    let Some(s) = lcf.shed.as_ref() else {
        return Ok(());
    };
    match shed::admit(r, lcf, s) {
        Ok(p) => {
            if let Some(t) = p {
                in_flight::keep(pending, t);
            }
            Ok(())
        }
        Err(retry) => {
            // Never counted by the limits: the engine does not see it.
            record::commit(pending, RequestStatus::Shed, lcf.headers, retry);
            Err(s.status)
        }
    }
}

/// After the verdict of a location with places: a request that does not
/// go on gives its shed place back; one that goes on (admitted, exempt, a
/// dry run's) keeps it until it ends (its in-flight places are in its
/// record already: the engine gave them back if it was not admitted). A
/// location with a shed group and no limit reads PASSED.
#[cold]
#[inline(never)]
fn after_limits<const P: bool>(j: &Judging<'_, P>, verdict: RequestStatus) -> RequestStatus {
    if verdict.refused() {
        in_flight::give_back_shed(&j.pending);
    }
    match verdict {
        RequestStatus::Exempt if j.lcf.shed.is_some() => RequestStatus::Passed,
        v => v,
    }
}

/// An admitted request (decided as `ask`; the engine counted it
/// `passed`): each limit's near-limit count, then what `count_status=` and
/// `delay=` keep.
#[inline(always)]
fn admitted<const P: bool>(j: &mut Judging<'_, P>, ask: &Ask) -> RequestStatus {
    for a in j.pending.applied() {
        near_limit::note(a);
    }
    // One flag skips both when neither `count_status=` nor `delay=` is
    // configured.
    if j.lcf.extras {
        core::hint::cold_path();
        return admitted_extras(j.r, j.limits, j.pending.applied(), ask.now_ms);
    }
    RequestStatus::Passed
}

/// Every verdict but an admission (`out`, for the question `ask`): the
/// verdict and Retry-After to commit, or the handler's return code (a held
/// request, an nginx error).
#[inline(never)]
fn not_admitted<const P: bool>(
    j: &mut Judging<'_, P>,
    out: &Result<Verdict, HostError>,
    ask: &Ask,
) -> Result<(RequestStatus, u32), ngx_int_t> {
    let Ok(v) = out else {
        return Err(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t);
    };
    let (r, lcf, limits, now) = (&mut *j.r, j.lcf, j.limits, ask.now_ms);
    Ok(match v {
        Verdict::Admit => (admitted(j, ask), 0),
        Verdict::Exempt => (RequestStatus::Exempt, 0),
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
        Verdict::Reject(rej) => (reject(r, lcf, limits, rej, now), rej.retry_after_s),
    })
}

/// An admitted request of a location with `count_status=` or `delay=`:
/// keeps its admissions for the final status and settles a held request.
#[inline(never)]
fn admitted_extras(
    r: &mut Request,
    limits: &[conf::Limit],
    applied: &[Applied],
    now: u64,
) -> RequestStatus {
    count_status::reserve(r, limits, applied);
    hold::admitted(r, limits, now)
}

/// The glue's side of a rejection the engine made (it has given back the
/// other limits' admissions and counted the rejection): a held request's
/// place, a client over its share, a ban, the log line. Out of line, so
/// that the admitting path's code stays together.
#[inline(never)]
fn reject(
    r: &Request,
    lcf: &LocConf,
    limits: &[conf::Limit],
    rej: &engine::Rejection,
    now: u64,
) -> RequestStatus {
    if rej.unheld {
        hold::unheld(r, limits, now);
    }
    if let Some(ahead) = rej.share_full {
        hold::share_full(r, lcf, limits, ahead);
    }
    if let Some(secs) = rej.banned {
        ban::banned(&limits[rej.index], rej.hash, secs, r.log());
    }
    log_rejection(r.log(), lcf, limits[rej.index].zone(), rej);
    if rej.dry_run {
        RequestStatus::RejectedDryRun
    } else if rej.in_flight {
        RequestStatus::RejectedInFlight
    } else {
        RequestStatus::Rejected
    }
}

/// The rejection log line. Never the raw key: it may be an API key.
fn log_rejection(
    log: *mut nginx_sys::ngx_log_t,
    lcf: &LocConf,
    zone: &ZoneConf,
    rej: &engine::Rejection,
) {
    let d = &rej.decision;
    if rej.in_flight {
        log_in_flight(log, lcf, zone, rej);
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
        lcf.log_level,
        log,
        "{}{} by zone \"{}\", estimate: {}, limit: {}, window: {}s",
        if rej.dry_run { "dry run, " } else { "" },
        what,
        zone.name,
        d.estimate,
        rej.limit,
        zone.window.ms() / 1000
    );
}

/// The log line of a request `in_flight=` refused (out of line).
#[cold]
#[inline(never)]
fn log_in_flight(
    log: *mut nginx_sys::ngx_log_t,
    lcf: &LocConf,
    zone: &ZoneConf,
    rej: &engine::Rejection,
) {
    let what = match rej.decision.outcome {
        Outcome::FailClosed => "no room to count requests in flight, rejecting (fail=closed)",
        _ if rej.invalid => "invalid in_flight value, rejecting (fail=closed)",
        _ => "limiting requests in flight",
    };
    ngx_log_error!(
        lcf.log_level,
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
fn log_episodes(log: *mut nginx_sys::ngx_log_t, zone: &ZoneConf, d: &Answer, now: u64) {
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
/// PRECONTENT phase; `limits` are its location's.
#[inline]
fn warn_on_late_keys(r: &mut Request, limits: &[conf::Limit]) {
    // The common case, no decision of this worker recorded an empty key:
    // one test, with the rest out of line.
    if record::late_keys_pending() {
        warn_on_late_keys_check(r, limits);
    }
}

/// [`warn_on_late_keys`] once some decision recorded an empty key.
#[cold]
#[inline(never)]
fn warn_on_late_keys_check(r: &mut Request, limits: &[conf::Limit]) {
    // Only the request decided in this very location: after an internal
    // redirect the recorded keys belong to another location's limits.
    if !r.is_main() || r.as_ref().internal() != 0 {
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
    let r: *mut ngx_http_request_t = r.into();
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
            .is_some_and(|v| !vars::variable_bytes(v).is_empty());
        *slot = saved;
        set
    }
}
