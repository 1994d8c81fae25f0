//! One decision: the fast path for a key found at one of its home slots,
//! the general path (clock behind the slot, a new key, a lost CAS), and
//! `undo`.

use super::layout::{
    fp_of, idx_delta, idx_of, is_ahead, is_free_value, is_limited, prefetch, view, Counter, Slot,
    COUNT_BITS, COUNT_MASK, COUNT_MAX, IDX_MASK, IDX_SHIFT, LIMITED, TICK_MAX,
};
use super::place::{Candidate, Found, Place};
use super::{FailPolicy, KeyHash, Table, CHOICES};
use crate::rule::fit;
use crate::rule::window::{self, Counts};
use portable_atomic::AtomicU128;

/// Whether the request was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted and counted.
    Admitted,
    /// Over the limit; not counted.
    Rejected,
    /// The table was full under `FailPolicy::Closed`; not counted.
    FailClosed,
}

/// Proof of an admission, for [`Table::undo`]. Opaque.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    pub(super) slot: u32,
    pub(super) fingerprint: u64,
    pub(super) window_index: u64,
    /// Requests counted by the admission (its cost).
    pub(super) cost: u32,
}

impl Admission {
    /// Requests counted by the admission (its cost).
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// The window index (UTC epoch index) the admission was counted in; in
    /// a strict zone, the sub-window index ([`crate::rule::strict::sub_index`]).
    pub fn window_index(&self) -> u64 {
        self.window_index
    }
}

/// Table events that happened while deciding one request, so that the
/// caller can log them (once per episode, see [`Table::note_episode`]). The
/// table has already counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// A live key was evicted to make room (`FailPolicy::Open`).
    pub evicted_live: bool,
    /// The live key evicted was refused since its last admission (at or
    /// over its limit): every candidate was (`FailPolicy::Open`).
    pub evicted_over_limit: bool,
    /// An idle key's slot was reused.
    pub evicted_idle: bool,
    /// The key's slot was from a later window than `now_ms`.
    pub clock_backwards: bool,
}

/// The answer to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Admitted, rejected, or rejected because the table is full.
    pub outcome: Outcome,
    /// Requests that would still be admitted right now, after counting this
    /// one (0 when not admitted).
    pub remaining: u32,
    /// Seconds until one more request would be admitted (0 when admitted;
    /// equal to `reset_s` for `FailClosed`).
    pub retry_after_s: u32,
    /// Seconds until the next window boundary (rounded up).
    pub reset_s: u32,
    /// The sliding estimate before this request, in requests (rounded down;
    /// 0 for `FailClosed`).
    pub estimate: u32,
    /// Present iff admitted; pass it to [`Table::undo`] to take it back.
    pub admission: Option<Admission>,
    /// Table events seen on the way.
    pub events: Events,
}

impl Admission {
    fn new(slot: usize, q: &Probe, window_index: u64) -> Admission {
        Admission {
            slot: slot as u32,
            fingerprint: q.fp,
            window_index,
            cost: q.cost,
        }
    }
}

impl Answer {
    /// An admission: `remaining` requests left after it, `estimate` before
    /// it (requests), `reset_s` seconds to the next window.
    fn admitted(
        remaining: u32,
        reset_s: u32,
        estimate: u32,
        admission: Admission,
        events: Events,
    ) -> Answer {
        Answer {
            outcome: Outcome::Admitted,
            remaining,
            retry_after_s: 0,
            reset_s,
            estimate,
            admission: Some(admission),
            events,
        }
    }

    /// A request over its limit: one more is admitted in `retry_after_s`
    /// seconds; `estimate` in requests.
    fn rejected(retry_after_s: u32, reset_s: u32, estimate: u32, events: Events) -> Answer {
        Answer {
            outcome: Outcome::Rejected,
            remaining: 0,
            retry_after_s,
            reset_s,
            estimate,
            admission: None,
            events,
        }
    }

    /// A new key with no room under [`FailPolicy::Closed`]: retry at the
    /// next window, in `reset_s` seconds.
    pub(super) fn fail_closed(reset_s: u32, events: Events) -> Answer {
        Answer {
            outcome: Outcome::FailClosed,
            remaining: 0,
            retry_after_s: reset_s,
            reset_s,
            estimate: 0,
            admission: None,
            events,
        }
    }
}

/// One request's question to [`Table::acquire_then`]: the arguments of
/// [`Table::acquire_cost`].
#[derive(Clone, Copy, Debug)]
pub struct Question {
    /// The key's hash.
    pub key: KeyHash,
    /// The request's time (epoch ms).
    pub now_ms: u64,
    /// Requests per window.
    pub limit: u32,
    /// Requests the request counts (0 counts as 1).
    pub cost: u32,
    /// What a full zone does with a new key.
    pub policy: FailPolicy,
    /// The caller's worker number, for the counters.
    pub shard: usize,
}

/// One request's question, worked out once by [`Table::acquire`] and
/// handed down its paths.
#[derive(Clone, Copy, Debug)]
struct Probe {
    key: KeyHash,
    /// `key.fingerprint()`.
    fp: u64,
    /// The caller's window index.
    now_idx: u64,
    /// Ms elapsed in that window.
    elapsed: u64,
    /// Requests per window, less `cost - 1`: `cost` requests fit exactly
    /// when one more would fit under this limit (0 when `cost` exceeds the
    /// limit: nothing fits).
    limit: u32,
    /// Requests the admission counts (at least 1).
    cost: u32,
    policy: FailPolicy,
    /// The caller's worker number, for the counters.
    shard: usize,
}

impl Table<'_> {
    /// Decides one request of `key` at `now_ms` (epoch ms) against `limit`
    /// (requests per window) and counts it if admitted, in one CAS. `shard`
    /// is the caller's worker number (taken mod [`SHARDS`](super::SHARDS))
    /// for counters.
    ///
    /// The table counts `EvictIdle`, `EvictLive`, `FailClosed` and
    /// `ClockBackwards` itself; the caller counts `Passed`, `Rejected`,
    /// `RejectedDryRun` and `Exempt`.
    #[inline]
    pub fn acquire(
        &self,
        key: KeyHash,
        now_ms: u64,
        limit: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Answer {
        self.acquire_cost(key, now_ms, limit, 1, policy, shard)
    }

    /// [`Table::acquire`] for a request that counts `cost` requests (a
    /// cost of 0 counts as 1): admitted iff `cost` requests sent back to
    /// back would all be admitted now, i.e. iff the estimate plus `cost`
    /// fits under `limit` as the single-request rule has it
    /// (`current*W + previous*(W - elapsed) + (cost - 1)*W < limit*W`),
    /// then counted `cost` times in the same CAS. `remaining` is what is
    /// left after the cost, `retry_after_s` the wait until the whole cost
    /// fits; a cost above `limit` never fits (nothing wraps), and
    /// [`Table::undo`] gives the whole cost back.
    // Always inline: the request path's one call of it, out of line, costs
    // ~20 instructions a request in saved registers and spills.
    #[inline(always)]
    pub fn acquire_cost(
        &self,
        key: KeyHash,
        now_ms: u64,
        limit: u32,
        cost: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Answer {
        let q = Question {
            key,
            now_ms,
            limit,
            cost,
            policy,
            shard,
        };
        self.acquire_then(q, |d| *d)
    }

    /// [`Table::acquire_cost`], handing its decision to `then`: the common
    /// admission (the key at its home slot, one CAS) calls `then` with a
    /// decision it built in registers, every other path with the one it
    /// returned from memory, so that the caller's use of the decision (the
    /// request's record) reads no copy of it on the request path.
    #[inline(always)]
    pub fn acquire_then<T>(&self, question: Question, then: impl FnOnce(&Answer) -> T) -> T {
        let Question {
            key,
            now_ms,
            limit,
            cost,
            policy,
            shard,
        } = question;
        let cost = cost.max(1);
        if self.strict {
            return then(&self.acquire_strict(key, now_ms, limit, cost, policy, shard));
        }
        // A calendar zone's period is a window of the table, and the time
        // into it is counted back from the period's end (see
        // `Calendar::locate`): the rest is the same rule.
        let (now_idx, elapsed) = match self.window.calendar_of() {
            None => self.wdiv.divrem(now_ms),
            Some(cal) => cal.locate(now_ms, self.window.ms()),
        };
        let q = Probe {
            key,
            fp: key.fingerprint(),
            now_idx,
            elapsed,
            limit: fit::effective_limit(limit, cost),
            cost,
            policy,
            shard,
        };
        if self.prefetch {
            let p = self.place(key);
            if p.groups == CHOICES {
                // The second group's home slot is read right after the
                // first one's if the key is not there; start fetching it
                // now so that a table larger than the caches pays one
                // memory latency, not two in a row.
                prefetch(&self.slots[p.slot(1, 0)]);
            }
        }
        // Most keys live at their home slot in their first group: read it
        // before working out the rest of the placement.
        let home = self.home_slot(key);
        let cell = &self.slots[home];
        let value = self.ops.load(cell);
        if fp_of(value) == q.fp {
            return match self.acquire_found(q, (home, cell), value) {
                Ok(admitted) => then(&admitted),
                Err(other) => then(&other),
            };
        }
        // Then the home slot of the second group, inline, and the rest of
        // the lookup; an absent key gets a free home slot, or the survey of
        // its groups, which the general path starts from rather than
        // reading them again (see `acquire_new`).
        let p = self.place(key);
        let mut homes = [value, 0];
        let found = 'probe: {
            if p.groups == CHOICES {
                let slot = p.slot(1, 0);
                let value = self.load(slot);
                if fp_of(value) == q.fp {
                    break 'probe Some((slot, value));
                }
                homes[1] = value;
            }
            self.lookup_past_homes(&p, q.fp, &homes)
        };
        let d = match found {
            Some((slot, value)) => self
                .acquire_found(q, (slot, &self.slots[slot]), value)
                .unwrap_or_else(|d| d),
            // `&{ q }`: a copy made here, so that the question is written
            // to memory on this path only (see acquire_found).
            None => self.acquire_new(&{ q }, &p, homes),
        };
        then(&d)
    }

    /// [`Table::acquire`] for a key absent from its groups, whose home
    /// slots hold `homes` (read by the caller; the second 0 for a key with
    /// one group). While the zone is less than half full (this process's
    /// estimate, [`Table::note_homes`]), a free home slot is claimed
    /// without reading the rest of the groups: a new client costs the two
    /// cache lines its lookup read. Otherwise, and when neither home slot
    /// is free, the survey of both groups picks the slot (the group with
    /// fewer live slots, or the eviction victim), as the general path
    /// does. The survey only ever runs where a home slot is taken, so
    /// whether a key is evicted, and which, never depends on this choice.
    #[inline(never)]
    fn acquire_new(&self, q: &Probe, p: &Place, homes: [u128; CHOICES]) -> Answer {
        // After the loads of `homes` (see `ahead`).
        let ahead = self.ahead(q.now_idx);
        let free = homes.map(|v| is_free_value(v, q.now_idx, ahead));
        if self.note_homes(p, free) && q.limit > 0 {
            if let Some(j) = (0..p.groups).find(|&j| free[j]) {
                let target = Candidate {
                    slot: p.slot(j, 0),
                    value: homes[j],
                };
                return self.claim(q, p, target);
            }
        }
        let first = Some(self.survey(p, q.fp, q.now_idx));
        self.acquire_slow(q, first)
    }

    /// Claims the free slot `target` for a new key (the general path's
    /// claim, merge of a duplicate included); after a lost CAS, the general
    /// path from a fresh lookup.
    #[inline(always)]
    fn claim(&self, q: &Probe, p: &Place, target: Candidate) -> Answer {
        // Before the slot is written with window `now_idx`.
        self.raise_newest(q.now_idx);
        let mut events = Events::default();
        let used = fp_of(target.value) != 0;
        match self.slow_new(q, p, Some(target), used, None, &mut events) {
            Some(decision) => {
                self.count_events(q.shard, &decision);
                decision
            }
            None => self.acquire_slow(q, None),
        }
    }

    /// [`Table::acquire`] for a key found at `slot` (its `cell`, indexed
    /// once by the caller's load) holding `value`, the common cases
    /// inline: the slot holds the current window, or an older one (the
    /// client's first request in a new window). Same rule and same single
    /// CAS as the general path, on the packed value. Anything else
    /// (the clock behind the slot, a lost CAS) takes the general path, from
    /// this slot or, after a lost CAS, from a fresh lookup.
    ///
    /// `q` comes by value and goes to the general path as `&{ q }`, a copy
    /// made on that path: the common path keeps the question in registers
    /// instead of storing it for a call it does not make.
    ///
    /// Ok: admitted by the one CAS here; Err: any other path's decision.
    #[inline(always)]
    fn acquire_found(
        &self,
        q: Probe,
        (slot, cell): (usize, &AtomicU128),
        value: u128,
    ) -> Result<Answer, Answer> {
        let (now_idx, elapsed) = (q.now_idx, q.elapsed);
        let lo = value as u64;
        let current = (lo & COUNT_MASK) as u32;
        // Windows from the slot's to now, mod 2^24 (as in `Slot::delta`).
        let d = idx_delta(now_idx, idx_of(value));
        let counts = match d {
            0 => Counts {
                current,
                previous: ((lo >> COUNT_BITS) & COUNT_MASK) as u32,
            },
            // The slot's current window is now the previous one.
            1 => Counts {
                current: 0,
                previous: current,
            },
            // Two windows or more ago (forgotten), unless the slot is ahead
            // of this clock (read after the slot's load, see `ahead`).
            d if !is_ahead(d, self.ahead(now_idx)) => Counts::default(),
            _ => return Err(self.acquire_slow(&{ q }, Some(Found::Key { slot, value }))),
        };
        let (ok, estimate, remaining) = window::decide(counts, elapsed, self.wdiv, q.limit);
        if !ok {
            self.mark_limited(slot, value);
            return Err(self.rejected(counts, elapsed, q.limit, estimate));
        }
        let tick = u128::from(self.tick(elapsed)) << 64;
        if d != 0 {
            // The slot moves to window `now_idx` (a slot already in it was
            // raised by its writer, so the common case reads nothing more).
            self.raise_newest(now_idx);
        }
        let new = if d == 0 {
            // Admitted means current + cost <= limit < COUNT_MAX: the add
            // on bits 0..20 carries nowhere.
            ((value & !(0xff << 64)) | tick) + u128::from(q.cost)
        } else {
            // A new window: the fingerprint stays, the window moves to now,
            // the counts become (previous, cost).
            let lo = ((now_idx & IDX_MASK) << IDX_SHIFT)
                | (u64::from(counts.previous) << COUNT_BITS)
                | u64::from(q.cost);
            (value & (!0u128 << 72)) | tick | u128::from(lo)
        };
        if !self.ops.cas(cell, value, new) {
            return Err(self.acquire_slow(&{ q }, None));
        }
        // `elapsed` is the remainder of a division by the window.
        let reset_s = window::reset_secs_in(elapsed, self.window.ms());
        let admission = Admission::new(slot, &q, now_idx);
        Ok(Answer::admitted(
            remaining,
            reset_s,
            estimate,
            admission,
            Events::default(),
        ))
    }

    /// Marks the client at `slot` (read as `value`) refused since its last
    /// admission ([`LIMITED`]), once: a lost CAS is left to the next
    /// rejection. Nothing else of the slot changes.
    #[cold]
    #[inline(never)]
    fn mark_limited(&self, slot: usize, value: u128) {
        if !is_limited(value) {
            let _ = self.cas(slot, value, value | LIMITED);
        }
    }

    /// The decision for a request over its limit (no events, nothing
    /// counted), out of line: the hot path is the admission.
    #[cold]
    #[inline(never)]
    fn rejected(&self, counts: Counts, elapsed: u64, limit: u32, estimate: u32) -> Answer {
        let w = self.window.ms();
        let reset_s = window::reset_secs(elapsed, w);
        // A calendar period's request fits at the next period's start, or
        // never (a cost above the limit): come back then.
        let retry_after_s = match self.window.calendar_of() {
            Some(_) => reset_s,
            None => fit::retry_after_secs(fit::wait_ms_effective(counts, elapsed, w, limit), w),
        };
        Answer::rejected(retry_after_s, reset_s, estimate, Events::default())
    }

    /// The general path of [`Table::acquire`], starting from `first` (what
    /// the fast path already read) when given, else from a fresh lookup;
    /// looks again after each lost CAS.
    #[inline(never)]
    fn acquire_slow(&self, q: &Probe, mut first: Option<Found>) -> Answer {
        // Before any slot below is written with window `now_idx`.
        self.raise_newest(q.now_idx);
        let mut events = Events::default();
        let p = self.place(q.key);
        loop {
            let found = first
                .take()
                .unwrap_or_else(|| self.find(q.key, q.fp, q.now_idx));
            let decided = match found {
                Found::Key { slot, value } => self.slow_key(q, slot, value, &mut events),
                Found::Absent {
                    free,
                    free_is_used,
                    victim,
                } => self.slow_new(q, &p, free, free_is_used, victim, &mut events),
            };
            if let Some(decision) = decided {
                self.count_events(q.shard, &decision);
                return decision;
            }
        }
    }

    /// The general path for the key found at `slot` holding `value`, in
    /// any window (a clock behind the slot's counts in the slot's window
    /// and keeps its touch tick): the decision, or `None` after a lost CAS.
    #[inline(always)]
    fn slow_key(&self, q: &Probe, slot: usize, value: u128, events: &mut Events) -> Option<Answer> {
        let w = self.window.ms();
        let reset_s = window::reset_secs_in(q.elapsed, w);
        let s = Slot::decode(value);
        // After the slot's load (see `ahead`).
        let v = view(s, q.now_idx, self.ahead(q.now_idx), q.elapsed);
        events.clock_backwards |= v.backwards;
        let (ok, est, remaining) = window::decide(v.counts, v.elapsed, self.wdiv, q.limit);
        if !ok {
            self.mark_limited(slot, value);
            let wait = fit::wait_ms_effective(v.counts, v.elapsed, w, q.limit);
            // A clock behind the slot's window (a step back): its counts
            // hold until that window starts, the lead included.
            let wait = match v.backwards {
                true => {
                    let lead = (v.index - q.now_idx) * w - q.elapsed;
                    wait.map(|t| t + lead)
                }
                false => wait,
            };
            let retry_after_s = match self.window.calendar_of() {
                // As in `rejected` (a clock behind the key's period: this
                // one's start, within the clocks' skew).
                Some(_) => reset_s,
                None => fit::retry_after_secs(wait, w),
            };
            return Some(Answer::rejected(retry_after_s, reset_s, est, *events));
        }
        // Admitted: current < limit <= MAX_LIMIT < COUNT_MAX.
        let new = Slot {
            fp: q.fp,
            tick: if v.backwards {
                s.tick & TICK_MAX
            } else {
                self.tick(q.elapsed)
            },
            idx24: v.index & IDX_MASK,
            previous: v.counts.previous,
            current: v.counts.current.saturating_add(q.cost).min(COUNT_MAX),
        };
        if !self.cas(slot, value, new.encode()) {
            return None;
        }
        let admission = Admission::new(slot, q, v.index);
        Some(Answer::admitted(
            remaining, reset_s, est, admission, *events,
        ))
    }

    /// The general path for a new key: claims `free` (an idle slot when
    /// `free_is_used`), else evicts `victim` under [`FailPolicy::Open`],
    /// else fails closed; then merges a duplicate claim. `None` after a
    /// lost CAS.
    #[inline(always)]
    fn slow_new(
        &self,
        q: &Probe,
        p: &Place,
        free: Option<Candidate>,
        free_is_used: bool,
        victim: Option<Candidate>,
        events: &mut Events,
    ) -> Option<Answer> {
        let w = self.window.ms();
        let reset_s = window::reset_secs_in(q.elapsed, w);
        if q.limit == 0 {
            let retry_after_s = match self.window.calendar_of() {
                Some(_) => reset_s,
                None => fit::retry_after_secs(None, w),
            };
            return Some(Answer::rejected(retry_after_s, reset_s, 0, *events));
        }
        let (target, idle, live) = match (free, victim, q.policy) {
            (Some(c), _, _) => (c, free_is_used, false),
            (None, Some(c), FailPolicy::Open) => (c, false, true),
            _ => return Some(Answer::fail_closed(reset_s, *events)),
        };
        let new = Slot {
            fp: q.fp,
            tick: self.tick(q.elapsed),
            idx24: q.now_idx & IDX_MASK,
            previous: 0,
            current: q.cost,
        };
        if !self.cas(target.slot, target.value, new.encode()) {
            return None;
        }
        events.evicted_idle |= idle;
        events.evicted_live |= live;
        if live {
            // Only a full zone's eviction (rare): keep the new-key path short.
            core::hint::cold_path();
            events.evicted_over_limit |= is_limited(target.value);
        }
        let slot = self.dedup(p, q.fp, target.slot, q.now_idx, q.elapsed);
        let first = Counts {
            current: 1,
            previous: 0,
        };
        let remaining = window::remaining(first, q.elapsed, w, q.limit);
        let admission = Admission::new(slot, q, q.now_idx);
        Some(Answer::admitted(remaining, reset_s, 0, admission, *events))
    }

    /// Counts what the general path saw (the caller counts the outcome).
    #[inline(always)]
    pub(super) fn count_events(&self, shard: usize, decision: &Answer) {
        if decision.outcome == Outcome::FailClosed {
            self.count(shard, Counter::FailClosed);
        }
        let events = decision.events;
        if events.evicted_idle {
            self.count(shard, Counter::EvictIdle);
        }
        if events.evicted_live {
            self.count(shard, Counter::EvictLive);
        }
        if events.clock_backwards {
            self.count(shard, Counter::ClockBackwards);
        }
    }

    /// Takes back an admission (another limit rejected the request):
    /// decrements the slot's current count by the admission's cost if it
    /// still holds the key in the same window, or its previous count if the
    /// slot has since moved on by exactly one window. Never underflows;
    /// otherwise does nothing.
    pub fn undo(&self, admission: &Admission) {
        let slot = admission.slot as usize;
        if slot >= self.slots.len() {
            return;
        }
        if self.strict {
            return self.undo_strict(admission);
        }
        loop {
            let value = self.load(slot);
            let mut s = Slot::decode(value);
            if s.fp != admission.fingerprint {
                return;
            }
            match s.delta(admission.window_index, self.ahead(admission.window_index)) {
                0 => s.current = s.current.saturating_sub(admission.cost),
                -1 => s.previous = s.previous.saturating_sub(admission.cost),
                _ => return,
            }
            if self.cas(slot, value, s.encode()) {
                return;
            }
        }
    }
}

#[cfg(test)]
#[path = "acquire_tests.rs"]
mod tests;
