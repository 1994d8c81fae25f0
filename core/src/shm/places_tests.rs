//! The in-flight places: exact counts per client, the overflow into the
//! next groups, the ledger's limits, places reclaimed when their process is
//! gone (any number of processes), carried into a resized region, the
//! documented capacity, and concurrent takers that never exceed a limit.

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
    assert_eq!(p.capacity(), (1020, 1530));
    assert_eq!(
        places(Places::bytes_for(10 << 20)).capacity(),
        (10236, 15354)
    );
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
    let me = Owner::of(1).unwrap();
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
fn a_client_back_is_counted_in_the_entry_it_left_unless_the_group_overflows() {
    let p = places(MIN_BYTES);
    let me = Owner::of(1).unwrap();
    let g = 3;
    let ks = keys_in(&p, g, 5);
    let fp = |k: u64| p.locate(k).1;
    let word = || p.groups[g].load(Ordering::Relaxed);
    // ks[0] in entry 0, ks[1] in entry 1; both leave (entry 0 first).
    let a = taken(p.take(me, ks[0], 1));
    let b = taken(p.take(me, ks[1], 1));
    p.give(a);
    p.give(b);
    // ks[1] back: in entry 1, which last held it, not the first free one.
    let b = taken(p.take(me, ks[1], 1));
    assert_eq!(find(word(), fp(ks[1])), Some((1, 1)));
    assert_eq!(p.take(me, ks[1], 1), Take::Full { held: 1 });
    p.give(b);
    assert_eq!(p.held(ks[1]), 0);
    // The group full (ks[2..5]), a fourth client overflows; then ks[2]
    // leaves: while the overflow lasts, ks[2] back is counted further on
    // (where a client absent from the group may be), never in its old
    // entry.
    let mut held: Vec<Place> = ks[1..4].iter().map(|&k| taken(p.take(me, k, 2))).collect();
    held.push(taken(p.take(me, ks[4], 2)));
    assert_eq!(overflow(word()), 1);
    let out = held.remove(1);
    p.give(out);
    held.push(taken(p.take(me, ks[2], 2)));
    assert_eq!(find(word(), fp(ks[2])), None);
    assert_eq!(p.held(ks[2]), 1);
    assert_eq!(find_or_back(word(), fp(ks[2])), None);
    for pl in held {
        p.give(pl);
    }
    for &k in &ks {
        assert_eq!(p.held(k), 0);
    }
    assert_eq!(overflow(word()), 0);
}

#[test]
fn a_full_group_counts_its_clients_in_the_next_one() {
    let p = places(MIN_BYTES);
    let me = Owner::of(1).unwrap();
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
fn a_full_chain_of_groups_is_no_room() {
    let p = places(MIN_BYTES);
    let me = Owner::of(1).unwrap();
    let g = 9;
    let mut all = vec![];
    for d in 0..=MAX_DEPTH as usize {
        for &k in &keys_in(&p, g + d, 3) {
            taken(p.take(me, k, 5));
            all.push(k);
        }
    }
    let late = keys_in(&p, g, 4)[3];
    assert_eq!(p.take(me, late, 5), Take::NoRoom);
    for d in 0..=MAX_DEPTH as usize {
        assert_eq!(
            overflow(p.groups[g + d].load(Ordering::Relaxed)),
            0,
            "lowered again"
        );
    }
    assert_eq!(
        p.in_flight(),
        all.len() as u64,
        "its ledger word given back"
    );
    assert_eq!(p.stats().no_room, 1);
    // One group of the chain with room: counted there, exactly.
    let next = keys_in(&p, g + 4, 1)[0];
    let mut freed = None;
    for pl in p.ledger.iter().map(|e| e.load(Ordering::Relaxed)) {
        if pid_of(pl) != 0 && pl & FP_MASK == p.locate(next).1 {
            freed = Some(pl);
        }
    }
    let at = p
        .ledger
        .iter()
        .position(|e| e.load(Ordering::Relaxed) == freed.unwrap());
    p.give(Place {
        at: at.unwrap() as u32,
        word: freed.unwrap(),
    });
    taken(p.take(me, late, 5));
    taken(p.take(me, late, 5));
    assert_eq!(p.held(late), 2);
    assert_eq!(p.take(me, late, 2), Take::Full { held: 2 });
    assert_eq!(overflow(p.groups[g + 3].load(Ordering::Relaxed)), 2);
}

#[test]
fn a_full_ledger_is_no_room() {
    let p = places(MIN_BYTES);
    let me = Owner::of(1).unwrap();
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
    // A place the dead process "gives back" late does nothing.
    for x in pa {
        p.give(x);
    }
    assert_eq!(p.held(key), 1);
    let mine = taken(p.take(c, key, 4));
    assert_eq!(p.reclaim_dead(|pid| pid != 100), 0, "nothing left of it");
    assert_eq!(p.held(key), 2);
    p.give(mine);
    p.give(pb);
    assert_eq!(p.held(key), 0);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(Owner::of(0), None);
    assert_eq!(Owner::of(1 << 22), None, "no ledger word names it");
}

/// Reloads with long requests: a thousand processes (old workers of every
/// generation) hold places at once, and none runs out of anything; an
/// exiting one gives back what it still holds.
#[test]
fn any_number_of_processes_hold_places() {
    let p = places(Places::bytes_for(1 << 20));
    let owners: Vec<Owner> = (0..1000u32)
        .map(|i| p.start(1000 + i, alive).unwrap())
        .collect();
    for &o in &owners {
        taken(p.take(o, 42, 1000));
    }
    assert_eq!((p.in_flight(), p.held(42)), (1000, 1000));
    assert_eq!(p.take(owners[0], 42, 1000), Take::Full { held: 1000 });
    assert_eq!(p.stop(owners[7]), 1);
    assert_eq!(p.held(42), 999);
    p.reclaim_dead(|pid| pid >= 2000);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.held(42), 0);
}

/// A zone resized on reload counts the old zone's places, each under its
/// process: a client at its limit stays there, and the places come back
/// when their processes are gone.
#[test]
fn a_resized_region_carries_the_places() {
    let old = places(MIN_BYTES);
    let new = places(Places::bytes_for(2 << 20));
    let (a, b) = (Owner::of(10).unwrap(), Owner::of(11).unwrap());
    let keys: Vec<u64> = (1..=300u64)
        .map(|i| i.wrapping_mul(0x2545_f491_4f6c_dd1d))
        .collect();
    for &k in &keys {
        taken(old.take(a, k, 1));
    }
    taken(old.take(b, keys[0], 3));
    assert_eq!(
        new.carry_from(&old),
        Carried {
            carried: 301,
            dropped: 0
        }
    );
    let c = Owner::of(12).unwrap();
    assert_eq!(new.take(c, keys[5], 1), Take::Full { held: 1 });
    // The old region, retired at t: an old worker takes no new place
    // there (exiting, or before the master told it to quit), one that is
    // not exiting 5 s on does (the reload failed).
    let t = 1_000_000;
    old.retire(Some(t));
    assert_eq!(
        old.take(a.leaving().at(t + 9_000), keys[0], 9),
        Take::Full { held: 2 }
    );
    assert_eq!(old.take(a.at(t + 10), keys[0], 9), Take::Full { held: 2 });
    let p = taken(old.take(a.at(t + RETIRED_GRACE_MS), keys[0], 9));
    old.give(p);
    old.retire(None);
    taken(old.take(a.leaving(), keys[0], 9));
    assert_eq!(new.take(c, keys[0], 2), Take::Full { held: 2 });
    assert_eq!(new.in_flight(), 301);
    assert_eq!(new.stats().taken, 301, "the counters go on");
    // The old workers exit: their places come back.
    new.reclaim_dead(|pid| pid == 12);
    assert_eq!(new.in_flight(), 0);
    for &k in &keys {
        assert_eq!(new.held(k), 0);
        taken(new.take(c, k, 1));
    }
}

/// The documented capacity: one request in flight for each of as many
/// clients as the ledger has words, none refused for lack of room.
#[test]
fn the_documented_capacity_holds_one_request_per_client() {
    for zone in [32 << 10, 1 << 20, 10 << 20] {
        let p = places(Places::bytes_for(zone));
        let me = Owner::of(1).unwrap();
        let (cap, _) = p.capacity();
        let mut x = 0x1234_5678u64;
        let mut refused = 0;
        for _ in 0..cap {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = x ^ (x >> 29);
            if !matches!(p.take(me, key, 1), Take::Taken(_)) {
                refused += 1;
            }
        }
        assert_eq!(refused, 0, "zone of {zone} bytes: {cap} places");
        assert_eq!(p.in_flight(), cap as u64);
    }
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

/// A place given back twice never frees a later place of the same process
/// and client that took the same ledger word (its tag is the next one).
#[test]
fn a_place_given_twice_leaves_a_later_one_in_its_word_alone() {
    let p = places(MIN_BYTES);
    let me = Owner::of(1).unwrap();
    let first = taken(p.take(me, 7, 10));
    p.give(first);
    // Later places of the same process and client, taken and given back,
    // until one lands in the word the first one had, under another tag.
    let mut tries = 0;
    let reused = loop {
        let q = taken(p.take(me, 7, 10));
        if q.at == first.at {
            assert_ne!(q.word, first.word, "the same tag again");
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
