//! `delay=`'s queue turns, shared by every worker of a zone: how many
//! requests each client holds now, across workers, so that a request newly
//! held waits behind all of them (see [`crate::delay`]), not only behind
//! those its own worker holds; and the zone's gauge of requests held.
//!
//! * **Tickets, exact per client.** The requests each client holds now, by
//!   every worker, are counted as in-flight places are
//!   ([`Places`](super::places)): one count per client (its key hash's
//!   group and fingerprint, overflow chains past a full group), so a
//!   client waits behind its own held requests only, never behind other
//!   clients' (no shared buckets). A request takes its turn with one
//!   compare-and-swap whose count before is the number of requests ahead
//!   of it: two workers taking turns at once get two different turns.
//! * **Reclaimed with their process.** A turn is a ledger word naming its
//!   process's pid ([`Places`]' ledger); each process keeps its gauge of
//!   held requests ([`Turns::gauge`]) in an entry of its own (pid, count).
//!   When a process is gone, any process that finds its pid gone (a
//!   starting process, worker 0's sweep once a second:
//!   [`Turns::reclaim_dead`]) takes its turns and gauge back: no turn
//!   outlives the process that held it, and nothing is tied to a worker's
//!   number (old workers of a reload, the cache manager, a respawned worker
//!   all have pids of their own).
//! * **Carried over.** A zone resized on reload counts the old zone's
//!   turns and gauges, each under its process ([`Turns::carry_from`]).
//!
//! The region is a part of the zone ([`crate::shm::Parts`]), sized with the
//! zone ([`Turns::bytes_for`]: a 64th of it): an eighth of it for gauge
//! entries (128 to [`GAUGE_ENTRIES`]), then the counts and ledger of the
//! turns: a `1m` zone holds 1,072 requests at once, of up to 1,068
//! clients ([`Turns::capacity`]), a `2m` one 2,146.
//!
//! Lock-free: compare-and-swap and atomic adds only; a process killed at
//! any point leaves no turn that a reclaim does not take back.

use core::sync::atomic::{AtomicU64, Ordering};

use super::places::{Owner, Place, Places, Seen};

/// A turn taken ([`Turns::take`]), to give back with [`Turns::give`].
pub type Turn = Place;

/// Gauge entries at most: processes holding requests at once.
pub const GAUGE_ENTRIES: usize = 512;
/// A gauge entry: pid << 32 | count; 0 free.
const COUNT_MASK: u64 = 0xffff_ffff;
/// Entries tried from a process's own start: all of them (a hold and its
/// end change a gauge, never a request that is not held).
const PROBES: usize = GAUGE_ENTRIES;
/// The smallest region.
const MIN_BYTES: usize = 8 << 10;
/// The largest region (256 KB).
const MAX_BYTES: usize = 256 << 10;

/// Bytes of the gauge entries at the start of a region of `len` bytes: an
/// eighth of it, from 1 KB to [`GAUGE_ENTRIES`]' (a multiple of 64).
fn gauge_bytes(len: usize) -> usize {
    (len / 8).clamp(1 << 10, GAUGE_ENTRIES * 8) / 64 * 64
}

/// Groups of the turns' counts in `len` bytes: two fifths of them (the
/// rest for the ledger: about as many clients as requests).
fn groups_for(len: usize) -> usize {
    (len.saturating_sub(64) * 2 / 5 / 16).clamp(2, 1 << 13)
}

/// The held requests of a zone's clients, over a region of the zone:
/// [`GAUGE_ENTRIES`] gauge entries, then the turns.
#[derive(Clone, Copy)]
pub struct Turns<'a> {
    /// Per process: `pid << 32 | requests it holds`.
    gauges: &'a [AtomicU64],
    /// Requests held now per client, every process's, each under its pid.
    queue: Places<'a>,
}

/// The region is too small for the turns ([`Turns::bytes_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooSmall;

/// A gauge entry's pid.
fn pid_of(word: u64) -> u32 {
    (word >> 32) as u32
}

impl<'a> Turns<'a> {
    /// Bytes of the turns of a zone of `zone_bytes` (a 64th of it, from
    /// 8 KB to 256 KB, a multiple of 64).
    pub fn bytes_for(zone_bytes: usize) -> usize {
        (zone_bytes / 64).clamp(MIN_BYTES, MAX_BYTES) / 64 * 64
    }

    /// Zeroes `len` bytes at `region` (no turn taken) and attaches them.
    ///
    /// # Safety
    ///
    /// As [`Turns::attach`]; nobody else may access the region meanwhile.
    pub unsafe fn init(region: *mut u8, len: usize) -> Result<Turns<'a>, TooSmall> {
        if region.is_null() || len < MIN_BYTES || !(region as usize).is_multiple_of(64) {
            return Err(TooSmall);
        }
        let g = gauge_bytes(len);
        // SAFETY: the caller's: `len` writable bytes, ours alone now.
        unsafe { core::ptr::write_bytes(region, 0, g) };
        // SAFETY: as above; the turns follow the gauges, 64-byte aligned.
        unsafe { Places::init_with(region.add(g), len - g, groups_for(len - g)) }
            .map_err(|_| TooSmall)?;
        // SAFETY: as above.
        unsafe { Turns::attach(region, len) }
    }

    /// The turns over `len` bytes at `region`, as [`Turns::init`] left them.
    ///
    /// # Safety
    ///
    /// `region` must be 64-byte aligned, valid for reads and writes of
    /// `len` bytes for `'a`, and only accessed through [`Turns`] (of any
    /// process) meanwhile.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Turns<'a>, TooSmall> {
        if region.is_null() || len < MIN_BYTES || !(region as usize).is_multiple_of(64) {
            return Err(TooSmall);
        }
        let g = gauge_bytes(len);
        // SAFETY: the caller's guarantees; the gauges are atomics of their
        // integers' layout, every bit pattern valid; the turns follow them.
        unsafe {
            let queue = Places::attach(region.add(g), len - g).map_err(|_| TooSmall)?;
            Ok(Turns {
                gauges: core::slice::from_raw_parts(region.cast::<AtomicU64>(), g / 8),
                queue,
            })
        }
    }

    /// (requests held at once, clients with requests held at once) the
    /// turns count at most.
    pub fn capacity(&self) -> (usize, usize) {
        self.queue.capacity()
    }

    /// Adds 1 (`up`) to or takes 1 from `o`'s gauge entry, claiming a free
    /// one if it has none; at 0 it is freed. False: no room within its
    /// probes (up), or no entry (down: as after a reclaim). Only `o`'s own
    /// process changes its entry (one thread).
    fn step_gauge(&self, o: Owner, up: bool) -> bool {
        let me = u64::from(o.pid()) << 32;
        let len = self.gauges.len();
        let start = ((me.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize) % len;
        let at = |i: usize| &self.gauges[(start + i) % len];
        if let Some(e) = (0..PROBES.min(len)).map(at).find(|e| {
            let w = e.load(Ordering::Acquire);
            w != 0 && pid_of(w) == o.pid()
        }) {
            let mut w = e.load(Ordering::Acquire);
            while w != 0 && pid_of(w) == o.pid() {
                let next = match up {
                    true if w & COUNT_MASK == COUNT_MASK => return false,
                    true => w + 1,
                    false if w & COUNT_MASK <= 1 => 0,
                    false => w - 1,
                };
                match e.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return true,
                    Err(now) => w = now,
                }
            }
            // Reclaimed meanwhile: as if it had none.
        }
        up && (0..PROBES.min(len)).map(at).any(|e| {
            e.compare_exchange(0, me | 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// `o` takes a turn for a request of `client` (a key hash): the turn
    /// and the number of the client's requests held before it (by any
    /// process). None: no room for it: the request is not to be held.
    pub fn take(&self, o: Owner, client: u64) -> Option<(Turn, u32)> {
        self.queue.take_behind(o, client)
    }

    /// Gives back a turn (a held request decided or gone), by whichever
    /// process: nothing when it was taken back already (a reclaim).
    pub fn give(&self, t: Turn) {
        self.queue.give(t);
    }

    /// Requests of `client` held now, by every process.
    pub fn held(&self, client: u64) -> u32 {
        self.queue.held(client)
    }

    /// `o` holds one more request (`up`) or one fewer, for the zone's gauge
    /// of requests held ([`Turns::gauge`]).
    pub fn hold_gauge(&self, o: Owner, up: bool) {
        self.step_gauge(o, up);
    }

    /// Requests held now, by every process (a scan: for the metrics).
    pub fn gauge(&self) -> u64 {
        self.gauges
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .filter(|&w| w != 0)
            .map(|w| w & COUNT_MASK)
            .sum()
    }

    /// Turns taken now, every process's (a scan: for the metrics).
    pub fn turns(&self) -> u64 {
        self.queue.in_flight()
    }

    /// Takes back every turn and gauge count of the processes that are
    /// gone (`alive(pid)` false, asked once per pid); returns the turns
    /// and gauge entries taken back.
    pub fn reclaim_dead(&self, alive: impl FnMut(u32) -> bool) -> u64 {
        let mut seen = Seen::new(alive);
        let gauges = self.reclaim_gauges(|pid| seen.gone(pid));
        gauges + self.queue.reclaim_dead(|pid| !seen.gone(pid))
    }

    /// A process exiting: takes back what `o` still holds.
    pub fn stop(&self, o: Owner) -> u64 {
        self.reclaim_gauges(|pid| pid == o.pid()) + self.queue.stop(o)
    }

    fn reclaim_gauges(&self, mut gone: impl FnMut(u32) -> bool) -> u64 {
        let mut n = 0;
        for e in self.gauges {
            let w = e.load(Ordering::Acquire);
            if w != 0
                && gone(pid_of(w))
                && e.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                n += 1;
            }
        }
        n
    }

    /// Counts again, here, every turn and gauge of `old` (a zone resized
    /// on reload), each under its process; called before any process uses
    /// this region. Returns (turns and gauges carried, dropped for lack of
    /// room).
    pub fn carry_from(&self, old: &Turns<'_>) -> (u64, u64) {
        let c = self.queue.carry_from(&old.queue);
        let (mut kept, mut dropped) = (c.carried, c.dropped);
        for e in old.gauges {
            let w = e.load(Ordering::Acquire);
            let Some(o) = Owner::of(pid_of(w)).filter(|_| w != 0) else {
                continue;
            };
            if (0..w & COUNT_MASK).all(|_| self.step_gauge(o, true)) {
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
        let buf: &'static mut [u128] = vec![0u128; len.div_ceil(64) * 4 + 4].leak();
        let at = buf.as_mut_ptr().cast::<u8>();
        let at = at.wrapping_add(at.align_offset(64));
        // SAFETY: an exclusive buffer that lives forever, aligned to 64
        // within it, `len` bytes from there.
        unsafe { Turns::init(at, len) }.unwrap()
    }

    fn o(pid: u32) -> Owner {
        Owner::of(pid).unwrap()
    }

    /// A client's key hash: spread over the bits the turns read.
    fn key(c: u64) -> u64 {
        c.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ c << 40
    }

    fn take(t: &Turns<'_>, pid: u32, client: u64) -> Option<(Turn, u32)> {
        t.take(o(pid), key(client))
    }

    #[test]
    fn sized_with_the_zone() {
        assert_eq!(Turns::bytes_for(32 << 10), MIN_BYTES);
        assert_eq!(Turns::bytes_for(1 << 20), 16 << 10);
        assert_eq!(Turns::bytes_for(1 << 30), MAX_BYTES);
        assert_eq!(turns(Turns::bytes_for(1 << 20)).capacity(), (1072, 1068));
        assert_eq!(turns(Turns::bytes_for(2 << 20)).capacity().0, 2146);
        assert_eq!(turns(MIN_BYTES).gauges.len(), 128);
        assert_eq!(turns(Turns::bytes_for(1 << 20)).gauges.len(), 256);
        let mut small = [0u128; 8];
        // SAFETY: a buffer too small: refused before any access.
        assert!(unsafe { Turns::init(small.as_mut_ptr().cast(), 128) }.is_err());
    }

    #[test]
    fn tickets_count_across_processes_and_give_back() {
        let t = turns(MIN_BYTES);
        let (a, b) = (1, 2);
        assert_eq!(t.held(key(a)), 0);
        let (a0, n) = take(&t, 10, a).unwrap();
        assert_eq!(n, 0);
        let (a1, n) = take(&t, 11, a).unwrap();
        assert_eq!(n, 1);
        let (a2, n) = take(&t, 11, a).unwrap();
        assert_eq!(n, 2);
        let (b0, n) = take(&t, 11, b).unwrap();
        assert_eq!(n, 0);
        assert_eq!((t.held(key(a)), t.held(key(b)), t.turns()), (3, 1, 4));
        t.give(a1);
        t.give(a2);
        t.give(a2); // given back twice: nothing
        assert_eq!(t.held(key(a)), 1);
        t.give(a0);
        t.give(b0);
        assert_eq!((t.held(key(a)), t.turns()), (0, 0));
    }

    /// Every client has a queue of its own: a thousand clients held at
    /// once, each first in its own queue, none refused for room.
    #[test]
    fn a_thousand_clients_each_wait_behind_their_own_only() {
        let t = turns(Turns::bytes_for(2 << 20));
        for c in 0..1000u64 {
            let (_, ahead) = take(&t, 7, c).expect("room");
            assert_eq!(ahead, 0, "client {c}");
        }
        for c in 0..1000u64 {
            assert_eq!(t.held(key(c)), 1, "client {c}");
        }
        assert_eq!(take(&t, 8, 999).unwrap().1, 1);
        assert_eq!(t.turns(), 1001);
    }

    /// A process gone: its turns and gauge come back, whatever its worker
    /// number; a process alive (an old worker of a reload, the cache
    /// manager) keeps its own.
    #[test]
    fn the_turns_of_a_process_gone_are_taken_back() {
        let t = turns(MIN_BYTES);
        let (a, b) = (1, 2);
        let (gone_a, _) = take(&t, 30, a).unwrap();
        take(&t, 30, a).unwrap();
        take(&t, 30, b).unwrap();
        t.hold_gauge(o(30), true);
        t.hold_gauge(o(30), true);
        let (live_a, n) = take(&t, 31, a).unwrap();
        assert_eq!(n, 2, "another process");
        t.hold_gauge(o(31), true);
        assert_eq!(t.gauge(), 3);
        assert_eq!(t.reclaim_dead(|pid| pid != 30), 4, "3 turns, 1 gauge");
        assert_eq!((t.held(key(a)), t.held(key(b)), t.gauge()), (1, 0, 1));
        t.give(gone_a); // reclaimed: nothing to give back
        assert_eq!(t.held(key(a)), 1);
        t.give(live_a);
        t.hold_gauge(o(31), false);
        assert_eq!((t.held(key(a)), t.gauge()), (0, 0));
        t.hold_gauge(o(31), false); // never below 0
        assert_eq!(t.gauge(), 0);
        take(&t, 32, a).unwrap();
        assert_eq!(t.stop(o(32)), 1, "an exiting process gives back");
        assert_eq!(t.held(key(a)), 0);
    }

    /// Hundreds of processes (old workers of many reloads) hold turns at
    /// once: none runs out of room while entries are left.
    #[test]
    fn any_number_of_processes_hold_turns() {
        let t = turns(Turns::bytes_for(4 << 20));
        for pid in 1..=500u32 {
            assert_eq!(take(&t, pid, 5).unwrap().1, pid - 1, "process {pid}");
            t.hold_gauge(o(pid), true);
        }
        assert_eq!((t.held(key(5)), t.gauge()), (500, 500));
        t.reclaim_dead(|_| false);
        assert_eq!((t.held(key(5)), t.gauge(), t.turns()), (0, 0, 0));
    }

    #[test]
    fn a_resized_zone_carries_the_turns_under_their_processes() {
        let old = turns(MIN_BYTES);
        let new = turns(Turns::bytes_for(2 << 20));
        let (a, b) = (1, 2);
        take(&old, 40, a).unwrap();
        take(&old, 40, a).unwrap();
        take(&old, 41, b).unwrap();
        old.hold_gauge(o(40), true);
        assert_eq!(new.carry_from(&old), (4, 0));
        let (ha, hb) = (new.held(key(a)), new.held(key(b)));
        assert_eq!((ha, hb, new.gauge()), (2, 1, 1));
        assert_eq!(take(&new, 50, a).unwrap().1, 2, "behind the carried ones");
        new.reclaim_dead(|pid| pid == 50);
        assert_eq!((new.held(key(a)), new.held(key(b)), new.gauge()), (1, 0, 0));
    }

    #[test]
    fn concurrent_takes_get_distinct_turns() {
        let t = turns(Turns::bytes_for(1 << 20));
        let handles: Vec<_> = (0..4)
            .map(|w| {
                std::thread::spawn(move || {
                    (0..200)
                        .map(|_| take(&t, 100 + w, 42).unwrap().1)
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
