//! What runs beside requests: `peek` for metrics, the sweep, the slot
//! count, the shared counters and episodes, and the cluster sync's hooks.

use portable_atomic::Ordering;

use super::layout::{
    fp_of, idx_delta, idx_of, is_ahead, view, Counter, Slot, COUNTS_MASK, COUNT_MAX,
};
use super::place::Found;
use super::{KeyHash, Table, SHARDS};
use crate::rule::window;

/// A read-only view of one key, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The window index the counts belong to (the caller's current window,
    /// or the slot's when the caller's clock is behind).
    pub window_index: u64,
    /// Requests in that window.
    pub current: u32,
    /// Requests in the window before.
    pub previous: u32,
    /// Sliding estimate in requests (rounded down).
    pub estimate: u32,
    /// A strict zone's sub-window counts at the caller's sub-window.
    pub strict: Option<crate::rule::strict::State>,
}

impl Table<'_> {
    /// Visits every slot live in the window containing `now_ms` (its window
    /// index equals the current one): `f(slot_index, fingerprint56,
    /// current_count)`.
    ///
    /// A hook for a cluster sync: it reads each slot once (a full scan, an
    /// instantaneous view of each slot, not of the whole table) and holds
    /// nothing while `f` runs. Slots whose counts are both 0 (free) and
    /// slots of older or later windows are skipped. The fingerprint is the
    /// top 56 bits of the key's [`KeyHash`] under this zone's seed, so it
    /// identifies a key across gateways only if they share the seed; pass it
    /// back to [`Table::add_current`].
    pub fn for_each_current(&self, now_ms: u64, mut f: impl FnMut(u32, u64, u32)) {
        if self.strict {
            // Strict zones are never synchronised (no `redis=`).
            return;
        }
        let now_idx = self.window.index(now_ms);
        for slot in 0..self.slots.len() {
            let s = Slot::decode(self.load(slot));
            // Delta 0 is the current window whatever `ahead` is.
            if s.fp != 0 && !s.is_empty() && s.delta(now_idx, 0) == 0 {
                f(slot as u32, s.fp, s.current);
            }
        }
    }

    /// Adds `n` (may be negative; the result is clamped to `0..=2^20 - 1`)
    /// to the current count of `slot` if it still holds `fingerprint` and
    /// its window index is the one containing `now_ms`; returns false
    /// otherwise (out-of-range slot, another key, another window). One CAS
    /// loop; the previous count and the touch tick are kept.
    ///
    /// A hook for a cluster sync, which adds other gateways' share of a key
    /// into its slot (see [`Table::for_each_current`]).
    pub fn add_current(&self, slot: u32, fingerprint: u64, now_ms: u64, n: i64) -> bool {
        let slot = slot as usize;
        if slot >= self.slots.len() || fingerprint == 0 || self.strict {
            return false;
        }
        let now_idx = self.window.index(now_ms);
        loop {
            let value = self.load(slot);
            let mut s = Slot::decode(value);
            if s.fp != fingerprint || s.delta(now_idx, 0) != 0 {
                return false;
            }
            let c = i64::from(s.current)
                .saturating_add(n)
                .clamp(0, i64::from(COUNT_MAX));
            if c == i64::from(s.current) {
                return true;
            }
            s.current = c as u32;
            if self.cas(slot, value, s.encode()) {
                return true;
            }
        }
    }

    /// Reads a key's counts at `now_ms` without changing anything. An
    /// absent key reads as zero counts in the current window.
    pub fn peek(&self, key: KeyHash, now_ms: u64) -> Snapshot {
        if self.strict {
            return self.peek_strict(key, now_ms);
        }
        let now_idx = self.window.index(now_ms);
        let elapsed = self.window.elapsed_ms(now_ms);
        let fp = key.fingerprint();
        match self.find(key, fp, now_idx) {
            Found::Key { value, .. } => {
                let v = view(Slot::decode(value), now_idx, self.ahead(now_idx), elapsed);
                Snapshot {
                    window_index: v.index,
                    current: v.counts.current,
                    previous: v.counts.previous,
                    estimate: window::estimate(v.counts, v.elapsed, self.window.ms()),
                    strict: None,
                }
            }
            Found::Absent { .. } => Snapshot {
                window_index: now_idx,
                ..Snapshot::default()
            },
        }
    }

    /// Clears a key's counts, current and previous window (an operator's
    /// reset): the key's next request is judged as a new client's. Returns
    /// what was cleared, as [`Table::peek`] would have read it at `now_ms`.
    /// The slot keeps its fingerprint and window index (as a sweep leaves
    /// it); one CAS, redone on a lost race. An absent key clears nothing.
    pub fn clear(&self, key: KeyHash, now_ms: u64) -> Snapshot {
        if self.strict {
            return self.clear_strict(key, now_ms);
        }
        let now_idx = self.window.index(now_ms);
        let elapsed = self.window.elapsed_ms(now_ms);
        let fp = key.fingerprint();
        loop {
            let Found::Key { slot, value } = self.find(key, fp, now_idx) else {
                return Snapshot {
                    window_index: now_idx,
                    ..Snapshot::default()
                };
            };
            let v = view(Slot::decode(value), now_idx, self.ahead(now_idx), elapsed);
            if value as u64 & COUNTS_MASK == 0
                || self.cas(slot, value, value & !u128::from(COUNTS_MASK))
            {
                return Snapshot {
                    window_index: v.index,
                    current: v.counts.current,
                    previous: v.counts.previous,
                    estimate: window::estimate(v.counts, v.elapsed, self.window.ms()),
                    strict: None,
                };
            }
        }
    }

    /// Adds `n` events of kind `c` to shard `shard % SHARDS`.
    pub fn add(&self, shard: usize, c: Counter, n: u64) {
        self.header.shards[shard % SHARDS].counters[c.at()].fetch_add(n, Ordering::Relaxed);
    }

    /// The number of events of kind `c`, summed over all shards (wrapping).
    pub fn counter(&self, c: Counter) -> u64 {
        self.header.shards.iter().fold(0u64, |acc, s| {
            acc.wrapping_add(s.counters[c.at()].load(Ordering::Relaxed))
        })
    }

    /// Clears the counts of the stale slots (two windows or more old at
    /// `now_ms`, and not ahead of it) among `count` slots from `start`,
    /// wrapping around the end of the table. Returns the slot to start from
    /// next time and the number of slots cleared.
    ///
    /// A stale slot already reads as empty, so this changes no decision at
    /// `now_ms` or later. (A clock stepped back by more than a window
    /// afterwards no longer sees the counts cleared, as when another key
    /// reuses an idle slot; see [Concurrency](super#concurrency).) The sweep
    /// is there because a slot keeps its window index modulo 2^24: one
    /// left untouched for a multiple of 2^24 windows (194 days at
    /// `window=1s`) would read as current again, old counts and all. A
    /// caller that sweeps the whole table at least once every 2^24 - 3
    /// windows leaves no slot that old with counts. A cleared slot keeps
    /// its fingerprint (a used slot never becomes never-used, see
    /// [Placement](super#placement)) and its window index; one CAS per
    /// cleared slot, and a slot changed meanwhile is left alone.
    pub fn sweep(&self, now_ms: u64, start: usize, count: usize) -> (usize, usize) {
        if self.strict {
            return self.sweep_strict(now_ms, start, count);
        }
        let n = self.slots.len();
        let now_idx = self.window.index(now_ms);
        let mut at = start % n;
        let mut cleared = 0;
        for _ in 0..count.min(n) {
            let value = self.load(at);
            let d = idx_delta(now_idx, idx_of(value));
            // `ahead` is read after the slot (see `Table::ahead`), and only
            // for a slot that would be cleared.
            if fp_of(value) != 0
                && value as u64 & COUNTS_MASK != 0
                && d >= 2
                && !is_ahead(d, self.ahead(now_idx))
                && self.cas(at, value, value & !u128::from(COUNTS_MASK))
            {
                cleared += 1;
            }
            at += 1;
            if at == n {
                at = 0;
            }
        }
        (at, cleared)
    }

    /// Counts the slots holding counts of the current or previous window at
    /// `now_ms` (a full scan; an estimate under concurrent updates).
    pub fn slots_used(&self, now_ms: u64) -> u64 {
        self.slots_used_in(now_ms, 0, self.slots.len()).1
    }

    /// Counts, as `slots_used` does, the slots `start..start + count`
    /// (cut at the end of the table), for a count spread over several
    /// calls. Returns the next slot to visit (0 after the last slot) and
    /// the count.
    pub fn slots_used_in(&self, now_ms: u64, start: usize, count: usize) -> (usize, u64) {
        let n = self.slots.len();
        let start = start % n;
        let end = start.saturating_add(count).min(n);
        let next = if end == n { 0 } else { end };
        if self.strict {
            let now_sub = crate::rule::strict::sub_index(now_ms, self.window.ms());
            let used = self.slots[start..end]
                .iter()
                .filter(|a| !self.strict_is_free(self.ops.load(a), now_sub))
                .count() as u64;
            return (next, used);
        }
        let now_idx = self.window.index(now_ms);
        // Read once, before the scan: a slot counted in a newer window
        // meanwhile may be missed, as any update during the scan may.
        let ahead = self.ahead(now_idx);
        let used = self.slots[start..end]
            .iter()
            .filter(|a| {
                let s = Slot::decode(self.ops.load(a));
                !s.is_free(now_idx, ahead)
            })
            .count() as u64;
        (next, used)
    }

    /// Episode detection for logging: records `now_ms` as the latest event
    /// of kind `c` and returns true if this event starts a new episode, i.e.
    /// no event of this kind was recorded in the `quiet_ms` ms before it (or
    /// ever). Lock-free: one atomic `fetch_max`, so the latest time never
    /// moves backwards.
    pub fn note_episode(&self, c: Counter, now_ms: u64, quiet_ms: u64) -> bool {
        // Stored as now + 1 so that 0 means "never".
        let stamp = now_ms.saturating_add(1);
        let prev = self.header.last_event_ms[c.at()].fetch_max(stamp, Ordering::Relaxed);
        prev == 0 || now_ms.saturating_sub(prev - 1) > quiet_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::window::MAX_LIMIT;
    use crate::table::testing::*;
    use crate::table::*;

    #[test]
    fn a_slot_idle_for_2_pow_24_windows_reads_as_current_unless_swept() {
        // A 1 s window: a client that used its limit and comes back exactly
        // 2^24 windows (194 days) later lands on its old window index mod
        // 2^24. Unswept, its old counts are read as this window's.
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, 1_000);
        let h = t.hash_key(b"k");
        use_up(&t, h, T0, 3);
        let alias = T0 + (1 << 24) * 1_000;
        assert_eq!(
            t.acquire(h, alias, 3, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );

        // Swept once while stale (any time from 2 windows on), it is a new
        // client at the alias.
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, 1_000);
        use_up(&t, h, T0, 3);
        let cap = t.capacity();
        assert_eq!(t.sweep(T0 + 2_000, 0, cap), (0, 1));
        assert_eq!(t.peek(h, T0).current, 0);
        let d = t.acquire(h, alias, 3, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert_eq!(d.remaining, 2);
    }

    #[test]
    fn sweep_leaves_live_and_ahead_slots_alone() {
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let cap = t.capacity();
        let (cur, prev, stale, ahead) = (
            t.hash_key(b"current"),
            t.hash_key(b"previous"),
            t.hash_key(b"stale"),
            t.hash_key(b"ahead"),
        );
        // At the start of a window, the previous count weighs in full.
        let now = T0 + 10 * MIN;
        use_up(&t, cur, now, 2);
        use_up(&t, prev, now - MIN, 2);
        use_up(&t, stale, now - 2 * MIN, 2);
        // Counted by a worker whose clock is 3 windows ahead of `now`.
        use_up(&t, ahead, now + 3 * MIN, 2);
        let before = |h| t.peek(h, now);
        let (c0, p0) = (before(cur), before(prev));
        assert_eq!(t.sweep(now, 0, cap), (0, 1));
        assert_eq!(before(cur), c0);
        assert_eq!(before(prev), p0);
        assert_eq!(p0.previous, 2);
        assert_eq!(t.peek(stale, now - 2 * MIN).current, 0);
        assert_eq!(t.peek(ahead, now + 3 * MIN).current, 2);
        // Nothing left to clear; the live keys decide as before.
        assert_eq!(t.sweep(now, 0, cap).1, 0);
        assert_eq!(
            t.acquire(cur, now, 2, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
        assert_eq!(
            t.acquire(prev, now, 2, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
    }

    #[test]
    fn sweep_wraps_and_visits_count_slots() {
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let cap = t.capacity();
        let keys: Vec<KeyHash> = (0u32..200).map(|i| t.hash_key(&i.to_le_bytes())).collect();
        for &h in &keys {
            t.acquire(h, T0, 5, FailPolicy::Open, 0);
        }
        let later = T0 + 5 * MIN;
        // Chunks of 1000 from near the end: each call moves the cursor by
        // exactly the chunk, wrapping; one full lap clears every key.
        let mut at = cap - 10;
        let mut cleared = 0;
        let mut visited = 0;
        while visited < cap {
            let (next, c) = t.sweep(later, at, 1000);
            assert_eq!(next, (at + 1000) % cap);
            at = next;
            cleared += c;
            visited += 1000;
        }
        assert_eq!(cleared, keys.len());
        assert_eq!(t.slots_used(T0), 0);
        // A count larger than the table visits each slot once.
        assert_eq!(t.sweep(later, 7, 10 * cap), (7, 0));
        assert_eq!(t.sweep(later, cap + 7, 0), (7, 0));
    }

    #[test]
    fn counters_and_episodes() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            t.add(i, c, 1);
            t.add(i + SHARDS, c, i as u64);
        }
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            assert_eq!(t.counter(c), 1 + i as u64, "{}", c.name());
        }
        assert_eq!(Counter::EvictLive.name(), "evict_live");
        assert!(t.note_episode(Counter::EvictLive, 0, 1_000));
        assert!(!t.note_episode(Counter::EvictLive, 500, 1_000));
        assert!(!t.note_episode(Counter::EvictLive, 1_500, 1_000));
        assert!(t.note_episode(Counter::EvictLive, 2_501, 1_000));
        assert!(t.note_episode(Counter::FailClosed, 2_501, 1_000));
        // An older time does not start an episode nor move the stamp back.
        assert!(!t.note_episode(Counter::EvictLive, 100, 1_000));
        assert!(!t.note_episode(Counter::EvictLive, 3_000, 1_000));
    }

    #[test]
    fn sync_hooks_visit_and_add_current() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let (a, b, c) = (t.hash_key(b"a"), t.hash_key(b"b"), t.hash_key(b"c"));
        for _ in 0..3 {
            t.acquire(a, T0 + 1_000, 100, FailPolicy::Open, 0);
        }
        t.acquire(b, T0 + 2_000, 100, FailPolicy::Open, 0);
        // c only in the previous window: not visited in the current one.
        t.acquire(c, T0 - 1_000, 100, FailPolicy::Open, 0);
        let mut seen = vec![];
        t.for_each_current(T0 + 5_000, |slot, fp, n| seen.push((slot, fp, n)));
        seen.sort_by_key(|&(_, _, n)| n);
        assert_eq!(seen.len(), 2);
        assert_eq!(
            (seen[0].1, seen[0].2, seen[1].1, seen[1].2),
            (b.fingerprint(), 1, a.fingerprint(), 3)
        );
        let (sa, fa) = (seen[1].0, seen[1].1);
        // Another gateway's share: +40 on a, then the limit bites.
        assert!(t.add_current(sa, fa, T0 + 6_000, 40));
        assert_eq!(t.peek(a, T0 + 6_000).current, 43);
        assert!(t.add_current(sa, fa, T0 + 6_000, -50));
        assert_eq!(t.peek(a, T0 + 6_000).current, 0);
        assert!(t.add_current(sa, fa, T0 + 6_000, i64::MAX));
        assert_eq!(t.peek(a, T0 + 6_000).current, COUNT_MAX);
        assert_eq!(
            t.acquire(a, T0 + 6_000, MAX_LIMIT, FailPolicy::Open, 0)
                .outcome,
            Outcome::Rejected
        );
        assert!(t.add_current(sa, fa, T0 + 6_000, i64::MIN));
        assert_eq!(t.peek(a, T0 + 6_000).current, 0);
        // Wrong fingerprint, wrong window, out of range: nothing changes.
        assert!(!t.add_current(sa, fa ^ 1, T0 + 6_000, 5));
        assert!(!t.add_current(sa, fa, T0 + MIN, 5));
        assert!(!t.add_current(sa, fa, T0 - 1, 5));
        assert!(!t.add_current(u32::MAX, fa, T0 + 6_000, 5));
        assert!(!t.add_current(sa, 0, T0 + 6_000, 5));
        assert_eq!(t.peek(b, T0 + 6_000).current, 1);
        // Nothing is current in a later window.
        let mut n = 0;
        t.for_each_current(T0 + 2 * MIN, |_, _, _| n += 1);
        assert_eq!(n, 0);
    }
}
