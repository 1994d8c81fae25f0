//! The stream's PREACCESS handler: a session (a TCP connection, a UDP
//! client's session) is one request to the core's engine, over the host
//! [`Judging`]: each line's key, limit, cost and in-flight value read from
//! the session's variables. A refused session is closed at once (503 in
//! the stream's `$status`, as `limit_conn` does); its log line is written
//! once per episode of its zone (a zone's first refusal after a quiet
//! minute), every refusal is counted in the zone's metrics. The places
//! an admitted session took are given back when its connection's pool is
//! destroyed, however the session ends.

use core::cell::Cell;

use nginx_sys::{
    ngx_int_t, ngx_stream_session_t, NGX_STREAM_INTERNAL_SERVER_ERROR,
    NGX_STREAM_SERVICE_UNAVAILABLE,
};
use ngx::core::Status;
use rate_limit_window_core::conf::limit_opts::{parse_cost, parse_in_flight};
use rate_limit_window_core::engine::{
    self, Ask, Cost, HostError, Invalid, Key, LimitConf, LimitRead, Shared, Skip, Verdict,
};
use rate_limit_window_core::overrides::range::Addr;
use rate_limit_window_core::shm::{Owner, Place, Places};
use rate_limit_window_core::{Admission, Answer, Counter, Table};

use super::conf::{SrvConf, StreamLimit, MAX_LIMITS};
use super::variables::Report;
use crate::conf::value::ConfValue;
use crate::ffi::process;
use crate::ffi::session::Session;
use crate::request::logging::{log_episodes, log_invalid_value, log_rejection};
use crate::request::record::RequestStatus;
use crate::zone::{client, ZoneConf};

/// How long a zone's refusals must stay quiet before the next one is
/// logged again (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

/// The PREACCESS entry nginx calls for each new session.
pub extern "C" fn preaccess_handler(s: *mut ngx_stream_session_t) -> ngx_int_t {
    // SAFETY: nginx passes a live session, ours for the call.
    let s = unsafe { Session::from_ptr(s) };
    let Some(scf) = s.srv_conf::<SrvConf>(super::module()) else {
        return Status::NGX_DECLINED.into();
    };
    match scf.limits.as_deref() {
        Some(limits) if !limits.is_empty() => decide(s, scf, limits),
        _ => Status::NGX_DECLINED.into(),
    }
}

/// The places a session keeps until it ends: given back when its
/// connection's pool is destroyed (dropped there).
#[derive(Default)]
struct Kept {
    taken: [Cell<Option<(&'static Places<'static>, Place)>>; MAX_LIMITS],
}

impl Kept {
    /// Takes out every place kept, calling `f` with each.
    fn take_all(&self, mut f: impl FnMut(&'static Places<'static>, Place)) {
        for (places, place) in self.taken.iter().filter_map(Cell::take) {
            f(places, place);
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.take_all(|places, place| places.give(place));
    }
}

/// Decides the session over the server's `limits`.
fn decide(s: &mut Session, scf: &SrvConf, limits: &[StreamLimit]) -> ngx_int_t {
    // A server with places has them given back however the session
    // ends: the cleanup is registered before any place is taken.
    let kept = if scf.places {
        match s.drop_at_end(Kept::default()) {
            Ok(k) => Some(&*k),
            Err(_) => return NGX_STREAM_INTERNAL_SERVER_ERROR as ngx_int_t,
        }
    } else {
        None
    };
    let ask = Ask {
        now_ms: process::now_ms(),
        shard: process::shard(),
        dry_run: scf.dry_run != 0,
        holdable: false,
        woken: false,
    };
    let mut j = Judging {
        s,
        limits,
        applied: [None; MAX_LIMITS],
        kept,
        tightest: None,
    };
    let (status, rc) = match engine::decide(&mut j, &ask) {
        Ok(Verdict::Reject(rej)) => {
            core::hint::cold_path();
            return refused(&mut j, scf, &rej, ask.now_ms);
        }
        Ok(Verdict::Admit) => (RequestStatus::Passed, Status::NGX_DECLINED.into()),
        Ok(_) => (RequestStatus::Exempt, Status::NGX_DECLINED.into()),
        Err(HostError) => return NGX_STREAM_INTERNAL_SERVER_ERROR as ngx_int_t,
    };
    let report = Report {
        status,
        tightest: j.tightest,
        retry_after_s: 0,
    };
    match j.s.set_ctx(super::module(), report) {
        Some(()) => rc,
        None => NGX_STREAM_INTERNAL_SERVER_ERROR as ngx_int_t,
    }
}

/// A refusal (or a dry run's): logged once per episode of its zone, the
/// client banned when its line says `ban=`; the session is closed unless
/// it is a dry run.
#[cold]
#[inline(never)]
fn refused(j: &mut Judging<'_>, scf: &SrvConf, rej: &engine::Rejection, now: u64) -> ngx_int_t {
    let limit = &j.limits[rej.index];
    let zone = limit.zone();
    if let Some(secs) = rej.banned {
        crate::request::ban::banned(limit, rej.hash, secs, j.s.log());
    }
    let episode = zone
        .table
        .as_ref()
        .is_some_and(|t| t.note_episode(Counter::Rejected, now, EPISODE_QUIET_MS));
    if episode {
        log_rejection(j.s.log(), scf.log_level, zone, rej);
    }
    let status = if rej.dry_run {
        RequestStatus::RejectedDryRun
    } else if rej.in_flight {
        RequestStatus::RejectedInFlight
    } else {
        RequestStatus::Rejected
    };
    let report = Report {
        status,
        tightest: Some((rej.limit, 0)),
        retry_after_s: rej.retry_after_s,
    };
    // Out of memory: the variables stay empty, the decision stands.
    let _ = j.s.set_ctx(super::module(), report);
    if rej.dry_run {
        return Status::NGX_DECLINED.into();
    }
    NGX_STREAM_SERVICE_UNAVAILABLE as ngx_int_t
}

/// A limit recorded for the session: its zone and the table's admission
/// (given back if a later line refuses the session).
#[derive(Clone, Copy)]
struct Applied {
    zone: &'static ZoneConf,
    admission: Option<Admission>,
}

/// The session being decided, as the engine sees it.
struct Judging<'a> {
    s: &'a mut Session,
    limits: &'a [StreamLimit],
    applied: [Option<Applied>; MAX_LIMITS],
    kept: Option<&'static Kept>,
    /// The tightest rate that admitted the session (limit, remaining).
    tightest: Option<(u32, u32)>,
}

impl Judging<'_> {
    /// Line `n`'s value `v` as read for the session (a variable's bytes;
    /// empty for a fixed number). Err(()): an nginx error.
    fn text(
        &mut self,
        v: Option<ConfValue<nginx_sys::ngx_stream_complex_value_t>>,
    ) -> Result<&[u8], ()> {
        match v.and_then(ConfValue::variable) {
            // SAFETY: cv was compiled into the configuration pool, which
            // outlives every session of the cycle.
            Some(cv) => self.s.complex_value(unsafe { &*cv }),
            None => Ok(&[]),
        }
    }

    /// Line `n`'s key for the session (empty: the line does not apply).
    fn key_bytes(&mut self, n: usize) -> Result<&'static [u8], ()> {
        let zone = self.limits[n].zone();
        match zone.key_index {
            Some(index) => self.s.variable(index),
            None => self.s.complex_value(&zone.stream_key),
        }
    }
}

impl engine::Request<'static> for Judging<'_> {
    fn limits(&self) -> usize {
        self.limits.len()
    }

    fn conf(&self, n: usize) -> Option<LimitConf<'static>> {
        self.limits[n].engine_conf()
    }

    fn key(&mut self, n: usize) -> Result<Key, HostError> {
        let zone = self.limits[n].zone();
        let table = zone.table.as_ref().ok_or(HostError)?;
        let key = self.key_bytes(n).map_err(|()| HostError)?;
        if key.is_empty() {
            return Ok(Key::Empty);
        }
        let limit = match self.limits[n].value {
            ConfValue::Fixed(v) => LimitRead::Set(v),
            v => client::limit_read(zone, self.text(Some(v)).map_err(|()| HostError)?),
        };
        if let LimitRead::Set(v) = limit {
            if zone.redis.is_some() && self.limits[n].counts != engine::Line::InFlight {
                crate::request::near_limit::note_limit(zone, v);
            }
        }
        Ok(client::client_key(zone, table, key, limit))
    }

    fn cost(&mut self, n: usize) -> Result<Cost, HostError> {
        match self.limits[n].cost {
            ConfValue::Fixed(c) => Ok(Cost::Count(c)),
            v => {
                let b = self.text(Some(v)).map_err(|()| HostError)?;
                Ok(parse_cost(b).map_or(Cost::Invalid, Cost::Count))
            }
        }
    }

    fn in_flight(&mut self, n: usize) -> Result<LimitRead, HostError> {
        match self.limits[n].in_flight.ok_or(HostError)? {
            ConfValue::Fixed(v) => Ok(LimitRead::Set(v)),
            v => {
                let b = self.text(Some(v)).map_err(|()| HostError)?;
                if b.is_empty() {
                    return Ok(LimitRead::Empty);
                }
                Ok(parse_in_flight(b).map_or(LimitRead::Invalid, LimitRead::Set))
            }
        }
    }

    fn in_flight_places(&self, n: usize) -> Option<&'static Places<'static>> {
        self.limits[n].zone().places.as_ref()
    }

    fn owner(&mut self, n: usize) -> Option<Owner> {
        self.limits[n].zone().places_owner()
    }

    fn took(&mut self, n: usize, p: Place, _limit: u32) {
        let places = self.limits[n].zone().places.as_ref();
        match (places, self.kept) {
            (Some(places), Some(kept)) => kept.taken[n].set(Some((places, p))),
            // No cleanup to give it back: not kept.
            (Some(places), None) => places.give(p),
            _ => {}
        }
    }

    fn places(&self, f: impl FnMut(&'static Places<'static>, Place)) {
        // The engine gives them back: taken out of what the session keeps.
        if let Some(kept) = self.kept {
            kept.take_all(f);
        }
    }

    fn key_addr(&mut self, n: usize) -> Option<Addr> {
        let zone = self.limits[n].zone();
        let key = self.key_bytes(n).ok()?;
        client::key_addr(zone, key)
    }

    fn invalid(&mut self, n: usize, what: Invalid) {
        let l = self.limits[n];
        let v = match what {
            Invalid::Limit => Some(l.value),
            Invalid::Cost(_) => Some(l.cost),
            Invalid::InFlight => l.in_flight,
        };
        let bad = self.text(v).map(<[u8]>::to_vec).unwrap_or_default();
        log_invalid_value(self.s.log(), l.zone(), what, &bad);
    }

    fn record(&mut self, n: usize, limit: u32, d: &Answer, now: u64) {
        let zone = self.limits[n].zone();
        if self.limits[n].counts != engine::Line::InFlight
            && self.tightest.is_none_or(|(_, left)| d.remaining < left)
        {
            self.tightest = Some((limit, d.remaining));
        }
        self.applied[n] = Some(Applied {
            zone,
            admission: d.admission,
        });
        log_episodes(self.s.log(), zone, d, now);
    }

    fn skipped(&mut self, _n: usize, _why: Skip) {}

    fn admissions(&self, mut f: impl FnMut(&'static Table<'static>, &Admission)) {
        for a in self.applied.iter().flatten() {
            if let (Some(adm), Some(table)) = (a.admission.as_ref(), a.zone.table.as_ref()) {
                f(table, adm);
            }
        }
    }

    fn shared(&self, n: usize) -> Shared<'static> {
        let zone = self.limits[n].zone();
        Shared {
            invalid: zone.header().map(|h| &h.invalid_limits),
            turns: None,
        }
    }

    fn fresh_now(&mut self) -> u64 {
        // SAFETY: refreshes this process's cached time (nginx's own call,
        // made from the event loop thread we run on).
        unsafe { nginx_sys::ngx_time_update() };
        process::now_ms()
    }
}
