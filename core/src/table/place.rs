//! Where a key lives: its two candidate groups and the home offset in each
//! (see [Placement](super#placement)), the lookup of the hit path and the
//! zone's newest window. The survey of the miss path and the eviction
//! victim are in survey.rs, the merge of two slots that racing inserts
//! claimed for one key in dedup.rs.

use portable_atomic::{AtomicU128, Ordering};

use super::layout::{fp_of, Counter, IDX_HALF, TICK_MAX};
use super::{KeyHash, Table, CHOICES, PROBE};

/// A key's candidate groups (see [`Table::place`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    /// First slot of each group.
    pub(super) base: [usize; CHOICES],
    /// Home offset of the key inside each group, `0..PROBE`.
    pub(super) home: [usize; CHOICES],
    /// 2, or 1 when the table has a single group.
    pub(super) groups: usize,
}

impl Place {
    /// The `i`-th slot of the key's sequence in group `j`: groups are probed
    /// linearly from the home offset, wrapping around inside the group.
    /// The probe order of the key is `(0, 0), (1, 0), (0, 1), (1, 1), ...`
    /// (`(j, i)`): both groups are read side by side, home slots first.
    #[inline(always)]
    pub(super) fn slot(&self, j: usize, i: usize) -> usize {
        self.base[j] + self.at(j, i)
    }

    /// The offset inside group `j` of the key's `i`-th slot there.
    #[inline(always)]
    pub(super) fn at(&self, j: usize, i: usize) -> usize {
        (self.home[j] + i) % PROBE
    }
}

/// Which group a tie or a free slot is found in, with its value.
#[derive(Clone, Copy)]
pub(super) struct Candidate {
    pub(super) slot: usize,
    pub(super) value: u128,
}

pub(super) enum Found {
    Key {
        slot: usize,
        value: u128,
    },
    Absent {
        free: Option<Candidate>,
        free_is_used: bool,
        victim: Option<Candidate>,
    },
}

impl Table<'_> {
    /// Where the key may live: its candidate groups and the home offset
    /// inside each.
    ///
    /// The group index is `(h32 * groups) >> 32` ("fast range") of one 32-bit
    /// half of the hash; the home offset is the top 4 bits of the fractional
    /// part `(h32 * groups) mod 2^32`, which are independent of the group
    /// index. The second half of the hash gives the second group (moved to
    /// the next group if both are equal and the table has more than one).
    #[inline]
    pub(super) fn place(&self, key: KeyHash) -> Place {
        let g = self.groups;
        let xa = (key.0 & 0xffff_ffff) * g;
        let xb = (key.0 >> 32) * g;
        let a = xa >> 32;
        let mut b = xb >> 32;
        if b == a && g > 1 {
            b = (a + 1) % g;
        }
        Place {
            base: [a as usize * PROBE, b as usize * PROBE],
            home: [(xa >> 28) as usize % PROBE, (xb >> 28) as usize % PROBE],
            groups: if a == b { 1 } else { CHOICES },
        }
    }

    /// `self.place(key).slot(0, 0)`, the key's home slot in its first group,
    /// computed alone (the hot path's first read).
    #[inline(always)]
    pub(super) fn home_slot(&self, key: KeyHash) -> usize {
        let xa = (key.0 & 0xffff_ffff) * self.groups;
        (xa >> 32) as usize * PROBE + (xa >> 28) as usize % PROBE
    }

    /// The first slot of each candidate group of `key` (for tests that need
    /// keys that share no group; not part of the stable API).
    #[doc(hidden)]
    pub fn candidate_groups(&self, key: KeyHash) -> [usize; CHOICES] {
        self.place(key).base
    }

    /// Every slot of the key's groups in probe order (see [`Place::slot`]).
    #[cfg(test)]
    pub(super) fn scan_order(&self, key: KeyHash) -> impl Iterator<Item = usize> {
        let p = self.place(key);
        (0..PROBE).flat_map(move |i| (0..p.groups).map(move |j| p.slot(j, i)))
    }

    #[inline(always)]
    pub(super) fn load(&self, slot: usize) -> u128 {
        self.ops.load(&self.slots[slot])
    }

    #[inline(always)]
    pub(super) fn cas(&self, slot: usize, old: u128, new: u128) -> bool {
        self.ops.cas(&self.slots[slot], old, new)
    }

    /// The hit path: the first slot holding `fp` in probe order, reading
    /// as few slots as possible. A group's sequence ends at its first
    /// never-used slot (a key is always placed at or before the first
    /// never-used slot of its sequence, and used slots never become
    /// never-used again).
    #[inline(always)]
    pub(super) fn lookup(&self, p: &Place, fp: u64) -> Option<(usize, u128)> {
        self.lookup_from(p, fp, [true, p.groups == CHOICES], 0)
    }

    /// [`Table::lookup`] after the caller read both home slots (`homes`,
    /// the second one 0 for a key with one group) and found other keys
    /// there: the rest of the sequences, none when both home slots were
    /// never used (a new key in a zone not full, without a call).
    #[inline(always)]
    pub(super) fn lookup_past_homes(
        &self,
        p: &Place,
        fp: u64,
        homes: &[u128; CHOICES],
    ) -> Option<(usize, u128)> {
        let open = [
            fp_of(homes[0]) != 0,
            p.groups == CHOICES && fp_of(homes[1]) != 0,
        ];
        if open == [false, false] {
            return None;
        }
        self.lookup_from(p, fp, open, 1)
    }

    /// [`Table::lookup`] from position `from` of each `open` group's
    /// sequence.
    #[inline(never)]
    fn lookup_from(
        &self,
        p: &Place,
        fp: u64,
        open: [bool; CHOICES],
        from: usize,
    ) -> Option<(usize, u128)> {
        self.lookup_with(p, fp, open, from, fp_of)
    }

    /// [`Table::lookup_from`] for the fingerprints `fp_of` reads out of a
    /// slot value (an estimate or a strict slot's; 0 for a never-used slot
    /// in both).
    #[inline(always)]
    pub(super) fn lookup_with(
        &self,
        p: &Place,
        fp: u64,
        mut open: [bool; CHOICES],
        from: usize,
        fp_of: impl Fn(u128) -> u64,
    ) -> Option<(usize, u128)> {
        let groups = [self.group(p.base[0]), self.group(p.base[1])];
        for i in from..PROBE {
            for j in 0..CHOICES {
                if !open[j] {
                    continue;
                }
                let at = p.at(j, i);
                let value = self.ops.load(&groups[j][at]);
                let f = fp_of(value);
                if f == fp {
                    return Some((p.base[j] + at, value));
                }
                if f == 0 {
                    open[j] = false;
                }
            }
            if open == [false, false] {
                break;
            }
        }
        None
    }

    /// Looks the key up; if absent, also returns the slot a new key should
    /// take and the eviction victim.
    #[inline]
    pub(super) fn find(&self, key: KeyHash, fp: u64, now_idx: u64) -> Found {
        let p = self.place(key);
        match self.lookup(&p, fp) {
            Some((slot, value)) => Found::Key { slot, value },
            None => self.survey(&p, fp, now_idx),
        }
    }

    /// The `PROBE` slots of the group starting at slot `base`.
    #[inline(always)]
    pub(super) fn group(&self, base: usize) -> &[AtomicU128; PROBE] {
        self.slots[base..base + PROBE]
            .try_into()
            .expect("a group is PROBE slots")
    }

    /// The touch tick of a request `elapsed` ms into its window: `elapsed >>
    /// tick_shift`, between 64 and 128 steps per window (no division).
    #[inline]
    pub(super) fn tick(&self, elapsed: u64) -> u8 {
        (elapsed >> self.tick_shift).min(u64::from(TICK_MAX)) as u8
    }

    pub(super) fn count(&self, shard: usize, c: Counter) {
        self.add(shard, c, 1);
    }

    /// How many windows a slot can be ahead of `now_idx`: the zone's newest
    /// window minus `now_idx` (0 unless some clock stepped back), at most
    /// 2^23. Read it *after* loading the slots it judges: a slot written with
    /// a newer window was preceded by [`Table::raise_newest`], so the load
    /// that saw the slot makes this one see the raise.
    #[inline]
    pub(super) fn ahead(&self, now_idx: u64) -> u64 {
        self.header
            .newest
            .load(Ordering::SeqCst)
            .saturating_sub(now_idx)
            .min(IDX_HALF)
    }

    /// Makes the zone's newest window at least `now_idx`; called before a
    /// slot is written with window `now_idx` by a slot that held another
    /// one (a slot already in `now_idx` needs nothing). One load when it
    /// already is.
    #[inline]
    pub(super) fn raise_newest(&self, now_idx: u64) {
        let newest = &self.header.newest;
        if newest.load(Ordering::Relaxed) < now_idx {
            newest.fetch_max(now_idx, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
#[path = "place_tests.rs"]
mod tests;
