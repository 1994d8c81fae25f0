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
//! Lock-free: compare-and-swap and atomic adds only; a worker killed at any
//! point leaves no turn that its successor does not take back (the row's
//! add comes first: at worst the bucket is one turn short).

use core::sync::atomic::{AtomicU32, Ordering};

/// Client buckets.
pub const BUCKETS: usize = 1024;
/// Rows: workers `w` and `w + ROWS` share a row (their entries stay apart
/// by their worker tag).
pub const ROWS: usize = 16;
/// Buckets one row tracks at once: a worker holding requests of more
/// distinct clients of the zone than this refuses the next one at once.
pub const ENTRIES: usize = 128;

const COUNT_BITS: u32 = 13;
const WORKER_BITS: u32 = 8;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;
const WORKER_MASK: u32 = (1 << WORKER_BITS) - 1;
const BUCKET_SHIFT: u32 = COUNT_BITS + WORKER_BITS;

/// The held requests of a zone's clients (12 KB).
#[repr(C)]
pub struct Turns {
    /// Requests held now per client bucket, every worker's.
    buckets: [AtomicU32; BUCKETS],
    /// Per worker: `(bucket + 1) << 21 | worker tag << 13 | count`, 0 free.
    rows: [[AtomicU32; ENTRIES]; ROWS],
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            buckets: core::array::from_fn(|_| AtomicU32::new(0)),
            rows: core::array::from_fn(|_| core::array::from_fn(|_| AtomicU32::new(0))),
        }
    }
}

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

impl Turns {
    /// The row of `worker`, and the owner `worker` has for `client`.
    fn row(&self, worker: usize, client: u64) -> (&[AtomicU32; ENTRIES], (u32, u32)) {
        let b = bucket(client) as u32 + 1;
        (&self.rows[worker % ROWS], (b, worker as u32 & WORKER_MASK))
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
        let (row, tag) = (&self.rows[worker % ROWS], worker as u32 & WORKER_MASK);
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

    /// Two clients of different buckets.
    fn two() -> (u64, u64) {
        let a = 1u64;
        let b = (2u64..).find(|&c| bucket(c) != bucket(a)).unwrap();
        (a, b)
    }

    #[test]
    fn tickets_count_across_workers_and_give_back() {
        let t = Turns::default();
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
        assert!(t.rows[0].iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_worker_started_takes_back_what_its_number_held() {
        let t = Turns::default();
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
        let t = Turns::default();
        let mut clients = vec![];
        let mut seen = std::collections::HashSet::new();
        for c in 1u64.. {
            if seen.insert(bucket(c)) {
                clients.push(c);
            }
            if clients.len() == ENTRIES + 1 {
                break;
            }
        }
        for &c in &clients[..ENTRIES] {
            assert_eq!(t.take(2, c), Some(0));
        }
        assert_eq!(t.take(2, clients[ENTRIES]), None);
        assert_eq!(t.held(clients[ENTRIES]), 0, "a refused take counts nothing");
        assert_eq!(
            t.take(2, clients[0]),
            Some(1),
            "a client already there counts on"
        );
        assert_eq!(t.take(5, clients[ENTRIES]), Some(0), "other rows have room");
        t.clear_worker(2);
        assert_eq!(t.held(clients[0]), 0);
        assert_eq!(t.take(2, clients[ENTRIES]), Some(1));
    }

    #[test]
    fn concurrent_takes_get_distinct_turns() {
        let t = std::sync::Arc::new(Turns::default());
        let handles: Vec<_> = (0..4)
            .map(|w| {
                let t = t.clone();
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
