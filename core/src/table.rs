//! A lock-free table of per-key window counters over a caller-provided byte
//! region, shared by several processes (nginx workers after `fork`).
//!
//! # Region layout
//!
//! ```text
//! offset 0                  Header (repr(C), 64-byte aligned, HEADER_BYTES = 4224)
//!   line 0: magic u64 | layout version u32 | pad u32 | window_ms u64 |
//!           seed [u64; 2] | capacity u64 | newest window index u64 |
//!           reserved u64
//!   line 1: last_event_ms [AtomicU64; 8]     (one per Counter, for episodes)
//!   lines 2..66: SHARDS shards of [AtomicU64; 8] (one cache line each)
//! offset HEADER_BYTES       capacity slots of SLOT_BYTES = 16 bytes
//! ```
//!
//! If the region start is 16- but not 64-byte aligned, the table starts at
//! the next 64-byte boundary (the offset is a function of the address, so
//! every process mapping the region at a page-aligned address agrees).
//!
//! # Slot packing
//!
//! Each slot is one `AtomicU128`, only ever changed by compare-and-swap:
//!
//! ```text
//! high 64 bits: fingerprint (56 bits) << 8 | touch tick (8 bits)
//! low 64 bits:  window index mod 2^24 (bits 40..64)
//!             | previous count (bits 20..40) | current count (bits 0..20)
//! ```
//!
//! * fingerprint: the top 56 bits of the key hash, never 0 for a used slot;
//!   0 means the slot was never used (and it never goes back to 0);
//! * touch tick: `elapsed_ms >> s` at the last update, with the smallest `s`
//!   that maps the window into `0..=255` (128 to 256 steps per window), used
//!   to pick the least recently active victim within a window;
//! * counts: requests, saturating at `2^20 - 1` (>= [`MAX_LIMIT`]).
//!
//! Window indices are compared modulo 2^24 as a signed delta `now - slot`:
//! 0 is the same window, 1 means the slot holds the previous window, 2 or
//! more means the counts are stale (the slot is free for reuse), and a
//! negative delta means this caller's clock is behind the slot's: the
//! slot's (newest) window wins, nothing is reset, and the decision uses the
//! slot's window with `elapsed = 0` (full weight on its previous count, the
//! conservative choice). A slot whose counts are both 0 is free as well.
//!
//! A slot can only be ahead of `now` by as much as the newest window the
//! zone has counted in is (the header keeps that index, raised before any
//! slot is written with a newer window, and read after the slots it
//! judges), at most 2^23 windows. Every other residue is a past window, so a
//! slot left untouched for more than 2^23 windows is stale, not "ahead" (it
//! was read as ahead, with its old counts, before the header kept the
//! newest index). Only an untouched slot whose age is within one window of
//! a multiple of 2^24 windows (194 days at `window=1s`) still reads as
//! current or previous, unless [`Table::sweep`] cleared its counts
//! meanwhile (the module sweeps every zone at least once an hour).
//!
//! # Placement
//!
//! A key has two candidate groups of [`PROBE`] consecutive slots (chosen from
//! independent bits of its hash) and a home offset in each (other bits of
//! the same products, see `Table::place`). Each group is probed linearly
//! from the key's home offset, wrapping around inside the group, and the two
//! groups are probed side by side: `A[home_a], B[home_b], A[home_a + 1],
//! B[home_b + 1], ...`; the first slot with the key's fingerprint is the
//! key's slot. A new key takes the first free slot of its sequence in the
//! candidate group with fewer live slots ("power of two choices"; a free
//! slot that is not the key's home counts as one more live slot, so that
//! most keys sit at a home slot; the first group on a tie). Since a key
//! never lies past a slot that was never used when it was placed, and used
//! slots never become never-used again, a never-used slot ends the probe of
//! its group. A key is therefore found after reading about 1 to 3 slots
//! instead of scanning its groups from their start (`acquire` reads the
//! first group's home slot before working out the rest of the placement,
//! then the second group's home slot, and calls the general lookup only
//! for the rest), and in a table larger than the caches the second group's
//! home slot is prefetched so that both cache misses overlap. A miss (new key) reads all
//! `2 * PROBE` slots to count live slots per group. This keeps a 1 MiB
//! region (65_264 slots) free of evictions up to about 57_000 live keys,
//! where a single bounded linear probe of 8 to 64 slots loses keys from
//! ~40_000 on. (Layout version 2: version 1 scanned each group from its
//! first slot.)
//!
//! Slots are read with one 16-byte atomic load and changed with one 16-byte
//! CAS, inlined where the CPU allows it (see the `atomic` module).
//!
//! When both groups are full of live slots, [`FailPolicy::Open`] evicts the
//! least recently active of them (oldest window, then oldest tick) and
//! counts [`Counter::EvictLive`]; [`FailPolicy::Closed`] rejects the request
//! without tracking it and counts [`Counter::FailClosed`].
//!
//! # Collisions
//!
//! Two distinct keys are confused only if they share the 56-bit fingerprint
//! and one candidate group: at most `2^-56` per pair of live keys (with a
//! million live keys, about 7e-6 for the whole table).
//!
//! # Concurrency
//!
//! There are no locks: a process killed at any instruction leaves every slot
//! in a consistent state. Check-and-increment is one CAS on the key's slot;
//! on a failed CAS the whole step is redone from a fresh read, so with any
//! number of processes exactly `limit` requests of a fresh key are admitted in
//! a window. Two processes inserting the same new key at the same instant
//! normally race for the same slot; should they claim different slots (their
//! views of the groups differed), the later claimer sees both, retires the
//! later-positioned slot and moves its counts into the first one, so at most
//! the racing requests themselves are decided on a partial count.
//!
//! A slot idle by one process's clock (two windows or more old) may be
//! reused by another key; a process whose clock is behind that far then no
//! longer sees the stale previous count it would still have weighted. Only
//! clock skew across a window boundary exposes this.

use core::fmt;
use core::hash::Hasher;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};

use portable_atomic::{AtomicU128, AtomicU64, Ordering};
use siphasher::sip::SipHasher13;

use crate::atomic::Ops;
use crate::mode::Mode;
use crate::scan;
use crate::window::{self, Counts, FastDiv, Window, MAX_LIMIT};

/// Number of counter shards (one 64-byte cache line each).
pub const SHARDS: usize = 64;
/// Slots in one candidate group; a key has two groups, so a lookup examines
/// at most `2 * PROBE` slots.
pub const PROBE: usize = 16;
/// Number of candidate groups per key.
pub const CHOICES: usize = 2;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 16;
/// `b"RLWINDOW"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RLWINDOW");
/// Version of the region layout; bumped on any incompatible change.
pub const LAYOUT_VERSION: u32 = 3;

/// Slot arrays above this size prefetch the second candidate group's home
/// slot, and every line of both groups before a new key's survey (in a
/// smaller table both groups are usually cached, and a needless prefetch
/// only pulls lines away from other cores).
const PREFETCH_BYTES: usize = 4 << 20;
/// Slots per 64-byte cache line.
const SLOTS_PER_LINE: usize = 64 / SLOT_BYTES;
const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Largest storable count, in requests.
const COUNT_MAX: u32 = COUNT_MASK as u32;
/// Both counts of a slot's low word (previous and current, bits 0..40).
const COUNTS_MASK: u64 = (1 << (2 * COUNT_BITS)) - 1;
pub(crate) const IDX_BITS: u32 = 24;
pub(crate) const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
pub(crate) const IDX_HALF: u64 = 1 << (IDX_BITS - 1);
const COUNTERS: usize = 8;

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

    fn at(self) -> usize {
        self as usize
    }
}

/// What to do with a new key when both of its candidate groups are full of
/// live keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailPolicy {
    /// Evict the least recently active live key and track the new one.
    Open,
    /// Reject the request without tracking the key.
    Closed,
}

/// Why a region could not be formatted or adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// 128-bit (or 64-bit) atomics would need a lock on this CPU.
    NotLockFree,
    /// The region is not 16-byte aligned.
    Misaligned,
    /// The region cannot hold the header and one group of slots.
    TooSmall,
    /// The region was not formatted by this module.
    BadMagic,
    /// The region was formatted with another layout version.
    BadVersion,
    /// The region was formatted for another window length (ms).
    WindowMismatch {
        /// Window length stored in the region, in ms.
        stored_ms: u64,
        /// Window length requested, in ms.
        wanted_ms: u64,
    },
    /// The stored capacity does not fit the region.
    CapacityMismatch,
    /// The region was formatted for the other mode (`mode=`).
    ModeMismatch,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::NotLockFree => f.write_str("128-bit atomics are not lock-free on this CPU"),
            TableError::Misaligned => f.write_str("shared zone is not 16-byte aligned"),
            TableError::TooSmall => write!(
                f,
                "shared zone is too small: at least {} bytes are needed",
                Table::HEADER_BYTES + 64 + PROBE * SLOT_BYTES
            ),
            TableError::BadMagic => f.write_str("shared zone does not hold a rate limit table"),
            TableError::BadVersion => {
                f.write_str("shared zone holds a rate limit table of another layout version")
            }
            TableError::WindowMismatch {
                stored_ms,
                wanted_ms,
            } => write!(
                f,
                "shared zone was created with window {stored_ms}ms, configuration now says {wanted_ms}ms"
            ),
            TableError::CapacityMismatch => {
                f.write_str("shared zone capacity does not match its size")
            }
            TableError::ModeMismatch => {
                f.write_str("shared zone was created with the other mode= (estimate or strict)")
            }
        }
    }
}

impl std::error::Error for TableError {}

/// A key's 64-bit SipHash-1-3 under the zone seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// The 56-bit fingerprint stored in the slot (never 0).
    fn fingerprint(self) -> u64 {
        let fp = self.0 >> 8;
        if fp == 0 {
            1
        } else {
            fp
        }
    }
}

/// Hashes a key of any length (including empty and > 64 KiB) with
/// SipHash-1-3 keyed by `seed`.
pub fn hash_with_seed(seed: [u64; 2], key: &[u8]) -> KeyHash {
    let mut h = SipHasher13::new_with_keys(seed[0], seed[1]);
    h.write(key);
    KeyHash(h.finish())
}

/// Whether the request was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted and counted.
    Admitted,
    /// Over the limit; not counted.
    Rejected,
    /// The table was full under `FailPolicy::Closed`; not counted.
    FailClosed,
}

/// Proof of an admission, for [`Table::undo`]. Opaque.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    slot: u32,
    fingerprint: u64,
    window_index: u64,
}

impl Admission {
    /// The window index (UTC epoch index) the admission was counted in.
    pub fn window_index(&self) -> u64 {
        self.window_index
    }
}

/// Table events that happened while deciding one request, so that the
/// caller can log them (once per episode, see [`Table::note_episode`]). The
/// table has already counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// A live key was evicted to make room (`FailPolicy::Open`).
    pub evicted_live: bool,
    /// An idle key's slot was reused.
    pub evicted_idle: bool,
    /// The key's slot was from a later window than `now_ms`.
    pub clock_backwards: bool,
}

/// The answer to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Admitted, rejected, or rejected because the table is full.
    pub outcome: Outcome,
    /// Requests that would still be admitted right now, after counting this
    /// one (0 when not admitted).
    pub remaining: u32,
    /// Seconds until one more request would be admitted (0 when admitted;
    /// equal to `reset_s` for `FailClosed`).
    pub retry_after_s: u32,
    /// Seconds until the next window boundary (rounded up).
    pub reset_s: u32,
    /// The sliding estimate before this request, in requests (rounded down;
    /// 0 for `FailClosed`).
    pub estimate: u32,
    /// Present iff admitted; pass it to [`Table::undo`] to take it back.
    pub admission: Option<Admission>,
    /// Table events seen on the way.
    pub events: Events,
}

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
    /// Sliding estimate in requests (rounded down); in a strict zone, the
    /// requests counted in the span (as `current`).
    pub estimate: u32,
    /// A strict zone's sub-window counts at the caller's sub-window.
    pub strict: Option<crate::strict::State>,
}

#[repr(C, align(64))]
struct Shard {
    counters: [AtomicU64; COUNTERS],
}

#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    version: u32,
    _pad: u32,
    window_ms: u64,
    seed: [u64; 2],
    capacity: u64,
    /// The newest window index any slot was counted in (0: none yet).
    /// Raised before a slot is written with a newer index, so no slot is
    /// ever ahead of it.
    newest: AtomicU64,
    /// 0: [`Mode::Estimate`], 1: [`Mode::Strict`] (layout version 3).
    mode: u64,
    last_event_ms: [AtomicU64; COUNTERS],
    shards: [Shard; SHARDS],
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
    fn decode(v: u128) -> Slot {
        let hi = (v >> 64) as u64;
        let lo = v as u64;
        Slot {
            fp: hi >> 8,
            tick: hi as u8,
            idx24: lo >> 40,
            previous: ((lo >> COUNT_BITS) & COUNT_MASK) as u32,
            current: (lo & COUNT_MASK) as u32,
        }
    }

    pub(crate) fn encode(self) -> u128 {
        let hi = (self.fp << 8) | u64::from(self.tick);
        let lo = ((self.idx24 & IDX_MASK) << 40)
            | (u64::from(self.previous.min(COUNT_MAX)) << COUNT_BITS)
            | u64::from(self.current.min(COUNT_MAX));
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Signed window delta `now - slot` from the slot's index modulo 2^24:
    /// negative (the slot ahead of `now_idx`) by at most `ahead` windows
    /// (see [`Table::ahead`]), otherwise in `[0, 2^24 - ahead)`.
    fn delta(self, now_idx: u64, ahead: u64) -> i64 {
        let d = idx_delta(now_idx, self.idx24);
        if is_ahead(d, ahead) {
            d as i64 - (1 << IDX_BITS)
        } else {
            d as i64
        }
    }

    fn is_empty(self) -> bool {
        self.current == 0 && self.previous == 0
    }

    /// Whether the slot is free for another key at window `now_idx`:
    /// never used, no counts, or idle for two windows or more.
    fn is_free(self, now_idx: u64, ahead: u64) -> bool {
        self.fp == 0 || self.is_empty() || self.delta(now_idx, ahead) >= 2
    }
}

/// The counts of a slot as seen from `now`.
#[derive(Clone, Copy, Debug)]
struct View {
    counts: Counts,
    /// Elapsed ms used for the decision (0 when the clock is behind).
    elapsed: u64,
    /// Full window index the counts belong to.
    index: u64,
    /// The slot is from a later window than `now`.
    backwards: bool,
}

fn view(s: Slot, now_idx: u64, ahead: u64, elapsed: u64) -> View {
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

/// A lock-free table of window counters in a shared byte region.
///
/// `Table` only borrows the region: every method takes `&self`, and any
/// number of `Table`s in any number of processes may work on one region at
/// once.
pub struct Table<'a> {
    header: &'a Header,
    slots: &'a [AtomicU128],
    window: Window,
    seed: [u64; 2],
    groups: u64,
    /// `tick = elapsed >> tick_shift` (see [`Table::tick`]).
    tick_shift: u32,
    /// How slots are loaded and CASed (see [`crate::atomic`]).
    ops: Ops,
    /// Division by the window length.
    wdiv: FastDiv,
    /// Prefetch the second group's home slot (tables larger than
    /// [`PREFETCH_BYTES`], unlikely to stay in a core's caches).
    prefetch: bool,
    /// The zone decides with the strict rule (see `strict.rs`).
    strict: bool,
    _region: PhantomData<&'a [u8]>,
}

impl fmt::Debug for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("window_ms", &self.window.ms())
            .field("capacity", &self.slots.len())
            .finish()
    }
}

fn check_lock_free() -> Result<(), TableError> {
    if AtomicU128::is_lock_free() && AtomicU64::is_lock_free() {
        Ok(())
    } else {
        Err(TableError::NotLockFree)
    }
}

/// The smallest shift that maps `0..window_ms` into `0..=255`.
fn tick_shift(window_ms: u64) -> u32 {
    let mut shift = 0;
    while (window_ms.saturating_sub(1) >> shift) > 255 {
        shift += 1;
    }
    shift
}

/// Returns (offset of the 64-byte aligned table start, capacity in slots).
fn geometry(region: *mut u8, len: usize) -> Result<(usize, usize), TableError> {
    let addr = region as usize;
    if addr % 16 != 0 {
        return Err(TableError::Misaligned);
    }
    let pad = addr.wrapping_neg() % 64;
    let cap = Table::capacity_for(len.saturating_sub(pad));
    if cap == 0 {
        return Err(TableError::TooSmall);
    }
    Ok((pad, cap))
}

/// Hints the CPU to bring `a`'s cache line in (no memory access in the
/// language's sense: a prefetch never faults and changes nothing).
#[inline(always)]
fn prefetch(a: &AtomicU128) {
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

/// Windows from a slot's 24-bit window index `idx24` to `now_idx`, mod 2^24
/// (a slot ahead of now when [`is_ahead`] says so).
#[inline(always)]
fn idx_delta(now_idx: u64, idx24: u64) -> u64 {
    now_idx.wrapping_sub(idx24) & IDX_MASK
}

/// [`Slot::is_free`] of a used slot's packed value, without decoding it:
/// no counts, or last active two windows or more before `now_idx`.
#[inline(always)]
pub(crate) fn is_free_value(value: u128, now_idx: u64, ahead: u64) -> bool {
    let lo = value as u64;
    let d = idx_delta(now_idx, lo >> 40);
    lo & COUNTS_MASK == 0 || (d >= 2 && !is_ahead(d, ahead))
}

/// Whether a window delta `d` (mod 2^24, as [`idx_delta`] gives it) is a
/// slot ahead of the caller's window, given that no slot is ahead by more
/// than `ahead` (at most 2^23) windows.
#[inline(always)]
fn is_ahead(d: u64, ahead: u64) -> bool {
    d != 0 && (1 << IDX_BITS) - d <= ahead
}

/// The fingerprint stored in a slot value (0: never used).
#[inline(always)]
pub(crate) fn fp_of(value: u128) -> u64 {
    (value >> 72) as u64
}

/// A key's candidate groups (see [`Table::place`]).
#[derive(Clone, Copy, Debug)]
struct Place {
    /// First slot of each group.
    base: [usize; CHOICES],
    /// Home offset of the key inside each group, `0..PROBE`.
    home: [usize; CHOICES],
    /// 2, or 1 when the table has a single group.
    groups: usize,
}

impl Place {
    /// The `i`-th slot of the key's sequence in group `j`: groups are probed
    /// linearly from the home offset, wrapping around inside the group.
    /// The probe order of the key is `(0, 0), (1, 0), (0, 1), (1, 1), ...`
    /// (`(j, i)`): both groups are read side by side, home slots first.
    #[inline(always)]
    fn slot(&self, j: usize, i: usize) -> usize {
        self.base[j] + self.at(j, i)
    }

    /// The offset inside group `j` of the key's `i`-th slot there.
    #[inline(always)]
    fn at(&self, j: usize, i: usize) -> usize {
        (self.home[j] + i) % PROBE
    }
}

/// Which group a tie or a free slot is found in, with its value.
#[derive(Clone, Copy)]
struct Candidate {
    slot: usize,
    value: u128,
}

enum Found {
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

impl<'a> Table<'a> {
    /// Size of the header at the start of the (64-byte aligned) region, in
    /// bytes.
    pub const HEADER_BYTES: usize = size_of::<Header>();

    /// Slots that fit in a 64-byte aligned region of `region_len` bytes after
    /// the header, rounded down to whole groups of [`PROBE`] slots (0 if not
    /// even one group fits). A 1 MiB region holds 65_264 slots.
    pub fn capacity_for(region_len: usize) -> usize {
        let slots = region_len.saturating_sub(Self::HEADER_BYTES) / SLOT_BYTES;
        let slots = slots.min(u32::MAX as usize);
        slots / PROBE * PROBE
    }

    /// Formats the region: zeroes it, writes the header (magic, version,
    /// window, seed, capacity) and returns the table.
    ///
    /// The region should be 64-byte aligned (16 at minimum, else
    /// [`TableError::Misaligned`]; a 16-byte aligned region loses up to 48
    /// bytes) and hold [`Table::HEADER_BYTES`] plus at least [`PROBE`] slots
    /// ([`TableError::TooSmall`]).
    ///
    /// # Safety
    ///
    /// `region` must be valid for reads and writes of `len` bytes for `'a`,
    /// and no one else may access it during `init`. Afterwards it may only be
    /// accessed through `Table`s (of any process).
    pub unsafe fn init(
        region: *mut u8,
        len: usize,
        window: Window,
        seed: [u64; 2],
    ) -> Result<Table<'a>, TableError> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { Self::init_mode(region, len, window, seed, Mode::Estimate) }
    }

    /// [`Table::init`] for a zone deciding with `mode`.
    ///
    /// # Safety
    ///
    /// As for [`Table::init`].
    pub unsafe fn init_mode(
        region: *mut u8,
        len: usize,
        window: Window,
        seed: [u64; 2],
        mode: Mode,
    ) -> Result<Table<'a>, TableError> {
        check_lock_free()?;
        let (pad, cap) = geometry(region, len)?;
        let used = Self::HEADER_BYTES + cap * SLOT_BYTES;
        // SAFETY: pad + used <= len by `geometry`, so this stays inside the
        // region the caller guarantees valid and exclusively ours.
        let base = unsafe { region.add(pad) };
        // SAFETY: as above; all-zero bytes are a valid state for the header
        // (atomics and integers) and for every slot ("never used").
        unsafe { core::ptr::write_bytes(base, 0, used) };
        let h = base.cast::<Header>();
        // SAFETY: `base` is 64-byte aligned (pad), in bounds, and nobody else
        // accesses the region during init; plain field writes through raw
        // pointers, before any shared reference exists.
        unsafe {
            core::ptr::addr_of_mut!((*h).version).write(LAYOUT_VERSION);
            core::ptr::addr_of_mut!((*h).window_ms).write(window.ms());
            core::ptr::addr_of_mut!((*h).seed).write(seed);
            core::ptr::addr_of_mut!((*h).capacity).write(cap as u64);
            core::ptr::addr_of_mut!((*h).mode).write(u64::from(mode == Mode::Strict));
        }
        // SAFETY: header and slots are initialized, aligned and in bounds.
        let table = unsafe { Self::from_parts(base, cap, window, seed, mode) };
        // Publish last: an attacher that sees the magic sees the header.
        table.header.magic.store(MAGIC, Ordering::Release);
        Ok(table)
    }

    /// Adopts a region formatted by [`Table::init`] (by this or another
    /// process, or before an nginx reload), checking the magic, the layout
    /// version, the window length (must equal `window`) and that the stored
    /// capacity fits in `len` bytes.
    ///
    /// # Safety
    ///
    /// `region` must be valid for reads and writes of `len` bytes for `'a`,
    /// and only be accessed through `Table`s meanwhile.
    pub unsafe fn attach(
        region: *mut u8,
        len: usize,
        window: Window,
    ) -> Result<Table<'a>, TableError> {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { Self::attach_mode(region, len, window, Mode::Estimate) }
    }

    /// [`Table::attach`] for a zone deciding with `mode`: the stored mode
    /// must be `mode` too ([`TableError::ModeMismatch`]).
    ///
    /// # Safety
    ///
    /// As for [`Table::attach`].
    pub unsafe fn attach_mode(
        region: *mut u8,
        len: usize,
        window: Window,
        mode: Mode,
    ) -> Result<Table<'a>, TableError> {
        check_lock_free()?;
        let (pad, cap) = geometry(region, len)?;
        // SAFETY: in bounds by `geometry`.
        let base = unsafe { region.add(pad) };
        let h = base.cast::<Header>();
        // SAFETY: the header lies in the region (cap > 0 implies len covers
        // it) and is 64-byte aligned; `magic` is an atomic, read atomically.
        let magic = unsafe { &(*h).magic }.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(TableError::BadMagic);
        }
        // SAFETY: after the Acquire load of the magic, the plain header
        // fields written before its Release store are visible and are never
        // written again.
        let (version, window_ms, seed, stored_cap, stored_mode) = unsafe {
            (
                core::ptr::addr_of!((*h).version).read(),
                core::ptr::addr_of!((*h).window_ms).read(),
                core::ptr::addr_of!((*h).seed).read(),
                core::ptr::addr_of!((*h).capacity).read(),
                core::ptr::addr_of!((*h).mode).read(),
            )
        };
        if version != LAYOUT_VERSION {
            return Err(TableError::BadVersion);
        }
        if window_ms != window.ms() {
            return Err(TableError::WindowMismatch {
                stored_ms: window_ms,
                wanted_ms: window.ms(),
            });
        }
        if stored_mode != u64::from(mode == Mode::Strict) {
            return Err(TableError::ModeMismatch);
        }
        let stored_cap = usize::try_from(stored_cap).map_err(|_| TableError::CapacityMismatch)?;
        if stored_cap == 0 || stored_cap > cap || stored_cap % PROBE != 0 {
            return Err(TableError::CapacityMismatch);
        }
        // SAFETY: validated formatted region with `stored_cap` slots in bounds.
        Ok(unsafe { Self::from_parts(base, stored_cap, window, seed, mode) })
    }

    /// # Safety
    /// `base` is 64-byte aligned and holds an initialized header followed by
    /// `cap` initialized slots, valid for `'a`.
    unsafe fn from_parts(
        base: *mut u8,
        cap: usize,
        window: Window,
        seed: [u64; 2],
        mode: Mode,
    ) -> Table<'a> {
        // SAFETY: per the contract; the header is only read through atomics
        // or as immutable plain fields from now on.
        let header = unsafe { &*base.cast::<Header>() };
        // SAFETY: slots start right after the header (a multiple of 64
        // bytes, so 16-byte aligned) and `cap` of them are in bounds;
        // AtomicU128 has the size and alignment of u128.
        let slots = unsafe {
            core::slice::from_raw_parts(
                base.add(Self::HEADER_BYTES)
                    .cast::<AtomicU128>()
                    .cast_const(),
                cap,
            )
        };
        Table {
            header,
            slots,
            window,
            seed,
            groups: (cap / PROBE) as u64,
            tick_shift: tick_shift(window.ms()),
            ops: Ops::detect(),
            wdiv: FastDiv::new(window.ms()),
            prefetch: cap * SLOT_BYTES > PREFETCH_BYTES,
            strict: mode == Mode::Strict,
            _region: PhantomData,
        }
    }

    /// The window length.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The hash seed stored in the region.
    pub fn seed(&self) -> [u64; 2] {
        self.seed
    }

    /// Hashes a key (any length, any bytes) with the zone seed.
    pub fn hash_key(&self, key: &[u8]) -> KeyHash {
        hash_with_seed(self.seed, key)
    }

    /// Where the key may live: its candidate groups and the home offset
    /// inside each.
    ///
    /// The group index is `(h32 * groups) >> 32` ("fast range") of one 32-bit
    /// half of the hash; the home offset is the top 4 bits of the fractional
    /// part `(h32 * groups) mod 2^32`, which are independent of the group
    /// index. The second half of the hash gives the second group (moved to
    /// the next group if both are equal and the table has more than one).
    #[inline]
    fn place(&self, key: KeyHash) -> Place {
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
    fn home_slot(&self, key: KeyHash) -> usize {
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
    fn scan_order(&self, key: KeyHash) -> impl Iterator<Item = usize> {
        let p = self.place(key);
        (0..PROBE).flat_map(move |i| (0..p.groups).map(move |j| p.slot(j, i)))
    }

    #[inline(always)]
    fn load(&self, slot: usize) -> u128 {
        self.ops.load(&self.slots[slot])
    }

    #[inline(always)]
    fn cas(&self, slot: usize, old: u128, new: u128) -> bool {
        self.ops.cas(&self.slots[slot], old, new)
    }

    /// The hit path: the first slot holding `fp` in probe order, reading
    /// as few slots as possible. A group's sequence ends at its first
    /// never-used slot (a key is always placed at the first free slot of its
    /// sequence, and used slots never become never-used again).
    #[inline(never)]
    fn lookup(&self, p: &Place, fp: u64) -> Option<(usize, u128)> {
        let groups = [self.group(p.base[0]), self.group(p.base[1])];
        let mut open = [true, p.groups == CHOICES];
        for i in 0..PROBE {
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
    fn find(&self, key: KeyHash, fp: u64, now_idx: u64) -> Found {
        let p = self.place(key);
        match self.lookup(&p, fp) {
            Some((slot, value)) => Found::Key { slot, value },
            None => self.survey(&p, fp, now_idx),
        }
    }

    /// The `PROBE` slots of the group starting at slot `base`.
    #[inline(always)]
    fn group(&self, base: usize) -> &[AtomicU128; PROBE] {
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
    fn survey(&self, p: &Place, fp: u64, now_idx: u64) -> Found {
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
        let mut loaded = [[0u128; PROBE]; CHOICES];
        for (values, &base) in loaded.iter_mut().zip(&p.base).take(p.groups) {
            scan::load(self.ops, self.group(base), values);
        }
        // After the loads (see `ahead`).
        let ahead = self.ahead(now_idx);
        for j in 0..p.groups {
            let values = &loaded[j];
            let m = scan::classify(self.ops, values, fp, now_idx, ahead);
            // Bit i of a rotated mask: position i of the key's probe order.
            let home = p.home[j] as u32;
            let (empty, idle) = (m.empty.rotate_right(home), m.idle.rotate_right(home));
            // A key is never placed past a never-used slot of its sequence.
            let i = m.hit.rotate_right(home).trailing_zeros() as usize;
            if i < empty.trailing_zeros() as usize {
                let order = i * CHOICES + j;
                if hit.as_ref().map_or(true, |(o, _)| order < *o) {
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
        // The group with fewer live slots, counting one more for a free
        // slot that is not the key's home slot; the first group on a tie.
        // The extra one keeps more keys in the first two slots of their
        // probe order, where `acquire` reads them inline (at 75% load,
        // 75% of keys instead of 65%; at 40%, 90% instead of 83%), while the
        // table fills as evenly as before (first live eviction in a 1 MiB
        // table: 57,534 keys on average over 8 seeds instead of 57,615).
        let mut best: Option<(usize, Candidate, bool)> = None;
        for j in 0..p.groups {
            if let Some((cand, used)) = free[j] {
                let rank = live[j] + usize::from(cand.slot != p.slot(j, 0));
                if best.map_or(true, |(l, _, _)| rank < l) {
                    best = Some((rank, cand, used));
                }
            }
        }
        Found::Absent {
            free: best.map(|(_, c, _)| c),
            free_is_used: best.is_some_and(|(_, _, u)| u),
            // Only a full pair of groups needs a victim (rare): look for it
            // then, among the values loaded above.
            victim: if best.is_none() {
                self.oldest(p, &loaded, now_idx, ahead)
            } else {
                None
            },
        }
    }

    /// The least recently active live slot of the key's groups, from the
    /// slot values the survey loaded: the oldest window, then the smallest
    /// touch tick; the first one in probe order on a tie.
    #[cold]
    fn oldest(
        &self,
        p: &Place,
        loaded: &[[u128; PROBE]; CHOICES],
        now_idx: u64,
        ahead: u64,
    ) -> Option<Candidate> {
        // Age as one integer, larger is older: the signed window delta
        // (biased to be non-negative), then 255 - tick.
        let mut victim: Option<(u64, Candidate)> = None;
        for (j, values) in loaded.iter().enumerate().take(p.groups) {
            for i in 0..PROBE {
                let at = p.at(j, i);
                let value = values[at];
                if fp_of(value) == 0 || is_free_value(value, now_idx, ahead) {
                    continue;
                }
                let d = idx_delta(now_idx, (value as u64) >> 40);
                // Adding `ahead` mod 2^24 maps the slots ahead of now,
                // [2^24 - ahead, 2^24), onto [0, ahead) (the youngest) and
                // every other delta d onto d + ahead, keeping the order.
                let age =
                    (((d + ahead) & IDX_MASK) << 8) | u64::from(u8::MAX - (value >> 64) as u8);
                if victim.map_or(true, |(a, _)| age > a) {
                    let slot = p.base[j] + at;
                    victim = Some((age, Candidate { slot, value }));
                }
            }
        }
        victim.map(|(_, c)| c)
    }

    /// The touch tick of a request `elapsed` ms into its window: `elapsed >>
    /// tick_shift`, between 128 and 256 steps per window (no division).
    #[inline]
    fn tick(&self, elapsed: u64) -> u8 {
        (elapsed >> self.tick_shift).min(255) as u8
    }

    fn count(&self, shard: usize, c: Counter) {
        self.add(shard, c, 1);
    }

    /// How many windows a slot can be ahead of `now_idx`: the zone's newest
    /// window minus `now_idx` (0 unless some clock stepped back), at most
    /// 2^23. Read it *after* loading the slots it judges: a slot written with
    /// a newer window was preceded by [`Table::raise_newest`], so the load
    /// that saw the slot makes this one see the raise.
    #[inline]
    fn ahead(&self, now_idx: u64) -> u64 {
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
    fn raise_newest(&self, now_idx: u64) {
        let newest = &self.header.newest;
        if newest.load(Ordering::Relaxed) < now_idx {
            newest.fetch_max(now_idx, Ordering::SeqCst);
        }
    }

    /// Decides one request of `key` at `now_ms` (epoch ms) against `limit`
    /// (requests per window) and counts it if admitted, in one CAS. `shard`
    /// is the caller's worker number (taken mod [`SHARDS`]) for counters.
    ///
    /// The table counts `EvictIdle`, `EvictLive`, `FailClosed` and
    /// `ClockBackwards` itself; the caller counts `Passed`, `Rejected`,
    /// `RejectedDryRun` and `Exempt`.
    #[inline]
    pub fn acquire(
        &self,
        key: KeyHash,
        now_ms: u64,
        limit: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Decision {
        if self.strict {
            return self.acquire_strict(key, now_ms, limit, policy, shard);
        }
        let (now_idx, elapsed) = self.wdiv.divrem(now_ms);
        let fp = key.fingerprint();
        if self.prefetch {
            let p = self.place(key);
            if p.groups == CHOICES {
                // The second group's home slot is read right after the
                // first one's if the key is not there; start fetching it
                // now so that a table larger than the caches pays one
                // memory latency, not two in a row.
                prefetch(&self.slots[p.slot(1, 0)]);
            }
        }
        // Most keys live at their home slot in their first group: read it
        // before working out the rest of the placement.
        let home = self.home_slot(key);
        let value = self.load(home);
        if fp_of(value) == fp {
            return self
                .acquire_found(key, fp, home, value, now_idx, elapsed, limit, policy, shard);
        }
        // Then the home slot of the second group, inline, and the rest of
        // the lookup; an absent key gets the survey of its groups, which
        // the general path starts from rather than reading them again.
        let p = self.place(key);
        let found = 'probe: {
            if p.groups == CHOICES {
                let slot = p.slot(1, 0);
                let value = self.load(slot);
                if fp_of(value) == fp {
                    break 'probe Some((slot, value));
                }
            }
            self.lookup(&p, fp)
        };
        match found {
            Some((slot, value)) => {
                self.acquire_found(key, fp, slot, value, now_idx, elapsed, limit, policy, shard)
            }
            None => {
                let first = Some(self.survey(&p, fp, now_idx));
                self.acquire_slow(key, fp, first, now_idx, elapsed, limit, policy, shard)
            }
        }
    }

    /// [`Table::acquire`] for a key found at `slot` holding `value`, the
    /// common cases inline: the slot holds the current window, or an older
    /// one (the client's first request in a new window). Same rule and same
    /// single CAS as the general path, on the packed value. Anything else
    /// (the clock behind the slot, a lost CAS) takes the general path, from
    /// this slot or, after a lost CAS, from a fresh lookup.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn acquire_found(
        &self,
        key: KeyHash,
        fp: u64,
        slot: usize,
        value: u128,
        now_idx: u64,
        elapsed: u64,
        limit: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Decision {
        let lo = value as u64;
        let current = (lo & COUNT_MASK) as u32;
        // Windows from the slot's to now, mod 2^24 (as in `Slot::delta`).
        let d = idx_delta(now_idx, lo >> 40);
        let counts = match d {
            0 => Counts {
                current,
                previous: ((lo >> COUNT_BITS) & COUNT_MASK) as u32,
            },
            // The slot's current window is now the previous one.
            1 => Counts {
                current: 0,
                previous: current,
            },
            // Two windows or more ago (forgotten), unless the slot is ahead
            // of this clock (read after the slot's load, see `ahead`).
            d if !is_ahead(d, self.ahead(now_idx)) => Counts::default(),
            _ => {
                let first = Some(Found::Key { slot, value });
                return self.acquire_slow(key, fp, first, now_idx, elapsed, limit, policy, shard);
            }
        };
        let w = self.window.ms();
        let (ok, estimate, remaining) = window::decide(counts, elapsed, self.wdiv, limit);
        if !ok {
            return self.rejected(counts, elapsed, limit, estimate);
        }
        let tick = u128::from(self.tick(elapsed)) << 64;
        if d != 0 {
            // The slot moves to window `now_idx` (a slot already in it was
            // raised by its writer, so the common case reads nothing more).
            self.raise_newest(now_idx);
        }
        let new = if d == 0 {
            // Admitted means current < limit < COUNT_MAX: the +1 on bits
            // 0..20 carries nowhere.
            ((value & !(0xff << 64)) | tick) + 1
        } else {
            // A new window: the fingerprint stays, the window moves to now,
            // the counts become (previous, 1).
            let lo = ((now_idx & IDX_MASK) << 40) | (u64::from(counts.previous) << COUNT_BITS) | 1;
            (value & (!0u128 << 72)) | tick | u128::from(lo)
        };
        if !self.cas(slot, value, new) {
            return self.acquire_slow(key, fp, None, now_idx, elapsed, limit, policy, shard);
        }
        Decision {
            outcome: Outcome::Admitted,
            remaining,
            retry_after_s: 0,
            reset_s: window::reset_secs(elapsed, w),
            estimate,
            admission: Some(Admission {
                slot: slot as u32,
                fingerprint: fp,
                window_index: now_idx,
            }),
            events: Events::default(),
        }
    }

    /// The decision for a request over its limit (no events, nothing
    /// counted), out of line: the hot path is the admission.
    #[cold]
    #[inline(never)]
    fn rejected(&self, counts: Counts, elapsed: u64, limit: u32, estimate: u32) -> Decision {
        let w = self.window.ms();
        Decision {
            outcome: Outcome::Rejected,
            remaining: 0,
            retry_after_s: window::retry_after_secs(counts, elapsed, w, limit),
            reset_s: window::reset_secs(elapsed, w),
            estimate,
            admission: None,
            events: Events::default(),
        }
    }

    /// The general path of [`Table::acquire`], starting from `first` (what
    /// the fast path already read) when given, else from a fresh lookup.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn acquire_slow(
        &self,
        key: KeyHash,
        fp: u64,
        mut first: Option<Found>,
        now_idx: u64,
        elapsed: u64,
        limit: u32,
        policy: FailPolicy,
        shard: usize,
    ) -> Decision {
        // Before any slot below is written with window `now_idx`.
        self.raise_newest(now_idx);
        let w = self.window.ms();
        let reset_s = window::reset_secs(elapsed, w);
        let mut events = Events::default();
        let decision = loop {
            let found = first.take().unwrap_or_else(|| self.find(key, fp, now_idx));
            match found {
                Found::Key { slot, value } => {
                    let s = Slot::decode(value);
                    // After the slot's load (see `ahead`).
                    let v = view(s, now_idx, self.ahead(now_idx), elapsed);
                    events.clock_backwards |= v.backwards;
                    let (ok, est, remaining) =
                        window::decide(v.counts, v.elapsed, self.wdiv, limit);
                    if !ok {
                        break Decision {
                            outcome: Outcome::Rejected,
                            remaining: 0,
                            retry_after_s: window::retry_after_secs(v.counts, v.elapsed, w, limit),
                            reset_s,
                            estimate: est,
                            admission: None,
                            events,
                        };
                    }
                    // Admitted: current < limit <= MAX_LIMIT < COUNT_MAX.
                    let after = Counts {
                        current: v.counts.current.saturating_add(1).min(COUNT_MAX),
                        previous: v.counts.previous,
                    };
                    let new = Slot {
                        fp,
                        tick: if v.backwards {
                            s.tick
                        } else {
                            self.tick(elapsed)
                        },
                        idx24: v.index & IDX_MASK,
                        previous: after.previous,
                        current: after.current,
                    };
                    if self.cas(slot, value, new.encode()) {
                        break Decision {
                            outcome: Outcome::Admitted,
                            remaining,
                            retry_after_s: 0,
                            reset_s,
                            estimate: est,
                            admission: Some(Admission {
                                slot: slot as u32,
                                fingerprint: fp,
                                window_index: v.index,
                            }),
                            events,
                        };
                    }
                }
                Found::Absent {
                    free,
                    free_is_used,
                    victim,
                } => {
                    if limit == 0 {
                        break Decision {
                            outcome: Outcome::Rejected,
                            remaining: 0,
                            retry_after_s: window::retry_after_secs(
                                Counts::default(),
                                elapsed,
                                w,
                                0,
                            ),
                            reset_s,
                            estimate: 0,
                            admission: None,
                            events,
                        };
                    }
                    let (target, idle, live) = match (free, victim, policy) {
                        (Some(c), _, _) => (c, free_is_used, false),
                        (None, Some(c), FailPolicy::Open) => (c, false, true),
                        _ => {
                            break Decision {
                                outcome: Outcome::FailClosed,
                                remaining: 0,
                                retry_after_s: reset_s,
                                reset_s,
                                estimate: 0,
                                admission: None,
                                events,
                            };
                        }
                    };
                    let new = Slot {
                        fp,
                        tick: self.tick(elapsed),
                        idx24: now_idx & IDX_MASK,
                        previous: 0,
                        current: 1,
                    };
                    if self.cas(target.slot, target.value, new.encode()) {
                        events.evicted_idle |= idle;
                        events.evicted_live |= live;
                        let slot = self.dedup(key, fp, target.slot, now_idx, elapsed);
                        break Decision {
                            outcome: Outcome::Admitted,
                            remaining: window::remaining(
                                Counts {
                                    current: 1,
                                    previous: 0,
                                },
                                elapsed,
                                w,
                                limit,
                            ),
                            retry_after_s: 0,
                            reset_s,
                            estimate: 0,
                            admission: Some(Admission {
                                slot: slot as u32,
                                fingerprint: fp,
                                window_index: now_idx,
                            }),
                            events,
                        };
                    }
                }
            }
        };
        if decision.outcome == Outcome::FailClosed {
            self.count(shard, Counter::FailClosed);
        }
        if events.evicted_idle {
            self.count(shard, Counter::EvictIdle);
        }
        if events.evicted_live {
            self.count(shard, Counter::EvictLive);
        }
        if events.clock_backwards {
            self.count(shard, Counter::ClockBackwards);
        }
        decision
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
    fn dedup(&self, key: KeyHash, fp: u64, ours: usize, now_idx: u64, elapsed: u64) -> usize {
        let p = self.place(key);
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

    /// Takes back an admission (another limit rejected the request):
    /// decrements the slot's current count if it still holds the key in the
    /// same window, or its previous count if the slot has since moved on by
    /// exactly one window. Never underflows; otherwise does nothing.
    pub fn undo(&self, admission: &Admission) {
        let slot = admission.slot as usize;
        if slot >= self.slots.len() {
            return;
        }
        if self.strict {
            return self.undo_strict(admission);
        }
        loop {
            let value = self.load(slot);
            let mut s = Slot::decode(value);
            if s.fp != admission.fingerprint {
                return;
            }
            match s.delta(admission.window_index, self.ahead(admission.window_index)) {
                0 => s.current = s.current.saturating_sub(1),
                -1 => s.previous = s.previous.saturating_sub(1),
                _ => return,
            }
            if self.cas(slot, value, s.encode()) {
                return;
            }
        }
    }

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
    /// reuses an idle slot; see [Concurrency](self#concurrency).) The sweep
    /// is there because a slot keeps its window index modulo 2^24: one
    /// left untouched for a multiple of 2^24 windows (194 days at
    /// `window=1s`) would read as current again, old counts and all. A
    /// caller that sweeps the whole table at least once every 2^24 - 3
    /// windows leaves no slot that old with counts. A cleared slot keeps
    /// its fingerprint (a used slot never becomes never-used, see
    /// [Placement](self#placement)) and its window index; one CAS per
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
            let d = idx_delta(now_idx, (value as u64) >> 40);
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
        if self.strict {
            let now_sub = crate::strict::sub_index(now_ms, self.window.ms());
            let free = |a: &AtomicU128| self.strict_is_free(self.ops.load(a), now_sub);
            return self.slots.iter().filter(|a| !free(a)).count() as u64;
        }
        let now_idx = self.window.index(now_ms);
        // Read once, before the scan: a slot counted in a newer window
        // meanwhile may be missed, as any update during the scan may.
        let ahead = self.ahead(now_idx);
        self.slots
            .iter()
            .filter(|a| {
                let s = Slot::decode(self.ops.load(a));
                !s.is_free(now_idx, ahead)
            })
            .count() as u64
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

mod strict;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::MAX_WINDOW_MS;

    /// A 64-byte aligned heap buffer (Miri-friendly: no mmap).
    #[repr(C, align(64))]
    struct Line([u8; 64]);

    struct Region(Vec<Line>);

    impl Region {
        fn new(bytes: usize) -> Region {
            Region((0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect())
        }
        fn ptr(&mut self) -> *mut u8 {
            self.0.as_mut_ptr().cast()
        }
        fn len(&self) -> usize {
            self.0.len() * 64
        }
    }

    const MIN: u64 = 60_000;
    const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z, a window start

    fn win(ms: u64) -> Window {
        Window::from_ms(ms).unwrap()
    }

    fn table(r: &mut Region, w: u64) -> Table<'_> {
        let len = r.len();
        // SAFETY: the buffer is valid, exclusively borrowed for the table's
        // lifetime and 64-byte aligned.
        unsafe { Table::init(r.ptr(), len, win(w), [1, 2]).unwrap() }
    }

    fn small_bytes(slots: usize) -> usize {
        Table::HEADER_BYTES + slots * SLOT_BYTES
    }

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

    #[test]
    fn a_slot_idle_past_2_pow_23_windows_is_stale_not_ahead() {
        // A 1 s window: a client that used its limit, back 2^23 + 10
        // windows (97 days) later, is a new client (it was read as ahead of
        // the clock, its old counts back, and rejected).
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, 1_000);
        let h = t.hash_key(b"k");
        for _ in 0..3 {
            t.acquire(h, T0, 3, FailPolicy::Open, 0);
        }
        assert_eq!(
            t.acquire(h, T0, 3, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
        let later = T0 + ((1 << 23) + 10) * 1_000;
        let d = t.acquire(h, later, 3, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(!d.events.clock_backwards);
        assert_eq!(d.remaining, 2);
        assert_eq!(t.counter(Counter::ClockBackwards), 0);
        // A real step back is still seen as one, and counts are kept.
        let back = t.acquire(h, later - 5_000, 3, FailPolicy::Open, 0);
        assert!(back.events.clock_backwards);
        assert_eq!(t.peek(h, later).current, 2);
    }

    /// Admits `limit` requests of `h` at `now`, then checks the next is
    /// rejected.
    fn use_up(t: &Table<'_>, h: KeyHash, now: u64, limit: u32) {
        for _ in 0..limit {
            let d = t.acquire(h, now, limit, FailPolicy::Open, 0);
            assert_eq!(d.outcome, Outcome::Admitted);
        }
        let d = t.acquire(h, now, limit, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
    }

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
    fn home_slot_is_the_first_slot_of_the_probe_order() {
        for slots in [16, 40, 4096, 65_264] {
            let mut r = Region::new(small_bytes(slots));
            let t = table(&mut r, MIN);
            for i in 0u32..5_000 {
                let h = t.hash_key(&i.to_le_bytes());
                assert_eq!(t.home_slot(h), t.place(h).slot(0, 0));
                assert_eq!(t.home_slot(h), t.scan_order(h).next().unwrap());
            }
        }
    }

    #[test]
    fn geometry_and_capacity() {
        assert_eq!(Table::HEADER_BYTES, 4224);
        assert_eq!(Table::capacity_for(1 << 20), 65_264);
        assert_eq!(Table::capacity_for(Table::HEADER_BYTES + 15 * 16), 0);
        let mut r = Region::new(small_bytes(40));
        let t = table(&mut r, MIN);
        assert_eq!(t.capacity(), 32);
        assert_eq!(t.window().ms(), MIN);
        assert_eq!(t.seed(), [1, 2]);
    }

    #[test]
    fn alignment_and_size_errors() {
        let mut r = Region::new(small_bytes(64) + 64);
        let len = r.len();
        let p = r.ptr();
        // SAFETY: p + 8 .. p + len stays inside the buffer.
        let e = unsafe { Table::init(p.add(8), len - 8, win(MIN), [0, 0]) };
        assert_eq!(e.unwrap_err(), TableError::Misaligned);
        // SAFETY: in bounds; 16-byte aligned start is padded to 64.
        let t = unsafe { Table::init(p.add(16), len - 16, win(MIN), [0, 0]) }.unwrap();
        assert_eq!(t.capacity(), 64);
        let mut tiny = Region::new(small_bytes(8));
        let tl = tiny.len();
        // SAFETY: valid buffer.
        let e = unsafe { Table::init(tiny.ptr(), tl, win(MIN), [0, 0]) };
        assert_eq!(e.unwrap_err(), TableError::TooSmall);
    }

    #[test]
    fn attach_validates() {
        let mut r = Region::new(small_bytes(64));
        let len = r.len();
        let p = r.ptr();
        // SAFETY: zeroed buffer, never formatted.
        let e = unsafe { Table::attach(p, len, win(MIN)) }.unwrap_err();
        assert_eq!(e, TableError::BadMagic);
        // SAFETY: valid buffer; the tables below are dropped before `r`.
        unsafe {
            let t = Table::init(p, len, win(MIN), [7, 8]).unwrap();
            t.acquire(t.hash_key(b"k"), T0, 5, FailPolicy::Open, 0);
            let a = Table::attach(p, len, win(MIN)).unwrap();
            assert_eq!(a.seed(), [7, 8]);
            assert_eq!(a.capacity(), 64);
            assert_eq!(a.peek(a.hash_key(b"k"), T0).current, 1);
            let e = Table::attach(p, len, win(1_000)).unwrap_err();
            assert_eq!(
                e,
                TableError::WindowMismatch {
                    stored_ms: MIN,
                    wanted_ms: 1_000
                }
            );
            assert!(e.to_string().contains("60000ms"));
            let e = Table::attach(p, small_bytes(32), win(MIN)).unwrap_err();
            assert_eq!(e, TableError::CapacityMismatch);
            // Corrupt the version (offset 8 of the header).
            p.add(8).cast::<u32>().write(LAYOUT_VERSION + 1);
            let e = Table::attach(p, len, win(MIN)).unwrap_err();
            assert_eq!(e, TableError::BadVersion);
        }
        assert_eq!(
            TableError::NotLockFree.to_string(),
            "128-bit atomics are not lock-free on this CPU"
        );
    }

    #[test]
    fn countdown_then_reject() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"client-1");
        let now = T0 + 10_000;
        let mut rem = vec![];
        for _ in 0..5 {
            let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
            assert_eq!(d.outcome, Outcome::Admitted);
            assert_eq!(d.retry_after_s, 0);
            assert_eq!(d.reset_s, 50);
            rem.push(d.remaining);
        }
        assert_eq!(rem, vec![4, 3, 2, 1, 0]);
        let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.estimate, 5);
        assert!(d.admission.is_none());
        // Next window at +1 ms: 5 * (W - 1) < 5 * W.
        assert_eq!(d.retry_after_s, 51);
        assert_eq!(t.peek(k, now).current, 5);
        assert_eq!(
            t.peek(t.hash_key(b"other"), now),
            Snapshot {
                window_index: win(MIN).index(now),
                ..Snapshot::default()
            }
        );
    }

    #[test]
    fn window_rolls_forward() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        for _ in 0..10 {
            assert_eq!(
                t.acquire(k, T0 + 59_999, 10, FailPolicy::Open, 0).outcome,
                Outcome::Admitted
            );
        }
        // Boundary: at T0 + 60_000 the 10 are previous with full weight.
        let d = t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.estimate, 10);
        // Half way: estimate 5, 5 more admitted.
        let n = (0..10)
            .filter(|_| {
                t.acquire(k, T0 + MIN + 30_000, 10, FailPolicy::Open, 0)
                    .outcome
                    == Outcome::Admitted
            })
            .count();
        assert_eq!(n, 5); // current * W + 10 * W / 2 < 10 * W  <=>  current < 5
        let s = t.peek(k, T0 + MIN + 30_000);
        assert_eq!((s.current, s.previous), (5, 10));
        // Two windows later everything is forgotten.
        let s = t.peek(k, T0 + 3 * MIN);
        assert_eq!((s.current, s.previous, s.estimate), (0, 0, 0));
        assert_eq!(
            t.acquire(k, T0 + 3 * MIN, 10, FailPolicy::Open, 0)
                .remaining,
            9
        );
    }

    #[test]
    fn one_second_and_one_day_windows() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, 1_000);
        let k = t.hash_key(b"k");
        assert_eq!(
            t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let d = t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0);
        assert_eq!(
            (d.outcome, d.reset_s, d.retry_after_s),
            (Outcome::Rejected, 1, 1)
        );
        assert_eq!(
            t.acquire(k, T0 + 1_999, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let mut r2 = Region::new(small_bytes(64));
        let t = table(&mut r2, MAX_WINDOW_MS);
        let k = t.hash_key(b"k");
        assert_eq!(
            t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        let d = t.acquire(k, T0 + 3_600_000, 1, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.reset_s, 23 * 3600);
        assert_eq!(d.retry_after_s, 23 * 3600 + 1); // 1 * (W - t) < W from t = 1 ms
    }

    #[test]
    fn clock_backwards_keeps_counts() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        for _ in 0..3 {
            t.acquire(k, T0 + 2 * MIN + 5, 10, FailPolicy::Open, 0);
        }
        // A worker whose clock is one window behind.
        let d = t.acquire(k, T0 + MIN + 59_000, 10, FailPolicy::Open, 1);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.clock_backwards);
        assert_eq!(t.counter(Counter::ClockBackwards), 1);
        // Counted in the slot's (newest) window, nothing reset.
        let s = t.peek(k, T0 + 2 * MIN + 5);
        assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
        let s = t.peek(k, T0);
        assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
        // Undo of the backwards admission hits the right window.
        t.undo(&d.admission.unwrap());
        assert_eq!(t.peek(k, T0 + 2 * MIN).current, 3);
    }

    #[test]
    fn undo_same_and_next_window_never_underflows() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let a = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
        let b = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
        t.undo(&a);
        assert_eq!(t.peek(k, T0).current, 1);
        // Roll one window: b's count is now "previous".
        t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
        t.undo(&b);
        let s = t.peek(k, T0 + MIN);
        assert_eq!((s.current, s.previous), (1, 0));
        t.undo(&b);
        let s = t.peek(k, T0 + MIN);
        assert_eq!((s.current, s.previous), (1, 0));
    }

    #[test]
    fn limit_zero_never_admits_or_tracks() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let d = t.acquire(t.hash_key(b"k"), T0 + 1_000, 0, FailPolicy::Open, 0);
        assert_eq!(
            (d.outcome, d.retry_after_s, d.remaining),
            (Outcome::Rejected, 60, 0)
        );
        assert_eq!(t.slots_used(T0), 0);
    }

    fn fill(t: &Table<'_>, n: usize, now: u64, policy: FailPolicy) -> Vec<Decision> {
        (0..n)
            .map(|i| {
                t.acquire(
                    t.hash_key(format!("key{i}").as_bytes()),
                    now,
                    100,
                    policy,
                    i,
                )
            })
            .collect()
    }

    #[test]
    fn full_table_open_evicts_least_recent() {
        let mut r = Region::new(small_bytes(16));
        let t = table(&mut r, MIN);
        assert_eq!(t.capacity(), 16);
        // 16 keys at increasing ticks.
        for i in 0..16u64 {
            let k = t.hash_key(format!("key{i}").as_bytes());
            assert_eq!(
                t.acquire(k, T0 + i * 1_000, 100, FailPolicy::Open, 0)
                    .outcome,
                Outcome::Admitted
            );
        }
        assert_eq!(t.slots_used(T0 + 20_000), 16);
        let d = t.acquire(t.hash_key(b"new"), T0 + 20_000, 100, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.evicted_live);
        assert_eq!(t.counter(Counter::EvictLive), 1);
        // The oldest (key0) was evicted, the others are remembered.
        assert_eq!(t.peek(t.hash_key(b"key0"), T0 + 20_000).current, 0);
        assert_eq!(t.peek(t.hash_key(b"key1"), T0 + 20_000).current, 1);
        assert_eq!(t.peek(t.hash_key(b"new"), T0 + 20_000).current, 1);
    }

    #[test]
    fn full_table_closed_fails_closed() {
        let mut r = Region::new(small_bytes(16));
        let t = table(&mut r, MIN);
        let ds = fill(&t, 16, T0 + 30_000, FailPolicy::Closed);
        assert!(ds.iter().all(|d| d.outcome == Outcome::Admitted));
        let d = t.acquire(t.hash_key(b"new"), T0 + 30_000, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::FailClosed);
        assert_eq!((d.remaining, d.retry_after_s, d.reset_s), (0, 30, 30));
        assert_eq!(t.counter(Counter::FailClosed), 1);
        assert_eq!(t.counter(Counter::EvictLive), 0);
        // Known keys still work.
        let d = t.acquire(t.hash_key(b"key3"), T0 + 30_000, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::Admitted);
        // Two windows later the idle slots are reused.
        let d = t.acquire(t.hash_key(b"new"), T0 + 3 * MIN, 100, FailPolicy::Closed, 5);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert!(d.events.evicted_idle);
        assert_eq!(t.counter(Counter::EvictIdle), 1);
    }

    #[test]
    fn any_key_length() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let long: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let mut long2 = long.clone();
        *long2.last_mut().unwrap() ^= 1;
        let keys: [&[u8]; 5] = [b"", b"\0", &[0xff, 0, 0x80], &long, &long2];
        for k in keys {
            assert_eq!(
                t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
                Outcome::Admitted
            );
        }
        for k in keys {
            assert_eq!(
                t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
                Outcome::Rejected
            );
        }
        assert_ne!(t.hash_key(&long), t.hash_key(&long2));
        assert_eq!(t.slots_used(T0), 5);
    }

    #[test]
    fn seeds_change_hashes() {
        let a = hash_with_seed([1, 2], b"203.0.113.7");
        let b = hash_with_seed([1, 3], b"203.0.113.7");
        assert_ne!(a, b);
        assert_eq!(a, hash_with_seed([1, 2], b"203.0.113.7"));
        assert_ne!(hash_with_seed([0, 0], b""), hash_with_seed([0, 1], b""));
    }

    #[test]
    #[cfg_attr(miri, ignore = "a million CAS loops")]
    fn max_limit_is_exact() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MAX_WINDOW_MS);
        let k = t.hash_key(b"k");
        let n = (0..MAX_LIMIT + 10)
            .filter(|_| {
                t.acquire(k, T0 + 5, MAX_LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted
            })
            .count();
        assert_eq!(n, MAX_LIMIT as usize);
        assert_eq!(t.peek(k, T0 + 5).current, MAX_LIMIT);
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
    fn duplicate_claims_are_merged() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"dup");
        let fp = k.fingerprint();
        let now_idx = win(MIN).index(T0);
        let order: Vec<usize> = t.scan_order(k).collect();
        // Simulate two racing inserts that chose different slots.
        let s = |current| {
            Slot {
                fp,
                tick: 0,
                idx24: now_idx & IDX_MASK,
                previous: 0,
                current,
            }
            .encode()
        };
        // A racing insert takes the first free slot of the key's sequence,
        // so the slots before the later duplicate are in use (other keys).
        for (n, &slot) in order[1..20].iter().enumerate() {
            let other = Slot {
                fp: fp ^ (n as u64 + 1),
                tick: 0,
                idx24: now_idx & IDX_MASK,
                previous: 0,
                current: 1,
            };
            t.slots[slot].store(other.encode(), Ordering::SeqCst);
        }
        t.slots[order[0]].store(s(3), Ordering::SeqCst);
        t.slots[order[20]].store(s(2), Ordering::SeqCst);
        let kept = t.dedup(k, fp, order[20], now_idx, 0);
        assert_eq!(kept, order[0]);
        assert_eq!(t.peek(k, T0).current, 5);
        assert!(Slot::decode(t.slots[order[20]].load(Ordering::SeqCst)).is_empty());
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

    #[test]
    fn hit_path_reads_home_slots_first() {
        // A half-full table: most keys sit at one of their two home slots.
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let keys: Vec<KeyHash> = (0..2048u32).map(|i| t.hash_key(&i.to_le_bytes())).collect();
        for &k in &keys {
            t.acquire(k, T0, 10, FailPolicy::Open, 0);
        }
        let at_home = keys
            .iter()
            .filter(|&&k| {
                let p = t.place(k);
                let (slot, _) = t.lookup(&p, k.fingerprint()).unwrap();
                slot == p.slot(0, 0) || slot == p.slot(1, 0)
            })
            .count();
        assert!(at_home > 2048 * 3 / 4, "{at_home}");
        assert_eq!(t.slots_used(T0), 2048);
    }

    #[test]
    fn new_key_goes_to_the_group_with_fewer_live_slots() {
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"newcomer");
        let p = t.place(k);
        assert_eq!(p.groups, CHOICES);
        // Other clients' slots, written directly; the key's home slots stay
        // free. Group 0: 6 live; group 1: 4 live and 6 idle (two windows
        // old, so not live: the key must go to group 1).
        let now_idx = T0 / MIN;
        let put = |j: usize, i: usize, idx: u64| {
            let v = Slot {
                fp: 1000 + (j * PROBE + i) as u64,
                tick: 0,
                idx24: idx & IDX_MASK,
                previous: 0,
                current: 1,
            };
            assert!(t.cas(p.slot(j, i), 0, v.encode()));
        };
        for i in 1..=6 {
            put(0, i, now_idx);
        }
        for i in 1..=4 {
            put(1, i, now_idx);
        }
        for i in 5..=10 {
            put(1, i, now_idx - 2);
        }
        let d = t.acquire(k, T0, 10, FailPolicy::Open, 0);
        assert_eq!(d.admission.unwrap().slot as usize, p.slot(1, 0));
        assert_eq!(t.counter(Counter::EvictIdle), 0);
    }

    #[test]
    fn survey_finds_the_first_duplicate_in_probe_order() {
        // Two slots holding one key (a racing insert not merged yet): the
        // survey must agree with `lookup` on which one is the key's.
        let now_idx = T0 / MIN;
        let live = |fp: u64, n: u32| Slot {
            fp,
            tick: 0,
            idx24: now_idx & IDX_MASK,
            previous: 0,
            current: n,
        };
        // (group, position) of the two copies; the first one in probe order
        // (0, 0), (1, 0), (0, 1), (1, 1), ... wins.
        for (a, b) in [((0, 1), (1, 0)), ((0, 0), (1, 1))] {
            let mut r = Region::new(small_bytes(4096));
            let t = table(&mut r, MIN);
            let k = t.hash_key(b"twice");
            let p = t.place(k);
            let fp = k.fingerprint();
            // Fill every slot before the copies with other live keys.
            for (j, i) in [(0, 0), (1, 0)] {
                if (j, i) != a && (j, i) != b {
                    assert!(t.cas(p.slot(j, i), 0, live(7000 + j as u64, 1).encode()));
                }
            }
            assert!(t.cas(p.slot(a.0, a.1), 0, live(fp, 3).encode()));
            assert!(t.cas(p.slot(b.0, b.1), 0, live(fp, 5).encode()));
            let want = if a.1 * CHOICES + a.0 < b.1 * CHOICES + b.0 {
                p.slot(a.0, a.1)
            } else {
                p.slot(b.0, b.1)
            };
            assert_eq!(t.lookup(&p, fp).unwrap().0, want);
            match t.survey(&p, fp, now_idx) {
                Found::Key { slot, .. } => assert_eq!(slot, want, "{a:?} {b:?}"),
                Found::Absent { .. } => panic!("the key was not found"),
            }
        }
    }

    #[test]
    fn table_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Table<'static>>();
    }
}
