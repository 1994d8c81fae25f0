//! One request decided by the engine and checked against the models:
//! the first limit over (by its rate, its places, an override, an invalid
//! value), the invalid values reported and counted, what is counted, the
//! places taken, Retry-After, bans and holds.

use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;

use super::{Asked, Flying, Held, Pol, Req, Run, Zm};
use crate::engine::{decide, Ask, Cost, Hold, Invalid, LimitRead, Rejection, Verdict, Woken};
use crate::overrides::{Action, Entry};
use crate::shm::Place;
use crate::table::Answer;

/// One request as decided: what it asked, when, and what the engine
/// answered and the host recorded.
struct Case {
    q: Asked,
    since: Option<u64>,
    now: u64,
    v: Verdict,
    records: Vec<(usize, Answer)>,
    took: Vec<(usize, Place)>,
    holds: u32,
    invalid: Vec<(usize, Invalid)>,
    unheld: Vec<Woken>,
    /// Each zone's count of invalid values before the decision.
    invalid_before: Vec<u64>,
}

/// What the models make of it: each limit's policy, the first limit over
/// (by its places: `by_flight`), and the lines that take a place.
struct Expect {
    pols: Vec<Pol>,
    first_over: Option<usize>,
    by_flight: bool,
    placed: Vec<usize>,
}

impl Run {
    /// Decides one request at `self.now` and checks it against the models.
    pub(super) fn request(&mut self, q: Asked, since: Option<u64>) -> Result<(), TestCaseError> {
        let c = self.decide_one(q, since);
        let e = self.expect(&c);
        self.check_invalid(&c, &e)?;
        let held_again = match (c.v, e.first_over) {
            (Verdict::Admit | Verdict::Exempt, None) => {
                self.check_admitted(&c, &e)?;
                None
            }
            (Verdict::Reject(rej), Some(n)) => {
                self.check_rejected(&c, &e, &rej, n)?;
                None
            }
            (Verdict::Hold(h) | Verdict::WouldHold(h), Some(n)) => {
                self.check_held(&c, &e, &h, n)?
            }
            (v, over) => {
                prop_assert!(
                    false,
                    "engine {:?}, model's first limit over {:?} {:?}",
                    v,
                    over,
                    e.pols
                );
                None
            }
        };
        // A woken request decided for good has the host end its hold, once,
        // as its verdict says; one held again, or never held, none.
        let ends = match (c.since, &held_again, c.v) {
            (Some(_), None, Verdict::Admit) => vec![Woken::Admitted],
            (Some(_), None, Verdict::Exempt) => vec![Woken::Exempt],
            (Some(_), None, _) => vec![Woken::Rejected],
            _ => vec![],
        };
        prop_assert_eq!(&c.unheld, &ends, "the hold ended");
        // A woken request decided for good gives its turn back (the host).
        if let (Some((zone, _, turn)), None) = (c.q.turn, &held_again) {
            self.zones[zone].turns.give(turn);
        }
        self.held.extend(held_again);
        self.check_turns()?;
        self.check_places()?;
        self.check_counts(c.now)
    }

    /// The engine's decision of `q` at `self.now`, and what the host saw.
    fn decide_one(&mut self, q: Asked, since: Option<u64>) -> Case {
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
            unheld: vec![],
        };
        let ask = Ask {
            now_ms: now,
            shard: q.shard,
            dry_run,
            holdable: true,
            woken: since.is_some(),
        };
        let invalid_before: Vec<u64> = self
            .zones
            .iter()
            .map(|z| z.invalid.count.load(Relaxed))
            .collect();
        let v = decide(&mut r, &ask).unwrap();
        let (records, holds, invalid) = (r.records.clone(), r.holds, r.invalid.clone());
        let unheld = r.unheld.clone();
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
        Case {
            q,
            since,
            now,
            v,
            records,
            took,
            holds,
            invalid,
            unheld,
            invalid_before,
        }
    }

    /// The models' policies for the request, and the first limit over.
    fn expect(&self, c: &Case) -> Expect {
        let (q, now) = (&c.q, c.now);
        let pols: Vec<Pol> = (0..self.lims.len())
            .map(|n| self.pol(n, q.client, q.values[n], q.costs[n], now))
            .collect();
        // The first limit over, by its rate or (`by_flight`) its places.
        let mut first_over = None;
        let mut by_flight = false;
        let mut placed = vec![];
        for (n, &p) in pols.iter().enumerate() {
            let over = match p {
                Pol::Off | Pol::Places => false,
                Pol::Blocked { .. } | Pol::Closed => true,
                Pol::Count { limit, cost } => !self.fits(n, q.client, now, limit, cost),
            };
            if over {
                first_over = Some(n);
                break;
            }
            let (full, place) = self.in_flight_over(n, q, p);
            if full {
                (first_over, by_flight) = (Some(n), true);
                break;
            }
            if place {
                placed.push(n);
            }
        }
        Expect {
            pols,
            first_over,
            by_flight,
            placed,
        }
    }

    /// Every invalid value judged before the decision stopped is reported
    /// once; the quiet reads (waits, Retry-After) report none.
    fn check_invalid(&mut self, c: &Case, e: &Expect) -> Result<(), TestCaseError> {
        let (q, now) = (&c.q, c.now);
        let judged = e.first_over.map_or(self.lims.len(), |n| n + 1);
        let reaches_in_flight = |n: usize| {
            let p = e.pols[n];
            let rate_fits = match p {
                Pol::Count { limit, cost } => self.fits(n, q.client, now, limit, cost),
                Pol::Places => true,
                _ => false,
            };
            let read = self.places_read(n, q, now);
            rate_fits && self.zones[n].in_flight.is_some() && read == LimitRead::Invalid
        };
        // A line may report two: its cost (charged under fail=open) and
        // its in-flight value.
        let expect: Vec<usize> = (0..judged)
            .flat_map(|n| {
                let rate = self.reports_invalid(n, q, now);
                let flight = reaches_in_flight(n);
                [rate.then_some(n), flight.then_some(n)]
            })
            .flatten()
            .collect();
        // Every one counted; only the first of a zone's episode logged.
        let mut last = self.last_invalid.clone();
        let logged: Vec<usize> = expect
            .iter()
            .copied()
            .filter(|&n| {
                let first = last[n].is_none_or(|t| now.saturating_sub(t) > 60_000);
                last[n] = Some(last[n].map_or(now, |t| t.max(now)));
                first
            })
            .collect();
        self.last_invalid = last;
        let got: Vec<usize> = c.invalid.iter().map(|&(n, _)| n).collect();
        prop_assert_eq!(&got, &logged, "invalid values logged");
        for (n, z) in self.zones.iter().enumerate() {
            let counted = z.invalid.count.load(Relaxed) - c.invalid_before[n];
            let want = expect.iter().filter(|&&m| m == n).count() as u64;
            prop_assert_eq!(counted, want, "invalid values counted in zone {}", n);
        }
        Ok(())
    }

    /// Admitted (or exempt): counted by every limit that counts it, where
    /// the model counts it, and a place taken per line whose places apply.
    fn check_admitted(&mut self, c: &Case, e: &Expect) -> Result<(), TestCaseError> {
        let client = c.q.client;
        let counted = e
            .pols
            .iter()
            .filter(|p| matches!(p, Pol::Count { .. }))
            .count();
        prop_assert_eq!(
            matches!(c.v, Verdict::Admit),
            counted > 0 || !e.placed.is_empty()
        );
        prop_assert_eq!(c.records.len(), counted);
        // One place per line whose in-flight value applies, kept until the
        // request ends.
        let lines: Vec<usize> = c.took.iter().map(|&(n, _)| n).collect();
        prop_assert_eq!(&lines, &e.placed, "places taken");
        if !c.took.is_empty() {
            self.flying.push(Flying {
                client,
                shard: c.q.shard,
                places: c.took.clone(),
            });
        }
        let mut kept = vec![];
        for &(n, d) in &c.records {
            let Pol::Count { cost, .. } = e.pols[n] else {
                return Err(TestCaseError::fail("recorded a limit that does not count"));
            };
            let a = d.admission.unwrap();
            let at = self.zones[n].model.add(client as u64, c.now, cost);
            prop_assert_eq!(a.window_index(), at, "counted where the model counts");
            prop_assert_eq!(a.cost(), cost);
            kept.push((n, client, at, cost, a));
        }
        self.kept.push(kept);
        Ok(())
    }

    /// Rejected by limit `n`, the first over: why, its share of the queue,
    /// its Retry-After and ban, and that no hold would have fitted.
    fn check_rejected(
        &mut self,
        c: &Case,
        e: &Expect,
        rej: &Rejection,
        n: usize,
    ) -> Result<(), TestCaseError> {
        let (q, client, now) = (&c.q, c.q.client, c.now);
        prop_assert_eq!(rej.index, n, "the first limit over");
        prop_assert_eq!(rej.dry_run, q.dry_run);
        prop_assert_eq!(rej.unheld, c.since.is_some());
        prop_assert_eq!(rej.overridden, matches!(e.pols[n], Pol::Blocked { .. }));
        prop_assert_eq!(rej.in_flight, e.by_flight, "refused for its places");
        let read = self.places_read(n, q, now);
        let invalid_flight = e.by_flight && read == LimitRead::Invalid;
        prop_assert_eq!(rej.invalid, e.pols[n] == Pol::Closed || invalid_flight);
        if let (true, LimitRead::Set(k)) = (e.by_flight, read) {
            prop_assert_eq!(
                (rej.limit, rej.decision.estimate),
                (k, self.flying(n, client))
            );
        }
        let counts = matches!(e.pols[n], Pol::Count { .. }) && !e.by_flight;
        let ahead = self.ahead(client, n, c.since);
        let share = rej.share_full.is_some();
        prop_assert_eq!(
            share,
            c.since.is_none() && ahead > 0 && !q.dry_run && self.delays() && counts
        );
        self.check_retry(c, e, rej, (n, counts))?;
        if counts && !share && self.delays() {
            self.check_late(c, e, n, ahead)?;
        }
        Ok(())
    }

    /// Retry-After: the whole cost fits under every limit then, not before
    /// an override's end; a ban never shortens it (the model records it).
    fn check_retry(
        &mut self,
        c: &Case,
        e: &Expect,
        rej: &Rejection,
        (n, counts): (usize, bool),
    ) -> Result<(), TestCaseError> {
        let (q, client, now) = (&c.q, c.q.client, c.now);
        let parts: Vec<Option<u64>> = (n..self.lims.len())
            .map(|m| self.retry_secs(m, client, now, q, e.pols[m]))
            .collect();
        let mut least = parts.iter().flatten().copied().max().unwrap_or(0);
        if e.by_flight {
            // A place frees when a request ends: a second at least.
            least = least.max(1);
        }
        if rej.share_full.is_some() {
            // Refused for its share: its turn, behind its held requests.
            let ahead = self.ahead(client, n, c.since);
            let turn = (0..self.lims.len())
                .filter_map(|m| {
                    let t = self.turn(m, client, now, e.pols[m], ahead)?;
                    Some(if m == n { t.max(1) } else { t })
                })
                .max()
                .unwrap_or(0);
            least = least.max(turn.div_ceil(1000));
        }
        let exact = parts.iter().all(Option::is_some);
        let live = self.ovr[n].get(&client).filter(|e| !e.expired(now));
        // Only a refusal by the count bans: a valid cost that fits the limit
        // in force (one above it never fits, whatever the count).
        let fits_limit = matches!(e.pols[n], Pol::Count { limit, cost } if cost <= limit);
        let bans = counts
            && fits_limit
            && q.costs[n] != Cost::Invalid
            && !q.dry_run
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
            prop_assert_eq!(retry, least, "Retry-After {:?}", e.pols);
        } else {
            prop_assert!(
                retry >= least,
                "Retry-After {} before {} {:?}",
                retry,
                least,
                e.pols
            );
        }
        Ok(())
    }

    /// Rejected at once (limit `n` first over, behind `ahead` of its
    /// client's held requests) only when the whole cost fits too late
    /// under some limit, or never.
    fn check_late(&self, c: &Case, e: &Expect, n: usize, ahead: u32) -> Result<(), TestCaseError> {
        let (client, now) = (c.q.client, c.now);
        let waited = c.since.map_or(0, |s| now - s);
        let late =
            (0..self.lims.len()).any(|m| match self.turn(m, client, now, e.pols[m], ahead) {
                None => true,
                Some(t) => {
                    let w = if m == n { t.max(1) } else { t };
                    w > 0 && waited + w > self.lims[m].delay_ms
                }
            });
        prop_assert!(late, "rejected though it fits within delay: {:?}", e.pols);
        Ok(())
    }

    /// Held (or, in a dry run, would be) by limit `n`: until the first ms
    /// its whole cost fits under every limit, within every `delay=`; the
    /// request to wake then, if it is held.
    fn check_held(
        &self,
        c: &Case,
        e: &Expect,
        h: &Hold,
        n: usize,
    ) -> Result<Option<Held>, TestCaseError> {
        let (q, client, now, dry_run) = (&c.q, c.q.client, c.now, c.q.dry_run);
        prop_assert!(!e.by_flight, "held for its places");
        prop_assert_eq!(h.index, n);
        prop_assert!(
            matches!(e.pols[n], Pol::Count { .. }),
            "held {:?}",
            e.pols[n]
        );
        prop_assert_eq!(matches!(c.v, Verdict::WouldHold(_)), dry_run);
        let waited = c.since.map_or(0, |s| now - s);
        let ahead = self.ahead(client, n, c.since);
        // The first ms its whole cost fits under every limit (after the
        // turns of its client's requests held before it, by every worker).
        let turns: Vec<Option<u64>> = (0..self.lims.len())
            .map(|m| self.turn(m, client, now, e.pols[m], ahead))
            .collect();
        prop_assert!(
            turns.iter().all(Option::is_some),
            "held, never fits {:?}",
            e.pols
        );
        let turns: Vec<u64> = turns.into_iter().flatten().collect();
        let first = turns.iter().copied().max().unwrap().max(1);
        prop_assert_eq!(h.wait_ms, first, "{:?}", turns);
        prop_assert_eq!(
            h.turn.is_some(),
            c.since.is_none() && !dry_run,
            "a turn taken once"
        );
        for (m, (&t, l)) in turns.iter().zip(&self.lims).enumerate() {
            let w = if m == n { t.max(1) } else { t };
            prop_assert!(w == 0 || waited + w <= l.delay_ms);
        }
        if dry_run {
            return Ok(None);
        }
        prop_assert_eq!(c.holds, 1);
        let turn = match (q.turn, h.turn) {
            (Some(t), _) => t,
            (None, Some(t)) => (n, q.shard, t),
            (None, None) => return Err(TestCaseError::fail("held without a turn")),
        };
        Ok(Some(Held {
            at: now + h.wait_ms,
            since: c.since.unwrap_or(now),
            q: Asked {
                turn: Some(turn),
                ..q.clone()
            },
        }))
    }
}
