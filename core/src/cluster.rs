//! Bookkeeping for a cluster sync (Redis-backed zones), over a
//! caller-provided region next to the table, so that it survives a reload
//! or a respawn of the process that syncs.
//!
//! A slot's current count mixes requests admitted here and the other
//! gateways' share that a sync added. To push only the *local delta* and to
//! add only what is *new* of the remote share, the ledger keeps per slot:
//!
//! ```text
//! word 0: fingerprint of the key it describes (bits 8..64; 0 = nothing)
//!         | window index bits 24..32 (bits 0..8)
//! word 1: window index mod 2^24 (bits 40..64) | pushed (bits 20..40) | applied (bits 0..20)
//! ```
//!
//! An entry thus names its window modulo 2^32 (136 years at `window=1s`):
//! an entry left from a window a multiple of 2^24 windows ago (194 days at
//! `window=1s`), when the key comes back to the same slot, is not taken
//! for the current window's.
//!
//! * `pushed`: requests of this gateway already added to the cluster total;
//! * `applied`: requests of other gateways already added to the slot.
//!
//! One sync round is [`Ledger::plan`] (what to push), the caller's I/O
//! (`INCRBY` of each delta, which returns the cluster total), then
//! [`Ledger::settle`] for each answer. Only one process may run rounds at a
//! time (the caller holds a lease): the ledger's words are written by that
//! process alone, with plain atomic stores, and are in shared memory only so
//! that the next holder of the lease continues where the last one stopped.
//! Without that, a new sync process would take the remote share already in
//! the slots for local requests and push it again.

use portable_atomic::{AtomicU64, Ordering};

use crate::table::Table;

const IDX_BITS: u32 = 24;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;
const FIELD_BITS: u32 = 20;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;

/// Bytes of ledger per table slot.
pub const LEDGER_BYTES_PER_SLOT: usize = 16;

#[repr(C)]
struct Entry {
    /// `fingerprint << 8 | (window index >> 24) & 0xff` (see [`tag`]).
    tag: AtomicU64,
    state: AtomicU64,
}

/// Word 0 of the entry for fingerprint `fp` (56 bits) in window `index`:
/// the bits of the index that word 1 has no room for.
fn tag(fp: u64, index: u64) -> u64 {
    (fp << 8) | ((index >> IDX_BITS) & 0xff)
}

/// One key's push in a sync round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Push {
    /// Table slot of the key.
    pub slot: u32,
    /// The key's 56-bit fingerprint: identical on every gateway that shares
    /// the zone's seed, so it names the key in the shared store.
    pub fingerprint: u64,
    /// Epoch window index of the counts.
    pub window_index: u64,
    /// Requests admitted here since the last push (negative after undos).
    pub delta: i64,
}

/// The per-slot sync ledger.
pub struct Ledger<'a> {
    entries: &'a [Entry],
}

impl<'a> Ledger<'a> {
    /// Bytes needed for a table of `capacity` slots.
    pub fn bytes_for(capacity: usize) -> usize {
        capacity * LEDGER_BYTES_PER_SLOT
    }

    /// A ledger over `region` for `capacity` slots. A zeroed region is an
    /// empty ledger; a region kept from an earlier process is adopted as is.
    ///
    /// # Safety
    /// `region` must be 8-byte aligned, valid for `len` bytes for `'a`,
    /// and used only as a ledger (possibly by other processes).
    pub unsafe fn over(region: *mut u8, len: usize, capacity: usize) -> Option<Ledger<'a>> {
        if !(region as usize).is_multiple_of(8) || len < Self::bytes_for(capacity) {
            return None;
        }
        // SAFETY: the caller guarantees `len` valid, aligned bytes; Entry is
        // two AtomicU64, valid for any bit pattern.
        let entries = unsafe { core::slice::from_raw_parts(region as *const Entry, capacity) };
        Some(Ledger { entries })
    }

    fn read(&self, slot: usize, fp: u64, index: u64) -> (i64, i64) {
        let e = &self.entries[slot];
        let state = e.state.load(Ordering::Acquire);
        if e.tag.load(Ordering::Acquire) != tag(fp, index)
            || (state >> (2 * FIELD_BITS)) != (index & IDX_MASK)
        {
            return (0, 0);
        }
        (
            ((state >> FIELD_BITS) & FIELD_MASK) as i64,
            (state & FIELD_MASK) as i64,
        )
    }

    fn write(&self, slot: usize, fp: u64, index: u64, pushed: i64, applied: i64) {
        let clamp = |v: i64| v.clamp(0, FIELD_MASK as i64) as u64;
        let state = ((index & IDX_MASK) << (2 * FIELD_BITS))
            | (clamp(pushed) << FIELD_BITS)
            | clamp(applied);
        let e = &self.entries[slot];
        e.tag.store(tag(fp, index), Ordering::Release);
        e.state.store(state, Ordering::Release);
    }

    /// Lists, for every key live in the current window of `table`, the
    /// local delta to push. Keys with a delta of 0 are listed too: their
    /// push (an `INCRBY` of 0) reads the other gateways' share.
    pub fn plan(&self, table: &Table<'_>, now_ms: u64, out: &mut Vec<Push>) {
        let index = table.window().index(now_ms);
        table.for_each_current(now_ms, |slot, fp, current| {
            if slot as usize >= self.entries.len() {
                return;
            }
            let (pushed, applied) = self.read(slot as usize, fp, index);
            let own = i64::from(current) - applied;
            out.push(Push {
                slot,
                fingerprint: fp,
                window_index: index,
                delta: own - pushed,
            });
        });
    }

    /// Records that `push` was added to the cluster, whose total for the key
    /// is now `cluster_total`, and adds the other gateways' new share to the
    /// slot.
    pub fn settle(&self, table: &Table<'_>, push: &Push, cluster_total: i64, now_ms: u64) {
        let slot = push.slot as usize;
        if slot >= self.entries.len() || table.window().index(now_ms) != push.window_index {
            return;
        }
        let (pushed, applied) = self.read(slot, push.fingerprint, push.window_index);
        let pushed = pushed + push.delta;
        let others = (cluster_total - pushed).max(0);
        let add = others - applied;
        let applied = if add == 0 || table.add_current(push.slot, push.fingerprint, now_ms, add) {
            others
        } else {
            applied
        };
        self.write(slot, push.fingerprint, push.window_index, pushed, applied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::FailPolicy;
    use crate::window::Window;
    use std::collections::HashMap;

    #[repr(C, align(64))]
    struct Line([u8; 64]);

    struct Gateway {
        _t: Vec<Line>,
        _l: Vec<u64>,
        table: Table<'static>,
        ledger: Ledger<'static>,
    }

    fn gateway(seed: [u64; 2]) -> Gateway {
        let mut t: Vec<Line> = (0..(Table::HEADER_BYTES / 64 + 64))
            .map(|_| Line([0; 64]))
            .collect();
        // SAFETY: the buffers live as long as the Gateway and never move.
        let table = unsafe {
            Table::init(
                t.as_mut_ptr().cast(),
                t.len() * 64,
                Window::from_ms(60_000).unwrap(),
                seed,
            )
        }
        .unwrap();
        let mut l = vec![0u64; Ledger::bytes_for(table.capacity()) / 8];
        // SAFETY: as above.
        let ledger =
            unsafe { Ledger::over(l.as_mut_ptr().cast(), l.len() * 8, table.capacity()) }.unwrap();
        Gateway {
            _t: t,
            _l: l,
            table,
            ledger,
        }
    }

    /// A stand-in for Redis: key -> total.
    fn round(g: &Gateway, store: &mut HashMap<(u64, u64), i64>, now: u64) {
        let mut pushes = vec![];
        g.ledger.plan(&g.table, now, &mut pushes);
        for p in pushes {
            let total = store.entry((p.window_index, p.fingerprint)).or_insert(0);
            *total += p.delta;
            g.ledger.settle(&g.table, &p, *total, now);
        }
    }

    const T0: u64 = 1_800_000_000_000 / 60_000 * 60_000;

    #[test]
    fn two_gateways_admit_about_the_limit() {
        let (a, b) = (gateway([1, 2]), gateway([1, 2]));
        let mut store = HashMap::new();
        let key = a.table.hash_key(b"client");
        let mut admitted = 0;
        for i in 0..200u64 {
            let g = if i % 2 == 0 { &a } else { &b };
            let now = T0 + i * 50;
            if g.table
                .acquire(key, now, 40, FailPolicy::Open, 0)
                .admission
                .is_some()
            {
                admitted += 1;
            }
            if i % 2 == 1 {
                round(&a, &mut store, now);
                round(&b, &mut store, now);
            }
        }
        assert!((40..=42).contains(&admitted), "admitted {admitted}");
        let total = store.values().sum::<i64>();
        assert_eq!(
            total, admitted,
            "the store holds exactly the admitted requests"
        );
    }

    #[test]
    fn a_new_sync_process_continues_without_double_counting() {
        let a = gateway([3, 4]);
        let mut store = HashMap::new();
        let key = a.table.hash_key(b"k");
        for i in 0..5 {
            a.table.acquire(key, T0 + i, 100, FailPolicy::Open, 0);
        }
        // Another gateway's 7 requests are already in the store.
        let fp_store_key = {
            let mut p = vec![];
            a.ledger.plan(&a.table, T0 + 10, &mut p);
            (p[0].window_index, p[0].fingerprint)
        };
        store.insert(fp_store_key, 7);
        round(&a, &mut store, T0 + 10);
        assert_eq!(store[&fp_store_key], 12);
        assert_eq!(a.table.peek(key, T0 + 10).current, 12);
        // The sync restarts (reload): a new view of the same ledger memory.
        // SAFETY: the same buffer as a.ledger, still alive.
        let again = unsafe {
            Ledger::over(
                a.ledger.entries.as_ptr() as *mut u8,
                a.ledger.entries.len() * 16,
                a.table.capacity(),
            )
        }
        .unwrap();
        for _ in 0..3 {
            let mut p = vec![];
            again.plan(&a.table, T0 + 20, &mut p);
            assert_eq!(p.len(), 1);
            assert_eq!(p[0].delta, 0, "nothing new to push after a restart");
            let total = store.get_mut(&fp_store_key).unwrap();
            *total += p[0].delta;
            again.settle(&a.table, &p[0], *total, T0 + 20);
        }
        assert_eq!(store[&fp_store_key], 12);
        assert_eq!(a.table.peek(key, T0 + 20).current, 12);
    }

    #[test]
    fn a_new_window_starts_a_fresh_ledger_entry() {
        let a = gateway([5, 6]);
        let mut store = HashMap::new();
        let key = a.table.hash_key(b"w");
        a.table.acquire(key, T0, 10, FailPolicy::Open, 0);
        round(&a, &mut store, T0);
        a.table.acquire(key, T0 + 60_000, 10, FailPolicy::Open, 0);
        round(&a, &mut store, T0 + 60_000);
        let mut totals: Vec<i64> = store.values().copied().collect();
        totals.sort();
        assert_eq!(totals, vec![1, 1], "one request pushed in each window");
    }

    #[test]
    fn an_entry_2_pow_24_windows_old_is_not_this_windows() {
        let a = gateway([7, 8]);
        let mut store = HashMap::new();
        let key = a.table.hash_key(b"back");
        for i in 0..5 {
            a.table.acquire(key, T0 + i, 10, FailPolicy::Open, 0);
        }
        round(&a, &mut store, T0 + 10);
        // The zone's sweep clears the stale slot; the key comes back to the
        // same slot 2^24 windows (32 years of minutes) later, to the same
        // window index mod 2^24.
        let cap = a.table.capacity();
        assert_eq!(a.table.sweep(T0 + 120_000, 0, cap).1, 1);
        let back = T0 + (1 << 24) * 60_000;
        a.table.acquire(key, back, 10, FailPolicy::Open, 0);
        let mut p = vec![];
        a.ledger.plan(&a.table, back + 10, &mut p);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].delta, 1, "one new request, not 1 - 5 already pushed");
        round(&a, &mut store, back + 10);
        assert_eq!(a.table.peek(key, back + 10).current, 1);
    }
}
