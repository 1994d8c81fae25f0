//! The tests' side of the engine: the zones' shared memory (leaked
//! regions), each zone's state and the host ([`Req`]) that gives the
//! engine what a request reads, as the glue would.

use super::Zm;
use crate::engine::outage::Outage;
use crate::engine::{
    Cost, Hold, HostError, Invalid, Key, LimitConf, LimitRead, Line, Request, Shared, Skip, Woken,
};
use crate::overrides::Overrides;
use crate::rule::mode::Mode;
use crate::rule::window::Window;
use crate::shm::{Owner, Place, Places, Turns};
use crate::table::{Answer, FailPolicy, KeyHash, Table};
use crate::testing::Region;
use crate::Admission;

/// A table over a leaked region (a test's tables live for the process).
pub(super) fn table(window_ms: u64, strict: bool) -> Table<'static> {
    let bytes = Table::HEADER_BYTES + 1024 * crate::SLOT_BYTES;
    let buf = Box::leak(Box::new(Region::new(bytes)));
    let mode = if strict { Mode::Strict } else { Mode::Estimate };
    let w =
        super::calendar::window(window_ms).unwrap_or_else(|| Window::from_ms(window_ms).unwrap());
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Table::init_mode(buf.ptr(), buf.len(), w, [7, 9], mode) }.unwrap()
}

/// An override table over a leaked region.
pub(super) fn overrides() -> Overrides<'static> {
    let buf = Box::leak(Box::new(Region::new(Overrides::bytes_for(64))));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Overrides::init(buf.ptr(), buf.len(), 64) }.unwrap()
}

/// Queue turns over a leaked region.
pub(super) fn turns() -> Turns<'static> {
    let buf = Box::leak(Box::new(Region::new(Turns::bytes_for(1 << 20))));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Turns::init(buf.ptr(), buf.len()) }.unwrap()
}

/// In-flight places over a leaked region.
pub(super) fn places() -> Places<'static> {
    let buf = Box::leak(Box::new(Region::new(64 << 10)));
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    unsafe { Places::init(buf.ptr(), buf.len()) }.unwrap()
}

/// The pid of worker `shard`'s `gen`th process.
pub(super) fn pid(shard: usize, gen: u32) -> u32 {
    1000 + gen * 2 + shard as u32
}

/// One zone: its table, its model, its clients' hashes, its runtime state
/// (overrides, turns, places) and policies.
pub(super) struct Zone {
    pub(super) table: Table<'static>,
    pub(super) model: Zm,
    pub(super) w: u64,
    pub(super) keys: Vec<KeyHash>,
    pub(super) ovr: Overrides<'static>,
    pub(super) turns: Turns<'static>,
    pub(super) invalid: crate::shm::Episodes,
    pub(super) fail: FailPolicy,
    pub(super) ban_ms: u64,
    /// `in_flight=` (None: the line has none).
    pub(super) in_flight: Option<u32>,
    /// The line has `limit=` (false: `in_flight=` alone).
    pub(super) rate: bool,
    pub(super) places: Places<'static>,
    /// `redis_outage=` in force.
    pub(super) outage: Outage,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Lim {
    pub(super) limit: u32,
    pub(super) delay_ms: u64,
}

/// The test's glue: what the request reads, as given.
pub(super) struct Req<'a> {
    pub(super) zones: &'a [Zone],
    pub(super) lims: &'a [Lim],
    pub(super) client: usize,
    pub(super) values: &'a [LimitRead],
    pub(super) costs: &'a [Cost],
    pub(super) in_flights: &'a [LimitRead],
    /// Each zone's owner per worker.
    pub(super) owners: &'a [[Owner; 2]],
    pub(super) shard: usize,
    pub(super) took: Vec<(usize, Place)>,
    pub(super) records: Vec<(usize, Answer)>,
    pub(super) since: Option<u64>,
    pub(super) holds: u32,
    pub(super) invalid: Vec<(usize, Invalid)>,
    /// How the engine had the host end the request's hold, each time.
    pub(super) unheld: Vec<Woken>,
}

impl<'a> Request<'a> for Req<'a> {
    fn limits(&self) -> usize {
        self.lims.len()
    }
    fn conf(&self, n: usize) -> Option<LimitConf<'a>> {
        let z = &self.zones[n];
        Some(LimitConf {
            table: &z.table,
            overrides: Some(&z.ovr),
            fail: z.fail,
            delay_ms: self.lims[n].delay_ms,
            ban_ms: z.ban_ms,
            line: match (z.in_flight, z.rate) {
                (None, _) => Line::Rate,
                (Some(_), true) => Line::RateInFlight,
                (Some(_), false) => Line::InFlight,
            },
            outage: z.outage,
        })
    }
    fn key(&mut self, n: usize) -> Result<Key, HostError> {
        let z = &self.zones[n];
        Ok(Key::Client {
            hash: z.keys[self.client],
            // A line without a rate reads no limit (the glue's 0).
            limit: if z.rate {
                self.values[n]
            } else {
                LimitRead::Set(0)
            },
        })
    }
    fn in_flight(&mut self, n: usize) -> Result<LimitRead, HostError> {
        assert!(self.zones[n].in_flight.is_some(), "asked of a line without");
        Ok(self.in_flights[n])
    }
    fn in_flight_places(&self, n: usize) -> Option<&'a Places<'a>> {
        let z = &self.zones[n];
        z.in_flight.map(|_| &z.places)
    }
    fn owner(&mut self, n: usize) -> Option<Owner> {
        Some(self.owners[n][self.shard])
    }
    fn took(&mut self, n: usize, p: Place, _limit: u32) {
        self.took.push((n, p));
    }
    fn places(&self, mut f: impl FnMut(&'a Places<'a>, Place)) {
        for &(n, p) in &self.took {
            f(&self.zones[n].places, p);
        }
    }
    fn cost(&mut self, n: usize) -> Result<Cost, HostError> {
        Ok(self.costs[n])
    }
    fn invalid(&mut self, n: usize, what: Invalid) {
        self.invalid.push((n, what));
    }
    fn record(&mut self, n: usize, _limit: u32, d: &Answer, _now: u64) {
        self.records.push((n, *d));
    }
    fn skipped(&mut self, _n: usize, _why: Skip) {}
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
    fn shared(&self, n: usize) -> Shared<'a> {
        let z = &self.zones[n];
        Shared {
            invalid: Some(&z.invalid),
            turns: Some(&z.turns),
        }
    }
    fn held_since(&self) -> Option<u64> {
        self.since
    }
    fn hold(&mut self, _h: &Hold, _now_ms: u64) -> bool {
        self.holds += 1;
        true
    }
    fn unhold(&mut self, how: Woken) {
        self.unheld.push(how);
    }
}
