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
//! high 64 bits: fingerprint (56 bits) << 8 | limited (1 bit) << 7 | touch tick (7 bits)
//! low 64 bits:  window index mod 2^24 (bits 40..64)
//!             | previous count (bits 20..40) | current count (bits 0..20)
//! ```
//!
//! * fingerprint: the top 56 bits of the key hash, never 0 for a used slot;
//!   0 means the slot was never used (and it never goes back to 0);
//! * touch tick: `elapsed_ms >> s` at the last update, with the smallest `s`
//!   that maps the window into `0..=127` (64 to 128 steps per window), used
//!   to pick the least recently active victim within a window;
//! * limited: the client was refused since its last admission (at or over
//!   its limit); the eviction spares it while a candidate below its limit
//!   remains;
//! * counts: requests, saturating at `2^20 - 1` (>= [`MAX_LIMIT`](crate::rule::window::MAX_LIMIT)).
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
//! most keys sit at a home slot; the first group on a tie), except while
//! the zone is less than 3/8 full: then a free home slot (the first
//! group's, else the second's) is taken without counting the groups' live
//! slots, so that a new client reads only the two lines of its home slots
//! (the choice of group only starts to matter for how many keys fit from
//! about a third full on; each process estimates the live fraction from
//! the home slots its new keys find, see `Table::note_homes`). Since a key
//! never lies past a slot that was never used when it was placed, and used
//! slots never become never-used again, a never-used slot ends the probe of
//! its group. A key is therefore found after reading about 1 to 3 slots
//! instead of scanning its groups from their start (`acquire` reads the
//! first group's home slot before working out the rest of the placement,
//! then the second group's home slot, and calls the general lookup only
//! for the rest), and in a table larger than the caches the second group's
//! home slot is prefetched so that both cache misses overlap. A new key in
//! a zone 3/8 full or more, or one whose home slots are both live, reads
//! all `2 * PROBE` slots to count live slots per group. This keeps a 1 MiB
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

mod acquire;
pub(crate) mod atomic;
mod carry;
mod dedup;
mod layout;
mod maintenance;
mod persist;
mod place;
#[cfg(any(test, feature = "testing"))]
mod region;
pub(crate) mod scan;
pub mod seed;
mod settle;
mod sip;
mod strict;
mod survey;
#[cfg(test)]
mod testing;

use core::fmt;
use core::marker::PhantomData;
use core::mem::size_of;

use portable_atomic::{AtomicU128, AtomicU32, AtomicU64, Ordering};

use crate::rule::mode::Mode;
use crate::rule::window::{FastDiv, Window};
use crate::table::atomic::Ops;

pub use acquire::{Admission, Answer, Events, Outcome, Question};
pub use carry::Carried;
pub use layout::{
    Counter, CHOICES, LAYOUT_VERSION, MAGIC, PROBE, SHARDS, SLOT_BYTES, SLOT_WORDS_SINCE,
};
pub use maintenance::Snapshot;
pub use persist::{RestoreError, Restored, SavedTable};

use layout::{tick_shift, Header, PREFETCH_BYTES};

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
                f.write_str(
                    "shared zone was created with another mode= (estimate or strict) or calendar=",
                )
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
    pub fn fingerprint(self) -> u64 {
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
    KeyHash(sip::SipKey::new(seed).hash(key))
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
    /// SipHash's state keyed by `seed`, made once (see [`Table::hash_key`]).
    sip: sip::SipKey,
    groups: u64,
    /// `tick = elapsed >> tick_shift` (see [`Table::tick`]).
    tick_shift: u32,
    /// How slots are loaded and CASed (see [`crate::table::atomic`]).
    ops: Ops,
    /// Division by the window length.
    wdiv: FastDiv,
    /// Prefetch the second group's home slot (tables larger than
    /// [`PREFETCH_BYTES`], unlikely to stay in a core's caches).
    prefetch: bool,
    /// The zone decides with the strict rule (see `strict.rs`).
    strict: bool,
    /// This process's estimate of the live fraction of the zone's slots,
    /// in 2^16ths, from the home slots its new keys found (see
    /// `Table::note_homes`). Process-local: each process (nginx worker)
    /// has its own `Table`, so the estimate costs no shared write.
    fill: AtomicU32,
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

/// The rule a table's header records: 0 the sliding estimate, 1 strict,
/// 2 a calendar's periods (`calendar=`), so that a zone is never adopted
/// by another rule of the same window length.
fn stored_mode(mode: Mode, window: Window) -> u64 {
    match (window.calendar_of(), mode) {
        (Some(_), _) => 2,
        (None, Mode::Strict) => 1,
        (None, Mode::Estimate) => 0,
    }
}

fn check_lock_free() -> Result<(), TableError> {
    if AtomicU128::is_lock_free() && AtomicU64::is_lock_free() {
        Ok(())
    } else {
        Err(TableError::NotLockFree)
    }
}

/// Returns (offset of the 64-byte aligned table start, capacity in slots).
fn geometry(region: *mut u8, len: usize) -> Result<(usize, usize), TableError> {
    let addr = region as usize;
    if !addr.is_multiple_of(16) {
        return Err(TableError::Misaligned);
    }
    let pad = addr.wrapping_neg() % 64;
    let cap = Table::capacity_for(len.saturating_sub(pad));
    if cap == 0 {
        return Err(TableError::TooSmall);
    }
    Ok((pad, cap))
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
            core::ptr::addr_of_mut!((*h).mode).write(stored_mode(mode, window));
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
        if stored_mode != self::stored_mode(mode, window) {
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
            sip: sip::SipKey::new(seed),
            groups: (cap / PROBE) as u64,
            tick_shift: tick_shift(window.ms()),
            ops: Ops::detect(),
            wdiv: FastDiv::new(window.ms()),
            prefetch: cap * SLOT_BYTES > PREFETCH_BYTES,
            strict: mode == Mode::Strict,
            fill: AtomicU32::new(0),
            _region: PhantomData,
        }
    }

    /// Whether the zone decides with the strict rule (`mode=strict`).
    #[inline]
    pub fn is_strict(&self) -> bool {
        self.strict
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
    /// The same value as [`hash_with_seed`] with the table's seed.
    #[inline(always)]
    pub fn hash_key(&self, key: &[u8]) -> KeyHash {
        KeyHash(self.sip.hash(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testing::*;

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
    fn seeds_change_hashes() {
        let a = hash_with_seed([1, 2], b"203.0.113.7");
        let b = hash_with_seed([1, 3], b"203.0.113.7");
        assert_ne!(a, b);
        assert_eq!(a, hash_with_seed([1, 2], b"203.0.113.7"));
        assert_ne!(hash_with_seed([0, 0], b""), hash_with_seed([0, 1], b""));
    }

    #[test]
    fn table_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Table<'static>>();
    }
}
