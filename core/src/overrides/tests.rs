//! Tests of the override table (core/src/overrides/mod.rs).

use super::slot::{id_of, is_live};
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

use crate::MAX_LIMIT;

const FP_MASK: u64 = (1 << 56) - 1;

/// A 64-byte aligned buffer for a table of `cap` entries.
pub(super) struct Region {
    buf: Vec<u128>,
    len: usize,
}

impl Region {
    pub(super) fn new(cap: usize) -> Region {
        let len = Overrides::bytes_for(cap);
        // u128 is 16-byte aligned; 64 more bytes let us align to 64.
        Region {
            buf: vec![0u128; len / 16 + 4],
            len,
        }
    }

    pub(super) fn ptr(&mut self) -> *mut u8 {
        let p = self.buf.as_mut_ptr().cast::<u8>();
        p.wrapping_add(p.align_offset(64))
    }

    pub(super) fn table(&mut self, cap: usize) -> Overrides<'_> {
        let (p, len) = (self.ptr(), self.len);
        // SAFETY: p is 64-byte aligned with `len` bytes of our buffer.
        unsafe { Overrides::init(p, len, cap) }.unwrap()
    }
}

pub(super) fn limit(fp: u64, n: u32, expires_ms: u64) -> Entry {
    Entry {
        fp,
        action: Action::Limit(n),
        expires_ms,
    }
}

#[test]
fn set_get_remove() {
    let mut r = Region::new(8);
    let t = r.table(8);
    assert_eq!(t.live(), 0);
    assert_eq!(t.get(42, 1000), None);
    assert_eq!(t.set(limit(42, 5, 0), 1000), Ok(None));
    assert_eq!(t.live(), 1);
    assert_eq!(t.get(42, 1000), Some(limit(42, 5, 0)));
    assert_eq!(t.get_hash(KeyHash(42 << 8), 1000), Some(limit(42, 5, 0)));
    // Replacing keeps one entry and returns the old one.
    assert_eq!(t.set(limit(42, 9, 0), 1000), Ok(Some(limit(42, 5, 0))));
    assert_eq!(t.live(), 1);
    assert_eq!(t.get(42, 1000).unwrap().action, Action::Limit(9));
    assert_eq!(t.remove(42, 1000), Some(limit(42, 9, 0)));
    assert_eq!(t.remove(42, 1000), None);
    assert_eq!(t.get(42, 1000), None);
    assert_eq!(t.live(), 0);
}

#[test]
fn every_action_and_the_largest_values_round_trip() {
    let mut r = Region::new(8);
    let t = r.table(8);
    let all = [
        limit(FP_MASK, MAX_LIMIT, MAX_EXPIRY_MS),
        limit(1, 0, 1),
        Entry {
            fp: 2,
            action: Action::Block,
            expires_ms: 0,
        },
        Entry {
            fp: 3,
            action: Action::Exempt,
            expires_ms: 5,
        },
        Entry {
            fp: 4,
            action: Action::Ban,
            expires_ms: 9,
        },
        Entry {
            fp: 5,
            action: Action::InFlight(crate::shm::places::MAX_IN_FLIGHT),
            expires_ms: MAX_EXPIRY_MS,
        },
        Entry {
            fp: 6,
            action: Action::InFlight(0),
            expires_ms: 0,
        },
    ];
    for e in all {
        t.set(e, 0).unwrap();
        assert_eq!(t.get(e.fp, 0), Some(e));
    }
    let mut listed: Vec<Entry> = t.iter(0).collect();
    listed.sort_by_key(|e| e.fp);
    let mut want = all.to_vec();
    want.sort_by_key(|e| e.fp);
    assert_eq!(listed, want);
}

#[test]
fn expiry_hides_and_reaps() {
    let mut r = Region::new(4);
    let t = r.table(4);
    t.set(limit(7, 1, 5000), 1000).unwrap();
    assert!(t.get(7, 4999).is_some());
    assert_eq!(t.get(7, 4999).unwrap().secs_left(3500), Some(2));
    assert_eq!(t.get(7, 5000), None);
    // The lookup reaped it: the request path is back to one load.
    assert_eq!(t.live(), 0);
    assert_eq!(t.iter(5000).count(), 0);
}

#[test]
fn a_full_table_refuses_and_frees_room_on_removal_or_expiry() {
    let mut r = Region::new(3);
    let t = r.table(3);
    for fp in 1..=3 {
        t.set(limit(fp, 1, if fp == 3 { 2000 } else { 0 }), 1000)
            .unwrap();
    }
    assert_eq!(t.set(limit(9, 1, 0), 1000), Err(Full { capacity: 3 }));
    // An update of a present client still works.
    assert!(t.set(limit(2, 8, 0), 1000).is_ok());
    t.remove(1, 1000).unwrap();
    assert!(t.set(limit(9, 1, 0), 1000).is_ok());
    assert_eq!(t.set(limit(10, 1, 0), 1000), Err(Full { capacity: 3 }));
    // fp 3 expires at 2000: its room is free again.
    assert!(t.set(limit(10, 1, 0), 2000).is_ok());
    assert_eq!(t.live(), 3);
}

#[test]
fn churn_keeps_working() {
    let mut r = Region::new(4);
    let t = r.table(4);
    for round in 0..10_000u64 {
        let fp = (round.wrapping_mul(0x9e37_79b9_7f4a_7c15) & FP_MASK) | 1;
        t.set(limit(fp, 1, 0), 0).unwrap();
        assert!(t.get(fp, 0).is_some());
        assert_eq!(t.remove(fp, 0).map(|e| e.fp), Some(fp));
    }
    assert_eq!(t.live(), 0);
}

#[test]
fn bans_never_replace_an_operators_override() {
    let mut r = Region::new(4);
    let t = r.table(4);
    assert!(t.ban(5, 60_000, 1000));
    assert_eq!(t.get(5, 1000).unwrap().action, Action::Ban);
    assert_eq!(t.bans_total(), 1);
    assert_eq!(t.banned_now(1000), 1);
    assert_eq!(t.banned_now(60_000), 0);
    t.set(
        Entry {
            fp: 6,
            action: Action::Exempt,
            expires_ms: 0,
        },
        1000,
    )
    .unwrap();
    assert!(!t.ban(6, 60_000, 1000));
    assert_eq!(t.get(6, 1000).unwrap().action, Action::Exempt);
}

#[test]
fn restore_skips_expired_and_attach_sees_the_same_table() {
    let mut r = Region::new(4);
    let (p, len) = (r.ptr(), r.len);
    let t = r.table(4);
    let saved = [limit(1, 3, 0), limit(2, 3, 500), limit(3, 3, 5000)];
    for e in saved {
        t.set(e, 0).unwrap();
    }
    let dump: Vec<Entry> = t.iter(1000).collect();
    assert_eq!(dump.len(), 2);
    let mut r2 = Region::new(4);
    let t2 = r2.table(4);
    for e in saved {
        t2.restore(e, 1000).unwrap();
    }
    assert_eq!(t2.live(), 2);
    assert_eq!(t2.get(2, 1000), None);
    // SAFETY: the region formatted above, still alive.
    let again = unsafe { Overrides::attach(p, len) }.unwrap();
    assert_eq!(again.get(3, 1000), Some(limit(3, 3, 5000)));
    assert_eq!(again.capacity(), 4);
}

#[test]
fn init_and_attach_check_the_region() {
    let mut r = Region::new(4);
    let (p, len) = (r.ptr(), r.len);
    // SAFETY: in bounds of our buffer; init refuses before writing.
    let e = unsafe { Overrides::init(p, len - 1, 4) }.unwrap_err();
    assert_eq!(e, OverridesError::TooSmall);
    // SAFETY: as above.
    let e = unsafe { Overrides::init(p.wrapping_add(16), len, 4) }.unwrap_err();
    assert_eq!(e, OverridesError::Misaligned);
    // SAFETY: as above.
    let e = unsafe { Overrides::init(p, len, 0) }.unwrap_err();
    assert_eq!(e, OverridesError::BadCapacity);
    // SAFETY: zeroed, never formatted.
    let e = unsafe { Overrides::attach(p, len) }.unwrap_err();
    assert_eq!(e, OverridesError::NotFormatted);
}

#[test]
fn concurrent_sets_of_one_client_leave_one_entry() {
    let mut r = Region::new(64);
    let t = r.table(64);
    // Fill and free some slots so that the inserts race on free slots of
    // both kinds (empty, and removals').
    for fp in (1..40u64).map(|i| i << 20) {
        t.set(limit(fp, 1, 0), 0).unwrap();
    }
    for fp in (1..40u64).map(|i| i << 20) {
        t.remove(fp, 0);
    }
    std::thread::scope(|s| {
        for n in 0..4u32 {
            s.spawn(move || {
                for i in 0..2000u32 {
                    t.set(limit(5 << 20, n * 10_000 + i, 0), 0).unwrap();
                }
            });
        }
    });
    let of_client: Vec<Entry> = t.iter(0).filter(|e| e.fp == 5 << 20).collect();
    assert_eq!(of_client.len(), 1, "{of_client:?}");
    assert_eq!(t.live(), 1);
}

#[test]
fn concurrent_sets_of_many_clients_all_land_within_capacity() {
    let mut r = Region::new(100);
    let t = r.table(100);
    let full = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for n in 0..4u64 {
            let full = &full;
            s.spawn(move || {
                for i in 0..50u64 {
                    let fp = ((n * 1000 + i + 1) * 0x9e37_79b9) & FP_MASK;
                    if t.set(limit(fp, 1, 0), 0).is_err() {
                        full.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(t.live(), 100);
    assert_eq!(t.iter(0).count(), 100);
    assert_eq!(full.into_inner(), 100);
}

#[derive(Clone, Debug)]
enum Op {
    Set(u64, u32, u64),
    Remove(u64),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct clients so that operations collide on them.
    let fp = (1u64..12).prop_map(|i| (i * 0x0101_0101) & FP_MASK);
    prop_oneof![
        (fp.clone(), 0..100u32, 0..3u64).prop_map(|(f, n, e)| Op::Set(f, n, e)),
        fp.prop_map(Op::Remove),
        (1..3000u64).prop_map(Op::Tick),
    ]
}

proptest! {
    /// The table agrees with a map at every step: live entries, expiry,
    /// the capacity bound.
    #[test]
    fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..200)) {
        let mut r = Region::new(6);
        let t = r.table(6);
        let mut model: HashMap<u64, Entry> = HashMap::new();
        let mut now = 10_000u64;
        for o in ops {
            model.retain(|_, e| !e.expired(now));
            match o {
                Op::Set(fp, n, e) => {
                    let exp = if e == 0 { 0 } else { now + e * 1000 };
                    let want_full = !model.contains_key(&fp) && model.len() >= 6;
                    let got = t.set(limit(fp, n, exp), now);
                    prop_assert_eq!(got.is_err(), want_full);
                    if !want_full {
                        prop_assert_eq!(got.unwrap(), model.insert(fp, limit(fp, n, exp)));
                    }
                }
                Op::Remove(fp) => prop_assert_eq!(t.remove(fp, now), model.remove(&fp)),
                Op::Tick(ms) => now += ms,
            }
            model.retain(|_, e| !e.expired(now));
            for (fp, e) in &model {
                prop_assert_eq!(t.get(*fp, now), Some(*e));
            }
            let mut listed: Vec<u64> = t.iter(now).map(|e| e.fp).collect();
            listed.sort_unstable();
            let mut want: Vec<u64> = model.keys().copied().collect();
            want.sort_unstable();
            prop_assert_eq!(listed, want);
        }
    }
}

/// Whether both candidate groups of `id` hold only live entries at
/// `now` (the one way a table below capacity refuses an entry).
fn groups_full(t: &Overrides, id: u64, now: u64) -> bool {
    t.candidates(id).all(|idx| {
        let w = t.slots[idx].load(Ordering::Acquire);
        matches!(decode(w), Slot::Live(e) if !e.expired(now))
    })
}

#[test]
fn history_leaves_nothing_behind() {
    // A million ttl'd overrides come and go beside one that stays: the
    // slots of the gone ones are free again (no tombstone), so the table
    // is as a fresh one and a lookup still reads its 32 slots only.
    let cap = 1024;
    let mut r = Region::new(cap);
    let t = r.table(cap);
    t.set(limit(0x77 << 20, 1, 0), 0).unwrap();
    let mut now = 1_000u64;
    for i in 0..1_000_000u64 {
        let fp = ((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & FP_MASK | 1;
        if i % 1000 == 0 {
            now += 1000;
        }
        t.set(limit(fp, 1, now + 500), now).unwrap();
    }
    now += 1000;
    let (_, reaped) = t.reap_expired(0, t.slots(), now);
    assert!(reaped > 0);
    assert_eq!(t.live(), 1);
    let occupied = t
        .slots
        .iter()
        .filter(|w| decode(w.load(Ordering::Relaxed)) != Slot::Empty)
        .count();
    assert_eq!(occupied, 1, "every slot but the one live entry is free");
    assert_eq!(
        t.get(0x77 << 20, now).map(|e| e.action),
        Some(Action::Limit(1))
    );
    assert_eq!(t.get(0x1234_5678_9abc, now), None);
}

#[test]
fn a_full_table_of_expired_entries_takes_new_ones() {
    // Entries that expired unseen do not hold the capacity: an operator's
    // set reaps them when the count says full.
    let mut r = Region::new(64);
    let t = r.table(64);
    for i in 1..=64u64 {
        t.set(limit(i << 30, 1, 2_000), 1_000).unwrap();
    }
    assert_eq!(t.live(), 64);
    assert_eq!(
        t.set(limit(99 << 30, 1, 0), 1_500),
        Err(Full { capacity: 64 })
    );
    assert!(t.set(limit(99 << 30, 1, 0), 2_000).is_ok());
    assert_eq!(t.live(), 1);
}

#[test]
fn removals_leave_free_slots_that_inserts_take() {
    let mut r = Region::new(4);
    let t = r.table(4);
    for i in 0..100_000u64 {
        let fp = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & FP_MASK) | 1;
        t.set(limit(fp, 1, 0), 0).unwrap();
        assert_eq!(t.remove(fp, 0).map(|e| e.fp), Some(fp));
    }
    for i in 0..4u64 {
        t.set(limit((i + 1) << 40, 1, 0), 0).unwrap();
    }
    assert_eq!(t.live(), 4);
    assert_eq!(t.iter(0).count(), 4);
}

#[derive(Clone, Debug)]
enum Churn {
    /// A new client (never seen before) for `ttl` ms (0: none).
    New(u64),
    /// A client seen before (`pick` among those), set again.
    Again(usize, u32),
    /// One seen before, removed.
    Remove(usize),
    Tick(u64),
    /// Worker 0's sweep over some slots.
    Sweep(usize),
}

fn churn() -> impl Strategy<Value = Churn> {
    prop_oneof![
        3 => (0..4u64).prop_map(|t| Churn::New(t * 700)),
        2 => (any::<usize>(), 0..100u32).prop_map(|(p, n)| Churn::Again(p, n)),
        2 => any::<usize>().prop_map(Churn::Remove),
        2 => (1..2000u64).prop_map(Churn::Tick),
        1 => (1..200usize).prop_map(Churn::Sweep),
    ]
}

/// The model after one churn step; Err: the table disagreed.
struct ChurnModel {
    map: HashMap<u64, Entry>,
    seen: Vec<u64>,
    now: u64,
    next: u64,
    sweep_at: usize,
}

impl ChurnModel {
    fn step(&mut self, t: &Overrides, c: Churn) -> Result<(), TestCaseError> {
        let cap = t.capacity();
        match c {
            Churn::New(ttl) => {
                self.next += 1;
                let fp = (self.next.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & FP_MASK | 1;
                self.seen.push(fp);
                let exp = if ttl == 0 { 0 } else { self.now + ttl };
                self.set(t, limit(fp, 1, exp), cap)?;
            }
            Churn::Again(p, n) if !self.seen.is_empty() => {
                let fp = self.seen[p % self.seen.len()];
                self.set(t, limit(fp, n, 0), cap)?;
            }
            Churn::Remove(p) if !self.seen.is_empty() => {
                let fp = self.seen[p % self.seen.len()];
                prop_assert_eq!(t.remove(fp, self.now), self.map.remove(&fp));
            }
            Churn::Tick(ms) => self.now += ms,
            Churn::Sweep(n) => self.sweep_at = t.reap_expired(self.sweep_at, n, self.now).0,
            _ => {}
        }
        let now = self.now;
        self.map.retain(|_, e| !e.expired(now));
        for e in self.map.values() {
            prop_assert_eq!(t.get(e.fp, now), Some(*e));
        }
        prop_assert!(t.live() >= self.map.len() as u64);
        Ok(())
    }

    fn set(&mut self, t: &Overrides, e: Entry, cap: usize) -> Result<(), TestCaseError> {
        let now = self.now;
        self.map.retain(|_, e| !e.expired(now));
        let known = self.map.contains_key(&e.fp);
        match t.set(e, now) {
            Ok(prev) => {
                prop_assert!(known || self.map.len() < cap);
                prop_assert_eq!(prev, self.map.insert(e.fp, e));
            }
            Err(_) => prop_assert!(
                !known && (self.map.len() >= cap || groups_full(t, e.fp, now)),
                "refused below capacity, its groups not full"
            ),
        }
        Ok(())
    }
}

proptest! {
    /// Many distinct clients come (some with a ttl) and go (removed,
    /// expired, swept): the table agrees with a map at every step, and
    /// once every entry ended and the sweep went round, every slot is free.
    #[test]
    fn churn_behaves_like_a_map(ops in proptest::collection::vec(churn(), 1..400)) {
        let mut r = Region::new(40);
        let t = r.table(40);
        let mut m = ChurnModel { map: HashMap::new(), seen: Vec::new(), now: 10_000, next: 0, sweep_at: 0 };
        for c in ops {
            m.step(&t, c)?;
        }
        let mut listed: Vec<u64> = t.iter(m.now).map(|e| e.fp).collect();
        listed.sort_unstable();
        let mut want: Vec<u64> = m.map.keys().copied().collect();
        want.sort_unstable();
        prop_assert_eq!(listed, want);
        for fp in m.map.keys().copied().collect::<Vec<_>>() {
            t.remove(fp, m.now);
        }
        let end = m.now + 10_000;
        t.reap_expired(0, t.slots(), end);
        prop_assert_eq!(t.live(), 0);
        let live = t.slots.iter().filter(|w| is_live(w.load(Ordering::Relaxed))).count();
        prop_assert_eq!(live, 0);
    }
}

#[test]
fn concurrent_inserts_of_one_client_from_empty_leave_one_entry() {
    // Many rounds of two threads inserting one new client at once (the
    // race where neither sees the other before claiming a slot).
    let mut r = Region::new(64);
    let t = r.table(64);
    for round in 1..=2000u64 {
        let fp = (round.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & FP_MASK | 1;
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for n in 0..2u32 {
                let go = &go;
                s.spawn(move || {
                    go.wait();
                    t.set(limit(fp, n, 0), 0).unwrap();
                });
            }
        });
        let copies = t
            .slots
            .iter()
            .filter(|w| id_of(w.load(Ordering::Relaxed)) == fp)
            .count();
        assert_eq!(copies, 1, "round {round}");
        assert_eq!(t.live(), 1);
        t.remove(fp, 0);
        t.reap_expired(0, t.slots(), 0);
    }
}

fn any_action() -> impl Strategy<Value = Action> {
    use crate::shm::places::MAX_IN_FLIGHT;
    prop_oneof![
        (0..=MAX_LIMIT).prop_map(Action::Limit),
        (0..=MAX_IN_FLIGHT).prop_map(Action::InFlight),
        Just(Action::Block),
        Just(Action::Exempt),
        Just(Action::Ban),
    ]
}

proptest! {
    /// Every entry a table may hold reads back from its word as written,
    /// whatever the word before it (its change counter).
    #[test]
    fn every_entry_round_trips_through_its_word(
        fp in 1u64..=MAX_ID,
        action in any_action(),
        expires_ms in 0..=MAX_EXPIRY_MS,
        old in any::<u128>(),
    ) {
        use super::slot::{decode, encode, Next, Slot};
        let e = Entry { fp, action, expires_ms };
        prop_assert_eq!(decode(encode(old, Next::Live(e))), Slot::Live(e));
    }
}
