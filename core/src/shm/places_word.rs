//! The packed words of the places (places.rs): a group word's entries
//! (fingerprint and count) and overflow count, a ledger word's pid, tag
//! and depth; plain bit arithmetic, no memory.

use super::*;

/// Each entry's bits in a group word.
pub(super) const ENTRY_AT: [u128; ENTRIES as usize] = [
    ENTRY_MASK,
    ENTRY_MASK << ENTRY_BITS,
    ENTRY_MASK << (2 * ENTRY_BITS),
];
/// Each entry's lowest bit: an entry's value times it is the entry in
/// place (a multiplication, where a shift by an entry's index would be a
/// 128-bit shift by a variable).
pub(super) const ENTRY_LOW: [u128; ENTRIES as usize] = [1, 1 << ENTRY_BITS, 1 << (2 * ENTRY_BITS)];

/// Entry `i` of a group word: (fingerprint, count).
#[inline(always)]
pub(super) fn entry(w: u128, i: u32) -> (u64, u32) {
    let e = (w >> (i * ENTRY_BITS)) & ENTRY_MASK;
    ((e as u64) & FP_MASK, (e >> FP_BITS) as u32)
}

/// `w` with entry `i` set to (`fp`, `count`).
#[inline(always)]
pub(super) fn with_entry(w: u128, i: u32, fp: u64, count: u32) -> u128 {
    let e = (fp & FP_MASK) | (u64::from(count) << FP_BITS);
    let i = i as usize % ENTRIES as usize;
    (w & !ENTRY_AT[i]) | (u128::from(e) * ENTRY_LOW[i])
}

/// `w` with one more (`up`) or one less in entry `i`'s count (above 0:
/// one less; below [`MAX_IN_FLIGHT`]: one more), its fingerprint kept.
#[inline(always)]
pub(super) fn with_count_step(w: u128, i: u32, up: bool) -> u128 {
    let one = ENTRY_LOW[i as usize % ENTRIES as usize] << FP_BITS;
    if up {
        w + one
    } else {
        w - one
    }
}

pub(super) fn overflow(w: u128) -> u32 {
    (w >> OVER_SHIFT) as u32
}

pub(super) fn with_overflow(w: u128, n: u32) -> u128 {
    (w & !(u128::from(OVER_MAX) << OVER_SHIFT)) | (u128::from(n) << OVER_SHIFT)
}

/// The entry of `fp` in `w` (a count above 0), if any: (index, count).
#[inline]
pub(super) fn find(w: u128, fp: u64) -> Option<(u32, u32)> {
    for i in 0..ENTRIES {
        let (f, c) = entry(w, i);
        if c > 0 && f == fp {
            return Some((i, c));
        }
    }
    None
}

/// The entry a request of `fp` is counted in, if it has one in `w`:
/// its entry (a count above 0) or, while the group has no overflow, a free
/// entry that last held `fp` (the client back where it was: its count
/// goes up from 0 there, its fingerprint already written): (index,
/// count). One pass over the entries, as [`find`]; the free one is used
/// only when no entry counts `fp`.
#[inline]
pub(super) fn find_or_back(w: u128, fp: u64) -> Option<(u32, u32)> {
    let mut back = None;
    for i in 0..ENTRIES {
        let (f, c) = entry(w, i);
        if f == fp {
            if c > 0 {
                return Some((i, c));
            }
            back = back.or(Some((i, 0)));
        }
    }
    back.filter(|_| overflow(w) == 0)
}

/// A free entry of `w`, if any.
#[inline]
pub(super) fn free(w: u128) -> Option<u32> {
    (0..ENTRIES).find(|&i| (w >> (i * ENTRY_BITS + FP_BITS)) as u32 & MAX_IN_FLIGHT == 0)
}

/// A live ledger word's pid.
pub(super) fn pid_of(w: u64) -> u32 {
    (w >> PID_SHIFT) as u32
}

/// Ledger word `w` freed: its tag alone, for the next one there.
pub(super) fn freed(w: u64) -> u64 {
    w & TAG_MASK << TAG_SHIFT
}

/// A ledger word's depth: the groups past its own it is counted.
pub(super) fn depth_of(w: u64) -> u32 {
    ((w >> DEPTH_SHIFT) & DEPTH_MASK) as u32
}

pub(super) fn with_depth(w: u64, d: u32) -> u64 {
    (w & !(DEPTH_MASK << DEPTH_SHIFT)) | (u64::from(d) & DEPTH_MASK) << DEPTH_SHIFT
}
