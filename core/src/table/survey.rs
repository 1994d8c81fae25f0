//! A new key's slot: the survey of the miss path (the free slot of the
//! group with fewer live slots, or a free home slot while the zone is
//! less than 3/8 full, as this process's fill estimate has it) and the
//! eviction victim when both groups are full of live keys (see
//! [Placement](super#placement)).

use core::mem::MaybeUninit;

use portable_atomic::Ordering;

use super::layout::{
    fp_of, idx_delta, idx_of, is_free_value, is_limited, prefetch, tick_of, COUNTS_MASK,
    COUNT_BITS, COUNT_MASK, IDX_MASK, SLOTS_PER_LINE, TICK_MAX,
};
use super::place::{Candidate, Found, Place};
use super::scan;
use super::{Table, CHOICES, PROBE};

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
