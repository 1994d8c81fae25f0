//! The one per-request decision: a request judged by every limit of its
//! location, composed here (several limits, cost, estimate or strict,
//! `delay=`, dry run, `fail=`, overrides and `ban=`), so that every
//! combination is decided by one piece of pure code, and tested together
//! (`tests.rs`, against the models of `crate::testing::reference`).
//!
//! The glue (nginx) implements [`Request`]: it evaluates each limit's key,
//! limit value and cost **lazily**, when the engine asks, and records what
//! the engine decided for the headers and variables. The trait is
//! monomorphised and inlined, so the request path is the same straight
//! loop as a hand-written one: per limit, one key evaluation, one relaxed
//! load for the overrides, one CAS.
//!
//! [`decide`] returns one typed [`Verdict`]: admit, exempt, reject (which
//! limit, why, Retry-After for the whole cost over every limit), hold for
//! `delay=`, or a dry run's would-hold. A rejected request is counted by no
//! limit: the engine gives back the other limits' admissions itself.
//!
//! **One rule** answers "when does this request, whole cost included,
//! fit?": [`crate::rule::fit`], used by the table's admission and Retry-After, by
//! [`plan`]'s holds, and by the headers (the table's `remaining`).

pub mod plan;
#[cfg(test)]
mod tests;

use crate::overrides::{Action, Overrides};
use crate::table::{Answer, Counter, Events, FailPolicy, KeyHash, Outcome, Question, Table};
use crate::Admission;

/// One limit of the location, as the engine needs it.
#[derive(Clone, Copy)]
pub struct LimitConf<'t> {
    /// The zone's table (its mode, estimate or strict, is the table's).
    pub table: &'t Table<'t>,
    /// The zone's per-client overrides, if it has a table of them.
    pub overrides: Option<&'t Overrides<'t>>,
    /// The zone's `fail=` policy (a full zone; an invalid limit or cost).
    pub fail: FailPolicy,
    /// `delay=`: longest hold of a request this limit rejects (ms).
    pub delay_ms: u64,
    /// `ban=`: how long a client this limit rejects stays rejected (ms).
    pub ban_ms: u64,
}

/// A limit's key and limit value, as the glue evaluated them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The key is empty: the limit does not apply (counted as exempt).
    Empty,
    /// The limit variable is empty: the request is exempt from this limit.
    Exempt,
    /// An invalid limit value in a `fail=open` zone: skipped, not counted.
    Skipped,
    /// Judge the client `hash` against `limit` (requests per window);
    /// `invalid`: the limit value was garbage (`fail=closed`, limit 0).
    Limit {
        /// The key's hash under the zone's seed.
        hash: KeyHash,
        /// Requests per window.
        limit: u32,
        /// An invalid limit value judged as 0 (`fail=closed`).
        invalid: bool,
    },
}

/// A request's cost under one limit, as the glue evaluated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Count this many requests (1 or more, at most the limit).
    Count(u32),
    /// Invalid under `fail=open`: the limit does not apply.
    Skip,
    /// Invalid under `fail=closed`: judged against a limit of 0.
    Reject,
}

/// The host (nginx) failed to evaluate a key, limit or cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostError;

/// Why a limit did not apply to the request (for the glue's debug log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The key is empty (counted as exempt).
    EmptyKey,
    /// The limit variable is empty (counted as exempt).
    EmptyLimit,
    /// An invalid limit value, `fail=open` (not counted).
    InvalidLimit,
    /// An invalid cost, `fail=open` (not counted).
    InvalidCost,
    /// The client's override exempts it (counted as exempt).
    OverrideExempt,
    /// The client's override (block, ban) rejects it.
    OverrideReject,
}

/// The request being decided: what the glue provides, evaluated when the
/// engine asks. `'t` is the zones' lifetime (the configuration cycle).
pub trait Request<'t> {
    /// Number of limits in the location.
    fn limits(&self) -> usize;
    /// Limit `n`'s configuration; None: its zone has no table (skipped).
    fn conf(&self, n: usize) -> Option<LimitConf<'t>>;
    /// Evaluates limit `n`'s key and limit value. Err(()): an error of the
    /// host while evaluating them.
    fn key(&mut self, n: usize) -> Result<Key, HostError>;
    /// Evaluates the request's cost under limit `n`, now `limit` requests
    /// per window (an invalid cost is logged and counted by the glue).
    fn cost(&mut self, n: usize, limit: u32) -> Result<Cost, HostError>;
    /// The request's cost under limit `n` if valid, else 1, without
    /// logging or counting (the waits and Retry-After of other limits).
    fn quiet_cost(&mut self, n: usize, limit: u32) -> u32;
    /// Records limit `n`, judged against `limit` at `now_ms` with the
    /// table's answer `d`, in the request's record (headers, variables,
    /// what to undo or settle later).
    fn record(&mut self, n: usize, limit: u32, d: &Answer, now_ms: u64);
    /// Limit `n` did not apply, or an override decided (for the log).
    fn skipped(&mut self, n: usize, why: Skip);
    /// Calls `f` with each admission recorded so far and its table.
    fn admissions(&self, f: impl FnMut(&'t Table<'t>, &Admission));
    /// A fresh reading of the clock (epoch ms): a strict zone decides again
    /// when its key's state is later than the request's time.
    fn fresh_now(&mut self) -> u64;
    /// When the request was first held by `delay=` (epoch ms), if it was.
    fn held_since(&self) -> Option<u64> {
        None
    }
    /// Requests of `client` held now (the fair queue: see [`plan`]).
    fn held_by(&self, _client: u64) -> u32 {
        0
    }
    /// Holds the request as `h` says (a timer), at the request's time
    /// `now_ms` (epoch ms, the [`Ask`]'s); false: it could not be held (the
    /// location's cap, or the host failed), so it is rejected.
    fn hold(&mut self, _h: &Hold, _now_ms: u64) -> bool {
        false
    }
}

/// What the engine is asked, besides the request's limits.
#[derive(Clone, Copy, Debug)]
pub struct Ask {
    /// The request's time (epoch ms).
    pub now_ms: u64,
    /// The caller's shard for the tables' counters (worker number).
    pub shard: usize,
    /// `rate_limit_window_dry_run`: a rejection lets the request through,
    /// counted by none.
    pub dry_run: bool,
    /// The request may be held by `delay=` (a main request).
    pub holdable: bool,
}

/// A request held by `delay=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The limit that rejected it (index in the location).
    pub index: usize,
    /// Time to wait before deciding again (ms, at least 1): the first ms
    /// at which its whole cost fits under every limit.
    pub wait_ms: u64,
    /// Its client (the rejecting limit's key hash): its share of the queue.
    pub client: u64,
}

/// A rejected request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The limit that rejected it (index in the location).
    pub index: usize,
    /// That limit, in requests per window (0: an invalid value, fail=closed).
    pub limit: u32,
    /// That limit's table answer (its estimate, its outcome).
    pub decision: Answer,
    /// The client (that limit's key hash).
    pub hash: KeyHash,
    /// Its limit value or cost was invalid (fail=closed).
    pub invalid: bool,
    /// An override (block, ban) rejected it, not the count.
    pub overridden: bool,
    /// Whole seconds until the whole cost fits under every limit, or the
    /// ban's length when this rejection banned the client.
    pub retry_after_s: u32,
    /// This rejection banned the client (`ban=`) for `retry_after_s`.
    pub banned: bool,
    /// Refused at once: its client already holds this many requests, and
    /// its turn would come after `delay` (see [`plan`]).
    pub share_full: Option<u32>,
    /// It was held, and is now rejected (its hold is to be released).
    pub unheld: bool,
    /// A dry run: let through, counted by none.
    pub dry_run: bool,
}

/// The decision for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every limit that applied admitted it; their admissions are in the
    /// record (to settle later for `count_status=` / `charge=`).
    Admit,
    /// No limit applied.
    Exempt,
    /// Rejected (or, in a dry run, let through), counted by none.
    Reject(Rejection),
    /// Held ([`Request::hold`] accepted it); counted by none until decided
    /// again.
    Hold(Hold),
    /// Dry run: it would have been held; let through, counted by none.
    WouldHold(Hold),
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
        invalid: bool,
    },
    /// An override rejects the request (its Retry-After and reset in
    /// seconds: the decision is built on the rejecting path, so that this
    /// enum stays small on the request path).
    Blocked { hash: KeyHash, blocked: Blocked },
}

/// What an override makes of one limit.
enum Applies {
    /// No override: the configured limit.
    Limit(u32),
    /// The override's limit instead.
    Replace(u32),
    /// Admitted without being counted.
    Exempt,
    /// A block or a ban: the decision to answer.
    Reject(Blocked),
}

/// A block or a ban of the client by an override.
#[derive(Clone, Copy)]
struct Blocked {
    /// Seconds until the override ends (or a window, when it has no end).
    retry_after_s: u32,
    /// Seconds until the next window boundary (rounded up).
    reset_s: u32,
}

impl Blocked {
    /// The table decision an override's rejection answers with.
    fn decision(self) -> Answer {
        Answer {
            outcome: Outcome::Rejected,
            remaining: 0,
            retry_after_s: self.retry_after_s,
            reset_s: self.reset_s,
            estimate: 0,
            admission: None,
            events: Events::default(),
        }
    }
}

/// Decides the request over its location's limits, in order, at
/// `ask.now_ms`. Err: the host failed to evaluate a key, limit or cost;
/// every admission made is given back.
#[inline(always)]
pub fn decide<'t, R: Request<'t>>(r: &mut R, ask: &Ask) -> Result<Verdict, HostError> {
    let mut now = ask.now_ms;
    let mut any = false;
    for n in 0..r.limits() {
        let Some(c) = r.conf(n) else {
            continue;
        };
        let Ok(j) = judge(r, n, &c, now, ask.shard) else {
            core::hint::cold_path();
            undo_all(r);
            return Err(HostError);
        };
        let (hash, limit, cost, invalid) = match j {
            Judged::Limit {
                hash,
                limit,
                cost,
                invalid,
            } => (hash, limit, cost, invalid),
            Judged::Skip => continue,
            Judged::Blocked { hash, blocked } => {
                let rej = Rejecting {
                    index: n,
                    limit: 0,
                    d: blocked.decision(),
                    hash,
                    invalid: false,
                    overridden: true,
                };
                return Ok(rejected(r, *ask, rej, now));
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
                    None
                } else {
                    Some(*d)
                }
            },
        );
        any = true;
        if let Some(d) = refused {
            core::hint::cold_path();
            let rej = Rejecting {
                index: n,
                limit,
                d,
                hash,
                invalid,
                overridden: false,
            };
            return Ok(rejected(r, *ask, rej, now));
        }
    }
    Ok(if any { Verdict::Admit } else { Verdict::Exempt })
}

/// Limit `n`'s key, limit (after the client's override) and cost.
#[inline(always)]
fn judge<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: u64,
    shard: usize,
) -> Result<Judged, HostError> {
    let (hash, limit, invalid) = match r.key(n)? {
        Key::Limit {
            hash,
            limit,
            invalid,
        } => (hash, limit, invalid),
        k => {
            core::hint::cold_path();
            let why = match k {
                Key::Empty => Skip::EmptyKey,
                Key::Exempt => Skip::EmptyLimit,
                _ => Skip::InvalidLimit,
            };
            not_applied(r, n, c, why, shard);
            return Ok(Judged::Skip);
        }
    };
    let (limit, invalid) = match override_of(c, hash, limit, now) {
        Applies::Limit(limit) => (limit, invalid),
        Applies::Replace(limit) => (limit, false),
        a => {
            core::hint::cold_path();
            return Ok(overridden(r, n, c, hash, a, shard));
        }
    };
    if invalid {
        // Already judged against 0 (fail=closed): the cost is not read.
        return Ok(Judged::Limit {
            hash,
            limit,
            cost: 1,
            invalid,
        });
    }
    let (limit, cost, invalid) = match r.cost(n, limit)? {
        Cost::Count(k) => (limit, k, false),
        Cost::Skip => {
            core::hint::cold_path();
            r.skipped(n, Skip::InvalidCost);
            return Ok(Judged::Skip);
        }
        Cost::Reject => (0, 1, true),
    };
    Ok(Judged::Limit {
        hash,
        limit,
        cost,
        invalid,
    })
}

/// A limit whose key or limit value did not apply: counted as exempt
/// (unless skipped for an invalid value) and noted.
#[cold]
#[inline(never)]
fn not_applied<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    why: Skip,
    shard: usize,
) {
    if why != Skip::InvalidLimit {
        c.table.add(shard, Counter::Exempt, 1);
    }
    r.skipped(n, why);
}

/// An override that exempts (counted as exempt) or rejects the request.
#[cold]
#[inline(never)]
fn overridden<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    hash: KeyHash,
    a: Applies,
    shard: usize,
) -> Judged {
    if let Applies::Reject(blocked) = a {
        r.skipped(n, Skip::OverrideReject);
        return Judged::Blocked { hash, blocked };
    }
    c.table.add(shard, Counter::Exempt, 1);
    r.skipped(n, Skip::OverrideExempt);
    Judged::Skip
}

/// The override of `hash` applied to `limit` at `now` (epoch ms). A zone
/// without overrides costs one relaxed load.
#[inline(always)]
fn override_of(c: &LimitConf<'_>, hash: KeyHash, limit: u32, now: u64) -> Applies {
    match c.overrides {
        Some(o) if o.live() != 0 => {
            core::hint::cold_path();
            override_slow(c, o, hash, limit, now)
        }
        _ => Applies::Limit(limit),
    }
}

#[inline(never)]
fn override_slow(c: &LimitConf<'_>, o: &Overrides, hash: KeyHash, limit: u32, now: u64) -> Applies {
    let Some(e) = o.get_hash(hash, now) else {
        return Applies::Limit(limit);
    };
    match e.action {
        Action::Limit(n) => Applies::Replace(n),
        Action::Exempt => Applies::Exempt,
        Action::Block | Action::Ban => {
            let w = c.table.window().ms();
            // The time left (rounded up), or a window without an expiry.
            let retry = match e.secs_left(now) {
                Some(s) => u32::try_from(s).unwrap_or(u32::MAX).max(1),
                None => (w / 1000).max(1) as u32,
            };
            Applies::Reject(Blocked {
                retry_after_s: retry,
                reset_s: (w - now % w).div_ceil(1000) as u32,
            })
        }
    }
}

/// The limit of `hash` as judged off the admission path (the waits and
/// Retry-After of the other limits): its key and override, or None when
/// it does not apply. A block or a ban reads as a limit of 0.
fn quiet_limit<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: u64,
) -> Option<(KeyHash, u32)> {
    let Ok(Key::Limit { hash, limit, .. }) = r.key(n) else {
        return None;
    };
    let limit = match override_of(c, hash, limit, now) {
        Applies::Limit(l) | Applies::Replace(l) => l,
        Applies::Exempt => return None,
        Applies::Reject(_) => 0,
    };
    Some((hash, limit))
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

/// Gives back every admission recorded so far.
fn undo_all<'t, R: Request<'t>>(r: &R) {
    r.admissions(|t, a| t.undo(a));
}

/// The limit that has just rejected the request.
struct Rejecting {
    index: usize,
    limit: u32,
    d: Answer,
    hash: KeyHash,
    invalid: bool,
    overridden: bool,
}

/// A limit rejected the request: hold it (`delay=`), or reject it, counted
/// by none. Out of line: the admitting path's code stays together.
#[cold]
#[inline(never)]
// `ask` by value: the request path need not keep a copy of it in memory.
fn rejected<'t, R: Request<'t>>(r: &mut R, ask: Ask, rej: Rejecting, now: u64) -> Verdict {
    let mut retry = rej.d.retry_after_s;
    if !rej.overridden {
        // A retry must fit under every limit: the ones before this one
        // admitted the whole cost (they fit now), so the longest wait
        // among the limits not judged yet.
        retry = retry.max(plan::longest_wait(r, rej.index + 1, now));
    }
    undo_all(r);
    let mut out = Rejection {
        index: rej.index,
        limit: rej.limit,
        decision: rej.d,
        hash: rej.hash,
        invalid: rej.invalid,
        overridden: rej.overridden,
        retry_after_s: retry,
        banned: false,
        share_full: None,
        unheld: false,
        dry_run: ask.dry_run,
    };
    if !rej.overridden && ask.holdable {
        match plan::on_reject(r, &ask, &rej, now) {
            plan::OnReject::Hold(h) => return Verdict::Hold(h),
            plan::OnReject::WouldHold(h) => return Verdict::WouldHold(h),
            plan::OnReject::Reject { share_full, unheld } => {
                out.share_full = share_full;
                out.unheld = unheld;
            }
        }
    }
    let bans =
        rej.d.outcome == Outcome::Rejected && !(rej.invalid || rej.overridden || ask.dry_run);
    if let (true, Some(c)) = (bans, r.conf(rej.index)) {
        if let Some(secs) = ban(&c, rej.hash, now) {
            out.retry_after_s = secs;
            out.banned = true;
        }
    }
    if let Some(c) = r.conf(rej.index) {
        let counter = if ask.dry_run {
            Counter::RejectedDryRun
        } else {
            Counter::Rejected
        };
        c.table.add(ask.shard, counter, 1);
        if rej.invalid {
            c.table.add(ask.shard, Counter::FailClosed, 1);
        }
    }
    Verdict::Reject(out)
}

/// `ban=`: records the ban of `hash` (an operator's override wins) and
/// returns its length in whole seconds; None: no ban recorded.
fn ban(c: &LimitConf<'_>, hash: KeyHash, now: u64) -> Option<u32> {
    if c.ban_ms == 0 {
        return None;
    }
    let o = c.overrides?;
    if !o.ban(hash.fingerprint(), now.saturating_add(c.ban_ms), now) {
        return None;
    }
    Some(u32::try_from(c.ban_ms.div_ceil(1000)).unwrap_or(u32::MAX))
}
