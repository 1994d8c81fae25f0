//! The engine against the reference models: random sequences of requests
//! over several limits (estimate and strict zones, costs, `delay=`, dry
//! run, count_status give-backs, clock steps forward and small steps back).

use proptest::prelude::*;

use super::*;
use crate::rule::mode::Mode;
use crate::rule::window::Window;
use crate::testing::reference::{Model, StrictLog};
use crate::testing::Region;

const T0: u64 = 1_767_225_600_000;

/// A table over a leaked region (a test's tables live for the process).
fn table(window_ms: u64, strict: bool) -> Table<'static> {
    let bytes = Table::HEADER_BYTES + 1024 * crate::SLOT_BYTES;
    let buf = Box::leak(Box::new(Region::new(bytes)));
    let mode = if strict { Mode::Strict } else { Mode::Estimate };
    let w = Window::from_ms(window_ms).unwrap();
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Table::init_mode(buf.ptr(), buf.len(), w, [7, 9], mode) }.unwrap()
}

/// A zone's model.
#[derive(Clone)]
enum Zm {
    Estimate(Model),
    Strict(StrictLog),
}

impl Zm {
    fn fits(&self, key: u64, now: u64, limit: u32, cost: u32) -> bool {
        match self {
            Zm::Estimate(m) => m.fits(key, now, limit, cost),
            Zm::Strict(m) => m.fits(key, now, limit, cost),
        }
    }
    fn add(&mut self, key: u64, now: u64, cost: u32) -> u64 {
        match self {
            Zm::Estimate(m) => m.add(key, now, cost),
            Zm::Strict(m) => m.add(key, now, cost),
        }
    }
    fn give_back(&mut self, key: u64, at: u64, cost: u32, count: u32) {
        match self {
            Zm::Estimate(m) => m.settle(key, at, cost, count),
            Zm::Strict(m) => m.undo(key, at, cost),
        }
    }
    /// First ms from `now` at which `cost` fits with no other traffic
    /// (monotone: counts only leave).
    fn wait(&self, key: u64, now: u64, w: u64, limit: u32, cost: u32) -> u64 {
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
        lo
    }
}

/// One zone: its table, its model, its clients' hashes.
struct Zone {
    table: Table<'static>,
    model: Zm,
    w: u64,
    keys: Vec<KeyHash>,
}

#[derive(Clone, Copy, Debug)]
struct Lim {
    limit: u32,
    delay_ms: u64,
}

/// The test's glue.
struct Req<'a> {
    zones: &'a [Zone],
    lims: &'a [Lim],
    client: usize,
    costs: &'a [u32],
    records: Vec<(usize, Answer)>,
    since: Option<u64>,
    held_by: u32,
    holds: u32,
}

impl<'a> Request<'a> for Req<'a> {
    fn limits(&self) -> usize {
        self.lims.len()
    }
    fn conf(&self, n: usize) -> Option<LimitConf<'a>> {
        Some(LimitConf {
            table: &self.zones[n].table,
            overrides: None,
            fail: FailPolicy::Open,
            delay_ms: self.lims[n].delay_ms,
            ban_ms: 0,
        })
    }
    fn key(&mut self, n: usize) -> Result<Key, HostError> {
        Ok(Key::Limit {
            hash: self.zones[n].keys[self.client],
            limit: self.lims[n].limit,
            invalid: false,
        })
    }
    fn cost(&mut self, n: usize, _limit: u32) -> Result<Cost, HostError> {
        Ok(Cost::Count(self.costs[n]))
    }
    fn quiet_cost(&mut self, n: usize, _limit: u32) -> u32 {
        self.costs[n]
    }
    fn record(&mut self, n: usize, _limit: u32, d: &Answer, _now: u64) {
        self.records.push((n, *d));
    }
    fn skipped(&mut self, _n: usize, _why: Skip) {
        unreachable!("every limit applies in these tests");
    }
    fn admissions(&self, mut f: impl FnMut(&'a Table<'a>, &Admission)) {
        for (n, d) in &self.records {
            if let Some(a) = &d.admission {
                f(&self.zones[*n].table, a);
            }
        }
    }
    fn fresh_now(&mut self) -> u64 {
        0
    }
    fn held_since(&self) -> Option<u64> {
        self.since
    }
    fn held_by(&self, _client: u64) -> u32 {
        self.held_by
    }
    fn hold(&mut self, _h: &Hold, _now_ms: u64) -> bool {
        self.holds += 1;
        true
    }
}

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    /// A request of `client` after a clock step of `dt` ms, with a cost per
    /// limit (in tenths of its limit) and a dry run flag.
    Request {
        dt: i64,
        client: usize,
        cost: [u32; 3],
        dry_run: bool,
    },
    /// The oldest admission still kept is settled (count_status= / charge=):
    /// counted `keep` tenths of its cost (0: given back).
    Settle { keep: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![4 => 0i64..1_500, 1 => -200i64..0, 1 => 0i64..8_000], 0usize..3,
              any::<[u32; 3]>(), prop::bool::weighted(0.15))
            .prop_map(|(dt, client, cost, dry_run)| Op::Request { dt, client, cost, dry_run }),
        1 => (0u32..11).prop_map(|keep| Op::Settle { keep }),
    ]
}

/// A held request waiting for its wake.
struct Held {
    at: u64,
    since: u64,
    client: usize,
    costs: Vec<u32>,
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
    now: u64,
}

impl Run {
    fn fits(&self, n: usize, client: usize, at: u64, cost: u32) -> bool {
        self.zones[n]
            .model
            .fits(client as u64, at, self.lims[n].limit, cost)
    }

    /// Limit `n`'s wait from `now` until the turn of a request of `cost`
    /// behind `ahead` of its client's (each of the same cost, admitted at
    /// the first ms it fits), with no other traffic.
    fn turn(&self, n: usize, client: usize, now: u64, cost: u32, ahead: u32) -> u64 {
        let z = &self.zones[n];
        let (key, limit) = (client as u64, self.lims[n].limit);
        let mut m = z.model.clone();
        let mut t = now;
        for _ in 0..ahead {
            t += m.wait(key, t, z.w, limit, cost);
            m.add(key, t, cost);
        }
        t + m.wait(key, t, z.w, limit, cost) - now
    }

    /// Decides one request at `self.now` and checks it against the models.
    fn request(
        &mut self,
        client: usize,
        costs: &[u32],
        dry_run: bool,
        since: Option<u64>,
    ) -> Result<(), TestCaseError> {
        let now = self.now;
        let held_by = self.held.iter().filter(|h| h.client == client).count() as u32;
        let mut r = Req {
            zones: &self.zones,
            lims: &self.lims,
            client,
            costs,
            records: vec![],
            since,
            held_by,
            holds: 0,
        };
        let ask = Ask {
            now_ms: now,
            shard: 0,
            dry_run,
            holdable: true,
        };
        let v = decide(&mut r, &ask).unwrap();
        let (records, holds) = (r.records.clone(), r.holds);
        if std::env::var("ENGINE_TRACE").is_ok() {
            eprintln!(
                "t={} client={client} costs={costs:?} dry={dry_run} -> {v:?}",
                now % 100_000
            );
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
        let first_over = (0..self.lims.len()).find(|&n| !self.fits(n, client, now, costs[n]));
        let waits: Vec<u64> = (0..self.lims.len())
            .map(|n| self.turn(n, client, now, costs[n], 0))
            .collect();
        // The turns behind the client's held requests (a request held
        // again has waited longest: none ahead).
        let ahead = if since.is_none() { held_by } else { 0 };
        let turns: Vec<u64> = (0..self.lims.len())
            .map(|n| self.turn(n, client, now, costs[n], ahead))
            .collect();
        match (v, first_over) {
            (Verdict::Admit, None) => {
                prop_assert_eq!(records.len(), self.lims.len());
                let mut kept = vec![];
                for (n, d) in records {
                    let a = d.admission.unwrap();
                    let at = self.zones[n].model.add(client as u64, now, costs[n]);
                    prop_assert_eq!(a.window_index(), at, "counted where the model counts");
                    prop_assert_eq!(a.cost(), costs[n]);
                    kept.push((n, client, at, costs[n], a));
                }
                self.kept.push(kept);
            }
            (Verdict::Reject(rej), Some(n)) => {
                prop_assert_eq!(rej.index, n, "the first limit over");
                prop_assert_eq!(rej.dry_run, dry_run);
                prop_assert_eq!(rej.unheld, since.is_some());
                prop_assert_eq!(records.len(), n + 1);
                // Retry-After: the whole cost fits under every limit then.
                // (An estimate zone's Retry-After counts from the key's
                // window when the clock is behind it, as the table's.)
                let longest = waits.iter().copied().max().unwrap();
                if !self.behind(client, now) {
                    prop_assert_eq!(u64::from(rej.retry_after_s), longest.div_ceil(1_000));
                }
                let share = rej.share_full.is_some();
                prop_assert_eq!(
                    share,
                    since.is_none() && held_by > 0 && !dry_run && self.delays()
                );
                if !share && self.delays() {
                    // Rejected at once only when the whole cost fits too late.
                    let waited = since.map_or(0, |s| now - s);
                    let late = (0..self.lims.len()).any(|m| {
                        let w = if m == n { turns[m].max(1) } else { turns[m] };
                        w > 0 && waited + w > self.lims[m].delay_ms
                    });
                    prop_assert!(
                        late,
                        "rejected though it fits within delay: {:?} dry {} held_by {} since {:?}",
                        waits,
                        dry_run,
                        held_by,
                        since
                    );
                }
            }
            (Verdict::Hold(h) | Verdict::WouldHold(h), Some(n)) => {
                prop_assert_eq!(h.index, n);
                prop_assert_eq!(matches!(v, Verdict::WouldHold(_)), dry_run);
                let waited = since.map_or(0, |s| now - s);
                // The first ms its whole cost fits under every limit (after
                // the turns of its client's requests held before it).
                let first = turns.iter().copied().max().unwrap().max(1);
                prop_assert_eq!(h.wait_ms, first, "{:?}", turns);
                for (m, (&t, l)) in turns.iter().zip(&self.lims).enumerate() {
                    let w = if m == n { t.max(1) } else { t };
                    prop_assert!(w == 0 || waited + w <= l.delay_ms);
                }
                if !dry_run {
                    prop_assert_eq!(holds, 1);
                    self.held.push(Held {
                        at: now + h.wait_ms,
                        since: since.unwrap_or(now),
                        client,
                        costs: costs.to_vec(),
                    });
                }
            }
            (v, over) => prop_assert!(false, "engine {:?}, model's first limit over {:?}", v, over),
        }
        self.check_counts(now)
    }

    /// Whether the clock is behind some estimate zone's window of `client`.
    fn behind(&self, client: usize, now: u64) -> bool {
        self.zones.iter().any(|z| match &z.model {
            Zm::Estimate(m) => m.view(client as u64, now).3,
            Zm::Strict(_) => false,
        })
    }

    /// The earliest time a step back may reach from `self.now`.
    fn floor(&self) -> u64 {
        let t = self.now;
        self.zones
            .iter()
            .map(|z| match z.model {
                Zm::Estimate(_) => t / z.w * z.w,
                Zm::Strict(_) => {
                    crate::rule::strict::sub_start(crate::rule::strict::sub_index(t, z.w), z.w)
                }
            })
            .max()
            .unwrap_or(t)
    }

    fn delays(&self) -> bool {
        self.lims.iter().any(|l| l.delay_ms > 0)
    }

    /// Every client's counts in every table equal the model's: nothing
    /// counted by a rejected, held or dry-run request.
    fn check_counts(&self, now: u64) -> Result<(), TestCaseError> {
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
                    _ => prop_assert!(false, "mode"),
                }
            }
        }
        Ok(())
    }

    /// Wakes the held requests due by `until`, in order, each decided
    /// again at its time.
    fn wake_until(&mut self, until: u64) -> Result<(), TestCaseError> {
        loop {
            let due = self
                .held
                .iter()
                .enumerate()
                .filter(|(_, h)| h.at <= until)
                .min_by_key(|(_, h)| h.at)
                .map(|(i, _)| i);
            let Some(i) = due else { return Ok(()) };
            let h = self.held.remove(i);
            self.now = self.now.max(h.at);
            self.request(h.client, &h.costs, false, Some(h.since))?;
        }
    }

    fn settle(&mut self, keep: u32) {
        if self.kept.is_empty() {
            return;
        }
        for (n, client, at, cost, a) in self.kept.remove(0) {
            let z = &mut self.zones[n];
            // A strict zone only gives back the whole cost.
            let count = match z.model {
                Zm::Strict(_) if keep < 10 => 0,
                Zm::Strict(_) => cost,
                Zm::Estimate(_) => cost * keep / 10,
            };
            z.table.settle(&a, count);
            if count != cost {
                z.model.give_back(client as u64, at, cost, count);
            }
        }
    }
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

fn zone() -> impl Strategy<Value = (u64, bool, u32, u64)> {
    (
        prop_oneof![Just(1_000u64), Just(2_000u64), 1_000u64..6_000],
        any::<bool>(),
        1u32..12,
        prop_oneof![2 => Just(0u64), 3 => 0u64..6_000],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_models(
        zs in proptest::collection::vec(zone(), 1..4),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let zones: Vec<Zone> = zs.iter().map(|&(w, strict, _, _)| {
            let table = table(w, strict);
            let keys = clients(&table);
            let model = if strict { Zm::Strict(StrictLog::new(w)) } else {
                Zm::Estimate(Model::new(Window::from_ms(w).unwrap()))
            };
            Zone { table, model, w, keys }
        }).collect();
        let lims = zs.iter().map(|&(_, _, limit, delay_ms)| Lim { limit, delay_ms }).collect();
        if std::env::var("ENGINE_TRACE").is_ok() {
            eprintln!("CASE {zs:?}");
        }
        let mut run = Run { zones, lims, held: vec![], kept: vec![], now: T0 };
        for op in ops {
            match op {
                Op::Request { dt, client, cost, dry_run } => {
                    // A step back stays in every zone's newest window (or
                    // sub-window): the tables keep one newest window per
                    // zone, the models one per key.
                    let next = run.now.saturating_add_signed(dt).max(run.floor());
                    run.wake_until(next)?;
                    run.now = next;
                    let costs: Vec<u32> = run.lims.iter().zip(cost)
                        .map(|(l, c)| 1 + c % l.limit)
                        .collect();
                    run.request(client, &costs, dry_run, None)?;
                }
                Op::Settle { keep } => run.settle(keep),
            }
        }
    }
}
