//! The steps of a sequence ([`Op`]) and their strategies: requests (what
//! each limit's values and costs read as), settles, operators' overrides
//! and removals, requests' ends and workers' crashes.

use proptest::prelude::*;

use super::{Asked, Run, Zm};
use crate::engine::{Cost, LimitRead};
use crate::overrides::{Action, Entry};

/// One step of a sequence.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// A request of `client` after a clock step of `dt` ms, with a cost per
    /// limit (`cost % (limit + 2)`, so sometimes above it), what its limit
    /// and cost values read as per limit (`kind`: mostly valid), a dry run
    /// flag and the worker deciding it.
    Request {
        dt: i64,
        client: usize,
        cost: [u32; 3],
        kind: [u8; 3],
        dry_run: bool,
        shard: usize,
        /// What its `in_flight=` values read as (0..=9 the line's, 10
        /// empty, 11 invalid).
        fkind: [u8; 3],
    },
    /// The oldest admission still kept is settled (count_status= / charge=):
    /// counted `keep` tenths of its cost (0: given back).
    Settle { keep: u32 },
    /// An operator's override of `client` in zone `zone`: `action` 0 a
    /// limit (`n % (limit + 3)`), 1 exempt, 2 block, 3 places (`n % 5`);
    /// `ttl` ms (0: none).
    Override {
        zone: usize,
        client: usize,
        action: u8,
        n: u32,
        ttl: u64,
    },
    /// The override of `client` in `zone` removed.
    Remove { zone: usize, client: usize },
    /// A request in flight (the `pick`th, modulo) ends: the host gives
    /// its places back.
    End { pick: usize },
    /// Worker `shard` dies: its requests in flight and held are gone
    /// without giving anything back; its successor starts (and reclaims).
    Crash { shard: usize },
}

pub(super) fn op(runtime: bool) -> impl Strategy<Value = Op> {
    let w = if runtime { 2 } else { 0 };
    let kinds = if runtime {
        prop::array::uniform3(0u8..24).boxed()
    } else {
        Just([0u8; 3]).boxed()
    };
    let fkinds = if runtime {
        prop::array::uniform3(0u8..12).boxed()
    } else {
        Just([0u8; 3]).boxed()
    };
    prop_oneof![
        12 => (prop_oneof![4 => 0i64..1_500, 1 => -200i64..0, 1 => 0i64..8_000], 0usize..3,
              any::<[u32; 3]>(), kinds, prop::bool::weighted(0.15), 0usize..2, fkinds)
            .prop_map(|(dt, client, cost, kind, dry_run, shard, fkind)| Op::Request {
                dt, client, cost, kind, dry_run, shard, fkind
            }),
        6 => any::<usize>().prop_map(|pick| Op::End { pick }),
        1 => (0usize..2).prop_map(|shard| Op::Crash { shard }),
        2 => (0u32..11).prop_map(|keep| Op::Settle { keep }),
        w => (0usize..3, 0usize..3, 0u8..4, any::<u32>(), prop_oneof![Just(0u64), 100u64..5_000])
            .prop_map(|(zone, client, action, n, ttl)| Op::Override { zone, client, action, n, ttl }),
        w / 2 => (0usize..3, 0usize..3).prop_map(|(zone, client)| Op::Remove { zone, client }),
    ]
}

impl Run {
    pub(super) fn settle(&mut self, keep: u32) {
        if self.kept.is_empty() {
            return;
        }
        for (n, client, at, cost, a) in self.kept.remove(0) {
            let z = &mut self.zones[n];
            // A strict zone only gives back the whole cost.
            let count = match z.model {
                Zm::Strict(_) if keep < 10 => 0,
                Zm::Strict(_) => cost,
                Zm::Estimate(_) | Zm::Calendar(_) => cost * keep / 10,
            };
            z.table.settle(&a, count);
            if count != cost {
                z.model.give_back(client as u64, at, cost, count);
            }
        }
    }

    /// The request of an [`Op::Request`]: its values per limit, by `kind`
    /// (0..=19 valid, 20..21 an invalid limit, 22 an empty limit, 23 an
    /// invalid cost), its cost `raw % (limit in force + 2)` at least 1.
    pub(super) fn asked(
        &self,
        client: usize,
        (raw, kind, fkind): ([u32; 3], [u8; 3], [u8; 3]),
        dry_run: bool,
        shard: usize,
    ) -> Asked {
        let now = self.now;
        let mut values = vec![];
        let mut costs = vec![];
        let mut in_flights = vec![];
        for (n, l) in self.lims.iter().enumerate() {
            in_flights.push(match (fkind[n], self.zones[n].in_flight) {
                (_, None) => LimitRead::Empty,
                (10, _) => LimitRead::Empty,
                (11, _) => LimitRead::Invalid,
                (_, Some(k)) => LimitRead::Set(k),
            });
            if !self.zones[n].rate {
                // No rate: nothing read for it.
                values.push(LimitRead::Empty);
                costs.push(Cost::Count(1));
                continue;
            }
            values.push(match kind[n] {
                20 | 21 => LimitRead::Invalid,
                22 => LimitRead::Empty,
                _ => LimitRead::Set(l.limit),
            });
            let force = match self.ovr[n].get(&client).filter(|e| !e.expired(now)) {
                Some(Entry {
                    action: Action::Limit(o),
                    ..
                }) => *o,
                _ => l.limit,
            };
            costs.push(match kind[n] {
                23 => Cost::Invalid,
                _ => Cost::Count(1 + raw[n] % (force + 2)),
            });
        }
        Asked {
            client,
            values,
            costs,
            in_flights,
            dry_run,
            shard,
            turn: None,
        }
    }
}
