//! In-flight places (`in_flight=N`, `rate_limit_window_shed`): how many
//! requests of each client are in flight now, across every worker, exact
//! per client, and reclaimed with the process that holds them.
//!
//! * **Counts.** A client (a key hash) has its count in one entry of a
//!   **group**, one 128-bit atomic word of three entries (a 22-bit
//!   fingerprint and a 16-bit count each) and a 14-bit overflow count. A
//!   place is taken with one compare-and-swap on that word that checks the
//!   count against the limit and adds one: two workers can never both take
//!   the last place. An entry whose count is 0 is free.
//! * **Overflow.** When a client's group has no free entry, its place is
//!   counted in the next group, and the group's overflow count says so:
//!   while it is above 0, a client absent from the group goes to the next
//!   group too, so that a client's places are always counted in one entry
//!   (exact), never split over two.
//! * **Ledger.** Every place taken is also written in the ledger, one
//!   64-bit word per request in flight: its owner (the process that took
//!   it, and that process's generation), where it is counted (group,
//!   fingerprint, overflow) and a tag (the count of places taken then,
//!   modulo 256: a place given back twice finds a later place of the same
//!   owner and client in its word told apart, unless 256 places were
//!   taken between and it landed in the same word). The ledger word is
//!   written before the count
//!   and cleared after it, so a process killed at any point leaves nothing
//!   in the counts that its ledger words do not name.
//! * **Owners.** A process takes an owner (one of [`OWNERS`] words: its pid
//!   and a generation) before it takes a place ([`Places::start`]). When it
//!   dies, any process that finds its pid gone (a starting worker, the
//!   sweep of worker 0 once a second: [`Places::reclaim_dead`]) takes its
//!   places back out of the counts and frees the owner: a crash never
//!   leaks a place for longer than that. The generation keeps a reclaimer
//!   that is late from touching the places of the owner's next process.
//!
//! Lock-free: compare-and-swap and atomic stores only. The rare windows a
//! kill leaves (between a ledger word and its count) err towards a count
//! one short for a while, never towards a place that nobody gives back:
//! [`Places::take`]'s and [`Places::give`]'s docs say which.
//!
//! The region is a part of the zone ([`crate::shm::Parts`]), sized with it
//! ([`Places::bytes_for`]: a 64th of the zone, from 8 KB to 1 MB); a
//! `1m` zone counts 892 requests in flight at once, of up to 1,338
//! clients ([`Places::capacity`]), a `10m` one 10,112 of 15,168.

use core::sync::atomic::{AtomicU64, Ordering};
use portable_atomic::AtomicU128;

/// Owners: processes that hold places in one zone at once (workers of
/// every generation still running, after reloads).
pub const OWNERS: usize = 256;
/// The largest `in_flight=` (a 16-bit count).
pub const MAX_IN_FLIGHT: u32 = (1 << COUNT_BITS) - 1;

const FP_BITS: u32 = 22;
const FP_MASK: u64 = (1 << FP_BITS) - 1;
const COUNT_BITS: u32 = 16;
const ENTRY_BITS: u32 = FP_BITS + COUNT_BITS;
const ENTRY_MASK: u128 = (1 << ENTRY_BITS) - 1;
/// Entries a group.
const ENTRIES: u32 = 3;
const OVER_SHIFT: u32 = ENTRY_BITS * ENTRIES;
const OVER_MAX: u32 = (1 << (128 - OVER_SHIFT)) - 1;

/// A live word (owner or ledger).
const LIVE: u64 = 1 << 63;
const OWNER_SHIFT: u32 = 55;
const GEN_SHIFT: u32 = 47;
const OVER_BIT: u64 = 1 << 46;
const GROUP_SHIFT: u32 = FP_BITS;
/// Groups a region has at most (a 16-bit index in the ledger words).
const GROUP_MASK: u64 = (1 << 16) - 1;
/// A ledger word's tag: the count of places taken when it was, modulo
/// 256, so that a place given twice is not mistaken for a later place of
/// the same owner and client written in the same word.
const TAG_SHIFT: u32 = GROUP_SHIFT + 16;
const TAG_MASK: u64 = 0xff;

/// Ledger words tried for a free one, from the request's own start.
const PROBES: usize = 64;
/// Bytes of the header.
const HEADER_BYTES: usize = 64;
/// The smallest region.
const MIN_BYTES: usize = 8 << 10;
/// The largest region.
const MAX_BYTES: usize = 1 << 20;
const MAGIC: u64 = u64::from_le_bytes(*b"RLWPLC01");

/// The region's header: its geometry and the counters of the metrics.
#[repr(C, align(64))]
struct Header {
    magic: u64,
    /// Groups.
    groups: u64,
    /// Ledger words.
    ledger: u64,
    /// Places taken.
    taken: AtomicU64,
    /// Requests refused: their client's places were all taken.
    full: AtomicU64,
    /// Requests that found no room (ledger or counts full).
    no_room: AtomicU64,
    /// Places taken back from processes that died.
    reclaimed: AtomicU64,
    _pad: u64,
}

/// The in-flight places of a zone, over a region of it. Cheap to copy;
/// every process maps the same region.
#[derive(Clone, Copy)]
pub struct Places<'a> {
    header: &'a Header,
    owners: &'a [AtomicU64],
    groups: &'a [AtomicU128],
    ledger: &'a [AtomicU64],
}

/// The region is too small, misaligned, or holds no places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRegion;

/// A process that holds places: its owner word and generation. Kept by
/// the process (one per zone), from [`Places::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    index: u8,
    gen: u8,
}

impl Owner {
    /// As bits, never 0 (for an atomic of the process).
    pub fn to_bits(self) -> u32 {
        (u32::from(self.index) << 8 | u32::from(self.gen)) + 1
    }

    /// Back from [`Owner::to_bits`] (None: 0, no owner).
    pub fn from_bits(b: u32) -> Option<Owner> {
        let v = b.checked_sub(1).filter(|&v| v <= 0xffff)?;
        Some(Owner {
            index: (v >> 8) as u8,
            gen: v as u8,
        })
    }
}

/// A place taken, to give back with [`Places::give`]: its ledger word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    at: u32,
    word: u64,
}

/// What [`Places::take`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A place was taken.
    Taken(Place),
    /// The client's places are all taken: `held` requests in flight.
    Full {
        /// The client's requests in flight now.
        held: u32,
    },
    /// No room to count it (the ledger or the client's groups are full):
    /// the zone's `fail=` decides.
    NoRoom,
}

/// Counters of the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaceStats {
    /// Places taken.
    pub taken: u64,
    /// Requests refused: their client's places were all taken.
    pub full: u64,
    /// Requests that found no room to be counted.
    pub no_room: u64,
    /// Places taken back from processes that died.
    pub reclaimed: u64,
}

/// Entry `i` of a group word: (fingerprint, count).
fn entry(w: u128, i: u32) -> (u64, u32) {
    let e = (w >> (i * ENTRY_BITS)) & ENTRY_MASK;
    ((e as u64) & FP_MASK, (e >> FP_BITS) as u32)
}

/// `w` with entry `i` set to (`fp`, `count`).
fn with_entry(w: u128, i: u32, fp: u64, count: u32) -> u128 {
    let e = u128::from(fp & FP_MASK) | (u128::from(count) << FP_BITS);
    (w & !(ENTRY_MASK << (i * ENTRY_BITS))) | (e << (i * ENTRY_BITS))
}

fn overflow(w: u128) -> u32 {
    (w >> OVER_SHIFT) as u32
}

fn with_overflow(w: u128, n: u32) -> u128 {
    (w & !(u128::from(OVER_MAX) << OVER_SHIFT)) | (u128::from(n) << OVER_SHIFT)
}

/// The entry of `fp` in `w` (a count above 0), if any: (index, count).
#[inline]
fn find(w: u128, fp: u64) -> Option<(u32, u32)> {
    for i in 0..ENTRIES {
        let (f, c) = entry(w, i);
        if c > 0 && f == fp {
            return Some((i, c));
        }
    }
    None
}

/// A free entry of `w`, if any.
#[inline]
fn free(w: u128) -> Option<u32> {
    (0..ENTRIES).find(|&i| (w >> (i * ENTRY_BITS + FP_BITS)) as u32 & MAX_IN_FLIGHT == 0)
}

/// What one group says to a request of `fp` under `limit`.
enum Step {
    /// Counted here.
    Taken,
    /// Its places are all taken: this many in flight.
    Full(u32),
    /// Counted in the next group (this one's overflow was raised).
    Over,
    /// No room.
    NoRoom,
}

impl<'a> Places<'a> {
    /// Bytes of the places of a zone of `zone_bytes` (a 64th of it, from 8 KB
    /// to 1 MB, a multiple of 64).
    pub fn bytes_for(zone_bytes: usize) -> usize {
        (zone_bytes / 64).clamp(MIN_BYTES, MAX_BYTES) / 64 * 64
    }

    /// Bytes of places with two groups and `ledger` ledger words
    /// ([`Places::init_with`]), a multiple of 64.
    pub fn bytes_with(ledger: usize) -> usize {
        (HEADER_BYTES + OWNERS * 8 + 2 * 16 + ledger * 8).next_multiple_of(64)
    }

    /// Zeroes `len` bytes at `region` (no place taken) and attaches them.
    ///
    /// # Safety
    ///
    /// As [`Places::attach`]; nobody else may access the region meanwhile.
    pub unsafe fn init(region: *mut u8, len: usize) -> Result<Places<'a>, BadRegion> {
        if len < MIN_BYTES {
            return Err(BadRegion);
        }
        let groups =
            (len.saturating_sub(HEADER_BYTES + OWNERS * 8) / 2 / 16).min(GROUP_MASK as usize + 1);
        // SAFETY: the caller's.
        unsafe { Places::init_with(region, len, groups) }
    }

    /// [`Places::init`] with `groups` groups, the rest for the ledger: two
    /// groups count a few clients (a shed group's one), each ledger word a
    /// request in flight.
    ///
    /// # Safety
    ///
    /// As [`Places::init`].
    pub unsafe fn init_with(
        region: *mut u8,
        len: usize,
        groups: usize,
    ) -> Result<Places<'a>, BadRegion> {
        let fixed = HEADER_BYTES + OWNERS * 8 + groups.max(2) * 16;
        let aligned = (region as usize).is_multiple_of(64);
        if region.is_null() || len < fixed + 8 || !aligned || groups > GROUP_MASK as usize + 1 {
            return Err(BadRegion);
        }
        let groups = groups.max(2);
        let ledger = (len - fixed) / 8;
        // SAFETY: the caller's: `len` writable bytes, ours alone now.
        unsafe { core::ptr::write_bytes(region, 0, len) };
        let h = Header {
            magic: MAGIC,
            groups: groups as u64,
            ledger: ledger as u64,
            taken: AtomicU64::new(0),
            full: AtomicU64::new(0),
            no_room: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
            _pad: 0,
        };
        // SAFETY: aligned (checked) and within `len`.
        unsafe { region.cast::<Header>().write(h) };
        // SAFETY: just formatted, with the caller's guarantees.
        unsafe { Places::attach(region, len) }
    }

    /// The places over `len` bytes at `region`, as [`Places::init`] left
    /// them (possibly by another process, or an earlier cycle).
    ///
    /// # Safety
    ///
    /// `region` must be valid for reads and writes of `len` bytes for `'a`,
    /// and only accessed through [`Places`] (of any process) meanwhile.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Places<'a>, BadRegion> {
        if region.is_null() || len < HEADER_BYTES || !(region as usize).is_multiple_of(64) {
            return Err(BadRegion);
        }
        if !AtomicU128::is_lock_free() {
            return Err(BadRegion);
        }
        // SAFETY: aligned and in bounds; its plain fields never change
        // after init.
        let header = unsafe { &*region.cast::<Header>() };
        let (g, l) = (header.groups as usize, header.ledger as usize);
        let need = HEADER_BYTES + OWNERS * 8 + g * 16 + l * 8;
        if header.magic != MAGIC || g < 2 || g > GROUP_MASK as usize + 1 || l == 0 || need > len {
            return Err(BadRegion);
        }
        // SAFETY: the owners, groups and ledger follow the header within
        // `len` (checked), each aligned (64, then multiples of 16 and 8),
        // only ever accessed atomically; every bit pattern is valid.
        unsafe {
            let owners = region.add(HEADER_BYTES).cast::<AtomicU64>();
            let groups = owners.add(OWNERS).cast::<AtomicU128>();
            let ledger = groups.add(g).cast::<AtomicU64>();
            Ok(Places {
                header,
                owners: core::slice::from_raw_parts(owners, OWNERS),
                groups: core::slice::from_raw_parts(groups, g),
                ledger: core::slice::from_raw_parts(ledger, l),
            })
        }
    }

    /// (requests in flight at once, clients with requests in flight at
    /// once) the region can count at most: its ledger words, its entries.
    pub fn capacity(&self) -> (usize, usize) {
        (self.ledger.len(), self.groups.len() * ENTRIES as usize)
    }

    /// The group and fingerprint of `key` (a key hash).
    fn locate(&self, key: u64) -> (usize, u64) {
        let g = ((key & 0xffff_ffff) * self.groups.len() as u64) >> 32;
        (g as usize, key >> (64 - FP_BITS))
    }

    /// The group after `g`, where `g`'s overflow is counted.
    fn next(&self, g: usize) -> usize {
        (g + 1) % self.groups.len()
    }

    /// The owner `process` (its pid) holds places under, first reclaiming
    /// the places of every owner whose process is gone (`alive(pid)`
    /// false). None: every owner is taken.
    pub fn start(&self, pid: u32, alive: impl Fn(u32) -> bool) -> Option<Owner> {
        self.reclaim_dead(alive);
        for (i, o) in self.owners.iter().enumerate() {
            let w = o.load(Ordering::Acquire);
            if w & LIVE != 0 {
                continue;
            }
            let gen = ((w >> 32) as u8).wrapping_add(1);
            let new = LIVE | u64::from(gen) << 32 | u64::from(pid);
            if o.compare_exchange(w, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(Owner {
                    index: i as u8,
                    gen,
                });
            }
        }
        None
    }

    /// A process exiting: gives back what `owner` still holds, and frees it.
    pub fn stop(&self, owner: Owner) {
        let o = &self.owners[usize::from(owner.index)];
        let w = o.load(Ordering::Acquire);
        if w & LIVE == 0 || (w >> 32) as u8 != owner.gen {
            return;
        }
        self.reclaim(owner);
        let _ = o.compare_exchange(
            w,
            w & !LIVE & !0xffff_ffff,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Takes back the places of every owner whose process is gone
    /// (`alive(pid)` false) and frees the owner; returns the places taken
    /// back.
    pub fn reclaim_dead(&self, alive: impl Fn(u32) -> bool) -> u64 {
        let mut n = 0;
        for (i, o) in self.owners.iter().enumerate() {
            let w = o.load(Ordering::Acquire);
            if w & LIVE == 0 || alive(w as u32) {
                continue;
            }
            let owner = Owner {
                index: i as u8,
                gen: (w >> 32) as u8,
            };
            n += self.reclaim(owner);
            // Keep the generation: the next process of this owner gets the
            // one after it, whose ledger words a late reclaimer leaves alone.
            let _ = o.compare_exchange(
                w,
                w & !LIVE & !0xffff_ffff,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        n
    }

    /// Takes back every place of `owner` (its generation's).
    fn reclaim(&self, owner: Owner) -> u64 {
        let mut n = 0;
        for e in self.ledger {
            let w = e.load(Ordering::Acquire);
            if w & LIVE == 0 || owner_of(w) != owner {
                continue;
            }
            // The word first: of two reclaimers, one takes it back.
            if e.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.uncount(w);
                n += 1;
            }
        }
        self.header.reclaimed.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// `owner` takes a place for a request of `key` (a key hash) if fewer
    /// than `limit` of its requests are in flight (a `limit` of 0 admits
    /// none; above [`MAX_IN_FLIGHT`] it is that).
    ///
    /// The ledger word is written first: a process killed before the count
    /// leaves its ledger naming a place that is not counted, whose reclaim
    /// takes one from the client's count (at worst a place too many for a
    /// while), never a count that nobody takes back.
    pub fn take(&self, owner: Owner, key: u64, limit: u32) -> Take {
        let (g, fp) = self.locate(key);
        if limit == 0 {
            self.header.full.fetch_add(1, Ordering::Relaxed);
            return Take::Full {
                held: self.held(key),
            };
        }
        let limit = limit.min(MAX_IN_FLIGHT);
        let word = LIVE
            | u64::from(owner.index) << OWNER_SHIFT
            | u64::from(owner.gen) << GEN_SHIFT
            | (g as u64 & GROUP_MASK) << GROUP_SHIFT
            | (self.header.taken.load(Ordering::Relaxed) & TAG_MASK) << TAG_SHIFT
            | fp;
        let Some(at) = self.claim(word) else {
            self.header.no_room.fetch_add(1, Ordering::Relaxed);
            return Take::NoRoom;
        };
        let slot = &self.ledger[at];
        let step = match self.take_in(g, fp, limit, slot, word) {
            Step::Over => self.take_over(g, fp, limit),
            s => s,
        };
        let taken = match step {
            Step::Taken => {
                self.header.taken.fetch_add(1, Ordering::Relaxed);
                return Take::Taken(Place {
                    at: at as u32,
                    word: slot.load(Ordering::Relaxed),
                });
            }
            Step::Full(held) => {
                self.header.full.fetch_add(1, Ordering::Relaxed);
                Take::Full { held }
            }
            Step::NoRoom | Step::Over => {
                self.header.no_room.fetch_add(1, Ordering::Relaxed);
                Take::NoRoom
            }
        };
        slot.store(0, Ordering::Release);
        taken
    }

    /// A free ledger word for `word`, claimed; its index. The search starts
    /// at a place drawn from the word and the count of places taken, so
    /// that one client's requests spread over the ledger.
    fn claim(&self, word: u64) -> Option<usize> {
        let len = self.ledger.len();
        let salt = self.header.taken.load(Ordering::Relaxed);
        let mixed =
            (word ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let start = (mixed >> 32) as usize % len;
        (0..PROBES.min(len)).map(|i| (start + i) % len).find(|&i| {
            self.ledger[i]
                .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// The request's place in its own group `g`, or its overflow raised
    /// (with the ledger word `slot` marked first: `word` is its plain form).
    fn take_in(&self, g: usize, fp: u64, limit: u32, slot: &AtomicU64, word: u64) -> Step {
        let a = &self.groups[g];
        let mut w = a.load(Ordering::Acquire);
        loop {
            let (next, step) = match find(w, fp) {
                Some((_, c)) if c >= limit => return Step::Full(c),
                Some((i, c)) => (with_entry(w, i, fp, c + 1), Step::Taken),
                None => match free(w) {
                    Some(i) if overflow(w) == 0 => (with_entry(w, i, fp, 1), Step::Taken),
                    _ if overflow(w) >= OVER_MAX => return Step::NoRoom,
                    _ => (with_overflow(w, overflow(w) + 1), Step::Over),
                },
            };
            // The ledger says where the place is counted before it is.
            let mark = if matches!(step, Step::Over) {
                word | OVER_BIT
            } else {
                word
            };
            slot.store(mark, Ordering::Release);
            match a.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return step,
                Err(now) => w = now,
            }
        }
    }

    /// The request's place in the group after `g`, whose overflow was
    /// raised for it (and is lowered again if it is not taken).
    fn take_over(&self, g: usize, fp: u64, limit: u32) -> Step {
        let a = &self.groups[self.next(g)];
        let mut w = a.load(Ordering::Acquire);
        let step = loop {
            let next = match find(w, fp) {
                Some((_, c)) if c >= limit => break Step::Full(c),
                Some((i, c)) => with_entry(w, i, fp, c + 1),
                None => match free(w) {
                    Some(i) => with_entry(w, i, fp, 1),
                    None => break Step::NoRoom,
                },
            };
            match a.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Step::Taken,
                Err(now) => w = now,
            }
        };
        self.lower_overflow(g);
        step
    }

    fn lower_overflow(&self, g: usize) {
        let a = &self.groups[g];
        let mut w = a.load(Ordering::Acquire);
        while overflow(w) > 0 {
            let next = with_overflow(w, overflow(w) - 1);
            match a.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Takes one from the count of `fp` in group `g` (nothing if it has none).
    fn lower(&self, g: usize, fp: u64) {
        let a = &self.groups[g];
        let mut w = a.load(Ordering::Acquire);
        while let Some((i, c)) = find(w, fp) {
            let next = with_entry(w, i, fp, c - 1);
            match a.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Takes the place that ledger word `w` names out of the counts.
    fn uncount(&self, w: u64) {
        let g = ((w >> GROUP_SHIFT) & GROUP_MASK) as usize % self.groups.len();
        let fp = w & FP_MASK;
        if w & OVER_BIT != 0 {
            self.lower(self.next(g), fp);
            self.lower_overflow(g);
        } else {
            self.lower(g, fp);
        }
    }

    /// Gives back a place taken by this process (a request ended). Nothing
    /// when its ledger word is gone (reclaimed). The count first, then the
    /// ledger word: a process killed between them has its reclaim take
    /// one more from the client's count (a place too many for a while),
    /// never a count left that nobody gives back.
    pub fn give(&self, p: Place) {
        let Some(slot) = self.ledger.get(p.at as usize) else {
            return;
        };
        if slot.load(Ordering::Acquire) != p.word {
            return;
        }
        self.uncount(p.word);
        let _ = slot.compare_exchange(p.word, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Requests of `key` in flight now, by every process.
    pub fn held(&self, key: u64) -> u32 {
        let (g, fp) = self.locate(key);
        let w = self.groups[g].load(Ordering::Acquire);
        if let Some((_, c)) = find(w, fp) {
            return c;
        }
        if overflow(w) == 0 {
            return 0;
        }
        let s = self.groups[self.next(g)].load(Ordering::Acquire);
        find(s, fp).map_or(0, |(_, c)| c)
    }

    /// Requests in flight now, every client's (a scan of the ledger: for the
    /// metrics).
    pub fn in_flight(&self) -> u64 {
        self.ledger
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) & LIVE != 0)
            .count() as u64
    }

    /// The counters of the metrics.
    pub fn stats(&self) -> PlaceStats {
        let h = self.header;
        PlaceStats {
            taken: h.taken.load(Ordering::Relaxed),
            full: h.full.load(Ordering::Relaxed),
            no_room: h.no_room.load(Ordering::Relaxed),
            reclaimed: h.reclaimed.load(Ordering::Relaxed),
        }
    }
}

/// The owner of a live ledger word.
fn owner_of(w: u64) -> Owner {
    Owner {
        index: (w >> OWNER_SHIFT) as u8,
        gen: (w >> GEN_SHIFT) as u8,
    }
}

#[cfg(test)]
#[path = "places_tests.rs"]
mod tests;
