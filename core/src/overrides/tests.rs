//! Tests of the override table (core/src/overrides/mod.rs).

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// A 64-byte aligned buffer for a table of `cap` entries.
struct Region {
    buf: Vec<u128>,
    len: usize,
}

impl Region {
    fn new(cap: usize) -> Region {
        let len = Overrides::bytes_for(cap);
        // u128 is 16-byte aligned; 64 more bytes let us align to 64.
        Region {
            buf: vec![0u128; len / 16 + 4],
            len,
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        let p = self.buf.as_mut_ptr().cast::<u8>();
        p.wrapping_add(p.align_offset(64))
    }

    fn table(&mut self, cap: usize) -> Overrides<'_> {
        let (p, len) = (self.ptr(), self.len);
        // SAFETY: p is 64-byte aligned with `len` bytes of our buffer.
        unsafe { Overrides::init(p, len, cap) }.unwrap()
    }
}

fn limit(fp: u64, n: u32, expires_ms: u64) -> Entry {
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
    // Fill some slots so that the client's chain has tombstones to race on.
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
