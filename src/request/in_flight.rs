//! The host's side of in-flight places (`in_flight=N` on
//! `rate_limit_window`, and `rate_limit_window_shed`'s group): the value
//! read per request, the places a request keeps until it ends, and the
//! reclaim of a dead process's places. The rule (whether a place is free,
//! what an empty or invalid value means) is the core's engine
//! (`engine::in_flight`, `engine::shed`); the count, shared by every
//! worker, is the core's `shm::Places`.
//!
//! A place is taken when the request is admitted, and given back exactly
//! once: by the engine when a later limit rejects or holds it, else when
//! the main request's response is complete (the body filter, done.rs:
//! before a lingering close or the client's next connection), else when
//! the main request's pool is destroyed ([`keep`]: a part of the record,
//! record.rs). nginx destroys that pool once however the request ends: a
//! response sent, a client gone (499), an upstream timeout, an
//! `error_page` or internal redirect (which keep the pool); an HTTP/2
//! stream is a request of its own. A process that dies never gives its
//! places back: a process that starts (`zone::reclaim_places`, from
//! `init_process`) or worker 0's sweep, once a second, takes them back.

use nginx_sys::ngx_http_complex_value_t;
use ngx::http::Request;
use rate_limit_window_core::conf::limit_opts::parse_in_flight;
use rate_limit_window_core::engine;

use crate::conf::value::ConfValue;
use crate::request::record::{Pending, Taken};
use crate::zone::ZoneConf;

/// Reads an `in_flight=` value for the request, as it is: a number,
/// empty, or invalid (the engine's `fail=` decides). Err(()): an nginx
/// error while evaluating the variable.
pub fn eval(r: &Request, value: ConfValue) -> Result<engine::LimitRead, ()> {
    match value {
        ConfValue::Fixed(n) => Ok(engine::LimitRead::Set(n)),
        ConfValue::Variable(cv) => {
            let b = text(r, cv)?;
            if b.is_empty() {
                return Ok(engine::LimitRead::Empty);
            }
            Ok(parse_in_flight(b).map_or(engine::LimitRead::Invalid, engine::LimitRead::Set))
        }
    }
}

/// A complex value of the configuration, evaluated for `r`.
pub fn text(r: &Request, cv: *mut ngx_http_complex_value_t) -> Result<&[u8], ()> {
    // SAFETY: cv was compiled into the configuration pool, which outlives
    // every request of the cycle.
    r.get_complex_value(unsafe { &*cv })
        .map(|v| v.as_bytes())
        .ok_or(())
}

/// Keeps a place the request took in its record, given back when its
/// main request's pool is destroyed, unless the engine gives it back first
/// ([`given_back`]): the first place kept has the record dropped with the
/// pool (`Record::keep_place`), so a request that takes none registers
/// nothing with it.
pub fn keep(pending: &Pending, t: Taken) {
    if !pending.record().keep_place(t) {
        // Out of memory: no place is kept for a request it cannot give
        // back (it goes on uncounted).
        t.places.give(t.place);
    }
}

/// The in-flight places kept so far, taken out of the record: a request
/// not admitted after all has them given back by the engine (its shed
/// place stays: see [`give_back_shed`]).
pub fn given_back(pending: &Pending) -> Vec<Taken> {
    let rec = pending.record();
    let (shed, places): (Vec<Taken>, Vec<Taken>) = rec.take_places().partition(|t| t.shed);
    shed.into_iter().for_each(|t| keep(pending, t));
    places
}

/// Notes, for the RateLimit fields of `rate_limit_window_headers ietf`,
/// that the `in_flight=` line of `zone` refused the request under the
/// limit `limit`: a node of the record's places with no place (nothing
/// is given back for it).
pub fn note_refused(pending: &Pending, zone: &'static ZoneConf, limit: u32) {
    if let Some(places) = zone.places.as_ref() {
        let _ = pending.record().keep_place(Taken {
            places,
            place: rate_limit_window_core::shm::Place::NONE,
            shed: false,
            line: Some((zone, limit)),
        });
    }
}

/// Gives back the shed place of a request that does not go on.
pub fn give_back_shed(pending: &Pending) {
    let rec = pending.record();
    for t in rec.take_places() {
        if t.shed {
            t.places.give(t.place);
        } else {
            keep(pending, t);
        }
    }
}
