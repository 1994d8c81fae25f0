//! The engine against the reference models: random sequences of requests
//! over several limits (estimate and strict zones, costs, `delay=`, dry
//! run, count_status give-backs, clock steps forward and small steps back)
//! with the runtime state composed in: overrides (a limit below and above
//! the cost, 0, exempt, block, places from 0 to 4 that replace the lines'
//! `in_flight=`, with and without a ttl), `ban=`, empty and
//! invalid limit and cost values under both `fail=` policies, held
//! requests taking turns across two workers, and `in_flight=` places (with
//! a rate or alone; empty and invalid values) taken when a request is
//! admitted and given back exactly once, when it ends, when a later limit
//! rejects or holds it, or when its worker dies (reclaimed).

use std::collections::HashMap;

use proptest::prelude::*;

mod calendar;
mod decision;
mod holds;
mod host;
mod model;
mod ops;
mod outage;
mod overrides;
mod places;

use crate::engine::outage::Outage;
use holds::Held;
use host::{overrides, pid, places, table, turns, Lim, Req, Zone};
use model::{Pol, Zm};
use ops::{op, Op};
use places::Flying;

use super::*;
use crate::overrides::Entry;
use crate::rule::window::Window;
use crate::shm::Owner;
use crate::table::{FailPolicy, KeyHash, Table};
use crate::testing::reference::{Model, StrictLog};
use crate::Admission;

const T0: u64 = 1_767_225_600_000;

/// A request to decide: its client, what it reads, its worker, and for
/// a woken one the turn it holds (zone, worker).
#[derive(Clone, Debug)]
struct Asked {
    client: usize,
    values: Vec<LimitRead>,
    costs: Vec<Cost>,
    in_flights: Vec<LimitRead>,
    dry_run: bool,
    shard: usize,
    turn: Option<(usize, usize, crate::shm::turns::Turn)>,
}

/// An admission kept to settle: limit, client, where counted, cost, proof.
type Kept = (usize, usize, u64, u32, Admission);

/// The location under test and the state of the run.
struct Run {
    zones: Vec<Zone>,
    lims: Vec<Lim>,
    held: Vec<Held>,
    /// Admissions kept for settling: (zone, client, where counted, cost, admission).
    kept: Vec<Vec<Kept>>,
    /// The model's overrides and bans, per zone and client.
    ovr: Vec<HashMap<usize, Entry>>,
    /// The most places an override has given each client, per zone.
    raised: Vec<HashMap<usize, u32>>,
    /// Requests admitted and not ended.
    flying: Vec<Flying>,
    /// Each zone's owner of its places, per worker.
    owners: Vec<[Owner; 2]>,
    /// Each worker's process generation (a crash starts the next one).
    gens: [u32; 2],
    /// Each zone's latest invalid value (epoch ms), for its episodes.
    last_invalid: Vec<Option<u64>>,
    now: u64,
}

/// Clients of a table whose candidate groups are pairwise disjoint: the
/// models know nothing of placement.
fn clients(t: &Table<'_>) -> Vec<KeyHash> {
    let mut keys = vec![];
    let mut taken = std::collections::HashSet::new();
    for salt in 0u32.. {
        if keys.len() == 3 {
            return keys;
        }
        let h = t.hash_key(&salt.to_le_bytes());
        let g = t.candidate_groups(h);
        if !taken.contains(&g[0]) && !taken.contains(&g[1]) {
            taken.extend(g);
            keys.push(h);
        }
    }
    keys
}

/// A zone: window (ms; a calendar's, see [`calendar`]), strict, limit,
/// delay (ms), fail=closed, ban (ms), and its line's `in_flight=` and
/// whether it has a rate; and the `redis_outage=` in force.
type ZoneCase = (
    (u64, bool, u32, u64, bool, u64),
    ((Option<u32>, bool), Outage),
);

fn zone(runtime: bool) -> impl Strategy<Value = ZoneCase> {
    zone_of(
        runtime,
        prop_oneof![Just(1_000u64), Just(2_000u64), 1_000u64..6_000].boxed(),
    )
}

/// [`zone`] with windows of `windows`.
fn zone_of(runtime: bool, windows: BoxedStrategy<u64>) -> impl Strategy<Value = ZoneCase> {
    let fail = if runtime {
        prop::bool::weighted(0.5).boxed()
    } else {
        Just(false).boxed()
    };
    let ban = if runtime {
        prop_oneof![2 => Just(0u64), 1 => 500u64..4_000].boxed()
    } else {
        Just(0u64).boxed()
    };
    let rate = (
        windows,
        any::<bool>(),
        1u32..12,
        prop_oneof![2 => Just(0u64), 3 => 0u64..6_000],
        fail,
        ban,
    );
    let in_flight = prop_oneof![
        1 => Just((None, true)),
        2 => (prop_oneof![1 => Just(0u32), 6 => 1u32..4], prop::bool::weighted(0.7))
            .prop_map(|(k, rate)| (Some(k), rate)),
    ];
    let outage = if runtime {
        prop_oneof![
            3 => Just(Outage::None),
            1 => (1u32..4).prop_map(|gateways| Outage::Share { gateways }),
            1 => Just(Outage::Closed),
        ]
        .boxed()
    } else {
        Just(Outage::None).boxed()
    };
    (rate, (in_flight, outage))
}

/// The zone of a case, fresh: its table, model, clients and runtime state.
fn new_zone(&((w, strict, _, _, closed, ban_ms), ((in_flight, rate), outage)): &ZoneCase) -> Zone {
    // A calendar zone is never strict (`mode=` is refused with it).
    let strict = strict && calendar::window(w).is_none();
    let table = table(w, strict);
    let keys = clients(&table);
    let model = match calendar::model(w) {
        Some(m) => Zm::Calendar(m),
        None if strict => Zm::Strict(StrictLog::new(w)),
        None => Zm::Estimate(Model::new(Window::from_ms(w).unwrap())),
    };
    let fail = if closed {
        FailPolicy::Closed
    } else {
        FailPolicy::Open
    };
    let (ovr, turns) = (overrides(), turns());
    Zone {
        table,
        model,
        w,
        keys,
        ovr,
        turns,
        invalid: Default::default(),
        fail,
        ban_ms,
        in_flight,
        rate,
        places: places(),
        outage,
    }
}

/// A run's start over the zones `zs`: each worker an owner of each zone's
/// places, no override, the clock at `t0` (epoch ms).
fn start_at(zs: &[ZoneCase], t0: u64) -> Run {
    let zones: Vec<Zone> = zs.iter().map(new_zone).collect();
    let lims = zs
        .iter()
        .map(|&((w, _, limit, delay_ms, _, _), ((_, rate), _))| Lim {
            limit,
            // A line without a rate holds nothing; `delay=` is refused
            // with `calendar=`.
            delay_ms: if rate && calendar::window(w).is_none() {
                delay_ms
            } else {
                0
            },
        })
        .collect();
    let owners = zones
        .iter()
        .map(|z| [0, 1].map(|s| z.places.start(pid(s, 0), |_| true).unwrap()))
        .collect();
    if std::env::var("ENGINE_TRACE").is_ok() {
        eprintln!("CASE {zs:?}");
    }
    let ovr = vec![HashMap::new(); zs.len()];
    Run {
        zones,
        lims,
        held: vec![],
        kept: vec![],
        raised: vec![HashMap::new(); zs.len()],
        ovr,
        flying: vec![],
        owners,
        gens: [0, 0],
        last_invalid: vec![None; zs.len()],
        now: t0,
    }
}

/// One step of a run.
fn step(run: &mut Run, op: Op) -> Result<(), TestCaseError> {
    match op {
        Op::Request {
            dt,
            client,
            cost,
            kind,
            dry_run,
            shard,
            fkind,
        } => {
            // A step back stays in every zone's newest window (or
            // sub-window): the tables keep one newest window per zone,
            // the models one per key.
            let next = run.now.saturating_add_signed(dt).max(run.floor());
            run.wake_until(next)?;
            run.now = next;
            let q = run.asked(client, (cost, kind, fkind), dry_run, shard);
            run.request(q, None)?;
        }
        Op::Settle { keep } => run.settle(keep),
        Op::Override {
            zone,
            client,
            action,
            n,
            ttl,
        } => run.operator(zone, client, Some((action, n, ttl))),
        Op::Remove { zone, client } => run.operator(zone, client, None),
        Op::End { pick } => run.end(pick)?,
        Op::Crash { shard } => run.crash(shard)?,
    }
    Ok(())
}

/// Runs `ops` over the zones `zs`, checking every decision.
fn run(zs: &[ZoneCase], ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_from(zs, ops, T0)
}

/// [`run`] from `t0` (epoch ms).
fn run_from(zs: &[ZoneCase], ops: Vec<Op>, t0: u64) -> Result<(), TestCaseError> {
    let mut run = start_at(zs, t0);
    for op in ops {
        step(&mut run, op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_models(
        zs in proptest::collection::vec(zone(false), 1..4),
        ops in proptest::collection::vec(op(false), 1..120),
    ) {
        run(&zs, ops)?;
    }

    /// The same, with the runtime state composed in: overrides and their
    /// ttl, bans, invalid and empty values under both `fail=` policies,
    /// costs above the limit in force, turns across two workers.
    #[test]
    fn engine_with_runtime_state_matches_the_models(
        zs in proptest::collection::vec(zone(true), 1..4),
        ops in proptest::collection::vec(op(true), 1..120),
    ) {
        run(&zs, ops)?;
    }

    /// Calendar zones beside sliding and strict ones, with the runtime
    /// state composed in, from a random instant of 1970 to 2100 moved to
    /// 3 s before the first calendar zone's period ends (so that the run
    /// crosses a local midnight: a 23- or 25-hour day, a month's or a
    /// year's end, a skipped midnight).
    #[test]
    fn engine_with_calendar_zones_matches_the_models(
        zs in proptest::collection::vec(
            zone_of(true, prop_oneof![1 => 1_000u64..6_000, 2 => calendar::lengths()].boxed()),
            1..4,
        ),
        at in 0u64..4_102_444_800_000,
        ops in proptest::collection::vec(op(true), 1..120),
    ) {
        let t0 = zs
            .iter()
            .find_map(|z| calendar::model(z.0 .0))
            .map_or(at, |m| m.period_at(at).end_ms.saturating_sub(3_000));
        run_from(&zs, ops, t0)?;
    }
}
