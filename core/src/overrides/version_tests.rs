//! Tests of the table's versions (core/src/overrides/write.rs): a state
//! from the fleet applies only over an older one here.

use super::tests::{limit, Region};
use super::*;
use crate::overrides::slot::version_word;
use proptest::prelude::*;

fn block(fp: u64) -> Entry {
    Entry {
        fp,
        action: Action::Block,
        expires_ms: 0,
    }
}

#[test]
fn a_change_here_is_newer_than_everything_seen() {
    let mut r = Region::new(8);
    let t = r.table(8);
    let v1 = t.next_version(1_000);
    assert_eq!(v1, order::LOCAL | 1_000 << 12);
    assert!(t.next_version(1_000) > v1);
    // A clock behind: still newer.
    assert!(t.next_version(900) > v1);
    // A state read from the fleet, whatever its number, moves no clock.
    assert!(t.apply_remote(5, Some(block(5)), u64::MAX, 1_000));
    assert_eq!(t.versioned(5).version, Some(order::LOCAL - 1));
    assert!(t.next_version(1_000) < v1 + 8);
    t.set(limit(5, 3, 0), 1_000).unwrap();
    assert_eq!(t.versioned(5).entry, Some(limit(5, 3, 0)));
    assert!(order::is_local(t.versioned(5).version.unwrap()));
}

#[test]
fn an_older_state_from_the_fleet_never_applies() {
    let mut r = Region::new(8);
    let t = r.table(8);
    t.set(block(7), 2_000).unwrap();
    let mine = t.versioned(7).version.unwrap();
    assert!(t.ack(7, mine, 100));
    assert!(!t.apply_remote(7, None, 99, 2_000));
    assert_eq!(t.get(7, 2_000), Some(block(7)));
    assert!(t.apply_remote(7, Some(limit(7, 4, 0)), 101, 2_000));
    assert_eq!(t.get(7, 2_000), Some(limit(7, 4, 0)));
    // Replaying it changes nothing.
    assert!(!t.apply_remote(7, Some(limit(7, 4, 0)), 101, 2_000));
    assert_eq!(t.versioned(7).version, Some(101));
}

#[test]
fn a_removal_here_keeps_its_version_against_an_older_set() {
    let mut r = Region::new(8);
    let t = r.table(8);
    t.set(block(9), 1_000).unwrap();
    let set_v = t.versioned(9).version.unwrap();
    assert_eq!(t.remove(9, 1_100), Some(block(9)));
    let gone = t.versioned(9);
    assert_eq!(gone.entry, None);
    assert!(gone.version.unwrap() > set_v);
    assert_eq!(t.live(), 0);
    // The fleet still holds the block (the removal's write is on its way).
    assert!(!t.apply_remote(9, Some(block(9)), set_v, 1_200));
    assert_eq!(t.get(9, 1_200), None);
    // A removal of a client this gateway never had is remembered too.
    t.remove(10, 1_300);
    assert!(t.versioned(10).version.is_some());
    assert!(!t.apply_remote(10, Some(block(10)), 1_000 << 12, 1_300));
    assert_eq!(t.get(10, 1_300), None);
}

#[test]
fn equal_versions_resolve_as_redis_does() {
    let mut r = Region::new(8);
    let t = r.table(8);
    assert!(t.apply_remote(3, Some(limit(3, 5, 0)), 77, 0));
    // "limit 5 0 0" < "limit 6 0 0" and "block …" < "limit …".
    assert!(t.apply_remote(3, Some(limit(3, 6, 0)), 77, 0));
    assert!(!t.apply_remote(3, Some(block(3)), 77, 0));
    assert_eq!(t.get(3, 0), Some(limit(3, 6, 0)));
}

#[test]
fn an_unknown_version_is_never_overwritten_by_the_fleet() {
    let mut r = Region::new(8);
    let t = r.table(8);
    t.set(block(4), 1_000).unwrap();
    let (idx, w) = t.find(4).unwrap();
    // A writer stopped between its two steps: the version word is the
    // slot's previous one.
    let stale = version_word(w, 1).wrapping_sub(1 << 60);
    t.versions[idx].store(stale, Ordering::Relaxed);
    assert_eq!(t.versioned(4).version, None);
    assert!(!t.apply_remote(4, None, u64::MAX >> 4, 1_000));
    assert_eq!(t.get(4, 1_000), Some(block(4)));
    // A change here still applies, and its version is known again.
    t.set(limit(4, 1, 0), 1_000).unwrap();
    assert!(t.versioned(4).version.is_some());
}

#[derive(Clone, Debug)]
enum Op {
    Local(u64, Option<u32>),
    Remote(u64, Option<u32>, u64),
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 1u64..6;
    let state = proptest::option::of(0..3u32);
    prop_oneof![
        (id.clone(), state.clone()).prop_map(|(i, s)| Op::Local(i, s)),
        (id, state, 0..4_000u64).prop_map(|(i, s, v)| Op::Remote(i, s, v)),
        (1..500u64).prop_map(Op::Tick),
    ]
}

proptest! {
    /// Against a model of versioned states (the table never has to forget
    /// a removal here: its groups are never full): a pulled state applies
    /// exactly when it is newer (never over a local change not yet
    /// acknowledged), a local change always; no clock moves by what is read.
    #[test]
    fn versions_behave_like_a_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut r = Region::new(8);
        let t = r.table(8);
        let mut model: std::collections::HashMap<u64, (Option<Entry>, u64)> = Default::default();
        let mut now = 1u64;
        let mut clock = 0u64;
        let entry = |id: u64, s: Option<u32>| s.map(|n| limit(id << 20, n, 0));
        for o in ops {
            match o {
                Op::Local(id, s) => {
                    clock = (now << 12).max(clock + 1);
                    let v = order::LOCAL | clock;
                    match entry(id, s) {
                        Some(e) => { t.set(e, now).unwrap(); }
                        None => { t.remove(id << 20, now); }
                    }
                    model.insert(id, (entry(id, s), v));
                }
                Op::Remote(id, s, v) => {
                    let v = v << 10;
                    let cur = model.get(&id).copied();
                    let wins = cur.is_none_or(|(e, c)| {
                        v > c || (v == c && remote::state_text(entry(id, s).as_ref()) > remote::state_text(e.as_ref()))
                    });
                    prop_assert_eq!(t.apply_remote(id << 20, entry(id, s), v, now), wins);
                    if wins {
                        model.insert(id, (entry(id, s), v));
                    }
                }
                Op::Tick(ms) => now += ms,
            }
            for (id, (e, v)) in &model {
                let got = t.versioned(id << 20);
                prop_assert_eq!(got.entry, *e);
                prop_assert_eq!(got.version, Some(*v));
            }
            prop_assert_eq!(t.live(), model.values().filter(|(e, _)| e.is_some()).count() as u64);
        }
    }
}
