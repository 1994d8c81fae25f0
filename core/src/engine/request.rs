//! What the engine is given and what it answers: a limit's configuration
//! ([`LimitConf`]), the values the host reads, the [`Request`] trait the
//! glue implements, the [`Ask`] and the [`Verdict`].

use crate::overrides::range::Addr;
use crate::overrides::Overrides;
use crate::rule::shed::{Priority, ShedLimits};
use crate::shm::shed::ShedGroup;
use crate::shm::{Episodes, Owner, Place, Places, Turns};
use crate::table::{Answer, FailPolicy, KeyHash, Table};
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
    /// What the line counts: a rate, in-flight places, or both. The
    /// places and this process's owner of them are asked when one is
    /// taken ([`Request::in_flight_places`], [`Request::owner`]).
    pub line: Line,
    /// `redis_outage=` in force now ([`super::outage::in_force`]).
    pub outage: super::outage::Outage,
}

/// What a `rate_limit_window` line counts. One byte on the request path:
/// a line without `in_flight=` costs one test of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// `limit=` alone.
    Rate,
    /// `limit=` and `in_flight=`.
    RateInFlight,
    /// `in_flight=` alone.
    InFlight,
}

/// A zone's shared runtime state the engine counts and reads off the
/// admission path ([`Request::shared`]).
#[derive(Clone, Copy, Default)]
pub struct Shared<'t> {
    /// Requests whose limit, cost or in-flight value was invalid (any
    /// `fail=`), and the latest's time: the host logs the first of an
    /// episode ([`Request::invalid`]).
    pub invalid: Option<&'t Episodes>,
    /// `delay=`'s queue turns, shared by the zone's workers.
    pub turns: Option<&'t Turns<'t>>,
}

/// A limit's value as the host read it (no policy: the engine's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitRead {
    /// Requests per window.
    Set(u32),
    /// An empty variable: the client is exempt from this limit (unless an
    /// override says otherwise).
    Empty,
    /// Not an integer in range.
    Invalid,
}

/// A limit's key, as the glue evaluated it, and the limit value read
/// for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The key is empty: the limit does not apply (counted as exempt).
    Empty,
    /// The client `hash`, with its configured (or `map`ped) limit value.
    Client {
        /// The key's hash under the zone's seed.
        hash: KeyHash,
        /// The limit value, as read.
        limit: LimitRead,
    },
}

/// A request's cost under one limit, as the host read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// This many requests (1 or more; above the limit in force, it can
    /// never fit, and the request is rejected).
    Count(u32),
    /// Empty, not an integer, or 0: never a way past the limit. Under
    /// `fail=closed` the request is rejected; under `fail=open` it costs
    /// the whole limit in force (it fits only where no valid cost could be
    /// refused: a client never gains by sending one).
    Invalid,
}

/// A value the engine found invalid, for the host's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The limit value.
    Limit,
    /// The cost, judged against this limit in force.
    Cost(u32),
    /// The `in_flight=` value.
    InFlight,
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
    /// The client's override exempts it (counted as exempt).
    OverrideExempt,
    /// The client's override (block, ban) rejects it.
    OverrideReject,
    /// The `in_flight=` variable is empty: no place is taken.
    EmptyInFlight,
    /// An invalid `in_flight=` value, `fail=open`: no place is taken.
    InvalidInFlight,
    /// No room to count the request in flight (the zone's places are
    /// full), `fail=open`: admitted without a place.
    InFlightNoRoom,
}

/// The request being decided: what the glue provides, evaluated when the
/// engine asks. `'t` is the zones' lifetime (the configuration cycle).
pub trait Request<'t> {
    /// Whether the location may take in-flight places: false compiles the
    /// decision without any code for them (a location without
    /// `in_flight=` and without a shed group).
    const PLACES: bool = true;
    /// Number of limits in the location.
    fn limits(&self) -> usize;
    /// Limit `n`'s configuration; None: its zone has no table (skipped).
    fn conf(&self, n: usize) -> Option<LimitConf<'t>>;
    /// Evaluates limit `n`'s key and its limit value, as read (the engine
    /// decides what an empty or invalid value means). Err: an error of
    /// the host while evaluating them.
    fn key(&mut self, n: usize) -> Result<Key, HostError>;
    /// Evaluates the request's cost under limit `n`, as read. Called again
    /// for the waits and Retry-After of other limits: it logs nothing.
    fn cost(&mut self, n: usize) -> Result<Cost, HostError>;
    /// Limit `n`'s value `what` was invalid, the first of an episode in
    /// its zone (the engine counts every one, [`Shared::invalid`]): the
    /// host's log line.
    fn invalid(&mut self, n: usize, what: Invalid);
    /// Records limit `n`, judged against `limit` at `now_ms` with the
    /// table's answer `d`, in the request's record (headers, variables,
    /// what to undo or settle later).
    fn record(&mut self, n: usize, limit: u32, d: &Answer, now_ms: u64);
    /// Limit `n` did not apply, or an override decided (for the log).
    fn skipped(&mut self, n: usize, why: Skip);
    /// Calls `f` with each admission recorded so far and its table.
    fn admissions(&self, f: impl FnMut(&'t Table<'t>, &Admission));
    /// Every admission recorded so far was given back (a later limit
    /// refused the request, or the host failed): what the host recorded
    /// for the headers reads as after the undo.
    fn undone(&mut self) {}
    /// A fresh reading of the clock (epoch ms): a strict zone decides again
    /// when its key's state is later than the request's time.
    fn fresh_now(&mut self) -> u64;
    /// Limit `n`'s zone's shared runtime state, off the admission path:
    /// its count of requests whose limit or cost value was invalid (any
    /// `fail=`), and its `delay=` queue turns, shared by its workers.
    fn shared(&self, _n: usize) -> Shared<'t> {
        Shared::default()
    }
    /// Limit `n`'s `in_flight=` value, as read (asked only of a line with
    /// one, after its rate admitted the request).
    fn in_flight(&mut self, _n: usize) -> Result<LimitRead, HostError> {
        Ok(LimitRead::Empty)
    }
    /// Limit `n`'s zone's in-flight places (None: it has none).
    fn in_flight_places(&self, _n: usize) -> Option<&'t Places<'t>> {
        None
    }
    /// This process's owner of limit `n`'s zone's places (None: every
    /// owner is taken: the zone's `fail=` decides).
    fn owner(&mut self, _n: usize) -> Option<Owner> {
        None
    }
    /// Limit `n` took the place `p` in its zone's places, under the
    /// in-flight limit in force `limit` (the client's override, else the
    /// value read): the host gives it back when the request ends (once),
    /// unless the engine gives it back first ([`Request::places`]).
    fn took(&mut self, _n: usize, _p: Place, _limit: u32) {}
    /// Calls `f` with each place taken so far and its zone's places: a
    /// request not admitted after all has them given back by the engine.
    fn places(&self, _f: impl FnMut(&'t Places<'t>, Place)) {}
    /// When the request was first held by `delay=` (epoch ms), if it was.
    fn held_since(&self) -> Option<u64> {
        None
    }
    /// Limit `n`'s key as a client's address (a zone keyed by
    /// `$binary_remote_addr`, masked like the zone), for its range
    /// overrides (`cidr=`); None: not an address. Asked only when the
    /// zone holds a range override and the client has no override of its
    /// own.
    fn key_addr(&mut self, _n: usize) -> Option<Addr> {
        None
    }
    /// The location's shed group (`rate_limit_window_shed`), asked before
    /// any limit (None: it has none, or no room in memory for it).
    fn shed(&mut self) -> Option<ShedAsk<'t>> {
        None
    }
    /// The shed group admitted the request with the place `p`: the host
    /// keeps it until the request ends, unless the engine gives it back
    /// first ([`Request::give_back_shed`]).
    fn took_shed(&mut self, _p: Place) {}
    /// The request does not go on (rejected, held, an error): the host
    /// gives back the shed place it keeps, if any.
    fn give_back_shed(&mut self) {}
    /// A dry run's shed group would have shed the request (its group has
    /// `in_flight` requests in flight): the host logs it; it goes on.
    fn would_shed(&mut self, _in_flight: u32) {}
    /// A request that was held (`delay=`) is decided for good, as `how`
    /// says: the host gives back what its hold keeps (its place under
    /// `delay_max_held`, its turn, the `delay_held` gauge), counts and
    /// logs it.
    fn unhold(&mut self, _how: Woken) {}
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
    /// The request was held before (`delay=`) and is decided again: once
    /// decided for good, the engine has the host end its hold
    /// ([`Request::unhold`]).
    pub woken: bool,
}

/// A location's shed group, as the engine asks it.
#[derive(Clone, Copy)]
pub struct ShedAsk<'t> {
    /// The group's memory (its places, shared by the workers).
    pub group: &'t ShedGroup<'t>,
    /// This process's owner of the group's places (None: no room).
    pub owner: Option<Owner>,
    /// The group's `max=` and reserves.
    pub limits: ShedLimits,
    /// The request's priority, as read.
    pub priority: Priority,
}

/// How a held request was decided for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// Admitted (and counted).
    Admitted,
    /// No limit applied when it woke (an override exempted it meanwhile).
    Exempt,
    /// Rejected (the room was taken, or the wait no longer fits).
    Rejected,
    /// Shed by its location's group when it woke.
    Shed,
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
    /// The turn it took in the rejecting zone's queue
    /// ([`Turns`](crate::shm::Turns)), if it took one: the host gives it
    /// back when the request is decided or gone.
    pub turn: Option<crate::shm::turns::Turn>,
}

/// A rejected request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The limit that rejected it (index in the location).
    pub index: usize,
    /// That limit, in requests per window (0: an invalid value, fail=closed).
    pub limit: u32,
    /// The request's cost under it (above `limit`: it can never fit).
    pub cost: u32,
    /// That limit's table answer (its estimate, its outcome).
    pub decision: Answer,
    /// The client (that limit's key hash).
    pub hash: KeyHash,
    /// Its limit value or cost was invalid (fail=closed).
    pub invalid: bool,
    /// An override (block, ban) rejected it, not the count.
    pub overridden: bool,
    /// Whole seconds until the whole cost fits under every limit, and no
    /// earlier than the end of a ban or block (never shortened by one).
    pub retry_after_s: u32,
    /// This rejection banned the client (`ban=`) for this many seconds.
    pub banned: Option<u32>,
    /// Refused at once: its client already holds this many requests, and
    /// its turn would come after `delay` (see [`super::plan`]); its
    /// Retry-After is that turn (behind its held requests).
    pub share_full: Option<u32>,
    /// It was held, and is now rejected (its hold is to be released).
    pub unheld: bool,
    /// `in_flight=` refused it: `limit` is the in-flight limit, and
    /// `decision.estimate` the client's requests in flight.
    pub in_flight: bool,
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
    /// Shed by the location's group (`rate_limit_window_shed`) before any
    /// limit: counted by none.
    Shed(ShedRefusal),
}

/// A request its location's shed group refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShedRefusal {
    /// The group's requests in flight (at or above the request's limit).
    pub in_flight: u32,
    /// Whole seconds for Retry-After.
    pub retry_after_s: u32,
}
