//! Tests of range overrides (core/src/overrides/range.rs).

use super::range::{range_of_id, Addr, Family, Range, RANGE_BIT};
use super::tests::Region;
use super::*;
use proptest::prelude::*;

fn v4(a: [u8; 4]) -> Addr {
    Addr::of_key(&a).unwrap()
}

fn hash(k: &[u8]) -> KeyHash {
    crate::hash_with_seed([1, 2], k)
}

fn block(id: u64) -> Entry {
    Entry {
        fp: id,
        action: Action::Block,
        expires_ms: 0,
    }
}

fn exempt(id: u64) -> Entry {
    Entry {
        fp: id,
        action: Action::Exempt,
        expires_ms: 0,
    }
}

#[test]
fn ids_name_their_range() {
    let r = Range::new(v4([127, 0, 0, 5]), 24);
    assert_eq!(r.text(), "127.0.0.0/24");
    let id = r.id(hash);
    assert_ne!(id & RANGE_BIT, 0);
    assert_eq!(range_of_id(id), Some((Family::V4, 24, Some(r))));
    let a6 = Addr::of_key(
        &"2001:db8:1:2::9"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    )
    .unwrap();
    let r48 = Range::new(a6, 48);
    assert_eq!(r48.text(), "2001:db8:1::/48");
    assert_eq!(range_of_id(r48.id(hash)), Some((Family::V6, 48, Some(r48))));
    let r64 = Range::new(a6, 64);
    assert_eq!(range_of_id(r64.id(hash)), Some((Family::V6, 64, None)));
    assert_ne!(r64.id(hash), Range::new(a6, 63).id(hash));
    // An IPv4-mapped address is its IPv4 address.
    let mapped = Addr::of_key(
        &"::ffff:127.0.0.9"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    assert_eq!(mapped, Some(v4([127, 0, 0, 9])));
    assert_eq!(range_of_id(0x1234), None);
    assert_eq!(Range::new(v4([10, 1, 2, 3]), 0).text(), "0.0.0.0/0");
    assert_eq!(Range::new(v4([10, 1, 2, 3]), 32).text(), "10.1.2.3/32");
}

#[test]
fn the_most_specific_range_wins_and_lengths_follow_removal() {
    let mut r = Region::new(16);
    let t = r.table(16);
    let a = v4([10, 1, 2, 3]);
    assert!(!t.has_ranges(Family::V4));
    assert_eq!(t.range_get(a, hash, 0), None);
    let r16 = Range::new(a, 16);
    let r24 = Range::new(a, 24);
    t.set(block(r16.id(hash)), 0).unwrap();
    t.set(exempt(r24.id(hash)), 0).unwrap();
    assert_eq!(t.prefix_lengths(Family::V4), vec![24, 16]);
    assert!(!t.has_ranges(Family::V6));
    assert_eq!(
        t.range_get(a, hash, 0).map(|(e, r)| (e.action, r)),
        Some((Action::Exempt, r24))
    );
    let other = v4([10, 1, 9, 9]);
    assert_eq!(
        t.range_get(other, hash, 0).map(|(e, r)| (e.action, r)),
        Some((Action::Block, r16))
    );
    assert_eq!(t.range_get(v4([10, 2, 0, 1]), hash, 0), None);
    t.remove(r24.id(hash), 0);
    assert_eq!(t.prefix_lengths(Family::V4), vec![16]);
    assert_eq!(t.range_get(a, hash, 0).map(|(_, r)| r), Some(r16));
    // An expiring range: its length is dropped once it is reaped.
    let r8 = Range::new(a, 8);
    t.set(
        Entry {
            expires_ms: 50,
            ..block(r8.id(hash))
        },
        0,
    )
    .unwrap();
    assert_eq!(t.prefix_lengths(Family::V4), vec![16, 8]);
    assert_eq!(t.range_get(v4([10, 9, 9, 9]), hash, 60), None);
    assert_eq!(t.prefix_lengths(Family::V4), vec![16]);
    t.remove(r16.id(hash), 0);
    assert!(!t.has_ranges(Family::V4));
}

#[test]
fn ipv6_ranges_of_every_length_are_found() {
    let mut r = Region::new(300);
    let t = r.table(300);
    let a: u128 = 0x2001_0db8_1234_5678_9abc_def0_1357_9bdf;
    let addr = Addr {
        family: Family::V6,
        bits: a,
    };
    for len in 0..=128u8 {
        let rg = Range::new(addr, len);
        t.set(block(rg.id(hash)), 0).unwrap();
        assert_eq!(t.range_get(addr, hash, 0).map(|(_, r)| r.len), Some(len));
    }
    for len in (0..=128u8).rev() {
        assert_eq!(t.range_get(addr, hash, 0).map(|(_, r)| r.len), Some(len));
        t.remove(Range::new(addr, len).id(hash), 0);
    }
    assert!(!t.has_ranges(Family::V6));
}

proptest! {
    /// Random ranges set and removed: a lookup finds the longest live
    /// range holding the address, as a scan of a list would.
    #[test]
    fn lookups_find_the_longest_match(
        ops in proptest::collection::vec((any::<u32>(), 0..=32u8, any::<bool>()), 1..60),
        probes in proptest::collection::vec(any::<u32>(), 1..20),
    ) {
        let mut r = Region::new(64);
        let t = r.table(64);
        let mut live: Vec<Range> = Vec::new();
        for (bits, len, add) in ops {
            // Few distinct networks so that they nest.
            let a = Addr { family: Family::V4, bits: u128::from(bits & 0xff0f_0f00) };
            let rg = Range::new(a, len);
            if add {
                t.set(block(rg.id(hash)), 0).unwrap();
                if !live.contains(&rg) {
                    live.push(rg);
                }
            } else {
                t.remove(rg.id(hash), 0);
                live.retain(|x| *x != rg);
            }
            for &p in &probes {
                let a = Addr { family: Family::V4, bits: u128::from(p & 0xff0f_0fff) };
                let want = live.iter().filter(|r| a.masked(r.len) == r.addr).max_by_key(|r| r.len);
                prop_assert_eq!(t.range_get(a, hash, 0).map(|(_, r)| r), want.copied());
            }
        }
        let mut lens: Vec<u8> = live.iter().map(|r| r.len).collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        lens.dedup();
        prop_assert_eq!(t.prefix_lengths(Family::V4), lens);
    }
}

#[test]
fn concurrent_writers_keep_the_counts_exact() {
    let mut r = Region::new(256);
    let t = r.table(256);
    let a = v4([192, 0, 2, 1]);
    std::thread::scope(|s| {
        for n in 0..4u8 {
            s.spawn(move || {
                for i in 0..3000u32 {
                    let len = (n * 8 + (i % 8) as u8) % 33;
                    let id = Range::new(a, len).id(hash);
                    if i % 3 == 2 {
                        t.remove(id, 0);
                    } else {
                        let _ = t.set(block(id), 0);
                    }
                    if i % 5 == 0 {
                        let _ = t.apply_remote(id, None, u64::from(i), 0);
                    }
                }
            });
        }
    });
    let listed: Vec<Entry> = t.iter(0).collect();
    assert_eq!(t.live(), listed.len() as u64);
    let mut lens: Vec<u8> = listed
        .iter()
        .map(|e| range_of_id(e.fp).unwrap().1)
        .collect();
    lens.sort_unstable_by(|a, b| b.cmp(a));
    lens.dedup();
    assert_eq!(t.prefix_lengths(Family::V4), lens);
    for len in 0..=32u8 {
        let id = Range::new(a, len).id(hash);
        let n = t
            .slots
            .iter()
            .filter(|w| {
                slot::id_of(w.load(Ordering::Relaxed)) == id
                    && slot::is_live(w.load(Ordering::Relaxed))
            })
            .count();
        assert!(n <= 1, "one live entry per range, /{len} has {n}");
    }
}
