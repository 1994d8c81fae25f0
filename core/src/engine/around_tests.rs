//! What comes around the limits ([`super::around`]), property-tested
//! against a model of the group and the limit: a location with a shed
//! group (`max=`, critical requests) and a rate limit, requests in and out
//! of a dry run, some woken from a hold, and ends in any order. The group
//! sheds only outside a dry run and only when full; a shed request is
//! counted by no limit; a request that does not go on gives its place
//! back; one that goes on keeps it until it ends; a woken request has its
//! hold ended once, as its verdict says.

use proptest::prelude::*;

use super::range_tests::leaked_table;
use super::*;
use crate::rule::shed::{Priority, ShedLimits};
use crate::shm::shed::ShedGroup;
use crate::shm::{Owner, Place};
use crate::table::{Answer, FailPolicy, Table};
use crate::testing::Region;
use crate::Admission;

const T0: u64 = 1_767_225_600_000;

fn leaked_group(max: u32) -> &'static ShedGroup<'static> {
    let buf = Box::leak(Box::new(Region::new(ShedGroup::bytes_for(max))));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    let g = unsafe { ShedGroup::init(buf.ptr(), buf.len(), max) }.unwrap();
    Box::leak(Box::new(g))
}

/// One request of the location: the group, the rate (`limit`, one
/// client), what the engine had the host do.
struct Host {
    group: &'static ShedGroup<'static>,
    owner: Owner,
    max: u32,
    table: &'static Table<'static>,
    limit: u32,
    records: Vec<Answer>,
    shed_place: Option<Place>,
    gave_back: u32,
    would_shed: Vec<u32>,
    unheld: Vec<Woken>,
}

impl Request<'static> for Host {
    fn limits(&self) -> usize {
        1
    }
    fn conf(&self, _n: usize) -> Option<LimitConf<'static>> {
        Some(LimitConf {
            table: self.table,
            overrides: None,
            fail: FailPolicy::Open,
            delay_ms: 0,
            ban_ms: 0,
            line: Line::Rate,
        })
    }
    fn key(&mut self, _n: usize) -> Result<Key, HostError> {
        Ok(Key::Client {
            hash: self.table.hash_key(b"c"),
            limit: LimitRead::Set(self.limit),
        })
    }
    fn cost(&mut self, _n: usize) -> Result<Cost, HostError> {
        Ok(Cost::Count(1))
    }
    fn invalid(&mut self, _n: usize, _what: Invalid) {}
    fn record(&mut self, _n: usize, _limit: u32, d: &Answer, _now: u64) {
        self.records.push(*d);
    }
    fn skipped(&mut self, _n: usize, _why: Skip) {}
    fn admissions(&self, mut f: impl FnMut(&'static Table<'static>, &Admission)) {
        for a in self.records.iter().filter_map(|d| d.admission.as_ref()) {
            f(self.table, a);
        }
    }
    fn fresh_now(&mut self) -> u64 {
        T0
    }
    fn shed(&mut self) -> Option<ShedAsk<'static>> {
        Some(ShedAsk {
            group: self.group,
            owner: Some(self.owner),
            limits: ShedLimits::new(self.max, 0),
            priority: Priority::Critical,
        })
    }
    fn took_shed(&mut self, p: Place) {
        assert!(self.shed_place.replace(p).is_none(), "one place");
    }
    fn give_back_shed(&mut self) {
        self.gave_back += 1;
        if let Some(p) = self.shed_place.take() {
            self.group.places.give(p);
        }
    }
    fn would_shed(&mut self, in_flight: u32) {
        self.would_shed.push(in_flight);
    }
    fn unhold(&mut self, how: Woken) {
        self.unheld.push(how);
    }
}

/// One step: a request (dry run, woken from a hold) or the end of the
/// `pick`th request in flight.
#[derive(Clone, Debug)]
enum Op {
    Request { dry_run: bool, woken: bool },
    End { pick: prop::sample::Index },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop::bool::weighted(0.3), prop::bool::weighted(0.3))
            .prop_map(|(dry_run, woken)| Op::Request { dry_run, woken }),
        2 => any::<prop::sample::Index>().prop_map(|pick| Op::End { pick }),
    ]
}

/// The model: requests in flight (their places, if they took one) and the
/// rate's count of the client.
struct Model {
    flying: Vec<Option<Place>>,
    counted: u32,
}

fn step(
    (group, owner, table): (&'static ShedGroup<'static>, Owner, &'static Table<'static>),
    (max, limit): (u32, u32),
    m: &mut Model,
    op: Op,
) -> Result<(), TestCaseError> {
    let (dry_run, woken) = match op {
        Op::Request { dry_run, woken } => (dry_run, woken),
        Op::End { pick } => {
            if !m.flying.is_empty() {
                if let Some(p) = m.flying.remove(pick.index(m.flying.len())) {
                    group.places.give(p);
                }
            }
            return Ok(());
        }
    };
    let mut h = Host {
        group,
        owner,
        max,
        table,
        limit,
        records: vec![],
        shed_place: None,
        gave_back: 0,
        would_shed: vec![],
        unheld: vec![],
    };
    let ask = Ask {
        now_ms: T0,
        shard: 0,
        dry_run,
        holdable: false,
        woken,
    };
    let placed = m.flying.iter().filter(|p| p.is_some()).count() as u32;
    prop_assert_eq!(group.in_flight(), placed);
    let full = placed >= max;
    let v = decide(&mut h, &ask).unwrap();
    let fits = m.counted < limit;
    let how = match v {
        Verdict::Shed(s) => {
            prop_assert!(full && !dry_run, "shed: full {}, dry run {}", full, dry_run);
            prop_assert_eq!(s.in_flight, placed);
            prop_assert!(h.records.is_empty(), "a shed request is judged by no limit");
            Some(Woken::Shed)
        }
        _ if full && !dry_run => return Err(TestCaseError::fail(format!("not shed: {v:?}"))),
        Verdict::Admit => {
            prop_assert!(fits);
            m.counted += 1;
            Some(Woken::Admitted)
        }
        Verdict::Reject(rej) => {
            prop_assert!(!fits);
            prop_assert_eq!(rej.dry_run, dry_run);
            Some(Woken::Rejected)
        }
        other => return Err(TestCaseError::fail(format!("verdict {other:?}"))),
    };
    // A dry run's full group would have shed it: logged, it goes on.
    let want_would: Vec<u32> = if full && dry_run {
        vec![placed]
    } else {
        vec![]
    };
    prop_assert_eq!(&h.would_shed, &want_would);
    let goes_on = matches!(v, Verdict::Admit) || (matches!(v, Verdict::Reject(_)) && dry_run);
    if goes_on {
        prop_assert_eq!(h.gave_back, 0);
        prop_assert_eq!(h.shed_place.is_some(), !full, "a place when there was room");
        m.flying.push(h.shed_place);
    } else {
        prop_assert!(
            h.shed_place.is_none(),
            "a request that does not go on keeps none"
        );
    }
    let ended: Vec<Woken> = if woken {
        how.into_iter().collect()
    } else {
        vec![]
    };
    prop_assert_eq!(&h.unheld, &ended, "the hold ended once, as decided");
    prop_assert_eq!(
        group.in_flight(),
        m.flying.iter().filter(|p| p.is_some()).count() as u32
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_group_the_limit_and_the_hold_compose(
        max in 1u32..4,
        limit in 0u32..6,
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let group = leaked_group(max);
        let owner = group.places.start(4242, |_| true).unwrap();
        let table = leaked_table();
        let mut m = Model { flying: vec![], counted: 0 };
        for op in ops {
            step((group, owner, table), (max, limit), &mut m, op)?;
        }
    }
}
