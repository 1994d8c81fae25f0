//! `delay=`'s queue turns, shared by every worker of a zone: how many
//! requests each client holds now, across workers, so that a request newly
//! held waits behind all of them (see [`crate::delay`]), not only behind
//! those its own worker holds; and the zone's gauge of requests held.
//!
//! * **Tickets.** Each client has a bucket (its key hash modulo
//!   [`BUCKETS`]): the number of its requests held now, by every worker. A
//!   request takes its turn with one atomic add, whose old value is the
//!   number of requests ahead of it: two workers taking turns at once get
//!   two different turns. Clients that share a bucket wait behind each
//!   other (at worst a request refused at once that could have been held).
//! * **Reclaimed with their process.** Each process keeps, in entries of
//!   its own (its pid, a bucket, a count), what it added to which bucket,
//!   and how many requests it holds (the gauge, [`Turns::gauge`]). When a
//!   process is gone, any process that finds its pid gone (a starting
//!   process, worker 0's sweep once a second: [`Turns::reclaim_dead`])
//!   takes its counts back out: no turn outlives the process that held it,
//!   and nothing is tied to a worker's number (old workers of a reload, the
//!   cache manager, a respawned worker all have pids of their own).
//! * **Carried over.** A zone resized on reload counts the old zone's
//!   entries, each under its process ([`Turns::carry_from`]).
//!
//! The region is a part of the zone ([`crate::shm::Parts`]), sized with the
//! zone ([`Turns::bytes_for`]): it holds [`Turns::entries`] entries, every
//! process's together (1,536 in a `1m` zone, 19,968 in a `10m` one).
//!
//! Lock-free: compare-and-swap and atomic adds only; a process killed at
//! any point leaves no turn that a reclaim does not take back (the entry's
//! add comes first: at worst the bucket is one turn short).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::places::{Owner, Seen};

/// Client buckets.
pub const BUCKETS: usize = 1024;

/// An entry: pid << 32 | tag << 16 | count; 0 free.
const COUNT_MASK: u64 = 0xffff;
/// The tag of a process's gauge entry (buckets are below it).
const GAUGE: u64 = 0xffff;
/// Entries tried from an entry's own start.
const PROBES: usize = 64;
/// Bytes of the buckets, at the region's start.
const BUCKET_BYTES: usize = BUCKETS * 4;
/// The smallest region: 512 entries.
const MIN_BYTES: usize = BUCKET_BYTES + 512 * 8;
/// The largest region (256 KB): 32,256 entries.
const MAX_BYTES: usize = 256 << 10;

/// The held requests of a zone's clients, over a region of the zone:
/// [`BUCKETS`] counts, then [`Turns::entries`] entries of processes.
#[derive(Clone, Copy)]
pub struct Turns<'a> {
    /// Requests held now per client bucket, every process's.
    buckets: &'a [AtomicU32],
    /// Per process and bucket (or gauge): `pid << 32 | tag << 16 | count`.
    entries: &'a [AtomicU64],
}

/// The region is too small for the turns ([`Turns::bytes_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooSmall;

/// The bucket of `client` (a key hash): clients of one bucket share a
/// queue.
pub fn bucket(client: u64) -> usize {
    (client.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % BUCKETS
}

/// Takes `by` from `a`, never below 0.
fn decrement(a: &AtomicU32, by: u32) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
        Some(n.saturating_sub(by))
    });
}

/// An entry's owner: (pid, tag).
fn owner(word: u64) -> (u64, u64) {
    (word >> 32, (word >> 16) & 0xffff)
}

impl<'a> Turns<'a> {
    /// Bytes of the turns of a zone of `zone_bytes` (a 64th of it, from 8 KB
    /// to 256 KB, a multiple of 64).
    pub fn bytes_for(zone_bytes: usize) -> usize {
        (zone_bytes / 64).clamp(MIN_BYTES, MAX_BYTES) / 64 * 64
    }

    /// Zeroes `len` bytes at `region` (no turn taken) and attaches them.
    ///
    /// # Safety
    ///
    /// As [`Turns::attach`]; nobody else may access the region meanwhile.
    pub unsafe fn init(region: *mut u8, len: usize) -> Result<Turns<'a>, TooSmall> {
        if region.is_null() || len < MIN_BYTES {
            return Err(TooSmall);
        }
        // SAFETY: the caller's: `len` writable bytes, ours alone now.
        unsafe { core::ptr::write_bytes(region, 0, len) };
        // SAFETY: as above.
        unsafe { Turns::attach(region, len) }
    }

    /// The turns over `len` bytes at `region`, as [`Turns::init`] left them.
    ///
    /// # Safety
    ///
    /// `region` must be 8-byte aligned, valid for reads and writes of
    /// `len` bytes for `'a`, and only accessed through [`Turns`] (of any
    /// process) meanwhile.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Turns<'a>, TooSmall> {
        if region.is_null() || len < MIN_BYTES || region.align_offset(8) != 0 {
            return Err(TooSmall);
        }
        let entries = (len - BUCKET_BYTES) / 8;
        // SAFETY: the caller's guarantees; the atomics have their integers'
        // layout, every bit pattern is valid; the entries start at a
        // multiple of 8 (BUCKET_BYTES) within `len`.
        unsafe {
            Ok(Turns {
                buckets: core::slice::from_raw_parts(region.cast::<AtomicU32>(), BUCKETS),
                entries: core::slice::from_raw_parts(
                    region.add(BUCKET_BYTES).cast::<AtomicU64>(),
                    entries,
                ),
            })
        }
    }

    /// Entries: (process, client bucket) pairs held at once, every
    /// process's together.
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// Adds 1 to `o`'s entry of `tag`, claiming a free one if it has none.
    /// False: no room within its probes, or its count is at its maximum.
    /// Only `o`'s own process adds to or claims its entries (one thread).
    fn add(&self, o: Owner, tag: u64) -> bool {
        let me = u64::from(o.pid()) << 32 | tag << 16;
        let len = self.entries.len();
        let start = ((me.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize) % len;
        let mut free = None;
        for i in 0..PROBES.min(len) {
            let e = &self.entries[(start + i) % len];
            let w = e.load(Ordering::Acquire);
            if w != 0 && owner(w) == owner(me) {
                if w & COUNT_MASK == COUNT_MASK {
                    return false;
                }
                return e.fetch_add(1, Ordering::AcqRel) & !COUNT_MASK == me;
            }
            if w == 0 && free.is_none() {
                free = Some(e);
            }
        }
        while let Some(e) = free {
            if e.compare_exchange(0, me | 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            // Another process claimed it: the next free one, if any.
            free = (0..PROBES.min(len))
                .map(|i| &self.entries[(start + i) % len])
                .find(|e| e.load(Ordering::Acquire) == 0);
        }
        false
    }

    /// Takes 1 from `o`'s entry of `tag`, freeing it at 0. False: it has
    /// none (as after a reclaim).
    fn sub(&self, o: Owner, tag: u64) -> bool {
        let me = u64::from(o.pid()) << 32 | tag << 16;
        let len = self.entries.len();
        let start = ((me.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize) % len;
        for i in 0..PROBES.min(len) {
            let e = &self.entries[(start + i) % len];
            let mut w = e.load(Ordering::Acquire);
            while w != 0 && owner(w) == owner(me) {
                let next = if w & COUNT_MASK <= 1 { 0 } else { w - 1 };
                match e.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return true,
                    Err(now) => w = now,
                }
            }
        }
        false
    }

    /// `o` takes a turn for a request of `client`: the number of its
    /// requests held before it (by any process). None: no room for its
    /// entry (or its count is at its maximum): the request is not to be
    /// held.
    pub fn take(&self, o: Owner, client: u64) -> Option<u32> {
        let b = bucket(client);
        // The entry's add first: a process killed here leaves the bucket a
        // turn short, never a turn that nobody takes back.
        self.add(o, b as u64)
            .then(|| self.buckets[b].fetch_add(1, Ordering::AcqRel))
    }

    /// `o` gives back a turn of `client` (a held request decided or gone);
    /// nothing when it has none (as after a reclaim).
    pub fn give(&self, o: Owner, client: u64) {
        let b = bucket(client);
        if self.sub(o, b as u64) {
            decrement(&self.buckets[b], 1);
        }
    }

    /// Requests of `client` (and of the clients sharing its bucket) held
    /// now, by every process.
    pub fn held(&self, client: u64) -> u32 {
        self.buckets[bucket(client)].load(Ordering::Acquire)
    }

    /// `o` holds one more request (`up`) or one fewer, for the zone's gauge
    /// of requests held ([`Turns::gauge`]).
    pub fn hold_gauge(&self, o: Owner, up: bool) {
        if up {
            self.add(o, GAUGE);
        } else {
            self.sub(o, GAUGE);
        }
    }

    /// Requests held now, by every process (a scan: for the metrics).
    pub fn gauge(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .filter(|&w| w != 0 && owner(w).1 == GAUGE)
            .map(|w| w & COUNT_MASK)
            .sum()
    }

    /// Turns taken now, every process's (a scan: for the metrics).
    pub fn turns(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .filter(|&w| w != 0 && owner(w).1 != GAUGE)
            .map(|w| w & COUNT_MASK)
            .sum()
    }

    /// Takes back every turn and gauge count of the processes that are
    /// gone (`alive(pid)` false, asked once per pid); returns the entries
    /// taken back.
    pub fn reclaim_dead(&self, alive: impl FnMut(u32) -> bool) -> u64 {
        let mut seen = Seen::new(alive);
        self.reclaim_if(|pid| seen.gone(pid))
    }

    /// A process exiting: takes back what `o` still holds.
    pub fn stop(&self, o: Owner) -> u64 {
        self.reclaim_if(|pid| pid == o.pid())
    }

    fn reclaim_if(&self, mut gone: impl FnMut(u32) -> bool) -> u64 {
        let mut n = 0;
        for e in self.entries {
            let w = e.load(Ordering::Acquire);
            if w == 0 || !gone(owner(w).0 as u32) {
                continue;
            }
            if e.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                n += 1;
                let tag = owner(w).1;
                if tag != GAUGE {
                    decrement(
                        &self.buckets[tag as usize % BUCKETS],
                        (w & COUNT_MASK) as u32,
                    );
                }
            }
        }
        n
    }

    /// Counts again, here, every entry of `old` (a zone resized on reload),
    /// each under its process; called before any process uses this region.
    /// Returns (entries carried, entries dropped for lack of room).
    pub fn carry_from(&self, old: &Turns<'_>) -> (u64, u64) {
        let (mut kept, mut dropped) = (0, 0);
        for e in old.entries {
            let w = e.load(Ordering::Acquire);
            let Some(o) = Owner::of(owner(w).0 as u32).filter(|_| w != 0) else {
                continue;
            };
            let tag = owner(w).1;
            let n = (w & COUNT_MASK) as u32;
            if (0..n).all(|_| self.add(o, tag)) {
                if tag != GAUGE {
                    self.buckets[tag as usize % BUCKETS].fetch_add(n, Ordering::AcqRel);
                }
                kept += 1;
            } else {
                dropped += 1;
            }
        }
        (kept, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns over a leaked region of `len` bytes.
    fn turns(len: usize) -> Turns<'static> {
        let buf: &'static mut [u64] = vec![0u64; len / 8].leak();
        // SAFETY: an exclusive, aligned buffer that lives forever.
        unsafe { Turns::init(buf.as_mut_ptr().cast(), len) }.unwrap()
    }

    fn o(pid: u32) -> Owner {
        Owner::of(pid).unwrap()
    }

    #[test]
    fn sized_with_the_zone() {
        assert_eq!(Turns::bytes_for(32 << 10), MIN_BYTES);
        assert_eq!(Turns::bytes_for(1 << 20), 16 << 10);
        assert_eq!(Turns::bytes_for(1 << 30), MAX_BYTES);
        assert_eq!(turns(Turns::bytes_for(1 << 20)).entries(), 1536);
        assert_eq!(turns(Turns::bytes_for(10 << 20)).entries(), 19968);
        let mut small = [0u64; 8];
        // SAFETY: a buffer too small: refused before any access.
        assert!(unsafe { Turns::init(small.as_mut_ptr().cast(), 64) }.is_err());
    }

    /// Two clients of different buckets.
    fn two() -> (u64, u64) {
        let a = 1u64;
        let b = (2u64..).find(|&c| bucket(c) != bucket(a)).unwrap();
        (a, b)
    }

    #[test]
    fn tickets_count_across_processes_and_give_back() {
        let t = turns(MIN_BYTES);
        let (a, b) = two();
        assert_eq!(t.held(a), 0);
        assert_eq!(t.take(o(10), a), Some(0));
        assert_eq!(t.take(o(11), a), Some(1));
        assert_eq!(t.take(o(11), a), Some(2));
        assert_eq!(t.take(o(11), b), Some(0));
        assert_eq!((t.held(a), t.held(b), t.turns()), (3, 1, 4));
        t.give(o(11), a);
        t.give(o(11), a);
        t.give(o(11), a); // one too many for process 11: nothing
        assert_eq!(t.held(a), 1);
        t.give(o(10), a);
        t.give(o(11), b);
        assert_eq!((t.held(a), t.turns()), (0, 0));
        assert!(t.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }

    /// A process gone: its turns and gauge come back, whatever its worker
    /// number; a process alive (an old worker of a reload, the cache
    /// manager) keeps its own.
    #[test]
    fn the_turns_of_a_process_gone_are_taken_back() {
        let t = turns(MIN_BYTES);
        let (a, b) = two();
        assert_eq!(t.take(o(30), a), Some(0));
        assert_eq!(t.take(o(30), a), Some(1));
        assert_eq!(t.take(o(30), b), Some(0));
        t.hold_gauge(o(30), true);
        t.hold_gauge(o(30), true);
        assert_eq!(t.take(o(31), a), Some(2), "another process");
        t.hold_gauge(o(31), true);
        assert_eq!(t.gauge(), 3);
        assert_eq!(t.reclaim_dead(|pid| pid != 30), 3);
        assert_eq!((t.held(a), t.held(b), t.gauge()), (1, 0, 1));
        t.give(o(30), a); // reclaimed: nothing to give back
        assert_eq!(t.held(a), 1);
        t.give(o(31), a);
        t.hold_gauge(o(31), false);
        assert_eq!((t.held(a), t.gauge()), (0, 0));
        t.hold_gauge(o(31), false); // never below 0
        assert_eq!(t.gauge(), 0);
        assert_eq!(t.take(o(32), a), Some(0));
        assert_eq!(t.stop(o(32)), 1, "an exiting process gives back");
        assert_eq!(t.held(a), 0);
    }

    /// Hundreds of processes (old workers of many reloads) hold turns at
    /// once: none runs out of room while entries are left.
    #[test]
    fn any_number_of_processes_hold_turns() {
        let t = turns(Turns::bytes_for(1 << 20));
        for pid in 1..=600u32 {
            assert_eq!(t.take(o(pid), 5), Some(pid - 1), "process {pid}");
            t.hold_gauge(o(pid), true);
        }
        assert_eq!((t.held(5), t.gauge()), (600, 600));
        t.reclaim_dead(|_| false);
        assert_eq!((t.held(5), t.gauge(), t.turns()), (0, 0, 0));
    }

    #[test]
    fn a_resized_zone_carries_the_turns_under_their_processes() {
        let old = turns(MIN_BYTES);
        let new = turns(Turns::bytes_for(2 << 20));
        let (a, b) = two();
        old.take(o(40), a);
        old.take(o(40), a);
        old.take(o(41), b);
        old.hold_gauge(o(40), true);
        assert_eq!(new.carry_from(&old), (3, 0));
        assert_eq!((new.held(a), new.held(b), new.gauge()), (2, 1, 1));
        assert_eq!(new.take(o(50), a), Some(2), "behind the carried ones");
        new.reclaim_dead(|pid| pid == 50);
        assert_eq!((new.held(a), new.held(b), new.gauge()), (1, 0, 0));
    }

    #[test]
    fn concurrent_takes_get_distinct_turns() {
        let t = turns(MIN_BYTES);
        let handles: Vec<_> = (0..4)
            .map(|w| {
                std::thread::spawn(move || {
                    (0..200)
                        .map(|_| t.take(o(100 + w), 42).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u32> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..800).collect::<Vec<_>>());
    }
}
