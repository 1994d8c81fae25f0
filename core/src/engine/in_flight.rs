//! `in_flight=N`: at most N of a client's requests in flight at once, on
//! the line's zone and key, across workers ([`Places`](crate::shm::Places)).
//!
//! The rule, for one line:
//!
//! * the line's rate (`limit=`) decides first; a request it admits then
//!   takes a place, one per request whatever its `cost=`; the place is
//!   given back by the host when the request ends, or by the engine when
//!   a later limit rejects it (with the rate's admission);
//! * a line without `limit=` only takes a place; the client's override
//!   still exempts (no place), blocks or bans it, and a `limit` override
//!   does nothing to it;
//! * the value in force: the client's `in_flight` override (whatever the
//!   line's value reads; its rate stays the line's), else the `in_flight=`
//!   value, a number from 0 (no request: rejected, never skipped) to
//!   [`MAX_IN_FLIGHT`](crate::shm::places::MAX_IN_FLIGHT); an empty
//!   variable takes no place; an invalid value is the zone's `fail=`
//!   (open: no place; closed: rejected, never held);
//! * a client whose places are all taken is rejected, never held by
//!   `delay=` and never banned by `ban=`, with `Retry-After: 1` (a place
//!   frees when a request ends, which no count can tell) or the wait of a
//!   later limit if longer; in a dry run it goes through without a place;
//! * no room to count it (the zone's places or its owners are full): the
//!   zone's `fail=` (open: admitted without a place, which the host
//!   counts and logs; closed: rejected).

use super::{
    not_applied, noted_invalid, override_of, Applies, HostError, Key, LimitConf, LimitRead, Line,
    Rejecting, Request, Skip,
};
use crate::shm::places::Take;
use crate::table::{Answer, Counter, Events, FailPolicy, KeyHash, Outcome};

/// Why [`take`] did not let the request go on.
pub(super) enum Refused {
    /// The host failed to evaluate the value.
    Host,
    /// Rejected by the line.
    Reject(Rejecting),
}

/// A line without a rate (`in_flight=` alone) at `now`: its key (empty:
/// it does not apply); the client's override exempts, blocks or bans it
/// as it would a rate; otherwise only its place is taken. Ok(true): a
/// place was taken. Inlined into the decision's line with places (out of
/// line itself): no frame of its own.
#[inline(always)]
pub(super) fn line<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: u64,
    shard: usize,
) -> Result<bool, Refused> {
    let hash = match r.key(n) {
        Ok(Key::Client { hash, .. }) => hash,
        Ok(Key::Empty) => {
            not_applied(r, n, c, Skip::EmptyKey, shard);
            return Ok(false);
        }
        Err(HostError) => return Err(Refused::Host),
    };
    match override_of(r, n, c, hash, LimitRead::Set(0), now) {
        Applies::Reject(blocked) => {
            r.skipped(n, Skip::OverrideReject);
            Err(Refused::Reject(Rejecting::blocked(n, hash, blocked)))
        }
        Applies::Exempt => {
            c.table.add(shard, Counter::Exempt, 1);
            r.skipped(n, Skip::OverrideExempt);
            Ok(false)
        }
        Applies::Places(k) => take(r, n, c, (hash, Some(k)), (now, shard)),
        _ => take(r, n, c, (hash, None), (now, shard)),
    }
}

/// The places the client `hash`'s override gives it on limit `n` at
/// `now` (epoch ms), if it has such an override (a line whose rate has
/// admitted the request; a zone without overrides: one relaxed load).
#[inline(always)]
pub(super) fn overridden<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    hash: KeyHash,
    now: u64,
) -> Option<u32> {
    match override_of(r, n, c, hash, LimitRead::Empty, now) {
        Applies::Places(k) => Some(k),
        _ => None,
    }
}

/// Takes limit `n`'s place for `hash` (its rate, if any, admitted the
/// request), under the client's override of its places (`set`), else the
/// line's value. Ok(true): a place was taken; Ok(false): none applies (an
/// empty value; an invalid one or no room, `fail=open`). Inlined like
/// [`line`].
#[inline(always)]
pub(super) fn take<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    (hash, set): (KeyHash, Option<u32>),
    (now, shard): (u64, usize),
) -> Result<bool, Refused> {
    let Some(places) = r.in_flight_places(n) else {
        return Ok(false);
    };
    let Some(limit) = in_force(r, n, c, (hash, set), (now, shard))? else {
        return Ok(false);
    };
    let took = match r.owner(n) {
        Some(owner) => places.take(owner, hash.0, limit),
        None => Take::NoRoom,
    };
    match took {
        Take::Taken(p) => {
            r.took(n, p, limit);
            Ok(true)
        }
        Take::Full { held } => Err(Refused::Reject(refusal(n, limit, held, hash, false))),
        Take::NoRoom if c.fail == FailPolicy::Open => {
            not_applied(r, n, c, Skip::InFlightNoRoom, shard);
            Ok(false)
        }
        Take::NoRoom => {
            let mut rej = refusal(n, limit, 0, hash, false);
            rej.d.outcome = Outcome::FailClosed;
            Err(Refused::Reject(rej))
        }
    }
}

/// The in-flight limit in force: the override's places (`set`; the value
/// is not read), else the line's value as read. Ok(None): no place
/// applies (an empty value; an invalid one under `fail=open`).
#[inline(always)]
fn in_force<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    (hash, set): (KeyHash, Option<u32>),
    (now, shard): (u64, usize),
) -> Result<Option<u32>, Refused> {
    if set.is_some() {
        return Ok(set);
    }
    match r.in_flight(n).map_err(|_| Refused::Host)? {
        LimitRead::Set(k) => Ok(Some(k)),
        LimitRead::Empty => {
            if c.line == Line::InFlight {
                not_applied(r, n, c, Skip::EmptyInFlight, shard);
            } else {
                r.skipped(n, Skip::EmptyInFlight);
            }
            Ok(None)
        }
        LimitRead::Invalid => invalid(r, n, c, hash, (now, shard)).map(|_| None),
    }
}

/// An invalid `in_flight=` value: counted, the first of an episode logged
/// by the host, and the zone's `fail=` decides.
fn invalid<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    hash: KeyHash,
    (now, shard): (u64, usize),
) -> Result<bool, Refused> {
    noted_invalid(r, n, super::Invalid::InFlight, now);
    match c.fail {
        FailPolicy::Open => {
            not_applied(r, n, c, Skip::InvalidInFlight, shard);
            Ok(false)
        }
        FailPolicy::Closed => Err(Refused::Reject(refusal(n, 0, 0, hash, true))),
    }
}

/// Limit `n` refuses the request: `held` of its client's requests are in
/// flight under the in-flight limit `limit`.
fn refusal(n: usize, limit: u32, held: u32, hash: KeyHash, invalid: bool) -> Rejecting {
    Rejecting {
        index: n,
        limit,
        cost: 1,
        d: Answer {
            outcome: Outcome::Rejected,
            remaining: 0,
            // A place frees when a request ends: a second is the shortest
            // wait Retry-After can say.
            retry_after_s: 1,
            reset_s: 1,
            estimate: held,
            admission: None,
            events: Events::default(),
        },
        hash,
        invalid,
        charged: false,
        overridden: false,
        in_flight: true,
    }
}
