//! Carrying the live clients of a table into a resized one (an nginx
//! reload that changes a zone's size).
//!
//! A slot keeps only the 56-bit fingerprint (`hash >> 8`), not the key, so
//! the new table must use the old table's seed and window, and a client's
//! place is worked out from its fingerprint: the placement reads the two
//! 32-bit halves of the hash, and only the lowest 8 bits are unknown. The
//! second group (the high half) is exact; the first group and its home
//! offset are exact unless those 8 bits move them (about one key in
//! `2^32 / (256 * groups)`): then the client goes to its second group
//! only, where a lookup finds it too. A client whose place cannot be told
//! (its two groups may coincide) is dropped, and counted as dropped.

use super::layout::{fp_of, Counter, Slot};
use super::place::Place;
use super::{KeyHash, Table, PROBE};

/// What [`Table::carry_from`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Live clients copied with their counts.
    pub carried: usize,
    /// Live clients left behind: no room in their groups (the least
    /// recently seen first), or no certain place.
    pub dropped: usize,
}

impl Table<'_> {
    /// Copies every live client of `old` (counts of the current or previous
    /// window at `now_ms`) into this table, most recently seen first, so
    /// that when it is smaller the ones that do not fit are the least
    /// recently seen; also carries the event counters and the newest
    /// window. This table must be fresh (just formatted, not yet shared),
    /// with `old`'s seed, window and mode; strict tables are not carried
    /// (None).
    pub fn carry_from(&self, old: &Table<'_>, now_ms: u64) -> Option<Carried> {
        if self.strict || old.strict || self.seed != old.seed || self.window != old.window {
            return None;
        }
        let now_idx = old.window.index(now_ms);
        let ahead = old.ahead(now_idx);
        let mut live: Vec<(i64, u8, u128)> = (0..old.slots.len())
            .map(|i| old.load(i))
            .filter_map(|v| {
                let s = Slot::decode(v);
                (s.fp != 0 && !s.is_free(now_idx, ahead))
                    .then(|| (s.delta(now_idx, ahead), s.tick, v))
            })
            .collect();
        // Newest window first, then the latest touch within it.
        live.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        self.raise_newest(old.header.newest.load(portable_atomic::Ordering::SeqCst));
        let mut done = Carried::default();
        for &(_, _, v) in &live {
            if self.put(v) {
                done.carried += 1;
            } else {
                done.dropped += 1;
            }
        }
        for c in Counter::ALL {
            self.add(0, c, old.counter(c));
        }
        Some(done)
    }

    /// Puts slot value `v` at the first never-used slot of its sequence in
    /// the emptier of its groups (the lookup's boundary, as an insert
    /// would). False when there is no room or no certain place.
    pub(super) fn put(&self, v: u128) -> bool {
        let fp = fp_of(v);
        let (lo, hi) = (
            self.place(KeyHash(fp << 8)),
            self.place(KeyHash(fp << 8 | 0xff)),
        );
        let groups: &[usize] = if same(&lo, &hi) {
            &[0, 1][..lo.groups]
        } else if lo.groups == 2
            && hi.groups == 2
            && lo.base[1] == hi.base[1]
            && lo.home[1] == hi.home[1]
        {
            &[1]
        } else {
            return false;
        };
        let mut best: Option<(usize, usize)> = None; // (used in group, slot)
        for &j in groups {
            let mut first_free = None;
            let mut used = 0;
            for i in 0..PROBE {
                let s = lo.slot(j, i);
                let cur = self.load(s);
                if cur == 0 {
                    first_free.get_or_insert(s);
                } else if fp_of(cur) == fp {
                    return false;
                } else {
                    used += 1;
                }
            }
            if let Some(s) = first_free {
                if best.is_none_or(|(u, _)| used < u) {
                    best = Some((used, s));
                }
            }
        }
        best.is_some_and(|(_, s)| self.cas(s, 0, v))
    }
}

fn same(a: &Place, b: &Place) -> bool {
    a.base == b.base && a.home == b.home && a.groups == b.groups
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::{hash_with_seed, FailPolicy, Outcome};

    const W: u64 = 60_000;
    const NOW: u64 = T0 + 1_000;

    /// A table of `bytes` with `seed`.
    fn with_seed(r: &mut Region, seed: [u64; 2]) -> Table<'_> {
        // SAFETY: the region is ours alone.
        unsafe { Table::init(r.ptr(), r.len(), win(W), seed) }.unwrap()
    }

    fn key(i: usize) -> Vec<u8> {
        format!("client-{i}").into_bytes()
    }

    /// `n` clients with `i % 3 + 1` requests each, the later ones later.
    fn load(t: &Table<'_>, n: usize) {
        for i in 0..n {
            let h = t.hash_key(&key(i));
            for _ in 0..(i % 3 + 1) {
                let d = t.acquire(h, NOW + i as u64, 100, FailPolicy::Open, 0);
                assert_eq!(d.outcome, Outcome::Admitted);
            }
        }
    }

    #[test]
    fn growing_carries_every_client_with_its_counts() {
        let seed = [7, 9];
        let mut a = Region::new(small_bytes(4096));
        let old = with_seed(&mut a, seed);
        load(&old, 2000);
        let mut b = Region::new(small_bytes(8192));
        let new = with_seed(&mut b, seed);
        let c = new.carry_from(&old, NOW + 5_000).unwrap();
        assert_eq!(
            c,
            Carried {
                carried: 2000,
                dropped: 0
            }
        );
        for i in 0..2000 {
            let s = new.peek(hash_with_seed(seed, &key(i)), NOW + 5_000);
            assert_eq!(s.current, (i % 3 + 1) as u32, "client {i}");
        }
        assert_eq!(new.counter(Counter::Passed), old.counter(Counter::Passed));
        assert_eq!(new.slots_used(NOW + 5_000), 2000);
    }

    #[test]
    fn shrinking_keeps_the_most_recently_seen() {
        let seed = [3, 4];
        let mut a = Region::new(small_bytes(8192));
        let old = with_seed(&mut a, seed);
        // 3000 clients, then the last 600 seen again later in the window.
        load(&old, 3000);
        for i in 2400..3000 {
            old.acquire(
                old.hash_key(&key(i)),
                NOW + 30_000,
                100,
                FailPolicy::Open,
                0,
            );
        }
        let mut b = Region::new(small_bytes(1024));
        let new = with_seed(&mut b, seed);
        let c = new.carry_from(&old, NOW + 31_000).unwrap();
        assert_eq!(c.carried + c.dropped, 3000);
        assert!(c.carried <= 1024 && c.carried >= 700, "{c:?}");
        // Every recent client made it (they were placed first).
        for i in 2400..3000 {
            let s = new.peek(hash_with_seed(seed, &key(i)), NOW + 31_000);
            assert_eq!(s.current, (i % 3 + 2) as u32, "client {i}");
        }
        assert_eq!(new.slots_used(NOW + 31_000), c.carried as u64);
    }

    #[test]
    fn only_live_clients_and_matching_tables() {
        let seed = [1, 2];
        let mut a = Region::new(small_bytes(512));
        let old = with_seed(&mut a, seed);
        load(&old, 100);
        let mut b = Region::new(small_bytes(1024));
        let new = with_seed(&mut b, seed);
        // Two windows later every client is idle: nothing to carry.
        assert_eq!(
            new.carry_from(&old, NOW + 2 * W).unwrap(),
            Carried::default()
        );
        let mut c = Region::new(small_bytes(1024));
        let other = with_seed(&mut c, [5, 6]);
        assert!(other.carry_from(&old, NOW).is_none(), "another seed");
    }
}
