//! Tests of where a key lives, the hit path, the survey and the merge of
//! duplicate claims (place.rs).
use super::*;
use crate::table::layout::{Slot, IDX_MASK};
use crate::table::testing::*;
use crate::table::*;

#[test]
fn home_slot_is_the_first_slot_of_the_probe_order() {
    for slots in [16, 40, 4096, 65_264] {
        let mut r = Region::new(small_bytes(slots));
        let t = table(&mut r, MIN);
        for i in 0u32..5_000 {
            let h = t.hash_key(&i.to_le_bytes());
            assert_eq!(t.home_slot(h), t.place(h).slot(0, 0));
            assert_eq!(t.home_slot(h), t.scan_order(h).next().unwrap());
        }
    }
}

#[test]
fn hit_path_reads_home_slots_first() {
    // A half-full table: most keys sit at one of their two home slots.
    let mut r = Region::new(small_bytes(4096));
    let t = table(&mut r, MIN);
    let keys: Vec<KeyHash> = (0..2048u32).map(|i| t.hash_key(&i.to_le_bytes())).collect();
    for &k in &keys {
        t.acquire(k, T0, 10, FailPolicy::Open, 0);
    }
    let at_home = keys
        .iter()
        .filter(|&&k| {
            let p = t.place(k);
            let (slot, _) = t.lookup(&p, k.fingerprint()).unwrap();
            slot == p.slot(0, 0) || slot == p.slot(1, 0)
        })
        .count();
    assert!(at_home > 2048 * 3 / 4, "{at_home}");
    assert_eq!(t.slots_used(T0), 2048);
}

#[test]
fn new_key_goes_to_the_group_with_fewer_live_slots() {
    let mut r = Region::new(small_bytes(4096));
    let t = table(&mut r, MIN);
    // A zone at least half full (as this process estimates it): the
    // survey chooses, not the first free home slot.
    t.assume_fill(1 << 16);
    let k = t.hash_key(b"newcomer");
    let p = t.place(k);
    assert_eq!(p.groups, CHOICES);
    // Other clients' slots, written directly; the key's home slots stay
    // free. Group 0: 6 live; group 1: 4 live and 6 idle (two windows
    // old, so not live: the key must go to group 1).
    let now_idx = T0 / MIN;
    let put = |j: usize, i: usize, idx: u64| {
        let v = Slot {
            fp: 1000 + (j * PROBE + i) as u64,
            tick: 0,
            idx24: idx & IDX_MASK,
            previous: 0,
            current: 1,
        };
        assert!(t.cas(p.slot(j, i), 0, v.encode()));
    };
    for i in 1..=6 {
        put(0, i, now_idx);
    }
    for i in 1..=4 {
        put(1, i, now_idx);
    }
    for i in 5..=10 {
        put(1, i, now_idx - 2);
    }
    let d = t.acquire(k, T0, 10, FailPolicy::Open, 0);
    assert_eq!(d.admission.unwrap().slot as usize, p.slot(1, 0));
    assert_eq!(t.counter(Counter::EvictIdle), 0);
}

#[test]
fn below_half_full_a_new_key_takes_a_free_home_slot() {
    let now_idx = T0 / MIN;
    let live = |fp: u64| {
        Slot {
            fp,
            tick: 0,
            idx24: now_idx & IDX_MASK,
            previous: 0,
            current: 1,
        }
        .encode()
    };
    for (case, home_a) in [("never used", 0), ("idle", 1), ("live", 2)] {
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"newcomer");
        let p = t.place(k);
        assert_eq!(p.groups, CHOICES);
        // Group 0 fuller than group 1 (the survey would choose group
        // 1), its home slot as the case has it.
        for i in 1..=8 {
            assert!(t.cas(p.slot(0, i), 0, live(1000 + i as u64)));
        }
        let idle = Slot {
            idx24: (now_idx - 2) & IDX_MASK,
            ..Slot::decode(live(999))
        };
        match home_a {
            1 => assert!(t.cas(p.slot(0, 0), 0, idle.encode())),
            2 => assert!(t.cas(p.slot(0, 0), 0, live(999))),
            _ => {}
        }
        let d = t.acquire(k, T0, 10, FailPolicy::Open, 0);
        let want = if home_a == 2 {
            p.slot(1, 0)
        } else {
            p.slot(0, 0)
        };
        assert_eq!(d.admission.unwrap().slot as usize, want, "{case}");
        assert_eq!(d.events.evicted_idle, home_a == 1, "{case}");
        assert_eq!(t.peek(k, T0).current, 1, "{case}");
    }
}

#[test]
fn the_fill_estimate_follows_the_live_fraction() {
    let mut r = Region::new(small_bytes(16_384));
    let t = table(&mut r, MIN);
    let fill = || f64::from(t.fill.load(Ordering::Relaxed)) / 65_536.0;
    let mut n = 0u32;
    let mut add = |upto: usize| {
        while (n as usize) < upto {
            let d = t.acquire(t.hash_key(&n.to_le_bytes()), T0, 10, FailPolicy::Open, 0);
            assert_eq!(d.outcome, Outcome::Admitted);
            n += 1;
        }
    };
    add(16_384 / 4);
    assert!((0.18..0.32).contains(&fill()), "a quarter full: {}", fill());
    add(16_384 * 3 / 4);
    assert!((0.68..0.82).contains(&fill()), "3/4 full: {}", fill());
    assert_eq!(t.counter(Counter::EvictLive), 0);
    // Two windows later every slot is idle, and new keys see it: 2,000
    // of them (12% of the zone) live, the rest idle.
    let later = T0 + 2 * MIN;
    for i in 0..2_000u32 {
        let k = t.hash_key(&(1_000_000 + i).to_le_bytes());
        t.acquire(k, later, 10, FailPolicy::Open, 0);
    }
    assert!((0.04..0.2).contains(&fill()), "idle: {}", fill());
}

#[test]
fn survey_finds_the_first_duplicate_in_probe_order() {
    // Two slots holding one key (a racing insert not merged yet): the
    // survey must agree with `lookup` on which one is the key's.
    let now_idx = T0 / MIN;
    let live = |fp: u64, n: u32| Slot {
        fp,
        tick: 0,
        idx24: now_idx & IDX_MASK,
        previous: 0,
        current: n,
    };
    // (group, position) of the two copies; the first one in probe order
    // (0, 0), (1, 0), (0, 1), (1, 1), ... wins.
    for (a, b) in [((0, 1), (1, 0)), ((0, 0), (1, 1))] {
        let mut r = Region::new(small_bytes(4096));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"twice");
        let p = t.place(k);
        let fp = k.fingerprint();
        // Fill every slot before the copies with other live keys.
        for (j, i) in [(0, 0), (1, 0)] {
            if (j, i) != a && (j, i) != b {
                assert!(t.cas(p.slot(j, i), 0, live(7000 + j as u64, 1).encode()));
            }
        }
        assert!(t.cas(p.slot(a.0, a.1), 0, live(fp, 3).encode()));
        assert!(t.cas(p.slot(b.0, b.1), 0, live(fp, 5).encode()));
        let want = if a.1 * CHOICES + a.0 < b.1 * CHOICES + b.0 {
            p.slot(a.0, a.1)
        } else {
            p.slot(b.0, b.1)
        };
        assert_eq!(t.lookup(&p, fp).unwrap().0, want);
        match t.survey(&p, fp, now_idx) {
            Found::Key { slot, .. } => assert_eq!(slot, want, "{a:?} {b:?}"),
            Found::Absent { .. } => panic!("the key was not found"),
        }
    }
}

#[test]
fn duplicate_claims_are_merged() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let k = t.hash_key(b"dup");
    let fp = k.fingerprint();
    let now_idx = win(MIN).index(T0);
    let order: Vec<usize> = t.scan_order(k).collect();
    // Simulate two racing inserts that chose different slots.
    let s = |current| {
        Slot {
            fp,
            tick: 0,
            idx24: now_idx & IDX_MASK,
            previous: 0,
            current,
        }
        .encode()
    };
    // A racing insert takes the first free slot of the key's sequence,
    // so the slots before the later duplicate are in use (other keys).
    for (n, &slot) in order[1..20].iter().enumerate() {
        let other = Slot {
            fp: fp ^ (n as u64 + 1),
            tick: 0,
            idx24: now_idx & IDX_MASK,
            previous: 0,
            current: 1,
        };
        t.slots[slot].store(other.encode(), Ordering::SeqCst);
    }
    t.slots[order[0]].store(s(3), Ordering::SeqCst);
    t.slots[order[20]].store(s(2), Ordering::SeqCst);
    let kept = t.dedup(&t.place(k), fp, order[20], now_idx, 0);
    assert_eq!(kept, order[0]);
    assert_eq!(t.peek(k, T0).current, 5);
    assert!(Slot::decode(t.slots[order[20]].load(Ordering::SeqCst)).is_empty());
}
