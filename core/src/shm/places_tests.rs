//! The in-flight places: exact counts per client, the overflow into the
//! next group, the ledger's limits, owners reclaimed when their process is
//! gone, and concurrent takers that never exceed a limit.

use std::collections::HashSet;
use std::sync::atomic::AtomicU32;

use super::*;
use crate::testing::Region;

/// Places over a leaked region of `len` bytes.
fn places(len: usize) -> Places<'static> {
    let buf = Box::leak(Box::new(Region::new(len)));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Places::init(buf.ptr(), buf.len()) }.unwrap()
}

/// Keys of distinct fingerprints whose group is `g`.
fn keys_in(p: &Places<'_>, g: usize, n: usize) -> Vec<u64> {
    let mut fps = HashSet::new();
    let mut out = vec![];
    for i in 1u64.. {
        let k = i.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let (kg, fp) = p.locate(k);
        if kg == g && fps.insert(fp) {
            out.push(k);
        }
        if out.len() == n {
            return out;
        }
    }
    unreachable!()
}

fn alive(_: u32) -> bool {
    true
}

fn taken(t: Take) -> Place {
    match t {
        Take::Taken(p) => p,
        other => panic!("not taken: {other:?}"),
    }
}

#[test]
fn sized_with_the_zone() {
    assert_eq!(Places::bytes_for(32 << 10), MIN_BYTES);
    assert_eq!(Places::bytes_for(1 << 20), 16 << 10);
    assert_eq!(Places::bytes_for(1 << 30), MAX_BYTES);
    let p = places(Places::bytes_for(1 << 20));
    assert_eq!(p.capacity(), (892, 1338));
    let mut small = Region::new(4096);
    // SAFETY: a region too small: refused before any access.
    assert!(unsafe { Places::init(small.ptr(), small.len()) }.is_err());
    let mut blank = Region::new(MIN_BYTES);
    // SAFETY: zeroed memory: no magic, refused.
    assert!(unsafe { Places::attach(blank.ptr(), blank.len()) }.is_err());
}

#[test]
fn a_client_gets_its_limit_and_its_places_back() {
    let p = places(MIN_BYTES);
    let me = p.start(1, alive).unwrap();
    let (a, b) = (7u64 << 40, 9u64 << 50);
    let got: Vec<Place> = (0..3).map(|_| taken(p.take(me, a, 3))).collect();
    assert_eq!(p.take(me, a, 3), Take::Full { held: 3 });
    assert_eq!(p.held(a), 3);
    assert!(matches!(p.take(me, b, 3), Take::Taken(_)), "another client");
    taken(p.take(me, a, 4));
    assert_eq!(p.take(me, a, 4), Take::Full { held: 4 });
    p.give(got[0]);
    p.give(got[0]); // twice: nothing more
    assert_eq!(p.held(a), 3);
    assert_eq!(
        p.take(me, a, 0),
        Take::Full { held: 3 },
        "a limit of 0 admits none"
    );
    assert_eq!(p.in_flight(), 4);
    let s = p.stats();
    assert_eq!((s.taken, s.full), (5, 3));
}

#[test]
fn a_full_group_counts_its_clients_in_the_next_one() {
    let p = places(MIN_BYTES);
    let me = p.start(1, alive).unwrap();
    let g = 5;
    let ks = keys_in(&p, g, 6);
    let mut held: Vec<Vec<Place>> = vec![vec![]; 6];
    for (i, &k) in ks.iter().take(3).enumerate() {
        held[i].push(taken(p.take(me, k, 2)));
    }
    // A fourth client of the group: counted in the next group, exactly.
    held[3].push(taken(p.take(me, ks[3], 2)));
    held[3].push(taken(p.take(me, ks[3], 2)));
    assert_eq!(p.take(me, ks[3], 2), Take::Full { held: 2 });
    assert_eq!(overflow(p.groups[g].load(Ordering::Relaxed)), 2);
    // One of the group's own clients leaves: a new client still goes to
    // the next group while the overflow lasts, never into a second entry.
    p.give(held[0].pop().unwrap());
    held[4].push(taken(p.take(me, ks[4], 1)));
    assert_eq!(p.held(ks[4]), 1);
    assert_eq!(
        find(p.groups[g].load(Ordering::Relaxed), p.locate(ks[4]).1),
        None
    );
    assert_eq!(p.take(me, ks[4], 1), Take::Full { held: 1 });
    // Every place given back: both groups empty, no overflow left.
    for v in &mut held {
        for pl in v.drain(..) {
            p.give(pl);
        }
    }
    for w in [
        p.groups[g].load(Ordering::Relaxed),
        p.groups[g + 1].load(Ordering::Relaxed),
    ] {
        assert_eq!((0..ENTRIES).map(|i| entry(w, i).1).sum::<u32>(), 0);
        assert_eq!(overflow(w), 0);
    }
    for &k in &ks {
        assert_eq!(p.held(k), 0);
    }
    assert_eq!(p.in_flight(), 0);
}

#[test]
fn both_groups_full_is_no_room() {
    let p = places(MIN_BYTES);
    let me = p.start(1, alive).unwrap();
    let g = 9;
    let own = keys_in(&p, g, 3);
    let next = keys_in(&p, g + 1, 3);
    for &k in own.iter().chain(&next) {
        taken(p.take(me, k, 5));
    }
    let late = keys_in(&p, g, 4)[3];
    assert_eq!(p.take(me, late, 5), Take::NoRoom);
    assert_eq!(
        overflow(p.groups[g].load(Ordering::Relaxed)),
        0,
        "lowered again"
    );
    assert_eq!(p.in_flight(), 6, "its ledger word given back");
    assert_eq!(p.stats().no_room, 1);
}

#[test]
fn a_full_ledger_is_no_room() {
    let p = places(MIN_BYTES);
    let me = p.start(1, alive).unwrap();
    let (cap, _) = p.capacity();
    let key = 77u64 << 33;
    let mut n = 0;
    for _ in 0..cap * 2 {
        match p.take(me, key, MAX_IN_FLIGHT) {
            Take::Taken(_) => n += 1,
            Take::NoRoom => {}
            Take::Full { .. } => panic!("never full below the limit"),
        }
    }
    assert!(n <= cap && n > cap * 3 / 4, "{n} of {cap}");
    assert_eq!(p.in_flight(), n as u64);
    assert_eq!(p.held(key), n as u32);
}

#[test]
fn the_places_of_a_dead_process_are_taken_back() {
    let p = places(MIN_BYTES);
    let a = p.start(100, alive).unwrap();
    let b = p.start(200, alive).unwrap();
    assert_ne!(a, b);
    let key = 3u64 << 45;
    let pa: Vec<Place> = (0..3).map(|_| taken(p.take(a, key, 4))).collect();
    let pb = taken(p.take(b, key, 4));
    assert_eq!(p.take(b, key, 4), Take::Full { held: 4 });
    // Process 100 dies: the next start (or the sweep) takes its places back.
    let c = p.start(300, |pid| pid != 100).unwrap();
    assert_eq!(p.held(key), 1);
    assert_eq!(p.stats().reclaimed, 3);
    assert_eq!(c, Owner::from_bits(c.to_bits()).unwrap());
    // Its owner was freed, and taken again under the next generation.
    let again = c;
    assert_eq!(again.index, a.index);
    assert_ne!(again.gen, a.gen);
    // A place the dead process "gives back" late does nothing.
    for x in pa {
        p.give(x);
    }
    assert_eq!(p.held(key), 1);
    let mine = taken(p.take(again, key, 4));
    // A late reclaimer of the dead generation leaves the new one alone.
    assert_eq!(p.reclaim(a), 0);
    assert_eq!(p.held(key), 2);
    p.give(mine);
    p.give(pb);
    assert_eq!(p.held(key), 0);
    assert_eq!(p.in_flight(), 0);
}

#[test]
fn an_exiting_process_frees_its_owner() {
    let p = places(MIN_BYTES);
    let owners: Vec<Owner> = (0..OWNERS as u32)
        .map(|i| p.start(1000 + i, alive).unwrap())
        .collect();
    assert_eq!(p.start(5000, alive), None, "every owner taken");
    taken(p.take(owners[7], 42, 2));
    p.stop(owners[7]);
    assert_eq!(p.held(42), 0);
    let next = p.start(5000, alive).unwrap();
    assert_eq!(next.index, owners[7].index);
    assert_eq!(Owner::from_bits(0), None);
}

#[test]
fn concurrent_takers_never_exceed_the_limit() {
    let p = places(MIN_BYTES);
    let key = 0x1234_5678_9abc_def0u64;
    let inside = Box::leak(Box::new(AtomicU32::new(0)));
    let most = Box::leak(Box::new(AtomicU32::new(0)));
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let (inside, most) = (&*inside, &*most);
            std::thread::spawn(move || {
                let me = p.start(10 + w, alive).unwrap();
                let mut admitted = 0;
                for _ in 0..5_000 {
                    if let Take::Taken(pl) = p.take(me, key, 3) {
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        admitted += 1;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        p.give(pl);
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(most.load(Ordering::SeqCst) <= 3);
    assert!(admitted > 0);
    assert_eq!(p.held(key), 0);
    assert_eq!(p.in_flight(), 0);
}

/// A place given back twice never frees a later place of the same owner
/// and client that took the same ledger word (the tag tells them apart).
#[test]
fn a_place_given_twice_leaves_a_later_one_in_its_word_alone() {
    let p = places(MIN_BYTES);
    let me = p.start(1, alive).unwrap();
    let first = taken(p.take(me, 7, 10));
    p.give(first);
    // Later places of the same owner and client, taken and given back,
    // until one lands in the word the first one had.
    let mut tries = 0;
    let reused = loop {
        let q = taken(p.take(me, 7, 10));
        if q.at == first.at {
            break q;
        }
        p.give(q);
        tries += 1;
        assert!(tries < 100_000, "the ledger word never came back");
    };
    assert_eq!(p.held(7), 1);
    p.give(first);
    assert_eq!(p.held(7), 1, "the stale place freed the later one");
    p.give(reused);
    assert_eq!((p.held(7), p.in_flight()), (0, 0));
}
