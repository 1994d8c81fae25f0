//! What the models say: each zone's model ([`Zm`]: the reference models
//! of `crate::testing::reference`), the policy a limit applies to a
//! request ([`Pol`]), its waits and Retry-After, and the counts every
//! table must hold.

use proptest::prelude::*;

use super::{Asked, Run};
use crate::engine::{Cost, LimitRead};
use crate::overrides::Action;
use crate::table::FailPolicy;
use crate::testing::calendar::CalendarModel;
use crate::testing::reference::{Model, StrictLog};

/// A zone's model.
#[derive(Clone)]
pub(super) enum Zm {
    Estimate(Model),
    Strict(StrictLog),
    /// A calendar zone (`calendar=`, `tz=`).
    Calendar(CalendarModel),
}

impl Zm {
    fn fits(&self, key: u64, now: u64, limit: u32, cost: u32) -> bool {
        match self {
            Zm::Estimate(m) => m.fits(key, now, limit, cost),
            Zm::Strict(m) => m.fits(key, now, limit, cost),
            Zm::Calendar(m) => limit > 0 && m.fits(key, now, limit, cost),
        }
    }
    pub(super) fn add(&mut self, key: u64, now: u64, cost: u32) -> u64 {
        match self {
            Zm::Estimate(m) => m.add(key, now, cost),
            Zm::Strict(m) => m.add(key, now, cost),
            Zm::Calendar(m) => m.add(key, now, cost),
        }
    }
    pub(super) fn give_back(&mut self, key: u64, at: u64, cost: u32, count: u32) {
        match self {
            Zm::Estimate(m) => m.settle(key, at, cost, count),
            Zm::Strict(m) => m.undo(key, at, cost),
            Zm::Calendar(m) => m.settle(key, at, cost, count),
        }
    }
    /// First ms from `now` at which `cost` fits with no other traffic
    /// (monotone: counts only leave); None: never (a limit of 0, a cost
    /// above the limit).
    fn wait(&self, key: u64, now: u64, w: u64, limit: u32, cost: u32) -> Option<u64> {
        if limit == 0 || cost > limit {
            return None;
        }
        if let Zm::Calendar(m) = self {
            return m.wait(key, now, limit, cost);
        }
        let (mut lo, mut hi) = (0, 4 * w);
        assert!(self.fits(key, now + hi, limit, cost));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.fits(key, now + mid, limit, cost) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }
}

/// What one limit makes of a request, by the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Pol {
    /// Does not apply (an empty key or limit, an exempt override, an
    /// invalid value under fail=open).
    Off,
    /// An override blocks or bans the client until then (0: no end).
    Blocked { until: u64 },
    /// An invalid value under fail=closed: judged against 0.
    Closed,
    /// Counted against the limit in force.
    Count { limit: u32, cost: u32 },
    /// A line without a rate: only its in-flight place.
    Places,
}

impl Run {
    /// Limit `n`'s policy for `client` at `now`, by the model.
    pub(super) fn pol(
        &self,
        n: usize,
        client: usize,
        value: LimitRead,
        cost: Cost,
        now: u64,
    ) -> Pol {
        let closed = self.zones[n].fail == FailPolicy::Closed;
        let live = self.ovr[n].get(&client).filter(|e| !e.expired(now));
        if !self.zones[n].rate {
            return match live.map(|e| e.action) {
                Some(Action::Block | Action::Ban) => Pol::Blocked {
                    until: live.unwrap().expires_ms,
                },
                Some(Action::Exempt) => Pol::Off,
                _ => Pol::Places,
            };
        }
        let live = self.rate_override(n, client, now);
        let limit = match (live.map(|e| e.action), value) {
            (Some(Action::Block | Action::Ban), _) => {
                return Pol::Blocked {
                    until: live.unwrap().expires_ms,
                }
            }
            (Some(Action::Exempt), _) => return Pol::Off,
            (Some(Action::Limit(l)), _) | (None, LimitRead::Set(l)) => l,
            (Some(Action::InFlight(_)), _) => unreachable!("not a rate's"),
            (None, LimitRead::Empty) => return Pol::Off,
            (None, LimitRead::Invalid) if closed => return Pol::Closed,
            (None, LimitRead::Invalid) => return Pol::Off,
        };
        match cost {
            // `redis_outage=`: the share of the limit, or refused as closed.
            Cost::Count(cost) => match self.zones[n].outage.limit(limit) {
                Some(limit) => Pol::Count { limit, cost },
                None => Pol::Closed,
            },
            Cost::Invalid if closed => Pol::Closed,
            // Never a way past the limit: it costs the whole limit in
            // force (during an outage, the share; `closed` refuses).
            Cost::Invalid => match self.zones[n].outage.limit(limit) {
                Some(limit) => Pol::Count {
                    limit,
                    cost: limit.max(1),
                },
                None => Pol::Closed,
            },
        }
    }

    pub(super) fn fits(&self, n: usize, client: usize, at: u64, limit: u32, cost: u32) -> bool {
        self.zones[n].model.fits(client as u64, at, limit, cost)
    }

    /// Limit `n`'s wait from `now` until the turn of a request of `cost`
    /// behind `ahead` of its client's (each of the same cost, admitted at
    /// the first ms it fits), with no other traffic; None: never.
    pub(super) fn turn(
        &self,
        n: usize,
        client: usize,
        now: u64,
        p: Pol,
        ahead: u32,
    ) -> Option<u64> {
        let Pol::Count { limit, cost } = p else {
            return matches!(p, Pol::Off | Pol::Places).then_some(0);
        };
        let z = &self.zones[n];
        let key = client as u64;
        let mut m = z.model.clone();
        let mut t = now;
        for _ in 0..ahead {
            t += m.wait(key, t, z.w, limit, cost)?;
            m.add(key, t, cost);
        }
        Some(t + m.wait(key, t, z.w, limit, cost)? - now)
    }

    /// Limit `n`'s Retry-After (whole seconds) for `client` at `now`, as
    /// the one rule gives it: the count's wait, an override's end and
    /// never before its count's. None: the request never fits, and the
    /// table answers with its stand-in (a window, or a strict zone's).
    pub(super) fn retry_secs(
        &self,
        n: usize,
        client: usize,
        now: u64,
        q: &Asked,
        p: Pol,
    ) -> Option<u64> {
        // A block without an end is told a window (a calendar's nominal
        // period).
        let w = self.zones[n].table.window().secs() * 1000;
        let count = |limit, cost| {
            self.turn(n, client, now, Pol::Count { limit, cost }, 0)
                .map(|t| t.div_ceil(1000))
        };
        match p {
            Pol::Off | Pol::Places => Some(0),
            Pol::Closed => None,
            Pol::Count { limit, cost } => count(limit, cost),
            Pol::Blocked { until } => {
                let end = match until {
                    0 => (w / 1000).max(1),
                    u => (u - now).div_ceil(1000).max(1),
                };
                let k = match (q.costs[n], q.values[n]) {
                    (Cost::Count(k), _) => k,
                    (Cost::Invalid, LimitRead::Set(l)) => l.max(1),
                    (Cost::Invalid, _) => 1,
                };
                match q.values[n] {
                    LimitRead::Set(l) => count(l, k).map(|c| end.max(c)),
                    _ => Some(end),
                }
            }
        }
    }

    /// Whether the engine reports limit `n`'s value or cost invalid when it
    /// judges it (an override decides before the values are read).
    pub(super) fn reports_invalid(&self, n: usize, q: &Asked, now: u64) -> bool {
        let live = self.rate_override(n, q.client, now);
        match (live.map(|e| e.action), q.values[n]) {
            (Some(Action::Block | Action::Ban | Action::Exempt), _) => false,
            (None, LimitRead::Empty) => false,
            (None, LimitRead::Invalid) => true,
            _ => q.costs[n] == Cost::Invalid,
        }
    }

    /// The earliest time a step back may reach from `self.now`: within
    /// every zone's newest window, and not back over an override's end
    /// (an ended override may have been reaped: it does not come back).
    pub(super) fn floor(&self) -> u64 {
        let t = self.now;
        let ended = self.ovr.iter().flat_map(|m| m.values());
        let ended = ended.map(|e| e.expires_ms).filter(|&x| x != 0 && x <= t);
        self.zones
            .iter()
            .map(|z| match z.model {
                Zm::Estimate(_) => t / z.w * z.w,
                Zm::Strict(_) => {
                    crate::rule::strict::sub_start(crate::rule::strict::sub_index(t, z.w), z.w)
                }
                Zm::Calendar(ref m) => m.period_at(t).start_ms,
            })
            .chain(ended)
            .max()
            .unwrap_or(t)
    }

    /// Every client's counts in every table equal the model's: nothing
    /// counted by a rejected, held or dry-run request.
    pub(super) fn check_counts(&self, now: u64) -> Result<(), TestCaseError> {
        for z in &self.zones {
            for (c, &h) in z.keys.iter().enumerate() {
                let snap = z.table.peek(h, now);
                match (&z.model, snap.strict) {
                    // (A peek behind the key's window reads it another way.)
                    (Zm::Estimate(m), None)
                        if m.view(c as u64, now).3 || snap.window_index != now / z.w => {}
                    (Zm::Estimate(m), None) => {
                        let mc = m.counts(c as u64, now);
                        prop_assert_eq!(
                            (snap.current, snap.previous),
                            (mc.current, mc.previous),
                            "{:?} {:?} now {} idx {}",
                            snap,
                            m.entry(c as u64),
                            now,
                            now / z.w
                        );
                    }
                    (Zm::Strict(m), Some(s)) => {
                        let j = crate::rule::strict::sub_index(now, z.w).max(s.index);
                        prop_assert_eq!(s.at(j).total(), m.total(c as u64, now));
                    }
                    (Zm::Calendar(m), None) => {
                        // The odd windows between periods are never counted.
                        prop_assert_eq!(snap.previous, 0);
                        if snap.window_index == z.table.window().index(now) {
                            prop_assert_eq!(snap.current, m.count(c as u64, now));
                        }
                    }
                    _ => prop_assert!(false, "mode"),
                }
            }
        }
        Ok(())
    }
}
