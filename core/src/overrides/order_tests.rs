//! Tests of the fleet's order in the table (core/src/overrides/order.rs).

use super::super::tests::{limit, Region};
use super::*;
use crate::overrides::Action;

fn seen(epoch: &str, seq: u64, cut: u64) -> Seen<'_> {
    Seen {
        epoch,
        seq,
        cut,
        kept: true,
    }
}

#[test]
fn a_read_of_the_order_says_what_to_do() {
    // Never read: the snapshot.
    assert_eq!(judge(None, 0, &seen("e", 5, 0)), Next::Bootstrap);
    // Up to date, or behind with the log still holding what follows.
    assert_eq!(judge(Some("e"), 5, &seen("e", 5, 0)), Next::Follow);
    assert_eq!(judge(Some("e"), 5, &seen("e", 9, 5)), Next::Follow);
    assert_eq!(judge(Some("e"), 5, &seen("e", 9, 2)), Next::Follow);
    // The log was trimmed past what it saw.
    assert_eq!(judge(Some("e"), 5, &seen("e", 9, 6)), Next::Bootstrap);
    // Redis lost the keys (a new epoch), or the sequence went back.
    assert_eq!(judge(Some("e"), 5, &seen("f", 9, 0)), Next::Heal);
    assert_eq!(judge(Some("e"), 5, &seen("e", 3, 0)), Next::Heal);
    assert_eq!(judge(Some("e"), 5, &seen("e", 0, 0)), Next::Heal);
    // The last change it saw is gone (not trimmed), later ones numbered
    // past it: an older copy.
    let lost = Seen {
        kept: false,
        ..seen("e", 9, 0)
    };
    assert_eq!(judge(Some("e"), 5, &lost), Next::Heal);
    assert_eq!(judge(Some("e"), 0, &lost), Next::Follow);
    assert_eq!(
        judge(Some("e"), 5, &Seen { cut: 6, ..lost }),
        Next::Bootstrap
    );
}

#[test]
fn the_clock_offset_turns_expiries_both_ways() {
    // This gateway 15 minutes ahead of Redis.
    let redis = 1_700_000_000_000u64;
    let c = RedisClock::measure(redis / 1000, 250_000, redis + 900_000, redis + 900_010);
    assert_eq!(c.offset_ms, 900_000 + 5 - 250);
    assert_eq!(c.redis_ms(redis + 900_000), redis + 250 - 5);
    let e = limit(1, 1, redis + 960_000);
    assert_eq!(c.to_redis(e).expires_ms, redis + 60_000 + 250 - 5);
    assert_eq!(c.to_local(c.to_redis(e)), e);
    // No expiry stays none; a gateway behind works the same way.
    assert_eq!(c.to_redis(limit(1, 1, 0)).expires_ms, 0);
    let behind = RedisClock::measure(redis / 1000, 0, redis - 900_000, redis - 900_000);
    assert_eq!(behind.local_ms(redis + 1), redis - 900_000 + 1);
}

#[test]
fn a_local_change_waits_for_its_place_in_the_order() {
    let mut r = Region::new(8);
    let t = r.table(8);
    t.set(limit(7, 3, 0), 1_000).unwrap();
    let v = t.versioned(7).version.unwrap();
    assert!(is_local(v));
    // Nothing read from the fleet replaces it, however large its number.
    assert!(!t.apply_remote(7, None, u64::MAX, 1_000));
    assert!(!t.apply_remote(7, None, LOCAL - 1, 1_000));
    assert_eq!(t.get(7, 1_000), Some(limit(7, 3, 0)));
    // Its write got sequence 40: older changes do not apply, newer do.
    assert!(!t.ack(7, v + 1, 40));
    assert!(t.ack(7, v, 40));
    assert!(!t.ack(7, v, 41));
    assert_eq!(t.versioned(7).version, Some(40));
    assert!(!t.apply_remote(7, None, 39, 1_000));
    assert!(t.apply_remote(7, Some(limit(7, 9, 0)), 41, 1_000));
    assert_eq!(t.get(7, 1_000), Some(limit(7, 9, 0)));
    // A change made here after its write was sent: the ack of the old
    // one changes nothing.
    t.set(limit(7, 1, 0), 1_000).unwrap();
    let v2 = t.versioned(7).version.unwrap();
    assert!(v2 > v && is_local(v2));
    assert!(!t.ack(7, v, 50));
    assert_eq!(t.versioned(7).version, Some(v2));
}

#[test]
fn held_lists_each_state_once_by_its_kind_of_version() {
    let mut r = Region::new(64);
    let t = r.table(64);
    t.set(limit(1, 1, 0), 1_000).unwrap();
    t.set(limit(2, 2, 0), 1_000).unwrap();
    t.remove(2, 1_000);
    assert!(t.apply_remote(3, Some(limit(3, 3, 0)), 12, 1_000));
    assert!(t.apply_remote(4, Some(limit(4, 4, 0)), 13, 1_000));
    assert!(t.apply_remote(4, None, 14, 1_000));
    let all = |keep: &dyn Fn(&Held) -> bool| {
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let (page, next) = t.held(from, 7, keep);
            out.extend(page);
            if next == 0 {
                break;
            }
            from = next;
        }
        out.sort_by_key(|h| h.id);
        out
    };
    let local = all(&|h| is_local(h.version));
    assert_eq!(t.unsent(), 2);
    assert_eq!(
        local
            .iter()
            .map(|h| (h.id, h.entry.is_some()))
            .collect::<Vec<_>>(),
        [(1, true), (2, false)]
    );
    let known = all(&|h| !is_local(h.version));
    assert_eq!(
        known
            .iter()
            .map(|h| (h.id, h.entry, h.version))
            .collect::<Vec<_>>(),
        [(3, Some(limit(3, 3, 0)), 12), (4, None, 14)]
    );
    assert_eq!(t.get(3, 1_000).map(|e| e.action), Some(Action::Limit(3)));
}

#[test]
fn a_snapshot_after_a_write_back_replaces_any_sequence_but_no_local_change() {
    let mut r = Region::new(8);
    let t = r.table(8);
    // Sequences of an order Redis lost: 90 here, 12 in the new one.
    assert!(t.apply_remote(1, Some(limit(1, 1, 0)), 90, 1_000));
    assert!(!t.apply_remote(1, Some(limit(1, 2, 0)), 12, 1_000));
    assert!(t.adopt(1, Some(limit(1, 2, 0)), 12, 1_000));
    assert_eq!(
        (t.get(1, 1_000), t.versioned(1).version),
        (Some(limit(1, 2, 0)), Some(12))
    );
    assert!(t.adopt(1, None, 13, 1_000));
    assert_eq!(t.get(1, 1_000), None);
    // A local change waits for its own place.
    t.set(limit(2, 3, 0), 1_000).unwrap();
    assert!(!t.adopt(2, None, 99, 1_000));
    assert_eq!(t.get(2, 1_000), Some(limit(2, 3, 0)));
}
