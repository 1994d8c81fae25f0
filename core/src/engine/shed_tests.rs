//! `rate_limit_window_shed` against a reference model: random interleavings
//! of requests of random priorities (the four levels, under ordered
//! reserves or `reserve=` alone) started by two workers (and by a
//! process without an owner), ended in any order, ended twice, and workers
//! killed and respawned (their places reclaimed by the successor's start
//! or by the other worker's sweep). After every step the group's places,
//! its counters and every decision match the model: never more than
//! `max=` in flight, a low, default or high request shed at `max` minus
//! its level's reserve in flight, a critical one admitted below `max`,
//! each place given back once.

use proptest::prelude::*;

use super::*;
use crate::testing::Region;

/// A step of a run.
#[derive(Clone, Debug)]
enum Op {
    /// Worker `w` (2: a process without an owner) starts a request.
    Start { w: usize, level: usize },
    /// The `i`th request in flight (modulo their number) ends.
    End(prop::sample::Index),
    /// A request that has ended ends again (its stale place is given).
    EndAgain(prop::sample::Index),
    /// Worker `w` is killed; `sweep`: the other worker's sweep reclaims
    /// its places before it is respawned, else its successor's start.
    Crash { w: usize, sweep: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, 0..4usize).prop_map(|(w, level)| Op::Start { w, level }),
        3 => any::<prop::sample::Index>().prop_map(Op::End),
        1 => any::<prop::sample::Index>().prop_map(Op::EndAgain),
        1 => (0..2usize, any::<bool>()).prop_map(|(w, sweep)| Op::Crash { w, sweep }),
    ]
}

/// The model's counters, per level (0: critical, 1: high, 2: default,
/// 3: low).
#[derive(Default)]
struct Counts {
    shed: [u64; 4],
    admitted: [u64; 4],
    untracked: u64,
    reclaimed: u64,
}

/// The group under test and the model.
struct Run {
    g: ShedGroup<'static>,
    limits: ShedLimits,
    /// Each worker's pid and owner.
    workers: [(u32, Owner); 2],
    /// Pids of processes killed.
    dead: Vec<u32>,
    /// Requests in flight: (worker, place).
    flying: Vec<(usize, Place)>,
    /// Places given back already.
    ended: Vec<Place>,
    counts: Counts,
    next_pid: u32,
}

/// The model's limit: requests in flight at which a request of `level`
/// (0: critical, 1: high, 2: default, 3: low) is shed. A level's reserve
/// is its percent of `max`, rounded up, computed apart from the rule.
fn model_limit(l: &ShedLimits, level: usize) -> u32 {
    let pct = match level {
        0 => return l.max,
        1 => l.reserve_high_pct,
        2 => l.reserve_pct,
        _ => l.reserve_low_pct,
    };
    let mut reserve = l.max * pct / 100;
    if reserve * 100 < l.max * pct {
        reserve += 1;
    }
    l.max - reserve.min(l.max)
}

/// The priority of `level`, as a `priority=` value says it.
fn priority(level: usize) -> Priority {
    Priority::of([&b"critical"[..], b"HIGH", b"", b"low"][level])
}

impl Run {
    fn new(limits: ShedLimits) -> Run {
        let max = limits.max;
        let buf = Box::leak(Box::new(Region::new(ShedGroup::bytes_for(max))));
        // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
        let g = unsafe { ShedGroup::init(buf.ptr(), buf.len(), max) }.unwrap();
        let mut run = Run {
            g,
            limits,
            workers: [(0, Owner::of(1).unwrap()); 2],
            dead: vec![],
            flying: vec![],
            ended: vec![],
            counts: Counts::default(),
            next_pid: 100,
        };
        for w in 0..2 {
            run.respawn(w);
        }
        run
    }

    /// Worker `w` starts again (a new pid), its owner from the group.
    fn respawn(&mut self, w: usize) {
        self.next_pid += 1;
        let dead = self.dead.clone();
        let owner = self.g.places.start(self.next_pid, |p| !dead.contains(&p));
        self.workers[w] = (self.next_pid, owner.expect("an owner is free"));
    }

    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Start { w, level } => self.start(w, level)?,
            Op::End(i) if !self.flying.is_empty() => {
                let (_, p) = self.flying.remove(i.index(self.flying.len()));
                self.g.places.give(p);
                self.ended.push(p);
            }
            Op::EndAgain(i) if !self.ended.is_empty() => {
                self.g.places.give(self.ended[i.index(self.ended.len())]);
            }
            Op::Crash { w, sweep } => self.crash(w, sweep),
            _ => {}
        }
        self.check()
    }

    fn start(&mut self, w: usize, pi: usize) -> Result<(), TestCaseError> {
        let p = priority(pi);
        let owner = self.workers.get(w).map(|&(_, o)| o);
        let before = self.flying.len() as u32;
        let got = decide(&self.g, owner, self.limits, p, false);
        let limit = model_limit(&self.limits, pi);
        match got {
            Shed::Untracked => {
                prop_assert!(owner.is_none(), "untracked with an owner");
                self.counts.untracked += 1;
                self.counts.admitted[pi] += 1;
            }
            _ if owner.is_none() => {
                return Err(TestCaseError::fail(format!("no owner, yet {got:?}")));
            }
            Shed::Admit(place) => {
                prop_assert!(
                    before < limit,
                    "admitted at {} in flight, limit {}",
                    before,
                    limit
                );
                self.flying.push((w, place));
                self.counts.admitted[pi] += 1;
            }
            Shed::Shed {
                in_flight,
                retry_after_s,
            } => {
                prop_assert!(
                    before >= limit,
                    "shed at {} in flight, limit {}",
                    before,
                    limit
                );
                prop_assert_eq!(in_flight, before);
                prop_assert_eq!(retry_after_s, 1);
                self.counts.shed[pi] += 1;
            }
            Shed::WouldShed { .. } => prop_assert!(false, "a dry run's answer, not asked"),
        }
        Ok(())
    }

    /// Kills worker `w`: its places come back, by the other worker's sweep
    /// or by its successor's start.
    fn crash(&mut self, w: usize, sweep: bool) {
        self.dead.push(self.workers[w].0);
        let lost = self.flying.iter().filter(|f| f.0 == w).count() as u64;
        self.flying.retain(|f| f.0 != w);
        self.counts.reclaimed += lost;
        if sweep {
            let dead = self.dead.clone();
            assert_eq!(self.g.places.reclaim_dead(|p| !dead.contains(&p)), lost);
        }
        self.respawn(w);
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let n = self.flying.len() as u32;
        prop_assert!(n <= self.limits.max, "{} in flight above max", n);
        prop_assert_eq!(self.g.in_flight(), n, "the group's count");
        prop_assert_eq!(self.g.places.in_flight(), u64::from(n), "ledger words");
        let c = &self.counts;
        for (i, p) in (0..4).map(|i| (i, priority(i))) {
            prop_assert_eq!(self.g.shed_total(p.index()), c.shed[i], "shed {:?}", p);
            prop_assert_eq!(
                self.g.admitted_total(p.index()),
                c.admitted[i],
                "admitted {:?}",
                p
            );
        }
        prop_assert_eq!(self.g.untracked_total(), c.untracked);
        prop_assert_eq!(self.g.places.stats().reclaimed, c.reclaimed);
        Ok(())
    }
}

/// A percent: the edges and anything between.
fn pct() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(50), Just(100), 0..=100u32]
}

/// A group's limits: `reserve=` alone, or three ordered reserves.
fn limits() -> impl Strategy<Value = ShedLimits> {
    let alone = (1..10u32, pct()).prop_map(|(max, p)| ShedLimits::new(max, p));
    let ordered = (1..10u32, [pct(), pct(), pct()]).prop_map(|(max, mut p)| {
        p.sort_unstable();
        ShedLimits {
            max,
            reserve_high_pct: p[0],
            reserve_pct: p[1],
            reserve_low_pct: p[2],
        }
    });
    prop_oneof![alone, ordered]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn shedding_matches_the_model(
        limits in limits(),
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let mut run = Run::new(limits);
        for o in ops {
            run.step(o)?;
        }
        // Every request ends: nothing is left in flight.
        while let Some((_, p)) = run.flying.pop() {
            run.g.places.give(p);
        }
        prop_assert_eq!(run.g.in_flight(), 0);
        prop_assert_eq!(run.g.places.in_flight(), 0);
    }
}
