//! Per-client overrides of a zone: a fixed-capacity, lock-free table over a
//! caller-provided byte region (shared memory), keyed by the zone's key
//! fingerprint ([`KeyHash::fingerprint`]) or a range's id ([`range`]).
//!
//! An override replaces the limit of every `rate_limit_window` line of its
//! zone for one client ([`Action::Limit`]), or the `in_flight=` value of
//! every line of its zone that has one ([`Action::InFlight`]), admits it
//! without counting ([`Action::Exempt`]), or rejects it ([`Action::Block`]
//! by an operator, [`Action::Ban`] set by a limit's `ban=`), until an
//! optional expiry (UTC epoch ms; 0: none). One override is one action
//! (see `slot.rs` for why a `limit` and an `in_flight` are not one entry).
//!
//! # Layout and concurrency
//!
//! A 128-byte [`Header`] (magic, slot count, capacity, live count, the
//! counters of the metrics, the version clock), the live ranges per prefix
//! ([`range`]), then `slots` words of 16 bytes and `slots` version words
//! of 8 bytes ([`slot`]). Each is an atomic changed only by
//! compare-and-swap: nothing is ever locked, so a worker killed at any
//! point blocks no one.
//!
//! An entry lives in one of two candidate groups of 16 slots (picked by
//! its id's bits, as the slot table's keys are), in any slot of them: a
//! lookup reads the 32 slots, whatever the table's history, and a removed
//! or expired entry's slot is free again at once. There is no probe chain
//! to keep, so no tombstone: the cost of a lookup is bounded by
//! construction (32 loads), the same in a fresh table as after millions of
//! entries came and went. A new entry takes a free slot of the group with
//! fewer entries ("power of two choices", twice as many slots as
//! `overrides=`): both groups full of live entries is what a full table
//! looks like, and with 8 entries a group on average it practically never
//! happens before `overrides=` live entries.
//!
//! Two concurrent inserts of one client may claim two slots; each then looks
//! for another entry of the same client earlier in the candidate order
//! (the first group's slots, then the second's): the later one gives way,
//! and updates the earlier one. The first entry of an id in that order is
//! the id's entry; a write kills any later one it meets.
//!
//! # Versions
//!
//! Every state of an entry, a removal included, carries a version (60
//! bits): the fleet's sequence of the change that gave it, or a change
//! made here not yet acknowledged by Redis (see [`order`]: the fleet's
//! order is Redis's, never a gateway's clock). A state read from the
//! fleet applies only over an older sequence ([`Overrides::apply_remote`]),
//! never over a change of this gateway still on its way. A removal leaves
//! its id and version in the slot ([`slot::Slot::Gone`]) until an insert
//! takes the slot.
//!
//! `live` counts live entries (expired ones until they are reaped): a zone
//! without overrides costs the request path one relaxed load of it.

pub mod body;
pub mod order;
pub mod range;
pub mod remote;
pub(crate) mod slot;
mod write;

use core::sync::atomic::{AtomicU64, Ordering};
use portable_atomic::AtomicU128;

use crate::table::atomic::Ops;
use crate::KeyHash;
use range::{PrefixCounts, PREFIX_BYTES};
pub use slot::MAX_VERSION;
use slot::{decode, id_of, Slot, GROUP, ID_MASK};
use write::Reap;

/// Default `overrides=`: entries per zone.
pub const DEFAULT_OVERRIDES: usize = 1024;
/// Largest `overrides=`.
pub const MAX_OVERRIDES: usize = 1 << 20;
/// Largest expiry, UTC epoch ms (44 bits: the year 2527).
pub const MAX_EXPIRY_MS: u64 = (1 << 44) - 1;
/// Largest id: a fingerprint (56 bits) with the range bit.
pub const MAX_ID: u64 = ID_MASK;

const MAGIC: u64 = u64::from_le_bytes(*b"RLWOVR03");
const SLOT_BYTES: usize = 16;
const VERSION_BYTES: usize = 8;
/// Bits of a version below the ms (a sequence).
const SEQ_BITS: u32 = 12;
/// Shortest time between two reaps of the whole table by a full one (ms).
const FULL_REAP_MS: u64 = 1_000;

/// What an override does to its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Replaces the limit (requests per window, 0..=[`MAX_LIMIT`](crate::MAX_LIMIT)).
    Limit(u32),
    /// Rejects every request (set by an operator).
    Block,
    /// Admits every request without counting it.
    Exempt,
    /// Rejects every request (set by a limit's `ban=`).
    Ban,
    /// Replaces the `in_flight=` value (requests in flight at once,
    /// 0..=[`MAX_IN_FLIGHT`](crate::shm::places::MAX_IN_FLIGHT)) of every
    /// line of the zone that has one; the lines' `limit=` stays.
    InFlight(u32),
}

impl Action {
    /// The name used in JSON, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Action::Limit(_) => "limit",
            Action::Block => "block",
            Action::Exempt => "exempt",
            Action::Ban => "ban",
            Action::InFlight(_) => "in_flight",
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
    /// never 0), or a range's id ([`range`], bit 56 set).
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
}

/// The override region's header (128 bytes).
#[repr(C, align(64))]
struct Header {
    magic: u64,
    /// Slots in the region (a power of two, two groups at least).
    slots: u64,
    /// Most live entries (`overrides=`).
    capacity: u64,
    /// Live entries (expired ones until reaped).
    live: AtomicU64,
    /// Bans set by `ban=` (`rate_limit_window_bans_total`).
    bans: AtomicU64,
    /// Changes by operators, by [`ChangeKind`].
    changes: [AtomicU64; 5],
    /// The last local change number drawn (see [`order`]).
    clock: AtomicU64,
    /// When a full table last reaped every expired entry (UTC epoch ms).
    reaped_at: AtomicU64,
    /// Values read from the fleet and ignored (not ours: another
    /// `secret=`, malformed or hostile).
    ignored: AtomicU64,
    /// `ignored` when it was last logged.
    ignored_logged: AtomicU64,
    /// Times this gateway wrote its state back to a Redis that lost it.
    heals: AtomicU64,
    _pad: u64,
}

const HEADER_BYTES: usize = core::mem::size_of::<Header>();
const _: () = assert!(HEADER_BYTES == 128);

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
    /// An `{"in_flight": N}` set.
    InFlight = 4,
}

impl ChangeKind {
    /// Every kind, in the metrics' order.
    pub const ALL: [ChangeKind; 5] = [
        ChangeKind::Limit,
        ChangeKind::InFlight,
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
            ChangeKind::InFlight => "in_flight",
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

/// The table is full: `capacity` live entries already (or, practically
/// never before that, both candidate groups of the client full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full {
    /// Most live entries (`overrides=`).
    pub capacity: usize,
}

/// A client's state as the table holds it, with its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// Its entry (None: removed, or none).
    pub entry: Option<Entry>,
    /// The state's version (None: unknown: never set here, or a change in
    /// flight).
    pub version: Option<u64>,
}

/// A zone's override table. Cheap to copy; every process maps the same
/// region.
#[derive(Clone, Copy)]
pub struct Overrides<'a> {
    /// The slots' 16-byte loads and CASes (chosen once, see the table's
    /// `atomic.rs`).
    ops: Ops,
    header: &'a Header,
    prefixes: &'a PrefixCounts,
    slots: &'a [AtomicU128],
    versions: &'a [AtomicU64],
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
    (2 * capacity).next_power_of_two().max(2 * GROUP)
}

impl<'a> Overrides<'a> {
    /// Bytes a table of `capacity` entries needs (a 64-byte aligned
    /// region): the header, the range counts, and twice the capacity
    /// (rounded up to a power of two, 32 at least) in 16-byte slots and
    /// 8-byte versions.
    pub fn bytes_for(capacity: usize) -> usize {
        let n = slots_for(capacity.clamp(1, MAX_OVERRIDES));
        HEADER_BYTES + PREFIX_BYTES + n * (SLOT_BYTES + VERSION_BYTES)
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
            clock: AtomicU64::new(0),
            reaped_at: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            ignored_logged: AtomicU64::new(0),
            heals: AtomicU64::new(0),
            _pad: 0,
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
        let n = header.slots as usize;
        let cap = header.capacity as usize;
        if header.magic != MAGIC
            || n != slots_for(cap.max(1))
            || Self::check_region(region, len, cap).is_err()
        {
            return Err(OverridesError::NotFormatted);
        }
        // SAFETY: the parts follow the header within `len` (checked
        // above: `bytes_for(cap)`), each only ever accessed atomically;
        // the slots start 64-byte aligned (the header and the counts are
        // multiples of 64 bytes), the versions after them 8-byte aligned.
        unsafe {
            let counts = region.add(HEADER_BYTES);
            let slots = counts.add(PREFIX_BYTES);
            let versions = slots.add(n * SLOT_BYTES);
            Ok(Overrides {
                ops: Ops::detect(),
                header,
                prefixes: &*counts.cast::<PrefixCounts>(),
                slots: core::slice::from_raw_parts(slots.cast::<AtomicU128>(), n),
                versions: core::slice::from_raw_parts(versions.cast::<AtomicU64>(), n),
            })
        }
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

    /// A new version for a change made here at `now_ms` (UTC epoch ms): a
    /// local change ([`order::LOCAL`]) numbered after every one drawn here
    /// before.
    pub fn next_version(&self, now_ms: u64) -> u64 {
        let base = now_ms.min(MAX_EXPIRY_MS) << SEQ_BITS;
        let prev = self
            .header
            .clock
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(base.max(c + 1).min(order::LOCAL - 1))
            })
            .unwrap_or(0);
        base.max(prev + 1).min(order::LOCAL - 1) | order::LOCAL
    }

    /// Counts `n` values read from the fleet and ignored.
    pub fn count_ignored(&self, n: u64) {
        self.header.ignored.fetch_add(n, Ordering::Relaxed);
    }

    /// Values read from the fleet and ignored since the zone was created.
    pub fn ignored(&self) -> u64 {
        self.header.ignored.load(Ordering::Relaxed)
    }

    /// Some(the count) the first time values were ignored (the caller
    /// logs it: once per zone), else None.
    pub fn ignored_to_log(&self) -> Option<u64> {
        let n = self.ignored();
        (n != 0 && self.header.ignored_logged.swap(n, Ordering::Relaxed) == 0).then_some(n)
    }

    /// Counts one write-back of this gateway's state (a Redis that lost it).
    pub fn count_heal(&self) {
        self.header.heals.fetch_add(1, Ordering::Relaxed);
    }

    /// Write-backs of this gateway's state since the zone was created.
    pub fn heals(&self) -> u64 {
        self.header.heals.load(Ordering::Relaxed)
    }

    /// The id's two candidate groups (their first slots), in order.
    #[inline(always)]
    fn groups(&self, id: u64) -> [usize; 2] {
        let groups = self.slots.len() / GROUP;
        // The ids' low bits are uniform for fingerprints, not for ranges
        // (addresses): mix them (splitmix64's finalizer).
        let mut h = id ^ (id >> 30);
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let g1 = (h as usize) & (groups - 1);
        let mut g2 = ((h >> 32) as usize) & (groups - 1);
        if g2 == g1 {
            g2 = g1 ^ 1;
        }
        [g1 * GROUP, g2 * GROUP]
    }

    /// The id's two candidate groups' slots, in order: 32 indices.
    #[inline(always)]
    fn candidates(&self, id: u64) -> impl Iterator<Item = usize> {
        let [a, b] = self.groups(id);
        (a..a + GROUP).chain(b..b + GROUP)
    }

    /// Slot `idx`'s word (one 16-byte atomic load).
    #[inline(always)]
    fn load(&self, idx: usize) -> u128 {
        self.ops.load(&self.slots[idx])
    }

    /// The first slot of `id` in candidate order, with its word.
    #[inline(always)]
    fn find(&self, id: u64) -> Option<(usize, u128)> {
        for g in self.groups(id) {
            let group = &self.slots[g..g + GROUP];
            for (i, a) in group.iter().enumerate() {
                let w = self.ops.load(a);
                if id_of(w) == id {
                    return Some((g + i, w));
                }
            }
        }
        None
    }

    /// The live override of `id` (a fingerprint or a range's id) at
    /// `now_ms` (UTC epoch ms): 32 slots read at most. An expired entry
    /// found is reaped.
    #[inline]
    pub fn get(&self, id: u64, now_ms: u64) -> Option<Entry> {
        let (idx, w) = self.find(id & ID_MASK)?;
        match decode(w) {
            Slot::Live(e) if e.expired(now_ms) => {
                self.reap(idx, w);
                None
            }
            Slot::Live(e) => Some(e),
            _ => None,
        }
    }

    /// The override of a key hash: [`Overrides::get`] of its fingerprint.
    #[inline]
    pub fn get_hash(&self, hash: KeyHash, now_ms: u64) -> Option<Entry> {
        self.get(hash.fingerprint(), now_ms)
    }

    /// The state of `id` and its version (for the sync's write): its
    /// entry as set (expired or not), or None if removed or absent.
    pub fn versioned(&self, id: u64) -> Versioned {
        let id = id & ID_MASK;
        let Some((idx, w)) = self.find(id) else {
            return Versioned {
                entry: None,
                version: None,
            };
        };
        let version = self.version_at(idx, w);
        match decode(w) {
            Slot::Live(e) => Versioned {
                entry: Some(e),
                version,
            },
            _ => Versioned {
                entry: None,
                version,
            },
        }
    }

    /// Sets `e` here (replacing the client's entry, if any), as a change
    /// made at `now_ms` (a new version). Returns the live entry it
    /// replaced. Err when the table already holds `capacity` live entries
    /// of other clients.
    pub fn set(&self, e: Entry, now_ms: u64) -> Result<Option<Entry>, Full> {
        let v = self.next_version(now_ms);
        self.write_local(Some(e), e.fp, (v, Reap::Always), now_ms)
    }

    /// Removes `id`'s override, as a change made at `now_ms`; returns it
    /// if it was live. The removal's version stays in the slot
    /// ([`Slot::Gone`]) for the fleet.
    pub fn remove(&self, id: u64, now_ms: u64) -> Option<Entry> {
        let v = self.next_version(now_ms);
        self.write_local(None, id, (v, Reap::Always), now_ms)
            .ok()
            .flatten()
    }

    /// Restores an entry saved earlier (a state file), at version 0 (the
    /// fleet's state, if any, is newer; written back where Redis has none
    /// when it lost its data): an expired entry is skipped
    /// (Ok(false)).
    pub fn restore(&self, e: Entry, now_ms: u64) -> Result<bool, Full> {
        if e.fp & ID_MASK == 0 || e.expired(now_ms) {
            return Ok(false);
        }
        self.write_local(Some(e), e.fp, (0, Reap::Always), now_ms)
            .map(|_| true)
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
        let v = self.next_version(now_ms);
        let ok = self
            .write_local(Some(e), fp, (v, Reap::Throttled), now_ms)
            .is_ok();
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
            let w = self.load(idx);
            match decode(w) {
                Slot::Live(e) if e.expired(now_ms) => {
                    self.reap(idx, w);
                }
                Slot::Live(e) if self.is_first(idx, e.fp) => out.push(e),
                _ => {}
            }
        }
        (out, None)
    }

    /// Whether slot `idx` is the first of `id` in its candidate order (a
    /// later one is a stale duplicate, killed by the next write).
    fn is_first(&self, idx: usize, id: u64) -> bool {
        self.find(id).is_none_or(|(i, _)| i == idx)
    }

    /// Reaps the expired entries of `count` slots from `from` on (worker
    /// 0's sweep: the request path's one load comes back once every entry
    /// ended); returns where the next call starts (wrapping) and how many
    /// it reaped.
    pub fn reap_expired(&self, from: usize, count: usize, now_ms: u64) -> (usize, usize) {
        let n = self.slots.len();
        let from = from % n;
        let mut reaped = 0;
        for idx in (from..n).take(count) {
            let w = self.load(idx);
            if let Slot::Live(e) = decode(w) {
                if e.expired(now_ms) && self.reap(idx, w) {
                    reaped += 1;
                }
            }
        }
        let next = from + count.min(n - from);
        (if next >= n { 0 } else { next }, reaped)
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

    /// Slots of the table (the listing's `from=` runs below it).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;
