//! Where a key lives: its two candidate groups and the home offset in each
//! (see [Placement](super#placement)), the lookup of the hit path, the
//! survey of the miss path and the eviction victim, the zone's newest
//! window, and the merge of two slots that racing inserts claimed for one
//! key.

use core::mem::MaybeUninit;

use portable_atomic::{AtomicU128, Ordering};

use super::layout::{
    fp_of, idx_delta, idx_of, is_free_value, is_limited, prefetch, tick_of, view, Counter, Slot,
    COUNTS_MASK, COUNT_BITS, COUNT_MASK, COUNT_MAX, IDX_HALF, IDX_MASK, SLOTS_PER_LINE, TICK_MAX,
};
use super::scan;
use super::{KeyHash, Table, CHOICES, PROBE};
use crate::rule::window::Counts;

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

/// The eviction rule of both modes (issue 36): the rank of a live
/// candidate, smaller is evicted first, i.e. the candidate whose loss
/// admits least. A client not `limited` (refused since its last admission:
/// at or over its limit) before any limited one, then the lowest `count`
/// (requests it holds as seen from now, 23 bits kept), then the oldest
/// (`age`: larger is older, 40 bits kept).
#[inline(always)]
pub(super) fn evict_rank(limited: bool, count: u32, age: u64) -> u64 {
    const AGE_MAX: u64 = (1 << 40) - 1;
    (u64::from(limited) << 63)
        | (u64::from(count.min((1 << 23) - 1)) << 40)
        | (AGE_MAX - age.min(AGE_MAX))
}

/// The eviction victim so far: the candidate of smallest [`evict_rank`],
/// the first offered on a tie.
#[derive(Default)]
pub(super) struct Victim(Option<(u64, Candidate)>);

impl Victim {
    /// Considers candidate `c` of rank `rank`.
    #[inline(always)]
    pub(super) fn offer(&mut self, rank: u64, c: Candidate) {
        if self.0.is_none_or(|(r, _)| rank < r) {
            self.0 = Some((rank, c));
        }
    }

    /// The victim, `None` when no candidate was offered.
    pub(super) fn take(self) -> Option<Candidate> {
        self.0.map(|(_, c)| c)
    }
}

/// Age of a live slot value as one integer, larger is older: the signed
/// window delta (biased to be non-negative), then `TICK_MAX - tick`
/// (32 bits in all).
#[inline(always)]
fn age(value: u128, now_idx: u64, ahead: u64) -> u64 {
    let d = idx_delta(now_idx, idx_of(value));
    // Adding `ahead` mod 2^24 maps the slots ahead of now,
    // [2^24 - ahead, 2^24), onto [0, ahead) (the youngest) and every other
    // delta d onto d + ahead, keeping the order.
    (((d + ahead) & IDX_MASK) << 8) | u64::from(TICK_MAX - tick_of(value))
}

/// The requests a live slot value holds as seen from window `now_idx`:
/// both counts in its own window, its current count once that window is
/// the previous one (at most `2 * COUNT_MAX`, 21 bits).
#[inline(always)]
fn count_now(value: u128, now_idx: u64) -> u32 {
    let lo = value as u64;
    let current = (lo & COUNT_MASK) as u32;
    let previous = ((lo & COUNTS_MASK) >> COUNT_BITS) as u32;
    if idx_delta(now_idx, idx_of(value)) == 1 {
        current
    } else {
        current + previous
    }
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

    /// Whether a new key may take a free home slot without the survey of
    /// its groups (the zone is less than 3/8 full, as this process's
    /// estimate has it), after adding the key's home slots to the
    /// estimate: `free[j]`, home slot `j` is free (never used or idle).
    ///
    /// A key's home slot is a uniformly random slot of the zone, so the
    /// share of live home slots new keys find is the zone's live fraction:
    /// the estimate is its moving average, each new key weighing
    /// 2^-[`FILL_SHIFT`] (about the last 256 new keys; its error is about
    /// 2%). Below a third or so, where a new key goes does not change how
    /// many keys the zone holds before its first eviction; from there on,
    /// the group with fewer live slots matters. Measured, first live
    /// eviction in a 1 MiB zone, 32 seeds: 57,162 keys on average with the
    /// survey for every key, 57,174 with home slots first below 3/8, and
    /// 56,831 below 1/2.
    #[inline(always)]
    pub(super) fn note_homes(&self, p: &Place, free: [bool; CHOICES]) -> bool {
        let live = u32::from(!free[0]) + u32::from(!free[p.groups - 1]);
        let f = self.fill.load(Ordering::Relaxed);
        // `live` of 2 is 2^16, the whole zone; a lost update between two
        // threads of one process only drops a sample.
        let sample = live << 15;
        let next = f - (f >> FILL_SHIFT) + (sample >> FILL_SHIFT);
        self.fill.store(next, Ordering::Relaxed);
        f < FILL_SURVEY
    }

    /// Sets this process's estimate of the zone's live fraction (2^16ths),
    /// for the tests of the survey's placement in a small table.
    #[cfg(test)]
    pub(super) fn assume_fill(&self, fill: u32) {
        self.fill.store(fill, Ordering::Relaxed);
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

    /// The miss path: reads every slot of both groups, counting each
    /// group's live slots and noting its first free slot in the key's
    /// sequence, and the least recently active live slot. A key inserted
    /// meanwhile is still found where [`Table::lookup`] would find it (the
    /// first match in probe order, at or before its sequence's first
    /// never-used slot). Never-used slots are not a suffix of the group
    /// (keys start at different home offsets), so the whole group is read.
    #[cold]
    #[inline(never)]
    pub(super) fn survey(&self, p: &Place, fp: u64, now_idx: u64) -> Found {
        let mut live = [0usize; CHOICES];
        let mut free: [Option<(Candidate, bool)>; CHOICES] = [None; CHOICES];
        if self.prefetch {
            // Every line of both groups is read below: ask for all of them
            // at once, so that a table larger than the caches pays about
            // one memory latency here rather than one per line.
            for j in 0..p.groups {
                for line in self.group(p.base[j]).iter().step_by(SLOTS_PER_LINE) {
                    prefetch(line);
                }
            }
        }
        // The key, if a racing insert placed it meanwhile: (probe order,
        // slot, value) of its first slot in the probe order of both groups,
        // (0, 0), (1, 0), (0, 1), ..., as `lookup` would find it.
        let mut hit: Option<(usize, Found)> = None;
        // Loaded into uninitialised buffers (nothing zeroed first); a group
        // the key does not have reads as never-used slots.
        let mut bufs = [[MaybeUninit::uninit(); PROBE]; CHOICES];
        let mut loaded: [&[u128; PROBE]; CHOICES] = [&scan::NO_GROUP; CHOICES];
        for ((buf, view), &base) in bufs.iter_mut().zip(&mut loaded).zip(&p.base).take(p.groups) {
            *view = scan::load(self.ops, self.group(base), buf);
        }
        // After the loads (see `ahead`).
        let ahead = self.ahead(now_idx);
        for j in 0..p.groups {
            let values = loaded[j];
            let m = scan::classify(self.ops, values, fp, now_idx, ahead);
            // Bit i of a rotated mask: position i of the key's probe order.
            let home = p.home[j] as u32;
            let (empty, idle) = (m.empty.rotate_right(home), m.idle.rotate_right(home));
            // A key is never placed past a never-used slot of its sequence.
            let i = m.hit.rotate_right(home).trailing_zeros() as usize;
            if i < empty.trailing_zeros() as usize {
                let order = i * CHOICES + j;
                if hit.as_ref().is_none_or(|(o, _)| order < *o) {
                    let at = p.at(j, i);
                    let (slot, value) = (p.base[j] + at, values[at]);
                    hit = Some((order, Found::Key { slot, value }));
                }
                continue;
            }
            live[j] = (!(m.empty | m.idle)).count_ones() as usize;
            // The first free slot in probe order: never used, or idle.
            let i = (empty | idle).trailing_zeros() as usize;
            if i < PROBE {
                let at = p.at(j, i);
                let cand = Candidate {
                    slot: p.base[j] + at,
                    value: values[at],
                };
                free[j] = Some((cand, idle & (1 << i) != 0));
            }
        }
        if let Some((_, found)) = hit {
            return found;
        }
        let best = fewest_live(p, &live, &free);
        // Only a full pair of groups needs a victim (rare): look for it
        // then, among the values loaded above.
        let victim = if best.is_none() {
            self.victim(p, &loaded, now_idx, ahead)
        } else {
            None
        };
        Found::Absent {
            free: best.map(|(c, _)| c),
            free_is_used: best.is_some_and(|(_, u)| u),
            victim,
        }
    }

    /// The live slot of the key's groups whose loss admits least
    /// ([`evict_rank`]), from the slot values the survey loaded (O(1): the
    /// `2 * PROBE` candidates); age is the window, then the touch tick.
    #[cold]
    pub(super) fn victim(
        &self,
        p: &Place,
        loaded: &[&[u128; PROBE]; CHOICES],
        now_idx: u64,
        ahead: u64,
    ) -> Option<Candidate> {
        let mut victim = Victim::default();
        for (j, values) in loaded.iter().enumerate().take(p.groups) {
            for i in 0..PROBE {
                let at = p.at(j, i);
                let value = values[at];
                if fp_of(value) == 0 || is_free_value(value, now_idx, ahead) {
                    continue;
                }
                let rank = evict_rank(
                    is_limited(value),
                    count_now(value, now_idx),
                    age(value, now_idx, ahead),
                );
                let slot = p.base[j] + at;
                victim.offer(rank, Candidate { slot, value });
            }
        }
        victim.take()
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

    /// After claiming `ours` for a new key, makes sure no other slot holds
    /// the same key (a concurrent insert that chose another slot). The
    /// later-positioned duplicate (in probe order) is retired and its counts
    /// are moved into the earlier one. Returns the slot now holding our
    /// admission.
    ///
    /// Each group is read up to its first never-used slot in the key's
    /// sequence, as in [`Table::lookup`]: a racing insert of the same key
    /// took the first free slot of that sequence, which lay at or before
    /// the first never-used one, and never-used slots only ever become used,
    /// so that boundary only moves later. (An insert that evicts a live slot
    /// anywhere in a group only happens when neither group had a free slot,
    /// hence no never-used one: then the whole group is read.) Whichever of
    /// two racing inserts claims its slot last sees the other's slot here.
    ///
    /// `p`: the key's place. Inline: the usual answer (ours alone) costs a
    /// read of the key's sequences; the merge is out of line.
    #[inline(always)]
    pub(super) fn dedup(
        &self,
        p: &Place,
        fp: u64,
        ours: usize,
        now_idx: u64,
        elapsed: u64,
    ) -> usize {
        if self.copies_with(p, fp, fp_of) <= 1 {
            // Ours alone (almost always): nothing to merge.
            return ours;
        }
        self.dedup_merge(p, fp, ours, now_idx, elapsed)
    }

    /// [`Table::dedup`] when another slot holds the key too: merges every
    /// later copy in probe order into the first.
    #[cold]
    #[inline(never)]
    fn dedup_merge(&self, p: &Place, fp: u64, ours: usize, now_idx: u64, elapsed: u64) -> usize {
        let groups = [self.group(p.base[0]), self.group(p.base[1])];
        let mut open = [true, p.groups == CHOICES];
        let mut first: Option<usize> = None;
        let mut result = ours;
        for i in 0..PROBE {
            for j in 0..CHOICES {
                if !open[j] {
                    continue;
                }
                let at = p.at(j, i);
                let f = fp_of(self.ops.load(&groups[j][at]));
                if f == 0 {
                    open[j] = false;
                    continue;
                }
                if f != fp {
                    continue;
                }
                let slot = p.base[j] + at;
                match first {
                    None => first = Some(slot),
                    Some(winner) => {
                        self.merge(fp, slot, winner, now_idx, elapsed);
                        if slot == ours {
                            result = winner;
                        }
                    }
                }
            }
            if open == [false, false] {
                break;
            }
        }
        result
    }

    /// How many slots of the key's sequences hold `fp` (`fp_of` reads a
    /// slot's fingerprint, an estimate or a strict one), each sequence read
    /// up to its first never-used slot, where [`Table::dedup`] reads too:
    /// one pass per group, without the interleaved probe order.
    #[inline]
    pub(super) fn copies_with(&self, p: &Place, fp: u64, fp_of: impl Fn(u128) -> u64) -> usize {
        let mut n = 0;
        for j in 0..p.groups {
            let group = self.group(p.base[j]);
            for i in 0..PROBE {
                let f = fp_of(self.ops.load(&group[p.at(j, i)]));
                if f == 0 {
                    break;
                }
                n += usize::from(f == fp);
            }
        }
        n
    }

    /// Retires slot `loser` (if it still holds `fp`) and adds its counts to
    /// `winner` (if that still holds `fp`).
    fn merge(&self, fp: u64, loser: usize, winner: usize, now_idx: u64, elapsed: u64) {
        let moved = loop {
            let value = self.load(loser);
            let s = Slot::decode(value);
            if s.fp != fp {
                return;
            }
            let v = view(s, now_idx, self.ahead(now_idx), elapsed);
            let retired = Slot {
                fp,
                tick: 0,
                idx24: now_idx & IDX_MASK,
                previous: 0,
                current: 0,
            };
            if self.cas(loser, value, retired.encode()) {
                break v.counts;
            }
        };
        if moved == Counts::default() {
            return;
        }
        loop {
            let value = self.load(winner);
            let s = Slot::decode(value);
            if s.fp != fp {
                return;
            }
            let v = view(s, now_idx, self.ahead(now_idx), elapsed);
            let new = Slot {
                fp,
                tick: self.tick(elapsed),
                idx24: v.index & IDX_MASK,
                previous: v
                    .counts
                    .previous
                    .saturating_add(moved.previous)
                    .min(COUNT_MAX),
                current: v
                    .counts
                    .current
                    .saturating_add(moved.current)
                    .min(COUNT_MAX),
            };
            if self.cas(winner, value, new.encode()) {
                return;
            }
        }
    }
}

/// The live fraction (2^16ths) from which a new key's slot is chosen by
/// the survey of its groups rather than at a free home slot: 3/8.
const FILL_SURVEY: u32 = 3 << 13;
/// Each new key weighs 2^-8 in the estimate of the live fraction.
const FILL_SHIFT: u32 = 8;

/// The free slot a new key takes (with whether it was used): the one of the
/// group with fewer live slots, counting one more for a free slot that is
/// not the key's home slot; the first group on a tie.
///
/// The extra one keeps more keys in the first two slots of their probe
/// order, where `acquire` reads them inline (at 75% load, 75% of keys
/// instead of 65%; at 40%, 90% instead of 83%), while the table fills as
/// evenly as before (first live eviction in a 1 MiB table: 57,534 keys on
/// average over 8 seeds instead of 57,615).
fn fewest_live(
    p: &Place,
    live: &[usize; CHOICES],
    free: &[Option<(Candidate, bool)>; CHOICES],
) -> Option<(Candidate, bool)> {
    let mut best: Option<(usize, Candidate, bool)> = None;
    for j in 0..p.groups {
        if let Some((cand, used)) = free[j] {
            let rank = live[j] + usize::from(cand.slot != p.slot(j, 0));
            if best.is_none_or(|(l, _, _)| rank < l) {
                best = Some((rank, cand, used));
            }
        }
    }
    best.map(|(_, c, u)| (c, u))
}

#[cfg(test)]
#[path = "place_tests.rs"]
mod tests;
