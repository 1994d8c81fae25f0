//! In-flight places in the model: the requests in flight ([`Flying`]),
//! whether a line refuses a request for its places, and the shared places
//! checked against the model after every step: each taken once, given
//! back once (when the request ends, or by its dead worker's successor),
//! never more than the places in force.

use proptest::prelude::*;

use super::{pid, Asked, Pol, Run};
use crate::engine::LimitRead;
use crate::shm::Place;
use crate::table::FailPolicy;

/// A request admitted and still in flight: its client, its worker, the
/// places it took (limit, place).
pub(super) struct Flying {
    pub(super) client: usize,
    pub(super) shard: usize,
    pub(super) places: Vec<(usize, Place)>,
}

impl Run {
    /// Requests of `client` in flight with a place of limit `n`.
    pub(super) fn flying(&self, n: usize, client: usize) -> u32 {
        let of = |f: &&Flying| f.client == client && f.places.iter().any(|&(m, _)| m == n);
        self.flying.iter().filter(of).count() as u32
    }

    /// Whether limit `n`, its rate admitting the request (`pol`), refuses
    /// it for its in-flight places; and whether a place would be taken.
    pub(super) fn in_flight_over(&self, n: usize, q: &Asked, pol: Pol) -> (bool, bool) {
        let z = &self.zones[n];
        if z.in_flight.is_none() || !matches!(pol, Pol::Count { .. } | Pol::Places) {
            return (false, false);
        }
        match self.places_read(n, q, self.now) {
            LimitRead::Set(k) => {
                let over = self.flying(n, q.client) >= k;
                (over, !over)
            }
            LimitRead::Invalid => (z.fail == FailPolicy::Closed, false),
            LimitRead::Empty => (false, false),
        }
    }

    /// The shared places count what the model has in flight, per zone and
    /// client, whichever worker took them: each taken once, given back once,
    /// never more than the line's `in_flight=`.
    pub(super) fn check_places(&self) -> Result<(), TestCaseError> {
        for (n, z) in self.zones.iter().enumerate() {
            let mut total = 0;
            for (c, h) in z.keys.iter().enumerate() {
                let want = self.flying(n, c);
                prop_assert_eq!(
                    z.places.held(h.0),
                    want,
                    "places of client {} in zone {}",
                    c,
                    n
                );
                if let Some(k) = z.in_flight {
                    // Never more than the most places in force since.
                    let k = k.max(self.raised[n].get(&c).copied().unwrap_or(0));
                    prop_assert!(want <= k, "{} in flight over in_flight={}", want, k);
                }
                total += u64::from(want);
            }
            prop_assert_eq!(z.places.in_flight(), total, "zone {}'s ledger", n);
        }
        Ok(())
    }

    /// A request in flight ends: the host gives back its places.
    pub(super) fn end(&mut self, pick: usize) -> Result<(), TestCaseError> {
        if self.flying.is_empty() {
            return Ok(());
        }
        let f = self.flying.remove(pick % self.flying.len());
        for (n, p) in f.places {
            self.zones[n].places.give(p);
        }
        self.check_places()
    }

    /// Worker `shard` dies: what it held is gone without a word; its
    /// successor starts, and its start reclaims the dead process's places
    /// and its turns.
    pub(super) fn crash(&mut self, shard: usize) -> Result<(), TestCaseError> {
        self.gens[shard] += 1;
        let live = [pid(0, self.gens[0]), pid(1, self.gens[1])];
        for (n, z) in self.zones.iter().enumerate() {
            let o = z.places.start(live[shard], |p| live.contains(&p));
            self.owners[n][shard] = o.expect("an owner");
            z.turns.reclaim_dead(|p| live.contains(&p));
        }
        self.flying.retain(|f| f.shard != shard);
        self.held.retain(|h| h.q.shard != shard);
        self.check_turns()?;
        self.check_places()
    }
}
