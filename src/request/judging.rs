//! The request being decided, as the core's engine sees it: the host
//! `Judging` of `engine::decide` (see handler.rs), which evaluates each
//! limit's key, limit value and cost when the engine asks, and fills the
//! request's record.

use ngx::http::Request;
use ngx::ngx_log_debug_http;

use rate_limit_window_core::engine::{
    self, Cost, Hold, HostError, Invalid, Key, LimitConf, Shared, ShedAsk, Skip, Woken,
};
use rate_limit_window_core::overrides::range::Addr;
use rate_limit_window_core::shm::{Owner, Place, Places};
use rate_limit_window_core::{Admission, Answer, Table};

use crate::conf::{self, LimitValue, LocConf};
use crate::ffi::process;
use crate::request::hold;
use crate::request::key::eval_key;
use crate::request::logging::{log_episodes, log_invalid, skipped, slot_path};
use crate::request::record::{self, Applied, Taken};
use crate::request::{cost, in_flight, near_limit, shed};
use crate::zone::{client, ZoneConf};

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
    let limit = eval_limit(r, zone, value)?;
    Ok(client::client_key(zone, table, key, limit))
}

/// Reads the limit value for this request, as it is: a number, empty,
/// or invalid (the engine's `fail=` decides). Err(()) is an nginx error
/// while evaluating the variable.
fn eval_limit(r: &Request, zone: &ZoneConf, value: LimitValue) -> Result<engine::LimitRead, ()> {
    match value {
        LimitValue::Fixed(n) => Ok(engine::LimitRead::Set(n)),
        LimitValue::Variable(cv) => {
            // SAFETY: cv was compiled into the configuration pool, which
            // outlives every request of the cycle.
            let b = r.get_complex_value(unsafe { &*cv }).ok_or(())?.as_bytes();
            Ok(client::limit_read(zone, b))
        }
    }
}

/// The request being decided, as the engine sees it: each limit's key,
/// value and cost evaluated when the engine asks, and its record.
/// `PLACES`: the location takes in-flight places (`LocConf::places`).
/// `ONE`: it has one limit, the common location, whose decision is then
/// straight-line code (no loop state kept across the limits).
pub(super) struct Judging<'a, const PLACES: bool, const ONE: bool> {
    pub(super) r: &'a mut Request,
    pub(super) lcf: &'a LocConf,
    pub(super) limits: &'a [conf::Limit],
    /// The record being filled (held here, not behind a pointer: one
    /// struct in memory for the engine's out-of-line paths).
    pub(super) pending: record::Pending,
}

impl<const PLACES: bool, const ONE: bool> engine::Request<'static> for Judging<'_, PLACES, ONE> {
    const PLACES: bool = PLACES;

    #[inline(always)]
    fn limits(&self) -> usize {
        if ONE {
            1
        } else {
            self.limits.len()
        }
    }

    #[inline(always)]
    fn conf(&self, n: usize) -> Option<LimitConf<'static>> {
        self.limits[n].engine_conf()
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
            // The zone's sync first: the common zone has none (one test).
            if zone.redis.is_some() && l.counts != engine::Line::InFlight {
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

    #[inline(always)]
    fn took(&mut self, n: usize, p: Place, limit: u32) {
        let zone = self.limits[n].zone();
        if let Some(places) = zone.places.as_ref() {
            let shed = false;
            in_flight::keep(
                &self.pending,
                Taken {
                    places,
                    place: p,
                    shed,
                    line: Some((zone, limit)),
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
        client::key_addr(zone, key)
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
        if near_limit::is_near(limit, d.remaining) {
            core::hint::cold_path();
            self.pending.note_near();
        }
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

    fn undone(&mut self) {
        self.pending.undone();
    }

    fn shared(&self, n: usize) -> Shared<'static> {
        let zone = self.limits[n].zone();
        Shared {
            invalid: zone.header().map(|h| &h.invalid_limits),
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

    fn shed(&mut self) -> Option<ShedAsk<'static>> {
        shed::ask(self.r, self.lcf.shed.as_ref()?)
    }

    fn took_shed(&mut self, place: Place) {
        let Some(group) = self
            .lcf
            .shed
            .as_ref()
            .and_then(|s| s.group().group.as_ref())
        else {
            return;
        };
        let places = &group.places;
        in_flight::keep(
            &self.pending,
            Taken {
                places,
                place,
                shed: true,
                line: None,
            },
        );
    }

    fn give_back_shed(&mut self) {
        in_flight::give_back_shed(&self.pending);
    }

    fn would_shed(&mut self, in_flight: u32) {
        if let Some(s) = self.lcf.shed.as_ref() {
            shed::log_would_shed(self.r, self.lcf, s, in_flight);
        }
    }

    fn unhold(&mut self, how: Woken) {
        hold::ended(self.r, self.limits, process::now_ms(), how);
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

/// `rate_limit_window_headers ietf`: the `t` of each limit that admitted
/// the request (`pending`'s, for `r` at `now`, epoch ms) is when its
/// `remaining` next grows: the first moment a cost of `remaining + 1`
/// fits, by the engine's one rule. Each key is read again (cached by
/// nginx): out of line, off the common path.
#[cold]
#[inline(never)]
pub(super) fn ietf_t(
    r: &mut Request,
    limits: &[conf::Limit],
    pending: &mut record::Pending,
    now: u64,
) {
    ietf_t_of(r, limits, pending, now, true);
}

/// [`ietf_t`] of a refused request, after the engine undid every
/// admission it had made: each limit with room left says when `r` next
/// grows from what is counted now (a limit with none says the refusal's
/// Retry-After: `Report::reset_of`).
pub(super) fn ietf_t_after_undo(
    r: &mut Request,
    limits: &[conf::Limit],
    pending: &mut record::Pending,
    now: u64,
) {
    ietf_t_of(r, limits, pending, now, false);
}

/// `t` for each applied limit of `limits` that admitted the request
/// (`admitted`), or, of a refused one, that has room left.
fn ietf_t_of(
    r: &mut Request,
    limits: &[conf::Limit],
    pending: &mut record::Pending,
    now: u64,
    admitted: bool,
) {
    for l in limits {
        let zone = l.zone();
        let Some(table) = zone.table.as_ref() else {
            continue;
        };
        let Some(a) = pending
            .applied()
            .iter()
            .position(|a| core::ptr::eq(a.zone, zone))
        else {
            continue;
        };
        let applied = pending.applied()[a];
        let asks = match admitted {
            true => applied.admission.is_some(),
            false => applied.remaining > 0,
        };
        if !asks {
            continue;
        }
        let Ok(Key::Client { hash, .. }) = eval(r, zone, table, l.value) else {
            continue;
        };
        let t = engine::grows_in_s(table, hash, now, applied.limit, applied.remaining);
        pending.set_reset(a, t);
    }
}
