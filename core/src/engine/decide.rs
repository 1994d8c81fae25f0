//! The decision's loop: each limit of the location judged in order
//! ([`judge`]: key, override, value, cost), asked of its table
//! ([`acquire`]), and its in-flight place taken ([`line_with_places`]);
//! the first that refuses ends it ([`rejected`]), and every admission
//! made before is given back ([`undo_all`]).

use super::{
    blocked_wait, in_flight, override_of, rejected, Applies, Ask, Blocked, Cost, HostError,
    Invalid, Key, LimitConf, LimitRead, Line, Rejecting, Request, Skip, Verdict,
};
use crate::table::{Answer, Counter, FailPolicy, KeyHash, Outcome, Question};

/// Whether a limit's value or cost was invalid, and what it made of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Bad {
    /// Every value valid.
    No,
    /// An invalid value under `fail=closed`: judged against a limit of 0.
    Closed,
    /// An invalid cost under `fail=open`: charged the whole limit in force.
    Charged,
}

/// One limit judged, before the table.
enum Judged {
    /// The limit does not apply.
    Skip,
    /// Ask the table.
    Limit {
        hash: KeyHash,
        limit: u32,
        cost: u32,
        bad: Bad,
    },
    /// An override rejects the request (its Retry-After and reset in
    /// seconds: the decision is built on the rejecting path, so that this
    /// enum stays small on the request path).
    Blocked { hash: KeyHash, blocked: Blocked },
}

/// Decides the request over its location's limits, in order, at
/// `ask.now_ms`. Err: the host failed to evaluate a key, limit or cost;
/// every admission made is given back.
#[inline(always)]
pub(super) fn limits<'t, R: Request<'t>>(r: &mut R, ask: &Ask) -> Result<Verdict, HostError> {
    let mut now = ask.now_ms;
    let mut any = false;
    for n in 0..r.limits() {
        let Some(c) = r.conf(n) else {
            continue;
        };
        // A line with `in_flight=` goes out of line: one test here, none in
        // a location without places (`R::PLACES`).
        if R::PLACES && c.line != Line::Rate {
            core::hint::cold_path();
            match line_with_places(r, n, &c, &mut now, ask) {
                Step::Skip => {}
                Step::Counted(_) => any = true,
                Step::Done(v) => return v,
            }
            continue;
        }
        // The rate, as `rate_line` (the same steps, written out here so
        // that the common path is one straight loop).
        let Ok(j) = judge(r, n, &c, now, ask.shard) else {
            core::hint::cold_path();
            undo_all(r, ask.shard);
            return Err(HostError);
        };
        let (hash, limit, cost, bad) = match j {
            Judged::Limit {
                hash,
                limit,
                cost,
                bad,
            } => (hash, limit, cost, bad),
            Judged::Skip => continue,
            Judged::Blocked { hash, blocked } => {
                return Ok(rejected(r, *ask, Rejecting::blocked(n, hash, blocked), now));
            }
        };
        // Lock-free: nothing shared is held once it returns. The decision
        // is recorded where the table made it (see `Table::acquire_then`);
        // only a rejection's comes out.
        let refused = acquire(
            r,
            &c,
            hash,
            &mut now,
            (limit, cost),
            ask.shard,
            |r, d, now| {
                r.record(n, limit, d, now);
                if d.outcome == Outcome::Admitted {
                    // Taken back by `undo_all` if a later limit rejects.
                    c.table.add(ask.shard, Counter::Passed, 1);
                    None
                } else {
                    Some(*d)
                }
            },
        );
        any = true;
        if let Some(d) = refused {
            core::hint::cold_path();
            let rej = Rejecting::counted(n, (limit, cost), d, hash, bad);
            return Ok(rejected(r, *ask, rej, now));
        }
    }
    Ok(if any { Verdict::Admit } else { Verdict::Exempt })
}

/// What one line did to the request.
enum Step {
    /// It did not apply.
    Skip,
    /// It counted the request (for the client `hash`), which goes on.
    Counted(KeyHash),
    /// The decision is made (a rejection, an error): the engine's answer.
    Done(Result<Verdict, HostError>),
}

/// Line `n`'s rate for the request at `now` (updated by a strict zone's
/// fresh time), for a line with places: the steps of [`decide`]'s loop.
#[inline(always)]
fn rate_line<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: &mut u64,
    ask: &Ask,
) -> Step {
    let Ok(j) = judge(r, n, c, *now, ask.shard) else {
        core::hint::cold_path();
        undo_all(r, ask.shard);
        return Step::Done(Err(HostError));
    };
    let (hash, limit, cost, bad) = match j {
        Judged::Limit {
            hash,
            limit,
            cost,
            bad,
        } => (hash, limit, cost, bad),
        Judged::Skip => return Step::Skip,
        Judged::Blocked { hash, blocked } => {
            let rej = Rejecting::blocked(n, hash, blocked);
            return Step::Done(Ok(rejected(r, *ask, rej, *now)));
        }
    };
    // Lock-free: nothing shared is held once it returns. The decision
    // is recorded where the table made it (see `Table::acquire_then`);
    // only a rejection's comes out.
    let refused = acquire(r, c, hash, now, (limit, cost), ask.shard, |r, d, now| {
        r.record(n, limit, d, now);
        if d.outcome == Outcome::Admitted {
            // Taken back by `undo_all` if a later limit rejects.
            c.table.add(ask.shard, Counter::Passed, 1);
            None
        } else {
            Some(*d)
        }
    });
    if let Some(d) = refused {
        core::hint::cold_path();
        let rej = Rejecting::counted(n, (limit, cost), d, hash, bad);
        return Step::Done(Ok(rejected(r, *ask, rej, *now)));
    }
    Step::Counted(hash)
}

/// A line with `in_flight=`: alone, its place; beside `limit=`, the rate
/// as [`rate_line`], then the place. Out of line: the request path of a
/// line without `in_flight=` keeps one test of it.
#[cold]
#[inline(never)]
fn line_with_places<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: &mut u64,
    ask: &Ask,
) -> Step {
    let placed = if c.line == Line::InFlight {
        in_flight::line(r, n, c, *now, ask.shard).map(|taken| match taken {
            true => Step::Counted(KeyHash(0)),
            false => Step::Skip,
        })
    } else {
        let hash = match rate_line(r, n, c, now, ask) {
            Step::Counted(hash) => hash,
            other => return other,
        };
        let set = in_flight::overridden(r, n, c, hash, *now);
        in_flight::take(r, n, c, (hash, set), (*now, ask.shard)).map(|_| Step::Counted(hash))
    };
    match placed {
        Ok(step) => step,
        Err(in_flight::Refused::Host) => {
            undo_all(r, ask.shard);
            Step::Done(Err(HostError))
        }
        Err(in_flight::Refused::Reject(rej)) => Step::Done(Ok(rejected(r, *ask, rej, *now))),
    }
}

/// Limit `n`'s key, the limit in force (the client's override first,
/// then the value read, then `fail=` for an invalid one) and the cost.
#[inline(always)]
fn judge<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: u64,
    shard: usize,
) -> Result<Judged, HostError> {
    let (hash, value) = match r.key(n)? {
        Key::Client { hash, limit } => (hash, limit),
        Key::Empty => {
            core::hint::cold_path();
            not_applied(r, n, c, Skip::EmptyKey, shard);
            return Ok(Judged::Skip);
        }
    };
    // An operator's override holds whatever the limit value is: a block
    // with an empty or invalid `limit=$var` still blocks.
    let limit = match override_of(r, n, c, hash, value, now) {
        Applies::Limit(limit) => limit,
        a => {
            core::hint::cold_path();
            match a.for_rate(value) {
                Applies::Limit(limit) => limit,
                a => return Ok(unlimited(r, n, c, (hash, value), a, (now, shard))),
            }
        }
    };
    let cost = match r.cost(n)? {
        Cost::Count(k) => k,
        Cost::Invalid => {
            core::hint::cold_path();
            return Ok(invalid_cost(r, n, c, hash, limit, (now, shard)));
        }
    };
    // `redis_outage=` while the zone's Redis is out (the cost read first,
    // as for every limit judged): this gateway's share, or a refusal (as
    // `fail=closed`: never held, never a ban).
    let Some(limit) = c.outage.limit(limit) else {
        core::hint::cold_path();
        return Ok(closed(hash));
    };
    // A cost above the limit in force (configured, a `map` tier, an
    // override) never fits: the table rejects it (fit::effective_limit is
    // 0), never skips it.
    Ok(Judged::Limit {
        hash,
        limit,
        cost,
        bad: Bad::No,
    })
}

/// Judged against a limit of 0: refused, never held, never a ban.
fn closed(hash: KeyHash) -> Judged {
    Judged::Limit {
        hash,
        limit: 0,
        cost: 1,
        bad: Bad::Closed,
    }
}

/// An invalid cost against `limit` (configured or overridden): charged the
/// whole limit in force, which `redis_outage=` makes this gateway's share
/// while the zone's Redis is out; `closed` refuses it as every request
/// that needs the fleet (the invalid value noted all the same).
#[cold]
#[inline(never)]
fn invalid_cost<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    hash: KeyHash,
    limit: u32,
    (now, shard): (u64, usize),
) -> Judged {
    match c.outage.limit(limit) {
        Some(in_force) => invalid(r, n, c, hash, Invalid::Cost(in_force), (now, shard)),
        None => {
            noted_invalid(r, n, Invalid::Cost(0), now);
            closed(hash)
        }
    }
}

/// The limit in force when no number came out of the override and the
/// value (as [`Applies::for_rate`] gives them): an override's exempt,
/// block or ban, an empty limit, or an invalid one (`fail=`).
#[cold]
#[inline(never)]
fn unlimited<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    (hash, value): (KeyHash, LimitRead),
    a: Applies,
    (now, shard): (u64, usize),
) -> Judged {
    match a {
        Applies::Limit(_) | Applies::Places(_) => unreachable!("a limit is judged"),
        Applies::Reject(mut blocked) => {
            r.skipped(n, Skip::OverrideReject);
            blocked.retry_after_s = blocked_wait(r, n, c, (hash, value), blocked, now);
            // Recorded as the refusing limit, for the headers: its value
            // (0 when it has none), nothing remaining.
            let limit = match value {
                LimitRead::Set(l) => l,
                LimitRead::Empty | LimitRead::Invalid => 0,
            };
            r.record(n, limit, &blocked.decision(), now);
            Judged::Blocked { hash, blocked }
        }
        Applies::Exempt => {
            c.table.add(shard, Counter::Exempt, 1);
            r.skipped(n, Skip::OverrideExempt);
            Judged::Skip
        }
        Applies::EmptyLimit => {
            not_applied(r, n, c, Skip::EmptyLimit, shard);
            Judged::Skip
        }
        Applies::InvalidLimit => invalid(r, n, c, hash, Invalid::Limit, (now, shard)),
    }
}

/// A limit or cost value that is invalid: counted, the first of an
/// episode logged (by the host); never a way past the limit. `fail=closed`
/// judges the request against a limit of 0 (rejected, never held);
/// `fail=open` skips an invalid limit value (the operator's: the request
/// is exempt from the limit, counted so) and charges an invalid cost (the
/// client's) the whole limit in force.
#[cold]
#[inline(never)]
fn invalid<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    hash: KeyHash,
    what: Invalid,
    (now, shard): (u64, usize),
) -> Judged {
    noted_invalid(r, n, what, now);
    match (c.fail, what) {
        (FailPolicy::Closed, _) => closed(hash),
        (FailPolicy::Open, Invalid::Cost(limit)) => Judged::Limit {
            hash,
            limit,
            cost: charged(limit),
            bad: Bad::Charged,
        },
        (FailPolicy::Open, Invalid::Limit) => {
            not_applied(r, n, c, Skip::InvalidLimit, shard);
            Judged::Skip
        }
        (FailPolicy::Open, Invalid::InFlight) => {
            not_applied(r, n, c, Skip::InvalidInFlight, shard);
            Judged::Skip
        }
    }
}

/// What an invalid cost under `fail=open` costs against `limit`, the
/// limit in force: all of it (at least 1).
pub(super) fn charged(limit: u32) -> u32 {
    limit.max(1)
}

/// Counts limit `n`'s invalid value `what` at `now` in its zone; the
/// first of an episode is the host's to log.
pub(super) fn noted_invalid<'t, R: Request<'t>>(r: &mut R, n: usize, what: Invalid, now: u64) {
    let first = r.shared(n).invalid.is_none_or(|e| e.note(now));
    if first {
        r.invalid(n, what);
    }
}

/// A limit whose key or limit value did not apply: counted as exempt
/// (unless skipped for an invalid value) and noted.
#[cold]
#[inline(never)]
pub(super) fn not_applied<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    why: Skip,
    shard: usize,
) {
    // An invalid limit value under `fail=open` is exempt from the limit,
    // and counted so (as `$rate_limit_window_status` names it).
    if !matches!(why, Skip::InvalidInFlight | Skip::InFlightNoRoom) {
        c.table.add(shard, Counter::Exempt, 1);
    }
    r.skipped(n, why);
}

/// One table decision, handed to `then` with the request and its time; a
/// strict zone whose key is ahead of the request's time decides again at a
/// fresh time (`now` is updated).
#[inline(always)]
fn acquire<'t, R: Request<'t>, T>(
    r: &mut R,
    c: &LimitConf<'t>,
    hash: KeyHash,
    now: &mut u64,
    (limit, cost): (u32, u32),
    shard: usize,
    then: impl FnOnce(&mut R, &Answer, u64) -> T,
) -> T {
    // The table's own flag, so that its test inside is folded into this one.
    if c.table.is_strict() {
        // Its own copy of the time, so that only this path keeps `now` in
        // memory.
        let mut fresh = *now;
        let d = acquire_strict(r, c, hash, &mut fresh, (limit, cost), shard);
        *now = fresh;
        return then(r, &d, fresh);
    }
    let q = Question {
        key: hash,
        now_ms: *now,
        limit,
        cost,
        policy: c.fail,
        shard,
    };
    let at = *now;
    c.table.acquire_then(q, |d| then(r, d, at))
}

/// [`acquire`] in a strict zone, with its retry at a fresh time; out of
/// line, so that the estimate path keeps one, inlined, call of the table.
#[inline(never)]
fn acquire_strict<'t, R: Request<'t>>(
    r: &mut R,
    c: &LimitConf<'t>,
    hash: KeyHash,
    now: &mut u64,
    (limit, cost): (u32, u32),
    shard: usize,
) -> Answer {
    let t = c.table;
    // The strict path alone: `acquire_cost` would inline the estimate
    // path's code here too (a larger frame, the decision copied).
    let d = t.acquire_cost_strict(hash, *now, limit, cost, c.fail, shard);
    if !d.events.clock_backwards {
        return d;
    }
    let fresh = r.fresh_now();
    if fresh <= *now {
        return d;
    }
    if let Some(a) = d.admission.as_ref() {
        t.undo(a);
    }
    // Not a clock step: take back the ClockBackwards count the table made
    // (its shard counters add with wrapping, so + (2^64 - 1) is - 1).
    t.add(shard, Counter::ClockBackwards, u64::MAX);
    *now = fresh;
    t.acquire_cost_strict(hash, fresh, limit, cost, c.fail, shard)
}

/// Gives back every admission recorded so far, and its `passed` count
/// (shard counters add with wrapping: + (2^64 - 1) is - 1), and every
/// in-flight place taken so far.
pub(super) fn undo_all<'t, R: Request<'t>>(r: &mut R, shard: usize) {
    r.admissions(|t, a| {
        t.undo(a);
        t.add(shard, Counter::Passed, u64::MAX);
    });
    r.undone();
    r.places(|p, place| p.give(place));
}
