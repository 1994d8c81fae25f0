//! Reading one group of [`PROBE`] slots for a new key's survey, in two
//! steps: [`load`] reads every slot once (one 16-byte atomic load each,
//! `vmovdqa` where [`Ops`] inlines it, as every other access to a slot is)
//! into a local copy; then, once the caller has read how far ahead of its
//! clock a slot may be (which must come after the loads), [`classify`]
//! turns the copy into bit masks, bit `k` for slot `k` of the group in
//! memory order. The survey answers its questions (is the key there after
//! all, the first free slot in the key's probe order, how many slots are
//! live) with rotations and bit counts instead of a branch per slot.
//!
//! On x86_64 CPUs with AVX2 the classification runs four slots at a time;
//! elsewhere a plain loop computes the same masks.

use core::mem::MaybeUninit;

use portable_atomic::AtomicU128;

use super::layout::{fp_of, is_free_value, PROBE};
use crate::table::atomic::Ops;

/// What one group holds, one bit per slot (bit `k`: slot `k` of the group).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GroupMasks {
    /// Never used (fingerprint 0).
    pub empty: u16,
    /// Holds the fingerprint looked for.
    pub hit: u16,
    /// Used, but free to take: no counts, or idle two windows or more.
    pub idle: u16,
}

/// Loads a group's slots into `out`, one 16-byte atomic load per slot,
/// and returns them: the buffer needs no zeroing first.
#[inline]
pub(crate) fn load<'a>(
    ops: Ops,
    group: &[AtomicU128; PROBE],
    out: &'a mut [MaybeUninit<u128>; PROBE],
) -> &'a [u128; PROBE] {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if ops.avx2() {
        for (slot, o) in group.iter().zip(out.iter_mut()) {
            // SAFETY: `avx2()` implies AVX, which `load_m128` needs; `o` is
            // 16 writable bytes, and an unaligned store needs no alignment
            // (SSE2, baseline on x86_64).
            unsafe {
                let x = ops.load_m128(slot);
                core::arch::x86_64::_mm_storeu_si128(o.as_mut_ptr().cast(), x);
            }
        }
        // SAFETY: every one of the PROBE values was just written, and
        // `MaybeUninit<u128>` has the layout of `u128`.
        return unsafe { &*out.as_ptr().cast::<[u128; PROBE]>() };
    }
    for (slot, o) in group.iter().zip(out.iter_mut()) {
        o.write(ops.load(slot));
    }
    // SAFETY: as above.
    unsafe { &*out.as_ptr().cast::<[u128; PROBE]>() }
}

/// A group of never-used slots, for a key with fewer than `CHOICES` groups.
pub(crate) static NO_GROUP: [u128; PROBE] = [0; PROBE];

/// Classifies loaded slot values for the key fingerprint `fp` (never 0) at
/// window `now_idx`, given that no slot is ahead of it by more than
/// `ahead` windows (see `Table::ahead`; read after [`load`]).
#[inline]
pub(crate) fn classify(
    ops: Ops,
    values: &[u128; PROBE],
    fp: u64,
    now_idx: u64,
    ahead: u64,
) -> GroupMasks {
    debug_assert!(fp != 0, "a key's fingerprint is never 0");
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if ops.avx2() {
        // SAFETY: `avx2()` is true only when the CPU has AVX2.
        return unsafe { avx2::classify(values, fp, now_idx, ahead) };
    }
    let _ = ops;
    classify_scalar(values, fp, now_idx, ahead)
}

/// [`classify`], one slot at a time.
pub(crate) fn classify_scalar(
    values: &[u128; PROBE],
    fp: u64,
    now_idx: u64,
    ahead: u64,
) -> GroupMasks {
    let mut m = GroupMasks::default();
    for (k, &value) in values.iter().enumerate() {
        let bit = 1u16 << k;
        let f = fp_of(value);
        if f == 0 {
            m.empty |= bit;
            continue;
        }
        if f == fp {
            m.hit |= bit;
        }
        if is_free_value(value, now_idx, ahead) {
            m.idle |= bit;
        }
    }
    m
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod avx2 {
    use core::arch::x86_64::*;

    use super::GroupMasks;
    use crate::table::layout::{IDX_BITS, IDX_MASK, PROBE};

    /// [`super::classify`] four slots at a time. Slot layout (see `Slot`):
    /// high half `fingerprint << 8 | tick`, low half `idx24 << 40 |
    /// previous << 20 | current`.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn classify(
        values: &[u128; PROBE],
        fp: u64,
        now_idx: u64,
        ahead: u64,
    ) -> GroupMasks {
        let fpv = _mm256_set1_epi64x(fp as i64);
        let now = _mm256_set1_epi64x(now_idx as i64);
        let idx_mask = _mm256_set1_epi64x(IDX_MASK as i64);
        let counts_mask = _mm256_set1_epi64x(((1u64 << 40) - 1) as i64);
        let one = _mm256_set1_epi64x(1);
        // A delta at or above this is a slot ahead of now (`is_ahead`).
        let ahead_from = _mm256_set1_epi64x(((1u64 << IDX_BITS) - ahead) as i64);
        let zero = _mm256_setzero_si256();
        let mut m = GroupMasks::default();
        for q in 0..PROBE / 4 {
            // SAFETY: `values` holds PROBE u128s, so 4q..4q+4 are in bounds;
            // unaligned loads need no alignment. This is the local copy.
            let (a, b, c, d) = unsafe {
                let p = values.as_ptr().add(4 * q).cast::<__m128i>();
                (
                    _mm_loadu_si128(p),
                    _mm_loadu_si128(p.add(1)),
                    _mm_loadu_si128(p.add(2)),
                    _mm_loadu_si128(p.add(3)),
                )
            };
            // Lanes 0..4 = slots 4q..4q+4.
            let lo = _mm256_set_m128i(_mm_unpacklo_epi64(c, d), _mm_unpacklo_epi64(a, b));
            let hi = _mm256_set_m128i(_mm_unpackhi_epi64(c, d), _mm_unpackhi_epi64(a, b));
            let f = _mm256_srli_epi64::<8>(hi);
            let empty = _mm256_cmpeq_epi64(f, zero);
            // `fp` is never 0, so a never-used slot (fingerprint 0) never
            // matches it: no need to mask `empty` out.
            let hit = _mm256_cmpeq_epi64(f, fpv);
            let no_counts = _mm256_cmpeq_epi64(_mm256_and_si256(lo, counts_mask), zero);
            // Windows since the slot's: (now - idx24) mod 2^24, below 2^24,
            // so the signed compares are exact. Stale: 2 <= delta and not
            // ahead of now.
            let delta =
                _mm256_and_si256(_mm256_sub_epi64(now, _mm256_srli_epi64::<40>(lo)), idx_mask);
            let old = _mm256_and_si256(
                _mm256_cmpgt_epi64(delta, one),
                _mm256_cmpgt_epi64(ahead_from, delta),
            );
            let idle = _mm256_andnot_si256(empty, _mm256_or_si256(no_counts, old));
            // One bit per lane (its sign bit), lane i -> bit 4q + i.
            let shift = 4 * q;
            m.empty |= (_mm256_movemask_pd(_mm256_castsi256_pd(empty)) as u16) << shift;
            m.hit |= (_mm256_movemask_pd(_mm256_castsi256_pd(hit)) as u16) << shift;
            m.idle |= (_mm256_movemask_pd(_mm256_castsi256_pd(idle)) as u16) << shift;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::layout::{Slot, IDX_HALF, IDX_MASK};

    /// A slot value, packed by the table's own encoder.
    fn raw(fp: u64, tick: u8, idx24: u64, previous: u32, current: u32) -> u128 {
        Slot {
            fp,
            tick,
            idx24,
            previous,
            current,
        }
        .encode()
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Groups mixing never-used slots, the key, other keys, and every kind
    /// of window delta (current, previous, idle, far past, the clock
    /// behind), with and without counts.
    #[test]
    fn the_vector_scan_equals_the_scalar_scan() {
        let ops = Ops::detect();
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let fp = 0x00ab_cdef_0123_4567;
        let mut kinds = [0u32; 3];
        for round in 0..20_000 {
            let now_idx = if round % 2 == 0 {
                29_000_000
            } else {
                5 + rng.below(1 << 30)
            };
            let ahead = [0, 1, 3, IDX_HALF, rng.below(IDX_HALF)][round % 5];
            let group: [AtomicU128; PROBE] = core::array::from_fn(|_| {
                let value = match rng.below(4) {
                    0 => 0,
                    kind => {
                        let f = if kind == 1 {
                            fp
                        } else {
                            1 + rng.below((1 << 56) - 1)
                        };
                        let back = [0, 1, 2, 3, IDX_MASK, (1 << 23) - 1, 1 << 23, rng.next()];
                        let idx24 = now_idx.wrapping_sub(back[rng.below(8) as usize]) & IDX_MASK;
                        let which = rng.below(3);
                        let mut count = || rng.below(1 << 20) as u32;
                        let (previous, current) = match which {
                            0 => (0, 0),
                            1 => (count(), 0),
                            _ => (count(), count()),
                        };
                        raw(f, rng.below(256) as u8, idx24, previous, current)
                    }
                };
                AtomicU128::new(value)
            });
            let (mut ba, mut bb) = (
                [MaybeUninit::uninit(); PROBE],
                [MaybeUninit::uninit(); PROBE],
            );
            let (a, b) = (
                load(ops, &group, &mut ba),
                load(ops.without_avx2(), &group, &mut bb),
            );
            assert_eq!(a, b, "round {round}");
            let m = classify(ops, a, fp, now_idx, ahead);
            assert_eq!(m, classify_scalar(a, fp, now_idx, ahead), "round {round}");
            kinds[0] += m.empty.count_ones();
            kinds[1] += m.hit.count_ones();
            kinds[2] += m.idle.count_ones();
        }
        // Every class occurred often.
        assert!(kinds.iter().all(|&n| n > 10_000), "{kinds:?}");
    }

    #[test]
    fn masks_name_the_slots_in_memory_order() {
        let ops = Ops::detect();
        let now_idx = 1_000;
        let fp = 77;
        let mut group: [AtomicU128; PROBE] = core::array::from_fn(|_| AtomicU128::new(0));
        // Slot 3: the key, live; slot 9: another key, idle two windows;
        // slot 14: another key with no counts; slot 15: another key two
        // windows ahead of now; the rest never used.
        group[3] = AtomicU128::new(raw(fp, 1, now_idx, 0, 5));
        group[9] = AtomicU128::new(raw(78, 1, now_idx - 2, 4, 4));
        group[14] = AtomicU128::new(raw(79, 1, now_idx, 0, 0));
        group[15] = AtomicU128::new(raw(80, 1, now_idx + 2, 0, 1));
        for ops in [ops, ops.without_avx2()] {
            let mut buf = [MaybeUninit::uninit(); PROBE];
            let v = load(ops, &group, &mut buf);
            assert_eq!(v[3], raw(fp, 1, now_idx, 0, 5));
            let m = classify(ops, v, fp, now_idx, 2);
            assert_eq!(m.hit, 1 << 3);
            assert_eq!(m.idle, 1 << 9 | 1 << 14);
            assert_eq!(m.empty, !(1u16 << 3 | 1 << 9 | 1 << 14 | 1 << 15));
            // Nothing can be ahead: slot 15 is 2^24 - 2 windows old.
            let m = classify(ops, v, fp, now_idx, 0);
            assert_eq!(m.idle, 1 << 9 | 1 << 14 | 1 << 15);
        }
    }
}
