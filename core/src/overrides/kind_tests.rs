//! Tests of the kinds' rule (core/src/overrides/write.rs, evict.rs): a ban
//! never replaces an operator's state, here or from the fleet; an
//! operator's state from the fleet replaces a ban whatever the versions;
//! a full table evicts the ban nearest its end for an operator's change
//! and counts a remote state that does not fit.

use super::remote::state_text;
use super::tests::{limit, Region};
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn entry(fp: u64, action: Action, expires_ms: u64) -> Entry {
    Entry {
        fp,
        action,
        expires_ms,
    }
}

#[test]
fn a_ban_from_the_fleet_never_replaces_a_block_and_a_block_replaces_a_ban() {
    let mut r = Region::new(8);
    let t = r.table(8);
    t.set(entry(5, Action::Block, 0), 1_000).unwrap();
    let here = t.versioned(5).version.unwrap();
    // A newer ban (set on a gateway that had not seen the block yet).
    let ban = entry(5, Action::Ban, 61_000);
    assert_eq!(
        t.apply_remote_as(5, Some(ban), here + 10, 1_000),
        Applied::Stale
    );
    assert_eq!(t.get(5, 62_000).unwrap().action, Action::Block);
    // Here a ban, newer than the fleet's block: the block applies.
    assert!(t.ban(6, 61_000, 2_000));
    let banned = t.versioned(6).version.unwrap();
    let block = entry(6, Action::Block, 0);
    assert_eq!(
        t.apply_remote_as(6, Some(block), banned - 5, 2_000),
        Applied::Yes
    );
    assert_eq!(t.get(6, 70_000), Some(block));
    // A ban never replaces an operator's state here either.
    assert!(!t.ban(6, 90_000, 3_000));
    assert_eq!(t.get(6, 100_000), Some(block));
}

#[test]
fn a_full_table_evicts_the_ban_nearest_its_end_for_an_operator() {
    let mut r = Region::new(4);
    let t = r.table(4);
    assert!(t.ban(1, 50_000, 1_000));
    assert!(t.ban(2, 20_000, 1_000));
    assert!(t.ban(3, 90_000, 1_000));
    t.set(limit(4, 3, 0), 1_000).unwrap();
    // Bans never evict.
    assert!(!t.ban(9, 30_000, 1_000));
    t.set(entry(10, Action::Block, 0), 1_000).unwrap();
    assert_eq!(t.get(2, 1_000), None);
    assert_eq!(t.bans_evicted(), 1);
    // From the fleet too: the next nearest (fp 1).
    let ex = entry(11, Action::Exempt, 0);
    assert_eq!(t.apply_remote_as(11, Some(ex), 5, 1_000), Applied::Yes);
    assert_eq!(t.get(1, 1_000), None);
    assert_eq!(t.get(3, 1_000).unwrap().action, Action::Ban);
    // A remote ban finds no room: counted.
    let ban = entry(12, Action::Ban, 60_000);
    assert_eq!(t.apply_remote_as(12, Some(ban), 6, 1_000), Applied::Full);
    assert_eq!(t.remote_misfits(), 1);
    t.set(entry(13, Action::Block, 0), 1_000).unwrap();
    // Operators' entries only: the next refuses, here and from the fleet.
    assert!(t.set(entry(14, Action::Block, 0), 1_000).is_err());
    let ex = entry(15, Action::Exempt, 0);
    assert_eq!(t.apply_remote_as(15, Some(ex), 7, 1_000), Applied::Full);
    assert_eq!(t.remote_misfits(), 2);
    assert_eq!(t.live(), 4);
}

#[derive(Clone, Debug)]
enum Op {
    /// An operator's state (None: removal) made here.
    Operator(u64, Option<(Action, u64)>),
    /// A ban made here, for so many seconds.
    Ban(u64, u64),
    /// A state read from the fleet, at a version.
    Remote(u64, Option<(Action, u64)>, u64),
    Tick(u64),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (0..3u32).prop_map(Action::Limit),
        (0..3u32).prop_map(Action::InFlight),
        Just(Action::Block),
        Just(Action::Exempt),
        Just(Action::Ban),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let id = 1u64..10;
    let op_state = proptest::option::of((action(), 0..3u64))
        .prop_map(|s| s.filter(|(a, _)| *a != Action::Ban));
    let any_state = proptest::option::of((action(), 0..3u64));
    prop_oneof![
        (id.clone(), op_state).prop_map(|(i, s)| Op::Operator(i, s)),
        (id.clone(), 1..4u64).prop_map(|(i, s)| Op::Ban(i, s)),
        (id, any_state, 0..40u64).prop_map(|(i, s, v)| Op::Remote(i, s, v)),
        (1..1500u64).prop_map(Op::Tick),
    ]
}

/// When a ban ends, for the eviction (0: never, last).
fn end_of(e: &Entry) -> u64 {
    if e.expires_ms == 0 {
        u64::MAX
    } else {
        e.expires_ms
    }
}

/// The model: per client its state (None: removed) and version.
#[derive(Default)]
struct Model {
    states: HashMap<u64, (Option<Entry>, u64)>,
    clock: u64,
}

const CAP: usize = 5;

impl Model {
    fn forget_expired(&mut self, now: u64) {
        self.states
            .retain(|_, (e, _)| !e.is_some_and(|e| e.expired(now)));
    }

    fn live(&self) -> usize {
        self.states.values().filter(|(e, _)| e.is_some()).count()
    }

    fn here(&self, id: u64) -> Option<Entry> {
        self.states.get(&id).and_then(|(e, _)| *e)
    }

    /// Whether a new live entry of `id` needs room that is not there.
    fn no_room(&self, id: u64, state: Option<&Entry>) -> bool {
        state.is_some() && self.here(id).is_none() && self.live() >= CAP
    }

    /// The bans nearest their end (the eviction's candidates).
    fn nearest_bans(&self) -> Vec<u64> {
        let bans: Vec<(u64, u64)> = self
            .states
            .iter()
            .filter_map(|(id, (e, _))| {
                e.filter(|e| e.action == Action::Ban)
                    .map(|e| (*id, end_of(&e)))
            })
            .collect();
        let least = bans.iter().map(|b| b.1).min();
        bans.iter()
            .filter(|b| Some(b.1) == least)
            .map(|b| b.0)
            .collect()
    }

    /// Whether `state` at `v` from the fleet wins over the state here.
    fn remote_wins(&self, id: u64, state: Option<&Entry>, v: u64) -> bool {
        let Some((here, c)) = self.states.get(&id) else {
            return true;
        };
        let op = |e: Option<&Entry>| e.is_some_and(|e| e.action != Action::Ban);
        let ban = |e: Option<&Entry>| e.is_some_and(|e| e.action == Action::Ban);
        if ban(state) && op(here.as_ref()) {
            return false;
        }
        if op(state) && ban(here.as_ref()) {
            return true;
        }
        v > *c || (v == *c && state_text(state) > state_text(here.as_ref()))
    }
}

fn to_entry(id: u64, s: Option<(Action, u64)>, now: u64) -> Option<Entry> {
    s.map(|(a, ttl)| entry(id, a, if ttl == 0 { 0 } else { now + ttl * 1000 }))
}

/// Runs one operation on the table and the model; returns the bans the
/// model allows the table to have evicted.
fn step(t: &Overrides, m: &mut Model, o: Op, now: &mut u64) -> Result<Vec<u64>, TestCaseError> {
    let mut evictable = Vec::new();
    match o {
        Op::Operator(id, s) => {
            let e = to_entry(id, s, *now);
            let got = match e {
                Some(e) => t.set(e, *now).map(|_| ()),
                None => {
                    t.remove(id, *now);
                    Ok(())
                }
            };
            m.clock = (*now << 12).max(m.clock + 1);
            if m.no_room(id, e.as_ref()) {
                evictable = m.nearest_bans();
                prop_assert_eq!(got.is_ok(), !evictable.is_empty());
                if got.is_err() {
                    return Ok(evictable);
                }
            }
            m.states.insert(id, (e, m.clock));
        }
        Op::Ban(id, secs) => {
            let until = *now + secs * 1000;
            let e = entry(id, Action::Ban, until);
            m.clock = (*now << 12).max(m.clock + 1);
            let op = m.here(id).is_some_and(|h| h.action != Action::Ban);
            let want = !op && !m.no_room(id, Some(&e));
            prop_assert_eq!(t.ban(id, until, *now), want);
            if want {
                m.states.insert(id, (Some(e), m.clock));
            }
        }
        Op::Remote(id, s, v) => {
            let v = v << 14;
            let e = to_entry(id, s, *now);
            m.clock = m.clock.max(v);
            let wins = m.remote_wins(id, e.as_ref(), v);
            let got = t.apply_remote_as(id, e, v, *now);
            if !wins {
                prop_assert_eq!(got, Applied::Stale);
                return Ok(evictable);
            }
            if m.no_room(id, e.as_ref()) {
                let op = e.is_some_and(|e| e.action != Action::Ban);
                evictable = if op { m.nearest_bans() } else { Vec::new() };
                if evictable.is_empty() {
                    prop_assert_eq!(got, Applied::Full);
                    return Ok(evictable);
                }
            }
            prop_assert_eq!(got, Applied::Yes);
            m.states.insert(id, (e, v));
        }
        Op::Tick(ms) => {
            *now += ms;
            t.reap_expired(0, t.slots(), *now);
        }
    }
    Ok(evictable)
}

proptest! {
    /// Operators' changes, bans and the fleet's states in any order: the
    /// table agrees with the model of the kinds' rule at every step.
    #[test]
    fn kinds_behave_like_a_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut r = Region::new(CAP);
        let t = r.table(CAP);
        let mut m = Model::default();
        let mut now = 1_000u64;
        for o in ops {
            m.forget_expired(now);
            let evictable = step(&t, &mut m, o, &mut now)?;
            m.forget_expired(now);
            let gone: Vec<u64> = m.states.iter()
                .filter(|(id, (e, _))| e.is_some() && t.get(**id, now).is_none())
                .map(|(id, _)| *id)
                .collect();
            prop_assert!(gone.len() <= 1, "{:?}", gone);
            for id in gone {
                prop_assert!(evictable.contains(&id), "{} evicted, not one of {:?}", id, evictable);
                m.states.remove(&id);
            }
            for (id, (e, _)) in &m.states {
                prop_assert_eq!(t.get(*id, now), *e);
            }
            prop_assert_eq!(t.live(), m.live() as u64);
        }
    }
}
