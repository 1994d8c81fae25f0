//! One request decided by the engine and checked against the models:
//! the first limit over (by its rate, its places, an override, an invalid
//! value), the invalid values reported and counted, what is counted, the
//! places taken, Retry-After, bans and holds.

use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;

use super::{Asked, Flying, Held, Pol, Req, Run, Zm};
use crate::engine::{decide, Ask, LimitRead, Verdict};
use crate::overrides::{Action, Entry};

impl Run {
    /// Decides one request at `self.now` and checks it against the models.
    pub(super) fn request(&mut self, q: Asked, since: Option<u64>) -> Result<(), TestCaseError> {
        let (now, client, dry_run) = (self.now, q.client, q.dry_run);
        let mut r = Req {
            zones: &self.zones,
            lims: &self.lims,
            client,
            values: &q.values,
            costs: &q.costs,
            in_flights: &q.in_flights,
            owners: &self.owners,
            shard: q.shard,
            took: vec![],
            records: vec![],
            since,
            holds: 0,
            invalid: vec![],
        };
        let ask = Ask {
            now_ms: now,
            shard: q.shard,
            dry_run,
            holdable: true,
        };
        let invalid_before: Vec<u64> = self.zones.iter().map(|z| z.invalid.load(Relaxed)).collect();
        let v = decide(&mut r, &ask).unwrap();
        let (records, holds, invalid) = (r.records.clone(), r.holds, r.invalid.clone());
        let took = r.took.clone();
        if std::env::var("ENGINE_TRACE").is_ok() {
            eprintln!("t={} {q:?} since={since:?} -> {v:?}", now % 100_000);
        }
        if !matches!(v, Verdict::Admit) {
            // An admission given back leaves the key's state at its
            // sub-window; a rejection writes nothing.
            for (n, _) in records.iter().filter(|(_, d)| d.admission.is_some()) {
                if let Zm::Strict(m) = &mut self.zones[*n].model {
                    m.seen(client as u64, now);
                }
            }
        }
        let pols: Vec<Pol> = (0..self.lims.len())
            .map(|n| self.pol(n, client, q.values[n], q.costs[n], now))
            .collect();
        // The first limit over, by its rate or (`by_flight`) its places.
        let mut first_over = None;
        let mut by_flight = false;
        let mut placed = vec![];
        for (n, &p) in pols.iter().enumerate() {
            let over = match p {
                Pol::Off | Pol::Places => false,
                Pol::Blocked { .. } | Pol::Closed => true,
                Pol::Count { limit, cost } => !self.fits(n, client, now, limit, cost),
            };
            if over {
                first_over = Some(n);
                break;
            }
            let (full, place) = self.in_flight_over(n, &q, p);
            if full {
                (first_over, by_flight) = (Some(n), true);
                break;
            }
            if place {
                placed.push(n);
            }
        }
        // Every invalid value judged before the decision stopped is
        // reported once; the quiet reads (waits, Retry-After) report none.
        let judged = first_over.map_or(self.lims.len(), |n| n + 1);
        let reaches_in_flight = |n: usize| {
            let p = pols[n];
            let rate_fits = match p {
                Pol::Count { limit, cost } => self.fits(n, client, now, limit, cost),
                Pol::Places => true,
                _ => false,
            };
            let read = self.places_read(n, &q, now);
            rate_fits && self.zones[n].in_flight.is_some() && read == LimitRead::Invalid
        };
        let expect: Vec<usize> = (0..judged)
            .filter(|&n| self.reports_invalid(n, &q, now) || reaches_in_flight(n))
            .collect();
        let got: Vec<usize> = invalid.iter().map(|&(n, _)| n).collect();
        prop_assert_eq!(&got, &expect, "invalid values reported");
        for (n, z) in self.zones.iter().enumerate() {
            let counted = z.invalid.load(Relaxed) - invalid_before[n];
            let want = expect.iter().filter(|&&m| m == n).count() as u64;
            prop_assert_eq!(counted, want, "invalid values counted in zone {}", n);
        }
        let mut held_again = None;
        match (v, first_over) {
            (Verdict::Admit | Verdict::Exempt, None) => {
                let counted = pols
                    .iter()
                    .filter(|p| matches!(p, Pol::Count { .. }))
                    .count();
                prop_assert_eq!(
                    matches!(v, Verdict::Admit),
                    counted > 0 || !placed.is_empty()
                );
                prop_assert_eq!(records.len(), counted);
                // One place per line whose in-flight value applies, kept
                // until the request ends.
                let lines: Vec<usize> = took.iter().map(|&(n, _)| n).collect();
                prop_assert_eq!(&lines, &placed, "places taken");
                if !took.is_empty() {
                    self.flying.push(Flying {
                        client,
                        shard: q.shard,
                        places: took,
                    });
                }
                let mut kept = vec![];
                for (n, d) in records {
                    let Pol::Count { cost, .. } = pols[n] else {
                        return Err(TestCaseError::fail("recorded a limit that does not count"));
                    };
                    let a = d.admission.unwrap();
                    let at = self.zones[n].model.add(client as u64, now, cost);
                    prop_assert_eq!(a.window_index(), at, "counted where the model counts");
                    prop_assert_eq!(a.cost(), cost);
                    kept.push((n, client, at, cost, a));
                }
                self.kept.push(kept);
            }
            (Verdict::Reject(rej), Some(n)) => {
                prop_assert_eq!(rej.index, n, "the first limit over");
                prop_assert_eq!(rej.dry_run, dry_run);
                prop_assert_eq!(rej.unheld, since.is_some());
                prop_assert_eq!(rej.overridden, matches!(pols[n], Pol::Blocked { .. }));
                prop_assert_eq!(rej.in_flight, by_flight, "refused for its places");
                let read = self.places_read(n, &q, now);
                let invalid_flight = by_flight && read == LimitRead::Invalid;
                prop_assert_eq!(rej.invalid, pols[n] == Pol::Closed || invalid_flight);
                if let (true, LimitRead::Set(k)) = (by_flight, read) {
                    prop_assert_eq!(
                        (rej.limit, rej.decision.estimate),
                        (k, self.flying(n, client))
                    );
                }
                let counts = matches!(pols[n], Pol::Count { .. }) && !by_flight;
                let ahead = self.ahead(client, n, since);
                let share = rej.share_full.is_some();
                prop_assert_eq!(
                    share,
                    since.is_none() && ahead > 0 && !dry_run && self.delays() && counts
                );
                // Retry-After: the whole cost fits under every limit then,
                // not before an override's end; a ban never shortens it.
                let parts: Vec<Option<u64>> = (n..self.lims.len())
                    .map(|m| self.retry_secs(m, client, now, &q, pols[m]))
                    .collect();
                let mut least = parts.iter().flatten().copied().max().unwrap_or(0);
                if by_flight {
                    // A place frees when a request ends: a second at least.
                    least = least.max(1);
                }
                let exact = parts.iter().all(Option::is_some);
                let live = self.ovr[n].get(&client).filter(|e| !e.expired(now));
                let bans = counts
                    && !dry_run
                    && self.zones[n].ban_ms > 0
                    && live.is_none_or(|e| e.action == Action::Ban);
                if bans {
                    let ban_ms = self.zones[n].ban_ms;
                    prop_assert_eq!(rej.banned, Some(ban_ms.div_ceil(1000) as u32));
                    least = least.max(ban_ms.div_ceil(1000));
                    let e = Entry {
                        fp: self.zones[n].keys[client].fingerprint(),
                        action: Action::Ban,
                        expires_ms: now + ban_ms,
                    };
                    self.ovr[n].insert(client, e);
                } else {
                    prop_assert_eq!(rej.banned, None);
                }
                let retry = u64::from(rej.retry_after_s);
                if exact {
                    prop_assert_eq!(retry, least, "Retry-After {:?}", pols);
                } else {
                    prop_assert!(
                        retry >= least,
                        "Retry-After {} before {} {:?}",
                        retry,
                        least,
                        pols
                    );
                }
                if counts && !share && self.delays() {
                    // Rejected at once only when the whole cost fits too
                    // late under some limit, or never.
                    let waited = since.map_or(0, |s| now - s);
                    let late = (0..self.lims.len()).any(|m| {
                        match self.turn(m, client, now, pols[m], ahead) {
                            None => true,
                            Some(t) => {
                                let w = if m == n { t.max(1) } else { t };
                                w > 0 && waited + w > self.lims[m].delay_ms
                            }
                        }
                    });
                    prop_assert!(late, "rejected though it fits within delay: {:?}", pols);
                }
            }
            (Verdict::Hold(h) | Verdict::WouldHold(h), Some(n)) => {
                prop_assert!(!by_flight, "held for its places");
                prop_assert_eq!(h.index, n);
                prop_assert!(matches!(pols[n], Pol::Count { .. }), "held {:?}", pols[n]);
                prop_assert_eq!(matches!(v, Verdict::WouldHold(_)), dry_run);
                let waited = since.map_or(0, |s| now - s);
                let ahead = self.ahead(client, n, since);
                // The first ms its whole cost fits under every limit (after
                // the turns of its client's requests held before it, by
                // every worker).
                let turns: Vec<Option<u64>> = (0..self.lims.len())
                    .map(|m| self.turn(m, client, now, pols[m], ahead))
                    .collect();
                prop_assert!(
                    turns.iter().all(Option::is_some),
                    "held, never fits {:?}",
                    pols
                );
                let turns: Vec<u64> = turns.into_iter().flatten().collect();
                let first = turns.iter().copied().max().unwrap().max(1);
                prop_assert_eq!(h.wait_ms, first, "{:?}", turns);
                prop_assert_eq!(h.turn, since.is_none() && !dry_run, "a turn taken once");
                for (m, (&t, l)) in turns.iter().zip(&self.lims).enumerate() {
                    let w = if m == n { t.max(1) } else { t };
                    prop_assert!(w == 0 || waited + w <= l.delay_ms);
                }
                if !dry_run {
                    prop_assert_eq!(holds, 1);
                    let turn = q.turn.unwrap_or((n, q.shard));
                    held_again = Some(Held {
                        at: now + h.wait_ms,
                        since: since.unwrap_or(now),
                        q: Asked {
                            turn: Some(turn),
                            ..q.clone()
                        },
                    });
                }
            }
            (v, over) => {
                prop_assert!(
                    false,
                    "engine {:?}, model's first limit over {:?} {:?}",
                    v,
                    over,
                    pols
                )
            }
        }
        // A woken request decided for good gives its turn back (the host).
        if let (Some((zone, shard)), None) = (q.turn, &held_again) {
            self.zones[zone]
                .turns
                .give(shard, self.zones[zone].keys[client].0);
        }
        self.held.extend(held_again);
        self.check_turns()?;
        self.check_places()?;
        self.check_counts(now)
    }
}
