//! `delay=`'s queue turns, shared by every worker of a zone: how many
//! requests each client holds now, across workers, so that a request newly
//! held waits behind all of them (see [`crate::delay`]), not only behind
//! those its own worker holds.
//!
//! * **Tickets.** Each client has a bucket (its key hash modulo
//!   [`BUCKETS`]): the number of its requests held now, by every worker. A
//!   request takes its turn with one atomic add, whose old value is the
//!   number of requests ahead of it: two workers taking turns at once get
//!   two different turns. Clients that share a bucket wait behind each
//!   other (at worst a request refused at once that could have been held).
//! * **Reclaimed with their worker.** Each worker keeps in its own row (of
//!   [`ROWS`], by `ngx_worker % ROWS`) what it added to which bucket. A
//!   worker that starts (a respawn after a crash) takes its row's counts
//!   back out of the buckets: no turn outlives the worker that held it.
//!
//! The region is a part of the zone ([`crate::shm::Parts`]), sized with the
//! zone ([`Turns::bytes_for`]): a row tracks as many clients as its share
//! of the region holds ([`Turns::entries`]: 192 in a `1m` zone, 2,496 in
//! a `10m` one).
//!
//! Lock-free: compare-and-swap and atomic adds only; a worker killed at any
//! point leaves no turn that its successor does not take back (the row's
//! add comes first: at worst the bucket is one turn short).

use core::sync::atomic::{AtomicU32, Ordering};

/// Client buckets.
pub const BUCKETS: usize = 1024;
/// Rows: workers `w` and `w + ROWS` share a row (their entries stay apart
/// by their worker tag).
pub const ROWS: usize = 16;

const COUNT_BITS: u32 = 13;
const WORKER_BITS: u32 = 8;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;
const WORKER_MASK: u32 = (1 << WORKER_BITS) - 1;
const BUCKET_SHIFT: u32 = COUNT_BITS + WORKER_BITS;
/// Bytes of the buckets, at the region's start.
const BUCKET_BYTES: usize = BUCKETS * 4;
/// The smallest region: 32 entries a row.
const MIN_BYTES: usize = BUCKET_BYTES + ROWS * 32 * 4;
/// The largest region (256 KB): about 4,000 entries a row.
const MAX_BYTES: usize = 256 << 10;

/// The held requests of a zone's clients, over a region of the zone:
/// [`BUCKETS`] counts, then [`ROWS`] rows of [`Turns::entries`] words.
#[derive(Clone, Copy)]
pub struct Turns<'a> {
    /// Requests held now per client bucket, every worker's.
    buckets: &'a [AtomicU32],
    /// Per worker: `(bucket + 1) << 21 | worker tag << 13 | count`, 0 free.
    rows: &'a [AtomicU32],
    /// Entries a row.
    entries: usize,
}

/// The region is too small for the turns ([`Turns::bytes_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooSmall;

/// The bucket of `client` (a key hash): clients of one bucket share a
/// queue.
pub fn bucket(client: u64) -> usize {
    (client.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % BUCKETS
}

/// A row entry's owner: (bucket + 1, worker tag).
fn owner(word: u32) -> (u32, u32) {
    (word >> BUCKET_SHIFT, (word >> COUNT_BITS) & WORKER_MASK)
}

/// Takes one from `a`, never below 0.
fn decrement(a: &AtomicU32, by: u32) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
        Some(n.saturating_sub(by))
    });
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
    /// `region` must be 4-byte aligned, valid for reads and writes of
    /// `len` bytes for `'a`, and only accessed through [`Turns`] (of any
    /// process) meanwhile.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Turns<'a>, TooSmall> {
        if region.is_null() || len < MIN_BYTES || region.align_offset(4) != 0 {
            return Err(TooSmall);
        }
        let words = len / 4;
        let entries = (words - BUCKETS) / ROWS;
        // SAFETY: the caller's guarantees; AtomicU32 has u32's layout and
        // every bit pattern is valid.
        let all = unsafe { core::slice::from_raw_parts(region.cast::<AtomicU32>(), words) };
        Ok(Turns {
            buckets: &all[..BUCKETS],
            rows: &all[BUCKETS..BUCKETS + entries * ROWS],
            entries,
        })
    }

    /// Entries a row: distinct clients one worker holds requests of at once
    /// (workers beyond [`ROWS`] share a row).
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The row of `worker`.
    fn row_of(&self, worker: usize) -> &'a [AtomicU32] {
        let r = worker % ROWS;
        &self.rows[r * self.entries..(r + 1) * self.entries]
    }

    /// The row of `worker`, and the owner `worker` has for `client`.
    fn row(&self, worker: usize, client: u64) -> (&'a [AtomicU32], (u32, u32)) {
        let b = bucket(client) as u32 + 1;
        (self.row_of(worker), (b, worker as u32 & WORKER_MASK))
    }

    /// `worker` takes a turn for a request of `client`: the number of its
    /// requests held before it (by any worker). None: the worker's row has
    /// no room for another client (or its count is at its maximum): the
    /// request is not to be held.
    pub fn take(&self, worker: usize, client: u64) -> Option<u32> {
        let (row, me) = self.row(worker, client);
        let fresh = (me.0 << BUCKET_SHIFT) | (me.1 << COUNT_BITS) | 1;
        let mut taken = false;
        'entries: for e in row {
            let mut w = e.load(Ordering::Relaxed);
            loop {
                let next = match w {
                    0 => fresh,
                    w if owner(w) == me && w & COUNT_MASK < COUNT_MASK => w + 1,
                    w if owner(w) == me => return None,
                    _ => continue 'entries,
                };
                match e.compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => {
                        taken = true;
                        break 'entries;
                    }
                    Err(now) => w = now,
                }
            }
        }
        if !taken {
            return None;
        }
        // The row's add first: a worker killed here leaves the bucket a
        // turn short, never a turn that nobody takes back.
        Some(self.buckets[bucket(client)].fetch_add(1, Ordering::AcqRel))
    }

    /// `worker` gives back a turn of `client` (a held request decided or
    /// gone); nothing when its row has none (as after a clear).
    pub fn give(&self, worker: usize, client: u64) {
        let (row, me) = self.row(worker, client);
        for e in row {
            let mut w = e.load(Ordering::Relaxed);
            while w != 0 && owner(w) == me {
                let next = if w & COUNT_MASK <= 1 { 0 } else { w - 1 };
                match e.compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => {
                        decrement(&self.buckets[bucket(client)], 1);
                        return;
                    }
                    Err(now) => w = now,
                }
            }
        }
    }

    /// Requests of `client` (and of the clients sharing its bucket) held
    /// now, by every worker.
    pub fn held(&self, client: u64) -> u32 {
        self.buckets[bucket(client)].load(Ordering::Acquire)
    }

    /// Takes back every turn `worker` holds (a worker starting: what a dead
    /// one of the same number held is gone with it).
    pub fn clear_worker(&self, worker: usize) {
        let (row, tag) = (self.row_of(worker), worker as u32 & WORKER_MASK);
        for e in row {
            let w = e.load(Ordering::Relaxed);
            if w == 0 || owner(w).1 != tag {
                continue;
            }
            if e.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let b = (owner(w).0 - 1) as usize;
                decrement(&self.buckets[b], w & COUNT_MASK);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns over a leaked region of `len` bytes.
    fn turns(len: usize) -> Turns<'static> {
        let buf: &'static mut [u32] = vec![0u32; len / 4].leak();
        // SAFETY: an exclusive, aligned buffer that lives forever.
        unsafe { Turns::init(buf.as_mut_ptr().cast(), len) }.unwrap()
    }

    #[test]
    fn sized_with_the_zone() {
        assert_eq!(Turns::bytes_for(32 << 10), MIN_BYTES);
        assert_eq!(Turns::bytes_for(1 << 20), 16 << 10);
        assert_eq!(Turns::bytes_for(1 << 30), MAX_BYTES);
        assert_eq!(turns(Turns::bytes_for(1 << 20)).entries(), 192);
        assert_eq!(turns(Turns::bytes_for(10 << 20)).entries(), 2496);
        let mut small = [0u32; 16];
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
    fn tickets_count_across_workers_and_give_back() {
        let t = turns(MIN_BYTES);
        let (a, b) = two();
        assert_eq!(t.held(a), 0);
        assert_eq!(t.take(0, a), Some(0));
        assert_eq!(t.take(1, a), Some(1));
        assert_eq!(t.take(1, a), Some(2));
        assert_eq!(t.take(1, b), Some(0));
        assert_eq!((t.held(a), t.held(b)), (3, 1));
        t.give(1, a);
        t.give(1, a);
        t.give(1, a); // one too many for worker 1: nothing
        assert_eq!(t.held(a), 1);
        t.give(0, a);
        assert_eq!(t.held(a), 0);
        assert!(t.row_of(0).iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_worker_started_takes_back_what_its_number_held() {
        let t = turns(MIN_BYTES);
        let (a, b) = two();
        assert_eq!(t.take(3, a), Some(0));
        assert_eq!(t.take(3, a), Some(1));
        assert_eq!(t.take(3, b), Some(0));
        assert_eq!(t.take(3 + ROWS, a), Some(2), "another worker, the same row");
        t.clear_worker(3);
        assert_eq!((t.held(a), t.held(b)), (1, 0), "only worker 3's turns");
        t.give(3, a); // worker 3 was cleared: nothing to give back
        assert_eq!(t.held(a), 1);
        t.give(3 + ROWS, a);
        assert_eq!(t.held(a), 0);
    }

    #[test]
    fn a_full_row_refuses_a_new_client() {
        let t = turns(MIN_BYTES);
        let mut clients = vec![];
        let mut seen = std::collections::HashSet::new();
        for c in 1u64.. {
            if seen.insert(bucket(c)) {
                clients.push(c);
            }
            if clients.len() == t.entries() + 1 {
                break;
            }
        }
        for &c in &clients[..t.entries()] {
            assert_eq!(t.take(2, c), Some(0));
        }
        assert_eq!(t.take(2, clients[t.entries()]), None);
        assert_eq!(
            t.held(clients[t.entries()]),
            0,
            "a refused take counts nothing"
        );
        assert_eq!(
            t.take(2, clients[0]),
            Some(1),
            "a client already there counts on"
        );
        assert_eq!(
            t.take(5, clients[t.entries()]),
            Some(0),
            "other rows have room"
        );
        t.clear_worker(2);
        assert_eq!(t.held(clients[0]), 0);
        assert_eq!(t.take(2, clients[t.entries()]), Some(1));
    }

    #[test]
    fn concurrent_takes_get_distinct_turns() {
        let t = turns(MIN_BYTES);
        let handles: Vec<_> = (0..4)
            .map(|w| {
                std::thread::spawn(move || {
                    (0..200).map(|_| t.take(w, 42).unwrap()).collect::<Vec<_>>()
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
