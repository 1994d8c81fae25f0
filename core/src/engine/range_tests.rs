//! The engine's override lookup with range overrides (`cidr=`): a client
//! without an override of its own gets the most specific range holding
//! its address; its own override wins; a host that gives no address (a
//! zone not keyed by addresses) never gets a range's.

use super::*;
use crate::overrides::range::{Addr, Range};
use crate::overrides::Entry;
use crate::overrides::{Action, Overrides};
use crate::rule::mode::Mode;
use crate::rule::window::Window;
use crate::table::{Answer, FailPolicy, Table};
use crate::testing::Region;
use crate::Admission;

const T0: u64 = 1_767_225_600_000;

/// A 60 s estimate table over a leaked region.
pub(super) fn leaked_table() -> &'static Table<'static> {
    let bytes = Table::HEADER_BYTES + 1024 * crate::SLOT_BYTES;
    let buf = Box::leak(Box::new(Region::new(bytes)));
    let w = Window::from_ms(60_000).unwrap();
    // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
    let t = unsafe { Table::init_mode(buf.ptr(), buf.len(), w, [3, 5], Mode::Estimate) }.unwrap();
    Box::leak(Box::new(t))
}

/// An override table of 64 entries over a leaked region.
pub(super) fn leaked_overrides() -> &'static Overrides<'static> {
    let buf = Box::leak(Box::new(Region::new(Overrides::bytes_for(64))));
    // SAFETY: as above.
    let o = unsafe { Overrides::init(buf.ptr(), buf.len(), 64) }.unwrap();
    Box::leak(Box::new(o))
}

/// One limit of 100 on a `$binary_remote_addr`-like key; `addr` says
/// whether the host gives the engine the address.
struct Host {
    table: &'static Table<'static>,
    overrides: &'static Overrides<'static>,
    key: Vec<u8>,
    addr: bool,
    asked_addr: u32,
}

impl Request<'static> for Host {
    fn limits(&self) -> usize {
        1
    }
    fn conf(&self, _n: usize) -> Option<LimitConf<'static>> {
        Some(LimitConf {
            table: self.table,
            overrides: Some(self.overrides),
            fail: FailPolicy::Open,
            delay_ms: 0,
            ban_ms: 0,
            line: crate::engine::Line::Rate,
        })
    }
    fn key(&mut self, _n: usize) -> Result<Key, HostError> {
        Ok(Key::Client {
            hash: self.table.hash_key(&self.key),
            limit: LimitRead::Set(100),
        })
    }
    fn cost(&mut self, _n: usize) -> Result<Cost, HostError> {
        Ok(Cost::Count(1))
    }
    fn invalid(&mut self, _n: usize, _what: Invalid) {}
    fn record(&mut self, _n: usize, _limit: u32, _d: &Answer, _now: u64) {}
    fn skipped(&mut self, _n: usize, _why: Skip) {}
    fn admissions(&self, _f: impl FnMut(&'static Table<'static>, &Admission)) {}
    fn fresh_now(&mut self) -> u64 {
        T0
    }
    fn key_addr(&mut self, _n: usize) -> Option<Addr> {
        self.asked_addr += 1;
        self.addr.then(|| Addr::of_key(&self.key)).flatten()
    }
}

fn decide_for(h: &mut Host) -> Verdict {
    let ask = Ask {
        now_ms: T0,
        shard: 0,
        dry_run: false,
        holdable: false,
        woken: false,
    };
    decide(h, &ask).unwrap()
}

fn entry(id: u64, action: Action) -> Entry {
    Entry {
        fp: id,
        action,
        expires_ms: 0,
    }
}

#[test]
fn the_most_specific_override_decides() {
    let (table, overrides) = (leaked_table(), leaked_overrides());
    let host = |key: [u8; 4], addr| Host {
        table,
        overrides,
        key: key.to_vec(),
        addr,
        asked_addr: 0,
    };
    let mut a = host([127, 0, 0, 5], true);
    // No override at all: the address is never asked for.
    assert!(matches!(decide_for(&mut a), Verdict::Admit));
    // Some override, no range: not asked either.
    overrides.set(entry(0x42, Action::Block), T0).unwrap();
    assert!(matches!(decide_for(&mut a), Verdict::Admit));
    assert_eq!(a.asked_addr, 0);
    let hash = |k: &[u8]| table.hash_key(k);
    let addr = Addr::of_key(&[127, 0, 0, 5]).unwrap();
    let r24 = Range::new(addr, 24).id(hash);
    overrides.set(entry(r24, Action::Block), T0).unwrap();
    assert!(matches!(decide_for(&mut a), Verdict::Reject(_)));
    assert!(a.asked_addr > 0);
    // Outside the /24: admitted.
    assert!(matches!(
        decide_for(&mut host([127, 0, 1, 5], true)),
        Verdict::Admit
    ));
    // A zone whose host gives no address: the range does not apply.
    assert!(matches!(
        decide_for(&mut host([127, 0, 0, 5], false)),
        Verdict::Admit
    ));
    // A /16 exempts, the /24 inside it still blocks.
    let r16 = Range::new(addr, 16).id(hash);
    overrides.set(entry(r16, Action::Exempt), T0).unwrap();
    assert!(matches!(
        decide_for(&mut host([127, 0, 0, 9], true)),
        Verdict::Reject(_)
    ));
    assert!(matches!(
        decide_for(&mut host([127, 0, 7, 9], true)),
        Verdict::Exempt
    ));
    // The address's own override wins over its /24.
    let own = table.hash_key(&[127, 0, 0, 5]).fingerprint();
    overrides.set(entry(own, Action::Limit(50)), T0).unwrap();
    assert!(matches!(decide_for(&mut a), Verdict::Admit));
    // Removing the /24 lifts the block of its other addresses.
    overrides.remove(r24, T0);
    assert!(matches!(
        decide_for(&mut host([127, 0, 0, 9], true)),
        Verdict::Exempt
    ));
}
