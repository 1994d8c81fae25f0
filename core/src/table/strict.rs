//! Strict slots: a zone formatted with [`Mode::Strict`] keeps each key's
//! [`crate::rule::strict`] state in one slot, packed by [`strict::pack`]:
//!
//! ```text
//! bits 104..128 fingerprint (24 bits, never 0 for a used slot)
//! bit 103       limited: refused since its last admission (layout.rs)
//! bits 88..103  sub-window index mod 2^15
//! bits 16..88   the six past sub-window counts, 12-bit codes (rounded up)
//! bits 0..16    the current sub-window count
//! ```
//!
//! Same slot array, same 16-byte slots and same placement as estimate
//! slots (two candidate groups of [`PROBE`] slots, probed side by side from
//! the key's home offsets, a new key at a free home slot while the zone is
//! less than 3/8 full, else in the group with fewer live slots),
//! so a strict zone holds as many keys per MB. A decision is one load and,
//! if admitted, one CAS of the key's slot; a lost CAS redoes the decision
//! from a fresh read. The header's newest index holds the newest
//! *sub-window* index any slot was written with.
//!
//! The 24-bit fingerprint is mixed from the whole key hash, so two keys
//! share a slot only if they share a candidate group and the 24 bits
//! (about 2 in 10^6 per new key with 32 live neighbours): they then share
//! one quota, which only ever rejects earlier, never admits more.
//!
//! A sub-window index mod 2^15 wraps after 32,768 sub-windows (91 minutes
//! at `window=1s`): the sweep, which visits every slot at least once an
//! hour, clears stale counts before.
//!
//! A full pair of groups evicts by the estimate zones' rule
//! ([`evict_rank`]): a client not refused since its last admission first,
//! then the fewest requests in its span, then the oldest sub-window.

use portable_atomic::Ordering;

use super::acquire::{Admission, Answer, Events, Outcome};
use super::layout::{is_strict_limited, STRICT_LIMITED};
use super::maintenance::Snapshot;
use super::place::{Candidate, Place};
use super::survey::{evict_rank, Victim};
use super::{FailPolicy, KeyHash, Table, CHOICES, PROBE};
use crate::rule::fit;
use crate::rule::mode::Mode;
use crate::rule::strict::{self, State, SPAN, SUB_BITS, SUB_MASK};
use crate::rule::window::{self, Counts};

/// Sub-windows a slot may be ahead of the caller's clock, at most.
const SUB_HALF: u64 = 1 << (SUB_BITS - 1);
/// The count bits of a packed strict value (0..88).
pub(super) const COUNTS: u128 = (1 << 88) - 1;

/// The strict fingerprint of a key: 24 bits of a multiplicative mix of its
/// whole hash (never 0).
#[inline]
pub(crate) fn strict_fp(key: KeyHash) -> u64 {
    let f = key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    f.max(1)
}

/// A key's slot, or where a new key goes.
enum SFound {
    Key {
        slot: usize,
        value: u128,
    },
    Absent {
        free: Option<Candidate>,
        victim: Option<Candidate>,
    },
}

impl Table<'_> {
    /// Whether the zone decides with the strict rule.
    pub fn mode(&self) -> Mode {
        if self.strict {
            Mode::Strict
        } else {
            Mode::Estimate
        }
    }

    /// Sub-windows a slot can be ahead of `now_sub` (read after the slot).
    fn sub_ahead(&self, now_sub: u64) -> u64 {
        self.header
            .newest
            .load(Ordering::SeqCst)
            .saturating_sub(now_sub)
            .min(SUB_HALF)
    }

    /// The state of a packed strict value seen from sub-window `now_sub`,
    /// `None` when it holds nothing live (empty, or every count has left the
    /// span).
    fn strict_state(&self, v: u128, now_sub: u64) -> Option<State> {
        if strict::packed_empty(v) {
            return None;
        }
        let d = now_sub.wrapping_sub(strict::packed_sub(v)) & SUB_MASK;
        let ahead = (1 << SUB_BITS) - d;
        let index = if d != 0 && ahead <= self.sub_ahead(now_sub) {
            now_sub + ahead
        } else if d < SPAN as u64 {
            now_sub - d
        } else {
            return None;
        };
        Some(strict::unpack(v, index))
    }

    /// The key's slot in probe order, or where a new key goes: while the
    /// zone is less than 3/8 full, a free home slot, found reading only the
    /// key's sequences up to their first never-used slots (see
    /// `Table::note_homes`, as in an estimate zone); otherwise the survey
    /// of both groups ([`Table::strict_find`]).
    fn strict_probe(&self, p: &Place, fp: u64, now_sub: u64) -> SFound {
        let homes = [
            self.load(p.slot(0, 0)),
            if p.groups == CHOICES {
                self.load(p.slot(1, 0))
            } else {
                0
            },
        ];
        for (j, &value) in homes.iter().enumerate().take(p.groups) {
            if strict::packed_fp(value) == fp {
                return SFound::Key {
                    slot: p.slot(j, 0),
                    value,
                };
            }
        }
        let open = [
            strict::packed_fp(homes[0]) != 0,
            p.groups == CHOICES && strict::packed_fp(homes[1]) != 0,
        ];
        if open != [false, false] {
            if let Some((slot, value)) = self.lookup_with(p, fp, open, 1, strict::packed_fp) {
                return SFound::Key { slot, value };
            }
        }
        // After the loads (`strict_state` reads how far ahead a slot may be).
        let free =
            homes.map(|v| strict::packed_fp(v) == 0 || self.strict_state(v, now_sub).is_none());
        if self.note_homes(p, free) {
            if let Some(j) = (0..p.groups).find(|&j| free[j]) {
                let slot = p.slot(j, 0);
                return SFound::Absent {
                    free: Some(Candidate {
                        slot,
                        value: homes[j],
                    }),
                    victim: None,
                };
            }
        }
        self.strict_find(p, fp, now_sub)
    }

    /// The key's slot in probe order, or the free slot and victim for it.
    fn strict_find(&self, p: &Place, fp: u64, now_sub: u64) -> SFound {
        let mut live = [0usize; CHOICES];
        let mut free: [Option<Candidate>; CHOICES] = [None; CHOICES];
        let mut open = [true; CHOICES];
        let mut victim = Victim::default();
        for i in 0..PROBE {
            for j in 0..p.groups {
                let slot = p.slot(j, i);
                let value = self.load(slot);
                let f = strict::packed_fp(value);
                if f == fp && open[j] {
                    return SFound::Key { slot, value };
                }
                let cand = Candidate { slot, value };
                if f == 0 {
                    // A key is never placed past a never-used slot, which
                    // is free (no state to read: the common slot of a new
                    // key's survey).
                    open[j] = false;
                    if free[j].is_none() {
                        free[j] = Some(cand);
                    }
                    continue;
                }
                match self.strict_state(value, now_sub) {
                    Some(s) => {
                        live[j] += 1;
                        victim.offer(self.strict_rank(value, &s, now_sub), cand);
                    }
                    None => {
                        if free[j].is_none() {
                            free[j] = Some(cand);
                        }
                    }
                }
            }
        }
        let mut best: Option<(usize, Candidate)> = None;
        for j in 0..p.groups {
            if let Some(c) = free[j] {
                if best.is_none_or(|(l, _)| live[j] < l) {
                    best = Some((live[j], c));
                }
            }
        }
        SFound::Absent {
            free: best.map(|(_, c)| c),
            victim: victim.take(),
        }
    }

    /// The [`evict_rank`] of a live strict slot `value` whose state is `s`:
    /// its flag, the requests of its span seen from `now_sub`, and the age
    /// of its newest sub-window (a slot ahead of `now_sub` is the youngest).
    fn strict_rank(&self, value: u128, s: &State, now_sub: u64) -> u64 {
        let count = s.at(now_sub).total();
        let age = (now_sub + SUB_HALF).saturating_sub(s.index);
        evict_rank(is_strict_limited(value), count, age)
    }

    /// [`Table::acquire_cost`] of a table known to be strict: the strict
    /// path alone, without the estimate path's code around it (the
    /// engine's out-of-line strict call). Same answer as `acquire_cost`.
    #[inline(always)]
    pub fn acquire_cost_strict(
        &self,
        key: KeyHash,
        now_ms: u64,
        limit: u32,
        cost: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Answer {
        debug_assert!(self.strict);
        self.acquire_strict(key, now_ms, limit, cost.max(1), policy, shard)
    }

    /// [`Table::acquire`] of a strict zone.
    pub(super) fn acquire_strict(
        &self,
        key: KeyHash,
        now_ms: u64,
        limit: u32,
        cost: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Answer {
        let w = self.window.ms();
        let now_sub = strict::sub_index(now_ms, w);
        let fp = strict_fp(key);
        let p = self.place(key);
        let mut events = Events::default();
        let decision = loop {
            let (slot, value, state, evict) = match self.strict_probe(&p, fp, now_sub) {
                SFound::Key { slot, value } => {
                    let s = self.strict_state(value, now_sub).unwrap_or_default();
                    (slot, value, s, None)
                }
                SFound::Absent { free, victim } => match (free, victim, policy) {
                    (Some(c), _, _) => {
                        let idle = strict::packed_fp(c.value) != 0;
                        (c.slot, c.value, State::default(), Some((idle, false)))
                    }
                    (None, Some(c), FailPolicy::Open) => {
                        (c.slot, c.value, State::default(), Some((false, true)))
                    }
                    _ => break self.strict_fail_closed(),
                },
            };
            let v = strict::decide_cost(state, now_ms, w, limit, cost);
            events.clock_backwards |= v.backwards;
            if !v.admitted {
                if evict.is_none() {
                    // The key's own slot (never a free slot or a victim).
                    self.strict_mark_limited(slot, value);
                }
                break strict_decision(&v, None, events);
            }
            self.raise_newest(v.state.index);
            if !self.cas(slot, value, strict::pack(fp, &v.state)) {
                continue;
            }
            let mut slot = slot;
            if let Some((idle, live)) = evict {
                events.evicted_idle |= idle;
                events.evicted_live |= live;
                events.evicted_over_limit |= live && is_strict_limited(value);
                slot = self.strict_dedup(&p, fp, slot, now_sub);
            }
            let adm = Admission {
                slot: slot as u32,
                fingerprint: fp,
                window_index: v.state.index,
                cost,
            };
            break strict_decision(&v, Some(adm), events);
        };
        self.count_events(shard, &decision);
        decision
    }

    /// Marks the key at `slot` (read as `value`) refused since its last
    /// admission ([`STRICT_LIMITED`]), once: a lost CAS is left to the next
    /// rejection. Nothing else of the slot changes.
    #[cold]
    fn strict_mark_limited(&self, slot: usize, value: u128) {
        if !is_strict_limited(value) {
            let _ = self.cas(slot, value, value | STRICT_LIMITED);
        }
    }

    /// The decision when no slot can track a new key (`fail=closed`).
    fn strict_fail_closed(&self) -> Answer {
        Answer::fail_closed(strict::secs_ceil(self.window.ms()), Events::default())
    }

    /// After claiming `ours` for a new key: if a racing insert placed the
    /// same key in another slot, the later one in probe order is retired
    /// and its counts are added to the first. Returns our admission's slot.
    fn strict_dedup(&self, p: &Place, fp: u64, ours: usize, now_sub: u64) -> usize {
        // A key is never placed past the first never-used slot of its
        // sequence (a free slot is taken at or before it, a live one
        // evicted only when its group has none), and never-used slots only
        // become used: a racing claim of the same key lies before that
        // boundary, where `copies_with` reads.
        if self.copies_with(p, fp, strict::packed_fp) <= 1 {
            // Ours alone (or not even ours any more): nothing to merge.
            return ours;
        }
        let mut first: Option<usize> = None;
        let mut result = ours;
        for i in 0..PROBE {
            for j in 0..p.groups {
                let slot = p.slot(j, i);
                if strict::packed_fp(self.load(slot)) != fp {
                    continue;
                }
                match first {
                    None => first = Some(slot),
                    Some(winner) => {
                        self.strict_merge(fp, slot, winner, now_sub);
                        if slot == ours {
                            result = winner;
                        }
                    }
                }
            }
        }
        result
    }

    /// Retires `loser` (if it still holds `fp`) and adds its counts into
    /// `winner` (if that still holds `fp`), aligned by sub-window.
    fn strict_merge(&self, fp: u64, loser: usize, winner: usize, now_sub: u64) {
        let moved = loop {
            let value = self.load(loser);
            if strict::packed_fp(value) != fp {
                return;
            }
            let s = self.strict_state(value, now_sub);
            // Same fingerprint and sub-window, no counts.
            if self.cas(loser, value, value & !COUNTS) {
                break s;
            }
        };
        let Some(moved) = moved else { return };
        loop {
            let value = self.load(winner);
            if strict::packed_fp(value) != fp {
                return;
            }
            let s = self.strict_state(value, now_sub).unwrap_or_default();
            let merged = strict::merge(&s, &moved);
            self.raise_newest(merged.index);
            if self.cas(winner, value, strict::pack(fp, &merged)) {
                return;
            }
        }
    }

    /// [`Table::undo`] of a strict zone: one less in the admission's
    /// sub-window, if the slot still holds the key and that sub-window is
    /// still in its span.
    pub(super) fn undo_strict(&self, adm: &Admission) {
        let slot = adm.slot as usize;
        loop {
            let value = self.load(slot);
            if strict::packed_fp(value) != adm.fingerprint {
                return;
            }
            let Some(mut s) = self.strict_state(value, adm.window_index) else {
                return;
            };
            let Some(at) = s.index.checked_sub(adm.window_index) else {
                return;
            };
            let Some(c) = s.counts.get_mut(at as usize) else {
                return;
            };
            if *c == 0 {
                return;
            }
            *c = c.saturating_sub(adm.cost);
            if self.cas(slot, value, strict::pack(adm.fingerprint, &s)) {
                return;
            }
        }
    }

    /// [`Table::peek`] of a strict zone.
    pub(super) fn peek_strict(&self, key: KeyHash, now_ms: u64) -> Snapshot {
        let w = self.window.ms();
        let now_sub = strict::sub_index(now_ms, w);
        let p = self.place(key);
        let s = match self.strict_find(&p, strict_fp(key), now_sub) {
            SFound::Key { value, .. } => self.strict_state(value, now_sub),
            SFound::Absent { .. } => None,
        };
        self.strict_snapshot(s, now_ms)
    }

    /// The snapshot of a strict state (`None`: nothing live) at `now_ms`.
    fn strict_snapshot(&self, s: Option<State>, now_ms: u64) -> Snapshot {
        let now_sub = strict::sub_index(now_ms, self.window.ms());
        let s = s.unwrap_or_default().at(now_sub);
        Snapshot {
            window_index: self.window.index(now_ms),
            current: s.total(),
            previous: 0,
            estimate: s.total(),
            strict: Some(s),
        }
    }

    /// [`Table::clear`] of a strict zone: the key's counts set to 0 in one
    /// CAS (fingerprint and sub-window kept); returns what was cleared.
    pub(super) fn clear_strict(&self, key: KeyHash, now_ms: u64) -> Snapshot {
        let now_sub = strict::sub_index(now_ms, self.window.ms());
        let p = self.place(key);
        loop {
            let SFound::Key { slot, value } = self.strict_find(&p, strict_fp(key), now_sub) else {
                return self.strict_snapshot(None, now_ms);
            };
            let s = self.strict_state(value, now_sub);
            let cleared = value & !(COUNTS | STRICT_LIMITED);
            if value == cleared || self.cas(slot, value, cleared) {
                return self.strict_snapshot(s, now_ms);
            }
        }
    }

    /// Seconds until a request of `key` costing `cost` fits at `now_ms`
    /// under `limit`, with no other traffic (0: now), in either mode
    /// ([`crate::rule::fit`]'s rule; a window when it never fits).
    pub fn retry_after_secs(&self, key: KeyHash, now_ms: u64, limit: u32, cost: u32) -> u32 {
        let w = self.window.ms();
        match (self.wait_ms(key, now_ms, limit, cost), self.strict) {
            // A strict zone's stand-in for "never" is its decision's: a
            // window from the key's newest sub-window.
            (None, true) => {
                let s = self.peek(key, now_ms).strict.unwrap_or_default();
                strict::secs_ceil(strict::retry_after_ms(&s, now_ms, w, 0))
            }
            // A calendar's stand-in for "never": the next period's start.
            (None, false) if self.window.calendar_of().is_some() => {
                window::reset_secs(0, self.window.left_ms(now_ms))
            }
            (wait, _) => fit::retry_after_secs(wait, w),
        }
    }

    /// Wait in ms until a request of `key` costing `cost` fits at `now_ms`
    /// under `limit`, with no other traffic (`Some(0)`: now; `None`:
    /// never), in either mode ([`crate::rule::fit`]'s rule).
    pub fn wait_ms(&self, key: KeyHash, now_ms: u64, limit: u32, cost: u32) -> Option<u64> {
        let snap = self.peek(key, now_ms);
        let w = self.window.ms();
        match snap.strict {
            Some(s) => fit::strict_wait_ms(&s, now_ms, w, limit, cost),
            None if self.window.calendar_of().is_some() => {
                let at = (self.window, snap.window_index);
                fit::calendar_turn(at, snap.current, now_ms, limit, cost, 0)
            }
            None => {
                let counts = Counts {
                    current: snap.current,
                    previous: snap.previous,
                };
                let start = self.window.start_ms(snap.window_index);
                // The one rule, with the lead of a clock behind the key's
                // window (a step back) included.
                fit::turn_at(counts, start, now_ms, w, limit, cost, 0)
            }
        }
    }

    /// Whether a strict slot value is free at `now_ms`'s sub-window.
    pub(super) fn strict_is_free(&self, value: u128, now_sub: u64) -> bool {
        strict::packed_fp(value) == 0 || self.strict_state(value, now_sub).is_none()
    }

    /// [`Table::sweep`] of a strict zone.
    pub(super) fn sweep_strict(&self, now_ms: u64, start: usize, count: usize) -> (usize, usize) {
        let n = self.slots.len();
        let now_sub = strict::sub_index(now_ms, self.window.ms());
        let mut at = start % n;
        let mut cleared = 0;
        for _ in 0..count.min(n) {
            let value = self.load(at);
            if strict::packed_fp(value) != 0
                && !strict::packed_empty(value)
                && self.strict_state(value, now_sub).is_none()
                && self.cas(at, value, value & !COUNTS)
            {
                cleared += 1;
            }
            at = (at + 1) % n;
        }
        (at, cleared)
    }
}

/// The table decision of a strict verdict.
fn strict_decision(v: &strict::Judgement, admission: Option<Admission>, events: Events) -> Answer {
    Answer {
        outcome: if v.admitted {
            Outcome::Admitted
        } else {
            Outcome::Rejected
        },
        remaining: v.remaining,
        retry_after_s: strict::secs_ceil(v.retry_after_ms),
        reset_s: strict::secs_ceil(v.reset_ms),
        estimate: v.total,
        admission,
        events,
    }
}
