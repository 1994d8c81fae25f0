//! In-flight places (`in_flight=N`, `rate_limit_window_shed`): how many
//! requests of each client are in flight now, across every worker, exact
//! per client, and reclaimed with the process that holds them.
//!
//! * **Counts.** A client (a key hash) has its count in one entry of a
//!   **group**, one 128-bit atomic word of three entries (a 22-bit
//!   fingerprint and a 16-bit count each) and a 14-bit overflow count. A
//!   place is taken with one compare-and-swap on that word that checks the
//!   count against the limit and adds one: two workers can never both take
//!   the last place. An entry whose count is 0 is free; a client back
//!   while its group has no overflow is counted again in the free entry
//!   that last held it, if no other took it (its fingerprint is still
//!   there: one step up).
//! * **Overflow.** When a client's group has no free entry, its place is
//!   counted in the next group (up to [`MAX_DEPTH`] groups on), and each
//!   group passed has its overflow count raised in the same
//!   compare-and-swap that found the client absent: while it is above 0, a
//!   client absent from the group is looked for in the next group too, so
//!   that a client's places are always counted in one entry (exact), never
//!   split over two.
//! * **Ledger.** Every place taken is also written in the ledger, one
//!   64-bit word per request in flight: the pid of the process that took
//!   it, where it is counted (the key's 13-bit group hash, its
//!   fingerprint, how many groups on) and a 3-bit tag, one more than the
//!   word's last (a freed word keeps its tag): a place given back twice
//!   finds a later place of the same process and client in its word told
//!   apart, unless the word was taken 8 times between. The
//!   ledger word is written before the count and cleared after it, so a
//!   process killed at any point leaves nothing in the counts that its
//!   ledger words do not name.
//! * **No owners to run out of.** A place names its process by pid, and
//!   nothing else is held per process: any number of processes (workers of
//!   every generation still running after reloads, at any
//!   `worker_processes`) take places at once. When a process is gone, any
//!   process that finds its pid gone (a starting process, the sweep of
//!   worker 0 once a second: [`Places::reclaim_dead`]) takes its places
//!   back out of the counts: a crash never leaks a place for longer than
//!   that. An exiting process gives back what it still holds
//!   ([`Places::stop`]).
//! * **Carried over.** The group hash, not the group, is in the ledger, so
//!   a zone of another size can count the same places
//!   ([`Places::carry_from`]: a resize on reload), each still under its
//!   process, reclaimed when that process is gone.
//!
//! Lock-free: compare-and-swap and atomic stores only. The rare windows a
//! kill leaves (between a ledger word and its count) err towards a count
//! one short for a while, never towards a place that nobody gives back:
//! [`Places::take`]'s and [`Places::give`]'s docs say which.
//!
//! The region is a part of the zone ([`crate::shm::Parts`]), sized with it
//! ([`Places::bytes_for`]: a 64th of the zone, from 8 KB to 1 MB); a
//! `1m` zone counts 1,020 requests in flight at once, of up to 1,530
//! clients ([`Places::capacity`]), a `10m` one 10,236 of 15,354.

use core::sync::atomic::{AtomicU64, Ordering};
use portable_atomic::AtomicU128;

/// The largest `in_flight=` (a 16-bit count).
pub const MAX_IN_FLIGHT: u32 = (1 << COUNT_BITS) - 1;
/// Groups a client's place may be counted past its own (overflow).
pub const MAX_DEPTH: u32 = 15;

const FP_BITS: u32 = 22;
const FP_MASK: u64 = (1 << FP_BITS) - 1;
const COUNT_BITS: u32 = 16;
const ENTRY_BITS: u32 = FP_BITS + COUNT_BITS;
const ENTRY_MASK: u128 = (1 << ENTRY_BITS) - 1;
/// Entries a group.
const ENTRIES: u32 = 3;
const OVER_SHIFT: u32 = ENTRY_BITS * ENTRIES;
const OVER_MAX: u32 = (1 << (128 - OVER_SHIFT)) - 1;

/// A ledger word: pid (22 bits) | tag (3) | depth (4) | hash (13) | fp (22);
/// free when its pid is 0 (no process has pid 0), its tag then the last
/// one used there.
const HASH_BITS: u32 = 13;
const HASH_SHIFT: u32 = FP_BITS;
const HASH_MASK: u64 = (1 << HASH_BITS) - 1;
const DEPTH_SHIFT: u32 = HASH_SHIFT + HASH_BITS;
const DEPTH_MASK: u64 = 0b1111;
const TAG_SHIFT: u32 = DEPTH_SHIFT + 4;
const TAG_MASK: u64 = 0b111;
const PID_SHIFT: u32 = TAG_SHIFT + 3;
/// Pids a ledger word names: below 2^22 (Linux's `pid_max` limit).
const PID_LIMIT: u32 = 1 << (64 - PID_SHIFT);
/// How long after a resize the old workers that are not exiting take no
/// place in the old zone (ms): see [`Places::retire`].
pub const RETIRED_GRACE_MS: u64 = 5_000;
/// Groups a region has at most (one per group hash): a region larger than
/// their 128 KB and as much ledger counts more places than clients.
const MAX_GROUPS: usize = 1 << HASH_BITS;

/// Ledger words a request tries for a free one at most (a full ledger
/// costs that many loads, not the whole ledger's).
const CLAIM_PROBES: usize = 16_384;
/// Bytes of the header.
const HEADER_BYTES: usize = 64;
/// The smallest region.
const MIN_BYTES: usize = 8 << 10;
/// The largest region.
const MAX_BYTES: usize = 1 << 20;
const MAGIC: u64 = u64::from_le_bytes(*b"RLWPLC02");

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
    /// Non-zero: a resize moved these places into another zone (whose
    /// count the old workers cannot see) at this epoch ms + 1
    /// ([`Places::retire`]).
    retired: AtomicU64,
}

/// The in-flight places of a zone, over a region of it. Cheap to copy;
/// every process maps the same region.
#[derive(Clone, Copy)]
pub struct Places<'a> {
    header: &'a Header,
    groups: &'a [AtomicU128],
    ledger: &'a [AtomicU64],
}

/// The region is too small, misaligned, or holds no places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRegion;

/// A process that holds places (and `delay=` turns): its pid. Nothing is
/// reserved for it: any number of processes hold places at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pid: u32,
    /// The process is exiting (an old worker of a reload).
    leaving: bool,
    /// Its clock (epoch ms), for [`Places::retire`]'s grace.
    now_ms: u64,
}

impl Owner {
    /// The owner of process `pid` (None: 0, or a pid of 2^22 or more, which
    /// Linux never gives).
    pub fn of(pid: u32) -> Option<Owner> {
        (pid > 0 && pid < PID_LIMIT).then_some(Owner {
            pid,
            leaving: false,
            now_ms: 0,
        })
    }

    /// The same process, at `now_ms` (epoch ms).
    pub fn at(self, now_ms: u64) -> Owner {
        Owner { now_ms, ..self }
    }

    /// The same process, exiting: in places a resize retired, it takes
    /// none ([`Places::retire`]).
    pub fn leaving(self) -> Owner {
        Owner {
            leaving: true,
            ..self
        }
    }

    /// Its pid.
    pub fn pid(self) -> u32 {
        self.pid
    }
}

/// A place taken, to give back with [`Places::give`]: its ledger word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    at: u32,
    word: u64,
}

impl Place {
    /// No place: [`Places::give`] and [`Places::held_at`] find none there
    /// (a host's marker of a refusal, nothing to give back).
    pub const NONE: Place = Place {
        at: u32::MAX,
        word: 0,
    };

    /// The place in parts (its ledger word's index, the word), for a host
    /// that keeps it packed.
    pub fn parts(self) -> (u32, u64) {
        (self.at, self.word)
    }

    /// The place of [`Place::parts`]: given back with [`Places::give`],
    /// which does nothing unless its ledger word is still that word.
    pub fn from_parts(at: u32, word: u64) -> Place {
        Place { at, word }
    }
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

/// What [`Places::take_behind`] took: the place and the count before it.
struct Behind(Option<(Place, u32)>);

impl From<Take> for Behind {
    fn from(_: Take) -> Behind {
        Behind(None)
    }
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

/// What [`Places::carry_from`] did: places counted again, places that
/// found no room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Places counted in the new region.
    pub carried: u64,
    /// Places that found no room there.
    pub dropped: u64,
}

/// What one group says to a request of `fp` under `limit`.
enum Step {
    /// Counted here, behind this many of the client's (its count before).
    Taken(u32),
    /// Its places are all taken: this many in flight.
    Full(u32),
    /// Counted further on (this group's overflow was raised).
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
        (HEADER_BYTES + 2 * 16 + ledger * 8).next_multiple_of(64)
    }

    /// Zeroes `len` bytes at `region` (no place taken) and attaches them:
    /// half for the groups, half for the ledger.
    ///
    /// # Safety
    ///
    /// As [`Places::attach`]; nobody else may access the region meanwhile.
    pub unsafe fn init(region: *mut u8, len: usize) -> Result<Places<'a>, BadRegion> {
        if len < MIN_BYTES {
            return Err(BadRegion);
        }
        let groups = (len.saturating_sub(HEADER_BYTES) / 2 / 16).min(MAX_GROUPS);
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
        let fixed = HEADER_BYTES + groups.max(2) * 16;
        let aligned = (region as usize).is_multiple_of(64);
        if region.is_null() || len < fixed + 8 || !aligned || groups > MAX_GROUPS {
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
            retired: AtomicU64::new(0),
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
        let need = HEADER_BYTES + g * 16 + l * 8;
        if header.magic != MAGIC || !(2..=MAX_GROUPS).contains(&g) || l == 0 || need > len {
            return Err(BadRegion);
        }
        // SAFETY: the groups and ledger follow the header within `len`
        // (checked), each aligned (64, then a multiple of 16), only ever
        // accessed atomically; every bit pattern is valid.
        unsafe {
            let groups = region.add(HEADER_BYTES).cast::<AtomicU128>();
            let ledger = groups.add(g).cast::<AtomicU64>();
            Ok(Places {
                header,
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

    /// The group hash and fingerprint of `key` (a key hash).
    fn hash_fp(key: u64) -> (u64, u64) {
        ((key >> 17) & HASH_MASK, key >> (64 - FP_BITS))
    }

    /// The group of group hash `h` in this region.
    fn group_of(&self, h: u64) -> usize {
        ((h * self.groups.len() as u64) >> HASH_BITS) as usize
    }

    /// The group and fingerprint of `key` (a key hash).
    fn locate(&self, key: u64) -> (usize, u64) {
        let (h, fp) = Self::hash_fp(key);
        (self.group_of(h), fp)
    }

    /// The group `d` groups after `g`.
    #[inline]
    fn after(&self, g: usize, d: u32) -> usize {
        let at = g + d as usize;
        if at < self.groups.len() {
            at
        } else {
            at % self.groups.len()
        }
    }

    /// `owner` takes a place for a request of `key` (a key hash) if fewer
    /// than `limit` of its requests are in flight (a `limit` of 0 admits
    /// none; above [`MAX_IN_FLIGHT`] it is that).
    ///
    /// The ledger word is written first: a process killed before the count
    /// leaves its ledger naming a place that is not counted, whose reclaim
    /// takes one from the client's count (at worst a place too many for a
    /// while), never a count that nobody takes back.
    #[inline(always)]
    pub fn take(&self, owner: Owner, key: u64, limit: u32) -> Take {
        if limit == 0 {
            self.header.full.fetch_add(1, Ordering::Relaxed);
            return Take::Full {
                held: self.held(key),
            };
        }
        let taken = if self.retired_for(owner) {
            // The zone that replaced this one counts the client's places:
            // an old worker cannot see them, so it takes none.
            Take::Full {
                held: self.held(key),
            }
        } else {
            self.take_as(owner.pid, key, limit.min(MAX_IN_FLIGHT))
        };
        let counter = match taken {
            Take::Taken(_) => &self.header.taken,
            Take::Full { .. } => &self.header.full,
            Take::NoRoom => &self.header.no_room,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        taken
    }

    /// [`Places::take`] under `pid`, counting no statistic.
    #[inline(always)]
    fn take_as(&self, pid: u32, key: u64, limit: u32) -> Take {
        self.take_then(pid, key, limit, |p, _| Take::Taken(p))
    }

    /// [`Places::take_as`], the place taken and the client's count before
    /// it (its requests ahead of this one) made into a `T` by `taken`; a
    /// [`Take`] that took nothing made into one by `Into`.
    #[inline(always)]
    fn take_then<T: From<Take>>(
        &self,
        pid: u32,
        key: u64,
        limit: u32,
        taken: impl FnOnce(Place, u32) -> T,
    ) -> T {
        let (h, fp) = Self::hash_fp(key);
        let plain = u64::from(pid) << PID_SHIFT | h << HASH_SHIFT | fp;
        let Some((at, word)) = self.claim(plain) else {
            return Take::NoRoom.into();
        };
        let slot = &self.ledger[at];
        match self.count_in(self.group_of(h), fp, limit, slot, word) {
            Step::Taken(before) => taken(
                Place {
                    at: at as u32,
                    word: slot.load(Ordering::Relaxed),
                },
                before,
            ),
            step => {
                slot.store(freed(word), Ordering::Release);
                match step {
                    Step::Full(held) => Take::Full { held },
                    _ => Take::NoRoom,
                }
                .into()
            }
        }
    }

    /// `owner` takes a place of `key` with no limit (`delay=`'s turns,
    /// [`crate::shm::Turns`]): the place and the client's places before it
    /// (its requests ahead). None: no room. Counted in the statistics as
    /// [`Places::take`] counts.
    pub fn take_behind(&self, owner: Owner, key: u64) -> Option<(Place, u32)> {
        let r = self.take_then(owner.pid, key, MAX_IN_FLIGHT, |p, n| Behind(Some((p, n))));
        let counter = match r.0 {
            Some(_) => &self.header.taken,
            None => &self.header.no_room,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        r.0
    }

    /// A free ledger word for `plain` (a word without its tag), claimed
    /// with the tag after the word's last: its index and the word. The
    /// search starts at a place drawn from the word and the count of places
    /// taken, so that one client's requests spread over the ledger, and
    /// goes on over [`CLAIM_PROBES`] words (the whole ledger of a zone up
    /// to 16m: a word is free unless that many are in flight). The first
    /// word, free nearly always, is tried inline; the search goes on out
    /// of line.
    #[inline(always)]
    fn claim(&self, plain: u64) -> Option<(usize, u64)> {
        let len = self.ledger.len();
        let salt = self.header.taken.load(Ordering::Relaxed);
        let mixed =
            (plain ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The high 32 bits of `mixed` scaled to the ledger's length (a
        // multiplication where a remainder would divide).
        let i = (((mixed >> 32) * len as u64) >> 32) as usize;
        if let Some(word) = self.claim_at(i, plain) {
            return Some((i, word));
        }
        self.claim_from(i, plain)
    }

    /// Ledger word `i` claimed for `plain` if it is free: the word.
    #[inline(always)]
    fn claim_at(&self, i: usize, plain: u64) -> Option<u64> {
        let e = self.ledger.get(i)?;
        let w = e.load(Ordering::Relaxed);
        if pid_of(w) != 0 {
            return None;
        }
        let word = plain | (((w >> TAG_SHIFT) + 1) & TAG_MASK) << TAG_SHIFT;
        e.compare_exchange(w, word, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| word)
    }

    /// [`Places::claim`]'s search, from word `i` on.
    #[cold]
    #[inline(never)]
    fn claim_from(&self, mut i: usize, plain: u64) -> Option<(usize, u64)> {
        let len = self.ledger.len();
        for _ in 0..len.min(CLAIM_PROBES) {
            if let Some(word) = self.claim_at(i, plain) {
                return Some((i, word));
            }
            i += 1;
            if i == len {
                i = 0;
            }
        }
        None
    }

    /// Counts the request's place in group `g` or, its overflow raised, in
    /// a group after it (up to [`MAX_DEPTH`] on), with the ledger word
    /// `slot` marked first (`word` is its plain form). Not taken: every
    /// overflow it raised is lowered again.
    #[inline(always)]
    fn count_in(&self, g: usize, fp: u64, limit: u32, slot: &AtomicU64, word: u64) -> Step {
        let mut d = 0;
        loop {
            match self.step(self.after(g, d), fp, limit, d, slot, word) {
                Step::Over => d += 1,
                Step::Taken(c) => return Step::Taken(c),
                other => {
                    self.unwind(g, d, slot, word);
                    return other;
                }
            }
        }
    }

    /// One group (`d` past the client's own) for the request: counted
    /// here, full, or its overflow raised for the next (the ledger word,
    /// marked before the compare-and-swap, says how far).
    #[inline(always)]
    fn step(&self, at: usize, fp: u64, limit: u32, d: u32, slot: &AtomicU64, word: u64) -> Step {
        let a = &self.groups[at];
        let mut w = a.load(Ordering::Acquire);
        loop {
            let (next, step) = match find_or_back(w, fp) {
                Some((_, c)) if c >= limit => return Step::Full(c),
                Some((i, c)) => (with_count_step(w, i, true), Step::Taken(c)),
                None => match free(w) {
                    Some(i) if overflow(w) == 0 => (with_entry(w, i, fp, 1), Step::Taken(0)),
                    _ if d >= MAX_DEPTH || overflow(w) >= OVER_MAX => return Step::NoRoom,
                    _ => (with_overflow(w, overflow(w) + 1), Step::Over),
                },
            };
            // The ledger says where the place is counted before it is.
            let depth = if matches!(step, Step::Over) { d + 1 } else { d };
            slot.store(with_depth(word, depth), Ordering::Release);
            match cas::compare_exchange(a, w, next) {
                Ok(_) => return step,
                Err(now) => w = now,
            }
        }
    }

    /// A request not counted after `d` groups: lowers the overflows it
    /// raised, last first, the ledger word following (a process killed
    /// meanwhile has its reclaim lower only those still raised).
    fn unwind(&self, g: usize, d: u32, slot: &AtomicU64, word: u64) {
        for k in (0..d).rev() {
            self.lower_overflow(self.after(g, k));
            slot.store(with_depth(word, k), Ordering::Release);
        }
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
    #[inline(always)]
    fn lower(&self, g: usize, fp: u64) {
        let a = &self.groups[g];
        let mut w = a.load(Ordering::Acquire);
        while let Some((i, _)) = find(w, fp) {
            let next = with_count_step(w, i, false);
            match cas::compare_exchange(a, w, next) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Takes the place that ledger word `w` names out of the counts: its
    /// count, then the overflows it raised.
    #[inline(always)]
    fn uncount(&self, w: u64) {
        let g = self.group_of((w >> HASH_SHIFT) & HASH_MASK);
        if depth_of(w) == 0 {
            self.lower(g, w & FP_MASK);
            return;
        }
        self.uncount_over(g, w);
    }

    /// [`Places::uncount`] of a place counted past its own group `g`.
    #[cold]
    #[inline(never)]
    fn uncount_over(&self, g: usize, w: u64) {
        let d = depth_of(w);
        self.lower(self.after(g, d), w & FP_MASK);
        for k in (0..d).rev() {
            self.lower_overflow(self.after(g, k));
        }
    }

    /// Gives back a place taken by this process (a request ended). Nothing
    /// when its ledger word is gone (reclaimed). The count first, then the
    /// ledger word: a process killed between them has its reclaim take
    /// one more from the client's count (a place too many for a while),
    /// never a count left that nobody gives back.
    pub fn give(&self, p: Place) {
        self.give_inline(p);
    }

    /// [`Places::give`], inlined where a request's places are given back
    /// as its response ends.
    #[inline(always)]
    pub fn give_inline(&self, p: Place) {
        let Some(slot) = self.ledger.get(p.at as usize) else {
            return;
        };
        if slot.load(Ordering::Acquire) != p.word {
            return;
        }
        self.uncount(p.word);
        let _ = slot.compare_exchange(p.word, freed(p.word), Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Requests of `key` in flight now, by every process.
    pub fn held(&self, key: u64) -> u32 {
        let (g, fp) = self.locate(key);
        for d in 0..=MAX_DEPTH {
            let w = self.groups[self.after(g, d)].load(Ordering::Acquire);
            if let Some((_, c)) = find(w, fp) {
                return c;
            }
            if overflow(w) == 0 {
                return 0;
            }
        }
        0
    }
}

#[path = "places_carry.rs"]
mod carry;

#[path = "places_word.rs"]
mod word;
use word::*;

#[path = "places_cas.rs"]
mod cas;

#[path = "places_reclaim.rs"]
mod reclaim;
pub(super) use reclaim::Seen;

#[cfg(test)]
#[path = "places_tests.rs"]
mod tests;
