//! One slot's bits, the zone header, and the pure reads of them: the
//! packing of a slot into one `AtomicU128`, its window delta modulo 2^24,
//! and the counters' shards (see [the table](super) for the layout).

use core::mem::{align_of, size_of};

use portable_atomic::{AtomicU128, AtomicU64};

use crate::rule::window::{Counts, MAX_LIMIT};

/// Number of counter shards (one 64-byte cache line each).
pub const SHARDS: usize = 64;
/// Slots in one candidate group; a key has two groups, so a lookup examines
/// at most `2 * PROBE` slots.
pub const PROBE: usize = 16;
/// Number of candidate groups per key.
pub const CHOICES: usize = 2;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 16;
/// `b"RLWINDOW"` read as a little-endian u64: the one magic of a zone's
/// shared memory, at the start of the zone header
/// ([`crate::shm::ZoneHeader`]) and of the table's own header.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RLWINDOW");
/// Version of the whole zone's layout (the zone header, the table region
/// and its slots' bits, the override region: see [`crate::shm`]), in the
/// zone header and the table's header, and of the slot words a state file
/// saves; bumped on any incompatible change of any of them. (3: the strict
/// mode's slots; the zone header took this magic and version at 3, and
/// the zone headers before it, magic `RLWZONE1`..`RLWZONEA`, never match;
/// 4: the override table's candidate groups and versions, a longer queue
/// of overrides for the sync; 5: an override's `in_flight` (a slot kind of
/// the override table, and its count of changes); 6: an override's
/// version is the fleet's sequence or a local change not yet acknowledged,
/// and the override table counts ignored values and write-backs; 7:
/// in-flight places and `delay=` turns owned by pid, with no owner table
/// nor per-worker rows, the gauge of held requests in the turns; 8:
/// `delay=` turns counted exactly per client, as places are, no shared
/// buckets, the gauges in entries of their own.)
pub const LAYOUT_VERSION: u32 = 8;
/// The oldest layout version whose slot words are this version's: a state
/// file's table saved by a module of that layout or later is restored
/// (layout 5 changed the override region only). Raise it to
/// [`LAYOUT_VERSION`] whenever a slot's bits change.
pub const SLOT_WORDS_SINCE: u32 = 4;

/// Slot arrays above this size prefetch the second candidate group's home
/// slot, and every line of both groups before a new key's survey (in a
/// smaller table both groups are usually cached, and a needless prefetch
/// only pulls lines away from other cores).
pub(super) const PREFETCH_BYTES: usize = 4 << 20;
/// Slots per 64-byte cache line.
pub(super) const SLOTS_PER_LINE: usize = 64 / SLOT_BYTES;
pub(super) const COUNT_BITS: u32 = 20;
pub(super) const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Largest storable count, in requests.
pub(super) const COUNT_MAX: u32 = COUNT_MASK as u32;
/// Both counts of a slot's low word (previous and current, bits 0..40).
pub(super) const COUNTS_MASK: u64 = (1 << (2 * COUNT_BITS)) - 1;
pub(crate) const IDX_BITS: u32 = 24;
/// Where a slot's window index mod 2^24 starts in its low word (bits
/// 40..64, above both counts).
pub(super) const IDX_SHIFT: u32 = 2 * COUNT_BITS;
pub(crate) const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
pub(crate) const IDX_HALF: u64 = 1 << (IDX_BITS - 1);
pub(super) const COUNTERS: usize = 8;

const _: () = assert!(COUNT_MAX >= MAX_LIMIT);
const _: () = assert!(Counter::ALL.len() == COUNTERS);

/// Kinds of events counted in the shared counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Requests admitted (counted by the caller).
    Passed,
    /// Requests rejected (counted by the caller).
    Rejected,
    /// Requests that would have been rejected in dry-run mode (caller).
    RejectedDryRun,
    /// Requests exempt from limiting (caller).
    Exempt,
    /// An idle slot of another key was reused (counted by the table).
    EvictIdle,
    /// A live slot of another key was evicted under `FailPolicy::Open`
    /// (counted by the table).
    EvictLive,
    /// A request was rejected because the table was full under
    /// `FailPolicy::Closed` (counted by the table).
    FailClosed,
    /// A request saw a slot from a later window than its own clock (counted
    /// by the table).
    ClockBackwards,
}

impl Counter {
    /// Every counter kind, in a stable order.
    pub const ALL: [Counter; 8] = [
        Counter::Passed,
        Counter::Rejected,
        Counter::RejectedDryRun,
        Counter::Exempt,
        Counter::EvictIdle,
        Counter::EvictLive,
        Counter::FailClosed,
        Counter::ClockBackwards,
    ];

    /// A stable snake_case name, e.g. `"passed"`, for metrics output.
    pub fn name(self) -> &'static str {
        match self {
            Counter::Passed => "passed",
            Counter::Rejected => "rejected",
            Counter::RejectedDryRun => "rejected_dry_run",
            Counter::Exempt => "exempt",
            Counter::EvictIdle => "evict_idle",
            Counter::EvictLive => "evict_live",
            Counter::FailClosed => "fail_closed",
            Counter::ClockBackwards => "clock_backwards",
        }
    }

    pub(super) fn at(self) -> usize {
        self as usize
    }
}

#[repr(C, align(64))]
pub(super) struct Shard {
    pub(super) counters: [AtomicU64; COUNTERS],
}

#[repr(C, align(64))]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    pub(super) version: u32,
    pub(super) _pad: u32,
    pub(super) window_ms: u64,
    pub(super) seed: [u64; 2],
    pub(super) capacity: u64,
    /// The newest window index any slot was counted in (0: none yet).
    /// Raised before a slot is written with a newer index, so no slot is
    /// ever ahead of it.
    pub(super) newest: AtomicU64,
    /// 0: [`Mode::Estimate`](crate::rule::mode::Mode), 1: strict (layout
    /// version 3).
    pub(super) mode: u64,
    pub(super) last_event_ms: [AtomicU64; COUNTERS],
    pub(super) shards: [Shard; SHARDS],
}

const _: () = assert!(size_of::<Header>() == 64 * (2 + SHARDS));
const _: () = assert!(size_of::<AtomicU128>() == SLOT_BYTES);
const _: () = assert!(align_of::<AtomicU128>() == 16);

/// The decoded content of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) fp: u64,
    pub(crate) tick: u8,
    pub(crate) idx24: u64,
    pub(crate) previous: u32,
    pub(crate) current: u32,
}

impl Slot {
    pub(super) fn decode(v: u128) -> Slot {
        let hi = (v >> 64) as u64;
        let lo = v as u64;
        Slot {
            fp: hi >> 8,
            tick: hi as u8,
            idx24: idx_of(v),
            previous: ((lo >> COUNT_BITS) & COUNT_MASK) as u32,
            current: (lo & COUNT_MASK) as u32,
        }
    }

    pub(crate) fn encode(self) -> u128 {
        let hi = (self.fp << 8) | u64::from(self.tick);
        let lo = ((self.idx24 & IDX_MASK) << IDX_SHIFT)
            | (u64::from(self.previous.min(COUNT_MAX)) << COUNT_BITS)
            | u64::from(self.current.min(COUNT_MAX));
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Signed window delta `now - slot` from the slot's index modulo 2^24:
    /// negative (the slot ahead of `now_idx`) by at most `ahead` windows
    /// (see [`Table::ahead`](super::Table::ahead)), otherwise in `[0, 2^24 - ahead)`.
    pub(super) fn delta(self, now_idx: u64, ahead: u64) -> i64 {
        let d = idx_delta(now_idx, self.idx24);
        if is_ahead(d, ahead) {
            d as i64 - (1 << IDX_BITS)
        } else {
            d as i64
        }
    }

    pub(super) fn is_empty(self) -> bool {
        self.current == 0 && self.previous == 0
    }

    /// Whether the slot is free for another key at window `now_idx`:
    /// never used, no counts, or idle for two windows or more.
    pub(super) fn is_free(self, now_idx: u64, ahead: u64) -> bool {
        self.fp == 0 || self.is_empty() || self.delta(now_idx, ahead) >= 2
    }
}

/// The counts of a slot as seen from `now`.
#[derive(Clone, Copy, Debug)]
pub(super) struct View {
    pub(super) counts: Counts,
    /// Elapsed ms used for the decision (0 when the clock is behind).
    pub(super) elapsed: u64,
    /// Full window index the counts belong to.
    pub(super) index: u64,
    /// The slot is from a later window than `now`.
    pub(super) backwards: bool,
}

pub(super) fn view(s: Slot, now_idx: u64, ahead: u64, elapsed: u64) -> View {
    let fresh = View {
        counts: Counts::default(),
        elapsed,
        index: now_idx,
        backwards: false,
    };
    if s.is_empty() {
        return fresh;
    }
    let d = s.delta(now_idx, ahead);
    match d {
        0 => View {
            counts: Counts {
                current: s.current,
                previous: s.previous,
            },
            ..fresh
        },
        1 => View {
            counts: Counts {
                current: 0,
                previous: s.current,
            },
            ..fresh
        },
        d if d >= 2 => fresh,
        d => View {
            counts: Counts {
                current: s.current,
                previous: s.previous,
            },
            elapsed: 0,
            index: now_idx.wrapping_add(d.unsigned_abs()),
            backwards: true,
        },
    }
}

/// Largest touch tick: the tick is the low 7 bits of the slot's tick byte.
pub(super) const TICK_MAX: u8 = 0x7f;
/// The top bit of the tick byte (bit 71 of a slot value): the client was
/// refused since its last admission, i.e. it is at or over its limit (set
/// by a rejection, cleared by every admission, which rewrites the byte).
/// The eviction spares such a client while another candidate is below its
/// limit. Old values (8-bit ticks) read as a tick and, at worst, a stale
/// flag until the slot's next admission: the layout version stays.
pub(super) const LIMITED: u128 = 1 << 71;

/// Whether a slot value carries [`LIMITED`].
#[inline(always)]
pub(super) fn is_limited(value: u128) -> bool {
    value & LIMITED != 0
}

/// [`LIMITED`] of a strict slot ([`crate::rule::strict::pack`]): its spare bit 103,
/// between the 15-bit sub-window index and the fingerprint. Set by a
/// rejection, cleared by every admission (which packs a fresh word). A word
/// written with a 16-bit index (before this flag) reads as its index mod
/// 2^15 and, at worst, a stale flag until the key's next admission.
pub(super) const STRICT_LIMITED: u128 = 1 << crate::rule::strict::SPARE_SHIFT;

/// Whether a strict slot value carries [`STRICT_LIMITED`].
#[inline(always)]
pub(super) fn is_strict_limited(value: u128) -> bool {
    value & STRICT_LIMITED != 0
}

/// The touch tick of a slot value, without [`LIMITED`].
#[inline(always)]
pub(super) fn tick_of(value: u128) -> u8 {
    (value >> 64) as u8 & TICK_MAX
}

/// The smallest shift that maps `0..window_ms` into `0..=TICK_MAX`.
pub(super) fn tick_shift(window_ms: u64) -> u32 {
    let mut shift = 0;
    while (window_ms.saturating_sub(1) >> shift) > u64::from(TICK_MAX) {
        shift += 1;
    }
    shift
}

/// Hints the CPU to bring `a`'s cache line in (no memory access in the
/// language's sense: a prefetch never faults and changes nothing).
#[inline(always)]
pub(super) fn prefetch(a: &AtomicU128) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `_mm_prefetch` only hints the cache (SSE, baseline on x86_64);
    // the pointer is valid anyway.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(a.as_ptr().cast::<i8>().cast_const());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = a;
}

/// The 24-bit window index of a slot value (its window index mod 2^24),
/// without decoding it.
#[inline(always)]
pub(super) fn idx_of(value: u128) -> u64 {
    (value as u64) >> IDX_SHIFT
}

/// Windows from a slot's 24-bit window index `idx24` to `now_idx`, mod 2^24
/// (a slot ahead of now when [`is_ahead`] says so).
#[inline(always)]
pub(super) fn idx_delta(now_idx: u64, idx24: u64) -> u64 {
    now_idx.wrapping_sub(idx24) & IDX_MASK
}

/// [`Slot::is_free`] of a used slot's packed value, without decoding it:
/// no counts, or last active two windows or more before `now_idx`.
#[inline(always)]
pub(crate) fn is_free_value(value: u128, now_idx: u64, ahead: u64) -> bool {
    let lo = value as u64;
    let d = idx_delta(now_idx, idx_of(value));
    lo & COUNTS_MASK == 0 || (d >= 2 && !is_ahead(d, ahead))
}

/// Whether a window delta `d` (mod 2^24, as [`idx_delta`] gives it) is a
/// slot ahead of the caller's window, given that no slot is ahead by more
/// than `ahead` (at most 2^23) windows.
#[inline(always)]
pub(super) fn is_ahead(d: u64, ahead: u64) -> bool {
    d != 0 && (1 << IDX_BITS) - d <= ahead
}

/// The fingerprint stored in a slot value (0: never used).
#[inline(always)]
pub(crate) fn fp_of(value: u128) -> u64 {
    (value >> 72) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_packing_round_trips() {
        let s = Slot {
            fp: (1 << 56) - 1,
            tick: 255,
            idx24: IDX_MASK,
            previous: COUNT_MAX,
            current: 12345,
        };
        assert_eq!(Slot::decode(s.encode()), s);
        let z = Slot::decode(0);
        assert_eq!(z.fp, 0);
        assert!(z.is_free(7, 0));
        // Saturation, never overflow into neighbouring fields.
        let big = Slot {
            previous: u32::MAX,
            current: u32::MAX,
            ..s
        };
        let d = Slot::decode(big.encode());
        assert_eq!(
            (d.previous, d.current, d.idx24),
            (COUNT_MAX, COUNT_MAX, IDX_MASK)
        );
    }

    #[test]
    fn delta_is_signed_mod_2_24() {
        let s = Slot {
            fp: 1,
            tick: 0,
            idx24: 5,
            previous: 0,
            current: 1,
        };
        // No slot is ahead by more than `ahead` windows.
        assert_eq!(s.delta(5, 1), 0);
        assert_eq!(s.delta(6, 1), 1);
        assert_eq!(s.delta(4, 1), -1);
        assert_eq!(s.delta(4, 0), (1 << 24) - 1); // not ahead: 2^24 - 1 old
        assert_eq!(s.delta(3, 1), (1 << 24) - 2);
        assert_eq!(s.delta(3, 2), -2);
        assert_eq!(s.delta(5 + (1 << 24), 0), 0);
        let w = Slot {
            idx24: IDX_MASK,
            ..s
        };
        assert_eq!(w.delta(1 << 24, 0), 1); // wrapped
                                            // At most 2^23 ahead, as before the newest index was kept.
        let far = 5 + (1u64 << 24);
        assert_eq!(s.delta(far - (1 << 23), IDX_HALF), -(1 << 23));
        assert_eq!(s.delta(far - (1 << 23) - 1, IDX_HALF), (1 << 23) - 1);
    }
}
