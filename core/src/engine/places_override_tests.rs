//! An override of a client's places (`{"in_flight": N}`): it replaces the
//! `in_flight=` value of a line that has one, whatever the value reads,
//! and leaves the line's rate as configured; 0 admits none (rejected for
//! its places, never "invalid"); a line without `in_flight=` is not given
//! places by it, and a `limit` override does not change the places.

use super::range_tests::{leaked_overrides, leaked_table};
use super::*;
use crate::overrides::Entry;
use crate::overrides::{Action, Overrides};
use crate::shm::{Owner, Place, Places};
use crate::table::{Answer, FailPolicy, Table};
use crate::testing::Region;
use crate::Admission;

const T0: u64 = 1_767_225_600_000;

fn leaked_places() -> &'static Places<'static> {
    let buf = Box::leak(Box::new(Region::new(64 << 10)));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    let p = unsafe { Places::init(buf.ptr(), buf.len()) }.unwrap();
    Box::leak(Box::new(p))
}

/// One zone's runtime state and one line of it.
#[derive(Clone, Copy)]
struct Zone {
    table: &'static Table<'static>,
    overrides: &'static Overrides<'static>,
    places: &'static Places<'static>,
    owner: Owner,
    line: Line,
    fail: FailPolicy,
}

fn zone(line: Line, fail: FailPolicy) -> Zone {
    let places = leaked_places();
    Zone {
        table: leaked_table(),
        overrides: leaked_overrides(),
        places,
        owner: places.start(4242, |_| true).unwrap(),
        line,
        fail,
    }
}

/// A request of `client` on the zone's line: `limit=100`, its
/// `in_flight=` value as `in_flight` reads.
struct Host {
    z: Zone,
    client: &'static [u8],
    in_flight: LimitRead,
    /// The line's value was read.
    read_in_flight: bool,
    records: Vec<Answer>,
    took: Vec<Place>,
    invalid: Vec<Invalid>,
}

impl Request<'static> for Host {
    fn limits(&self) -> usize {
        1
    }
    fn conf(&self, _n: usize) -> Option<LimitConf<'static>> {
        Some(LimitConf {
            table: self.z.table,
            overrides: Some(self.z.overrides),
            fail: self.z.fail,
            delay_ms: 0,
            ban_ms: 0,
            line: self.z.line,
            outage: Default::default(),
        })
    }
    fn key(&mut self, _n: usize) -> Result<Key, HostError> {
        let rate = self.z.line != Line::InFlight;
        Ok(Key::Client {
            hash: self.z.table.hash_key(self.client),
            limit: LimitRead::Set(if rate { 100 } else { 0 }),
        })
    }
    fn cost(&mut self, _n: usize) -> Result<Cost, HostError> {
        Ok(Cost::Count(1))
    }
    fn invalid(&mut self, _n: usize, what: Invalid) {
        self.invalid.push(what);
    }
    fn record(&mut self, _n: usize, _limit: u32, d: &Answer, _now: u64) {
        self.records.push(*d);
    }
    fn skipped(&mut self, _n: usize, _why: Skip) {}
    fn admissions(&self, mut f: impl FnMut(&'static Table<'static>, &Admission)) {
        for a in self.records.iter().filter_map(|d| d.admission.as_ref()) {
            f(self.z.table, a);
        }
    }
    fn fresh_now(&mut self) -> u64 {
        T0
    }
    fn in_flight(&mut self, _n: usize) -> Result<LimitRead, HostError> {
        self.read_in_flight = true;
        Ok(self.in_flight)
    }
    fn in_flight_places(&self, _n: usize) -> Option<&'static Places<'static>> {
        (self.z.line != Line::Rate).then_some(self.z.places)
    }
    fn owner(&mut self, _n: usize) -> Option<Owner> {
        Some(self.z.owner)
    }
    fn took(&mut self, _n: usize, p: Place, _limit: u32) {
        self.took.push(p);
    }
    fn places(&self, mut f: impl FnMut(&'static Places<'static>, Place)) {
        for &p in &self.took {
            f(self.z.places, p);
        }
    }
}

/// Decides a request of `client`; an admitted one keeps its places (in
/// flight until the caller gives them back).
fn send(z: Zone, client: &'static [u8], in_flight: LimitRead) -> (Verdict, Host) {
    let mut h = Host {
        z,
        client,
        in_flight,
        read_in_flight: false,
        records: vec![],
        took: vec![],
        invalid: vec![],
    };
    let ask = Ask {
        now_ms: T0,
        shard: 0,
        dry_run: false,
        holdable: false,
        woken: false,
    };
    (decide(&mut h, &ask).unwrap(), h)
}

fn set(z: Zone, client: &[u8], action: Action) {
    let fp = z.table.hash_key(client).fingerprint();
    let e = Entry {
        fp,
        action,
        expires_ms: 0,
    };
    z.overrides.set(e, T0).unwrap();
}

fn held(z: Zone, client: &[u8]) -> u32 {
    z.places.held(z.table.hash_key(client).0)
}

fn counted(z: Zone, client: &[u8]) -> u32 {
    z.table.peek(z.table.hash_key(client), T0).current
}

/// A rejection for the client's places, as the in-flight limit `limit`
/// with `held` in flight.
fn refused_for_places(v: &Verdict, limit: u32, held: u32) {
    let Verdict::Reject(rej) = v else {
        panic!("not rejected: {v:?}");
    };
    assert!(rej.in_flight, "{rej:?}");
    assert!(
        !rej.invalid && !rej.overridden && rej.banned.is_none(),
        "{rej:?}"
    );
    assert_eq!((rej.limit, rej.decision.estimate), (limit, held));
    assert_eq!(rej.retry_after_s, 1);
}

#[test]
fn an_override_of_places_replaces_in_flight_and_leaves_the_rate() {
    let z = zone(Line::RateInFlight, FailPolicy::Open);
    set(z, b"alice", Action::InFlight(1));
    let (v, first) = send(z, b"alice", LimitRead::Set(3));
    assert_eq!(v, Verdict::Admit);
    assert!(!first.read_in_flight, "the override replaces the value");
    assert_eq!(held(z, b"alice"), 1);
    let (v, _) = send(z, b"alice", LimitRead::Set(3));
    refused_for_places(&v, 1, 1);
    // The refused request is counted by no limit: its rate's admission
    // was given back.
    assert_eq!(counted(z, b"alice"), 1);
    // Another client keeps the line's 3.
    let others: Vec<_> = (0..4).map(|_| send(z, b"bob", LimitRead::Set(3))).collect();
    let admitted = others.iter().filter(|(v, _)| *v == Verdict::Admit).count();
    assert_eq!((admitted, held(z, b"bob")), (3, 3));
    refused_for_places(&others[3].0, 3, 3);
    // Removed: alice has the line's 3 again (1 held, 2 more).
    z.overrides
        .remove(z.table.hash_key(b"alice").fingerprint(), T0);
    assert_eq!(send(z, b"alice", LimitRead::Set(3)).0, Verdict::Admit);
    assert_eq!(send(z, b"alice", LimitRead::Set(3)).0, Verdict::Admit);
    refused_for_places(&send(z, b"alice", LimitRead::Set(3)).0, 3, 3);
    // Given back when they end.
    for p in first.took {
        z.places.give(p);
    }
    assert_eq!(held(z, b"alice"), 2);
}

#[test]
fn zero_places_admit_none_whatever_the_value_reads() {
    for line in [Line::RateInFlight, Line::InFlight] {
        let z = zone(line, FailPolicy::Closed);
        set(z, b"carol", Action::InFlight(0));
        for value in [LimitRead::Set(3), LimitRead::Empty, LimitRead::Invalid] {
            let (v, h) = send(z, b"carol", value);
            refused_for_places(&v, 0, 0);
            assert!(h.invalid.is_empty(), "{line:?} {value:?}: never invalid");
        }
        assert_eq!((held(z, b"carol"), counted(z, b"carol")), (0, 0));
        // A larger override on an empty value: places, no longer none.
        set(z, b"carol", Action::InFlight(2));
        assert_eq!(send(z, b"carol", LimitRead::Empty).0, Verdict::Admit);
        assert_eq!(held(z, b"carol"), 1);
    }
}

#[test]
fn a_line_without_in_flight_is_given_no_places() {
    let z = zone(Line::Rate, FailPolicy::Open);
    set(z, b"dave", Action::InFlight(0));
    for _ in 0..5 {
        let (v, h) = send(z, b"dave", LimitRead::Empty);
        assert_eq!(v, Verdict::Admit);
        assert!(h.took.is_empty() && !h.read_in_flight);
    }
    // Its rate is the line's 100, counted as usual.
    assert_eq!(counted(z, b"dave"), 5);
}

#[test]
fn a_limit_override_leaves_the_places_and_exempt_takes_none() {
    let z = zone(Line::RateInFlight, FailPolicy::Open);
    set(z, b"erin", Action::Limit(1_000));
    let vs: Vec<_> = (0..3)
        .map(|_| send(z, b"erin", LimitRead::Set(2)).0)
        .collect();
    assert_eq!(vs[..2], [Verdict::Admit, Verdict::Admit]);
    refused_for_places(&vs[2], 2, 2);
    set(z, b"erin", Action::Exempt);
    let (v, h) = send(z, b"erin", LimitRead::Set(2));
    assert_eq!(v, Verdict::Exempt);
    assert!(h.took.is_empty());
    set(z, b"erin", Action::Block);
    let Verdict::Reject(rej) = send(z, b"erin", LimitRead::Set(2)).0 else {
        panic!("a block rejects");
    };
    assert!(rej.overridden && !rej.in_flight);
}
