//! Per-client overrides of a zone: a fixed-capacity, lock-free table over a
//! caller-provided byte region (shared memory), keyed by the zone's key
//! fingerprint ([`KeyHash::fingerprint`]).
//!
//! An override replaces the limit of every `rate_limit_window` line of its
//! zone for one client ([`Action::Limit`]), admits it without counting
//! ([`Action::Exempt`]), or rejects it ([`Action::Block`] by an operator,
//! [`Action::Ban`] set by a limit's `ban=`), until an optional expiry
//! (UTC epoch ms; 0: none).
//!
//! # Layout and concurrency
//!
//! A 128-byte [`Header`] (magic, slot count, capacity, live count and the
//! counters of the metrics), then `slots` entries of 16 bytes, each one
//! 128-bit atomic word changed only by compare-and-swap: nothing is ever
//! locked, so a worker killed at any point blocks no one.
//!
//! Open addressing with linear probing over twice the capacity (rounded up
//! to a power of two). A slot goes from empty to live, from live to a
//! tombstone (removed or expired), and from a tombstone (or an expired
//! entry) to live again; it never becomes empty again, so a probe chain is
//! never cut. A lookup stops at the first empty slot.
//!
//! Two concurrent inserts of one client may claim two slots; each then looks
//! for another live entry of the same client, and the one farther from the
//! client's home slot gives way (tombstones its slot and updates the other
//! in place), so one entry remains.
//!
//! `live` counts live entries (expired ones until they are reaped): a zone
//! without overrides costs the request path one relaxed load of it.

pub mod body;
pub mod remote;

use core::sync::atomic::{AtomicU64, Ordering};
use portable_atomic::AtomicU128;

use crate::rule::window::MAX_LIMIT;
use crate::KeyHash;

/// Default `overrides=`: entries per zone.
pub const DEFAULT_OVERRIDES: usize = 1024;
/// Largest `overrides=`.
pub const MAX_OVERRIDES: usize = 1 << 20;
/// Largest expiry, UTC epoch ms (44 bits: the year 2527).
pub const MAX_EXPIRY_MS: u64 = (1 << EXPIRY_BITS) - 1;

const MAGIC: u64 = u64::from_le_bytes(*b"RLWOVR01");
const SLOT_BYTES: usize = 16;
const FP_MASK: u64 = (1 << 56) - 1;
const KIND_SHIFT: u32 = 56;
const EXPIRY_BITS: u32 = 44;
const LIMIT_SHIFT: u32 = EXPIRY_BITS;

const K_EMPTY: u64 = 0;
const K_TOMB: u64 = 1;
const K_LIMIT: u64 = 2;
const K_BLOCK: u64 = 3;
const K_EXEMPT: u64 = 4;
const K_BAN: u64 = 5;

/// A tombstone: a slot that held an entry (fingerprint 0).
const TOMB: u128 = (K_TOMB << KIND_SHIFT) as u128;

/// What an override does to its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Replaces the limit (requests per window, 0..=[`MAX_LIMIT`]).
    Limit(u32),
    /// Rejects every request (set by an operator).
    Block,
    /// Admits every request without counting it.
    Exempt,
    /// Rejects every request (set by a limit's `ban=`).
    Ban,
}

impl Action {
    /// The name used in JSON, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Action::Limit(_) => "limit",
            Action::Block => "block",
            Action::Exempt => "exempt",
            Action::Ban => "ban",
        }
    }

    /// Whether the client's requests are rejected.
    pub fn rejects(self) -> bool {
        matches!(self, Action::Block | Action::Ban)
    }
}

/// One override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The client's key fingerprint ([`KeyHash::fingerprint`], 56 bits,
    /// never 0).
    pub fp: u64,
    /// What it does.
    pub action: Action,
    /// When it ends, UTC epoch ms (0: never).
    pub expires_ms: u64,
}

impl Entry {
    /// Whether the entry has ended at `now_ms` (UTC epoch ms).
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms != 0 && now_ms >= self.expires_ms
    }

    /// Whole seconds left at `now_ms`, rounded up (None: no expiry).
    pub fn secs_left(&self, now_ms: u64) -> Option<u64> {
        (self.expires_ms != 0).then(|| self.expires_ms.saturating_sub(now_ms).div_ceil(1000))
    }

    fn encode(&self) -> u128 {
        let (kind, limit) = match self.action {
            Action::Limit(n) => (K_LIMIT, u64::from(n.min(MAX_LIMIT))),
            Action::Block => (K_BLOCK, 0),
            Action::Exempt => (K_EXEMPT, 0),
            Action::Ban => (K_BAN, 0),
        };
        let lo = (self.fp & FP_MASK) | (kind << KIND_SHIFT);
        let hi = self.expires_ms.min(MAX_EXPIRY_MS) | (limit << LIMIT_SHIFT);
        u128::from(lo) | (u128::from(hi) << 64)
    }
}

/// A slot's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Empty,
    Tomb,
    Live(Entry),
}

fn decode(w: u128) -> Slot {
    let lo = w as u64;
    let hi = (w >> 64) as u64;
    let fp = lo & FP_MASK;
    let action = match (lo >> KIND_SHIFT) & 0xf {
        K_EMPTY => return Slot::Empty,
        K_LIMIT => Action::Limit((hi >> LIMIT_SHIFT) as u32),
        K_BLOCK => Action::Block,
        K_EXEMPT => Action::Exempt,
        K_BAN => Action::Ban,
        _ => return Slot::Tomb,
    };
    Slot::Live(Entry {
        fp,
        action,
        expires_ms: hi & MAX_EXPIRY_MS,
    })
}

/// The override region's header (128 bytes).
#[repr(C, align(64))]
struct Header {
    magic: u64,
    /// Slots in the region (a power of two).
    slots: u64,
    /// Most live entries (`overrides=`).
    capacity: u64,
    /// Live entries (expired ones until reaped).
    live: AtomicU64,
    /// Bans set by `ban=` (`rate_limit_window_bans_total`).
    bans: AtomicU64,
    /// Changes by operators, by [`ChangeKind`].
    changes: [AtomicU64; 4],
    _pad: [u64; 7],
}

const HEADER_BYTES: usize = core::mem::size_of::<Header>();

/// An operator's change, as counted in
/// `rate_limit_window_overrides_total{action}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// A `{"limit": N}` set.
    Limit = 0,
    /// A `{"block": true}` set.
    Block = 1,
    /// An `{"exempt": true}` set.
    Exempt = 2,
    /// A removal (`DELETE …&override`, or a reset that lifted a ban).
    Remove = 3,
}

impl ChangeKind {
    /// Every kind, in the metrics' order.
    pub const ALL: [ChangeKind; 4] = [
        ChangeKind::Limit,
        ChangeKind::Block,
        ChangeKind::Exempt,
        ChangeKind::Remove,
    ];

    /// The `action` label.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Limit => "limit",
            ChangeKind::Block => "block",
            ChangeKind::Exempt => "exempt",
            ChangeKind::Remove => "remove",
        }
    }
}

/// Why a region cannot hold, or does not hold, an override table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverridesError {
    /// Not 64-byte aligned.
    Misaligned,
    /// Smaller than [`Overrides::bytes_for`] of the capacity.
    TooSmall,
    /// Capacity 0 or above [`MAX_OVERRIDES`].
    BadCapacity,
    /// `attach` found no override table (bad magic or geometry).
    NotFormatted,
}

impl core::fmt::Display for OverridesError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            OverridesError::Misaligned => "override region is not 64-byte aligned",
            OverridesError::TooSmall => "override region is too small",
            OverridesError::BadCapacity => "overrides= must be from 1 to 1048576",
            OverridesError::NotFormatted => "no override table in the zone",
        })
    }
}

/// The table is full: `capacity` live entries already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full {
    /// Most live entries (`overrides=`).
    pub capacity: usize,
}

/// A zone's override table. Cheap to copy; every process maps the same
/// region.
#[derive(Clone, Copy)]
pub struct Overrides<'a> {
    header: &'a Header,
    slots: &'a [AtomicU128],
}

impl core::fmt::Debug for Overrides<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Overrides")
            .field("capacity", &self.capacity())
            .field("live", &self.live())
            .finish()
    }
}

fn slots_for(capacity: usize) -> usize {
    (2 * capacity).next_power_of_two()
}

impl<'a> Overrides<'a> {
    /// Bytes a table of `capacity` entries needs (a 64-byte aligned
    /// region): the header and twice the capacity in 16-byte slots, rounded
    /// up to a power of two.
    pub fn bytes_for(capacity: usize) -> usize {
        HEADER_BYTES + slots_for(capacity.clamp(1, MAX_OVERRIDES)) * SLOT_BYTES
    }

    fn check_region(region: *mut u8, len: usize, capacity: usize) -> Result<(), OverridesError> {
        if capacity == 0 || capacity > MAX_OVERRIDES {
            return Err(OverridesError::BadCapacity);
        }
        if !(region as usize).is_multiple_of(64) {
            return Err(OverridesError::Misaligned);
        }
        if len < Self::bytes_for(capacity) {
            return Err(OverridesError::TooSmall);
        }
        if !AtomicU128::is_lock_free() {
            return Err(OverridesError::NotFormatted);
        }
        Ok(())
    }

    /// Formats `region` (zeroes it, writes the header) for `capacity`
    /// entries and returns the table.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'a`,
    /// and no one else may access it during `init`; afterwards only through
    /// `Overrides` (of any process).
    pub unsafe fn init(
        region: *mut u8,
        len: usize,
        capacity: usize,
    ) -> Result<Overrides<'a>, OverridesError> {
        Self::check_region(region, len, capacity)?;
        let bytes = Self::bytes_for(capacity);
        // SAFETY: the caller gives us `len >= bytes` writable bytes, alone.
        unsafe { core::ptr::write_bytes(region, 0, bytes) };
        let header = Header {
            magic: MAGIC,
            slots: slots_for(capacity) as u64,
            capacity: capacity as u64,
            live: AtomicU64::new(0),
            bans: AtomicU64::new(0),
            changes: Default::default(),
            _pad: [0; 7],
        };
        // SAFETY: region is 64-byte aligned and large enough for a Header.
        unsafe { region.cast::<Header>().write(header) };
        // SAFETY: just formatted, with the caller's guarantees.
        unsafe { Self::attach(region, len) }
    }

    /// Attaches to a region formatted by [`Overrides::init`] (possibly by
    /// another process, or an earlier nginx cycle).
    ///
    /// # Safety
    /// As for [`Overrides::init`], except that others may use it meanwhile.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Overrides<'a>, OverridesError> {
        if !(region as usize).is_multiple_of(64) || len < HEADER_BYTES {
            return Err(OverridesError::NotFormatted);
        }
        // SAFETY: aligned, in bounds; the header's plain fields never
        // change after init.
        let header = unsafe { &*region.cast::<Header>() };
        let slots = header.slots as usize;
        let cap = header.capacity as usize;
        if header.magic != MAGIC
            || slots != slots_for(cap.max(1))
            || Self::check_region(region, len, cap).is_err()
        {
            return Err(OverridesError::NotFormatted);
        }
        // SAFETY: `slots` 16-byte words follow the header, within `len`
        // (checked above), only ever accessed atomically.
        let slots = unsafe {
            core::slice::from_raw_parts(region.add(HEADER_BYTES).cast::<AtomicU128>(), slots)
        };
        Ok(Overrides { header, slots })
    }

    /// Most live entries (`overrides=`).
    pub fn capacity(&self) -> usize {
        self.header.capacity as usize
    }

    /// Live entries (expired ones until reaped): one relaxed load.
    #[inline(always)]
    pub fn live(&self) -> u64 {
        self.header.live.load(Ordering::Relaxed)
    }

    /// Bans set by `ban=` since the zone was created.
    pub fn bans_total(&self) -> u64 {
        self.header.bans.load(Ordering::Relaxed)
    }

    /// Operators' changes of `kind` since the zone was created.
    pub fn changes(&self, kind: ChangeKind) -> u64 {
        self.header.changes[kind as usize].load(Ordering::Relaxed)
    }

    /// Counts one operator's change.
    pub fn count_change(&self, kind: ChangeKind) {
        self.header.changes[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn home(&self, fp: u64) -> usize {
        // The fingerprint's bits are uniform: its low bits pick the slot.
        (fp as usize) & (self.slots.len() - 1)
    }

    /// The slots of `fp`'s probe chain, in order: (index, word).
    fn chain(&self, fp: u64) -> impl Iterator<Item = (usize, u128)> + '_ {
        let mask = self.slots.len() - 1;
        let home = self.home(fp);
        (0..self.slots.len()).map(move |i| {
            let idx = (home + i) & mask;
            (idx, self.slots[idx].load(Ordering::Acquire))
        })
    }

    /// Turns the entry `w` at `idx` into a tombstone; true if this call did.
    fn kill(&self, idx: usize, w: u128) -> bool {
        let ok = self.slots[idx]
            .compare_exchange(w, TOMB, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if ok {
            self.header.live.fetch_sub(1, Ordering::Relaxed);
        }
        ok
    }

    /// The live override of `fp` at `now_ms` (UTC epoch ms). Expired
    /// entries met on the way are reaped.
    pub fn get(&self, fp: u64, now_ms: u64) -> Option<Entry> {
        let fp = fp & FP_MASK;
        for (idx, w) in self.chain(fp) {
            match decode(w) {
                Slot::Empty => return None,
                Slot::Tomb => {}
                Slot::Live(e) if e.expired(now_ms) => {
                    self.kill(idx, w);
                }
                Slot::Live(e) if e.fp == fp => return Some(e),
                Slot::Live(_) => {}
            }
        }
        None
    }

    /// The override of a key hash: [`Overrides::get`] of its fingerprint.
    #[inline]
    pub fn get_hash(&self, hash: KeyHash, now_ms: u64) -> Option<Entry> {
        self.get(hash.fingerprint(), now_ms)
    }

    /// Sets `e` (replacing the client's entry, if any). Returns the live
    /// entry it replaced. Err when the table already holds `capacity` live
    /// entries of other clients.
    pub fn set(&self, e: Entry, now_ms: u64) -> Result<Option<Entry>, Full> {
        let e = Entry {
            fp: e.fp & FP_MASK,
            ..e
        };
        loop {
            match self.try_set(e, now_ms) {
                Step::Done(prev) => return Ok(prev),
                Step::Full => {
                    return Err(Full {
                        capacity: self.capacity(),
                    })
                }
                Step::Retry => core::hint::spin_loop(),
            }
        }
    }

    /// One attempt of [`Overrides::set`].
    fn try_set(&self, e: Entry, now_ms: u64) -> Step {
        let new = e.encode();
        let mut free = None;
        for (idx, w) in self.chain(e.fp) {
            match decode(w) {
                Slot::Live(old) if old.fp == e.fp => {
                    if self.slots[idx]
                        .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        return Step::Retry;
                    }
                    return Step::Done((!old.expired(now_ms)).then_some(old));
                }
                Slot::Live(old) if old.expired(now_ms) => {
                    self.kill(idx, w);
                    free = free.or(Some((idx, TOMB)));
                }
                Slot::Live(_) => {}
                Slot::Tomb => free = free.or(Some((idx, w))),
                Slot::Empty => {
                    free = free.or(Some((idx, w)));
                    break;
                }
            }
        }
        let Some((idx, w)) = free else {
            return Step::Full;
        };
        self.claim(idx, w, e, now_ms)
    }

    /// Claims the free slot `idx` (holding `w`) for `e`, within capacity.
    fn claim(&self, idx: usize, w: u128, e: Entry, now_ms: u64) -> Step {
        let cap = self.header.capacity;
        let live = &self.header.live;
        if live
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_err()
        {
            return Step::Full;
        }
        let new = e.encode();
        if self.slots[idx]
            .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            live.fetch_sub(1, Ordering::Relaxed);
            return Step::Retry;
        }
        if self.duplicate_before(idx, e.fp, now_ms) {
            // Another insert of this client won: give way, and update its
            // entry at the next attempt.
            self.kill(idx, new);
            return Step::Retry;
        }
        Step::Done(None)
    }

    /// Whether a live entry of `fp` sits nearer to its home than `mine`.
    fn duplicate_before(&self, mine: usize, fp: u64, now_ms: u64) -> bool {
        for (idx, w) in self.chain(fp) {
            if idx == mine {
                return false;
            }
            match decode(w) {
                Slot::Empty => return false,
                Slot::Live(o) if o.fp == fp && !o.expired(now_ms) => return true,
                _ => {}
            }
        }
        false
    }

    /// Removes `fp`'s override; returns it if it was live.
    pub fn remove(&self, fp: u64, now_ms: u64) -> Option<Entry> {
        let fp = fp & FP_MASK;
        let mut removed = None;
        for (idx, w) in self.chain(fp) {
            match decode(w) {
                Slot::Empty => break,
                Slot::Live(e) if e.fp == fp => removed = removed.or(self.kill_fp(idx, fp, now_ms)),
                _ => {}
            }
        }
        removed
    }

    /// Tombstones slot `idx` while it holds `fp` (retrying a lost CAS, as
    /// a concurrent `set` may have changed the entry); returns the entry
    /// if it was live.
    fn kill_fp(&self, idx: usize, fp: u64, now_ms: u64) -> Option<Entry> {
        loop {
            let w = self.slots[idx].load(Ordering::Acquire);
            match decode(w) {
                Slot::Live(e) if e.fp == fp => {
                    if self.kill(idx, w) {
                        return (!e.expired(now_ms)).then_some(e);
                    }
                }
                _ => return None,
            }
        }
    }

    /// Restores an entry saved earlier (a state file): [`Overrides::set`],
    /// except that an expired entry is skipped (Ok(false)).
    pub fn restore(&self, e: Entry, now_ms: u64) -> Result<bool, Full> {
        if e.fp & FP_MASK == 0 || e.expired(now_ms) {
            return Ok(false);
        }
        self.set(e, now_ms).map(|_| true)
    }

    /// Records a ban of `fp` until `until_ms`, unless the client has an
    /// operator's override (which wins). Returns whether it was recorded
    /// (a full table records nothing).
    pub fn ban(&self, fp: u64, until_ms: u64, now_ms: u64) -> bool {
        if self
            .get(fp, now_ms)
            .is_some_and(|e| e.action != Action::Ban)
        {
            return false;
        }
        let e = Entry {
            fp,
            action: Action::Ban,
            expires_ms: until_ms.max(now_ms + 1),
        };
        let ok = self.set(e, now_ms).is_ok();
        if ok {
            self.header.bans.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Every live entry at `now_ms`, in slot order.
    pub fn iter(&self, now_ms: u64) -> impl Iterator<Item = Entry> + '_ {
        self.page(0, usize::MAX, now_ms).0.into_iter()
    }

    /// Up to `max` live entries from slot `from` on, and the slot to ask
    /// from next (None: no more). Reaps the expired entries it passes.
    pub fn page(&self, from: usize, max: usize, now_ms: u64) -> (Vec<Entry>, Option<usize>) {
        let mut out = Vec::new();
        for idx in from..self.slots.len() {
            if out.len() >= max {
                return (out, Some(idx));
            }
            let w = self.slots[idx].load(Ordering::Acquire);
            match decode(w) {
                Slot::Live(e) if e.expired(now_ms) => {
                    self.kill(idx, w);
                }
                Slot::Live(e) => out.push(e),
                _ => {}
            }
        }
        (out, None)
    }

    /// Live bans at `now_ms` (a scan; the metrics' gauge).
    pub fn banned_now(&self, now_ms: u64) -> u64 {
        if self.live() == 0 {
            return 0;
        }
        self.iter(now_ms)
            .filter(|e| e.action == Action::Ban)
            .count() as u64
    }
}

/// What one attempt of `set` did.
enum Step {
    Done(Option<Entry>),
    Full,
    Retry,
}

#[cfg(test)]
mod tests;
