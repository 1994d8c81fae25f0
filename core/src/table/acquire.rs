//! One decision: the fast path for a key found at one of its home slots,
//! the general path (clock behind the slot, a new key, a lost CAS), and
//! `undo`.

use super::layout::{
    fp_of, idx_delta, is_ahead, is_limited, prefetch, view, Counter, Slot, COUNT_BITS, COUNT_MASK,
    COUNT_MAX, IDX_MASK, LIMITED, TICK_MAX,
};
use super::place::{Candidate, Found};
use super::{FailPolicy, KeyHash, Table, CHOICES};
use crate::fit;
use crate::window::{self, Counts};

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
    /// a strict zone, the sub-window index ([`crate::strict::sub_index`]).
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
pub struct Decision {
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
    fn new(slot: usize, q: &Ask, window_index: u64) -> Admission {
        Admission {
            slot: slot as u32,
            fingerprint: q.fp,
            window_index,
            cost: q.cost,
        }
    }
}

impl Decision {
    /// An admission: `remaining` requests left after it, `estimate` before
    /// it (requests), `reset_s` seconds to the next window.
    fn admitted(
        remaining: u32,
        reset_s: u32,
        estimate: u32,
        admission: Admission,
        events: Events,
    ) -> Decision {
        Decision {
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
    fn rejected(retry_after_s: u32, reset_s: u32, estimate: u32, events: Events) -> Decision {
        Decision {
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
    pub(super) fn fail_closed(reset_s: u32, events: Events) -> Decision {
        Decision {
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
struct Ask {
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
    ) -> Decision {
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
    ) -> Decision {
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
    pub fn acquire_then<T>(&self, question: Question, then: impl FnOnce(&Decision) -> T) -> T {
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
        let (now_idx, elapsed) = self.wdiv.divrem(now_ms);
        let q = Ask {
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
        let value = self.load(home);
        if fp_of(value) == q.fp {
            return match self.acquire_found(q, home, value) {
                Ok(admitted) => then(&admitted),
                Err(other) => then(&other),
            };
        }
        // Then the home slot of the second group, inline, and the rest of
        // the lookup; an absent key gets the survey of its groups, which
        // the general path starts from rather than reading them again.
        let p = self.place(key);
        let found = 'probe: {
            if p.groups == CHOICES {
                let slot = p.slot(1, 0);
                let value = self.load(slot);
                if fp_of(value) == q.fp {
                    break 'probe Some((slot, value));
                }
            }
            self.lookup(&p, q.fp)
        };
        let d = match found {
            Some((slot, value)) => self.acquire_found(q, slot, value).unwrap_or_else(|d| d),
            None => {
                let first = Some(self.survey(&p, q.fp, now_idx));
                // `&{ q }`: a copy made here, so that the question is
                // written to memory on this path only (see acquire_found).
                self.acquire_slow(&{ q }, first)
            }
        };
        then(&d)
    }

    /// [`Table::acquire`] for a key found at `slot` holding `value`, the
    /// common cases inline: the slot holds the current window, or an older
    /// one (the client's first request in a new window). Same rule and same
    /// single CAS as the general path, on the packed value. Anything else
    /// (the clock behind the slot, a lost CAS) takes the general path, from
    /// this slot or, after a lost CAS, from a fresh lookup.
    ///
    /// `q` comes by value and goes to the general path as `&{ q }`, a copy
    /// made on that path: the common path keeps the question in registers
    /// instead of storing it for a call it does not make.
    ///
    /// Ok: admitted by the one CAS here; Err: any other path's decision.
    #[inline(always)]
    fn acquire_found(&self, q: Ask, slot: usize, value: u128) -> Result<Decision, Decision> {
        let (now_idx, elapsed) = (q.now_idx, q.elapsed);
        let lo = value as u64;
        let current = (lo & COUNT_MASK) as u32;
        // Windows from the slot's to now, mod 2^24 (as in `Slot::delta`).
        let d = idx_delta(now_idx, lo >> 40);
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
            let lo = ((now_idx & IDX_MASK) << 40)
                | (u64::from(counts.previous) << COUNT_BITS)
                | u64::from(q.cost);
            (value & (!0u128 << 72)) | tick | u128::from(lo)
        };
        if !self.cas(slot, value, new) {
            return Err(self.acquire_slow(&{ q }, None));
        }
        // `elapsed` is the remainder of a division by the window.
        let reset_s = window::reset_secs_in(elapsed, self.window.ms());
        let admission = Admission::new(slot, &q, now_idx);
        Ok(Decision::admitted(
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
    fn rejected(&self, counts: Counts, elapsed: u64, limit: u32, estimate: u32) -> Decision {
        let w = self.window.ms();
        let retry_after_s =
            fit::retry_after_secs(fit::wait_ms_effective(counts, elapsed, w, limit), w);
        let reset_s = window::reset_secs(elapsed, w);
        Decision::rejected(retry_after_s, reset_s, estimate, Events::default())
    }

    /// The general path of [`Table::acquire`], starting from `first` (what
    /// the fast path already read) when given, else from a fresh lookup;
    /// looks again after each lost CAS.
    #[inline(never)]
    fn acquire_slow(&self, q: &Ask, mut first: Option<Found>) -> Decision {
        // Before any slot below is written with window `now_idx`.
        self.raise_newest(q.now_idx);
        let mut events = Events::default();
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
                } => self.slow_new(q, free, free_is_used, victim, &mut events),
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
    fn slow_key(&self, q: &Ask, slot: usize, value: u128, events: &mut Events) -> Option<Decision> {
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
            let retry_after_s = fit::retry_after_secs(wait, w);
            return Some(Decision::rejected(retry_after_s, reset_s, est, *events));
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
        Some(Decision::admitted(
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
        q: &Ask,
        free: Option<Candidate>,
        free_is_used: bool,
        victim: Option<Candidate>,
        events: &mut Events,
    ) -> Option<Decision> {
        let w = self.window.ms();
        let reset_s = window::reset_secs_in(q.elapsed, w);
        if q.limit == 0 {
            let retry_after_s = fit::retry_after_secs(None, w);
            return Some(Decision::rejected(retry_after_s, reset_s, 0, *events));
        }
        let (target, idle, live) = match (free, victim, q.policy) {
            (Some(c), _, _) => (c, free_is_used, false),
            (None, Some(c), FailPolicy::Open) => (c, false, true),
            _ => return Some(Decision::fail_closed(reset_s, *events)),
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
        let slot = self.dedup(q.key, q.fp, target.slot, q.now_idx, q.elapsed);
        let first = Counts {
            current: 1,
            previous: 0,
        };
        let remaining = window::remaining(first, q.elapsed, w, q.limit);
        let admission = Admission::new(slot, q, q.now_idx);
        Some(Decision::admitted(
            remaining, reset_s, 0, admission, *events,
        ))
    }

    /// Counts what the general path saw (the caller counts the outcome).
    #[inline(always)]
    pub(super) fn count_events(&self, shard: usize, decision: &Decision) {
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
mod tests {
    use super::*;
    use crate::table::testing::*;
    use crate::table::*;
    use crate::window::{MAX_LIMIT, MAX_WINDOW_MS};

    #[test]
    fn a_slot_idle_past_2_pow_23_windows_is_stale_not_ahead() {
        // A 1 s window: a client that used its limit, back 2^23 + 10
        // windows (97 days) later, is a new client (it was read as ahead of
        // the clock, its old counts back, and rejected).
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, 1_000);
        let h = t.hash_key(b"k");
        for _ in 0..3 {
            t.acquire(h, T0, 3, FailPolicy::Open, 0);
        }
        assert_eq!(
            t.acquire(h, T0, 3, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
        let later = T0 + ((1 << 23) + 10) * 1_000;
        let d = t.acquire(h, later, 3, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(!d.events.clock_backwards);
        assert_eq!(d.remaining, 2);
        assert_eq!(t.counter(Counter::ClockBackwards), 0);
        // A real step back is still seen as one, and counts are kept.
        let back = t.acquire(h, later - 5_000, 3, FailPolicy::Open, 0);
        assert!(back.events.clock_backwards);
        assert_eq!(t.peek(h, later).current, 2);
    }

    #[test]
    fn countdown_then_reject() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"client-1");
        let now = T0 + 10_000;
        let mut rem = vec![];
        for _ in 0..5 {
            let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
            assert_eq!(d.outcome, Outcome::Admitted);
            assert_eq!(d.retry_after_s, 0);
            assert_eq!(d.reset_s, 50);
            rem.push(d.remaining);
        }
        assert_eq!(rem, vec![4, 3, 2, 1, 0]);
        let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.estimate, 5);
        assert!(d.admission.is_none());
        // Next window at +1 ms: 5 * (W - 1) < 5 * W.
        assert_eq!(d.retry_after_s, 51);
        assert_eq!(t.peek(k, now).current, 5);
        assert_eq!(
            t.peek(t.hash_key(b"other"), now),
            Snapshot {
                window_index: win(MIN).index(now),
                ..Snapshot::default()
            }
        );
    }

    #[test]
    fn window_rolls_forward() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        for _ in 0..10 {
            assert_eq!(
                t.acquire(k, T0 + 59_999, 10, FailPolicy::Open, 0).outcome,
                Outcome::Admitted
            );
        }
        // Boundary: at T0 + 60_000 the 10 are previous with full weight.
        let d = t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.estimate, 10);
        // Half way: estimate 5, 5 more admitted.
        let n = (0..10)
            .filter(|_| {
                t.acquire(k, T0 + MIN + 30_000, 10, FailPolicy::Open, 0)
                    .outcome
                    == Outcome::Admitted
            })
            .count();
        assert_eq!(n, 5); // current * W + 10 * W / 2 < 10 * W  <=>  current < 5
        let s = t.peek(k, T0 + MIN + 30_000);
        assert_eq!((s.current, s.previous), (5, 10));
        // Two windows later everything is forgotten.
        let s = t.peek(k, T0 + 3 * MIN);
        assert_eq!((s.current, s.previous, s.estimate), (0, 0, 0));
        assert_eq!(
            t.acquire(k, T0 + 3 * MIN, 10, FailPolicy::Open, 0)
                .remaining,
            9
        );
    }

    #[test]
    fn one_second_and_one_day_windows() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, 1_000);
        let k = t.hash_key(b"k");
        assert_eq!(
            t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let d = t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0);
        assert_eq!(
            (d.outcome, d.reset_s, d.retry_after_s),
            (Outcome::Rejected, 1, 1)
        );
        assert_eq!(
            t.acquire(k, T0 + 1_999, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let mut r2 = Region::new(small_bytes(64));
        let t = table(&mut r2, 86_400_000);
        let k = t.hash_key(b"k");
        assert_eq!(
            t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let d = t.acquire(k, T0 + 3_600_000, 1, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.reset_s, 23 * 3600);
        assert_eq!(d.retry_after_s, 23 * 3600 + 1); // 1 * (W - t) < W from t = 1 ms
    }

    #[test]
    fn clock_backwards_keeps_counts() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        for _ in 0..3 {
            t.acquire(k, T0 + 2 * MIN + 5, 10, FailPolicy::Open, 0);
        }
        // A worker whose clock is one window behind.
        let d = t.acquire(k, T0 + MIN + 59_000, 10, FailPolicy::Open, 1);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.clock_backwards);
        assert_eq!(t.counter(Counter::ClockBackwards), 1);
        // Counted in the slot's (newest) window, nothing reset.
        let s = t.peek(k, T0 + 2 * MIN + 5);
        assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
        let s = t.peek(k, T0);
        assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
        // Undo of the backwards admission hits the right window.
        t.undo(&d.admission.unwrap());
        assert_eq!(t.peek(k, T0 + 2 * MIN).current, 3);
    }

    #[test]
    fn undo_same_and_next_window_never_underflows() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let a = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
        let b = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
        t.undo(&a);
        assert_eq!(t.peek(k, T0).current, 1);
        // Roll one window: b's count is now "previous".
        t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
        t.undo(&b);
        let s = t.peek(k, T0 + MIN);
        assert_eq!((s.current, s.previous), (1, 0));
        t.undo(&b);
        let s = t.peek(k, T0 + MIN);
        assert_eq!((s.current, s.previous), (1, 0));
    }

    #[test]
    fn limit_zero_never_admits_or_tracks() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let d = t.acquire(t.hash_key(b"k"), T0 + 1_000, 0, FailPolicy::Open, 0);
        assert_eq!(
            (d.outcome, d.retry_after_s, d.remaining),
            (Outcome::Rejected, 60, 0)
        );
        assert_eq!(t.slots_used(T0), 0);
    }

    #[test]
    fn full_table_open_evicts_least_recent() {
        let mut r = Region::new(small_bytes(16));
        let t = table(&mut r, MIN);
        assert_eq!(t.capacity(), 16);
        // 16 keys at increasing ticks.
        for i in 0..16u64 {
            let k = t.hash_key(format!("key{i}").as_bytes());
            assert_eq!(
                t.acquire(k, T0 + i * 1_000, 100, FailPolicy::Open, 0)
                    .outcome,
                Outcome::Admitted
            );
        }
        assert_eq!(t.slots_used(T0 + 20_000), 16);
        let d = t.acquire(t.hash_key(b"new"), T0 + 20_000, 100, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.evicted_live);
        assert_eq!(t.counter(Counter::EvictLive), 1);
        // The oldest (key0) was evicted, the others are remembered.
        assert_eq!(t.peek(t.hash_key(b"key0"), T0 + 20_000).current, 0);
        assert_eq!(t.peek(t.hash_key(b"key1"), T0 + 20_000).current, 1);
        assert_eq!(t.peek(t.hash_key(b"new"), T0 + 20_000).current, 1);
    }

    #[test]
    fn full_table_closed_fails_closed() {
        let mut r = Region::new(small_bytes(16));
        let t = table(&mut r, MIN);
        let ds = fill(&t, 16, T0 + 30_000, FailPolicy::Closed);
        assert!(ds.iter().all(|d| d.outcome == Outcome::Admitted));
        let d = t.acquire(t.hash_key(b"new"), T0 + 30_000, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::FailClosed);
        assert_eq!((d.remaining, d.retry_after_s, d.reset_s), (0, 30, 30));
        assert_eq!(t.counter(Counter::FailClosed), 1);
        assert_eq!(t.counter(Counter::EvictLive), 0);
        // Known keys still work.
        let d = t.acquire(t.hash_key(b"key3"), T0 + 30_000, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::Admitted);
        // Two windows later the idle slots are reused.
        let d = t.acquire(t.hash_key(b"new"), T0 + 3 * MIN, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.evicted_idle);
        assert_eq!(t.counter(Counter::EvictIdle), 1);
    }

    #[test]
    fn any_key_length() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let long: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let mut long2 = long.clone();
        *long2.last_mut().unwrap() ^= 1;
        let keys: [&[u8]; 5] = [b"", b"\0", &[0xff, 0, 0x80], &long, &long2];
        for k in keys {
            assert_eq!(
                t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
                Outcome::Admitted
            );
        }
        for k in keys {
            assert_eq!(
                t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
                Outcome::Rejected
            );
        }
        assert_ne!(t.hash_key(&long), t.hash_key(&long2));
        assert_eq!(t.slots_used(T0), 5);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a million CAS loops")]
    fn max_limit_is_exact() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MAX_WINDOW_MS);
        let k = t.hash_key(b"k");
        let n = (0..MAX_LIMIT + 10)
            .filter(|_| {
                t.acquire(k, T0 + 5, MAX_LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted
            })
            .count();
        assert_eq!(n, MAX_LIMIT as usize);
        assert_eq!(t.peek(k, T0 + 5).current, MAX_LIMIT);
    }
}
