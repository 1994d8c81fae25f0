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
//! * `pushed`: this gateway's own count last written to the cluster;
//! * `applied`: requests of other gateways already added to the slot.
//!
//! The cluster store holds, per key and window, one *absolute* count per
//! gateway (a Redis hash: field = gateway id, value = that gateway's own
//! count; see [`redis_key`] and [`gateway_field`]). A write sets a value,
//! never adds to one, so replaying a round, or any part of it, after a lost
//! reply never moves a total past what the gateways admitted.
//!
//! One sync round is [`Ledger::plan`] (what to write), the caller's I/O
//! (`HSET key me own` where [`Push::write`], then `HGETALL key`), then
//! [`Ledger::settle`] with what the store holds ([`shares`]) for
//! each key whose replies were good. A key whose replies were errors is
//! simply not settled: the next round writes and reads it again. Only one
//! process may run rounds at a time (the caller holds a lease): the
//! ledger's words are written by that process alone, with plain atomic
//! stores, and are in shared memory only so that the next holder of the
//! lease continues where the last one stopped. Without that, a new sync
//! process would take the remote share already in the slots for local
//! requests and write it as its own.

pub mod fleet;
pub mod hot;
pub mod slot;

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

/// One key's write (or read) in a sync round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Push {
    /// Table slot of the key.
    pub slot: u32,
    /// The key's 56-bit fingerprint: identical on every gateway that shares
    /// the zone's seed, so it names the key in the shared store.
    pub fingerprint: u64,
    /// Epoch window index of the counts.
    pub window_index: u64,
    /// Requests admitted by this gateway in the window (absolute).
    pub own: i64,
    /// False when `own` is what was last written: the key is only read.
    pub write: bool,
}

/// The store key of a client's counts in one window:
/// `rlw:{ZONE:FINGERPRINT}:WINDOW`. The part in braces is a Redis Cluster
/// hash tag: all of one client's keys (every window) map to one slot.
pub fn redis_key(zone: &str, window_index: u64, fingerprint: u64) -> String {
    format!("rlw:{{{zone}:{fingerprint:014x}}}:{window_index}")
}

/// The hash field under which gateway `id` writes its own count.
pub fn gateway_field(id: u64) -> String {
    format!("{id:016x}")
}

/// What the store holds for a key: this gateway's count and the sum of
/// the other gateways'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shares {
    /// The value of this gateway's field (0 when absent).
    pub mine: i64,
    /// The sum of every other field's value.
    pub others: i64,
}

/// Reads the `(field, value)` pairs of `HGETALL` as this gateway's (`me`)
/// count and the others' sum (fields whose value is not a count are
/// skipped, negative values count as 0).
pub fn shares<'f>(fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>, me: &str) -> Shares {
    let mut out = Shares::default();
    for (f, v) in fields {
        let Some(v) = core::str::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        else {
            continue;
        };
        if f == me.as_bytes() {
            out.mine = v.max(0);
        } else {
            out.others = out.others.saturating_add(v.max(0));
        }
    }
    out
}

/// Shortest accepted `secret=` of a Redis-backed zone, in bytes.
pub const MIN_SECRET_LEN: usize = 16;

/// What a sync thread of generation `me` may do, from the ownership words
/// of the zone (see [`claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// `me` owns the sync: run rounds.
    Held,
    /// The sync is free, or its owner is older and silent for too long:
    /// take it with a compare-and-swap from `from` to `me`.
    Take {
        /// The owner to replace (0: nobody).
        from: u64,
    },
    /// An older owner is alive: wait for it to step down.
    Wait,
    /// A newer generation owns or asks for the sync: step down (release it
    /// if held) and stop for good.
    Lost,
}

/// The ownership rule of a zone's sync. `owner` is the owning generation
/// (0: nobody), `handover` the highest generation that asked for it,
/// `beat_ms` the owner's last heartbeat (epoch ms), `me` the asking
/// thread's generation, `timeout_ms` how long an owner may stay silent.
///
/// Generations only grow, and an owner is only ever replaced by a newer
/// one: an older process, however late it wakes, can never take the sync
/// back, and any thread older than the newest asker stops.
pub fn claim(
    owner: u64,
    handover: u64,
    beat_ms: u64,
    me: u64,
    now_ms: u64,
    timeout_ms: u64,
) -> Claim {
    if handover > me || owner > me {
        Claim::Lost
    } else if owner == me {
        Claim::Held
    } else if owner == 0 || now_ms.saturating_sub(beat_ms) > timeout_ms {
        Claim::Take { from: owner }
    } else {
        Claim::Wait
    }
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

    /// Lists, for every key live in the current window of `table`, this
    /// gateway's own count. Keys whose count was already written are listed
    /// too (`write` false): their read brings the other gateways' share.
    pub fn plan(&self, table: &Table<'_>, now_ms: u64, out: &mut Vec<Push>) {
        let index = table.window().index(now_ms);
        table.for_each_current(now_ms, |slot, fp, current| {
            if slot as usize >= self.entries.len() {
                return;
            }
            let (pushed, applied) = self.read(slot as usize, fp, index);
            let own = (i64::from(current) - applied).max(0);
            out.push(Push {
                slot,
                fingerprint: fp,
                window_index: index,
                own,
                write: own != pushed,
            });
        });
    }

    /// Forgets the key of fingerprint `fp` after its store keys were
    /// deleted (a reset, see the nginx glue's `reset.rs`): its current count
    /// here (whatever a round added since the local reset) and its ledger
    /// entry go to 0, so the next round writes and reads it afresh.
    pub fn forget(&self, table: &Table<'_>, fp: u64, now_ms: u64) {
        let index = table.window().index(now_ms);
        table.for_each_current(now_ms, |slot, f, current| {
            if f == fp {
                table.add_current(slot, fp, now_ms, -i64::from(current));
            }
        });
        // A slot the local reset left at 0 is not listed above: find the
        // entry by its tag (a scan of the ledger, once per reset).
        let t = tag(fp, index);
        for (slot, e) in self.entries.iter().enumerate() {
            if e.tag.load(Ordering::Acquire) == t {
                self.write(slot, fp, index, 0, 0);
            }
        }
    }

    /// Records what the store holds for `push`'s key after its write (if
    /// any) and read succeeded: this gateway's count as stored (so that a
    /// store that lost it, a Redis restarted empty, gets it again next
    /// round) and the other gateways' share, of which what is new is added
    /// to the slot. Calling it twice with the same answer changes nothing.
    /// Returns what was added (requests of other gateways new here).
    pub fn settle(&self, table: &Table<'_>, push: &Push, stored: Shares, now_ms: u64) -> i64 {
        let slot = push.slot as usize;
        if slot >= self.entries.len() || table.window().index(now_ms) != push.window_index {
            return 0;
        }
        let (_, applied) = self.read(slot, push.fingerprint, push.window_index);
        let pushed = stored.mine.max(0);
        let others = stored.others.max(0);
        let add = others - applied;
        let (applied, added) =
            if add == 0 || table.add_current(push.slot, push.fingerprint, now_ms, add) {
                (others, add)
            } else {
                (applied, 0)
            };
        self.write(slot, push.fingerprint, push.window_index, pushed, applied);
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::window::Window;
    use crate::table::FailPolicy;
    use crate::testing::Region;
    use std::collections::HashMap;

    struct Gateway {
        id: u64,
        _t: Region,
        _l: Vec<u64>,
        table: Table<'static>,
        ledger: Ledger<'static>,
    }

    fn gateway(id: u64, seed: [u64; 2]) -> Gateway {
        let mut t = Region::new((Table::HEADER_BYTES / 64 + 64) * 64);
        // SAFETY: the buffers live as long as the Gateway and never move.
        let table =
            unsafe { Table::init(t.ptr(), t.len(), Window::from_ms(60_000).unwrap(), seed) }
                .unwrap();
        let mut l = vec![0u64; Ledger::bytes_for(table.capacity()) / 8];
        // SAFETY: as above.
        let ledger =
            unsafe { Ledger::over(l.as_mut_ptr().cast(), l.len() * 8, table.capacity()) }.unwrap();
        Gateway {
            id,
            _t: t,
            _l: l,
            table,
            ledger,
        }
    }

    /// A stand-in for Redis: key -> hash of gateway field -> value.
    type Store = HashMap<String, HashMap<String, String>>;

    /// What replies come back in a round.
    #[derive(Clone, Copy, PartialEq)]
    enum Fate {
        Delivered,
        /// The store ran the writes but the replies were lost (timeout).
        RepliesLost,
    }

    fn round_with(g: &Gateway, store: &mut Store, now: u64, fate: Fate) {
        round_parts(g.id, (&g.table, &g.ledger), store, now, fate);
    }

    fn round_parts(id: u64, g: (&Table, &Ledger), store: &mut Store, now: u64, fate: Fate) {
        let (table, ledger) = g;
        let mut pushes = vec![];
        ledger.plan(table, now, &mut pushes);
        let me = gateway_field(id);
        for p in pushes {
            let hash = store
                .entry(redis_key("z", p.window_index, p.fingerprint))
                .or_default();
            if p.write {
                hash.insert(me.clone(), p.own.to_string());
            }
            let fields = hash.iter().map(|(f, v)| (f.as_bytes(), v.as_bytes()));
            let stored = shares(fields, &me);
            if fate == Fate::Delivered {
                ledger.settle(table, &p, stored, now);
            }
        }
    }

    fn round(g: &Gateway, store: &mut Store, now: u64) {
        round_with(g, store, now, Fate::Delivered);
    }

    fn total(store: &Store) -> i64 {
        store
            .values()
            .flat_map(|h| h.values())
            .map(|v| v.parse::<i64>().unwrap())
            .sum()
    }

    const T0: u64 = 1_800_000_000_000 / 60_000 * 60_000;

    /// A charge (`Table::settle`) changes this gateway's own count, which
    /// the next round's plan writes, the other gateways' share kept.
    #[test]
    fn a_settlement_reaches_the_cluster_sync_as_own_count() {
        let g = gateway(1, [1, 2]);
        let (t, ledger) = (&g.table, &g.ledger);
        let k = t.hash_key(b"k");
        let d = t.acquire_cost(k, T0, 1_000, 1, FailPolicy::Open, 0);
        let a = d.admission.expect("admitted");
        let mut plan = vec![];
        ledger.plan(t, T0, &mut plan);
        assert_eq!((plan[0].own, plan[0].write), (1, true));
        // The round wrote 1; another gateway has 20.
        let stored = Shares {
            mine: 1,
            others: 20,
        };
        assert_eq!(ledger.settle(t, &plan[0], stored, T0), 20);
        t.settle(&a, 300);
        plan.clear();
        ledger.plan(t, T0, &mut plan);
        // This gateway's own count is the charge, the others' share kept.
        assert_eq!((plan[0].own, plan[0].write), (300, true));
        assert_eq!(t.peek(k, T0).current, 320);
    }

    #[test]
    fn a_reset_forgets_the_cluster_share_and_keeps_the_others_own() {
        let (a, b) = (gateway(1, [1, 2]), gateway(2, [1, 2]));
        let mut store = Store::new();
        let key = a.table.hash_key(b"client");
        for (g, i) in [(&a, 0), (&b, 1)] {
            for _ in 0..20 {
                let now = T0 + i;
                assert!(g
                    .table
                    .acquire(key, now, 40, FailPolicy::Open, 0)
                    .admission
                    .is_some());
            }
        }
        for g in [&a, &b, &a] {
            round(g, &mut store, T0 + 10);
        }
        assert_eq!(a.table.peek(key, T0 + 10).current, 40);
        // The reset: local clear, DEL of the store key, then forget.
        a.table.clear(key, T0 + 20);
        store.clear();
        a.ledger.forget(&a.table, key.fingerprint(), T0 + 20);
        // b's first round reads an empty hash (its share of a's goes), its
        // second writes its own count again.
        for g in [&a, &b, &b, &a] {
            round(g, &mut store, T0 + 30);
        }
        assert_eq!(total(&store), 20, "b's own count comes back");
        assert!(a
            .table
            .acquire(key, T0 + 40, 40, FailPolicy::Open, 0)
            .admission
            .is_some());
        for g in [&a, &b, &a] {
            round(g, &mut store, T0 + 50);
        }
        assert_eq!(a.table.peek(key, T0 + 50).current, 21);
        assert_eq!(b.table.peek(key, T0 + 50).current, 21);
        assert_eq!(total(&store), 21);
    }

    #[test]
    fn two_gateways_admit_about_the_limit() {
        let (a, b) = (gateway(1, [1, 2]), gateway(2, [1, 2]));
        let mut store = Store::new();
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
        assert_eq!(
            total(&store),
            admitted,
            "the store holds exactly the admitted requests"
        );
    }

    #[test]
    fn replayed_rounds_with_lost_replies_never_inflate_the_total() {
        let (a, b) = (gateway(1, [1, 2]), gateway(2, [1, 2]));
        let mut store = Store::new();
        let key = a.table.hash_key(b"slow");
        let mut admitted = 0;
        for i in 0..400u64 {
            let g = if i % 2 == 0 { &a } else { &b };
            let now = T0 + i * 50;
            if g.table
                .acquire(key, now, 1000, FailPolicy::Open, 0)
                .admission
                .is_some()
            {
                admitted += 1;
            }
            // Gateway a's replies are lost in 3 rounds of 4; every round
            // of both is run twice (a retry after a timeout).
            let fate = if i % 4 == 0 {
                Fate::Delivered
            } else {
                Fate::RepliesLost
            };
            for _ in 0..2 {
                round_with(&a, &mut store, now, fate);
                round(&b, &mut store, now);
            }
            assert!(total(&store) <= admitted, "round {i}");
        }
        assert_eq!(total(&store), admitted);
        round(&a, &mut store, T0 + 400 * 50);
        assert_eq!(a.table.peek(key, T0 + 400 * 50).current as i64, admitted);
        assert_eq!(b.table.peek(key, T0 + 400 * 50).current as i64, admitted);
    }

    #[test]
    fn settling_the_same_answer_twice_adds_nothing() {
        let a = gateway(1, [9, 9]);
        let key = a.table.hash_key(b"twice");
        a.table.acquire(key, T0, 100, FailPolicy::Open, 0);
        let mut p = vec![];
        a.ledger.plan(&a.table, T0 + 1, &mut p);
        assert_eq!((p[0].own, p[0].write), (1, true));
        let stored = Shares { mine: 1, others: 5 };
        a.ledger.settle(&a.table, &p[0], stored, T0 + 1);
        a.ledger.settle(&a.table, &p[0], stored, T0 + 1);
        assert_eq!(a.table.peek(key, T0 + 1).current, 6);
        let mut again = vec![];
        a.ledger.plan(&a.table, T0 + 2, &mut again);
        assert_eq!((again[0].own, again[0].write), (1, false));
    }

    #[test]
    fn a_new_sync_process_continues_without_double_counting() {
        let a = gateway(1, [3, 4]);
        let mut store = Store::new();
        let key = a.table.hash_key(b"k");
        for i in 0..5 {
            a.table.acquire(key, T0 + i, 100, FailPolicy::Open, 0);
        }
        // Another gateway's 7 requests are already in the store.
        let store_key = {
            let mut p = vec![];
            a.ledger.plan(&a.table, T0 + 10, &mut p);
            redis_key("z", p[0].window_index, p[0].fingerprint)
        };
        store
            .entry(store_key.clone())
            .or_default()
            .insert(gateway_field(2), "7".into());
        round(&a, &mut store, T0 + 10);
        assert_eq!(total(&store), 12);
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
            round_parts(1, (&a.table, &again), &mut store, T0 + 20, Fate::Delivered);
        }
        assert_eq!(store[&store_key][&gateway_field(1)], "5");
        assert_eq!(total(&store), 12);
        assert_eq!(a.table.peek(key, T0 + 20).current, 12);
    }

    #[test]
    fn a_new_window_starts_a_fresh_ledger_entry() {
        let a = gateway(1, [5, 6]);
        let mut store = Store::new();
        let key = a.table.hash_key(b"w");
        a.table.acquire(key, T0, 10, FailPolicy::Open, 0);
        round(&a, &mut store, T0);
        a.table.acquire(key, T0 + 60_000, 10, FailPolicy::Open, 0);
        round(&a, &mut store, T0 + 60_000);
        let mut totals: Vec<String> = store
            .values()
            .map(|h| h[&gateway_field(1)].clone())
            .collect();
        totals.sort();
        assert_eq!(totals, vec!["1", "1"], "one request written in each window");
    }

    #[test]
    fn an_entry_2_pow_24_windows_old_is_not_this_windows() {
        let a = gateway(1, [7, 8]);
        let mut store = Store::new();
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
        assert_eq!((p[0].own, p[0].write), (1, true), "one new request, not 5");
        round(&a, &mut store, back + 10);
        assert_eq!(a.table.peek(key, back + 10).current, 1);
    }

    #[test]
    fn keys_share_a_cluster_slot_per_client() {
        let k = redis_key("api", 29_000_000, 0xab_cdef);
        assert_eq!(k, "rlw:{api:00000000abcdef}:29000000");
        let tag = |k: &str| k[k.find('{').unwrap()..=k.find('}').unwrap()].to_string();
        assert_eq!(tag(&k), tag(&redis_key("api", 29_000_001, 0xab_cdef)));
        assert_ne!(tag(&k), tag(&redis_key("api", 29_000_000, 0xab_cdee)));
    }

    #[test]
    fn shares_split_own_field_and_skip_garbage() {
        let me = gateway_field(7);
        let f = [
            (me.as_bytes(), b"100".as_slice()),
            (b"00000000000000aa".as_slice(), b"3".as_slice()),
            (b"00000000000000bb".as_slice(), b"x".as_slice()),
            (b"00000000000000cc".as_slice(), b"-4".as_slice()),
            (b"00000000000000dd".as_slice(), b"4".as_slice()),
        ];
        assert_eq!(
            shares(f, &me),
            Shares {
                mine: 100,
                others: 7
            }
        );
    }

    #[test]
    fn a_store_that_lost_its_data_gets_the_counts_again() {
        let (a, b) = (gateway(1, [1, 2]), gateway(2, [1, 2]));
        let mut store = Store::new();
        let key = a.table.hash_key(b"restart");
        for i in 0..6 {
            let g = if i % 2 == 0 { &a } else { &b };
            g.table.acquire(key, T0 + i, 100, FailPolicy::Open, 0);
        }
        round(&a, &mut store, T0 + 10);
        round(&b, &mut store, T0 + 10);
        round(&a, &mut store, T0 + 10);
        assert_eq!(total(&store), 6);
        // Redis restarts empty; nothing new is admitted.
        store.clear();
        for _ in 0..2 {
            round(&a, &mut store, T0 + 20);
            round(&b, &mut store, T0 + 20);
        }
        round(&a, &mut store, T0 + 20);
        assert_eq!(total(&store), 6, "each gateway wrote its count again");
        assert_eq!(a.table.peek(key, T0 + 20).current, 6);
        assert_eq!(b.table.peek(key, T0 + 20).current, 6);
    }

    #[test]
    fn ownership_only_moves_to_newer_generations() {
        let t = 3_000;
        // Free: the first asker takes it.
        assert_eq!(claim(0, 1, 0, 1, 10, t), Claim::Take { from: 0 });
        assert_eq!(claim(1, 1, 10, 1, 20, t), Claim::Held);
        // A reload: generation 2 asks; the owner steps down, 2 waits.
        assert_eq!(claim(1, 2, 10, 1, 20, t), Claim::Lost);
        assert_eq!(claim(1, 2, 10, 2, 20, t), Claim::Wait);
        assert_eq!(claim(0, 2, 10, 2, 30, t), Claim::Take { from: 0 });
        // An owner that died is replaced after the timeout, by a newer one.
        assert_eq!(claim(2, 3, 30, 3, 30 + t, t), Claim::Wait);
        assert_eq!(claim(2, 3, 30, 3, 31 + t, t), Claim::Take { from: 2 });
        // The old owner wakes after a long stall: it never takes it back,
        // however stale the new owner's heartbeat looks.
        assert_eq!(claim(3, 3, 40, 2, 40 + 10 * t, t), Claim::Lost);
        assert_eq!(claim(0, 3, 40, 2, 50, t), Claim::Lost, "nor when free");
        // Two reloads in a row: the middle generation gives way too.
        assert_eq!(claim(0, 5, 0, 4, 60, t), Claim::Lost);
        assert_eq!(claim(0, 5, 0, 5, 60, t), Claim::Take { from: 0 });
    }
}
