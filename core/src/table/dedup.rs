//! The merge of two slots that racing inserts claimed for one key: after
//! an insert, any later copy of the key in probe order is retired and its
//! counts are added to the first.

use super::layout::{fp_of, view, Slot, COUNT_MAX, IDX_MASK};
use super::place::Place;
use super::{Table, CHOICES, PROBE};
use crate::rule::window::Counts;

impl Table<'_> {
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
    /// one pass per group, without the interleaved probe order. Inlined
    /// into a new key's placement, which has its registers saved already:
    /// out of line, its frame cost ~20 instructions a new key.
    #[inline(always)]
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
